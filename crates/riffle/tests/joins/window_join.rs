//! Window join and co-group: exact outputs on small inputs with tumbling, sliding and session
//! windows, late records, parallelism 1 to 3, and (proptest) equality with a batch join computed
//! with nested loops over windows assigned in the test, for any disorder within the bound.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use riffle::sink::CollectSink;
use riffle::time::WatermarkStrategy;
use riffle::window::{Session, Sliding, Tumbling, Windows};
use riffle::{DataStream, Either, EnvConfig, OutputTag, Result, StreamEnv};

/// A view: (user, view id, time).
type View = (u64, u32, i64);
/// A click: (user, click id, time).
type Click = (u64, u64, i64);

fn sources(
    env: &StreamEnv,
    views: Vec<View>,
    clicks: Vec<Click>,
    bound: i64,
) -> (DataStream<View>, DataStream<Click>) {
    let bound = Duration::from_millis(bound as u64);
    (
        env.from_iter_with_watermarks(
            views,
            WatermarkStrategy::bounded_out_of_orderness(bound).with_timestamps(|v: &View| v.2),
        ),
        env.from_iter_with_watermarks(
            clicks,
            WatermarkStrategy::bounded_out_of_orderness(bound).with_timestamps(|c: &Click| c.2),
        ),
    )
}

/// Joins views and clicks per user in `windows`: (window start, view id, click id) per pair.
fn join(
    env: &StreamEnv,
    views: Vec<View>,
    clicks: Vec<Click>,
    windows: Windows,
) -> CollectSinkOut<(u64, i64, u32, u64)> {
    let (sink, out) = CollectSink::new();
    let (v, c) = sources(env, views, clicks, 100);
    v.join(&c)
        .where_key(|v| v.0)
        .equal_to(|c| c.0)
        .window(windows)
        .flat_apply(|v, c, out| {
            let start = out.window().start;
            out.emit((v.0, start, v.1, c.1))
        })
        .sink(sink);
    out
}

type CollectSinkOut<T> = riffle::sink::Collected<T>;

#[test]
fn a_tumbling_join_pairs_the_records_of_one_key_and_window() -> Result<()> {
    let env = StreamEnv::with_config(EnvConfig::deterministic());
    let views = vec![(1, 1, 1_000), (1, 2, 9_000), (2, 3, 2_000), (1, 4, 12_000)];
    let clicks = vec![(1, 10, 5_000), (1, 11, 9_999), (2, 12, 10_000), (3, 13, 1)];
    let out = join(&env, views, clicks, Tumbling::of(Duration::from_secs(10)));
    env.execute()?;
    // Window [0, 10 s) of user 1: views 1, 2 × clicks 10, 11. User 2's view and click are in
    // different windows; user 3 has no view; view 4 has no click in its window.
    assert_eq!(
        out.sorted(),
        vec![(1, 0, 1, 10), (1, 0, 1, 11), (1, 0, 2, 10), (1, 0, 2, 11)]
    );
    Ok(())
}

#[test]
fn join_results_carry_the_windows_last_millisecond() -> Result<()> {
    let env = StreamEnv::with_config(EnvConfig::deterministic());
    let (sink, out) = CollectSink::new();
    let (v, c) = sources(&env, vec![(1, 1, 3)], vec![(1, 2, 7)], 0);
    v.join(&c)
        .where_key(|v| v.0)
        .equal_to(|c| c.0)
        .window(Tumbling::of(Duration::from_millis(10)))
        .apply(|v, c| (v.1, c.1))
        .sink(sink);
    env.execute()?;
    let records = out.records();
    assert_eq!(records.len(), 1);
    assert_eq!(
        (records[0].value, records[0].timestamp()),
        ((1, 2), Some(9))
    );
    Ok(())
}

#[test]
fn a_sliding_join_pairs_them_in_every_window_they_share() -> Result<()> {
    let env = StreamEnv::with_config(EnvConfig::deterministic());
    // Windows of 10 s every 5 s: 7 s and 12 s share [5, 15); 2 s and 7 s share [0, 10).
    let out = join(
        &env,
        vec![(1, 1, 7_000)],
        vec![(1, 10, 2_000), (1, 11, 12_000)],
        Sliding::of(Duration::from_secs(10), Duration::from_secs(5)),
    );
    env.execute()?;
    assert_eq!(out.sorted(), vec![(1, 0, 1, 10), (1, 5_000, 1, 11)]);
    Ok(())
}

#[test]
fn a_session_join_spans_the_records_of_both_streams() -> Result<()> {
    let env = StreamEnv::with_config(EnvConfig::deterministic());
    // Gap 3 s: view at 1 s, click at 3.5 s, view at 6 s make one session (each within 3 s of
    // the previous record of either stream); the click at 20 s is alone.
    let out = join(
        &env,
        vec![(1, 1, 1_000), (1, 2, 6_000)],
        vec![(1, 10, 3_500), (1, 11, 20_000)],
        Session::with_gap(Duration::from_secs(3)),
    );
    env.execute()?;
    assert_eq!(out.sorted(), vec![(1, 1_000, 1, 10), (1, 1_000, 2, 10)]);
    Ok(())
}

