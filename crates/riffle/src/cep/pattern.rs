//! The pattern a keyed stream is matched against: a sequence of named stages, each with a
//! condition, a quantifier and the contiguity that links it to the stage before (FlinkCEP's
//! `Pattern` vocabulary), groups of stages with quantifiers of their own, and the time the whole
//! match must fit in.

use std::fmt;
use std::ops::{RangeFrom, RangeInclusive};
use std::sync::Arc;
use std::time::Duration;

use crate::cep::nfa::Partial;
use crate::error::{Error, Result};

/// A condition on an event, given the partial match it would extend.
pub(crate) type Condition<T> = Arc<dyn Fn(&T, &Partial<'_, T>) -> bool + Send + Sync>;

/// How the events of a match may be spread over the key's events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contiguity {
    /// The next event of the key must be the one taken (`next`, `consecutive`).
    Strict,
    /// Events that do not match are skipped; the first that matches is taken
    /// (`followed_by`, the default inside loops).
    Relaxed,
    /// Every later event that matches is taken, each in a match of its own
    /// (`followed_by_any`, `allow_combinations`).
    NonDeterministic,
}

/// What happens to the other partial matches once a match is emitted (FlinkCEP's
/// `AfterMatchSkipStrategy`).
///
/// Partial matches are identified by the event they started with; a strategy discards those
/// whose start is in a range the emitted match defines:
///
/// | strategy | discards partial matches that started |
/// |---|---|
/// | `no_skip` | none: every match is emitted |
/// | `skip_to_next` | with the match's first event |
/// | `skip_past_last_event` | at or before the match's last event |
/// | `skip_to_first(name)` | before the first event `name` took |
/// | `skip_to_last(name)` | before the last event `name` took |
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterMatchSkip {
    /// Every match is emitted (the default).
    NoSkip,
    /// Only one match per starting event.
    SkipToNext,
    /// Matches never share an event: matching restarts after the match.
    SkipPastLastEvent,
    /// Matching restarts at the first event the named stage took.
    SkipToFirst(String),
    /// Matching restarts at the last event the named stage took.
    SkipToLast(String),
}

impl AfterMatchSkip {
    /// Every match is emitted.
    pub fn no_skip() -> Self {
        AfterMatchSkip::NoSkip
    }

    /// One match per starting event.
    pub fn skip_to_next() -> Self {
        AfterMatchSkip::SkipToNext
    }

    /// Matches never overlap.
    pub fn skip_past_last_event() -> Self {
        AfterMatchSkip::SkipPastLastEvent
    }

    /// Matching restarts at the first event of stage `name`.
    pub fn skip_to_first(name: impl Into<String>) -> Self {
        AfterMatchSkip::SkipToFirst(name.into())
    }

    /// Matching restarts at the last event of stage `name`.
    pub fn skip_to_last(name: impl Into<String>) -> Self {
        AfterMatchSkip::SkipToLast(name.into())
    }
}

/// How many events a stage takes: `times(3)`, `times(2..=4)`, `times(2..)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Times {
    pub(crate) min: usize,
    pub(crate) max: Option<usize>,
}

impl From<usize> for Times {
    fn from(n: usize) -> Self {
        Times {
            min: n,
            max: Some(n),
        }
    }
}

impl From<RangeInclusive<usize>> for Times {
    fn from(range: RangeInclusive<usize>) -> Self {
        Times {
            min: *range.start(),
            max: Some(*range.end()),
        }
    }
}

impl From<RangeFrom<usize>> for Times {
    fn from(range: RangeFrom<usize>) -> Self {
        Times {
            min: range.start,
            max: None,
        }
    }
}

/// Whether a stage takes events or forbids them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StageKind {
    /// Takes events into the match.
    Take,
    /// `not_next`: the event right after the previous stage's last must not match.
    NotNext,
    /// `not_followed_by`: no event between the previous and the next stage may match.
    NotFollowedBy,
}

