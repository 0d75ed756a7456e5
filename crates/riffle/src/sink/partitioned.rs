//! A partitioned, exactly-once file sink (Flink's `filesystem` connector with `PARTITIONED BY`):
//! what Nexmark q10 and SQL's partitioned `filesystem` tables write into.
//!
//! Each record goes to the directory of its partition, a relative path the sink is given a
//! function for (q10: `dt=2026-01-15/hm=00:00`). Within a partition the protocol is the one of
//! Riffle's `ExactlyOnceFileSink`:
//!
//! * records go to an in-progress file, `<dir>/<partition>/.in-progress/part-<job>-<subtask>-<run>-<n>.<ext>`;
//! * at the barrier of checkpoint N every open file is closed and synced (the file, then its
//!   directory) and becomes pending for N (the list is stored in the checkpoint);
//! * when N completes, its pending files are renamed into their partition's directory:
//!   visible, atomically, and the directory is synced;
//! * on recovery the files of the restored checkpoint are committed (it completed), and every
//!   other in-progress file that this job's earlier runs left in any partition is deleted: data
//!   after the checkpoint is replayed, never duplicated. A bounded job commits its last files
//!   when it ends.
//!
//! Records are written as lines ([`PartitionedFileSink::new`]) or by a part-file format of the
//! caller's ([`PartitionedFileSink::with_format`], a [`PartWriter`] per file): a bulk format
//! such as Parquet buffers what it needs and writes its footer when the file is closed, which
//! every checkpoint does. An empty partition (`""`) is the sink's directory itself.
//!
//! Files roll at each checkpoint, at a size, and when more partitions are open than the sink
//! keeps open files for (the least recently written one is closed; a partition written again
//! opens a new file). `<job>` is a hash of the job's name: two jobs can share a directory.
//! A fresh start (no checkpoint restored) of a job whose committed files are already in the
//! directory fails at start, naming the directory.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::checkpoint::{decode, encode};
use crate::operators::OperatorContext;
use crate::sink::part_files::{IN_PROGRESS, due_at_end, job_tag, remove_stale, sync_dir};
use crate::sink::{Finalizer, Guarantee, Sink, SinkWriter};
use crate::{Data, Error, Record, Result};
use serde::{Deserialize, Serialize};

/// How deep partition directories may nest below the sink's directory (q10: `dt=../hm=..`).
const MAX_DEPTH: usize = 4;

type PartitionFn<T> = Arc<dyn Fn(&T) -> String + Send + Sync>;
type LineFn<T> = Arc<dyn Fn(&T, &mut Vec<u8>) -> Result<()> + Send + Sync>;

/// Writes the records of one part file: a line format, or a bulk format such as Parquet.
pub trait PartWriter<T>: Send {
    /// Adds a record.
    fn write(&mut self, value: &T) -> Result<()>;
    /// The bytes the file holds (or will, for what is buffered) so far: it rolls past the
    /// sink's roll size.
    fn bytes(&self) -> u64;
    /// Writes what is left (a bulk format's buffered rows and footer) and hands back the
    /// file, which the sink syncs and commits.
    fn finish(self: Box<Self>) -> Result<File>;
}

/// Part files made visible (committed): what an [`on_commit`](PartitionedFileSink::on_commit)
/// hook is given.
#[derive(Debug)]
pub struct CommittedFiles<'a> {
    /// The checkpoint whose completion committed them; `None` at the end of a bounded input,
    /// or for a checkpoint taken by a version that did not record it.
    pub checkpoint_id: Option<u64>,
    /// The sink's directory.
    pub dir: &'a Path,
    /// Each file's partition (a relative directory, `""` for the sink's directory) and name.
    pub files: &'a [(String, String)],
}

