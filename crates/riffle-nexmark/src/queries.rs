//! The Nexmark queries as DataStream programs.
//!
//! Each follows the SQL of the nexmark project's Flink queries
//! (`nexmark-flink/src/main/resources/queries/qN.sql` in github.com/nexmark/nexmark), whose
//! text is quoted in each function's doc; its output row has the SQL's columns under the SQL's
//! names. Event-time queries use the source's watermarks (the project's `dateTime - 4 s`);
//! windows fire when the watermark passes them, with no allowed lateness, as in Flink SQL.
//!
//! The queries that join two streams (q3, q4, q6, q7, q8, q9, q13, q20) are in the submodule
//! `joins`, re-exported here. q10 writes into a partitioned file sink ([`q10_sink`]). q23 is not
//! a query of the nexmark project's Flink suite (q0–q22), so it is not here.
//!
//! Updating queries (q15–q19: unbounded group aggregations, deduplication, top-N) produce a
//! changelog, [`Change`]: each row is marked `+I` (first row of its key) or `+U` (replaces the
//! previous row of the same key; the key is the `GROUP BY` / `PARTITION BY` columns, plus
//! `rank_number` for q19). One changelog row follows each input bid that changes a result, as
//! in Flink without mini-batches; the last row of each key is the result.

use std::cmp::Reverse;
use std::time::Duration;

use riffle::aggregate::{AggregateFunction, Count};
use riffle::state::ValueStateDescriptor;
use riffle::window::{Session, Sliding, Tumbling, WindowResult};
use riffle::{DataStream, Timestamp};
use serde::{Deserialize, Serialize};

use crate::event::{Bid, Civil, DAY_MS, Event};

mod joins;
pub use joins::*;

/// How a changelog row changes the result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Op {
    /// The first row of its key.
    #[serde(rename = "+I")]
    Insert,
    /// Replaces the previous row of its key.
    #[serde(rename = "+U")]
    Update,
}

/// A changelog row: `{"op":"+U", ...the row's columns}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Change<R> {
    /// Insert or update.
    pub op: Op,
    /// The row.
    #[serde(flatten)]
    pub row: R,
}

impl<R> Change<R> {
    fn new(first: bool, row: R) -> Self {
        Change {
            op: if first { Op::Insert } else { Op::Update },
            row,
        }
    }
}

/// The bids of an event stream (the nexmark project's `bid` view).
pub fn bids(events: &DataStream<Event>) -> DataStream<Bid> {
    events.flat_map(Event::into_bid).name("bids")
}

// ---------------------------------------------------------------------------------------------
// Stateless queries

/// Row of q0.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Q0Row {
    /// Auction id.
    pub auction: i64,
    /// Bidder id.
    pub bidder: i64,
    /// Price, cents.
    pub price: i64,
    /// Event time, epoch ms.
    #[serde(rename = "dateTime")]
    pub date_time: Timestamp,
    /// Padding.
    pub extra: String,
}

/// q0, pass-through: `SELECT auction, bidder, price, dateTime, extra FROM bid`.
pub fn q0(events: &DataStream<Event>) -> DataStream<Q0Row> {
    bids(events)
        .map(|b| Q0Row {
            auction: b.auction,
            bidder: b.bidder,
            price: b.price,
            date_time: b.date_time,
            extra: b.extra,
        })
        .name("q0")
}

/// `0.908 * price` (dollars to euros) as a `DECIMAL(23, 3)`: computed exactly in thousandths,
/// written as the nearest double (which prints as the exact decimal).
pub fn euros(price: i64) -> f64 {
    (price as i128 * 908) as f64 / 1000.0
}

/// Row of q1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Q1Row {
    /// Auction id.
    pub auction: i64,
    /// Bidder id.
    pub bidder: i64,
    /// `0.908 * price`.
    pub price: f64,
    /// Event time, epoch ms.
    #[serde(rename = "dateTime")]
    pub date_time: Timestamp,
    /// Padding.
    pub extra: String,
}

/// q1, currency conversion:
/// `SELECT auction, bidder, 0.908 * price as price, dateTime, extra FROM bid`.
pub fn q1(events: &DataStream<Event>) -> DataStream<Q1Row> {
    bids(events)
        .map(|b| Q1Row {
            auction: b.auction,
            bidder: b.bidder,
            price: euros(b.price),
            date_time: b.date_time,
            extra: b.extra,
        })
        .name("q1")
}

/// Row of q2.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Q2Row {
    /// Auction id.
    pub auction: i64,
    /// Price, cents.
    pub price: i64,
}

/// q2, selection: `SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0`.
pub fn q2(events: &DataStream<Event>) -> DataStream<Q2Row> {
    bids(events)
        .filter(|b| b.auction % 123 == 0)
        .map(|b| Q2Row {
            auction: b.auction,
            price: b.price,
        })
        .name("q2")
}

