//! Timers of a keyed operator: per key, in event time (fired when the watermark passes them) or in
//! processing time (fired when the clock does). A key has at most one timer per timestamp.

use std::collections::BTreeMap;
use std::hash::Hash;

use serde::{Deserialize, Serialize};

use crate::record::Timestamp;
use crate::state::table::FastMap;

/// Which clock a timer follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TimeDomain {
    /// Fired when the watermark reaches the timer's timestamp.
    EventTime,
    /// Fired when the processing-time clock reaches it.
    ProcessingTime,
}

/// The registered timers of one operator instance.
///
/// ```
/// use riffle::state::{TimeDomain, TimerService};
/// let mut timers = TimerService::new();
/// timers.register(TimeDomain::EventTime, 100, "a");
/// timers.register(TimeDomain::EventTime, 50, "b");
/// timers.register(TimeDomain::EventTime, 100, "a"); // once per key and time
/// assert_eq!(timers.pop_due(TimeDomain::EventTime, 100), vec![(50, "b"), (100, "a")]);
/// ```
#[derive(Debug, Clone)]
pub struct TimerService<K> {
    event: BTreeMap<Timestamp, Keys<K>>,
    processing: BTreeMap<Timestamp, Keys<K>>,
    len: usize,
}

/// The keys with a timer at one timestamp: most timestamps of operators that register a timer
/// per record (a pattern's, an interval join's) have one key, which needs no set of its own.
#[derive(Debug, Clone)]
enum Keys<K> {
    One(K),
    Many(FastMap<K, ()>),
}

impl<K: Hash + Eq> Keys<K> {
    /// Adds `key`; whether it was not there.
    fn insert(&mut self, key: K) -> bool {
        match self {
            Keys::One(one) if *one == key => false,
            Keys::One(_) => {
                let Keys::One(one) = std::mem::replace(self, Keys::Many(FastMap::default())) else {
                    unreachable!("matched above")
                };
                let Keys::Many(many) = self else {
                    unreachable!("replaced above")
                };
                many.insert(one, ());
                many.insert(key, ());
                true
            }
            Keys::Many(many) => many.insert(key, ()).is_none(),
        }
    }

    /// Removes `key`; whether it was there. The set may be left empty.
    fn remove(&mut self, key: &K) -> bool {
        match self {
            Keys::One(one) if one == key => {
                *self = Keys::Many(FastMap::default());
                true
            }
            Keys::One(_) => false,
            Keys::Many(many) => many.remove(key).is_some(),
        }
    }

    fn is_empty(&self) -> bool {
        matches!(self, Keys::Many(many) if many.is_empty())
    }

    fn into_vec(self) -> Vec<K> {
        match self {
            Keys::One(one) => vec![one],
            Keys::Many(many) => many.into_keys().collect(),
        }
    }

    fn iter(&self) -> Box<dyn Iterator<Item = &K> + '_> {
        match self {
            Keys::One(one) => Box::new(std::iter::once(one)),
            Keys::Many(many) => Box::new(many.keys()),
        }
    }
}

impl<K> Default for TimerService<K> {
    fn default() -> Self {
        TimerService {
            event: BTreeMap::new(),
            processing: BTreeMap::new(),
            len: 0,
        }
    }
}

impl<K: Hash + Eq + Clone> TimerService<K> {
    /// No timers.
    pub fn new() -> Self {
        TimerService::default()
    }

    fn timers(&mut self, domain: TimeDomain) -> &mut BTreeMap<Timestamp, Keys<K>> {
        match domain {
            TimeDomain::EventTime => &mut self.event,
            TimeDomain::ProcessingTime => &mut self.processing,
        }
    }

    /// Registers a timer for `key` at `timestamp` (again: no effect).
    pub fn register(&mut self, domain: TimeDomain, timestamp: Timestamp, key: K) {
        let added = match self.timers(domain).entry(timestamp) {
            std::collections::btree_map::Entry::Vacant(entry) => {
                entry.insert(Keys::One(key));
                true
            }
            std::collections::btree_map::Entry::Occupied(mut entry) => entry.get_mut().insert(key),
        };
        if added {
            self.len += 1;
        }
    }

    /// Deletes the timer of `key` at `timestamp`, if there is one.
    pub fn delete(&mut self, domain: TimeDomain, timestamp: Timestamp, key: &K) {
        let timers = self.timers(domain);
        if let Some(keys) = timers.get_mut(&timestamp)
            && keys.remove(key)
        {
            if keys.is_empty() {
                timers.remove(&timestamp);
            }
            self.len -= 1;
        }
    }

