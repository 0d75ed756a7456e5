//! A suite for savepoints across a new version of a job on any [`StateBackend`]: job v1 keeps a
//! value, a list and a map state per user, stops with a savepoint part-way, and job v2 — whose
//! state types changed — restores it and reads the rest of the input
//! ([`check_state_evolution`]):
//!
//! - fields added with `#[serde(default)]` and an integer widened: the counts continue exactly;
//! - fields renamed, with a new version and migrations: the counts continue exactly;
//! - a field whose type changed with neither: the restore fails with
//!   [`Error::IncompatibleState`] naming the operator's uid, the state and both versions, and the
//!   job is not restarted into the same failure;
//! - a savepoint of version 2 restored by version 1 fails the same way.
//!
//! ```no_run
//! # use std::sync::Arc;
//! let work = std::env::temp_dir().join("evolution");
//! riffle_testing::evolution::check_state_evolution(Arc::new(riffle::state::HeapBackend), &work);
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use riffle::checkpoint::{CheckpointConfig, RestartStrategy, RestoreFrom};
use riffle::metrics::MetricsSnapshot;
use riffle::operators::KeyedContext;
use riffle::sink::CollectSink;
use riffle::source::datagen::{DatagenSource, Generator, ManualPaceClock, Schedule, mix};
use riffle::state::{
    ListStateDescriptor, MapStateDescriptor, StateBackend, StateValue, ValueStateDescriptor,
};
use riffle::time::WatermarkStrategy;
use riffle::window::{Session, Tumbling, Windows};
use riffle::{EnvConfig, Error, Result, StreamEnv};

/// Hits in the job.
const TOTAL: u64 = 6_000;
/// Pages a user's list state keeps.
const LAST: usize = 3;

/// A hit of a user on a page.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Hit {
    user: u64,
    page: u32,
}

/// 40 users on 7 pages, in one split (so each user's hits come in one order on every run).
struct Hits;

impl Generator for Hits {
    type Item = Hit;
    fn generate(&self, i: u64) -> Hit {
        Hit {
            user: mix(7, i, 1) % 40,
            page: (mix(7, i, 2) % 7) as u32,
        }
    }
    fn name(&self) -> String {
        "hits".into()
    }
}

/// What the job reports per hit: the user, their hits so far, their last pages (newest last)
/// and the sum of their per-page counts.
type Report = (u64, u64, Vec<u32>, u64);

/// Version 1's state types.
mod v1 {
    use super::*;

    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct Count {
        pub clicks: u64,
    }
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct Page {
        pub page: u32,
    }
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct PerPage {
        pub n: u32,
    }

    pub static COUNT: ValueStateDescriptor<Count> = ValueStateDescriptor::new("count");
    pub static PAGES: ListStateDescriptor<Page> = ListStateDescriptor::new("pages");
    pub static PER_PAGE: MapStateDescriptor<u32, PerPage> = MapStateDescriptor::new("per-page");
}

/// Version 2 with added fields (defaults) and a widened integer: the same state versions.
mod added {
    use super::*;

    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct Count {
        pub clicks: u64,
        #[serde(default)]
        pub first_page: Option<u32>,
    }
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct Page {
        pub page: u32,
        #[serde(default)]
        pub note: String,
    }
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct PerPage {
        pub n: u64,
        #[serde(default)]
        pub seen_twice: bool,
    }

    pub static COUNT: ValueStateDescriptor<Count> = ValueStateDescriptor::new("count");
    pub static PAGES: ListStateDescriptor<Page> = ListStateDescriptor::new("pages");
    pub static PER_PAGE: MapStateDescriptor<u32, PerPage> = MapStateDescriptor::new("per-page");
}

/// Version 2 with renamed fields: version 2 of each state, with migrations from version 1.
mod renamed {
    use super::*;

    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct Count {
        /// Which version wrote the count last ("v1" through the migration).
        pub origin: String,
        pub total: u64,
    }
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct Page {
        pub id: u32,
    }
    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct PerPage {
        pub hits: u64,
    }

