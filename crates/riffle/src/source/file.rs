//! The file source: newline-delimited JSON, CSV with a header, or raw lines, from one file or
//! every file of a directory tree. Bounded; a position is a byte offset, so a checkpoint can
//! resume a file where it stopped.
//!
//! A directory is read recursively: every file under it, subdirectories included, in path order
//! (deterministic: the same tree gives the same splits). Entries whose name starts with `.`
//! (hidden files and directories, editors' temporary files) are skipped; symbolic links are
//! followed, a directory reached twice (a link cycle) is read once.
//!
//! Lines end at `\n`; one `\r` before it (CRLF) is not part of the line; the last line needs no
//! end. Lines of whitespace only are skipped.
//!
//! # Parallel reading of one file
//!
//! A file is cut into byte ranges ([`FileSplit`]), so that every source subtask reads a share of
//! even a single large file. A range `[start, end)` owns every line that *starts* inside it: a
//! reader of a range with `start > 0` skips to the byte after the first `\n` at or after
//! `start - 1`, and it reads the line that crosses `end` to its end. Every line is thus read
//! exactly once, whatever the ranges. The checkpointed position of a range is the offset of the
//! next line to read.
//!
//! The ranges depend only on the file's size, never on the parallelism: by default a file is cut
//! into 32 ranges of at least 1 MiB and at most 64 MiB each (a file of at most 1 MiB is one
//! range; [`FileSource::split_size`] fixes the size instead). Range `i` of the source goes to subtask
//! `i % parallelism`, which interleaves a file's ranges over the subtasks; a checkpoint taken at
//! one parallelism restores at another (each range resumes at its own position, wherever it
//! lands). A subtask reads the ranges of one file that it owns one after the other, in file
//! order, with one watermark generator for the file ([`SplitReader::stream`]): its event time
//! advances as if it read the file front to back, skipping the other subtasks' ranges, so
//! window state stays about one range's worth of event time ahead of the slowest subtask.
//! Different files are read side by side, as before.
//!
//! A CSV file's header is its first non-blank line: every range reads it from the start of
//! the file, and the range that owns that line does not take it for a record. Bad records are
//! placed by line number in a file's first range (`line 3`), by byte offset in the others
//! (`byte 1048721`), whose line count is not known without reading what precedes them.
//!
//! The source reads uncompressed files only (a compressed file would have to stay one range).
//! A file must not change while a job that reads it can restore a checkpoint of it: the ranges
//! of a file that changed size no longer match the checkpoint's. A checkpoint that holds the file
//! as one split (taken before files were cut, or with a larger split size) restores onto its
//! ranges ([`SplitReader::former_split_id`]).

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::record::Data;
use crate::source::{BadRecordPolicy, Boundedness, ReadStatus, Source, SourceOutput, SplitReader};

/// A decoder of one JSON line that knows its type's schema (see [`FileSource::with_decoder`]).
type JsonDecoder<T> = fn(&[u8]) -> serde_json::Result<T>;

/// A decoder of one line of text that carries what it needs (see [`FileSource::lines_with`]).
type LineDecoder<T> = std::sync::Arc<dyn Fn(&str) -> std::result::Result<T, String> + Send + Sync>;

/// How the lines of a file are decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileFormat {
    /// One JSON document per line.
    JsonLines,
    /// Comma-separated values; the first line of each file names the fields.
    Csv,
    /// Each line as a string, undecoded (for a parsing step later in the job).
    Lines,
}

/// Reads records from a file or a directory of files.
///
/// ```no_run
/// use riffle::source::{BadRecordPolicy, file::FileSource};
/// use riffle_clicks::Click;
/// let clicks = FileSource::<Click>::json("clicks.jsonl").bad_records(BadRecordPolicy::Skip);
/// ```
pub struct FileSource<T> {
    path: PathBuf,
    format: FileFormat,
    policy: BadRecordPolicy,
    setting: String,
    split_size: Option<u64>,
    decoder: Option<JsonDecoder<T>>,
    line_decoder: Option<LineDecoder<T>>,
    _type: PhantomData<fn() -> T>,
}

/// Ranges a file is cut into by default ([`FileSource::split_size`]).
const DEFAULT_RANGES_PER_FILE: u64 = 32;
/// The smallest default range: a smaller file is one range.
const MIN_DEFAULT_SPLIT_SIZE: u64 = 1 << 20;
/// The largest default range.
const MAX_DEFAULT_SPLIT_SIZE: u64 = 64 << 20;

impl<T> FileSource<T> {
    /// Newline-delimited JSON from `path` (a file, or a directory of files).
    pub fn json(path: impl Into<PathBuf>) -> Self {
        FileSource::new(path.into(), FileFormat::JsonLines)
    }

