//! A job's fingerprint: everything about a job that changes what its state means or what it
//! outputs — its operators (stable ids, inputs, how records are shipped, which keep keyed state),
//! their settings (key type, window size, lateness, trigger), `max_parallelism`, the state
//! backend and the state formats — and nothing that does not (parallelism, names of sinks'
//! files, buffer sizes).
//!
//! Processes that run one job together (a `riffle-kafka` process group) compare fingerprints,
//! so that a member started with another job is refused at start, naming what differs, instead
//! of mixing its results with the group's.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::EnvConfig;
use crate::error::Result;
use crate::graph::Node;
use crate::graph::layout::layout;

/// What of a job changes its state or its results, as named entries (`window of `Window``:
/// `tumbling 60 s, event time`), and a short hash of them.
///
/// ```
/// use std::time::Duration;
/// use riffle::{StreamEnv, aggregate::Count, window::Tumbling};
/// let job = |secs| {
///     let env = StreamEnv::new();
///     env.from_iter(vec![(1u32, 1u64)])
///         .key_by(|(user, _)| *user)
///         .window(Tumbling::of(Duration::from_secs(secs)))
///         .aggregate(Count)
///         .sink_fn(|_| Ok(()));
///     env.fingerprint().unwrap()
/// };
/// assert_eq!(job(60).hash(), job(60).hash());
/// let differences = job(30).differences(&job(60));
/// assert_eq!(differences.len(), 1);
/// assert_eq!(
///     differences[0].to_string(),
///     "window of `Window`: tumbling 30 s, event time here, tumbling 60 s, event time there"
/// );
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobFingerprint {
    /// The entries, by what they describe.
    pub entries: BTreeMap<String, String>,
}

/// One entry in which two fingerprints differ: its value in each (`None`: absent there).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FingerprintDifference {
    /// What differs (`window of `Window``, `max_parallelism`, `operator `Map``).
    pub what: String,
    /// Its value in the fingerprint asked ([`JobFingerprint::differences`]'s receiver).
    pub here: Option<String>,
    /// Its value in the other one.
    pub there: Option<String>,
}

impl std::fmt::Display for FingerprintDifference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let value = |v: &Option<String>| v.clone().unwrap_or_else(|| "absent".to_string());
        write!(
            f,
            "{}: {} here, {} there",
            self.what,
            value(&self.here),
            value(&self.there)
        )
    }
}

impl JobFingerprint {
    /// This fingerprint with one more entry (a connector's setting that changes the job's state,
    /// such as the partition count of a process group's shuffle topic).
    pub fn with(mut self, what: impl Into<String>, value: impl Into<String>) -> Self {
        self.entries.insert(what.into(), value.into());
        self
    }

    /// A short stable hash of the entries (16 hex digits): equal fingerprints, equal hashes.
    pub fn hash(&self) -> String {
        let bytes = serde_json::to_vec(&self.entries).expect("strings serialize");
        format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&bytes))
    }

    /// The entries in which this fingerprint and `other` differ, in name order.
    pub fn differences(&self, other: &JobFingerprint) -> Vec<FingerprintDifference> {
        let mut names: Vec<&String> = self.entries.keys().chain(other.entries.keys()).collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .filter_map(|what| {
                let (here, there) = (self.entries.get(what), other.entries.get(what));
                (here != there).then(|| FingerprintDifference {
                    what: what.clone(),
                    here: here.cloned(),
                    there: there.cloned(),
                })
            })
            .collect()
    }
}

/// The state formats of this release, as one entry: a state written under other formats reads
/// differently.
fn state_formats() -> String {
    format!(
        "manifest {}, key hash {}",
        crate::checkpoint::MANIFEST_VERSION,
        crate::keys::KEY_HASH_VERSION
    )
}

