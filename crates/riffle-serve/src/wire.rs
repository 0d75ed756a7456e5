//! The Postgres wire protocol in front of the [`Engine`]: simple and extended queries, rows in
//! text or binary as the client asks, errors with their SQLSTATE (the session goes on), and
//! subscriptions streamed as rows or `COPY` data, flushed batch by batch.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures_util::{Sink, SinkExt, stream};
use pgwire::api::auth::noop::NoopStartupHandler;
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::sasl::scram::{ScramAuth, gen_salted_password};
use pgwire::api::auth::{
    AuthSource, DefaultServerParameterProvider, LoginInfo, Password, StartupHandler,
};
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{
    DataRowEncoder, DescribePortalResponse, DescribeStatementResponse, FieldInfo, QueryResponse,
    Response, Tag,
};
use pgwire::api::stmt::{NoopQueryParser, StoredStatement};
use pgwire::api::store::{Entry, PortalStore};
use pgwire::api::{
    ClientInfo, ClientPortalStore, PgWireConnectionState, PgWireServerHandlers, Type,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::copy::{CopyData, CopyDone, CopyOutResponse};
use pgwire::messages::data::DataRow;
use pgwire::messages::extendedquery::Execute;
use pgwire::messages::response::{CommandComplete, ReadyForQuery, TransactionStatus};
use pgwire::messages::simplequery::Query;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use riffle::RowKind;
use riffle_sql::{DataType, Row, Schema, Value};

use crate::cursor::Cursors;
use crate::engine::{Engine, Outcome, StatementError, SubscribeRequest};
use crate::isolation::Transaction;
use crate::view::ChangeBatch;

/// One handler for every connection: the engine's sessions.
pub struct Handlers {
    engine: Arc<Engine>,
    parser: Arc<NoopQueryParser>,
    users: Option<Arc<Users>>,
    /// Connections without TLS are refused.
    tls_only: bool,
    /// A client's certificate (checked by the TLS handshake) must name the user (its CN).
    client_certificates: bool,
    /// The server's certificate (PEM), for SCRAM's channel binding.
    certificate: Option<Arc<Vec<u8>>>,
    /// The cursors of the connection these handlers serve ([`Handlers::for_connection`]).
    cursors: Arc<Cursors>,
    /// The connection's isolation level and open transaction block.
    transaction: Arc<std::sync::Mutex<Transaction>>,
}

/// The users who may connect, with their passwords salted and hashed for SCRAM-SHA-256.
#[derive(Debug)]
pub struct Users {
    passwords: HashMap<String, Password>,
}

/// SCRAM's iterations of the password hash (Postgres' default).
const SCRAM_ITERATIONS: usize = 4096;

impl Users {
    /// The users of `(name, password)`.
    pub fn new(users: &[(String, String)]) -> Users {
        Users {
            passwords: users
                .iter()
                .map(|(name, password)| (name.clone(), salted(password)))
                .collect(),
        }
    }
}

/// `password` with a fresh random salt, hashed as SCRAM stores it.
fn salted(password: &str) -> Password {
    use std::hash::{BuildHasher, Hasher};
    // A salt must differ between users and servers, not be secret: the process's random
    // hasher keys give 16 such bytes.
    let mut salt = Vec::with_capacity(16);
    for i in 0..2u8 {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u8(i);
        salt.extend(hasher.finish().to_le_bytes());
    }
    let hash = gen_salted_password(password, &salt, SCRAM_ITERATIONS);
    Password::new(Some(salt), hash)
}

#[async_trait]
impl AuthSource for Users {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let user = login.user().ok_or(PgWireError::UserNameRequired)?;
        // An unknown user gets a password no one knows: the exchange fails as a wrong
        // password does, not telling which users exist.
        Ok(self
            .passwords
            .get(user)
            .cloned()
            .unwrap_or_else(|| salted(&format!("{:?}", std::time::Instant::now()))))
    }
}

impl Handlers {
    /// Handlers of `engine`'s statements; with `users`, a client authenticates with
    /// SCRAM-SHA-256 as one of them.
    pub fn new(engine: Arc<Engine>, users: Option<Users>) -> Handlers {
        Handlers {
            engine,
            parser: Arc::new(NoopQueryParser::new()),
            users: users.map(Arc::new),
            tls_only: false,
            client_certificates: false,
            certificate: None,
            cursors: Arc::default(),
            transaction: Arc::default(),
        }
    }

