//! Updating aggregates in SQL (`GROUP BY` without a window, issue 29): the exact changelog of a
//! small input (`+I` for a new key, `-U`/`+U` when a result changes, nothing when it does not),
//! the final result of a larger one against a batch computation at p = 1 and 2, what `EXPLAIN`
//! says, `table.exec.state.ttl`, and the errors of what is not supported.

use std::collections::BTreeMap;

mod common;

use riffle::change::{RetractTable, RowKind};
use riffle::sink::CollectSink;
use riffle::{Change, EnvConfig, StreamEnv};
use riffle_sql::{Row, SqlEnv, Value};

/// A table `orders` over JSON lines of `(customer, amount, ts)` in `dir`.
fn orders(dir: &std::path::Path, rows: &[(i64, i64, i64)]) -> String {
    let path = dir.join("orders.jsonl");
    let text: String = rows
        .iter()
        .map(|(customer, amount, ts)| {
            format!("{{\"customer\":{customer},\"amount\":{amount},\"ts\":{ts}}}\n")
        })
        .collect();
    std::fs::write(&path, text).unwrap();
    format!(
        "CREATE TABLE orders (customer BIGINT, amount BIGINT, ts TIMESTAMP(3))
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json');",
        path.display()
    )
}

/// The changes of `query` over `ddl`'s tables at parallelism `p`, as `+I[1, 2]` texts.
fn changes(ddl: &str, query: &str, config: EnvConfig) -> Vec<Change<Row>> {
    let env = StreamEnv::with_config(config);
    let sql = SqlEnv::new(&env);
    sql.execute_sql(ddl).unwrap();
    let (changes, _) = sql.sql_changelog(query).unwrap_or_else(|e| panic!("{e}"));
    let (sink, out) = CollectSink::new();
    changes.sink(sink);
    env.execute().unwrap();
    out.values()
}

fn text(change: &Change<Row>) -> String {
    format!(
        "{}{}",
        change.op.short_string(),
        common::row_text(&change.row)
    )
}

#[test]
fn a_new_key_is_inserted_a_changed_result_updated_and_an_unchanged_one_not_sent() {
    let dir = tempfile::tempdir().unwrap();
    let ddl = orders(
        dir.path(),
        &[(1, 10, 1), (2, 5, 2), (1, 30, 3), (1, 20, 4), (2, 5, 5)],
    );
    let got: Vec<String> = changes(
        &ddl,
        "SELECT customer, MAX(amount) AS biggest FROM orders GROUP BY customer",
        EnvConfig::deterministic(),
    )
    .iter()
    .map(text)
    .collect();
    // Customer 1's 20 and customer 2's second 5 change nothing: no change is sent.
    assert_eq!(
        got,
        ["+I[1, 10]", "+I[2, 5]", "-U[1, 10]", "+U[1, 30]"],
        "{got:?}"
    );
    let got: Vec<String> = changes(
        &ddl,
        "SELECT customer, COUNT(*) AS n, SUM(amount) AS total, AVG(amount) AS average FROM orders GROUP BY customer",
        EnvConfig::deterministic(),
    )
    .iter()
    .map(text)
    .collect();
    assert_eq!(
        got,
        [
            "+I[1, 1, 10, 10]",
            "+I[2, 1, 5, 5]",
            "-U[1, 1, 10, 10]",
            "+U[1, 2, 40, 20]",
            "-U[1, 2, 40, 20]",
            "+U[1, 3, 60, 20]",
            "-U[2, 1, 5, 5]",
            "+U[2, 2, 10, 5]",
        ]
    );
}

#[test]
fn an_aggregate_without_group_by_is_one_updating_row() {
    let dir = tempfile::tempdir().unwrap();
    let ddl = orders(dir.path(), &[(1, 10, 1), (2, 5, 2), (1, 30, 3)]);
    let got: Vec<String> = changes(
        &ddl,
        "SELECT COUNT(*) AS n, SUM(amount) + 1 AS total FROM orders WHERE amount > 6",
        EnvConfig::deterministic(),
    )
    .iter()
    .map(text)
    .collect();
    assert_eq!(got, ["+I[1, 11]", "-U[1, 11]", "+U[2, 41]"]);
}

