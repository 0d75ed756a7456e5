//! The regular join of two keyed streams (Flink SQL's unbounded join): every row of one input
//! joins every row of the same key of the other input that arrived before or after it, for as
//! long as the rows are kept (forever, or for the state time-to-live). The result is a changelog
//! ([`Change`]), because an outer join revises what it emitted: a row of an outer side that
//! finds no match is emitted padded with `None` (`+I`), and when a matching row of the other
//! side arrives later, the padded result is retracted (`-D`) before the joined one (`+I`).
//!
//! Built with [`KeyedStream::join_regular`](crate::KeyedStream::join_regular); the function
//! here runs in a [`KeyedProcess`](crate::operators::KeyedProcess) over [`Either`], so its rows
//! live in the job's keyed state (heap or RocksDB), are checkpointed per key group and restore at
//! any parallelism.
//!
//! **Inputs**: append-only (every input record is an insert, [`RegularJoinFunction`]), or
//! changelogs ([`ChangelogJoinFunction`], built with
//! [`apply_changelog`](crate::api::RegularJoinBuilder::apply_changelog)): a `+I`/`+U` row arrives
//! as an insert does, a `-U`/`-D` row takes back the equal row kept for its side and retracts
//! (`-D`) every result it was part of; an outer side's rows that lose their last match are
//! emitted padded again (`+I`).
//!
//! **State**: per key, the rows of each input, each with its arrival time (processing time) and
//! whether its `None`-padded result is out. With a time-to-live, a row is forgotten `ttl` after
//! it arrived, silently (nothing is retracted, as in Flink): a row arriving later no longer
//! joins it. A key's rows of one input are one state entry: a row is appended to it (in
//! RocksDB, where the entry lies in the store's cache, without copying the rows before it), and
//! the other input's rows are read whole for each row that arrives, so a key's cost grows with
//! its rows on the other side (as its results do). Expired rows are skipped by every read and
//! dropped in one rewrite of a key's list once the oldest has been expired for half a TTL
//! more (a hot key's list is rewritten once per half TTL, not at every arrival).

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::change::Change;
use crate::error::Result;
use crate::operators::{KeyedContext, KeyedProcessFunction};
use crate::record::{Data, Either, Timestamp};
use crate::state::{ListStateDescriptor, StateTtl};

/// Which rows of a regular join without a match are emitted, padded with `None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum JoinType {
    /// Only matched pairs.
    Inner,
    /// Matched pairs, and rows of the first (left) input without a match.
    Left,
    /// Matched pairs, and rows of the second (right) input without a match.
    Right,
    /// Matched pairs, and rows of either input without a match.
    Full,
}

impl JoinType {
    /// Whether unmatched rows of the first input are emitted.
    pub fn left_outer(self) -> bool {
        matches!(self, JoinType::Left | JoinType::Full)
    }

    /// Whether unmatched rows of the second input are emitted.
    pub fn right_outer(self) -> bool {
        matches!(self, JoinType::Right | JoinType::Full)
    }
}

/// A row kept by the join.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Kept<T> {
    row: T,
    /// Processing time it arrived: it expires `ttl` later.
    arrived: Timestamp,
    /// Its `None`-padded result was emitted and not yet retracted.
    padded: bool,
}

type JoinFn<A, B, Out> = Arc<dyn Fn(Option<&A>, Option<&B>) -> Out + Send + Sync>;

/// How a row of one side is kept (the identity unless [`RegularJoinFunction::keeping`]).
type KeepFn<T> = Arc<dyn Fn(T) -> T + Send + Sync>;

/// The keyed function of a regular join (see the [module](self)): reads [`Either`] the first
/// input's rows (`Left`) or the second's (`Right`), emits [`Change`]s of `join(left, right)`.
///
/// ```
/// use riffle::{Change, Either};
/// use riffle::operators::{JoinType, KeyedProcess, RegularJoinFunction};
/// use riffle::testing::OperatorHarness;
///
/// let join = RegularJoinFunction::new(JoinType::Left, None, |l: Option<&(u64, char)>, r: Option<&(u64, u32)>| {
///     (l.map(|l| l.1), r.map(|r| r.1))
/// });
/// let key = std::sync::Arc::new(|e: &Either<(u64, char), (u64, u32)>| match e {
///     Either::Left(l) => l.0,
///     Either::Right(r) => r.0,
/// });
/// let mut h = OperatorHarness::builder(KeyedProcess::new(key, join)).build().unwrap();
/// h.process(Either::Left((1, 'a')), 10).unwrap();
/// h.process(Either::Right((1, 7)), 20).unwrap();
/// assert_eq!(h.take_values(), vec![
///     Change::insert((Some('a'), None)),
///     Change::delete((Some('a'), None)),
///     Change::insert((Some('a'), Some(7))),
/// ]);
/// ```
pub struct RegularJoinFunction<A, B, Out> {
    join: JoinType,
    ttl: Option<Duration>,
    apply: JoinFn<A, B, Out>,
    /// How rows of the first input and of the second are kept.
    keep: (KeepFn<A>, KeepFn<B>),
    /// The changes of one arriving row, made while the other side's rows are read (in a
    /// mutex only so that the function is `Sync`: it is reached through `&mut`, never locked).
    out: std::sync::Mutex<Vec<Change<Out>>>,
}

