//! Where a process keeps its tasks' local state (a RocksDB store's files) under the job's
//! [`local_state_dir`](crate::EnvConfig::local_state_dir), and how what a killed process left
//! there is found and removed.
//!
//! Every process works in a directory of its own, `<local_state_dir>/process-<pid>-<nonce>`,
//! and holds an exclusive lock on the `.lock` file in it for as long as it lives (the operating
//! system drops the lock when the process dies, SIGKILL included). The first job of a process
//! to use a `local_state_dir` takes the lock and removes every other `process-*` directory
//! whose lock it can take: their processes are gone, and their stores with them (a restore
//! reads checkpoints, never a dead process's local files). Without it, every SIGKILL of a job
//! on RocksDB, and every run of a process group that ends that way, left its stores on disk.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use crate::error::{Error, Result};

/// Prefix of a process's directory under a `local_state_dir`.
const PROCESS_PREFIX: &str = "process-";
/// The lock file in a process's directory.
const LOCK_FILE: &str = ".lock";
/// A directory without its lock file is being created by its process, unless this old.
const UNLOCKED_GRACE: Duration = Duration::from_secs(60);

/// This process's directories, by `local_state_dir`, with the locks held on them.
static DIRS: Mutex<BTreeMap<PathBuf, (PathBuf, File)>> = Mutex::new(BTreeMap::new());

/// This process's directory under `root`, created and locked on first use (when the other
/// processes' directories whose owner has died are removed).
pub(crate) fn process_dir(root: &Path) -> Result<PathBuf> {
    let mut dirs = DIRS.lock().expect("local dirs lock");
    if let Some((dir, _)) = dirs.get(root) {
        return Ok(dir.clone());
    }
    let nonce =
        xxhash_rust::xxh3::xxh3_64(format!("{:?}", std::time::SystemTime::now()).as_bytes());
    let dir = root.join(format!(
        "{PROCESS_PREFIX}{}-{:08x}",
        std::process::id(),
        nonce as u32
    ));
    let io = |what: &str, path: &Path| {
        let what = format!("cannot {what} `{}` (local_state_dir)", path.display());
        move |e| Error::io(what, e)
    };
    std::fs::create_dir_all(&dir).map_err(io("create", &dir))?;
    let lock_path = dir.join(LOCK_FILE);
    let lock = File::create(&lock_path).map_err(io("create", &lock_path))?;
    lock.try_lock()
        .map_err(|e| Error::io(format!("cannot lock `{}`", lock_path.display()), e.into()))?;
    let removed = remove_dead(root, &dir);
    if removed > 0 {
        tracing::info!(
            dir = %root.display(),
            removed,
            "removed the local state of processes that died"
        );
    }
    dirs.insert(root.to_path_buf(), (dir.clone(), lock));
    Ok(dir)
}

/// Removes the directories under `root` of processes that are gone (their lock is free),
/// except `own`. Returns how many.
fn remove_dead(root: &Path, own: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(root) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        let is_process_dir = entry
            .file_name()
            .to_str()
            .is_some_and(|name| name.starts_with(PROCESS_PREFIX));
        if !is_process_dir || path == own || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let dead = match File::open(path.join(LOCK_FILE)) {
            // Taken: its process is gone (the lock goes when the file is closed, with it).
            Ok(lock) => lock.try_lock().is_ok(),
            // No lock file: being created now, or left half-made long ago.
            Err(_) => entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|modified| modified.elapsed().ok())
                .is_some_and(|age| age > UNLOCKED_GRACE),
        };
        if dead && std::fs::remove_dir_all(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory whose lock nobody holds (its process died) is removed by the next process
    /// to use the root; a locked one (a live process) and other files are kept.
    #[test]
    fn the_directories_of_dead_processes_are_removed_and_live_ones_kept() {
        let root = tempfile::tempdir().unwrap();
        let dead = root.path().join("process-1-dead");
        std::fs::create_dir_all(dead.join("job/store")).unwrap();
        File::create(dead.join(LOCK_FILE)).unwrap();
        let live = root.path().join("process-2-live");
        std::fs::create_dir_all(&live).unwrap();
        let held = File::create(live.join(LOCK_FILE)).unwrap();
        held.try_lock().unwrap();
        let young = root.path().join("process-3-young"); // no lock file yet
        std::fs::create_dir_all(&young).unwrap();
        let other = root.path().join("my-job");
        std::fs::create_dir_all(&other).unwrap();

        let own = process_dir(root.path()).unwrap();
        assert!(own.join(LOCK_FILE).exists());
        assert!(!dead.exists(), "a dead process's directory is removed");
        assert!(live.exists() && young.exists() && other.exists());
        // The same directory for every job of this process.
        assert_eq!(process_dir(root.path()).unwrap(), own);
        // Another process would see this one's directory as live.
        assert_eq!(remove_dead(root.path(), &live), 0);
        assert!(own.exists());
        drop(held);
    }
}