/// One named stage of a pattern.
pub(crate) struct Stage<T> {
    pub(crate) name: String,
    pub(crate) kind: StageKind,
    pub(crate) condition: Option<Condition<T>>,
    /// How its first event follows the previous stage's last.
    pub(crate) entry: Contiguity,
    pub(crate) min: usize,
    pub(crate) max: Option<usize>,
    pub(crate) optional: bool,
    /// Between the events of a loop.
    pub(crate) inner: Contiguity,
    pub(crate) greedy: bool,
    pub(crate) until: Option<Condition<T>>,
    /// The first stage of the same name: a group's stages are repeated when the pattern is
    /// matched, each copy under the names of the group's stages.
    pub(crate) origin: u16,
}

/// A group of stages (`begin_group`, `next_group`, ...) with a quantifier of its own: the
/// stages `start..end` of the pattern, taken `min` to `max` times in sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Group {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) min: usize,
    pub(crate) max: Option<usize>,
    pub(crate) optional: bool,
    /// Between one pass of the group and the next.
    pub(crate) inner: Contiguity,
}

impl<T> Clone for Stage<T> {
    fn clone(&self) -> Self {
        Stage {
            name: self.name.clone(),
            kind: self.kind,
            condition: self.condition.clone(),
            entry: self.entry,
            min: self.min,
            max: self.max,
            optional: self.optional,
            inner: self.inner,
            greedy: self.greedy,
            until: self.until.clone(),
            origin: self.origin,
        }
    }
}

impl<T> Stage<T> {
    /// Whether the stage can take more than one event.
    pub(crate) fn loops(&self) -> bool {
        self.max != Some(1)
    }

    /// The fewest events it must take for a match (0 when optional).
    pub(crate) fn required(&self) -> usize {
        if self.optional { 0 } else { self.min }
    }

    pub(crate) fn accepts(&self, event: &T, partial: &Partial<'_, T>) -> bool {
        self.condition.as_ref().is_none_or(|c| c(event, partial))
    }
}

/// A pattern of events on a keyed stream, as FlinkCEP's `Pattern`: named stages in sequence,
/// each with a condition, a quantifier and a contiguity, and the time a match must fit in.
///
/// Methods that shape a stage (`where_`, `times`, `optional`, ...) apply to the last stage
/// added; after a group (`begin_group`, `next_group`, `followed_by_group`,
/// `followed_by_any_group`) the quantifiers (`times`, `one_or_more`, `optional`, `consecutive`,
/// `allow_combinations`) apply to the group. A match is a map from stage names to the events
/// they took ([`Match`](crate::cep::Match)).
///
/// ```
/// use std::time::Duration;
/// use riffle::cep::Pattern;
///
/// #[derive(Clone, serde::Serialize, serde::Deserialize)]
/// struct Txn { card: u64, amount: f64, ts: i64 }
///
/// // A tiny transaction, then a large one on the same card, within a minute.
/// let pattern = Pattern::<Txn>::begin("small").where_(|t| t.amount < 1.0)
///     .followed_by("large").where_(|t| t.amount > 500.0)
///     .within(Duration::from_secs(60));
/// assert_eq!(pattern.names(), vec!["small", "large"]);
/// ```
pub struct Pattern<T> {
    pub(crate) stages: Vec<Stage<T>>,
    /// Groups, each after the groups inside it.
    pub(crate) groups: Vec<Group>,
    /// The last thing added is this group: quantifiers apply to it.
    last_group: Option<usize>,
    /// What was asked of the pattern that it cannot do, reported by `validate`.
    misuse: Option<String>,
    pub(crate) within: Option<Duration>,
    pub(crate) skip: AfterMatchSkip,
}

impl<T> Clone for Pattern<T> {
    fn clone(&self) -> Self {
        Pattern {
            stages: self.stages.clone(),
            groups: self.groups.clone(),
            last_group: self.last_group,
            misuse: self.misuse.clone(),
            within: self.within,
            skip: self.skip.clone(),
        }
    }
}

impl<T> fmt::Debug for Pattern<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.describe())
    }
}

