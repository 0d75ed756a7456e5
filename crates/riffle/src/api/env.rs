//! [`StreamEnv`]: where a job is declared, configured and started.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use crate::api::declared::{EnvInner, sink_node};
use crate::api::stream::DataStream;
use crate::config::EnvConfig;
use crate::error::{Error, Result};
use crate::graph::{self, Edge, JobPlan, Node, NodeKind, Ship, Slot, TypeOf};
use crate::record::Data;
use crate::runtime::source_task::SourceSpec;
use crate::runtime::{JobHandle, JobResult, start};
use crate::sink::FileSink;
use crate::source::DEAD_LETTER_TAG;
use crate::source::collection::CollectionSource;
use crate::source::{BadRecordPolicy, DeadLetter, Source};
use crate::time::WatermarkStrategy;

/// Declares and runs a job: the entry point of the DataStream API.
///
/// ```
/// use riffle::{StreamEnv, sink::CollectSink};
///
/// let env = StreamEnv::new();
/// let (sink, output) = CollectSink::new();
/// env.from_iter(vec!["a b".to_string(), "c".to_string()])
///     .flat_map(|line: String| line.split(' ').map(str::to_string).collect::<Vec<_>>())
///     .filter(|word| word != "c")
///     .sink(sink);
/// let result = env.execute().unwrap();
/// assert_eq!(output.sorted(), vec!["a", "b"]);
/// assert_eq!(result.records_out("Filter"), 2);
/// ```
#[derive(Clone)]
pub struct StreamEnv {
    pub(crate) inner: Rc<EnvInner>,
}

impl Default for StreamEnv {
    fn default() -> Self {
        StreamEnv::new()
    }
}

impl StreamEnv {
    /// An environment with the default configuration.
    pub fn new() -> Self {
        StreamEnv::with_config(EnvConfig::default())
    }

    /// An environment with the given configuration (checked when the job starts).
    pub fn with_config(config: EnvConfig) -> Self {
        StreamEnv {
            inner: Rc::new(EnvInner {
                config: RefCell::new(config),
                nodes: RefCell::new(Vec::new()),
                errors: RefCell::new(Vec::new()),
            }),
        }
    }

    /// The current configuration.
    pub fn config(&self) -> EnvConfig {
        self.inner.config.borrow().clone()
    }

    /// Changes the configuration for operators declared from now on and for the job.
    pub fn configure(&self, change: impl FnOnce(&mut EnvConfig)) -> &Self {
        change(&mut self.inner.config.borrow_mut());
        self
    }

    /// Sets the default parallelism of operators.
    pub fn set_parallelism(&self, parallelism: usize) -> &Self {
        self.configure(|c| c.parallelism = parallelism)
    }

    /// A stream read from `source`, without event-time watermarks (a bounded source still ends
    /// with the final watermark, so windows fire at its end).
    pub fn from_source<T: Data, S: Source<T>>(&self, source: S) -> DataStream<T> {
        self.from_source_with_watermarks(source, WatermarkStrategy::no_watermarks())
    }

    /// A stream read from `source`, whose splits assign event time and generate watermarks
    /// with `strategy` (per split: per file, per Kafka partition).
    ///
    /// ```
    /// use std::time::Duration;
    /// use riffle::{StreamEnv, time::WatermarkStrategy};
    /// use riffle_clicks::{Click, ClicksConfig};
    ///
    /// let env = StreamEnv::new();
    /// let clicks = env.from_source_with_watermarks(
    ///     riffle_clicks::source(ClicksConfig::default()).count(1_000),
    ///     WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(5)).with_timestamps(|c: &Click| c.event_time),
    /// );
    /// ```
    pub fn from_source_with_watermarks<T: Data, S: Source<T>>(
        &self,
        source: S,
        strategy: WatermarkStrategy<T>,
    ) -> DataStream<T> {
        let name = format!("Source: {}", source.name());
        let bad_records = Some(source.bad_record_policy());
        let watermarks = strategy.describe();
        let node = self.inner.add_node(Node {
            bad_records,
            name,
            uid: None,
            parallelism: None,
            inputs: Vec::new(),
            out_type: TypeOf::<T>::arc(),
            kind: NodeKind::Source(Arc::new(SourceSpec::new(source, strategy))),
            start_new_chain: false,
            keyed: false,
            exclusive: None,
            settings: vec![("watermarks".to_string(), watermarks)],
        });
        DataStream::new(self.inner.clone(), node, Slot::Main, Ship::Forward)
    }

    /// A bounded stream of the given values (for tests and examples).
    pub fn from_iter<T: Data + Sync>(&self, values: impl IntoIterator<Item = T>) -> DataStream<T> {
        self.from_source(CollectionSource::new(values.into_iter().collect()))
    }

    /// A bounded stream of `count` records, record `i` being `f(i)` (in order, from one split;
    /// replayed exactly after a restore). For quick jobs and tests.
    ///
    /// ```
    /// use riffle::{StreamEnv, sink::CollectSink};
    /// let env = StreamEnv::new();
    /// let (sink, out) = CollectSink::new();
    /// env.from_fn(5, |i| i * i).filter(|x| x % 2 == 0).sink(sink);
    /// env.execute().unwrap();
    /// assert_eq!(out.sorted(), vec![0, 4, 16]);
    /// ```
    pub fn from_fn<T: Data>(
        &self,
        count: u64,
        f: impl Fn(u64) -> T + Send + Sync + 'static,
    ) -> DataStream<T> {
        self.from_source(
            crate::source::datagen::DatagenSource::new(crate::source::function::FnGenerator::new(
                f,
            ))
            .count(count)
            .splits(1),
        )
    }

