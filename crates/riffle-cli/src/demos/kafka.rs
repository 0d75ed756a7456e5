//! The seed's job between Kafka topics (`riffle demo --kafka <bootstrap>`): a producer job writes
//! generated clicks (or `--input` lines) into `clicks` (8 partitions); the main job reads them
//! with the Kafka source (offsets in checkpoints, watermarks per partition), runs the seed's
//! pipeline (drop bots, enrich, key by user, 1-minute windows with allowed lateness) and writes
//! the counts to `agg-clicks` in Kafka transactions (exactly-once, by default), the late clicks
//! to `late-clicks` and undecodable records to `clicks-dlq`. Topics that do not exist are
//! created.

use riffle::StreamEnv;
use riffle::source::DeadLetter;
use riffle_clicks::Click;
use riffle_kafka::{KafkaConnection, KafkaSink, KafkaSource, StartFrom, ensure_topics};

use crate::demos::UserCount;
use crate::demos::kafka_args::{GuaranteeArg, KafkaArgs};
use crate::demos::pipeline::{DEFAULT_COUNT, PipelineArgs, pipeline};
use crate::demos::windowed_count::{WindowedSummary, print_checkpoints, run_windowed};

/// The connection, with the `--kafka-set` settings; errors name the flag.
pub fn connection(args: &KafkaArgs, bootstrap: &str) -> riffle::Result<KafkaConnection> {
    let mut kafka = KafkaConnection::new(bootstrap);
    for setting in &args.kafka_settings {
        let (key, value) = setting.split_once('=').ok_or_else(|| {
            riffle::Error::config("--kafka-set", format!("expects KEY=VALUE, got `{setting}`"))
        })?;
        kafka = kafka.set(key.trim(), value.trim());
    }
    Ok(kafka)
}

/// A sink with the demo's guarantee (transactional ids named after the topic).
fn sink<T: riffle::Data>(args: &KafkaArgs, kafka: &KafkaConnection, topic: &str) -> KafkaSink<T> {
    let sink = KafkaSink::json(kafka.clone(), topic);
    match args.kafka_guarantee {
        GuaranteeArg::ExactlyOnce => sink
            .exactly_once()
            .transactional_id_prefix(format!("riffle-demo-{topic}")),
        GuaranteeArg::AtLeastOnce => sink,
    }
}

/// Runs the seed's job between Kafka topics until it is stopped (Ctrl-C).
pub fn run(args: &PipelineArgs, bootstrap: &str) -> riffle::Result<WindowedSummary> {
    let kafka_args = &args.kafka;
    let kafka = connection(kafka_args, bootstrap)?;
    let topics = kafka_args.topics();
    if kafka_args.kafka_partitions < 1 {
        return Err(riffle::Error::config(
            "--kafka-partitions",
            "must be at least 1",
        ));
    }
    ensure_topics(
        &kafka,
        &[
            (&topics.clicks, kafka_args.kafka_partitions),
            (&topics.counts, kafka_args.kafka_partitions),
            (&topics.late, 1),
            (&topics.dead_letters, 1),
        ],
        1,
    )?;

    // The producer: generated clicks (or --input lines) into `clicks`, at --rate.
    let producer = if kafka_args.kafka_no_producer {
        None
    } else {
        let env = StreamEnv::with_config(args.engine.env_config("kafka-producer")?);
        args.input
            .payloads(&env, Some(DEFAULT_COUNT))?
            .sink(KafkaSink::raw(kafka.clone(), &topics.clicks))
            .name("write clicks");
        Some(env.execute_async()?)
    };

    // The seed's job.
    let env = StreamEnv::with_config(args.engine.env_config("pipeline-kafka")?);
    let clicks = env
        .from_source_with_watermarks(
            KafkaSource::<Click>::json(kafka.clone(), [topics.clicks.clone()])
                .group_id(format!("riffle-demo-{}", topics.clicks))
                .start_from(StartFrom::GroupOffsets)
                .bad_records(args.input.bad_records),
            args.event_time.strategy()?,
        )
        .uid("read-clicks");
    clicks
        .dead_letters()
        .sink(sink::<DeadLetter>(kafka_args, &kafka, &topics.dead_letters))
        .name("write dead letters")
        .uid("write-dead-letters");
    let (counts, late) = pipeline(&clicks, &args.event_time)?;
    counts
        .sink(
            sink::<UserCount>(kafka_args, &kafka, &topics.counts)
                .key(|c: &UserCount| c.user_id.to_string()),
        )
        .name("write counts")
        .uid("write-counts");
    late.sink(sink(kafka_args, &kafka, &topics.late))
        .name("write late clicks")
        .uid("write-late-clicks");
    println!(
        "riffle demo --kafka {bootstrap}: {} -> drop bots -> enrich -> key by user -> {} s windows (+{} s lateness) -> {} ({:?}), {}, {}",
        topics.clicks,
        args.event_time.window_secs,
        args.event_time.lateness_secs,
        topics.counts,
        kafka_args.kafka_guarantee,
        topics.late,
        topics.dead_letters
    );
    let summary = run_windowed(&env, &args.engine, "kafka");
    if let Some(producer) = producer {
        producer.stop();
        if let Err(e) = producer.wait() {
            eprintln!("the producer of {}: {e}", topics.clicks);
        }
    }
    let summary = summary?;
    println!(
        "  read {} clicks; {} counts -> {}; {} late clicks -> {}",
        summary.read, summary.results, topics.counts, summary.late, topics.late
    );
    print_checkpoints(&summary);
    Ok(summary)
}
