//! A client of a schema registry's REST API, as Confluent Schema Registry defines it (and
//! Apicurio Registry's `ccompat` API, Redpanda's and Karapace's implement it): schemas by id,
//! registered under subjects.
//!
//! Schemas fetched by id never change (an id names one schema for ever), so they are cached for
//! the life of the client and shared by its clones. An unreachable registry (a refused
//! connection, a timeout, a 5xx answer) is a transient error, told apart from the registry's
//! definite answers (an unknown id, an incompatible schema), which callers treat differently: a
//! decoder waits out the first and turns the second into a bad record.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use apache_avro::Schema;
use reqwest::StatusCode;
use reqwest::blocking::{Client, RequestBuilder};
use serde::Deserialize;

use crate::{FormatError, intern};

/// The media type of the registry's API requests.
const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// A schema registry, by the base URL of its Confluent-compatible API (for Apicurio Registry
/// `http://host:port/apis/ccompat/v7`).
///
/// ```no_run
/// use riffle_formats::SchemaRegistry;
/// let registry = SchemaRegistry::new("http://127.0.0.1:8081")?
///     .basic_auth("riffle", "secret");
/// # Ok::<(), riffle_formats::FormatError>(())
/// ```
#[derive(Clone)]
pub struct SchemaRegistry {
    inner: Arc<Inner>,
}

struct Inner {
    base: String,
    client: Client,
    auth: Option<(String, String)>,
    /// Writer schemas by id.
    schemas: RwLock<HashMap<u32, &'static Schema>>,
    /// Schemas of any kind by id, as the registry holds them.
    texts: RwLock<HashMap<u32, Arc<RegisteredSchema>>>,
    /// How long a registration or lookup keeps retrying an unreachable registry.
    patience: Duration,
}

/// How a failed request ended.
enum Failure {
    /// The registry could not be asked (a refused connection, a timeout, a 5xx or 429 answer):
    /// asking again later may succeed.
    Transient(String),
    /// The registry answered no: (HTTP status, its error code, its message).
    Refused(u16, i64, String),
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default)]
    error_code: i64,
    #[serde(default)]
    message: String,
}

#[derive(Deserialize)]
struct SchemaBody {
    schema: String,
    #[serde(default, rename = "schemaType")]
    schema_type: Option<String>,
    #[serde(default)]
    references: Vec<SchemaReference>,
}

/// The kind of a registered schema (the registry's `schemaType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemaKind {
    /// Avro (the registry's default).
    Avro,
    /// A `.proto` file.
    Protobuf,
    /// JSON Schema.
    Json,
}

impl SchemaKind {
    fn of(name: Option<&str>) -> Result<SchemaKind, String> {
        match name.unwrap_or("AVRO") {
            "AVRO" => Ok(SchemaKind::Avro),
            "PROTOBUF" => Ok(SchemaKind::Protobuf),
            "JSON" => Ok(SchemaKind::Json),
            other => Err(format!("a schema of type {other}")),
        }
    }

    fn name(self) -> &'static str {
        match self {
            SchemaKind::Avro => "AVRO",
            SchemaKind::Protobuf => "PROTOBUF",
            SchemaKind::Json => "JSON",
        }
    }
}

/// A schema another one refers to (a Protobuf `import`, by its file name): a subject's version.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct SchemaReference {
    /// The name the schema refers to it by (for Protobuf, the imported file's name).
    pub name: String,
    /// The subject holding it.
    pub subject: String,
    /// Its version there.
    pub version: i64,
}

/// A schema as the registry holds it: its kind, its text and its references.
#[derive(Clone, Debug)]
pub struct RegisteredSchema {
    /// Avro, Protobuf or JSON Schema.
    pub kind: SchemaKind,
    /// The schema's text (Avro's and JSON Schema's JSON, or a `.proto` file).
    pub text: String,
    /// The schemas it refers to.
    pub references: Vec<SchemaReference>,
}

#[derive(Deserialize)]
struct IdBody {
    id: u32,
}

