//! The manifest of a checkpoint or savepoint: which files hold which operator's state, with a
//! checksum per file. Written last: a checkpoint without a manifest never completed.
//!
//! The manifest checks itself too: [`Manifest::to_json`] adds a `checksum` (xxh3 of the
//! manifest's compact JSON) and [`Manifest::from_json`] verifies it, then checks that what the
//! manifest says is consistent (version, extents inside their files, key groups and subtasks in
//! range). A damaged manifest is refused with the reason, never restored from. Manifests written
//! before the checksum existed (no `checksum` key) are read, with the consistency checks only.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::checkpoint::Redistribution;
use crate::keys::{KeyGroup, KeyGroupRange};
use crate::record::Timestamp;

/// Version of the manifest format.
pub const MANIFEST_VERSION: u32 = 1;

/// Name of the manifest file in a checkpoint's directory.
pub const MANIFEST_FILE: &str = "_manifest.json";

/// A checkpoint (taken and retained by the job) or a savepoint (taken on request, owned by the user).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotKind {
    /// Periodic, for recovery; old ones are removed.
    Checkpoint,
    /// On request; never removed by the job.
    Savepoint,
}

/// A stored file: where, how big, and its checksum (xxh3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRef {
    /// Path relative to the storage root of the job.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// xxh3-64 of the content.
    pub checksum: u64,
}

/// Where one part of a subtask's state lies in its file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extent {
    /// Byte offset.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// The state of one operator subtask.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtaskState {
    /// Index of the subtask when the snapshot was taken.
    pub subtask: usize,
    /// The file holding its state (`None`: the operator had only its watermark).
    pub file: Option<FileRef>,
    /// Keyed state, per key group.
    pub keyed: Vec<(KeyGroup, Extent)>,
    /// Non-keyed operator state.
    pub operator: Option<(Redistribution, Extent)>,
    /// The operator's watermark at the barrier.
    #[serde(default)]
    pub watermark: Option<Timestamp>,
    /// The schemas of the operator's declared keyed state (name, version, type, format).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub states: Vec<crate::state::StateSchema>,
}

/// The state of one operator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorState {
    /// Operator name when the snapshot was taken.
    pub name: String,
    /// Parallelism when the snapshot was taken.
    pub parallelism: usize,
    /// A keyed operator: its keyed state is in its subtasks' `keyed` or, on a key-value store
    /// backend, in the task's store (written only when true).
    #[serde(default, skip_serializing_if = "is_false")]
    pub keyed: bool,
    /// The subtasks that had state.
    pub subtasks: Vec<SubtaskState>,
}

fn is_false(value: &bool) -> bool {
    !value
}

/// A checkpoint of one task's key-value store (RocksDB): its files, by their name in the store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreState {
    /// Identifies the store (its immutable files are shared between checkpoints).
    pub store_id: String,
    /// The key groups it holds.
    pub key_groups: (KeyGroup, KeyGroup),
    /// Its files: name in the store's directory, and where it is stored.
    pub files: Vec<(String, FileRef)>,
}

/// Everything a completed checkpoint or savepoint holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format version.
    pub version: u32,
    /// Name of the job.
    pub job: String,
    /// Checkpoint id.
    pub checkpoint_id: u64,
    /// Checkpoint or savepoint.
    pub kind: SnapshotKind,
    /// When it was triggered (epoch ms).
    pub timestamp: Timestamp,
    /// Number of key groups of the job.
    pub max_parallelism: usize,
    /// The scheme that put keys into key groups ([`KEY_HASH_VERSION`](crate::keys::KEY_HASH_VERSION)
    /// when written by this release); 0 for manifests written before it was recorded.
    #[serde(default)]
    pub key_hash_version: u32,
    /// State by operator id.
    pub operators: BTreeMap<String, OperatorState>,
    /// Checkpoints of the tasks' key-value stores.
    #[serde(default)]
    pub stores: Vec<StoreState>,
    /// Every task had finished when it was taken and every source had read its input to the
    /// end: the job is done, and a restore from it reads nothing (the job's final checkpoint).
    #[serde(default)]
    pub finished: bool,
}

/// A part of a composed manifest ([`Manifest::compose`]).
#[derive(Clone, Debug)]
pub struct ManifestPart {
    /// Where the part's snapshot lies, relative to the composed manifest's storage root: the
    /// prefix of its files' paths.
    pub prefix: String,
    /// The part's manifest.
    pub manifest: Manifest,
    /// The key groups taken from it.
    pub key_groups: Vec<KeyGroupRange>,
}