    fn count(old: StateValue, _from: u32) -> Result<Count> {
        let old: v1::Count = old.deserialize()?;
        Ok(Count {
            origin: "v1".into(),
            total: old.clicks,
        })
    }
    fn page(old: StateValue, _from: u32) -> Result<Page> {
        let old: v1::Page = old.deserialize()?;
        Ok(Page { id: old.page })
    }
    fn per_page(old: StateValue, _from: u32) -> Result<PerPage> {
        let n = old.field("n").ok_or_else(|| Error::user("no field n"))?;
        Ok(PerPage {
            hits: n.deserialize()?,
        })
    }

    pub static COUNT: ValueStateDescriptor<Count> = ValueStateDescriptor::new("count")
        .with_version(2)
        .with_migration(count);
    pub static PAGES: ListStateDescriptor<Page> = ListStateDescriptor::new("pages")
        .with_version(2)
        .with_migration(page);
    pub static PER_PAGE: MapStateDescriptor<u32, PerPage> = MapStateDescriptor::new("per-page")
        .with_version(2)
        .with_migration(per_page);
}

/// Version 2 with a field whose type changed, and neither a new version nor a migration.
mod broken {
    use super::*;

    #[derive(Clone, Debug, Serialize, Deserialize)]
    pub struct Count {
        pub clicks: String,
    }

    pub static COUNT: ValueStateDescriptor<Count> = ValueStateDescriptor::new("count");
}

/// Keeps the last [`LAST`] pages of `pages` with `page` added.
fn last_pages<P>(mut pages: Vec<P>, page: P) -> Vec<P> {
    pages.push(page);
    let cut = pages.len().saturating_sub(LAST);
    pages.split_off(cut)
}

/// Job v1's function.
fn count_v1(user: &u64, hit: Hit, ctx: &mut KeyedContext<'_, '_, u64, Report>) -> Result<()> {
    let clicks = ctx.value(&v1::COUNT).get()?.map_or(0, |c| c.clicks) + 1;
    ctx.value(&v1::COUNT).set(v1::Count { clicks })?;
    let pages = last_pages(ctx.list(&v1::PAGES).get()?, v1::Page { page: hit.page });
    ctx.list(&v1::PAGES).update(pages.clone())?;
    let n = ctx.map(&v1::PER_PAGE).get(&hit.page)?.map_or(0, |p| p.n) + 1;
    ctx.map(&v1::PER_PAGE).put(hit.page, v1::PerPage { n })?;
    let sum = ctx
        .map(&v1::PER_PAGE)
        .entries()?
        .iter()
        .map(|(_, p)| p.n as u64)
        .sum();
    ctx.emit((*user, clicks, pages.iter().map(|p| p.page).collect(), sum))
}

/// Job v2's function with added fields.
fn count_added(user: &u64, hit: Hit, ctx: &mut KeyedContext<'_, '_, u64, Report>) -> Result<()> {
    let old = ctx.value(&added::COUNT).get()?;
    let count = added::Count {
        clicks: old.as_ref().map_or(0, |c| c.clicks) + 1,
        first_page: old.and_then(|c| c.first_page).or(Some(hit.page)),
    };
    ctx.value(&added::COUNT).set(count.clone())?;
    let page = added::Page {
        page: hit.page,
        note: String::new(),
    };
    let pages = last_pages(ctx.list(&added::PAGES).get()?, page);
    ctx.list(&added::PAGES).update(pages.clone())?;
    let old = ctx.map(&added::PER_PAGE).get(&hit.page)?;
    let per_page = added::PerPage {
        n: old.as_ref().map_or(0, |p| p.n) + 1,
        seen_twice: old.is_some(),
    };
    ctx.map(&added::PER_PAGE).put(hit.page, per_page)?;
    let sum = ctx
        .map(&added::PER_PAGE)
        .entries()?
        .iter()
        .map(|(_, p)| p.n)
        .sum();
    ctx.emit((
        *user,
        count.clicks,
        pages.iter().map(|p| p.page).collect(),
        sum,
    ))
}

