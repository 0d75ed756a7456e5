//! `'connector' = 'filesystem'` with `'format' = 'parquet'` (issue 31): rows of every scalar
//! type written as Parquet part files, partitioned or not, read back by DuckDB (an independent
//! reader, `scripts/test.sh` installs it); exactly-once across a task failure; what is refused.

#![cfg(feature = "parquet")]

use std::time::Duration;

use riffle::{EnvConfig, StreamEnv};
use riffle_sql::functions::ScalarFunction;
use riffle_sql::{DataType, SqlEnv, Value};
use riffle_testing::duckdb::{committed_files, query as duckdb, read_parquet};

/// A table `orders` over JSON lines in `dir`.
fn orders(dir: &std::path::Path) -> String {
    let path = dir.join("orders.jsonl");
    std::fs::write(
        &path,
        [
            r#"{"id":1,"customer":"alice","amount":12.5,"qty":3,"ts":1768436280400,"flag":true,"ratio":0.25}"#,
            r#"{"id":2,"customer":"bob","amount":-0.01,"qty":-2147483648,"ts":1768522680000,"flag":false,"ratio":-1e300}"#,
            r#"{"id":3,"customer":null,"amount":null,"qty":null,"ts":-1,"flag":null,"ratio":null}"#,
            r#"{"id":4,"customer":"zoë \"z\" ☃","amount":99999999.99,"qty":2147483647,"ts":1768436280401,"flag":true,"ratio":1.5}"#,
        ]
        .join("\n"),
    )
    .unwrap();
    format!(
        "CREATE TABLE orders (id BIGINT, customer STRING, amount DECIMAL(10, 2), qty INT,
                              ts TIMESTAMP(3), flag BOOLEAN, ratio DOUBLE)
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json');",
        path.display()
    )
}

#[test]
fn rows_of_every_type_are_written_into_their_partitions_and_read_back_by_duckdb() {
    let dir = tempfile::tempdir().unwrap();
    for parallelism in [1, 2] {
        let out = dir.path().join(format!("out-{parallelism}"));
        let flat = dir.path().join(format!("flat-{parallelism}"));
        let env = StreamEnv::with_config(EnvConfig::default().with_parallelism(parallelism));
        let sql = SqlEnv::new(&env);
        sql.execute_sql(&orders(dir.path())).unwrap();
        sql.execute_sql(&format!(
            "CREATE TABLE by_day (id BIGINT NOT NULL, customer STRING, amount DECIMAL(10, 2),
                                  qty INT, ts TIMESTAMP(3), flag BOOLEAN, ratio DOUBLE, dt STRING)
             PARTITIONED BY (dt)
             WITH ('connector' = 'filesystem', 'path' = 'file://{}', 'format' = 'parquet');
             CREATE TABLE flat (id BIGINT, small SMALLINT, twice DECIMAL(12, 3))
             WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'parquet',
                   'parquet.compression' = 'zstd');
             INSERT INTO by_day
             SELECT id, customer, amount, qty, ts, flag, ratio, DATE_FORMAT(ts, 'yyyy-MM-dd')
             FROM orders;
             INSERT INTO flat SELECT id, CAST(id * 100 AS SMALLINT), amount * 2 FROM orders;",
            out.display(),
            flat.display()
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        env.execute().unwrap();

        let source = read_parquet(&committed_files(&out), true);
        assert_eq!(
            duckdb(&format!(
                "SELECT column_name || ' ' || column_type
                 FROM (DESCRIBE SELECT * EXCLUDE (filename) FROM {source})"
            )),
            [
                "id BIGINT",
                "customer VARCHAR",
                "amount DECIMAL(10,2)",
                "qty INTEGER",
                "ts TIMESTAMP",
                "flag BOOLEAN",
                "ratio DOUBLE",
                "dt DATE",
            ],
            "p = {parallelism}"
        );
        assert_eq!(
            duckdb(&format!(
                "SELECT id, customer, amount, qty, ts::VARCHAR, flag, ratio, dt,
                        regexp_extract(filename, '/(dt=[^/]*)/', 1)
                 FROM {source} ORDER BY id"
            )),
            [
                "1|alice|12.50|3|2026-01-15 00:18:00.4|True|0.25|2026-01-15|dt=2026-01-15",
                "2|bob|-0.01|-2147483648|2026-01-16 00:18:00|False|-1e+300|2026-01-16|dt=2026-01-16",
                "3|NULL|NULL|NULL|1969-12-31 23:59:59.999|NULL|NULL|1969-12-31|dt=1969-12-31",
                "4|zoë \"z\" ☃|99999999.99|2147483647|2026-01-15 00:18:00.401|True|1.5|2026-01-15|dt=2026-01-15",
            ],
            "p = {parallelism}"
        );
        let files = committed_files(&flat);
        assert!(
            files
                .iter()
                .all(|f| f.parent().unwrap() == flat && f.extension().unwrap() == "parquet"),
            "unpartitioned: part files in the table's directory: {files:?}"
        );
        assert_eq!(
            duckdb(&format!(
                "SELECT id, small, twice::VARCHAR FROM {} ORDER BY id",
                read_parquet(&files, false)
            )),
            [
                "1|100|25.000",
                "2|200|-0.020",
                "3|300|NULL",
                "4|400|199999999.980"
            ],
            "p = {parallelism}"
        );
    }
}

