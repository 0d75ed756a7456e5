//! The decoder and encoder against a real schema registry (Apicurio Registry's Confluent API,
//! started by `scripts/test.sh`): the wire format byte by byte, schema evolution both ways,
//! refusals (incompatible schemas, unknown ids, bytes of other formats) as errors that say why,
//! and the subject name strategies.

mod common;

use common::{registry, unique};
use riffle_formats::{
    AvroDecoder, AvroEncoder, AvroSchema, FormatError, Schema, SubjectNameStrategy, Value,
};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, AvroSchema)]
struct Click {
    user_id: String,
    ts: i64,
}

/// `Click` and a field `country` with a default: what a producer's next version adds.
const CLICK_V2: &str = r#"{"type":"record","name":"Click","fields":[
    {"name":"user_id","type":"string"},
    {"name":"ts","type":"long"},
    {"name":"country","type":"string","default":"unknown"}]}"#;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct ClickV2 {
    user_id: String,
    ts: i64,
    country: String,
}

#[test]
fn records_are_framed_with_the_registered_id_and_read_back() {
    let registry = registry();
    let subject = unique("clicks-value");
    let encoder = AvroEncoder::confluent(&registry, &subject, Click::get_schema()).unwrap();
    let id = encoder.schema_id().unwrap();
    let mut bytes = Vec::new();
    encoder
        .encode(
            &Click {
                user_id: "u1".into(),
                ts: 5,
            },
            &mut bytes,
        )
        .unwrap();
    // The wire format by hand: magic 0, the id big-endian, then the datum: "u1" (zig-zag
    // length 2 = 0x04, the bytes) and 5 (zig-zag 10 = 0x0a).
    let [a, b, c, d] = id.to_be_bytes();
    assert_eq!(bytes, [0, a, b, c, d, 0x04, b'u', b'1', 0x0a]);
    // Registering the same schema again is the same id.
    let again = AvroEncoder::confluent(&registry, &subject, Click::get_schema()).unwrap();
    assert_eq!(again.schema_id(), Some(id));

    let decoder = AvroDecoder::confluent(&registry);
    let click: Click = decoder.decode(&bytes).unwrap();
    assert_eq!(
        click,
        Click {
            user_id: "u1".into(),
            ts: 5
        }
    );
    let generic = decoder.decode_value(&bytes).unwrap();
    assert_eq!(
        generic,
        Value::Record(vec![
            ("user_id".into(), Value::String("u1".into())),
            ("ts".into(), Value::Long(5)),
        ])
    );
    // A decoder that never saw the id fetches it: a fresh client of the same registry.
    let fresh = AvroDecoder::confluent(&common::registry()).reader_schema(Click::get_schema());
    assert_eq!(fresh.decode::<Click>(&bytes).unwrap(), click);
}

#[test]
fn old_and_new_versions_read_with_either_schema() {
    let registry = registry();
    let subject = unique("evolving-value");
    let v1 = AvroEncoder::confluent(&registry, &subject, Click::get_schema()).unwrap();
    let v2_schema = Schema::parse_str(CLICK_V2).unwrap();
    let v2 = AvroEncoder::confluent(&registry, &subject, v2_schema.clone()).unwrap();
    assert_ne!(v1.schema_id(), v2.schema_id());
    let mut old = Vec::new();
    v1.encode(
        &Click {
            user_id: "a".into(),
            ts: 1,
        },
        &mut old,
    )
    .unwrap();
    let mut new = Vec::new();
    v2.encode(
        &ClickV2 {
            user_id: "b".into(),
            ts: 2,
            country: "fr".into(),
        },
        &mut new,
    )
    .unwrap();

    // A job on the new schema reads old records with the new field's default.
    let on_v2 = AvroDecoder::confluent(&registry).reader_schema(v2_schema);
    assert_eq!(
        on_v2.decode::<ClickV2>(&old).unwrap(),
        ClickV2 {
            user_id: "a".into(),
            ts: 1,
            country: "unknown".into()
        }
    );
    assert_eq!(on_v2.decode::<ClickV2>(&new).unwrap().country, "fr");
    // A job still on the old schema reads new records without the field it does not know.
    let on_v1 = AvroDecoder::confluent(&registry).reader_schema(Click::get_schema());
    assert_eq!(
        on_v1.decode::<Click>(&new).unwrap(),
        Click {
            user_id: "b".into(),
            ts: 2
        }
    );
    // A reader schema with a field neither writer has, without a default, cannot read them:
    // the error says so once per writer schema, in words.
    let strict = Schema::parse_str(
        r#"{"type":"record","name":"Click","fields":[
            {"name":"user_id","type":"string"},{"name":"plan","type":"string"}]}"#,
    )
    .unwrap();
    let err = AvroDecoder::confluent(&registry)
        .reader_schema(strict)
        .decode::<Click>(&old)
        .unwrap_err();
    assert!(matches!(err, FormatError::Schema(_)), "{err}");
    assert!(err.to_string().contains("cannot be read"), "{err}");
}

