//! `/metrics` parsed by the official Prometheus Python client's parsers (`tests/tools/promparse.py`;
//! `scripts/test.sh` installs `prometheus-client` into `.tools/venv` and exports `RIFFLE_PYTHON`):
//! the strict OpenMetrics parser for what Prometheus negotiates, the text format 0.0.4 parser for
//! scrapers that do not ask for OpenMetrics; values that match the job's real counts.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{config, eventually, running_job};
use serde_json::Value;

/// One sample of the exposition.
#[derive(Debug)]
struct Sample {
    family: String,
    kind: String,
    name: String,
    labels: serde_json::Map<String, Value>,
    value: f64,
}

/// Parses `text` with the Prometheus client's parser of `format` (`openmetrics` or `classic`);
/// panics with its message.
fn parse_as(format: &str, text: &str) -> Vec<Sample> {
    let python = std::env::var("RIFFLE_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tools/promparse.py");
    let mut child = Command::new(&python)
        .arg(script)
        .arg(format)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run {python} (scripts/test.sh sets RIFFLE_PYTHON): {e}")
        });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the {format} parser rejected the exposition ({python} needs prometheus-client, see scripts/test.sh): {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap();
            Sample {
                family: v["family"].as_str().unwrap().into(),
                kind: v["type"].as_str().unwrap().into(),
                name: v["name"].as_str().unwrap().into(),
                labels: v["labels"].as_object().unwrap().clone(),
                value: v["value"].as_f64().unwrap(),
            }
        })
        .collect()
}

/// The sum of the samples called `name` whose labels include `labels`.
fn sum(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    let matching: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).and_then(Value::as_str) == Some(*v))
        })
        .collect();
    assert!(!matching.is_empty(), "no sample {name} {labels:?}");
    matching.iter().map(|s| s.value).sum()
}

/// GETs `/metrics` asking for `accept` (as Prometheus does) or for nothing in particular.
fn get_metrics(address: &str, accept: Option<&str>) -> (String, String) {
    let mut request = reqwest::blocking::Client::new().get(format!("http://{address}/metrics"));
    if let Some(accept) = accept {
        request = request.header("accept", accept);
    }
    let response = request.send().unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    (content_type, response.text().unwrap())
}

/// What Prometheus 3 sends.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";

/// The exposition as Prometheus negotiates it (OpenMetrics), parsed by the strict parser.
fn parse(address: &str) -> Vec<Sample> {
    let (content_type, text) = get_metrics(address, Some(PROMETHEUS_ACCEPT));
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    parse_as("openmetrics", &text)
}

