//! Broadcast state: rules reach every subtask; keyed and non-keyed functions read them; event-time
//! rule versions give exact answers; the state survives a snapshot (harness) and real savepoints
//! restored at more and fewer subtasks (p=1 -> 3, p=3 -> 1), where every subtask gets the whole
//! state.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use riffle::checkpoint::{CheckpointConfig, RestoreFrom};
use riffle::operators::{
    BroadcastContext, BroadcastProcess, BroadcastProcessFunction, BroadcastStateDeclarations,
    Collector, KeyedBroadcastProcess, KeyedBroadcastProcessFunction, KeyedReadOnlyBroadcastContext,
    OperatorContext, ReadOnlyBroadcastContext,
};
use riffle::sink::CollectSink;
use riffle::source::datagen::DatagenSource;
use riffle::source::function::FnGenerator;
use riffle::state::{MapStateDescriptor, TimeDomain, ValueStateDescriptor};
use riffle::testing::{
    MemoryKvBackend, Step, assert_snapshot_round_trip, assert_snapshot_round_trip_on,
};
use riffle::time::WatermarkStrategy;
use riffle::{Either, EnvConfig, Result, StreamEnv, Timestamp};

/// Rules by name: a threshold.
const RULES: MapStateDescriptor<String, u64> = MapStateDescriptor::new("rules");

/// Reports, per subtask, every rule it received and, at the end, how many rules it holds.
#[derive(Clone, Default)]
struct Census {
    subtask: usize,
}

impl BroadcastProcessFunction<u64, (String, u64), String> for Census {
    fn open(&mut self, ctx: &OperatorContext) -> Result<()> {
        self.subtask = ctx.subtask;
        Ok(())
    }
    fn process_element(
        &mut self,
        value: u64,
        ctx: &mut ReadOnlyBroadcastContext<'_, '_, String>,
    ) -> Result<()> {
        let rules = ctx.broadcast_state(&RULES)?;
        let passed = rules.values().filter(|&&t| value >= t).count();
        ctx.emit(format!("event {value} passes {passed}"))
    }
    fn process_broadcast_element(
        &mut self,
        (name, threshold): (String, u64),
        ctx: &mut BroadcastContext<'_, '_, String>,
    ) -> Result<()> {
        ctx.broadcast_state(&RULES)?.insert(name.clone(), threshold);
        let subtask = self.subtask;
        ctx.emit(format!("subtask {subtask} got {name}"))
    }
    fn close(&mut self, _: &mut Collector<'_, String>) -> Result<()> {
        Ok(())
    }
}

#[test]
fn every_subtask_gets_every_rule_once_and_events_read_them() -> Result<()> {
    for parallelism in [1, 3] {
        let env = StreamEnv::with_config(EnvConfig {
            parallelism,
            ..EnvConfig::default()
        });
        let (sink, out) = CollectSink::new();
        let rules = env
            .from_iter((0..5u64).map(|i| (format!("rule-{i}"), i * 100)))
            .broadcast_state(&RULES);
        env.from_iter(0..1_000u64)
            .rebalance()
            .connect_broadcast(&rules)
            .process_function(Census::default())
            .sink(sink);
        env.execute()?;
        let values = out.values();
        let got: Vec<&String> = values.iter().filter(|v| v.contains(" got ")).collect();
        let expected: BTreeSet<String> = (0..parallelism)
            .flat_map(|s| (0..5).map(move |r| format!("subtask {s} got rule-{r}")))
            .collect();
        assert_eq!(got.len(), expected.len(), "each rule once per subtask");
        assert_eq!(got.into_iter().cloned().collect::<BTreeSet<_>>(), expected);
        let events: Vec<&String> = values.iter().filter(|v| v.starts_with("event")).collect();
        assert_eq!(events.len(), 1_000, "p={parallelism}");
        // Rules may arrive before or after an event (the inputs have no order between them),
        // but an event never passes more rules than those with a threshold below it.
        for event in events {
            let words: Vec<&str> = event.split(' ').collect();
            let (value, passed): (u64, usize) =
                (words[1].parse().unwrap(), words[3].parse().unwrap());
            assert!(passed <= (value / 100 + 1).min(5) as usize, "{event}");
        }
    }
    Ok(())
}

