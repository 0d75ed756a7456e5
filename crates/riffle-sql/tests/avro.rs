//! `'format' = 'avro-confluent'` and `'debezium-avro-confluent'` in SQL, against the test
//! broker and schema registry (`./scripts/test.sh` starts both): a topic holding two versions
//! of a schema (and a record that is not Avro) read by name-matched columns, written back
//! under the table's registered schema; Debezium's Avro events counted as a changelog; bad
//! registry settings refused when the job is planned.

#![cfg(feature = "avro")]

use std::time::{Duration, Instant};

use riffle::change::RetractTable;
use riffle::checkpoint::CheckpointConfig;
use riffle::sink::CollectSink;
use riffle::{EnvConfig, StreamEnv};
use riffle_formats::{AvroDecoder, AvroEncoder, Schema, SchemaRegistry, Value};
use riffle_kafka::testing::{TestProducer, bootstrap, read_committed};
use riffle_kafka::{KafkaConnection, ensure_topics};
use riffle_sql::SqlEnv;

mod common;

fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("sql-{name}-{}-{nanos}", std::process::id())
}

fn registry_url() -> String {
    std::env::var("RIFFLE_SCHEMA_REGISTRY_URL").expect(
        "RIFFLE_SCHEMA_REGISTRY_URL is not set: start a registry with `./scripts/schema-registry.sh start && eval \"$(./scripts/schema-registry.sh env)\"` (the README's test command does)",
    )
}

fn checkpointed_env(dir: &std::path::Path) -> StreamEnv {
    StreamEnv::with_config(
        EnvConfig::default()
            .with_parallelism(2)
            .with_dead_letter_dir(dir.join("dead-letter"))
            .with_checkpoints(
                CheckpointConfig::default()
                    .with_interval(Some(Duration::from_millis(300)))
                    .with_storage(dir.join("checkpoints").display().to_string()),
            ),
    )
}

const CLICK_V1: &str = r#"{"type":"record","name":"Click","namespace":"shop","fields":[
    {"name":"user_id","type":"string"},
    {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}}]}"#;
const CLICK_V2: &str = r#"{"type":"record","name":"Click","namespace":"shop","fields":[
    {"name":"user_id","type":"string"},
    {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
    {"name":"country","type":["null","string"],"default":null},
    {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}}]}"#;

