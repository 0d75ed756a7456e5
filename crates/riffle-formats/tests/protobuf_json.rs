//! Protobuf and JSON Schema records through the test schema registry (`scripts/test.sh`
//! starts it): the wire format's message-index path (nested messages), a `.proto` importing
//! another registered one by reference, Google's well-known types, and documents a JSON
//! Schema refuses, each an error saying why.

mod common;

use common::{registry, unique};
use riffle_formats::json_schema::JsonSchemaDecoder;
use riffle_formats::protobuf::ProtobufDecoder;
use riffle_formats::{SchemaKind, SchemaReference};
use serde_json::json;

/// The registry's framing: magic byte, the id, then `rest` (indexes and message, or JSON).
fn framed(id: u32, rest: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0];
    bytes.extend_from_slice(&id.to_be_bytes());
    bytes.extend_from_slice(rest);
    bytes
}

#[test]
fn protobuf_records_name_their_message_and_read_imports_by_reference() {
    let registry = registry();
    let money_subject = unique("money.proto");
    registry
        .register_text(
            &money_subject,
            SchemaKind::Protobuf,
            r#"syntax = "proto3"; package shop; message Money { string currency = 1; int64 cents = 2; }"#,
            &[],
        )
        .unwrap();
    let order_subject = unique("orders-value");
    let id = registry
        .register_text(
            &order_subject,
            SchemaKind::Protobuf,
            r#"syntax = "proto3"; package shop;
               import "money.proto";
               import "google/protobuf/timestamp.proto";
               message Click { string user_id = 1; }
               message Order {
                 int64 id = 1;
                 message Line { string sku = 1; shop.Money price = 2; }
                 repeated Line lines = 2;
                 google.protobuf.Timestamp at = 3;
               }"#,
            &[SchemaReference {
                name: "money.proto".into(),
                subject: money_subject,
                version: 1,
            }],
        )
        .unwrap();
    let decoder = ProtobufDecoder::confluent(&registry);

    // Order (index path [1]: zig-zag count 1 = 0x02, index 1 = 0x02): id 7, one line
    // { sku "a", price { "EUR", 250 } }, at { seconds 60 }.
    let price = [0x0a, 3, b'E', b'U', b'R', 0x10, 0xfa, 0x01];
    let mut line = vec![0x0a, 1, b'a', 0x12, price.len() as u8];
    line.extend_from_slice(&price);
    let mut order = vec![0x08, 7, 0x12, line.len() as u8];
    order.extend_from_slice(&line);
    order.extend_from_slice(&[0x1a, 2, 0x08, 60]);
    let mut rest = vec![0x02, 0x02];
    rest.extend_from_slice(&order);
    assert_eq!(
        decoder.decode_json(&framed(id, &rest)).unwrap(),
        json!({"id": 7, "lines": [{"sku": "a", "price": {"currency": "EUR", "cents": 250}}],
               "at": "1970-01-01T00:01:00Z"})
    );
    // Order.Line itself (path [1, 0]: count 2 = 0x04, 1 = 0x02, 0 = 0x00).
    let mut rest = vec![0x04, 0x02, 0x00];
    rest.extend_from_slice(&line);
    assert_eq!(
        decoder.decode_json(&framed(id, &rest)).unwrap()["price"]["cents"],
        json!(250)
    );
    // The first message (a lone 0), into a serde type.
    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct Click {
        user_id: String,
    }
    let click: Click = decoder
        .decode(&framed(id, &[0x00, 0x0a, 2, b'u', b'1']))
        .unwrap();
    assert_eq!(
        click,
        Click {
            user_id: "u1".into()
        }
    );
    // A path to no message, and an id the registry never gave.
    let err = decoder
        .decode_json(&framed(id, &[0x02, 0x0a, 0x00]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("no message at index path [5]"), "{err}");
    let err = decoder
        .decode_json(&framed(0x7f00_0002, &[0]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("no schema of id"), "{err}");
}

#[test]
fn json_schema_records_are_checked_against_their_registered_schema() {
    let registry = registry();
    let id = registry
        .register_text(
            &unique("clicks-json-value"),
            SchemaKind::Json,
            r#"{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                "properties": {"user_id": {"type": "string"}, "ts": {"type": "integer"}},
                "required": ["user_id", "ts"]}"#,
            &[],
        )
        .unwrap();
    let decoder = JsonSchemaDecoder::confluent(&registry);
    assert_eq!(
        decoder
            .decode_json(&framed(id, br#"{"user_id": "u1", "ts": 5}"#))
            .unwrap(),
        json!({"user_id": "u1", "ts": 5})
    );
    let err = decoder
        .decode_json(&framed(id, br#"{"user_id": 1, "ts": 5}"#))
        .unwrap_err()
        .to_string();
    assert!(err.contains("refuses it at `/user_id`"), "{err}");
    // A record framed with an Avro schema's id is not JSON Schema's.
    let avro = registry
        .register_text(
            &unique("avro-value"),
            SchemaKind::Avro,
            r#"{"type": "record", "name": "R", "fields": []}"#,
            &[],
        )
        .unwrap();
    let err = decoder
        .decode_json(&framed(avro, b"{}"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("not JSON Schema"), "{err}");
    let err = ProtobufDecoder::confluent(&registry)
        .decode_json(&framed(avro, &[0]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("not Protobuf"), "{err}");
}
