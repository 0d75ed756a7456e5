//! Tracing a type's [`ValueFormat`] from its `Deserialize` implementation: a deserializer that
//! hands the type placeholder values and records what it asks for (a struct's fields in order,
//! a sequence's items, an enum's variants, ...).
//!
//! One pass explores one variant of each enum it meets, so tracing takes passes until every
//! variant of every reachable enum was seen, choosing in each pass the variants not seen yet
//! (or, once all were, one that leads to an enum with variants left). A type that contains
//! itself (a tree) or asks for self-describing input (`deserialize_any`: untagged enums,
//! `serde_json::Value`, `#[serde(flatten)]`) is not traced: its state restores only into the
//! same format. (Written for Riffle rather than taken from `serde-reflection`, which cuts
//! sequences and options short on later passes and so misses the variants of an enum inside a
//! `Vec` or an `Option`.)

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::de::{self, DeserializeOwned, DeserializeSeed, Visitor};

use super::{Container, Layout, ValueFormat, VariantLayout};

/// Passes at most (each explores at least one variant not seen before).
const MAX_PASSES: usize = 512;

/// Traces `T`'s format, every variant of every enum it reaches included.
pub(super) fn trace<T: DeserializeOwned>() -> Option<ValueFormat> {
    let mut state = State::default();
    for _ in 0..MAX_PASSES {
        let mut root = None;
        state.stack.clear();
        T::deserialize(Tracer {
            state: &mut state,
            out: &mut root,
        })
        .ok()?;
        if state.done() {
            return Some(ValueFormat {
                root: root?,
                containers: state.finish()?,
            });
        }
    }
    None
}

/// Why a pass stopped.
#[derive(Debug)]
struct TraceError(String);

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TraceError {}

impl de::Error for TraceError {
    fn custom<T: fmt::Display>(message: T) -> Self {
        TraceError(message.to_string())
    }
}

type TraceResult<T> = Result<T, TraceError>;

/// An enum's variants: their names, and the content of each one seen.
struct EnumTrace {
    names: &'static [&'static str],
    seen: Vec<Option<VariantLayout>>,
}

#[derive(Default)]
struct State {
    /// Structs as recorded (a second recording must agree).
    structs: BTreeMap<String, Container>,
    enums: BTreeMap<String, EnumTrace>,
    /// The containers being traced in this pass, innermost last.
    stack: Vec<&'static str>,
}

impl State {
    fn done(&self) -> bool {
        self.enums
            .values()
            .all(|e| e.seen.iter().all(Option::is_some))
    }

    fn finish(self) -> Option<BTreeMap<String, Container>> {
        let mut containers = self.structs;
        for (name, e) in self.enums {
            let variants = e
                .seen
                .into_iter()
                .enumerate()
                .map(|(i, v)| Some((i as u32, e.names[i].to_string(), v?)))
                .collect::<Option<Vec<_>>>()?;
            containers.insert(name, Container::Enum(variants));
        }
        Some(containers)
    }

    fn enter(&mut self, name: &'static str) -> TraceResult<()> {
        if self.stack.contains(&name) {
            return Err(TraceError(format!("`{name}` contains itself")));
        }
        self.stack.push(name);
        Ok(())
    }

    fn record_struct(&mut self, name: &str, container: Container) -> TraceResult<()> {
        match self.structs.get(name) {
            Some(known) if *known != container => Err(TraceError(format!(
                "two types named `{name}` with different fields"
            ))),
            Some(_) => Ok(()),
            None => {
                self.structs.insert(name.to_string(), container);
                Ok(())
            }
        }
    }

