//! Window join and co-group of two streams, as Flink's `JoinedStreams` and `CoGroupedStreams`:
//! `a.join(&b).where_key(f).equal_to(g).window(w).apply(..)` and
//! `a.co_group(&b).where_key(f).equal_to(g).window(w).apply(..)`.
//!
//! Both inputs are partitioned by key into one keyed two-input window operator (the same
//! operator as [`WindowedStream`](crate::WindowedStream)'s, over [`Either`]): tumbling, sliding
//! and session windows, allowed lateness and the late side output work as they do there. When a
//! window fires, the join calls its function once per pair of a left and a right record of the
//! key; the co-group once per key with both inputs' records. (`where` is a Rust keyword, hence
//! `where_key`.)

use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use crate::api::KeyFn;
use crate::api::KeyedConnectedStreams;
use crate::api::stream::DataStream;
use crate::error::Result;
use crate::join::window::{CoGroupAll, JoinPairs};
use crate::operators::OutputTag;
use crate::record::{Data, Either};
use crate::window::{
    ProcessWindow, ProcessWindowFunction, WindowCollector, WindowSettings, Windows, window_operator,
};

/// Marks a join of pairs ([`DataStream::join`]).
pub struct Join;
/// Marks a co-group ([`DataStream::co_group`]).
pub struct CoGroup;

/// Two streams to be joined (`M` = [`Join`]) or co-grouped (`M` = [`CoGroup`]) by window; name
/// the first stream's key with [`where_key`](TwoStreams::where_key).
pub struct TwoStreams<A, B, M> {
    first: DataStream<A>,
    second: DataStream<B>,
    _kind: PhantomData<fn() -> M>,
}

impl<A: Data, B: Data, M> TwoStreams<A, B, M> {
    pub(crate) fn new(first: DataStream<A>, second: DataStream<B>) -> Self {
        TwoStreams {
            first,
            second,
            _kind: PhantomData,
        }
    }

    /// The key of the first stream's records.
    pub fn where_key<K, F>(self, key: F) -> WhereKey<K, A, B, M>
    where
        K: Data + Hash + Eq,
        F: Fn(&A) -> K + Send + Sync + 'static,
    {
        WhereKey {
            streams: self,
            first_key: Arc::new(key),
        }
    }
}

/// A window join or co-group with the first stream's key; name the second's with
/// [`equal_to`](WhereKey::equal_to).
pub struct WhereKey<K, A, B, M> {
    streams: TwoStreams<A, B, M>,
    first_key: KeyFn<K, A>,
}

impl<K: Data + Hash + Eq, A: Data, B: Data, M> WhereKey<K, A, B, M> {
    /// The key of the second stream's records: records of both streams with equal keys meet.
    pub fn equal_to<F>(self, key: F) -> EqualTo<K, A, B, M>
    where
        F: Fn(&B) -> K + Send + Sync + 'static,
    {
        let first_key = self.first_key;
        let first = self.streams.first.key_by(move |a: &A| first_key(a));
        let second = self.streams.second.key_by(key);
        EqualTo {
            keyed: first.connect(&second),
            _kind: PhantomData,
        }
    }
}

/// A window join or co-group keyed on both streams; say which windows with `window`.
pub struct EqualTo<K, A, B, M> {
    keyed: KeyedConnectedStreams<K, A, B>,
    _kind: PhantomData<fn() -> M>,
}

impl<K: Data + Hash + Eq, A: Data, B: Data> EqualTo<K, A, B, Join> {
    /// Cuts both streams into the same windows per key: [`Tumbling`](crate::window::Tumbling),
    /// [`Sliding`](crate::window::Sliding) or [`Session`](crate::window::Session) (a session
    /// spans the records of both streams).
    pub fn window(self, windows: Windows) -> WindowedJoin<K, A, B> {
        WindowedJoin {
            windowed: JoinWindows::new(self.keyed, windows),
        }
    }
}

impl<K: Data + Hash + Eq, A: Data, B: Data> EqualTo<K, A, B, CoGroup> {
    /// Cuts both streams into the same windows per key (see the join's `window`).
    pub fn window(self, windows: Windows) -> WindowedCoGroup<K, A, B> {
        WindowedCoGroup {
            windowed: JoinWindows::new(self.keyed, windows),
        }
    }
}

