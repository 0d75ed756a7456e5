//! The matcher: a non-deterministic automaton run over one key's events in time order.
//!
//! A partial match (a *run*) is the events it took, each with the stage that took it, and its
//! *branches*: what it may take next. After taking an event in stage `s` a run has up to three
//! kinds of branch, all alive at once:
//!
//! - `Loop`: take another event into `s` (while `s` has taken fewer than its maximum);
//! - `Enter(j)`: take the first event of a later stage `j` (the next one, or one past stages
//!   that are optional), carrying the negative stages in between as guards;
//! - `End`: nothing else is needed but a trailing `not_followed_by` must hold until `within`
//!   has passed.
//!
//! A branch's contiguity decides what an event does to it: strict branches live for one event,
//! relaxed ones until they take an event, non-deterministic ones until the match times out.
//! Each take makes a new run (the old one keeps its other branches), so every way of matching
//! is followed, and the events are stored once per key, shared by the runs that took them, and
//! dropped when no run refers to them.
//!
//! Groups are matched unrolled: a group taken `n..=m` times becomes `m` copies of its stages,
//! those past the `n`-th optional as a whole (skipping one skips the rest); an unbounded group
//! becomes its `n` copies and one more that loops, `Enter`ing its own first stage again from
//! its end. Every copy's stages keep the group's names, so a match lists a stage's events of
//! every pass together.

use serde::{Deserialize, Serialize};

use crate::cep::pattern::{AfterMatchSkip, Contiguity, Pattern, Stage, StageKind};
use crate::record::Timestamp;

/// A match: the events each stage took, in time order, as FlinkCEP's `Map<String, List<T>>`.
///
/// ```
/// use riffle::cep::Match;
///
/// let m = Match::from_stages(vec![("small".into(), vec![0.5]), ("large".into(), vec![700.0, 900.0])], 1_000, 9_000);
/// assert_eq!(m.get("large"), &[700.0, 900.0]);
/// assert_eq!(m.last("large"), Some(&900.0));
/// assert!(m.get("verify").is_empty());
/// assert_eq!((m.start_timestamp(), m.end_timestamp()), (1_000, 9_000));
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Match<T> {
    stages: Vec<(String, Vec<T>)>,
    start: Timestamp,
    end: Timestamp,
}

impl<T> Match<T> {
    /// A match of the given stages' events (stages that took none may be left out), first and
    /// last event times.
    pub fn from_stages(stages: Vec<(String, Vec<T>)>, start: Timestamp, end: Timestamp) -> Self {
        Match { stages, start, end }
    }

    /// The events stage `name` took (empty if it took none).
    pub fn get(&self, name: &str) -> &[T] {
        self.stages
            .iter()
            .find(|(n, _)| n == name)
            .map_or(&[], |(_, events)| events.as_slice())
    }

    /// The first event stage `name` took.
    pub fn first(&self, name: &str) -> Option<&T> {
        self.get(name).first()
    }

    /// The last event stage `name` took.
    pub fn last(&self, name: &str) -> Option<&T> {
        self.get(name).last()
    }

    /// Moves the events of stage `name` out of the match.
    pub fn take(&mut self, name: &str) -> Vec<T> {
        self.stages
            .iter_mut()
            .find(|(n, _)| n == name)
            .map(|(_, events)| std::mem::take(events))
            .unwrap_or_default()
    }

    /// The stages that took events, in pattern order, with their events.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[T])> {
        self.stages
            .iter()
            .map(|(name, events)| (name.as_str(), events.as_slice()))
    }

    /// The number of events in the match.
    pub fn len(&self) -> usize {
        self.stages.iter().map(|(_, events)| events.len()).sum()
    }

    /// Whether the match holds no event (never, for what a pattern emits).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The time of its first event.
    pub fn start_timestamp(&self) -> Timestamp {
        self.start
    }

    /// The time of its last event.
    pub fn end_timestamp(&self) -> Timestamp {
        self.end
    }
}

/// What a condition sees of the partial match it would extend: the events taken so far.
pub struct Partial<'a, T> {
    stages: &'a [Stage<T>],
    taken: &'a [(u16, u64)],
    events: &'a [Stored<T>],
}

impl<'a, T> Partial<'a, T> {
    /// The events stage `name` took so far, in time order.
    pub fn get<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'a T> + 's {
        let origin = self
            .stages
            .iter()
            .position(|s| s.name == name)
            .map(|i| self.stages[i].origin);
        self.taken
            .iter()
            .filter(move |(stage, _)| Some(self.stages[*stage as usize].origin) == origin)
            .map(|(_, id)| self.event(*id))
    }

