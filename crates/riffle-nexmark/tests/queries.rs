//! Every query's output on a few thousand generated events (out of order within groups) equals a
//! batch computation written here, independently, in plain Rust over the same events; at
//! parallelism 1 and 2, on heap state, and on RocksDB for the keyed queries.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use riffle::sink::CollectSink;
use riffle::state::StateBackend;
use riffle::time::ManualClock;
use riffle::{DataStream, EnvConfig, StreamEnv, Timestamp};
use riffle_nexmark::queries::{
    self, BidderCount, Change, Op, Q4Row, Q5Row, Q15Row, Q16Row, Q17Row,
};
use riffle_nexmark::{Auction, Bid, Event, NexmarkConfig, NexmarkSource, Person};
use serde::Serialize;

/// 2026-01-14 20:00:00 UTC: the slow configurations cross midnight.
const BASE: Timestamp = 1_768_420_800_000;

fn config(events: u64, events_per_second: f64, group: usize) -> NexmarkConfig {
    NexmarkConfig {
        events: Some(events),
        events_per_second,
        base_time: BASE,
        out_of_order_group_size: group,
        ..NexmarkConfig::default()
    }
}

/// 4 000 events, one every 20 s of event time (22 hours: two days, every hour type), shuffled
/// in groups of 100 (for the queries without event-time windows, where lateness plays no part).
fn slow() -> NexmarkConfig {
    config(4_000, 0.05, 100)
}

fn bids_of(config: &NexmarkConfig) -> Vec<Bid> {
    config
        .generate_all()
        .into_iter()
        .filter_map(Event::into_bid)
        .collect()
}

#[derive(Clone, Copy, Debug)]
enum Backend {
    Heap,
    RocksDb,
}

/// Runs `query` over the events of `config` and returns its output in arrival order.
fn run<T: riffle::Data>(
    config: &NexmarkConfig,
    parallelism: usize,
    backend: Backend,
    query: impl Fn(&DataStream<Event>) -> DataStream<T>,
) -> Vec<T> {
    run_with(config, parallelism, backend, |_| {}, query)
}

fn run_with<T: riffle::Data>(
    config: &NexmarkConfig,
    parallelism: usize,
    backend: Backend,
    tweak: impl FnOnce(&mut EnvConfig),
    query: impl Fn(&DataStream<Event>) -> DataStream<T>,
) -> Vec<T> {
    let state_dir = tempfile::tempdir().unwrap();
    let state_backend: Arc<dyn StateBackend> = match backend {
        Backend::Heap => Arc::new(riffle::state::HeapBackend),
        Backend::RocksDb => Arc::new(riffle_rocksdb::RocksDbBackend::new()),
    };
    let mut env_config = EnvConfig {
        parallelism,
        state_backend,
        local_state_dir: state_dir.path().to_path_buf(),
        dead_letter_dir: state_dir.path().join("dead"),
        ..EnvConfig::default()
    };
    tweak(&mut env_config);
    let env = StreamEnv::with_config(env_config);
    let (sink, out) = CollectSink::new();
    let events = NexmarkSource::new(config.clone()).stream(&env);
    query(&events).sink(sink);
    let result = env.execute().unwrap();
    let late: u64 = result
        .metrics
        .operators
        .iter()
        .map(|o| o.late_records_dropped)
        .sum();
    assert_eq!(late, 0, "nothing is late");
    out.values()
}

fn sorted_json<T: Serialize>(rows: &[T]) -> Vec<String> {
    let mut lines: Vec<String> = rows
        .iter()
        .map(|r| serde_json::to_value(r).unwrap().to_string())
        .collect();
    lines.sort();
    lines
}

/// Compares two sorted row lists, showing the first difference only.
fn assert_same(got: &[String], want: &[String], what: &str) {
    if let Some(i) = (0..got.len().max(want.len())).find(|&i| got.get(i) != want.get(i)) {
        panic!(
            "{what}: {} rows, {} expected; first difference at {i}:\n got  {:?}\n want {:?}",
            got.len(),
            want.len(),
            got.get(i),
            want.get(i)
        );
    }
}

/// Checks an append-only query at p = 1 and p = 2 against the batch rows.
fn check_append<T: riffle::Data, E: Serialize>(
    config: &NexmarkConfig,
    query: impl Fn(&DataStream<Event>) -> DataStream<T> + Copy,
    expected: &[E],
) {
    let want = sorted_json(expected);
    assert!(!want.is_empty(), "the check compares something");
    for p in [1, 2] {
        let got = sorted_json(&run(config, p, Backend::Heap, query));
        assert_same(&got, &want, &format!("p = {p}"));
    }
}

fn utc_date(t: Timestamp) -> String {
    // Days to date by stepping through the calendar: slow and plain, independent of the crate's.
    let mut days = t.div_euclid(86_400_000);
    let mut year = 1970;
    loop {
        let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
        let len = if leap { 366 } else { 365 };
        if days < len {
            let months = [
                31,
                if leap { 29 } else { 28 },
                31,
                30,
                31,
                30,
                31,
                31,
                30,
                31,
                30,
                31,
            ];
            let mut month = 0;
            while days >= months[month] {
                days -= months[month];
                month += 1;
            }
            return format!("{year:04}-{:02}-{:02}", month + 1, days + 1);
        }
        days -= len;
        year += 1;
    }
}

fn utc_hour(t: Timestamp) -> i64 {
    t.rem_euclid(86_400_000) / 3_600_000
}

fn rank(price: i64) -> usize {
    match price {
        p if p < 10_000 => 1,
        p if p < 1_000_000 => 2,
        _ => 3,
    }
}

#[test]
fn q0_passes_every_bid_through() {
    let config = slow();
    let expected: Vec<serde_json::Value> = bids_of(&config)
        .into_iter()
        .map(|b| {
            serde_json::json!({"auction": b.auction, "bidder": b.bidder, "price": b.price, "dateTime": b.date_time, "extra": b.extra})
        })
        .collect();
    assert_eq!(expected.len(), 3_680, "46 bids in 50 events");
    check_append(&config, queries::q0, &expected);
}

