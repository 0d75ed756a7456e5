//! Fraud alert with keyed state and event-time timers (the transaction pattern of Flink's fraud
//! detection walkthrough): a small transaction (under 1.00) followed within one minute by a
//! large one (over 500.00) on the same account raises an alert.
//!
//! ```sh
//! cargo run -p riffle --example fraud_alert
//! ```

use riffle::sink::CollectSink;
use riffle::state::ValueStateDescriptor;
use riffle::time::WatermarkStrategy;
use riffle::{EnvConfig, StreamEnv};

/// A transaction: account, amount in cents (12_000 is 120.00), event time (epoch ms).
type Transaction = (u64, u64, i64);

/// The time of the account's last small transaction, while it may still be followed by a large one.
static SMALL_AT: ValueStateDescriptor<i64> = ValueStateDescriptor::new("small-at");

const SMALL: u64 = 100;
const LARGE: u64 = 50_000;
const WITHIN_MS: i64 = 60_000;

fn alerts(transactions: Vec<Transaction>) -> riffle::Result<Vec<String>> {
    let env = StreamEnv::with_config(EnvConfig::deterministic());
    let (sink, output) = CollectSink::new();
    env.from_iter_with_watermarks(
        transactions,
        WatermarkStrategy::monotonous().with_timestamps(|t: &Transaction| t.2),
    )
    .key_by(|t| t.0)
    .process_with_timers(
        |account, (_, cents, at), ctx| {
            // The timer clears the state a minute later, but a record may come before the
            // watermark that fires it: the times decide.
            let recent_small = ctx
                .value(&SMALL_AT)
                .get()?
                .is_some_and(|small| at - small <= WITHIN_MS);
            if cents > LARGE && recent_small {
                ctx.emit(format!(
                    "account {account}: {}.{:02} at {}s right after a small one",
                    cents / 100,
                    cents % 100,
                    at / 1000
                ))?;
                ctx.value(&SMALL_AT).clear()?;
            }
            if cents < SMALL {
                ctx.value(&SMALL_AT).set(at)?;
                ctx.register_event_time_timer(at + WITHIN_MS);
            }
            Ok(())
        },
        // A minute after a small transaction, unless a later small one renewed it, forget it.
        |_, timer, _, ctx| {
            if ctx.value(&SMALL_AT).get()? == Some(timer - WITHIN_MS) {
                ctx.value(&SMALL_AT).clear()?;
            }
            Ok(())
        },
    )
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
        (3, 40, 150_000),     // small again: renews the minute
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
    fn a_small_then_a_large_transaction_within_a_minute_raises_an_alert() {
        assert_eq!(
            super::alerts(super::input()).unwrap(),
            vec![
                "account 1: 600.00 at 30s right after a small one",
                "account 3: 700.00 at 200s right after a small one",
            ]
        );
    }
}
