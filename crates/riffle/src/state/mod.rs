//! Keyed state: what a keyed operator remembers per key, scoped to the key being processed (and
//! to a namespace, such as a window), with optional time-to-live, plus timers.
//!
//! State is declared with descriptors ([`ValueStateDescriptor`], [`ListStateDescriptor`],
//! [`MapStateDescriptor`], [`ReducingStateDescriptor`], [`AggregatingStateDescriptor`]) and
//! reached through the keyed context of a [`KeyedProcessFunction`](crate::operators::KeyedProcessFunction):
//!
//! ```
//! use riffle::{Result, StreamEnv, sink::CollectSink};
//! use riffle::state::ValueStateDescriptor;
//!
//! static CLICKS: ValueStateDescriptor<u64> = ValueStateDescriptor::new("clicks");
//!
//! let env = StreamEnv::new();
//! let (sink, out) = CollectSink::new();
//! env.from_iter(vec![1u64, 2, 1, 1])
//!     .key_by(|user| *user)
//!     .process(|user, _click, ctx| {
//!         let total = ctx.value(&CLICKS).get()?.unwrap_or(0) + 1;
//!         ctx.value(&CLICKS).set(total)?;
//!         ctx.emit((*user, total))
//!     })
//!     .sink(sink);
//! env.execute().unwrap();
//! assert_eq!(out.sorted(), vec![(1, 1), (1, 2), (1, 3), (2, 1)]);
//! ```
//!
//! Where state lives is the job's [`StateBackend`]: the heap (typed hash tables, the default) in
//! this version; an embedded RocksDB backend implements the same trait.

mod backend;
mod descriptors;
pub mod evolution;
mod keyed;
mod kv_table;
mod map_entries;
pub(crate) mod table;
mod timers;
pub(crate) mod versioned;

pub use backend::{
    ChangeInPlace, ChangeValue, HeapBackend, KvStore, ReadInPlace, StateBackend, TaskStore,
    VisitEntry, VisitWhile,
};
pub use kv_table::{KvTable, StateTable, state_id};

pub use descriptors::{
    AggregatingStateDescriptor, ListStateDescriptor, MapStateDescriptor, Migration,
    ReducingStateDescriptor, StateTtl, TtlUpdate, ValueStateDescriptor,
};
pub use evolution::{StateSchema, StateValue};
pub use keyed::{AggregatingState, KeyedState, ListState, MapState, ReducingState, ValueState};
pub use table::Table;
pub use timers::{TimeDomain, TimerService};
