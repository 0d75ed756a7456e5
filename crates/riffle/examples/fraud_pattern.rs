//! The fraud alert of `fraud_alert.rs` as a pattern instead of a hand-written state machine: a
//! small transaction (under 1.00) followed within one minute by a large one (over 500.00) on
//! the same account, not interrupted by a verification (a 0.00 card check), raises an alert.
//! On `fraud_alert`'s input it gives the same alerts.
//!
//! ```sh
//! cargo run -p riffle --example fraud_pattern
//! ```

use std::time::Duration;

use riffle::cep::{AfterMatchSkip, Match, Pattern};
use riffle::sink::CollectSink;
use riffle::time::WatermarkStrategy;
use riffle::{EnvConfig, StreamEnv};

/// A transaction: account, amount in cents (12_000 is 120.00), event time (epoch ms).
type Transaction = (u64, u64, i64);

const SMALL: u64 = 100;
const LARGE: u64 = 50_000;

fn pattern() -> Pattern<Transaction> {
    Pattern::begin("small")
        .where_(|t: &Transaction| t.1 > 0 && t.1 < SMALL)
        .not_followed_by("verification")
        .where_(|t: &Transaction| t.1 == 0)
        .followed_by("large")
        .where_(|t: &Transaction| t.1 > LARGE)
        .within(Duration::from_secs(60))
        // One alert per large transaction, even after several small ones.
        .after_match(AfterMatchSkip::skip_past_last_event())
}

fn alerts(transactions: Vec<Transaction>) -> riffle::Result<Vec<String>> {
    let env = StreamEnv::with_config(EnvConfig::deterministic());
    let (sink, output) = CollectSink::new();
    env.from_iter_with_watermarks(
        transactions,
        WatermarkStrategy::monotonous().with_timestamps(|t: &Transaction| t.2),
    )
    .key_by(|t| t.0)
    .pattern(pattern())
    .select(|m: Match<Transaction>| {
        let (account, cents, at) = *m.first("large").expect("a match has its large one");
        format!(
            "account {account}: {}.{:02} at {}s right after a small one",
            cents / 100,
            cents % 100,
            at / 1000
        )
    })
    .sink(sink);
    env.execute()?;
    Ok(output.values())
}

fn input() -> Vec<Transaction> {
    vec![
        (1, 50, 0),           // small
        (2, 12_000, 5_000),   // ordinary
        (1, 60_000, 30_000),  // large, 30 s after the small one: alert
        (2, 99, 40_000),      // small
        (2, 90_000, 110_000), // large, 70 s later: too late, no alert
        (3, 10, 120_000),     // small
        (3, 40, 150_000),     // small again: a minute from here
        (3, 70_000, 200_000), // 50 s after the second small one: alert
    ]
}

fn main() -> riffle::Result<()> {
    for alert in alerts(input())? {
        println!("{alert}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_pattern_raises_the_hand_written_functions_alerts() {
        assert_eq!(
            super::alerts(super::input()).unwrap(),
            vec![
                "account 1: 600.00 at 30s right after a small one",
                "account 3: 700.00 at 200s right after a small one",
            ]
        );
    }

    #[test]
    fn a_verification_in_between_cancels_the_alert() {
        let mut input = super::input();
        input.push((4, 20, 300_000));
        input.push((4, 0, 310_000)); // the cardholder verified
        input.push((4, 80_000, 320_000));
        input.push((5, 20, 300_000));
        input.push((5, 80_000, 320_000));
        input.push((5, 0, 330_000)); // verified after the large one: too late
        input.sort_by_key(|t| t.2); // in time order, as the watermarks say
        assert_eq!(
            super::alerts(input).unwrap()[2..],
            ["account 5: 800.00 at 320s right after a small one"]
        );
    }
}
