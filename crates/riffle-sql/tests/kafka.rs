//! The `kafka` connector in SQL, against the test broker (`./scripts/test.sh` starts it): the
//! seed's clicks per user and minute from a topic into a topic, exactly-once, and an updating
//! query's changelog as Debezium JSON; the rows read back `read_committed` equal a batch
//! computation, and a line that is not a row is a dead letter.

#![cfg(feature = "kafka")]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use riffle::checkpoint::CheckpointConfig;
use riffle::source::datagen::Generator;
use riffle::{EnvConfig, StreamEnv};
use riffle_clicks::{ClickGenerator, ClicksConfig};
use riffle_kafka::testing::{TestProducer, bootstrap, read_committed};
use riffle_kafka::{KafkaConnection, ensure_topics};
use riffle_sql::SqlEnv;

mod common;

/// A topic name of this run.
fn topic(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("sql-{name}-{}-{nanos}", std::process::id())
}

/// A job at parallelism `p` checkpointing every 300 ms into `dir`, dead letters there too.
fn checkpointed_env(dir: &std::path::Path, p: usize) -> StreamEnv {
    StreamEnv::with_config(
        EnvConfig::default()
            .with_parallelism(p)
            .with_dead_letter_dir(dir.join("dead-letter"))
            .with_checkpoints(
                CheckpointConfig::default()
                    .with_interval(Some(Duration::from_millis(300)))
                    .with_storage(dir.join("checkpoints").display().to_string()),
            ),
    )
}

