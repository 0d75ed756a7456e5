//! Reading Debezium's JSON change events (`'format' = 'debezium-json'`, issue 31) from files:
//! an aggregate over a CDC table is correct under updates and deletes (its changelog applied
//! equals the aggregate of the table's final rows), a table with a watermark reads its times,
//! a bad event is a dead letter, and an updating query's changelog that Riffle writes as
//! `debezium-json` reads back to the same result.

use std::collections::BTreeMap;

mod common;

use riffle::change::RetractTable;
use riffle::sink::CollectSink;
use riffle::{Change, EnvConfig, StreamEnv};
use riffle_sql::{Row, SqlEnv};

/// Debezium events of a `products` table (`id`, `category`, `price`, `updated`): `count`
/// products created, then pseudo-random updates (some moving a product to another category)
/// and deletes; with the table's final rows.
fn events(count: i64) -> (String, BTreeMap<i64, (String, i64)>) {
    let mut table: BTreeMap<i64, (String, i64)> = BTreeMap::new();
    let mut lines = String::new();
    let json = |id: i64, row: &(String, i64), at: i64| {
        format!(
            r#"{{"id":{id},"category":"{}","price":{},"updated":{at}}}"#,
            row.0, row.1
        )
    };
    let mut at = 1_000;
    for id in 0..count {
        let row = (format!("c{}", id % 5), 10 + id % 90);
        lines.push_str(&format!(
            r#"{{"before":null,"after":{},"op":"{}","ts_ms":{at}}}"#,
            json(id, &row, at),
            if id % 2 == 0 { "r" } else { "c" }
        ));
        lines.push('\n');
        table.insert(id, row);
        at += 10;
    }
    let mut seed = 7u64;
    for _ in 0..count * 3 {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let id = ((seed >> 33) % count as u64) as i64;
        at += 10;
        let Some(before) = table.get(&id).cloned() else {
            continue;
        };
        if (seed >> 20).is_multiple_of(10) {
            lines.push_str(&format!(
                r#"{{"before":{},"after":null,"op":"d"}}"#,
                json(id, &before, at)
            ));
            table.remove(&id);
        } else {
            let after = (
                if (seed >> 25).is_multiple_of(4) {
                    format!("c{}", (seed >> 40) % 5)
                } else {
                    before.0.clone()
                },
                before.1 + 1 + ((seed >> 12) % 7) as i64,
            );
            lines.push_str(&format!(
                r#"{{"schema":{{"type":"struct"}},"payload":{{"before":{},"after":{},"op":"u"}}}}"#,
                json(id, &before, at - 10),
                json(id, &after, at)
            ));
            table.insert(id, after);
        }
        lines.push('\n');
    }
    (lines, table)
}

fn products_ddl(path: &std::path::Path) -> String {
    format!(
        "CREATE TABLE products (id BIGINT, category STRING, price BIGINT, updated TIMESTAMP(3),
           PRIMARY KEY (id) NOT ENFORCED)
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'debezium-json');",
        path.display()
    )
}

/// The changelog of `query` at parallelism `p`, applied as a multiset, sorted; and the bad
/// records of the run.
fn result(ddl: &str, query: &str, p: usize, dir: &std::path::Path) -> (Vec<Row>, u64) {
    let env = StreamEnv::with_config(
        EnvConfig::default()
            .with_parallelism(p)
            .with_dead_letter_dir(dir.join(format!("dead-letter-{p}"))),
    );
    let sql = SqlEnv::new(&env);
    sql.execute_sql(ddl).unwrap();
    let (changes, _) = sql.sql_changelog(query).unwrap_or_else(|e| panic!("{e}"));
    let (sink, out) = CollectSink::new();
    changes.sink(sink);
    let run = env.execute().unwrap();
    let mut table = RetractTable::new();
    table
        .apply_all(out.values().into_iter().collect::<Vec<Change<Row>>>())
        .unwrap();
    let mut rows = table.rows();
    rows.sort();
    (rows, run.bad_records())
}

fn texts(rows: &[Row]) -> Vec<String> {
    rows.iter().map(common::row_text).collect()
}

