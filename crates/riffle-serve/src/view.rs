//! A materialized view's rows: kept by the operator at the end of the view's job
//! ([`Materialize`]), checkpointed with the job's other state and restored with it, and read by
//! the server's sessions ([`ViewTable::rows`], [`ViewTable::lookup`],
//! [`ViewTable::subscribe`]).
//!
//! A read sees the view between two batches of its input: the operator applies a batch of
//! changes under one write lock, and holds back a trailing `-U` until its `+U` arrives, so no
//! reader sees half of an update.
//!
//! The view keeps its latest changes (`--retained-changes`, in memory and in its checkpoints),
//! so a subscriber can resume after a `progress` it saw ([`SubscribeOptions::as_of`]); and it
//! knows the progress its last completed checkpoint holds, so a durable subscription
//! ([`SubscribeOptions::durable`]) sends only changes no restart can take back.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use riffle::checkpoint::{Redistribution, RestoreState, SnapshotWriter};
use riffle::operators::{Collector, Operator};
use riffle::{Change, Record, RowKind};
use riffle_sql::{Row, Schema};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use crate::view_rows::{RowStore, Rows};

/// How many of its latest changes a view keeps for subscribers that resume, unless
/// `--retained-changes` says otherwise.
pub const DEFAULT_RETAINED_CHANGES: usize = 100_000;

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
    /// How many of its latest changes the view keeps for subscribers that resume.
    retained_changes: usize,
    inner: RwLock<Inner>,
    /// Whether the job has restored the view, or started it afresh (it processed a batch or
    /// took a checkpoint): reads before that would see it empty.
    ready: AtomicBool,
    /// Whether the view's job ended with its input: no change comes any more.
    finished: AtomicBool,
    /// The progress the view's latest completed checkpoint holds, and the view's generation
    /// (it goes up when the job goes back to a checkpoint, or the view is dropped: what was
    /// waiting for a commit then never gets it).
    committed: watch::Sender<Committed>,
}

/// The view's progress that its latest completed checkpoint holds.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Committed {
    progress: u64,
    generation: u64,
}

struct Inner {
    rows: Rows,
    /// Changes applied since the view was created: a read's position in the view's changelog.
    progress: u64,
    subscribers: Vec<Subscriber>,
    /// The latest batches of changes, oldest first, for subscribers that resume.
    retained: VecDeque<Arc<ChangeBatch>>,
    /// How many changes `retained` holds.
    retained_len: usize,
    /// The views reading this one, each with the progress its latest completed checkpoint
    /// read up to: the changes after it stay retained, whatever the retention, so the reader
    /// can resume from its checkpoint.
    pins: BTreeMap<String, u64>,
}

/// What the view's operator writes into a checkpoint.
#[derive(Serialize, Deserialize)]
struct Snapshot {
    progress: u64,
    rows: Vec<(Row, u64)>,
    /// A `-U` held back for its `+U`.
    pending: Vec<Change<Row>>,
    /// The retained batches: each one's progress after it, and its changes.
    retained: Vec<(u64, Vec<Change<Row>>)>,
    /// The views reading this one, and where their checkpoints are.
    pins: BTreeMap<String, u64>,
}

/// What a view's checkpoint held before it kept changes for resuming subscribers.
#[derive(Deserialize)]
struct SnapshotV1 {
    progress: u64,
    rows: Vec<(Row, u64)>,
    pending: Vec<Change<Row>>,
}

impl From<SnapshotV1> for Snapshot {
    fn from(old: SnapshotV1) -> Snapshot {
        Snapshot {
            progress: old.progress,
            rows: old.rows,
            pending: old.pending,
            retained: Vec::new(),
            pins: BTreeMap::new(),
        }
    }
}

/// Changes applied together, and the view's progress after them (the position of the last
/// one in the view's changelog; the first one's is [`start`](Self::start) + 1).
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

impl ChangeBatch {
    pub(crate) fn new(progress: u64, changes: Vec<Change<Row>>) -> ChangeBatch {
        ChangeBatch {
            progress,
            changes,
            copy_text: OnceLock::new(),
        }
    }

    /// The view's progress before the batch.
    pub fn start(&self) -> u64 {
        self.progress - self.changes.len() as u64
    }
}

struct Subscriber {
    sender: mpsc::UnboundedSender<Arc<ChangeBatch>>,
    queued: Arc<AtomicUsize>,
    cut_off: Arc<OnceLock<CutOff>>,
}

