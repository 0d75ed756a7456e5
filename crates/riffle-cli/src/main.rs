//! `riffle`: runs the seed's scenarios on embedded defaults or on your data.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use riffle_cli::control;
use riffle_cli::demos::backpressure::{self, BackpressureArgs};
use riffle_cli::demos::checkpoint_recovery::{self, CheckpointRecoveryArgs};
use riffle_cli::demos::etl::{self, EtlArgs};
use riffle_cli::demos::late_events::{self, LateEventsArgs};
use riffle_cli::demos::pipeline::{self, PipelineArgs};
use riffle_cli::demos::windowed_count::{self, WindowedCountArgs};
use riffle_cli::progress::install_ctrlc_handler;

/// Records are allocated on one task's thread and freed on another's: mimalloc handles that
/// pattern much better than the system allocator. It is built without asking for transparent
/// huge pages (the workspace's `no_thp`): see the workspace's Cargo.toml.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Riffle, a stateful stream processor: run the seed's pipelines.
#[derive(Parser, Debug)]
#[command(name = "riffle", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// List the jobs running on this machine (or the one at --address): id, name, status, rates
    /// and the address of their web UI.
    Jobs {
        /// Ask the job at this address (HOST:PORT) instead.
        #[arg(long, value_name = "HOST:PORT")]
        address: Option<String>,
    },
    /// Take a savepoint of a running job and print where it went; `riffle savepoint inspect DIR`
    /// lists what a savepoint holds.
    #[command(args_conflicts_with_subcommands = true)]
    Savepoint {
        #[command(subcommand)]
        action: Option<riffle_cli::savepoint::SavepointCommand>,
        #[command(flatten)]
        target: control::Target,
        /// Directory (or s3://bucket/prefix) the savepoint goes under; default: the job's
        /// --savepoint-dir.
        #[arg(long = "target", value_name = "DIR")]
        directory: Option<String>,
    },
    /// Stop a running job: sources end their input, the pipeline drains, sinks commit.
    Stop {
        #[command(flatten)]
        target: control::Target,
        /// Take a savepoint first (into DIR, or the job's --savepoint-dir) and stop right after it.
        #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = "")]
        savepoint: Option<String>,
    },
    /// Cancel a running job: every task stops now.
    Cancel {
        #[command(flatten)]
        target: control::Target,
    },
    /// Run the seed's clicks pipeline (no scenario), or one of its scenarios, on generated
    /// clicks or on --input files.
    #[command(args_conflicts_with_subcommands = true)]
    Demo {
        #[command(subcommand)]
        scenario: Option<Box<Scenario>>,
        /// Options of the whole pipeline (when no scenario is named).
        #[command(flatten)]
        pipeline: Box<PipelineArgs>,
    },
    /// The Nexmark benchmark: generate its events, run its queries.
    #[command(subcommand)]
    Nexmark(riffle_cli::nexmark::NexmarkCommand),
    /// Write generated input data as JSON lines.
    #[command(subcommand)]
    Generate(riffle_cli::generate::GenerateCommand),
    /// Run a SQL script in Flink's dialect: CREATE TABLE/VIEW/FUNCTION, SET, INSERT INTO and
    /// queries (their rows printed), as one job (docs/sql.md).
    Sql(Box<riffle_cli::sql::SqlArgs>),
    /// Serve materialized views over the Postgres wire protocol: `CREATE MATERIALIZED VIEW`,
    /// then `SELECT` from it and `SUBSCRIBE` to it with psql or any Postgres client
    /// (docs/serve.md).
    Serve(Box<riffle_cli::serve::ServeArgs>),
    /// Operator actions on a process group (`demo --kafka B --group NAME`): list the state its
    /// members cannot find, accept its loss.
    #[command(subcommand)]
    Group(riffle_cli::group::GroupCommand),
}

#[derive(Subcommand, Debug)]
enum Scenario {
    /// Scenario 1, simple ETL: parse, drop bots, enrich with the country, write JSON lines.
    Etl(EtlArgs),
    /// Scenario 2, stateful windowed count: clicks per user per minute over 1M users.
    WindowedCount(WindowedCountArgs),
    /// Scenario 3, late events: the subway click of 15:42 arriving at 15:48, under three settings.
    LateEvents(LateEventsArgs),
    /// Scenario 4, back-pressure: a slow sink stalls the pipeline; watch where and that memory stays flat.
    Backpressure(BackpressureArgs),
    /// Joins of two streams: ad clicks joined to their impression within 10 minutes (interval
    /// join), click-through rate per campaign per minute, late records of both sides aside.
    Join(riffle_cli::demos::join::JoinArgs),
    /// Complex event processing on courier events: an alert when an order picked up is not
    /// delivered within its promised time (a pattern's timeout) and when a courier's pings stop.
    Cep(riffle_cli::demos::cep::CepArgs),
    /// Scenario 5, checkpoint and recovery: a task dies, the job restores its latest checkpoint, and the
    /// committed output is checked against a run without failure.
    CheckpointRecovery(CheckpointRecoveryArgs),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colors only on a terminal: a log redirected to a file stays plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RIFFLE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Jobs { address } => control::jobs(address.as_deref()),
        Command::Savepoint {
            action: Some(action),
            ..
        } => riffle_cli::savepoint::run(&action).map_err(|e| e.to_string()),
        Command::Savepoint {
            action: None,
            target,
            directory,
        } => control::savepoint(&target, directory.as_deref()),
        Command::Stop { target, savepoint } => control::stop(&target, savepoint.as_deref()),
        Command::Cancel { target } => control::cancel(&target),
        Command::Nexmark(command) => {
            riffle_cli::ends_with_its_job();
            riffle_cli::nexmark::run(&command).map_err(|e| e.to_string())
        }
        Command::Generate(command) => {
            riffle_cli::generate::run(&command).map_err(|e| e.to_string())
        }
        Command::Group(command) => riffle_cli::group::run(&command).map_err(|e| e.to_string()),
        Command::Serve(args) => riffle_cli::serve::run(&args).map_err(|e| e.to_string()),
        Command::Sql(args) => {
            install_ctrlc_handler();
            if args.file.is_some() {
                riffle_cli::ends_with_its_job();
            }
            riffle_cli::sql::run(&args).map_err(|e| e.to_string())
        }
        Command::Demo {
            scenario,
            pipeline: args,
        } => {
            install_ctrlc_handler();
            if !matches!(scenario.as_deref(), Some(Scenario::CheckpointRecovery(_))) {
                riffle_cli::ends_with_its_job();
            }
            match scenario.map(|s| *s) {
                Some(Scenario::Etl(args)) => etl::run(&args).map(drop),
                Some(Scenario::WindowedCount(args)) => windowed_count::run(&args).map(drop),
                Some(Scenario::LateEvents(args)) => late_events::run(&args).map(drop),
                Some(Scenario::Backpressure(args)) => backpressure::run(&args).map(drop),
                Some(Scenario::Join(args)) => riffle_cli::demos::join::run(&args).map(drop),
                Some(Scenario::Cep(args)) => riffle_cli::demos::cep::run(&args).map(drop),
                Some(Scenario::CheckpointRecovery(args)) => {
                    checkpoint_recovery::run(&args).map(drop)
                }
                None => pipeline::run(&args).map(drop),
            }
            .map_err(|e| e.to_string())
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("riffle: {error}");
            ExitCode::FAILURE
        }
    }
}
