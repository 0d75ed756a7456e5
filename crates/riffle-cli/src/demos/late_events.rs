//! Seed scenario 3, late events: a mobile user rides the subway; the click made at 15:42 arrives
//! at 15:48, when the window 15:42-15:43 has long fired. The demo runs the same clicks three
//! ways and shows what each setting does with it:
//!
//! 1. out-of-orderness 5 s, no allowed lateness: the click is late; it goes to the late side
//!    output and the counter (never dropped silently);
//! 2. plus 30 s of allowed lateness: a click 25 s late updates its window (marked as an update),
//!    the subway click is still too late;
//! 3. out-of-orderness 5 min (the seed's advice for mobile): both are counted on time, and every
//!    result comes 5 minutes later.
//!
//! Each run follows every record with its watermark (batches of one), so the outcome does not
//! depend on timing. With `--input` or any event-time flag, one run with those settings instead.

use std::path::Path;

use clap::Args;
use riffle::sink::{CollectSink, FileSink};
use riffle::{EnvConfig, StreamEnv};
use riffle_clicks::{Click, DEFAULT_START_TIME};

use crate::demos::windowed_count::{WINDOW, count_per_user};
use crate::demos::{EngineArgs, EventTimeArgs, InputArgs, UserCount, clock_time};

/// Options of `riffle demo late-events`.
#[derive(Args, Clone, Debug)]
pub struct LateEventsArgs {
    /// Read clicks from this JSON-lines file or directory instead of the subway scenario.
    #[arg(long, value_name = "PATH")]
    pub input: Option<std::path::PathBuf>,
    /// Run once with this out-of-orderness (seconds) instead of the three comparisons.
    #[arg(long, value_name = "SECONDS")]
    pub out_of_orderness_secs: Option<f64>,
    /// Run once with this allowed lateness (seconds) instead of the three comparisons.
    #[arg(long, value_name = "SECONDS")]
    pub lateness_secs: Option<f64>,
    /// Window length in seconds.
    #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
    pub window_secs: f64,
    /// How the engine runs.
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// The subway rider.
pub const SUBWAY_USER: u64 = 4242;

const MINUTE: i64 = 60_000;

/// 15:40:00 + `minutes:seconds` of the scenario's day.
fn at(minute: i64, second: i64) -> i64 {
    DEFAULT_START_TIME + (minute - 40) * MINUTE + second * 1000
}

fn click(user_id: u64, event_time: i64) -> Click {
    Click {
        user_id,
        url: format!("/article/{}", event_time / 1000 % 1000).into(),
        user_agent: "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X)".into(),
        ip: "151.5.12.7".into(),
        event_time,
    }
}

/// The scenario's clicks in arrival order: 50 users clicking from 15:40 to 15:50 (up to 3 s
/// out of order), and the subway user, whose clicks of 15:42:10 and 15:44:50 arrive at 15:47:50
/// and 15:45:15.
pub fn subway_clicks() -> Vec<Click> {
    // (arrival time, click)
    let mut arrivals: Vec<(i64, Click)> = (0..6_000i64)
        .map(|i| {
            let arrival = at(40, 0) + i * 100;
            (
                arrival,
                click(1 + (i as u64 * 7) % 50, arrival - (i * 37) % 3_000),
            )
        })
        .collect();
    for (event, arrival) in [
        (at(42, 5), at(42, 5)),
        (at(44, 40), at(44, 40)),
        (at(44, 50), at(45, 15)),
        (at(42, 10), at(47, 50)),
    ] {
        arrivals.push((arrival, click(SUBWAY_USER, event)));
    }
    arrivals.sort_by_key(|(arrival, _)| *arrival);
    arrivals.into_iter().map(|(_, c)| c).collect()
}

/// What one run showed.
#[derive(Debug, Clone, PartialEq)]
pub struct LateRun {
    /// The setting, as a title.
    pub title: String,
    /// Every count line of the subway user, in emission order.
    pub subway_counts: Vec<UserCount>,
    /// The late side output.
    pub late: Vec<Click>,
    /// The late counter of the window operator.
    pub late_counter: u64,
}

/// Runs the count over `clicks` with one setting.
fn run_once(
    title: String,
    clicks: Clicks<'_>,
    event_time: &EventTimeArgs,
    engine: &EngineArgs,
    output: &Path,
) -> riffle::Result<LateRun> {
    let deterministic = matches!(clicks, Clicks::Scenario);
    let mut config = engine.env_config("late-events")?;
    if deterministic {
        config = EnvConfig {
            parallelism: 1,
            buffer_size: 1,
            ..config
        };
    }
    let env = StreamEnv::with_config(config);
    let mut strategy = event_time.strategy()?;
    if deterministic {
        strategy = strategy.with_watermark_after_every_batch();
    }
    let clicks = match clicks {
        Clicks::Scenario => env.from_source_with_watermarks(
            riffle::source::collection::CollectionSource::new(subway_clicks()),
            strategy,
        ),
        Clicks::Input(input) => input.clicks(&env, None, strategy)?,
    };
    let (counts, late) = count_per_user(&clicks, event_time)?;
    let (subway, subway_out) = CollectSink::new();
    let (late_sink, late_out) = CollectSink::new();
    counts
        .sink(FileSink::new(output.join("agg-clicks")).setting_name("--output"))
        .name("write counts");
    counts.filter(|c| c.user_id == SUBWAY_USER).sink(subway);
    late.sink(FileSink::new(output.join("late-clicks")).setting_name("--output"))
        .name("write late clicks");
    late.sink(late_sink);
    let result = env.execute()?;
    let window = result
        .metrics
        .operator_total(WINDOW)
        .expect("the window operator runs");
    Ok(LateRun {
        title,
        subway_counts: subway_out.values(),
        late: late_out.values(),
        late_counter: window.late_records_side_output + window.late_records_dropped,
    })
}

enum Clicks<'a> {
    Scenario,
    Input(&'a InputArgs),
}

fn print(run: &LateRun, number: usize) {
    println!("{number}) {}", run.title);
    if run.subway_counts.is_empty() {
        println!("   user {SUBWAY_USER}: no counts");
    }
    for count in &run.subway_counts {
        let plural = if count.count == 1 { "" } else { "s" };
        let note = if count.update {
            "  (update: a late click arrived within the allowed lateness)"
        } else {
            ""
        };
        println!(
            "   user {} window {}-{}: {} click{plural}{note}",
            count.user_id,
            &clock_time(count.window_start)[..5],
            &clock_time(count.window_end)[..5],
            count.count
        );
    }
    let late: Vec<String> = run
        .late
        .iter()
        .map(|c| format!("user {} at {}", c.user_id, clock_time(c.event_time)))
        .collect();
    println!(
        "   late side output `late-clicks`: {}",
        if late.is_empty() {
            "nothing".to_string()
        } else {
            late.join(", ")
        }
    );
    println!("   late counter: {}", run.late_counter);
}

/// Runs the demo and prints what happened to the late clicks.
pub fn run(args: &LateEventsArgs) -> riffle::Result<Vec<LateRun>> {
    let output = args.engine.output_dir("late-events");
    let single = args.input.is_some()
        || args.out_of_orderness_secs.is_some()
        || args.lateness_secs.is_some();
    let event_time = |ooo: f64, lateness: f64| EventTimeArgs {
        out_of_orderness_secs: ooo,
        lateness_secs: lateness,
        window_secs: args.window_secs,
        idleness_secs: None,
        max_watermark_jump_secs: 3600.0,
        outlier_corroboration: riffle::time::DEFAULT_OUTLIER_CORROBORATION,
    };
    if single {
        let settings = event_time(
            args.out_of_orderness_secs.unwrap_or(5.0),
            args.lateness_secs.unwrap_or(0.0),
        );
        let input = InputArgs {
            input: args.input.clone(),
            count: None,
            rate: None,
            users: 1,
            bot_share: 0.0,
            hot_key_share: 0.0,
            late_share: 0.0,
            seed: 0,
            bad_records: riffle::source::BadRecordPolicy::DeadLetter,
        };
        let clicks = if args.input.is_some() {
            Clicks::Input(&input)
        } else {
            Clicks::Scenario
        };
        let title = format!(
            "out-of-orderness {} s, allowed lateness {} s",
            settings.out_of_orderness_secs, settings.lateness_secs
        );
        let run = run_once(title, clicks, &settings, &args.engine, &output)?;
        print(&run, 1);
        println!(
            "outputs: {}/agg-clicks, {}/late-clicks",
            output.display(),
            output.display()
        );
        return Ok(vec![run]);
    }
    println!(
        "riffle demo late-events: user {SUBWAY_USER} rides the subway; the click made at 15:42:10 arrives at 15:47:50,\n\
         and one made at 15:44:50 arrives at 15:45:15. The same clicks, three settings:\n"
    );
    let settings = [
        (
            "out-of-orderness 5 s, no allowed lateness (Flink's default drops the click silently; Riffle never does)",
            5.0,
            0.0,
        ),
        ("out-of-orderness 5 s, allowed lateness 30 s", 5.0, 30.0),
        (
            "out-of-orderness 5 min (the seed's advice for mobile), allowed lateness 30 s: results come 5 min later",
            300.0,
            30.0,
        ),
    ];
    let mut runs = Vec::new();
    for (number, (title, ooo, lateness)) in settings.into_iter().enumerate() {
        let dir = output.join((number + 1).to_string());
        let run = run_once(
            title.to_string(),
            Clicks::Scenario,
            &event_time(ooo, lateness),
            &args.engine,
            &dir,
        )?;
        print(&run, number + 1);
        runs.push(run);
    }
    println!(
        "\noutputs: {}/<1|2|3>/agg-clicks and late-clicks",
        output.display()
    );
    Ok(runs)
}
