//! Key groups: how keys are spread over parallel subtasks, and the unit in which keyed state moves.
//!
//! A key belongs to key group `hash(key) mod max_parallelism`; subtask `i` of `p` owns a contiguous
//! range of key groups. The hash must give the same answer in every process, on every platform
//! and with every Rust compiler, or a savepoint restored after an upgrade would find its keyed
//! state in the wrong key groups. So it never goes through `std::hash::Hash` (whose byte stream
//! the standard library does not promise to keep): the key is written in a *canonical byte
//! encoding* through its `serde::Serialize` implementation ([`encode_key`]), and the bytes are
//! hashed with XXH3-64 (seed 0), a hash with a fixed specification.
//!
//! The canonical encoding, version [`KEY_HASH_VERSION`] (recorded in every checkpoint and
//! savepoint manifest; a restore refuses a snapshot written with another version):
//!
//! | serde data model | bytes |
//! |---|---|
//! | `bool` | one byte, 0 or 1 |
//! | `i8`..`i128`, `u8`..`u128` (`usize`/`isize` as 64 bits) | two's complement, little endian, the type's width |
//! | `f32`, `f64` | IEEE 754 bits, little endian; `-0.0` written as `0.0`, every NaN as the canonical NaN |
//! | `char` | its scalar value as `u32` |
//! | `str`, `[u8]` | length in bytes as `u64`, then the UTF-8 (or raw) bytes |
//! | `None` / `Some(v)` | `0` / `1` then `v` |
//! | unit, unit struct | nothing |
//! | newtype struct | the inner value (`UserId(7)` hashes as `7`) |
//! | tuple, tuple struct, struct | the fields in order, concatenated (no names, no count) |
//! | sequence, map | element count as `u64`, then the elements (map: key then value) in iteration order |
//! | enum variant | variant index as `u32`, then its fields as above |
//!
//! Every integer is little endian and fixed width, so the bytes never depend on the platform.
//! Maps hash in their iteration order: key a job by a `BTreeMap`, never by a `HashMap`.
//!
//! Hashing a key allocates nothing: a key of up to [`INLINE_KEY_BYTES`] encoded bytes is encoded
//! into a buffer on the stack, a longer one into a buffer kept per thread and reused.

use std::cell::Cell;

use serde::Serialize;
use serde::ser::{self, SerializeMap, SerializeSeq};
use xxhash_rust::xxh3::xxh3_64;

/// The key selector of a keyed stream: the key of a record.
pub type KeyFn<K, T> = std::sync::Arc<dyn Fn(&T) -> K + Send + Sync>;

/// Index of a key group, in `0..max_parallelism`.
pub type KeyGroup = u16;

/// Version of the key-group hash scheme: the canonical key encoding described in the
/// [module documentation](self), hashed with XXH3-64.
///
/// Checkpoint and savepoint manifests record it (`key_hash_version`); restoring a snapshot
/// written with another version fails, since its keyed state would sit in the wrong key groups.
/// Version 0 names the scheme of Riffle releases before versioning (bytes of `std::hash::Hash`),
/// which no release reads.
pub const KEY_HASH_VERSION: u32 = 1;

/// Why a key could not be encoded: its `Serialize` implementation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot encode the key: {0}")]
pub struct KeyEncodeError(String);

impl ser::Error for KeyEncodeError {
    fn custom<M: std::fmt::Display>(message: M) -> Self {
        KeyEncodeError(message.to_string())
    }
}

/// Appends the canonical encoding of `key` (see the [module documentation](self)) to `out`.
///
/// ```
/// let mut bytes = Vec::new();
/// riffle::keys::encode_key(&("ab", 7u16), &mut bytes).unwrap();
/// assert_eq!(bytes, [2, 0, 0, 0, 0, 0, 0, 0, b'a', b'b', 7, 0]);
/// ```
pub fn encode_key<K: Serialize + ?Sized>(key: &K, out: &mut Vec<u8>) -> Result<(), KeyEncodeError> {
    key.serialize(&mut KeyEncoder { out })
}

/// Encoded keys up to this many bytes are hashed from a buffer on the stack; longer ones from a
/// buffer kept per thread.
pub const INLINE_KEY_BYTES: usize = 64;

