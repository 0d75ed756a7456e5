//! The seed's scenarios as runnable demos: each builds its pipeline on the click stream (the
//! built-in generator, or the user's files with `--input`) and writes to `--output`.

pub mod backpressure;
pub mod etl;

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use riffle::source::BadRecordPolicy;
use riffle::source::datagen::{ClickGenerator, ClicksConfig, DatagenSource, JsonPayloads};
use riffle::source::file::FileSource;
use riffle::{DataStream, EnvConfig, Error, StreamEnv};

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
    /// Seed of the generator: the same seed gives the same clicks.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// What to do with input lines that are not valid clicks: fail, skip or dead-letter.
    #[arg(long, default_value = "dead-letter", value_name = "POLICY")]
    pub bad_records: BadRecordPolicy,
}

impl InputArgs {
    /// The generator's configuration, checked; errors name the flag.
    pub fn clicks_config(&self) -> riffle::Result<ClicksConfig> {
        let config = ClicksConfig {
            seed: self.seed,
            users: self.users,
            bot_share: self.bot_share,
            hot_key_share: self.hot_key_share,
            ..ClicksConfig::default()
        };
        config.validate().map_err(|e| match e {
            Error::Config { setting, message } => Error::Config { setting: format!("--{}", setting.replace('_', "-")), message },
            other => other,
        })?;
        Ok(config)
    }

    /// The raw JSON payloads of the clicks: from `--input`, or generated (`default_count` when
    /// `--count` is not given; `None` for unbounded).
    pub fn payloads(&self, env: &StreamEnv, default_count: Option<u64>) -> riffle::Result<DataStream<String>> {
        if let Some(path) = &self.input {
            let source = FileSource::lines(path).setting_name("--input").bad_records(self.bad_records);
            return Ok(env.from_source(source));
        }
        let count = self.count.map_or(default_count, |n| (n > 0).then_some(n));
        let generator = JsonPayloads(ClickGenerator::new(self.clicks_config()?));
        Ok(env.from_source(DatagenSource::new(generator).limit(count).pace(self.rate)))
    }
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
}

impl EngineArgs {
    /// The output directory, `riffle-out/<demo>` by default.
    pub fn output_dir(&self, demo: &str) -> PathBuf {
        self.output.clone().unwrap_or_else(|| Path::new("riffle-out").join(demo))
    }

    /// The engine configuration; dead letters go under the output directory.
    pub fn env_config(&self, demo: &str) -> EnvConfig {
        let defaults = EnvConfig::default();
        EnvConfig {
            job_name: format!("demo-{demo}"),
            parallelism: self.parallelism.unwrap_or(defaults.parallelism),
            max_parallelism: self.max_parallelism,
            buffer_size: self.buffer_size,
            buffer_timeout: Duration::from_millis(self.buffer_timeout_ms),
            channel_capacity: self.channel_capacity,
            dead_letter_dir: self.output_dir(demo).join("dead-letter"),
        }
    }

    /// How long to run and how often to report.
    pub fn run_options(&self) -> riffle::Result<RunOptions> {
        let duration = match self.duration {
            Some(s) if !(s >= 0.0 && s.is_finite()) => {
                return Err(Error::config("--duration", format!("must be a number of seconds, got {s}")));
            }
            // 0: no limit, run until Ctrl-C.
            Some(s) if s == 0.0 => Some(Duration::MAX),
            Some(s) => Some(Duration::from_secs_f64(s)),
            None => None,
        };
        Ok(RunOptions { duration, every: Duration::from_secs(1) })
    }
}