/// Row of q14.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Q14Row {
    /// Auction id.
    pub auction: i64,
    /// Bidder id.
    pub bidder: i64,
    /// `0.908 * price`.
    pub price: f64,
    /// `dayTime` (8–18 h), `nightTime` (before 7 h or from 20 h) or `otherTime`.
    #[serde(rename = "bidTimeType")]
    pub bid_time_type: String,
    /// Event time, epoch ms.
    #[serde(rename = "dateTime")]
    pub date_time: Timestamp,
    /// Padding.
    pub extra: String,
    /// Number of `c` characters in `extra`.
    pub c_counts: i64,
}

/// The scalar function of q14 (the project's `count_char` UDF): occurrences of `c` in `text`.
pub fn count_char(text: &str, c: char) -> i64 {
    text.chars().filter(|&x| x == c).count() as i64
}

/// q14's `CASE` on `HOUR(dateTime)` (UTC).
pub fn bid_time_type(date_time: Timestamp) -> &'static str {
    let hour = Civil::of(date_time).hour;
    if (8..=18).contains(&hour) {
        "dayTime"
    } else if hour <= 6 || hour >= 20 {
        "nightTime"
    } else {
        "otherTime"
    }
}

/// q14, a filter and a scalar function:
///
/// ```sql
/// SELECT auction, bidder, 0.908 * price as price,
///     CASE WHEN HOUR(dateTime) >= 8 AND HOUR(dateTime) <= 18 THEN 'dayTime'
///          WHEN HOUR(dateTime) <= 6 OR HOUR(dateTime) >= 20 THEN 'nightTime'
///          ELSE 'otherTime' END AS bidTimeType,
///     dateTime, extra, count_char(extra, 'c') AS c_counts
/// FROM bid WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000;
/// ```
pub fn q14(events: &DataStream<Event>) -> DataStream<Q14Row> {
    bids(events)
        .filter(|b| {
            // 0.908 * price in thousandths, compared exactly.
            let thousandths = b.price as i128 * 908;
            thousandths > 1_000_000_000 && thousandths < 50_000_000_000
        })
        .map(|b| Q14Row {
            auction: b.auction,
            bidder: b.bidder,
            price: euros(b.price),
            bid_time_type: bid_time_type(b.date_time).to_string(),
            date_time: b.date_time,
            c_counts: count_char(&b.extra, 'c'),
            extra: b.extra,
        })
        .name("q14")
}

/// Row of q21.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Q21Row {
    /// Auction id.
    pub auction: i64,
    /// Bidder id.
    pub bidder: i64,
    /// Price, cents.
    pub price: i64,
    /// Channel.
    pub channel: String,
    /// Channel id.
    pub channel_id: String,
}

/// `REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2)`: the value of the first `channel_id`
/// parameter that starts the string or follows a `&`.
pub fn channel_id_of(url: &str) -> Option<&str> {
    const NAME: &str = "channel_id=";
    let mut from = 0;
    while let Some(found) = url[from..].find(NAME) {
        let at = from + found;
        if at == 0 || url.as_bytes()[at - 1] == b'&' {
            let value = &url[at + NAME.len()..];
            return Some(value.split('&').next().unwrap_or(""));
        }
        from = at + 1;
    }
    None
}

/// q21, `CASE WHEN` and `REGEXP_EXTRACT`:
///
/// ```sql
/// SELECT auction, bidder, price, channel,
///     CASE WHEN lower(channel) = 'apple' THEN '0' WHEN lower(channel) = 'google' THEN '1'
///          WHEN lower(channel) = 'facebook' THEN '2' WHEN lower(channel) = 'baidu' THEN '3'
///          ELSE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) END AS channel_id
/// FROM bid WHERE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) is not null
///     or lower(channel) in ('apple', 'google', 'facebook', 'baidu');
/// ```
pub fn q21(events: &DataStream<Event>) -> DataStream<Q21Row> {
    bids(events)
        .flat_map(|b| {
            let known = match b.channel.to_lowercase().as_str() {
                "apple" => Some("0"),
                "google" => Some("1"),
                "facebook" => Some("2"),
                "baidu" => Some("3"),
                _ => None,
            };
            let channel_id = known.or_else(|| channel_id_of(&b.url))?.to_string();
            Some(Q21Row {
                auction: b.auction,
                bidder: b.bidder,
                price: b.price,
                channel: b.channel,
                channel_id,
            })
        })
        .name("q21")
}

/// Row of q22.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Q22Row {
    /// Auction id.
    pub auction: i64,
    /// Bidder id.
    pub bidder: i64,
    /// Price, cents.
    pub price: i64,
    /// Channel.
    pub channel: String,
    /// `SPLIT_INDEX(url, '/', 3)`.
    pub dir1: Option<String>,
    /// `SPLIT_INDEX(url, '/', 4)`.
    pub dir2: Option<String>,
    /// `SPLIT_INDEX(url, '/', 5)`.
    pub dir3: Option<String>,
}