/// Job v2's function with renamed fields.
fn count_renamed(user: &u64, hit: Hit, ctx: &mut KeyedContext<'_, '_, u64, Report>) -> Result<()> {
    let old = ctx.value(&renamed::COUNT).get()?;
    if let Some(old) = old
        .as_ref()
        .filter(|o| o.origin != "v1" && o.origin != "v2")
    {
        return Err(Error::user(format!("a count from nowhere: {old:?}")));
    }
    let total = old.map_or(0, |c| c.total) + 1;
    ctx.value(&renamed::COUNT).set(renamed::Count {
        origin: "v2".into(),
        total,
    })?;
    let pages = last_pages(
        ctx.list(&renamed::PAGES).get()?,
        renamed::Page { id: hit.page },
    );
    ctx.list(&renamed::PAGES).update(pages.clone())?;
    let hits = ctx
        .map(&renamed::PER_PAGE)
        .get(&hit.page)?
        .map_or(0, |p| p.hits)
        + 1;
    ctx.map(&renamed::PER_PAGE)
        .put(hit.page, renamed::PerPage { hits })?;
    let sum = ctx
        .map(&renamed::PER_PAGE)
        .entries()?
        .iter()
        .map(|(_, p)| p.hits)
        .sum();
    ctx.emit((*user, total, pages.iter().map(|p| p.id).collect(), sum))
}

/// Job v2's function with a changed field type.
fn count_broken(user: &u64, _hit: Hit, ctx: &mut KeyedContext<'_, '_, u64, Report>) -> Result<()> {
    let old = ctx.value(&broken::COUNT).get()?;
    let clicks = old.map_or(0, |c| c.clicks.len() as u64) + 1;
    ctx.value(&broken::COUNT).set(broken::Count {
        clicks: "x".repeat(clicks as usize),
    })?;
    ctx.emit((*user, clicks, Vec::new(), 0))
}

type Function = fn(&u64, Hit, &mut KeyedContext<'_, '_, u64, Report>) -> Result<()>;

/// The settings of the suites' jobs on `backend`: checkpoints under `work` every 100 ms, at
/// parallelism 2, restored from `restore` when given.
fn config(
    backend: &Arc<dyn StateBackend>,
    work: &Path,
    job_name: &str,
    restore: Option<String>,
) -> EnvConfig {
    EnvConfig {
        job_name: job_name.into(),
        parallelism: 2,
        checkpoints: CheckpointConfig {
            interval: Some(Duration::from_millis(100)),
            storage: work.join("chk").to_string_lossy().into_owned(),
            restart: RestartStrategy::FixedDelay {
                attempts: 3,
                delay: Duration::from_millis(10),
            },
            restore: restore.map(RestoreFrom::Savepoint),
            ..CheckpointConfig::default()
        },
        state_backend: backend.clone(),
        local_state_dir: work.join("local"),
        ..EnvConfig::default()
    }
}

/// The job on `backend`: hits keyed by user into `function` (uid `counts`), at parallelism 2;
/// paced by `schedule` when given (a job stopped part-way), else as fast as it goes.
fn job(
    backend: &Arc<dyn StateBackend>,
    work: &Path,
    function: Function,
    schedule: Option<Schedule>,
    restore: Option<String>,
) -> (StreamEnv, riffle::sink::Collected<Report>) {
    let env = StreamEnv::with_config(config(backend, work, "evolution", restore));
    let mut source = DatagenSource::new(Hits).count(TOTAL).splits(1);
    if let Some(schedule) = schedule {
        source = source.paced_by(schedule);
    }
    let (sink, out) = CollectSink::new();
    env.from_source(source)
        .uid("hits")
        .set_parallelism(1)
        .key_by(|h: &Hit| h.user)
        .process(function)
        .name("counts")
        .uid("counts")
        .sink(sink);
    (env, out)
}

/// Runs job v1 on `backend` until it has counted part of the input and stops it with a
/// savepoint under `work`; returns the savepoint's location.
fn savepoint_of(backend: &Arc<dyn StateBackend>, work: &Path, function: Function) -> String {
    // The source's clock stands still: the first hit is due when it starts, a third of the
    // input once the clock is moved on.
    let clock = Arc::new(ManualPaceClock::new());
    let schedule = Schedule::with_clock(1_000.0, clock.clone());
    let (env, _out) = job(backend, work, function, Some(schedule), None);
    let counted = |m: &MetricsSnapshot| m.operator_total("counts").map_or(0, |o| o.records_in);
    stop_part_way(&env, &clock, counted, "Source: hits", work)
}

