//! Key groups: how keys are spread over parallel subtasks, and the unit in which keyed state moves.
//!
//! A key belongs to key group `hash(key) mod max_parallelism`; subtask `i` of `p` owns a contiguous
//! range of key groups. The hash is stable across processes and versions of Riffle (xxh3 over the
//! bytes that the key's `Hash` implementation writes), so a key lands in the same key group after a
//! restart, which is what lets a checkpoint taken at parallelism 2 restore at parallelism 4.

use std::hash::{Hash, Hasher};

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Index of a key group, in `0..max_parallelism`.
pub type KeyGroup = u16;

/// A [`Hasher`] whose output depends only on the bytes written, never on the process.
#[derive(Clone, Copy, Debug, Default)]
pub struct StableHasher {
    state: u64,
}

impl Hasher for StableHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.state = xxh3_64_with_seed(bytes, self.state);
    }

    fn write_u64(&mut self, n: u64) {
        self.write(&n.to_le_bytes());
    }

    fn finish(&self) -> u64 {
        self.state
    }
}

/// The stable hash of a key.
pub fn stable_hash<K: Hash + ?Sized>(key: &K) -> u64 {
    let mut hasher = StableHasher::default();
    key.hash(&mut hasher);
    hasher.finish()
}

/// The key group of `key` among `max_parallelism` groups.
///
/// ```
/// let group = riffle::keys::key_group_of(&42u64, 128);
/// assert!(group < 128);
/// assert_eq!(group, riffle::keys::key_group_of(&42u64, 128));
/// ```
pub fn key_group_of<K: Hash + ?Sized>(key: &K, max_parallelism: usize) -> KeyGroup {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hash_is_stable_across_runs() {
        // Fixed values: a change here breaks restoring old checkpoints.
        assert_eq!(stable_hash(&42u64), 15_395_265_915_043_915_720);
        assert_eq!(key_group_of(&42u64, 128), 72);
        assert_eq!(stable_hash("ab"), 3_142_057_551_742_746_860);
        assert_ne!(stable_hash(&1u64), stable_hash(&2u64));
        assert_ne!(stable_hash("ab"), stable_hash("a"));
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
