//! `riffle serve` through psql, the real Postgres client: a materialized view over generated
//! bids, the server killed with SIGKILL while the view ingests, restarted on its data
//! directory: the view ends equal to a run without the kill, and to the input's count.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `riffle serve` process and the port it listens on.
struct Served {
    child: Child,
    port: u16,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(dir: &Path) -> Served {
    serve_with(dir, &[])
}

/// `riffle serve` in `dir`, with `extra` arguments.
fn serve_with(dir: &Path, extra: &[&str]) -> Served {
    // `-p 1` unless `extra` says otherwise.
    let parallelism: &[&str] = if extra.contains(&"-p") {
        &[]
    } else {
        &["-p", "1"]
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            "data",
            "--checkpoint-interval-ms",
            "100",
            "--no-web",
        ])
        .args(parallelism)
        .args(extra)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let port = loop {
        let line = lines
            .next()
            .expect("riffle serve ended before listening")
            .unwrap();
        if let Some(rest) = line.split("listening on 127.0.0.1:").nth(1) {
            break rest.split_whitespace().next().unwrap().parse().unwrap();
        }
    };
    // The rest of its log is read (and dropped) so that the server never blocks on it.
    std::thread::spawn(move || lines.for_each(drop));
    Served { child, port }
}

/// What psql prints for `sql` (unaligned, tuples only); the statement must succeed.
fn psql(port: u16, sql: &str) -> String {
    let output = Command::new("psql")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "riffle"])
        .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .env("PGCONNECT_TIMEOUT", "10")
        .output()
        .expect("psql runs (postgresql-client, installed by scripts/install-deps.sh)");
    assert!(
        output.status.success(),
        "psql -c {sql:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The status of view `name` (`running`, `finished`, ...), from `SHOW MATERIALIZED VIEWS`.
fn status(port: u16, name: &str) -> (String, u64) {
    let shown = psql(port, "SHOW MATERIALIZED VIEWS");
    let line = shown
        .lines()
        .find(|l| l.starts_with(&format!("{name}|")))
        .unwrap_or_else(|| panic!("no view {name} in {shown}"));
    let fields: Vec<&str> = line.split('|').collect();
    (fields[3].to_string(), fields[2].parse().unwrap())
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while !done() {
        assert!(Instant::now() < deadline, "waited 90 s for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether view `name` has a completed checkpoint in the data directory.
fn has_checkpoint(dir: &Path, name: &str) -> bool {
    let root = dir.join("data/views").join(name).join("checkpoints");
    let Ok(jobs) = std::fs::read_dir(&root) else {
        return false;
    };
    jobs.flatten().any(|job| {
        std::fs::read_dir(job.path()).is_ok_and(|checkpoints| {
            checkpoints
                .flatten()
                .any(|c| c.path().join("_manifest.json").exists())
        })
    })
}

const EVENTS: u64 = 40_000;

const CREATE: &str = "CREATE TABLE bids (event_type INT, bid ROW<auction BIGINT, price BIGINT>)
        WITH ('connector' = 'nexmark', 'events.num' = '40000', 'rows-per-second' = '8000');
    CREATE MATERIALIZED VIEW per_auction AS
        SELECT MOD(bid.auction, 10) AS a, COUNT(*) AS bids, SUM(bid.price) AS total
        FROM bids WHERE event_type = 2 GROUP BY MOD(bid.auction, 10);
    CREATE MATERIALIZED VIEW cheap AS
        SELECT bid.auction AS auction, bid.price AS price FROM bids
        WHERE event_type = 2 AND bid.price < 1000;";

/// The views' rows once their input ended: `per_auction` by key, and `cheap` (a view without a
/// key, whose equal rows are counted) summed up.
fn final_rows(port: u16) -> String {
    wait_until("the views' input to end", || {
        status(port, "per_auction").0 == "finished" && status(port, "cheap").0 == "finished"
    });
    let by_key = psql(port, "SELECT a, bids, total FROM per_auction ORDER BY a");
    // A lookup by the view's key finds the row a scan finds.
    let third = by_key.lines().nth(3).unwrap();
    assert_eq!(
        psql(port, "SELECT a, bids, total FROM per_auction WHERE a = 3").trim(),
        third
    );
    by_key
        + &psql(
            port,
            "SELECT COUNT(*), SUM(price), COUNT(DISTINCT auction) FROM cheap",
        )
}

#[test]
fn a_view_killed_while_it_ingests_comes_back_with_every_change_once() {
    killed_while_it_ingests(&[]);
}

/// As above, with the views' rows in RocksDB (the view operator's task's store, checkpointed
/// incrementally with the job's other state).
#[cfg(feature = "rocksdb")]
#[test]
fn a_view_in_rocksdb_killed_while_it_ingests_comes_back_with_every_change_once() {
    killed_while_it_ingests(&["--state-backend", "rocksdb"]);
}

/// Runs the views to their end twice with `extra` arguments to `riffle serve`, killing the
/// second server with SIGKILL while they ingest: it ends with the first one's rows.
fn killed_while_it_ingests(extra: &[&str]) {
    let reference = tempfile::tempdir().unwrap();
    let expected = {
        let server = serve_with(reference.path(), extra);
        psql(server.port, CREATE);
        final_rows(server.port)
    };
    assert_eq!(expected.lines().count(), 11, "{expected}");
    // 46 of every 50 Nexmark events are bids.
    let bids: u64 = expected
        .lines()
        .take(10)
        .map(|l| l.split('|').nth(1).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(bids, EVENTS / 50 * 46);
    let cheap: u64 = expected
        .lines()
        .nth(10)
        .unwrap()
        .split('|')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(cheap > 0, "no cheap bids: {expected}");

    let victim = tempfile::tempdir().unwrap();
    let mut server = serve_with(victim.path(), extra);
    psql(server.port, CREATE);
    wait_until("a checkpoint of the view with some of its input", || {
        has_checkpoint(victim.path(), "per_auction") && status(server.port, "per_auction").1 > 0
    });
    let (state, progress) = status(server.port, "per_auction");
    assert_eq!(state, "running", "the input ended before the kill");
    server.child.kill().unwrap(); // SIGKILL: no clean-up
    server.child.wait().unwrap();
    drop(server);

    let server = serve_with(victim.path(), extra);
    // Restored from its checkpoint: it never starts again from nothing.
    let (_, restored) = status(server.port, "per_auction");
    assert!(
        restored > 0,
        "the view came back empty (progress was {progress})"
    );
    assert_eq!(final_rows(server.port), expected);
}

/// A topic of its own for a test (`<name>-<process>-<nanos>`, created with `partitions`), and a
/// producer to it.
#[cfg(feature = "kafka")]
fn new_topic(name: &str, partitions: i32) -> (String, riffle_kafka::testing::TestProducer) {
    use riffle_kafka::testing::{TestProducer, bootstrap};
    use riffle_kafka::{KafkaConnection, ensure_topics};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let topic = format!("{name}-{}-{nanos}", std::process::id());
    ensure_topics(
        &KafkaConnection::new(bootstrap()),
        &[(&topic, partitions)],
        1,
    )
    .unwrap();
    (topic, TestProducer::new(&[("linger.ms", "5")]))
}

/// `CREATE TABLE orders (columns)` over the JSON records of `topic`, read from its start.
#[cfg(feature = "kafka")]
fn orders_table(columns: &str, topic: &str) -> String {
    format!(
        "CREATE TABLE orders ({columns}) WITH ('connector' = 'kafka',
             'topic' = '{topic}', 'properties.bootstrap.servers' = '{}',
             'properties.group.id' = '{topic}', 'scan.startup.mode' = 'earliest-offset',
             'format' = 'json');",
        riffle_kafka::testing::bootstrap()
    )
}

/// Sends `record(i)` for each `i` of `range` to `topic` (partition `i % 2`), and flushes.
#[cfg(feature = "kafka")]
fn produce(
    producer: &riffle_kafka::testing::TestProducer,
    topic: &str,
    range: std::ops::Range<u64>,
    record: impl Fn(u64) -> String,
) {
    for i in range {
        producer.send(topic, (i % 2) as i32, None, record(i).as_bytes());
    }
    producer.flush();
}

/// The sum of a view's column, 0 while it has no rows.
fn sum(port: u16, sql: &str) -> u64 {
    psql(port, sql).trim().parse().unwrap_or(0)
}

#[cfg(feature = "kafka")]
#[test]
fn a_view_of_a_kafka_topic_killed_while_it_ingests_counts_every_record_once() {
    let (topic, producer) = new_topic("serve-orders", 2);
    let order = |i: u64| format!(r#"{{"user_id": {}, "amount": {}}}"#, i % 50, i % 7);
    let produce = |from: u64, to: u64| produce(&producer, &topic, from..to, order);
    const HALF: u64 = 20_000;

    let dir = tempfile::tempdir().unwrap();
    let mut server = serve(dir.path());
    psql(
        server.port,
        &format!(
            "{}
             CREATE MATERIALIZED VIEW per_user AS
                 SELECT user_id, COUNT(*) AS n, SUM(amount) AS total FROM orders GROUP BY user_id;
             CREATE MATERIALIZED VIEW pricey AS
                 SELECT user_id, COUNT(*) AS n FROM orders WHERE amount >= 5 GROUP BY user_id;
             CREATE MATERIALIZED VIEW totals AS
                 SELECT COUNT(*) AS users, SUM(n) AS n, SUM(total) AS total FROM per_user;",
            orders_table("user_id BIGINT, amount BIGINT", &topic)
        ),
    );
    let total = "SELECT SUM(n) FROM per_user";
    let pricey = "SELECT SUM(n) FROM pricey";
    // Records 5 and 6 first (one in each partition, both `pricey`): once both views have
    // them, both read the topic, whichever job started first.
    produce(5, 7);
    wait_until("both views reading", || {
        sum(server.port, total) >= 2 && sum(server.port, pricey) >= 2
    });
    produce(0, 5);
    produce(7, HALF);
    let pricey_half = (0..HALF).filter(|i| i % 7 >= 5).count() as u64;
    wait_until("the first half read", || {
        sum(server.port, total) >= HALF && sum(server.port, pricey) >= pricey_half
    });
    assert_eq!(sum(server.port, total), HALF);
    assert_eq!(sum(server.port, pricey), pricey_half);
    // The two views over the topic read it once (a job that started after the other read
    // records 5 and 6 read those two again on its own).
    let sources = psql(server.port, "SHOW SOURCES");
    let read: u64 = sources
        .trim()
        .strip_prefix("orders|kafka|")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("SHOW SOURCES said {sources:?}"));
    assert!(
        (HALF..=HALF + 2).contains(&read),
        "{read} records read for {HALF}: each view read the topic itself"
    );
    // The second half arrives; the server is killed while it reads it.
    let before = status(server.port, "per_user").1;
    produce(HALF, 2 * HALF);
    wait_until("the second half being read", || {
        status(server.port, "per_user").1 > before
    });
    server.child.kill().unwrap(); // SIGKILL
    server.child.wait().unwrap();
    drop(server);

    let server = serve(dir.path());
    wait_until("every record read", || sum(server.port, total) >= 2 * HALF);
    assert_eq!(
        sum(server.port, total),
        2 * HALF,
        "a record was counted twice"
    );
    let mut expected = std::collections::BTreeMap::<u64, (u64, u64)>::new();
    for i in 0..2 * HALF {
        let e = expected.entry(i % 50).or_default();
        e.0 += 1;
        e.1 += i % 7;
    }
    let want: String = expected
        .iter()
        .map(|(u, (n, t))| format!("{u}|{n}|{t}\n"))
        .collect();
    assert_eq!(
        psql(
            server.port,
            "SELECT user_id, n, total FROM per_user ORDER BY user_id"
        ),
        want
    );
    // So did the other view over the topic, which shares its source with `per_user`.
    let pricey_all = (0..2 * HALF).filter(|i| i % 7 >= 5).count() as u64;
    wait_until("pricey read every record", || {
        sum(server.port, pricey) >= pricey_all
    });
    assert_eq!(sum(server.port, pricey), pricey_all);
    // The view over the view read each of its changes once, through the kill.
    let total: u64 = expected.values().map(|(_, t)| t).sum();
    let want = format!("50|{}|{total}\n", 2 * HALF);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let now = psql(server.port, "SELECT users, n, total FROM totals");
        if now == want {
            break;
        }
        assert!(Instant::now() < deadline, "totals is {now:?}, not {want:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Found by hand: a view made while another read a file of many ranges (each subtask reads
/// its ranges one after the other) checkpointed, for a range it had not started, where the
/// other view was in it, and after a kill skipped those lines.
#[test]
fn views_over_one_file_of_many_ranges_killed_count_every_line_once() {
    const LINES: u64 = 300_000;
    let dir = tempfile::tempdir().unwrap();
    let orders = dir.path().join("orders.json");
    let text: String = (0..LINES)
        .map(|i| format!("{{\"user_id\": {}, \"amount\": {}}}\n", i % 50, i % 7))
        .collect();
    std::fs::write(&orders, text).unwrap(); // 8.6 MB: 9 ranges of 1 MiB
    let mut server = serve_with(dir.path(), &["-p", "2"]);
    psql(
        server.port,
        &format!(
            "CREATE TABLE orders (user_id BIGINT, amount BIGINT) WITH ('connector' = 'filesystem',
                 'path' = '{}', 'format' = 'json');
             CREATE MATERIALIZED VIEW per_user AS
                 SELECT user_id, COUNT(*) AS n FROM orders GROUP BY user_id;",
            orders.display()
        ),
    );
    let users = "SELECT SUM(n) FROM per_user";
    // `per_user` past the first range of each subtask (or at the end): `per_amount` is made
    // then, and checkpoints ranges it has not started where `per_user` is in them.
    wait_until("per_user reading", || sum(server.port, users) >= 100_000);
    psql(
        server.port,
        "CREATE MATERIALIZED VIEW per_amount AS
             SELECT amount, COUNT(*) AS n FROM orders GROUP BY amount",
    );
    wait_until("a checkpoint of per_amount", || {
        has_checkpoint(dir.path(), "per_amount")
    });
    server.child.kill().unwrap(); // SIGKILL
    server.child.wait().unwrap();
    drop(server);

    let server = serve_with(dir.path(), &["-p", "2"]);
    wait_until("both views finished", || {
        status(server.port, "per_user").0 == "finished"
            && status(server.port, "per_amount").0 == "finished"
    });
    assert_eq!(sum(server.port, users), LINES);
    let want: String = (0..7)
        .map(|a| format!("{a}|{}\n", (0..LINES).filter(|i| i % 7 == a).count()))
        .collect();
    assert_eq!(
        psql(
            server.port,
            "SELECT amount, n FROM per_amount ORDER BY amount"
        ),
        want
    );
}

/// The records a table's source read, by `SHOW SOURCES`.
#[cfg(feature = "kafka")]
fn records_read(port: u16, table: &str) -> u64 {
    let sources = psql(port, "SHOW SOURCES");
    sources
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{table}|kafka|")))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("SHOW SOURCES said {sources:?}"))
}

#[cfg(feature = "kafka")]
#[test]
fn a_view_made_while_another_is_in_the_middle_of_a_topic_catches_up_and_shares_it_through_a_kill() {
    let (topic, producer) = new_topic("serve-late", 2);
    let order = |i: u64| format!(r#"{{"user_id": {}, "amount": {}}}"#, i % 50, i % 7);
    let produce = |from: u64, to: u64| produce(&producer, &topic, from..to, order);
    const BACKLOG: u64 = 200_000;
    const LIVE: u64 = 5_000;
    produce(0, BACKLOG);
    let dir = tempfile::tempdir().unwrap();
    let mut server = serve(dir.path());
    psql(
        server.port,
        &format!(
            "{}
             CREATE MATERIALIZED VIEW per_user AS
                 SELECT user_id, COUNT(*) AS n FROM orders GROUP BY user_id;",
            orders_table("user_id BIGINT, amount BIGINT", &topic)
        ),
    );
    let (users, amounts) = (
        "SELECT SUM(n) FROM per_user",
        "SELECT SUM(n) FROM per_amount",
    );
    wait_until("per_user reading", || sum(server.port, users) > 0);
    // Made while `per_user` is somewhere in the topic: it reads alone up to it, then shares.
    psql(
        server.port,
        "CREATE MATERIALIZED VIEW per_amount AS
             SELECT amount, COUNT(*) AS n FROM orders GROUP BY amount",
    );
    wait_until("per_amount reading", || sum(server.port, amounts) > 0);
    server.child.kill().unwrap(); // SIGKILL
    server.child.wait().unwrap();
    drop(server);

    // Restored at positions of their own: each view counts every record once.
    let server = serve(dir.path());
    wait_until("both views at the end of the topic", || {
        sum(server.port, users) >= BACKLOG && sum(server.port, amounts) >= BACKLOG
    });
    assert_eq!(sum(server.port, users), BACKLOG);
    let per_amount = |total: u64| -> String {
        (0..7)
            .map(|a| format!("{a}|{}\n", (0..total).filter(|i| i % 7 == a).count()))
            .collect()
    };
    assert_eq!(
        psql(
            server.port,
            "SELECT amount, n FROM per_amount ORDER BY amount"
        ),
        per_amount(BACKLOG)
    );
    // Both at the end of the topic, on its one reader: what comes now is read once.
    let before = records_read(server.port, "orders");
    produce(BACKLOG, BACKLOG + LIVE);
    wait_until("the live records read", || {
        sum(server.port, users) >= BACKLOG + LIVE && sum(server.port, amounts) >= BACKLOG + LIVE
    });
    assert_eq!(sum(server.port, users), BACKLOG + LIVE);
    assert_eq!(
        psql(
            server.port,
            "SELECT amount, n FROM per_amount ORDER BY amount"
        ),
        per_amount(BACKLOG + LIVE)
    );
    assert_eq!(
        records_read(server.port, "orders") - before,
        LIVE,
        "the live records were read by each view itself"
    );
}

/// What a subscriber got: each line of `COPY (SUBSCRIBE ..) TO STDOUT` as it came, then how
/// the subscription ended (the server went away, or an error).
#[cfg(feature = "kafka")]
enum Received {
    Line(String),
    Ended(String),
}

/// Subscribes over tokio-postgres (each COPY chunk handed over as it arrives, unlike psql's
/// buffered output) with `statement`, in a thread of its own.
#[cfg(feature = "kafka")]
fn subscriber(port: u16, statement: String) -> std::sync::mpsc::Receiver<Received> {
    use futures_util::StreamExt;
    let (sender, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let end = |why: String| sender.send(Received::Ended(why));
            let (client, connection) = match tokio_postgres::connect(
                &format!("host=127.0.0.1 port={port} user=riffle dbname=riffle"),
                tokio_postgres::NoTls,
            )
            .await
            {
                Ok(connected) => connected,
                Err(e) => return end(format!("cannot connect: {e}")),
            };
            tokio::spawn(connection);
            let copy = match client.copy_out(&statement).await {
                Ok(copy) => copy,
                Err(e) => return end(format!("{statement}: {e}")),
            };
            let mut copy = Box::pin(copy);
            let mut partial = String::new();
            while let Some(chunk) = copy.next().await {
                match chunk {
                    Ok(chunk) => {
                        partial.push_str(std::str::from_utf8(&chunk).unwrap());
                        while let Some(end) = partial.find('\n') {
                            let line: String = partial.drain(..=end).collect();
                            let _ = sender.send(Received::Line(line.trim_end().to_string()));
                        }
                    }
                    Err(e) => return end(e.to_string()),
                }
            }
            end("the subscription ended".into())
        })
    });
    received
}

/// What a durable subscriber of view `big` (`id`, `amount`) has, and where it resumes.
#[cfg(feature = "kafka")]
#[derive(Default)]
struct Follower {
    /// The rows it has for sure: (progress, op, id).
    got: Vec<(u64, String, u64)>,
    /// The rows at the start of the current subscription, until its first `progress` row
    /// says they are all there.
    tentative: Vec<(u64, String, u64)>,
    started: bool,
    /// The progress of the last change row, or of the last `progress` row.
    token: Option<u64>,
}

#[cfg(feature = "kafka")]
impl Follower {
    /// The statement to subscribe with: after its token, or from the view's rows.
    fn statement(&self) -> String {
        match self.token {
            Some(token) => format!("COPY (SUBSCRIBE big WITH (PROGRESS) AS OF {token}) TO STDOUT"),
            None => "COPY (SUBSCRIBE big WITH (DURABLE, PROGRESS)) TO STDOUT".into(),
        }
    }

    fn line(&mut self, line: &str) {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields.len(), 4, "{line}");
        let progress: u64 = fields[0].parse().unwrap();
        if fields[1] == "progress" {
            self.got.append(&mut self.tentative);
            self.started = true;
            self.token = Some(progress);
            return;
        }
        let row = (progress, fields[1].to_string(), fields[2].parse().unwrap());
        if self.started {
            // A change: its progress is a token by itself.
            self.got.push(row);
            self.token = Some(progress);
        } else {
            self.tentative.push(row);
        }
    }

    /// The connection ended: rows at the start not known to be all there are dropped.
    fn disconnected(&mut self) {
        self.tentative.clear();
        self.started = false;
    }
}

/// A durable subscriber of a view over a Kafka topic follows it while the server is killed
/// with SIGKILL three times as the view ingests, resuming each time `AS OF` the progress of
/// the last row it got: it ends with every record's row exactly once, each row's progress its
/// place in the view's changelog.
#[cfg(feature = "kafka")]
#[test]
fn a_durable_subscriber_resumes_after_each_kill_of_the_server_and_sees_each_change_once() {
    use std::sync::mpsc::RecvTimeoutError;

    let (topic, producer) = new_topic("serve-resume", 2);
    let order = |i: u64| format!(r#"{{"id": {i}, "amount": {}}}"#, i % 7);
    let produce = |from: u64, to: u64| produce(&producer, &topic, from..to, order);
    const PART: u64 = 6_000;
    const ROUNDS: u64 = 3;
    let kept = |i: &u64| i % 7 > 2;
    produce(0, PART);

    let dir = tempfile::tempdir().unwrap();
    let mut server = serve(dir.path());
    psql(
        server.port,
        &format!(
            "{}
             CREATE MATERIALIZED VIEW big AS SELECT id, amount FROM orders WHERE amount > 2;",
            orders_table("id BIGINT, amount BIGINT", &topic)
        ),
    );
    let mut follower = Follower::default();
    let mut lines = subscriber(server.port, follower.statement());
    for round in 0..ROUNDS {
        produce((round + 1) * PART, (round + 2) * PART);
        // Killed at a different point of each round: once the subscriber has some rows of
        // it, while the view holds changes no checkpoint has yet.
        let target = follower.got.len() + 1 + (round as usize) * 700;
        let deadline = Instant::now() + Duration::from_secs(90);
        while follower.got.len() < target {
            match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Received::Line(line)) => follower.line(&line),
                Ok(Received::Ended(why)) => panic!("round {round}: the subscription ended: {why}"),
                Err(RecvTimeoutError::Timeout) => panic!("round {round}: no rows for 90 s"),
                Err(RecvTimeoutError::Disconnected) => unreachable!(),
            }
        }
        server.child.kill().unwrap(); // SIGKILL
        server.child.wait().unwrap();
        // What was on its way is the subscriber's; then the connection ends.
        while let Received::Line(line) = lines.recv_timeout(Duration::from_secs(90)).unwrap() {
            follower.line(&line);
        }
        follower.disconnected();
        drop(server);
        server = serve(dir.path());
        lines = subscriber(server.port, follower.statement());
    }
    let expected: Vec<u64> = (0..(ROUNDS + 1) * PART).filter(kept).collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    while follower.got.len() < expected.len() {
        match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Received::Line(line)) => follower.line(&line),
            Ok(Received::Ended(why)) => panic!("the last subscription ended: {why}"),
            Err(_) => panic!(
                "{} of {} rows after 90 s",
                follower.got.len(),
                expected.len()
            ),
        }
    }
    let got = follower.got;
    // Every record once: nothing lost, nothing twice.
    assert!(got.iter().all(|(_, op, _)| op == "insert"));
    let mut ids: Vec<u64> = got.iter().map(|(_, _, id)| *id).collect();
    ids.sort_unstable();
    if ids != expected {
        let twice: Vec<_> = ids.windows(2).filter(|w| w[0] == w[1]).take(5).collect();
        let lost: Vec<_> = expected
            .iter()
            .filter(|i| ids.binary_search(i).is_err())
            .take(5)
            .collect();
        panic!(
            "{} rows for {} records: twice {twice:?}.., lost {lost:?}..",
            ids.len(),
            expected.len()
        );
    }
    // The view's rows at the start share its progress then (one row per change so far);
    // after them, each row is one change of the view, in the changelog's order: its progress is
    // its place.
    let start = got[0].0;
    for (at, (progress, _, _)) in got.iter().enumerate() {
        let place = if (at as u64) < start {
            start
        } else {
            at as u64 + 1
        };
        assert_eq!(*progress, place, "row {at} of the subscriber");
    }
    // A token past what the view's checkpoints hold is refused, naming why.
    let refused = Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &server.port.to_string(),
            "-U",
            "riffle",
        ])
        .args(["-X", "-c", "SUBSCRIBE big AS OF 999999999"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(message.contains("not durable"), "{message}");
}

/// A view's changes written to a Kafka topic by `CREATE SINK .. FROM view` exactly-once, as
/// Debezium events, while the server is killed with SIGKILL mid-way: replayed in order, the
/// events a `read_committed` reader gets are each the next change of their key (nothing
/// twice, nothing lost), and end at the view's rows.
#[cfg(feature = "kafka")]
#[test]
fn a_sink_of_a_view_writes_each_change_once_to_kafka_through_a_kill() {
    use riffle_kafka::testing::{bootstrap, read_committed};

    let (input, producer) = new_topic("serve-sink-in", 2);
    let (output, _) = new_topic("serve-sink-out", 1);
    let order = |i: u64| format!(r#"{{"user_id": {}, "amount": {}}}"#, i % 20, i % 7);
    let produce = |from: u64, to: u64| produce(&producer, &input, from..to, order);
    const PART: u64 = 5_000;
    const ROUNDS: u64 = 3;
    const HALF: u64 = (ROUNDS + 1) * PART / 2;
    produce(0, PART);
    let dir = tempfile::tempdir().unwrap();
    let mut server = serve(dir.path());
    psql(
        server.port,
        &format!(
            "{}
             CREATE MATERIALIZED VIEW per_user AS
                 SELECT user_id, COUNT(*) AS n, SUM(amount) AS total FROM orders GROUP BY user_id;
             CREATE SINK out FROM per_user WITH ('connector' = 'kafka', 'topic' = '{output}',
                 'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'debezium-json',
                 'sink.delivery-guarantee' = 'exactly-once');",
            orders_table("user_id BIGINT, amount BIGINT", &input),
            bootstrap = bootstrap()
        ),
    );
    let shown = psql(server.port, "SHOW SINKS");
    assert!(
        shown.starts_with("out|running|CREATE SINK out FROM per_user"),
        "{shown}"
    );
    let total = "SELECT SUM(n) FROM per_user";
    wait_until("the first part read", || sum(server.port, total) >= PART);
    // The end of the sink's topic, records of open transactions included.
    let watcher: rdkafka::consumer::BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", "riffle-test-watcher")
        .create()
        .unwrap();
    let written = || {
        use rdkafka::consumer::Consumer;
        watcher
            .fetch_watermarks(&output, 0, Duration::from_secs(10))
            .unwrap()
            .1
    };
    for round in 1..=ROUNDS {
        let before = written();
        produce(round * PART, (round + 1) * PART);
        // Killed while the sink writes this part's changes (its transaction likely open).
        wait_until("the sink writing", || written() > before);
        server.child.kill().unwrap(); // SIGKILL
        server.child.wait().unwrap();
        drop(server);
        server = serve(dir.path());
    }
    wait_until("every record read", || sum(server.port, total) >= 2 * HALF);
    let want: std::collections::BTreeMap<u64, (u64, u64)> =
        (0..2 * HALF).fold(std::collections::BTreeMap::new(), |mut m, i| {
            let e = m.entry(i % 20).or_insert((0, 0));
            e.0 += 1;
            e.1 += i % 7;
            m
        });
    // The sink's events, applied in order: each removal is of the key's current row, each
    // addition of a key without one.
    let replay = |events: &[riffle_kafka::testing::Consumed]| {
        let mut rows = std::collections::BTreeMap::<u64, (u64, u64)>::new();
        for event in events {
            let v: serde_json::Value = serde_json::from_str(&event.value).unwrap();
            let row = |side: &str| {
                let r = &v[side];
                (
                    r["user_id"].as_u64().unwrap(),
                    (r["n"].as_u64().unwrap(), r["total"].as_u64().unwrap()),
                )
            };
            match v["op"].as_str().unwrap() {
                "c" => {
                    let (user, now) = row("after");
                    assert_eq!(rows.insert(user, now), None, "{} added twice", event.value);
                }
                "d" => {
                    let (user, was) = row("before");
                    assert_eq!(
                        rows.remove(&user),
                        Some(was),
                        "{} not the key's row",
                        event.value
                    );
                }
                other => panic!("op {other}: {}", event.value),
            }
        }
        rows
    };
    let mut rows = std::collections::BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    while rows != want {
        assert!(Instant::now() < deadline, "the topic's rows are {rows:?}");
        let events = read_committed(&output, Duration::from_secs(20), |_, quiet| {
            quiet > Duration::from_millis(500)
        });
        rows = replay(&events);
    }
}
