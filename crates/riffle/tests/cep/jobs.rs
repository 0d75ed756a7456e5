//! Patterns in jobs: timeouts, late events, processing time, bad patterns, failures and
//! restores at another parallelism.

use std::time::Duration;

use riffle::cep::{Match, Pattern};
use riffle::record::Timestamp;
use riffle::sink::CollectSink;
use riffle::time::WatermarkStrategy;
use riffle::{EnvConfig, OutputTag, StreamEnv};

use crate::reference::Ev;

/// (card, amount, time)
type Txn = (u64, f64, i64);

#[test]
fn timed_out_partial_matches_go_to_their_side_output() {
    let env = StreamEnv::with_config(EnvConfig::deterministic());
    let (sink, alerts) = CollectSink::new();
    let txns = vec![
        (1u64, 0.5, 1_000i64),
        (2, 0.2, 1_000),
        (2, 40.0, 2_000),
        (1, 900.0, 20_000),
    ];
    let timed_out = OutputTag::<Match<Txn>>::new("timed-out");
    let matches = env
        .from_iter_with_watermarks(
            txns,
            WatermarkStrategy::monotonous().with_timestamps(|t: &Txn| t.2),
        )
        .key_by(|t| t.0)
        .pattern(
            Pattern::begin("small")
                .where_(|t: &Txn| t.1 < 1.0)
                .followed_by("large")
                .where_(|t: &Txn| t.1 > 500.0)
                .within(Duration::from_secs(60)),
        )
        .side_output_timed_out(&timed_out)
        .select(|m: Match<Txn>| (m.first("small").unwrap().0, m.first("large").unwrap().1));
    matches.sink(sink);
    let (timeouts, partials) = CollectSink::new();
    matches.get_side_output(&timed_out).sink(timeouts);
    env.execute().unwrap();
    assert_eq!(alerts.values(), vec![(1, 900.0)]);
    let partials = partials.records();
    assert_eq!(partials.len(), 1, "{partials:?}");
    assert_eq!(partials[0].value.get("small"), &[(2, 0.2, 1_000)]);
    assert_eq!(partials[0].timestamp(), Some(61_000));
}

/// A pattern with every kind of construct, over three keys of generated events.
fn mixed_workload() -> (crate::reference::Spec, Vec<Ev>) {
    use crate::reference::{Kind, Skip, Spec, StageSpec};
    use riffle::cep::Contiguity::*;
    let stage = |kind, letters, entry| StageSpec {
        kind,
        letters,
        rising: false,
        entry,
        min: 1,
        max: Some(1),
        optional: false,
        inner: Relaxed,
        greedy: false,
        until: None,
    };
    let spec = Spec {
        stages: vec![
            stage(Kind::Take, 0b0001, Relaxed),
            StageSpec {
                max: None,
                until: Some(0b1000),
                ..stage(Kind::Take, 0b0010, NonDeterministic)
            },
            stage(Kind::NotFollowedBy, 0b1000, Relaxed),
            StageSpec {
                optional: true,
                ..stage(Kind::Take, 0b0100, Strict)
            },
            stage(Kind::Take, 0b0101, Relaxed),
        ],
        within: Some(400),
        skip: Skip::No,
    };
    // Pseudo-random letters; times 10 ms apart, shuffled by up to 90 ms.
    let mut x = 0x2545_f491_u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut events: Vec<Ev> = (0..6_000)
        .map(|i| Ev {
            key: (next() % 7) as u8,
            letter: (next() % 4) as u8,
            value: 0,
            ts: i * 10,
        })
        .collect();
    let jitter: Vec<i64> = events.iter().map(|_| (next() % 90) as i64).collect();
    let mut order: Vec<usize> = (0..events.len()).collect();
    order.sort_by_key(|i| events[*i].ts + jitter[*i]);
    events = order.into_iter().map(|i| events[i].clone()).collect();
    (spec, events)
}

