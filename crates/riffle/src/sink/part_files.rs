//! The part-file protocol of the exactly-once file sinks ([`ExactlyOnceFileSink`] here, the
//! partitioned sink of `riffle-nexmark`): a file is written under `<dir>/.in-progress/`, synced,
//! named in the checkpoint, and renamed into `<dir>` when the checkpoint completes. A restore
//! commits what the restored checkpoint names and removes what earlier runs of the job left in
//! progress.
//!
//! [`ExactlyOnceFileSink`]: crate::sink::ExactlyOnceFileSink

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::path::Path;

use crate::error::{Error, Result};
use crate::sink::Ending;

/// The directory, inside an output directory, of the files not yet committed.
pub const IN_PROGRESS: &str = ".in-progress";

fn io(context: &str, path: &Path, e: std::io::Error) -> Error {
    Error::io(format!("{context} `{}`", path.display()), e)
}

/// The part-file tag of job `name`: 8 hex digits of a stable hash. Part files are named
/// `part-<tag>-...`, so that a job cleans up only its own.
pub fn job_tag(name: &str) -> String {
    format!("{:08x}", xxhash_rust::xxh3::xxh3_64(name.as_bytes()) as u32)
}

#[cfg(test)]
thread_local! {
    /// The directories [`sync_dir`] synced on this thread (tests check the durability steps).
    pub(crate) static SYNCED: std::cell::RefCell<Vec<std::path::PathBuf>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Syncs a directory, so that the names created or renamed in it survive a power loss.
pub fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(test)]
    SYNCED.with(|s| s.borrow_mut().push(dir.to_path_buf()));
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io("cannot sync", dir, e))
}

/// Makes `file` of `dir` visible: renames it out of `dir`'s in-progress directory. Idempotent:
/// a file committed before a failure is found committed.
pub fn commit_file(dir: &Path, file: &str) -> Result<()> {
    let from = dir.join(IN_PROGRESS).join(file);
    let to = dir.join(file);
    match std::fs::rename(&from, &to) {
        Ok(()) => Ok(()),
        Err(_) if to.exists() => Ok(()),
        Err(e) => Err(io("cannot commit", &from, e)),
    }
}

/// Removes from `dir`'s in-progress directory the files of job `job` (its tag) that earlier runs
/// left: all but those in `keep` and those of run `run` (being written now).
pub fn remove_stale(dir: &Path, job: &str, run: &str, keep: &HashSet<String>) -> Result<()> {
    let in_progress = dir.join(IN_PROGRESS);
    let Ok(entries) = std::fs::read_dir(&in_progress) else {
        return Ok(());
    };
    let job = format!("part-{job}-");
    let mine = format!("-{run}-");
    let mut removed = false;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(&job) && !keep.contains(&name) && !name.contains(&mine) {
            let _ = std::fs::remove_file(entry.path());
            removed = true;
        }
    }
    if removed {
        sync_dir(&in_progress)?;
    }
    Ok(())
}

/// What a closing writer commits once the job ended as `ending`: everything when the input was
/// drained; after a stop with a savepoint, only what checkpoints up to it pre-committed (the
/// rest stays in progress, and the restored job aborts it).
pub fn due_at_end<F: Clone>(
    pending: BTreeMap<u64, Vec<F>>,
    closed: Vec<F>,
    ending: Ending,
) -> Vec<F> {
    match ending {
        Ending::Drained => pending.into_values().flatten().chain(closed).collect(),
        Ending::Stopped { up_to } => pending
            .range(..=up_to)
            .flat_map(|(_, files)| files.iter().cloned())
            .collect(),
    }
}
