//! Hostile input through `riffle demo`: event times at the edges of `i64`, and an input
//! directory with subdirectories and hidden entries. Exact output, dead letters with their
//! reasons, and the summary's counts.

use std::path::Path;

use riffle::source::DeadLetter;

use crate::{riffle, sorted_lines};

fn click(user: u64, time: i64) -> String {
    format!(
        r#"{{"user_id":{user},"url":"/","user_agent":"Mozilla/5.0","ip":"10.0.0.1","event_time":{time}}}"#
    )
}

/// Writes the input tree under `dir/clicks`: in event-time order per file, so nothing is late.
fn write_input(dir: &Path) {
    let root = dir.join("clicks");
    std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
    std::fs::create_dir_all(root.join(".hidden")).unwrap();
    let lines = |clicks: &[(u64, i64)]| {
        clicks
            .iter()
            .map(|&(u, t)| click(u, t))
            .collect::<Vec<_>>()
            .join("\n")
    };
    // No newline at the end of the first file, CRLF in the second: lines all the same.
    std::fs::write(
        root.join("a.jsonl"),
        lines(&[
            (3, i64::MIN),
            (3, i64::MIN + 1),
            (2, -90_000),
            (1, -1),
            (1, 0),
        ]),
    )
    .unwrap();
    std::fs::write(
        root.join("sub/b.jsonl"),
        lines(&[(1, 59_999), (4, i64::MAX - 1)]).replace('\n', "\r\n") + "\r\n",
    )
    .unwrap();
    std::fs::write(
        root.join("sub/deeper/c.jsonl"),
        lines(&[(4, i64::MAX)]) + "\n",
    )
    .unwrap();
    // Hidden: never read.
    std::fs::write(root.join(".hidden/x.jsonl"), click(9, 0) + "\n").unwrap();
    std::fs::write(root.join(".partial.jsonl"), click(9, 0) + "\n").unwrap();
}

/// Every dead letter under `dir`, recursively, as (directory name, position, error).
fn dead_letters(dir: &Path) -> Vec<(String, String, String)> {
    let mut letters = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        for line in sorted_lines(&path) {
            let letter: DeadLetter = serde_json::from_str(&line).unwrap();
            letters.push((name.clone(), letter.position, letter.error));
        }
    }
    letters.sort();
    letters
}

fn run(dir: &Path, policy: &str) -> String {
    riffle(
        &[
            "demo",
            "--input",
            "clicks",
            "--output",
            "out",
            "-p",
            "1",
            "--bad-records",
            policy,
        ],
        dir,
    )
}

fn counts(dir: &Path) -> Vec<String> {
    sorted_lines(&dir.join("out/agg-clicks"))
}

fn expected_counts() -> Vec<String> {
    let mut expected = vec![
        r#"{"user_id":1,"window_start":-60000,"window_end":0,"count":1}"#.to_string(),
        r#"{"user_id":1,"window_start":0,"window_end":60000,"count":2}"#.to_string(),
        r#"{"user_id":2,"window_start":-120000,"window_end":-60000,"count":1}"#.to_string(),
    ];
    expected.sort();
    expected
}

#[test]
fn edge_event_times_and_nested_directories_through_the_main_job() {
    let dir = tempfile::tempdir().unwrap();
    write_input(dir.path());
    let stdout = run(dir.path(), "dead-letter");
    assert_eq!(counts(dir.path()), expected_counts());
    let late = dir.path().join("out/late-clicks");
    assert!(!late.exists() || sorted_lines(&late).is_empty());
    let letters = dead_letters(&dir.path().join("out/dead-letter"));
    let source = "Source__file_clicks".to_string();
    let window = "count_per_user".to_string();
    let ahead = |t: i64| {
        let (position, error) = (format!("event time {t}"), "ahead of the wall clock");
        (position, error)
    };
    assert_eq!(letters.len(), 4, "{letters:?}");
    assert_eq!(
        letters[0],
        (
            source.clone(),
            "event time -9223372036854775808".into(),
            "event time -9223372036854775808 ms is outside the supported range \
             -9223372036854775807..=9223372036854775807 ms"
                .into()
        )
    );
    for (letter, t) in letters[1..3].iter().zip([i64::MAX - 1, i64::MAX]) {
        let (position, error) = ahead(t);
        assert_eq!((&letter.0, &letter.1), (&source, &position));
        assert!(letter.2.contains(error), "{letter:?}");
    }
    assert_eq!(
        letters[3],
        (
            window,
            "event time -9223372036854775807".into(),
            "time -9223372036854775807 ms cannot be placed in a window: its window \
             [-9223372036854780000, -9223372036854720000) reaches beyond the timestamp range \
             -9223372036854775808..=9223372036854775807 ms"
                .into()
        )
    );
    assert!(
        stdout.contains(
            "  files read                          3  <- clicks (files, subdirectories included)"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("  bad records                         4  -> out/dead-letter/"),
        "{stdout}"
    );
}

#[test]
fn the_summary_shows_zero_bad_records_and_skipped_ones() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("clicks/2026/01")).unwrap();
    std::fs::write(
        dir.path().join("clicks/2026/01/15.jsonl"),
        click(1, 0) + "\n",
    )
    .unwrap();
    let stdout = run(dir.path(), "dead-letter");
    assert_eq!(
        counts(dir.path()),
        [r#"{"user_id":1,"window_start":0,"window_end":60000,"count":1}"#]
    );
    assert!(
        stdout.contains(
            "  files read                          1  <- clicks (file, subdirectories included)"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("  bad records                         0\n"),
        "{stdout}"
    );
    // Skipping: the same counts, the bad records counted; the window's dead letters stay.
    let dir = tempfile::tempdir().unwrap();
    write_input(dir.path());
    let stdout = run(dir.path(), "skip");
    assert_eq!(counts(dir.path()), expected_counts());
    assert!(
        stdout.contains(
            "  bad records                         4  (3 skipped, 1 -> out/dead-letter/)"
        ),
        "{stdout}"
    );
    let letters = dead_letters(&dir.path().join("out/dead-letter"));
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0].0, "count_per_user");
}
