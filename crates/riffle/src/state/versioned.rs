//! The schemas of an operator's own state tables — a window operator's windows and sessions (the
//! accumulators or buffered records of each key and window), a rolling aggregate's accumulators —
//! recorded in every checkpoint as those of declared keyed states are ([`StateSchema`]), and
//! read back by a restore.
//!
//! A restore reads values written by an older format of their type with that format and
//! converts them by serde: a field added to an accumulator with `#[serde(default)]`, a field
//! removed, an integer widened. A change serde cannot read fails the restore with
//! [`Error::IncompatibleState`] naming the operator's uid and the state, never a panic and never
//! garbage. Checkpoints of earlier releases recorded no schema for these tables: they are read as
//! written.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;

use crate::codec::encode;
use crate::error::{Error, Result};
use crate::record::Data;
use crate::state::StateTable;
use crate::state::evolution::{self, Restore, StateSchema};

/// One state table of an operator, by name and value type (version 1: these states have no
/// version of their own; their values' types evolve by serde).
pub(crate) struct TableState<V> {
    schema: StateSchema,
    _value: PhantomData<fn() -> V>,
}

impl<V: Data> TableState<V> {
    /// The state table `name` holding values of type `V`.
    pub(crate) fn new(name: &str) -> Self {
        TableState {
            schema: StateSchema {
                name: name.to_string(),
                version: 1,
                type_name: std::any::type_name::<V>().to_string(),
                format: evolution::format_of::<V>().map(|f| (*f).clone()),
            },
            _value: PhantomData,
        }
    }

    /// What a checkpoint records of it.
    pub(crate) fn schema(&self) -> StateSchema {
        self.schema.clone()
    }

    /// How a restore of operator `operator` reads the values of this state, given the schemas
    /// its checkpoint recorded: as written, or with the recorded format and converted. Fails
    /// when the checkpoint holds a newer version.
    pub(crate) fn reader(
        &self,
        operator: &str,
        restored: &[StateSchema],
    ) -> Result<ValueReader<V>> {
        let mut reader = ValueReader {
            operator: operator.to_string(),
            schema: self.schema.clone(),
            old: None,
            _value: PhantomData,
        };
        let old = restored.iter().find(|s| s.name == self.schema.name);
        match evolution::restore_plan(old, &self.schema) {
            Ok(Restore::AsWritten) => {}
            Ok(Restore::Evolve) => reader.old = old.cloned(),
            Err(message) => return Err(reader.incompatible(message)),
        }
        Ok(reader)
    }
}

/// Reads the values of one state table from a checkpoint (see [`TableState::reader`]).
pub(crate) struct ValueReader<V> {
    operator: String,
    schema: StateSchema,
    /// The schema the values were written with, when it differs from this job's.
    old: Option<StateSchema>,
    _value: PhantomData<fn() -> V>,
}

impl<V: Data> ValueReader<V> {
    fn incompatible(&self, message: String) -> Error {
        Error::IncompatibleState {
            operator: self.operator.clone(),
            state: self.schema.name.clone(),
            message,
        }
    }

    /// The versions and types, for an error of converting an old value.
    fn versions(&self, old: &StateSchema) -> String {
        format!(
            "the savepoint holds version {} of it ({}), this job declares version {} ({})",
            old.version, old.type_name, self.schema.version, self.schema.type_name
        )
    }

    /// Reads one value from the front of `input`.
    pub(crate) fn read(&self, input: &mut &[u8]) -> Result<V> {
        match &self.old {
            None => {
                let (value, rest) = postcard::take_from_bytes::<V>(input).map_err(|e| {
                    self.incompatible(format!(
                        "its type, {}, cannot read what the checkpoint holds: {e}",
                        self.schema.type_name
                    ))
                })?;
                *input = rest;
                Ok(value)
            }
            Some(old) => evolution::read_old_value(old, input, self.schema.version, None)
                .map_err(|e| self.incompatible(format!("{}; {e}", self.versions(old)))),
        }
    }

    /// Reads a sequence of entries `(P, V)` as the state codec writes a `Vec` of tuples (the
    /// tuple's fields one after the other), each value with [`read`](ValueReader::read).
    pub(crate) fn read_entries<P: DeserializeOwned>(
        &self,
        input: &mut &[u8],
    ) -> Result<Vec<(P, V)>> {
        let cut = |e: postcard::Error| {
            self.incompatible(format!("cannot read the keys of its entries: {e}"))
        };
        let (len, mut rest) = postcard::take_from_bytes::<u64>(input).map_err(cut)?;
        let mut entries = Vec::with_capacity((len as usize).min(rest.len()));
        for _ in 0..len {
            let (prefix, after) = postcard::take_from_bytes::<P>(rest).map_err(cut)?;
            rest = after;
            let value = self.read(&mut rest)?;
            entries.push((prefix, value));
        }
        *input = rest;
        Ok(entries)
    }