/// q22, URL directories:
/// `SELECT auction, bidder, price, channel, SPLIT_INDEX(url, '/', 3) as dir1,
/// SPLIT_INDEX(url, '/', 4) as dir2, SPLIT_INDEX(url, '/', 5) as dir3 FROM bid`
/// (`SPLIT_INDEX` counts from 0 and is null past the last part).
pub fn q22(events: &DataStream<Event>) -> DataStream<Q22Row> {
    bids(events)
        .map(|b| {
            let mut parts = b.url.split('/').skip(3).map(str::to_string);
            let (dir1, dir2, dir3) = (parts.next(), parts.next(), parts.next());
            Q22Row {
                auction: b.auction,
                bidder: b.bidder,
                price: b.price,
                channel: b.channel,
                dir1,
                dir2,
                dir3,
            }
        })
        .name("q22")
}

// ---------------------------------------------------------------------------------------------
// q10: bids to a partitioned file system

/// Row of q10: a bid's columns and its partition (`dt`, `hm`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Q10Row {
    /// Auction id.
    pub auction: i64,
    /// Bidder id.
    pub bidder: i64,
    /// Price, cents.
    pub price: i64,
    /// Event time, epoch ms.
    #[serde(rename = "dateTime")]
    pub date_time: Timestamp,
    /// Padding.
    pub extra: String,
    /// `DATE_FORMAT(dateTime, 'yyyy-MM-dd')`.
    pub dt: String,
    /// `DATE_FORMAT(dateTime, 'HH:mm')`.
    pub hm: String,
}

/// q10, log to file system: every bid with its date and minute, written into a file system
/// partitioned by them ([`q10_sink`]):
///
/// ```sql
/// CREATE TABLE nexmark_q10 (auction BIGINT, bidder BIGINT, price BIGINT,
///     dateTime TIMESTAMP(3), extra VARCHAR, dt STRING, hm STRING)
/// PARTITIONED BY (dt, hm) WITH ('connector' = 'filesystem', 'format' = 'csv', ...);
/// INSERT INTO nexmark_q10
/// SELECT auction, bidder, price, dateTime, extra,
///     DATE_FORMAT(dateTime, 'yyyy-MM-dd'), DATE_FORMAT(dateTime, 'HH:mm')
/// FROM bid;
/// ```
pub fn q10(events: &DataStream<Event>) -> DataStream<Q10Row> {
    bids(events)
        .map(|b| {
            let c = Civil::of(b.date_time);
            Q10Row {
                auction: b.auction,
                bidder: b.bidder,
                price: b.price,
                date_time: b.date_time,
                extra: b.extra,
                dt: c.date(),
                hm: c.hour_minute(),
            }
        })
        .name("q10")
}

/// Moved to `riffle::sink::partitioned` (SQL's partitioned tables use it too).
#[deprecated(note = "use riffle::sink::partitioned::escape_partition_value")]
pub fn escape_partition_value(value: &str) -> String {
    riffle::sink::partitioned::escape_partition_value(value)
}

/// q10's partition directory of a row: `dt=2026-01-15/hm=00%3A00`.
pub fn q10_partition(row: &Q10Row) -> String {
    format!(
        "dt={}/hm={}",
        riffle::sink::partitioned::escape_partition_value(&row.dt),
        riffle::sink::partitioned::escape_partition_value(&row.hm)
    )
}

/// A `TIMESTAMP(3)` as Flink's CSV format writes it (UTC): `yyyy-MM-dd HH:mm:ss`, then the
/// milliseconds as the shortest fraction, none when they are zero: `2026-01-15 00:18:00`,
/// `2026-01-15 00:18:00.4`, `2026-01-15 00:18:00.45`, `2026-01-15 00:18:00.456`. Flink's
/// `RowDataToCsvConverters` formats a timestamp with `ISO_LOCAL_DATE`, a space and
/// `ISO_LOCAL_TIME`, whose fraction is `appendFraction(NANO_OF_SECOND, 0, 9, true)`: as many
/// digits as needed, and no `.` when it is zero (Flink 2.3 writes `"2026-01-15 00:18:00.4"`).
pub fn sql_timestamp(millis: Timestamp) -> String {
    let c = Civil::of(millis);
    let ms = millis.rem_euclid(1_000);
    let second = millis.rem_euclid(60_000) / 1_000;
    let mut text = format!("{} {}:{second:02}", c.date(), c.hour_minute());
    if ms != 0 {
        let digits = format!("{ms:03}");
        text.push('.');
        text.push_str(digits.trim_end_matches('0'));
    }
    text
}

