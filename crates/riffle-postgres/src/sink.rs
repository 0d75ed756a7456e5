//! The PostgreSQL sink: batches of rows written with `json_populate_recordset`, at-least-once,
//! or exactly-once as one transaction per completed checkpoint that records the checkpoint.

use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use postgres::{Client, NoTls, Transaction};
use riffle::error::{ConnectorErrorKind, Error, Result};
use riffle::operators::OperatorContext;
use riffle::sink::{Ending, Finalizer, Guarantee, Sink, SinkWriter};
use riffle::{Change, Data, Record, RowKind};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The table where exactly-once sinks record their commits (created when absent).
pub const COMMITS_TABLE: &str = "riffle_sink_commits";

/// Rows per statement (one JSON parameter each).
const CHUNK_ROWS: usize = 5_000;

/// What one record does to the table: its row put (inserted, or upserted by the key), or the
/// row of its key deleted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum RowChange {
    /// Insert the row (append), or insert or replace the row of its key (upsert).
    Put(Map<String, Value>),
    /// Delete the row with this row's key (only the key's columns are read).
    Delete(Map<String, Value>),
}

impl RowChange {
    fn row(&self) -> &Map<String, Value> {
        match self {
            RowChange::Put(row) | RowChange::Delete(row) => row,
        }
    }
}

type Encode<R> = Arc<dyn Fn(&R) -> std::result::Result<Option<RowChange>, String> + Send + Sync>;

/// Writes a stream into a PostgreSQL table (see the [crate] documentation).
///
/// ```no_run
/// use riffle::StreamEnv;
/// use riffle_postgres::PostgresSink;
/// #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
/// struct Click { user_id: u64, url: String }
/// let env = StreamEnv::new();
/// env.from_iter(vec![Click { user_id: 1, url: "/".into() }])
///     .sink(PostgresSink::append("postgresql://riffle@127.0.0.1:5432/riffle", "clicks").exactly_once());
/// env.execute().unwrap();
/// ```
pub struct PostgresSink<R> {
    url: String,
    table: String,
    key: Vec<String>,
    encode: Encode<R>,
    guarantee: Guarantee,
    batch_rows: usize,
    flush_interval: Duration,
    max_retries: u32,
    settings: Settings,
    _records: PhantomData<fn(R)>,
}

/// The names of the settings that errors name (the SQL connector's differ from the builder's).
#[derive(Clone, Debug)]
struct Settings {
    url: String,
    table: String,
    key: String,
}

fn to_object<T: Serialize>(value: &T) -> std::result::Result<Map<String, Value>, String> {
    match serde_json::to_value(value) {
        Ok(Value::Object(row)) => Ok(row),
        Ok(other) => Err(format!(
            "a record written to PostgreSQL must serialize to a JSON object (a struct or a map), not `{other}`"
        )),
        Err(e) => Err(format!("cannot serialize a record: {e}")),
    }
}

impl<T: Serialize> PostgresSink<T> {
    /// Appends every record as a new row of `table`.
    pub fn append(url: impl Into<String>, table: impl Into<String>) -> Self {
        Self::with_encoder(url, table, Vec::<String>::new(), |record: &T| {
            to_object(record).map(|row| Some(RowChange::Put(row)))
        })
    }

    /// Writes every record as the row of its `key` (columns with a unique index or the primary
    /// key of `table`): inserted, or replacing the key's row.
    pub fn upsert(
        url: impl Into<String>,
        table: impl Into<String>,
        key: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self::with_encoder(url, table, key, |record: &T| {
            to_object(record).map(|row| Some(RowChange::Put(row)))
        })
    }
}

impl<T: Serialize> PostgresSink<Change<T>> {
    /// Applies a changelog by `key` (columns with a unique index or the primary key of
    /// `table`): `+I` and `+U` put the row, `-D` and `-U` delete the key's row. The `+U` that
    /// follows a `-U` puts it back in the same batch (changes of a key are compacted, the last
    /// wins); a `-U` without one (a filter after an aggregation dropped the new row) deletes.
    pub fn changelog(
        url: impl Into<String>,
        table: impl Into<String>,
        key: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self::with_encoder(url, table, key, |change: &Change<T>| match change.op {
            RowKind::Insert | RowKind::UpdateAfter => {
                to_object(&change.row).map(|row| Some(RowChange::Put(row)))
            }
            RowKind::Delete | RowKind::UpdateBefore => {
                to_object(&change.row).map(|row| Some(RowChange::Delete(row)))
            }
        })
    }
}

