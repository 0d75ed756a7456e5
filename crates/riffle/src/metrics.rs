//! The job's metrics registry: records in and out per operator, busy / back-pressured / idle time
//! per task, bad and late record counts.
//!
//! Tasks update plain atomic counters (relaxed, once per batch); readers take a
//! [`MetricsSnapshot`] and compare two of them to get rates and per-second time ratios, as Flink's
//! `busyTimeMsPerSecond` / `backPressuredTimeMsPerSecond` / `idleTimeMsPerSecond`.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::record::{MIN_WATERMARK, Timestamp};

/// Counters of one parallel instance of an operator.
#[derive(Debug)]
pub struct OperatorMetrics {
    /// Operator name.
    pub name: String,
    /// Index of the subtask.
    pub subtask: usize,
    records_in: AtomicU64,
    records_out: AtomicU64,
    bad_records: AtomicU64,
    late_records_dropped: AtomicU64,
    late_records_side_output: AtomicU64,
    watermark_outliers: AtomicU64,
    side_output_unconsumed: AtomicU64,
    watermark: AtomicU64,
    /// The newest event time a source read ([`MIN_WATERMARK`] before the first), and the
    /// processing time it was read at.
    newest_event_time: AtomicI64,
    newest_event_read_at: AtomicI64,
    state_entries: AtomicU64,
    state_bytes: AtomicU64,
    /// Records behind the end of each split (Kafka consumer lag per partition), sources only.
    split_lag: std::sync::Mutex<std::collections::BTreeMap<String, i64>>,
    /// Latency markers of the last [`LATENCY_WINDOW`]: when each arrived, how long it took (µs).
    latencies: std::sync::Mutex<std::collections::VecDeque<(Instant, u64)>>,
}

/// How long an operator remembers the latency markers it saw.
pub const LATENCY_WINDOW: Duration = Duration::from_secs(60);

impl OperatorMetrics {
    pub(crate) fn new(name: &str, subtask: usize) -> Self {
        OperatorMetrics {
            name: name.to_string(),
            subtask,
            records_in: AtomicU64::new(0),
            records_out: AtomicU64::new(0),
            bad_records: AtomicU64::new(0),
            late_records_dropped: AtomicU64::new(0),
            late_records_side_output: AtomicU64::new(0),
            watermark_outliers: AtomicU64::new(0),
            side_output_unconsumed: AtomicU64::new(0),
            watermark: AtomicU64::new(MIN_WATERMARK as u64),
            newest_event_time: AtomicI64::new(MIN_WATERMARK),
            newest_event_read_at: AtomicI64::new(MIN_WATERMARK),
            state_entries: AtomicU64::new(0),
            state_bytes: AtomicU64::new(0),
            split_lag: Default::default(),
            latencies: Default::default(),
        }
    }

