//! Throughput and latency of whole pipelines: the figures of BENCHMARKS.md.
//!
//! ```sh
//! cargo bench -p riffle-cli --bench pipelines              # every benchmark
//! cargo bench -p riffle-cli --bench pipelines -- shuffle   # those whose name contains "shuffle"
//! cargo bench -p riffle-cli --bench pipelines -- latency   # 100K, 500K, 1M events/s x 5 ms, 1 ms
//! cargo bench -p riffle-cli --bench pipelines -- latency-500k-5ms   # one of them
//! ```
//!
//! The latency runs check their own validity (see [`latency`]): a void run still prints its row,
//! and the bench then fails with the reasons.
//!
//! Each benchmark runs a real job (threads, channels, chaining) over records prepared in memory
//! beforehand, so the figure is the engine's and the pipeline's, not the generator's.

#![allow(unsafe_code)] // the counting allocator below

#[path = "common/mod.rs"]
mod common;
#[path = "common/counting.rs"]
mod counting;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use riffle::operators::OperatorContext;
use riffle::sink::{BlackholeSink, Sink, SinkWriter};
use riffle::source::BadRecordPolicy;
use riffle::source::datagen::{DatagenSource, Generator, JsonPayloads, Schedule, Timetable};
use riffle::{Data, EnvConfig, Record, Result, StreamEnv};
use riffle_cli::clicks::EnrichedClick;
use riffle_cli::demos::etl;
use riffle_clicks::{ClickGenerator, ClicksConfig};
use serde::Serialize;

/// The allocator of the `riffle` binary (so the figures are the binary's), counting the bytes
/// allocated so that state memory can be measured exactly.
#[global_allocator]
static ALLOCATOR: counting::Counting = counting::Counting;

fn allocated() -> isize {
    counting::ALLOCATED.load(std::sync::atomic::Ordering::Relaxed)
}

fn config(parallelism: usize) -> EnvConfig {
    EnvConfig {
        parallelism,
        ..EnvConfig::default()
    }
}

/// Serializes every record to JSON (the cost of writing it out) and drops the bytes.
struct SerializeSink;

impl<T: Data + Serialize> Sink<T> for SerializeSink {
    fn name(&self) -> String {
        "serialize".into()
    }
    fn writer(&self, _: &OperatorContext) -> Result<Box<dyn SinkWriter<T>>> {
        Ok(Box::new(SerializeWriter {
            buffer: Vec::with_capacity(1 << 16),
        }))
    }
}

struct SerializeWriter {
    buffer: Vec<u8>,
}

impl<T: Serialize> SinkWriter<T> for SerializeWriter {
    fn write(&mut self, batch: &mut Vec<Record<T>>) -> Result<()> {
        self.buffer.clear();
        for record in batch.drain(..) {
            serde_json::to_writer(&mut self.buffer, &record.value).map_err(riffle::Error::user)?;
            self.buffer.push(b'\n');
        }
        std::hint::black_box(&self.buffer);
        Ok(())
    }
}

struct Figure {
    name: String,
    value: String,
    target: &'static str,
    detail: String,
}

/// Scenario 1 on one core: parse ~200-byte JSON clicks, drop bots, enrich, serialize.
fn scenario1_etl() -> Figure {
    let n = 3_000_000u64;
    let generator = JsonPayloads(ClickGenerator::new(ClicksConfig::default()));
    let payloads: Vec<String> = (0..n).map(|i| generator.generate(i)).collect();
    let bytes: usize = payloads.iter().map(String::len).sum();
    let env = StreamEnv::with_config(config(1));
    etl::pipeline(
        &env.from_iter(payloads),
        BadRecordPolicy::DeadLetter,
        SerializeSink,
    );
    let result = env.execute().unwrap();
    let seconds = result.duration.as_secs_f64();
    Figure {
        name: "scenario 1 ETL, 1 core (parse, filter, enrich, serialize)".into(),
        value: format!("{:.2}M events/s", n as f64 / seconds / 1e6),
        target: ">= 2M events/s",
        detail: format!(
            "{n} pre-generated payloads of {} bytes on average",
            bytes as u64 / n
        ),
    }
}

/// Chained filter and map over in-memory records on one core.
fn chained_filter_map() -> Figure {
    let n = 100_000_000u64;
    let env = StreamEnv::with_config(config(1));
    env.from_iter(0..n)
        .filter(|x| x % 3 != 0)
        .map(|x| x.wrapping_mul(2_654_435_761))
        .sink(BlackholeSink::new());
    let result = env.execute().unwrap();
    let seconds = result.duration.as_secs_f64();
    Figure {
        name: "chained filter + map, in-memory u64, 1 core".into(),
        value: format!("{:.1}M records/s", n as f64 / seconds / 1e6),
        target: ">= 20M records/s",
        detail: format!("{n} records through source -> filter -> map -> sink in one thread"),
    }
}

