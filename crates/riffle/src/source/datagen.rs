//! Data generators: deterministic, replayable synthetic streams, and the seed's click stream.
//!
//! Record `i` of a generated stream is a pure function of the generator's seed and of `i`, so a
//! split's position (how many records it produced) is all a checkpoint needs to replay it, and the
//! same configuration always yields the same records whatever the parallelism or the pace.
//! Split `s` of `S` produces the records `s, s + S, s + 2S, ...`.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::record::{Data, Timestamp};
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

/// A source of generated records: bounded by a count or unbounded, unlimited or paced.
///
/// ```
/// use riffle::source::datagen::{ClicksConfig, DatagenSource};
/// let source = DatagenSource::clicks(ClicksConfig::default()).count(1_000).rate(10_000.0);
/// ```
pub struct DatagenSource<G> {
    generator: Arc<G>,
    count: Option<u64>,
    rate: Option<f64>,
    splits: usize,
    /// When the current run's schedule started: shared by the splits so that together they
    /// follow one schedule, whichever thread starts first.
    origin: Mutex<Arc<OnceLock<Instant>>>,
}

impl<G: Generator> DatagenSource<G> {
    /// An unbounded, unpaced source over `generator`, with 8 splits (the seed's 8 partitions).
    pub fn new(generator: G) -> Self {
        DatagenSource {
            generator: Arc::new(generator),
            count: None,
            rate: None,
            splits: 8,
            origin: Mutex::default(),
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

    /// Paces the source to `events_per_second` in total (over all splits).
    pub fn rate(mut self, events_per_second: f64) -> Self {
        self.rate = Some(events_per_second);
        self
    }

    /// Sets the pace, `None` for as fast as possible.
    pub fn pace(mut self, events_per_second: Option<f64>) -> Self {
        self.rate = events_per_second;
        self
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

impl DatagenSource<ClickGenerator> {
    /// The seed's click stream.
    pub fn clicks(config: ClicksConfig) -> Self {
        DatagenSource::new(ClickGenerator::new(config))
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
        if let Some(rate) = self.rate
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
        *self.origin.lock().expect("origin lock") = Arc::default();
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
            rate: self.rate.map(|r| r / splits as f64),
            origin: self.origin.lock().expect("origin lock").clone(),
            paced_from: None,
        }))
    }
}

struct DatagenReader<G> {
    generator: Arc<G>,
    split: u64,
    splits: u64,
    /// Records produced by this split so far: its position.
    produced: u64,
    /// Records this split produces in all, if bounded.
    total: Option<u64>,
    /// Records per second for this split.
    rate: Option<f64>,
    /// Start of the source's schedule, shared by its splits.
    origin: Arc<OnceLock<Instant>>,
    /// When pacing started and how many records had been produced then.
    paced_from: Option<(Instant, u64)>,
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
        if let Some(rate) = self.rate {
            let origin = *self.origin.get_or_init(Instant::now);
            let (since, base) = *self.paced_from.get_or_insert((origin, self.produced));
            let due = base + (since.elapsed().as_secs_f64() * rate) as u64;
            n = n.min(due.saturating_sub(self.produced));
            if n == 0 {
                let next =
                    since + Duration::from_secs_f64((self.produced + 1 - base) as f64 / rate);
                return Ok(ReadStatus::Pending(Some(next)));
            }
        }
        for _ in 0..n {
            out.emit(
                self.generator
                    .generate(self.split + self.produced * self.splits),
            );
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
        self.paced_from = None;
        Ok(())
    }
}

/// One click of the seed's stream.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Click {
    /// The user who clicked.
    pub user_id: u64,
    /// The page clicked.
    pub url: String,
    /// The client's User-Agent header (bots included).
    pub user_agent: String,
    /// The client's IPv4 address, dotted quad.
    pub ip: String,
    /// When the click happened, epoch milliseconds.
    pub event_time: Timestamp,
}

/// Shape of the generated click stream.
#[derive(Clone, Debug, PartialEq)]
pub struct ClicksConfig {
    /// Seed of the stream: the same seed gives the same clicks.
    pub seed: u64,
    /// Number of distinct users (default 1M, the seed's scenario 2).
    pub users: u64,
    /// Share of clicks from bots (default 0.3, the seed's ~30%).
    pub bot_share: f64,
    /// Share of clicks from one hot user, the skewed key of the seed (default 0).
    pub hot_key_share: f64,
    /// The hot user's id.
    pub hot_user: u64,
    /// Event time of the first click, epoch ms (default 2026-01-15 15:40:00 UTC).
    pub start_time: Timestamp,
    /// Clicks per second of event time (default 100 000, the seed's scenario 2 rate).
    pub events_per_second: f64,
    /// Clicks arrive up to this many ms out of order (default 2 000).
    pub max_out_of_orderness_ms: i64,
    /// Share of very late clicks, mobile users back from the subway (default 0.001).
    pub late_share: f64,
    /// How late a very late click is (default 6 minutes: 15:42 arriving at 15:48).
    pub late_delay_ms: i64,
}