impl SchemaRegistry {
    /// A client of the registry at `url` (`http://..`); basic-auth credentials may be given in
    /// it (`http://user:password@host:port`). Nothing is asked of the registry until a schema
    /// is needed.
    pub fn new(url: &str) -> Result<Self, FormatError> {
        let parsed = reqwest::Url::parse(url)
            .map_err(|e| FormatError::Config(format!("the schema registry URL `{url}`: {e}")))?;
        if parsed.scheme() != "http" {
            return Err(FormatError::Config(format!(
                "the schema registry URL `{url}`: only http:// is supported (no TLS client is built in)"
            )));
        }
        let auth = match parsed.username() {
            "" => None,
            user => Some((
                user.to_string(),
                parsed.password().unwrap_or("").to_string(),
            )),
        };
        let mut base = parsed.clone();
        let _ = base.set_username("");
        let _ = base.set_password(None);
        let client = Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| FormatError::Config(format!("an HTTP client: {e}")))?;
        Ok(SchemaRegistry {
            inner: Arc::new(Inner {
                base: base.as_str().trim_end_matches('/').to_string(),
                client,
                auth,
                schemas: RwLock::new(HashMap::new()),
                texts: RwLock::new(HashMap::new()),
                patience: Duration::from_secs(30),
            }),
        })
    }

    /// Basic-auth credentials for every request (Confluent's `basic.auth.user.info`).
    pub fn basic_auth(self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.with(|inner| inner.auth = Some((user.into(), password.into())))
    }

    /// How long registering or looking up a schema (when an encoder is built) keeps retrying an
    /// unreachable registry before it fails (30 s by default). Decoding never gives up: a
    /// source waits for the registry (and the job with it) rather than lose records.
    pub fn patience(self, patience: Duration) -> Self {
        self.with(|inner| inner.patience = patience)
    }

    fn with(self, change: impl FnOnce(&mut Inner)) -> Self {
        let mut inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| Inner {
            base: shared.base.clone(),
            client: shared.client.clone(),
            auth: shared.auth.clone(),
            schemas: RwLock::new(shared.schemas.read().expect("not poisoned").clone()),
            texts: RwLock::new(shared.texts.read().expect("not poisoned").clone()),
            patience: shared.patience,
        });
        change(&mut inner);
        SchemaRegistry {
            inner: Arc::new(inner),
        }
    }

    /// The registry's base URL.
    pub fn url(&self) -> &str {
        &self.inner.base
    }

    /// Asks the registry for its subjects: an error, at once, when the URL does not reach a
    /// schema registry's API (a wrong host, port or path, or credentials it refuses). The
    /// SQL connectors check their registry this way when a job is planned.
    pub fn check(&self) -> Result<(), FormatError> {
        let url = format!("{}/subjects", self.inner.base);
        let answer: Result<Vec<String>, Failure> = call(self.request(self.inner.client.get(&url)));
        answer.map(|_| ()).map_err(|failure| {
            let reason = match failure {
                Failure::Transient(reason) => reason,
                Failure::Refused(status, _, message) => format!("HTTP {status}: {message}"),
            };
            FormatError::Config(format!(
                "the schema registry at `{}` does not answer as one ({url}): {reason}",
                self.inner.base
            ))
        })
    }

    /// The Avro schema of `id`, from the cache or the registry. Waits while the registry cannot
    /// be reached or refuses the request (logging each failed attempt); an id the registry
    /// does not know, or a schema that is not Avro, is an error.
    pub fn schema_by_id(&self, id: u32) -> Result<&'static Schema, FormatError> {
        if let Some(schema) = self.inner.schemas.read().expect("not poisoned").get(&id) {
            return Ok(schema);
        }
        let registered = self.registered_by_id(id)?;
        if registered.kind != SchemaKind::Avro {
            return Err(FormatError::Schema(format!(
                "the schema of id {id} is {}, not Avro",
                registered.kind.name()
            )));
        }
        let schema = Schema::parse_str(&registered.text)
            .map_err(|e| FormatError::Schema(format!("the schema of id {id}: {e}")))?;
        let schema = intern(schema);
        self.inner
            .schemas
            .write()
            .expect("not poisoned")
            .insert(id, schema);
        Ok(schema)
    }

    /// The schema of `id` of any kind, as the registry holds it (cached). Waits as
    /// [`schema_by_id`](Self::schema_by_id) does; an unknown id is an error.
    pub fn registered_by_id(&self, id: u32) -> Result<Arc<RegisteredSchema>, FormatError> {
        if let Some(schema) = self.inner.texts.read().expect("not poisoned").get(&id) {
            return Ok(schema.clone());
        }
        // Only the registry's "no such schema" (error code 40403) is final: any other refusal
        // (401, a 404 of a wrong URL path) is the setup's fault, not the record's, and is
        // waited out like an outage, logged, rather than making every record a bad one.
        let url = format!("{}/schemas/ids/{id}", self.inner.base);
        let body: SchemaBody = self
            .call_patiently(
                None,
                || self.request(self.inner.client.get(&url)),
                |failure| matches!(failure, Failure::Refused(_, 40403, _)),
            )
            .map_err(|failure| match failure {
                Failure::Refused(_, 40403, _) => FormatError::UnknownSchema(id),
                other => failure_error(other, &format!("fetching the schema of id {id}")),
            })?;
        let registered = Arc::new(RegisteredSchema {
            kind: SchemaKind::of(body.schema_type.as_deref())
                .map_err(|kind| FormatError::Schema(format!("the schema of id {id} is {kind}")))?,
            text: body.schema,
            references: body.references,
        });
        self.inner
            .texts
            .write()
            .expect("not poisoned")
            .insert(id, registered.clone());
        Ok(registered)
    }

    /// The schema a reference names (a version of a subject), waiting as
    /// [`schema_by_id`](Self::schema_by_id) does.
    pub fn referenced(&self, reference: &SchemaReference) -> Result<RegisteredSchema, FormatError> {
        let url = format!(
            "{}/subjects/{}/versions/{}",
            self.inner.base,
            escape(&reference.subject),
            reference.version
        );
        let body: SchemaBody = self
            .call_patiently(
                None,
                || self.request(self.inner.client.get(&url)),
                |failure| matches!(failure, Failure::Refused(_, 40401 | 40402, _)),
            )
            .map_err(|failure| {
                failure_error(
                    failure,
                    &format!(
                        "fetching `{}` (version {} of `{}`)",
                        reference.name, reference.version, reference.subject
                    ),
                )
            })?;
        Ok(RegisteredSchema {
            kind: SchemaKind::of(body.schema_type.as_deref()).map_err(FormatError::Schema)?,
            text: body.schema,
            references: body.references,
        })
    }

    /// Registers a schema of any kind, given as text, under `subject` (with the schemas it
    /// refers to) and returns its id: how a producer of Protobuf or JSON Schema records (or a
    /// test standing in for one) puts its schema in the registry.
    pub fn register_text(
        &self,
        subject: &str,
        kind: SchemaKind,
        text: &str,
        references: &[SchemaReference],
    ) -> Result<u32, FormatError> {
        let body = serde_json::json!({
            "schema": text,
            "schemaType": kind.name(),
            "references": references,
        })
        .to_string();
        let url = format!("{}/subjects/{}/versions", self.inner.base, escape(subject));
        let id: IdBody = self
            .call_patiently(
                Some(self.inner.patience),
                || {
                    self.request(
                        self.inner
                            .client
                            .post(&url)
                            .header("Content-Type", CONTENT_TYPE)
                            .body(body.clone()),
                    )
                },
                |failure| matches!(failure, Failure::Refused(..)),
            )
            .map_err(|failure| match failure {
                Failure::Refused(409, _, message) => FormatError::Incompatible {
                    subject: subject.to_string(),
                    message,
                },
                other => failure_error(other, &format!("registering a schema under `{subject}`")),
            })?;
        Ok(id.id)
    }

    /// Registers `schema` under `subject` (a new version, unless the subject has it already)
    /// and returns its id. A schema the subject's compatibility rule refuses is
    /// [`FormatError::Incompatible`].
    pub fn register(&self, subject: &str, schema: &Schema) -> Result<u32, FormatError> {
        let body = request_body(schema)?;
        let url = format!("{}/subjects/{}/versions", self.inner.base, escape(subject));
        let id: IdBody = self
            .call_patiently(
                Some(self.inner.patience),
                || {
                    self.request(
                        self.inner
                            .client
                            .post(&url)
                            .header("Content-Type", CONTENT_TYPE)
                            .body(body.clone()),
                    )
                },
                |failure| matches!(failure, Failure::Refused(..)),
            )
            .map_err(|failure| match failure {
                Failure::Refused(409, _, message) => FormatError::Incompatible {
                    subject: subject.to_string(),
                    message,
                },
                other => failure_error(other, &format!("registering a schema under `{subject}`")),
            })?;
        self.remember(id.id, schema);
        Ok(id.id)
    }

    /// The id of `schema` if `subject` has it (without registering it).
    pub fn lookup(&self, subject: &str, schema: &Schema) -> Result<u32, FormatError> {
        let body = request_body(schema)?;
        let url = format!("{}/subjects/{}", self.inner.base, escape(subject));
        let id: IdBody = self
            .call_patiently(
                Some(self.inner.patience),
                || {
                    self.request(
                        self.inner
                            .client
                            .post(&url)
                            .header("Content-Type", CONTENT_TYPE)
                            .body(body.clone()),
                    )
                },
                |failure| matches!(failure, Failure::Refused(..)),
            )
            .map_err(|failure| match failure {
                Failure::Refused(404, _, message) => FormatError::NotRegistered {
                    subject: subject.to_string(),
                    message,
                },
                other => failure_error(other, &format!("looking up a schema under `{subject}`")),
            })?;
        self.remember(id.id, schema);
        Ok(id.id)
    }

    fn remember(&self, id: u32, schema: &Schema) {
        let mut schemas = self.inner.schemas.write().expect("not poisoned");
        schemas.entry(id).or_insert_with(|| intern(schema.clone()));
    }

    fn request(&self, request: RequestBuilder) -> RequestBuilder {
        let request = request.header("Accept", CONTENT_TYPE);
        match &self.inner.auth {
            Some((user, password)) => request.basic_auth(user, Some(password)),
            None => request,
        }
    }

    /// Sends the request `make` builds, again after transient failures (with back-off, up to
    /// `patience`, for ever without one), and parses the answer.
    /// Refusals are final when `patience` is given, else only those `is_final` says.
    fn call_patiently<T: for<'de> Deserialize<'de>>(
        &self,
        patience: Option<Duration>,
        make: impl Fn() -> RequestBuilder,
        is_final: impl Fn(&Failure) -> bool,
    ) -> Result<T, Failure> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(100);
        loop {
            match call(make()) {
                Err(failure)
                    if !is_final(&failure)
                        && patience.is_none_or(|p| started.elapsed() + pause < p) =>
                {
                    let reason = match failure {
                        Failure::Transient(reason) => reason,
                        Failure::Refused(status, code, message) => {
                            format!("HTTP {status} (error code {code}): {message}")
                        }
                    };
                    tracing::warn!(
                        registry = %self.inner.base,
                        "the schema registry cannot be reached ({reason}); trying again in {pause:?}"
                    );
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_secs(5));
                }
                other => return other,
            }
        }
    }
}

