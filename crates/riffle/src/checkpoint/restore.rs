//! Restoring a job from a checkpoint or savepoint: finding the one to use (the latest that is
//! whole: a damaged file makes the previous one the candidate), and handing every operator
//! instance its state: the key groups it owns now, and its share of non-keyed state.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::checkpoint::manifest::{Extent, Manifest};
use crate::checkpoint::storage::CHECKPOINT_PREFIX;
use crate::checkpoint::{CheckpointStorage, Redistribution, RestoreState};
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
    let (start, end) = (
        extent.offset as usize,
        (extent.offset + extent.len) as usize,
    );
    bytes
        .get(start..end)
        .map(<[u8]>::to_vec)
        .ok_or_else(|| Error::Checkpoint("a state extent lies outside its file".into()))
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
        for old in &operator.subtasks {
            if let Some(watermark) = old.watermark {
                state.watermark = Some(state.watermark.map_or(watermark, |w| w.min(watermark)));
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
                };
                if mine {
                    state.operator.push(slice(bytes, extent)?);
                }
            }
        }
        state.keyed.sort_by_key(|(kg, _)| *kg);
        Ok((!state.is_empty()).then_some(state))
    }

    /// Copies into `store` the entries of `range` from every store checkpoint that holds some of
    /// them (downloaded to `local` first).
    pub(crate) fn restore_store(
        &self,
        store: &dyn KvStore,
        range: KeyGroupRange,
        local: &Path,
    ) -> Result<()> {
        for old in &self.manifest.stores {
            let (start, end) = old.key_groups;
            if end < range.start || start > range.end {
                continue;
            }
            let dir = local.join(format!("restore-{}", old.store_id));
            std::fs::create_dir_all(&dir)
                .map_err(|e| Error::io(format!("cannot create `{}`", dir.display()), e))?;
            for (name, file) in &old.files {
                let bytes = self.storage.read(file)?;
                std::fs::write(dir.join(name), bytes)
                    .map_err(|e| Error::io(format!("cannot write `{}`", dir.display()), e))?;
            }
            store.restore_from(&dir, range)?;
            let _ = std::fs::remove_dir_all(&dir);
        }
        Ok(())
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

fn kind_name(manifest: &Manifest) -> &'static str {
    match manifest.kind {
        crate::checkpoint::SnapshotKind::Checkpoint => "checkpoint",
        crate::checkpoint::SnapshotKind::Savepoint => "savepoint",
    }
}