/// The key of the manifest's own checksum in its JSON object.
const CHECKSUM_KEY: &str = "checksum";

/// A key of `parsed` that `canonical` (the same document as the reader understood it) lacks.
fn unknown_key(parsed: &serde_json::Value, canonical: &serde_json::Value) -> Option<String> {
    use serde_json::Value;
    match (parsed, canonical) {
        (Value::Object(parsed), Value::Object(canonical)) => {
            parsed.iter().find_map(|(k, v)| match canonical.get(k) {
                None => Some(k.clone()),
                Some(c) => unknown_key(v, c),
            })
        }
        (Value::Array(parsed), Value::Array(canonical)) => parsed
            .iter()
            .zip(canonical)
            .find_map(|(p, c)| unknown_key(p, c)),
        _ => None,
    }
}

impl Manifest {
    /// The manifest as stored: pretty JSON with its own checksum.
    ///
    /// ```
    /// use riffle::checkpoint::{Manifest, SnapshotKind};
    /// let manifest = Manifest {
    ///     version: 1, job: "job".into(), checkpoint_id: 7,
    ///     kind: SnapshotKind::Checkpoint, timestamp: 0, max_parallelism: 128,
    ///     operators: Default::default(), stores: Vec::new(), finished: false,
    ///     key_hash_version: riffle::keys::KEY_HASH_VERSION,
    /// };
    /// let json = manifest.to_json().unwrap();
    /// assert_eq!(Manifest::from_json(&json).unwrap(), manifest);
    /// let damaged = String::from_utf8(json).unwrap().replace("\"checkpoint_id\": 7", "\"checkpoint_id\": 8");
    /// assert!(Manifest::from_json(damaged.as_bytes()).unwrap_err().contains("checksum"));
    /// ```
    pub fn to_json(&self) -> Result<Vec<u8>, String> {
        let mut value = serde_json::to_value(self).map_err(|e| e.to_string())?;
        let checksum = self.checksum()?;
        if let serde_json::Value::Object(map) = &mut value {
            map.insert(CHECKSUM_KEY.into(), checksum.into());
        }
        serde_json::to_vec_pretty(&value).map_err(|e| e.to_string())
    }

    /// Reads a stored manifest: parses it, verifies its checksum (when it has one) and its
    /// consistency. The error says what is wrong.
    pub fn from_json(bytes: &[u8]) -> Result<Manifest, String> {
        let mut value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        let stored = match &mut value {
            serde_json::Value::Object(map) => map.remove(CHECKSUM_KEY),
            _ => return Err("not a JSON object".into()),
        };
        let manifest: Manifest =
            serde_json::from_value(value.clone()).map_err(|e| e.to_string())?;
        // A key the manifest does not have is damage (a renamed `checksum` key included), not
        // something to skip: fields added later come with a new version.
        let canonical = serde_json::to_value(&manifest).map_err(|e| e.to_string())?;
        if let Some(key) = unknown_key(&value, &canonical) {
            return Err(format!("damaged: unknown key `{key}`"));
        }
        if let Some(stored) = stored {
            let computed = manifest.checksum()?;
            if stored.as_u64() != Some(computed) {
                return Err(format!(
                    "damaged: its checksum is {stored}, its content has checksum {computed}"
                ));
            }
        }
        manifest.validate()?;
        Ok(manifest)
    }

    /// xxh3 of the compact JSON of the manifest (without checksum).
    fn checksum(&self) -> Result<u64, String> {
        let compact = serde_json::to_vec(self).map_err(|e| e.to_string())?;
        Ok(xxhash_rust::xxh3::xxh3_64(&compact))
    }