    /// Renamed [`with_decoder`](Self::with_decoder).
    #[deprecated(
        since = "0.2.0",
        note = "renamed `with_decoder`, one name for a custom decoder everywhere"
    )]
    pub fn json_with(
        path: impl Into<PathBuf>,
        decoder: fn(&[u8]) -> serde_json::Result<T>,
    ) -> Self {
        Self::with_decoder(path, decoder)
    }

    /// Newline-delimited JSON from `path`, each line decoded by `decoder` (one that knows the
    /// schema, e.g. `riffle_clicks::Click::from_json`) instead of the derived `Deserialize`; a
    /// line it refuses is a bad record with its error's text.
    pub fn with_decoder(
        path: impl Into<PathBuf>,
        decoder: fn(&[u8]) -> serde_json::Result<T>,
    ) -> Self {
        let mut source = FileSource::new(path.into(), FileFormat::JsonLines);
        source.decoder = Some(decoder);
        source
    }

    /// Every line of `path` (a file, or a directory of files) decoded by `decode`, a closure
    /// that carries what it needs (a table's schema, say). A line that is not UTF-8, or that
    /// `decode` refuses, is a bad record with its error's text and its place in the file. The
    /// line is lent to `decode`: no string is made of it.
    ///
    /// ```no_run
    /// use riffle::source::file::FileSource;
    /// let min_len = 3;
    /// let long_words = FileSource::lines_with("words.txt", move |line: &str| {
    ///     if line.len() < min_len {
    ///         return Err(format!("shorter than {min_len} bytes"));
    ///     }
    ///     Ok(line.to_uppercase())
    /// });
    /// ```
    pub fn lines_with(
        path: impl Into<PathBuf>,
        decode: impl Fn(&str) -> std::result::Result<T, String> + Send + Sync + 'static,
    ) -> Self {
        let mut source = FileSource::new(path.into(), FileFormat::Lines);
        source.line_decoder = Some(std::sync::Arc::new(decode));
        source
    }

    /// CSV with a header line from `path` (a file, or a directory of files).
    pub fn csv(path: impl Into<PathBuf>) -> Self {
        FileSource::new(path.into(), FileFormat::Csv)
    }

    fn new(path: PathBuf, format: FileFormat) -> Self {
        FileSource {
            path,
            format,
            policy: BadRecordPolicy::default(),
            setting: "input".into(),
            split_size: None,
            decoder: None,
            line_decoder: None,
            _type: PhantomData,
        }
    }

    /// Cuts every file into byte ranges of `bytes` (the last one shorter), read in parallel by
    /// the source's subtasks. By default a file is cut into 32 ranges of 1 MiB to 64 MiB. Smaller
    /// ranges balance the subtasks better and keep their event time closer together; each one
    /// costs an open, a seek and an entry in every checkpoint. Zero fails the job at start.
    ///
    /// ```no_run
    /// use riffle::source::file::FileSource;
    /// let lines = FileSource::lines("big.log").split_size(16 << 20);
    /// ```
    pub fn split_size(mut self, bytes: u64) -> Self {
        self.split_size = Some(bytes);
        self
    }

    /// The size of the ranges of a file of `len` bytes.
    fn range_size(&self, len: u64) -> u64 {
        self.split_size
            .unwrap_or_else(|| {
                len.div_ceil(DEFAULT_RANGES_PER_FILE)
                    .clamp(MIN_DEFAULT_SPLIT_SIZE, MAX_DEFAULT_SPLIT_SIZE)
            })
            .max(1)
    }

    /// What to do with lines that cannot be decoded (default: dead-letter).
    pub fn bad_records(mut self, policy: BadRecordPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The name of the setting the path came from, used in configuration errors.
    pub fn setting_name(mut self, setting: &str) -> Self {
        self.setting = setting.to_string();
        self
    }

    /// The files to read: the file, or every file under the directory (recursively, hidden
    /// entries skipped), in path order.
    fn files(&self) -> Result<Vec<PathBuf>> {
        let meta = std::fs::metadata(&self.path)
            .map_err(|e| Error::config(&self.setting, format!("`{}`: {e}", self.path.display())))?;
        if meta.is_file() {
            return Ok(vec![self.path.clone()]);
        }
        let mut files = Vec::new();
        let mut visited = std::collections::HashSet::new();
        self.walk(&self.path, &mut visited, &mut files)?;
        files.sort();
        Ok(files)
    }

    /// Adds the files under `dir` to `files`; `visited` holds the directories read (canonical).
    fn walk(
        &self,
        dir: &Path,
        visited: &mut std::collections::HashSet<PathBuf>,
        files: &mut Vec<PathBuf>,
    ) -> Result<()> {
        let listing_error =
            |e: std::io::Error| Error::config(&self.setting, format!("`{}`: {e}", dir.display()));
        let canonical = std::fs::canonicalize(dir).map_err(listing_error)?;
        if !visited.insert(canonical) {
            return Ok(());
        }
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(listing_error)? {
            let entry = entry.map_err(listing_error)?;
            if !entry.file_name().to_string_lossy().starts_with('.') {
                entries.push(entry.path());
            }
        }
        // In name order, so a directory linked twice is always read where the walk meets it first.
        entries.sort();
        for path in entries {
            // Follows symbolic links; a dangling link is an error naming it, not a silent gap.
            let meta = std::fs::metadata(&path)
                .map_err(|e| Error::config(&self.setting, format!("`{}`: {e}", path.display())))?;
            if meta.is_dir() {
                self.walk(&path, visited, files)?;
            } else if meta.is_file() {
                files.push(path);
            }
        }
        Ok(())
    }
}

impl FileSource<String> {
    /// Every line of `path` (a file, or a directory of files) as a string. Lines that are not
    /// UTF-8 follow the bad-record policy.
    pub fn lines(path: impl Into<PathBuf>) -> Self {
        FileSource::new(path.into(), FileFormat::Lines)
    }
}

