//! `riffle serve` under load (issue 30): a materialized view ingesting generated Nexmark bids as
//! fast as it can, first alone, then with point-lookup clients at a steady rate and subscribers
//! following every change, all over the Postgres wire protocol (tokio-postgres).
//!
//! ```sh
//! cargo bench -p riffle-serve --bench serve_load -- [events] [lookup clients] [lookups/s each] [subscribers] [retained changes]
//! ```
//!
//! With `--rocksdb` (in any mode), the views keep their state, and their rows, in RocksDB; with
//! `--no-shared-sources`, each view reads its source itself.
//!
//! Prints the ingest rate without and with readers, lookup latency p50/p99/max, and the
//! subscribers' lag (from the moment the view applied a change to the moment a subscriber read
//! it) p50/p99/max.
//!
//! ```sh
//! cargo bench -p riffle-serve --bench serve_load -- soak [seconds] [lookup clients] [lookups/s each] [subscribers]
//! ```
//!
//! A soak: the view (10,000 bidders: its state stops growing) ingests an endless stream for
//! that long with its readers; the process's memory and the view's ingest rate are printed
//! every 10 seconds.
//!
//! ```sh
//! cargo bench -p riffle-serve --bench serve_load -- point [events] [seconds] [clients, comma-separated]
//! ```
//!
//! Point lookups without ingest, as sysbench's `oltp_point_select` runs them (what RisingWave
//! publishes): the view reads its events to the end, then each number of clients sends
//! prepared point selects back to back (a closed loop, no pacing) for that long; prints the
//! lookups per second and the latency's average, p50, p95 and p99.
//!
//! ```sh
//! ./scripts/kafka.sh start && eval "$(./scripts/kafka.sh env)"
//! cargo bench -p riffle-serve --features kafka --bench serve_load -- shared [records] [views]
//! ```
//!
//! Several views over one Kafka topic of JSON records (written first, from a datagen table),
//! with their sources shared (`riffle serve`'s default) and with each view reading the topic
//! itself (`--no-shared-sources`): the time and the process's CPU until every view has read
//! every record, and how many records were read from the topic.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use hdrhistogram::Histogram;
use riffle_serve::{ServeConfig, Server};
use tokio_postgres::NoTls;

/// The allocator the `riffle` command runs with.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn arg(i: usize, default: u64) -> u64 {
    std::env::args()
        .filter(|a| !a.starts_with("--"))
        .nth(i)
        .map_or(default, |a| a.parse().expect("a number"))
}

fn view_sql(events: u64, soak: bool) -> String {
    // A soak's view has a bounded number of keys: its memory should stay flat.
    let bidder = if soak {
        "MOD(bid.bidder, 10000)"
    } else {
        "bid.bidder"
    };
    format!(
        "CREATE TABLE bids (event_type INT, bid ROW<auction BIGINT, bidder BIGINT, price BIGINT>)
             WITH ('connector' = 'nexmark', 'events.num' = '{events}');
         CREATE MATERIALIZED VIEW per_bidder AS
             SELECT {bidder} AS bidder, COUNT(*) AS bids, MAX(bid.price) AS highest
             FROM bids WHERE event_type = 2 GROUP BY {bidder}"
    )
}

/// The server's settings, its data in `dir`; with `--rocksdb`, the views' state (their rows
/// too) in RocksDB.
fn serve_config(dir: &std::path::Path) -> ServeConfig {
    let mut config = ServeConfig::new(dir.join("data"));
    if std::env::args().any(|a| a == "--rocksdb") {
        config.env.state_backend = Arc::new(riffle_rocksdb::RocksDbBackend::new());
        println!("views in RocksDB");
    }
    if std::env::args().any(|a| a == "--no-shared-sources") {
        config.shared_sources = false;
        println!("each view reads its source itself");
    }
    config
}

/// How long a soak runs (`None`: the run reads its events and ends).
type Soak = Option<Duration>;

struct Run {
    seconds: f64,
    lookups: Histogram<u64>,
    lag: Histogram<u64>,
    rss_mb: u64,
    changes: u64,
}

