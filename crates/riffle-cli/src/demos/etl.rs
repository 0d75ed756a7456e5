//! Seed scenario 1, simple ETL: a stateless pipeline without a shuffle. Clicks are parsed, bots
//! dropped by User-Agent, the rest enriched with the country of their IP address from an
//! in-memory prefix table, and written as JSON lines. Every operator is chained into one thread
//! per subtask: no channel, no copy between them.

use std::path::PathBuf;

use clap::Args;
use riffle::sink::Sink;
use riffle::source::BadRecordPolicy;
use riffle::{DataStream, StreamEnv};
use riffle_clicks::Click;
use riffle_web::views::Latency;

use crate::clicks::{EnrichedClick, IpCountryTable, enrich, is_bot};
use crate::demos::{EngineArgs, InputArgs};
use crate::progress::{human, run_with_progress};

/// Options of `riffle demo etl`.
#[derive(Args, Clone, Debug)]
pub struct EtlArgs {
    /// Where the clicks come from.
    #[command(flatten)]
    pub input: InputArgs,
    /// How the engine runs.
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Clicks generated when neither `--count` nor `--input` is given.
pub const DEFAULT_COUNT: u64 = 10_000_000;

/// Operator names, as they appear in metrics and progress.
pub const PARSE: &str = "parse";
/// The bot filter.
pub const DROP_BOTS: &str = "drop bots";
/// The enrichment map.
pub const ENRICH: &str = "enrich";
/// The sink.
pub const WRITE: &str = "write";

/// The scenario's pipeline from raw payloads to `sink`.
pub fn pipeline(
    payloads: &DataStream<String>,
    policy: BadRecordPolicy,
    sink: impl Sink<EnrichedClick>,
) {
    let table = IpCountryTable::embedded();
    payloads
        .parse_with_decoder(policy, Click::from_json_str)
        .name(PARSE)
        .filter(|click| !is_bot(&click.user_agent))
        .name(DROP_BOTS)
        .map(move |click| enrich(click, table))
        .name(ENRICH)
        .sink(sink)
        .name(WRITE);
}

/// What the ETL run did.
#[derive(Debug, Clone, PartialEq)]
pub struct EtlSummary {
    /// Clicks read from the source.
    pub read: u64,
    /// Clicks dropped as bots.
    pub bots: u64,
    /// Clicks written.
    pub written: u64,
    /// Lines that could not be decoded.
    pub bad: u64,
    /// Where the output went.
    pub output: PathBuf,
    /// How long the latency markers took from the sources to the sink (what the REST API
    /// reports as the job's end-to-end latency), over the last minute of the run.
    pub sink_latency: Option<Latency>,
}

/// Runs the scenario with progress on the terminal and prints its summary.
pub fn run(args: &EtlArgs) -> riffle::Result<EtlSummary> {
    let env = StreamEnv::with_config(args.engine.env_config("etl")?);
    let output = args.engine.output_dir("etl");
    let payloads = args.input.payloads(&env, Some(DEFAULT_COUNT))?;
    pipeline(
        &payloads,
        args.input.bad_records,
        args.engine
            .json_sink_with(&output, Some(EnrichedClick::write_json))?,
    );
    let parallelism = env.config().parallelism;
    let (result, _) = run_with_progress(&env, &args.engine.run_options()?, |report| {
        let read = report
            .snapshot
            .operator_total(PARSE)
            .map_or(0, |o| o.records_in);
        let rate = report
            .rates
            .iter()
            .find(|r| r.name == PARSE)
            .map_or(0.0, |r| r.records_in_per_sec);
        format!(
            "etl {:>5.1} s | {} clicks/s | read {} | written {}",
            report.elapsed.as_secs_f64(),
            human(rate),
            human(read as f64),
            human(
                report
                    .snapshot
                    .operator_total(WRITE)
                    .map_or(0, |o| o.records_in) as f64
            )
        )
    })?;
    let summary = EtlSummary {
        read: result.records_in(PARSE),
        bots: result.records_in(DROP_BOTS) - result.records_out(DROP_BOTS),
        written: result.records_in(WRITE),
        bad: result.bad_records(),
        output,
        sink_latency: result
            .metrics
            .operator_total(WRITE)
            .and_then(|sink| Latency::of(&sink.latencies_us)),
    };
    let seconds = result.duration.as_secs_f64();
    println!(
        "riffle demo etl: {} clicks in {seconds:.1} s ({} clicks/s, parallelism {parallelism})",
        summary.read,
        human(summary.read as f64 / seconds)
    );
    let share = |n: u64| {
        if summary.read == 0 {
            0.0
        } else {
            100.0 * n as f64 / summary.read as f64
        }
    };
    println!("  read          {:>12}", summary.read);
    println!(
        "  bots dropped  {:>12}  ({:.1}%)",
        summary.bots,
        share(summary.bots)
    );
    println!(
        "  written       {:>12}  -> {}/part-*.jsonl",
        summary.written,
        summary.output.display()
    );
    for line in args
        .input
        .summary_lines((13, 12), (summary.bad, 0), &summary.output)
    {
        println!("{line}");
    }
    println!("  {}", latency_line(summary.sink_latency.as_ref()));
    Ok(summary)
}

/// The summary's line on the latency markers at the sink: the percentiles the REST API reports
/// (`/api/v1/job`, nearest rank over the sink's subtasks, last minute).
///
/// Markers travel in band behind the records but are not held by the buffer timeout, and this
/// pipeline is one chain: they show the time through the operators, not a record's wait in a
/// partial batch (see BENCHMARKS.md, "End-to-end latency").
pub fn latency_line(latency: Option<&Latency>) -> String {
    match latency {
        Some(l) => format!(
            "sink latency  p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms  ({} latency markers)",
            l.p50_ms, l.p99_ms, l.max_ms, l.samples
        ),
        None => "sink latency  no latency markers reached the sink".to_string(),
    }
}

impl EtlArgs {
    /// The options `riffle demo etl` has without flags.
    pub fn default_args() -> EtlArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: EtlArgs,
        }
        Wrapper::parse_from(["riffle"]).args
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latency_line_gives_the_sink_markers_percentiles() {
        let latency = Latency::of(&[40, 1_250, 90, 3_000]).unwrap();
        assert_eq!(
            latency_line(Some(&latency)),
            "sink latency  p50 0.090 ms, p99 3.000 ms, max 3.000 ms  (4 latency markers)"
        );
        assert_eq!(
            latency_line(None),
            "sink latency  no latency markers reached the sink"
        );
    }
}
