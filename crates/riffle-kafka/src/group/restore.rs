//! A run's restore: the state its partitions' committed offsets name, composed into one
//! manifest; and what happens when that state cannot be found.
//!
//! Each committed offset's note ([`super::note`]) names the snapshot that holds its partition's
//! state at that offset (a run's directory and checkpoint), and where the partition's reader
//! stood is in the file [`READERS_FILE`] of that checkpoint. A run composes the snapshots its
//! partitions name, each clipped to the key groups of its partitions (`Manifest::compose`).
//!
//! **State that is gone.** When a committed offset names a snapshot that is not there (removed
//! by hand, a storage that lost it, a storage that is not the group's), the member does not fail
//! and exit (its replacement would fail the same way, for ever): it says so at ERROR, naming
//! each partition, its offset and what is missing, reports it in `/api/v1/group`
//! (`missing_state`) and in the storage (`<group>-missing-state/`), and waits, checking again
//! every few seconds. It starts when the snapshot is back, when the assignment moves the
//! partition away, or when an operator accepts the loss: `riffle group accept-state-loss
//! --group NAME --checkpoint-dir DIR` ([`accept_state_loss`]) records, for each reported
//! partition and offset, that it may start with empty state there. Nothing is lost silently.

use std::collections::BTreeMap;

use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};
use riffle::checkpoint::{CheckpointStorage, Manifest, ManifestPart, RestoreFrom, checkpoint_dir};
use riffle::keys::KeyGroupRange;
use serde::{Deserialize, Serialize};

use super::note::CommitNote;
use super::{KafkaGroup, ReaderPositions, TIMEOUT, legacy};
use crate::kafka_error;

/// The file, in a run's checkpoint directory, of where the readers of the partitions committed
/// with that checkpoint stood.
pub(super) const READERS_FILE: &str = "group-readers.json";

/// Where one partition's reader stood, in [`READERS_FILE`].
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct ReaderAt {
    pub(super) topic: String,
    pub(super) partition: i32,
    pub(super) reader: serde_json::Value,
}

/// A partition's committed offset, with its note.
#[derive(Clone, Debug)]
pub(super) struct Committed {
    pub(super) topic: String,
    pub(super) partition: i32,
    pub(super) offset: i64,
    pub(super) note: CommitNote,
}

/// The partitions of `tpl` that have a committed offset, with it and its note.
pub(super) fn committed_partitions(tpl: &TopicPartitionList) -> Vec<Committed> {
    tpl.elements()
        .iter()
        .filter_map(|element| match element.offset() {
            Offset::Offset(offset) => Some(Committed {
                topic: element.topic().to_string(),
                partition: element.partition(),
                offset,
                note: CommitNote::parse(element.metadata()),
            }),
            _ => None, // nothing committed yet: no state
        })
        .collect()
}

/// A partition whose committed offset names state that cannot be found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissingState {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// Its committed offset.
    pub offset: i64,
    /// The member that committed it.
    pub committed_by: String,
    /// What is missing (the path of the snapshot's manifest, or why none is named).
    pub missing: String,
}

impl std::fmt::Display for MissingState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}-{} at offset {} (committed by {}): {}",
            self.topic, self.partition, self.offset, self.committed_by, self.missing
        )
    }
}

/// What the committed offsets of some partitions name.
#[derive(Default)]
pub(super) struct Named {
    /// Where the partitions' readers stood.
    pub(super) readers: ReaderPositions,
    /// The snapshots of the partitions that carry keyed state, each with their key groups.
    pub(super) parts: Vec<ManifestPart>,
    /// The partitions whose named state is not there.
    pub(super) missing: Vec<MissingState>,
}

/// The key groups a snapshot is restored for, and the committed partitions that name it.
type Naming<'a> = (Vec<KeyGroupRange>, Vec<&'a Committed>);

/// What a run restores from.
pub(super) enum Composed {
    /// The composed manifest (`None`: nothing committed yet).
    Ready(Option<RestoreFrom>),
    /// State named by committed offsets is missing, and its loss was not accepted.
    Missing(Vec<MissingState>),
}