impl<R> PostgresSink<R> {
    /// A sink whose records become rows by `encode` (`None`: the record changes nothing). With
    /// an empty `key` rows are appended and a [`RowChange::Delete`] is an error.
    pub fn with_encoder(
        url: impl Into<String>,
        table: impl Into<String>,
        key: impl IntoIterator<Item = impl Into<String>>,
        encode: impl Fn(&R) -> std::result::Result<Option<RowChange>, String> + Send + Sync + 'static,
    ) -> Self {
        PostgresSink {
            url: url.into(),
            table: table.into(),
            key: key.into_iter().map(Into::into).collect(),
            encode: Arc::new(encode),
            guarantee: Guarantee::AtLeastOnce,
            batch_rows: 5_000,
            flush_interval: Duration::from_secs(1),
            max_retries: 3,
            settings: Settings {
                url: "url".into(),
                table: "table".into(),
                key: "key".into(),
            },
            _records: PhantomData,
        }
    }

    /// Exactly-once: each checkpoint's rows in one transaction when the checkpoint completes.
    pub fn exactly_once(mut self) -> Self {
        self.guarantee = Guarantee::ExactlyOnce;
        self
    }

    /// At-least-once (the default): batches written as they fill, and at every barrier.
    pub fn at_least_once(mut self) -> Self {
        self.guarantee = Guarantee::AtLeastOnce;
        self
    }

    /// At-least-once: the rows buffered before a batch is written (5000 by default).
    pub fn batch_rows(mut self, rows: usize) -> Self {
        self.batch_rows = rows.max(1);
        self
    }

    /// At-least-once: the longest a buffered row waits before its batch is written (1 s by
    /// default).
    pub fn flush_interval(mut self, interval: Duration) -> Self {
        self.flush_interval = interval;
        self
    }

    /// How many times a write that lost its connection is retried before the job fails (3 by
    /// default).
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }

    /// The names of the URL, table and key settings in configuration errors (`url`, `table`,
    /// `key` by default; the SQL connector's are `url`, `table-name`, `PRIMARY KEY`).
    pub fn setting_names(
        mut self,
        url: impl Into<String>,
        table: impl Into<String>,
        key: impl Into<String>,
    ) -> Self {
        self.settings = Settings {
            url: url.into(),
            table: table.into(),
            key: key.into(),
        };
        self
    }

    fn connection(&self) -> Result<Connection> {
        Connection::new(&self.url, &self.settings.url, self.max_retries)
    }
}

impl<R: Data> Sink<R> for PostgresSink<R> {
    fn name(&self) -> String {
        format!("PostgreSQL: {}", self.table)
    }

    fn validate(&self) -> Result<()> {
        let mut conn = self.connection()?;
        let described = conn.describe();
        conn.connect().map_err(|e| {
            Error::config(
                &self.settings.url,
                format!("cannot connect to {described}: {}", error_text(&e)),
            )
        })?;
        Target::open(&mut conn, &self.table, &self.key, &self.settings)?;
        if self.guarantee == Guarantee::ExactlyOnce {
            create_commits_table(&mut conn)?;
        }
        Ok(())
    }

    fn writer(&self, ctx: &OperatorContext) -> Result<Box<dyn SinkWriter<R>>> {
        let mut conn = self.connection()?;
        let target = Arc::new(Target::open(
            &mut conn,
            &self.table,
            &self.key,
            &self.settings,
        )?);
        Ok(Box::new(PostgresWriter {
            conn,
            batch: Batch::new(target.clone()),
            target,
            encode: self.encode.clone(),
            guarantee: self.guarantee,
            batch_rows: self.batch_rows,
            flush_interval: self.flush_interval,
            oldest: None,
            writer: writer_token(&ctx.id, ctx.subtask),
            subtask: ctx.subtask,
            parallelism: ctx.parallelism,
            pending: BTreeMap::new(),
        }))
    }

