//! The exactly-once file sink: JSON-lines part files committed in two phases with the job's
//! checkpoints.
//!
//! Records go to in-progress files under `<dir>/.in-progress/`. At the barrier of checkpoint N
//! the open file is closed and synced (the file, then its directory), and every file closed
//! since the previous barrier becomes pending for N (the list is stored in the checkpoint). When
//! N completes, its pending files are renamed to `<dir>/part-*.jsonl`: visible, atomically, and
//! the directory is synced. On recovery, the files of the restored checkpoint are committed (it
//! completed; the rename may not have happened before the failure), and every other in-progress
//! file this job's earlier runs left is deleted: data after the checkpoint is replayed, never
//! duplicated. A bounded job commits its last files with its final checkpoint.
//!
//! Part files are named `part-<job>-<subtask>-<run>-<n>.jsonl`, where `<job>` is a hash of the
//! job's name (8 hex digits). Two jobs can share a directory: each cleans up only its own
//! in-progress files. A fresh start (no checkpoint restored) of a job whose committed output is
//! already in the directory fails at start, naming the directory: a second copy is never
//! written silently.
//!
//! Part files roll by size and by age.

use std::collections::{BTreeMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::codec::{decode, encode};
use crate::error::{Error, Result};
use crate::operators::OperatorContext;
use crate::record::{Data, Record};
use crate::sink::file::{MAX_KEPT_BUFFER, WRITEBACK_BYTES, Writeback, check_writable_dir};
use crate::sink::json::{JsonEncoder, encode_lines};
use crate::sink::part_files::{
    IN_PROGRESS, commit_file, due_at_end, job_tag, remove_stale, sync_dir,
};
use crate::sink::{Finalizer, Guarantee, Sink, SinkWriter};

/// Writes records as JSON lines, visible only once the checkpoint that covers them completed.
///
/// ```no_run
/// use std::time::Duration;
/// use riffle::sink::ExactlyOnceFileSink;
/// let sink = ExactlyOnceFileSink::<u64>::new("out/counts").roll_size(64 << 20).roll_interval(Duration::from_secs(300));
/// ```
pub struct ExactlyOnceFileSink<T> {
    dir: PathBuf,
    setting: String,
    extension: String,
    roll_size: u64,
    roll_interval: Duration,
    encoder: Option<JsonEncoder<T>>,
    _type: PhantomData<fn(T)>,
}

impl<T> ExactlyOnceFileSink<T> {
    /// A sink writing part files into `dir` (rolling at 128 MB or 10 minutes).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        ExactlyOnceFileSink {
            dir: dir.into(),
            setting: "output".into(),
            extension: "jsonl".into(),
            roll_size: 128 << 20,
            roll_interval: Duration::from_secs(600),
            encoder: None,
            _type: PhantomData,
        }
    }

    /// Renamed [`with_encoder`](Self::with_encoder).
    #[deprecated(
        since = "0.2.0",
        note = "renamed `with_encoder`, one name for a custom encoder everywhere"
    )]
    pub fn encoder(self, encoder: JsonEncoder<T>) -> Self {
        self.with_encoder(encoder)
    }

    /// Encodes each record with `encoder` (see [`json`](crate::sink::json)) instead of its
    /// `Serialize` through `serde_json`: faster for a type written a lot. The encoder must write
    /// one JSON document without a line break.
    pub fn with_encoder(mut self, encoder: JsonEncoder<T>) -> Self {
        self.encoder = Some(encoder);
        self
    }

    /// Starts a new part file once the current one holds this many bytes.
    pub fn roll_size(mut self, bytes: u64) -> Self {
        self.roll_size = bytes;
        self
    }

    /// Starts a new part file once the current one is this old.
    pub fn roll_interval(mut self, interval: Duration) -> Self {
        self.roll_interval = interval;
        self
    }

    /// The name of the setting the directory came from, used in configuration errors.
    pub fn setting_name(mut self, setting: &str) -> Self {
        self.setting = setting.to_string();
        self
    }

    /// The extension of the part files (default `jsonl`; SQL's CSV tables write `csv`).
    pub fn extension(mut self, extension: &str) -> Self {
        self.extension = extension.to_string();
        self
    }
}

