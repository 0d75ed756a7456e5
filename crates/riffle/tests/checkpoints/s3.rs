//! Checkpoints in an S3-compatible server (s3s-fs on 127.0.0.1, started by `scripts/s3-server.sh`,
//! which `scripts/test.sh` runs): the same recovery test as with a local directory.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use riffle::EnvConfig;
use riffle::testing::fail_once_after;

use crate::{COUNT, committed, expected, run, windowed_job};

/// The S3 settings of the test server, starting it if needed (never skipping: a test that needs
/// the server fails without it).
fn s3_settings() -> (String, Vec<(String, String)>) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/s3-server.sh");
    let status = Command::new(&script)
        .arg("start")
        .status()
        .expect("scripts/s3-server.sh runs");
    assert!(
        status.success(),
        "the S3 server must start (scripts/s3-server.sh start)"
    );
    let output = Command::new(&script).arg("env").output().unwrap();
    let vars: HashMap<String, String> = String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .filter_map(|word| word.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let options = [
        ("endpoint", "AWS_ENDPOINT"),
        ("region", "AWS_REGION"),
        ("access_key_id", "AWS_ACCESS_KEY_ID"),
        ("secret_access_key", "AWS_SECRET_ACCESS_KEY"),
        ("allow_http", "AWS_ALLOW_HTTP"),
    ]
    .iter()
    .map(|(option, var)| (option.to_string(), vars[*var].clone()))
    .collect();
    (vars["RIFFLE_TEST_S3_BUCKET"].clone(), options)
}

#[test]
fn checkpoints_in_s3_pass_the_recovery_test() {
    let (bucket, options) = s3_settings();
    let expected = expected(COUNT);
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let env = windowed_job(
        &dir.path().join("out"),
        &dir.path().join("unused"),
        2,
        COUNT,
        fail_once_after(30_000),
    );
    let location = format!("s3://{bucket}/{prefix}");
    env.configure(|c: &mut EnvConfig| {
        c.checkpoints.storage = location.clone();
        c.checkpoints.storage_options = options.clone();
    });
    let result = run(&env).unwrap();
    assert_eq!(result.restarts, 1);
    assert!(
        result.restores[0] > 0,
        "restored from a checkpoint in S3: {:?}",
        result.restores
    );
    assert_eq!(committed(&dir.path().join("out")), expected);
    // The checkpoints are in the bucket, and old ones were removed (3 retained).
    let storage =
        riffle::checkpoint::CheckpointStorage::open(&location, &options, "riffle-job", "test")
            .unwrap();
    let kept = storage.completed_checkpoints().unwrap();
    assert!(!kept.is_empty() && kept.len() <= 3, "{kept:?}");
}

#[test]
fn credentials_are_never_shown() {
    let (bucket, options) = s3_settings();
    let storage = riffle::checkpoint::CheckpointStorage::open(
        &format!("s3://{bucket}/x"),
        &options,
        "job",
        "test",
    )
    .unwrap();
    let secret = &options
        .iter()
        .find(|(k, _)| k == "secret_access_key")
        .unwrap()
        .1;
    assert!(!storage.description().contains(secret.as_str()));
    assert!(!format!("{storage:?}").contains(secret.as_str()));
    let config = riffle::checkpoint::CheckpointConfig {
        storage_options: options.clone(),
        ..Default::default()
    };
    assert!(!format!("{config:?}").contains(secret.as_str()));
}
