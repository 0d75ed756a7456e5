//! Operations for a running Riffle job: a REST API (axum), a Prometheus endpoint and a web UI,
//! served by the job's own process, plus the registry of the jobs running on this machine that
//! the `riffle jobs | savepoint | stop | cancel` commands use.
//!
//! What an operator sees: per operator and subtask records in/out and rates, busy /
//! back-pressured / idle time and a back-pressure level (OK / LOW / HIGH), watermarks and their
//! lag behind the wall clock (behind the newest record when event time is synthetic, see
//! [`views::EventTime`]), late and bad records, state size, Kafka consumer lag, checkpoint
//! history, and the likely bottleneck with a hint. What an operator does: take a savepoint, stop
//! with a savepoint, cancel.
//!
//! The server listens on loopback (127.0.0.1:8081, or the next free port up to 8099 when that one
//! is taken, then any) unless told otherwise; binding any other address requires a token, which control
//! requests must then carry (`Authorization: Bearer <token>`). Control requests must also name
//! the server in `Host` (and `Origin`, when sent) and be JSON with the `X-Riffle-Request` header,
//! so that no web page can send them; savepoint targets must lie under the configured roots.
//! The security model is described in `docs/operations.md`.
//!
//! ```
//! use riffle::{StreamEnv, sink::CollectSink};
//! use riffle_web::{WebConfig, WebServer};
//!
//! let env = StreamEnv::new();
//! let (sink, _) = CollectSink::new();
//! env.from_iter((0..100u64).collect::<Vec<_>>()).sink(sink);
//! let job = env.execute_async().unwrap();
//! let web = WebServer::start(job.monitor(), WebConfig::any_port()).unwrap();
//! println!("UI at {}", web.url());
//! job.wait().unwrap();
//! ```

pub mod client;
pub mod prometheus;
pub mod registry;
pub mod security;
pub mod views;

mod api;
mod history;
mod targets;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::thread::JoinHandle;
use std::time::Duration;

use riffle::runtime::JobMonitor;
use riffle::{Error, Result};

/// The default address of a job's API and UI.
pub const DEFAULT_ADDRESS: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8081);

/// How a job serves its API.
#[derive(Clone, Debug)]
pub struct WebConfig {
    /// Where to listen (default 127.0.0.1:8081; with the default, a taken port moves on to the
    /// next free one up to 8099, then to any free port). Port 0 picks any free port.
    pub address: SocketAddr,
    /// Required of control requests (savepoint, stop, cancel) when set; must be set to listen
    /// on anything but loopback.
    pub token: Option<String>,
    /// Where savepoints go when a request names no directory (absolute path or
    /// `s3://bucket/prefix`); a request may name a directory under it.
    pub savepoint_dir: Option<String>,
    /// Further locations (absolute directories or `s3://bucket/prefix`) under which a request
    /// may put a savepoint; any other target is refused with 403.
    pub savepoint_roots: Vec<String>,
    /// Further names (`host` with the server's port, or `host:port`) under which control
    /// requests may reach the server, e.g. behind a reverse proxy; loopback names, the bound
    /// address (any IP address when bound to all) are always accepted.
    pub allowed_hosts: Vec<String>,
    /// Write the job into the registry of this machine's jobs (default true).
    pub register: bool,
    /// The registry directory to write into; default: `$RIFFLE_JOBS_DIR`, else the user's
    /// private one (see [`registry`]).
    pub registry_dir: Option<std::path::PathBuf>,
    /// How often the figures are sampled for rates and charts (default 1 s).
    pub sample_interval: Duration,
    /// The process group the job runs in, if any: served at `/api/v1/group` and shown by the
    /// UI and `riffle jobs` (`riffle_kafka::KafkaGroup::status`).
    pub group: Option<GroupStatus>,
}

/// Where `/api/v1/group` gets its answer: the status of the process group the job runs in, as
/// JSON (called on a blocking thread; it may ask the brokers).
///
/// ```
/// let status = riffle_web::GroupStatus::new(|| Ok(serde_json::json!({ "group": "clicks-job" })));
/// let config = riffle_web::WebConfig { group: Some(status), ..riffle_web::WebConfig::default() };
/// assert!(config.group.is_some());
/// ```
#[derive(Clone)]
pub struct GroupStatus(std::sync::Arc<GroupStatusFn>);

type GroupStatusFn = dyn Fn() -> std::result::Result<serde_json::Value, String> + Send + Sync;

impl GroupStatus {
    /// The status from `status`.
    pub fn new(
        status: impl Fn() -> std::result::Result<serde_json::Value, String> + Send + Sync + 'static,
    ) -> Self {
        GroupStatus(std::sync::Arc::new(status))
    }

    pub(crate) fn get(&self) -> std::result::Result<serde_json::Value, String> {
        (self.0)()
    }
}

impl std::fmt::Debug for GroupStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GroupStatus(..)")
    }
}

impl Default for WebConfig {
    fn default() -> Self {
        WebConfig {
            address: DEFAULT_ADDRESS,
            token: None,
            savepoint_dir: None,
            savepoint_roots: Vec::new(),
            allowed_hosts: Vec::new(),
            register: true,
            registry_dir: None,
            sample_interval: Duration::from_secs(1),
            group: None,
        }
    }
}

impl WebConfig {
    /// Loopback, any free port, registered: for tests and for jobs that print their address.
    pub fn any_port() -> Self {
        WebConfig {
            address: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            ..WebConfig::default()
        }
    }

