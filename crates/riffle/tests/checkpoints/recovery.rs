//! A task fails mid-stream; the job restores from its latest checkpoint and the committed output
//! is exactly the failure-free output.

use crate::{COUNT, committed, expected, run, windowed_job};
use riffle::testing::fail_once_after;

#[test]
fn a_failure_mid_stream_is_recovered_without_duplicates_or_loss() {
    let expected = expected(COUNT);
    assert!(!expected.is_empty());
    let total: u64 = expected
        .iter()
        .map(|l| {
            l.trim_matches('"')
                .rsplit(' ')
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    assert_eq!(total, COUNT);
    let dir = tempfile::tempdir().unwrap();
    let env = windowed_job(
        &dir.path().join("out"),
        &dir.path().join("chk"),
        2,
        COUNT,
        fail_once_after(35_000),
    );
    let result = run(&env).unwrap();
    assert_eq!(result.restarts, 1, "one failure, one restart");
    assert!(
        result.restores[0] > 0,
        "restored from a checkpoint, not from scratch: {:?}",
        result.restores
    );
    let read_after_restore = result
        .metrics
        .operator_total("Source: clicks")
        .unwrap()
        .records_out;
    assert!(
        read_after_restore < crate::COUNT,
        "the restored run resumed the source ({read_after_restore})"
    );
    assert!(result.restored_from.is_none());
    assert!(
        result.completed_checkpoints() > 0,
        "{:?}",
        result.checkpoints
    );
    assert_eq!(committed(&dir.path().join("out")), expected);
}
