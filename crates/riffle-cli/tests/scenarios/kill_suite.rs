//! The kill -9 suite (issue 11): the real `riffle` binary runs the main job (`riffle demo`) on
//! click files and is killed with SIGKILL at random moments — before its first checkpoint,
//! mid-run, right after its final commit — and started again with `--restore latest` until the
//! job finishes. The committed output (counts, late clicks, dead letters) must equal the output
//! of a run that was never killed, line for line: nothing missing, nothing twice (with lateness
//! 0, exactly one line per user and window). A last `--restore latest` of the finished job must
//! say so and write nothing.
//!
//! CI runs a few seeds; `scripts/kill-suite.sh` runs many (`RIFFLE_KILL_SEEDS`, and
//! `RIFFLE_KILL_CLICKS` for the input size).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use riffle::source::datagen::Generator;
use riffle_cli::demos::UserCount;
use riffle_clicks::{ClickGenerator, ClicksConfig};

/// Bad lines in the input: each becomes exactly one dead letter.
const BAD_LINES: usize = 10;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A small deterministic generator for the kill moments (splitmix64).
struct Moments(u64);

impl Moments {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % below.max(1)
    }
}

/// Writes `count` clicks as JSON lines into `files` files under `dir` (one file: `dir` is the
/// file), with [`BAD_LINES`] undecodable lines among them; returns the `--input` path.
fn write_input(dir: &Path, count: u64, files: usize) -> PathBuf {
    let generator = ClickGenerator::new(ClicksConfig {
        users: 2_000,
        late_share: 0.0,
        events_per_second: 5_000.0,
        seed: 7,
        ..ClicksConfig::default()
    });
    let mut texts = vec![String::new(); files];
    let bad_every = count / BAD_LINES as u64;
    for i in 0..count {
        let text = &mut texts[(i as usize * files) / count as usize];
        text.push_str(&serde_json::to_string(&generator.generate(i)).unwrap());
        text.push('\n');
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

/// How one run of the binary ends.
#[derive(Clone, Copy, Debug)]
enum Kill {
    /// SIGKILL after this long.
    After(Duration),
    /// SIGKILL as soon as the summary (printed after the final commit) appears.
    AtSummary,
    /// SIGKILL when the `n`-th log line holding this text appears (the job logs at info level):
    /// `checkpoint completed` (before its commit), `final checkpoint completed` (the job's end
    /// is recorded, its last output not yet committed).
    AtLog(&'static str, usize),
    /// Not killed.
    Never,
}

/// Runs `riffle demo` with `args` until it exits or is killed as `kill` says; returns whether it
/// exited by itself (with success) and its stdout.
fn run(dir: &Path, args: &[String], kill: Kill) -> (bool, String) {
    // `RIFFLE_KILL_BINARY` runs another build of `riffle` through the suite (an older one, to
    // see it fail).
    let binary = std::env::var("RIFFLE_KILL_BINARY")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_riffle").to_string());
    let mut child = Command::new(binary)
        .args(args)
        .current_dir(dir)
        .env("RIFFLE_LOG", "riffle=info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("riffle runs");
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    // (from stdout, line)
    let (tx, rx) = std::sync::mpsc::channel::<(bool, String)>();
    let err_tx = tx.clone();
    let readers = [
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send((true, line)).is_err() {
                    break;
                }
            }
        }),
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if err_tx.send((false, line)).is_err() {
                    break;
                }
            }
        }),
    ];
    let started = Instant::now();
    let (mut text, mut errors) = (String::new(), String::new());
    let mut seen = 0;
    let deadline = started + Duration::from_secs(120);
    loop {
        if let Ok((out, line)) = rx.recv_timeout(Duration::from_millis(1)) {
            let kill_now = match kill {
                Kill::AtSummary => out && line.starts_with("riffle demo:"),
                Kill::AtLog(pattern, n) if !out && line.contains(pattern) => {
                    seen += 1;
                    seen == n
                }
                _ => false,
            };
            if kill_now {
                let _ = child.kill();
            }
            let into = if out { &mut text } else { &mut errors };
            into.push_str(&line);
            into.push('\n');
        }
        if let Kill::After(after) = kill
            && started.elapsed() >= after
        {
            let _ = child.kill();
        }
        if let Some(status) = child.try_wait().unwrap() {
            for reader in readers {
                reader.join().unwrap();
            }
            for (out, line) in rx.try_iter() {
                let into = if out { &mut text } else { &mut errors };
                into.push_str(&line);
                into.push('\n');
            }
            let stderr = errors;
            let killed = std::os::unix::process::ExitStatusExt::signal(&status) == Some(9);
            assert!(
                killed || status.success(),
                "riffle {args:?} failed ({status})\nstdout:\n{text}\nstderr:\n{stderr}"
            );
            return (!killed, text);
        }
        assert!(Instant::now() < deadline, "riffle {args:?} did not end");
    }
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