    /// Checks the settings; the error names the one that is wrong.
    pub fn validate(&self) -> Result<()> {
        if let Some(token) = &self.token
            && token.trim().is_empty()
        {
            return Err(Error::config("web.token", "must not be empty"));
        }
        if !self.address.ip().is_loopback() && self.token.is_none() {
            return Err(Error::config(
                "web.token",
                format!(
                    "listening on {} (not loopback) needs a token for the control endpoints",
                    self.address
                ),
            ));
        }
        for root in self.savepoint_dir.iter().chain(&self.savepoint_roots) {
            let local = root.strip_prefix("file://").unwrap_or(root);
            let fine = if let Some(rest) = root.strip_prefix("s3://") {
                !rest.trim_end_matches('/').is_empty()
                    && !rest.split('/').any(|p| p == ".." || p == ".")
            } else {
                std::path::Path::new(local).is_absolute()
                    && !std::path::Path::new(local)
                        .components()
                        .any(|c| c == std::path::Component::ParentDir)
            };
            if !fine {
                return Err(Error::config(
                    "web.savepoint_roots",
                    format!(
                        "`{root}` is not an absolute directory (without `..`) nor s3://bucket/prefix"
                    ),
                ));
            }
        }
        if let Some(host) = self
            .allowed_hosts
            .iter()
            .find(|h| h.trim().is_empty() || h.contains(['/', '@', ' ']))
        {
            return Err(Error::config(
                "web.allowed_hosts",
                format!("`{host}` is not a host name (host or host:port)"),
            ));
        }
        if self.sample_interval.is_zero() {
            return Err(Error::config("web.sample_interval", "must be positive"));
        }
        Ok(())
    }

    fn bind(&self) -> Result<TcpListener> {
        let taken = |e: std::io::Error| {
            Error::config(
                "web.address",
                format!("cannot listen on {}: {e}", self.address),
            )
        };
        match TcpListener::bind(self.address) {
            Ok(listener) => Ok(listener),
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse && self.address == DEFAULT_ADDRESS =>
            {
                // Several jobs on one machine: the next free port, else any (`riffle jobs`
                // finds them all through the registry).
                (DEFAULT_ADDRESS.port() + 1..=8099)
                    .chain([0])
                    .find_map(|port| {
                        TcpListener::bind(SocketAddr::new(self.address.ip(), port)).ok()
                    })
                    .ok_or_else(|| taken(e))
            }
            Err(e) => Err(taken(e)),
        }
    }
}

/// A job's web server; stops (and leaves the registry) when dropped.
pub struct WebServer {
    address: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    _registration: Option<registry::Registration>,
}

impl WebServer {
    /// Starts serving `job`'s API, UI and metrics. Fails, naming the setting, on a bad
    /// configuration or an address that cannot be bound.
    pub fn start(job: JobMonitor, config: WebConfig) -> Result<WebServer> {
        config.validate()?;
        let listener = config.bind()?;
        let address = listener
            .local_addr()
            .map_err(|e| Error::io("cannot read the listening address", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::io("cannot configure the listening socket", e))?;
        let overview = job.overview();
        let key = security::random_hex(32);
        let registration = if config.register {
            let entry = registry::JobEntry {
                id: overview.id.clone(),
                name: overview.name.clone(),
                address: address.to_string(),
                pid: std::process::id(),
                started_at: overview.started_at,
                key: key.clone(),
            };
            let registered = match &config.registry_dir {
                Some(dir) => registry::Registry::at(dir).register(&entry),
                None => registry::register(&entry),
            };
            match registered {
                Ok(registration) => Some(registration),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot register the job: `riffle jobs` will not list it");
                    None
                }
            }
        } else {
            None
        };
        let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
        let key = security::unhex(&key).expect("hex of our own");
        let state = api::AppState::new(job, &config, address, key);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::io("cannot start the web server's runtime", e))?;
        let thread = std::thread::Builder::new()
            .name("riffle-web".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => listener,
                        Err(e) => {
                            tracing::error!(error = %e, "the web server cannot listen");
                            return;
                        }
                    };
                    let sampler = tokio::spawn(history::sample(state.clone()));
                    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
                    let mut grace = stop_rx.clone();
                    tokio::spawn(async move {
                        let _ = stopped.await;
                        let _ = stop_tx.send(true);
                    });
                    // Answers in flight are finished (a stop with savepoint replies once the job
                    // has its savepoint), for at most a few seconds.
                    let serve = axum::serve(listener, api::router(state)).with_graceful_shutdown(
                        async move {
                            let _ = stop_rx.wait_for(|stop| *stop).await;
                        },
                    );
                    tokio::select! {
                        served = serve => {
                            if let Err(e) = served {
                                tracing::error!(error = %e, "the web server stopped");
                            }
                        }
                        _ = async {
                            let _ = grace.wait_for(|stop| *stop).await;
                            tokio::time::sleep(Duration::from_secs(3)).await;
                        } => {}
                    }
                    sampler.abort();
                });
            })
            .map_err(|e| Error::io("cannot start the web server thread", e))?;
        tracing::info!(%address, "job UI and REST API at http://{address}/");
        Ok(WebServer {
            address,
            shutdown: Some(shutdown),
            thread: Some(thread),
            _registration: registration,
        })
    }

    /// The address it listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The UI's URL.
    pub fn url(&self) -> String {
        format!("http://{}/", self.address)
    }
}

impl Drop for WebServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