impl<T: 'static> Pattern<T> {
    /// A pattern whose first stage is named `name` (it takes any event until given a condition).
    pub fn begin(name: impl Into<String>) -> Self {
        Pattern {
            stages: vec![Stage::new(
                name.into(),
                StageKind::Take,
                Contiguity::Relaxed,
            )],
            groups: Vec::new(),
            last_group: None,
            misuse: None,
            within: None,
            skip: AfterMatchSkip::NoSkip,
        }
    }

    /// A pattern that begins with a group: the stages of `group`, which a quantifier given
    /// next (`times`, `one_or_more`, `optional`, ...) repeats as a whole, as FlinkCEP's
    /// `Pattern.begin(Pattern)`.
    ///
    /// ```
    /// use riffle::cep::Pattern;
    ///
    /// // Twice "a then directly b", then a "c".
    /// let pair = Pattern::<char>::begin("a").where_(|c| *c == 'a').next("b").where_(|c| *c == 'b');
    /// let pattern = Pattern::begin_group(pair).times(2).followed_by("c").where_(|c| *c == 'c');
    /// assert_eq!(pattern.describe(), "(a next b){2} followed_by c");
    /// assert!(pattern.validate().is_ok());
    /// ```
    pub fn begin_group(group: Pattern<T>) -> Self {
        let mut pattern = Pattern {
            stages: Vec::new(),
            groups: Vec::new(),
            last_group: None,
            misuse: None,
            within: None,
            skip: AfterMatchSkip::NoSkip,
        };
        pattern.add_group(group, Contiguity::Relaxed);
        pattern
    }

    /// Adds a group whose first event must directly follow the previous stage's last event.
    pub fn next_group(mut self, group: Pattern<T>) -> Self {
        self.add_group(group, Contiguity::Strict);
        self
    }

    /// Adds a group whose first event follows the previous stage's, skipping events that do
    /// not match it.
    pub fn followed_by_group(mut self, group: Pattern<T>) -> Self {
        self.add_group(group, Contiguity::Relaxed);
        self
    }

    /// Adds a group whose first event is any later matching event, each in a match of its own.
    pub fn followed_by_any_group(mut self, group: Pattern<T>) -> Self {
        self.add_group(group, Contiguity::NonDeterministic);
        self
    }

    /// Adds a stage whose first event must directly follow the previous stage's last event.
    pub fn next(self, name: impl Into<String>) -> Self {
        self.push(name, StageKind::Take, Contiguity::Strict)
    }

    /// Adds a stage whose first event follows the previous stage's, skipping events that do not
    /// match it; the first event that matches is taken.
    pub fn followed_by(self, name: impl Into<String>) -> Self {
        self.push(name, StageKind::Take, Contiguity::Relaxed)
    }

    /// Adds a stage that takes every later matching event, each in a match of its own
    /// (non-deterministic relaxed contiguity).
    pub fn followed_by_any(self, name: impl Into<String>) -> Self {
        self.push(name, StageKind::Take, Contiguity::NonDeterministic)
    }

    /// Adds a negative stage: the event right after the previous stage's last event must not
    /// match its condition. It cannot end a pattern.
    pub fn not_next(self, name: impl Into<String>) -> Self {
        self.push(name, StageKind::NotNext, Contiguity::Strict)
    }

    /// Adds a negative stage: no event between the previous stage's last event and the next
    /// stage's first may match its condition. At the end of a pattern it needs `within`: the
    /// match is emitted when that time has passed without such an event.
    pub fn not_followed_by(self, name: impl Into<String>) -> Self {
        self.push(name, StageKind::NotFollowedBy, Contiguity::Relaxed)
    }

    /// The condition of the last stage (called again, conditions are and-ed).
    pub fn where_(self, condition: impl Fn(&T) -> bool + Send + Sync + 'static) -> Self {
        self.where_with(move |event, _| condition(event))
    }

    /// Appends `group` as a group entered with `entry`.
    fn add_group(&mut self, group: Pattern<T>, entry: Contiguity) {
        let mut misuse = group.misuse;
        if group.within.is_some() {
            misuse.get_or_insert_with(|| {
                "within applies to a whole pattern, not to a group inside it".to_string()
            });
        }
        if group.skip != AfterMatchSkip::NoSkip {
            misuse.get_or_insert_with(|| {
                "after_match applies to a whole pattern, not to a group inside it".to_string()
            });
        }
        if let Some(misuse) = misuse {
            self.misuse.get_or_insert(misuse);
        }
        let start = self.stages.len();
        let mut stages = group.stages;
        stages[0].entry = entry;
        self.stages.extend(stages);
        self.groups.extend(group.groups.into_iter().map(|g| Group {
            start: g.start + start,
            end: g.end + start,
            ..g
        }));
        self.groups.push(Group {
            start,
            end: self.stages.len(),
            min: 1,
            max: Some(1),
            optional: false,
            inner: Contiguity::Relaxed,
        });
        self.last_group = Some(self.groups.len() - 1);
    }

    /// The last group added, if it is the last thing added; else notes that `what` was asked
    /// of a group when it applies to stages only.
    fn group_for(&mut self, what: &str, applies_to_groups: bool) -> Option<usize> {
        let group = self.last_group?;
        if !applies_to_groups {
            let name = &self.stages[self.groups[group].end - 1].name;
            self.misuse.get_or_insert_with(|| {
                format!("`{what}` applies to a stage, not to the group ending with `{name}`")
            });
        }
        Some(group)
    }

    /// An iterative condition: it also sees the events the partial match has taken so far
    /// (e.g. "larger than the average of the stage's events until now").
    pub fn where_with(
        mut self,
        condition: impl Fn(&T, &Partial<'_, T>) -> bool + Send + Sync + 'static,
    ) -> Self {
        if self.group_for("where_", false).is_some() {
            return self;
        }
        let stage = self.last();
        stage.condition = Some(match stage.condition.take() {
            None => Arc::new(condition),
            Some(before) => Arc::new(move |e, p| before(e, p) && condition(e, p)),
        });
        self
    }

    /// An alternative condition of the last stage: an event matches if either holds.
    pub fn or_(mut self, condition: impl Fn(&T) -> bool + Send + Sync + 'static) -> Self {
        if self.group_for("or_", false).is_some() {
            return self;
        }
        let stage = self.last();
        stage.condition = Some(match stage.condition.take() {
            None => Arc::new(move |e, _| condition(e)),
            Some(before) => Arc::new(move |e, p| before(e, p) || condition(e)),
        });
        self
    }

    /// The last stage takes exactly `n`, between `n` and `m` (`n..=m`) or at least `n`
    /// (`n..`) events; after a group, the group is taken that many times.
    pub fn times(mut self, times: impl Into<Times>) -> Self {
        let times = times.into();
        if let Some(group) = self.group_for("times", true) {
            let group = &mut self.groups[group];
            group.min = times.min;
            group.max = times.max;
            return self;
        }
        let stage = self.last();
        stage.min = times.min;
        stage.max = times.max;
        self
    }

    /// The last stage takes one event or more (`times(1..)`).
    pub fn one_or_more(self) -> Self {
        self.times(1..)
    }

    /// The last stage (or group) may also take no event.
    pub fn optional(mut self) -> Self {
        if let Some(group) = self.group_for("optional", true) {
            self.groups[group].optional = true;
            return self;
        }
        self.last().optional = true;
        self
    }

    /// The last stage's loop takes as many events as it can: while it can take an event, the
    /// next stage does not take it.
    pub fn greedy(mut self) -> Self {
        if self.group_for("greedy", false).is_some() {
            return self;
        }
        self.last().greedy = true;
        self
    }

    /// The events of the last stage's loop must directly follow each other (after a group:
    /// each pass of the group directly follows the one before).
    pub fn consecutive(mut self) -> Self {
        if let Some(group) = self.group_for("consecutive", true) {
            self.groups[group].inner = Contiguity::Strict;
            return self;
        }
        self.last().inner = Contiguity::Strict;
        self
    }

    /// The last stage's loop takes any combination of matching events (non-deterministic
    /// relaxed contiguity between its events).
    pub fn allow_combinations(mut self) -> Self {
        if let Some(group) = self.group_for("allow_combinations", true) {
            self.groups[group].inner = Contiguity::NonDeterministic;
            return self;
        }
        self.last().inner = Contiguity::NonDeterministic;
        self
    }

    /// Stops the last stage's loop at the first event matching `condition` (which the loop does
    /// not take; the next stage may).
    pub fn until(mut self, condition: impl Fn(&T) -> bool + Send + Sync + 'static) -> Self {
        if self.group_for("until", false).is_some() {
            return self;
        }
        self.last().until = Some(Arc::new(move |e, _| condition(e)));
        self
    }

    /// The whole match must fit in `within`: its last event less than `within` after its first.
    /// Partial matches older than that are dropped (or sent to the timed-out output).
    pub fn within(mut self, within: Duration) -> Self {
        self.within = Some(within);
        self
    }

    /// What happens to overlapping partial matches once a match is emitted.
    pub fn after_match(mut self, skip: AfterMatchSkip) -> Self {
        self.skip = skip;
        self
    }

    /// The stages' names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.stages.iter().map(|s| s.name.as_str()).collect()
    }

    fn push(mut self, name: impl Into<String>, kind: StageKind, entry: Contiguity) -> Self {
        self.stages.push(Stage::new(name.into(), kind, entry));
        self.last_group = None;
        self
    }

    fn last(&mut self) -> &mut Stage<T> {
        self.stages.last_mut().expect("a pattern has a stage")
    }
}