    /// Offers SCRAM-SHA-256-PLUS (channel binding to the server's certificate, the first of
    /// `cert_pem`) beside SCRAM-SHA-256: a client that asks for it (`channel_binding=require`)
    /// knows that no one in the middle relayed its password exchange. The PEM must hold a
    /// certificate.
    pub fn channel_binding(mut self, cert_pem: Vec<u8>) -> PgWireResult<Handlers> {
        use rustls_pki_types::CertificateDer;
        use rustls_pki_types::pem::PemObject;
        // (pgwire indexes the first certificate without looking.)
        if CertificateDer::pem_slice_iter(&cert_pem).next().is_none() {
            return Err(PgWireError::ApiError("the PEM holds no certificate".into()));
        }
        ScramAuth::new(Arc::new(Users::new(&[]))).configure_certificate(&cert_pem)?;
        self.certificate = Some(Arc::new(cert_pem));
        Ok(self)
    }

    /// Refuses, when `only`, a connection that did not start TLS (the server has a
    /// certificate: passwords and rows never cross the network in clear).
    pub fn tls_only(mut self, only: bool) -> Handlers {
        self.tls_only = only;
        self
    }

    /// Whether, when `required`, a client connects only as the user its certificate names
    /// (its subject's common name; the TLS handshake checked the certificate against the
    /// server's CAs of client certificates), as Postgres' `cert` authentication does.
    pub fn client_certificates(mut self, required: bool) -> Handlers {
        self.client_certificates = required;
        self
    }

    /// The handlers of one new connection: the same engine and users, its own cursors.
    pub fn for_connection(&self) -> Handlers {
        Handlers {
            cursors: Arc::default(),
            transaction: Arc::default(),
            ..self.share()
        }
    }

    fn transaction(&self) -> std::sync::MutexGuard<'_, Transaction> {
        self.transaction.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `statement` off the async threads (a query over a view may run a small job).
    async fn run(&self, statement: String) -> Result<Outcome, StatementError> {
        if let Some(cursor) = crate::cursor::parse(&statement) {
            return self.cursors.execute(&self.engine, cursor?).await;
        }
        if let Some(outcome) = self.transaction().statement(&statement) {
            return outcome;
        }
        let (engine, transaction) = (self.engine.clone(), self.transaction.clone());
        tokio::task::spawn_blocking(move || {
            let mut transaction = transaction.lock().unwrap_or_else(|e| e.into_inner());
            engine.execute_in(&statement, transaction.snapshot())
        })
        .await
        .unwrap_or_else(|e| Err(panicked(e)))
    }

    /// The columns `statement`'s rows will have, in `format` (none: it returns no rows).
    async fn described_fields(
        &self,
        statement: &StoredStatement<String>,
        format: &Format,
    ) -> PgWireResult<Vec<FieldInfo>> {
        if let Some(Ok(crate::cursor::Statement::Fetch { name, .. })) =
            crate::cursor::parse(&statement.statement)
        {
            return Ok(self
                .cursors
                .schema(&name)
                .await
                .map_or_else(Vec::new, |s| fields(&s, format)));
        }
        let engine = self.engine.clone();
        let text = statement.statement.clone();
        let schema = tokio::task::spawn_blocking(move || engine.describe(&text))
            .await
            .unwrap_or_else(|e| Err(panicked(e)))
            .map_err(|e| PgWireError::UserError(Box::new(error_info(&e))))?;
        Ok(schema.map_or_else(Vec::new, |s| fields(&s, format)))
    }
}

impl Handlers {
    /// The types of a statement's parameters: what the client declared, else what the
    /// statement tells (the column a parameter is compared with), else text.
    fn parameter_types(&self, statement: &StoredStatement<String>) -> Vec<Type> {
        let inferred = crate::engine::parameter_types(&statement.statement, &self.engine.schemas());
        (0..inferred.len().max(statement.parameter_types.len()))
            .map(|i| {
                let declared = statement.parameter_types.get(i).cloned().flatten();
                declared
                    .filter(|t| *t != Type::UNKNOWN)
                    .or_else(|| inferred.get(i).cloned().flatten().map(|t| pg_type(&t)))
                    .unwrap_or(Type::TEXT)
            })
            .collect()
    }
}

