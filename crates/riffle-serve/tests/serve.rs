//! `riffle serve` end to end, through a real Postgres client (tokio-postgres) on the wire:
//! materialized views over a CSV file of clicks, read by key, by range and with aggregates,
//! subscribed to, and kept across a restart of the server. Expected results are computed here
//! from the generated clicks, not taken from Riffle.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use riffle_serve::{ServeConfig, Server};
use riffle_sql::functions::ScalarFunction;
use riffle_sql::{DataType, Value};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

/// The clicks: (user, url, time in ms), a second apart, users 0..7 and pages 0..5.
fn clicks(n: i64) -> Vec<(i64, String, i64)> {
    (0..n)
        .map(|i| {
            (
                i * 7 % 11 % 7,
                format!("/p/{}", i % 5),
                1_767_225_600_000 + i * 1_000,
            )
        })
        .collect()
}

fn write_clicks(dir: &Path, n: i64) -> String {
    let path = dir.join("clicks.csv");
    let mut text = String::new();
    for (user, url, ms) in clicks(n) {
        let secs = ms / 1000;
        let (h, m, s) = (secs / 3600 % 24, secs / 60 % 60, secs % 60);
        text.push_str(&format!(
            "{user},{url},2026-01-01 {h:02}:{m:02}:{s:02}.000\n"
        ));
    }
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn config(data: &Path) -> ServeConfig {
    let mut config = ServeConfig::new(data);
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.env.parallelism = 1;
    config.env.checkpoints.interval = Some(Duration::from_millis(200));
    config
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn connect(server: &Server) -> Client {
    let (client, connection) = tokio_postgres::connect(
        &format!(
            "host=127.0.0.1 port={} user=riffle dbname=riffle",
            server.local_addr().port()
        ),
        NoTls,
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    client
}

/// The rows of a simple query, as text.
async fn rows(client: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|i| row.get(i).map(str::to_string))
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

/// Waits until view `name`'s job reports `status`.
async fn wait_for_status(client: &Client, name: &str, status: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let views = rows(client, "SHOW MATERIALIZED VIEWS").await;
        let now = views
            .iter()
            .find(|r| r[0].as_deref() == Some(name))
            .and_then(|r| r[3].clone());
        if now.as_deref() == Some(status) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "view {name} is {now:?}, not {status}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn expected_per_user(n: i64) -> BTreeMap<i64, i64> {
    let mut counts = BTreeMap::new();
    for (user, _, _) in clicks(n) {
        *counts.entry(user).or_insert(0) += 1;
    }
    counts
}

const N: i64 = 5_000;

fn create_clicks_and_views(path: &str) -> String {
    format!(
        "CREATE TABLE clicks (user_id BIGINT, url STRING, ts TIMESTAMP(3),
             WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
         WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'csv');
         CREATE MATERIALIZED VIEW per_user AS
             SELECT user_id, COUNT(*) AS clicks FROM clicks GROUP BY user_id;
         CREATE MATERIALIZED VIEW per_user_minute AS
             SELECT user_id, window_start, COUNT(*) AS clicks
             FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
             GROUP BY user_id, window_start, window_end"
    )
}

#[test]
fn views_answer_lookups_ranges_and_aggregates_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_clicks(dir.path(), N);
    let data = dir.path().join("data");
    let expected = expected_per_user(N);
    let rt = runtime();
    {
        let server = Server::start(config(&data)).unwrap();
        rt.block_on(async {
            let client = connect(&server).await;
            client
                .batch_execute(&create_clicks_and_views(&path))
                .await
                .unwrap();
            wait_for_status(&client, "per_user", "finished").await;
            wait_for_status(&client, "per_user_minute", "finished").await;

            // A lookup by the view's key, through the extended protocol (binary rows).
            let row = client
                .query_one(
                    "SELECT user_id, clicks FROM per_user WHERE user_id = 3",
                    &[],
                )
                .await
                .unwrap();
            assert_eq!(row.get::<_, i64>(0), 3);
            assert_eq!(row.get::<_, i64>(1), expected[&3]);
            assert!(
                client
                    .query("SELECT * FROM per_user WHERE user_id = 99", &[])
                    .await
                    .unwrap()
                    .is_empty()
            );

            // Parameters, typed by the column they are compared with; a text parameter is a
            // value, never SQL.
            let row = client
                .query_one("SELECT clicks FROM per_user WHERE user_id = $1", &[&3i64])
                .await
                .unwrap();
            assert_eq!(row.get::<_, i64>(0), expected[&3]);
            let busy = client
                .query(
                    "SELECT user_id FROM per_user WHERE clicks > $1 ORDER BY user_id LIMIT $2",
                    &[&700i64, &2i64],
                )
                .await
                .unwrap();
            let want: Vec<i64> = expected
                .iter()
                .filter(|(_, c)| **c > 700)
                .map(|(u, _)| *u)
                .take(2)
                .collect();
            assert_eq!(
                busy.iter().map(|r| r.get::<_, i64>(0)).collect::<Vec<_>>(),
                want
            );
            for text in ["3", "3' OR '1' = '1"] {
                let found = client
                    .query(
                        "SELECT user_id FROM per_user WHERE CAST(user_id AS STRING) = $1",
                        &[&text],
                    )
                    .await
                    .unwrap();
                assert_eq!(found.len(), usize::from(text == "3"), "{text}");
            }

            // Every row, ordered and limited.
            let top = rows(
                &client,
                "SELECT user_id, clicks FROM per_user ORDER BY clicks DESC, user_id LIMIT 3",
            )
            .await;
            let mut by_count: Vec<(i64, i64)> = expected.iter().map(|(u, c)| (*u, *c)).collect();
            by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            let want: Vec<Vec<Option<String>>> = by_count[..3]
                .iter()
                .map(|(u, c)| vec![Some(u.to_string()), Some(c.to_string())])
                .collect();
            assert_eq!(top, want);

            // An aggregate over a view, and a filter over a range.
            let total = rows(&client, "SELECT SUM(clicks) AS total FROM per_user").await;
            assert_eq!(total, [[Some(N.to_string())]]);
            let busy = rows(
                &client,
                "SELECT user_id FROM per_user WHERE clicks > 700 ORDER BY user_id",
            )
            .await;
            let want: Vec<Vec<Option<String>>> = expected
                .iter()
                .filter(|(_, c)| **c > 700)
                .map(|(u, _)| vec![Some(u.to_string())])
                .collect();
            assert_eq!(busy, want);

            // The windowed view: one row per user and minute, summing to every click.
            let minutes = rows(
                &client,
                "SELECT COUNT(*) AS windows, SUM(clicks) AS clicks FROM per_user_minute",
            )
            .await;
            let mut windows = std::collections::BTreeSet::new();
            for (user, _, ms) in clicks(N) {
                windows.insert((user, ms / 60_000));
            }
            assert_eq!(
                minutes,
                [[Some(windows.len().to_string()), Some(N.to_string())]]
            );

            // A bad statement gets an error with its SQLSTATE; the session goes on.
            let e = client.simple_query("SELECT * FROM nope").await.unwrap_err();
            assert!(e.as_db_error().is_some(), "{e}");
            let e = client
                .simple_query("SELECT * FROM clicks")
                .await
                .unwrap_err();
            let db = e.as_db_error().unwrap();
            assert_eq!(db.code().code(), "0A000");
            assert!(db.message().contains("streaming table"), "{}", db.message());
            assert_eq!(
                rows(&client, "SELECT COUNT(*) FROM per_user").await.len(),
                1
            );
        });
        server.stop();
    }
    // The same data directory: the catalog and the views come back.
    let server = Server::start(config(&data)).unwrap();
    rt.block_on(async {
        let client = connect(&server).await;
        wait_for_status(&client, "per_user", "finished").await;
        let all = rows(
            &client,
            "SELECT user_id, clicks FROM per_user ORDER BY user_id",
        )
        .await;
        let want: Vec<Vec<Option<String>>> = expected
            .iter()
            .map(|(u, c)| vec![Some(u.to_string()), Some(c.to_string())])
            .collect();
        assert_eq!(all, want);
        client
            .batch_execute("DROP MATERIALIZED VIEW per_user")
            .await
            .unwrap();
        let names: Vec<_> = rows(&client, "SHOW MATERIALIZED VIEWS")
            .await
            .into_iter()
            .map(|r| r[0].clone().unwrap())
            .collect();
        assert_eq!(names, ["per_user_minute"]);
    });
    server.stop();
    assert!(!data.join("views").join("per_user").exists());
}

/// Bids arriving over about two seconds (the view changes while it is read), and their count
/// and highest price per auction group, `per_auction`.
async fn create_per_auction(client: &Client) {
    client
        .batch_execute(
            "CREATE TABLE bids (event_type INT, bid ROW<auction BIGINT, price BIGINT>)
             WITH ('connector' = 'nexmark', 'events.num' = '20000', 'rows-per-second' = '10000');
             CREATE MATERIALIZED VIEW per_auction AS
                 SELECT MOD(bid.auction, 10) AS a, COUNT(*) AS bids, MAX(bid.price) AS highest
                 FROM bids WHERE event_type = 2 GROUP BY MOD(bid.auction, 10)",
        )
        .await
        .unwrap();
}

/// The lines of a `COPY (SUBSCRIBE ..) TO STDOUT`, each split at its tabs.
struct CopyLines {
    copy: std::pin::Pin<Box<tokio_postgres::CopyOutStream>>,
    pending: String,
}

impl CopyLines {
    async fn start(client: &Client, statement: &str) -> CopyLines {
        let copy = client.copy_out(statement).await.unwrap();
        CopyLines {
            copy: Box::pin(copy),
            pending: String::new(),
        }
    }

    /// The next line; `quiet` names what was expected when none comes within 10 s.
    async fn next(&mut self, quiet: &str) -> Vec<String> {
        loop {
            if let Some(end) = self.pending.find('\n') {
                let line: String = self.pending.drain(..=end).collect();
                return line.trim_end().split('\t').map(str::to_string).collect();
            }
            let chunk = tokio::time::timeout(Duration::from_secs(10), self.copy.next())
                .await
                .unwrap_or_else(|_| panic!("{quiet}"))
                .expect("the subscription ended")
                .unwrap();
            self.pending.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }
}

#[test]
fn a_subscriber_gets_the_rows_then_every_change_once() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let server = Server::start(config(&dir.path().join("data"))).unwrap();
    rt.block_on(async {
        let client = connect(&server).await;
        create_per_auction(&client).await;
        let watcher = connect(&server).await;
        let mut copy = CopyLines::start(&watcher, "COPY (SUBSCRIBE per_auction) TO STDOUT").await;
        wait_for_status(&client, "per_auction", "finished").await;
        let final_rows: BTreeMap<String, Vec<String>> =
            rows(&client, "SELECT a, bids, highest FROM per_auction")
                .await
                .into_iter()
                .map(|r| {
                    let r: Vec<String> = r.into_iter().map(Option::unwrap).collect();
                    (r[0].clone(), r)
                })
                .collect();
        assert_eq!(final_rows.len(), 10);
        // Apply what the subscriber got until it matches the view's final rows.
        let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut last_progress = 0u64;
        let mut updates = 0;
        let deadline = Instant::now() + Duration::from_secs(30);
        while seen != final_rows {
            assert!(Instant::now() < deadline, "the subscriber saw {seen:?}");
            let fields = copy
                .next("the subscription went quiet before reaching the view's rows")
                .await;
            let progress: u64 = fields[0].parse().unwrap();
            assert!(progress >= last_progress, "progress went back: {fields:?}");
            last_progress = progress;
            let row = fields[2..].to_vec();
            match fields[1].as_str() {
                "insert" => {
                    assert!(seen.insert(row[0].clone(), row).is_none(), "{fields:?}");
                }
                "update" => {
                    updates += 1;
                    assert!(seen.insert(row[0].clone(), row).is_some(), "{fields:?}");
                }
                other => panic!("unexpected op {other}: {fields:?}"),
            }
        }
        assert!(updates > 0, "the subscriber saw no update");
    });
    server.stop();
}

#[test]
fn with_users_a_client_needs_its_password_and_without_them_only_loopback_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let mut with_users = config(&dir.path().join("data"));
    with_users.users = vec![
        ("ana".into(), "s3cret".into()),
        ("bo".into(), "other".into()),
    ];
    let server = Server::start(with_users).unwrap();
    let port = server.local_addr().port();
    let rt = runtime();
    rt.block_on(async {
        let connect = |user: &'static str, password: Option<&'static str>| async move {
            let mut url = format!("host=127.0.0.1 port={port} user={user}");
            if let Some(password) = password {
                url.push_str(&format!(" password={password}"));
            }
            match tokio_postgres::connect(&url, NoTls).await {
                Ok((client, connection)) => {
                    tokio::spawn(connection);
                    Ok(client)
                }
                Err(e) => Err(e),
            }
        };
        let wrong = connect("ana", Some("guess"))
            .await
            .expect_err("a wrong password is refused");
        assert_eq!(
            wrong.as_db_error().map(|e| e.code().code()),
            Some("28P01"),
            "{wrong:?}"
        );
        assert!(
            connect("ana", None).await.is_err(),
            "no password is refused"
        );
        assert!(
            connect("mallory", Some("s3cret")).await.is_err(),
            "an unknown user is refused"
        );
        let client = connect("ana", Some("s3cret")).await.unwrap();
        assert!(rows(&client, "SHOW TABLES").await.is_empty());
        // The users are the roles psql's `\du` lists.
        let roles = "SELECT rolname, rolsuper, rolcanlogin FROM pg_catalog.pg_roles ORDER BY 1";
        let t = |s: &str| Some(s.to_string());
        assert_eq!(
            rows(&client, roles).await,
            [[t("ana"), t("t"), t("t")], [t("bo"), t("t"), t("t")]]
        );
    });
    server.stop();

    // Without users, a non-loopback address fails at start, naming the setting.
    let mut open = config(&dir.path().join("other"));
    open.listen = "0.0.0.0:0".parse().unwrap();
    let e = Server::start(open).err().expect("refused");
    assert!(e.to_string().contains("--listen"), "{e}");
}

