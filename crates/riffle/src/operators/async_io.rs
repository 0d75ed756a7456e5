//! Async I/O (Flink's `AsyncWaitOperator`): each record starts a request to an external service
//! (a lookup for enrichment) and the operator goes on with the next records while requests are
//! in flight, instead of waiting for each in turn.
//!
//! - The requests run on a tokio runtime shared by the async operators of the process (threads
//!   `riffle-async-N`, started on first use, kept for the life of the process): the user function
//!   returns a future, which may use any tokio-based client. Being shared and long-lived, the
//!   runtime lets one client (a `reqwest::Client` and its pool of connections) serve every
//!   subtask and outlive a restart of the job: connections belong to the runtime that opened them,
//!   so a runtime per subtask would leave the others a pool of dead connections when it ends.
//!   An operator instance that ends (or fails) cancels its requests still running.
//! - At most `capacity` records are in the operator at once; when full, the operator waits for one
//!   to complete, so its task stays busy and its inputs are back-pressured (memory stays bounded).
//! - Each attempt has a timeout; a failed or timed-out attempt is retried after a back-off that
//!   doubles, up to `retries` times; then the job fails with an error naming the record's request,
//!   or the record goes to a side output of [`AsyncFailure`]s when the job asked for one.
//! - [`AsyncOrder::Ordered`] emits results in input order; [`AsyncOrder::Unordered`] as they
//!   complete. Either way no result becomes late because of the operator: before a watermark `W`
//!   passes, every record that came before it with a timestamp at or before `W` has been emitted
//!   (ordered: with everything before it).
//! - Records in the operator at a checkpoint (their requests not answered, or answered and not
//!   emitted yet) are part of the checkpoint: a restore issues their requests again, so none is
//!   lost. With an exactly-once sink nothing is duplicated either (results emitted after the
//!   barrier belong to the next checkpoint).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError, channel};
use std::time::Duration;

use crate::checkpoint::{Redistribution, RestoreState, SnapshotWriter};
use crate::error::{BoxError, Error, Result};
use crate::operators::{BuildOperator, Collector, Operator, OperatorContext, OutputTag};
use crate::record::{Data, EventTime, Record, Timestamp};

/// In which order an async operator emits its results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncOrder {
    /// In the order of the input records (a slow request holds back the faster ones after it).
    Ordered,
    /// As the requests complete (lower latency), but never across a watermark for records the
    /// watermark covers.
    Unordered,
}

/// Settings of an async operator
/// ([`DataStream::async_map_with`](crate::DataStream::async_map_with)).
///
/// ```
/// use std::time::Duration;
/// use riffle::operators::{AsyncConfig, AsyncOrder};
/// let config = AsyncConfig::new(100, Duration::from_millis(500), AsyncOrder::Unordered)
///     .with_retries(3, Duration::from_millis(50));
/// config.validate().unwrap();
/// assert!(AsyncConfig::new(0, Duration::from_secs(1), AsyncOrder::Ordered).validate().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AsyncConfig {
    /// Most records in the operator at once (requests in flight, and results held for order).
    pub capacity: usize,
    /// Time allowed for one attempt of a request.
    pub timeout: Duration,
    /// Ordered or unordered results.
    pub order: AsyncOrder,
    /// Attempts after the first one for a request that failed or timed out.
    pub retries: u32,
    /// Delay before the first retry; each further retry waits twice as long as the one before.
    pub backoff: Duration,
    /// Side output for records whose request failed on every attempt (`None`: the job fails).
    pub failure_tag: Option<String>,
}

impl AsyncConfig {
    /// `capacity` records at once, `timeout` per attempt, results in `order`; no retries, a
    /// failed request fails the job.
    pub fn new(capacity: usize, timeout: Duration, order: AsyncOrder) -> Self {
        AsyncConfig {
            capacity,
            timeout,
            order,
            retries: 0,
            backoff: Duration::from_millis(100),
            failure_tag: None,
        }
    }

    /// Retries a failed or timed-out request up to `retries` times, first after `backoff`, then
    /// after twice the previous delay.
    pub fn with_retries(mut self, retries: u32, backoff: Duration) -> Self {
        self.retries = retries;
        self.backoff = backoff;
        self
    }

