//! JSON-lines file sink: one part file per subtask in an output directory.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::operators::OperatorContext;
use crate::record::{Data, Record};
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
    _type: PhantomData<fn(T)>,
}

impl<T> FileSink<T> {
    /// A sink writing part files into `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FileSink {
            dir: dir.into(),
            setting: "output".into(),
            append: false,
            _type: PhantomData,
        }
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
            dirty: false,
            line: Vec::with_capacity(256),
        }))
    }
}

struct FileWriter {
    path: PathBuf,
    append: bool,
    file: Option<BufWriter<File>>,
    dirty: bool,
    line: Vec<u8>,
}

impl FileWriter {
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
            self.file = Some(BufWriter::with_capacity(1 << 16, file));
        }
        Ok(self.file.as_mut().expect("opened above"))
    }
}

impl<T: Data> SinkWriter<T> for FileWriter {
    fn write(&mut self, batch: &mut Vec<Record<T>>) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let path = self.path.clone();
        let mut line = std::mem::take(&mut self.line);
        let file = self.file()?;
        for record in batch.drain(..) {
            line.clear();
            serde_json::to_writer(&mut line, &record.value).map_err(Error::user)?;
            line.push(b'\n');
            file.write_all(&line)
                .map_err(|e| Error::io(format!("cannot write `{}`", path.display()), e))?;
        }
        self.line = line;
        self.dirty = true;
        Ok(())
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
