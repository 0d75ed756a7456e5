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
    /// Where Postgres clients connect (a loopback address unless --users-file is given).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:4566")]
    pub listen: String,
    /// The users who may connect, one `name:password` per line (`#` starts a comment):
    /// clients then authenticate with SCRAM-SHA-256. Without it any user name connects with no
    /// password, on loopback only.
    #[arg(long, value_name = "FILE")]
    pub users_file: Option<PathBuf>,
    /// Where the catalog and each view's checkpoints and state are kept; a restart on the
    /// same directory brings the views back from their latest checkpoints.
    #[arg(long, value_name = "DIR", default_value = "riffle-serve-data")]
    pub data_dir: PathBuf,
    /// How many changes a subscriber may fall behind before it is cut off with an error.
    #[arg(long, value_name = "CHANGES", default_value_t = 1_000_000)]
    pub max_subscriber_lag: usize,
    /// How many of its latest changes each view keeps (in memory and in its checkpoints) for
    /// subscribers that resume with `SUBSCRIBE v AS OF <progress>`; 0 keeps none.
    #[arg(long, value_name = "CHANGES", default_value_t = riffle_serve::view::DEFAULT_RETAINED_CHANGES)]
    pub retained_changes: usize,
    /// Each view and sink reads its tables' sources itself: by default the views and sinks
    /// reading one table read its source once, together (a view then goes at the pace of the
    /// slowest one over the same table, at most 200,000 records ahead of it).
    #[arg(long)]
    pub no_shared_sources: bool,
    /// The server's certificate (then any intermediates), a PEM file: clients must connect
    /// with TLS (sslmode=require or stronger). Needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key, a PEM file. Needs --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The certificate authorities (a PEM file) client certificates are checked against: a
    /// client must present a certificate one of them signed, whose common name (CN) is the
    /// user it connects as (psql's sslcert= and sslkey=). With --users-file it also gives its
    /// password; without, the certificate alone lets it in (also off loopback). Needs
    /// --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
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
    config.retained_changes = args.retained_changes;
    config.shared_sources = !args.no_shared_sources;
    config.web = args.engine.web_config()?;
    if let Some(file) = &args.users_file {
        config.users = read_users(file)?;
    }
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        config.tls = Some(riffle_serve::TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
        });
    }
    config.tls_client_ca = args.tls_client_ca.clone();
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

/// The `name:password` lines of a users file.
fn read_users(file: &std::path::Path) -> riffle::Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| riffle::Error::config("--users-file", format!("`{}`: {e}", file.display())))?;
    let mut users = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, password) = line.split_once(':').ok_or_else(|| {
            riffle::Error::config(
                "--users-file",
                format!("`{}` line {}: not name:password", file.display(), n + 1),
            )
        })?;
        users.push((name.trim().to_string(), password.to_string()));
    }
    if users.is_empty() {
        return Err(riffle::Error::config(
            "--users-file",
            format!("`{}` names no user", file.display()),
        ));
    }
    Ok(users)
}
