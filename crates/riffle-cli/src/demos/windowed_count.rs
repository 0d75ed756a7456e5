//! Seed scenario 2, stateful windowed count: clicks per user per minute, with a shuffle by user
//! and one counter per user and window in keyed state (1M users by default). Prints live totals,
//! the watermark as it closes windows, and the state's size.

use clap::Args;
use riffle::aggregate::Count;
use riffle::window::Tumbling;
use riffle::{DataStream, OutputTag, StreamEnv};
use riffle_clicks::Click;

use crate::demos::{EngineArgs, EventTimeArgs, InputArgs, UserCount, clock_time};
use crate::progress::{Report, RunOptions, human, megabytes, run_with_progress};

/// Options of `riffle demo windowed-count`.
#[derive(Args, Clone, Debug)]
pub struct WindowedCountArgs {
    /// Where the clicks come from.
    #[command(flatten)]
    pub input: InputArgs,
    /// Watermarks, lateness and window length.
    #[command(flatten)]
    pub event_time: EventTimeArgs,
    /// How the engine runs.
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Clicks generated when neither `--count` nor `--input` is given: 200 s of event time at the
/// seed's 100K clicks/s.
pub const DEFAULT_COUNT: u64 = 20_000_000;
/// The window operator's name.
pub const WINDOW: &str = "count per user";
/// The source's name, in metrics.
pub const SOURCE_PREFIX: &str = "Source:";

/// Counts clicks per user and window; returns the counts and the late clicks.
pub fn count_per_user(
    clicks: &DataStream<Click>,
    event_time: &EventTimeArgs,
) -> riffle::Result<(DataStream<UserCount>, DataStream<Click>)> {
    let late = OutputTag::<Click>::new("late-clicks");
    let windows = clicks
        .key_by(|click| click.user_id)
        .window(Tumbling::of(event_time.window()?))
        .allowed_lateness(event_time.lateness()?)
        .side_output_late(&late)
        .aggregate(Count)
        .name(WINDOW)
        .uid("count-per-user");
    let late_clicks = windows.get_side_output(&late);
    Ok((windows.map(UserCount::from).name("format"), late_clicks))
}

/// The live line of a windowed job.
pub fn live_line(demo: &str, report: &Report<'_>) -> String {
    let source_rate: f64 = report
        .rates
        .iter()
        .filter(|r| r.name.starts_with(SOURCE_PREFIX))
        .map(|r| r.records_out_per_sec)
        .sum();
    let read: u64 = report
        .snapshot
        .operators
        .iter()
        .filter(|o| o.name.starts_with(SOURCE_PREFIX))
        .map(|o| o.records_out)
        .sum();
    let window = report.snapshot.operator_total(WINDOW);
    let (watermark, results, state, bytes, late) = window.map_or((0, 0, 0, 0, 0), |w| {
        (
            w.watermark,
            w.records_out,
            w.state_entries,
            w.state_bytes,
            w.late_records_side_output + w.late_records_dropped,
        )
    });
    format!(
        "{demo} {:>5.1} s | {} clicks/s | read {} | watermark {} | results {} | late {} | state {} entries, {} | RSS {}{}",
        report.elapsed.as_secs_f64(),
        human(source_rate),
        human(read as f64),
        clock_time(watermark),
        human(results as f64),
        late,
        human(state as f64),
        megabytes(bytes),
        megabytes(report.rss_bytes),
        if report.stopping { " | draining" } else { "" },
    )
}

/// What a windowed run did.
#[derive(Debug, Clone)]
pub struct WindowedSummary {
    /// Clicks read.
    pub read: u64,
    /// Results (lines) written, updates included.
    pub results: u64,
    /// Late clicks sent to the late side output.
    pub late: u64,
    /// Bad records: input that could not be decoded, event times no window can hold.
    pub bad: u64,
    /// Of those, the window operator's: event times no window can hold.
    pub unplaceable: u64,
    /// Most state entries seen.
    pub max_state_entries: u64,
    /// State bytes when the entries peaked.
    pub max_state_bytes: u64,
    /// The job's result (checkpoints, restarts, metrics).
    pub result: Option<riffle::JobResult>,
}

/// Writes the counts to `output/agg-clicks` and the late clicks to `output/late-clicks` (JSON
/// lines; exactly-once when the job checkpoints).
pub fn write_counts_and_late<L: riffle::Data + serde::Serialize>(
    engine: &EngineArgs,
    output: &std::path::Path,
    counts: &DataStream<UserCount>,
    late: &DataStream<L>,
) -> riffle::Result<()> {
    counts
        .sink(engine.json_sink_with(&output.join("agg-clicks"), Some(UserCount::write_json))?)
        .name("write counts")
        .uid("write-counts");
    late.sink(engine.json_sink(&output.join("late-clicks"))?)
        .name("write late clicks")
        .uid("write-late-clicks");
    Ok(())
}

/// Runs a windowed job with live progress and returns its summary.
pub fn run_windowed(
    env: &StreamEnv,
    engine: &EngineArgs,
    demo: &str,
) -> riffle::Result<WindowedSummary> {
    run_windowed_with(env, &engine.run_options()?, demo)
}

/// [`run_windowed`] with these run options.
pub fn run_windowed_with(
    env: &StreamEnv,
    options: &RunOptions,
    demo: &str,
) -> riffle::Result<WindowedSummary> {
    let mut peak = (0, 0);
    let (result, _) = run_with_progress(env, options, |report| {
        if let Some(w) = report.snapshot.operator_total(WINDOW)
            && w.state_entries > peak.0
        {
            peak = (w.state_entries, w.state_bytes);
        }
        live_line(demo, report)
    })?;
    let window = result
        .metrics
        .operator_total(WINDOW)
        .unwrap_or_else(|| panic!("the job has a `{WINDOW}` operator"));
    Ok(WindowedSummary {
        read: result
            .metrics
            .operators
            .iter()
            .filter(|o| o.name.starts_with(SOURCE_PREFIX))
            .map(|o| o.records_out)
            .sum(),
        results: window.records_out,
        late: window.late_records_side_output,
        bad: result.bad_records(),
        unplaceable: window.bad_records,
        max_state_entries: peak.0,
        max_state_bytes: peak.1,
        result: Some(result),
    })
}

/// Prints the checkpoints a run took, and what it restored.
pub fn print_checkpoints(summary: &WindowedSummary) {
    let Some(result) = &summary.result else {
        return;
    };
    if let Some(from) = &result.restored_from {
        println!("  started from {from}");
    }
    if let Some(id) = result.already_finished {
        println!(
            "  the job had already finished (its final checkpoint {id} was restored): nothing read, nothing written"
        );
    }
    let completed: Vec<_> = result
        .checkpoints
        .iter()
        .filter(|c| c.completed())
        .collect();
    if let Some(last) = completed.last() {
        println!(
            "  checkpoints   {:>10} completed (last: {}, {} ms, {} bytes written, state {} bytes), {} failed",
            completed.len(),
            last.id,
            last.duration_ms,
            last.size_bytes,
            last.state_size_bytes,
            result.checkpoints.len() - completed.len()
        );
    }
}

/// Runs the scenario and prints its summary.
pub fn run(args: &WindowedCountArgs) -> riffle::Result<WindowedSummary> {
    let env = StreamEnv::with_config(args.engine.env_config("windowed-count")?);
    let output = args.engine.output_dir("windowed-count");
    let clicks = args
        .input
        .clicks(&env, Some(DEFAULT_COUNT), args.event_time.strategy()?)?;
    let (counts, late) = count_per_user(&clicks, &args.event_time)?;
    write_counts_and_late(&args.engine, &output, &counts, &late)?;
    let summary = run_windowed(&env, &args.engine, "windowed-count")?;
    println!(
        "riffle demo windowed-count: {} clicks counted per user per {} s window",
        summary.read, args.event_time.window_secs
    );
    println!(
        "  results     {:>12}  -> {}/agg-clicks/part-*.jsonl",
        summary.results,
        output.display()
    );
    println!(
        "  late clicks {:>12}  -> {}/late-clicks/part-*.jsonl",
        summary.late,
        output.display()
    );
    for line in args
        .input
        .summary_lines((11, 12), (summary.bad, summary.unplaceable), &output)
    {
        println!("{line}");
    }
    if summary.max_state_entries > 0 {
        println!(
            "  state       {:>12} entries at most, {} ({} bytes per entry)",
            summary.max_state_entries,
            megabytes(summary.max_state_bytes),
            summary.max_state_bytes / summary.max_state_entries
        );
    }
    print_checkpoints(&summary);
    Ok(summary)
}