thread_local! {
    /// The buffer keys longer than [`INLINE_KEY_BYTES`] are encoded into, reused.
    static LONG_KEY: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// The stable hash of a key: XXH3-64 of its canonical encoding ([`encode_key`]).
///
/// A key whose `Serialize` implementation fails hashes the bytes written before the failure:
/// the same key always fails the same way, so it still lands in one key group (its state then
/// fails to encode, with an error naming the operator).
///
/// ```
/// // Pinned: this value may never change (see `KEY_HASH_VERSION`).
/// assert_eq!(riffle::keys::stable_hash(&42u64), 0xd5a6_f8c8_38df_27c8);
/// ```
#[inline]
pub fn stable_hash<K: Serialize + ?Sized>(key: &K) -> u64 {
    let mut inline = Inline {
        bytes: [0; INLINE_KEY_BYTES],
        len: 0,
        overflow: false,
    };
    let _ = key.serialize(&mut KeyEncoder { out: &mut inline });
    if !inline.overflow {
        return xxh3_64(&inline.bytes[..inline.len]);
    }
    // Too long for the stack: encoded again into the thread's buffer (a key whose `Serialize`
    // hashes another long key finds it taken, and uses a fresh one).
    LONG_KEY.with(|cell| {
        let mut bytes = cell.take();
        bytes.clear();
        let _ = encode_key(key, &mut bytes);
        let hash = xxh3_64(&bytes);
        if bytes.capacity() <= 64 * 1024 {
            cell.set(bytes);
        }
        hash
    })
}

/// The key group of `key` among `max_parallelism` groups.
///
/// ```
/// let group = riffle::keys::key_group_of(&42u64, 128);
/// assert!(group < 128);
/// assert_eq!(group, riffle::keys::key_group_of(&42u64, 128));
/// ```
pub fn key_group_of<K: Serialize + ?Sized>(key: &K, max_parallelism: usize) -> KeyGroup {
    (stable_hash(key) % max_parallelism as u64) as KeyGroup
}

/// The subtask (of `parallelism`) that owns `key_group` (Flink's assignment).
pub fn subtask_for_key_group(
    key_group: KeyGroup,
    max_parallelism: usize,
    parallelism: usize,
) -> usize {
    key_group as usize * parallelism / max_parallelism
}

/// A contiguous range of key groups, `start..=end`, owned by one subtask.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyGroupRange {
    /// First key group of the range.
    pub start: KeyGroup,
    /// Last key group of the range (inclusive).
    pub end: KeyGroup,
}

impl KeyGroupRange {
    /// The range owned by `subtask` of `parallelism` with `max_parallelism` key groups.
    ///
    /// ```
    /// use riffle::keys::KeyGroupRange;
    /// assert_eq!(KeyGroupRange::for_subtask(0, 2, 128), KeyGroupRange { start: 0, end: 63 });
    /// assert_eq!(KeyGroupRange::for_subtask(1, 2, 128), KeyGroupRange { start: 64, end: 127 });
    /// ```
    pub fn for_subtask(subtask: usize, parallelism: usize, max_parallelism: usize) -> Self {
        let start = (subtask * max_parallelism).div_ceil(parallelism);
        let end = ((subtask + 1) * max_parallelism - 1) / parallelism;
        KeyGroupRange {
            start: start as KeyGroup,
            end: end as KeyGroup,
        }
    }

    /// Whether `key_group` is in the range.
    pub fn contains(&self, key_group: KeyGroup) -> bool {
        (self.start..=self.end).contains(&key_group)
    }

    /// Number of key groups in the range.
    pub fn len(&self) -> usize {
        (self.end as usize + 1).saturating_sub(self.start as usize)
    }

    /// Whether the range holds no key group.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where the encoder writes: a `Vec` ([`encode_key`]) or a buffer on the stack ([`stable_hash`]).
trait Output {
    fn put(&mut self, bytes: &[u8]);
    fn position(&self) -> usize;
    /// Overwrites 8 bytes at `at` (a count written before its elements were).
    fn patch(&mut self, at: usize, bytes: [u8; 8]);
}

impl Output for Vec<u8> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }

    fn position(&self) -> usize {
        self.len()
    }

    fn patch(&mut self, at: usize, bytes: [u8; 8]) {
        self[at..at + 8].copy_from_slice(&bytes);
    }
}

