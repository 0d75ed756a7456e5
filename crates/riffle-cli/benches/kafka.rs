//! Kafka to Kafka with the local broker (`scripts/kafka.sh start`): the figures of BENCHMARKS.md
//! for the Kafka connectors.
//!
//! ```sh
//! scripts/kafka.sh start && eval "$(scripts/kafka.sh env)"
//! cargo bench -p riffle-cli --features kafka --bench kafka                # all
//! cargo bench -p riffle-cli --features kafka --bench kafka -- throughput  # by name
//! cargo bench -p riffle-cli --features kafka --bench kafka -- window      # the windowed count
//! ```
//!
//! Throughput: scenario 1 (parse JSON clicks, drop bots, enrich, write JSON) from a topic of 8
//! partitions, filled beforehand, to another, on 2 cores shared with the broker; the time runs
//! from the job's start until every record is written (and, exactly-once, committed).
//! Window: the seed's windowed count (drop bots, enrich, key by user, 1-minute windows, counts
//! and late clicks written back) from such a topic, exactly-once; CPU per event of the job and
//! the broker.
//! Latency: clicks produced at a steady rate with their production time as event time; a
//! read_committed consumer of the output measures production to visibility.

#[path = "common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use riffle::checkpoint::CheckpointConfig;
use riffle::source::BadRecordPolicy;
use riffle::source::datagen::{Generator, JsonPayloads};
use riffle::time::{Clock, SystemClock};
use riffle::{EnvConfig, StreamEnv};
use riffle_cli::clicks::EnrichedClick;
use riffle_cli::demos::etl;
use riffle_cli::demos::{UserCount, pipeline};
use riffle_clicks::Click;
use riffle_clicks::{ClickGenerator, ClicksConfig};
use riffle_kafka::testing::{TestProducer, bootstrap};
use riffle_kafka::{
    KafkaConnection, KafkaSink, KafkaSource, StartFrom, delete_topics, ensure_topics,
};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn kafka() -> KafkaConnection {
    KafkaConnection::new(bootstrap())
}

fn unique(name: &str) -> String {
    format!("bench-{name}-{}", now_ms())
}

/// A topic of 8 partitions with `n` generated JSON clicks.
fn filled_topic(n: u64) -> String {
    let topic = unique("clicks");
    ensure_topics(&kafka(), &[(&topic, 8)], 1).unwrap();
    let generator = JsonPayloads(ClickGenerator::new(ClicksConfig::default()));
    let producer = TestProducer::new(&[("linger.ms", "20"), ("batch.size", "1000000")]);
    for i in 0..n {
        producer.send(
            &topic,
            (i % 8) as i32,
            None,
            generator.generate(i).as_bytes(),
        );
    }
    producer.flush();
    topic
}

fn env(
    parallelism: usize,
    checkpoint_interval: Option<Duration>,
    dir: &std::path::Path,
) -> StreamEnv {
    StreamEnv::with_config(EnvConfig {
        parallelism,
        checkpoints: CheckpointConfig {
            interval: checkpoint_interval,
            storage: dir.display().to_string(),
            ..CheckpointConfig::default()
        },
        ..EnvConfig::default()
    })
}

fn sink(topic: &str, exactly_once: bool) -> KafkaSink<EnrichedClick> {
    let sink = KafkaSink::json(kafka(), topic).key(|c: &EnrichedClick| c.user_id.to_string());
    if exactly_once {
        sink.exactly_once().transactional_id_prefix(unique("txn"))
    } else {
        sink
    }
}

fn source(topic: &str) -> KafkaSource<String> {
    KafkaSource::with_decoder(kafka(), [topic.to_string()], |bytes| {
        String::from_utf8(bytes.to_vec()).map_err(|e| e.to_string())
    })
    .start_from(StartFrom::Earliest)
    .group_id(unique("group"))
}

/// CPU seconds of this process and of the broker (`RIFFLE_KAFKA_PID`, from `scripts/kafka.sh env`).
fn cpu_now() -> (f64, f64) {
    let broker = std::env::var("RIFFLE_KAFKA_PID").map_or(0.0, |pid| common::cpu_seconds(&pid));
    (common::cpu_seconds("self"), broker)
}

