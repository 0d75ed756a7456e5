//! DuckDB and the `deltalake` Python package as independent readers of the files and tables
//! Riffle's lake sinks write (`scripts/test.sh` installs both into `.tools/venv` and exports
//! `RIFFLE_PYTHON`, the Python that has them).
//!
//! ```no_run
//! let dir = std::path::Path::new("/tmp/out");
//! let files = riffle_testing::duckdb::committed_files(dir);
//! let source = riffle_testing::duckdb::read_parquet(&files, true);
//! let rows = riffle_testing::duckdb::query(&format!("SELECT count(*) FROM {source}"));
//! assert_eq!(rows, ["42"]);
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `sql` in a fresh in-memory DuckDB (time zone UTC); its rows as lines of
/// `|`-separated values (`NULL` for null, Python's `str` of the others). Panics, with DuckDB's
/// error, when the query fails.
pub fn query(sql: &str) -> Vec<String> {
    let python = std::env::var("RIFFLE_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = "import duckdb, sys\n\
                  con = duckdb.connect()\n\
                  con.execute(\"SET TimeZone = 'UTC'\")\n\
                  for row in con.sql(sys.argv[1]).fetchall():\n    \
                      print('|'.join('NULL' if v is None else str(v) for v in row))\n";
    let output = Command::new(&python)
        .args(["-c", script, sql])
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {python} (scripts/test.sh sets RIFFLE_PYTHON): {e}")
        });
    assert!(
        output.status.success(),
        "duckdb failed on {sql}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("UTF-8 from DuckDB")
        .lines()
        .map(str::to_string)
        .collect()
}

/// The committed part files under `dir`, as a Hive-style reader lists them: no directory or
/// file whose name starts with `.` (in-progress files) or `_` (a table's log), sorted.
pub fn committed_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if name.starts_with('.') || name.starts_with('_') {
                continue;
            }
            match entry.path().is_dir() {
                true => dirs.push(entry.path()),
                false => files.push(entry.path()),
            }
        }
    }
    files.sort();
    files
}

/// DuckDB's `read_parquet` over `files` (with a `filename` column), with the `key=value`
/// directories of their paths as columns when `hive`.
pub fn read_parquet(files: &[PathBuf], hive: bool) -> String {
    let list: Vec<String> = files
        .iter()
        .map(|f| format!("'{}'", f.display().to_string().replace('\'', "''")))
        .collect();
    format!(
        "read_parquet([{}], filename = true, hive_partitioning = {hive})",
        list.join(", ")
    )
}

/// What the `deltalake` package reads of the table at `dir`: its version, the files of its
/// current snapshot, each write's `riffle.checkpoint-id` (oldest first), and each file's
/// directory with its partition value `k` from the log (`k=1 1`).
#[derive(Debug)]
pub struct DeltaLog {
    /// The table's version.
    pub version: i64,
    /// The files of its current snapshot.
    pub files: Vec<PathBuf>,
    /// Each write's `riffle.checkpoint-id` (`None` when it has none), oldest first.
    pub checkpoint_ids: Vec<String>,
    /// Each file's first directory and the log's value of its partition column `k`.
    pub partition_values: Vec<String>,
}

/// Reads the Delta table at `dir` with the `deltalake` package; panics with its error when
/// it cannot.
pub fn delta_log(dir: &Path) -> DeltaLog {
    let python = std::env::var("RIFFLE_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = r#"
import sys
from deltalake import DeltaTable
dt = DeltaTable(sys.argv[1])
print("version", dt.version())
for uri in dt.file_uris():
    print("file", uri.removeprefix("file://"))
for commit in reversed(dt.history()):
    if commit.get("operation") == "WRITE":
        print("checkpoint", commit.get("riffle.checkpoint-id"))
adds = dt.get_add_actions(flatten=True)
if "partition.k" in adds.column_names:
    for path, k in zip(adds.column("path").to_pylist(), adds.column("partition.k").to_pylist()):
        print("partition", path.split("/")[0], k)
"#;
    let output = Command::new(&python)
        .args(["-c", script, &dir.display().to_string()])
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {python} (scripts/test.sh sets RIFFLE_PYTHON): {e}")
        });
    assert!(
        output.status.success(),
        "deltalake failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut log = DeltaLog {
        version: -1,
        files: Vec::new(),
        checkpoint_ids: Vec::new(),
        partition_values: Vec::new(),
    };
    for line in String::from_utf8(output.stdout).unwrap().lines() {
        let (kind, rest) = line.split_once(' ').unwrap();
        match kind {
            "version" => log.version = rest.parse().unwrap(),
            "file" => log.files.push(rest.into()),
            "checkpoint" => log.checkpoint_ids.push(rest.into()),
            "partition" => log.partition_values.push(rest.into()),
            other => panic!("{other}"),
        }
    }
    log
}
