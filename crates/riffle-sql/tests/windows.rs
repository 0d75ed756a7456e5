//! Window aggregations in SQL (window table functions, `GROUP BY window_start, window_end,
//! ..`), checked against batch computations over the same input: the seed's clicks per user
//! per minute from JSON files, sliding windows, and Nexmark bids' sum, min, max, average and
//! distinct count per auction.

use std::collections::BTreeMap;

use riffle::StreamEnv;
use riffle::sink::CollectSink;
use riffle::source::datagen::Generator;
use riffle_clicks::{ClickGenerator, ClicksConfig};
use riffle_nexmark::{Event, NexmarkConfig};
use riffle_sql::{Row, SqlEnv, Value};

/// The demo's bot markers (`riffle_cli::clicks::is_bot`), as the test's oracle.
const BOT_MARKERS: [&str; 7] = [
    "bot",
    "spider",
    "crawl",
    "python-requests",
    "curl/",
    "wget",
    "headless",
];

fn is_bot(user_agent: &str) -> bool {
    let lower = user_agent.to_lowercase();
    BOT_MARKERS.iter().any(|m| lower.contains(m))
}

/// `count` clicks in order within 2 s, none very late, as JSON lines in `dir/clicks.jsonl`.
fn clicks_file(
    dir: &std::path::Path,
    count: u64,
) -> (std::path::PathBuf, Vec<riffle_clicks::Click>) {
    let generator = ClickGenerator::new(ClicksConfig {
        users: 300,
        late_share: 0.0,
        events_per_second: 500.0,
        ..ClicksConfig::default()
    });
    let clicks: Vec<_> = (0..count).map(|i| generator.generate(i)).collect();
    let text: String = clicks
        .iter()
        .map(|c| serde_json::to_string(c).unwrap() + "\n")
        .collect();
    let path = dir.join("clicks.jsonl");
    std::fs::write(&path, text).unwrap();
    (path, clicks)
}

fn clicks_table(path: &std::path::Path) -> String {
    format!(
        "CREATE TABLE clicks (
            user_id BIGINT,
            url VARCHAR,
            user_agent VARCHAR,
            ip VARCHAR,
            event_time TIMESTAMP(3),
            WATERMARK FOR event_time AS event_time - INTERVAL '5' SECOND
        ) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json');",
        path.display()
    )
}

const NOT_A_BOT: &str = "NOT (LOWER(user_agent) LIKE '%bot%' OR LOWER(user_agent) LIKE '%spider%'
    OR LOWER(user_agent) LIKE '%crawl%' OR LOWER(user_agent) LIKE '%python-requests%'
    OR LOWER(user_agent) LIKE '%curl/%' OR LOWER(user_agent) LIKE '%wget%'
    OR LOWER(user_agent) LIKE '%headless%')";

/// Runs `query` over `ddl`'s tables at parallelism `p`; its rows.
fn run(ddl: &str, query: &str, p: usize) -> (Vec<Row>, riffle_sql::Schema) {
    let env = StreamEnv::with_config(riffle::EnvConfig {
        parallelism: p,
        ..riffle::EnvConfig::default()
    });
    let sql = SqlEnv::new(&env);
    sql.execute_sql(ddl).unwrap();
    let (rows, schema) = sql.sql_query(query).unwrap_or_else(|e| panic!("{e}"));
    let (sink, out) = CollectSink::new();
    rows.sink(sink);
    env.execute().unwrap();
    (out.values(), schema)
}

fn int(value: &Value) -> i64 {
    match value {
        Value::Int(i) => *i,
        Value::Timestamp(t) => *t,
        other => panic!("not an integer: {other:?}"),
    }
}

