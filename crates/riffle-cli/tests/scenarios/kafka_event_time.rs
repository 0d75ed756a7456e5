//! Event time survives a restore (issue 18): the seed's job between Kafka topics is killed with
//! SIGKILL after it read partitions 0-6 to their end while partition 7 was still empty; restored,
//! at another parallelism, partitions 0-6 get no further record, yet once partition 7's clicks
//! arrive every window fires, because each split's watermark is part of the checkpoint.

use std::collections::BTreeMap;
use std::time::Duration;

use riffle::source::datagen::Generator;
use riffle_cli::clicks::is_bot;
use riffle_cli::demos::UserCount;
use riffle_clicks::{ClickGenerator, ClicksConfig};
use riffle_kafka::testing::TestProducer;

use crate::kafka::{log_tail, now_ms, read_topic, seed_job_args, spawn, wait_for_partitions};

/// The id of the newest completed checkpoint in `dir` (directories `chk-N` with a manifest).
fn latest_checkpoint(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .filter_map(|e| e.ok())
            .filter(|e| e.path().join(riffle::checkpoint::MANIFEST_FILE).exists())
            .filter_map(|e| e.file_name().to_str()?.strip_prefix("chk-")?.parse().ok())
            .max()
            .unwrap_or(0)
    })
}

#[test]
fn a_partition_without_new_records_after_a_restore_does_not_hold_the_windows_back() {
    let prefix = format!("wm-restore-{}-{}-", std::process::id(), now_ms());
    let clicks_topic = format!("{prefix}clicks");
    let dir = tempfile::tempdir().unwrap();
    let args = seed_job_args(&prefix, 200);
    let mut job = spawn(&args, dir.path());
    wait_for_partitions(&clicks_topic, 8);

    let generator = ClickGenerator::new(ClicksConfig {
        users: 200,
        events_per_second: 5_000.0,
        late_share: 0.0,
        ..ClicksConfig::default()
    });
    let clicks: Vec<_> = (0..20_000u64).map(|i| generator.generate(i)).collect();
    let window_of = |t: i64| t - t.rem_euclid(1000);
    let mut expected: BTreeMap<(u64, i64), u64> = BTreeMap::new();
    for click in clicks.iter().filter(|c| !is_bot(&c.user_agent)) {
        *expected
            .entry((click.user_id, window_of(click.event_time)))
            .or_default() += 1;
    }
    let far_ahead = {
        let mut bot = clicks[0].clone();
        bot.user_agent = "Googlebot/2.1".into();
        bot.event_time = clicks.iter().map(|c| c.event_time).max().unwrap() + 60_000;
        assert!(is_bot(&bot.user_agent));
        serde_json::to_string(&bot).unwrap()
    };
    let producer = TestProducer::new(&[]);
    let write = |partitions: std::ops::Range<u64>| {
        for click in clicks
            .iter()
            .filter(|c| partitions.contains(&(c.user_id % 8)))
        {
            let payload = serde_json::to_string(click).unwrap();
            producer.send(
                &clicks_topic,
                (click.user_id % 8) as i32,
                None,
                payload.as_bytes(),
            );
        }
        // The end of these partitions' input: a bot click far ahead in each.
        for partition in partitions {
            producer.send(&clicks_topic, partition as i32, None, far_ahead.as_bytes());
        }
        producer.flush();
    };

    // Partitions 0-6 now, partition 7 held back: nothing can fire (7 has no watermark).
    write(0..7);
    let checkpoints = dir.path().join("checkpoints/demo-pipeline-kafka");
    // The job's first checkpoint (a loaded machine starts it slowly), then three more: the
    // later ones were taken after partitions 0-6 were read to their end.
    let wait_for_checkpoint = |at_least: u64| {
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            let latest = latest_checkpoint(&checkpoints);
            if latest >= at_least {
                return latest;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no checkpoint {at_least} in {} (the newest: {latest}); the job's log:\n{}",
                checkpoints.display(),
                log_tail(dir.path())
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let before = wait_for_checkpoint(1);
    wait_for_checkpoint(before + 3);
    job.kill(); // SIGKILL, after the checkpoints that hold partitions 0-6 read to their end
    let counts_topic = format!("{prefix}agg-clicks");
    assert!(
        read_topic(
            &counts_topic,
            0,
            Duration::from_secs(3),
            Duration::from_secs(1)
        )
        .is_empty(),
        "no window fired while partition 7 had no watermark"
    );

    // Restored at another parallelism: each split's watermark moves with the split.
    let mut restored = args.clone();
    *restored.last_mut().unwrap() = "3".to_string();
    restored.extend(["--restore".to_string(), "latest".to_string()]);
    let mut job = spawn(&restored, dir.path());
    // Only partition 7 gets records after the restore.
    write(7..8);
    let lines = read_topic(
        &counts_topic,
        expected.len(),
        Duration::from_secs(90),
        Duration::from_secs(3),
    );
    job.kill();
    let mut seen: BTreeMap<(u64, i64), u64> = BTreeMap::new();
    for line in &lines {
        let count: UserCount = serde_json::from_str(line).unwrap();
        let previous = seen.insert((count.user_id, count.window_start), count.count);
        assert!(previous.is_none(), "{line} appears twice");
    }
    assert_eq!(
        seen.len(),
        expected.len(),
        "every window fired after the restore"
    );
    assert!(
        seen == expected,
        "the counts differ from the batch computation"
    );
}
