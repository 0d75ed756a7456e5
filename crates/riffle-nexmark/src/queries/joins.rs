//! The Nexmark queries that join two streams (q3, q4, q6, q7, q8, q9, q13, q20), written as
//! `KeyedCoProcessFunction`s: on Riffle's two-input API,
//! `a.key_by(f).connect(&b.key_by(g)).process_function(..)` (q3, q8), where both inputs share the key's
//! state and timers, or on one keyed stream of `Either` (q4, q6, q9, q20: bids and auctions,
//! which come from one source, so that a split's order is kept).
//!
//! Every result is emitted when it is final, so the output is append-only (q4's per-category
//! average is a changelog as q15–q19's): regular joins (q3, q20) emit a match as soon as both
//! sides are there (an inner join of two insert-only streams never retracts); joins bounded
//! by event time (q4, q6, q9: a bid within its auction's lifetime; q7, q8: 10 s tumbling
//! windows) emit when the watermark passes the auction's `expires` or the window's end, and
//! the end of a bounded input passes every time.

use riffle::operators::{KeyedCoProcessFunction, KeyedContext, KeyedProcessFunction};
use riffle::record::Either;
use riffle::state::{ListStateDescriptor, TimeDomain, ValueStateDescriptor};
use riffle::{DataStream, Result, Timestamp};
use serde::{Deserialize, Serialize};

use super::{Change, bids};
use crate::event::{Auction, Bid, Event, Person};

/// The persons of an event stream (the nexmark project's `person` view).
pub fn persons(events: &DataStream<Event>) -> DataStream<Person> {
    events
        .flat_map(|e| match e {
            Event::Person(p) => Some(p),
            _ => None,
        })
        .name("persons")
}

/// The auctions of an event stream (the nexmark project's `auction` view).
pub fn auctions(events: &DataStream<Event>) -> DataStream<Auction> {
    events
        .flat_map(|e| match e {
            Event::Auction(a) => Some(a),
            _ => None,
        })
        .name("auctions")
}

/// Runs a [`KeyedCoProcessFunction`] on one keyed stream of [`Either`]: both sides of a join
/// come through one channel, so the order of a source split is kept (an auction reaches the
/// join before the bids generated after it). Two connected inputs are read batch by batch, and
/// a batch of auctions (6% of the events) fills far more slowly than one of bids: most bids
/// would come before their auction and wait.
#[derive(Clone)]
struct OneInput<P>(P);

impl<K, A, B, Out, P> KeyedProcessFunction<K, Either<A, B>, Out> for OneInput<P>
where
    K: riffle::Data + std::hash::Hash + Eq,
    A: riffle::Data,
    B: riffle::Data,
    Out: riffle::Data,
    P: KeyedCoProcessFunction<K, A, B, Out>,
{
    fn process_element(
        &mut self,
        key: &K,
        value: Either<A, B>,
        ctx: &mut KeyedContext<'_, '_, K, Out>,
    ) -> Result<()> {
        match value {
            Either::Left(a) => self.0.process_element1(key, a, ctx),
            Either::Right(b) => self.0.process_element2(key, b, ctx),
        }
    }

    fn on_timer(
        &mut self,
        key: &K,
        timestamp: Timestamp,
        domain: TimeDomain,
        ctx: &mut KeyedContext<'_, '_, K, Out>,
    ) -> Result<()> {
        self.0.on_timer(key, timestamp, domain, ctx)
    }
}

/// The bids (`Left`) and auctions (`Right`) of an event stream, in its order.
fn bids_and_auctions(events: &DataStream<Event>) -> DataStream<Either<Bid, Auction>> {
    events
        .flat_map(|e| match e {
            Event::Bid(b) => Some(Either::Left(b)),
            Event::Auction(a) => Some(Either::Right(a)),
            Event::Person(_) => None,
        })
        .name("bids and auctions")
}

// ---------------------------------------------------------------------------------------------
// q3: persons ⋈ auctions (regular inner join)

/// Row of q3.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Q3Row {
    /// The seller's name.
    pub name: String,
    /// The seller's city.
    pub city: String,
    /// The seller's state.
    pub state: String,
    /// The auction's id.
    pub id: i64,
}

/// The persons q3 keeps: `P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA'`, compared as
/// SQL compares strings, case-sensitively (`or` is not `OR`). The generator writes the states in
/// upper case, as the nexmark project's Java generator does ([`crate::source::US_STATES`]).
pub fn q3_state(state: &str) -> bool {
    matches!(state, "OR" | "ID" | "CA")
}

static SELLER: ValueStateDescriptor<Person> = ValueStateDescriptor::new("seller");
static WAITING_AUCTIONS: ListStateDescriptor<i64> = ListStateDescriptor::new("waiting-auctions");

/// q3's join, keyed by person id = seller: a person is kept (its id is unique, so it matches
/// every later auction of the seller); an auction finding no person yet waits in a list that
/// the person's arrival empties.
#[derive(Clone)]
struct LocalItems;

impl LocalItems {
    fn row(p: &Person, auction: i64) -> Q3Row {
        Q3Row {
            name: p.name.clone(),
            city: p.city.clone(),
            state: p.state.clone(),
            id: auction,
        }
    }
}

impl KeyedCoProcessFunction<i64, Person, Auction, Q3Row> for LocalItems {
    fn process_element1(
        &mut self,
        _: &i64,
        p: Person,
        ctx: &mut KeyedContext<'_, '_, i64, Q3Row>,
    ) -> Result<()> {
        let waiting = ctx.list(&WAITING_AUCTIONS).get()?;
        for auction in waiting {
            ctx.emit(Self::row(&p, auction))?;
        }
        ctx.list(&WAITING_AUCTIONS).clear()?;
        ctx.value(&SELLER).set(p)
    }

