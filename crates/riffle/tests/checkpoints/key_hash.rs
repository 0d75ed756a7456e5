//! The key-group hash scheme travels with every snapshot: a manifest records its version, and a
//! snapshot written with another scheme is refused at start (its keyed state would sit in key
//! groups its keys no longer hash to), before anything is written.

use std::path::Path;
use std::time::Duration;

use riffle::checkpoint::RestoreFrom;
use riffle::keys::KEY_HASH_VERSION;
use riffle::{Error, StreamEnv};

use crate::{COUNT, windowed_job};

/// Takes a savepoint of the windowed job part-way and returns its location.
fn savepoint(dir: &Path) -> String {
    let env = windowed_job(&dir.join("out"), &dir.join("chk"), 2, COUNT, |c| c);
    let job = env.execute_async().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let location = job
        .stop_with_savepoint(dir.join("savepoint").to_str().unwrap())
        .unwrap();
    job.wait().unwrap();
    location
}

/// The job of `savepoint`, restoring from `location`, writing to `dir/restored`.
fn restoring(dir: &Path, location: &str) -> StreamEnv {
    let env = windowed_job(
        &dir.join("restored"),
        &dir.join("chk-restored"),
        2,
        COUNT,
        |c| c,
    );
    env.configure(|c| c.checkpoints.restore = Some(RestoreFrom::Savepoint(location.to_string())));
    env
}

fn rewrite_manifest(location: &str, change: impl FnOnce(&mut serde_json::Value)) -> u64 {
    let path = Path::new(location).join("_manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    change(&mut manifest);
    // Rewritten by hand: without its checksum, as manifests were before they had one (still
    // read), so that the version check is what refuses it.
    manifest.as_object_mut().unwrap().remove("checksum");
    std::fs::write(&path, serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();
    manifest["checkpoint_id"].as_u64().unwrap()
}

#[test]
fn a_snapshot_of_another_key_hash_scheme_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let location = savepoint(dir.path());
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(Path::new(&location).join("_manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["key_hash_version"], KEY_HASH_VERSION);
    assert_eq!(KEY_HASH_VERSION, 1);
    // The savepoint restores as written.
    restoring(dir.path(), &location).execute().unwrap();

    let cases: [(Option<u64>, &str); 3] = [
        (
            None,
            "scheme 0 (std::hash, Riffle before key-hash versioning)",
        ),
        (
            Some(0),
            "scheme 0 (std::hash, Riffle before key-hash versioning)",
        ),
        (Some(7), "scheme 7, newer than this Riffle knows"),
    ];
    for (version, scheme) in cases {
        let id = rewrite_manifest(&location, |m| match version {
            None => drop(m.as_object_mut().unwrap().remove("key_hash_version")),
            Some(v) => m["key_hash_version"] = v.into(),
        });
        let out = dir.path().join(format!("refused-{version:?}"));
        let env = restoring(&out, &location);
        std::fs::create_dir_all(&out).unwrap();
        match env.execute() {
            Err(Error::Checkpoint(message)) => {
                let description = format!("savepoint {id} of ");
                assert!(message.starts_with(&description), "{message}");
                let rest = &message[message.find(" puts keys").unwrap()..];
                assert_eq!(
                    rest,
                    format!(
                        " puts keys into key groups with {scheme}, but this Riffle uses scheme 1: \
                         its keyed state would not be found. Restore it with the Riffle release \
                         that wrote it (take a savepoint there and migrate the state), or start \
                         without restoring"
                    )
                );
            }
            other => panic!("expected a refused restore, got {other:?}"),
        }
        // Refused before anything ran: no output, no checkpoint.
        let written: Vec<_> = std::fs::read_dir(out.join("restored"))
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert_eq!(written, Vec::<std::path::PathBuf>::new());
    }
}
