//! The regular (unbounded) join of two keyed streams, as Flink SQL's: `a.key_by(f)
//! .join_regular(&b.key_by(g))`, inner or outer, with a state time-to-live, emitting a
//! changelog (see [`operators::RegularJoinFunction`](crate::operators::RegularJoinFunction)).

use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use crate::api::connected::KeyedConnectedStreams;
use crate::api::keyed::KeyedStream;
use crate::api::stream::DataStream;
use crate::change::Change;
use crate::join::ChangelogJoinFunction;
use crate::operators::{JoinType, KeyedProcess, RegularJoinFunction};
use crate::record::Data;

impl<K: Data + Hash + Eq, A: Data> KeyedStream<K, A> {
    /// Joins this stream with `other` on equal keys, without a window: each record joins every
    /// record of its key of the other stream, earlier or later (Flink SQL's regular join). The
    /// join is inner unless [`left`](RegularJoinBuilder::left), [`right`](RegularJoinBuilder::right)
    /// or [`full`](RegularJoinBuilder::full) is chosen; [`apply`](RegularJoinBuilder::apply)
    /// gives its output, a changelog.
    ///
    /// ```
    /// use riffle::{Change, EnvConfig, StreamEnv, sink::CollectSink};
    /// use std::time::Duration;
    ///
    /// let env = StreamEnv::with_config(EnvConfig::deterministic());
    /// let (sink, out) = CollectSink::new();
    /// let users = env.from_iter(vec![(1u64, "ann".to_string()), (2, "bob".to_string())]);
    /// let orders = env.from_iter(vec![(1u64, 30u32)]);
    /// users.key_by(|u| u.0)
    ///     .join_regular(&orders.key_by(|o| o.0))
    ///     .left()
    ///     .with_state_ttl(Duration::from_secs(24 * 3600))
    ///     .apply(|user, order| (user.unwrap().1.clone(), order.map(|o| o.1)))
    ///     .sink(sink);
    /// env.execute().unwrap();
    /// // The final table: bob has no order; ann's padded row, if one was emitted, was retracted.
    /// let mut table = riffle::change::RetractTable::new();
    /// table.apply_all(out.values()).unwrap();
    /// assert_eq!(table.rows(), vec![("ann".to_string(), Some(30)), ("bob".to_string(), None)]);
    /// ```
    pub fn join_regular<B: Data>(&self, other: &KeyedStream<K, B>) -> RegularJoinBuilder<K, A, B> {
        RegularJoinBuilder {
            streams: self.connect(other),
            join: JoinType::Inner,
            ttl: None,
            kept: None,
        }
    }
}

/// A regular join being declared (see [`KeyedStream::join_regular`]).
pub struct RegularJoinBuilder<K, A, B> {
    streams: KeyedConnectedStreams<K, A, B>,
    join: JoinType,
    ttl: Option<Duration>,
    kept: Option<KeptAs<A, B>>,
}

/// How each side's rows are kept (see [`RegularJoinBuilder::keep_rows_as`]).
type KeptAs<A, B> = (
    Arc<dyn Fn(A) -> A + Send + Sync>,
    Arc<dyn Fn(B) -> B + Send + Sync>,
);

impl<K: Data + Hash + Eq, A: Data, B: Data> RegularJoinBuilder<K, A, B> {
    /// An inner join: only matched pairs (the default).
    pub fn inner(self) -> Self {
        self.join_type(JoinType::Inner)
    }

    /// A left outer join: rows of this stream without a match too, with `None` on the right.
    pub fn left(self) -> Self {
        self.join_type(JoinType::Left)
    }

    /// A right outer join: rows of the other stream without a match too, `None` on the left.
    pub fn right(self) -> Self {
        self.join_type(JoinType::Right)
    }

    /// A full outer join: rows of either stream without a match too.
    pub fn full(self) -> Self {
        self.join_type(JoinType::Full)
    }

    /// The kind of join.
    pub fn join_type(mut self, join: JoinType) -> Self {
        self.join = join;
        self
    }