/// Why a subscription ended before the client left: a Postgres SQLSTATE and a message.
#[derive(Clone, Debug, PartialEq)]
pub struct CutOff {
    /// `53400`: the subscriber fell too far behind; `40001`: the view's job went back to a
    /// checkpoint, and the changes after it may come out otherwise.
    pub code: &'static str,
    /// What happened and what to do.
    pub message: String,
}

/// How a subscription starts, and what it sends: `SUBSCRIBE v [WITH (DURABLE, SNAPSHOT =
/// false)] [AS OF progress]`.
#[derive(Clone, Debug, PartialEq)]
pub struct SubscribeOptions {
    /// Send a change only once a completed checkpoint of the view holds it: every `progress`
    /// sent is then a token that a restart, or a crash, of the server never takes back.
    pub durable: bool,
    /// Send the view's rows first (`false`: only the changes after the start).
    pub snapshot: bool,
    /// Resume after this progress (a token a subscription sent earlier): the changes after it,
    /// no rows first; the view must still keep them. Implies `durable`.
    pub as_of: Option<u64>,
    /// After the rows at the start, after each batch of changes, and each second without a
    /// change ([`crate::wire::QUIET_PROGRESS_INTERVAL`]), a row of op `progress` (the view's
    /// columns `NULL`): everything up to its progress was sent.
    pub progress: bool,
}

impl Default for SubscribeOptions {
    fn default() -> Self {
        SubscribeOptions {
            durable: false,
            snapshot: true,
            as_of: None,
            progress: false,
        }
    }
}

/// A subscription that cannot start: a Postgres SQLSTATE (`55000`) and why.
#[derive(Clone, Debug, PartialEq)]
pub struct SubscribeError {
    /// The SQLSTATE.
    pub code: &'static str,
    /// Why, and what to do.
    pub message: String,
}

/// A subscription: the view's rows when it began, then every batch of changes after them.
pub struct Subscription {
    /// The view's rows at the start.
    pub snapshot: Vec<Row>,
    /// The view's progress at the start.
    pub progress: u64,
    /// The changes since, batch by batch; ends when the view is dropped or the subscriber
    /// was cut off (then [`cut_off`](Self::cut_off) says why). [`next`](Self::next) takes
    /// them as the subscription's options say.
    pub changes: mpsc::UnboundedReceiver<Arc<ChangeBatch>>,
    queued: Arc<AtomicUsize>,
    cut_off: Arc<OnceLock<CutOff>>,
    /// Send only what a completed checkpoint holds.
    durable: bool,
    committed: watch::Receiver<Committed>,
    /// The view's generation at the start.
    generation: u64,
    /// A batch taken off the queue and waiting for a checkpoint to hold it.
    held: Option<Arc<ChangeBatch>>,
}

/// What [`Subscription::try_next`] found.
#[derive(Debug)]
pub enum TryNext {
    /// A batch to send.
    Batch(Arc<ChangeBatch>),
    /// Nothing to send yet.
    Nothing,
    /// The subscription is over (see [`Subscription::cut_off`]).
    Ended,
}

impl Subscription {
    /// Marks `batch` as taken off the queue.
    pub fn taken(&self, batch: &ChangeBatch) {
        self.queued
            .fetch_sub(batch.changes.len(), Ordering::Relaxed);
    }

    /// Why the changes ended early, if they did.
    pub fn cut_off(&self) -> Option<CutOff> {
        self.cut_off.get().cloned()
    }

    /// Whether the rows at the start may be sent: `Some(true)` now, `Some(false)` not yet (a
    /// durable subscription waits for a checkpoint holding them), `None` never (the view went
    /// back to an older checkpoint, or was dropped).
    pub fn snapshot_ready(&self) -> Option<bool> {
        if !self.durable {
            return Some(true);
        }
        let committed = *self.committed.borrow();
        if committed.generation != self.generation {
            None
        } else {
            Some(committed.progress >= self.progress)
        }
    }

    /// Whether the subscription is durable (sends only what a checkpoint holds).
    pub fn is_durable(&self) -> bool {
        self.durable
    }

    /// Waits until the view's progress `progress` may be sent: at once unless the
    /// subscription is durable, else once a completed checkpoint holds it. `false`: it never
    /// will be (the view went back to an older checkpoint, or was dropped), and the
    /// subscription is over.
    pub async fn ready_to_send(&mut self, progress: u64) -> bool {
        if !self.durable {
            return true;
        }
        let generation = self.generation;
        match self
            .committed
            .wait_for(|c| c.generation != generation || c.progress >= progress)
            .await
        {
            Ok(c) => c.generation == generation,
            Err(_) => false,
        }
    }