/// Parameter `i` of `portal`, of type `ty`, as a SQL literal (decoded first: a value that is not
/// of its type is refused, never pasted into the statement).
fn literal(portal: &Portal<String>, i: usize, ty: &Type) -> PgWireResult<String> {
    fn quoted(text: &str) -> String {
        format!("'{}'", text.replace('\'', "''"))
    }
    let text = match ty {
        t if *t == Type::INT2 => portal.parameter::<i16>(i, t)?.map(|v| v.to_string()),
        t if *t == Type::INT4 => portal.parameter::<i32>(i, t)?.map(|v| v.to_string()),
        t if *t == Type::INT8 => portal.parameter::<i64>(i, t)?.map(|v| v.to_string()),
        t if *t == Type::FLOAT4 => portal
            .parameter::<f32>(i, t)?
            .map(|v| format!("CAST({:?} AS DOUBLE)", f64::from(v))),
        t if *t == Type::FLOAT8 => portal
            .parameter::<f64>(i, t)?
            .map(|v| format!("CAST({v:?} AS DOUBLE)")),
        t if *t == Type::BOOL => portal
            .parameter::<bool>(i, t)?
            .map(|v| if v { "TRUE" } else { "FALSE" }.to_string()),
        t if *t == Type::NUMERIC => portal
            .parameter::<rust_decimal::Decimal>(i, t)?
            .map(|v| v.to_string()),
        t if *t == Type::TIMESTAMP => portal
            .parameter::<chrono::NaiveDateTime>(i, t)?
            .map(|v| format!("TIMESTAMP '{}'", v.format("%Y-%m-%d %H:%M:%S%.3f"))),
        t if *t == Type::DATE => portal
            .parameter::<chrono::NaiveDate>(i, t)?
            .map(|v| format!("DATE '{}'", v.format("%Y-%m-%d"))),
        _ => portal
            .parameter::<String>(i, &Type::TEXT)?
            .map(|v| quoted(&v)),
    };
    Ok(text.unwrap_or_else(|| "NULL".to_string()))
}

fn panicked(e: tokio::task::JoinError) -> StatementError {
    StatementError {
        code: "XX000",
        message: format!("the statement failed: {e}"),
    }
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        Arc::new(Session(self.clone_handle()))
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        Arc::new(Session(self.clone_handle()))
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        let how = match &self.users {
            None => How::Open(Session(self.clone_handle())),
            Some(users) => {
                let mut scram = ScramAuth::new(users.clone());
                scram.set_iterations(SCRAM_ITERATIONS);
                if let Some(pem) = &self.certificate
                    && let Err(e) = scram.configure_certificate(pem)
                {
                    // Checked at the start: not expected; the exchange goes on without it.
                    tracing::warn!(error = %e, "no channel binding");
                }
                How::Scram(
                    SASLAuthStartupHandler::new(
                        Arc::new(DefaultServerParameterProvider::default()),
                    )
                    .with_scram(scram),
                )
            }
        };
        Arc::new(Startup {
            how,
            tls_only: self.tls_only,
            client_certificates: self.client_certificates,
        })
    }
}

impl Handlers {
    fn clone_handle(&self) -> Arc<Handlers> {
        Arc::new(self.share())
    }

    /// The same handlers, sharing everything (the connection's cursors too).
    fn share(&self) -> Handlers {
        Handlers {
            engine: self.engine.clone(),
            parser: self.parser.clone(),
            users: self.users.clone(),
            tls_only: self.tls_only,
            client_certificates: self.client_certificates,
            certificate: self.certificate.clone(),
            cursors: self.cursors.clone(),
            transaction: self.transaction.clone(),
        }
    }
}

/// How a connection starts: over TLS if the server requires it, then without a password or
/// with SCRAM-SHA-256.
pub struct Startup {
    how: How,
    tls_only: bool,
    client_certificates: bool,
}

/// How a client authenticates.
pub enum How {
    /// Any user, no password (loopback only).
    Open(Session),
    /// A configured user and their password.
    Scram(SASLAuthStartupHandler<DefaultServerParameterProvider>),
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if self.tls_only && !client.is_secure() {
            return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                "FATAL".to_string(),
                "28000".to_string(),
                "this server takes TLS connections only: connect with sslmode=require".to_string(),
            ))));
        }
        if self.client_certificates
            && let PgWireFrontendMessage::Startup(startup) = &message
        {
            let user = startup.parameters.get("user").map(String::as_str);
            let named = (client.client_certificates())
                .and_then(|certs| certs.first())
                .and_then(|cert| x509_certificate::X509Certificate::from_der(cert).ok())
                .and_then(|cert| cert.subject_common_name());
            if user.is_none() || named.as_deref() != user {
                return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                    "FATAL".to_string(),
                    "28000".to_string(),
                    format!(
                        "certificate authentication failed for user {:?}: the client certificate's common name is {:?}",
                        user.unwrap_or(""),
                        named.unwrap_or_default()
                    ),
                ))));
            }
        }
        match &self.how {
            How::Open(session) => session.on_startup(client, message).await,
            How::Scram(scram) => scram.on_startup(client, message).await,
        }
    }
}

/// The handlers of one connection.
pub struct Session(Arc<Handlers>);

impl NoopStartupHandler for Session {}

fn error_info(e: &StatementError) -> ErrorInfo {
    ErrorInfo::new("ERROR".to_string(), e.code.to_string(), e.message.clone())
}

/// A statement that opens or ends a transaction block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Block {
    /// `BEGIN` or `START TRANSACTION` (its command tag).
    Begin(&'static str),
    /// `COMMIT`/`END` (`commit`), `ROLLBACK`/`ABORT`.
    End { commit: bool },
}