#[test]
fn the_final_result_equals_a_batch_computation_at_any_parallelism() {
    let dir = tempfile::tempdir().unwrap();
    // 20 000 orders of 97 customers, amounts and times in a fixed but scrambled order.
    let rows: Vec<(i64, i64, i64)> = (0..20_000i64)
        .map(|i| (i * 7919 % 97, (i * 104_729) % 1_000 - 200, i))
        .collect();
    let mut expected: BTreeMap<i64, (i64, i64, i64, i64)> = BTreeMap::new();
    for (customer, amount, _) in &rows {
        let e = expected
            .entry(*customer)
            .or_insert((0, 0, i64::MAX, i64::MIN));
        e.0 += 1;
        e.1 += amount;
        e.2 = e.2.min(*amount);
        e.3 = e.3.max(*amount);
    }
    let expected: Vec<Row> = expected
        .into_iter()
        .map(|(c, (n, sum, min, max))| {
            Row(vec![c, n, sum, min, max]
                .into_iter()
                .map(Value::Int)
                .collect())
        })
        .collect();
    let ddl = orders(dir.path(), &rows);
    for p in [1, 2] {
        let changes = changes(
            &ddl,
            "SELECT customer, COUNT(*), SUM(amount), MIN(amount), MAX(amount) FROM orders GROUP BY customer",
            EnvConfig::default().with_parallelism(p),
        );
        // Every retraction takes back a row that was there (a multiset that never goes
        // negative), and what is left is the batch result.
        let mut table = RetractTable::new();
        table.apply_all(changes.clone()).unwrap();
        let mut result: Vec<Row> = table.rows().into_iter().collect();
        result.sort();
        assert_eq!(result, expected, "p = {p}");
        assert!(
            changes.iter().any(|c| c.op == RowKind::UpdateBefore),
            "p = {p}: no update"
        );
    }
}

/// An aggregate over an updating aggregate: each change of the inner result takes its old row
/// back out of the outer accumulators (`MIN`, `MAX` by each value's count) and adds the new one.
#[test]
fn an_aggregate_over_an_updating_input_takes_back_each_retracted_row() {
    let dir = tempfile::tempdir().unwrap();
    let ddl = orders(
        dir.path(),
        &[(1, 10, 1), (2, 5, 2), (1, 30, 3), (1, 20, 4), (2, 5, 5)],
    );
    // The inner changes: +I[1, 10], +I[2, 5], -U[1, 10], +U[1, 30].
    let got: Vec<String> = changes(
        &ddl,
        "SELECT COUNT(*) AS n, MIN(biggest), MAX(biggest), SUM(biggest), COUNT(DISTINCT biggest)
         FROM (SELECT customer, MAX(amount) AS biggest FROM orders GROUP BY customer)",
        EnvConfig::deterministic(),
    )
    .iter()
    .map(text)
    .collect();
    assert_eq!(
        got,
        [
            "+I[1, 10, 10, 10, 1]",
            "-U[1, 10, 10, 10, 1]",
            "+U[2, 5, 10, 15, 2]",
            // 10 taken back: the minimum and maximum are what is left.
            "-U[2, 5, 10, 15, 2]",
            "+U[1, 5, 5, 5, 1]",
            "-U[1, 5, 5, 5, 1]",
            "+U[2, 5, 30, 35, 2]",
        ],
        "{got:?}"
    );
    // A group whose every row is taken back is deleted, and comes back with its next row: the
    // inner HAVING deletes customer 1's row (-D[1, 10]) and updates customer 2's.
    let got: Vec<String> = changes(
        &ddl,
        "SELECT COUNT(*) AS n, SUM(total) AS all_totals
         FROM (SELECT customer, SUM(amount) AS total FROM orders GROUP BY customer HAVING SUM(amount) < 25)",
        EnvConfig::deterministic(),
    )
    .iter()
    .map(text)
    .collect();
    assert_eq!(
        got,
        [
            "+I[1, 10]",
            "-U[1, 10]",
            "+U[2, 15]",
            "-U[2, 15]",
            "+U[1, 5]",
            "-D[1, 5]",
            "+I[1, 10]",
        ],
        "{got:?}"
    );
}

