//! Avro through Kafka (the test broker and registry of `scripts/test.sh`): an exactly-once job
//! reads a topic of two schema versions and a few bad records, and writes Avro under a
//! registered schema; Debezium's Avro events become a changelog.

mod common;

use std::time::Duration;

use common::{registry, unique};
use riffle::checkpoint::CheckpointConfig;
use riffle::sink::CollectSink;
use riffle::testing::eventually;
use riffle::{Change, EnvConfig, RowKind, StreamEnv};
use riffle_formats::{AvroDecoder, AvroEncoder, AvroSchema, Schema, SubjectNameStrategy, Value};
use riffle_kafka::testing::{TestProducer, bootstrap, read_committed};
use riffle_kafka::{KafkaConnection, KafkaSink, KafkaSource, StartFrom, ensure_topics};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, AvroSchema)]
struct Click {
    user_id: String,
    ts: i64,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, AvroSchema)]
struct Tagged {
    user_id: String,
    ts: i64,
    country: String,
}

const TAGGED_WITH_DEFAULT: &str = r#"{"type":"record","name":"Click","fields":[
    {"name":"user_id","type":"string"},
    {"name":"ts","type":"long"},
    {"name":"country","type":"string","default":"unknown"}]}"#;

fn kafka() -> KafkaConnection {
    KafkaConnection::new(bootstrap())
}

fn topic(name: &str, partitions: i32) -> String {
    let topic = unique(name);
    ensure_topics(&kafka(), &[(&topic, partitions)], 1).expect("create topic");
    topic
}

