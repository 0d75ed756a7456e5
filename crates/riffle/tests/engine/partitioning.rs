//! key_by sends every record of a key to the subtask that owns the key's group, whatever the
//! parallelism; the output multiset does not depend on the parallelism.

use riffle::keys::{key_group_of, subtask_for_key_group};
use riffle::sink::CollectSink;

use crate::{env, run};

#[test]
fn every_record_of_a_key_reaches_one_subtask_for_any_parallelism() {
    for parallelism in 1..=5 {
        let env = env(2);
        let (sink, out) = CollectSink::new();
        env.from_iter((0..500u64).collect::<Vec<_>>())
            .key_by(|x| x % 37)
            .process(|key, x, ctx| ctx.emit((*key, x)))
            .set_parallelism(parallelism)
            .sink(sink)
            .set_parallelism(parallelism);
        run(&env).unwrap();
        each_at_its_keys_owner(&out, parallelism);
    }
}

/// Every one of the 500 `(key, x)` records (`key` = `x % 37`) reached the subtask owning its
/// key's key group.
fn each_at_its_keys_owner(out: &riffle::sink::Collected<(u64, u64)>, parallelism: usize) {
    let by_subtask = out.records_by_subtask();
    assert_eq!(by_subtask.len(), 500);
    for (subtask, record) in by_subtask {
        let (key, x) = record.value;
        assert_eq!(key, x % 37);
        let owner = subtask_for_key_group(key_group_of(&key, 128), 128, parallelism);
        assert_eq!(subtask, owner, "key {key} at parallelism {parallelism}");
    }
}

fn word_pipeline(parallelism: usize) -> Vec<(String, u64)> {
    let env = env(parallelism);
    let (sink, out) = CollectSink::new();
    let lines: Vec<String> = (0..300)
        .map(|i| format!("w{} w{} x{}", i % 7, i % 11, i % 3))
        .collect();
    env.from_iter(lines)
        .flat_map(|line: String| line.split(' ').map(str::to_string).collect::<Vec<_>>())
        .filter(|w| !w.starts_with('x'))
        .key_by(|w| w.clone())
        .process(|word, _w, ctx| ctx.emit((word.clone(), word.len() as u64)))
        .rebalance()
        .map(|p| p)
        .sink(sink);
    run(&env).unwrap();
    out.sorted()
}

#[test]
fn the_output_multiset_does_not_depend_on_parallelism() {
    let one = word_pipeline(1);
    assert_eq!(one.len(), 600);
    assert_eq!(word_pipeline(2), one);
    assert_eq!(word_pipeline(4), one);
}

/// A stream reinterpreted as keyed by the key it was partitioned by: the second keyed step runs
/// in the first's task (no exchange), and every record is at the subtask owning its key.
#[test]
fn a_stream_keyed_as_it_is_partitioned_needs_no_exchange() {
    for parallelism in 1..=4 {
        let env = env(parallelism);
        let (sink, out) = CollectSink::new();
        env.from_iter((0..500u64).collect::<Vec<_>>())
            .key_by(|x| x % 37)
            .process(|key, x, ctx| ctx.emit((*key, x)))
            .reinterpret_as_keyed(|(key, _): &(u64, u64)| *key)
            .process(|key, (_, x): (u64, u64), ctx| ctx.emit((*key, x)))
            .sink(sink);
        let plan = env.plan().unwrap();
        let ships: Vec<&str> = plan.edges.iter().map(|e| e.ship.as_str()).collect();
        assert_eq!(
            ships,
            ["HASH"],
            "one exchange only, at parallelism {parallelism}"
        );
        run(&env).unwrap();
        each_at_its_keys_owner(&out, parallelism);
    }
}

/// A stream reinterpreted as keyed that is not partitioned by that key fails the job, naming
/// the step, instead of reading another subtask's state.
#[test]
fn a_stream_keyed_as_it_is_not_partitioned_fails_the_job() {
    let env = env(2);
    env.from_iter((0..500u64).collect::<Vec<_>>())
        .rebalance()
        .map(|x| x)
        .reinterpret_as_keyed(|x: &u64| x % 37)
        .process(|key, x: u64, ctx| ctx.emit((*key, x)))
        .name("misplaced")
        .sink(CollectSink::new().0);
    let error = run(&env).unwrap_err().to_string();
    assert!(
        error.contains("key group") && error.contains("misplaced"),
        "{error}"
    );
}
