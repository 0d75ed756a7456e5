//! One run of the `riffle` binary, watched line by line and killed with SIGKILL when its kill
//! plan says: after a time, at the n-th log line holding a text, at the summary, or at the first
//! output file the commit of a checkpoint makes visible.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// The log line of a completed checkpoint (not the job's final one, logged again by the job).
pub(crate) const CHECKPOINT: &str = "coordinator: checkpoint completed";

/// When a run is killed.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Trigger {
    /// Not killed.
    Never,
    /// This long after the start.
    After(Duration),
    /// `delay` after the `n`-th log line (stderr) holding `text`.
    AtLog {
        text: &'static str,
        n: usize,
        delay: Duration,
    },
    /// At the first stdout line that starts with this (the summary).
    AtStdout(&'static str),
    /// At the first output file that the commit of the `n`-th completed checkpoint makes
    /// visible (`riffle demo` on files: its part files are renamed out of `.in-progress/`).
    AtCommit { n: usize },
}

/// A crash point of a plan: its kind (for the report) and its trigger.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Kill {
    pub kind: &'static str,
    pub trigger: Trigger,
}

impl Kill {
    pub(crate) fn new(kind: &'static str, trigger: Trigger) -> Kill {
        Kill { kind, trigger }
    }

    /// Whether it never kills.
    pub(crate) fn trigger_is_never(&self) -> bool {
        matches!(self.trigger, Trigger::Never)
    }

    pub(crate) const NEVER: Kill = Kill {
        kind: "none",
        trigger: Trigger::Never,
    };
}