fn record(fields: Vec<(&str, Value)>) -> Value {
    Value::Record(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

#[test]
fn an_avro_topic_of_two_versions_is_read_by_name_and_written_as_registered_avro() {
    let (input, output) = (unique("avro-clicks"), unique("avro-out"));
    let kafka = KafkaConnection::new(bootstrap());
    ensure_topics(&kafka, &[(&input, 2), (&output, 2)], 1).unwrap();
    let registry = SchemaRegistry::new(&registry_url()).unwrap();
    let subject = format!("{input}-value");
    let v1 =
        AvroEncoder::confluent(&registry, &subject, Schema::parse_str(CLICK_V1).unwrap()).unwrap();
    // v2 adds a nullable field (compatible), and a decimal, whose lack of a default the
    // registry refuses for this subject: v2 goes under a subject of its own.
    let v2 = AvroEncoder::confluent(
        &registry,
        &format!("{subject}-v2"),
        Schema::parse_str(CLICK_V2).unwrap(),
    )
    .unwrap();
    let producer = TestProducer::new(&[("linger.ms", "0")]);
    let mut expected = Vec::new();
    for n in 0..200i64 {
        let user = format!("u{}", n % 5);
        let mut bytes = Vec::new();
        if n % 2 == 0 {
            v1.encode_value(
                &record(vec![
                    ("user_id", Value::String(user.clone())),
                    ("ts", Value::TimestampMillis(1_000 * n)),
                ]),
                &mut bytes,
            )
            .unwrap();
            expected.push(format!("{user} NULL {} NULL", 1_000 * n));
        } else {
            let cents = 1999 * n - 100_000;
            v2.encode_value(
                &record(vec![
                    ("user_id", Value::String(user.clone())),
                    ("ts", Value::TimestampMillis(1_000 * n)),
                    (
                        "country",
                        Value::Union(1, Box::new(Value::String("fr".into()))),
                    ),
                    (
                        "price",
                        Value::Decimal(riffle_formats::apache_avro::Decimal::from(
                            (cents as i32).to_be_bytes(),
                        )),
                    ),
                ]),
                &mut bytes,
            )
            .unwrap();
            let sign = if cents < 0 { "-" } else { "" };
            expected.push(format!(
                "{user} FR {} {sign}{}.{:02}",
                1_000 * n,
                cents.abs() / 100,
                cents.abs() % 100
            ));
        }
        producer.send(&input, (n % 2) as i32, None, &bytes);
    }
    producer.send(&input, 0, None, br#"{"user_id":"json"}"#);
    producer.flush();

    let dir = tempfile::tempdir().unwrap();
    let env = checkpointed_env(dir.path());
    let sql = SqlEnv::new(&env);
    let (brokers, url) = (bootstrap(), registry_url());
    sql.execute_sql(&format!(
        "CREATE TABLE clicks (user_id STRING, country STRING, ts TIMESTAMP(3), price DECIMAL(9, 2))
         WITH ('connector' = 'kafka', 'topic' = '{input}',
               'properties.bootstrap.servers' = '{brokers}', 'scan.startup.mode' = 'earliest-offset',
               'format' = 'avro-confluent', 'avro-confluent.url' = '{url}');
         CREATE TABLE tagged (user_id STRING NOT NULL, country STRING, ts TIMESTAMP(3), price DECIMAL(9, 2))
         WITH ('connector' = 'kafka', 'topic' = '{output}',
               'properties.bootstrap.servers' = '{brokers}', 'format' = 'avro-confluent',
               'avro-confluent.url' = '{url}', 'sink.delivery-guarantee' = 'exactly-once');
         INSERT INTO tagged SELECT user_id, UPPER(country), ts, price FROM clicks;"
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    // The table's schema is registered when the job is planned, before it runs.
    let out_schema = AvroEncoder::confluent_registered(
        &registry,
        &format!("{output}-value"),
        Schema::parse_str(
            r#"{"type":"record","name":"record","namespace":"org.apache.flink.avro.generated","fields":[
            {"name":"user_id","type":"string"},
            {"name":"country","type":["null","string"],"default":null},
            {"name":"ts","type":["null",{"type":"long","logicalType":"timestamp-millis"}],"default":null},
            {"name":"price","type":["null",{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}],"default":null}]}"#,
        )
        .unwrap(),
    );
    assert!(out_schema.is_ok(), "{:?}", out_schema.err());
    let handle = env.execute_async().unwrap();
    let written = read_committed(&output, Duration::from_secs(60), |n, _| n >= 200);
    let deadline = Instant::now() + Duration::from_secs(30);
    while handle
        .metrics()
        .operators
        .iter()
        .map(|o| o.bad_records)
        .sum::<u64>()
        < 1
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    handle.stop();
    let result = handle.wait().unwrap();

    let decoder = AvroDecoder::confluent(&registry);
    let text = |v: &Value| match v {
        Value::Union(_, inner) if **inner == Value::Null => "NULL".to_string(),
        Value::Union(_, inner) => match &**inner {
            Value::String(s) => s.clone(),
            Value::TimestampMillis(ms) => ms.to_string(),
            Value::Decimal(d) => {
                let bytes: Vec<u8> = Vec::try_from(d).unwrap();
                let mut wide = [if bytes[0] & 0x80 != 0 { 0xff } else { 0 }; 8];
                wide[8 - bytes.len()..].copy_from_slice(&bytes);
                let cents = i64::from_be_bytes(wide);
                let sign = if cents < 0 { "-" } else { "" };
                format!("{sign}{}.{:02}", cents.abs() / 100, cents.abs() % 100)
            }
            other => format!("{other:?}"),
        },
        Value::String(s) => s.clone(),
        other => format!("{other:?}"),
    };
    let mut got: Vec<String> = written
        .iter()
        .map(|r| {
            let Value::Record(fields) = decoder.decode_value(&r.bytes).unwrap() else {
                panic!("a record")
            };
            fields
                .iter()
                .map(|(_, v)| text(v))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    got.sort();
    expected.sort();
    assert_eq!(got, expected);
    assert_eq!(result.bad_records(), 1);
}

#[test]
fn debezium_avro_events_are_counted_as_a_changelog() {
    let users = unique("avro-cdc-users");
    let kafka = KafkaConnection::new(bootstrap());
    ensure_topics(&kafka, &[(&users, 2)], 1).unwrap();
    let registry = SchemaRegistry::new(&registry_url()).unwrap();
    let envelope = Schema::parse_str(
        r#"{"type":"record","name":"Envelope","namespace":"shop.public.users","fields":[
        {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
            {"name":"id","type":"long"},{"name":"city","type":"string"}]}],"default":null},
        {"name":"after","type":["null","Value"],"default":null},
        {"name":"op","type":"string"},
        {"name":"ts_ms","type":["null","long"],"default":null}]}"#,
    )
    .unwrap();
    let encoder = AvroEncoder::confluent(&registry, &format!("{users}-value"), envelope).unwrap();
    let row = |id: i64, city: &str| {
        Value::Union(
            1,
            Box::new(record(vec![
                ("id", Value::Long(id)),
                ("city", Value::String(city.into())),
            ])),
        )
    };
    let null = || Value::Union(0, Box::new(Value::Null));
    let events = [
        (1, null(), row(1, "paris"), "r"),
        (2, null(), row(2, "rome"), "c"),
        (3, null(), row(3, "rome"), "c"),
        (1, row(1, "paris"), row(1, "rome"), "u"),
        (2, row(2, "rome"), null(), "d"),
    ];
    let producer = TestProducer::new(&[]);
    for (id, before, after, op) in events {
        let mut bytes = Vec::new();
        encoder
            .encode_value(
                &record(vec![
                    ("before", before),
                    ("after", after),
                    ("op", Value::String(op.into())),
                    ("ts_ms", null()),
                ]),
                &mut bytes,
            )
            .unwrap();
        producer.send(&users, id % 2, Some(id.to_string().as_bytes()), &bytes);
    }
    producer.send_tombstone(&users, 0, b"2");
    producer.send(&users, 1, None, b"not avro");
    producer.flush();

    let dir = tempfile::tempdir().unwrap();
    let env = checkpointed_env(dir.path());
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&format!(
        "CREATE TABLE users (id BIGINT, city STRING)
         WITH ('connector' = 'kafka', 'topic' = '{users}',
               'properties.bootstrap.servers' = '{}', 'scan.startup.mode' = 'earliest-offset',
               'format' = 'debezium-avro-confluent', 'debezium-avro-confluent.url' = '{}');",
        bootstrap(),
        registry_url()
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
    while (applied() != expected
        || handle
            .metrics()
            .operators
            .iter()
            .map(|o| o.bad_records)
            .sum::<u64>()
            < 1)
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    handle.stop();
    let result = handle.wait().unwrap();
    assert_eq!(applied(), expected);
    assert_eq!(result.bad_records(), 1);
}

#[test]
fn registry_settings_that_cannot_work_fail_when_the_job_is_planned() {
    let env = StreamEnv::new();
    let sql = SqlEnv::new(&env);
    let table = |options: &str| {
        format!(
            "CREATE TABLE t (a STRING) WITH ('connector' = 'kafka', 'topic' = 't',
                 'properties.bootstrap.servers' = '{}', 'format' = 'avro-confluent'{options});
             SELECT a FROM t;",
            bootstrap()
        )
    };
    let err = sql.execute_sql(&table("")).unwrap_err().to_string();
    assert!(
        err.contains("needs the option 'avro-confluent.url'"),
        "{err}"
    );
    let err = SqlEnv::new(&env)
        .execute_sql(&table(", 'avro-confluent.url' = 'http://127.0.0.1:9/'"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("'avro-confluent.url'") && err.contains("does not answer"),
        "{err}"
    );
    // A table schema the subject's compatibility rule refuses: at planning, naming the subject.
    let topic = unique("avro-guarded");
    let registry = SchemaRegistry::new(&registry_url()).unwrap();
    AvroEncoder::confluent(
        &registry,
        &format!("{topic}-value"),
        Schema::parse_str(r#"{"type":"record","name":"record","namespace":"org.apache.flink.avro.generated","fields":[{"name":"a","type":"long"}]}"#).unwrap(),
    )
    .unwrap();
    let err = SqlEnv::new(&env)
        .execute_sql(&format!(
            "CREATE TABLE g (a STRING NOT NULL, b BIGINT NOT NULL) WITH ('connector' = 'kafka', 'topic' = '{topic}',
                 'properties.bootstrap.servers' = '{}', 'format' = 'avro-confluent',
                 'avro-confluent.url' = '{}');
             CREATE TABLE src (a STRING NOT NULL, b BIGINT NOT NULL)
             WITH ('connector' = 'datagen', 'number-of-rows' = '1');
             INSERT INTO g SELECT a, b FROM src;",
            bootstrap(),
            registry_url()
        ))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("{topic}-value")) && err.contains("incompatible"),
        "{err}"
    );
}

