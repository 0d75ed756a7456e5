//! Regular joins in SQL (issue 29): inner, left, right and full outer joins on equal keys, as
//! Flink SQL's unbounded joins; the exact changelog of small inputs (a padded row retracted when
//! its match comes), `NULL` keys that match nothing, `FROM a, b WHERE ..`, and the errors of
//! what is not supported.

mod common;

use riffle::change::RetractTable;
use riffle::sink::CollectSink;
use riffle::{Change, EnvConfig, StreamEnv};
use riffle_sql::{Row, SqlEnv};

/// Tables `users (id, name)` and `orders (user_id, amount)` over JSON lines in `dir`.
fn tables(dir: &std::path::Path, users: &[&str], orders: &[&str]) -> String {
    let write = |name: &str, lines: &[&str]| {
        let path = dir.join(format!("{name}.jsonl"));
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        path.display().to_string()
    };
    format!(
        "CREATE TABLE users (id BIGINT, name VARCHAR)
           WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json');
         CREATE TABLE orders (user_id BIGINT, amount BIGINT)
           WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json');",
        write("users", users),
        write("orders", orders)
    )
}

const USERS: [&str; 3] = [
    r#"{"id": 1, "name": "ann"}"#,
    r#"{"id": 2, "name": "bob"}"#,
    r#"{"id": null, "name": "nobody"}"#,
];
const ORDERS: [&str; 4] = [
    r#"{"user_id": 1, "amount": 10}"#,
    r#"{"user_id": 1, "amount": 20}"#,
    r#"{"user_id": 3, "amount": 30}"#,
    r#"{"user_id": null, "amount": 40}"#,
];

use common::row_text as text;

/// The final rows of `query` (its changelog applied as a multiset: every retraction takes
/// back a row that was there), sorted, at parallelism `p`.
fn result(ddl: &str, query: &str, p: usize) -> Vec<String> {
    let env = StreamEnv::with_config(EnvConfig::default().with_parallelism(p));
    let sql = SqlEnv::new(&env);
    sql.execute_sql(ddl).unwrap();
    let (changes, _) = sql.sql_changelog(query).unwrap_or_else(|e| panic!("{e}"));
    let (sink, out) = CollectSink::new();
    changes.sink(sink);
    env.execute().unwrap();
    let mut table = RetractTable::new();
    table.apply_all(out.values()).unwrap();
    let mut rows: Vec<String> = table.rows().iter().map(text).collect();
    rows.sort();
    rows
}

#[test]
fn inner_and_outer_joins_give_sqls_rows_and_null_keys_match_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ddl = tables(dir.path(), &USERS, &ORDERS);
    for p in [1, 2] {
        assert_eq!(
            result(
                &ddl,
                "SELECT u.name, o.amount FROM users AS u JOIN orders AS o ON u.id = o.user_id",
                p
            ),
            ["[ann, 10]", "[ann, 20]"]
        );
        assert_eq!(
            result(
                &ddl,
                "SELECT u.name, o.amount FROM users u LEFT JOIN orders o ON o.user_id = u.id",
                p
            ),
            ["[ann, 10]", "[ann, 20]", "[bob, NULL]", "[nobody, NULL]"]
        );
        assert_eq!(
            result(
                &ddl,
                "SELECT u.name, o.amount FROM users u RIGHT OUTER JOIN orders o ON u.id = o.user_id",
                p
            ),
            ["[NULL, 30]", "[NULL, 40]", "[ann, 10]", "[ann, 20]"]
        );
        assert_eq!(
            result(
                &ddl,
                "SELECT name, amount FROM users FULL OUTER JOIN orders ON id = user_id",
                p
            ),
            [
                "[NULL, 30]",
                "[NULL, 40]",
                "[ann, 10]",
                "[ann, 20]",
                "[bob, NULL]",
                "[nobody, NULL]"
            ]
        );
        // FROM a, b: the keys come from the WHERE, the rest of it filters the joined rows.
        assert_eq!(
            result(
                &ddl,
                "SELECT name, amount FROM users, orders WHERE id = user_id AND amount > 10",
                p
            ),
            ["[ann, 20]"]
        );
    }
}

#[test]
fn a_left_join_retracts_the_padded_row_when_the_match_comes() {
    let dir = tempfile::tempdir().unwrap();
    let ddl = tables(dir.path(), &USERS[..1], &ORDERS[..1]);
    let env = StreamEnv::with_config(EnvConfig::deterministic());
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&ddl).unwrap();
    let (changes, _) = sql
        .sql_changelog(
            "SELECT u.name, o.amount FROM users u LEFT JOIN orders o ON u.id = o.user_id",
        )
        .unwrap();
    let (sink, out) = CollectSink::new();
    changes.sink(sink);
    env.execute().unwrap();
    let got: Vec<String> = out
        .values()
        .iter()
        .map(|c: &Change<Row>| format!("{}{}", c.op.short_string(), text(&c.row)))
        .collect();
    // The two files are read by two sources: the user may come first (padded, then
    // retracted) or the order may (then the match is the first row).
    assert!(
        got == ["+I[ann, NULL]", "-D[ann, NULL]", "+I[ann, 10]"] || got == ["+I[ann, 10]"],
        "{got:?}"
    );
}