    /// Checks that the manifest is consistent: it is what a restore relies on.
    pub fn validate(&self) -> Result<(), String> {
        if self.version != MANIFEST_VERSION {
            return Err(format!(
                "manifest version {} is not supported (this Riffle reads version {MANIFEST_VERSION})",
                self.version
            ));
        }
        if self.max_parallelism == 0 || self.max_parallelism > usize::from(KeyGroup::MAX) + 1 {
            return Err(format!(
                "max_parallelism {} is out of range 1..={}",
                self.max_parallelism,
                usize::from(KeyGroup::MAX) + 1
            ));
        }
        let key_group_ok = |kg: KeyGroup| usize::from(kg) < self.max_parallelism;
        for (id, op) in &self.operators {
            let context = |what: String| format!("operator `{id}`: {what}");
            if op.parallelism == 0 {
                return Err(context("parallelism 0".into()));
            }
            for subtask in &op.subtasks {
                if subtask.subtask >= op.parallelism {
                    return Err(context(format!(
                        "subtask {} of a parallelism of {}",
                        subtask.subtask, op.parallelism
                    )));
                }
                let extents = subtask
                    .keyed
                    .iter()
                    .map(|(_, e)| e)
                    .chain(subtask.operator.as_ref().map(|(_, e)| e));
                for extent in extents {
                    let Some(file) = &subtask.file else {
                        return Err(context(format!(
                            "subtask {} has state but no file",
                            subtask.subtask
                        )));
                    };
                    let end = extent.offset.checked_add(extent.len);
                    if end.is_none_or(|end| end > file.size) {
                        return Err(context(format!(
                            "extent {}+{} lies outside `{}` ({} bytes)",
                            extent.offset, extent.len, file.path, file.size
                        )));
                    }
                }
                if let Some((kg, _)) = subtask.keyed.iter().find(|(kg, _)| !key_group_ok(*kg)) {
                    return Err(context(format!(
                        "key group {kg} is not below max_parallelism {}",
                        self.max_parallelism
                    )));
                }
            }
        }
        for store in &self.stores {
            let (start, end) = store.key_groups;
            if start > end || !key_group_ok(end) {
                return Err(format!(
                    "store `{}`: key groups {start}..={end} out of range 0..{}",
                    store.store_id, self.max_parallelism
                ));
            }
        }
        Ok(())
    }

    /// One manifest of the keyed state of several snapshots: from each part, the key groups of
    /// its ranges, with its files' paths prefixed by the part's `prefix` (where its snapshot
    /// lies relative to the composed manifest's storage root). Keyed operators keep their union
    /// operator state; other non-keyed operator state is left out (a process group's sources start at their committed offsets), and so are operators
    /// that are not keyed; a keyed operator's watermark is the lowest of the parts'. Used by a
    /// process group to restore the partitions a process now owns from the snapshots of the
    /// processes that committed them (`docs/scale-out.md`).
    ///
    /// A part's key-value stores (RocksDB) come with the ranges clipped to what the store
    /// holds: a store's files hold other key groups too, and a restore copies only the entries
    /// of the store entry's key groups ([`StoreState::key_groups`]). A store shared by several
    /// ranges appears once per range, with the same files.
    pub fn compose(job: &str, parts: Vec<ManifestPart>) -> Result<Manifest, String> {
        let first = parts.first().ok_or("nothing to compose")?;
        let mut composed = Manifest {
            version: MANIFEST_VERSION,
            job: job.to_string(),
            checkpoint_id: parts
                .iter()
                .map(|p| p.manifest.checkpoint_id)
                .max()
                .unwrap_or(0),
            kind: SnapshotKind::Savepoint,
            timestamp: parts
                .iter()
                .map(|p| p.manifest.timestamp)
                .max()
                .unwrap_or(0),
            max_parallelism: first.manifest.max_parallelism,
            key_hash_version: first.manifest.key_hash_version,
            operators: BTreeMap::new(),
            stores: Vec::new(),
            finished: false,
        };
        for part in parts {
            let manifest = &part.manifest;
            if manifest.max_parallelism != composed.max_parallelism
                || manifest.key_hash_version != composed.key_hash_version
            {
                return Err(format!(
                    "`{}` has {} key groups (hash scheme {}), others {} (scheme {})",
                    part.prefix,
                    manifest.max_parallelism,
                    manifest.key_hash_version,
                    composed.max_parallelism,
                    composed.key_hash_version
                ));
            }
            for store in &manifest.stores {
                let (start, end) = store.key_groups;
                for range in &part.key_groups {
                    let (start, end) = (start.max(range.start), end.min(range.end));
                    if start > end {
                        continue;
                    }
                    composed.stores.push(StoreState {
                        store_id: format!("{}-{start}-{end}", store.store_id),
                        key_groups: (start, end),
                        files: store
                            .files
                            .iter()
                            .map(|(name, file)| {
                                let path = format!("{}/{}", part.prefix, file.path);
                                (
                                    name.clone(),
                                    FileRef {
                                        path,
                                        ..file.clone()
                                    },
                                )
                            })
                            .collect(),
                    });
                }
            }
            let wanted = |kg: &KeyGroup| part.key_groups.iter().any(|r| r.contains(*kg));
            for (id, op) in &manifest.operators {
                // Only keyed operators: the others' watermarks belong to the inputs the part's
                // process read then (its source partitions), not to the composed key groups.
                // (Manifests written before `keyed` was recorded: those with keyed state.)
                if !op.keyed && op.subtasks.iter().all(|s| s.keyed.is_empty()) {
                    continue;
                }
                let target =
                    composed
                        .operators
                        .entry(id.clone())
                        .or_insert_with(|| OperatorState {
                            name: op.name.clone(),
                            parallelism: 1,
                            keyed: true,
                            subtasks: Vec::new(),
                        });
                for subtask in &op.subtasks {
                    let keyed: Vec<(KeyGroup, Extent)> = subtask
                        .keyed
                        .iter()
                        .filter(|(kg, _)| wanted(kg))
                        .copied()
                        .collect();
                    // A keyed operator's union state (a window operator's list of windows
                    // with state, the only record of them when the slots lie in a store) goes
                    // to every subtask on any restore: a superset is what it is made for.
                    let union = subtask
                        .operator
                        .filter(|(redistribution, _)| *redistribution == Redistribution::Union);
                    if keyed.is_empty()
                        && union.is_none()
                        && subtask.watermark.is_none()
                        && subtask.states.is_empty()
                    {
                        continue;
                    }
                    let file = subtask
                        .file
                        .as_ref()
                        .filter(|_| !keyed.is_empty() || union.is_some())
                        .map(|f| FileRef {
                            path: format!("{}/{}", part.prefix, f.path),
                            ..f.clone()
                        });
                    target.subtasks.push(SubtaskState {
                        subtask: target.subtasks.len(),
                        file,
                        keyed,
                        operator: union,
                        watermark: subtask.watermark,
                        states: subtask.states.clone(),
                    });
                }
                target.parallelism = target.subtasks.len().max(1);
            }
        }
        composed.validate()?;
        Ok(composed)
    }

