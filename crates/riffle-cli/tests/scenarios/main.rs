//! The seed's scenarios, end to end, through the `riffle` command and its pipelines. Each test
//! checks the exact output, not just that something came out.

mod backpressure;
mod cdc_pipeline;
mod cep;
mod checkpoint_recovery;
mod hostile_input;
mod join;
#[cfg(feature = "kafka")]
mod kafka;
#[cfg(feature = "kafka")]
mod kafka_event_time;
#[cfg(feature = "kafka")]
mod kafka_group;
mod kill_suite;
#[cfg(feature = "kafka")]
mod lake_pipeline;
mod late_events;
mod nexmark;
mod operations;
mod serve;
mod simple_etl;
mod sql;
mod watermark_outliers;
mod windowed_count;

use std::path::Path;
use std::process::{Command, Output};

/// Runs the `riffle` binary with `args`; fails the test if it does not exit successfully.
pub fn riffle(args: &[&str], dir: &Path) -> String {
    let output = riffle_raw(args, dir);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "riffle {args:?} failed\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Runs the `riffle` binary with `args` in `dir`, whatever its exit status.
pub fn riffle_raw(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("riffle runs")
}

/// Every line of every file in `dir`, sorted; none if `dir` is not there (yet).
pub fn sorted_lines_if_any(dir: &Path) -> Vec<String> {
    match dir.is_dir() {
        true => sorted_lines(dir),
        false => Vec::new(),
    }
}

/// Every line of every file in `dir`, sorted.
pub fn sorted_lines(dir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            lines.extend(
                std::fs::read_to_string(path)
                    .unwrap()
                    .lines()
                    .map(str::to_string),
            );
        }
    }
    lines.sort();
    lines
}

/// A running `riffle`, killed (SIGKILL) when dropped, also when the test fails.
pub(crate) struct Job(std::process::Child);

impl Job {
    pub(crate) fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Job {
    /// Whether it exited, with its status if so.
    pub(crate) fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.0.try_wait().unwrap()
    }

    /// The process id.
    #[cfg(feature = "kafka")]
    pub(crate) fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        self.kill();
    }
}

impl From<std::process::Child> for Job {
    fn from(child: std::process::Child) -> Job {
        Job(child)
    }
}

/// What psql prints for `sql` against the test server (`RIFFLE_POSTGRES_URL`; unaligned,
/// tuples only); the statement must succeed.
pub(crate) fn psql_test_server(sql: &str) -> String {
    let url = std::env::var("RIFFLE_POSTGRES_URL")
        .expect("RIFFLE_POSTGRES_URL is not set: the README's test command starts PostgreSQL");
    let output = std::process::Command::new("psql")
        .args([
            url.as_str(),
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            sql,
        ])
        .output()
        .expect("psql (Debian's postgresql-client; scripts/postgres.sh installs it)");
    assert!(
        output.status.success(),
        "psql failed on {sql}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// `riffle sql -f job` at p = 2 with checkpoints every 200 ms under `dir/checkpoints`
/// (`--restore latest` when `restore`), its log in `dir/job-<restore>.log`.
pub(crate) fn start_sql_job(job: &Path, dir: &Path, restore: bool) -> Job {
    let checkpoints = dir.join("checkpoints").display().to_string();
    let mut args = vec![
        "sql",
        "-f",
        job.to_str().unwrap(),
        "--checkpoint-dir",
        &checkpoints,
        "--checkpoint-interval-ms",
        "200",
        "--no-web",
        "-p",
        "2",
    ];
    if restore {
        args.extend(["--restore", "latest"]);
    }
    let log = std::fs::File::create(dir.join(format!("job-{restore}.log"))).unwrap();
    std::process::Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args(&args)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
        .into()
}

/// Waits (120 s at most) until `done`, while `job` runs; a failure shows the logs of
/// [`start_sql_job`] in `dir`.
pub(crate) fn wait_while_running(what: &str, job: &mut Job, dir: &Path, done: &dyn Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !done() {
        let log = || {
            ["false", "true"]
                .map(|r| {
                    std::fs::read_to_string(dir.join(format!("job-{r}.log"))).unwrap_or_default()
                })
                .join("\n---\n")
        };
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within 120 s\n{}",
            log()
        );
        assert!(job.exited().is_none(), "{what}: the job ended\n{}", log());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
