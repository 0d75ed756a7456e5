//! Restoring a job from a checkpoint or savepoint: finding the one to use (the latest that is
//! whole: a damaged file makes the previous one the candidate), and handing every operator
//! instance its state: the key groups it owns now, and its share of non-keyed state.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::checkpoint::manifest::{Extent, Manifest};
use crate::checkpoint::storage::CHECKPOINT_PREFIX;
use crate::checkpoint::{CheckpointStorage, FileRef, Redistribution, RestoreState};
use crate::error::{Error, Result};
use crate::keys::KeyGroupRange;
use crate::state::KvStore;

/// A loaded checkpoint, ready to hand out state.
pub(crate) struct RestoreAssignment {
    manifest: Manifest,
    files: HashMap<String, Vec<u8>>,
    storage: Arc<CheckpointStorage>,
    /// Where it came from, for messages.
    pub(crate) description: String,
    used: Mutex<BTreeSet<String>>,
}

fn slice(bytes: &[u8], extent: Extent) -> Result<Vec<u8>> {
    let outside = || {
        Error::Checkpoint(format!(
            "a state extent ({}+{} bytes) lies outside its file ({} bytes)",
            extent.offset,
            extent.len,
            bytes.len()
        ))
    };
    let start = usize::try_from(extent.offset).map_err(|_| outside())?;
    let len = usize::try_from(extent.len).map_err(|_| outside())?;
    let end = start.checked_add(len).ok_or_else(outside)?;
    bytes
        .get(start..end)
        .map(<[u8]>::to_vec)
        .ok_or_else(outside)
}

/// Fails unless `manifest` was written with this release's key-group hash scheme: with another
/// one, keyed state would sit in key groups that its keys no longer hash to, and be lost silently.
pub(crate) fn check_key_hash_version(manifest: &Manifest, description: &str) -> Result<()> {
    let (found, ours) = (manifest.key_hash_version, crate::keys::KEY_HASH_VERSION);
    if found == ours {
        return Ok(());
    }
    let scheme = match found {
        0 => "scheme 0 (std::hash, Riffle before key-hash versioning)".to_string(),
        n if n > ours => format!("scheme {n}, newer than this Riffle knows"),
        n => format!("scheme {n}"),
    };
    Err(Error::Checkpoint(format!(
        "{description} puts keys into key groups with {scheme}, but this Riffle uses scheme \
         {ours}: its keyed state would not be found. Restore it with the Riffle release that \
         wrote it (take a savepoint there and migrate the state), or start without restoring"
    )))
}

impl RestoreAssignment {
    /// Reads the manifest of `dir` and every file it references (checking their checksums).
    pub(crate) fn load(storage: &Arc<CheckpointStorage>, dir: &str) -> Result<Self> {
        let manifest = storage.read_manifest(dir)?;
        let mut files = HashMap::new();
        for file in manifest.files() {
            if !files.contains_key(&file.path) {
                files.insert(file.path.clone(), storage.read(file)?);
            }
        }
        // Store files are checked when a task downloads them.
        let description = format!(
            "{} {} of {}",
            kind_name(&manifest),
            manifest.checkpoint_id,
            storage.description()
        );
        Ok(RestoreAssignment {
            manifest,
            files,
            storage: storage.clone(),
            description,
            used: Mutex::new(BTreeSet::new()),
        })
    }

    /// The latest completed checkpoint of `storage` that reads back whole; `None` if there is none.
    pub(crate) fn latest(storage: &Arc<CheckpointStorage>) -> Result<Option<Self>> {
        for id in storage.completed_checkpoints()?.into_iter().rev() {
            match Self::load(storage, &format!("{CHECKPOINT_PREFIX}{id}")) {
                Ok(assignment) => return Ok(Some(assignment)),
                Err(error) => {
                    tracing::warn!(id, %error, "checkpoint unusable; trying the one before")
                }
            }
        }
        Ok(None)
    }

    /// Whether it is the final checkpoint of a job that read all its input.
    pub(crate) fn finished(&self) -> bool {
        self.manifest.finished
    }

    /// The checkpoint's id (the next one gets a larger id).
    pub(crate) fn checkpoint_id(&self) -> u64 {
        self.manifest.checkpoint_id
    }