/// The reference's matches of the mixed workload, sorted.
fn mixed_expected(spec: &crate::reference::Spec, events: &[Ev]) -> Vec<String> {
    let mut sorted = events.to_vec();
    sorted.sort_by_key(|e| e.ts);
    let mut expected: Vec<String> = (0..7u8)
        .flat_map(|key| {
            let of_key: Vec<Ev> = sorted.iter().filter(|e| e.key == key).cloned().collect();
            crate::reference::matches(spec, &of_key)
        })
        .collect();
    expected.sort();
    assert!(expected.len() > 500, "{} matches", expected.len());
    expected
}

/// The mixed workload's job at `parallelism`, checkpointing into `dir/chk` and writing its
/// matches exactly once into `dir/out`; `each` sees every event before the pattern.
fn mixed_job(
    parallelism: usize,
    dir: &std::path::Path,
    spec: &crate::reference::Spec,
    events: &[Ev],
    each: impl Fn(Ev) -> Ev + Send + Sync + Clone + 'static,
) -> StreamEnv {
    use riffle::sink::ExactlyOnceFileSink;
    use riffle::source::datagen::DatagenSource;
    use riffle::source::function::FnGenerator;
    let env = StreamEnv::with_config(riffle::testing::recovering_config(
        parallelism,
        &dir.join("chk"),
        Duration::from_millis(50),
    ));
    // Four splits of interleaved events, whatever the parallelism (a restore at another one
    // goes on where each split stopped).
    let all = std::sync::Arc::new(events.to_vec());
    env.from_source_with_watermarks(
        DatagenSource::new(FnGenerator::new(move |i| all[i as usize].clone()))
            .count(events.len() as u64)
            .splits(4),
        WatermarkStrategy::bounded_out_of_orderness(Duration::from_millis(100))
            .with_timestamps(|e: &Ev| e.ts),
    )
    .uid("events")
    .name("events")
    .map(each)
    .uid("crash")
    .key_by(|e| e.key)
    .pattern(spec.pattern())
    .process(
        |key: &u8, m: Match<Ev>, ctx: &mut riffle::cep::PatternContext<Ev, String>| {
            ctx.emit(crate::reference::show(*key, &m))
        },
    )
    .uid("pattern")
    .sink(ExactlyOnceFileSink::new(dir.join("out")))
    .uid("sink");
    env
}

/// The lines committed under `dir/out` (none before the sink's first commit made it).
fn committed(dir: &std::path::Path) -> Vec<String> {
    let mut lines = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir.join("out")) else {
        return lines;
    };
    for entry in entries.flatten() {
        if entry.path().is_file() {
            let text = std::fs::read_to_string(entry.path()).unwrap();
            lines.extend(text.lines().map(|l| l.trim_matches('"').to_string()));
        }
    }
    lines
}

#[test]
fn a_job_finds_the_reference_matches_at_any_parallelism_after_a_failure() -> riffle::Result<()> {
    let (spec, events) = mixed_workload();
    let expected = mixed_expected(&spec, &events);
    for parallelism in [1, 2, 3] {
        let dir = tempfile::tempdir().unwrap();
        let fail = riffle::testing::fail_once_after::<Ev>(1_500);
        let env = mixed_job(parallelism, dir.path(), &spec, &events, move |e: Ev| {
            if e.ts % 500 == 0 {
                std::thread::sleep(Duration::from_millis(10)); // room for checkpoints
            }
            fail(e)
        });
        let result = env.execute()?;
        assert_eq!(result.restarts, 1, "p={parallelism}");
        assert!(
            result.restores[0] > 0,
            "p={parallelism}: restored from a checkpoint"
        );
        let mut lines = committed(dir.path());
        lines.sort();
        assert_eq!(lines.len(), expected.len(), "p={parallelism}");
        assert_eq!(lines, expected, "p={parallelism}");
    }
    Ok(())
}

