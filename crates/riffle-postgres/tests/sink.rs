//! The PostgreSQL sink against a real server (`scripts/postgres.sh start`, whose URL is in
//! `RIFFLE_POSTGRES_URL`; the README's test command starts it): appends, upserts and
//! changelogs, at-least-once and exactly-once, through failures of the job and replayed commits.

use std::time::Duration;

use postgres::{Client, NoTls};
use riffle::checkpoint::{CheckpointConfig, RestartStrategy};
use riffle::sink::Sink;
use riffle::source::datagen::DatagenSource;
use riffle::source::function::FnGenerator;
use riffle::testing::{fail_once_after, operator_context};
use riffle::{Change, EnvConfig, Record, StreamEnv};
use riffle_postgres::PostgresSink;
use serde::{Deserialize, Serialize};

fn url() -> String {
    std::env::var("RIFFLE_POSTGRES_URL").expect(
        "RIFFLE_POSTGRES_URL is not set: start a server with `./scripts/postgres.sh start && eval \"$(./scripts/postgres.sh env)\"` (the README's test command does)",
    )
}

fn client() -> Client {
    Client::connect(&url(), NoTls).expect("connect to the test server")
}

/// A fresh table `name` (dropped first) made by `ddl` (`{}` is its name).
fn table(name: &str, ddl: &str) -> String {
    let mut client = client();
    client
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {name}; {}",
            ddl.replace("{}", name)
        ))
        .unwrap();
    name.to_string()
}

