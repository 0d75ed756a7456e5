//! `riffle sql -f job.sql` (issue 29): a script of Flink SQL run by the command as one job; its
//! printed rows, its `--explain`, and the errors a newcomer meets (a syntax error names its line
//! and column; an unknown table names the known ones).

use std::path::Path;

fn script(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// Runs `riffle` with `args` in `dir` and kills it with SIGKILL (no clean-up, no final commit)
/// once `committed` holds, within 60 s and before the job ends by itself.
fn kill_when(args: &[String], dir: &Path, committed: impl Fn() -> bool) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !committed() {
        assert!(
            std::time::Instant::now() < deadline,
            "no output committed in 60 s"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the job ended before the kill"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "the job ended before the kill"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

const BIDS: &str = "CREATE TABLE datagen (
    event_type INT,
    bid ROW<auction BIGINT, bidder BIGINT, price BIGINT, dateTime TIMESTAMP(3)>,
    dateTime AS CASE WHEN event_type = 2 THEN bid.dateTime ELSE TIMESTAMP '2026-01-15 00:00:00' END,
    WATERMARK FOR dateTime AS dateTime - INTERVAL '4' SECOND
) WITH ('connector' = 'nexmark', 'events.num' = '${EVENTS}');

CREATE VIEW bid AS SELECT bid.auction, bid.price, dateTime FROM datagen WHERE event_type = 2;

CREATE TABLE counts (auction BIGINT, window_start TIMESTAMP(3), bids BIGINT, euros DECIMAL(23, 3))
WITH ('connector' = 'print');

INSERT INTO counts
SELECT auction, window_start, COUNT(*), 0.908 * SUM(price)
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
WHERE MOD(auction, 100) = 0
GROUP BY auction, window_start, window_end;";

#[test]
fn a_sql_script_runs_as_a_job_and_prints_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let file = script(dir.path(), "bids.sql", BIDS);
    let out = crate::riffle(
        &[
            "sql",
            "-f",
            &file,
            "-D",
            "EVENTS=20000",
            "--no-web",
            "-p",
            "2",
        ],
        dir.path(),
    );
    let rows: Vec<&str> = out.lines().filter(|l| l.starts_with("+I[")).collect();
    assert!(!rows.is_empty(), "{out}");
    for row in &rows {
        // +I[1000, 2026-01-15 00:00:00.000, 12, 34567.890]
        let fields: Vec<&str> = row[3..row.len() - 1].split(", ").collect();
        assert_eq!(fields.len(), 4, "{row}");
        assert_eq!(fields[0].parse::<i64>().unwrap() % 100, 0, "{row}");
        assert!(fields[1].starts_with("2026-01-15 "), "{row}");
        assert!(
            fields[3].split_once('.').is_some_and(|(_, f)| f.len() == 3),
            "{row}"
        );
    }
}

#[test]
fn rows_a_source_cannot_read_are_counted_and_kept_in_the_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(
        &input,
        "{\"id\":1,\"name\":\"ann\"}\n{\"id\":9223372036854775808}\n{\"id\":3} x\n{\"id\":4,\"name\":\"bob\"}\n",
    )
    .unwrap();
    let file = script(
        dir.path(),
        "job.sql",
        &format!(
            "CREATE TABLE t (id BIGINT, name VARCHAR)\n  WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json');\n\
             CREATE TABLE o (id BIGINT, name VARCHAR) WITH ('connector' = 'print');\n\
             INSERT INTO o SELECT id, name FROM t;\n",
            input.display()
        ),
    );
    let output = crate::riffle_raw(&["sql", "-f", &file, "--no-web", "-p", "1"], dir.path());
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let mut rows: Vec<&str> = stdout.lines().filter(|l| l.starts_with("+I[")).collect();
    rows.sort();
    assert_eq!(rows, ["+I[1, ann]", "+I[4, bob]"], "{stdout}");
    assert!(stderr.contains("riffle sql: done: 2 rows read"), "{stderr}");
    assert!(
        stderr.contains(
            "riffle sql: 2 bad records (rows a source could not read), kept with their errors in \
             riffle-out/sql/dead-letter/"
        ),
        "{stderr}"
    );
    // One directory per source.
    let letters = crate::sorted_lines(&dir.path().join("riffle-out/sql/dead-letter/Source__t"));
    assert_eq!(letters.len(), 2, "{letters:?}");
    assert!(
        letters
            .iter()
            .any(|l| l.contains("\"line 2\"") && l.contains("not a BIGINT"))
    );
    assert!(
        letters
            .iter()
            .any(|l| l.contains("\"line 3\"") && l.contains("not JSON"))
    );
}

