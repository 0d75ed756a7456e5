//! Deduplication on a keyed stream: [`KeyedStream::deduplicate`] (keep the first record per key)
//! and [`KeyedStream::deduplicate_keep_last`] (a changelog of the latest record per key), with
//! the keys remembered for a time-to-live (see [`operators::KeepFirst`](crate::operators::KeepFirst)).

use std::hash::Hash;
use std::time::Duration;

use crate::api::keyed::KeyedStream;
use crate::api::stream::DataStream;
use crate::change::Change;
use crate::operators::{KeepFirst, KeepLast, KeyedProcess};
use crate::record::Data;

impl<K: Data + Hash + Eq, T: Data> KeyedStream<K, T> {
    /// Passes the first record of each key and drops the others (Flink SQL's deduplication
    /// keeping the first row): the seed's "keyBy a unique id" made safe. A key is remembered for
    /// `ttl` of processing time after its first record, then forgotten (its next record passes
    /// again), so the state holds only the keys of the last `ttl`; zero keeps keys forever.
    ///
    /// ```
    /// use riffle::{EnvConfig, StreamEnv, sink::CollectSink};
    /// use std::time::Duration;
    ///
    /// let env = StreamEnv::with_config(EnvConfig::deterministic());
    /// let (sink, out) = CollectSink::new();
    /// env.from_iter(vec![("tx-1".to_string(), 5u32), ("tx-2".into(), 7), ("tx-1".into(), 5)])
    ///     .key_by(|(id, _)| id.clone())
    ///     .deduplicate(Duration::from_secs(600))
    ///     .sink(sink);
    /// env.execute().unwrap();
    /// assert_eq!(out.sorted(), vec![("tx-1".to_string(), 5), ("tx-2".to_string(), 7)]);
    /// ```
    pub fn deduplicate(&self, ttl: Duration) -> DataStream<T> {
        let key = self.key_selector();
        self.add_keyed("Deduplicate", move || {
            KeyedProcess::new(key.clone(), KeepFirst::new(ttl))
        })
    }

    /// Keeps the last record of each key, as a changelog (Flink SQL's deduplication keeping the
    /// last row): `+I` for a key's first record, then `-U` of the previous and `+U` of the new
    /// one for each later record. Apply it by key (an
    /// [`UpsertSink`](crate::sink::UpsertSink)) to get the latest record of every key. A key is
    /// remembered for `ttl` of processing time after its latest record (zero: forever); after
    /// that its next record is a `+I` again.
    ///
    /// ```
    /// use riffle::{Change, EnvConfig, StreamEnv, sink::CollectSink};
    /// use std::time::Duration;
    ///
    /// let env = StreamEnv::with_config(EnvConfig::deterministic());
    /// let (sink, out) = CollectSink::new();
    /// env.from_iter(vec![(1u64, "new"), (1, "paid")].into_iter().map(|(id, s)| (id, s.to_string())))
    ///     .key_by(|order| order.0)
    ///     .deduplicate_keep_last(Duration::from_secs(3600))
    ///     .sink(sink);
    /// env.execute().unwrap();
    /// let order = |s: &str| (1u64, s.to_string());
    /// assert_eq!(out.values(), vec![
    ///     Change::insert(order("new")),
    ///     Change::update_before(order("new")),
    ///     Change::update_after(order("paid")),
    /// ]);
    /// ```
    pub fn deduplicate_keep_last(&self, ttl: Duration) -> DataStream<Change<T>> {
        let key = self.key_selector();
        self.add_keyed("DeduplicateKeepLast", move || {
            KeyedProcess::new(key.clone(), KeepLast::new(ttl))
        })
    }
}