#[test]
fn the_seeds_clicks_per_user_and_minute_equal_a_batch_count() {
    let dir = tempfile::tempdir().unwrap();
    let (path, clicks) = clicks_file(dir.path(), 30_000);
    let mut expected: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    for click in clicks.iter().filter(|c| !is_bot(&c.user_agent)) {
        let start = click.event_time - click.event_time.rem_euclid(60_000);
        *expected.entry((click.user_id as i64, start)).or_default() += 1;
    }
    let query = format!(
        "SELECT user_id, window_start, window_end, COUNT(*) AS clicks
         FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(event_time), INTERVAL '1' MINUTE))
         WHERE {NOT_A_BOT}
         GROUP BY user_id, window_start, window_end"
    );
    for p in [1, 2] {
        let (rows, schema) = run(&clicks_table(&path), &query, p);
        assert_eq!(
            schema.names(),
            ["user_id", "window_start", "window_end", "clicks"]
        );
        let mut seen = BTreeMap::new();
        for row in &rows {
            let (user, start, end, count) = (
                int(row.get(0)),
                int(row.get(1)),
                int(row.get(2)),
                int(row.get(3)),
            );
            assert_eq!(end - start, 60_000);
            assert!(
                seen.insert((user, start), count).is_none(),
                "twice: {row:?}"
            );
        }
        assert_eq!(seen, expected, "p = {p}");
    }
}

#[test]
fn hop_windows_count_each_click_in_every_window_that_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let (path, clicks) = clicks_file(dir.path(), 10_000);
    let mut expected: BTreeMap<i64, i64> = BTreeMap::new();
    for click in &clicks {
        let last = click.event_time - click.event_time.rem_euclid(30_000);
        // Windows of 2 min every 30 s: the 4 that start at or before it, within 2 min.
        for k in 0..4 {
            *expected.entry(last - k * 30_000).or_default() += 1;
        }
    }
    let query = "SELECT window_start, COUNT(*) AS clicks, COUNT(DISTINCT user_id) AS users
         FROM TABLE(HOP(TABLE clicks, DESCRIPTOR(event_time), INTERVAL '30' SECOND, INTERVAL '2' MINUTE))
         GROUP BY window_start, window_end";
    let (rows, _) = run(&clicks_table(&path), query, 2);
    let seen: BTreeMap<i64, i64> = rows
        .iter()
        .map(|r| (int(r.get(0)), int(r.get(1))))
        .collect();
    assert_eq!(seen, expected);
    for row in &rows {
        assert!(int(row.get(2)) <= 300 && int(row.get(2)) > 0, "{row:?}");
    }
}

