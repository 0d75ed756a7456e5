//! Parquet part files written by Riffle jobs and read back by an independent reader, DuckDB
//! (`scripts/test.sh` installs it into `.tools/venv` and exports `RIFFLE_PYTHON`): every column
//! type at the edges of its range, and exactly-once output across a task failure.

use std::time::Duration;

use riffle::StreamEnv;
use riffle::source::datagen::{DatagenSource, Generator};
use riffle_parquet::{Cell, Column, ColumnType, ParquetFormat};
use riffle_testing::duckdb::{committed_files, query as duckdb, read_parquet};

/// A record with a column of every type.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Everything {
    id: i64,
    flag: Option<bool>,
    tiny: i64,
    small: i64,
    int: i64,
    big: i64,
    float: f64,
    double: f64,
    text: Option<String>,
    bytes: Vec<u8>,
    date: i32,
    ts: i64,
    ltz: i64,
    dec9: i128,
    dec18: i128,
    dec38: Option<i128>,
}

fn everything_format() -> ParquetFormat<Everything> {
    let decimal = |precision, scale| ColumnType::Decimal { precision, scale };
    ParquetFormat::new(
        vec![
            Column::new("id", ColumnType::Int64).required(),
            Column::new("flag", ColumnType::Boolean),
            Column::new("tiny", ColumnType::Int8),
            Column::new("small", ColumnType::Int16),
            Column::new("int", ColumnType::Int32),
            Column::new("big", ColumnType::Int64),
            Column::new("float", ColumnType::Float),
            Column::new("double", ColumnType::Double),
            Column::new("text", ColumnType::String),
            Column::new("bytes", ColumnType::Binary),
            Column::new("date", ColumnType::Date),
            Column::new("ts", ColumnType::TimestampMillis { utc: false }),
            Column::new("ltz", ColumnType::TimestampMillis { utc: true }),
            Column::new("dec9", decimal(9, 2)),
            Column::new("dec18", decimal(18, 4)),
            Column::new("dec38", decimal(38, 10)),
        ],
        |e: &Everything, row| {
            row.push(Cell::Int(e.id))?;
            row.push(e.flag.map_or(Cell::Null, Cell::Bool))?;
            row.push(Cell::Int(e.tiny))?;
            row.push(Cell::Int(e.small))?;
            row.push(Cell::Int(e.int))?;
            row.push(Cell::Int(e.big))?;
            row.push(Cell::Float(e.float))?;
            row.push(Cell::Float(e.double))?;
            row.push(e.text.as_deref().map_or(Cell::Null, Cell::Str))?;
            row.push(Cell::Bytes(&e.bytes))?;
            row.push(Cell::Int(e.date.into()))?;
            row.push(Cell::Int(e.ts))?;
            row.push(Cell::Int(e.ltz))?;
            row.push(Cell::Decimal(e.dec9))?;
            row.push(Cell::Decimal(e.dec18))?;
            row.push(e.dec38.map_or(Cell::Null, Cell::Decimal))
        },
    )
    .unwrap()
}