    fn process_element2(
        &mut self,
        _: &i64,
        a: Auction,
        ctx: &mut KeyedContext<'_, '_, i64, Q3Row>,
    ) -> Result<()> {
        match ctx.value(&SELLER).get()? {
            Some(p) => ctx.emit(Self::row(&p, a.id)),
            None => ctx.list(&WAITING_AUCTIONS).add(a.id),
        }
    }
}

/// q3, local item suggestion: who sells in category 10 from Oregon, Idaho or California, and
/// which auctions (a regular inner join of persons and auctions on the seller):
///
/// ```sql
/// SELECT P.name, P.city, P.state, A.id
/// FROM auction AS A INNER JOIN person AS P on A.seller = P.id
/// WHERE A.category = 10 and (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA');
/// ```
///
/// Both sides are filtered before the join; the selected persons stay in keyed state (a regular
/// join keeps its inputs; there is no TTL), auctions only until their seller arrives.
pub fn q3(events: &DataStream<Event>) -> DataStream<Q3Row> {
    let sellers = persons(events).filter(|p| q3_state(&p.state));
    let items = auctions(events).filter(|a| a.category == 10);
    sellers
        .key_by(|p| p.id)
        .connect(&items.key_by(|a| a.seller))
        .process_function(LocalItems)
        .name("q3")
        .uid("q3")
}

// ---------------------------------------------------------------------------------------------
// q20: bids ⋈ auctions (regular inner join)

/// Row of q20: the bid's columns, then its auction's.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct Q20Row {
    pub auction: i64,
    pub bidder: i64,
    pub price: i64,
    pub channel: String,
    pub url: String,
    #[serde(rename = "bid_dateTime")]
    pub bid_date_time: Timestamp,
    pub bid_extra: String,
    #[serde(rename = "itemName")]
    pub item_name: String,
    pub description: String,
    #[serde(rename = "initialBid")]
    pub initial_bid: i64,
    pub reserve: i64,
    #[serde(rename = "auction_dateTime")]
    pub auction_date_time: Timestamp,
    pub expires: Timestamp,
    pub seller: i64,
    pub category: i64,
    pub auction_extra: String,
}

impl Q20Row {
    fn of(b: Bid, a: &Auction) -> Self {
        Q20Row {
            auction: b.auction,
            bidder: b.bidder,
            price: b.price,
            channel: b.channel,
            url: b.url,
            bid_date_time: b.date_time,
            bid_extra: b.extra,
            item_name: a.item_name.clone(),
            description: a.description.clone(),
            initial_bid: a.initial_bid,
            reserve: a.reserve,
            auction_date_time: a.date_time,
            expires: a.expires,
            seller: a.seller,
            category: a.category,
            auction_extra: a.extra.clone(),
        }
    }
}

/// The auction of q20's key: `Some(auction)` in category 10, `None` for another category (its
/// bids are dropped at once instead of waiting forever).
static AUCTION_IF_10: ValueStateDescriptor<Option<Auction>> =
    ValueStateDescriptor::new("auction-if-10");
static WAITING_BIDS: ListStateDescriptor<Bid> = ListStateDescriptor::new("waiting-bids");

/// q20's join, keyed by auction id.
#[derive(Clone)]
struct ExpandBids;

impl KeyedCoProcessFunction<i64, Bid, Auction, Q20Row> for ExpandBids {
    fn process_element1(
        &mut self,
        _: &i64,
        b: Bid,
        ctx: &mut KeyedContext<'_, '_, i64, Q20Row>,
    ) -> Result<()> {
        match ctx.value(&AUCTION_IF_10).get()? {
            Some(Some(a)) => ctx.emit(Q20Row::of(b, &a)),
            Some(None) => Ok(()),
            None => ctx.list(&WAITING_BIDS).add(b),
        }
    }

    fn process_element2(
        &mut self,
        _: &i64,
        a: Auction,
        ctx: &mut KeyedContext<'_, '_, i64, Q20Row>,
    ) -> Result<()> {
        let waiting = ctx.list(&WAITING_BIDS).get()?;
        if !waiting.is_empty() {
            ctx.list(&WAITING_BIDS).clear()?;
        }
        if a.category == 10 {
            for b in waiting {
                ctx.emit(Q20Row::of(b, &a))?;
            }
            ctx.value(&AUCTION_IF_10).set(Some(a))
        } else {
            ctx.value(&AUCTION_IF_10).set(None)
        }
    }
}

/// q20, expand bid with auction: the bids of category-10 auctions, with their auction's columns
/// (a regular inner join of bids and auctions on the auction id):
///
/// ```sql
/// SELECT auction, bidder, price, channel, url, B.dateTime, B.extra,
///     itemName, description, initialBid, reserve, A.dateTime, expires, seller, category, A.extra
/// FROM bid AS B INNER JOIN auction AS A on B.auction = A.id WHERE A.category = 10;
/// ```
///
/// Keyed by auction id, over one stream of bids and auctions (a split's order is kept). An
/// auction stays in keyed state (bids may come at any time); of an auction in another category
/// only a marker stays, so its bids are dropped on arrival. A bid that comes before its auction
/// waits in a list.
pub fn q20(events: &DataStream<Event>) -> DataStream<Q20Row> {
    bids_and_auctions(events)
        .key_by(|e| match e {
            Either::Left(b) => b.auction,
            Either::Right(a) => a.id,
        })
        .process_function(OneInput(ExpandBids))
        .name("q20")
        .uid("q20")
}

