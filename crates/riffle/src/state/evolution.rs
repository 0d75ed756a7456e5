//! Schema evolution of declared keyed state: what lets a savepoint taken by one version of a job
//! be restored by the next one after a state type changed (Flink's `TypeSerializerSnapshot`).
//!
//! State is written with the state codec (postcard: compact, not self-describing). So that an
//! older value can still be read after its type changed, every checkpoint records, for each
//! declared state, a [`StateSchema`]: its name, the version its descriptor declares
//! (`with_version`, 1 by default), its Rust type's name and the *format* of its values (the
//! fields, their order and types, traced from the type's serde implementation: `trace`).
//!
//! On restore, a state whose recorded format and version equal the declared ones is read as
//! before. Otherwise its values are read with the recorded format into a [`StateValue`] (field
//! names and values) and deserialized into the new type: serde-compatible changes just work (a
//! field added with `#[serde(default)]`, a field removed, an integer widened, a field that became
//! an `Option`, enum variants reordered); a descriptor with a newer version and a migration
//! (`with_migration`) gets each old value with the version that wrote it. A change that neither
//! can read fails the job at the restore with [`Error::IncompatibleState`] naming the operator,
//! the state and both versions: never a panic, never garbage.

use std::any::TypeId;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use serde::de::{self, DeserializeOwned, IntoDeserializer, Visitor};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

mod trace;

/// What a checkpoint records of one declared state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateSchema {
    /// The state's name (its descriptor's).
    pub name: String,
    /// The version its descriptor declared.
    #[serde(default = "first_version")]
    pub version: u32,
    /// The Rust type of its values.
    pub type_name: String,
    /// The format of its values, when the type could be traced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<ValueFormat>,
}

fn first_version() -> u32 {
    1
}

/// The format of a state's values: the root layout and the containers (structs, enums) it
/// names, by name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueFormat {
    /// The layout of a value.
    pub root: Layout,
    /// The structs and enums it names.
    pub containers: BTreeMap<String, Container>,
}

/// How a value is laid out in the state codec.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Layout {
    /// A struct or enum of [`ValueFormat::containers`].
    Named(String),
    Unit,
    Bool,
    I8,
    I16,
    I32,
    I64,
    I128,
    U8,
    U16,
    U32,
    U64,
    U128,
    F32,
    F64,
    Char,
    Str,
    Bytes,
    Option(Box<Layout>),
    Seq(Box<Layout>),
    Map {
        key: Box<Layout>,
        value: Box<Layout>,
    },
    Tuple(Vec<Layout>),
    Array {
        item: Box<Layout>,
        size: usize,
    },
}

/// A struct or an enum.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Container {
    UnitStruct,
    Newtype(Layout),
    TupleStruct(Vec<Layout>),
    Struct(Vec<(String, Layout)>),
    /// The variants by index, with their names.
    Enum(Vec<(u32, String, VariantLayout)>),
}

/// The content of an enum variant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum VariantLayout {
    Unit,
    Newtype(Layout),
    Tuple(Vec<Layout>),
    Struct(Vec<(String, Layout)>),
}

