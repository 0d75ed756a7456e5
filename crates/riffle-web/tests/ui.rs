//! The watermark lag as the REST API and the web UI (in Debian's headless Chromium, driven by
//! playwright-core: `scripts/test-tools.sh` installs it) show it. A job whose event time is
//! synthetic (the demos' clicks, counted from a fixed base on 2026-01-15) says "synthetic event
//! time" and shows the lag behind its newest record, not a lag of days behind the wall clock; a
//! job whose event time follows the wall clock shows its lag behind the wall clock.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{config, eventually};
use riffle::time::{Clock, SystemClock, WatermarkStrategy};
use riffle::{EnvConfig, JobHandle, StreamEnv};
use riffle_clicks::{Click, ClicksConfig};
use riffle_web::WebServer;
use riffle_web::client::JobClient;
use serde_json::Value;

const DAY_MS: i64 = 86_400_000;

/// Clicks paced at 5K/s, their event times from `start_time` at 5K per second of event time,
/// through a filter into a sink that drops them.
fn clicks_job(name: &str, start_time: i64) -> JobHandle {
    let env = StreamEnv::with_config(EnvConfig {
        parallelism: 1,
        job_name: name.into(),
        ..EnvConfig::default()
    });
    let clicks = ClicksConfig {
        start_time,
        events_per_second: 5_000.0,
        late_share: 0.0,
        ..ClicksConfig::default()
    };
    env.from_source_with_watermarks(
        riffle_clicks::source(clicks).rate(5_000.0),
        WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(2))
            .with_timestamps(|c: &Click| c.event_time),
    )
    .filter(|c| c.user_id % 2 == 0)
    .name("even users")
    .sink_fn(|_| Ok(()));
    env.execute_async().unwrap()
}

/// The job summary once the server has decided about its event time and charted a few points.
fn settled(client: &JobClient) -> Value {
    assert!(
        eventually(Duration::from_secs(30), || {
            let job = client.get("/api/v1/job").unwrap();
            let points = client.get("/api/v1/job/history").unwrap()["points"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| !p["event_time"].is_null())
                .count();
            !job["event_time"].is_null() && !job["watermark_lag_ms"].is_null() && points >= 3
        }),
        "no watermark: {}",
        client.get("/api/v1/job").unwrap()
    );
    client.get("/api/v1/job").unwrap()
}

/// What the UI shows of the watermark lag at `address` (tests/tools/watermark.mjs).
fn shown_in_chromium(address: &str) -> Value {
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools");
    let browser = Command::new("node")
        .arg(tools.join("watermark.mjs"))
        .arg(format!("http://{address}/"))
        .output()
        .expect(
            "node runs (./scripts/install-deps.sh installs it and Chromium; \
             eval \"$(./scripts/test-tools.sh)\" installs playwright-core)",
        );
    let stdout = String::from_utf8_lossy(&browser.stdout);
    assert!(
        browser.status.success(),
        "the UI test failed (eval \"$(./scripts/test-tools.sh)\" runs `npm ci` in {}; Chromium at \
         $RIFFLE_CHROMIUM or /usr/bin/chromium):\n{stdout}\n{}",
        tools.display(),
        String::from_utf8_lossy(&browser.stderr)
    );
    let shown: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(shown["errors"], serde_json::json!([]), "no script errors");
    println!("{address}: {shown}");
    shown
}

/// Whether `text` reads as a duration of days (`duration()` in app.js).
fn in_days(text: &str) -> bool {
    text.split_whitespace().any(|word| word == "d")
}

#[test]
fn synthetic_event_time_shows_the_lag_behind_the_newest_record_and_live_event_time_its_lag() {
    let dir = tempfile::tempdir().unwrap();
    let now = SystemClock.now();
    assert!(
        now - riffle_clicks::DEFAULT_START_TIME > 2 * DAY_MS,
        "the demos' clicks start on 2026-01-15: this test wants a wall clock days after it"
    );
    let synthetic = clicks_job("synthetic", riffle_clicks::DEFAULT_START_TIME);
    let live = clicks_job("live", now);
    let synthetic_web = WebServer::start(synthetic.monitor(), config(dir.path())).unwrap();
    let live_web = WebServer::start(live.monitor(), config(dir.path())).unwrap();
    let synthetic_client = JobClient::new(&synthetic_web.address().to_string(), None);
    let live_client = JobClient::new(&live_web.address().to_string(), None);

    // The API: the decision, both lags under their own names.
    let job = settled(&synthetic_client);
    assert_eq!(job["event_time"], "synthetic", "{job}");
    assert!(
        job["watermark_lag_ms"].as_i64().unwrap() > 300 * DAY_MS,
        "behind the wall clock, as before: {job}"
    );
    let behind_newest = job["watermark_lag_behind_newest_ms"].as_i64().unwrap();
    assert!((0..60_000).contains(&behind_newest), "{job}");
    for op in synthetic_client
        .get("/api/v1/job/operators")
        .unwrap()
        .as_array()
        .unwrap()
    {
        assert_eq!(op["event_time"], "synthetic", "{op}");
        assert!(
            op["newest_event_behind_wall_clock_ms"].as_i64().unwrap() > 300 * DAY_MS,
            "{op}"
        );
        assert_eq!(op["subtasks"][0]["event_time"], "synthetic", "{op}");
    }
    let job = settled(&live_client);
    assert_eq!(job["event_time"], "wall_clock", "{job}");
    let lag = job["watermark_lag_ms"].as_i64().unwrap();
    assert!((0..60_000).contains(&lag), "{job}");
    let source = live_client
        .get("/api/v1/job/operators/Source: clicks")
        .unwrap();
    assert_eq!(source["event_time"], "wall_clock", "{source}");
    assert!(
        source["newest_event_behind_wall_clock_ms"]
            .as_i64()
            .unwrap()
            .abs()
            < 60_000,
        "{source}"
    );

    // The UI.
    let shown = shown_in_chromium(&synthetic_web.address().to_string());
    let counter = shown["counter"].as_str().unwrap();
    assert!(
        counter.ends_with(" behind newest record") && !in_days(counter),
        "{shown}"
    );
    assert_eq!(shown["note"], "synthetic event time", "{shown}");
    assert!(
        shown["counterTitle"]
            .as_str()
            .unwrap()
            .starts_with("synthetic event time"),
        "{shown}"
    );
    assert_eq!(
        shown["caption"],
        "Watermark lag behind the newest record, s (synthetic event time)"
    );
    let operators = shown["operators"].as_array().unwrap();
    assert_eq!(operators.len(), 3, "{shown}");
    for op in operators {
        let lag = op["lag"].as_str().unwrap();
        assert_eq!(op["eventTime"], "synthetic", "{op}");
        assert!(
            lag.ends_with(" behind newest record") && !in_days(lag),
            "{op}"
        );
    }

    let shown = shown_in_chromium(&live_web.address().to_string());
    let counter = shown["counter"].as_str().unwrap();
    assert!(
        (counter.ends_with(" s") || counter.ends_with(" ms")) && !counter.contains("newest"),
        "{shown}"
    );
    assert_eq!(shown["note"], Value::Null, "{shown}");
    assert_eq!(shown["caption"], "Watermark lag behind the wall clock, s");
    for op in shown["operators"].as_array().unwrap() {
        assert_eq!(op["eventTime"], "wall_clock", "{op}");
        let lag = op["lag"].as_str().unwrap();
        assert!(lag.ends_with(" s") || lag.ends_with(" ms"), "{op}");
    }

    for job in [synthetic, live] {
        job.cancel();
        let _ = job.wait();
    }
}