    /// Whether `layout` leads to an enum with variants not seen yet.
    fn reaches_unseen(&self, layout: &Layout, visited: &mut BTreeSet<String>) -> bool {
        match layout {
            Layout::Named(name) => {
                if !visited.insert(name.clone()) {
                    return false;
                }
                if let Some(e) = self.enums.get(name) {
                    e.seen.iter().any(|v| match v {
                        None => true,
                        Some(v) => self.variant_reaches_unseen(v, visited),
                    })
                } else {
                    match self.structs.get(name) {
                        Some(Container::Newtype(l)) => self.reaches_unseen(l, visited),
                        Some(Container::TupleStruct(ls)) => {
                            ls.iter().any(|l| self.reaches_unseen(l, visited))
                        }
                        Some(Container::Struct(fs)) => {
                            fs.iter().any(|(_, l)| self.reaches_unseen(l, visited))
                        }
                        _ => false,
                    }
                }
            }
            Layout::Option(l) | Layout::Seq(l) | Layout::Array { item: l, .. } => {
                self.reaches_unseen(l, visited)
            }
            Layout::Map { key, value } => {
                self.reaches_unseen(key, visited) || self.reaches_unseen(value, visited)
            }
            Layout::Tuple(ls) => ls.iter().any(|l| self.reaches_unseen(l, visited)),
            _ => false,
        }
    }

    fn variant_reaches_unseen(&self, v: &VariantLayout, visited: &mut BTreeSet<String>) -> bool {
        match v {
            VariantLayout::Unit => false,
            VariantLayout::Newtype(l) => self.reaches_unseen(l, visited),
            VariantLayout::Tuple(ls) => ls.iter().any(|l| self.reaches_unseen(l, visited)),
            VariantLayout::Struct(fs) => fs.iter().any(|(_, l)| self.reaches_unseen(l, visited)),
        }
    }

    /// The variant of enum `name` this encounter explores.
    fn choose(&mut self, name: &'static str, names: &'static [&'static str]) -> usize {
        let e = self
            .enums
            .entry(name.to_string())
            .or_insert_with(|| EnumTrace {
                names,
                seen: vec![None; names.len()],
            });
        if let Some(unseen) = e.seen.iter().position(Option::is_none) {
            return unseen;
        }
        let seen: Vec<VariantLayout> = e.seen.iter().flatten().cloned().collect();
        seen.iter()
            .position(|v| self.variant_reaches_unseen(v, &mut BTreeSet::new()))
            .unwrap_or(0)
    }
}

/// The deserializer of one value: records its layout in `out`.
struct Tracer<'a> {
    state: &'a mut State,
    out: &'a mut Option<Layout>,
}

impl<'a> Tracer<'a> {
    fn leaf(self, layout: Layout) {
        *self.out = Some(layout);
    }
}

/// Traces one value of a seed into a layout.
fn trace_seed<'de, S: DeserializeSeed<'de>>(
    state: &mut State,
    seed: S,
) -> TraceResult<(S::Value, Layout)> {
    let mut out = None;
    let value = seed.deserialize(Tracer {
        state,
        out: &mut out,
    })?;
    let layout = out.ok_or_else(|| TraceError("a value asked for nothing".into()))?;
    Ok((value, layout))
}

/// Visits `visitor` with `len` traced items: its value and the items' layouts.
fn visit_items<'de, V: Visitor<'de>>(
    state: &mut State,
    len: usize,
    visitor: V,
) -> TraceResult<(V::Value, Vec<Layout>)> {
    let mut layouts = Vec::new();
    let value = visitor.visit_seq(Items {
        state,
        layouts: &mut layouts,
        len,
    })?;
    Ok((value, layouts))
}

/// Hands a visitor `layouts.len()` traced items (a tuple, a struct's fields in order).
struct Items<'a> {
    state: &'a mut State,
    layouts: &'a mut Vec<Layout>,
    len: usize,
}

impl<'de> de::SeqAccess<'de> for Items<'_> {
    type Error = TraceError;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> TraceResult<Option<S::Value>> {
        if self.layouts.len() == self.len {
            return Ok(None);
        }
        let (value, layout) = trace_seed(self.state, seed)?;
        self.layouts.push(layout);
        Ok(Some(value))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.len - self.layouts.len())
    }
}

