//! [`NexmarkSource`]: the Nexmark generator (the `nexmark` crate, RisingWave's port of the
//! Beam/Flink generator) as a Riffle source.
//!
//! Events are numbered 0, 1, 2, ...; event number `n` is a pure function of the configuration
//! and `n` (its type from `n mod 50`: 1 person, 3 auctions, 46 bids; its time from the base time
//! and the inter-event delay; its ids and fields from a generator seeded by `n`), so the stream
//! is the same on every run: the base time is fixed by the configuration, never read from the
//! clock. Split `i` of `s` produces the events `i, i + s, i + 2s, ...` (its position is the
//! next event number, so a checkpoint replays it exactly), and the union of the splits is the
//! same stream whatever the number of splits or the parallelism.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use nexmark::EventGenerator;
use riffle::source::{Boundedness, ReadStatus, Source, SourceOutput, SplitReader};
use riffle::time::WatermarkStrategy;
use riffle::{DataStream, Error, Result, StreamEnv, Timestamp};

use crate::event::Event;

/// 2026-01-15 00:00:00 UTC: the default time of event 0.
pub const DEFAULT_BASE_TIME: Timestamp = 1_768_435_200_000;

/// Events per second of event time in the nexmark project's benchmark suite (its `tps`).
pub const DEFAULT_EVENTS_PER_SECOND: f64 = 10_000_000.0;

/// The US states a person lives in, as the nexmark project's Java generator writes them
/// (`PersonGenerator.US_STATES`, `"AZ,CA,ID,OR,WA,WY"`). The `nexmark` crate writes the same
/// states in lower case (`"az,ca,id,or,wa,wy"`), which q3's case-sensitive
/// `P.state = 'OR'` never matches; they are in the same order, so a person gets the same state
/// either way (and the same other fields: the lengths are equal).
pub const US_STATES: [&str; 6] = ["AZ", "CA", "ID", "OR", "WA", "WY"];

/// What the generator produces and how fast.
#[derive(Clone, Debug, PartialEq)]
pub struct NexmarkConfig {
    /// Events in all (persons, auctions and bids); `None` generates until the job is stopped.
    pub events: Option<u64>,
    /// Events per second of *event time*: the inter-event delay is its inverse (default 10M/s,
    /// the nexmark project's suite). Independent of how fast the events are produced.
    pub events_per_second: f64,
    /// Time of event 0, epoch ms (default [`DEFAULT_BASE_TIME`]).
    pub base_time: Timestamp,
    /// Events are shuffled within groups of this many consecutive event numbers (1: in order).
    /// The disorder in event time is then below `group / events_per_second` seconds.
    pub out_of_order_group_size: usize,
    /// Bound of the watermark strategy (default 4 s, the nexmark project's
    /// `WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND`).
    pub max_out_of_orderness: Duration,
    /// Number of splits (default: the source's parallelism). A checkpoint stores each split's
    /// next event number, which belongs to one split count: fix this to restore a job at
    /// another parallelism (a position of another split count is refused, naming the split).
    pub splits: Option<usize>,
    /// Produce at most this many events per second of wall-clock time, over all splits.
    pub rate: Option<f64>,
}

impl Default for NexmarkConfig {
    fn default() -> Self {
        NexmarkConfig {
            events: None,
            events_per_second: DEFAULT_EVENTS_PER_SECOND,
            base_time: DEFAULT_BASE_TIME,
            out_of_order_group_size: 1,
            max_out_of_orderness: Duration::from_secs(4),
            splits: None,
            rate: None,
        }
    }
}

impl NexmarkConfig {
    /// Checks the values; the error names the field.
    pub fn validate(&self) -> Result<()> {
        if !(self.events_per_second > 0.0 && self.events_per_second <= 1e12) {
            return Err(Error::config(
                "events_per_second",
                format!(
                    "must be a positive number of events per second of event time (at most 1e12), got {}",
                    self.events_per_second
                ),
            ));
        }
        if self.out_of_order_group_size == 0 {
            return Err(Error::config(
                "out_of_order_group_size",
                "must be at least 1",
            ));
        }
        if self.splits == Some(0) {
            return Err(Error::config("splits", "must be at least 1"));
        }
        if let Some(rate) = self.rate
            && !(rate > 0.0 && rate.is_finite())
        {
            return Err(Error::config(
                "rate",
                format!("must be a positive number of events per second, got {rate}"),
            ));
        }
        if self.base_time < 0 {
            return Err(Error::config("base_time", "must not be before 1970"));
        }
        Ok(())
    }