    fn guarantee(&self) -> Guarantee {
        self.guarantee
    }
}

/// A name no other writer ever had: the operator, the subtask, the time, the process, a count.
fn writer_token(operator: &str, subtask: usize) -> String {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let seed = format!(
        "{operator}/{subtask}/{nanos}/{}/{}",
        std::process::id(),
        COUNT.fetch_add(1, Ordering::Relaxed)
    );
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(seed.as_bytes()))
}

/// A connection that reconnects: a lost connection is retried with back-off.
struct Connection {
    config: postgres::Config,
    max_retries: u32,
    client: Option<Client>,
}

impl Connection {
    fn new(url: &str, setting: &str, max_retries: u32) -> Result<Self> {
        let config = parse_url(url, setting)?;
        Ok(Connection {
            config,
            max_retries,
            client: None,
        })
    }

    /// The server and database, without credentials.
    fn describe(&self) -> String {
        let host = self
            .config
            .get_hosts()
            .first()
            .map(|h| match h {
                postgres::config::Host::Tcp(name) => name.clone(),
                postgres::config::Host::Unix(path) => path.display().to_string(),
            })
            .unwrap_or_else(|| "localhost".into());
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        let db = self
            .config
            .get_dbname()
            .or(self.config.get_user())
            .unwrap_or("postgres");
        format!("PostgreSQL at {host}:{port}, database `{db}`")
    }

    fn connect(&mut self) -> std::result::Result<&mut Client, postgres::Error> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = Some(self.config.connect(NoTls)?);
        }
        Ok(self.client.as_mut().expect("connected above"))
    }

    /// Runs `work` on the client; a lost connection (or a serialization failure, a deadlock)
    /// is retried with a new connection up to `max_retries` times.
    fn run<T>(
        &mut self,
        what: &str,
        mut work: impl FnMut(&mut Client) -> std::result::Result<T, postgres::Error>,
    ) -> Result<T> {
        let mut attempt = 0;
        loop {
            let result = self.connect().and_then(&mut work);
            match result {
                Ok(value) => return Ok(value),
                Err(e) if retriable(&e) && attempt < self.max_retries => {
                    attempt += 1;
                    tracing::warn!(
                        "postgres: {what} failed ({}); retry {attempt} of {}",
                        error_text(&e),
                        self.max_retries
                    );
                    self.client = None;
                    std::thread::sleep(Duration::from_millis(100 << attempt.min(6)));
                }
                Err(e) => {
                    let kind = if retriable(&e) {
                        ConnectorErrorKind::Retriable
                    } else {
                        ConnectorErrorKind::Fatal
                    };
                    return Err(Error::connector(
                        "postgres",
                        kind,
                        format!("{what} ({})", self.describe()),
                        error_text(&e),
                    ));
                }
            }
        }
    }
}

/// The connection settings of `url` (a libpq URL, or Flink's JDBC URL
/// `jdbc:postgresql://host:port/db?user=..`), an error naming `setting` when it is none.
pub(crate) fn parse_url(url: &str, setting: &str) -> Result<postgres::Config> {
    let url = url.strip_prefix("jdbc:").unwrap_or(url);
    postgres::Config::from_str(url).map_err(|e| {
        Error::config(
            setting,
            format!("not a PostgreSQL URL (postgresql://user@host:port/database): {e}"),
        )
    })
}

/// Whether retrying can help: no answer from the server, or its answer says so.
fn retriable(e: &postgres::Error) -> bool {
    match e.code() {
        None => e.as_db_error().is_none(),
        Some(code) => {
            let code = code.code();
            code.starts_with("08") // connection exception
                || code == "40001" // serialization failure
                || code == "40P01" // deadlock
                || code.starts_with("57P") // the server shutting down
                || code == "53300" // too many connections
        }
    }
}

/// The database's message with its detail and hint, or the client's.
pub(crate) fn error_text(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut text = format!("{} (SQLSTATE {})", db.message(), db.code().code());
            if let Some(detail) = db.detail() {
                text.push_str(&format!("; {detail}"));
            }
            if let Some(hint) = db.hint() {
                text.push_str(&format!("; hint: {hint}"));
            }
            text
        }
        None => e.to_string(),
    }
}