/// Hands a visitor one entry of a map.
struct Entry<'a> {
    state: &'a mut State,
    key: &'a mut Option<Layout>,
    value: &'a mut Option<Layout>,
}

impl<'de> de::MapAccess<'de> for Entry<'_> {
    type Error = TraceError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> TraceResult<Option<K::Value>> {
        if self.key.is_some() {
            return Ok(None);
        }
        let (key, layout) = trace_seed(self.state, seed)?;
        *self.key = Some(layout);
        Ok(Some(key))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> TraceResult<V::Value> {
        let (value, layout) = trace_seed(self.state, seed)?;
        *self.value = Some(layout);
        Ok(value)
    }
}

/// One variant of an enum, by index.
struct Variant<'a> {
    state: &'a mut State,
    index: usize,
    out: &'a mut Option<VariantLayout>,
}

impl<'de> de::EnumAccess<'de> for Variant<'_> {
    type Error = TraceError;
    type Variant = Self;

    fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> TraceResult<(S::Value, Self)> {
        let value = seed.deserialize(de::value::U32Deserializer::<TraceError>::new(
            self.index as u32,
        ))?;
        Ok((value, self))
    }
}

impl<'de> de::VariantAccess<'de> for Variant<'_> {
    type Error = TraceError;

    fn unit_variant(self) -> TraceResult<()> {
        *self.out = Some(VariantLayout::Unit);
        Ok(())
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> TraceResult<S::Value> {
        let (value, layout) = trace_seed(self.state, seed)?;
        *self.out = Some(VariantLayout::Newtype(layout));
        Ok(value)
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> TraceResult<V::Value> {
        let (value, layouts) = visit_items(&mut *self.state, len, visitor)?;
        *self.out = Some(VariantLayout::Tuple(layouts));
        Ok(value)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> TraceResult<V::Value> {
        let (value, layouts) = visit_items(&mut *self.state, fields.len(), visitor)?;
        *self.out = Some(VariantLayout::Struct(named(fields, layouts)));
        Ok(value)
    }
}

fn named(fields: &'static [&'static str], layouts: Vec<Layout>) -> Vec<(String, Layout)> {
    fields.iter().map(|f| f.to_string()).zip(layouts).collect()
}

macro_rules! leaves {
    ($($method:ident => $layout:ident, $visit:ident($value:expr);)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> TraceResult<V::Value> {
                self.leaf(Layout::$layout);
                visitor.$visit($value)
            }
        )*
    };
}