    /// The next batch to send, once it may be sent (see [`ready_to_send`](Self::ready_to_send));
    /// `None` when the subscription is over. Cancel-safe: a batch waiting for its checkpoint
    /// when the future is dropped is the next one still.
    pub async fn next(&mut self) -> Option<Arc<ChangeBatch>> {
        if self.held.is_none() {
            let batch = self.changes.recv().await?;
            self.taken(&batch);
            self.held = Some(batch);
        }
        let progress = self.held.as_ref().map_or(0, |b| b.progress);
        if self.ready_to_send(progress).await {
            self.held.take()
        } else {
            None
        }
    }

    /// The next batch if one may be sent now, without waiting.
    pub fn try_next(&mut self) -> TryNext {
        let batch = match self.held.take() {
            Some(batch) => batch,
            None => match self.changes.try_recv() {
                Ok(batch) => {
                    self.taken(&batch);
                    batch
                }
                Err(mpsc::error::TryRecvError::Empty) => return TryNext::Nothing,
                Err(mpsc::error::TryRecvError::Disconnected) => return TryNext::Ended,
            },
        };
        if !self.durable {
            return TryNext::Batch(batch);
        }
        let committed = *self.committed.borrow();
        if committed.generation != self.generation {
            TryNext::Ended
        } else if committed.progress >= batch.progress {
            TryNext::Batch(batch)
        } else {
            self.held = Some(batch);
            TryNext::Nothing
        }
    }
}

impl ViewTable {
    /// An empty view of `schema`, held by `key` when it has one.
    pub fn new(name: &str, schema: Schema, key: Option<Vec<usize>>, max_lag: usize) -> ViewTable {
        let rows = Rows::empty(key.is_some(), None);
        ViewTable {
            name: name.to_string(),
            schema,
            key,
            max_lag,
            retained_changes: DEFAULT_RETAINED_CHANGES,
            inner: RwLock::new(Inner {
                rows,
                progress: 0,
                subscribers: Vec::new(),
                retained: VecDeque::new(),
                retained_len: 0,
                pins: BTreeMap::new(),
            }),
            ready: AtomicBool::new(false),
            finished: AtomicBool::new(false),
            committed: watch::Sender::new(Committed {
                progress: 0,
                generation: 0,
            }),
        }
    }

    /// Keeps the view's latest `changes` (at least; whole batches) for subscribers that
    /// resume with `AS OF` (0: none).
    pub fn with_retained_changes(mut self, changes: usize) -> ViewTable {
        self.retained_changes = changes;
        self
    }

    /// The progress the view's latest completed checkpoint holds: what a restart keeps.
    pub fn committed_progress(&self) -> u64 {
        self.committed.borrow().progress
    }

    /// The view's job ended with its input and its final checkpoint completed: every change
    /// applied is durable, and no other comes.
    pub(crate) fn finish(&self) {
        let progress = self.read().progress;
        self.commit(progress);
        self.finished.store(true, Ordering::Release);
    }

    /// Whether the view's job ended with its input (no change comes any more).
    pub fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    /// A completed checkpoint holds the view up to `progress`.
    fn commit(&self, progress: u64) {
        self.committed.send_if_modified(|c| {
            let newer = progress > c.progress;
            if newer {
                c.progress = progress;
            }
            newer
        });
    }

    /// The view's job went back to the checkpoint holding `progress` (or to nothing): what
    /// subscribers got past it may come out otherwise, so they are cut off, and what waited for
    /// a commit never gets it.
    fn rewind(&self, inner: &mut Inner, progress: u64) {
        let moved = inner.progress != progress;
        if moved {
            let last = inner.progress;
            for s in inner.subscribers.drain(..) {
                let _ = s.cut_off.set(CutOff {
                    code: "40001",
                    message: format!(
                        "view `{}` went back to its checkpoint at progress {progress} (it was at {last}): the changes after it may come out otherwise; subscribe again, WITH (DURABLE) and AS OF the last progress you have to resume",
                        self.name
                    ),
                });
            }
        }
        self.committed.send_modify(|c| {
            c.progress = progress;
            if moved {
                c.generation += 1;
            }
        });
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

    /// Whether two rows of a view with a key have the same key (`false` without a key).
    fn same_key(&self, a: &Row, b: &Row) -> bool {
        self.key
            .as_ref()
            .is_some_and(|key| key.iter().all(|c| a.get(*c) == b.get(*c)))
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

    /// Every row of the view, and the view's progress (one consistent point); an error when
    /// the view's store (RocksDB) cannot be read.
    pub fn try_rows(&self) -> riffle::Result<(Vec<Row>, u64)> {
        let inner = self.read();
        Ok((inner.rows.all()?, inner.progress))
    }

    /// Every row of the view, and the view's progress; no rows when its store cannot be read.
    #[deprecated(
        since = "0.1.0",
        note = "use `try_rows`: a view in RocksDB can fail to read"
    )]
    pub fn rows(&self) -> (Vec<Row>, u64) {
        let inner = self.read();
        let rows = inner.rows.all().unwrap_or_else(|e| {
            tracing::error!(view = %self.name, error = %e, "cannot read the view's rows");
            Vec::new()
        });
        (rows, inner.progress)
    }