/// key_by shuffle between 2 source subtasks and 2 keyed subtasks.
fn key_by_shuffle() -> Figure {
    let n = 40_000_000u64;
    let env = StreamEnv::with_config(config(2));
    env.from_iter(0..n)
        .key_by(|x| x % 1_000_003)
        .process(
            |_: &u64, x: u64, ctx: &mut riffle::operators::KeyedContext<'_, '_, u64, u64>| {
                ctx.emit(x)
            },
        )
        .sink(BlackholeSink::new());
    let result = env.execute().unwrap();
    let seconds = result.duration.as_secs_f64();
    Figure {
        name: "key_by shuffle, 2 -> 2 subtasks".into(),
        value: format!("{:.1}M records/s", n as f64 / seconds / 1e6),
        target: ">= 5M records/s",
        detail: format!("{n} u64 records hashed to key groups and sent over bounded channels"),
    }
}

/// What the latency runs found wrong with their own measurement; the bench fails with these
/// after printing its table.
static VOID: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The latency bench's sink operator.
const LATENCY_SINK: &str = "latency";

/// Below this a latency sample is at the bench's resolution: the sink reads the clock once per
/// batch, and no record crosses the source's output buffer, the shuffle channel, the keyed
/// task's wake-up and the sink faster than this without having waited for nothing.
const RESOLUTION_US: u64 = 50;

/// The payloads the latency bench cycles through: JSON clicks generated before the run, so that
/// the source's thread spends its time on the pipeline, not on the generator.
fn probe_payloads() -> Arc<Vec<String>> {
    static PAYLOADS: OnceLock<Arc<Vec<String>>> = OnceLock::new();
    PAYLOADS
        .get_or_init(|| {
            let generator = JsonPayloads(ClickGenerator::new(ClicksConfig::default()));
            Arc::new((0..1u64 << 18).map(|i| generator.generate(i)).collect())
        })
        .clone()
}

/// A click with its index in the stream (which says when it is due, on the source's schedule)
/// and how far behind its due time the source emitted it, in nanoseconds (negative: ahead).
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
struct Probe {
    index: u64,
    source_lag_ns: i64,
    payload: String,
}

/// Signed nanoseconds from `due` to `at`.
fn signed_ns(at: Instant, due: Instant) -> i64 {
    if at >= due {
        (at - due).as_nanos() as i64
    } else {
        -((due - at).as_nanos() as i64)
    }
}

/// Makes the probes; called by the source when a record is emitted, so it stamps the emission.
struct ProbeGenerator {
    payloads: Arc<Vec<String>>,
    schedule: Schedule,
    /// The run's timetable, read once (the schedule's lock is not for every record).
    timetable: OnceLock<Timetable>,
}

impl Generator for ProbeGenerator {
    type Item = Probe;
    fn generate(&self, index: u64) -> Probe {
        let timetable = self.timetable.get_or_init(|| {
            self.schedule
                .timetable()
                .expect("the schedule starts before the first record")
        });
        Probe {
            index,
            source_lag_ns: signed_ns(self.schedule.now(), timetable.due_at(index)),
            payload: self.payloads[(index % self.payloads.len() as u64) as usize].clone(),
        }
    }
}

/// What the sink saw, per writer and then merged.
struct LatencyStats {
    /// Due time at the source to the sink, µs.
    latency: Histogram<u64>,
    /// Records that reached the sink before their due time: impossible on one schedule.
    early: u64,
    /// How far behind its due time the source emitted each record, µs.
    source_lag: Histogram<u64>,
    /// Records the source emitted before their due time: impossible on one schedule.
    source_ahead: u64,
    /// The source's lag for the records due in the last second of the run.
    source_lag_end: Histogram<u64>,
}

impl LatencyStats {
    fn new() -> Self {
        let histogram = || Histogram::new_with_bounds(1, 60_000_000, 3).unwrap();
        LatencyStats {
            latency: histogram(),
            early: 0,
            source_lag: histogram(),
            source_ahead: 0,
            source_lag_end: histogram(),
        }
    }

    fn add(&mut self, other: &LatencyStats) {
        self.latency.add(&other.latency).unwrap();
        self.early += other.early;
        self.source_lag.add(&other.source_lag).unwrap();
        self.source_ahead += other.source_ahead;
        self.source_lag_end.add(&other.source_lag_end).unwrap();
    }
}

/// Records the latency of every probe due after the warm-up, on the source's schedule.
struct LatencySink {
    schedule: Schedule,
    /// The first index measured (the warm-up's records are not).
    measured_from: u64,
    /// The first index of the last second of the run.
    last_second_from: u64,
    stats: Arc<Mutex<LatencyStats>>,
}