/// Where reports of missing state and their acceptances go, under the storage's root.
fn missing_dir(group: &str) -> String {
    format!("{group}-missing-state")
}

fn accepted_path(group: &str, missing: &MissingState) -> String {
    format!(
        "{group}-accepted-loss/{}-{}/{}.json",
        missing.topic, missing.partition, missing.offset
    )
}

fn report_path(group: &str, missing: &MissingState) -> String {
    format!(
        "{}/{}-{}/{}.json",
        missing_dir(group),
        missing.topic,
        missing.partition,
        missing.offset
    )
}

/// The missing state that members of `group` reported in `storage` (the group's checkpoint
/// storage) and whose loss nobody accepted yet: what `riffle group accept-state-loss` lists.
pub fn reported_missing_state(
    storage: &CheckpointStorage,
    group: &str,
) -> riffle::Result<Vec<MissingState>> {
    let mut found = Vec::new();
    for partition in storage.subdirectories(&missing_dir(group))? {
        let dir = format!("{}/{partition}", missing_dir(group));
        for offset in storage.files(&dir)? {
            let Some(bytes) = storage.read_optional(&format!("{dir}/{offset}"))? else {
                continue;
            };
            let Ok(missing) = serde_json::from_slice::<MissingState>(&bytes) else {
                continue;
            };
            if storage
                .read_optional(&accepted_path(group, &missing))?
                .is_none()
            {
                found.push(missing);
            }
        }
    }
    found.sort_by(|a, b| (&a.topic, a.partition, a.offset).cmp(&(&b.topic, b.partition, b.offset)));
    Ok(found)
}

/// Accepts the loss of the state `missing` names (from [`reported_missing_state`]), for
/// `group`: a member that owns such a partition starts it with empty state at that committed
/// offset. `by` says who accepted (kept with the acceptance). The explicit operator action that
/// un-blocks a group whose state is gone; the loss is logged by every member that acts on it.
pub fn accept_state_loss(
    storage: &CheckpointStorage,
    group: &str,
    missing: &[MissingState],
    by: &str,
) -> riffle::Result<()> {
    for lost in missing {
        let acceptance = serde_json::json!({
            "accepted_by": by,
            "at": std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            "state": lost,
        });
        storage.write(
            &accepted_path(group, lost),
            serde_json::to_vec_pretty(&acceptance).map_err(riffle::Error::user)?,
        )?;
    }
    Ok(())
}

impl KafkaGroup {
    /// The keyed state of the partitions this process owns, composed from the snapshots named
    /// by their committed offsets into one manifest under `storage` (a restore of it), or the
    /// partitions whose named state is missing and not accepted as lost.
    pub(super) fn compose_restore(
        &self,
        storage: &CheckpointStorage,
        location: &str,
        job: &str,
        max_parallelism: usize,
    ) -> riffle::Result<Composed> {
        let mut tpl = TopicPartitionList::new();
        for (topic, partition) in self.assignment() {
            tpl.add_partition(&topic, partition);
        }
        let committed = self
            .inner
            .member
            .committed_offsets(tpl, TIMEOUT)
            .map_err(|e| kafka_error("cannot read the group's committed offsets", e))?;
        let named = self.named_snapshots(
            storage,
            &committed_partitions(&committed),
            max_parallelism,
            CheckFiles::All,
        )?;
        let mut missing = Vec::new();
        for lost in named.missing {
            match storage.read_optional(&accepted_path(&self.inner.name, &lost))? {
                Some(acceptance) => tracing::warn!(
                    group = %self.inner.name,
                    acceptance = %String::from_utf8_lossy(&acceptance),
                    "group: {lost}; its loss was accepted: the partition starts with empty state"
                ),
                None => missing.push(lost),
            }
        }
        if !missing.is_empty() {
            return Ok(Composed::Missing(missing));
        }
        *self.inner.missing.lock().expect("missing lock") = Vec::new();
        *self.inner.restored.lock().expect("restored lock") = named.readers;
        if named.parts.is_empty() {
            return Ok(Composed::Ready(None));
        }
        let manifest = Manifest::compose(job, named.parts).map_err(riffle::Error::Checkpoint)?;
        // Distinct files: a store composed for several ranges is named once per range.
        let files: BTreeMap<&str, &riffle::checkpoint::FileRef> = manifest
            .all_files()
            .map(|file| (file.path.as_str(), file))
            .collect();
        let warm = files.values().filter(|file| storage.is_warm(file)).count();
        let dir = format!("{}-restore/{job}", self.inner.name);
        storage.write_manifest(&dir, &manifest)?;
        tracing::info!(
            group = %self.inner.name,
            manifest = %dir,
            files = files.len(),
            warm,
            "group: restoring the partitions' state ({warm} files held warm by the standby replica)"
        );
        Ok(Composed::Ready(Some(RestoreFrom::Manifest {
            location: location.to_string(),
            dir,
        })))
    }

