//! The names deprecated by the API's one-vocabulary change (CHANGELOG, "one name per thing")
//! still work for this release, and do what the new names do.
#![allow(deprecated)]

use riffle::operators::{CoProcessFunction, ProcessContext};
use riffle::sink::{CollectSink, FileSink, json};
use riffle::source::BadRecordPolicy;
use riffle::source::file::FileSource;
use riffle::{EnvConfig, Result, StreamEnv};

#[derive(Clone)]
struct Tag;

impl CoProcessFunction<u64, String, String> for Tag {
    fn process_element1(&mut self, n: u64, ctx: &mut ProcessContext<String>) -> Result<()> {
        ctx.emit(format!("number {n}"))
    }
    fn process_element2(&mut self, w: String, ctx: &mut ProcessContext<String>) -> Result<()> {
        ctx.emit(format!("word {w}"))
    }
}

#[test]
fn process_on_connected_streams_is_process_function() {
    let env = StreamEnv::with_config(EnvConfig::deterministic());
    let (old, old_out) = CollectSink::new();
    let (new, new_out) = CollectSink::new();
    let numbers = env.from_iter(vec![7u64]);
    let words = env.from_iter(vec!["x".to_string()]);
    numbers.connect(&words).process(Tag).sink(old);
    numbers.connect(&words).process_function(Tag).sink(new);
    env.execute().unwrap();
    assert_eq!(old_out.sorted(), vec!["number 7", "word x"]);
    assert_eq!(old_out.sorted(), new_out.sorted());
}

fn number(bytes: &[u8]) -> serde_json::Result<u64> {
    serde_json::from_slice(bytes)
}

fn even(text: &str) -> serde_json::Result<u64> {
    serde_json::from_str::<u64>(text).and_then(|n| {
        if n % 2 == 0 {
            Ok(n)
        } else {
            Err(serde::de::Error::custom("odd"))
        }
    })
}

#[test]
fn the_old_decoder_and_encoder_names_read_and_write_as_the_new_ones() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("numbers.jsonl");
    std::fs::write(&input, "2\n3\n4\n").unwrap();
    let env = StreamEnv::with_config(EnvConfig {
        dead_letter_dir: dir.path().join("dead"),
        ..EnvConfig::deterministic()
    });
    let (parsed, parsed_out) = CollectSink::new();
    env.from_source(FileSource::json_with(&input, number))
        .map(|n: u64| n.to_string())
        .parse_json_with(BadRecordPolicy::DeadLetter, even as fn(&str) -> _)
        .sink(parsed);
    env.from_iter(vec![1u64, 2]).sink(
        FileSink::<u64>::new(dir.path().join("out")).encoder(|n, out| json::push_u64(out, *n)),
    );
    env.execute().unwrap();
    assert_eq!(parsed_out.sorted(), vec![2u64, 4]);
    let mut written = Vec::new();
    for file in std::fs::read_dir(dir.path().join("out")).unwrap() {
        let text = std::fs::read_to_string(file.unwrap().path()).unwrap();
        written.extend(text.lines().map(str::to_string));
    }
    written.sort();
    assert_eq!(written, vec!["1", "2"]);
}

#[test]
fn the_old_metrics_snapshot_names_are_the_new_types() {
    let operator: Option<riffle::metrics::OperatorSnapshot> =
        None::<riffle::metrics::OperatorMetricsSnapshot>;
    let task: Option<riffle::metrics::TaskSnapshot> = None::<riffle::metrics::TaskMetricsSnapshot>;
    assert!(operator.is_none() && task.is_none());
}