impl<T: Data> Source<T> for FileSource<T> {
    type Split = FileSplit;

    fn name(&self) -> String {
        format!("file {}", self.path.display())
    }

    fn boundedness(&self) -> Boundedness {
        Boundedness::Bounded
    }

    fn validate(&self) -> Result<()> {
        if self.split_size == Some(0) {
            return Err(Error::config(
                "split_size",
                "must be at least 1 byte (the size of a file's byte ranges)",
            ));
        }
        for file in self.files()? {
            File::open(&file)
                .map_err(|e| Error::config(&self.setting, format!("`{}`: {e}", file.display())))?;
        }
        Ok(())
    }

    /// Every file's byte ranges, file after file, each file's in order. The ranges do not depend
    /// on `parallelism`, so a checkpoint restores at any parallelism: split `i` goes to subtask
    /// `i % parallelism`, which interleaves a file's ranges over the subtasks.
    fn splits(&self, _parallelism: usize) -> Result<Vec<FileSplit>> {
        let mut splits = Vec::new();
        for path in self.files()? {
            let len = std::fs::metadata(&path)
                .map_err(|e| Error::config(&self.setting, format!("`{}`: {e}", path.display())))?
                .len();
            let size = self.range_size(len);
            let mut start = 0u64;
            loop {
                let next = start.saturating_add(size);
                if next >= len {
                    splits.push(FileSplit {
                        path: path.clone(),
                        start,
                        end: None,
                    });
                    break;
                }
                splits.push(FileSplit {
                    path: path.clone(),
                    start,
                    end: Some(next),
                });
                start = next;
            }
        }
        Ok(splits)
    }

    fn reader(&self, split: FileSplit) -> Result<Box<dyn SplitReader<T>>> {
        let file = File::open(&split.path)
            .map_err(|e| Error::io(format!("cannot open `{}`", split.path.display()), e))?;
        let mut lines = LineSplitter::new(BufReader::with_capacity(READ_BUFFER, file));
        lines.offset = split.start;
        Ok(Box::new(FileReader {
            lines,
            id: split.id(),
            split,
            format: self.format,
            aligned: false,
            header: None,
            line: Vec::with_capacity(256),
            line_start: 0,
            decoder: self.decoder,
            line_decoder: self.line_decoder.clone(),
            _type: PhantomData,
        }))
    }

    fn bad_record_policy(&self) -> BadRecordPolicy {
        self.policy
    }
}

/// Bytes read from a file at a time.
const READ_BUFFER: usize = 1 << 16;

/// A unit of parallel reading of a [`FileSource`]: the lines of a file that *start* in the byte
/// range `[start, end)` (a line that crosses `end` is read to its end by this range, and skipped
/// by the next one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSplit {
    /// The file.
    pub path: PathBuf,
    /// The first byte of the range.
    pub start: u64,
    /// The byte after the range; `None` for the file's last range, which reads to the end of
    /// the file as it is when read.
    pub end: Option<u64>,
}

impl FileSplit {
    /// The split's name in checkpoints, dead letters and errors: the path for a whole file (as
    /// before files were cut into ranges, so such checkpoints still restore),
    /// `path@start-end` for a range, `path@start-` for a file's last range.
    pub fn id(&self) -> String {
        match (self.start, self.end) {
            (0, None) => self.path.display().to_string(),
            (start, None) => format!("{}@{start}-", self.path.display()),
            (start, Some(end)) => format!("{}@{start}-{end}", self.path.display()),
        }
    }
}

/// Splits a byte stream into lines: a line ends at `\n` (not part of it), one `\r` before the
/// `\n` is dropped (CRLF), and the last line needs no end. Counts bytes and lines, so a reader can
/// resume at a line's start.
pub(crate) struct LineSplitter<R> {
    reader: R,
    /// Bytes consumed: the offset of the next line.
    pub(crate) offset: u64,
    /// Lines read.
    pub(crate) line_number: u64,
}

impl<R: BufRead> LineSplitter<R> {
    pub(crate) fn new(reader: R) -> Self {
        LineSplitter {
            reader,
            offset: 0,
            line_number: 0,
        }
    }

    /// Reads the next line into `line` (cleared first, without its end); false at the end.
    pub(crate) fn next_line(&mut self, line: &mut Vec<u8>) -> std::io::Result<bool> {
        line.clear();
        // `BufRead::read_until`, with the `memchr` crate's vectorized search for the line end
        // (the standard library's takes a tenth of the time of reading a JSON-lines file).
        let mut n = 0;
        loop {
            let available = match self.reader.fill_buf() {
                Ok(available) => available,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                break;
            }
            let (used, done) = match memchr::memchr(b'\n', available) {
                Some(end) => (end + 1, true),
                None => (available.len(), false),
            };
            line.extend_from_slice(&available[..used]);
            self.reader.consume(used);
            n += used;
            if done {
                break;
            }
        }
        if n == 0 {
            return Ok(false);
        }
        self.offset += n as u64;
        self.line_number += 1;
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        Ok(true)
    }

