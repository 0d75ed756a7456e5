//! Where a REST request may ask for a savepoint: only under the job's savepoint directory or a
//! root allowed by configuration ([`crate::WebConfig::savepoint_roots`]).
//!
//! Local paths are compared after resolution: the target and every root are canonicalized
//! (symlinks and `.` resolved); a target that does not exist yet is resolved through its nearest
//! existing ancestor, the rest of it appended as written (it cannot hold a symlink, since it does
//! not exist). `s3://bucket/prefix` targets must lie under an `s3://` root: the same bucket and
//! a prefix that starts with the root's, segment by segment. The savepoint is then written by
//! the job with the storage settings and credentials it was configured with, never ones from the
//! request.

use std::path::{Component, Path, PathBuf};

/// Why a target was refused: `Forbidden` (403) for a location outside the roots, `Invalid`
/// (400) for one that is not a location at all.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    Forbidden(String),
    Invalid(String),
}

/// A location a savepoint may go under.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Root {
    Local(PathBuf),
    S3 { bucket: String, prefix: Vec<String> },
}

/// The bucket and prefix segments of `s3://bucket/prefix`; `None` when it is not one (empty
/// bucket or segment, `.` or `..`, control characters, `?` or `#`).
fn parse_s3(location: &str) -> Option<(String, Vec<String>)> {
    let rest = location.strip_prefix("s3://")?.trim_end_matches('/');
    if rest.contains(|c: char| c.is_control() || c == '?' || c == '#' || c == '\\') {
        return None;
    }
    let mut parts = rest.split('/');
    let bucket = parts.next()?.to_string();
    let prefix: Vec<String> = parts.map(str::to_string).collect();
    if bucket.is_empty() || prefix.iter().any(|p| p.is_empty() || p == "." || p == "..") {
        return None;
    }
    Some((bucket, prefix))
}

/// `path` with symlinks resolved: its nearest existing ancestor canonicalized, the components
/// that do not exist yet appended. `path` must be absolute and free of `..`.
fn resolve(path: &Path) -> std::io::Result<PathBuf> {
    let mut existing = path;
    let mut missing = Vec::new();
    loop {
        match std::fs::symlink_metadata(existing) {
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else {
                    return Err(e);
                };
                missing.push(name);
                existing = parent;
            }
            Err(e) => return Err(e),
        }
    }
    let mut resolved = std::fs::canonicalize(existing)?;
    for name in missing.into_iter().rev() {
        resolved.push(name);
    }
    Ok(resolved)
}

/// The local path of a location (`/dir` or `file:///dir`), or `None` for an `s3://` one.
fn local_path(location: &str) -> Option<&str> {
    if location.starts_with("s3://") {
        None
    } else {
        Some(location.strip_prefix("file://").unwrap_or(location))
    }
}

/// The allowed roots of one job.
#[derive(Clone, Debug)]
pub(crate) struct SavepointRoots {
    /// As configured (the default directory first), for messages and resolution at each request.
    configured: Vec<String>,
}

impl SavepointRoots {
    pub(crate) fn new(default_dir: Option<&str>, roots: &[String]) -> Self {
        SavepointRoots {
            configured: default_dir
                .into_iter()
                .map(str::to_string)
                .chain(roots.iter().cloned())
                .collect(),
        }
    }

    /// Roots resolved now (a local root may be created or re-linked while the job runs).
    fn resolved(&self) -> Vec<Root> {
        self.configured
            .iter()
            .filter_map(|root| match local_path(root) {
                None => parse_s3(root).map(|(bucket, prefix)| Root::S3 { bucket, prefix }),
                Some(path) => {
                    let path = Path::new(path);
                    if !path.is_absolute() {
                        return None;
                    }
                    resolve(path).ok().map(Root::Local)
                }
            })
            .collect()
    }