/// Where `statement` stands with the session's transaction block (`status`), by Postgres'
/// rules: `BEGIN` opens one and `COMMIT` or `ROLLBACK` ends it; after an error in a block every
/// other statement fails (`25P02`) until it ends, and `COMMIT` then rolls back. A statement
/// that changes the catalog (`CREATE`, `DROP`, `INSERT INTO` a sink) is refused inside a block
/// (`25001`, as Postgres refuses `CREATE DATABASE` there): it takes effect at once and could
/// not be rolled back. Reads, cursors and `SET` run in blocks.
fn transaction_gate(
    status: TransactionStatus,
    statement: &str,
) -> Result<Option<Block>, StatementError> {
    let words: Vec<String> = statement
        .split(|c: char| c.is_whitespace() || c == ';')
        .filter(|w| !w.is_empty())
        .take(3)
        .map(str::to_ascii_uppercase)
        .collect();
    let word = |i: usize| words.get(i).map(String::as_str).unwrap_or("");
    if matches!(word(0), "SAVEPOINT" | "RELEASE")
        || (word(0) == "ROLLBACK" && matches!(word(1), "TO" | "PREPARED"))
        || matches!(word(0), "PREPARE" if word(1) == "TRANSACTION")
    {
        return Err(StatementError {
            code: "0A000",
            message: format!(
                "{} is not supported: a transaction block here ends with COMMIT or ROLLBACK",
                words.join(" ")
            ),
        });
    }
    let block = match word(0) {
        "BEGIN" => Some(Block::Begin("BEGIN")),
        "START" => Some(Block::Begin("START TRANSACTION")),
        "COMMIT" | "END" => Some(Block::End { commit: true }),
        "ROLLBACK" | "ABORT" => Some(Block::End { commit: false }),
        _ => None,
    };
    match status {
        TransactionStatus::Error if !matches!(block, Some(Block::End { .. })) => {
            Err(StatementError {
                code: "25P02",
                message: "current transaction is aborted, commands ignored until end of transaction block"
                    .into(),
            })
        }
        TransactionStatus::Transaction if matches!(word(0), "CREATE" | "DROP" | "INSERT") => {
            Err(StatementError {
                code: "25001",
                message: format!(
                    "{} {} cannot run inside a transaction block: it changes the catalog at once and could not be rolled back; run it after COMMIT or ROLLBACK",
                    word(0),
                    word(1)
                ),
            })
        }
        _ => Ok(block),
    }
}

/// The response of a statement that opened or ended a transaction block (in `status` before).
fn block_response(block: Block, status: TransactionStatus) -> Response {
    match block {
        Block::Begin(tag) => Response::TransactionStart(Tag::new(tag)),
        Block::End { commit } => {
            Response::TransactionEnd(Tag::new(if commit && status != TransactionStatus::Error {
                "COMMIT"
            } else {
                "ROLLBACK"
            }))
        }
    }
}

/// A statement of a session in transaction `status`: checked against the block
/// ([`transaction_gate`]), run, and answered.
async fn run_in_block(
    handlers: &Handlers,
    status: TransactionStatus,
    statement: String,
    format: &Format,
) -> PgWireResult<Response> {
    let block = match transaction_gate(status, &statement) {
        Ok(block) => block,
        Err(e) => return Ok(Response::Error(Box::new(error_info(&e)))),
    };
    match &block {
        Some(Block::Begin(_)) => handlers.transaction().begin(&statement),
        Some(Block::End { .. }) => handlers.transaction().end(),
        None => {}
    }
    match handlers.run(statement).await {
        Ok(outcome) => match block {
            Some(block) => Ok(block_response(block, status)),
            None => response(outcome, format),
        },
        Err(e) => Ok(Response::Error(Box::new(error_info(&e)))),
    }
}

/// The Postgres type a column of `ty` is sent as.
pub(crate) fn pg_type(ty: &DataType) -> Type {
    match ty {
        DataType::Boolean => Type::BOOL,
        DataType::TinyInt | DataType::SmallInt => Type::INT2,
        DataType::Int => Type::INT4,
        DataType::BigInt => Type::INT8,
        DataType::Float | DataType::Double => Type::FLOAT8,
        DataType::Decimal { .. } => Type::NUMERIC,
        DataType::Varchar => Type::VARCHAR,
        DataType::Date => Type::DATE,
        DataType::Timestamp { .. } => Type::TIMESTAMP,
        DataType::TimestampLtz { .. } => Type::TIMESTAMPTZ,
        DataType::Interval
        | DataType::Row(_)
        | DataType::Array(_)
        | DataType::Map(..)
        | DataType::Null => Type::TEXT,
    }
}