/// A limit per country, valid from an event time on (a rule version).
type Limit = (String, u64, Timestamp);
/// A payment: user, country, amount, event time.
type Payment = (u64, String, u64, Timestamp);

/// Every version of every country's limit.
const LIMITS: MapStateDescriptor<String, BTreeMap<Timestamp, u64>> =
    MapStateDescriptor::new("limits");
/// Payments of the key waiting for the watermark, by time.
const WAITING: MapStateDescriptor<Timestamp, (String, u64)> = MapStateDescriptor::new("waiting");
const ALERTS: ValueStateDescriptor<u64> = ValueStateDescriptor::new("alerts");

/// Alerts on payments above their country's limit *as of the payment's time*: a payment waits
/// for the watermark (a timer), which is also past every limit version up to its time, so the
/// answer does not depend on which input's records came first.
#[derive(Clone)]
struct OverLimit;

impl KeyedBroadcastProcessFunction<u64, Payment, Limit, String> for OverLimit {
    fn process_element(
        &mut self,
        _: &u64,
        (_, country, amount, at): Payment,
        ctx: &mut KeyedReadOnlyBroadcastContext<'_, '_, '_, u64, String>,
    ) -> Result<()> {
        ctx.map(&WAITING).put(at, (country, amount))?;
        ctx.register_event_time_timer(at);
        Ok(())
    }
    fn process_broadcast_element(
        &mut self,
        (country, limit, from): Limit,
        ctx: &mut BroadcastContext<'_, '_, String>,
    ) -> Result<()> {
        ctx.broadcast_state(&LIMITS)?
            .entry(country)
            .or_default()
            .insert(from, limit);
        Ok(())
    }
    fn on_timer(
        &mut self,
        user: &u64,
        at: Timestamp,
        _: TimeDomain,
        ctx: &mut KeyedReadOnlyBroadcastContext<'_, '_, '_, u64, String>,
    ) -> Result<()> {
        let Some((country, amount)) = ctx.map(&WAITING).get(&at)? else {
            return Ok(());
        };
        ctx.map(&WAITING).remove(&at)?;
        let limit = ctx
            .broadcast_state(&LIMITS)?
            .get(&country)
            .and_then(|versions| versions.range(..=at).next_back().map(|(_, l)| *l));
        if let Some(limit) = limit.filter(|&l| amount > l) {
            let n = ctx.value(&ALERTS).get()?.unwrap_or(0) + 1;
            ctx.value(&ALERTS).set(n)?;
            ctx.emit(format!(
                "user {user} at {at}: {amount} > {limit} (alert {n})"
            ))?;
        }
        Ok(())
    }
}

const COUNTRIES: [&str; 3] = ["de", "fr", "it"];

fn payments() -> Vec<Payment> {
    (0..600u64)
        .map(|i| {
            let country = COUNTRIES[(i % 3) as usize].to_string();
            (i % 17, country, (i * 37) % 100, i as Timestamp * 100)
        })
        .collect()
}

fn limits() -> Vec<Limit> {
    // Each country's limit changes every 10 s of event time; "it" has none before 20 s.
    (0..6)
        .flat_map(|v| {
            COUNTRIES
                .iter()
                .enumerate()
                .filter(move |(_, country)| **country != "it" || v >= 2)
                .map(move |(c, country)| {
                    (
                        country.to_string(),
                        30 + 10 * v as u64 + c as u64 * 5,
                        v * 10_000,
                    )
                })
        })
        .collect()
}

/// The alerts computed directly from the inputs.
fn expected_alerts() -> Vec<String> {
    let limits = limits();
    let mut alerts: HashMap<u64, u64> = HashMap::new();
    let mut out = Vec::new();
    for (user, country, amount, at) in payments() {
        let limit = limits
            .iter()
            .filter(|(c, _, from)| *c == country && *from <= at)
            .max_by_key(|(_, _, from)| *from)
            .map(|(_, l, _)| *l);
        if let Some(limit) = limit.filter(|&l| amount > l) {
            let n = alerts.entry(user).or_default();
            *n += 1;
            out.push(format!(
                "user {user} at {at}: {amount} > {limit} (alert {n})"
            ));
        }
    }
    out.sort();
    out
}