/// Stops the job at `from` subtasks with a savepoint part-way (events then wait for the
/// watermark in the operator), restores it at `to`: the matches of both runs together are the
/// reference's, each once.
fn restore_rescaled(from: usize, to: usize) -> riffle::Result<()> {
    use riffle::checkpoint::RestoreFrom;
    let (spec, events) = mixed_workload();
    let expected = mixed_expected(&spec, &events);
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (dir.path().join("first"), dir.path().join("second"));
    // Slow after 2 000 events, so the savepoint lands part-way.
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = seen.clone();
    let env = mixed_job(from, &first, &spec, &events, move |e: Ev| {
        if counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= 2_000 {
            std::thread::sleep(Duration::from_millis(5));
        }
        e
    });
    let job = env.execute_async()?;
    // The savepoint comes once the first run has committed matches of its own.
    while seen.load(std::sync::atomic::Ordering::Relaxed) < 2_000 || committed(&first).is_empty() {
        assert!(!job.is_finished(), "the job ended before the savepoint");
        std::thread::sleep(Duration::from_millis(5));
    }
    let savepoint = job.stop_with_savepoint(dir.path().join("savepoint").to_str().unwrap())?;
    let result = job.wait()?;
    let read = result.metrics.operator_total("events").unwrap().records_out;
    assert!(read < events.len() as u64, "stopped part-way: {read}");
    let env = mixed_job(to, &second, &spec, &events, |e: Ev| e);
    env.configure(|c: &mut EnvConfig| {
        c.checkpoints.restore = Some(RestoreFrom::Savepoint(savepoint.clone()));
    });
    env.execute()?;
    let mut lines = committed(&first);
    lines.extend(committed(&second));
    lines.sort();
    assert_eq!(lines.len(), expected.len(), "{from} -> {to}");
    assert_eq!(lines, expected, "{from} -> {to}");
    Ok(())
}

#[test]
fn partial_matches_and_waiting_events_restore_at_more_subtasks() -> riffle::Result<()> {
    restore_rescaled(2, 3)
}

#[test]
fn partial_matches_and_waiting_events_restore_at_fewer_subtasks() -> riffle::Result<()> {
    restore_rescaled(3, 1)
}

#[test]
fn late_events_go_to_their_side_output_or_are_counted() {
    let env = StreamEnv::with_config(EnvConfig::deterministic());
    let late = OutputTag::<Txn>::new("late");
    let (sink, alerts) = CollectSink::new();
    let (late_sink, late_out) = CollectSink::new();
    // The watermark passed 10 000 when the small transaction at 2 000 arrives: late.
    let txns = vec![
        (1u64, 0.5, 1_000i64),
        (1, 700.0, 10_000),
        (1, 0.1, 2_000),
        (1, 800.0, 11_000),
    ];
    let matches = env
        .from_iter_with_watermarks(
            txns,
            WatermarkStrategy::monotonous().with_timestamps(|t: &Txn| t.2),
        )
        .key_by(|t| t.0)
        .pattern(
            Pattern::begin("small")
                .where_(|t: &Txn| t.1 < 1.0)
                .next("large")
                .where_(|t: &Txn| t.1 > 500.0),
        )
        .side_output_late(&late)
        .select(|m: Match<Txn>| m.first("large").unwrap().2);
    matches.sink(sink);
    matches.get_side_output(&late).sink(late_sink);
    env.execute().unwrap();
    assert_eq!(alerts.values(), vec![10_000]);
    assert_eq!(late_out.values(), vec![(1, 0.1, 2_000)]);
}

#[test]
fn a_pattern_that_cannot_match_fails_the_job_naming_the_stage() {
    let env = StreamEnv::new();
    env.from_iter(vec![(1u64, 1.0, 1i64)])
        .key_by(|t: &Txn| t.0)
        .pattern(Pattern::begin("small").not_next("large"))
        .select(|m: Match<Txn>| m.len())
        .sink(CollectSink::new().0);
    let err = env.execute().unwrap_err().to_string();
    assert!(
        err.contains("`large`: not_next needs a stage after it"),
        "{err}"
    );
}

/// Any transaction, then a larger one, skipping past the last event: a transaction waits for
/// one larger than itself, holding back later matches; emits (first, larger) amounts.
fn then_larger() -> riffle::testing::OperatorHarness<Txn, (f64, f64)> {
    then_larger_with(riffle::cep::PatternOptions::default())
}

