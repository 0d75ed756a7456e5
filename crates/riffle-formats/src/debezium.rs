//! Debezium's change events in Avro (its `io.debezium.connector.*.Envelope` records through the
//! schema registry) read as a changelog, by the rules of [`riffle::change::debezium`]: `c`/`r`
//! insert `after`, `u` retracts `before` and adds `after`, `d` retracts `before`; a tombstone
//! (no value) changes nothing.
//!
//! ```no_run
//! use riffle_formats::{AvroDecoder, SchemaRegistry};
//! use riffle_kafka::{KafkaConnection, KafkaSource};
//! #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
//! struct User { id: i32, city: String }
//! let decoder = AvroDecoder::confluent(&SchemaRegistry::new("http://127.0.0.1:8081")?);
//! let events = KafkaSource::with_record_decoder(
//!     KafkaConnection::new("127.0.0.1:9092"),
//!     ["shop.public.users"],
//!     move |_key, value| riffle_formats::debezium::decode::<User>(&decoder, value),
//! );
//! # Ok::<(), riffle_formats::FormatError>(())
//! ```

use apache_avro::from_value;
use apache_avro::types::Value;
use riffle::Change;
use serde::de::DeserializeOwned;

use crate::AvroDecoder;

/// The changes of one event (`None`: a tombstone) as rows of `T`.
pub fn decode<T: DeserializeOwned>(
    decoder: &AvroDecoder,
    event: Option<&[u8]>,
) -> Result<Vec<Change<T>>, String> {
    decode_values(decoder, event, |row| {
        from_value(&row).map_err(|e| e.to_string())
    })
}

/// The changes of one event, each row (a generic Avro record) read by `row`.
pub fn decode_values<R>(
    decoder: &AvroDecoder,
    event: Option<&[u8]>,
    mut row: impl FnMut(Value) -> Result<R, String>,
) -> Result<Vec<Change<R>>, String> {
    let Some(bytes) = event else {
        return Ok(Vec::new());
    };
    let Value::Record(fields) = decoder.decode_value(bytes).map_err(|e| e.to_string())? else {
        return Err("a Debezium event is an Avro record".to_string());
    };
    let mut op = None;
    let mut before = None;
    let mut after = None;
    for (name, value) in fields {
        match name.as_str() {
            "op" => op = Some(value),
            "before" => before = present(value),
            "after" => after = present(value),
            _ => {}
        }
    }
    let op = match op.map(unwrap_union) {
        Some(Value::String(op)) | Some(Value::Enum(_, op)) => op,
        _ => return Err("a Debezium event needs an `op` string field".to_string()),
    };
    riffle::change::debezium::changes(&op, |image| {
        let value = if image == "before" {
            before.take()
        } else {
            after.take()
        };
        value.map(&mut row).transpose()
    })
}

fn unwrap_union(value: Value) -> Value {
    match value {
        Value::Union(_, inner) => *inner,
        other => other,
    }
}

/// A row image, unless it is null.
fn present(value: Value) -> Option<Value> {
    match unwrap_union(value) {
        Value::Null => None,
        row => Some(row),
    }
}
