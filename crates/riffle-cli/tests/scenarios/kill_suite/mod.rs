//! The kill -9 suite (issues 11 and 27): the real `riffle` binary is killed with SIGKILL at
//! chosen moments and started again with `--restore latest` until its job is done; what it
//! committed must equal what a run never killed committed, line for line: nothing lost, nothing
//! twice, nothing else.
//!
//! - [`files`]: `riffle demo` on click files (one file at `-p 1` and `-p 2`, a directory at
//!   `-p 2`, heap and RocksDB state).
//! - [`kafka`]: the seed's job between Kafka topics in one process (heap and RocksDB).
//! - [`group`]: the seed's job as a group of member processes, members killed one or two at a
//!   time, during a rebalance, or stopped (SIGSTOP) past their session; compared with a batch
//!   computation of the input.
//!
//! Each seed gives a plan of crash points (seeded, so a failing seed is run again with
//! `RIFFLE_KILL_FIRST_SEED=S RIFFLE_KILL_SEEDS=1`). A case never stops at the first mismatch:
//! it counts the lost, duplicated and wrong lines of every seed, prints one line
//!
//! ```text
//! KILL-SUITE case=files-p2-heap crash_points=N lost=L duplicated=D wrong=W seeds=S seconds=T kinds=...
//! ```
//!
//! and fails at the end if any seed lost, duplicated or changed a line (or a run failed).
//!
//! How many seeds a case runs:
//! - `RIFFLE_KILL_SEEDS` (CI: 2 for files, 1 for Kafka and groups);
//! - `RIFFLE_KILL_CRASH_POINTS`: instead, seeds until the case reached this many crash points
//!   (`scripts/kill-suite.sh --long`);
//! - `RIFFLE_KILL_DEADLINE` (Unix seconds): no new seed starts after it (the first always does);
//! - `RIFFLE_KILL_REPORT`: a file the case's lines are appended to.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::time::{Duration, Instant, SystemTime};

mod files;
#[cfg(feature = "kafka")]
mod group;
#[cfg(feature = "kafka")]
mod kafka;
pub(crate) mod run;

/// The number in environment variable `name`, or `default`.
pub(crate) fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A small deterministic generator for the kill moments (splitmix64).
pub(crate) struct Moments(u64);

impl Moments {
    /// The moments of `seed` in case `case` (each case has its own sequence).
    pub(crate) fn new(case: &str, seed: u64) -> Moments {
        let salt = case.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
        Moments(seed ^ salt)
    }

    /// A number below `below` (0 when `below` is 0).
    pub(crate) fn next(&mut self, below: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % below.max(1)
    }

    /// One of `items`.
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))] // used by the Kafka cases
    pub(crate) fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.next(items.len() as u64) as usize]
    }

    /// A duration below `below`.
    pub(crate) fn millis(&mut self, below: u64) -> Duration {
        Duration::from_millis(self.next(below))
    }
}

/// What a case's committed lines are against the reference, output by output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Diff {
    /// Lines of the reference missing (each missing copy counts).
    pub lost: u64,
    /// Copies of reference lines beyond the reference's.
    pub duplicated: u64,
    /// Lines the reference does not have at all (a count with another value, ...).
    pub wrong: u64,
}

impl Diff {
    pub(crate) fn is_clean(&self) -> bool {
        *self == Diff::default()
    }

    fn add(&mut self, other: Diff) {
        self.lost += other.lost;
        self.duplicated += other.duplicated;
        self.wrong += other.wrong;
    }
}

/// Lines with how often each appears.
pub(crate) type Lines = BTreeMap<String, usize>;

/// `got` against `reference`, with up to three examples of each kind of difference.
pub(crate) fn diff_lines(reference: &Lines, got: &Lines) -> (Diff, String) {
    let mut diff = Diff::default();
    let mut examples: [Vec<&str>; 3] = Default::default();
    for (line, &want) in reference {
        let have = got.get(line).copied().unwrap_or(0);
        if have < want {
            diff.lost += (want - have) as u64;
            examples[0].push(line);
        } else if have > want {
            diff.duplicated += (have - want) as u64;
            examples[1].push(line);
        }
    }
    for (line, &have) in got {
        if !reference.contains_key(line) {
            diff.wrong += have as u64;
            examples[2].push(line);
        }
    }
    let mut text = String::new();
    for (name, lines) in ["lost", "duplicated", "wrong"].iter().zip(&examples) {
        if !lines.is_empty() {
            let first: Vec<&&str> = lines.iter().take(3).collect();
            let _ = write!(text, " {name} (first 3 of {}): {first:?};", lines.len());
        }
    }
    (diff, text)
}

