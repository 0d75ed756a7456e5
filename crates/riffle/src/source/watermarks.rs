//! Event time inside a source subtask: timestamps assigned per record, a watermark generator per
//! split, idle splits left out, records too far in the future quarantined, and the subtask's
//! watermark as the minimum over its active splits (never moving backwards).

use std::sync::Arc;

use serde::Serialize;

use crate::record::{EventTime, MIN_WATERMARK, OutOfRange, Record, Timestamp};
use crate::source::BadInput;
use crate::time::{Clock, WatermarkGenerator, WatermarkStrategy};

/// What the source subtask tells downstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WatermarkUpdate {
    /// The subtask has nothing to say about event time (every split idle), or speaks again.
    Idle(bool),
    /// The subtask's watermark advanced.
    Watermark(Timestamp),
}

struct SplitState {
    generator: Option<Box<dyn WatermarkGenerator>>,
    /// Processing time of the split's last record (or of its start).
    last_record_at: Timestamp,
    finished: bool,
}

/// The watermark bookkeeping of one source subtask.
pub(crate) struct SourceWatermarks<T> {
    strategy: WatermarkStrategy<T>,
    splits: Vec<SplitState>,
    clock: Arc<dyn Clock>,
    emitted: Timestamp,
    idle: bool,
}

impl<T: Serialize> SourceWatermarks<T> {
    pub(crate) fn new(
        strategy: WatermarkStrategy<T>,
        splits: usize,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let mut watermarks = SourceWatermarks {
            splits: Vec::with_capacity(splits),
            strategy,
            clock,
            emitted: MIN_WATERMARK,
            idle: false,
        };
        for _ in 0..splits {
            watermarks.add_split();
        }
        watermarks
    }

    /// Assigns event time to the records just read from `split`, moves those too far ahead of
    /// the wall clock to `bad`, and feeds the others to the split's generator.
    pub(crate) fn on_records(
        &mut self,
        split: usize,
        records: &mut Vec<Record<T>>,
        bad: &mut Vec<BadInput>,
    ) {
        if records.is_empty() {
            return;
        }
        let now = self.clock.now();
        let state = &mut self.splits[split];
        state.last_record_at = now;
        if let Some(extract) = &self.strategy.timestamps {
            let mut out_of_range = false;
            for record in records.iter_mut() {
                let millis = extract(&record.value);
                record.timestamp = EventTime::new(millis);
                out_of_range |= record.timestamp.is_none();
            }
            if out_of_range {
                // i64::MIN is no event time (it is below every one): a bad record, with the reason.
                records.retain(|record| {
                    if record.timestamp.is_some() {
                        return true;
                    }
                    bad.push(BadInput {
                        position: format!("event time {}", i64::MIN),
                        error: OutOfRange(i64::MIN).to_string(),
                        payload: serde_json::to_string(&record.value).unwrap_or_default(),
                    });
                    false
                });
            }
        }
        if let Some(skew) = self.strategy.max_future_skew {
            let limit = EventTime::new(now.saturating_add(skew.as_millis() as Timestamp));
            if records.iter().any(|r| r.timestamp > limit) {
                records.retain(|record| {
                    let Some(time) = record.timestamp.filter(|_| record.timestamp > limit) else {
                        return true;
                    };
                    bad.push(BadInput {
                        position: format!("event time {time}"),
                        error: format!(
                            "event time is {} ms ahead of the wall clock, beyond the allowed skew of {} ms",
                            i128::from(time.millis()) - i128::from(now),
                            skew.as_millis()
                        ),
                        payload: serde_json::to_string(&record.value).unwrap_or_default(),
                    });
                    false
                });
            }
        }
        if let Some(generator) = &mut state.generator {
            for record in records.iter() {
                if let Some(time) = record.timestamp {
                    generator.on_event(time.millis());
                }
            }
        }
    }

    /// Whether the watermark is to be emitted after every batch.
    pub(crate) fn every_batch(&self) -> bool {
        self.strategy.every_batch
    }

    /// A split to track (one that appeared while the job runs too); it holds the watermark back
    /// once it has records, and until then it is idle when the strategy has an idleness timeout.
    pub(crate) fn add_split(&mut self) {
        self.splits.push(SplitState {
            generator: self.strategy.generator.as_ref().map(|factory| factory()),
            last_record_at: self.clock.now(),
            finished: false,
        });
    }

    /// The split has no more records: it no longer holds the watermark back.
    pub(crate) fn split_finished(&mut self, split: usize) {
        self.splits[split].finished = true;
    }

