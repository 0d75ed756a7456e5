//! Rows per second into PostgreSQL through `PostgresSink`: append and changelog (upsert by key),
//! at-least-once and exactly-once (checkpoints every second), at parallelism 1 and 2, against
//! the server in `RIFFLE_POSTGRES_URL` (`./scripts/postgres.sh start && eval "$(./scripts/postgres.sh env)"`).
//!
//! `cargo bench -p riffle-postgres --bench sink [-- ROWS]` (default 300 000 rows).

use std::time::{Duration, Instant};

use postgres::{Client, NoTls};
use riffle::checkpoint::CheckpointConfig;
use riffle::source::datagen::DatagenSource;
use riffle::source::function::FnGenerator;
use riffle::{EnvConfig, StreamEnv};
use riffle_postgres::PostgresSink;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Order {
    id: i64,
    user_id: i64,
    amount: i64,
    note: String,
}

fn order(i: u64) -> Order {
    Order {
        id: i as i64,
        user_id: (i % 10_000) as i64,
        amount: (i % 997) as i64,
        note: format!("order {i}"),
    }
}

fn main() {
    let url = std::env::var("RIFFLE_POSTGRES_URL")
        .expect("RIFFLE_POSTGRES_URL (scripts/postgres.sh env)");
    let rows: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(300_000);
    let mut db = Client::connect(&url, NoTls).unwrap();
    println!("| mode | guarantee | p | rows | seconds | rows/s | table rows |");
    println!("|---|---|---|---|---|---|---|");
    for (mode, exactly_once, p) in [
        ("append", false, 1),
        ("append", true, 1),
        ("append", true, 2),
        ("upsert", false, 1),
        ("upsert", true, 1),
        ("upsert", true, 2),
    ] {
        db.batch_execute(
            "DROP TABLE IF EXISTS bench_orders;
             CREATE TABLE bench_orders (id bigint, user_id bigint, amount bigint, note text);
             DROP TABLE IF EXISTS bench_latest;
             CREATE TABLE bench_latest (id bigint, user_id bigint PRIMARY KEY, amount bigint, note text);",
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let env = StreamEnv::with_config(
            EnvConfig::default().with_parallelism(p).with_checkpoints(
                CheckpointConfig::default()
                    .with_interval(Some(Duration::from_secs(1)))
                    .with_storage(dir.path().display().to_string()),
            ),
        );
        let orders = env.from_source(DatagenSource::new(FnGenerator::new(order)).count(rows));
        let table = if mode == "append" {
            let sink = PostgresSink::append(&url, "bench_orders");
            orders.sink(if exactly_once {
                sink.exactly_once()
            } else {
                sink
            });
            "bench_orders"
        } else {
            let sink = PostgresSink::upsert(&url, "bench_latest", ["user_id"]);
            orders.sink(if exactly_once {
                sink.exactly_once()
            } else {
                sink
            });
            "bench_latest"
        };
        let started = Instant::now();
        env.execute().unwrap();
        let seconds = started.elapsed().as_secs_f64();
        let written: i64 = db
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .unwrap()
            .get(0);
        println!(
            "| {mode} | {} | {p} | {rows} | {seconds:.2} | {:.0} | {written} |",
            if exactly_once {
                "exactly-once"
            } else {
                "at-least-once"
            },
            rows as f64 / seconds
        );
    }
}
