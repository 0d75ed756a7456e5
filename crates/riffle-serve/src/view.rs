//! A materialized view's rows: kept by the operator at the end of the view's job
//! ([`Materialize`]), checkpointed with the job's other state and restored with it, and read by
//! the server's sessions ([`ViewTable::rows`], [`ViewTable::lookup`],
//! [`ViewTable::subscribe`]).
//!
//! A read sees the view between two batches of its input: the operator applies a batch of
//! changes under one write lock, and holds back a trailing `-U` until its `+U` arrives, so no
//! reader sees half of an update.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use riffle::checkpoint::{Redistribution, RestoreState, SnapshotWriter};
use riffle::operators::{Collector, Operator};
use riffle::{Change, Record, RowKind};
use riffle_sql::{Row, Schema};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// The rows of one materialized view, shared by its job and the sessions reading it.
pub struct ViewTable {
    /// The view's name.
    pub name: String,
    /// Its columns.
    pub schema: Schema,
    /// The columns identifying a row (the query's unique key), when the planner knows them.
    pub key: Option<Vec<usize>>,
    /// How many changes a subscriber may fall behind before it is cut off.
    max_lag: usize,
    inner: RwLock<Inner>,
    /// Whether the job has restored the view, or started it afresh (it processed a batch or
    /// took a checkpoint): reads before that would see it empty.
    ready: AtomicBool,
}

/// The rows by key, or (without a key) each distinct row with its count.
enum Rows {
    Keyed(HashMap<Row, Row>),
    Counted(HashMap<Row, u64>),
}

struct Inner {
    rows: Rows,
    /// Changes applied since the view was created: a read's position in the view's changelog.
    progress: u64,
    subscribers: Vec<Subscriber>,
}

/// What the view's operator writes into a checkpoint.
#[derive(Serialize, Deserialize)]
struct Snapshot {
    progress: u64,
    rows: Vec<(Row, u64)>,
    /// A `-U` held back for its `+U`.
    pending: Vec<Change<Row>>,
}

/// Changes applied together, and the view's progress after them.
#[derive(Debug)]
pub struct ChangeBatch {
    /// The view's progress after the batch.
    pub progress: u64,
    /// The changes, in order.
    pub changes: Vec<Change<Row>>,
    /// The batch as `COPY` text, encoded by the first subscriber that sends it and shared by
    /// the others.
    pub copy_text: std::sync::OnceLock<bytes::Bytes>,
}

struct Subscriber {
    sender: mpsc::UnboundedSender<Arc<ChangeBatch>>,
    queued: Arc<AtomicUsize>,
    cut_off: Arc<AtomicBool>,
}

/// A subscription: the view's rows when it began, then every batch of changes after them.
pub struct Subscription {
    /// The view's rows at the start.
    pub snapshot: Vec<Row>,
    /// The view's progress at the start.
    pub progress: u64,
    /// The changes since, batch by batch; ends when the view is dropped or the subscriber
    /// fell too far behind (then [`cut_off`](Self::cut_off) says so).
    pub changes: mpsc::UnboundedReceiver<Arc<ChangeBatch>>,
    queued: Arc<AtomicUsize>,
    cut_off: Arc<AtomicBool>,
    max_lag: usize,
}

impl Subscription {
    /// Marks `batch` as taken off the queue.
    pub fn taken(&self, batch: &ChangeBatch) {
        self.queued
            .fetch_sub(batch.changes.len(), Ordering::Relaxed);
    }

    /// Why the changes ended early, if they did.
    pub fn cut_off(&self) -> Option<String> {
        self.cut_off.load(Ordering::Relaxed).then(|| {
            format!(
                "the subscriber fell more than {} changes behind the view and was cut off; subscribe again",
                self.max_lag
            )
        })
    }
}

impl ViewTable {
    /// An empty view of `schema`, held by `key` when it has one.
    pub fn new(name: &str, schema: Schema, key: Option<Vec<usize>>, max_lag: usize) -> ViewTable {
        let rows = match key {
            Some(_) => Rows::Keyed(HashMap::new()),
            None => Rows::Counted(HashMap::new()),
        };
        ViewTable {
            name: name.to_string(),
            schema,
            key,
            max_lag,
            inner: RwLock::new(Inner {
                rows,
                progress: 0,
                subscribers: Vec::new(),
            }),
            ready: AtomicBool::new(false),
        }
    }