#[test]
fn keyed_broadcast_judges_each_record_by_the_rule_version_of_its_time() -> Result<()> {
    let expected = expected_alerts();
    assert!(expected.len() > 50, "the test has alerts to find");
    for parallelism in [1, 2, 3] {
        let env = StreamEnv::with_config(EnvConfig {
            parallelism,
            ..EnvConfig::default()
        });
        let (sink, out) = CollectSink::new();
        let limits = env
            .from_iter_with_watermarks(
                limits(),
                WatermarkStrategy::monotonous().with_timestamps(|l: &Limit| l.2),
            )
            .broadcast_state(&LIMITS);
        env.from_iter_with_watermarks(
            payments(),
            WatermarkStrategy::monotonous().with_timestamps(|p: &Payment| p.3),
        )
        .key_by(|p| p.0)
        .connect_broadcast(&limits)
        .process_function(OverLimit)
        .sink(sink);
        // The rules go to every subtask, the payments by key.
        let plan = env.plan()?;
        let into = |ship: &str| {
            plan.edges
                .iter()
                .filter(|e| e.ship == ship)
                .map(|e| plan.vertices[e.to].operators[0].clone())
                .collect::<Vec<_>>()
        };
        let op = "KeyedBroadcastProcess".to_string();
        assert!(into("BROADCAST").contains(&op), "{plan:?}");
        assert!(into("HASH").contains(&op), "{plan:?}");
        env.execute()?;
        assert_eq!(out.sorted(), expected, "p={parallelism}");
    }
    Ok(())
}

#[test]
fn broadcast_operators_survive_a_snapshot_at_any_point() -> Result<()> {
    let script: Vec<Step<Either<u64, (String, u64)>>> = (0..40u64)
        .flat_map(|i| {
            let mut steps = vec![Step::Record(Either::Left(i * 13 % 500), i as i64 * 10)];
            if i % 7 == 0 {
                steps.push(Step::Record(
                    Either::Right((format!("rule-{}", i % 3), i * 10)),
                    i as i64 * 10,
                ));
            }
            if i % 5 == 0 {
                steps.push(Step::Watermark(i as i64 * 10));
            }
            steps
        })
        .collect();
    let declared = || {
        let mut declarations = BroadcastStateDeclarations::default();
        declarations.declare(&RULES);
        declarations
    };
    assert_snapshot_round_trip(
        || BroadcastProcess::new(Census::default(), declared()),
        &script,
    )?;

    let mut limits_declared = BroadcastStateDeclarations::default();
    limits_declared.declare(&LIMITS);
    let script: Vec<Step<Either<Payment, Limit>>> = {
        let (mut payments, limits) = (payments(), limits());
        payments.truncate(120);
        let mut steps = Vec::new();
        let mut limits = limits.into_iter().peekable();
        for payment in payments {
            let at = payment.3;
            while let Some(limit) = limits.next_if(|l| l.2 <= at) {
                let from = limit.2;
                steps.push(Step::Record(Either::Right(limit), from));
            }
            steps.push(Step::Record(Either::Left(payment), at));
            if at % 500 == 0 {
                steps.push(Step::Watermark(at - 1));
            }
        }
        steps
    };
    // Keyed state byte-encoded in a key-value store (the path RocksDB takes), and on the heap.
    assert_snapshot_round_trip_on(
        &MemoryKvBackend,
        || {
            KeyedBroadcastProcess::new(
                Arc::new(|p: &Payment| p.0),
                OverLimit,
                limits_declared.clone(),
            )
        },
        &script,
    )?;
    assert_snapshot_round_trip(
        || {
            KeyedBroadcastProcess::new(
                Arc::new(|p: &Payment| p.0),
                OverLimit,
                limits_declared.clone(),
            )
        },
        &script,
    )
}

/// Counts each key's events (keyed state) and tags each with the rules it saw (broadcast state).
#[derive(Clone)]
struct CountAndRules;

const SEEN: ValueStateDescriptor<u64> = ValueStateDescriptor::new("seen");

