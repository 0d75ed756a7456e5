//! The seed's job between Kafka topics (`riffle demo --kafka <bootstrap>`): a producer job writes
//! generated clicks (or `--input` lines) into `clicks` (8 partitions); the main job reads them
//! with the Kafka source (offsets in checkpoints, watermarks per partition), runs the seed's
//! pipeline (drop bots, enrich, key by user, 1-minute windows with allowed lateness) and writes
//! the counts to `agg-clicks` in Kafka transactions (exactly-once, by default), the late clicks
//! to `late-clicks` and undecodable records to `clicks-dlq`. Topics that do not exist are
//! created.
//!
//! With `--group NAME` the process is one member of a group of processes running the job
//! together (issue 17, `docs/scale-out.md`): Kafka's consumer group assigns the partitions of
//! `clicks` and of the shuffle topic between the enrichment and the windows; a member that dies
//! or joins moves partitions, with the windows' state.

use riffle::StreamEnv;
use riffle::source::DeadLetter;
use riffle_clicks::Click;
use riffle_kafka::{
    KafkaConnection, KafkaGroup, KafkaShuffle, KafkaShuffleExt, KafkaSink, KafkaSource, StartFrom,
    ensure_topics, run_in_group_with,
};

use crate::demos::kafka_args::{GuaranteeArg, KafkaArgs};
use crate::demos::pipeline::{DEFAULT_COUNT, PipelineArgs, pipeline, pipeline_through};
use crate::demos::windowed_count::{
    WindowedSummary, print_checkpoints, run_windowed, run_windowed_with,
};
use crate::demos::{EngineArgs, UserCount};

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
    if let Some(group) = &kafka_args.group {
        return run_group(args, &kafka, group, bootstrap);
    }
    if kafka_args.upgrade_from.is_some() {
        return Err(riffle::Error::config(
            "--upgrade-from",
            "replaces the job of a process group: it needs --group",
        ));
    }
    if kafka_args.num_standby_replicas.is_some() {
        return Err(riffle::Error::config(
            "--num-standby-replicas",
            "standby replicas are copies of other members' state: they need --group",
        ));
    }

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

/// The checkpoint interval of a group member when `--checkpoint-interval-ms` is not given: a
/// member commits at checkpoints, and the shuffle's records reach the windows at commits.
const GROUP_CHECKPOINT_MS: u64 = 1_000;

/// The engine options of a member of a process group: a checkpoint interval of
/// [`GROUP_CHECKPOINT_MS`] unless one is given (members commit at checkpoints), and no
/// `--restore` (members resume from the group's committed offsets).
pub(crate) fn member_engine(engine: &EngineArgs) -> riffle::Result<EngineArgs> {
    if engine.restore.is_some() {
        return Err(riffle::Error::config(
            "--restore",
            "a group's members resume from the group's committed offsets, not from a checkpoint",
        ));
    }
    let mut engine = engine.clone();
    engine.checkpoint_interval_ms = engine.checkpoint_interval_ms.or(Some(GROUP_CHECKPOINT_MS));
    Ok(engine)
}

/// The run options of a member of `group`: each run's web server answers `/api/v1/group`
/// (and `riffle jobs` shows it) from the brokers.
pub(crate) fn member_run_options(
    engine: &EngineArgs,
    group: &KafkaGroup,
) -> riffle::Result<crate::progress::RunOptions> {
    let mut options = engine.run_options()?;
    if let Some(web) = &mut options.web {
        let group = group.clone();
        web.group = Some(riffle_web::GroupStatus::new(move || {
            let report = group.status().map_err(|e| e.to_string())?;
            serde_json::to_value(report).map_err(|e| e.to_string())
        }));
    }
    Ok(options)
}

/// Prints the partitions a member's run `n` owns.
pub(crate) fn print_run(n: u64, group: &KafkaGroup) {
    let partitions: Vec<String> = group
        .assignment()
        .iter()
        .map(|(topic, partition)| format!("{topic}-{partition}"))
        .collect();
    println!("  run {n}: owns {}", partitions.join(" "));
}