#[test]
fn q1_converts_prices_to_euros() {
    let config = slow();
    let expected: Vec<serde_json::Value> = bids_of(&config)
        .into_iter()
        .map(|b| {
            let euros: f64 = format!("{}.{:03}", b.price * 908 / 1000, b.price * 908 % 1000)
                .parse()
                .unwrap();
            serde_json::json!({"auction": b.auction, "bidder": b.bidder, "price": euros, "dateTime": b.date_time, "extra": b.extra})
        })
        .collect();
    check_append(&config, queries::q1, &expected);
}

#[test]
fn q2_selects_every_123rd_auction() {
    let config = config(20_000, 1_000.0, 100);
    let expected: Vec<serde_json::Value> = bids_of(&config)
        .into_iter()
        .filter(|b| b.auction % 123 == 0)
        .map(|b| serde_json::json!({"auction": b.auction, "price": b.price}))
        .collect();
    check_append(&config, queries::q2, &expected);
}

#[test]
fn q14_filters_on_the_euro_price_and_counts_characters() {
    let config = slow();
    let expected: Vec<serde_json::Value> = bids_of(&config)
        .into_iter()
        .filter(|b| {
            let euros = b.price as f64 * 0.908;
            euros > 1_000_000.0 && euros < 50_000_000.0
        })
        .map(|b| {
            let hour = utc_hour(b.date_time);
            let kind = if (8..=18).contains(&hour) {
                "dayTime"
            } else if hour <= 6 || hour >= 20 {
                "nightTime"
            } else {
                "otherTime"
            };
            let euros: f64 = format!("{}.{:03}", b.price * 908 / 1000, b.price * 908 % 1000)
                .parse()
                .unwrap();
            serde_json::json!({"auction": b.auction, "bidder": b.bidder, "price": euros,
                "bidTimeType": kind, "dateTime": b.date_time, "extra": b.extra,
                "c_counts": b.extra.matches('c').count()})
        })
        .collect();
    let kinds: BTreeSet<String> = expected
        .iter()
        .map(|v| v["bidTimeType"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(kinds.len(), 3, "the events cover every type of hour");
    check_append(&config, queries::q14, &expected);
}

#[test]
fn q21_extracts_channel_ids() {
    let config = config(10_000, 1_000.0, 100);
    let expected: Vec<serde_json::Value> = bids_of(&config)
        .into_iter()
        .filter_map(|b| {
            let fixed = ["apple", "google", "facebook", "baidu"]
                .iter()
                .position(|c| b.channel.eq_ignore_ascii_case(c))
                .map(|i| i.to_string());
            // The URL's query parameters, `&`-separated; the first named channel_id.
            let from_url = b.url.split('?').nth(1).and_then(|query| {
                query
                    .split('&')
                    .find_map(|kv| kv.strip_prefix("channel_id="))
                    .map(str::to_string)
            });
            let id = fixed.or(from_url)?;
            Some(serde_json::json!({"auction": b.auction, "bidder": b.bidder, "price": b.price, "channel": b.channel, "channel_id": id}))
        })
        .collect();
    let all = bids_of(&config).len();
    assert!(expected.len() < all, "some bids have no channel id");
    check_append(&config, queries::q21, &expected);
}

#[test]
fn q22_splits_urls_into_directories() {
    let config = slow();
    let expected: Vec<serde_json::Value> = bids_of(&config)
        .into_iter()
        .map(|b| {
            let parts: Vec<&str> = b.url.split('/').collect();
            let dir = |i: usize| parts.get(i).map(|s| s.to_string());
            serde_json::json!({"auction": b.auction, "bidder": b.bidder, "price": b.price, "channel": b.channel,
                "dir1": dir(3), "dir2": dir(4), "dir3": dir(5)})
        })
        .collect();
    check_append(&config, queries::q22, &expected);
}

#[test]
fn q5_finds_the_hottest_auctions_of_each_sliding_window() {
    // 100 events per second (40 s of event time), out of order by up to 2 s.
    let config = config(4_000, 100.0, 200);
    let mut counts: HashMap<(Timestamp, i64), u64> = HashMap::new();
    for b in bids_of(&config) {
        let mut start = b.date_time - b.date_time.rem_euclid(2_000);
        while start > b.date_time - 10_000 {
            *counts.entry((start, b.auction)).or_default() += 1;
            start -= 2_000;
        }
    }
    let mut max: HashMap<Timestamp, u64> = HashMap::new();
    for ((start, _), n) in &counts {
        let m = max.entry(*start).or_default();
        *m = (*m).max(*n);
    }
    let expected: Vec<Q5Row> = counts
        .iter()
        .filter(|((start, _), n)| **n == max[start])
        .map(|((start, auction), n)| Q5Row {
            auction: *auction,
            num: *n,
            starttime: *start,
            endtime: start + 10_000,
        })
        .collect();
    assert!(max.len() > 20, "many windows");
    check_append(&config, queries::q5, &expected);
    let rocks = sorted_json(&run(&config, 2, Backend::RocksDb, queries::q5));
    assert_same(&rocks, &sorted_json(&expected), "RocksDB");
}

fn sessions(bids: &[Bid], gap: Timestamp) -> Vec<BidderCount> {
    let mut by_bidder: BTreeMap<i64, Vec<Timestamp>> = BTreeMap::new();
    for b in bids {
        by_bidder.entry(b.bidder).or_default().push(b.date_time);
    }
    let mut out = Vec::new();
    for (bidder, mut times) in by_bidder {
        times.sort();
        let (mut start, mut end, mut count) = (times[0], times[0] + gap, 0);
        for t in times {
            if t > end {
                out.push(BidderCount {
                    bidder,
                    bid_count: count,
                    starttime: start,
                    endtime: end,
                });
                (start, count) = (t, 0);
            }
            end = end.max(t + gap);
            count += 1;
        }
        out.push(BidderCount {
            bidder,
            bid_count: count,
            starttime: start,
            endtime: end,
        });
    }
    out
}

#[test]
fn q11_counts_bids_per_user_session() {
    // 20 events per second: 200 s of event time, sessions of 10 s gap come and go.
    let config = config(4_000, 20.0, 40);
    let expected = sessions(&bids_of(&config), 10_000);
    let bidders: BTreeSet<i64> = expected.iter().map(|s| s.bidder).collect();
    assert!(
        expected.len() > bidders.len(),
        "bidders have several sessions"
    );
    check_append(&config, queries::q11, &expected);
    let rocks = sorted_json(&run(&config, 2, Backend::RocksDb, queries::q11));
    assert_same(&rocks, &sorted_json(&expected), "RocksDB");
}

#[test]
fn q12_counts_bids_per_bidder_in_processing_time_windows() {
    // Processing time is the job's clock: frozen, every bid falls into the one window holding
    // that instant, and the bounded input's end fires it. The answer is then deterministic.
    let config = slow();
    let now = 1_800_000_004_321;
    let mut per_bidder: BTreeMap<i64, u64> = BTreeMap::new();
    for b in bids_of(&config) {
        *per_bidder.entry(b.bidder).or_default() += 1;
    }
    let expected: Vec<BidderCount> = per_bidder
        .into_iter()
        .map(|(bidder, n)| BidderCount {
            bidder,
            bid_count: n,
            starttime: 1_800_000_000_000,
            endtime: 1_800_000_010_000,
        })
        .collect();
    for p in [1, 2] {
        let got = run_with(
            &config,
            p,
            Backend::Heap,
            |c| c.clock = Arc::new(ManualClock::new(now)),
            queries::q12,
        );
        assert_same(
            &sorted_json(&got),
            &sorted_json(&expected),
            &format!("p = {p}"),
        );
    }
    // On the wall clock, the windows vary with timing but the counts add up per bidder.
    let got = run(&config, 2, Backend::Heap, queries::q12);
    let mut sums: BTreeMap<i64, u64> = BTreeMap::new();
    for row in &got {
        assert_eq!(row.endtime - row.starttime, 10_000);
        assert_eq!(row.starttime % 10_000, 0);
        *sums.entry(row.bidder).or_default() += row.bid_count;
    }
    let want: BTreeMap<i64, u64> = expected.iter().map(|r| (r.bidder, r.bid_count)).collect();
    assert_eq!(sums, want);
}

/// Applies a changelog: the first row of a key must be `+I`, later ones `+U`.
fn apply<R, K: Ord + std::fmt::Debug>(
    changes: Vec<Change<R>>,
    key: impl Fn(&R) -> K,
) -> BTreeMap<K, R> {
    let mut table = BTreeMap::new();
    for change in changes {
        let k = key(&change.row);
        let first = !table.contains_key(&k);
        assert_eq!(change.op == Op::Insert, first, "op of {k:?}");
        table.insert(k, change.row);
    }
    table
}

/// Checks a changelog query at p = 1 and 2 on heap, and p = 2 on RocksDB.
fn check_changelog<R, K>(
    config: &NexmarkConfig,
    query: impl Fn(&DataStream<Event>) -> DataStream<Change<R>> + Copy,
    key: impl Fn(&R) -> K + Copy,
    expected: &BTreeMap<K, R>,
) where
    R: riffle::Data + PartialEq + std::fmt::Debug,
    K: Ord + std::fmt::Debug,
{
    assert!(!expected.is_empty());
    for (p, backend) in [
        (1, Backend::Heap),
        (2, Backend::Heap),
        (2, Backend::RocksDb),
    ] {
        let got = apply(run(config, p, backend, query), key);
        assert_eq!(got.len(), expected.len(), "keys at p = {p}, {backend:?}");
        assert!(got == *expected, "rows at p = {p}, {backend:?}");
    }
}

#[derive(Default)]
struct Stats {
    bids: [i64; 4],
    bidders: [BTreeSet<i64>; 4],
    auctions: [BTreeSet<i64>; 4],
    minute: String,
}

fn stats_by<K: Ord>(bids: &[Bid], key: impl Fn(&Bid) -> K) -> BTreeMap<K, Stats> {
    let mut groups: BTreeMap<K, Stats> = BTreeMap::new();
    for b in bids {
        let s = groups.entry(key(b)).or_default();
        for i in [0, rank(b.price)] {
            s.bids[i] += 1;
            s.bidders[i].insert(b.bidder);
            s.auctions[i].insert(b.auction);
        }
        let in_day = b.date_time.rem_euclid(86_400_000);
        let minute = format!("{:02}:{:02}", in_day / 3_600_000, in_day / 60_000 % 60);
        if minute > s.minute {
            s.minute = minute;
        }
    }
    groups
}

#[test]
fn q15_reports_bids_bidders_and_auctions_per_day() {
    let config = slow();
    let expected: BTreeMap<String, Q15Row> = stats_by(&bids_of(&config), |b| utc_date(b.date_time))
        .into_iter()
        .map(|(day, s)| {
            let row = Q15Row {
                day: day.clone(),
                total_bids: s.bids[0],
                rank1_bids: s.bids[1],
                rank2_bids: s.bids[2],
                rank3_bids: s.bids[3],
                total_bidders: s.bidders[0].len() as i64,
                rank1_bidders: s.bidders[1].len() as i64,
                rank2_bidders: s.bidders[2].len() as i64,
                rank3_bidders: s.bidders[3].len() as i64,
                total_auctions: s.auctions[0].len() as i64,
                rank1_auctions: s.auctions[1].len() as i64,
                rank2_auctions: s.auctions[2].len() as i64,
                rank3_auctions: s.auctions[3].len() as i64,
            };
            (day, row)
        })
        .collect();
    assert_eq!(expected.len(), 2, "two days");
    check_changelog(&config, queries::q15, |r| r.day.clone(), &expected);
}

#[test]
fn q16_reports_per_channel_and_day() {
    let config = slow();
    let expected: BTreeMap<(String, String), Q16Row> = stats_by(&bids_of(&config), |b| {
        (b.channel.clone(), utc_date(b.date_time))
    })
    .into_iter()
    .map(|((channel, day), s)| {
        let row = Q16Row {
            channel: channel.clone(),
            day: day.clone(),
            minute: s.minute.clone(),
            total_bids: s.bids[0],
            rank1_bids: s.bids[1],
            rank2_bids: s.bids[2],
            rank3_bids: s.bids[3],
            total_bidders: s.bidders[0].len() as i64,
            rank1_bidders: s.bidders[1].len() as i64,
            rank2_bidders: s.bidders[2].len() as i64,
            rank3_bidders: s.bidders[3].len() as i64,
            total_auctions: s.auctions[0].len() as i64,
            rank1_auctions: s.auctions[1].len() as i64,
            rank2_auctions: s.auctions[2].len() as i64,
            rank3_auctions: s.auctions[3].len() as i64,
        };
        ((channel, day), row)
    })
    .collect();
    check_changelog(
        &config,
        queries::q16,
        |r| (r.channel.clone(), r.day.clone()),
        &expected,
    );
}

#[test]
fn q17_reports_per_auction_and_day() {
    let config = slow();
    let mut groups: BTreeMap<(i64, String), Vec<i64>> = BTreeMap::new();
    for b in bids_of(&config) {
        groups
            .entry((b.auction, utc_date(b.date_time)))
            .or_default()
            .push(b.price);
    }
    let expected: BTreeMap<(i64, String), Q17Row> = groups
        .into_iter()
        .map(|((auction, day), prices)| {
            let n = prices.len() as i64;
            let sum: i64 = prices.iter().sum();
            let in_rank = |r| prices.iter().filter(|p| rank(**p) == r).count() as i64;
            let row = Q17Row {
                auction,
                day: day.clone(),
                total_bids: n,
                rank1_bids: in_rank(1),
                rank2_bids: in_rank(2),
                rank3_bids: in_rank(3),
                min_price: *prices.iter().min().unwrap(),
                max_price: *prices.iter().max().unwrap(),
                avg_price: sum / n,
                sum_price: sum,
            };
            ((auction, day), row)
        })
        .collect();
    check_changelog(
        &config,
        queries::q17,
        |r| (r.auction, r.day.clone()),
        &expected,
    );
}

#[test]
fn q18_keeps_the_last_bid_per_bidder_and_auction() {
    // Fast events: many bids of a hot bidder on a hot auction share a millisecond.
    let config = config(20_000, 1_000_000.0, 100);
    let mut last: BTreeMap<(i64, i64), Bid> = BTreeMap::new();
    for b in bids_of(&config) {
        let entry = last
            .entry((b.bidder, b.auction))
            .or_insert_with(|| b.clone());
        // Latest first; ties by the other columns, ascending.
        let order = |x: &Bid| {
            (
                Reverse(x.date_time),
                x.price,
                x.channel.clone(),
                x.url.clone(),
                x.extra.clone(),
            )
        };
        if order(&b) < order(entry) {
            *entry = b;
        }
    }
    check_changelog(&config, queries::q18, |b| (b.bidder, b.auction), &last);
}

#[test]
fn q19_keeps_the_ten_highest_bids_per_auction() {
    let config = config(20_000, 1_000.0, 100);
    let mut by_auction: BTreeMap<i64, Vec<Bid>> = BTreeMap::new();
    for b in bids_of(&config) {
        by_auction.entry(b.auction).or_default().push(b);
    }
    let mut expected = BTreeMap::new();
    for (auction, mut bids) in by_auction {
        bids.sort_by_key(|b| {
            (
                Reverse(b.price),
                b.bidder,
                b.channel.clone(),
                b.url.clone(),
                b.date_time,
                b.extra.clone(),
            )
        });
        for (i, bid) in bids.into_iter().take(10).enumerate() {
            let rank_number = i as u32 + 1;
            expected.insert((auction, rank_number), queries::Q19Row { bid, rank_number });
        }
    }
    assert!(
        expected.values().any(|r| r.rank_number == 10),
        "some auctions fill their top 10"
    );
    check_changelog(
        &config,
        queries::q19,
        |r| (r.bid.auction, r.rank_number),
        &expected,
    );
}

#[test]
fn q17_recovers_exactly_after_a_failure_from_the_sources_positions() {
    use riffle::checkpoint::CheckpointConfig;
    use riffle::sink::ExactlyOnceFileSink;
    use std::time::Duration;

    // 20 000 events paced over ~2 s, checkpoints every 100 ms, a task failure after 12 000
    // events: the job restores its state and rewinds every split to its stored event number.
    let mut config = config(20_000, 0.05, 100);
    config.rate = Some(10_000.0);
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::with_config(EnvConfig {
        parallelism: 2,
        local_state_dir: dir.path().join("state"),
        checkpoints: CheckpointConfig {
            interval: Some(Duration::from_millis(100)),
            storage: dir.path().join("chk").display().to_string(),
            ..CheckpointConfig::default()
        },
        ..EnvConfig::default()
    });
    let events = NexmarkSource::new(config.clone())
        .stream(&env)
        .map(riffle_testing::fail_once_after(12_000));
    queries::q17(&events).sink(ExactlyOnceFileSink::new(dir.path().join("out")));
    let result = env.execute().unwrap();
    assert_eq!(result.restarts, 1);
    assert!(result.completed_checkpoints() > 0);

    let mut rows: Vec<Change<Q17Row>> = Vec::new();
    for entry in std::fs::read_dir(dir.path().join("out")).unwrap().flatten() {
        if entry.path().is_file() {
            for line in std::fs::read_to_string(entry.path()).unwrap().lines() {
                rows.push(serde_json::from_str(line).unwrap());
            }
        }
    }
    let bids = bids_of(&config);
    assert_eq!(
        rows.len(),
        bids.len(),
        "one row per bid: none lost, none twice"
    );
    let mut last: BTreeMap<(i64, String), Q17Row> = BTreeMap::new();
    let mut inserts = 0;
    for change in rows {
        inserts += usize::from(change.op == Op::Insert);
        let key = (change.row.auction, change.row.day.clone());
        match last.get(&key) {
            Some(seen) if seen.total_bids >= change.row.total_bids => {}
            _ => {
                last.insert(key, change.row);
            }
        }
    }
    assert_eq!(inserts, last.len(), "one +I per key");
    let mut want: BTreeMap<(i64, String), (i64, i64, i64)> = BTreeMap::new();
    for b in &bids {
        let e = want
            .entry((b.auction, utc_date(b.date_time)))
            .or_insert((0, 0, i64::MIN));
        e.0 += 1;
        e.1 += b.price;
        e.2 = e.2.max(b.price);
    }
    let got: BTreeMap<(i64, String), (i64, i64, i64)> = last
        .into_iter()
        .map(|(k, r)| (k, (r.total_bids, r.sum_price, r.max_price)))
        .collect();
    assert!(got == want, "final rows equal the batch result");
}

// ---------------------------------------------------------------------------------------------
// Joins

fn persons_of(config: &NexmarkConfig) -> Vec<Person> {
    config
        .generate_all()
        .into_iter()
        .filter_map(|e| match e {
            Event::Person(p) => Some(p),
            _ => None,
        })
        .collect()
}

fn auctions_of(config: &NexmarkConfig) -> Vec<Auction> {
    config
        .generate_all()
        .into_iter()
        .filter_map(|e| match e {
            Event::Auction(a) => Some(a),
            _ => None,
        })
        .collect()
}

/// Checks an append-only query at p = 1 and p = 2 on heap state, and p = 2 on RocksDB.
fn check_append_keyed<T: riffle::Data, E: Serialize>(
    config: &NexmarkConfig,
    query: impl Fn(&DataStream<Event>) -> DataStream<T> + Copy,
    expected: &[E],
) {
    check_append(config, query, expected);
    let rocks = sorted_json(&run(config, 2, Backend::RocksDb, query));
    assert_same(&rocks, &sorted_json(expected), "RocksDB");
}

/// 20 000 events, 1 000 per second (20 s of event time), shuffled in groups of 100: auctions
/// live up to ~3 s, so most close before the end of input and the rest at it.
fn joins() -> NexmarkConfig {
    config(20_000, 1_000.0, 100)
}

#[test]
fn q3_joins_local_sellers_with_their_category_10_auctions() {
    let config = joins();
    let people: HashMap<i64, Person> = persons_of(&config)
        .into_iter()
        // `P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA'`: exact, case-sensitive.
        .filter(|p| ["OR", "ID", "CA"].contains(&p.state.as_str()))
        .map(|p| (p.id, p))
        .collect();
    let expected: Vec<serde_json::Value> = auctions_of(&config)
        .into_iter()
        .filter(|a| a.category == 10)
        .filter_map(|a| {
            let p = people.get(&a.seller)?;
            Some(serde_json::json!({"name": p.name, "city": p.city, "state": p.state, "id": a.id}))
        })
        .collect();
    assert!(expected.len() > 10, "{} rows", expected.len());
    check_append_keyed(&config, queries::q3, &expected);
}

#[test]
fn q3_compares_states_case_sensitively_as_sql_does() {
    // One seller per spelling, each with one category-10 auction (and one of category 11):
    // only the exact `OR`, `ID` and `CA` are the SQL's states.
    let states = ["OR", "or", "Or", "ID", "id", "CA", "ca", "cA", "WA", "AZ"];
    let mut events = Vec::new();
    for (i, state) in states.iter().enumerate() {
        let id = 1_000 + i as i64;
        events.push(Event::Person(Person {
            id,
            name: format!("seller {i}"),
            email_address: String::new(),
            credit_card: String::new(),
            city: "Boise".into(),
            state: state.to_string(),
            date_time: 1_000,
            extra: String::new(),
        }));
        for (auction, category) in [(2 * id, 10), (2 * id + 1, 11)] {
            events.push(Event::Auction(Auction {
                id: auction,
                item_name: String::new(),
                description: String::new(),
                initial_bid: 1,
                reserve: 1,
                date_time: 2_000,
                expires: 3_000,
                seller: id,
                category,
                extra: String::new(),
            }));
        }
    }
    for p in [1, 2] {
        let env = StreamEnv::with_config(EnvConfig {
            parallelism: p,
            ..EnvConfig::default()
        });
        let (sink, out) = CollectSink::new();
        let stream = env.from_iter_with_watermarks(
            events.clone(),
            riffle::time::WatermarkStrategy::monotonous().with_timestamps(Event::date_time),
        );
        queries::q3(&stream).sink(sink);
        env.execute().unwrap();
        let mut got: Vec<(String, i64)> = out
            .values()
            .iter()
            .map(|r| (r.state.clone(), r.id))
            .collect();
        got.sort();
        let want = vec![
            ("CA".to_string(), 2_010),
            ("ID".to_string(), 2_006),
            ("OR".to_string(), 2_000),
        ];
        assert_eq!(got, want, "p = {p}");
    }
}

#[test]
fn q20_expands_category_10_bids_with_their_auction() {
    let config = joins();
    let by_id: HashMap<i64, Auction> = auctions_of(&config)
        .into_iter()
        .map(|a| (a.id, a))
        .collect();
    let expected: Vec<serde_json::Value> = bids_of(&config)
        .into_iter()
        .filter_map(|b| {
            let a = by_id.get(&b.auction).filter(|a| a.category == 10)?;
            Some(serde_json::json!({
                "auction": b.auction, "bidder": b.bidder, "price": b.price, "channel": b.channel,
                "url": b.url, "bid_dateTime": b.date_time, "bid_extra": b.extra,
                "itemName": a.item_name, "description": a.description, "initialBid": a.initial_bid,
                "reserve": a.reserve, "auction_dateTime": a.date_time, "expires": a.expires,
                "seller": a.seller, "category": a.category, "auction_extra": a.extra}))
        })
        .collect();
    assert!(expected.len() > 100, "{} rows", expected.len());
    check_append_keyed(&config, queries::q20, &expected);
}

/// Each auction with its winning bid, by a plain scan: the bids of its lifetime sorted by price
/// descending, then time, bidder, channel, url, extra.
fn winners(config: &NexmarkConfig) -> Vec<(Auction, Bid)> {
    let bids = bids_of(config);
    auctions_of(config)
        .into_iter()
        .filter_map(|a| {
            let mut mine: Vec<&Bid> = bids
                .iter()
                .filter(|b| {
                    b.auction == a.id && b.date_time >= a.date_time && b.date_time <= a.expires
                })
                .collect();
            mine.sort_by_key(|b| {
                (
                    Reverse(b.price),
                    b.date_time,
                    b.bidder,
                    b.channel.clone(),
                    b.url.clone(),
                    b.extra.clone(),
                )
            });
            let best = (*mine.first()?).clone();
            Some((a, best))
        })
        .collect()
}

#[test]
fn q9_finds_the_winning_bid_of_each_auction() {
    let config = joins();
    let won = winners(&config);
    let end = config
        .generate_all()
        .iter()
        .map(Event::date_time)
        .max()
        .unwrap();
    assert!(
        won.iter().filter(|(a, _)| a.expires < end - 5_000).count() > 100,
        "many auctions close before the end of input"
    );
    let expected: Vec<serde_json::Value> = won
        .into_iter()
        .map(|(a, b)| {
            serde_json::json!({
                "id": a.id, "itemName": a.item_name, "description": a.description,
                "initialBid": a.initial_bid, "reserve": a.reserve, "dateTime": a.date_time,
                "expires": a.expires, "seller": a.seller, "category": a.category, "extra": a.extra,
                "auction": b.auction, "bidder": b.bidder, "price": b.price,
                "bid_dateTime": b.date_time, "bid_extra": b.extra})
        })
        .collect();
    check_append_keyed(&config, queries::q9, &expected);
}

#[test]
fn q4_averages_the_winning_prices_per_category() {
    let config = joins();
    let mut per_category: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for (a, b) in winners(&config) {
        per_category.entry(a.category).or_default().push(b.price);
    }
    let expected: BTreeMap<i64, Q4Row> = per_category
        .into_iter()
        .map(|(category, prices)| {
            let avg = prices.iter().sum::<i64>() / prices.len() as i64;
            (
                category,
                Q4Row {
                    id: category,
                    final_price: avg,
                },
            )
        })
        .collect();
    assert!(expected.len() >= 3);
    check_changelog(&config, queries::q4, |r| r.id, &expected);
}

#[test]
fn q6_averages_each_sellers_latest_closed_auctions() {
    let config = joins();
    let mut per_seller: BTreeMap<i64, Vec<(Timestamp, i64, i64)>> = BTreeMap::new();
    for (a, b) in winners(&config) {
        per_seller
            .entry(a.seller)
            .or_default()
            .push((a.expires, a.id, b.price));
    }
    let mut expected = Vec::new();
    let mut long = 0;
    for (seller, mut closed) in per_seller {
        closed.sort();
        long += usize::from(closed.len() > 11);
        for i in 0..closed.len() {
            let window = &closed[i.saturating_sub(10)..=i];
            let avg = window.iter().map(|c| c.2).sum::<i64>() / window.len() as i64;
            expected.push(serde_json::json!({"seller": seller, "avg_price": avg}));
        }
    }
    assert!(long > 0, "some sellers close more than 11 auctions");
    check_append_keyed(&config, queries::q6, &expected);
}

#[test]
fn q7_finds_the_highest_bids_of_each_window() {
    // 100 events per second: 200 s of event time, 20 windows. Then one event every 400 ms: event
    // n falls on a window's end when n is a multiple of 25, and the odd multiples are bids (the
    // 50-event cycle opens with a person), which the SQL's inclusive range also compares.
    for config in [config(20_000, 100.0, 40), config(4_000, 2.5, 8)] {
        let bids = bids_of(&config);
        let mut max: BTreeMap<Timestamp, i64> = BTreeMap::new();
        for b in &bids {
            let end = (b.date_time / 10_000 + 1) * 10_000;
            let m = max.entry(end).or_insert(i64::MIN);
            *m = (*m).max(b.price);
        }
        // The SQL's join: every bid with a window's max price within [end - 10 s, end].
        let expected: Vec<serde_json::Value> = bids
            .iter()
            .filter(|b| {
                max.iter().any(|(end, price)| {
                    b.price == *price && b.date_time >= end - 10_000 && b.date_time <= *end
                })
            })
            .map(|b| {
                serde_json::json!({"auction": b.auction, "bidder": b.bidder, "price": b.price, "dateTime": b.date_time, "extra": b.extra})
            })
            .collect();
        assert!(max.len() >= 20, "{} windows", max.len());
        check_append_keyed(&config, queries::q7, &expected);
    }
    let edge = bids_of(&config(4_000, 2.5, 8))
        .iter()
        .filter(|b| b.date_time % 10_000 == 0)
        .count();
    assert!(edge > 10, "{edge} bids fall on a window's end");
}

#[test]
fn q8_finds_new_persons_selling_in_the_same_window() {
    let config = config(20_000, 100.0, 40);
    let mut sellers: BTreeSet<(i64, Timestamp)> = BTreeSet::new();
    for a in auctions_of(&config) {
        sellers.insert((a.seller, a.date_time.div_euclid(10_000) * 10_000));
    }
    let expected: Vec<serde_json::Value> = persons_of(&config)
        .into_iter()
        .filter_map(|p| {
            let start = p.date_time.div_euclid(10_000) * 10_000;
            sellers
                .contains(&(p.id, start))
                .then(|| serde_json::json!({"id": p.id, "name": p.name, "stime": start}))
        })
        .collect();
    assert!(expected.len() > 10, "{} rows", expected.len());
    check_append_keyed(&config, queries::q8, &expected);
}

#[test]
fn q13_joins_bids_with_the_side_table() {
    let config = slow();
    let expected: Vec<serde_json::Value> = bids_of(&config)
        .into_iter()
        .map(|b| {
            serde_json::json!({"auction": b.auction, "bidder": b.bidder, "price": b.price,
                "dateTime": b.date_time, "value": format!("value-{}", b.auction % 10_000)})
        })
        .collect();
    check_append(&config, queries::q13, &expected);
}

#[test]
fn q7_compares_a_bid_at_a_windows_end_with_that_windows_maximum() {
    // `B.dateTime BETWEEN window_end - 10 s AND window_end` is inclusive: the bid at 10 000
    // (in the second window) also matches the first window's maximum of 5.
    let bid = |date_time: Timestamp, price: i64| {
        Event::Bid(Bid {
            auction: 1_000,
            bidder: 1_001,
            price,
            channel: "Google".into(),
            url: "https://x".into(),
            date_time,
            extra: String::new(),
        })
    };
    let events = vec![
        bid(2_000, 3),
        bid(9_999, 5),
        bid(10_000, 5),
        bid(10_001, 7),
        bid(15_000, 6),
    ];
    for p in [1, 2] {
        let env = StreamEnv::with_config(EnvConfig {
            parallelism: p,
            ..EnvConfig::default()
        });
        let (sink, out) = CollectSink::new();
        let stream = env.from_iter_with_watermarks(
            events.clone(),
            riffle::time::WatermarkStrategy::monotonous().with_timestamps(Event::date_time),
        );
        queries::q7(&stream).sink(sink);
        env.execute().unwrap();
        let mut got: Vec<(Timestamp, i64)> = out
            .values()
            .iter()
            .map(|r| (r.date_time, r.price))
            .collect();
        got.sort();
        assert_eq!(got, vec![(9_999, 5), (10_000, 5), (10_001, 7)], "p = {p}");
    }
}

#[test]
fn q9_recovers_exactly_after_a_failure_with_open_auctions_and_their_timers() {
    use riffle::checkpoint::CheckpointConfig;
    use riffle::sink::ExactlyOnceFileSink;
    use std::time::Duration;

    // 20 000 events paced over ~2 s, checkpoints every 100 ms, a task failure after 12 000
    // events: open auctions, their best bids, waiting bids and timers come back from the
    // checkpoint; each auction's row is written exactly once.
    let mut config = joins();
    config.rate = Some(10_000.0);
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::with_config(EnvConfig {
        parallelism: 2,
        local_state_dir: dir.path().join("state"),
        checkpoints: CheckpointConfig {
            interval: Some(Duration::from_millis(100)),
            storage: dir.path().join("chk").display().to_string(),
            ..CheckpointConfig::default()
        },
        ..EnvConfig::default()
    });
    let events = NexmarkSource::new(config.clone())
        .stream(&env)
        .map(riffle_testing::fail_once_after(12_000));
    queries::q9(&events).sink(ExactlyOnceFileSink::new(dir.path().join("out")));
    let result = env.execute().unwrap();
    assert_eq!(result.restarts, 1);
    assert!(result.completed_checkpoints() > 0);

    let mut got: Vec<(i64, i64, i64, Timestamp)> = Vec::new();
    for entry in std::fs::read_dir(dir.path().join("out")).unwrap().flatten() {
        if entry.path().is_file() {
            for line in std::fs::read_to_string(entry.path()).unwrap().lines() {
                let row: queries::Q9Row = serde_json::from_str(line).unwrap();
                got.push((row.id, row.bidder, row.price, row.bid_date_time));
            }
        }
    }
    got.sort();
    let mut want: Vec<(i64, i64, i64, Timestamp)> = winners(&config)
        .into_iter()
        .map(|(a, b)| (a.id, b.bidder, b.price, b.date_time))
        .collect();
    want.sort();
    assert_eq!(
        got.len(),
        want.len(),
        "one row per auction: none lost, none twice"
    );
    assert!(got == want, "rows equal the batch result");
}

#[test]
fn winning_bids_count_bids_that_come_before_their_auction_within_its_lifetime() {
    // Arrival order: bids of auction 1 before it (one within its lifetime, one before it
    // starts), then the auction and later bids (one lower, one after it expires); auction 2's
    // two bids of the same price (the earlier wins); a bid of auction 3, which never comes;
    // three bids of auction 4 at one time before it (of which only the best waits).
    let bid = |auction: i64, price: i64, date_time: Timestamp| {
        Event::Bid(Bid {
            auction,
            bidder: 2_000 + price,
            price,
            channel: "Google".into(),
            url: "https://x".into(),
            date_time,
            extra: String::new(),
        })
    };
    let auction = |id: i64, date_time: Timestamp, expires: Timestamp, category: i64| {
        Event::Auction(Auction {
            id,
            item_name: format!("item-{id}"),
            description: String::new(),
            initial_bid: 1,
            reserve: 1,
            date_time,
            expires,
            seller: 1_000,
            category,
            extra: String::new(),
        })
    };
    let events = vec![
        bid(1, 70, 1_000),
        bid(1, 80, 800),
        bid(3, 99, 1_500),
        bid(4, 30, 1_200),
        bid(4, 40, 1_200),
        bid(4, 35, 1_200),
        auction(1, 900, 5_000, 10),
        auction(4, 1_000, 4_000, 10),
        bid(1, 60, 2_000),
        bid(1, 90, 6_000),
        auction(2, 1_000, 3_000, 11),
        bid(2, 5, 2_500),
        bid(2, 5, 2_400),
    ];
    for p in [1, 2] {
        for backend in [Backend::Heap, Backend::RocksDb] {
            let state_dir = tempfile::tempdir().unwrap();
            let state_backend: Arc<dyn StateBackend> = match backend {
                Backend::Heap => Arc::new(riffle::state::HeapBackend),
                Backend::RocksDb => Arc::new(riffle_rocksdb::RocksDbBackend::new()),
            };
            let env = StreamEnv::with_config(EnvConfig {
                parallelism: p,
                state_backend,
                local_state_dir: state_dir.path().to_path_buf(),
                ..EnvConfig::default()
            });
            let stream = env.from_iter_with_watermarks(
                events.clone(),
                riffle::time::WatermarkStrategy::bounded_out_of_orderness(
                    std::time::Duration::from_secs(10),
                )
                .with_timestamps(Event::date_time),
            );
            let (q9_sink, q9_out) = CollectSink::new();
            queries::q9(&stream).sink(q9_sink);
            let (q4_sink, q4_out) = CollectSink::new();
            queries::q4(&stream).sink(q4_sink);
            env.execute().unwrap();
            let mut q9: Vec<(i64, i64, Timestamp)> = q9_out
                .values()
                .iter()
                .map(|r| (r.id, r.price, r.bid_date_time))
                .collect();
            q9.sort();
            assert_eq!(
                q9,
                vec![(1, 70, 1_000), (2, 5, 2_400), (4, 40, 1_200)],
                "q9, p = {p}, {backend:?}"
            );
            let q4 = apply(q4_out.values(), |r: &Q4Row| r.id);
            let want: BTreeMap<i64, Q4Row> = [(10, 55), (11, 5)]
                .into_iter()
                .map(|(id, final_price)| (id, Q4Row { id, final_price }))
                .collect();
            assert_eq!(q4, want, "q4, p = {p}, {backend:?}");
        }
    }
}

/// The committed rows of a partitioned output: partition directory -> sorted lines. Fails on
/// a file left in progress or a file outside a `dt=../hm=..` directory.
fn partitioned_rows(dir: &std::path::Path) -> BTreeMap<String, Vec<String>> {
    let mut rows: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for dt in std::fs::read_dir(dir).unwrap().flatten() {
        let dt_name = dt.file_name().to_string_lossy().into_owned();
        assert!(dt.path().is_dir(), "only partitions at the top: {dt_name}");
        for hm in std::fs::read_dir(dt.path()).unwrap().flatten() {
            let hm_name = hm.file_name().to_string_lossy().into_owned();
            assert!(
                hm.path().is_dir(),
                "only minute partitions in {dt_name}: {hm_name}"
            );
            for file in std::fs::read_dir(hm.path()).unwrap().flatten() {
                let name = file.file_name().to_string_lossy().into_owned();
                if name == ".in-progress" {
                    let left: Vec<_> = std::fs::read_dir(file.path()).unwrap().collect();
                    assert!(
                        left.is_empty(),
                        "files left in progress in {dt_name}/{hm_name}"
                    );
                    continue;
                }
                assert!(
                    name.starts_with("part-") && name.ends_with(".csv"),
                    "{name}"
                );
                let text = std::fs::read_to_string(file.path()).unwrap();
                rows.entry(format!("{dt_name}/{hm_name}"))
                    .or_default()
                    .extend(text.lines().map(str::to_string));
            }
        }
    }
    for lines in rows.values_mut() {
        lines.sort();
    }
    rows
}

/// q10's expected files, computed here: per `dt=<date>/hm=<HH%3Amm>` (Flink escapes `:` in
/// partition paths) the bids' CSV lines as Flink's CSV format writes them,
/// `auction,bidder,price,"yyyy-MM-dd HH:mm:ss[.f]","extra"`: the timestamp's fraction as short as
/// possible (none when zero), string columns quoted (the timestamp holds a space; a bid's
/// `extra` is longer than the 24 characters Jackson checks).
fn q10_expected(config: &NexmarkConfig) -> BTreeMap<String, Vec<String>> {
    let mut rows: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut fractions = BTreeSet::new();
    for b in bids_of(config) {
        let date = utc_date(b.date_time);
        let minute = b.date_time.rem_euclid(3_600_000) / 60_000;
        let second = b.date_time.rem_euclid(60_000) / 1_000;
        let ms = b.date_time.rem_euclid(1_000);
        let hour = utc_hour(b.date_time);
        let fraction = match ms {
            0 => String::new(),
            _ if ms % 100 == 0 => format!(".{}", ms / 100),
            _ if ms % 10 == 0 => format!(".{:02}", ms / 10),
            _ => format!(".{ms:03}"),
        };
        fractions.insert(fraction.len());
        assert!(
            b.extra.len() > 24,
            "an extra of {} characters",
            b.extra.len()
        );
        assert!(
            b.extra.chars().all(|c| c.is_ascii_lowercase()),
            "no quote to double"
        );
        rows.entry(format!("dt={date}/hm={hour:02}%3A{minute:02}"))
            .or_default()
            .push(format!(
                "{},{},{},\"{date} {hour:02}:{minute:02}:{second:02}{fraction}\",\"{}\"",
                b.auction, b.bidder, b.price, b.extra
            ));
    }
    assert_eq!(
        fractions.into_iter().collect::<Vec<_>>(),
        [0, 2, 3, 4],
        "times with no fraction, .x, .xy and .xyz"
    );
    for lines in rows.values_mut() {
        lines.sort();
    }
    rows
}

/// 4 000 events, one every 20.04 s of event time (22 hours, two days), shuffled in groups of
/// 100: the times' milliseconds take every form (`.4`, `.45`, `.456` and none).
fn q10_config() -> NexmarkConfig {
    config(4_000, 0.0499, 100)
}

#[test]
fn q10_writes_every_bid_into_its_date_and_minute_partition() {
    // 22 hours of event time: ~1 300 minute partitions over two days, more than the 64 files a
    // subtask keeps open, so files also roll when a partition is evicted.
    let config = q10_config();
    let expected = q10_expected(&config);
    assert!(expected.len() > 1_000, "{} partitions", expected.len());
    assert!(expected.keys().any(|k| k.starts_with("dt=2026-01-14")));
    assert!(expected.keys().any(|k| k.starts_with("dt=2026-01-15")));
    for p in [1, 2] {
        let out = tempfile::tempdir().unwrap();
        let dir = out.path().join("q10");
        let rows = run(&config, p, Backend::Heap, |events| {
            let rows = queries::q10(events);
            rows.sink(queries::q10_sink(&dir));
            rows.filter(|_| false)
        });
        assert!(rows.is_empty());
        let got = partitioned_rows(&dir);
        assert_eq!(got.len(), expected.len(), "partitions at p = {p}");
        assert!(got == expected, "rows at p = {p}");
    }
}

#[test]
fn q10_recovers_exactly_once_after_a_failure() {
    use riffle::checkpoint::CheckpointConfig;
    use std::time::Duration;

    // 4 000 events paced over ~2 s, checkpoints every 100 ms, a task failure after 2 500
    // events: the files of completed checkpoints stay, the rest is aborted and replayed.
    let mut config = q10_config();
    config.rate = Some(2_000.0);
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::with_config(EnvConfig {
        parallelism: 2,
        local_state_dir: dir.path().join("state"),
        checkpoints: CheckpointConfig {
            interval: Some(Duration::from_millis(100)),
            storage: dir.path().join("chk").display().to_string(),
            ..CheckpointConfig::default()
        },
        ..EnvConfig::default()
    });
    let events = NexmarkSource::new(config.clone())
        .stream(&env)
        .map(riffle_testing::fail_once_after(2_500));
    queries::q10(&events).sink(queries::q10_sink(dir.path().join("out")));
    let result = env.execute().unwrap();
    assert_eq!(result.restarts, 1);
    assert!(result.completed_checkpoints() > 0);
    let got = partitioned_rows(&dir.path().join("out"));
    let expected = q10_expected(&config);
    let (got_rows, want_rows) = (
        got.values().map(Vec::len).sum::<usize>(),
        expected.values().map(Vec::len).sum::<usize>(),
    );
    assert_eq!(got_rows, want_rows, "every bid once: none lost, none twice");
    assert!(got == expected, "rows equal the batch result");
}