    /// Forgets each row `ttl` of processing time after it arrived (Flink's
    /// `table.exec.state.ttl`), silently: rows arriving later no longer join it. Without it (or
    /// with zero) rows are kept forever and the state grows with the input.
    pub fn with_state_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How a row is kept in the join's state once it has been joined: `left(row)` for this
    /// stream's rows, `right(row)` for the other's. Say, a compact form of the row that the
    /// output function still reads, when rows are kept long and are many (the SQL layer keeps
    /// its rows packed as bytes). The output function sees rows both as they arrived and as
    /// they were kept.
    ///
    /// ```
    /// use riffle::{Change, EnvConfig, StreamEnv, sink::CollectSink};
    ///
    /// let env = StreamEnv::with_config(EnvConfig::deterministic());
    /// let (sink, out) = CollectSink::new();
    /// let users = env.from_iter(vec![(1u64, "ann".to_string())]);
    /// let orders = env.from_iter(vec![(1u64, 30u32)]);
    /// users.key_by(|u| u.0)
    ///     .join_regular(&orders.key_by(|o| o.0))
    ///     // Kept names are cut to their first letter.
    ///     .keep_rows_as(|(id, name): (u64, String)| (id, name[..1].to_string()), |order| order)
    ///     .apply(|user, order| (user.unwrap().1.len(), order.unwrap().1))
    ///     .sink(sink);
    /// env.execute().unwrap();
    /// // Whichever side came first was kept: the name is 3 letters or 1.
    /// assert!(matches!(out.values()[0].row, (1 | 3, 30)));
    /// ```
    pub fn keep_rows_as(
        mut self,
        left: impl Fn(A) -> A + Send + Sync + 'static,
        right: impl Fn(B) -> B + Send + Sync + 'static,
    ) -> Self {
        self.kept = Some((Arc::new(left), Arc::new(right)));
        self
    }

    /// The join's output for each pair: `join(left, right)`, with `None` for the missing side
    /// of an unmatched row of an outer join (both are `Some` in an inner join). Emits the
    /// changelog of the results: `+I` for each, `-D` for a padded result that a later match
    /// replaced.
    pub fn apply<Out, F>(self, join: F) -> DataStream<Change<Out>>
    where
        Out: Data,
        F: Fn(Option<&A>, Option<&B>) -> Out + Send + Sync + 'static,
    {
        let mut function = RegularJoinFunction::new(self.join, self.ttl, join);
        if let Some((left, right)) = self.kept {
            function = function.keeping(left, right);
        }
        let key = self.streams.key();
        self.streams.add_keyed("RegularJoin", move || {
            KeyedProcess::new(key.clone(), function.clone())
        })
    }
}

impl<K: Data + Hash + Eq, A: Data + PartialEq, B: Data + PartialEq>
    RegularJoinBuilder<K, Change<A>, Change<B>>
{
    /// As [`apply`](RegularJoinBuilder::apply), for two changelogs (an aggregate's updating
    /// result, another join's output): a `-U`/`-D` row takes back the equal row of its side and
    /// retracts (`-D`) the results it was part of; an outer side's rows left with no match are
    /// emitted padded again.
    ///
    /// ```
    /// use riffle::{Change, EnvConfig, StreamEnv, sink::CollectSink};
    ///
    /// let env = StreamEnv::with_config(EnvConfig::deterministic());
    /// let (sink, out) = CollectSink::new();
    /// // A user renamed: the old row retracted, the new one inserted.
    /// let users = env.from_iter(vec![
    ///     Change::insert((1u64, "ann".to_string())),
    ///     Change::update_before((1, "ann".to_string())),
    ///     Change::update_after((1, "anna".to_string())),
    /// ]);
    /// let orders = env.from_iter(vec![Change::insert((1u64, 30u32))]);
    /// users.key_by(|u| u.row.0)
    ///     .join_regular(&orders.key_by(|o| o.row.0))
    ///     .apply_changelog(|user, order| (user.unwrap().1.clone(), order.unwrap().1))
    ///     .sink(sink);
    /// env.execute().unwrap();
    /// let mut table = riffle::change::RetractTable::new();
    /// table.apply_all(out.values()).unwrap();
    /// assert_eq!(table.rows(), vec![("anna".to_string(), 30)]);
    /// ```
    pub fn apply_changelog<Out, F>(self, join: F) -> DataStream<Change<Out>>
    where
        Out: Data,
        F: Fn(Option<&A>, Option<&B>) -> Out + Send + Sync + 'static,
    {
        let function = ChangelogJoinFunction::new(self.join, self.ttl, join);
        let key = self.streams.key();
        self.streams.add_keyed("RegularJoin", move || {
            KeyedProcess::new(key.clone(), function.clone())
        })
    }
}
