//! Throughput and state size of the regular join and the deduplications (issue 14), with
//! RocksDB state and, for comparison in the same run, heap state: the figures of BENCHMARKS.md.
//!
//! ```sh
//! cargo bench -p riffle-cli --bench regular_join            # every case
//! cargo bench -p riffle-cli --bench regular_join -- left    # those whose name contains "left"
//! ```
//!
//! Each case runs a real job (two source tasks, the hash shuffle, the keyed two-input task, a
//! blackhole sink) over records prepared in memory, at parallelism 1, and divides the records
//! read by the CPU seconds the whole process used (`/proc/self/stat`), as the other benches do.
//! Every case checks its output count against what the input must give.

#[path = "common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::Duration;

use riffle::sink::BlackholeSink;
use riffle::state::{HeapBackend, StateBackend};
use riffle::{EnvConfig, StreamEnv};

/// The allocator of the `riffle` binary, so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An order: id (the key), customer, amount.
type Order = (u64, u64, u32);
/// A shipment of an order: order id, carrier.
type Shipment = (u64, u32);

fn rocksdb() -> Arc<dyn StateBackend> {
    Arc::new(
        riffle_rocksdb::RocksDbBackend::new()
            .memory(256 << 20)
            .write_buffer(64 << 20)
            .state_cache(256 << 20),
    )
}

/// What a run measured.
struct Run {
    records: u64,
    wall: f64,
    cpu: f64,
    out: u64,
    state_entries: u64,
    state_bytes: u64,
}

impl Run {
    fn per_cpu_second(&self) -> f64 {
        self.records as f64 / self.cpu / 1e6
    }
}

fn config(backend: Arc<dyn StateBackend>, local: &std::path::Path) -> EnvConfig {
    EnvConfig {
        parallelism: 1,
        state_backend: backend,
        local_state_dir: local.to_path_buf(),
        ..EnvConfig::default()
    }
}

/// `n` orders and the shipments of the even ones, in reverse order: a left join pads the odd
/// orders for good, and the orders whose shipment comes after them (about the first third,
/// depending on how fast each source runs) until it comes.
fn orders_and_shipments(n: u64) -> (Vec<Order>, Vec<Shipment>) {
    // A permutation of 0..n (999 983 is a prime that does not divide n).
    let shuffle = |i: u64| i * 999_983 % n;
    let orders = (0..n)
        .map(|i| (shuffle(i), i % 10_000, (i % 1_000) as u32))
        .collect();
    let shipments = (0..n)
        .rev()
        .filter(|i| i % 2 == 0)
        .map(|i| (shuffle(i), (i % 7) as u32))
        .collect();
    (orders, shipments)
}

/// One run of the join of `orders` and `shipments`.
fn join_run(
    backend: Arc<dyn StateBackend>,
    orders: &[Order],
    shipments: &[Shipment],
    left: bool,
) -> Run {
    let local = tempfile::tempdir().unwrap();
    let env = StreamEnv::with_config(config(backend, local.path()));
    let builder = env
        .from_iter(orders.to_vec())
        .key_by(|o| o.0)
        .join_regular(&env.from_iter(shipments.to_vec()).key_by(|s| s.0))
        .with_state_ttl(Duration::from_secs(3600));
    let builder = if left {
        builder.left()
    } else {
        builder.inner()
    };
    builder
        .apply(|o, s| (o.map(|o| (o.0, o.2)), s.map(|s| s.1)))
        .sink(BlackholeSink::new());
    let cpu_before = common::cpu_seconds("self");
    let result = env.execute().unwrap();
    let cpu = common::cpu_seconds("self") - cpu_before;
    let operator = result
        .metrics
        .operator_total("RegularJoin")
        .expect("the join ran");
    Run {
        records: (orders.len() + shipments.len()) as u64,
        wall: result.duration.as_secs_f64(),
        cpu,
        out: result.records_out("RegularJoin"),
        state_entries: operator.state_entries,
        state_bytes: operator.state_bytes,
    }
}