fn create_commits_table(conn: &mut Connection) -> Result<()> {
    conn.run("cannot create the table of commits", |client| {
        let mut tx = client.transaction()?;
        // Sinks starting together must not race to create it.
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext($1))",
            &[&COMMITS_TABLE],
        )?;
        tx.batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {COMMITS_TABLE} (
                writer text PRIMARY KEY,
                checkpoint_id bigint NOT NULL,
                table_name text NOT NULL,
                committed_at timestamptz NOT NULL DEFAULT now()
            )"
        ))?;
        tx.commit()
    })
}

/// The table written: its name, columns, key, and the statements that write it.
struct Target {
    table: String,
    /// The table's columns.
    columns: Vec<String>,
    /// A record's field → its column (exact names, and lower-cased ones when unambiguous).
    by_field: HashMap<String, String>,
    /// The key's columns (empty: append).
    key: Vec<String>,
    delete: String,
}

fn quote(identifier: &str) -> String {
    format!("\"{}\"", identifier.replace('"', "\"\""))
}

impl Target {
    fn open(
        conn: &mut Connection,
        table: &str,
        key: &[String],
        settings: &Settings,
    ) -> Result<Target> {
        let (oid, columns, unique) = conn.run("cannot read the table's columns", |client| {
            let Some(row) = client.query_opt("SELECT to_regclass($1)::oid", &[&table])? else {
                return Ok((None, Vec::new(), Vec::new()));
            };
            let Some(oid) = row.get::<_, Option<postgres::types::Oid>>(0) else {
                return Ok((None, Vec::new(), Vec::new()));
            };
            let columns: Vec<String> = client
                .query(
                    "SELECT attname::text FROM pg_attribute
                     WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                    &[&oid],
                )?
                .iter()
                .map(|r| r.get(0))
                .collect();
            let unique: Vec<Vec<String>> = client
                .query(
                    "SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_index i
                     JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
                     WHERE i.indrelid = $1 AND i.indisunique AND i.indpred IS NULL
                     GROUP BY i.indexrelid",
                    &[&oid],
                )?
                .iter()
                .map(|r| r.get(0))
                .collect();
            Ok((Some(oid), columns, unique))
        })?;
        if oid.is_none() {
            return Err(Error::config(
                &settings.table,
                format!(
                    "no table `{table}` in {} (create it first: the sink writes rows, it does not define tables)",
                    conn.describe()
                ),
            ));
        }
        let mut by_field = HashMap::new();
        let mut lower: HashMap<String, Vec<&String>> = HashMap::new();
        for column in &columns {
            by_field.insert(column.clone(), column.clone());
            lower.entry(column.to_lowercase()).or_default().push(column);
        }
        for (name, candidates) in lower {
            if let [column] = candidates.as_slice() {
                by_field.entry(name).or_insert_with(|| (*column).clone());
            }
        }
        let mut key_columns = Vec::new();
        for field in key {
            let column = by_field
                .get(field)
                .or_else(|| by_field.get(&field.to_lowercase()))
                .ok_or_else(|| {
                    Error::config(
                        &settings.key,
                        format!(
                            "the key column `{field}` is not a column of `{table}` (its columns: {})",
                            columns.join(", ")
                        ),
                    )
                })?;
            key_columns.push(column.clone());
        }
        if !key_columns.is_empty() {
            let mut wanted = key_columns.clone();
            wanted.sort();
            wanted.dedup();
            if !unique.contains(&wanted) {
                return Err(Error::config(
                    &settings.key,
                    format!(
                        "`{table}` has no primary key or unique index on ({}): an upsert needs one (ALTER TABLE {table} ADD PRIMARY KEY ({}))",
                        key_columns.join(", "),
                        key_columns.join(", ")
                    ),
                ));
            }
        }
        let delete = format!(
            "DELETE FROM {table} WHERE ({keys}) IN (SELECT {keys} FROM json_populate_recordset(NULL::{table}, $1::text::json))",
            keys = key_columns
                .iter()
                .map(|c| quote(c))
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(Target {
            table: table.to_string(),
            columns,
            by_field,
            key: key_columns,
            delete,
        })
    }

    /// The record's fields renamed to the table's columns.
    fn to_row(&self, row: Map<String, Value>) -> std::result::Result<Map<String, Value>, String> {
        let mut out = Map::with_capacity(row.len());
        for (field, value) in row {
            let column = match self.by_field.get(&field) {
                Some(column) => column,
                None => match self.by_field.get(&field.to_lowercase()) {
                    Some(column) => column,
                    None => {
                        return Err(format!(
                            "the field `{field}` is not a column of `{}` (its columns: {})",
                            self.table,
                            self.columns.join(", ")
                        ));
                    }
                },
            };
            out.insert(column.clone(), value);
        }
        Ok(out)
    }

    /// The key of a row, as text (for the batch's index).
    fn key_of(&self, row: &Map<String, Value>) -> std::result::Result<String, String> {
        let mut key = Vec::with_capacity(self.key.len());
        for column in &self.key {
            match row.get(column) {
                Some(value) if !value.is_null() => key.push(value),
                _ => {
                    return Err(format!(
                        "a row of `{}` has no value for its key column `{column}`",
                        self.table
                    ));
                }
            }
        }
        serde_json::to_string(&key).map_err(|e| e.to_string())
    }

    /// `INSERT` of `columns` from a JSON array of rows, upserting by the key.
    fn insert(&self, columns: &[&String]) -> String {
        let list = columns
            .iter()
            .map(|c| quote(c))
            .collect::<Vec<_>>()
            .join(", ");
        let mut sql = format!(
            "INSERT INTO {table} ({list}) SELECT {list} FROM json_populate_recordset(NULL::{table}, $1::text::json)",
            table = self.table
        );
        if !self.key.is_empty() {
            let keys = self
                .key
                .iter()
                .map(|c| quote(c))
                .collect::<Vec<_>>()
                .join(", ");
            let updates: Vec<String> = columns
                .iter()
                .filter(|c| !self.key.contains(c))
                .map(|c| format!("{0} = EXCLUDED.{0}", quote(c)))
                .collect();
            if updates.is_empty() {
                sql.push_str(&format!(" ON CONFLICT ({keys}) DO NOTHING"));
            } else {
                sql.push_str(&format!(
                    " ON CONFLICT ({keys}) DO UPDATE SET {}",
                    updates.join(", ")
                ));
            }
        }
        sql
    }

    /// Writes `changes` in order in `tx`: by key, the last change of each key wins.
    fn apply(
        &self,
        tx: &mut Transaction<'_>,
        changes: &[RowChange],
    ) -> std::result::Result<(), postgres::Error> {
        let mut puts: Vec<&Map<String, Value>> = Vec::new();
        let mut deletes: Vec<&Map<String, Value>> = Vec::new();
        if self.key.is_empty() {
            puts.extend(changes.iter().map(RowChange::row));
        } else {
            // Changes of several checkpoints: compacted again (one statement may not touch a
            // row twice).
            let mut last: HashMap<String, &RowChange> = HashMap::new();
            for change in changes {
                let key = self.key_of(change.row()).unwrap_or_default();
                last.insert(key, change);
            }
            for change in last.into_values() {
                match change {
                    RowChange::Put(row) => puts.push(row),
                    RowChange::Delete(row) => deletes.push(row),
                }
            }
        }
        for chunk in deletes.chunks(CHUNK_ROWS) {
            let json = serde_json::to_string(chunk).expect("JSON values serialize");
            tx.execute(&self.delete, &[&json])?;
        }
        for chunk in puts.chunks(CHUNK_ROWS) {
            let mut columns: Vec<&String> = Vec::new();
            for row in chunk {
                for name in row.keys() {
                    if !columns.contains(&name) {
                        columns.push(name);
                    }
                }
            }
            if columns.is_empty() {
                continue;
            }
            let json = serde_json::to_string(chunk).expect("JSON values serialize");
            tx.execute(&self.insert(&columns), &[&json])?;
        }
        Ok(())
    }
}

/// The changes of one interval; by key, one per key (the last).
struct Batch {
    target: Arc<Target>,
    changes: Vec<RowChange>,
    index: HashMap<String, usize>,
}

impl Batch {
    fn new(target: Arc<Target>) -> Self {
        Batch {
            target,
            changes: Vec::new(),
            index: HashMap::new(),
        }
    }