#[test]
fn metrics_parse_as_openmetrics_and_match_the_jobs_counts() {
    let dir = tempfile::tempdir().unwrap();
    let job = running_job(dir.path());
    let web = riffle_web::WebServer::start(job.monitor(), config(dir.path())).unwrap();
    let address = web.address().to_string();
    assert!(eventually(Duration::from_secs(20), || {
        job.checkpoints().iter().filter(|c| c.completed()).count() >= 2
    }));

    let running = parse(&address);
    assert_eq!(
        sum(&running, "riffle_job_status", &[("status", "RUNNING")]),
        1.0
    );
    assert_eq!(
        sum(&running, "riffle_job_status", &[("status", "FINISHED")]),
        0.0
    );
    assert!(
        sum(
            &running,
            "riffle_operator_records_out_total",
            &[("operator", "Source: clicks")]
        ) > 0.0
    );
    // Clicks of 2026-01-15: the watermark is hours behind the wall clock.
    assert!(
        sum(
            &running,
            "riffle_operator_watermark_lag_seconds",
            &[("operator", "Source: clicks"), ("subtask", "0")]
        ) > 3600.0
    );
    // ... which is why the UI shows the lag behind the newest record: synthetic event time,
    // upstream of every operator, and the watermark seconds behind the newest click.
    for operator in ["Source: clicks", "even users"] {
        assert_eq!(
            sum(
                &running,
                "riffle_operator_event_time_synthetic",
                &[("operator", operator)]
            ),
            2.0,
            "{operator}: both subtasks"
        );
    }
    let behind_newest = sum(
        &running,
        "riffle_operator_watermark_lag_behind_newest_seconds",
        &[("operator", "Source: clicks"), ("subtask", "0")],
    );
    assert!((0.0..60.0).contains(&behind_newest), "{behind_newest}");

    assert!(
        sum(
            &running,
            "riffle_job_latency_seconds",
            &[("quantile", "0.99")]
        ) >= 0.0
    );
    assert!(
        sum(
            &running,
            "riffle_operator_latency_seconds",
            &[("operator", "even users"), ("quantile", "0.5")]
        ) >= 0.0
    );
    job.stop();
    let result = job.wait().unwrap();
    let samples = parse(&address);
    for s in &samples {
        assert!(s.family.starts_with("riffle_"), "{}", s.family);
        assert_eq!(
            s.labels.get("job_name").and_then(Value::as_str),
            Some("clicks-api"),
            "{}",
            s.name
        );
    }
    let kind_of = |family: &str| {
        samples
            .iter()
            .find(|s| s.family == family)
            .map(|s| s.kind.clone())
            .unwrap_or_else(|| panic!("no family {family}"))
    };
    assert_eq!(kind_of("riffle_operator_records_in"), "counter");
    assert_eq!(kind_of("riffle_task_busy_seconds"), "counter");
    assert_eq!(kind_of("riffle_operator_backpressured_ratio"), "gauge");
    assert_eq!(kind_of("riffle_operator_state_bytes"), "gauge");
    assert_eq!(
        sum(&samples, "riffle_job_status", &[("status", "FINISHED")]),
        1.0
    );
    assert_eq!(sum(&samples, "riffle_job_restarts_total", &[]), 0.0);
    assert_eq!(
        sum(
            &samples,
            "riffle_operator_records_out_total",
            &[("operator", "Source: clicks")]
        ),
        result.records_out("Source: clicks") as f64
    );
    assert_eq!(
        sum(
            &samples,
            "riffle_operator_records_in_total",
            &[("operator", "even users")]
        ),
        result.records_in("even users") as f64
    );
    assert_eq!(
        sum(
            &samples,
            "riffle_operator_records_out_total",
            &[("operator", "even users")]
        ),
        result.records_out("even users") as f64
    );
    assert_eq!(
        sum(
            &samples,
            "riffle_checkpoints_total",
            &[("kind", "checkpoint"), ("status", "completed")]
        ),
        result.completed_checkpoints() as f64
    );
    assert!(sum(&samples, "riffle_checkpoint_last_duration_seconds", &[]) >= 0.0);
    // Every task's time is accounted: busy + back-pressured + idle = its run time.
    for task in &result.metrics.tasks {
        let subtask = task.subtask.to_string();
        let labels = [("task", task.name.as_str()), ("subtask", subtask.as_str())];
        let total = sum(&samples, "riffle_task_busy_seconds_total", &labels)
            + sum(&samples, "riffle_task_backpressured_seconds_total", &labels)
            + sum(&samples, "riffle_task_idle_seconds_total", &labels);
        let elapsed = task.elapsed_ns as f64 / 1e9;
        assert!(
            (total - elapsed).abs() < 0.01,
            "{}: {total} vs {elapsed}",
            task.name
        );
    }

    // Without an Accept header: the classic text format, the same samples, counters typed.
    let (content_type, classic) = get_metrics(&address, None);
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    assert!(!classic.contains("# EOF") && !classic.contains("# UNIT"));
    let classic = parse_as("classic", &classic);
    let comparable = |samples: &[Sample]| {
        let mut v: Vec<String> = samples
            .iter()
            // Both move with the wall clock between the two scrapes.
            .filter(|s| {
                s.name != "riffle_job_uptime_seconds"
                    && s.name != "riffle_operator_watermark_lag_seconds"
            })
            .map(|s| format!("{} {:?} {}", s.name, s.labels, s.value))
            .collect();
        v.sort();
        v
    };
    assert_eq!(comparable(&classic), comparable(&samples));
    let counter = classic
        .iter()
        .find(|s| s.name == "riffle_operator_records_in_total")
        .unwrap();
    assert_eq!(counter.kind, "counter", "{counter:?}");
}