    /// Skips the rest of the current line (up to and including its `\n`), without keeping it
    /// (a line may be longer than memory holds); does not count it as a line.
    pub(crate) fn skip_line(&mut self) -> std::io::Result<()> {
        let n = self.reader.skip_until(b'\n')?;
        self.offset += n as u64;
        Ok(())
    }

    /// The underlying reader (to seek it).
    pub(crate) fn get_mut(&mut self) -> &mut R {
        &mut self.reader
    }
}

/// Reads one [`FileSplit`].
struct FileReader<T> {
    lines: LineSplitter<BufReader<File>>,
    split: FileSplit,
    id: String,
    format: FileFormat,
    /// Whether `lines` is at the start of a line the range owns (a range that starts inside a
    /// line first skips it; done at the first read, unless a restored position was sought).
    aligned: bool,
    /// CSV: the header (the file's first non-blank line) and that line's offset, once read;
    /// `Some(None)` when the file has no non-blank line.
    header: Option<Option<(csv::StringRecord, u64)>>,
    line: Vec<u8>,
    /// Offset of the line in `line`.
    line_start: u64,
    decoder: Option<JsonDecoder<T>>,
    line_decoder: Option<LineDecoder<T>>,
    _type: PhantomData<fn() -> T>,
}

impl<T: Data> FileReader<T> {
    fn io_error(&self, e: std::io::Error) -> Error {
        Error::io(format!("cannot read `{}`", self.split.path.display()), e)
    }

    /// Reads one line into `self.line` (without its end); false at the end of the file.
    fn next_line(&mut self) -> Result<bool> {
        self.line_start = self.lines.offset;
        self.lines
            .next_line(&mut self.line)
            .map_err(|e| Error::io(format!("cannot read `{}`", self.split.path.display()), e))
    }

    /// Moves to the first line that starts in the range: the byte after the first `\n` at or
    /// after `start - 1` (so a line starting exactly at `start` is the range's).
    fn align(&mut self) -> Result<()> {
        self.aligned = true;
        let start = self.split.start;
        self.lines.line_number = 0;
        let at = start.saturating_sub(1);
        self.lines
            .get_mut()
            .seek(SeekFrom::Start(at))
            .map_err(|e| self.io_error(e))?;
        self.lines.offset = at;
        if start > 0 {
            self.lines.skip_line().map_err(|e| self.io_error(e))?;
        }
        Ok(())
    }

    /// Reads the CSV header: the first non-blank line of the file, whichever range this is.
    fn read_header(&mut self) -> Result<()> {
        let file = File::open(&self.split.path)
            .map_err(|e| Error::io(format!("cannot open `{}`", self.split.path.display()), e))?;
        let mut lines = LineSplitter::new(BufReader::with_capacity(READ_BUFFER, file));
        let mut line = Vec::new();
        let mut header = None;
        loop {
            let offset = lines.offset;
            if !lines.next_line(&mut line).map_err(|e| self.io_error(e))? {
                break;
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let fields = parse_csv_line(&line).map_err(|e| Error::BadRecord {
                source_name: self.split.path.display().to_string(),
                position: format!("line {}", lines.line_number),
                message: format!("cannot read the CSV header: {e}"),
            })?;
            header = Some((fields, offset));
            break;
        }
        self.header = Some(header);
        Ok(())
    }

    /// Where the current line is, for bad records: its line number when the range starts the
    /// file (the count is known), else its byte offset.
    fn line_position(&self) -> String {
        if self.split.start == 0 {
            format!("line {}", self.lines.line_number)
        } else {
            format!("byte {}", self.line_start)
        }
    }

    /// Decodes the current line.
    fn decode(&mut self, out: &mut SourceOutput<T>) {
        let decoded = match self.format {
            // UTF-8 checked with SIMD (a third of the cost of the standard check on JSON lines);
            // a line that fails it is checked again by the standard library for its message.
            FileFormat::Lines => match simdutf8::basic::from_utf8(&self.line)
                .or_else(|_| std::str::from_utf8(&self.line))
            {
                Ok(text) if let Some(decode) = &self.line_decoder => decode(text),
                Ok(text) => {
                    // `T` is `String` here: the string moves into the record through a slot,
                    // with no box of its own.
                    let mut record: Option<T> = None;
                    let slot: &mut dyn std::any::Any = &mut record;
                    *slot
                        .downcast_mut::<Option<String>>()
                        .expect("`lines` is only built for strings") = Some(text.to_string());
                    Ok(record.expect("set above"))
                }
                Err(e) => Err(format!("not UTF-8: {e}")),
            },
            FileFormat::JsonLines => match self.decoder {
                Some(decode) => decode(&self.line).map_err(|e| e.to_string()),
                None => serde_json::from_slice::<T>(&self.line).map_err(|e| e.to_string()),
            },
            FileFormat::Csv => {
                let Some(Some((header, _))) = &self.header else {
                    unreachable!("a file with a record line has a header");
                };
                parse_csv_line(&self.line).and_then(|fields| {
                    fields
                        .deserialize::<T>(Some(header))
                        .map_err(|e| e.to_string())
                })
            }
        };
        match decoded {
            Ok(value) => out.emit(value),
            Err(error) => out.bad_record(self.line_position(), error, &self.line),
        }
    }
}

fn parse_csv_line(line: &[u8]) -> std::result::Result<csv::StringRecord, String> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(line);
    let mut record = csv::StringRecord::new();
    match reader.read_record(&mut record) {
        Ok(true) => Ok(record),
        Ok(false) => Err("empty line".into()),
        Err(e) => Err(e.to_string()),
    }
}