    /// Sends a record whose request failed on every attempt to the side output `tag` (read it
    /// with [`get_side_output`](crate::DataStream::get_side_output)) instead of failing the job.
    pub fn failures_to<T>(mut self, tag: &OutputTag<AsyncFailure<T>>) -> Self {
        self.failure_tag = Some(tag.id().to_string());
        self
    }

    /// Checks the settings; the error names the bad one.
    pub fn validate(&self) -> Result<()> {
        if self.capacity == 0 {
            return Err(Error::config("async.capacity", "must be at least 1"));
        }
        if self.timeout.is_zero() {
            return Err(Error::config("async.timeout", "must be longer than zero"));
        }
        if self.retries > 0 && self.backoff.is_zero() {
            return Err(Error::config(
                "async.backoff",
                "must be longer than zero when retries are configured",
            ));
        }
        Ok(())
    }

    /// The longest a request can take: every attempt timing out, with every back-off.
    fn longest_request(&self) -> Duration {
        let mut total = self.timeout;
        let mut delay = self.backoff;
        for _ in 0..self.retries {
            total += self.timeout + delay;
            delay = delay.saturating_mul(2);
        }
        total
    }
}

/// A record whose request failed on every attempt (what the side output of
/// [`AsyncConfig::failures_to`] receives).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AsyncFailure<T> {
    /// The input record.
    pub input: T,
    /// The last attempt's error (or `timed out after ..`).
    pub error: String,
    /// Attempts made.
    pub attempts: u32,
}

/// The future a request function returns, boxed.
pub(crate) type RequestFuture<U> = Pin<Box<dyn Future<Output = Result<U, BoxError>> + Send>>;

/// A request function with its future boxed.
pub(crate) type RequestFn<T, U> = Arc<dyn Fn(T) -> RequestFuture<U> + Send + Sync>;

/// An error with its causes (`error sending request: connection refused`): clients such as
/// reqwest keep the reason in the source.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !message.contains(&cause_text) {
            message.push_str(": ");
            message.push_str(&cause_text);
        }
        source = cause.source();
    }
    message
}

/// A request's final outcome, sent from the runtime to the operator.
struct Completion<U> {
    seq: u64,
    outcome: Result<U, String>,
    attempts: u32,
}

/// A record in the operator.
struct Entry<T, U> {
    input: Record<T>,
    /// Set when its request completed (ordered mode holds it until the ones before are done).
    done: Option<(Result<U, String>, u32)>,
    /// Cancels its request (when the operator instance goes away first).
    abort: tokio::task::AbortHandle,
}

/// Worker threads of the shared runtime: requests mostly wait, a few threads serve many.
const RUNTIME_THREADS: usize = 2;

/// The tokio runtime of the async operators of this process.
fn shared_runtime() -> Result<&'static tokio::runtime::Runtime> {
    static RUNTIME: std::sync::OnceLock<Result<tokio::runtime::Runtime, String>> =
        std::sync::OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(RUNTIME_THREADS)
                .thread_name("riffle-async")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| {
            Error::user(format!(
                "cannot start the async operators' tokio runtime: {e}"
            ))
        })
}

/// What [`DataStream::async_map`](crate::DataStream::async_map) declares: built on each subtask
/// into an [`AsyncWait`] (the shared runtime started, the configuration checked).
pub(crate) struct AsyncMap<T, U> {
    f: RequestFn<T, U>,
    config: AsyncConfig,
}

impl<T: Data, U: Data> AsyncMap<T, U> {
    /// The operator calling `f` for every record, with `config`.
    pub(crate) fn new(f: RequestFn<T, U>, config: AsyncConfig) -> Self {
        AsyncMap { f, config }
    }
}

impl<T: Data, U: Data> BuildOperator for AsyncMap<T, U> {
    type Operator = AsyncWait<T, U>;