/// The fields of `schema`, in the formats the client asked for.
fn fields(schema: &Schema, format: &Format) -> Vec<FieldInfo> {
    schema
        .fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            FieldInfo::new(
                f.name.clone(),
                None,
                None,
                pg_type(&f.ty),
                format.format_for(i),
            )
        })
        .collect()
}

/// Encodes one value as the column's Postgres type.
fn encode(encoder: &mut DataRowEncoder, value: &Value, ty: &DataType) -> PgWireResult<()> {
    if value.is_null() {
        return encoder.encode_field(&None::<i64>);
    }
    match (pg_type(ty), value) {
        (t, Value::Bool(b)) if t == Type::BOOL => encoder.encode_field(b),
        (t, Value::Int(n)) if t == Type::INT2 => encoder.encode_field(&(*n as i16)),
        (t, Value::Int(n)) if t == Type::INT4 => encoder.encode_field(&(*n as i32)),
        (t, Value::Int(n)) if t == Type::INT8 => encoder.encode_field(n),
        (t, Value::Double(x)) if t == Type::FLOAT8 => encoder.encode_field(x),
        (t, Value::Int(n)) if t == Type::FLOAT8 => encoder.encode_field(&(*n as f64)),
        (t, Value::Decimal(d)) if t == Type::NUMERIC => {
            let scale = u32::from(d.scale);
            match rust_decimal::Decimal::try_from_i128_with_scale(d.unscaled, scale) {
                Ok(d) => encoder.encode_field(&d),
                Err(_) => encoder.encode_field(&d.to_f64()),
            }
        }
        (t, Value::Date(days)) if t == Type::DATE => {
            let date = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).and_then(|epoch| {
                epoch.checked_add_signed(chrono::TimeDelta::days(i64::from(*days)))
            });
            encoder.encode_field(&date)
        }
        (t, Value::Timestamp(ms)) if t == Type::TIMESTAMP => {
            let time = chrono::DateTime::from_timestamp_millis(*ms).map(|t| t.naive_utc());
            encoder.encode_field(&time)
        }
        (t, Value::Timestamp(ms)) if t == Type::TIMESTAMPTZ => {
            encoder.encode_field(&chrono::DateTime::from_timestamp_millis(*ms))
        }
        _ => encoder.encode_field(&riffle_sql::format::display(value, ty)),
    }
}

fn data_row(
    encoder: &mut DataRowEncoder,
    row: &Row,
    schema: &Schema,
    prefix: &[Value],
    prefix_types: &[DataType],
) -> PgWireResult<DataRow> {
    for (value, ty) in prefix.iter().zip(prefix_types) {
        encode(encoder, value, ty)?;
    }
    for (value, field) in row.0.iter().zip(&schema.fields) {
        encode(encoder, value, &field.ty)?;
    }
    Ok(encoder.take_row())
}

/// The response of a statement's outcome (not a subscription).
fn response(outcome: Outcome, format: &Format) -> PgWireResult<Response> {
    match outcome {
        Outcome::Done(tag) => Ok(Response::Execution(Tag::new(&tag))),
        Outcome::Rows { schema, rows } => {
            let fields = Arc::new(fields(&schema, format));
            let mut encoder = DataRowEncoder::new(fields.clone());
            let encoded: Vec<PgWireResult<DataRow>> = rows
                .iter()
                .map(|row| data_row(&mut encoder, row, &schema, &[], &[]))
                .collect();
            Ok(Response::Query(QueryResponse::new(
                fields,
                stream::iter(encoded),
            )))
        }
        Outcome::Subscribe(_) => Ok(Response::Error(Box::new(ErrorInfo::new(
            "ERROR".into(),
            "0A000".into(),
            "SUBSCRIBE streams over the simple query protocol (psql, simple_query), or COPY (SUBSCRIBE v) TO STDOUT".into(),
        )))),
    }
}

/// How long a subscription `WITH (PROGRESS)` goes without a row: after that long without a
/// change, a progress row repeats the last progress.
pub const QUIET_PROGRESS_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// What a change did, as a subscription's `op` column says it: `insert`, `delete`, and for a
/// keyed view an update's new row as `update` (its old row was the key's previous one).
fn op_text(op: RowKind, keyed: bool) -> &'static str {
    match op {
        RowKind::Insert => "insert",
        RowKind::UpdateAfter if keyed => "update",
        RowKind::UpdateAfter => "insert",
        RowKind::UpdateBefore | RowKind::Delete => "delete",
    }
}

/// The rows a subscription sends for `batch`: each change with its position in the view's
/// changelog (its `progress`: a token to resume after it), but a keyed view's `-U` (its `+U`
/// follows as `update`).
pub(crate) fn subscription_rows(
    batch: &ChangeBatch,
    keyed: bool,
) -> impl Iterator<Item = (u64, &'static str, &Row)> {
    let start = batch.start();
    batch
        .changes
        .iter()
        .zip(start + 1..)
        .filter(move |(c, _)| !(keyed && c.op == RowKind::UpdateBefore))
        .map(move |(c, progress)| (progress, op_text(c.op, keyed), &c.row))
}