/// Rows that move between groups as the inner result changes (a customer's bucket is its order
/// count modulo 5), at p = 1 and 2: what is left equals a batch computation, and no retraction
/// takes back a row that is not there.
#[test]
fn an_aggregate_over_an_updating_input_ends_at_the_batch_result_at_any_parallelism() {
    let dir = tempfile::tempdir().unwrap();
    let rows: Vec<(i64, i64, i64)> = (0..20_000i64)
        .map(|i| (i * 7919 % 389, (i * 104_729) % 1_000 - 200, i))
        .collect();
    let mut per_customer: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    for (customer, amount, _) in &rows {
        let e = per_customer.entry(*customer).or_insert((i64::MIN, 0));
        e.0 = e.0.max(*amount);
        e.1 += 1;
    }
    let mut buckets: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for (top, n) in per_customer.values() {
        buckets.entry(n % 5).or_default().push(*top);
    }
    let expected: Vec<Row> = buckets
        .into_iter()
        .map(|(bucket, tops)| {
            let distinct: std::collections::BTreeSet<i64> = tops.iter().copied().collect();
            let sum: i64 = tops.iter().sum();
            Row(vec![
                Value::Int(bucket),
                Value::Int(tops.len() as i64),
                Value::Int(sum),
                Value::Int(*tops.iter().min().unwrap()),
                Value::Int(*tops.iter().max().unwrap()),
                Value::Int(distinct.len() as i64),
                Value::Int(sum / tops.len() as i64),
            ])
        })
        .collect();
    let ddl = orders(dir.path(), &rows);
    for p in [1, 2] {
        let changes = changes(
            &ddl,
            "SELECT MOD(n, 5) AS bucket, COUNT(*), SUM(top), MIN(top), MAX(top), COUNT(DISTINCT top), AVG(top)
             FROM (SELECT customer, MAX(amount) AS top, COUNT(*) AS n FROM orders GROUP BY customer)
             GROUP BY MOD(n, 5)",
            EnvConfig::default().with_parallelism(p),
        );
        let mut table = RetractTable::new();
        table.apply_all(changes.clone()).unwrap();
        let mut result: Vec<Row> = table.rows().into_iter().collect();
        result.sort();
        assert_eq!(result, expected, "p = {p}");
    }
}

/// `SUM(..) OVER (PARTITION BY .. ORDER BY .. ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)`: rows
/// in order only add rows; a row that comes before rows already out updates the one after it.
#[test]
fn an_over_aggregation_adds_each_row_and_updates_the_rows_a_late_one_precedes() {
    let dir = tempfile::tempdir().unwrap();
    let ddl = orders(
        dir.path(),
        &[(1, 10, 1), (2, 5, 2), (1, 30, 3), (1, 20, 4), (1, 7, 0)],
    );
    let query = "SELECT customer, amount, SUM(amount) OVER (PARTITION BY customer ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS s FROM orders";
    let got: Vec<String> = changes(&ddl, query, EnvConfig::deterministic())
        .iter()
        .map(text)
        .collect();
    assert_eq!(
        got,
        [
            "+I[1, 10, 10]",
            "+I[2, 5, 5]",
            "+I[1, 30, 40]",
            "+I[1, 20, 50]",
            // 7 (ts 0) comes first: 10's frame is now 7 and 10.
            "-U[1, 10, 10]",
            "+U[1, 7, 7]",
            "+I[1, 10, 17]",
        ],
        "{got:?}"
    );
    let env = StreamEnv::new();
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&ddl).unwrap();
    let plan = sql.explain(query).unwrap();
    assert!(
        plan.contains(
            "OverAggregate: partitioned by [customer], ordered by [ts], ROWS 1 PRECEDING"
        ) && plan.contains("[retract: +I -U +U -D]"),
        "{plan}"
    );
    let error = |query: &str| sql.sql_changelog(query).err().unwrap().to_string();
    let frame = error("SELECT SUM(amount) OVER (PARTITION BY customer ORDER BY ts) FROM orders");
    assert!(
        frame.contains("ROWS BETWEEN <n> PRECEDING AND CURRENT ROW"),
        "{frame}"
    );
    let two = error(
        "SELECT SUM(amount) OVER (PARTITION BY customer ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW), MAX(amount) OVER (ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) FROM orders",
    );
    assert!(
        two.contains("every OVER of a query is the same window"),
        "{two}"
    );
}