/// q10's CSV line of a row (the partition columns are in the directory, not in the file, as
/// in Flink's file system connector): `auction,bidder,price,dateTime,extra`, as Flink's CSV
/// format writes it: the `BIGINT`s as plain numbers, `dateTime` ([`sql_timestamp`]) and `extra`
/// as string columns, quoted as Jackson quotes them (see `csv_string`):
/// `1594,1201,6253,"2026-01-15 00:18:00.4","ewwr…"`.
pub fn q10_csv(row: &Q10Row, line: &mut Vec<u8>) {
    use std::io::Write;
    let _ = write!(line, "{},{},{},", row.auction, row.bidder, row.price);
    riffle::sink::csv::write_field(&sql_timestamp(row.date_time), line);
    line.push(b',');
    riffle::sink::csv::write_field(&row.extra, line);
}

/// q10's sink: CSV part files (`.csv`) under `dir/dt=<date>/hm=<HH%3Amm>/`, exactly-once (see
/// [`PartitionedFileSink`](riffle::sink::partitioned::PartitionedFileSink)).
pub fn q10_sink(
    dir: impl Into<std::path::PathBuf>,
) -> riffle::sink::partitioned::PartitionedFileSink<Q10Row> {
    riffle::sink::partitioned::PartitionedFileSink::new(dir, q10_partition, |row, line| {
        q10_csv(row, line);
        Ok(())
    })
    .extension("csv")
}

// ---------------------------------------------------------------------------------------------
// Windows

/// Row of q5: a hot auction of a window. The SQL's output is `auction, num`; the window's
/// bounds, which the SQL computes and joins on, are kept so rows can be told apart.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Q5Row {
    /// Auction id.
    pub auction: i64,
    /// Its bids in the window.
    pub num: u64,
    /// Window start, epoch ms.
    pub starttime: Timestamp,
    /// Window end, epoch ms.
    pub endtime: Timestamp,
}

/// Per window: the largest count and every auction that has it.
#[derive(Clone, Copy, Debug, Default)]
pub struct HotAuctions;

impl AggregateFunction<WindowResult<i64, u64>> for HotAuctions {
    type Acc = (u64, Vec<i64>);
    type Out = (u64, Vec<i64>);
    fn create(&self) -> Self::Acc {
        (0, Vec::new())
    }
    fn add(&self, acc: &mut Self::Acc, count: &WindowResult<i64, u64>) {
        if count.value > acc.0 {
            *acc = (count.value, vec![count.key]);
        } else if count.value == acc.0 {
            acc.1.push(count.key);
        }
    }
    fn merge(&self, acc: &mut Self::Acc, other: Self::Acc) {
        if other.0 > acc.0 {
            *acc = other;
        } else if other.0 == acc.0 {
            acc.1.extend(other.1);
        }
    }
    fn result(&self, acc: &Self::Acc) -> Self::Out {
        let mut auctions = acc.1.clone();
        auctions.sort_unstable();
        (acc.0, auctions)
    }
}

/// q5, hot items: bids per auction in sliding windows of 10 s every 2 s, and per window the
/// auctions with the most bids (all of them on a tie).
///
/// ```sql
/// SELECT AuctionBids.auction, AuctionBids.num FROM (
///   SELECT auction, count(*) AS num, window_start AS starttime, window_end AS endtime
///   FROM TABLE(HOP(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
///   GROUP BY auction, window_start, window_end) AS AuctionBids
/// JOIN (SELECT max(CountBids.num) AS maxn, CountBids.starttime, CountBids.endtime FROM (...same
///   counts...) AS CountBids GROUP BY CountBids.starttime, CountBids.endtime) AS MaxBids
/// ON AuctionBids.starttime = MaxBids.starttime AND AuctionBids.endtime = MaxBids.endtime
///   AND AuctionBids.num >= MaxBids.maxn;
/// ```
///
/// The counts are kept per 2-second slice, each bid counted once, and merged into the five
/// windows of each slice as they fire. The self-join on the window needs no join operator: the counts of one window all carry the
/// window's last millisecond as event time, so a second, 2-second tumbling window keyed by the
/// window's bounds sees exactly one window's counts and keeps the largest.
pub fn q5(events: &DataStream<Event>) -> DataStream<Q5Row> {
    let slide = Duration::from_secs(2);
    bids(events)
        .key_by(|b| b.auction)
        .window(Sliding::of(Duration::from_secs(10), slide))
        .sliced()
        .aggregate(Count)
        .name("q5 bids per auction")
        .uid("q5-counts")
        .key_by(|c| (c.window_start, c.window_end))
        .window(Tumbling::of(slide))
        .aggregate(HotAuctions)
        .name("q5 hottest per window")
        .uid("q5-hottest")
        .flat_map(|r| {
            let ((starttime, endtime), (num, auctions)) = (r.key, r.value);
            auctions.into_iter().map(move |auction| Q5Row {
                auction,
                num,
                starttime,
                endtime,
            })
        })
        .name("q5")
}

/// Row of q11 and q12: bids of a bidder in a window.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BidderCount {
    /// Bidder id.
    pub bidder: i64,
    /// Bids in the window.
    pub bid_count: u64,
    /// Window start, epoch ms.
    pub starttime: Timestamp,
    /// Window end, epoch ms.
    pub endtime: Timestamp,
}