#[test]
fn parquet_part_files_are_exactly_once_across_a_task_failure() {
    // 4 000 rows paced over ~2 s, checkpoints every 100 ms, a task failure after 2 500 (a
    // function that panics once): the files of completed checkpoints stay, the rest is
    // written again.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let env = StreamEnv::with_config(riffle_testing::checkpointed(
        dir.path(),
        2,
        Duration::from_millis(100),
    ));
    let sql = SqlEnv::new(&env);
    let crash = riffle::testing::fail_once_after::<()>(2_500);
    sql.register_function(
        "passes",
        ScalarFunction::returning(DataType::Boolean, move |_| {
            crash(());
            Ok(Value::Bool(true))
        }),
    );
    sql.execute_sql(&format!(
        "CREATE TABLE t (id BIGINT) WITH ('connector' = 'datagen', 'rows-per-second' = '2000',
             'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '4000');
         CREATE TABLE lake (id BIGINT, k INT) PARTITIONED BY (k)
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'parquet');
         INSERT INTO lake SELECT id, CAST(id % 4 AS INT) FROM t WHERE passes(id);",
        out.display()
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let result = env.execute().unwrap();
    assert_eq!(result.restarts, 1);
    assert!(result.completed_checkpoints() > 0);
    let files = committed_files(&out);
    assert!(files.len() > 4, "files roll at checkpoints: {files:?}");
    let source = read_parquet(&files, true);
    assert_eq!(
        duckdb(&format!(
            "SELECT count(*), count(DISTINCT id), sum(id), min(id), max(id),
                    count(*) FILTER (WHERE k <> id % 4)
             FROM {source}"
        )),
        ["4000|4000|8002000|1|4000|0"],
        "every row once, in its partition"
    );
}

#[test]
fn what_parquet_cannot_take_is_refused_when_the_job_is_planned() {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::new();
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&orders(dir.path())).unwrap();
    let path = dir.path().join("out").display().to_string();
    let error = |ddl: &str, insert: &str| {
        sql.execute_sql(&format!(
            "CREATE TEMPORARY TABLE sink_t {ddl} WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'parquet' {});",
            if ddl.contains("zip") { ", 'parquet.compression' = 'zip'" } else { "" }
        ))
        .unwrap();
        let e = sql.execute_sql(insert).err().map(|e| e.to_string());
        sql.execute_sql("DROP TABLE sink_t;").unwrap();
        e.unwrap_or_default()
    };
    let e = error(
        "(customer STRING, total DECIMAL(12, 2))",
        "INSERT INTO sink_t SELECT customer, SUM(amount) FROM orders GROUP BY customer;",
    );
    assert!(e.contains("sink_t") && e.contains("updat"), "{e}");
    sql.execute_sql(&format!(
        "CREATE TABLE tagged (id BIGINT, tags ARRAY<STRING>)
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json');",
        dir.path().join("orders.jsonl").display()
    ))
    .unwrap();
    let e = error(
        "(id BIGINT, tags ARRAY<STRING>)",
        "INSERT INTO sink_t SELECT id, tags FROM tagged;",
    );
    assert!(e.contains("column `tags`") && e.contains("parquet"), "{e}");
    let e = error(
        "(id BIGINT, zip STRING)",
        "INSERT INTO sink_t SELECT id, customer FROM orders;",
    );
    assert!(
        e.contains("'parquet.compression'") && e.contains("zip"),
        "{e}"
    );
}