type Stamped = (Probe, EnrichedClick);

impl Sink<Stamped> for LatencySink {
    fn name(&self) -> String {
        "latency".into()
    }
    fn writer(&self, _: &OperatorContext) -> Result<Box<dyn SinkWriter<Stamped>>> {
        Ok(Box::new(LatencyWriter {
            schedule: self.schedule.clone(),
            timetable: None,
            measured_from: self.measured_from,
            last_second_from: self.last_second_from,
            local: LatencyStats::new(),
            shared: self.stats.clone(),
        }))
    }
}

struct LatencyWriter {
    schedule: Schedule,
    timetable: Option<Timetable>,
    measured_from: u64,
    last_second_from: u64,
    local: LatencyStats,
    shared: Arc<Mutex<LatencyStats>>,
}

impl SinkWriter<Stamped> for LatencyWriter {
    fn write(&mut self, batch: &mut Vec<Record<Stamped>>) -> Result<()> {
        let now = self.schedule.now();
        let schedule = &self.schedule;
        let timetable = *self
            .timetable
            .get_or_insert_with(|| schedule.timetable().expect("the source started"));
        for record in batch.drain(..) {
            let probe = &record.value.0;
            if probe.index < self.measured_from {
                continue;
            }
            let stats = &mut self.local;
            let latency_ns = signed_ns(now, timetable.due_at(probe.index));
            if latency_ns < 0 {
                stats.early += 1;
            }
            stats
                .latency
                .saturating_record(latency_ns.max(0) as u64 / 1000);
            if probe.source_lag_ns < 0 {
                stats.source_ahead += 1;
            }
            let lag_us = probe.source_lag_ns.max(0) as u64 / 1000;
            stats.source_lag.saturating_record(lag_us);
            if probe.index >= self.last_second_from {
                stats.source_lag_end.saturating_record(lag_us);
            }
        }
        Ok(())
    }
    fn close(&mut self) -> Result<Option<riffle::sink::Finalizer>> {
        self.shared.lock().unwrap().add(&self.local);
        Ok(None)
    }
}

/// The load averages over 1, 5 and 15 minutes, from `/proc/loadavg`.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Events per second for a name: `500K`, `1M`.
fn rate_name(rate: f64) -> String {
    if rate >= 1e6 {
        format!("{}M", rate / 1e6)
    } else {
        format!("{}K", rate / 1e3)
    }
}

