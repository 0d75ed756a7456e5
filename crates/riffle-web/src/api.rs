//! The HTTP routes: the JSON API under `/api/v1`, `/metrics`, and the UI's static files.
//!
//! Every error is JSON, `{"error": "..."}`, with a 4xx status for what the request got wrong
//! (unknown path or operator, malformed body or parameter, bad savepoint directory, missing
//! token, a request a browser could have sent cross-site) and 409 when the job can no longer do
//! what was asked (it has ended).
//!
//! Control requests (every POST) pass, in order: the `Host` and `Origin` checks and the
//! non-simple request shape (JSON body, `X-Riffle-Request` header or a bearer token) of
//! [`guard`], then the token check of [`require_token`]. Savepoint targets are checked by
//! [`crate::targets`].

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use riffle::runtime::JobMonitor;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::WebConfig;
use crate::history::{Current, History, wall_clock};
use crate::security::{AllowedHosts, REQUEST_HEADER, tokens_equal};
use crate::targets::{Refusal, SavepointRoots};
use crate::views::{Bottleneck, EventTime, Latency, OperatorView};

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    job: JobMonitor,
    token: Option<String>,
    savepoint_dir: Option<String>,
    roots: SavepointRoots,
    hosts: AllowedHosts,
    /// Where the server listens, as the registry entry records it.
    address: String,
    /// The secret of the registry entry (see [`crate::security::identity_proof`]).
    key: Vec<u8>,
    sample_interval: Duration,
    history: Mutex<History>,
    group: Option<crate::GroupStatus>,
}

impl AppState {
    pub(crate) fn new(
        job: JobMonitor,
        config: &WebConfig,
        address: SocketAddr,
        key: Vec<u8>,
    ) -> Self {
        AppState {
            inner: Arc::new(Inner {
                job,
                token: config.token.clone(),
                savepoint_dir: config.savepoint_dir.clone(),
                roots: SavepointRoots::new(
                    config.savepoint_dir.as_deref(),
                    &config.savepoint_roots,
                ),
                hosts: AllowedHosts::new(address, &config.allowed_hosts),
                address: address.to_string(),
                key,
                sample_interval: config.sample_interval,
                history: Mutex::new(History::default()),
                group: config.group.clone(),
            }),
        }
    }

    pub(crate) fn job(&self) -> &JobMonitor {
        &self.inner.job
    }

    pub(crate) fn history(&self) -> MutexGuard<'_, History> {
        self.inner.history.lock().expect("history lock")
    }

    pub(crate) fn sample_interval(&self) -> Duration {
        self.inner.sample_interval
    }

    /// The figures now, with rates over the last seconds.
    fn current(&self) -> Current {
        let job = self.job();
        let now = job.metrics();
        let history = self.history();
        let base = history
            .rate_base(&now)
            .cloned()
            .unwrap_or_else(|| now.clone());
        drop(history);
        Current::new(job.plan(), now, &base, wall_clock())
    }
}

/// An error answer.
pub(crate) struct ApiError(StatusCode, String);

impl ApiError {
    fn bad_request(message: impl Into<String>) -> Self {
        ApiError(StatusCode::BAD_REQUEST, message.into())
    }

    fn forbidden(message: impl Into<String>) -> Self {
        ApiError(StatusCode::FORBIDDEN, message.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, axum::Json(json!({ "error": self.1 }))).into_response()
    }
}

type ApiResult = Result<Response, ApiError>;

fn ok<T: Serialize>(value: T) -> ApiResult {
    Ok(axum::Json(value).into_response())
}

/// The routes of one job's server.
pub(crate) fn router(state: AppState) -> Router {
    let control = Router::new()
        .route("/api/v1/job/savepoints", post(savepoint))
        .route("/api/v1/job/stop", post(stop))
        .route("/api/v1/job/cancel", post(cancel))
        .route_layer(middleware::from_fn(no_parameters))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token))
        .route_layer(middleware::from_fn_with_state(state.clone(), guard));
    let plain = Router::new()
        .route("/api/v1/openapi.json", get(openapi))
        .route("/api/v1/job", get(job))
        .route("/api/v1/job/graph", get(graph))
        .route("/api/v1/job/operators", get(operators))
        .route("/api/v1/job/operators/{name}", get(operator))
        .route("/api/v1/job/bottleneck", get(bottleneck))
        .route("/api/v1/job/checkpoints", get(checkpoints))
        .route("/api/v1/group", get(group))
        .route_layer(middleware::from_fn(no_parameters));
    Router::new()
        .route("/", get(|| async { ui("index.html") }))
        .route(
            "/ui/{file}",
            get(|Path(file): Path<String>| async move { ui(&file) }),
        )
        .route("/metrics", get(metrics))
        .route("/api/v1/job/history", get(history))
        .route("/api/v1/job/identity", get(identity))
        .merge(plain)
        .merge(control)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError(
        StatusCode::NOT_FOUND,
        format!("no such endpoint: {method} {uri} (see /api/v1/openapi.json)"),
    )
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{method} is not allowed on {}", uri.path()),
    )
}