    /// The last event stage `name` took so far.
    pub fn last(&self, name: &str) -> Option<&'a T> {
        self.get(name).last()
    }

    /// Every event taken so far with its stage's name, in time order.
    pub fn events(&self) -> impl Iterator<Item = (&'a str, &'a T)> + '_ {
        let stages = self.stages;
        self.taken
            .iter()
            .map(move |(stage, id)| (stages[*stage as usize].name.as_str(), self.event(*id)))
    }

    /// How many events were taken so far.
    pub fn len(&self) -> usize {
        self.taken.len()
    }

    /// Whether no event was taken yet (the condition of a pattern's first event).
    pub fn is_empty(&self) -> bool {
        self.taken.is_empty()
    }

    fn event(&self, id: u64) -> &'a T {
        &self.events[lookup(self.events, id)].value
    }
}

/// An event a run took, stored once per key.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Stored<T> {
    id: u64,
    timestamp: Timestamp,
    value: T,
}

fn lookup<T>(events: &[Stored<T>], id: u64) -> usize {
    events
        .binary_search_by_key(&id, |e| e.id)
        .expect("a run's event is stored")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Target {
    Loop,
    Enter(u16),
    End,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct Branch {
    target: Target,
    /// No event came since the branch was made (strict contiguity and `not_next` look at
    /// that one event only).
    fresh: bool,
}

/// A partial match.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Run {
    start: Timestamp,
    /// The events taken, each with its stage.
    taken: Vec<(u16, u64)>,
    /// The events the last stage took.
    count: u32,
    /// It was emitted as a match (it does not time out, though it may grow).
    complete: bool,
    branches: Vec<Branch>,
}

impl Run {
    fn stage(&self) -> usize {
        self.taken.last().map_or(0, |(s, _)| *s as usize)
    }

    fn start_id(&self) -> u64 {
        self.taken[0].1
    }

    /// The order in which matches found at the same moment are emitted (and skip strategies
    /// applied): earliest first event first, then by the events taken.
    fn order_key(&self) -> (u64, &[(u16, u64)]) {
        (self.start_id(), &self.taken)
    }
}

/// One key's matching state: events waiting for the watermark, the partial matches and the
/// events they took. Kept in the key's state, so it is checkpointed, restored and rescaled with
/// the key.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct KeyNfa<T> {
    /// Events not yet matched (waiting for the watermark to pass them), with an arrival number
    /// that orders events of equal time.
    pub(crate) pending: Vec<(Timestamp, u64, T)>,
    events: Vec<Stored<T>>,
    runs: Vec<Run>,
    /// Completed matches waiting for an earlier partial match to end (with a skip strategy).
    held: Vec<Vec<(u16, u64)>>,
    pub(crate) next_id: u64,
}

impl<T> Default for KeyNfa<T> {
    fn default() -> Self {
        KeyNfa {
            pending: Vec::new(),
            events: Vec::new(),
            runs: Vec::new(),
            held: Vec::new(),
            next_id: 0,
        }
    }
}

impl<T> KeyNfa<T> {
    /// Nothing is held: the key's state can be cleared.
    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty() && self.runs.is_empty() && self.held.is_empty()
    }

    /// Whether completed matches wait for earlier partial matches.
    pub(crate) fn holds_matches(&self) -> bool {
        !self.held.is_empty()
    }

    /// The earliest time a partial match times out, if `within` is set and any is open.
    pub(crate) fn next_deadline(&self, within: Option<i64>) -> Option<Timestamp> {
        let within = within?;
        self.runs
            .iter()
            .map(|r| r.start.saturating_add(within))
            .min()
    }
}

/// What matching emitted, in order: matches and timed-out partial matches, each with the time
/// it is emitted at.
pub(crate) struct Emitted<T> {
    pub(crate) matches: Vec<(Timestamp, Match<T>)>,
    pub(crate) timed_out: Vec<(Timestamp, Match<T>)>,
}

impl<T> Default for Emitted<T> {
    fn default() -> Self {
        Emitted {
            matches: Vec::new(),
            timed_out: Vec::new(),
        }
    }
}

/// The event a skip strategy prunes partial matches by: those whose first event is equal to,
/// at most, or before it.
#[derive(Clone, Copy)]
enum Prune {
    Equal(u64),
    AtMost(u64),
    Before(u64),
}

impl Prune {
    fn prunes(self, start: u64) -> bool {
        match self {
            Prune::Equal(id) => start == id,
            Prune::AtMost(id) => start <= id,
            Prune::Before(id) => start < id,
        }
    }
}

/// A pattern compiled for matching.
pub(crate) struct Matcher<T> {
    stages: Vec<Stage<T>>,
    /// Per stage, where a run may go on from it without taking it: the ends of the optional
    /// group copies it begins.
    skips: Vec<Vec<usize>>,
    /// The copies of unbounded groups that loop, as stage ranges.
    loops: Vec<(usize, usize)>,
    /// The pattern has groups: runs move through them by the general walk.
    grouped: bool,
    within: Option<i64>,
    skip: AfterMatchSkip,
    skip_stage: Option<u16>,
}