#[test]
fn a_co_group_sees_both_sides_also_when_one_is_empty() -> Result<()> {
    let env = StreamEnv::with_config(EnvConfig::deterministic());
    let (sink, out) = CollectSink::new();
    let (v, c) = sources(
        &env,
        vec![(1, 1, 1_000), (1, 2, 2_000), (2, 3, 3_000)],
        vec![(1, 10, 1_500), (3, 11, 4_000), (1, 12, 15_000)],
        0,
    );
    v.co_group(&c)
        .where_key(|v| v.0)
        .equal_to(|c| c.0)
        .window(Tumbling::of(Duration::from_secs(10)))
        .apply(|user, views, clicks, out| {
            let views: Vec<u32> = views.iter().map(|v| v.1).collect();
            let clicks: Vec<u64> = clicks.iter().map(|c| c.1).collect();
            let start = out.window().start;
            out.emit((*user, start, views, clicks))
        })
        .sink(sink);
    env.execute()?;
    assert_eq!(
        out.sorted(),
        vec![
            (1, 0, vec![1, 2], vec![10]),
            (1, 10_000, vec![], vec![12]),
            (2, 0, vec![3], vec![]),
            (3, 0, vec![], vec![11]),
        ]
    );
    Ok(())
}

#[test]
fn late_records_of_either_stream_go_to_the_late_output() -> Result<()> {
    let env = StreamEnv::with_config(EnvConfig::deterministic());
    let (sink, out) = CollectSink::new();
    let (late_sink, late_out) = CollectSink::new();
    let late = OutputTag::<Either<View, Click>>::new("late");
    // Monotonous watermarks: a record behind its stream's latest is late once both streams'
    // watermarks passed its window.
    let strategy_v = WatermarkStrategy::monotonous().with_timestamps(|v: &View| v.2);
    let strategy_c = WatermarkStrategy::monotonous().with_timestamps(|c: &Click| c.2);
    let v = env.from_iter_with_watermarks(
        vec![(1, 1, 1_000), (1, 2, 25_000), (1, 3, 2_000)],
        strategy_v,
    );
    let c = env.from_iter_with_watermarks(
        vec![(1, 10, 1_500), (1, 11, 30_000), (1, 12, 500)],
        strategy_c,
    );
    let joined = v
        .join(&c)
        .where_key(|v| v.0)
        .equal_to(|c| c.0)
        .window(Tumbling::of(Duration::from_secs(10)))
        .side_output_late(&late)
        .apply(|v, c| (v.1, c.1));
    joined.get_side_output(&late).sink(late_sink);
    joined.sink(sink);
    let result = env.execute()?;
    // Whether the records at 2 000 and 500 are late depends on when the other stream's
    // watermark arrived; every record is joined or in the late output, none lost.
    let late_records = late_out.values();
    let pairs = out.sorted();
    let late_view = late_records.contains(&Either::Left((1, 3, 2_000)));
    let late_click = late_records.contains(&Either::Right((1, 12, 500)));
    let mut expected = vec![(1, 10)];
    if !late_view {
        expected.push((3, 10));
    }
    if !late_click {
        expected.push((1, 12));
    }
    if !late_view && !late_click {
        expected.push((3, 12));
    }
    expected.sort();
    assert_eq!(pairs, expected);
    let metrics = result.metrics.operator_total("WindowJoin").unwrap();
    assert_eq!(metrics.late_records_side_output, late_records.len() as u64);
    assert_eq!(metrics.late_records_dropped, 0);
    Ok(())
}

#[test]
fn a_window_join_gives_the_same_pairs_at_parallelism_1_2_and_3() -> Result<()> {
    let views: Vec<View> = (0..800u32)
        .map(|i| ((i % 30) as u64, i, i as i64 * 50 - (i as i64 * 31 % 90)))
        .collect();
    let clicks: Vec<Click> = (0..500u64)
        .map(|i| (i % 30, i, i as i64 * 80 - (i as i64 * 17 % 90)))
        .collect();
    for windows in [
        Tumbling::of(Duration::from_secs(1)),
        Sliding::of(Duration::from_secs(2), Duration::from_millis(500)),
        Session::with_gap(Duration::from_millis(400)),
    ] {
        let expected = batch_join(&views, &clicks, windows);
        assert!(expected.len() > 50, "{}", expected.len());
        for parallelism in [1, 2, 3] {
            let env = StreamEnv::with_config(EnvConfig {
                parallelism,
                ..EnvConfig::default()
            });
            let out = join(&env, views.clone(), clicks.clone(), windows);
            let result = env.execute()?;
            assert_eq!(out.sorted(), expected, "p={parallelism} {windows:?}");
            let metrics = result.metrics.operator_total("WindowJoin").unwrap();
            assert_eq!(metrics.late_records_dropped, 0);
        }
    }
    Ok(())
}

