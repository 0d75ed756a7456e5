//! The seed's scenarios as runnable demos: each builds its pipeline on the click stream (the
//! built-in generator, or the user's files with `--input`) and writes to `--output`.

pub mod backpressure;
pub mod cep;
pub mod checkpoint_recovery;
pub mod etl;
pub mod join;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod kafka_args;
pub mod late_events;
pub mod pipeline;
pub mod windowed_count;

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use riffle::checkpoint::{CheckpointConfig, RestoreFrom};
use riffle::sink::{ExactlyOnceFileSink, FileSink, Sink};
use riffle::source::BadRecordPolicy;
use riffle::source::datagen::{DatagenSource, JsonPayloads};
use riffle::source::file::FileSource;
use riffle::time::WatermarkStrategy;
use riffle::window::WindowResult;
use riffle::{DataStream, EnvConfig, Error, StreamEnv};
use riffle_clicks::{Click, ClickGenerator, ClicksConfig};
use serde::{Deserialize, Serialize};

use crate::progress::RunOptions;

/// Where the clicks come from.
#[derive(Args, Clone, Debug)]
pub struct InputArgs {
    /// Read clicks from this JSON-lines file, or directory of files, instead of generating them.
    /// Each line holds user_id, url, user_agent, ip and event_time (epoch ms).
    #[arg(long, value_name = "PATH")]
    pub input: Option<PathBuf>,
    /// Clicks to generate; 0 generates until stopped (Ctrl-C or --duration).
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// Generate at most this many clicks per second (default: as fast as the pipeline goes).
    #[arg(long, value_name = "EVENTS_PER_SEC")]
    pub rate: Option<f64>,
    /// Distinct users in the generated stream.
    #[arg(long, default_value_t = 1_000_000)]
    pub users: u64,
    /// Share of generated clicks that come from bots.
    #[arg(long, default_value_t = 0.3)]
    pub bot_share: f64,
    /// Share of generated clicks from one hot user (the seed's skewed key).
    #[arg(long, default_value_t = 0.0)]
    pub hot_key_share: f64,
    /// Share of generated clicks that arrive 6 minutes late (a mobile user back from the subway).
    #[arg(long, default_value_t = 0.001)]
    pub late_share: f64,
    /// Seed of the generator: the same seed gives the same clicks.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// What to do with input lines that are not valid clicks: fail, skip or dead-letter.
    #[arg(long, default_value = "dead-letter", value_name = "POLICY")]
    pub bad_records: BadRecordPolicy,
}