impl<T> Pattern<T> {
    /// The pattern in one line, in a regular-expression-like notation (`a b+? c`, groups in
    /// parentheses).
    pub fn describe(&self) -> String {
        let mut text = String::new();
        for (i, stage) in self.stages.iter().enumerate() {
            if i > 0 {
                text.push_str(match (stage.kind, stage.entry) {
                    (StageKind::NotNext, _) => " !next ",
                    (StageKind::NotFollowedBy, _) => " !followed_by ",
                    (_, Contiguity::Strict) => " next ",
                    (_, Contiguity::Relaxed) => " followed_by ",
                    (_, Contiguity::NonDeterministic) => " followed_by_any ",
                });
            }
            let mut opening: Vec<(usize, &Group)> = self
                .groups
                .iter()
                .enumerate()
                .filter(|(_, g)| g.start == i)
                .collect();
            opening.sort_by_key(|(index, g)| std::cmp::Reverse((g.end, *index)));
            text.extend(opening.iter().map(|_| '('));
            text.push_str(&stage.name);
            quantifier(&mut text, stage.min, stage.max, stage.optional);
            let mut closing: Vec<(usize, &Group)> = self
                .groups
                .iter()
                .enumerate()
                .filter(|(_, g)| g.end == i + 1)
                .collect();
            closing.sort_by_key(|(index, g)| (std::cmp::Reverse(g.start), *index));
            for (_, g) in closing {
                text.push(')');
                quantifier(&mut text, g.min, g.max, g.optional);
            }
        }
        if let Some(within) = self.within {
            text.push_str(&format!(" within {within:?}"));
        }
        text
    }

