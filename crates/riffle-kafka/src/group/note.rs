//! What a group's commit says of each partition, in the metadata of its committed offset: who
//! committed it, which snapshot holds the partition's state at that offset, and which job
//! took it.
//!
//! The note is written in the same Kafka transaction as the offset, so the offset and the
//! snapshot it names can never disagree: there is no file beside the commit to go missing or to
//! be overwritten by another member (the markers of earlier versions, still read for groups that
//! committed with them, [`super::legacy`]).

use serde::{Deserialize, Serialize};

/// The metadata of one committed offset of a process group.
///
/// Written as compact JSON (well under Kafka's default `offset.metadata.max.bytes`, 4 KiB);
/// metadata that is not JSON is the member's label alone, as groups committed before notes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CommitNote {
    /// The member that committed: `host/pid/instance`.
    pub(crate) member: String,
    /// The run's directory in the group's checkpoint storage, holding the snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) run: Option<String>,
    /// The checkpoint of the run whose snapshot holds the state at this offset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) checkpoint: Option<u64>,
    /// The fingerprint of the job that committed ([`riffle::JobFingerprint::hash`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) job: Option<String>,
}

impl CommitNote {
    /// Reads a committed offset's metadata (empty: nothing known).
    pub(crate) fn parse(metadata: &str) -> CommitNote {
        if metadata.starts_with('{')
            && let Ok(note) = serde_json::from_str::<CommitNote>(metadata)
        {
            return note;
        }
        CommitNote {
            member: metadata.to_string(),
            ..CommitNote::default()
        }
    }

    /// The note as offset metadata.
    pub(crate) fn to_metadata(&self) -> String {
        serde_json::to_string(self).expect("a note serializes")
    }

    /// The snapshot the note names: (run directory, checkpoint id).
    pub(crate) fn snapshot(&self) -> Option<(&str, u64)> {
        Some((self.run.as_deref()?, self.checkpoint?))
    }
}

/// The member a committed offset's metadata names (empty when none).
pub(crate) fn committer(metadata: &str) -> String {
    CommitNote::parse(metadata).member
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_round_trips_and_a_plain_label_is_a_member() {
        let note = CommitNote {
            member: "host/12/00ff".into(),
            run: Some("job-00ff-3-2".into()),
            checkpoint: Some(41),
            job: Some("9a3c".into()),
        };
        let metadata = note.to_metadata();
        assert!(metadata.len() < 200, "{metadata}");
        assert_eq!(CommitNote::parse(&metadata), note);
        assert_eq!(note.snapshot(), Some(("job-00ff-3-2", 41)));
        // Before notes, the metadata was the label alone.
        let legacy = CommitNote::parse("host/12/00ff");
        assert_eq!(legacy.member, "host/12/00ff");
        assert_eq!(legacy.snapshot(), None);
        assert_eq!(CommitNote::parse(""), CommitNote::default());
        // A label that happens to start with a brace but is no note stays a label.
        assert_eq!(committer("{not json"), "{not json");
    }
}
