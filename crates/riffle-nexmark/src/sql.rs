//! The Nexmark queries' SQL, as the nexmark project writes it (github.com/nexmark/nexmark,
//! `nexmark-flink/src/main/resources/queries/`: `ddl_gen.sql` and `ddl_views.sql` at 536d772,
//! with the `bid` row and view's `channel` and `url` columns of its later versions, which q21
//! and q22 read; the queries at 0f96e93, but q4, q5 and q7 at eb6c5a8, q6, q10, q13 and q15 at
//! a8da211, q12 at 63b8d31), every query q0–q22 (`riffle-sql`, `riffle nexmark run --sql`).
//! Each query's sink table is `'connector' = 'blackhole'` (q10's a partitioned file system).
//! Two changes: q20's file creates `discard_sink` and inserts into `nexmark_q20` (its table is
//! named `nexmark_q20` here); q9 and q15 are their versions whose time column is `dateTime`
//! (the project's later files rename it `customTime`, a column of views this DDL does not
//! have).
//!
//! The scripts use the nexmark project's variables: `${TPS}`, `${EVENTS_NUM}`,
//! `${PERSON_PROPORTION}`, `${AUCTION_PROPORTION}`, `${BID_PROPORTION}` and `${NEXMARK_TABLE}`
//! ([`variables`] gives them for a generator's settings); q10 writes its files under
//! `${NEXMARK_DIR}/data/output/${SUBMIT_TIME}/bid/` (the runner gives those two), and q13
//! reads its side table from `${FLINK_HOME}/data/side_input.txt` ([`q13_side_input`] is its
//! text).
//!
//! ```
//! use riffle_nexmark::{Query, sql};
//! assert!(sql::query(Query::Q17).unwrap().contains("GROUP BY auction"));
//! assert!(sql::query(Query::Q6).unwrap().contains("ROWS BETWEEN 10 PRECEDING"));
//! assert!(sql::q13_side_input().starts_with("0,value-0\n"));
//! ```

use crate::{NexmarkConfig, Query};

/// The `datagen` table over the generator (`ddl_gen.sql`).
pub const DDL_GEN: &str = include_str!("../sql/ddl_gen.sql");

/// The `person`, `auction` and `bid` views over `${NEXMARK_TABLE}` (`ddl_views.sql`).
pub const DDL_VIEWS: &str = include_str!("../sql/ddl_views.sql");

/// The SQL of `query` (its sink table, then its `INSERT INTO`): every query has it (`None` is
/// for a query Riffle's SQL would not run).
pub fn query(query: Query) -> Option<&'static str> {
    Some(match query {
        Query::Q0 => include_str!("../sql/q0.sql"),
        Query::Q1 => include_str!("../sql/q1.sql"),
        Query::Q2 => include_str!("../sql/q2.sql"),
        Query::Q3 => include_str!("../sql/q3.sql"),
        Query::Q4 => include_str!("../sql/q4.sql"),
        Query::Q5 => include_str!("../sql/q5.sql"),
        Query::Q6 => include_str!("../sql/q6.sql"),
        Query::Q7 => include_str!("../sql/q7.sql"),
        Query::Q8 => include_str!("../sql/q8.sql"),
        Query::Q9 => include_str!("../sql/q9.sql"),
        Query::Q10 => include_str!("../sql/q10.sql"),
        Query::Q11 => include_str!("../sql/q11.sql"),
        Query::Q12 => include_str!("../sql/q12.sql"),
        Query::Q13 => include_str!("../sql/q13.sql"),
        Query::Q14 => include_str!("../sql/q14.sql"),
        Query::Q15 => include_str!("../sql/q15.sql"),
        Query::Q16 => include_str!("../sql/q16.sql"),
        Query::Q17 => include_str!("../sql/q17.sql"),
        Query::Q18 => include_str!("../sql/q18.sql"),
        Query::Q19 => include_str!("../sql/q19.sql"),
        Query::Q20 => include_str!("../sql/q20.sql"),
        Query::Q21 => include_str!("../sql/q21.sql"),
        Query::Q22 => include_str!("../sql/q22.sql"),
    })
}

/// The text of q13's side table, `side_input.txt` (CSV lines `key,value`): the table the
/// DataStream q13 looks bids up in ([`crate::queries::q13_side_value`] for keys 0 to
/// [`crate::queries::Q13_SIDE_ROWS`]` - 1`).
pub fn q13_side_input() -> String {
    (0..crate::queries::Q13_SIDE_ROWS)
        .map(|key| format!("{key},{}\n", crate::queries::q13_side_value(key)))
        .collect()
}

/// The scripts' variables for the generator's settings `config` (the default proportions 1, 3,
/// 46; `EVENTS_NUM` 0 for an unbounded run), reading the `datagen` table.
pub fn variables(config: &NexmarkConfig) -> Vec<(&'static str, String)> {
    vec![
        ("TPS", format!("{}", config.events_per_second as u64)),
        ("EVENTS_NUM", config.events.unwrap_or(0).to_string()),
        ("PERSON_PROPORTION", "1".into()),
        ("AUCTION_PROPORTION", "3".into()),
        ("BID_PROPORTION", "46".into()),
        ("NEXMARK_TABLE", "datagen".into()),
    ]
}