impl InputArgs {
    /// The lines of a run's summary about its input, labels padded to `width`, counts to
    /// `count_width`: how many files it read (with `--input`), and how many bad records it met
    /// (always, also when none) and where they went. `bad` counts them all; `unplaceable` those
    /// of the window operator (event times no window can hold), which go to the dead letters
    /// whatever `--bad-records` says. `output` is the demo's output directory.
    pub fn summary_lines(
        &self,
        (width, count_width): (usize, usize),
        (bad, unplaceable): (u64, u64),
        output: &std::path::Path,
    ) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(path) = &self.input {
            let files = riffle::source::file::list_files(path).map_or(0, |f| f.len());
            let noun = if files == 1 { "file" } else { "files" };
            lines.push(format!(
                "  {:<width$} {files:>count_width$}  <- {} ({noun}, subdirectories included)",
                "files read",
                path.display()
            ));
        }
        let dead_letters = format!("{}/dead-letter/", output.display());
        let skipped = bad.saturating_sub(unplaceable);
        let note = match (self.bad_records, skipped, unplaceable) {
            (_, 0, 0) => String::new(),
            (BadRecordPolicy::DeadLetter, _, _) | (_, 0, _) => format!("  -> {dead_letters}"),
            (_, _, 0) => "  (skipped)".to_string(),
            (_, skipped, unplaceable) => {
                format!("  ({skipped} skipped, {unplaceable} -> {dead_letters})")
            }
        };
        lines.push(format!(
            "  {:<width$} {bad:>count_width$}{note}",
            "bad records"
        ));
        lines
    }

    /// The generator's configuration, checked; errors name the flag.
    pub fn clicks_config(&self) -> riffle::Result<ClicksConfig> {
        let config = ClicksConfig {
            seed: self.seed,
            users: self.users,
            bot_share: self.bot_share,
            hot_key_share: self.hot_key_share,
            late_share: self.late_share,
            ..ClicksConfig::default()
        };
        config.validate().map_err(|e| match e {
            Error::Config { setting, message } => Error::Config {
                setting: format!("--{}", setting.replace('_', "-")),
                message,
            },
            other => other,
        })?;
        Ok(config)
    }

    /// The raw JSON payloads of the clicks: from `--input`, or generated (`default_count` when
    /// `--count` is not given; `None` for unbounded).
    pub fn payloads(
        &self,
        env: &StreamEnv,
        default_count: Option<u64>,
    ) -> riffle::Result<DataStream<String>> {
        if let Some(path) = &self.input {
            let source = FileSource::lines(path)
                .setting_name("--input")
                .bad_records(self.bad_records);
            return Ok(env.from_source(source));
        }
        let count = self.count.map_or(default_count, |n| (n > 0).then_some(n));
        let generator = JsonPayloads(ClickGenerator::new(self.clicks_config()?));
        Ok(env.from_source(DatagenSource::new(generator).limit(count).pace(self.rate)))
    }

    /// The clicks, decoded by the source, with event time from `event_time` and watermarks per
    /// split (per file, per generator stream).
    pub fn clicks(
        &self,
        env: &StreamEnv,
        default_count: Option<u64>,
        strategy: WatermarkStrategy<Click>,
    ) -> riffle::Result<DataStream<Click>> {
        self.clicks_with(env, default_count, strategy, |_| {})
    }

    /// As [`clicks`](InputArgs::clicks), with the generator's configuration adjusted by `tweak`.
    pub fn clicks_with(
        &self,
        env: &StreamEnv,
        default_count: Option<u64>,
        strategy: WatermarkStrategy<Click>,
        tweak: impl FnOnce(&mut ClicksConfig),
    ) -> riffle::Result<DataStream<Click>> {
        if let Some(path) = &self.input {
            let source = FileSource::<Click>::with_decoder(path, Click::from_json)
                .setting_name("--input")
                .bad_records(self.bad_records);
            return Ok(env
                .from_source_with_watermarks(source, strategy)
                .uid("clicks"));
        }
        let count = self.count.map_or(default_count, |n| (n > 0).then_some(n));
        let mut config = self.clicks_config()?;
        tweak(&mut config);
        let source = riffle_clicks::source(config).limit(count).pace(self.rate);
        Ok(env
            .from_source_with_watermarks(source, strategy)
            .uid("clicks"))
    }
}

/// A sink the demos write JSON lines with (boxed: plain or exactly-once).
pub trait JsonSink<T: riffle::Data>: Sink<T> {}
impl<T: riffle::Data, S: Sink<T>> JsonSink<T> for S {}

impl<T: riffle::Data> Sink<T> for Box<dyn JsonSink<T>> {
    fn name(&self) -> String {
        (**self).name()
    }
    fn validate(&self) -> riffle::Result<()> {
        (**self).validate()
    }
    fn writer(
        &self,
        ctx: &riffle::operators::OperatorContext,
    ) -> riffle::Result<Box<dyn riffle::sink::SinkWriter<T>>> {
        (**self).writer(ctx)
    }
    fn guarantee(&self) -> riffle::sink::Guarantee {
        (**self).guarantee()
    }
}