#[test]
fn explain_shows_the_updating_aggregate_its_state_and_its_changelog_mode() {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::new();
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&orders(dir.path(), &[])).unwrap();
    let query =
        "SELECT customer, SUM(amount) AS total FROM orders WHERE amount > 0 GROUP BY customer";
    let plan = sql.explain(query).unwrap();
    assert!(
        plan.contains(
            "GroupAggregate: keyed by [customer], aggregates [SUM(amount)] -> (`customer` BIGINT, `total` BIGINT) (keyed state: one accumulator per key, no TTL: one entry per key for ever) [retract: +I -U +U -D]"
        ),
        "{plan}"
    );
    assert!(
        plan.contains("Filter: amount > 0 (chained, stateless) [append]"),
        "{plan}"
    );
    sql.execute_sql("SET 'table.exec.state.ttl' = '1 h';")
        .unwrap();
    let plan = sql.explain(query).unwrap();
    assert!(
        plan.contains("TTL 3600000 ms after the key's last update"),
        "{plan}"
    );
    // A projection over the changelog keeps its mode.
    let plan = sql
        .explain(&format!("SELECT total * 2 AS doubled FROM ({query})"))
        .unwrap();
    assert!(
        plan.lines()
            .next()
            .is_some_and(|l| l.starts_with("Map:") && l.ends_with("[retract: +I -U +U -D]")),
        "{plan}"
    );
}

#[test]
fn what_is_not_supported_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::new();
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&orders(dir.path(), &[])).unwrap();
    let error = |script: &str| sql.execute_sql(script).err().unwrap().to_string();
    // An aggregate of an aggregate's changelog runs (its accumulators take retractions back);
    // a window aggregation of one is refused: a window's result is final at the watermark.
    assert!(
        sql.sql_changelog(
            "SELECT total, COUNT(*) FROM (SELECT customer, SUM(amount) AS total FROM orders GROUP BY customer) GROUP BY total"
        )
        .is_ok()
    );
    let windowed = error(
        "CREATE VIEW totals AS SELECT customer, SUM(amount) AS total, MAX(ts) AS ts FROM orders GROUP BY customer;
         SELECT window_start, COUNT(*) FROM TABLE(TUMBLE(TABLE totals, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) GROUP BY window_start, window_end;",
    );
    assert!(
        windowed.contains("over an updating input") || windowed.contains("has no event time"),
        "{windowed}"
    );
    // A JSON file takes only appends, as Flink's filesystem sink with the json format.
    let out = dir.path().join("out");
    let sink = error(&format!(
        "CREATE TABLE totals (customer BIGINT, total BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json');
         INSERT INTO totals SELECT customer, SUM(amount) FROM orders GROUP BY customer;",
        out.display()
    ));
    assert!(
        sink.contains("table `totals` ('connector' = 'filesystem', 'format' = 'json') takes only appended rows")
            && sink.contains("debezium-json"),
        "{sink}"
    );
    // A bad option fails at its SET, naming the setting, and is not kept.
    let ttl = error("SET 'table.exec.state.ttl' = 'a while';");
    assert!(
        ttl.contains("'table.exec.state.ttl' = 'a while': not a duration"),
        "{ttl}"
    );
    assert!(
        sql.sql_changelog("SELECT customer, COUNT(*) FROM orders GROUP BY customer")
            .is_ok()
    );
    let append_only = sql
        .sql_query("SELECT customer, COUNT(*) FROM orders GROUP BY customer")
        .err()
        .unwrap()
        .to_string();
    assert!(append_only.contains("sql_changelog"), "{append_only}");
}

