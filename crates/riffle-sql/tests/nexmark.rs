//! Nexmark's SQL, as the nexmark project writes it, run by Riffle's SQL and checked against the
//! hand-written DataStream queries of `riffle-nexmark` on the same events.
//!
//! The DDL and the queries are the nexmark project's (github.com/nexmark/nexmark,
//! `nexmark-flink/src/main/resources/queries/`: `ddl_gen.sql` and `ddl_views.sql` at 536d772,
//! the `bid` row and view with the `channel` and `url` columns of its later versions, which q21
//! and q22 read; `q0.sql`, `q1.sql`, `q14.sql` and `q21.sql` at 0f96e93). Each query's sink table is
//! `'connector' = 'blackhole'` there; the test writes it to files instead (the one change) and
//! reads them back.

use std::collections::BTreeMap;

use riffle::StreamEnv;
use riffle::sink::CollectSink;
use riffle_nexmark::{Event, NexmarkConfig, NexmarkSource, queries};
use riffle_sql::{DataType, ScalarFunction, SqlEnv, Value};
use serde_json::json;

const DDL_GEN: &str = "CREATE TABLE datagen (
    event_type int,
    person ROW<
        id  BIGINT,
        name  VARCHAR,
        emailAddress  VARCHAR,
        creditCard  VARCHAR,
        city  VARCHAR,
        state  VARCHAR,
        dateTime TIMESTAMP(3),
        extra  VARCHAR>,
    auction ROW<
        id  BIGINT,
        itemName  VARCHAR,
        description  VARCHAR,
        initialBid  BIGINT,
        reserve  BIGINT,
        dateTime  TIMESTAMP(3),
        expires  TIMESTAMP(3),
        seller  BIGINT,
        category  BIGINT,
        extra  VARCHAR>,
    bid ROW<
        auction  BIGINT,
        bidder  BIGINT,
        price  BIGINT,
        channel  VARCHAR,
        url  VARCHAR,
        dateTime  TIMESTAMP(3),
        extra  VARCHAR>,
    dateTime AS
        CASE
            WHEN event_type = 0 THEN person.dateTime
            WHEN event_type = 1 THEN auction.dateTime
            ELSE bid.dateTime
        END,
    WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH (
    'connector' = 'nexmark',
    'first-event.rate' = '${TPS}',
    'next-event.rate' = '${TPS}',
    'events.num' = '${EVENTS_NUM}',
    'person.proportion' = '${PERSON_PROPORTION}',
    'auction.proportion' = '${AUCTION_PROPORTION}',
    'bid.proportion' = '${BID_PROPORTION}'
);";

const DDL_VIEWS: &str = "CREATE VIEW person AS
SELECT
    person.id,
    person.name,
    person.emailAddress,
    person.creditCard,
    person.city,
    person.state,
    dateTime,
    person.extra
FROM ${NEXMARK_TABLE} WHERE event_type = 0;

CREATE VIEW auction AS
SELECT
    auction.id,
    auction.itemName,
    auction.description,
    auction.initialBid,
    auction.reserve,
    dateTime,
    auction.expires,
    auction.seller,
    auction.category,
    auction.extra
FROM ${NEXMARK_TABLE} WHERE event_type = 1;

CREATE VIEW bid AS
SELECT
    bid.auction,
    bid.bidder,
    bid.price,
    bid.channel,
    bid.url,
    dateTime,
    bid.extra
FROM ${NEXMARK_TABLE} WHERE event_type = 2;";

const Q0: &str = "CREATE TABLE nexmark_q0 (
  auction  BIGINT,
  bidder  BIGINT,
  price  BIGINT,
  dateTime  TIMESTAMP(3),
  extra  VARCHAR
) WITH (
  'connector' = 'blackhole'
);

INSERT INTO nexmark_q0
SELECT auction, bidder, price, dateTime, extra FROM bid;";

const Q1: &str = "CREATE TABLE nexmark_q1 (
  auction  BIGINT,
  bidder  BIGINT,
  price  DECIMAL(23, 3),
  dateTime  TIMESTAMP(3),
  extra  VARCHAR
) WITH (
  'connector' = 'blackhole'
);

