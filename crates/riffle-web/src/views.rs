//! What the REST API, the UI and the Prometheus endpoint show, computed from two metrics snapshots
//! of a job (the latest and one a few seconds older): per operator and subtask counts, rates,
//! busy / back-pressured / idle time and back-pressure level, watermarks and their lag behind the
//! wall clock (or, when event time does not follow the wall clock, behind the newest record: see
//! [`EventTime`]), the job graph coloured by back-pressure, and the likely bottleneck.
//!
//! Pure functions of their inputs, so that the figures are tested without a server.

use std::collections::BTreeMap;

use riffle::JobPlan;
use riffle::metrics::{
    MetricsSnapshot, NewestEvent, OperatorMetricsSnapshot, TaskMetricsSnapshot, TimeRatios,
};
use riffle::record::{MAX_WATERMARK, MIN_WATERMARK, Timestamp};
use serde::Serialize;

/// One parallel instance of an operator.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SubtaskView {
    /// Subtask index.
    pub subtask: usize,
    /// Records received so far.
    pub records_in: u64,
    /// Records emitted so far.
    pub records_out: u64,
    /// Records received per second over the rate window.
    pub records_in_per_sec: f64,
    /// Records emitted per second over the rate window.
    pub records_out_per_sec: f64,
    /// Time of the task that runs this subtask, per second of the rate window.
    pub busy_ms_per_sec: f64,
    /// Blocked on a full output channel.
    pub backpressured_ms_per_sec: f64,
    /// Waiting for input.
    pub idle_ms_per_sec: f64,
    /// `OK`, `LOW` or `HIGH` (Flink's thresholds: 10% and 50% of the time back-pressured).
    pub backpressure: &'static str,
    /// Current event-time watermark (epoch ms), `None` before the first.
    pub watermark: Option<Timestamp>,
    /// How far the watermark is behind the wall clock, in ms (whatever [`Self::event_time`] says).
    pub watermark_lag_ms: Option<i64>,
    /// Whether event time follows the wall clock, from the newest records read by the sources
    /// upstream (this subtask's own, for a source); `None` before any record with an event time.
    pub event_time: Option<EventTime>,
    /// The newest event time read by the sources upstream (epoch ms).
    pub newest_event_time: Option<Timestamp>,
    /// How far behind the wall clock that newest record was when it was read, ms (negative:
    /// ahead): what [`Self::event_time`] is decided from.
    pub newest_event_behind_wall_clock_ms: Option<i64>,
    /// How far the watermark is behind the newest event time read upstream, ms: the lag to show
    /// when event time is synthetic.
    pub watermark_lag_behind_newest_ms: Option<i64>,
    /// Late records counted and dropped.
    pub late_records_dropped: u64,
    /// Late records sent to the late side output.
    pub late_records_side_output: u64,
    /// Records a source could not decode.
    pub bad_records: u64,
    /// Records whose event time jumped too far ahead of their split's watermark (sources):
    /// processed, kept from moving the watermark until corroborated.
    pub watermark_outliers: u64,
    /// Records sent to a side output nothing consumes (dropped).
    pub side_output_unconsumed: u64,
    /// Entries of keyed state (and timers).
    pub state_entries: u64,
    /// Estimated bytes of keyed state.
    pub state_bytes: u64,
    /// Records each split is behind its end (Kafka consumer lag per partition), sources only.
    pub split_lag: BTreeMap<String, i64>,
    /// How long latency markers took from the sources to here over the last minute.
    pub latency: Option<Latency>,
}

/// Whether a stream's event time follows the wall clock, so that the watermark's lag behind the
/// wall clock means something.
///
/// Decided from the data, per source subtask: the newest event time it read is compared with the
/// wall clock at the moment it read it (not now, so that a live stream that stalls still
/// follows the wall clock, and its growing lag shows). Within [`WALL_CLOCK_TOLERANCE_MS`] either
/// way it follows it; farther, the event time is synthetic: a generator counting from a fixed
/// base (the demos' clicks, Nexmark), a replay of old data, or times on another clock. An
/// operator is synthetic when any source subtask upstream of it is (its watermark is the minimum
/// of its inputs'), wall clock when they all follow the wall clock.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum EventTime {
    /// Records are read close to their event time: the lag behind the wall clock is the
    /// figure to watch.
    WallClock,
    /// Records are read far from their event time: the lag behind the wall clock says nothing
    /// about the job's health; the lag behind the newest record does.
    Synthetic,
}

