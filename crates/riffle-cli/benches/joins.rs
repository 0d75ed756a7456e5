//! Throughput of the interval join and the window join per CPU-second at parallelism 1, and the
//! state an interval join holds per buffered record: the "Joins (issue 14)" figures of
//! BENCHMARKS.md.
//!
//! ```sh
//! cargo bench -p riffle-cli --bench joins              # every benchmark
//! cargo bench -p riffle-cli --bench joins -- interval  # those whose name contains "interval"
//! ```
//!
//! The jobs read records prepared in memory beforehand (a collection source per side), so the
//! figure is the engine's and the join's, not a generator's. CPU time is the whole process's
//! (both source tasks, the join task, the sink) while the job runs.

#![allow(unsafe_code)] // the counting allocator below

#[path = "common/mod.rs"]
mod common;
#[path = "common/counting.rs"]
mod counting;

use std::sync::Arc;
use std::time::Duration;

use riffle::operators::{IntervalJoinOperator, IntervalJoinSpec, JoinContext};
use riffle::sink::BlackholeSink;
use riffle::source::collection::CollectionSource;
use riffle::state::{HeapBackend, StateBackend};
use riffle::time::WatermarkStrategy;
use riffle::window::{Session, Sliding, Tumbling, Windows};
use riffle::{DataStream, Either, EnvConfig, StreamEnv};
use riffle_testing::MemoryKvBackend;

/// The allocator of the `riffle` binary, counting the bytes allocated while counting is on.
#[global_allocator]
static ALLOCATOR: counting::Counting = counting::Counting;

/// An impression or a click: (ad id, event time ms).
type Event = (u64, i64);

/// `n` events over `keys` ads, one per millisecond of event time on average, shuffled within
/// 2 s (the watermark allows 5 s); `phase` shifts the second side's times.
fn events(n: u64, keys: u64, phase: i64, seed: u64) -> Vec<Event> {
    let mut state = seed;
    (0..n)
        .map(|i| {
            // xorshift: a fixed, cheap pseudo-random sequence.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let jitter = (state % 2_000) as i64;
            (state % keys, i as i64 + phase - jitter)
        })
        .collect()
}

fn source(env: &StreamEnv, events: Vec<Event>) -> DataStream<Event> {
    env.from_source_with_watermarks(
        CollectionSource::new(events),
        WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(5))
            .with_timestamps(|e: &Event| e.1),
    )
}

/// Runs the job declared on `env`; returns (CPU seconds, records out of `operator`).
fn run(env: StreamEnv, operator: &str) -> (f64, u64) {
    let cpu_before = common::cpu_seconds("self");
    let result = env.execute().unwrap();
    let cpu = common::cpu_seconds("self") - cpu_before;
    let out = result.metrics.operator_total(operator).unwrap().records_out;
    (cpu, out)
}

fn config() -> EnvConfig {
    EnvConfig {
        parallelism: 1,
        ..EnvConfig::default()
    }
}

struct Figure {
    name: String,
    value: String,
    detail: String,
}

/// Impressions and clicks of 100K ads; a click joins the impressions of its ad of the 10 minutes
/// before it (the seed's ad demo), i.e. `between(0, 600 s)`.
fn interval(config: EnvConfig, backend: &str) -> Figure {
    let n = 2_000_000u64;
    let keys = 100_000;
    let impressions = events(n, keys, 0, 0x9E37_79B9_7F4A_7C15);
    let clicks = events(n, keys, 60_000, 0xD1B5_4A32_D192_ED03);
    let env = StreamEnv::with_config(config);
    source(&env, impressions)
        .key_by(|i| i.0)
        .interval_join(&source(&env, clicks).key_by(|c| c.0))
        .between(0, 600_000)
        .process(|i: Event, c: Event, ctx: &mut JoinContext<(u64, i64)>| ctx.emit((i.0, c.1 - i.1)))
        .sink(BlackholeSink::new());
    let (cpu, pairs) = run(env, "IntervalJoin");
    Figure {
        name: format!("interval join, between(0, 10 min), 100K keys, {backend} state"),
        value: format!(
            "{:.2}M input records per CPU-second",
            (2 * n) as f64 / cpu / 1e6
        ),
        detail: format!(
            "{n} impressions + {n} clicks (1 per ms of event time per side, disorder within 2 s, \
             watermark bound 5 s), parallelism 1; {pairs} joined pairs ({:.2}M pairs per \
             CPU-second); about 6 impressions per key buffered at a time",
            pairs as f64 / cpu / 1e6
        ),
    }
}

/// [`interval`] with RocksDB state (default state cache, 256 MB block cache).
fn interval_rocksdb() -> Figure {
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
    interval(config, "RocksDB")
}

