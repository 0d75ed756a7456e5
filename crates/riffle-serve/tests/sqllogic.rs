//! The `sqllogictest` files under `tests/sql/`, run through the Postgres wire protocol against a
//! `riffle serve` started here. Their expected results are worked out by hand from the input
//! the files describe, not copied from Riffle's output.
//!
//! Besides SQL, a file may say `WAIT FOR VIEW v` (a statement of this harness, not of the
//! server): it waits until view `v`'s bounded input has ended and the view holds all of it.

use std::path::Path;
use std::time::{Duration, Instant};

use riffle_serve::{ServeConfig, Server};
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType, Runner};
use tokio_postgres::{NoTls, SimpleQueryMessage};

/// An error as the files match it: `SQLSTATE message`.
#[derive(Debug)]
struct DbError(String);

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DbError {}

impl From<tokio_postgres::Error> for DbError {
    fn from(e: tokio_postgres::Error) -> DbError {
        match e.as_db_error() {
            Some(db) => DbError(format!("{} {}", db.code().code(), db.message())),
            None => DbError(e.to_string()),
        }
    }
}

struct Riffle {
    client: tokio_postgres::Client,
}

impl Riffle {
    async fn wait_for_view(&mut self, name: &str) -> Result<(), DbError> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let shown = self.client.simple_query("SHOW MATERIALIZED VIEWS").await?;
            let status = shown.iter().find_map(|m| match m {
                SimpleQueryMessage::Row(r) if r.get(0) == Some(name) => {
                    r.get(3).map(str::to_string)
                }
                _ => None,
            });
            match status.as_deref() {
                Some("finished") => return Ok(()),
                Some("failed") | None => {
                    return Err(DbError(format!("view {name} is {status:?}")));
                }
                _ if Instant::now() > deadline => {
                    return Err(DbError(format!("view {name} still {status:?} after 60 s")));
                }
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }
}

#[async_trait::async_trait]
impl AsyncDB for Riffle {
    type Error = DbError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, DbError> {
        if let Some(name) = sql.trim().strip_prefix("WAIT FOR VIEW ") {
            self.wait_for_view(name.trim()).await?;
            return Ok(DBOutput::StatementComplete(0));
        }
        let mut columns = None;
        let mut rows = Vec::new();
        for message in self.client.simple_query(sql).await? {
            match message {
                SimpleQueryMessage::RowDescription(description) => {
                    columns = Some(description.len());
                }
                SimpleQueryMessage::Row(row) => {
                    rows.push(
                        (0..row.len())
                            .map(|i| row.get(i).unwrap_or("NULL").to_string())
                            .collect::<Vec<_>>(),
                    );
                }
                _ => {}
            }
        }
        Ok(match columns {
            Some(n) => DBOutput::Rows {
                types: vec![DefaultColumnType::Any; n],
                rows,
            },
            None => DBOutput::StatementComplete(0),
        })
    }

    async fn shutdown(&mut self) {}

    async fn sleep(duration: Duration) {
        tokio::time::sleep(duration).await;
    }
}

fn write_orders(dir: &Path) -> String {
    let path = dir.join("orders.csv");
    std::fs::write(
        &path,
        "1,alice,10,2026-01-01 00:00:05.000\n\
         2,bob,20,2026-01-01 00:00:10.000\n\
         3,alice,5,2026-01-01 00:00:50.000\n\
         4,carol,7,2026-01-01 00:01:02.000\n\
         5,bob,1,2026-01-01 00:01:30.000\n\
         6,alice,100,2026-01-01 00:02:00.000\n\
         7,dave,3,2026-01-01 00:02:01.000\n",
    )
    .unwrap();
    path.display().to_string()
}

#[test]
fn the_sql_files_pass_through_the_wire() {
    let files: Vec<_> = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sql"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    assert!(!files.is_empty());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for file in files {
        // A server of its own for each file.
        let dir = tempfile::tempdir().unwrap();
        let orders = write_orders(dir.path());
        let mut config = ServeConfig::new(dir.path().join("data"));
        config.listen = "127.0.0.1:0".parse().unwrap();
        config.env.parallelism = 1;
        let server = Server::start(config).unwrap();
        let port = server.local_addr().port();
        rt.block_on(async {
            let mut runner = Runner::new(move || async move {
                let (client, connection) = tokio_postgres::connect(
                    &format!("host=127.0.0.1 port={port} user=riffle"),
                    NoTls,
                )
                .await?;
                tokio::spawn(connection);
                Ok(Riffle { client })
            });
            runner.set_var("ORDERS".into(), orders.clone());
            if let Err(e) = runner.run_file_async(&file).await {
                panic!("{}: {e}", file.display());
            }
        });
        server.stop();
    }
}
