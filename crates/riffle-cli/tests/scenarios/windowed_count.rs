//! Scenario 2, stateful windowed count, and the main job (`riffle demo`): per user and minute,
//! the final count plus the late clicks of that minute equal a batch count over the input.

use std::collections::BTreeMap;
use std::path::Path;

use riffle::source::datagen::Generator;
use riffle_cli::clicks::is_bot;
use riffle_cli::demos::UserCount;
use riffle_clicks::{Click, ClickGenerator, ClicksConfig};

use crate::{riffle, sorted_lines};

/// The last count per (user, window start) in the part files (an update follows the line it
/// replaces in the same file, whose subtask owns the user).
fn final_counts(dir: &Path) -> BTreeMap<(u64, i64), u64> {
    let mut finals = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        for line in std::fs::read_to_string(entry.unwrap().path())
            .unwrap()
            .lines()
        {
            let count: UserCount = serde_json::from_str(line).unwrap();
            assert_eq!(count.window_end - count.window_start, 60_000);
            finals.insert((count.user_id, count.window_start), count.count);
        }
    }
    finals
}

fn minute(event_time: i64) -> i64 {
    event_time - event_time.rem_euclid(60_000)
}

/// Per (user, window): the counts written plus the late clicks must be the truth, exactly.
fn check(dir: &Path, clicks: impl Iterator<Item = Click>) -> (u64, usize) {
    let mut truth: BTreeMap<(u64, i64), u64> = BTreeMap::new();
    for click in clicks {
        *truth
            .entry((click.user_id, minute(click.event_time)))
            .or_insert(0) += 1;
    }
    let mut counted = final_counts(&dir.join("agg-clicks"));
    // Late clicks are written as they reached the window (raw or enriched): read what both have.
    let late: Vec<serde_json::Value> = sorted_lines(&dir.join("late-clicks"))
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for click in &late {
        let (user, time) = (
            click["user_id"].as_u64().unwrap(),
            click["event_time"].as_i64().unwrap(),
        );
        *counted.entry((user, minute(time))).or_insert(0) += 1;
    }
    assert_eq!(counted, truth);
    (truth.values().sum(), late.len())
}

#[test]
fn the_windowed_count_plus_the_late_clicks_is_the_batch_count() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = riffle(
        &[
            "demo",
            "windowed-count",
            "--count",
            "300000",
            "--users",
            "2000",
            "-p",
            "2",
            "--output",
            "out",
        ],
        dir.path(),
    );
    let generator = ClickGenerator::new(ClicksConfig {
        users: 2000,
        ..ClicksConfig::default()
    });
    let (total, late) = check(
        &dir.path().join("out"),
        (0..300_000).map(|i| generator.generate(i)),
    );
    assert_eq!(total, 300_000);
    assert!(
        late > 100,
        "about 0.1% of the clicks are 6 minutes late: {late}"
    );
    assert!(
        stdout.contains(&format!("late clicks {late:>12}")),
        "{stdout}"
    );
}

#[test]
fn the_main_job_drops_bots_and_counts_the_rest_per_user_and_minute() {
    let dir = tempfile::tempdir().unwrap();
    riffle(
        &[
            "demo", "--count", "200000", "--users", "1000", "-p", "2", "--output", "out",
        ],
        dir.path(),
    );
    let generator = ClickGenerator::new(ClicksConfig {
        users: 1000,
        ..ClicksConfig::default()
    });
    let humans = (0..200_000)
        .map(|i| generator.generate(i))
        .filter(|c| !is_bot(&c.user_agent));
    let (total, _) = check(&dir.path().join("out"), humans);
    assert!(
        (130_000..150_000).contains(&total),
        "about 70% of the clicks are people: {total}"
    );
}

#[test]
fn user_files_are_counted_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let clicks: Vec<String> = [(1, 0), (1, 59_999), (2, 1_000), (1, 60_000)]
        .iter()
        .map(|&(user_id, t)| {
            let click = Click {
                user_id,
                url: "/".into(),
                user_agent: "x".into(),
                ip: "1.1.1.1".into(),
                event_time: 1_700_000_000_000 + t,
            };
            serde_json::to_string(&click).unwrap()
        })
        .collect();
    std::fs::write(
        dir.path().join("clicks.jsonl"),
        clicks.join("\n") + "\nnot a click\n",
    )
    .unwrap();
    riffle(
        &[
            "demo",
            "windowed-count",
            "--input",
            "clicks.jsonl",
            "-p",
            "1",
            "--output",
            "out",
        ],
        dir.path(),
    );
    // 1 700 000 000 000 is 20 s into its minute: the minute ends between the first two clicks.
    let base = 1_699_999_980_000;
    let line = |user: u64, start: i64, count: u64| {
        format!(
            r#"{{"user_id":{user},"window_start":{start},"window_end":{},"count":{count}}}"#,
            start + 60_000
        )
    };
    let mut expected = vec![
        line(1, base, 1),
        line(2, base, 1),
        line(1, base + 60_000, 2),
    ];
    expected.sort();
    assert_eq!(sorted_lines(&dir.path().join("out/agg-clicks")), expected);
    assert_eq!(
        sorted_lines(&dir.path().join("out/dead-letter/Source__file_clicks_jsonl")).len(),
        1
    );
}