impl std::fmt::Debug for SchemaRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchemaRegistry")
            .field("url", &self.inner.base)
            .finish_non_exhaustive()
    }
}

fn call<T: for<'de> Deserialize<'de>>(request: RequestBuilder) -> Result<T, Failure> {
    let response = request
        .send()
        .map_err(|e| Failure::Transient(e.to_string()))?;
    let status = response.status();
    let text = response
        .text()
        .map_err(|e| Failure::Transient(e.to_string()))?;
    if status.is_success() {
        return serde_json::from_str(&text).map_err(|e| {
            Failure::Refused(
                status.as_u16(),
                0,
                format!("an answer that is not the API's: {e}: {text}"),
            )
        });
    }
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        return Err(Failure::Transient(format!("HTTP {status}: {text}")));
    }
    let body: ErrorBody = serde_json::from_str(&text).unwrap_or(ErrorBody {
        error_code: 0,
        message: text,
    });
    Err(Failure::Refused(
        status.as_u16(),
        body.error_code,
        body.message,
    ))
}

fn failure_error(failure: Failure, doing: &str) -> FormatError {
    match failure {
        Failure::Transient(reason) => {
            FormatError::Unreachable(format!("{doing}: the registry cannot be reached: {reason}"))
        }
        Failure::Refused(status, code, message) => FormatError::Registry(format!(
            "{doing}: HTTP {status} (error code {code}): {message}"
        )),
    }
}

