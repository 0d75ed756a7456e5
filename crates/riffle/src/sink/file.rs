//! JSON-lines file sink: one part file per subtask in an output directory.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::operators::OperatorContext;
use crate::record::{Data, Record};
use crate::sink::json::{JsonEncoder, encode_lines};
use crate::sink::{Sink, SinkWriter};

/// Writes records as JSON lines to `<dir>/part-<subtask>.jsonl`.
///
/// The directory is created when the first record is written, so a job that never writes leaves
/// nothing behind. Existing part files are replaced (or appended to, with
/// [`append`](FileSink::append)).
///
/// ```no_run
/// use riffle::{StreamEnv, sink::FileSink};
/// let env = StreamEnv::new();
/// env.from_iter(vec![1u64, 2, 3]).sink(FileSink::new("out/numbers"));
/// env.execute().unwrap();
/// ```
pub struct FileSink<T> {
    dir: PathBuf,
    setting: String,
    append: bool,
    encoder: Option<JsonEncoder<T>>,
    _type: PhantomData<fn(T)>,
}

impl<T> FileSink<T> {
    /// A sink writing part files into `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FileSink {
            dir: dir.into(),
            setting: "output".into(),
            append: false,
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
    ///
    /// ```no_run
    /// use riffle::sink::{FileSink, json};
    /// let sink = FileSink::<u64>::new("out/numbers").with_encoder(|n, out| json::push_u64(out, *n));
    /// ```
    pub fn with_encoder(mut self, encoder: JsonEncoder<T>) -> Self {
        self.encoder = Some(encoder);
        self
    }

    /// The name of the setting the directory came from, used in configuration errors.
    pub fn setting_name(mut self, setting: &str) -> Self {
        self.setting = setting.to_string();
        self
    }

    /// Appends to existing part files instead of replacing them.
    pub fn append(mut self, append: bool) -> Self {
        self.append = append;
        self
    }

    /// The same sink, exactly-once: records become visible only once the checkpoint that
    /// covers them completed (an [`ExactlyOnceFileSink`](crate::sink::ExactlyOnceFileSink) with
    /// this directory, setting name and encoder). As `KafkaSink::exactly_once` in riffle-kafka:
    /// a builder step chooses the guarantee of every sink. An exactly-once sink never replaces
    /// committed files, so `append` does not apply.
    ///
    /// ```no_run
    /// use riffle::sink::FileSink;
    /// let sink = FileSink::<u64>::new("out/counts").exactly_once().roll_size(64 << 20);
    /// ```
    pub fn exactly_once(self) -> crate::sink::ExactlyOnceFileSink<T> {
        let sink = crate::sink::ExactlyOnceFileSink::new(self.dir).setting_name(&self.setting);
        match self.encoder {
            Some(encoder) => sink.with_encoder(encoder),
            None => sink,
        }
    }

    /// The output directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Checks that `dir` is, or can become, a writable directory.
pub(crate) fn check_writable_dir(dir: &Path, setting: &str) -> Result<()> {
    let mut existing = Some(dir);
    while let Some(path) = existing {
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => {
                if meta.permissions().readonly() {
                    return Err(Error::config(
                        setting,
                        format!("`{}`: directory is not writable", path.display()),
                    ));
                }
                return Ok(());
            }
            Ok(_) => {
                return Err(Error::config(
                    setting,
                    format!("`{}` exists and is not a directory", path.display()),
                ));
            }
            Err(_) => existing = path.parent().filter(|p| !p.as_os_str().is_empty()),
        }
    }
    Ok(())
}

impl<T: Data> Sink<T> for FileSink<T> {
    fn name(&self) -> String {
        format!("file {}", self.dir.display())
    }

    fn validate(&self) -> Result<()> {
        check_writable_dir(&self.dir, &self.setting)
    }

    fn writer(&self, ctx: &OperatorContext) -> Result<Box<dyn SinkWriter<T>>> {
        Ok(Box::new(FileWriter {
            path: self.dir.join(format!("part-{}.jsonl", ctx.subtask)),
            append: self.append,
            file: None,
            writeback: None,
            dirty: false,
            lines: Vec::with_capacity(1 << 16),
            encoder: self.encoder,
        }))
    }
}

