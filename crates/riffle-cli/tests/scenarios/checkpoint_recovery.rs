//! Scenario 5, checkpoint and recovery: the demo's own verification, and a kill -9 of the whole
//! process followed by `--restore latest`, compared with a run that was never killed.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::riffle;

/// Runs `riffle demo checkpoint-recovery` with `extra` flags and checks its verification and
/// that the state was in `backend`.
fn demo_recovers_exactly_once(backend: &str, extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec![
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
        "--fail-after",
        "150000",
        "-p",
        "2",
        "--output",
        "out",
    ];
    args.extend_from_slice(extra);
    let stdout = riffle(&args, dir.path());
    assert!(
        stdout.contains(&format!(") of {backend} state,")),
        "{stdout}"
    );
    assert!(
        stdout.contains("the job restarted 1 time(s) from checkpoint"),
        "{stdout}"
    );
    assert!(
        stdout.contains("0 duplicated, 0 missing, 0 unexpected"),
        "{stdout}"
    );
    assert!(
        stdout.contains("verified: exactly the output of the failure-free run"),
        "{stdout}"
    );
}

#[test]
fn the_demo_recovers_and_verifies_exactly_once() {
    demo_recovers_exactly_once("heap", &[]);
}

/// The same with RocksDB state (`scripts/test.sh` builds with every feature).
#[cfg(feature = "rocksdb")]
#[test]
fn the_demo_recovers_exactly_once_on_rocksdb_state() {
    demo_recovers_exactly_once(
        "rocksdb",
        &["--state-backend", "rocksdb", "--state-dir", "state"],
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
