//! The kill -9 suite on a process group (issue 27): the seed's job as three member processes of
//! one group (`riffle demo --kafka B --group NAME`, parallelism 1 each, checkpoints every 300 ms),
//! while clicks stream in, hit by each seed's plan of crash points: one member killed at a
//! random moment, at its next `group: commit` (between a checkpoint and the commit of its
//! transaction), or during a restore (at a member's `restoring the partitions' state`, after a
//! newcomer joined); two members killed at once; one killed and another during the rebalance
//! that follows (the next member, its replacement included, to log `partitions assigned` or
//! `revoked`); one stopped with SIGSTOP until the group has given its partitions to the others
//! (its session, 6 s on the test broker, expired), then SIGCONT: a zombie whose commits must
//! fail. A killed member is replaced by a new one. The committed `agg-clicks` must hold every
//! (user, window) count of a batch computation of the input exactly once: the counts lost,
//! duplicated (a second line for a (user, window)) and wrong (another count, or a window the
//! input does not have) are counted.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use riffle::source::datagen::Generator;
use riffle_cli::clicks::is_bot;
use riffle_cli::demos::UserCount;
use riffle_clicks::{Click, ClickGenerator, ClicksConfig};
use riffle_kafka::KafkaConnection;
use riffle_kafka::testing::{TestProducer, bootstrap};

use super::run::{binary, send_signal, tail};
use super::{Budget, CrashPoint, Diff, Moments, Tally, keep};
use crate::kafka::{now_ms, read_topic, seed_job_args, wait_for_partitions};

/// The members' log: the group's lines (commits at debug level), the job's restores.
const LOG: &str = "warn,riffle_kafka=debug,riffle::runtime::job=info";

/// Members the group keeps (a killed one is replaced).
const MEMBERS: usize = 3;

/// Clicks in the input, written over about [`WRITE_SECS`].
const CLICKS: u64 = 120_000;

const WRITE_SECS: u64 = 35;

/// Crash points in each seed's plan.
const EVENTS: usize = 4;

/// A member process, its output in `member-<n>.log` and in memory; it can be armed to kill
/// itself at the next line holding a text.
struct Member {
    n: usize,
    child: Arc<Mutex<Child>>,
    pid: u32,
    lines: Arc<Mutex<Vec<String>>>,
    armed: Arc<Mutex<Option<&'static [&'static str]>>>,
    fired: Arc<AtomicBool>,
    killed: bool,
    stopped: bool,
}

impl Member {
    fn start(args: &[String], dir: &Path, n: usize) -> Member {
        let mut child = Command::new(binary())
            .args(args)
            .current_dir(dir)
            .env("RIFFLE_LOG", LOG)
            .env("RIFFLE_JOBS_DIR", dir.join("jobs"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("a member starts");
        let pid = child.id();
        let outputs = [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ];
        let member = Member {
            n,
            child: Arc::new(Mutex::new(child)),
            pid,
            lines: Arc::default(),
            armed: Arc::default(),
            fired: Arc::default(),
            killed: false,
            stopped: false,
        };
        let log = Arc::new(Mutex::new(
            std::fs::File::create(dir.join(format!("member-{n}.log"))).unwrap(),
        ));
        for output in outputs {
            let (log, lines, armed, fired, child) = (
                log.clone(),
                member.lines.clone(),
                member.armed.clone(),
                member.fired.clone(),
                member.child.clone(),
            );
            std::thread::spawn(move || {
                for line in BufReader::new(output).lines().map_while(Result::ok) {
                    let mut armed = armed.lock().unwrap();
                    if armed.is_some_and(|texts| texts.iter().any(|text| line.contains(text))) {
                        let _ = child.lock().unwrap().kill();
                        fired.store(true, Ordering::Release);
                        *armed = None;
                    }
                    drop(armed);
                    let _ = writeln!(log.lock().unwrap(), "{line}");
                    lines.lock().unwrap().push(line);
                }
            });
        }
        member
    }

    /// Lines so far holding `text`.
    fn count(&self, text: &str) -> usize {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(text))
            .count()
    }

    fn alive(&self) -> bool {
        !self.killed && self.child.lock().unwrap().try_wait().unwrap().is_none()
    }

    fn kill(&mut self) {
        let _ = self.child.lock().unwrap().kill();
        self.killed = true;
    }

    /// SIGKILL at its next line holding one of `texts`.
    fn arm(&self, texts: &'static [&'static str]) {
        self.fired.store(false, Ordering::Release);
        *self.armed.lock().unwrap() = Some(texts);
    }