    /// The groups (by index) directly inside stages `start..end`, those of index below
    /// `below` only (a group's inner groups come before it), outermost first.
    pub(crate) fn groups_in(&self, start: usize, end: usize, below: usize) -> Vec<usize> {
        let mut found: Vec<usize> = Vec::new();
        let mut i = start;
        while i < end {
            let outer = (0..below)
                .filter(|g| self.groups[*g].start == i && self.groups[*g].end <= end)
                .max_by_key(|g| (self.groups[*g].end, *g));
            match outer {
                Some(g) => {
                    found.push(g);
                    i = self.groups[g].end;
                }
                None => i += 1,
            }
        }
        found
    }

    /// How many stages stages `start..end` become once every group is repeated as often as
    /// its quantifier says (an unbounded group once more than its minimum).
    fn unrolled_len(&self, start: usize, end: usize, below: usize) -> usize {
        let inside = self.groups_in(start, end, below);
        let grouped: usize = inside
            .iter()
            .map(|g| self.groups[*g].end - self.groups[*g].start)
            .sum();
        inside.iter().fold(end - start - grouped, |len, g| {
            let group = &self.groups[*g];
            let copies = group.max.unwrap_or(group.min.saturating_add(1));
            len.saturating_add(
                self.unrolled_len(group.start, group.end, *g)
                    .saturating_mul(copies),
            )
        })
    }