    /// Checks that the checkpoint's keys sit in the key groups this job would give them: the same
    /// number of key groups, computed with the same hash scheme.
    pub(crate) fn check_max_parallelism(&self, max_parallelism: usize) -> Result<()> {
        check_key_hash_version(&self.manifest, &self.description)?;
        if self.manifest.max_parallelism != max_parallelism {
            return Err(Error::config(
                "max_parallelism",
                format!(
                    "is {max_parallelism} but {} was taken with {}: key groups cannot change",
                    self.description, self.manifest.max_parallelism
                ),
            ));
        }
        Ok(())
    }

    /// Checks that `backend` can read the checkpoint's keyed state: one taken on a key-value
    /// store backend (RocksDB) keeps it in the stores' files, which a heap backend cannot read,
    /// and restoring there would start every keyed operator empty.
    pub(crate) fn check_state_backend(
        &self,
        backend: &dyn crate::state::StateBackend,
    ) -> Result<()> {
        if self.manifest.stores.is_empty() || backend.keeps_local_files() {
            return Ok(());
        }
        Err(Error::config(
            "state_backend",
            format!(
                "is `{}`, but {} keeps its keyed state in the files of a key-value store backend \
                 ({} stores): restore it with the backend that took it (`--state-backend \
                 rocksdb`), or start without restoring",
                backend.name(),
                self.description,
                self.manifest.stores.len()
            ),
        ))
    }

    /// The state of subtask `subtask` of `parallelism` of operator `operator_id`, owning `range`.
    pub(crate) fn state_for(
        &self,
        operator_id: &str,
        subtask: usize,
        parallelism: usize,
        range: KeyGroupRange,
    ) -> Result<Option<RestoreState>> {
        let Some(operator) = self.manifest.operators.get(operator_id) else {
            return Ok(None);
        };
        self.used
            .lock()
            .expect("used lock")
            .insert(operator_id.to_string());
        let mut state = RestoreState::default();
        let broadcast_from = broadcast_copy_for(&operator.subtasks, operator.parallelism, subtask);
        for old in &operator.subtasks {
            if let Some(watermark) = old.watermark {
                state.watermark = Some(state.watermark.map_or(watermark, |w| w.min(watermark)));
            }
            for schema in &old.states {
                if !state.states.iter().any(|s| s.name == schema.name) {
                    state.states.push(schema.clone());
                }
            }
            let Some(file) = &old.file else { continue };
            let bytes = &self.files[&file.path];
            for (key_group, extent) in &old.keyed {
                if range.contains(*key_group) {
                    state.keyed.push((*key_group, slice(bytes, *extent)?));
                }
            }
            if let Some((mode, extent)) = old.operator {
                let mine = match mode {
                    Redistribution::Union => true,
                    Redistribution::RoundRobin => old.subtask % parallelism == subtask,
                    Redistribution::Broadcast => Some(old.subtask) == broadcast_from,
                };
                if mine {
                    state.operator.push(slice(bytes, extent)?);
                }
            }
        }
        state.keyed.sort_by_key(|(kg, _)| *kg);
        Ok((!state.is_empty()).then_some(state))
    }

    /// The in-flight records (of an unaligned checkpoint) stored under `id` for `subtask` of
    /// `parallelism`, encoded. They belong to the channels of one subtask: a checkpoint that has
    /// some restores only at the parallelism it was taken at.
    pub(crate) fn in_flight_for(
        &self,
        id: &str,
        subtask: usize,
        parallelism: usize,
    ) -> Result<Option<Vec<u8>>> {
        let Some(operator) = self.manifest.operators.get(id) else {
            return Ok(None);
        };
        self.used.lock().expect("used lock").insert(id.to_string());
        if operator.parallelism != parallelism {
            return Err(Error::Checkpoint(format!(
                "{} is an unaligned checkpoint with records in flight at `{}`, taken at \
                 parallelism {}: it restores only at that parallelism, not at {parallelism}. \
                 Change the parallelism from a savepoint (always aligned) or an aligned checkpoint",
                self.description, operator.name, operator.parallelism
            )));
        }
        let Some(old) = operator.subtasks.iter().find(|s| s.subtask == subtask) else {
            return Ok(None);
        };
        match (&old.file, old.operator) {
            (Some(file), Some((_, extent))) => Ok(Some(slice(&self.files[&file.path], extent)?)),
            _ => Ok(None),
        }
    }

