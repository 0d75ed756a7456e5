//! The clean-up of a group's checkpoint storage: what no committed offset needs any more goes.
//!
//! Every run registers under `<group>-runs/<run>/run` at its start (who runs it, and its place
//! in its member's sequence of runs). At the start of each run, and again every half grace while
//! the run lasts, a member removes, in the background:
//! - the markers of earlier releases below each partition's committed offset
//!   (`<group>-state/...`, [`super::legacy`]);
//! - the directories of runs that are **provably dead and unnamed**, with their composed
//!   restore manifest and their registration.
//!
//! The decision is [`removable_runs`], a pure function of what was read, in this order:
//! 1. the registered runs, with when each last wrote;
//! 2. the group's live members, from its coordinator;
//! 3. the committed offsets, whose notes name the runs holding the state they restore from.
//!
//! A run is removable only when all of these hold:
//! - no committed offset names it (read after the two others: a dead run cannot commit, so
//!   nothing can name it later);
//! - it is dead: a later run of its member is registered (a member's runs follow one another),
//!   or its member was not in the group when step 2 read it (a member out of the group cannot
//!   commit: the coordinator fences its transactions' offsets);
//! - nothing was written in it for the clean-up grace (a time in the future counts as now).
//!
//! Several members cleaning at once are safe: each decides from its own reads, every removal is
//! idempotent, and the registration goes last, so a removal cut short is retried by the next.
//!
//! The property "no clean-up deletes a run the group's committed offsets name" is
//! [`removable_runs`]'s first rule, checked by a property test below and by the group tests
//! (`crates/riffle-kafka/tests/group.rs`), which read the committed offsets while members are
//! killed and started and check that every snapshot they name exists.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};

use rdkafka::Offset;
use riffle::checkpoint::CheckpointStorage;
use serde::{Deserialize, Serialize};

use super::note::CommitNote;
use super::{KafkaGroup, legacy};

/// What one clean-up of the group's checkpoint storage removed.
#[derive(Debug, Default)]
pub(super) struct CleanUp {
    pub(super) markers: usize,
    pub(super) runs: usize,
}

/// What a run writes at its registration (`<group>-runs/<run>/run`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Registration {
    /// The member that runs it: `host/pid/instance`.
    pub(super) member: String,
    /// The member's instance (the last part of its label).
    pub(super) instance: String,
    /// Its place in the member's runs: 1, 2, ...
    pub(super) seq: u64,
}

impl Registration {
    /// The registration of run `run` from what its file holds; a file from before registrations
    /// held anything is read from the run's name (`<job>-<instance>-<generation>-<seq>`).
    pub(super) fn read(run: &str, bytes: &[u8]) -> Option<Registration> {
        if let Ok(registration) = serde_json::from_slice::<Registration>(bytes) {
            return Some(registration);
        }
        let mut parts = run.rsplitn(4, '-');
        let seq = parts.next()?.parse().ok()?;
        let _generation: u64 = parts.next()?.parse().ok()?;
        let instance = parts.next()?.to_string();
        parts.next()?;
        Some(Registration {
            member: String::new(),
            instance,
            seq,
        })
    }
}

/// A registered run, as a clean-up saw it.
#[derive(Clone, Debug)]
pub(super) struct SeenRun {
    pub(super) name: String,
    /// `None`: its registration could not be read (never removed, for want of proof).
    pub(super) registration: Option<Registration>,
    /// When anything of it (its directory or its registration) was last written.
    pub(super) written: Option<SystemTime>,
}

