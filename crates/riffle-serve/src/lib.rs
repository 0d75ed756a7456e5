//! `riffle serve` (issue 30, docs/serve.md): materialized views over streaming SQL, kept
//! exactly-once by Riffle's checkpoints, queried and subscribed to over the Postgres wire
//! protocol — "query == subscription".
//!
//! A session speaks Flink's SQL dialect ([`riffle_sql`]) plus:
//! - `CREATE MATERIALIZED VIEW v AS SELECT ..`: the query runs as a job of its own whose last
//!   operator keeps the result ([`view::Materialize`]); the job checkpoints into
//!   `<data-dir>/views/v/` and starts again from its latest checkpoint after a restart or a
//!   kill of the server; `DROP MATERIALIZED VIEW v`, `SHOW MATERIALIZED VIEWS`;
//! - `SELECT .. FROM v [WHERE ..] [ORDER BY ..] [LIMIT n]`: read from the view's rows (a
//!   lookup by the view's whole key finds its row directly);
//! - `SUBSCRIBE v` / `COPY (SUBSCRIBE v) TO STDOUT`: the view's rows, then every change.
//!
//! The catalog (tables, views, materialized views) is kept in `<data-dir>/catalog.sql`.
//!
//! ```no_run
//! use riffle_serve::{Server, ServeConfig};
//!
//! let server = Server::start(ServeConfig::new("/tmp/riffle-serve")).unwrap();
//! println!("psql -h 127.0.0.1 -p {} -U riffle", server.local_addr().port());
//! server.wait();
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use riffle::EnvConfig;
use riffle_sql::ScalarFunction;
use riffle_sql::plan::Catalog;

mod cursor;
pub mod engine;
mod information_schema;
pub mod isolation;
mod pg_catalog;
pub mod view;
mod view_rows;
pub mod view_source;
pub mod wire;

pub use engine::{Engine, EngineConfig, Outcome, StatementError, SubscribeRequest};

/// How often a view checkpoints unless told: what a restart replays at most.
pub const DEFAULT_CHECKPOINT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// How to run a server.
#[derive(Clone)]
pub struct ServeConfig {
    /// Where clients connect: a loopback address unless `users` is set.
    pub listen: SocketAddr,
    /// The users who may connect and their passwords (SCRAM-SHA-256); none: any user name, no
    /// password, loopback only.
    pub users: Vec<(String, String)>,
    /// Where the catalog, and each view's checkpoints and state, live.
    pub data_dir: PathBuf,
    /// The engine settings of every view's job (parallelism, state backend, checkpoint
    /// interval: views are exactly-once up to their latest checkpoint).
    pub env: EnvConfig,
    /// How many changes a subscriber may fall behind before it is cut off with an error.
    pub max_subscriber_lag: usize,
    /// How many of its latest changes each view keeps (in memory and in its checkpoints) for
    /// subscribers that resume with `SUBSCRIBE v AS OF progress`; 0: none.
    pub retained_changes: usize,
    /// Whether the views and sinks reading one table share its source, reading it once
    /// (`true`, the default; `--no-shared-sources` turns it off): a view then ingests at the
    /// pace of the slowest view over the same table, which may be up to
    /// [`riffle::source::shared::DEFAULT_HUB_CAPACITY`] records behind it.
    pub shared_sources: bool,
    /// Scalar functions queries can call, by name.
    pub functions: Vec<(String, ScalarFunction)>,
    /// Where each view's and sink's job serves its web UI, REST API and Prometheus metrics
    /// (each on a port of its own: with the default address, the next free one from 8081);
    /// `None` (the default): not served.
    pub web: Option<riffle_web::WebConfig>,
    /// A certificate (chain) and its private key, PEM files: clients must then connect with TLS
    /// (`sslmode=require`); a connection without it is refused.
    pub tls: Option<TlsFiles>,
    /// The certificate authorities (PEM) client certificates are checked against (needs
    /// [`ServeConfig::tls`]): a client must then present a certificate one of them signed,
    /// whose common name (CN) is the user it connects as (Postgres' `cert` authentication);
    /// with users too, it also gives its password.
    pub tls_client_ca: Option<PathBuf>,
}

