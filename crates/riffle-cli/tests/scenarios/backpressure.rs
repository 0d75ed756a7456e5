//! Scenario 4, back-pressure: with a slow sink, the live table and the summary name the sink as
//! the bottleneck, show its upstream back-pressured, and memory stays flat.

use crate::riffle;

#[test]
fn the_slow_sink_is_named_the_bottleneck_and_memory_stays_flat() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = riffle(
        &[
            "demo",
            "backpressure",
            "--duration",
            "4",
            "--sink-rate",
            "2000",
            "-p",
            "2",
            "--output",
            "out",
        ],
        dir.path(),
    );
    assert!(stdout.contains("bottleneck: `slow sink`"), "{stdout}");
    let source_line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("Source: clicks-json"))
        .unwrap();
    assert!(
        source_line.trim_end().ends_with("HIGH"),
        "the source is back-pressured: {source_line}"
    );
    let sink_line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("slow sink"))
        .unwrap();
    assert!(sink_line.contains("<- bottleneck"), "{sink_line}");

    let emitted: u64 = number_after(&stdout, "the source emitted ");
    let written: u64 = number_after(&stdout, "the sink wrote ");
    let lines = super::sorted_lines(&dir.path().join("out")).len() as u64;
    assert_eq!(written, lines, "the sink's count is what is in its files");
    // About 2 x 2000 clicks/s for ~4 s, plus what was in flight when it stopped (drained at the
    // same pace); unthrottled, the source makes millions in that time.
    assert!(written < 60_000, "the sink is slow: {written}");
    assert!(emitted < 100_000, "the source followed the sink: {emitted}");

    let max_rss: u64 = number_after(&stdout, ", ");
    assert!(max_rss < 200, "memory stays flat: {max_rss} MB\n{stdout}");
}

/// The number that follows `prefix` on the line that contains it (for the memory line: the
/// last number of the line).
fn number_after(text: &str, prefix: &str) -> u64 {
    if prefix == ", " {
        let line = text
            .lines()
            .find(|l| l.contains("memory stayed flat"))
            .unwrap();
        let at_most = line.rsplit(", ").next().unwrap();
        return at_most.split_whitespace().next().unwrap().parse().unwrap();
    }
    let start = text.find(prefix).unwrap() + prefix.len();
    text[start..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}