/// A join of an updating input (an aggregate's result): a row taken back takes back its
/// results, and the outer side's rows it leaves without a match are padded again; the final
/// rows are the batch join's at p = 1 and 2.
#[test]
fn joins_of_an_updating_input_end_at_the_batch_result() {
    let dir = tempfile::tempdir().unwrap();
    let ddl = tables(dir.path(), &USERS, &ORDERS);
    let totals = "(SELECT user_id, SUM(amount) AS total FROM orders GROUP BY user_id) t";
    // User 1's two orders: its count passes the HAVING, then its row is deleted.
    let singles =
        "(SELECT user_id, COUNT(*) AS n FROM orders GROUP BY user_id HAVING COUNT(*) < 2) c";
    for p in [1, 2] {
        let query = |kind: &str, right: &str, on: &str| {
            result(
                &ddl,
                &format!(
                    "SELECT u.name, {on} FROM users u {kind} JOIN {right} ON u.id = {on_key}",
                    on_key = if right == totals {
                        "t.user_id"
                    } else {
                        "c.user_id"
                    }
                ),
                p,
            )
        };
        assert_eq!(query("", totals, "t.total"), ["[ann, 30]"], "p = {p}");
        assert_eq!(
            query("LEFT", totals, "t.total"),
            ["[ann, 30]", "[bob, NULL]", "[nobody, NULL]"],
            "p = {p}"
        );
        // The orders of user 3 and of no user (a NULL key, its own group) match nobody.
        assert_eq!(
            query("RIGHT", totals, "t.total"),
            ["[NULL, 30]", "[NULL, 40]", "[ann, 30]"],
            "p = {p}"
        );
        assert_eq!(
            query("FULL", singles, "c.n"),
            [
                "[NULL, 1]",
                "[NULL, 1]",
                "[ann, NULL]",
                "[bob, NULL]",
                "[nobody, NULL]"
            ],
            "p = {p}"
        );
        assert!(query("", singles, "c.n").is_empty(), "p = {p}");
    }
    let env = StreamEnv::new();
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&ddl).unwrap();
    let plan = sql
        .explain(&format!(
            "SELECT u.name, t.total FROM users u JOIN {totals} ON u.id = t.user_id"
        ))
        .unwrap();
    assert!(
        plan.contains("a retracted row takes back its side's equal row")
            && plan.contains("[retract: +I -U +U -D]"),
        "{plan}"
    );
}

/// A lookup join of a stream with a bounded CSV table (`FOR SYSTEM_TIME AS OF`), read whole
/// at start: inner and left, `NULL` keys matching nothing, a quoted CSV field; `EXPLAIN` and
/// the errors.
#[test]
fn a_lookup_join_reads_its_bounded_table_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users.csv");
    std::fs::write(&users, "1,ann\n2,\"bob, jr\"\n").unwrap();
    let ddl = tables(dir.path(), &USERS, &ORDERS)
        + &format!(
            "CREATE TABLE names (id BIGINT, name VARCHAR)
               WITH ('connector.type' = 'filesystem', 'connector.path' = 'file://{}', 'format.type' = 'csv');
             CREATE VIEW o AS SELECT *, PROCTIME() AS t FROM orders;",
            users.display()
        );
    for p in [1, 2] {
        assert_eq!(
            result(
                &ddl,
                "SELECT o.amount, n.name FROM o JOIN names FOR SYSTEM_TIME AS OF o.t AS n ON o.user_id = n.id",
                p
            ),
            ["[10, ann]", "[20, ann]"]
        );
        assert_eq!(
            result(
                &ddl,
                "SELECT o.amount, n.name FROM o LEFT JOIN names FOR SYSTEM_TIME AS OF o.t AS n ON o.user_id = n.id",
                p
            ),
            ["[10, ann]", "[20, ann]", "[30, NULL]", "[40, NULL]"]
        );
    }
    let env = StreamEnv::new();
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&ddl).unwrap();
    let plan = sql
        .explain("SELECT o.amount, n.name FROM o JOIN names FOR SYSTEM_TIME AS OF o.t AS n ON o.user_id = n.id")
        .unwrap();
    assert!(
        plan.contains("LookupJoin: Inner with `names`") && plan.contains("[append]"),
        "{plan}"
    );
    let error = |query: &str| sql.sql_changelog(query).err().unwrap().to_string();
    let right = error(
        "SELECT o.amount FROM o RIGHT JOIN names FOR SYSTEM_TIME AS OF o.t AS n ON o.user_id = n.id",
    );
    assert!(right.contains("INNER or LEFT"), "{right}");
    sql.execute_sql(
        "CREATE TABLE gen (event_type INT) WITH ('connector' = 'nexmark', 'events.num' = '10');",
    )
    .unwrap();
    let streamed = error(
        "SELECT o.amount FROM o JOIN gen FOR SYSTEM_TIME AS OF o.t AS g ON o.user_id = g.event_type",
    );
    assert!(
        streamed.contains("reads a bounded `filesystem` table"),
        "{streamed}"
    );
}

