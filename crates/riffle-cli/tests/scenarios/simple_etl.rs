//! Scenario 1, simple ETL: parse, drop bots, enrich with the country, write JSON lines.

use riffle::source::datagen::Generator;
use riffle_cli::clicks::{IpCountryTable, enrich, is_bot};
use riffle_clicks::{ClickGenerator, ClicksConfig};

use crate::{riffle, riffle_raw, sorted_lines};

#[test]
fn generated_clicks_are_filtered_and_enriched_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = riffle(
        &[
            "demo", "etl", "--count", "5000", "--users", "300", "--output", "out", "-p", "2",
        ],
        dir.path(),
    );

    let generator = ClickGenerator::new(ClicksConfig {
        users: 300,
        ..ClicksConfig::default()
    });
    let mut expected: Vec<String> = (0..5000)
        .map(|i| generator.generate(i))
        .filter(|c| !is_bot(&c.user_agent))
        .map(|c| serde_json::to_string(&enrich(c, IpCountryTable::embedded())).unwrap())
        .collect();
    expected.sort();
    let bots = 5000 - expected.len();
    assert!((1300..1700).contains(&bots), "about 30% bots, got {bots}");

    assert_eq!(sorted_lines(&dir.path().join("out")), expected);
    assert!(
        stdout.contains(&format!("read          {:>12}", 5000)),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("bots dropped  {bots:>12}")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("written       {:>12}", expected.len())),
        "{stdout}"
    );
    // The latency markers at the sink, as the REST API reports them: each of the 2 source
    // subtasks sends one when it starts.
    let latency = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("sink latency  p50 "))
        .unwrap_or_else(|| panic!("no sink latency line: {stdout}"));
    // "0.012 ms, p99 0.034 ms, max 0.034 ms  (2 latency markers)"
    let words: Vec<&str> = latency.split_whitespace().collect();
    let number = |i: usize| -> f64 {
        words[i]
            .trim_start_matches('(')
            .parse()
            .unwrap_or_else(|_| panic!("a number at word {i}: {latency}"))
    };
    assert_eq!(
        (words[2], words[5], words[9], words[10]),
        ("p99", "max", "latency", "markers)"),
        "{latency}"
    );
    let (p50, p99, max, markers) = (number(0), number(3), number(6), number(8));
    assert!(p50 <= p99 && p99 <= max, "{latency}");
    assert!(markers >= 2.0, "{latency}");
}

#[test]
fn user_files_with_a_bad_line_go_through_and_the_bad_line_is_dead_lettered() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("clicks");
    std::fs::create_dir(&input).unwrap();
    std::fs::write(
        input.join("day1.jsonl"),
        concat!(
            r#"{"user_id":1,"url":"/a","user_agent":"Mozilla/5.0 (X11; Linux x86_64) Firefox/133.0","ip":"17.1.0.9","event_time":1000}"#,
            "\n",
            r#"{"user_id":2,"url":"/b","user_agent":"Mozilla/5.0 (compatible; Googlebot/2.1)","ip":"17.2.0.9","event_time":2000}"#,
            "\n",
            "{\"user_id\":3, truncated\n",
            r#"{"user_id":4,"url":"/d","user_agent":"Mozilla/5.0 (iPhone)","ip":"10.0.0.1","event_time":4000}"#,
            "\n"
        ),
    )
    .unwrap();
    let stdout = riffle(
        &[
            "demo", "etl", "--input", "clicks", "--output", "out", "-p", "1",
        ],
        dir.path(),
    );
    assert_eq!(
        sorted_lines(&dir.path().join("out")),
        vec![
            r#"{"user_id":1,"url":"/a","ip":"17.1.0.9","country":"NL","event_time":1000}"#,
            r#"{"user_id":4,"url":"/d","ip":"10.0.0.1","country":"ZZ","event_time":4000}"#,
        ]
    );
    let dead = sorted_lines(&dir.path().join("out/dead-letter/parse"));
    assert_eq!(dead.len(), 1);
    let letter: riffle::source::DeadLetter = serde_json::from_str(&dead[0]).unwrap();
    assert_eq!(
        (letter.source.as_str(), letter.payload.as_str()),
        ("parse", "{\"user_id\":3, truncated")
    );
    assert!(
        stdout.contains("bad records              1  -> out/dead-letter/"),
        "{stdout}"
    );
}