    /// Checks that the pattern can be matched; the error names the stage and what is wrong.
    pub fn validate(&self) -> Result<()> {
        let fail = |message: String| Err(Error::config("pattern", message));
        if let Some(misuse) = &self.misuse {
            return fail(misuse.clone());
        }
        let first = &self.stages[0];
        if first.kind != StageKind::Take {
            return fail(format!(
                "`{}`: a pattern cannot begin with a negative stage",
                first.name
            ));
        }
        if first.required() == 0 || self.groups.iter().any(|g| g.start == 0 && g.optional) {
            return fail(format!(
                "`{}`: the first stage of a pattern cannot be optional",
                first.name
            ));
        }
        for (i, stage) in self.stages.iter().enumerate() {
            if self.stages[..i].iter().any(|s| s.name == stage.name) {
                return fail(format!("two stages are named `{}`", stage.name));
            }
            if stage.max == Some(0) || stage.max.is_some_and(|max| max < stage.min) {
                return fail(format!(
                    "`{}`: times({}..={}) takes no event",
                    stage.name,
                    stage.min,
                    stage.max.unwrap_or(0)
                ));
            }
            if stage.min == 0 {
                return fail(format!(
                    "`{}`: times(0..) is written times(1..).optional()",
                    stage.name
                ));
            }
            if stage.kind != StageKind::Take
                && (stage.loops() || stage.optional || stage.greedy || stage.until.is_some())
            {
                return fail(format!(
                    "`{}`: a negative stage takes no quantifier, greedy or until",
                    stage.name
                ));
            }
            if (stage.greedy || stage.until.is_some()) && !stage.loops() {
                return fail(format!(
                    "`{}`: greedy and until apply to a stage that takes several events \
                     (times, one_or_more)",
                    stage.name
                ));
            }
            let in_optional_group = |j: usize| {
                self.groups
                    .iter()
                    .any(|g| g.optional && (g.start..g.end).contains(&j))
            };
            let mandatory_after = self.stages[i + 1..].iter().enumerate().any(|(j, s)| {
                s.kind == StageKind::Take && s.required() > 0 && !in_optional_group(i + 1 + j)
            });
            if stage.kind != StageKind::Take
                && self.groups.iter().any(|g| (g.start..g.end).contains(&i))
            {
                return fail(format!(
                    "`{}`: not_next and not_followed_by inside a group are not supported",
                    stage.name
                ));
            }
            match stage.kind {
                StageKind::NotNext if !mandatory_after => {
                    return fail(format!(
                        "`{}`: not_next needs a stage after it that must take an event",
                        stage.name
                    ));
                }
                StageKind::NotFollowedBy if !mandatory_after && self.within.is_none() => {
                    return fail(format!(
                        "`{}`: not_followed_by at the end of a pattern needs within(..): \
                         the match is emitted when that time passed without the event",
                        stage.name
                    ));
                }
                _ => {}
            }
        }
        for group in &self.groups {
            let name = &self.stages[group.end - 1].name;
            if group.max == Some(0) || group.max.is_some_and(|max| max < group.min) {
                return fail(format!(
                    "the group ending with `{name}`: times({}..={}) takes no event",
                    group.min,
                    group.max.unwrap_or(0)
                ));
            }
            if group.min == 0 {
                return fail(format!(
                    "the group ending with `{name}`: times(0..) is written times(1..).optional()"
                ));
            }
        }
        let unrolled = self.unrolled_len(0, self.stages.len(), self.groups.len());
        if unrolled > MAX_UNROLLED {
            return fail(format!(
                "its groups repeat to {unrolled} stages, more than {MAX_UNROLLED}: use one_or_more \
                 or times(n..) for long repetitions"
            ));
        }
        if self.within == Some(Duration::ZERO) {
            return fail("within(0) admits no match".to_string());
        }
        if let AfterMatchSkip::SkipToFirst(name) | AfterMatchSkip::SkipToLast(name) = &self.skip
            && !self
                .stages
                .iter()
                .any(|s| &s.name == name && s.kind == StageKind::Take)
        {
            return fail(format!(
                "after_match skips to `{name}`, which is not a stage"
            ));
        }
        Ok(())
    }
}

