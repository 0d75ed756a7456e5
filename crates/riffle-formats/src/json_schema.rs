//! JSON records validated against a JSON Schema: in the registry's wire format (a zero byte,
//! the schema id, then the JSON document; what Confluent's `KafkaJsonSchemaSerializer` writes)
//! or plain JSON checked against one given schema. A document the schema refuses is an error
//! naming where and why (the source's bad-record reason), as is one that is not JSON.
//!
//! ```no_run
//! use riffle_formats::SchemaRegistry;
//! use riffle_formats::json_schema::JsonSchemaDecoder;
//! #[derive(Debug, serde::Deserialize)]
//! struct Click { user_id: String, ts: i64 }
//! let decoder = JsonSchemaDecoder::confluent(&SchemaRegistry::new("http://127.0.0.1:8081")?);
//! # let bytes: &[u8] = &[];
//! let click: Click = decoder.decode(bytes)?;
//! let plain = JsonSchemaDecoder::plain(r#"{"type": "object", "required": ["user_id"]}"#)?;
//! # Ok::<(), riffle_formats::FormatError>(())
//! ```

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use jsonschema::Validator;
use serde::de::DeserializeOwned;

use crate::{FormatError, SchemaKind, SchemaRegistry};

#[derive(Clone)]
enum Writers {
    Registry(SchemaRegistry),
    Plain(Arc<Validator>),
}

/// Decodes JSON records checked against their JSON Schema (see the module's documentation).
/// Cheap to clone.
#[derive(Clone)]
pub struct JsonSchemaDecoder {
    writers: Writers,
    validators: Arc<RwLock<HashMap<u32, Arc<Validator>>>>,
}

impl JsonSchemaDecoder {
    /// Records in the registry's wire format, their schemas fetched from `registry`.
    pub fn confluent(registry: &SchemaRegistry) -> Self {
        JsonSchemaDecoder {
            writers: Writers::Registry(registry.clone()),
            validators: Arc::default(),
        }
    }

    /// Plain JSON documents, each checked against `schema` (a JSON Schema document).
    pub fn plain(schema: &str) -> Result<Self, FormatError> {
        Ok(JsonSchemaDecoder {
            writers: Writers::Plain(Arc::new(validator(schema)?)),
            validators: Arc::default(),
        })
    }

    /// The record in `bytes` as a JSON value that its schema accepts.
    pub fn decode_json(&self, bytes: &[u8]) -> Result<serde_json::Value, FormatError> {
        let (validator, document) = match &self.writers {
            Writers::Plain(validator) => (validator.clone(), bytes),
            Writers::Registry(registry) => {
                let (id, document) = crate::AvroDecoder::frame(bytes)?;
                (self.validator(registry, id)?, document)
            }
        };
        let value: serde_json::Value = serde_json::from_slice(document)
            .map_err(|e| FormatError::Decode(format!("not JSON: {e}")))?;
        if let Some(error) = validator.iter_errors(&value).next() {
            return Err(FormatError::Decode(format!(
                "the JSON Schema refuses it at `{}`: {error}",
                error.instance_path()
            )));
        }
        Ok(value)
    }

    /// The record in `bytes` as a `T`.
    pub fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, FormatError> {
        serde_json::from_value(self.decode_json(bytes)?)
            .map_err(|e| FormatError::Decode(e.to_string()))
    }

    /// This decoder as a source's decoder (`KafkaSource::with_decoder`): an error is the
    /// record's bad-record reason.
    pub fn into_fn<T: DeserializeOwned>(
        self,
    ) -> impl Fn(&[u8]) -> Result<T, String> + Send + Sync + 'static {
        move |bytes| self.decode(bytes).map_err(|e| e.to_string())
    }

    fn validator(&self, registry: &SchemaRegistry, id: u32) -> Result<Arc<Validator>, FormatError> {
        if let Some(validator) = self.validators.read().expect("not poisoned").get(&id) {
            return Ok(validator.clone());
        }
        let schema = registry.registered_by_id(id)?;
        if schema.kind != SchemaKind::Json {
            return Err(FormatError::Schema(format!(
                "the schema of id {id} is {:?}, not JSON Schema",
                schema.kind
            )));
        }
        let validator = Arc::new(
            validator(&schema.text)
                .map_err(|e| FormatError::Schema(format!("the schema of id {id}: {e}")))?,
        );
        self.validators
            .write()
            .expect("not poisoned")
            .insert(id, validator.clone());
        Ok(validator)
    }
}

fn validator(schema: &str) -> Result<Validator, FormatError> {
    let schema: serde_json::Value = serde_json::from_str(schema)
        .map_err(|e| FormatError::Schema(format!("the JSON Schema is not JSON: {e}")))?;
    jsonschema::validator_for(&schema)
        .map_err(|e| FormatError::Schema(format!("not a valid JSON Schema: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_the_schema_refuses_are_errors_saying_where() {
        let decoder = JsonSchemaDecoder::plain(
            r#"{"type": "object", "required": ["user_id", "ts"],
                "properties": {"user_id": {"type": "string"}, "ts": {"type": "integer", "minimum": 0}}}"#,
        )
        .unwrap();
        #[derive(Debug, PartialEq, serde::Deserialize)]
        struct Click {
            user_id: String,
            ts: i64,
        }
        assert_eq!(
            decoder
                .decode::<Click>(br#"{"user_id": "u1", "ts": 5}"#)
                .unwrap(),
            Click {
                user_id: "u1".into(),
                ts: 5
            }
        );
        let err = decoder
            .decode_json(br#"{"user_id": "u1", "ts": -5}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("refuses it at `/ts`"), "{err}");
        let err = decoder
            .decode_json(br#"{"user_id": "u1"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"ts\" is a required property"), "{err}");
        let err = decoder.decode_json(b"{nope").unwrap_err().to_string();
        assert!(err.contains("not JSON"), "{err}");
        assert!(JsonSchemaDecoder::plain(r#"{"type": 12}"#).is_err());
    }
}
