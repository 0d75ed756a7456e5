//! Groups of patterns against their definition: a group taken `k` times is its stages written
//! out `k` times, each pass entered with the group's inner contiguity (the first with the
//! contiguity the group is attached with), and a group taken `n..=m` times (or `n..`, or
//! optionally) matches what the patterns of each allowed `k` match, together. The written-out
//! patterns have no group, so they run through the matcher's plain stage walk, while the group
//! runs through its unrolled copies, optional copies and loops.

use std::collections::BTreeMap;

use proptest::prelude::*;
use riffle::Result;
use riffle::cep::{
    CepOperator, Contiguity, Match, Pattern, PatternContext, PatternProcessFunction,
};
use riffle::record::Timestamp;
use riffle::testing::OperatorHarness;

use crate::reference::Ev;

/// One stage of the group: the letters it accepts (a bit each), whether it takes one or two
/// events, and how it follows the stage before inside the group.
#[derive(Clone, Debug)]
struct Inner {
    letters: u8,
    twice: bool,
    entry: Contiguity,
}

#[derive(Clone, Debug)]
struct GroupSpec {
    start: u8,
    attach: Contiguity,
    stages: Vec<Inner>,
    min: usize,
    max: Option<usize>,
    optional: bool,
    inner: Contiguity,
    end: Option<u8>,
}

fn contiguity() -> impl Strategy<Value = Contiguity> {
    prop_oneof![
        Just(Contiguity::Strict),
        Just(Contiguity::Relaxed),
        Just(Contiguity::NonDeterministic)
    ]
}

fn group_spec() -> impl Strategy<Value = GroupSpec> {
    let inner = (1u8..16, any::<bool>(), contiguity()).prop_map(|(letters, twice, entry)| Inner {
        letters,
        twice,
        entry,
    });
    (
        1u8..16,
        contiguity(),
        prop::collection::vec(inner, 1..3),
        1usize..3,
        prop_oneof![Just(Some(0usize)), Just(Some(1)), Just(None)],
        any::<bool>(),
        contiguity(),
        prop::option::of(1u8..16),
    )
        .prop_map(
            |(start, attach, stages, min, extra, optional, inner, end)| GroupSpec {
                start,
                attach,
                stages,
                min,
                max: extra.map(|extra| min + extra),
                optional,
                inner,
                end,
            },
        )
}

fn accepts(letters: u8) -> impl Fn(&Ev) -> bool + Send + Sync + 'static {
    move |e: &Ev| letters & (1 << e.letter) != 0
}

fn attach(p: Pattern<Ev>, name: String, how: Contiguity) -> Pattern<Ev> {
    match how {
        Contiguity::Strict => p.next(name),
        Contiguity::Relaxed => p.followed_by(name),
        Contiguity::NonDeterministic => p.followed_by_any(name),
    }
}

/// The group's stages, written out once, with stage names suffixed by `pass`; the first one
/// entered with `entry`.
fn pass(mut p: Pattern<Ev>, spec: &GroupSpec, pass: usize, entry: Contiguity) -> Pattern<Ev> {
    for (i, stage) in spec.stages.iter().enumerate() {
        let how = if i == 0 { entry } else { stage.entry };
        p = attach(p, format!("g{i}#{pass}"), how).where_(accepts(stage.letters));
        if stage.twice {
            p = p.times(2);
        }
    }
    p
}

/// The pattern with the group.
fn grouped(spec: &GroupSpec) -> Pattern<Ev> {
    let mut group = Pattern::begin("g0#0").where_(accepts(spec.stages[0].letters));
    if spec.stages[0].twice {
        group = group.times(2);
    }
    for (i, stage) in spec.stages.iter().enumerate().skip(1) {
        group = attach(group, format!("g{i}#0"), stage.entry).where_(accepts(stage.letters));
        if stage.twice {
            group = group.times(2);
        }
    }
    let p = Pattern::begin("s").where_(accepts(spec.start));
    let mut p = match spec.attach {
        Contiguity::Strict => p.next_group(group),
        Contiguity::Relaxed => p.followed_by_group(group),
        Contiguity::NonDeterministic => p.followed_by_any_group(group),
    };
    p = match spec.max {
        Some(max) => p.times(spec.min..=max),
        None => p.times(spec.min..),
    };
    p = match spec.inner {
        Contiguity::Strict => p.consecutive(),
        Contiguity::Relaxed => p,
        Contiguity::NonDeterministic => p.allow_combinations(),
    };
    if spec.optional {
        p = p.optional();
    }
    match spec.end {
        Some(letters) => p.followed_by("z").where_(accepts(letters)),
        None => p,
    }
}