    /// Removes and returns the timers at or before `time`, earliest first.
    pub fn pop_due(&mut self, domain: TimeDomain, time: Timestamp) -> Vec<(Timestamp, K)> {
        let timers = self.timers(domain);
        let later = match time.checked_add(1) {
            Some(next) => timers.split_off(&next),
            None => BTreeMap::new(),
        };
        let due = std::mem::replace(timers, later);
        let fired: Vec<(Timestamp, K)> = due
            .into_iter()
            .flat_map(|(ts, keys)| keys.into_vec().into_iter().map(move |k| (ts, k)))
            .collect();
        self.len -= fired.len();
        fired
    }

    /// Removes and returns the keys of the earliest timestamp at or before `time`, with that
    /// timestamp: the timers to fire next.
    ///
    /// Firing in a loop over this method fires, in time order, also the timers that the firing
    /// ones register at or before `time` (Flink's behaviour: a timer chain 10 → 20 → 30 under a
    /// watermark jump to 999 fires completely in that one advance).
    ///
    /// ```
    /// use riffle::state::{TimeDomain, TimerService};
    /// let mut timers = TimerService::new();
    /// timers.register(TimeDomain::EventTime, 10, "a");
    /// let mut fired = Vec::new();
    /// while let Some((at, keys)) = timers.pop_earliest_due(TimeDomain::EventTime, 999) {
    ///     fired.push(at);
    ///     if at < 30 {
    ///         // The firing timer registers the next one in the chain.
    ///         timers.register(TimeDomain::EventTime, at + 10, keys[0]);
    ///     }
    /// }
    /// assert_eq!(fired, vec![10, 20, 30]);
    /// ```
    pub fn pop_earliest_due(
        &mut self,
        domain: TimeDomain,
        time: Timestamp,
    ) -> Option<(Timestamp, Vec<K>)> {
        let timers = self.timers(domain);
        let entry = timers.first_entry()?;
        if *entry.key() > time {
            return None;
        }
        let (timestamp, keys) = entry.remove_entry();
        let keys: Vec<K> = keys.into_vec();
        self.len -= keys.len();
        Some((timestamp, keys))
    }

    /// The earliest timer.
    pub fn next(&self, domain: TimeDomain) -> Option<Timestamp> {
        match domain {
            TimeDomain::EventTime => self.event.keys().next().copied(),
            TimeDomain::ProcessingTime => self.processing.keys().next().copied(),
        }
    }

    /// Every timer, for a checkpoint.
    pub fn all(&self) -> Vec<(TimeDomain, Timestamp, &K)> {
        let event = self
            .event
            .iter()
            .flat_map(|(ts, keys)| keys.iter().map(move |k| (TimeDomain::EventTime, *ts, k)));
        let processing = self.processing.iter().flat_map(|(ts, keys)| {
            keys.iter()
                .map(move |k| (TimeDomain::ProcessingTime, *ts, k))
        });
        event.chain(processing).collect()
    }

    /// Number of registered timers.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no timer is registered.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_fire_in_time_order_per_domain() {
        let mut t = TimerService::new();
        t.register(TimeDomain::EventTime, 30, 1u64);
        t.register(TimeDomain::EventTime, 10, 2);
        t.register(TimeDomain::ProcessingTime, 5, 3);
        t.delete(TimeDomain::EventTime, 30, &1);
        t.delete(TimeDomain::EventTime, 30, &1);
        assert_eq!(t.len(), 2);
        assert_eq!(t.next(TimeDomain::EventTime), Some(10));
        assert_eq!(t.pop_due(TimeDomain::EventTime, 9), vec![]);
        assert_eq!(t.pop_due(TimeDomain::EventTime, i64::MAX), vec![(10, 2)]);
        assert_eq!(t.pop_due(TimeDomain::ProcessingTime, 5), vec![(5, 3)]);
        assert!(t.is_empty());
    }

    #[test]
    fn timers_registered_while_firing_fire_in_the_same_advance_in_time_order() {
        let mut t = TimerService::new();
        t.register(TimeDomain::EventTime, 10, 1u64);
        t.register(TimeDomain::EventTime, 25, 2);
        let mut fired = Vec::new();
        while let Some((at, keys)) = t.pop_earliest_due(TimeDomain::EventTime, 50) {
            for key in keys {
                fired.push((at, key));
                if key == 1 && at <= 50 {
                    t.register(TimeDomain::EventTime, at + 10, 1);
                }
            }
        }
        assert_eq!(
            fired,
            vec![(10, 1), (20, 1), (25, 2), (30, 1), (40, 1), (50, 1)]
        );
        assert_eq!(t.next(TimeDomain::EventTime), Some(60));
        assert_eq!(t.len(), 1);
    }
}
