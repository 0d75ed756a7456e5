//! The `/metrics` endpoint: the job's figures in the OpenMetrics text format (which Prometheus
//! negotiates), encoded by the `prometheus-client` crate, or rewritten into the classic text
//! format 0.0.4 for scrapers that do not ask for OpenMetrics. Names follow Prometheus conventions:
//! a `riffle_` prefix, base units in the name (`_seconds`, `_bytes`), `_total` on counters.
//! Rates are left to PromQL (`rate(riffle_operator_records_in_total[1m])`); the time ratios of
//! the last seconds are exported as gauges besides the cumulative busy / back-pressured / idle
//! seconds.

use std::borrow::Cow;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use riffle::checkpoint::CheckpointStats;
use riffle::metrics::TaskMetricsSnapshot;
use riffle::runtime::{JobOverview, JobStatus};

use crate::views::{Bottleneck, EventTime, Latency, OperatorView};

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The content type of [`to_classic`]'s output: Prometheus' text format 0.0.4.
pub const CLASSIC_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// OpenMetrics text rewritten into Prometheus' classic text format (0.0.4), for scrapers that do
/// not ask for OpenMetrics: counter families take their samples' `_total` name, and the
/// OpenMetrics-only `# UNIT` and `# EOF` lines go.
pub fn to_classic(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut text = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        match renamed {
            Some(line) => text.push_str(&line),
            None => text.push_str(line),
        }
        text.push('\n');
    }
    text
}

type Labels = Vec<(String, String)>;
type FloatGauge = Gauge<f64, AtomicU64>;
type FloatCounter = Counter<f64, AtomicU64>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Registers a family of metrics and returns it to fill.
fn family<M>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    unit: Option<Unit>,
) -> Family<Labels, M>
where
    M: prometheus_client::metrics::TypedMetric
        + Default
        + Clone
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    Family<Labels, M>: prometheus_client::encoding::EncodeMetric,
{
    let family = Family::<Labels, M>::default();
    match unit {
        Some(unit) => registry.register_with_unit(name, help, unit, family.clone()),
        None => registry.register(name, help, family.clone()),
    }
    family
}

/// Everything `/metrics` shows.
pub struct Exposition<'a> {
    /// The job.
    pub overview: &'a JobOverview,
    /// Operators with their subtasks.
    pub operators: &'a [OperatorView],
    /// Tasks' cumulative time accounting.
    pub tasks: &'a [TaskMetricsSnapshot],
    /// Checkpoints and savepoints so far.
    pub checkpoints: &'a [CheckpointStats],
    /// The likely bottleneck, if any.
    pub bottleneck: Option<&'a Bottleneck>,
    /// End-to-end latency at the sinks over the last minute.
    pub latency: Option<&'a Latency>,
}

