//! Checkpoints of a two-input operator: barriers aligned across both inputs while one input is
//! slow and the other back-pressured, and a failure recovered exactly (keyed state shared by both
//! inputs restored, both sources rewound to the same checkpoint).

use std::path::Path;
use std::time::Duration;

use riffle::checkpoint::{CheckpointConfig, RestartStrategy};
use riffle::operators::{KeyedCoProcessFunction, KeyedContext};
use riffle::sink::ExactlyOnceFileSink;
use riffle::source::datagen::DatagenSource;
use riffle::state::ValueStateDescriptor;
use riffle::testing::fail_once_after;
use riffle::{EnvConfig, Result, StreamEnv};
use riffle_clicks::{Click, ClicksConfig};

use crate::{committed, run};

const PER_INPUT: u64 = 20_000;

/// Counts each user's records of each input in one state per key shared by both inputs.
#[derive(Clone)]
struct CountBoth;

const SEEN: ValueStateDescriptor<(u64, u64)> = ValueStateDescriptor::new("seen");

impl CountBoth {
    fn count(side: usize, user: u64, ctx: &mut KeyedContext<u64, String>) -> Result<()> {
        let mut seen = ctx.value(&SEEN).get()?.unwrap_or_default();
        let n = if side == 0 {
            seen.0 += 1;
            seen.0
        } else {
            seen.1 += 1;
            seen.1
        };
        ctx.value(&SEEN).set(seen)?;
        ctx.emit(format!("{user} {side} {n}"))
    }
}

impl KeyedCoProcessFunction<u64, Click, Click, String> for CountBoth {
    fn process_element1(
        &mut self,
        user: &u64,
        _: Click,
        ctx: &mut KeyedContext<u64, String>,
    ) -> Result<()> {
        Self::count(0, *user, ctx)
    }
    fn process_element2(
        &mut self,
        user: &u64,
        _: Click,
        ctx: &mut KeyedContext<u64, String>,
    ) -> Result<()> {
        Self::count(1, *user, ctx)
    }
}

fn source(seed: u64, rate: f64) -> DatagenSource<riffle_clicks::ClickGenerator> {
    riffle_clicks::source(ClicksConfig {
        seed,
        users: 200,
        ..ClicksConfig::default()
    })
    .count(PER_INPUT)
    .rate(rate)
    .splits(2)
}

/// The first input fast, the second slow; small channels so the fast one is back-pressured.
fn job(
    out: &Path,
    checkpoints: &Path,
    crash: impl Fn(Click) -> Click + Send + Sync + 'static,
) -> StreamEnv {
    let env = StreamEnv::with_config(EnvConfig {
        parallelism: 2,
        buffer_size: 32,
        channel_capacity: 2,
        checkpoints: CheckpointConfig {
            interval: Some(Duration::from_millis(100)),
            storage: checkpoints.to_str().unwrap().to_string(),
            restart: RestartStrategy::FixedDelay {
                attempts: 3,
                delay: Duration::from_millis(50),
            },
            ..CheckpointConfig::default()
        },
        ..EnvConfig::default()
    });
    let fast = env.from_source(source(1, 200_000.0)).uid("fast");
    let slow = env
        .from_source(source(2, 20_000.0))
        .uid("slow")
        .map(crash)
        .uid("crash");
    fast.key_by(|c| c.user_id)
        .connect(&slow.key_by(|c| c.user_id))
        .process_function(CountBoth)
        .uid("count-both")
        .sink(ExactlyOnceFileSink::new(out))
        .uid("sink");
    env
}

fn expected() -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let result = run(&job(
        &dir.path().join("out"),
        &dir.path().join("chk"),
        |c| c,
    ))
    .unwrap();
    assert_eq!(result.restarts, 0);
    assert!(
        result.checkpoints.iter().filter(|c| c.completed()).count() >= 3,
        "checkpoints complete while one input is slow and the other back-pressured"
    );
    committed(&dir.path().join("out"))
}

#[test]
fn a_two_input_job_recovers_exactly_with_one_input_slow() {
    let expected = expected();
    assert_eq!(expected.len() as u64, 2 * PER_INPUT);
    for after in [3_000, 11_000] {
        let dir = tempfile::tempdir().unwrap();
        let env = job(
            &dir.path().join("out"),
            &dir.path().join("chk"),
            fail_once_after(after),
        );
        let result = run(&env).unwrap();
        assert_eq!(result.restarts, 1, "failure after {after} records");
        assert_eq!(
            committed(&dir.path().join("out")),
            expected,
            "failure after {after} slow-input records"
        );
    }
}