/// Appends stages `start..end` of `pattern` to `into`, each group in them unrolled; `below`
/// bounds the groups considered (those inside the group being unrolled).
fn unroll<T>(pattern: &Pattern<T>, start: usize, end: usize, below: usize, into: &mut Matcher<T>) {
    let mut i = start;
    for g in pattern.groups_in(start, end, below) {
        let group = pattern.groups[g];
        for stage in &pattern.stages[i..group.start] {
            into.stages.push(stage.clone());
            into.skips.push(Vec::new());
        }
        let entry = pattern.stages[group.start].entry;
        let copies = group.max.unwrap_or(group.min + 1);
        let mut optional = Vec::new();
        for k in 0..copies {
            let first = into.stages.len();
            unroll(pattern, group.start, group.end, g, into);
            into.stages[first].entry = if k == 0 { entry } else { group.inner };
            if k >= group.min || (k == 0 && group.optional) {
                optional.push(first);
            }
            if group.max.is_none() && k + 1 == copies {
                into.loops.push((first, into.stages.len()));
            }
        }
        let after = into.stages.len();
        for first in optional {
            into.skips[first].push(after);
        }
        i = group.end;
    }
    for stage in &pattern.stages[i..end] {
        into.stages.push(stage.clone());
        into.skips.push(Vec::new());
    }
}

impl<T: Clone> Matcher<T> {
    /// The matcher of a pattern that passed [`Pattern::validate`].
    pub(crate) fn new(pattern: &Pattern<T>) -> Self {
        let mut matcher = Matcher {
            stages: Vec::new(),
            skips: Vec::new(),
            loops: Vec::new(),
            grouped: false,
            within: pattern
                .within
                .map(|w| i64::try_from(w.as_millis()).unwrap_or(i64::MAX).max(1)),
            skip: pattern.skip.clone(),
            skip_stage: None,
        };
        unroll(
            pattern,
            0,
            pattern.stages.len(),
            pattern.groups.len(),
            &mut matcher,
        );
        let names: Vec<String> = matcher.stages.iter().map(|s| s.name.clone()).collect();
        for (i, stage) in matcher.stages.iter_mut().enumerate() {
            let first = names.iter().position(|n| *n == names[i]).unwrap_or(i);
            stage.origin = u16::try_from(first).unwrap_or(u16::MAX);
        }
        matcher.skip_stage = match &pattern.skip {
            AfterMatchSkip::SkipToFirst(name) | AfterMatchSkip::SkipToLast(name) => {
                names.iter().position(|n| n == name).map(|i| i as u16)
            }
            _ => None,
        };
        matcher.grouped = !pattern.groups.is_empty();
        matcher
    }

    /// The match window in milliseconds.
    pub(crate) fn within(&self) -> Option<i64> {
        self.within
    }

    /// Matches one event of time `timestamp` (not before any event matched before): first times
    /// out what it is too late for, then advances every partial match and starts a new one.
    pub(crate) fn advance(
        &self,
        nfa: &mut KeyNfa<T>,
        timestamp: Timestamp,
        event: T,
        out: &mut Emitted<T>,
    ) {
        self.expire(nfa, timestamp, out);
        let id = nfa.next_id;
        nfa.next_id += 1;
        let mut runs = Vec::with_capacity(nfa.runs.len() + 1);
        let mut completed: Vec<Run> = Vec::new();
        let mut took = false;
        for mut run in std::mem::take(&mut nfa.runs) {
            let stage = &self.stages[run.stage()];
            let partial = Partial {
                stages: &self.stages,
                taken: &run.taken,
                events: &nfa.events,
            };
            // A greedy loop that takes the event leaves its run no other way forward.
            let greedy = stage.greedy
                && run
                    .branches
                    .iter()
                    .any(|b| b.target == Target::Loop && self.loop_takes(stage, &event, &partial));
            let mut alive = Vec::with_capacity(run.branches.len());
            for branch in &run.branches {
                if greedy && branch.target != Target::Loop {
                    continue;
                }
                let (take, survive) = self.step(&run, *branch, &event, &partial);
                if let Some(into) = take {
                    took = true;
                    let child = self.extend(&run, into, branch.target == Target::Loop, id);
                    if child.complete {
                        completed.push(child.clone());
                    }
                    if !child.branches.is_empty() {
                        runs.push(child);
                    }
                }
                if survive {
                    alive.push(Branch {
                        target: branch.target,
                        fresh: false,
                    });
                }
            }
            if !alive.is_empty() {
                run.branches = alive;
                runs.push(run);
            }
        }
        let first = &self.stages[0];
        let empty = Partial {
            stages: &self.stages,
            taken: &[],
            events: &nfa.events,
        };
        if first.accepts(&event, &empty) {
            took = true;
            let child = self.extend_from(Vec::new(), timestamp, 0, 0, id);
            if child.complete {
                completed.push(child.clone());
            }
            if !child.branches.is_empty() {
                runs.push(child);
            }
        }
        if took {
            nfa.events.push(Stored {
                id,
                timestamp,
                value: event,
            });
        }
        nfa.runs = runs;
        self.complete(nfa, completed.into_iter().map(|r| r.taken), timestamp, out);
        self.collect(nfa);
    }

