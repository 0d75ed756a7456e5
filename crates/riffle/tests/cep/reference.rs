//! Patterns as plain data, built into a `riffle::cep::Pattern` and matched by a batch matcher
//! written here, independently of Riffle's automaton: a backtracking search over one key's
//! events sorted by time, straight from the rules in docs/cep.md.

use std::time::Duration;

use proptest::prelude::*;
use riffle::cep::{AfterMatchSkip, Contiguity, Match, Pattern};
use serde::{Deserialize, Serialize};

/// An event: its key, a letter `0..4` the conditions test, a value the iterative condition
/// compares, and its time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ev {
    pub key: u8,
    pub letter: u8,
    pub value: u8,
    pub ts: i64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    Take,
    NotNext,
    NotFollowedBy,
}

#[derive(Clone, Debug)]
pub struct StageSpec {
    pub kind: Kind,
    /// The letters the condition accepts (a bit per letter).
    pub letters: u8,
    /// Iterative: the value must exceed the value of the last event taken so far.
    pub rising: bool,
    pub entry: Contiguity,
    pub min: usize,
    pub max: Option<usize>,
    pub optional: bool,
    pub inner: Contiguity,
    pub greedy: bool,
    pub until: Option<u8>,
}

#[derive(Clone, Debug)]
pub enum Skip {
    No,
    Next,
    PastLast,
    First(usize),
    Last(usize),
}

#[derive(Clone, Debug)]
pub struct Spec {
    pub stages: Vec<StageSpec>,
    pub within: Option<i64>,
    pub skip: Skip,
}

fn name(i: usize) -> String {
    format!("s{i}")
}

impl Spec {
    /// The same pattern through Riffle's API.
    pub fn pattern(&self) -> Pattern<Ev> {
        let mut pattern: Option<Pattern<Ev>> = None;
        for (i, s) in self.stages.iter().enumerate() {
            let mut p = match pattern.take() {
                None => Pattern::begin(name(i)),
                Some(p) => match (s.kind, s.entry) {
                    (Kind::NotNext, _) => p.not_next(name(i)),
                    (Kind::NotFollowedBy, _) => p.not_followed_by(name(i)),
                    (Kind::Take, Contiguity::Strict) => p.next(name(i)),
                    (Kind::Take, Contiguity::Relaxed) => p.followed_by(name(i)),
                    (Kind::Take, Contiguity::NonDeterministic) => p.followed_by_any(name(i)),
                },
            };
            let letters = s.letters;
            p = p.where_(move |e: &Ev| letters & (1 << e.letter) != 0);
            if s.rising {
                p = p.where_with(|e: &Ev, partial| {
                    partial
                        .events()
                        .last()
                        .is_none_or(|(_, last)| e.value > last.value)
                });
            }
            if s.kind == Kind::Take {
                p = p.times(match s.max {
                    Some(max) => riffle::cep::Times::from(s.min..=max),
                    None => riffle::cep::Times::from(s.min..),
                });
                p = match s.inner {
                    Contiguity::Strict => p.consecutive(),
                    Contiguity::Relaxed => p,
                    Contiguity::NonDeterministic => p.allow_combinations(),
                };
                if s.optional {
                    p = p.optional();
                }
                if s.greedy {
                    p = p.greedy();
                }
                if let Some(until) = s.until {
                    p = p.until(move |e: &Ev| until & (1 << e.letter) != 0);
                }
            }
            pattern = Some(p);
        }
        let mut p = pattern.expect("a stage");
        if let Some(within) = self.within {
            p = p.within(Duration::from_millis(within as u64));
        }
        p.after_match(match self.skip {
            Skip::No => AfterMatchSkip::no_skip(),
            Skip::Next => AfterMatchSkip::skip_to_next(),
            Skip::PastLast => AfterMatchSkip::skip_past_last_event(),
            Skip::First(i) => AfterMatchSkip::skip_to_first(name(i)),
            Skip::Last(i) => AfterMatchSkip::skip_to_last(name(i)),
        })
    }
}

