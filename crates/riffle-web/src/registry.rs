//! The jobs running on this machine: each job that serves its API writes a small file (id, name,
//! address, process id, and a secret key) into a private directory, and removes it when it
//! stops, so that `riffle jobs` finds them and `riffle savepoint <job>` knows where to send the
//! request.
//!
//! The directory is `$RIFFLE_JOBS_DIR`, else `$XDG_RUNTIME_DIR/riffle/jobs`, else
//! `$XDG_STATE_HOME/riffle/jobs`, else `~/.local/state/riffle/jobs`. It is created with mode
//! 0700, and on every use it (and, for the default locations, its `riffle` parent) must belong
//! to the current user and give no access to group or others: otherwise it is refused with an
//! error that says why, since another local user could have planted it to redirect the CLI (and
//! the token it sends) to an address of theirs. Entries are written 0600; an entry not owned by
//! the current user is skipped. Files of processes that died without cleaning up are skipped
//! (and removed) when listing.
//!
//! An entry's `key` lets the CLI check, before it sends a token, that the server at the entry's
//! address is the job itself (see [`crate::client::JobClient::verified`]).

use std::io::{Error as IoError, ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A job registered by its web server.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
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
    /// The secret (hex) with which the job's server proves it is this job; empty in entries
    /// of older versions, which cannot be verified.
    #[serde(default)]
    pub key: String,
}

impl std::fmt::Debug for JobEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobEntry")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("address", &self.address)
            .field("pid", &self.pid)
            .field("started_at", &self.started_at)
            .field("key", &"<secret>")
            .finish()
    }
}

/// The registry directory this process uses: `$RIFFLE_JOBS_DIR`, else the default private one.
/// Fails when there is none to use (no `$RIFFLE_JOBS_DIR`, `$XDG_RUNTIME_DIR`, `$XDG_STATE_HOME`
/// nor `$HOME`).
pub fn jobs_dir() -> std::io::Result<PathBuf> {
    Registry::from_env().map(|r| r.dir)
}

/// A jobs registry directory.
///
/// ```no_run
/// let registry = riffle_web::registry::Registry::from_env().unwrap();
/// for job in registry.list().unwrap() {
///     println!("{} at {}", job.name, job.address);
/// }
/// ```
#[derive(Clone, Debug)]
pub struct Registry {
    dir: PathBuf,
    /// Directories that must be private too (the `riffle` parent of a default location).
    parents: Vec<PathBuf>,
}

/// The error of a registry that is not private to the current user.
fn not_private(dir: &Path, why: String) -> IoError {
    IoError::new(
        ErrorKind::PermissionDenied,
        format!(
            "the jobs registry {} is not private: {why}; refusing to use it (another user could \
             redirect `riffle` commands and their token). Remove it, or set RIFFLE_JOBS_DIR to a \
             directory of yours with mode 0700",
            dir.display()
        ),
    )
}

