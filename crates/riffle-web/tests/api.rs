//! The REST API against running jobs: exact shapes and values that match the job's real counts,
//! savepoint / stop with savepoint / cancel, tokens, and 4xx answers to bad requests.

mod common;

use std::time::Duration;

use common::{config, eventually, running_job};
use riffle::StreamEnv;
use riffle::runtime::JobStatus;
use riffle::sink::CollectSink;
use riffle_web::client::{ClientError, JobClient};
use riffle_web::{WebConfig, WebServer};
use serde_json::{Value, json};

/// The keys of a JSON object, sorted.
fn keys(value: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = value
        .as_object()
        .unwrap_or_else(|| panic!("an object: {value}"))
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    keys
}

/// The fields of an operator and of each of its subtasks (the API's contract).
const SUBTASK_FIELDS: [&str; 24] = [
    "backpressure",
    "backpressured_ms_per_sec",
    "bad_records",
    "busy_ms_per_sec",
    "event_time",
    "idle_ms_per_sec",
    "late_records_dropped",
    "late_records_side_output",
    "latency",
    "newest_event_behind_wall_clock_ms",
    "newest_event_time",
    "records_in",
    "records_in_per_sec",
    "records_out",
    "records_out_per_sec",
    "side_output_unconsumed",
    "split_lag",
    "state_bytes",
    "state_entries",
    "subtask",
    "watermark",
    "watermark_lag_behind_newest_ms",
    "watermark_lag_ms",
    "watermark_outliers",
];

fn status(client: &JobClient) -> String {
    client.get("/api/v1/job").unwrap()["status"]
        .as_str()
        .unwrap()
        .to_string()
}

fn error_of(result: Result<Value, ClientError>) -> (u16, String) {
    match result {
        Err(ClientError::Status(code, message)) => (code, message),
        other => panic!("expected an error status, got {other:?}"),
    }
}

