//! Exactly-once at the edges of a run: tasks that finish early, the end of the input, savepoints,
//! and restores (issue 11).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use riffle::checkpoint::{CheckpointStorage, RestoreFrom, SnapshotKind};
use riffle::{EnvConfig, Error, StreamEnv};
use riffle_clicks::{Click, ClicksConfig};

use crate::{COUNT, committed, expected, run, windowed_job};

/// The job of [`windowed_job`] over a source with one split only: at parallelism 2 the second
/// source subtask has nothing to read and finishes at once.
fn one_split_job(out: &Path, checkpoints: &Path, count: u64) -> StreamEnv {
    let env = windowed_job(out, checkpoints, 2, count, |c| c);
    // Same graph, one split.
    let env2 = StreamEnv::with_config(env.config());
    let source = riffle_clicks::source(ClicksConfig {
        users: 300,
        late_share: 0.0,
        events_per_second: 2_000.0,
        ..ClicksConfig::default()
    })
    .count(count)
    .rate(20_000.0)
    .splits(1);
    env2.from_source_with_watermarks(
        source,
        riffle::time::WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(5))
            .with_timestamps(|c: &Click| c.event_time),
    )
    .uid("clicks")
    .key_by(|c| c.user_id)
    .window(riffle::window::Tumbling::of(Duration::from_secs(5)))
    .aggregate(riffle::aggregate::Count)
    .uid("count")
    .map(|r| format!("{} {} {}", r.key, r.window_start, r.value))
    .sink(riffle::sink::ExactlyOnceFileSink::new(out))
    .uid("sink");
    env2
}

fn storage(checkpoints: &Path) -> CheckpointStorage {
    CheckpointStorage::open(
        checkpoints.to_str().unwrap(),
        &[],
        &EnvConfig::default().job_name,
        "checkpoint storage",
    )
    .unwrap()
}

/// FLIP-147: a source subtask without a split finishes at once; checkpoints still complete
/// while the other runs, and the job ends with a final checkpoint marked finished.
#[test]
fn checkpoints_go_on_after_a_task_finished_and_the_job_ends_with_a_final_one() {
    let dir = tempfile::tempdir().unwrap();
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    let result = run(&one_split_job(&out, &chk, 20_000)).unwrap();
    let completed: Vec<u64> = result
        .checkpoints
        .iter()
        .filter(|c| c.completed())
        .map(|c| c.id)
        .collect();
    // ~1 s of input at 100 ms intervals: several checkpoints before the final one.
    assert!(completed.len() >= 4, "{:?}", result.checkpoints);
    let storage = storage(&chk);
    let last = *storage.completed_checkpoints().unwrap().last().unwrap();
    assert_eq!(last, *completed.last().unwrap());
    let manifest = storage.read_manifest(&format!("chk-{last}")).unwrap();
    assert!(manifest.finished, "the final checkpoint records the end");
    let earlier = storage
        .read_manifest(&format!(
            "chk-{}",
            storage.completed_checkpoints().unwrap()[0]
        ))
        .unwrap();
    assert!(!earlier.finished);
    // The committed output is the whole count.
    assert_eq!(crate::counted(&committed(&out)), 20_000);
}

/// A restore of a finished job reads nothing and writes nothing; a crash between the final
/// checkpoint and the commit (its files still in progress) is completed by the restore.
#[test]
fn restoring_a_finished_job_writes_nothing_and_completes_its_last_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    run(&one_split_job(&out, &chk, 10_000)).unwrap();
    let before = committed(&out);
    assert!(!before.is_empty());

    let again = one_split_job(&out, &chk, 10_000);
    again.configure(|c| c.checkpoints.restore = Some(RestoreFrom::Latest));
    let result = run(&again).unwrap();
    assert!(result.already_finished.is_some(), "{result:?}");
    assert_eq!(result.records_out("Source: clicks"), 0);
    assert_eq!(committed(&out), before, "nothing written again");

    assert!(
        storage(&chk)
            .read_manifest(&format!(
                "chk-{}",
                storage(&chk)
                    .completed_checkpoints()
                    .unwrap()
                    .last()
                    .unwrap()
            ))
            .unwrap()
            .finished
    );
}

/// The crash between the final checkpoint and the renames of the last files: the restore finds
/// the job finished, commits what its final checkpoint lists, and writes nothing else.
#[test]
fn a_crash_between_the_final_checkpoint_and_its_commit_is_completed_by_the_restore() {
    let dir = tempfile::tempdir().unwrap();
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    let job = |restore: bool| {
        let env = one_split_job(&out, &chk, 10_000);
        env.configure(|c| {
            // No checkpoint completes before the end: the final one commits every file.
            c.checkpoints.interval = Some(Duration::from_secs(60));
            if restore {
                c.checkpoints.restore = Some(RestoreFrom::Latest);
            }
        });
        env
    };
    let result = run(&job(false)).unwrap();
    assert_eq!(
        result.completed_checkpoints(),
        1,
        "{:?}",
        result.checkpoints
    );
    let before = committed(&out);
    assert!(!before.is_empty());
    // Undo the renames, as a kill -9 right after the final manifest would have left them.
    for entry in std::fs::read_dir(&out).unwrap().flatten() {
        if entry.path().is_file() {
            std::fs::rename(
                entry.path(),
                out.join(".in-progress").join(entry.file_name()),
            )
            .unwrap();
        }
    }
    assert!(committed(&out).is_empty());
    let result = run(&job(true)).unwrap();
    assert!(result.already_finished.is_some(), "{result:?}");
    assert_eq!(result.records_out("Source: clicks"), 0);
    assert_eq!(committed(&out), before);
}