/// How far from the wall clock a record's event time may be when it is read, either way, for
/// event time to follow the wall clock: a day. A live stream's newest records arrive within
/// seconds or minutes, hours when a consumer is far behind or a source's clock is in another
/// time zone (a lag worth showing); a generator's base or a replay is usually days away.
pub const WALL_CLOCK_TOLERANCE_MS: i64 = 24 * 3600 * 1000;

impl EventTime {
    /// The event time of a source whose newest record is `newest`.
    pub fn of(newest: &NewestEvent) -> EventTime {
        if newest.behind_clock_ms().unsigned_abs() <= WALL_CLOCK_TOLERANCE_MS as u64 {
            EventTime::WallClock
        } else {
            EventTime::Synthetic
        }
    }
}

/// What the sources upstream of an operator read: whether their event time follows the wall
/// clock, and the newest record to measure the watermark against.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Upstream {
    event_time: Option<EventTime>,
    newest: Option<NewestEvent>,
}

impl Upstream {
    /// Of the source subtasks `read`, as `(operator, newest)`: synthetic if any is; the newest
    /// record is the oldest source operator's newest (each operator's over its subtasks), since an
    /// operator's watermark is held back by its slowest input.
    fn of<'a>(read: impl IntoIterator<Item = (&'a str, NewestEvent)>) -> Upstream {
        let mut per_operator: BTreeMap<&str, NewestEvent> = BTreeMap::new();
        let mut event_time = None;
        for (operator, newest) in read {
            let kind = EventTime::of(&newest);
            if event_time != Some(EventTime::Synthetic) {
                event_time = Some(kind);
            }
            per_operator
                .entry(operator)
                .and_modify(|n| {
                    if newest.event_time > n.event_time {
                        *n = newest;
                    }
                })
                .or_insert(newest);
        }
        Upstream {
            event_time,
            newest: per_operator.into_values().min_by_key(|n| n.event_time),
        }
    }

    /// Fills the event-time fields of `view` (whose watermark is set).
    fn apply(&self, view: &mut SubtaskView) {
        view.event_time = self.event_time;
        view.newest_event_time = self.newest.map(|n| n.event_time);
        view.newest_event_behind_wall_clock_ms = self.newest.map(|n| n.behind_clock_ms());
        view.watermark_lag_behind_newest_ms = self.newest.and_then(|n| {
            let watermark = view.watermark.filter(|w| *w != MAX_WATERMARK)?;
            Some(n.event_time.saturating_sub(watermark).max(0))
        });
    }
}

/// Percentiles of latency marker delays (from a source to an operator) over the last minute.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Latency {
    /// Median, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Largest, ms.
    pub max_ms: f64,
    /// Markers measured.
    pub samples: usize,
}

impl Latency {
    /// The percentiles of `latencies_us` (nearest rank); `None` without samples.
    pub fn of(latencies_us: &[u64]) -> Option<Latency> {
        if latencies_us.is_empty() {
            return None;
        }
        let mut sorted = latencies_us.to_vec();
        sorted.sort_unstable();
        let rank = |q: f64| {
            let index = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
            sorted[index] as f64 / 1e3
        };
        Some(Latency {
            p50_ms: rank(0.50),
            p99_ms: rank(0.99),
            max_ms: sorted[sorted.len() - 1] as f64 / 1e3,
            samples: sorted.len(),
        })
    }
}

/// An operator over all its subtasks.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct OperatorView {
    /// Operator name.
    pub name: String,
    /// Index of the graph vertex (chain) that runs it.
    pub vertex: usize,
    /// Number of subtasks.
    pub parallelism: usize,
    /// Counts and rates summed over the subtasks; busy time of the busiest subtask, back-pressured
    /// time and level of the most back-pressured one, idle time of the least idle one; watermark
    /// the smallest (none until every subtask has one), its lag the largest; latency over the
    /// markers of all subtasks.
    #[serde(flatten)]
    pub total: SubtaskView,
    /// One entry per subtask.
    pub subtasks: Vec<SubtaskView>,
}