    /// Whether the armed kill came; disarms it if not.
    fn disarm(&mut self) -> bool {
        *self.armed.lock().unwrap() = None;
        let fired = self.fired.swap(false, Ordering::AcqRel);
        if fired {
            self.killed = true;
        }
        fired
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if self.stopped {
            send_signal("CONT", self.pid);
        }
        let mut child = self.child.lock().unwrap();
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The clicks (`rate` a second of event time, no very late ones) and the counts a batch
/// computation gives.
fn input() -> (Vec<Click>, BTreeMap<(u64, i64), u64>) {
    let generator = ClickGenerator::new(ClicksConfig {
        users: 300,
        events_per_second: 10_000.0,
        late_share: 0.0,
        ..ClicksConfig::default()
    });
    let clicks: Vec<Click> = (0..CLICKS).map(|i| generator.generate(i)).collect();
    let mut expected = BTreeMap::new();
    for click in clicks.iter().filter(|c| !is_bot(&c.user_agent)) {
        let window = click.event_time - click.event_time.rem_euclid(1000);
        *expected.entry((click.user_id, window)).or_default() += 1;
    }
    (clicks, expected)
}

/// Writes `clicks` into `topic` (by user) in chunks of 2 000 over about [`WRITE_SECS`], then a bot
/// click far ahead in every partition so that every window of the input closes.
fn write_input(topic: String, clicks: Vec<Click>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let producer = TestProducer::new(&[("enable.idempotence", "true")]);
        let pause = Duration::from_millis(WRITE_SECS * 1_000 * 2_000 / clicks.len() as u64);
        let send = |partition: i32, click: &Click| {
            let payload = serde_json::to_string(click).unwrap();
            producer.send(&topic, partition, None, payload.as_bytes())
        };
        for (i, click) in clicks.iter().enumerate() {
            send((click.user_id % 8) as i32, click);
            if i % 2_000 == 1_999 {
                producer.flush();
                std::thread::sleep(pause);
            }
        }
        let last_time = clicks.iter().map(|c| c.event_time).max().unwrap();
        for partition in 0..8 {
            let mut bot = clicks[0].clone();
            bot.user_agent = "Googlebot/2.1".into();
            bot.event_time = last_time + 60_000;
            send(partition, &bot);
        }
        producer.flush();
    })
}

/// One group run: its members, their arguments and directory.
struct Group {
    args: Vec<String>,
    dir: PathBuf,
    members: Vec<Member>,
    /// What happened, for the report.
    log: Vec<String>,
    started: Instant,
}