/// psql's output for `sql` on `server`, with `sslmode`: (succeeded, stdout, stderr).
fn psql(server: &Server, sslmode: &str, sql: &str) -> (bool, String, String) {
    psql_with(server, sslmode, &["-A", "-t"], sql)
}

/// psql's output for `sql` with `flags` (`-A -t`: unaligned, rows only).
fn psql_with(server: &Server, sslmode: &str, flags: &[&str], sql: &str) -> (bool, String, String) {
    let output = std::process::Command::new("psql")
        .arg(format!(
            "host=127.0.0.1 port={} user=riffle dbname=riffle sslmode={sslmode} connect_timeout=10",
            server.local_addr().port()
        ))
        .args(["-X", "-v", "ON_ERROR_STOP=1"])
        .args(flags)
        .args(["-c", sql])
        .output()
        .expect("psql runs (postgresql-client, installed by scripts/install-deps.sh)");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Runs openssl with `args`.
fn openssl(args: &[&str]) {
    let made = std::process::Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl runs (installed by scripts/install-deps.sh)");
    assert!(
        made.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&made.stderr)
    );
}

/// A self-signed certificate for `name` and its key (P-256), readable by their owner only (as
/// psql wants a client's key).
fn self_signed(cert: &Path, key: &Path, name: &str) {
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-days",
        "2",
        "-subj",
        &format!("/CN={name}"),
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,digitalSignature",
        "-keyout",
        &key.display().to_string(),
        "-out",
        &cert.display().to_string(),
    ]);
    private(key);
}