impl<T: Data> Sink<T> for ExactlyOnceFileSink<T> {
    fn name(&self) -> String {
        format!("file {} (exactly-once)", self.dir.display())
    }

    fn validate(&self) -> Result<()> {
        if self.roll_size == 0 || self.roll_interval.is_zero() {
            return Err(Error::config(
                &self.setting,
                "part files need a positive roll size and interval",
            ));
        }
        check_writable_dir(&self.dir, &self.setting)
    }

    fn guarantee(&self) -> Guarantee {
        Guarantee::ExactlyOnce
    }

    fn writer(&self, ctx: &OperatorContext) -> Result<Box<dyn SinkWriter<T>>> {
        let run: String = ctx
            .run_id
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect();
        let job = job_tag(&ctx.job_name);
        if !ctx.restored
            && let Some(file) = committed_output_of(&self.dir, &job)
        {
            return Err(Error::config(
                &self.setting,
                format!(
                    "`{}` already holds committed output of job `{}` ({file}); a fresh start would \
                     write it a second time. Restore the job from its checkpoints (e.g. \
                     `--restore latest` with the checkpoint storage that wrote them), or start \
                     over with an empty directory",
                    self.dir.display(),
                    ctx.job_name
                ),
            ));
        }
        Ok(Box::new(TransactionalWriter {
            job,
            dir: self.dir.clone(),
            extension: self.extension.clone(),
            subtask: ctx.subtask,
            parallelism: ctx.parallelism,
            run,
            roll_size: self.roll_size,
            roll_interval: self.roll_interval,
            sequence: 0,
            current: None,
            closed: Vec::new(),
            pending: BTreeMap::new(),
            lines: Vec::with_capacity(1 << 16),
            encoder: self.encoder,
        }))
    }
}

/// What a checkpoint stores for one sink subtask: the files to commit when it completes, and
/// the directory they were written in (a job restored with another output directory commits
/// them where they are).
#[derive(Debug, Serialize, Deserialize)]
struct Committable {
    subtask: usize,
    files: Vec<String>,
    /// The sink's directory when the files were written.
    dir: PathBuf,
}

/// The committable of checkpoints written before it named its directory.
#[derive(Debug, Deserialize)]
struct CommittableWithoutDir {
    subtask: usize,
    files: Vec<String>,
}

impl Committable {
    /// Reads a committable in either format; the earlier one means `dir`.
    fn decode(bytes: &[u8], dir: &Path) -> Result<Committable> {
        if let Ok(committable) = decode::<Committable>(bytes) {
            return Ok(committable);
        }
        let CommittableWithoutDir { subtask, files } = decode(bytes)?;
        Ok(Committable {
            subtask,
            files,
            dir: dir.to_path_buf(),
        })
    }
}

struct OpenFile {
    name: String,
    writer: BufWriter<File>,
    /// The file's pages go to disk as it grows: the sync before a pre-commit waits for the last
    /// few MB only, not for a whole checkpoint interval of output.
    writeback: Writeback,
    opened: Instant,
    bytes: u64,
}

struct TransactionalWriter<T> {
    /// Hash of the job's name: the prefix of this job's part files.
    job: String,
    dir: PathBuf,
    /// The part files' extension.
    extension: String,
    subtask: usize,
    parallelism: usize,
    run: String,
    roll_size: u64,
    roll_interval: Duration,
    sequence: u64,
    current: Option<OpenFile>,
    /// Closed since the last barrier: pending for the next checkpoint.
    closed: Vec<String>,
    /// Pre-committed files by checkpoint, not yet visible.
    pending: BTreeMap<u64, Vec<String>>,
    /// A batch's lines, encoded here and written at once.
    lines: Vec<u8>,
    encoder: Option<JsonEncoder<T>>,
}

fn io(context: &str, path: &Path, e: std::io::Error) -> Error {
    Error::io(format!("{context} `{}`", path.display()), e)
}

/// A committed part file of job `job` in `dir`, if there is one.
fn committed_output_of(dir: &Path, job: &str) -> Option<String> {
    let prefix = format!("part-{job}-");
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|name| name.starts_with(&prefix))
}

fn commit_files(dir: &Path, files: &[String]) -> Result<()> {
    for file in files {
        commit_file(dir, file)?;
    }
    if !files.is_empty() {
        sync_dir(dir)?;
    }
    Ok(())
}

