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
//! riffle::testing::evolution::check_state_evolution(Arc::new(riffle::state::HeapBackend), &work);
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::checkpoint::{CheckpointConfig, RestartStrategy, RestoreFrom};
use crate::operators::KeyedContext;
use crate::sink::CollectSink;
use crate::source::datagen::{DatagenSource, Generator, ManualPaceClock, Schedule, mix};
use crate::state::{
    ListStateDescriptor, MapStateDescriptor, StateBackend, StateValue, ValueStateDescriptor,
};
use crate::{EnvConfig, Error, Result, StreamEnv};

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

/// The job on `backend`: hits keyed by user into `function` (uid `counts`), at parallelism 2;
/// paced by `schedule` when given (a job stopped part-way), else as fast as it goes.
fn job(
    backend: &Arc<dyn StateBackend>,
    work: &Path,
    function: Function,
    schedule: Option<Schedule>,
    restore: Option<String>,
) -> (StreamEnv, crate::sink::Collected<Report>) {
    let env = StreamEnv::with_config(EnvConfig {
        job_name: "evolution".into(),
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
    });
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
    let handle = env.execute_async().expect("job v1 starts");
    let started = Instant::now();
    let counted = || {
        handle
            .metrics()
            .operator_total("counts")
            .map_or(0, |o| o.records_in)
    };
    let mut moved = false;
    while counted() < TOTAL / 4 {
        if !moved && counted() > 0 {
            clock.advance(Duration::from_millis(TOTAL / 3));
            moved = true;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "job v1 counted {} hits in 2 minutes",
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
        .operator_total("Source: hits")
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
fn last_reports(out: &crate::sink::Collected<Report>) -> BTreeMap<u64, Report> {
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
) -> (Result<crate::JobResult>, BTreeMap<u64, Report>) {
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
