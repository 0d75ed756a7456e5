//! Seed scenario 5, checkpoint and recovery: the windowed count checkpoints its state (barriers
//! from the sources, aligned at the shuffle, state uploaded in the background); right after
//! checkpoint N completed, the task that owns the hot user dies of a simulated out-of-memory; the
//! job restores checkpoint N, rewinds the generator to the positions N recorded, aborts the part
//! files written after N, and finishes. (With `--fail-after-checkpoint 0` the task dies before any
//! checkpoint completed, and the job starts over from the beginning of its input.) The demo then
//! compares what the exactly-once sink committed with a run that had no failure: the same lines,
//! none twice, none missing.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use clap::Args;
use riffle::checkpoint::CheckpointStorage;
use riffle::keys::{key_group_of, subtask_for_key_group};
use riffle::operators::KeyedContext;
use riffle::{Error, StreamEnv};
use riffle_clicks::Click;

use crate::demos::windowed_count::{
    WindowedSummary, count_per_user, run_windowed, write_counts_and_late,
};
use crate::demos::{EngineArgs, EventTimeArgs, InputArgs};

/// Options of `riffle demo checkpoint-recovery`.
#[derive(Args, Clone, Debug)]
pub struct CheckpointRecoveryArgs {
    /// Where the clicks come from.
    #[command(flatten)]
    pub input: InputArgs,
    /// Watermarks, lateness and window length.
    #[command(flatten)]
    pub event_time: EventTimeArgs,
    /// How the engine runs.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// The task owning the hot user dies right after this checkpoint completed; 0: before any
    /// checkpoint completed (the job then starts over from the beginning of its input).
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub fail_after_checkpoint: u64,
}

/// Clicks generated when `--count` is not given.
pub const DEFAULT_COUNT: u64 = 3_000_000;

/// Clicks per second generated when `--rate` is not given: the default run lasts about three
/// seconds, so that checkpoints complete (every 500 ms) before the input ends.
pub const DEFAULT_RATE: f64 = 1_000_000.0;

/// The user holding most of the clicks (with `--hot-key-share`).
pub const HOT_USER: u64 = 42;

/// The simulated failure: the instance owning the hot user fails at its first click once the
/// checkpoint `after` completed (`completed` is the newest completed checkpoint, kept up to date
/// by a watcher of the checkpoint storage), once in the whole run.
#[derive(Clone)]
struct MemoryGuard {
    /// Fail at all (not in the reference run).
    armed: bool,
    after: u64,
    completed: Arc<AtomicU64>,
    failed: Arc<AtomicBool>,
    /// Where keys go: (max_parallelism, parallelism).
    layout: (usize, usize),
    /// Whether this instance owns the hot user (known from its first click).
    owner: Option<bool>,
}

impl riffle::operators::KeyedProcessFunction<u64, Click, Click> for MemoryGuard {
    fn process_element(
        &mut self,
        user: &u64,
        click: Click,
        ctx: &mut KeyedContext<'_, '_, u64, Click>,
    ) -> riffle::Result<()> {
        if self.armed {
            let (max, p) = self.layout;
            let owner = *self.owner.get_or_insert_with(|| {
                let subtask = |key: &u64| subtask_for_key_group(key_group_of(key, max), max, p);
                subtask(user) == subtask(&HOT_USER)
            });
            if owner
                && self.completed.load(Ordering::SeqCst) >= self.after
                && !self.failed.swap(true, Ordering::SeqCst)
            {
                return Err(Error::user(format!(
                    "out of memory (simulated): the task owning user {HOT_USER} gave up"
                )));
            }
        }
        ctx.emit(click)
    }
}

/// Keeps `completed` at the newest checkpoint completed in `storage` until `stop` is set.
fn watch_checkpoints(
    storage: CheckpointStorage,
    completed: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            if let Ok(ids) = storage.completed_checkpoints()
                && let Some(&newest) = ids.last()
            {
                completed.fetch_max(newest, Ordering::SeqCst);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    })
}

/// One run of the job into `output`; `fail` makes the hot user's task fail once.
fn run_once(
    args: &CheckpointRecoveryArgs,
    output: &Path,
    fail: bool,
    label: &str,
) -> riffle::Result<WindowedSummary> {
    // The demo's own scratch directory: an earlier run's output and checkpoints would mix in.
    if output.exists() {
        std::fs::remove_dir_all(output)
            .map_err(|e| Error::io(format!("cannot clear `{}`", output.display()), e))?;
    }
    let mut engine = args.engine.clone();
    engine.output = Some(output.to_path_buf());
    engine.checkpoint_interval_ms = engine.checkpoint_interval_ms.or(Some(500));
    let checkpoint_dir = output.join("checkpoints").display().to_string();
    engine.checkpoint_dir = Some(checkpoint_dir.clone());
    engine.restore = None;
    let mut config = engine.env_config("checkpoint-recovery")?;
    config.checkpoints.restart = riffle::checkpoint::RestartStrategy::FixedDelay {
        attempts: 3,
        delay: Duration::from_millis(200),
    };
    let guard = MemoryGuard {
        armed: fail,
        after: args.fail_after_checkpoint,
        completed: Arc::default(),
        failed: Arc::default(),
        layout: (config.max_parallelism, config.parallelism),
        owner: None,
    };
    let storage = CheckpointStorage::open(
        &checkpoint_dir,
        &config.checkpoints.storage_options,
        &config.job_name,
        "--checkpoint-dir",
    )?;
    let env = StreamEnv::with_config(config);
    let mut input = args.input.clone();
    if input.input.is_none() && input.rate.is_none() {
        input.rate = Some(DEFAULT_RATE);
    }
    let clicks = input.clicks_with(
        &env,
        Some(DEFAULT_COUNT),
        args.event_time.strategy()?,
        |c| {
            // Ten thousand clicks per second of event time: several windows close during the run.
            // No very late clicks: what is late would depend on timing, and the runs are compared.
            c.events_per_second = 10_000.0;
            c.late_share = 0.0;
            c.hot_user = HOT_USER;
        },
    )?;
    let guarded = clicks
        .key_by(|c| c.user_id)
        .process_function(guard.clone())
        .name("memory guard")
        .uid("memory-guard");
    let (counts, late) = count_per_user(&guarded, &args.event_time)?;
    write_counts_and_late(&engine, output, &counts, &late)?;
    println!("{label}");
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch_checkpoints(storage, guard.completed.clone(), stop.clone());
    let summary = run_windowed(&env, &engine, "checkpoint-recovery");
    stop.store(true, Ordering::SeqCst);
    let _ = watcher.join();
    summary
}