    /// Total bytes of the checkpoint's files (store files included, shared ones too).
    pub fn size(&self) -> u64 {
        self.all_files().map(|f| f.size).sum()
    }

    /// The operators' state files.
    pub fn files(&self) -> impl Iterator<Item = &FileRef> {
        self.operators
            .values()
            .flat_map(|op| op.subtasks.iter().filter_map(|s| s.file.as_ref()))
    }

    /// The operators' state files and the store files: everything a restore reads.
    pub fn all_files(&self) -> impl Iterator<Item = &FileRef> {
        self.files().chain(self.store_files())
    }

    /// The store files (some shared with other checkpoints).
    pub fn store_files(&self) -> impl Iterator<Item = &FileRef> {
        self.stores
            .iter()
            .flat_map(|s| s.files.iter().map(|(_, f)| f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_composed_manifest_takes_the_parts_key_groups_with_their_files_prefixed() {
        let mut part = sample();
        part.stores.clear();
        let window = &part.operators["window"];
        let composed = Manifest::compose(
            "job-b",
            vec![
                ManifestPart {
                    prefix: "job-a-1".into(),
                    manifest: part.clone(),
                    key_groups: vec![KeyGroupRange { start: 0, end: 3 }],
                },
                ManifestPart {
                    prefix: "job-a-2".into(),
                    manifest: part.clone(),
                    key_groups: vec![KeyGroupRange { start: 4, end: 7 }],
                },
            ],
        )
        .unwrap();
        let composed_window = &composed.operators["window"];
        // Key group 0 from the first part, 5 from the second: nothing else, no operator state.
        let keyed: Vec<(String, KeyGroup)> = composed_window
            .subtasks
            .iter()
            .flat_map(|s| {
                let path = s.file.as_ref().map(|f| f.path.clone()).unwrap_or_default();
                s.keyed.iter().map(move |(kg, _)| (path.clone(), *kg))
            })
            .collect();
        let original = window.subtasks[0].file.as_ref().unwrap().path.clone();
        assert_eq!(
            keyed,
            vec![
                (format!("job-a-1/{original}"), 0),
                (format!("job-a-2/{original}"), 5)
            ]
        );
        // Its union state (the windows with state) comes along from every part.
        let union: Vec<Option<(Redistribution, Extent)>> = composed_window
            .subtasks
            .iter()
            .map(|s| s.operator)
            .collect();
        assert_eq!(union, vec![window.subtasks[0].operator; 2]);
        // The window's watermark is the parts' lowest; the source, without keyed state, is left
        // out with its watermark (it belonged to what the parts' processes read).
        assert_eq!(composed_window.subtasks[0].watermark, Some(-5));
        assert!(!composed.operators.contains_key("source"));
        assert_eq!(composed.job, "job-b");
        assert_eq!(composed.kind, SnapshotKind::Savepoint);
        composed.validate().unwrap();
        // A part's key-value store comes once per range it holds keys of, clipped to the
        // store's key groups (0..=63 here), with its files prefixed.
        let composed = Manifest::compose(
            "job-b",
            vec![ManifestPart {
                prefix: "job-a-1".into(),
                manifest: sample(),
                key_groups: vec![
                    KeyGroupRange { start: 0, end: 3 },
                    KeyGroupRange { start: 60, end: 70 },
                    KeyGroupRange {
                        start: 64,
                        end: 127,
                    },
                ],
            }],
        )
        .unwrap();
        let stores: Vec<(String, (KeyGroup, KeyGroup), Vec<String>)> = composed
            .stores
            .iter()
            .map(|s| {
                let files = s.files.iter().map(|(_, f)| f.path.clone()).collect();
                (s.store_id.clone(), s.key_groups, files)
            })
            .collect();
        let files = vec!["job-a-1/shared/s1/000001.sst".to_string()];
        assert_eq!(
            stores,
            vec![
                ("s1-0-3".to_string(), (0, 3), files.clone()),
                ("s1-60-63".to_string(), (60, 63), files)
            ]
        );
        composed.validate().unwrap();
    }

    /// An operator recorded as keyed keeps its watermark in a composition even when its keyed
    /// state lies in the task's store (no keyed entries of its own).
    #[test]
    fn a_keyed_operator_with_its_state_in_a_store_keeps_its_watermark_when_composed() {
        let mut part = sample();
        for op in part.operators.values_mut() {
            for subtask in &mut op.subtasks {
                subtask.keyed.clear();
            }
        }
        let composed = Manifest::compose(
            "job-b",
            vec![ManifestPart {
                prefix: "job-a-1".into(),
                manifest: part,
                key_groups: vec![KeyGroupRange { start: 0, end: 3 }],
            }],
        )
        .unwrap();
        let keyed: Vec<&String> = composed.operators.keys().collect();
        assert_eq!(keyed, ["window"]);
        let window = &composed.operators["window"].subtasks[0];
        assert_eq!(window.watermark, Some(-5));
        // The windows with state are known from the union state alone (the slots are in the
        // store), so it comes with its file.
        assert!(matches!(window.operator, Some((Redistribution::Union, _))));
        assert_eq!(
            window.file.as_ref().map(|f| f.path.as_str()),
            Some("job-a-1/chk-3/window/0.state")
        );
        assert_eq!(composed.stores.len(), 1);
    }

    /// A manifest with every part filled: two operators, keyed and operator state, a store.
    pub(crate) fn sample() -> Manifest {
        let file = |path: &str, size| FileRef {
            path: path.into(),
            size,
            checksum: 0x1234_5678_9abc_def0,
        };
        let mut operators = BTreeMap::new();
        operators.insert(
            "window".to_string(),
            OperatorState {
                name: "Window".into(),
                parallelism: 2,
                keyed: true,
                subtasks: vec![
                    SubtaskState {
                        subtask: 0,
                        file: Some(file("chk-3/window/0.state", 100)),
                        keyed: vec![
                            (0, Extent { offset: 0, len: 40 }),
                            (
                                5,
                                Extent {
                                    offset: 40,
                                    len: 50,
                                },
                            ),
                        ],
                        operator: Some((
                            Redistribution::Union,
                            Extent {
                                offset: 90,
                                len: 10,
                            },
                        )),
                        watermark: Some(-5),
                        states: Vec::new(),
                    },
                    SubtaskState {
                        subtask: 1,
                        file: None,
                        keyed: vec![],
                        operator: None,
                        watermark: None,
                        states: Vec::new(),
                    },
                ],
            },
        );
        operators.insert(
            "source".to_string(),
            OperatorState {
                name: "Source: file".into(),
                parallelism: 1,
                keyed: false,
                subtasks: vec![SubtaskState {
                    subtask: 0,
                    file: Some(file("chk-3/source/0.state", 7)),
                    keyed: vec![],
                    operator: Some((Redistribution::RoundRobin, Extent { offset: 0, len: 7 })),
                    watermark: Some(i64::MAX),
                    states: Vec::new(),
                }],
            },
        );
        Manifest {
            version: MANIFEST_VERSION,
            job: "fuzz".into(),
            checkpoint_id: 3,
            kind: SnapshotKind::Savepoint,
            timestamp: 1_768_491_600_000,
            max_parallelism: 128,
            operators,
            stores: vec![StoreState {
                store_id: "s1".into(),
                key_groups: (0, 63),
                files: vec![("000001.sst".into(), file("shared/s1/000001.sst", 4096))],
            }],
            finished: true,
            key_hash_version: crate::keys::KEY_HASH_VERSION,
        }
    }

    #[test]
    fn a_manifest_round_trips_with_its_checksum() {
        let manifest = sample();
        let json = manifest.to_json().unwrap();
        assert!(String::from_utf8_lossy(&json).contains("\"checksum\":"));
        assert_eq!(Manifest::from_json(&json).unwrap(), manifest);
    }

    #[test]
    fn a_manifest_without_checksum_is_still_read() {
        let json = serde_json::to_vec_pretty(&sample()).unwrap();
        assert_eq!(Manifest::from_json(&json).unwrap(), sample());
    }

    #[test]
    fn inconsistent_manifests_are_refused_with_the_reason() {
        let check = |change: &dyn Fn(&mut Manifest), expected: &str| {
            let mut manifest = sample();
            change(&mut manifest);
            let err = Manifest::from_json(&manifest.to_json().unwrap()).unwrap_err();
            assert!(err.contains(expected), "{err} (expected {expected})");
        };
        check(&|m| m.version = 2, "manifest version 2 is not supported");
        check(&|m| m.max_parallelism = 0, "max_parallelism 0");
        fn window(m: &mut Manifest) -> &mut SubtaskState {
            &mut m.operators.get_mut("window").unwrap().subtasks[0]
        }
        check(
            &|m| window(m).keyed[1].1.len = u64::MAX,
            "extent 40+18446744073709551615 lies outside",
        );
        check(&|m| window(m).keyed[0].1.offset = 99, "lies outside");
        check(&|m| window(m).keyed[0].0 = 128, "key group 128");
        check(
            &|m| window(m).subtask = 2,
            "subtask 2 of a parallelism of 2",
        );
        check(&|m| window(m).file = None, "has state but no file");
        check(&|m| m.stores[0].key_groups = (5, 200), "key groups 5..=200");
    }

    proptest::proptest! {
        #![proptest_config(crate::util::fuzz_config(256))]

        /// Arbitrary bytes: an error, never a panic.
        #[test]
        fn the_manifest_reader_survives_any_bytes(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
            let _ = Manifest::from_json(&bytes);
        }

        /// A stored manifest with bytes flipped, replaced or cut: refused, or read as exactly
        /// the manifest that was written (when the damage hit only white space or key names
        /// the reader does not use). Never a different manifest.
        #[test]
        fn a_damaged_manifest_is_refused_never_misread(
            damage in proptest::collection::vec((proptest::num::usize::ANY, 0u8..=255, 0u8..3), 1..4),
            cut in proptest::option::of(proptest::num::usize::ANY),
        ) {
            let manifest = sample();
            let mut json = manifest.to_json().unwrap();
            for (at, byte, kind) in damage {
                let at = at % json.len();
                match kind {
                    0 => json[at] ^= 1 << (byte % 8),
                    1 => json[at] = byte,
                    _ => { json.remove(at); }
                }
                if json.is_empty() { break; }
            }
            if let Some(cut) = cut {
                json.truncate(cut % (json.len() + 1));
            }
            if let Ok(read) = Manifest::from_json(&json) {
                proptest::prop_assert_eq!(read, manifest);
            }
        }
    }
}