/// Called after part files were committed: a table format's log appends them (see
/// [`PartitionedFileSink::on_commit`]).
pub type CommitHook = Arc<dyn Fn(&CommittedFiles<'_>) -> Result<()> + Send + Sync>;

/// Opens a [`PartWriter`] over each new part file.
pub type PartFormat<T> = Arc<dyn Fn(File) -> Result<Box<dyn PartWriter<T>>> + Send + Sync>;

/// The line format: each record's line, then a newline.
struct LineWriter<T> {
    writer: BufWriter<File>,
    line: LineFn<T>,
    buffer: Vec<u8>,
    bytes: u64,
}

impl<T> PartWriter<T> for LineWriter<T> {
    fn write(&mut self, value: &T) -> Result<()> {
        self.buffer.clear();
        (self.line)(value, &mut self.buffer)?;
        self.buffer.push(b'\n');
        self.writer
            .write_all(&self.buffer)
            .map_err(|e| Error::io("cannot write a part file", e))?;
        self.bytes += self.buffer.len() as u64;
        Ok(())
    }

    fn bytes(&self) -> u64 {
        self.bytes
    }

    fn finish(self: Box<Self>) -> Result<File> {
        self.writer
            .into_inner()
            .map_err(|e| Error::io("cannot write a part file", e.into_error()))
    }
}

/// Writes each record as one line into the directory of its partition, visible once the
/// checkpoint that covers it completed; see the [module documentation](self).
///
/// ```no_run
/// use riffle::sink::partitioned::PartitionedFileSink;
/// let sink = PartitionedFileSink::new(
///     "out/bids",
///     |t: &(String, i64)| format!("day={}", t.0),
///     |t: &(String, i64), line: &mut Vec<u8>| {
///         line.extend_from_slice(t.1.to_string().as_bytes());
///         Ok(())
///     },
/// )
/// .extension("csv");
/// ```
pub struct PartitionedFileSink<T> {
    dir: PathBuf,
    setting: String,
    extension: String,
    roll_size: u64,
    max_open: usize,
    partition: PartitionFn<T>,
    format: PartFormat<T>,
    on_commit: Option<CommitHook>,
    _type: PhantomData<fn(T)>,
}

impl<T: 'static> PartitionedFileSink<T> {
    /// A sink writing into `dir`: `partition(record)` is the record's directory below it (a
    /// relative path of plain names, such as `dt=2026-01-15/hm=00:00`), `line` writes the
    /// record's line (without its newline). Files roll at 128 MB; 64 files are kept open.
    pub fn new(
        dir: impl Into<PathBuf>,
        partition: impl Fn(&T) -> String + Send + Sync + 'static,
        line: impl Fn(&T, &mut Vec<u8>) -> Result<()> + Send + Sync + 'static,
    ) -> Self {
        let line: LineFn<T> = Arc::new(line);
        Self::with_format(dir, partition, move |file| {
            Ok(Box::new(LineWriter {
                writer: BufWriter::with_capacity(1 << 16, file),
                line: line.clone(),
                buffer: Vec::with_capacity(256),
                bytes: 0,
            }))
        })
    }

    /// A sink writing into `dir` with a part-file format of the caller's: `format` opens a
    /// [`PartWriter`] over each new part file (a bulk format such as Parquet). Set the
    /// [`extension`](Self::extension) to the format's.
    pub fn with_format(
        dir: impl Into<PathBuf>,
        partition: impl Fn(&T) -> String + Send + Sync + 'static,
        format: impl Fn(File) -> Result<Box<dyn PartWriter<T>>> + Send + Sync + 'static,
    ) -> Self {
        PartitionedFileSink {
            dir: dir.into(),
            setting: "output".into(),
            extension: "jsonl".into(),
            roll_size: 128 << 20,
            max_open: 64,
            partition: Arc::new(partition),
            format: Arc::new(format),
            on_commit: None,
            _type: PhantomData,
        }
    }

    /// Calls `hook` after each commit of part files (at a checkpoint's completion, again for
    /// the restored checkpoint's files when a job recovers, and at the end of a bounded
    /// input), with the files just made visible: a table format appends them to its log. The
    /// hook may see the same files more than once (a commit replayed after a failure) and
    /// must add each once; an error fails the job, which then recovers and calls it again.
    pub fn on_commit(
        mut self,
        hook: impl Fn(&CommittedFiles<'_>) -> Result<()> + Send + Sync + 'static,
    ) -> Self {
        self.on_commit = Some(Arc::new(hook));
        self
    }

    /// The extension of the part files (default `jsonl`).
    pub fn extension(mut self, extension: &str) -> Self {
        self.extension = extension.to_string();
        self
    }

    /// Starts a new part file in a partition once its current one holds this many bytes.
    pub fn roll_size(mut self, bytes: u64) -> Self {
        self.roll_size = bytes;
        self
    }

    /// How many part files a subtask keeps open at once (one per partition written since the
    /// last checkpoint, up to this many).
    pub fn max_open_files(mut self, files: usize) -> Self {
        self.max_open = files;
        self
    }

    /// The name of the setting the directory came from, used in configuration errors.
    pub fn setting_name(mut self, setting: &str) -> Self {
        self.setting = setting.to_string();
        self
    }
}

fn io(context: &str, path: &Path, e: std::io::Error) -> Error {
    Error::io(format!("{context} `{}`", path.display()), e)
}

/// Whether `partition` is empty (the sink's directory) or a relative path of plain names (no
/// `..`, no root, no empty part, not the in-progress directory).
fn valid_partition(partition: &str) -> bool {
    partition.is_empty()
        || partition.split('/').count() <= MAX_DEPTH
            && partition
                .split('/')
                .all(|part| !part.is_empty() && part != "." && part != ".." && part != IN_PROGRESS)
}

/// Every directory below `dir` (itself included) down to [`MAX_DEPTH`] levels, except
/// in-progress ones.
fn partition_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut found = vec![dir.to_path_buf()];
    let mut level = vec![dir.to_path_buf()];
    for _ in 0..MAX_DEPTH {
        let mut next = Vec::new();
        for d in &level {
            let Ok(entries) = std::fs::read_dir(d) else {
                continue;
            };
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) && entry.file_name() != IN_PROGRESS {
                    next.push(entry.path());
                }
            }
        }
        found.extend(next.iter().cloned());
        level = next;
    }
    found
}

