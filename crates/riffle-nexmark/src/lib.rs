//! # Nexmark on Riffle
//!
//! [Nexmark](https://github.com/nexmark/nexmark) is the benchmark the stream processors of the
//! field publish (Flink, Arroyo, RisingWave, Feldera): an online auction's persons, auctions and
//! bids, and a suite of queries over them. This crate holds:
//!
//! * [`NexmarkSource`]: the standard generator (the `nexmark` crate, a port of the Beam/Flink
//!   one) as a deterministic, replayable Riffle source; the same configuration gives the same
//!   events at any parallelism;
//! * [`queries`]: the queries that need no join, as DataStream programs following the nexmark
//!   project's Flink SQL;
//! * [`Query`] and [`add_query`]: a query by name, sunk to files or discarded (what
//!   `riffle nexmark run` runs).
//!
//! ```
//! use riffle::{StreamEnv, sink::CollectSink};
//! use riffle_nexmark::{NexmarkConfig, NexmarkSource, queries};
//!
//! let env = StreamEnv::new();
//! let (sink, out) = CollectSink::new();
//! let events = NexmarkSource::new(NexmarkConfig { events: Some(1_000), ..NexmarkConfig::default() })
//!     .stream(&env);
//! queries::q2(&events).sink(sink);
//! env.execute().unwrap();
//! assert!(out.values().iter().all(|row| row.auction % 123 == 0));
//! ```

#![forbid(unsafe_code)]

pub mod event;
pub mod queries;
pub mod source;

use std::path::PathBuf;

use riffle::sink::{BlackholeSink, FileSink};
use riffle::{Data, DataStream, Result};

pub use event::{Auction, Bid, Event, Person};
pub use source::{NexmarkConfig, NexmarkSource};

/// The queries this crate implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Query {
    /// Pass-through.
    Q0,
    /// Currency conversion.
    Q1,
    /// Selection.
    Q2,
    /// Hot items (sliding windows).
    Q5,
    /// User sessions (session windows).
    Q11,
    /// Processing-time windows.
    Q12,
    /// Filter with a scalar function.
    Q14,
    /// Bidding statistics per day (distinct counts).
    Q15,
    /// Channel statistics per day (distinct counts).
    Q16,
    /// Auction statistics per day.
    Q17,
    /// Last bid per bidder and auction (deduplication).
    Q18,
    /// Top 10 bids per auction.
    Q19,
    /// Channel id (`CASE` and `REGEXP_EXTRACT`).
    Q21,
    /// URL directories (`SPLIT_INDEX`).
    Q22,
}

/// The queries of the suite that are not implemented, and why.
pub const NOT_IMPLEMENTED: &[(&str, &str)] = &[
    ("q3", "join of persons and auctions"),
    ("q4", "join of auctions and bids"),
    ("q6", "join of auctions and bids"),
    ("q7", "window max joined back to the bids"),
    ("q8", "window join of persons and auctions"),
    ("q9", "join of auctions and bids"),
    (
        "q10",
        "partitioned file-system sink (not in this crate's list)",
    ),
    ("q13", "join with a bounded side table"),
    ("q20", "join of bids and auctions"),
];

impl Query {
    /// Every implemented query, in order.
    pub const ALL: [Query; 14] = [
        Query::Q0,
        Query::Q1,
        Query::Q2,
        Query::Q5,
        Query::Q11,
        Query::Q12,
        Query::Q14,
        Query::Q15,
        Query::Q16,
        Query::Q17,
        Query::Q18,
        Query::Q19,
        Query::Q21,
        Query::Q22,
    ];

    /// `q0`, `q1`, ...
    pub fn name(self) -> &'static str {
        match self {
            Query::Q0 => "q0",
            Query::Q1 => "q1",
            Query::Q2 => "q2",
            Query::Q5 => "q5",
            Query::Q11 => "q11",
            Query::Q12 => "q12",
            Query::Q14 => "q14",
            Query::Q15 => "q15",
            Query::Q16 => "q16",
            Query::Q17 => "q17",
            Query::Q18 => "q18",
            Query::Q19 => "q19",
            Query::Q21 => "q21",
            Query::Q22 => "q22",
        }
    }

    /// Whether the query's output is a changelog (rows marked `+I` / `+U`).
    pub fn is_changelog(self) -> bool {
        matches!(
            self,
            Query::Q15 | Query::Q16 | Query::Q17 | Query::Q18 | Query::Q19
        )
    }
}

impl std::fmt::Display for Query {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Query {
    type Err = String;

    /// `q5`, `Q5` or `5`.
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let lower = s.trim().to_ascii_lowercase();
        let name = if lower.starts_with('q') {
            lower
        } else {
            format!("q{lower}")
        };
        if let Some(query) = Query::ALL.iter().find(|q| q.name() == name) {
            return Ok(*query);
        }
        if let Some((_, why)) = NOT_IMPLEMENTED.iter().find(|(q, _)| *q == name) {
            return Err(format!("{name} is not implemented: it needs a {why}"));
        }
        let known: Vec<&str> = Query::ALL.iter().map(|q| q.name()).collect();
        Err(format!(
            "unknown query `{s}` (implemented: {})",
            known.join(", ")
        ))
    }
}

/// Where a query's results go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResultSink {
    /// Counted and dropped (Flink's `blackhole` connector, what the benchmark uses).
    Discard,
    /// JSON lines, one file per subtask, in this directory.
    Files(PathBuf),
}

fn sink_rows<T: Data>(rows: DataStream<T>, sink: &ResultSink) {
    match sink {
        ResultSink::Discard => rows.sink(BlackholeSink::new()).name("results"),
        ResultSink::Files(dir) => rows
            .sink(FileSink::new(dir).setting_name("--output"))
            .name("results"),
    };
}

/// Adds `query` over `events` to the job, its results going to `sink`.
pub fn add_query(query: Query, events: &DataStream<Event>, sink: &ResultSink) -> Result<()> {
    use queries::*;
    match query {
        Query::Q0 => sink_rows(q0(events), sink),
        Query::Q1 => sink_rows(q1(events), sink),
        Query::Q2 => sink_rows(q2(events), sink),
        Query::Q5 => sink_rows(q5(events), sink),
        Query::Q11 => sink_rows(q11(events), sink),
        Query::Q12 => sink_rows(q12(events), sink),
        Query::Q14 => sink_rows(q14(events), sink),
        Query::Q15 => sink_rows(q15(events), sink),
        Query::Q16 => sink_rows(q16(events), sink),
        Query::Q17 => sink_rows(q17(events), sink),
        Query::Q18 => sink_rows(q18(events), sink),
        Query::Q19 => sink_rows(q19(events), sink),
        Query::Q21 => sink_rows(q21(events), sink),
        Query::Q22 => sink_rows(q22(events), sink),
    }
    Ok(())
}