    fn len(&self) -> usize {
        self.changes.len()
    }

    fn push(&mut self, change: RowChange) -> std::result::Result<(), String> {
        let change = match change {
            RowChange::Put(row) => RowChange::Put(self.target.to_row(row)?),
            RowChange::Delete(row) => RowChange::Delete(self.target.to_row(row)?),
        };
        if self.target.key.is_empty() {
            if let RowChange::Delete(_) = change {
                return Err(format!(
                    "a deletion reached the append-only sink of `{}` (give the table's key to apply a changelog)",
                    self.target.table
                ));
            }
            self.changes.push(change);
            return Ok(());
        }
        let key = self.target.key_of(change.row())?;
        match self.index.get(&key) {
            Some(&at) => self.changes[at] = change,
            None => {
                self.index.insert(key, self.changes.len());
                self.changes.push(change);
            }
        }
        Ok(())
    }

    fn take(&mut self) -> Vec<RowChange> {
        self.index.clear();
        std::mem::take(&mut self.changes)
    }
}

/// What a checkpoint stores for an exactly-once writer: its name and the changes of each
/// checkpoint not yet committed when it was taken.
#[derive(Serialize, Deserialize)]
struct Committable {
    writer: String,
    subtask: usize,
    epochs: Vec<(u64, Vec<RowChange>)>,
}

struct PostgresWriter<R> {
    conn: Connection,
    target: Arc<Target>,
    encode: Encode<R>,
    guarantee: Guarantee,
    batch_rows: usize,
    flush_interval: Duration,
    /// When the oldest row of the batch arrived (at-least-once).
    oldest: Option<Instant>,
    batch: Batch,
    /// This writer's name in the table of commits.
    writer: String,
    subtask: usize,
    parallelism: usize,
    /// Exactly-once: the changes of each pre-committed checkpoint, until it completes.
    pending: BTreeMap<u64, Vec<RowChange>>,
}

impl<R> PostgresWriter<R> {
    /// At-least-once: writes the batch in one transaction.
    fn write_batch(&mut self) -> Result<()> {
        let changes = self.batch.take();
        self.oldest = None;
        if changes.is_empty() {
            return Ok(());
        }
        let target = self.target.clone();
        self.conn.run("cannot write rows", |client| {
            let mut tx = client.transaction()?;
            target.apply(&mut tx, &changes)?;
            tx.commit()
        })
    }
}

/// Writes the epochs of `writer` after the last one its table of commits records, and records
/// the last, in one transaction. Returns whether anything was written.
fn commit_epochs(
    conn: &mut Connection,
    target: &Target,
    writer: &str,
    epochs: &[(u64, Vec<RowChange>)],
) -> Result<bool> {
    let Some(last) = epochs.iter().map(|(id, _)| *id).max() else {
        return Ok(false);
    };
    let last = i64::try_from(last).unwrap_or(i64::MAX);
    conn.run("cannot commit a checkpoint's rows", |client| {
        let mut tx = client.transaction()?;
        // One commit of a writer at a time (a restored job and a zombie of the old one).
        tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&writer])?;
        let done: Option<i64> = tx
            .query_opt(
                &format!("SELECT checkpoint_id FROM {COMMITS_TABLE} WHERE writer = $1"),
                &[&writer],
            )?
            .map(|row| row.get(0));
        let due: Vec<RowChange> = epochs
            .iter()
            .filter(|(id, _)| {
                done.is_none_or(|done| i64::try_from(*id).unwrap_or(i64::MAX) > done)
            })
            .flat_map(|(_, changes)| changes.iter().cloned())
            .collect();
        if done.is_some_and(|done| done >= last) {
            return Ok(false);
        }
        target.apply(&mut tx, &due)?;
        tx.execute(
            &format!(
                "INSERT INTO {COMMITS_TABLE} (writer, checkpoint_id, table_name) VALUES ($1, $2, $3)
                 ON CONFLICT (writer) DO UPDATE SET checkpoint_id = EXCLUDED.checkpoint_id, committed_at = now()"
            ),
            &[&writer, &last, &target.table],
        )?;
        tx.commit()?;
        Ok(true)
    })
}

