//! The group's live members and their assignments, as the group coordinator sees them (Kafka's
//! DescribeConsumerGroups; for a KIP-848 group, ConsumerGroupDescribe). rust-rdkafka has no
//! wrapper for this admin call, so it goes through librdkafka's C API (`rdkafka::bindings`),
//! on the member's own client. A member's `client.id` is its label (`host/pid/instance`), so the
//! coordinator's members are named as the commits' metadata names them.

// The one place riffle-kafka calls librdkafka directly: every pointer below comes from
// librdkafka and is used as its documentation (rdkafka.h) allows, within the life of the event
// that owns it.
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::ffi::{CStr, CString, c_char};
use std::time::{Duration, Instant};

use rdkafka::bindings as rd;
use rdkafka::consumer::Consumer;

use super::KafkaGroup;

impl KafkaGroup {
    /// The group's live members (their labels, `host/pid/instance`), each with the partitions
    /// the coordinator assigns it now (`topic-partition`), including members that own nothing
    /// or have not committed yet.
    pub fn describe_members(&self) -> riffle::Result<BTreeMap<String, Vec<String>>> {
        let failed = |what: String| {
            crate::kafka_failure(
                riffle::ConnectorErrorKind::Retriable,
                format!("cannot describe consumer group `{}`", self.inner.name),
                what,
            )
        };
        let name = CString::new(self.inner.name.as_str()).map_err(|e| failed(e.to_string()))?;
        let client = self.inner.member.client();
        let rk = client.native_ptr();
        let timeout = super::TIMEOUT;
        // SAFETY: `rk` is the member's live client (held by `self`); the queue, the options and
        // the event are created and destroyed here, and every pointer read from the event is
        // used before the event is destroyed.
        unsafe {
            let queue = rd::rd_kafka_queue_new(rk);
            let options = rd::rd_kafka_AdminOptions_new(
                rk,
                rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS,
            );
            let mut errstr = [0 as c_char; 256];
            rd::rd_kafka_AdminOptions_set_request_timeout(
                options,
                timeout.as_millis() as i32,
                errstr.as_mut_ptr(),
                errstr.len(),
            );
            let mut groups = [name.as_ptr()];
            rd::rd_kafka_DescribeConsumerGroups(rk, groups.as_mut_ptr(), 1, options, queue);
            let deadline = Instant::now() + timeout + Duration::from_secs(1);
            let mut event: *mut rd::rd_kafka_event_t = std::ptr::null_mut();
            while event.is_null() && Instant::now() < deadline {
                event = rd::rd_kafka_queue_poll(queue, 100);
            }
            let result = if event.is_null() {
                Err(failed("no answer in time".into()))
            } else {
                let described = read_members(event).map_err(failed);
                rd::rd_kafka_event_destroy(event);
                described
            };
            rd::rd_kafka_AdminOptions_destroy(options);
            rd::rd_kafka_queue_destroy(queue);
            result
        }
    }
}

/// The members in a DescribeConsumerGroups result event.
///
/// # Safety
/// `event` must be a live event from librdkafka's admin queue.
unsafe fn read_members(
    event: *mut rd::rd_kafka_event_t,
) -> Result<BTreeMap<String, Vec<String>>, String> {
    let text = |ptr: *const c_char| {
        if ptr.is_null() {
            String::new()
        } else {
            // SAFETY: librdkafka's strings are NUL-terminated and live with the event.
            unsafe { CStr::from_ptr(ptr) }
                .to_string_lossy()
                .into_owned()
        }
    };
    // SAFETY: per the function's contract; every pointer below belongs to `event`.
    unsafe {
        if rd::rd_kafka_event_error(event) != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Err(text(rd::rd_kafka_event_error_string(event)));
        }
        let result = rd::rd_kafka_event_DescribeConsumerGroups_result(event);
        if result.is_null() {
            return Err("an answer of another kind".into());
        }
        let mut count = 0;
        let groups = rd::rd_kafka_DescribeConsumerGroups_result_groups(result, &mut count);
        let mut members = BTreeMap::new();
        for g in 0..count {
            let group = *groups.add(g);
            let error = rd::rd_kafka_ConsumerGroupDescription_error(group);
            if !error.is_null() {
                return Err(text(rd::rd_kafka_error_string(error)));
            }
            for m in 0..rd::rd_kafka_ConsumerGroupDescription_member_count(group) {
                let member = rd::rd_kafka_ConsumerGroupDescription_member(group, m);
                let label = text(rd::rd_kafka_MemberDescription_client_id(member));
                let mut owned = Vec::new();
                let assignment = rd::rd_kafka_MemberDescription_assignment(member);
                let list = if assignment.is_null() {
                    std::ptr::null()
                } else {
                    rd::rd_kafka_MemberAssignment_partitions(assignment)
                };
                if !list.is_null() {
                    let list = &*list;
                    for p in 0..list.cnt.max(0) as usize {
                        let element = &*list.elems.add(p);
                        owned.push(format!("{}-{}", text(element.topic), element.partition));
                    }
                }
                owned.sort();
                members.insert(label, owned);
            }
        }
        Ok(members)
    }
}
