//! Pattern matching (issue 32): events per CPU-second of a 3-step pattern with `within` over 1M
//! keys, on heap and RocksDB state, and the state one open partial match holds: the "Complex
//! event processing" figures of BENCHMARKS.md. (FlinkCEP beside it: `bench/peers/cep/`.)
//!
//! ```sh
//! cargo bench -p riffle-cli --bench cep              # every benchmark
//! cargo bench -p riffle-cli --bench cep -- heap      # those whose name contains "heap"
//! ```
//!
//! The job reads events prepared in memory beforehand (a collection source), so the figure is
//! the engine's and the matcher's, not a parser's. CPU time is the whole process's (source,
//! pattern and sink tasks) while the job runs.

#![allow(unsafe_code)] // the counting allocator below

#[path = "common/mod.rs"]
mod common;
#[path = "common/counting.rs"]
mod counting;

use std::sync::Arc;
use std::time::Duration;

use riffle::cep::{CepOperator, Match, Pattern, PatternContext, PatternProcessFunction};
use riffle::sink::BlackholeSink;
use riffle::source::collection::CollectionSource;
use riffle::state::{HeapBackend, StateBackend};
use riffle::time::WatermarkStrategy;
use riffle::{EnvConfig, StreamEnv};
use riffle_testing::MemoryKvBackend;

/// The allocator of the `riffle` binary, counting the bytes allocated while counting is on.
#[global_allocator]
static ALLOCATOR: counting::Counting = counting::Counting;

/// (key, kind, event time ms): kinds 0, 1, 2 are the pattern's steps, 3 is noise.
type Event = (u64, u8, i64);

const MINUTE: i64 = 60_000;

/// `keys` keys, one starting every millisecond of event time: each has its first step, noise,
/// its second step a minute later and (nine keys in ten) its third two minutes later. Sorted by
/// time, then shuffled within 2 s.
fn events(keys: u64) -> Vec<Event> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut events = Vec::with_capacity(keys as usize * 4);
    for key in 0..keys {
        let start = key as i64;
        events.push((key, 0, start));
        events.push((key, 3, start + 30_000 + (next() % 20_000) as i64));
        events.push((key, 1, start + MINUTE + (next() % 10_000) as i64));
        if key % 10 != 0 {
            events.push((key, 2, start + 2 * MINUTE + (next() % 10_000) as i64));
        }
    }
    let mut arrivals: Vec<(i64, Event)> = events
        .into_iter()
        .map(|e| (e.2 + (next() % 2_000) as i64, e))
        .collect();
    arrivals.sort_unstable_by_key(|(at, e)| (*at, e.0));
    arrivals.into_iter().map(|(_, e)| e).collect()
}

fn pattern() -> Pattern<Event> {
    Pattern::begin("first")
        .where_(|e: &Event| e.1 == 0)
        .followed_by("second")
        .where_(|e: &Event| e.1 == 1)
        .followed_by("third")
        .where_(|e: &Event| e.1 == 2)
        .within(Duration::from_secs(5 * 60))
}

/// Counts matches and timeouts into the output.
#[derive(Clone)]
struct Outcome;

impl PatternProcessFunction<u64, Event, bool> for Outcome {
    fn process_match(
        &mut self,
        _: &u64,
        _: Match<Event>,
        ctx: &mut PatternContext<Event, bool>,
    ) -> riffle::Result<()> {
        ctx.emit(true)
    }

    fn process_timed_out(
        &mut self,
        _: &u64,
        _: Match<Event>,
        ctx: &mut PatternContext<Event, bool>,
    ) -> riffle::Result<()> {
        ctx.emit(false)
    }
}

struct Figure {
    name: String,
    value: String,
    detail: String,
}

fn config() -> EnvConfig {
    EnvConfig {
        parallelism: 1,
        ..EnvConfig::default()
    }
}