    fn build(self, ctx: &OperatorContext) -> Result<AsyncWait<T, U>> {
        self.config.validate()?;
        let (sender, receiver) = channel();
        let failures = self.config.failure_tag.clone().map(OutputTag::new);
        Ok(AsyncWait {
            f: self.f,
            config: self.config,
            runtime: shared_runtime()?,
            sender,
            receiver,
            entries: BTreeMap::new(),
            next_seq: 0,
            failures,
            ctx: ctx.clone(),
        })
    }
}

/// The operator behind [`DataStream::async_map`](crate::DataStream::async_map).
pub struct AsyncWait<T, U> {
    f: RequestFn<T, U>,
    config: AsyncConfig,
    runtime: &'static tokio::runtime::Runtime,
    sender: Sender<Completion<U>>,
    receiver: Receiver<Completion<U>>,
    /// The records in the operator, by sequence number (input order).
    entries: BTreeMap<u64, Entry<T, U>>,
    next_seq: u64,
    failures: Option<OutputTag<AsyncFailure<T>>>,
    ctx: OperatorContext,
}

impl<T: Data, U: Data> AsyncWait<T, U> {
    /// Starts the request of `input`.
    fn issue(&mut self, input: Record<T>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let runtime = self.runtime;
        let (f, sender, value) = (self.f.clone(), self.sender.clone(), input.value.clone());
        let (timeout, retries, backoff) = (
            self.config.timeout,
            self.config.retries,
            self.config.backoff,
        );
        let attempts = async move {
            let mut attempt = 0;
            let mut delay = backoff;
            loop {
                attempt += 1;
                let outcome = match tokio::time::timeout(timeout, f(value.clone())).await {
                    Ok(Ok(result)) => Ok(result),
                    Ok(Err(error)) => Err(error_chain(error.as_ref())),
                    Err(_) => Err(format!("timed out after {timeout:?}")),
                };
                match outcome {
                    Err(_) if attempt <= retries => {
                        tokio::time::sleep(delay).await;
                        delay = delay.saturating_mul(2);
                    }
                    outcome => return (outcome, attempt),
                }
            }
        };
        let request = runtime.spawn(attempts);
        let abort = request.abort_handle();
        runtime.spawn(async move {
            // A panicking request is a failed one (not retried), never a lost completion.
            let (outcome, attempts) = match request.await {
                Ok(done) => done,
                Err(error) if error.is_cancelled() => return,
                Err(error) => (Err(format!("the request panicked: {error}")), 1),
            };
            // The operator may be gone (cancelled job): nobody to tell.
            let _ = sender.send(Completion {
                seq,
                outcome,
                attempts,
            });
        });
        self.entries.insert(
            seq,
            Entry {
                input,
                done: None,
                abort,
            },
        );
    }

    /// Takes a completion in: emits what it makes emittable.
    fn complete(&mut self, completion: Completion<U>, out: &mut Collector<'_, U>) -> Result<()> {
        let Some(entry) = self.entries.get_mut(&completion.seq) else {
            return Ok(()); // From before a restore: issued again since.
        };
        entry.done = Some((completion.outcome, completion.attempts));
        match self.config.order {
            AsyncOrder::Unordered => {
                let entry = self.entries.remove(&completion.seq).expect("present");
                self.emit(entry, out)
            }
            AsyncOrder::Ordered => {
                while let Some(first) = self.entries.first_entry() {
                    if first.get().done.is_none() {
                        break;
                    }
                    let entry = first.remove();
                    self.emit(entry, out)?;
                }
                Ok(())
            }
        }
    }

    fn emit(&mut self, entry: Entry<T, U>, out: &mut Collector<'_, U>) -> Result<()> {
        let (outcome, attempts) = entry.done.expect("completed");
        let timestamp = entry.input.timestamp;
        match outcome {
            Ok(result) => out.emit(Record::timed(result, timestamp)),
            Err(error) => match &self.failures {
                Some(tag) => {
                    let failure = AsyncFailure {
                        input: entry.input.value,
                        error,
                        attempts,
                    };
                    out.side_output(tag, Record::timed(failure, timestamp))?;
                    Ok(())
                }
                None => Err(Error::user(format!(
                    "async request failed after {attempts} attempt(s): {error} (more time with \
                     the timeout, more attempts with retries, or send failures to a side output \
                     with AsyncConfig::failures_to)"
                ))),
            },
        }
    }