/// End-to-end latency at a fixed input rate: from the time a click is due at the source to the
/// time the sink has it, through parse, filter, enrich and a key_by shuffle, with partial
/// batches sent after `buffer_timeout`.
///
/// One schedule and one clock: the source paces itself by a [`Schedule`] and the probes' due
/// times come from the same schedule, so no record can reach the sink before it was due. The run
/// checks itself and is void (the bench fails after its table) when
/// - a record reached the sink, or left the source, before its due time (two clocks again);
/// - more samples are at or below the resolution than the buffering allows: a uniform wait of up
///   to `buffer_timeout` puts at most `RESOLUTION_US / buffer_timeout` of them there;
/// - the source did not hold the rate: it ran more than 1% of the measured time behind its
///   schedule for more than 1% of the records (p99 of its lag), or over the last second (median).
///   A lag of `L` means `rate * L` records fewer than scheduled had left the source: above 1% of
///   the window, the input was not the one the figure claims (a CPU-starved source that stalls,
///   then bursts to catch up, or one that cannot keep up at all).
fn latency(rate: f64, buffer_timeout: Duration) -> Figure {
    let seconds = 12.0;
    let warmup = 2.0;
    let load_before = load_average();
    let schedule = Schedule::new(rate);
    let generator = ProbeGenerator {
        payloads: probe_payloads(),
        schedule: schedule.clone(),
        timetable: OnceLock::new(),
    };
    let stats = Arc::new(Mutex::new(LatencyStats::new()));
    let env = StreamEnv::with_config(EnvConfig {
        buffer_timeout,
        ..config(2)
    });
    let table = riffle_cli::clicks::IpCountryTable::embedded();
    env.from_source(
        DatagenSource::new(generator)
            .count((rate * seconds) as u64)
            .paced_by(schedule.clone())
            .splits(2),
    )
    .map(|mut probe: Probe| {
        let payload = std::mem::take(&mut probe.payload);
        let click: riffle_clicks::Click = serde_json::from_str(&payload).expect("valid");
        (probe, click)
    })
    .filter(|(_, click)| !riffle_cli::clicks::is_bot(&click.user_agent))
    .map(move |(probe, click)| (probe, riffle_cli::clicks::enrich(click, table)))
    .key_by(|(_, click)| click.user_id)
    .process(
        |_: &u64, v: Stamped, ctx: &mut riffle::operators::KeyedContext<'_, '_, u64, Stamped>| {
            ctx.emit(v)
        },
    )
    .sink(LatencySink {
        schedule,
        measured_from: (rate * warmup) as u64,
        last_second_from: (rate * (seconds - 1.0)) as u64,
        stats: stats.clone(),
    })
    .name(LATENCY_SINK);
    let result = env.execute().unwrap();
    let load_after = load_average();
    let stats = stats.lock().unwrap();
    let h = &stats.latency;
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let timeout_ms = buffer_timeout.as_secs_f64() * 1e3;
    let name = format!(
        "end-to-end latency at {} events/s, buffer timeout {timeout_ms} ms (parse, filter, enrich, key_by), 2 cores",
        rate_name(rate)
    );

    let mut void = Vec::new();
    let at_resolution = h.count_between(0, RESOLUTION_US) as f64 / h.len().max(1) as f64;
    let plausible = RESOLUTION_US as f64 / buffer_timeout.as_micros() as f64;
    if h.is_empty() {
        void.push("no samples".to_string());
    }
    if stats.early > 0 || stats.source_ahead > 0 {
        void.push(format!(
            "{} records reached the sink and {} left the source before their due time: the source and the probes are not on one schedule",
            stats.early, stats.source_ahead
        ));
    }
    if at_resolution > plausible {
        void.push(format!(
            "{:.1}% of the samples are at or below {RESOLUTION_US} µs, more than the {:.1}% a {timeout_ms} ms buffer timeout allows",
            100.0 * at_resolution,
            100.0 * plausible
        ));
    }
    let measured = seconds - warmup;
    let allowed_lag_ms = measured * 1e3 / 100.0;
    let lag_p99_ms = ms(&stats.source_lag, 0.99);
    let end_lag_ms = ms(&stats.source_lag_end, 0.5);
    if lag_p99_ms > allowed_lag_ms || end_lag_ms > allowed_lag_ms {
        void.push(format!(
            "the source did not hold {} events/s: it ran {lag_p99_ms:.1} ms behind its schedule at p99 and {end_lag_ms:.1} ms over the last second (allowed: {allowed_lag_ms:.0} ms, 1% of {measured:.0} s)",
            rate_name(rate)
        ));
    }
    let markers = result
        .metrics
        .operator_total(LATENCY_SINK)
        .and_then(|sink| riffle_web::views::Latency::of(&sink.latencies_us));
    let verdict = if void.is_empty() {
        "valid".to_string()
    } else {
        let message = format!("{name}: VOID: {}", void.join("; "));
        VOID.lock().unwrap().push(message);
        format!("VOID ({})", void.join("; "))
    };
    Figure {
        name,
        value: format!("p50 {:.2} ms, p99 {:.2} ms", ms(h, 0.5), ms(h, 0.99)),
        target: "p99 <= 10 ms",
        detail: format!(
            "{verdict}; {} samples over {measured:.0} s after {warmup:.0} s warm-up; p99.9 {:.2} ms, max {:.2} ms; \
             {:.2}% at or below {RESOLUTION_US} µs (plausible: <= {:.1}%); \
             source vs schedule: {} records ahead, behind by p50 {:.3} ms, p99 {:.2} ms, max {:.2} ms, median over the last second {end_lag_ms:.3} ms; \
             latency markers at the sink: {}; load average before {load_before}, after {load_after}",
            h.len(),
            ms(h, 0.999),
            h.max() as f64 / 1000.0,
            100.0 * at_resolution,
            100.0 * plausible,
            stats.source_ahead,
            ms(&stats.source_lag, 0.5),
            ms(&stats.source_lag, 0.99),
            stats.source_lag.max() as f64 / 1000.0,
            markers.map_or("none".to_string(), |m| format!(
                "p50 {:.3} ms, p99 {:.3} ms ({} markers)",
                m.p50_ms, m.p99_ms, m.samples
            )),
        ),
    }
}

/// Users, one-minute windows, event time advancing 100K clicks per second (the seed's rate).
fn user_clicks(n: u64, users: u64, hot_share: f64) -> Vec<(u64, i64)> {
    let generator = ClickGenerator::new(ClicksConfig {
        users,
        hot_key_share: hot_share,
        late_share: 0.0,
        ..ClicksConfig::default()
    });
    (0..n)
        .map(|i| {
            let click = generator.generate(i);
            (click.user_id, click.event_time)
        })
        .collect()
}

/// Runs a windowed count per user over `clicks`; returns (wall seconds, CPU seconds, state entries, state bytes).
fn windowed_count(
    clicks: Vec<(u64, i64)>,
    parallelism: usize,
    pre_aggregate: bool,
) -> (f64, f64, u64, u64) {
    windowed_count_on(clicks, config(parallelism), pre_aggregate)
}