    /// Queues completed matches and emits, at `time`, those no earlier partial match can come
    /// before: with a skip strategy, a match waits while a partial match that started before
    /// it is open (its match would be emitted first and could discard this one), as FlinkCEP
    /// does. Each emitted match's strategy discards the partial and queued matches it names.
    /// Returns what was discarded by.
    fn complete(
        &self,
        nfa: &mut KeyNfa<T>,
        matches: impl IntoIterator<Item = Vec<(u16, u64)>>,
        time: Timestamp,
        out: &mut Emitted<T>,
    ) -> Vec<Prune> {
        nfa.held.extend(matches);
        if nfa.held.is_empty() {
            return Vec::new();
        }
        nfa.held.sort();
        let waits = self.skip != AfterMatchSkip::NoSkip;
        let mut prunes = Vec::new();
        let mut emitted = 0;
        for i in 0..nfa.held.len() {
            let start = nfa.held[i][0].1;
            if prunes.iter().any(|p: &Prune| p.prunes(start)) {
                continue;
            }
            if waits && nfa.runs.iter().any(|r| r.start_id() < start) {
                break;
            }
            emitted = i + 1;
            out.matches
                .push((time, self.to_match(&nfa.held[i], &nfa.events)));
            if let Some(prune) = self.prune_after(&nfa.held[i]) {
                nfa.runs.retain(|r| !prune.prunes(r.start_id()));
                prunes.push(prune);
            }
        }
        nfa.held.drain(..emitted);
        if !prunes.is_empty() {
            nfa.held
                .retain(|m| !prunes.iter().any(|p| p.prunes(m[0].1)));
        }
        prunes
    }

    /// The end of the input: partial matches that could still complete never will, so the
    /// queued matches they held back are emitted.
    pub(crate) fn end(&self, nfa: &mut KeyNfa<T>, time: Timestamp, out: &mut Emitted<T>) {
        nfa.runs.clear();
        self.complete(nfa, [], time, out);
        self.collect(nfa);
    }

    /// Times out the partial matches whose first event is `within` or more before `time`:
    /// those waiting for the end of a trailing `not_followed_by` are matches, the others are
    /// timed out (unless they were matches already).
    pub(crate) fn expire(&self, nfa: &mut KeyNfa<T>, time: Timestamp, out: &mut Emitted<T>) {
        let Some(within) = self.within else {
            return;
        };
        let deadline = |r: &Run| r.start.saturating_add(within);
        if !nfa.runs.iter().any(|r| deadline(r) <= time) {
            return;
        }
        let (mut expired, alive): (Vec<Run>, Vec<Run>) = std::mem::take(&mut nfa.runs)
            .into_iter()
            .partition(|r| deadline(r) <= time);
        nfa.runs = alive;
        expired.sort_by(|a, b| a.order_key().cmp(&b.order_key()));
        // By deadline (partial matches of one start share it), earliest first: those waiting
        // for the end of a trailing `not_followed_by` complete, the others time out; then the
        // queued matches they held back may come out.
        let mut prunes: Vec<Prune> = Vec::new();
        let mut expired = expired.into_iter().peekable();
        while let Some(first) = expired.peek() {
            let at = deadline(first);
            let mut ends = Vec::new();
            while let Some(run) = expired.next_if(|r| deadline(r) == at) {
                if prunes.iter().any(|p| p.prunes(run.start_id())) {
                    continue;
                }
                if run.branches.iter().any(|b| b.target == Target::End) {
                    ends.push(run.taken);
                } else if !run.complete {
                    out.timed_out
                        .push((at, self.to_match(&run.taken, &nfa.events)));
                }
            }
            prunes.extend(self.complete(nfa, ends, at, out));
        }
        self.collect(nfa);
    }

    /// Whether a run's loop takes `event`.
    fn loop_takes(&self, stage: &Stage<T>, event: &T, partial: &Partial<'_, T>) -> bool {
        !stage.until.as_ref().is_some_and(|u| u(event, partial)) && stage.accepts(event, partial)
    }