/// 2026-01-15 15:40:00 UTC.
pub const DEFAULT_START_TIME: Timestamp = 1_768_491_600_000;

impl Default for ClicksConfig {
    fn default() -> Self {
        ClicksConfig {
            seed: 42,
            users: 1_000_000,
            bot_share: 0.3,
            hot_key_share: 0.0,
            hot_user: 42,
            start_time: DEFAULT_START_TIME,
            events_per_second: 100_000.0,
            max_out_of_orderness_ms: 2_000,
            late_share: 0.001,
            late_delay_ms: 6 * 60 * 1000,
        }
    }
}

impl ClicksConfig {
    /// Checks the shares and counts; the error names the field.
    pub fn validate(&self) -> Result<()> {
        for (name, share) in [
            ("bot_share", self.bot_share),
            ("hot_key_share", self.hot_key_share),
            ("late_share", self.late_share),
        ] {
            if !(0.0..=1.0).contains(&share) {
                return Err(Error::config(
                    name,
                    format!("must be between 0 and 1, got {share}"),
                ));
            }
        }
        if self.users == 0 {
            return Err(Error::config("users", "must be at least 1"));
        }
        if !(self.events_per_second > 0.0 && self.events_per_second.is_finite()) {
            return Err(Error::config(
                "events_per_second",
                "must be a positive number",
            ));
        }
        if self.max_out_of_orderness_ms < 0 || self.late_delay_ms < 0 {
            return Err(Error::config(
                "max_out_of_orderness_ms",
                "delays must not be negative",
            ));
        }
        Ok(())
    }
}

const BROWSERS: &[&str] = &[
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148",
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Mobile Safari/537.36",
    "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0",
];

const BOTS: &[&str] = &[
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
    "Mozilla/5.0 (compatible; AhrefsBot/7.0; +http://ahrefs.com/robot/)",
    "python-requests/2.32.3",
    "curl/8.11.0",
];

const PAGES: &[&str] = &[
    "/",
    "/search",
    "/product",
    "/cart",
    "/checkout",
    "/article",
    "/profile",
];

/// Generates the seed's clicks.
#[derive(Clone, Debug)]
pub struct ClickGenerator {
    config: ClicksConfig,
    ms_per_event: f64,
}