impl<'de> de::Deserializer<'de> for Tracer<'_> {
    type Error = TraceError;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> TraceResult<V::Value> {
        Err(TraceError(
            "the type asks for self-describing input (deserialize_any)".into(),
        ))
    }

    leaves! {
        deserialize_bool => Bool, visit_bool(false);
        deserialize_i8 => I8, visit_i8(1);
        deserialize_i16 => I16, visit_i16(1);
        deserialize_i32 => I32, visit_i32(1);
        deserialize_i64 => I64, visit_i64(1);
        deserialize_i128 => I128, visit_i128(1);
        deserialize_u8 => U8, visit_u8(1);
        deserialize_u16 => U16, visit_u16(1);
        deserialize_u32 => U32, visit_u32(1);
        deserialize_u64 => U64, visit_u64(1);
        deserialize_u128 => U128, visit_u128(1);
        deserialize_f32 => F32, visit_f32(0.0);
        deserialize_f64 => F64, visit_f64(0.0);
        deserialize_char => Char, visit_char('A');
        deserialize_str => Str, visit_str("");
        deserialize_string => Str, visit_string(String::new());
        deserialize_bytes => Bytes, visit_bytes(&[]);
        deserialize_byte_buf => Bytes, visit_byte_buf(Vec::new());
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> TraceResult<V::Value> {
        self.leaf(Layout::Unit);
        visitor.visit_unit()
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> TraceResult<V::Value> {
        let (value, inner) = {
            let mut inner = None;
            let value = visitor.visit_some(Tracer {
                state: &mut *self.state,
                out: &mut inner,
            })?;
            (value, inner)
        };
        let inner = inner.ok_or_else(|| TraceError("an option of nothing".into()))?;
        self.leaf(Layout::Option(Box::new(inner)));
        Ok(value)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> TraceResult<V::Value> {
        self.state.record_struct(name, Container::UnitStruct)?;
        self.leaf(Layout::Named(name.to_string()));
        visitor.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> TraceResult<V::Value> {
        self.state.enter(name)?;
        let mut inner = None;
        let value = visitor.visit_newtype_struct(Tracer {
            state: &mut *self.state,
            out: &mut inner,
        })?;
        self.state.stack.pop();
        let inner = inner.ok_or_else(|| TraceError("a newtype of nothing".into()))?;
        self.state.record_struct(name, Container::Newtype(inner))?;
        self.leaf(Layout::Named(name.to_string()));
        Ok(value)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> TraceResult<V::Value> {
        let (value, mut items) = visit_items(&mut *self.state, 1, visitor)?;
        let item = items
            .pop()
            .ok_or_else(|| TraceError("a sequence that reads no item".into()))?;
        self.leaf(Layout::Seq(Box::new(item)));
        Ok(value)
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, visitor: V) -> TraceResult<V::Value> {
        let (value, items) = visit_items(&mut *self.state, len, visitor)?;
        self.leaf(Layout::Tuple(items));
        Ok(value)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> TraceResult<V::Value> {
        self.state.enter(name)?;
        let (value, items) = visit_items(&mut *self.state, len, visitor)?;
        self.state.stack.pop();
        self.state
            .record_struct(name, Container::TupleStruct(items))?;
        self.leaf(Layout::Named(name.to_string()));
        Ok(value)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> TraceResult<V::Value> {
        let (mut key, mut value) = (None, None);
        let result = visitor.visit_map(Entry {
            state: &mut *self.state,
            key: &mut key,
            value: &mut value,
        })?;
        match (key, value) {
            (Some(key), Some(value)) => self.leaf(Layout::Map {
                key: Box::new(key),
                value: Box::new(value),
            }),
            _ => return Err(TraceError("a map that reads no entry".into())),
        }
        Ok(result)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> TraceResult<V::Value> {
        self.state.enter(name)?;
        let (value, layouts) = visit_items(&mut *self.state, fields.len(), visitor)?;
        self.state.stack.pop();
        self.state
            .record_struct(name, Container::Struct(named(fields, layouts)))?;
        self.leaf(Layout::Named(name.to_string()));
        Ok(value)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> TraceResult<V::Value> {
        if variants.is_empty() {
            return Err(TraceError(format!("`{name}` has no variants")));
        }
        self.state.enter(name)?;
        let index = self.state.choose(name, variants);
        let mut content = None;
        let value = visitor.visit_enum(Variant {
            state: &mut *self.state,
            index,
            out: &mut content,
        })?;
        self.state.stack.pop();
        let content = content.ok_or_else(|| TraceError("a variant of nothing".into()))?;
        let e = self.state.enums.get_mut(name).expect("chosen above");
        match &e.seen[index] {
            Some(known) if *known != content => {
                return Err(TraceError(format!(
                    "two types named `{name}` with different variants"
                )));
            }
            _ => e.seen[index] = Some(content),
        }
        self.leaf(Layout::Named(name.to_string()));
        Ok(value)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, _visitor: V) -> TraceResult<V::Value> {
        Err(TraceError("an identifier outside an enum".into()))
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, _visitor: V) -> TraceResult<V::Value> {
        Err(TraceError("an ignored value".into()))
    }

    fn is_human_readable(&self) -> bool {
        false
    }
}