/// Flink's documentation of `CUMULATE` (docs/dev/table/sql/queries/window-tvf/): its `Bid`
/// table and query, and the rows it shows.
#[test]
fn cumulate_windows_give_flinks_documented_example() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bid.jsonl");
    let bids = [
        ("08:05", "4.00", "C", "supplier1"),
        ("08:07", "2.00", "A", "supplier1"),
        ("08:09", "5.00", "D", "supplier2"),
        ("08:11", "3.00", "B", "supplier2"),
        ("08:13", "1.00", "E", "supplier1"),
        ("08:17", "6.00", "F", "supplier2"),
    ];
    let lines: String = bids
        .iter()
        .map(|(time, price, item, supplier)| {
            format!(
                "{{\"bidtime\": \"2020-04-15 {time}:00\", \"price\": {price}, \"item\": \"{item}\", \"supplier_id\": \"{supplier}\"}}\n"
            )
        })
        .collect();
    std::fs::write(&path, lines).unwrap();
    let ddl = format!(
        "CREATE TABLE Bid (bidtime TIMESTAMP(3), price DECIMAL(10, 2), item STRING, supplier_id STRING,
           WATERMARK FOR bidtime AS bidtime - INTERVAL '1' SECOND)
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json');",
        path.display()
    );
    let query = "SELECT window_start, window_end, SUM(price) AS total_price
      FROM TABLE(
        CUMULATE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '2' MINUTES, INTERVAL '10' MINUTES))
      GROUP BY window_start, window_end";
    for p in [1, 2] {
        let (rows, schema) = run(&ddl, query, p);
        assert_eq!(
            schema.names(),
            ["window_start", "window_end", "total_price"]
        );
        let minute = |m: i64| 1_586_937_600_000 + m * 60_000; // 2020-04-15 08:00 + m minutes
        let mut got: Vec<(i64, i64, String)> = rows
            .iter()
            .map(|r| match r.get(2) {
                Value::Decimal(total) => (int(r.get(0)), int(r.get(1)), total.to_string()),
                other => panic!("not a DECIMAL: {other:?}"),
            })
            .collect();
        got.sort();
        let expected: Vec<(i64, i64, String)> = [
            (0, 6, "4.00"),
            (0, 8, "6.00"),
            (0, 10, "11.00"),
            (10, 12, "3.00"),
            (10, 14, "4.00"),
            (10, 16, "4.00"),
            (10, 18, "10.00"),
            (10, 20, "10.00"),
        ]
        .iter()
        .map(|(s, e, total)| (minute(*s), minute(*e), total.to_string()))
        .collect();
        assert_eq!(got, expected, "p = {p}");
    }
    // The size must be a multiple of the step, as in Flink.
    let env = StreamEnv::new();
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&ddl).unwrap();
    let error = sql
        .sql_query(
            "SELECT window_start, COUNT(*) FROM TABLE(CUMULATE(TABLE Bid, DESCRIPTOR(bidtime), INTERVAL '3' MINUTES, INTERVAL '10' MINUTES)) GROUP BY window_start, window_end",
        )
        .err()
        .expect("refused");
    assert!(
        error
            .to_string()
            .contains("CUMULATE: the size (600000 ms) must be a multiple of the step (180000 ms)"),
        "{error}"
    );
}

/// Every click counted in each window of its day-like cycle that ends after it, against a
/// batch count, at p = 1 and 2.
#[test]
fn cumulate_windows_count_each_click_in_every_window_of_its_cycle_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let (path, clicks) = clicks_file(dir.path(), 10_000);
    let mut expected: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    for click in &clicks {
        let start = click.event_time - click.event_time.rem_euclid(120_000);
        // Windows growing by 30 s to 2 min: those that end after the click.
        for k in 1..=4 {
            if start + k * 30_000 > click.event_time {
                *expected.entry((start, start + k * 30_000)).or_default() += 1;
            }
        }
    }
    let query = "SELECT window_start, window_end, COUNT(*) AS clicks
         FROM TABLE(CUMULATE(TABLE clicks, DESCRIPTOR(event_time), INTERVAL '30' SECOND, INTERVAL '2' MINUTE))
         GROUP BY window_start, window_end";
    for p in [1, 2] {
        let (rows, _) = run(&clicks_table(&path), query, p);
        let seen: BTreeMap<(i64, i64), i64> = rows
            .iter()
            .map(|r| ((int(r.get(0)), int(r.get(1))), int(r.get(2))))
            .collect();
        assert_eq!(seen.len(), rows.len(), "a window emitted twice");
        assert_eq!(seen, expected, "p = {p}");
    }
}

