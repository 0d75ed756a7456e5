//! Seed scenario 4, back-pressure: a slow sink (the Kafka cluster whose acks take 800 ms) stalls
//! the pipeline. Its input channel fills, the keyed stage waits for credits, the chain before it
//! waits, and the source stops pulling: the source's rate follows the sink's and memory stays
//! flat. The live table shows each operator's busy / back-pressured / idle time and names the
//! bottleneck.

use clap::Args;
use riffle::metrics::{OperatorRates, find_bottleneck, process_rss_bytes};
use riffle::operators::KeyedContext;
use riffle::sink::{FileSink, Sink, ThrottledSink};
use riffle::source::BadRecordPolicy;
use riffle::{DataStream, Result, StreamEnv};
use riffle_clicks::Click;

use crate::clicks::{EnrichedClick, IpCountryTable, enrich, is_bot};
use crate::demos::{EngineArgs, InputArgs};
use crate::progress::{Report, human, megabytes, run_with_progress};

/// Options of `riffle demo backpressure`.
#[derive(Args, Clone, Debug)]
pub struct BackpressureArgs {
    /// Where the clicks come from.
    #[command(flatten)]
    pub input: InputArgs,
    /// How the engine runs.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Clicks per second each sink subtask accepts: the slow sink.
    #[arg(long, default_value_t = 5_000.0, value_name = "CLICKS_PER_SEC")]
    pub sink_rate: f64,
}

/// Seconds the demo runs when `--duration` is not given.
pub const DEFAULT_SECONDS: f64 = 30.0;
/// The keyed stage's name.
pub const KEYED: &str = "per-user";
/// The slow sink's name.
pub const SLOW_SINK: &str = "slow sink";

/// The scenario's pipeline: parse, drop bots, enrich, shuffle by user, slow sink.
pub fn pipeline(
    payloads: &DataStream<String>,
    policy: BadRecordPolicy,
    sink: impl Sink<EnrichedClick>,
) {
    let table = IpCountryTable::embedded();
    payloads
        .parse_json::<Click>(policy)
        .name("parse")
        .filter(|click| !is_bot(&click.user_agent))
        .name("drop bots")
        .map(move |click| enrich(click, table))
        .name("enrich")
        .key_by(|click| click.user_id)
        .process(
            |_: &u64,
             click: EnrichedClick,
             ctx: &mut KeyedContext<'_, '_, u64, EnrichedClick>|
             -> Result<()> { ctx.emit(click) },
        )
        .name(KEYED)
        .sink(sink)
        .name(SLOW_SINK);
}

/// The live table: one line per operator.
pub fn table(rates: &[OperatorRates]) -> String {
    let bottleneck = find_bottleneck(rates).map(|b| b.name.clone());
    let width = rates
        .iter()
        .map(|op| op.name.len())
        .max()
        .unwrap_or(0)
        .max(8);
    let mut lines = vec![format!(
        "  {:<width$} {:>9} {:>9} {:>6} {:>15} {:>6}  {}",
        "operator", "in/s", "out/s", "busy", "back-pressured", "idle", "level"
    )];
    for op in rates {
        let rate = |r: f64| if r > 0.0 { human(r) } else { "-".into() };
        let mark = if Some(&op.name) == bottleneck.as_ref() {
            "  <- bottleneck"
        } else {
            ""
        };
        lines.push(format!(
            "  {:<width$} {:>9} {:>9} {:>5.0}% {:>14.0}% {:>5.0}%  {:<4}{mark}",
            op.name,
            rate(op.records_in_per_sec),
            rate(op.records_out_per_sec),
            op.time.busy_ms_per_sec / 10.0,
            op.time.backpressured_ms_per_sec / 10.0,
            op.time.idle_ms_per_sec / 10.0,
            op.time.backpressure_level(),
        ));
    }
    lines.join("\n")
}

/// What the run showed.
#[derive(Debug, Clone)]
pub struct BackpressureSummary {
    /// Clicks the source emitted.
    pub emitted: u64,
    /// Clicks the sink wrote.
    pub written: u64,
    /// The bottleneck named by the last steady-state report.
    pub bottleneck: Option<String>,
    /// Rates of the last steady-state report.
    pub rates: Vec<OperatorRates>,
    /// Resident memory after the first seconds and at most, in bytes.
    pub rss_after_warmup: u64,
    /// Highest resident memory seen.
    pub rss_max: u64,
}

/// Runs the scenario with the live table and prints its summary.
pub fn run(args: &BackpressureArgs) -> riffle::Result<BackpressureSummary> {
    let env = StreamEnv::with_config(args.engine.env_config("backpressure")?);
    let output = args.engine.output_dir("backpressure");
    let payloads = args.input.payloads(&env, None)?;
    let sink = ThrottledSink::new(
        FileSink::new(&output).setting_name("--output"),
        args.sink_rate,
    );
    pipeline(&payloads, args.input.bad_records, sink);
    let mut options = args.engine.run_options()?;
    options.duration = options
        .duration
        .or(Some(std::time::Duration::from_secs_f64(DEFAULT_SECONDS)));
    let parallelism = env.config().parallelism;
    let mut steady: Vec<OperatorRates> = Vec::new();
    let mut rss_after_warmup = 0;
    let (result, rss_max) = run_with_progress(&env, &options, |report: &Report<'_>| {
        if !report.stopping {
            steady = report.rates.to_vec();
            if report.elapsed.as_secs() <= 3 {
                rss_after_warmup = report.rss_bytes;
            }
        }
        let source_rate = report.rates.first().map_or(0.0, |r| r.records_out_per_sec);
        format!(
            "backpressure {:.0} s | source {} clicks/s | RSS {}{}\n{}",
            report.elapsed.as_secs_f64(),
            human(source_rate),
            megabytes(report.rss_bytes),
            if report.stopping { " | draining" } else { "" },
            table(report.rates)
        )
    })?;
    let summary = BackpressureSummary {
        emitted: result
            .metrics
            .operators
            .iter()
            .filter(|o| o.name.starts_with("Source:"))
            .map(|o| o.records_out)
            .sum(),
        written: result.records_in(SLOW_SINK),
        bottleneck: find_bottleneck(&steady).map(|b| b.name.clone()),
        rates: steady,
        rss_after_warmup: if rss_after_warmup > 0 {
            rss_after_warmup
        } else {
            process_rss_bytes().unwrap_or(0)
        },
        rss_max,
    };
    let seconds = result.duration.as_secs_f64();
    println!(
        "riffle demo backpressure: {seconds:.1} s, sink limited to {} clicks/s per subtask (parallelism {parallelism})",
        args.sink_rate
    );
    println!("{}", table(&summary.rates));
    println!(
        "  the source emitted {} clicks ({}/s): it follows the sink, not its own speed",
        summary.emitted,
        human(summary.emitted as f64 / seconds)
    );
    println!(
        "  the sink wrote {} clicks -> {}/part-*.jsonl",
        summary.written,
        output.display()
    );
    for line in args
        .input
        .summary_lines((11, 10), (result.bad_records(), 0), &output)
    {
        println!("{line}");
    }
    match &summary.bottleneck {
        Some(name) => println!(
            "  bottleneck: `{name}`; everything upstream waits for it. Raise its parallelism or batch size \
             (a longer checkpoint interval would only hide the symptom)."
        ),
        None => println!("  no bottleneck: nothing was back-pressured"),
    }
    println!(
        "  memory stayed flat: RSS {} after warm-up, {} at most",
        megabytes(summary.rss_after_warmup),
        megabytes(summary.rss_max)
    );
    Ok(summary)
}