fn private(key: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(key, std::fs::Permissions::from_mode(0o600)).unwrap();
}

#[test]
fn with_a_certificate_clients_connect_over_tls_and_only_so() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("server.crt"), dir.path().join("server.key"));
    self_signed(&cert, &key, "localhost");
    let mut tls = config(&dir.path().join("data"));
    tls.tls = Some(riffle_serve::TlsFiles {
        cert: cert.clone(),
        key: key.clone(),
    });
    let server = Server::start(tls.clone()).unwrap();
    let (ok, out, err) = psql(&server, "require", "SELECT 40 + 2");
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "42");
    // The session really is encrypted: psql says with what.
    let (ok, out, err) = psql(&server, "require", "\\conninfo");
    assert!(ok && out.contains("SSL connection"), "{out}{err}");
    let (ok, _, err) = psql(&server, "disable", "SELECT 1");
    assert!(!ok, "a connection without TLS is refused");
    assert!(err.contains("TLS connections only"), "{err}");
    server.stop();

    // With users, the password exchange is bound to the certificate when the client asks for
    // it (SCRAM-SHA-256-PLUS, `channel_binding=require`).
    let mut bound = tls.clone();
    bound.users = vec![("ada".to_string(), "s3cret".to_string())];
    let server = Server::start(bound).unwrap();
    let login = |password: &str| {
        std::process::Command::new("psql")
            .arg(format!(
                "host=127.0.0.1 port={} user=ada dbname=riffle sslmode=require channel_binding=require connect_timeout=10",
                server.local_addr().port()
            ))
            .args(["-X", "-A", "-t", "-c", "SELECT 1"])
            .env("PGPASSWORD", password)
            .output()
            .unwrap()
    };
    let ok = login("s3cret");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let wrong = login("guess");
    assert!(!wrong.status.success());
    server.stop();

    // Files that are not a certificate and its key fail the start, naming the setting.
    let mut swapped = tls.clone();
    swapped.tls = Some(riffle_serve::TlsFiles {
        cert: key.clone(),
        key: cert.clone(),
    });
    let e = Server::start(swapped).err().expect("refused");
    assert!(e.to_string().contains("--tls-cert"), "{e}");
    let mut missing = tls;
    missing.tls = Some(riffle_serve::TlsFiles {
        cert,
        key: dir.path().join("absent.key"),
    });
    let e = Server::start(missing).err().expect("refused");
    assert!(
        e.to_string().contains("--tls-key") && e.to_string().contains("absent.key"),
        "{e}"
    );
}