/// A committed part file of job `job` anywhere in `dir`'s partitions, if there is one.
fn committed_output_of(dir: &Path, job: &str) -> Option<PathBuf> {
    let prefix = format!("part-{job}-");
    partition_dirs(dir).into_iter().find_map(|d| {
        std::fs::read_dir(&d)
            .ok()?
            .flatten()
            .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .map(|e| e.path())
    })
}

impl<T: Data> Sink<T> for PartitionedFileSink<T> {
    fn name(&self) -> String {
        format!("partitioned files {} (exactly-once)", self.dir.display())
    }

    fn validate(&self) -> Result<()> {
        if self.roll_size == 0 || self.max_open == 0 {
            return Err(Error::config(
                &self.setting,
                "part files need a positive roll size and at least one open file",
            ));
        }
        if self.extension.is_empty() || self.extension.contains('/') {
            return Err(Error::config(
                &self.setting,
                format!("`{}` is not a file extension", self.extension),
            ));
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| {
            Error::config(
                &self.setting,
                format!("cannot create `{}`: {e}", self.dir.display()),
            )
        })
    }

    fn guarantee(&self) -> Guarantee {
        Guarantee::ExactlyOnce
    }

    fn writer(&self, ctx: &OperatorContext) -> Result<Box<dyn SinkWriter<T>>> {
        let job = job_tag(&ctx.job_name);
        if !ctx.restored
            && let Some(file) = committed_output_of(&self.dir, &job)
        {
            return Err(Error::config(
                &self.setting,
                format!(
                    "`{}` already holds committed output of job `{}` ({}); a fresh start would \
                     write it a second time. Restore the job from its checkpoints, or start over \
                     with an empty directory",
                    self.dir.display(),
                    ctx.job_name,
                    file.display()
                ),
            ));
        }
        Ok(Box::new(PartitionWriter {
            job,
            dir: self.dir.clone(),
            extension: self.extension.clone(),
            subtask: ctx.subtask,
            parallelism: ctx.parallelism,
            run: ctx
                .run_id
                .chars()
                .filter(|c| c.is_ascii_alphanumeric())
                .collect(),
            roll_size: self.roll_size,
            max_open: self.max_open,
            partition: self.partition.clone(),
            format: self.format.clone(),
            on_commit: self.on_commit.clone(),
            sequence: 0,
            writes: 0,
            open: HashMap::new(),
            closed: Vec::new(),
            pending: BTreeMap::new(),
        }))
    }
}