    /// Converts the values of `table` held in the task's store (RocksDB) when they were written
    /// by an older format; returns how many. Nothing to do on the heap, where the checkpoint's
    /// entries are read with [`read_entries`](ValueReader::read_entries).
    pub(crate) fn rewrite_store<K, N>(&self, table: &mut StateTable<K, N, V>) -> Result<usize>
    where
        K: std::hash::Hash + Eq + Clone + serde::Serialize + DeserializeOwned,
        N: std::hash::Hash + Eq + Clone + serde::Serialize + DeserializeOwned,
    {
        let (Some(old), Some(kv)) = (&self.old, table.kv_mut()) else {
            return Ok(0);
        };
        let mut failed = None;
        let rewritten = kv.rewrite_values(|bytes| {
            let mut input = bytes;
            match self.read(&mut input) {
                Ok(value) => encode(&value),
                Err(e) => {
                    let message = e.to_string();
                    failed = Some(e);
                    Err(Error::State(message))
                }
            }
        });
        if let Some(error) = failed {
            return Err(error);
        }
        let count =
            rewritten.map_err(|e| self.incompatible(format!("{}; {e}", self.versions(old))))?;
        tracing::info!(
            operator = %self.operator, state = %self.schema.name, entries = count,
            "state restored from an older format of its type"
        );
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    /// A key group of a window operator: its entries, and its window function's state.
    type Group<P, V> = (Vec<(P, V)>, Option<Vec<u8>>);

    /// Entries `(P, V)` and the bytes after them, as a window operator's key group holds them.
    fn read_group<P: DeserializeOwned, V: Data>(
        bytes: &[u8],
        values: &ValueReader<V>,
    ) -> Result<Group<P, V>> {
        let mut input = bytes;
        let entries = values.read_entries::<P>(&mut input)?;
        let rest = (!input.is_empty())
            .then(|| crate::codec::decode::<Vec<u8>>(input))
            .transpose()?;
        Ok((entries, rest))
    }

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    struct V1 {
        hits: u64,
    }

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    struct V2 {
        hits: u64,
        #[serde(default)]
        pages: Vec<u32>,
    }

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    struct Broken {
        hits: String,
    }

    fn written() -> (Vec<u8>, StateSchema) {
        let entries: Vec<((i64, String), V1)> = vec![
            ((1, "a".into()), V1 { hits: 3 }),
            ((2, "b".into()), V1 { hits: 5 }),
        ];
        let bytes = encode(&(entries, vec![7u8, 8])).unwrap();
        (bytes, TableState::<V1>::new("windows").schema())
    }

    #[test]
    fn entries_written_by_an_older_format_are_converted_by_serde() {
        let (bytes, old) = written();
        let reader = TableState::<V2>::new("windows")
            .reader("op", &[old])
            .unwrap();
        let (entries, function) = read_group::<(i64, String), V2>(&bytes, &reader).unwrap();
        assert_eq!(
            entries,
            vec![
                (
                    (1, "a".into()),
                    V2 {
                        hits: 3,
                        pages: vec![]
                    }
                ),
                (
                    (2, "b".into()),
                    V2 {
                        hits: 5,
                        pages: vec![]
                    }
                ),
            ]
        );
        assert_eq!(function, Some(vec![7, 8]));
    }

    #[test]
    fn the_same_format_reads_as_written_and_an_unrecorded_one_too() {
        let (bytes, old) = written();
        for restored in [vec![old], vec![]] {
            let reader = TableState::<V1>::new("windows")
                .reader("op", &restored)
                .unwrap();
            let (entries, _) = read_group::<(i64, String), V1>(&bytes, &reader).unwrap();
            assert_eq!(entries.len(), 2);
            assert_eq!(entries[1].1, V1 { hits: 5 });
        }
    }

    #[test]
    fn a_change_serde_cannot_read_names_the_operator_and_the_state() {
        let (bytes, old) = written();
        let reader = TableState::<Broken>::new("windows")
            .reader("tumbling", &[old])
            .unwrap();
        let error = read_group::<(i64, String), Broken>(&bytes, &reader).unwrap_err();
        assert!(error.is_incompatible_state(), "{error}");
        let message = error.to_string();
        assert!(
            message.contains("`tumbling`") && message.contains("`windows`"),
            "{message}"
        );
    }

    #[test]
    fn cut_or_garbage_bytes_are_errors() {
        let (bytes, old) = written();
        let reader = TableState::<V2>::new("windows")
            .reader("op", &[old])
            .unwrap();
        for cut in [1, 3, 6] {
            assert!(read_group::<(i64, String), V2>(&bytes[..cut], &reader).is_err());
        }
        let garbage = vec![0xff; 12];
        assert!(read_group::<(i64, String), V2>(&garbage, &reader).is_err());
    }
}