#[test]
fn bad_flags_fail_at_start_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    for (args, flag) in [
        (vec!["demo", "etl", "--input", "missing.jsonl"], "`--input`"),
        (vec!["demo", "etl", "-p", "0"], "`parallelism`"),
        (vec!["demo", "etl", "--bot-share", "1.5"], "`--bot-share`"),
        (
            vec!["demo", "etl", "--buffer-timeout-ms", "0"],
            "`buffer_timeout`",
        ),
        (
            vec!["demo", "etl", "--allow-non-restored-state"],
            "`--allow-non-restored-state`",
        ),
    ] {
        let output = riffle_raw(&args, dir.path());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} should fail");
        assert!(
            stderr.contains(&format!("invalid configuration: {flag}")),
            "{args:?}: {stderr}"
        );
    }
    let output = riffle_raw(&["demo", "etl", "--bad-records", "ignore"], dir.path());
    assert!(String::from_utf8_lossy(&output.stderr).contains("unknown bad-record policy `ignore`"));
}

#[test]
fn ctrl_c_stops_an_unbounded_run_cleanly_with_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args([
            "demo", "etl", "--count", "0", "--rate", "20000", "--output", "out", "-p", "2",
        ])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "a clean stop exits 0: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stderr).contains("stopping: draining"));
    let read: u64 = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("read"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let written: u64 = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("written"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let bots: u64 = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("bots dropped"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(read > 10_000, "it ran: {read}");
    assert_eq!(read, written + bots, "nothing in flight was lost");
    assert_eq!(sorted_lines(&dir.path().join("out")).len() as u64, written);
}

/// One file of ~4 MB (four 1 MiB ranges) at `-p 2`: both subtasks read it (each writes its
/// own part file, the pipeline being chained), and together they write exactly what `-p 1`
/// writes.
#[test]
fn one_file_at_parallelism_2_is_read_by_both_subtasks_with_the_output_of_parallelism_1() {
    let dir = tempfile::tempdir().unwrap();
    riffle(
        &[
            "generate",
            "clicks",
            "--count",
            "30000",
            "--users",
            "500",
            "--output",
            "clicks.jsonl",
        ],
        dir.path(),
    );
    let size = std::fs::metadata(dir.path().join("clicks.jsonl"))
        .unwrap()
        .len();
    assert!(size > 3 << 20, "more than three 1 MiB ranges: {size} bytes");
    for (p, out) in [("1", "out1"), ("2", "out2")] {
        riffle(
            &[
                "demo",
                "etl",
                "--input",
                "clicks.jsonl",
                "--output",
                out,
                "--no-web",
                "-p",
                p,
            ],
            dir.path(),
        );
    }
    let one = sorted_lines(&dir.path().join("out1"));
    let two = sorted_lines(&dir.path().join("out2"));
    assert!(one.len() > 15_000, "{} clicks written", one.len());
    assert!(
        one == two,
        "{} lines at -p 1, {} at -p 2",
        one.len(),
        two.len()
    );
    let part = |subtask: usize| {
        std::fs::read_to_string(dir.path().join(format!("out2/part-{subtask}.jsonl")))
            .map_or(0, |text| text.lines().count())
    };
    let (first, second) = (part(0), part(1));
    assert_eq!(first + second, two.len());
    assert!(
        first.min(second) * 3 > first.max(second),
        "both subtasks read a share: {first} and {second} clicks"
    );
}