    /// What to send downstream now (at most an idleness change and a watermark).
    pub(crate) fn poll(&mut self) -> Vec<WatermarkUpdate> {
        if self.strategy.generator.is_none() {
            return Vec::new();
        }
        let now = self.clock.now();
        let idleness = self.strategy.idleness.map(|d| d.as_millis() as Timestamp);
        let active: Vec<&SplitState> = self
            .splits
            .iter()
            .filter(|s| !s.finished && idleness.is_none_or(|limit| now - s.last_record_at < limit))
            .collect();
        let mut updates = Vec::new();
        let idle = active.is_empty() && (idleness.is_some() || self.splits.is_empty());
        if idle != self.idle {
            self.idle = idle;
            updates.push(WatermarkUpdate::Idle(idle));
        }
        let watermark = active
            .iter()
            .filter_map(|s| s.generator.as_ref())
            .map(|g| g.current_watermark())
            .min();
        if let Some(watermark) = watermark
            && watermark > self.emitted
        {
            self.emitted = watermark;
            updates.push(WatermarkUpdate::Watermark(watermark));
        }
        updates
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::ManualClock;
    use std::time::Duration;

    fn tracker(splits: usize, clock: &Arc<ManualClock>) -> SourceWatermarks<(u32, Timestamp)> {
        let strategy = WatermarkStrategy::bounded_out_of_orderness(Duration::from_millis(100))
            .with_timestamps(|(_, ts): &(u32, Timestamp)| *ts)
            .with_idleness(Duration::from_secs(10));
        SourceWatermarks::new(strategy, splits, clock.clone())
    }

    fn read(
        t: &mut SourceWatermarks<(u32, Timestamp)>,
        split: usize,
        timestamps: &[Timestamp],
    ) -> Vec<BadInput> {
        let mut records: Vec<Record<(u32, Timestamp)>> = timestamps
            .iter()
            .map(|&ts| Record::untimed((7, ts)))
            .collect();
        let mut bad = Vec::new();
        t.on_records(split, &mut records, &mut bad);
        assert!(records.iter().all(|r| r.timestamp() == Some(r.value.1)));
        bad
    }

    #[test]
    fn the_slowest_split_holds_the_watermark() {
        let clock = Arc::new(ManualClock::new(1_000_000));
        let mut t = tracker(2, &clock);
        read(&mut t, 0, &[5_000, 9_000]);
        assert_eq!(t.poll(), vec![], "split 1 has not spoken yet");
        read(&mut t, 1, &[2_000]);
        assert_eq!(t.poll(), vec![WatermarkUpdate::Watermark(1_899)]);
        read(&mut t, 1, &[12_000]);
        assert_eq!(t.poll(), vec![WatermarkUpdate::Watermark(8_899)]);
    }

    #[test]
    fn an_idle_split_stops_holding_back_and_rejoins() {
        let clock = Arc::new(ManualClock::new(1_000_000));
        let mut t = tracker(2, &clock);
        read(&mut t, 0, &[5_000]);
        read(&mut t, 1, &[1_000]);
        assert_eq!(t.poll(), vec![WatermarkUpdate::Watermark(899)]);
        clock.advance(Duration::from_secs(6));
        read(&mut t, 0, &[20_000]);
        clock.advance(Duration::from_secs(6));
        // Split 1 silent for 12 s: idle; split 0 read 6 s ago: active.
        assert_eq!(t.poll(), vec![WatermarkUpdate::Watermark(19_899)]);
        clock.advance(Duration::from_secs(6));
        assert_eq!(t.poll(), vec![WatermarkUpdate::Idle(true)]);
        read(&mut t, 1, &[30_000]);
        assert_eq!(
            t.poll(),
            vec![
                WatermarkUpdate::Idle(false),
                WatermarkUpdate::Watermark(29_899)
            ]
        );
    }

    #[test]
    fn records_far_in_the_future_are_quarantined() {
        let clock = Arc::new(ManualClock::new(1_000_000));
        let mut t = tracker(1, &clock);
        let bad = read(&mut t, 0, &[999_000, 1_000_000 + 3_600_001, 1_000_500]);
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].payload, "[7,4600001]");
        assert!(bad[0].error.contains("beyond the allowed skew"));
        assert_eq!(t.poll(), vec![WatermarkUpdate::Watermark(1_000_399)]);
    }

    #[test]
    fn finished_splits_and_empty_subtasks() {
        let clock = Arc::new(ManualClock::new(0));
        let mut t = tracker(2, &clock);
        read(&mut t, 0, &[5_000]);
        t.split_finished(1);
        assert_eq!(t.poll(), vec![WatermarkUpdate::Watermark(4_899)]);
        let mut empty = tracker(0, &clock);
        assert_eq!(empty.poll(), vec![WatermarkUpdate::Idle(true)]);
    }
}