#[test]
fn explain_prints_the_plan_and_errors_say_where_and_what() {
    let dir = tempfile::tempdir().unwrap();
    let file = script(dir.path(), "bids.sql", BIDS);
    let plan = crate::riffle(
        &["sql", "-f", &file, "-D", "EVENTS=10", "--explain"],
        dir.path(),
    );
    assert!(plan.contains("Sink: table `counts`"), "{plan}");
    assert!(
        plan.contains("Window: TUMBLE(10000 ms), keyed by [auction]"),
        "{plan}"
    );
    assert!(plan.contains("Source: nexmark table `datagen`"), "{plan}");

    let bad = script(
        dir.path(),
        "bad.sql",
        "CREATE TABLE t (a BIGINT) WITH ('connector' = 'blackhole');\n\nINSERT INTO t SELEC a FROM t;",
    );
    let output = crate::riffle_raw(&["sql", "-f", &bad], dir.path());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("line 3, column"), "{stderr}");
    let unknown = script(dir.path(), "unknown.sql", "SELECT * FROM nowhere;");
    let output = crate::riffle_raw(&["sql", "-f", &unknown], dir.path());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no table or view `nowhere`"), "{stderr}");
    let undefined = crate::riffle_raw(&["sql", "-f", &file], dir.path());
    assert!(String::from_utf8_lossy(&undefined.stderr).contains("--define EVENTS=VALUE"));
}

