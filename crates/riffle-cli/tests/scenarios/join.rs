//! `riffle demo join`: clicks joined to their impression within 10 minutes, the click-through
//! rate per campaign per minute. Checked against a join and a count computed here, from the same
//! generators, record by record.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use riffle::sink::CollectSink;
use riffle::source::datagen::{DatagenSource, Generator};
use riffle::time::WatermarkStrategy;
use riffle::{EnvConfig, StreamEnv};
use riffle_cli::demos::join::{
    AdClick, AdClickGenerator, AdsConfig, Impression, ImpressionGenerator, JoinedClick, pipeline,
};

use crate::{riffle, sorted_lines};

const WITHIN: i64 = 600_000;

/// Impressions and clicks with nothing late: the output has one exact answer.
fn inputs(count: u64) -> (AdsConfig, Vec<Impression>, Vec<AdClick>) {
    // 50 impressions a second: 40 minutes of event time, longer than the click delays.
    let config = AdsConfig {
        late_share: 0.0,
        impressions_per_second: 50.0,
        ..AdsConfig::default()
    };
    let impressions = (0..count)
        .map(|i| ImpressionGenerator(config.clone()).generate(i))
        .collect();
    let clicks = (0..config.clicks_for(count))
        .map(|i| AdClickGenerator(config.clone()).generate(i))
        .collect();
    (config, impressions, clicks)
}

/// The interval join, by nested lookups.
fn expected_joins(impressions: &[Impression], clicks: &[AdClick]) -> Vec<JoinedClick> {
    let by_id: HashMap<u64, &Impression> =
        impressions.iter().map(|i| (i.impression_id, i)).collect();
    let mut joined: Vec<JoinedClick> = clicks
        .iter()
        .filter_map(|c| {
            let i = by_id.get(&c.impression_id)?;
            let gap = c.event_time - i.event_time;
            (0..=WITHIN).contains(&gap).then_some(JoinedClick {
                impression_id: i.impression_id,
                campaign_id: i.campaign_id,
                user_id: c.user_id,
                impression_time: i.event_time,
                click_time: c.event_time,
            })
        })
        .collect();
    joined.sort();
    joined
}

#[test]
fn clicks_join_their_impression_and_rates_count_both_per_campaign_and_minute() {
    let (config, impressions, clicks) = inputs(120_000);
    let expected = expected_joins(&impressions, &clicks);
    assert!(
        expected.len() > clicks.len() / 2 && expected.len() < clicks.len(),
        "most clicks join, not all: {} of {}",
        expected.len(),
        clicks.len()
    );
    for parallelism in [1, 3] {
        let env = StreamEnv::with_config(EnvConfig {
            parallelism,
            ..EnvConfig::default()
        });
        let bound = Duration::from_secs(5);
        let shown = env.from_source_with_watermarks(
            DatagenSource::new(ImpressionGenerator(config.clone())).count(impressions.len() as u64),
            WatermarkStrategy::bounded_out_of_orderness(bound)
                .with_timestamps(|i: &Impression| i.event_time),
        );
        let clicked = env.from_source_with_watermarks(
            DatagenSource::new(AdClickGenerator(config.clone())).count(clicks.len() as u64),
            WatermarkStrategy::bounded_out_of_orderness(bound)
                .with_timestamps(|c: &AdClick| c.event_time),
        );
        let outputs = pipeline(
            &shown,
            &clicked,
            Duration::from_millis(WITHIN as u64),
            Duration::from_secs(60),
            Duration::ZERO,
        );
        let (joins, joined) = CollectSink::new();
        let (rates, ctr) = CollectSink::new();
        outputs.joined.sink(joins);
        outputs.ctr.sink(rates);
        env.execute().unwrap();
        assert_eq!(joined.sorted(), expected, "p={parallelism}");

        // Impressions and joined clicks per campaign and minute, counted here.
        let minute = |t: i64| t - t.rem_euclid(60_000);
        let mut counts: BTreeMap<(u32, i64), (u64, u64)> = BTreeMap::new();
        for i in &impressions {
            counts
                .entry((i.campaign_id, minute(i.event_time)))
                .or_default()
                .0 += 1;
        }
        for j in &expected {
            counts
                .entry((j.campaign_id, minute(j.click_time)))
                .or_default()
                .1 += 1;
        }
        let got: BTreeMap<(u32, i64), (u64, u64)> = ctr
            .values()
            .into_iter()
            .map(|r| ((r.campaign_id, r.window_start), (r.impressions, r.clicks)))
            .collect();
        assert_eq!(got, counts, "p={parallelism}");
        assert!(
            ctr.values()
                .iter()
                .all(|r| { (r.ctr - r.clicks as f64 / r.impressions.max(1) as f64).abs() < 1e-12 })
        );
    }
}