// ---------------------------------------------------------------------------------------------
// Winning bids: the core of q4, q6 and q9

/// The order of the bids of an auction in q9: `ORDER BY B.price DESC, B.dateTime ASC`, ties
/// broken by bidder, channel, url and extra (the SQL leaves them to arrival order, which
/// differs between parallel runs). The least is the winner.
fn winner_order(b: &Bid) -> (std::cmp::Reverse<i64>, Timestamp, i64, &str, &str, &str) {
    (
        std::cmp::Reverse(b.price),
        b.date_time,
        b.bidder,
        &b.channel,
        &b.url,
        &b.extra,
    )
}

/// A bid, or what a join keeps of one: its event time, and the order of bids.
trait At {
    fn at(&self) -> Timestamp;
    /// Whether this bid wins over `other` (of the same auction).
    fn beats(&self, other: &Self) -> bool;
}

impl At for Bid {
    fn at(&self) -> Timestamp {
        self.date_time
    }
    fn beats(&self, other: &Self) -> bool {
        winner_order(self) < winner_order(other)
    }
}

/// What q4 and q6 need of a bid: its auction, price and time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct PriceAt {
    auction: i64,
    price: i64,
    date_time: Timestamp,
}

impl At for PriceAt {
    fn at(&self) -> Timestamp {
        self.date_time
    }
    fn beats(&self, other: &Self) -> bool {
        self.price > other.price
    }
}

/// The record of one auction in a winning-bids join that every bid of it reads: small, so a
/// bid costs one lookup of a few dozen bytes (the auction's other columns and the best bid, if
/// the query needs them, are kept apart and read when the auction closes).
#[derive(Clone, Debug, Serialize, Deserialize)]
enum Life<W, B, T> {
    /// The auction has not come yet: the bids for it so far, each with a timer at its time.
    /// When the watermark passes a waiting bid, an auction it could match (one that starts at or
    /// before the bid) can only come late, so the bid is dropped.
    Waiting(Vec<W>),
    /// The auction is open: its lifetime, what the query keeps of it (`tag`), and the best bid
    /// so far as far as the order of bids needs it (`best`).
    Open {
        start: Timestamp,
        expires: Timestamp,
        best: Option<B>,
        tag: T,
    },
}

impl<W: At, B, T> Life<W, B, T> {
    /// Adds a bid that came before its auction, with a timer that drops it when the watermark
    /// passes it. Of the waiting bids with the same time only the best is kept: any lifetime
    /// holds both or neither, so the other can never win. `None`: nothing changed.
    fn wait<K, O>(
        waiting: Option<Vec<W>>,
        bid: W,
        ctx: &mut KeyedContext<'_, '_, K, O>,
    ) -> Option<Life<W, B, T>>
    where
        K: riffle::Data + std::hash::Hash + Eq,
        O: riffle::Data,
    {
        let mut waiting = waiting.unwrap_or_default();
        match waiting.iter_mut().find(|w| w.at() == bid.at()) {
            Some(same) if bid.beats(same) => *same = bid,
            Some(_) => return None,
            None => {
                ctx.register_event_time_timer(bid.at());
                waiting.push(bid);
            }
        }
        Some(Life::Waiting(waiting))
    }

    /// The bids that waited for the auction that came now (their timers are deleted).
    fn arrived<K, O>(life: Option<Self>, ctx: &mut KeyedContext<'_, '_, K, O>) -> Vec<W>
    where
        K: riffle::Data + std::hash::Hash + Eq,
        O: riffle::Data,
    {
        match life {
            Some(Life::Waiting(waiting)) => {
                for w in &waiting {
                    ctx.delete_event_time_timer(w.at());
                }
                waiting
            }
            // An auction id comes once; a second one replaces the first.
            _ => Vec::new(),
        }
    }

    /// The waiting bids still in time when the watermark reaches `at`.
    fn purge(mut waiting: Vec<W>, at: Timestamp) -> Option<Self> {
        waiting.retain(|w| w.at() > at);
        (!waiting.is_empty()).then_some(Life::Waiting(waiting))
    }
}

/// Whether `t` is within the lifetime `[start, expires]`
/// (`B.dateTime BETWEEN A.dateTime AND A.expires`).
fn in_lifetime(start: Timestamp, expires: Timestamp, t: Timestamp) -> bool {
    start <= t && t <= expires
}

/// Writes a value state, or clears it (`None`).
fn store<K, O, V>(
    ctx: &mut KeyedContext<'_, '_, K, O>,
    descriptor: &ValueStateDescriptor<V>,
    value: Option<V>,
) -> Result<()>
where
    K: riffle::Data + std::hash::Hash + Eq,
    O: riffle::Data,
    V: riffle::Data,
{
    match value {
        Some(v) => ctx.value(descriptor).set(v),
        None => ctx.value(descriptor).clear(),
    }
}

/// What q9 keeps of an open auction per bid: its lifetime and its best bid's price and time
/// (the full best bid is read only on a tie of both).
type BidLife = Life<Bid, (i64, Timestamp), ()>;

static BID_LIFE: ValueStateDescriptor<BidLife> = ValueStateDescriptor::new("life");
static OPEN_AUCTION: ValueStateDescriptor<Auction> = ValueStateDescriptor::new("open-auction");
static BEST_BID: ValueStateDescriptor<Bid> = ValueStateDescriptor::new("best-bid");

