//! The file source: newline-delimited JSON, CSV with a header, or raw lines, from one file or
//! every file of a directory tree (one split per file). Bounded; a position is a byte offset, so a
//! checkpoint can resume a file where it stopped.
//!
//! A directory is read recursively: every file under it, subdirectories included, in path order
//! (deterministic: the same tree gives the same splits). Entries whose name starts with `.`
//! (hidden files and directories, editors' temporary files) are skipped; symbolic links are
//! followed, a directory reached twice (a link cycle) is read once.
//!
//! Lines end at `\n`; one `\r` before it (CRLF) is not part of the line; the last line needs no
//! end. Lines of whitespace only are skipped.

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::record::Data;
use crate::source::{BadRecordPolicy, Boundedness, ReadStatus, Source, SourceOutput, SplitReader};

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
    decoder: Option<fn(&[u8]) -> serde_json::Result<T>>,
    _type: PhantomData<fn() -> T>,
}

impl<T> FileSource<T> {
    /// Newline-delimited JSON from `path` (a file, or a directory of files).
    pub fn json(path: impl Into<PathBuf>) -> Self {
        FileSource::new(path.into(), FileFormat::JsonLines)
    }

    /// Newline-delimited JSON from `path`, each line decoded by `decoder` (one that knows the
    /// schema, e.g. `riffle_clicks::Click::from_json`) instead of the derived `Deserialize`; a
    /// line it refuses is a bad record with its error's text.
    pub fn json_with(
        path: impl Into<PathBuf>,
        decoder: fn(&[u8]) -> serde_json::Result<T>,
    ) -> Self {
        let mut source = FileSource::new(path.into(), FileFormat::JsonLines);
        source.decoder = Some(decoder);
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
            decoder: None,
            _type: PhantomData,
        }
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
    type Split = PathBuf;

    fn name(&self) -> String {
        format!("file {}", self.path.display())
    }

    fn boundedness(&self) -> Boundedness {
        Boundedness::Bounded
    }

    fn validate(&self) -> Result<()> {
        for file in self.files()? {
            File::open(&file)
                .map_err(|e| Error::config(&self.setting, format!("`{}`: {e}", file.display())))?;
        }
        Ok(())
    }

    fn splits(&self, _parallelism: usize) -> Result<Vec<PathBuf>> {
        self.files()
    }

    fn reader(&self, path: PathBuf) -> Result<Box<dyn SplitReader<T>>> {
        let file = File::open(&path)
            .map_err(|e| Error::io(format!("cannot open `{}`", path.display()), e))?;
        Ok(Box::new(FileReader {
            lines: LineSplitter::new(BufReader::with_capacity(1 << 16, file)),
            path,
            format: self.format,
            header: None,
            line: Vec::with_capacity(256),
            decoder: self.decoder,
            _type: PhantomData,
        }))
    }

    fn bad_record_policy(&self) -> BadRecordPolicy {
        self.policy
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
        let n = self.reader.read_until(b'\n', line)?;
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

    /// The underlying reader (to seek it).
    pub(crate) fn get_mut(&mut self) -> &mut R {
        &mut self.reader
    }
}

struct FileReader<T> {
    lines: LineSplitter<BufReader<File>>,
    path: PathBuf,
    format: FileFormat,
    /// The CSV header, once read.
    header: Option<csv::StringRecord>,
    line: Vec<u8>,
    decoder: Option<fn(&[u8]) -> serde_json::Result<T>>,
    _type: PhantomData<fn() -> T>,
}

impl<T: Data> FileReader<T> {
    fn io_error(&self, e: std::io::Error) -> Error {
        Error::io(format!("cannot read `{}`", self.path.display()), e)
    }

    /// Reads one line into `self.line` (without its end); false at the end of the file.
    fn next_line(&mut self) -> Result<bool> {
        self.lines
            .next_line(&mut self.line)
            .map_err(|e| Error::io(format!("cannot read `{}`", self.path.display()), e))
    }