    /// Copies into `store` the entries of `range` from every store checkpoint that holds some of
    /// them (downloaded to `local` first), each within its entry's key groups. Entries with the
    /// same files (one store composed for several ranges) are downloaded once.
    pub(crate) fn restore_store(
        &self,
        store: &dyn KvStore,
        range: KeyGroupRange,
        local: &Path,
    ) -> Result<()> {
        let mut downloaded: Vec<(&[(String, FileRef)], std::path::PathBuf)> = Vec::new();
        let result = (|| {
            for old in &self.manifest.stores {
                let (start, end) = old.key_groups;
                let (start, end) = (start.max(range.start), end.min(range.end));
                if start > end {
                    continue;
                }
                let known = downloaded
                    .iter()
                    .find(|(files, _)| *files == old.files.as_slice());
                let dir = match known {
                    Some((_, dir)) => dir.clone(),
                    None => {
                        let dir = local.join(format!("restore-{}", old.store_id));
                        downloaded.push((old.files.as_slice(), dir.clone()));
                        std::fs::create_dir_all(&dir).map_err(|e| {
                            Error::io(format!("cannot create `{}`", dir.display()), e)
                        })?;
                        for (name, file) in &old.files {
                            let bytes = self.storage.read(file)?;
                            std::fs::write(dir.join(name), bytes).map_err(|e| {
                                Error::io(format!("cannot write `{}`", dir.display()), e)
                            })?;
                        }
                        dir
                    }
                };
                store.restore_from(&dir, KeyGroupRange { start, end })?;
            }
            Ok(())
        })();
        for (_, dir) in downloaded {
            let _ = std::fs::remove_dir_all(&dir);
        }
        result
    }

    /// Operators of the checkpoint with state (not only a watermark) that no operator of the
    /// job took.
    pub(crate) fn unused(&self) -> Vec<String> {
        let used = self.used.lock().expect("used lock");
        self.manifest
            .operators
            .iter()
            .filter(|(id, op)| !used.contains(*id) && op.subtasks.iter().any(|s| s.file.is_some()))
            .map(|(id, _)| id.clone())
            .collect()
    }
}

/// The old subtask whose copy of broadcast state new subtask `subtask` restores: old subtask
/// `subtask % old_parallelism` when it wrote one, else the first that did (`None`: no copy).
fn broadcast_copy_for(
    subtasks: &[crate::checkpoint::SubtaskState],
    old_parallelism: usize,
    subtask: usize,
) -> Option<usize> {
    let copies = || {
        subtasks.iter().filter(|old| {
            old.file.is_some() && matches!(old.operator, Some((Redistribution::Broadcast, _)))
        })
    };
    let preferred = subtask % old_parallelism.max(1);
    copies()
        .find(|old| old.subtask == preferred)
        .or_else(|| copies().min_by_key(|old| old.subtask))
        .map(|old| old.subtask)
}

fn kind_name(manifest: &Manifest) -> &'static str {
    match manifest.kind {
        crate::checkpoint::SnapshotKind::Checkpoint => "checkpoint",
        crate::checkpoint::SnapshotKind::Savepoint => "savepoint",
    }
}

#[cfg(test)]
mod tests {
    use std::sync::OnceLock;
    use std::time::Duration;

    use super::*;
    use crate::aggregate::Count;
    use crate::checkpoint::CheckpointConfig;
    use crate::checkpoint::manifest::MANIFEST_FILE;
    use crate::source::datagen::DatagenSource;
    use crate::source::function::FnGenerator;
    use crate::time::WatermarkStrategy;
    use crate::window::Tumbling;
    use crate::{EnvConfig, StreamEnv};