impl<A, B, Out> Clone for RegularJoinFunction<A, B, Out> {
    fn clone(&self) -> Self {
        RegularJoinFunction {
            join: self.join,
            ttl: self.ttl,
            apply: self.apply.clone(),
            keep: self.keep.clone(),
            out: Default::default(),
        }
    }
}

impl<A, B, Out> RegularJoinFunction<A, B, Out> {
    /// A join of kind `join`, keeping rows for `ttl` of processing time after they arrived
    /// (`None` or zero: forever), emitting `apply(left, right)` (`None` on a padded side).
    pub fn new(
        join: JoinType,
        ttl: Option<Duration>,
        apply: impl Fn(Option<&A>, Option<&B>) -> Out + Send + Sync + 'static,
    ) -> Self {
        RegularJoinFunction {
            join,
            ttl: ttl.filter(|ttl| !ttl.is_zero()),
            apply: Arc::new(apply),
            keep: (Arc::new(|row| row), Arc::new(|row| row)),
            out: Default::default(),
        }
    }

    /// Keeps rows of the first input as `left(row)` and of the second as `right(row)` once
    /// they have been joined (a compact form, say): the join function sees both forms.
    pub fn keeping(
        mut self,
        left: Arc<dyn Fn(A) -> A + Send + Sync>,
        right: Arc<dyn Fn(B) -> B + Send + Sync>,
    ) -> Self {
        self.keep = (left, right);
        self
    }

    fn descriptor<T>(&self, name: &'static str) -> ListStateDescriptor<Kept<T>> {
        let descriptor = ListStateDescriptor::new(name);
        match self.ttl {
            // The list of a key is gone `ttl` after its last write, when every row in it expired.
            Some(ttl) => descriptor.with_ttl(StateTtl::after_write(ttl)),
            None => descriptor,
        }
    }

    /// The live rows of `descriptor` for the current key, and whether some expired.
    fn live<K: Data + std::hash::Hash + Eq, T: Data, O: Data>(
        &self,
        descriptor: &ListStateDescriptor<Kept<T>>,
        now: Timestamp,
        ctx: &mut KeyedContext<K, Change<O>>,
    ) -> Result<(Vec<Kept<T>>, bool)> {
        let mut rows = ctx.list(descriptor).get()?;
        let before = rows.len();
        if let Some(ttl) = self.ttl {
            let ttl = ttl.as_millis() as i64;
            rows.retain(|row| now - row.arrived < ttl);
        }
        let expired = rows.len() != before;
        Ok((rows, expired))
    }
}

impl<K, A, B, Out> KeyedProcessFunction<K, Either<A, B>, Change<Out>>
    for RegularJoinFunction<A, B, Out>
where
    K: Data + std::hash::Hash + Eq,
    A: Data,
    B: Data,
    Out: Data,
{
    fn process_element(
        &mut self,
        _key: &K,
        value: Either<A, B>,
        ctx: &mut KeyedContext<K, Change<Out>>,
    ) -> Result<()> {
        let lefts = self.descriptor::<A>("regular-join-left");
        let rights = self.descriptor::<B>("regular-join-right");
        let apply = self.apply.clone();
        let (keep_left, keep_right) = self.keep.clone();
        match value {
            Either::Left(a) => {
                let outer = self.join.left_outer();
                let sides = (&lefts, &rights, outer);
                self.arrive(a, sides, |l, r| apply(l, r), &*keep_left, ctx)
            }
            Either::Right(b) => {
                let outer = self.join.right_outer();
                let sides = (&rights, &lefts, outer);
                self.arrive(b, sides, |r, l| apply(l, r), &*keep_right, ctx)
            }
        }
    }
}

