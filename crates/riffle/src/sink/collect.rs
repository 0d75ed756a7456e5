//! A sink that collects records in memory, for tests.

use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::operators::OperatorContext;
use crate::record::{Data, Record};
use crate::sink::{Sink, SinkWriter};

type Shared<T> = Arc<Mutex<Vec<(usize, Record<T>)>>>;

/// Collects every record (with the subtask that received it) into a shared vector.
///
/// ```
/// use riffle::{StreamEnv, sink::CollectSink};
/// let env = StreamEnv::new();
/// let (sink, collected) = CollectSink::new();
/// env.from_iter(vec![3u64, 1, 2]).sink(sink);
/// env.execute().unwrap();
/// assert_eq!(collected.sorted(), vec![1, 2, 3]);
/// ```
pub struct CollectSink<T> {
    shared: Shared<T>,
}

/// The handle to what a [`CollectSink`] collected.
#[derive(Clone)]
pub struct Collected<T> {
    shared: Shared<T>,
}

impl<T: Data> CollectSink<T> {
    /// A sink and the handle to read what it collects.
    pub fn new() -> (CollectSink<T>, Collected<T>) {
        let shared: Shared<T> = Arc::default();
        (
            CollectSink {
                shared: shared.clone(),
            },
            Collected { shared },
        )
    }
}

impl<T: Data> Collected<T> {
    /// Every record with the index of the sink subtask that received it, in arrival order.
    pub fn records_by_subtask(&self) -> Vec<(usize, Record<T>)> {
        self.shared.lock().expect("collect lock").clone()
    }

    /// Every record, in arrival order (interleaved across subtasks).
    pub fn records(&self) -> Vec<Record<T>> {
        self.records_by_subtask()
            .into_iter()
            .map(|(_, r)| r)
            .collect()
    }

    /// Every value, in arrival order.
    pub fn values(&self) -> Vec<T> {
        self.records().into_iter().map(|r| r.value).collect()
    }

    /// Every value, sorted: the multiset of the output, independent of parallel interleaving.
    pub fn sorted(&self) -> Vec<T>
    where
        T: Ord,
    {
        let mut values = self.values();
        values.sort();
        values
    }

    /// Number of records collected.
    pub fn len(&self) -> usize {
        self.shared.lock().expect("collect lock").len()
    }

    /// Whether nothing was collected.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: Data> Sink<T> for CollectSink<T> {
    fn name(&self) -> String {
        "collect".into()
    }

    fn writer(&self, ctx: &OperatorContext) -> Result<Box<dyn SinkWriter<T>>> {
        Ok(Box::new(CollectWriter {
            shared: self.shared.clone(),
            subtask: ctx.subtask,
        }))
    }
}

struct CollectWriter<T> {
    shared: Shared<T>,
    subtask: usize,
}

impl<T: Data> SinkWriter<T> for CollectWriter<T> {
    fn write(&mut self, batch: &mut Vec<Record<T>>) -> Result<()> {
        let mut shared = self.shared.lock().expect("collect lock");
        shared.extend(batch.drain(..).map(|r| (self.subtask, r)));
        Ok(())
    }
}