#[test]
fn the_registry_refuses_an_incompatible_version_and_the_encoder_says_so() {
    let registry = registry();
    let subject = unique("guarded-value");
    AvroEncoder::confluent(&registry, &subject, Click::get_schema()).unwrap();
    // A new required field (no default) cannot read the old records: BACKWARD refuses it.
    let breaking = Schema::parse_str(
        r#"{"type":"record","name":"Click","fields":[
            {"name":"user_id","type":"string"},{"name":"ts","type":"long"},
            {"name":"plan","type":"string"}]}"#,
    )
    .unwrap();
    let err = AvroEncoder::confluent(&registry, &subject, breaking)
        .err()
        .expect("refused");
    match &err {
        FormatError::Incompatible { subject: s, .. } => assert_eq!(s, &subject),
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains("incompatible"), "{err}");
}

#[test]
fn bad_bytes_and_unknown_ids_are_errors_saying_why() {
    let registry = registry();
    let decoder = AvroDecoder::confluent(&registry).reader_schema(Click::get_schema());
    let reason = |bytes: &[u8]| decoder.decode::<Click>(bytes).unwrap_err().to_string();
    assert!(reason(b"{\"user_id\":\"u1\"}").contains("first byte is 0x7b"));
    assert!(reason(&[0, 0, 1]).contains("fewer than the 5"));
    assert!(reason(&[]).contains("no bytes"));
    assert!(reason(&[0, 0x7f, 0xff, 0xff, 0x00, 2, b'x']).contains("no schema of id 2147483392"));

    let subject = unique("bytes-value");
    let encoder = AvroEncoder::confluent(&registry, &subject, Click::get_schema()).unwrap();
    let mut good = Vec::new();
    encoder
        .encode(
            &Click {
                user_id: "u1".into(),
                ts: 5,
            },
            &mut good,
        )
        .unwrap();
    // Cut short, and with bytes after the datum.
    assert!(reason(&good[..good.len() - 1]).contains("does not read"));
    let mut long = good.clone();
    long.push(0);
    assert!(reason(&long).contains("1 bytes left after the datum"));
    // Every prefix and every single-byte corruption of a record is an answer, never a panic.
    for end in 0..good.len() {
        let _ = decoder.decode::<Click>(&good[..end]);
    }
    for at in 5..good.len() {
        for byte in [0x00, 0x01, 0x7f, 0x80, 0xff] {
            let mut bad = good.clone();
            bad[at] = byte;
            let _ = decoder.decode::<Click>(&bad);
        }
    }
}

#[test]
fn subjects_follow_the_strategy_and_a_lookup_needs_the_schema_registered() {
    let registry = registry();
    let name = unique("Order").replace('-', "_");
    let schema = Schema::parse_str(&format!(
        r#"{{"type":"record","name":"{name}","namespace":"com.acme","fields":[{{"name":"id","type":"long"}}]}}"#
    ))
    .unwrap();
    let subject = SubjectNameStrategy::RecordName
        .subject("orders", false, &schema)
        .unwrap();
    assert_eq!(subject, format!("com.acme.{name}"));
    assert_eq!(
        SubjectNameStrategy::TopicRecordName
            .subject("orders", true, &schema)
            .unwrap(),
        format!("orders-com.acme.{name}")
    );
    assert_eq!(
        SubjectNameStrategy::TopicName
            .subject("orders", true, &schema)
            .unwrap(),
        "orders-key"
    );
    // Not registered yet: a producer that may not register is told so at start.
    let err = AvroEncoder::confluent_registered(&registry, &subject, schema.clone())
        .err()
        .expect("not registered");
    assert!(matches!(err, FormatError::NotRegistered { .. }), "{err}");
    let registered = AvroEncoder::confluent(&registry, &subject, schema.clone()).unwrap();
    let looked_up = AvroEncoder::confluent_registered(&registry, &subject, schema).unwrap();
    assert_eq!(registered.schema_id(), looked_up.schema_id());
}

#[test]
fn a_registry_url_that_is_not_one_fails_the_check_naming_it() {
    let registry = registry();
    registry.check().unwrap();
    let wrong_path = format!("{}/nowhere", registry.url());
    let err = riffle_formats::SchemaRegistry::new(&wrong_path)
        .unwrap()
        .check()
        .unwrap_err()
        .to_string();
    assert!(err.contains(&wrong_path), "{err}");
    let closed = riffle_formats::SchemaRegistry::new("http://127.0.0.1:9/")
        .unwrap()
        .check()
        .unwrap_err()
        .to_string();
    assert!(closed.contains("does not answer"), "{closed}");
}

#[test]
fn plain_datums_round_trip_without_a_registry() {
    let encoder = AvroEncoder::plain(Click::get_schema()).unwrap();
    let mut bytes = Vec::new();
    encoder
        .encode(
            &Click {
                user_id: "u1".into(),
                ts: 5,
            },
            &mut bytes,
        )
        .unwrap();
    assert_eq!(bytes, [0x04, b'u', b'1', 0x0a]);
    let decoder =
        AvroDecoder::plain(Click::get_schema()).reader_schema(Schema::parse_str(CLICK_V2).unwrap());
    assert_eq!(
        decoder.decode::<ClickV2>(&bytes).unwrap(),
        ClickV2 {
            user_id: "u1".into(),
            ts: 5,
            country: "unknown".into()
        }
    );
    // A value that does not fit the schema fails, and leaves the buffer as it was.
    let mut out = vec![9];
    let err = encoder.encode(&("not", "a click"), &mut out).unwrap_err();
    assert!(matches!(err, FormatError::Encode(_)), "{err}");
    assert_eq!(out, [9]);
}
