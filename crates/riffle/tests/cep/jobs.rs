//! Patterns in jobs: timeouts, late events, processing time, bad patterns.

use std::time::Duration;

use riffle::cep::{Match, Pattern};
use riffle::sink::CollectSink;
use riffle::time::WatermarkStrategy;
use riffle::{EnvConfig, OutputTag, StreamEnv};

/// (card, amount, time)
type Txn = (u64, f64, i64);

#[test]
fn timed_out_partial_matches_go_to_their_side_output() {
    let env = StreamEnv::with_config(EnvConfig::deterministic());
    let (sink, alerts) = CollectSink::new();
    let txns = vec![
        (1u64, 0.5, 1_000i64),
        (2, 0.2, 1_000),
        (2, 40.0, 2_000),
        (1, 900.0, 20_000),
    ];
    let timed_out = OutputTag::<Match<Txn>>::new("timed-out");
    let matches = env
        .from_iter_with_watermarks(
            txns,
            WatermarkStrategy::monotonous().with_timestamps(|t: &Txn| t.2),
        )
        .key_by(|t| t.0)
        .pattern(
            Pattern::begin("small")
                .where_(|t: &Txn| t.1 < 1.0)
                .followed_by("large")
                .where_(|t: &Txn| t.1 > 500.0)
                .within(Duration::from_secs(60)),
        )
        .side_output_timed_out(&timed_out)
        .select(|m: Match<Txn>| (m.first("small").unwrap().0, m.first("large").unwrap().1));
    matches.sink(sink);
    let (timeouts, partials) = CollectSink::new();
    matches.get_side_output(&timed_out).sink(timeouts);
    env.execute().unwrap();
    assert_eq!(alerts.values(), vec![(1, 900.0)]);
    let partials = partials.records();
    assert_eq!(partials.len(), 1, "{partials:?}");
    assert_eq!(partials[0].value.get("small"), &[(2, 0.2, 1_000)]);
    assert_eq!(partials[0].timestamp(), Some(61_000));
}
