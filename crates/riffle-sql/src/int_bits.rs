//! The integers a `COUNT(DISTINCT ..)` has seen, each with the bits of the aggregates that saw
//! it ([`crate::aggregate::SeenValues`]), kept so that a row's look-up stays in the cache.
//!
//! Ids (bidders, auctions, users) are mostly dense and a row's id is mostly a recent one: a
//! hash map of them spreads the recent ids over memory (16 bytes and a cache miss each, for
//! Nexmark q16's 370K auctions a group). Here the ids of a block of [`BLOCK`] consecutive
//! integers that holds enough of them live in an array of their bits (a byte each while the
//! bits fit in one, else a word), found by the block's number; the others in a hash map. A
//! block is made an array when the map is scanned, each time it has doubled since the last
//! scan (so the scans cost a constant time per insert): ids scattered over the range of `i64`
//! (hashes) never make arrays, and cost what the map alone did.

use std::collections::HashMap;

use foldhash::fast::RandomState;

/// How many consecutive integers a block holds (a power of two).
const BLOCK: usize = 256;
/// `log2(BLOCK)`.
const BLOCK_BITS: u32 = BLOCK.trailing_zeros();
/// How many ids of a block in the map make it an array at the next scan: a block's array of
/// bytes (256 bytes) then takes no more memory than its ids did in the map.
const DENSE: u32 = 16;
/// The map's size at which it is scanned first.
const FIRST_SCAN: usize = 1024;

/// Integers with their bits (none zero: a seen value has at least one aggregate's bit).
#[derive(Clone, Debug)]
pub(crate) struct IntBits {
    /// The integers of blocks that are not arrays.
    sparse: HashMap<i64, u64, RandomState>,
    /// The blocks made arrays, by number (`value >> BLOCK_BITS`).
    dense: HashMap<i64, Block, RandomState>,
    /// How many integers the arrays hold (their non-zero entries).
    dense_len: usize,
    /// The map's size at which it is scanned next.
    next_scan: usize,
}

impl Default for IntBits {
    fn default() -> IntBits {
        IntBits {
            sparse: HashMap::default(),
            dense: HashMap::default(),
            dense_len: 0,
            next_scan: FIRST_SCAN,
        }
    }
}

/// A block's bits, by offset in the block (zero: not seen).
#[derive(Clone, Debug)]
enum Block {
    /// While every value's bits fit in a byte (up to 8 aggregates share the values).
    Narrow(Box<[u8; BLOCK]>),
    Wide(Box<[u64; BLOCK]>),
}

impl Block {
    fn get(&self, at: usize) -> u64 {
        match self {
            Block::Narrow(bits) => bits[at] as u64,
            Block::Wide(bits) => bits[at],
        }
    }

    /// `bits` joined to the value's at `at`; the value's bits before.
    fn join(&mut self, at: usize, bits: u64) -> u64 {
        if let Block::Narrow(narrow) = self
            && bits > u8::MAX as u64
        {
            let mut wide = Box::new([0u64; BLOCK]);
            for (w, n) in wide.iter_mut().zip(narrow.iter()) {
                *w = *n as u64;
            }
            *self = Block::Wide(wide);
        }
        match self {
            Block::Narrow(narrow) => {
                let old = narrow[at];
                narrow[at] = old | bits as u8;
                old as u64
            }
            Block::Wide(wide) => {
                let old = wide[at];
                wide[at] = old | bits;
                old
            }
        }
    }

    /// Its values' offsets with their bits.
    fn entries(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        (0..BLOCK)
            .map(|at| (at, self.get(at)))
            .filter(|(_, bits)| *bits != 0)
    }
}

/// A value's block number and offset in it.
fn place(value: i64) -> (i64, usize) {
    (value >> BLOCK_BITS, (value & (BLOCK as i64 - 1)) as usize)
}

impl IntBits {
    /// Joins `bits` to `value`'s; gives its bits before (zero: not seen before). A value is
    /// kept only with bits (`bits` zero changes nothing).
    pub(crate) fn join(&mut self, value: i64, bits: u64) -> u64 {
        if bits == 0 {
            // (Seen by no aggregate: nothing to keep.)
            return self.get(value);
        }
        let (block, at) = place(value);
        if let Some(array) = self.dense.get_mut(&block) {
            let old = array.join(at, bits);
            self.dense_len += (old == 0) as usize;
            return old;
        }
        let entry = self.sparse.entry(value).or_insert(0);
        let old = *entry;
        *entry |= bits;
        if self.sparse.len() >= self.next_scan {
            self.make_arrays();
        }
        old
    }