/// [`windowed_count`] with a given configuration (the state backend).
fn windowed_count_on(
    clicks: Vec<(u64, i64)>,
    config: EnvConfig,
    pre_aggregate: bool,
) -> (f64, f64, u64, u64) {
    use riffle::time::WatermarkStrategy;
    use riffle::window::Tumbling;
    let env = StreamEnv::with_config(config);
    env.from_source_with_watermarks(
        riffle::source::collection::CollectionSource::new(clicks),
        WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(5))
            .with_timestamps(|c: &(u64, i64)| c.1),
    )
    .key_by(|c| c.0)
    .window(Tumbling::of(Duration::from_secs(60)))
    .pre_aggregate(pre_aggregate)
    .aggregate(riffle::aggregate::Count)
    .name("count")
    .sink(BlackholeSink::new());
    let job = env.execute_async().unwrap();
    let cpu_before = common::cpu_seconds("self");
    let mut peak = (0, 0);
    while !job.is_finished() {
        std::thread::sleep(Duration::from_millis(20));
        if let Some(op) = job.metrics().operator_total("count")
            && op.state_entries > peak.0
        {
            peak = (op.state_entries, op.state_bytes);
        }
    }
    let result = job.wait().unwrap();
    (
        result.duration.as_secs_f64(),
        common::cpu_seconds("self") - cpu_before,
        peak.0,
        peak.1,
    )
}

/// Scenario 2's windowed count over 1M users, heap state.
fn windowed() -> Figure {
    let n = 10_000_000u64;
    let clicks = user_clicks(n, 1_000_000, 0.0);
    let (wall, cpu, entries, bytes) = windowed_count(clicks.clone(), 1, false);
    let (wall_pre, cpu_pre, _, _) = windowed_count(clicks, 1, true);
    Figure {
        name: "windowed count per user, 1-minute tumbling, 1M users, heap state".into(),
        value: format!(
            "{:.2}M events per CPU-second ({:.2}M events/s wall)",
            n as f64 / cpu / 1e6,
            n as f64 / wall / 1e6
        ),
        target: ">= 3M events/s per core",
        detail: format!(
            "{n} pre-generated (user, event time) records, parallelism 1 (source task + window task), without pre-aggregation; with pre-aggregation (the default, adaptive): {:.2}M events per CPU-second, {:.2}M/s wall; peak state {entries} entries, {} bytes per entry (table estimate)",
            n as f64 / cpu_pre / 1e6,
            n as f64 / wall_pre / 1e6,
            bytes / entries.max(1)
        ),
    }
}

/// Scenario 2's windowed count over 1M users with RocksDB state, against the heap in the same run.
fn windowed_rocksdb() -> Figure {
    let n = 5_000_000u64;
    let clicks = user_clicks(n, 1_000_000, 0.0);
    let local = tempfile::tempdir().unwrap();
    let rocksdb = EnvConfig {
        state_backend: std::sync::Arc::new(
            riffle_rocksdb::RocksDbBackend::new()
                .memory(256 << 20)
                .write_buffer(64 << 20)
                .state_cache(256 << 20),
        ),
        local_state_dir: local.path().to_path_buf(),
        ..config(1)
    };
    let (wall, cpu, ..) = windowed_count_on(clicks.clone(), rocksdb.clone(), false);
    let (wall_pre, cpu_pre, ..) = windowed_count_on(clicks.clone(), rocksdb.clone(), true);
    // The default 64 MB state cache holds about half the keys: the rest is read from RocksDB.
    let spilling = EnvConfig {
        state_backend: std::sync::Arc::new(
            riffle_rocksdb::RocksDbBackend::new()
                .memory(256 << 20)
                .write_buffer(64 << 20),
        ),
        ..rocksdb
    };
    let (_, cpu_spill, ..) = windowed_count_on(clicks.clone(), spilling, false);
    let (_, heap_cpu, ..) = windowed_count(clicks, 1, false);
    Figure {
        name: "windowed count per user, 1-minute tumbling, 1M users, RocksDB state".into(),
        value: format!(
            "{:.2}M events per CPU-second ({:.2}M events/s wall)",
            n as f64 / cpu / 1e6,
            n as f64 / wall / 1e6
        ),
        target: ">= 1M events/s per core",
        detail: format!(
            "{n} records, parallelism 1, 256 MB block cache, 64 MB memtables, 256 MB state cache (holds every key), without pre-aggregation; with the default adaptive pre-aggregation {:.2}M per CPU-s ({:.2}M/s wall); with the default 64 MB state cache (about half the keys, the rest read from RocksDB) {:.2}M per CPU-s; heap state in the same run {:.2}M per CPU-s (RocksDB / heap = {:.2})",
            n as f64 / cpu_pre / 1e6,
            n as f64 / wall_pre / 1e6,
            n as f64 / cpu_spill / 1e6,
            n as f64 / heap_cpu / 1e6,
            heap_cpu / cpu
        ),
    }
}