#[test]
fn a_finished_job_reports_exactly_its_counts_graph_and_operators() {
    let env = StreamEnv::new();
    env.set_parallelism(2);
    env.configure(|c| c.job_name = "evens".into());
    let (sink, collected) = CollectSink::new();
    env.from_iter((0..1000u64).collect::<Vec<_>>())
        .filter(|x| x % 2 == 0)
        .name("evens")
        .rebalance()
        .map(|x| x * 3)
        .name("triple")
        .sink(sink);
    let job = env.execute_async().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let web = WebServer::start(job.monitor(), config(dir.path())).unwrap();
    let client = JobClient::new(&web.address().to_string(), None);
    let plan = job.plan().clone();
    let result = job.wait().unwrap();
    assert_eq!(collected.len(), 500);

    let overview = client.get("/api/v1/job").unwrap();
    assert_eq!(overview["name"], "evens");
    assert_eq!(overview["status"], "FINISHED");
    assert_eq!(overview["stopping"], false);
    assert_eq!(overview["restarts"], 0);
    assert_eq!(overview["parallelism"], 2);
    assert_eq!(overview["checkpoint_interval_ms"], Value::Null);
    assert_eq!(overview["source_records"], 1000);
    assert_eq!(overview["sink_records"], 500);
    assert_eq!(overview["late_records"], 0);
    assert_eq!(overview["bad_records"], 0);
    assert_eq!(overview["checkpoints_completed"], 0);
    assert_eq!(overview["id"].as_str().unwrap().len(), 8);
    assert_eq!(
        keys(&overview),
        [
            "bad_records",
            "bottleneck",
            "checkpoint_interval_ms",
            "checkpoints_completed",
            "checkpoints_failed",
            "event_time",
            "id",
            "last_failure",
            "late_records",
            "latency",
            "name",
            "parallelism",
            "restarts",
            "sink_records",
            "sink_records_per_sec",
            "source_records",
            "source_records_per_sec",
            "started_at",
            "status",
            "stopping",
            "uptime_ms",
            "watermark_lag_behind_newest_ms",
            "watermark_lag_ms"
        ]
    );

    let graph = client.get("/api/v1/job/graph").unwrap();
    let vertices = graph["vertices"].as_array().unwrap();
    assert_eq!(vertices.len(), plan.vertices.len());
    for (v, planned) in vertices.iter().zip(&plan.vertices) {
        assert_eq!(
            keys(v),
            [
                "backpressure",
                "backpressured_ms_per_sec",
                "busy_ms_per_sec",
                "id",
                "name",
                "operators",
                "parallelism",
                "records_per_sec"
            ]
        );
        assert_eq!(v["name"], planned.name.as_str());
        assert_eq!(v["parallelism"], planned.parallelism);
        assert!(["OK", "LOW", "HIGH"].contains(&v["backpressure"].as_str().unwrap()));
    }
    assert_eq!(
        graph["edges"],
        serde_json::to_value(&plan.edges).unwrap(),
        "edges as planned"
    );
    assert_eq!(
        graph["edges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["ship"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["REBALANCE"]
    );

    let operators = client.get("/api/v1/job/operators").unwrap();
    let operators = operators.as_array().unwrap();
    let names: Vec<&str> = operators
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    let planned: Vec<&str> = plan
        .vertices
        .iter()
        .flat_map(|v| v.operators.iter().map(String::as_str))
        .collect();
    assert_eq!(names, planned);
    for op in operators {
        let name = op["name"].as_str().unwrap();
        let expected = result.metrics.operator_total(name).unwrap();
        assert_eq!(op["records_in"], expected.records_in, "{name}");
        assert_eq!(op["records_out"], expected.records_out, "{name}");
        let subtasks = op["subtasks"].as_array().unwrap();
        assert_eq!(subtasks.len(), op["parallelism"].as_u64().unwrap() as usize);
        let sum: u64 = subtasks
            .iter()
            .map(|s| s["records_in"].as_u64().unwrap())
            .sum();
        assert_eq!(sum, expected.records_in, "{name}: subtasks add up");
        let subtask_fields: Vec<&str> = SUBTASK_FIELDS.to_vec();
        let mut operator_fields = subtask_fields.clone();
        operator_fields.extend(["name", "parallelism", "subtasks", "vertex"]);
        operator_fields.sort();
        assert_eq!(keys(op), operator_fields, "{name}");
        for subtask in subtasks {
            assert_eq!(keys(subtask), subtask_fields, "{name}");
        }
    }
    let evens = client.get("/api/v1/job/operators/evens").unwrap();
    assert_eq!(
        (evens["records_in"].as_u64(), evens["records_out"].as_u64()),
        (Some(1000), Some(500))
    );
    let triple = client.get("/api/v1/job/operators/triple").unwrap();
    assert_eq!(triple["records_out"], 500);
    // An end-of-input watermark is not behind the wall clock, nor behind a newest record; and
    // records without event time tell nothing about it.
    assert_eq!(triple["watermark_lag_ms"], Value::Null);
    assert_eq!(triple["watermark_lag_behind_newest_ms"], Value::Null);
    assert_eq!(triple["event_time"], Value::Null);
    assert_eq!(overview["event_time"], Value::Null);

    let checkpoints = client.get("/api/v1/job/checkpoints").unwrap();
    assert_eq!(
        checkpoints,
        json!({ "completed": 0, "failed": 0, "latest_completed": null, "history": [] })
    );
    assert_eq!(client.get("/api/v1/job/bottleneck").unwrap(), Value::Null);
    let openapi = client.get("/api/v1/openapi.json").unwrap();
    assert!(openapi["paths"]["/api/v1/job"].is_object(), "{openapi}");

    // Control on a finished job: 409.
    let (code, message) = error_of(client.post("/api/v1/job/cancel", &json!({})));
    assert_eq!(code, 409, "{message}");
}

#[test]
fn a_running_job_shows_rates_checkpoints_and_history_then_stops_with_a_savepoint() {
    let dir = tempfile::tempdir().unwrap();
    let job = running_job(dir.path());
    let target = dir.path().join("my-savepoints");
    let web = WebServer::start(
        job.monitor(),
        WebConfig {
            savepoint_roots: vec![target.display().to_string()],
            ..config(dir.path())
        },
    )
    .unwrap();
    let client = JobClient::new(&web.address().to_string(), None);
    assert!(eventually(Duration::from_secs(20), || {
        let job = client.get("/api/v1/job").unwrap();
        let history = client.get("/api/v1/job/history").unwrap();
        job["checkpoints_completed"].as_u64().unwrap() >= 2
            && job["source_records_per_sec"].as_f64().unwrap() > 1000.0
            && history["points"].as_array().unwrap().len() >= 5
    }));
    let overview = client.get("/api/v1/job").unwrap();
    assert_eq!(overview["status"], "RUNNING");
    assert_eq!(overview["name"], "clicks-api");
    assert_eq!(overview["checkpoint_interval_ms"], 200);
    // Latency markers (every second) reached the sink of this single chain.
    let latency = &overview["latency"];
    assert!(latency["samples"].as_u64().unwrap() >= 1, "{overview}");
    assert!(latency["p50_ms"].as_f64().unwrap() <= latency["p99_ms"].as_f64().unwrap());
    let source = client.get("/api/v1/job/operators/Source: clicks").unwrap();
    let rate = source["records_out_per_sec"].as_f64().unwrap();
    assert!(
        (10_000.0..30_000.0).contains(&rate),
        "paced at 20K/s: {rate}"
    );
    // Synthetic clicks of 2026-01-15: the watermark is far behind the wall clock, which the
    // job says, with the lag behind the newest click (tests/ui.rs has more).
    assert!(
        source["watermark_lag_ms"].as_i64().unwrap() > 3_600_000,
        "{source}"
    );
    assert_eq!(source["event_time"], "synthetic", "{source}");
    assert_eq!(overview["event_time"], "synthetic", "{overview}");
    assert!(
        (0..60_000).contains(&source["watermark_lag_behind_newest_ms"].as_i64().unwrap()),
        "{source}"
    );
    let checkpoints = client.get("/api/v1/job/checkpoints").unwrap();
    let latest = &checkpoints["latest_completed"];
    for key in [
        "id",
        "status",
        "duration_ms",
        "alignment_ms",
        "size_bytes",
        "triggered_at",
    ] {
        assert!(latest.get(key).is_some(), "{key} in {latest}");
    }
    assert_eq!(latest["status"], "completed");
    let history = client.get("/api/v1/job/history?seconds=60").unwrap();
    let points = history["points"].as_array().unwrap();
    assert!(points.len() >= 5, "{history}");
    assert!(
        points.last().unwrap()["source_records_per_sec"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    assert_eq!(
        history["vertices"].as_array().unwrap().len(),
        job.plan().vertices.len()
    );

    // A savepoint while running (into an allowed root), then a stop with savepoint.
    let taken = client
        .post(
            "/api/v1/job/savepoints",
            &json!({ "target_directory": target }),
        )
        .unwrap();
    let location = taken["location"].as_str().unwrap();
    assert!(location.starts_with(target.to_str().unwrap()), "{location}");
    assert!(
        std::path::Path::new(location)
            .join("_manifest.json")
            .exists()
    );
    assert_eq!(status(&client), "RUNNING");
    let stopped = client
        .post("/api/v1/job/stop", &json!({ "savepoint": true }))
        .unwrap();
    let location = stopped["savepoint"].as_str().unwrap();
    assert!(
        location.starts_with(dir.path().join("savepoints").to_str().unwrap()),
        "default dir: {location}"
    );
    assert!(
        std::path::Path::new(location)
            .join("_manifest.json")
            .exists()
    );
    job.wait().unwrap();
    assert_eq!(status(&client), "FINISHED");
    let savepoints = client.get("/api/v1/job/checkpoints").unwrap()["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kind"] == "savepoint")
        .count();
    assert_eq!(savepoints, 2);
}

#[test]
fn cancel_needs_the_token_when_one_is_set() {
    let dir = tempfile::tempdir().unwrap();
    let job = running_job(dir.path());
    let web = WebServer::start(
        job.monitor(),
        WebConfig {
            token: Some("s3cret".into()),
            ..config(dir.path())
        },
    )
    .unwrap();
    let address = web.address().to_string();
    let anonymous = JobClient::new(&address, None);
    let (code, message) = error_of(anonymous.post("/api/v1/job/cancel", &json!({})));
    assert_eq!(code, 401, "{message}");
    assert!(message.contains("token"), "{message}");
    // Wrong tokens, of another length and of the same length, differing in the last byte.
    for guess in ["guess", "s3creT", "s3cret-and-more", ""] {
        let wrong = JobClient::new(&address, Some(guess.into()));
        assert_eq!(
            error_of(wrong.post("/api/v1/job/cancel", &json!({}))).0,
            401,
            "{guess}"
        );
    }
    // Reading needs no token.
    assert_eq!(status(&anonymous), "RUNNING");
    let owner = JobClient::new(&address, Some("s3cret".into()));
    let answer = owner.post("/api/v1/job/cancel", &json!({})).unwrap();
    assert_eq!(answer["status"], "cancelling");
    assert!(matches!(job.wait(), Err(riffle::Error::Cancelled)));
    assert_eq!(status(&anonymous), "CANCELLED");
    assert_eq!(job_status_name(JobStatus::Cancelled), "CANCELLED");
}

#[test]
fn a_member_of_a_process_group_serves_the_groups_status_and_others_say_they_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let job = running_job(dir.path());
    let single = WebServer::start(job.monitor(), config(dir.path())).unwrap();
    let client = JobClient::new(&single.address().to_string(), None);
    let (code, message) = error_of(client.get("/api/v1/group"));
    assert_eq!(code, 404, "{message}");
    assert!(message.contains("not in a process group"), "{message}");
    // A member: whatever its status source answers (riffle_kafka::KafkaGroup::status in
    // `riffle demo --group`), or 503 with its error.
    let answers = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let status = {
        let answers = answers.clone();
        riffle_web::GroupStatus::new(move || {
            if answers.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                Ok(json!({ "group": "clicks-job", "owned": ["clicks-3"], "lag": { "clicks": 7 } }))
            } else {
                Err("the brokers do not answer".into())
            }
        })
    };
    let member = WebServer::start(
        job.monitor(),
        WebConfig {
            group: Some(status),
            ..config(dir.path())
        },
    )
    .unwrap();
    let client = JobClient::new(&member.address().to_string(), None);
    assert_eq!(
        client.get("/api/v1/group").unwrap(),
        json!({ "group": "clicks-job", "owned": ["clicks-3"], "lag": { "clicks": 7 } })
    );
    let (code, message) = error_of(client.get("/api/v1/group"));
    assert_eq!(code, 503, "{message}");
    assert!(message.contains("brokers"), "{message}");
    let (code, _) = error_of(client.get("/api/v1/group?member=1"));
    assert_eq!(code, 400);
    let openapi = client.get("/api/v1/openapi.json").unwrap();
    assert!(openapi["paths"]["/api/v1/group"].is_object());
    job.cancel();
    let _ = job.wait();
}