    /// A real checkpoint of a windowed job (state files with keyed and operator state), taken
    /// once: (storage root, checkpoint directory name).
    fn checkpoint() -> &'static (tempfile::TempDir, String) {
        static CHECKPOINT: OnceLock<(tempfile::TempDir, String)> = OnceLock::new();
        CHECKPOINT.get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let env = StreamEnv::with_config(EnvConfig {
                parallelism: 2,
                checkpoints: CheckpointConfig {
                    interval: Some(Duration::from_millis(30)),
                    storage: dir.path().to_str().unwrap().into(),
                    ..CheckpointConfig::default()
                },
                ..EnvConfig::default()
            });
            // (user, event time): 50 users, a record every 5 ms of event time.
            let visits = FnGenerator::new(|i| (i % 50, i as i64 * 5));
            env.from_source_with_watermarks(
                DatagenSource::new(visits).count(6_000).rate(20_000.0),
                WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(5))
                    .with_timestamps(|c: &(u64, i64)| c.1),
            )
            .uid("clicks")
            .key_by(|c| c.0)
            .window(Tumbling::of(Duration::from_secs(60)))
            .aggregate(Count)
            .uid("count")
            .sink(crate::sink::BlackholeSink::new());
            env.execute().unwrap();
            let storage = storage(dir.path());
            let latest = *storage.completed_checkpoints().unwrap().last().unwrap();
            (dir, format!("{CHECKPOINT_PREFIX}{latest}"))
        })
    }

    fn storage(root: &Path) -> Arc<CheckpointStorage> {
        Arc::new(
            CheckpointStorage::open(root.to_str().unwrap(), &[], "riffle-job", "test").unwrap(),
        )
    }

    /// Every piece of state the checkpoint hands out, operator by operator.
    fn handed_out(assignment: &RestoreAssignment) -> Vec<Option<RestoreState>> {
        let range = KeyGroupRange { start: 0, end: 127 };
        let mut ids: Vec<_> = assignment.manifest.operators.keys().cloned().collect();
        ids.sort();
        ids.iter()
            .map(|id| assignment.state_for(id, 0, 1, range).unwrap())
            .collect()
    }

    /// The files of the checkpoint, relative to the job's root, manifest first.
    fn files(root: &Path, dir: &str) -> Vec<String> {
        let manifest = storage(root).read_manifest(dir).unwrap();
        let mut files = vec![format!("{dir}/{MANIFEST_FILE}")];
        files.extend(manifest.files().map(|f| f.path.clone()));
        files.dedup();
        files
    }

    /// An assignment of broadcast state written by `old` subtasks (`None`: wrote no file), each
    /// copy one byte: its subtask's index.
    fn broadcast_assignment(old: &[Option<usize>]) -> (tempfile::TempDir, RestoreAssignment) {
        use crate::checkpoint::{OperatorState, SubtaskState};
        let dir = tempfile::tempdir().unwrap();
        let storage = storage(dir.path());
        let mut files = HashMap::new();
        let subtasks = old
            .iter()
            .enumerate()
            .map(|(subtask, wrote)| {
                let file = wrote.map(|copy| {
                    let file = storage
                        .write(&format!("chk-1/rules/{subtask}.state"), vec![copy as u8])
                        .unwrap();
                    files.insert(file.path.clone(), vec![copy as u8]);
                    file
                });
                SubtaskState {
                    subtask,
                    operator: file
                        .as_ref()
                        .map(|_| (Redistribution::Broadcast, Extent { offset: 0, len: 1 })),
                    file,
                    keyed: Vec::new(),
                    watermark: None,
                    states: Vec::new(),
                }
            })
            .collect();
        let manifest = Manifest {
            version: crate::checkpoint::manifest::MANIFEST_VERSION,
            job: "riffle-job".into(),
            checkpoint_id: 1,
            kind: crate::checkpoint::SnapshotKind::Checkpoint,
            timestamp: 0,
            max_parallelism: 128,
            key_hash_version: crate::keys::KEY_HASH_VERSION,
            operators: [(
                "rules".to_string(),
                OperatorState {
                    name: "BroadcastProcess".into(),
                    parallelism: old.len(),
                    keyed: false,
                    subtasks,
                },
            )]
            .into(),
            stores: Vec::new(),
            finished: false,
        };
        let assignment = RestoreAssignment {
            manifest,
            files,
            storage,
            description: "test".into(),
            used: Mutex::new(BTreeSet::new()),
        };
        (dir, assignment)
    }

    /// The broadcast copies each new subtask of `parallelism` restores.
    fn copies(assignment: &RestoreAssignment, parallelism: usize) -> Vec<Vec<Vec<u8>>> {
        let range = KeyGroupRange { start: 0, end: 127 };
        (0..parallelism)
            .map(|subtask| {
                assignment
                    .state_for("rules", subtask, parallelism, range)
                    .unwrap()
                    .map_or(Vec::new(), |state| state.operator)
            })
            .collect()
    }

    #[test]
    fn broadcast_state_gives_every_new_subtask_exactly_one_copy_at_any_parallelism() {
        // 3 -> 1, 3 -> 3 (each its own copy), 3 -> 5 (round the old copies).
        let (_dir, three) = broadcast_assignment(&[Some(0), Some(1), Some(2)]);
        assert_eq!(copies(&three, 1), vec![vec![vec![0]]]);
        assert_eq!(
            copies(&three, 3),
            vec![vec![vec![0]], vec![vec![1]], vec![vec![2]]]
        );
        let five: Vec<Vec<Vec<u8>>> = [0, 1, 2, 0, 1].iter().map(|&c| vec![vec![c]]).collect();
        assert_eq!(copies(&three, 5), five);
        // 1 -> 3: the one copy to everyone.
        let (_dir, one) = broadcast_assignment(&[Some(0)]);
        assert_eq!(copies(&one, 3), vec![vec![vec![0]]; 3]);
        // An old subtask without a copy: its successor takes the first copy there is.
        let (_dir, gap) = broadcast_assignment(&[None, Some(1), Some(2)]);
        assert_eq!(
            copies(&gap, 3),
            vec![vec![vec![1]], vec![vec![1]], vec![vec![2]]]
        );
    }

    #[test]
    fn an_extent_past_the_end_is_an_error_not_an_overflow() {
        let bytes = [1u8, 2, 3, 4];
        assert_eq!(slice(&bytes, Extent { offset: 1, len: 2 }).unwrap(), [2, 3]);
        for (offset, len) in [(u64::MAX, 2), (2, u64::MAX), (3, 2), (5, 0)] {
            let err = slice(&bytes, Extent { offset, len }).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "checkpoint: a state extent ({offset}+{len} bytes) lies outside its \
                     file (4 bytes)"
                )
            );
        }
    }

    #[test]
    fn the_checkpoint_of_the_fuzz_tests_has_state() {
        let (root, dir) = checkpoint();
        let assignment = RestoreAssignment::load(&storage(root.path()), dir).unwrap();
        assert!(handed_out(&assignment).iter().any(|s| s.is_some()));
        assert!(files(root.path(), dir).len() >= 2);
    }

    proptest::proptest! {
        #![proptest_config(crate::util::fuzz_config(48))]

        /// A truncated or bit-flipped file of a checkpoint (a state file or the manifest): the
        /// restore refuses it with a reason naming the damage, or (damage to the manifest's
        /// white space only) restores exactly what was saved. Never a panic, never other state.
        #[test]
        fn a_damaged_checkpoint_is_refused_never_misread(
            which in proptest::num::usize::ANY,
            at in proptest::num::usize::ANY,
            bit in 0u8..8,
            truncate in proptest::bool::ANY,
        ) {
            let (root, dir) = checkpoint();
            let original = RestoreAssignment::load(&storage(root.path()), dir).unwrap();
            let expected = handed_out(&original);
            let copy = tempfile::tempdir().unwrap();
            let job = copy.path().join("riffle-job");
            std::fs::create_dir_all(job.join(dir)).unwrap();
            let files = files(root.path(), dir);
            for file in &files {
                let to = job.join(file);
                std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                std::fs::copy(root.path().join("riffle-job").join(file), to).unwrap();
            }
            let damaged = job.join(&files[which % files.len()]);
            let mut bytes = std::fs::read(&damaged).unwrap();
            let at = at % bytes.len();
            if truncate {
                bytes.truncate(at);
            } else {
                bytes[at] ^= 1 << bit;
            }
            std::fs::write(&damaged, &bytes).unwrap();
            match RestoreAssignment::load(&storage(copy.path()), dir) {
                Ok(restored) => {
                    proptest::prop_assert_eq!(&restored.manifest, &original.manifest);
                    proptest::prop_assert_eq!(handed_out(&restored), expected);
                }
                Err(error) => {
                    let message = error.to_string();
                    proptest::prop_assert!(
                        message.contains("is damaged") || message.contains("not a usable manifest"),
                        "{}", message
                    );
                }
            }
        }
    }
}
