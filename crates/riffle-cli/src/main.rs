//! `riffle`: runs the seed's scenarios on embedded defaults or on your data.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use riffle_cli::demos::backpressure::{self, BackpressureArgs};
use riffle_cli::demos::etl::{self, EtlArgs};
use riffle_cli::progress::install_ctrlc_handler;

/// Records are allocated on one task's thread and freed on another's: mimalloc handles that
/// pattern much better than the system allocator.
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
    /// Run one of the seed's scenarios on generated clicks (or on --input files).
    Demo {
        #[command(subcommand)]
        scenario: Option<Scenario>,
    },
}

#[derive(Subcommand, Debug)]
enum Scenario {
    /// Scenario 1, simple ETL: parse, drop bots, enrich with the country, write JSON lines.
    Etl(EtlArgs),
    /// Scenario 4, back-pressure: a slow sink stalls the pipeline; watch where and that memory stays flat.
    Backpressure(BackpressureArgs),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RIFFLE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let cli = Cli::parse();
    install_ctrlc_handler();
    let outcome = match cli.command {
        Command::Demo { scenario } => match scenario {
            Some(Scenario::Etl(args)) => etl::run(&args).map(drop),
            Some(Scenario::Backpressure(args)) => backpressure::run(&args).map(drop),
            None => etl::run(&EtlArgs::default_args()).map(drop),
        },
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("riffle: {error}");
            ExitCode::FAILURE
        }
    }
}
