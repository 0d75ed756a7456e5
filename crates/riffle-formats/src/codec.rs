//! The decoder and the encoder: the wire format's framing, writer schemas resolved to the
//! reader's, and subjects named as Confluent's serializers name them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::types::Value;
use apache_avro::writer::datum::GenericDatumWriter;
use apache_avro::{Schema, from_value};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{FormatError, SchemaRegistry, intern};

/// The first byte of a record in the wire format.
const MAGIC: u8 = 0;

/// Where a datum's writer schema comes from.
#[derive(Clone)]
enum Writers {
    /// The registry, by the id framing each record.
    Registry(SchemaRegistry),
    /// One schema for every record, unframed.
    Plain(&'static Schema),
}

/// Decodes Avro records: in the registry's wire format ([`confluent`](Self::confluent)) or
/// plain datums of one schema ([`plain`](Self::plain)), to generic [`Value`]s or serde types.
///
/// A decoder is cheap to clone (its cache of resolved schemas is shared).
///
/// ```no_run
/// use riffle_formats::{AvroDecoder, AvroSchema, SchemaRegistry};
/// #[derive(Debug, serde::Deserialize, AvroSchema)]
/// struct Click { user_id: String, ts: i64 }
/// let decoder = AvroDecoder::confluent(&SchemaRegistry::new("http://127.0.0.1:8081")?)
///     .reader_schema(Click::get_schema());
/// # let bytes: &[u8] = &[];
/// let click: Click = decoder.decode(bytes)?;
/// # Ok::<(), riffle_formats::FormatError>(())
/// ```
#[derive(Clone)]
pub struct AvroDecoder {
    writers: Writers,
    reader: Option<&'static Schema>,
    /// A reader per writer schema id (0 for a plain decoder).
    readers: Arc<RwLock<HashMap<u32, Arc<Reader>>>>,
}

/// How records of one writer schema are read.
struct Reader {
    datum: GenericDatumReader<'static>,
    /// Whether they are resolved to the reader schema (not when it is the writer's own).
    resolves: bool,
    /// Whether serde types are read through a generic value: serde's direct reading refused
    /// them (it wants a record's name to be the type's), the generic way did not.
    through_values: AtomicBool,
}

impl AvroDecoder {
    /// Records in the registry's wire format, their writer schemas fetched from `registry`.
    pub fn confluent(registry: &SchemaRegistry) -> Self {
        Self::new(Writers::Registry(registry.clone()))
    }

    /// Plain Avro datums (no framing), all written with `writer`.
    pub fn plain(writer: Schema) -> Self {
        Self::new(Writers::Plain(intern(writer)))
    }

    fn new(writers: Writers) -> Self {
        AvroDecoder {
            writers,
            reader: None,
            readers: Arc::new(RwLock::new(HashMap::new())),
        }
    }

    /// Resolves every record to `schema`, the job's view of the data (Avro's schema
    /// resolution). Without one, records are read as written: a serde type then reads the
    /// fields it names, by name, and a field it lacks must have a serde default.
    pub fn reader_schema(mut self, schema: Schema) -> Self {
        self.reader = Some(intern(schema));
        self.readers = Arc::new(RwLock::new(HashMap::new()));
        self
    }

    /// The record in `bytes`, as a generic value (resolved to the reader schema when there is
    /// one).
    pub fn decode_value(&self, bytes: &[u8]) -> Result<Value, FormatError> {
        let (reader, mut datum) = self.reader_of(bytes)?;
        let value = reader
            .datum
            .read_value(&mut datum)
            .map_err(|e| FormatError::Decode(e.to_string()))?;
        finished(datum)?;
        Ok(value)
    }

    /// The record in `bytes` as a `T`.
    pub fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, FormatError> {
        let (reader, datum) = self.reader_of(bytes)?;
        let through_values = || -> Result<T, FormatError> {
            let mut datum = datum;
            let value = reader
                .datum
                .read_value(&mut datum)
                .map_err(|e| FormatError::Decode(e.to_string()))?;
            finished(datum)?;
            from_value(&value).map_err(|e| FormatError::Decode(e.to_string()))
        };
        if reader.resolves || reader.through_values.load(Ordering::Relaxed) {
            return through_values();
        }
        // Straight from the bytes into `T`, without a generic value between.
        let mut rest = datum;
        let direct = reader
            .datum
            .read_deser(&mut rest)
            .map_err(|e| FormatError::Decode(e.to_string()))
            .and_then(|value| finished(rest).map(|()| value));
        match direct {
            Ok(value) => Ok(value),
            Err(direct_error) => match through_values() {
                Ok(value) => {
                    reader.through_values.store(true, Ordering::Relaxed);
                    Ok(value)
                }
                Err(_) => Err(direct_error),
            },
        }
    }