    /// Whether the view's job has restored it from its checkpoint, or started it afresh.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    fn key_of(&self, row: &Row) -> Row {
        match &self.key {
            Some(key) => Row(key.iter().map(|c| row.get(*c).clone()).collect()),
            None => row.clone(),
        }
    }

    /// The columns a subscription sends: `progress` (where in the view's changelog the row
    /// is), `op` (`insert`, `update`, `delete`), then the view's.
    pub fn subscription_schema(&self) -> Schema {
        let mut fields = vec![
            riffle_sql::Field::new("progress", riffle_sql::DataType::BigInt),
            riffle_sql::Field::new("op", riffle_sql::DataType::Varchar),
        ];
        fields.extend(self.schema.fields.iter().cloned());
        Schema::new(fields)
    }

    /// How many changes the view has applied (its position in its changelog).
    pub fn progress(&self) -> u64 {
        self.read().progress
    }

    /// Every row of the view, and the view's progress (one consistent point).
    pub fn rows(&self) -> (Vec<Row>, u64) {
        let inner = self.read();
        (rows_of(&inner.rows), inner.progress)
    }

    /// How many rows the view has.
    pub fn len(&self) -> usize {
        match &self.read().rows {
            Rows::Keyed(rows) => rows.len(),
            Rows::Counted(rows) => rows.values().map(|n| *n as usize).sum(),
        }
    }

    /// Whether the view has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The row whose key columns hold `key` (in the key's order), in O(1); `None` when the
    /// view has no key.
    pub fn lookup(&self, key: &Row) -> Option<Vec<Row>> {
        match &self.read().rows {
            Rows::Keyed(rows) => Some(rows.get(key).cloned().into_iter().collect()),
            Rows::Counted(_) => None,
        }
    }

    /// The view's rows now and every change after them.
    pub fn subscribe(&self) -> Subscription {
        let mut inner = self.write();
        let (sender, changes) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let cut_off = Arc::new(AtomicBool::new(false));
        inner.subscribers.push(Subscriber {
            sender,
            queued: queued.clone(),
            cut_off: cut_off.clone(),
        });
        Subscription {
            snapshot: rows_of(&inner.rows),
            progress: inner.progress,
            changes,
            queued,
            cut_off,
            max_lag: self.max_lag,
        }
    }

    /// Ends every subscription (the view is dropped).
    pub fn close_subscriptions(&self) {
        self.write().subscribers.clear();
    }

    /// Applies `changes` at once, and passes them to the subscribers.
    fn apply(&self, changes: Vec<Change<Row>>) {
        if changes.is_empty() {
            return;
        }
        let mut inner = self.write();
        for change in &changes {
            let key = self.key_of(&change.row);
            let add = matches!(change.op, RowKind::Insert | RowKind::UpdateAfter);
            match &mut inner.rows {
                Rows::Keyed(rows) => {
                    if add {
                        rows.insert(key, change.row.clone());
                    } else {
                        rows.remove(&key);
                    }
                }
                Rows::Counted(rows) => {
                    if add {
                        *rows.entry(key).or_insert(0) += 1;
                    } else if let Some(n) = rows.get_mut(&key) {
                        *n -= 1;
                        if *n == 0 {
                            rows.remove(&key);
                        }
                    }
                }
            }
        }
        inner.progress += changes.len() as u64;
        if inner.subscribers.is_empty() {
            return;
        }
        let batch = Arc::new(ChangeBatch {
            progress: inner.progress,
            changes,
            copy_text: std::sync::OnceLock::new(),
        });
        let max_lag = self.max_lag;
        inner.subscribers.retain(|s| {
            let queued = s.queued.fetch_add(batch.changes.len(), Ordering::Relaxed);
            if queued + batch.changes.len() > max_lag {
                // Too far behind: its channel closes after what it already has.
                s.cut_off.store(true, Ordering::Relaxed);
                return false;
            }
            s.sender.send(batch.clone()).is_ok()
        });
    }

    /// Empties the view (its job starts again from nothing or from a checkpoint).
    fn clear(&self) {
        let mut inner = self.write();
        inner.rows = match self.key {
            Some(_) => Rows::Keyed(HashMap::new()),
            None => Rows::Counted(HashMap::new()),
        };
        inner.progress = 0;
    }

    fn snapshot(&self, pending: &[Change<Row>]) -> Snapshot {
        let inner = self.read();
        let rows = match &inner.rows {
            Rows::Keyed(rows) => rows.values().map(|r| (r.clone(), 1)).collect(),
            Rows::Counted(rows) => rows.iter().map(|(r, n)| (r.clone(), *n)).collect(),
        };
        Snapshot {
            progress: inner.progress,
            rows,
            pending: pending.to_vec(),
        }
    }

    fn restore(&self, snapshot: Snapshot) {
        let mut inner = self.write();
        let mut rows = match self.key {
            Some(_) => Rows::Keyed(HashMap::with_capacity(snapshot.rows.len())),
            None => Rows::Counted(HashMap::with_capacity(snapshot.rows.len())),
        };
        for (row, n) in snapshot.rows {
            let key = self.key_of(&row);
            match &mut rows {
                Rows::Keyed(rows) => {
                    rows.insert(key, row);
                }
                Rows::Counted(rows) => {
                    rows.insert(key, n);
                }
            }
        }
        inner.rows = rows;
        inner.progress = snapshot.progress;
    }
}