#[test]
fn durations_read_as_flinks_options_write_them() {
    use riffle_sql::plan::parse_duration_ms;
    assert_eq!(parse_duration_ms("500"), Some(500));
    assert_eq!(parse_duration_ms("10 s"), Some(10_000));
    assert_eq!(parse_duration_ms("5min"), Some(300_000));
    assert_eq!(parse_duration_ms(" 1 hour "), Some(3_600_000));
    assert_eq!(parse_duration_ms("2 d"), Some(172_800_000));
    assert_eq!(parse_duration_ms("1.5 h"), None);
    assert_eq!(parse_duration_ms("h"), None);
    assert_eq!(parse_duration_ms("99999999999999999 d"), None);
}

#[test]
fn a_top_n_updates_the_ranks_a_row_moves_and_breaks_ties_by_the_row() {
    let dir = tempfile::tempdir().unwrap();
    let ddl = orders(
        dir.path(),
        &[
            (1, 10, 1),
            (1, 30, 2),
            (2, 7, 3),
            (1, 20, 4),
            (1, 5, 5),
            (1, 30, 0),
        ],
    );
    let got: Vec<String> = changes(
        &ddl,
        "SELECT customer, amount, r FROM (
             SELECT *, ROW_NUMBER() OVER (PARTITION BY customer ORDER BY amount DESC) AS r FROM orders
         ) WHERE r <= 2",
        EnvConfig::deterministic(),
    )
    .iter()
    .map(text)
    .collect();
    assert_eq!(
        got,
        [
            "+I[1, 10, 1]",
            // 30 goes first: rank 1 is updated, 10 moves to rank 2.
            "-U[1, 10, 1]",
            "+U[1, 30, 1]",
            "+I[1, 10, 2]",
            "+I[2, 7, 1]",
            // 20 takes rank 2; 10 leaves.
            "-U[1, 10, 2]",
            "+U[1, 20, 2]",
            // 5 does not get in. The second 30 ties with the first; the tie goes by the
            // row's columns: (1, 30, ts 0) before (1, 30, ts 2), so it takes rank 1.
            "-U[1, 30, 1]",
            "+U[1, 30, 1]",
            "-U[1, 20, 2]",
            "+U[1, 30, 2]",
        ]
    );
    // Without the rank in the output, and keeping one row (a deduplication).
    let got: Vec<String> = changes(
        &ddl,
        "SELECT customer, amount FROM (
             SELECT customer, amount, ROW_NUMBER() OVER (PARTITION BY customer ORDER BY ts) AS r FROM orders
         ) WHERE r = 1 AND amount > 6",
        EnvConfig::deterministic(),
    )
    .iter()
    .map(text)
    .collect();
    // Customer 1's first order by time is the last line's (ts 0): it replaces the first.
    assert_eq!(got, ["+I[1, 10]", "+I[2, 7]", "-U[1, 10]", "+U[1, 30]"]);
}

#[test]
fn explain_and_errors_of_row_number() {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::new();
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&orders(dir.path(), &[])).unwrap();
    let plan = sql
        .explain("SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY customer ORDER BY amount DESC) AS r FROM orders) WHERE r <= 3")
        .unwrap();
    assert!(
        plan.contains("TopN: first 3 by [amount DESC] per [customer], ties by the row's columns -> (`customer` BIGINT, `amount` BIGINT, `ts` TIMESTAMP(3), `r` BIGINT NOT NULL)"),
        "{plan}"
    );
    assert!(plan.contains("[retract: +I -U +U -D]"), "{plan}");
    let error = |query: &str| sql.sql_changelog(query).err().unwrap().to_string();
    let unbounded = error(
        "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY customer ORDER BY amount) AS r FROM orders)",
    );
    assert!(unbounded.contains("WHERE r <= N"), "{unbounded}");
    let rank = error(
        "SELECT * FROM (SELECT *, RANK() OVER (PARTITION BY customer ORDER BY amount) AS r FROM orders) WHERE r <= 3",
    );
    assert!(
        rank.contains("RANK(..) OVER (..) is not supported yet"),
        "{rank}"
    );
    let unordered = error(
        "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY customer) AS r FROM orders) WHERE r <= 3",
    );
    assert!(unordered.contains("needs an ORDER BY"), "{unordered}");
}