/// Two subqueries with the same window aggregation over the same input (Nexmark q5's shape)
/// share one window operator, each reading its own columns of the results; one that differs
/// (another aggregate) gets its own.
#[test]
fn equal_window_aggregations_in_one_statement_are_computed_once() {
    let dir = tempfile::tempdir().unwrap();
    let (path, clicks) = clicks_file(dir.path(), 5_000);
    let mut per_user: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    for click in &clicks {
        let start = click.event_time - click.event_time.rem_euclid(60_000);
        *per_user.entry((start, click.user_id as i64)).or_default() += 1;
    }
    // Per window, the users with the most clicks (as q5's hottest auctions).
    let mut expected: Vec<(i64, i64, i64)> = Vec::new();
    let starts: std::collections::BTreeSet<i64> = per_user.keys().map(|(s, _)| *s).collect();
    for start in starts {
        let max = per_user
            .range((start, i64::MIN)..=(start, i64::MAX))
            .map(|(_, n)| *n)
            .max()
            .unwrap();
        for ((s, user), n) in per_user.range((start, i64::MIN)..=(start, i64::MAX)) {
            if *n == max {
                expected.push((*s, *user, *n));
            }
        }
    }
    let window = "TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(event_time), INTERVAL '1' MINUTE))";
    let query = |other: &str| {
        format!(
            "SELECT a.window_start, a.user_id, a.n FROM
               (SELECT window_start, user_id, COUNT(*) AS n FROM {window}
                GROUP BY user_id, window_start, window_end) AS a
             JOIN
               (SELECT window_start, MAX(n) AS top FROM
                  (SELECT window_start, {other} AS n FROM {window}
                   GROUP BY user_id, window_start, window_end)
                GROUP BY window_start) AS b
             ON a.window_start = b.window_start AND a.n >= b.top"
        )
    };
    let windows_of = |query: &str| {
        let env = StreamEnv::new();
        let sql = SqlEnv::new(&env);
        sql.execute_sql(&clicks_table(&path)).unwrap();
        let (changes, _) = sql.sql_changelog(query).unwrap_or_else(|e| panic!("{e}"));
        changes.sink_fn(|_| Ok(()));
        env.plan()
            .unwrap()
            .vertices
            .iter()
            .flat_map(|v| v.operators.clone())
            .filter(|name| name.starts_with("Window"))
            .count()
    };
    assert_eq!(windows_of(&query("COUNT(*)")), 1);
    assert_eq!(windows_of(&query("COUNT(DISTINCT url)")), 2);
    for p in [1, 2] {
        let env = StreamEnv::with_config(riffle::EnvConfig {
            parallelism: p,
            ..riffle::EnvConfig::default()
        });
        let sql = SqlEnv::new(&env);
        sql.execute_sql(&clicks_table(&path)).unwrap();
        let (changes, _) = sql
            .sql_changelog(&query("COUNT(*)"))
            .unwrap_or_else(|e| panic!("{e}"));
        let (sink, out) = CollectSink::new();
        changes.sink(sink);
        env.execute().unwrap();
        let mut table = riffle::change::RetractTable::new();
        table.apply_all(out.values()).unwrap();
        let mut got: Vec<(i64, i64, i64)> = table
            .rows()
            .iter()
            .map(|r| (int(r.get(0)), int(r.get(1)), int(r.get(2))))
            .collect();
        got.sort();
        assert_eq!(got, expected, "p = {p}");
    }
}