#[test]
fn protobuf_and_json_schema_topics_are_read_by_column_name() {
    use riffle_formats::SchemaKind;
    let (protos, documents) = (unique("proto-clicks"), unique("json-clicks"));
    let kafka = KafkaConnection::new(bootstrap());
    ensure_topics(&kafka, &[(&protos, 1), (&documents, 1)], 1).unwrap();
    let registry = SchemaRegistry::new(&registry_url()).unwrap();
    let proto_id = registry
        .register_text(
            &format!("{protos}-value"),
            SchemaKind::Protobuf,
            r#"syntax = "proto3"; message Click { string user_id = 1; int64 n = 2; string extra = 3; }"#,
            &[],
        )
        .unwrap();
    let json_id = registry
        .register_text(
            &format!("{documents}-value"),
            SchemaKind::Json,
            r#"{"type": "object", "properties": {"user_id": {"type": "string"}, "n": {"type": "integer"}},
                "required": ["user_id", "n"]}"#,
            &[],
        )
        .unwrap();
    let framed = |id: u32, rest: &[u8]| {
        let mut bytes = vec![0];
        bytes.extend_from_slice(&id.to_be_bytes());
        bytes.extend_from_slice(rest);
        bytes
    };
    let producer = TestProducer::new(&[]);
    for n in 1..=3u8 {
        // Click { user_id: "u<n>", n: <n> }, the file's first message (a lone 0).
        producer.send(
            &protos,
            0,
            None,
            &framed(proto_id, &[0, 0x0a, 2, b'u', b'0' + n, 0x10, n]),
        );
        let doc = format!(r#"{{"user_id": "u{n}", "n": {n}}}"#);
        producer.send(&documents, 0, None, &framed(json_id, doc.as_bytes()));
    }
    // A document its schema refuses: a dead letter, not a row.
    producer.send(
        &documents,
        0,
        None,
        &framed(json_id, br#"{"user_id": "u9"}"#),
    );
    producer.flush();

    let dir = tempfile::tempdir().unwrap();
    for (topic, format) in [(&protos, "proto-registry"), (&documents, "json-registry")] {
        // The refused document goes to the dead letters, kept out of the source tree.
        let env = StreamEnv::with_config(
            EnvConfig::default().with_dead_letter_dir(dir.path().join(format!("dead-{format}"))),
        );
        let sql = SqlEnv::new(&env);
        sql.execute_sql(&format!(
            "CREATE TABLE clicks (user_id STRING, n BIGINT)
             WITH ('connector' = 'kafka', 'topic' = '{topic}',
                   'properties.bootstrap.servers' = '{}', 'scan.startup.mode' = 'earliest-offset',
                   'format' = '{format}', '{format}.url' = '{}');",
            bootstrap(),
            registry_url()
        ))
        .unwrap_or_else(|e| panic!("{format}: {e}"));
        let (changes, _) = sql
            .sql_changelog("SELECT user_id, n * 10 AS tens FROM clicks")
            .unwrap_or_else(|e| panic!("{format}: {e}"));
        let (sink, out) = CollectSink::new();
        changes.sink(sink);
        let handle = env.execute_async().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while out.values().len() < 3 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        handle.stop();
        let result = handle.wait().unwrap();
        let mut rows: Vec<String> = out
            .values()
            .iter()
            .map(|c| common::row_text(&c.row))
            .collect();
        rows.sort();
        assert_eq!(rows, ["[u1, 10]", "[u2, 20]", "[u3, 30]"], "{format}");
        if format == "json-registry" {
            assert_eq!(result.bad_records(), 1, "{format}");
        }
    }
}