    /// How many rows the view has.
    pub fn len(&self) -> usize {
        self.read().rows.len()
    }

    /// How many rows the view has, and its progress, at one point (between two batches).
    pub fn len_and_progress(&self) -> (usize, u64) {
        let inner = self.read();
        (inner.rows.len(), inner.progress)
    }

    /// Whether the view has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The row whose key columns hold `key` (in the key's order), in O(1) (one read of
    /// RocksDB for a view kept there); `None` when the view has no key.
    pub fn try_lookup(&self, key: &Row) -> riffle::Result<Option<Vec<Row>>> {
        self.read().rows.get(key)
    }

    /// As [`try_lookup`](Self::try_lookup), with no row when the view's store cannot be read.
    #[deprecated(
        since = "0.1.0",
        note = "use `try_lookup`: a view in RocksDB can fail to read"
    )]
    pub fn lookup(&self, key: &Row) -> Option<Vec<Row>> {
        self.try_lookup(key).unwrap_or_else(|e| {
            tracing::error!(view = %self.name, error = %e, "cannot read the view's rows");
            Some(Vec::new())
        })
    }

    /// The view's rows now and every change after them (as `options` say: after a token
    /// instead, durable, without the rows).
    pub fn subscribe(&self, options: &SubscribeOptions) -> Result<Subscription, SubscribeError> {
        let mut inner = self.write();
        let (sender, changes) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let cut_off = Arc::new(OnceLock::new());
        let committed = self.committed.subscribe();
        let generation = committed.borrow().generation;
        let (snapshot, progress) = match options.as_of {
            Some(token) => {
                let resumed = self.resume(&inner, token, committed.borrow().progress)?;
                let len = resumed.iter().map(|b| b.changes.len()).sum();
                queued.store(len, Ordering::Relaxed);
                for batch in resumed {
                    let _ = sender.send(batch);
                }
                (Vec::new(), token)
            }
            None if options.snapshot => {
                let rows = inner.rows.all().map_err(|e| SubscribeError {
                    code: "58030",
                    message: format!("SUBSCRIBE {}: cannot read the view's rows: {e}", self.name),
                })?;
                (rows, inner.progress)
            }
            None => (Vec::new(), inner.progress),
        };
        inner.subscribers.push(Subscriber {
            sender,
            queued: queued.clone(),
            cut_off: cut_off.clone(),
        });
        Ok(Subscription {
            snapshot,
            progress,
            changes,
            queued,
            cut_off,
            durable: options.durable || options.as_of.is_some(),
            committed,
            generation,
            held: None,
        })
    }

    /// The retained batches after `token`, the first one cut where the token is inside it.
    fn resume(
        &self,
        inner: &Inner,
        token: u64,
        committed: u64,
    ) -> Result<Vec<Arc<ChangeBatch>>, SubscribeError> {
        let refuse = |message: String| SubscribeError {
            code: "55000",
            message: format!("SUBSCRIBE {} AS OF {token}: {message}", self.name),
        };
        if token > committed {
            return Err(refuse(format!(
                "the view's latest checkpoint holds its changes up to progress {committed} only: a token past it was not durable (it came from a subscription without DURABLE, or from before the view went back to a checkpoint); subscribe again without AS OF"
            )));
        }
        let oldest = inner.retained.front().map_or(inner.progress, |b| b.start());
        if token < oldest {
            return Err(refuse(format!(
                "the view keeps its changes from progress {oldest} on (--retained-changes {}): the ones after {token} are gone; subscribe again without AS OF",
                self.retained_changes
            )));
        }
        let mut batches = Vec::new();
        for batch in inner.retained.iter().filter(|b| b.progress > token) {
            if batch.start() >= token {
                batches.push(batch.clone());
            } else {
                let skip = (token - batch.start()) as usize;
                batches.push(Arc::new(ChangeBatch::new(
                    batch.progress,
                    batch.changes[skip..].to_vec(),
                )));
            }
        }
        Ok(batches)
    }

    /// Ends every subscription (the view is dropped).
    pub fn close_subscriptions(&self) {
        self.write().subscribers.clear();
        self.committed.send_modify(|c| c.generation += 1);
    }

    /// Applies `changes` at once, and passes them to the subscribers.
    fn apply(&self, changes: Vec<Change<Row>>) -> riffle::Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let mut inner = self.write();
        for (i, change) in changes.iter().enumerate() {
            if matches!(change.op, RowKind::Insert | RowKind::UpdateAfter) {
                inner.rows.add(self.key_of(&change.row), &change.row)?;
                continue;
            }
            // A keyed view's `-U` right before the `+U` of its key, in RocksDB: the `+U`
            // replaces the row (one write, not a read, a delete and a write: 2.4x the ingest).
            // Not on the heap: there it made the view's operator faster than its readers could
            // follow on 2 cores (lookups p50 5 -> 9-53 ms, subscription lag p50 5 -> 9-1500 ms
            // in the load bench, for 1.1x the ingest).
            let replaced = inner.rows.is_stored()
                && change.op == RowKind::UpdateBefore
                && changes.get(i + 1).is_some_and(|next| {
                    next.op == RowKind::UpdateAfter && self.same_key(&change.row, &next.row)
                });
            if !replaced {
                inner.rows.remove(self.key_of(&change.row))?;
            }
        }
        inner.progress += changes.len() as u64;
        if inner.subscribers.is_empty() && self.retained_changes == 0 && inner.pins.is_empty() {
            return Ok(());
        }
        let batch = Arc::new(ChangeBatch::new(inner.progress, changes));
        let max_lag = self.max_lag;
        inner.subscribers.retain(|s| {
            let queued = s.queued.fetch_add(batch.changes.len(), Ordering::Relaxed);
            if queued + batch.changes.len() > max_lag {
                // Too far behind: its channel closes after what it already has.
                let _ = s.cut_off.set(CutOff {
                    code: "53400",
                    message: format!(
                        "the subscriber fell more than {max_lag} changes behind the view and was cut off; subscribe again"
                    ),
                });
                return false;
            }
            s.sender.send(batch.clone()).is_ok()
        });
        self.retain(&mut inner, batch);
        Ok(())
    }

    /// Keeps `batch` for subscribers that resume, and forgets the oldest batches past the
    /// view's retention.
    fn retain(&self, inner: &mut Inner, batch: Arc<ChangeBatch>) {
        if self.retained_changes == 0 && inner.pins.is_empty() {
            return;
        }
        inner.retained_len += batch.changes.len();
        inner.retained.push_back(batch);
        self.trim(inner);
    }

    /// Forgets the oldest batches past the view's retention that no reading view needs.
    fn trim(&self, inner: &mut Inner) {
        let pinned = inner.pins.values().min().copied().unwrap_or(u64::MAX);
        while let Some(oldest) = inner.retained.front() {
            if inner.retained_len - oldest.changes.len() < self.retained_changes
                || oldest.progress > pinned
            {
                break;
            }
            inner.retained_len -= oldest.changes.len();
            inner.retained.pop_front();
        }
    }

    /// View `reader` (reading this one) completed a checkpoint that read up to `progress`:
    /// the changes after it are kept until it moves on.
    pub fn pin(&self, reader: &str, progress: u64) {
        let mut inner = self.write();
        inner.pins.insert(reader.to_string(), progress);
        self.trim(&mut inner);
    }

    /// Forgets the pins of the readers `keep` says are gone.
    pub fn keep_pins(&self, keep: impl Fn(&str) -> bool) {
        let mut inner = self.write();
        inner.pins.retain(|reader, _| keep(reader));
        self.trim(&mut inner);
    }

    /// View `reader` no longer reads this one (it was dropped).
    pub fn unpin(&self, reader: &str) {
        let mut inner = self.write();
        inner.pins.remove(reader);
        self.trim(&mut inner);
    }

    /// Empties the view (its job starts again from nothing), keeping its rows in `store` from
    /// now on when given.
    fn clear(&self, store: Option<RowStore>) {
        let mut inner = self.write();
        self.rewind(&mut inner, 0);
        inner.rows = Rows::empty(self.key.is_some(), store);
        inner.progress = 0;
        inner.retained.clear();
        inner.retained_len = 0;
    }

    fn snapshot(&self, pending: &[Change<Row>]) -> Snapshot {
        let inner = self.read();
        let rows = inner.rows.to_checkpoint();
        Snapshot {
            progress: inner.progress,
            rows,
            pending: pending.to_vec(),
            retained: inner
                .retained
                .iter()
                .map(|b| (b.progress, b.changes.clone()))
                .collect(),
            pins: inner.pins.clone(),
        }
    }

    /// Goes back to `snapshot`, its rows in `store` (which the job restored) when given.
    fn restore(&self, snapshot: Snapshot, store: Option<RowStore>) -> riffle::Result<()> {
        let rows = Rows::restored(self.key.is_some(), store, snapshot.rows, |row| {
            self.key_of(row)
        })?;
        let mut inner = self.write();
        self.rewind(&mut inner, snapshot.progress);
        inner.retained.clear();
        inner.retained_len = 0;
        inner.pins = snapshot.pins;
        for (progress, changes) in snapshot.retained {
            self.retain(&mut inner, Arc::new(ChangeBatch::new(progress, changes)));
        }
        inner.rows = rows;
        inner.progress = snapshot.progress;
        Ok(())
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
    /// The view's progress at each checkpoint taken and not completed yet.
    checkpoints: BTreeMap<u64, u64>,
    /// The task's store, when the job keeps its state in one: the view's rows go there.
    store: Option<RowStore>,
}

