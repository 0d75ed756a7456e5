//! Event time inside a source subtask: timestamps assigned per record, a watermark generator per
//! split, idle splits left out, records too far in the future quarantined, outliers kept from
//! moving the watermark until corroborated, and the subtask's watermark as the minimum over its
//! active splits (never moving backwards). A split's watermark and idleness are part of the
//! source's checkpoint ([`SplitWatermark`]), so event time resumes where it was after a restore.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

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

/// A split's event-time progress, as a checkpoint stores it and a restore gives it back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitWatermark {
    /// The split's watermark (`None`: it had no record with a timestamp yet).
    pub watermark: Option<Timestamp>,
    /// Whether the split was idle (no record for the strategy's idleness timeout).
    pub idle: bool,
}

struct SplitState {
    generator: Option<Box<dyn WatermarkGenerator>>,
    /// Processing time of the split's last record (or of its start).
    last_record_at: Timestamp,
    finished: bool,
    /// The watermark restored from a checkpoint: the split's watermark is never below it.
    floor: Timestamp,
    /// Timestamps of the outliers read in a row, not yet corroborated.
    outliers: Vec<Timestamp>,
    /// The watermark the split's reader supplied (sources that supply them).
    supplied: Timestamp,
    /// Whether the split's reader said the split is idle (sources that supply watermarks).
    supplied_idle: bool,
}

impl SplitState {
    /// The split's watermark: its generator's, never below the restored one.
    fn watermark(&self, supplied: bool) -> Option<Timestamp> {
        if supplied {
            return Some(self.supplied.max(self.floor));
        }
        let generator = self.generator.as_ref()?;
        Some(generator.current_watermark().max(self.floor))
    }

    /// Feeds the generator one event time, unless it is an outlier (more than `rule.max_jump`
    /// ahead of the split's watermark) that `rule.corroboration` outliers in a row, near each
    /// other, have not confirmed yet. Returns whether it was an outlier.
    fn on_event(&mut self, timestamp: Timestamp, rule: Option<OutlierRule>) -> bool {
        let Some(generator) = &mut self.generator else {
            return false;
        };
        let Some(rule) = rule else {
            generator.on_event(timestamp);
            return false;
        };
        let watermark = generator.current_watermark().max(self.floor);
        if watermark == MIN_WATERMARK || timestamp <= watermark.saturating_add(rule.max_jump) {
            // An ordinary record: an outlier run before it was not corroborated.
            self.outliers.clear();
            generator.on_event(timestamp);
            return false;
        }
        if self
            .outliers
            .first()
            .is_some_and(|first| first.abs_diff(timestamp) > rule.max_jump as u64)
        {
            self.outliers.clear();
        }
        self.outliers.push(timestamp);
        if self.outliers.len() >= rule.corroboration {
            for corroborated in self.outliers.drain(..) {
                generator.on_event(corroborated);
            }
        }
        true
    }
}

/// When a record's event time is an outlier for its split's watermark (see
/// [`WatermarkStrategy::with_max_watermark_jump`]).
#[derive(Clone, Copy, Debug)]
struct OutlierRule {
    max_jump: Timestamp,
    corroboration: usize,
}

/// The newest event time a source subtask read, and the processing time (the job's clock) when it
/// read it: an event time that follows the wall clock is read close to it, a synthetic one (a
/// generator's fixed base, a replay of old data) far from it, even after the source stalls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NewestEvent {
    /// Epoch ms.
    pub(crate) event_time: Timestamp,
    /// Epoch ms.
    pub(crate) read_at: Timestamp,
}