/// The encoding of a short key, on the stack; `overflow` once it did not fit.
struct Inline {
    bytes: [u8; INLINE_KEY_BYTES],
    len: usize,
    overflow: bool,
}

impl Output for Inline {
    #[inline(always)]
    fn put(&mut self, bytes: &[u8]) {
        // After an overflow, what fits is still written: the bytes are discarded anyway.
        let end = self.len + bytes.len();
        if end <= INLINE_KEY_BYTES {
            self.bytes[self.len..end].copy_from_slice(bytes);
            self.len = end;
        } else {
            self.overflow = true;
        }
    }

    fn position(&self) -> usize {
        self.len
    }

    fn patch(&mut self, at: usize, bytes: [u8; 8]) {
        if !self.overflow {
            self.bytes[at..at + 8].copy_from_slice(&bytes);
        }
    }
}

/// The serde serializer writing the canonical encoding.
struct KeyEncoder<'a, O: Output> {
    out: &'a mut O,
}

impl<O: Output> KeyEncoder<'_, O> {
    #[inline]
    fn len(&mut self, len: usize) {
        self.out.put(&(len as u64).to_le_bytes());
    }

    #[inline]
    fn variant(&mut self, index: u32) {
        self.out.put(&index.to_le_bytes());
    }
}

/// A sequence or map being written: the element count goes first; when serde does not know it
/// in advance, a placeholder is patched at the end.
struct Counted<'e, 'a, O: Output> {
    encoder: &'e mut KeyEncoder<'a, O>,
    /// Where the placeholder count is, when it must be patched.
    patch: Option<usize>,
    count: u64,
}

impl<'e, 'a, O: Output> Counted<'e, 'a, O> {
    fn new(encoder: &'e mut KeyEncoder<'a, O>, len: Option<usize>) -> Self {
        let patch = match len {
            Some(len) => {
                encoder.len(len);
                None
            }
            None => {
                let at = encoder.out.position();
                encoder.len(0);
                Some(at)
            }
        };
        Counted {
            encoder,
            patch,
            count: 0,
        }
    }

    fn finish(self) {
        if let Some(at) = self.patch {
            self.encoder.out.patch(at, self.count.to_le_bytes());
        }
    }
}

macro_rules! fixed_width {
    ($($method:ident: $ty:ty),* $(,)?) => {
        $(#[inline]
        fn $method(self, v: $ty) -> Result<(), KeyEncodeError> {
            self.out.put(&v.to_le_bytes());
            Ok(())
        })*
    };
}

impl<'e, 'a, O: Output> ser::Serializer for &'e mut KeyEncoder<'a, O> {
    type Ok = ();
    type Error = KeyEncodeError;
    type SerializeSeq = Counted<'e, 'a, O>;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Counted<'e, 'a, O>;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    fixed_width!(
        serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64,
        serialize_i128: i128, serialize_u8: u8, serialize_u16: u16, serialize_u32: u32,
        serialize_u64: u64, serialize_u128: u128,
    );

    fn is_human_readable(&self) -> bool {
        false
    }

    fn serialize_bool(self, v: bool) -> Result<(), KeyEncodeError> {
        self.out.put(&[v as u8]);
        Ok(())
    }

    fn serialize_f32(self, v: f32) -> Result<(), KeyEncodeError> {
        let v = if v.is_nan() {
            f32::NAN
        } else if v == 0.0 {
            0.0
        } else {
            v
        };
        self.out.put(&v.to_bits().to_le_bytes());
        Ok(())
    }

    fn serialize_f64(self, v: f64) -> Result<(), KeyEncodeError> {
        let v = if v.is_nan() {
            f64::NAN
        } else if v == 0.0 {
            0.0
        } else {
            v
        };
        self.out.put(&v.to_bits().to_le_bytes());
        Ok(())
    }

    fn serialize_char(self, v: char) -> Result<(), KeyEncodeError> {
        self.serialize_u32(v as u32)
    }

    fn serialize_str(self, v: &str) -> Result<(), KeyEncodeError> {
        self.serialize_bytes(v.as_bytes())
    }