/// Event-time settings of the windowed demos.
#[derive(Args, Clone, Debug)]
pub struct EventTimeArgs {
    /// How far out of order clicks may arrive, in seconds: the watermark lags the newest click by this.
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
    pub out_of_orderness_secs: f64,
    /// How long a window's state is kept after it fired, in seconds: late clicks within it update the count.
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    pub lateness_secs: f64,
    /// Window length in seconds.
    #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
    pub window_secs: f64,
    /// A split (file, generator stream) silent this long stops holding the watermark back.
    #[arg(long, value_name = "SECONDS")]
    pub idleness_secs: Option<f64>,
    /// A click more than this far ahead of its split's watermark is a watermark outlier (a
    /// device with a wrong clock): counted, processed, but it moves the watermark only when
    /// corroborated; 0 turns the rule off.
    #[arg(long, default_value_t = 3600.0, value_name = "SECONDS")]
    pub max_watermark_jump_secs: f64,
    /// How many outliers in a row, near each other, move the watermark (a real jump in time).
    #[arg(long, default_value_t = riffle::time::DEFAULT_OUTLIER_CORROBORATION, value_name = "CLICKS")]
    pub outlier_corroboration: usize,
}

/// Seconds as a duration; the error names the flag.
pub fn seconds(flag: &str, value: f64, allow_zero: bool) -> riffle::Result<Duration> {
    if !(value.is_finite() && (value > 0.0 || (allow_zero && value == 0.0))) {
        return Err(Error::config(
            flag,
            format!(
                "must be a {}number of seconds, got {value}",
                if allow_zero { "" } else { "positive " }
            ),
        ));
    }
    Ok(Duration::from_secs_f64(value))
}

impl EventTimeArgs {
    /// The watermark strategy for clicks.
    pub fn strategy(&self) -> riffle::Result<WatermarkStrategy<Click>> {
        let bound = seconds("--out-of-orderness-secs", self.out_of_orderness_secs, true)?;
        let mut strategy = WatermarkStrategy::bounded_out_of_orderness(bound)
            .with_timestamps(|c: &Click| c.event_time);
        if let Some(idleness) = self.idleness_secs {
            strategy = strategy.with_idleness(seconds("--idleness-secs", idleness, false)?);
        }
        let jump = seconds(
            "--max-watermark-jump-secs",
            self.max_watermark_jump_secs,
            true,
        )?;
        if self.outlier_corroboration == 0 {
            return Err(Error::config(
                "--outlier-corroboration",
                "must be at least 1 click",
            ));
        }
        Ok(strategy
            .with_max_watermark_jump((!jump.is_zero()).then_some(jump))
            .with_outlier_corroboration(self.outlier_corroboration))
    }

    /// The window length.
    pub fn window(&self) -> riffle::Result<Duration> {
        seconds("--window-secs", self.window_secs, false)
    }

    /// The allowed lateness.
    pub fn lateness(&self) -> riffle::Result<Duration> {
        seconds("--lateness-secs", self.lateness_secs, true)
    }
}

/// One line of the windowed count: clicks of a user in a window.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct UserCount {
    /// The user.
    pub user_id: u64,
    /// First millisecond of the window.
    pub window_start: i64,
    /// First millisecond after the window.
    pub window_end: i64,
    /// Clicks of the user in the window.
    pub count: u64,
    /// Present (true) when the line replaces an earlier count for the same user and window.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub update: bool,
}

impl UserCount {
    /// Appends the count as one JSON document, byte for byte what its `Serialize` writes
    /// through `serde_json` (the encoder of the counts' sink).
    pub fn write_json(&self, out: &mut Vec<u8>) {
        use riffle::sink::json;
        out.extend_from_slice(b"{\"user_id\":");
        json::push_u64(out, self.user_id);
        out.extend_from_slice(b",\"window_start\":");
        json::push_i64(out, self.window_start);
        out.extend_from_slice(b",\"window_end\":");
        json::push_i64(out, self.window_end);
        out.extend_from_slice(b",\"count\":");
        json::push_u64(out, self.count);
        if self.update {
            out.extend_from_slice(b",\"update\":true");
        }
        out.push(b'}');
    }
}

impl From<WindowResult<u64, u64>> for UserCount {
    fn from(r: WindowResult<u64, u64>) -> Self {
        UserCount {
            user_id: r.key,
            window_start: r.window_start,
            window_end: r.window_end,
            count: r.value,
            update: r.update,
        }
    }
}

