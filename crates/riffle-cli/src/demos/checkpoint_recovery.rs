//! Seed scenario 5, checkpoint and recovery: the windowed count checkpoints its state (barriers
//! from the sources, aligned at the shuffle, state uploaded in the background); the task that
//! owns the hot user (80% of the clicks) dies of a simulated out-of-memory; the job restores the
//! latest checkpoint N, rewinds the generator to the positions N recorded, aborts the part files
//! written after N, and finishes. The demo then compares what the exactly-once sink committed
//! with a run that had no failure: the same lines, none twice, none missing.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use clap::Args;
use riffle::operators::KeyedContext;
use riffle::source::datagen::Click;
use riffle::{Error, StreamEnv};

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
    /// The task owning the hot user fails when it has seen this many of the hot user's clicks.
    #[arg(long, default_value_t = 1_000_000)]
    pub fail_after: u64,
}

/// Clicks generated when `--count` is not given.
pub const DEFAULT_COUNT: u64 = 3_000_000;

/// The user holding most of the clicks.
pub const HOT_USER: u64 = 42;

/// Counts the hot user's clicks in the task that owns it, and fails once past `limit`.
#[derive(Clone)]
struct MemoryGuard {
    seen: Arc<AtomicU64>,
    limit: Option<u64>,
    failed: Arc<AtomicBool>,
}

impl riffle::operators::KeyedProcessFunction<u64, Click, Click> for MemoryGuard {
    fn process_element(
        &mut self,
        user: &u64,
        click: Click,
        ctx: &mut KeyedContext<'_, '_, u64, Click>,
    ) -> riffle::Result<()> {
        if *user == HOT_USER
            && let Some(limit) = self.limit
            && self.seen.fetch_add(1, Ordering::SeqCst) + 1 >= limit
            && !self.failed.swap(true, Ordering::SeqCst)
        {
            return Err(Error::user(format!(
                "out of memory (simulated): user {HOT_USER} holds most of the clicks and the task owning them gave up \
                 after {limit} of them"
            )));
        }
        ctx.emit(click)
    }
}

/// One run of the job into `output`; `fail_after` makes the hot user's task fail once.
fn run_once(
    args: &CheckpointRecoveryArgs,
    output: &Path,
    fail_after: Option<u64>,
    label: &str,
) -> riffle::Result<WindowedSummary> {
    let mut engine = args.engine.clone();
    engine.output = Some(output.to_path_buf());
    engine.checkpoint_interval_ms = engine.checkpoint_interval_ms.or(Some(500));
    engine.checkpoint_dir = Some(output.join("checkpoints").display().to_string());
    engine.restore = None;
    let mut config = engine.env_config("checkpoint-recovery")?;
    config.checkpoints.restart = riffle::checkpoint::RestartStrategy::FixedDelay {
        attempts: 3,
        delay: Duration::from_millis(200),
    };
    let env = StreamEnv::with_config(config);
    let clicks = args.input.clicks_with(
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
    let guard = MemoryGuard {
        seen: Arc::default(),
        limit: fail_after,
        failed: Arc::default(),
    };
    let guarded = clicks
        .key_by(|c| c.user_id)
        .process_function(guard)
        .name("memory guard")
        .uid("memory-guard");
    let (counts, late) = count_per_user(&guarded, &args.event_time)?;
    write_counts_and_late(&engine, &output, &counts, &late)?;
    println!("{label}");
    run_windowed(&env, &engine, "checkpoint-recovery")
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
    /// The checkpoint the recovered run restored.
    pub restored_checkpoint: u64,
    /// Whether the two outputs are identical.
    pub identical: bool,
}

/// Runs the scenario: a reference run, a run with a failure, and the comparison.
pub fn run(args: &CheckpointRecoveryArgs) -> riffle::Result<RecoveryReport> {
    let output = args.engine.output_dir("checkpoint-recovery");
    let reference = run_once(
        args,
        &output.join("reference"),
        None,
        "1) the reference run, without failure",
    )?;
    let recovered = run_once(
        args,
        &output.join("recovered"),
        Some(args.fail_after),
        "2) the same job; the task owning the hot user fails part-way",
    )?;
    let result = recovered.result.as_ref().expect("the run has a result");
    let restored_checkpoint = result.restores.first().copied().unwrap_or(0);
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
    match result.restarts {
        0 => println!("   the failure did not happen (--fail-after beyond the hot user's clicks?)"),
        n => println!(
            "   the task failed; the job restarted {n} time(s) from checkpoint {restored_checkpoint}: state restored, \
             sources rewound to the checkpoint's positions, part files written after it aborted"
        ),
    }
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
    let _ = reference;
    if identical && result.restarts > 0 {
        println!("   verified: exactly the output of the failure-free run (exactly-once)");
    }
    let report = RecoveryReport {
        reference_lines,
        recovered_lines,
        restored_checkpoint,
        identical,
    };
    if !identical {
        return Err(Error::Checkpoint(
            "the recovered output differs from the failure-free run".into(),
        ));
    }
    Ok(report)
}
