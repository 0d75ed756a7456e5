//! The seed's clicks domain: telling bots from people by User-Agent, the in-memory IP-prefix to
//! country table, and the enriched click the ETL pipeline writes.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::OnceLock;

use aho_corasick::AhoCorasick;
use riffle_clicks::Click;
use serde::{Deserialize, Serialize};

/// Substrings of the User-Agent of automated clients (compared ignoring ASCII case).
const BOT_MARKERS: &[&str] = &[
    "bot",
    "spider",
    "crawl",
    "python-requests",
    "curl/",
    "wget",
    "headless",
];

/// Whether a User-Agent belongs to a bot, crawler or script.
///
/// ```
/// use riffle_cli::clicks::is_bot;
/// assert!(is_bot("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"));
/// assert!(is_bot("curl/8.11.0"));
/// assert!(is_bot("Mozilla/5.0 (compatible; YandexBOT/3.0)"));
/// assert!(!is_bot("Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"));
/// ```
pub fn is_bot(user_agent: &str) -> bool {
    // Lower-case a copy, then look for every marker at once with a SIMD multi-substring search
    // (a case-insensitive automaton walks byte by byte and costs several times more).
    static MARKERS: OnceLock<BotMarkers> = OnceLock::new();
    let markers = MARKERS.get_or_init(BotMarkers::new);
    let mut stack = [0u8; 256];
    let mut heap = Vec::new();
    let lower: &mut [u8] = if user_agent.len() <= stack.len() {
        &mut stack[..user_agent.len()]
    } else {
        heap.resize(user_agent.len(), 0);
        &mut heap
    };
    lower.copy_from_slice(user_agent.as_bytes());
    lower.make_ascii_lowercase();
    match &markers.packed {
        Some(searcher) => searcher.find(&*lower).is_some(),
        None => markers.automaton.is_match(&*lower),
    }
}

/// The bot markers, compiled once: a SIMD searcher where the CPU has one, an automaton otherwise.
struct BotMarkers {
    packed: Option<aho_corasick::packed::Searcher>,
    automaton: AhoCorasick,
}

impl BotMarkers {
    fn new() -> Self {
        BotMarkers {
            packed: aho_corasick::packed::Config::new()
                .builder()
                .extend(BOT_MARKERS)
                .build(),
            automaton: AhoCorasick::new(BOT_MARKERS).expect("valid markers"),
        }
    }
}

/// An ISO 3166-1 alpha-2 country code; `ZZ` when unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Country([u8; 2]);

impl Country {
    /// The code of an unknown country.
    pub const UNKNOWN: Country = Country(*b"ZZ");

    /// Parses a two-letter code.
    pub fn parse(code: &str) -> Option<Country> {
        match code.as_bytes() {
            [a, b] if a.is_ascii_uppercase() && b.is_ascii_uppercase() => Some(Country([*a, *b])),
            _ => None,
        }
    }

    /// The code as text.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("ASCII letters")
    }
}

impl Serialize for Country {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Country {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let code = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Country::parse(&code)
            .ok_or_else(|| serde::de::Error::custom(format!("not a country code: {code}")))
    }
}

/// Longest-prefix match of IPv4 addresses to countries.
#[derive(Clone, Debug, Default)]
pub struct IpCountryTable {
    /// Prefix lengths present in the table, longest first.
    lengths: Vec<u8>,
    /// (prefix length, masked address) -> country.
    prefixes: HashMap<(u8, u32), Country>,
}

/// The table shipped with Riffle (synthetic: see the file's header).
pub const EMBEDDED_TABLE: &str = include_str!("../data/ip-prefixes.csv");