/// The runs a clean-up may remove, of `runs` (see the module's rules). `live` holds the
/// instances of the group's live members (`None`: the coordinator could not tell, so only a later
/// run of a member proves one dead); `named` the runs the committed offsets name; `current` is
/// the cleaning member's own run.
pub(super) fn removable_runs(
    runs: &[SeenRun],
    live: Option<&BTreeSet<String>>,
    named: &BTreeSet<String>,
    current: &str,
    now: SystemTime,
    grace: Duration,
) -> Vec<String> {
    // The newest run of each member.
    let mut newest: BTreeMap<&str, u64> = BTreeMap::new();
    for registration in runs.iter().filter_map(|r| r.registration.as_ref()) {
        let seq = newest.entry(registration.instance.as_str()).or_insert(0);
        *seq = (*seq).max(registration.seq);
    }
    runs.iter()
        .filter(|run| run.name != current && !named.contains(&run.name))
        .filter(|run| {
            let Some(registration) = &run.registration else {
                return false;
            };
            let superseded = newest
                .get(registration.instance.as_str())
                .is_some_and(|seq| *seq > registration.seq);
            let gone = live.is_some_and(|live| !live.contains(&registration.instance));
            superseded || gone
        })
        .filter(|run| {
            // A time in the future (another machine's clock ahead, or written since `now` was
            // read) is now: not idle.
            let idle = run.written.map_or(Duration::MAX, |at| {
                now.duration_since(at).unwrap_or_default()
            });
            idle >= grace
        })
        .map(|run| run.name.clone())
        .collect()
}

/// The instance of a member's label (`host/pid/instance`).
pub(super) fn instance_of(label: &str) -> &str {
    label.rsplit('/').next().unwrap_or(label)
}

