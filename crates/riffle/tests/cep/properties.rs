//! The streaming matcher against the batch reference, for random patterns and events: any
//! arrival order within the watermark bound, a snapshot and restore anywhere, state on the heap
//! and byte-encoded (the path RocksDB takes).

use std::collections::BTreeMap;

use proptest::prelude::*;
use riffle::Result;
use riffle::cep::{CepOperator, Match, PatternContext, PatternProcessFunction};
use riffle::record::Timestamp;
use riffle::testing::{MemoryKvBackend, OperatorHarness, Step, assert_snapshot_round_trip_on};

use crate::reference::{Ev, Spec, matches, show, spec};

/// Emits each match as text.
#[derive(Clone)]
struct Show;

impl PatternProcessFunction<u8, Ev, String> for Show {
    fn process_match(
        &mut self,
        key: &u8,
        m: Match<Ev>,
        ctx: &mut PatternContext<Ev, String>,
    ) -> Result<()> {
        ctx.emit(show(*key, &m))
    }
}

fn operator(spec: &Spec) -> CepOperator<u8, Ev, String, Show> {
    CepOperator::new(|e: &Ev| e.key, &spec.pattern(), Show).unwrap()
}

/// Events on a 5 ms grid over three keys, two at each time (events of one time match in
/// arrival order), and the order they arrive in: each is at most
/// `bound` ms behind a later event, as a bounded-out-of-orderness source allows.
fn input() -> impl Strategy<Value = (Vec<Ev>, Vec<usize>, i64)> {
    (
        prop::collection::vec((0u8..3, 0u8..4, 0u8..8), 0..48),
        1i64..25,
        prop::collection::vec(0i64..1_000, 48),
    )
        .prop_map(|(raw, bound, jitter)| {
            let events: Vec<Ev> = raw
                .into_iter()
                .enumerate()
                .map(|(i, (key, letter, value))| Ev {
                    key,
                    letter,
                    value,
                    ts: i as i64 / 2 * 5,
                })
                .collect();
            let mut order: Vec<usize> = (0..events.len()).collect();
            order.sort_by_key(|i| (events[*i].ts + jitter[*i] % bound, *i));
            (events, order, bound)
        })
}

/// The arrivals as harness steps: each event, then the watermark its source would send.
fn steps(events: &[Ev], order: &[usize], bound: i64) -> Vec<Step<Ev>> {
    let mut max = Timestamp::MIN;
    let mut steps = Vec::new();
    for i in order {
        let e = &events[*i];
        max = max.max(e.ts);
        steps.push(Step::Record(e.clone(), e.ts));
        steps.push(Step::Watermark(max - bound));
    }
    steps
}

/// The reference's matches, per key, over the events in time order, those of one time in the
/// order they arrived.
fn expected(spec: &Spec, events: &[Ev], order: &[usize]) -> BTreeMap<u8, Vec<String>> {
    let mut arrived = vec![0; events.len()];
    for (rank, i) in order.iter().enumerate() {
        arrived[*i] = rank;
    }
    let mut sorted: Vec<usize> = (0..events.len()).collect();
    sorted.sort_by_key(|i| (events[*i].ts, arrived[*i]));
    let mut by_key: BTreeMap<u8, Vec<Ev>> = BTreeMap::new();
    for e in sorted.into_iter().map(|i| &events[i]) {
        by_key.entry(e.key).or_default().push(e.clone());
    }
    by_key
        .into_iter()
        .map(|(key, events)| (key, matches(spec, &events)))
        .filter(|(_, m)| !m.is_empty())
        .collect()
}

fn per_key(lines: Vec<String>) -> BTreeMap<u8, Vec<String>> {
    let mut by_key: BTreeMap<u8, Vec<String>> = BTreeMap::new();
    for line in lines {
        let key = line.split('|').next().unwrap().parse().unwrap();
        by_key.entry(key).or_default().push(line);
    }
    by_key
}

fn play(h: &mut OperatorHarness<Ev, String>, steps: &[Step<Ev>]) {
    for step in steps {
        match step {
            Step::Record(e, ts) => h.process(e.clone(), *ts).unwrap(),
            Step::Watermark(w) => h.watermark(*w).unwrap(),
            Step::Advance(_) => unreachable!(),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn the_matcher_finds_exactly_the_reference_matches_for_any_disorder_and_restore(
        spec in spec(),
        (events, order, bound) in input(),
        cut in 0usize..200,
        later in 0usize..200,
    ) {
        let steps = steps(&events, &order, bound);
        let cut = cut % (steps.len() + 1);
        let later = cut + later % (steps.len() - cut + 1);
        let mut first = OperatorHarness::builder(operator(&spec)).build().unwrap();
        play(&mut first, &steps[..cut]);
        let state = first.snapshot(1).unwrap();
        let mut out = first.take_values();
        let mut second = OperatorHarness::builder(operator(&spec)).restore(state).build().unwrap();
        play(&mut second, &steps[cut..later]);
        // A later checkpoint the job goes on past: events waiting then wait in the keys' state.
        second.snapshot(2).unwrap();
        play(&mut second, &steps[later..]);
        second.watermark(Timestamp::MAX).unwrap();
        second.finish().unwrap();
        out.extend(second.take_values());
        prop_assert_eq!(per_key(out), expected(&spec, &events, &order), "pattern {:?}", spec.pattern());
    }

}

proptest! {
    // Every cut point of every case: fewer cases.
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn byte_encoded_state_restores_at_every_step(
        spec in spec(),
        (events, order, bound) in input(),
    ) {
        let steps = steps(&events, &order, bound);
        let checked = assert_snapshot_round_trip_on(&MemoryKvBackend, || operator(&spec), &steps);
        prop_assert!(checked.is_ok(), "{:?}", checked);
    }
}
