//! Membership: what Kafka's consumer-group protocol hands this member. The member consumer's
//! callbacks follow the assignment, pause what they are given (the job's own readers read the
//! data), and take the commit lock on revocation, so that no commit of a run can happen once
//! Kafka hands its partitions to another member.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rdkafka::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};

use super::Transactions;

/// What the membership callbacks maintain.
#[derive(Default)]
pub(super) struct Membership {
    pub(super) assignment: BTreeSet<(String, i32)>,
    /// Bumped at every change of assignment.
    pub(super) generation: u64,
    /// When the assignment last changed.
    pub(super) changed: Option<Instant>,
}

/// The context of the member consumer: it follows the assignment, pauses what it is given
/// (the data is read by the job's own readers), and takes the commit lock on revocation.
pub(super) struct MemberContext {
    pub(super) membership: Arc<Mutex<Membership>>,
    pub(super) transactions: Arc<Mutex<Transactions>>,
    pub(super) generation: Arc<AtomicU64>,
}

impl ClientContext for MemberContext {}

impl ConsumerContext for MemberContext {
    fn pre_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            // No commit of the current run once this returns: a commit in progress finishes
            // first (it holds the lock), a later one sees the new generation and fails.
            let _commits = self.transactions.lock().expect("transactions lock");
            let mut membership = self.membership.lock().expect("membership lock");
            for p in tpl.elements() {
                membership
                    .assignment
                    .remove(&(p.topic().to_string(), p.partition()));
            }
            self.bump(&mut membership);
            tracing::info!(
                revoked = tpl.count(),
                generation = membership.generation,
                "group: partitions revoked"
            );
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                if let Err(e) = consumer.pause(tpl) {
                    tracing::warn!(error = %e, "group: cannot pause the member's partitions");
                }
                let mut membership = self.membership.lock().expect("membership lock");
                for p in tpl.elements() {
                    membership
                        .assignment
                        .insert((p.topic().to_string(), p.partition()));
                }
                self.bump(&mut membership);
                tracing::info!(
                    assigned = tpl.count(),
                    generation = membership.generation,
                    "group: partitions assigned"
                );
            }
            Rebalance::Revoke(_) => {}
            Rebalance::Error(e) => tracing::warn!(error = %e, "group: rebalance error"),
        }
    }
}

impl MemberContext {
    fn bump(&self, membership: &mut Membership) {
        membership.generation += 1;
        membership.changed = Some(Instant::now());
        self.generation
            .store(membership.generation, Ordering::Release);
    }
}
