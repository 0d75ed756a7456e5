//! A device with a wrong clock (issue 12): one click a day ahead of the stream, in one of three
//! input files, must not make the clicks after it late. It is counted in its own window and in
//! the summary as a watermark outlier; with the outlier rule turned off the same input loses
//! thousands of clicks to the late output, which is what the rule prevents.

use std::collections::BTreeMap;

use riffle::source::datagen::Generator;
use riffle_cli::clicks::is_bot;
use riffle_cli::demos::UserCount;
use riffle_clicks::{Click, ClickGenerator, ClicksConfig};

use crate::{riffle, sorted_lines};

const DAY_MS: i64 = 24 * 3600 * 1000;

/// Three files of in-order clicks, the second twice as long as the others; it gets a click one
/// day ahead after its 4,500th line.
fn write_input(dir: &std::path::Path) -> Vec<Click> {
    let generator = ClickGenerator::new(ClicksConfig {
        users: 500,
        events_per_second: 1_000.0,
        max_out_of_orderness_ms: 0,
        late_share: 0.0,
        bot_share: 0.0,
        ..ClicksConfig::default()
    });
    let mut files = [String::new(), String::new(), String::new()];
    let mut clicks = Vec::new();
    for i in 0..30_000u64 {
        let click = generator.generate(i);
        let file = [0, 1, 1, 2][(i % 4) as usize];
        files[file] += &serde_json::to_string(&click).unwrap();
        files[file].push('\n');
        clicks.push(click.clone());
        if i == 9_001 {
            let mut outlier = click.clone();
            outlier.user_id = 1_000_001;
            outlier.event_time += DAY_MS;
            files[file] += &serde_json::to_string(&outlier).unwrap();
            files[file].push('\n');
            clicks.push(outlier);
        }
    }
    std::fs::create_dir_all(dir).unwrap();
    for (n, content) in files.iter().enumerate() {
        std::fs::write(dir.join(format!("clicks-{n}.jsonl")), content).unwrap();
    }
    clicks
}

fn run(dir: &std::path::Path, out: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "demo",
        "--no-web",
        "--input",
        "in",
        "--output",
        out,
        "--window-secs",
        "10",
        "--lateness-secs",
        "0",
        "--out-of-orderness-secs",
        "1",
        "--deterministic",
    ];
    args.extend_from_slice(extra);
    riffle(&args, dir)
}

fn summary_count(stdout: &str, label: &str) -> u64 {
    let line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with(label))
        .unwrap_or_else(|| panic!("no `{label}` in the summary:\n{stdout}"));
    line.trim_start()[label.len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn one_click_a_day_ahead_does_not_make_the_stream_late() {
    let dir = tempfile::tempdir().unwrap();
    let clicks = write_input(&dir.path().join("in"));
    let mut expected: BTreeMap<(u64, i64), u64> = BTreeMap::new();
    for click in clicks.iter().filter(|c| !is_bot(&c.user_agent)) {
        let window = click.event_time - click.event_time.rem_euclid(10_000);
        *expected.entry((click.user_id, window)).or_default() += 1;
    }

    let stdout = run(dir.path(), "out", &[]);
    assert_eq!(summary_count(&stdout, "watermark outliers"), 1, "{stdout}");
    assert_eq!(summary_count(&stdout, "late clicks"), 0, "{stdout}");
    let out = dir.path().join("out");
    assert!(!out.join("late-clicks").exists(), "no late click written");
    let mut counted: BTreeMap<(u64, i64), u64> = BTreeMap::new();
    for line in sorted_lines(&out.join("agg-clicks")) {
        let count: UserCount = serde_json::from_str(&line).unwrap();
        assert!(!count.update, "{line}");
        let previous = counted.insert((count.user_id, count.window_start), count.count);
        assert!(previous.is_none(), "{line} twice");
    }
    assert_eq!(counted.len(), expected.len());
    assert!(
        counted == expected,
        "the counts differ from the batch computation"
    );
    assert_eq!(
        counted.get(&(1_000_001, {
            let t = clicks
                .iter()
                .find(|c| c.user_id == 1_000_001)
                .unwrap()
                .event_time;
            t - t.rem_euclid(10_000)
        })),
        Some(&1),
        "the outlier is counted in its own window"
    );

    // The same input without the rule: the outlier drags its file's watermark a day ahead, and
    // once the shorter files end, the rest of that file is late.
    let stdout = run(dir.path(), "unguarded", &["--max-watermark-jump-secs", "0"]);
    assert_eq!(summary_count(&stdout, "watermark outliers"), 0, "{stdout}");
    let late = summary_count(&stdout, "late clicks");
    assert!(
        late > 1_000,
        "{late} late clicks without the rule\n{stdout}"
    );
}