impl<A, B, Out> RegularJoinFunction<A, B, Out> {
    /// A row of one side arrives: join it with the other side's live rows (retracting their
    /// padded results), or emit it padded if its side is `outer`; then keep it. `apply` gives
    /// the output of (a row of this side, a row of the other).
    fn arrive<K, M, O>(
        &mut self,
        row: M,
        (mine, others, outer): (
            &ListStateDescriptor<Kept<M>>,
            &ListStateDescriptor<Kept<O>>,
            bool,
        ),
        apply: impl Fn(Option<&M>, Option<&O>) -> Out,
        keep: &dyn Fn(M) -> M,
        ctx: &mut KeyedContext<K, Change<Out>>,
    ) -> Result<()>
    where
        K: Data + std::hash::Hash + Eq,
        M: Data,
        O: Data,
        Out: Data,
    {
        let now = ctx.current_processing_time();
        let ttl = self.ttl.map(|ttl| ttl.as_millis() as i64);
        let live = |kept: &Kept<O>| ttl.is_none_or(|ttl| now - kept.arrived < ttl);
        // Expired rows never join (every read skips them); they are dropped, in one rewrite
        // of the list, once one of them has been expired for half a TTL more. Dropped at
        // every arrival, a hot key's list of n live rows was rewritten at every arrival: n
        // rows each, quadratic in the key's rate.
        let stale = |arrived: Timestamp| ttl.is_some_and(|ttl| now - arrived >= ttl + ttl / 2);
        // The other side's rows are read where they lie (not copied): their results are made
        // into `out`, and they are written back only if one expired or lost its padded result.
        let buffer = self.out.get_mut().unwrap_or_else(|e| e.into_inner());
        let mut out = std::mem::take(buffer);
        let mut matched = false;
        let rewrite = ctx
            .list(others)
            .peek(|other_rows| {
                let mut rewrite = false;
                for other in other_rows {
                    if !live(other) {
                        rewrite |= stale(other.arrived);
                        continue;
                    }
                    matched = true;
                    if other.padded {
                        out.push(Change::delete(apply(None, Some(&other.row))));
                        rewrite = true;
                    }
                    out.push(Change::insert(apply(Some(&row), Some(&other.row))));
                }
                rewrite
            })?
            .unwrap_or(false);
        let padded = !matched && outer;
        if padded {
            ctx.emit(Change::insert(apply(Some(&row), None)))?;
        }
        let emitted = out.drain(..).try_for_each(|change| ctx.emit(change));
        *self.out.get_mut().unwrap_or_else(|e| e.into_inner()) = out;
        emitted?;
        if rewrite {
            let left = ctx.list(others).modify(|other_rows| {
                other_rows.retain(live);
                for other in other_rows.iter_mut() {
                    other.padded = false;
                }
                other_rows.len()
            })?;
            if left == 0 {
                ctx.list(others).clear()?;
            }
        }
        let kept = Kept {
            row: keep(row),
            arrived: now,
            padded,
        };
        // The row is appended, this side's rows not read back (rereading and rewriting them at
        // every arrival cost a key's n-th row n copies: quadratic) — unless, with a TTL, the
        // oldest (the first: rows are appended as they arrive) is stale: then this side's
        // expired rows go, so that a key whose other side never comes holds only the rows of
        // the last TTL and a half.
        let prune = ttl.is_some()
            && ctx
                .list(mine)
                .peek_first(|first| stale(first.arrived))?
                .unwrap_or(false);
        if !prune {
            return ctx.list(mine).add(kept);
        }
        ctx.list(mine).modify(|my_rows| {
            my_rows.retain(|row| ttl.is_none_or(|ttl| now - row.arrived < ttl));
            my_rows.push(kept);
        })
    }
}

/// The keyed function of a regular join of two changelogs (see the [module](self)): reads
/// [`Either`] a change of the first input (`Left`) or of the second (`Right`). An accumulating
/// change (`+I`, `+U`) joins as a [`RegularJoinFunction`]'s row does; a retracting one (`-U`,
/// `-D`) takes back the equal row of its side (nothing, if there is none: it expired or never
/// came) and retracts its results. Its state is a [`RegularJoinFunction`]'s.
///
/// ```
/// use riffle::{Change, Either};
/// use riffle::join::{ChangelogJoinFunction, JoinType};
/// use riffle::operators::KeyedProcess;
/// use riffle::testing::OperatorHarness;
///
/// type L = Change<(u64, char)>;
/// type R = Change<(u64, u32)>;
/// let join = ChangelogJoinFunction::new(JoinType::Left, None, |l: Option<&(u64, char)>, r: Option<&(u64, u32)>| {
///     (l.map(|l| l.1), r.map(|r| r.1))
/// });
/// let key = std::sync::Arc::new(|e: &Either<L, R>| match e {
///     Either::Left(l) => l.row.0,
///     Either::Right(r) => r.row.0,
/// });
/// let mut h = OperatorHarness::builder(KeyedProcess::new(key, join)).build().unwrap();
/// h.process(Either::Left(Change::insert((1, 'a'))), 10).unwrap();
/// h.process(Either::Right(Change::insert((1, 7))), 20).unwrap();
/// h.process(Either::Right(Change::delete((1, 7))), 30).unwrap();
/// assert_eq!(h.take_values(), vec![
///     Change::insert((Some('a'), None)),
///     Change::delete((Some('a'), None)),
///     Change::insert((Some('a'), Some(7))),
///     Change::delete((Some('a'), Some(7))),
///     Change::insert((Some('a'), None)),
/// ]);
/// ```
pub struct ChangelogJoinFunction<A, B, Out> {
    rows: RegularJoinFunction<A, B, Out>,
}

