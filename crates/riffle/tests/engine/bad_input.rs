//! Malformed input lines follow the source's policy: dead-letter (default), skip, or fail. Nothing
//! else is lost and every bad line is counted.

use riffle::sink::CollectSink;
use riffle::source::file::FileSource;
use riffle::source::{BadRecordPolicy, DeadLetter};
use riffle::{EnvConfig, Error, StreamEnv};
use serde::{Deserialize, Serialize};

use crate::run;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
struct Event {
    id: u64,
}

/// 100 good lines, with 3 bad ones among them, in two files.
fn input(dir: &std::path::Path) -> std::path::PathBuf {
    let input = dir.join("input");
    std::fs::create_dir_all(&input).unwrap();
    let mut a: Vec<String> = (0..60).map(|i| format!("{{\"id\":{i}}}")).collect();
    a.insert(10, "{\"id\": oops}".into());
    a.insert(30, "{\"id\":-1}".into());
    let mut b: Vec<String> = (60..100).map(|i| format!("{{\"id\":{i}}}")).collect();
    b.insert(5, "\u{1}binary".into());
    std::fs::write(input.join("a.jsonl"), a.join("\n")).unwrap();
    std::fs::write(input.join("b.jsonl"), b.join("\n")).unwrap();
    input
}

fn env(dir: &std::path::Path) -> StreamEnv {
    StreamEnv::with_config(EnvConfig {
        parallelism: 2,
        buffer_size: 8,
        dead_letter_dir: dir.join("dead"),
        ..EnvConfig::default()
    })
}

#[test]
fn malformed_lines_go_to_the_dead_letter_files_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let env = env(dir.path());
    let (sink, out) = CollectSink::new();
    env.from_source(FileSource::<Event>::json(input(dir.path())))
        .sink(sink);
    let result = run(&env).unwrap();
    assert_eq!(
        out.sorted(),
        (0..100).map(|id| Event { id }).collect::<Vec<_>>()
    );
    assert_eq!(result.bad_records(), 3);
    let dead_dir = std::fs::read_dir(dir.path().join("dead"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut letters: Vec<DeadLetter> = Vec::new();
    for part in std::fs::read_dir(&dead_dir).unwrap() {
        let text = std::fs::read_to_string(part.unwrap().path()).unwrap();
        letters.extend(
            text.lines()
                .map(|l| serde_json::from_str::<DeadLetter>(l).unwrap()),
        );
    }
    letters.sort_by(|a, b| (&a.split, &a.position).cmp(&(&b.split, &b.position)));
    let found: Vec<(String, String, String)> = letters
        .iter()
        .map(|l| {
            (
                l.split.rsplit('/').next().unwrap().to_string(),
                l.position.clone(),
                l.payload.clone(),
            )
        })
        .collect();
    assert_eq!(
        found,
        vec![
            ("a.jsonl".into(), "line 11".into(), "{\"id\": oops}".into()),
            ("a.jsonl".into(), "line 31".into(), "{\"id\":-1}".into()),
            ("b.jsonl".into(), "line 6".into(), "\u{1}binary".into()),
        ]
    );
    assert!(
        letters
            .iter()
            .all(|l| !l.error.is_empty() && l.source.starts_with("Source: file"))
    );
}

#[test]
fn the_dead_letter_output_can_be_consumed_by_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let env = env(dir.path());
    let (sink, out) = CollectSink::new();
    let (dead, dead_out) = CollectSink::new();
    let events = env.from_source(FileSource::<Event>::json(input(dir.path())));
    events.sink(sink);
    events
        .dead_letters()
        .map(|l: DeadLetter| l.position)
        .sink(dead);
    run(&env).unwrap();
    assert_eq!(out.len(), 100);
    assert_eq!(dead_out.sorted(), vec!["line 11", "line 31", "line 6"]);
    assert!(
        !dir.path().join("dead").exists(),
        "no file when the job takes the dead letters itself"
    );
}

#[test]
fn skip_counts_and_fail_names_the_position() {
    let dir = tempfile::tempdir().unwrap();
    let env = env(dir.path());
    let (sink, out) = CollectSink::new();
    env.from_source(
        FileSource::<Event>::json(input(dir.path())).bad_records(BadRecordPolicy::Skip),
    )
    .sink(sink);
    let result = run(&env).unwrap();
    assert_eq!((out.len(), result.bad_records()), (100, 3));
    assert!(!dir.path().join("dead").exists());

    let env = self::env(dir.path());
    let (sink, _) = CollectSink::new();
    env.from_source(
        FileSource::<Event>::json(input(dir.path()).join("a.jsonl"))
            .bad_records(BadRecordPolicy::Fail),
    )
    .sink(sink);
    match run(&env) {
        Err(Error::BadRecord {
            position, message, ..
        }) => {
            assert!(position.ends_with("a.jsonl line 11"), "{position}");
            assert!(message.contains("expected value"), "{message}");
        }
        other => panic!("expected a bad-record error, got {other:?}"),
    }
}

#[test]
fn fail_on_dead_letters_fails_the_run_after_writing_everything() {
    let dir = tempfile::tempdir().unwrap();
    let env = env(dir.path());
    env.configure(|c| c.fail_on_dead_letters = true);
    let (sink, out) = CollectSink::new();
    env.from_source(FileSource::<Event>::json(input(dir.path())))
        .sink(sink);
    match env.execute() {
        Err(Error::DeadLettered { count, location }) => {
            assert_eq!(count, 3);
            assert_eq!(location, format!("{}/", dir.path().join("dead").display()));
        }
        other => panic!("expected DeadLettered, got {other:?}"),
    }
    // The run itself completed: every good record reached the sink.
    assert_eq!(out.sorted().len(), 100);

    // A clean input passes with the setting on.
    let clean = tempfile::tempdir().unwrap();
    let input = clean.path().join("ok.jsonl");
    std::fs::write(&input, "{\"id\":1}\n{\"id\":2}\n").unwrap();
    let strict = self::env(clean.path());
    strict.configure(|c| c.fail_on_dead_letters = true);
    strict
        .from_source(FileSource::<Event>::json(input))
        .sink(CollectSink::new().0);
    assert_eq!(strict.execute().unwrap().bad_records(), 0);
}
