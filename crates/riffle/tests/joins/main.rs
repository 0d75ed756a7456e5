//! Two-input operators end to end: connected streams (plain and keyed), and the joins built on
//! them, checked against results computed independently in the tests.

mod connect;
mod interval;
mod window_join;
