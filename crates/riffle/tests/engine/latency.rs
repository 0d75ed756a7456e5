//! Latency markers: sources send them every `latency_interval`, they travel the channels behind
//! the records (through a rebalance here), and every operator records how long they took. Under
//! back-pressure the markers wait in the full channels, so the sink's latency grows.

use std::time::Duration;

use riffle::sink::{CollectSink, ThrottledSink};
use riffle::{EnvConfig, StreamEnv};
use riffle_clicks::ClicksConfig;

/// Clicks at 20K/s through a rebalance into a sink that takes 2K/s per subtask, for 3 s; the
/// latencies (µs) each operator recorded.
fn run(latency_interval: Option<Duration>) -> Vec<(String, Vec<u64>)> {
    let env = StreamEnv::with_config(EnvConfig {
        parallelism: 1,
        latency_interval,
        ..EnvConfig::default()
    });
    let (sink, _) = CollectSink::new();
    env.from_source(riffle_clicks::source(ClicksConfig::default()).rate(20_000.0))
        .rebalance()
        .map(|c| c.user_id)
        .name("user")
        .sink(ThrottledSink::new(sink, 2_000.0));
    let job = env.execute_async().unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let metrics = job.metrics();
    job.cancel();
    let _ = job.wait();
    metrics
        .operator_names()
        .into_iter()
        .map(|name| {
            let latencies = metrics.operator_total(&name).unwrap().latencies_us;
            (name, latencies)
        })
        .collect()
}

#[test]
fn markers_reach_every_operator_and_wait_behind_a_slow_sink() {
    let seen = run(Some(Duration::from_millis(50)));
    let names: Vec<&str> = seen.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "Source: clicks",
            "user",
            "Sink: collect (throttled to 2000/s)"
        ]
    );
    let (_, user) = &seen[1];
    assert!(
        !user.is_empty(),
        "markers reached the operator after the rebalance"
    );
    let (_, source) = &seen[0];
    assert!(
        source.is_empty(),
        "a source sends markers, it does not record them"
    );
    let (_, sink) = seen.last().unwrap();
    // Under back-pressure markers reach the sink only as fast as the queue before it drains.
    assert!(sink.len() >= 3, "markers reached the sink: {}", sink.len());
    // The channel between the source and the sink fills (8 batches of 1024 records at 2K/s):
    // the last markers waited behind it.
    let latest = *sink.last().unwrap();
    assert!(latest > 300_000, "latest marker took {latest} µs");
    assert!(
        sink.windows(2).any(|w| w[1] > w[0]),
        "latency grows as the queue fills"
    );
}

#[test]
fn without_a_latency_interval_no_markers_are_sent() {
    for (name, latencies) in run(None) {
        assert!(latencies.is_empty(), "{name}: {latencies:?}");
    }
}