/// `restore latest` with no checkpoint in storage over an output holding this job's committed
/// output: refused at start, naming the setting and the directory; nothing written.
#[test]
fn a_fresh_start_over_this_jobs_committed_output_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    run(&one_split_job(&out, &chk, 5_000)).unwrap();
    let before = committed(&out);
    std::fs::remove_dir_all(&chk).unwrap();
    let again = one_split_job(&out, &chk, 5_000);
    again.configure(|c| c.checkpoints.restore = Some(RestoreFrom::Latest));
    let error = again.execute().unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(&error, Error::Config { setting, .. } if setting == "output"),
        "{message}"
    );
    assert!(message.contains(out.to_str().unwrap()), "{message}");
    assert!(
        message.contains("already holds committed output"),
        "{message}"
    );
    assert_eq!(committed(&out), before);

    // Another job (another name) may write into the same directory.
    let other = one_split_job(&out, &dir.path().join("chk-other"), 5_000);
    other.configure(|c| c.job_name = "another-job".into());
    run(&other).unwrap();
    assert_eq!(committed(&out).len(), 2 * before.len());
}

/// Flink 1.15+: an intermediate savepoint commits nothing. A failure right after it restores
/// the latest checkpoint (before the savepoint) and replays: nothing is committed twice.
#[test]
fn a_savepoint_then_a_failure_then_recovery_duplicates_nothing() {
    let expected = expected(COUNT);
    let dir = tempfile::tempdir().unwrap();
    let fail = Arc::new(AtomicBool::new(false));
    let trigger = fail.clone();
    let env = windowed_job(
        &dir.path().join("out"),
        &dir.path().join("chk"),
        2,
        COUNT,
        move |c| {
            if trigger.swap(false, Ordering::AcqRel) {
                panic!("injected failure after the savepoint");
            }
            c
        },
    );
    // Checkpoints 400 ms apart: windows (one every 250 ms) fire between the checkpoint before
    // the savepoint and the savepoint, and no checkpoint comes between the savepoint and the
    // failure.
    env.configure(|c| c.checkpoints.interval = Some(Duration::from_millis(400)));
    let job = env.execute_async().unwrap();
    std::thread::sleep(Duration::from_millis(600));
    job.savepoint(dir.path().join("savepoint").to_str().unwrap())
        .unwrap();
    // Long enough for the tasks to see a completion (they look every buffer timeout), shorter
    // than the pause before the next checkpoint.
    std::thread::sleep(Duration::from_millis(40));
    fail.store(true, Ordering::Release);
    let result = job.wait().unwrap();
    assert_eq!(result.restarts, 1);
    let savepoint = result
        .checkpoints
        .iter()
        .find(|c| c.kind == SnapshotKind::Savepoint)
        .unwrap()
        .id;
    assert!(
        result.restores[0] < savepoint,
        "restored a checkpoint before the savepoint: {:?} / {savepoint}",
        result.restores
    );
    assert_eq!(committed(&dir.path().join("out")), expected);
}

/// A job started from a savepoint fails before its first checkpoint: the restart restores the
/// savepoint (not empty state, not another run's checkpoint).
#[test]
fn a_restart_before_the_first_checkpoint_restores_the_savepoint_the_job_started_from() {
    let expected = expected(COUNT);
    let base = tempfile::tempdir().unwrap();
    // Part one: stopped with a savepoint.
    let first = windowed_job(
        &base.path().join("out"),
        &base.path().join("chk"),
        2,
        COUNT,
        |c| c,
    );
    let job = first.execute_async().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let savepoint = job
        .stop_with_savepoint(base.path().join("savepoint").to_str().unwrap())
        .unwrap();
    job.wait().unwrap();
    // An older run's checkpoints in the storage part two uses: never to be restored.
    let older = tempfile::tempdir().unwrap();
    run(&windowed_job(
        &older.path().join("out"),
        &base.path().join("chk2"),
        2,
        5_000,
        |c| c,
    ))
    .unwrap();
    // Part two: from the savepoint, failing on its first record, before any checkpoint (the
    // interval is long).
    let fail = Arc::new(AtomicBool::new(true));
    let second = windowed_job(
        &base.path().join("out"),
        &base.path().join("chk2"),
        2,
        COUNT,
        move |c| {
            if fail.swap(false, Ordering::AcqRel) {
                panic!("injected failure before the first checkpoint");
            }
            c
        },
    );
    second.configure(|c| {
        c.checkpoints.restore = Some(RestoreFrom::Savepoint(savepoint.clone()));
        c.checkpoints.interval = Some(Duration::from_secs(30));
    });
    let result = run(&second).unwrap();
    assert_eq!(result.restarts, 1);
    let savepoint_id = storage_manifest_id(Path::new(&savepoint));
    assert_eq!(result.restores, vec![savepoint_id], "the savepoint again");
    assert_eq!(committed(&base.path().join("out")), expected);
}

