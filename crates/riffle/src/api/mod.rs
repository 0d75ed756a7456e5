//! The DataStream API: [`StreamEnv`] declares a job, [`DataStream`] and [`KeyedStream`] its steps.
//!
//! Declaring a step only adds it to the job graph; [`StreamEnv::execute`] plans the graph (chaining,
//! channels, parallel subtasks) and runs it.

mod connected;
mod count_windowed;
mod env;
mod interval_join;
mod keyed;
mod stream;
mod window_join;
mod windowed;

pub use connected::{ConnectedStreams, KeyedConnectedStreams};
pub use count_windowed::CountWindowedStream;
pub use env::StreamEnv;
pub use interval_join::{IntervalJoin, IntervalJoined};
pub use keyed::{KeyFn, KeyedStream};
pub use stream::{DataStream, DataStreamSink};
pub use window_join::{
    CoGroup, EqualTo, Join, TwoStreams, WhereKey, WindowedCoGroup, WindowedJoin,
};
pub use windowed::WindowedStream;

/// Name of the side output where a source sends records it could not decode.
pub const DEAD_LETTER_TAG: &str = "dead-letter";