/// The PEM files of a server's TLS identity.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The certificate, then any intermediate certificates (`--tls-cert`).
    pub cert: PathBuf,
    /// Its private key, PKCS#8, PKCS#1 or SEC1 (`--tls-key`).
    pub key: PathBuf,
}

impl TlsFiles {
    /// The acceptor of TLS connections with this identity; a file that cannot be read or holds
    /// no certificate or key fails, naming its setting.
    fn acceptor(&self, client_ca: Option<&Path>) -> riffle::Result<pgwire::tokio::TlsAcceptor> {
        use pgwire::tokio::tokio_rustls::rustls;
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        let cert_error = |e: String| {
            riffle::Error::config("--tls-cert", format!("`{}`: {e}", self.cert.display()))
        };
        let certs = CertificateDer::pem_file_iter(&self.cert)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| cert_error(e.to_string()))?;
        if certs.is_empty() {
            return Err(cert_error("holds no PEM certificate".to_string()));
        }
        let key = PrivateKeyDer::from_pem_file(&self.key).map_err(|e| {
            riffle::Error::config("--tls-key", format!("`{}`: {e}", self.key.display()))
        })?;
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| cert_error(e.to_string()))?;
        let builder = match client_ca {
            None => builder.with_no_client_auth(),
            Some(file) => {
                let ca_error = |e: String| {
                    riffle::Error::config("--tls-client-ca", format!("`{}`: {e}", file.display()))
                };
                let mut roots = rustls::RootCertStore::empty();
                for ca in
                    CertificateDer::pem_file_iter(file).map_err(|e| ca_error(e.to_string()))?
                {
                    let ca = ca.map_err(|e| ca_error(e.to_string()))?;
                    roots.add(ca).map_err(|e| ca_error(e.to_string()))?;
                }
                if roots.is_empty() {
                    return Err(ca_error("holds no PEM certificate".to_string()));
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .map_err(|e| ca_error(e.to_string()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder.with_single_cert(certs, key).map_err(|e| {
            riffle::Error::config(
                "--tls-key",
                format!(
                    "`{}` is not the key of `{}`: {e}",
                    self.key.display(),
                    self.cert.display()
                ),
            )
        })?;
        // A client that starts TLS directly (Postgres 17's sslnegotiation=direct) names the
        // protocol by ALPN.
        config.alpn_protocols = vec![b"postgresql".to_vec()];
        Ok(pgwire::tokio::TlsAcceptor::from(Arc::new(config)))
    }
}

impl ServeConfig {
    /// A server on `127.0.0.1:4566` keeping its data in `data_dir`, each view checkpointed every
    /// 5 seconds.
    pub fn new(data_dir: impl Into<PathBuf>) -> ServeConfig {
        let mut env = EnvConfig::default();
        env.checkpoints.interval = Some(DEFAULT_CHECKPOINT_INTERVAL);
        ServeConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 4566)),
            users: Vec::new(),
            data_dir: data_dir.into(),
            env,
            max_subscriber_lag: 1_000_000,
            retained_changes: view::DEFAULT_RETAINED_CHANGES,
            shared_sources: true,
            web: None,
            functions: Vec::new(),
            tls: None,
            tls_client_ca: None,
        }
    }
}

/// A running server: its listener, sessions and views.
pub struct Server {
    engine: Arc<Engine>,
    local_addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    accept: Option<tokio::task::JoinHandle<()>>,
}

