//! Async I/O against a real HTTP server started by each test (axum on 127.0.0.1:0), called with a
//! real client (reqwest): enrichment in order and unordered, timeouts and retries, failures to
//! the job or to a side output, the capacity as a bound on requests in flight, and records in
//! flight carried through a savepoint and a crash into an exactly-once file sink.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::routing::get;
use riffle::checkpoint::{CheckpointConfig, Manifest, RestartStrategy, RestoreFrom};
use riffle::operators::{AsyncConfig, AsyncFailure, AsyncOrder};
use riffle::sink::{CollectSink, ExactlyOnceFileSink};
use riffle::source::datagen::DatagenSource;
use riffle::source::function::FnGenerator;
use riffle::time::WatermarkStrategy;
use riffle::{EnvConfig, Error, OutputTag, StreamEnv};

/// What the server saw.
#[derive(Default)]
struct Seen {
    requests: AtomicU64,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    attempts: Mutex<HashMap<u64, u32>>,
}

impl Seen {
    fn start(&self) -> u32 {
        self.requests.fetch_add(1, Ordering::SeqCst);
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        0
    }
    fn end(&self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
    fn attempt(&self, id: u64) -> u32 {
        let mut attempts = self.attempts.lock().unwrap();
        let n = attempts.entry(id).or_default();
        *n += 1;
        *n
    }
}

/// A user directory over HTTP:
/// - `/user/{id}/{delay_ms}`: `name-{id}` after `delay_ms`;
/// - `/flaky/{id}/{slow_attempts}/{slow_ms}`: the first `slow_attempts` requests for `id` take
///   `slow_ms`, later ones answer at once;
/// - `/fail/{id}`: 500 for ids divisible by 3, else `name-{id}`.
struct Server {
    addr: SocketAddr,
    seen: Arc<Seen>,
    _runtime: tokio::runtime::Runtime,
}

async fn user(State(seen): State<Arc<Seen>>, UrlPath((id, delay)): UrlPath<(u64, u64)>) -> String {
    seen.start();
    tokio::time::sleep(Duration::from_millis(delay)).await;
    seen.end();
    format!("name-{id}")
}

async fn flaky(
    State(seen): State<Arc<Seen>>,
    UrlPath((id, slow_attempts, slow_ms)): UrlPath<(u64, u32, u64)>,
) -> String {
    seen.start();
    if seen.attempt(id) <= slow_attempts {
        tokio::time::sleep(Duration::from_millis(slow_ms)).await;
    }
    seen.end();
    format!("name-{id}")
}

async fn fail(
    State(seen): State<Arc<Seen>>,
    UrlPath(id): UrlPath<u64>,
) -> Result<String, StatusCode> {
    seen.start();
    seen.attempt(id);
    seen.end();
    if id % 3 == 0 {
        Err(StatusCode::INTERNAL_SERVER_ERROR)
    } else {
        Ok(format!("name-{id}"))
    }
}

impl Server {
    fn start() -> Server {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let seen = Arc::new(Seen::default());
        let app = Router::new()
            .route("/user/{id}/{delay}", get(user))
            .route("/flaky/{id}/{slow_attempts}/{slow_ms}", get(flaky))
            .route("/fail/{id}", get(fail))
            .with_state(seen.clone());
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
        Server {
            addr,
            seen,
            _runtime: runtime,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// GETs `url` and returns the body; a status other than success is an error.
async fn fetch(client: reqwest::Client, url: String) -> Result<String, reqwest::Error> {
    client
        .get(url)
        .send()
        .await?
        .error_for_status()?
        .text()
        .await
}

/// The lookup of user `id` taking `delay_ms` at the server.
fn lookup(
    server: &Server,
    delay_ms: impl Fn(u64) -> u64 + Send + Sync + 'static,
) -> impl Fn(u64) -> std::pin::Pin<Box<dyn Future<Output = Result<String, reqwest::Error>> + Send>>
+ Send
+ Sync
+ 'static {
    let client = reqwest::Client::new();
    let base = server.url("");
    move |id| {
        let url = format!("{base}/user/{id}/{}", delay_ms(id));
        let client = client.clone();
        Box::pin(async move { Ok(format!("{id} {}", fetch(client, url).await?)) })
    }
}

fn expected(ids: impl Iterator<Item = u64>) -> Vec<String> {
    ids.map(|id| format!("{id} name-{id}")).collect()
}

#[test]
fn ordered_enrichment_keeps_input_order_with_requests_overlapping() {
    let server = Server::start();
    let env = StreamEnv::with_config(EnvConfig {
        parallelism: 1,
        ..EnvConfig::default()
    });
    let (sink, out) = CollectSink::new();
    env.from_iter(0..200u64)
        .async_map(
            // Later ids answer faster than earlier ones, often.
            lookup(&server, |id| (id * 7) % 25),
            16,
            Duration::from_secs(5),
            AsyncOrder::Ordered,
        )
        .sink(sink);
    env.execute().unwrap();
    assert_eq!(out.values(), expected(0..200));
    let max = server.seen.max_in_flight.load(Ordering::SeqCst);
    assert!(
        max > 1 && max <= 16,
        "requests overlapped, within the capacity: {max}"
    );
    assert_eq!(server.seen.requests.load(Ordering::SeqCst), 200);
}

#[test]
fn unordered_enrichment_emits_as_completed_and_never_makes_a_record_late() {
    let server = Server::start();
    let env = StreamEnv::with_config(EnvConfig {
        buffer_size: 8,
        watermark_after_every_batch: true,
        parallelism: 1,
        ..EnvConfig::default()
    });
    let (sink, out) = CollectSink::new();
    env.from_iter_with_watermarks(
        0..300u64,
        WatermarkStrategy::monotonous().with_timestamps(|id: &u64| *id as i64 * 10),
    )
    .async_map(
        // Even ids are slow.
        lookup(&server, |id| if id % 2 == 0 { 30 } else { 0 }),
        20,
        Duration::from_secs(5),
        AsyncOrder::Unordered,
    )
    .process(|enriched: String, ctx| {
        let late = ctx
            .timestamp()
            .is_some_and(|t| t <= ctx.current_watermark());
        ctx.emit((enriched, late))
    })
    .sink(sink);
    env.execute().unwrap();
    let values = out.values();
    assert!(
        values.iter().all(|(_, late)| !late),
        "no result behind its watermark"
    );
    let emitted: Vec<String> = values.into_iter().map(|(v, _)| v).collect();
    let mut sorted = emitted.clone();
    sorted.sort_by_key(|v| v.split(' ').next().unwrap().parse::<u64>().unwrap());
    assert_eq!(sorted, expected(0..300), "each once");
    assert_ne!(emitted, sorted, "fast answers overtook slow ones");
}

/// One client shared by the subtasks: a subtask that ends first must not leave the others a pool
/// of dead connections (they belong to the runtime that opened them).
#[test]
fn one_client_serves_every_subtask_after_one_ended() {
    let server = Server::start();
    let env = StreamEnv::with_config(EnvConfig {
        parallelism: 2,
        ..EnvConfig::default()
    });
    let (sink, out) = CollectSink::new();
    env.from_iter(0..2000u64)
        .async_map(
            lookup(&server, |id| (id * 7) % 25),
            16,
            Duration::from_secs(5),
            AsyncOrder::Ordered,
        )
        .sink(sink);
    env.execute().unwrap();
    let mut values = out.values();
    values.sort_by_key(|v| v.split(' ').next().unwrap().parse::<u64>().unwrap());
    assert_eq!(values, expected(0..2000));
}

#[test]
fn a_timed_out_request_is_retried_until_it_succeeds() {
    let server = Server::start();
    let env = StreamEnv::with_config(EnvConfig {
        parallelism: 1,
        ..EnvConfig::default()
    });
    let (sink, out) = CollectSink::new();
    let (client, base) = (reqwest::Client::new(), server.url(""));
    env.from_iter(0..40u64)
        .async_map_with(
            move |id| {
                // The first two attempts of every id take 2 s; the timeout is 100 ms.
                let url = format!("{base}/flaky/{id}/2/2000");
                let client = client.clone();
                async move { Ok::<_, reqwest::Error>(format!("{id} {}", fetch(client, url).await?)) }
            },
            AsyncConfig::new(10, Duration::from_millis(100), AsyncOrder::Ordered)
                .with_retries(3, Duration::from_millis(5)),
        )
        .sink(sink);
    let started = Instant::now();
    env.execute().unwrap();
    assert_eq!(out.values(), expected(0..40));
    let attempts = server.seen.attempts.lock().unwrap().clone();
    assert_eq!(attempts.len(), 40);
    assert!(
        attempts.values().all(|&n| n == 3),
        "two timeouts, then success"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn a_request_failing_every_attempt_fails_the_job_naming_why() {
    let server = Server::start();
    let env = StreamEnv::new();
    let (client, base) = (reqwest::Client::new(), server.url(""));
    env.from_iter(0..5u64)
        .async_map_with(
            move |id| {
                let url = format!("{base}/flaky/{id}/100/2000");
                let client = client.clone();
                async move { fetch(client, url).await }
            },
            AsyncConfig::new(10, Duration::from_millis(50), AsyncOrder::Ordered)
                .with_retries(1, Duration::from_millis(5)),
        )
        .sink(CollectSink::new().0);
    match env.execute() {
        Err(error @ Error::Operator { .. }) => {
            let message = error.to_string();
            assert!(
                message.contains("operator `AsyncMap (ordered)`")
                    && message
                        .contains("async request failed after 2 attempt(s): timed out after 50ms"),
                "{message}"
            );
        }
        other => panic!("expected the job to fail, got {other:?}"),
    }
}

#[test]
fn failed_requests_go_to_the_side_output_when_asked() {
    let server = Server::start();
    let env = StreamEnv::with_config(EnvConfig {
        parallelism: 2,
        ..EnvConfig::default()
    });
    let failed = OutputTag::<AsyncFailure<u64>>::new("lookup-failed");
    let (sink, out) = CollectSink::new();
    let (failures, failed_out) = CollectSink::new();
    let (client, base) = (reqwest::Client::new(), server.url(""));
    let enriched = env.from_iter(0..90u64).async_map_with(
        move |id| {
            let url = format!("{base}/fail/{id}");
            let client = client.clone();
            async move { Ok::<_, reqwest::Error>(format!("{id} {}", fetch(client, url).await?)) }
        },
        AsyncConfig::new(8, Duration::from_secs(5), AsyncOrder::Unordered)
            .with_retries(2, Duration::from_millis(1))
            .failures_to(&failed),
    );
    enriched.sink(sink);
    enriched.get_side_output(&failed).sink(failures);
    env.execute().unwrap();
    let mut ok = out.values();
    ok.sort_by_key(|v| v.split(' ').next().unwrap().parse::<u64>().unwrap());
    assert_eq!(ok, expected((0..90).filter(|id| id % 3 != 0)));
    let mut failures = failed_out.values();
    failures.sort_by_key(|f| f.input);
    assert_eq!(
        failures.iter().map(|f| f.input).collect::<Vec<_>>(),
        (0..90).filter(|id| id % 3 == 0).collect::<Vec<_>>()
    );
    for failure in &failures {
        assert_eq!(failure.attempts, 3);
        assert!(failure.error.contains("500"), "{}", failure.error);
    }
    let attempts = server.seen.attempts.lock().unwrap().clone();
    assert!((0..90).all(|id| attempts[&id] == if id % 3 == 0 { 3 } else { 1 }));
}

#[test]
fn capacity_bounds_the_requests_in_flight_and_holds_the_input_back() {
    let server = Server::start();
    let env = StreamEnv::with_config(EnvConfig {
        parallelism: 1,
        ..EnvConfig::default()
    });
    let (sink, out) = CollectSink::new();
    env.from_iter(0..100u64)
        .async_map(
            lookup(&server, |_| 30),
            4,
            Duration::from_secs(5),
            AsyncOrder::Unordered,
        )
        .sink(sink);
    let started = Instant::now();
    let result = env.execute().unwrap();
    let elapsed = started.elapsed();
    assert_eq!(out.len(), 100);
    assert_eq!(server.seen.max_in_flight.load(Ordering::SeqCst), 4);
    // 100 requests of 30 ms, 4 at a time: at least 25 rounds.
    assert!(elapsed >= Duration::from_millis(750), "{elapsed:?}");
    // The operator waited for room instead of taking its whole input at once: its task was
    // busy while the source's was back-pressured.
    let async_op = result
        .metrics
        .operator_total("AsyncMap (unordered)")
        .unwrap();
    assert_eq!(async_op.records_in, 100);
}

/// The enrichment job into an exactly-once file sink at `out`: ids from a paced source, a lookup
/// taking `delay_ms`, `crash` after it.
fn exactly_once_job(
    server: &Server,
    out: &Path,
    checkpoints: &Path,
    count: u64,
    rate: f64,
    delay_ms: u64,
    crash: impl Fn(String) -> String + Send + Sync + 'static,
) -> StreamEnv {
    let env = StreamEnv::with_config(EnvConfig {
        parallelism: 2,
        buffer_size: 16,
        checkpoints: CheckpointConfig {
            interval: Some(Duration::from_millis(50)),
            storage: checkpoints.to_str().unwrap().to_string(),
            restart: RestartStrategy::FixedDelay {
                attempts: 3,
                delay: Duration::from_millis(50),
            },
            ..CheckpointConfig::default()
        },
        ..EnvConfig::default()
    });
    env.from_source(
        DatagenSource::new(FnGenerator::new(|i| i))
            .count(count)
            .rate(rate)
            .splits(2),
    )
    .uid("ids")
    .name("ids")
    .async_map(
        lookup(server, move |id| delay_ms + id % 7),
        64,
        Duration::from_secs(10),
        AsyncOrder::Unordered,
    )
    .uid("lookup")
    .map(crash)
    .uid("crash")
    .sink(ExactlyOnceFileSink::new(out))
    .uid("sink");
    env
}

/// Every committed line, sorted by id.
fn committed(dir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if entry.path().is_file() {
            let text = std::fs::read_to_string(entry.path()).unwrap();
            lines.extend(text.lines().map(|l| l.trim_matches('"').to_string()));
        }
    }
    lines.sort_by_key(|v| v.split(' ').next().unwrap().parse::<u64>().unwrap());
    lines
}

#[test]
fn requests_in_flight_at_a_savepoint_are_issued_again_after_the_restore() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    // Every lookup takes 1.5 s: at the savepoint (300 ms in) the records read are all in flight.
    let env = exactly_once_job(
        &server,
        &out,
        &dir.path().join("chk1"),
        100,
        100.0,
        1_500,
        |s| s,
    );
    let job = env.execute_async().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let savepoint = job
        .stop_with_savepoint(dir.path().join("savepoint").to_str().unwrap())
        .unwrap();
    let result = job.wait().unwrap();
    let read = result.metrics.operator_total("ids").unwrap().records_out;
    assert!(read > 0 && read < 100, "stopped part-way: {read}");
    assert!(
        committed(&out).is_empty(),
        "nothing had completed by the savepoint"
    );

    // The savepoint holds the records in flight: the async operator's state is not empty.
    let manifest =
        Manifest::from_json(&std::fs::read(Path::new(&savepoint).join("_manifest.json")).unwrap())
            .unwrap();
    let in_flight: u64 = manifest.operators["lookup"]
        .subtasks
        .iter()
        .filter_map(|s| s.operator.map(|(_, extent)| extent.len))
        .sum();
    assert!(in_flight > 2 * read, "{in_flight} bytes for {read} records");

    let env = exactly_once_job(
        &server,
        &out,
        &dir.path().join("chk2"),
        100,
        100.0,
        5,
        |s| s,
    );
    env.configure(|c: &mut EnvConfig| {
        c.checkpoints.restore = Some(RestoreFrom::Savepoint(savepoint.clone()))
    });
    let result = env.execute().unwrap();
    assert_eq!(
        result.metrics.operator_total("ids").unwrap().records_out,
        100 - read,
        "the source resumed"
    );
    assert_eq!(
        committed(&out),
        expected(0..100),
        "nothing lost, nothing twice"
    );
}

#[test]
fn a_crash_with_requests_in_flight_loses_and_duplicates_nothing() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    static CRASHED: AtomicBool = AtomicBool::new(false);
    let seen = Arc::new(AtomicU64::new(0));
    let env = exactly_once_job(
        &server,
        &out,
        &dir.path().join("chk"),
        3_000,
        3_000.0,
        20,
        move |s| {
            if seen.fetch_add(1, Ordering::SeqCst) == 1_500 && !CRASHED.swap(true, Ordering::SeqCst)
            {
                panic!("crash after the lookup, with lookups in flight");
            }
            s
        },
    );
    let result = env.execute().unwrap();
    assert_eq!(result.restarts, 1);
    assert!(result.completed_checkpoints() > 0);
    assert_eq!(
        committed(&out),
        expected(0..3_000),
        "nothing lost, nothing twice"
    );
    assert!(
        server.seen.requests.load(Ordering::SeqCst) > 3_000,
        "some lookups were made again after the restore"
    );
}

#[test]
fn a_bad_setting_fails_the_job_at_start_naming_it() {
    let env = StreamEnv::new();
    env.from_iter(0..5u64)
        .async_map(
            |n| async move { Ok::<_, std::io::Error>(n) },
            0,
            Duration::from_secs(1),
            AsyncOrder::Ordered,
        )
        .sink(CollectSink::new().0);
    let error = env.execute().unwrap_err().to_string();
    assert!(
        error.contains("`async.capacity` must be at least 1"),
        "{error}"
    );
}

/// Lookups per second against the local server answering after 2 ms, by capacity (the figures of
/// docs/enrichment.md): `cargo test -p riffle --test joins measure_async_capacity --release --
/// --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a check"]
fn measure_async_capacity() {
    let server = Server::start();
    for capacity in [1, 10, 100, 500] {
        for order in [AsyncOrder::Ordered, AsyncOrder::Unordered] {
            let env = StreamEnv::with_config(EnvConfig {
                parallelism: 1,
                ..EnvConfig::default()
            });
            let count = (capacity as u64 * 40).clamp(200, 20_000);
            env.from_iter(0..count)
                .async_map(
                    lookup(&server, |_| 2),
                    capacity,
                    Duration::from_secs(10),
                    order,
                )
                .sink(riffle::sink::BlackholeSink::new());
            let started = Instant::now();
            env.execute().unwrap();
            let per_second = count as f64 / started.elapsed().as_secs_f64();
            println!(
                "capacity {capacity:>4} {order:?}: {per_second:>8.0} lookups/s ({count} lookups)"
            );
        }
    }
}