/// An updating query (`GROUP BY` without a window) prints its changelog as Flink's SQL client
/// does: `+I` for a new key, `-U` and `+U` when its result changes; the last row of each key is
/// the result.
#[test]
fn an_updating_query_prints_its_changelog() {
    let dir = tempfile::tempdir().unwrap();
    let text = BIDS
        .split("CREATE TABLE counts")
        .next()
        .unwrap()
        .to_string()
        + "SELECT MOD(auction, 3) AS bucket, COUNT(*) AS bids FROM bid GROUP BY MOD(auction, 3);";
    let file = script(dir.path(), "buckets.sql", &text);
    let out = crate::riffle(
        &[
            "sql",
            "-f",
            &file,
            "-D",
            "EVENTS=1000",
            "--no-web",
            "-p",
            "2",
        ],
        dir.path(),
    );
    let changes: Vec<&str> = out
        .lines()
        .filter(|l| {
            ["+I[", "-U[", "+U[", "-D["]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .collect();
    let inserts = changes.iter().filter(|l| l.starts_with("+I[")).count();
    assert_eq!(inserts, 3, "one insert per bucket: {out}");
    assert!(changes.iter().any(|l| l.starts_with("-U[")), "{out}");
    // The last row of each bucket: 920 bids in all (46 of every 50 events).
    let mut last = std::collections::BTreeMap::new();
    for change in changes.iter().filter(|l| !l.starts_with('-')) {
        let fields: Vec<&str> = change[3..change.len() - 1].split(", ").collect();
        last.insert(fields[0].to_string(), fields[1].parse::<u64>().unwrap());
    }
    assert_eq!(last.values().sum::<u64>(), 920, "{last:?}");
}

/// `riffle sql` without a file is the interactive client; statements piped into it run as they
/// would typed: DDL changes the session, a query runs as a job whose rows are printed (with
/// their changelog op), `SHOW TABLES`, `DESCRIBE`, `EXPLAIN` and `SET` are answered, a bad
/// statement is an error and the session goes on, `QUIT` ends it; a line a query's source
/// cannot read is said, not dropped in silence.
#[test]
fn the_interactive_client_runs_statements_one_after_another() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users.jsonl");
    std::fs::write(
        &users,
        "{\"id\":1,\"name\":\"ann\"}\n{\"id\": 3\n{\"id\":2,\"name\":\"bob\"}\n",
    )
    .unwrap();
    let input = format!(
        "CREATE TABLE users (id BIGINT, name VARCHAR)\n  WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'json');\n\
         SHOW TABLES;\nDESCRIBE users;\n\
         SELECT name,\n  id * 10 AS x\nFROM users;\n\
         SELECT COUNT(*) AS n FROM users;\n\
         SELECT nope FROM users;\n\
         EXPLAIN SELECT name FROM users;\n\
         SET 'table.exec.state.ttl' = '1 h';\nSET;\nHELP;\nQUIT;\nSELECT 'never' FROM users;\n",
        users.display()
    );
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args(["sql", "--no-web", "-p", "1"])
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    for expected in [
        "users",
        "| id | BIGINT | TRUE |",
        "| op | name | x |",
        "| +I | ann | 10 |",
        "| +I | bob | 20 |",
        "| op | n |",
        "| -U | 1 |",
        "| +U | 2 |",
        "'table.exec.state.ttl' = '1 h'",
    ] {
        assert!(lines.contains(&expected), "no `{expected}` in\n{stdout}");
    }
    assert!(stdout.contains("Map: name -> (`name` VARCHAR)"), "{stdout}");
    assert!(
        stdout.contains("SHOW TABLES;"),
        "HELP lists the statements: {stdout}"
    );
    assert!(
        !stdout.contains("never"),
        "a statement after QUIT ran: {stdout}"
    );
    assert!(
        stderr.contains("[ERROR] column `nope` not found"),
        "{stderr}"
    );
    // The line that is not JSON is said, by each query that read it.
    let warned = "[WARN] 1 bad record (rows a source could not read), kept with their errors in ";
    assert_eq!(stderr.matches(warned).count(), 2, "{stderr}");
    // The history is kept in $HOME.
    let history = std::fs::read_to_string(dir.path().join(".riffle_sql_history")).unwrap();
    assert!(history.contains("SHOW TABLES;"), "{history}");
}

/// The seed's job in SQL (`examples/sql/clicks.sql`: bots dropped with `is_bot`, clicks
/// enriched with `ip_country`, counted per user and 1-minute tumbling window, the late clicks
/// written to their own table by `SET 'riffle.window.late-rows-table'`) writes exactly what
/// `riffle demo --lateness-secs 0` writes from the same clicks at p = 1: the same counts per
/// user and window, the same late clicks with their country (times compared as epoch ms: the
/// demo writes numbers, SQL's JSON format timestamps). At p = 2 the file is read by two readers
/// whose interleaving decides which clicks are late, in either job: there every click that is
/// no bot's is in a count or among the late clicks, in both.
#[test]
fn the_seeds_job_in_sql_writes_what_the_demo_writes() {
    let dir = tempfile::tempdir().unwrap();
    crate::riffle(
        &[
            "generate",
            "clicks",
            "--count",
            "20000",
            "--users",
            "500",
            "--late-share",
            "0.01",
            "--output",
            "clicks.jsonl",
        ],
        dir.path(),
    );
    let job = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/sql/clicks.sql");
    // Each line as JSON with its times as epoch milliseconds, sorted.
    let normalized = |out: &Path, table: &str| -> Vec<String> {
        let mut rows: Vec<String> = crate::sorted_lines(&out.join(table))
            .iter()
            .map(|line| {
                let mut row: serde_json::Value = serde_json::from_str(line).unwrap();
                for column in ["window_start", "window_end", "event_time"] {
                    if let Some(text) = row.get(column).and_then(|t| t.as_str()) {
                        row[column] = riffle_sql::format::parse_timestamp(text).unwrap().into();
                    }
                }
                row.to_string()
            })
            .collect();
        rows.sort();
        rows
    };
    for p in ["1", "2"] {
        let (demo, sql) = (format!("demo-{p}"), format!("sql-{p}"));
        crate::riffle(
            &[
                "demo",
                "--input",
                "clicks.jsonl",
                "--output",
                &demo,
                "--no-web",
                "--lateness-secs",
                "0",
                "-p",
                p,
            ],
            dir.path(),
        );
        crate::riffle(
            &[
                "sql",
                "-f",
                job,
                "--define",
                "INPUT=clicks.jsonl",
                "--define",
                &format!("OUTPUT={sql}"),
                "--no-web",
                "-p",
                p,
            ],
            dir.path(),
        );
        if p == "1" {
            for table in ["agg-clicks", "late-clicks"] {
                let expected = normalized(&dir.path().join(&demo), table);
                assert!(!expected.is_empty(), "p = {p}: no {table}");
                assert_eq!(
                    normalized(&dir.path().join(&sql), table),
                    expected,
                    "p = {p}: {table}"
                );
            }
        }
        // Clicks counted plus clicks late: every click that is no bot's, in both jobs.
        let clicks = |out: &str| -> u64 {
            let counted: u64 = normalized(&dir.path().join(out), "agg-clicks")
                .iter()
                .map(|row| {
                    let row: serde_json::Value = serde_json::from_str(row).unwrap();
                    row["count"].as_u64().unwrap()
                })
                .sum();
            counted + normalized(&dir.path().join(out), "late-clicks").len() as u64
        };
        let humans = crate::sorted_lines(dir.path())
            .iter()
            .filter(|line| {
                let click: serde_json::Value = serde_json::from_str(line).unwrap();
                !riffle_cli::clicks::is_bot(click["user_agent"].as_str().unwrap())
            })
            .count() as u64;
        assert_eq!((clicks(&demo), clicks(&sql)), (humans, humans), "p = {p}");
    }
}

/// A SQL job killed with SIGKILL while it runs and started again with `--restore latest` writes
/// what a run never killed writes: the window counts (exactly-once part files) line for line,
/// and the updating totals' changelog (Debezium JSON) to the same final rows, no change applied
/// twice; so do the counts of a regular join's pairs (its kept rows restored from the
/// checkpoint). The generator is throttled (`'rows-per-second'`) so that the kill comes mid-run, once
/// a checkpoint has committed output.
#[test]
fn a_sql_job_killed_mid_run_and_restored_loses_and_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let job = script(
        dir.path(),
        "job.sql",
        "CREATE TABLE datagen (
            event_type INT,
            auction ROW<id BIGINT, category BIGINT>,
            bid ROW<auction BIGINT, bidder BIGINT, price BIGINT, dateTime TIMESTAMP(3)>,
            dateTime AS CASE WHEN event_type = 2 THEN bid.dateTime ELSE TIMESTAMP '2026-01-15 00:00:00' END,
            WATERMARK FOR dateTime AS dateTime - INTERVAL '1' SECOND
        ) WITH ('connector' = 'nexmark', 'events.num' = '400000', 'first-event.rate' = '100000',
                'next-event.rate' = '100000', 'rows-per-second' = '100000');
        CREATE VIEW bid AS SELECT bid.auction, bid.price, dateTime FROM datagen WHERE event_type = 2;
        CREATE VIEW auction AS SELECT auction.id, auction.category FROM datagen WHERE event_type = 1;
        CREATE TABLE windows (bucket BIGINT, window_start TIMESTAMP(3), bids BIGINT)
          WITH ('connector' = 'filesystem', 'path' = '${OUT}/windows', 'format' = 'json');
        CREATE TABLE totals (bucket BIGINT, bids BIGINT, euros BIGINT)
          WITH ('connector' = 'filesystem', 'path' = '${OUT}/totals', 'format' = 'debezium-json');
        INSERT INTO windows
        SELECT MOD(auction, 10), window_start, COUNT(*)
        FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '1' SECOND))
        GROUP BY MOD(auction, 10), window_start, window_end;
        INSERT INTO totals SELECT MOD(auction, 10), COUNT(*), SUM(price) FROM bid GROUP BY MOD(auction, 10);
        CREATE TABLE categories (category BIGINT, bids BIGINT, euros BIGINT)
          WITH ('connector' = 'filesystem', 'path' = '${OUT}/categories', 'format' = 'debezium-json');
        INSERT INTO categories SELECT A.category, COUNT(*), SUM(B.price)
        FROM auction A JOIN bid B ON A.id = B.auction GROUP BY A.category;
        CREATE VIEW buckets AS SELECT MOD(auction, 50) AS bucket, auction, price FROM bid;
        CREATE TABLE tops (bucket BIGINT, auction BIGINT, price BIGINT, r BIGINT)
          WITH ('connector' = 'filesystem', 'path' = '${OUT}/tops', 'format' = 'debezium-json');
        INSERT INTO tops SELECT bucket, auction, price, r FROM (
          SELECT *, ROW_NUMBER() OVER (PARTITION BY bucket ORDER BY price DESC) AS r FROM buckets
        ) WHERE r <= 3;",
    );
    let args = |out: &str| -> Vec<String> {
        [
            "sql",
            "-f",
            &job,
            "-D",
            &format!("OUT={out}"),
            "--checkpoint-dir",
            &format!("{out}-checkpoints"),
            "--checkpoint-interval-ms",
            "200",
            "--no-web",
            "-p",
            "2",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let strs = |v: &[String]| {
        v.iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("\u{0}")
    };
    let run = |v: &[String]| {
        let joined = strs(v);
        let args: Vec<&str> = joined.split('\u{0}').collect();
        crate::riffle(&args, dir.path())
    };
    run(&args("reference"));

    // The victim: killed once a checkpoint has committed some of its output.
    let victim = args("victim");
    let totals = dir.path().join("victim/totals");
    kill_when(&victim, dir.path(), || {
        crate::sorted_lines_if_any(&totals).iter().any(|_| true)
    });
    let mut restore = victim.clone();
    restore.extend(["--restore".to_string(), "latest".to_string()]);
    run(&restore);

    let windows = |out: &str| crate::sorted_lines(&dir.path().join(out).join("windows"));
    let expected = windows("reference");
    assert!(!expected.is_empty());
    assert_eq!(windows("victim"), expected);
    // The totals' changelog applied: every change once, each row there once at the end.
    let final_table = |out: &str, table: &str| -> Vec<String> {
        let mut counts: std::collections::BTreeMap<String, i64> = Default::default();
        for line in crate::sorted_lines(&dir.path().join(out).join(table)) {
            let change: serde_json::Value = serde_json::from_str(&line).unwrap();
            let (row, by) = match change["op"].as_str() {
                Some("c") => (change["after"].to_string(), 1),
                Some("d") => (change["before"].to_string(), -1),
                other => panic!("op {other:?}"),
            };
            *counts.entry(row).or_default() += by;
        }
        assert!(counts.values().all(|n| *n == 0 || *n == 1), "{counts:?}");
        counts
            .into_iter()
            .filter(|(_, n)| *n == 1)
            .map(|(row, _)| row)
            .collect()
    };
    let totals = final_table("reference", "totals");
    assert_eq!(totals.len(), 10);
    assert_eq!(final_table("victim", "totals"), totals);
    // The join's rows (kept packed) came back from the checkpoint: every bid of an auction
    // counted once, whichever came first.
    let categories = final_table("reference", "categories");
    assert_eq!(categories.len(), 5, "{categories:?}");
    assert_eq!(final_table("victim", "categories"), categories);
    // The Top-N's rows came back from the checkpoint: the three highest bids of each bucket.
    let tops = final_table("reference", "tops");
    assert_eq!(tops.len(), 150, "{tops:?}");
    assert_eq!(final_table("victim", "tops"), tops);
}

/// The lake sinks under SIGKILL: a SQL job writing window counts into a partitioned Delta Lake
/// table and a partitioned Parquet table, killed once a checkpoint has committed to both and
/// started again with `--restore latest`, holds what a run never killed holds, read by
/// independent readers (the `deltalake` package for the table's log, DuckDB for the rows); no
/// file is in the Delta log twice.
#[test]
fn lake_tables_killed_mid_run_and_restored_hold_what_a_clean_run_holds() {
    use riffle_testing::duckdb::{committed_files, delta_log, query as duckdb, read_parquet};

    let dir = tempfile::tempdir().unwrap();
    let job = script(
        dir.path(),
        "lake.sql",
        "CREATE TABLE datagen (
            event_type INT,
            auction ROW<id BIGINT, category BIGINT>,
            bid ROW<auction BIGINT, bidder BIGINT, price BIGINT, dateTime TIMESTAMP(3)>,
            dateTime AS CASE WHEN event_type = 2 THEN bid.dateTime ELSE TIMESTAMP '2026-01-15 00:00:00' END,
            WATERMARK FOR dateTime AS dateTime - INTERVAL '1' SECOND
        ) WITH ('connector' = 'nexmark', 'events.num' = '400000', 'first-event.rate' = '100000',
                'next-event.rate' = '100000', 'rows-per-second' = '100000');
        CREATE VIEW bid AS SELECT bid.auction, bid.price, dateTime FROM datagen WHERE event_type = 2;
        CREATE VIEW auction AS SELECT auction.id, auction.category FROM datagen WHERE event_type = 1;
        CREATE TABLE delta_counts (window_start TIMESTAMP(3), bids BIGINT, euros DECIMAL(20, 2), bucket INT)
          PARTITIONED BY (bucket) WITH ('connector' = 'delta', 'table-path' = '${OUT}/delta');
        CREATE TABLE parquet_counts (window_start TIMESTAMP(3), bids BIGINT, bucket INT)
          PARTITIONED BY (bucket)
          WITH ('connector' = 'filesystem', 'path' = '${OUT}/parquet', 'format' = 'parquet');
        CREATE VIEW counts AS
        SELECT CAST(MOD(auction, 4) AS INT) AS bucket, window_start, COUNT(*) AS bids,
               SUM(price) AS euros
        FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '1' SECOND))
        GROUP BY MOD(auction, 4), window_start, window_end;
        INSERT INTO delta_counts SELECT window_start, bids, CAST(euros AS DECIMAL(20, 2)), bucket FROM counts;
        INSERT INTO parquet_counts SELECT window_start, bids, bucket FROM counts;",
    );
    let args = |out: &str| -> Vec<String> {
        let out = dir.path().join(out).display().to_string();
        [
            "sql",
            "-f",
            &job,
            "-D",
            &format!("OUT={out}"),
            "--checkpoint-dir",
            &format!("{out}-checkpoints"),
            "--checkpoint-interval-ms",
            "200",
            "--no-web",
            "-p",
            "2",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let run = |v: &[String]| {
        let args: Vec<&str> = v.iter().map(String::as_str).collect();
        crate::riffle(&args, dir.path())
    };
    run(&args("reference"));

    // The victim: killed once a checkpoint has committed to the Delta table (its version 2:
    // created, then a checkpoint's commit, then another) and to the Parquet table.
    let victim = args("victim");
    let second_commit = dir
        .path()
        .join("victim/delta/_delta_log/00000000000000000002.json");
    let parquet = dir.path().join("victim/parquet");
    kill_when(&victim, dir.path(), || {
        second_commit.exists() && parquet.exists() && !committed_files(&parquet).is_empty()
    });
    let mut restore = victim.clone();
    restore.extend(["--restore".to_string(), "latest".to_string()]);
    run(&restore);

    let delta_rows = |out: &str| {
        let log = delta_log(&dir.path().join(out).join("delta"));
        let mut names: Vec<_> = log.files.iter().map(|f| f.file_name().unwrap()).collect();
        let files = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), files, "{out}: a file in the Delta log twice");
        duckdb(&format!(
            "SELECT bucket, epoch_ms(window_start), bids, euros FROM {} ORDER BY ALL",
            read_parquet(&log.files, true)
        ))
    };
    let parquet_rows = |out: &str| {
        duckdb(&format!(
            "SELECT bucket, epoch_ms(window_start), bids FROM {} ORDER BY ALL",
            read_parquet(
                &committed_files(&dir.path().join(out).join("parquet")),
                true
            )
        ))
    };
    let expected = delta_rows("reference");
    assert!(expected.len() >= 16, "{}", expected.len());
    assert_eq!(delta_rows("victim"), expected);
    let expected = parquet_rows("reference");
    assert!(expected.len() >= 16);
    assert_eq!(parquet_rows("victim"), expected);
}