impl ValueFormat {
    /// A one-line description: the root type with the fields of the structs it names, e.g.
    /// `Count { clicks: u64, first_page: Option<u32> }` (nested structs by name).
    pub fn describe(&self) -> String {
        match &self.root {
            Layout::Named(name) => match self.containers.get(name) {
                Some(Container::Struct(fields)) => format!(
                    "{name} {{ {} }}",
                    fields
                        .iter()
                        .map(|(field, layout)| format!("{field}: {}", layout.describe()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Some(Container::Enum(variants)) => format!(
                    "enum {name} {{ {} }}",
                    variants
                        .iter()
                        .map(|(_, variant, _)| variant.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                _ => name.clone(),
            },
            other => other.describe(),
        }
    }
}

impl Layout {
    /// The layout as a Rust-like type.
    pub fn describe(&self) -> String {
        let list = |items: &[Layout]| {
            items
                .iter()
                .map(Layout::describe)
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Layout::Named(name) => name.clone(),
            Layout::Unit => "()".into(),
            Layout::Bool => "bool".into(),
            Layout::I8 => "i8".into(),
            Layout::I16 => "i16".into(),
            Layout::I32 => "i32".into(),
            Layout::I64 => "i64".into(),
            Layout::I128 => "i128".into(),
            Layout::U8 => "u8".into(),
            Layout::U16 => "u16".into(),
            Layout::U32 => "u32".into(),
            Layout::U64 => "u64".into(),
            Layout::U128 => "u128".into(),
            Layout::F32 => "f32".into(),
            Layout::F64 => "f64".into(),
            Layout::Char => "char".into(),
            Layout::Str => "String".into(),
            Layout::Bytes => "bytes".into(),
            Layout::Option(inner) => format!("Option<{}>", inner.describe()),
            Layout::Seq(inner) => format!("Vec<{}>", inner.describe()),
            Layout::Map { key, value } => format!("Map<{}, {}>", key.describe(), value.describe()),
            Layout::Tuple(items) => format!("({})", list(items)),
            Layout::Array { item, size } => format!("[{}; {size}]", item.describe()),
        }
    }
}

/// The format of `T`, traced once per type and remembered (`None`: the type's serde
/// implementation cannot be traced, e.g. one that validates its input; such a state restores only
/// into the same format).
pub fn format_of<T: DeserializeOwned + 'static>() -> Option<Arc<ValueFormat>> {
    static FORMATS: OnceLock<Mutex<HashMap<TypeId, Option<Arc<ValueFormat>>>>> = OnceLock::new();
    let formats = FORMATS.get_or_init(Default::default);
    if let Some(known) = formats
        .lock()
        .expect("formats lock")
        .get(&TypeId::of::<T>())
    {
        return known.clone();
    }
    let traced = trace::trace::<T>().map(Arc::new);
    formats
        .lock()
        .expect("formats lock")
        .insert(TypeId::of::<T>(), traced.clone());
    traced
}

/// What a restore does with one state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Restore {
    /// The values are read as they are (same format and version, or nothing recorded).
    AsWritten,
    /// The values are read with the recorded format and converted (serde or the migration).
    Evolve,
}

/// Decides how a state written as `old` is restored as `new` (`None`: the checkpoint recorded
/// nothing of it, as those of earlier releases).
pub(crate) fn restore_plan(
    old: Option<&StateSchema>,
    new: &StateSchema,
) -> std::result::Result<Restore, String> {
    let Some(old) = old else {
        return Ok(Restore::AsWritten);
    };
    if old.version > new.version {
        return Err(format!(
            "the savepoint holds version {} of it ({}), and this job declares version {} ({}): \
             a job cannot read a newer version of its state",
            old.version, old.type_name, new.version, new.type_name
        ));
    }
    match (&old.format, &new.format) {
        (Some(a), Some(b)) if a == b && old.version == new.version => Ok(Restore::AsWritten),
        (Some(_), _) => Ok(Restore::Evolve),
        // The older type could not be traced: only the same format reads.
        (None, _) => Ok(Restore::AsWritten),
    }
}

/// An error of reading an old value or converting it.
#[derive(Debug)]
pub struct EvolutionError(String);

impl fmt::Display for EvolutionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EvolutionError {}

impl de::Error for EvolutionError {
    fn custom<T: fmt::Display>(message: T) -> Self {
        EvolutionError(message.to_string())
    }
}

/// An old state value, as a migration gets it: read with the format that wrote it, with its
/// field and variant names.
///
/// A migration usually deserializes it into a copy of the old type and builds the new one from
/// that:
///
/// ```
/// use riffle::state::{StateValue, ValueStateDescriptor};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Deserialize)]
/// struct CountsV1 { clicks: u64 }
///
/// #[derive(Clone, Serialize, Deserialize)]
/// struct Counts { total: u64 }
///
/// fn migrate(old: StateValue, _from_version: u32) -> riffle::Result<Counts> {
///     let v1: CountsV1 = old.deserialize()?;
///     Ok(Counts { total: v1.clicks })
/// }
///
/// static COUNTS: ValueStateDescriptor<Counts> =
///     ValueStateDescriptor::new("counts").with_version(2).with_migration(migrate);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct StateValue(Dynamic);

impl StateValue {
    /// Deserializes the value into `T` (missing fields with `#[serde(default)]` take their
    /// default, unknown fields are ignored).
    pub fn deserialize<T: DeserializeOwned>(self) -> Result<T> {
        T::deserialize(self.0).map_err(|e| Error::user(e.to_string()))
    }

    /// The field `name` of a struct value.
    pub fn field(&self, name: &str) -> Option<StateValue> {
        match &self.0 {
            Dynamic::Struct(fields) => fields
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| StateValue(v.clone())),
            Dynamic::Newtype(inner) => StateValue((**inner).clone()).field(name),
            _ => None,
        }
    }
}

/// A value read with a recorded format.
#[derive(Clone, Debug, PartialEq)]
enum Dynamic {
    Unit,
    Bool(bool),
    I64(i64),
    U64(u64),
    I128(i128),
    U128(u128),
    F32(f32),
    F64(f64),
    Char(char),
    Str(String),
    Bytes(Vec<u8>),
    Option(Option<Box<Dynamic>>),
    Seq(Vec<Dynamic>),
    Map(Vec<(Dynamic, Dynamic)>),
    Struct(Vec<(String, Dynamic)>),
    Newtype(Box<Dynamic>),
    Variant(String, Box<Variant>),
}

#[derive(Clone, Debug, PartialEq)]
enum Variant {
    Unit,
    Newtype(Dynamic),
    Tuple(Vec<Dynamic>),
    Struct(Vec<(String, Dynamic)>),
}

type DeResult<T> = std::result::Result<T, EvolutionError>;

fn fail<T>(message: impl Into<String>) -> DeResult<T> {
    Err(EvolutionError(message.into()))
}

/// Reads postcard-encoded values of a recorded format.
pub(crate) struct Reader<'f> {
    format: &'f ValueFormat,
}

impl<'f> Reader<'f> {
    pub(crate) fn new(format: &'f ValueFormat) -> Self {
        Reader { format }
    }

