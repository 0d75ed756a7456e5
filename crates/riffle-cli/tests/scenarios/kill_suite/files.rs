//! The kill -9 suite on click files (issue 11): `riffle demo` on click files (one file at
//! `-p 1` and `-p 2`, a directory at `-p 2`; RocksDB state too with `--features rocksdb`) is
//! killed with SIGKILL at the crash points of each seed's plan and started again with
//! `--restore latest` until the job finishes. The committed output (counts, late clicks, dead
//! letters) must equal the output of a run that was never killed, line for line: nothing
//! missing, nothing twice (with lateness 0, exactly one line per user and window). A last
//! `--restore latest` of the finished job must say so and write nothing.
//!
//! A plan's crash points (the job logs at info level): before the first checkpoint, mid-run, at
//! the n-th `checkpoint completed` (right after a checkpoint completes, before or while its
//! output is committed), inside a commit (at the first part file the commit of a completed
//! checkpoint makes visible: the others of that commit are not yet), during a restore (at the
//! restored run's `restoring` line, plus up to 20 ms), at `final checkpoint completed` (the
//! job's end is recorded, its last output not yet committed) and at the summary (after the
//! final commit). Kills after a checkpoint completed are sorted by how far its commit had come
//! (read from the checkpoint's committables and the output directories).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use riffle::source::datagen::Generator;
use riffle_cli::demos::UserCount;
use riffle_clicks::{ClickGenerator, ClicksConfig};

use super::run::{CHECKPOINT, Ended, Kill, Process, Trigger, commit_of, commit_state};
use super::{Budget, CrashPoint, Diff, Moments, Tally, diff_lines, env_or, keep};

/// Bad lines in the input: each becomes exactly one dead letter.
const BAD_LINES: usize = 10;

/// One click in this many of the second half of the input has a twin 6 minutes late (at `-p 1`).
const LATE_EVERY: u64 = 250;

/// Runs log at info level: the suite's triggers read the log.
const LOG: &str = "riffle=info";

/// How long one run may take.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// Writes `count` clicks as JSON lines into `files` files under `dir` (one file: `dir` is the
/// file), with [`BAD_LINES`] undecodable lines among them, and with `late` clicks 6 minutes late
/// in the second half; returns the `--input` path.
///
/// Late clicks only for one reader (`-p 1`): whether a click is late depends on the watermark
/// its window has seen, the minimum over every reader's, and another reader's first watermark
/// may come after the late click (then it is counted in its window): timing, not a crash. One
/// reader emits its first watermark after its first batch, long before the second half.
fn write_input(dir: &Path, count: u64, files: usize, late: bool) -> PathBuf {
    let generator = ClickGenerator::new(ClicksConfig {
        users: 2_000,
        late_share: 0.0,
        events_per_second: 1_000.0,
        seed: 7,
        ..ClicksConfig::default()
    });
    let mut texts = vec![String::new(); files];
    let bad_every = count / BAD_LINES as u64;
    let per_file = count / files as u64;
    for i in 0..count {
        let text = &mut texts[(i as usize * files) / count as usize];
        let click = generator.generate(i);
        text.push_str(&serde_json::to_string(&click).unwrap());
        text.push('\n');
        // In the second half of each file, a click 6 minutes late now and then: its window
        // closed with the first watermark, so it goes to `late-clicks`.
        if late && i % per_file > per_file / 2 && i % LATE_EVERY == 0 {
            let mut late = click;
            late.event_time -= 360_000;
            text.push_str(&serde_json::to_string(&late).unwrap());
            text.push('\n');
        }
        if i % bad_every == bad_every / 2 {
            text.push_str(&format!("{{\"broken line\": {i}\n"));
        }
    }
    if files == 1 {
        let path = dir.join("clicks.jsonl");
        std::fs::write(&path, &texts[0]).unwrap();
        path
    } else {
        let input = dir.join("clicks");
        std::fs::create_dir_all(&input).unwrap();
        for (n, text) in texts.iter().enumerate() {
            std::fs::write(input.join(format!("part-{n}.jsonl")), text).unwrap();
        }
        input
    }
}