/// The pattern over 1M keys (4M events less the missing third steps) at parallelism 1.
fn throughput(config: EnvConfig, backend: &str) -> Figure {
    let keys = 1_000_000;
    let events = events(keys);
    let n = events.len() as u64;
    let env = StreamEnv::with_config(config);
    env.from_source_with_watermarks(
        CollectionSource::new(events),
        WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(5))
            .with_timestamps(|e: &Event| e.2),
    )
    .key_by(|e| e.0)
    .pattern(pattern())
    .process(Outcome)
    .name("pattern")
    .sink(BlackholeSink::new());
    let cpu_before = common::cpu_seconds("self");
    let wall = std::time::Instant::now();
    let result = env.execute().unwrap();
    let cpu = common::cpu_seconds("self") - cpu_before;
    let wall = wall.elapsed().as_secs_f64();
    let out = result
        .metrics
        .operator_total("pattern")
        .unwrap()
        .records_out;
    Figure {
        name: format!("3-step pattern with within, 1M keys, {backend} state"),
        value: format!("{:.2}M events per CPU-second", n as f64 / cpu / 1e6),
        detail: format!(
            "{n} events (first, noise, second, third per key; a key starts every ms of event \
             time, its steps 1 and 2 min apart, one key in ten lacks the third), disorder \
             within 2 s, watermark bound 5 s, within 5 min, parallelism 1; {out} matches and \
             timeouts; {cpu:.2} CPU-s, {wall:.2} s wall; about 120K partial matches open at a time"
        ),
    }
}

/// [`throughput`] with RocksDB state (default state cache, 256 MB block cache).
fn throughput_rocksdb() -> Figure {
    let local = tempfile::tempdir().unwrap();
    let config = EnvConfig {
        state_backend: Arc::new(
            riffle_rocksdb::RocksDbBackend::new()
                .memory(256 << 20)
                .write_buffer(64 << 20),
        ),
        local_state_dir: local.path().to_path_buf(),
        ..config()
    };
    throughput(config, "RocksDB")
}

/// The state of `n` open partial matches (each has taken its first and second step and waits
/// for the third), on the heap (allocations counted) and serialized (as a store holds them).
fn state() -> Figure {
    let n = 100_000u64;
    let op = || CepOperator::new(|e: &Event| e.0, &pattern(), Outcome).unwrap();
    let feed = |backend: &dyn StateBackend, count_heap: bool| {
        let (mut h, _work) = common::harness_on(backend, op());
        let before = counting::ALLOCATED.load(std::sync::atomic::Ordering::Relaxed);
        counting::COUNTING.store(count_heap, std::sync::atomic::Ordering::Relaxed);
        for key in 0..n {
            h.process((key, 0, key as i64), key as i64).unwrap();
            h.process((key, 1, key as i64 + 1_000), key as i64 + 1_000)
                .unwrap();
        }
        // Matched up to the second step; every deadline is still ahead.
        h.watermark(n as i64 + 2_000).unwrap();
        counting::COUNTING.store(false, std::sync::atomic::Ordering::Relaxed);
        let allocated = counting::ALLOCATED.load(std::sync::atomic::Ordering::Relaxed) - before;
        assert!(h.take_values().is_empty());
        if !count_heap {
            h.snapshot(1).unwrap();
            std::thread::sleep(Duration::from_millis(1_100));
            h.watermark(n as i64 + 2_001).unwrap();
        }
        let metrics = h.metrics();
        (metrics.state_entries, metrics.state_bytes, allocated)
    };
    let (heap_entries, heap_bytes, allocated) = feed(&HeapBackend, true);
    let (_, kv_bytes, _) = feed(&MemoryKvBackend, false);
    Figure {
        name: "state per open partial match".into(),
        value: format!(
            "{} bytes on the heap (allocated), {} bytes serialized",
            allocated / n as isize,
            kv_bytes / n
        ),
        detail: format!(
            "{n} keys, each with a partial match of two (u64, u8, i64) events waiting for its \
             third (the events, the run, its branches, the key's timer): heap allocations counted \
             while matching (includes memory freed again); serialized = the in-memory KV store's \
             bytes; the heap metric (table slots only) says {} bytes over {heap_entries} entries",
            heap_bytes / n
        ),
    }
}

fn main() {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    type Bench = Box<dyn Fn() -> Figure>;
    let benches: Vec<(&str, Bench)> = vec![
        ("pattern-heap", Box::new(|| throughput(config(), "heap"))),
        ("pattern-rocksdb", Box::new(throughput_rocksdb)),
        ("state", Box::new(state)),
    ];
    println!("| benchmark | measured | detail |");
    println!("|---|---|---|");
    for (key, bench) in benches {
        if !filter.is_empty() && !filter.iter().any(|f| key.contains(f.as_str())) {
            continue;
        }
        let figure = bench();
        println!("| {} | {} | {} |", figure.name, figure.value, figure.detail);
        std::thread::sleep(Duration::from_millis(500));
    }
}