impl KafkaGroup {
    /// Removes from the group's checkpoint storage what no committed offset needs any more (the
    /// module's rules); `current` is this member's run. Errors of single removals are logged,
    /// not returned: what is left is removed by a later clean-up.
    pub(super) fn clean_up(
        &self,
        storage: &CheckpointStorage,
        current: &str,
    ) -> riffle::Result<CleanUp> {
        let name = &self.inner.name;
        let grace = self.cleanup_grace();
        let removed = |dir: &str| match storage.delete_dir(dir) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(group = %name, dir, error = %e, "group: clean-up cannot remove");
                false
            }
        };
        // 1. The registered runs.
        let runs_dir = format!("{name}-runs");
        let mut runs = Vec::new();
        for run in storage.subdirectories(&runs_dir)? {
            let entry = format!("{runs_dir}/{run}");
            let registration = storage
                .read_optional(&format!("{entry}/run"))?
                .and_then(|bytes| Registration::read(&run, &bytes));
            let written = [storage.last_modified(&run)?, storage.last_modified(&entry)?]
                .into_iter()
                .flatten()
                .max();
            runs.push(SeenRun {
                name: run,
                registration,
                written,
            });
        }
        // 2. The live members.
        let live = match self.describe_members() {
            Ok(members) => Some(
                members
                    .keys()
                    .map(|label| instance_of(label).to_string())
                    .collect::<BTreeSet<_>>(),
            ),
            Err(e) => {
                tracing::debug!(group = %name, error = %e, "group: clean-up cannot list the live members");
                None
            }
        };
        // 3. The committed offsets: the runs they name, and the legacy markers below them.
        let committed = self.committed_everywhere()?;
        let mut named = BTreeSet::new();
        let mut done = CleanUp::default();
        for element in committed.elements() {
            let (topic, partition) = (element.topic(), element.partition());
            let offset = match element.offset() {
                Offset::Offset(offset) => Some(offset),
                _ => None,
            };
            let note = CommitNote::parse(element.metadata());
            if let Some((run, _)) = note.snapshot() {
                named.insert(run.to_string());
            }
            let markers = legacy::clean_markers(storage, name, topic, partition, offset, &removed)?;
            done.markers += markers.removed;
            named.extend(markers.named);
        }
        let now = SystemTime::now();
        for run in removable_runs(&runs, live.as_ref(), &named, current, now, grace) {
            let entry = format!("{runs_dir}/{run}");
            if removed(&run) && removed(&format!("{name}-restore/{run}")) && removed(&entry) {
                tracing::debug!(group = %name, run, "group: clean-up removed a dead run");
                done.runs += 1;
            }
        }
        Ok(done)
    }

    /// Registers run `job`, the `seq`-th of this member (for the clean-ups of later runs), and
    /// cleans up in the background: at once, then again every half grace while `job` is the
    /// member's newest run. A single pass at the start would leave what was not yet provably
    /// dead or idle then (a member's run before this one, still writing a moment ago; a killed
    /// member still in the group until its session expires) until the next rebalance, which in
    /// a stable group may never come.
    ///
    /// The thread holds the group weakly: dropping the last [`KafkaGroup`] still leaves it.
    pub(super) fn clean_up_in_background(&self, storage: CheckpointStorage, job: String, seq: u64) {
        let registration = Registration {
            member: self.inner.label.clone(),
            instance: self.inner.instance.clone(),
            seq,
        };
        let bytes = serde_json::to_vec(&registration).expect("a registration serializes");
        if let Err(e) = storage.write(&format!("{}-runs/{job}/run", self.inner.name), bytes) {
            tracing::warn!(group = %self.inner.name, error = %e, "group: cannot register the run");
            return;
        }
        let weak = std::sync::Arc::downgrade(&self.inner);
        // The group while `job` is its member's newest run and the member is in the group.
        let current = move || {
            let inner = weak.upgrade()?;
            let current = inner.runs.load(std::sync::atomic::Ordering::Acquire) == seq
                && !inner.left.load(std::sync::atomic::Ordering::Acquire);
            current.then_some(KafkaGroup { inner })
        };
        let spawned = std::thread::Builder::new()
            .name("riffle-group-cleanup".into())
            .spawn(move || {
                let mut first = true;
                while let Some(group) = current() {
                    match group.clean_up(&storage, &job) {
                        // The first pass always says what it did; later ones when they removed
                        // something.
                        Ok(done) if first || done.runs + done.markers > 0 => tracing::info!(
                            group = %group.inner.name,
                            markers = done.markers,
                            runs = done.runs,
                            "group: cleaned up the checkpoint storage"
                        ),
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(group = %group.inner.name, error = %e, "group: clean-up failed")
                        }
                    }
                    first = false;
                    let next = Instant::now() + cleanup_period(group.cleanup_grace());
                    drop(group);
                    while Instant::now() < next {
                        std::thread::sleep(CLEANUP_POLL);
                        if current().is_none() {
                            return;
                        }
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(group = %self.inner.name, error = %e, "group: cannot start the clean-up");
        }
    }
}

/// How often a run's clean-up looks for runs to remove: every half grace (a dead run is then
/// removed at most 1.5 graces after its last write), at least every second.
fn cleanup_period(grace: Duration) -> Duration {
    (grace / 2).max(Duration::from_secs(1))
}

/// How often a waiting clean-up checks that its run is still the member's newest.
const CLEANUP_POLL: Duration = Duration::from_millis(200);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const GRACE: Duration = Duration::from_secs(600);

    fn run(name: &str, instance: &str, seq: u64, written: Option<SystemTime>) -> SeenRun {
        SeenRun {
            name: name.into(),
            registration: Some(Registration {
                member: format!("host/1/{instance}"),
                instance: instance.into(),
                seq,
            }),
            written,
        }
    }

    #[test]
    fn only_dead_unnamed_idle_runs_go() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let old = Some(now - GRACE * 2);
        let recent = Some(now - Duration::from_secs(5));
        let future = Some(now + Duration::from_secs(3_600));
        let runs = [
            run("a-1", "a", 1, old),    // superseded by a-2, idle: goes
            run("a-2", "a", 2, old),    // a's newest, a live: stays
            run("b-1", "b", 1, old),    // b gone from the group, idle: goes
            run("c-1", "c", 1, old),    // c gone, but named by a commit: stays
            run("d-1", "d", 1, future), // d gone, written "in the future": not idle, stays
            run("e-1", "e", 1, recent), // e gone, written 5 s ago: stays
            run("f-1", "f", 1, None),   // f gone, never wrote: goes
        ];
        let live: BTreeSet<String> = ["a".to_string()].into();
        let named: BTreeSet<String> = ["c-1".to_string()].into();
        let gone = removable_runs(&runs, Some(&live), &named, "z-1", now, GRACE);
        assert_eq!(gone, ["a-1", "b-1", "f-1"]);
        // The coordinator could not tell who is live: only a later run proves one dead.
        let gone = removable_runs(&runs, None, &named, "z-1", now, GRACE);
        assert_eq!(gone, ["a-1"]);
        // The cleaner's own run never goes, even superseded (it is not).
        let gone = removable_runs(&runs, Some(&live), &named, "a-1", now, GRACE);
        assert_eq!(gone, ["b-1", "f-1"]);
    }

    #[test]
    fn a_run_whose_registration_cannot_be_read_stays() {
        let runs = [SeenRun {
            name: "x".into(),
            registration: None,
            written: None,
        }];
        let gone = removable_runs(
            &runs,
            Some(&BTreeSet::new()),
            &BTreeSet::new(),
            "y",
            SystemTime::now(),
            Duration::ZERO,
        );
        assert!(gone.is_empty());
    }

    #[test]
    fn registrations_are_read_from_their_file_or_their_run_name() {
        let registration = Registration {
            member: "h/7/00aa".into(),
            instance: "00aa".into(),
            seq: 3,
        };
        let bytes = serde_json::to_vec(&registration).unwrap();
        assert_eq!(Registration::read("whatever", &bytes), Some(registration));
        let legacy = Registration::read("clicks-job-00ab12-4-2", b"").unwrap();
        assert_eq!((legacy.instance.as_str(), legacy.seq), ("00ab12", 2));
        assert_eq!(Registration::read("no-numbers", b""), None);
        assert_eq!(instance_of("host/12/00ff"), "00ff");
    }

    proptest! {
        /// Whatever was read, whenever: a run that a committed offset names, the cleaner's own
        /// run, and a live member's newest run are never removed.
        #[test]
        fn a_named_run_or_a_live_members_newest_run_is_never_removed(
            runs in proptest::collection::vec((0u8..4, 1u64..4, proptest::option::of(0u64..2_000)), 0..12),
            live in proptest::collection::btree_set(0u8..4, 0..4),
            named in proptest::collection::btree_set(0usize..12, 0..6),
            known in any::<bool>(),
            grace in 0u64..1_000,
        ) {
            let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
            let seen: Vec<SeenRun> = runs
                .iter()
                .enumerate()
                .map(|(i, (member, seq, at))| {
                    run(&format!("r{i}"), &format!("m{member}"), *seq, at.map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s)))
                })
                .collect();
            let live: BTreeSet<String> = live.iter().map(|m| format!("m{m}")).collect();
            let named: BTreeSet<String> = named.iter().map(|i| format!("r{i}")).collect();
            let gone = removable_runs(&seen, known.then_some(&live), &named, "r0", now, Duration::from_secs(grace));
            for name in &gone {
                prop_assert!(!named.contains(name), "removed {name}, which a commit names");
                prop_assert!(name != "r0", "removed the cleaner's own run");
                let run = seen.iter().find(|r| &r.name == name).unwrap();
                let registration = run.registration.as_ref().unwrap();
                let newest = seen
                    .iter()
                    .filter_map(|r| r.registration.as_ref())
                    .filter(|r| r.instance == registration.instance)
                    .map(|r| r.seq)
                    .max()
                    .unwrap();
                let live_member = !known || live.contains(&registration.instance);
                prop_assert!(!(live_member && registration.seq == newest), "removed {name}, the newest run of a live member");
                if let Some(at) = run.written {
                    prop_assert!(now.duration_since(at).unwrap_or_default() >= Duration::from_secs(grace));
                }
            }
        }
    }
}
