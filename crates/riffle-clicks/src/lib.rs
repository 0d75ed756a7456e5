//! The seed's click stream: the [`Click`] record of its pipeline and a deterministic generator
//! of it ([`ClickGenerator`], shaped by [`ClicksConfig`]: users, bots, a hot key, late mobile
//! clicks), for the demos, the benchmarks and the tests. Not part of the engine: a job's build of
//! `riffle` does not carry it.
//!
//! ```
//! use riffle::{StreamEnv, sink::CollectSink};
//! use riffle_clicks::{ClicksConfig, source};
//!
//! let env = StreamEnv::new();
//! let (sink, output) = CollectSink::new();
//! env.from_source(source(ClicksConfig::default()).count(10_000))
//!     .filter(|click| !click.user_agent.contains("bot"))
//!     .map(|click| click.user_id)
//!     .sink(sink);
//! let result = env.execute().unwrap();
//! assert_eq!(output.len() as u64, result.records_out("Filter"));
//! ```

use riffle::source::datagen::{DatagenSource, Generator, mix, unit};
use riffle::{Error, Result, Timestamp};
use serde::{Deserialize, Serialize};

pub use compact_str::CompactString;

mod json;

/// The seed's click stream: a [`DatagenSource`] of [`ClickGenerator`].
pub fn source(config: ClicksConfig) -> DatagenSource<ClickGenerator> {
    DatagenSource::new(ClickGenerator::new(config))
}

/// One click of the seed's stream.
///
/// The text fields are [`CompactString`]s: up to 24 bytes (an address, most paths) are held in
/// the record itself, so decoding and dropping a click allocates only for a long User-Agent.
/// [`Click::from_json`] decodes one from its JSON text (what `serde_json` reads, faster).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Click {
    /// The user who clicked.
    pub user_id: u64,
    /// The page clicked.
    pub url: CompactString,
    /// The client's User-Agent header (bots included).
    pub user_agent: CompactString,
    /// The client's IPv4 address, dotted quad.
    pub ip: CompactString,
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
    pub fn ip_of(&self, user_id: u64) -> CompactString {
        let bits = mix(self.config.seed, user_id, 7);
        let mut first = 1 + (bits % 223) as u8; // 1..=223: unicast
        if first == 127 || first == 10 {
            first += 1;
        }
        compact_str::format_compact!(
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
        let user_agent =
            CompactString::const_new(agents[(mix(seed, index, 4) % agents.len() as u64) as usize]);
        let page_bits = mix(seed, index, 5);
        let page = PAGES[(page_bits % PAGES.len() as u64) as usize];
        let url = if page == "/" {
            CompactString::const_new(page)
        } else {
            compact_str::format_compact!("{page}/{}", (page_bits >> 8) % 10_000)
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