    /// This decoder as a source's decoder (`KafkaSource::with_decoder`): an error is the
    /// record's bad-record reason.
    pub fn into_fn<T: DeserializeOwned>(
        self,
    ) -> impl Fn(&[u8]) -> Result<T, String> + Send + Sync + 'static {
        move |bytes| self.decode(bytes).map_err(|e| e.to_string())
    }

    /// The writer schema id of a record in the wire format, and its datum.
    pub fn frame(bytes: &[u8]) -> Result<(u32, &[u8]), FormatError> {
        match bytes {
            [MAGIC, a, b, c, d, datum @ ..] => Ok((u32::from_be_bytes([*a, *b, *c, *d]), datum)),
            [MAGIC, ..] => Err(FormatError::Framing(format!(
                "{} bytes, fewer than the 5 of its header",
                bytes.len()
            ))),
            [] => Err(FormatError::Framing("no bytes".to_string())),
            [first, ..] => Err(FormatError::Framing(format!(
                "the first byte is 0x{first:02x}, not 0x00 (plain Avro, JSON or another format?)"
            ))),
        }
    }

    fn reader_of<'b>(&self, bytes: &'b [u8]) -> Result<(Arc<Reader>, &'b [u8]), FormatError> {
        let (id, datum) = match &self.writers {
            Writers::Registry(_) => Self::frame(bytes)?,
            Writers::Plain(_) => (0, bytes),
        };
        if let Some(reader) = self.readers.read().expect("not poisoned").get(&id) {
            return Ok((reader.clone(), datum));
        }
        let writer = match &self.writers {
            Writers::Registry(registry) => registry.schema_by_id(id)?,
            Writers::Plain(schema) => schema,
        };
        // Records written with the reader schema itself (the same fields and types) need no
        // resolution: they are read straight into their type.
        let resolve_to = self.reader.filter(|reader| *reader != writer);
        if let Some(reader_schema) = resolve_to {
            check_resolvable(writer, reader_schema, id)?;
        }
        let reader = GenericDatumReader::builder(writer)
            .maybe_reader_schema(resolve_to)
            .build()
            .map_err(|e| FormatError::Schema(format!("the writer schema (id {id}): {e}")))?;
        let reader = Arc::new(Reader {
            datum: reader,
            resolves: resolve_to.is_some(),
            through_values: AtomicBool::new(false),
        });
        self.readers
            .write()
            .expect("not poisoned")
            .insert(id, reader.clone());
        Ok((reader, datum))
    }
}

/// Whether `writer`'s data can be read as `reader`'s (Avro's compatibility rules), so that a
/// schema the job cannot read says so once, in words, rather than as each record's failure.
fn check_resolvable(writer: &Schema, reader: &Schema, id: u32) -> Result<(), FormatError> {
    apache_avro::schema_compatibility::SchemaCompatibility::can_read(writer, reader).map_err(
        |e| {
            FormatError::Schema(format!(
                "the writer schema of id {id} cannot be read with the reader schema: {e}"
            ))
        },
    )?;
    Ok(())
}

/// A datum read must be the whole record.
fn finished(rest: &[u8]) -> Result<(), FormatError> {
    match rest.len() {
        0 => Ok(()),
        n => Err(FormatError::Decode(format!(
            "{n} bytes left after the datum (not written with its schema?)"
        ))),
    }
}

/// How an encoder's subject is named (Confluent's `subject.name.strategy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SubjectNameStrategy {
    /// `<topic>-value` / `<topic>-key`: one schema (and its versions) per topic. The default.
    #[default]
    TopicName,
    /// The record's full name (`com.acme.Click`): one schema per record type, whatever the topic.
    RecordName,
    /// `<topic>-<record full name>`: several record types in a topic, each with its versions.
    TopicRecordName,
}

impl SubjectNameStrategy {
    /// The subject of `schema` written to `topic`, as a record's key or its value.
    ///
    /// ```
    /// use riffle_formats::{Schema, SubjectNameStrategy};
    /// let schema = Schema::parse_str(
    ///     r#"{"type":"record","name":"Click","namespace":"com.acme","fields":[]}"#,
    /// ).unwrap();
    /// let value = SubjectNameStrategy::TopicName.subject("clicks", false, &schema).unwrap();
    /// assert_eq!(value, "clicks-value");
    /// let record = SubjectNameStrategy::RecordName.subject("clicks", false, &schema).unwrap();
    /// assert_eq!(record, "com.acme.Click");
    /// ```
    pub fn subject(
        self,
        topic: &str,
        is_key: bool,
        schema: &Schema,
    ) -> Result<String, FormatError> {
        let record = || match schema {
            Schema::Record(record) => Ok(record.name.fullname(None)),
            other => Err(FormatError::Config(format!(
                "{self:?}: the schema is not a record (it is {:?}), so it has no name",
                apache_avro::schema::SchemaKind::from(other)
            ))),
        };
        Ok(match self {
            SubjectNameStrategy::TopicName => {
                format!("{topic}-{}", if is_key { "key" } else { "value" })
            }
            SubjectNameStrategy::RecordName => record()?,
            SubjectNameStrategy::TopicRecordName => format!("{topic}-{}", record()?),
        })
    }
}

