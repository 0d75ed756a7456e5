//! The seed's "joins of two streams by window": ad impressions and ad clicks. A click joins its
//! impression when it comes within 10 minutes after it (an interval join keyed by impression),
//! the click-through rate per campaign per minute is counted in tumbling windows, and late
//! records of either side go to their own side outputs.
//!
//! Both streams are generated (deterministically, from `--seed`) or read from JSON-lines files
//! (`--input-impressions`, `--input-clicks`).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use riffle::source::BadRecordPolicy;
use riffle::source::datagen::{DatagenSource, Generator, mix, unit};
use riffle::source::file::FileSource;
use riffle::time::WatermarkStrategy;
use riffle::window::{Tumbling, WindowResult};
use riffle::{DataStream, Error, OutputTag, StreamEnv};
use serde::{Deserialize, Serialize};

use crate::demos::{EngineArgs, seconds};
use crate::progress::{human, megabytes, run_with_progress};

/// An ad shown to a user.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Impression {
    /// Unique per impression.
    pub impression_id: u64,
    /// The campaign the ad belongs to.
    pub campaign_id: u32,
    /// Who saw it.
    pub user_id: u64,
    /// When it was shown (epoch ms).
    pub event_time: i64,
}

/// A click on an ad, naming the impression it came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdClick {
    /// The impression clicked.
    pub impression_id: u64,
    /// The campaign of the ad.
    pub campaign_id: u32,
    /// Who clicked.
    pub user_id: u64,
    /// When (epoch ms).
    pub event_time: i64,
}

/// A click joined with its impression.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct JoinedClick {
    /// The impression clicked.
    pub impression_id: u64,
    /// The campaign.
    pub campaign_id: u32,
    /// Who clicked.
    pub user_id: u64,
    /// When the ad was shown.
    pub impression_time: i64,
    /// When it was clicked.
    pub click_time: i64,
}

/// Impressions and joined clicks of one campaign in one window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CampaignCtr {
    /// The campaign.
    pub campaign_id: u32,
    /// First millisecond of the window.
    pub window_start: i64,
    /// First millisecond after the window.
    pub window_end: i64,
    /// Impressions shown in the window.
    pub impressions: u64,
    /// Clicks (joined to their impression) in the window.
    pub clicks: u64,
    /// `clicks / impressions` (0 without impressions).
    pub ctr: f64,
    /// Present (true) when the line replaces an earlier one for the same campaign and window.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub update: bool,
}

/// How the ad streams are generated.
#[derive(Clone, Debug)]
pub struct AdsConfig {
    /// Seed: the same seed gives the same streams.
    pub seed: u64,
    /// Impressions per second of event time.
    pub impressions_per_second: f64,
    /// Distinct campaigns.
    pub campaigns: u32,
    /// Distinct users.
    pub users: u64,
    /// Clicks per impression.
    pub click_rate: f64,
    /// A click comes up to this long after its impression; most come soon (the delay is the
    /// cube of a uniform draw times this: a quarter of it on average, one in eight clicks more
    /// than 10 of 15 minutes after).
    pub max_click_delay_ms: i64,
    /// Share of records of either stream that arrive `late_delay_ms` late.
    pub late_share: f64,
    /// How late a late record is.
    pub late_delay_ms: i64,
    /// Event time of the first impression.
    pub start_time: i64,
}

impl Default for AdsConfig {
    fn default() -> Self {
        AdsConfig {
            seed: 42,
            impressions_per_second: 1_000.0,
            campaigns: 50,
            users: 100_000,
            click_rate: 0.05,
            max_click_delay_ms: 15 * 60_000,
            late_share: 0.001,
            late_delay_ms: 6 * 60_000,
            start_time: 1_700_000_000_000,
        }
    }
}

impl AdsConfig {
    /// Checks the settings; errors name the flag.
    pub fn validate(&self) -> riffle::Result<()> {
        if !(self.click_rate > 0.0 && self.click_rate <= 1.0) {
            return Err(Error::config("--click-rate", "must be in (0, 1]"));
        }
        if !(0.0..=1.0).contains(&self.late_share) {
            return Err(Error::config("--late-share", "must be in [0, 1]"));
        }
        if self.campaigns == 0 {
            return Err(Error::config("--campaigns", "must be at least 1"));
        }
        if self.users == 0 {
            return Err(Error::config("--users", "must be at least 1"));
        }
        Ok(())
    }

    fn ms_per_impression(&self) -> f64 {
        1000.0 / self.impressions_per_second
    }