/// A vertex of the job graph: a chain of operators run by `parallelism` tasks.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct VertexView {
    /// Index in `vertices`.
    pub id: usize,
    /// The chain's name (its operators joined with ` -> `).
    pub name: String,
    /// Operator names in chain order.
    pub operators: Vec<String>,
    /// Number of parallel tasks.
    pub parallelism: usize,
    /// Back-pressure level of its most back-pressured task.
    pub backpressure: &'static str,
    /// Busy time per second of its busiest task.
    pub busy_ms_per_sec: f64,
    /// Back-pressured time per second of its most back-pressured task.
    pub backpressured_ms_per_sec: f64,
    /// Records its first operator receives per second (emitted, for a source).
    pub records_per_sec: f64,
}

/// An edge of the job graph.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct EdgeView {
    /// Producing vertex.
    pub from: usize,
    /// Consuming vertex.
    pub to: usize,
    /// `FORWARD`, `REBALANCE`, `HASH` or `BROADCAST`.
    pub ship: String,
    /// The side output's tag, for a side output edge.
    pub side_output: Option<String>,
}

/// The job graph with each vertex's back-pressure.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct GraphView {
    /// Chains of operators.
    pub vertices: Vec<VertexView>,
    /// Network edges between them.
    pub edges: Vec<EdgeView>,
}

/// The likely bottleneck of the pipeline, with what to do about it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Bottleneck {
    /// The operator (the last of its chain) that is busy while its upstream is back-pressured.
    pub operator: String,
    /// Its vertex in the graph.
    pub vertex: usize,
    /// The back-pressured vertex right upstream of it.
    pub upstream: Option<usize>,
    /// Its busy time per second.
    pub busy_ms_per_sec: f64,
    /// One line on what to do.
    pub hint: String,
}

/// The time ratios of task `vertex_name` subtask `subtask` between two snapshots.
fn task_ratios(
    now: &[TaskMetricsSnapshot],
    earlier: &[TaskMetricsSnapshot],
    vertex_name: &str,
    subtask: usize,
) -> TimeRatios {
    let find = |tasks: &[TaskMetricsSnapshot]| {
        tasks
            .iter()
            .find(|t| t.name == vertex_name && t.subtask == subtask)
            .cloned()
    };
    let (Some(now), Some(before)) = (find(now), find(earlier)) else {
        return TimeRatios::default();
    };
    let elapsed = now.elapsed_ns.saturating_sub(before.elapsed_ns) as f64;
    if elapsed <= 0.0 {
        return TimeRatios::default();
    }
    let per_sec = |a: u64, b: u64| a.saturating_sub(b) as f64 / elapsed * 1000.0;
    TimeRatios {
        busy_ms_per_sec: per_sec(now.busy_ns, before.busy_ns),
        backpressured_ms_per_sec: per_sec(now.backpressured_ns, before.backpressured_ns),
        idle_ms_per_sec: per_sec(now.idle_ns, before.idle_ns),
    }
}

fn watermark(ts: Timestamp) -> Option<Timestamp> {
    (ts != MIN_WATERMARK).then_some(ts)
}

fn subtask_view(
    now: &OperatorMetricsSnapshot,
    before: Option<&OperatorMetricsSnapshot>,
    seconds: f64,
    time: TimeRatios,
    wall_clock: Timestamp,
) -> SubtaskView {
    let rate = |n: u64, b: u64| n.saturating_sub(b) as f64 / seconds;
    let watermark = watermark(now.watermark);
    SubtaskView {
        subtask: now.subtask,
        records_in: now.records_in,
        records_out: now.records_out,
        records_in_per_sec: rate(now.records_in, before.map_or(0, |b| b.records_in)),
        records_out_per_sec: rate(now.records_out, before.map_or(0, |b| b.records_out)),
        busy_ms_per_sec: time.busy_ms_per_sec,
        backpressured_ms_per_sec: time.backpressured_ms_per_sec,
        idle_ms_per_sec: time.idle_ms_per_sec,
        backpressure: time.backpressure_level(),
        watermark_lag_ms: watermark
            .filter(|w| *w != MAX_WATERMARK)
            .map(|w| wall_clock.saturating_sub(w)),
        watermark,
        event_time: None,
        newest_event_time: None,
        newest_event_behind_wall_clock_ms: None,
        watermark_lag_behind_newest_ms: None,
        late_records_dropped: now.late_records_dropped,
        late_records_side_output: now.late_records_side_output,
        bad_records: now.bad_records,
        watermark_outliers: now.watermark_outliers,
        side_output_unconsumed: now.side_output_unconsumed,
        state_entries: now.state_entries,
        state_bytes: now.state_bytes,
        split_lag: now.split_lag.clone(),
        latency: Latency::of(&now.latencies_us),
    }
}

