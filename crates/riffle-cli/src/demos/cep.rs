//! Complex event processing on courier events (the seed's DoorDash "late delivery alert"): two
//! patterns on each order's events, in event time.
//!
//! - **Late delivery**: `placed`, followed by `picked_up`, followed by `delivered`, within the
//!   promised time. A partial match that times out is the alert: `late_delivery` when the order
//!   was picked up, `not_picked_up` when it was not.
//! - **Courier silent**: a `ping` not followed by another `ping` (or the delivery) within N
//!   minutes: the courier's phone went quiet while carrying the order.
//!
//! Events come from a generator (orders placed, picked up, pinged every minute, delivered; some
//! deliveries late, some couriers silent for a while, a few events arriving far behind the
//! watermark) or from `--input` JSON lines. Alerts are JSON lines under `--output`/alerts, late
//! events under `--output`/late-events.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use riffle::cep::{Match, Pattern, PatternContext, PatternProcessFunction};
use riffle::source::BadRecordPolicy;
use riffle::source::collection::CollectionSource;
use riffle::source::file::FileSource;
use riffle::time::WatermarkStrategy;
use riffle::{DataStream, OutputTag, StreamEnv};
use riffle_clicks::DEFAULT_START_TIME;
use serde::{Deserialize, Serialize};

use crate::demos::{EngineArgs, clock_time};
use crate::progress::{human, run_with_progress};

/// Options of `riffle demo cep`.
#[derive(Args, Clone, Debug)]
pub struct CepArgs {
    /// Read courier events from this JSON-lines file or directory instead of generating them.
    /// Each line holds order_id, courier_id, kind (placed, picked_up, ping, delivered) and
    /// event_time (epoch ms).
    #[arg(long, value_name = "PATH")]
    pub input: Option<PathBuf>,
    /// Orders to generate.
    #[arg(long, default_value_t = 20_000)]
    pub orders: u64,
    /// Couriers in the generated events.
    #[arg(long, default_value_t = 500)]
    pub couriers: u64,
    /// Seed of the generator: the same seed gives the same events.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Minutes from the order within which its delivery is promised.
    #[arg(long, default_value_t = 60)]
    pub promised_minutes: u64,
    /// Minutes without a ping from a courier carrying an order before an alert.
    #[arg(long, default_value_t = 10)]
    pub silence_minutes: u64,
    /// Seconds between two pings of a courier carrying an order (generated events).
    #[arg(long, default_value_t = 60)]
    pub ping_secs: u64,
    /// Share of generated events that arrive 10 minutes late (behind the watermark).
    #[arg(long, default_value_t = 0.001)]
    pub late_share: f64,
    /// How far out of time order events may arrive (seconds) before they are late.
    #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
    pub out_of_orderness_secs: f64,
    /// What to do with input lines that are not valid events: fail, skip or dead-letter.
    #[arg(long, default_value = "dead-letter", value_name = "POLICY")]
    pub bad_records: BadRecordPolicy,
    /// How the engine runs.
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// What happened to an order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// The customer placed it.
    Placed,
    /// The courier picked it up.
    PickedUp,
    /// The courier's phone reported its location.
    Ping,
    /// It was delivered.
    Delivered,
}

/// A courier event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CourierEvent {
    /// The order.
    pub order_id: u64,
    /// The courier carrying it.
    pub courier_id: u64,
    /// What happened.
    pub kind: Kind,
    /// When (epoch ms).
    pub event_time: i64,
}

/// An alert, as written to `alerts/`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    /// `late_delivery` or `courier_silent`.
    pub alert: String,
    /// The order.
    pub order_id: u64,
    /// Its courier.
    pub courier_id: u64,
    /// The event the alert is about: the pickup, or the last ping.
    pub since: String,
    /// When the alert was due (the promised time, or the end of the silence).
    pub at: String,
}

const MINUTE: i64 = 60_000;

/// A small deterministic generator of numbers (xorshift).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// What the generator makes.
#[derive(Clone, Debug)]
pub struct CourierConfig {
    /// Orders.
    pub orders: u64,
    /// Couriers.
    pub couriers: u64,
    /// Seed.
    pub seed: u64,
    /// Minutes from the order within which its delivery is promised.
    pub promised_minutes: u64,
    /// Seconds between pings.
    pub ping_secs: u64,
    /// Share of events that arrive 10 minutes late.
    pub late_share: f64,
}

impl CepArgs {
    /// The generator's settings from the flags.
    pub fn courier_config(&self) -> CourierConfig {
        CourierConfig {
            orders: self.orders,
            couriers: self.couriers,
            seed: self.seed,
            promised_minutes: self.promised_minutes,
            ping_secs: self.ping_secs,
            late_share: self.late_share,
        }
    }
}