    /// Impression `index` as it would arrive on time.
    fn on_time_impression(&self, index: u64) -> Impression {
        Impression {
            impression_id: index,
            campaign_id: 1 + (mix(self.seed, index, 1) % self.campaigns as u64) as u32,
            user_id: 1 + mix(self.seed, index, 2) % self.users,
            event_time: self.start_time + (index as f64 * self.ms_per_impression()) as i64,
        }
    }

    /// Clicks that come with `impressions` impressions (clicks keep up with impressions in
    /// event time).
    pub fn clicks_for(&self, impressions: u64) -> u64 {
        (impressions as f64 * self.click_rate) as u64
    }
}

/// Generates impressions, in event-time order but for the late ones.
#[derive(Clone, Debug)]
pub struct ImpressionGenerator(pub AdsConfig);

impl Generator for ImpressionGenerator {
    type Item = Impression;

    fn generate(&self, index: u64) -> Impression {
        let c = &self.0;
        let mut impression = c.on_time_impression(index);
        if unit(mix(c.seed, index, 3)) < c.late_share {
            impression.event_time -= c.late_delay_ms;
        }
        impression
    }

    fn name(&self) -> String {
        "impressions".into()
    }
}

/// Generates clicks: click `index` happens at its own time (clicks come in event-time order at
/// `click_rate` times the impressions' rate) on the impression shown a random delay before.
#[derive(Clone, Debug)]
pub struct AdClickGenerator(pub AdsConfig);

impl Generator for AdClickGenerator {
    type Item = AdClick;

    fn generate(&self, index: u64) -> AdClick {
        let c = &self.0;
        let ms_per_click = c.ms_per_impression() / c.click_rate;
        let offset = (index as f64 * ms_per_click) as i64; // since the first impression
        let delay =
            (unit(mix(c.seed, index, 11)).powi(3) * c.max_click_delay_ms.max(0) as f64) as i64;
        let shown_at = (offset - delay).max(0);
        let impression = c.on_time_impression((shown_at as f64 / c.ms_per_impression()) as u64);
        let mut event_time = c.start_time + offset;
        if unit(mix(c.seed, index, 12)) < c.late_share {
            event_time -= c.late_delay_ms;
        }
        AdClick {
            impression_id: impression.impression_id,
            campaign_id: impression.campaign_id,
            user_id: impression.user_id,
            event_time,
        }
    }

    fn name(&self) -> String {
        "ad-clicks".into()
    }
}

/// Options of `riffle demo join`.
#[derive(Args, Clone, Debug)]
pub struct JoinArgs {
    /// Read impressions from this JSON-lines file or directory (impression_id, campaign_id,
    /// user_id, event_time) instead of generating them; needs --input-clicks.
    #[arg(long, value_name = "PATH", requires = "input_clicks")]
    pub input_impressions: Option<PathBuf>,
    /// Read clicks from this JSON-lines file or directory (impression_id, campaign_id, user_id,
    /// event_time); needs --input-impressions.
    #[arg(long, value_name = "PATH", requires = "input_impressions")]
    pub input_clicks: Option<PathBuf>,
    /// Impressions to generate (clicks follow at --click-rate).
    #[arg(long, default_value_t = 2_000_000, value_name = "N")]
    pub count: u64,
    /// Clicks per impression in the generated streams.
    #[arg(long, default_value_t = 0.05)]
    pub click_rate: f64,
    /// Campaigns in the generated streams.
    #[arg(long, default_value_t = 50)]
    pub campaigns: u32,
    /// Share of generated records (of both streams) that arrive 6 minutes late.
    #[arg(long, default_value_t = 0.001)]
    pub late_share: f64,
    /// Seed of the generators.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// A click joins an impression when it comes at most this many seconds after it.
    #[arg(long, default_value_t = 600.0, value_name = "SECONDS")]
    pub join_within_secs: f64,
    /// Length of the click-through-rate windows, in seconds.
    #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
    pub window_secs: f64,
    /// How long a rate window is kept after it fired, in seconds: late impressions within it
    /// update the rate (a line with `"update":true`).
    #[arg(long, default_value_t = 600.0, value_name = "SECONDS")]
    pub lateness_secs: f64,
    /// How far out of order records may arrive, in seconds.
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
    pub out_of_orderness_secs: f64,
    /// What to do with input lines that are not valid records: fail, skip or dead-letter.
    #[arg(long, default_value = "dead-letter", value_name = "POLICY")]
    pub bad_records: BadRecordPolicy,
    /// How the engine runs.
    #[command(flatten)]
    pub engine: EngineArgs,
}

impl JoinArgs {
    /// The generators' configuration, checked.
    pub fn ads_config(&self) -> riffle::Result<AdsConfig> {
        let config = AdsConfig {
            seed: self.seed,
            campaigns: self.campaigns,
            click_rate: self.click_rate,
            late_share: self.late_share,
            ..AdsConfig::default()
        };
        config.validate()?;
        Ok(config)
    }
}