/// Reads `input` to the end through scenario 1 into a new topic; events per second from the
/// first record the sink received to the end of the job (the start-up of the clients, which
/// initialises a pool of transactional producers in exactly-once mode, is reported apart).
/// One throughput run: events per second, start-up, and the CPU seconds per million events of the
/// job's process and of the broker over the whole run.
struct Run {
    rate: f64,
    startup: Duration,
    /// From the last record read to the end of the job (flush, final commit).
    drain: Duration,
    job_cpu: f64,
    broker_cpu: f64,
}

fn throughput_run(input: &str, n: u64, exactly_once: bool) -> Run {
    let output = unique("enriched");
    ensure_topics(&kafka(), &[(&output, 8)], 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Both guarantees checkpoint every 10 s: at-least-once flushes at each barrier, exactly-once
    // commits a transaction per checkpoint.
    let env = env(2, Some(Duration::from_secs(10)), dir.path());
    let payloads = env.from_source(source(input));
    etl::pipeline(
        &payloads,
        BadRecordPolicy::DeadLetter,
        sink(&output, exactly_once),
    );
    let started = Instant::now();
    let cpu_before = cpu_now();
    let job = env.execute_async().unwrap();
    let mut first_written = None;
    loop {
        let metrics = job.metrics();
        let total = |prefix: &str| -> u64 {
            metrics
                .operators
                .iter()
                .filter(|o| o.name.starts_with(prefix))
                .map(|o| o.records_in.max(o.records_out))
                .sum()
        };
        if first_written.is_none() && total(etl::WRITE) > 0 {
            first_written = Some((Instant::now(), total("Source:")));
        }
        if total("Source:") >= n {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let all_read = Instant::now();
    job.stop(); // drains: flushes, and commits the last transaction
    job.wait().unwrap();
    let drain = all_read.elapsed();
    let cpu_after = cpu_now();
    let (first, read_before) = first_written.expect("the sink received records");
    let run = Run {
        rate: (n - read_before) as f64 / first.elapsed().as_secs_f64(),
        startup: first.duration_since(started),
        drain,
        job_cpu: (cpu_after.0 - cpu_before.0) / (n as f64 / 1e6),
        broker_cpu: (cpu_after.1 - cpu_before.1) / (n as f64 / 1e6),
    };
    delete_topics(&kafka(), &[&output]).unwrap(); // ~0.7 GB each
    run
}

fn throughput() {
    // Long enough for a few 10 s checkpoints in each run.
    let n = 12_000_000;
    let input = filled_topic(n);
    // A warm-up run (the first read of the topic is slower), then the two guarantees in
    // alternating order so that the machine's drift hits both alike; medians compared.
    throughput_run(&input, n, false);
    let mut alo = Vec::new();
    let mut eos = Vec::new();
    for round in 0..4 {
        let first_eos = round % 2 == 1;
        let first = throughput_run(&input, n, first_eos);
        let second = throughput_run(&input, n, !first_eos);
        let (a, e) = if first_eos {
            (second, first)
        } else {
            (first, second)
        };
        alo.push(a);
        eos.push(e);
    }
    delete_topics(&kafka(), &[&input]).unwrap();
    let median = |v: &[Run], of: fn(&Run) -> f64| {
        let mut values: Vec<f64> = v.iter().map(of).collect();
        values.sort_by(f64::total_cmp);
        (values[values.len() / 2 - 1] + values[values.len() / 2]) / 2.0
    };
    let runs = |v: &[Run]| {
        let rates = v
            .iter()
            .map(|r| {
                format!(
                    "{:.0}K ({:.1} s start-up, {:.2} s drain)",
                    r.rate / 1e3,
                    r.startup.as_secs_f64(),
                    r.drain.as_secs_f64()
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "runs: {rates}; CPU per 1M events: job {:.2} s, broker {:.2} s",
            median(v, |r| r.job_cpu),
            median(v, |r| r.broker_cpu)
        )
    };
    println!(
        "| scenario 1 Kafka -> Kafka, at-least-once, 2 cores with the broker | median {:.0}K events/s ({}) | >= 500K events/s | {n} JSON clicks in 8 partitions, p=2 |",
        median(&alo, |r| r.rate) / 1e3,
        runs(&alo)
    );
    println!(
        "| same, exactly-once (checkpoint every 10 s) | median {:.0}K events/s ({}); {:.1}% below at-least-once (medians) | within 20% | a transaction per checkpoint and subtask |",
        median(&eos, |r| r.rate) / 1e3,
        runs(&eos),
        (1.0 - median(&eos, |r| r.rate) / median(&alo, |r| r.rate)) * 100.0
    );
}

/// The seed's windowed job, exactly-once, from `input` (`n` clicks) to new topics: events per
/// second from the job's start until every click is read, and CPU seconds per million events
/// of the job and of the broker, over the whole run (its final commit included).
fn window_run(input: &str, n: u64) -> (f64, f64, f64) {
    let (counts, late) = (unique("agg-clicks"), unique("late-clicks"));
    ensure_topics(&kafka(), &[(&counts, 8), (&late, 1)], 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let env = env(1, Some(Duration::from_secs(10)), dir.path());
    let event_time = pipeline::PipelineArgs::default_args().event_time;
    let clicks = env.from_source_with_watermarks(
        KafkaSource::<Click>::json(kafka(), [input.to_string()])
            .start_from(StartFrom::Earliest)
            .group_id(unique("group")),
        event_time.strategy().unwrap(),
    );
    let (per_user, late_clicks) = pipeline::pipeline(&clicks, &event_time).unwrap();
    per_user.sink(
        KafkaSink::json(kafka(), &counts)
            .key(|c: &UserCount| c.user_id.to_string())
            .exactly_once()
            .transactional_id_prefix(format!("{counts}-txn")),
    );
    late_clicks.sink(
        KafkaSink::json(kafka(), &late)
            .exactly_once()
            .transactional_id_prefix(format!("{late}-txn")),
    );
    let started = Instant::now();
    let cpu_before = cpu_now();
    let job = env.execute_async().unwrap();
    let mut reported = Instant::now();
    loop {
        let read: u64 = job
            .metrics()
            .operators
            .iter()
            .filter(|o| o.name.starts_with("Source:"))
            .map(|o| o.records_in.max(o.records_out))
            .sum();
        if read >= n {
            break;
        }
        if job.is_finished() {
            let result = job.wait().map(|r| r.restarts);
            panic!("the job ended after {read} of {n} clicks: {result:?}");
        }
        if reported.elapsed() > Duration::from_secs(10) {
            eprintln!("window: {read} of {n} clicks read");
            reported = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    job.stop();
    job.wait().unwrap();
    let cpu_after = cpu_now();
    delete_topics(&kafka(), &[&counts, &late]).unwrap();
    let per_million = n as f64 / 1e6;
    (
        rate,
        (cpu_after.0 - cpu_before.0) / per_million,
        (cpu_after.1 - cpu_before.1) / per_million,
    )
}

fn window() {
    let n = 5_000_000;
    let input = filled_topic(n);
    window_run(&input, n); // warm-up: the first read of the topic is slower
    let runs: Vec<(f64, f64, f64)> = (0..3).map(|_| window_run(&input, n)).collect();
    delete_topics(&kafka(), &[&input]).unwrap();
    let mut cpu: Vec<f64> = runs.iter().map(|r| r.1).collect();
    cpu.sort_by(f64::total_cmp);
    let detail = runs
        .iter()
        .map(|(rate, job, broker)| {
            format!(
                "{:.0}K events/s, job {job:.2} s and broker {broker:.2} s per 1M",
                rate / 1e3
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    println!(
        "| seed's windowed count Kafka -> Kafka, exactly-once, p=1, 2 cores with the broker | median {:.0}K events per job CPU-s | reported | {n} JSON clicks in 8 partitions, 1-minute windows, checkpoint every 10 s; runs: {detail} |",
        1e6 / cpu[1] / 1e3
    );
}

fn now_ms() -> i64 {
    SystemClock.now()
}

/// How the latency is measured: through a job with a guarantee, or (the baseline) the broker
/// and clients alone, the reader reading the input topic.
#[derive(Clone, Copy, PartialEq)]
enum Path {
    Job { exactly_once: bool },
    BrokerOnly,
}

/// The event time of a click or an enriched click.
#[derive(serde::Deserialize)]
struct EventTime {
    event_time: i64,
}

/// Production-to-visibility latency at `rate` clicks per second for `seconds`.
fn latency_run(path: Path, rate: f64, seconds: f64, interval: Duration) -> String {
    let input = unique("latency-in");
    let output = unique("latency-out");
    ensure_topics(&kafka(), &[(&input, 8), (&output, 8)], 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let env = env(2, Some(interval), dir.path());
    let job = match path {
        Path::Job { exactly_once } => {
            etl::pipeline(
                &env.from_source(source(&input)),
                BadRecordPolicy::DeadLetter,
                sink(&output, exactly_once),
            );
            Some(env.execute_async().unwrap())
        }
        Path::BrokerOnly => None,
    };
    let read = if path == Path::BrokerOnly {
        input.clone()
    } else {
        output.clone()
    };

    let histogram = Arc::new(Mutex::new(
        Histogram::<u64>::new_with_bounds(1, 600_000, 3).unwrap(),
    ));
    let done = Arc::new(AtomicBool::new(false));
    let warmup_until = now_ms() + 3_000;
    let reader = {
        let (histogram, done, output) = (histogram.clone(), done.clone(), read);
        std::thread::spawn(move || {
            let consumer: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", bootstrap())
                .set("group.id", unique("latency-reader"))
                .set("isolation.level", "read_committed")
                .set("fetch.wait.max.ms", "5")
                .create()
                .unwrap();
            let mut tpl = TopicPartitionList::new();
            for p in 0..8 {
                tpl.add_partition_offset(&output, p, Offset::Beginning)
                    .unwrap();
            }
            consumer.assign(&tpl).unwrap();
            while !done.load(Ordering::Acquire) {
                if let Some(Ok(m)) = consumer.poll(Duration::from_millis(50)) {
                    let click: EventTime = serde_json::from_slice(m.payload().unwrap()).unwrap();
                    if click.event_time >= warmup_until {
                        let ms = (now_ms() - click.event_time).max(1) as u64;
                        histogram.lock().unwrap().record(ms).unwrap();
                    }
                }
            }
        })
    };
    let generator = ClickGenerator::new(ClicksConfig::default());
    let producer = TestProducer::new(&[("linger.ms", "1")]);
    let start = Instant::now();
    let total = (rate * seconds) as u64;
    for i in 0..total {
        let due = start + Duration::from_secs_f64(i as f64 / rate);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let mut click = generator.generate(i);
        click.event_time = now_ms();
        let payload = serde_json::to_string(&click).unwrap();
        producer.send(&input, (i % 8) as i32, None, payload.as_bytes());
        if i % 1000 == 0 {
            producer.poll();
        }
    }
    producer.flush();
    // Let the last transaction commit, then stop.
    std::thread::sleep(interval + Duration::from_secs(3));
    done.store(true, Ordering::Release);
    reader.join().unwrap();
    // Inside the job: the latency markers' delay from the source to the sink (last minute).
    let inside = job.map(|job| {
        let sink = job
            .metrics()
            .operator_total(etl::WRITE)
            .expect("the sink's metrics");
        job.stop();
        job.wait().unwrap();
        riffle_web::views::Latency::of(&sink.latencies_us).map_or(String::new(), |l| {
            format!(
                "; inside the job (latency markers, source to sink): p50 {:.2} ms, p99 {:.2} ms",
                l.p50_ms, l.p99_ms
            )
        })
    });
    delete_topics(&kafka(), &[&input, &output]).unwrap();
    let h = histogram.lock().unwrap();
    format!(
        "p50 {} ms, p99 {} ms, max {} ms ({} samples){}",
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.99),
        h.max(),
        h.len(),
        inside.unwrap_or_default()
    )
}

fn latency() {
    let (rate, seconds) = (50_000.0, 20.0);
    let baseline = latency_run(Path::BrokerOnly, rate, seconds, Duration::from_secs(10));
    println!(
        "| latency baseline: producer -> broker -> read_committed consumer, no job, {rate:.0} clicks/s | {baseline} | reported | the clients and broker alone, as configured in this benchmark |"
    );
    let runs = [
        (
            "at-least-once, 50000 clicks/s",
            false,
            10,
            "produce time to visibility for a read_committed consumer, p=2",
        ),
        (
            "exactly-once, checkpoint every 10 s",
            true,
            10,
            "records become visible when the checkpoint that covers them completes",
        ),
        ("exactly-once, checkpoint every 1 s", true, 1, "same"),
    ];
    for (label, exactly_once, interval, detail) in runs {
        let figure = latency_run(
            Path::Job { exactly_once },
            rate,
            seconds,
            Duration::from_secs(interval),
        );
        println!("| latency Kafka -> Kafka, {label} | {figure} | reported | {detail} |");
    }
}

fn main() {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let benches: Vec<(&str, fn())> = vec![
        ("throughput", throughput),
        ("window", window),
        ("latency", latency),
    ];
    println!("| benchmark | measured | target | detail |");
    println!("|---|---|---|---|");
    for (name, bench) in benches {
        if filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str())) {
            bench();
        }
    }
}