/// A server of `config` on a loopback port of its own, its URL, and a runtime of 2 threads for
/// the clients.
fn start(mut config: ServeConfig) -> (Server, String, tokio::runtime::Runtime) {
    config.listen = "127.0.0.1:0".parse().unwrap();
    let server = Server::start(config).unwrap();
    let url = format!(
        "host=127.0.0.1 port={} user=riffle",
        server.local_addr().port()
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    (server, url, rt)
}

fn run(events: u64, clients: u64, rate: u64, subscribers: u64, retained: usize, soak: Soak) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let mut config = serve_config(dir.path());
    config.max_subscriber_lag = usize::MAX / 2;
    config.retained_changes = retained;
    let (server, url, rt) = start(config);
    let connect = |url: String| async move {
        let (client, connection) = tokio_postgres::connect(&url, NoTls).await.unwrap();
        tokio::spawn(connection);
        client
    };
    let admin = rt.block_on(connect(url.clone()));
    let done = Arc::new(AtomicBool::new(false));
    let lookups = Arc::new(Mutex::new(Histogram::<u64>::new(3).unwrap()));
    let lag = Arc::new(Mutex::new(Histogram::<u64>::new(3).unwrap()));
    // When the view reached each progress: sampled every millisecond.
    let timeline: Arc<Mutex<Vec<(Instant, u64)>>> = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    rt.block_on(admin.batch_execute(&view_sql(events, soak.is_some())))
        .unwrap();
    let view = server.engine().view("per_bidder").unwrap();
    {
        let (timeline, done, view) = (timeline.clone(), done.clone(), view.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                let progress = view.progress();
                let mut timeline = timeline.lock().unwrap();
                timeline.push((Instant::now(), progress));
                // The last 10 to 20 seconds are enough to place a subscriber's reads (and a
                // soak's memory stays the server's).
                if timeline.len() > 20_000 {
                    timeline.drain(..10_000);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
    }
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (url, done, lookups) = (url.clone(), done.clone(), lookups.clone());
        tasks.push(rt.spawn(async move {
            let client = connect(url).await;
            let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate.max(1)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut key = c * 7919;
            while !done.load(Ordering::Relaxed) {
                tick.tick().await;
                key = (key * 31 + 17) % 10_000 + 1000;
                let at = Instant::now();
                client
                    .simple_query(&format!("SELECT * FROM per_bidder WHERE bidder = {key}"))
                    .await
                    .unwrap();
                lookups
                    .lock()
                    .unwrap()
                    .record(at.elapsed().as_micros() as u64)
                    .unwrap();
            }
        }));
    }
    let received = Arc::new(AtomicU64::new(0));
    for _ in 0..subscribers {
        let (url, done, lag, timeline, received) = (
            url.clone(),
            done.clone(),
            lag.clone(),
            timeline.clone(),
            received.clone(),
        );
        tasks.push(rt.spawn(async move {
            let client = connect(url).await;
            let copy = client
                .copy_out("COPY (SUBSCRIBE per_bidder) TO STDOUT")
                .await
                .unwrap();
            let mut copy = Box::pin(copy);
            let mut pending = Vec::new();
            while !done.load(Ordering::Relaxed) {
                let Ok(Some(Ok(chunk))) =
                    tokio::time::timeout(Duration::from_millis(100), copy.next()).await
                else {
                    continue;
                };
                let now = Instant::now();
                pending.extend_from_slice(&chunk);
                let Some(end) = pending.iter().rposition(|b| *b == b'\n') else {
                    continue;
                };
                let lines: Vec<u8> = pending.drain(..=end).collect();
                let last = lines[..lines.len() - 1]
                    .rsplit(|b| *b == b'\n')
                    .next()
                    .unwrap();
                let count = lines.iter().filter(|b| **b == b'\n').count() as u64;
                received.fetch_add(count, Ordering::Relaxed);
                let progress: u64 =
                    std::str::from_utf8(last.split(|b| *b == b'\t').next().unwrap())
                        .unwrap()
                        .parse()
                        .unwrap();
                // The first moment the view was at this progress or beyond.
                let reached = {
                    let timeline = timeline.lock().unwrap();
                    let i = timeline.partition_point(|(_, p)| *p < progress);
                    timeline.get(i).map_or(now, |(t, _)| *t)
                };
                lag.lock()
                    .unwrap()
                    .record(now.saturating_duration_since(reached).as_micros() as u64)
                    .unwrap();
            }
        }));
    }
    // The view's input ends: the run is over.
    let status = || {
        rt.block_on(admin.simple_query("SHOW MATERIALIZED VIEWS"))
            .unwrap()
            .into_iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get(3).map(str::to_string),
                _ => None,
            })
            .unwrap()
    };
    let mut rss = 0;
    match soak {
        None => {
            while status() != "finished" {
                rss = rss.max(riffle::metrics::process_rss_bytes().unwrap_or(0));
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Some(length) => {
            println!("  seconds  RSS MB  view changes  changes/s (last 10 s)");
            let mut last = (Instant::now(), view.progress());
            while started.elapsed() < length {
                std::thread::sleep(Duration::from_secs(10));
                let now = (Instant::now(), view.progress());
                let bytes = riffle::metrics::process_rss_bytes().unwrap_or(0);
                rss = rss.max(bytes);
                println!(
                    "  {:>7.0}  {:>6}  {:>12}  {:>9.0}",
                    started.elapsed().as_secs_f64(),
                    bytes >> 20,
                    now.1,
                    (now.1 - last.1) as f64 / (now.0 - last.0).as_secs_f64()
                );
                last = now;
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    for task in tasks {
        let _ = rt.block_on(task);
    }
    let changes = view.progress();
    drop(admin);
    server.stop();
    let lookups = lookups.lock().unwrap().clone();
    let lag = lag.lock().unwrap().clone();
    Run {
        seconds,
        lookups,
        lag,
        rss_mb: rss >> 20,
        changes,
    }
}

/// Point lookups by `clients` connections in a closed loop for `seconds`, on a view that
/// ingests nothing: `(lookups per second, latency histogram in µs)`.
fn point_lookups(
    rt: &tokio::runtime::Runtime,
    url: &str,
    clients: u64,
    seconds: u64,
) -> (f64, Histogram<u64>) {
    let lookups = Arc::new(Mutex::new(Histogram::<u64>::new(3).unwrap()));
    let end = Instant::now() + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let (url, lookups) = (url.to_string(), lookups.clone());
            rt.spawn(async move {
                let (client, connection) = tokio_postgres::connect(&url, NoTls).await.unwrap();
                tokio::spawn(connection);
                let select = client
                    .prepare("SELECT * FROM per_bidder WHERE bidder = $1")
                    .await
                    .unwrap();
                let mut mine = Histogram::<u64>::new(3).unwrap();
                let mut key = c as i64 * 7919;
                while Instant::now() < end {
                    key = (key * 31 + 17) % 10_000 + 1000;
                    let at = Instant::now();
                    let rows = client.query(&select, &[&key]).await.unwrap();
                    mine.record(at.elapsed().as_micros() as u64).unwrap();
                    assert!(
                        rows.len() <= 1,
                        "a point lookup returned {} rows",
                        rows.len()
                    );
                }
                lookups.lock().unwrap().add(&mine).unwrap();
            })
        })
        .collect();
    let started = Instant::now();
    for task in tasks {
        rt.block_on(task).unwrap();
    }
    let lookups = lookups.lock().unwrap().clone();
    (
        lookups.len() as f64 / started.elapsed().as_secs_f64(),
        lookups,
    )
}

/// `point [events] [seconds] [clients,...]`: see the module's documentation.
fn point(events: u64, seconds: u64, concurrency: &[u64]) {
    let dir = tempfile::tempdir().unwrap();
    let (server, url, rt) = start(serve_config(dir.path()));
    let (admin, connection) = rt.block_on(tokio_postgres::connect(&url, NoTls)).unwrap();
    rt.spawn(connection);
    rt.block_on(admin.batch_execute(&view_sql(events, false)))
        .unwrap();
    let view = server.engine().view("per_bidder").unwrap();
    while !view.is_finished() {
        std::thread::sleep(Duration::from_millis(50));
    }
    println!(
        "view: {} rows from {events} events, no ingest from here on",
        view.len()
    );
    println!("  clients  lookups/s  avg ms  p50 ms  p95 ms  p99 ms  max ms");
    let ms = |us: f64| us / 1000.0;
    for &clients in concurrency {
        let (rate, latency) = point_lookups(&rt, &url, clients, seconds);
        println!(
            "  {clients:>7}  {rate:>9.0}  {:>6.2}  {:>6.2}  {:>6.2}  {:>6.2}  {:>6.1}",
            ms(latency.mean()),
            ms(latency.value_at_quantile(0.5) as f64),
            ms(latency.value_at_quantile(0.95) as f64),
            ms(latency.value_at_quantile(0.99) as f64),
            ms(latency.max() as f64)
        );
    }
    drop(admin);
    server.stop();
}

/// The process's CPU time so far (user and system), from `/proc/self/stat`.
#[cfg(feature = "kafka")]
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // The fields after the command's name (in parentheses): utime and stime are 14 and 15.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// `shared [records] [views]`: the views over one topic with shared sources, then without.
#[cfg(feature = "kafka")]
fn shared(records: u64, views: u64) {
    let bootstrap = std::env::var("RIFFLE_KAFKA_BOOTSTRAP").expect(
        "RIFFLE_KAFKA_BOOTSTRAP: start a broker (./scripts/kafka.sh start; eval \"$(./scripts/kafka.sh env)\")",
    );
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let topic = format!("serve-shared-{}-{nanos}", std::process::id());
    let table = |name: &str| {
        format!(
            "CREATE TABLE {name} (user_id BIGINT, amount BIGINT, note STRING) WITH (
                 'connector' = 'kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{bootstrap}',
                 'properties.group.id' = '{topic}', 'scan.startup.mode' = 'earliest-offset',
                 'format' = 'json')"
        )
    };
    // The topic (two partitions), from a datagen table.
    riffle_kafka::ensure_topics(
        &riffle_kafka::KafkaConnection::new(bootstrap.as_str()),
        &[(&topic, 2)],
        1,
    )
    .unwrap();
    let started = Instant::now();
    let env = riffle::StreamEnv::new();
    riffle_sql::SqlEnv::new(&env)
        .execute_sql(&format!(
            "CREATE TABLE gen (user_id BIGINT, amount BIGINT, note STRING) WITH (
                 'connector' = 'datagen', 'number-of-rows' = '{records}', 'rows-per-second' = '1000000000',
                 'fields.user_id.min' = '1', 'fields.user_id.max' = '100000',
                 'fields.amount.min' = '0', 'fields.amount.max' = '99', 'fields.note.length' = '40');
             {};
             INSERT INTO topic SELECT * FROM gen;",
            table("topic")
        ))
        .unwrap();
    env.execute().unwrap();
    println!(
        "{records} records written to {topic} in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let queries = [
        "SELECT user_id, COUNT(*) AS n FROM orders GROUP BY user_id",
        "SELECT amount, COUNT(*) AS n, SUM(user_id) AS users FROM orders GROUP BY amount",
        "SELECT amount > 50 AS big, COUNT(*) AS n FROM orders GROUP BY amount > 50",
        "SELECT user_id / 1000 AS bucket, COUNT(*) AS n, MAX(amount) AS top FROM orders GROUP BY user_id / 1000",
    ];
    for share in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let mut config = serve_config(dir.path());
        config.shared_sources = share;
        let (server, url, rt) = start(config);
        let (client, connection) = rt.block_on(tokio_postgres::connect(&url, NoTls)).unwrap();
        rt.spawn(connection);
        let query = |sql: &str| -> Vec<String> {
            let mut values = Vec::new();
            for message in rt.block_on(client.simple_query(sql)).unwrap() {
                if let tokio_postgres::SimpleQueryMessage::Row(row) = message {
                    values.push(row.get(0).unwrap_or("0").to_string());
                }
            }
            values
        };
        let (cpu, started) = (cpu_seconds(), Instant::now());
        query(&table("orders"));
        for v in 0..views as usize {
            query(&format!(
                "CREATE MATERIALIZED VIEW v{v} AS {}",
                queries[v % queries.len()]
            ));
        }
        for v in 0..views {
            while query(&format!("SELECT SUM(n) FROM v{v}"))[0] != records.to_string() {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let (seconds, cpu) = (started.elapsed().as_secs_f64(), cpu_seconds() - cpu);
        let read = query("SHOW SOURCES").first().cloned();
        let sources = if share { "shared" } else { "each its own" };
        println!(
            "{views} views, sources {sources}: {seconds:.2} s, {cpu:.2} CPU-s ({:.0} records per CPU-second and view){}",
            (records * views) as f64 / cpu,
            read.map(|_| {
                let rows = rt.block_on(client.simple_query("SHOW SOURCES")).unwrap();
                rows.iter()
                    .find_map(|m| match m {
                        tokio_postgres::SimpleQueryMessage::Row(row) => row
                            .get(2)
                            .map(|n| format!(", {n} records read from the topic")),
                        _ => None,
                    })
                    .unwrap_or_default()
            })
            .unwrap_or_default()
        );
        drop(client);
        server.stop();
    }
}

fn main() {
    #[cfg(feature = "kafka")]
    if std::env::args().any(|a| a == "shared") {
        shared(arg(2, 2_000_000), arg(3, 4));
        return;
    }
    if std::env::args().any(|a| a == "point") {
        let concurrency: Vec<u64> = std::env::args()
            .filter(|a| !a.starts_with("--"))
            .nth(4)
            .unwrap_or_else(|| "1,8,32,128".to_string())
            .split(',')
            .map(|c| c.parse().expect("a number of clients"))
            .collect();
        point(arg(2, 10_000_000), arg(3, 30), &concurrency);
        return;
    }
    if std::env::args().any(|a| a == "soak") {
        let seconds = arg(2, 600);
        let (clients, rate, subscribers) = (arg(3, 4), arg(4, 100), arg(5, 4));
        println!(
            "soak: {seconds} s, {clients} lookup clients at {rate}/s each, {subscribers} subscribers"
        );
        let soak = run(
            u64::MAX / 4,
            clients,
            rate,
            subscribers,
            riffle_serve::view::DEFAULT_RETAINED_CHANGES,
            Some(Duration::from_secs(seconds)),
        );
        let ms = |us: u64| us as f64 / 1000.0;
        println!(
            "soak: max RSS {} MB, {} view changes; lookups p50 {:.2} ms, p99 {:.2} ms; subscription lag p50 {:.1} ms, p99 {:.1} ms",
            soak.rss_mb,
            soak.changes,
            ms(soak.lookups.value_at_quantile(0.5)),
            ms(soak.lookups.value_at_quantile(0.99)),
            ms(soak.lag.value_at_quantile(0.5)),
            ms(soak.lag.value_at_quantile(0.99))
        );
        return;
    }
    let events = arg(1, 10_000_000);
    let clients = arg(2, 8);
    let rate = arg(3, 250);
    let subscribers = arg(4, 10);
    let retained = arg(5, riffle_serve::view::DEFAULT_RETAINED_CHANGES as u64) as usize;
    println!("each view keeps its latest {retained} changes for resuming subscribers");
    let alone = run(events, 0, rate, 0, retained, None);
    println!(
        "alone:        {events} events in {:.2} s = {:.0} events/s ({} view changes), max RSS {} MB",
        alone.seconds,
        events as f64 / alone.seconds,
        alone.changes,
        alone.rss_mb
    );
    let loaded = run(events, clients, rate, subscribers, retained, None);
    println!(
        "with readers: {events} events in {:.2} s = {:.0} events/s ({} view changes), max RSS {} MB; {clients} lookup clients at {rate}/s each, {subscribers} subscribers",
        loaded.seconds,
        events as f64 / loaded.seconds,
        loaded.changes,
        loaded.rss_mb
    );
    let ms = |us: u64| us as f64 / 1000.0;
    println!(
        "lookups:      {} done, latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        loaded.lookups.len(),
        ms(loaded.lookups.value_at_quantile(0.5)),
        ms(loaded.lookups.value_at_quantile(0.99)),
        ms(loaded.lookups.max())
    );
    println!(
        "subscription lag: {} reads, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        loaded.lag.len(),
        ms(loaded.lag.value_at_quantile(0.5)),
        ms(loaded.lag.value_at_quantile(0.99)),
        ms(loaded.lag.max())
    );
}
