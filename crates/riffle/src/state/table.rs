//! [`Table`]: the values of one declared state, by key group, namespace and key, in typed hash
//! tables.
//!
//! Organised by key group first, as Flink's heap state: a checkpoint writes (and a restore at
//! another parallelism reads) whole key groups. Within a key group, namespace-major
//! (`namespace -> key -> value`): a window operator fires or drops a whole window at once.

use std::collections::HashMap;
use std::hash::Hash;

use foldhash::fast::RandomState;

use crate::keys::{KeyGroup, KeyGroupRange};

/// A hash map with a fast, seeded hasher.
pub(crate) type FastMap<K, V> = HashMap<K, V, RandomState>;

/// Values by key group, namespace and key.
///
/// ```
/// use riffle::keys::KeyGroupRange;
/// use riffle::state::Table;
/// let mut table: Table<u64, i64, u64> = Table::new(KeyGroupRange { start: 0, end: 127 });
/// *table.entry(5, 7, 60_000).or_insert(0) += 1;
/// assert_eq!(table.get(5, &7, &60_000), Some(&1));
/// assert_eq!(table.drain_namespace(&60_000), vec![(5, 7, 1)]);
/// assert!(table.is_empty());
/// ```
#[derive(Debug, Clone)]
pub struct Table<K, N, V> {
    range: KeyGroupRange,
    groups: Vec<FastMap<N, FastMap<K, V>>>,
    len: usize,
}

/// The entry of one key in one namespace, to read or insert in place.
pub struct TableEntry<'a, K, V> {
    table_len: &'a mut usize,
    entry: std::collections::hash_map::Entry<'a, K, V>,
}

impl<'a, K, V> TableEntry<'a, K, V> {
    /// The value, inserted with `default` if absent.
    pub fn or_insert(self, default: V) -> &'a mut V {
        self.or_insert_with(|| default)
    }

    /// The value, inserted with `make()` if absent.
    pub fn or_insert_with(self, make: impl FnOnce() -> V) -> &'a mut V {
        match self.entry {
            std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::hash_map::Entry::Vacant(entry) => {
                *self.table_len += 1;
                entry.insert(make())
            }
        }
    }
}

impl<K: Hash + Eq, N: Hash + Eq + Clone, V> Table<K, N, V> {
    /// An empty table for the key groups of `range`.
    pub fn new(range: KeyGroupRange) -> Self {
        Table {
            range,
            groups: (0..range.len()).map(|_| FastMap::default()).collect(),
            len: 0,
        }
    }

    /// The key groups the table holds.
    pub fn key_groups(&self) -> KeyGroupRange {
        self.range
    }

    fn group(&self, key_group: KeyGroup) -> &FastMap<N, FastMap<K, V>> {
        &self.groups[self.index(key_group)]
    }

    fn index(&self, key_group: KeyGroup) -> usize {
        debug_assert!(
            self.range.contains(key_group),
            "key group {key_group} outside {:?}",
            self.range
        );
        (key_group - self.range.start) as usize
    }

    /// The value of `key` (in `key_group`) in `namespace`.
    pub fn get(&self, key_group: KeyGroup, key: &K, namespace: &N) -> Option<&V> {
        self.group(key_group).get(namespace)?.get(key)
    }

    /// The value of `key` in `namespace`, to change in place.
    pub fn get_mut(&mut self, key_group: KeyGroup, key: &K, namespace: &N) -> Option<&mut V> {
        let index = self.index(key_group);
        self.groups[index].get_mut(namespace)?.get_mut(key)
    }

