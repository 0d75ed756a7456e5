//! Two-input operators end to end: connected streams (plain and keyed), and the joins built on
//! them, checked against results computed independently in the tests.

mod async_io;
mod broadcast;
mod connect;
mod dedup;
mod interval;
mod regular_join;
mod window_join;