    /// Says loudly that the state of `missing` is gone, in the log, the group's status and the
    /// storage (for `riffle group accept-state-loss`).
    pub(super) fn report_missing(&self, storage: &CheckpointStorage, missing: &[MissingState]) {
        for lost in missing {
            tracing::error!(
                group = %self.inner.name,
                storage = storage.description(),
                "group: the state of {lost} is gone; this member waits (the partition's state \
                 cannot be restored, and starting without it would lose it silently). Restore \
                 the snapshot into the storage, or accept the loss: riffle group \
                 accept-state-loss --group {} --checkpoint-dir <the group's storage>",
                self.inner.name
            );
            match serde_json::to_vec_pretty(lost) {
                Ok(bytes) => {
                    if let Err(e) = storage.write(&report_path(&self.inner.name, lost), bytes) {
                        tracing::warn!(group = %self.inner.name, error = %e, "group: cannot report the missing state");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "group: cannot write a report"),
            }
        }
        *self.inner.missing.lock().expect("missing lock") = missing.to_vec();
    }

    /// What the committed offsets `committed` name: the reader positions the checkpoints they
    /// name hold, and, for the partitions that carry keyed state, their snapshots as parts of a
    /// manifest, each with the key groups of its partitions; and the partitions whose named
    /// state is not there.
    pub(super) fn named_snapshots(
        &self,
        storage: &CheckpointStorage,
        committed: &[Committed],
        max_parallelism: usize,
        files: CheckFiles,
    ) -> riffle::Result<Named> {
        let group = self.inner.name.as_str();
        let mut named = Named::default();
        let mut readers: BTreeMap<(String, u64), Vec<ReaderAt>> = BTreeMap::new();
        // The keyed partitions, each with the snapshot it names (a source partition needs
        // only where its reader stood).
        let mut keyed = Vec::new();
        for at in committed {
            let (topic, partition) = (at.topic.as_str(), at.partition);
            let snapshot = match at.note.snapshot() {
                Some((run, checkpoint)) => {
                    let key = (run.to_string(), checkpoint);
                    if !readers.contains_key(&key) {
                        let file = format!("{run}/{}/{READERS_FILE}", checkpoint_dir(checkpoint));
                        let found = storage
                            .read_optional(&file)?
                            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
                            .unwrap_or_default();
                        readers.insert(key.clone(), found);
                    }
                    if let Some(reader) = readers[&key]
                        .iter()
                        .find(|r| r.topic == topic && r.partition == partition)
                    {
                        named
                            .readers
                            .insert((topic.to_string(), partition), reader.reader.clone());
                    }
                    Some(key)
                }
                None => match legacy::read_marker(storage, group, topic, partition, at.offset)? {
                    Some(marker) => {
                        if let Some(reader) = marker.reader {
                            named.readers.insert((topic.to_string(), partition), reader);
                        }
                        Some((marker.job, marker.checkpoint))
                    }
                    None => None,
                },
            };
            if self.keyed(topic) {
                keyed.push((at, snapshot));
            }
        }
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for (at, snapshot) in &keyed {
            if snapshot.is_some() && !counts.contains_key(&at.topic) {
                counts.insert(at.topic.clone(), self.partition_count(&at.topic)?);
            }
        }
        let plan = plan_restore(keyed, &counts, max_parallelism, storage.description())?;
        named.missing = plan.unnamed;
        for ((prefix, checkpoint), (key_groups, by)) in plan.snapshots {
            let dir = format!("{prefix}/{}", checkpoint_dir(checkpoint));
            let gone = match storage.read_manifest_optional(&dir)? {
                None => Some(format!("{dir}/{}", riffle::checkpoint::MANIFEST_FILE)),
                Some(manifest) => match first_missing_file(storage, &prefix, &manifest, files)? {
                    Some(file) => Some(file),
                    None => {
                        named.parts.push(ManifestPart {
                            prefix,
                            manifest,
                            key_groups,
                        });
                        None
                    }
                },
            };
            if let Some(gone) = gone {
                named.missing.extend(by.into_iter().map(|at| MissingState {
                    topic: at.topic.clone(),
                    partition: at.partition,
                    offset: at.offset,
                    committed_by: at.note.member.clone(),
                    missing: format!("`{gone}` is not in {}", storage.description()),
                }));
            }
        }
        Ok(named)
    }
}

/// The snapshots a run restores, from the keyed partitions' commits: each snapshot with the key
/// groups of the partitions that name it (a partition of `n` owns the key groups a subtask `p`
/// of `n` would), and the partitions that name none (missing state: never an empty start).
pub(super) struct RestorePlan<'a> {
    /// By snapshot (run directory, checkpoint): its key groups and the partitions naming it.
    pub(super) snapshots: BTreeMap<(String, u64), Naming<'a>>,
    /// Keyed partitions whose commit names no snapshot.
    pub(super) unnamed: Vec<MissingState>,
}