/// The group written out `k` times.
fn written_out(spec: &GroupSpec, k: usize) -> Pattern<Ev> {
    let mut p = Pattern::begin("s").where_(accepts(spec.start));
    for i in 0..k {
        let entry = if i == 0 { spec.attach } else { spec.inner };
        p = pass(p, spec, i, entry);
    }
    match spec.end {
        Some(letters) => p.followed_by("z").where_(accepts(letters)),
        None => p,
    }
}

/// Each match as its stages' event times, stage names without the pass.
#[derive(Clone)]
struct Show;

impl PatternProcessFunction<u8, Ev, String> for Show {
    fn process_match(
        &mut self,
        _key: &u8,
        m: Match<Ev>,
        ctx: &mut PatternContext<Ev, String>,
    ) -> Result<()> {
        let mut stages: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for (name, events) in m.iter() {
            let base = name.split('#').next().unwrap().to_string();
            stages
                .entry(base)
                .or_default()
                .extend(events.iter().map(|e| e.ts));
        }
        ctx.emit(format!("{stages:?}"))
    }
}

/// The matches of `pattern` over `events` (in time order), sorted.
fn matches(pattern: &Pattern<Ev>, events: &[Ev]) -> Vec<String> {
    let operator = CepOperator::new(|e: &Ev| e.key, pattern, Show).unwrap();
    let mut h = OperatorHarness::builder(operator).build().unwrap();
    for e in events {
        h.process(e.clone(), e.ts).unwrap();
        h.watermark(e.ts).unwrap();
    }
    h.watermark(Timestamp::MAX).unwrap();
    h.finish().unwrap();
    let mut out = h.take_values();
    out.sort();
    out
}

fn events() -> impl Strategy<Value = Vec<Ev>> {
    prop::collection::vec(0u8..4, 0..11).prop_map(|letters| {
        letters
            .into_iter()
            .enumerate()
            .map(|(i, letter)| Ev {
                key: 0,
                letter,
                value: 0,
                ts: i as i64,
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_group_matches_what_its_passes_written_out_match(spec in group_spec(), events in events()) {
        let pattern = grouped(&spec);
        pattern.validate().unwrap();
        // A pass takes an event at least, so more passes than events never match.
        let most = spec.max.unwrap_or(events.len()).min(events.len());
        let mut expected: Vec<String> = Vec::new();
        let skipped = spec.optional.then_some(0);
        for k in skipped.into_iter().chain(spec.min..=most.max(spec.min)) {
            expected.extend(matches(&written_out(&spec, k), &events));
        }
        expected.sort();
        prop_assert_eq!(matches(&pattern, &events), expected, "{}", pattern.describe());
    }
}

#[test]
fn quantifiers_after_a_group_apply_to_it_and_stage_shapes_are_refused() {
    let pair = || Pattern::<Ev>::begin("a").next("b");
    let p = Pattern::begin_group(pair())
        .times(2..=3)
        .consecutive()
        .next("c");
    assert_eq!(p.describe(), "(a next b){2,3} next c");
    assert!(p.validate().is_ok());
    let nested = Pattern::begin_group(Pattern::begin_group(pair()).times(2).followed_by("c"))
        .one_or_more()
        .followed_by_group(Pattern::begin("d"))
        .optional();
    assert_eq!(
        nested.describe(),
        "((a next b){2} followed_by c)+ followed_by (d)?"
    );
    let refused = |p: Pattern<Ev>| p.validate().unwrap_err().to_string();
    assert!(
        refused(Pattern::begin_group(pair()).where_(|_| true))
            .contains("`where_` applies to a stage, not to the group ending with `b`")
    );
    assert!(
        refused(Pattern::begin_group(pair()).optional())
            .contains("the first stage of a pattern cannot be optional")
    );
    assert!(
        refused(Pattern::begin("s").followed_by_group(pair().not_next("n").next("x")))
            .contains("`n`: not_next and not_followed_by inside a group are not supported")
    );
    assert!(refused(Pattern::begin_group(pair()).times(5000)).contains("repeat to 10000 stages"));
    assert!(
        refused(Pattern::begin("s").next_group(pair().within(std::time::Duration::from_secs(1))))
            .contains("within applies to a whole pattern")
    );
}
