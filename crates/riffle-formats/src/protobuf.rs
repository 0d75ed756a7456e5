//! Protobuf records decoded by their schema: in the registry's wire format (a zero byte, the
//! schema id, the message's index path in its `.proto` file, then the message; what
//! Confluent's `KafkaProtobufSerializer` writes) or plain messages of one type.
//!
//! The registry's schema is a `.proto` file (with the files it imports, as references, and
//! Google's well-known types); it is compiled in process (no `protoc` needed) once per id. A
//! message is read into a [`DynamicMessage`], into JSON by Protobuf's JSON mapping (with the
//! fields' own names, 64-bit integers as numbers, enums by name), or into a serde type from it.
//!
//! ```no_run
//! use riffle_formats::SchemaRegistry;
//! use riffle_formats::protobuf::ProtobufDecoder;
//! #[derive(Debug, serde::Deserialize)]
//! struct Click { user_id: String, ts: i64 }
//! let decoder = ProtobufDecoder::confluent(&SchemaRegistry::new("http://127.0.0.1:8081")?);
//! # let bytes: &[u8] = &[];
//! let click: Click = decoder.decode(bytes)?;
//! // Plain messages of a type of a .proto file:
//! let plain = ProtobufDecoder::plain(
//!     "syntax = \"proto3\"; message Click { string user_id = 1; int64 ts = 2; }",
//!     "Click",
//! )?;
//! # Ok::<(), riffle_formats::FormatError>(())
//! ```

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, SerializeOptions};
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};
use serde::de::DeserializeOwned;

use crate::{FormatError, SchemaKind, SchemaRegistry};

/// The name the registry's schema is compiled under.
const ROOT: &str = "riffle-registry-schema.proto";

#[derive(Clone)]
enum Writers {
    Registry(SchemaRegistry),
    Plain(MessageDescriptor),
}

/// Decodes Protobuf records (see the module's documentation). Cheap to clone.
#[derive(Clone)]
pub struct ProtobufDecoder {
    writers: Writers,
    /// The compiled file of each schema id.
    files: Arc<RwLock<HashMap<u32, Arc<DescriptorPool>>>>,
}

impl ProtobufDecoder {
    /// Records in the registry's wire format, their schemas fetched from `registry`.
    pub fn confluent(registry: &SchemaRegistry) -> Self {
        ProtobufDecoder {
            writers: Writers::Registry(registry.clone()),
            files: Arc::default(),
        }
    }

    /// Plain messages (no framing) of type `message` (its full name, `package.Message`) of the
    /// `.proto` file `source` (which may import Google's well-known types).
    pub fn plain(source: &str, message: &str) -> Result<Self, FormatError> {
        let pool = compile(source, HashMap::new())?;
        let descriptor = pool.get_message_by_name(message).ok_or_else(|| {
            FormatError::Schema(format!("the .proto file has no message `{message}`"))
        })?;
        Ok(ProtobufDecoder {
            writers: Writers::Plain(descriptor),
            files: Arc::default(),
        })
    }

    /// The record in `bytes` as a message.
    pub fn decode_message(&self, bytes: &[u8]) -> Result<DynamicMessage, FormatError> {
        let (descriptor, message) = match &self.writers {
            Writers::Plain(descriptor) => (descriptor.clone(), bytes),
            Writers::Registry(registry) => {
                let (id, rest) = crate::AvroDecoder::frame(bytes)?;
                let (path, message) = message_indexes(rest)?;
                let pool = self.pool(registry, id)?;
                (message_at(&pool, &path, id)?, message)
            }
        };
        DynamicMessage::decode(descriptor, message)
            .map_err(|e| FormatError::Decode(format!("a Protobuf message: {e}")))
    }

    /// The record in `bytes` as JSON (Protobuf's JSON mapping with the fields' own names,
    /// 64-bit integers as numbers, default values included).
    pub fn decode_json(&self, bytes: &[u8]) -> Result<serde_json::Value, FormatError> {
        let message = self.decode_message(bytes)?;
        let options = SerializeOptions::new()
            .use_proto_field_name(true)
            .stringify_64_bit_integers(false)
            .skip_default_fields(false);
        message
            .serialize_with_options(serde_json::value::Serializer, &options)
            .map_err(|e| FormatError::Decode(format!("a Protobuf message as JSON: {e}")))
    }

    /// The record in `bytes` as a `T` (read from its JSON, see
    /// [`decode_json`](Self::decode_json)).
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

    fn pool(&self, registry: &SchemaRegistry, id: u32) -> Result<Arc<DescriptorPool>, FormatError> {
        if let Some(pool) = self.files.read().expect("not poisoned").get(&id) {
            return Ok(pool.clone());
        }
        let schema = registry.registered_by_id(id)?;
        if schema.kind != SchemaKind::Protobuf {
            return Err(FormatError::Schema(format!(
                "the schema of id {id} is {:?}, not Protobuf",
                schema.kind
            )));
        }
        // The imported files, as the registry's references name them (and theirs in turn).
        let mut imports = HashMap::new();
        let mut pending = schema.references.clone();
        while let Some(reference) = pending.pop() {
            if imports.contains_key(&reference.name) {
                continue;
            }
            let imported = registry.referenced(&reference)?;
            pending.extend(imported.references.iter().cloned());
            imports.insert(reference.name.clone(), imported.text);
        }
        let pool = Arc::new(
            compile(&schema.text, imports)
                .map_err(|e| FormatError::Schema(format!("the schema of id {id}: {e}")))?,
        );
        self.files
            .write()
            .expect("not poisoned")
            .insert(id, pool.clone());
        Ok(pool)
    }
}