/// A registration's or lookup's body: the schema's whole JSON (its canonical form would drop
/// the fields' defaults, which the compatibility rules read).
fn request_body(schema: &Schema) -> Result<String, FormatError> {
    let text = serde_json::to_string(schema)
        .map_err(|e| FormatError::Schema(format!("the schema as JSON: {e}")))?;
    Ok(serde_json::json!({ "schema": text }).to_string())
}

/// A subject as one segment of a URL path.
fn escape(subject: &str) -> String {
    let mut out = String::with_capacity(subject.len());
    for byte in subject.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char)
            }
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_is_one_path_segment() {
        assert_eq!(escape("clicks-value"), "clicks-value");
        assert_eq!(escape("com.acme/Click x"), "com.acme%2FClick%20x");
    }

    #[test]
    fn a_bad_url_fails_at_once_naming_it() {
        let err = SchemaRegistry::new("not a url").unwrap_err().to_string();
        assert!(err.contains("`not a url`"), "{err}");
        let err = SchemaRegistry::new("https://registry:8081")
            .unwrap_err()
            .to_string();
        assert!(err.contains("only http://"), "{err}");
    }

    #[test]
    fn credentials_in_the_url_become_basic_auth() {
        let registry = SchemaRegistry::new("http://u:p@127.0.0.1:1/apis/ccompat/v7/").unwrap();
        assert_eq!(registry.url(), "http://127.0.0.1:1/apis/ccompat/v7");
        assert_eq!(
            registry.inner.auth,
            Some(("u".to_string(), "p".to_string()))
        );
    }
}
