//! Test harnesses: drive one operator by hand, as Flink's `KeyedOneInputStreamOperatorTestHarness`.
//!
//! Push records and watermarks, move processing time, end the input; read the exact output,
//! the watermarks it forwarded and each side output; look at its state size through its metrics.
//! Every window and state test of Riffle goes through it.
//!
//! ```
//! use std::time::Duration;
//! use riffle::{OutputTag, aggregate::Count, testing::{OperatorHarness, WindowTest}, window::Tumbling};
//!
//! let late = OutputTag::<(u64, i64)>::new("late");
//! let op = WindowTest::new(|r: &(u64, i64)| r.0, Tumbling::of(Duration::from_secs(10))).side_output_late(&late).aggregate(Count);
//! let mut h = OperatorHarness::builder(op).side_output(&late).build().unwrap();
//! h.process((1, 1_000), 1_000).unwrap();
//! h.process((1, 2_000), 2_000).unwrap();
//! h.watermark(9_999).unwrap();
//! assert_eq!(h.take_output().len(), 1);
//! h.process((1, 3_000), 3_000).unwrap(); // late: the window fired and there is no lateness
//! assert_eq!(h.take_side_output(&late).len(), 1);
//! ```

use std::any::Any;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::aggregate::AggregateFunction;
use crate::checkpoint::{RestoreState, TaskSnapshot};
use crate::error::Result;
use crate::keys::KeyFn;
use crate::keys::KeyGroupRange;
use crate::metrics::{MetricsRegistry, OperatorMetricsSnapshot};
use crate::operators::{
    BuildOperator, ErasedSideOutput, InOf, Operator, OperatorContext, OutOf, OutputTag,
    SideOutputs, TypedSideOutput,
};
use crate::record::{CheckpointBarrier, Data, Record, Timestamp};
use crate::runtime::{ChainLink, Output};
use crate::time::ManualClock;
use crate::window::{
    AggregateWindow, ProcessWindow, ProcessWindowFunction, WindowResult, WindowSettings, Windows,
    window_operator,
};

/// The context of subtask `subtask` of `parallelism` of an operator `id`, for driving an operator
/// or a sink writer by hand (a sink writer's two-phase commit across simulated failures).
/// Its job is named `riffle-job` (the default of `EnvConfig::job_name`); set `job_name` for another.
///
/// ```
/// let ctx = riffle::testing::operator_context("sink", "run-1", 0, 2);
/// assert_eq!((ctx.subtask, ctx.parallelism), (0, 2));
/// ```
#[allow(deprecated)] // sets `batch_size`, the former name of `buffer_size`
pub fn operator_context(
    id: &str,
    run_id: &str,
    subtask: usize,
    parallelism: usize,
) -> OperatorContext {
    let max_parallelism = parallelism.max(128);
    OperatorContext {
        id: id.to_string(),
        run_id: run_id.to_string(),
        job_name: "riffle-job".to_string(),
        restored: false,
        finalizers: None,
        store: None,
        keyed: false,
        name: id.to_string(),
        subtask,
        parallelism,
        max_parallelism,
        key_groups: KeyGroupRange::for_subtask(subtask, parallelism, max_parallelism),
        metrics: MetricsRegistry::default().operator(id, subtask),
        buffer_size: 1024,
        batch_size: 1024,
        clock: Arc::new(ManualClock::new(0)),
    }
}

/// What an operator emitted on one output.
struct Captured<T> {
    records: Vec<Record<T>>,
    watermarks: Vec<Timestamp>,
    finished: bool,
}

impl<T> Default for Captured<T> {
    fn default() -> Self {
        Captured {
            records: Vec::new(),
            watermarks: Vec::new(),
            finished: false,
        }
    }
}

struct Capture<T>(Arc<Mutex<Captured<T>>>);

