//! Data generators: deterministic, replayable synthetic streams (record `i` is a function of
//! `i`, so a source splits and rewinds exactly). The seed's click stream is built on it in the
//! `riffle-clicks` crate.
//!
//! Record `i` of a generated stream is a pure function of the generator's seed and of `i`, so a
//! split's position (how many records it produced) is all a checkpoint needs to replay it, and the
//! same configuration always yields the same records whatever the parallelism or the pace.
//! Split `s` of `S` produces the records `s, s + S, s + 2S, ...`.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::record::Data;
use crate::source::{Boundedness, ReadStatus, Source, SourceOutput, SplitReader};

/// A deterministic function from a record index to a record.
pub trait Generator: Send + Sync + 'static {
    /// The generated record type.
    type Item: Data;
    /// Record number `index`.
    fn generate(&self, index: u64) -> Self::Item;
    /// A name for the source operator.
    fn name(&self) -> String {
        "datagen".into()
    }
}

/// The monotonic clock a paced source follows: the real one, or a [`ManualPaceClock`] in tests.
pub trait PaceClock: Send + Sync + Debug + 'static {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The real monotonic clock ([`Instant::now`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemPaceClock;

impl PaceClock for SystemPaceClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A monotonic clock that moves only when told to: tests of pacing.
///
/// ```
/// use std::time::Duration;
/// use riffle::source::datagen::{ManualPaceClock, PaceClock};
/// let clock = ManualPaceClock::new();
/// let start = clock.now();
/// clock.advance(Duration::from_micros(250));
/// assert_eq!(clock.now() - start, Duration::from_micros(250));
/// ```
#[derive(Debug)]
pub struct ManualPaceClock {
    start: Instant,
    offset_ns: AtomicU64,
}

impl ManualPaceClock {
    /// A clock standing at the instant it was made.
    pub fn new() -> Self {
        ManualPaceClock {
            start: Instant::now(),
            offset_ns: AtomicU64::new(0),
        }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        self.offset_ns
            .fetch_add(by.as_nanos() as u64, Ordering::SeqCst);
    }
}

impl Default for ManualPaceClock {
    fn default() -> Self {
        ManualPaceClock::new()
    }
}

impl PaceClock for ManualPaceClock {
    fn now(&self) -> Instant {
        self.start + Duration::from_nanos(self.offset_ns.load(Ordering::SeqCst))
    }
}

/// The one schedule of a paced source: record `i` of the stream (over all splits, see the module
/// docs) is due `i / rate` seconds after the schedule starts, and no split emits a record before
/// its due time.
///
/// The schedule starts at the first read of a run, by whichever split reads first, on the
/// schedule's clock; every split follows the same start. A run restored from a checkpoint
/// continues the schedule where the checkpoint left it: the run starts at the round of records
/// the first reading split is in (round `r` holds the records `r * S .. (r + 1) * S` of `S`
/// splits), so the source does not wait for the time the first run already spent.
///
/// Clone the handle to see the schedule from outside the job: a benchmark stamps its records with
/// [`Timetable::due_at`] of the same schedule the source follows, so that the latency it measures
/// and the source's pace come from one clock. A schedule paces one source: a second source given
/// the same schedule would restart it.
///
/// ```
/// use riffle::source::datagen::{DatagenSource, Schedule};
/// use riffle::source::function::FnGenerator;
/// let schedule = Schedule::new(500_000.0);
/// let source = DatagenSource::new(FnGenerator::new(|i| i)).paced_by(schedule.clone());
/// assert!(schedule.timetable().is_none(), "a schedule starts at the first read");
/// ```
#[derive(Clone, Debug)]
pub struct Schedule {
    rate: f64,
    clock: Arc<dyn PaceClock>,
    /// The current run's start, set by the first read of the run.
    run: Arc<Mutex<Arc<OnceLock<Timetable>>>>,
}

