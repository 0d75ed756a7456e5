//! The control plane against hostile requests: cross-site and DNS-rebinding requests refused,
//! savepoint targets outside the allowed roots refused (also through a symlink), and a token
//! never sent to a server that cannot prove it is the registered job.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::{Arc, Mutex};

use common::{config, running_job};
use riffle_web::client::{ClientError, JobClient};
use riffle_web::registry::{JobEntry, Registry};
use riffle_web::{WebConfig, WebServer};
use serde_json::{Value, json};

/// The savepoints the job has taken, by the API.
fn savepoints(client: &JobClient) -> usize {
    client.get("/api/v1/job/checkpoints").unwrap()["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kind"] == "savepoint")
        .count()
}

/// Request headers, a status expected and the start of its error message.
type Case<'a> = (Vec<(&'a str, &'a str)>, u16, String);

/// A POST with exactly these headers: (status, error message).
fn post(address: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut request = reqwest::blocking::Client::new()
        .post(format!("http://{address}{path}"))
        .body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().unwrap();
    let code = response.status().as_u16();
    let json: Value = response.json().unwrap_or(Value::Null);
    (code, json["error"].as_str().unwrap_or_default().to_string())
}

#[test]
fn cross_site_and_dns_rebinding_requests_are_refused_and_the_ui_shape_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let job = running_job(dir.path());
    let web = WebServer::start(job.monitor(), config(dir.path())).unwrap();
    let address = web.address().to_string();
    let client = JobClient::new(&address, None);
    let port = web.address().port();
    let evil_host = format!("evil.example:{port}");
    let self_origin = format!("http://127.0.0.1:{port}");
    let cases: Vec<Case> = vec![
        // What a form or a `fetch` with mode no-cors from another site sends.
        (
            vec![
                ("origin", "http://evil.example"),
                ("content-type", "text/plain"),
            ],
            403,
            "cross-site control request from origin `http://evil.example` refused".into(),
        ),
        (
            vec![
                ("origin", "http://evil.example"),
                ("content-type", "application/json"),
                ("x-riffle-request", "1"),
            ],
            403,
            "cross-site control request from origin `http://evil.example` refused".into(),
        ),
        // A page of evil.example whose name now points to 127.0.0.1 (DNS rebinding).
        (
            vec![
                ("host", evil_host.as_str()),
                ("content-type", "application/json"),
                ("x-riffle-request", "1"),
            ],
            403,
            format!("Host `{evil_host}` is not an address this job listens on"),
        ),
        // Simple requests without an Origin (older browsers, other clients).
        (
            vec![("content-type", "text/plain")],
            415,
            "control requests must be JSON".into(),
        ),
        (
            vec![("content-type", "application/x-www-form-urlencoded")],
            415,
            "control requests must be JSON".into(),
        ),
        (
            vec![("content-type", "application/json")],
            403,
            "control requests must carry the header `X-Riffle-Request: 1`".into(),
        ),
    ];
    for path in [
        "/api/v1/job/savepoints",
        "/api/v1/job/stop",
        "/api/v1/job/cancel",
    ] {
        for (headers, code, needle) in &cases {
            let (got, message) = post(&address, path, headers, "{}");
            assert_eq!(got, *code, "{path} {headers:?}: {message}");
            assert!(
                message.starts_with(needle.as_str()),
                "{path} {headers:?}: `{message}`"
            );
        }
    }
    assert_eq!(savepoints(&client), 0);
    assert!(!dir.path().join("savepoints").exists());
    assert_eq!(
        client.get("/api/v1/job").unwrap()["status"],
        "RUNNING",
        "neither stopped nor cancelled"
    );
    // What the UI sends (same origin, JSON, the header) takes the savepoint.
    let (code, message) = post(
        &address,
        "/api/v1/job/savepoints",
        &[
            ("origin", self_origin.as_str()),
            ("content-type", "application/json"),
            ("x-riffle-request", "1"),
        ],
        "{}",
    );
    assert_eq!(code, 200, "{message}");
    assert_eq!(savepoints(&client), 1);
    job.cancel();
    let _ = job.wait();
}

#[test]
fn savepoint_targets_outside_the_roots_are_refused_also_through_a_symlink() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let job = running_job(&base);
    let extra = base.join("extra");
    std::fs::create_dir(&extra).unwrap();
    let outside = base.join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, extra.join("link")).unwrap();
    let web = WebServer::start(
        job.monitor(),
        WebConfig {
            savepoint_roots: vec![extra.display().to_string(), "s3://jobs/riffle".into()],
            ..config(&base)
        },
    )
    .unwrap();
    let client = JobClient::new(&web.address().to_string(), None);
    let refused = |target: &str| match client.post(
        "/api/v1/job/savepoints",
        &json!({ "target_directory": target }),
    ) {
        Err(ClientError::Status(code, message)) => (code, message),
        other => panic!("{target}: expected a refusal, got {other:?}"),
    };
    let roots = format!(
        "(`{}`, `{}`, `s3://jobs/riffle`)",
        base.join("savepoints").display(),
        extra.display()
    );
    assert_eq!(
        refused("/etc"),
        (
            403,
            format!(
                "savepoint target `/etc` refused: outside the allowed roots; a request may only \
                 name a location under the job's savepoint directory or the roots allowed by its \
                 configuration {roots}"
            )
        )
    );
    let dotdot = format!("{}/../outside", extra.display());
    let (code, message) = refused(&dotdot);
    assert_eq!(code, 403);
    assert!(message.contains("it must not contain `..`"), "{message}");
    let through_link = extra.join("link").display().to_string();
    let (code, message) = refused(&through_link);
    assert_eq!(code, 403);
    assert!(
        message.contains(&format!(
            "it resolves to `{}`, outside the allowed roots",
            outside.display()
        )),
        "{message}"
    );
    // An s3:// target outside the configured bucket and prefix: refused before any request
    // (with credentials from nowhere but the job's configuration).
    for target in ["s3://attacker-bucket/x", "s3://jobs/other"] {
        let (code, message) = refused(target);
        assert_eq!(code, 403, "{target}");
        assert!(
            message.contains("not under an allowed s3:// root"),
            "{message}"
        );
    }
    assert_eq!(savepoints(&client), 0);
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    // Inside a root, it works.
    let taken = client
        .post(
            "/api/v1/job/savepoints",
            &json!({ "target_directory": extra.join("mine") }),
        )
        .unwrap();
    let location = taken["location"].as_str().unwrap();
    assert!(
        location.starts_with(extra.join("mine").to_str().unwrap()),
        "{location}"
    );
    assert_eq!(savepoints(&client), 1);
    job.cancel();
    let _ = job.wait();
}