INSERT INTO nexmark_q1
SELECT
    auction,
    bidder,
    0.908 * price as price, -- convert dollar to euro
    dateTime,
    extra
FROM bid;";

const Q2: &str = "CREATE TABLE nexmark_q2 (
  auction  BIGINT,
  price  BIGINT
) WITH (
  'connector' = 'blackhole'
);

INSERT INTO nexmark_q2
SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0;";

const Q14: &str = "CREATE FUNCTION count_char AS 'com.github.nexmark.flink.udf.CountChar';

CREATE TABLE nexmark_q14 (
    auction BIGINT,
    bidder BIGINT,
    price  DECIMAL(23, 3),
    bidTimeType VARCHAR,
    dateTime TIMESTAMP(3),
    extra VARCHAR,
    c_counts BIGINT
) WITH (
  'connector' = 'blackhole'
);

INSERT INTO nexmark_q14
SELECT 
    auction,
    bidder,
    0.908 * price as price,
    CASE
        WHEN HOUR(dateTime) >= 8 AND HOUR(dateTime) <= 18 THEN 'dayTime'
        WHEN HOUR(dateTime) <= 6 OR HOUR(dateTime) >= 20 THEN 'nightTime'
        ELSE 'otherTime'
    END AS bidTimeType,
    dateTime,
    extra,
    count_char(extra, 'c') AS c_counts
FROM bid
WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000;";

const Q21: &str = "CREATE TABLE nexmark_q21 (
    auction  BIGINT,
    bidder  BIGINT,
    price  BIGINT,
    channel  VARCHAR,
    channel_id  VARCHAR
) WITH (
    'connector' = 'blackhole'
);

INSERT INTO nexmark_q21
SELECT
    auction, bidder, price, channel,
    CASE
        WHEN lower(channel) = 'apple' THEN '0'
        WHEN lower(channel) = 'google' THEN '1'
        WHEN lower(channel) = 'facebook' THEN '2'
        WHEN lower(channel) = 'baidu' THEN '3'
        ELSE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2)
        END
    AS channel_id FROM bid
    where REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) is not null or
          lower(channel) in ('apple', 'google', 'facebook', 'baidu');";

const Q22: &str = "CREATE TABLE nexmark_q22 (
      auction  BIGINT,
      bidder  BIGINT,
      price  BIGINT,
      channel  VARCHAR,
      dir1  VARCHAR,
      dir2  VARCHAR,
      dir3  VARCHAR
) WITH (
    'connector' = 'blackhole'
);

INSERT INTO nexmark_q22
SELECT
    auction, bidder, price, channel,
    SPLIT_INDEX(url, '/', 3) as dir1,
    SPLIT_INDEX(url, '/', 4) as dir2,
    SPLIT_INDEX(url, '/', 5) as dir3 FROM bid;";

const EVENTS: u64 = 20_000;

/// Nexmark q14's `count_char(text, 'c')`, as a Rust function.
fn count_char() -> ScalarFunction {
    ScalarFunction::returning(DataType::BigInt, |args| match args {
        [Value::String(text), Value::String(c)] => {
            let c = c.chars().next().unwrap_or('\0');
            Ok(Value::Int(text.chars().filter(|x| *x == c).count() as i64))
        }
        _ => Ok(Value::Null),
    })
}