#[test]
fn clicks_per_user_and_minute_go_from_a_topic_to_a_topic_exactly_once() {
    let (input, counts, totals) = (topic("clicks"), topic("counts"), topic("totals"));
    let kafka = KafkaConnection::new(bootstrap());
    ensure_topics(&kafka, &[(&input, 3), (&counts, 2), (&totals, 2)], 1).unwrap();
    // 3 000 clicks of 50 users over about 3 minutes, in order, and one line that is no click.
    let generator = ClickGenerator::new(ClicksConfig {
        users: 50,
        late_share: 0.0,
        events_per_second: 17.0,
        ..ClicksConfig::default()
    });
    let clicks: Vec<_> = (0..3_000).map(|i| generator.generate(i)).collect();
    let producer = TestProducer::new(&[("linger.ms", "5")]);
    for (i, click) in clicks.iter().enumerate() {
        let line = serde_json::to_string(click).unwrap();
        producer.send(&input, (i % 3) as i32, None, line.as_bytes());
    }
    producer.send(&input, 0, None, b"{\"user_id\": \"not a number\"");
    // The stream goes on: a click of user 999 two minutes later in every partition moves the
    // watermark past the last window of the clicks above (a stop does not fire open windows).
    let later = clicks.iter().map(|c| c.event_time).max().unwrap() + 120_000;
    let mut closing = clicks[0].clone();
    closing.user_id = 999;
    closing.event_time = later;
    for partition in 0..3 {
        let line = serde_json::to_string(&closing).unwrap();
        producer.send(&input, partition, None, line.as_bytes());
    }
    producer.flush();
    let lines = clicks.len() + 3;

    let dir = tempfile::tempdir().unwrap();
    let env = checkpointed_env(dir.path(), 2);
    let sql = SqlEnv::new(&env);
    let brokers = bootstrap();
    sql.execute_sql(&format!(
        "CREATE TABLE clicks (
             user_id BIGINT, url VARCHAR, user_agent VARCHAR, ip VARCHAR, event_time TIMESTAMP(3),
             WATERMARK FOR event_time AS event_time - INTERVAL '5' SECOND
         ) WITH ('connector' = 'kafka', 'topic' = '{input}',
                 'properties.bootstrap.servers' = '{brokers}',
                 'properties.group.id' = 'sql-test-{input}',
                 'scan.startup.mode' = 'earliest-offset', 'format' = 'json');
         CREATE TABLE counts (user_id BIGINT, window_start TIMESTAMP(3), clicks BIGINT)
         WITH ('connector' = 'kafka', 'topic' = '{counts}',
               'properties.bootstrap.servers' = '{brokers}', 'format' = 'json',
               'key.fields' = 'user_id', 'sink.delivery-guarantee' = 'exactly-once');
         CREATE TABLE totals (user_id BIGINT, clicks BIGINT)
         WITH ('connector' = 'kafka', 'topic' = '{totals}',
               'properties.bootstrap.servers' = '{brokers}', 'format' = 'debezium-json',
               'sink.delivery-guarantee' = 'exactly-once');
         INSERT INTO counts
         SELECT user_id, window_start, COUNT(*)
         FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(event_time), INTERVAL '1' MINUTE))
         GROUP BY user_id, window_start, window_end;
         INSERT INTO totals SELECT user_id, COUNT(*) FROM clicks GROUP BY user_id;"
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let mut per_window: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    let mut per_user: BTreeMap<i64, i64> = BTreeMap::new();
    for click in &clicks {
        let user = click.user_id as i64;
        let start = click.event_time - click.event_time.rem_euclid(60_000);
        *per_window.entry((user, start)).or_default() += 1;
        *per_user.entry(user).or_default() += 1;
    }
    let handle = env.execute_async().unwrap();
    // Every line read (the bad one as a dead letter) and every closed window's count at the
    // sink (the closing clicks' watermark fired them: a stop does not), then the stop commits
    // the last transaction. Each INSERT reads the table (two scans).
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let metrics = handle.metrics();
        let sources = metrics
            .operators
            .iter()
            .filter(|o| o.name.starts_with("Source: clicks"));
        let read: u64 = sources.clone().map(|o| o.records_out).sum();
        let bad: u64 = sources.map(|o| o.bad_records).sum();
        let counted: u64 = metrics
            .operators
            .iter()
            .filter(|o| o.name == "Sink: counts")
            .map(|o| o.records_in)
            .sum();
        if read as usize == 2 * lines && bad == 2 && counted as usize >= per_window.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "read {read} of {} clicks, {bad} bad, {counted} of {} window counts at the sink",
            2 * lines,
            per_window.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    handle.stop();
    let result = handle.wait().unwrap();
    assert_eq!(result.bad_records(), 2);

    // The window counts: one row per user and window, keyed by the user.
    let rows = read_committed(&counts, Duration::from_secs(60), |n, quiet| {
        n >= per_window.len() && quiet > Duration::from_secs(2)
    });
    let mut got: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    for row in &rows {
        let value: serde_json::Value = serde_json::from_str(&row.value).unwrap();
        let user = value["user_id"].as_i64().unwrap();
        assert_eq!(row.key, format!("{{\"user_id\":{user}}}"));
        let start =
            riffle_sql::format::parse_timestamp(value["window_start"].as_str().unwrap()).unwrap();
        let previous = got.insert((user, start), value["clicks"].as_i64().unwrap());
        assert!(previous.is_none(), "a window written twice: {value}");
    }
    // User 999's window never closed (nothing came after it); every other one is there once.
    assert_eq!(got, per_window);
    per_user.insert(999, 3);
    // The running totals: a changelog, each change keyed by its row (no key.fields), applied
    // as a multiset: a `d` takes back a row a `c` added before it, and what is left is one row
    // per user, its total.
    let changes = read_committed(&totals, Duration::from_secs(60), |_, quiet| {
        quiet > Duration::from_secs(2)
    });
    let mut rows: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    for change in &changes {
        let value: serde_json::Value = serde_json::from_str(&change.value).unwrap();
        let (row, by) = match value["op"].as_str() {
            Some("c") => (&value["after"], 1),
            Some("d") => (&value["before"], -1),
            other => panic!("op {other:?} in {value}"),
        };
        let key: serde_json::Value = serde_json::from_str(&change.key).unwrap();
        assert_eq!(&key, row, "a change is keyed by its row");
        let key = (
            row["user_id"].as_i64().unwrap(),
            row["clicks"].as_i64().unwrap(),
        );
        let count = rows.entry(key).or_default();
        *count += by;
        assert!(*count >= 0, "{value} takes back a row that is not there");
    }
    let table: BTreeMap<i64, i64> = rows
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|((user, clicks), n)| {
            assert_eq!(n, 1, "user {user}'s total {clicks} is there {n} times");
            (user, clicks)
        })
        .collect();
    assert_eq!(table, per_user);
}

