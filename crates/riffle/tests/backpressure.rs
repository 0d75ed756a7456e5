//! The seed's scenario 4 at the engine level: a slow sink stalls the pipeline without running out
//! of memory. The source's rate follows the sink's, the records in flight never exceed what the
//! channels can hold, the upstream task reports back-pressure and the sink reports busy.
//!
//! In its own test binary so that nothing else runs in the process while memory is watched.

use std::time::Duration;

use riffle::metrics::{MetricsSnapshot, process_rss_bytes};
use riffle::sink::{BlackholeSink, ThrottledSink};
use riffle::{EnvConfig, StreamEnv};
use riffle_clicks::ClicksConfig;

const PARALLELISM: usize = 2;
const BATCH: usize = 256;
const CAPACITY: usize = 4;
const SINK_RATE: f64 = 5_000.0;

fn in_flight(snapshot: &MetricsSnapshot) -> u64 {
    let produced = snapshot
        .operator_total("Source: clicks")
        .unwrap()
        .records_out;
    let consumed = snapshot.operator_total("slow sink").unwrap().records_in;
    produced - consumed
}

#[test]
fn a_slow_sink_backpressures_the_source_and_memory_stays_bounded() {
    let env = StreamEnv::with_config(EnvConfig {
        parallelism: PARALLELISM,
        buffer_size: BATCH,
        channel_capacity: CAPACITY,
        ..EnvConfig::default()
    });
    env.from_source(riffle_clicks::source(ClicksConfig::default()))
        .map(|click| click.user_id)
        .rebalance()
        .map(|user| user)
        .sink(ThrottledSink::new(BlackholeSink::new(), SINK_RATE))
        .name("slow sink");
    let job = env.execute_async().unwrap();

    // Everything that can be between the source's counter and the sink's: per channel its
    // capacity plus the batch being handed over, per writer one partial batch per channel, per
    // source subtask the batch being read.
    let channels = PARALLELISM * PARALLELISM;
    let bound = (channels * (CAPACITY + 2) * BATCH + PARALLELISM * BATCH) as u64;

    std::thread::sleep(Duration::from_secs(1));
    let rss_start = process_rss_bytes().unwrap();
    let mut previous = job.metrics();
    let mut last_rates = None;
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(500));
        let now = job.metrics();
        assert!(
            in_flight(&now) <= bound,
            "{} records in flight, bound {bound}",
            in_flight(&now)
        );
        last_rates = Some(now.rates_since(&previous));
        previous = now;
    }
    let rss_end = process_rss_bytes().unwrap();
    let rates = last_rates.unwrap();
    let source = rates.iter().find(|r| r.name == "Source: clicks").unwrap();
    let sink = rates.iter().find(|r| r.name == "slow sink").unwrap();
    assert_eq!(
        source.time.backpressure_level(),
        "HIGH",
        "the source is back-pressured: {source:?}"
    );
    assert!(
        sink.time.busy_ms_per_sec > 500.0,
        "the sink is the busy one: {sink:?}"
    );
    assert_eq!(
        sink.time.backpressure_level(),
        "OK",
        "nothing back-pressures the sink: {sink:?}"
    );
    assert!(
        rss_end < rss_start + 20 * 1024 * 1024,
        "memory stays flat: {} MB -> {} MB",
        rss_start >> 20,
        rss_end >> 20
    );

    job.stop();
    let result = job.wait().unwrap();
    assert_eq!(
        result.records_out("Source: clicks"),
        result.records_in("slow sink"),
        "stop drains everything"
    );
    let ran = result.duration.as_secs_f64();
    let produced = result.records_out("Source: clicks") as f64;
    assert!(
        produced <= SINK_RATE * PARALLELISM as f64 * ran + bound as f64,
        "the source's rate follows the sink's: {produced} records in {ran:.1} s"
    );
}
