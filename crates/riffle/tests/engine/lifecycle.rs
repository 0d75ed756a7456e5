//! Stopping and cancelling running jobs: no hang, a clean summary on stop.

use std::time::Duration;

use riffle::Error;
use riffle::sink::CollectSink;
use riffle_clicks::ClicksConfig;

use crate::env;

#[test]
fn stop_drains_an_unbounded_job_and_loses_nothing_in_flight() {
    let env = env(2);
    let (sink, out) = CollectSink::new();
    env.from_source(riffle_clicks::source(ClicksConfig::default()).rate(20_000.0))
        .map(|c| c.user_id)
        .key_by(|u| *u)
        .process(
            |_: &u64,
             u: u64,
             ctx: &mut riffle::operators::KeyedContext<'_, '_, u64, u64>|
             -> riffle::Result<()> { ctx.emit(u) },
        )
        .sink(sink);
    let job = env.execute_async().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    job.stop();
    let result = job.wait().unwrap();
    let produced = result.records_out("Source: clicks");
    assert!(produced > 1_000, "the source ran ({produced})");
    assert_eq!(
        out.len() as u64,
        produced,
        "everything the source emitted reached the sink"
    );
}

#[test]
fn cancel_ends_a_running_job_with_cancelled() {
    let env = env(2);
    env.from_source(riffle_clicks::source(ClicksConfig::default()))
        .map(|c| c.user_id)
        .rebalance()
        .map(|u| u)
        .sink(CollectSink::new().0);
    let job = env.execute_async().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    job.cancel();
    assert!(matches!(job.wait(), Err(Error::Cancelled)));
}