    /// Waits for one request to complete and takes it in.
    fn wait_one(&mut self, out: &mut Collector<'_, U>) -> Result<()> {
        // Every request ends within its attempts' timeouts; the margin covers a runtime slow to
        // schedule. Waiting longer means a request blocks its thread (no `.await`).
        let limit = self.config.longest_request() + Duration::from_secs(30);
        match self.receiver.recv_timeout(limit) {
            Ok(completion) => self.complete(completion, out),
            Err(RecvTimeoutError::Timeout) => Err(Error::user(format!(
                "no async request completed within {limit:?}, beyond every timeout: does the \
                 request function block its thread instead of awaiting?"
            ))),
            Err(RecvTimeoutError::Disconnected) => unreachable!("the operator holds a sender"),
        }
    }

    /// Takes in every completion already there, without waiting.
    fn poll(&mut self, out: &mut Collector<'_, U>) -> Result<()> {
        loop {
            match self.receiver.try_recv() {
                Ok(completion) => self.complete(completion, out)?,
                Err(TryRecvError::Empty) => return Ok(()),
                Err(TryRecvError::Disconnected) => unreachable!("the operator holds a sender"),
            }
        }
    }

    fn report(&self) {
        self.ctx.metrics.set_state(self.entries.len() as u64, 0);
    }
}

impl<T: Data, U: Data> Operator for AsyncWait<T, U> {
    type In = T;
    type Out = U;

    fn process(&mut self, batch: &mut Vec<Record<T>>, out: &mut Collector<'_, U>) -> Result<()> {
        for record in batch.drain(..) {
            // Full: wait (the task stays busy, its inputs are back-pressured).
            while self.entries.len() >= self.config.capacity {
                self.wait_one(out)?;
            }
            self.issue(record);
        }
        self.poll(out)?;
        self.report();
        Ok(())
    }

    fn on_watermark(&mut self, watermark: Timestamp, out: &mut Collector<'_, U>) -> Result<()> {
        self.poll(out)?;
        // The records the watermark covers (and, ordered, all before them) leave first.
        let covered = |entry: &Entry<T, U>| {
            entry.done.is_none()
                && entry
                    .input
                    .timestamp
                    .is_some_and(|t| t.millis() <= watermark)
        };
        loop {
            let waiting = match self.config.order {
                AsyncOrder::Unordered => self.entries.values().any(covered),
                AsyncOrder::Ordered => self.entries.values().any(|e| {
                    e.input
                        .timestamp
                        .is_some_and(|t: EventTime| t.millis() <= watermark)
                }),
            };
            if !waiting {
                break;
            }
            self.wait_one(out)?;
        }
        self.report();
        Ok(())
    }

    fn on_tick(&mut self, out: &mut Collector<'_, U>) -> Result<()> {
        self.poll(out)?;
        self.report();
        Ok(())
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64, snapshot: &mut SnapshotWriter) -> Result<()> {
        // Their requests are issued again on restore; each to one new subtask.
        let inputs: Vec<(&T, Option<Timestamp>)> = self
            .entries
            .values()
            .map(|e| (&e.input.value, e.input.timestamp.map(EventTime::millis)))
            .collect();
        snapshot.write_operator(Redistribution::RoundRobin, &inputs)
    }

    fn restore_state(&mut self, state: &RestoreState) -> Result<()> {
        for inputs in state.operator::<Vec<(T, Option<Timestamp>)>>() {
            for (value, timestamp) in inputs? {
                let timestamp = timestamp.and_then(EventTime::new);
                self.issue(Record::timed(value, timestamp));
            }
        }
        self.report();
        Ok(())
    }

    fn close(&mut self, out: &mut Collector<'_, U>) -> Result<()> {
        while !self.entries.is_empty() {
            self.wait_one(out)?;
        }
        self.report();
        Ok(())
    }
}

