//! The seed's clicks domain: telling bots from people by User-Agent, the in-memory IP-prefix to
//! country table, and the enriched click the ETL pipeline writes.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::OnceLock;

use aho_corasick::AhoCorasick;
use riffle::sink::json;
use riffle_clicks::{Click, CompactString};
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
    /// For each prefix length present in the table, longest first: masked address -> country.
    by_length: Vec<(u8, HashMap<u32, Country, foldhash::fast::FixedState>)>,
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
            let index = match table.by_length.iter().position(|(l, _)| *l == length) {
                Some(index) => index,
                None => {
                    table.by_length.push((length, HashMap::default()));
                    table.by_length.len() - 1
                }
            };
            table.by_length[index]
                .1
                .insert(mask(u32::from(address), length), country);
        }
        table
            .by_length
            .sort_unstable_by_key(|(length, _)| std::cmp::Reverse(*length));
        Ok(table)
    }

    /// The country of `ip` (dotted quad), if a prefix covers it.
    pub fn lookup(&self, ip: &str) -> Option<Country> {
        let address = u32::from(parse_ipv4(ip)?);
        self.by_length
            .iter()
            .find_map(|(length, prefixes)| prefixes.get(&mask(address, *length)).copied())
    }

    /// Number of prefixes.
    pub fn len(&self) -> usize {
        self.by_length
            .iter()
            .map(|(_, prefixes)| prefixes.len())
            .sum()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A dotted quad as the standard library reads it (`Ipv4Addr::from_str`): the usual form
/// (four decimal octets, no leading zeros) read in one pass, anything else left to the standard
/// parser, so both accept and refuse the same text.
fn parse_ipv4(ip: &str) -> Option<Ipv4Addr> {
    fn usual(ip: &[u8]) -> Option<Ipv4Addr> {
        let mut octets = [0u8; 4];
        let mut at = 0;
        for (i, octet) in octets.iter_mut().enumerate() {
            if i > 0 {
                if ip.get(at) != Some(&b'.') {
                    return None;
                }
                at += 1;
            }
            let start = at;
            let mut value: u32 = 0;
            while at < ip.len() && at - start < 3 && ip[at].is_ascii_digit() {
                value = value * 10 + u32::from(ip[at] - b'0');
                at += 1;
            }
            let digits = at - start;
            if digits == 0 || (digits > 1 && ip[start] == b'0') {
                return None;
            }
            *octet = u8::try_from(value).ok()?;
        }
        (at == ip.len()).then_some(Ipv4Addr::from(octets))
    }
    usual(ip.as_bytes()).or_else(|| ip.parse().ok())
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
    pub url: CompactString,
    /// The client's address.
    pub ip: CompactString,
    /// Country of the address (`ZZ` if unknown).
    pub country: Country,
    /// When the click happened, epoch milliseconds.
    pub event_time: i64,
}

impl EnrichedClick {
    /// Appends the click as one JSON document, byte for byte what its `Serialize` writes
    /// through `serde_json` (the ETL sink's encoder: no per-byte escape scan of the field names,
    /// one check per string).
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"user_id\":");
        json::push_u64(out, self.user_id);
        out.extend_from_slice(b",\"url\":");
        json::push_str(out, &self.url);
        out.extend_from_slice(b",\"ip\":");
        json::push_str(out, &self.ip);
        out.extend_from_slice(b",\"country\":");
        json::push_str(out, self.country.as_str());
        out.extend_from_slice(b",\"event_time\":");
        json::push_i64(out, self.event_time);
        out.push(b'}');
    }
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
    fn an_enriched_click_is_encoded_as_serde_json_encodes_it() {
        let urls = ["/", "/a/b?c=d&e=f", "/q \"x\" \\ y\n\t\u{1}", "/日本/é", ""];
        for (i, url) in urls.into_iter().enumerate() {
            let click = EnrichedClick {
                user_id: [0, 7, 123_456_789, u64::MAX, 42][i],
                url: url.into(),
                ip: ["10.0.0.1", "", "1.2.3.4", "a\"b", "255.255.255.255"][i].into(),
                country: [Country::UNKNOWN, Country::parse("DE").unwrap()][i % 2],
                event_time: [0, -1, 1_768_491_600_000, i64::MIN, i64::MAX][i],
            };
            let mut ours = b"before".to_vec();
            click.write_json(&mut ours);
            let expected = [b"before".to_vec(), serde_json::to_vec(&click).unwrap()].concat();
            assert_eq!(
                String::from_utf8(ours).unwrap(),
                String::from_utf8(expected).unwrap()
            );
        }
    }

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
    fn addresses_are_read_as_the_standard_library_reads_them() {
        let cases = [
            "1.2.3.4",
            "0.0.0.0",
            "255.255.255.255",
            "256.1.1.1",
            "01.2.3.4",
            "1.2.3",
            "1.2.3.4.",
            "1.2.3.4.5",
            "1..3.4",
            "",
            ".",
            "1.2.3.04",
            "1.2.3.0",
            "1.2.3.1000",
            "+1.2.3.4",
            "1.2.3.-4",
            " 1.2.3.4",
            "1.2.3.4 ",
            "１.2.3.4",
            "001.2.3.4",
            "99.199.249.250",
        ];
        for ip in cases {
            assert_eq!(parse_ipv4(ip), ip.parse::<Ipv4Addr>().ok(), "{ip:?}");
        }
        for bits in (0..u32::MAX).step_by(7_919_993) {
            let ip = Ipv4Addr::from(bits).to_string();
            assert_eq!(parse_ipv4(&ip), Some(Ipv4Addr::from(bits)));
        }
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