/// Committed lines per output (`agg-clicks`, `late-clicks`, every dead-letter directory),
/// each line with how often it was committed. In-progress files are not output.
fn committed(out: &Path) -> BTreeMap<String, BTreeMap<String, usize>> {
    fn walk(dir: &Path, root: &Path, into: &mut BTreeMap<String, BTreeMap<String, usize>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != ".in-progress" && name != "checkpoints" {
                    walk(&path, root, into);
                }
            } else if name.starts_with("part-") {
                let output = dir.strip_prefix(root).unwrap().display().to_string();
                let lines = into.entry(output).or_default();
                for line in std::fs::read_to_string(&path).unwrap().lines() {
                    *lines.entry(line.to_string()).or_insert(0) += 1;
                }
            }
        }
    }
    let mut outputs = BTreeMap::new();
    walk(out, out, &mut outputs);
    outputs
}

/// The flags of every run: the settings (lateness 0), checkpoints every 200 ms.
fn job_args(input: &Path, parallelism: usize, state: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "demo",
        "--no-web",
        "--input",
        input.to_str().unwrap(),
        "--window-secs",
        "10",
        "--out-of-orderness-secs",
        "5",
        "--lateness-secs",
        "0",
        "--checkpoint-interval-ms",
        "200",
        "-p",
        &parallelism.to_string(),
        "--output",
        "out",
        "--checkpoint-dir",
        "checkpoints",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(state.iter().map(|s| s.to_string()));
    args
}

/// Runs `riffle` in `dir` until it exits or is killed as `kill` says.
fn run(dir: &Path, args: &[String], kill: Kill) -> (Result<Ended, String>, Process) {
    let mut process = Process::start(dir, args, LOG);
    let ended = process.finish(kill, RUN_LIMIT);
    (ended, process)
}

/// The crash points of seed `moments`: one for the fresh start, two or three for restored runs,
/// one at the end; then runs without a kill until the job finishes. `run_ms` is how long a run
/// never killed took.
fn plan(moments: &mut Moments, run_ms: u64) -> Vec<Kill> {
    let start = Kill::new("start", Trigger::After(moments.millis(250)));
    let mid = |m: &mut Moments| {
        Kill::new(
            "mid",
            Trigger::After(Duration::from_millis(150 + m.next(run_ms / 2))),
        )
    };
    let checkpoint = |m: &mut Moments| {
        Kill::new(
            "checkpoint",
            Trigger::AtLog {
                text: CHECKPOINT,
                n: 1 + m.next(2) as usize,
                delay: Duration::ZERO,
            },
        )
    };
    let commit = |m: &mut Moments| {
        Kill::new(
            "commit",
            Trigger::AtCommit {
                n: 1 + m.next(2) as usize,
            },
        )
    };
    let restore = |m: &mut Moments| {
        Kill::new(
            "restore",
            Trigger::AtLog {
                text: "job: restoring",
                n: 1,
                delay: m.millis(20),
            },
        )
    };
    let mut kills = vec![match moments.next(4) {
        0 => start,
        1 => mid(moments),
        2 => checkpoint(moments),
        _ => commit(moments),
    }];
    for _ in 0..2 + moments.next(2) {
        kills.push(match moments.next(4) {
            0 => restore(moments),
            1 => checkpoint(moments),
            2 => commit(moments),
            _ => mid(moments),
        });
    }
    kills.push(if moments.next(2) == 0 {
        Kill::new(
            "final",
            Trigger::AtLog {
                text: "final checkpoint completed",
                n: 1,
                delay: Duration::ZERO,
            },
        )
    } else {
        Kill::new("summary", Trigger::AtStdout("riffle demo:"))
    });
    kills
}

