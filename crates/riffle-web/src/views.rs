//! What the REST API, the UI and the Prometheus endpoint show, computed from two metrics snapshots
//! of a job (the latest and one a few seconds older): per operator and subtask counts, rates,
//! busy / back-pressured / idle time and back-pressure level, watermarks and their lag behind the
//! wall clock, the job graph coloured by back-pressure, and the likely bottleneck.
//!
//! Pure functions of their inputs, so that the figures are tested without a server.

use std::collections::BTreeMap;

use riffle::JobPlan;
use riffle::metrics::{MetricsSnapshot, OperatorSnapshot, TaskSnapshot, TimeRatios};
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
    /// How far the watermark is behind the wall clock, in ms.
    pub watermark_lag_ms: Option<i64>,
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
    now: &[TaskSnapshot],
    earlier: &[TaskSnapshot],
    vertex_name: &str,
    subtask: usize,
) -> TimeRatios {
    let find = |tasks: &[TaskSnapshot]| {
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
    now: &OperatorSnapshot,
    before: Option<&OperatorSnapshot>,
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
                    subtask_view(o, before, seconds, time, wall_clock)
                })
                .collect();
            subtasks.sort_by_key(|s| s.subtask);
            let mut total = total(&subtasks);
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

    fn op(name: &str, subtask: usize, records_in: u64, records_out: u64) -> OperatorSnapshot {
        OperatorSnapshot {
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
            state_entries: 0,
            state_bytes: 0,
            split_lag: BTreeMap::new(),
            latencies_us: Vec::new(),
        }
    }

    fn task(name: &str, subtask: usize, elapsed_ms: u64, backpressured_ms: u64) -> TaskSnapshot {
        let ms = 1_000_000;
        TaskSnapshot {
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
}
