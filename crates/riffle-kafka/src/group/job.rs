//! One group, one job: every member must run the same job, or their results mix (a member
//! counting 30 s windows beside one counting 60 s windows writes both into one output, and
//! restores the other's state as its own).
//!
//! Each commit's note carries the fingerprint of the committing member's job
//! ([`riffle::JobFingerprint`]: operators and their uids, key types, window sizes and lateness,
//! `max_parallelism`, the state backend and formats, and the partition counts of the topics
//! that carry keyed state), and each member writes its job's description once under
//! `<group>-jobs/<hash>.json` of the group's checkpoint storage. A member checks the group's
//! commits before each run and again before its run's first commit (two members started at once
//! into an empty group): one whose fingerprint differs from a commit's fails at start, naming
//! each difference ("window of `Window`: tumbling 30 s, event time here, tumbling 60 s, event
//! time in the group's last commit").
//!
//! Changing a group's job is a deliberate step, as a savepoint is in Flink: stop every member,
//! and start the new version with the old fingerprint named
//! ([`KafkaGroup::set_upgrade_from`], `riffle demo ... --upgrade-from HASH`). Its members
//! restore the old job's state by operator uid, and their commits carry the new fingerprint.

use std::collections::BTreeMap;

use riffle::checkpoint::CheckpointStorage;
use riffle::{JobFingerprint, StreamEnv};

use super::KafkaGroup;
use super::note::CommitNote;

/// Where a job's description goes, under the storage's root.
fn description_path(group: &str, hash: &str) -> String {
    format!("{group}-jobs/{hash}.json")
}

impl KafkaGroup {
    /// Replaces the group's job: commits of the job with fingerprint `hash` (as the error of a
    /// refused member names it) are accepted as this job's, and their state restored by operator
    /// uid. Stop every member of the old job first: the two jobs must not run side by side.
    pub fn set_upgrade_from(&self, hash: impl Into<String>) {
        *self.inner.upgrade_from.lock().expect("upgrade lock") = Some(hash.into());
    }

    /// The fingerprint of `env`'s job as a member of this group: the job's own, with the
    /// partition counts of the topics that carry keyed state.
    pub(super) fn job_fingerprint(&self, env: &StreamEnv) -> riffle::Result<JobFingerprint> {
        let mut fingerprint = env.fingerprint()?;
        for topic in self.inner.topics.clone() {
            if self.keyed(&topic) {
                let count = self.partition_count(&topic)?;
                fingerprint =
                    fingerprint.with(format!("partitions of `{topic}`"), count.to_string());
            }
        }
        Ok(fingerprint)
    }

    /// Records `ours` in the group's storage (once per fingerprint) and checks it against the
    /// group's commits: a commit of another job (not the one [`set_upgrade_from`] names) fails
    /// with a configuration error naming every difference.
    ///
    /// [`set_upgrade_from`]: KafkaGroup::set_upgrade_from
    pub(super) fn check_job(
        &self,
        storage: &CheckpointStorage,
        ours: &JobFingerprint,
    ) -> riffle::Result<()> {
        let name = &self.inner.name;
        let hash = ours.hash();
        let path = description_path(name, &hash);
        if storage.read_optional(&path)?.is_none() {
            storage.write(
                &path,
                serde_json::to_vec_pretty(ours).map_err(riffle::Error::user)?,
            )?;
        }
        let upgrade_from = self
            .inner
            .upgrade_from
            .lock()
            .expect("upgrade lock")
            .clone();
        // Other jobs' commits: by fingerprint, the partitions and a member that committed them.
        let mut others: BTreeMap<String, (usize, String)> = BTreeMap::new();
        for element in self.committed_everywhere()?.elements() {
            let note = CommitNote::parse(element.metadata());
            let Some(theirs) = note.job else {
                continue; // committed before fingerprints, or nothing committed
            };
            if theirs == hash || upgrade_from.as_deref() == Some(theirs.as_str()) {
                continue;
            }
            let entry = others.entry(theirs).or_insert((0, note.member));
            entry.0 += 1;
        }
        let Some((theirs, (partitions, member))) = others.into_iter().next() else {
            return Ok(());
        };
        let differences = match storage.read_optional(&description_path(name, &theirs))? {
            Some(bytes) => match serde_json::from_slice::<JobFingerprint>(&bytes) {
                Ok(their_job) => ours
                    .differences(&their_job)
                    .iter()
                    .map(|d| {
                        let value =
                            |v: &Option<String>| v.clone().unwrap_or_else(|| "absent".into());
                        format!(
                            "{}: {} here, {} in the group's last commit",
                            d.what,
                            value(&d.here),
                            value(&d.there)
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
                Err(e) => format!("(its description cannot be read: {e})"),
            },
            None => format!(
                "(its description is not in {}: the storage is not the one the group used?)",
                storage.description()
            ),
        };
        Err(riffle::Error::config(
            "job",
            format!(
                "differs from the job of group `{name}` (fingerprint {theirs}, committed on \
                 {partitions} partition(s), last by {member}; this member's is {hash}): \
                 {differences}. Every member of a group must run the same job. To replace the \
                 group's job, stop every member and start the new version with --upgrade-from \
                 {theirs} (KafkaGroup::set_upgrade_from): its state is restored by operator uid, \
                 as from a savepoint (docs/scale-out.md)"
            ),
        ))
    }
}