    /// The entry of `key` in `namespace`.
    pub fn entry(&mut self, key_group: KeyGroup, key: K, namespace: N) -> TableEntry<'_, K, V> {
        let index = self.index(key_group);
        let keys = self.groups[index].entry(namespace).or_default();
        TableEntry {
            table_len: &mut self.len,
            entry: keys.entry(key),
        }
    }

    /// Sets the value of `key` in `namespace`; returns the previous one.
    pub fn insert(&mut self, key_group: KeyGroup, key: K, namespace: N, value: V) -> Option<V> {
        let index = self.index(key_group);
        let previous = self.groups[index]
            .entry(namespace)
            .or_default()
            .insert(key, value);
        if previous.is_none() {
            self.len += 1;
        }
        previous
    }

    /// Removes the value of `key` in `namespace`.
    pub fn remove(&mut self, key_group: KeyGroup, key: &K, namespace: &N) -> Option<V> {
        let index = self.index(key_group);
        let keys = self.groups[index].get_mut(namespace)?;
        let removed = keys.remove(key);
        if removed.is_some() {
            self.len -= 1;
            if keys.is_empty() {
                self.groups[index].remove(namespace);
            }
        }
        removed
    }

    /// Removes and returns every value of `namespace`, with its key group.
    pub fn drain_namespace(&mut self, namespace: &N) -> Vec<(KeyGroup, K, V)> {
        let mut drained = Vec::new();
        for (index, group) in self.groups.iter_mut().enumerate() {
            if let Some(keys) = group.remove(namespace) {
                let key_group = self.range.start + index as KeyGroup;
                drained.extend(keys.into_iter().map(|(k, v)| (key_group, k, v)));
            }
        }
        self.len -= drained.len();
        drained
    }

    /// Removes every value of `namespace` and hands each to `each`, with its key group and key,
    /// in the order of [`drain_namespace`](Table::drain_namespace) (without collecting them).
    /// An error from `each` stops there; the rest of that key group's values are dropped.
    pub fn drain_namespace_each<E>(
        &mut self,
        namespace: &N,
        mut each: impl FnMut(KeyGroup, K, V) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        for index in 0..self.groups.len() {
            if let Some(keys) = self.groups[index].remove(namespace) {
                self.len -= keys.len();
                let key_group = self.range.start + index as KeyGroup;
                for (key, value) in keys {
                    each(key_group, key, value)?;
                }
            }
        }
        Ok(())
    }

    /// Every key and value of `namespace`, to change in place.
    pub fn namespace_mut(&mut self, namespace: &N) -> impl Iterator<Item = (&K, &mut V)> {
        self.groups
            .iter_mut()
            .filter_map(move |group| group.get_mut(namespace))
            .flat_map(|keys| keys.iter_mut())
    }

    /// Every (key group, namespace, key, value).
    pub fn iter(&self) -> impl Iterator<Item = (KeyGroup, &N, &K, &V)> {
        self.groups
            .iter()
            .enumerate()
            .flat_map(move |(index, group)| {
                let key_group = self.range.start + index as KeyGroup;
                group.iter().flat_map(move |(ns, keys)| {
                    keys.iter().map(move |(k, v)| (key_group, ns, k, v))
                })
            })
    }

    /// Keeps the entries for which `keep` is true; returns how many were removed.
    pub fn retain(&mut self, mut keep: impl FnMut(&N, &K, &mut V) -> bool) -> usize {
        let before = self.len;
        for group in &mut self.groups {
            group.retain(|ns, keys| {
                keys.retain(|k, v| keep(ns, k, v));
                !keys.is_empty()
            });
        }
        self.len = self
            .groups
            .iter()
            .flat_map(|g| g.values())
            .map(|keys| keys.len())
            .sum();
        before - self.len
    }

    /// The entries of one key group (empty if it is not this table's).
    pub fn group_entries(&self, key_group: KeyGroup) -> Vec<(&N, &K, &V)> {
        if !self.range.contains(key_group) {
            return Vec::new();
        }
        self.group(key_group)
            .iter()
            .flat_map(|(ns, keys)| keys.iter().map(move |(k, v)| (ns, k, v)))
            .collect()
    }

    /// The key groups that hold entries.
    pub fn key_groups_with_entries(&self) -> Vec<KeyGroup> {
        (0..self.groups.len())
            .filter(|&i| self.groups[i].values().any(|keys| !keys.is_empty()))
            .map(|i| self.range.start + i as KeyGroup)
            .collect()
    }

    /// The namespaces that hold entries, over all key groups.
    pub fn namespaces(&self) -> Vec<N> {
        let mut seen: Vec<N> = Vec::new();
        for group in &self.groups {
            for ns in group.keys() {
                if !seen.contains(ns) {
                    seen.push(ns.clone());
                }
            }
        }
        seen
    }

    /// Number of (namespace, key) entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes the table's slots take on the heap (not counting what the values point to).
    pub fn heap_bytes(&self) -> usize {
        let slot = std::mem::size_of::<(K, V)>() + 1;
        let outer = std::mem::size_of::<(N, FastMap<K, V>)>() + 1;
        self.groups
            .iter()
            .map(|group| {
                group
                    .values()
                    .map(|keys| keys.capacity() * slot)
                    .sum::<usize>()
                    + group.capacity() * outer
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_entries_across_key_groups_and_namespaces() {
        let mut table: Table<&str, u8, u32> = Table::new(KeyGroupRange { start: 10, end: 13 });
        table.insert(10, "a", 1, 10);
        table.insert(13, "b", 1, 20);
        *table.entry(10, "a", 2).or_insert(0) += 5;
        *table.entry(10, "a", 2).or_insert(0) += 5;
        assert_eq!((table.len(), table.get(10, &"a", &2)), (3, Some(&10)));
        assert_eq!(table.remove(10, &"a", &1), Some(10));
        assert_eq!(table.retain(|_, _, v| *v > 15), 1);
        assert_eq!(table.len(), 1);
        let rest: Vec<_> = table
            .iter()
            .map(|(kg, ns, k, v)| (kg, *ns, *k, *v))
            .collect();
        assert_eq!(rest, vec![(13, 1, "b", 20)]);
        assert!(table.heap_bytes() > 0);
        assert_eq!(table.drain_namespace(&1), vec![(13, "b", 20)]);
        assert!(table.is_empty());
        table.insert(11, "c", 3, 30);
        table.insert(12, "d", 3, 40);
        table.insert(12, "e", 4, 50);
        let mut drained = Vec::new();
        let result: Result<(), ()> = table.drain_namespace_each(&3, |kg, k, v| {
            drained.push((kg, k, v));
            Ok(())
        });
        result.unwrap();
        assert_eq!(drained, vec![(11, "c", 30), (12, "d", 40)]);
        assert_eq!((table.len(), table.get(12, &"e", &4)), (1, Some(&50)));
    }
}
