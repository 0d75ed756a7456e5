//! Issue 31's acceptance: the seed's job reading Avro clicks from Kafka through the schema
//! registry (a schema change midway adds a field), writing a running total per user to
//! PostgreSQL (upserts, exactly-once) and per-user minute counts to a Delta Lake table, killed
//! with SIGKILL twice (mid-input, and once everything is committed) and restored each time:
//! the Postgres table (read with psql) and the Delta table (read with the `deltalake` package
//! and DuckDB) equal the batch answer over the input exactly.

use std::collections::BTreeMap;

use riffle_formats::{AvroEncoder, Schema, SchemaRegistry, Value};
use riffle_kafka::testing::{TestProducer, bootstrap};
use riffle_kafka::{KafkaConnection, ensure_topics};
use riffle_testing::duckdb::{delta_log, query as duckdb, read_parquet};

use crate::{Job, psql_test_server as psql, start_sql_job, wait_while_running};

const CLICK_V1: &str = r#"{"type":"record","name":"Click","namespace":"shop","fields":[
    {"name":"user_id","type":"string"},
    {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}}]}"#;
/// v1 and a field with a default: a compatible change, registered under the same subject.
const CLICK_V2: &str = r#"{"type":"record","name":"Click","namespace":"shop","fields":[
    {"name":"user_id","type":"string"},
    {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
    {"name":"country","type":["null","string"],"default":null}]}"#;

const CLICKS: i64 = 6_000;
/// Event time of click `n`: 100 ms apart from 2026-01-15 00:00:00 UTC.
const START: i64 = 1_768_435_200_000;

fn click(n: i64) -> (String, i64, Option<&'static str>) {
    let country = (n >= CLICKS / 2 && n % 3 != 0).then_some(["fr", "de", "jp"][(n % 3) as usize]);
    (format!("u{}", n * 7 % 23), START + 100 * n, country)
}