/// A part file: its partition (relative directory) and name.
type PartFile = (String, String);

/// What a checkpoint stores for one sink subtask: the files to commit when it completes.
#[derive(Debug, Serialize, Deserialize)]
struct Committable {
    subtask: usize,
    dir: PathBuf,
    files: Vec<PartFile>,
    /// The checkpoint (absent from checkpoints of earlier versions: see [`Committable::decode`]).
    checkpoint_id: Option<u64>,
}

/// [`Committable`] as earlier versions wrote it.
#[derive(Debug, Deserialize)]
struct CommittableV1 {
    subtask: usize,
    dir: PathBuf,
    files: Vec<PartFile>,
}

impl Committable {
    fn decode(bytes: &[u8]) -> Result<Committable> {
        decode(bytes).or_else(|e| match decode::<CommittableV1>(bytes) {
            Ok(v1) => Ok(Committable {
                subtask: v1.subtask,
                dir: v1.dir,
                files: v1.files,
                checkpoint_id: None,
            }),
            Err(_) => Err(e),
        })
    }
}

struct OpenFile<T> {
    name: String,
    writer: Box<dyn PartWriter<T>>,
    /// When it was last written (a count of writes): the least recent is closed first.
    used: u64,
}

struct PartitionWriter<T> {
    job: String,
    dir: PathBuf,
    extension: String,
    subtask: usize,
    parallelism: usize,
    run: String,
    roll_size: u64,
    max_open: usize,
    partition: PartitionFn<T>,
    format: PartFormat<T>,
    on_commit: Option<CommitHook>,
    sequence: u64,
    writes: u64,
    open: HashMap<String, OpenFile<T>>,
    /// Closed since the last barrier: pending for the next checkpoint.
    closed: Vec<PartFile>,
    /// Pre-committed files by checkpoint, not yet visible.
    pending: BTreeMap<u64, Vec<PartFile>>,
}

/// Commits `files` (each out of its partition's in-progress directory), syncs their
/// partitions, then calls the `hook` with them.
fn commit_files(
    dir: &Path,
    files: &[PartFile],
    checkpoint_id: Option<u64>,
    hook: Option<&CommitHook>,
) -> Result<()> {
    let mut partitions = HashSet::new();
    for (partition, file) in files {
        crate::sink::part_files::commit_file(&dir.join(partition), file)?;
        partitions.insert(partition);
    }
    for partition in partitions {
        sync_dir(&dir.join(partition))?;
    }
    match hook {
        Some(hook) if !files.is_empty() => hook(&CommittedFiles {
            checkpoint_id,
            dir,
            files,
        }),
        _ => Ok(()),
    }
}