#[test]
fn bad_kafka_options_fail_naming_the_option() {
    let env = StreamEnv::new();
    let sql = SqlEnv::new(&env);
    let error = |options: &str| {
        sql.execute_sql(&format!(
            "CREATE TABLE t (a BIGINT) WITH ('connector' = 'kafka', {options});
             SELECT a FROM t;"
        ))
        .err()
        .unwrap()
        .to_string()
    };
    assert!(
        error("'topic' = 'x'").contains("needs the option 'properties.bootstrap.servers'"),
        "{}",
        error("'topic' = 'x'")
    );
    let mode = error(
        "'topic' = 'x', 'properties.bootstrap.servers' = '127.0.0.1:1', 'scan.startup.mode' = 'soon'",
    );
    assert!(mode.contains("'scan.startup.mode' = 'soon'"), "{mode}");
    let format =
        error("'topic' = 'x', 'properties.bootstrap.servers' = '127.0.0.1:1', 'format' = 'avro'");
    assert!(format.contains("'format' = 'avro'"), "{format}");
    let bounded = error(
        "'topic' = 'x', 'properties.bootstrap.servers' = '127.0.0.1:1', 'scan.bounded.mode' = 'timestamp'",
    );
    assert!(
        bounded.contains("'scan.bounded.timestamp-millis'"),
        "{bounded}"
    );
    let bounded = error(
        "'topic' = 'x', 'properties.bootstrap.servers' = '127.0.0.1:1', 'scan.bounded.mode' = 'someday'",
    );
    assert!(
        bounded.contains("'scan.bounded.mode' = 'someday'"),
        "{bounded}"
    );
    let offsets = error(
        "'topic' = 'x', 'properties.bootstrap.servers' = '127.0.0.1:1', 'scan.bounded.mode' = 'specific-offsets', 'scan.bounded.specific-offsets' = 'partition:0'",
    );
    assert!(
        offsets.contains("'scan.bounded.specific-offsets' = 'partition:0'"),
        "{offsets}"
    );
}

