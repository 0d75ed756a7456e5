//! A replica of a PostgreSQL table kept by change data capture, exactly-once: the table's
//! snapshot and changes (`PostgresCdcSource`) upserted and deleted by primary key into another
//! table (`PostgresSink`, one transaction per checkpoint). Runs until stopped; started again
//! with the same checkpoint directory it resumes from its latest checkpoint (after a kill -9
//! too) and the copy ends equal to the table.
//!
//! ```sh
//! eval "$(./scripts/postgres.sh env)"
//! psql "$RIFFLE_POSTGRES_URL" -c "CREATE TABLE items (id bigint PRIMARY KEY, qty int);
//!                                CREATE TABLE items_copy (LIKE items INCLUDING ALL)"
//! cargo run -p riffle-postgres --example replica -- "$RIFFLE_POSTGRES_URL" items items_copy /tmp/replica-chk
//! ```

use std::time::Duration;

use riffle::checkpoint::{CheckpointConfig, RestoreFrom};
use riffle::{Change, EnvConfig, RowKind, StreamEnv};
use riffle_postgres::{CdcRow, PostgresCdcSource, PostgresSink, RowChange};
use serde_json::{Map, Value};

fn main() -> riffle::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, table, copy, checkpoints] = args.as_slice() else {
        eprintln!("usage: replica URL TABLE COPY CHECKPOINT_DIR");
        std::process::exit(2);
    };
    let env = StreamEnv::with_config(
        EnvConfig::default().with_parallelism(2).with_checkpoints(
            CheckpointConfig::default()
                .with_interval(Some(Duration::from_millis(500)))
                .with_storage(checkpoints.clone())
                .with_restore(Some(RestoreFrom::Latest)),
        ),
    );
    let key: Vec<String> = vec!["id".into()];
    PostgresCdcSource::new(url.clone(), [table.clone()])
        .slot(format!("replica_{table}"))
        .publication(format!("replica_{table}"))
        .changelog(&env)
        .sink(
            PostgresSink::with_encoder(
                url.clone(),
                copy.clone(),
                key,
                |change: &Change<CdcRow>| {
                    let row: Map<String, Value> = change
                        .row
                        .columns
                        .iter()
                        .zip(&change.row.values)
                        .map(|(c, v)| (c.clone(), v.clone().map_or(Value::Null, Value::String)))
                        .collect();
                    Ok(Some(match change.op {
                        RowKind::Insert | RowKind::UpdateAfter => RowChange::Put(row),
                        RowKind::Delete | RowKind::UpdateBefore => RowChange::Delete(row),
                    }))
                },
            )
            .exactly_once(),
        );
    env.execute().map(|_| ())
}