/// How a run ended.
#[derive(Debug)]
pub(crate) enum Ended {
    /// It exited by itself, with success.
    Exited,
    /// It was killed (by its plan: the kind of the crash point).
    Killed(&'static str),
}

/// A running `riffle`, killed when dropped.
pub(crate) struct Process {
    child: Child,
    dir: PathBuf,
    lines: Receiver<(bool, String)>,
    readers: Vec<std::thread::JoinHandle<()>>,
    started: Instant,
    pub stdout: String,
    pub stderr: String,
    seen: HashMap<&'static str, usize>,
    /// The id of the last `checkpoint completed` line.
    pub last_checkpoint: Option<u64>,
    /// The id of the `checkpoint completed` line last seen before the kill.
    pub killed_after_checkpoint: Option<u64>,
    killing: Option<&'static str>,
    /// When the kill came, from the start.
    pub killed_at: Option<Duration>,
    pub status: Option<ExitStatus>,
}

/// The binary under test: `RIFFLE_KILL_BINARY` runs another build through the suite (an older
/// one, to see it fail).
pub(crate) fn binary() -> String {
    std::env::var("RIFFLE_KILL_BINARY").unwrap_or_else(|_| env!("CARGO_BIN_EXE_riffle").to_string())
}

impl Process {
    /// Starts `riffle args` in `dir`, logging at `log` (`RIFFLE_LOG`).
    pub(crate) fn start(dir: &Path, args: &[String], log: &str) -> Process {
        let mut child = Command::new(binary())
            .args(args)
            .current_dir(dir)
            .env("RIFFLE_LOG", log)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("riffle runs");
        let (tx, rx) = std::sync::mpsc::channel::<(bool, String)>();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let err_tx = tx.clone();
        let readers = vec![
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if tx.send((true, line)).is_err() {
                        break;
                    }
                }
            }),
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if err_tx.send((false, line)).is_err() {
                        break;
                    }
                }
            }),
        ];
        Process {
            child,
            dir: dir.to_path_buf(),
            lines: rx,
            readers,
            started: Instant::now(),
            stdout: String::new(),
            stderr: String::new(),
            seen: HashMap::new(),
            last_checkpoint: None,
            killed_after_checkpoint: None,
            killing: None,
            killed_at: None,
            status: None,
        }
    }

    /// How many log lines so far held `text` (only texts of triggers and [`Process::count`]).
    pub(crate) fn seen(&self, text: &'static str) -> usize {
        self.seen.get(text).copied().unwrap_or(0)
    }

    /// Counts the log lines holding `text` from now on (see [`Process::seen`]).
    pub(crate) fn count(&mut self, text: &'static str) {
        self.seen.entry(text).or_insert(0);
    }

    /// Writes what the run printed to `path` (kept with a failed seed's files).
    pub(crate) fn save(&self, path: &Path) {
        let _ = std::fs::write(
            path,
            format!("{}\n--- stderr:\n{}", self.stdout, self.stderr),
        );
    }

    /// Sends `signal` (`INT`, `STOP`, `CONT`) to the process.
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))] // used by the Kafka cases
    pub(crate) fn signal(&self, signal: &str) {
        send_signal(signal, self.child.id());
    }

    /// SIGKILL now, as crash point `kind`.
    pub(crate) fn kill(&mut self, kind: &'static str) {
        if self.killing.is_none() {
            self.killing = Some(kind);
            self.killed_at = Some(self.started.elapsed());
            self.killed_after_checkpoint = self.last_checkpoint;
        }
        let _ = self.child.kill();
    }

    /// Runs until the process ends or `for_at_most` passed (`None`: still running), killing it
    /// when `kill` says. A run that fails (exits with an error, or dies of another signal) is an
    /// error with its output.
    pub(crate) fn drive(
        &mut self,
        kill: Kill,
        for_at_most: Duration,
    ) -> Option<Result<Ended, String>> {
        let until = Instant::now() + for_at_most;
        match kill.trigger {
            Trigger::AtLog { text, .. } => self.count(text),
            Trigger::AtCommit { .. } => self.count(CHECKPOINT),
            _ => {}
        }
        loop {
            match self.lines.recv_timeout(Duration::from_millis(1)) {
                Ok((out, line)) => self.line(out, line, kill),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => std::thread::sleep(Duration::from_millis(1)),
            }
            if let Trigger::After(after) = kill.trigger
                && self.started.elapsed() >= after
            {
                self.kill(kill.kind);
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(self.ended(status));
            }
            if Instant::now() >= until {
                return None;
            }
        }
    }

    /// Drives the run until it ends; fails it after `limit`.
    pub(crate) fn finish(&mut self, kill: Kill, limit: Duration) -> Result<Ended, String> {
        match self.drive(kill, limit) {
            Some(ended) => ended,
            None => {
                self.kill("timeout");
                let _ = self.child.wait();
                Err(format!(
                    "did not end within {limit:?}\nstdout:\n{}\nstderr (last 30 lines):\n{}",
                    self.stdout,
                    tail(&self.stderr, 30)
                ))
            }
        }
    }

    fn line(&mut self, out: bool, line: String, kill: Kill) {
        if !out {
            for (text, n) in self.seen.iter_mut() {
                if line.contains(text) {
                    *n += 1;
                }
            }
            if line.contains("checkpoint completed id=") {
                self.last_checkpoint = field(&line, "id=");
            }
        }
        match kill.trigger {
            Trigger::AtStdout(prefix) if out && line.starts_with(prefix) => self.kill(kill.kind),
            Trigger::AtLog { text, n, delay }
                if !out && line.contains(text) && self.seen(text) == n =>
            {
                let at = Instant::now() + delay;
                while Instant::now() < at {
                    std::hint::spin_loop();
                }
                self.kill(kill.kind);
            }
            Trigger::AtCommit { n }
                if !out
                    && line.contains(CHECKPOINT)
                    && self.killing.is_none()
                    && self.seen(CHECKPOINT) == n =>
            {
                // The first of its files not yet visible made visible (or 200 ms).
                let pending: Vec<PathBuf> = self
                    .last_checkpoint
                    .map(|id| commit_of(&self.dir, id))
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(dir, file)| dir.join(file))
                    .filter(|path| !path.exists())
                    .collect();
                let deadline = Instant::now() + Duration::from_millis(200);
                while !pending.is_empty()
                    && !pending.iter().any(|path| path.exists())
                    && Instant::now() < deadline
                {
                    std::hint::spin_loop();
                }
                self.kill(kill.kind);
            }
            _ => {}
        }
        let into = if out {
            &mut self.stdout
        } else {
            &mut self.stderr
        };
        into.push_str(&line);
        into.push('\n');
    }

    fn ended(&mut self, status: ExitStatus) -> Result<Ended, String> {
        self.status = Some(status);
        for reader in self.readers.drain(..) {
            reader.join().unwrap();
        }
        let rest: Vec<(bool, String)> = self.lines.try_iter().collect();
        for (out, line) in rest {
            self.line(out, line, Kill::NEVER);
        }
        let signal = std::os::unix::process::ExitStatusExt::signal(&status);
        match (signal, self.killing) {
            (Some(9), Some(kind)) => Ok(Ended::Killed(kind)),
            _ if status.success() => Ok(Ended::Exited),
            _ => Err(format!(
                "riffle failed ({status})\nstdout:\n{}\nstderr (last 40 lines):\n{}",
                self.stdout,
                tail(&self.stderr, 40)
            )),
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Sends `signal` to process `pid` (`kill -<signal>`).
#[cfg_attr(not(feature = "kafka"), allow(dead_code))] // used by the Kafka cases
pub(crate) fn send_signal(signal: &str, pid: u32) {
    let status = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// The value of `name` (e.g. `id=`) in a log line.
pub(crate) fn field(line: &str, name: &str) -> Option<u64> {
    let at = line.find(&format!(" {name}"))? + 1 + name.len();
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The last `n` lines of `text`.
pub(crate) fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The output files that the commit of checkpoint `id` of the job run in `dir` makes visible:
/// (output directory, part file), read from the committables its exactly-once file sinks
/// stored in `checkpoints/<job>/chk-<id>/` (each names its directory and its files).
pub(crate) fn commit_of(dir: &Path, id: u64) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    let Ok(jobs) = std::fs::read_dir(dir.join("checkpoints")) else {
        return files;
    };
    for job in jobs.flatten() {
        let Ok(operators) = std::fs::read_dir(job.path().join(format!("chk-{id}"))) else {
            continue;
        };
        for operator in operators.flatten() {
            let Ok(states) = std::fs::read_dir(operator.path()) else {
                continue;
            };
            for state in states.flatten() {
                let Ok(bytes) = std::fs::read(state.path()) else {
                    continue;
                };
                files.extend(committable(&bytes));
            }
        }
    }
    files
}

/// The directory and file names in an exactly-once file sink's committable (their texts are in
/// the encoded bytes as they are: runs of printable characters).
fn committable(bytes: &[u8]) -> Vec<(PathBuf, String)> {
    let runs: Vec<String> = bytes
        .split(|b| !(0x20..0x7f).contains(b))
        .filter(|run| run.len() >= 4)
        .map(|run| String::from_utf8_lossy(run).into_owned())
        .collect();
    let mut names = Vec::new();
    let mut dir = None;
    for run in &runs {
        // A length before a text may be printable too: names and the directory can share a run.
        let mut rest = run.as_str();
        while let Some(at) = rest.find("part-")
            && let Some(end) = rest[at..].find(".jsonl")
        {
            names.push(rest[at..at + end + ".jsonl".len()].to_string());
            rest = &rest[at + end + ".jsonl".len()..];
        }
        if let Some(path) = (0..rest.len())
            .filter(|&i| rest[i..].starts_with('/'))
            .map(|i| PathBuf::from(&rest[i..]))
            .find(|path| path.is_dir())
        {
            dir = Some(path);
        }
    }
    match dir {
        Some(dir) => names.into_iter().map(|name| (dir.clone(), name)).collect(),
        None => Vec::new(),
    }
}

/// How far the commit of `files` had come: committed (visible) ones against those still in
/// progress.
pub(crate) fn commit_state(files: &[(PathBuf, String)]) -> super::CommitState {
    use super::CommitState;
    let visible = files.iter().filter(|(dir, f)| dir.join(f).exists()).count();
    match (visible, files.len()) {
        (_, 0) => CommitState::Nothing,
        (0, _) => CommitState::NotStarted,
        (v, n) if v == n => CommitState::Done,
        _ => CommitState::Inside,
    }
}