    /// What `event` does to one branch of `run`: the stage it is taken into, if any, and
    /// whether the branch lives on.
    fn step(
        &self,
        run: &Run,
        branch: Branch,
        event: &T,
        partial: &Partial<'_, T>,
    ) -> (Option<usize>, bool) {
        let from = run.stage();
        let (to, contiguity) = match branch.target {
            Target::Loop => {
                let stage = &self.stages[from];
                if stage.until.as_ref().is_some_and(|u| u(event, partial)) {
                    return (None, false);
                }
                (from, stage.inner)
            }
            Target::Enter(j) => (j as usize, self.stages[j as usize].entry),
            Target::End => (self.stages.len(), Contiguity::Relaxed),
        };
        let mut survives = true;
        // (A group's loop goes back to an earlier stage; groups hold no negative stage.)
        if branch.target != Target::Loop && to > from {
            for guard in &self.stages[from + 1..to] {
                let hit = || guard.accepts(event, partial);
                match guard.kind {
                    StageKind::NotNext if branch.fresh && hit() => return (None, false),
                    StageKind::NotFollowedBy if hit() => survives = false,
                    _ => {}
                }
            }
        }
        if branch.target == Target::End {
            return (None, survives);
        }
        let take = self.stages[to].accepts(event, partial);
        let survives = survives
            && match contiguity {
                Contiguity::Strict => false,
                Contiguity::Relaxed => !take,
                Contiguity::NonDeterministic => true,
            };
        (take.then_some(to), survives)
    }

    /// The run `run` becomes when stage `into` takes event `id` (in its loop if `looped`).
    fn extend(&self, run: &Run, into: usize, looped: bool, id: u64) -> Run {
        let count = if looped { run.count + 1 } else { 1 };
        self.extend_from(run.taken.clone(), run.start, into, count, id)
    }

    fn extend_from(
        &self,
        mut taken: Vec<(u16, u64)>,
        start: Timestamp,
        stage: usize,
        count: u32,
        id: u64,
    ) -> Run {
        let count = count.max(1);
        taken.push((stage as u16, id));
        let mut branches = Vec::with_capacity(2);
        let s = &self.stages[stage];
        if s.max.is_none_or(|max| (count as usize) < max) {
            branches.push(Branch {
                target: Target::Loop,
                fresh: true,
            });
        }
        let mut complete = false;
        if count as usize >= s.min && self.grouped {
            complete = self.walk(stage, &mut branches);
        } else if count as usize >= s.min {
            let mut reaches_end = true;
            let mut guarded = false;
            for (j, next) in self.stages.iter().enumerate().skip(stage + 1) {
                match next.kind {
                    StageKind::Take => {
                        branches.push(Branch {
                            target: Target::Enter(j as u16),
                            fresh: true,
                        });
                        if next.required() > 0 {
                            reaches_end = false;
                            break;
                        }
                    }
                    StageKind::NotFollowedBy => guarded = true,
                    StageKind::NotNext => {}
                }
            }
            if reaches_end {
                if guarded {
                    branches.push(Branch {
                        target: Target::End,
                        fresh: true,
                    });
                } else {
                    complete = true;
                }
            }
        }
        Run {
            start,
            taken,
            count,
            complete,
            branches,
        }
    }

    /// The branches a run whose stage `stage` is done has past it, in a pattern with groups:
    /// every stage it can enter next (past optional stages and optional group copies, and back
    /// to the start of a looping group copy it is in). Whether it completes a match.
    fn walk(&self, stage: usize, branches: &mut Vec<Branch>) -> bool {
        const PLAIN: u8 = 1;
        const GUARDED: u8 = 2;
        let n = self.stages.len();
        let mut reach = vec![0u8; n + 1];
        reach[stage + 1] = PLAIN;
        let enter = |j: usize, branches: &mut Vec<Branch>| {
            let target = Target::Enter(j as u16);
            if !branches.iter().any(|b| b.target == target) {
                branches.push(Branch {
                    target,
                    fresh: true,
                });
            }
        };
        let mut complete = false;
        for p in stage + 1..=n {
            let r = reach[p];
            if r == 0 {
                continue;
            }
            for &(start, end) in &self.loops {
                if end == p && (start..end).contains(&stage) {
                    enter(start, branches);
                }
            }
            if p == n {
                complete = r & PLAIN != 0;
                if r & GUARDED != 0 {
                    branches.push(Branch {
                        target: Target::End,
                        fresh: true,
                    });
                }
                break;
            }
            let next = &self.stages[p];
            match next.kind {
                StageKind::Take => {
                    enter(p, branches);
                    for &after in &self.skips[p] {
                        reach[after] |= r;
                    }
                    if next.required() == 0 {
                        reach[p + 1] |= r;
                    }
                }
                StageKind::NotFollowedBy => reach[p + 1] |= GUARDED,
                StageKind::NotNext => reach[p + 1] |= r,
            }
        }
        complete
    }