impl KeyedBroadcastProcessFunction<u64, u64, (String, u64), (u64, u64, usize)> for CountAndRules {
    fn process_element(
        &mut self,
        key: &u64,
        _: u64,
        ctx: &mut KeyedReadOnlyBroadcastContext<'_, '_, '_, u64, (u64, u64, usize)>,
    ) -> Result<()> {
        let seen = ctx.value(&SEEN).get()?.unwrap_or(0) + 1;
        ctx.value(&SEEN).set(seen)?;
        let rules = ctx.broadcast_state(&RULES)?.len();
        ctx.emit((*key, seen, rules))
    }
    fn process_broadcast_element(
        &mut self,
        (name, threshold): (String, u64),
        ctx: &mut BroadcastContext<'_, '_, (u64, u64, usize)>,
    ) -> Result<()> {
        ctx.broadcast_state(&RULES)?.insert(name, threshold);
        Ok(())
    }
}

const EVENTS: u64 = 40_000;
const KEYS: u64 = 50;
const RULE_COUNT: usize = 8;

/// The job: rules (all read at once) broadcast to a keyed operator over paced events; `rules`
/// is the rules source's uid (a new version of the job reads no more rules).
fn rules_job(
    parallelism: usize,
    checkpoints: &Path,
    rules_uid: &str,
    rules: usize,
) -> (StreamEnv, riffle::sink::Collected<(u64, u64, usize)>) {
    let env = StreamEnv::with_config(EnvConfig {
        parallelism,
        checkpoints: CheckpointConfig {
            interval: Some(Duration::from_millis(100)),
            storage: checkpoints.to_str().unwrap().to_string(),
            ..CheckpointConfig::default()
        },
        ..EnvConfig::default()
    });
    let (sink, out) = CollectSink::new();
    let rules = env
        .from_iter((0..rules).map(|i| (format!("rule-{i}"), i as u64)))
        .uid(rules_uid)
        .broadcast_state(&RULES);
    env.from_source(
        DatagenSource::new(FnGenerator::new(|i| i))
            .count(EVENTS)
            .rate(40_000.0)
            .splits(4),
    )
    .uid("events")
    .name("events")
    .key_by(|i| i % KEYS)
    .connect_broadcast(&rules)
    .process_function(CountAndRules)
    .uid("count-and-rules")
    .sink(sink);
    (env, out)
}

/// Runs the job at `from` subtasks, stops it with a savepoint once the rules are in and part of
/// the events read, restores it at `to` subtasks with no more rules coming: every event after the
/// restore sees every rule, on every subtask, and each key's count goes on from the savepoint.
fn restore_rescaled(from: usize, to: usize) {
    let dir = tempfile::tempdir().unwrap();
    let (env, first) = rules_job(from, &dir.path().join("chk1"), "rules", RULE_COUNT);
    let job = env.execute_async().unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let savepoint = job
        .stop_with_savepoint(dir.path().join("savepoint").to_str().unwrap())
        .unwrap();
    let result = job.wait().unwrap();
    let read_first = result.metrics.operator_total("events").unwrap().records_out;
    assert!(
        read_first > 0 && read_first < EVENTS,
        "stopped part-way: {read_first}"
    );
    let first = first.values();
    assert!(
        first.iter().any(|(_, _, rules)| *rules == RULE_COUNT),
        "the rules arrived"
    );

    // A new version of the job: its rules source (another uid) has none.
    let (env, second) = rules_job(to, &dir.path().join("chk2"), "no-more-rules", 0);
    env.configure(|c: &mut EnvConfig| {
        c.checkpoints.restore = Some(RestoreFrom::Savepoint(savepoint.clone()));
        c.checkpoints.allow_non_restored_state = true;
    });
    let result = env.execute().unwrap();
    let read_second = result.metrics.operator_total("events").unwrap().records_out;
    let second = second.values();
    assert_eq!(second.len() as u64, read_second, "{from} -> {to}");
    assert_eq!(
        read_first + read_second,
        EVENTS,
        "{from} -> {to}: resumed where it stopped"
    );
    assert!(
        second.iter().all(|(_, _, rules)| *rules == RULE_COUNT),
        "{from} -> {to}: every subtask restored every rule"
    );
    let subtasks = result
        .metrics
        .operators
        .iter()
        .filter(|o| o.name == "KeyedBroadcastProcess" && o.records_in > 0)
        .count();
    assert_eq!(subtasks, to, "every subtask of {to} had events to judge");
    // Keyed state moved with its key groups: the last count of each key is its total.
    let mut last: BTreeMap<u64, u64> = BTreeMap::new();
    for (key, seen, _) in first.into_iter().chain(second) {
        let entry = last.entry(key).or_default();
        *entry = (*entry).max(seen);
    }
    assert_eq!(last.len() as u64, KEYS);
    assert!(
        last.values().all(|&n| n == EVENTS / KEYS),
        "{from} -> {to}: {last:?}"
    );
}