/// Encodes records in Avro: in the registry's wire format under a registered schema
/// ([`confluent`](Self::confluent)) or as plain datums ([`plain`](Self::plain)).
///
/// ```no_run
/// use riffle_formats::{AvroEncoder, AvroSchema, SchemaRegistry};
/// #[derive(serde::Serialize, AvroSchema)]
/// struct Count { user_id: String, clicks: i64 }
/// let registry = SchemaRegistry::new("http://127.0.0.1:8081")?;
/// let encoder = AvroEncoder::confluent(&registry, "counts-value", Count::get_schema())?;
/// let mut bytes = Vec::new();
/// encoder.encode(&Count { user_id: "u1".into(), clicks: 3 }, &mut bytes)?;
/// assert_eq!(bytes[0], 0);
/// # Ok::<(), riffle_formats::FormatError>(())
/// ```
#[derive(Clone)]
pub struct AvroEncoder {
    header: Option<[u8; 5]>,
    writer: Arc<GenericDatumWriter<'static>>,
    schema: &'static Schema,
}

impl AvroEncoder {
    /// Registers `schema` under `subject` (a new version when the subject does not have it
    /// yet; the registry's compatibility rule may refuse it: [`FormatError::Incompatible`]) and
    /// encodes with it.
    pub fn confluent(
        registry: &SchemaRegistry,
        subject: &str,
        schema: Schema,
    ) -> Result<Self, FormatError> {
        let id = registry.register(subject, &schema)?;
        Self::framed(id, schema)
    }

    /// Encodes with `schema`, which `subject` must already have (Confluent's
    /// `auto.register.schemas=false`, `use.latest.version` aside): for registries where
    /// producers may not register.
    pub fn confluent_registered(
        registry: &SchemaRegistry,
        subject: &str,
        schema: Schema,
    ) -> Result<Self, FormatError> {
        let id = registry.lookup(subject, &schema)?;
        Self::framed(id, schema)
    }

    /// Plain Avro datums of `schema`, unframed.
    pub fn plain(schema: Schema) -> Result<Self, FormatError> {
        Self::build(None, schema)
    }

    fn framed(id: u32, schema: Schema) -> Result<Self, FormatError> {
        let [a, b, c, d] = id.to_be_bytes();
        Self::build(Some([MAGIC, a, b, c, d]), schema)
    }

    fn build(header: Option<[u8; 5]>, schema: Schema) -> Result<Self, FormatError> {
        let schema = intern(schema);
        let writer = GenericDatumWriter::builder(schema)
            .build()
            .map_err(|e| FormatError::Schema(e.to_string()))?;
        Ok(AvroEncoder {
            header,
            writer: Arc::new(writer),
            schema,
        })
    }

    /// The id of the schema in the registry (`None` for plain datums).
    pub fn schema_id(&self) -> Option<u32> {
        self.header
            .map(|[_, a, b, c, d]| u32::from_be_bytes([a, b, c, d]))
    }

    /// The schema records are written with.
    pub fn schema(&self) -> &Schema {
        self.schema
    }

    /// Appends `value` (serialized by serde against the schema) to `out`; on an error `out` is
    /// as it was.
    pub fn encode<T: Serialize>(&self, value: &T, out: &mut Vec<u8>) -> Result<(), FormatError> {
        self.append(out, |writer, out| writer.write_ser(out, value))
    }

    /// Appends the generic `value` to `out`; on an error `out` is as it was.
    pub fn encode_value(&self, value: &Value, out: &mut Vec<u8>) -> Result<(), FormatError> {
        self.append(out, |writer, out| writer.write_value_ref(out, value))
    }

    fn append(
        &self,
        out: &mut Vec<u8>,
        write: impl FnOnce(&GenericDatumWriter<'static>, &mut Vec<u8>) -> apache_avro::AvroResult<usize>,
    ) -> Result<(), FormatError> {
        let start = out.len();
        if let Some(header) = &self.header {
            out.extend_from_slice(header);
        }
        write(&self.writer, out).map_err(|e| {
            out.truncate(start);
            FormatError::Encode(e.to_string())
        })?;
        Ok(())
    }

    /// This encoder as a sink's encoder (`KafkaSink::with_encoder`): a value that does not
    /// match the schema fails the job, naming it.
    pub fn into_fn<T: Serialize>(
        self,
    ) -> impl Fn(&T, &mut Vec<u8>) -> riffle::Result<()> + Send + Sync + 'static {
        move |value, out| self.encode(value, out).map_err(riffle::Error::user)
    }
}