/// Plans a restore, as a pure function: `keyed` is each committed keyed partition with the
/// snapshot its commit (or an earlier release's marker) names, `partitions` the partition count
/// of each topic that names one, `storage` the storage's description for the reports. A topic
/// with more partitions than `max_parallelism` is a configuration error (a partition must own
/// at least one key group).
pub(super) fn plan_restore<'a>(
    keyed: Vec<(&'a Committed, Option<(String, u64)>)>,
    partitions: &BTreeMap<String, usize>,
    max_parallelism: usize,
    storage: &str,
) -> riffle::Result<RestorePlan<'a>> {
    let mut plan = RestorePlan {
        snapshots: BTreeMap::new(),
        unnamed: Vec::new(),
    };
    for (at, snapshot) in keyed {
        let Some(snapshot) = snapshot else {
            plan.unnamed.push(MissingState {
                topic: at.topic.clone(),
                partition: at.partition,
                offset: at.offset,
                committed_by: at.note.member.clone(),
                missing: format!(
                    "the commit names no snapshot, and no marker of an earlier release is in \
                     {storage} for it"
                ),
            });
            continue;
        };
        let count = *partitions.get(&at.topic).ok_or_else(|| {
            riffle::Error::Checkpoint(format!(
                "no partition count for `{}` while planning a restore",
                at.topic
            ))
        })?;
        if count > max_parallelism {
            return Err(riffle::Error::config(
                "max_parallelism",
                format!(
                    "is {max_parallelism}, below the {count} partitions of `{}`: a partition \
                     must own at least one key group",
                    at.topic
                ),
            ));
        }
        let entry = plan.snapshots.entry(snapshot).or_default();
        entry.0.push(KeyGroupRange::for_subtask(
            at.partition as usize,
            count,
            max_parallelism,
        ));
        entry.1.push(at);
    }
    Ok(plan)
}

/// Which files of the named snapshots [`KafkaGroup::named_snapshots`] checks are there.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum CheckFiles {
    /// Every file (a restore: a snapshot whose store files are gone is missing state, not an
    /// error the restore would fail on for ever).
    All,
    /// Only the manifests (a standby replica's refresh, every interval).
    Manifests,
}

