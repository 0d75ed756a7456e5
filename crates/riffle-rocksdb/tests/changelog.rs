//! The changelog operators on RocksDB state: the regular join (every join type, with and without
//! a state time-to-live) and both deduplications survive a checkpoint at any step of a scripted
//! run with their state in RocksDB, with and without the state cache, emitting exactly what an
//! uninterrupted run emits; a full outer join job recovers from a failure and continues from a
//! savepoint at another parallelism with its exactly-once changelog ending as the batch join;
//! a heap savepoint restores on RocksDB, and a RocksDB one is refused by the heap backend.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use riffle::change::RetractTable;
use riffle::checkpoint::{CheckpointConfig, RestartStrategy, RestoreFrom};
use riffle::operators::{JoinType, KeepFirst, KeepLast, KeyedProcess, RegularJoinFunction};
use riffle::sink::ExactlyOnceFileSink;
use riffle::source::datagen::{DatagenSource, Generator};
use riffle::state::{HeapBackend, StateBackend};
use riffle::{Change, Either, EnvConfig, JobResult, Result, StreamEnv};
use riffle_rocksdb::RocksDbBackend;
use riffle_testing::{Step, assert_snapshot_round_trip_on};

type Row = (u8, u16);

fn backends() -> [RocksDbBackend; 2] {
    [64 << 20, 0].map(|cache| {
        RocksDbBackend::new()
            .memory(8 << 20)
            .write_buffer(1 << 20)
            .state_cache(cache)
    })
}

fn join_script() -> Vec<Step<Either<Row, Row>>> {
    use Either::{Left, Right};
    use Step::{Advance, Record};
    vec![
        Record(Left((1, 1)), 1),
        Record(Right((2, 1)), 2),
        Record(Left((3, 1)), 3),
        Advance(Duration::from_secs(4)),
        Record(Right((1, 2)), 4),
        Record(Left((2, 2)), 5),
        Record(Left((1, 3)), 6),
        Advance(Duration::from_secs(7)),
        Record(Right((3, 3)), 7),
        Record(Left((2, 4)), 8),
        Advance(Duration::from_secs(2)),
        Record(Right((1, 5)), 9),
        Record(Right((4, 6)), 10),
    ]
}

#[test]
fn the_regular_join_round_trips_on_rocksdb() -> Result<()> {
    let key = Arc::new(|e: &Either<Row, Row>| match e {
        Either::Left(l) => l.0,
        Either::Right(r) => r.0,
    });
    for backend in backends() {
        for join in [
            JoinType::Inner,
            JoinType::Left,
            JoinType::Right,
            JoinType::Full,
        ] {
            for ttl in [None, Some(Duration::from_secs(10))] {
                assert_snapshot_round_trip_on(
                    &backend,
                    || {
                        KeyedProcess::new(
                            key.clone(),
                            RegularJoinFunction::new(
                                join,
                                ttl,
                                |l: Option<&Row>, r: Option<&Row>| (l.copied(), r.copied()),
                            ),
                        )
                    },
                    &join_script(),
                )?;
            }
        }
    }
    Ok(())
}

#[test]
fn deduplication_round_trips_on_rocksdb() -> Result<()> {
    use Step::{Advance, Record};
    let script: Vec<Step<Row>> = vec![
        Record((1, 1), 1),
        Record((2, 1), 2),
        Record((1, 2), 3),
        Advance(Duration::from_secs(6)),
        Record((3, 1), 4),
        Record((2, 2), 5),
        Advance(Duration::from_secs(5)),
        Record((1, 3), 6),
        Record((3, 2), 7),
        Record((2, 3), 8),
    ];
    let key = Arc::new(|e: &Row| e.0);
    let ttl = Duration::from_secs(10);
    for backend in backends() {
        assert_snapshot_round_trip_on(
            &backend,
            || KeyedProcess::new(key.clone(), KeepFirst::new(ttl)),
            &script,
        )?;
        assert_snapshot_round_trip_on(
            &backend,
            || KeyedProcess::new(key.clone(), KeepLast::new(ttl)),
            &script,
        )?;
    }
    Ok(())
}

/// A row of the end-to-end job: key and sequence number.
type Item = (u16, u32);
type Joined = (Option<Item>, Option<Item>);

/// Rows of the end-to-end job: orders on keys 0..1000, shipments on keys 0..1400 (the keys from
/// 1000 have shipments only), a few of each per key.
struct Rows {
    keys: u64,
    stream: u64,
}