impl From<WindowResult<i64, u64>> for BidderCount {
    fn from(r: WindowResult<i64, u64>) -> Self {
        BidderCount {
            bidder: r.key,
            bid_count: r.value,
            starttime: r.window_start,
            endtime: r.window_end,
        }
    }
}

/// q11, user sessions: bids per bidder in event-time session windows with a 10 s gap
/// (`endtime` = last bid + 10 s, as Flink's `SESSION_END`).
///
/// ```sql
/// SELECT B.bidder, count(*) as bid_count,
///     SESSION_START(B.dateTime, INTERVAL '10' SECOND) as starttime,
///     SESSION_END(B.dateTime, INTERVAL '10' SECOND) as endtime
/// FROM bid B GROUP BY B.bidder, SESSION(B.dateTime, INTERVAL '10' SECOND);
/// ```
pub fn q11(events: &DataStream<Event>) -> DataStream<BidderCount> {
    bids(events)
        .key_by(|b| b.bidder)
        .window(Session::with_gap(Duration::from_secs(10)))
        .aggregate(Count)
        .name("q11 sessions")
        .uid("q11-sessions")
        .map(BidderCount::from)
        .name("q11")
}

/// q12, processing-time windows: bids per bidder in tumbling 10 s windows of processing time
/// (the job's clock, `EnvConfig::clock`; a test freezes it to get a deterministic answer).
///
/// ```sql
/// CREATE VIEW B AS SELECT *, PROCTIME() as p_time FROM bid;
/// SELECT bidder, count(*) as bid_count, window_start AS starttime, window_end AS endtime
/// FROM TABLE(TUMBLE(TABLE B, DESCRIPTOR(p_time), INTERVAL '10' SECOND))
/// GROUP BY bidder, window_start, window_end;
/// ```
pub fn q12(events: &DataStream<Event>) -> DataStream<BidderCount> {
    bids(events)
        .key_by(|b| b.bidder)
        .window(Tumbling::processing_time(Duration::from_secs(10)))
        .aggregate(Count)
        .name("q12 windows")
        .uid("q12-windows")
        .map(BidderCount::from)
        .name("q12")
}

// ---------------------------------------------------------------------------------------------
// Unbounded aggregations (changelogs)

/// The price rank of q15–q17: 1 below 10 000, 2 below 1 000 000, else 3.
pub fn price_rank(price: i64) -> usize {
    if price < 10_000 {
        1
    } else if price < 1_000_000 {
        2
    } else {
        3
    }
}

/// The day of an epoch-ms time (days since 1970-01-01, UTC): the `DATE_FORMAT(dateTime,
/// 'yyyy-MM-dd')` group.
pub fn day_of(date_time: Timestamp) -> i64 {
    date_time.div_euclid(DAY_MS)
}

/// A bid on its way through the distinct-count stages of q15 and q16: which of the four
/// counters (total, rank 1, 2, 3; one bit each) it brings a new bidder and a new auction to.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct DistinctPart<G> {
    group: G,
    bidder: i64,
    auction: i64,
    rank: u8,
    minute: u16,
    new_bidders: u8,
    new_auctions: u8,
}

/// The four counters of a group in q15 and q16, and q16's latest minute.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct DistinctCounts {
    bids: [i64; 4],
    bidders: [i64; 4],
    auctions: [i64; 4],
    max_minute: u16,
}

impl DistinctCounts {
    fn add(&mut self, part: &DistinctPart<impl Sized>) {
        self.bids[0] += 1;
        self.bids[part.rank as usize] += 1;
        for i in 0..4 {
            self.bidders[i] += i64::from(part.new_bidders >> i & 1);
            self.auctions[i] += i64::from(part.new_auctions >> i & 1);
        }
        self.max_minute = self.max_minute.max(part.minute);
    }
}

static SEEN: ValueStateDescriptor<u8> = ValueStateDescriptor::new("seen");
static COUNTS: ValueStateDescriptor<DistinctCounts> = ValueStateDescriptor::new("counts");