impl Schedule {
    /// `events_per_second` over all the splits, on the real monotonic clock.
    pub fn new(events_per_second: f64) -> Self {
        Schedule::with_clock(events_per_second, Arc::new(SystemPaceClock))
    }

    /// `events_per_second` on `clock`.
    pub fn with_clock(events_per_second: f64, clock: Arc<dyn PaceClock>) -> Self {
        Schedule {
            rate: events_per_second,
            clock,
            run: Arc::default(),
        }
    }

    /// Records per second over all splits.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The schedule's clock, now.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// The current run's timetable; `None` until the run's first read.
    pub fn timetable(&self) -> Option<Timetable> {
        self.current().get().copied()
    }

    fn current(&self) -> Arc<OnceLock<Timetable>> {
        self.run.lock().expect("schedule lock").clone()
    }

    /// A new run starts a new schedule.
    fn restart(&self) {
        *self.run.lock().expect("schedule lock") = Arc::default();
    }
}

/// When each record of one run of a paced source is due (see [`Schedule`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timetable {
    /// When the run's first round of records was due.
    started: Instant,
    /// The schedule offset of that first round (zero unless the run was restored).
    skipped: Duration,
    /// Records per second over all splits, as bits (`f64` is not `Eq`).
    rate_bits: u64,
}

impl Timetable {
    fn new(started: Instant, skipped: Duration, rate: f64) -> Self {
        Timetable {
            started,
            skipped,
            rate_bits: rate.to_bits(),
        }
    }

    /// When the run's schedule started (its first read).
    pub fn started(&self) -> Instant {
        self.started
    }

    /// When record `index` (of the whole stream) is due. Records before the run's first round
    /// (already produced by an earlier run) are due at its start.
    pub fn due_at(&self, index: u64) -> Instant {
        self.started + offset(index, self.rate()).saturating_sub(self.skipped)
    }

    fn rate(&self) -> f64 {
        f64::from_bits(self.rate_bits)
    }

    /// The largest index due at `now`: every record up to it may be emitted.
    fn last_due(&self, now: Instant) -> Option<u64> {
        if now < self.started {
            return None;
        }
        let t = now.duration_since(self.started) + self.skipped;
        let rate = self.rate();
        // A float estimate, corrected with the very function `due_at` uses, so that the two never
        // disagree by a rounding.
        let mut index = (t.as_secs_f64() * rate) as u64;
        while index > 0 && offset(index, rate) > t {
            index -= 1;
        }
        while index < u64::MAX && offset(index + 1, rate) <= t {
            index += 1;
        }
        Some(index)
    }
}

/// How long after the schedule's origin record `index` is due.
fn offset(index: u64, rate: f64) -> Duration {
    Duration::try_from_secs_f64(index as f64 / rate).unwrap_or(Duration::MAX)
}

/// A source of generated records: bounded by a count or unbounded, unlimited or paced.
///
/// ```
/// use riffle::source::datagen::{DatagenSource, mix};
/// use riffle::source::function::FnGenerator;
/// let source = DatagenSource::new(FnGenerator::new(|i| mix(42, i, 0) % 100)).count(1_000).rate(10_000.0);
/// ```
pub struct DatagenSource<G> {
    generator: Arc<G>,
    count: Option<u64>,
    schedule: Option<Schedule>,
    splits: usize,
}

impl<G: Generator> DatagenSource<G> {
    /// An unbounded, unpaced source over `generator`, with 8 splits (the seed's 8 partitions).
    pub fn new(generator: G) -> Self {
        DatagenSource {
            generator: Arc::new(generator),
            count: None,
            schedule: None,
            splits: 8,
        }
    }

    /// Stops after `count` records in total (a bounded source).
    pub fn count(mut self, count: u64) -> Self {
        self.count = Some(count);
        self
    }

    /// Sets the total number of records, `None` for an unbounded source.
    pub fn limit(mut self, count: Option<u64>) -> Self {
        self.count = count;
        self
    }