/// Runs `env`, whose source follows `clock` (standing still), until `counted` (of its metrics)
/// reaches a quarter of the input, and stops it with a savepoint under `work` (the source,
/// `source`, has not read all of it); returns the savepoint's location.
fn stop_part_way(
    env: &StreamEnv,
    clock: &ManualPaceClock,
    counted: fn(&MetricsSnapshot) -> u64,
    source: &str,
    work: &Path,
) -> String {
    let handle = env.execute_async().expect("job v1 starts");
    let started = Instant::now();
    let counted = || counted(&handle.metrics());
    let mut moved = false;
    while counted() < TOTAL / 4 {
        if !moved && counted() > 0 {
            clock.advance(Duration::from_millis(TOTAL / 3));
            moved = true;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "job v1 counted {} records in 2 minutes",
            counted()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let savepoint = handle
        .stop_with_savepoint(work.join("savepoint").to_str().unwrap())
        .expect("a savepoint of job v1");
    let result = handle.wait().expect("job v1 stops");
    let read = result
        .metrics
        .operator_total(source)
        .map_or(0, |o| o.records_out);
    assert!(read < TOTAL, "job v1 stopped part-way ({read} of {TOTAL})");
    savepoint
}

/// A savepoint of job v1 (a value, a list and a map state in operator `counts`) on `backend`,
/// under `work`: for tools that read savepoints. Returns its location.
pub fn savepoint_of_v1(backend: Arc<dyn StateBackend>, work: &Path) -> String {
    savepoint_of(&backend, work, count_v1)
}

/// Each user's last report over the whole input, as a run without any savepoint gives it.
fn expected() -> BTreeMap<u64, Report> {
    let mut reports: BTreeMap<u64, Report> = BTreeMap::new();
    for i in 0..TOTAL {
        let hit = Hits.generate(i);
        let report = reports
            .entry(hit.user)
            .or_insert((hit.user, 0, Vec::new(), 0));
        report.1 += 1;
        report.2 = last_pages(std::mem::take(&mut report.2), hit.page);
        report.3 += 1;
    }
    reports
}

/// Each user's last report in what job v2 emitted (a user's reports come in order).
fn last_reports(out: &riffle::sink::Collected<Report>) -> BTreeMap<u64, Report> {
    let mut last = BTreeMap::new();
    for report in out.values() {
        last.insert(report.0, report);
    }
    last
}

/// Restores a savepoint of job v1 in job v2 with `function`: its result.
fn restore_in(
    backend: &Arc<dyn StateBackend>,
    work: &Path,
    savepoint: &str,
    function: Function,
) -> (Result<riffle::JobResult>, BTreeMap<u64, Report>) {
    let (env, out) = job(backend, work, function, None, Some(savepoint.to_string()));
    let result = env.execute();
    (result, last_reports(&out))
}

/// The suite (see the module's documentation); panics with what differs.
pub fn check_state_evolution(backend: Arc<dyn StateBackend>, work: &Path) {
    let expected = expected();
    let savepoint = savepoint_of(&backend, &work.join("v1"), count_v1);

    for (name, function) in [
        ("added", count_added as Function),
        ("renamed", count_renamed as Function),
    ] {
        let (result, last) = restore_in(&backend, &work.join(name), &savepoint, function);
        let result = result.unwrap_or_else(|e| panic!("job v2 ({name}) failed: {e}"));
        assert_eq!(result.restarts, 0, "{name}");
        assert_eq!(last, expected, "job v2 ({name}) continued job v1's state");
    }

    let (result, _) = restore_in(&backend, &work.join("broken"), &savepoint, count_broken);
    let error = result.expect_err("a state type that cannot read its savepoint");
    assert!(error.is_incompatible_state(), "{error}");
    let message = error.to_string();
    for part in ["`counts`", "`count`", "version 1", "with_migration"] {
        assert!(message.contains(part), "`{part}` not in: {message}");
    }

    // A savepoint of version 2 of the state does not restore into version 1.
    let savepoint_v2 = savepoint_of(&backend, &work.join("v2"), count_renamed);
    let (result, _) = restore_in(&backend, &work.join("downgrade"), &savepoint_v2, count_v1);
    let error = result.expect_err("a newer version of the state");
    assert!(error.is_incompatible_state(), "{error}");
    let message = error.to_string();
    assert!(
        message.contains("version 2") && message.contains("version 1"),
        "{message}"
    );
}

/// A visit of a user at event time `at` (milliseconds), for the window suite.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Visit {
    user: u64,
    at: i64,
}

/// 40 users, one visit per millisecond of event time from 0, in one split.
struct Visits;

impl Generator for Visits {
    type Item = Visit;
    fn generate(&self, i: u64) -> Visit {
        Visit {
            user: mix(11, i, 1) % 40,
            at: i as i64,
        }
    }
    fn name(&self) -> String {
        "visits".into()
    }
}

/// The accumulator of the window suite's aggregate, in each version of the job.
trait Tally: riffle::record::Data + Default {
    fn count(&mut self, visit: &Visit);
    fn absorb(&mut self, other: Self);
    fn hits(&self) -> u64;
}

/// Counts visits into a [`Tally`] of type `A`.
struct Counting<A>(std::marker::PhantomData<fn() -> A>);

impl<A> Clone for Counting<A> {
    fn clone(&self) -> Self {
        Counting(std::marker::PhantomData)
    }
}

impl<A: Tally> riffle::aggregate::AggregateFunction<Visit> for Counting<A> {
    type Acc = A;
    type Out = u64;
    fn create(&self) -> A {
        A::default()
    }
    fn add(&self, acc: &mut A, visit: &Visit) {
        acc.count(visit)
    }
    fn merge(&self, acc: &mut A, other: A) {
        acc.absorb(other)
    }
    fn result(&self, acc: &A) -> u64 {
        acc.hits()
    }
}

/// Version 1's accumulator.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct TallyV1 {
    hits: u64,
}