/// The winning-bids join of q9, keyed by auction id: bids (first input) of auctions (second).
#[derive(Clone)]
struct WinningBids;

type WonCtx<'c, 'o> = KeyedContext<'c, 'o, i64, (Auction, Bid)>;

impl KeyedCoProcessFunction<i64, Bid, Auction, (Auction, Bid)> for WinningBids {
    fn process_element1(&mut self, _: &i64, b: Bid, ctx: &mut WonCtx<'_, '_>) -> Result<()> {
        let life = match ctx.value(&BID_LIFE).get()? {
            Some(Life::Open {
                start,
                expires,
                best,
                tag,
            }) => {
                if !in_lifetime(start, expires, b.date_time) {
                    return Ok(());
                }
                let wins = match best {
                    None => true,
                    Some((price, _)) if b.price != price => b.price > price,
                    Some((_, time)) if b.date_time != time => b.date_time < time,
                    // Same price and time: the rest of the order decides.
                    Some(_) => match ctx.value(&BEST_BID).get()? {
                        Some(w) => winner_order(&b) < winner_order(&w),
                        None => true,
                    },
                };
                if !wins {
                    return Ok(());
                }
                let life = Life::Open {
                    start,
                    expires,
                    best: Some((b.price, b.date_time)),
                    tag,
                };
                ctx.value(&BEST_BID).set(b)?;
                life
            }
            Some(Life::Waiting(waiting)) => match Life::wait(Some(waiting), b, ctx) {
                Some(life) => life,
                None => return Ok(()),
            },
            None => Life::wait(None, b, ctx).expect("a first bid waits"),
        };
        ctx.value(&BID_LIFE).set(life)
    }

    fn process_element2(&mut self, _: &i64, a: Auction, ctx: &mut WonCtx<'_, '_>) -> Result<()> {
        let life = ctx.value(&BID_LIFE).get()?;
        let best = Life::arrived(life, ctx)
            .into_iter()
            .filter(|b| in_lifetime(a.date_time, a.expires, b.date_time))
            .min_by(|x, y| winner_order(x).cmp(&winner_order(y)));
        // Fires when the watermark reaches `expires`: every bid at or before it has come.
        ctx.register_event_time_timer(a.expires);
        ctx.value(&BID_LIFE).set(Life::Open {
            start: a.date_time,
            expires: a.expires,
            best: best.as_ref().map(|b| (b.price, b.date_time)),
            tag: (),
        })?;
        ctx.value(&OPEN_AUCTION).set(a)?;
        store(ctx, &BEST_BID, best)
    }

    fn on_timer(
        &mut self,
        _: &i64,
        at: Timestamp,
        _: TimeDomain,
        ctx: &mut WonCtx<'_, '_>,
    ) -> Result<()> {
        // The close reads the auction and its best bid, not the per-bid record.
        match ctx.value(&OPEN_AUCTION).get()? {
            Some(a) if at >= a.expires => {
                let best = ctx.value(&BEST_BID).get()?;
                ctx.value(&BID_LIFE).clear()?;
                ctx.value(&OPEN_AUCTION).clear()?;
                if let Some(b) = best {
                    ctx.value(&BEST_BID).clear()?;
                    ctx.emit((a, b))?;
                }
                Ok(())
            }
            Some(_) => Ok(()),
            None => match ctx.value(&BID_LIFE).get()? {
                Some(Life::Waiting(waiting)) => store(ctx, &BID_LIFE, Life::purge(waiting, at)),
                _ => Ok(()),
            },
        }
    }
}

/// Each auction with its winning bid, emitted when the auction closes (the watermark passes
/// its `expires`; the end of a bounded input closes the rest), at event time `expires`: the
/// highest bid within the auction's lifetime (`B.dateTime BETWEEN A.dateTime AND A.expires`),
/// ties as q9's `ORDER BY price DESC, dateTime ASC` then bidder, channel, url, extra. Auctions
/// without such a bid give no row (an inner join).
///
/// A keyed operator by auction id over one stream of bids and auctions (so a split's order is
/// kept: an auction comes before the bids generated after it). Per auction a small record that every bid reads
/// (its lifetime, and the price and time of its best bid so far); the auction and its best bid
/// apart, written when they change and read when the auction closes; a timer at `expires`.
/// After the close the auction's state is gone. Bids that come before their auction wait (a
/// timer at each drops it once the watermark passes it: its auction could only come late).
pub fn winning_bids(events: &DataStream<Event>) -> DataStream<(Auction, Bid)> {
    bids_and_auctions(events)
        .key_by(|e| match e {
            Either::Left(b) => b.auction,
            Either::Right(a) => a.id,
        })
        .process_function(OneInput(WinningBids))
        .name("winning bids")
        .uid("winning-bids")
}

/// An auction with its winning price (q4's `MAX(B.price)`, q6's top-1 price), from
/// [`winning_prices`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WinningPrice {
    /// The auction's id.
    pub id: i64,
    /// What the query kept of the auction (q4: its category; q6: its seller).
    pub tag: i64,
    /// When the auction closed.
    pub expires: Timestamp,
    /// The highest price bid within its lifetime.
    pub price: i64,
}

/// What q4 and q6 keep of an open auction: its lifetime, the highest price so far and the tag.
type PriceLife = Life<PriceAt, i64, i64>;

static PRICE_LIFE: ValueStateDescriptor<PriceLife> = ValueStateDescriptor::new("price-life");

/// An auction as q4 and q6 need it: id, lifetime, tag.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct Lifetime {
    id: i64,
    start: Timestamp,
    expires: Timestamp,
    tag: i64,
}