/// The `count(distinct ...) filter (...)` columns of q15 and q16 as three keyed stages, as
/// Flink's split distinct aggregation does: per (group, bidder) and per (group, auction) a
/// keyed flag byte says which counters already count them, then per group the counters add up
/// the novelties. Emits the counters and whether they are the group's first row.
fn distinct_counts<G>(parts: DataStream<DistinctPart<G>>) -> DataStream<(G, bool, DistinctCounts)>
where
    G: riffle::Data + std::hash::Hash + Eq,
{
    parts
        .key_by(|p| (p.group.clone(), p.bidder))
        .process(|_, mut part, ctx| {
            let bits = 1u8 | 1 << part.rank;
            let mut seen = ctx.value(&SEEN);
            let before = seen.get()?.unwrap_or(0);
            part.new_bidders = bits & !before;
            if part.new_bidders != 0 {
                seen.set(before | bits)?;
            }
            ctx.emit(part)
        })
        .name("distinct bidders")
        .uid("distinct-bidders")
        .key_by(|p| (p.group.clone(), p.auction))
        .process(|_, mut part, ctx| {
            let bits = 1u8 | 1 << part.rank;
            let mut seen = ctx.value(&SEEN);
            let before = seen.get()?.unwrap_or(0);
            part.new_auctions = bits & !before;
            if part.new_auctions != 0 {
                seen.set(before | bits)?;
            }
            ctx.emit(part)
        })
        .name("distinct auctions")
        .uid("distinct-auctions")
        .key_by(|p| p.group.clone())
        .process(|group, part, ctx| {
            let mut state = ctx.value(&COUNTS);
            let before = state.get()?;
            let first = before.is_none();
            let mut counts = before.unwrap_or_default();
            counts.add(&part);
            state.set(counts.clone())?;
            ctx.emit((group.clone(), first, counts))
        })
        .name("counts per group")
        .uid("counts-per-group")
}

fn distinct_part<G>(group: G, b: &Bid) -> DistinctPart<G> {
    let civil = Civil::of(b.date_time);
    DistinctPart {
        group,
        bidder: b.bidder,
        auction: b.auction,
        rank: price_rank(b.price) as u8,
        minute: (civil.hour * 60 + civil.minute) as u16,
        new_bidders: 0,
        new_auctions: 0,
    }
}

/// Row of q15.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct Q15Row {
    /// `yyyy-MM-dd`.
    pub day: String,
    pub total_bids: i64,
    pub rank1_bids: i64,
    pub rank2_bids: i64,
    pub rank3_bids: i64,
    pub total_bidders: i64,
    pub rank1_bidders: i64,
    pub rank2_bidders: i64,
    pub rank3_bidders: i64,
    pub total_auctions: i64,
    pub rank1_auctions: i64,
    pub rank2_auctions: i64,
    pub rank3_auctions: i64,
}

/// q15, bidding statistics per day: counts of bids, distinct bidders and distinct auctions,
/// in all and per price rank (`count(*) filter (where price < 10000)`, ...,
/// `count(distinct bidder) filter (...)`, ... `GROUP BY DATE_FORMAT(dateTime, 'yyyy-MM-dd')`).
pub fn q15(events: &DataStream<Event>) -> DataStream<Change<Q15Row>> {
    let parts = bids(events).map(|b| distinct_part(day_of(b.date_time), &b));
    distinct_counts(parts)
        .map(|(day, first, c)| {
            Change::new(
                first,
                Q15Row {
                    day: Civil::of(day * DAY_MS).date(),
                    total_bids: c.bids[0],
                    rank1_bids: c.bids[1],
                    rank2_bids: c.bids[2],
                    rank3_bids: c.bids[3],
                    total_bidders: c.bidders[0],
                    rank1_bidders: c.bidders[1],
                    rank2_bidders: c.bidders[2],
                    rank3_bidders: c.bidders[3],
                    total_auctions: c.auctions[0],
                    rank1_auctions: c.auctions[1],
                    rank2_auctions: c.auctions[2],
                    rank3_auctions: c.auctions[3],
                },
            )
        })
        .name("q15")
}

/// Row of q16.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct Q16Row {
    pub channel: String,
    /// `yyyy-MM-dd`.
    pub day: String,
    /// `max(DATE_FORMAT(dateTime, 'HH:mm'))`.
    pub minute: String,
    pub total_bids: i64,
    pub rank1_bids: i64,
    pub rank2_bids: i64,
    pub rank3_bids: i64,
    pub total_bidders: i64,
    pub rank1_bidders: i64,
    pub rank2_bidders: i64,
    pub rank3_bidders: i64,
    pub total_auctions: i64,
    pub rank1_auctions: i64,
    pub rank2_auctions: i64,
    pub rank3_auctions: i64,
}

/// q16, channel statistics: q15's columns per channel and day, and the day's latest minute
/// (`GROUP BY channel, DATE_FORMAT(dateTime, 'yyyy-MM-dd')`).
pub fn q16(events: &DataStream<Event>) -> DataStream<Change<Q16Row>> {
    let parts = bids(events).map(|b| distinct_part((b.channel.clone(), day_of(b.date_time)), &b));
    distinct_counts(parts)
        .map(|((channel, day), first, c)| {
            Change::new(
                first,
                Q16Row {
                    channel,
                    day: Civil::of(day * DAY_MS).date(),
                    minute: format!("{:02}:{:02}", c.max_minute / 60, c.max_minute % 60),
                    total_bids: c.bids[0],
                    rank1_bids: c.bids[1],
                    rank2_bids: c.bids[2],
                    rank3_bids: c.bids[3],
                    total_bidders: c.bidders[0],
                    rank1_bidders: c.bidders[1],
                    rank2_bidders: c.bidders[2],
                    rank3_bidders: c.bidders[3],
                    total_auctions: c.auctions[0],
                    rank1_auctions: c.auctions[1],
                    rank2_auctions: c.auctions[2],
                    rank3_auctions: c.auctions[3],
                },
            )
        })
        .name("q16")
}