#[test]
fn an_exactly_once_job_reads_two_schema_versions_and_writes_registered_avro() {
    let registry = registry();
    let input = topic("avro-in", 2);
    let output = topic("avro-out", 2);
    let v1 =
        AvroEncoder::confluent(&registry, &format!("{input}-value"), Click::get_schema()).unwrap();
    let v2_schema = Schema::parse_str(TAGGED_WITH_DEFAULT).unwrap();
    let v2 =
        AvroEncoder::confluent(&registry, &format!("{input}-value"), v2_schema.clone()).unwrap();
    let producer = TestProducer::new(&[("linger.ms", "0")]);
    let mut expected = Vec::new();
    for n in 0..1000i64 {
        let mut bytes = Vec::new();
        if n % 2 == 0 {
            v1.encode(
                &Click {
                    user_id: format!("u{}", n % 7),
                    ts: n,
                },
                &mut bytes,
            )
            .unwrap();
            expected.push(Tagged {
                user_id: format!("u{}", n % 7),
                ts: n,
                country: "unknown".into(),
            });
        } else {
            let tagged = Tagged {
                user_id: format!("u{}", n % 7),
                ts: n,
                country: "fr".into(),
            };
            v2.encode(&tagged, &mut bytes).unwrap();
            expected.push(tagged);
        }
        producer.send(&input, (n % 2) as i32, None, &bytes);
    }
    // JSON where Avro was expected, and an id the registry never gave.
    producer.send(&input, 0, None, br#"{"user_id":"u1","ts":1}"#);
    producer.send(&input, 1, None, &[0, 0x7f, 0, 0, 1, 2, b'x', 0]);
    producer.flush();

    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::with_config(EnvConfig {
        parallelism: 2,
        checkpoints: CheckpointConfig {
            interval: Some(Duration::from_millis(300)),
            storage: dir.path().display().to_string(),
            ..CheckpointConfig::default()
        },
        ..EnvConfig::default()
    });
    let decoder = AvroDecoder::confluent(&registry).reader_schema(v2_schema);
    let clicks = env.from_source(
        KafkaSource::with_decoder(kafka(), [input.clone()], decoder.into_fn::<Tagged>())
            .group_id(format!("{input}-group"))
            .start_from(StartFrom::Earliest),
    );
    let (dead, letters) = CollectSink::new();
    clicks.dead_letters().sink(dead);
    let subject = SubjectNameStrategy::TopicName
        .subject(&output, false, &Tagged::get_schema())
        .unwrap();
    let encoder = AvroEncoder::confluent(&registry, &subject, Tagged::get_schema()).unwrap();
    clicks.sink(
        KafkaSink::with_encoder(kafka(), &output, encoder.clone().into_fn::<Tagged>())
            .key(|t: &Tagged| t.user_id.clone())
            .exactly_once(),
    );
    let job = env.execute_async().unwrap();
    let written = read_committed(&output, Duration::from_secs(60), |n, _| n >= 1000);
    let two_letters = eventually(Duration::from_secs(30), || letters.values().len() == 2);
    assert!(
        two_letters,
        "{} written, dead letters: {:?}",
        written.len(),
        letters.values().iter().take(3).collect::<Vec<_>>()
    );
    job.stop();
    let result = job.wait().unwrap();

    // Every record once, in the registry's wire format under the output subject's schema.
    let reader = AvroDecoder::confluent(&registry);
    let mut got: Vec<Tagged> = written
        .iter()
        .map(|record| {
            assert_eq!(
                AvroDecoder::frame(&record.bytes).unwrap().0,
                encoder.schema_id().unwrap()
            );
            reader.decode(&record.bytes).unwrap()
        })
        .collect();
    got.sort_by_key(|t| t.ts);
    assert_eq!(got, expected);
    let mut reasons: Vec<String> = letters.values().into_iter().map(|l| l.error).collect();
    reasons.sort();
    assert!(reasons[0].contains("first byte is 0x7b"), "{reasons:?}");
    assert!(
        reasons[1].contains("no schema of id 2130706433"),
        "{reasons:?}"
    );
    assert_eq!(result.bad_records(), 2);
}

#[test]
fn debezium_avro_events_are_a_changelog() {
    let registry = registry();
    let row = r#"{"type":"record","name":"Value","namespace":"shop.public.users","fields":[
        {"name":"id","type":"int"},{"name":"city","type":"string"}]}"#;
    let envelope = Schema::parse_str(&format!(
        r#"{{"type":"record","name":"Envelope","namespace":"shop.public.users","fields":[
            {{"name":"before","type":["null",{row}],"default":null}},
            {{"name":"after","type":["null","shop.public.users.Value"],"default":null}},
            {{"name":"op","type":"string"}},
            {{"name":"ts_ms","type":["null","long"],"default":null}}]}}"#
    ))
    .unwrap();
    let subject = unique("shop.public.users-value");
    let encoder = AvroEncoder::confluent(&registry, &subject, envelope).unwrap();
    let user = |id: i32, city: &str| {
        Value::Union(
            1,
            Box::new(Value::Record(vec![
                ("id".into(), Value::Int(id)),
                ("city".into(), Value::String(city.into())),
            ])),
        )
    };
    let none = || Value::Union(0, Box::new(Value::Null));
    let event = |before: Value, after: Value, op: &str| {
        let mut bytes = Vec::new();
        encoder
            .encode_value(
                &Value::Record(vec![
                    ("before".into(), before),
                    ("after".into(), after),
                    ("op".into(), Value::String(op.into())),
                    ("ts_ms".into(), Value::Union(1, Box::new(Value::Long(7)))),
                ]),
                &mut bytes,
            )
            .unwrap();
        bytes
    };
    #[derive(Clone, Debug, PartialEq, Deserialize)]
    struct User {
        id: i32,
        city: String,
    }
    let decoder = AvroDecoder::confluent(&registry);
    let read = |bytes: Option<&[u8]>| riffle_formats::debezium::decode::<User>(&decoder, bytes);
    let u = |id, city: &str| User {
        id,
        city: city.into(),
    };
    assert_eq!(
        read(Some(&event(none(), user(1, "paris"), "r"))).unwrap(),
        vec![Change::insert(u(1, "paris"))]
    );
    let update = read(Some(&event(user(1, "paris"), user(1, "rome"), "u"))).unwrap();
    assert_eq!(
        update
            .iter()
            .map(|c| (c.op, c.row.clone()))
            .collect::<Vec<_>>(),
        vec![
            (RowKind::UpdateBefore, u(1, "paris")),
            (RowKind::UpdateAfter, u(1, "rome"))
        ]
    );
    assert_eq!(
        read(Some(&event(user(1, "rome"), none(), "d"))).unwrap(),
        vec![Change::delete(u(1, "rome"))]
    );
    assert!(
        read(None).unwrap().is_empty(),
        "a tombstone changes nothing"
    );
    let err = read(Some(&event(none(), none(), "u"))).unwrap_err();
    assert!(err.contains("REPLICA IDENTITY FULL"), "{err}");
    let err = read(Some(&event(none(), user(2, "oslo"), "x"))).unwrap_err();
    assert!(err.contains("\"op\" is \"x\""), "{err}");
}