/// The winning-price join, keyed by auction id: one small record per auction.
#[derive(Clone)]
struct WinningPrices;

type PriceCtx<'c, 'o> = KeyedContext<'c, 'o, i64, WinningPrice>;

impl KeyedCoProcessFunction<i64, PriceAt, Lifetime, WinningPrice> for WinningPrices {
    fn process_element1(&mut self, _: &i64, b: PriceAt, ctx: &mut PriceCtx<'_, '_>) -> Result<()> {
        let life = match ctx.value(&PRICE_LIFE).get()? {
            Some(Life::Open {
                start,
                expires,
                best,
                tag,
            }) => {
                if !in_lifetime(start, expires, b.date_time) || best.is_some_and(|p| p >= b.price) {
                    return Ok(());
                }
                Life::Open {
                    start,
                    expires,
                    best: Some(b.price),
                    tag,
                }
            }
            Some(Life::Waiting(waiting)) => match Life::wait(Some(waiting), b, ctx) {
                Some(life) => life,
                None => return Ok(()),
            },
            None => Life::wait(None, b, ctx).expect("a first bid waits"),
        };
        ctx.value(&PRICE_LIFE).set(life)
    }

    fn process_element2(&mut self, _: &i64, a: Lifetime, ctx: &mut PriceCtx<'_, '_>) -> Result<()> {
        let life = ctx.value(&PRICE_LIFE).get()?;
        let best = Life::arrived(life, ctx)
            .into_iter()
            .filter(|b| in_lifetime(a.start, a.expires, b.date_time))
            .map(|b| b.price)
            .max();
        ctx.register_event_time_timer(a.expires);
        ctx.value(&PRICE_LIFE).set(Life::Open {
            start: a.start,
            expires: a.expires,
            best,
            tag: a.tag,
        })
    }

    fn on_timer(
        &mut self,
        id: &i64,
        at: Timestamp,
        _: TimeDomain,
        ctx: &mut PriceCtx<'_, '_>,
    ) -> Result<()> {
        match ctx.value(&PRICE_LIFE).get()? {
            Some(Life::Open {
                expires, best, tag, ..
            }) if at >= expires => {
                ctx.value(&PRICE_LIFE).clear()?;
                match best {
                    Some(price) => ctx.emit(WinningPrice {
                        id: *id,
                        tag,
                        expires,
                        price,
                    }),
                    None => Ok(()),
                }
            }
            Some(Life::Waiting(waiting)) => store(ctx, &PRICE_LIFE, Life::purge(waiting, at)),
            _ => Ok(()),
        }
    }
}

/// Each auction with its winning price, as [`winning_bids`] but keeping only what q4 and q6
/// need: per auction one record of a few dozen bytes (its lifetime, the highest price so far,
/// and `tag(auction)`), read by every bid and written when the price rises. Bids and auctions
/// are cut down to those columns before they are shuffled.
pub fn winning_prices(
    events: &DataStream<Event>,
    tag: impl Fn(&Auction) -> i64 + Clone + Send + Sync + 'static,
) -> DataStream<WinningPrice> {
    events
        .flat_map(move |e| match e {
            Event::Bid(b) => Some(Either::Left(PriceAt {
                auction: b.auction,
                price: b.price,
                date_time: b.date_time,
            })),
            Event::Auction(a) => Some(Either::Right(Lifetime {
                id: a.id,
                start: a.date_time,
                expires: a.expires,
                tag: tag(&a),
            })),
            Event::Person(_) => None,
        })
        .name("bid prices and auction lifetimes")
        .key_by(|e| match e {
            Either::Left(b) => b.auction,
            Either::Right(a) => a.id,
        })
        .process_function(OneInput(WinningPrices))
        .name("winning prices")
        .uid("winning-prices")
}

/// Row of q9: the auction's columns, then its winning bid's.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct Q9Row {
    pub id: i64,
    #[serde(rename = "itemName")]
    pub item_name: String,
    pub description: String,
    #[serde(rename = "initialBid")]
    pub initial_bid: i64,
    pub reserve: i64,
    #[serde(rename = "dateTime")]
    pub date_time: Timestamp,
    pub expires: Timestamp,
    pub seller: i64,
    pub category: i64,
    pub extra: String,
    pub auction: i64,
    pub bidder: i64,
    pub price: i64,
    #[serde(rename = "bid_dateTime")]
    pub bid_date_time: Timestamp,
    pub bid_extra: String,
}

/// q9, winning bids: each auction with its winning bid.
///
/// ```sql
/// SELECT id, itemName, description, initialBid, reserve, dateTime, expires, seller, category,
///     extra, auction, bidder, price, bid_dateTime, bid_extra
/// FROM (SELECT A.*, B.auction, B.bidder, B.price, B.dateTime AS bid_dateTime,
///         B.extra AS bid_extra,
///         ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.dateTime ASC) AS rownum
///       FROM auction A, bid B
///       WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires)
/// WHERE rownum <= 1;
/// ```
///
/// One final row per auction when it closes (see [`winning_bids`]), where Flink's top-1
/// emits a changelog that ends with the same row.
pub fn q9(events: &DataStream<Event>) -> DataStream<Q9Row> {
    winning_bids(events)
        .map(|(a, b)| Q9Row {
            id: a.id,
            item_name: a.item_name,
            description: a.description,
            initial_bid: a.initial_bid,
            reserve: a.reserve,
            date_time: a.date_time,
            expires: a.expires,
            seller: a.seller,
            category: a.category,
            extra: a.extra,
            auction: b.auction,
            bidder: b.bidder,
            price: b.price,
            bid_date_time: b.date_time,
            bid_extra: b.extra,
        })
        .name("q9")
}