/// A batch buffer larger than this (a batch of very long records) is not kept for the next.
pub(crate) const MAX_KEPT_BUFFER: usize = 4 << 20;

/// Bytes appended to a part file between two background syncs ([`Writeback`]).
pub(crate) const WRITEBACK_BYTES: u64 = 32 << 20;

/// Has a growing file's pages written to disk in the background, every [`WRITEBACK_BYTES`]
/// appended (a thread of its own syncs a second handle of the file): the sync when the file is
/// closed then waits for the last few megabytes only, not for the whole file. A job writing
/// 300 MB waited a tenth of a second in that last sync, with nothing else left to do.
pub(crate) struct Writeback {
    requests: Option<crossbeam_channel::Sender<()>>,
    syncer: Option<std::thread::JoinHandle<std::io::Result<()>>>,
    appended: u64,
    every: u64,
}

impl Writeback {
    /// Background syncs of `file` (named `name` in the thread's name) every `every` bytes.
    pub(crate) fn new(file: &File, name: &str, every: u64) -> std::io::Result<Writeback> {
        let file = file.try_clone()?;
        let (requests, received) = crossbeam_channel::bounded::<()>(1);
        let syncer = std::thread::Builder::new()
            .name(format!("sync {name}"))
            .spawn(move || {
                for () in received {
                    file.sync_data()?;
                }
                Ok(())
            })?;
        Ok(Writeback {
            requests: Some(requests),
            syncer: Some(syncer),
            appended: 0,
            every,
        })
    }

    /// `bytes` more were written to the file: asks for a sync every `every` bytes (not if one
    /// is still asked for: the next request covers both).
    pub(crate) fn appended(&mut self, bytes: usize) {
        self.appended += bytes as u64;
        if self.appended >= self.every {
            self.appended = 0;
            if let Some(requests) = &self.requests {
                let _ = requests.try_send(());
            }
        }
    }

    /// Waits for the syncs asked for; the first one's error, if any failed (an error of a sync
    /// is reported once, to one handle of the file: it must not be lost here).
    pub(crate) fn finish(&mut self) -> std::io::Result<()> {
        self.requests = None;
        match self.syncer.take() {
            Some(syncer) => syncer
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("the sync thread panicked"))),
            None => Ok(()),
        }
    }
}

struct FileWriter<T> {
    path: PathBuf,
    append: bool,
    file: Option<BufWriter<File>>,
    writeback: Option<Writeback>,
    dirty: bool,
    /// A batch's lines, encoded here and written at once.
    lines: Vec<u8>,
    encoder: Option<JsonEncoder<T>>,
}

impl<T> FileWriter<T> {
    fn file(&mut self) -> Result<&mut BufWriter<File>> {
        if self.file.is_none() {
            if let Some(dir) = self.path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| {
                    Error::io(format!("cannot create directory `{}`", dir.display()), e)
                })?;
            }
            let file = OpenOptions::new()
                .create(true)
                .write(true)
                .append(self.append)
                .truncate(!self.append)
                .open(&self.path)
                .map_err(|e| Error::io(format!("cannot open `{}`", self.path.display()), e))?;
            let name = self.path.file_name().unwrap_or_default().to_string_lossy();
            self.writeback = Some(
                Writeback::new(&file, &name, WRITEBACK_BYTES)
                    .map_err(|e| Error::io(format!("cannot open `{}`", self.path.display()), e))?,
            );
            self.file = Some(BufWriter::with_capacity(1 << 16, file));
        }
        Ok(self.file.as_mut().expect("opened above"))
    }
}