impl<T: Send> Output<T> for Capture<T> {
    fn records(&mut self, batch: &mut Vec<Record<T>>) -> Result<()> {
        self.0.lock().expect("capture lock").records.append(batch);
        Ok(())
    }
    fn watermark(&mut self, watermark: Timestamp) -> Result<()> {
        self.0
            .lock()
            .expect("capture lock")
            .watermarks
            .push(watermark);
        Ok(())
    }
    fn idle(&mut self, _: bool) -> Result<()> {
        Ok(())
    }
    fn barrier(
        &mut self,
        _: CheckpointBarrier,
        _: &mut crate::checkpoint::TaskSnapshot,
    ) -> Result<()> {
        Ok(())
    }
    fn tick(&mut self) -> Result<()> {
        Ok(())
    }
    fn finish(&mut self) -> Result<()> {
        self.0.lock().expect("capture lock").finished = true;
        Ok(())
    }
}

/// Sets up an [`OperatorHarness`].
pub struct HarnessBuilder<Op: BuildOperator> {
    operator: Op,
    restore: Option<RestoreState>,
    store: Option<Arc<dyn crate::state::KvStore>>,
    subtask: usize,
    parallelism: usize,
    max_parallelism: usize,
    processing_time: Timestamp,
    buffer_size: usize,
    side: SideOutputs,
    side_captures: Vec<(String, Box<dyn Any + Send>)>,
}

impl<Op: BuildOperator> HarnessBuilder<Op> {
    /// Runs the operator as `subtask` of `parallelism` (default 0 of 1).
    pub fn subtask(mut self, subtask: usize, parallelism: usize) -> Self {
        self.subtask = subtask;
        self.parallelism = parallelism;
        self
    }

    /// Number of key groups (default 128).
    pub fn max_parallelism(mut self, max_parallelism: usize) -> Self {
        self.max_parallelism = max_parallelism;
        self
    }

    /// The processing time at the start (default 0).
    pub fn processing_time(mut self, now: Timestamp) -> Self {
        self.processing_time = now;
        self
    }

    /// Records per emitted batch (default 1024), as [`EnvConfig::buffer_size`](crate::EnvConfig::buffer_size).
    pub fn buffer_size(mut self, buffer_size: usize) -> Self {
        self.buffer_size = buffer_size;
        self
    }

    /// [`buffer_size`](Self::buffer_size), under its former name.
    #[deprecated(since = "0.1.0", note = "renamed `buffer_size`, as the job's setting")]
    pub fn batch_size(self, batch_size: usize) -> Self {
        self.buffer_size(batch_size)
    }

    /// Restores `state` (a snapshot taken with [`OperatorHarness::snapshot`]) when the operator
    /// opens.
    pub fn restore(mut self, state: RestoreState) -> Self {
        self.restore = Some(state);
        self
    }

