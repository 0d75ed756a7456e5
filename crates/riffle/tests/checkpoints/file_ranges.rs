//! One file read in parallel as byte ranges, through failures and savepoints: a failure in the
//! middle of the ranges restores every range at its own position, and a savepoint taken at one
//! parallelism restores at another (2 -> 1, 1 -> 3), the ranges landing on other subtasks. The
//! committed output is exact: every line once, and every window count as computed from the file
//! (a range's watermark resuming too high would make clicks late and drop them).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use riffle::aggregate::Count;
use riffle::checkpoint::RestoreFrom;
use riffle::sink::ExactlyOnceFileSink;
use riffle::source::datagen::Generator;
use riffle::source::file::FileSource;
use riffle::testing::fail_once_after;
use riffle::time::WatermarkStrategy;
use riffle::window::Tumbling;
use riffle::{EnvConfig, JobResult, StreamEnv};
use riffle_clicks::{Click, ClickGenerator, ClicksConfig};

use crate::{committed, run};

/// Clicks in the file.
const CLICKS: u64 = 20_000;
/// Bytes per range: the file (~2 MB) is cut into about 60 ranges.
const SPLIT_SIZE: u64 = 32 << 10;

/// Writes the clicks as JSON lines, in event-time order (none late for any bound), 100 per
/// second of event time: a range holds about 3 s of event time, more than the watermark bound,
/// so subtasks reading different ranges have watermarks seconds apart. Returns them.
fn write_clicks(path: &Path) -> Vec<Click> {
    let generator = ClickGenerator::new(ClicksConfig {
        users: 200,
        late_share: 0.0,
        max_out_of_orderness_ms: 0,
        events_per_second: 100.0,
        ..ClicksConfig::default()
    });
    let clicks: Vec<Click> = (0..CLICKS).map(|i| generator.generate(i)).collect();
    let mut text = String::new();
    for click in &clicks {
        text.push_str(&serde_json::to_string(click).unwrap());
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
    clicks
}

fn line(c: &Click) -> String {
    format!("{} {} {}", c.user_id, c.event_time, c.url)
}

/// What the job must commit: every click's line, and the count per user and 1 s window.
fn expected(clicks: &[Click]) -> (Vec<String>, Vec<String>) {
    let mut lines: Vec<String> = clicks.iter().map(|c| format!("\"{}\"", line(c))).collect();
    lines.sort();
    let mut counts = BTreeMap::<(u64, i64), u64>::new();
    for c in clicks {
        *counts
            .entry((c.user_id, c.event_time - c.event_time.rem_euclid(1_000)))
            .or_default() += 1;
    }
    let mut windows: Vec<String> = counts
        .into_iter()
        .map(|((user, start), n)| format!("\"{user} {start} {n}\""))
        .collect();
    windows.sort();
    (lines, windows)
}

/// Reads `input` at `parallelism` in ranges of `split_size` bytes, slowly (a pause every 20
/// clicks), with `crash` on the way; writes each click's line to `out/lines` and the count per
/// user and 1 s window to `out/windows`, exactly once; checkpoints every 40 ms.
fn job(
    input: &Path,
    dir: &Path,
    parallelism: usize,
    split_size: u64,
    crash: impl Fn(Click) -> Click + Send + Sync + 'static,
) -> StreamEnv {
    let env = StreamEnv::with_config(riffle::testing::recovering_config(
        parallelism,
        &dir.join("chk"),
        Duration::from_millis(40),
    ));
    let seen = std::sync::atomic::AtomicU64::new(0);
    let clicks = env
        .from_source_with_watermarks(
            FileSource::<Click>::json(input).split_size(split_size),
            WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(1))
                .with_timestamps(|c: &Click| c.event_time),
        )
        .uid("clicks")
        .map(move |c| {
            if seen
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                .is_multiple_of(20)
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            c
        })
        .uid("slow")
        .map(crash)
        .uid("crash");
    clicks
        .map(|c| line(&c))
        .sink(ExactlyOnceFileSink::new(dir.join("out/lines")))
        .uid("lines");
    clicks
        .key_by(|c| c.user_id)
        .window(Tumbling::of(Duration::from_secs(1)))
        .aggregate(Count)
        .uid("count")
        .map(|r| format!("{} {} {}", r.key, r.window_start, r.value))
        .sink(ExactlyOnceFileSink::new(dir.join("out/windows")))
        .uid("windows");
    env
}

fn source_name(input: &Path) -> String {
    format!("Source: file {}", input.display())
}

/// Records each source subtask emitted.
fn read_per_subtask(result: &JobResult, input: &Path) -> Vec<u64> {
    let name = source_name(input);
    let mut read: Vec<(usize, u64)> = result
        .metrics
        .operators
        .iter()
        .filter(|o| o.name == name)
        .map(|o| (o.subtask, o.records_out))
        .collect();
    read.sort();
    read.into_iter().map(|(_, n)| n).collect()
}

fn late_dropped(result: &JobResult) -> u64 {
    result
        .metrics
        .operators
        .iter()
        .map(|o| o.late_records_dropped)
        .sum()
}