/// A match as text: its key and each event as `stage:time`.
pub fn show(key: u8, m: &Match<Ev>) -> String {
    let events: Vec<String> = m
        .iter()
        .flat_map(|(stage, events)| events.iter().map(move |e| format!("{stage}:{}", e.ts)))
        .collect();
    format!("{key}|{}", events.join(","))
}

/// A moment of matching: an event's step `(time, 1, position)` (events of one time one after
/// the other), or the expiry of partial matches at a deadline `(time, 0, 0)` (before the events
/// of that time); `END` is the end of the input.
type Moment = (i64, u8, usize);

const END: Moment = (i64::MAX, 2, 0);

/// A match the search found: when it completes, and the events taken as (stage, position).
struct Found {
    at: Moment,
    taken: Vec<(usize, usize)>,
}

/// A partial match the search went through: its first event's position, and the moments it is
/// created and ends at (when no way on is left, or it times out).
struct Node {
    start: usize,
    created: Moment,
    ends: Moment,
}

struct Search<'a> {
    spec: &'a Spec,
    events: &'a [Ev],
    found: Vec<Found>,
    nodes: Vec<Node>,
}

impl Search<'_> {
    /// Whether stage `s`'s condition accepts event `q` after `taken`.
    fn accepts(&self, s: usize, q: usize, taken: &[(usize, usize)]) -> bool {
        let stage = &self.spec.stages[s];
        let e = &self.events[q];
        stage.letters & (1 << e.letter) != 0
            && (!stage.rising
                || taken
                    .last()
                    .is_none_or(|(_, p)| e.value > self.events[*p].value))
    }

    fn until(&self, s: usize, q: usize) -> bool {
        self.spec.stages[s]
            .until
            .is_some_and(|u| u & (1 << self.events[q].letter) != 0)
    }

    fn step(&self, q: usize) -> Moment {
        (self.events[q].ts, 1, q)
    }

    /// Follows every way on from the partial match `taken`: records the matches it leads to,
    /// and itself as a node with its lifetime.
    fn extend(&mut self, taken: &mut Vec<(usize, usize)>) {
        let n = self.events.len();
        let (s, last) = *taken.last().expect("a taken event");
        let count = taken.iter().rev().take_while(|(st, _)| *st == s).count();
        let stage = self.spec.stages[s].clone();
        let start_ts = self.events[taken[0].1].ts;
        let deadline = self.spec.within.map(|w| start_ts + w);
        let expiry: Moment = deadline.map_or(END, |d| (d, 0, 0));
        let in_time = |q: usize| deadline.is_none_or(|d| self.events[q].ts < d);
        let can_loop = stage.max.is_none_or(|m| count < m);
        // Without a way on, the partial match ends with the step that made it.
        let mut ends = self.step(last);
        // A greedy loop kills the other ways on at the first event it takes.
        let mut kill = None;
        if stage.greedy && can_loop {
            for q in last + 1..n {
                if !in_time(q)
                    || (stage.inner == Contiguity::Strict && q > last + 1)
                    || self.until(s, q)
                {
                    break;
                }
                if self.accepts(s, q, taken) {
                    kill = Some(q);
                    break;
                }
            }
        }
        // The match may end here.
        let rest = &self.spec.stages[s + 1..];
        if count >= stage.min && rest.iter().all(|x| x.kind != Kind::Take || x.optional) {
            let guards: Vec<usize> = (s + 1..self.spec.stages.len())
                .filter(|j| self.spec.stages[*j].kind == Kind::NotFollowedBy)
                .collect();
            if guards.is_empty() {
                self.found.push(Found {
                    at: self.step(last),
                    taken: taken.clone(),
                });
            } else {
                // Waits for `within` to pass without a guard's event (or a greedy loop's).
                let d = deadline.expect("validated: a trailing not_followed_by has within");
                let hit = (last + 1..n)
                    .take_while(|q| self.events[*q].ts < d)
                    .find(|q| {
                        guards.iter().any(|g| self.accepts(*g, *q, taken)) || kill == Some(*q)
                    });
                match hit {
                    None => {
                        self.found.push(Found {
                            at: (d, 0, 0),
                            taken: taken.clone(),
                        });
                        ends = ends.max(expiry);
                    }
                    Some(q) => ends = ends.max(self.step(q)),
                }
            }
        }
        // One more event into this stage.
        if can_loop {
            let mut lives_to = expiry;
            for q in last + 1..n {
                if !in_time(q) {
                    break;
                }
                if self.until(s, q) {
                    lives_to = self.step(q);
                    break;
                }
                if self.accepts(s, q, taken) {
                    taken.push((s, q));
                    self.extend(taken);
                    taken.pop();
                    if stage.inner == Contiguity::Relaxed {
                        lives_to = self.step(q);
                        break;
                    }
                }
                if stage.inner == Contiguity::Strict {
                    lives_to = self.step(q);
                    break;
                }
            }
            ends = ends.max(lives_to);
        }
        // The first event of a later stage.
        if count >= stage.min {
            let mut guards = Vec::new();
            for j in s + 1..self.spec.stages.len() {
                let next = self.spec.stages[j].clone();
                if next.kind != Kind::Take {
                    guards.push(j);
                    continue;
                }
                let mut lives_to = expiry;
                for q in last + 1..n {
                    if !in_time(q) {
                        break;
                    }
                    if kill.is_some_and(|g| g <= q) {
                        lives_to = self.step(kill.expect("some"));
                        break;
                    }
                    let hit = |kind: Kind| {
                        guards.iter().any(|g| {
                            self.spec.stages[*g].kind == kind && self.accepts(*g, q, taken)
                        })
                    };
                    if q == last + 1 && hit(Kind::NotNext) {
                        lives_to = self.step(q);
                        break;
                    }
                    let guarded = hit(Kind::NotFollowedBy);
                    let takes = self.accepts(j, q, taken);
                    if takes {
                        taken.push((j, q));
                        self.extend(taken);
                        taken.pop();
                    }
                    let lives = match next.entry {
                        Contiguity::Strict => false,
                        Contiguity::Relaxed => !takes,
                        Contiguity::NonDeterministic => true,
                    };
                    if !lives || guarded {
                        lives_to = self.step(q);
                        break;
                    }
                }
                ends = ends.max(lives_to);
                if !next.optional {
                    break;
                }
            }
        }
        self.nodes.push(Node {
            start: taken[0].1,
            created: self.step(last),
            ends,
        });
    }
}