impl Materialize {
    /// The operator of `table`'s job: a restore replaces the view's rows with the
    /// checkpoint's, a start without one empties it.
    pub fn new(table: Arc<ViewTable>) -> Materialize {
        Materialize {
            table,
            pending: Vec::new(),
            fresh: true,
            checkpoints: BTreeMap::new(),
            store: None,
        }
    }

    /// Starts the view afresh if nothing restored it.
    fn start(&mut self) {
        if self.fresh {
            self.fresh = false;
            self.table.clear(self.store.clone());
            self.table.ready.store(true, Ordering::Release);
        }
    }
}

impl Operator for Materialize {
    type In = Change<Row>;
    type Out = ();

    fn open(&mut self, ctx: &riffle::operators::OperatorContext) -> riffle::Result<()> {
        self.store = ctx
            .store
            .clone()
            .map(|store| RowStore::new(store, &ctx.id, ctx.max_parallelism));
        Ok(())
    }

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
        self.table.apply(std::mem::take(&mut self.pending))?;
        self.pending.extend(held);
        Ok(())
    }

    fn snapshot_state(
        &mut self,
        checkpoint_id: u64,
        snapshot: &mut SnapshotWriter,
    ) -> riffle::Result<()> {
        self.start();
        let view = self.table.snapshot(&self.pending);
        self.checkpoints.insert(checkpoint_id, view.progress);
        snapshot.write_operator(Redistribution::Union, &view)
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> riffle::Result<()> {
        // A completion stands for the checkpoints before it too.
        let later = self
            .checkpoints
            .split_off(&(checkpoint_id.saturating_add(1)));
        let done = std::mem::replace(&mut self.checkpoints, later);
        tracing::debug!(view = %self.table.name, checkpoint_id, progress = ?done.values().max(), "checkpoint completed");
        if let Some(progress) = done.values().max() {
            self.table.commit(*progress);
        }
        Ok(())
    }

    fn restore_state(&mut self, state: &RestoreState) -> riffle::Result<()> {
        // A checkpoint written before the view kept changes for resuming subscribers reads
        // as one without any.
        let snapshots: Vec<Snapshot> = match state.operator::<Snapshot>().collect() {
            Ok(snapshots) => snapshots,
            Err(_) => state
                .operator::<SnapshotV1>()
                .map(|s| s.map(Snapshot::from))
                .collect::<riffle::Result<_>>()?,
        };
        for snapshot in snapshots {
            self.pending = snapshot.pending.clone();
            self.table.restore(snapshot, self.store.clone())?;
            self.fresh = false;
            self.table.ready.store(true, Ordering::Release);
        }
        Ok(())
    }

    fn close(&mut self, _out: &mut Collector<'_, ()>) -> riffle::Result<()> {
        self.start();
        self.table.apply(std::mem::take(&mut self.pending))
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
        view.apply(vec![Change::insert(row(1, 1)), Change::insert(row(2, 1))])
            .unwrap();
        view.apply(vec![
            Change::new(RowKind::UpdateBefore, row(1, 1)),
            Change::new(RowKind::UpdateAfter, row(1, 2)),
        ])
        .unwrap();
        assert_eq!(
            view.try_lookup(&Row(vec![Value::Int(1)])).unwrap(),
            Some(vec![row(1, 2)])
        );
        assert_eq!(
            view.try_lookup(&Row(vec![Value::Int(3)])).unwrap(),
            Some(vec![])
        );
        let (mut rows, progress) = view.try_rows().unwrap();
        rows.sort();
        assert_eq!(rows, [row(1, 2), row(2, 1)]);
        assert_eq!(progress, 4);
    }

    #[test]
    fn a_view_without_a_key_counts_equal_rows() {
        let view = ViewTable::new("v", schema(), None, 100);
        view.apply(vec![Change::insert(row(1, 1)), Change::insert(row(1, 1))])
            .unwrap();
        view.apply(vec![Change::new(RowKind::Delete, row(1, 1))])
            .unwrap();
        assert_eq!(view.try_rows().unwrap().0, [row(1, 1)]);
        assert_eq!(view.try_lookup(&Row(vec![Value::Int(1)])).unwrap(), None);
    }

    #[test]
    fn a_subscriber_gets_the_rows_then_each_change_once_and_a_slow_one_is_cut_off() {
        let view = ViewTable::new("v", schema(), Some(vec![0]), 3);
        view.apply(vec![Change::insert(row(1, 1))]).unwrap();
        let mut fast = view.subscribe(&SubscribeOptions::default()).unwrap();
        let mut slow = view.subscribe(&SubscribeOptions::default()).unwrap();
        assert_eq!(fast.snapshot, [row(1, 1)]);
        assert_eq!(fast.progress, 1);
        view.apply(vec![Change::insert(row(2, 1)), Change::insert(row(3, 1))])
            .unwrap();
        let batch = fast.changes.try_recv().unwrap();
        fast.taken(&batch);
        assert_eq!(batch.progress, 3);
        assert_eq!(batch.changes.len(), 2);
        view.apply(vec![Change::insert(row(4, 1)), Change::insert(row(5, 1))])
            .unwrap();
        let batch = fast.changes.try_recv().unwrap();
        fast.taken(&batch);
        assert_eq!(batch.progress, 5);
        // The slow one never took its first batch: 4 changes queued > 3.
        assert!(slow.changes.try_recv().is_ok());
        assert!(slow.changes.try_recv().is_err());
        let reason = slow.cut_off().unwrap();
        assert_eq!(reason.code, "53400");
        assert!(reason.message.contains("more than 3 changes behind"));
        assert!(fast.cut_off().is_none());
    }

    #[test]
    fn a_snapshot_restores_the_rows_and_the_progress() {
        let view = ViewTable::new("v", schema(), Some(vec![0]), 100);
        view.apply(vec![Change::insert(row(1, 1)), Change::insert(row(2, 5))])
            .unwrap();
        let snapshot = view.snapshot(&[Change::new(RowKind::UpdateBefore, row(2, 5))]);
        let restored = ViewTable::new("v", schema(), Some(vec![0]), 100);
        let bytes = riffle::checkpoint::encode(&snapshot).unwrap();
        restored
            .restore(riffle::checkpoint::decode(&bytes).unwrap(), None)
            .unwrap();
        let (mut rows, progress) = restored.try_rows().unwrap();
        rows.sort();
        assert_eq!(rows, [row(1, 1), row(2, 5)]);
        assert_eq!(progress, 2);
    }

    fn inserts(from: i64, to: i64) -> Vec<Change<Row>> {
        (from..to).map(|u| Change::insert(row(u, 1))).collect()
    }

    fn users(batch: &ChangeBatch) -> Vec<i64> {
        batch
            .changes
            .iter()
            .map(|c| match c.row.get(0) {
                Value::Int(u) => *u,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    fn durable() -> SubscribeOptions {
        SubscribeOptions {
            durable: true,
            ..SubscribeOptions::default()
        }
    }

    fn as_of(token: u64) -> SubscribeOptions {
        SubscribeOptions {
            as_of: Some(token),
            ..durable()
        }
    }

    #[test]
    fn a_durable_subscription_sends_a_change_once_a_checkpoint_holds_it() {
        let view = ViewTable::new("v", schema(), Some(vec![0]), 100);
        let mut live = view.subscribe(&SubscribeOptions::default()).unwrap();
        let mut held = view.subscribe(&durable()).unwrap();
        view.apply(inserts(0, 2)).unwrap();
        view.apply(inserts(2, 3)).unwrap();
        assert!(matches!(live.try_next(), TryNext::Batch(b) if b.progress == 2));
        assert!(matches!(held.try_next(), TryNext::Nothing));
        view.commit(2);
        assert!(matches!(held.try_next(), TryNext::Batch(b) if b.progress == 2));
        assert!(matches!(held.try_next(), TryNext::Nothing));
        view.commit(3);
        assert!(matches!(held.try_next(), TryNext::Batch(b) if b.progress == 3));
        // A checkpoint never goes backwards.
        view.commit(1);
        assert_eq!(view.committed_progress(), 3);
    }

    #[test]
    fn a_subscription_resumes_after_its_token_with_each_change_once() {
        let view = ViewTable::new("v", schema(), None, 100).with_retained_changes(4);
        view.apply(inserts(0, 2)).unwrap(); // progress 2
        view.apply(inserts(2, 5)).unwrap(); // 5
        view.apply(inserts(5, 6)).unwrap(); // 6
        view.commit(6);
        // After a whole batch, and from inside one (a token no subscription sent).
        let mut resumed = view.subscribe(&as_of(2)).unwrap();
        assert!(resumed.snapshot.is_empty());
        let TryNext::Batch(b) = resumed.try_next() else {
            panic!()
        };
        assert_eq!((b.progress, users(&b)), (5, vec![2, 3, 4]));
        let TryNext::Batch(b) = resumed.try_next() else {
            panic!()
        };
        assert_eq!((b.progress, users(&b)), (6, vec![5]));
        let mut inside = view.subscribe(&as_of(3)).unwrap();
        let TryNext::Batch(b) = inside.try_next() else {
            panic!()
        };
        assert_eq!((b.progress, users(&b)), (5, vec![3, 4]));
        // Up to date: nothing, then the next changes once a checkpoint holds them.
        let mut current = view.subscribe(&as_of(6)).unwrap();
        assert!(matches!(current.try_next(), TryNext::Nothing));
        view.apply(inserts(6, 7)).unwrap();
        assert!(matches!(current.try_next(), TryNext::Nothing));
        view.commit(7);
        assert!(matches!(current.try_next(), TryNext::Batch(b) if users(&b) == [6]));
        // The first batch is gone (4 changes kept: the batches after 2): 0 cannot resume.
        let gone = view.subscribe(&as_of(1)).err().unwrap();
        assert_eq!(gone.code, "55000");
        assert!(
            gone.message.contains("from progress 2 on"),
            "{}",
            gone.message
        );
        // Past the latest checkpoint: not a durable token.
        view.apply(inserts(7, 8)).unwrap();
        let ahead = view.subscribe(&as_of(8)).err().unwrap();
        assert!(
            ahead.message.contains("up to progress 7"),
            "{}",
            ahead.message
        );
    }

    #[test]
    fn a_view_that_goes_back_to_a_checkpoint_cuts_its_subscribers_off() {
        let view = ViewTable::new("v", schema(), Some(vec![0]), 100);
        view.apply(inserts(0, 2)).unwrap();
        view.commit(2);
        let checkpoint = riffle::checkpoint::encode(&view.snapshot(&[])).unwrap();
        let mut live = view.subscribe(&SubscribeOptions::default()).unwrap();
        let mut held = view.subscribe(&durable()).unwrap();
        view.apply(inserts(2, 3)).unwrap();
        view.restore(riffle::checkpoint::decode(&checkpoint).unwrap(), None)
            .unwrap();
        // The live one got the change, then is cut off; the durable one never gets it.
        assert!(matches!(live.try_next(), TryNext::Batch(_)));
        assert!(matches!(live.try_next(), TryNext::Ended));
        assert_eq!(live.cut_off().unwrap().code, "40001");
        assert_eq!(view.committed_progress(), 2);
        view.apply(inserts(5, 6)).unwrap();
        view.commit(3);
        assert!(matches!(held.try_next(), TryNext::Ended));
        // The retained changes came back with the checkpoint: a token resumes from them.
        let mut resumed = view.subscribe(&as_of(0)).unwrap();
        assert!(matches!(resumed.try_next(), TryNext::Batch(b) if users(&b) == [0, 1]));
        assert!(matches!(resumed.try_next(), TryNext::Batch(b) if users(&b) == [5]));
    }

    #[test]
    fn a_checkpoint_written_before_retained_changes_restores() {
        #[derive(Serialize)]
        struct Old {
            progress: u64,
            rows: Vec<(Row, u64)>,
            pending: Vec<Change<Row>>,
        }
        let bytes = riffle::checkpoint::encode(&Old {
            progress: 7,
            rows: vec![(row(1, 3), 1)],
            pending: Vec::new(),
        })
        .unwrap();
        assert!(riffle::checkpoint::decode::<Snapshot>(&bytes).is_err());
        let old: SnapshotV1 = riffle::checkpoint::decode(&bytes).unwrap();
        let view = ViewTable::new("v", schema(), Some(vec![0]), 100);
        view.restore(old.into(), None).unwrap();
        assert_eq!(view.try_rows().unwrap(), (vec![row(1, 3)], 7));
        assert_eq!(view.committed_progress(), 7);
        // Nothing retained: a token before 7 cannot resume, 7 can.
        assert!(view.subscribe(&as_of(6)).is_err());
        assert!(view.subscribe(&as_of(7)).is_ok());
    }
}