fn assert_exact(dir: &Path, clicks: &[Click], what: &str) {
    let (lines, windows) = expected(clicks);
    let got = committed(&dir.join("out/lines"));
    assert!(
        got == lines,
        "{what}: {} lines committed, {} clicks in the file",
        got.len(),
        lines.len()
    );
    let got = committed(&dir.join("out/windows"));
    assert!(
        got == windows,
        "{what}: {} window counts committed, {} expected",
        got.len(),
        windows.len()
    );
}

#[test]
fn a_failure_in_the_middle_of_the_ranges_restores_each_at_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("clicks.jsonl");
    let clicks = write_clicks(&input);
    let env = job(
        &input,
        dir.path(),
        2,
        SPLIT_SIZE,
        fail_once_after(CLICKS / 2),
    );
    let result = run(&env).unwrap();
    assert_eq!(result.restarts, 1);
    assert!(
        result.restores[0] > 0,
        "restored a checkpoint: {:?}",
        result.restores
    );
    let read = read_per_subtask(&result, &input);
    assert_eq!(read.len(), 2);
    assert!(
        read.iter().all(|&n| n > 0) && read.iter().sum::<u64>() < CLICKS,
        "both subtasks resumed their ranges, none re-read the file: {read:?}"
    );
    assert_eq!(late_dropped(&result), 0);
    assert_exact(dir.path(), &clicks, "after a failure at parallelism 2");
}

/// Copies a directory tree.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Runs the job at `from` parallelism (ranges of `split_sizes.0`), stops it with a savepoint
/// part-way, and runs it again from the savepoint at `to` parallelism (ranges of
/// `split_sizes.1`): the output of both runs together is exact.
fn savepoint_at_one_parallelism_restores_at_another(
    from: usize,
    to: usize,
    split_sizes: (u64, u64),
) {
    let base = tempfile::tempdir().unwrap();
    let input = base.path().join("clicks.jsonl");
    let clicks = write_clicks(&input);
    let first = job(&input, base.path(), from, split_sizes.0, |c| c);
    let handle = first.execute_async().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let savepoint = handle
        .stop_with_savepoint(base.path().join("savepoint").to_str().unwrap())
        .unwrap();
    let result = handle.wait().unwrap();
    let before: u64 = read_per_subtask(&result, &input).iter().sum();
    assert!(
        before > 0 && before < CLICKS,
        "stopped part-way: {before} clicks read"
    );

    let dir = tempfile::tempdir().unwrap();
    copy_dir(&base.path().join("out"), &dir.path().join("out"));
    let second = job(&input, dir.path(), to, split_sizes.1, |c| c);
    second.configure(|c: &mut EnvConfig| {
        c.checkpoints.restore = Some(RestoreFrom::Savepoint(savepoint.clone()))
    });
    let result = run(&second).unwrap();
    let after = read_per_subtask(&result, &input);
    assert_eq!(after.len(), to);
    assert_eq!(
        before + after.iter().sum::<u64>(),
        CLICKS,
        "every click read once over both runs: {before} then {after:?}"
    );
    assert_eq!(late_dropped(&result), 0, "event time resumed where it was");
    assert_exact(
        dir.path(),
        &clicks,
        &format!("savepoint at parallelism {from}, restored at {to}"),
    );
}

#[test]
fn a_savepoint_at_parallelism_2_restores_at_1() {
    savepoint_at_one_parallelism_restores_at_another(2, 1, (SPLIT_SIZE, SPLIT_SIZE));
}

#[test]
fn a_savepoint_at_parallelism_1_restores_at_3() {
    savepoint_at_one_parallelism_restores_at_another(1, 3, (SPLIT_SIZE, SPLIT_SIZE));
}

/// A savepoint of the file read as one split (as before files were cut into ranges: the split
/// is the path, its position an offset in the file) restores onto ranges at parallelism 2: each
/// range resumes from the file's position (from its start, inside, or not at all).
#[test]
fn a_savepoint_of_the_whole_file_restores_onto_ranges() {
    savepoint_at_one_parallelism_restores_at_another(1, 2, (u64::MAX, SPLIT_SIZE));
}

/// One subtask owns every range of the file: it reads them one after the other, so the file
/// comes out in its own order (ranges read side by side would interleave).
#[test]
fn one_subtask_reads_the_ranges_of_a_file_in_file_order() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("clicks.jsonl");
    let clicks = write_clicks(&input);
    // Batches smaller than a range: ranges read side by side would alternate.
    let env = StreamEnv::with_config(EnvConfig {
        parallelism: 1,
        buffer_size: 16,
        ..EnvConfig::default()
    });
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let into = seen.clone();
    env.from_source(FileSource::<Click>::json(&input).split_size(SPLIT_SIZE))
        .sink_fn(move |c| {
            into.lock().unwrap().push(line(&c));
            Ok(())
        });
    env.execute().unwrap();
    let expected: Vec<String> = clicks.iter().map(line).collect();
    assert!(*seen.lock().unwrap() == expected, "read in file order");
}
