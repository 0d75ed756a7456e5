//! Delta tables written by Riffle jobs, read back by independent readers: the `deltalake`
//! Python package (delta-rs's reader, from PyPI) for the table's log, DuckDB for the rows of
//! the files the log names (`scripts/test.sh` installs both into `.tools/venv`).

use std::path::Path;
use std::time::Duration;

use riffle::StreamEnv;
use riffle::source::datagen::{DatagenSource, Generator};
use riffle_delta::DeltaSink;
use riffle_parquet::{Cell, Column, ColumnType, ParquetFormat};
use riffle_testing::duckdb::{delta_log as read_log, query as duckdb, read_parquet};

/// Record `i`: `(i, i % 4)`, in the partition `k=<i % 4>`.
struct Keyed;

impl Generator for Keyed {
    type Item = (i64, i64);
    fn generate(&self, index: u64) -> (i64, i64) {
        (index as i64, (index % 4) as i64)
    }
}

fn sink(dir: &Path) -> DeltaSink<(i64, i64)> {
    let format = ParquetFormat::new(
        vec![
            Column::new("id", ColumnType::Int64).required(),
            Column::new("ts", ColumnType::TimestampMicros { utc: true }),
        ],
        |(id, _): &(i64, i64), row| {
            row.push(Cell::Int(*id))?;
            row.push(Cell::Int(1_768_436_280_400_000 + id))
        },
    )
    .unwrap();
    DeltaSink::new(dir, format).partitioned_by(
        vec![Column::new("k", ColumnType::Int32)],
        |(_, k): &(i64, i64)| vec![Some(k.to_string())],
    )
}

#[test]
fn one_commit_per_checkpoint_exactly_once_across_a_task_failure() {
    // 4 000 records paced over ~2 s, checkpoints every 100 ms, a task failure after 2 500:
    // the commits of completed checkpoints stay, the rest is written again after the restore.
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("table");
    let env = StreamEnv::with_config(riffle_testing::checkpointed(
        dir.path(),
        2,
        Duration::from_millis(100),
    ));
    env.from_source(DatagenSource::new(Keyed).count(4_000).rate(2_000.0))
        .map(riffle::testing::fail_once_after(2_500))
        .sink(sink(&table))
        .set_parallelism(1);
    let result = env.execute().unwrap();
    assert_eq!(result.restarts, 1);
    let completed = result.completed_checkpoints();
    assert!(completed > 0);

    let log = read_log(&table);
    // Version 0 creates the table; each later one is one checkpoint's files (or the end's).
    assert!(log.version >= 2, "{}", log.version);
    assert_eq!(log.checkpoint_ids.len() as i64, log.version);
    // Each commit names its checkpoint, each checkpoint committed once and in order; the last
    // commit is the end of the input (no checkpoint).
    let (last, ids) = log.checkpoint_ids.split_last().unwrap();
    assert_eq!(last, "None");
    let ids: Vec<u64> = ids.iter().map(|id| id.parse().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    assert_eq!(log.partition_values.len(), log.files.len());
    for line in &log.partition_values {
        let (directory, value) = line.split_once(' ').unwrap();
        assert_eq!(
            directory,
            format!("k={value}"),
            "the log's partition values"
        );
    }
    let source = read_parquet(&log.files, true);
    assert_eq!(
        duckdb(&format!(
            "SELECT count(*), count(DISTINCT id), sum(id), min(id), max(id),
                    count(*) FILTER (WHERE k <> id % 4),
                    count(*) FILTER (WHERE epoch_us(ts) <> 1768436280400000 + id)
             FROM {source}"
        )),
        ["4000|4000|7998000|0|3999|0|0"],
        "every record once, in its partition"
    );
}

#[test]
fn a_table_of_other_columns_is_refused_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("table");
    let env = StreamEnv::new();
    env.from_iter(vec![(1i64, 1i64)]).sink(sink(&table));
    env.execute().unwrap();
    assert_eq!(read_log(&table).version, 1);

    let other = ParquetFormat::new(
        vec![Column::new("name", ColumnType::String)],
        |_: &(i64, i64), row| row.push(Cell::Null),
    )
    .unwrap();
    let env = StreamEnv::new();
    env.from_iter(vec![(1i64, 1i64)])
        .sink(DeltaSink::new(&table, other));
    let e = env.execute().unwrap_err().to_string();
    assert!(e.contains("table-path") && e.contains("name"), "{e}");
}