/// What a window join and a window co-group share: the keyed inputs and the window settings.
struct JoinWindows<K, A, B> {
    keyed: KeyedConnectedStreams<K, A, B>,
    settings: WindowSettings<Either<A, B>>,
}

impl<K: Data + Hash + Eq, A: Data, B: Data> JoinWindows<K, A, B> {
    fn new(keyed: KeyedConnectedStreams<K, A, B>, windows: Windows) -> Self {
        JoinWindows {
            keyed,
            settings: WindowSettings::new(windows),
        }
    }

    /// Adds the window operator running `function` when a window fires.
    fn build<Out, P>(self, name: &str, function: P) -> DataStream<Out>
    where
        Out: Data,
        P: ProcessWindowFunction<K, Either<A, B>, Out> + Clone + Sync,
    {
        let invalid = self.settings.windows.validate().err();
        let settings = self.settings;
        let key = self.keyed.key();
        let stream = self.keyed.add_keyed(name, move || {
            window_operator(
                key.clone(),
                settings.clone(),
                ProcessWindow::new(function.clone(), None),
            )
        });
        if let Some(error) = invalid {
            stream.env.defer_error(error.to_string());
        }
        // Records no window can hold (windows beyond the i64 range) become dead letters, as in
        // a windowed stream.
        stream.env.nodes.borrow_mut()[stream.node].bad_records =
            Some(crate::bad_records::BadRecordPolicy::DeadLetter);
        stream
    }
}

/// A window join: finish it with [`apply`](WindowedJoin::apply) or
/// [`flat_apply`](WindowedJoin::flat_apply).
pub struct WindowedJoin<K, A, B> {
    windowed: JoinWindows<K, A, B>,
}

impl<K: Data + Hash + Eq, A: Data, B: Data> WindowedJoin<K, A, B> {
    /// Keeps each window's records for `lateness` after it fired: a late record within it
    /// fires the window again, which emits every pair again (including the new ones), as
    /// Flink does. Event time only.
    pub fn allowed_lateness(mut self, lateness: Duration) -> Self {
        self.windowed.settings.allowed_lateness(lateness);
        self
    }

    /// Sends records of either stream too late for all their windows to the side output
    /// `tag`; without it they are counted in `late_records_dropped` and logged.
    pub fn side_output_late(mut self, tag: &OutputTag<Either<A, B>>) -> Self {
        self.windowed.settings.side_output_late(tag);
        self
    }

    /// Emits `function(left, right)` for every pair of a left and a right record of one key in
    /// one window (Flink's `JoinFunction`), timestamped with the window's last millisecond.
    ///
    /// ```
    /// use std::time::Duration;
    /// use riffle::{EnvConfig, StreamEnv, sink::CollectSink, time::WatermarkStrategy, window::Tumbling};
    ///
    /// // Orders and payments of the same user in the same minute.
    /// let env = StreamEnv::with_config(EnvConfig::deterministic());
    /// let (sink, out) = CollectSink::new();
    /// let at = || WatermarkStrategy::monotonous().with_timestamps(|r: &(u64, String, i64)| r.2);
    /// let orders = env.from_iter_with_watermarks(vec![(1u64, "tea".to_string(), 1_000i64), (2, "cake".into(), 2_000)], at());
    /// let payments = env.from_iter_with_watermarks(vec![(1u64, "card".to_string(), 30_000i64), (2, "cash".into(), 70_000)], at());
    /// orders.join(&payments)
    ///     .where_key(|o| o.0)
    ///     .equal_to(|p| p.0)
    ///     .window(Tumbling::of(Duration::from_secs(60)))
    ///     .apply(|order, payment| format!("{} by {}", order.1, payment.1))
    ///     .sink(sink);
    /// env.execute().unwrap();
    /// assert_eq!(out.values(), vec!["tea by card"]);
    /// ```
    pub fn apply<Out, F>(self, function: F) -> DataStream<Out>
    where
        Out: Data,
        F: Fn(A, B) -> Out + Clone + Send + Sync + 'static,
    {
        self.flat_apply(move |a, b, out: &mut WindowCollector<'_, '_, Out>| {
            out.emit(function(a, b))
        })
    }