#[test]
fn broadcast_state_restores_at_more_subtasks() {
    restore_rescaled(1, 3);
}

#[test]
fn broadcast_state_restores_at_fewer_subtasks() {
    restore_rescaled(3, 1);
}

/// A task fails after the rules arrived and the rules source finished: the job restarts from its
/// latest checkpoint, where the rules are only in the broadcast state (the finished source does
/// not read them again), and the exactly-once sink commits each event once.
#[test]
fn broadcast_state_comes_back_after_a_failure() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let env = StreamEnv::with_config(EnvConfig {
        parallelism: 2,
        checkpoints: CheckpointConfig {
            interval: Some(Duration::from_millis(50)),
            storage: dir.path().join("chk").to_str().unwrap().to_string(),
            restart: riffle::checkpoint::RestartStrategy::FixedDelay {
                attempts: 2,
                delay: Duration::from_millis(50),
            },
            ..CheckpointConfig::default()
        },
        ..EnvConfig::default()
    });
    let rules = env
        .from_iter((0..RULE_COUNT).map(|i| (format!("rule-{i}"), i as u64)))
        .uid("rules")
        .name("rules")
        .broadcast_state(&RULES);
    static CRASHED: AtomicBool = AtomicBool::new(false);
    let processed = Arc::new(AtomicU64::new(0));
    env.from_source(
        DatagenSource::new(FnGenerator::new(|i| i))
            .count(EVENTS)
            .rate(40_000.0)
            .splits(2),
    )
    .uid("events")
    .key_by(|i| i % KEYS)
    .connect_broadcast(&rules)
    .process_function(CountAndRules)
    .uid("count-and-rules")
    .map(move |(key, seen, rules)| {
        if processed.fetch_add(1, Ordering::SeqCst) == EVENTS / 2
            && !CRASHED.swap(true, Ordering::SeqCst)
        {
            panic!("a failure half-way, long after the rules arrived");
        }
        format!("{key} {seen} {rules}")
    })
    .uid("crash")
    .sink(riffle::sink::ExactlyOnceFileSink::new(&out))
    .uid("sink");
    let result = env.execute().unwrap();
    assert_eq!(result.restarts, 1);
    assert_eq!(
        result.records_out("rules"),
        0,
        "the finished rules source read nothing after the restore"
    );
    let mut by_key: BTreeMap<u64, Vec<(u64, usize)>> = BTreeMap::new();
    for entry in std::fs::read_dir(&out).unwrap().flatten() {
        if entry.path().is_file() {
            for line in std::fs::read_to_string(entry.path()).unwrap().lines() {
                let fields: Vec<u64> = line
                    .trim_matches('"')
                    .split(' ')
                    .map(|f| f.parse().unwrap())
                    .collect();
                by_key
                    .entry(fields[0])
                    .or_default()
                    .push((fields[1], fields[2] as usize));
            }
        }
    }
    assert_eq!(by_key.len() as u64, KEYS);
    for (key, mut lines) in by_key {
        lines.sort();
        let seen: Vec<u64> = lines.iter().map(|l| l.0).collect();
        assert_eq!(
            seen,
            (1..=EVENTS / KEYS).collect::<Vec<_>>(),
            "key {key}: each event once"
        );
        // Once a subtask had the rules, it kept them across the restore.
        let first_with_rules = lines.iter().position(|l| l.1 == RULE_COUNT).unwrap();
        assert!(
            lines[first_with_rules..].iter().all(|l| l.1 == RULE_COUNT),
            "key {key}: rules lost on restore"
        );
    }
}
