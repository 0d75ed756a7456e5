//! `riffle demo cep`: courier events in files, patterns with timeouts, exact alerts; killed with
//! SIGKILL at a checkpoint, mid-commit and right after its summary, restored each time, the
//! committed alerts equal a run never killed.

use std::path::Path;
use std::time::Duration;

use riffle_cli::demos::cep::{CepArgs, CourierEvent, generate};

use crate::kill_suite::run::{CHECKPOINT, Ended, Kill, Process, Trigger};
use crate::{riffle, sorted_lines, sorted_lines_if_any};

const MINUTE: i64 = 60_000;

fn line(order_id: u64, courier_id: u64, kind: &str, minute: i64) -> String {
    format!(
        r#"{{"order_id":{order_id},"courier_id":{courier_id},"kind":"{kind}","event_time":{}}}"#,
        1_768_491_600_000 + minute * MINUTE
    )
}

#[test]
fn the_demo_alerts_on_files_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = vec![
        line(1, 10, "placed", 0),
        line(2, 20, "placed", 1),
        line(3, 30, "placed", 2),
        line(4, 40, "placed", 3),
        line(1, 10, "picked_up", 5),
        line(2, 20, "picked_up", 6),
        line(3, 30, "picked_up", 7),
        "{\"order_id\": \"not a number\"}".to_string(),
    ];
    // Order 1: pings every minute, delivered 35 min after the order. Order 2: delivered 65
    // min after (late). Order 3: pings stop from minute 12 to 27 (silent), delivered at 47.
    // Order 4 is never picked up.
    for minute in 6..70 {
        if minute < 35 {
            lines.push(line(1, 10, "ping", minute));
        }
        if minute > 6 && minute < 66 {
            lines.push(line(2, 20, "ping", minute));
        }
        if minute > 7 && minute < 47 && !(12..27).contains(&minute) {
            lines.push(line(3, 30, "ping", minute));
        }
    }
    lines.push(line(1, 10, "delivered", 35));
    lines.push(line(3, 30, "delivered", 47));
    lines.push(line(2, 20, "delivered", 66));
    lines.sort_by_key(|l| l.split("event_time\":").nth(1).map(str::to_string));
    std::fs::write(dir.path().join("events.jsonl"), lines.join("\n") + "\n").unwrap();
    let stdout = riffle(
        &[
            "demo",
            "cep",
            "--no-web",
            "--input",
            "events.jsonl",
            "-p",
            "2",
            "--output",
            "out",
        ],
        dir.path(),
    );
    assert!(stdout.contains("late deliveries          2"), "{stdout}");
    assert!(stdout.contains("couriers silent          1"), "{stdout}");
    assert!(stdout.contains("late events              0"), "{stdout}");
    assert!(stdout.contains("bad records              1"), "{stdout}");
    assert_eq!(
        sorted_lines(&dir.path().join("out/alerts")),
        [
            r#"{"alert":"courier_silent","order_id":3,"courier_id":30,"since":"15:51:00","at":"16:01:00"}"#,
            r#"{"alert":"late_delivery","order_id":2,"courier_id":20,"since":"15:46:00","at":"16:41:00"}"#,
            r#"{"alert":"not_picked_up","order_id":4,"courier_id":40,"since":"15:43:00","at":"16:43:00"}"#,
        ]
    );
    let dead_letters: usize = std::fs::read_dir(dir.path().join("out/dead-letter"))
        .unwrap()
        .map(|source| sorted_lines(&source.unwrap().path()).len())
        .sum();
    assert_eq!(dead_letters, 1);
}

/// The generated events without those the generator sends far behind the watermark: what is
/// late then depends on when watermarks go out, and the runs compared must see the same.
fn write_input(dir: &Path) {
    let args = {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: CepArgs,
        }
        let mut args = Wrapper::parse_from(["riffle"]).args;
        args.orders = 6_000;
        args
    };
    let text: String = generate(&args.courier_config())
        .into_iter()
        .filter(|(_, late)| !late)
        .map(|(e, _): (CourierEvent, bool)| serde_json::to_string(&e).unwrap() + "\n")
        .collect();
    std::fs::write(dir.join("events.jsonl"), text).unwrap();
}

fn args(restore: bool) -> Vec<String> {
    let mut args: Vec<String> = [
        "demo",
        "cep",
        "--no-web",
        "--input",
        "events.jsonl",
        "-p",
        "2",
        "--checkpoint-interval-ms",
        "100",
        "--checkpoint-dir",
        "checkpoints",
        "--output",
        "out",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if restore {
        args.extend(["--restore".to_string(), "latest".to_string()]);
    }
    args
}

#[test]
fn killed_and_restored_the_demo_commits_each_alert_once() {
    let clean = tempfile::tempdir().unwrap();
    write_input(clean.path());
    let mut run = Process::start(clean.path(), &args(false), "riffle=info");
    assert!(matches!(
        run.finish(Kill::NEVER, Duration::from_secs(120)),
        Ok(Ended::Exited)
    ));
    let expected = sorted_lines(&clean.path().join("out/alerts"));
    assert!(expected.len() > 500, "{} alerts", expected.len());

    let dir = tempfile::tempdir().unwrap();
    write_input(dir.path());
    let kills = [
        Kill::new(
            "checkpoint",
            Trigger::AtLog {
                text: CHECKPOINT,
                n: 2,
                delay: Duration::ZERO,
            },
        ),
        Kill::new("commit", Trigger::AtCommit { n: 1 }),
        Kill::new("summary", Trigger::AtStdout("riffle demo cep")),
    ];
    let mut restore = false;
    let mut killed = Vec::new();
    for kill in kills
        .into_iter()
        .chain(std::iter::repeat(Kill::NEVER))
        .take(8)
    {
        let mut run = Process::start(dir.path(), &args(restore), "riffle=info");
        match run.finish(kill, Duration::from_secs(120)) {
            Ok(Ended::Killed(kind)) => killed.push(kind),
            Ok(Ended::Exited) if kill.trigger_is_never() => break,
            Ok(Ended::Exited) => {}
            Err(e) => panic!("{e}"),
        }
        restore = true;
        let got = sorted_lines_if_any(&dir.path().join("out/alerts"));
        let mut unique = got.clone();
        unique.dedup();
        assert_eq!(
            unique.len(),
            got.len(),
            "an alert committed twice after {killed:?}"
        );
    }
    // A commit may have no alert file to kill at, and the process may exit before the kill
    // at its summary lands: at least two of the three moments come.
    assert!(
        killed.contains(&"checkpoint") && killed.len() >= 2,
        "{killed:?}"
    );
    assert_eq!(
        sorted_lines(&dir.path().join("out/alerts")),
        expected,
        "killed at {killed:?}"
    );
}