impl<T, U> Drop for AsyncWait<T, U> {
    fn drop(&mut self) {
        // Requests still running (a failed or cancelled job) are cancelled, not waited for.
        for entry in self.entries.values() {
            entry.abort.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{OperatorHarness, Step, assert_snapshot_round_trip};

    /// Doubles after `n % 4` ms: later records often answer first.
    fn doubling(config: AsyncConfig) -> AsyncMap<u64, u64> {
        let f: RequestFn<u64, u64> = Arc::new(|n: u64| {
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(n % 4)).await;
                Ok(n * 2)
            })
        });
        AsyncMap::new(f, config)
    }

    fn config(order: AsyncOrder) -> AsyncConfig {
        AsyncConfig::new(5, Duration::from_secs(5), order)
    }

    #[test]
    fn ordered_results_keep_input_order_and_leave_before_the_watermark() -> Result<()> {
        let mut harness =
            OperatorHarness::builder(doubling(config(AsyncOrder::Ordered))).build()?;
        for n in (0..20u64).rev() {
            harness.process(n, n as i64)?;
        }
        // Every record of time <= 10 out before the watermark 10; ordered: all before them too.
        harness.watermark(10)?;
        let before: Vec<u64> = harness.take_values();
        assert_eq!(before, (0..20u64).rev().map(|n| n * 2).collect::<Vec<_>>());
        assert_eq!(harness.watermarks(), vec![10]);
        Ok(())
    }

    #[test]
    fn unordered_results_covered_by_a_watermark_leave_before_it() -> Result<()> {
        let mut harness =
            OperatorHarness::builder(doubling(config(AsyncOrder::Unordered))).build()?;
        for n in 0..40u64 {
            harness.process(n, n as i64 * 10)?;
        }
        harness.watermark(200)?;
        let mut before = harness.take_values();
        before.sort();
        let covered: Vec<u64> = (0..=20u64).map(|n| n * 2).collect();
        assert!(
            covered.iter().all(|c| before.contains(c)),
            "every record of time <= 200 before the watermark: {before:?}"
        );
        harness.finish()?;
        before.extend(harness.take_values());
        before.sort();
        assert_eq!(before, (0..40u64).map(|n| n * 2).collect::<Vec<_>>());
        Ok(())
    }

    #[test]
    fn records_in_flight_survive_a_snapshot_at_any_point() -> Result<()> {
        let steps: Vec<Step<u64>> = (0..30u64)
            .flat_map(|n| {
                let mut steps = vec![Step::Record(n, n as i64 * 10)];
                if n % 9 == 8 {
                    steps.push(Step::Watermark(n as i64 * 10 - 50));
                }
                steps
            })
            .collect();
        for order in [AsyncOrder::Ordered, AsyncOrder::Unordered] {
            assert_snapshot_round_trip(|| doubling(config(order)), &steps)?;
        }
        // A snapshot taken while every record is in flight holds them all.
        let mut slow = OperatorHarness::builder(AsyncMap::new(
            Arc::new(|n: u64| -> RequestFuture<u64> {
                Box::pin(async move {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    Ok(n)
                })
            }),
            config(AsyncOrder::Unordered),
        ))
        .build()?;
        for n in 0..5u64 {
            slow.process(n, 1)?;
        }
        let state = slow.snapshot(1)?;
        let held: Vec<Vec<(u64, Option<Timestamp>)>> = state.operator().collect::<Result<_>>()?;
        assert_eq!(held, vec![(0..5).map(|n| (n, Some(1))).collect::<Vec<_>>()]);
        Ok(())
    }

    #[test]
    fn bad_settings_fail_naming_them() {
        let err = |c: AsyncConfig| c.validate().unwrap_err().to_string();
        let base = config(AsyncOrder::Ordered);
        assert!(
            err(AsyncConfig {
                capacity: 0,
                ..base.clone()
            })
            .contains("`async.capacity`")
        );
        assert!(
            err(AsyncConfig {
                timeout: Duration::ZERO,
                ..base.clone()
            })
            .contains("`async.timeout`")
        );
        assert!(err(base.with_retries(2, Duration::ZERO)).contains("`async.backoff`"));
    }
}
