//! Markers, as groups committed before commit notes ([`super::note`]): a file per partition and
//! offset, `<group>-state/<topic>-<P>/<offset>/marker.json`, naming the snapshot taken at that
//! offset. A commit of this release names its snapshot in the offset's metadata instead; the
//! markers of earlier commits are still read, so a group whose offsets were committed by an
//! earlier release restores from them, and removed once the offsets moved past them.

use std::collections::BTreeSet;

use riffle::checkpoint::CheckpointStorage;
use serde::{Deserialize, Serialize};

/// What a marker says: the snapshot taken at a partition's offset, and where the partition's
/// reader stood.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Marker {
    pub(super) job: String,
    pub(super) checkpoint: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) reader: Option<serde_json::Value>,
}

/// The file of a marker, in its directory.
const MARKER_FILE: &str = "marker.json";

/// The directory of the marker naming the snapshot taken at `offset` of `topic`-`partition`.
fn marker_dir(group: &str, topic: &str, partition: i32, offset: i64) -> String {
    format!("{group}-state/{topic}-{partition}/{offset}")
}

/// The marker of `topic`-`partition` at `offset`, if there is one (and it is readable).
pub(super) fn read_marker(
    storage: &CheckpointStorage,
    group: &str,
    topic: &str,
    partition: i32,
    offset: i64,
) -> riffle::Result<Option<Marker>> {
    let dir = marker_dir(group, topic, partition, offset);
    Ok(storage
        .read_optional(&format!("{dir}/{MARKER_FILE}"))?
        .and_then(|bytes| serde_json::from_slice::<Marker>(&bytes).ok()))
}

/// What a clean-up did with one partition's markers.
#[derive(Default)]
pub(super) struct Markers {
    pub(super) removed: usize,
    /// The runs the markers at or above the committed offset name.
    pub(super) named: BTreeSet<String>,
}

/// Removes the markers of `topic`-`partition` below its committed offset (`removed` removes a
/// directory and says whether it could), and returns the runs the others name.
pub(super) fn clean_markers(
    storage: &CheckpointStorage,
    group: &str,
    topic: &str,
    partition: i32,
    committed: Option<i64>,
    removed: &dyn Fn(&str) -> bool,
) -> riffle::Result<Markers> {
    let mut markers = Markers::default();
    for offset in storage.subdirectories(&format!("{group}-state/{topic}-{partition}"))? {
        let Ok(offset) = offset.parse::<i64>() else {
            continue;
        };
        if committed.is_some_and(|committed| offset < committed) {
            markers.removed += usize::from(removed(&marker_dir(group, topic, partition, offset)));
        } else if let Some(marker) = read_marker(storage, group, topic, partition, offset)? {
            markers.named.insert(marker.job);
        }
    }
    Ok(markers)
}