    /// Paces the source to `events_per_second` in total (over all splits), on the real clock.
    pub fn rate(self, events_per_second: f64) -> Self {
        self.paced_by(Schedule::new(events_per_second))
    }

    /// Sets the pace, `None` for as fast as possible.
    pub fn pace(mut self, events_per_second: Option<f64>) -> Self {
        self.schedule = events_per_second.map(Schedule::new);
        self
    }

    /// Paces the source by `schedule` (keep a clone to see when each record is due).
    pub fn paced_by(mut self, schedule: Schedule) -> Self {
        self.schedule = Some(schedule);
        self
    }

    /// The schedule the source follows, if paced.
    pub fn schedule(&self) -> Option<&Schedule> {
        self.schedule.as_ref()
    }

    /// Number of splits (parallel generator streams).
    pub fn splits(mut self, splits: usize) -> Self {
        self.splits = splits;
        self
    }

    /// The generator.
    pub fn generator(&self) -> &G {
        &self.generator
    }
}

impl<G: Generator> Source<G::Item> for DatagenSource<G> {
    type Split = usize;

    fn name(&self) -> String {
        self.generator.name()
    }

    fn boundedness(&self) -> Boundedness {
        if self.count.is_some() {
            Boundedness::Bounded
        } else {
            Boundedness::Unbounded
        }
    }

    fn validate(&self) -> Result<()> {
        if self.splits == 0 {
            return Err(Error::config("datagen splits", "must be at least 1"));
        }
        if let Some(rate) = self.schedule.as_ref().map(Schedule::rate)
            && !(rate > 0.0 && rate.is_finite())
        {
            return Err(Error::config(
                "rate",
                format!("must be a positive number of events per second, got {rate}"),
            ));
        }
        Ok(())
    }

    fn bad_record_policy(&self) -> crate::source::BadRecordPolicy {
        // Generated records are never undecodable.
        crate::source::BadRecordPolicy::Fail
    }

    fn splits(&self, _parallelism: usize) -> Result<Vec<usize>> {
        // Called once per run of the job: a new run starts a new schedule.
        if let Some(schedule) = &self.schedule {
            schedule.restart();
        }
        Ok((0..self.splits).collect())
    }

    fn reader(&self, split: usize) -> Result<Box<dyn SplitReader<G::Item>>> {
        let splits = self.splits as u64;
        let split_u64 = split as u64;
        let total = self.count.map(|count| {
            if count > split_u64 {
                (count - split_u64).div_ceil(splits)
            } else {
                0
            }
        });
        Ok(Box::new(DatagenReader {
            generator: self.generator.clone(),
            split: split_u64,
            splits,
            produced: 0,
            total,
            pacing: self.schedule.as_ref().map(|schedule| Pacing {
                schedule: schedule.clone(),
                run: schedule.current(),
            }),
        }))
    }
}

/// The schedule a reader follows, and the run it belongs to.
struct Pacing {
    schedule: Schedule,
    run: Arc<OnceLock<Timetable>>,
}

struct DatagenReader<G> {
    generator: Arc<G>,
    split: u64,
    splits: u64,
    /// Records produced by this split so far: its position.
    produced: u64,
    /// Records this split produces in all, if bounded.
    total: Option<u64>,
    /// The source's schedule, if paced.
    pacing: Option<Pacing>,
}

impl<G> DatagenReader<G> {
    /// The index in the whole stream of this split's record number `n`.
    fn index_of(&self, n: u64) -> u64 {
        self.split + n * self.splits
    }
}

impl<G: Generator> SplitReader<G::Item> for DatagenReader<G> {
    fn split_id(&self) -> String {
        format!("datagen-{}", self.split)
    }