impl Generator for Rows {
    type Item = Item;
    fn generate(&self, i: u64) -> Item {
        ((mix(i ^ (self.stream << 32)) % self.keys) as u16, i as u32)
    }
    fn name(&self) -> String {
        format!("rows-{}", self.stream)
    }
}

/// A 64-bit mix of `x` (SplitMix64's finalizer): spreads indexes over keys.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Records per input of the end-to-end job.
const COUNT: u64 = 4_000;

const ORDERS: Rows = Rows {
    keys: 1000,
    stream: 1,
};
const SHIPMENTS: Rows = Rows {
    keys: 1400,
    stream: 2,
};

/// The full outer join of everything both inputs generate, computed as a batch.
fn batch_full_join() -> Vec<Joined> {
    let orders: Vec<Item> = (0..COUNT).map(|i| ORDERS.generate(i)).collect();
    let shipments: Vec<Item> = (0..COUNT).map(|i| SHIPMENTS.generate(i)).collect();
    let mut out = Vec::new();
    for o in &orders {
        let matches: Vec<&Item> = shipments.iter().filter(|s| s.0 == o.0).collect();
        out.extend(matches.iter().map(|s| (Some(*o), Some(**s))));
        if matches.is_empty() {
            out.push((Some(*o), None));
        }
    }
    for s in &shipments {
        if !orders.iter().any(|o| o.0 == s.0) {
            out.push((None, Some(*s)));
        }
    }
    out.sort();
    out
}

/// The full outer join job over paced sources, checkpointing every 100 ms into `work`, its
/// changelog into an exactly-once file sink; `crash` runs on every order.
fn job(
    work: &Path,
    parallelism: usize,
    crash: impl Fn(Item) -> Item + Send + Sync + 'static,
) -> StreamEnv {
    let env = StreamEnv::with_config(EnvConfig {
        job_name: "changelog".into(),
        parallelism,
        buffer_size: 64,
        checkpoints: CheckpointConfig {
            interval: Some(Duration::from_millis(100)),
            storage: work.join("chk").to_string_lossy().into_owned(),
            restart: RestartStrategy::FixedDelay {
                attempts: 3,
                delay: Duration::from_millis(50),
            },
            ..CheckpointConfig::default()
        },
        state_backend: Arc::new(backends()[1].clone()),
        local_state_dir: work.join("local"),
        ..EnvConfig::default()
    });
    let source = |rows: Rows| {
        DatagenSource::new(rows)
            .count(COUNT)
            .rate(5_000.0)
            .splits(2)
    };
    let orders = env
        .from_source(source(ORDERS))
        .uid("orders")
        .map(crash)
        .uid("crash");
    let shipments = env.from_source(source(SHIPMENTS)).uid("shipments");
    orders
        .key_by(|o| o.0)
        .join_regular(&shipments.key_by(|s| s.0))
        .full()
        .apply(|o, s| (o.copied(), s.copied()))
        .uid("join")
        .sink(ExactlyOnceFileSink::new(work.join("out")))
        .uid("sink");
    env
}

/// The committed changelog under `dir`, applied as a multiset.
fn committed(dir: &Path) -> Vec<Joined> {
    let mut table = RetractTable::new();
    let files: Vec<_> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    let mut changes = Vec::new();
    for file in files {
        for line in std::fs::read_to_string(&file).unwrap().lines() {
            let change: Change<Joined> = serde_json::from_str(line).unwrap();
            changes.push(change);
        }
    }
    // A multiset ends the same whatever the order the changes are applied in, as long as every
    // retraction has its insert: apply the inserts first (files are read in no order).
    changes.sort_by_key(|c| c.op.is_retract());
    table.apply_all(changes).unwrap();
    table.rows()
}

/// Runs the job; panics if it does not end within 120 s.
fn run(env: &StreamEnv) -> JobResult {
    let handle = env.execute_async().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(handle.wait());
    });
    rx.recv_timeout(Duration::from_secs(120))
        .expect("the job did not end within 120 s")
        .unwrap()
}

