//! The `riffle` command's library: the seed's clicks domain and its scenarios as demos, so that
//! the binary, the benchmarks and the end-to-end tests run the very same pipelines.

#![forbid(unsafe_code)]

pub mod clicks;
pub mod control;
pub mod demos;
pub mod generate;
pub mod group;
pub mod nexmark;
pub mod process;
pub mod progress;
pub mod savepoint;
pub mod serve;
pub mod sql;
pub mod sql_client;
#[cfg(feature = "kafka")]
pub mod sql_group;