/// The watermark bookkeeping of one source subtask.
pub(crate) struct SourceWatermarks<T> {
    strategy: WatermarkStrategy<T>,
    splits: Vec<SplitState>,
    clock: Arc<dyn Clock>,
    emitted: Timestamp,
    idle: bool,
    /// The readers supply their splits' watermarks and idleness ([`Source::supplies_watermarks`]).
    ///
    /// [`Source::supplies_watermarks`]: crate::source::Source::supplies_watermarks
    supplied: bool,
    /// The newest event time read so far (outliers not counted) and the processing time it was
    /// read at: whether event time follows the wall clock (see [`NewestEvent`]).
    newest: Option<NewestEvent>,
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
            supplied: false,
            newest: None,
        };
        for _ in 0..splits {
            watermarks.add_split();
        }
        watermarks
    }

    /// The readers supply their splits' watermarks and idleness: the strategy's generator and
    /// idleness timeout are not used.
    pub(crate) fn supplied_by_readers(mut self) -> Self {
        self.supplied = true;
        self
    }

    /// What the reader of `split` said about its event time in its last read.
    pub(crate) fn on_supplied(
        &mut self,
        split: usize,
        watermark: Option<Timestamp>,
        idle: Option<bool>,
    ) {
        if !self.supplied {
            return;
        }
        let state = &mut self.splits[split];
        if let Some(watermark) = watermark {
            state.supplied = state.supplied.max(watermark);
        }
        if let Some(idle) = idle {
            state.supplied_idle = idle;
        }
    }

    /// Assigns event time to the records just read from `split`, moves those too far ahead of
    /// the wall clock to `bad`, and feeds the others to the split's generator, but for outliers
    /// not yet corroborated. Returns how many records were outliers (they stay in `records`).
    pub(crate) fn on_records(
        &mut self,
        split: usize,
        records: &mut Vec<Record<T>>,
        bad: &mut Vec<BadInput>,
    ) -> u64 {
        if records.is_empty() {
            return 0;
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
        let rule = self.strategy.max_watermark_jump.map(|jump| OutlierRule {
            max_jump: jump.as_millis().min(Timestamp::MAX as u128) as Timestamp,
            corroboration: self.strategy.outlier_corroboration.max(1),
        });
        let mut outliers = 0;
        let mut newest: Option<Timestamp> = None;
        if state.generator.is_some() && !self.supplied {
            for record in records.iter() {
                let Some(time) = record.timestamp else {
                    continue;
                };
                if state.on_event(time.millis(), rule) {
                    outliers += 1;
                } else {
                    newest = newest.max(Some(time.millis()));
                }
            }
        } else {
            newest = records
                .iter()
                .filter_map(|r| r.timestamp)
                .max()
                .map(EventTime::millis);
        }
        if let Some(event_time) = newest
            && self.newest.is_none_or(|n| event_time > n.event_time)
        {
            self.newest = Some(NewestEvent {
                event_time,
                read_at: now,
            });
        }
        outliers
    }

    /// The newest event time read so far (outliers not counted), with when it was read.
    pub(crate) fn newest(&self) -> Option<NewestEvent> {
        self.newest
    }

    /// The event-time progress of `split`, for a checkpoint.
    pub(crate) fn snapshot_split(&self, split: usize) -> SplitWatermark {
        let state = &self.splits[split];
        SplitWatermark {
            watermark: state
                .watermark(self.supplied)
                .filter(|w| *w > MIN_WATERMARK),
            idle: !state.finished && self.is_idle(state, self.clock.now()),
        }
    }

    /// Resumes `split` where a checkpoint left it: its watermark never goes below the stored
    /// one, and a split that was idle is idle again until it has records.
    pub(crate) fn restore_split(&mut self, split: usize, restored: SplitWatermark) {
        let now = self.clock.now();
        let idleness = self.idleness();
        let state = &mut self.splits[split];
        if let Some(watermark) = restored.watermark {
            state.floor = state.floor.max(watermark);
        }
        if self.supplied {
            state.supplied_idle = restored.idle;
        } else if restored.idle
            && let Some(limit) = idleness
        {
            state.last_record_at = now.saturating_sub(limit);
        }
    }

    fn idleness(&self) -> Option<Timestamp> {
        self.strategy.idleness.map(|d| d.as_millis() as Timestamp)
    }

    fn is_idle(&self, state: &SplitState, now: Timestamp) -> bool {
        if self.supplied {
            return state.supplied_idle;
        }
        self.idleness()
            .is_some_and(|limit| now.saturating_sub(state.last_record_at) >= limit)
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
            floor: MIN_WATERMARK,
            outliers: Vec::new(),
            supplied: MIN_WATERMARK,
            supplied_idle: false,
        });
    }

    /// The split has no more records: it no longer holds the watermark back.
    pub(crate) fn split_finished(&mut self, split: usize) {
        self.splits[split].finished = true;
    }

    /// What to send downstream now (at most an idleness change and a watermark).
    pub(crate) fn poll(&mut self) -> Vec<WatermarkUpdate> {
        if self.strategy.generator.is_none() && !self.supplied {
            return Vec::new();
        }
        let now = self.clock.now();
        let idleness = self.idleness();
        let active: Vec<&SplitState> = self
            .splits
            .iter()
            .filter(|s| !s.finished && !self.is_idle(s, now))
            .collect();
        let mut updates = Vec::new();
        let idle =
            active.is_empty() && (idleness.is_some() || self.supplied || self.splits.is_empty());
        if idle != self.idle {
            self.idle = idle;
            updates.push(WatermarkUpdate::Idle(idle));
        }
        let watermark = active
            .iter()
            .filter_map(|s| s.watermark(self.supplied))
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
    fn a_restored_split_resumes_at_its_watermark_without_new_records() {
        let clock = Arc::new(ManualClock::new(1_000_000));
        let mut before = tracker(2, &clock);
        read(&mut before, 0, &[5_000]);
        read(&mut before, 1, &[9_000]);
        assert_eq!(before.poll(), vec![WatermarkUpdate::Watermark(4_899)]);
        let saved = [before.snapshot_split(0), before.snapshot_split(1)];
        assert_eq!(
            saved,
            [
                SplitWatermark {
                    watermark: Some(4_899),
                    idle: false
                },
                SplitWatermark {
                    watermark: Some(8_899),
                    idle: false
                }
            ]
        );

        // Restored, the splits hold their watermarks before any record: the subtask's
        // watermark is the restored one at once, and a record behind it does not lower it.
        let mut after = tracker(2, &clock);
        after.restore_split(0, saved[0]);
        after.restore_split(1, saved[1]);
        assert_eq!(after.poll(), vec![WatermarkUpdate::Watermark(4_899)]);
        read(&mut after, 0, &[1_000]);
        assert_eq!(after.poll(), vec![]);
        assert_eq!(after.snapshot_split(0).watermark, Some(4_899));
        read(&mut after, 0, &[20_000]);
        assert_eq!(after.poll(), vec![WatermarkUpdate::Watermark(8_899)]);
        // A split without any watermark stores none.
        assert_eq!(
            tracker(1, &clock).snapshot_split(0),
            SplitWatermark::default()
        );
    }

    #[test]
    fn a_split_idle_at_the_checkpoint_is_idle_after_the_restore() {
        let clock = Arc::new(ManualClock::new(1_000_000));
        let mut before = tracker(2, &clock);
        read(&mut before, 0, &[5_000]);
        read(&mut before, 1, &[9_000]);
        clock.advance(Duration::from_secs(11));
        read(&mut before, 1, &[10_000]);
        // Split 0 silent for 11 s: idle, split 1 not.
        assert!(before.snapshot_split(0).idle);
        assert!(!before.snapshot_split(1).idle);
        let saved = [before.snapshot_split(0), before.snapshot_split(1)];

        let mut after = tracker(2, &clock);
        after.restore_split(0, saved[0]);
        after.restore_split(1, saved[1]);
        // The idle split does not hold the watermark back; the other is at its restored one.
        assert_eq!(after.poll(), vec![WatermarkUpdate::Watermark(9_899)]);
        // The active split goes idle by its rule, 10 s after the restore.
        clock.advance(Duration::from_secs(10));
        assert_eq!(after.poll(), vec![WatermarkUpdate::Idle(true)]);
    }

    #[test]
    fn one_outlier_does_not_move_the_watermark_but_a_corroborated_jump_does() {
        let clock = Arc::new(ManualClock::new(1_000_000_000));
        let strategy = WatermarkStrategy::bounded_out_of_orderness(Duration::from_millis(100))
            .with_timestamps(|(_, ts): &(u32, Timestamp)| *ts)
            .with_max_watermark_jump(Some(Duration::from_secs(60)));
        let mut t = SourceWatermarks::new(strategy, 1, clock.clone());
        let on = |t: &mut SourceWatermarks<(u32, Timestamp)>, timestamps: &[Timestamp]| {
            let mut records: Vec<Record<(u32, Timestamp)>> = timestamps
                .iter()
                .map(|&ts| Record::untimed((7, ts)))
                .collect();
            let outliers = t.on_records(0, &mut records, &mut Vec::new());
            assert_eq!(records.len(), timestamps.len(), "outliers are processed");
            outliers
        };
        assert_eq!(on(&mut t, &[10_000, 11_000]), 0);
        assert_eq!(t.poll(), vec![WatermarkUpdate::Watermark(10_899)]);
        // A device a day ahead, between ordinary records: counted, the watermark stays.
        assert_eq!(on(&mut t, &[86_400_000, 12_000, 86_400_500, 13_000]), 2);
        assert_eq!(t.poll(), vec![WatermarkUpdate::Watermark(12_899)]);
        // Two in a row are not enough; three near each other are: the stream jumped.
        assert_eq!(on(&mut t, &[500_000, 500_100]), 2);
        assert_eq!(t.poll(), vec![]);
        assert_eq!(on(&mut t, &[500_050]), 1);
        assert_eq!(t.poll(), vec![WatermarkUpdate::Watermark(499_999)]);
        // Outliers in a row but far from each other do not corroborate each other.
        assert_eq!(on(&mut t, &[10_000_000, 20_000_000, 30_000_000]), 3);
        assert_eq!(t.poll(), vec![]);
        // Without the rule, one record moves the watermark.
        let strategy = WatermarkStrategy::bounded_out_of_orderness(Duration::from_millis(100))
            .with_timestamps(|(_, ts): &(u32, Timestamp)| *ts)
            .with_max_watermark_jump(None);
        let mut t = SourceWatermarks::new(strategy, 1, clock);
        assert_eq!(on(&mut t, &[10_000, 86_400_000]), 0);
        assert_eq!(t.poll(), vec![WatermarkUpdate::Watermark(86_399_899)]);
    }

    #[test]
    fn readers_that_supply_watermarks_decide_their_splits_event_time() {
        let clock = Arc::new(ManualClock::new(1_000_000));
        // The strategy's generator and idleness timeout are not used for such splits.
        let mut t = tracker(2, &clock).supplied_by_readers();
        read(&mut t, 0, &[50_000]);
        assert_eq!(
            t.poll(),
            vec![],
            "no reader said anything: both at the minimum"
        );
        t.on_supplied(0, Some(7_000), None);
        assert_eq!(
            t.poll(),
            vec![],
            "split 1 holds the watermark at its minimum"
        );
        t.on_supplied(1, Some(5_000), None);
        assert_eq!(t.poll(), vec![WatermarkUpdate::Watermark(5_000)]);
        // Never backwards; silence is no idleness (the reader says when).
        t.on_supplied(1, Some(4_000), None);
        clock.advance(Duration::from_secs(60));
        assert_eq!(t.poll(), vec![]);
        t.on_supplied(1, None, Some(true));
        assert_eq!(t.poll(), vec![WatermarkUpdate::Watermark(7_000)]);
        t.on_supplied(0, None, Some(true));
        assert_eq!(t.poll(), vec![WatermarkUpdate::Idle(true)]);
        assert_eq!(
            t.snapshot_split(0),
            SplitWatermark {
                watermark: Some(7_000),
                idle: true
            }
        );
        t.on_supplied(1, Some(9_000), Some(false));
        assert_eq!(
            t.poll(),
            vec![
                WatermarkUpdate::Idle(false),
                WatermarkUpdate::Watermark(9_000)
            ]
        );
        // Restored: the stored watermark is a floor, the stored idleness holds until told.
        let mut after = tracker(2, &clock).supplied_by_readers();
        after.restore_split(0, t.snapshot_split(0));
        after.restore_split(1, t.snapshot_split(1));
        assert_eq!(after.poll(), vec![WatermarkUpdate::Watermark(9_000)]);
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

    #[test]
    fn the_newest_event_time_is_kept_with_when_it_was_read_outliers_aside() {
        let clock = Arc::new(ManualClock::new(1_000_000_000));
        let strategy = WatermarkStrategy::bounded_out_of_orderness(Duration::from_millis(100))
            .with_timestamps(|(_, ts): &(u32, Timestamp)| *ts)
            .with_max_watermark_jump(Some(Duration::from_secs(60)));
        let mut t = SourceWatermarks::new(strategy, 2, clock.clone());
        let on = |t: &mut SourceWatermarks<(u32, Timestamp)>, split, timestamps: &[Timestamp]| {
            let mut records: Vec<Record<(u32, Timestamp)>> = timestamps
                .iter()
                .map(|&ts| Record::untimed((7, ts)))
                .collect();
            t.on_records(split, &mut records, &mut Vec::new());
        };
        assert_eq!(t.newest(), None);
        on(&mut t, 0, &[10_000, 12_000, 11_000]);
        let first = NewestEvent {
            event_time: 12_000,
            read_at: 1_000_000_000,
        };
        assert_eq!(t.newest(), Some(first));
        // Older records, on any split, and an outlier a day ahead leave it as it was.
        clock.advance(Duration::from_secs(5));
        on(&mut t, 1, &[9_000]);
        on(&mut t, 0, &[11_500, 86_400_000]);
        assert_eq!(t.newest(), Some(first));
        on(&mut t, 1, &[13_000]);
        assert_eq!(
            t.newest(),
            Some(NewestEvent {
                event_time: 13_000,
                read_at: 1_000_005_000
            })
        );
    }
}