/// One case of the suite: the reference run, then the seeds the budget allows (`ci_seeds` in
/// CI), each killed by its plan; fails at the end if any seed's output differed.
fn suite(case: &str, test: &str, files: usize, parallelism: usize, state: &[&str], ci_seeds: u64) {
    let budget = Budget::from_env(ci_seeds);
    let mut tally = Tally::new(case, test);
    let mut clicks = env_or("RIFFLE_KILL_CLICKS", 60_000);
    let base = tempfile::tempdir().unwrap();
    let reference_dir = base.path().join("reference");
    // Checkpoints must complete while the input is read (also when a source subtask has no
    // split and finished at once, FLIP-147): more than the final one, or there is nothing to
    // kill between. A machine that reads the input faster than that gets more of it.
    let (args, took) = loop {
        let input = write_input(base.path(), clicks, files, parallelism == 1);
        let args = job_args(&input, parallelism, state);
        let _ = std::fs::remove_dir_all(&reference_dir);
        std::fs::create_dir_all(&reference_dir).unwrap();
        let started = Instant::now();
        let (ended, process) = run(&reference_dir, &args, Kill::NEVER);
        if let Err(error) = ended {
            panic!("{case}: the run never killed failed: {error}");
        }
        let completed: u64 = process
            .stdout
            .lines()
            .find(|l| l.contains("completed (last:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        if completed >= 2 {
            break (args, started.elapsed());
        }
        assert!(
            clicks < 1_000_000,
            "no checkpoint before the final one even with {clicks} clicks:\n{}",
            process.stdout
        );
        clicks *= 2;
    };
    let reference = committed(&reference_dir.join("out"));
    check_reference(&reference, parallelism == 1);

    let mut restore = args.clone();
    restore.extend(["--restore".to_string(), "latest".to_string()]);
    let run_ms = took.as_millis() as u64;
    while let Some(seed) = budget.next_seed(&tally) {
        let dir = base.path().join(format!("seed-{seed}"));
        std::fs::create_dir_all(&dir).unwrap();
        let outcome = kill_and_restore(
            &dir,
            &restore,
            plan(&mut Moments::new(case, seed), run_ms),
            state,
        );
        let outputs = compare(&reference, &committed(&dir.join("out")));
        let mut problems = outcome.problems;
        let clean = problems.is_empty() && outputs.iter().all(|(_, d, _)| d.is_clean());
        if !clean {
            problems.push(format!("files kept in {}", keep(&dir, case, seed)));
        }
        eprintln!("{case} seed {seed}: {}", outcome.runs.join(", "));
        tally.seed(
            seed,
            outcome.points,
            outputs,
            problems,
            &outcome.runs.join(", "),
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
    tally.finish();
}

/// What the runs of one seed did.
struct SeedOutcome {
    points: Vec<CrashPoint>,
    runs: Vec<String>,
    problems: Vec<String>,
}

/// Runs the job in `dir` killed by each crash point of `plan` (until it finishes), then until
/// it finishes, then once more: that run must find the job finished.
fn kill_and_restore(
    dir: &Path,
    restore: &[String],
    plan: Vec<Kill>,
    state: &[&str],
) -> SeedOutcome {
    let mut outcome = SeedOutcome {
        points: Vec::new(),
        runs: Vec::new(),
        problems: Vec::new(),
    };
    let mut ended = false;
    let kills = plan.into_iter().chain(std::iter::repeat(Kill::NEVER));
    for (round, kill) in kills.enumerate() {
        if ended {
            break;
        }
        if round >= 25 {
            outcome
                .problems
                .push("the job never finished (25 runs)".to_string());
            return outcome;
        }
        let (result, process) = run(dir, restore, kill);
        process.save(&dir.join(format!("run-{round}.log")));
        match result {
            Ok(Ended::Exited) => {
                ended = true;
                if kill.kind != "none" {
                    outcome.runs.push(format!("{kill:?}: ended"));
                }
            }
            Ok(Ended::Killed(kind)) => {
                let commit = match kind {
                    "checkpoint" | "commit" | "final" => process
                        .killed_after_checkpoint
                        .map(|id| commit_state(&commit_of(dir, id))),
                    _ => None,
                };
                outcome.runs.push(format!(
                    "{kind} {:?} at {} ms after checkpoint {:?}{}",
                    kill.trigger,
                    process.killed_at.unwrap_or_default().as_millis(),
                    process.killed_after_checkpoint,
                    commit.map_or(String::new(), |c| format!(" ({c:?})"))
                ));
                outcome.points.push(CrashPoint { kind, commit });
            }
            Err(error) => {
                outcome
                    .problems
                    .push(format!("run {round} ({kill:?}): {error}"));
                return outcome;
            }
        }
    }
    // The job is finished: a restore says so and writes nothing.
    let (result, process) = run(dir, restore, Kill::NEVER);
    match result {
        Ok(_) if process.stdout.contains("the job had already finished") => {}
        Ok(_) => outcome.problems.push(format!(
            "a restore of the finished job did not say so:\n{}",
            process.stdout
        )),
        Err(error) => outcome
            .problems
            .push(format!("the restore of the finished job: {error}")),
    }
    // What the killed runs left in the local state directory (RocksDB stores) was removed
    // by the runs after them: the last process's directory is all that is left.
    if let Some(at) = state.iter().position(|a| *a == "--state-dir") {
        let root = dir.join(state[at + 1]);
        let mut left = Vec::new();
        let mut todo = vec![root.clone()];
        while let Some(at) = todo.pop() {
            for entry in std::fs::read_dir(&at).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    todo.push(path.clone());
                    left.push(path.strip_prefix(&root).unwrap().display().to_string());
                }
            }
        }
        let stores = left.iter().filter(|p| p.contains("-task-")).count();
        // An empty directory is a process killed between creating it and its lock file: the
        // first process to start a minute later removes it.
        let processes = left
            .iter()
            .filter(|p| !p.contains('/'))
            .filter(|p| std::fs::read_dir(root.join(p)).is_ok_and(|mut d| d.next().is_some()))
            .count();
        if stores > 0 || processes > 1 {
            outcome
                .problems
                .push(format!("left in the state directory: {left:?}"));
        }
    }
    outcome
}

/// The reference holds one line per (user, window), [`BAD_LINES`] dead letters and, with `late`
/// clicks in the input, each of them in `late-clicks`.
fn check_reference(reference: &BTreeMap<String, BTreeMap<String, usize>>, late: bool) {
    let counts = &reference["agg-clicks"];
    assert!(counts.len() > 100, "{reference:?}");
    let mut windows = BTreeMap::new();
    for (line, n) in counts {
        let count: UserCount = serde_json::from_str(line).unwrap();
        *windows
            .entry((count.user_id, count.window_start))
            .or_insert(0) += n;
    }
    assert!(
        windows.values().all(|n| *n == 1),
        "the run never killed: one line per user and window"
    );
    let dead: usize = reference
        .iter()
        .filter(|(name, _)| name.starts_with("dead-letter"))
        .map(|(_, lines)| lines.values().sum::<usize>())
        .sum();
    assert_eq!(dead, BAD_LINES, "the run never killed: dead letters");
    let late_clicks = reference
        .get("late-clicks")
        .map_or(0, |l| l.values().sum::<usize>());
    assert_eq!(
        late_clicks > 0,
        late,
        "the run never killed: {late_clicks} late clicks"
    );
}

/// Each output of `got` against the reference's (outputs missing in one count as empty).
fn compare(
    reference: &BTreeMap<String, BTreeMap<String, usize>>,
    got: &BTreeMap<String, BTreeMap<String, usize>>,
) -> Vec<(String, Diff, String)> {
    let empty = BTreeMap::new();
    let mut names: Vec<&String> = reference.keys().chain(got.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let (diff, examples) = diff_lines(
                reference.get(name).unwrap_or(&empty),
                got.get(name).unwrap_or(&empty),
            );
            // Dead-letter directories are named by split: one name for all of them.
            let output = if name.starts_with("dead-letter") {
                "dead-letters".to_string()
            } else {
                name.clone()
            };
            (output, diff, examples)
        })
        .collect()
}

#[test]
fn kill_9_anywhere_one_file_parallelism_1() {
    suite(
        "files-p1-heap",
        "files::kill_9_anywhere_one_file_parallelism_1",
        1,
        1,
        &[],
        2,
    );
}

#[test]
fn kill_9_anywhere_one_file_parallelism_2() {
    suite(
        "files-p2-heap",
        "files::kill_9_anywhere_one_file_parallelism_2",
        1,
        2,
        &[],
        2,
    );
}

#[test]
fn kill_9_anywhere_a_directory_parallelism_2() {
    suite(
        "files-dir-p2-heap",
        "files::kill_9_anywhere_a_directory_parallelism_2",
        3,
        2,
        &[],
        2,
    );
}

/// The same on RocksDB state (`scripts/test.sh` builds with every feature).
#[cfg(feature = "rocksdb")]
#[test]
fn kill_9_anywhere_a_directory_parallelism_2_rocksdb() {
    suite(
        "files-dir-p2-rocksdb",
        "files::kill_9_anywhere_a_directory_parallelism_2_rocksdb",
        3,
        2,
        &["--state-backend", "rocksdb", "--state-dir", "state"],
        2,
    );
}