/// Endpoints without parameters refuse a query string rather than ignore it.
async fn no_parameters(uri: Uri, request: Request, next: Next) -> Response {
    if let Some(query) = uri.query() {
        return ApiError::bad_request(format!(
            "{} takes no query parameters (got `{query}`)",
            uri.path()
        ))
        .into_response();
    }
    next.run(request).await
}

/// What a control request must look like, checked before its token: it names this server in
/// `Host` (a DNS-rebinding page sends its own name) and, when the browser says where it comes
/// from, in `Origin`; and it is not a request a browser sends cross-site without a CORS
/// preflight (which is never granted): JSON (`Content-Type: application/json`) with the
/// `X-Riffle-Request` header or an `Authorization` header.
async fn guard(
    State(state): State<AppState>,
    headers: HeaderMap,
    request: Request,
    next: Next,
) -> Response {
    match check_request(&state.inner.hosts, &headers) {
        Ok(()) => next.run(request).await,
        Err(e) => e.into_response(),
    }
}

fn check_request(hosts: &AllowedHosts, headers: &HeaderMap) -> Result<(), ApiError> {
    let text = |name: header::HeaderName| {
        headers
            .get(&name)
            .map(|v| {
                v.to_str()
                    .map_err(|_| ApiError::bad_request(format!("header {name} is not text")))
            })
            .transpose()
    };
    let host = text(header::HOST)?.unwrap_or_default();
    if !hosts.allows(host, 80) {
        return Err(ApiError::forbidden(format!(
            "Host `{host}` is not an address this job listens on: control requests are refused \
             (DNS rebinding?). Use the address the job prints, or add the name to the server's \
             allowed hosts (--web-allowed-host)"
        )));
    }
    if let Some(origin) = text(header::ORIGIN)?
        && !hosts.allows_origin(origin)
    {
        return Err(ApiError::forbidden(format!(
            "cross-site control request from origin `{origin}` refused"
        )));
    }
    let json = text(header::CONTENT_TYPE)?.is_some_and(|v| {
        v.split(';')
            .next()
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
    });
    if !json {
        return Err(ApiError(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "control requests must be JSON: `Content-Type: application/json`".into(),
        ));
    }
    if !headers.contains_key(REQUEST_HEADER) && !headers.contains_key(header::AUTHORIZATION) {
        return Err(ApiError::forbidden(
            "control requests must carry the header `X-Riffle-Request: 1` (or the job's token): \
             a browser cannot send it from another site",
        ));
    }
    Ok(())
}

/// Whether the request's `Authorization: Bearer` is `token`, compared in constant time.
fn token_accepted(headers: &HeaderMap, token: &str) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|given| tokens_equal(given.as_bytes(), token.as_bytes()))
}

/// Control requests carry the configured token, if there is one.
async fn require_token(
    State(state): State<AppState>,
    headers: HeaderMap,
    request: Request,
    next: Next,
) -> Response {
    if let Some(token) = &state.inner.token
        && !token_accepted(&headers, token)
    {
        return ApiError(
            StatusCode::UNAUTHORIZED,
            "this job's control endpoints need its token: `Authorization: Bearer <token>` \
             (riffle --token-file, RIFFLE_WEB_TOKEN or --token)"
                .into(),
        )
        .into_response();
    }
    next.run(request).await
}

/// The job at a glance.
#[derive(Serialize)]
struct JobSummary {
    #[serde(flatten)]
    overview: riffle::runtime::JobOverview,
    /// Records the sources emitted.
    source_records: u64,
    /// Records the sinks received.
    sink_records: u64,
    source_records_per_sec: f64,
    sink_records_per_sec: f64,
    /// End-to-end latency (source to sinks) over the last minute, from latency markers.
    latency: Option<Latency>,
    /// Late records (dropped or sent to a side output).
    late_records: u64,
    bad_records: u64,
    /// The largest watermark lag behind the wall clock of any operator.
    watermark_lag_ms: Option<i64>,
    /// The largest watermark lag behind the newest record read upstream, of any operator.
    watermark_lag_behind_newest_ms: Option<i64>,
    /// `wall_clock` or `synthetic` (any source reads event times far from the wall clock):
    /// which lag means something.
    event_time: Option<EventTime>,
    checkpoints_completed: usize,
    checkpoints_failed: usize,
    bottleneck: Option<Bottleneck>,
}