fn query_pairs(sql: &str) -> Vec<(i64, i64)> {
    client()
        .query(sql, &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
struct Reading {
    id: i64,
    value: i64,
    /// Mixed case: matched to the column `sensorname`.
    #[serde(rename = "sensorName")]
    sensor_name: String,
    at: String,
    /// A nested object: into a `jsonb` column.
    tags: Tags,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
struct Tags {
    n: u64,
    even: bool,
}

fn reading(n: u64) -> Reading {
    Reading {
        id: (n % 97) as i64,
        value: n as i64,
        sensor_name: format!("s-{}", n % 7),
        at: format!(
            "2026-01-15 00:{:02}:{:02}.{:03}",
            (n / 60) % 60,
            n % 60,
            n % 1000
        ),
        tags: Tags {
            n,
            even: n.is_multiple_of(2),
        },
    }
}

const READINGS_DDL: &str =
    "CREATE TABLE {} (id bigint, value bigint, sensorname text, at timestamp(3), tags jsonb)";

fn env(parallelism: usize, checkpoints: Option<&std::path::Path>) -> StreamEnv {
    let mut config = CheckpointConfig {
        restart: RestartStrategy::FixedDelay {
            attempts: 3,
            delay: Duration::from_millis(50),
        },
        ..CheckpointConfig::default()
    };
    if let Some(dir) = checkpoints {
        config.interval = Some(Duration::from_millis(100));
        config.storage = dir.to_str().unwrap().to_string();
    }
    StreamEnv::with_config(EnvConfig {
        parallelism,
        checkpoints: config,
        ..EnvConfig::default()
    })
}

#[test]
fn appends_every_record_with_its_types() {
    let name = table("sink_appends", READINGS_DDL);
    let env = env(2, None);
    env.from_iter((0..10_000u64).map(reading))
        .sink(PostgresSink::append(url(), &name).batch_rows(777));
    env.execute().unwrap();
    let mut client = client();
    let row = client
        .query_one(
            &format!(
                "SELECT count(*), sum(value)::bigint, count(DISTINCT sensorname), max(at)::text, sum((tags->>'n')::bigint)::bigint FROM {name}"
            ),
            &[],
        )
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 10_000);
    assert_eq!(row.get::<_, i64>(1), (0..10_000i64).sum::<i64>());
    assert_eq!(row.get::<_, i64>(2), 7);
    let latest = (0..10_000).map(|n| reading(n).at).max().unwrap();
    assert_eq!(row.get::<_, String>(3), latest);
    assert_eq!(row.get::<_, i64>(4), (0..10_000i64).sum::<i64>());
}

#[test]
fn upserts_keep_the_last_row_of_each_key() {
    let name = table(
        "sink_upserts",
        "CREATE TABLE {} (id bigint PRIMARY KEY, value bigint, sensorname text, at timestamp(3), tags jsonb)",
    );
    let env = env(1, None);
    env.from_iter((0..5_000u64).map(reading))
        .sink(PostgresSink::upsert(url(), &name, ["id"]).batch_rows(100));
    env.execute().unwrap();
    // One subtask writes in order: each id's last value.
    let expected: Vec<(i64, i64)> = (0..97i64)
        .map(|id| (id, (0..5_000i64).filter(|n| n % 97 == id).max().unwrap()))
        .collect();
    assert_eq!(
        query_pairs(&format!("SELECT id, value FROM {name} ORDER BY id")),
        expected
    );
}

/// The job: `count` paced readings, a failure after `fail_after` of them, the last reading of
/// each id (a changelog with updates) into `changelog_table` and every reading appended to
/// `append_table`, both exactly-once.
fn failing_job(
    checkpoints: &std::path::Path,
    count: u64,
    fail_after: u64,
    changelog_table: &str,
    append_table: &str,
) -> StreamEnv {
    let env = env(2, Some(checkpoints));
    let readings = env
        .from_source(
            DatagenSource::new(FnGenerator::new(reading))
                .count(count)
                .rate(count as f64 / 1.5),
        )
        .uid("readings")
        .map(fail_once_after(fail_after))
        .uid("crash");
    readings
        .key_by(|r: &Reading| r.id)
        .deduplicate_keep_last(Duration::from_secs(3600))
        .uid("last")
        .sink(PostgresSink::changelog(url(), changelog_table, ["id"]).exactly_once())
        .uid("latest-sink");
    readings
        .sink(PostgresSink::append(url(), append_table).exactly_once())
        .uid("append-sink");
    env
}

#[test]
fn exactly_once_through_a_failure_of_the_job() {
    let latest = table(
        "sink_eo_latest",
        "CREATE TABLE {} (id bigint PRIMARY KEY, value bigint, sensorname text, at timestamp(3), tags jsonb)",
    );
    let all = table("sink_eo_all", READINGS_DDL);
    let dir = tempfile::tempdir().unwrap();
    let count = 12_000u64;
    let env = failing_job(dir.path(), count, 7_000, &latest, &all);
    let result = env.execute().unwrap();
    assert_eq!(result.restarts, 1);
    // Every reading once.
    assert_eq!(
        query_pairs(&format!(
            "SELECT count(*), count(DISTINCT value) FROM {all}"
        )),
        vec![(count as i64, count as i64)]
    );
    // The last reading of each id: the largest value (a split's readings arrive in order, but
    // the splits interleave: the last one of an id is the one the job saw last; here each id's
    // values compared by what the deduplication kept, read back from the appended table).
    let rows = query_pairs(&format!("SELECT id, value FROM {latest} ORDER BY id"));
    assert_eq!(rows.len(), 97);
    for (id, value) in &rows {
        assert_eq!(
            value % 97,
            *id,
            "id {id} holds a reading of another id: {value}"
        );
    }
    // Checkpoints committed rows as the job ran, not only at its end.
    let commits = query_pairs(&format!(
        "SELECT count(*), count(*) FILTER (WHERE checkpoint_id < 9223372036854775807) FROM riffle_sink_commits WHERE table_name = '{all}'"
    ));
    assert!(
        commits[0].1 > 0,
        "no checkpoint committed rows: {commits:?}"
    );
}

#[test]
fn a_commit_replayed_after_a_restore_is_not_written_twice() {
    let name = table("sink_replay", READINGS_DDL);
    let sink = PostgresSink::<Reading>::append(url(), &name).exactly_once();
    sink.validate().unwrap();
    let ctx = operator_context("sink", "run-1", 0, 1);
    let mut writer = sink.writer(&ctx).unwrap();
    writer.recover(Vec::new()).unwrap();
    let mut batch: Vec<Record<Reading>> = (0..10).map(|n| Record::untimed(reading(n))).collect();
    writer.write(&mut batch).unwrap();
    let first = writer.pre_commit(1).unwrap().expect("rows to commit");
    // Checkpoint 1 completes, but its notification is lost: checkpoint 2 carries both.
    let mut batch: Vec<Record<Reading>> = (10..15).map(|n| Record::untimed(reading(n))).collect();
    writer.write(&mut batch).unwrap();
    let second = writer.pre_commit(2).unwrap().expect("rows to commit");
    writer.commit(1).unwrap();
    let count = || {
        query_pairs(&format!(
            "SELECT count(*), count(DISTINCT value) FROM {name}"
        ))
    };
    assert_eq!(count(), vec![(10, 10)]);
    // The process dies before committing 2; the job restores checkpoint 2 (twice: the first
    // restore dies too, after its recovery committed), and an older savepoint's run replays 1.
    for committables in [vec![second.clone()], vec![second], vec![first]] {
        let mut writer = sink
            .writer(&operator_context("sink", "run-2", 0, 1))
            .unwrap();
        writer.recover(committables).unwrap();
        assert_eq!(count(), vec![(15, 15)]);
    }
}

#[test]
fn deletions_of_a_changelog_delete() {
    let name = table(
        "sink_deletes",
        "CREATE TABLE {} (id bigint, value bigint, sensorname text, at timestamp(3), tags jsonb, PRIMARY KEY (id))",
    );
    let env = env(1, None);
    let changes = vec![
        Change::insert(reading(1)),
        Change::insert(reading(2)),
        Change::insert(reading(3)),
        Change::update_before(reading(2)),
        Change::update_after(Reading {
            value: 200,
            ..reading(2)
        }),
        Change::delete(reading(1)),
    ];
    env.from_iter(changes)
        .sink(PostgresSink::changelog(url(), &name, ["id"]));
    env.execute().unwrap();
    assert_eq!(
        query_pairs(&format!("SELECT id, value FROM {name} ORDER BY id")),
        vec![(2, 200), (3, 3)]
    );
}

#[test]
fn bad_configuration_fails_at_start_naming_the_setting() {
    let name = table("sink_no_key", READINGS_DDL);
    let err = PostgresSink::<Reading>::upsert(url(), &name, ["id"])
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`key`") && err.contains("no primary key or unique index"),
        "{err}"
    );
    let err = PostgresSink::<Reading>::append(url(), "no_such_table")
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`table`") && err.contains("no table `no_such_table`"),
        "{err}"
    );
    let err = PostgresSink::<Reading>::append("postgresql://riffle@127.0.0.1:1/riffle", &name)
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`url`") && err.contains("cannot connect"),
        "{err}"
    );
    let err = PostgresSink::<Reading>::append("http://x", &name)
        .validate()
        .unwrap_err()
        .to_string();
    assert!(err.contains("`url`"), "{err}");
}

#[test]
fn a_value_that_does_not_fit_its_column_fails_the_job_with_the_databases_message() {
    let name = table(
        "sink_bad_value",
        "CREATE TABLE {} (id bigint, value bigint, sensorname text, at timestamp(3), tags jsonb)",
    );
    let env = env(1, None);
    env.configure(|c: &mut EnvConfig| c.checkpoints.restart = RestartStrategy::None);
    let mut bad = reading(1);
    bad.at = "yesterday-ish".into();
    env.from_iter(vec![reading(0), bad])
        .sink(PostgresSink::append(url(), &name));
    let err = env.execute().unwrap_err().to_string();
    assert!(
        err.contains("yesterday-ish") && err.contains("22007"),
        "{err}"
    );
}