#[test]
fn bids_sum_min_max_avg_and_distinct_bidders_per_auction_and_ten_seconds() {
    let events = 30_000;
    let ddl = format!(
        "CREATE TABLE datagen (
            event_type INT,
            bid ROW<auction BIGINT, bidder BIGINT, price BIGINT, dateTime TIMESTAMP(3)>,
            dateTime AS CASE WHEN event_type = 2 THEN bid.dateTime ELSE TIMESTAMP '2026-01-15 00:00:00' END,
            WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
        ) WITH ('connector' = 'nexmark', 'events.num' = '{events}', 'first-event.rate' = '1000', 'next-event.rate' = '1000');
        CREATE VIEW bid AS SELECT bid.auction, bid.bidder, bid.price, dateTime FROM datagen WHERE event_type = 2;"
    );
    let query =
        "SELECT auction, window_start, SUM(price) AS total, MIN(price) AS low, MAX(price) AS high,
            AVG(price) AS average, COUNT(DISTINCT bidder) AS bidders,
            COUNT(*) FILTER (WHERE price > 1000000) AS big, MAX(price) - MIN(price) AS spread
         FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
         GROUP BY auction, window_start, window_end";
    let config = NexmarkConfig {
        events: Some(events),
        events_per_second: 1000.0,
        ..NexmarkConfig::default()
    };
    // auction, window -> (prices, bidders)
    let mut groups: BTreeMap<(i64, i64), (Vec<i64>, std::collections::BTreeSet<i64>)> =
        BTreeMap::new();
    for event in config.generate_all() {
        if let Event::Bid(bid) = event {
            let start = bid.date_time - bid.date_time.rem_euclid(10_000);
            let group = groups.entry((bid.auction, start)).or_default();
            group.0.push(bid.price);
            group.1.insert(bid.bidder);
        }
    }
    let (rows, schema) = run(&ddl, query, 2);
    assert_eq!(
        schema.names(),
        [
            "auction",
            "window_start",
            "total",
            "low",
            "high",
            "average",
            "bidders",
            "big",
            "spread"
        ]
    );
    assert_eq!(rows.len(), groups.len());
    for row in &rows {
        let key = (int(row.get(0)), int(row.get(1)));
        let (prices, bidders) = &groups[&key];
        let sum: i64 = prices.iter().sum();
        let (low, high) = (*prices.iter().min().unwrap(), *prices.iter().max().unwrap());
        assert_eq!(int(row.get(2)), sum, "{key:?}");
        assert_eq!(int(row.get(3)), low);
        assert_eq!(int(row.get(4)), high);
        // AVG of a BIGINT is a BIGINT (integer division), as in Flink.
        assert_eq!(int(row.get(5)), sum / prices.len() as i64);
        assert_eq!(int(row.get(6)), bidders.len() as i64);
        assert_eq!(
            int(row.get(7)),
            prices.iter().filter(|p| **p > 1_000_000).count() as i64
        );
        assert_eq!(int(row.get(8)), high - low);
    }
}

#[test]
fn explain_shows_the_window_and_its_keys_and_errors_name_the_construct() {
    let env = StreamEnv::new();
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&clicks_table(std::path::Path::new("/nonexistent.jsonl")))
        .unwrap();
    let plan = sql
        .explain(
            "SELECT user_id, window_start, COUNT(*) FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(event_time), INTERVAL '1' MINUTE)) GROUP BY user_id, window_start, window_end",
        )
        .unwrap();
    assert!(
        plan.contains("Window: TUMBLE(60000 ms), keyed by [user_id], aggregates [COUNT(*)]"),
        "{plan}"
    );
    assert!(plan.contains("Source: filesystem table `clicks`"), "{plan}");
    let error = |query: &str| sql.sql_query(query).err().unwrap().to_string();
    assert!(
        error("SELECT user_id, COUNT(*) FROM clicks GROUP BY user_id")
            .contains("GROUP BY without a window")
    );
    assert!(error("SELECT url, COUNT(*) FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(event_time), INTERVAL '1' MINUTE)) GROUP BY window_start, window_end").contains("neither grouped nor aggregated"));
    assert!(error("SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(url), INTERVAL '1' MINUTE)) GROUP BY window_start, window_end").contains("time attribute `event_time`"));
    assert!(error("SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(event_time), INTERVAL '1' MINUTE)) GROUP BY window_start").contains("window_start and window_end"));
}