fn rows_of(rows: &Rows) -> Vec<Row> {
    match rows {
        Rows::Keyed(rows) => rows.values().cloned().collect(),
        Rows::Counted(rows) => rows
            .iter()
            .flat_map(|(row, n)| std::iter::repeat_n(row, *n as usize).cloned())
            .collect(),
    }
}

/// The operator at the end of a view's job: applies the query's changes to the view's
/// [`ViewTable`] a batch at a time, and writes the view into the job's checkpoints (so a
/// restart, or a kill of the server, restores the view with the input position it matches).
/// Runs as one subtask.
pub struct Materialize {
    table: Arc<ViewTable>,
    /// A trailing `-U` waiting for its `+U`.
    pending: Vec<Change<Row>>,
    /// Neither restored nor started yet: the view still shows what it held before (a restart
    /// of the job keeps its rows readable until the checkpoint replaces them).
    fresh: bool,
}

impl Materialize {
    /// The operator of `table`'s job: a restore replaces the view's rows with the
    /// checkpoint's, a start without one empties it.
    pub fn new(table: Arc<ViewTable>) -> Materialize {
        Materialize {
            table,
            pending: Vec::new(),
            fresh: true,
        }
    }

    /// Starts the view afresh if nothing restored it.
    fn start(&mut self) {
        if self.fresh {
            self.fresh = false;
            self.table.clear();
            self.table.ready.store(true, Ordering::Release);
        }
    }
}

impl Operator for Materialize {
    type In = Change<Row>;
    type Out = ();

    fn process(
        &mut self,
        batch: &mut Vec<Record<Change<Row>>>,
        _out: &mut Collector<'_, ()>,
    ) -> riffle::Result<()> {
        self.start();
        self.pending.extend(batch.drain(..).map(|r| r.value));
        let held = match self.pending.last() {
            Some(last) if last.op == RowKind::UpdateBefore => self.pending.pop(),
            _ => None,
        };
        self.table.apply(std::mem::take(&mut self.pending));
        self.pending.extend(held);
        Ok(())
    }

    fn snapshot_state(
        &mut self,
        _checkpoint_id: u64,
        snapshot: &mut SnapshotWriter,
    ) -> riffle::Result<()> {
        self.start();
        snapshot.write_operator(Redistribution::Union, &self.table.snapshot(&self.pending))
    }

    fn restore_state(&mut self, state: &RestoreState) -> riffle::Result<()> {
        for snapshot in state.operator::<Snapshot>() {
            let snapshot = snapshot?;
            self.pending = snapshot.pending.clone();
            self.table.restore(snapshot);
            self.fresh = false;
            self.table.ready.store(true, Ordering::Release);
        }
        Ok(())
    }