    /// What the skip strategy prunes once the match of `taken` is emitted.
    fn prune_after(&self, taken: &[(u16, u64)]) -> Option<Prune> {
        let of_stage = || {
            let stage = self.skip_stage.expect("validated");
            taken
                .iter()
                .filter(move |(s, _)| self.stages[*s as usize].origin == stage)
        };
        match self.skip {
            AfterMatchSkip::NoSkip => None,
            AfterMatchSkip::SkipToNext => Some(Prune::Equal(taken[0].1)),
            AfterMatchSkip::SkipPastLastEvent => Some(Prune::AtMost(taken.last()?.1)),
            AfterMatchSkip::SkipToFirst(_) => Some(Prune::Before(of_stage().next()?.1)),
            AfterMatchSkip::SkipToLast(_) => Some(Prune::Before(of_stage().next_back()?.1)),
        }
    }

    fn to_match(&self, taken: &[(u16, u64)], events: &[Stored<T>]) -> Match<T> {
        let mut stages: Vec<(String, Vec<T>)> = Vec::new();
        let mut current = None;
        let mut at = 0;
        for (stage, id) in taken {
            let value = events[lookup(events, *id)].value.clone();
            let origin = self.stages[*stage as usize].origin;
            if current != Some(origin) {
                current = Some(origin);
                // A group's later pass adds to the events its stage took in earlier ones.
                let name = &self.stages[origin as usize].name;
                at = match stages.iter().position(|(n, _)| n == name) {
                    Some(i) => i,
                    None => {
                        stages.push((name.clone(), Vec::new()));
                        stages.len() - 1
                    }
                };
            }
            stages[at].1.push(value);
        }
        let time = |id: &u64| events[lookup(events, *id)].timestamp;
        Match {
            stages,
            start: taken.first().map_or(0, |(_, id)| time(id)),
            end: taken.last().map_or(0, |(_, id)| time(id)),
        }
    }