impl Tally for TallyV1 {
    fn count(&mut self, _: &Visit) {
        self.hits += 1;
    }
    fn absorb(&mut self, other: Self) {
        self.hits += other.hits;
    }
    fn hits(&self) -> u64 {
        self.hits
    }
}

/// Version 2's accumulator: a field added with a default.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct TallyAdded {
    hits: u64,
    #[serde(default)]
    last_at: i64,
}

impl Tally for TallyAdded {
    fn count(&mut self, visit: &Visit) {
        self.hits += 1;
        self.last_at = self.last_at.max(visit.at);
    }
    fn absorb(&mut self, other: Self) {
        self.hits += other.hits;
        self.last_at = self.last_at.max(other.last_at);
    }
    fn hits(&self) -> u64 {
        self.hits
    }
}

/// Version 2's accumulator with a field whose type changed: serde cannot read version 1's.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct TallyBroken {
    hits: String,
}

impl Tally for TallyBroken {
    fn count(&mut self, _: &Visit) {
        self.hits.push('x');
    }
    fn absorb(&mut self, other: Self) {
        self.hits.push_str(&other.hits);
    }
    fn hits(&self) -> u64 {
        self.hits.len() as u64
    }
}

/// What the window suite's job emits: the operator (`tumbling`, `sessions`, `rolling`), the
/// user and the visits counted.
type Counted = (String, u64, u64);

/// The window suite's job on `backend`: visits keyed by user into a tumbling window of an
/// hour (uid `tumbling`), a session window with an hour's gap (uid `sessions`) and a rolling
/// aggregate (uid `rolling`), each counting with a [`Tally`] of type `A`; paced as [`job`].
fn window_job<A: Tally>(
    backend: &Arc<dyn StateBackend>,
    work: &Path,
    schedule: Option<Schedule>,
    restore: Option<String>,
) -> (StreamEnv, riffle::sink::Collected<Counted>) {
    let env = StreamEnv::with_config(config(backend, work, "window-evolution", restore));
    let mut source = DatagenSource::new(Visits).count(TOTAL).splits(1);
    if let Some(schedule) = schedule {
        source = source.paced_by(schedule);
    }
    let strategy = WatermarkStrategy::monotonous().with_timestamps(|v: &Visit| v.at);
    let visits = env
        .from_source_with_watermarks(source, strategy)
        .uid("visits")
        .set_parallelism(1)
        .key_by(|v: &Visit| v.user);
    let hour = Duration::from_secs(3_600);
    let windowed = |windows: Windows, uid: &'static str| {
        visits
            .window(windows)
            .aggregate(Counting::<A>(std::marker::PhantomData))
            .name(uid)
            .uid(uid)
            .map(move |r| (uid.to_string(), r.key, r.value))
    };
    let tumbling = windowed(Tumbling::of(hour), "tumbling");
    let sessions = windowed(Session::with_gap(hour), "sessions");
    let rolling = visits
        .aggregate(Counting::<A>(std::marker::PhantomData))
        .name("rolling")
        .uid("rolling")
        .map(|(user, hits)| ("rolling".to_string(), user, hits));
    let (sink, out) = CollectSink::new();
    tumbling.union(&[&sessions, &rolling]).sink(sink);
    (env, out)
}