/// Processing-time windows over a view's `PROCTIME()` column (Nexmark q12's form): every
/// click counted once, in windows of the clock; `EXPLAIN` says what fires them.
#[test]
fn processing_time_windows_follow_a_proctime_column() {
    let dir = tempfile::tempdir().unwrap();
    let (path, clicks) = clicks_file(dir.path(), 5_000);
    let env = StreamEnv::new();
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&clicks_table(&path)).unwrap();
    sql.execute_sql("CREATE VIEW c AS SELECT *, PROCTIME() AS p FROM clicks;")
        .unwrap();
    let query = "SELECT user_id, COUNT(*) AS n, window_start, window_end
         FROM TABLE(TUMBLE(TABLE c, DESCRIPTOR(p), INTERVAL '1' MINUTE))
         GROUP BY user_id, window_start, window_end";
    let plan = sql.explain(query).unwrap();
    assert!(
        plan.contains("Window: TUMBLE(60000 ms) of processing time")
            && plan.contains("fired by the clock"),
        "{plan}"
    );
    // The event time still windows by event time.
    assert!(
        sql.explain("SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE c, DESCRIPTOR(event_time), INTERVAL '1' MINUTE)) GROUP BY window_start, window_end")
            .unwrap()
            .contains("fired by the watermark")
    );
    let (rows, _) = sql.sql_query(query).unwrap();
    let (sink, out) = CollectSink::new();
    rows.sink(sink);
    env.execute().unwrap();
    let mut per_user: BTreeMap<i64, i64> = BTreeMap::new();
    for row in out.values() {
        assert_eq!(int(row.get(3)) - int(row.get(2)), 60_000);
        *per_user.entry(int(row.get(0))).or_default() += int(row.get(1));
    }
    let mut expected: BTreeMap<i64, i64> = BTreeMap::new();
    for click in &clicks {
        *expected.entry(click.user_id as i64).or_default() += 1;
    }
    assert_eq!(per_user, expected);
}

/// Flink's legacy group windows (`GROUP BY TUMBLE(time, size)`, `HOP(..)`, with `TUMBLE_START`,
/// `HOP_END`, ...) give the window table functions' rows; a group window needs the time
/// attribute.
#[test]
fn legacy_group_windows_equal_the_window_table_functions() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = clicks_file(dir.path(), 5_000);
    let ddl = clicks_table(&path);
    let sorted = |mut rows: Vec<Row>| {
        rows.sort();
        rows
    };
    for p in [1, 2] {
        let (tvf, _) = run(
            &ddl,
            "SELECT user_id, window_start, window_end, COUNT(*) FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(event_time), INTERVAL '1' MINUTE)) GROUP BY user_id, window_start, window_end",
            p,
        );
        let (legacy, _) = run(
            &ddl,
            "SELECT user_id, TUMBLE_START(event_time, INTERVAL '1' MINUTE), TUMBLE_END(event_time, INTERVAL '1' MINUTE), COUNT(*) FROM clicks GROUP BY TUMBLE(event_time, INTERVAL '1' MINUTE), user_id",
            p,
        );
        assert!(!tvf.is_empty());
        assert_eq!(sorted(legacy), sorted(tvf), "p = {p}");
        let (tvf, _) = run(
            &ddl,
            "SELECT user_id, window_end, COUNT(*) FROM TABLE(HOP(TABLE clicks, DESCRIPTOR(event_time), INTERVAL '30' SECOND, INTERVAL '1' MINUTE)) GROUP BY user_id, window_start, window_end",
            p,
        );
        let (legacy, _) = run(
            &ddl,
            "SELECT user_id, HOP_END(event_time, INTERVAL '30' SECOND, INTERVAL '1' MINUTE), COUNT(*) FROM clicks GROUP BY user_id, HOP(event_time, INTERVAL '30' SECOND, INTERVAL '1' MINUTE)",
            p,
        );
        assert_eq!(sorted(legacy), sorted(tvf), "p = {p}");
    }
    let env = StreamEnv::new();
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&ddl).unwrap();
    let error = sql
        .sql_query("SELECT COUNT(*) FROM clicks GROUP BY TUMBLE(ip, INTERVAL '1' MINUTE)")
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains("the input's time attribute `event_time`"),
        "{error}"
    );
}