/// Row of q4: a category and the average winning price of its auctions so far.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Q4Row {
    /// The category.
    pub id: i64,
    /// `AVG(final)` of a `BIGINT`: the sum divided by the count, truncated.
    #[serde(rename = "final")]
    pub final_price: i64,
}

static CATEGORY_SUM: ValueStateDescriptor<(i64, i64)> = ValueStateDescriptor::new("category-sum");

/// q4, average closing price per category:
///
/// ```sql
/// SELECT Q.category, AVG(Q.final)
/// FROM (SELECT MAX(B.price) AS final, A.category FROM auction A, bid B
///       WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires
///       GROUP BY A.id, A.category) Q
/// GROUP BY Q.category;
/// ```
///
/// The winning price of an auction is final when it closes ([`winning_prices`]); per category a
/// keyed sum and count give the average, emitted as a changelog row (`+I`, then `+U`) at each
/// closed auction. The last row of a category is the result.
pub fn q4(events: &DataStream<Event>) -> DataStream<Change<Q4Row>> {
    winning_prices(events, |a| a.category)
        .key_by(|w| w.tag)
        .process(|category, WinningPrice { price, .. }, ctx| {
            let mut state = ctx.value(&CATEGORY_SUM);
            let before = state.get()?;
            let (sum, count) = before.unwrap_or((0, 0));
            let (sum, count) = (sum + price, count + 1);
            state.set((sum, count))?;
            ctx.emit(Change::new(
                before.is_none(),
                Q4Row {
                    id: *category,
                    final_price: sum / count,
                },
            ))
        })
        .name("q4")
        .uid("q4")
}

/// How many closed auctions q6 averages: the SQL's `ROWS BETWEEN 10 PRECEDING AND CURRENT ROW`,
/// the current one and the 10 before it (Beam's original Query 6 says "the last 10").
pub const Q6_ROWS: usize = 11;

/// Row of q6.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Q6Row {
    /// The seller.
    pub seller: i64,
    /// Average winning price of the seller's latest closed auctions (integer average).
    pub avg_price: i64,
}

/// A closed auction on its way to q6's per-seller average.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
struct Closed {
    expires: Timestamp,
    id: i64,
    seller: i64,
    price: i64,
}

static CLOSED_WAITING: ListStateDescriptor<Closed> = ListStateDescriptor::new("closed-waiting");
static LATEST_PRICES: ValueStateDescriptor<Vec<i64>> = ValueStateDescriptor::new("latest-prices");

/// q6, average selling price by seller over its latest closed auctions:
///
/// ```sql
/// SELECT Q.seller, AVG(Q.price) OVER
///     (PARTITION BY Q.seller ORDER BY Q.dateTime ROWS BETWEEN 10 PRECEDING AND CURRENT ROW)
/// FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY A.id, A.seller ORDER BY B.price DESC) AS rownum
///       FROM (SELECT A.id, A.seller, B.price, B.dateTime FROM auction AS A, bid AS B
///             WHERE A.id = B.auction and B.dateTime between A.dateTime and A.expires)
///       WHERE rownum <= 1) AS Q;
/// ```
///
/// Flink cannot run this SQL (its OVER window does not take the top-1's retractions; the
/// project's file says so). Here, as in Beam's Query 6, the seller's auctions are taken in the
/// order they close, `(expires, id)`, which is final: each closed auction ([`winning_prices`])
/// waits, keyed by seller, until the watermark reaches its `expires` (all auctions closing at or
/// before it have come), then in that order gives one row: the integer average winning price of
/// it and the seller's [`Q6_ROWS`]` - 1` closed auctions before it.
pub fn q6(events: &DataStream<Event>) -> DataStream<Q6Row> {
    winning_prices(events, |a| a.seller)
        .map(|w| Closed {
            expires: w.expires,
            id: w.id,
            seller: w.tag,
            price: w.price,
        })
        .name("q6 closed")
        .key_by(|c| c.seller)
        .process_with_timers(
            |_, closed, ctx| {
                ctx.register_event_time_timer(closed.expires);
                ctx.list(&CLOSED_WAITING).add(closed)
            },
            |seller, at, _, ctx| {
                let (mut due, rest): (Vec<Closed>, Vec<Closed>) = ctx
                    .list(&CLOSED_WAITING)
                    .get()?
                    .into_iter()
                    .partition(|c| c.expires <= at);
                if rest.is_empty() {
                    ctx.list(&CLOSED_WAITING).clear()?;
                } else {
                    ctx.list(&CLOSED_WAITING).update(rest)?;
                }
                due.sort();
                let mut latest = ctx.value(&LATEST_PRICES).get()?.unwrap_or_default();
                for c in due {
                    if latest.len() == Q6_ROWS {
                        latest.remove(0);
                    }
                    latest.push(c.price);
                    let avg = latest.iter().sum::<i64>() / latest.len() as i64;
                    ctx.emit(Q6Row {
                        seller: *seller,
                        avg_price: avg,
                    })?;
                }
                ctx.value(&LATEST_PRICES).set(latest)
            },
        )
        .name("q6")
        .uid("q6")
}

// ---------------------------------------------------------------------------------------------
// q7: the highest bids of each 10 s window

/// Window length of q7 and q8.
pub const WINDOW_MS: Timestamp = 10_000;

/// How many partial maxima q7 computes per window before the final one.
const Q7_BUCKETS: i64 = 64;