    /// Keeps the operator's keyed state in `store` instead of on the heap.
    pub fn store(mut self, store: Arc<dyn crate::state::KvStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Captures the side output `tag`.
    pub fn side_output<S: Data>(mut self, tag: &OutputTag<S>) -> Self {
        let captured: Arc<Mutex<Captured<S>>> = Arc::default();
        let output: Box<dyn ErasedSideOutput> =
            Box::new(TypedSideOutput::<S>(Box::new(Capture(captured.clone()))));
        self.side.insert(tag.id().to_string(), output);
        self.side_captures
            .push((tag.id().to_string(), Box::new(captured)));
        self
    }

    /// Builds and opens the operator.
    pub fn build(self) -> Result<OperatorHarness<InOf<Op>, OutOf<Op>>> {
        let clock = Arc::new(ManualClock::new(self.processing_time));
        let mut ctx = operator_context(
            "operator under test",
            "harness",
            self.subtask,
            self.parallelism,
        );
        ctx.store = self.store;
        ctx.max_parallelism = self.max_parallelism;
        ctx.key_groups =
            KeyGroupRange::for_subtask(self.subtask, self.parallelism, self.max_parallelism);
        ctx.buffer_size = self.buffer_size;
        #[allow(deprecated)]
        {
            ctx.batch_size = self.buffer_size;
        }
        ctx.clock = clock.clone();
        let registry = MetricsRegistry::default();
        ctx.metrics = registry.operator(&ctx.name, self.subtask);
        let captured: Arc<Mutex<Captured<OutOf<Op>>>> = Arc::default();
        let mut side = self.side;
        side.count_unconsumed_in(ctx.metrics.clone());
        let operator = crate::operators::build_operator(&ctx, || self.operator.build(&ctx))?;
        let mut chain: Box<dyn Output<InOf<Op>>> = Box::new(
            ChainLink::new(operator, ctx, Box::new(Capture(captured.clone())), side)
                .with_restore(self.restore),
        );
        chain.open()?;
        Ok(OperatorHarness {
            chain,
            captured,
            side_captures: self.side_captures,
            clock,
            registry,
            _types: PhantomData,
        })
    }
}

/// Drives one operator instance by hand.
pub struct OperatorHarness<In, Out> {
    chain: Box<dyn Output<In>>,
    captured: Arc<Mutex<Captured<Out>>>,
    side_captures: Vec<(String, Box<dyn Any + Send>)>,
    clock: Arc<ManualClock>,
    registry: MetricsRegistry,
    _types: PhantomData<fn(In) -> Out>,
}

impl OperatorHarness<(), ()> {
    /// Starts setting up a harness for `operator`.
    pub fn builder<Op: BuildOperator>(operator: Op) -> HarnessBuilder<Op> {
        HarnessBuilder {
            operator,
            restore: None,
            store: None,
            subtask: 0,
            parallelism: 1,
            max_parallelism: 128,
            processing_time: 0,
            buffer_size: 1024,
            side: SideOutputs::default(),
            side_captures: Vec::new(),
        }
    }
}

impl<In: Data, Out: Data> OperatorHarness<In, Out> {
    /// Processes one record with event time `timestamp` (any `i64` but `i64::MIN`, which is no
    /// event time: see [`process_untimed`](Self::process_untimed)).
    pub fn process(&mut self, value: In, timestamp: Timestamp) -> Result<()> {
        self.chain.records(&mut vec![Record::new(value, timestamp)])
    }

    /// Processes one record without an event time.
    pub fn process_untimed(&mut self, value: In) -> Result<()> {
        self.chain.records(&mut vec![Record::untimed(value)])
    }

    /// Processes a batch of records.
    pub fn process_records(&mut self, records: Vec<Record<In>>) -> Result<()> {
        let mut batch = records;
        self.chain.records(&mut batch)
    }

    /// Delivers a watermark.
    pub fn watermark(&mut self, watermark: Timestamp) -> Result<()> {
        self.chain.watermark(watermark)
    }

    /// Moves processing time forward and runs the operator's periodic work.
    pub fn advance_processing_time(&mut self, by: Duration) -> Result<()> {
        self.clock.advance(by);
        self.chain.tick()
    }

    /// The current processing time.
    pub fn processing_time(&self) -> Timestamp {
        use crate::time::Clock;
        self.clock.now()
    }

    /// Ends input `input` of a two-input operator (0: the first, 1: the second), as the task
    /// does when every channel of that input ended; the other input may go on.
    pub fn end_input(&mut self, input: usize) -> Result<()> {
        self.chain.end_input(input)
    }

    /// Ends the input (a bounded input delivers the final watermark first: call
    /// `watermark(i64::MAX)` to mimic it).
    pub fn finish(&mut self) -> Result<()> {
        self.chain.finish()
    }

    /// Takes the records emitted so far.
    pub fn take_output(&mut self) -> Vec<Record<Out>> {
        std::mem::take(&mut self.captured.lock().expect("capture lock").records)
    }

    /// Takes the values emitted so far.
    pub fn take_values(&mut self) -> Vec<Out> {
        self.take_output().into_iter().map(|r| r.value).collect()
    }

