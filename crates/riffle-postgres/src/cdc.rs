//! Change data capture from PostgreSQL: a consistent snapshot of the captured tables, then their
//! changes from a logical replication slot (the built-in `pgoutput` plugin, read with
//! `pg_logical_slot_peek_binary_changes`), normalized by primary key into a changelog.
//!
//! The protocol (`pgoutput`'s messages: PostgreSQL's documentation, "Logical Replication
//! Message Formats"):
//!
//! 1. At the first start the source creates the publication (`FOR TABLE` the captured tables)
//!    and the slot when they are absent, then reads each table in one `REPEATABLE READ`
//!    transaction, noting the transaction's snapshot (`pg_current_snapshot()`) and the WAL
//!    position after it.
//! 2. It then reads the slot's changes, a transaction at a time in commit order. A transaction
//!    that the snapshot already saw (committed before the snapshot's WAL position, its id
//!    visible in the snapshot) is skipped: each change is read once, from the snapshot or from
//!    the slot.
//! 3. The position (the last commit read) is in the job's checkpoints; when a checkpoint
//!    completes, the slot is advanced to it (`pg_replication_slot_advance`), so the server
//!    keeps the WAL a restore needs and no more. A restore reads the slot again from the
//!    checkpoint's position; a restore during the snapshot reads the tables again and replays
//!    the slot from its start.
//!
//! Every record is then normalized by its table and primary key with the key's last row in
//! keyed state (as Flink's `ChangelogNormalize`): a new key is `+I`, a changed row `-U` of the
//! old row and `+U` of the new, a row read again unchanged nothing, a delete `-D` of the last
//! row. Rows read twice (a snapshot read again after a restore) therefore change nothing, the
//! old row of an update or delete comes from the state (no `REPLICA IDENTITY FULL` needed), and
//! an unchanged TOASTed value of an update is taken from it too.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use postgres::{Client, NoTls, SimpleQueryMessage};
use riffle::error::{ConnectorErrorKind, Error, Result};
use riffle::source::{Boundedness, ReadStatus, Source, SourceOutput, SplitReader};
use riffle::state::ValueStateDescriptor;
use riffle::{Change, DataStream, StreamEnv};
use serde::{Deserialize, Serialize};

/// A row of a captured table: its columns' names and values as PostgreSQL's text output
/// (`NULL` as `None`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CdcRow {
    /// The table, `schema.table`.
    pub table: String,
    /// The columns' names, in the table's order.
    pub columns: Vec<String>,
    /// The values, in the columns' order, as text (`'2026-01-15 00:18:00.4'`, `t`, `12.50`).
    pub values: Vec<Option<String>>,
}

impl CdcRow {
    /// The value of `column` (`None`: no such column, or `NULL`).
    pub fn get(&self, column: &str) -> Option<&str> {
        let at = self.columns.iter().position(|c| c == column)?;
        self.values[at].as_deref()
    }
}

/// A value of a change as the slot gives it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CdcValue {
    /// `NULL`.
    Null,
    /// A value as text.
    Text(String),
    /// A TOASTed value the update did not change (taken from the row's last value).
    Unchanged,
}

/// What the source reads, before the changes are normalized by key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CdcRecord {
    /// The table, `schema.table`.
    pub table: String,
    /// The columns' names.
    pub columns: Vec<String>,
    /// The primary key's columns, by position.
    pub key: Vec<usize>,
    /// The values (a delete's: the key's, the others `NULL`).
    pub values: Vec<CdcValue>,
    /// Whether the row is deleted (else: inserted or updated).
    pub delete: bool,
}

