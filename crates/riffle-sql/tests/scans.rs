//! What a scan decodes (issue 29): a JSON table's columns and the fields of its `ROW` columns
//! that no step of the statement reads are skipped, not built. The rows are the same as when
//! every field is decoded; a bad value in a field no one reads is not an error (as Flink's
//! projection push-down into the `json` format); the same value read is a bad record; two views
//! of one table read once decode what either reads. A call a SELECT repeats is computed once
//! per row.

mod common;

use riffle::change::RetractTable;
use riffle::sink::CollectSink;
use riffle::{EnvConfig, StreamEnv};
use riffle_sql::SqlEnv;

/// A table `events` over `lines` (JSON) in `dir`: `kind`, a `ROW` `item` and `note`.
fn events(dir: &std::path::Path, lines: &[&str]) -> String {
    let path = dir.join("events.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    format!(
        "CREATE TABLE events (
           kind INT,
           item ROW<id BIGINT, price BIGINT, label VARCHAR, at TIMESTAMP(3)>,
           note BIGINT,
           ts AS item.at,
           WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
         ) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json');
         CREATE VIEW priced AS SELECT item.id, item.price, ts FROM events WHERE kind = 1;
         CREATE VIEW labelled AS SELECT item.id, item.label FROM events WHERE kind = 2;",
        path.display()
    )
}

const LINES: [&str; 5] = [
    r#"{"kind": 1, "item": {"id": 1, "price": 10, "label": "a", "at": 1000}, "note": 5}"#,
    r#"{"kind": 2, "item": {"id": 1, "price": 0, "label": "first", "at": 1500}, "note": 6}"#,
    r#"{"kind": 1, "item": {"id": 2, "price": 20, "label": "b", "at": 2000}, "note": 7}"#,
    // `note` is not a number here: a bad row only where it is read (`label` 99 is its text).
    r#"{"kind": 1, "item": {"id": 1, "price": 30, "label": 99, "at": 3000}, "note": "seven"}"#,
    r#"{"kind": 2, "item": {"id": 2, "price": 0, "label": "second", "at": 3500}, "note": 8}"#,
];

/// The final rows of `query` over `LINES` (sorted), and the bad records of the run.
fn run(query: &str) -> (Vec<String>, u64) {
    let (rows, bad, _) = run_with_dead_letters(query);
    (rows, bad)
}

/// [`run`], with the dead letters the run wrote (as JSON).
fn run_with_dead_letters(query: &str) -> (Vec<String>, u64, Vec<serde_json::Value>) {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::with_config(
        EnvConfig::default()
            .with_parallelism(2)
            .with_dead_letter_dir(dir.path().join("dead-letter")),
    );
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&events(dir.path(), &LINES)).unwrap();
    let (changes, _) = sql.sql_changelog(query).unwrap_or_else(|e| panic!("{e}"));
    let (sink, out) = CollectSink::new();
    changes.sink(sink);
    let result = env.execute().unwrap();
    let mut table = RetractTable::new();
    table.apply_all(out.values()).unwrap();
    let mut rows: Vec<String> = table.rows().iter().map(common::row_text).collect();
    rows.sort();
    let mut letters = Vec::new();
    let mut dirs = vec![dir.path().join("dead-letter")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let text = std::fs::read_to_string(&path).unwrap();
                letters.extend(text.lines().map(|l| serde_json::from_str(l).unwrap()));
            }
        }
    }
    (rows, result.bad_records(), letters)
}

#[test]
fn fields_no_one_reads_are_skipped_and_a_bad_value_in_them_is_no_error() {
    // `note` unread: every line is a row.
    let (rows, bad) = run("SELECT id, SUM(price) FROM priced GROUP BY id");
    assert_eq!(rows, ["[1, 40]", "[2, 20]"]);
    assert_eq!(bad, 0);
    let (rows, bad) = run(
        "SELECT window_start, COUNT(*), MAX(price) FROM TABLE(TUMBLE(TABLE priced, DESCRIPTOR(ts), INTERVAL '2' SECOND)) GROUP BY window_start, window_end",
    );
    assert_eq!(rows, ["[Timestamp(0), 1, 10]", "[Timestamp(2000), 2, 30]"]);
    assert_eq!(bad, 0);
}

