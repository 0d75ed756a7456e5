//! What the bench binaries share.

pub use riffle_cli::process::cpu_seconds;