/// A bid on its way through q7: the end of the window it is compared with, and whether it is
/// one of the window's own bids (`false`: a bid at exactly the window's end, which the SQL's
/// inclusive `BETWEEN` also compares with the window's maximum).
type Q7Part = (Timestamp, bool, Bid);

static TOP_PRICE: ValueStateDescriptor<i64> = ValueStateDescriptor::new("top-price");
static TOP_PRICE_BIDS: ListStateDescriptor<Bid> = ListStateDescriptor::new("top-price-bids");
static EDGE_BIDS: ListStateDescriptor<Bid> = ListStateDescriptor::new("edge-bids");

/// Keeps a window's bids of the highest price so far (`own`), or an edge bid aside.
fn keep_top<K, O>(
    ctx: &mut KeyedContext<'_, '_, K, O>,
    end: Timestamp,
    own: bool,
    b: Bid,
) -> Result<()>
where
    K: riffle::Data + std::hash::Hash + Eq,
    O: riffle::Data,
{
    ctx.register_event_time_timer(end);
    if !own {
        return ctx.list(&EDGE_BIDS).add(b);
    }
    let top = ctx.value(&TOP_PRICE).get()?;
    match top {
        Some(p) if b.price < p => Ok(()),
        Some(p) if b.price == p => ctx.list(&TOP_PRICE_BIDS).add(b),
        _ => {
            ctx.value(&TOP_PRICE).set(b.price)?;
            ctx.list(&TOP_PRICE_BIDS).update(vec![b])
        }
    }
}

/// Takes a window's top bids and edge bids out of the state.
fn take_top<K, O>(ctx: &mut KeyedContext<'_, '_, K, O>) -> Result<(Vec<Bid>, Vec<Bid>)>
where
    K: riffle::Data + std::hash::Hash + Eq,
    O: riffle::Data,
{
    let top = ctx.list(&TOP_PRICE_BIDS).get()?;
    let edge = ctx.list(&EDGE_BIDS).get()?;
    ctx.value(&TOP_PRICE).clear()?;
    ctx.list(&TOP_PRICE_BIDS).clear()?;
    ctx.list(&EDGE_BIDS).clear()?;
    Ok((top, edge))
}

/// q7, highest bid: the bids of the highest price of each 10 s tumbling window:
///
/// ```sql
/// SELECT B.auction, B.bidder, B.price, B.dateTime, B.extra
/// from bid B
/// JOIN (SELECT MAX(price) AS maxprice, window_end as dateTime
///       FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
///       GROUP BY window_start, window_end) B1
/// ON B.price = B1.maxprice
/// WHERE B.dateTime BETWEEN B1.dateTime - INTERVAL '10' SECOND AND B1.dateTime;
/// ```
///
/// The join of the window maximum back to the bids needs no two-input operator: the bids that
/// can match a window's maximum are that window's bids (and a bid at exactly its end, which the
/// inclusive `BETWEEN` also compares), so the bids of the highest price are kept with the
/// maximum itself. Two keyed stages: per window and auction bucket (64 buckets, spreading a
/// window over the subtasks) the bids of the highest price; per window the highest of those,
/// with the edge bids of that price. Each stage emits when the watermark reaches the window's
/// end; rows carry the window's end as event time.
pub fn q7(events: &DataStream<Event>) -> DataStream<super::Q0Row> {
    let parts = bids(events)
        .flat_map(|b| {
            let end = b.date_time - b.date_time.rem_euclid(WINDOW_MS) + WINDOW_MS;
            let edge =
                (b.date_time.rem_euclid(WINDOW_MS) == 0).then(|| (b.date_time, false, b.clone()));
            std::iter::once((end, true, b)).chain(edge)
        })
        .name("q7 windows");
    let own = parts.filter(|(_, own, _)| *own);
    let edge = parts.filter(|(_, own, _)| !*own);
    let partial = own
        .key_by(|(end, _, b)| (*end, b.auction.rem_euclid(Q7_BUCKETS)))
        .process_with_timers(
            |_, (end, own, b): Q7Part, ctx| keep_top(ctx, end, own, b),
            |&(end, _), _, _, ctx| {
                let (top, _) = take_top(ctx)?;
                for b in top {
                    ctx.emit((end, true, b))?;
                }
                Ok(())
            },
        )
        .name("q7 partial max")
        .uid("q7-partial-max");
    partial
        .union(&[&edge])
        .key_by(|(end, _, _)| *end)
        .process_with_timers(
            |_, (end, own, b): Q7Part, ctx| keep_top(ctx, end, own, b),
            |_, _, _, ctx| {
                let Some(max) = ctx.value(&TOP_PRICE).get()? else {
                    take_top(ctx)?;
                    return Ok(());
                };
                let (top, edge) = take_top(ctx)?;
                for b in top
                    .into_iter()
                    .chain(edge.into_iter().filter(|b| b.price == max))
                {
                    ctx.emit(super::Q0Row {
                        auction: b.auction,
                        bidder: b.bidder,
                        price: b.price,
                        date_time: b.date_time,
                        extra: b.extra,
                    })?;
                }
                Ok(())
            },
        )
        .name("q7")
        .uid("q7")
}

// ---------------------------------------------------------------------------------------------
// q8: persons and their auctions in the same 10 s window (window join)

/// Row of q8.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Q8Row {
    /// The person's id.
    pub id: i64,
    /// The person's name.
    pub name: String,
    /// The window's start, epoch ms.
    pub stime: Timestamp,
}

