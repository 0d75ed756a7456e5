//! Scenario 3, late events: the subway click of 15:42 arriving at 15:48, under the three settings
//! the seed compares. Exact outcomes.

use riffle_cli::demos::late_events::{LateEventsArgs, LateRun, SUBWAY_USER, run};
use riffle_cli::demos::{EngineArgs, UserCount};
use riffle_clicks::DEFAULT_START_TIME;

fn count(minute: i64, count: u64, update: bool) -> UserCount {
    let start = DEFAULT_START_TIME + (minute - 40) * 60_000;
    UserCount {
        user_id: SUBWAY_USER,
        window_start: start,
        window_end: start + 60_000,
        count,
        update,
    }
}

fn time(minute: i64, second: i64) -> i64 {
    DEFAULT_START_TIME + (minute - 40) * 60_000 + second * 1000
}

fn late_times(run: &LateRun) -> Vec<i64> {
    run.late.iter().map(|c| c.event_time).collect()
}

#[test]
fn the_subway_click_is_late_then_updated_then_on_time() {
    let dir = tempfile::tempdir().unwrap();
    let args = LateEventsArgs {
        input: None,
        out_of_orderness_secs: None,
        lateness_secs: None,
        window_secs: 60.0,
        engine: EngineArgs {
            output: Some(dir.path().join("out")),
            ..EngineArgs::default()
        },
    };
    let runs = run(&args).unwrap();
    assert_eq!(runs.len(), 3);

    // 1) 5 s out of order, no lateness: both late clicks go to the side output.
    assert_eq!(
        runs[0].subway_counts,
        vec![count(42, 1, false), count(44, 1, false)]
    );
    assert_eq!(late_times(&runs[0]), vec![time(44, 50), time(42, 10)]);
    assert_eq!(runs[0].late_counter, 2);

    // 2) + 30 s lateness: the 25-second-late click updates its window; the subway click is still late.
    assert_eq!(
        runs[1].subway_counts,
        vec![count(42, 1, false), count(44, 1, false), count(44, 2, true)]
    );
    assert_eq!(late_times(&runs[1]), vec![time(42, 10)]);
    assert_eq!(runs[1].late_counter, 1);

    // 3) 5 min out of order: both are on time.
    assert_eq!(
        runs[2].subway_counts,
        vec![count(42, 2, false), count(44, 2, false)]
    );
    assert!(runs[2].late.is_empty());
    assert_eq!(runs[2].late_counter, 0);

    // The late clicks are written unchanged.
    let written = crate::sorted_lines(&dir.path().join("out/2/late-clicks"));
    assert_eq!(
        written,
        vec![serde_json::to_string(&runs[1].late[0]).unwrap()]
    );
}