#[test]
fn an_aggregate_over_a_cdc_table_is_right_under_updates_and_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let (mut lines, table) = events(300);
    // A bad event among them: a dead letter, not a row.
    lines.push_str("{\"before\":null,\"after\":{\"id\":\"x\"},\"op\":\"c\"}\n");
    let path = dir.path().join("products.jsonl");
    std::fs::write(&path, lines).unwrap();
    let mut expected: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for (category, price) in table.values() {
        let e = expected.entry(category.clone()).or_default();
        e.0 += 1;
        e.1 += price;
    }
    let expected: Vec<String> = expected
        .iter()
        .map(|(c, (n, sum))| format!("[{c}, {n}, {sum}]"))
        .collect();
    assert!(table.len() < 300, "some products are deleted");
    for p in [1, 2] {
        let (rows, bad) = result(
            &products_ddl(&path),
            "SELECT category, COUNT(*) AS n, SUM(price) AS total FROM products GROUP BY category",
            p,
            dir.path(),
        );
        assert_eq!(texts(&rows), expected, "p = {p}");
        assert_eq!(bad, 1, "p = {p}");
    }
}

#[test]
fn an_updating_query_written_as_debezium_json_reads_back_to_its_result() {
    let dir = tempfile::tempdir().unwrap();
    let (lines, _) = events(200);
    let path = dir.path().join("products.jsonl");
    std::fs::write(&path, lines).unwrap();
    let query =
        "SELECT category, MAX(price) AS best, COUNT(*) AS n FROM products GROUP BY category";
    let (direct, _) = result(&products_ddl(&path), query, 2, dir.path());

    // The same query's changelog written as debezium-json files, then read as a table.
    let out = dir.path().join("out");
    let env = StreamEnv::with_config(EnvConfig::default().with_parallelism(2));
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&products_ddl(&path)).unwrap();
    sql.execute_sql(&format!(
        "CREATE TABLE tops (category STRING, best BIGINT, n BIGINT)
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'debezium-json');
         INSERT INTO tops {query};",
        out.display()
    ))
    .unwrap();
    env.execute().unwrap();
    let (read_back, bad) = result(
        &format!(
            "CREATE TABLE tops (category STRING, best BIGINT, n BIGINT)
             WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'debezium-json');",
            out.display()
        ),
        "SELECT category, best, n FROM tops",
        1,
        dir.path(),
    );
    assert_eq!(bad, 0);
    assert_eq!(texts(&read_back), texts(&direct));
    assert_eq!(direct.len(), 5);
}

#[test]
fn a_cdc_table_with_a_watermark_reads_its_events_times() {
    let dir = tempfile::tempdir().unwrap();
    // Created at 1 s, 2 s, 61 s; the second updated at 62 s; the first deleted at 63 s.
    let lines = [
        r#"{"after":{"id":1,"category":"a","price":5,"updated":1000},"op":"c"}"#,
        r#"{"after":{"id":2,"category":"a","price":7,"updated":2000},"op":"c"}"#,
        r#"{"after":{"id":3,"category":"b","price":9,"updated":61000},"op":"c"}"#,
        r#"{"before":{"id":2,"category":"a","price":7,"updated":2000},"after":{"id":2,"category":"a","price":8,"updated":62000},"op":"u"}"#,
        r#"{"before":{"id":1,"category":"a","price":5,"updated":1000},"op":"d"}"#,
    ]
    .join("\n");
    let path = dir.path().join("products.jsonl");
    std::fs::write(&path, lines).unwrap();
    let ddl = format!(
        "CREATE TABLE products (id BIGINT, category STRING, price BIGINT, updated TIMESTAMP(3),
           WATERMARK FOR updated AS updated - INTERVAL '1' SECOND)
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'debezium-json');",
        path.display()
    );
    // An updating aggregate of the rows as of now, with the time of their last change.
    let (rows, bad) = result(
        &ddl,
        "SELECT category, COUNT(*) AS n, MAX(updated) AS last FROM products GROUP BY category",
        1,
        dir.path(),
    );
    assert_eq!(bad, 0);
    assert_eq!(
        texts(&rows),
        ["[a, 1, Timestamp(62000)]", "[b, 1, Timestamp(61000)]"]
    );
}