#[test]
fn a_join_recovers_from_a_failure_with_exactly_the_batch_join() {
    let work = tempfile::tempdir().unwrap();
    let result = run(&job(
        work.path(),
        2,
        riffle_testing::fail_once_after(COUNT * 3 / 5),
    ));
    assert_eq!(result.restarts, 1, "one failure, one restart");
    assert!(
        result.restores[0] > 0,
        "restored from a checkpoint: {:?}",
        result.restores
    );
    assert_eq!(committed(&work.path().join("out")), batch_full_join());
}

/// Runs the job on `backend` into `dir` and stops it with a savepoint part-way, once the join
/// holds state and a checkpoint completed after that; returns the savepoint.
fn savepoint_part_way(dir: &Path, backend: Arc<dyn StateBackend>) -> String {
    let env = job(dir, 2, |o| o);
    env.configure(|c: &mut EnvConfig| c.state_backend = backend);
    let handle = env.execute_async().unwrap();
    let started = std::time::Instant::now();
    let completed = || {
        handle
            .checkpoints()
            .iter()
            .filter(|c| c.completed())
            .count()
    };
    let joined = || {
        handle
            .metrics()
            .operator_total("RegularJoin")
            .map_or(0, |o| o.records_in)
    };
    while joined() < 1_500 && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let before = completed();
    while completed() <= before && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let savepoint = handle
        .stop_with_savepoint(dir.join("savepoint").to_str().unwrap())
        .unwrap();
    let read = handle.wait().unwrap().records_out("Source: rows-1");
    assert!(
        read > 0 && read < COUNT,
        "stopped part-way: {read} of {COUNT}"
    );
    savepoint
}

/// The job restored from `savepoint` into `dir` (the output before it copied from `first`).
fn restored(
    dir: &Path,
    first: &Path,
    parallelism: usize,
    savepoint: &str,
    backend: Arc<dyn StateBackend>,
) -> StreamEnv {
    copy_dir(&first.join("out"), &dir.join("out"));
    let env = job(dir, parallelism, |o| o);
    let savepoint = savepoint.to_string();
    env.configure(move |c: &mut EnvConfig| {
        c.checkpoints.restore = Some(RestoreFrom::Savepoint(savepoint.clone()));
        c.state_backend = backend.clone();
    });
    env
}

#[test]
fn a_join_stopped_with_a_savepoint_continues_at_another_parallelism() {
    let work = tempfile::tempdir().unwrap();
    let first = work.path().join("first");
    let savepoint = savepoint_part_way(&first, Arc::new(backends()[1].clone()));
    for parallelism in [1, 3] {
        let dir = work.path().join(format!("p{parallelism}"));
        let env = restored(
            &dir,
            &first,
            parallelism,
            &savepoint,
            Arc::new(backends()[1].clone()),
        );
        let result = run(&env);
        assert!(result.restored_from.is_some());
        assert_eq!(
            committed(&dir.join("out")),
            batch_full_join(),
            "restored at parallelism {parallelism}"
        );
    }
}

#[test]
fn a_savepoint_moves_from_the_heap_to_rocksdb_and_not_back() {
    // The heap's keyed state is in the savepoint's own files: RocksDB reads it.
    let work = tempfile::tempdir().unwrap();
    let heap = work.path().join("heap");
    let savepoint = savepoint_part_way(&heap, Arc::new(HeapBackend));
    let dir = work.path().join("on-rocksdb");
    let result = run(&restored(
        &dir,
        &heap,
        2,
        &savepoint,
        Arc::new(backends()[0].clone()),
    ));
    assert!(result.restored_from.is_some());
    assert_eq!(committed(&dir.join("out")), batch_full_join());
    // RocksDB's keyed state is in its stores' files, which the heap cannot read: the restore
    // fails at the start, naming the setting, rather than start the join empty.
    let rocks = work.path().join("rocksdb");
    let savepoint = savepoint_part_way(&rocks, Arc::new(backends()[0].clone()));
    let env = restored(
        &work.path().join("on-heap"),
        &rocks,
        2,
        &savepoint,
        Arc::new(HeapBackend),
    );
    let error = env
        .execute()
        .expect_err("a RocksDB savepoint does not restore on the heap")
        .to_string();
    assert!(
        error.contains("state_backend") && error.contains("--state-backend rocksdb"),
        "{error}"
    );
    let files = |dir: &Path| {
        let mut names: Vec<_> = std::fs::read_dir(dir.join("out"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .map(|p| p.file_name().unwrap().to_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        files(&work.path().join("on-heap")),
        files(&rocks),
        "the refused run wrote nothing"
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        if entry.path().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}
