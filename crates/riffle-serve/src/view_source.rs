//! A view's changes as a source: what a view whose query names another view reads
//! (`CREATE MATERIALIZED VIEW top AS SELECT .. FROM per_user`, `per_user` a view). The reader
//! is a durable subscriber of the inner view ([`SubscribeOptions::durable`]): it gets the
//! inner view's rows, then its changes, each once a checkpoint of the inner view holds it. Its
//! position (the progress of the last change it read) goes into the outer view's checkpoints;
//! a restore resumes `AS OF` it, and each completed checkpoint pins the inner view's retained
//! changes from there on ([`ViewTable::pin`]), so the outer view reads each change of the inner
//! one exactly once, through restarts and crashes of the server. When the inner view's job
//! ended with its input, the reader ends once it has read everything.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use riffle::source::{Boundedness, ReadStatus, Source, SourceOutput, SplitReader};
use riffle::{Change, Error, Result};
use riffle_sql::Row;

use crate::view::{SubscribeOptions, Subscription, TryNext, ViewTable};

/// How long a reader waits before asking the inner view again when it had nothing.
const POLL: Duration = Duration::from_millis(5);

/// The changes of view `view`, read by view `reader`.
pub struct ViewSource {
    view: Arc<ViewTable>,
    reader: String,
}

impl ViewSource {
    /// The changes of `view` as view `reader` reads them.
    pub fn new(view: Arc<ViewTable>, reader: &str) -> ViewSource {
        ViewSource {
            view,
            reader: reader.to_string(),
        }
    }
}

impl Source<Change<Row>> for ViewSource {
    type Split = ();

    fn name(&self) -> String {
        format!("view {}", self.view.name)
    }

    fn boundedness(&self) -> Boundedness {
        Boundedness::Unbounded
    }

    fn splits(&self, _parallelism: usize) -> Result<Vec<()>> {
        Ok(vec![()])
    }

    fn reader(&self, _split: ()) -> Result<Box<dyn SplitReader<Change<Row>>>> {
        Ok(Box::new(ViewReader {
            view: self.view.clone(),
            reader: self.reader.clone(),
            position: None,
            subscription: None,
            pending: VecDeque::new(),
        }))
    }
}

struct ViewReader {
    view: Arc<ViewTable>,
    reader: String,
    /// The progress of the last change read (`None`: nothing read yet, the view's rows come
    /// first).
    position: Option<u64>,
    subscription: Option<Subscription>,
    /// Changes of a batch in hand not read yet, each with its progress.
    pending: VecDeque<(u64, Change<Row>)>,
}

impl ViewReader {
    /// The subscription, made when there is none: after the position, or from the view's rows.
    fn subscription(&mut self) -> Result<&mut Subscription> {
        if self.subscription.is_none() {
            let options = SubscribeOptions {
                durable: true,
                snapshot: true,
                as_of: self.position,
                progress: false,
            };
            let subscription = self.view.subscribe(&options).map_err(|e| {
                Error::user(format!(
                    "view `{}` reads view `{}`: {} (SQLSTATE {})",
                    self.reader, self.view.name, e.message, e.code
                ))
            })?;
            self.subscription = Some(subscription);
        }
        Ok(self.subscription.as_mut().expect("made"))
    }

    /// The subscription ended: made again after the position when the view only went back to
    /// a checkpoint or found the reader slow; an error when the view was dropped.
    fn ended(&mut self) -> Result<()> {
        let reason = self.subscription.take().and_then(|s| s.cut_off());
        match reason {
            Some(_) => Ok(()),
            None => Err(Error::user(format!(
                "view `{}` reads view `{}`, which was dropped",
                self.reader, self.view.name
            ))),
        }
    }
}

impl SplitReader<Change<Row>> for ViewReader {
    fn split_id(&self) -> String {
        format!("view {}", self.view.name)
    }

    fn read(&mut self, out: &mut SourceOutput<Change<Row>>, max: usize) -> Result<ReadStatus> {
        let later = || Ok(ReadStatus::Pending(Some(Instant::now() + POLL)));
        // Restored after a restart of the server: its checkpoint first.
        if !self.view.is_ready() {
            return later();
        }
        if self.position.is_none() {
            let subscription = self.subscription()?;
            match subscription.snapshot_ready() {
                Some(true) => {
                    let progress = subscription.progress;
                    // The rows at the start, at once: they have one position.
                    for row in std::mem::take(&mut subscription.snapshot) {
                        out.emit(Change::insert(row));
                    }
                    self.position = Some(progress);
                }
                Some(false) => return later(),
                None => {
                    self.ended()?;
                    return later();
                }
            }
        }
        let mut read = 0;
        while read < max {
            if let Some((progress, change)) = self.pending.pop_front() {
                out.emit(change);
                self.position = Some(progress);
                read += 1;
                continue;
            }
            match self.subscription()?.try_next() {
                TryNext::Batch(batch) => {
                    let start = batch.start();
                    self.pending.extend(
                        batch
                            .changes
                            .iter()
                            .cloned()
                            .zip(start + 1..)
                            .map(|(change, progress)| (progress, change)),
                    );
                }
                TryNext::Nothing => {
                    // The view ended with its input and everything it did was read: so does
                    // this reader.
                    if read == 0
                        && out.is_empty()
                        && self.view.is_finished()
                        && self.position >= Some(self.view.committed_progress())
                    {
                        return Ok(ReadStatus::Finished);
                    }
                    break;
                }
                TryNext::Ended => {
                    self.ended()?;
                    break;
                }
            }
        }
        if read == 0 && out.is_empty() {
            return later();
        }
        Ok(ReadStatus::Ready)
    }

    fn position(&self) -> serde_json::Value {
        serde_json::json!({ "progress": self.position })
    }

    fn seek(&mut self, position: &serde_json::Value) -> Result<()> {
        self.position = position.get("progress").and_then(serde_json::Value::as_u64);
        self.subscription = None;
        self.pending.clear();
        Ok(())
    }

    fn checkpoint_complete(&mut self, position: &serde_json::Value) -> Result<()> {
        if let Some(progress) = position.get("progress").and_then(serde_json::Value::as_u64) {
            self.view.pin(&self.reader, progress);
        }
        Ok(())
    }
}