fn then_larger_with(
    options: riffle::cep::PatternOptions<Txn>,
) -> riffle::testing::OperatorHarness<Txn, (f64, f64)> {
    use riffle::cep::{AfterMatchSkip, CepOperator, PatternContext};
    let pattern = Pattern::begin("first")
        .followed_by("larger")
        .where_with(|t: &Txn, m| m.last("first").is_some_and(|f| t.1 > f.1))
        .after_match(AfterMatchSkip::skip_past_last_event());
    let op = CepOperator::new(
        |t: &Txn| t.0,
        &pattern,
        |_: &u64, m: Match<Txn>, ctx: &mut PatternContext<Txn, (f64, f64)>| {
            ctx.emit((m.first("first").unwrap().1, m.first("larger").unwrap().1))
        },
    )
    .unwrap()
    .with_options(options);
    riffle::testing::OperatorHarness::builder(op)
        .build()
        .unwrap()
}

/// With a skip strategy a match waits while a partial match that started before it is open; at
/// the end of the input, that one never completes, and the match comes out, in event time and
/// in processing time alike.
#[test]
fn matches_held_for_a_partial_match_come_out_at_the_end_of_the_input() {
    for processing_time in [false, true] {
        // 5.0 waits for one larger than 5.
        let mut h = if processing_time {
            then_larger_with(riffle::cep::PatternOptions::default().in_processing_time())
        } else {
            then_larger()
        };
        for (i, amount) in [5.0, 1.0, 3.0].into_iter().enumerate() {
            h.process((1, amount, 0), i as i64).unwrap();
            h.watermark(i as i64).unwrap();
        }
        assert_eq!(h.take_values(), vec![], "held while 5.0 waits");
        h.watermark(Timestamp::MAX).unwrap();
        h.finish().unwrap();
        assert_eq!(
            h.take_values(),
            vec![(1.0, 3.0)],
            "processing time: {processing_time}"
        );
    }
}

/// Events at the edges of time: the first and last instants an event time can be.
#[test]
fn events_at_the_first_and_last_instants_are_matched() {
    let mut h = then_larger();
    // 5.0 waits (for one larger than 5) while 1.0, 3.0 match: held until the end; 9.0 at
    // the last instant completes 5.0's match, which then comes first.
    h.process((1, 5.0, 0), Timestamp::MIN + 1).unwrap();
    h.process((1, 1.0, 0), Timestamp::MIN + 2).unwrap();
    h.process((1, 3.0, 0), 0).unwrap();
    h.process((1, 9.0, 0), Timestamp::MAX).unwrap();
    h.watermark(Timestamp::MAX).unwrap();
    h.finish().unwrap();
    assert_eq!(h.take_values(), vec![(5.0, 9.0)]);
}

#[test]
fn in_processing_time_events_match_as_they_arrive_and_time_out_on_the_clock() {
    use riffle::cep::{CepOperator, PatternContext, PatternOptions};
    use riffle::testing::OperatorHarness;
    let timed_out = OutputTag::<Match<Txn>>::new("timed-out");
    let op = CepOperator::new(
        |t: &Txn| t.0,
        &Pattern::begin("small")
            .where_(|t: &Txn| t.1 < 1.0)
            .followed_by("large")
            .where_(|t: &Txn| t.1 > 500.0)
            .within(Duration::from_secs(60)),
        |_: &u64, m: Match<Txn>, ctx: &mut PatternContext<Txn, f64>| {
            ctx.emit(m.first("large").unwrap().1)
        },
    )
    .unwrap()
    .with_options(
        PatternOptions::default()
            .in_processing_time()
            .side_output_timed_out(&timed_out),
    );
    let mut h = OperatorHarness::builder(op)
        .processing_time(1_000)
        .side_output(&timed_out)
        .build()
        .unwrap();
    // No timestamps needed; arrival order counts, not the records' own times.
    h.process_untimed((1, 0.5, 99_999)).unwrap();
    h.process_untimed((2, 0.5, 0)).unwrap();
    h.advance_processing_time(Duration::from_secs(30)).unwrap();
    h.process_untimed((1, 900.0, 0)).unwrap();
    assert_eq!(h.take_values(), vec![900.0]);
    h.advance_processing_time(Duration::from_secs(31)).unwrap();
    let partials = h.take_side_output(&timed_out);
    assert_eq!(partials.len(), 1);
    assert_eq!(partials[0].value.first("small"), Some(&(2, 0.5, 0)));
}