    fn outside(&self, target: &str, why: &str) -> Refusal {
        Refusal::Forbidden(format!(
            "savepoint target `{target}` refused: {why}; a request may only name a location under \
             the job's savepoint directory or the roots allowed by its configuration ({})",
            if self.configured.is_empty() {
                "none configured".to_string()
            } else {
                self.configured
                    .iter()
                    .map(|r| format!("`{r}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ))
    }

    /// The directory a request's `target` resolves to, when it lies under an allowed root.
    pub(crate) fn check(&self, target: &str) -> Result<String, Refusal> {
        let target = target.trim_end_matches('/');
        let Some(local) = local_path(target) else {
            let Some((bucket, prefix)) = parse_s3(target) else {
                return Err(Refusal::Invalid(format!(
                    "bad savepoint directory `{target}`: expected s3://bucket/prefix (no empty, `.` or `..` segments)"
                )));
            };
            let inside = self.resolved().iter().any(|root| match root {
                Root::S3 {
                    bucket: b,
                    prefix: p,
                } => *b == bucket && prefix.starts_with(p),
                Root::Local(_) => false,
            });
            return if inside {
                Ok(target.to_string())
            } else {
                Err(self.outside(target, "not under an allowed s3:// root"))
            };
        };
        let bad =
            |why: &str| Refusal::Invalid(format!("bad savepoint directory `{target}`: {why}"));
        if local.is_empty() || local.contains('\0') {
            return Err(bad("empty or not a path"));
        }
        let path = Path::new(local);
        if !path.is_absolute() {
            return Err(bad("must be an absolute path (or s3://bucket/prefix)"));
        }
        if path.components().any(|c| c == Component::ParentDir) {
            return Err(self.outside(target, "it must not contain `..`"));
        }
        let resolved = resolve(path)
            .map_err(|e| self.outside(target, &format!("it cannot be resolved ({e})")))?;
        let inside = self.resolved().iter().any(|root| match root {
            Root::Local(root) => resolved.starts_with(root),
            Root::S3 { .. } => false,
        });
        if !inside {
            let why = if resolved.as_path() == path {
                "outside the allowed roots".to_string()
            } else {
                format!(
                    "it resolves to `{}`, outside the allowed roots",
                    resolved.display()
                )
            };
            return Err(self.outside(target, &why));
        }
        if resolved.exists() && !resolved.is_dir() {
            return Err(bad("exists and is not a directory"));
        }
        Ok(resolved.display().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forbidden(result: Result<String, Refusal>) -> String {
        match result {
            Err(Refusal::Forbidden(message)) => message,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn local_targets_must_resolve_under_a_root() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let default = base.join("savepoints");
        let extra = base.join("extra");
        std::fs::create_dir(&extra).unwrap();
        let roots = SavepointRoots::new(
            Some(default.to_str().unwrap()),
            &[extra.display().to_string()],
        );
        // The default directory does not exist yet: itself and below are fine.
        assert_eq!(
            roots.check(default.to_str().unwrap()),
            Ok(default.display().to_string())
        );
        let below = default.join("a/b");
        assert_eq!(
            roots.check(&format!("file://{}/", below.display())),
            Ok(below.display().to_string())
        );
        assert_eq!(
            roots.check(extra.join("x").to_str().unwrap()),
            Ok(extra.join("x").display().to_string())
        );
        let message = forbidden(roots.check("/etc"));
        assert!(
            message.contains("`/etc` refused: outside the allowed roots"),
            "{message}"
        );
        assert!(message.contains(default.to_str().unwrap()), "{message}");
        let sneaky = format!("{}/../../etc", default.display());
        assert!(forbidden(roots.check(&sneaky)).contains("`..`"));
        // A sibling whose name starts like a root is not under it.
        let sibling = format!("{}-evil", default.display());
        assert!(forbidden(roots.check(&sibling)).contains("outside"));
        // A symlink inside a root that points outside it.
        let outside = base.join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, extra.join("link")).unwrap();
        let message = forbidden(roots.check(extra.join("link/deeper").to_str().unwrap()));
        assert!(
            message.contains(&format!("resolves to `{}/deeper`", outside.display())),
            "{message}"
        );
        // A dangling symlink cannot be resolved.
        std::os::unix::fs::symlink(base.join("nowhere"), extra.join("dangling")).unwrap();
        assert!(
            forbidden(roots.check(extra.join("dangling/x").to_str().unwrap()))
                .contains("cannot be resolved")
        );
        // A symlinked root is resolved too: targets through either spelling are fine.
        let alias = base.join("alias");
        std::os::unix::fs::symlink(&extra, &alias).unwrap();
        let aliased = SavepointRoots::new(Some(alias.to_str().unwrap()), &[]);
        assert_eq!(
            aliased.check(extra.join("y").to_str().unwrap()),
            Ok(extra.join("y").display().to_string())
        );
        // Not locations at all: 400.
        assert!(matches!(
            roots.check("relative/dir"),
            Err(Refusal::Invalid(_))
        ));
        std::fs::write(extra.join("file"), "x").unwrap();
        assert_eq!(
            roots.check(extra.join("file").to_str().unwrap()),
            Err(Refusal::Invalid(format!(
                "bad savepoint directory `{}`: exists and is not a directory",
                extra.join("file").display()
            )))
        );
    }

    #[test]
    fn s3_targets_must_lie_under_an_s3_root() {
        let roots = SavepointRoots::new(
            Some("s3://jobs/riffle/savepoints/"),
            &["/var/lib/riffle".into()],
        );
        assert_eq!(
            roots.check("s3://jobs/riffle/savepoints/mine"),
            Ok("s3://jobs/riffle/savepoints/mine".into())
        );
        assert_eq!(
            roots.check("s3://jobs/riffle/savepoints"),
            Ok("s3://jobs/riffle/savepoints".into())
        );
        for outside in [
            "s3://other-bucket/riffle/savepoints",
            "s3://jobs/riffle",
            "s3://jobs/riffle/savepoints-evil",
            "s3://jobs",
        ] {
            assert!(forbidden(roots.check(outside)).contains("not under an allowed s3:// root"));
        }
        for invalid in [
            "s3://",
            "s3://jobs/riffle/savepoints/../x",
            "s3://jobs//riffle/savepoints",
            "s3://jobs/riffle/savepoints?x=1",
        ] {
            assert!(
                matches!(roots.check(invalid), Err(Refusal::Invalid(_))),
                "{invalid}"
            );
        }
        let none = SavepointRoots::new(None, &[]);
        assert!(forbidden(none.check("s3://jobs/x")).contains("none configured"));
        assert!(forbidden(none.check("/tmp/x")).contains("none configured"));
    }
}