/// The suite for the state of window operators and rolling aggregates across a new version of
/// the job on `backend` (see the module's documentation): job v1 counts part of the input into
/// still-open windows and sessions and a rolling aggregate, and stops with a savepoint; job v2,
/// whose accumulator gained a field, restores it: each user's window, session and final rolling
/// count over v1's and v2's output equal a run without a savepoint; an accumulator whose field
/// changed type fails the restore naming the operator and the state.
pub fn check_window_state_evolution(backend: Arc<dyn StateBackend>, work: &Path) {
    let mut expected: BTreeMap<u64, u64> = BTreeMap::new();
    for i in 0..TOTAL {
        *expected.entry(Visits.generate(i).user).or_default() += 1;
    }

    let clock = Arc::new(ManualPaceClock::new());
    let schedule = Schedule::with_clock(1_000.0, clock.clone());
    let v1_work = work.join("windows-v1");
    let (env, v1_out) = window_job::<TallyV1>(&backend, &v1_work, Some(schedule), None);
    // The keyed operators' inputs are pre-aggregated (partials, not visits): count what the
    // source read.
    let read = |m: &MetricsSnapshot| {
        m.operator_total("Source: visits")
            .map_or(0, |o| o.records_out)
    };
    let savepoint = stop_part_way(&env, &clock, read, "Source: visits", &v1_work);

    let (env, v2_out) = window_job::<TallyAdded>(
        &backend,
        &work.join("windows-added"),
        None,
        Some(savepoint.clone()),
    );
    let result = env
        .execute()
        .unwrap_or_else(|e| panic!("job v2 failed: {e}"));
    assert_eq!(result.restarts, 0);
    let mut windows: BTreeMap<(String, u64), Vec<u64>> = BTreeMap::new();
    let mut rolling: BTreeMap<u64, u64> = BTreeMap::new();
    for (operator, user, hits) in v1_out.values().into_iter().chain(v2_out.values()) {
        if operator == "rolling" {
            rolling.insert(user, hits);
        } else {
            windows.entry((operator, user)).or_default().push(hits);
        }
    }
    for operator in ["tumbling", "sessions"] {
        let counted: BTreeMap<u64, Vec<u64>> = windows
            .iter()
            .filter(|((o, _), _)| o == operator)
            .map(|((_, user), hits)| (*user, hits.clone()))
            .collect();
        let want: BTreeMap<u64, Vec<u64>> = expected.iter().map(|(u, n)| (*u, vec![*n])).collect();
        assert_eq!(
            counted, want,
            "{operator}: one window per user, with every visit"
        );
    }
    assert_eq!(rolling, expected, "rolling: the last count of each user");

    let (env, _) = window_job::<TallyBroken>(
        &backend,
        &work.join("windows-broken"),
        None,
        Some(savepoint),
    );
    let error = env
        .execute()
        .expect_err("an accumulator that cannot read its savepoint");
    assert!(error.is_incompatible_state(), "{error}");
    let message = error.to_string();
    assert!(
        [
            ("`tumbling`", "`windows`"),
            ("`sessions`", "`sessions`"),
            ("`rolling`", "`rolling`")
        ]
        .iter()
        .any(|(uid, state)| message.contains(uid) && message.contains(state)),
        "no operator and state named in: {message}"
    );
    assert!(message.contains("TallyBroken"), "{message}");
}
