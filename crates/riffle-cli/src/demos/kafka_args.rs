//! The flags of `riffle demo --kafka <bootstrap>` (parsed whether or not riffle was built with
//! Kafka support, so that a build without it says so).

use clap::{Args, ValueEnum};

/// Options of `riffle demo --kafka`.
#[derive(Args, Clone, Debug)]
pub struct KafkaArgs {
    /// Run the pipeline between Kafka topics on these brokers (host:port,...): clicks ->
    /// agg-clicks, late-clicks and clicks-dlq, creating the topics when absent.
    #[arg(long, value_name = "BOOTSTRAP")]
    pub kafka: Option<String>,
    /// Delivery guarantee of the Kafka sinks.
    #[arg(long, value_enum, default_value_t = GuaranteeArg::ExactlyOnce, value_name = "GUARANTEE")]
    pub kafka_guarantee: GuaranteeArg,
    /// Prefix of the four topic names (for several demos on one cluster).
    #[arg(long, default_value = "", value_name = "PREFIX")]
    pub kafka_topic_prefix: String,
    /// Partitions of `clicks` when the demo creates it.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub kafka_partitions: i32,
    /// Do not write clicks into `clicks`: only read what is (or will be) there.
    #[arg(long)]
    pub kafka_no_producer: bool,
    /// Run as one member of the process group NAME (issue 17, docs/scale-out.md): start the
    /// same command in several processes, on one machine or many; Kafka's consumer group
    /// assigns each the partitions of `clicks` and of the shuffle topic
    /// `NAME-by-user-repartition`, and the keyed windows move with them (heap or RocksDB
    /// state). Needs exactly-once, a checkpoint interval and a checkpoint storage the members
    /// share (S3). A member writes no clicks (as with --kafka-no-producer).
    #[arg(long, value_name = "NAME")]
    pub group: Option<String>,
    /// Partitions of the group's shuffle topic when it creates it (the most processes that
    /// share the windows; default: as many as `clicks` has).
    #[arg(long, value_name = "N")]
    pub kafka_shuffle_partitions: Option<usize>,
    /// With --group: keep a warm copy of the windows' state of the partitions N other members
    /// own (Kafka Streams' num.standby.replicas), so that a takeover after one of them dies
    /// restores from memory instead of the checkpoint storage. Costs a read of their state per
    /// commit and the memory to hold it. Default 0.
    #[arg(long, value_name = "N")]
    pub num_standby_replicas: Option<usize>,
    /// With --group: replace the group's job, whose fingerprint (HASH) a member refused with
    /// another job names, by this one. Stop every member of the old job first; the new members
    /// restore its state by operator uid, as from a savepoint (docs/scale-out.md).
    #[arg(long, value_name = "HASH")]
    pub upgrade_from: Option<String>,
    /// A librdkafka client setting for every client, KEY=VALUE (repeatable; SASL and SSL
    /// settings included, secrets are never printed).
    #[arg(long = "kafka-set", value_name = "KEY=VALUE")]
    pub kafka_settings: Vec<String>,
}

/// The Kafka sinks' delivery guarantee.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GuaranteeArg {
    /// A Kafka transaction per checkpoint; read `agg-clicks` with isolation.level=read_committed.
    ExactlyOnce,
    /// Flushed at every checkpoint; replays after a failure are written again.
    AtLeastOnce,
}

/// The topics of the demo.
#[derive(Clone, Debug)]
pub struct Topics {
    /// Input clicks.
    pub clicks: String,
    /// Counts per user and window.
    pub counts: String,
    /// Late clicks.
    pub late: String,
    /// Records of `clicks` that could not be decoded.
    pub dead_letters: String,
}

impl KafkaArgs {
    /// The topic names, with the prefix.
    pub fn topics(&self) -> Topics {
        let p = &self.kafka_topic_prefix;
        Topics {
            clicks: format!("{p}clicks"),
            counts: format!("{p}agg-clicks"),
            late: format!("{p}late-clicks"),
            dead_letters: format!("{p}clicks-dlq"),
        }
    }
}
