//! Change data capture from the test PostgreSQL server (`RIFFLE_POSTGRES_URL`, started by the
//! README's test command): a table's snapshot then its inserts, updates (a key changed among
//! them), deletes and multi-statement transactions, the changelog applied equal to the table;
//! through failures of the job during the snapshot and during the stream; and the errors of a
//! table that cannot be captured.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};
use riffle::change::UpsertTable;
use riffle::checkpoint::{CheckpointConfig, RestartStrategy};
use riffle::sink::{CollectSink, Collected};
use riffle::source::Source;
use riffle::testing::fail_once_after;
use riffle::{Change, EnvConfig, RowKind, StreamEnv};
use riffle_postgres::{CdcRow, PostgresCdcSource, PostgresSink, RowChange};

fn url() -> String {
    std::env::var("RIFFLE_POSTGRES_URL").expect(
        "RIFFLE_POSTGRES_URL is not set: start a server with `./scripts/postgres.sh start && eval \"$(./scripts/postgres.sh env)\"` (the README's test command does)",
    )
}

fn client() -> Client {
    Client::connect(&url(), NoTls).expect("connect to the test server")
}

/// A fresh table `name` with `rows` rows (every third with a long, TOASTed `note`), its
/// replica identity `FULL` or the default (the primary key), and no slot or publication of that
/// name left.
fn setup(name: &str, rows: i64, full: bool) {
    let mut db = client();
    db.batch_execute(&format!(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '{name}';
         DROP PUBLICATION IF EXISTS {name};
         DROP TABLE IF EXISTS {name};
         CREATE TABLE {name} (id bigint PRIMARY KEY, name text, qty int, note text);
         ALTER TABLE {name} REPLICA IDENTITY {identity};
         INSERT INTO {name} SELECT i, 'item ' || i, i % 10,
           CASE WHEN i % 3 = 2 THEN (SELECT string_agg(md5(i::text || j::text), '') FROM generate_series(1, 300) j) ELSE 'short' END
           FROM generate_series(1, {rows}) i;",
        identity = if full { "FULL" } else { "DEFAULT" }
    ))
    .unwrap();
}

fn teardown(name: &str) {
    let mut db = client();
    db.batch_execute(&format!(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '{name}';
         DROP PUBLICATION IF EXISTS {name};"
    ))
    .unwrap();
}

/// The table's rows as `id → (name, qty, note length)`.
fn table_rows(name: &str) -> BTreeMap<String, (String, String, usize)> {
    client()
        .query(
            &format!("SELECT id::text, name, qty::text, note FROM {name}"),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| {
            let note: String = r.get(3);
            (r.get(0), (r.get(1), r.get(2), note.len()))
        })
        .collect()
}

/// The changelog collected so far, applied by key, in the same shape.
fn applied(out: &Collected<Change<CdcRow>>) -> BTreeMap<String, (String, String, usize)> {
    let mut table = UpsertTable::new();
    for change in out.values() {
        let id = change.row.get("id").unwrap().to_string();
        table.apply(id, change);
    }
    table
        .rows()
        .iter()
        .map(|(id, row)| {
            (
                id.clone(),
                (
                    row.get("name").unwrap_or("").to_string(),
                    row.get("qty").unwrap_or("").to_string(),
                    row.get("note").map_or(0, str::len),
                ),
            )
        })
        .collect()
}