/// An event time as `HH:MM:SS` (UTC), or `-` before the first watermark.
pub fn clock_time(timestamp: i64) -> String {
    if timestamp <= 0 || timestamp == i64::MAX {
        return if timestamp == i64::MAX {
            "end".into()
        } else {
            "-".into()
        };
    }
    let seconds = timestamp.div_euclid(1000).rem_euclid(86_400);
    format!(
        "{:02}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

/// How the engine runs the demo.
#[derive(Args, Clone, Debug)]
pub struct EngineArgs {
    /// Directory for the output files.
    #[arg(long, value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Parallel subtasks per operator (default: the number of cores).
    #[arg(long, short = 'p')]
    pub parallelism: Option<usize>,
    /// Key groups: the most any keyed operator can be scaled to.
    #[arg(long, default_value_t = 128)]
    pub max_parallelism: usize,
    /// Records per batch between tasks.
    #[arg(long, default_value_t = 1024)]
    pub buffer_size: usize,
    /// Milliseconds a partial batch waits before it is sent anyway.
    #[arg(long, default_value_t = 5)]
    pub buffer_timeout_ms: u64,
    /// Batches a channel holds before its producer blocks (back-pressure).
    #[arg(long, default_value_t = 8)]
    pub channel_capacity: usize,
    /// Stop after this many seconds (drain and print the summary); 0 runs until Ctrl-C.
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Take a checkpoint every this many milliseconds (outputs then become exactly-once).
    #[arg(long, value_name = "MS")]
    pub checkpoint_interval_ms: Option<u64>,
    /// Take unaligned checkpoints (Flink's FLIP-76): barriers overtake the records queued between
    /// tasks, which go into the checkpoint, so checkpoints complete quickly under heavy
    /// back-pressure (larger checkpoints; one with records in flight restores only at the same
    /// parallelism; savepoints stay aligned). Needs --checkpoint-interval-ms or --restore.
    #[arg(long)]
    pub unaligned_checkpoints: bool,
    /// Where checkpoints go: a directory or s3://bucket/prefix (S3 settings from the AWS_*
    /// environment: AWS_ENDPOINT, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ALLOW_HTTP).
    #[arg(long, value_name = "LOCATION")]
    pub checkpoint_dir: Option<String>,
    /// Start from `latest` (the newest complete checkpoint in --checkpoint-dir), a checkpoint id,
    /// or a savepoint directory.
    #[arg(long, value_name = "latest|ID|PATH")]
    pub restore: Option<String>,
    /// With --restore: state in the snapshot that belongs to no operator of this job (one
    /// removed, or whose uid changed) is dropped instead of refusing the start (Flink's
    /// --allowNonRestoredState).
    #[arg(long)]
    pub allow_non_restored_state: bool,
    /// Where keyed state lives: `heap` (fastest, bounded by memory) or `rocksdb` (local disk,
    /// incremental checkpoints; needs a riffle built with `--features rocksdb`).
    #[arg(long, value_enum, default_value_t = StateBackendArg::Heap)]
    pub state_backend: StateBackendArg,
    /// Local directory of the RocksDB stores (default: $TMPDIR/riffle-state).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// RocksDB block cache shared by all stores, in MB.
    #[arg(long, value_name = "MB", default_value_t = 128)]
    pub state_memory_mb: usize,
    /// RocksDB state cache of each store, in MB (0 turns it off).
    #[arg(long, value_name = "MB", default_value_t = 64)]
    pub state_cache_mb: usize,
    /// Serve the job's web UI, REST API and Prometheus metrics here. With the default, a taken
    /// port moves on to the next free one.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8081")]
    pub web_address: String,
    /// Do not serve the web UI, REST API and metrics.
    #[arg(long)]
    pub no_web: bool,
    /// Output independent of timing, for small inputs and tests: parallelism 1, one record per
    /// batch, and a watermark after every record of every source (overrides -p and
    /// --buffer-size; slow).
    #[arg(long)]
    pub deterministic: bool,
    /// Token that savepoint / stop / cancel requests must carry; required with a --web-address
    /// that is not loopback. Other users can read a command line: prefer --web-token-file or
    /// RIFFLE_WEB_TOKEN.
    #[arg(
        long,
        env = "RIFFLE_WEB_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub web_token: Option<String>,
    /// Read the token of --web-token from this file (its first line); it takes precedence over
    /// --web-token and RIFFLE_WEB_TOKEN.
    #[arg(long, value_name = "FILE")]
    pub web_token_file: Option<PathBuf>,
    /// Where savepoints taken from the UI or `riffle savepoint` go when the request names no
    /// directory: a directory or s3://bucket/prefix (default: riffle-out/savepoints). A request
    /// may name a directory under it.
    #[arg(long, value_name = "LOCATION")]
    pub savepoint_dir: Option<String>,
    /// A further directory or s3://bucket/prefix under which a savepoint request may put its
    /// savepoint (repeatable); any other target is refused.
    #[arg(long = "savepoint-root", value_name = "LOCATION")]
    pub savepoint_roots: Vec<String>,
    /// A further name (HOST, with the server's port, or HOST:PORT) under which the UI may send
    /// control requests, e.g. through a reverse proxy or an SSH tunnel on another port
    /// (repeatable). Loopback names and the bound address are always accepted.
    #[arg(long = "web-allowed-host", value_name = "HOST[:PORT]")]
    pub web_allowed_hosts: Vec<String>,
}

impl Default for EngineArgs {
    /// The options without flags.
    fn default() -> Self {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: EngineArgs,
        }
        Wrapper::parse_from(["riffle"]).args
    }
}

/// The choices of `--state-backend`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateBackendArg {
    /// Typed hash tables in memory.
    Heap,
    /// RocksDB on local disk.
    Rocksdb,
}