    /// Drops the events no run refers to any more.
    fn collect(&self, nfa: &mut KeyNfa<T>) {
        if nfa.events.is_empty() {
            return;
        }
        let mut used: Vec<u64> = nfa
            .runs
            .iter()
            .flat_map(|r| r.taken.iter())
            .chain(nfa.held.iter().flatten())
            .map(|(_, id)| *id)
            .collect();
        used.sort_unstable();
        used.dedup();
        if used.len() == nfa.events.len() {
            return;
        }
        nfa.events.retain(|e| used.binary_search(&e.id).is_ok());
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Runs `pattern` over `events` (a letter and a number: `b1` is a `b`), one per
    /// millisecond, then times everything out; returns the matches as strings like `a b1 c`,
    /// and the timed-out partial matches.
    fn run(pattern: Pattern<String>, events: &str) -> (Vec<String>, Vec<String>) {
        pattern.validate().unwrap();
        let matcher = Matcher::new(&pattern);
        let mut nfa = KeyNfa::default();
        let mut out = Emitted::default();
        for (i, event) in events.split_whitespace().enumerate() {
            matcher.advance(&mut nfa, i as i64, event.to_string(), &mut out);
        }
        matcher.expire(&mut nfa, Timestamp::MAX, &mut out);
        matcher.end(&mut nfa, Timestamp::MAX, &mut out);
        let text = |m: &Match<String>| {
            m.iter()
                .flat_map(|(_, events)| events.iter().cloned())
                .collect::<Vec<_>>()
                .join(" ")
        };
        (
            out.matches.iter().map(|(_, m)| text(m)).collect(),
            out.timed_out.iter().map(|(_, m)| text(m)).collect(),
        )
    }

    fn is(letter: &'static str) -> impl Fn(&String) -> bool + Send + Sync + 'static {
        move |e: &String| e.starts_with(letter)
    }

    fn sorted(mut v: Vec<String>) -> Vec<String> {
        v.sort();
        v
    }

    /// FlinkCEP's documentation, "Contiguity within looping patterns": `a b+ c` with `a`
    /// followed by any `b`, over `a b1 d1 b2 d2 b3 c`.
    #[test]
    fn contiguity_within_loops_as_flink_documents_it() {
        let pattern = |inner: fn(Pattern<String>) -> Pattern<String>| {
            inner(
                Pattern::begin("a")
                    .where_(is("a"))
                    .followed_by_any("b")
                    .where_(is("b"))
                    .one_or_more(),
            )
            .followed_by("c")
            .where_(is("c"))
        };
        let input = "a b1 d1 b2 d2 b3 c";
        assert_eq!(
            sorted(run(pattern(|p| p.consecutive()), input).0),
            ["a b1 c", "a b2 c", "a b3 c"]
        );
        assert_eq!(
            sorted(run(pattern(|p| p), input).0),
            [
                "a b1 b2 b3 c",
                "a b1 b2 c",
                "a b1 c",
                "a b2 b3 c",
                "a b2 c",
                "a b3 c"
            ]
        );
        assert_eq!(
            sorted(run(pattern(|p| p.allow_combinations()), input).0),
            [
                "a b1 b2 b3 c",
                "a b1 b2 c",
                "a b1 b3 c",
                "a b1 c",
                "a b2 b3 c",
                "a b2 c",
                "a b3 c"
            ]
        );
    }

    /// FlinkCEP's documentation, "After Match Skip Strategy": greedy `b+` then `c`, over
    /// `b1 b2 b3 c`.
    #[test]
    fn skip_strategies_as_flink_documents_them() {
        let with = |skip| {
            let pattern = Pattern::begin("b")
                .where_(is("b"))
                .one_or_more()
                .greedy()
                .next("c")
                .where_(is("c"))
                .after_match(skip);
            run(pattern, "b1 b2 b3 c").0
        };
        let all = ["b1 b2 b3 c", "b2 b3 c", "b3 c"];
        assert_eq!(with(AfterMatchSkip::no_skip()), all);
        assert_eq!(with(AfterMatchSkip::skip_to_next()), all);
        assert_eq!(with(AfterMatchSkip::skip_past_last_event()), ["b1 b2 b3 c"]);
        assert_eq!(with(AfterMatchSkip::skip_to_first("b")), all);
        assert_eq!(
            with(AfterMatchSkip::skip_to_last("b")),
            ["b1 b2 b3 c", "b3 c"]
        );
    }

    #[test]
    fn groups_repeat_their_stages_and_a_match_lists_every_pass_under_its_names() {
        let pair = || {
            Pattern::begin("a")
                .where_(is("a"))
                .next("b")
                .where_(is("b"))
        };
        // A pair, then any further pairs, then c right after the last pair's b.
        let p = Pattern::begin_group(pair())
            .one_or_more()
            .next("c")
            .where_(is("c"));
        let input = "a1 b1 x a2 b2 c1";
        // (`run` lists a match stage by stage: both passes' a, then their b.)
        assert_eq!(run(p, input).0, ["a1 a2 b1 b2 c1", "a2 b2 c1"]);
        // Passes directly after each other.
        let p = Pattern::begin_group(pair()).times(2).consecutive();
        assert_eq!(run(p, "a1 b1 x a2 b2 a3 b3").0, ["a2 a3 b2 b3"]);
        // An iterative condition sees the events of every pass: each a larger than the last.
        let rising = Pattern::begin("a")
            .where_(is("a"))
            .where_with(|e: &String, m| m.last("a").is_none_or(|last| e > last))
            .next("b")
            .where_(is("b"));
        let p = Pattern::begin_group(rising).times(2);
        assert_eq!(
            run(p, "a2 b1 a1 b2 a3 b3").0,
            ["a2 a3 b1 b3", "a1 a3 b2 b3"]
        );
        // The match holds each stage's events of every pass.
        pair().validate().unwrap();
        let matcher = Matcher::new(&Pattern::begin_group(pair()).times(2));
        let mut nfa = KeyNfa::default();
        let mut out = Emitted::default();
        for (i, e) in ["a1", "b1", "a2", "b2"].iter().enumerate() {
            matcher.advance(&mut nfa, i as i64, e.to_string(), &mut out);
        }
        assert_eq!(out.matches[0].1.get("a"), ["a1", "a2"]);
        assert_eq!(out.matches[0].1.get("b"), ["b1", "b2"]);
    }

    #[test]
    fn strict_relaxed_and_any_contiguity_between_stages() {
        let p = |link: fn(Pattern<String>, &'static str) -> Pattern<String>| {
            link(Pattern::begin("a").where_(is("a")), "b").where_(is("b"))
        };
        let input = "a1 x b1 b2 a2 b3";
        assert_eq!(run(p(|p, n| p.next(n)), input).0, ["a2 b3"]);
        assert_eq!(run(p(|p, n| p.followed_by(n)), input).0, ["a1 b1", "a2 b3"]);
        assert_eq!(
            run(p(|p, n| p.followed_by_any(n)), input).0,
            ["a1 b1", "a1 b2", "a1 b3", "a2 b3"]
        );
    }

    #[test]
    fn negative_stages() {
        let not_next = Pattern::begin("a")
            .where_(is("a"))
            .not_next("x")
            .where_(is("x"))
            .followed_by("b")
            .where_(is("b"));
        assert_eq!(run(not_next.clone(), "a1 x1 b1 a2 y b2").0, ["a2 b2"]);
        assert_eq!(run(not_next, "a1 b1").0, ["a1 b1"]);
        let not_followed = Pattern::begin("a")
            .where_(is("a"))
            .not_followed_by("x")
            .where_(is("x"))
            .followed_by("b")
            .where_(is("b"));
        assert_eq!(run(not_followed, "a1 y x1 b1 a2 y b2").0, ["a2 b2"]);
        // At the end: emitted when `within` passed without an `x`.
        let at_end = Pattern::begin("a")
            .where_(is("a"))
            .not_followed_by("x")
            .where_(is("x"))
            .within(Duration::from_millis(3));
        let (matches, timed_out) = run(at_end, "a1 y x1 a2 y y y x2 a3");
        assert_eq!(matches, ["a2", "a3"]);
        assert!(timed_out.is_empty());
    }

    #[test]
    fn quantifiers_optional_and_until() {
        let times = Pattern::begin("a")
            .where_(is("a"))
            .times(2..=3)
            .consecutive()
            .next("b")
            .where_(is("b"));
        assert_eq!(
            sorted(run(times, "a1 a2 a3 b1").0),
            ["a1 a2 a3 b1", "a2 a3 b1"]
        );
        let optional = Pattern::begin("a")
            .where_(is("a"))
            .followed_by("b")
            .where_(is("b"))
            .optional()
            .followed_by("c")
            .where_(is("c"));
        assert_eq!(sorted(run(optional, "a1 b1 c1").0), ["a1 b1 c1", "a1 c1"]);
        let until = |stop: bool| {
            let loop_ = Pattern::begin("a")
                .where_(is("a"))
                .followed_by("b")
                .where_(is("b"))
                .one_or_more();
            let loop_ = if stop { loop_.until(is("s")) } else { loop_ };
            loop_.followed_by("c").where_(is("c"))
        };
        // The loop stops at `s`: `b2` comes after it.
        assert_eq!(run(until(true), "a1 b1 s b2 c1").0, ["a1 b1 c1"]);
        assert_eq!(
            sorted(run(until(false), "a1 b1 s b2 c1").0),
            ["a1 b1 b2 c1", "a1 b1 c1"]
        );
    }

    #[test]
    fn within_times_out_partial_matches_once() {
        let pattern = Pattern::begin("a")
            .where_(is("a"))
            .followed_by("b")
            .where_(is("b"))
            .followed_by("c")
            .where_(is("c"))
            .within(Duration::from_millis(3));
        let (matches, timed_out) = run(pattern, "a1 b1 x c1 a2 b2 c2");
        assert_eq!(matches, ["a2 b2 c2"]);
        assert_eq!(timed_out, ["a1 b1"]);
    }

    #[test]
    fn iterative_conditions_see_the_partial_match() {
        // Strictly rising numbers after a start.
        let value = |e: &String| e[1..].parse::<i64>().unwrap();
        let rising = Pattern::begin("start")
            .where_(is("s"))
            .next("up")
            .where_with(move |e: &String, partial| {
                let before = partial.events().last().map(|(_, e)| value(e)).unwrap_or(0);
                value(e) > before
            })
            .one_or_more()
            .consecutive()
            .after_match(AfterMatchSkip::skip_past_last_event());
        assert_eq!(run(rising, "s0 u1 u5 u3 s2 u4").0, ["s0 u1", "s2 u4"]);
    }

    /// Flink's documentation of MATCH_RECOGNIZE, "Aggregations": `A+ B` with `A` while the
    /// average of its prices stays under 15, skipping past the last row. The match that starts
    /// at 4 completes first (at the second 25) but waits for the one that started at 2, which
    /// then discards it.
    #[test]
    fn with_a_skip_strategy_a_match_waits_for_earlier_partial_matches() {
        let price = |e: &String| e[1..].parse::<i64>().unwrap();
        let pattern = Pattern::begin("a")
            .where_with(move |e: &String, partial| {
                let (sum, n) = partial
                    .get("a")
                    .fold((price(e), 1), |(s, n), p| (s + price(p), n + 1));
                (sum as f64) / (n as f64) < 15.0
            })
            .one_or_more()
            .greedy()
            .next("b")
            .after_match(AfterMatchSkip::skip_past_last_event());
        let input = "p12 p17 p13 p16 p25 p2 p4 p10 p15 p25 p25 p30";
        assert_eq!(
            run(pattern.clone(), input).0,
            ["p12 p17 p13 p16 p25", "p2 p4 p10 p15 p25 p25 p30"]
        );
        // Without a strategy every match comes out as soon as it completes.
        let all = run(pattern.after_match(AfterMatchSkip::no_skip()), input).0;
        assert_eq!(all[..2], ["p12 p17 p13 p16 p25", "p13 p16 p25"]);
        assert!(all.contains(&"p4 p10 p15 p25 p25".to_string()));
    }

    #[test]
    fn events_no_run_needs_are_dropped() {
        let pattern = Pattern::begin("a")
            .where_(is("a"))
            .followed_by("b")
            .where_(is("b"));
        let matcher = Matcher::new(&pattern);
        let mut nfa = KeyNfa::default();
        let mut out = Emitted::default();
        for (i, e) in ["a1", "x", "x", "b1", "x", "b2"].into_iter().enumerate() {
            matcher.advance(&mut nfa, i as i64, e.to_string(), &mut out);
        }
        assert_eq!(out.matches.len(), 1);
        assert!(nfa.is_empty() && nfa.events.is_empty());
    }
}
