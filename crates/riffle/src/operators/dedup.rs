//! Deduplication per key, with state bounded by a time-to-live (Flink SQL's deduplication on
//! processing time): [`KeepFirst`] passes the first record of each key and drops the rest,
//! [`KeepLast`] emits a changelog whose last word per key is the key's latest record.
//!
//! Built with [`KeyedStream::deduplicate`](crate::KeyedStream::deduplicate) and
//! [`KeyedStream::deduplicate_keep_last`](crate::KeyedStream::deduplicate_keep_last). A key is
//! remembered in the job's keyed state (heap or RocksDB, checkpointed per key group, restored at
//! any parallelism) for the time-to-live, in **processing time**, after its last write (the first
//! record for keep-first, the latest for keep-last), as Flink's `table.exec.state.ttl`: keying by
//! a unique id no longer grows the state without bound. Once a key is forgotten, its next record
//! counts as the first again. A zero time-to-live keeps keys forever.

use std::time::Duration;

use crate::change::Change;
use crate::error::Result;
use crate::operators::{KeyedContext, KeyedProcessFunction};
use crate::record::Data;
use crate::state::{StateTtl, ValueStateDescriptor};

/// A value state named `name` whose entries expire `ttl` after their last write (never if zero).
fn descriptor<V>(name: &'static str, ttl: Duration) -> ValueStateDescriptor<V> {
    let descriptor = ValueStateDescriptor::new(name);
    if ttl.is_zero() {
        descriptor
    } else {
        descriptor.with_ttl(StateTtl::after_write(ttl))
    }
}

/// Keeps the first record of each key: emits it, drops later ones of the key until the key is
/// forgotten, `ttl` after its first record (processing time). Emits appends.
///
/// ```
/// use std::time::Duration;
/// use riffle::operators::{KeepFirst, KeyedProcess};
/// use riffle::testing::OperatorHarness;
///
/// let op = KeyedProcess::new(std::sync::Arc::new(|e: &(u32, char)| e.0), KeepFirst::new(Duration::from_secs(60)));
/// let mut h = OperatorHarness::builder(op).build().unwrap();
/// for event in [(1, 'a'), (1, 'b'), (2, 'c')] {
///     h.process_untimed(event).unwrap();
/// }
/// h.advance_processing_time(Duration::from_secs(60)).unwrap();
/// h.process_untimed((1, 'd')).unwrap(); // key 1 was forgotten
/// assert_eq!(h.take_values(), vec![(1, 'a'), (2, 'c'), (1, 'd')]);
/// ```
#[derive(Clone, Debug)]
pub struct KeepFirst {
    ttl: Duration,
}

impl KeepFirst {
    /// Keeps each key for `ttl` after its first record (zero: forever).
    pub fn new(ttl: Duration) -> Self {
        KeepFirst { ttl }
    }
}

impl<K: Data + std::hash::Hash + Eq, T: Data> KeyedProcessFunction<K, T, T> for KeepFirst {
    fn process_element(&mut self, _key: &K, value: T, ctx: &mut KeyedContext<K, T>) -> Result<()> {
        let seen = descriptor::<()>("dedup-first-seen", self.ttl);
        if ctx.value(&seen).get()?.is_some() {
            return Ok(());
        }
        ctx.value(&seen).set(())?;
        ctx.emit(value)
    }
}

/// Keeps the last record of each key, as a changelog: `+I` for the key's first record, then
/// `-U` of the previous record and `+U` of the new one for each later record, until the key is
/// forgotten, `ttl` after its latest record (processing time); then its next record is a `+I`
/// again (which an upsert consumer applies as any other put).
///
/// ```
/// use std::time::Duration;
/// use riffle::Change;
/// use riffle::operators::{KeepLast, KeyedProcess};
/// use riffle::testing::OperatorHarness;
///
/// let op = KeyedProcess::new(std::sync::Arc::new(|e: &(u32, char)| e.0), KeepLast::new(Duration::from_secs(60)));
/// let mut h = OperatorHarness::builder(op).build().unwrap();
/// h.process_untimed((1, 'a')).unwrap();
/// h.process_untimed((1, 'b')).unwrap();
/// assert_eq!(h.take_values(), vec![
///     Change::insert((1, 'a')),
///     Change::update_before((1, 'a')),
///     Change::update_after((1, 'b')),
/// ]);
/// ```
#[derive(Clone, Debug)]
pub struct KeepLast {
    ttl: Duration,
}

impl KeepLast {
    /// Keeps each key for `ttl` after its latest record (zero: forever).
    pub fn new(ttl: Duration) -> Self {
        KeepLast { ttl }
    }
}

impl<K: Data + std::hash::Hash + Eq, T: Data> KeyedProcessFunction<K, T, Change<T>> for KeepLast {
    fn process_element(
        &mut self,
        _key: &K,
        value: T,
        ctx: &mut KeyedContext<K, Change<T>>,
    ) -> Result<()> {
        let last = descriptor::<T>("dedup-last", self.ttl);
        match ctx.value(&last).get()? {
            Some(previous) => {
                ctx.emit(Change::update_before(previous))?;
                ctx.emit(Change::update_after(value.clone()))?;
            }
            None => ctx.emit(Change::insert(value.clone()))?,
        }
        ctx.value(&last).set(value)
    }
}