async fn job(State(state): State<AppState>) -> ApiResult {
    let current = state.current();
    let job = state.job();
    let plan = job.plan();
    let point = current.point(plan, wall_clock());
    let checkpoints = job.checkpoints();
    let completed = checkpoints.iter().filter(|c| c.completed()).count();
    ok(JobSummary {
        overview: job.overview(),
        source_records: current.sources(plan).map(|o| o.total.records_out).sum(),
        sink_records: current.sinks(plan).map(|o| o.total.records_in).sum(),
        source_records_per_sec: point.source_records_per_sec,
        sink_records_per_sec: point.sink_records_per_sec,
        latency: current.latency(plan),
        late_records: point.late_records,
        bad_records: point.bad_records,
        watermark_lag_ms: point.watermark_lag_ms,
        watermark_lag_behind_newest_ms: point.watermark_lag_behind_newest_ms,
        event_time: point.event_time,
        checkpoints_completed: completed,
        checkpoints_failed: checkpoints.len() - completed,
        bottleneck: current.bottleneck,
    })
}

async fn graph(State(state): State<AppState>) -> ApiResult {
    ok(state.current().graph)
}

async fn operators(State(state): State<AppState>) -> ApiResult {
    ok(state.current().operators)
}

async fn operator(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult {
    let operators: Vec<OperatorView> = state.current().operators;
    match operators.into_iter().find(|o| o.name == name) {
        Some(op) => ok(op),
        None => Err(ApiError(
            StatusCode::NOT_FOUND,
            format!("no operator `{name}` in this job (GET /api/v1/job/operators lists them)"),
        )),
    }
}

async fn bottleneck(State(state): State<AppState>) -> ApiResult {
    ok(state.current().bottleneck)
}

/// The process group the job runs in: its members, the partitions each owns, their lag.
async fn group(State(state): State<AppState>) -> ApiResult {
    let Some(status) = state.inner.group.clone() else {
        return Err(ApiError(
            StatusCode::NOT_FOUND,
            "this job runs in one process, not in a process group".into(),
        ));
    };
    match tokio::task::spawn_blocking(move || status.get()).await {
        Ok(Ok(value)) => ok(value),
        Ok(Err(e)) => Err(ApiError(StatusCode::SERVICE_UNAVAILABLE, e)),
        Err(e) => Err(ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
    }
}

async fn checkpoints(State(state): State<AppState>) -> ApiResult {
    let history = state.job().checkpoints();
    let completed = history.iter().filter(|c| c.completed()).count();
    ok(json!({
        "completed": completed,
        "failed": history.len() - completed,
        "latest_completed": history.iter().rev().find(|c| c.completed()),
        "history": history,
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryQuery {
    /// Only the last this many seconds (default: all kept, 300).
    seconds: Option<u64>,
}

/// The largest `seconds` of a history request: a day.
const MAX_HISTORY_SECONDS: u64 = 86_400;

async fn history(
    State(state): State<AppState>,
    query: Result<Query<HistoryQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    if let Some(seconds) = query.seconds
        && !(1..=MAX_HISTORY_SECONDS).contains(&seconds)
    {
        return Err(ApiError::bad_request(format!(
            "seconds={seconds} is out of range: from 1 to {MAX_HISTORY_SECONDS}"
        )));
    }
    let since = query
        .seconds
        .map_or(i64::MIN, |s| wall_clock() - s as i64 * 1000);
    let history = state.history();
    let points: Vec<_> = history.points.iter().filter(|p| p.t >= since).collect();
    let vertices: Vec<&str> = state
        .job()
        .plan()
        .vertices
        .iter()
        .map(|v| v.name.as_str())
        .collect();
    ok(json!({
        "interval_ms": state.sample_interval().as_millis() as u64,
        "vertices": vertices,
        "points": points,
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IdentityQuery {
    /// A fresh random challenge of the client, hex.
    challenge: String,
}

/// `GET /api/v1/job/identity?challenge=HEX`: the job's id and the proof that this server holds
/// the key of the job's registry entry (the CLI checks it before it sends a token).
async fn identity(
    State(state): State<AppState>,
    query: Result<Query<IdentityQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let challenge = query.challenge;
    if !(32..=128).contains(&challenge.len()) || crate::security::unhex(&challenge).is_none() {
        return Err(ApiError::bad_request(
            "challenge must be 32 to 128 hex digits",
        ));
    }
    let id = state.job().overview().id;
    let proof =
        crate::security::identity_proof(&state.inner.key, &id, &state.inner.address, &challenge);
    ok(json!({ "id": id, "proof": proof }))
}

/// `/metrics`: OpenMetrics when the scraper accepts it (Prometheus does), else the classic text
/// format.
async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let current = state.current();
    let job = state.job();
    let text = crate::prometheus::render(&crate::prometheus::Exposition {
        overview: &job.overview(),
        operators: &current.operators,
        tasks: &current.metrics.tasks,
        checkpoints: &job.checkpoints(),
        bottleneck: current.bottleneck.as_ref(),
        latency: current.latency(job.plan()).as_ref(),
    });
    let openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("application/openmetrics-text"));
    if !openmetrics {
        return (
            [(
                header::CONTENT_TYPE,
                crate::prometheus::CLASSIC_CONTENT_TYPE,
            )],
            crate::prometheus::to_classic(&text),
        )
            .into_response();
    }
    (
        [(header::CONTENT_TYPE, crate::prometheus::CONTENT_TYPE)],
        text,
    )
        .into_response()
}

async fn openapi() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        include_str!("../openapi.json"),
    )
        .into_response()
}

/// The UI's files, compiled into the binary.
fn ui(file: &str) -> Response {
    let (content_type, body) = match file {
        "index.html" => ("text/html; charset=utf-8", include_str!("../ui/index.html")),
        "app.js" => (
            "text/javascript; charset=utf-8",
            include_str!("../ui/app.js"),
        ),
        "style.css" => ("text/css; charset=utf-8", include_str!("../ui/style.css")),
        _ => {
            return ApiError(StatusCode::NOT_FOUND, format!("no UI file `{file}`")).into_response();
        }
    };
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// A JSON body, or the default when the body is empty; 400 with serde's message otherwise.
fn body<T: for<'de> Deserialize<'de> + Default>(bytes: &Bytes) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("malformed JSON body: {e}")))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SavepointRequest {
    /// The directory the savepoint goes under (absolute path or `s3://bucket/prefix`).
    target_directory: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct StopRequest {
    /// Take a savepoint first, and stop right after it.
    #[serde(default)]
    savepoint: bool,
    /// Where it goes (see [`SavepointRequest`]).
    target_directory: Option<String>,
}

/// A new savepoint location under `target` (or the configured default directory): a target
/// named by the request must lie under the job's savepoint directory or an allowed root (403
/// otherwise, see [`crate::targets`]); `savepoint-<job id>-<epoch ms>` is appended, as Flink
/// names them.
fn savepoint_location(state: &AppState, target: Option<String>) -> Result<String, ApiError> {
    let directory = match target {
        Some(target) => {
            if target.len() > 4096 {
                return Err(ApiError::bad_request(
                    "target_directory is longer than 4096 bytes",
                ));
            }
            state
                .inner
                .roots
                .check(&target)
                .map_err(|refusal| match refusal {
                    Refusal::Forbidden(message) => ApiError::forbidden(message),
                    Refusal::Invalid(message) => ApiError::bad_request(message),
                })?
        }
        None => state
            .inner
            .savepoint_dir
            .clone()
            .ok_or_else(|| {
                ApiError::bad_request(
                    "no target_directory given and the job has no default savepoint directory",
                )
            })?
            .trim_end_matches('/')
            .to_string(),
    };
    let name = format!("savepoint-{}-{}", state.job().overview().id, wall_clock());
    Ok(format!("{directory}/{name}"))
}

/// Runs a blocking call of the job (a savepoint waits for its completion) off the server thread.
async fn blocking<T: Send + 'static>(
    call: impl FnOnce() -> riffle::Result<T> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(call)
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| match e {
            riffle::Error::Config { .. } => ApiError::bad_request(e.to_string()),
            _ => ApiError(StatusCode::CONFLICT, e.to_string()),
        })
}

fn ensure_running(state: &AppState) -> Result<(), ApiError> {
    if state.job().is_ended() {
        return Err(ApiError(
            StatusCode::CONFLICT,
            format!("the job has ended ({:?})", state.job().overview().status),
        ));
    }
    Ok(())
}

async fn savepoint(State(state): State<AppState>, bytes: Bytes) -> ApiResult {
    let request: SavepointRequest = body(&bytes)?;
    ensure_running(&state)?;
    let location = savepoint_location(&state, request.target_directory)?;
    let job = state.job().clone();
    let location = blocking(move || job.savepoint(&location)).await?;
    ok(json!({ "location": location }))
}

async fn stop(State(state): State<AppState>, bytes: Bytes) -> ApiResult {
    let request: StopRequest = body(&bytes)?;
    if request.target_directory.is_some() && !request.savepoint {
        return Err(ApiError::bad_request(
            "target_directory is for a stop with savepoint: add \"savepoint\": true",
        ));
    }
    ensure_running(&state)?;
    if !request.savepoint {
        state.job().stop();
        return Ok((
            StatusCode::ACCEPTED,
            axum::Json(json!({ "status": "stopping", "savepoint": Value::Null })),
        )
            .into_response());
    }
    let location = savepoint_location(&state, request.target_directory)?;
    let job = state.job().clone();
    let location = blocking(move || job.stop_with_savepoint(&location)).await?;
    ok(json!({ "status": "stopping", "savepoint": location }))
}

async fn cancel(State(state): State<AppState>) -> ApiResult {
    ensure_running(&state)?;
    state.job().cancel();
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(json!({ "status": "cancelling" })),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn the_token_is_checked_by_the_constant_time_comparison() {
        use crate::security::COMPARISONS;
        let before = COMPARISONS.with(|c| c.get());
        assert!(token_accepted(
            &headers(&[("authorization", "Bearer s3cret")]),
            "s3cret"
        ));
        assert!(!token_accepted(
            &headers(&[("authorization", "Bearer s3creT")]),
            "s3cret"
        ));
        assert!(!token_accepted(
            &headers(&[("authorization", "Bearer s3cret-and-more")]),
            "s3cret"
        ));
        assert_eq!(COMPARISONS.with(|c| c.get()) - before, 3);
        // No bearer token: nothing to compare.
        assert!(!token_accepted(&headers(&[]), "s3cret"));
        assert!(!token_accepted(
            &headers(&[("authorization", "Basic czNjcmV0")]),
            "s3cret"
        ));
        assert_eq!(COMPARISONS.with(|c| c.get()) - before, 3);
    }

    #[test]
    fn control_requests_must_be_non_simple_and_name_this_server() {
        let hosts = AllowedHosts::new("127.0.0.1:8081".parse().unwrap(), &[]);
        let good = [
            ("host", "127.0.0.1:8081"),
            ("content-type", "application/json"),
            ("x-riffle-request", "1"),
        ];
        assert!(check_request(&hosts, &headers(&good)).is_ok());
        let with = |extra: &[(&'static str, &str)]| {
            let mut all: Vec<(&'static str, &str)> = good.to_vec();
            for (name, value) in extra {
                all.retain(|(n, _)| n != name);
                all.push((name, value));
            }
            check_request(&hosts, &headers(&all))
        };
        let refused = |result: Result<(), ApiError>| match result {
            Err(ApiError(code, message)) => (code.as_u16(), message),
            Ok(()) => panic!("accepted"),
        };
        assert!(with(&[("origin", "http://127.0.0.1:8081")]).is_ok());
        assert!(with(&[("content-type", "Application/JSON; charset=utf-8")]).is_ok());
        let (code, message) = refused(with(&[("origin", "http://evil.example")]));
        assert_eq!(
            (code, message.as_str()),
            (
                403,
                "cross-site control request from origin `http://evil.example` refused"
            )
        );
        let (code, message) = refused(with(&[("host", "evil.example:8081")]));
        assert_eq!(code, 403);
        assert!(
            message.starts_with("Host `evil.example:8081` is not an address this job listens on")
        );
        let (code, message) = refused(with(&[("content-type", "text/plain")]));
        assert_eq!(
            (code, message.as_str()),
            (
                415,
                "control requests must be JSON: `Content-Type: application/json`"
            )
        );
        let without_header: Vec<_> = good[..2].to_vec();
        let (code, message) = refused(check_request(&hosts, &headers(&without_header)));
        assert_eq!(code, 403);
        assert!(message.contains("X-Riffle-Request"), "{message}");
        let mut with_token = without_header.clone();
        with_token.push(("authorization", "Bearer x"));
        assert!(check_request(&hosts, &headers(&with_token)).is_ok());
        assert_eq!(
            refused(check_request(&hosts, &headers(&good[1..]))).0,
            403,
            "no Host"
        );
    }
}