    /// Reads one value of the root format from the front of `input`.
    pub(crate) fn read_value(&self, input: &mut &[u8]) -> DeResult<StateValue> {
        self.read(&self.format.root, input, 0).map(StateValue)
    }

    /// Reads one value of the root format, which is a map: its entries.
    pub(crate) fn read_map(&self, input: &mut &[u8]) -> DeResult<Vec<(StateValue, StateValue)>> {
        match self.read(&self.format.root, input, 0)? {
            Dynamic::Map(entries) => Ok(entries
                .into_iter()
                .map(|(k, v)| (StateValue(k), StateValue(v)))
                .collect()),
            other => fail(format!("expected a map, found {other:?}")),
        }
    }

    fn read(&self, layout: &Layout, input: &mut &[u8], depth: usize) -> DeResult<Dynamic> {
        if depth > 256 {
            return fail("the value nests too deeply");
        }
        let depth = depth + 1;
        Ok(match layout {
            Layout::Named(name) => return self.read_container(name, input, depth),
            Layout::Unit => Dynamic::Unit,
            Layout::Bool => match byte(input)? {
                0 => Dynamic::Bool(false),
                1 => Dynamic::Bool(true),
                b => return fail(format!("a bool cannot be {b}")),
            },
            Layout::I8 => Dynamic::I64(byte(input)? as i8 as i64),
            Layout::U8 => Dynamic::U64(byte(input)? as u64),
            Layout::U16 | Layout::U32 | Layout::U64 => Dynamic::U64(
                u64::try_from(varint(input)?)
                    .map_err(|_| EvolutionError("an integer is too large".into()))?,
            ),
            Layout::U128 => Dynamic::U128(varint(input)?),
            Layout::I16 | Layout::I32 | Layout::I64 => Dynamic::I64(
                i64::try_from(zigzag(varint(input)?))
                    .map_err(|_| EvolutionError("an integer is too large".into()))?,
            ),
            Layout::I128 => Dynamic::I128(zigzag(varint(input)?)),
            Layout::F32 => Dynamic::F32(f32::from_le_bytes(take(input, 4)?.try_into().unwrap())),
            Layout::F64 => Dynamic::F64(f64::from_le_bytes(take(input, 8)?.try_into().unwrap())),
            Layout::Char => {
                let s = string(input)?;
                let mut chars = s.chars();
                match (chars.next(), chars.next()) {
                    (Some(c), None) => Dynamic::Char(c),
                    _ => return fail("a char is not one character"),
                }
            }
            Layout::Str => Dynamic::Str(string(input)?),
            Layout::Bytes => {
                let len = length(input)?;
                Dynamic::Bytes(take(input, len)?.to_vec())
            }
            Layout::Option(inner) => match byte(input)? {
                0 => Dynamic::Option(None),
                1 => Dynamic::Option(Some(Box::new(self.read(inner, input, depth)?))),
                b => return fail(format!("an option's tag cannot be {b}")),
            },
            Layout::Seq(item) => {
                let len = length(input)?;
                let mut items = Vec::with_capacity(len.min(input.len()));
                for _ in 0..len {
                    items.push(self.read(item, input, depth)?);
                }
                Dynamic::Seq(items)
            }
            Layout::Map { key, value } => {
                let len = length(input)?;
                let mut entries = Vec::with_capacity(len.min(input.len()));
                for _ in 0..len {
                    let k = self.read(key, input, depth)?;
                    entries.push((k, self.read(value, input, depth)?));
                }
                Dynamic::Map(entries)
            }
            Layout::Tuple(items) => Dynamic::Seq(self.read_all(items, input, depth)?),
            Layout::Array { item, size } => {
                let mut items = Vec::with_capacity((*size).min(input.len()));
                for _ in 0..*size {
                    items.push(self.read(item, input, depth)?);
                }
                Dynamic::Seq(items)
            }
        })
    }