fn job_status_name(status: JobStatus) -> String {
    serde_json::to_value(status)
        .unwrap()
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn bad_requests_get_a_4xx_with_a_message_and_the_job_runs_on() {
    let dir = tempfile::tempdir().unwrap();
    let job = running_job(dir.path());
    let web = WebServer::start(job.monitor(), config(dir.path())).unwrap();
    let address = web.address().to_string();
    let client = JobClient::new(&address, None);
    let http = reqwest::blocking::Client::new();
    let raw = |method: reqwest::Method, path: &str, body: &str| {
        let response = http
            .request(method, format!("http://{address}{path}"))
            .header("content-type", "application/json")
            .header("x-riffle-request", "1")
            .body(body.to_string())
            .send()
            .unwrap();
        let code = response.status().as_u16();
        let json: Value = response.json().unwrap();
        (code, json["error"].as_str().unwrap_or_default().to_string())
    };
    use reqwest::Method;
    let cases: Vec<(Method, &str, &str, u16, &str)> = vec![
        (Method::GET, "/api/v1/nope", "", 404, "no such endpoint"),
        (
            Method::GET,
            "/api/v1/job/operators/nope",
            "",
            404,
            "no operator `nope`",
        ),
        (Method::DELETE, "/api/v1/job", "", 405, "not allowed"),
        (
            Method::GET,
            "/api/v1/job/history?seconds=abc",
            "",
            400,
            "seconds",
        ),
        (Method::GET, "/api/v1/job/history?bogus=1", "", 400, "bogus"),
        (
            Method::GET,
            "/api/v1/job/history?seconds=18446744073709551615",
            "",
            400,
            "seconds=18446744073709551615 is out of range: from 1 to 86400",
        ),
        (
            Method::GET,
            "/api/v1/job/history?seconds=0",
            "",
            400,
            "seconds=0 is out of range",
        ),
        (
            Method::GET,
            "/api/v1/job/history?seconds=86401",
            "",
            400,
            "out of range",
        ),
        (
            Method::GET,
            "/api/v1/job/history?seconds=-1",
            "",
            400,
            "seconds",
        ),
        (
            Method::GET,
            "/api/v1/job/history?seconds=99999999999999999999",
            "",
            400,
            "seconds",
        ),
        (
            Method::GET,
            "/api/v1/job?seconds=1",
            "",
            400,
            "/api/v1/job takes no query parameters (got `seconds=1`)",
        ),
        (
            Method::GET,
            "/api/v1/job/graph?x",
            "",
            400,
            "takes no query parameters",
        ),
        (
            Method::GET,
            "/api/v1/job/operators?limit=5",
            "",
            400,
            "takes no query parameters",
        ),
        (
            Method::GET,
            "/api/v1/job/operators/even%20users?x=1",
            "",
            400,
            "takes no query parameters",
        ),
        (
            Method::GET,
            "/api/v1/job/bottleneck?x=1",
            "",
            400,
            "takes no query parameters",
        ),
        (
            Method::GET,
            "/api/v1/job/checkpoints?last=1",
            "",
            400,
            "takes no query parameters",
        ),
        (
            Method::GET,
            "/api/v1/openapi.json?v=2",
            "",
            400,
            "takes no query parameters",
        ),
        (
            Method::POST,
            "/api/v1/job/savepoints?target_directory=/tmp",
            "",
            400,
            "takes no query parameters",
        ),
        (Method::GET, "/api/v1/job/identity", "", 400, "challenge"),
        (
            Method::GET,
            "/api/v1/job/identity?challenge=zz",
            "",
            400,
            "challenge must be 32 to 128 hex digits",
        ),
        (
            Method::GET,
            "/api/v1/job/identity?challenge=00112233445566778899aabbccddeeff&x=1",
            "",
            400,
            "unknown field",
        ),
        (
            Method::POST,
            "/api/v1/job/savepoints",
            "{not json",
            400,
            "malformed JSON",
        ),
        (
            Method::POST,
            "/api/v1/job/savepoints",
            r#"{"target":"/tmp/x"}"#,
            400,
            "unknown field",
        ),
        (
            Method::POST,
            "/api/v1/job/savepoints",
            r#"{"target_directory":"relative/dir"}"#,
            400,
            "absolute",
        ),
        (
            Method::POST,
            "/api/v1/job/savepoints",
            r#"{"target_directory":"/tmp/../etc"}"#,
            403,
            "`..`",
        ),
        (
            Method::POST,
            "/api/v1/job/savepoints",
            r#"{"target_directory":"s3://"}"#,
            400,
            "s3://bucket",
        ),
        (
            Method::POST,
            "/api/v1/job/stop",
            r#"{"target_directory":"/tmp/sp"}"#,
            400,
            "savepoint",
        ),
        (
            Method::POST,
            "/api/v1/job/stop",
            r#"{"savepoint":"yes"}"#,
            400,
            "malformed JSON",
        ),
        (Method::GET, "/ui/nope.js", "", 404, "no UI file"),
    ];
    for (method, path, body, code, needle) in cases {
        let (got, message) = raw(method.clone(), path, body);
        assert_eq!(got, code, "{method} {path} {body}: {message}");
        assert!(
            message.contains(needle),
            "{method} {path} {body}: `{message}` lacks `{needle}`"
        );
    }
    // A file where the savepoint directory should be (inside the default directory).
    std::fs::create_dir_all(dir.path().join("savepoints")).unwrap();
    let file = dir.path().join("savepoints/a-file");
    std::fs::write(&file, "x").unwrap();
    let (code, message) = error_of(client.post(
        "/api/v1/job/savepoints",
        &json!({ "target_directory": file }),
    ));
    assert_eq!(code, 400, "{message}");
    assert!(message.contains("not a directory"), "{message}");
    assert_eq!(status(&client), "RUNNING");
    job.cancel();
    let _ = job.wait();
}

#[test]
fn listening_beyond_loopback_without_a_token_fails_naming_the_setting() {
    let env = StreamEnv::new();
    let (sink, _) = CollectSink::new();
    env.from_iter(vec![1u64]).sink(sink);
    let job = env.execute_async().unwrap();
    let err = WebServer::start(
        job.monitor(),
        WebConfig {
            address: "0.0.0.0:0".parse().unwrap(),
            ..WebConfig::any_port()
        },
    )
    .err()
    .expect("refused")
    .to_string();
    assert!(err.contains("web.token"), "{err}");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let err = WebServer::start(
        job.monitor(),
        WebConfig {
            address: taken.local_addr().unwrap(),
            ..WebConfig::any_port()
        },
    )
    .err()
    .expect("address in use")
    .to_string();
    assert!(err.contains("web.address"), "{err}");
    job.wait().unwrap();
}

#[test]
fn a_failing_job_shows_restarting_then_running_with_its_failure() {
    use riffle::checkpoint::{CheckpointConfig, RestartStrategy};
    use riffle_testing::fail_once_after;
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::with_config(riffle::EnvConfig {
        parallelism: 1,
        job_name: "flaky".into(),
        checkpoints: CheckpointConfig {
            interval: Some(Duration::from_millis(100)),
            storage: dir.path().join("checkpoints").display().to_string(),
            restart: RestartStrategy::FixedDelay {
                attempts: 3,
                delay: Duration::from_millis(1500),
            },
            ..CheckpointConfig::default()
        },
        ..riffle::EnvConfig::default()
    });
    let (sink, _) = CollectSink::new();
    env.from_source(riffle_clicks::source(Default::default()).rate(5_000.0))
        .map(fail_once_after(5_000))
        .name("flaky map")
        .sink(sink);
    let job = env.execute_async().unwrap();
    let web = WebServer::start(job.monitor(), config(dir.path())).unwrap();
    let client = JobClient::new(&web.address().to_string(), None);
    // The failure comes after ~1 s; the restart waits 1.5 s.
    assert!(eventually(Duration::from_secs(20), || status(&client) == "RESTARTING"));
    let overview = client.get("/api/v1/job").unwrap();
    assert_eq!(overview["restarts"], 1);
    let failure = overview["last_failure"].as_str().unwrap();
    assert!(
        failure.contains("flaky map") && failure.contains("injected failure"),
        "{failure}"
    );
    assert!(eventually(Duration::from_secs(20), || status(&client) == "RUNNING"));
    job.cancel();
    let _ = job.wait();
}