/// One run of a deduplication of `events` (id, payload).
fn dedup_run(backend: Arc<dyn StateBackend>, events: &[(u64, u64)], keep_last: bool) -> Run {
    let local = tempfile::tempdir().unwrap();
    let env = StreamEnv::with_config(config(backend, local.path()));
    let keyed = env.from_iter(events.to_vec()).key_by(|e| e.0);
    let name = if keep_last {
        keyed
            .deduplicate_keep_last(Duration::from_secs(3600))
            .sink(BlackholeSink::new());
        "DeduplicateKeepLast"
    } else {
        keyed
            .deduplicate(Duration::from_secs(3600))
            .sink(BlackholeSink::new());
        "Deduplicate"
    };
    let cpu_before = common::cpu_seconds("self");
    let result = env.execute().unwrap();
    let cpu = common::cpu_seconds("self") - cpu_before;
    let operator = result.metrics.operator_total(name).expect("the dedup ran");
    Run {
        records: events.len() as u64,
        wall: result.duration.as_secs_f64(),
        cpu,
        out: result.records_out(name),
        state_entries: operator.state_entries,
        state_bytes: operator.state_bytes,
    }
}

fn row(case: &str, backend: &str, run: &Run, note: &str) {
    println!(
        "| {case} | {backend} | **{:.2}M records per CPU-second** ({:.2}M/s wall, {:.1} CPU-s) | {} out | {} entries, {:.1} MB ({} bytes per entry) | {note} |",
        run.per_cpu_second(),
        run.records as f64 / run.wall / 1e6,
        run.cpu,
        run.out,
        run.state_entries,
        run.state_bytes as f64 / 1e6,
        run.state_bytes / run.state_entries.max(1),
    );
}

fn main() {
    // `cargo bench` passes `--bench`; the other arguments select cases by name.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let selected = |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f));
    let n = 1_000_000u64;
    let (orders, shipments) = orders_and_shipments(n);
    println!(
        "| Case | State | Throughput (input records) | Output | State at the end (backend's estimate) | Note |"
    );
    println!("|---|---|---|---|---|---|");
    let backends: [(&str, Arc<dyn StateBackend>); 2] =
        [("RocksDB", rocksdb()), ("heap", Arc::new(HeapBackend))];
    for (backend_name, backend) in &backends {
        if selected("inner") {
            let run = join_run(backend.clone(), &orders, &shipments, false);
            assert_eq!(run.out, n / 2, "one joined row per shipped order");
            row(
                "inner join, 1M orders x 0.5M shipments, 1M keys",
                backend_name,
                &run,
                "",
            );
        }
        if selected("left") {
            let run = join_run(backend.clone(), &orders, &shipments, true);
            // Every order once; each shipment that came after its order retracts a padded row
            // and adds the joined one: n + 2 x (shipments after their order).
            let retracted = (run.out - n) / 2;
            assert_eq!(run.out, n + 2 * retracted);
            assert!(retracted <= n / 2);
            row(
                "left join, same input",
                backend_name,
                &run,
                &format!("{retracted} padded rows retracted (-D then +I)"),
            );
        }
        if selected("hot") {
            // 200K orders on 100 keys (2 000 rows per key), 100 shipments on other keys: no
            // output, the cost is keeping a hot key's rows under a TTL.
            let hot: Vec<Order> = (0..200_000u64).map(|i| (i % 100, i, 1)).collect();
            let cold: Vec<Shipment> = (0..100u64).map(|i| (1_000 + i, 0)).collect();
            let run = join_run(backend.clone(), &hot, &cold, false);
            assert_eq!(run.out, 0, "no key on both sides");
            row(
                "inner join with a TTL, 200K orders on 100 keys, no match",
                backend_name,
                &run,
                "a hot key's rows appended, not rewritten",
            );
        }
        // Every id twice, the second time 1M events after the first.
        let events: Vec<(u64, u64)> = (0..2 * n).map(|i| (i * 999_983 % n, i)).collect();
        if selected("dedup-first") {
            let run = dedup_run(backend.clone(), &events, false);
            assert_eq!(run.out, n, "each id once");
            row(
                "dedup keep first, 2M events over 1M ids",
                backend_name,
                &run,
                "",
            );
        }
        if selected("dedup-last") {
            let run = dedup_run(backend.clone(), &events, true);
            assert_eq!(run.out, 3 * n, "+I, then -U and +U");
            row(
                "dedup keep last (changelog), same input",
                backend_name,
                &run,
                "",
            );
        }
    }
}