    fn close(&mut self, _out: &mut Collector<'_, ()>) -> riffle::Result<()> {
        self.start();
        self.table.apply(std::mem::take(&mut self.pending));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use riffle_sql::{DataType, Field, Value};

    fn row(user: i64, n: i64) -> Row {
        Row(vec![Value::Int(user), Value::Int(n)])
    }

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("user_id", DataType::BigInt),
            Field::new("n", DataType::BigInt),
        ])
    }

    #[test]
    fn a_keyed_view_holds_the_last_row_of_each_key_and_a_lookup_finds_it() {
        let view = ViewTable::new("v", schema(), Some(vec![0]), 100);
        view.apply(vec![Change::insert(row(1, 1)), Change::insert(row(2, 1))]);
        view.apply(vec![
            Change::new(RowKind::UpdateBefore, row(1, 1)),
            Change::new(RowKind::UpdateAfter, row(1, 2)),
        ]);
        assert_eq!(
            view.lookup(&Row(vec![Value::Int(1)])),
            Some(vec![row(1, 2)])
        );
        assert_eq!(view.lookup(&Row(vec![Value::Int(3)])), Some(vec![]));
        let (mut rows, progress) = view.rows();
        rows.sort();
        assert_eq!(rows, [row(1, 2), row(2, 1)]);
        assert_eq!(progress, 4);
    }

    #[test]
    fn a_view_without_a_key_counts_equal_rows() {
        let view = ViewTable::new("v", schema(), None, 100);
        view.apply(vec![Change::insert(row(1, 1)), Change::insert(row(1, 1))]);
        view.apply(vec![Change::new(RowKind::Delete, row(1, 1))]);
        assert_eq!(view.rows().0, [row(1, 1)]);
        assert_eq!(view.lookup(&Row(vec![Value::Int(1)])), None);
    }

    #[test]
    fn a_subscriber_gets_the_rows_then_each_change_once_and_a_slow_one_is_cut_off() {
        let view = ViewTable::new("v", schema(), Some(vec![0]), 3);
        view.apply(vec![Change::insert(row(1, 1))]);
        let mut fast = view.subscribe();
        let mut slow = view.subscribe();
        assert_eq!(fast.snapshot, [row(1, 1)]);
        assert_eq!(fast.progress, 1);
        view.apply(vec![Change::insert(row(2, 1)), Change::insert(row(3, 1))]);
        let batch = fast.changes.try_recv().unwrap();
        fast.taken(&batch);
        assert_eq!(batch.progress, 3);
        assert_eq!(batch.changes.len(), 2);
        view.apply(vec![Change::insert(row(4, 1)), Change::insert(row(5, 1))]);
        let batch = fast.changes.try_recv().unwrap();
        fast.taken(&batch);
        assert_eq!(batch.progress, 5);
        // The slow one never took its first batch: 4 changes queued > 3.
        assert!(slow.changes.try_recv().is_ok());
        assert!(slow.changes.try_recv().is_err());
        assert!(
            slow.cut_off()
                .unwrap()
                .contains("more than 3 changes behind")
        );
        assert!(fast.cut_off().is_none());
    }

    #[test]
    fn a_snapshot_restores_the_rows_and_the_progress() {
        let view = ViewTable::new("v", schema(), Some(vec![0]), 100);
        view.apply(vec![Change::insert(row(1, 1)), Change::insert(row(2, 5))]);
        let snapshot = view.snapshot(&[Change::new(RowKind::UpdateBefore, row(2, 5))]);
        let restored = ViewTable::new("v", schema(), Some(vec![0]), 100);
        let bytes = riffle::checkpoint::encode(&snapshot).unwrap();
        restored.restore(riffle::checkpoint::decode(&bytes).unwrap());
        let (mut rows, progress) = restored.rows();
        rows.sort();
        assert_eq!(rows, [row(1, 1), row(2, 5)]);
        assert_eq!(progress, 2);
    }
}
