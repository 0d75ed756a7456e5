//! The `jdbc` connector in SQL against the test PostgreSQL server (`./scripts/test.sh` starts
//! it; its URL is in `RIFFLE_POSTGRES_URL`): windowed counts appended, an updating query's
//! changelog upserted and deleted by `PRIMARY KEY`, exactly-once through a failure of the job,
//! each table equal to a batch computation over the input; and the errors of a bad table.

#![cfg(feature = "postgres")]

use std::collections::BTreeMap;
use std::time::Duration;

use postgres::{Client, NoTls};
use riffle::checkpoint::{CheckpointConfig, RestartStrategy};
use riffle::testing::fail_once_after;
use riffle::{EnvConfig, StreamEnv};
use riffle_sql::functions::ScalarFunction;
use riffle_sql::{DataType, SqlEnv, Value};

fn url() -> String {
    std::env::var("RIFFLE_POSTGRES_URL").expect(
        "RIFFLE_POSTGRES_URL is not set: start a server with `./scripts/postgres.sh start && eval \"$(./scripts/postgres.sh env)\"` (the README's test command does)",
    )
}

fn client() -> Client {
    Client::connect(&url(), NoTls).expect("connect to the test server")
}

/// `(user, amount, ts)` orders: user `i % 13`, amount `i % 50`, one per second; every 7th order
/// cancels (amount 0, see the query).
fn orders(dir: &std::path::Path, count: i64) -> (String, Vec<(i64, i64, i64)>) {
    let rows: Vec<(i64, i64, i64)> = (0..count)
        .map(|i| (i % 13, if i % 7 == 6 { 0 } else { i % 50 }, 1_000 * i))
        .collect();
    let path = dir.join("orders.jsonl");
    let text: String = rows
        .iter()
        .map(|(user, amount, ts)| {
            format!("{{\"user_id\":{user},\"amount\":{amount},\"ts\":{ts}}}\n")
        })
        .collect();
    std::fs::write(&path, text).unwrap();
    let ddl = format!(
        "CREATE TABLE orders (user_id BIGINT, amount BIGINT, ts TIMESTAMP(3),
           WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json');",
        path.display()
    );
    (ddl, rows)
}

fn env(dir: &std::path::Path, fail: bool) -> StreamEnv {
    StreamEnv::with_config(
        EnvConfig::default().with_parallelism(2).with_checkpoints(
            CheckpointConfig {
                restart: RestartStrategy::FixedDelay {
                    attempts: 3,
                    delay: Duration::from_millis(50),
                },
                ..CheckpointConfig::default()
            }
            .with_interval(Some(Duration::from_millis(50)))
            .with_storage(
                dir.join(if fail { "chk-fail" } else { "chk" })
                    .display()
                    .to_string(),
            ),
        ),
    )
}