/// The first file of the snapshot `manifest` (of the run directory `prefix`) that is not in
/// `storage`, when `files` asks to look (a file held warm is there).
fn first_missing_file(
    storage: &CheckpointStorage,
    prefix: &str,
    manifest: &Manifest,
    files: CheckFiles,
) -> riffle::Result<Option<String>> {
    if files == CheckFiles::Manifests {
        return Ok(None);
    }
    for file in manifest.all_files() {
        let path = format!("{prefix}/{}", file.path);
        let warm = riffle::checkpoint::FileRef {
            path: path.clone(),
            ..file.clone()
        };
        if !storage.is_warm(&warm) && !storage.exists(&path)? {
            return Ok(Some(path));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn committed(topic: &str, partition: i32, offset: i64) -> Committed {
        Committed {
            topic: topic.into(),
            partition,
            offset,
            note: CommitNote {
                member: format!("host/{partition}/00ff"),
                ..CommitNote::default()
            },
        }
    }

    fn snapshot(run: &str, checkpoint: u64) -> Option<(String, u64)> {
        Some((run.to_string(), checkpoint))
    }

    #[test]
    fn partitions_naming_one_snapshot_restore_it_for_their_key_groups_together() {
        let (p0, p1, p2) = (
            committed("shuffle", 0, 10),
            committed("shuffle", 1, 20),
            committed("shuffle", 2, 30),
        );
        let counts = BTreeMap::from([("shuffle".to_string(), 4)]);
        let plan = plan_restore(
            vec![
                (&p0, snapshot("run-a", 7)),
                (&p2, snapshot("run-a", 7)),
                (&p1, snapshot("run-b", 3)),
            ],
            &counts,
            128,
            "the storage",
        )
        .expect("a plan");
        assert!(plan.unnamed.is_empty());
        assert_eq!(plan.snapshots.len(), 2);
        let (groups, by) = &plan.snapshots[&("run-a".to_string(), 7)];
        assert_eq!(
            groups,
            &vec![
                KeyGroupRange::for_subtask(0, 4, 128),
                KeyGroupRange::for_subtask(2, 4, 128)
            ]
        );
        assert_eq!(
            by.iter().map(|c| c.partition).collect::<Vec<_>>(),
            vec![0, 2]
        );
        let (groups, _) = &plan.snapshots[&("run-b".to_string(), 3)];
        assert_eq!(groups, &vec![KeyGroupRange::for_subtask(1, 4, 128)]);
    }

    #[test]
    fn a_keyed_partition_whose_commit_names_no_snapshot_is_missing_state_never_empty() {
        let (p0, p1) = (committed("shuffle", 0, 10), committed("shuffle", 1, 20));
        let counts = BTreeMap::from([("shuffle".to_string(), 2)]);
        let plan = plan_restore(
            vec![(&p0, None), (&p1, snapshot("run-a", 1))],
            &counts,
            128,
            "s3://bucket/group",
        )
        .expect("a plan");
        assert_eq!(plan.snapshots.len(), 1);
        assert_eq!(plan.unnamed.len(), 1);
        let missing = &plan.unnamed[0];
        assert_eq!(
            (missing.topic.as_str(), missing.partition, missing.offset),
            ("shuffle", 0, 10)
        );
        assert_eq!(missing.committed_by, "host/0/00ff");
        assert!(
            missing.missing.contains("names no snapshot")
                && missing.missing.contains("s3://bucket/group"),
            "{}",
            missing.missing
        );
    }

    #[test]
    fn more_partitions_than_key_groups_is_a_configuration_error_naming_the_setting() {
        let p0 = committed("shuffle", 0, 10);
        let counts = BTreeMap::from([("shuffle".to_string(), 256)]);
        let error = plan_restore(vec![(&p0, snapshot("run-a", 1))], &counts, 128, "here")
            .err()
            .expect("refused");
        let text = error.to_string();
        assert!(
            text.contains("max_parallelism") && text.contains("256 partitions"),
            "{text}"
        );
    }

    #[test]
    fn nothing_committed_plans_nothing() {
        let plan = plan_restore(Vec::new(), &BTreeMap::new(), 128, "here").expect("a plan");
        assert!(plan.snapshots.is_empty() && plan.unnamed.is_empty());
    }
}
