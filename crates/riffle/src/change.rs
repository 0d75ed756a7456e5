//! Changelog streams: records that revise earlier results, as Flink's `RowKind`.
//!
//! An operator whose results can change after it emitted them (a regular join whose left row
//! later finds a match, a deduplication keeping the last record of a key) emits a stream of
//! [`Change<T>`]: each carries a row and its [`RowKind`]:
//!
//! | kind | short | meaning |
//! |---|---|---|
//! | [`Insert`](RowKind::Insert) | `+I` | a new row |
//! | [`UpdateBefore`](RowKind::UpdateBefore) | `-U` | the old value of a row about to be updated (a retraction) |
//! | [`UpdateAfter`](RowKind::UpdateAfter) | `+U` | the new value of an updated row |
//! | [`Delete`](RowKind::Delete) | `-D` | the row is gone (a retraction) |
//!
//! **The contract**: a consumer that applies every change in order ends with the operator's
//! current result. Two ways to apply one, both provided here:
//!
//! - *by key* ([`UpsertTable`], the [`UpsertSink`](crate::sink::UpsertSink)): the rows have a
//!   key (a primary key, such as the deduplication key); `+I`/`+U` put the row under its key,
//!   `-U`/`-D` remove the key. A `-U` is always followed by the `+U` of the same key, so an
//!   upsert consumer may ignore `-U`.
//! - *as a multiset* ([`RetractTable`]): the rows have no key (a join of rows that may repeat);
//!   `+I`/`+U` add one copy of the row, `-U`/`-D` remove one copy of an equal row, which must be
//!   there (a producer only retracts what it emitted).
//!
//! Changes of one key reach a consumer in the order they were emitted when the consumer reads
//! the producing operator's output directly (a forward edge, or a `key_by` of the same key):
//! never put a `rebalance` between a changelog and the table that applies it.
//!
//! A change is an ordinary record: any sink takes a `Change<T>` stream as appends. As JSON (the
//! [`FileSink`](crate::sink::FileSink) writes one per line) it reads
//! `{"op":"+I","row":...}`:
//!
//! ```
//! use riffle::change::{Change, RowKind};
//! let change = Change::update_after(("ann".to_string(), 3u64));
//! assert_eq!(change.op, RowKind::UpdateAfter);
//! assert_eq!(serde_json::to_string(&change).unwrap(), r#"{"op":"+U","row":["ann",3]}"#);
//! let back: Change<(String, u64)> = serde_json::from_str(r#"{"op":"-D","row":["bob",1]}"#).unwrap();
//! assert_eq!(back, Change::delete(("bob".to_string(), 1)));
//! ```

pub mod debezium;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What a [`Change`] does to its row (Flink's `RowKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum RowKind {
    /// `+I`: a new row.
    #[serde(rename = "+I")]
    Insert,
    /// `-U`: the previous value of a row being updated (retracts it; a `+U` follows).
    #[serde(rename = "-U")]
    UpdateBefore,
    /// `+U`: the new value of an updated row.
    #[serde(rename = "+U")]
    UpdateAfter,
    /// `-D`: the row is deleted (retracts it).
    #[serde(rename = "-D")]
    Delete,
}

impl RowKind {
    /// The short form: `+I`, `-U`, `+U` or `-D`.
    ///
    /// ```
    /// assert_eq!(riffle::change::RowKind::Delete.short_string(), "-D");
    /// ```
    pub fn short_string(self) -> &'static str {
        match self {
            RowKind::Insert => "+I",
            RowKind::UpdateBefore => "-U",
            RowKind::UpdateAfter => "+U",
            RowKind::Delete => "-D",
        }
    }

    /// Whether the change adds its row (`+I`, `+U`).
    pub fn is_accumulate(self) -> bool {
        matches!(self, RowKind::Insert | RowKind::UpdateAfter)
    }

    /// Whether the change takes its row back (`-U`, `-D`).
    pub fn is_retract(self) -> bool {
        !self.is_accumulate()
    }
}

impl std::fmt::Display for RowKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.short_string())
    }
}

/// A row of a changelog stream and what it does (see the [module](self) for the contract).
///
/// ```
/// use riffle::change::{Change, RowKind};
/// let c = Change::insert(7u64);
/// assert!(c.op.is_accumulate());
/// assert_eq!(c.map(|n| n * 2), Change::insert(14));
/// assert_eq!(Change::update_before("a").to_string(), r#"-U "a""#);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Change<T> {
    /// What the change does.
    pub op: RowKind,
    /// The row.
    pub row: T,
}

impl<T> Change<T> {
    /// A change of kind `op`.
    pub fn new(op: RowKind, row: T) -> Self {
        Change { op, row }
    }

    /// `+I row`.
    pub fn insert(row: T) -> Self {
        Change::new(RowKind::Insert, row)
    }

    /// `-U row`: the old value of an updated row.
    pub fn update_before(row: T) -> Self {
        Change::new(RowKind::UpdateBefore, row)
    }

    /// `+U row`: the new value of an updated row.
    pub fn update_after(row: T) -> Self {
        Change::new(RowKind::UpdateAfter, row)
    }

    /// `-D row`.
    pub fn delete(row: T) -> Self {
        Change::new(RowKind::Delete, row)
    }