/// Views and clicks of 100K users joined per user and window.
fn window(windows: Windows, label: &str) -> Figure {
    let n = 2_000_000u64;
    let keys = 100_000;
    let views = events(n, keys, 0, 0x9E37_79B9_7F4A_7C15);
    let clicks = events(n, keys, 0, 0xD1B5_4A32_D192_ED03);
    let env = StreamEnv::with_config(config());
    source(&env, views)
        .join(&source(&env, clicks))
        .where_key(|v| v.0)
        .equal_to(|c| c.0)
        .window(windows)
        .apply(|v: Event, c: Event| (v.0, c.1 - v.1))
        .sink(BlackholeSink::new());
    let (cpu, pairs) = run(env, "WindowJoin");
    Figure {
        name: format!("window join, {label}, 100K keys, heap state"),
        value: format!(
            "{:.2}M input records per CPU-second",
            (2 * n) as f64 / cpu / 1e6
        ),
        detail: format!(
            "{n} + {n} records (1 per ms of event time per side, disorder within 2 s, \
             watermark bound 5 s), parallelism 1; {pairs} joined pairs"
        ),
    }
}

/// The state of `n` buffered interval-join records (no watermark yet, so none is cleaned up),
/// in the operator's metrics and, on the heap, counted by the allocator.
fn state() -> Figure {
    let n = 200_000u64;
    let keys = 20_000u64;
    let op = || {
        IntervalJoinOperator::new(
            Arc::new(|e: &Either<Event, Event>| match e {
                Either::Left(l) => l.0,
                Either::Right(r) => r.0,
            }),
            IntervalJoinSpec::new(0, 600_000),
            |l: Event, r: Event, ctx: &mut JoinContext<i64>| ctx.emit(r.1 - l.1),
        )
    };
    let records: Vec<Either<Event, Event>> = (0..n)
        .map(|i| {
            // Left and right alternate; the right ones are before the left ones, so none joins
            // and every record stays buffered.
            let key = i % keys;
            if i % 2 == 0 {
                Either::Left((key, 1_000_000 + i as i64))
            } else {
                Either::Right((key, i as i64 - 1_000_000))
            }
        })
        .collect();
    let feed = |backend: &dyn StateBackend, count_heap: bool| {
        let (mut h, _work) = common::harness_on(backend, op());
        let before = counting::ALLOCATED.load(std::sync::atomic::Ordering::Relaxed);
        counting::COUNTING.store(count_heap, std::sync::atomic::Ordering::Relaxed);
        for record in &records {
            let ts = match record {
                Either::Left(l) => l.1,
                Either::Right(r) => r.1,
            };
            h.process(record.clone(), ts).unwrap();
        }
        counting::COUNTING.store(false, std::sync::atomic::Ordering::Relaxed);
        let allocated = counting::ALLOCATED.load(std::sync::atomic::Ordering::Relaxed) - before;
        assert!(h.take_values().is_empty());
        if !count_heap {
            // A store's entries reach it at a checkpoint, and its size estimate is refreshed
            // at most once a second: snapshot, wait, then let the operator report its size.
            h.snapshot(1).unwrap();
            std::thread::sleep(Duration::from_millis(1_100));
            h.watermark(i64::MIN + 1).unwrap();
        }
        let metrics = h.metrics();
        (metrics.state_entries, metrics.state_bytes, allocated)
    };
    let (heap_entries, heap_bytes, allocated) = feed(&HeapBackend, true);
    let (_, kv_bytes, _) = feed(&MemoryKvBackend, false);
    Figure {
        name: "interval join state per buffered record".into(),
        value: format!(
            "{} bytes on the heap (allocated), {} bytes serialized",
            allocated / n as isize,
            kv_bytes / n
        ),
        detail: format!(
            "{n} records of (u64, i64) buffered over {keys} keys (10 per key, 5 per side), no \
             watermark: heap allocations counted while buffering; serialized = the in-memory KV \
             store's bytes (keys and values as a store or checkpoint holds them); the heap \
             metric (table slots only) says {} bytes over {heap_entries} entries (buffers and \
             timers)",
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
        ("interval-heap", Box::new(|| interval(config(), "heap"))),
        ("interval-rocksdb", Box::new(interval_rocksdb)),
        (
            "window-tumbling",
            Box::new(|| window(Tumbling::of(Duration::from_secs(10)), "10 s tumbling")),
        ),
        (
            "window-sliding",
            Box::new(|| {
                window(
                    Sliding::of(Duration::from_secs(10), Duration::from_secs(5)),
                    "10 s sliding every 5 s",
                )
            }),
        ),
        (
            "window-session",
            Box::new(|| window(Session::with_gap(Duration::from_secs(5)), "5 s session gap")),
        ),
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