/// Record `index` of the checkpoint benchmark: the first `keys` records write every key once
/// (the state); after them, writes go to 1% of the keys.
struct KeyUpdates {
    keys: u64,
}

impl Generator for KeyUpdates {
    type Item = (u64, u64);
    fn generate(&self, index: u64) -> (u64, u64) {
        let key = if index < self.keys {
            index
        } else {
            index.wrapping_mul(0x9E37_79B9_7F4A_7C15) % (self.keys / 100)
        };
        (key, index)
    }
}

static PAYLOAD: riffle::state::ValueStateDescriptor<Vec<u64>> =
    riffle::state::ValueStateDescriptor::new("payload");

/// Keeps `0` numbers that do not compress per key (~8 bytes each), rewritten by every record.
#[derive(Clone)]
struct Payload(u64);

impl riffle::operators::KeyedProcessFunction<u64, (u64, u64), u64> for Payload {
    fn process_element(
        &mut self,
        _: &u64,
        (_, index): (u64, u64),
        ctx: &mut riffle::operators::KeyedContext<'_, '_, u64, u64>,
    ) -> Result<()> {
        let mut payload = ctx.value(&PAYLOAD).get()?.unwrap_or_default();
        payload.clear();
        payload.extend((0..self.0).map(|j| (index ^ j).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        ctx.value(&PAYLOAD).set(payload)
    }
}

/// One run of the checkpoint benchmark.
struct UpdatesRun {
    /// Records per second over the whole run.
    whole: f64,
    /// Records per second between 12 s and 30 s after the start: after the load and the first
    /// checkpoint, the steady state.
    steady: f64,
    checkpoints: Vec<riffle::checkpoint::CheckpointStats>,
}

/// Runs `records` updates over `keys` keys on `config`.
fn keyed_updates(config: EnvConfig, keys: u64, records: u64) -> UpdatesRun {
    let env = StreamEnv::with_config(config);
    env.from_source(DatagenSource::new(KeyUpdates { keys }).count(records))
        .key_by(|r| r.0)
        .process_function(Payload(12))
        .uid("payload")
        .name("payload")
        .sink(BlackholeSink::new());
    let started = Instant::now();
    let job = env.execute_async().unwrap();
    let window = Duration::from_secs(12)..=Duration::from_secs(30);
    // (when, records done) at the start and at the end of the window.
    type Sample = Option<(Instant, u64)>;
    let (mut first, mut last): (Sample, Sample) = (None, None);
    while !job.is_finished() {
        std::thread::sleep(Duration::from_millis(100));
        let now = Instant::now();
        if window.contains(&(now - started)) {
            let done = job
                .metrics()
                .operator_total("payload")
                .map_or(0, |m| m.records_in);
            first.get_or_insert((now, done));
            last = Some((now, done));
        }
    }
    let result = job.wait().unwrap();
    let steady = match (first, last) {
        (Some((t0, n0)), Some((t1, n1))) if t1 > t0 => (n1 - n0) as f64 / (t1 - t0).as_secs_f64(),
        _ => 0.0,
    };
    UpdatesRun {
        whole: records as f64 / result.duration.as_secs_f64(),
        steady,
        checkpoints: result.checkpoints,
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Issue 4's checkpoint targets: the throughput cost of a checkpoint every 10 s with ~100 MB of
/// state, and the share of the state an incremental checkpoint uploads after 1% of the keys
/// changed.
fn checkpoints() -> Figure {
    let keys = 1_000_000u64;
    let run = |backend: std::sync::Arc<dyn riffle::state::StateBackend>,
               records: u64,
               interval: Option<Duration>| {
        let dir = tempfile::tempdir().unwrap();
        let config = EnvConfig {
            state_backend: backend,
            local_state_dir: dir.path().join("local"),
            checkpoints: riffle::checkpoint::CheckpointConfig {
                interval,
                storage: dir.path().join("chk").to_string_lossy().into_owned(),
                ..Default::default()
            },
            ..config(1)
        };
        keyed_updates(config, keys, records)
    };
    // Runs of about 30 s (three checkpoint intervals) with and without checkpoints alternate,
    // three times each; the medians are compared, over the whole run (where the first
    // checkpoint writes the whole freshly loaded state) and in the steady state after it.
    let compare = |backend: &dyn Fn() -> std::sync::Arc<dyn riffle::state::StateBackend>,
                   records: u64| {
        let (mut bare, mut with) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            bare.push(run(backend(), records, None));
            with.push(run(backend(), records, Some(Duration::from_secs(10))));
        }
        let m =
            |runs: &[UpdatesRun], f: fn(&UpdatesRun) -> f64| median(runs.iter().map(f).collect());
        let (whole_bare, whole_with) = (m(&bare, |r| r.whole), m(&with, |r| r.whole));
        let (steady_bare, steady_with) = (m(&bare, |r| r.steady), m(&with, |r| r.steady));
        format!(
            "steady {:.1}% ({:.2}M vs {:.2}M records/s), whole run {:.1}% ({:.2}M vs {:.2}M); checkpoints of one run: {}",
            100.0 * (1.0 - steady_with / steady_bare),
            steady_with / 1e6,
            steady_bare / 1e6,
            100.0 * (1.0 - whole_with / whole_bare),
            whole_with / 1e6,
            whole_bare / 1e6,
            describe(&with[0].checkpoints)
        )
    };
    let rocksdb = || -> std::sync::Arc<dyn riffle::state::StateBackend> {
        std::sync::Arc::new(
            riffle_rocksdb::RocksDbBackend::new()
                .memory(256 << 20)
                .state_cache(256 << 20),
        )
    };
    let heap = || -> std::sync::Arc<dyn riffle::state::StateBackend> {
        std::sync::Arc::new(riffle::state::HeapBackend)
    };
    let on_rocksdb = compare(&rocksdb, 45_000_000);
    let on_heap = compare(&heap, 120_000_000);
    Figure {
        name: "checkpoint every 10 s, 1M keys x ~100 bytes of keyed state: throughput drop".into(),
        value: format!("RocksDB: {on_rocksdb}"),
        target: "<= 5% drop; incremental checkpoint after 1% of keys changed uploads <= 5% of the state",
        detail: format!(
            "parallelism 1 (source + keyed task); the first 1M records write every key, the rest 1% of the keys; RocksDB 45M records, 256 MB state cache; heap (120M records, full snapshots): {on_heap}"
        ),
    }
}

/// What each completed checkpoint wrote, of how much state, in how long.
fn describe(stats: &[riffle::checkpoint::CheckpointStats]) -> String {
    let completed: Vec<String> = stats
        .iter()
        .filter(|c| c.completed())
        .map(|c| {
            format!(
                "#{} wrote {:.1}% of {} MB in {} ms",
                c.id,
                100.0 * c.size_bytes as f64 / c.state_size_bytes.max(1) as f64,
                c.state_size_bytes >> 20,
                c.duration_ms
            )
        })
        .collect();
    completed.join(", ")
}

/// Issue 4's recovery target: a job with ~1 GB of RocksDB state restores from a checkpoint in a
/// local directory and processes again within 10 s.
fn recovery() -> Figure {
    let keys = 1_700_000u64; // x ~600 bytes
    let dir = tempfile::tempdir().unwrap();
    let job = |restore: bool| {
        let config = EnvConfig {
            job_name: "recovery".into(),
            state_backend: std::sync::Arc::new(
                riffle_rocksdb::RocksDbBackend::new().memory(256 << 20),
            ),
            local_state_dir: dir.path().join(if restore { "local-2" } else { "local-1" }),
            checkpoints: riffle::checkpoint::CheckpointConfig {
                interval: Some(Duration::from_secs(5)),
                storage: dir.path().join("chk").to_string_lossy().into_owned(),
                restore: restore.then_some(riffle::checkpoint::RestoreFrom::Latest),
                ..Default::default()
            },
            ..config(1)
        };
        let env = StreamEnv::with_config(config);
        env.from_source(DatagenSource::new(KeyUpdates { keys }))
            .uid("updates")
            .key_by(|r| r.0)
            .process_function(Payload(64))
            .uid("payload")
            .name("payload")
            .sink(BlackholeSink::new());
        env.execute_async().unwrap()
    };
    // Load every key, then wait for a checkpoint taken after that.
    let first = job(false);
    let loaded = |h: &riffle::JobHandle| {
        h.metrics()
            .operator_total("payload")
            .is_some_and(|m| m.records_in > keys)
    };
    while !loaded(&first) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let after = first.checkpoints().iter().map(|c| c.id).max().unwrap_or(0);
    let checkpoint = loop {
        if let Some(c) = first
            .checkpoints()
            .into_iter()
            .find(|c| c.id > after && c.completed())
        {
            break c;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    first.cancel();
    let _ = first.wait();
    // The restored job: from start to its first record through the keyed operator.
    let started = Instant::now();
    let second = job(true);
    while second
        .metrics()
        .operator_total("payload")
        .is_none_or(|m| m.records_in == 0)
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    let seconds = started.elapsed().as_secs_f64();
    second.cancel();
    let _ = second.wait();
    Figure {
        name: "recovery of ~1 GB of RocksDB state from a local checkpoint directory".into(),
        value: format!("processing again after {seconds:.1} s"),
        target: "<= 10 s",
        detail: format!(
            "{keys} keys x ~600 bytes, parallelism 1; checkpoint #{} holds {} MB; measured from the start of the restored job to the first record through the keyed operator (download of the files + RocksDB restore)",
            checkpoint.id,
            checkpoint.state_size_bytes >> 20
        ),
    }
}

/// Memory of window state per active key, measured as the bytes allocated for it.
fn state_memory() -> Figure {
    use riffle::keys::{KeyGroupRange, key_group_of};
    use riffle::state::Table;
    let keys = 1_000_000u64;
    let window = riffle::window::TimeWindow::new(0, 60_000);
    counting::COUNTING.store(true, std::sync::atomic::Ordering::SeqCst);
    let before = allocated();
    let mut table: Table<u64, riffle::window::TimeWindow, (u64, bool, bool)> =
        Table::new(KeyGroupRange { start: 0, end: 127 });
    for user in 0..keys {
        table
            .entry(key_group_of(&user, 128), user, window)
            .or_insert((0, false, false))
            .0 += 1;
    }
    let after = allocated();
    counting::COUNTING.store(false, std::sync::atomic::Ordering::SeqCst);
    let per_key = (after - before) as f64 / keys as f64;
    let estimate = table.heap_bytes() as f64 / keys as f64;
    std::hint::black_box(&table);
    Figure {
        name: "window state memory per active key (user id -> count in one window)".into(),
        value: format!("{per_key:.0} bytes per key"),
        target: "<= 150 bytes per key",
        detail: format!(
            "bytes allocated for {keys} keys in one window of the heap table (key, accumulator, flags, hash table slack); \
             the table's own estimate: {estimate:.0} bytes"
        ),
    }
}

/// One key with 80% of the events, parallelism 2, against the uniform case.
fn skew() -> Figure {
    let n = 10_000_000u64;
    let uniform = user_clicks(n, 1_000_000, 0.0);
    let skewed = user_clicks(n, 1_000_000, 0.8);
    let (uniform_wall, ..) = windowed_count(uniform, 2, true);
    let (skewed_wall, ..) = windowed_count(skewed.clone(), 2, true);
    let (skewed_without, ..) = windowed_count(skewed, 2, false);
    Figure {
        name: "hot key (80% of events) vs uniform, parallelism 2, with pre-aggregation".into(),
        value: format!(
            "skewed / uniform throughput = {:.2}",
            uniform_wall / skewed_wall
        ),
        target: "within 1.5x of uniform (>= 0.67)",
        detail: format!(
            "{n} records; uniform {:.2}M/s, skewed {:.2}M/s; skewed without pre-aggregation {:.2}M/s (ratio {:.2})",
            n as f64 / uniform_wall / 1e6,
            n as f64 / skewed_wall / 1e6,
            n as f64 / skewed_without / 1e6,
            uniform_wall / skewed_without
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
        ("scenario1", Box::new(scenario1_etl)),
        ("chained", Box::new(chained_filter_map)),
        ("shuffle", Box::new(key_by_shuffle)),
        ("latency-100k-5ms", Box::new(|| latency(100_000.0, ms(5)))),
        ("latency-500k-5ms", Box::new(|| latency(500_000.0, ms(5)))),
        ("latency-1m-5ms", Box::new(|| latency(1_000_000.0, ms(5)))),
        ("latency-100k-1ms", Box::new(|| latency(100_000.0, ms(1)))),
        ("latency-500k-1ms", Box::new(|| latency(500_000.0, ms(1)))),
        ("latency-1m-1ms", Box::new(|| latency(1_000_000.0, ms(1)))),
        ("windowed", Box::new(windowed)),
        ("windowed_rocksdb", Box::new(windowed_rocksdb)),
        ("state", Box::new(state_memory)),
        ("skew", Box::new(skew)),
        ("checkpoints", Box::new(checkpoints)),
        ("recovery", Box::new(recovery)),
    ];
    let mut figures = HashMap::new();
    println!("| benchmark | measured | target | detail |");
    println!("|---|---|---|---|");
    for (key, bench) in benches {
        if !filter.is_empty() && !filter.iter().any(|f| key.contains(f.as_str())) {
            continue;
        }
        let figure = bench();
        println!(
            "| {} | {} | {} | {} |",
            figure.name, figure.value, figure.target, figure.detail
        );
        figures.insert(key, figure.value);
        std::thread::sleep(Duration::from_millis(500));
    }
    let void = VOID.lock().unwrap();
    if !void.is_empty() {
        eprintln!("{} latency measurement(s) void:", void.len());
        for message in void.iter() {
            eprintln!("  {message}");
        }
        panic!("the latency measurement is void (see above): do not record these figures");
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