/// A loopback server posing as a job: it records every request (head and body) and answers
/// each with `answer` as JSON.
fn imposter(answer: Value) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap_or(0);
                }
                head.push_str(&line);
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            head.push_str(&String::from_utf8_lossy(&body));
            log.lock().unwrap().push(head);
            let text = answer.to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                text.len()
            );
        }
    });
    (address, seen)
}

#[test]
fn the_token_goes_only_to_the_registered_job_once_it_proved_who_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs");
    let job = running_job(dir.path());
    let web = WebServer::start(
        job.monitor(),
        WebConfig {
            token: Some("s3cret".into()),
            register: true,
            registry_dir: Some(jobs.clone()),
            ..config(dir.path())
        },
    )
    .unwrap();
    let registry = Registry::at(&jobs);
    let entry: JobEntry = registry.find("clicks-api").unwrap();
    assert_eq!(entry.address, web.address().to_string());
    assert_eq!(entry.key.len(), 64);

    // Posing as the job at the entry's address (the job died and another process took its
    // port, or the entry was rewritten): it knows the id but not the key.
    for answer in [
        json!({ "id": entry.id, "proof": "00".repeat(32) }),
        json!({ "id": "someone", "proof": "" }),
        json!({ "status": "RUNNING" }),
    ] {
        let (address, seen) = imposter(answer.clone());
        let posing = JobEntry {
            address: address.clone(),
            ..entry.clone()
        };
        let err = JobClient::verified(&posing, Some("s3cret".into()))
            .err()
            .unwrap_or_else(|| panic!("{answer}: verified"));
        let message = err.to_string();
        assert!(matches!(err, ClientError::Unverified(_)), "{message}");
        assert!(
            message.starts_with(&format!(
                "the server at {address} could not prove it is job {}",
                entry.id
            )) && message.ends_with("no token was sent to it"),
            "{message}"
        );
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1, "only the challenge: {seen:?}");
        assert!(
            seen[0].starts_with("GET /api/v1/job/identity?challenge="),
            "{seen:?}"
        );
        for request in seen.iter() {
            let lower = request.to_ascii_lowercase();
            assert!(!lower.contains("authorization"), "{request}");
            assert!(!lower.contains("s3cret"), "{request}");
        }
    }
    // An entry without a key (written by an older version) is not trusted either.
    let (address, seen) = imposter(json!({}));
    let keyless = JobEntry {
        address,
        key: String::new(),
        ..entry.clone()
    };
    assert!(JobClient::verified(&keyless, Some("s3cret".into())).is_err());
    assert!(seen.lock().unwrap().is_empty(), "not even contacted");

    // The job itself proves it, then gets the token.
    let client = JobClient::verified(&entry, Some("s3cret".into())).unwrap();
    let answer = client.post("/api/v1/job/cancel", &json!({})).unwrap();
    assert_eq!(answer["status"], "cancelling");
    assert!(matches!(job.wait(), Err(riffle::Error::Cancelled)));
    drop(web);
    assert_eq!(
        registry.list().unwrap(),
        vec![],
        "unregistered when stopped"
    );
}

#[test]
fn configured_host_names_pass_the_host_and_origin_checks() {
    let env = riffle::StreamEnv::new();
    let (sink, _) = riffle::sink::CollectSink::new();
    env.from_iter(vec![1u64]).sink(sink);
    let job = env.execute_async().unwrap();
    let monitor = job.monitor();
    let dir = tempfile::tempdir().unwrap();
    let web = WebServer::start(
        monitor.clone(),
        WebConfig {
            allowed_hosts: vec!["localhost:9000".into()],
            ..config(dir.path())
        },
    )
    .unwrap();
    job.wait().unwrap();
    let address = web.address().to_string();
    let json = [
        ("content-type", "application/json"),
        ("x-riffle-request", "1"),
    ];
    let through = |host: &str, origin: &str| {
        let mut headers = json.to_vec();
        headers.push(("host", host));
        headers.push(("origin", origin));
        post(&address, "/api/v1/job/cancel", &headers, "{}").0
    };
    // Through an SSH tunnel on local port 9000: past the checks, to the finished job's 409.
    assert_eq!(through("localhost:9000", "http://localhost:9000"), 409);
    assert_eq!(through("localhost:9001", "http://localhost:9001"), 403);
    assert_eq!(through("localhost:9000", "http://localhost:9001"), 403);
    let err = WebServer::start(
        monitor.clone(),
        WebConfig {
            allowed_hosts: vec!["http://evil.example/".into()],
            ..config(dir.path())
        },
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("web.allowed_hosts"), "{err}");
    let err = WebServer::start(
        monitor,
        WebConfig {
            savepoint_roots: vec!["relative".into()],
            ..config(dir.path())
        },
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("web.savepoint_roots"), "{err}");
}