/// The window join as a batch computation: windows assigned here, then every pair of a key in
/// a window; (user, window start, view id, click id).
fn batch_join(views: &[View], clicks: &[Click], windows: Windows) -> Vec<(u64, i64, u32, u64)> {
    // Each record's windows, as starts.
    let starts = |ts: i64, user: u64, sessions: &BTreeMap<u64, Vec<(i64, i64)>>| -> Vec<i64> {
        match windows {
            Windows::Tumbling { size, .. } => vec![ts - ts.rem_euclid(size)],
            Windows::Sliding { size, slide, .. } => {
                let last = ts - ts.rem_euclid(slide);
                (0..)
                    .map(|k| last - k * slide)
                    .take_while(|s| s + size > ts)
                    .collect()
            }
            Windows::Session { .. } => sessions[&user]
                .iter()
                .filter(|(from, to)| *from <= ts && ts < *to)
                .map(|(from, _)| *from)
                .collect(),
            other => unimplemented!("the test draws no {other:?}"),
        }
    };
    // Sessions over both streams' times per user: a record starts a new session when it comes
    // more than a gap after the previous one (windows that touch merge, as in Flink).
    let mut sessions: BTreeMap<u64, Vec<(i64, i64)>> = BTreeMap::new();
    if let Windows::Session { gap, .. } = windows {
        let mut times: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
        for v in views {
            times.entry(v.0).or_default().push(v.2);
        }
        for c in clicks {
            times.entry(c.0).or_default().push(c.2);
        }
        for (user, mut ts) in times {
            ts.sort();
            let list = sessions.entry(user).or_default();
            for t in ts {
                match list.last_mut() {
                    Some((_, to)) if t <= *to => *to = t + gap,
                    _ => list.push((t, t + gap)),
                }
            }
        }
    }
    let mut out = Vec::new();
    for v in views {
        for c in clicks {
            if v.0 != c.0 {
                continue;
            }
            let (a, b) = (starts(v.2, v.0, &sessions), starts(c.2, c.0, &sessions));
            for s in a.iter().filter(|s| b.contains(s)) {
                out.push((v.0, *s, v.1, c.1));
            }
        }
    }
    out.sort();
    out
}

/// An arrival order in which no record comes more than `disorder` ms after a later one.
fn arrivals<T: Clone>(
    mut records: Vec<T>,
    time: fn(&T) -> i64,
    disorder: i64,
    seeds: &[u32],
) -> Vec<T> {
    records.sort_by_key(time);
    let mut keyed: Vec<(i64, std::cmp::Reverse<usize>, T)> = records
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let seed = seeds[i % seeds.len()];
            let shift = match seed % 3 {
                0 => disorder,
                1 => 0,
                _ => i64::from(seed / 3) % (disorder + 1),
            };
            (time(&r) - shift, std::cmp::Reverse(i), r)
        })
        .collect();
    keyed.sort_by_key(|k| (k.0, k.1));
    keyed.into_iter().map(|(_, _, r)| r).collect()
}

fn any_windows() -> impl Strategy<Value = Windows> {
    prop_oneof![
        (1u64..8).prop_map(|n| Tumbling::of(Duration::from_millis(n * 10))),
        (1u64..4, 1u64..4).prop_map(|(k, n)| Sliding::of(
            Duration::from_millis(k * n * 10),
            Duration::from_millis(n * 10)
        )),
        (1u64..6).prop_map(|n| Session::with_gap(Duration::from_millis(n * 10))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn the_window_join_equals_a_nested_loop_join_over_assigned_windows(
        views in prop::collection::vec((0u64..3, 0i64..60), 0..40),
        clicks in prop::collection::vec((0u64..3, 0i64..60), 0..40),
        windows in any_windows(),
        seeds in prop::collection::vec(any::<u32>(), 1..10),
    ) {
        let views: Vec<View> = views.iter().enumerate().map(|(i, &(u, t))| (u, i as u32, t * 5)).collect();
        let clicks: Vec<Click> = clicks.iter().enumerate().map(|(i, &(u, t))| (u, i as u64, t * 5)).collect();
        let expected = batch_join(&views, &clicks, windows);
        let env = StreamEnv::with_config(EnvConfig::deterministic());
        let out = join(
            &env,
            arrivals(views, |v| v.2, 20, &seeds),
            arrivals(clicks, |c| c.2, 20, &seeds),
            windows,
        );
        let result = env.execute().unwrap();
        prop_assert_eq!(out.sorted(), expected);
        prop_assert_eq!(result.metrics.operator_total("WindowJoin").unwrap().late_records_dropped, 0);
    }
}
