//! Every stateful operator survives a checkpoint at any point of a scripted run: restored from a
//! snapshot, it emits exactly what an uninterrupted run emits — with keyed state on the heap and
//! in a byte store (the path RocksDB takes). The cases are in
//! `riffle_testing::conformance::operator_round_trips`, which the RocksDB crate runs too.

use riffle::Result;
use riffle::state::HeapBackend;
use riffle::testing::MemoryKvBackend;
use riffle_testing::conformance::operator_round_trips;

#[test]
fn every_stateful_operator_round_trips_on_the_heap() -> Result<()> {
    operator_round_trips(&HeapBackend)
}

#[test]
fn every_stateful_operator_round_trips_in_a_kv_store() -> Result<()> {
    operator_round_trips(&MemoryKvBackend)
}