/// `'scan.bounded.mode' = 'latest-offset'`: the table holds what the topic held when the job
/// started, and a statement over it ends by itself, with the batch answer.
#[test]
fn a_bounded_kafka_table_ends_with_what_the_topic_held_at_the_start() {
    let orders = topic("bounded-orders");
    let kafka = KafkaConnection::new(bootstrap());
    ensure_topics(&kafka, &[(&orders, 2)], 1).unwrap();
    let producer = TestProducer::new(&[]);
    for n in 0..100i64 {
        let order = format!(r#"{{"customer":"c{}","amount":{n}}}"#, n % 3);
        producer.send(&orders, (n % 2) as i32, None, order.as_bytes());
    }
    producer.flush();
    let changes = bounded_changes(
        &format!(
            "CREATE TABLE orders (customer STRING, amount BIGINT)
             WITH ('connector' = 'kafka', 'topic' = '{orders}',
                   'properties.bootstrap.servers' = '{}', 'scan.startup.mode' = 'earliest-offset',
                   'scan.bounded.mode' = 'latest-offset', 'format' = 'json');",
            bootstrap()
        ),
        "SELECT customer, SUM(amount) AS total FROM orders GROUP BY customer",
    );
    let mut totals: BTreeMap<String, i64> = BTreeMap::new();
    for change in changes {
        let (riffle_sql::Value::String(customer), riffle_sql::Value::Int(total)) =
            (change.row.get(0), change.row.get(1))
        else {
            panic!("not a (customer, total) row: {change:?}");
        };
        let (customer, total) = (customer.to_string(), *total);
        match change.op {
            riffle::change::RowKind::Insert | riffle::change::RowKind::UpdateAfter => {
                totals.insert(customer, total);
            }
            _ => {}
        }
    }
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    for n in 0..100i64 {
        *expected.entry(format!("c{}", n % 3)).or_default() += n;
    }
    assert_eq!(totals, expected);
}

/// `upsert-kafka` in and out, as Flink's connector: a compacted topic of users by id (upserts,
/// a move to another city, a tombstone, a repeated value) normalized into a changelog, counted
/// per city, and the counts written by key, exactly-once: a count that falls to nothing is a
/// tombstone of its city, and so is a city that a filter after the count no longer passes.
/// At p = 1 over one partition the exact records are known.
#[test]
fn upsert_kafka_reads_upserts_and_tombstones_and_writes_counts_by_key() {
    let (users, per_city, big) = (topic("users"), topic("per-city"), topic("big-cities"));
    let kafka = KafkaConnection::new(bootstrap());
    ensure_topics(&kafka, &[(&users, 1), (&per_city, 1), (&big, 1)], 1).unwrap();
    let producer = TestProducer::new(&[]);
    let upsert = |id: i64, name: &str, city: &str| {
        let value = format!(r#"{{"id": {id}, "name": "{name}", "city": "{city}"}}"#);
        producer.send(
            &users,
            0,
            Some(format!(r#"{{"id":{id}}}"#).as_bytes()),
            value.as_bytes(),
        );
    };
    upsert(1, "ann", "paris");
    upsert(1, "ann", "rome"); // ann moves: paris falls to nothing
    upsert(2, "bob", "rome");
    upsert(3, "cid", "paris");
    producer.send_tombstone(&users, 0, br#"{"id":2}"#); // bob is deleted
    upsert(3, "cid", "paris"); // the same row again: no change
    producer.send_tombstone(&users, 0, br#"{"id":9}"#); // a key never seen: nothing
    producer.send(
        &users,
        0,
        None,
        br#"{"id": 4, "name": "no key", "city": "oslo"}"#,
    );
    producer.flush();

    let dir = tempfile::tempdir().unwrap();
    let env = checkpointed_env(dir.path(), 1);
    let sql = SqlEnv::new(&env);
    let brokers = bootstrap();
    sql.execute_sql(&format!(
        "CREATE TABLE users (id BIGINT, name STRING, city STRING, PRIMARY KEY (id) NOT ENFORCED)
         WITH ('connector' = 'upsert-kafka', 'topic' = '{users}',
               'properties.bootstrap.servers' = '{brokers}',
               'key.format' = 'json', 'value.format' = 'json');
         CREATE TABLE per_city (city STRING, people BIGINT, PRIMARY KEY (city) NOT ENFORCED)
         WITH ('connector' = 'upsert-kafka', 'topic' = '{per_city}',
               'properties.bootstrap.servers' = '{brokers}',
               'key.format' = 'json', 'value.format' = 'json',
               'sink.delivery-guarantee' = 'exactly-once');
         INSERT INTO per_city SELECT city, COUNT(*) FROM users GROUP BY city;
         CREATE TABLE big_cities (city STRING, people BIGINT, PRIMARY KEY (city) NOT ENFORCED)
         WITH ('connector' = 'upsert-kafka', 'topic' = '{big}',
               'properties.bootstrap.servers' = '{brokers}',
               'key.format' = 'json', 'value.format' = 'json');
         INSERT INTO big_cities
           SELECT city, people FROM (SELECT city, COUNT(*) AS people FROM users GROUP BY city)
           WHERE people > 1;"
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let handle = env.execute_async().unwrap();
    let records = read_committed(&per_city, Duration::from_secs(120), |n, quiet| {
        n >= 6 && quiet > Duration::from_secs(2)
    });
    let big_records = read_committed(&big, Duration::from_secs(120), |n, quiet| {
        n >= 2 && quiet > Duration::from_secs(1)
    });
    handle.stop();
    let result = handle.wait().unwrap();
    let got: Vec<(String, Option<String>)> = records
        .iter()
        .map(|r| (r.key.clone(), (!r.tombstone).then(|| r.value.clone())))
        .collect();
    let record = |city: &str, people: Option<i64>| {
        (
            format!(r#"{{"city":"{city}"}}"#),
            people.map(|n| format!(r#"{{"city":"{city}","people":{n}}}"#)),
        )
    };
    assert_eq!(
        got,
        [
            record("paris", Some(1)),
            record("paris", None),
            record("rome", Some(1)),
            record("rome", Some(2)),
            record("paris", Some(1)),
            record("rome", Some(1)),
        ]
    );
    // Rome's count falls from 2 to 1: the filter passes the `-U` of 2 and drops the `+U` of 1;
    // the `-U` alone deletes the key (a tombstone), it is not dropped as a `-U` before its `+U`.
    let got: Vec<(String, Option<String>)> = big_records
        .iter()
        .map(|r| (r.key.clone(), (!r.tombstone).then(|| r.value.clone())))
        .collect();
    assert_eq!(got, [record("rome", Some(2)), record("rome", None)]);
    // The message without a key is a bad record, not a row: of each of the two statements'
    // scans of `users` (a source is read once per statement that reads it).
    assert_eq!(result.bad_records(), 2);
}

#[test]
fn upsert_kafka_tables_need_a_primary_key_and_both_formats() {
    let env = StreamEnv::new();
    let sql = SqlEnv::new(&env);
    let error = |columns: &str, options: &str| {
        sql.execute_sql(&format!(
            "CREATE TABLE u ({columns}) WITH ('connector' = 'upsert-kafka', 'topic' = 'x',
               'properties.bootstrap.servers' = '127.0.0.1:1'{options});
             SELECT * FROM u;"
        ))
        .err()
        .unwrap()
        .to_string()
    };
    let formats = ", 'key.format' = 'json', 'value.format' = 'json'";
    let no_key = error("a BIGINT, b BIGINT", formats);
    assert!(no_key.contains("needs a PRIMARY KEY"), "{no_key}");
    let no_format = error("a BIGINT, b BIGINT, PRIMARY KEY (a) NOT ENFORCED", "");
    assert!(
        no_format.contains("('connector' = 'upsert-kafka') needs the option 'key.format'"),
        "{no_format}"
    );
    let avro = error(
        "a BIGINT, b BIGINT, PRIMARY KEY (a) NOT ENFORCED",
        ", 'key.format' = 'json', 'value.format' = 'avro'",
    );
    assert!(avro.contains("'value.format' = 'avro'"), "{avro}");
}

/// A topic of Debezium JSON events (`'format' = 'debezium-json'`), as Debezium's PostgreSQL
/// connector writes them: creates, an update moving a row to another group, a delete followed
/// by its tombstone (a message without a value), and a bad event; counted per city, the
/// changelog applied ends at the counts of the table's final rows.
#[test]
fn a_debezium_topic_is_read_as_a_changelog() {
    use riffle::change::RetractTable;
    use riffle::sink::CollectSink;
    let users = topic("cdc-users");
    let kafka = KafkaConnection::new(bootstrap());
    ensure_topics(&kafka, &[(&users, 2)], 1).unwrap();
    let producer = TestProducer::new(&[]);
    let row = |id: i64, city: &str| format!(r#"{{"id":{id},"city":"{city}"}}"#);
    let events = [
        (
            1,
            format!(r#"{{"before":null,"after":{},"op":"r"}}"#, row(1, "paris")),
        ),
        (
            2,
            format!(r#"{{"before":null,"after":{},"op":"c"}}"#, row(2, "rome")),
        ),
        (
            3,
            format!(r#"{{"before":null,"after":{},"op":"c"}}"#, row(3, "rome")),
        ),
        (
            1,
            format!(
                r#"{{"before":{},"after":{},"op":"u"}}"#,
                row(1, "paris"),
                row(1, "rome")
            ),
        ),
        (
            2,
            format!(r#"{{"before":{},"after":null,"op":"d"}}"#, row(2, "rome")),
        ),
        (
            4,
            r#"{"before":null,"after":{"id":"four"},"op":"c"}"#.to_string(),
        ),
    ];
    for (id, event) in &events {
        let key = format!(r#"{{"id":{id}}}"#);
        producer.send(&users, id % 2, Some(key.as_bytes()), event.as_bytes());
    }
    producer.send_tombstone(&users, 0, br#"{"id":2}"#);
    producer.flush();

    let dir = tempfile::tempdir().unwrap();
    let env = checkpointed_env(dir.path(), 2);
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&format!(
        "CREATE TABLE users (id BIGINT, city STRING)
         WITH ('connector' = 'kafka', 'topic' = '{users}',
               'properties.bootstrap.servers' = '{}', 'scan.startup.mode' = 'earliest-offset',
               'format' = 'debezium-json');",
        bootstrap()
    ))
    .unwrap();
    let (changes, _) = sql
        .sql_changelog("SELECT city, COUNT(*) AS people FROM users GROUP BY city")
        .unwrap_or_else(|e| panic!("{e}"));
    let (sink, out) = CollectSink::new();
    changes.sink(sink);
    let handle = env.execute_async().unwrap();
    let applied = || {
        let mut table = RetractTable::new();
        table.apply_all(out.values()).unwrap();
        let mut rows: Vec<String> = table.rows().iter().map(common::row_text).collect();
        rows.sort();
        rows
    };
    let expected = ["[rome, 2]"];
    let deadline = Instant::now() + Duration::from_secs(60);
    while applied() != expected && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    handle.stop();
    let result = handle.wait().unwrap();
    assert_eq!(applied(), expected);
    assert_eq!(result.bad_records(), 1);
}

/// The changes `select` gives over the tables `create` defines, run at p = 2 until the
/// statement ends by itself (its tables are bounded).
fn bounded_changes(create: &str, select: &str) -> Vec<riffle::Change<riffle_sql::Row>> {
    use riffle::sink::CollectSink;
    let env = StreamEnv::with_config(EnvConfig::default().with_parallelism(2));
    let sql = SqlEnv::new(&env);
    sql.execute_sql(create).unwrap_or_else(|e| panic!("{e}"));
    let (rows, _) = sql.sql_changelog(select).unwrap_or_else(|e| panic!("{e}"));
    let (sink, out) = CollectSink::new();
    rows.sink(sink);
    let job = env.execute_async().unwrap();
    assert!(
        riffle::testing::eventually(Duration::from_secs(120), || job.is_finished()),
        "a statement over bounded tables ends ({create})"
    );
    job.wait().unwrap_or_else(|e| panic!("{create}: {e}"));
    out.values()
}

/// The values of a bounded read of `topic` (its one column `n`), by the table's `bounded`
/// options, from the earliest offsets.
fn bounded_read(topic: &str, bounded: &str) -> Vec<i64> {
    let create = format!(
        "CREATE TABLE t (n BIGINT)
         WITH ('connector' = 'kafka', 'topic' = '{topic}',
               'properties.bootstrap.servers' = '{}', 'properties.group.id' = '{topic}',
               'scan.startup.mode' = 'earliest-offset', {bounded}, 'format' = 'json');",
        bootstrap()
    );
    let mut values: Vec<i64> = bounded_changes(&create, "SELECT n FROM t")
        .iter()
        .map(|change| match change.row.get(0) {
            riffle_sql::Value::Int(n) => *n,
            other => panic!("{other:?}"),
        })
        .collect();
    values.sort_unstable();
    values
}

/// Flink's other bounded modes: `specific-offsets`, `timestamp` and `group-offsets` each read
/// each partition up to where they say, looked up at the start, and the statement ends.
#[test]
fn a_kafka_table_is_bounded_by_given_offsets_by_a_time_or_by_the_groups_offsets() {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    let numbers = topic("bounded-modes");
    let kafka = KafkaConnection::new(bootstrap());
    ensure_topics(&kafka, &[(&numbers, 2)], 1).unwrap();
    // Record i of each partition is written at base + i ms; partition 1's values are 1000 + i.
    let base = 1_700_000_000_000i64;
    let producer = TestProducer::new(&[]);
    for i in 0..100i64 {
        for partition in 0..2 {
            let value = format!(r#"{{"n": {}}}"#, i64::from(partition) * 1000 + i);
            producer.send_at(&numbers, partition, value.as_bytes(), base + i);
        }
    }
    producer.flush();
    let upto =
        |p0: i64, p1: i64| -> Vec<i64> { (0..p0).chain((0..p1).map(|i| 1000 + i)).collect() };

    let specific = bounded_read(
        &numbers,
        "'scan.bounded.mode' = 'specific-offsets', 'scan.bounded.specific-offsets' = 'partition:0,offset:10;partition:1,offset:25'",
    );
    assert_eq!(specific, upto(10, 25));
    // A partition not named stops at its latest offset.
    let one = bounded_read(
        &numbers,
        "'scan.bounded.mode' = 'specific-offsets', 'scan.bounded.specific-offsets' = 'partition:1,offset:3'",
    );
    assert_eq!(one, upto(100, 3));
    let timestamp = bounded_read(
        &numbers,
        &format!(
            "'scan.bounded.mode' = 'timestamp', 'scan.bounded.timestamp-millis' = '{}'",
            base + 40
        ),
    );
    assert_eq!(timestamp, upto(40, 40));
    // The group's committed offsets (here committed by hand: 7 and 60).
    let committer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", &numbers)
        .create()
        .unwrap();
    let mut offsets = rdkafka::TopicPartitionList::new();
    offsets
        .add_partition_offset(&numbers, 0, rdkafka::Offset::Offset(7))
        .unwrap();
    offsets
        .add_partition_offset(&numbers, 1, rdkafka::Offset::Offset(60))
        .unwrap();
    committer.commit(&offsets, CommitMode::Sync).unwrap();
    let group = bounded_read(&numbers, "'scan.bounded.mode' = 'group-offsets'");
    assert_eq!(group, upto(7, 60));
}
