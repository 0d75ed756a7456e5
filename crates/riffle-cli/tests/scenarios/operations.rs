//! Operations from outside the job's process: the web UI of `demo backpressure` in headless
//! Chromium (the slow sink shown as the bottleneck, its upstream HIGH), and `riffle jobs |
//! savepoint | stop | cancel` against running demos.
//!
//! Each test gives its demos their own jobs registry (`RIFFLE_JOBS_DIR`), so that `riffle jobs`
//! sees exactly them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A demo running in the background; killed if the test ends first.
struct Demo {
    child: Child,
    stderr: PathBuf,
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Demo {
    fn start(args: &[&str], dir: &Path, jobs: &Path) -> Demo {
        let stderr = dir.join(format!("demo-{}.stderr", args.join("-").len()));
        let child = Command::new(env!("CARGO_BIN_EXE_riffle"))
            .args(args)
            .current_dir(dir)
            .env("RIFFLE_JOBS_DIR", jobs)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("riffle starts");
        Demo { child, stderr }
    }

    /// Waits for the demo to end; its exit status and stderr.
    fn wait(&mut self, timeout: Duration) -> (Option<std::process::ExitStatus>, String) {
        let end = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break Some(status);
            }
            if Instant::now() > end {
                break None;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        (
            status,
            std::fs::read_to_string(&self.stderr).unwrap_or_default(),
        )
    }
}

/// `riffle <args>` with the test's jobs registry.
fn riffle(args: &[&str], dir: &Path, jobs: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args(args)
        .current_dir(dir)
        .env("RIFFLE_JOBS_DIR", jobs)
        .env_remove("RIFFLE_WEB_TOKEN")
        .output()
        .expect("riffle runs")
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The one job in the registry, once its web server is up: (id, address).
fn registered(jobs: &Path) -> (String, String) {
    let end = Instant::now() + Duration::from_secs(60);
    while Instant::now() < end {
        let entries: Vec<Value> = std::fs::read_dir(jobs)
            .map(|files| {
                files
                    .flatten()
                    .filter(|f| f.path().extension().is_some_and(|e| e == "json"))
                    .filter_map(|f| serde_json::from_slice(&std::fs::read(f.path()).ok()?).ok())
                    .collect()
            })
            .unwrap_or_default();
        if let [entry] = entries.as_slice() {
            return (
                entry["id"].as_str().unwrap().to_string(),
                entry["address"].as_str().unwrap().to_string(),
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("no job registered in {}", jobs.display());
}

/// GETs a JSON document (with the CLI's client).
fn reqwest_get(url: &str) -> Value {
    let (base, path) = url.split_at(url.find("/api").unwrap());
    riffle_web::client::JobClient::new(base, None)
        .get(path)
        .unwrap()
}

/// Where test artifacts (the UI screenshot) go.
fn artifacts() -> PathBuf {
    let dir = std::env::var_os("RIFFLE_TEST_ARTIFACTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("artifacts"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_ui_of_demo_backpressure_shows_the_slow_sink_as_the_bottleneck_in_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs");
    let mut demo = Demo::start(
        &[
            "demo",
            "backpressure",
            "--duration",
            "0",
            "--web-address",
            "127.0.0.1:0",
        ],
        dir.path(),
        &jobs,
    );
    let (id, address) = registered(&jobs);
    let screenshot = artifacts().join("ui-demo-backpressure.png");
    let _ = std::fs::remove_file(&screenshot);
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("../riffle-web/tests/tools");
    let browser = Command::new("node")
        .arg(tools.join("ui.mjs"))
        .arg(format!("http://{address}/"))
        .arg(&screenshot)
        .output()
        .expect("node runs (scripts/test.sh installs playwright-core and chromium)");
    let (stdout, stderr) = text(&browser);
    assert!(
        browser.status.success(),
        "the UI test failed (scripts/test.sh runs `npm ci` in {} and installs chromium):\n{stdout}\n{stderr}",
        tools.display()
    );
    let shown: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(shown["errors"], serde_json::json!([]), "no script errors");
    assert_eq!(shown["title"], "Riffle · demo-backpressure");
    assert_eq!(shown["status"], "RUNNING");
    let vertices = shown["vertices"].as_array().unwrap();
    assert_eq!(vertices.len(), 2, "{shown}");
    let sink = vertices
        .iter()
        .find(|v| v["name"].as_str().unwrap().ends_with("slow sink"))
        .unwrap();
    let source = vertices
        .iter()
        .find(|v| v["name"].as_str().unwrap().starts_with("Source:"))
        .unwrap();
    assert_eq!(sink["bottleneck"], true, "{shown}");
    assert_eq!(sink["backpressure"], "OK", "{shown}");
    assert_eq!(source["backpressure"], "HIGH", "{shown}");
    assert_eq!(source["bottleneck"], false);
    // HIGH is drawn red, OK green (style.css).
    assert_eq!(source["fill"], "rgb(209, 53, 43)");
    assert_eq!(sink["fill"], "rgb(46, 157, 87)");
    assert_eq!(shown["bottleneck"]["operator"], "slow sink");
    let hint = shown["bottleneck"]["text"].as_str().unwrap();
    assert!(
        hint.contains("parallelism") && hint.contains("checkpoint interval would not help"),
        "{hint}"
    );
    assert_eq!(shown["edges"], 1);
    let operators: Vec<&str> = shown["operators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap())
        .collect();
    assert_eq!(
        operators,
        [
            "Source: clicks-json",
            "parse",
            "drop bots",
            "enrich",
            "Dead letters: parse",
            "per-user",
            "slow sink"
        ]
    );
    assert!(
        shown["chartPoints"].as_array().unwrap()[0]
            .as_u64()
            .unwrap()
            >= 2,
        "the throughput chart has points: {shown}"
    );
    // The Savepoint button took one into the demo's default directory.
    let message = shown["savepointMessage"].as_str().unwrap();
    let location = message
        .strip_prefix("Savepoint done: ")
        .unwrap_or_else(|| panic!("{message}"));
    assert!(
        Path::new(location).starts_with(dir.path().join("riffle-out/savepoints")),
        "{location}"
    );
    assert!(
        Path::new(location).join("_manifest.json").exists(),
        "{location}"
    );
    let size = std::fs::metadata(&screenshot).unwrap().len();
    assert!(
        size > 20_000,
        "screenshot {} is {size} bytes",
        screenshot.display()
    );
    println!("screenshot: {}", screenshot.display());

    // Latency markers wait in the full channel before the slow sink.
    let job: Value = reqwest_get(&format!("http://{address}/api/v1/job"));
    let p99 = job["latency"]["p99_ms"]
        .as_f64()
        .unwrap_or_else(|| panic!("{job}"));
    assert!(
        p99 > 200.0,
        "end-to-end latency under back-pressure: {p99} ms"
    );
    assert_ne!(shown["latency"], "–");

    let cancelled = riffle(&["cancel", &id], dir.path(), &jobs);
    assert!(cancelled.status.success(), "{:?}", text(&cancelled));
    let (status, _) = demo.wait(Duration::from_secs(30));
    assert!(status.is_some(), "the demo ended after the cancel");
}

#[test]
fn savepoint_stop_and_cancel_from_the_cli_against_running_demos() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs");
    let run = |args: &[&str]| riffle(args, dir.path(), &jobs);
    let mut demo = Demo::start(
        &[
            "demo",
            "--count",
            "0",
            "--rate",
            "20000",
            "--checkpoint-interval-ms",
            "500",
            "--web-address",
            "127.0.0.1:0",
            "--savepoint-dir",
            "sp",
            "--savepoint-root",
            "mine",
            "--output",
            "out",
        ],
        dir.path(),
        &jobs,
    );
    let (id, _) = registered(&jobs);
    let (listed, _) = text(&run(&["jobs"]));
    let line = listed
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap_or_else(|| panic!("{listed}"));
    assert!(
        line.contains("demo-pipeline") && line.contains("RUNNING"),
        "{listed}"
    );

    // By name, into the demo's --savepoint-dir (relative to where the demo runs).
    let taken = run(&["savepoint", "demo-pipeline"]);
    let (location, stderr) = text(&taken);
    assert!(taken.status.success(), "{stderr}");
    let location = PathBuf::from(location.trim());
    assert!(
        location.starts_with(dir.path().join("sp")),
        "{}",
        location.display()
    );
    assert!(location.join("_manifest.json").exists());
    // By id prefix, into a directory relative to the caller.
    let taken = run(&["savepoint", &id[..6], "--target", "mine"]);
    let (location, stderr) = text(&taken);
    assert!(taken.status.success(), "{stderr}");
    assert!(
        Path::new(location.trim()).starts_with(dir.path().join("mine")),
        "{location}"
    );

    let missing = run(&["savepoint", "no-such-job"]);
    assert!(!missing.status.success());
    assert!(
        text(&missing).1.contains("no running job `no-such-job`"),
        "{:?}",
        text(&missing)
    );
    let file = dir.path().join("mine/a-file");
    std::fs::write(&file, "x").unwrap();
    let bad = run(&["savepoint", &id, "--target", file.to_str().unwrap()]);
    assert!(!bad.status.success());
    assert!(text(&bad).1.contains("HTTP 400"), "{:?}", text(&bad));
    // Outside the savepoint directory and the allowed roots.
    let outside = run(&["savepoint", &id, "--target", "/etc"]);
    assert!(!outside.status.success());
    assert!(
        text(&outside)
            .1
            .contains("HTTP 403: savepoint target `/etc` refused: outside the allowed roots"),
        "{:?}",
        text(&outside)
    );

    let stopped = run(&["stop", &id, "--savepoint"]);
    let (said, stderr) = text(&stopped);
    assert!(stopped.status.success(), "{stderr}");
    let location = said
        .trim()
        .strip_prefix("stopping after savepoint ")
        .unwrap_or_else(|| panic!("{said}"));
    assert!(
        Path::new(location).join("_manifest.json").exists(),
        "{location}"
    );
    // What it holds, without running anything.
    let inspected = run(&["savepoint", "inspect", location]);
    let (listed, stderr) = text(&inspected);
    assert!(inspected.status.success(), "{stderr}");
    assert!(
        listed.starts_with("savepoint ") && listed.contains("of job `demo-pipeline`"),
        "{listed}"
    );
    assert!(listed.contains("operator uid `"), "{listed}");
    let (status, stderr) = demo.wait(Duration::from_secs(60));
    assert!(
        status.is_some_and(|s| s.success()),
        "the demo stopped cleanly: {stderr}"
    );
    assert!(text(&run(&["jobs"])).0.contains("no running jobs"));

    // With a token (from a file, not the command line): control without it is refused, with it
    // the job is cancelled.
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    let mut demo = Demo::start(
        &[
            "demo",
            "--count",
            "0",
            "--rate",
            "20000",
            "--web-address",
            "127.0.0.1:0",
            "--web-token-file",
            token_file.to_str().unwrap(),
            "--output",
            "out2",
        ],
        dir.path(),
        &jobs,
    );
    let (id, address) = registered(&jobs);
    let refused = run(&["cancel", &id]);
    assert!(!refused.status.success());
    assert!(
        text(&refused).1.contains("HTTP 401"),
        "{:?}",
        text(&refused)
    );
    let by_address = run(&["jobs", "--address", &address]);
    assert!(
        text(&by_address).0.contains("RUNNING"),
        "{:?}",
        text(&by_address)
    );
    let wrong_file = dir.path().join("wrong-token");
    std::fs::write(&wrong_file, "s3creT\n").unwrap();
    let refused = run(&["cancel", &id, "--token-file", wrong_file.to_str().unwrap()]);
    assert!(
        text(&refused).1.contains("HTTP 401"),
        "{:?}",
        text(&refused)
    );
    let cancelled = run(&["cancel", &id, "--token-file", token_file.to_str().unwrap()]);
    assert!(cancelled.status.success(), "{:?}", text(&cancelled));
    assert_eq!(text(&cancelled).0.trim(), "cancelling");
    let (status, stderr) = demo.wait(Duration::from_secs(30));
    assert!(
        status.is_some(),
        "the demo ended after the cancel: {stderr}"
    );
    assert!(stderr.contains("cancelled"), "{stderr}");
}

/// A loopback server posing as a job: it records every request head and answers each with
/// `answer` as JSON.
fn imposter(answer: Value) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                head.push_str(&line);
            }
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
fn the_cli_refuses_a_loose_registry_and_sends_no_token_to_an_unverified_job() {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs");
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&jobs)
        .unwrap();
    // An entry whose address now answers with someone else: it knows the id, not the key.
    let (address, seen) =
        imposter(serde_json::json!({ "id": "feedf00d", "proof": "00".repeat(32) }));
    let entry = serde_json::json!({
        "id": "feedf00d",
        "name": "victim",
        "address": address,
        "pid": std::process::id(),
        "started_at": 1,
        "key": "11".repeat(32),
    });
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(jobs.join("feedf00d.json"))
        .unwrap();
    std::io::Write::write_all(&mut file, entry.to_string().as_bytes()).unwrap();
    let stopped = Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args(["stop", "victim"])
        .current_dir(dir.path())
        .env("RIFFLE_JOBS_DIR", &jobs)
        .env("RIFFLE_WEB_TOKEN", "s3cret")
        .output()
        .unwrap();
    let (_, stderr) = text(&stopped);
    assert!(!stopped.status.success());
    assert!(
        stderr.contains(&format!(
            "the server at {address} could not prove it is job feedf00d (wrong proof); no token was sent to it"
        )),
        "{stderr}"
    );
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(requests[0].starts_with("GET /api/v1/job/identity?challenge="));
    assert!(
        !requests[0].to_ascii_lowercase().contains("authorization"),
        "{requests:?}"
    );

    // A registry that others can write to is refused by every command.
    std::fs::set_permissions(&jobs, std::fs::Permissions::from_mode(0o777)).unwrap();
    for args in [&["jobs"][..], &["cancel", "victim"][..]] {
        let refused = riffle(args, dir.path(), &jobs);
        assert!(!refused.status.success(), "{args:?}");
        assert!(
            text(&refused).1.contains(&format!(
                "riffle: the jobs registry {} is not private: its mode is 0777",
                jobs.display()
            )),
            "{args:?}: {:?}",
            text(&refused)
        );
    }
    assert_eq!(seen.lock().unwrap().len(), 1, "nothing more sent");
}

#[test]
fn savepoint_inspect_lists_operators_and_their_declared_state() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs");
    let savepoint = riffle_testing::evolution::savepoint_of_v1(
        std::sync::Arc::new(riffle::state::HeapBackend),
        &dir.path().join("job"),
    );
    let inspected = riffle(&["savepoint", "inspect", &savepoint], dir.path(), &jobs);
    let (listed, stderr) = text(&inspected);
    assert!(inspected.status.success(), "{stderr}");
    for line in [
        "operator uid `counts` (counts): parallelism 2, keyed, ",
        "  state `count`: version 1, riffle_testing::evolution::v1::Count = Count { clicks: u64 }",
        "  state `pages`: version 1, riffle_testing::evolution::v1::Page = Page { page: u32 }",
        "  state `per-page`: version 1, ",
        "operator uid `hits` (Source: hits): parallelism 1, not keyed, operator state ",
    ] {
        assert!(listed.contains(line), "`{line}` not in:\n{listed}");
    }
    let json = riffle(
        &["savepoint", "inspect", &savepoint, "--json"],
        dir.path(),
        &jobs,
    );
    let report: Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(report["kind"], "savepoint");
    let counts = report["operators"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["uid"] == "counts")
        .expect("operator counts");
    let names: Vec<&str> = counts["states"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["count", "pages", "per-page"]);
    assert!(counts["key_groups_with_state"].as_u64().unwrap() > 0);

    // Not a savepoint: the error names the argument.
    let wrong = riffle(&["savepoint", "inspect", "no-such-dir"], dir.path(), &jobs);
    assert!(!wrong.status.success());
    assert!(
        text(&wrong)
            .1
            .contains("`DIR` `no-such-dir` is not a directory"),
        "{:?}",
        text(&wrong)
    );
}