    fn read(&mut self, out: &mut SourceOutput<G::Item>, max: usize) -> Result<ReadStatus> {
        let remaining = self
            .total
            .map_or(u64::MAX, |t| t.saturating_sub(self.produced));
        if remaining == 0 {
            return Ok(ReadStatus::Finished);
        }
        let mut n = remaining.min(max as u64);
        if let Some(pacing) = &self.pacing {
            let now = pacing.schedule.now();
            // The first read of the run starts the schedule for every split, at the round this
            // split is in (round r holds the records r * splits .. (r + 1) * splits).
            let round = self.produced.saturating_mul(self.splits);
            let timetable = *pacing.run.get_or_init(|| {
                Timetable::new(
                    now,
                    offset(round, pacing.schedule.rate),
                    pacing.schedule.rate,
                )
            });
            let next = self.index_of(self.produced);
            let due = match timetable.last_due(now) {
                Some(last) if last >= next => (last - self.split) / self.splits + 1 - self.produced,
                _ => 0,
            };
            n = n.min(due);
            if n == 0 {
                return Ok(ReadStatus::Pending(Some(timetable.due_at(next))));
            }
        }
        for _ in 0..n {
            out.emit(self.generator.generate(self.index_of(self.produced)));
            self.produced += 1;
        }
        Ok(if self.total == Some(self.produced) {
            ReadStatus::Finished
        } else {
            ReadStatus::Ready
        })
    }

    fn position(&self) -> serde_json::Value {
        serde_json::json!(self.produced)
    }

    fn seek(&mut self, position: &serde_json::Value) -> Result<()> {
        self.produced = position
            .as_u64()
            .ok_or_else(|| Error::user(format!("bad datagen position {position}")))?;
        Ok(())
    }
}

