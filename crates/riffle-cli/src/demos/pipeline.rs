//! The seed's whole clicks pipeline, the main job (`riffle demo`): clicks -> drop bots ->
//! enrich with the country -> key by user -> 1-minute event-time windows counting clicks, with
//! 30 s of allowed lateness and late clicks to their own output -> JSON lines. The clicks are
//! decoded by the source (the generator, or `--input` JSON lines), which also assigns event
//! time and watermarks per split.

use clap::Args;
use riffle::{DataStream, KeyedStream, StreamEnv};
use riffle_clicks::Click;

use crate::clicks::{EnrichedClick, IpCountryTable, enrich, is_bot};
use crate::demos::windowed_count::{WindowedSummary, run_windowed};
use crate::demos::{EngineArgs, EventTimeArgs, InputArgs, UserCount};
use riffle::OutputTag;
use riffle::aggregate::Count;
use riffle::window::Tumbling;

/// Options of `riffle demo`.
#[derive(Args, Clone, Debug)]
pub struct PipelineArgs {
    /// Where the clicks come from.
    #[command(flatten)]
    pub input: InputArgs,
    /// Watermarks, lateness and window length.
    #[command(flatten)]
    pub event_time: EventTimeArgs,
    /// How the engine runs.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Between Kafka topics instead of files (`--kafka <bootstrap>`).
    #[command(flatten)]
    pub kafka: crate::demos::kafka_args::KafkaArgs,
}

/// Clicks generated when neither `--count` nor `--input` is given.
pub const DEFAULT_COUNT: u64 = 10_000_000;

/// The pipeline from clicks to the per-user counts and the late clicks.
pub fn pipeline(
    clicks: &DataStream<Click>,
    event_time: &EventTimeArgs,
) -> riffle::Result<(DataStream<UserCount>, DataStream<EnrichedClick>)> {
    pipeline_through(clicks, event_time, |by_user| by_user)
}

/// The pipeline, with the clicks keyed by user passed through `shuffle` before the windows (a
/// Kafka shuffle between the processes of a group).
pub fn pipeline_through(
    clicks: &DataStream<Click>,
    event_time: &EventTimeArgs,
    shuffle: impl FnOnce(KeyedStream<u64, EnrichedClick>) -> KeyedStream<u64, EnrichedClick>,
) -> riffle::Result<(DataStream<UserCount>, DataStream<EnrichedClick>)> {
    let table = IpCountryTable::embedded();
    let late = OutputTag::<EnrichedClick>::new("late-clicks");
    let by_user = clicks
        .filter(|click| !is_bot(&click.user_agent))
        .name("drop bots")
        .map(move |click| enrich(click, table))
        .name("enrich")
        .key_by(|click| click.user_id);
    let windows = shuffle(by_user)
        .window(Tumbling::of(event_time.window()?))
        .allowed_lateness(event_time.lateness()?)
        .side_output_late(&late)
        .aggregate(Count)
        .name(crate::demos::windowed_count::WINDOW)
        .uid("count-per-user");
    let late_clicks = windows.get_side_output(&late);
    Ok((windows.map(UserCount::from).name("format"), late_clicks))
}

impl PipelineArgs {
    /// The options `riffle demo` has without flags.
    pub fn default_args() -> PipelineArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: PipelineArgs,
        }
        Wrapper::parse_from(["riffle"]).args
    }
}

/// Runs the main job and prints its summary.
pub fn run(args: &PipelineArgs) -> riffle::Result<WindowedSummary> {
    if let Some(bootstrap) = &args.kafka.kafka {
        #[cfg(feature = "kafka")]
        return crate::demos::kafka::run(args, bootstrap);
        #[cfg(not(feature = "kafka"))]
        return Err(riffle::Error::config(
            "--kafka",
            format!(
                "needs riffle built with Kafka support (cargo build --features kafka); cannot reach {bootstrap}"
            ),
        ));
    }
    let env = StreamEnv::with_config(args.engine.env_config("pipeline")?);
    let output = args.engine.output_dir("pipeline");
    let clicks = args
        .input
        .clicks(&env, Some(DEFAULT_COUNT), args.event_time.strategy()?)?;
    let (counts, late) = pipeline(&clicks, &args.event_time)?;
    crate::demos::windowed_count::write_counts_and_late(&args.engine, &output, &counts, &late)?;
    let summary = run_windowed(&env, &args.engine, "pipeline")?;
    println!(
        "riffle demo: {} clicks -> drop bots -> enrich -> key by user -> {} s windows (+{} s lateness)",
        summary.read, args.event_time.window_secs, args.event_time.lateness_secs
    );
    println!(
        "  counts per user and window {:>10}  -> {}/agg-clicks/part-*.jsonl",
        summary.results,
        output.display()
    );
    println!(
        "  late clicks                {:>10}  -> {}/late-clicks/part-*.jsonl",
        summary.late,
        output.display()
    );
    let outliers = summary
        .result
        .as_ref()
        .map_or(0, |r| r.watermark_outliers());
    println!(
        "  watermark outliers         {outliers:>10}  (clicks more than {} s ahead of their split's watermark; counted in their windows, kept from moving the watermark)",
        args.event_time.max_watermark_jump_secs
    );
    for line in args
        .input
        .summary_lines((26, 10), (summary.bad, summary.unplaceable), &output)
    {
        println!("{line}");
    }
    crate::demos::windowed_count::print_checkpoints(&summary);
    Ok(summary)
}