static NEW_PERSON: ValueStateDescriptor<String> = ValueStateDescriptor::new("new-person");
static HAS_AUCTION: ValueStateDescriptor<bool> = ValueStateDescriptor::new("has-auction");

/// q8's window join, keyed by (person id = seller, window start).
#[derive(Clone)]
struct NewUsers;

impl NewUsers {
    fn close_at(ctx: &mut KeyedContext<'_, '_, (i64, Timestamp), Q8Row>, start: Timestamp) {
        // The window's last millisecond: fires when the watermark passes the window.
        ctx.register_event_time_timer(start + WINDOW_MS - 1);
    }
}

impl KeyedCoProcessFunction<(i64, Timestamp), Person, Auction, Q8Row> for NewUsers {
    fn process_element1(
        &mut self,
        &(_, start): &(i64, Timestamp),
        p: Person,
        ctx: &mut KeyedContext<'_, '_, (i64, Timestamp), Q8Row>,
    ) -> Result<()> {
        Self::close_at(ctx, start);
        ctx.value(&NEW_PERSON).set(p.name)
    }

    fn process_element2(
        &mut self,
        &(_, start): &(i64, Timestamp),
        _: Auction,
        ctx: &mut KeyedContext<'_, '_, (i64, Timestamp), Q8Row>,
    ) -> Result<()> {
        Self::close_at(ctx, start);
        ctx.value(&HAS_AUCTION).set(true)
    }

    fn on_timer(
        &mut self,
        &(id, start): &(i64, Timestamp),
        _: Timestamp,
        _: TimeDomain,
        ctx: &mut KeyedContext<'_, '_, (i64, Timestamp), Q8Row>,
    ) -> Result<()> {
        let name = ctx.value(&NEW_PERSON).get()?;
        let sold = ctx.value(&HAS_AUCTION).get()?.unwrap_or(false);
        ctx.value(&NEW_PERSON).clear()?;
        ctx.value(&HAS_AUCTION).clear()?;
        match name {
            Some(name) if sold => ctx.emit(Q8Row {
                id,
                name,
                stime: start,
            }),
            _ => Ok(()),
        }
    }
}

/// The start of the 10 s tumbling window of `t`.
fn window_start(t: Timestamp) -> Timestamp {
    t - t.rem_euclid(WINDOW_MS)
}

/// q8, monitor new users: the persons who entered the system and opened an auction in the same
/// 10 s tumbling window:
///
/// ```sql
/// SELECT P.id, P.name, P.starttime
/// FROM (SELECT id, name, window_start AS starttime, window_end AS endtime
///       FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
///       GROUP BY id, name, window_start, window_end) P
/// JOIN (SELECT seller, window_start AS starttime, window_end AS endtime
///       FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
///       GROUP BY seller, window_start, window_end) A
/// ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime;
/// ```
///
/// A window join on the connect API: persons keyed by (id, window start), auctions by
/// (seller, window start); the key keeps the person's name and whether an auction came, and a
/// timer at the window's end emits the row (one per person and window, as the `GROUP BY`s make
/// both sides distinct) and clears the key.
pub fn q8(events: &DataStream<Event>) -> DataStream<Q8Row> {
    persons(events)
        .key_by(|p| (p.id, window_start(p.date_time)))
        .connect(&auctions(events).key_by(|a| (a.seller, window_start(a.date_time))))
        .process_function(NewUsers)
        .name("q8")
        .uid("q8")
}

// ---------------------------------------------------------------------------------------------
// q13: bids ⋈ a bounded side table

/// Size of q13's side table: keys `0..Q13_SIDE_ROWS` (the SQL's `mod(B.auction, 10000)`).
pub const Q13_SIDE_ROWS: i64 = 10_000;

/// The value of key `key` in q13's side table (the project reads it from a CSV file,
/// `side_input.txt`; here it is generated, the same on every run: `"value-<key>"`).
pub fn q13_side_value(key: i64) -> String {
    format!("value-{key}")
}

/// Row of q13.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Q13Row {
    /// Auction id.
    pub auction: i64,
    /// Bidder id.
    pub bidder: i64,
    /// Price, cents.
    pub price: i64,
    /// Event time, epoch ms.
    #[serde(rename = "dateTime")]
    pub date_time: Timestamp,
    /// The side table's value for `auction % 10000`.
    pub value: String,
}

/// q13, bounded side input join: each bid with the side table's value of `auction % 10000`.
///
/// ```sql
/// SELECT B.auction, B.bidder, B.price, B.dateTime, S.`value`
/// FROM (SELECT *, PROCTIME() as p_time FROM bid) B
/// JOIN side_input FOR SYSTEM_TIME AS OF B.p_time AS S ON mod(B.auction, 10000) = S.key;
/// ```
///
/// The side table is static ([`q13_side_value`] for keys 0 to 9 999), built once when the job
/// is defined and shared by every subtask; the lookup join is then a map. (A processing-time
/// temporal join of a table that never changes sees the same table at every time.)
pub fn q13(events: &DataStream<Event>) -> DataStream<Q13Row> {
    let side: std::sync::Arc<Vec<String>> =
        std::sync::Arc::new((0..Q13_SIDE_ROWS).map(q13_side_value).collect());
    bids(events)
        .flat_map(move |b| {
            let key = b.auction.rem_euclid(Q13_SIDE_ROWS);
            side.get(key as usize).map(|value| Q13Row {
                auction: b.auction,
                bidder: b.bidder,
                price: b.price,
                date_time: b.date_time,
                value: value.clone(),
            })
        })
        .name("q13")
}