/// Waits (up to 60 s) until the applied changelog equals the table.
fn wait_equal(name: &str, out: &Collected<Change<CdcRow>>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (want, got) = (table_rows(name), applied(out));
        if want == got {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the changelog of {name} never equalled the table: {} rows in the table, {} applied; first differences: {:?}; first rows not in the table: {:?}",
            want.len(),
            got.len(),
            want.iter()
                .filter(|(k, v)| got.get(*k) != Some(v))
                .take(3)
                .collect::<Vec<_>>(),
            got.iter()
                .filter(|(k, _)| !want.contains_key(*k))
                .take(5)
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Changes of `name` in several transactions: updates, the keys of `moved` changed, deletes,
/// inserts, an update of only the small columns of rows with a TOASTed note (the note is not
/// sent).
fn change_everything(name: &str, moved: &str) {
    let mut db = client();
    db.batch_execute(&format!(
        "UPDATE {name} SET qty = qty + 100 WHERE id % 7 = 0;
         DELETE FROM {name} WHERE id % 11 = 0;
         UPDATE {name} SET id = id + 100000 WHERE id IN ({moved});
         BEGIN;
           INSERT INTO {name} SELECT i, 'new ' || i, 1, 'n' FROM generate_series(5001, 5100) i;
           UPDATE {name} SET name = 'renamed' WHERE id = 5001;
           DELETE FROM {name} WHERE id = 5002;
         COMMIT;
         UPDATE {name} SET qty = -1 WHERE id % 3 = 2;"
    ))
    .unwrap();
}

/// The changelog of table `name`, captured through a slot and a publication of its name.
fn capture(env: &StreamEnv, name: &str) -> riffle::DataStream<Change<CdcRow>> {
    PostgresCdcSource::new(url(), [name])
        .slot(name)
        .publication(name)
        .poll_interval(Duration::from_millis(20))
        .changelog(env)
}

fn env(checkpoints: &std::path::Path) -> StreamEnv {
    StreamEnv::with_config(
        EnvConfig::default()
            .with_parallelism(2)
            .with_dead_letter_dir(checkpoints.join("dead-letter"))
            .with_checkpoints(
                CheckpointConfig {
                    restart: RestartStrategy::FixedDelay {
                        attempts: 3,
                        delay: Duration::from_millis(50),
                    },
                    ..CheckpointConfig::default()
                }
                .with_interval(Some(Duration::from_millis(100)))
                .with_storage(checkpoints.display().to_string()),
            ),
    )
}

#[test]
fn a_snapshot_then_every_change_in_commit_order() {
    let name = "cdc_items";
    // The default replica identity: updates send no old row; keys moved of rows without a
    // TOASTed value (see the last test for the others).
    setup(name, 1_000, false);
    let dir = tempfile::tempdir().unwrap();
    let env = env(dir.path());
    let (sink, out) = CollectSink::new();
    capture(&env, name).sink(sink);
    let handle = env.execute_async().unwrap();
    wait_equal(name, &out);
    change_everything(name, "3, 6");
    wait_equal(name, &out);
    handle.stop();
    assert_eq!(handle.wait().unwrap().bad_records(), 0);
    // The snapshot's rows came as inserts, each once.
    let inserts = out
        .values()
        .iter()
        .filter(|c| c.op == riffle::RowKind::Insert)
        .count();
    assert_eq!(inserts, 1_000 + 2 + 100);
    teardown(name);
}

/// Waits (up to 60 s) until `copy` holds the rows of `name`.
fn wait_copied(name: &str, copy: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let differing = || -> i64 {
        client()
            .query_one(
                &format!(
                    "SELECT count(*) FROM ((TABLE {name} EXCEPT TABLE {copy}) UNION ALL (TABLE {copy} EXCEPT TABLE {name})) d"
                ),
                &[],
            )
            .unwrap()
            .get(0)
    };
    loop {
        let n = differing();
        if n == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{copy} never equalled {name}: {n} rows differ"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A replica: the changelog of `name` written into `copy` by primary key, exactly-once; the job
/// fails once after `fail_after` changes (during the snapshot, or during the stream) and
/// restores its last checkpoint: the replica ends equal to the table.
#[test]
fn a_replica_through_failures_during_the_snapshot_and_the_stream_is_exact() {
    for (name, fail_after) in [("cdc_fail_snapshot", 700u64), ("cdc_fail_stream", 2_300)] {
        // REPLICA IDENTITY FULL: updates send the old row whole, TOASTed values too.
        setup(name, 2_000, true);
        let copy = format!("{name}_copy");
        client()
            .batch_execute(&format!(
                "DROP TABLE IF EXISTS {copy}; CREATE TABLE {copy} (LIKE {name} INCLUDING ALL);"
            ))
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let env = env(dir.path());
        capture(&env, name).map(fail_once_after(fail_after)).sink(
            PostgresSink::with_encoder(url(), &copy, ["id"], |change: &Change<CdcRow>| {
                let row: serde_json::Map<String, serde_json::Value> = change
                    .row
                    .columns
                    .iter()
                    .zip(&change.row.values)
                    .map(|(c, v)| {
                        (
                            c.clone(),
                            v.clone()
                                .map_or(serde_json::Value::Null, serde_json::Value::String),
                        )
                    })
                    .collect();
                Ok(Some(match change.op {
                    RowKind::Insert | RowKind::UpdateAfter => RowChange::Put(row),
                    RowKind::Delete | RowKind::UpdateBefore => RowChange::Delete(row),
                }))
            })
            .exactly_once(),
        );
        let handle = env.execute_async().unwrap();
        wait_copied(name, &copy);
        change_everything(name, "2, 4");
        wait_copied(name, &copy);
        handle.stop();
        let result = handle.wait().unwrap();
        assert_eq!(result.restarts, 1, "{name}");
        teardown(name);
    }
}

/// With the default replica identity, an update that changes the key of a row whose TOASTed
/// value it keeps cannot be captured (the slot sends neither the value nor the old row): a bad
/// record saying to set `REPLICA IDENTITY FULL`, the other changes captured.
#[test]
fn a_moved_key_with_an_unsent_toasted_value_is_a_bad_record() {
    let name = "cdc_moved_toast";
    setup(name, 10, false);
    let dir = tempfile::tempdir().unwrap();
    let env = env(dir.path());
    let (sink, out) = CollectSink::new();
    capture(&env, name).sink(sink);
    let handle = env.execute_async().unwrap();
    wait_equal(name, &out);
    client()
        .batch_execute(&format!(
            "UPDATE {name} SET id = 1002 WHERE id = 2; UPDATE {name} SET qty = 7 WHERE id = 1;"
        ))
        .unwrap();
    // Row 1's update arrives; row 2's move does not (a bad record).
    let deadline = Instant::now() + Duration::from_secs(60);
    while applied(&out).get("1").map(|r| r.1.as_str()) != Some("7") {
        assert!(Instant::now() < deadline, "row 1's update never arrived");
        std::thread::sleep(Duration::from_millis(20));
    }
    handle.stop();
    let result = handle.wait().unwrap();
    assert_eq!(result.bad_records(), 1);
    assert!(applied(&out).contains_key("2") && !applied(&out).contains_key("1002"));
    teardown(name);
}

#[test]
fn a_table_without_a_primary_key_is_refused_naming_it() {
    let mut db = client();
    db.batch_execute(
        "DROP TABLE IF EXISTS cdc_no_key; CREATE TABLE cdc_no_key (id bigint, name text);",
    )
    .unwrap();
    let err = PostgresCdcSource::new(url(), ["cdc_no_key"])
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`public.cdc_no_key` has no primary key") && err.contains("`tables`"),
        "{err}"
    );
    let err = PostgresCdcSource::new(url(), ["cdc_missing"])
        .validate()
        .unwrap_err()
        .to_string();
    assert!(err.contains("no table `public.cdc_missing`"), "{err}");
}

#[test]
fn a_user_without_replication_is_refused_naming_what_it_needs() {
    let mut db = client();
    db.batch_execute(
        "DROP ROLE IF EXISTS riffle_no_replication;
         CREATE ROLE riffle_no_replication LOGIN NOREPLICATION;",
    )
    .unwrap();
    // The same server and database, as that user.
    let mut config: postgres::Config = url().parse().unwrap();
    config.user("riffle_no_replication");
    let host = match &config.get_hosts()[0] {
        postgres::config::Host::Tcp(host) => host.clone(),
        other => panic!("a TCP host: {other:?}"),
    };
    let other = format!(
        "postgresql://riffle_no_replication@{host}:{}/{}",
        config.get_ports()[0],
        config.get_dbname().unwrap()
    );
    let err = PostgresCdcSource::new(other, ["cdc_anything"])
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("riffle_no_replication")
            && err.contains("REPLICATION")
            && err.contains("`url`"),
        "{err}"
    );
    db.batch_execute("DROP ROLE riffle_no_replication;")
        .unwrap();
}