    /// A bounded stream of the given values with event time and watermarks from `strategy`
    /// (for tests and examples: with [`EnvConfig::deterministic`](crate::EnvConfig::deterministic)
    /// a watermark follows every value, so lateness shows on a handful of values).
    pub fn from_iter_with_watermarks<T: Data + Sync>(
        &self,
        values: impl IntoIterator<Item = T>,
        strategy: WatermarkStrategy<T>,
    ) -> DataStream<T> {
        self.from_source_with_watermarks(
            CollectionSource::new(values.into_iter().collect()),
            strategy,
        )
    }

    /// What of this job changes its state or its results ([`JobFingerprint`]): processes that
    /// run one job together compare it, so that a member with another job is refused.
    ///
    /// [`JobFingerprint`]: crate::JobFingerprint
    pub fn fingerprint(&self) -> Result<crate::JobFingerprint> {
        let config = self.config();
        config.validate()?;
        graph::fingerprint(&self.job_nodes()?, &config)
    }

    /// The physical plan the job would run with: chains, parallelism, edges.
    pub fn plan(&self) -> Result<JobPlan> {
        let config = self.config();
        config.validate()?;
        graph::describe_nodes(&self.job_nodes()?, &config)
    }

    /// Runs the job to its end (for bounded sources) and returns its final metrics.
    ///
    /// When sources dead-lettered records, it says so on standard error and in the log, with
    /// where they went (one line), and with [`EnvConfig::fail_on_dead_letters`] it returns
    /// [`Error::DeadLettered`](crate::Error::DeadLettered).
    pub fn execute(&self) -> Result<JobResult> {
        let result = self.execute_async()?.wait()?;
        let dead = result.bad_records();
        if dead > 0 {
            let config = self.config();
            let location = self.dead_letter_location(&config);
            let line = format!(
                "riffle: job `{}`: {dead} record(s) could not be decoded; dead letters in {location}",
                config.job_name
            );
            tracing::warn!("{line}");
            eprintln!("{line}");
            if config.fail_on_dead_letters {
                return Err(Error::DeadLettered {
                    count: dead,
                    location,
                });
            }
        }
        Ok(result)
    }

    /// Where the dead letters of this job go: the default files, the job's own outputs, or both.
    fn dead_letter_location(&self, config: &EnvConfig) -> String {
        let nodes = self.inner.nodes.borrow();
        let consumed = nodes.iter().any(|n| {
            n.inputs
                .iter()
                .any(|e| e.slot == Slot::Side(DEAD_LETTER_TAG.into()))
        });
        let default_files = nodes.iter().enumerate().any(|(id, n)| {
            n.bad_records == Some(BadRecordPolicy::DeadLetter)
                && !nodes.iter().any(|c| {
                    c.inputs
                        .iter()
                        .any(|e| e.from == id && e.slot == Slot::Side(DEAD_LETTER_TAG.into()))
                })
        });
        match (default_files, consumed) {
            (true, false) => format!("{}/", config.dead_letter_dir.display()),
            (true, true) => format!(
                "{}/ and the job's dead-letter outputs",
                config.dead_letter_dir.display()
            ),
            (false, _) => "the job's dead-letter outputs (or were skipped, by policy)".to_string(),
        }
    }

    /// Starts the job in the background.
    pub fn execute_async(&self) -> Result<JobHandle> {
        let config = self.config();
        let nodes = self.job_nodes()?;
        tracing::info!(job = %config.job_name, "starting job");
        start(Box::new(crate::graph::GraphPlanner::new(nodes)), config)
    }

    /// The declared graph plus what the job adds by itself (default dead-letter files).
    fn job_nodes(&self) -> Result<Vec<Node>> {
        if let Some(error) = self.inner.errors.borrow().first() {
            return Err(Error::Graph(error.clone()));
        }
        let mut nodes = self.inner.nodes.borrow().clone();
        let config = self.config();
        for id in 0..nodes.len() {
            if nodes[id].bad_records != Some(BadRecordPolicy::DeadLetter) {
                continue;
            }
            let consumed = nodes.iter().any(|n| {
                n.inputs
                    .iter()
                    .any(|e| e.from == id && e.slot == Slot::Side(DEAD_LETTER_TAG.into()))
            });
            if !consumed {
                let name = nodes[id].name.clone();
                let dir = config.dead_letter_dir.join(file_name_of(&name));
                let sink_name = format!("Dead letters: {name}");
                // With checkpoints, dead letters are committed with them like any exactly-once
                // output: a restore neither loses nor repeats one.
                let mut node = if config.checkpoints.enabled() {
                    sink_node(
                        sink_name,
                        crate::sink::ExactlyOnceFileSink::<DeadLetter>::new(dir)
                            .setting_name("dead_letter_dir"),
                    )
                } else {
                    sink_node(sink_name, FileSink::<DeadLetter>::new(dir).append(true))
                };
                node.parallelism = nodes[id].parallelism;
                node.inputs.push(Edge {
                    from: id,
                    slot: Slot::Side(DEAD_LETTER_TAG.into()),
                    ship: Ship::Forward,
                    ty: TypeOf::<DeadLetter>::arc(),
                    into: None,
                });
                nodes.push(node);
            }
        }
        Ok(nodes)
    }
}

/// A name usable as a file name.
fn file_name_of(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