/// The generated events in arrival order, each with whether it arrives far behind its time
/// (behind the watermark: late). An order is placed every 2 s; one in a hundred is never picked
/// up, one in twelve is delivered after its promised time, one in thirty has its courier go
/// quiet for 12 to 20 minutes; events arrive up to 20 s out of order.
pub fn generate(config: &CourierConfig) -> Vec<(CourierEvent, bool)> {
    let mut rng = Rng(config.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    // (arrival, event, late)
    let mut events: Vec<(i64, CourierEvent, bool)> = Vec::new();
    let promised = config.promised_minutes as i64 * MINUTE;
    let ping_every = (config.ping_secs.max(1) * 1000) as i64;
    let late_per_million = (config.late_share.clamp(0.0, 1.0) * 1e6) as u64;
    for order_id in 1..=config.orders {
        let courier_id = 1 + rng.below(config.couriers);
        let placed = DEFAULT_START_TIME + order_id as i64 * 2_000 + rng.below(1_000) as i64;
        let picked = placed + 5 * MINUTE + rng.below(10 * MINUTE as u64) as i64;
        let delivered = if rng.below(12) == 0 {
            placed + promised + rng.below(25 * MINUTE as u64) as i64
        } else {
            picked + 10 * MINUTE + rng.below(30 * MINUTE as u64) as i64
        }
        .max(picked + MINUTE);
        let never_picked = rng.below(100) == 0;
        let quiet = (rng.below(30) == 0).then(|| {
            let from = picked + 5 * MINUTE;
            (
                from,
                from + 12 * MINUTE + rng.below(8 * MINUTE as u64) as i64,
            )
        });
        let event = |kind, event_time| CourierEvent {
            order_id,
            courier_id,
            kind,
            event_time,
        };
        let mut order = vec![event(Kind::Placed, placed)];
        if !never_picked {
            order.push(event(Kind::PickedUp, picked));
            let mut ping = picked + 30_000;
            while ping < delivered {
                if !quiet.is_some_and(|(from, to)| ping >= from && ping < to) {
                    order.push(event(Kind::Ping, ping));
                }
                ping += ping_every;
            }
            order.push(event(Kind::Delivered, delivered));
        }
        for e in order {
            let late = late_per_million > 0 && rng.below(1_000_000) < late_per_million;
            let delay = if late {
                10 * MINUTE
            } else {
                rng.below(20_000) as i64
            };
            events.push((e.event_time + delay, e, late));
        }
    }
    events.sort_by_key(|(arrival, e, _)| (*arrival, e.order_id));
    events.into_iter().map(|(_, e, late)| (e, late)).collect()
}

/// Emits the alerts of both patterns.
#[derive(Clone)]
struct Alerts {
    late_delivery: bool,
    /// The pattern's `within`, in ms: an alert is due that long after its first event.
    within: i64,
}

impl PatternProcessFunction<u64, CourierEvent, Alert> for Alerts {
    fn process_match(
        &mut self,
        _: &u64,
        m: Match<CourierEvent>,
        ctx: &mut PatternContext<CourierEvent, Alert>,
    ) -> riffle::Result<()> {
        if self.late_delivery {
            return Ok(()); // delivered in time
        }
        // A match of the silence pattern: no ping in the minutes after this one.
        let ping = m.first("ping").expect("a match has its ping");
        ctx.emit(alert("courier_silent", ping, ping, self.within))
    }

    fn process_timed_out(
        &mut self,
        _: &u64,
        partial: Match<CourierEvent>,
        ctx: &mut PatternContext<CourierEvent, Alert>,
    ) -> riffle::Result<()> {
        if !self.late_delivery {
            return Ok(());
        }
        let placed = partial
            .first("placed")
            .expect("a partial match has its order");
        match partial.first("picked_up") {
            Some(picked) => ctx.emit(alert("late_delivery", picked, placed, self.within)),
            None => ctx.emit(alert("not_picked_up", placed, placed, self.within)),
        }
    }
}

/// An alert about `event`, due `within` after `start`.
fn alert(kind: &str, event: &CourierEvent, start: &CourierEvent, within: i64) -> Alert {
    Alert {
        alert: kind.to_string(),
        order_id: event.order_id,
        courier_id: event.courier_id,
        since: clock_time(event.event_time),
        at: clock_time(start.event_time + within),
    }
}

/// Operator names.
pub const LATE_DELIVERY: &str = "late delivery";
/// The silence pattern.
pub const COURIER_SILENT: &str = "courier silent";

/// The demo's job on `events`: both patterns, their alerts, and the late events aside.
pub fn pipeline(
    events: &DataStream<CourierEvent>,
    args: &CepArgs,
) -> (DataStream<Alert>, DataStream<CourierEvent>) {
    let by_order = events.key_by(|e| e.order_id);
    let late = OutputTag::<CourierEvent>::new("late-events");
    let promised = args.promised_minutes * 60;
    let deliveries = by_order
        .pattern(
            Pattern::begin("placed")
                .where_(|e: &CourierEvent| e.kind == Kind::Placed)
                .followed_by("picked_up")
                .where_(|e: &CourierEvent| e.kind == Kind::PickedUp)
                .followed_by("delivered")
                .where_(|e: &CourierEvent| e.kind == Kind::Delivered)
                .within(Duration::from_secs(promised)),
        )
        .side_output_late(&late)
        .process(Alerts {
            late_delivery: true,
            within: promised as i64 * 1000,
        })
        .name(LATE_DELIVERY)
        .uid("late-delivery");
    let silence = args.silence_minutes * 60;
    let silences = by_order
        .pattern(
            Pattern::begin("ping")
                .where_(|e: &CourierEvent| e.kind == Kind::Ping)
                .not_followed_by("next")
                .where_(|e: &CourierEvent| matches!(e.kind, Kind::Ping | Kind::Delivered))
                .within(Duration::from_secs(silence)),
        )
        .side_output_late(&late)
        .process(Alerts {
            late_delivery: false,
            within: silence as i64 * 1000,
        })
        .name(COURIER_SILENT)
        .uid("courier-silent");
    // The same late events as the other pattern's: written once.
    silences
        .get_side_output(&late)
        .sink(riffle::sink::BlackholeSink::new())
        .name("late events (written once)");
    (
        deliveries.union(&[&silences]),
        deliveries.get_side_output(&late),
    )
}

/// What a run found.
#[derive(Debug, Clone, PartialEq)]
pub struct CepSummary {
    /// Events read.
    pub events: u64,
    /// Late-delivery alerts.
    pub late_deliveries: u64,
    /// Courier-silent alerts.
    pub silences: u64,
    /// Events that arrived behind the watermark.
    pub late_events: u64,
    /// Where the output went.
    pub output: PathBuf,
}

/// Runs the demo with progress on the terminal and prints its summary.
pub fn run(args: &CepArgs) -> riffle::Result<CepSummary> {
    if args.promised_minutes == 0 || args.silence_minutes == 0 {
        return Err(riffle::Error::config(
            if args.promised_minutes == 0 {
                "--promised-minutes"
            } else {
                "--silence-minutes"
            },
            "must be at least 1",
        ));
    }
    let env = StreamEnv::with_config(args.engine.env_config("cep")?);
    let output = args.engine.output_dir("cep");
    let strategy = WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs_f64(
        args.out_of_orderness_secs.max(0.0),
    ))
    .with_timestamps(|e: &CourierEvent| e.event_time);
    let events = match &args.input {
        Some(path) => {
            let source = FileSource::<CourierEvent>::with_decoder(path, |line: &[u8]| {
                serde_json::from_slice(line)
            })
            .setting_name("--input")
            .bad_records(args.bad_records);
            env.from_source_with_watermarks(source, strategy)
        }
        None => {
            let events: Vec<CourierEvent> = generate(&args.courier_config())
                .into_iter()
                .map(|(e, _)| e)
                .collect();
            env.from_source_with_watermarks(CollectionSource::new(events), strategy)
        }
    }
    .uid("courier-events");
    let (alerts, late) = pipeline(&events, args);
    alerts
        .sink(args.engine.json_sink(&output.join("alerts"))?)
        .name("write alerts");
    late.sink(args.engine.json_sink(&output.join("late-events"))?)
        .name("write late events");
    let (result, _) = run_with_progress(&env, &args.engine.run_options()?, |report| {
        let read = report
            .snapshot
            .operator_total(LATE_DELIVERY)
            .map_or(0, |o| o.records_in);
        format!(
            "cep {:>5.1} s | events {} | alerts {}",
            report.elapsed.as_secs_f64(),
            human(read as f64),
            human(
                report
                    .snapshot
                    .operator_total("write alerts")
                    .map_or(0, |o| o.records_in) as f64
            )
        )
    })?;
    let summary = CepSummary {
        events: result.records_in(LATE_DELIVERY),
        late_deliveries: result.records_out(LATE_DELIVERY),
        silences: result.records_out(COURIER_SILENT),
        late_events: result.records_in("write late events"),
        output,
    };
    let seconds = result.duration.as_secs_f64();
    println!(
        "riffle demo cep: {} courier events in {seconds:.1} s ({} events/s); delivery promised within {} min of the order, alert after {} min without a ping",
        summary.events,
        human(summary.events as f64 / seconds),
        args.promised_minutes,
        args.silence_minutes
    );
    let dir = summary.output.display();
    println!(
        "  late deliveries  {:>9}  -> {dir}/alerts/ (placed, picked_up, delivered not complete in time: a timeout)",
        summary.late_deliveries
    );
    println!(
        "  couriers silent  {:>9}  -> {dir}/alerts/ (a ping not followed by another)",
        summary.silences
    );
    println!(
        "  late events      {:>9}  -> {dir}/late-events/ (behind the watermark when they arrived)",
        summary.late_events
    );
    if args.input.is_some() {
        let bad = result.bad_records();
        let to = if bad > 0 {
            format!("  -> {dir}/dead-letter/")
        } else {
            String::new()
        };
        println!("  bad records      {bad:>9}{to}");
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use riffle::EnvConfig;
    use riffle::sink::CollectSink;

    use super::*;

    fn args(orders: u64) -> CepArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: CepArgs,
        }
        let mut args = Wrapper::parse_from(["riffle"]).args;
        args.orders = orders;
        args
    }

    /// The alerts the generated events call for, worked out from the events themselves:
    /// (alert, order, due time).
    fn expected(
        args: &CepArgs,
        events: &[(CourierEvent, bool)],
    ) -> (Vec<(String, u64, i64)>, usize) {
        // Behind the watermark on arrival: the source's watermark follows every event.
        let bound = (args.out_of_orderness_secs * 1000.0) as i64;
        let mut max = i64::MIN;
        let mut on_time: BTreeMap<u64, Vec<CourierEvent>> = BTreeMap::new();
        let mut late = 0;
        for (e, _) in events {
            if max != i64::MIN && e.event_time < max - bound - 1 {
                late += 1;
            } else {
                on_time.entry(e.order_id).or_default().push(e.clone());
            }
            max = max.max(e.event_time);
        }
        let promised = args.promised_minutes as i64 * MINUTE;
        let silence = args.silence_minutes as i64 * MINUTE;
        let mut alerts = Vec::new();
        for (order, mut events) in on_time {
            events.sort_by_key(|e| e.event_time);
            for (i, e) in events.iter().enumerate() {
                let later = &events[i + 1..];
                match e.kind {
                    Kind::Placed => {
                        // The first pickup and the first delivery after it, within the promise.
                        let picked = later.iter().position(|p| p.kind == Kind::PickedUp);
                        let in_time = |x: &CourierEvent| x.event_time - e.event_time < promised;
                        let picked = picked.filter(|p| in_time(&later[*p]));
                        let delivered = picked.and_then(|p| {
                            later[p + 1..].iter().find(|d| d.kind == Kind::Delivered)
                        });
                        let due = e.event_time + promised;
                        match (picked, delivered.filter(|d| in_time(d))) {
                            (_, Some(_)) => {}
                            (Some(_), None) => alerts.push(("late_delivery".into(), order, due)),
                            (None, None) => alerts.push(("not_picked_up".into(), order, due)),
                        }
                    }
                    Kind::Ping => {
                        let next = later
                            .iter()
                            .find(|n| matches!(n.kind, Kind::Ping | Kind::Delivered));
                        if next.is_none_or(|n| n.event_time - e.event_time >= silence) {
                            alerts.push(("courier_silent".into(), order, e.event_time + silence));
                        }
                    }
                    _ => {}
                }
            }
        }
        alerts.sort();
        (alerts, late)
    }

    #[test]
    fn the_alerts_are_exactly_those_the_events_call_for() {
        let args = args(1_500);
        let events = generate(&args.courier_config());
        let (expected, expected_late) = expected(&args, &events);
        assert!(expected.iter().filter(|a| a.0 == "late_delivery").count() > 50);
        assert!(expected.iter().filter(|a| a.0 == "not_picked_up").count() > 5);
        assert!(expected.iter().filter(|a| a.0 == "courier_silent").count() > 20);
        assert!(expected_late > 10);
        let env = StreamEnv::with_config(EnvConfig::deterministic());
        let strategy = WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(60))
            .with_timestamps(|e: &CourierEvent| e.event_time);
        let stream = env.from_source_with_watermarks(
            CollectionSource::new(events.into_iter().map(|(e, _)| e).collect()),
            strategy,
        );
        let (alerts, late) = pipeline(&stream, &args);
        let (sink, got) = CollectSink::new();
        alerts.sink(sink);
        let (late_sink, late_got) = CollectSink::new();
        late.sink(late_sink);
        env.execute().unwrap();
        let mut got: Vec<(String, u64, i64)> = got
            .records()
            .into_iter()
            .map(|r| {
                (
                    r.value.alert.clone(),
                    r.value.order_id,
                    r.timestamp().unwrap(),
                )
            })
            .collect();
        got.sort();
        assert_eq!(got.len(), expected.len());
        assert_eq!(got, expected);
        assert_eq!(late_got.len(), expected_late);
    }
}