impl<A, B, Out> Clone for ChangelogJoinFunction<A, B, Out> {
    fn clone(&self) -> Self {
        ChangelogJoinFunction {
            rows: self.rows.clone(),
        }
    }
}

impl<A, B, Out> ChangelogJoinFunction<A, B, Out> {
    /// A join of kind `join` of two changelogs, keeping rows for `ttl` of processing time after
    /// they arrived (`None` or zero: until retracted), emitting `apply(left, right)`.
    pub fn new(
        join: JoinType,
        ttl: Option<Duration>,
        apply: impl Fn(Option<&A>, Option<&B>) -> Out + Send + Sync + 'static,
    ) -> Self {
        ChangelogJoinFunction {
            rows: RegularJoinFunction::new(join, ttl, apply),
        }
    }
}

impl<K, A, B, Out> KeyedProcessFunction<K, Either<Change<A>, Change<B>>, Change<Out>>
    for ChangelogJoinFunction<A, B, Out>
where
    K: Data + std::hash::Hash + Eq,
    A: Data + PartialEq,
    B: Data + PartialEq,
    Out: Data,
{
    fn process_element(
        &mut self,
        _key: &K,
        value: Either<Change<A>, Change<B>>,
        ctx: &mut KeyedContext<K, Change<Out>>,
    ) -> Result<()> {
        let join = &mut self.rows;
        let lefts = join.descriptor::<A>("regular-join-left");
        let rights = join.descriptor::<B>("regular-join-right");
        let apply = join.apply.clone();
        let (left_outer, right_outer) = (join.join.left_outer(), join.join.right_outer());
        match value {
            Either::Left(a) if a.op.is_retract() => join.take_back(
                a.row,
                (&lefts, left_outer),
                (&rights, right_outer),
                |l, r| apply(l, r),
                ctx,
            ),
            Either::Left(a) => {
                let sides = (&lefts, &rights, left_outer);
                join.arrive(a.row, sides, |l, r| apply(l, r), &|row| row, ctx)
            }
            Either::Right(b) if b.op.is_retract() => join.take_back(
                b.row,
                (&rights, right_outer),
                (&lefts, left_outer),
                |r, l| apply(l, r),
                ctx,
            ),
            Either::Right(b) => {
                let sides = (&rights, &lefts, right_outer);
                join.arrive(b.row, sides, |r, l| apply(l, r), &|row| row, ctx)
            }
        }
    }
}