    /// Decodes the current line; false if it was a CSV header rather than a record.
    fn decode(&mut self, out: &mut SourceOutput<T>) -> Result<bool> {
        let decoded = match self.format {
            FileFormat::Lines => match std::str::from_utf8(&self.line) {
                Ok(text) => {
                    let text: Box<dyn std::any::Any> = Box::new(text.to_string());
                    Ok(*text
                        .downcast::<T>()
                        .expect("`lines` is only built for strings"))
                }
                Err(e) => Err(format!("not UTF-8: {e}")),
            },
            FileFormat::JsonLines => match self.decoder {
                Some(decode) => decode(&self.line).map_err(|e| e.to_string()),
                None => serde_json::from_slice::<T>(&self.line).map_err(|e| e.to_string()),
            },
            FileFormat::Csv => {
                let Some(header) = &self.header else {
                    self.header =
                        Some(parse_csv_line(&self.line).map_err(|e| Error::BadRecord {
                            source_name: self.path.display().to_string(),
                            position: "line 1".into(),
                            message: format!("cannot read the CSV header: {e}"),
                        })?);
                    return Ok(false);
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
            Err(error) => out.bad_record(
                format!("line {}", self.lines.line_number),
                error,
                &self.line,
            ),
        }
        Ok(true)
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
        self.path.display().to_string()
    }

    fn read(&mut self, out: &mut SourceOutput<T>, max: usize) -> Result<ReadStatus> {
        let mut read = 0;
        while read < max {
            if !self.next_line()? {
                return Ok(ReadStatus::Finished);
            }
            if self.line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            if self.decode(out)? {
                read += 1;
            }
        }
        Ok(ReadStatus::Ready)
    }

    fn position(&self) -> serde_json::Value {
        serde_json::json!({ "offset": self.lines.offset, "line": self.lines.line_number })
    }

    fn seek(&mut self, position: &serde_json::Value) -> Result<()> {
        let offset = position["offset"].as_u64();
        let line = position["line"].as_u64();
        let (Some(offset), Some(line)) = (offset, line) else {
            return Err(Error::user(format!("bad file position {position}")));
        };
        if self.format == FileFormat::Csv && self.header.is_none() && offset > 0 {
            // The header is needed to decode what follows: read it again first.
            self.lines
                .get_mut()
                .seek(SeekFrom::Start(0))
                .map_err(|e| self.io_error(e))?;
            self.lines.offset = 0;
            self.lines.line_number = 0;
            if self.next_line()? {
                let mut ignored = SourceOutput::with_capacity(0);
                self.decode(&mut ignored)?;
            }
        }
        self.lines
            .get_mut()
            .seek(SeekFrom::Start(offset))
            .map_err(|e| self.io_error(e))?;
        self.lines.offset = offset;
        self.lines.line_number = line;
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
        let mut reader = source.reader(path).unwrap();
        let mut out = SourceOutput::with_capacity(10);
        while reader.read(&mut out, 10).unwrap() != ReadStatus::Finished {}
        let lines: Vec<String> = out.records.iter().map(|r| r.value.clone()).collect();
        assert_eq!(lines, vec!["{\"id\": 1}", "plain"]);
        assert_eq!(out.bad.len(), 1);
        assert_eq!(out.bad[0].position, "line 2");
    }

    #[test]
    fn a_reader_resumes_at_its_position() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rows.csv");
        std::fs::write(&path, "id,name\n1,a\n2,b\n3,c\n").unwrap();
        let source = FileSource::<Row>::csv(&path);
        let mut reader = source.reader(path.clone()).unwrap();
        let mut out = SourceOutput::with_capacity(10);
        reader.read(&mut out, 1).unwrap();
        let position = reader.position();
        let mut resumed = source.reader(path).unwrap();
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
            let mut reader = source.reader(path).unwrap();
            let mut out = SourceOutput::with_capacity(16);
            while reader.read(&mut out, 7).unwrap() != ReadStatus::Finished {}
            let non_blank = expected_lines(&input)
                .iter()
                .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
                .count();
            proptest::prop_assert_eq!(out.records.len() + out.bad.len(), non_blank);
        }
    }
}