/// Checks the committed output of `out` against the reference: equal line for line, one line
/// per (user, window), [`BAD_LINES`] dead letters.
fn check(out: &Path, reference: &BTreeMap<String, BTreeMap<String, usize>>, context: &str) {
    let got = committed(out);
    for (output, lines) in &got {
        let twice: Vec<_> = lines.iter().filter(|(_, n)| **n > 1).take(3).collect();
        assert!(
            twice.is_empty(),
            "{context}: {output} has lines twice: {twice:?}"
        );
    }
    let counts = &got["agg-clicks"];
    let mut windows = BTreeMap::new();
    for line in counts.keys() {
        let count: UserCount = serde_json::from_str(line).unwrap();
        *windows
            .entry((count.user_id, count.window_start))
            .or_insert(0) += 1;
    }
    assert!(
        windows.values().all(|n| *n == 1),
        "{context}: one line per user and window"
    );
    let dead: usize = got
        .iter()
        .filter(|(name, _)| name.starts_with("dead-letter"))
        .map(|(_, lines)| lines.len())
        .sum();
    assert_eq!(dead, BAD_LINES, "{context}: dead letters");
    assert_eq!(
        &got, reference,
        "{context}: the output of a run never killed"
    );
}

/// One case of the suite: the reference run, then `seeds` kill sequences.
fn suite(files: usize, parallelism: usize, state: &[&str], seeds: u64) {
    let mut clicks = env_or("RIFFLE_KILL_CLICKS", 60_000);
    let base = tempfile::tempdir().unwrap();
    let reference_dir = base.path().join("reference");
    // Checkpoints must complete while the input is read (also when a source subtask has no
    // split and finished at once, FLIP-147): more than the final one, or there is nothing to
    // kill between. A machine that reads the input faster than that gets more of it.
    let (args, took) = loop {
        let input = write_input(base.path(), clicks, files);
        let args = job_args(&input, parallelism, state);
        let _ = std::fs::remove_dir_all(&reference_dir);
        std::fs::create_dir_all(&reference_dir).unwrap();
        let started = Instant::now();
        let (finished, stdout) = run(&reference_dir, &args, Kill::Never);
        assert!(finished);
        let completed: u64 = stdout
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
            "no checkpoint before the final one even with {clicks} clicks:\n{stdout}"
        );
        clicks *= 2;
    };
    let reference = committed(&reference_dir.join("out"));
    assert!(reference["agg-clicks"].len() > 100, "{reference:?}");

    let mut restore = args.clone();
    restore.extend(["--restore".to_string(), "latest".to_string()]);
    let run_ms = took.as_millis() as u64;
    for seed in 0..seeds {
        let context = format!("{files} file(s), -p {parallelism} {state:?}, seed {seed}");
        let dir = base.path().join(format!("seed-{seed}"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut moments = Moments(seed);
        // Before the first checkpoint (or during the restore), between a checkpoint's
        // completion and its commit, mid-run (during an upload, a restore, ...), then at the end:
        // between the final checkpoint and its commit, or right after the final commit (the
        // summary); then until the job finishes.
        let plan = [
            Kill::After(Duration::from_millis(moments.next(250))),
            Kill::After(Duration::from_millis(150 + moments.next(run_ms / 2))),
            Kill::AtLog("checkpoint completed", 1 + moments.next(3) as usize),
            if seed % 2 == 0 {
                Kill::AtLog("final checkpoint completed", 1)
            } else {
                Kill::AtSummary
            },
        ];
        let mut ended = false;
        let mut runs = Vec::new();
        for kill in plan {
            ended = run(&dir, &restore, kill).0;
            runs.push(format!(
                "{kill:?}: {}",
                if ended { "ended" } else { "killed" }
            ));
        }
        let mut rounds = 0;
        while !ended {
            rounds += 1;
            assert!(rounds < 20, "{context}: the job never finished");
            ended = run(&dir, &restore, Kill::Never).0;
        }
        eprintln!("{context}: {}; then {rounds} more runs", runs.join(", "));
        check(&dir.join("out"), &reference, &context);
        // The job is finished: a restore says so and writes nothing.
        let (finished, stdout) = run(&dir, &restore, Kill::Never);
        assert!(finished);
        assert!(
            stdout.contains("the job had already finished"),
            "{context}: {stdout}"
        );
        check(&dir.join("out"), &reference, &context);
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
            let processes = left.iter().filter(|p| !p.contains('/')).count();
            assert!(
                stores == 0 && processes <= 1,
                "{context}: left in the state directory: {left:?}"
            );
        }
    }
}

fn seeds() -> u64 {
    env_or("RIFFLE_KILL_SEEDS", 2)
}

#[test]
fn kill_9_anywhere_one_file_parallelism_1() {
    suite(1, 1, &[], seeds());
}

#[test]
fn kill_9_anywhere_one_file_parallelism_2() {
    suite(1, 2, &[], seeds());
}

#[test]
fn kill_9_anywhere_a_directory_parallelism_2() {
    suite(3, 2, &[], seeds());
}

/// The same on RocksDB state (`scripts/test.sh` builds with every feature).
#[cfg(feature = "rocksdb")]
#[test]
fn kill_9_anywhere_a_directory_parallelism_2_rocksdb() {
    suite(
        3,
        2,
        &["--state-backend", "rocksdb", "--state-dir", "state"],
        seeds().min(2),
    );
}
