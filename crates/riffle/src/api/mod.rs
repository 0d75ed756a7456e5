//! The DataStream API: [`StreamEnv`] declares a job, [`DataStream`] and [`KeyedStream`] its steps.
//!
//! Declaring a step only adds it to the job graph; [`StreamEnv::execute`] plans the graph (chaining,
//! channels, parallel subtasks) and runs it.

mod async_io;
mod broadcast;
mod connected;
mod count_windowed;
mod declared;
mod dedup;
mod env;
mod interval_join;
mod keyed;
mod regular_join;
mod stream;
mod window_join;
mod windowed;

pub use crate::keys::KeyFn;
pub use broadcast::{BroadcastConnectedStream, BroadcastStream, KeyedBroadcastConnectedStream};
pub use connected::{ConnectedStreams, KeyedConnectedStreams};
pub use count_windowed::CountWindowedStream;
pub use env::StreamEnv;
pub use interval_join::{IntervalJoin, IntervalJoined};
pub use keyed::KeyedStream;
pub use regular_join::RegularJoinBuilder;
pub use stream::{DataStream, DataStreamSink};
pub use window_join::{
    CoGroup, EqualTo, Join, TwoStreams, WhereKey, WindowedCoGroup, WindowedJoin,
};
pub use windowed::WindowedStream;

pub use crate::source::DEAD_LETTER_TAG;