/// Row of q17.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct Q17Row {
    pub auction: i64,
    /// `yyyy-MM-dd`.
    pub day: String,
    pub total_bids: i64,
    pub rank1_bids: i64,
    pub rank2_bids: i64,
    pub rank3_bids: i64,
    pub min_price: i64,
    pub max_price: i64,
    /// `avg(price)` of a `BIGINT`: the sum divided by the count, truncated.
    pub avg_price: i64,
    pub sum_price: i64,
}

/// The running aggregates of q17.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct AuctionDay {
    bids: [i64; 4],
    min: i64,
    max: i64,
    sum: i64,
}

static AUCTION_DAY: ValueStateDescriptor<AuctionDay> = ValueStateDescriptor::new("auction-day");

/// q17, auction statistics per day: an unbounded group aggregation
/// (`count(*)`, per-rank counts, `min`, `max`, `avg`, `sum` of price
/// `GROUP BY auction, DATE_FORMAT(dateTime, 'yyyy-MM-dd')`).
pub fn q17(events: &DataStream<Event>) -> DataStream<Change<Q17Row>> {
    bids(events)
        .key_by(|b| (b.auction, day_of(b.date_time)))
        .process(|(auction, day), b, ctx| {
            let mut state = ctx.value(&AUCTION_DAY);
            let before = state.get()?;
            let first = before.is_none();
            let mut acc = before.unwrap_or(AuctionDay {
                bids: [0; 4],
                min: i64::MAX,
                max: i64::MIN,
                sum: 0,
            });
            acc.bids[0] += 1;
            acc.bids[price_rank(b.price)] += 1;
            acc.min = acc.min.min(b.price);
            acc.max = acc.max.max(b.price);
            acc.sum += b.price;
            state.set(acc.clone())?;
            ctx.emit(Change::new(
                first,
                Q17Row {
                    auction: *auction,
                    day: Civil::of(day * DAY_MS).date(),
                    total_bids: acc.bids[0],
                    rank1_bids: acc.bids[1],
                    rank2_bids: acc.bids[2],
                    rank3_bids: acc.bids[3],
                    min_price: acc.min,
                    max_price: acc.max,
                    avg_price: acc.sum / acc.bids[0],
                    sum_price: acc.sum,
                },
            ))
        })
        .name("q17")
        .uid("q17")
}

/// q18's order on the bids of one bidder and auction, first first: `ORDER BY dateTime DESC`,
/// ties broken by the bid's other columns in order, ascending (as Riffle's SQL breaks them), so
/// that the answer does not depend on arrival order.
fn latest_first(b: &Bid) -> (Reverse<Timestamp>, i64, &str, &str, &str) {
    (Reverse(b.date_time), b.price, &b.channel, &b.url, &b.extra)
}

static LAST_BID: ValueStateDescriptor<Bid> = ValueStateDescriptor::new("last-bid");

/// q18, the last bid of each bidder on each auction (deduplication):
///
/// ```sql
/// SELECT auction, bidder, price, channel, url, dateTime, extra FROM (SELECT *,
///     ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY dateTime DESC) AS rank_number
///   FROM bid) WHERE rank_number <= 1;
/// ```
///
/// Bids with the same `dateTime` are ordered by price, channel, url and extra, ascending (Flink's
/// SQL leaves ties to arrival order, which differs between parallel runs; Riffle's SQL orders
/// them by the row's columns).
pub fn q18(events: &DataStream<Event>) -> DataStream<Change<Bid>> {
    bids(events)
        .key_by(|b| (b.bidder, b.auction))
        .process(|_, b, ctx| {
            let mut state = ctx.value(&LAST_BID);
            let before = state.get()?;
            if let Some(last) = &before
                && latest_first(&b) >= latest_first(last)
            {
                return Ok(());
            }
            state.set(b.clone())?;
            ctx.emit(Change::new(before.is_none(), b))
        })
        .name("q18")
        .uid("q18")
}

/// Row of q19.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Q19Row {
    /// The bid.
    #[serde(flatten)]
    pub bid: Bid,
    /// Its place among the auction's bids, 1 to 10.
    pub rank_number: u32,
}

/// q19's order on the bids of an auction: `ORDER BY price DESC`, ties broken by the bid's other
/// columns in order (bidder, channel, url, time, extra), ascending, as Riffle's SQL breaks them.
fn top_first(b: &Bid) -> (Reverse<i64>, i64, &str, &str, Timestamp, &str) {
    (
        Reverse(b.price),
        b.bidder,
        &b.channel,
        &b.url,
        b.date_time,
        &b.extra,
    )
}

/// How many bids q19 keeps per auction.
pub const TOP_N: usize = 10;