/// SplitMix64: a well-mixed 64-bit value for each (seed, index, stream) triple, for
/// generators that draw record `index` independently of the others (deterministic, splittable).
///
/// ```
/// use riffle::source::datagen::{mix, unit};
/// assert_eq!(mix(1, 2, 3), mix(1, 2, 3));
/// assert!((0.0..1.0).contains(&unit(mix(1, 2, 3))));
/// ```
pub fn mix(seed: u64, index: u64, stream: u64) -> u64 {
    let mut z = seed
        ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform value in `[0, 1)`.
pub fn unit(bits: u64) -> f64 {
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// Wraps a generator so that it emits its records as JSON strings (the raw payloads a Kafka
/// topic would hold).
#[derive(Clone, Debug)]
pub struct JsonPayloads<G>(pub G);

impl<G: Generator> Generator for JsonPayloads<G>
where
    G::Item: Serialize,
{
    type Item = String;

    fn generate(&self, index: u64) -> String {
        serde_json::to_string(&self.0.generate(index)).expect("generated records serialize")
    }

    fn name(&self) -> String {
        format!("{}-json", self.0.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Record `i` is `(i, a value mixed from i)`.
    struct Pairs;

    impl Generator for Pairs {
        type Item = (u64, u64);
        fn generate(&self, index: u64) -> (u64, u64) {
            (index, mix(7, index, 1) % 1000)
        }
    }

    fn read_all<T>(source: &impl Source<T>, parallelism: usize) -> Vec<T>
    where
        T: Data,
    {
        let mut all = Vec::new();
        for split in source.splits(parallelism).unwrap() {
            let mut reader = source.reader(split).unwrap();
            let mut out = SourceOutput::with_capacity(100);
            while reader.read(&mut out, 100).unwrap() != ReadStatus::Finished {}
            all.extend(out.records.drain(..).map(|r| r.value));
        }
        all
    }

    #[test]
    fn the_union_of_splits_is_the_same_stream_for_any_split_count() {
        let mut a = read_all(&DatagenSource::new(Pairs).count(1001).splits(3), 2);
        let mut b = read_all(&DatagenSource::new(Pairs).count(1001).splits(8), 4);
        let mut expected: Vec<(u64, u64)> = (0..1001).map(|i| Pairs.generate(i)).collect();
        for v in [&mut a, &mut b, &mut expected] {
            v.sort();
        }
        assert_eq!(a, expected);
        assert_eq!(b, expected);
    }

    #[test]
    fn a_reader_resumes_from_its_position() {
        let source = DatagenSource::new(Pairs).count(100).splits(1);
        let mut reader = source.reader(0).unwrap();
        let mut out = SourceOutput::with_capacity(10);
        reader.read(&mut out, 30).unwrap();
        let position = reader.position();
        let rest_a: Vec<(u64, u64)> = {
            let mut out = SourceOutput::with_capacity(100);
            reader.read(&mut out, 100).unwrap();
            out.records.into_iter().map(|r| r.value).collect()
        };
        let mut replay = source.reader(0).unwrap();
        replay.seek(&position).unwrap();
        let mut out = SourceOutput::with_capacity(100);
        assert_eq!(replay.read(&mut out, 100).unwrap(), ReadStatus::Finished);
        let rest_b: Vec<(u64, u64)> = out.records.into_iter().map(|r| r.value).collect();
        assert_eq!(rest_a.len(), 70);
        assert_eq!(rest_a, rest_b);
    }

    #[test]
    fn pacing_holds_records_back_until_they_are_due() {
        // On the real clock; the manual-clock tests below pin the schedule exactly.
        let source = DatagenSource::new(JsonPayloads(Pairs))
            .rate(100.0)
            .splits(1);
        Source::splits(&source, 1).unwrap();
        let mut reader = source.reader(0).unwrap();
        let mut out = SourceOutput::with_capacity(20);
        assert_eq!(reader.read(&mut out, 10).unwrap(), ReadStatus::Ready);
        assert_eq!(out.len(), 1, "record 0 is due when the schedule starts");
        let started = source.schedule().unwrap().timetable().unwrap().started();
        std::thread::sleep(Duration::from_millis(55));
        let before = started.elapsed();
        reader.read(&mut out, 10).unwrap();
        let after = started.elapsed();
        // At 100/s record i is due at i * 10 ms: the read emits those due when it looked at the
        // clock (at most 10 more), none later.
        let due = |t: Duration| (1 + t.as_millis() as usize / 10).min(11);
        assert!(
            (due(before)..=due(after)).contains(&out.len()),
            "{} records after {before:?}..{after:?} at 100/s",
            out.len()
        );
        let first: (u64, u64) = serde_json::from_str(&out.records[0].value).unwrap();
        assert_eq!(first, Pairs.generate(0), "records come in order, as JSON");
    }

    /// Stamps each record with its index, the instant it was generated (emitted) and the
    /// instant the schedule says it is due, read from the same schedule.
    struct Stamps {
        schedule: Schedule,
    }

    impl Generator for Stamps {
        type Item = (u64, i64);
        fn generate(&self, index: u64) -> (u64, i64) {
            let timetable = self.schedule.timetable().expect("started before emitting");
            let now = self.schedule.now();
            let due = timetable.due_at(index);
            // Signed nanoseconds from due time to emission: negative would be early.
            let lag = if now >= due {
                (now - due).as_nanos() as i64
            } else {
                -((due - now).as_nanos() as i64)
            };
            (index, lag)
        }
    }

    /// Reads until the reader has nothing due (or is finished): the records and the final status.
    fn read_indices(
        reader: &mut Box<dyn SplitReader<(u64, i64)>>,
    ) -> (Vec<(u64, i64)>, ReadStatus) {
        let mut out = SourceOutput::with_capacity(100);
        loop {
            let status = reader.read(&mut out, 100).unwrap();
            if status != ReadStatus::Ready {
                return (out.records.into_iter().map(|r| r.value).collect(), status);
            }
        }
    }

    #[test]
    fn splits_follow_one_schedule_and_never_emit_before_the_due_time() {
        let clock = Arc::new(ManualPaceClock::new());
        // 1 000 records per second: record i is due i ms after the start.
        let schedule = Schedule::with_clock(1_000.0, clock.clone());
        let source = DatagenSource::new(Stamps {
            schedule: schedule.clone(),
        })
        .paced_by(schedule.clone())
        .splits(2);
        Source::splits(&source, 2).unwrap();
        let mut even = source.reader(0).unwrap();
        let mut odd = source.reader(1).unwrap();
        assert_eq!(schedule.timetable(), None, "nothing read yet");
        let start = clock.now();

        // The first read starts the schedule: record 0 is due now, record 1 in 1 ms.
        assert_eq!(
            read_indices(&mut even),
            (vec![(0, 0)], ReadStatus::Pending(Some(start + ms(2))))
        );
        let timetable = schedule.timetable().expect("started");
        assert_eq!(timetable.started(), start);
        assert_eq!(
            read_indices(&mut odd),
            (vec![], ReadStatus::Pending(Some(start + ms(1))))
        );

        // Half a millisecond later nothing more is due.
        clock.advance(Duration::from_micros(500));
        assert_eq!(
            read_indices(&mut odd),
            (vec![], ReadStatus::Pending(Some(start + ms(1))))
        );

        // At 1 ms record 1 is due, exactly.
        clock.advance(Duration::from_micros(500));
        assert_eq!(
            read_indices(&mut odd),
            (vec![(1, 0)], ReadStatus::Pending(Some(start + ms(3))))
        );

        // At 10.3 ms the splits catch up with everything due: 2..=10, each stamped with the
        // time it has been due (how far the source ran behind), never early.
        clock.advance(Duration::from_micros(9_300));
        let (evens, status) = read_indices(&mut even);
        assert_eq!(status, ReadStatus::Pending(Some(start + ms(12))));
        assert_eq!(
            evens,
            [2u64, 4, 6, 8, 10]
                .map(|i| (i, (10_300_000 - i * 1_000_000) as i64))
                .to_vec()
        );
        let (odds, _) = read_indices(&mut odd);
        assert_eq!(odds.iter().map(|r| r.0).collect::<Vec<_>>(), [3, 5, 7, 9]);
        assert!(
            odds.iter()
                .all(|&(i, lag)| lag == (10_300_000 - i * 1_000_000) as i64)
        );
        assert_eq!(timetable.due_at(11), start + ms(11));
        assert_eq!(
            read_indices(&mut odd),
            (vec![], ReadStatus::Pending(Some(start + ms(11))))
        );
    }

    #[test]
    fn a_restored_run_continues_the_schedule_from_its_position() {
        let clock = Arc::new(ManualPaceClock::new());
        let schedule = Schedule::with_clock(1_000.0, clock.clone());
        let source = DatagenSource::new(Stamps {
            schedule: schedule.clone(),
        })
        .paced_by(schedule.clone())
        .splits(2);
        Source::splits(&source, 2).unwrap();
        let mut even = source.reader(0).unwrap();
        read_indices(&mut even);
        clock.advance(Duration::from_secs(3_600));

        // A new run, restored at position 100 of each split: record 200 is due at its start.
        Source::splits(&source, 2).unwrap();
        assert_eq!(
            schedule.timetable(),
            None,
            "a new run starts a new schedule"
        );
        let mut even = source.reader(0).unwrap();
        let mut odd = source.reader(1).unwrap();
        even.seek(&serde_json::json!(100)).unwrap();
        odd.seek(&serde_json::json!(100)).unwrap();
        let start = clock.now();
        assert_eq!(
            read_indices(&mut even),
            (vec![(200, 0)], ReadStatus::Pending(Some(start + ms(2))))
        );
        clock.advance(ms(1));
        assert_eq!(
            read_indices(&mut odd),
            (vec![(201, 0)], ReadStatus::Pending(Some(start + ms(3))))
        );
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }
}