impl IpCountryTable {
    /// The embedded table, parsed once.
    pub fn embedded() -> &'static IpCountryTable {
        static TABLE: OnceLock<IpCountryTable> = OnceLock::new();
        TABLE.get_or_init(|| {
            IpCountryTable::parse(EMBEDDED_TABLE).expect("the embedded table is valid")
        })
    }

    /// Parses `prefix,country` lines (a header line and `#` comments are skipped).
    pub fn parse(text: &str) -> Result<IpCountryTable, String> {
        let mut table = IpCountryTable::default();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line == "prefix,country" {
                continue;
            }
            let bad = |what: &str| format!("line {}: {what}: `{line}`", number + 1);
            let (prefix, country) = line
                .split_once(',')
                .ok_or_else(|| bad("expected prefix,country"))?;
            let (address, length) = prefix
                .split_once('/')
                .ok_or_else(|| bad("expected a.b.c.d/len"))?;
            let address: Ipv4Addr = address.parse().map_err(|_| bad("bad address"))?;
            let length: u8 = length
                .parse()
                .ok()
                .filter(|l| *l <= 32)
                .ok_or_else(|| bad("bad prefix length"))?;
            let country = Country::parse(country.trim()).ok_or_else(|| bad("bad country code"))?;
            table
                .prefixes
                .insert((length, mask(u32::from(address), length)), country);
            if !table.lengths.contains(&length) {
                table.lengths.push(length);
            }
        }
        table.lengths.sort_unstable_by(|a, b| b.cmp(a));
        Ok(table)
    }

    /// The country of `ip` (dotted quad), if a prefix covers it.
    pub fn lookup(&self, ip: &str) -> Option<Country> {
        let address = u32::from(ip.parse::<Ipv4Addr>().ok()?);
        self.lengths
            .iter()
            .find_map(|&length| self.prefixes.get(&(length, mask(address, length))).copied())
    }

    /// Number of prefixes.
    pub fn len(&self) -> usize {
        self.prefixes.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.prefixes.is_empty()
    }
}

fn mask(address: u32, length: u8) -> u32 {
    if length == 0 {
        0
    } else {
        address & (u32::MAX << (32 - length))
    }
}

/// A click of a person, with the country of its IP address: what the ETL pipeline writes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnrichedClick {
    /// The user who clicked.
    pub user_id: u64,
    /// The page clicked.
    pub url: String,
    /// The client's address.
    pub ip: String,
    /// Country of the address (`ZZ` if unknown).
    pub country: Country,
    /// When the click happened, epoch milliseconds.
    pub event_time: i64,
}

/// Adds the country to a click.
pub fn enrich(click: Click, table: &IpCountryTable) -> EnrichedClick {
    let country = table.lookup(&click.ip).unwrap_or(Country::UNKNOWN);
    EnrichedClick {
        user_id: click.user_id,
        url: click.url,
        ip: click.ip,
        country,
        event_time: click.event_time,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_prefix_wins() {
        let table = IpCountryTable::embedded();
        assert_eq!(table.len(), 226);
        assert_eq!(table.lookup("17.2.3.4").unwrap().as_str(), "IT");
        assert_eq!(table.lookup("17.1.3.4").unwrap().as_str(), "NL");
        assert_eq!(table.lookup("10.0.0.1"), None);
        assert_eq!(table.lookup("not an ip"), None);
    }

    #[test]
    fn long_user_agents_are_searched_whole() {
        let long = format!("Mozilla/5.0 {} Spider", "x".repeat(400));
        assert!(is_bot(&long));
        assert!(!is_bot(&"Mozilla/5.0 ".repeat(60)));
    }

    #[test]
    fn bad_tables_name_the_line() {
        let err =
            IpCountryTable::parse("prefix,country\n1.2.3.0/24,DE\n1.2.3.0/40,DE\n").unwrap_err();
        assert!(err.starts_with("line 3: bad prefix length"), "{err}");
    }

    #[test]
    fn countries_serialize_as_codes() {
        let click = Click {
            user_id: 7,
            url: "/cart".into(),
            user_agent: "x".into(),
            ip: "1.2.3.4".into(),
            event_time: 5,
        };
        let enriched = enrich(click, IpCountryTable::embedded());
        let json = serde_json::to_string(&enriched).unwrap();
        assert_eq!(
            json,
            r#"{"user_id":7,"url":"/cart","ip":"1.2.3.4","country":"US","event_time":5}"#
        );
        assert_eq!(
            serde_json::from_str::<EnrichedClick>(&json).unwrap(),
            enriched
        );
    }
}