impl Group {
    fn live(&self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|&i| self.members[i].alive() && !self.members[i].stopped)
            .collect()
    }

    fn join(&mut self) -> usize {
        let n = self.members.len();
        self.members.push(Member::start(&self.args, &self.dir, n));
        n
    }

    fn note(&mut self, what: String) {
        let at = self.started.elapsed().as_secs_f64();
        self.log.push(format!("{at:.1} s: {what}"));
    }

    /// Lines holding `text` in the logs of `members`.
    fn count(&self, members: &[usize], text: &str) -> usize {
        members.iter().map(|&i| self.members[i].count(text)).sum()
    }

    /// Waits (up to `limit`) until `done` says so, checking every 20 ms; whether it did.
    fn wait(&self, limit: Duration, mut done: impl FnMut(&Group) -> bool) -> bool {
        let until = Instant::now() + limit;
        while Instant::now() < until {
            if done(self) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Kills member `i` now.
    fn kill(&mut self, i: usize) {
        self.members[i].kill();
        let n = self.members[i].n;
        self.note(format!("SIGKILL member {n}"));
    }

    /// Kills the first of `members` to log one of `texts` (within `limit`); which one.
    fn kill_at(
        &mut self,
        members: &[usize],
        texts: &'static [&'static str],
        limit: Duration,
    ) -> Option<usize> {
        for &i in members {
            self.members[i].arm(texts);
        }
        let fired = self.wait(limit, |g| {
            members
                .iter()
                .any(|&i| g.members[i].fired.load(Ordering::Acquire))
        });
        let mut killed = None;
        for &i in members {
            if self.members[i].disarm() && killed.is_none() {
                killed = Some(i);
            }
        }
        match killed {
            Some(i) => {
                let n = self.members[i].n;
                self.note(format!("SIGKILL member {n} at `{}`", texts.join("` or `")));
            }
            None => self.note(format!(
                "no `{}` within {limit:?} (fired: {fired})",
                texts.join("` or `")
            )),
        }
        killed
    }

    /// Waits until every member started since `since` members began has logged a run start
    /// (it joined and restored), up to a minute.
    fn settle(&mut self, since: usize) {
        let newcomers: Vec<usize> = (since..self.members.len()).collect();
        let settled = self.wait(Duration::from_secs(60), |g| {
            newcomers
                .iter()
                .all(|&i| !g.members[i].alive() || g.members[i].count("group: run starts") > 0)
        });
        if !settled {
            self.note("the newcomers did not start a run within 60 s".to_string());
        }
    }

    /// Starts members until [`MEMBERS`] are live.
    fn replace(&mut self) {
        let since = self.members.len();
        while self.live().len() < MEMBERS {
            let n = self.join();
            self.note(format!("member {n} joins"));
        }
        self.settle(since);
    }

    /// Crash point `kind` (the plan's `moments` choose the members and moments); returns the
    /// kind if it happened.
    fn event(&mut self, kind: &'static str, moments: &mut Moments) -> Option<&'static str> {
        let live = self.live();
        let victim = live[moments.next(live.len() as u64) as usize];
        let happened = match kind {
            "one" => {
                std::thread::sleep(moments.millis(1_500));
                self.kill(victim);
                true
            }
            "commit" => self
                .kill_at(&[victim], &["group: commit"], Duration::from_secs(20))
                .is_some(),
            "restore" => {
                // A newcomer joins: the members restore what they are assigned.
                let n = self.join();
                self.note(format!("member {n} joins"));
                let all = self.live();
                let killed = self.kill_at(
                    &all,
                    &["restoring the partitions' state"],
                    Duration::from_secs(30),
                );
                killed.is_some()
            }
            "two" => {
                let other =
                    live[(live.iter().position(|&i| i == victim).unwrap() + 1) % live.len()];
                std::thread::sleep(moments.millis(1_500));
                self.members[victim].kill();
                self.members[other].kill();
                let (a, b) = (self.members[victim].n, self.members[other].n);
                self.note(format!("SIGKILL members {a} and {b} at once"));
                true
            }
            "rebalance" => {
                std::thread::sleep(moments.millis(1_000));
                self.kill(victim);
                // A replacement joins at once; the next member to be assigned or to give up
                // partitions in the rebalance that follows (the newcomer included) is killed.
                let n = self.join();
                self.note(format!("member {n} joins"));
                let all = self.live();
                let texts = &["group: partitions assigned", "group: partitions revoked"];
                if self.kill_at(&all, texts, Duration::from_secs(30)).is_none() {
                    // The first kill was a crash point all the same.
                    return Some("one");
                }
                true
            }
            "sigstop" => {
                std::thread::sleep(moments.millis(1_500));
                let others: Vec<usize> = live.iter().copied().filter(|&i| i != victim).collect();
                // Once the assignments of an earlier change are done (none for 1.5 s).
                let assigned = |g: &Group| g.count(&others, "group: partitions assigned");
                let mut last = (assigned(self), Instant::now());
                self.wait(Duration::from_secs(20), |g| {
                    let now = assigned(g);
                    if now != last.0 {
                        last = (now, Instant::now());
                    }
                    last.1.elapsed() > Duration::from_millis(1_500)
                });
                send_signal("STOP", self.members[victim].pid);
                self.members[victim].stopped = true;
                let n = self.members[victim].n;
                self.note(format!("SIGSTOP member {n}"));
                // Until the others took its partitions: its session (6 s after its last
                // heartbeat, at most 1 s before the stop) expired first. Then a moment.
                std::thread::sleep(Duration::from_secs(4));
                let before = assigned(self);
                let taken = self.wait(Duration::from_secs(60), |g| assigned(g) > before);
                std::thread::sleep(moments.millis(2_000));
                send_signal("CONT", self.members[victim].pid);
                self.members[victim].stopped = false;
                self.note(format!(
                    "SIGCONT member {n} (its partitions taken: {taken})"
                ));
                taken
            }
            _ => unreachable!("{kind}"),
        };
        happened.then_some(kind)
    }
}

/// The kinds of crash points a plan draws from.
const KINDS: [&str; 6] = ["one", "commit", "restore", "two", "rebalance", "sigstop"];

/// One seed: a group run with [`EVENTS`] crash points; its crash points, the difference of its
/// committed counts from the batch computation, what else went wrong, and what happened.
fn group_run(
    case: &str,
    seed: u64,
    dir: &Path,
    extra: &[&str],
) -> (Vec<CrashPoint>, Diff, String, Vec<String>, String) {
    let mut moments = Moments::new(case, seed);
    let prefix = format!("ks-{case}-s{seed}-{}-{}-", std::process::id(), now_ms());
    let group_name = format!("{prefix}job");
    let mut args = seed_job_args(&prefix, 300);
    let p = args.iter().position(|a| a == "-p").unwrap();
    args[p + 1] = "1".to_string();
    args.extend(["--group", &group_name].map(str::to_string));
    args.extend(extra.iter().map(|a| a.to_string()));
    let mut group = Group {
        args,
        dir: dir.to_path_buf(),
        members: Vec::new(),
        log: Vec::new(),
        started: Instant::now(),
    };
    // The first member creates the topics; the others join once they exist.
    group.join();
    wait_for_partitions(&format!("{prefix}clicks"), 8);
    wait_for_partitions(&format!("{group_name}-by-user-repartition"), 8);
    group.join();
    group.join();
    group.settle(0);
    let (clicks, expected) = input();
    let writer = write_input(format!("{prefix}clicks"), clicks);
    let counts_topic = format!("{prefix}agg-clicks");
    // The first crash point once the group commits counts.
    let _ = read_topic(&counts_topic, 1, Duration::from_secs(120), Duration::ZERO);
    group.note("the first counts are committed".to_string());
    let mut points = Vec::new();
    for _ in 0..EVENTS {
        let kind = moments.pick(&KINDS);
        if let Some(kind) = group.event(kind, &mut moments) {
            points.push(CrashPoint { kind, commit: None });
        }
        group.replace();
        std::thread::sleep(moments.millis(1_000));
    }
    writer.join().unwrap();
    group.note("the input is written".to_string());

    let lines = read_topic(
        &counts_topic,
        expected.len(),
        Duration::from_secs(240),
        Duration::from_secs(5),
    );
    group.note(format!("{} count lines read", lines.len()));
    let mut seen: BTreeMap<(u64, i64), Vec<u64>> = BTreeMap::new();
    let mut problems = Vec::new();
    for line in &lines {
        match serde_json::from_str::<UserCount>(line) {
            Ok(count) => seen
                .entry((count.user_id, count.window_start))
                .or_default()
                .push(count.count),
            Err(e) => problems.push(format!("not a count: {line}: {e}")),
        }
    }
    let mut diff = Diff::default();
    let (mut lost, mut twice, mut wrong) = (Vec::new(), Vec::new(), Vec::new());
    for (key, want) in &expected {
        match seen.get(key) {
            None => {
                diff.lost += 1;
                lost.push(*key);
            }
            Some(got) => {
                if got[0] != *want {
                    diff.wrong += 1;
                    wrong.push((*key, got[0], Some(*want)));
                }
                if got.len() > 1 {
                    diff.duplicated += got.len() as u64 - 1;
                    twice.push((*key, got.clone()));
                }
            }
        }
    }
    for (key, got) in &seen {
        if !expected.contains_key(key) {
            diff.wrong += got.len() as u64;
            wrong.push((*key, got[0], None));
        }
    }
    let examples = format!(
        " lost (first 3 of {}): {:?}; duplicated (first 3 of {}): {:?}; wrong (first 3 of {}): {:?}",
        lost.len(),
        &lost[..lost.len().min(3)],
        twice.len(),
        &twice[..twice.len().min(3)],
        wrong.len(),
        &wrong[..wrong.len().min(3)]
    );
    let started = group.members.len();
    let log = group.log.join("; ");
    drop(group);
    if diff.is_clean() && problems.is_empty() {
        let topics: Vec<String> = ["clicks", "agg-clicks", "late-clicks", "clicks-dlq"]
            .iter()
            .map(|t| format!("{prefix}{t}"))
            .chain([format!("{group_name}-by-user-repartition")])
            .collect();
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        let _ = riffle_kafka::delete_topics(&KafkaConnection::new(bootstrap()), &names);
    } else {
        let logs: Vec<String> = (0..started)
            .map(|n| {
                let text = std::fs::read_to_string(dir.join(format!("member-{n}.log")))
                    .unwrap_or_default();
                let text: String = text
                    .lines()
                    .filter(|l| !l.starts_with("kafka group"))
                    .collect::<Vec<_>>()
                    .join("\n");
                format!("--- member {n} (last 15 lines):\n{}", tail(&text, 15))
            })
            .collect();
        problems.push(format!("topics {prefix}*\n{}", logs.join("\n")));
    }
    (points, diff, examples, problems, log)
}

/// One case: the seeds the budget allows, each a group run.
fn suite(case: &str, test: &str, extra: &[&str], ci_seeds: u64) {
    let budget = Budget::from_env(ci_seeds);
    let mut tally = Tally::new(case, test);
    let base = tempfile::tempdir().unwrap();
    while let Some(seed) = budget.next_seed(&tally) {
        let dir = base.path().join(format!("seed-{seed}"));
        std::fs::create_dir_all(&dir).unwrap();
        let (points, diff, examples, mut problems, log) = group_run(case, seed, &dir, extra);
        if !diff.is_clean() || !problems.is_empty() {
            problems.push(format!("files kept in {}", keep(&dir, case, seed)));
        }
        eprintln!("{case} seed {seed}: {log}");
        tally.seed(
            seed,
            points,
            vec![("agg-clicks".to_string(), diff, examples)],
            problems,
            &log,
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
    tally.finish();
}

#[test]
fn kill_9_members_of_a_process_group() {
    suite(
        "group-heap",
        "group::kill_9_members_of_a_process_group",
        &[],
        1,
    );
}

/// The same on RocksDB state with a standby replica, where issue 27's first item happened (in
/// the long run only: `scripts/kill-suite.sh --long`).
#[cfg(feature = "rocksdb")]
#[test]
#[ignore = "long run only (scripts/kill-suite.sh --long)"]
fn kill_9_members_of_a_process_group_on_rocksdb() {
    suite(
        "group-rocksdb",
        "group::kill_9_members_of_a_process_group_on_rocksdb",
        &["--state-backend", "rocksdb", "--num-standby-replicas", "1"],
        1,
    );
}