/// `lines` counted.
#[cfg_attr(not(feature = "kafka"), allow(dead_code))] // used by the Kafka cases
pub(crate) fn count_lines<'a>(lines: impl IntoIterator<Item = &'a str>) -> Lines {
    let mut counted = Lines::new();
    for line in lines {
        *counted.entry(line.to_string()).or_insert(0) += 1;
    }
    counted
}

/// How many seeds a case runs ([`mod@self`]'s environment variables).
pub(crate) struct Budget {
    first_seed: u64,
    seeds: Option<u64>,
    crash_points: Option<u64>,
    deadline: Option<SystemTime>,
}

impl Budget {
    /// From the environment; `ci_seeds` is the number of seeds without `RIFFLE_KILL_SEEDS`.
    pub(crate) fn from_env(ci_seeds: u64) -> Budget {
        let crash_points = std::env::var("RIFFLE_KILL_CRASH_POINTS")
            .ok()
            .and_then(|v| v.parse().ok());
        let seeds = match std::env::var("RIFFLE_KILL_SEEDS")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            Some(n) => Some(n),
            None if crash_points.is_some() => None,
            None => Some(ci_seeds),
        };
        Budget {
            first_seed: env_or("RIFFLE_KILL_FIRST_SEED", 0),
            seeds,
            crash_points,
            deadline: std::env::var("RIFFLE_KILL_DEADLINE")
                .ok()
                .and_then(|v| v.parse().ok())
                .map(|secs| SystemTime::UNIX_EPOCH + Duration::from_secs(secs)),
        }
    }

    /// The next seed to run, if the budget allows one more after `tally`.
    pub(crate) fn next_seed(&self, tally: &Tally) -> Option<u64> {
        let run = tally.seeds;
        // At least one seed, even past the deadline.
        let more = self.seeds.is_none_or(|n| run < n)
            && self.crash_points.is_none_or(|n| tally.crash_points() < n)
            && (run == 0 || self.deadline.is_none_or(|d| SystemTime::now() < d));
        more.then_some(self.first_seed + run)
    }
}

/// One crash point: its kind and, for kills after a checkpoint completed, how far the commit of
/// that checkpoint's output had come.
#[derive(Clone, Debug)]
pub(crate) struct CrashPoint {
    pub kind: &'static str,
    pub commit: Option<CommitState>,
}

/// How far the commit of the checkpoint that had just completed had come when the process died.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum CommitState {
    /// None of its output committed yet.
    NotStarted,
    /// Some committed, some not: the kill came inside the commit.
    Inside,
    /// All committed.
    Done,
    /// The checkpoint had nothing to commit.
    Nothing,
}

/// What a case saw over its seeds.
pub(crate) struct Tally {
    case: String,
    test: String,
    started: Instant,
    seeds: u64,
    points: Vec<CrashPoint>,
    by_output: BTreeMap<String, Diff>,
    failures: Vec<String>,
}

impl Tally {
    /// A tally for case `case`, run by the test function `test` (its path under `kill_suite::`).
    pub(crate) fn new(case: &str, test: &str) -> Tally {
        Tally {
            case: case.to_string(),
            test: test.to_string(),
            started: Instant::now(),
            seeds: 0,
            points: Vec::new(),
            by_output: BTreeMap::new(),
            failures: Vec::new(),
        }
    }

    pub(crate) fn crash_points(&self) -> u64 {
        self.points.len() as u64
    }

    /// The command that runs seed `seed` of this case again.
    pub(crate) fn reproduce(&self, seed: u64) -> String {
        format!(
            "RIFFLE_KILL_FIRST_SEED={seed} RIFFLE_KILL_SEEDS=1 cargo test -p riffle-cli --all-features \
             --test scenarios kill_suite::{} -- --exact --nocapture",
            self.test
        )
    }