/// Sums subtasks into an operator total (see [`OperatorView::total`]).
fn total(subtasks: &[SubtaskView]) -> SubtaskView {
    let sum = |f: fn(&SubtaskView) -> u64| subtasks.iter().map(f).sum::<u64>();
    let sum_f = |f: fn(&SubtaskView) -> f64| subtasks.iter().map(f).sum::<f64>();
    let max_f = |f: fn(&SubtaskView) -> f64| subtasks.iter().map(f).fold(0.0, f64::max);
    let worst = subtasks.iter().max_by(|a, b| {
        a.backpressured_ms_per_sec
            .total_cmp(&b.backpressured_ms_per_sec)
    });
    // The operator's watermark is its slowest subtask's; none until every subtask has one.
    let watermark = subtasks
        .iter()
        .map(|s| s.watermark)
        .collect::<Option<Vec<_>>>()
        .and_then(|w| w.into_iter().min());
    SubtaskView {
        subtask: 0,
        records_in: sum(|s| s.records_in),
        records_out: sum(|s| s.records_out),
        records_in_per_sec: sum_f(|s| s.records_in_per_sec),
        records_out_per_sec: sum_f(|s| s.records_out_per_sec),
        busy_ms_per_sec: max_f(|s| s.busy_ms_per_sec),
        backpressured_ms_per_sec: worst.map_or(0.0, |s| s.backpressured_ms_per_sec),
        idle_ms_per_sec: subtasks
            .iter()
            .map(|s| s.idle_ms_per_sec)
            .reduce(f64::min)
            .unwrap_or(0.0),
        backpressure: worst.map_or("OK", |s| s.backpressure),
        watermark,
        watermark_lag_ms: watermark
            .and_then(|_| subtasks.iter().filter_map(|s| s.watermark_lag_ms).max()),
        event_time: None,
        newest_event_time: None,
        newest_event_behind_wall_clock_ms: None,
        watermark_lag_behind_newest_ms: None,
        late_records_dropped: sum(|s| s.late_records_dropped),
        late_records_side_output: sum(|s| s.late_records_side_output),
        bad_records: sum(|s| s.bad_records),
        watermark_outliers: sum(|s| s.watermark_outliers),
        side_output_unconsumed: sum(|s| s.side_output_unconsumed),
        state_entries: sum(|s| s.state_entries),
        state_bytes: sum(|s| s.state_bytes),
        split_lag: subtasks.iter().flat_map(|s| s.split_lag.clone()).collect(),
        latency: None,
    }
}

/// Every operator of the plan, in plan order, with its subtasks.
pub fn operators(
    plan: &JobPlan,
    now: &MetricsSnapshot,
    earlier: &MetricsSnapshot,
    wall_clock: Timestamp,
) -> Vec<OperatorView> {
    let seconds = now
        .taken_at
        .saturating_duration_since(earlier.taken_at)
        .as_secs_f64()
        .max(1e-3);
    let mut views = Vec::new();
    for (vertex, v) in plan.vertices.iter().enumerate() {
        let upstream = upstream_of(plan, now, vertex);
        for name in &v.operators {
            let mut subtasks: Vec<SubtaskView> = now
                .operators
                .iter()
                .filter(|o| &o.name == name)
                .map(|o| {
                    let before = earlier
                        .operators
                        .iter()
                        .find(|b| b.name == o.name && b.subtask == o.subtask);
                    let time = task_ratios(&now.tasks, &earlier.tasks, &v.name, o.subtask);
                    let mut view = subtask_view(o, before, seconds, time, wall_clock);
                    // A source subtask by what it read itself, any other by its upstream.
                    match o.newest_event {
                        Some(newest) => Upstream::of([(name.as_str(), newest)]).apply(&mut view),
                        None => upstream.apply(&mut view),
                    }
                    view
                })
                .collect();
            subtasks.sort_by_key(|s| s.subtask);
            let mut total = total(&subtasks);
            upstream.apply(&mut total);
            let samples: Vec<u64> = now
                .operators
                .iter()
                .filter(|o| &o.name == name)
                .flat_map(|o| o.latencies_us.iter().copied())
                .collect();
            total.latency = Latency::of(&samples);
            views.push(OperatorView {
                name: name.clone(),
                vertex,
                parallelism: v.parallelism,
                total,
                subtasks,
            });
        }
    }
    views
}

