//! Change data capture throughput (`PostgresCdcSource`): the snapshot of a table of ROWS rows,
//! then one transaction updating every row (2 × ROWS changes out: `-U`, `+U`), then ROWS/10
//! transactions of 10 updates each; changes per second from the job's start (snapshot) or the
//! update's commit (stream) until the last change reached the sink; the job's CPU time too.
//! Against the server in `RIFFLE_POSTGRES_URL` (`./scripts/postgres.sh start && eval "$(./scripts/postgres.sh env)"`).
//!
//! `cargo bench -p riffle-postgres --bench cdc [-- ROWS]` (default 200 000).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};
use riffle::checkpoint::CheckpointConfig;
use riffle::{Change, EnvConfig, StreamEnv};
use riffle_postgres::{CdcRow, PostgresCdcSource};

fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

fn wait_for(count: &AtomicU64, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(600);
    while count.load(Ordering::Relaxed) < n {
        assert!(
            Instant::now() < deadline,
            "stuck at {} of {n}",
            count.load(Ordering::Relaxed)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn main() {
    let url = std::env::var("RIFFLE_POSTGRES_URL")
        .expect("RIFFLE_POSTGRES_URL (scripts/postgres.sh env)");
    let rows: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(200_000);
    let mut db = Client::connect(&url, NoTls).unwrap();
    db.batch_execute(&format!(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = 'bench_cdc';
         DROP PUBLICATION IF EXISTS bench_cdc;
         DROP TABLE IF EXISTS bench_cdc;
         CREATE TABLE bench_cdc (id bigint PRIMARY KEY, user_id bigint, amount int, note text);
         INSERT INTO bench_cdc SELECT i, i % 10000, i % 997, 'order ' || i FROM generate_series(1, {rows}) i;"
    ))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnv::with_config(
        EnvConfig::default().with_parallelism(2).with_checkpoints(
            CheckpointConfig::default()
                .with_interval(Some(Duration::from_secs(1)))
                .with_storage(dir.path().display().to_string()),
        ),
    );
    let count = Arc::new(AtomicU64::new(0));
    let seen = count.clone();
    PostgresCdcSource::new(&url, ["bench_cdc"])
        .slot("bench_cdc")
        .publication("bench_cdc")
        .poll_interval(Duration::from_millis(20))
        .changelog(&env)
        .sink_fn(move |_: Change<CdcRow>| {
            seen.fetch_add(1, Ordering::Relaxed);
            Ok(())
        });
    println!("| phase | changes | seconds | changes/s | job CPU-s | changes per CPU-s |");
    println!("|---|---|---|---|---|---|");
    let report = |phase: &str, changes: u64, started: Instant, cpu: f64| {
        let seconds = started.elapsed().as_secs_f64();
        let used = cpu_seconds() - cpu;
        println!(
            "| {phase} | {changes} | {seconds:.2} | {:.0} | {used:.2} | {:.0} |",
            changes as f64 / seconds,
            changes as f64 / used
        );
    };
    let (started, cpu) = (Instant::now(), cpu_seconds());
    let handle = env.execute_async().unwrap();
    wait_for(&count, rows);
    report("snapshot", rows, started, cpu);

    let (started, cpu) = (Instant::now(), cpu_seconds());
    db.batch_execute("UPDATE bench_cdc SET amount = amount + 1")
        .unwrap();
    wait_for(&count, rows * 3);
    report("stream, one transaction", rows * 2, started, cpu);

    let (started, cpu) = (Instant::now(), cpu_seconds());
    let mut statements = String::new();
    for first in (1..=rows).step_by(10) {
        statements.push_str(&format!(
            "UPDATE bench_cdc SET amount = amount + 1 WHERE id BETWEEN {first} AND {};",
            first + 9
        ));
    }
    db.batch_execute(&statements).unwrap();
    wait_for(&count, rows * 5);
    report("stream, transactions of 10 rows", rows * 2, started, cpu);
    handle.stop();
    handle.wait().unwrap();
    db.batch_execute("SELECT pg_drop_replication_slot('bench_cdc'); DROP PUBLICATION bench_cdc;")
        .unwrap();
}
