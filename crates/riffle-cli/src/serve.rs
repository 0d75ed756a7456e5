//! `riffle serve`: materialized views over streaming SQL, served over the Postgres wire
//! protocol (issue 30, docs/serve.md). `psql -h 127.0.0.1 -p 4566 -U riffle` then creates
//! tables and `CREATE MATERIALIZED VIEW`s, queries them with `SELECT` and follows them with
//! `COPY (SUBSCRIBE v) TO STDOUT`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use riffle_serve::{ServeConfig, Server};

use crate::demos::EngineArgs;

/// Options of `riffle serve`.
#[derive(Args, Clone, Debug)]
pub struct ServeArgs {
    /// Where Postgres clients connect (loopback only).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:4566")]
    pub listen: String,
    /// Where the catalog and each view's checkpoints and state are kept; a restart on the
    /// same directory brings the views back from their latest checkpoints.
    #[arg(long, value_name = "DIR", default_value = "riffle-serve-data")]
    pub data_dir: PathBuf,
    /// How many changes a subscriber may fall behind before it is cut off with an error.
    #[arg(long, value_name = "CHANGES", default_value_t = 1_000_000)]
    pub max_subscriber_lag: usize,
    /// How the views' jobs run (parallelism, --state-backend, --checkpoint-interval-ms: 5000
    /// unless given).
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Runs the server until the process is stopped.
pub fn run(args: &ServeArgs) -> riffle::Result<()> {
    let listen: SocketAddr = args.listen.parse().map_err(|e| {
        riffle::Error::config(
            "--listen",
            format!("`{}` is not HOST:PORT: {e}", args.listen),
        )
    })?;
    if args.engine.restore.is_some() {
        return Err(riffle::Error::config(
            "--restore",
            "riffle serve restores every view from its latest checkpoint in --data-dir by itself",
        ));
    }
    let mut env = args.engine.env_config("serve")?;
    env.checkpoints.interval = Some(
        env.checkpoints
            .interval
            .unwrap_or(riffle_serve::DEFAULT_CHECKPOINT_INTERVAL),
    );
    let mut config = ServeConfig::new(&args.data_dir);
    config.listen = listen;
    config.env = env;
    config.max_subscriber_lag = args.max_subscriber_lag;
    config.functions = crate::sql::functions()
        .into_iter()
        .map(|(name, f)| (name.to_string(), f))
        .collect();
    let server = Server::start(config)?;
    eprintln!(
        "riffle serve: listening on {} (data in {}): psql -h {} -p {} -U riffle",
        server.local_addr(),
        args.data_dir.display(),
        server.local_addr().ip(),
        server.local_addr().port()
    );
    server.wait();
    Ok(())
}