#[test]
fn a_cursor_fetches_a_subscription_a_batch_at_a_time_through_the_extended_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let server = Server::start(config(&dir.path().join("data"))).unwrap();
    rt.block_on(async {
        let client = connect(&server).await;
        create_per_auction(&client).await;
        let mut reader = connect(&server).await;
        let transaction = reader.transaction().await.unwrap();
        transaction
            .batch_execute("DECLARE c CURSOR FOR SUBSCRIBE per_auction")
            .await
            .unwrap();
        // The extended protocol (prepared, typed rows): what drivers' fetch loops use.
        let fetch = transaction
            .prepare("FETCH 7 c WITH (timeout = '2s')")
            .await
            .unwrap();
        let names: Vec<&str> = fetch.columns().iter().map(|c| c.name()).collect();
        assert_eq!(names, ["progress", "op", "a", "bids", "highest"]);
        let types: Vec<String> = fetch
            .columns()
            .iter()
            .map(|c| c.type_().name().to_string())
            .collect();
        assert_eq!(types, ["int8", "varchar", "int4", "int8", "int8"]);
        wait_for_status(&client, "per_auction", "finished").await;
        let final_rows = per_auction_rows(&client).await;
        assert_eq!(final_rows.len(), 10);
        let mut seen: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
        let mut last_progress = 0;
        let deadline = Instant::now() + Duration::from_secs(30);
        while seen != final_rows {
            assert!(Instant::now() < deadline, "the cursor saw {seen:?}");
            let batch = transaction.query(&fetch, &[]).await.unwrap();
            assert!(batch.len() <= 7, "FETCH 7 returned {}", batch.len());
            for row in batch {
                let progress: i64 = row.get(0);
                assert!(progress >= last_progress);
                last_progress = progress;
                let op: &str = row.get(1);
                let a: i32 = row.get(2);
                let (a, bids, highest): (i64, i64, i64) = (i64::from(a), row.get(3), row.get(4));
                let before = seen.insert(a, (bids, highest));
                match op {
                    "insert" => assert!(before.is_none(), "insert of {a} twice"),
                    "update" => assert!(before.is_some(), "update of {a} before its insert"),
                    other => panic!("op {other}"),
                }
            }
        }
        // Nothing more comes: a FETCH with a timeout returns no rows once it passed.
        let empty = transaction
            .query("FETCH ALL c WITH (timeout = '50ms')", &[])
            .await
            .unwrap();
        assert!(
            empty.is_empty(),
            "{} rows after the view finished",
            empty.len()
        );
        transaction.commit().await.unwrap();
        // The transaction's end closed the cursor.
        let error = reader.simple_query("FETCH c").await.unwrap_err();
        assert_eq!(
            error.code(),
            Some(&tokio_postgres::error::SqlState::INVALID_CURSOR_NAME),
            "{error:?}"
        );
        let error = reader
            .simple_query("DECLARE d CURSOR FOR SELECT * FROM per_auction")
            .await
            .unwrap_err();
        let message = error.as_db_error().map(|e| e.message().to_string());
        assert!(
            message.as_deref().is_some_and(|m| m.contains("SUBSCRIBE")),
            "{error:?}"
        );
    });
    server.stop();
}

/// The rows of `per_auction`: bids and highest price by `a`.
async fn per_auction_rows(client: &Client) -> BTreeMap<i64, (i64, i64)> {
    rows(client, "SELECT a, bids, highest FROM per_auction")
        .await
        .into_iter()
        .map(|r| {
            let v: Vec<i64> = r.into_iter().map(|x| x.unwrap().parse().unwrap()).collect();
            (v[0], (v[1], v[2]))
        })
        .collect()
}

/// Applies a subscription's rows of `per_auction` to `seen`: each progress after the last, an
/// insert of a new key, an update of a known one.
fn apply(seen: &mut BTreeMap<i64, (i64, i64)>, last: &mut i64, rows: Vec<tokio_postgres::Row>) {
    for row in rows {
        let progress: i64 = row.get(0);
        assert!(progress > *last, "{progress} after {last}");
        *last = progress;
        let op: &str = row.get(1);
        let a: i32 = row.get(2);
        let before = seen.insert(i64::from(a), (row.get(3), row.get(4)));
        match op {
            "insert" => assert!(before.is_none(), "insert of {a} twice"),
            "update" => assert!(before.is_some(), "update of {a} before its insert"),
            other => panic!("op {other}"),
        }
    }
}

/// A durable cursor read part of the way (its last `FETCH` ending inside a batch), then a new
/// cursor `AS OF` the progress of the last row read: together they have each change once, in
/// order, and end at the view's rows.
#[test]
fn a_durable_cursor_resumes_as_of_its_last_row_with_each_change_once() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let server = Server::start(config(&dir.path().join("data"))).unwrap();
    rt.block_on(async {
        let client = connect(&server).await;
        create_per_auction(&client).await;
        let mut reader = connect(&server).await;
        let mut seen: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
        let mut last_progress = 0i64;
        let first = reader.transaction().await.unwrap();
        first
            .batch_execute("DECLARE c CURSOR FOR SUBSCRIBE per_auction WITH (DURABLE)")
            .await
            .unwrap();
        // Three rows at a time: the updates of one batch span several FETCHes.
        let mut fetched = 0;
        while fetched < 20 {
            let rows = first
                .query("FETCH 3 c WITH (timeout = '10s')", &[])
                .await
                .unwrap();
            assert!(!rows.is_empty(), "no durable change within 10 s");
            fetched += rows.len();
            apply(&mut seen, &mut last_progress, rows);
        }
        first.commit().await.unwrap();
        let token = last_progress;

        wait_for_status(&client, "per_auction", "finished").await;
        let final_rows = per_auction_rows(&client).await;
        let second = reader.transaction().await.unwrap();
        second
            .batch_execute(&format!(
                "DECLARE d CURSOR FOR SUBSCRIBE per_auction AS OF {token}"
            ))
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let rows = second
                .query("FETCH ALL d WITH (timeout = '1s')", &[])
                .await
                .unwrap();
            if rows.is_empty() && seen == final_rows {
                break;
            }
            assert!(Instant::now() < deadline, "the cursors saw {seen:?}");
            apply(&mut seen, &mut last_progress, rows);
        }
        second.commit().await.unwrap();
        // A token past what the view holds is refused with 55000, the session goes on.
        let error = reader
            .simple_query("SUBSCRIBE per_auction AS OF 99999999")
            .await
            .unwrap_err();
        assert_eq!(
            error.code(),
            Some(&tokio_postgres::error::SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE),
            "{error:?}"
        );
        assert_eq!(
            rows(&reader, "SELECT COUNT(*) FROM per_auction")
                .await
                .len(),
            1
        );
    });
    server.stop();
}