/// One line of `COPY` text: tab-separated, `\N` for NULL, backslash escapes.
fn copy_line(values: impl Iterator<Item = String>) -> Vec<u8> {
    let mut line = String::new();
    for (i, value) in values.enumerate() {
        if i > 0 {
            line.push('\t');
        }
        line.push_str(&value);
    }
    line.push('\n');
    line.into_bytes()
}

fn copy_text(value: &Value, ty: &DataType) -> String {
    if value.is_null() {
        return "\\N".into();
    }
    let text = riffle_sql::format::display(value, ty);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}

/// Streams a subscription to the client: the view's rows, then its changes batch by batch
/// (each flushed), until the client goes away or falls too far behind.
async fn stream_subscription<C>(
    client: &mut C,
    request: SubscribeRequest,
    describe: bool,
) -> PgWireResult<()>
where
    C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let SubscribeRequest {
        view,
        copy,
        options,
    } = request;
    let mut subscription = match view.subscribe(&options) {
        Ok(subscription) => subscription,
        Err(e) => {
            let info = ErrorInfo::new("ERROR".into(), e.code.into(), e.message);
            client
                .send(PgWireBackendMessage::ErrorResponse(info.into()))
                .await?;
            return Ok(());
        }
    };
    let keyed = view.key.is_some();
    let schema = view.subscription_schema();
    let prefix_types: Vec<DataType> = schema.fields[..2].iter().map(|f| f.ty.clone()).collect();
    let fields = Arc::new(fields(&schema, &Format::UnifiedText));
    let mut encoder = DataRowEncoder::new(fields.clone());
    // `COPY` text of rows: one message for many rows (a COPY's messages need not follow rows).
    let copy_lines = |rows: &mut dyn Iterator<Item = (u64, &str, &Row)>| -> bytes::Bytes {
        let mut text = Vec::new();
        for (progress, op, row) in rows {
            let values = [Value::Int(progress as i64), Value::string(op)];
            text.extend(copy_line(
                values
                    .iter()
                    .zip(&prefix_types)
                    .map(|(v, t)| copy_text(v, t))
                    .chain(
                        row.0
                            .iter()
                            .zip(&view.schema.fields)
                            .map(|(v, f)| copy_text(v, &f.ty)),
                    ),
            ));
        }
        text.into()
    };
    if copy {
        let formats = vec![0; schema.len()];
        client
            .send(PgWireBackendMessage::CopyOutResponse(CopyOutResponse::new(
                0,
                schema.len() as i16,
                formats,
            )))
            .await?;
    } else if describe {
        client
            .send(PgWireBackendMessage::RowDescription(
                pgwire::messages::data::RowDescription::new(
                    fields.iter().map(Into::into).collect(),
                ),
            ))
            .await?;
    }
    let mut sent = subscription.snapshot.len();
    let snapshot_progress = subscription.progress;
    // A durable subscription's rows wait for a checkpoint holding them.
    let snapshot_ready = subscription.ready_to_send(snapshot_progress).await;
    if !snapshot_ready {
        subscription.snapshot.clear();
        sent = 0;
    }
    if copy {
        for chunk in subscription.snapshot.chunks(1024) {
            let text = copy_lines(&mut chunk.iter().map(|row| (snapshot_progress, "insert", row)));
            client
                .feed(PgWireBackendMessage::CopyData(CopyData::new(text)))
                .await?;
        }
    } else {
        for row in &subscription.snapshot {
            let prefix = [
                Value::Int(snapshot_progress as i64),
                Value::string("insert"),
            ];
            let row = data_row(&mut encoder, row, &view.schema, &prefix, &prefix_types)?;
            client.feed(PgWireBackendMessage::DataRow(row)).await?;
        }
    }
    // `WITH (PROGRESS)`: a row saying that everything up to a progress was sent.
    let nulls = Row(vec![Value::Null; view.schema.len()]);
    let progress_row = |encoder: &mut DataRowEncoder, progress: u64| {
        if copy {
            let line = copy_lines(&mut std::iter::once((progress, "progress", &nulls)));
            return Ok::<_, PgWireError>(PgWireBackendMessage::CopyData(CopyData::new(line)));
        }
        let prefix = [Value::Int(progress as i64), Value::string("progress")];
        let row = data_row(encoder, &nulls, &view.schema, &prefix, &prefix_types)?;
        Ok(PgWireBackendMessage::DataRow(row))
    };
    if snapshot_ready && options.progress {
        let message = progress_row(&mut encoder, snapshot_progress)?;
        client.feed(message).await?;
    }
    client.flush().await?;
    tracing::debug!(view = %view.name, progress = snapshot_progress, snapshot_ready, "subscription starts");
    // Everything up to it was sent.
    let mut sent_up_to = snapshot_progress;
    loop {
        if !snapshot_ready {
            break;
        }
        let next = if options.progress {
            match tokio::time::timeout(QUIET_PROGRESS_INTERVAL, subscription.next()).await {
                Ok(next) => next,
                Err(_) => {
                    // No change for a while: a progress row says that nothing came since (and
                    // a client gone away is found out here, not at the next change).
                    let message = progress_row(&mut encoder, sent_up_to)?;
                    client.send(message).await?;
                    continue;
                }
            }
        } else {
            subscription.next().await
        };
        let Some(batch) = next else {
            break;
        };
        sent_up_to = batch.progress;
        if copy {
            // Encoded once for every subscriber of the view.
            let text = batch
                .copy_text
                .get_or_init(|| copy_lines(&mut subscription_rows(&batch, keyed)));
            sent += subscription_rows(&batch, keyed).count();
            client
                .feed(PgWireBackendMessage::CopyData(CopyData::new(text.clone())))
                .await?;
        } else {
            for (progress, op, row) in subscription_rows(&batch, keyed) {
                let prefix = [Value::Int(progress as i64), Value::string(op)];
                let row = data_row(&mut encoder, row, &view.schema, &prefix, &prefix_types)?;
                client.feed(PgWireBackendMessage::DataRow(row)).await?;
                sent += 1;
            }
        }
        if options.progress {
            let message = progress_row(&mut encoder, batch.progress)?;
            client.feed(message).await?;
        }
        client.flush().await?;
    }
    // The view was dropped, or this subscriber fell behind, or the view went back to a
    // checkpoint.
    if let Some(reason) = subscription.cut_off() {
        client
            .send(PgWireBackendMessage::ErrorResponse(
                ErrorInfo::new("ERROR".into(), reason.code.into(), reason.message).into(),
            ))
            .await?;
    } else {
        if copy {
            client
                .feed(PgWireBackendMessage::CopyDone(CopyDone::new()))
                .await?;
        }
        let tag = if copy { "COPY" } else { "SUBSCRIBE" };
        client
            .feed(PgWireBackendMessage::CommandComplete(CommandComplete::new(
                format!("{tag} {sent}"),
            )))
            .await?;
    }
    Ok(())
}