impl<T> PartitionWriter<T> {
    /// The open file of `partition`, opened (and, beyond the open-file limit, another closed)
    /// if needed.
    fn file(&mut self, partition: &str) -> Result<&mut OpenFile<T>> {
        if !self.open.contains_key(partition) {
            if !valid_partition(partition) {
                return Err(Error::user(format!(
                    "`{partition}` is not a partition directory (a relative path of at most \
                     {MAX_DEPTH} plain names)"
                )));
            }
            if self.open.len() >= self.max_open {
                let oldest = self
                    .open
                    .iter()
                    .min_by_key(|(_, f)| f.used)
                    .map(|(p, _)| p.clone())
                    .expect("at least one open file");
                self.close(&oldest)?;
            }
            let in_progress = self.dir.join(partition).join(IN_PROGRESS);
            if !in_progress.is_dir() {
                std::fs::create_dir_all(&in_progress)
                    .map_err(|e| io("cannot create", &in_progress, e))?;
                sync_dir(&self.dir.join(partition))?;
            }
            let name = format!(
                "part-{}-{}-{}-{}.{}",
                self.job, self.subtask, self.run, self.sequence, self.extension
            );
            self.sequence += 1;
            let path = in_progress.join(&name);
            let file = OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .open(&path)
                .map_err(|e| io("cannot open", &path, e))?;
            let writer = (self.format)(file)?;
            self.open.insert(
                partition.to_string(),
                OpenFile {
                    name,
                    writer,
                    used: 0,
                },
            );
        }
        self.writes += 1;
        let file = self.open.get_mut(partition).expect("opened above");
        file.used = self.writes;
        Ok(file)
    }

    /// Closes the open file of `partition` (flushed and synced): it joins the files of the
    /// next checkpoint.
    fn close(&mut self, partition: &str) -> Result<()> {
        if let Some(open) = self.open.remove(partition) {
            let in_progress = self.dir.join(partition).join(IN_PROGRESS);
            let path = in_progress.join(&open.name);
            let file = open.writer.finish()?;
            file.sync_all().map_err(|e| io("cannot sync", &path, e))?;
            sync_dir(&in_progress)?;
            self.closed.push((partition.to_string(), open.name));
        }
        Ok(())
    }

    fn close_all(&mut self) -> Result<()> {
        let mut partitions: Vec<String> = self.open.keys().cloned().collect();
        partitions.sort();
        for partition in partitions {
            self.close(&partition)?;
        }
        Ok(())
    }
}

impl<T: Data> SinkWriter<T> for PartitionWriter<T> {
    fn write(&mut self, batch: &mut Vec<Record<T>>) -> Result<()> {
        for record in batch.drain(..) {
            let partition = (self.partition)(&record.value);
            let roll_size = self.roll_size;
            let file = self.file(&partition)?;
            file.writer.write(&record.value)?;
            if file.writer.bytes() >= roll_size {
                self.close(&partition)?;
            }
        }
        Ok(())
    }

    fn pre_commit(&mut self, checkpoint_id: u64) -> Result<Option<Vec<u8>>> {
        self.close_all()?;
        let closed = std::mem::take(&mut self.closed);
        if !closed.is_empty() {
            self.pending
                .entry(checkpoint_id)
                .or_default()
                .extend(closed);
        }
        let files: Vec<PartFile> = self.pending.values().flatten().cloned().collect();
        if files.is_empty() {
            return Ok(None);
        }
        encode(&Committable {
            subtask: self.subtask,
            dir: std::fs::canonicalize(&self.dir).unwrap_or_else(|_| self.dir.clone()),
            files,
            checkpoint_id: Some(checkpoint_id),
        })
        .map(Some)
    }

    fn commit(&mut self, checkpoint_id: u64) -> Result<()> {
        let later = self.pending.split_off(&(checkpoint_id + 1));
        let due = std::mem::replace(&mut self.pending, later);
        let files: Vec<PartFile> = due.into_values().flatten().collect();
        commit_files(
            &self.dir,
            &files,
            Some(checkpoint_id),
            self.on_commit.as_ref(),
        )
    }

    fn recover(&mut self, committables: Vec<Vec<u8>>) -> Result<()> {
        let mut keep = HashSet::new();
        for bytes in committables {
            let committable = Committable::decode(&bytes)?;
            if committable.subtask % self.parallelism == self.subtask {
                commit_files(
                    &committable.dir,
                    &committable.files,
                    committable.checkpoint_id,
                    self.on_commit.as_ref(),
                )?;
            }
            keep.extend(committable.files.into_iter().map(|(_, name)| name));
        }
        // Abort what this job's earlier runs left uncommitted, in every partition; other jobs'
        // files are theirs to handle, and this run's own are being written.
        for partition in partition_dirs(&self.dir) {
            remove_stale(&partition, &self.job, &self.run, &keep)?;
        }
        Ok(())
    }