impl<T> TransactionalWriter<T> {
    fn open(&mut self) -> Result<&mut OpenFile> {
        if self.current.is_none() {
            let in_progress = self.dir.join(IN_PROGRESS);
            if !in_progress.is_dir() {
                std::fs::create_dir_all(&in_progress)
                    .map_err(|e| io("cannot create", &in_progress, e))?;
                sync_dir(&self.dir)?;
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
            let writeback = Writeback::new(&file, &name, WRITEBACK_BYTES)
                .map_err(|e| io("cannot open", &path, e))?;
            self.current = Some(OpenFile {
                name,
                writer: BufWriter::with_capacity(1 << 16, file),
                writeback,
                opened: Instant::now(),
                bytes: 0,
            });
        }
        Ok(self.current.as_mut().expect("opened above"))
    }

    /// Closes the open file (flushed and synced): it joins the files of the next checkpoint.
    fn close_current(&mut self) -> Result<()> {
        if let Some(mut open) = self.current.take() {
            let path = self.dir.join(IN_PROGRESS).join(&open.name);
            open.writeback
                .finish()
                .map_err(|e| io("cannot sync", &path, e))?;
            let file = open
                .writer
                .into_inner()
                .map_err(|e| io("cannot write", &path, e.into_error()))?;
            file.sync_all().map_err(|e| io("cannot sync", &path, e))?;
            // The file's name in its directory must be durable too before it is pre-committed.
            sync_dir(&self.dir.join(IN_PROGRESS))?;
            self.closed.push(open.name);
        }
        Ok(())
    }
}

impl<T: Data> SinkWriter<T> for TransactionalWriter<T> {
    fn write(&mut self, batch: &mut Vec<Record<T>>) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        // The batch's lines into one buffer, written at once; a record that cannot be encoded
        // fails the write after the lines before it.
        let mut lines = std::mem::take(&mut self.lines);
        let failed = encode_lines(batch, self.encoder, &mut lines);
        let dir = self.dir.clone();
        let (roll_size, roll_interval) = (self.roll_size, self.roll_interval);
        let open = match self.open() {
            Ok(open) => open,
            Err(e) => {
                self.lines = lines;
                return Err(e);
            }
        };
        let written = open
            .writer
            .write_all(&lines)
            .map_err(|e| io("cannot write", &dir.join(IN_PROGRESS).join(&open.name), e));
        if written.is_ok() {
            open.writeback.appended(lines.len());
        }
        open.bytes += lines.len() as u64;
        let roll = open.bytes >= roll_size || open.opened.elapsed() >= roll_interval;
        if lines.capacity() > MAX_KEPT_BUFFER {
            lines = Vec::new();
        }
        self.lines = lines;
        written?;
        if roll {
            self.close_current()?;
        }
        match failed {
            Some(e) => Err(Error::user(e)),
            None => Ok(()),
        }
    }

    fn flush(&mut self) -> Result<()> {
        let roll = self
            .current
            .as_ref()
            .is_some_and(|open| open.opened.elapsed() >= self.roll_interval);
        if roll {
            self.close_current()?;
        }
        Ok(())
    }

    fn pre_commit(&mut self, checkpoint_id: u64) -> Result<Option<Vec<u8>>> {
        self.close_current()?;
        let closed = std::mem::take(&mut self.closed);
        if !closed.is_empty() {
            self.pending
                .entry(checkpoint_id)
                .or_default()
                .extend(closed);
        }
        let files: Vec<String> = self.pending.values().flatten().cloned().collect();
        if files.is_empty() {
            return Ok(None);
        }
        encode(&Committable {
            subtask: self.subtask,
            files,
            dir: std::fs::canonicalize(&self.dir).unwrap_or_else(|_| self.dir.clone()),
        })
        .map(Some)
    }

    fn commit(&mut self, checkpoint_id: u64) -> Result<()> {
        let later = self.pending.split_off(&(checkpoint_id + 1));
        let due = std::mem::replace(&mut self.pending, later);
        let files: Vec<String> = due.into_values().flatten().collect();
        commit_files(&self.dir, &files)
    }