    /// The `nexmark` crate's configuration: its defaults (ratios, active people, in-flight
    /// auctions, sizes) with this base time, rate and disorder, one event numbering, and the
    /// Java generator's upper-case [`US_STATES`].
    pub fn generator_config(&self) -> nexmark::config::NexmarkConfig {
        // The crate's inter-event delay is `us_per_unit / rate` microseconds.
        let rate = 1_000_000usize;
        let us_per_unit = (1e12 / self.events_per_second).round().max(1.0) as usize;
        nexmark::config::NexmarkConfig {
            base_time: self.base_time as u64,
            first_rate: rate,
            next_rate: rate,
            us_per_unit,
            out_of_order_group_size: self.out_of_order_group_size,
            num_event_generators: 1,
            us_states: US_STATES.iter().map(|s| s.to_string()).collect(),
            ..nexmark::config::NexmarkConfig::default()
        }
    }

    /// Every event of a bounded configuration, in event-number order, computed directly with
    /// the generator (no job): what tests compare a job's output against.
    pub fn generate_all(&self) -> Vec<Event> {
        self.iter().collect()
    }

    /// The events of a bounded configuration in event-number order (none if unbounded), one at
    /// a time: what `riffle nexmark generate` writes.
    pub fn iter(&self) -> impl Iterator<Item = Event> + use<> {
        let count = self.events.unwrap_or(0) as usize;
        EventGenerator::new(self.generator_config())
            .take(count)
            .map(Event::from)
    }
}

/// The Nexmark events as a source, with event time = the event's `dateTime`.
///
/// ```
/// use riffle::{StreamEnv, sink::CollectSink};
/// use riffle_nexmark::{NexmarkConfig, NexmarkSource};
///
/// let env = StreamEnv::new();
/// let (sink, out) = CollectSink::new();
/// let config = NexmarkConfig { events: Some(100), ..NexmarkConfig::default() };
/// NexmarkSource::new(config.clone()).stream(&env).sink(sink);
/// env.execute().unwrap();
/// assert_eq!(out.len(), 100);
/// ```
pub struct NexmarkSource {
    config: NexmarkConfig,
    prototype: EventGenerator,
    /// When the current run's pacing schedule started, shared by the splits.
    origin: Mutex<Arc<OnceLock<Instant>>>,
    /// Splits of the current run (fixed by the config, or the parallelism).
    splits: Mutex<usize>,
}

