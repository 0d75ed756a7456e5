//! # Nexmark on Riffle
//!
//! [Nexmark](https://github.com/nexmark/nexmark) is the benchmark the stream processors of the
//! field publish (Flink, Arroyo, RisingWave, Feldera): an online auction's persons, auctions and
//! bids, and a suite of queries over them. This crate holds:
//!
//! * [`NexmarkSource`]: the standard generator (the `nexmark` crate, a port of the Beam/Flink
//!   one) as a deterministic, replayable Riffle source; the same configuration gives the same
//!   events at any parallelism;
//! * [`queries`]: the queries, as DataStream programs following the nexmark project's Flink SQL
//!   (the joins on Riffle's two-input operators);
//! * [`partitioned::PartitionedFileSink`]: an exactly-once file sink with one directory per
//!   partition, which q10 writes into;
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
/// Moved to `riffle::sink::partitioned`; this path stays for one release.
pub mod partitioned {
    pub use riffle::sink::partitioned::*;
}
pub mod queries;
pub mod source;
pub mod sql;

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
    /// Local item suggestion (persons ⋈ auctions).
    Q3,
    /// Average closing price per category (auctions ⋈ bids, then an average).
    Q4,
    /// Hot items (sliding windows).
    Q5,
    /// Average selling price per seller (its latest closed auctions).
    Q6,
    /// Highest bids of each 10 s window (window max joined back to the bids).
    Q7,
    /// New users: persons with an auction in the same 10 s window (window join).
    Q8,
    /// Winning bid of each auction.
    Q9,
    /// Bids logged to a file system partitioned by date and minute.
    Q10,
    /// User sessions (session windows).
    Q11,
    /// Processing-time windows.
    Q12,
    /// Bids joined with a bounded side table.
    Q13,
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
    /// Expand bids with their auction (bids ⋈ auctions, category 10).
    Q20,
    /// URL directories (`SPLIT_INDEX`).
    Q22,
}

/// Query names that are asked for but not implemented, and why.
pub const NOT_IMPLEMENTED: &[(&str, &str)] = &[(
    "q23",
    "not a query of the nexmark project's Flink suite (q0-q22)",
)];

impl Query {
    /// Every implemented query, in order.
    pub const ALL: [Query; 23] = [
        Query::Q0,
        Query::Q1,
        Query::Q2,
        Query::Q3,
        Query::Q4,
        Query::Q5,
        Query::Q6,
        Query::Q7,
        Query::Q8,
        Query::Q9,
        Query::Q10,
        Query::Q11,
        Query::Q12,
        Query::Q13,
        Query::Q14,
        Query::Q15,
        Query::Q16,
        Query::Q17,
        Query::Q18,
        Query::Q19,
        Query::Q20,
        Query::Q21,
        Query::Q22,
    ];

    /// `q0`, `q1`, ...
    pub fn name(self) -> &'static str {
        match self {
            Query::Q0 => "q0",
            Query::Q1 => "q1",
            Query::Q2 => "q2",
            Query::Q3 => "q3",
            Query::Q4 => "q4",
            Query::Q5 => "q5",
            Query::Q6 => "q6",
            Query::Q7 => "q7",
            Query::Q8 => "q8",
            Query::Q9 => "q9",
            Query::Q10 => "q10",
            Query::Q11 => "q11",
            Query::Q12 => "q12",
            Query::Q13 => "q13",
            Query::Q14 => "q14",
            Query::Q15 => "q15",
            Query::Q16 => "q16",
            Query::Q17 => "q17",
            Query::Q18 => "q18",
            Query::Q19 => "q19",
            Query::Q20 => "q20",
            Query::Q21 => "q21",
            Query::Q22 => "q22",
        }
    }

    /// Whether the query's output is a changelog (rows marked `+I` / `+U`).
    pub fn is_changelog(self) -> bool {
        matches!(
            self,
            Query::Q4 | Query::Q15 | Query::Q16 | Query::Q17 | Query::Q18 | Query::Q19
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
            return Err(format!("{name} is not implemented: {why}"));
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
    /// Counted and dropped (Flink's `blackhole` connector, what the benchmark uses; q10, whose
    /// query is to write files, cannot discard them).
    Discard,
    /// JSON lines, one file per subtask, in this directory (q10: CSV files partitioned by date
    /// and minute below it).
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
        Query::Q3 => sink_rows(q3(events), sink),
        Query::Q4 => sink_rows(q4(events), sink),
        Query::Q5 => sink_rows(q5(events), sink),
        Query::Q6 => sink_rows(q6(events), sink),
        Query::Q7 => sink_rows(q7(events), sink),
        Query::Q8 => sink_rows(q8(events), sink),
        Query::Q9 => sink_rows(q9(events), sink),
        Query::Q10 => match sink {
            ResultSink::Files(dir) => {
                q10(events)
                    .sink(q10_sink(dir).setting_name("--output"))
                    .name("results");
            }
            ResultSink::Discard => {
                return Err(riffle::Error::config(
                    "--output",
                    "q10 writes its rows into a partitioned file system: it needs a directory",
                ));
            }
        },
        Query::Q11 => sink_rows(q11(events), sink),
        Query::Q12 => sink_rows(q12(events), sink),
        Query::Q13 => sink_rows(q13(events), sink),
        Query::Q14 => sink_rows(q14(events), sink),
        Query::Q15 => sink_rows(q15(events), sink),
        Query::Q16 => sink_rows(q16(events), sink),
        Query::Q17 => sink_rows(q17(events), sink),
        Query::Q18 => sink_rows(q18(events), sink),
        Query::Q19 => sink_rows(q19(events), sink),
        Query::Q20 => sink_rows(q20(events), sink),
        Query::Q21 => sink_rows(q21(events), sink),
        Query::Q22 => sink_rows(q22(events), sink),
    }
    Ok(())
}