impl<T: Data> SinkWriter<T> for FileWriter<T> {
    fn write(&mut self, batch: &mut Vec<Record<T>>) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        // The batch's lines into one buffer, written at once; a record that cannot be encoded
        // fails the write after the lines before it.
        let mut lines = std::mem::take(&mut self.lines);
        let failed = encode_lines(batch, self.encoder, &mut lines);
        let file = match self.file() {
            Ok(file) => file,
            Err(e) => {
                self.lines = lines;
                return Err(e);
            }
        };
        let written = file.write_all(&lines);
        if written.is_ok()
            && let Some(writeback) = &mut self.writeback
        {
            writeback.appended(lines.len());
        }
        if lines.capacity() > MAX_KEPT_BUFFER {
            lines = Vec::new();
        }
        self.lines = lines;
        self.dirty = true;
        written.map_err(|e| Error::io(format!("cannot write `{}`", self.path.display()), e))?;
        match failed {
            Some(e) => Err(Error::user(e)),
            None => Ok(()),
        }
    }

    fn flush(&mut self) -> Result<()> {
        if self.dirty
            && let Some(file) = &mut self.file
        {
            file.flush()
                .map_err(|e| Error::io(format!("cannot write `{}`", self.path.display()), e))?;
            self.dirty = false;
        }
        Ok(())
    }

    fn close(&mut self) -> Result<Option<crate::sink::Finalizer>> {
        <Self as SinkWriter<T>>::flush(self)?;
        if let Some(mut writeback) = self.writeback.take() {
            writeback
                .finish()
                .map_err(|e| Error::io(format!("cannot sync `{}`", self.path.display()), e))?;
        }
        if let Some(file) = self.file.take() {
            let file = file.into_inner().map_err(|e| {
                Error::io(
                    format!("cannot write `{}`", self.path.display()),
                    e.into_error(),
                )
            })?;
            file.sync_all()
                .map_err(|e| Error::io(format!("cannot sync `{}`", self.path.display()), e))?;
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sink::json;

    fn ctx() -> OperatorContext {
        crate::testing::operator_context("sink", "run-1", 0, 1)
    }

    #[test]
    fn background_syncs_leave_the_file_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("part-0.jsonl");
        let mut file = File::create(&path).unwrap();
        let mut writeback = Writeback::new(&file, "part-0.jsonl", 10).unwrap();
        let mut expected = Vec::new();
        for i in 0..100u32 {
            let line = format!("line {i}\n");
            file.write_all(line.as_bytes()).unwrap();
            writeback.appended(line.len());
            expected.extend_from_slice(line.as_bytes());
        }
        writeback.finish().unwrap();
        writeback.finish().unwrap();
        file.sync_all().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), expected);
    }

    #[test]
    fn a_batch_is_written_by_the_encoder_or_by_serde_json() {
        let dir = tempfile::tempdir().unwrap();
        let records = || {
            vec![
                Record::untimed("a\"b".to_string()),
                Record::untimed("c".to_string()),
            ]
        };
        let plain = FileSink::<String>::new(dir.path().join("plain"));
        let mut writer = plain.writer(&ctx()).unwrap();
        writer.write(&mut records()).unwrap();
        writer.close().unwrap();
        let shouting = FileSink::<String>::new(dir.path().join("encoded"))
            .with_encoder(|s, out| json::push_str(out, &s.to_uppercase()));
        let mut writer = shouting.writer(&ctx()).unwrap();
        let mut batch = records();
        writer.write(&mut batch).unwrap();
        writer.close().unwrap();
        assert!(batch.is_empty());
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name).join("part-0.jsonl"));
        assert_eq!(read("plain").unwrap(), "\"a\\\"b\"\n\"c\"\n");
        assert_eq!(read("encoded").unwrap(), "\"A\\\"B\"\n\"C\"\n");
    }

    #[test]
    fn a_record_serde_json_refuses_fails_the_write_after_the_lines_before_it() {
        use std::collections::HashMap;
        let dir = tempfile::tempdir().unwrap();
        let sink = FileSink::<HashMap<Vec<u8>, u8>>::new(dir.path());
        let mut writer = sink.writer(&ctx()).unwrap();
        let good = HashMap::new();
        let bad = HashMap::from([(vec![1u8], 2u8)]); // not a string key: serde_json refuses
        let mut batch = vec![
            Record::untimed(good.clone()),
            Record::untimed(bad),
            Record::untimed(good),
        ];
        let err = writer.write(&mut batch).unwrap_err();
        assert!(err.to_string().contains("key must be a string"), "{err}");
        writer.close().unwrap();
        let written = std::fs::read_to_string(dir.path().join("part-0.jsonl")).unwrap();
        assert_eq!(written, "{}\n");
    }

    #[test]
    fn a_file_where_a_directory_should_be_is_a_config_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let err = check_writable_dir(&file.join("out"), "output").unwrap_err();
        assert!(
            matches!(err, Error::Config { ref setting, .. } if setting == "output"),
            "{err}"
        );
        check_writable_dir(&dir.path().join("new/deeper"), "output").unwrap();
    }
}