    fn read_all(
        &self,
        layouts: &[Layout],
        input: &mut &[u8],
        depth: usize,
    ) -> DeResult<Vec<Dynamic>> {
        layouts.iter().map(|l| self.read(l, input, depth)).collect()
    }

    fn read_fields(
        &self,
        fields: &[(String, Layout)],
        input: &mut &[u8],
        depth: usize,
    ) -> DeResult<Vec<(String, Dynamic)>> {
        fields
            .iter()
            .map(|(name, layout)| Ok((name.clone(), self.read(layout, input, depth)?)))
            .collect()
    }

    fn read_container(&self, name: &str, input: &mut &[u8], depth: usize) -> DeResult<Dynamic> {
        let Some(container) = self.format.containers.get(name) else {
            return fail(format!("the recorded format does not describe `{name}`"));
        };
        Ok(match container {
            Container::UnitStruct => Dynamic::Unit,
            Container::Newtype(inner) => {
                Dynamic::Newtype(Box::new(self.read(inner, input, depth)?))
            }
            Container::TupleStruct(items) => Dynamic::Seq(self.read_all(items, input, depth)?),
            Container::Struct(fields) => Dynamic::Struct(self.read_fields(fields, input, depth)?),
            Container::Enum(variants) => {
                let index = u32::try_from(varint(input)?)
                    .map_err(|_| EvolutionError("an enum's variant index is too large".into()))?;
                let Some((_, variant, content)) = variants.iter().find(|(i, _, _)| *i == index)
                else {
                    return fail(format!("`{name}` has no variant {index}"));
                };
                let content = match content {
                    VariantLayout::Unit => Variant::Unit,
                    VariantLayout::Newtype(inner) => {
                        Variant::Newtype(self.read(inner, input, depth)?)
                    }
                    VariantLayout::Tuple(items) => {
                        Variant::Tuple(self.read_all(items, input, depth)?)
                    }
                    VariantLayout::Struct(fields) => {
                        Variant::Struct(self.read_fields(fields, input, depth)?)
                    }
                };
                Dynamic::Variant(variant.clone(), Box::new(content))
            }
        })
    }
}

fn take<'a>(input: &mut &'a [u8], len: usize) -> DeResult<&'a [u8]> {
    if input.len() < len {
        return fail("the value is cut short");
    }
    let (head, rest) = input.split_at(len);
    *input = rest;
    Ok(head)
}