    /// The watermarks the operator forwarded.
    pub fn watermarks(&self) -> Vec<Timestamp> {
        self.captured
            .lock()
            .expect("capture lock")
            .watermarks
            .clone()
    }

    /// Takes what the side output `tag` received (it must have been declared on the builder).
    pub fn take_side_output<S: Data>(&mut self, tag: &OutputTag<S>) -> Vec<Record<S>> {
        let (_, any) = self
            .side_captures
            .iter()
            .find(|(id, _)| id == tag.id())
            .unwrap_or_else(|| {
                panic!("side output `{}` was not declared on the harness", tag.id())
            });
        let captured = any
            .downcast_ref::<Arc<Mutex<Captured<S>>>>()
            .expect("side output type");
        std::mem::take(&mut captured.lock().expect("capture lock").records)
    }

    /// Takes a checkpoint of the operator (what it would write at a barrier).
    pub fn snapshot(&mut self, checkpoint_id: u64) -> Result<RestoreState> {
        let mut snapshot = TaskSnapshot::new(checkpoint_id);
        let barrier = CheckpointBarrier {
            id: checkpoint_id,
            timestamp: self.processing_time(),
            terminate: false,
            unaligned: false,
        };
        self.chain.barrier(barrier, &mut snapshot)?;
        let operator = snapshot
            .operators
            .pop()
            .expect("the operator wrote its snapshot");
        Ok(RestoreState::from_snapshot(&operator.writer))
    }

    /// Tells the operator that checkpoint `checkpoint_id` completed.
    pub fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<()> {
        self.chain.notify_complete(checkpoint_id)
    }

    /// The operator's counters: records in and out, late records, state entries and bytes.
    pub fn metrics(&self) -> OperatorMetricsSnapshot {
        self.registry
            .snapshot()
            .operators
            .into_iter()
            .next()
            .expect("one operator")
    }
}

/// Builds window operators for the harness, with the options of
/// [`WindowedStream`](crate::WindowedStream).
pub struct WindowTest<K, T> {
    key: KeyFn<K, T>,
    settings: WindowSettings<T>,
}

impl<K: Data + Hash + Eq, T: Data> WindowTest<K, T> {
    /// Windows `windows` over records keyed by `key`.
    pub fn new(key: impl Fn(&T) -> K + Send + Sync + 'static, windows: Windows) -> Self {
        WindowTest {
            key: Arc::new(key),
            settings: WindowSettings::new(windows),
        }
    }

    /// As [`WindowedStream::allowed_lateness`](crate::WindowedStream::allowed_lateness).
    pub fn allowed_lateness(mut self, lateness: Duration) -> Self {
        self.settings.allowed_lateness(lateness);
        self
    }

    /// As [`WindowedStream::side_output_late`](crate::WindowedStream::side_output_late).
    pub fn side_output_late(mut self, tag: &OutputTag<T>) -> Self {
        self.settings.side_output_late(tag);
        self
    }

    /// As [`WindowedStream::early_firing`](crate::WindowedStream::early_firing).
    pub fn early_firing(mut self, every: Duration) -> Self {
        self.settings.early_firing(every);
        self
    }

    /// As [`WindowedStream::sliced`](crate::WindowedStream::sliced).
    pub fn sliced(mut self) -> Self {
        self.settings.sliced = true;
        self
    }

    /// The window operator with incremental aggregation.
    pub fn aggregate<A: AggregateFunction<T>>(
        self,
        aggregate: A,
    ) -> impl BuildOperator<Operator = impl Operator<In = T, Out = WindowResult<K, A::Out>>> {
        window_operator(self.key, self.settings, AggregateWindow(aggregate))
    }