impl EngineArgs {
    /// The output directory, `riffle-out/<demo>` by default.
    pub fn output_dir(&self, demo: &str) -> PathBuf {
        self.output
            .clone()
            .unwrap_or_else(|| Path::new("riffle-out").join(demo))
    }

    /// Whether the job takes checkpoints (or restores from one).
    pub fn checkpointing(&self) -> bool {
        self.checkpoint_interval_ms.is_some() || self.restore.is_some()
    }

    /// Checkpoint settings from the flags.
    pub fn checkpoint_config(&self, demo: &str) -> riffle::Result<CheckpointConfig> {
        let restore = match self.restore.as_deref() {
            None => None,
            Some("latest") => Some(RestoreFrom::Latest),
            Some(id) if id.chars().all(|c| c.is_ascii_digit()) => {
                Some(RestoreFrom::Checkpoint(id.parse().map_err(|_| {
                    Error::config("--restore", "bad checkpoint id")
                })?))
            }
            Some(path) => Some(RestoreFrom::Savepoint(path.to_string())),
        };
        let interval = match self.checkpoint_interval_ms {
            Some(0) => {
                return Err(Error::config(
                    "--checkpoint-interval-ms",
                    "must be at least 1",
                ));
            }
            Some(ms) => Some(Duration::from_millis(ms)),
            // Restoring keeps checkpointing, at the default interval.
            None if restore.is_some() => Some(Duration::from_secs(10)),
            None if self.unaligned_checkpoints => {
                return Err(Error::config(
                    "--unaligned-checkpoints",
                    "needs checkpoints: add --checkpoint-interval-ms (or --restore)",
                ));
            }
            None => None,
        };
        if self.allow_non_restored_state && restore.is_none() {
            return Err(Error::config(
                "--allow-non-restored-state",
                "applies to a restore: add --restore",
            ));
        }
        Ok(CheckpointConfig {
            interval,
            allow_non_restored_state: self.allow_non_restored_state,
            storage: self.checkpoint_dir.clone().unwrap_or_else(|| {
                self.output_dir(demo)
                    .join("checkpoints")
                    .display()
                    .to_string()
            }),
            restore,
            ..CheckpointConfig::default()
        }
        .unaligned(self.unaligned_checkpoints))
    }

    /// A sink for JSON lines in `dir`: exactly-once when the job takes checkpoints. A fresh
    /// (not restored) exactly-once run starts from an empty directory.
    pub fn json_sink<T: riffle::Data>(&self, dir: &Path) -> riffle::Result<Box<dyn JsonSink<T>>> {
        self.json_sink_with(dir, None)
    }