/// The interval join's name (in metrics).
pub const JOIN: &str = "join clicks to impressions";
/// The window operator's name.
pub const CTR: &str = "ctr per campaign";
/// The sources' names.
const IMPRESSIONS: &str = "Source: impressions";
const CLICKS: &str = "Source: ad-clicks";
/// The sinks' names.
const WRITE_JOINED: &str = "write joined";
const WRITE_CTR: &str = "write ctr";
const WRITE_LATE_IMPRESSIONS: &str = "write late impressions";
const WRITE_LATE_CLICKS: &str = "write late clicks";

/// Counts of one campaign: (impressions, clicks).
type Counts = (u64, u64);

/// The streams the demo writes.
pub struct JoinOutputs {
    /// Clicks joined with their impression.
    pub joined: DataStream<JoinedClick>,
    /// Click-through rate per campaign and window.
    pub ctr: DataStream<CampaignCtr>,
    /// Impressions that arrived after the watermark passed them.
    pub late_impressions: DataStream<Impression>,
    /// Clicks that arrived after the watermark passed them.
    pub late_clicks: DataStream<AdClick>,
}

/// The demo's pipeline on two streams with event time.
pub fn pipeline(
    impressions: &DataStream<Impression>,
    clicks: &DataStream<AdClick>,
    join_within: Duration,
    window: Duration,
    lateness: Duration,
) -> JoinOutputs {
    let late_impressions = OutputTag::<Impression>::new("late-impressions");
    let late_clicks = OutputTag::<AdClick>::new("late-clicks");
    let joined = impressions
        .key_by(|i| i.impression_id)
        .interval_join(&clicks.key_by(|c| c.impression_id))
        .between(0, join_within.as_millis() as i64)
        .side_output_left_late(&late_impressions)
        .side_output_right_late(&late_clicks)
        .process(|impression: Impression, click: AdClick, ctx| {
            ctx.emit(JoinedClick {
                impression_id: impression.impression_id,
                campaign_id: impression.campaign_id,
                user_id: click.user_id,
                impression_time: impression.event_time,
                click_time: click.event_time,
            })
        })
        .name(JOIN)
        .uid("join-clicks");
    let shown: DataStream<(u32, Counts)> = impressions.map(|i| (i.campaign_id, (1, 0)));
    let clicked: DataStream<(u32, Counts)> = joined.map(|j| (j.campaign_id, (0, 1)));
    let ctr = shown
        .union(&[&clicked])
        .key_by(|(campaign, _)| *campaign)
        .window(Tumbling::of(window))
        // Late impressions (and clicks joined late) update their minute's rate.
        .allowed_lateness(lateness)
        .reduce(|a, b| (a.0, (a.1.0 + b.1.0, a.1.1 + b.1.1)))
        .name(CTR)
        .uid("ctr")
        .map(|r: WindowResult<u32, (u32, Counts)>| {
            let (impressions, clicks) = r.value.1;
            CampaignCtr {
                campaign_id: r.key,
                window_start: r.window_start,
                window_end: r.window_end,
                impressions,
                clicks,
                ctr: if impressions == 0 {
                    0.0
                } else {
                    clicks as f64 / impressions as f64
                },
                update: r.update,
            }
        });
    JoinOutputs {
        late_impressions: joined.get_side_output(&late_impressions),
        late_clicks: joined.get_side_output(&late_clicks),
        joined,
        ctr,
    }
}

/// What a run of the demo did.
#[derive(Clone, Debug)]
pub struct JoinSummary {
    /// Impressions read.
    pub impressions: u64,
    /// Clicks read.
    pub clicks: u64,
    /// Clicks joined to their impression.
    pub joined: u64,
    /// CTR lines written.
    pub ctr_lines: u64,
    /// Late impressions and late clicks.
    pub late: (u64, u64),
    /// Most records the join held in state, and their bytes.
    pub max_state: (u64, u64),
}