#[test]
fn explain_and_errors_of_joins() {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::new();
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&tables(dir.path(), &USERS, &ORDERS))
        .unwrap();
    let plan = sql
        .explain("SELECT name, amount FROM users u LEFT JOIN orders o ON u.id = o.user_id")
        .unwrap();
    assert!(
        plan.contains("Join: Left on [u.id = o.user_id] ->")
            && plan.contains("[retract: +I -U +U -D]"),
        "{plan}"
    );
    let inner = sql
        .explain("SELECT name, amount FROM users u JOIN orders o ON u.id = o.user_id")
        .unwrap();
    assert!(
        inner.contains("Join: Inner") && inner.contains("[append]"),
        "{inner}"
    );
    let error = |query: &str| sql.sql_changelog(query).err().unwrap().to_string();
    let cross = error("SELECT name FROM users, orders");
    assert!(cross.contains("cross join"), "{cross}");
    let range = error("SELECT name FROM users JOIN orders ON id < user_id");
    assert!(
        range.contains("needs an equality of a column of each side"),
        "{range}"
    );
    let outer =
        error("SELECT name FROM users u LEFT JOIN orders o ON u.id = o.user_id AND o.amount > 5");
    assert!(
        outer.contains("the ON of an outer join takes equalities"),
        "{outer}"
    );
    let ambiguous = error(
        "SELECT name FROM users u JOIN (SELECT user_id AS id, amount FROM orders) o ON id = amount",
    );
    assert!(ambiguous.contains("ambiguous"), "{ambiguous}");
}

#[test]
fn a_where_over_one_side_of_an_inner_join_filters_that_side_before_the_join() {
    let dir = tempfile::tempdir().unwrap();
    let ddl = tables(dir.path(), &USERS, &ORDERS);
    let env = StreamEnv::new();
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&ddl).unwrap();
    // `Filter` lines of the plan, each with how deep it is, and the join's depth.
    let shape = |query: &str| {
        let plan = sql.explain(query).unwrap();
        let depth = |line: &str| line.len() - line.trim_start().len();
        let join = plan
            .lines()
            .find(|l| l.trim_start().starts_with("Join:"))
            .map(depth)
            .unwrap_or_else(|| panic!("{plan}"));
        let filters: Vec<(String, bool)> = plan
            .lines()
            .filter(|l| l.trim_start().starts_with("Filter:"))
            .map(|l| {
                let text = l.trim_start().trim_start_matches("Filter: ");
                let text = text.split(" (").next().unwrap().to_string();
                (text, depth(l) > join)
            })
            .collect();
        (filters, plan)
    };
    // Each side's conjunct below the join; the one over both above it.
    let query = "SELECT u.name, o.amount FROM users u JOIN orders o ON u.id = o.user_id \
                 WHERE o.amount > 10 AND u.name <> 'bob' AND o.amount + u.id > 0";
    let (filters, plan) = shape(query);
    assert_eq!(
        filters,
        [
            ("o.amount + u.id > 0".to_string(), false),
            ("u.name <> 'bob'".to_string(), true),
            ("o.amount > 10".to_string(), true),
        ],
        "{plan}"
    );
    // `FROM a, b WHERE ..` too.
    let (filters, plan) =
        shape("SELECT name FROM users, orders WHERE id = user_id AND amount < 30");
    assert_eq!(filters, [("amount < 30".to_string(), true)], "{plan}");
    // Not below an outer join (it would keep the padded rows), nor a call whose value may
    // change between calls.
    let (filters, plan) = shape(
        "SELECT u.name, o.amount FROM users u LEFT JOIN orders o ON u.id = o.user_id \
         WHERE o.amount > 10",
    );
    assert_eq!(filters, [("o.amount > 10".to_string(), false)], "{plan}");
    sql.register_function(
        "lucky",
        riffle_sql::ScalarFunction::returning(riffle_sql::DataType::Boolean, |_| {
            Ok(riffle_sql::Value::Bool(true))
        }),
    );
    let (filters, plan) =
        shape("SELECT u.name FROM users u JOIN orders o ON u.id = o.user_id WHERE lucky(o.amount)");
    assert_eq!(filters, [("lucky(o.amount)".to_string(), false)], "{plan}");
    // One declared deterministic goes below it, as a built-in function would.
    sql.register_deterministic_function(
        "big",
        riffle_sql::ScalarFunction::returning(riffle_sql::DataType::Boolean, |args| {
            Ok(riffle_sql::Value::Bool(
                matches!(args, [riffle_sql::Value::Int(n)] if *n > 10),
            ))
        }),
    );
    let (filters, plan) =
        shape("SELECT u.name FROM users u JOIN orders o ON u.id = o.user_id WHERE big(o.amount)");
    assert_eq!(filters, [("big(o.amount)".to_string(), true)], "{plan}");
    // Registered again without the declaration, it is taken as changing between calls again.
    sql.register_function(
        "big",
        riffle_sql::ScalarFunction::returning(riffle_sql::DataType::Boolean, |_| {
            Ok(riffle_sql::Value::Bool(true))
        }),
    );
    let (filters, plan) =
        shape("SELECT u.name FROM users u JOIN orders o ON u.id = o.user_id WHERE big(o.amount)");
    assert_eq!(filters, [("big(o.amount)".to_string(), false)], "{plan}");
    // The rows are the same as filtering after the join.
    for p in [1, 2] {
        assert_eq!(result(&ddl, query, p), ["[ann, 20]"]);
        assert_eq!(
            result(
                &ddl,
                "SELECT u.name, o.amount FROM users u JOIN orders o ON u.id = o.user_id \
                 WHERE o.amount >= 20 OR u.name = 'bob'",
                p
            ),
            ["[ann, 20]"]
        );
    }
}

