//! The pattern a keyed stream is matched against: a sequence of named stages, each with a
//! condition, a quantifier and the contiguity that links it to the stage before (FlinkCEP's
//! `Pattern` vocabulary), and the time the whole match must fit in.

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
/// added. A match is a map from stage names to the events they took ([`Match`](crate::cep::Match)).
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
    pub(crate) within: Option<Duration>,
    pub(crate) skip: AfterMatchSkip,
}

impl<T> Clone for Pattern<T> {
    fn clone(&self) -> Self {
        Pattern {
            stages: self.stages.clone(),
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
            within: None,
            skip: AfterMatchSkip::NoSkip,
        }
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

    /// An iterative condition: it also sees the events the partial match has taken so far
    /// (e.g. "larger than the average of the stage's events until now").
    pub fn where_with(
        mut self,
        condition: impl Fn(&T, &Partial<'_, T>) -> bool + Send + Sync + 'static,
    ) -> Self {
        let stage = self.last();
        stage.condition = Some(match stage.condition.take() {
            None => Arc::new(condition),
            Some(before) => Arc::new(move |e, p| before(e, p) && condition(e, p)),
        });
        self
    }

    /// An alternative condition of the last stage: an event matches if either holds.
    pub fn or_(mut self, condition: impl Fn(&T) -> bool + Send + Sync + 'static) -> Self {
        let stage = self.last();
        stage.condition = Some(match stage.condition.take() {
            None => Arc::new(move |e, _| condition(e)),
            Some(before) => Arc::new(move |e, p| before(e, p) || condition(e)),
        });
        self
    }

    /// The last stage takes exactly `n`, between `n` and `m` (`n..=m`) or at least `n`
    /// (`n..`) events.
    pub fn times(mut self, times: impl Into<Times>) -> Self {
        let times = times.into();
        let stage = self.last();
        stage.min = times.min;
        stage.max = times.max;
        self
    }

    /// The last stage takes one event or more (`times(1..)`).
    pub fn one_or_more(self) -> Self {
        self.times(1..)
    }

    /// The last stage may also take no event.
    pub fn optional(mut self) -> Self {
        self.last().optional = true;
        self
    }

    /// The last stage's loop takes as many events as it can: while it can take an event, the
    /// next stage does not take it.
    pub fn greedy(mut self) -> Self {
        self.last().greedy = true;
        self
    }

    /// The events of the last stage's loop must directly follow each other.
    pub fn consecutive(mut self) -> Self {
        self.last().inner = Contiguity::Strict;
        self
    }

    /// The last stage's loop takes any combination of matching events (non-deterministic
    /// relaxed contiguity between its events).
    pub fn allow_combinations(mut self) -> Self {
        self.last().inner = Contiguity::NonDeterministic;
        self
    }

    /// Stops the last stage's loop at the first event matching `condition` (which the loop does
    /// not take; the next stage may).
    pub fn until(mut self, condition: impl Fn(&T) -> bool + Send + Sync + 'static) -> Self {
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
        self
    }

    fn last(&mut self) -> &mut Stage<T> {
        self.stages.last_mut().expect("a pattern has a stage")
    }
}

impl<T> Pattern<T> {
    /// The pattern in one line, in a regular-expression-like notation (`a b+? c`).
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
            text.push_str(&stage.name);
            match (stage.min, stage.max) {
                (1, Some(1)) => {}
                (1, None) => text.push('+'),
                (n, Some(m)) if n == m => text.push_str(&format!("{{{n}}}")),
                (n, Some(m)) => text.push_str(&format!("{{{n},{m}}}")),
                (n, None) => text.push_str(&format!("{{{n},}}")),
            }
            if stage.optional {
                text.push('?');
            }
        }
        if let Some(within) = self.within {
            text.push_str(&format!(" within {within:?}"));
        }
        text
    }

    /// Checks that the pattern can be matched; the error names the stage and what is wrong.
    pub fn validate(&self) -> Result<()> {
        let fail = |message: String| Err(Error::config("pattern", message));
        let first = &self.stages[0];
        if first.kind != StageKind::Take {
            return fail(format!(
                "`{}`: a pattern cannot begin with a negative stage",
                first.name
            ));
        }
        if first.required() == 0 {
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
            let mandatory_after = self.stages[i + 1..]
                .iter()
                .any(|s| s.kind == StageKind::Take && s.required() > 0);
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