/// SplitMix64: a well-mixed 64-bit value for each (seed, index, stream) triple.
fn mix(seed: u64, index: u64, stream: u64) -> u64 {
    let mut z = seed
        ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform value in `[0, 1)`.
fn unit(bits: u64) -> f64 {
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

impl ClickGenerator {
    /// A generator for `config`.
    pub fn new(config: ClicksConfig) -> Self {
        let ms_per_event = 1000.0 / config.events_per_second;
        ClickGenerator {
            config,
            ms_per_event,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ClicksConfig {
        &self.config
    }

    /// The IPv4 address of a user (stable: a user keeps one address).
    pub fn ip_of(&self, user_id: u64) -> String {
        let bits = mix(self.config.seed, user_id, 7);
        let mut first = 1 + (bits % 223) as u8; // 1..=223: unicast
        if first == 127 || first == 10 {
            first += 1;
        }
        format!(
            "{}.{}.{}.{}",
            first,
            (bits >> 8) as u8,
            (bits >> 16) as u8,
            (bits >> 24) as u8
        )
    }

    /// The event time click `index` would have if it arrived on time.
    pub fn on_time_event_time(&self, index: u64) -> Timestamp {
        self.config.start_time + (index as f64 * self.ms_per_event) as i64
    }
}

impl Generator for ClickGenerator {
    type Item = Click;

    fn generate(&self, index: u64) -> Click {
        let c = &self.config;
        let seed = c.seed;
        let user_id = if unit(mix(seed, index, 1)) < c.hot_key_share {
            c.hot_user
        } else {
            1 + mix(seed, index, 2) % c.users
        };
        let bot = unit(mix(seed, index, 3)) < c.bot_share;
        let agents = if bot { BOTS } else { BROWSERS };
        let user_agent = agents[(mix(seed, index, 4) % agents.len() as u64) as usize].to_string();
        let page_bits = mix(seed, index, 5);
        let page = PAGES[(page_bits % PAGES.len() as u64) as usize];
        let url = if page == "/" {
            page.to_string()
        } else {
            format!("{page}/{}", (page_bits >> 8) % 10_000)
        };
        let mut event_time = self.on_time_event_time(index);
        if c.max_out_of_orderness_ms > 0 {
            event_time -= (mix(seed, index, 6) % (c.max_out_of_orderness_ms as u64 + 1)) as i64;
        }
        if unit(mix(seed, index, 8)) < c.late_share {
            event_time -= c.late_delay_ms;
        }
        Click {
            user_id,
            url,
            user_agent,
            ip: self.ip_of(user_id),
            event_time,
        }
    }

    fn name(&self) -> String {
        "clicks".into()
    }
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
    fn clicks_are_deterministic_and_match_the_configured_shares() {
        let generator = ClickGenerator::new(ClicksConfig {
            users: 1000,
            ..ClicksConfig::default()
        });
        assert_eq!(generator.generate(12345), generator.generate(12345));
        let clicks: Vec<Click> = (0..20_000).map(|i| generator.generate(i)).collect();
        let bots = clicks
            .iter()
            .filter(|c| BOTS.contains(&c.user_agent.as_str()))
            .count();
        assert!((5_400..6_600).contains(&bots), "about 30% bots, got {bots}");
        assert!(clicks.iter().all(|c| (1..=1000).contains(&c.user_id)));
        let ip_of_7: Vec<_> = clicks
            .iter()
            .filter(|c| c.user_id == 7)
            .map(|c| c.ip.clone())
            .collect();
        assert!(
            ip_of_7.windows(2).all(|w| w[0] == w[1]),
            "a user keeps one address"
        );
        let late = clicks
            .iter()
            .enumerate()
            .filter(|(i, c)| generator.on_time_event_time(*i as u64) - c.event_time > 2_000);
        assert!((5..50).contains(&late.count()), "about 0.1% very late");
    }

    #[test]
    fn the_hot_key_takes_its_share() {
        let generator = ClickGenerator::new(ClicksConfig {
            hot_key_share: 0.8,
            ..ClicksConfig::default()
        });
        let hot = (0..10_000)
            .filter(|&i| generator.generate(i).user_id == 42)
            .count();
        assert!((7_700..8_300).contains(&hot), "got {hot}");
    }

    #[test]
    fn the_union_of_splits_is_the_same_stream_for_any_split_count() {
        let config = ClicksConfig {
            users: 50,
            ..ClicksConfig::default()
        };
        let mut a = read_all(
            &DatagenSource::clicks(config.clone()).count(1001).splits(3),
            2,
        );
        let mut b = read_all(
            &DatagenSource::clicks(config.clone()).count(1001).splits(8),
            4,
        );
        let generator = ClickGenerator::new(config);
        let mut expected: Vec<Click> = (0..1001).map(|i| generator.generate(i)).collect();
        for v in [&mut a, &mut b, &mut expected] {
            v.sort_by_key(|c| (c.event_time, c.user_id, c.url.clone()));
        }
        assert_eq!(a, expected);
        assert_eq!(b, expected);
    }

    #[test]
    fn a_reader_resumes_from_its_position() {
        let source = DatagenSource::clicks(ClicksConfig::default())
            .count(100)
            .splits(1);
        let mut reader = source.reader(0).unwrap();
        let mut out = SourceOutput::with_capacity(10);
        reader.read(&mut out, 30).unwrap();
        let position = reader.position();
        let rest_a: Vec<Click> = {
            let mut out = SourceOutput::with_capacity(100);
            reader.read(&mut out, 100).unwrap();
            out.records.into_iter().map(|r| r.value).collect()
        };
        let mut replay = source.reader(0).unwrap();
        replay.seek(&position).unwrap();
        let mut out = SourceOutput::with_capacity(100);
        assert_eq!(replay.read(&mut out, 100).unwrap(), ReadStatus::Finished);
        let rest_b: Vec<Click> = out.records.into_iter().map(|r| r.value).collect();
        assert_eq!(rest_a.len(), 70);
        assert_eq!(rest_a, rest_b);
    }

    #[test]
    fn pacing_holds_records_back_until_they_are_due() {
        let source = DatagenSource::new(JsonPayloads(ClickGenerator::new(ClicksConfig::default())))
            .rate(100.0)
            .splits(1);
        let mut reader = source.reader(0).unwrap();
        let mut out = SourceOutput::with_capacity(10);
        match reader.read(&mut out, 10).unwrap() {
            ReadStatus::Pending(Some(at)) => assert!(at > Instant::now()),
            other => panic!("nothing is due at the start, got {other:?}"),
        }
        std::thread::sleep(Duration::from_millis(55));
        reader.read(&mut out, 10).unwrap();
        assert!(
            (4..=7).contains(&out.len()),
            "about 5 records after 50 ms at 100/s, got {}",
            out.len()
        );
        let click: Click = serde_json::from_str(&out.records[0].value).unwrap();
        assert!(
            click.event_time <= DEFAULT_START_TIME,
            "the first clicks happen at the start time or before"
        );
    }
}