/// A Top-N partitioned by the keys of the inner join it reads (Nexmark q9's winning bid per
/// auction) runs in the join's task, without an exchange; partitioned otherwise, it is hashed.
/// The result is the same at any parallelism.
#[test]
fn a_top_n_partitioned_by_an_inner_joins_keys_runs_in_the_joins_task() {
    let dir = tempfile::tempdir().unwrap();
    let users: Vec<String> = (1..=40)
        .map(|id| format!(r#"{{"id": {id}, "name": "user-{id}"}}"#))
        .collect();
    let orders: Vec<String> = (0..400)
        .map(|i| {
            format!(
                r#"{{"user_id": {}, "amount": {}}}"#,
                i % 45 + 1,
                i * 37 % 101
            )
        })
        .collect();
    let users: Vec<&str> = users.iter().map(String::as_str).collect();
    let orders: Vec<&str> = orders.iter().map(String::as_str).collect();
    let ddl = tables(dir.path(), &users, &orders);
    let top = |partition: &str, join: &str| {
        format!(
            "SELECT id, name, amount FROM (SELECT u.id, u.name, o.amount, ROW_NUMBER() OVER \
             (PARTITION BY {partition} ORDER BY o.amount DESC) AS rn FROM users u {join} \
             orders o ON u.id = o.user_id) WHERE rn = 1"
        )
    };
    let env = StreamEnv::new();
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&ddl).unwrap();
    for (partition, join, in_place) in [
        ("u.id", "JOIN", true),
        ("o.user_id", "JOIN", true),
        ("u.name", "JOIN", false),
    ] {
        let plan = sql.explain(&top(partition, join)).unwrap();
        let kept = format!("Kept in place: partitioned by [{partition}] already");
        let hashed = format!("Hash by [{partition}]");
        assert_eq!(plan.contains(&kept), in_place, "{partition} {join}: {plan}");
        assert_eq!(
            plan.contains(&hashed),
            !in_place,
            "{partition} {join}: {plan}"
        );
    }
    let mut expected: Vec<String> = (1..=40)
        .map(|id| {
            let best = (0..400).filter(|i| i % 45 + 1 == id).map(|i| i * 37 % 101);
            format!("[{id}, user-{id}, {}]", best.max().unwrap())
        })
        .collect();
    expected.sort();
    for p in [1, 3] {
        assert_eq!(
            result(&ddl, &top("u.id", "JOIN"), p),
            expected,
            "at p = {p}"
        );
        // One task holds the join and the deduplication.
        let env = StreamEnv::with_config(EnvConfig::default().with_parallelism(p));
        let sql = SqlEnv::new(&env);
        sql.execute_sql(&ddl).unwrap();
        let (changes, _) = sql.sql_changelog(&top("u.id", "JOIN")).unwrap();
        changes.sink(CollectSink::new().0);
        let plan = env.plan().unwrap();
        assert!(
            (plan.vertices.iter())
                .any(|v| v.name.contains("Join") && v.name.contains("Deduplicate")),
            "{:?}",
            plan.vertices.iter().map(|v| &v.name).collect::<Vec<_>>()
        );
    }
}
