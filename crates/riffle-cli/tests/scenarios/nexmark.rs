//! `riffle nexmark generate` / `run` and `riffle generate clicks`: files that read back exactly.

use std::collections::BTreeMap;

use riffle::source::datagen::Generator;
use riffle_cli::clicks::is_bot;
use riffle_cli::demos::UserCount;
use riffle_clicks::{Click, ClickGenerator, ClicksConfig};
use riffle_nexmark::{Event, NexmarkConfig};

use crate::{riffle, sorted_lines};

fn lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn nexmark_files_hold_the_generated_events_and_queries_read_them_back() {
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--events",
        "3000",
        "--events-per-second",
        "1000",
        "--out-of-order-group-size",
        "50",
    ];
    let mut args = vec!["nexmark", "generate", "--output", "gen"];
    args.extend(flags);
    let stdout = riffle(&args, dir.path());
    assert!(
        stdout.contains("3000 events (60 persons, 180 auctions, 2760 bids)"),
        "{stdout}"
    );
    let expected = NexmarkConfig {
        events: Some(3_000),
        events_per_second: 1_000.0,
        out_of_order_group_size: 50,
        ..NexmarkConfig::default()
    }
    .generate_all();
    let events: Vec<Event> = lines(&dir.path().join("gen/events/part-0.jsonl"))
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events, expected, "the tagged stream, in event-number order");
    let bids: Vec<riffle_nexmark::Bid> = lines(&dir.path().join("gen/bid/part-0.jsonl"))
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let want: Vec<_> = expected.into_iter().filter_map(Event::into_bid).collect();
    assert_eq!(bids, want, "the bid directory");

    // The same query on the files (p = 2) and on the generator (p = 1): the same rows.
    for (name, input) in [("from-files", true), ("generated", false)] {
        let mut args = vec!["nexmark", "run", "--query", "q0", "--output", name];
        if input {
            args.extend(["--input", "gen", "-p", "2"]);
        } else {
            args.extend(flags);
            args.extend(["-p", "1"]);
        }
        let stdout = riffle(&args, dir.path());
        assert!(stdout.contains("| q0 |"), "{stdout}");
    }
    let from_files = sorted_lines(&dir.path().join("from-files/q0"));
    assert_eq!(from_files.len(), 2_760);
    assert_eq!(from_files, sorted_lines(&dir.path().join("generated/q0")));
}

#[test]
fn nexmark_run_all_prints_one_row_per_query() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = riffle(
        &["nexmark", "run", "--all", "--events", "2000", "-p", "2"],
        dir.path(),
    );
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("| q") && !l.starts_with("| query"))
        .collect();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r.split('|').nth(1).unwrap().trim())
        .collect();
    assert_eq!(
        names,
        [
            "q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8", "q9", "q10", "q11", "q12", "q13",
            "q14", "q15", "q16", "q17", "q18", "q19", "q20", "q21", "q22"
        ]
    );
    for row in rows {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert_eq!((cells[2], cells[3]), ("2", "2000"), "{row}");
    }
    // q0 passes every bid (46 in 50 events); q10 writes every bid into its partitions.
    assert!(stdout.contains("| q0 | 2 | 2000 | 1840 |"), "{stdout}");
    assert!(stdout.contains("| q10 | 2 | 2000 | 1840 |"), "{stdout}");
}

/// `--sql` runs the nexmark project's SQL text of a query on the same events, measured the same
/// way: the same rows reach the sink (changes, for an updating query), and `--all --sql` pairs
/// each query's DataStream and SQL runs with their CPU ratio.
#[test]
fn nexmark_run_sql_measures_the_sql_text_beside_the_datastream_program() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = riffle(
        &[
            "nexmark", "run", "--query", "q2", "--sql", "--events", "20000", "-p", "2",
        ],
        dir.path(),
    );
    let datastream = riffle(
        &[
            "nexmark", "run", "--query", "q2", "--events", "20000", "-p", "2",
        ],
        dir.path(),
    );
    let results = |out: &str, name: &str| -> String {
        let row = out
            .lines()
            .find(|l| l.starts_with(&format!("| {name} |")))
            .unwrap_or_else(|| panic!("no row {name}: {out}"));
        row.split('|').nth(4).unwrap().trim().to_string()
    };
    assert_eq!(results(&stdout, "q2 (SQL)"), results(&datastream, "q2"));
    assert!(stdout.contains("| q2 (SQL) | 2 | 20000 |"), "{stdout}");
    let all = riffle(
        &[
            "nexmark", "run", "--all", "--sql", "--events", "2000", "-p", "1",
        ],
        dir.path(),
    );
    assert!(all.contains("| q17 (SQL) | 1 | 2000 |"), "{all}");
    assert!(
        all.contains("| query | SQL CPU per event / DataStream's |"),
        "{all}"
    );
    // Every query has its SQL text, q6 too (which Flink SQL cannot run).
    assert!(all.contains("| q6 (SQL) | 1 | 2000 |"), "{all}");
}

#[test]
fn nexmark_names_a_query_it_does_not_implement() {
    let dir = tempfile::tempdir().unwrap();
    let out = crate::riffle_raw(&["nexmark", "run", "--query", "q23"], dir.path());
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("q23 is not implemented: not a query of the nexmark project's Flink suite"),
        "{stderr}"
    );
}

#[test]
fn generated_clicks_read_back_through_the_demo() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = riffle(
        &[
            "generate",
            "clicks",
            "--count",
            "5000",
            "--users",
            "200",
            "--disorder-ms",
            "1500",
            "--late-share",
            "0.01",
            "--seed",
            "7",
            "--output",
            "in/clicks.jsonl",
        ],
        dir.path(),
    );
    assert!(stdout.contains("5000 clicks"), "{stdout}");
    let generator = ClickGenerator::new(ClicksConfig {
        seed: 7,
        users: 200,
        max_out_of_orderness_ms: 1_500,
        late_share: 0.01,
        ..ClicksConfig::default()
    });
    let clicks: Vec<Click> = lines(&dir.path().join("in/clicks.jsonl"))
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let expected: Vec<Click> = (0..5_000).map(|i| generator.generate(i)).collect();
    assert_eq!(clicks, expected);

    let stdout = riffle(
        &[
            "demo",
            "--input",
            "in/clicks.jsonl",
            "--output",
            "out",
            "--no-web",
            "-p",
            "1",
        ],
        dir.path(),
    );
    assert!(stdout.contains("riffle demo: 5000 clicks"), "{stdout}");
    // Every click of a person is counted in its window or written as late: exactly.
    let mut counts: BTreeMap<(u64, i64), u64> = BTreeMap::new();
    for line in sorted_lines(&dir.path().join("out/agg-clicks")) {
        let c: UserCount = serde_json::from_str(&line).unwrap();
        let entry = counts.entry((c.user_id, c.window_start)).or_default();
        *entry = (*entry).max(c.count);
    }
    let late = sorted_lines(&dir.path().join("out/late-clicks")).len() as u64;
    let people = expected.iter().filter(|c| !is_bot(&c.user_agent)).count() as u64;
    assert!(late > 0, "some clicks are late");
    assert_eq!(counts.values().sum::<u64>() + late, people);
}