    /// The bits of `value` (zero: not seen).
    pub(crate) fn get(&self, value: i64) -> u64 {
        let (block, at) = place(value);
        match self.dense.get(&block) {
            Some(array) => array.get(at),
            None => self.sparse.get(&value).copied().unwrap_or(0),
        }
    }

    /// How many integers were seen.
    pub(crate) fn len(&self) -> usize {
        self.sparse.len() + self.dense_len
    }

    /// Each integer seen, with its bits (in no order).
    pub(crate) fn entries(&self) -> impl Iterator<Item = (i64, u64)> + '_ {
        let dense = self.dense.iter().flat_map(|(block, array)| {
            let base = block << BLOCK_BITS;
            array
                .entries()
                .map(move |(at, bits)| (base + at as i64, bits))
        });
        self.sparse.iter().map(|(v, bits)| (*v, *bits)).chain(dense)
    }

    /// Makes an array of each block that holds [`DENSE`] integers of the map.
    fn make_arrays(&mut self) {
        let mut counts: HashMap<i64, u32, RandomState> = HashMap::default();
        for value in self.sparse.keys() {
            *counts.entry(place(*value).0).or_insert(0) += 1;
        }
        counts.retain(|_, n| *n >= DENSE);
        if !counts.is_empty() {
            let IntBits {
                sparse,
                dense,
                dense_len,
                ..
            } = self;
            // Each integer of such a block moves into its array.
            sparse.retain(|value, bits| {
                let (block, at) = place(*value);
                if !counts.contains_key(&block) {
                    return true;
                }
                let array =
                    (dense.entry(block)).or_insert_with(|| Block::Narrow(Box::new([0u8; BLOCK])));
                array.join(at, *bits);
                *dense_len += 1;
                false
            });
            sparse.shrink_to_fit();
        }
        self.next_scan = (2 * self.sparse.len()).max(FIRST_SCAN);
    }
}

impl PartialEq for IntBits {
    /// Equal when they hold the same integers with the same bits (however they keep them).
    fn eq(&self, other: &IntBits) -> bool {
        self.len() == other.len() && self.entries().all(|(v, bits)| other.get(v) == bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn dense_ids_move_into_arrays_and_scattered_ones_stay_in_the_map() {
        let mut dense = IntBits::default();
        for id in 1000..6000i64 {
            assert_eq!(dense.join(id, 0b1), 0);
        }
        assert!(dense.sparse.len() < FIRST_SCAN, "{}", dense.sparse.len());
        assert_eq!(dense.len(), 5000);
        assert_eq!(dense.join(1500, 0b10), 0b1);
        assert_eq!(dense.get(1500), 0b11);
        // A ninth aggregate's bit widens the block, keeping its values' bits.
        assert_eq!(dense.join(1501, 1 << 8), 0b1);
        assert_eq!(dense.get(1500), 0b11);
        assert_eq!(dense.get(1501), 0b1_0000_0001);
        assert_eq!(dense.get(999), 0);

        let mut scattered = IntBits::default();
        for n in 0..5000i64 {
            scattered.join(n.wrapping_mul(0x9E37_79B9_7F4A_7C15u64 as i64), 0b1);
        }
        assert!(scattered.dense.is_empty());
        assert_eq!(scattered.len(), 5000);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// For any integers (near each other or at the edges of `i64`) and bits, it gives
        /// what a plain map gives, and holds the same entries.
        #[test]
        fn it_keeps_what_a_map_keeps(
            joins in proptest::collection::vec(
                (
                    prop_oneof![
                        0i64..3000,
                        i64::MIN..i64::MIN + 600,
                        i64::MAX - 600..=i64::MAX,
                        any::<i64>(),
                    ],
                    1u64..=u64::MAX,
                ),
                0..3000,
            ),
        ) {
            let mut bits = IntBits::default();
            let mut map: std::collections::HashMap<i64, u64> = Default::default();
            for (value, mask) in joins {
                let mask = if mask % 3 == 0 { mask } else { mask & 0xFF }.max(1);
                let entry = map.entry(value).or_insert(0);
                prop_assert_eq!(bits.join(value, mask), *entry);
                *entry |= mask;
            }
            prop_assert_eq!(bits.len(), map.len());
            let mut entries: Vec<(i64, u64)> = bits.entries().collect();
            entries.sort();
            let mut expected: Vec<(i64, u64)> = map.into_iter().collect();
            expected.sort();
            prop_assert_eq!(entries, expected);
        }
    }
}