    fn serialize_bytes(self, v: &[u8]) -> Result<(), KeyEncodeError> {
        self.len(v.len());
        self.out.put(v);
        Ok(())
    }

    fn serialize_none(self) -> Result<(), KeyEncodeError> {
        self.out.put(&[0]);
        Ok(())
    }

    fn serialize_some<V: Serialize + ?Sized>(self, value: &V) -> Result<(), KeyEncodeError> {
        self.out.put(&[1]);
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<(), KeyEncodeError> {
        Ok(())
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), KeyEncodeError> {
        Ok(())
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        index: u32,
        _variant: &'static str,
    ) -> Result<(), KeyEncodeError> {
        self.variant(index);
        Ok(())
    }

    fn serialize_newtype_struct<V: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &V,
    ) -> Result<(), KeyEncodeError> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<V: Serialize + ?Sized>(
        self,
        _name: &'static str,
        index: u32,
        _variant: &'static str,
        value: &V,
    ) -> Result<(), KeyEncodeError> {
        self.variant(index);
        value.serialize(self)
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<Counted<'e, 'a, O>, KeyEncodeError> {
        Ok(Counted::new(self, len))
    }

    fn serialize_tuple(self, _len: usize) -> Result<Self, KeyEncodeError> {
        Ok(self)
    }

    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self, KeyEncodeError> {
        Ok(self)
    }

    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self, KeyEncodeError> {
        self.variant(index);
        Ok(self)
    }

    fn serialize_map(self, len: Option<usize>) -> Result<Counted<'e, 'a, O>, KeyEncodeError> {
        Ok(Counted::new(self, len))
    }

    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Self, KeyEncodeError> {
        Ok(self)
    }

    fn serialize_struct_variant(
        self,
        _name: &'static str,
        index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self, KeyEncodeError> {
        self.variant(index);
        Ok(self)
    }
}

impl<O: Output> SerializeSeq for Counted<'_, '_, O> {
    type Ok = ();
    type Error = KeyEncodeError;

    fn serialize_element<V: Serialize + ?Sized>(
        &mut self,
        value: &V,
    ) -> Result<(), KeyEncodeError> {
        self.count += 1;
        value.serialize(&mut *self.encoder)
    }

    fn end(self) -> Result<(), KeyEncodeError> {
        self.finish();
        Ok(())
    }
}

impl<O: Output> SerializeMap for Counted<'_, '_, O> {
    type Ok = ();
    type Error = KeyEncodeError;

    fn serialize_key<V: Serialize + ?Sized>(&mut self, key: &V) -> Result<(), KeyEncodeError> {
        self.count += 1;
        key.serialize(&mut *self.encoder)
    }

    fn serialize_value<V: Serialize + ?Sized>(&mut self, value: &V) -> Result<(), KeyEncodeError> {
        value.serialize(&mut *self.encoder)
    }

    fn end(self) -> Result<(), KeyEncodeError> {
        self.finish();
        Ok(())
    }
}

/// Tuples, structs and their enum variants: the fields one after the other.
macro_rules! fields {
    ($($trait:ident, $method:ident $(, $key:ident)?;)*) => {
        $(impl<O: Output> ser::$trait for &mut KeyEncoder<'_, O> {
            type Ok = ();
            type Error = KeyEncodeError;

            fn $method<V: Serialize + ?Sized>(
                &mut self,
                $($key: &'static str,)?
                value: &V,
            ) -> Result<(), KeyEncodeError> {
                value.serialize(&mut **self)
            }

            fn end(self) -> Result<(), KeyEncodeError> {
                Ok(())
            }
        })*
    };
}

fields! {
    SerializeTuple, serialize_element;
    SerializeTupleStruct, serialize_field;
    SerializeTupleVariant, serialize_field;
    SerializeStruct, serialize_field, _key;
    SerializeStructVariant, serialize_field, _key;
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes<K: Serialize + ?Sized>(key: &K) -> Vec<u8> {
        let mut out = Vec::new();
        encode_key(key, &mut out).unwrap();
        out
    }

    #[derive(Serialize)]
    struct UserId(u64);

    #[derive(Serialize)]
    struct Session {
        user: String,
        device: u8,
    }

    #[derive(Serialize)]
    enum Route {
        Home,
        Page(u32),
        Pair(u8, u8),
    }

    /// The golden vectors: the canonical bytes of integer, string, tuple and other keys, their
    /// XXH3-64 hashes and key groups (of 128). A change here orphans the keyed state of every
    /// snapshot taken so far: it needs a new `KEY_HASH_VERSION`.
    #[test]
    fn golden_vectors() {
        let cases: Vec<(&str, Vec<u8>, u64, KeyGroup)> = vec![
            ("42u64", bytes(&42u64), GOLDEN[0].0, GOLDEN[0].1),
            ("-1i32", bytes(&-1i32), GOLDEN[1].0, GOLDEN[1].1),
            ("0u8", bytes(&0u8), GOLDEN[2].0, GOLDEN[2].1),
            ("\"user-42\"", bytes("user-42"), GOLDEN[3].0, GOLDEN[3].1),
            ("\"\"", bytes(""), GOLDEN[4].0, GOLDEN[4].1),
            (
                "(\"user-42\", 7u64)",
                bytes(&("user-42", 7u64)),
                GOLDEN[5].0,
                GOLDEN[5].1,
            ),
            (
                "(1u16, 2i64)",
                bytes(&(1u16, 2i64)),
                GOLDEN[6].0,
                GOLDEN[6].1,
            ),
        ];
        let expected_bytes: [&[u8]; 7] = [
            &[42, 0, 0, 0, 0, 0, 0, 0],
            &[0xff, 0xff, 0xff, 0xff],
            &[0],
            &[
                7, 0, 0, 0, 0, 0, 0, 0, b'u', b's', b'e', b'r', b'-', b'4', b'2',
            ],
            &[0, 0, 0, 0, 0, 0, 0, 0],
            &[
                7, 0, 0, 0, 0, 0, 0, 0, b'u', b's', b'e', b'r', b'-', b'4', b'2', 7, 0, 0, 0, 0, 0,
                0, 0,
            ],
            &[1, 0, 2, 0, 0, 0, 0, 0, 0, 0],
        ];
        for ((name, encoded, hash, group), expected) in cases.iter().zip(expected_bytes) {
            assert_eq!(encoded.as_slice(), expected, "bytes of {name}");
            assert_eq!(xxh3_64(expected), *hash, "hash of {name}");
            assert_eq!(hash % 128, *group as u64, "key group of {name}");
        }
        assert_eq!(stable_hash(&42u64), GOLDEN[0].0);
        assert_eq!(key_group_of(&42u64, 128), GOLDEN[0].1);
        assert_eq!(key_group_of(&-1i32, 128), GOLDEN[1].1);
        assert_eq!(key_group_of("user-42", 128), GOLDEN[3].1);
        assert_eq!(key_group_of(&("user-42", 7u64), 128), GOLDEN[5].1);
    }

    /// (hash, key group of 128) of the golden keys above.
    const GOLDEN: [(u64, KeyGroup); 7] = [
        (0xd5a6_f8c8_38df_27c8, 72),
        (0xcd6b_1c92_0d3f_662c, 44),
        (0xc44b_dff4_074e_ecdb, 91),
        (0xe59f_4d3f_57bf_5f74, 116),
        (0xc77b_3abb_6f87_acd9, 89),
        (0xf552_4880_b24e_4ca2, 34),
        (0x4ae0_fa3b_9d14_39d0, 80),
    ];

    #[test]
    fn the_encoding_follows_the_data_model() {
        // A string, a `String` and a `&str` are the same key; so are a newtype and its inner value.
        assert_eq!(bytes("ab"), bytes(&String::from("ab")));
        assert_eq!(bytes(&UserId(7)), bytes(&7u64));
        assert_eq!(stable_hash(&UserId(7)), stable_hash(&7u64));
        // Widths are the type's, not the platform's.
        assert_eq!(bytes(&7usize), bytes(&7u64));
        assert_eq!(bytes(&-2i128), (-2i128).to_le_bytes());
        assert_eq!(bytes(&true), [1]);
        assert_eq!(bytes(&'é'), 0xe9u32.to_le_bytes());
        // Options, structs (fields in order, no names) and enums (variant index).
        assert_eq!(bytes(&None::<u8>), [0]);
        assert_eq!(bytes(&Some(3u8)), [1, 3]);
        let session = Session {
            user: "a".into(),
            device: 9,
        };
        assert_eq!(bytes(&session), [1, 0, 0, 0, 0, 0, 0, 0, b'a', 9]);
        assert_eq!(bytes(&Route::Home), [0, 0, 0, 0]);
        assert_eq!(bytes(&Route::Page(5)), [1, 0, 0, 0, 5, 0, 0, 0]);
        assert_eq!(bytes(&Route::Pair(1, 2)), [2, 0, 0, 0, 1, 2]);
        // Sequences carry their length, so ("ab", "c") and ("a", "bc") differ.
        assert_eq!(bytes(&vec![1u8, 2]), [2, 0, 0, 0, 0, 0, 0, 0, 1, 2]);
        assert_ne!(stable_hash(&("ab", "c")), stable_hash(&("a", "bc")));
        let map: std::collections::BTreeMap<u8, bool> = [(1, true), (2, false)].into();
        assert_eq!(bytes(&map), [2, 0, 0, 0, 0, 0, 0, 0, 1, 1, 2, 0]);
        // A sequence whose length serde does not know up front gets it patched in.
        struct Unsized;
        impl Serialize for Unsized {
            fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut seq = s.serialize_seq(None)?;
                seq.serialize_element(&1u8)?;
                seq.serialize_element(&2u8)?;
                seq.end()
            }
        }
        assert_eq!(bytes(&Unsized), bytes(&vec![1u8, 2]));
        // Equal floats are one key.
        assert_eq!(bytes(&-0.0f64), bytes(&0.0f64));
        assert_eq!(bytes(&f64::NAN), bytes(&-f64::NAN));
        assert_eq!(bytes(&1.5f32), 1.5f32.to_bits().to_le_bytes());
    }

    #[test]
    fn short_and_long_keys_hash_their_canonical_bytes() {
        let long = "x".repeat(1000);
        let at_the_limit = "y".repeat(INLINE_KEY_BYTES - 8);
        let just_over = "z".repeat(INLINE_KEY_BYTES - 7);
        fn check<K: Serialize + ?Sized>(key: &K) {
            let encoded = bytes(key);
            assert_eq!(
                stable_hash(key),
                xxh3_64(&encoded),
                "{} bytes",
                encoded.len()
            );
        }
        // Twice: the thread's buffer for long keys is reused and left clean.
        for _ in 0..2 {
            check(&7u64);
            check(&long);
            check(&at_the_limit);
            check(&just_over);
            check(&(&long, 3u8));
            check(&vec![&long, &long]);
        }
    }

    #[test]
    fn a_failing_key_still_has_one_key_group() {
        struct Broken;
        impl Serialize for Broken {
            fn serialize<S: ser::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
                Err(ser::Error::custom("no"))
            }
        }
        let mut out = Vec::new();
        assert_eq!(
            encode_key(&Broken, &mut out).unwrap_err().to_string(),
            "cannot encode the key: no"
        );
        assert_eq!(stable_hash(&Broken), stable_hash(&Broken));
    }

    proptest! {
        #[test]
        fn ranges_partition_the_key_groups(parallelism in 1usize..64, extra in 0usize..200) {
            let max = parallelism + extra;
            let mut next = 0usize;
            for subtask in 0..parallelism {
                let range = KeyGroupRange::for_subtask(subtask, parallelism, max);
                prop_assert_eq!(range.start as usize, next);
                prop_assert!(!range.is_empty());
                for kg in range.start..=range.end {
                    prop_assert_eq!(subtask_for_key_group(kg, max, parallelism), subtask);
                }
                next = range.end as usize + 1;
            }
            prop_assert_eq!(next, max);
        }

        #[test]
        fn every_key_has_one_owner(key in any::<u64>(), parallelism in 1usize..16) {
            let group = key_group_of(&key, 128);
            let owner = subtask_for_key_group(group, 128, parallelism);
            prop_assert!(KeyGroupRange::for_subtask(owner, parallelism, 128).contains(group));
        }
    }
}