/// Waits until `sql` gives `want`.
async fn wait_for_rows(client: &Client, sql: &str, want: &[Vec<Option<String>>]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = rows(client, sql).await;
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{sql} gives {now:?}, not {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Views over a view read its changes (not its query again): a global aggregate and a filter
/// over `per_auction` end equal to the same query over its rows, also after a restart of the
/// server, and the view they read cannot be dropped before them.
#[test]
fn a_view_of_a_view_reads_its_changes_once_also_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let rt = runtime();
    let totals = "SELECT auctions, bids FROM totals";
    let busy = "SELECT a, bids FROM busy ORDER BY a";
    let (want_totals, want_busy) = {
        let server = Server::start(config(&data)).unwrap();
        let wants = rt.block_on(async {
            let client = connect(&server).await;
            create_per_auction(&client).await;
            client
                .batch_execute(
                    "CREATE MATERIALIZED VIEW totals AS
                         SELECT COUNT(*) AS auctions, SUM(bids) AS bids FROM per_auction;
                     CREATE MATERIALIZED VIEW busy AS
                         SELECT a, bids FROM per_auction WHERE bids > 900",
                )
                .await
                .unwrap();
            wait_for_status(&client, "per_auction", "finished").await;
            // The same queries over the inner view's rows (a bounded read of them).
            let want_totals = rows(&client, "SELECT COUNT(*), SUM(bids) FROM per_auction").await;
            let want_busy = rows(
                &client,
                "SELECT a, bids FROM per_auction WHERE bids > 900 ORDER BY a",
            )
            .await;
            assert_eq!(
                want_totals[0][1].as_deref(),
                Some("18400"),
                "46 bids in 50 events"
            );
            assert!(
                !want_busy.is_empty() && want_busy.len() < 10,
                "{want_busy:?}"
            );
            wait_for_rows(&client, totals, &want_totals).await;
            wait_for_rows(&client, busy, &want_busy).await;
            let error = client
                .simple_query("DROP MATERIALIZED VIEW per_auction")
                .await
                .unwrap_err();
            assert_eq!(
                error.code(),
                Some(&tokio_postgres::error::SqlState::DEPENDENT_OBJECTS_STILL_EXIST),
                "{error:?}"
            );
            (want_totals, want_busy)
        });
        server.stop();
        wants
    };
    // Restored from their checkpoints: the outer views neither lose nor count twice.
    let server = Server::start(config(&data)).unwrap();
    rt.block_on(async {
        let client = connect(&server).await;
        wait_for_rows(&client, totals, &want_totals).await;
        wait_for_rows(&client, busy, &want_busy).await;
        client
            .batch_execute(
                "DROP MATERIALIZED VIEW totals; DROP MATERIALIZED VIEW busy;
                 DROP MATERIALIZED VIEW per_auction",
            )
            .await
            .unwrap();
    });
    server.stop();
}

/// The lines of a sink's committed part files under `dir` (`part-<job>-<subtask>-<run>-<n>`),
/// in the order they were written (one subtask), as JSON.
fn json_lines(dir: &Path) -> Vec<serde_json::Value> {
    let mut parts: Vec<((String, u64), std::path::PathBuf)> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let stem = name.strip_prefix("part-")?.split('.').next()?.to_string();
                    let mut numbers = stem.rsplit('-');
                    let n = numbers.next()?.parse().ok()?;
                    let run = numbers.next()?.to_string();
                    Some(((run, n), e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    parts.sort();
    parts
        .iter()
        .flat_map(|(_, path)| {
            let text = std::fs::read_to_string(path).unwrap();
            text.lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `INSERT INTO` a table writes a view's changes through the table's connector until the view
/// ends; `SHOW SINKS` lists it, the view cannot be dropped before it, `DROP SINK` removes it.
#[test]
fn insert_into_a_table_writes_a_views_changes_as_a_sink() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let rt = runtime();
    let server = Server::start(config(&dir.path().join("data"))).unwrap();
    rt.block_on(async {
        let client = connect(&server).await;
        create_per_auction(&client).await;
        client
            .batch_execute(&format!(
                "CREATE TABLE out (a INT, bids BIGINT) WITH ('connector' = 'filesystem',
                     'path' = '{}', 'format' = 'debezium-json')",
                out.display()
            ))
            .await
            .unwrap();
        let done = client
            .simple_query("INSERT INTO out SELECT a, bids FROM per_auction")
            .await
            .unwrap();
        assert!(
            matches!(done.last(), Some(SimpleQueryMessage::CommandComplete(0))),
            "{done:?}"
        );
        let sinks = rows(&client, "SHOW SINKS").await;
        assert_eq!(sinks.len(), 1);
        assert_eq!(sinks[0][0].as_deref(), Some("insert_1"));
        let error = client
            .simple_query("DROP MATERIALIZED VIEW per_auction")
            .await
            .unwrap_err();
        let message = error.as_db_error().map(|e| e.message().to_string());
        assert!(
            message
                .as_deref()
                .is_some_and(|m| m.contains("sink `insert_1`")),
            "{error:?}"
        );
        wait_for_status(&client, "per_auction", "finished").await;
        // The sink ends with the view it reads.
        let deadline = Instant::now() + Duration::from_secs(60);
        while rows(&client, "SHOW SINKS").await[0][1].as_deref() != Some("finished") {
            assert!(Instant::now() < deadline, "the sink did not finish");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let want: BTreeMap<i64, i64> = rows(&client, "SELECT a, bids FROM per_auction")
            .await
            .into_iter()
            .map(|r| {
                (
                    r[0].clone().unwrap().parse().unwrap(),
                    r[1].clone().unwrap().parse().unwrap(),
                )
            })
            .collect();
        let mut got = BTreeMap::new();
        for event in json_lines(&out) {
            match event["op"].as_str() {
                Some("c") => {
                    let row = &event["after"];
                    let before =
                        got.insert(row["a"].as_i64().unwrap(), row["bids"].as_i64().unwrap());
                    assert_eq!(before, None, "{event}");
                }
                Some("d") => {
                    let row = &event["before"];
                    let was = got.remove(&row["a"].as_i64().unwrap());
                    assert_eq!(was, row["bids"].as_i64(), "{event}");
                }
                _ => panic!("{event}"),
            }
        }
        assert_eq!(got, want);
        client
            .batch_execute("DROP SINK insert_1; DROP MATERIALIZED VIEW per_auction")
            .await
            .unwrap();
        assert!(rows(&client, "SHOW SINKS").await.is_empty());
    });
    server.stop();
}

/// With a web configuration, each view's job serves its web UI and REST API, on a port of its
/// own, and `SHOW MATERIALIZED VIEWS` says where.
#[test]
fn each_views_job_serves_its_web_ui() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(&dir.path().join("data"));
    config.web = Some(riffle_web::WebConfig {
        address: "127.0.0.1:0".parse().unwrap(),
        register: false,
        ..riffle_web::WebConfig::default()
    });
    let rt = runtime();
    let server = Server::start(config).unwrap();
    let url = rt.block_on(async {
        let client = connect(&server).await;
        create_per_auction(&client).await;
        let views = rows(&client, "SHOW MATERIALIZED VIEWS").await;
        views[0][5].clone().expect("a web UI")
    });
    let job = riffle_web::client::JobClient::new(&url, None)
        .get("/api/v1/job")
        .unwrap();
    assert_eq!(job["name"], "view-per_auction", "{job}");
    server.stop();
}

#[test]
fn psql_describes_tables_views_and_materialized_views() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_clicks(dir.path(), 100);
    let rt = runtime();
    let mut config = config(&dir.path().join("data"));
    // A function registered from Rust of a fixed result type, and one whose result type is its
    // argument's.
    config.functions.push((
        "is_bot".into(),
        ScalarFunction::returning(DataType::Boolean, |_| Ok(Value::Bool(false))),
    ));
    config.functions.push((
        "Same".into(),
        ScalarFunction {
            result_type: std::sync::Arc::new(|types| {
                types.first().cloned().ok_or_else(|| "one argument".into())
            }),
            eval: std::sync::Arc::new(|args| Ok(args[0].clone())),
        },
    ));
    let server = Server::start(config).unwrap();
    rt.block_on(async {
        let client = connect(&server).await;
        client
            .batch_execute(&create_clicks_and_views(&path))
            .await
            .unwrap();
        client
            .batch_execute("CREATE VIEW pages AS SELECT url, ts FROM clicks")
            .await
            .unwrap();
        // Through the extended protocol too (drivers' metadata calls), with a parameter.
        let names: Vec<String> = client
            .query(
                "SELECT c.relname FROM pg_catalog.pg_class c WHERE c.relkind = $1 ORDER BY 1",
                &[&"m"],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert_eq!(names, ["per_user", "per_user_minute"]);
    });
    let described = |command: &str| {
        let (ok, out, err) = psql(&server, "disable", command);
        assert!(ok, "{command}: {err}");
        out
    };
    // What Postgres' psql prints for relations of these kinds and columns (`-A -t`: unaligned,
    // rows only).
    assert_eq!(
        described("\\d"),
        "public|clicks|table|riffle\n\
         public|pages|view|riffle\n\
         public|per_user|materialized view|riffle\n\
         public|per_user_minute|materialized view|riffle\n"
    );
    assert_eq!(described("\\dt"), "public|clicks|table|riffle\n");
    assert_eq!(described("\\dv"), "public|pages|view|riffle\n");
    assert_eq!(
        described("\\dm"),
        "public|per_user|materialized view|riffle\n\
         public|per_user_minute|materialized view|riffle\n"
    );
    assert_eq!(
        described("\\d clicks"),
        "user_id|bigint|||\n\
         url|character varying|||\n\
         ts|timestamp(3) without time zone|||\n"
    );
    assert_eq!(
        described("\\d per_user_minute"),
        "user_id|bigint|||\n\
         window_start|timestamp(3) without time zone||not null|\n\
         clicks|bigint||not null|\n"
    );
    assert_eq!(
        described("\\d+ per_user"),
        "user_id|bigint||||plain|||\nclicks|bigint||not null||plain|||\n"
    );
    // With its title and footer: the view's query.
    for (name, title, definition) in [
        (
            "per_user",
            "Materialized view \"public.per_user\"",
            "SELECT user_id, COUNT(*) AS clicks FROM clicks GROUP BY user_id",
        ),
        (
            "pages",
            "View \"public.pages\"",
            "SELECT url, ts FROM clicks",
        ),
    ] {
        let (ok, out, err) = psql_with(&server, "disable", &[], &format!("\\d+ {name}"));
        assert!(ok, "{err}");
        assert!(out.contains(title), "{out}");
        assert!(
            out.contains(&format!("View definition:\n{definition}\n")),
            "{out}"
        );
    }
    assert_eq!(described("\\dn"), "public|riffle\n");
    assert!(described("\\l").starts_with("riffle|riffle|UTF8|"));
    assert_eq!(described("\\du"), "riffle|Superuser|{}\n");
    // The functions registered from Rust: any arguments, their result type when it does not
    // depend on them.
    assert_eq!(
        described("\\df"),
        "public|is_bot|boolean|VARIADIC \"any\"|func\n\
         public|same|anyelement|VARIADIC \"any\"|func\n"
    );
    let (ok, out, err) = psql_with(&server, "disable", &[], "\\df+ is_bot");
    assert!(ok, "{err}");
    assert!(
        out.contains("| volatile   |") && out.contains("| rust     |"),
        "{out}"
    );
    assert_eq!(described("\\df nosuch"), "");
    let (ok, _, err) = psql(&server, "disable", "\\d nosuch");
    assert!(
        !ok && err.contains("Did not find any relation named \"nosuch\""),
        "{err}"
    );
    server.stop();
}

#[test]
fn with_a_ca_of_client_certificates_a_client_connects_only_as_the_user_its_certificate_names() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str| dir.path().join(name);
    let path = |name: &str| file(name).display().to_string();
    self_signed(&file("server.crt"), &file("server.key"), "localhost");
    self_signed(&file("ca.crt"), &file("ca.key"), "riffle test CA");
    // Client certificates the CA signed, for `riffle` and for `mallory`; and one for `riffle`
    // that no CA of the server signed.
    std::fs::write(file("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    for user in ["riffle", "mallory"] {
        openssl(&[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            &format!("/CN={user}"),
            "-keyout",
            &path(&format!("{user}.key")),
            "-out",
            &path(&format!("{user}.csr")),
        ]);
        openssl(&[
            "x509",
            "-req",
            "-in",
            &path(&format!("{user}.csr")),
            "-CA",
            &path("ca.crt"),
            "-CAkey",
            &path("ca.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &path("client.ext"),
            "-out",
            &path(&format!("{user}.crt")),
        ]);
        private(&file(&format!("{user}.key")));
    }
    self_signed(&file("stranger.crt"), &file("stranger.key"), "riffle");

    let mut config = config(&file("data"));
    config.tls = Some(riffle_serve::TlsFiles {
        cert: file("server.crt"),
        key: file("server.key"),
    });
    config.tls_client_ca = Some(file("ca.crt"));
    let server = Server::start(config.clone()).unwrap();
    let connect_as = |user: &str, certificate: Option<&str>| {
        let mut conninfo = format!(
            "host=127.0.0.1 port={} user={user} dbname=riffle sslmode=require connect_timeout=10",
            server.local_addr().port()
        );
        match certificate {
            Some(name) => conninfo.push_str(&format!(
                " sslcert={} sslkey={}",
                path(&format!("{name}.crt")),
                path(&format!("{name}.key"))
            )),
            // (psql would otherwise send ~/.postgresql/postgresql.crt if there is one.)
            None => conninfo.push_str(&format!(
                " sslcert={} sslkey={}",
                path("absent.crt"),
                path("absent.key")
            )),
        }
        let output = std::process::Command::new("psql")
            .arg(conninfo)
            .args(["-X", "-A", "-t", "-c", "SELECT 40 + 2"])
            .output()
            .unwrap();
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).trim().to_string(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (ok, out, err) = connect_as("riffle", Some("riffle"));
    assert!(ok && out == "42", "{out}{err}");
    let (ok, out, err) = connect_as("mallory", Some("mallory"));
    assert!(ok && out == "42", "{out}{err}");
    let (ok, _, err) = connect_as("riffle", Some("mallory"));
    assert!(!ok, "a certificate for another user is refused");
    assert!(
        err.contains("certificate authentication failed for user \"riffle\""),
        "{err}"
    );
    let (ok, _, err) = connect_as("riffle", Some("stranger"));
    assert!(!ok, "a certificate no CA of the server signed is refused");
    assert!(
        err.contains("SSL error") && err.contains("certificate unknown"),
        "{err}"
    );
    let (ok, _, err) = connect_as("riffle", None);
    assert!(!ok, "a client without a certificate is refused");
    assert!(
        err.contains("SSL error") && err.contains("certificate required"),
        "{err}"
    );
    server.stop();

    // With a CA of client certificates the server may listen off loopback without users.
    let mut open = config.clone();
    open.data_dir = file("open");
    open.listen = "0.0.0.0:0".parse().unwrap();
    Server::start(open).unwrap().stop();
    // Without the server's own certificate, or with a CA file that holds none, it does not
    // start, naming the setting.
    let mut no_tls = config.clone();
    no_tls.tls = None;
    let e = Server::start(no_tls).err().expect("refused");
    assert!(e.to_string().contains("--tls-client-ca"), "{e}");
    let mut not_a_ca = config;
    not_a_ca.tls_client_ca = Some(file("client.ext"));
    let e = Server::start(not_a_ca).err().expect("refused");
    assert!(e.to_string().contains("--tls-client-ca"), "{e}");
}

#[test]
fn an_error_in_a_transaction_block_aborts_it_until_it_ends_as_in_postgres() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(config(&dir.path().join("data"))).unwrap();
    // Each -c is a statement of its own; psql goes on after errors.
    let mut flags = vec!["-v", "ON_ERROR_STOP=0", "-A", "-t"];
    for statement in [
        "BEGIN",
        "SELECT 1",
        "SELECT * FROM nosuch",
        "SELECT 2",
        "COMMIT",
        "BEGIN",
        "CREATE TABLE t (a INT) WITH ('connector' = 'datagen')",
        "ROLLBACK",
        "BEGIN",
        "SHOW TABLES",
        "COMMIT",
    ] {
        flags.extend(["-c", statement]);
    }
    let (_, out, err) = psql_with(&server, "disable", &flags, "SELECT 3");
    // COMMIT of an aborted block rolls it back; the table was never made.
    assert_eq!(
        out,
        "BEGIN\n1\nROLLBACK\nBEGIN\nROLLBACK\nBEGIN\nCOMMIT\n3\n"
    );
    let errors: Vec<&str> = err.lines().collect();
    assert_eq!(errors.len(), 3, "{err}");
    assert!(errors[0].contains("nosuch"), "{err}");
    assert!(
        errors[1].contains(
            "current transaction is aborted, commands ignored until end of transaction block"
        ),
        "{err}"
    );
    assert!(
        errors[2].contains("CREATE TABLE cannot run inside a transaction block"),
        "{err}"
    );
    server.stop();
}

#[test]
fn a_subscriber_with_progress_hears_from_a_quiet_view_every_second() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let server = Server::start(config(&dir.path().join("data"))).unwrap();
    rt.block_on(async {
        let client = connect(&server).await;
        create_per_auction(&client).await;
        // Its input ended: no change will come.
        wait_for_status(&client, "per_auction", "finished").await;
        let views = rows(&client, "SHOW MATERIALIZED VIEWS").await;
        let progress = views[0][2].clone().unwrap();
        let statement = "COPY (SUBSCRIBE per_auction WITH (PROGRESS)) TO STDOUT";
        let mut copy = CopyLines::start(&client, statement).await;
        let (mut inserts, mut progress_rows) = (0, Vec::new());
        let started = Instant::now();
        // The rows, their progress row, then two more while nothing changes.
        while progress_rows.len() < 3 {
            let fields = copy
                .next("a quiet subscription sends a progress row every second")
                .await;
            match fields[1].as_str() {
                "insert" => inserts += 1,
                "progress" => progress_rows.push(fields[0].clone()),
                other => panic!("no change was expected: {other} {fields:?}"),
            }
        }
        assert_eq!(inserts, 10);
        assert_eq!(
            progress_rows,
            [progress.clone(), progress.clone(), progress]
        );
        assert!(started.elapsed() >= riffle_serve::wire::QUIET_PROGRESS_INTERVAL * 2);
    });
    server.stop();
}

#[test]
fn a_repeatable_read_block_sees_each_view_as_its_first_read_did() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let server = Server::start(config(&dir.path().join("data"))).unwrap();
    rt.block_on(async {
        let live = connect(&server).await;
        // An endless paced stream: the view changes all through the test.
        live.batch_execute(
            "CREATE TABLE bids (event_type INT, bid ROW<auction BIGINT, price BIGINT>)
             WITH ('connector' = 'nexmark', 'rows-per-second' = '2000');
             CREATE MATERIALIZED VIEW per_auction AS
                 SELECT MOD(bid.auction, 10) AS a, COUNT(*) AS bids
                 FROM bids WHERE event_type = 2 GROUP BY MOD(bid.auction, 10)",
        )
        .await
        .unwrap();
        let total = "SELECT CAST(SUM(bids) AS BIGINT) FROM per_auction";
        // (`NULL` while the view is empty.)
        let sum = |rows: Vec<tokio_postgres::Row>| {
            rows.first()
                .and_then(|r| r.get::<_, Option<i64>>(0))
                .unwrap_or(0)
        };
        // Until the view counts more than `than` bids, as a statement of its own reads it.
        let grown = |than: i64| {
            let live = &live;
            async move {
                let deadline = Instant::now() + Duration::from_secs(60);
                loop {
                    let now = sum(live.query(total, &[]).await.unwrap());
                    if now > than {
                        return now;
                    }
                    assert!(Instant::now() < deadline, "the view stayed at {now} bids");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        grown(0).await;
        let mut reader = connect(&server).await;
        let block = reader
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .start()
            .await
            .unwrap();
        let first = sum(block.query(total, &[]).await.unwrap());
        let some = block
            .query("SELECT a, bids FROM per_auction ORDER BY a LIMIT 1", &[])
            .await
            .unwrap();
        let (a, bids): (i32, i64) = (some[0].get(0), some[0].get(1));
        let lookup = "SELECT bids FROM per_auction WHERE a = $1";
        grown(first).await;
        // The view moved on; the block still sees it as its first read did, by whole
        // reads, point lookups and simple queries alike.
        assert_eq!(sum(block.query(total, &[]).await.unwrap()), first);
        assert_eq!(
            block.query(lookup, &[&a]).await.unwrap()[0].get::<_, i64>(0),
            bids
        );
        let shown = block
            .simple_query("SHOW transaction_isolation")
            .await
            .unwrap();
        assert!(
            matches!(&shown[1], SimpleQueryMessage::Row(r) if r.get(0) == Some("repeatable read"))
        );
        block.commit().await.unwrap();
        assert!(sum(reader.query(total, &[]).await.unwrap()) > first);

        // READ COMMITTED (a plain BEGIN): each statement reads the view as it is then.
        let block = reader.transaction().await.unwrap();
        let first = sum(block.query(total, &[]).await.unwrap());
        let later = grown(first).await;
        assert!(sum(block.query(total, &[]).await.unwrap()) >= later);
        block.rollback().await.unwrap();

        // A view dropped and created again under a block that read it: the block cannot go on.
        reader
            .batch_execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
            .await
            .unwrap();
        sum(reader.query(total, &[]).await.unwrap());
        live.batch_execute(
            "DROP MATERIALIZED VIEW per_auction;
             CREATE MATERIALIZED VIEW per_auction AS
                 SELECT MOD(bid.auction, 10) AS a, COUNT(*) AS bids
                 FROM bids WHERE event_type = 2 GROUP BY MOD(bid.auction, 10)",
        )
        .await
        .unwrap();
        let e = reader.query(total, &[]).await.unwrap_err();
        assert_eq!(e.code().map(|c| c.code()), Some("40001"), "{e:?}");
        reader.batch_execute("ROLLBACK").await.unwrap();
        assert!(reader.query(total, &[]).await.is_ok());
    });
    server.stop();
}

/// `humans_per_minute`'s rows: (user, minute of the day) -> clicks.
async fn per_minute(client: &Client) -> BTreeMap<(i64, i64), i64> {
    let sql = "SELECT user_id, window_start, clicks FROM humans_per_minute";
    rows(client, sql)
        .await
        .into_iter()
        .map(|r| {
            let r: Vec<String> = r.into_iter().map(Option::unwrap).collect();
            // `2026-01-01 HH:MM:00`
            let (h, m): (i64, i64) = (r[1][11..13].parse().unwrap(), r[1][14..16].parse().unwrap());
            ((r[0].parse().unwrap(), h * 60 + m), r[2].parse().unwrap())
        })
        .collect()
}

#[test]
fn a_window_over_a_view_of_appended_rows_counts_as_over_its_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_clicks(dir.path(), N);
    let rt = runtime();
    // Computed here from the clicks: (user, minute) -> clicks off page 0.
    let mut want: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    for (user, url, ms) in clicks(N) {
        if url != "/p/0" {
            *want
                .entry((user, (ms - 1_767_225_600_000) / 60_000))
                .or_default() += 1;
        }
    }
    let server = Server::start(config(&dir.path().join("data"))).unwrap();
    rt.block_on(async {
        let client = connect(&server).await;
        client
            .batch_execute(&format!(
                "{};
                 CREATE MATERIALIZED VIEW humans AS
                     SELECT user_id, url, ts FROM clicks WHERE url <> '/p/0';
                 CREATE MATERIALIZED VIEW humans_per_minute AS
                     SELECT user_id, window_start, COUNT(*) AS clicks
                     FROM TABLE(TUMBLE(TABLE humans, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
                     GROUP BY user_id, window_start, window_end",
                create_clicks_and_views(&path)
            ))
            .await
            .unwrap();
        wait_for_status(&client, "humans_per_minute", "finished").await;
        assert_eq!(per_minute(&client).await, want);
        // A window over a view whose rows are updated: refused, naming why.
        let e = client
            .batch_execute(
                "CREATE MATERIALIZED VIEW last_click AS
                     SELECT user_id, MAX(ts) AS ts FROM clicks GROUP BY user_id;
                 CREATE MATERIALIZED VIEW nope AS SELECT window_start, COUNT(*) AS n
                 FROM TABLE(TUMBLE(TABLE last_click, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
                 GROUP BY window_start, window_end",
            )
            .await
            .unwrap_err();
        let message = e
            .as_db_error()
            .map(|e| e.message().to_string())
            .unwrap_or_default();
        assert!(
            message.contains("`last_click` has no event time")
                && message.contains("`last_click`'s rows are updated"),
            "{message}"
        );
    });
    server.stop();
    // A restart restores the views' rows and where the window's view had read to.
    let server = Server::start(config(&dir.path().join("data"))).unwrap();
    rt.block_on(async {
        let client = connect(&server).await;
        wait_for_status(&client, "humans_per_minute", "finished").await;
        assert_eq!(per_minute(&client).await, want);
    });
    server.stop();
}