/// The fingerprint of the job `nodes` under `config`.
pub(crate) fn fingerprint(nodes: &[Node], config: &EnvConfig) -> Result<JobFingerprint> {
    let layout = layout(nodes, config)?;
    let mut entries = BTreeMap::new();
    entries.insert(
        "max_parallelism".to_string(),
        config.max_parallelism.to_string(),
    );
    entries.insert(
        "state backend".to_string(),
        config.state_backend.name().to_string(),
    );
    entries.insert("state formats".to_string(), state_formats());
    for (index, node) in nodes.iter().enumerate() {
        let name = &layout.names[index];
        let inputs: Vec<String> = node
            .inputs
            .iter()
            .map(|edge| format!("{} {}", layout.ids[edge.from], edge.ship.label()))
            .collect();
        let kind = match node.kind {
            crate::graph::NodeKind::Source(_) => "source",
            crate::graph::NodeKind::Operator { .. } => "operator",
        };
        let mut shape = format!("{kind} {}", layout.ids[index]);
        if !inputs.is_empty() {
            shape.push_str(&format!(" <- [{}]", inputs.join(", ")));
        }
        if node.keyed {
            shape.push_str(", keyed state");
        }
        entries.insert(format!("operator `{name}`"), shape);
        for (setting, value) in &node.settings {
            entries.insert(format!("{setting} of `{name}`"), value.clone());
        }
    }
    Ok(JobFingerprint { entries })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job: clicks `(user, n)` keyed by user, in windows, with these knobs.
    fn job(
        parallelism: usize,
        window_secs: u64,
        lateness_secs: u64,
        out_of_order_secs: u64,
        uid: &str,
    ) -> JobFingerprint {
        use std::time::Duration;
        let env = crate::StreamEnv::with_config(crate::EnvConfig {
            parallelism,
            ..crate::EnvConfig::default()
        });
        env.from_iter_with_watermarks(
            vec![(1u32, 1u64)],
            crate::time::WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(
                out_of_order_secs,
            )),
        )
        .key_by(|(user, _)| *user)
        .window(crate::window::Tumbling::of(Duration::from_secs(
            window_secs,
        )))
        .allowed_lateness(Duration::from_secs(lateness_secs))
        .aggregate(crate::aggregate::Count)
        .uid(uid)
        .sink_fn(|_| Ok(()));
        env.fingerprint().unwrap()
    }

    #[test]
    fn what_changes_state_or_results_changes_the_fingerprint_and_parallelism_does_not() {
        let base = job(1, 60, 0, 5, "count");
        assert_eq!(base.hash(), job(4, 60, 0, 5, "count").hash());
        let named = |other: JobFingerprint| -> Vec<String> {
            other
                .differences(&base)
                .into_iter()
                .map(|d| d.what)
                .collect()
        };
        assert_eq!(named(job(1, 30, 0, 5, "count")), ["window of `Window`"]);
        assert_eq!(
            named(job(1, 60, 30, 5, "count")),
            ["allowed lateness of `Window`"]
        );
        assert_eq!(
            named(job(1, 60, 0, 2, "count")),
            ["watermarks of `Source: collection`"]
        );
        // Another uid is another operator (its state maps elsewhere): the shape differs.
        assert!(
            named(job(1, 60, 0, 5, "other"))
                .iter()
                .any(|what| what.starts_with("operator "))
        );
        assert_eq!(
            base.entries.get("key of `Window`").map(String::as_str),
            Some("u32")
        );
    }

    #[test]
    fn differences_name_each_entry_once_and_absent_ones() {
        let a = JobFingerprint::default().with("x", "1").with("y", "2");
        let b = JobFingerprint::default().with("x", "1").with("z", "3");
        let found: Vec<String> = a.differences(&b).iter().map(|d| d.to_string()).collect();
        assert_eq!(
            found,
            ["y: 2 here, absent there", "z: absent here, 3 there"]
        );
        assert!(a.differences(&a).is_empty());
        assert_ne!(a.hash(), b.hash());
        assert_eq!(a.hash(), a.clone().hash());
    }
}