impl<R: Data> SinkWriter<R> for PostgresWriter<R> {
    fn write(&mut self, batch: &mut Vec<Record<R>>) -> Result<()> {
        for record in batch.drain(..) {
            let change = (self.encode)(&record.value)
                .and_then(|change| change.map_or(Ok(()), |change| self.batch.push(change)));
            if let Err(message) = change {
                return Err(Error::user(format!(
                    "PostgreSQL sink of `{}`: {message}",
                    self.target.table
                )));
            }
            if self.oldest.is_none() && self.batch.len() > 0 {
                self.oldest = Some(Instant::now());
            }
        }
        if self.guarantee == Guarantee::AtLeastOnce && self.batch.len() >= self.batch_rows {
            self.write_batch()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.guarantee == Guarantee::AtLeastOnce
            && self
                .oldest
                .is_some_and(|at| at.elapsed() >= self.flush_interval)
        {
            self.write_batch()?;
        }
        Ok(())
    }

    fn pre_commit(&mut self, checkpoint_id: u64) -> Result<Option<Vec<u8>>> {
        if self.guarantee == Guarantee::AtLeastOnce {
            self.write_batch()?;
            return Ok(None);
        }
        let changes = self.batch.take();
        if !changes.is_empty() {
            self.pending
                .entry(checkpoint_id)
                .or_default()
                .extend(changes);
        }
        if self.pending.is_empty() {
            return Ok(None);
        }
        let committable = Committable {
            writer: self.writer.clone(),
            subtask: self.subtask,
            epochs: self
                .pending
                .iter()
                .map(|(id, changes)| (*id, changes.clone()))
                .collect(),
        };
        serde_json::to_vec(&committable)
            .map(Some)
            .map_err(|e| Error::user(format!("cannot encode the rows of a checkpoint: {e}")))
    }

    fn commit(&mut self, checkpoint_id: u64) -> Result<()> {
        let later = self.pending.split_off(&(checkpoint_id + 1));
        let due: Vec<(u64, Vec<RowChange>)> = std::mem::replace(&mut self.pending, later)
            .into_iter()
            .collect();
        commit_epochs(&mut self.conn, &self.target, &self.writer, &due).map(|_| ())
    }

    fn recover(&mut self, committables: Vec<Vec<u8>>) -> Result<()> {
        for bytes in committables {
            let committable: Committable = serde_json::from_slice(&bytes).map_err(|e| {
                Error::user(format!(
                    "the checkpoint's rows for PostgreSQL cannot be read: {e}"
                ))
            })?;
            // Each committable once, by the subtask it falls to at this parallelism.
            if committable.subtask % self.parallelism == self.subtask {
                commit_epochs(
                    &mut self.conn,
                    &self.target,
                    &committable.writer,
                    &committable.epochs,
                )?;
            }
        }
        Ok(())
    }

    fn close(&mut self) -> Result<Option<Finalizer>> {
        if self.guarantee == Guarantee::AtLeastOnce {
            self.write_batch()?;
            return Ok(None);
        }
        let tail = self.batch.take();
        let pending = std::mem::take(&mut self.pending);
        if tail.is_empty() && pending.is_empty() {
            return Ok(None);
        }
        let mut conn = Connection {
            config: self.conn.config.clone(),
            max_retries: self.conn.max_retries,
            client: self.conn.client.take(),
        };
        let target = self.target.clone();
        let writer = self.writer.clone();
        Ok(Some(Box::new(move |ending| {
            let mut epochs: Vec<(u64, Vec<RowChange>)> = match ending {
                Ending::Drained => pending.into_iter().collect(),
                Ending::Stopped { up_to } => {
                    pending.into_iter().filter(|(id, _)| *id <= up_to).collect()
                }
            };
            if ending == Ending::Drained && !tail.is_empty() {
                // After every checkpoint: recorded as the last one this writer will make.
                epochs.push((i64::MAX as u64, tail));
            }
            commit_epochs(&mut conn, &target, &writer, &epochs).map(|_| ())
        })))
    }
}