/// Compiles the `.proto` file `source`, which may import `imports` (by name) and Google's
/// well-known types.
fn compile(source: &str, imports: HashMap<String, String>) -> Result<DescriptorPool, FormatError> {
    struct Sources(HashMap<String, String>);
    impl FileResolver for Sources {
        fn open_file(&self, name: &str) -> Result<File, protox::Error> {
            match self.0.get(name) {
                Some(source) => File::from_source(name, source),
                None => Err(protox::Error::file_not_found(name)),
            }
        }
    }
    let mut sources = imports;
    sources.insert(ROOT.to_string(), source.to_string());
    let mut resolver = ChainFileResolver::new();
    resolver.add(Sources(sources));
    resolver.add(GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.include_imports(true);
    compiler
        .open_file(ROOT)
        .map_err(|e| FormatError::Schema(format!("the .proto file does not compile: {e}")))?;
    Ok(compiler.descriptor_pool())
}

/// The message-index path at the start of a framed Protobuf record (zig-zag varints: their
/// count, then each; a lone 0 is the path `[0]`, the file's first message), and the rest.
fn message_indexes(bytes: &[u8]) -> Result<(Vec<usize>, &[u8]), FormatError> {
    let mut rest = bytes;
    let mut next = || -> Result<i64, FormatError> {
        let mut value: u64 = 0;
        for shift in (0..64).step_by(7) {
            let (&byte, tail) = rest
                .split_first()
                .ok_or_else(|| FormatError::Framing("the message indexes end early".to_string()))?;
            rest = tail;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(((value >> 1) as i64) ^ -((value & 1) as i64));
            }
        }
        Err(FormatError::Framing(
            "a message index is too long".to_string(),
        ))
    };
    let count = next()?;
    if count == 0 {
        return Ok((vec![0], rest));
    }
    if !(1..=32).contains(&count) {
        return Err(FormatError::Framing(format!(
            "{count} message indexes (a message nests at most 32 deep here)"
        )));
    }
    let mut path = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let index = next()?;
        path.push(
            usize::try_from(index)
                .map_err(|_| FormatError::Framing(format!("a negative message index {index}")))?,
        );
    }
    Ok((path, rest))
}

/// The message at `path` in the schema's file: the `path[0]`-th message of the file, then its
/// `path[1]`-th nested message, and so on.
fn message_at(
    pool: &DescriptorPool,
    path: &[usize],
    id: u32,
) -> Result<MessageDescriptor, FormatError> {
    let file = pool
        .get_file_by_name(ROOT)
        .expect("the compiled file is in its pool");
    let missing = || {
        FormatError::Schema(format!(
            "the schema of id {id} has no message at index path {path:?}"
        ))
    };
    let mut message = file.messages().nth(path[0]).ok_or_else(missing)?;
    for &index in &path[1..] {
        let child = message.child_messages().nth(index);
        message = child.ok_or_else(missing)?;
    }
    Ok(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_indexes_read_as_the_wire_format_writes_them() {
        // A lone 0: the first message.
        assert_eq!(message_indexes(&[0, 9]).unwrap(), (vec![0], &[9][..]));
        // Two indexes (zig-zag 2 = 0x04): [1, 0] = 0x02, 0x00.
        assert_eq!(
            message_indexes(&[4, 2, 0, 7]).unwrap(),
            (vec![1, 0], &[7][..])
        );
        assert!(message_indexes(&[]).is_err());
        assert!(message_indexes(&[4, 2]).is_err());
        assert!(message_indexes(&[0xff; 12]).is_err());
        assert!(
            message_indexes(&[2, 1])
                .unwrap_err()
                .to_string()
                .contains("negative")
        );
    }

    #[test]
    fn plain_messages_decode_into_json_and_serde_types() {
        let decoder = ProtobufDecoder::plain(
            r#"syntax = "proto3"; package shop;
               import "google/protobuf/timestamp.proto";
               message Click { string user_id = 1; int64 ts = 2; repeated string tags = 3;
                               Kind kind = 4; google.protobuf.Timestamp at = 5; }
               enum Kind { VIEW = 0; BUY = 1; }"#,
            "shop.Click",
        )
        .unwrap();
        // user_id "u1" (field 1, length-delimited), ts 5 (field 2, varint), tags ["a"],
        // kind BUY (field 4 = 1), at { seconds: 1 }.
        let bytes = [
            0x0a, 2, b'u', b'1', 0x10, 5, 0x1a, 1, b'a', 0x20, 1, 0x2a, 2, 0x08, 1,
        ];
        let json = decoder.decode_json(&bytes).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"user_id": "u1", "ts": 5, "tags": ["a"], "kind": "BUY",
                               "at": "1970-01-01T00:00:01Z"})
        );
        #[derive(Debug, PartialEq, serde::Deserialize)]
        struct Click {
            user_id: String,
            ts: i64,
        }
        assert_eq!(
            decoder.decode::<Click>(&bytes).unwrap(),
            Click {
                user_id: "u1".into(),
                ts: 5
            }
        );
        let err = decoder
            .decode_json(&[0x0a, 9, b'u'])
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not read"), "{err}");
        let err = ProtobufDecoder::plain("message {", "X")
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("does not compile"), "{err}");
    }
}