/// Runs the seed's job as one member of the process group `name` until it is stopped.
fn run_group(
    args: &PipelineArgs,
    kafka: &KafkaConnection,
    name: &str,
    bootstrap: &str,
) -> riffle::Result<WindowedSummary> {
    let kafka_args = &args.kafka;
    if kafka_args.kafka_guarantee != GuaranteeArg::ExactlyOnce {
        return Err(riffle::Error::config(
            "--kafka-guarantee",
            "a group's members commit in Kafka transactions: --group is exactly-once",
        ));
    }
    let engine = member_engine(&args.engine)?;
    let topics = kafka_args.topics();
    let partitions = match kafka_args.kafka_shuffle_partitions {
        Some(0) => {
            return Err(riffle::Error::config(
                "--kafka-shuffle-partitions",
                "must be at least 1",
            ));
        }
        Some(n) => n,
        None => kafka_args.kafka_partitions as usize,
    };
    let shuffle = KafkaShuffle::new(kafka.clone(), name, "by-user").partitions(partitions);
    shuffle.create_topic()?;
    let group = KafkaGroup::join(
        kafka.clone(),
        name,
        [topics.clicks.clone(), shuffle.topic()],
    )?;
    group.set_standby_replicas(kafka_args.num_standby_replicas.unwrap_or(0));
    if let Some(hash) = &kafka_args.upgrade_from {
        group.set_upgrade_from(hash.clone());
    }
    println!(
        "riffle demo --kafka {bootstrap} --group {name}: a member; {} -> drop bots -> enrich -> {} -> {} s windows (+{} s lateness) -> {}, {}, {} (exactly-once, commits every {} ms)",
        topics.clicks,
        shuffle.topic(),
        args.event_time.window_secs,
        args.event_time.lateness_secs,
        topics.counts,
        topics.late,
        topics.dead_letters,
        engine.checkpoint_interval_ms.unwrap_or(GROUP_CHECKPOINT_MS)
    );
    let options = member_run_options(&engine, &group)?;
    let mut last = None;
    let mut runs = 0u64;
    run_in_group_with(
        &group,
        |group| {
            runs += 1;
            print_run(runs, group);
            let env = StreamEnv::with_config(engine.env_config("pipeline-kafka")?);
            let clicks = env
                .from_source_with_watermarks(
                    KafkaSource::<Click>::json(kafka.clone(), [topics.clicks.clone()])
                        .in_group(group)
                        .bad_records(args.input.bad_records),
                    args.event_time.strategy()?,
                )
                .uid("read-clicks");
            clicks
                .dead_letters()
                .sink(KafkaSink::json(kafka.clone(), &topics.dead_letters).in_group(group))
                .name("write dead letters")
                .uid("write-dead-letters");
            let shuffle = shuffle.clone().in_group(group);
            let (counts, late) = pipeline_through(&clicks, &args.event_time, |by_user| {
                by_user.through_kafka(shuffle)
            })?;
            counts
                .sink(
                    KafkaSink::json(kafka.clone(), &topics.counts)
                        .key(|c: &UserCount| c.user_id.to_string())
                        .in_group(group),
                )
                .name("write counts")
                .uid("write-counts");
            late.sink(KafkaSink::json(kafka.clone(), &topics.late).in_group(group))
                .name("write late clicks")
                .uid("write-late-clicks");
            Ok(env)
        },
        |env| {
            let mut summary = run_windowed_with(env, &options, "kafka group")?;
            let result = summary
                .result
                .take()
                .expect("a finished run has its result");
            last = Some(summary);
            Ok(result)
        },
    )?;
    let summary = last.expect("a run ended the group's job");
    println!(
        "  last run: read {} clicks; {} counts -> {}; {} late clicks -> {}",
        summary.read, summary.results, topics.counts, summary.late, topics.late
    );
    Ok(summary)
}