#[test]
fn every_column_type_reads_back_in_duckdb_at_the_edges_of_its_range() {
    let max38 = 10i128.pow(38) - 1;
    let records = vec![
        Everything {
            id: 0,
            flag: Some(false),
            tiny: i8::MIN.into(),
            small: i16::MIN.into(),
            int: i32::MIN.into(),
            big: i64::MIN,
            float: -1.5,
            double: -2.5e300,
            text: Some(String::new()),
            bytes: vec![],
            // 0001-01-01, and its first millisecond.
            date: -719_162,
            ts: -62_135_596_800_000,
            ltz: -1,
            dec9: -999_999_999,
            dec18: -(10i128.pow(18) - 1),
            dec38: Some(-max38),
        },
        Everything {
            id: 1,
            flag: Some(true),
            tiny: i8::MAX.into(),
            small: i16::MAX.into(),
            int: i32::MAX.into(),
            big: i64::MAX,
            float: 0.25,
            double: 1e-300,
            text: Some("héllo, \"wörld\" ☃ 𝄞".into()),
            bytes: vec![0, 255, 10],
            // 9999-12-31, and its last millisecond.
            date: 2_932_896,
            ts: 253_402_300_799_999,
            ltz: 1_768_436_280_400,
            dec9: 999_999_999,
            dec18: 1,
            dec38: Some(max38),
        },
        Everything {
            id: 2,
            flag: None,
            tiny: 0,
            small: 0,
            int: 0,
            big: 0,
            float: 0.0,
            double: 0.0,
            text: None,
            bytes: b"x".to_vec(),
            date: 0,
            ts: 0,
            ltz: 0,
            dec9: 0,
            dec18: -5,
            dec38: None,
        },
    ];
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let env = StreamEnv::new();
    env.from_iter(records)
        .sink(everything_format().sink(&out, |e: &Everything| format!("half={}", e.id % 2)));
    env.execute().unwrap();

    let files = committed_files(&out);
    assert!(!files.is_empty());
    assert!(files.iter().all(|f| f.extension().unwrap() == "parquet"));
    let source = read_parquet(&files, true);
    let types = duckdb(&format!(
        "SELECT column_name || ' ' || column_type FROM (DESCRIBE SELECT * EXCLUDE (filename) FROM {source})"
    ));
    assert_eq!(
        types,
        [
            "id BIGINT",
            "flag BOOLEAN",
            "tiny TINYINT",
            "small SMALLINT",
            "int INTEGER",
            "big BIGINT",
            "float FLOAT",
            "double DOUBLE",
            "text VARCHAR",
            "bytes BLOB",
            "date DATE",
            "ts TIMESTAMP",
            "ltz TIMESTAMP WITH TIME ZONE",
            "dec9 DECIMAL(9,2)",
            "dec18 DECIMAL(18,4)",
            "dec38 DECIMAL(38,10)",
            // The partition, from the directory `half=0`.
            "half BIGINT",
        ]
    );
    let rows = duckdb(&format!(
        "SELECT id, flag, tiny, small, int, big, float, double, text, hex(bytes), date::VARCHAR, \
         ts::VARCHAR, ltz::VARCHAR, dec9::VARCHAR, dec18::VARCHAR, dec38::VARCHAR, \
         half FROM {source} ORDER BY id"
    ));
    assert_eq!(
        rows,
        [
            "0|False|-128|-32768|-2147483648|-9223372036854775808|-1.5|-2.5e+300||\
             |0001-01-01|0001-01-01 00:00:00|1969-12-31 23:59:59.999+00|-9999999.99\
             |-99999999999999.9999|-9999999999999999999999999999.9999999999|0",
            "1|True|127|32767|2147483647|9223372036854775807|0.25|1e-300|héllo, \"wörld\" ☃ 𝄞\
             |00FF0A|9999-12-31|9999-12-31 23:59:59.999|2026-01-15 00:18:00.4+00|9999999.99\
             |0.0001|9999999999999999999999999999.9999999999|1",
            "2|NULL|0|0|0|0|0.0|0.0|NULL|78|1970-01-01|1970-01-01 00:00:00\
             |1970-01-01 00:00:00+00|0.00|-0.0005|NULL|0",
        ]
    );
}

#[test]
fn a_value_a_column_cannot_hold_fails_the_job_naming_the_column() {
    let format = ParquetFormat::new(
        vec![
            Column::new("id", ColumnType::Int64).required(),
            Column::new("small", ColumnType::Int16),
        ],
        |(id, small): &(i64, i64), row| {
            row.push(Cell::Int(*id))?;
            row.push(Cell::Int(*small))
        },
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::new();
    env.from_iter(vec![(1i64, 7i64), (2, 40_000)])
        .sink(format.sink(dir.path().join("out"), |_| String::new()));
    let e = env.execute().unwrap_err().to_string();
    assert!(e.contains("column `small`") && e.contains("40000"), "{e}");
}

/// Record `i`: `(i, i % 4)`, written into the partition `k=<i % 4>`.
struct Keyed;

impl Generator for Keyed {
    type Item = (i64, i64);
    fn generate(&self, index: u64) -> (i64, i64) {
        (index as i64, (index % 4) as i64)
    }
}

#[test]
fn part_files_are_exactly_once_across_a_task_failure() {
    // 4 000 records paced over ~2 s, checkpoints every 100 ms, a task failure after 2 500:
    // the files of completed checkpoints stay, the rest is aborted and written again.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let env = StreamEnv::with_config(riffle_testing::checkpointed(
        dir.path(),
        2,
        Duration::from_millis(100),
    ));
    let format = ParquetFormat::new(
        vec![
            Column::new("id", ColumnType::Int64).required(),
            Column::new("k", ColumnType::Int32).required(),
        ],
        |(id, k): &(i64, i64), row| {
            row.push(Cell::Int(*id))?;
            row.push(Cell::Int(*k))
        },
    )
    .unwrap();
    env.from_source(DatagenSource::new(Keyed).count(4_000).rate(2_000.0))
        .map(riffle::testing::fail_once_after(2_500))
        .sink(format.sink(&out, |(_, k): &(i64, i64)| format!("k={k}")));
    let result = env.execute().unwrap();
    assert_eq!(result.restarts, 1);
    assert!(result.completed_checkpoints() > 0);

    let files = committed_files(&out);
    assert!(
        files.len() > 4,
        "files roll at checkpoints: {} files",
        files.len()
    );
    let source = read_parquet(&files, false);
    assert_eq!(
        duckdb(&format!(
            "SELECT count(*), count(DISTINCT id), sum(id), min(id), max(id) FROM {source}"
        )),
        ["4000|4000|7998000|0|3999"],
        "every record once: none lost, none twice"
    );
    assert_eq!(
        duckdb(&format!(
            "SELECT count(*) FROM {source} \
             WHERE k <> id % 4 OR filename NOT LIKE '%/k=' || k || '/part-%'"
        )),
        ["0"],
        "each row in its partition's directory"
    );
}