impl CdcRecord {
    /// The table and the key's values: what the changes are normalized by.
    pub fn key(&self) -> String {
        let values: Vec<Option<&str>> = self
            .key
            .iter()
            .map(|&c| match &self.values[c] {
                CdcValue::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        serde_json::to_string(&(&self.table, values)).expect("strings serialize")
    }
}

/// Captures the changes of PostgreSQL tables (see the module's documentation).
///
/// ```no_run
/// use riffle::StreamEnv;
/// use riffle_postgres::PostgresCdcSource;
/// let env = StreamEnv::new();
/// let changes = PostgresCdcSource::new("postgresql://riffle@127.0.0.1:5432/shop", ["public.orders"])
///     .slot("riffle_orders")
///     .changelog(&env);
/// changes.map(|c| format!("{} {:?}", c.op, c.row.values)).sink(riffle::sink::StdoutSink::new());
/// ```
#[derive(Clone)]
pub struct PostgresCdcSource {
    url: String,
    tables: Vec<String>,
    slot: String,
    publication: String,
    poll_interval: Duration,
}

impl PostgresCdcSource {
    /// Captures `tables` (`schema.table`, or `table` in `public`) of the database at `url`,
    /// through the slot `riffle_slot` and the publication `riffle_publication`.
    pub fn new(
        url: impl Into<String>,
        tables: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        PostgresCdcSource {
            url: url.into(),
            tables: tables
                .into_iter()
                .map(|t| {
                    let t: String = t.into();
                    if t.contains('.') {
                        t
                    } else {
                        format!("public.{t}")
                    }
                })
                .collect(),
            slot: "riffle_slot".into(),
            publication: "riffle_publication".into(),
            poll_interval: Duration::from_millis(200),
        }
    }

    /// The replication slot (created when absent; one per capturing job).
    pub fn slot(mut self, slot: impl Into<String>) -> Self {
        self.slot = slot.into();
        self
    }

    /// The publication (created `FOR TABLE` the captured tables when absent).
    pub fn publication(mut self, publication: impl Into<String>) -> Self {
        self.publication = publication.into();
        self
    }

    /// How often the slot is asked for changes when there were none (200 ms by default).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// The captured tables' changelog: the source's records normalized by table and primary
    /// key (see the module's documentation).
    pub fn changelog(self, env: &StreamEnv) -> DataStream<Change<CdcRow>> {
        let name = format!("Source: PostgreSQL CDC {}", self.tables.join(", "));
        let last = Arc::new(ValueStateDescriptor::<CdcRow>::new("cdc-last-row"));
        env.from_source(self)
            .name(&name)
            .key_by(|record: &CdcRecord| record.key())
            .process(move |_: &String, record: CdcRecord, ctx| {
                let mut state = ctx.value(&last);
                let before = state.get()?;
                if record.delete {
                    if let Some(row) = before {
                        state.clear()?;
                        drop(state);
                        ctx.emit(Change::delete(row))?;
                    }
                    return Ok(());
                }
                let mut values = Vec::with_capacity(record.values.len());
                for (i, value) in record.values.into_iter().enumerate() {
                    values.push(match value {
                        CdcValue::Null => None,
                        CdcValue::Text(text) => Some(text),
                        CdcValue::Unchanged => before
                            .as_ref()
                            .and_then(|row| row.values.get(i).cloned().flatten()),
                    });
                }
                let row = CdcRow {
                    table: record.table,
                    columns: record.columns,
                    values,
                };
                match before {
                    Some(old) if old == row => Ok(()),
                    Some(old) => {
                        state.set(row.clone())?;
                        drop(state);
                        ctx.emit(Change::update_before(old))?;
                        ctx.emit(Change::update_after(row))
                    }
                    None => {
                        state.set(row.clone())?;
                        drop(state);
                        ctx.emit(Change::insert(row))
                    }
                }
            })
            .name("ChangelogNormalize")
    }
}

fn connector_error(what: &str, e: postgres::Error) -> Error {
    let kind = if e.as_db_error().is_some() {
        ConnectorErrorKind::Fatal
    } else {
        ConnectorErrorKind::Retriable
    };
    Error::connector("postgres", kind, what, crate::sink::error_text(&e))
}

impl Source<CdcRecord> for PostgresCdcSource {
    type Split = ();

    fn name(&self) -> String {
        format!("PostgreSQL CDC {}", self.tables.join(", "))
    }

    fn boundedness(&self) -> Boundedness {
        Boundedness::Unbounded
    }

    fn validate(&self) -> Result<()> {
        let config = crate::sink::parse_url(&self.url, "url")?;
        let mut client = config.connect(NoTls).map_err(|e| {
            Error::config(
                "url",
                format!("cannot connect: {}", crate::sink::error_text(&e)),
            )
        })?;
        let level: String = client
            .query_one("SHOW wal_level", &[])
            .map_err(|e| connector_error("cannot read wal_level", e))?
            .get(0);
        if level != "logical" {
            return Err(Error::config(
                "wal_level",
                format!(
                    "the server's wal_level is '{level}': change data capture needs 'logical' (ALTER SYSTEM SET wal_level = logical, then restart the server)"
                ),
            ));
        }
        // A replication slot needs the REPLICATION attribute (or a superuser): say so here
        // rather than at the slot's creation.
        let (user, replication): (String, bool) = client
            .query_one(
                "SELECT current_user::text, rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user",
                &[],
            )
            .map(|row| (row.get(0), row.get(1)))
            .map_err(|e| connector_error("cannot read the user's attributes", e))?;
        if !replication {
            return Err(Error::config(
                "url",
                format!(
                    "the user `{user}` may not read changes: change data capture needs the REPLICATION attribute (ALTER ROLE \"{user}\" WITH REPLICATION) and SELECT on the tables"
                ),
            ));
        }
        for table in &self.tables {
            key_columns(&mut client, table)?;
        }
        Ok(())
    }

    fn splits(&self, _parallelism: usize) -> Result<Vec<()>> {
        // One slot, one stream of changes in commit order: one reader.
        Ok(vec![()])
    }

    fn reader(&self, _split: ()) -> Result<Box<dyn SplitReader<CdcRecord>>> {
        Ok(Box::new(CdcReader {
            source: self.clone(),
            client: None,
            phase: Phase::Start { dedup: true },
            position: Position::default(),
            relations: HashMap::new(),
            keys: HashMap::new(),
            pending: VecDeque::new(),
            decoded: 0,
            next_poll: None,
        }))
    }
}

/// The primary key's columns of `table` (an error naming the table when it has none).
fn key_columns(client: &mut Client, table: &str) -> Result<Vec<String>> {
    let rows = client
        .query(
            "SELECT a.attname::text FROM pg_index i
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
             WHERE i.indrelid = to_regclass($1) AND i.indisprimary ORDER BY a.attnum",
            &[&table],
        )
        .map_err(|e| connector_error("cannot read a table's primary key", e))?;
    if rows.is_empty() {
        let exists: bool = client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
            .map_err(|e| connector_error("cannot read a table", e))?
            .get(0);
        return Err(Error::config(
            "tables",
            if exists {
                format!(
                    "`{table}` has no primary key: change data capture normalizes changes by it"
                )
            } else {
                format!("no table `{table}`")
            },
        ));
    }
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Where the reader is, as stored in checkpoints.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Position {
    /// Whether the snapshot was read whole (else a restore reads it again).
    streaming: bool,
    /// The commit LSN of the last transaction read from the slot.
    lsn: u64,
    /// The snapshot's visibility, to skip the transactions it saw.
    snapshot: Option<Snapshot>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Snapshot {
    xmin: u32,
    xmax: u32,
    xip: Vec<u32>,
    /// The WAL position after the snapshot was taken: later commits it cannot have seen.
    lsn: u64,
}

impl Snapshot {
    /// Whether the snapshot saw transaction `xid` committed at `commit_lsn`.
    fn saw(&self, xid: u32, commit_lsn: u64) -> bool {
        if commit_lsn > self.lsn {
            return false;
        }
        let before = |a: u32, b: u32| (a.wrapping_sub(b) as i32) < 0;
        before(xid, self.xmin) || (before(xid, self.xmax) && !self.xip.contains(&xid))
    }
}

enum Phase {
    /// Not connected yet; `dedup`: whether the snapshot's transactions are skipped in the slot
    /// (not after a restore during a snapshot: the slot is replayed whole).
    Start {
        dedup: bool,
    },
    /// Reading table `tables[next]` with an open cursor in the snapshot's transaction.
    Snapshot {
        tables: Vec<(String, Vec<String>, Vec<usize>)>,
        next: usize,
        open: bool,
    },
    Stream,
}

struct Relation {
    table: String,
    columns: Vec<String>,
    key: Vec<usize>,
}

struct CdcReader {
    source: PostgresCdcSource,
    client: Option<Client>,
    phase: Phase,
    position: Position,
    relations: HashMap<u32, Relation>,
    /// Each captured table's primary key columns.
    keys: HashMap<String, Vec<String>>,
    /// Records decoded and not yet handed out, each transaction's followed by its commit.
    pending: VecDeque<Pending>,
    /// The commit LSN of the last transaction decoded into `pending` (the slot gives every
    /// change since its last advance at each poll: those up to here are skipped).
    decoded: u64,
    next_poll: Option<Instant>,
}

enum Pending {
    Record(CdcRecord),
    /// A change that cannot be captured (a bad record of the source), and why.
    Bad(String),
    /// Every record of the transaction committed at this LSN was handed out.
    Committed(u64),
}

/// The LSN `X/Y` as a number.
fn parse_lsn(text: &str) -> Option<u64> {
    let (high, low) = text.split_once('/')?;
    Some((u64::from_str_radix(high, 16).ok()? << 32) | u64::from_str_radix(low, 16).ok()?)
}

fn format_lsn(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

fn quote(identifier: &str) -> String {
    identifier
        .split('.')
        .map(|part| format!("\"{}\"", part.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(".")
}

impl CdcReader {
    fn client(&mut self) -> Result<&mut Client> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            let config = crate::sink::parse_url(&self.source.url, "url")?;
            self.client = Some(
                config
                    .connect(NoTls)
                    .map_err(|e| connector_error("cannot connect", e))?,
            );
        }
        Ok(self.client.as_mut().expect("connected above"))
    }

    /// Creates the publication and the slot when absent, then opens the snapshot.
    fn start(&mut self, dedup: bool) -> Result<()> {
        let source = self.source.clone();
        let client = self.client()?;
        let err = |what: &'static str| move |e| connector_error(what, e);
        let exists: bool = client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)",
                &[&source.publication],
            )
            .map_err(err("cannot read the publications"))?
            .get(0);
        if !exists {
            let tables: Vec<String> = source.tables.iter().map(|t| quote(t)).collect();
            client
                .batch_execute(&format!(
                    "CREATE PUBLICATION {} FOR TABLE {}",
                    quote(&source.publication),
                    tables.join(", ")
                ))
                .map_err(err("cannot create the publication"))?;
        }
        let exists: bool = client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)",
                &[&source.slot],
            )
            .map_err(err("cannot read the replication slots"))?
            .get(0);
        if !exists {
            client
                .query_one(
                    "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
                    &[&source.slot],
                )
                .map_err(err("cannot create the replication slot"))?;
        }
        let mut tables = Vec::new();
        for table in &source.tables {
            let key_names = key_columns(client, table)?;
            let columns: Vec<String> = client
                .query(
                    "SELECT attname::text FROM pg_attribute WHERE attrelid = to_regclass($1)
                     AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                    &[table],
                )
                .map_err(err("cannot read a table's columns"))?
                .iter()
                .map(|r| r.get(0))
                .collect();
            let key = key_names
                .iter()
                .filter_map(|k| columns.iter().position(|c| c == k))
                .collect();
            tables.push((table.clone(), columns, key));
        }
        client
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .map_err(err("cannot start the snapshot"))?;
        let row = client
            .query_one(
                "SELECT pg_current_snapshot()::text, pg_current_wal_lsn()::text",
                &[],
            )
            .map_err(err("cannot take the snapshot"))?;
        let (snapshot, lsn): (String, String) = (row.get(0), row.get(1));
        let mut parts = snapshot.split(':');
        let mut xid = || -> u32 {
            parts
                .next()
                .and_then(|x| x.parse::<u64>().ok())
                .map_or(0, |x| x as u32)
        };
        let (xmin, xmax) = (xid(), xid());
        let xip = snapshot
            .rsplit(':')
            .next()
            .unwrap_or("")
            .split(',')
            .filter_map(|x| x.parse::<u64>().ok().map(|x| x as u32))
            .collect();
        self.position = Position {
            streaming: false,
            lsn: 0,
            snapshot: dedup.then(|| Snapshot {
                xmin,
                xmax,
                xip,
                lsn: parse_lsn(&lsn).unwrap_or(0),
            }),
        };
        self.phase = Phase::Snapshot {
            tables,
            next: 0,
            open: false,
        };
        Ok(())
    }

    /// Reads up to `max` rows of the snapshot; moves to the stream after its last table.
    fn read_snapshot(&mut self, max: usize) -> Result<()> {
        let Phase::Snapshot { tables, next, open } = &mut self.phase else {
            return Ok(());
        };
        let client = self.client.as_mut().expect("connected at the start");
        let err = |what: &'static str| move |e| connector_error(what, e);
        let Some((table, columns, key)) = tables.get(*next).cloned() else {
            client
                .batch_execute("COMMIT")
                .map_err(err("cannot end the snapshot"))?;
            self.position.streaming = true;
            self.phase = Phase::Stream;
            return Ok(());
        };
        if !*open {
            let list: Vec<String> = columns.iter().map(|c| quote(c)).collect();
            client
                .batch_execute(&format!(
                    "DECLARE riffle_snapshot NO SCROLL CURSOR FOR SELECT {} FROM {}",
                    list.join(", "),
                    quote(&table)
                ))
                .map_err(err("cannot read a table"))?;
            *open = true;
        }
        let messages = client
            .simple_query(&format!(
                "FETCH {} FROM riffle_snapshot",
                max.clamp(1, 10_000)
            ))
            .map_err(err("cannot read a table"))?;
        let mut rows = 0;
        for message in messages {
            if let SimpleQueryMessage::Row(row) = message {
                rows += 1;
                let values = (0..columns.len())
                    .map(|i| match row.get(i) {
                        Some(text) => CdcValue::Text(text.to_string()),
                        None => CdcValue::Null,
                    })
                    .collect();
                self.pending.push_back(Pending::Record(CdcRecord {
                    table: table.clone(),
                    columns: columns.clone(),
                    key: key.clone(),
                    values,
                    delete: false,
                }));
            }
        }
        if rows == 0 {
            client
                .batch_execute("CLOSE riffle_snapshot")
                .map_err(err("cannot read a table"))?;
            *open = false;
            *next += 1;
        }
        Ok(())
    }

    /// Reads the slot's changes after the position; returns whether there were any.
    fn poll(&mut self) -> Result<bool> {
        let (slot, publication) = (self.source.slot.clone(), self.source.publication.clone());
        if self.keys.is_empty() {
            for table in self.source.tables.clone() {
                let key = key_columns(self.client()?, &table)?;
                self.keys.insert(table, key);
            }
        }
        let client = self.client()?;
        let rows = client
            .query(
                "SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
                   'proto_version', '1', 'publication_names', $2)",
                &[&slot, &publication],
            )
            .map_err(|e| connector_error("cannot read the replication slot", e))?;
        let before = self.pending.len();
        let mut transaction: Option<(u32, Vec<Pending>)> = None;
        // Whether the current transaction was read at an earlier poll: its changes are not
        // decoded again (the slot gives everything since its last advance at every poll).
        let mut skipping = false;
        for row in rows {
            let data: &[u8] = row.get(0);
            if skipping && matches!(data.first(), Some(b'I' | b'U' | b'D')) {
                continue;
            }
            match decode(data, &mut self.relations, &self.keys)? {
                Message::Begin { xid, lsn } => {
                    skipping = lsn <= self.decoded;
                    transaction = Some((xid, Vec::new()));
                }
                Message::Changes(changes) => {
                    if let Some((_, records)) = &mut transaction {
                        records.extend(changes.into_iter().map(Pending::Record));
                    }
                }
                Message::Bad(reason) => {
                    if let Some((_, records)) = &mut transaction {
                        records.push(Pending::Bad(reason));
                    }
                }
                Message::Commit { lsn } => {
                    skipping = false;
                    let Some((xid, records)) = transaction.take() else {
                        continue;
                    };
                    if lsn <= self.decoded {
                        continue; // read before (the slot is advanced at checkpoints only)
                    }
                    self.decoded = lsn;
                    let seen = self
                        .position
                        .snapshot
                        .as_ref()
                        .is_some_and(|s| s.saw(xid, lsn));
                    if !seen {
                        self.pending.extend(records);
                    }
                    self.pending.push_back(Pending::Committed(lsn));
                }
                Message::Other => {}
            }
        }
        Ok(self.pending.len() > before)
    }
}