    /// [`json_sink`](Self::json_sink), its lines written by `encoder` (when given) instead of
    /// `serde_json` (see `riffle::sink::json`).
    pub fn json_sink_with<T: riffle::Data>(
        &self,
        dir: &Path,
        encoder: Option<riffle::sink::json::JsonEncoder<T>>,
    ) -> riffle::Result<Box<dyn JsonSink<T>>> {
        if self.checkpointing() {
            if self.restore.is_none() && dir.exists() {
                std::fs::remove_dir_all(dir)
                    .map_err(|e| Error::io(format!("cannot clear `{}`", dir.display()), e))?;
            }
            let sink = ExactlyOnceFileSink::new(dir)
                .setting_name("--output")
                .roll_interval(Duration::from_secs(60));
            Ok(Box::new(match encoder {
                Some(encoder) => sink.with_encoder(encoder),
                None => sink,
            }))
        } else {
            let sink = FileSink::new(dir).setting_name("--output");
            Ok(Box::new(match encoder {
                Some(encoder) => sink.with_encoder(encoder),
                None => sink,
            }))
        }
    }

    /// The engine configuration; dead letters go under the output directory (a fresh
    /// exactly-once run starts them from an empty directory, as its other outputs).
    pub fn env_config(&self, demo: &str) -> riffle::Result<EnvConfig> {
        if self.deterministic {
            let deterministic = EnvConfig::deterministic();
            return Ok(EnvConfig {
                parallelism: deterministic.parallelism,
                buffer_size: deterministic.buffer_size,
                watermark_after_every_batch: deterministic.watermark_after_every_batch,
                ..EngineArgs {
                    deterministic: false,
                    ..self.clone()
                }
                .env_config(demo)?
            });
        }
        let defaults = EnvConfig::default();
        let dead_letters = self.output_dir(demo).join("dead-letter");
        if self.checkpointing() && self.restore.is_none() && dead_letters.exists() {
            std::fs::remove_dir_all(&dead_letters)
                .map_err(|e| Error::io(format!("cannot clear `{}`", dead_letters.display()), e))?;
        }
        Ok(EnvConfig {
            job_name: format!("demo-{demo}"),
            parallelism: self.parallelism.unwrap_or(defaults.parallelism),
            max_parallelism: self.max_parallelism,
            buffer_size: self.buffer_size,
            buffer_timeout: Duration::from_millis(self.buffer_timeout_ms),
            channel_capacity: self.channel_capacity,
            dead_letter_dir: self.output_dir(demo).join("dead-letter"),
            checkpoints: self.checkpoint_config(demo)?,
            state_backend: self.state_backend()?,
            local_state_dir: self
                .state_dir
                .clone()
                .unwrap_or(defaults.local_state_dir.clone()),
            free_state_at_end: !crate::process_ends_with_its_job(),
            ..defaults
        })
    }

    /// The state backend from `--state-backend` and its settings.
    fn state_backend(&self) -> riffle::Result<std::sync::Arc<dyn riffle::state::StateBackend>> {
        match self.state_backend {
            StateBackendArg::Heap => Ok(std::sync::Arc::new(riffle::state::HeapBackend)),
            #[cfg(feature = "rocksdb")]
            StateBackendArg::Rocksdb => Ok(std::sync::Arc::new(
                riffle_rocksdb::RocksDbBackend::new()
                    .memory(self.state_memory_mb << 20)
                    .state_cache(self.state_cache_mb << 20),
            )),
            #[cfg(not(feature = "rocksdb"))]
            StateBackendArg::Rocksdb => Err(Error::config(
                "--state-backend",
                "this riffle was built without RocksDB: build it with `cargo build --release -p riffle-cli --features rocksdb` (needs librocksdb-dev, see scripts/install-deps.sh)",
            )),
        }
    }

    /// How long to run and how often to report.
    pub fn run_options(&self) -> riffle::Result<RunOptions> {
        let duration = match self.duration {
            Some(s) if !(s >= 0.0 && s.is_finite()) => {
                return Err(Error::config(
                    "--duration",
                    format!("must be a number of seconds, got {s}"),
                ));
            }
            // 0: no limit, run until Ctrl-C.
            Some(0.0) => Some(Duration::MAX),
            Some(s) => Some(Duration::from_secs_f64(s)),
            None => None,
        };
        Ok(RunOptions {
            duration,
            every: Duration::from_secs(1),
            web: self.web_config()?,
        })
    }