    fn recover(&mut self, committables: Vec<Vec<u8>>) -> Result<()> {
        let mut keep = HashSet::new();
        for bytes in committables {
            let committable = Committable::decode(&bytes, &self.dir)?;
            if committable.subtask % self.parallelism == self.subtask {
                commit_files(&committable.dir, &committable.files)?;
            }
            keep.extend(committable.files);
        }
        // Abort what this job's earlier runs left uncommitted (beyond the restored checkpoint);
        // other jobs' files in the same directory are theirs to handle.
        remove_stale(&self.dir, &self.job, &self.run, &keep)
    }

    fn close(&mut self) -> Result<Option<Finalizer>> {
        self.close_current()?;
        let pending = std::mem::take(&mut self.pending);
        let closed = std::mem::take(&mut self.closed);
        let dir = self.dir.clone();
        Ok(Some(Box::new(move |ending| {
            commit_files(&dir, &due_at_end(pending, closed, ending))
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sink::Ending;
    use crate::sink::part_files::SYNCED;

    fn writer(dir: &Path, subtask: usize, run: &str) -> TransactionalWriter<u64> {
        TransactionalWriter {
            job: job_tag("job"),
            dir: dir.to_path_buf(),
            extension: "jsonl".into(),
            subtask,
            parallelism: 1,
            run: run.into(),
            roll_size: 1 << 20,
            roll_interval: Duration::from_secs(3600),
            sequence: 0,
            current: None,
            closed: Vec::new(),
            pending: BTreeMap::new(),
            lines: Vec::new(),
            encoder: None,
        }
    }

    fn write(w: &mut TransactionalWriter<u64>, values: &[u64]) {
        let mut batch: Vec<Record<u64>> = values.iter().map(|v| Record::untimed(*v)).collect();
        SinkWriter::<u64>::write(w, &mut batch).unwrap();
    }

    fn visible(dir: &Path) -> Vec<String> {
        let mut lines: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_file())
            .flat_map(|e| {
                std::fs::read_to_string(e.path())
                    .unwrap()
                    .lines()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect();
        lines.sort();
        lines
    }

    #[test]
    fn records_become_visible_when_their_checkpoint_completes() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = writer(dir.path(), 0, "a");
        write(&mut w, &[1, 2]);
        let c1 = SinkWriter::<u64>::pre_commit(&mut w, 1).unwrap();
        assert!(c1.is_some());
        write(&mut w, &[3]);
        assert!(
            visible(dir.path()).is_empty(),
            "nothing before the checkpoint completes"
        );
        SinkWriter::<u64>::commit(&mut w, 1).unwrap();
        assert_eq!(visible(dir.path()), vec!["1", "2"]);
        let finalizer = SinkWriter::<u64>::close(&mut w).unwrap().unwrap();
        finalizer(Ending::Drained).unwrap();
        assert_eq!(visible(dir.path()), vec!["1", "2", "3"]);
    }

    #[test]
    fn an_encoder_writes_the_lines_it_commits() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = writer(dir.path(), 0, "a");
        w.encoder = Some(|v, out| {
            out.extend_from_slice(b"{\"n\":");
            crate::sink::json::push_u64(out, *v * 10);
            out.push(b'}');
        });
        write(&mut w, &[1, 2]);
        SinkWriter::<u64>::pre_commit(&mut w, 1).unwrap();
        SinkWriter::<u64>::commit(&mut w, 1).unwrap();
        assert_eq!(visible(dir.path()), vec![r#"{"n":10}"#, r#"{"n":20}"#]);
    }

    #[test]
    fn recovery_commits_the_restored_checkpoint_and_aborts_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let mut failed = writer(dir.path(), 0, "run1");
        write(&mut failed, &[1, 2]);
        let committable = SinkWriter::<u64>::pre_commit(&mut failed, 7)
            .unwrap()
            .unwrap();
        write(&mut failed, &[3]); // after the barrier: to be replayed
        SinkWriter::<u64>::pre_commit(&mut failed, 8).unwrap(); // checkpoint 8 never completes
        drop(failed); // the crash: neither checkpoint's files were renamed
        let mut restored = writer(dir.path(), 0, "run2");
        SinkWriter::<u64>::recover(&mut restored, vec![committable]).unwrap();
        assert_eq!(visible(dir.path()), vec!["1", "2"]);
        assert_eq!(
            std::fs::read_dir(dir.path().join(IN_PROGRESS))
                .unwrap()
                .count(),
            0,
            "the rest is gone"
        );
        write(&mut restored, &[3]);
        SinkWriter::<u64>::close(&mut restored).unwrap().unwrap()(Ending::Drained).unwrap();
        assert_eq!(visible(dir.path()), vec!["1", "2", "3"]);
    }

    /// A crash after any batch — with the last checkpoint's completion delivered or not — then
    /// recovery from the last completed checkpoint and a replay from its position: the visible
    /// output is the uninterrupted run's, each record once.
    #[test]
    fn a_crash_anywhere_then_recovery_gives_the_uninterrupted_output() {
        const BATCHES: u64 = 10;
        let batch = |i: u64| (i * 3..i * 3 + 3).collect::<Vec<u64>>();
        let expected: Vec<String> = {
            let mut all: Vec<String> = (0..BATCHES * 3).map(|v| v.to_string()).collect();
            all.sort();
            all
        };
        for cut in 0..=BATCHES {
            for notified in [true, false] {
                let dir = tempfile::tempdir().unwrap();
                let mut first = writer(dir.path(), 0, "first");
                // A checkpoint after every second batch: (id, batches before it, committable).
                let mut completed: Option<(u64, u64, Option<Vec<u8>>)> = None;
                for i in 0..cut {
                    write(&mut first, &batch(i));
                    if i % 2 == 1 {
                        let id = i / 2 + 1;
                        let committable = SinkWriter::<u64>::pre_commit(&mut first, id).unwrap();
                        if notified || i + 1 < cut {
                            SinkWriter::<u64>::commit(&mut first, id).unwrap();
                        }
                        completed = Some((id, i + 1, committable));
                    }
                }
                drop(first); // the crash
                let (next_id, from, committables) = match completed {
                    Some((id, position, committable)) => {
                        (id + 1, position, committable.into_iter().collect())
                    }
                    None => (1, 0, Vec::new()),
                };
                let mut second = writer(dir.path(), 0, "second");
                SinkWriter::<u64>::recover(&mut second, committables).unwrap();
                let mut id = next_id;
                for i in from..BATCHES {
                    write(&mut second, &batch(i));
                    if i % 2 == 1 {
                        SinkWriter::<u64>::pre_commit(&mut second, id).unwrap();
                        SinkWriter::<u64>::commit(&mut second, id).unwrap();
                        id += 1;
                    }
                }
                SinkWriter::<u64>::close(&mut second).unwrap().unwrap()(Ending::Drained).unwrap();
                assert_eq!(
                    visible(dir.path()),
                    expected,
                    "crash after batch {cut}, completion delivered: {notified}"
                );
            }
        }
    }

    #[test]
    fn a_stop_with_savepoint_commits_up_to_the_savepoint_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = writer(dir.path(), 0, "a");
        write(&mut w, &[1]);
        SinkWriter::<u64>::pre_commit(&mut w, 4).unwrap();
        write(&mut w, &[2]);
        SinkWriter::<u64>::pre_commit(&mut w, 5).unwrap(); // the savepoint
        write(&mut w, &[3]); // after its barrier
        let finalizer = SinkWriter::<u64>::close(&mut w).unwrap().unwrap();
        finalizer(Ending::Stopped { up_to: 5 }).unwrap();
        assert_eq!(visible(dir.path()), vec!["1", "2"]);
        assert_eq!(
            std::fs::read_dir(dir.path().join(IN_PROGRESS))
                .unwrap()
                .count(),
            1,
            "left for the restore to abort"
        );
    }

    #[test]
    fn a_file_and_its_directory_are_synced_before_the_pre_commit_and_the_commit_syncs_the_output() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = writer(dir.path(), 0, "a");
        write(&mut w, &[1]);
        SYNCED.with(|s| s.borrow_mut().clear());
        SinkWriter::<u64>::pre_commit(&mut w, 1).unwrap();
        let in_progress = dir.path().join(IN_PROGRESS);
        assert_eq!(
            SYNCED.with(|s| s.borrow().clone()),
            vec![in_progress],
            "the in-progress directory holds the synced file's name"
        );
        SYNCED.with(|s| s.borrow_mut().clear());
        SinkWriter::<u64>::commit(&mut w, 1).unwrap();
        assert_eq!(
            SYNCED.with(|s| s.borrow().clone()),
            vec![dir.path().to_path_buf()]
        );
    }

    #[test]
    fn recovery_removes_only_this_jobs_in_progress_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut other = writer(dir.path(), 0, "x");
        other.job = job_tag("another job");
        write(&mut other, &[7]);
        SinkWriter::<u64>::pre_commit(&mut other, 3).unwrap(); // in progress, not committed
        let mut failed = writer(dir.path(), 0, "run1");
        write(&mut failed, &[1]);
        SinkWriter::<u64>::pre_commit(&mut failed, 1).unwrap(); // never completes
        let mut fresh = writer(dir.path(), 0, "run2");
        SinkWriter::<u64>::recover(&mut fresh, Vec::new()).unwrap();
        let left: Vec<String> = std::fs::read_dir(dir.path().join(IN_PROGRESS))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            left,
            vec![format!("part-{}-0-x-0.jsonl", job_tag("another job"))]
        );
        // The other job's files are still its own to commit.
        SinkWriter::<u64>::commit(&mut other, 3).unwrap();
        assert_eq!(visible(dir.path()), vec!["7"]);
    }

    #[test]
    fn a_file_sink_made_exactly_once_keeps_its_settings_and_commits_at_checkpoints() {
        let dir = tempfile::tempdir().unwrap();
        let mut ctx = crate::testing::operator_context("sink", "r1", 0, 1);
        ctx.job_name = "job".into();
        let sink = crate::sink::FileSink::<u64>::new(dir.path())
            .setting_name("--output")
            .with_encoder(|n, out| crate::sink::json::push_u64(out, n * 10))
            .exactly_once();
        assert_eq!(Sink::<u64>::guarantee(&sink), Guarantee::ExactlyOnce);
        let mut w = sink.writer(&ctx).unwrap();
        w.write(&mut vec![Record::untimed(1), Record::untimed(2)])
            .unwrap();
        w.pre_commit(1).unwrap();
        assert!(visible(dir.path()).is_empty(), "visible before the commit");
        w.commit(1).unwrap();
        assert_eq!(visible(dir.path()), vec!["10", "20"]);
        // The setting's name came along: a fresh start over this output names it.
        let error = sink.writer(&ctx).err().expect("refused");
        assert!(
            matches!(&error, Error::Config { setting, .. } if setting == "--output"),
            "{error}"
        );
    }

    #[test]
    fn a_fresh_start_over_committed_output_of_the_same_job_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut ctx = crate::testing::operator_context("sink", "r1", 0, 1);
        ctx.job_name = "job".into();
        let sink = ExactlyOnceFileSink::<u64>::new(dir.path()).setting_name("--output");
        let mut w = sink.writer(&ctx).unwrap();
        w.write(&mut vec![Record::untimed(1)]).unwrap();
        w.pre_commit(1).unwrap();
        w.commit(1).unwrap();
        let error = sink.writer(&ctx).err().expect("refused");
        let message = error.to_string();
        assert!(
            matches!(&error, Error::Config { setting, .. } if setting == "--output"),
            "{message}"
        );
        assert!(
            message.contains(&dir.path().display().to_string()),
            "{message}"
        );
        // Restoring, the output is expected; another job may share the directory.
        ctx.restored = true;
        assert!(sink.writer(&ctx).is_ok());
        ctx.restored = false;
        ctx.job_name = "another".into();
        assert!(sink.writer(&ctx).is_ok());
    }

    #[test]
    fn part_files_roll_by_size() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = writer(dir.path(), 0, "a");
        w.roll_size = 4;
        write(&mut w, &[10, 20]);
        write(&mut w, &[30]);
        SinkWriter::<u64>::pre_commit(&mut w, 1).unwrap();
        SinkWriter::<u64>::commit(&mut w, 1).unwrap();
        let files = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_file())
            .count();
        assert_eq!(files, 2);
        assert_eq!(visible(dir.path()), vec!["10", "20", "30"]);
    }
}