    /// The same change of another row (a projection of the row).
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Change<U> {
        Change {
            op: self.op,
            row: f(self.row),
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Display for Change<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {:?}", self.op, self.row)
    }
}

/// A table materialized from a changelog by key: `+I`/`+U` put the row under its key, `-U`/`-D`
/// remove the key. What an upsert sink (a database table with a primary key, a compacted Kafka
/// topic) ends with.
///
/// ```
/// use riffle::change::{Change, UpsertTable};
/// let mut table = UpsertTable::new();
/// for change in [Change::insert(("a", 1)), Change::update_before(("a", 1)), Change::update_after(("a", 2)), Change::insert(("b", 5)), Change::delete(("b", 5))] {
///     table.apply(change.row.0, change);
/// }
/// assert_eq!(table.rows().iter().collect::<Vec<_>>(), vec![(&"a", &("a", 2))]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpsertTable<K, T> {
    rows: BTreeMap<K, T>,
}

impl<K: Ord, T> Default for UpsertTable<K, T> {
    fn default() -> Self {
        UpsertTable {
            rows: BTreeMap::new(),
        }
    }
}

impl<K: Ord, T> UpsertTable<K, T> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies `change` to the row of `key`.
    pub fn apply(&mut self, key: K, change: Change<T>) {
        if change.op.is_accumulate() {
            self.rows.insert(key, change.row);
        } else {
            self.rows.remove(&key);
        }
    }

    /// The rows by key.
    pub fn rows(&self) -> &BTreeMap<K, T> {
        &self.rows
    }

    /// The rows by key, taken out.
    pub fn into_rows(self) -> BTreeMap<K, T> {
        self.rows
    }
}

/// A table materialized from a changelog of rows without a key, as a multiset: `+I`/`+U` add
/// a copy of the row, `-U`/`-D` remove a copy of an equal row. What a regular join's output
/// amounts to.
///
/// ```
/// use riffle::change::{Change, RetractTable};
/// let mut table = RetractTable::new();
/// table.apply(Change::insert(("ann", None::<u32>))).unwrap();
/// table.apply(Change::delete(("ann", None))).unwrap();
/// table.apply(Change::insert(("ann", Some(7)))).unwrap();
/// assert_eq!(table.rows(), vec![("ann", Some(7))]);
/// // Retracting a row that is not there breaks the contract.
/// assert!(table.apply(Change::delete(("bob", None))).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetractTable<T> {
    counts: BTreeMap<T, u64>,
}

impl<T: Ord> Default for RetractTable<T> {
    fn default() -> Self {
        RetractTable {
            counts: BTreeMap::new(),
        }
    }
}

impl<T: Ord + Clone + std::fmt::Debug> RetractTable<T> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies `change`; retracting a row the table does not hold is an error (and changes
    /// nothing).
    pub fn apply(&mut self, change: Change<T>) -> Result<()> {
        if change.op.is_accumulate() {
            *self.counts.entry(change.row).or_default() += 1;
            return Ok(());
        }
        match self.counts.get_mut(&change.row) {
            Some(count) => {
                *count -= 1;
                if *count == 0 {
                    self.counts.remove(&change.row);
                }
                Ok(())
            }
            None => Err(Error::user(format!(
                "changelog retracts {:?} with {}, which the table does not hold",
                change.row, change.op
            ))),
        }
    }

    /// Applies every change in order.
    pub fn apply_all(&mut self, changes: impl IntoIterator<Item = Change<T>>) -> Result<()> {
        changes.into_iter().try_for_each(|c| self.apply(c))
    }

    /// The rows, sorted, each as many times as it is held.
    pub fn rows(&self) -> Vec<T> {
        self.counts
            .iter()
            .flat_map(|(row, &n)| std::iter::repeat_n(row.clone(), n as usize))
            .collect()
    }

    /// Number of rows held (with repetitions).
    pub fn len(&self) -> usize {
        self.counts.values().map(|&n| n as usize).sum()
    }

    /// Whether the table holds no row.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_serialize_as_their_short_strings_in_json_and_compactly_in_state() {
        for (kind, short) in [
            (RowKind::Insert, "+I"),
            (RowKind::UpdateBefore, "-U"),
            (RowKind::UpdateAfter, "+U"),
            (RowKind::Delete, "-D"),
        ] {
            assert_eq!(
                serde_json::to_string(&kind).unwrap(),
                format!("\"{short}\"")
            );
            assert_eq!(kind.to_string(), short);
            let change = Change::new(kind, (1u8, "x".to_string()));
            let bytes = postcard::to_allocvec(&change).unwrap();
            assert_eq!(bytes.len(), 1 + 1 + 1 + 1, "kind, u8, length, one byte");
            assert_eq!(
                postcard::from_bytes::<Change<(u8, String)>>(&bytes).unwrap(),
                change
            );
        }
        assert!(serde_json::from_str::<RowKind>("\"+X\"").is_err());
    }

    #[test]
    fn only_inserts_and_update_afters_accumulate() {
        assert!(RowKind::Insert.is_accumulate() && RowKind::UpdateAfter.is_accumulate());
        assert!(RowKind::UpdateBefore.is_retract() && RowKind::Delete.is_retract());
    }

    #[test]
    fn a_failed_retraction_leaves_the_table_as_it_was() {
        let mut table = RetractTable::new();
        table.apply(Change::insert(1)).unwrap();
        table.apply(Change::insert(1)).unwrap();
        table.apply(Change::update_before(1)).unwrap();
        let err = table.apply(Change::delete(2)).unwrap_err();
        assert!(err.to_string().contains("retracts 2 with -D"), "{err}");
        assert_eq!(table.rows(), vec![1]);
        assert_eq!(table.len(), 1);
    }
}
