//! Savepoints: stop a job with one at parallelism 2, start the job again from it at parallelism 1
//! and 4: key groups are redistributed, sources resume, and the combined committed output is the
//! failure-free output. State is matched to operators by `uid`.

use std::path::Path;
use std::time::Duration;

use riffle::checkpoint::RestoreFrom;
use riffle::{EnvConfig, Error, StreamEnv};

use crate::{COUNT, committed, expected, run, windowed_job};

/// Copies a directory tree.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Runs the job at parallelism 2 and stops it with a savepoint after about a third of the input.
fn first_half(dir: &Path) -> String {
    let env = windowed_job(&dir.join("out"), &dir.join("chk"), 2, COUNT, |c| c);
    let job = env.execute_async().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let location = job
        .stop_with_savepoint(dir.join("savepoint").to_str().unwrap())
        .unwrap();
    let result = job.wait().unwrap();
    let read = result
        .metrics
        .operator_total("Source: clicks")
        .unwrap()
        .records_out;
    assert!(read > 0 && read < COUNT, "stopped part-way: {read}");
    location
}

#[test]
fn a_savepoint_at_parallelism_2_restores_at_1_and_4() {
    let expected = expected(COUNT);
    let base = tempfile::tempdir().unwrap();
    let savepoint = first_half(base.path());
    assert!(Path::new(&savepoint).join("_manifest.json").exists());
    for parallelism in [1, 4] {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(&base.path().join("out"), &dir.path().join("out"));
        let env = windowed_job(
            &dir.path().join("out"),
            &dir.path().join("chk"),
            parallelism,
            COUNT,
            |c| c,
        );
        env.configure(|c: &mut EnvConfig| {
            c.checkpoints.restore = Some(RestoreFrom::Savepoint(savepoint.clone()))
        });
        let result = run(&env).unwrap();
        assert!(
            result
                .restored_from
                .as_deref()
                .unwrap()
                .starts_with("savepoint")
        );
        assert!(
            result
                .metrics
                .operator_total("Source: clicks")
                .unwrap()
                .records_out
                < COUNT,
            "resumed, not re-read"
        );
        assert_eq!(
            committed(&dir.path().join("out")),
            expected,
            "restored at parallelism {parallelism}"
        );
    }
}

#[test]
fn state_that_maps_to_no_operator_fails_the_restore_unless_allowed() {
    let base = tempfile::tempdir().unwrap();
    let savepoint = first_half(base.path());
    // A new version of the job whose window operator got another uid.
    let job = |allow: bool| {
        let env = StreamEnv::with_config(EnvConfig {
            parallelism: 2,
            ..windowed_job(
                &base.path().join("out2"),
                &base.path().join("chk2"),
                2,
                COUNT,
                |c| c,
            )
            .config()
        });
        env.configure(|c| {
            c.checkpoints.restore = Some(RestoreFrom::Savepoint(savepoint.clone()));
            c.checkpoints.allow_non_restored_state = allow;
        });
        env.from_source(crate::clicks(1_000))
            .uid("clicks")
            .key_by(|c| c.user_id)
            .process(
                |_: &u64,
                 c: riffle_clicks::Click,
                 ctx: &mut riffle::operators::KeyedContext<'_, '_, u64, u64>| {
                    ctx.emit(c.user_id)
                },
            )
            .uid("renamed-window")
            .sink(riffle::sink::BlackholeSink::new());
        env
    };
    match job(false).execute() {
        Err(Error::Checkpoint(message)) => {
            assert!(message.contains("does not have: count"), "{message}");
        }
        other => panic!("expected a restore error, got {other:?}"),
    }
    job(true).execute().unwrap();
}