    fn close(&mut self) -> Result<Option<Finalizer>> {
        self.close_all()?;
        let pending = std::mem::take(&mut self.pending);
        let closed = std::mem::take(&mut self.closed);
        let dir = self.dir.clone();
        let hook = self.on_commit.clone();
        Ok(Some(Box::new(move |ending| {
            commit_files(
                &dir,
                &due_at_end(pending, closed, ending),
                None,
                hook.as_ref(),
            )
        })))
    }
}

/// A partition value in a directory name, escaped as Flink's file system connector does
/// (`PartitionPathUtils.escapePathName`: `%XX` for `:`, `/`, `%`, `=`, `#`, `?`, `\\`, `"`, `'`,
/// `*`, `[`, `]`, `^`, `{`, `}` and control characters): `00:00` -> `00%3A00`.
pub fn escape_partition_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if c.is_control()
            || matches!(
                c,
                ':' | '/'
                    | '%'
                    | '='
                    | '#'
                    | '?'
                    | '\\'
                    | '"'
                    | '\''
                    | '*'
                    | '['
                    | ']'
                    | '^'
                    | '{'
                    | '}'
            )
        {
            for byte in c.to_string().bytes() {
                out.push_str(&format!("%{byte:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The value a directory name's [`escape_partition_value`] escaped: `00%3A00` -> `00:00`. A `%`
/// not followed by two hex digits is kept as it is.
pub fn unescape_partition_value(escaped: &str) -> String {
    let bytes = escaped.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct OldCommittable {
        subtask: usize,
        dir: PathBuf,
        files: Vec<PartFile>,
    }

    #[test]
    fn partition_values_unescape_to_what_was_escaped() {
        for value in ["00:00", "a/b=c%d", "plain", "ü #?[]", "", "100%"] {
            assert_eq!(
                unescape_partition_value(&escape_partition_value(value)),
                value
            );
        }
        assert_eq!(unescape_partition_value("50%"), "50%");
        assert_eq!(unescape_partition_value("%zz"), "%zz");
    }

    #[test]
    fn committables_of_earlier_versions_decode_without_a_checkpoint_id() {
        let files = vec![("dt=1".to_string(), "part-a-0-r-0.jsonl".to_string())];
        let old = encode(&OldCommittable {
            subtask: 1,
            dir: "/out".into(),
            files: files.clone(),
        })
        .unwrap();
        let decoded = Committable::decode(&old).unwrap();
        assert_eq!((decoded.subtask, decoded.checkpoint_id), (1, None));
        assert_eq!(decoded.files, files);
        let new = encode(&Committable {
            subtask: 0,
            dir: "/out".into(),
            files,
            checkpoint_id: Some(7),
        })
        .unwrap();
        assert_eq!(Committable::decode(&new).unwrap().checkpoint_id, Some(7));
    }

    #[test]
    fn partitions_are_relative_paths_of_plain_names() {
        assert!(valid_partition("dt=2026-01-15/hm=00:00"));
        // The sink's directory itself.
        assert!(valid_partition(""));
        for bad in [
            "/abs",
            "a//b",
            "../up",
            "a/./b",
            "a/.in-progress",
            "a/b/c/d/e",
        ] {
            assert!(!valid_partition(bad), "{bad}");
        }
    }

    #[test]
    fn partition_dirs_skip_in_progress_directories() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("dt=1/hm=2").join(IN_PROGRESS)).unwrap();
        let mut found: Vec<String> = partition_dirs(dir.path())
            .into_iter()
            .map(|p| {
                p.strip_prefix(dir.path())
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        found.sort();
        assert_eq!(found, vec!["", "dt=1", "dt=1/hm=2"]);
    }
}