/// This process's effective user id.
fn our_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Checks that `dir` is a directory owned by us without group or other permissions.
fn check_private(dir: &Path) -> std::io::Result<()> {
    let meta = std::fs::metadata(dir)?;
    if !meta.is_dir() {
        return Err(not_private(dir, "it is not a directory".into()));
    }
    let ours = our_uid();
    if meta.uid() != ours {
        return Err(not_private(
            dir,
            format!("it belongs to uid {}, not to you (uid {ours})", meta.uid()),
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(not_private(
            dir,
            format!("its mode is {mode:04o}: group or others have access (expected 0700)"),
        ));
    }
    Ok(())
}

impl Registry {
    /// The registry of `$RIFFLE_JOBS_DIR`, else `$XDG_RUNTIME_DIR/riffle/jobs`, else
    /// `$XDG_STATE_HOME/riffle/jobs`, else `$HOME/.local/state/riffle/jobs`.
    pub fn from_env() -> std::io::Result<Registry> {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        if let Some(dir) = var("RIFFLE_JOBS_DIR") {
            return Ok(Registry::at(PathBuf::from(dir)));
        }
        let base = var("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .or_else(|| var("XDG_STATE_HOME").map(PathBuf::from))
            .or_else(|| var("HOME").map(|home| Path::new(&home).join(".local").join("state")))
            .ok_or_else(|| {
                IoError::new(
                    ErrorKind::NotFound,
                    "no private directory for the jobs registry: set RIFFLE_JOBS_DIR, \
                     XDG_RUNTIME_DIR or HOME",
                )
            })?;
        let riffle = base.join("riffle");
        Ok(Registry {
            dir: riffle.join("jobs"),
            parents: vec![riffle],
        })
    }

    /// The registry in `dir` (which must be private to this user when it is used).
    pub fn at(dir: impl Into<PathBuf>) -> Registry {
        Registry {
            dir: dir.into(),
            parents: Vec::new(),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Checks the directories, if they exist; whether the registry exists.
    fn checked(&self) -> std::io::Result<bool> {
        for dir in self.parents.iter().chain([&self.dir]) {
            match std::fs::metadata(dir) {
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
                Err(e) => return Err(e),
                Ok(_) => check_private(dir)?,
            }
        }
        Ok(true)
    }

    /// Writes `entry` (mode 0600), creating the directory (0700) if need be.
    pub fn register(&self, entry: &JobEntry) -> std::io::Result<Registration> {
        for dir in self.parents.iter().chain([&self.dir]) {
            match std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
            {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
            check_private(dir)?;
        }
        if entry.id.is_empty() || entry.id.contains(['/', '\\', '\0']) || entry.id.starts_with('.')
        {
            return Err(IoError::new(
                ErrorKind::InvalidInput,
                format!("job id `{}` cannot name a registry file", entry.id),
            ));
        }
        let path = self.dir.join(format!("{}.json", entry.id));
        let tmp = self.dir.join(format!(".{}.json.tmp", entry.id));
        let _ = std::fs::remove_file(&tmp);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(&serde_json::to_vec_pretty(entry)?)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, &path)?;
        Ok(Registration { path })
    }

    /// The registered jobs whose process still runs, oldest first; an error when the directory
    /// is not private to this user.
    pub fn list(&self) -> std::io::Result<Vec<JobEntry>> {
        if !self.checked()? {
            return Ok(Vec::new());
        }
        let ours = our_uid();
        let mut jobs: Vec<JobEntry> = std::fs::read_dir(&self.dir)?
            .flatten()
            .filter(|f| f.path().extension().is_some_and(|e| e == "json"))
            .filter_map(|f| {
                let path = f.path();
                let meta = std::fs::symlink_metadata(&path).ok()?;
                if !meta.is_file() || meta.uid() != ours {
                    tracing::warn!(file = %path.display(), "skipping a registry entry that is not a file of yours");
                    return None;
                }
                let entry: JobEntry = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
                if alive(entry.pid) {
                    Some(entry)
                } else {
                    let _ = std::fs::remove_file(&path);
                    None
                }
            })
            .collect();
        jobs.sort_by_key(|j| (j.started_at, j.id.clone()));
        Ok(jobs)
    }

    /// The running job with this id or name (an id prefix of 4+ characters works too); an
    /// error says what matched, or why the registry cannot be used.
    pub fn find(&self, job: &str) -> Result<JobEntry, String> {
        let jobs = self.list().map_err(|e| e.to_string())?;
        let matching: Vec<&JobEntry> = jobs
            .iter()
            .filter(|j| j.id == job || j.name == job || (job.len() >= 4 && j.id.starts_with(job)))
            .collect();
        match matching.as_slice() {
            [one] => Ok((*one).clone()),
            [] => Err(format!(
                "no running job `{job}` on this machine (registered in {}); `riffle jobs` lists them",
                self.dir.display()
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

/// Writes `entry` into this process's registry ([`Registry::from_env`]).
pub fn register(entry: &JobEntry) -> std::io::Result<Registration> {
    Registry::from_env()?.register(entry)
}

fn alive(pid: u32) -> bool {
    if cfg!(target_os = "linux") {
        Path::new(&format!("/proc/{pid}")).exists()
    } else {
        true
    }
}

/// The registered jobs of this process's registry whose process still runs, oldest first.
pub fn list() -> std::io::Result<Vec<JobEntry>> {
    Registry::from_env()?.list()
}

/// The running job with this id or name in this process's registry.
pub fn find(job: &str) -> Result<JobEntry, String> {
    Registry::from_env().map_err(|e| e.to_string())?.find(job)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn entry(id: &str) -> JobEntry {
        JobEntry {
            id: id.into(),
            name: "job".into(),
            address: "127.0.0.1:1".into(),
            pid: std::process::id(),
            started_at: 1,
            key: "00".into(),
        }
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn a_new_registry_is_private_and_its_entries_too() {
        let home = tempfile::tempdir().unwrap();
        let registry = Registry {
            dir: home.path().join("state/riffle/jobs"),
            parents: vec![home.path().join("state/riffle")],
        };
        assert_eq!(registry.list().unwrap(), vec![], "absent: empty");
        let registration = registry.register(&entry("abcd1234")).unwrap();
        assert_eq!(mode(&home.path().join("state/riffle")), 0o700);
        assert_eq!(mode(registry.dir()), 0o700);
        assert_eq!(mode(&registry.dir().join("abcd1234.json")), 0o600);
        assert_eq!(registry.list().unwrap(), vec![entry("abcd1234")]);
        assert_eq!(registry.find("abcd").unwrap(), entry("abcd1234"));
        drop(registration);
        assert_eq!(registry.list().unwrap(), vec![]);
        assert!(format!("{:?}", entry("x")).contains("<secret>"));
        assert!(!format!("{:?}", entry("x")).contains("\"00\""));
    }

    #[test]
    fn a_registry_open_to_others_is_refused() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("jobs");
        let registry = Registry::at(&dir);
        registry.register(&entry("abcd1234")).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let expected = format!(
            "the jobs registry {} is not private: its mode is 0777: group or others have access \
             (expected 0700); refusing to use it (another user could redirect `riffle` commands \
             and their token). Remove it, or set RIFFLE_JOBS_DIR to a directory of yours with \
             mode 0700",
            dir.display()
        );
        assert_eq!(registry.list().unwrap_err().to_string(), expected);
        assert_eq!(registry.find("abcd1234").unwrap_err(), expected);
        assert_eq!(
            registry.register(&entry("other")).unwrap_err().to_string(),
            expected
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o750)).unwrap();
        assert!(registry.list().unwrap_err().to_string().contains("0750"));
        // The parent of a default location is checked too.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let nested = Registry {
            dir: dir.clone(),
            parents: vec![home.path().to_path_buf()],
        };
        assert!(nested.list().unwrap_err().to_string().contains("0755"));
    }

    #[test]
    fn a_registry_of_another_user_is_refused() {
        if our_uid() != 0 {
            eprintln!("skipped: changing a directory's owner needs root");
            return;
        }
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("jobs");
        let registry = Registry::at(&dir);
        let _registration = registry.register(&entry("abcd1234")).unwrap();
        std::os::unix::fs::chown(&dir, Some(4242), Some(4242)).unwrap();
        let err = registry.list().unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "the jobs registry {} is not private: it belongs to uid 4242, not to you (uid 0)",
                dir.display()
            )),
            "{err}"
        );
        assert!(registry.register(&entry("x")).is_err());
        // Ours again, but an entry planted by another user is skipped.
        std::os::unix::fs::chown(&dir, Some(0), Some(0)).unwrap();
        let planted = dir.join("evil0000.json");
        std::fs::write(
            &planted,
            serde_json::to_vec(&JobEntry {
                address: "127.0.0.1:2".into(),
                ..entry("evil0000")
            })
            .unwrap(),
        )
        .unwrap();
        std::os::unix::fs::chown(&planted, Some(4242), None).unwrap();
        assert_eq!(registry.list().unwrap(), vec![entry("abcd1234")]);
    }
}