    /// Calls `function(left, right, out)` for every pair of a left and a right record of one
    /// key in one window; it emits any number of results through `out` (Flink's
    /// `FlatJoinFunction`), which also knows the window.
    ///
    /// ```
    /// use std::time::Duration;
    /// use riffle::{EnvConfig, StreamEnv, sink::CollectSink, time::WatermarkStrategy, window::Sliding};
    ///
    /// let env = StreamEnv::with_config(EnvConfig::deterministic());
    /// let (sink, out) = CollectSink::new();
    /// let at = || WatermarkStrategy::monotonous().with_timestamps(|r: &(u8, i64)| r.1);
    /// let a = env.from_iter_with_watermarks(vec![(1u8, 5i64)], at());
    /// let b = env.from_iter_with_watermarks(vec![(1u8, 12i64)], at());
    /// a.join(&b).where_key(|r| r.0).equal_to(|r| r.0)
    ///     .window(Sliding::of(Duration::from_millis(10), Duration::from_millis(5)))
    ///     .flat_apply(|x, y, out| {
    ///         let window = out.window();
    ///         out.emit((window.start, x.1, y.1))
    ///     })
    ///     .sink(sink);
    /// env.execute().unwrap();
    /// assert_eq!(out.values(), vec![(5, 5, 12)]);
    /// ```
    pub fn flat_apply<Out, F>(self, function: F) -> DataStream<Out>
    where
        Out: Data,
        F: FnMut(A, B, &mut WindowCollector<'_, '_, Out>) -> Result<()>
            + Clone
            + Send
            + Sync
            + 'static,
    {
        self.windowed.build(
            "WindowJoin",
            JoinPairs {
                function,
                _types: PhantomData,
            },
        )
    }
}

/// A window co-group: finish it with [`apply`](WindowedCoGroup::apply).
pub struct WindowedCoGroup<K, A, B> {
    windowed: JoinWindows<K, A, B>,
}

impl<K: Data + Hash + Eq, A: Data, B: Data> WindowedCoGroup<K, A, B> {
    /// Keeps each window's records for `lateness` after it fired: a late record within it
    /// calls the function again with every record of the window. Event time only.
    pub fn allowed_lateness(mut self, lateness: Duration) -> Self {
        self.windowed.settings.allowed_lateness(lateness);
        self
    }

    /// Sends records of either stream too late for all their windows to the side output
    /// `tag`; without it they are counted in `late_records_dropped` and logged.
    pub fn side_output_late(mut self, tag: &OutputTag<Either<A, B>>) -> Self {
        self.windowed.settings.side_output_late(tag);
        self
    }

    /// Calls `function(key, lefts, rights, out)` once per key and window with all the records
    /// of both streams (in arrival order; one side may be empty), as Flink's `CoGroupFunction`;
    /// results carry the window's last millisecond.
    ///
    /// ```
    /// use std::time::Duration;
    /// use riffle::{EnvConfig, StreamEnv, sink::CollectSink, time::WatermarkStrategy, window::Tumbling};
    ///
    /// // Per user and minute: how many views, how many clicks (also when there is none).
    /// let env = StreamEnv::with_config(EnvConfig::deterministic());
    /// let (sink, out) = CollectSink::new();
    /// let at = || WatermarkStrategy::monotonous().with_timestamps(|r: &(u64, i64)| r.1);
    /// let views = env.from_iter_with_watermarks(vec![(1u64, 1_000i64), (1, 2_000), (2, 3_000)], at());
    /// let clicks = env.from_iter_with_watermarks(vec![(1u64, 2_500i64)], at());
    /// views.co_group(&clicks)
    ///     .where_key(|v| v.0)
    ///     .equal_to(|c| c.0)
    ///     .window(Tumbling::of(Duration::from_secs(60)))
    ///     .apply(|user, views, clicks, out| out.emit((*user, views.len(), clicks.len())))
    ///     .sink(sink);
    /// env.execute().unwrap();
    /// assert_eq!(out.sorted(), vec![(1, 2, 1), (2, 1, 0)]);
    /// ```
    pub fn apply<Out, F>(self, function: F) -> DataStream<Out>
    where
        Out: Data,
        F: FnMut(&K, Vec<A>, Vec<B>, &mut WindowCollector<'_, '_, Out>) -> Result<()>
            + Clone
            + Send
            + Sync
            + 'static,
    {
        self.windowed.build(
            "WindowCoGroup",
            CoGroupAll {
                function,
                _types: PhantomData,
            },
        )
    }
}