/// The OpenMetrics text of the job's figures.
pub fn render(e: &Exposition<'_>) -> String {
    let mut root = Registry::with_prefix("riffle");
    let registry = root.sub_registry_with_label((
        Cow::Borrowed("job_name"),
        Cow::Owned(e.overview.name.clone()),
    ));

    let status = family::<Gauge>(
        registry,
        "job_status",
        "1 for the job's current status, 0 for the others",
        None,
    );
    for s in [
        JobStatus::Running,
        JobStatus::Restarting,
        JobStatus::Finished,
        JobStatus::Failed,
        JobStatus::Cancelled,
    ] {
        let name = serde_json::to_value(s)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        status
            .get_or_create(&labels(&[("status", &name)]))
            .set(i64::from(s == e.overview.status));
    }
    family::<FloatGauge>(
        registry,
        "job_uptime",
        "Time since the job started",
        Some(Unit::Seconds),
    )
    .get_or_create(&labels(&[]))
    .set(e.overview.uptime_ms as f64 / 1e3);
    family::<Counter>(registry, "job_restarts", "Restarts after failures", None)
        .get_or_create(&labels(&[]))
        .inc_by(u64::from(e.overview.restarts));

    let records_in = family::<Counter>(registry, "operator_records_in", "Records received", None);
    let records_out = family::<Counter>(registry, "operator_records_out", "Records emitted", None);
    let bad = family::<Counter>(
        registry,
        "operator_bad_records",
        "Records a source could not decode (dead-lettered, skipped or failing the job)",
        None,
    );
    let late_dropped = family::<Counter>(
        registry,
        "operator_late_records_dropped",
        "Late records counted and dropped (no late side output)",
        None,
    );
    let late_side = family::<Counter>(
        registry,
        "operator_late_records_side_output",
        "Late records sent to the late side output",
        None,
    );
    let outliers = family::<Counter>(
        registry,
        "operator_watermark_outliers",
        "Records far ahead of their split's watermark, kept from moving it until corroborated",
        None,
    );
    let unconsumed = family::<Counter>(
        registry,
        "operator_side_output_unconsumed",
        "Records sent to a side output nothing in the job consumes (dropped)",
        None,
    );
    let busy = family::<FloatGauge>(
        registry,
        "operator_busy_ratio",
        "Share of the last seconds the operator's busiest task spent processing",
        None,
    );
    let backpressured = family::<FloatGauge>(
        registry,
        "operator_backpressured_ratio",
        "Share of the last seconds the operator's task spent blocked on a full output channel (HIGH above 0.5)",
        None,
    );
    let idle = family::<FloatGauge>(
        registry,
        "operator_idle_ratio",
        "Share of the last seconds the operator's task waited for input",
        None,
    );
    let watermark = family::<FloatGauge>(
        registry,
        "operator_watermark",
        "Current event-time watermark, epoch seconds (absent before the first)",
        Some(Unit::Seconds),
    );
    let watermark_lag = family::<FloatGauge>(
        registry,
        "operator_watermark_lag",
        "How far the watermark is behind the wall clock",
        Some(Unit::Seconds),
    );
    let watermark_lag_newest = family::<FloatGauge>(
        registry,
        "operator_watermark_lag_behind_newest",
        "How far the watermark is behind the newest event time the sources upstream read",
        Some(Unit::Seconds),
    );
    let synthetic = family::<Gauge>(
        registry,
        "operator_event_time_synthetic",
        "1 when the event time upstream does not follow the wall clock (records read more than a day from it: the lag behind the wall clock means nothing), 0 when it does",
        None,
    );
    let state_entries = family::<Gauge>(
        registry,
        "operator_state_entries",
        "Entries of keyed state and timers",
        None,
    );
    let state_bytes = family::<Gauge>(
        registry,
        "operator_state",
        "Estimated size of keyed state",
        Some(Unit::Bytes),
    );
    let latency = family::<FloatGauge>(
        registry,
        "operator_latency",
        "Latency markers' delay from the sources to the operator over the last minute, by quantile",
        Some(Unit::Seconds),
    );
    let split_lag = family::<Gauge>(
        registry,
        "source_split_lag_records",
        "Records a source split is behind its end (Kafka consumer lag per partition)",
        None,
    );
    for op in e.operators {
        for s in &op.subtasks {
            let subtask = s.subtask.to_string();
            let l = labels(&[("operator", &op.name), ("subtask", &subtask)]);
            records_in.get_or_create(&l).inc_by(s.records_in);
            records_out.get_or_create(&l).inc_by(s.records_out);
            bad.get_or_create(&l).inc_by(s.bad_records);
            late_dropped
                .get_or_create(&l)
                .inc_by(s.late_records_dropped);
            late_side
                .get_or_create(&l)
                .inc_by(s.late_records_side_output);
            outliers.get_or_create(&l).inc_by(s.watermark_outliers);
            unconsumed
                .get_or_create(&l)
                .inc_by(s.side_output_unconsumed);
            busy.get_or_create(&l).set(s.busy_ms_per_sec / 1e3);
            backpressured
                .get_or_create(&l)
                .set(s.backpressured_ms_per_sec / 1e3);
            idle.get_or_create(&l).set(s.idle_ms_per_sec / 1e3);
            if let Some(w) = s.watermark {
                watermark.get_or_create(&l).set(w as f64 / 1e3);
            }
            if let Some(lag) = s.watermark_lag_ms {
                watermark_lag.get_or_create(&l).set(lag as f64 / 1e3);
            }
            if let Some(lag) = s.watermark_lag_behind_newest_ms {
                watermark_lag_newest.get_or_create(&l).set(lag as f64 / 1e3);
            }
            if let Some(kind) = s.event_time {
                synthetic
                    .get_or_create(&l)
                    .set(i64::from(kind == EventTime::Synthetic));
            }
            state_entries.get_or_create(&l).set(s.state_entries as i64);
            state_bytes.get_or_create(&l).set(s.state_bytes as i64);
            if let Some(l) = &s.latency {
                for (quantile, ms) in [("0.5", l.p50_ms), ("0.99", l.p99_ms)] {
                    latency
                        .get_or_create(&labels(&[
                            ("operator", &op.name),
                            ("subtask", &subtask),
                            ("quantile", quantile),
                        ]))
                        .set(ms / 1e3);
                }
            }
            for (split, lag) in &s.split_lag {
                split_lag
                    .get_or_create(&labels(&[
                        ("operator", &op.name),
                        ("subtask", &subtask),
                        ("split", split),
                    ]))
                    .set(*lag);
            }
        }
    }

    let mut task_time =
        |name: &str, help: &str| family::<FloatCounter>(registry, name, help, Some(Unit::Seconds));
    let busy_s = task_time("task_busy", "Time the task spent processing");
    let bp_s = task_time(
        "task_backpressured",
        "Time the task spent blocked on full output channels",
    );
    let idle_s = task_time("task_idle", "Time the task spent waiting for input");
    for t in e.tasks {
        let subtask = t.subtask.to_string();
        let l = labels(&[("task", &t.name), ("subtask", &subtask)]);
        busy_s.get_or_create(&l).inc_by(t.busy_ns as f64 / 1e9);
        bp_s.get_or_create(&l)
            .inc_by(t.backpressured_ns as f64 / 1e9);
        idle_s.get_or_create(&l).inc_by(t.idle_ns as f64 / 1e9);
    }

    let checkpoints = family::<Counter>(
        registry,
        "checkpoints",
        "Checkpoints and savepoints, by kind and outcome",
        None,
    );
    for c in e.checkpoints {
        let kind = format!("{:?}", c.kind).to_lowercase();
        let outcome = if c.completed() { "completed" } else { "failed" };
        checkpoints
            .get_or_create(&labels(&[("kind", &kind), ("status", outcome)]))
            .inc();
    }
    if let Some(last) = e.checkpoints.iter().rev().find(|c| c.completed()) {
        let mut gauge = |name: &str, help: &str, unit: Unit, value: f64| {
            family::<FloatGauge>(registry, name, help, Some(unit))
                .get_or_create(&labels(&[]))
                .set(value);
        };
        gauge(
            "checkpoint_last_duration",
            "Trigger to completion of the latest completed checkpoint",
            Unit::Seconds,
            last.duration_ms as f64 / 1e3,
        );
        gauge(
            "checkpoint_last_alignment",
            "Longest barrier alignment of the latest completed checkpoint",
            Unit::Seconds,
            last.alignment_ms as f64 / 1e3,
        );
        gauge(
            "checkpoint_last_size",
            "Bytes the latest completed checkpoint wrote",
            Unit::Bytes,
            last.size_bytes as f64,
        );
        gauge(
            "checkpoint_last_state_size",
            "State the latest completed checkpoint holds (written or referenced)",
            Unit::Bytes,
            last.state_size_bytes as f64,
        );
    }
    if let Some(l) = e.latency {
        let job_latency = family::<FloatGauge>(
            registry,
            "job_latency",
            "End-to-end latency (latency markers, sources to sinks) over the last minute, by quantile",
            Some(Unit::Seconds),
        );
        for (quantile, ms) in [("0.5", l.p50_ms), ("0.99", l.p99_ms), ("1", l.max_ms)] {
            job_latency
                .get_or_create(&labels(&[("quantile", quantile)]))
                .set(ms / 1e3);
        }
    }
    if let Some(b) = e.bottleneck {
        family::<Gauge>(
            registry,
            "bottleneck",
            "1 for the operator that is busy while its upstream is back-pressured",
            None,
        )
        .get_or_create(&labels(&[("operator", &b.operator)]))
        .set(1);
    }

    let mut text = String::new();
    encode(&mut text, &root).expect("writing to a String cannot fail");
    text
}