/// Runs the demo and prints its summary.
pub fn run(args: &JoinArgs) -> riffle::Result<JoinSummary> {
    let env = StreamEnv::with_config(args.engine.env_config("join")?);
    let output = args.engine.output_dir("join");
    let bound = seconds("--out-of-orderness-secs", args.out_of_orderness_secs, true)?;
    let join_within = seconds("--join-within-secs", args.join_within_secs, true)?;
    let window = seconds("--window-secs", args.window_secs, false)?;
    let impression_time = WatermarkStrategy::bounded_out_of_orderness(bound)
        .with_timestamps(|i: &Impression| i.event_time);
    let click_time = WatermarkStrategy::bounded_out_of_orderness(bound)
        .with_timestamps(|c: &AdClick| c.event_time);
    let (impressions, clicks) = match (&args.input_impressions, &args.input_clicks) {
        (Some(impressions), Some(clicks)) => (
            env.from_source_with_watermarks(
                FileSource::<Impression>::json(impressions)
                    .setting_name("--input-impressions")
                    .bad_records(args.bad_records),
                impression_time,
            ),
            env.from_source_with_watermarks(
                FileSource::<AdClick>::json(clicks)
                    .setting_name("--input-clicks")
                    .bad_records(args.bad_records),
                click_time,
            ),
        ),
        _ => {
            let config = args.ads_config()?;
            let click_count = config.clicks_for(args.count);
            (
                env.from_source_with_watermarks(
                    DatagenSource::new(ImpressionGenerator(config.clone())).count(args.count),
                    impression_time,
                ),
                env.from_source_with_watermarks(
                    DatagenSource::new(AdClickGenerator(config)).count(click_count),
                    click_time,
                ),
            )
        }
    };
    let impressions = impressions.name(IMPRESSIONS).uid("impressions");
    let clicks = clicks.name(CLICKS).uid("ad-clicks");
    let lateness = seconds("--lateness-secs", args.lateness_secs, true)?;
    let outputs = pipeline(&impressions, &clicks, join_within, window, lateness);
    let engine = &args.engine;
    outputs
        .joined
        .sink(engine.json_sink(&output.join("joined"))?)
        .name(WRITE_JOINED)
        .uid("write-joined");
    outputs
        .ctr
        .sink(engine.json_sink(&output.join("ctr"))?)
        .name(WRITE_CTR)
        .uid("write-ctr");
    outputs
        .late_impressions
        .sink(engine.json_sink(&output.join("late-impressions"))?)
        .name(WRITE_LATE_IMPRESSIONS)
        .uid("write-late-impressions");
    outputs
        .late_clicks
        .sink(engine.json_sink(&output.join("late-clicks"))?)
        .name(WRITE_LATE_CLICKS)
        .uid("write-late-clicks");
    let mut peak = (0, 0);
    let (result, _) = run_with_progress(&env, &engine.run_options()?, |report| {
        let join = report.snapshot.operator_total(JOIN);
        let (joined, state, bytes) = join.map_or((0, 0, 0), |j| {
            (j.records_out, j.state_entries, j.state_bytes)
        });
        if state > peak.0 {
            peak = (state, bytes);
        }
        format!(
            "join {:>5.1} s | joined {} | state {} entries, {} | RSS {}",
            report.elapsed.as_secs_f64(),
            human(joined as f64),
            human(state as f64),
            megabytes(bytes),
            megabytes(report.rss_bytes),
        )
    })?;
    let metrics = &result.metrics;
    let count = |name: &str, out: bool| {
        metrics
            .operator_total(name)
            .map_or(0, |o| if out { o.records_out } else { o.records_in })
    };
    let summary = JoinSummary {
        impressions: count(IMPRESSIONS, true),
        clicks: count(CLICKS, true),
        joined: count(WRITE_JOINED, false),
        ctr_lines: count(WRITE_CTR, false),
        late: (
            count(WRITE_LATE_IMPRESSIONS, false),
            count(WRITE_LATE_CLICKS, false),
        ),
        max_state: peak,
    };
    println!(
        "riffle demo join: {} impressions, {} clicks; a click joins its impression within {} s after it",
        summary.impressions, summary.clicks, args.join_within_secs
    );
    if let Some(from) = &result.restored_from {
        println!("  started from {from}");
    }
    if let Some(id) = result.already_finished {
        println!(
            "  the job had already finished (its final checkpoint {id} was restored): nothing read, nothing written"
        );
    }
    let dir = output.display();
    println!(
        "  joined            {:>10}  -> {dir}/joined/part-*.jsonl",
        summary.joined
    );
    println!(
        "  ctr lines         {:>10}  -> {dir}/ctr/part-*.jsonl ({} s windows per campaign)",
        summary.ctr_lines, args.window_secs
    );
    println!(
        "  late impressions  {:>10}  -> {dir}/late-impressions/part-*.jsonl",
        summary.late.0
    );
    println!(
        "  late clicks       {:>10}  -> {dir}/late-clicks/part-*.jsonl",
        summary.late.1
    );
    println!(
        "  join state        {:>10} records at most, {}",
        summary.max_state.0,
        megabytes(summary.max_state.1)
    );
    let bad = result.bad_records();
    if bad > 0 && args.bad_records == BadRecordPolicy::DeadLetter {
        println!("  bad records       {bad:>10}  -> {dir}/dead-letter/");
    } else {
        println!("  bad records       {bad:>10}");
    }
    Ok(summary)
}
