//! A blocking client of a job's REST API, for the `riffle jobs | savepoint | stop | cancel`
//! commands and for tests.

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
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Unreachable(message) => write!(f, "{message}"),
            ClientError::Status(status, message) => write!(f, "HTTP {status}: {message}"),
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
                .build()
                .expect("an HTTP client"),
        }
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
        let mut request = self.http.post(format!("{}{path}", self.base)).json(body);
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