    /// Records seed `seed`: its crash points, each output's difference (with examples), and
    /// what else went wrong (a run that failed, a job that never finished...). `kept` says where
    /// its files are kept when it failed.
    pub(crate) fn seed(
        &mut self,
        seed: u64,
        points: Vec<CrashPoint>,
        outputs: Vec<(String, Diff, String)>,
        problems: Vec<String>,
        plan: &str,
    ) -> bool {
        self.seeds += 1;
        self.points.extend(points);
        let mut bad = Vec::new();
        for (output, diff, examples) in outputs {
            self.by_output.entry(output.clone()).or_default().add(diff);
            if !diff.is_clean() {
                bad.push(format!(
                    "{output}: lost {} duplicated {} wrong {};{examples}",
                    diff.lost, diff.duplicated, diff.wrong
                ));
            }
        }
        bad.extend(problems);
        if bad.is_empty() {
            return true;
        }
        let failure = format!(
            "KILL-SUITE-FAIL case={} seed={seed}: {}\n  plan: {plan}\n  again: {}",
            self.case,
            bad.join("\n  "),
            self.reproduce(seed)
        );
        eprintln!("{failure}");
        report(&failure);
        self.failures.push(failure);
        false
    }

    /// The total difference over every output.
    pub(crate) fn total(&self) -> Diff {
        let mut total = Diff::default();
        for diff in self.by_output.values() {
            total.add(*diff);
        }
        total
    }

    /// The crash points by kind: `kind:n`, with where the commit stood for kills after a
    /// checkpoint completed (`inside` = the commit of its output was under way).
    fn kinds(&self) -> String {
        let mut kinds: BTreeMap<&str, (u64, BTreeMap<CommitState, u64>)> = BTreeMap::new();
        for point in &self.points {
            let entry = kinds.entry(point.kind).or_default();
            entry.0 += 1;
            if let Some(state) = point.commit {
                *entry.1.entry(state).or_default() += 1;
            }
        }
        kinds
            .iter()
            .map(|(kind, (n, states))| {
                let states: Vec<String> = states
                    .iter()
                    .map(|(state, n)| {
                        let name = match state {
                            CommitState::NotStarted => "before",
                            CommitState::Inside => "inside",
                            CommitState::Done => "after",
                            CommitState::Nothing => "empty",
                        };
                        format!("{name}:{n}")
                    })
                    .collect();
                if states.is_empty() {
                    format!("{kind}:{n}")
                } else {
                    format!("{kind}:{n}({})", states.join(","))
                }
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Prints (and appends to `RIFFLE_KILL_REPORT`) the case's line; fails if any seed lost,
    /// duplicated or changed a line, or went wrong otherwise.
    pub(crate) fn finish(self) {
        let total = self.total();
        let outputs: Vec<String> = self
            .by_output
            .iter()
            .map(|(name, d)| format!("{name}:{}/{}/{}", d.lost, d.duplicated, d.wrong))
            .collect();
        let line = format!(
            "KILL-SUITE case={} crash_points={} lost={} duplicated={} wrong={} seeds={} failed_seeds={} seconds={} kinds={} outputs={}",
            self.case,
            self.crash_points(),
            total.lost,
            total.duplicated,
            total.wrong,
            self.seeds,
            self.failures.len(),
            self.started.elapsed().as_secs(),
            self.kinds(),
            outputs.join(",")
        );
        println!("{line}");
        report(&line);
        assert!(
            self.failures.is_empty(),
            "{line}\n{}",
            self.failures.join("\n")
        );
    }
}

/// Appends `line` to the file `RIFFLE_KILL_REPORT` names, if set.
fn report(line: &str) {
    if let Ok(path) = std::env::var("RIFFLE_KILL_REPORT") {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("RIFFLE_KILL_REPORT {path}: {e}"));
        writeln!(file, "{line}").unwrap();
    }
}

/// Moves `dir` (a failed seed's files) out of the temporary directory that is about to be
/// removed; returns where it is now.
pub(crate) fn keep(dir: &std::path::Path, case: &str, seed: u64) -> String {
    let kept = std::env::temp_dir().join(format!(
        "riffle-kill-suite-{case}-seed-{seed}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&kept);
    match std::fs::rename(dir, &kept) {
        Ok(()) => kept.display().to_string(),
        Err(_) => dir.display().to_string(),
    }
}