impl<A, B, Out> RegularJoinFunction<A, B, Out> {
    /// A row of one side is retracted: the equal row kept for that side goes, with its results
    /// (`-D` of each pair, or of its padded row); if that side has no row left and the other
    /// side is outer, the other side's rows are emitted padded again. Each side comes with its
    /// state and whether it is outer; `apply` gives the output of (this side, the other).
    fn take_back<K, M, O>(
        &self,
        row: M,
        (mine, _): (&ListStateDescriptor<Kept<M>>, bool),
        (others, other_outer): (&ListStateDescriptor<Kept<O>>, bool),
        apply: impl Fn(Option<&M>, Option<&O>) -> Out,
        ctx: &mut KeyedContext<K, Change<Out>>,
    ) -> Result<()>
    where
        K: Data + std::hash::Hash + Eq,
        M: Data + PartialEq,
        O: Data,
        Out: Data,
    {
        let now = ctx.current_processing_time();
        let (mut my_rows, _) = self.live(mine, now, ctx)?;
        let Some(at) = my_rows.iter().position(|kept| kept.row == row) else {
            return Ok(());
        };
        let gone = my_rows.remove(at);
        if gone.padded {
            ctx.emit(Change::delete(apply(Some(&gone.row), None)))?;
        }
        let (mut other_rows, mut others_changed) = self.live(others, now, ctx)?;
        for other in &other_rows {
            ctx.emit(Change::delete(apply(Some(&gone.row), Some(&other.row))))?;
        }
        if other_outer && my_rows.is_empty() {
            for other in &mut other_rows {
                ctx.emit(Change::insert(apply(None, Some(&other.row))))?;
                other.padded = true;
                others_changed = true;
            }
        }
        if others_changed {
            if other_rows.is_empty() {
                ctx.list(others).clear()?;
            } else {
                ctx.list(others).update(other_rows)?;
            }
        }
        if my_rows.is_empty() {
            ctx.list(mine).clear()
        } else {
            ctx.list(mine).update(my_rows)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::KeyFn;
    use crate::operators::KeyedProcess;
    use crate::testing::OperatorHarness;

    type L = (u64, char);
    type R = (u64, u32);
    type Out = (Option<char>, Option<u32>);

    fn harness(
        join: JoinType,
        ttl: Option<Duration>,
    ) -> OperatorHarness<Either<L, R>, Change<Out>> {
        let key: KeyFn<u64, Either<L, R>> = Arc::new(|e: &Either<L, R>| match e {
            Either::Left(l) => l.0,
            Either::Right(r) => r.0,
        });
        let function = RegularJoinFunction::new(join, ttl, |l: Option<&L>, r: Option<&R>| {
            (l.map(|l| l.1), r.map(|r| r.1))
        });
        OperatorHarness::builder(KeyedProcess::new(key, function))
            .build()
            .unwrap()
    }

    #[test]
    fn a_full_join_retracts_padded_rows_of_both_sides_when_they_match() -> Result<()> {
        let mut h = harness(JoinType::Full, None);
        h.process(Either::Right((1, 10)), 1)?;
        h.process(Either::Right((1, 11)), 2)?;
        h.process(Either::Left((1, 'a')), 3)?;
        h.process(Either::Left((1, 'b')), 4)?;
        h.process(Either::Left((2, 'c')), 5)?;
        assert_eq!(
            h.take_values(),
            vec![
                Change::insert((None, Some(10))),
                Change::insert((None, Some(11))),
                Change::delete((None, Some(10))),
                Change::insert((Some('a'), Some(10))),
                Change::delete((None, Some(11))),
                Change::insert((Some('a'), Some(11))),
                Change::insert((Some('b'), Some(10))),
                Change::insert((Some('b'), Some(11))),
                Change::insert((Some('c'), None)),
            ]
        );
        Ok(())
    }

    #[test]
    fn a_retracted_row_takes_back_its_results_and_pads_the_outer_rows_it_leaves() -> Result<()> {
        type CL = Change<L>;
        type CR = Change<R>;
        let key: KeyFn<u64, Either<CL, CR>> = Arc::new(|e: &Either<CL, CR>| match e {
            Either::Left(l) => l.row.0,
            Either::Right(r) => r.row.0,
        });
        let function =
            ChangelogJoinFunction::new(JoinType::Right, None, |l: Option<&L>, r: Option<&R>| {
                (l.map(|l| l.1), r.map(|r| r.1))
            });
        let mut h = OperatorHarness::builder(KeyedProcess::new(key, function)).build()?;
        h.process(Either::Left(Change::insert((1, 'a'))), 1)?;
        h.process(Either::Left(Change::insert((1, 'a'))), 2)?;
        h.process(Either::Right(Change::insert((1, 7))), 3)?;
        // One 'a' of two goes: its pair goes; the other 'a' still matches.
        h.process(Either::Left(Change::update_before((1, 'a'))), 4)?;
        // A row that is not there changes nothing.
        h.process(Either::Left(Change::delete((1, 'z'))), 5)?;
        // The last 'a' goes: 7 is padded again; then 7 goes, padded.
        h.process(Either::Left(Change::delete((1, 'a'))), 6)?;
        h.process(Either::Right(Change::delete((1, 7))), 7)?;
        assert_eq!(
            h.take_values(),
            vec![
                Change::insert((Some('a'), Some(7))),
                Change::insert((Some('a'), Some(7))),
                Change::delete((Some('a'), Some(7))),
                Change::delete((Some('a'), Some(7))),
                Change::insert((None, Some(7))),
                Change::delete((None, Some(7))),
            ]
        );
        Ok(())
    }

    #[test]
    fn an_inner_join_emits_only_pairs() -> Result<()> {
        let mut h = harness(JoinType::Inner, None);
        h.process(Either::Left((1, 'a')), 1)?;
        h.process(Either::Right((2, 5)), 2)?;
        h.process(Either::Right((1, 7)), 3)?;
        assert_eq!(h.take_values(), vec![Change::insert((Some('a'), Some(7)))]);
        Ok(())
    }
}