#[test]
fn windowed_counts_and_an_updating_total_land_in_postgres_exactly_once() {
    let mut db = client();
    db.batch_execute(
        "DROP TABLE IF EXISTS jdbc_minutes, jdbc_totals;
         CREATE TABLE jdbc_minutes (user_id bigint, window_start timestamp(3), orders bigint, amount bigint);
         CREATE TABLE jdbc_totals (user_id bigint PRIMARY KEY, total bigint, orders bigint);",
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (ddl, rows) = orders(dir.path(), 3_000);
    let env = env(dir.path(), false);
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&ddl).unwrap();
    sql.execute_sql(&format!(
        "CREATE TABLE minutes (user_id BIGINT, window_start TIMESTAMP(3), orders BIGINT, amount BIGINT)
         WITH ('connector' = 'jdbc', 'url' = 'jdbc:{url}', 'table-name' = 'jdbc_minutes',
               'sink.delivery-guarantee' = 'exactly-once');
         CREATE TABLE totals (user_id BIGINT, total BIGINT, orders BIGINT, PRIMARY KEY (user_id) NOT ENFORCED)
         WITH ('connector' = 'jdbc', 'url' = 'jdbc:{url}', 'table-name' = 'jdbc_totals',
               'sink.delivery-guarantee' = 'exactly-once');
         INSERT INTO minutes
           SELECT user_id, window_start, COUNT(*), SUM(amount)
           FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
           GROUP BY user_id, window_start, window_end;
         INSERT INTO totals
           SELECT user_id, SUM(amount), COUNT(*) FROM orders WHERE amount > 0 GROUP BY user_id;",
        url = url()
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    env.execute().unwrap();

    let mut minutes: BTreeMap<(i64, i64), (i64, i64)> = BTreeMap::new();
    let mut totals: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    for &(user, amount, ts) in &rows {
        let m = minutes.entry((user, ts / 60_000 * 60)).or_default();
        m.0 += 1;
        m.1 += amount;
        if amount > 0 {
            let t = totals.entry(user).or_default();
            t.0 += amount;
            t.1 += 1;
        }
    }
    let got: BTreeMap<(i64, i64), (i64, i64)> = db
        .query(
            "SELECT user_id, extract(epoch FROM window_start)::bigint, orders, amount FROM jdbc_minutes",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| ((r.get(0), r.get(1)), (r.get(2), r.get(3))))
        .collect();
    let written: i64 = db
        .query_one("SELECT count(*) FROM jdbc_minutes", &[])
        .unwrap()
        .get(0);
    assert_eq!(
        written as usize,
        minutes.len(),
        "a window's row written twice"
    );
    assert_eq!(got, minutes);
    let got: BTreeMap<i64, (i64, i64)> = db
        .query("SELECT user_id, total, orders FROM jdbc_totals", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    assert_eq!(got, totals);
}

#[test]
fn a_changelog_with_deletions_is_applied_through_a_failure_of_the_job() {
    let mut db = client();
    db.batch_execute(
        "DROP TABLE IF EXISTS jdbc_latest;
         CREATE TABLE jdbc_latest (user_id bigint PRIMARY KEY, amount bigint);",
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (ddl, rows) = orders(dir.path(), 20_000);
    let env = env(dir.path(), true);
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&ddl).unwrap();
    // `crash(x)` is x, slowed down (checkpoints complete while the job runs), and panics once
    // at the 12 000th row: the job restores its last checkpoint and goes on.
    let crash = fail_once_after::<i64>(12_000);
    let calls = std::sync::atomic::AtomicU64::new(0);
    sql.register_function(
        "crash",
        ScalarFunction::returning(DataType::BigInt, move |args| {
            if calls
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                .is_multiple_of(40)
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            match args {
                [Value::Int(v)] => Ok(Value::Int(crash(*v))),
                _ => Ok(Value::Null),
            }
        }),
    );
    // The largest order of each user, deleted when its count of orders is a multiple of 3 at
    // the end: a filter over an updating aggregate retracts (deletes) rows that stop passing.
    sql.execute_sql(&format!(
        "CREATE TABLE latest (user_id BIGINT, amount BIGINT, PRIMARY KEY (user_id) NOT ENFORCED)
         WITH ('connector' = 'jdbc', 'url' = '{url}', 'table-name' = 'jdbc_latest',
               'sink.delivery-guarantee' = 'exactly-once');
         INSERT INTO latest
           SELECT user_id, biggest FROM (
             SELECT user_id, MAX(crash(amount)) AS biggest, COUNT(*) AS n FROM orders GROUP BY user_id
           ) WHERE MOD(n, 3) <> 0;",
        url = url()
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let result = env.execute().unwrap();
    assert_eq!(result.restarts, 1);

    let mut groups: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    for &(user, amount, _) in &rows {
        let g = groups.entry(user).or_insert((i64::MIN, 0));
        g.0 = g.0.max(amount);
        g.1 += 1;
    }
    let expected: BTreeMap<i64, i64> = groups
        .into_iter()
        .filter(|(_, (_, n))| n % 3 != 0)
        .map(|(user, (biggest, _))| (user, biggest))
        .collect();
    assert!(expected.len() < 13, "some user's row must be deleted");
    let got: BTreeMap<i64, i64> = db
        .query("SELECT user_id, amount FROM jdbc_latest", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(got, expected);
    // The failed run committed checkpoints before it failed (its writers' last commits are
    // checkpoints, not the end of the input).
    let committed: i64 = db
        .query_one(
            "SELECT count(*) FROM riffle_sink_commits WHERE table_name = 'jdbc_latest' AND checkpoint_id < 9223372036854775807",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(committed > 0, "no checkpoint committed before the failure");
}

#[test]
fn a_bad_jdbc_table_is_refused_naming_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let (ddl, _) = orders(dir.path(), 10);
    let cases = [
        (
            "'url' = 'jdbc:mysql://x/y', 'table-name' = 't'",
            "only PostgreSQL",
        ),
        (
            "'url' = 'jdbc:postgresql://x/y'",
            "needs the option 'table-name'",
        ),
        (
            "'url' = 'jdbc:postgresql://x/y', 'table-name' = 't', 'sink.buffer-flush.interval' = 'soon'",
            "not a duration",
        ),
        (
            "'url' = 'jdbc:postgresql://x/y', 'table-name' = 't', 'lookup.cache' = 'PARTIAL'",
            "has no option 'lookup.cache'",
        ),
    ];
    for (options, message) in cases {
        let env = StreamEnv::new();
        let sql = SqlEnv::new(&env);
        sql.execute_sql(&ddl).unwrap();
        let err = sql
            .execute_sql(&format!(
                "CREATE TABLE out (user_id BIGINT, amount BIGINT) WITH ('connector' = 'jdbc', {options});
                 INSERT INTO out SELECT user_id, amount FROM orders;"
            ))
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(err.contains(message), "{options}: {err}");
    }
    // A table missing in the database: the job fails at start, naming 'table-name'.
    let env = StreamEnv::new();
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&ddl).unwrap();
    sql.execute_sql(&format!(
        "CREATE TABLE out (user_id BIGINT, amount BIGINT)
         WITH ('connector' = 'jdbc', 'url' = '{}', 'table-name' = 'jdbc_no_such_table');
         INSERT INTO out SELECT user_id, amount FROM orders;",
        url()
    ))
    .unwrap();
    let err = env.execute().unwrap_err().to_string();
    assert!(
        err.contains("table-name") && err.contains("no table `jdbc_no_such_table`"),
        "{err}"
    );
}

/// `postgres-cdc` in, `jdbc` out: a PostgreSQL table's snapshot and changes counted and summed
/// per category by SQL, written back by key exactly-once; under inserts, updates that move rows
/// between categories, and deletes, the result table ends equal to PostgreSQL's own `GROUP BY`
/// of the table.
#[test]
fn a_cdc_table_aggregated_into_postgres_equals_the_databases_own_aggregate() {
    let mut db = client();
    db.batch_execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = 'sql_cdc_products';
         DROP PUBLICATION IF EXISTS riffle_sql_cdc_products;
         DROP TABLE IF EXISTS sql_cdc_products, sql_cdc_totals;
         CREATE TABLE sql_cdc_products (id bigint PRIMARY KEY, category text, price numeric(10, 2), in_stock boolean);
         INSERT INTO sql_cdc_products SELECT i, 'c' || (i % 6), (i % 97) + 0.25, i % 2 = 0 FROM generate_series(1, 3000) i;
         CREATE TABLE sql_cdc_totals (category text PRIMARY KEY, products bigint, total numeric(12, 2), in_stock bigint);",
    )
    .unwrap();
    let config: postgres::Config = url().parse().unwrap();
    let pg = (
        match &config.get_hosts()[0] {
            postgres::config::Host::Tcp(host) => host.clone(),
            other => panic!("a TCP host: {other:?}"),
        },
        config.get_ports()[0],
        config.get_user().unwrap().to_string(),
        config.get_dbname().unwrap().to_string(),
    );
    let dir = tempfile::tempdir().unwrap();
    let env = env(dir.path(), false);
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&format!(
        "CREATE TABLE products (id BIGINT, category STRING, price DECIMAL(10, 2), in_stock BOOLEAN,
           PRIMARY KEY (id) NOT ENFORCED)
         WITH ('connector' = 'postgres-cdc', 'hostname' = '{host}', 'port' = '{port}',
               'username' = '{user}', 'database-name' = '{database}', 'schema-name' = 'public',
               'table-name' = 'sql_cdc_products', 'slot.name' = 'sql_cdc_products');
         CREATE TABLE totals (category STRING, products BIGINT, total DECIMAL(12, 2), in_stock BIGINT,
           PRIMARY KEY (category) NOT ENFORCED)
         WITH ('connector' = 'jdbc', 'url' = '{url}', 'table-name' = 'sql_cdc_totals',
               'sink.delivery-guarantee' = 'exactly-once');
         INSERT INTO totals
           SELECT category, COUNT(*), SUM(price), SUM(CASE WHEN in_stock THEN 1 ELSE 0 END)
           FROM products GROUP BY category;",
        host = pg.0,
        port = pg.1,
        user = pg.2,
        database = pg.3,
        url = url()
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let handle = env.execute_async().unwrap();
    let expected = "SELECT category, count(*), sum(price), sum(CASE WHEN in_stock THEN 1 ELSE 0 END) FROM sql_cdc_products GROUP BY category";
    let differing = |db: &mut Client| -> i64 {
        db.query_one(
            &format!(
                "SELECT count(*) FROM (({expected} EXCEPT TABLE sql_cdc_totals) UNION ALL (TABLE sql_cdc_totals EXCEPT {expected})) d"
            ),
            &[],
        )
        .unwrap()
        .get(0)
    };
    let wait = |db: &mut Client| {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while differing(db) != 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the totals never equalled the table's"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait(&mut db);
    db.batch_execute(
        "UPDATE sql_cdc_products SET category = 'c9', price = price + 1 WHERE id % 5 = 0;
         DELETE FROM sql_cdc_products WHERE id % 7 = 0;
         INSERT INTO sql_cdc_products SELECT i, 'new', 1.50, true FROM generate_series(3001, 3100) i;
         UPDATE sql_cdc_products SET in_stock = NOT in_stock WHERE id % 3 = 0;
         DELETE FROM sql_cdc_products WHERE category = 'c1';",
    )
    .unwrap();
    wait(&mut db);
    handle.stop();
    handle.wait().unwrap();
    db.batch_execute(
        "SELECT pg_drop_replication_slot('sql_cdc_products'); DROP PUBLICATION riffle_sql_cdc_products;",
    )
    .unwrap();
}
