//! Complex event processing: match patterns of events on a keyed stream, as FlinkCEP.
//!
//! A [`Pattern`] is a sequence of named stages, each with a condition, a quantifier and the
//! contiguity linking it to the stage before; [`KeyedStream::pattern`](crate::KeyedStream::pattern)
//! matches every key's events against it, in event time (events ordered by time under the
//! watermark, late ones aside) or processing time. Matches come out as [`Match`]es, maps from
//! stage names to the events they took; partial matches that cannot complete within the
//! pattern's `within` can go to a side output — the "expected event did not arrive in time"
//! alert is a timeout.
//!
//! The partial matches of a key live in its keyed state (on the heap or in RocksDB, as the job's
//! state backend says), with the events they took stored once and shared: they are
//! checkpointed, restored at any parallelism, and dropped as soon as they cannot complete.
//! `docs/cep.md` explains the semantics of each construct with pictures of event sequences.
//!
//! ```
//! use std::time::Duration;
//! use riffle::{EnvConfig, StreamEnv, cep::{Match, Pattern}, sink::CollectSink, time::WatermarkStrategy};
//!
//! // (order, event, time): an order picked up but not delivered within 45 minutes.
//! type Event = (u64, String, i64);
//! let env = StreamEnv::with_config(EnvConfig::deterministic());
//! let (sink, late) = CollectSink::new();
//! let minute = 60_000;
//! let events: Vec<Event> = [(1, "picked", 0), (2, "picked", minute), (1, "delivered", 30 * minute), (3, "picked", 90 * minute)]
//!     .map(|(order, what, at)| (order, what.to_string(), at)).to_vec();
//! env.from_iter_with_watermarks(events, WatermarkStrategy::monotonous().with_timestamps(|e: &Event| e.2))
//!     .key_by(|e| e.0)
//!     .pattern(
//!         Pattern::begin("picked").where_(|e: &Event| e.1 == "picked")
//!             .not_followed_by("delivered").where_(|e: &Event| e.1 == "delivered")
//!             .within(Duration::from_secs(45 * 60)),
//!     )
//!     .select(|m: Match<Event>| m.first("picked").unwrap().0)
//!     .sink(sink);
//! env.execute().unwrap();
//! assert_eq!(late.sorted(), vec![2, 3]);
//! ```

mod nfa;
mod operator;
mod pattern;

pub use nfa::{Match, Partial};
pub use operator::{
    CepOperator, OpenCep, PatternContext, PatternOptions, PatternProcessFunction, PatternStream,
    Select,
};
pub use pattern::{AfterMatchSkip, Contiguity, Pattern, Times};
