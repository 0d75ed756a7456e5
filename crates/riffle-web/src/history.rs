//! The figures of the last minutes: the server samples the job's metrics every second, keeps
//! five minutes of samples, and turns each pair of consecutive samples into a chart point
//! (throughput in and out, watermark lag behind the wall clock and behind the newest record,
//! back-pressure per vertex, late and bad records).

use std::collections::VecDeque;
use std::time::Duration;

use riffle::JobPlan;
use riffle::metrics::MetricsSnapshot;
use riffle::record::Timestamp;
use riffle::time::Clock;
use serde::Serialize;

use crate::api::AppState;
use crate::views::{self, Bottleneck, EventTime, GraphView, Latency, OperatorView};

/// How long samples are kept.
const KEPT: Duration = Duration::from_secs(300);
/// Rates and time ratios shown as "current" are over about this long.
pub(crate) const RATE_WINDOW: Duration = Duration::from_secs(5);

/// The wall clock, epoch ms.
pub(crate) fn wall_clock() -> Timestamp {
    riffle::time::SystemClock.now()
}

/// One point of the charts.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Point {
    /// Wall clock of the sample, epoch ms.
    pub t: Timestamp,
    /// Records the sources emitted per second.
    pub source_records_per_sec: f64,
    /// Records the sinks received per second.
    pub sink_records_per_sec: f64,
    /// The largest watermark lag behind the wall clock of any operator, ms.
    pub watermark_lag_ms: Option<i64>,
    /// The largest watermark lag behind the newest record read upstream of any operator, ms.
    pub watermark_lag_behind_newest_ms: Option<i64>,
    /// Whether the job's event time follows the wall clock (see [`EventTime`]): which of the
    /// two lags to chart.
    pub event_time: Option<EventTime>,
    /// Back-pressured ms per second of each vertex (its most back-pressured task).
    pub backpressured_ms_per_sec: Vec<f64>,
    /// End-to-end latency at the sinks over the last minute, median, ms.
    pub latency_p50_ms: Option<f64>,
    /// Same, 99th percentile.
    pub latency_p99_ms: Option<f64>,
    /// Late records so far (dropped or side output).
    pub late_records: u64,
    /// Bad records so far.
    pub bad_records: u64,
}

/// The figures at one instant, with rates over the last seconds.
pub(crate) struct Current {
    pub(crate) metrics: MetricsSnapshot,
    pub(crate) operators: Vec<OperatorView>,
    pub(crate) graph: GraphView,
    pub(crate) bottleneck: Option<Bottleneck>,
}

impl Current {
    pub(crate) fn new(
        plan: &JobPlan,
        now: MetricsSnapshot,
        earlier: &MetricsSnapshot,
        at: Timestamp,
    ) -> Self {
        let operators = views::operators(plan, &now, earlier, at);
        let graph = views::graph(plan, &operators);
        let bottleneck = views::bottleneck(&graph);
        Current {
            metrics: now,
            operators,
            graph,
            bottleneck,
        }
    }

    /// The sources (first operators of vertices without inputs).
    pub(crate) fn sources<'a>(
        &'a self,
        plan: &'a JobPlan,
    ) -> impl Iterator<Item = &'a OperatorView> {
        self.operators.iter().filter(move |o| {
            !plan.edges.iter().any(|e| e.to == o.vertex)
                && plan.vertices[o.vertex].operators.first() == Some(&o.name)
        })
    }

    /// The sinks (last operators of vertices without outputs).
    pub(crate) fn sinks<'a>(&'a self, plan: &'a JobPlan) -> impl Iterator<Item = &'a OperatorView> {
        self.operators.iter().filter(move |o| {
            !plan.edges.iter().any(|e| e.from == o.vertex)
                && plan.vertices[o.vertex].operators.last() == Some(&o.name)
        })
    }

    /// End-to-end latency: the markers' delays at every sink over the last minute.
    pub(crate) fn latency(&self, plan: &JobPlan) -> Option<Latency> {
        let sinks: Vec<&str> = self.sinks(plan).map(|o| o.name.as_str()).collect();
        let samples: Vec<u64> = self
            .metrics
            .operators
            .iter()
            .filter(|o| sinks.contains(&o.name.as_str()))
            .flat_map(|o| o.latencies_us.iter().copied())
            .collect();
        Latency::of(&samples)
    }

    /// The chart point of these figures.
    pub(crate) fn point(&self, plan: &JobPlan, t: Timestamp) -> Point {
        let latency = self.latency(plan);
        Point {
            t,
            source_records_per_sec: self
                .sources(plan)
                .map(|o| o.total.records_out_per_sec)
                .sum(),
            sink_records_per_sec: self.sinks(plan).map(|o| o.total.records_in_per_sec).sum(),
            latency_p50_ms: latency.as_ref().map(|l| l.p50_ms),
            latency_p99_ms: latency.as_ref().map(|l| l.p99_ms),
            watermark_lag_ms: self
                .operators
                .iter()
                .filter_map(|o| o.total.watermark_lag_ms)
                .max(),
            watermark_lag_behind_newest_ms: self
                .operators
                .iter()
                .filter_map(|o| o.total.watermark_lag_behind_newest_ms)
                .max(),
            event_time: views::job_event_time(&self.operators),
            backpressured_ms_per_sec: self
                .graph
                .vertices
                .iter()
                .map(|v| v.backpressured_ms_per_sec)
                .collect(),
            late_records: self
                .operators
                .iter()
                .map(|o| o.total.late_records_dropped + o.total.late_records_side_output)
                .sum(),
            bad_records: self.operators.iter().map(|o| o.total.bad_records).sum(),
        }
    }
}

/// Samples and chart points of the last minutes.
#[derive(Default)]
pub(crate) struct History {
    samples: VecDeque<MetricsSnapshot>,
    pub(crate) points: VecDeque<Point>,
}

impl History {
    /// The sample to compute rates against at `now`: the newest one at least [`RATE_WINDOW`]
    /// old, else the oldest.
    pub(crate) fn rate_base(&self, now: &MetricsSnapshot) -> Option<&MetricsSnapshot> {
        self.samples
            .iter()
            .rev()
            .find(|s| now.taken_at.saturating_duration_since(s.taken_at) >= RATE_WINDOW)
            .or_else(|| self.samples.front())
    }

    fn push(&mut self, sample: MetricsSnapshot, point: Option<Point>) {
        while self
            .samples
            .front()
            .is_some_and(|s| sample.taken_at.saturating_duration_since(s.taken_at) > KEPT)
        {
            self.samples.pop_front();
        }
        while self.points.len() > KEPT.as_secs() as usize {
            self.points.pop_front();
        }
        self.samples.push_back(sample);
        if let Some(point) = point {
            self.points.push_back(point);
        }
    }
}

/// Samples the job's figures until the server stops.
pub(crate) async fn sample(state: AppState) {
    let mut ticks = tokio::time::interval(state.sample_interval());
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let job = state.job();
        let now = job.metrics();
        let mut history = state.history();
        // A chart point per sample, from the previous one: rates of that second.
        let point = history.samples.back().map(|previous| {
            let at = wall_clock();
            Current::new(job.plan(), now.clone(), previous, at).point(job.plan(), at)
        });
        history.push(now, point);
    }
}
