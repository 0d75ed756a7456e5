//! Sinks that apply a changelog into a table held in memory: [`UpsertSink`] by key,
//! [`RetractSink`] as a multiset (see [`change`](crate::change) for the contract).
//!
//! Both are for tests, demos and small lookup tables read by the program that runs the job. The
//! table is shared by the sink's subtasks; each key's changes must reach the sink in the order
//! they were emitted, which holds when the sink reads the changelog's operator directly (a
//! forward edge) or after a `key_by` of the same key. At-least-once: after a restore, changes
//! replayed from the last checkpoint are applied again, which an upsert table absorbs (a put of
//! the same row, a remove of a missing key) but a multiset does not.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::change::{Change, RetractTable, UpsertTable};
use crate::error::Result;
use crate::operators::OperatorContext;
use crate::record::{Data, Record};
use crate::sink::{Sink, SinkWriter};

type KeyOf<K, T> = Arc<dyn Fn(&T) -> K + Send + Sync>;

/// Applies a changelog by key into an in-memory table: `+I`/`+U` put the row under its key,
/// `-U`/`-D` remove the key.
///
/// ```
/// use riffle::{EnvConfig, StreamEnv, sink::UpsertSink};
/// use std::time::Duration;
///
/// let env = StreamEnv::with_config(EnvConfig::deterministic());
/// let (sink, table) = UpsertSink::new(|(user, _): &(String, u32)| user.clone());
/// env.from_iter(vec![("ann".to_string(), 1u32), ("bob".into(), 2), ("ann".into(), 3)])
///     .key_by(|(user, _)| user.clone())
///     .deduplicate_keep_last(Duration::from_secs(3600))
///     .sink(sink);
/// env.execute().unwrap();
/// let rows: Vec<_> = table.rows().into_values().collect();
/// assert_eq!(rows, vec![("ann".to_string(), 3), ("bob".to_string(), 2)]);
/// ```
pub struct UpsertSink<K, T> {
    key: KeyOf<K, T>,
    table: Arc<Mutex<UpsertTable<K, T>>>,
}

/// The handle to the table an [`UpsertSink`] or a [`RetractSink`] materializes.
pub struct Materialized<Tb> {
    table: Arc<Mutex<Tb>>,
}

impl<Tb> Clone for Materialized<Tb> {
    fn clone(&self) -> Self {
        Materialized {
            table: self.table.clone(),
        }
    }
}

impl<K: Ord + Clone, T: Clone> Materialized<UpsertTable<K, T>> {
    /// The rows by key, now.
    pub fn rows(&self) -> BTreeMap<K, T> {
        self.table.lock().expect("table lock").rows().clone()
    }

    /// The row of `key`, if any.
    pub fn get(&self, key: &K) -> Option<T> {
        self.table
            .lock()
            .expect("table lock")
            .rows()
            .get(key)
            .cloned()
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.table.lock().expect("table lock").rows().len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: Ord + Clone + std::fmt::Debug> Materialized<RetractTable<T>> {
    /// The rows, sorted, each as many times as the table holds it.
    pub fn rows(&self) -> Vec<T> {
        self.table.lock().expect("table lock").rows()
    }

    /// Number of rows (with repetitions).
    pub fn len(&self) -> usize {
        self.table.lock().expect("table lock").len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K: Ord + Send + 'static, T: Data> UpsertSink<K, T> {
    /// A sink keyed by `key`, and the handle to read its table.
    pub fn new(
        key: impl Fn(&T) -> K + Send + Sync + 'static,
    ) -> (Self, Materialized<UpsertTable<K, T>>) {
        let table = Arc::new(Mutex::new(UpsertTable::new()));
        (
            UpsertSink {
                key: Arc::new(key),
                table: table.clone(),
            },
            Materialized { table },
        )
    }
}

impl<K: Ord + Send + 'static, T: Data> Sink<Change<T>> for UpsertSink<K, T> {
    fn name(&self) -> String {
        "upsert".into()
    }

    fn writer(&self, _ctx: &OperatorContext) -> Result<Box<dyn SinkWriter<Change<T>>>> {
        Ok(Box::new(UpsertWriter {
            key: self.key.clone(),
            table: self.table.clone(),
        }))
    }
}

struct UpsertWriter<K, T> {
    key: KeyOf<K, T>,
    table: Arc<Mutex<UpsertTable<K, T>>>,
}

impl<K: Ord + Send, T: Data> SinkWriter<Change<T>> for UpsertWriter<K, T> {
    fn write(&mut self, batch: &mut Vec<Record<Change<T>>>) -> Result<()> {
        let mut table = self.table.lock().expect("table lock");
        for record in batch.drain(..) {
            let key = (self.key)(&record.value.row);
            table.apply(key, record.value);
        }
        Ok(())
    }
}

/// Applies a changelog of rows without a key into an in-memory multiset: `+I`/`+U` add a copy
/// of the row, `-U`/`-D` remove one. A retraction of a row the table does not hold fails the
/// job (the producer broke the changelog contract, or the sink saw changes out of order).
///
/// ```
/// use riffle::{EnvConfig, StreamEnv, sink::RetractSink};
///
/// let env = StreamEnv::with_config(EnvConfig::deterministic());
/// let (sink, table) = RetractSink::new();
/// let orders = env.from_iter(vec![(1u64, "tea".to_string())]);
/// let payments = env.from_iter(vec![(1u64, 250u32), (2, 100)]);
/// orders.key_by(|o| o.0)
///     .join_regular(&payments.key_by(|p| p.0))
///     .full()
///     .apply(|o, p| (o.map(|o| o.1.clone()), p.map(|p| p.1)))
///     .sink(sink);
/// env.execute().unwrap();
/// assert_eq!(table.rows(), vec![(None, Some(100)), (Some("tea".to_string()), Some(250))]);
/// ```
pub struct RetractSink<T> {
    table: Arc<Mutex<RetractTable<T>>>,
}

impl<T: Data + Ord + std::fmt::Debug> RetractSink<T> {
    /// A sink and the handle to read its table.
    pub fn new() -> (Self, Materialized<RetractTable<T>>) {
        let table = Arc::new(Mutex::new(RetractTable::new()));
        (
            RetractSink {
                table: table.clone(),
            },
            Materialized { table },
        )
    }
}

impl<T: Data + Ord + std::fmt::Debug> Sink<Change<T>> for RetractSink<T> {
    fn name(&self) -> String {
        "retract".into()
    }

    fn writer(&self, _ctx: &OperatorContext) -> Result<Box<dyn SinkWriter<Change<T>>>> {
        Ok(Box::new(RetractWriter {
            table: self.table.clone(),
        }))
    }
}

struct RetractWriter<T> {
    table: Arc<Mutex<RetractTable<T>>>,
}

impl<T: Data + Ord + std::fmt::Debug> SinkWriter<Change<T>> for RetractWriter<T> {
    fn write(&mut self, batch: &mut Vec<Record<Change<T>>>) -> Result<()> {
        let mut table = self.table.lock().expect("table lock");
        table.apply_all(batch.drain(..).map(|r| r.value))
    }
}
