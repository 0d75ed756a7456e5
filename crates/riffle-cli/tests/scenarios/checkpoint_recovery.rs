//! Scenario 5, checkpoint and recovery: the demo's own verification, and a kill -9 of the whole
//! process followed by `--restore latest`, compared with a run that was never killed.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::riffle;

/// The flags of the demo runs: 400K clicks at 200K/s (two seconds, checkpoints every 500 ms).
const DEMO: [&str; 15] = [
    "demo",
    "checkpoint-recovery",
    "--count",
    "400000",
    "--users",
    "5000",
    "--hot-key-share",
    "0.8",
    "--rate",
    "200000",
    "-p",
    "2",
    "--output",
    "out",
    "--no-web",
];

/// Runs `riffle demo checkpoint-recovery` with `extra` flags and checks its whole output: which
/// failure it injected, what it restored (`restored`), and its verification; the line listing
/// the checkpoints (their durations vary) is checked for the state backend only.
fn demo_recovers_exactly_once(extra: &[&str], backend: &str, failure: &str, restored: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut args = DEMO.to_vec();
    args.extend_from_slice(extra);
    let stdout = riffle(&args, dir.path());
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 6, "{stdout}");
    assert!(
        lines[2].starts_with("   checkpoints: ")
            && lines[2].contains(&format!(
                ") of {backend} state, barriers aligned in at most "
            )),
        "{stdout}"
    );
    let expected = [
        "1) the reference run, without failure".to_string(),
        format!(
            "2) the same job; the task owning user 42 dies (simulated out of memory) {failure}"
        ),
        lines[2].to_string(),
        restored.to_string(),
        "3) committed output: 6660 lines after recovery, 6660 without failure; 0 duplicated, 0 \
         missing, 0 unexpected"
            .to_string(),
        "   verified: exactly the output of the failure-free run (exactly-once)".to_string(),
    ];
    assert_eq!(lines, expected, "{stdout}");
}

const RESTORED_2: &str = "   the task failed; the job restarted from checkpoint 2: state restored, sources \
                          rewound to the checkpoint's positions, part files written after it aborted";

#[test]
fn the_demo_fails_by_default_restores_checkpoint_2_and_verifies_exactly_once() {
    demo_recovers_exactly_once(
        &[],
        "heap",
        "right after checkpoint 2 completed",
        RESTORED_2,
    );
}

#[test]
fn a_failure_before_the_first_checkpoint_starts_over_and_still_gives_the_same_output() {
    demo_recovers_exactly_once(
        &["--fail-after-checkpoint", "0"],
        "heap",
        "before any checkpoint completed",
        "   the task failed; no checkpoint had completed, so the job started over from the \
         beginning of its input, with empty state; the part files of the failed attempt were \
         aborted",
    );
}

#[test]
fn the_demo_fails_when_its_failure_never_happened() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = DEMO.to_vec();
    args[3] = "50000"; // a quarter of a second of clicks: over before checkpoint 5
    args.extend_from_slice(&["--fail-after-checkpoint", "5"]);
    let output = crate::riffle_raw(&args, dir.path());
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        stderr.lines().last().unwrap(),
        "riffle: invalid configuration: `--fail-after-checkpoint` is 5 but the input ended \
         first: the task never failed (give more --count, or a smaller --fail-after-checkpoint)"
    );
}

/// The same with RocksDB state (`scripts/test.sh` builds with every feature).
#[cfg(feature = "rocksdb")]
#[test]
fn the_demo_recovers_exactly_once_on_rocksdb_state() {
    demo_recovers_exactly_once(
        &["--state-backend", "rocksdb", "--state-dir", "state"],
        "rocksdb",
        "right after checkpoint 2 completed",
        RESTORED_2,
    );
}

/// Committed lines of every part file under `dir` (its `agg-clicks` and `late-clicks`), counted.
fn committed(dir: &Path) -> BTreeMap<String, usize> {
    let mut lines = BTreeMap::new();
    for sub in ["agg-clicks", "late-clicks"] {
        let Ok(entries) = std::fs::read_dir(dir.join(sub)) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.path().is_file() {
                for line in std::fs::read_to_string(entry.path()).unwrap().lines() {
                    *lines.entry(line.to_string()).or_insert(0) += 1;
                }
            }
        }
    }
    lines
}

#[test]
fn kill_9_then_restore_latest_gives_the_output_of_a_run_never_killed() {
    let dir = tempfile::tempdir().unwrap();
    let job = |output: &str| -> Vec<String> {
        [
            "demo",
            "windowed-count",
            "--count",
            "1000000",
            "--users",
            "3000",
            "--late-share",
            "0",
            "--rate",
            "200000",
            "--window-secs",
            "1",
            "--out-of-orderness-secs",
            "3",
            "--checkpoint-interval-ms",
            "200",
            "-p",
            "2",
            "--output",
            output,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let reference = job("reference");
    riffle(
        &reference.iter().map(String::as_str).collect::<Vec<_>>(),
        dir.path(),
    );

    let victim = job("victim");
    let mut child = Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args(&victim)
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(3500));
    child.kill().unwrap(); // SIGKILL: no cleanup, no final commit
    child.wait().unwrap();
    let partial = committed(&dir.path().join("victim"));
    assert!(
        !partial.is_empty(),
        "checkpoints completed (and committed) before the kill"
    );

    let mut restore = victim.clone();
    restore.extend(["--restore".to_string(), "latest".to_string()]);
    let stdout = riffle(
        &restore.iter().map(String::as_str).collect::<Vec<_>>(),
        dir.path(),
    );
    assert!(stdout.contains("started from checkpoint"), "{stdout}");
    assert_eq!(
        committed(&dir.path().join("victim")),
        committed(&dir.path().join("reference"))
    );
}
