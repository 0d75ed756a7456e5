//! Joins of two streams, one home for their operators (the builders that declare them are in
//! [`crate::api`]: `interval_join`, `join` for regular joins, `window_join` / `co_group`):
//!
//! - [`IntervalJoinOperator`]: an interval join (Flink's `intervalJoin`): each record meets the other
//!   input's records of its key within a time interval of it; state kept until the watermark
//!   passes the interval.
//! - [`RegularJoinFunction`]: a regular join on a key, inner or outer, with a changelog output (Flink SQL's
//!   regular join), state kept for a TTL.
//! - window join and co-group (`window`), as full-window functions over both inputs' records.
//!
//! See docs/joins.md for which join answers which question, and what each keeps in state.

mod interval;
mod regular;
pub(crate) mod window;

pub use interval::{
    IntervalJoinOperator, IntervalJoinSpec, JoinContext, OpenIntervalJoin, ProcessJoinFunction,
};
pub use regular::{ChangelogJoinFunction, JoinType, RegularJoinFunction};