impl Server {
    /// Opens the data directory (replaying its catalog and starting its views from their
    /// latest checkpoints) and listens for clients.
    pub fn start(config: ServeConfig) -> riffle::Result<Server> {
        if config.tls_client_ca.is_some() && config.tls.is_none() {
            return Err(riffle::Error::config(
                "--tls-client-ca",
                "client certificates need the server's own: give --tls-cert and --tls-key",
            ));
        }
        if !config.listen.ip().is_loopback()
            && config.users.is_empty()
            && config.tls_client_ca.is_none()
        {
            return Err(riffle::Error::config(
                "--listen",
                format!(
                    "{} is not a loopback address: without --users-file or --tls-client-ca anyone could connect; give users and passwords or a CA of client certificates, or listen on 127.0.0.1",
                    config.listen
                ),
            ));
        }
        if let Some((name, _)) = config
            .users
            .iter()
            .find(|(n, p)| n.is_empty() || p.is_empty())
        {
            return Err(riffle::Error::config(
                "--users-file",
                format!("user `{name}`: a user needs a name and a password"),
            ));
        }
        if config.max_subscriber_lag == 0 {
            return Err(riffle::Error::config(
                "--max-subscriber-lag",
                "must be at least 1",
            ));
        }
        let client_ca = config.tls_client_ca.as_deref();
        let tls = (config.tls.as_ref())
            .map(|files| files.acceptor(client_ca))
            .transpose()?;
        let mut catalog = Catalog::default();
        for (name, function) in &config.functions {
            catalog.functions.register(name, function.clone());
        }
        let engine = Arc::new(Engine::open(
            EngineConfig {
                data_dir: config.data_dir.clone(),
                env: config.env.clone(),
                max_subscriber_lag: config.max_subscriber_lag,
                retained_changes: config.retained_changes,
                shared_sources: config.shared_sources,
                web: config.web.clone(),
            },
            catalog,
        )?);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("riffle-serve")
            .enable_all()
            .build()
            .map_err(|e| riffle::Error::io("cannot start the server's runtime", e))?;
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(config.listen))
            .map_err(|e| {
                riffle::Error::config(
                    "--listen",
                    format!("cannot listen on {}: {e}", config.listen),
                )
            })?;
        let local_addr = listener
            .local_addr()
            .map_err(|e| riffle::Error::io("the listener has no address", e))?;
        if !config.users.is_empty() {
            engine.set_roles(config.users.iter().map(|(user, _)| user.clone()).collect());
        }
        let users = (!config.users.is_empty()).then(|| wire::Users::new(&config.users));
        let mut handlers = wire::Handlers::new(engine.clone(), users)
            .tls_only(tls.is_some())
            .client_certificates(client_ca.is_some());
        if let Some(files) = &config.tls {
            // SCRAM-SHA-256-PLUS: the password exchange bound to this certificate.
            let pem = std::fs::read(&files.cert).map_err(|e| {
                riffle::Error::config("--tls-cert", format!("`{}`: {e}", files.cert.display()))
            })?;
            handlers = handlers.channel_binding(pem).map_err(|e| {
                riffle::Error::config("--tls-cert", format!("`{}`: {e}", files.cert.display()))
            })?;
        }
        let handlers = Arc::new(handlers);
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let accept = runtime.spawn(async move {
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    accepted = listener.accept() => match accepted {
                        Ok((socket, _)) => {
                            let handlers = Arc::new(handlers.for_connection());
                            let tls = tls.clone();
                            tokio::spawn(async move {
                                if let Err(e) = pgwire::tokio::process_socket(socket, tls, handlers).await {
                                    tracing::debug!(error = %e, "a client's connection ended with an error");
                                }
                            });
                        }
                        Err(e) => tracing::warn!(error = %e, "cannot accept a client"),
                    },
                }
            }
        });
        tracing::info!(%local_addr, tls = config.tls.is_some(), "riffle serve: listening (Postgres wire protocol)");
        Ok(Server {
            engine,
            local_addr,
            runtime: Some(runtime),
            stop: Some(stop),
            accept: Some(accept),
        })
    }

    /// Where clients connect.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The catalog and views.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Serves until the process ends.
    pub fn wait(mut self) {
        if let (Some(runtime), Some(accept)) = (self.runtime.as_ref(), self.accept.take()) {
            let _ = runtime.block_on(accept);
        }
    }

    /// Stops listening, ends the sessions and stops the views' jobs (their state stays in
    /// their checkpoints).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(std::time::Duration::from_secs(1));
        }
        self.engine.shutdown();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}