impl NexmarkSource {
    /// A source generating what `config` says (checked when the job starts).
    pub fn new(config: NexmarkConfig) -> Self {
        let prototype = EventGenerator::new(config.generator_config());
        NexmarkSource {
            config,
            prototype,
            origin: Mutex::default(),
            splits: Mutex::new(1),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &NexmarkConfig {
        &self.config
    }

    /// The watermark strategy of the nexmark project's tables: bounded out-of-orderness
    /// (`config.max_out_of_orderness`), event time from the source. Generated times are
    /// synthetic, so they are not compared with the wall clock (no future-skew quarantine, no
    /// outlier rule).
    pub fn watermarks(&self) -> WatermarkStrategy<Event> {
        WatermarkStrategy::bounded_out_of_orderness(self.config.max_out_of_orderness)
            .with_max_future_skew(None)
            .with_max_watermark_jump(None)
    }

    /// The events as a stream of `env`, with this source's watermarks.
    pub fn stream(self, env: &StreamEnv) -> DataStream<Event> {
        let strategy = self.watermarks();
        env.from_source_with_watermarks(self, strategy)
            .uid("nexmark-source")
    }
}

impl Source<Event> for NexmarkSource {
    type Split = usize;

    fn name(&self) -> String {
        "nexmark".into()
    }

    fn boundedness(&self) -> Boundedness {
        if self.config.events.is_some() {
            Boundedness::Bounded
        } else {
            Boundedness::Unbounded
        }
    }

    fn validate(&self) -> Result<()> {
        self.config.validate()
    }

    fn bad_record_policy(&self) -> riffle::source::BadRecordPolicy {
        // Generated events always decode.
        riffle::source::BadRecordPolicy::Fail
    }

    fn splits(&self, parallelism: usize) -> Result<Vec<usize>> {
        let splits = self.config.splits.unwrap_or(parallelism).max(1);
        *self.splits.lock().expect("splits lock") = splits;
        *self.origin.lock().expect("origin lock") = Arc::default();
        Ok((0..splits).collect())
    }

    fn reader(&self, split: usize) -> Result<Box<dyn SplitReader<Event>>> {
        Ok(Box::new(self.split_reader(split)))
    }
}

impl NexmarkSource {
    fn split_reader(&self, split: usize) -> NexmarkReader {
        let splits = *self.splits.lock().expect("splits lock") as u64;
        let split = split as u64;
        NexmarkReader {
            generator: self.prototype.clone().with_offset(split).with_step(splits),
            prototype: self.prototype.clone(),
            split,
            splits,
            end: self.config.events,
            rate: self.config.rate.map(|r| r / splits as f64),
            origin: self.origin.lock().expect("origin lock").clone(),
            paced_from: None,
        }
    }
}

struct NexmarkReader {
    /// Its offset is the next event number this split produces: the position.
    generator: EventGenerator,
    prototype: EventGenerator,
    split: u64,
    splits: u64,
    /// Event numbers from this one on are not produced.
    end: Option<u64>,
    rate: Option<f64>,
    origin: Arc<OnceLock<Instant>>,
    paced_from: Option<(Instant, u64)>,
}

impl NexmarkReader {
    /// Generates the next `n` events of the split.
    fn fill(&mut self, n: u64, mut emit: impl FnMut(Event, Timestamp)) {
        for _ in 0..n {
            let event = Event::from(self.generator.next().expect("the generator never ends"));
            let timestamp = event.date_time();
            emit(event, timestamp);
        }
    }

    /// Events left in a bounded split.
    fn left(&self) -> u64 {
        match self.end {
            Some(end) if self.generator.offset() < end => {
                (end - self.generator.offset()).div_ceil(self.splits)
            }
            Some(_) => 0,
            None => u64::MAX,
        }
    }

    /// Events this split produced so far.
    fn produced(&self) -> u64 {
        (self.generator.offset() - self.split) / self.splits
    }
}

impl SplitReader<Event> for NexmarkReader {
    fn split_id(&self) -> String {
        format!("nexmark-{}", self.split)
    }

    fn read(&mut self, out: &mut SourceOutput<Event>, max: usize) -> Result<ReadStatus> {
        let remaining = self.left();
        if remaining == 0 {
            return Ok(ReadStatus::Finished);
        }
        let mut n = remaining.min(max as u64);
        if let Some(rate) = self.rate {
            let produced = self.produced();
            let origin = *self.origin.get_or_init(Instant::now);
            let (since, base) = *self.paced_from.get_or_insert((origin, produced));
            let due = base + (since.elapsed().as_secs_f64() * rate) as u64;
            n = n.min(due.saturating_sub(produced));
            if n == 0 {
                let next = since + Duration::from_secs_f64((produced + 1 - base) as f64 / rate);
                return Ok(ReadStatus::Pending(Some(next)));
            }
        }
        self.fill(n, |event, timestamp| {
            out.emit_with_timestamp(event, timestamp)
        });
        Ok(match self.end {
            Some(end) if self.generator.offset() >= end => ReadStatus::Finished,
            _ => ReadStatus::Ready,
        })
    }

    fn position(&self) -> serde_json::Value {
        serde_json::json!(self.generator.offset())
    }

    fn seek(&mut self, position: &serde_json::Value) -> Result<()> {
        let offset = position
            .as_u64()
            .filter(|o| *o >= self.split && (o - self.split).is_multiple_of(self.splits))
            .ok_or_else(|| {
                Error::user(format!(
                    "bad nexmark position {position} for split {} of {}",
                    self.split, self.splits
                ))
            })?;
        self.generator = self
            .prototype
            .clone()
            .with_offset(offset)
            .with_step(self.splits);
        self.paced_from = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(events: u64) -> NexmarkConfig {
        NexmarkConfig {
            events: Some(events),
            events_per_second: 1_000.0,
            out_of_order_group_size: 100,
            ..NexmarkConfig::default()
        }
    }

    fn take(reader: &mut NexmarkReader, max: u64) -> Vec<(Event, Timestamp)> {
        let mut all = Vec::new();
        let n = reader.left().min(max);
        reader.fill(n, |e, t| all.push((e, t)));
        all
    }

    fn read_split(source: &NexmarkSource, split: usize) -> Vec<(Event, Timestamp)> {
        take(&mut source.split_reader(split), u64::MAX)
    }

    #[test]
    fn the_same_events_come_out_for_any_number_of_splits() {
        let config = small(1_001);
        let expected = config.generate_all();
        assert_eq!(expected.len(), 1_001);
        for splits in [1, 2, 3, 8] {
            let source = NexmarkSource::new(config.clone());
            let mut all: Vec<Event> = Vec::new();
            for split in source.splits(splits).unwrap() {
                let events = read_split(&source, split);
                assert!(events.iter().all(|(e, t)| e.date_time() == *t));
                all.extend(events.into_iter().map(|(e, _)| e));
            }
            let mut sorted = all.clone();
            sorted.sort_by_key(|e| serde_json::to_string(e).unwrap());
            let mut want = expected.clone();
            want.sort_by_key(|e| serde_json::to_string(e).unwrap());
            assert_eq!(sorted, want, "{splits} splits");
        }
    }

    #[test]
    fn events_follow_the_model_and_are_fixed_by_the_configuration() {
        let config = small(5_000);
        let events = config.generate_all();
        assert_eq!(events, config.generate_all(), "no clock in the events");
        let count = |name: &str| events.iter().filter(|e| e.type_name() == name).count();
        assert_eq!(
            (count("person"), count("auction"), count("bid")),
            (100, 300, 4_600)
        );
        // Out of order within groups of 100 events (100 ms at 1000 events/s), never more.
        let times: Vec<Timestamp> = events.iter().map(Event::date_time).collect();
        assert!(times.windows(2).any(|w| w[1] < w[0]), "some disorder");
        let mut max = Timestamp::MIN;
        for t in &times {
            assert!(*t > max.saturating_sub(100), "disorder within a group");
            max = max.max(*t);
        }
        assert_eq!(times.iter().min(), Some(&DEFAULT_BASE_TIME));
        assert!(*times.iter().max().unwrap() < DEFAULT_BASE_TIME + 5_000);
    }

    #[test]
    fn states_are_upper_case_as_the_java_generator_writes_them() {
        let config = small(5_000);
        let ours = config.generate_all();
        let states: std::collections::BTreeSet<&str> = ours
            .iter()
            .filter_map(|e| match e {
                Event::Person(p) => Some(p.state.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(states.into_iter().collect::<Vec<_>>(), US_STATES);
        // Only the case differs from the crate's own states: every other field of every event
        // is the same.
        let crate_states = nexmark::config::NexmarkConfig {
            us_states: nexmark::config::NexmarkConfig::default().us_states,
            ..config.generator_config()
        };
        let theirs: Vec<Event> = EventGenerator::new(crate_states)
            .take(5_000)
            .map(Event::from)
            .collect();
        assert_eq!(theirs.len(), ours.len());
        for (ours, mut theirs) in ours.into_iter().zip(theirs) {
            if let (Event::Person(o), Event::Person(t)) = (&ours, &mut theirs) {
                assert_eq!(t.state, o.state.to_lowercase());
                t.state = o.state.clone();
            }
            assert_eq!(theirs, ours);
        }
    }

    #[test]
    fn a_reader_resumes_from_its_position() {
        let source = NexmarkSource::new(small(300));
        source.splits(2).unwrap();
        let whole = read_split(&source, 1);
        assert_eq!(whole.len(), 150);
        let mut reader = source.split_reader(1);
        take(&mut reader, 40);
        let position = reader.position();
        assert_eq!(position, serde_json::json!(81));
        let mut replay = source.split_reader(1);
        replay.seek(&position).unwrap();
        let rest: Vec<Event> = take(&mut replay, 1_000)
            .into_iter()
            .map(|(e, _)| e)
            .collect();
        assert_eq!(replay.left(), 0);
        let want: Vec<Event> = whole.into_iter().skip(40).map(|(e, _)| e).collect();
        assert_eq!(rest, want);
        assert!(
            replay.seek(&serde_json::json!(80)).is_err(),
            "split 0's offset"
        );
    }

    #[test]
    fn bad_settings_are_refused_by_name() {
        let bad = NexmarkConfig {
            events_per_second: 0.0,
            ..NexmarkConfig::default()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("events_per_second")
        );
        let bad = NexmarkConfig {
            out_of_order_group_size: 0,
            ..NexmarkConfig::default()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("out_of_order_group_size")
        );
    }
}
