//! The jobs running on this machine: each job that serves its API writes a small file (id, name,
//! address, process id) into a directory, and removes it when it stops, so that `riffle jobs`
//! finds them and `riffle savepoint <job>` knows where to send the request.
//!
//! The directory is `$RIFFLE_JOBS_DIR`, else `$XDG_RUNTIME_DIR/riffle/jobs`, else
//! `<temp dir>/riffle-<user>/jobs`. Files of processes that died without cleaning up are skipped
//! (and removed) when listing.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A job registered by its web server.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct JobEntry {
    /// The job's id.
    pub id: String,
    /// The job's name.
    pub name: String,
    /// Where its API answers (`host:port`).
    pub address: String,
    /// The process that runs it.
    pub pid: u32,
    /// Wall-clock start, epoch ms.
    pub started_at: i64,
}

/// The directory of job files.
pub fn jobs_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("RIFFLE_JOBS_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(runtime) = std::env::var_os("XDG_RUNTIME_DIR") {
        return PathBuf::from(runtime).join("riffle").join("jobs");
    }
    let user = std::env::var("USER").unwrap_or_else(|_| "riffle".into());
    std::env::temp_dir()
        .join(format!("riffle-{user}"))
        .join("jobs")
}

/// A job's file; removed when dropped.
#[derive(Debug)]
pub struct Registration {
    path: PathBuf,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Writes `entry` into the jobs directory.
pub fn register(entry: &JobEntry) -> std::io::Result<Registration> {
    let dir = jobs_dir();
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("{}.json", entry.id));
    let tmp = dir.join(format!(".{}.json.tmp", entry.id));
    std::fs::write(&tmp, serde_json::to_vec_pretty(entry)?)?;
    std::fs::rename(&tmp, &path)?;
    Ok(Registration { path })
}

fn alive(pid: u32) -> bool {
    if cfg!(target_os = "linux") {
        std::path::Path::new(&format!("/proc/{pid}")).exists()
    } else {
        true
    }
}

/// The registered jobs whose process still runs, oldest first.
pub fn list() -> Vec<JobEntry> {
    let Ok(files) = std::fs::read_dir(jobs_dir()) else {
        return Vec::new();
    };
    let mut jobs: Vec<JobEntry> = files
        .flatten()
        .filter(|f| f.path().extension().is_some_and(|e| e == "json"))
        .filter_map(|f| {
            let entry: JobEntry = serde_json::from_slice(&std::fs::read(f.path()).ok()?).ok()?;
            if alive(entry.pid) {
                Some(entry)
            } else {
                let _ = std::fs::remove_file(f.path());
                None
            }
        })
        .collect();
    jobs.sort_by_key(|j| (j.started_at, j.id.clone()));
    jobs
}

/// The running job with this id or name (an id prefix works too); an error says what matched.
pub fn find(job: &str) -> Result<JobEntry, String> {
    let jobs = list();
    let matching: Vec<&JobEntry> = jobs
        .iter()
        .filter(|j| j.id == job || j.name == job || (job.len() >= 4 && j.id.starts_with(job)))
        .collect();
    match matching.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(format!(
            "no running job `{job}` on this machine (registered in {}); `riffle jobs` lists them",
            jobs_dir().display()
        )),
        many => Err(format!(
            "`{job}` matches {} jobs ({}); give the id",
            many.len(),
            many.iter()
                .map(|j| j.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}
