//! Async I/O in the API (Flink's `AsyncDataStream.orderedWait` / `unorderedWait`):
//! [`DataStream::async_map`] and [`DataStream::async_map_with`]. See
//! [`AsyncWait`](crate::operators::AsyncWait) for what the operator guarantees.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::api::declared::operator_node;
use crate::api::stream::DataStream;
use crate::error::BoxError;
use crate::graph::{Ship, Slot};
use crate::operators::{AsyncConfig, AsyncMap, AsyncOrder};
use crate::record::Data;

impl<T: Data> DataStream<T> {
    /// Maps every record through an asynchronous request (a lookup in an external service),
    /// with up to `capacity` requests in flight, `timeout` per request (a timed-out request fails
    /// the job: use [`async_map_with`](DataStream::async_map_with) for retries or a side output
    /// of failures), results in `order`. The requests run on a tokio runtime shared by the async
    /// operators of the process (one client, created once, serves every subtask and restart);
    /// records in flight at a checkpoint are in it, and requested again after a restore.
    ///
    /// ```
    /// use std::time::Duration;
    /// use riffle::{EnvConfig, StreamEnv, operators::AsyncOrder, sink::CollectSink};
    ///
    /// let env = StreamEnv::with_config(EnvConfig::deterministic());
    /// let (sink, out) = CollectSink::new();
    /// env.from_iter(vec![1u64, 2, 3])
    ///     .async_map(
    ///         |n| async move {
    ///             // A real job calls a service here (an HTTP client, a database driver); the
    ///             // later records answer first, and still come out in input order.
    ///             tokio::time::sleep(Duration::from_millis(10 * (4 - n))).await;
    ///             Ok::<_, std::io::Error>(format!("user {n}"))
    ///         },
    ///         10,
    ///         Duration::from_secs(1),
    ///         AsyncOrder::Ordered,
    ///     )
    ///     .sink(sink);
    /// env.execute().unwrap();
    /// assert_eq!(out.values(), vec!["user 1", "user 2", "user 3"]);
    /// ```
    pub fn async_map<U, E, Fut, F>(
        &self,
        f: F,
        capacity: usize,
        timeout: Duration,
        order: AsyncOrder,
    ) -> DataStream<U>
    where
        U: Data,
        E: Into<BoxError> + 'static,
        Fut: Future<Output = Result<U, E>> + Send + 'static,
        F: Fn(T) -> Fut + Send + Sync + 'static,
    {
        self.async_map_with(f, AsyncConfig::new(capacity, timeout, order))
    }

    /// As [`async_map`](DataStream::async_map), with every setting of [`AsyncConfig`]: retries
    /// with back-off, a side output for records whose request failed on every
    /// attempt. A bad setting fails the job at start, naming it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use riffle::{OutputTag, StreamEnv, operators::{AsyncConfig, AsyncFailure, AsyncOrder}, sink::CollectSink};
    ///
    /// let env = StreamEnv::new();
    /// let failed = OutputTag::<AsyncFailure<u64>>::new("lookup-failed");
    /// let (sink, out) = CollectSink::new();
    /// let (failures, failed_out) = CollectSink::new();
    /// let looked_up = env.from_iter(vec![1u64, 2, 3]).async_map_with(
    ///     |n| async move {
    ///         if n == 2 { Err("no such user".to_string()) } else { Ok(n * 10) }
    ///     },
    ///     AsyncConfig::new(10, Duration::from_secs(1), AsyncOrder::Unordered)
    ///         .with_retries(2, Duration::from_millis(1))
    ///         .failures_to(&failed),
    /// );
    /// looked_up.sink(sink);
    /// looked_up.get_side_output(&failed).map(|f| (f.input, f.error, f.attempts)).sink(failures);
    /// env.execute().unwrap();
    /// assert_eq!(out.sorted(), vec![10, 30]);
    /// assert_eq!(failed_out.values(), vec![(2, "no such user".to_string(), 3)]);
    /// ```
    pub fn async_map_with<U, E, Fut, F>(&self, f: F, config: AsyncConfig) -> DataStream<U>
    where
        U: Data,
        E: Into<BoxError> + 'static,
        Fut: Future<Output = Result<U, E>> + Send + 'static,
        F: Fn(T) -> Fut + Send + Sync + 'static,
    {
        let f: crate::operators::RequestFn<T, U> = Arc::new(move |value: T| {
            let request = f(value);
            Box::pin(async move { request.await.map_err(Into::into) })
        });
        let name = match config.order {
            AsyncOrder::Ordered => "AsyncMap (ordered)",
            AsyncOrder::Unordered => "AsyncMap (unordered)",
        };
        let node = operator_node(name, vec![self.edge()], move || {
            config.validate()?;
            Ok(AsyncMap::new(f.clone(), config.clone()))
        });
        let id = self.env.add_node(node);
        DataStream::new(self.env.clone(), id, Slot::Main, Ship::Forward)
    }
}