#[test]
fn a_bad_value_in_a_field_read_is_a_bad_record() {
    // `note` read: the fourth line is a bad record, as without skipping.
    let (rows, bad, letters) =
        run_with_dead_letters("SELECT item.id, note FROM events WHERE kind = 1");
    assert_eq!(rows, ["[1, 5]", "[2, 7]"]);
    assert_eq!(bad, 1);
    // The dead letter names the line and holds it as it was.
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0]["position"], "line 4");
    assert_eq!(letters[0]["payload"], LINES[3]);
    assert_eq!(
        letters[0]["error"],
        "`note`: the string \"seven\" is not a BIGINT"
    );
    // A whole `ROW` column read: every field of it decoded.
    let (rows, bad) = run("SELECT item FROM events WHERE kind = 1 AND note > 5");
    assert_eq!(
        rows,
        ["[Row([Int(2), Int(20), String(\"b\"), Timestamp(2000)])]"]
    );
    assert_eq!(bad, 1);
}

#[test]
fn two_views_of_one_table_decode_what_either_reads() {
    let (rows, bad) =
        run("SELECT p.id, p.price, l.label FROM priced AS p JOIN labelled AS l ON p.id = l.id");
    assert_eq!(
        rows,
        ["[1, 10, first]", "[1, 30, first]", "[2, 20, second]"]
    );
    assert_eq!(bad, 0);
}

#[test]
fn drop_removes_a_table_or_a_view_and_if_exists_skips_a_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::new();
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&events(dir.path(), &[])).unwrap();
    let error = |statement: &str| sql.execute_sql(statement).unwrap_err().to_string();
    sql.execute_sql("DROP TEMPORARY VIEW priced; DROP VIEW IF EXISTS priced;")
        .unwrap();
    assert!(error("SELECT * FROM priced").contains("priced"));
    assert!(
        error("DROP VIEW priced").contains("there is no view `priced`"),
        "{}",
        error("DROP VIEW priced")
    );
    // A view is no table: `DROP TABLE` leaves it.
    assert!(error("DROP TABLE labelled").contains("there is no table `labelled`"));
    sql.execute_sql("DROP VIEW labelled; DROP TABLE events;")
        .unwrap();
    assert!(error("SELECT kind FROM events").contains("events"));
    // Defined again after it was dropped, with other columns.
    sql.execute_sql(
        "CREATE TABLE events (n BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '3');",
    )
    .unwrap();
    let (rows, _) = sql.sql_changelog("SELECT n FROM events").unwrap();
    rows.sink(CollectSink::new().0);
}

#[test]
fn a_call_repeated_in_where_and_projection_is_computed_once_with_the_same_rows() {
    let query = "SELECT item.id,
           CASE WHEN lower(item.label) = 'a' THEN 'A' WHEN lower(item.label) = 'b' THEN 'B'
                ELSE upper(item.label) END AS l,
           upper(item.label) || '!' AS loud
         FROM events WHERE lower(item.label) <> 'first'";
    // `note` of the fourth line is not read: no bad record.
    assert_eq!(
        run(query),
        (
            vec![
                "[1, 99, 99!]".to_string(),
                "[1, A, A!]".to_string(),
                "[2, B, B!]".to_string(),
                "[2, SECOND, SECOND!]".to_string(),
            ],
            0
        )
    );
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::new();
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&events(dir.path(), &LINES)).unwrap();
    let plan = sql.explain(query).unwrap();
    // lower(..) is in the WHERE for every row: computed before it; upper(..) after it, for the
    // projection's two uses (one only for some rows).
    assert!(plan.contains("lower(item.label) AS $cse0"), "{plan}");
    assert!(plan.contains("upper(item.label) AS $cse1"), "{plan}");
    assert!(plan.contains("Filter: $cse0 <> 'first'"), "{plan}");
}