/// Every match of `spec` over one key's events (sorted by time), in the order they are
/// emitted, after the skip strategy.
///
/// Without a strategy a match comes out when it completes. With one, completed matches wait
/// (in the order of their first event, then of the events they took) while a partial match
/// that started before them is alive, as FlinkCEP's; each emitted match discards the partial
/// and waiting matches whose first event is in the range its strategy names.
pub fn matches(spec: &Spec, events: &[Ev]) -> Vec<String> {
    let mut search = Search {
        spec,
        events,
        found: Vec::new(),
        nodes: Vec::new(),
    };
    for p in 0..events.len() {
        if search.accepts(0, p, &[]) {
            search.extend(&mut vec![(0, p)]);
        }
    }
    let (found, nodes) = (search.found, search.nodes);
    let mut moments: Vec<Moment> = found.iter().map(|f| f.at).chain([END]).collect();
    moments.extend(nodes.iter().map(|n| n.ends));
    moments.sort();
    moments.dedup();
    let waits = !matches!(spec.skip, Skip::No);
    let mut pruned: Vec<Box<dyn Fn(usize) -> bool>> = Vec::new();
    let mut held: Vec<&Found> = Vec::new();
    let mut out = Vec::new();
    for moment in moments {
        held.extend(found.iter().filter(|f| f.at == moment));
        held.sort_by(|a, b| a.taken.cmp(&b.taken));
        while let Some(&m) = held.first() {
            let start = m.taken[0].1;
            if pruned.iter().any(|p| p(start)) {
                held.remove(0);
                continue;
            }
            let blocked = waits
                && moment != END
                && nodes.iter().any(|n| {
                    n.start < start
                        && n.created <= moment
                        && n.ends > moment
                        && !pruned.iter().any(|p| p(n.start))
                });
            if blocked {
                break;
            }
            held.remove(0);
            let of = |stage: usize| {
                m.taken
                    .iter()
                    .filter(move |(s, _)| *s == stage)
                    .map(|(_, q)| *q)
            };
            match spec.skip {
                Skip::No => {}
                Skip::Next => pruned.push(Box::new(move |s| s == start)),
                Skip::PastLast => {
                    let last = m.taken.last().expect("an event").1;
                    pruned.push(Box::new(move |s| s <= last));
                }
                Skip::First(stage) => {
                    if let Some(first) = of(stage).next() {
                        pruned.push(Box::new(move |s| s < first));
                    }
                }
                Skip::Last(stage) => {
                    if let Some(last) = of(stage).next_back() {
                        pruned.push(Box::new(move |s| s < last));
                    }
                }
            }
            let key = events[start].key;
            let text: Vec<String> = m
                .taken
                .iter()
                .map(|(s, q)| format!("{}:{}", name(*s), events[*q].ts))
                .collect();
            out.push(format!("{key}|{}", text.join(",")));
        }
    }
    out
}

