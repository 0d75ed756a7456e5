//! Standby replicas of a process group (Kafka Streams' `num.standby.replicas`): a member keeps
//! in memory a warm copy of the keyed state of partitions other members own, so that when one
//! of them dies and its partitions come to this member, the restore reads their snapshots from
//! memory instead of the checkpoint storage.
//!
//! Which partitions a member keeps warm follows from what every member can see without a
//! protocol of its own: the group's committed offsets, whose metadata names the member that
//! committed each partition last. The members so named, and this one, sorted by name, form a
//! ring; with `n` replicas a member keeps the partitions last committed by the `n` members after
//! it. A member that dies stays in the ring until its partitions are committed by another, so
//! its last committed snapshots, the ones a restore of its partitions reads, stay warm.
//!
//! A copy is refreshed after every commit of the partitions it follows (polled at the job's
//! checkpoint interval): the snapshot files the committed offsets' notes name are fetched,
//! and the files no such note names any more are dropped. Heap snapshots are whole, so a
//! standby reads each followed partition's state once per commit: the cost of the option, in
//! storage reads and in memory (the encoded state of the followed partitions).

use std::collections::{BTreeSet, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use riffle::checkpoint::{CheckpointStorage, Manifest, WarmFiles};

use super::restore::{Committed, committed_partitions};
use super::{GroupInner, KafkaGroup};

/// A member's standby replicas: what they hold, and whether their thread runs.
pub(super) struct Standby {
    /// How many other members' partitions this member keeps warm (0: none).
    pub(super) replicas: std::sync::atomic::AtomicUsize,
    /// The snapshot files kept warm, read by a restore instead of the storage.
    pub(super) warm: WarmFiles,
    /// The partitions kept warm now (`topic-partition`), and whether the thread runs.
    pub(super) state: Mutex<StandbyState>,
}

impl Default for Standby {
    fn default() -> Self {
        Standby {
            replicas: Default::default(),
            // What this member's runs write is held too: their next run restores it.
            warm: WarmFiles::write_through(),
            state: Default::default(),
        }
    }
}

#[derive(Default)]
pub(super) struct StandbyState {
    pub(super) partitions: Vec<String>,
    running: bool,
}

impl KafkaGroup {
    /// Keeps a warm copy of the keyed state of the partitions `replicas` other members own
    /// (Kafka Streams' `num.standby.replicas`; default 0): when one of them dies, this member's
    /// restore of its partitions reads their snapshots from memory, not from the checkpoint
    /// storage. Costs one read of the followed partitions' state per commit, and memory to hold
    /// it encoded. Takes effect at the next run.
    ///
    /// ```no_run
    /// use riffle_kafka::{KafkaConnection, KafkaGroup};
    /// let group = KafkaGroup::join(KafkaConnection::new("127.0.0.1:9092"), "clicks-job", ["clicks"]).unwrap();
    /// group.set_standby_replicas(1);
    /// assert_eq!(group.standby_replicas(), 1);
    /// ```
    pub fn set_standby_replicas(&self, replicas: usize) {
        self.inner
            .standby
            .replicas
            .store(replicas, Ordering::Relaxed);
    }

    /// How many other members' partitions this member keeps warm.
    pub fn standby_replicas(&self) -> usize {
        self.inner.standby.replicas.load(Ordering::Relaxed)
    }

    /// The partitions whose state this member keeps warm now (`topic-partition`), and the bytes
    /// it holds for them.
    pub fn standby_status(&self) -> (Vec<String>, u64) {
        let state = self.inner.standby.state.lock().expect("standby lock");
        (state.partitions.clone(), self.inner.standby.warm.bytes())
    }

    /// The files a run's restore may read from memory (`None` without standby replicas).
    pub(super) fn warm_files(&self) -> Option<WarmFiles> {
        (self.standby_replicas() > 0).then(|| self.inner.standby.warm.clone())
    }

    /// Starts keeping the standby replicas warm, from `storage`, every `every` (once per
    /// process; it ends with the group).
    pub(super) fn start_standby(
        &self,
        storage: CheckpointStorage,
        max_parallelism: usize,
        every: Duration,
    ) {
        if self.standby_replicas() == 0 {
            return;
        }
        {
            let mut state = self.inner.standby.state.lock().expect("standby lock");
            if state.running {
                return;
            }
            state.running = true;
        }
        let weak: Weak<GroupInner> = Arc::downgrade(&self.inner);
        let every = every.max(Duration::from_millis(100));
        let spawned = std::thread::Builder::new()
            .name(format!("group {} standby", self.inner.name))
            .spawn(move || {
                let mut failing = false;
                loop {
                    let Some(inner) = weak.upgrade() else { return };
                    if inner.stop.load(Ordering::Acquire) {
                        return;
                    }
                    let group = KafkaGroup { inner };
                    let started = Instant::now();
                    match group.refresh_standby(&storage, max_parallelism) {
                        Ok(fetched) => {
                            failing = false;
                            if fetched > 0 {
                                let (partitions, bytes) = group.standby_status();
                                tracing::debug!(
                                    group = %group.inner.name,
                                    ?partitions,
                                    bytes,
                                    fetched,
                                    ms = started.elapsed().as_millis() as u64,
                                    "group: standby replica refreshed"
                                );
                            }
                        }
                        // Markers and snapshots move under a standby's feet (clean-ups, commits):
                        // the next round reads them again.
                        Err(e) if !failing => {
                            failing = true;
                            tracing::warn!(group = %group.inner.name, error = %e, "group: standby replica not refreshed; trying again");
                        }
                        Err(_) => {}
                    }
                    drop(group);
                    std::thread::sleep(every);
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(group = %self.inner.name, error = %e, "group: cannot start the standby replica");
            self.inner
                .standby
                .state
                .lock()
                .expect("standby lock")
                .running = false;
        }
    }

    /// One round: the partitions to follow, their committed snapshots' files fetched where not
    /// held yet, the others dropped. Returns the bytes fetched.
    ///
    /// The partitions this member committed last are kept too: a rebalance ends the run, and
    /// the next run restores them as well. Their snapshots are held from when they were written
    /// (the warm files are write-through), so they cost no read; neither are the snapshots of
    /// this member's run dropped that a commit may still name.
    fn refresh_standby(
        &self,
        storage: &CheckpointStorage,
        max_parallelism: usize,
    ) -> riffle::Result<u64> {
        let committed = committed_partitions(&self.committed_everywhere()?);
        let me = self.inner.label.clone();
        let followed = self.followed_members(committed.iter().map(|c| c.note.member.clone()));
        // A followed member's partitions stay followed when they come to this member, until it
        // commits them itself: the restore that takes them over reads the warm copy.
        let positions: Vec<Committed> = committed
            .iter()
            .filter(|c| {
                self.keyed(&c.topic) && (c.note.member == me || followed.contains(&c.note.member))
            })
            .cloned()
            .collect();
        let partitions: Vec<String> = positions
            .iter()
            .filter(|c| c.note.member != me)
            .map(|c| format!("{}-{}", c.topic, c.partition))
            .collect();
        // Snapshots that are gone are not followed (the restore that needs them says so).
        let parts = self
            .named_snapshots(
                storage,
                &positions,
                max_parallelism,
                super::restore::CheckFiles::Manifests,
            )?
            .parts;
        let mut fetched = 0;
        let mut wanted = HashSet::new();
        if !parts.is_empty() {
            let manifest =
                Manifest::compose("standby", parts).map_err(riffle::Error::Checkpoint)?;
            for file in manifest.all_files() {
                if wanted.insert(storage.store_path(&file.path)) && !storage.is_warm(file) {
                    let bytes = storage.read(file)?;
                    fetched += bytes.len() as u64;
                    storage.keep_warm(file, bytes);
                }
            }
        }
        // This run's own snapshots, from the oldest one its committed partitions name: later
        // ones may be committed next.
        let run = {
            let transactions = self.inner.transactions.lock().expect("transactions lock");
            transactions.state.as_ref().map(|state| state.job.clone())
        };
        let own = run.map(|job| {
            let oldest = committed
                .iter()
                .filter(|c| c.note.member == me)
                .filter_map(|c| c.note.snapshot())
                .filter(|(run, _)| *run == job)
                .map(|(_, checkpoint)| checkpoint)
                .min()
                .unwrap_or(0);
            (storage.store_path(&job), oldest)
        });
        let warm = &self.inner.standby.warm;
        warm.retain(|path| {
            wanted.contains(path)
                || own.as_ref().is_some_and(|(dir, oldest)| {
                    checkpoint_of(path, dir).is_some_and(|id| id >= *oldest)
                })
        });
        let mut state = self.inner.standby.state.lock().expect("standby lock");
        if state.partitions != partitions {
            tracing::info!(
                group = %self.inner.name,
                ?partitions,
                files = warm.len(),
                bytes = warm.bytes(),
                "group: the standby replica follows {} partitions",
                partitions.len()
            );
            state.partitions = partitions;
        }
        Ok(fetched)
    }

    /// The members whose partitions this one follows, of those named by `committers` (the
    /// metadata of the group's commits): [`ring_after`].
    fn followed_members(&self, committers: impl Iterator<Item = String>) -> BTreeSet<String> {
        ring_after(&self.inner.label, committers, self.standby_replicas())
            .into_iter()
            .collect()
    }
}

/// The checkpoint id of a file at `path` under the job directory `dir` (`dir/chk-<id>/...`).
fn checkpoint_of(path: &str, dir: &str) -> Option<u64> {
    let rest = path.strip_prefix(dir)?.strip_prefix('/')?;
    let (chk, _) = rest.split_once('/')?;
    chk.strip_prefix("chk-")?.parse().ok()
}

/// Of the members `others` and `me`, in name order as a ring, the `replicas` after `me`
/// (each once; empty names are no member).
fn ring_after(me: &str, others: impl Iterator<Item = String>, replicas: usize) -> Vec<String> {
    let mut ring: BTreeSet<String> = others.filter(|m| !m.is_empty()).collect();
    ring.insert(me.to_string());
    let ring: Vec<String> = ring.into_iter().collect();
    let at = ring.iter().position(|m| m == me).unwrap_or(0);
    let mut after: Vec<String> = (1..=replicas.min(ring.len() - 1))
        .map(|k| ring[(at + k) % ring.len()].clone())
        .collect();
    after.sort();
    after
}

#[cfg(test)]
mod tests {
    /// The ring: with n replicas a member follows the n members after it, wrapping around.
    #[test]
    fn a_member_follows_the_members_after_it_in_name_order() {
        let ring = |me: &str, others: &[&str], replicas: usize| {
            super::ring_after(me, others.iter().map(|s| s.to_string()), replicas)
        };
        assert_eq!(ring("b", &["a", "c", "d"], 1), ["c"]);
        assert_eq!(ring("d", &["a", "c", "b"], 1), ["a"]);
        assert_eq!(ring("b", &["a", "c", "d"], 2), ["c", "d"]);
        assert_eq!(ring("b", &["a", "c", "d"], 5), ["a", "c", "d"]);
        assert_eq!(ring("b", &["b", "", "b"], 1), Vec::<String>::new());
        assert_eq!(ring("a", &["c", "b"], 0), Vec::<String>::new());
    }

    #[test]
    fn a_files_checkpoint_is_read_from_its_path_under_the_run() {
        assert_eq!(
            super::checkpoint_of("g/run-1/chk-12/op/0.state", "g/run-1"),
            Some(12)
        );
        assert_eq!(
            super::checkpoint_of("g/run-10/chk-12/op/0.state", "g/run-1"),
            None
        );
        assert_eq!(
            super::checkpoint_of("g/run-1/shared/x.sst", "g/run-1"),
            None
        );
        assert_eq!(
            super::checkpoint_of("g/run-1/_manifest.json", "g/run-1"),
            None
        );
    }
}