fn byte(input: &mut &[u8]) -> DeResult<u8> {
    Ok(take(input, 1)?[0])
}

fn varint(input: &mut &[u8]) -> DeResult<u128> {
    let mut value = 0u128;
    for shift in (0..128).step_by(7) {
        let b = byte(input)?;
        value |= ((b & 0x7f) as u128) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    fail("a varint is too long")
}

fn zigzag(n: u128) -> i128 {
    ((n >> 1) as i128) ^ -((n & 1) as i128)
}

fn length(input: &mut &[u8]) -> DeResult<usize> {
    usize::try_from(varint(input)?).map_err(|_| EvolutionError("a length is too large".into()))
}

fn string(input: &mut &[u8]) -> DeResult<String> {
    let len = length(input)?;
    String::from_utf8(take(input, len)?.to_vec())
        .map_err(|_| EvolutionError("a string is not UTF-8".into()))
}

impl<'de> IntoDeserializer<'de, EvolutionError> for Dynamic {
    type Deserializer = Dynamic;
    fn into_deserializer(self) -> Dynamic {
        self
    }
}

/// Fields of a struct, as a map keyed by field name.
fn visit_fields<'de, V: Visitor<'de>>(
    fields: Vec<(String, Dynamic)>,
    visitor: V,
) -> DeResult<V::Value> {
    visitor.visit_map(de::value::MapDeserializer::new(
        fields.into_iter().map(|(k, v)| (Dynamic::Str(k), v)),
    ))
}

fn visit_items<'de, V: Visitor<'de>>(items: Vec<Dynamic>, visitor: V) -> DeResult<V::Value> {
    visitor.visit_seq(de::value::SeqDeserializer::new(items.into_iter()))
}

impl<'de> de::Deserializer<'de> for Dynamic {
    type Error = EvolutionError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> DeResult<V::Value> {
        match self {
            Dynamic::Unit => visitor.visit_unit(),
            Dynamic::Bool(b) => visitor.visit_bool(b),
            Dynamic::I64(n) => visitor.visit_i64(n),
            Dynamic::U64(n) => visitor.visit_u64(n),
            Dynamic::I128(n) => visitor.visit_i128(n),
            Dynamic::U128(n) => visitor.visit_u128(n),
            Dynamic::F32(n) => visitor.visit_f32(n),
            Dynamic::F64(n) => visitor.visit_f64(n),
            Dynamic::Char(c) => visitor.visit_char(c),
            Dynamic::Str(s) => visitor.visit_string(s),
            Dynamic::Bytes(b) => visitor.visit_byte_buf(b),
            Dynamic::Option(None) => visitor.visit_none(),
            Dynamic::Option(Some(v)) => visitor.visit_some(*v),
            Dynamic::Seq(items) => visit_items(items, visitor),
            Dynamic::Map(entries) => {
                visitor.visit_map(de::value::MapDeserializer::new(entries.into_iter()))
            }
            Dynamic::Struct(fields) => visit_fields(fields, visitor),
            Dynamic::Newtype(inner) => visitor.visit_newtype_struct(*inner),
            Dynamic::Variant(name, content) => visitor.visit_enum(Enum(name, *content)),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> DeResult<V::Value> {
        match self {
            Dynamic::Option(None) | Dynamic::Unit => visitor.visit_none(),
            Dynamic::Option(Some(v)) => visitor.visit_some(*v),
            // A field that became optional.
            other => visitor.visit_some(other),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> DeResult<V::Value> {
        match self {
            Dynamic::Newtype(inner) => visitor.visit_newtype_struct(*inner),
            // A value wrapped in a newtype since.
            other => visitor.visit_newtype_struct(other),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> DeResult<V::Value> {
        match self {
            Dynamic::Variant(name, content) => visitor.visit_enum(Enum(name, *content)),
            Dynamic::Str(name) => visitor.visit_enum(Enum(name, Variant::Unit)),
            Dynamic::Newtype(inner) => inner.deserialize_enum(_name, _variants, visitor),
            other => fail(format!("expected an enum, found {other:?}")),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> DeResult<V::Value> {
        visitor.visit_unit()
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> DeResult<V::Value> {
        match self {
            Dynamic::Newtype(inner) => inner.deserialize_struct(_name, _fields, visitor),
            other => other.deserialize_any(visitor),
        }
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> DeResult<V::Value> {
        match self {
            Dynamic::Bytes(b) => visitor.visit_byte_buf(b),
            Dynamic::Str(s) => visitor.visit_byte_buf(s.into_bytes()),
            other => other.deserialize_any(visitor),
        }
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> DeResult<V::Value> {
        self.deserialize_bytes(visitor)
    }

    /// The values were written by a compact codec: types with two forms (addresses, times) read
    /// their compact one.
    fn is_human_readable(&self) -> bool {
        false
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        unit seq tuple tuple_struct map identifier ignored_any
    }
}

/// An enum value: its variant's name and content.
struct Enum(String, Variant);

impl<'de> de::EnumAccess<'de> for Enum {
    type Error = EvolutionError;
    type Variant = Variant;

    fn variant_seed<S: de::DeserializeSeed<'de>>(self, seed: S) -> DeResult<(S::Value, Variant)> {
        let name = seed.deserialize(Dynamic::Str(self.0))?;
        Ok((name, self.1))
    }
}

impl<'de> de::VariantAccess<'de> for Variant {
    type Error = EvolutionError;

    fn unit_variant(self) -> DeResult<()> {
        match self {
            Variant::Unit => Ok(()),
            other => fail(format!("expected a unit variant, found {other:?}")),
        }
    }

    fn newtype_variant_seed<S: de::DeserializeSeed<'de>>(self, seed: S) -> DeResult<S::Value> {
        match self {
            Variant::Newtype(v) => seed.deserialize(v),
            Variant::Unit => seed.deserialize(Dynamic::Unit),
            Variant::Tuple(items) => seed.deserialize(Dynamic::Seq(items)),
            Variant::Struct(fields) => seed.deserialize(Dynamic::Struct(fields)),
        }
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> DeResult<V::Value> {
        match self {
            Variant::Tuple(items) => visit_items(items, visitor),
            other => fail(format!("expected a tuple variant, found {other:?}")),
        }
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> DeResult<V::Value> {
        match self {
            Variant::Struct(fields) => visit_fields(fields, visitor),
            other => fail(format!("expected a struct variant, found {other:?}")),
        }
    }
}

/// Converts an old value into the declared type: with the migration when the version changed
/// and one is declared, else by deserializing it (serde-compatible changes).
pub(crate) fn convert<V: DeserializeOwned>(
    value: StateValue,
    from_version: u32,
    to_version: u32,
    migrate: Option<fn(StateValue, u32) -> Result<V>>,
) -> std::result::Result<V, String> {
    match migrate {
        Some(migrate) if from_version != to_version => {
            migrate(value, from_version).map_err(|e| format!("its migration failed: {e}"))
        }
        _ => V::deserialize(value.0).map_err(|e| {
            let hint = if from_version == to_version {
                "; declare a new version of the state with a migration (`with_version`, \
                 `with_migration`)"
            } else {
                "; declare a migration for it (`with_migration`)"
            };
            format!("an old value cannot be read as the new type: {e}{hint}")
        }),
    }
}

/// Reads one value of a state as `old` (its recorded schema) wrote it, from the front of
/// `input`, converted to `V` of version `version` (by `migrate`, else by serde).
pub(crate) fn read_old_value<V: DeserializeOwned>(
    old: &StateSchema,
    input: &mut &[u8],
    version: u32,
    migrate: Option<fn(StateValue, u32) -> Result<V>>,
) -> std::result::Result<V, String> {
    let format = old
        .format
        .as_ref()
        .ok_or("the savepoint recorded no format")?;
    let value = Reader::new(format)
        .read_value(input)
        .map_err(|e| format!("cannot read an old value: {e}"))?;
    convert(value, old.version, version, migrate)
}

/// The schemas of an operator's states from every old subtask, one per state name (the first).
pub(crate) fn by_name(schemas: &[StateSchema]) -> BTreeMap<String, StateSchema> {
    let mut map = BTreeMap::new();
    for schema in schemas {
        map.entry(schema.name.clone())
            .or_insert_with(|| schema.clone());
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    enum Phase {
        Idle,
        Busy(u32),
        Done { at: i64 },
    }

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    struct V1 {
        count: u32,
        name: String,
        phase: Phase,
        tags: Vec<(u8, Option<f64>)>,
    }

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    struct V2 {
        name: String,
        count: u64,
        phase: Phase,
        #[serde(default)]
        added: Vec<String>,
        tags: Vec<(u8, Option<f64>)>,
    }

    fn schema<T: DeserializeOwned + 'static>(version: u32) -> StateSchema {
        StateSchema {
            name: "s".into(),
            version,
            type_name: std::any::type_name::<T>().into(),
            format: format_of::<T>().map(|f| (*f).clone()),
        }
    }

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    enum Tree {
        Leaf(u8),
        Node(Box<Tree>, Option<Box<Tree>>),
    }

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    struct Shelf {
        items: Vec<Phase>,
        last: Option<Phase>,
        by_slot: BTreeMap<u8, (Phase, Option<V1>)>,
    }

    #[test]
    fn enums_inside_sequences_options_and_maps_are_traced_and_read() {
        let shelf = Shelf {
            items: vec![Phase::Idle, Phase::Done { at: -1 }, Phase::Busy(3)],
            last: Some(Phase::Busy(9)),
            by_slot: BTreeMap::from([
                (1, (Phase::Done { at: 7 }, None)),
                (
                    2,
                    (
                        Phase::Idle,
                        Some(V1 {
                            count: 5,
                            name: "n".into(),
                            phase: Phase::Busy(1),
                            tags: vec![(3, None)],
                        }),
                    ),
                ),
            ]),
        };
        let format = format_of::<Shelf>().expect("traced");
        let Container::Enum(variants) = &format.containers["Phase"] else {
            panic!("{format:?}");
        };
        assert_eq!(variants.len(), 3);
        let bytes = crate::codec::encode(&shelf).unwrap();
        let value = Reader::new(&format).read_value(&mut &bytes[..]).unwrap();
        assert_eq!(convert::<Shelf>(value, 1, 1, None).unwrap(), shelf);
    }

    #[test]
    fn common_types_are_traced() {
        fn round_trip<T: Serialize + DeserializeOwned + PartialEq + fmt::Debug + 'static>(v: T) {
            let format =
                format_of::<T>().unwrap_or_else(|| panic!("{}", std::any::type_name::<T>()));
            let bytes = crate::codec::encode(&v).unwrap();
            let value = Reader::new(&format).read_value(&mut &bytes[..]).unwrap();
            assert_eq!(convert::<T>(value, 1, 1, None).unwrap(), v);
        }
        round_trip(std::time::Duration::from_millis(1_500));
        round_trip([1u8, 2, 3, 4]);
        round_trip(std::collections::BTreeSet::from(["a".to_string()]));
        round_trip((7u8, -5i128, u128::MAX, 'x', ()));
        round_trip(Some(()));
        round_trip("text".to_string());
        round_trip(vec![Some(-1i64), None]);
        round_trip(std::net::IpAddr::from([10, 0, 0, 1]));
    }

    #[test]
    fn a_type_that_contains_itself_is_not_traced() {
        assert!(format_of::<Tree>().is_none());
        assert!(
            format_of::<serde_json::Value>().is_none(),
            "self-describing"
        );
    }

    #[test]
    fn a_format_describes_itself() {
        assert_eq!(
            format_of::<V1>().unwrap().describe(),
            "V1 { count: u32, name: String, phase: Phase, tags: Vec<(u8, Option<f64>)> }"
        );
        assert_eq!(format_of::<Vec<u64>>().unwrap().describe(), "Vec<u64>");
    }

    #[test]
    fn a_nested_enum_is_traced_with_every_variant() {
        let format = format_of::<V1>().expect("traced");
        let Container::Enum(variants) = &format.containers["Phase"] else {
            panic!("{format:?}");
        };
        assert_eq!(variants.len(), 3);
    }

    #[test]
    fn an_old_value_reads_into_a_compatible_new_type() {
        for phase in [Phase::Idle, Phase::Busy(7), Phase::Done { at: -3 }] {
            let old = V1 {
                count: 41,
                name: "ann".into(),
                phase: phase.clone(),
                tags: vec![(1, Some(f64::NAN)), (2, None)],
            };
            let bytes = crate::codec::encode(&old).unwrap();
            let format = format_of::<V1>().unwrap();
            let mut input = &bytes[..];
            let value = Reader::new(&format).read_value(&mut input).unwrap();
            assert!(input.is_empty());
            let new: V2 = convert(value, 1, 1, None).unwrap();
            assert_eq!(
                (new.count, new.name.as_str(), &new.phase),
                (41, "ann", &phase)
            );
            assert!(new.added.is_empty());
            assert!(new.tags[0].1.unwrap().is_nan());
        }
    }

    #[test]
    fn the_plan_restores_as_written_only_what_did_not_change() {
        let v1 = schema::<V1>(1);
        assert_eq!(restore_plan(None, &v1), Ok(Restore::AsWritten));
        assert_eq!(restore_plan(Some(&v1), &v1), Ok(Restore::AsWritten));
        assert_eq!(
            restore_plan(Some(&v1), &schema::<V2>(1)),
            Ok(Restore::Evolve)
        );
        assert_eq!(
            restore_plan(Some(&v1), &schema::<V1>(2)),
            Ok(Restore::Evolve)
        );
        let downgrade = restore_plan(Some(&schema::<V2>(3)), &v1).unwrap_err();
        assert!(
            downgrade.contains("version 3") && downgrade.contains("version 1"),
            "{downgrade}"
        );
    }

    #[test]
    fn an_incompatible_change_is_an_error_that_says_what_to_do() {
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Changed {
            count: String,
        }
        let bytes = crate::codec::encode(&V1 {
            count: 1,
            name: "x".into(),
            phase: Phase::Idle,
            tags: vec![],
        })
        .unwrap();
        let format = format_of::<V1>().unwrap();
        let value = Reader::new(&format).read_value(&mut &bytes[..]).unwrap();
        let error = convert::<Changed>(value.clone(), 1, 1, None).unwrap_err();
        assert!(error.contains("with_migration"), "{error}");
        let migrated = convert::<Changed>(
            value,
            1,
            2,
            Some(|old, from| {
                let count = old.field("count").unwrap().deserialize::<u64>()?;
                Ok(Changed {
                    count: format!("{count} from v{from}"),
                })
            }),
        )
        .unwrap();
        assert_eq!(migrated.count, "1 from v1");
    }

    #[test]
    fn cut_or_garbage_bytes_are_errors_not_panics() {
        let format = format_of::<V1>().unwrap();
        let bytes = crate::codec::encode(&V1 {
            count: 300,
            name: "a long enough name".into(),
            phase: Phase::Done { at: 5 },
            tags: vec![(1, Some(1.0))],
        })
        .unwrap();
        for cut in 0..bytes.len() {
            assert!(Reader::new(&format).read_value(&mut &bytes[..cut]).is_err());
        }
        let garbage = [0xffu8; 40];
        assert!(Reader::new(&format).read_value(&mut &garbage[..]).is_err());
    }
}
