//! Keyed process functions: state per key, event-time and processing-time timers, state TTL.

use std::time::Duration;

use riffle::Result;
use riffle::operators::KeyedProcess;
use riffle::testing::OperatorHarness;
use riffle_testing::conformance::Inactivity;

use crate::Click;

fn harness() -> OperatorHarness<Click, String> {
    let op = KeyedProcess::new(std::sync::Arc::new(|c: &Click| c.0), Inactivity);
    OperatorHarness::builder(op)
        .processing_time(1_000_000)
        .build()
        .unwrap()
}

#[test]
fn event_time_timers_fire_on_the_watermark_and_can_be_deleted() -> Result<()> {
    let mut h = harness();
    h.process((1, 1_000), 1_000)?;
    h.process((1, 20_000), 20_000)?; // moves the inactivity timer to 50 000
    h.process((2, 5_000), 5_000)?;
    assert_eq!(
        h.take_values(),
        vec!["user 1 visit 1", "user 1 visit 2", "user 2 visit 1"]
    );
    h.watermark(35_000)?;
    assert_eq!(h.take_values(), vec!["user 2 inactive since 5000"]);
    h.watermark(50_000)?;
    let fired = h.take_output();
    assert_eq!(
        fired.iter().map(|r| r.value.as_str()).collect::<Vec<_>>(),
        vec!["user 1 inactive since 20000"]
    );
    assert_eq!(
        fired[0].timestamp(),
        Some(50_000),
        "a timer's output carries the timer's time"
    );
    Ok(())
}

#[test]
fn processing_time_timers_fire_when_the_clock_reaches_them() -> Result<()> {
    let mut h = harness();
    h.process((9, 1_000), 1_000)?;
    h.take_values();
    h.advance_processing_time(Duration::from_secs(9))?;
    assert_eq!(h.take_values(), Vec::<String>::new());
    h.advance_processing_time(Duration::from_secs(1))?;
    assert_eq!(h.take_values(), vec!["user 9 first seen 10 s ago"]);
    Ok(())
}

#[test]
fn state_with_a_ttl_expires_and_is_swept() -> Result<()> {
    let mut h = harness();
    h.process((4, 1_000), 1_000)?;
    h.process((4, 2_000), 2_000)?;
    h.take_values();
    h.advance_processing_time(Duration::from_secs(30))?;
    h.process((4, 3_000), 3_000)?;
    assert_eq!(
        h.take_values(),
        vec!["user 4 first seen 10 s ago", "user 4 visit 3"],
        "30 s after its last write the count is alive"
    );
    h.advance_processing_time(Duration::from_secs(61))?;
    h.process((4, 4_000), 4_000)?;
    assert_eq!(
        h.take_values(),
        vec!["user 4 visit 1"],
        "61 s later it had expired"
    );
    // Another key's expired count is swept without being read.
    h.process((5, 1_000), 1_000)?;
    h.advance_processing_time(Duration::ZERO)?;
    let before = h.metrics().state_entries;
    assert_eq!(
        before, 8,
        "2 last-seen, 2 visit counts, 2 event-time and 2 processing-time timers"
    );
    h.advance_processing_time(Duration::from_secs(61))?;
    assert_eq!(
        h.metrics().state_entries,
        4,
        "the visit counts expired, the processing-time timers fired"
    );
    Ok(())
}

/// Registers a chain of timers: each firing timer registers the next one 10 later, up to 50.
struct TimerChain;

impl riffle::operators::KeyedProcessFunction<u64, Click, String> for TimerChain {
    fn process_element(
        &mut self,
        _key: &u64,
        click: Click,
        ctx: &mut riffle::operators::KeyedContext<u64, String>,
    ) -> Result<()> {
        ctx.register_event_time_timer(click.1);
        ctx.register_processing_time_timer(click.1);
        Ok(())
    }

    fn on_timer(
        &mut self,
        key: &u64,
        timestamp: riffle::Timestamp,
        domain: riffle::state::TimeDomain,
        ctx: &mut riffle::operators::KeyedContext<u64, String>,
    ) -> Result<()> {
        ctx.emit(format!("{domain:?} {key} at {timestamp}"))?;
        if timestamp < 50 {
            match domain {
                riffle::state::TimeDomain::EventTime => {
                    ctx.register_event_time_timer(timestamp + 10)
                }
                riffle::state::TimeDomain::ProcessingTime => {
                    ctx.register_processing_time_timer(timestamp + 10)
                }
            }
        }
        Ok(())
    }
}

fn chain_harness() -> OperatorHarness<Click, String> {
    let op = KeyedProcess::new(std::sync::Arc::new(|c: &Click| c.0), TimerChain);
    OperatorHarness::builder(op)
        .processing_time(0)
        .build()
        .unwrap()
}

#[test]
fn timers_registered_in_on_timer_at_or_before_the_watermark_fire_in_the_same_advance() -> Result<()>
{
    let chain = |domain: &str| -> Vec<String> {
        (1..=5)
            .map(|i| format!("{domain} 7 at {}", i * 10))
            .collect()
    };
    let mut h = chain_harness();
    h.process((7, 10), 10)?;
    h.watermark(999)?;
    assert_eq!(h.take_values(), chain("EventTime"));

    // The final watermark: the whole chain fires before the operator finishes.
    let mut h = chain_harness();
    h.process((7, 10), 10)?;
    h.watermark(riffle::record::MAX_WATERMARK)?;
    h.finish()?;
    assert_eq!(h.take_values(), chain("EventTime"));

    // Processing time: the chain fires when the clock jumps past it.
    let mut h = chain_harness();
    h.process((7, 10), 10)?;
    h.advance_processing_time(Duration::from_millis(999))?;
    assert_eq!(h.take_values(), chain("ProcessingTime"));
    Ok(())
}
