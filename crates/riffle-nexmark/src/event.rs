//! The Nexmark event model: persons, auctions and bids, as the nexmark project's Flink tables
//! name their columns (`dateTime`, `itemName`, ...), with every time in epoch milliseconds (UTC).
//!
//! An [`Event`] is written as one JSON object tagged by its type:
//! `{"bid":{"auction":1000,"bidder":1001,"price":1234,"channel":"Google","url":"https://..",
//! "dateTime":1768435200000,"extra":".."}}`; the per-type files hold the inner objects.

use riffle::Timestamp;
use serde::{Deserialize, Serialize};

/// A person: someone who sells or bids.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Person {
    /// Person id (from 1000 on).
    pub id: i64,
    /// Full name.
    pub name: String,
    /// Email address.
    pub email_address: String,
    /// Credit card number, four groups of four digits.
    pub credit_card: String,
    /// US city.
    pub city: String,
    /// US state, two letters.
    pub state: String,
    /// Event time, epoch ms.
    pub date_time: Timestamp,
    /// Padding up to the configured average size.
    pub extra: String,
}

/// An item put up for auction.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Auction {
    /// Auction id (from 1000 on).
    pub id: i64,
    /// Item name.
    pub item_name: String,
    /// Item description.
    pub description: String,
    /// Initial bid, in cents.
    pub initial_bid: i64,
    /// Reserve price, in cents.
    pub reserve: i64,
    /// Event time, epoch ms.
    pub date_time: Timestamp,
    /// When the auction closes, epoch ms.
    pub expires: Timestamp,
    /// The person selling.
    pub seller: i64,
    /// Category id (10 to 14).
    pub category: i64,
    /// Padding up to the configured average size.
    pub extra: String,
}

/// A bid on an auction.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bid {
    /// The auction bid on.
    pub auction: i64,
    /// The person bidding.
    pub bidder: i64,
    /// Price, in cents.
    pub price: i64,
    /// Channel the bid came through (`Google`, `Facebook`, `Baidu`, `Apple`, `channel-N`).
    pub channel: String,
    /// URL the bid came from.
    pub url: String,
    /// Event time, epoch ms.
    pub date_time: Timestamp,
    /// Padding up to the configured average size.
    pub extra: String,
}

/// One Nexmark event.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Event {
    /// A new person.
    Person(Person),
    /// A new auction.
    Auction(Auction),
    /// A bid.
    Bid(Bid),
}

impl Event {
    /// The event's time, epoch ms.
    pub fn date_time(&self) -> Timestamp {
        match self {
            Event::Person(p) => p.date_time,
            Event::Auction(a) => a.date_time,
            Event::Bid(b) => b.date_time,
        }
    }

    /// The bid, if this is one (the `bid` view of the nexmark project's DDL).
    pub fn into_bid(self) -> Option<Bid> {
        match self {
            Event::Bid(bid) => Some(bid),
            _ => None,
        }
    }

    /// The type's name: `person`, `auction` or `bid` (the directory of per-type files).
    pub fn type_name(&self) -> &'static str {
        match self {
            Event::Person(_) => "person",
            Event::Auction(_) => "auction",
            Event::Bid(_) => "bid",
        }
    }
}

fn id(value: usize) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn time(value: u64) -> Timestamp {
    Timestamp::try_from(value).unwrap_or(Timestamp::MAX)
}

impl From<nexmark::event::Event> for Event {
    fn from(event: nexmark::event::Event) -> Self {
        match event {
            nexmark::event::Event::Person(p) => Event::Person(Person {
                id: id(p.id),
                name: p.name,
                email_address: p.email_address,
                credit_card: p.credit_card,
                city: p.city,
                state: p.state,
                date_time: time(p.date_time),
                extra: p.extra,
            }),
            nexmark::event::Event::Auction(a) => Event::Auction(Auction {
                id: id(a.id),
                item_name: a.item_name,
                description: a.description,
                initial_bid: id(a.initial_bid),
                reserve: id(a.reserve),
                date_time: time(a.date_time),
                expires: time(a.expires),
                seller: id(a.seller),
                category: id(a.category),
                extra: a.extra,
            }),
            nexmark::event::Event::Bid(b) => Event::Bid(Bid {
                auction: id(b.auction),
                bidder: id(b.bidder),
                price: id(b.price),
                channel: b.channel,
                url: b.url,
                date_time: time(b.date_time),
                extra: b.extra,
            }),
        }
    }
}

/// Calendar fields of an epoch-ms time in UTC (what `DATE_FORMAT` and `HOUR` read in the
/// queries; the nexmark project's tables hold `TIMESTAMP(3)` values without a zone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Civil {
    /// Year.
    pub year: i64,
    /// Month, 1 to 12.
    pub month: u32,
    /// Day of the month, 1 to 31.
    pub day: u32,
    /// Hour, 0 to 23.
    pub hour: u32,
    /// Minute, 0 to 59.
    pub minute: u32,
}

/// Milliseconds in a day.
pub const DAY_MS: i64 = 86_400_000;

impl Civil {
    /// The UTC calendar date and time of `millis` since the epoch.
    ///
    /// ```
    /// use riffle_nexmark::event::Civil;
    /// let c = Civil::of(1_768_491_600_000); // 2026-01-15 15:40:00 UTC
    /// assert_eq!((c.year, c.month, c.day, c.hour, c.minute), (2026, 1, 15, 15, 40));
    /// assert_eq!(c.date(), "2026-01-15");
    /// ```
    pub fn of(millis: Timestamp) -> Civil {
        let days = millis.div_euclid(DAY_MS);
        let in_day = millis.rem_euclid(DAY_MS);
        // Days to a proleptic Gregorian date, counting in 400-year eras from 0000-03-01.
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        Civil {
            year,
            month,
            day,
            hour: (in_day / 3_600_000) as u32,
            minute: (in_day / 60_000 % 60) as u32,
        }
    }

    /// `yyyy-MM-dd`.
    pub fn date(&self) -> String {
        format!("{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }

    /// `HH:mm`.
    pub fn hour_minute(&self) -> String {
        format!("{:02}:{:02}", self.hour, self.minute)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_match_known_instants() {
        let cases = [
            (0, (1970, 1, 1, 0, 0)),
            (951_782_400_000, (2000, 2, 29, 0, 0)),
            (1_767_225_599_999, (2025, 12, 31, 23, 59)),
            (1_767_225_600_000, (2026, 1, 1, 0, 0)),
            (-1, (1969, 12, 31, 23, 59)),
        ];
        for (millis, (y, m, d, h, min)) in cases {
            let c = Civil::of(millis);
            assert_eq!(
                (c.year, c.month, c.day, c.hour, c.minute),
                (y, m, d, h, min),
                "{millis}"
            );
        }
        assert_eq!(Civil::of(1_767_225_599_999).hour_minute(), "23:59");
    }

    #[test]
    fn events_are_tagged_by_type_in_json() {
        let bid = Event::Bid(Bid {
            auction: 1000,
            bidder: 1001,
            price: 50,
            channel: "Google".into(),
            url: "https://x".into(),
            date_time: 5,
            extra: String::new(),
        });
        let json = serde_json::to_string(&bid).unwrap();
        assert_eq!(
            json,
            r#"{"bid":{"auction":1000,"bidder":1001,"price":50,"channel":"Google","url":"https://x","dateTime":5,"extra":""}}"#
        );
        assert_eq!(serde_json::from_str::<Event>(&json).unwrap(), bid);
    }
}