impl<T: Data> SplitReader<T> for FileReader<T> {
    fn split_id(&self) -> String {
        self.id.clone()
    }

    fn stream(&self) -> Option<String> {
        Some(self.split.path.display().to_string())
    }

    /// A range of a file that was one split (a checkpoint taken before the file was cut, or
    /// with a larger split size) resumes from the whole file's position: [`seek`] reads from
    /// the range's start if the position is before it, from the position if it is inside, and
    /// nothing if it is past the range.
    ///
    /// [`seek`]: SplitReader::seek
    fn former_split_id(&self) -> Option<String> {
        (self.split.start > 0 || self.split.end.is_some())
            .then(|| self.split.path.display().to_string())
    }

    fn read(&mut self, out: &mut SourceOutput<T>, max: usize) -> Result<ReadStatus> {
        if !self.aligned {
            self.align()?;
        }
        if self.format == FileFormat::Csv && self.header.is_none() {
            self.read_header()?;
        }
        let mut read = 0;
        while read < max {
            if self.split.end.is_some_and(|end| self.lines.offset >= end) {
                // The next line starts in the next range.
                return Ok(ReadStatus::Finished);
            }
            if !self.next_line()? {
                return Ok(ReadStatus::Finished);
            }
            if self.line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            if let Some(Some((_, header_at))) = &self.header
                && *header_at == self.line_start
            {
                continue;
            }
            self.decode(out);
            read += 1;
        }
        Ok(ReadStatus::Ready)
    }

    /// `{"offset": the next line's byte offset in the file, "line": lines read in the range}`
    /// (the offset is where the range resumes; the line count numbers bad records).
    fn position(&self) -> serde_json::Value {
        if !self.aligned {
            return serde_json::json!({ "offset": self.split.start, "line": 0 });
        }
        serde_json::json!({ "offset": self.lines.offset, "line": self.lines.line_number })
    }

    fn seek(&mut self, position: &serde_json::Value) -> Result<()> {
        let offset = position["offset"].as_u64();
        let line = position["line"].as_u64();
        let (Some(offset), Some(line)) = (offset, line) else {
            return Err(Error::user(format!("bad file position {position}")));
        };
        if offset <= self.split.start {
            // Nothing of the range read yet: find its first line as a fresh reader does.
            self.aligned = false;
            return Ok(());
        }
        self.lines
            .get_mut()
            .seek(SeekFrom::Start(offset))
            .map_err(|e| self.io_error(e))?;
        self.lines.offset = offset;
        self.lines.line_number = line;
        self.aligned = true;
        Ok(())
    }
}