/// The rows of the nexmark query `query` (its sink table written to files), each a JSON object
/// with times as epoch milliseconds and decimals as doubles.
fn sql_rows(query: &str, parallelism: usize) -> Vec<serde_json::Value> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let env = StreamEnv::with_config(riffle::EnvConfig {
        parallelism,
        ..riffle::EnvConfig::default()
    });
    let sql = SqlEnv::new(&env);
    for (name, value) in [
        ("TPS", "10000000".to_string()),
        ("EVENTS_NUM", EVENTS.to_string()),
        ("PERSON_PROPORTION", "1".into()),
        ("AUCTION_PROPORTION", "3".into()),
        ("BID_PROPORTION", "46".into()),
        ("NEXMARK_TABLE", "datagen".into()),
    ] {
        sql.define(name, &value);
    }
    sql.register_function("count_char", count_char());
    sql.execute_sql(DDL_GEN).unwrap();
    sql.execute_sql(DDL_VIEWS).unwrap();
    let query = query.replace(
        "'connector' = 'blackhole'",
        &format!(
            "'connector' = 'filesystem', 'path' = '{}', 'format' = 'json'",
            out.display()
        ),
    );
    sql.execute_sql(&query).unwrap_or_else(|e| panic!("{e}"));
    env.execute().unwrap();
    let mut rows = Vec::new();
    for entry in std::fs::read_dir(&out).unwrap() {
        let path = entry.unwrap().path();
        if !path.is_file() {
            continue;
        }
        for line in std::fs::read_to_string(path).unwrap().lines() {
            let mut row: serde_json::Value = serde_json::from_str(line).unwrap();
            if let Some(time) = row.get("dateTime").and_then(|t| t.as_str()) {
                let ms = riffle_sql::format::parse_timestamp(time).unwrap();
                row["dateTime"] = json!(ms);
            }
            rows.push(row);
        }
    }
    sort(&mut rows);
    rows
}

/// The rows of a DataStream query over the same events.
fn datastream_rows<T: riffle::Data>(
    query: fn(&riffle::DataStream<Event>) -> riffle::DataStream<T>,
) -> Vec<serde_json::Value> {
    let env = StreamEnv::new();
    let (sink, out) = CollectSink::new();
    let config = NexmarkConfig {
        events: Some(EVENTS),
        ..NexmarkConfig::default()
    };
    query(&NexmarkSource::new(config).stream(&env)).sink(sink);
    env.execute().unwrap();
    let mut rows: Vec<serde_json::Value> = out
        .values()
        .iter()
        .map(|r| serde_json::to_value(r).unwrap())
        .collect();
    sort(&mut rows);
    rows
}

fn sort(rows: &mut [serde_json::Value]) {
    rows.sort_by_key(|r| r.to_string());
}

/// Both sides equal, row for row; the SQL side's decimal `price` compared as the double the
/// DataStream side computes from the same exact value.
fn assert_same(sql: Vec<serde_json::Value>, datastream: Vec<serde_json::Value>, query: &str) {
    assert!(!datastream.is_empty(), "{query}: no rows to compare");
    assert_eq!(sql.len(), datastream.len(), "{query}: row counts");
    let mut by_text: BTreeMap<String, usize> = BTreeMap::new();
    for row in &datastream {
        *by_text.entry(row.to_string()).or_default() += 1;
    }
    for row in &sql {
        let text = row.to_string();
        match by_text.get_mut(&text) {
            Some(n) if *n > 0 => *n -= 1,
            _ => panic!(
                "{query}: the SQL row {text} is not among the DataStream rows (e.g. {})",
                datastream[0]
            ),
        }
    }
}

#[test]
fn q0_passes_every_bid_through() {
    for p in [1, 2] {
        assert_same(sql_rows(Q0, p), datastream_rows(queries::q0), "q0");
    }
}

#[test]
fn q1_converts_prices_exactly_to_a_decimal_23_3() {
    for p in [1, 2] {
        assert_same(sql_rows(Q1, p), datastream_rows(queries::q1), "q1");
    }
}

#[test]
fn q2_selects_bids_on_every_123rd_auction() {
    assert_same(sql_rows(Q2, 2), datastream_rows(queries::q2), "q2");
}

#[test]
fn q14_calls_a_registered_rust_function_and_cases_on_the_hour() {
    assert_same(sql_rows(Q14, 2), datastream_rows(queries::q14), "q14");
}

#[test]
fn q21_extracts_the_channel_id_with_a_regular_expression() {
    assert_same(sql_rows(Q21, 1), datastream_rows(queries::q21), "q21");
}

#[test]
fn q22_splits_the_url_into_directories() {
    assert_same(sql_rows(Q22, 1), datastream_rows(queries::q22), "q22");
}