/// What the sources of the vertices upstream of `vertex` (itself included) read.
fn upstream_of(plan: &JobPlan, now: &MetricsSnapshot, vertex: usize) -> Upstream {
    let mut seen = vec![false; plan.vertices.len()];
    let mut todo = vec![vertex];
    while let Some(v) = todo.pop() {
        if std::mem::replace(&mut seen[v], true) {
            continue;
        }
        todo.extend(plan.edges.iter().filter(|e| e.to == v).map(|e| e.from));
    }
    let operators: Vec<&String> = plan
        .vertices
        .iter()
        .zip(&seen)
        .filter(|(_, seen)| **seen)
        .flat_map(|(v, _)| &v.operators)
        .collect();
    Upstream::of(
        now.operators
            .iter()
            .filter(|o| operators.contains(&&o.name))
            .filter_map(|o| Some((o.name.as_str(), o.newest_event?))),
    )
}

/// Whether the job's event time follows the wall clock, over all its sources: synthetic if any
/// source reads synthetic event time.
pub fn job_event_time(operators: &[OperatorView]) -> Option<EventTime> {
    let kinds = operators.iter().filter_map(|o| o.total.event_time);
    kinds.reduce(|a, b| if b == EventTime::Synthetic { b } else { a })
}

/// The job graph, each vertex with the back-pressure of its tasks.
pub fn graph(plan: &JobPlan, operators: &[OperatorView]) -> GraphView {
    let vertices = plan
        .vertices
        .iter()
        .enumerate()
        .map(|(id, v)| {
            let first = operators.iter().find(|o| o.vertex == id);
            let (busy, backpressured, level, rate) = first.map_or((0.0, 0.0, "OK", 0.0), |o| {
                let rate = if plan.edges.iter().any(|e| e.to == id) {
                    o.total.records_in_per_sec
                } else {
                    o.total.records_out_per_sec
                };
                (
                    o.total.busy_ms_per_sec,
                    o.total.backpressured_ms_per_sec,
                    o.total.backpressure,
                    rate,
                )
            });
            VertexView {
                id,
                name: v.name.clone(),
                operators: v.operators.clone(),
                parallelism: v.parallelism,
                backpressure: level,
                busy_ms_per_sec: busy,
                backpressured_ms_per_sec: backpressured,
                records_per_sec: rate,
            }
        })
        .collect();
    let edges = plan
        .edges
        .iter()
        .map(|e| EdgeView {
            from: e.from,
            to: e.to,
            ship: e.ship.clone(),
            side_output: e.side_output.clone(),
        })
        .collect();
    GraphView { vertices, edges }
}

