//! `'connector' = 'delta'` (issue 31): an `INSERT INTO` a partitioned Delta Lake table, read
//! back by the `deltalake` package (the log) and DuckDB (the rows); refused shapes.

#![cfg(feature = "delta")]

use riffle::{EnvConfig, StreamEnv};
use riffle_sql::SqlEnv;
use riffle_testing::duckdb::{delta_log, query as duckdb, read_parquet};

#[test]
fn an_insert_into_a_partitioned_delta_table_is_read_back_by_deltalake_and_duckdb() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("orders.jsonl");
    std::fs::write(
        &input,
        [
            r#"{"id":1,"k":1,"amount":12.5,"ts":1768436280400}"#,
            r#"{"id":2,"k":2,"amount":-0.01,"ts":1768522680000}"#,
            r#"{"id":3,"k":null,"amount":null,"ts":null}"#,
            r#"{"id":4,"k":1,"amount":7,"ts":1768436280401}"#,
        ]
        .join("\n"),
    )
    .unwrap();
    let table = dir.path().join("lake");
    let env = StreamEnv::with_config(EnvConfig::default().with_parallelism(2));
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&format!(
        "CREATE TABLE orders (id BIGINT, k INT, amount DECIMAL(10, 2), ts TIMESTAMP(3))
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json');
         CREATE TABLE lake (id BIGINT NOT NULL, amount DECIMAL(10, 2), ts TIMESTAMP(3), k INT)
         PARTITIONED BY (k)
         WITH ('connector' = 'delta', 'table-path' = '{}');
         INSERT INTO lake SELECT id, amount, ts, k FROM orders;",
        input.display(),
        table.display()
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    env.execute().unwrap();

    let log = delta_log(&table);
    assert_eq!(
        log.version, 1,
        "created, then one commit at the end of the input"
    );
    let mut partitions = log.partition_values.clone();
    partitions.sort();
    assert_eq!(
        partitions,
        ["k=1 1", "k=2 2", "k=__DEFAULT_PARTITION__ None"]
    );
    assert_eq!(
        duckdb(&format!(
            "SELECT id, amount, strftime(ts AT TIME ZONE 'UTC', '%Y-%m-%d %H:%M:%S.%g') FROM {} ORDER BY id",
            read_parquet(&log.files, false)
        )),
        [
            "1|12.50|2026-01-15 00:18:00.400",
            "2|-0.01|2026-01-16 00:18:00.000",
            "3|NULL|NULL",
            "4|7.00|2026-01-15 00:18:00.401",
        ]
    );
}

#[test]
fn an_updating_query_or_a_missing_path_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::new();
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&format!(
        "CREATE TABLE t (id BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '3');
         CREATE TABLE lake (id BIGINT, n BIGINT) WITH ('connector' = 'delta', 'table-path' = '{}');
         CREATE TABLE nowhere (id BIGINT) WITH ('connector' = 'delta');",
        dir.path().join("lake").display()
    ))
    .unwrap();
    let e = sql
        .execute_sql("INSERT INTO lake SELECT id, COUNT(*) FROM t GROUP BY id;")
        .unwrap_err()
        .to_string();
    assert!(e.contains("lake") && e.contains("updat"), "{e}");
    let e = sql
        .execute_sql("INSERT INTO nowhere SELECT id FROM t;")
        .unwrap_err()
        .to_string();
    assert!(e.contains("table-path"), "{e}");
}