/// The path's files as the source would read them (exposed for tools that list inputs).
pub fn list_files(path: &Path) -> Result<Vec<PathBuf>> {
    FileSource::<serde_json::Value>::json(path).files()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::Just;
    use serde::Deserialize;

    #[derive(Clone, Debug, PartialEq, serde::Serialize, Deserialize)]
    struct Row {
        id: u64,
        name: String,
    }

    /// The split of a whole file.
    fn whole(path: &Path) -> FileSplit {
        FileSplit {
            path: path.to_path_buf(),
            start: 0,
            end: None,
        }
    }

    /// Reads `split` to its end, `max` records per call.
    fn read_split<T: Data>(
        source: &FileSource<T>,
        split: FileSplit,
        max: usize,
    ) -> SourceOutput<T> {
        let mut reader = source.reader(split).unwrap();
        let mut out = SourceOutput::with_capacity(16);
        while reader.read(&mut out, max).unwrap() != ReadStatus::Finished {}
        out
    }

    fn read_all(source: &FileSource<Row>) -> (Vec<Row>, Vec<String>) {
        let mut rows = Vec::new();
        let mut bad = Vec::new();
        for split in source.splits(1).unwrap() {
            let mut reader = source.reader(split).unwrap();
            let mut out = SourceOutput::with_capacity(10);
            while reader.read(&mut out, 2).unwrap() != ReadStatus::Finished {}
            rows.extend(out.records.drain(..).map(|r| r.value));
            bad.extend(
                out.bad
                    .drain(..)
                    .map(|b| format!("{}: {}", b.position, b.payload)),
            );
        }
        (rows, bad)
    }

    #[test]
    fn json_lines_with_bad_lines_reported_by_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("a.jsonl"),
            "{\"id\":1,\"name\":\"x\"}\n\nnot json\n{\"id\":2,\"name\":\"y\"}\r\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("b.jsonl"), "{\"id\":3,\"name\":\"z\"}").unwrap();
        std::fs::write(dir.path().join(".hidden"), "ignored").unwrap();
        let (rows, bad) = read_all(&FileSource::json(dir.path()));
        assert_eq!(rows.iter().map(|r| r.id).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(bad, vec!["line 3: not json"]);
    }

    #[test]
    fn csv_with_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rows.csv");
        std::fs::write(&path, "name,id\n\"a, quoted\",1\nb,not-a-number\nc,3\n").unwrap();
        let (rows, bad) = read_all(&FileSource::csv(&path));
        assert_eq!(
            rows,
            vec![
                Row {
                    id: 1,
                    name: "a, quoted".into()
                },
                Row {
                    id: 3,
                    name: "c".into()
                }
            ]
        );
        assert_eq!(bad, vec!["line 3: b,not-a-number"]);
    }

    #[test]
    fn raw_lines_keep_their_text_and_reject_invalid_utf8() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raw.txt");
        std::fs::write(&path, b"{\"id\": 1}\n\xff\xfe\nplain\n").unwrap();
        let source = FileSource::lines(&path);
        let mut reader = source.reader(whole(&path)).unwrap();
        let mut out = SourceOutput::with_capacity(10);
        while reader.read(&mut out, 10).unwrap() != ReadStatus::Finished {}
        let lines: Vec<String> = out.records.iter().map(|r| r.value.clone()).collect();
        assert_eq!(lines, vec!["{\"id\": 1}", "plain"]);
        assert_eq!(out.bad.len(), 1);
        assert_eq!(out.bad[0].position, "line 2");
        assert_eq!(
            out.bad[0].error,
            "not UTF-8: invalid utf-8 sequence of 1 bytes from index 0"
        );
    }

    #[test]
    fn lines_decoded_by_a_closure_keep_the_refused_ones_with_their_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("numbers.txt");
        std::fs::write(&path, b"10\n\nx\n\xff\n32\n").unwrap();
        let offset = 100u64;
        let source = FileSource::lines_with(&path, move |line: &str| {
            line.parse::<u64>()
                .map(|n| n + offset)
                .map_err(|e| format!("`{line}`: {e}"))
        });
        let out = read_split(&source, whole(&path), 2);
        let numbers: Vec<u64> = out.records.iter().map(|r| r.value).collect();
        assert_eq!(numbers, vec![110, 132]);
        let bad: Vec<(&str, &str)> = out
            .bad
            .iter()
            .map(|b| (b.position.as_str(), b.error.as_str()))
            .collect();
        assert_eq!(
            bad,
            vec![
                ("line 3", "`x`: invalid digit found in string"),
                (
                    "line 4",
                    "not UTF-8: invalid utf-8 sequence of 1 bytes from index 0"
                ),
            ]
        );
        assert_eq!(out.bad[0].payload, "x", "the line as it was");
    }

    #[test]
    fn a_reader_resumes_at_its_position() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rows.csv");
        std::fs::write(&path, "id,name\n1,a\n2,b\n3,c\n").unwrap();
        let source = FileSource::<Row>::csv(&path);
        let mut reader = source.reader(whole(&path)).unwrap();
        let mut out = SourceOutput::with_capacity(10);
        reader.read(&mut out, 1).unwrap();
        let position = reader.position();
        let mut resumed = source.reader(whole(&path)).unwrap();
        resumed.seek(&position).unwrap();
        let mut out = SourceOutput::with_capacity(10);
        while resumed.read(&mut out, 10).unwrap() != ReadStatus::Finished {}
        assert_eq!(
            out.records.iter().map(|r| r.value.id).collect::<Vec<_>>(),
            vec![2, 3]
        );
    }

    #[test]
    fn a_missing_path_is_a_configuration_error_naming_the_setting() {
        let err = Source::<Row>::validate(
            &FileSource::<Row>::json("/no/such/path").setting_name("--input"),
        )
        .unwrap_err();
        assert!(
            matches!(&err, Error::Config { setting, .. } if setting == "--input"),
            "{err}"
        );
    }

    #[test]
    fn a_directory_is_read_recursively_in_path_order_without_hidden_entries() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let write = |path: &str, id: u64| {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, format!("{{\"id\":{id},\"name\":\"x\"}}\n")).unwrap();
        };
        write("b.jsonl", 2);
        write("a/z.jsonl", 1);
        write("a/deeper/y.jsonl", 0);
        write("c/d.jsonl", 3);
        write(".hidden.jsonl", 100);
        write(".git/objects.jsonl", 101);
        write("c/.tmp/e.jsonl", 102);
        std::fs::create_dir_all(root.join("empty")).unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(root.join("a"), root.join("c/link-to-a")).unwrap();
        let source = FileSource::<Row>::json(root);
        let relative: Vec<String> = source
            .files()
            .unwrap()
            .iter()
            .map(|p| p.strip_prefix(root).unwrap().display().to_string())
            .collect();
        // `c/link-to-a` leads to `a`, read already: a directory is read once.
        assert_eq!(
            relative,
            ["a/deeper/y.jsonl", "a/z.jsonl", "b.jsonl", "c/d.jsonl"]
        );
        let (rows, bad) = read_all(&source);
        assert_eq!(
            rows.iter().map(|r| r.id).collect::<Vec<_>>(),
            vec![0, 1, 2, 3]
        );
        assert!(bad.is_empty());
        assert_eq!(list_files(root).unwrap().len(), 4);
    }

    #[test]
    fn lines_end_at_lf_with_one_optional_cr() {
        let input = b"a\r\n\r\nb\r\r\nc\rd\n\ne";
        let mut splitter = LineSplitter::new(&input[..]);
        let mut line = Vec::new();
        let mut lines = Vec::new();
        let mut offsets = Vec::new();
        while splitter.next_line(&mut line).unwrap() {
            lines.push(String::from_utf8(line.clone()).unwrap());
            offsets.push(splitter.offset);
        }
        assert_eq!(lines, ["a", "", "b\r", "c\rd", "", "e"]);
        assert_eq!(offsets, [3, 5, 9, 13, 14, 15]);
        assert_eq!(splitter.line_number, 6);
    }

    /// A reader that hands out at most `chunk` bytes per call: lines cross buffer boundaries.
    struct Chunked<'a> {
        data: &'a [u8],
        chunk: usize,
    }

    impl std::io::Read for Chunked<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.chunk.min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    /// The lines of `input` by the rule (reference, written differently from the splitter).
    fn expected_lines(input: &[u8]) -> Vec<Vec<u8>> {
        if input.is_empty() {
            return Vec::new();
        }
        let body = input.strip_suffix(b"\n").unwrap_or(input);
        body.split(|&b| b == b'\n')
            .map(|line| line.strip_suffix(b"\r").unwrap_or(line).to_vec())
            .collect()
    }

    proptest::proptest! {
        #![proptest_config(crate::util::fuzz_config(256))]

        /// Arbitrary bytes (CR, LF and UTF-8 fragments likely), any buffer and chunk size: the
        /// lines come out as the rule says, offsets add up to the input, and resuming at any
        /// line's offset gives the remaining lines.
        #[test]
        fn the_line_splitter_reassembles_any_input(
            input in proptest::collection::vec(
                proptest::prop_oneof![
                    Just(b'\n'), Just(b'\r'), Just(b'{'), Just(0xffu8), proptest::num::u8::ANY
                ],
                0..400,
            ),
            capacity in 1usize..64,
            chunk in 1usize..64,
            resume_at in 0usize..50,
        ) {
            let mut splitter = LineSplitter::new(BufReader::with_capacity(
                capacity,
                Chunked { data: &input, chunk },
            ));
            let mut line = Vec::new();
            let mut lines = Vec::new();
            let mut starts = vec![0u64];
            while splitter.next_line(&mut line).unwrap() {
                lines.push(line.clone());
                starts.push(splitter.offset);
            }
            proptest::prop_assert_eq!(&lines, &expected_lines(&input));
            proptest::prop_assert_eq!(splitter.offset, input.len() as u64);
            proptest::prop_assert_eq!(splitter.line_number, lines.len() as u64);
            let k = resume_at % starts.len();
            let mut resumed = LineSplitter::new(&input[starts[k] as usize..]);
            let mut rest = Vec::new();
            while resumed.next_line(&mut line).unwrap() {
                rest.push(line.clone());
            }
            proptest::prop_assert_eq!(&rest[..], &lines[k..]);
        }

        /// Arbitrary bytes as a JSON-lines file: no panic, every non-blank line is a record or
        /// a bad record (nothing lost), and bad records carry their line.
        #[test]
        fn the_file_reader_accounts_for_every_line(
            input in proptest::collection::vec(
                proptest::prop_oneof![
                    Just(b'\n'), Just(b'\r'), Just(b' '), proptest::num::u8::ANY
                ],
                0..300,
            ),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("fuzz.jsonl");
            std::fs::write(&path, &input).unwrap();
            let source = FileSource::<Row>::json(&path);
            let mut reader = source.reader(whole(&path)).unwrap();
            let mut out = SourceOutput::with_capacity(16);
            while reader.read(&mut out, 7).unwrap() != ReadStatus::Finished {}
            let non_blank = expected_lines(&input)
                .iter()
                .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
                .count();
            proptest::prop_assert_eq!(out.records.len() + out.bad.len(), non_blank);
        }
    }
    #[test]
    fn a_file_is_cut_into_ranges_that_do_not_depend_on_the_parallelism() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rows.jsonl");
        std::fs::write(&path, vec![b'\n'; 250]).unwrap();
        std::fs::write(dir.path().join("empty.jsonl"), "").unwrap();
        let source = FileSource::<Row>::json(dir.path()).split_size(100);
        let ids = |p| {
            source
                .splits(p)
                .unwrap()
                .iter()
                .map(|s| {
                    s.id()
                        .strip_prefix(&*dir.path().display().to_string())
                        .unwrap()
                        .to_string()
                })
                .collect::<Vec<_>>()
        };
        // A file of one range keeps the path as its id (the id of whole-file splits before).
        let expected = [
            "/empty.jsonl",
            "/rows.jsonl@0-100",
            "/rows.jsonl@100-200",
            "/rows.jsonl@200-",
        ];
        assert_eq!(ids(1), expected);
        assert_eq!(ids(3), expected);
        // By default: 32 ranges of 1 MiB to 64 MiB.
        let default = FileSource::<Row>::json(&path);
        assert_eq!(default.range_size(0), 1 << 20);
        assert_eq!(default.range_size(5 << 20), 1 << 20);
        assert_eq!(default.range_size(100 << 20), (100 << 20) / 32);
        assert_eq!(default.range_size(10 << 30), 64 << 20);
        assert_eq!(default.splits(2).unwrap(), vec![whole(&path)]);
        let err = Source::<Row>::validate(&default.split_size(0)).unwrap_err();
        assert!(
            matches!(&err, Error::Config { setting, .. } if setting == "split_size"),
            "{err}"
        );
    }

    #[test]
    fn every_range_of_a_csv_file_knows_its_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rows.csv");
        let mut text = String::from("\n  \nname,id\n");
        for id in 0..40 {
            text.push_str(&format!("n{id},{id}\n"));
        }
        text.push_str("bad,x\n");
        std::fs::write(&path, &text).unwrap();
        let source = FileSource::<Row>::csv(&path).split_size(7);
        let splits = source.splits(2).unwrap();
        assert!(splits.len() > 20);
        let mut ids = Vec::new();
        let mut bad = Vec::new();
        for split in splits {
            let mut out = read_split(&source, split, 3);
            ids.extend(out.records.drain(..).map(|r| r.value.id));
            bad.extend(out.bad.drain(..).map(|b| (b.position, b.payload)));
        }
        assert_eq!(ids, (0..40).collect::<Vec<_>>());
        let offset = text.find("bad,x").unwrap();
        assert_eq!(bad, vec![(format!("byte {offset}"), "bad,x".to_string())]);
    }

    #[test]
    fn a_range_that_starts_inside_a_line_longer_than_it_reads_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lines.txt");
        let long = "x".repeat(50);
        std::fs::write(&path, format!("a\n{long}\nb\r\nc")).unwrap();
        let source = FileSource::lines(&path);
        let range = |start, end| FileSplit {
            path: path.clone(),
            start,
            end,
        };
        let lines = |split| {
            read_split(&source, split, 10)
                .records
                .into_iter()
                .map(|r| r.value)
                .collect::<Vec<String>>()
        };
        // The long line starts at 2 and ends at 52 (its `\n`): [0, 3) reads it to its end.
        assert_eq!(lines(range(0, Some(3))), ["a", long.as_str()]);
        assert!(lines(range(3, Some(20))).is_empty());
        assert!(lines(range(20, Some(52))).is_empty());
        // A line starting exactly at a range's start is that range's.
        assert_eq!(lines(range(53, Some(54))), ["b"]);
        assert_eq!(lines(range(52, Some(53))), Vec::<String>::new());
        assert_eq!(lines(range(54, None)), ["c"]);
    }

    /// `(content, ending)` lines as bytes: contents of any length (some longer than a range),
    /// blank and whitespace-only ones among them, LF or CRLF endings, maybe none at the end.
    fn file_bytes(lines: &[(String, bool)], final_newline: bool) -> Vec<u8> {
        let mut bytes = Vec::new();
        for (i, (content, crlf)) in lines.iter().enumerate() {
            bytes.extend_from_slice(content.as_bytes());
            if i + 1 < lines.len() || final_newline {
                bytes.extend_from_slice(if *crlf { b"\r\n" } else { b"\n" });
            }
        }
        bytes
    }

    proptest::proptest! {
        #![proptest_config(crate::util::fuzz_config(256))]

        /// Random lines, random range boundaries, random read sizes, and a checkpoint taken at
        /// a random point of every range and resumed by a new reader: every non-blank line
        /// comes out exactly once, in file order.
        #[test]
        fn ranges_read_every_line_once_in_order(
            lines in proptest::collection::vec(
                (
                    proptest::prop_oneof![
                        8 => "[a-z{}\" ]{0,12}",
                        1 => "[ \t\r]{0,3}",
                        1 => "[a-z]{40,120}",
                    ],
                    proptest::bool::ANY,
                ),
                0..40,
            ),
            final_newline in proptest::bool::ANY,
            cuts in proptest::collection::vec(0.0f64..1.0, 0..12),
            max in 1usize..5,
            resume_after in 0usize..6,
        ) {
            let bytes = file_bytes(&lines, final_newline);
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("lines.txt");
            std::fs::write(&path, &bytes).unwrap();
            let mut bounds: Vec<u64> = cuts
                .iter()
                .map(|c| (c * bytes.len() as f64) as u64)
                .filter(|&c| c > 0)
                .collect();
            bounds.sort_unstable();
            bounds.dedup();
            let mut starts = vec![0];
            starts.extend(&bounds);
            let source = FileSource::lines(&path);
            let mut read = Vec::new();
            for (i, &start) in starts.iter().enumerate() {
                let split = FileSplit { path: path.clone(), start, end: starts.get(i + 1).copied() };
                let mut reader = source.reader(split.clone()).unwrap();
                let mut out = SourceOutput::with_capacity(16);
                let mut calls = 0;
                let mut finished = false;
                while calls < resume_after && !finished {
                    finished = reader.read(&mut out, max).unwrap() == ReadStatus::Finished;
                    calls += 1;
                }
                // A checkpoint here, and a new reader that resumes from it.
                let position = reader.position();
                let mut resumed = source.reader(split).unwrap();
                resumed.seek(&position).unwrap();
                while resumed.read(&mut out, max).unwrap() != ReadStatus::Finished {}
                proptest::prop_assert!(out.bad.is_empty());
                read.extend(out.records.drain(..).map(|r| r.value));
            }
            let expected: Vec<String> = expected_lines(&bytes)
                .into_iter()
                .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
                .map(|l| String::from_utf8(l).unwrap())
                .collect();
            proptest::prop_assert_eq!(read, expected);
        }
    }
}