enum Message {
    /// A transaction starts: its id and the LSN of its commit.
    Begin {
        xid: u32,
        lsn: u64,
    },
    Commit {
        lsn: u64,
    },
    Changes(Vec<CdcRecord>),
    /// A change that cannot be captured, and why.
    Bad(String),
    Other,
}

/// Reads `pgoutput` messages (protocol version 1).
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn take(&mut self, n: usize) -> std::result::Result<&[u8], String> {
        if self.0.len() < n {
            return Err("a pgoutput message ends early".into());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> std::result::Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> std::result::Result<u16, String> {
        Ok(u16::from_be_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    fn u32(&mut self) -> std::result::Result<u32, String> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> std::result::Result<u64, String> {
        Ok(u64::from_be_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn string(&mut self) -> std::result::Result<String, String> {
        let end = self
            .0
            .iter()
            .position(|&b| b == 0)
            .ok_or("a pgoutput string has no end")?;
        let text = String::from_utf8_lossy(&self.0[..end]).into_owned();
        self.0 = &self.0[end + 1..];
        Ok(text)
    }
    fn tuple(&mut self) -> std::result::Result<Vec<CdcValue>, String> {
        let n = self.u16()?;
        let mut values = Vec::with_capacity(n as usize);
        for _ in 0..n {
            values.push(match self.u8()? {
                b'n' => CdcValue::Null,
                b'u' => CdcValue::Unchanged,
                b't' => {
                    let len = self.u32()? as usize;
                    CdcValue::Text(String::from_utf8_lossy(self.take(len)?).into_owned())
                }
                other => return Err(format!("a pgoutput value of kind {:?}", other as char)),
            });
        }
        Ok(values)
    }
}

fn decode(
    data: &[u8],
    relations: &mut HashMap<u32, Relation>,
    keys: &HashMap<String, Vec<String>>,
) -> Result<Message> {
    decode_message(data, relations, keys).map_err(|e| {
        Error::connector(
            "postgres",
            ConnectorErrorKind::Fatal,
            "cannot decode the slot's changes",
            e,
        )
    })
}

fn decode_message(
    data: &[u8],
    relations: &mut HashMap<u32, Relation>,
    keys: &HashMap<String, Vec<String>>,
) -> std::result::Result<Message, String> {
    let mut bytes = Bytes(data);
    let record =
        |relations: &HashMap<u32, Relation>, id: u32, values: Vec<CdcValue>, delete: bool| {
            let relation = relations
                .get(&id)
                .ok_or_else(|| format!("a change of relation {id} before its description"))?;
            Ok::<_, String>(CdcRecord {
                table: relation.table.clone(),
                columns: relation.columns.clone(),
                key: relation.key.clone(),
                values,
                delete,
            })
        };
    Ok(match bytes.u8()? {
        b'B' => {
            let lsn = bytes.u64()?;
            let _timestamp = bytes.u64()?;
            Message::Begin {
                xid: bytes.u32()?,
                lsn,
            }
        }
        b'C' => {
            let _flags = bytes.u8()?;
            Message::Commit { lsn: bytes.u64()? }
        }
        b'R' => {
            let id = bytes.u32()?;
            let namespace = bytes.string()?;
            let name = bytes.string()?;
            let _identity = bytes.u8()?;
            let n = bytes.u16()?;
            let (mut columns, mut key) = (Vec::new(), Vec::new());
            for i in 0..n as usize {
                let flags = bytes.u8()?;
                columns.push(bytes.string()?);
                let _type = bytes.u32()?;
                let _modifier = bytes.u32()?;
                if flags & 1 == 1 {
                    key.push(i);
                }
            }
            let table = format!("{namespace}.{name}");
            // The primary key, not the replica identity's columns (all of them with
            // REPLICA IDENTITY FULL): the snapshot's rows are keyed by it too.
            if let Some(primary) = keys.get(&table) {
                key = primary
                    .iter()
                    .filter_map(|k| columns.iter().position(|c| c == k))
                    .collect();
            }
            relations.insert(
                id,
                Relation {
                    table,
                    columns,
                    key,
                },
            );
            Message::Other
        }
        b'I' => {
            let id = bytes.u32()?;
            let _new = bytes.u8()?;
            Message::Changes(vec![record(relations, id, bytes.tuple()?, false)?])
        }
        b'U' => {
            let id = bytes.u32()?;
            let mut kind = bytes.u8()?;
            let mut old = None;
            if kind == b'K' || kind == b'O' {
                // The old key (or row): sent when the key changed (or REPLICA IDENTITY FULL).
                old = Some(record(relations, id, bytes.tuple()?, true)?);
                kind = bytes.u8()?;
            }
            if kind != b'N' {
                return Err(format!(
                    "an update without its new row ({:?})",
                    kind as char
                ));
            }
            let mut new = record(relations, id, bytes.tuple()?, false)?;
            let Some(old) = old else {
                return Ok(Message::Changes(vec![new]));
            };
            // A TOASTed value the update did not change: the old row's (REPLICA IDENTITY FULL
            // sends it whole).
            for (value, before) in new.values.iter_mut().zip(&old.values) {
                if *value == CdcValue::Unchanged && matches!(before, CdcValue::Text(_)) {
                    *value = before.clone();
                }
            }
            if old.key() == new.key() {
                return Ok(Message::Changes(vec![new]));
            }
            if new.values.contains(&CdcValue::Unchanged) {
                // The row moved to another key: the unchanged value is in the old key's row,
                // which the new key's state does not have.
                return Ok(Message::Bad(format!(
                    "an update of `{}` changed a row's key ({}) and kept a TOASTed value the slot does not send: set REPLICA IDENTITY FULL on the table to capture such updates",
                    new.table,
                    new.key()
                )));
            }
            Message::Changes(vec![old, new])
        }
        b'D' => {
            let id = bytes.u32()?;
            let _kind = bytes.u8()?;
            Message::Changes(vec![record(relations, id, bytes.tuple()?, true)?])
        }
        b'T' => {
            tracing::warn!(
                "postgres cdc: a TRUNCATE of a captured table is not captured (its rows stay in the changelog)"
            );
            Message::Other
        }
        _ => Message::Other,
    })
}

impl SplitReader<CdcRecord> for CdcReader {
    fn split_id(&self) -> String {
        format!("postgres slot {}", self.source.slot)
    }

    fn read(&mut self, out: &mut SourceOutput<CdcRecord>, max: usize) -> Result<ReadStatus> {
        if self.pending.is_empty() {
            match self.phase {
                Phase::Start { dedup } => self.start(dedup)?,
                Phase::Snapshot { .. } => self.read_snapshot(max)?,
                Phase::Stream => {
                    if self.next_poll.is_some_and(|at| Instant::now() < at) {
                        return Ok(ReadStatus::Pending(self.next_poll));
                    }
                    if !self.poll()? {
                        self.next_poll = Some(Instant::now() + self.source.poll_interval);
                        return Ok(ReadStatus::Pending(self.next_poll));
                    }
                    self.next_poll = None;
                }
            }
        }
        let mut emitted = 0;
        while emitted < max {
            match self.pending.pop_front() {
                Some(Pending::Record(record)) => {
                    out.emit(record);
                    emitted += 1;
                }
                Some(Pending::Bad(reason)) => {
                    let at = format!("{} at {}", self.split_id(), format_lsn(self.decoded));
                    out.bad_record(at, reason, &[]);
                }
                Some(Pending::Committed(lsn)) => self.position.lsn = lsn,
                None => break,
            }
        }
        Ok(ReadStatus::Ready)
    }

    fn position(&self) -> serde_json::Value {
        // Records decoded and not handed out are after the position: a restore reads them again.
        serde_json::to_value(&self.position).expect("a position serializes")
    }

    fn seek(&mut self, position: &serde_json::Value) -> Result<()> {
        let position: Position = serde_json::from_value(position.clone())
            .map_err(|e| Error::user(format!("a PostgreSQL CDC position cannot be read: {e}")))?;
        if position.streaming {
            self.decoded = position.lsn;
            self.position = position;
            self.phase = Phase::Stream;
        } else {
            // Restored during the snapshot: read the tables again, and the slot from its start.
            self.phase = Phase::Start { dedup: false };
        }
        Ok(())
    }

    fn checkpoint_complete(&mut self, position: &serde_json::Value) -> Result<()> {
        let Ok(position) = serde_json::from_value::<Position>(position.clone()) else {
            return Ok(());
        };
        if !position.streaming || position.lsn == 0 {
            return Ok(());
        }
        let slot = self.source.slot.clone();
        let lsn = format_lsn(position.lsn);
        let client = self.client()?;
        // Advancing to where the slot already is (or before) is refused: nothing to do then.
        if let Err(e) = client.query(
            "SELECT pg_replication_slot_advance($1, $2::text::pg_lsn)",
            &[&slot, &lsn],
        ) && e.as_db_error().is_none_or(|db| db.code().code() != "55000")
        {
            return Err(connector_error("cannot advance the replication slot", e));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_snapshot_saw_what_committed_before_it() {
        let snapshot = Snapshot {
            xmin: 100,
            xmax: 110,
            xip: vec![103, 107],
            lsn: 5_000,
        };
        assert!(snapshot.saw(99, 4_000), "before xmin");
        assert!(snapshot.saw(105, 4_000), "between, not in progress");
        assert!(!snapshot.saw(103, 4_000), "in progress when it was taken");
        assert!(!snapshot.saw(110, 4_000), "at or after xmax");
        assert!(!snapshot.saw(99, 5_001), "committed after its WAL position");
        // Transaction ids wrap around.
        let wrapped = Snapshot {
            xmin: u32::MAX - 5,
            xmax: 3,
            xip: vec![],
            lsn: 5_000,
        };
        assert!(wrapped.saw(u32::MAX - 1, 1) && wrapped.saw(1, 1) && !wrapped.saw(3, 1));
    }

    #[test]
    fn lsns_read_and_print_as_postgres_does() {
        assert_eq!(parse_lsn("16/B374D848"), Some(0x16_B374_D848));
        assert_eq!(format_lsn(0x16_B374_D848), "16/B374D848");
        assert_eq!(parse_lsn("nonsense"), None);
    }

    /// `pgoutput` messages as the protocol lays them out.
    fn relation() -> Vec<u8> {
        let mut m = vec![b'R'];
        m.extend(7u32.to_be_bytes());
        m.extend(b"public\0items\0");
        m.push(b'd');
        m.extend(2u16.to_be_bytes());
        for (flags, name) in [(1u8, "id"), (0, "name")] {
            m.push(flags);
            m.extend(name.as_bytes());
            m.push(0);
            m.extend(25u32.to_be_bytes());
            m.extend((-1i32).to_be_bytes());
        }
        m
    }

    fn tuple(values: &[Option<&str>]) -> Vec<u8> {
        let mut m = (values.len() as u16).to_be_bytes().to_vec();
        for value in values {
            match value {
                None => m.push(b'n'),
                Some("<unchanged>") => m.push(b'u'),
                Some(text) => {
                    m.push(b't');
                    m.extend((text.len() as u32).to_be_bytes());
                    m.extend(text.as_bytes());
                }
            }
        }
        m
    }

    fn changes(message: Message) -> Vec<(bool, Vec<CdcValue>)> {
        match message {
            Message::Changes(records) => {
                records.into_iter().map(|r| (r.delete, r.values)).collect()
            }
            _ => panic!("not changes"),
        }
    }

    #[test]
    fn pgoutput_messages_decode_into_records() {
        let mut relations = HashMap::new();
        let keys = HashMap::new();
        assert!(matches!(
            decode_message(&relation(), &mut relations, &keys),
            Ok(Message::Other)
        ));
        let text = |t: &str| CdcValue::Text(t.to_string());
        let mut insert = vec![b'I'];
        insert.extend(7u32.to_be_bytes());
        insert.push(b'N');
        insert.extend(tuple(&[Some("1"), Some("ann")]));
        assert_eq!(
            changes(decode_message(&insert, &mut relations, &keys).unwrap()),
            [(false, vec![text("1"), text("ann")])]
        );
        // A key changed: the old key deleted, the new row put.
        let mut update = vec![b'U'];
        update.extend(7u32.to_be_bytes());
        update.push(b'K');
        update.extend(tuple(&[Some("1"), None]));
        update.push(b'N');
        update.extend(tuple(&[Some("2"), Some("ann")]));
        assert_eq!(
            changes(decode_message(&update, &mut relations, &keys).unwrap()),
            [
                (true, vec![text("1"), CdcValue::Null]),
                (false, vec![text("2"), text("ann")])
            ]
        );
        // An unchanged TOASTed value is left for the state to fill.
        let mut update = vec![b'U'];
        update.extend(7u32.to_be_bytes());
        update.push(b'N');
        update.extend(tuple(&[Some("2"), Some("<unchanged>")]));
        assert_eq!(
            changes(decode_message(&update, &mut relations, &keys).unwrap()),
            [(false, vec![text("2"), CdcValue::Unchanged])]
        );
        let mut delete = vec![b'D'];
        delete.extend(7u32.to_be_bytes());
        delete.push(b'K');
        delete.extend(tuple(&[Some("2"), None]));
        assert_eq!(
            changes(decode_message(&delete, &mut relations, &keys).unwrap()),
            [(true, vec![text("2"), CdcValue::Null])]
        );
        // A change of a relation never described, a message cut short: errors.
        let mut unknown = insert.clone();
        unknown[1..5].copy_from_slice(&9u32.to_be_bytes());
        assert!(decode_message(&unknown, &mut relations, &keys).is_err());
        assert!(decode_message(&insert[..insert.len() - 2], &mut relations, &keys).is_err());
    }
}