#[test]
fn avro_clicks_to_postgres_and_delta_survive_sigkill_and_equal_the_batch_answer() {
    let unique = format!("lake-{}-{}", std::process::id(), crate::kafka::now_ms());
    let topic = format!("clicks-{unique}");
    let pg_table = format!("totals_{}", unique.replace('-', "_"));
    ensure_topics(&KafkaConnection::new(bootstrap()), &[(&topic, 2)], 1).unwrap();
    psql(&format!(
        "CREATE TABLE {pg_table} (user_id text PRIMARY KEY, clicks bigint, with_country bigint)"
    ));
    let registry_url = std::env::var("RIFFLE_SCHEMA_REGISTRY_URL")
        .expect("RIFFLE_SCHEMA_REGISTRY_URL is not set: the README's test command starts one");
    let registry = SchemaRegistry::new(&registry_url).unwrap();
    let subject = format!("{topic}-value");
    let v1 =
        AvroEncoder::confluent(&registry, &subject, Schema::parse_str(CLICK_V1).unwrap()).unwrap();
    let producer = TestProducer::new(&[("linger.ms", "0")]);
    let send = |encoder: &AvroEncoder, n: i64, user: String, ts: i64, country: Option<&str>| {
        let mut fields = vec![
            ("user_id".to_string(), Value::String(user)),
            ("ts".to_string(), Value::TimestampMillis(ts)),
        ];
        if n >= CLICKS / 2 {
            fields.push((
                "country".to_string(),
                match country {
                    Some(c) => Value::Union(1, Box::new(Value::String(c.into()))),
                    None => Value::Union(0, Box::new(Value::Null)),
                },
            ));
        }
        let mut bytes = Vec::new();
        encoder
            .encode_value(&Value::Record(fields), &mut bytes)
            .unwrap();
        producer.send(&topic, (n % 2) as i32, None, &bytes);
    };
    for n in 0..CLICKS / 2 {
        let (user, ts, country) = click(n);
        send(&v1, n, user, ts, country);
    }
    producer.flush();

    let dir = tempfile::tempdir().unwrap();
    let delta = dir.path().join("delta");
    let job = dir.path().join("job.sql");
    std::fs::write(
        &job,
        format!(
            "CREATE TABLE clicks (user_id STRING, ts TIMESTAMP(3), country STRING,
               WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
             WITH ('connector' = 'kafka', 'topic' = '{topic}',
                   'properties.bootstrap.servers' = '{}', 'properties.group.id' = '{unique}',
                   'scan.startup.mode' = 'earliest-offset',
                   'format' = 'avro-confluent', 'avro-confluent.url' = '{registry_url}');
             CREATE TABLE totals (user_id STRING, clicks BIGINT, with_country BIGINT,
               PRIMARY KEY (user_id) NOT ENFORCED)
             WITH ('connector' = 'jdbc', 'url' = 'jdbc:{}', 'table-name' = '{pg_table}',
                   'sink.delivery-guarantee' = 'exactly-once');
             CREATE TABLE minutes (user_id STRING, window_start TIMESTAMP(3), clicks BIGINT, dt STRING)
               PARTITIONED BY (dt) WITH ('connector' = 'delta', 'table-path' = '{}');
             INSERT INTO totals
             SELECT user_id, COUNT(*), COUNT(country) FROM clicks WHERE user_id <> 'end' GROUP BY user_id;
             INSERT INTO minutes
             SELECT user_id, window_start, COUNT(*), DATE_FORMAT(window_start, 'HH')
             FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
             WHERE user_id <> 'end'
             GROUP BY user_id, window_start, window_end;",
            bootstrap(),
            std::env::var("RIFFLE_POSTGRES_URL").unwrap(),
            delta.display()
        ),
    )
    .unwrap();
    let start = |restore: bool| -> Job { start_sql_job(&job, dir.path(), restore) };
    let wait_for = |what: &str, job: &mut Job, done: &dyn Fn() -> bool| {
        wait_while_running(what, job, dir.path(), done)
    };

    // Killed mid-input, once a checkpoint committed to both sinks (the table's version 1:
    // the minutes the first half's watermark closed).
    let mut job = start(false);
    let first_commit = delta.join("_delta_log/00000000000000000001.json");
    wait_for("a commit to both", &mut job, &|| {
        first_commit.exists() && !psql(&format!("SELECT count(*) FROM {pg_table}")).starts_with('0')
    });
    job.kill();

    // The schema changes while the job is down: v2 adds `country`.
    let v2 =
        AvroEncoder::confluent(&registry, &subject, Schema::parse_str(CLICK_V2).unwrap()).unwrap();
    assert_ne!(v1.schema_id(), v2.schema_id());
    for n in CLICKS / 2..CLICKS {
        let (user, ts, country) = click(n);
        send(&v2, n, user, ts, country);
    }
    // A click an hour later on each partition moves the watermark past every window.
    for partition in 0..2 {
        send(
            &v2,
            CLICKS + partition,
            "end".into(),
            START + 3_600_000,
            None,
        );
    }
    producer.flush();

    // The batch answer.
    let mut totals: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    let mut minutes: BTreeMap<(String, i64), i64> = BTreeMap::new();
    for n in 0..CLICKS {
        let (user, ts, country) = click(n);
        let total = totals.entry(user.clone()).or_default();
        total.0 += 1;
        total.1 += i64::from(country.is_some());
        *minutes.entry((user, ts - ts % 60_000)).or_default() += 1;
    }
    let expected_totals: String = totals
        .iter()
        .map(|(user, (clicks, with))| format!("{user}|{clicks}|{with}\n"))
        .collect();
    let expected_minutes: Vec<String> = minutes
        .iter()
        .map(|((user, minute), clicks)| format!("{user}|{minute}|{clicks}"))
        .collect();
    let pg = || {
        psql(&format!(
            "SELECT user_id, clicks, with_country FROM {pg_table} ORDER BY user_id"
        ))
    };
    let lake = || {
        let log = delta_log(&delta);
        duckdb(&format!(
            "SELECT user_id, epoch_ms(window_start), clicks FROM {} ORDER BY user_id, window_start",
            read_parquet(&log.files, false)
        ))
    };

    // Restored: it reads the rest, both versions of the schema, and catches up.
    let mut job = start(true);
    wait_for("the batch answer in Postgres", &mut job, &|| {
        pg() == expected_totals
    });
    wait_for("the batch answer in the Delta table", &mut job, &|| {
        lake() == expected_minutes
    });
    // Killed again with everything committed, restored once more: nothing is written twice.
    job.kill();
    let log_before = delta_log(&delta).version;
    let restarted = std::time::SystemTime::now();
    let mut job = start(true);
    wait_for("a checkpoint after the second restore", &mut job, &|| {
        std::fs::read_dir(dir.path().join("checkpoints")).is_ok_and(|entries| {
            entries.flatten().any(|e| {
                e.metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t > restarted)
            })
        })
    });
    job.kill();
    assert_eq!(pg(), expected_totals);
    assert_eq!(lake(), expected_minutes);
    let log = delta_log(&delta);
    assert_eq!(log.version, log_before, "no commit without new input");
    let mut names: Vec<_> = log.files.iter().map(|f| f.file_name().unwrap()).collect();
    let count = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), count, "a file in the Delta log twice");
    psql(&format!("DROP TABLE {pg_table}"));
}