/// Panics with the first sessions that differ.
fn same_sessions(got: Vec<(i64, i64, i64, i64)>, expected: &[(i64, i64, i64, i64)], what: &str) {
    let extra: Vec<_> = got
        .iter()
        .filter(|s| !expected.contains(s))
        .take(5)
        .collect();
    let missing: Vec<_> = expected
        .iter()
        .filter(|s| !got.contains(s))
        .take(5)
        .collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "{what}: {} sessions, {} expected; not expected {extra:?}; missing {missing:?}",
        got.len(),
        expected.len()
    );
}

#[test]
fn session_window_table_functions_find_each_users_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let (path, clicks) = clicks_file(dir.path(), 3_000);
    let ddl = clicks_table(&path);
    let gap = 700;
    // Each user's sessions: clicks at most the gap apart, [first, last + gap) (windows that
    // touch merge, as Flink's `TimeWindow::intersects`).
    let mut times: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for click in &clicks {
        times
            .entry(click.user_id as i64)
            .or_default()
            .push(click.event_time);
    }
    let mut expected: Vec<(i64, i64, i64, i64)> = Vec::new();
    for (user, mut ts) in times {
        ts.sort_unstable();
        let (mut start, mut end, mut n) = (ts[0], ts[0] + gap, 0);
        for t in ts {
            if t > end {
                expected.push((user, start, end, n));
                (start, n) = (t, 0);
            }
            end = end.max(t + gap);
            n += 1;
        }
        expected.push((user, start, end, n));
    }
    expected.sort_unstable();
    let as_tuples = |rows: Vec<Row>| {
        let mut got: Vec<(i64, i64, i64, i64)> = rows
            .iter()
            .map(|r| (int(&r.0[0]), int(&r.0[1]), int(&r.0[2]), int(&r.0[3])))
            .collect();
        got.sort_unstable();
        got
    };
    for p in [1, 2] {
        let (tvf, _) = run(
            &ddl,
            "SELECT user_id, window_start, window_end, COUNT(*)
             FROM TABLE(SESSION(TABLE clicks PARTITION BY user_id, DESCRIPTOR(event_time), INTERVAL '0.7' SECOND))
             GROUP BY user_id, window_start, window_end",
            p,
        );
        same_sessions(as_tuples(tvf), &expected, &format!("SESSION TVF, p = {p}"));
        let (legacy, _) = run(
            &ddl,
            "SELECT user_id, SESSION_START(event_time, INTERVAL '0.7' SECOND), SESSION_END(event_time, INTERVAL '0.7' SECOND), COUNT(*)
             FROM clicks GROUP BY user_id, SESSION(event_time, INTERVAL '0.7' SECOND)",
            p,
        );
        same_sessions(
            as_tuples(legacy),
            &expected,
            &format!("GROUP BY SESSION, p = {p}"),
        );
    }
    // Without PARTITION BY: one stream of sessions over every click.
    let (all, _) = run(
        &ddl,
        "SELECT COUNT(*), window_start, window_end
         FROM TABLE(SESSION(TABLE clicks, DESCRIPTOR(event_time), INTERVAL '10' SECOND))
         GROUP BY window_start, window_end",
        1,
    );
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(int(&all[0].0[0]), 3_000);
    let env = StreamEnv::new();
    let sql = SqlEnv::new(&env);
    sql.execute_sql(&ddl).unwrap();
    for (query, want) in [
        (
            "SELECT url, window_start, COUNT(*) FROM TABLE(SESSION(TABLE clicks PARTITION BY user_id, DESCRIPTOR(event_time), INTERVAL '1' SECOND)) GROUP BY url, window_start, window_end",
            "groups by its PARTITION BY columns (user_id)",
        ),
        (
            "SELECT window_start, COUNT(*) FROM TABLE(TUMBLE(TABLE clicks PARTITION BY user_id, DESCRIPTOR(event_time), INTERVAL '1' SECOND)) GROUP BY window_start, window_end",
            "only SESSION windows take PARTITION BY",
        ),
    ] {
        let error = sql.sql_query(query).err().expect(query).to_string();
        assert!(error.contains(want), "{query}: {error}");
    }
}
