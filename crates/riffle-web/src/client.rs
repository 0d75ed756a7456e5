//! A blocking client of a job's REST API, for the `riffle jobs | savepoint | stop | cancel`
//! commands and for tests.
//!
//! Control requests are sent as JSON with the `X-Riffle-Request` header (the server refuses
//! anything a browser could send cross-site). A client of a registered job is made with
//! [`JobClient::verified`], which holds back the token until the server at the entry's address
//! has proved it is the job the entry describes.

use serde_json::Value;

/// Talks to one job's API.
///
/// ```no_run
/// let client = riffle_web::client::JobClient::new("127.0.0.1:8081", None);
/// let job = client.get("/api/v1/job").unwrap();
/// println!("{} is {}", job["name"], job["status"]);
/// ```
pub struct JobClient {
    base: String,
    token: Option<String>,
    http: reqwest::blocking::Client,
}

/// Why a request failed.
#[derive(Debug)]
pub enum ClientError {
    /// The job did not answer (not running, wrong address).
    Unreachable(String),
    /// The job answered with an error status; the message is its `error` field.
    Status(u16, String),
    /// The server at a registered job's address could not prove it is that job: nothing (no
    /// token) was sent to it beyond the challenge.
    Unverified(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Unreachable(message) => write!(f, "{message}"),
            ClientError::Status(status, message) => write!(f, "HTTP {status}: {message}"),
            ClientError::Unverified(message) => write!(f, "{message}"),
        }
    }
}

impl std::error::Error for ClientError {}

impl JobClient {
    /// A client of the job at `address` (`host:port` or a URL); `token` for control requests.
    pub fn new(address: &str, token: Option<String>) -> Self {
        let base = if address.starts_with("http://") || address.starts_with("https://") {
            address.trim_end_matches('/').to_string()
        } else {
            format!("http://{address}")
        };
        JobClient {
            base,
            token,
            http: reqwest::blocking::Client::builder()
                .timeout(std::time::Duration::from_secs(600))
                // A token never follows a redirect elsewhere.
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("an HTTP client"),
        }
    }

    /// A client of the registered job `entry`, with `token` only once the server at the entry's
    /// address has shown it is that job: it answers a fresh random challenge with the proof
    /// (HMAC-SHA256) of the entry's secret key, over the job id and its address. Another process
    /// that took over the address (the job died, or an entry was tampered with) cannot, and is
    /// never sent the token.
    ///
    /// ```no_run
    /// use riffle_web::{client::JobClient, registry::Registry};
    /// let entry = Registry::from_env().unwrap().find("demo-pipeline").unwrap();
    /// let client = JobClient::verified(&entry, Some("s3cret".into())).unwrap();
    /// client.post("/api/v1/job/cancel", &serde_json::json!({})).unwrap();
    /// ```
    pub fn verified(
        entry: &crate::registry::JobEntry,
        token: Option<String>,
    ) -> Result<Self, ClientError> {
        let mut client = JobClient::new(&entry.address, None);
        let unverified = |why: String| {
            ClientError::Unverified(format!(
                "the server at {} could not prove it is job {} ({why}); no token was sent to it",
                entry.address, entry.id
            ))
        };
        let key = crate::security::unhex(&entry.key)
            .filter(|k| !k.is_empty())
            .ok_or_else(|| unverified("its registry entry has no key".into()))?;
        let challenge = crate::security::random_hex(32);
        let answer = client
            .get(&format!("/api/v1/job/identity?challenge={challenge}"))
            .map_err(|e| unverified(e.to_string()))?;
        let id = answer["id"].as_str().unwrap_or_default();
        let proof = answer["proof"].as_str().unwrap_or_default();
        if id != entry.id {
            return Err(unverified(format!("it says it is job `{id}`")));
        }
        if !crate::security::proof_valid(&key, &entry.id, &entry.address, &challenge, proof) {
            return Err(unverified("wrong proof".into()));
        }
        client.token = token;
        Ok(client)
    }

    /// The base URL.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// GETs `path` and returns its JSON.
    pub fn get(&self, path: &str) -> Result<Value, ClientError> {
        self.send(self.http.get(format!("{}{path}", self.base)))
    }

    /// POSTs `body` as JSON to `path` and returns the JSON answer.
    pub fn post(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        let mut request = self
            .http
            .post(format!("{}{path}", self.base))
            .header(crate::security::REQUEST_HEADER, "1")
            .json(body);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        self.send(request)
    }

    fn send(&self, request: reqwest::blocking::RequestBuilder) -> Result<Value, ClientError> {
        let response = request
            .send()
            .map_err(|e| ClientError::Unreachable(format!("{}: {e}", self.base)))?;
        let status = response.status();
        let text = response
            .text()
            .map_err(|e| ClientError::Unreachable(format!("{}: {e}", self.base)))?;
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if status.is_success() {
            Ok(value)
        } else {
            let message = value
                .get("error")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| value.to_string());
            Err(ClientError::Status(status.as_u16(), message))
        }
    }
}