    /// The window operator with a full-window function.
    pub fn process<Out: Data, P: ProcessWindowFunction<K, T, Out>>(
        mut self,
        function: P,
    ) -> impl BuildOperator<Operator = impl Operator<In = T, Out = Out>> {
        self.settings.sliced = false;
        window_operator(self.key, self.settings, ProcessWindow::new(function, None))
    }
}

/// The keyed half of [`KeyedStream::aggregate`](crate::KeyedStream::aggregate): the operator
/// that keeps each key's accumulator and takes the records and partial aggregates of the
/// pre-aggregation before it ([`Rolling`](crate::operators::Rolling)), emitting `(key, result)`.
pub fn rolling_aggregate<K, T, A>(
    key: KeyFn<K, crate::operators::Rolling<K, T, A::Acc>>,
    aggregate: A,
) -> impl BuildOperator<
    Operator = impl Operator<In = crate::operators::Rolling<K, T, A::Acc>, Out = (K, A::Out)>,
>
where
    K: Data + Hash + Eq,
    T: Data,
    A: AggregateFunction<T>,
{
    crate::operators::RollingAggregate::new(key, aggregate)
}

/// The configuration of a job a recovery test fails and restores: `parallelism` subtasks, small
/// buffers (64 records), a watermark every 10 ms, a checkpoint every `interval` into `storage`,
/// and up to three restarts 20 ms apart.
///
/// ```
/// use std::time::Duration;
/// let config = riffle::testing::recovering_config(2, std::path::Path::new("/tmp/chk"), Duration::from_millis(50));
/// assert_eq!(config.parallelism, 2);
/// assert_eq!(config.checkpoints.interval, Some(Duration::from_millis(50)));
/// ```
pub fn recovering_config(
    parallelism: usize,
    storage: &std::path::Path,
    interval: Duration,
) -> crate::EnvConfig {
    crate::EnvConfig {
        parallelism,
        buffer_size: 64,
        watermark_interval: Duration::from_millis(10),
        checkpoints: crate::checkpoint::CheckpointConfig {
            interval: Some(interval),
            storage: storage.to_str().expect("a UTF-8 path").to_string(),
            restart: crate::checkpoint::RestartStrategy::FixedDelay {
                attempts: 3,
                delay: Duration::from_millis(20),
            },
            ..crate::checkpoint::CheckpointConfig::default()
        },
        ..crate::EnvConfig::default()
    }
}

/// A pass-through function that panics once, when the job has passed `after` records through it
/// (over all subtasks and runs): a task failure at a chosen point, for recovery tests. The job
/// restarted from a checkpoint passes through it again without failing.
///
/// ```
/// use riffle::testing::fail_once_after;
/// let crash = fail_once_after::<u64>(2);
/// assert_eq!(crash(1), 1);
/// assert!(std::panic::catch_unwind(|| crash(2)).is_err());
/// assert_eq!(crash(3), 3, "only once");
/// ```
pub fn fail_once_after<T>(after: u64) -> impl Fn(T) -> T + Send + Sync + Clone + 'static {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let seen = Arc::new(AtomicU64::new(0));
    let fired = Arc::new(AtomicBool::new(false));
    move |value: T| {
        if seen.fetch_add(1, Ordering::SeqCst) + 1 >= after && !fired.swap(true, Ordering::SeqCst) {
            panic!("injected failure after {after} records");
        }
        value
    }
}

/// One step of a scripted operator run.
#[derive(Clone, Debug)]
pub enum Step<T> {
    /// A record with its event time.
    Record(T, Timestamp),
    /// A watermark.
    Watermark(Timestamp),
    /// Processing time moves forward.
    Advance(Duration),
}

fn play<In: Data, Out: Data>(
    harness: &mut OperatorHarness<In, Out>,
    steps: &[Step<In>],
) -> Result<()> {
    for step in steps {
        match step {
            Step::Record(value, timestamp) => harness.process(value.clone(), *timestamp)?,
            Step::Watermark(watermark) => harness.watermark(*watermark)?,
            Step::Advance(by) => harness.advance_processing_time(*by)?,
        }
    }
    Ok(())
}

