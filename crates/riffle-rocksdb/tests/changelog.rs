//! The changelog operators on RocksDB state: the regular join (every join type, with and without
//! a state time-to-live) and both deduplications survive a checkpoint at any step of a scripted
//! run with their state in RocksDB, with and without the state cache, emitting exactly what an
//! uninterrupted run emits.

use std::sync::Arc;
use std::time::Duration;

use riffle::operators::{JoinType, KeepFirst, KeepLast, KeyedProcess, RegularJoinFunction};
use riffle::testing::{Step, assert_snapshot_round_trip_on};
use riffle::{Either, Result};
use riffle_rocksdb::RocksDbBackend;

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