#[async_trait]
impl SimpleQueryHandler for Session {
    async fn on_query<C>(&self, client: &mut C, query: Query) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // A subscription answers for as long as it lasts, flushing as changes come: it is
        // sent here rather than as one response.
        let statements = self.0.engine.split(&query.query).unwrap_or_default();
        let status = client.transaction_status();
        if let [only] = statements.as_slice()
            && status != TransactionStatus::Error
            && let Some(Ok(request)) = self.0.engine.subscription(only)
        {
            client.set_state(PgWireConnectionState::QueryInProgress);
            let result = stream_subscription(client, request, true).await;
            client.set_state(PgWireConnectionState::ReadyForQuery);
            result?;
            client
                .send(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(
                    status,
                )))
                .await?;
            return Ok(());
        }
        self._on_query(client, query).await
    }

    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statements = match self.0.engine.split(query) {
            Ok(statements) => statements,
            Err(e) => return Ok(vec![Response::Error(Box::new(error_info(&e)))]),
        };
        let mut responses = Vec::new();
        let mut status = client.transaction_status();
        for statement in statements {
            let response = run_in_block(&self.0, status, statement, &Format::UnifiedText).await?;
            status = match &response {
                Response::TransactionStart(_) => status.to_in_transaction_state(),
                Response::TransactionEnd(_) => status.to_idle_state(),
                _ => status,
            };
            let failed = matches!(response, Response::Error(_));
            responses.push(response);
            if failed {
                // Postgres stops a multi-statement query at its first error.
                break;
            }
        }
        Ok(responses)
    }
}