/// Checks that an operator survives a checkpoint: for every cut point, a run that snapshots
/// there and continues in a fresh instance restored from the snapshot emits exactly what an
/// uninterrupted run emits (compared as multisets of records, since emission order within one
/// firing is not specified). `make` builds a fresh operator. State is on the heap; see
/// [`assert_snapshot_round_trip_on`] for other backends.
pub fn assert_snapshot_round_trip<Op, F>(make: F, steps: &[Step<InOf<Op>>]) -> Result<()>
where
    Op: BuildOperator,
    OutOf<Op>: std::fmt::Debug,
    F: Fn() -> Op,
{
    assert_snapshot_round_trip_on(&crate::state::HeapBackend, make, steps)
}

/// [`assert_snapshot_round_trip`] with the keyed state in `backend`: when it gives stores, each
/// run gets its own, the snapshot checkpoints it and the restored instance's store is filled
/// from that checkpoint (what a job's recovery does). Store files go to a fresh directory under
/// the system's temporary directory, removed at the end.
pub fn assert_snapshot_round_trip_on<Op, F>(
    backend: &dyn crate::state::StateBackend,
    make: F,
    steps: &[Step<InOf<Op>>],
) -> Result<()>
where
    Op: BuildOperator,
    OutOf<Op>: std::fmt::Debug,
    F: Fn() -> Op,
{
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let work = std::env::temp_dir().join(format!(
        "riffle-harness-{}-{}",
        std::process::id(),
        RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let key_groups = KeyGroupRange::for_subtask(0, 1, 128);
    let open = |name: &str| {
        backend.open_store(&crate::state::TaskStore {
            job: "harness".into(),
            task: 0,
            run_id: name.into(),
            key_groups,
            local_dir: work.join(name),
        })
    };
    let harness = |op: Op, store: Option<Arc<dyn crate::state::KvStore>>| {
        let builder = OperatorHarness::builder(op);
        match store {
            Some(store) => builder.store(store),
            None => builder,
        }
    };
    let sorted = |records: Vec<Record<OutOf<Op>>>| {
        let mut text: Vec<String> = records
            .iter()
            .map(|r| format!("{:?} @{:?}", r.value, r.timestamp))
            .collect();
        text.sort();
        text
    };
    let result = (|| {
        let mut whole = harness(make(), open("whole")?).build()?;
        play(&mut whole, steps)?;
        whole.watermark(Timestamp::MAX)?;
        whole.finish()?;
        let expected = sorted(whole.take_output());
        for cut in 0..=steps.len() {
            let first_store = open(&format!("cut-{cut}-first"))?;
            let mut first = harness(make(), first_store.clone()).build()?;
            play(&mut first, &steps[..cut])?;
            let state = first.snapshot(1)?;
            let mut output = first.take_output();
            let second_store = open(&format!("cut-{cut}-second"))?;
            if let (Some(from), Some(to)) = (&first_store, &second_store) {
                let checkpoint = work.join(format!("cut-{cut}-first")).join("chk-1");
                from.checkpoint(&checkpoint)?;
                to.restore_from(&checkpoint, key_groups)?;
            }
            let mut second = harness(make(), second_store)
                .processing_time(first.processing_time())
                .restore(state)
                .build()?;
            play(&mut second, &steps[cut..])?;
            second.watermark(Timestamp::MAX)?;
            second.finish()?;
            output.extend(second.take_output());
            let got = sorted(output);
            if got != expected {
                return Err(crate::Error::Checkpoint(format!(
                    "{}: restoring after step {cut} changed the output:\n  uninterrupted: {expected:?}\n  restored: {got:?}",
                    backend.name()
                )));
            }
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&work);
    result
}

/// An ordered in-memory [`KvStore`](crate::state::KvStore), and a backend handing one to every
/// task: tests of the byte-encoded state path (the one RocksDB takes) without RocksDB.
#[derive(Clone, Copy, Debug, Default)]
pub struct MemoryKvBackend;

impl crate::state::StateBackend for MemoryKvBackend {
    fn name(&self) -> &str {
        "memory-kv"
    }

    fn open_store(
        &self,
        _task: &crate::state::TaskStore,
    ) -> Result<Option<Arc<dyn crate::state::KvStore>>> {
        Ok(Some(Arc::new(MemoryKvStore::default())))
    }
}

/// See [`MemoryKvBackend`].
#[derive(Debug, Default)]
pub struct MemoryKvStore {
    entries: Mutex<std::collections::BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl crate::state::KvStore for MemoryKvStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.entries.lock().expect("store lock").get(key).cloned())
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.entries
            .lock()
            .expect("store lock")
            .insert(key.to_vec(), value.to_vec());
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.entries.lock().expect("store lock").remove(key);
        Ok(())
    }

    fn scan(&self, prefixes: &[Vec<u8>], visit: &mut crate::state::VisitWhile<'_>) -> Result<()> {
        for prefix in prefixes {
            let entries: Vec<(Vec<u8>, Vec<u8>)> = self
                .entries
                .lock()
                .expect("store lock")
                .range(prefix.clone()..)
                .take_while(|(k, _)| k.starts_with(prefix))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            for (key, value) in entries {
                if !visit(&key, &value)? {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn estimate(&self) -> (u64, u64) {
        let entries = self.entries.lock().expect("store lock");
        (
            entries.len() as u64,
            entries
                .iter()
                .map(|(k, v)| (k.len() + v.len()) as u64)
                .sum(),
        )
    }

    /// One immutable file per key group, named by its content: key groups that did not change
    /// keep their file, so later checkpoints reference it instead of uploading it again, as
    /// RocksDB's SST files are.
    fn checkpoint(&self, dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
        std::fs::create_dir_all(dir)
            .map_err(|e| crate::Error::io("cannot create a store checkpoint", e))?;
        /// Key-value entries per key group.
        type Groups = std::collections::BTreeMap<u16, Vec<(Vec<u8>, Vec<u8>)>>;
        let mut groups: Groups = Default::default();
        for (key, value) in self.entries.lock().expect("store lock").iter() {
            groups
                .entry(u16::from_be_bytes([key[0], key[1]]))
                .or_default()
                .push((key.clone(), value.clone()));
        }
        let mut files = Vec::new();
        for (key_group, entries) in groups {
            let bytes = crate::codec::encode(&entries)?;
            let path = dir.join(format!(
                "kg{key_group:05}-{:016x}.sst",
                xxhash_rust::xxh3::xxh3_64(&bytes)
            ));
            std::fs::write(&path, bytes)
                .map_err(|e| crate::Error::io("cannot write a store checkpoint", e))?;
            files.push(path);
        }
        Ok(files)
    }

    fn restore_from(&self, dir: &std::path::Path, range: KeyGroupRange) -> Result<()> {
        let listing = std::fs::read_dir(dir)
            .map_err(|e| crate::Error::io("cannot list a store checkpoint", e))?;
        let mut mine = self.entries.lock().expect("store lock");
        for entry in listing.flatten() {
            let bytes = std::fs::read(entry.path())
                .map_err(|e| crate::Error::io("cannot read a store checkpoint", e))?;
            let entries: Vec<(Vec<u8>, Vec<u8>)> = crate::codec::decode(&bytes)?;
            for (key, value) in entries {
                if range.contains(u16::from_be_bytes([key[0], key[1]])) {
                    mine.insert(key, value);
                }
            }
        }
        Ok(())
    }
}

/// Polls `condition` every 50 ms until it holds or `wait` passes; whether it held. For tests that
/// wait on a running job.
///
/// ```
/// use std::time::Duration;
/// assert!(riffle::testing::eventually(Duration::from_secs(1), || true));
/// ```
pub fn eventually(wait: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + wait;
    while std::time::Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    condition()
}