    /// The web server's settings, `None` with `--no-web`.
    pub fn web_config(&self) -> riffle::Result<Option<riffle_web::WebConfig>> {
        if self.no_web {
            return Ok(None);
        }
        let address = self.web_address.parse().map_err(|e| {
            Error::config(
                "--web-address",
                format!("`{}` is not HOST:PORT: {e}", self.web_address),
            )
        })?;
        let savepoint_dir = match &self.savepoint_dir {
            Some(dir) if dir.starts_with("s3://") => dir.clone(),
            Some(dir) => absolute(Path::new(dir))?,
            None => absolute(&Path::new("riffle-out").join("savepoints"))?,
        };
        let savepoint_roots = self
            .savepoint_roots
            .iter()
            .map(|root| {
                if root.starts_with("s3://") {
                    Ok(root.clone())
                } else {
                    absolute(Path::new(root))
                }
            })
            .collect::<riffle::Result<Vec<_>>>()?;
        let token = match &self.web_token_file {
            Some(file) => Some(
                crate::control::read_token_file(file)
                    .map_err(|e| Error::config("--web-token-file", e))?,
            ),
            None => self.web_token.clone(),
        };
        let config = riffle_web::WebConfig {
            address,
            token,
            savepoint_dir: Some(savepoint_dir),
            savepoint_roots,
            allowed_hosts: self.web_allowed_hosts.clone(),
            ..riffle_web::WebConfig::default()
        };
        config.validate().map_err(web_flag)?;
        Ok(Some(config))
    }
}

/// `path` made absolute against the working directory (savepoint requests need absolute paths).
fn absolute(path: &Path) -> riffle::Result<String> {
    std::path::absolute(path)
        .map(|p| p.display().to_string())
        .map_err(|e| Error::config("--savepoint-dir", e.to_string()))
}

/// A web server setting's error, named by its flag.
pub fn web_flag(error: Error) -> Error {
    match error {
        Error::Config { setting, message } => {
            let flag = match setting.as_str() {
                "web.address" => "--web-address",
                "web.token" => "--web-token",
                "web.savepoint_roots" => "--savepoint-root",
                "web.allowed_hosts" => "--web-allowed-host",
                other => other,
            };
            Error::config(flag, message)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_count_is_encoded_as_serde_json_encodes_it() {
        for (user_id, window_start, count, update) in [
            (0, 0, 0, false),
            (42, 1_768_491_600_000, 3, true),
            (u64::MAX, i64::MIN, u64::MAX, false),
            (7, -60_000, 1, true),
        ] {
            let line = UserCount {
                user_id,
                window_start,
                window_end: window_start.wrapping_add(60_000),
                count,
                update,
            };
            let mut ours = Vec::new();
            line.write_json(&mut ours);
            assert_eq!(
                String::from_utf8(ours).unwrap(),
                serde_json::to_string(&line).unwrap()
            );
        }
    }

    fn args(flags: &[&str]) -> EngineArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: EngineArgs,
        }
        Wrapper::parse_from(std::iter::once("riffle").chain(flags.iter().copied())).args
    }

    #[test]
    fn unaligned_checkpoints_need_checkpoints_and_are_named_by_their_flag() {
        let config = args(&["--checkpoint-interval-ms", "500", "--unaligned-checkpoints"])
            .checkpoint_config("demo")
            .unwrap();
        assert!(config.unaligned);
        assert!(
            !args(&["--checkpoint-interval-ms", "500"])
                .checkpoint_config("demo")
                .unwrap()
                .unaligned
        );
        let err = args(&["--unaligned-checkpoints"])
            .checkpoint_config("demo")
            .unwrap_err();
        assert!(
            matches!(&err, Error::Config { setting, .. } if setting == "--unaligned-checkpoints"),
            "{err}"
        );
    }
}