/// Every committed line of the part files in `dir`, counted.
fn committed(dir: &Path) -> riffle::Result<BTreeMap<String, usize>> {
    let mut lines = BTreeMap::new();
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Error::io(format!("cannot read `{}`", dir.display()), e))?;
    for entry in entries.flatten() {
        if entry.path().is_file() {
            let text = std::fs::read_to_string(entry.path())
                .map_err(|e| Error::io("cannot read a part file", e))?;
            for line in text.lines() {
                *lines.entry(line.to_string()).or_insert(0) += 1;
            }
        }
    }
    Ok(lines)
}

/// What the demo verified.
#[derive(Debug, Clone)]
pub struct RecoveryReport {
    /// Committed lines of the failure-free run.
    pub reference_lines: usize,
    /// Committed lines of the run that failed and recovered.
    pub recovered_lines: usize,
    /// The checkpoint the recovered run restored; `None` when it started over (no checkpoint
    /// had completed).
    pub restored_checkpoint: Option<u64>,
    /// Whether the two outputs are identical.
    pub identical: bool,
}

/// Runs the scenario: a reference run, a run with a failure, and the comparison. Fails when the
/// failure did not happen (the input ended first) or the outputs differ.
pub fn run(args: &CheckpointRecoveryArgs) -> riffle::Result<RecoveryReport> {
    let output = args.engine.output_dir("checkpoint-recovery");
    run_once(
        args,
        &output.join("reference"),
        false,
        "1) the reference run, without failure",
    )?;
    let when = match args.fail_after_checkpoint {
        0 => "before any checkpoint completed".to_string(),
        n => format!("right after checkpoint {n} completed"),
    };
    let recovered = run_once(
        args,
        &output.join("recovered"),
        true,
        &format!(
            "2) the same job; the task owning user {HOT_USER} dies (simulated out of memory) {when}"
        ),
    )?;
    let result = recovered.result.as_ref().expect("the run has a result");
    let completed: Vec<_> = result
        .checkpoints
        .iter()
        .filter(|c| c.completed())
        .collect();
    // The backend the runs' configuration holds (what `--state-backend` became).
    let backend = args
        .engine
        .env_config("checkpoint-recovery")?
        .state_backend
        .name()
        .to_string();
    if completed.is_empty() {
        println!("   checkpoints: none completed");
    } else {
        println!(
            "   checkpoints: {} completed ({}) of {backend} state, barriers aligned in at most {} ms",
            completed.len(),
            completed
                .iter()
                .map(|c| format!("#{} {} ms {} KB", c.id, c.duration_ms, c.size_bytes / 1024))
                .collect::<Vec<_>>()
                .join(", "),
            completed.iter().map(|c| c.alignment_ms).max().unwrap_or(0)
        );
    }
    let restored_checkpoint = match result.restores.first() {
        None => {
            return Err(Error::config(
                "--fail-after-checkpoint",
                format!(
                    "is {} but the input ended first: the task never failed (give more --count, or \
                     a smaller --fail-after-checkpoint)",
                    args.fail_after_checkpoint
                ),
            ));
        }
        Some(0) => {
            println!(
                "   the task failed; no checkpoint had completed, so the job started over from the \
                 beginning of its input, with empty state; the part files of the failed attempt \
                 were aborted"
            );
            None
        }
        Some(&id) => {
            println!(
                "   the task failed; the job restarted from checkpoint {id}: state restored, sources \
                 rewound to the checkpoint's positions, part files written after it aborted"
            );
            Some(id)
        }
    };
    let mut expected = committed(&output.join("reference").join("agg-clicks"))?;
    expected.extend(committed(&output.join("reference").join("late-clicks")).unwrap_or_default());
    let mut got = committed(&output.join("recovered").join("agg-clicks"))?;
    got.extend(committed(&output.join("recovered").join("late-clicks")).unwrap_or_default());
    let duplicates = got.values().filter(|n| **n > 1).count();
    let missing = expected.keys().filter(|k| !got.contains_key(*k)).count();
    let extra = got.keys().filter(|k| !expected.contains_key(*k)).count();
    let identical = expected == got;
    let (reference_lines, recovered_lines) = (expected.values().sum(), got.values().sum());
    println!(
        "3) committed output: {recovered_lines} lines after recovery, {reference_lines} without failure; \
         {duplicates} duplicated, {missing} missing, {extra} unexpected"
    );
    if !identical {
        return Err(Error::Checkpoint(
            "the recovered output differs from the failure-free run".into(),
        ));
    }
    println!("   verified: exactly the output of the failure-free run (exactly-once)");
    Ok(RecoveryReport {
        reference_lines,
        recovered_lines,
        restored_checkpoint,
        identical,
    })
}