/// The most stages a pattern may have once its groups are repeated.
const MAX_UNROLLED: usize = 4096;

/// Appends a quantifier in the notation of [`Pattern::describe`].
fn quantifier(text: &mut String, min: usize, max: Option<usize>, optional: bool) {
    match (min, max) {
        (1, Some(1)) => {}
        (1, None) => text.push('+'),
        (n, Some(m)) if n == m => text.push_str(&format!("{{{n}}}")),
        (n, Some(m)) => text.push_str(&format!("{{{n},{m}}}")),
        (n, None) => text.push_str(&format!("{{{n},}}")),
    }
    if optional {
        text.push('?');
    }
}

impl<T> Stage<T> {
    fn new(name: String, kind: StageKind, entry: Contiguity) -> Self {
        Stage {
            name,
            kind,
            condition: None,
            entry,
            min: 1,
            max: Some(1),
            optional: false,
            inner: Contiguity::Relaxed,
            greedy: false,
            until: None,
            origin: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(p: Pattern<i64>) -> String {
        match p.validate() {
            Ok(()) => "ok".into(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn describes_a_pattern() {
        let p = Pattern::<i64>::begin("a")
            .next("b")
            .one_or_more()
            .followed_by("c")
            .times(2..=3)
            .optional()
            .followed_by_any("d")
            .within(Duration::from_secs(1));
        assert_eq!(
            p.describe(),
            "a next b+ followed_by c{2,3}? followed_by_any d within 1s"
        );
    }

    #[test]
    fn refuses_patterns_that_cannot_match() {
        assert_eq!(check(Pattern::begin("a").followed_by("b")), "ok");
        assert!(check(Pattern::begin("a").optional()).contains("cannot be optional"));
        assert!(check(Pattern::begin("a").next("a")).contains("two stages are named `a`"));
        assert!(check(Pattern::begin("a").not_next("x")).contains("not_next needs"));
        assert!(check(Pattern::begin("a").not_followed_by("x")).contains("needs within"));
        assert_eq!(
            check(
                Pattern::begin("a")
                    .not_followed_by("x")
                    .within(Duration::from_secs(1))
            ),
            "ok"
        );
        assert!(
            check(Pattern::begin("a").times(Times {
                min: 3,
                max: Some(2)
            }))
            .contains("takes no event")
        );
        assert!(check(Pattern::begin("a").times(0..)).contains("optional"));
        assert!(check(Pattern::begin("a").greedy()).contains("several events"));
        assert!(
            check(
                Pattern::begin("a")
                    .next("x")
                    .times(2)
                    .optional()
                    .not_next("n")
                    .next("b")
            )
            .eq("ok")
        );
        assert!(
            check(Pattern::begin("a").not_next("x").times(2).next("b"))
                .contains("negative stage takes no quantifier")
        );
        assert!(
            check(Pattern::begin("a").after_match(AfterMatchSkip::skip_to_first("z")))
                .contains("`z`, which is not a stage")
        );
        assert!(check(Pattern::begin("a").within(Duration::ZERO)).contains("within(0)"));
    }
}