fn contiguity() -> impl Strategy<Value = Contiguity> {
    prop_oneof![
        Just(Contiguity::Strict),
        Just(Contiguity::Relaxed),
        Just(Contiguity::NonDeterministic)
    ]
}

fn stage() -> impl Strategy<Value = StageSpec> {
    (
        prop_oneof![6 => Just(Kind::Take), 1 => Just(Kind::NotNext), 1 => Just(Kind::NotFollowedBy)],
        1u8..16,
        prop::bool::weighted(0.15),
        contiguity(),
        prop_oneof![3 => Just((1, Some(1))), 1 => Just((1, None)), 1 => (1usize..3, 0usize..2).prop_map(|(n, extra)| (n, Some(n + extra))), 1 => Just((2, None))],
        prop::bool::weighted(0.25),
        contiguity(),
        prop::bool::weighted(0.3),
        prop::option::weighted(0.2, 1u8..16),
    )
        .prop_map(
            |(kind, letters, rising, entry, (min, max), optional, inner, greedy, until)| {
                let loops = max != Some(1);
                let take = kind == Kind::Take;
                StageSpec {
                    kind,
                    letters,
                    rising: rising && take,
                    entry,
                    min: if take { min } else { 1 },
                    max: if take { max } else { Some(1) },
                    optional: optional && take,
                    inner,
                    greedy: greedy && take && loops,
                    until: until.filter(|_| take && loops),
                }
            },
        )
}

/// A pattern of one to four stages that passes validation.
pub fn spec() -> impl Strategy<Value = Spec> {
    (
        prop::collection::vec(stage(), 1..5),
        prop::option::weighted(0.6, 5i64..60),
        0usize..5,
        0usize..4,
    )
        .prop_map(|(mut stages, mut within, skip, at)| {
            stages[0].kind = Kind::Take;
            stages[0].optional = false;
            // Non-deterministic contiguity makes a match per combination of events: bound it
            // by `within` (at most 12 events of a key fit in 60 ms), or the number of matches
            // (and both matchers' work) grows exponentially with the events.
            let combines = stages.iter().any(|s| {
                s.kind == Kind::Take
                    && (s.entry == Contiguity::NonDeterministic
                        || (s.inner == Contiguity::NonDeterministic && s.max != Some(1)))
            });
            if combines {
                within = Some(within.unwrap_or(30).min(40));
            }
            let takes: Vec<usize> = (0..stages.len())
                .filter(|i| stages[*i].kind == Kind::Take)
                .collect();
            let at = takes[at % takes.len()];
            Spec {
                stages,
                within,
                skip: match skip {
                    0 => Skip::No,
                    1 => Skip::Next,
                    2 => Skip::PastLast,
                    3 => Skip::First(at),
                    _ => Skip::Last(at),
                },
            }
        })
        .prop_filter("a pattern that can be matched", |spec| {
            spec.pattern().validate().is_ok()
        })
}