fn storage_manifest_id(savepoint: &Path) -> u64 {
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(savepoint.join(riffle::checkpoint::MANIFEST_FILE)).unwrap(),
    )
    .unwrap();
    manifest["checkpoint_id"].as_u64().unwrap()
}

/// A job stopped (drained, not with a savepoint) commits its output with a final checkpoint
/// that records where it stopped: `restore latest` resumes there, nothing twice, nothing lost.
#[test]
fn a_stopped_job_resumes_from_its_final_checkpoint_without_duplicates() {
    let expected = expected(COUNT);
    let dir = tempfile::tempdir().unwrap();
    let (out, chk) = (dir.path().join("out"), dir.path().join("chk"));
    let job = windowed_job(&out, &chk, 2, COUNT, |c| c)
        .execute_async()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    job.stop();
    let first = job.wait().unwrap();
    let read = first.records_out("Source: clicks");
    assert!(read > 0 && read < COUNT, "stopped part-way: {read}");
    let last = *storage(&chk)
        .completed_checkpoints()
        .unwrap()
        .last()
        .unwrap();
    assert!(
        !storage(&chk)
            .read_manifest(&format!("chk-{last}"))
            .unwrap()
            .finished,
        "stopped, not finished"
    );
    let again = windowed_job(&out, &chk, 2, COUNT, |c| c);
    again.configure(|c| c.checkpoints.restore = Some(RestoreFrom::Latest));
    let second = run(&again).unwrap();
    assert_eq!(second.already_finished, None);
    assert_eq!(
        second.records_out("Source: clicks"),
        COUNT - read,
        "resumed where the stop left off"
    );
    assert_eq!(committed(&out), expected);
}

/// Dead letters are exactly-once across a restore: 10 bad lines, a failure after some of them
/// were written, a restore from the latest checkpoint: exactly 10 dead letters committed.
#[test]
fn dead_letters_are_exactly_once_across_a_restore() {
    #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
    struct Event {
        id: u64,
    }
    let dir = tempfile::tempdir().unwrap();
    let mut lines: Vec<String> = (0..20_000).map(|i| format!("{{\"id\":{i}}}")).collect();
    for bad in 0..10 {
        lines.insert(bad * 2_000 + 7, format!("{{\"id\": bad {bad}"));
    }
    let input = dir.path().join("events.jsonl");
    std::fs::write(&input, lines.join("\n")).unwrap();
    let env = StreamEnv::with_config(EnvConfig {
        parallelism: 1,
        buffer_size: 64,
        dead_letter_dir: dir.path().join("dead"),
        checkpoints: riffle::checkpoint::CheckpointConfig {
            interval: Some(Duration::from_millis(30)),
            storage: dir.path().join("chk").to_str().unwrap().to_string(),
            restart: riffle::checkpoint::RestartStrategy::FixedDelay {
                attempts: 3,
                delay: Duration::from_millis(20),
            },
            ..Default::default()
        },
        ..EnvConfig::default()
    });
    let fail = riffle::testing::fail_once_after::<Event>(15_000);
    env.from_source(riffle::source::file::FileSource::<Event>::json(&input))
        .uid("events")
        .map(move |e: Event| {
            if e.id.is_multiple_of(500) {
                std::thread::sleep(Duration::from_millis(5)); // room for checkpoints
            }
            fail(e)
        })
        .uid("slow")
        .map(|e| e.id)
        .sink(riffle::sink::ExactlyOnceFileSink::new(
            dir.path().join("out"),
        ))
        .uid("sink");
    let result = run(&env).unwrap();
    assert_eq!(result.restarts, 1);
    assert!(result.restores[0] > 0, "{:?}", result.restores);
    let mut ids: Vec<u64> = committed(&dir.path().join("out"))
        .iter()
        .map(|l| l.parse().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..20_000).collect::<Vec<u64>>());
    let mut letters = Vec::new();
    for source in std::fs::read_dir(dir.path().join("dead"))
        .unwrap()
        .flatten()
    {
        letters.extend(committed(&source.path()));
    }
    letters.sort();
    assert_eq!(letters.len(), 10, "{letters:#?}");
    letters.dedup();
    assert_eq!(letters.len(), 10, "no dead letter twice");
}