#[test]
fn the_demo_reads_both_streams_from_files_and_writes_each_output() {
    let dir = tempfile::tempdir().unwrap();
    let lines = |records: Vec<String>| records.join("\n") + "\n";
    let impression = |id: u64, campaign: u32, t: i64| {
        format!(r#"{{"impression_id":{id},"campaign_id":{campaign},"user_id":7,"event_time":{t}}}"#)
    };
    let click = |id: u64, campaign: u32, t: i64| {
        format!(r#"{{"impression_id":{id},"campaign_id":{campaign},"user_id":7,"event_time":{t}}}"#)
    };
    std::fs::write(
        dir.path().join("impressions.jsonl"),
        lines(vec![
            impression(1, 10, 1_000),
            impression(2, 10, 2_000),
            impression(3, 20, 61_000),
            "not json".to_string(),
        ]),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("clicks.jsonl"),
        lines(vec![
            click(1, 10, 30_000),  // joins impression 1
            click(2, 10, 700_000), // 698 s after impression 2: too late to join
            click(3, 20, 62_000),  // joins impression 3
            click(99, 20, 63_000), // no such impression
        ]),
    )
    .unwrap();
    let out = riffle(
        &[
            "demo",
            "join",
            "--input-impressions",
            "impressions.jsonl",
            "--input-clicks",
            "clicks.jsonl",
            "--output",
            "out",
            "--no-web",
        ],
        dir.path(),
    );
    assert!(out.contains("joined                     2"), "{out}");
    assert!(out.contains("bad records                1"), "{out}");
    assert_eq!(
        sorted_lines(&dir.path().join("out/joined")),
        vec![
            r#"{"impression_id":1,"campaign_id":10,"user_id":7,"impression_time":1000,"click_time":30000}"#,
            r#"{"impression_id":3,"campaign_id":20,"user_id":7,"impression_time":61000,"click_time":62000}"#,
        ]
    );
    let rates = sorted_lines(&dir.path().join("out/ctr"));
    assert!(
        rates.contains(&r#"{"campaign_id":10,"window_start":0,"window_end":60000,"impressions":2,"clicks":1,"ctr":0.5}"#.to_string()),
        "{rates:?}"
    );
    assert_eq!(
        sorted_lines(&dir.path().join("out/dead-letter/Source__impressions")).len(),
        1,
        "the bad line is a dead letter"
    );
}

#[test]
fn restoring_a_finished_join_writes_nothing_more() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "demo",
        "join",
        "--count",
        "20000",
        "--output",
        "out",
        "--no-web",
        "--checkpoint-interval-ms",
        "100",
        "--checkpoint-dir",
        "chk",
    ];
    riffle(&args, dir.path());
    let joined = sorted_lines(&dir.path().join("out/joined"));
    let rates = sorted_lines(&dir.path().join("out/ctr"));
    assert!(!joined.is_empty());
    let mut restore = args.to_vec();
    restore.extend(["--restore", "latest"]);
    let out = riffle(&restore, dir.path());
    assert!(out.contains("the job had already finished"), "{out}");
    assert_eq!(sorted_lines(&dir.path().join("out/joined")), joined);
    assert_eq!(sorted_lines(&dir.path().join("out/ctr")), rates);
}