/// The likely bottleneck: the most downstream vertex that is not back-pressured itself while a
/// vertex feeding it is (LOW or HIGH). Its last operator is named, with the seed's advice: raise
/// its parallelism or batch size, or make what it writes to faster; a longer checkpoint interval
/// only hides the symptom. `None` when nothing is back-pressured.
pub fn bottleneck(graph: &GraphView) -> Option<Bottleneck> {
    graph
        .vertices
        .iter()
        .rev()
        .filter(|v| v.backpressure == "OK")
        .find_map(|v| {
            let upstream = graph
                .edges
                .iter()
                .filter(|e| e.to == v.id)
                .map(|e| &graph.vertices[e.from])
                .filter(|u| u.backpressure != "OK")
                .max_by(|a, b| a.backpressured_ms_per_sec.total_cmp(&b.backpressured_ms_per_sec))?;
            let operator = v.operators.last().cloned().unwrap_or_default();
            let is_sink = !graph.edges.iter().any(|e| e.from == v.id);
            let what = if is_sink {
                "raise the sink's parallelism or batch size, or make the system it writes to faster"
            } else {
                "raise its parallelism or make its work per record cheaper"
            };
            Some(Bottleneck {
                hint: format!(
                    "`{operator}` is busy {:.0} ms/s while `{}` upstream is back-pressured ({}): {what}; a longer checkpoint interval would not help",
                    v.busy_ms_per_sec, upstream.name, upstream.backpressure
                ),
                operator,
                vertex: v.id,
                upstream: Some(upstream.id),
                busy_ms_per_sec: v.busy_ms_per_sec,
            })
        })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use riffle::{PlanEdge, PlanVertex};

    use super::*;

    fn op(
        name: &str,
        subtask: usize,
        records_in: u64,
        records_out: u64,
    ) -> OperatorMetricsSnapshot {
        OperatorMetricsSnapshot {
            name: name.into(),
            subtask,
            records_in,
            records_out,
            bad_records: 0,
            late_records_dropped: 0,
            late_records_side_output: 0,
            watermark_outliers: 0,
            side_output_unconsumed: 0,
            watermark: MIN_WATERMARK,
            newest_event: None,
            state_entries: 0,
            state_bytes: 0,
            split_lag: BTreeMap::new(),
            latencies_us: Vec::new(),
        }
    }

    fn task(
        name: &str,
        subtask: usize,
        elapsed_ms: u64,
        backpressured_ms: u64,
    ) -> TaskMetricsSnapshot {
        let ms = 1_000_000;
        TaskMetricsSnapshot {
            name: name.into(),
            subtask,
            running: true,
            elapsed_ns: elapsed_ms * ms,
            busy_ns: (elapsed_ms - backpressured_ms) * ms,
            backpressured_ns: backpressured_ms * ms,
            idle_ns: 0,
        }
    }

    /// source -> map (chained) -> slow sink, sink at parallelism 2.
    fn plan() -> JobPlan {
        JobPlan {
            vertices: vec![
                PlanVertex {
                    name: "Source: gen -> map".into(),
                    operators: vec!["Source: gen".into(), "map".into()],
                    uids: vec![None, None],
                    parallelism: 1,
                },
                PlanVertex {
                    name: "Sink: slow".into(),
                    operators: vec!["Sink: slow".into()],
                    uids: vec![None],
                    parallelism: 2,
                },
            ],
            edges: vec![PlanEdge {
                from: 0,
                to: 1,
                ship: "REBALANCE".into(),
                side_output: None,
            }],
        }
    }

    fn snapshots() -> (MetricsSnapshot, MetricsSnapshot) {
        let t0 = Instant::now();
        let earlier = MetricsSnapshot {
            taken_at: t0,
            operators: vec![
                op("Source: gen", 0, 0, 1000),
                op("map", 0, 1000, 1000),
                op("Sink: slow", 0, 400, 0),
                op("Sink: slow", 1, 600, 0),
            ],
            tasks: vec![
                task("Source: gen -> map", 0, 1000, 0),
                task("Sink: slow", 0, 1000, 0),
                task("Sink: slow", 1, 1000, 0),
            ],
        };
        let mut map = op("map", 0, 3000, 3000);
        map.watermark = 5_000;
        let mut source = op("Source: gen", 0, 0, 3000);
        source.split_lag.insert("clicks-0".into(), 42);
        let now = MetricsSnapshot {
            taken_at: t0 + Duration::from_secs(2),
            operators: vec![
                source,
                map,
                op("Sink: slow", 0, 1400, 0),
                op("Sink: slow", 1, 1600, 0),
            ],
            tasks: vec![
                // 1.8 of the 2 s back-pressured: HIGH.
                task("Source: gen -> map", 0, 3000, 1800),
                task("Sink: slow", 0, 3000, 0),
                task("Sink: slow", 1, 3000, 0),
            ],
        };
        (earlier, now)
    }

    #[test]
    fn operators_have_counts_rates_ratios_and_watermark_lag() {
        let (earlier, now) = snapshots();
        let ops = operators(&plan(), &now, &earlier, 65_000);
        assert_eq!(
            ops.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(),
            ["Source: gen", "map", "Sink: slow"]
        );
        let map = &ops[1];
        assert_eq!(map.vertex, 0);
        assert_eq!(map.total.records_in, 3000);
        assert_eq!(map.total.records_in_per_sec, 1000.0);
        assert_eq!(map.total.backpressured_ms_per_sec, 900.0);
        assert_eq!(map.total.backpressure, "HIGH");
        assert_eq!(map.total.watermark, Some(5_000));
        assert_eq!(map.total.watermark_lag_ms, Some(60_000));
        assert_eq!(ops[0].total.split_lag.get("clicks-0"), Some(&42));
        let sink = &ops[2];
        assert_eq!(sink.parallelism, 2);
        assert_eq!(sink.subtasks.len(), 2);
        assert_eq!(sink.total.records_in, 3000);
        assert_eq!(sink.total.records_in_per_sec, 1000.0);
        assert_eq!(sink.subtasks[1].records_in_per_sec, 500.0);
        assert_eq!(sink.total.backpressure, "OK");
        assert_eq!(sink.total.busy_ms_per_sec, 1000.0);
        assert_eq!(sink.total.watermark, None);
        assert_eq!(sink.total.watermark_lag_ms, None);
    }

    #[test]
    fn the_sink_behind_a_back_pressured_source_is_the_bottleneck() {
        let (earlier, now) = snapshots();
        let plan = plan();
        let ops = operators(&plan, &now, &earlier, 65_000);
        let graph = graph(&plan, &ops);
        assert_eq!(graph.vertices[0].backpressure, "HIGH");
        assert_eq!(graph.vertices[1].backpressure, "OK");
        assert_eq!(graph.vertices[1].records_per_sec, 1000.0);
        let found = bottleneck(&graph).expect("a bottleneck");
        assert_eq!(found.operator, "Sink: slow");
        assert_eq!((found.vertex, found.upstream), (1, Some(0)));
        assert!(found.hint.contains("sink's parallelism"), "{}", found.hint);
    }

    #[test]
    fn latency_percentiles_are_nearest_rank_over_all_subtasks() {
        assert_eq!(Latency::of(&[]), None);
        let (earlier, mut now) = snapshots();
        now.operators[2].latencies_us = (1..=60).map(|ms| ms * 1000).collect();
        now.operators[3].latencies_us = (61..=100).map(|ms| ms * 1000).collect();
        let ops = operators(&plan(), &now, &earlier, 0);
        let sink = &ops[2];
        assert_eq!(
            sink.total.latency,
            Some(Latency {
                p50_ms: 50.0,
                p99_ms: 99.0,
                max_ms: 100.0,
                samples: 100
            })
        );
        assert_eq!(sink.subtasks[1].latency.as_ref().unwrap().p50_ms, 80.0);
        assert_eq!(ops[0].total.latency, None);
    }

    #[test]
    fn nothing_back_pressured_means_no_bottleneck() {
        let (earlier, mut now) = snapshots();
        now.tasks[0] = task("Source: gen -> map", 0, 3000, 0);
        let plan = plan();
        let graph = graph(&plan, &operators(&plan, &now, &earlier, 0));
        assert_eq!(bottleneck(&graph), None);
    }

    const DAY_MS: i64 = 86_400_000;

    fn newest(event_time: Timestamp, read_at: Timestamp) -> Option<NewestEvent> {
        Some(NewestEvent {
            event_time,
            read_at,
        })
    }

    #[test]
    fn event_time_follows_the_wall_clock_when_records_are_read_close_to_it() {
        let now = 1_768_435_200_000;
        let read = |behind_ms: i64| EventTime::of(&newest(now - behind_ms, now).unwrap());
        use EventTime::{Synthetic, WallClock};
        assert_eq!(read(2_000), WallClock, "a live stream");
        assert_eq!(read(-60_000), WallClock, "a producer's clock a minute fast");
        assert_eq!(
            read(3 * 3_600_000),
            WallClock,
            "a consumer 3 h behind, or a source in another time zone: a lag worth showing"
        );
        assert_eq!(read(WALL_CLOCK_TOLERANCE_MS), WallClock);
        assert_eq!(read(WALL_CLOCK_TOLERANCE_MS + 1), Synthetic);
        assert_eq!(read(320 * DAY_MS), Synthetic, "the demo's clicks");
        assert_eq!(read(-2 * DAY_MS), Synthetic, "a generator counting ahead");
        assert_eq!(read(now), Synthetic, "event times from 0");
    }

    #[test]
    fn synthetic_event_time_shows_the_lag_behind_the_newest_record_downstream_too() {
        let (earlier, mut now) = snapshots();
        // The source read event time 8 s, 320 days ago; the map's watermark is at 5 s.
        let read_at = 320 * DAY_MS;
        now.operators[0].watermark = 5_000;
        now.operators[0].newest_event = newest(8_000, read_at);
        let ops = operators(&plan(), &now, &earlier, read_at + 1_000);
        let (source, map, sink) = (&ops[0].total, &ops[1].total, &ops[2].total);
        for view in [source, map, sink, &ops[2].subtasks[1]] {
            assert_eq!(view.event_time, Some(EventTime::Synthetic));
            assert_eq!(view.newest_event_time, Some(8_000));
            assert_eq!(
                view.newest_event_behind_wall_clock_ms,
                Some(read_at - 8_000)
            );
        }
        assert_eq!(map.watermark_lag_behind_newest_ms, Some(3_000));
        assert_eq!(source.watermark_lag_behind_newest_ms, Some(3_000));
        // The lag behind the wall clock is still there, under its name, for scripts.
        assert_eq!(map.watermark_lag_ms, Some(read_at + 1_000 - 5_000));
        assert_eq!(sink.watermark_lag_behind_newest_ms, None, "no watermark");
        assert_eq!(job_event_time(&ops), Some(EventTime::Synthetic));
    }

    #[test]
    fn a_stalled_live_stream_still_follows_the_wall_clock_and_its_lag_grows() {
        let (earlier, mut now) = snapshots();
        let read_at = 1_768_435_200_000;
        now.operators[0].newest_event = newest(read_at - 300, read_at);
        now.operators[1].watermark = read_at - 2_300;
        // Nothing read for 10 minutes.
        let ops = operators(&plan(), &now, &earlier, read_at + 600_000);
        let map = &ops[1].total;
        assert_eq!(map.event_time, Some(EventTime::WallClock));
        assert_eq!(map.watermark_lag_ms, Some(602_300));
        assert_eq!(map.watermark_lag_behind_newest_ms, Some(2_000));
        assert_eq!(job_event_time(&ops), Some(EventTime::WallClock));
        // Before any record with an event time, nothing is decided.
        let (earlier, now) = snapshots();
        let ops = operators(&plan(), &now, &earlier, read_at);
        assert!(ops.iter().all(|o| o.total.event_time.is_none()));
        assert_eq!(job_event_time(&ops), None);
    }

    #[test]
    fn an_operator_fed_by_a_synthetic_and_a_live_source_is_synthetic() {
        let vertex = |name: &str| PlanVertex {
            name: name.into(),
            operators: vec![name.into()],
            uids: vec![None],
            parallelism: 1,
        };
        let edge = |from, to| PlanEdge {
            from,
            to,
            ship: "HASH".into(),
            side_output: None,
        };
        let plan = JobPlan {
            vertices: vec![
                vertex("Source: old"),
                vertex("Source: live"),
                vertex("join"),
            ],
            edges: vec![edge(0, 2), edge(1, 2)],
        };
        let wall_clock = 1_768_435_200_000;
        let mut old = op("Source: old", 0, 0, 10);
        old.newest_event = newest(1_000, wall_clock - 5);
        let mut live = op("Source: live", 0, 0, 10);
        live.newest_event = newest(wall_clock - 50, wall_clock - 5);
        let mut join = op("join", 0, 20, 0);
        join.watermark = 400;
        let now = MetricsSnapshot {
            taken_at: Instant::now(),
            operators: vec![old, live, join],
            tasks: Vec::new(),
        };
        let ops = operators(&plan, &now, &now, wall_clock);
        let kinds: Vec<_> = ops.iter().map(|o| o.total.event_time).collect();
        use EventTime::{Synthetic, WallClock};
        assert_eq!(kinds, [Some(Synthetic), Some(WallClock), Some(Synthetic)]);
        // The join's watermark is held back by the old source: measured against its newest.
        assert_eq!(ops[2].total.newest_event_time, Some(1_000));
        assert_eq!(ops[2].total.watermark_lag_behind_newest_ms, Some(600));
        assert_eq!(job_event_time(&ops), Some(Synthetic));
    }
}