    /// A latency marker reached the operator `took` after its source sent it.
    pub(crate) fn record_latency(&self, took: Duration) {
        let now = Instant::now();
        let mut latencies = self.latencies.lock().expect("metrics lock");
        while latencies
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > LATENCY_WINDOW)
        {
            latencies.pop_front();
        }
        latencies.push_back((now, took.as_micros() as u64));
    }

    pub(crate) fn add_in(&self, n: usize) {
        self.records_in.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn add_out(&self, n: u64) {
        self.records_out.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts records that could not be decoded (whatever the bad-input policy did with them).
    pub fn add_bad(&self, n: u64) {
        self.bad_records.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts late records that no side output took.
    pub fn add_late_dropped(&self, n: u64) {
        self.late_records_dropped.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts late records sent to the late side output.
    pub fn add_late_side_output(&self, n: u64) {
        self.late_records_side_output
            .fetch_add(n, Ordering::Relaxed);
    }

    /// Counts records whose event time jumped too far ahead of their split's watermark (see
    /// [`WatermarkStrategy::with_max_watermark_jump`](crate::time::WatermarkStrategy::with_max_watermark_jump)).
    pub fn add_watermark_outliers(&self, n: u64) {
        self.watermark_outliers.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts records sent to a side output that nothing in the job consumes (dropped).
    pub fn add_side_output_unconsumed(&self, n: u64) {
        self.side_output_unconsumed.fetch_add(n, Ordering::Relaxed);
    }

    /// Publishes the size of the operator's keyed state (entries and estimated bytes).
    pub fn set_state(&self, entries: u64, bytes: u64) {
        self.state_entries.store(entries, Ordering::Relaxed);
        self.state_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Publishes how many records a source split is behind its end (a partition's consumer lag).
    pub fn set_split_lag(&self, split: &str, lag: i64) {
        let mut lags = self.split_lag.lock().expect("metrics lock");
        match lags.get_mut(split) {
            Some(value) => *value = lag,
            None => {
                lags.insert(split.to_string(), lag);
            }
        }
    }

    pub(crate) fn set_watermark(&self, watermark: Timestamp) {
        self.watermark.store(watermark as u64, Ordering::Relaxed);
    }

    /// A source read a record of `event_time` at processing time `read_at` (its subtask's task
    /// is the only writer): kept when it is the newest so far.
    pub(crate) fn set_newest_event(&self, event_time: Timestamp, read_at: Timestamp) {
        if event_time > self.newest_event_time.load(Ordering::Relaxed) {
            self.newest_event_read_at.store(read_at, Ordering::Relaxed);
            self.newest_event_time.store(event_time, Ordering::Relaxed);
        }
    }

    /// Records that entered the operator so far.
    pub fn records_in(&self) -> u64 {
        self.records_in.load(Ordering::Relaxed)
    }

    /// Records the operator emitted so far.
    pub fn records_out(&self) -> u64 {
        self.records_out.load(Ordering::Relaxed)
    }

    fn snapshot(&self) -> OperatorMetricsSnapshot {
        OperatorMetricsSnapshot {
            name: self.name.clone(),
            subtask: self.subtask,
            records_in: self.records_in(),
            records_out: self.records_out(),
            bad_records: self.bad_records.load(Ordering::Relaxed),
            late_records_dropped: self.late_records_dropped.load(Ordering::Relaxed),
            late_records_side_output: self.late_records_side_output.load(Ordering::Relaxed),
            watermark_outliers: self.watermark_outliers.load(Ordering::Relaxed),
            side_output_unconsumed: self.side_output_unconsumed.load(Ordering::Relaxed),
            watermark: self.watermark.load(Ordering::Relaxed) as i64,
            newest_event: {
                let event_time = self.newest_event_time.load(Ordering::Relaxed);
                (event_time != MIN_WATERMARK).then(|| NewestEvent {
                    event_time,
                    read_at: self.newest_event_read_at.load(Ordering::Relaxed),
                })
            },
            state_entries: self.state_entries.load(Ordering::Relaxed),
            state_bytes: self.state_bytes.load(Ordering::Relaxed),
            split_lag: self.split_lag.lock().expect("metrics lock").clone(),
            latencies_us: {
                let now = Instant::now();
                self.latencies
                    .lock()
                    .expect("metrics lock")
                    .iter()
                    .filter(|(at, _)| now.duration_since(*at) <= LATENCY_WINDOW)
                    .map(|(_, us)| *us)
                    .collect()
            },
        }
    }
}

/// Where a task spends its time, as cumulative nanoseconds since it started.
#[derive(Debug)]
pub struct TaskMetrics {
    /// Task name: the chain of operators it runs.
    pub name: String,
    /// Index of the subtask.
    pub subtask: usize,
    started: Instant,
    idle_ns: AtomicU64,
    backpressured_ns: AtomicU64,
    finished_ns: AtomicU64,
}

impl TaskMetrics {
    pub(crate) fn new(name: &str, subtask: usize) -> Self {
        TaskMetrics {
            name: name.to_string(),
            subtask,
            started: Instant::now(),
            idle_ns: AtomicU64::new(0),
            backpressured_ns: AtomicU64::new(0),
            finished_ns: AtomicU64::new(0),
        }
    }

    /// Adds time spent waiting for input.
    pub(crate) fn add_idle(&self, d: Duration) {
        self.idle_ns
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Adds time spent waiting for a full output channel.
    pub(crate) fn add_backpressured(&self, d: Duration) {
        self.backpressured_ns
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    #[cfg(test)]
    pub(crate) fn snapshot_backpressured_ns(&self) -> u64 {
        self.backpressured_ns.load(Ordering::Relaxed)
    }

    pub(crate) fn mark_finished(&self) {
        let elapsed = self.started.elapsed().as_nanos().max(1) as u64;
        self.finished_ns.store(elapsed, Ordering::Relaxed);
    }

    fn snapshot(&self) -> TaskMetricsSnapshot {
        let finished = self.finished_ns.load(Ordering::Relaxed);
        let elapsed = if finished > 0 {
            finished
        } else {
            self.started.elapsed().as_nanos() as u64
        };
        let idle = self.idle_ns.load(Ordering::Relaxed);
        let backpressured = self.backpressured_ns.load(Ordering::Relaxed);
        TaskMetricsSnapshot {
            name: self.name.clone(),
            subtask: self.subtask,
            running: finished == 0,
            elapsed_ns: elapsed,
            idle_ns: idle.min(elapsed),
            backpressured_ns: backpressured.min(elapsed),
            busy_ns: elapsed.saturating_sub(idle + backpressured),
        }
    }
}

/// All metrics of a job. Shared by the tasks (which write) and the observers (which read).
#[derive(Debug, Default)]
pub struct MetricsRegistry {
    operators: std::sync::Mutex<Vec<Arc<OperatorMetrics>>>,
    tasks: std::sync::Mutex<Vec<Arc<TaskMetrics>>>,
}

impl MetricsRegistry {
    pub(crate) fn operator(&self, name: &str, subtask: usize) -> Arc<OperatorMetrics> {
        let metrics = Arc::new(OperatorMetrics::new(name, subtask));
        self.operators
            .lock()
            .expect("metrics lock")
            .push(metrics.clone());
        metrics
    }

    pub(crate) fn task(&self, name: &str, subtask: usize) -> Arc<TaskMetrics> {
        let metrics = Arc::new(TaskMetrics::new(name, subtask));
        self.tasks
            .lock()
            .expect("metrics lock")
            .push(metrics.clone());
        metrics
    }

    /// Forgets every counter (a restarted job counts again from zero).
    pub(crate) fn reset(&self) {
        self.operators.lock().expect("metrics lock").clear();
        self.tasks.lock().expect("metrics lock").clear();
    }

    /// The current value of every counter.
    pub fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            taken_at: Instant::now(),
            operators: self
                .operators
                .lock()
                .expect("metrics lock")
                .iter()
                .map(|m| m.snapshot())
                .collect(),
            tasks: self
                .tasks
                .lock()
                .expect("metrics lock")
                .iter()
                .map(|m| m.snapshot())
                .collect(),
        }
    }
}

/// Renamed [`OperatorMetricsSnapshot`]: `checkpoint::OperatorSnapshot` is an operator's state.
#[deprecated(since = "0.2.0", note = "renamed `OperatorMetricsSnapshot`")]
pub type OperatorSnapshot = OperatorMetricsSnapshot;

/// Renamed [`TaskMetricsSnapshot`]: `checkpoint::TaskSnapshot` is a task's state.
#[deprecated(since = "0.2.0", note = "renamed `TaskMetricsSnapshot`")]
pub type TaskSnapshot = TaskMetricsSnapshot;

/// Counters of one operator subtask at one instant.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct OperatorMetricsSnapshot {
    /// Operator name.
    pub name: String,
    /// Subtask index.
    pub subtask: usize,
    /// Records received.
    pub records_in: u64,
    /// Records emitted.
    pub records_out: u64,
    /// Records that could not be decoded.
    pub bad_records: u64,
    /// Late records counted and dropped (no side output declared).
    pub late_records_dropped: u64,
    /// Late records sent to the late side output.
    pub late_records_side_output: u64,
    /// Records whose event time jumped too far ahead of their split's watermark (sources):
    /// processed, but kept from moving the watermark until corroborated.
    pub watermark_outliers: u64,
    /// Records sent to a side output that nothing in the job consumes: dropped, and counted here.
    pub side_output_unconsumed: u64,
    /// Current event-time watermark of the operator ([`MIN_WATERMARK`] before the first one).
    pub watermark: Timestamp,
    /// The newest event time the subtask read, with when (sources; `None` elsewhere and before
    /// the first record with an event time).
    pub newest_event: Option<NewestEvent>,
    /// Entries of keyed state (and timers).
    pub state_entries: u64,
    /// Estimated bytes of keyed state.
    pub state_bytes: u64,
    /// Records each split of a source is behind its end (Kafka consumer lag per partition).
    pub split_lag: std::collections::BTreeMap<String, i64>,
    /// How long each latency marker of the last [`LATENCY_WINDOW`] took from its source to this
    /// operator, in microseconds, oldest first (see `EnvConfig::latency_interval`).
    pub latencies_us: Vec<u64>,
}

/// The newest event time a source subtask read (records whose event time jumped too far ahead of
/// the watermark not counted) and the processing time it read it at, both epoch ms: how far event
/// time is from the wall clock where the records come in. A stream whose event time follows the
/// wall clock is read close to it, even long after it stalls; a generator's fixed base or a
/// replay of old data is read far from it.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct NewestEvent {
    /// The event time, epoch ms.
    pub event_time: Timestamp,
    /// When it was read (the job's clock), epoch ms.
    pub read_at: Timestamp,
}

impl NewestEvent {
    /// How far behind the processing time of its reading the event time was, ms (negative:
    /// ahead of it).
    pub fn behind_clock_ms(&self) -> i64 {
        self.read_at.saturating_sub(self.event_time)
    }
}

/// Time accounting of one task at one instant.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct TaskMetricsSnapshot {
    /// Task name (its chain of operators).
    pub name: String,
    /// Subtask index.
    pub subtask: usize,
    /// Whether the task still runs.
    pub running: bool,
    /// Time since the task started (or its whole run time once finished).
    pub elapsed_ns: u64,
    /// Time spent processing.
    pub busy_ns: u64,
    /// Time spent blocked on full output channels.
    pub backpressured_ns: u64,
    /// Time spent waiting for input.
    pub idle_ns: u64,
}

/// The value of every counter of a job at one instant.
#[derive(Clone, Debug)]
pub struct MetricsSnapshot {
    /// When the snapshot was taken.
    pub taken_at: Instant,
    /// One entry per operator subtask.
    pub operators: Vec<OperatorMetricsSnapshot>,
    /// One entry per task.
    pub tasks: Vec<TaskMetricsSnapshot>,
}

impl MetricsSnapshot {
    /// Sums the counters of all subtasks of the operator called `name`.
    pub fn operator_total(&self, name: &str) -> Option<OperatorMetricsSnapshot> {
        let mut parts = self.operators.iter().filter(|o| o.name == name);
        let mut total = parts.next()?.clone();
        total.subtask = 0;
        for part in parts {
            total.records_in += part.records_in;
            total.records_out += part.records_out;
            total.bad_records += part.bad_records;
            total.late_records_dropped += part.late_records_dropped;
            total.late_records_side_output += part.late_records_side_output;
            total.watermark_outliers += part.watermark_outliers;
            total.side_output_unconsumed += part.side_output_unconsumed;
            total.watermark = total.watermark.min(part.watermark);
            total.newest_event = total
                .newest_event
                .into_iter()
                .chain(part.newest_event)
                .max_by_key(|n| n.event_time);
            total.state_entries += part.state_entries;
            total.state_bytes += part.state_bytes;
            total.split_lag.extend(part.split_lag.clone());
            total.latencies_us.extend_from_slice(&part.latencies_us);
        }
        Some(total)
    }

    /// Operator names in the order the operators were created, without repetition.
    pub fn operator_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for op in &self.operators {
            if !names.contains(&op.name) {
                names.push(op.name.clone());
            }
        }
        names
    }

    /// Per-operator rates and task time ratios between `earlier` and this snapshot.
    pub fn rates_since(&self, earlier: &MetricsSnapshot) -> Vec<OperatorRates> {
        let seconds = self
            .taken_at
            .duration_since(earlier.taken_at)
            .as_secs_f64()
            .max(1e-9);
        self.operator_names()
            .into_iter()
            .map(|name| {
                let now = self.operator_total(&name).expect("name from this snapshot");
                let before = earlier.operator_total(&name);
                let (in_before, out_before) = before
                    .map(|b| (b.records_in, b.records_out))
                    .unwrap_or((0, 0));
                OperatorRates {
                    task: self
                        .tasks
                        .iter()
                        .find(|t| chain_contains(&t.name, &name))
                        .map(|t| t.name.clone())
                        .unwrap_or_default(),
                    records_in_per_sec: (now.records_in - in_before.min(now.records_in)) as f64
                        / seconds,
                    records_out_per_sec: (now.records_out - out_before.min(now.records_out)) as f64
                        / seconds,
                    time: self.task_time_of(&name, earlier),
                    name,
                }
            })
            .collect()
    }

    /// Busy / back-pressured / idle milliseconds per second of the tasks that run operator `name`
    /// (tasks are matched by their chain name containing the operator), averaged over subtasks.
    fn task_time_of(&self, operator: &str, earlier: &MetricsSnapshot) -> TimeRatios {
        let mut sum = TimeRatios::default();
        let mut count = 0.0;
        for task in self
            .tasks
            .iter()
            .filter(|t| chain_contains(&t.name, operator))
        {
            let Some(before) = earlier
                .tasks
                .iter()
                .find(|b| b.name == task.name && b.subtask == task.subtask)
            else {
                continue;
            };
            let elapsed = task.elapsed_ns.saturating_sub(before.elapsed_ns) as f64;
            if elapsed <= 0.0 {
                continue;
            }
            let per_sec = |now: u64, then: u64| now.saturating_sub(then) as f64 / elapsed * 1000.0;
            sum.busy_ms_per_sec += per_sec(task.busy_ns, before.busy_ns);
            sum.backpressured_ms_per_sec += per_sec(task.backpressured_ns, before.backpressured_ns);
            sum.idle_ms_per_sec += per_sec(task.idle_ns, before.idle_ns);
            count += 1.0;
        }
        if count > 0.0 {
            sum.busy_ms_per_sec /= count;
            sum.backpressured_ms_per_sec /= count;
            sum.idle_ms_per_sec /= count;
        }
        sum
    }
}

/// Whether a task's chain name (`a -> b -> c`) contains the operator `name`.
fn chain_contains(chain: &str, name: &str) -> bool {
    chain.split(" -> ").any(|part| part == name)
}

/// Milliseconds per second a task spends busy, back-pressured and idle (they add up to ~1000).
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct TimeRatios {
    /// Processing records.
    pub busy_ms_per_sec: f64,
    /// Blocked on a full output channel: the consumer downstream is slower.
    pub backpressured_ms_per_sec: f64,
    /// Waiting for input.
    pub idle_ms_per_sec: f64,
}

impl TimeRatios {
    /// Flink's back-pressure level: OK below 10%, LOW up to 50%, HIGH above.
    pub fn backpressure_level(&self) -> &'static str {
        match self.backpressured_ms_per_sec {
            x if x > 500.0 => "HIGH",
            x if x > 100.0 => "LOW",
            _ => "OK",
        }
    }
}

/// Throughput and time ratios of one operator (all subtasks) over an interval.
#[derive(Clone, Debug, Serialize)]
pub struct OperatorRates {
    /// Operator name.
    pub name: String,
    /// Name of the task (chain of operators) that runs it.
    pub task: String,
    /// Records received per second.
    pub records_in_per_sec: f64,
    /// Records emitted per second.
    pub records_out_per_sec: f64,
    /// Time ratios of the task(s) that run the operator.
    pub time: TimeRatios,
}

/// The likely bottleneck of a pipeline: the last operator of the first task that is not
/// back-pressured itself while the task before it is. `rates` must be in topological order, as
/// [`MetricsSnapshot::rates_since`] returns them. `None` when nothing is back-pressured.
///
/// The seed's advice applies to what it names: raise its parallelism or batch size, or make the
/// sink faster; a longer checkpoint interval only hides the symptom.
pub fn find_bottleneck(rates: &[OperatorRates]) -> Option<&OperatorRates> {
    let mut upstream_backpressured = false;
    let mut previous_task: Option<&str> = None;
    for (i, op) in rates.iter().enumerate() {
        if previous_task != Some(op.task.as_str()) {
            if upstream_backpressured && op.time.backpressure_level() == "OK" {
                let last_of_task = rates[i..].iter().take_while(|o| o.task == op.task).last();
                return last_of_task;
            }
            upstream_backpressured = op.time.backpressure_level() != "OK";
            previous_task = Some(op.task.as_str());
        }
    }
    None
}

/// Resident memory of this process in bytes (Linux; `None` elsewhere).
pub fn process_rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let resident_pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(resident_pages * 4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_and_rates_add_up_subtasks() {
        let registry = MetricsRegistry::default();
        let a0 = registry.operator("map", 0);
        let a1 = registry.operator("map", 1);
        let before = registry.snapshot();
        a0.add_in(10);
        a1.add_in(5);
        a1.add_out(4);
        a0.set_watermark(100);
        a1.set_watermark(50);
        a0.set_newest_event(7_000, 9_000);
        a0.set_newest_event(6_000, 9_500);
        a1.set_newest_event(8_000, 9_100);
        let mut after = registry.snapshot();
        after.taken_at = before.taken_at + Duration::from_secs(1);
        let total = after.operator_total("map").unwrap();
        assert_eq!(
            (total.records_in, total.records_out, total.watermark),
            (15, 4, 50)
        );
        let newest = |event_time, read_at| {
            Some(NewestEvent {
                event_time,
                read_at,
            })
        };
        assert_eq!(
            after.operators[0].newest_event,
            newest(7_000, 9_000),
            "the newest kept"
        );
        assert_eq!(
            total.newest_event,
            newest(8_000, 9_100),
            "the newest subtask's"
        );
        assert_eq!(total.newest_event.unwrap().behind_clock_ms(), 1_100);
        assert_eq!(before.operators[0].newest_event, None);
        let rates = after.rates_since(&before);
        assert_eq!(rates.len(), 1);
        assert_eq!(rates[0].records_in_per_sec, 15.0);
        assert_eq!(rates[0].records_out_per_sec, 4.0);
    }

    #[test]
    fn task_time_is_split_into_busy_backpressured_idle() {
        let registry = MetricsRegistry::default();
        let task = registry.task("src -> map", 0);
        std::thread::sleep(Duration::from_millis(20));
        task.add_idle(Duration::from_millis(5));
        task.add_backpressured(Duration::from_millis(10));
        task.mark_finished();
        let snap = &registry.snapshot().tasks[0];
        assert!(!snap.running);
        assert_eq!(snap.idle_ns, 5_000_000);
        assert_eq!(snap.backpressured_ns, 10_000_000);
        assert_eq!(snap.busy_ns, snap.elapsed_ns - 15_000_000);
        assert!(chain_contains("src -> map", "map"));
        assert!(!chain_contains("src -> mapper", "map"));
    }

    #[test]
    fn the_bottleneck_is_the_first_free_task_after_a_backpressured_one() {
        let op = |name: &str, task: &str, bp: f64, busy: f64| OperatorRates {
            name: name.into(),
            task: task.into(),
            records_in_per_sec: 0.0,
            records_out_per_sec: 0.0,
            time: TimeRatios {
                busy_ms_per_sec: busy,
                backpressured_ms_per_sec: bp,
                idle_ms_per_sec: 0.0,
            },
        };
        let rates = vec![
            op("src", "src -> map", 900.0, 100.0),
            op("map", "src -> map", 900.0, 100.0),
            op("keyed", "keyed", 700.0, 300.0),
            op("enrich", "enrich -> sink", 0.0, 990.0),
            op("sink", "enrich -> sink", 0.0, 990.0),
        ];
        assert_eq!(find_bottleneck(&rates).unwrap().name, "sink");
        assert!(find_bottleneck(&rates[3..]).is_none());
    }

    #[test]
    fn backpressure_levels_follow_flink() {
        let level = |bp| {
            TimeRatios {
                backpressured_ms_per_sec: bp,
                ..Default::default()
            }
            .backpressure_level()
        };
        assert_eq!(
            (level(0.0), level(200.0), level(900.0)),
            ("OK", "LOW", "HIGH")
        );
    }

    #[test]
    fn rss_is_readable_on_linux() {
        assert!(process_rss_bytes().unwrap() > 0);
    }
}