#[test]
fn having_distinct_with_and_union_all() {
    let dir = tempfile::tempdir().unwrap();
    let ddl = orders(
        dir.path(),
        &[(1, 10, 1), (2, 5, 2), (1, 30, 3), (2, 5, 4), (3, 1, 5)],
    );
    let run = |query: &str| -> Vec<String> {
        changes(&ddl, query, EnvConfig::deterministic())
            .iter()
            .map(text)
            .collect()
    };
    // HAVING: a key's row appears when it passes, goes (-D) when it no longer does.
    assert_eq!(
        run(
            "SELECT customer, SUM(amount) AS total FROM orders GROUP BY customer HAVING COUNT(*) = 1"
        ),
        ["+I[1, 10]", "+I[2, 5]", "-D[1, 10]", "-D[2, 5]", "+I[3, 1]"]
    );
    // SELECT DISTINCT: each distinct row once, as appends.
    assert_eq!(
        run("SELECT DISTINCT customer, amount FROM orders"),
        ["+I[1, 10]", "+I[2, 5]", "+I[1, 30]", "+I[3, 1]"]
    );
    // WITH: views of the query; UNION ALL of two of them (two sources: in any order).
    let mut union = run(
        "WITH big AS (SELECT customer, amount FROM orders WHERE amount >= 10),
                  small AS (SELECT customer, amount FROM orders WHERE amount < 2)
             SELECT customer FROM big UNION ALL SELECT customer FROM small",
    );
    union.sort();
    assert_eq!(union, ["+I[1]", "+I[1]", "+I[3]"]);
    let env = StreamEnv::new();
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&ddl).unwrap();
    let plan = sql
        .explain("SELECT DISTINCT customer FROM orders UNION ALL SELECT customer FROM orders")
        .unwrap();
    assert!(plan.starts_with("Union: 2 inputs"), "{plan}");
    assert!(
        plan.contains("GroupAggregate: keyed by [customer], aggregates []"),
        "{plan}"
    );
    let error = |query: &str| sql.sql_changelog(query).err().unwrap().to_string();
    assert!(
        error("SELECT customer FROM orders UNION SELECT customer FROM orders")
            .contains("UNION ALL is")
    );
    assert!(
        error("SELECT customer, amount FROM orders UNION ALL SELECT customer FROM orders")
            .contains("UNION ALL of 2 columns")
    );
    assert!(
        error("SELECT customer FROM orders GROUP BY customer HAVING SUM(amount)")
            .contains("HAVING needs a BOOLEAN")
    );
}

#[test]
fn a_datagen_table_gives_its_sequence_once_and_random_values_in_their_ranges() {
    let ddl = "CREATE TABLE t (id BIGINT, user_id INT, name STRING, ts TIMESTAMP(3),
                   WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
               WITH ('connector' = 'datagen', 'rows-per-second' = '1000000',
                     'fields.id.kind' = 'sequence', 'fields.id.start' = '1',
                     'fields.id.end' = '2000', 'fields.user_id.min' = '1',
                     'fields.user_id.max' = '5', 'fields.name.length' = '4');";
    for parallelism in [1, 2] {
        let got = changes(
            ddl,
            "SELECT COUNT(*) AS n, SUM(id) AS total, MIN(id) AS lo, MAX(id) AS hi,
                    MIN(user_id) AS u_lo, MAX(user_id) AS u_hi, MAX(CHAR_LENGTH(name)) AS len
             FROM t",
            EnvConfig::default().with_parallelism(parallelism),
        );
        let last = got.last().expect("a result").row.clone();
        assert_eq!(
            common::row_text(&last),
            "[2000, 2001000, 1, 2000, 1, 5, 4]",
            "parallelism {parallelism}"
        );
    }
}