#[async_trait]
impl ExtendedQueryHandler for Session {
    type Statement = String;
    type QueryParser = NoopQueryParser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        self.0.parser.clone()
    }

    async fn on_execute<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // A subscription streams for as long as it lasts, flushing as changes come (its row
        // description went out with Describe).
        let name = message.name.as_deref().unwrap_or(pgwire::api::DEFAULT_NAME);
        let statement = match client.portal_store().get_portal(name) {
            Some(Entry::Value(portal)) => Some(portal.statement.statement.clone()),
            _ => None,
        };
        if let Some(statement) = statement
            && matches!(client.state(), PgWireConnectionState::ReadyForQuery)
            && client.transaction_status() != TransactionStatus::Error
            && let Some(Ok(request)) = self.0.engine.subscription(&statement)
        {
            client.set_state(PgWireConnectionState::QueryInProgress);
            let result = stream_subscription(client, request, false).await;
            client.set_state(PgWireConnectionState::ReadyForQuery);
            return result;
        }
        self._on_execute(client, message).await
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Self::Statement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statement = if portal.parameters.is_empty() {
            portal.statement.statement.clone()
        } else {
            let types = self.0.parameter_types(&portal.statement);
            let values = (0..portal.parameters.len())
                .map(|i| literal(portal, i, types.get(i).unwrap_or(&Type::TEXT)))
                .collect::<PgWireResult<Vec<String>>>()?;
            match crate::engine::bind_parameters(&portal.statement.statement, &values) {
                Ok(statement) => statement,
                Err(e) => return Ok(Response::Error(Box::new(error_info(&e)))),
            }
        };
        let status = client.transaction_status();
        run_in_block(&self.0, status, statement, &portal.result_column_format).await
    }

    async fn do_describe_statement<C>(
        &self,
        _client: &mut C,
        statement: &StoredStatement<Self::Statement>,
    ) -> PgWireResult<DescribeStatementResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        Ok(DescribeStatementResponse::new(
            self.0.parameter_types(statement),
            self.0
                .described_fields(statement, &Format::UnifiedBinary)
                .await?,
        ))
    }

    async fn do_describe_portal<C>(
        &self,
        _client: &mut C,
        portal: &Portal<Self::Statement>,
    ) -> PgWireResult<DescribePortalResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        Ok(DescribePortalResponse::new(
            self.0
                .described_fields(&portal.statement, &portal.result_column_format)
                .await?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transaction_block_follows_postgres_rules() {
        use TransactionStatus::{Error, Idle, Transaction};
        let code = |status, statement| transaction_gate(status, statement).unwrap_err().code;
        assert_eq!(
            transaction_gate(Idle, "begin;"),
            Ok(Some(Block::Begin("BEGIN")))
        );
        assert_eq!(
            transaction_gate(Idle, "START TRANSACTION READ ONLY"),
            Ok(Some(Block::Begin("START TRANSACTION")))
        );
        assert_eq!(transaction_gate(Transaction, "SELECT 1"), Ok(None));
        assert_eq!(transaction_gate(Transaction, "FETCH 10 c"), Ok(None));
        // After an error only the end of the block runs, and COMMIT rolls back.
        assert_eq!(code(Error, "SELECT 1"), "25P02");
        assert_eq!(
            transaction_gate(Error, "COMMIT"),
            Ok(Some(Block::End { commit: true }))
        );
        assert!(matches!(
            block_response(Block::End { commit: true }, Error),
            Response::TransactionEnd(tag) if tag == Tag::new("ROLLBACK")
        ));
        assert!(matches!(
            block_response(Block::End { commit: true }, Transaction),
            Response::TransactionEnd(tag) if tag == Tag::new("COMMIT")
        ));
        // Catalog changes run outside blocks only; savepoints are refused.
        assert_eq!(
            code(Transaction, "CREATE MATERIALIZED VIEW v AS SELECT 1"),
            "25001"
        );
        assert_eq!(code(Transaction, "drop table t"), "25001");
        assert_eq!(transaction_gate(Idle, "CREATE TABLE t (a INT)"), Ok(None));
        assert_eq!(code(Transaction, "SAVEPOINT a"), "0A000");
        assert_eq!(code(Transaction, "ROLLBACK TO SAVEPOINT a"), "0A000");
    }

    #[test]
    fn copy_text_escapes_what_would_split_a_line() {
        assert_eq!(
            copy_text(&Value::string("a\tb\\c\nd"), &DataType::Varchar),
            "a\\tb\\\\c\\nd"
        );
        assert_eq!(copy_text(&Value::Null, &DataType::BigInt), "\\N");
        assert_eq!(
            copy_line(["1".to_string(), "x".to_string()].into_iter()),
            b"1\tx\n"
        );
    }

    #[test]
    fn a_keyed_views_update_is_one_row_and_an_unkeyed_views_two() {
        let changes = vec![
            riffle::Change::new(RowKind::UpdateBefore, Row(vec![Value::Int(1)])),
            riffle::Change::new(RowKind::UpdateAfter, Row(vec![Value::Int(2)])),
        ];
        // The batch's changes are the view's 11th and 12th.
        let batch = ChangeBatch::new(12, changes);
        let keyed: Vec<_> = subscription_rows(&batch, true)
            .map(|(progress, op, _)| (progress, op))
            .collect();
        assert_eq!(keyed, [(12, "update")]);
        let unkeyed: Vec<_> = subscription_rows(&batch, false)
            .map(|(progress, op, _)| (progress, op))
            .collect();
        assert_eq!(unkeyed, [(11, "delete"), (12, "insert")]);
    }
}