static TOP_BIDS: ValueStateDescriptor<Vec<Bid>> = ValueStateDescriptor::new("top-bids");
static TOP_FLOOR: ValueStateDescriptor<i64> = ValueStateDescriptor::new("top-floor");

/// q19, the 10 highest bids of each auction (top-N):
///
/// ```sql
/// SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC)
///   AS rank_number FROM bid) WHERE rank_number <= 10;
/// ```
///
/// A bid entering the top 10 at rank r moves the ones below: rows r to the end are emitted
/// (keyed by auction and `rank_number`). Ties on price are ordered by the bid's other columns
/// (bidder, channel, url, time, extra). A keyed floor (the 10th price once there are 10) spares the list for most bids.
pub fn q19(events: &DataStream<Event>) -> DataStream<Change<Q19Row>> {
    bids(events)
        .key_by(|b| b.auction)
        .process(|_, b, ctx| {
            if let Some(floor) = ctx.value(&TOP_FLOOR).get()?
                && b.price < floor
            {
                return Ok(());
            }
            let mut top = ctx.value(&TOP_BIDS).get()?.unwrap_or_default();
            let at = top.partition_point(|x| top_first(x) <= top_first(&b));
            if at >= TOP_N {
                return Ok(());
            }
            let old_len = top.len();
            top.insert(at, b);
            top.truncate(TOP_N);
            for (i, bid) in top.iter().enumerate().skip(at) {
                ctx.emit(Change::new(
                    i >= old_len,
                    Q19Row {
                        bid: bid.clone(),
                        rank_number: i as u32 + 1,
                    },
                ))?;
            }
            if top.len() == TOP_N {
                ctx.value(&TOP_FLOOR).set(top[TOP_N - 1].price)?;
            }
            ctx.value(&TOP_BIDS).set(top)
        })
        .name("q19")
        .uid("q19")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-01-15 00:18:00.000 UTC.
    const AT: Timestamp = 1_768_436_280_000;

    fn line(date_time: Timestamp, extra: &str) -> String {
        let row = Q10Row {
            auction: 1594,
            bidder: 1201,
            price: 6253,
            date_time,
            extra: extra.to_string(),
            dt: String::new(),
            hm: String::new(),
        };
        let mut line = Vec::new();
        q10_csv(&row, &mut line);
        String::from_utf8(line).unwrap()
    }

    #[test]
    fn q10_writes_timestamps_with_the_shortest_fraction_as_flink_does() {
        let extra = "ewwr";
        assert_eq!(
            line(AT, extra),
            r#"1594,1201,6253,"2026-01-15 00:18:00",ewwr"#
        );
        assert_eq!(
            line(AT + 400, extra),
            r#"1594,1201,6253,"2026-01-15 00:18:00.4",ewwr"#
        );
        assert_eq!(
            line(AT + 450, extra),
            r#"1594,1201,6253,"2026-01-15 00:18:00.45",ewwr"#
        );
        assert_eq!(
            line(AT + 456, extra),
            r#"1594,1201,6253,"2026-01-15 00:18:00.456",ewwr"#
        );
        assert_eq!(
            line(AT + 7, extra),
            r#"1594,1201,6253,"2026-01-15 00:18:00.007",ewwr"#
        );
        assert_eq!(
            line(AT + 50, extra),
            r#"1594,1201,6253,"2026-01-15 00:18:00.05",ewwr"#
        );
        assert_eq!(
            line(AT + 23 * 3_600_000 + 41 * 60_000 + 59_999, extra),
            r#"1594,1201,6253,"2026-01-15 23:59:59.999",ewwr"#
        );
    }

    #[test]
    fn q10_quotes_strings_as_flinks_csv_format_does() {
        let golden = |extra: &str, written: &str| {
            assert_eq!(
                line(AT + 400, extra),
                format!(r#"1594,1201,6253,"2026-01-15 00:18:00.4",{written}"#),
                "{extra:?}"
            );
        };
        // A quote and a comma: quoted, the inner quote doubled.
        golden(r#"say "hi", bye"#, r#""say ""hi"", bye""#);
        golden(r#"a"b"#, r#""a""b""#);
        golden("a,b", r#""a,b""#);
        // Any character below `-` quotes a short string; `-` and above do not.
        golden("two words", r#""two words""#);
        golden("tab\there", "\"tab\there\"");
        golden("line\nbreak", "\"line\nbreak\"");
        golden("50%", r#""50%""#);
        golden("it's", r#""it's""#);
        golden("a-b.c/d:e;f", "a-b.c/d:e;f");
        golden("caf\u{e9}", "caf\u{e9}");
        golden("", "");
        // Longer than 24 characters: always quoted (Jackson does not look).
        golden(&"x".repeat(24), &"x".repeat(24));
        golden(&"x".repeat(25), &format!("\"{}\"", "x".repeat(25)));
        // 24 characters of two bytes each are 24 UTF-16 units: not quoted.
        golden(&"\u{e9}".repeat(24), &"\u{e9}".repeat(24));
    }
}
