//! What a session's statements do, apart from the wire: the catalog of tables, views and
//! materialized views (kept in `<data-dir>/catalog.sql` and replayed at start), the view jobs,
//! and reads of views (a point lookup by the view's key, or the query evaluated over the
//! view's rows).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use riffle::JobMonitor;
use riffle::checkpoint::RestoreFrom;
use riffle::sink::CollectSink;
use riffle::source::shared::SourceHub;
use riffle::{EnvConfig, RowKind, StreamEnv};
use riffle_sql::parse::{ColumnDef, ProgramChangelog, Statement, TableDef};
use riffle_sql::plan::{Catalog, ChangelogMode, Plan, TimeAttribute};
use riffle_sql::{Row, Schema, SqlError, Value};
use sqlparser::ast;

use crate::isolation::BlockSnapshot;
use crate::pg_catalog::CatalogQuery as Parsed;
use crate::view::{Materialize, SubscribeOptions, ViewTable};
use crate::view_source::ViewSource;

/// An error of a statement, with the SQLSTATE a Postgres client gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatementError {
    /// The SQLSTATE (`42P01`: no such table, `0A000`: not supported, `42601`: syntax, ...).
    pub code: &'static str,
    /// What went wrong.
    pub message: String,
}

impl StatementError {
    pub(crate) fn new(code: &'static str, message: impl Into<String>) -> StatementError {
        StatementError {
            code,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for StatementError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (SQLSTATE {})", self.message, self.code)
    }
}

impl From<SqlError> for StatementError {
    fn from(e: SqlError) -> StatementError {
        let code = if ["no such table", "unknown table", "no table or view"]
            .iter()
            .any(|m| e.message.contains(m))
        {
            "42P01"
        } else if e.message.contains("not supported") {
            "0A000"
        } else {
            "42000"
        };
        StatementError::new(code, e.to_string())
    }
}

type Result<T> = std::result::Result<T, StatementError>;

/// What a statement gave back.
pub enum Outcome {
    /// Done; the command tag (`CREATE MATERIALIZED VIEW`, `SET`, ...).
    Done(String),
    /// Rows of a query or a `SHOW`.
    Rows {
        /// Their columns.
        schema: Schema,
        /// The rows.
        rows: Vec<Row>,
    },
    /// `SUBSCRIBE v` (`copy`: inside `COPY (..) TO STDOUT`).
    Subscribe(SubscribeRequest),
}

/// A `SUBSCRIBE` statement, read: which view, how it goes out, and its options.
#[derive(Clone)]
pub struct SubscribeRequest {
    /// The view.
    pub view: Arc<ViewTable>,
    /// Whether the changes go out as `COPY` data (psql prints them as they come).
    pub copy: bool,
    /// `WITH (..)` and `AS OF ..`.
    pub options: SubscribeOptions,
}

/// How `riffle serve` runs its views.
#[derive(Clone)]
pub struct EngineConfig {
    /// Where the catalog and each view's checkpoints and state live.
    pub data_dir: PathBuf,
    /// The engine settings of every view's job (parallelism, state backend, checkpoint
    /// interval); the job name, checkpoint storage, restore, dead-letter and state directories
    /// are set per view, under the data directory.
    pub env: EnvConfig,
    /// How many changes a subscriber may fall behind before it is cut off.
    pub max_subscriber_lag: usize,
    /// How many of its latest changes each view keeps for subscribers that resume (`AS OF`).
    pub retained_changes: usize,
    /// Whether the views and sinks over one table read its source once, together.
    pub shared_sources: bool,
    /// Where each view's and sink's job serves its web UI, REST API and metrics (`None`: not
    /// served).
    pub web: Option<riffle_web::WebConfig>,
}

/// A materialized view: its query, its rows and its job.
struct View {
    query: String,
    table: Arc<ViewTable>,
    /// `Some` when its query only appends rows: then other views read it as an append-only
    /// table, with its query's time attribute (if any) as theirs (windows over it).
    appends: Option<Option<TimeAttribute>>,
    job: Option<ViewJob>,
    /// The views its query reads (their changes, as a view's reader).
    reads: Vec<String>,
}

struct ViewJob {
    monitor: JobMonitor,
    thread: JoinHandle<riffle::Result<()>>,
    /// Its web UI and REST API, while it runs.
    web: Option<riffle_web::WebServer>,
}

impl ViewJob {
    /// Cancels the job and waits for its thread (its state stays in its checkpoints).
    fn stop(self) {
        self.monitor.cancel();
        let _ = self.thread.join();
    }

    /// Where its web UI is, if it has one.
    fn web_url(&self) -> Option<String> {
        self.web.as_ref().map(riffle_web::WebServer::url)
    }
}

/// A sink: a job writing a query's rows (the changes of the views it reads) into a table's
/// connector, until it is dropped.
struct Sink {
    /// The statement that made it (`CREATE SINK ..` or `INSERT INTO ..`).
    statement: String,
    /// Where the rows go.
    table: TableDef,
    /// What goes there (as parsed from the statement: the catalog replays the statement).
    query: ast::Query,
    job: Option<ViewJob>,
    /// The views its query reads.
    reads: Vec<String>,
}

/// Drops the pins that `reader` holds on the retained changes of the views it `reads`.
fn unpin(views: &BTreeMap<String, View>, reads: &[String], reader: &str) {
    for read in reads {
        if let Some(view) = views.get(read) {
            view.table.unpin(reader);
        }
    }
}

struct State {
    catalog: Catalog,
    views: BTreeMap<String, View>,
    sinks: BTreeMap<String, Sink>,
    /// The users who may connect, as `pg_catalog.pg_roles` lists them.
    roles: Vec<String>,
    /// The sources of the tables that views and sinks read, each read once for all of them.
    sources: SharedSources,
}

/// The shared sources of the catalog's tables ([`riffle::source::shared`]), by table: the
/// views and sinks reading one table read its splits once. A table dropped and made again
/// with another definition gets a source of its own.
#[derive(Default)]
struct SharedSources {
    enabled: bool,
    sources: Mutex<HashMap<String, TableSource>>,
}

/// A table's shared source, and the definition of the table it reads (columns and options).
type TableSource = (String, Arc<SourceHub<Row>>);

impl SharedSources {
    /// The shared source of `table`, when its connector can be shared: an append-only table
    /// read from Kafka, files or a generator (a changelog's reader normalizes it by key in
    /// the reading job's state, which is not shared).
    fn of(&self, table: &TableDef) -> Option<Arc<SourceHub<Row>>> {
        if !self.enabled
            || table.rows.is_some()
            || table.changes.is_some()
            || riffle_sql::connectors::is_changelog(table)
            || !matches!(
                table.options.get("connector").map(String::as_str),
                Some("kafka" | "filesystem" | "datagen" | "nexmark")
            )
        {
            return None;
        }
        let definition = format!("{:?} {:?}", table.columns, table.options);
        let mut sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        match sources.get(&table.name) {
            Some((made_for, hub)) if *made_for == definition => Some(hub.clone()),
            _ => {
                let hub = SourceHub::new();
                sources.insert(table.name.clone(), (definition, hub.clone()));
                Some(hub)
            }
        }
    }
}

/// The server's catalog and views, shared by every session.
pub struct Engine {
    config: EngineConfig,
    state: Mutex<State>,
}

const CATALOG_FILE: &str = "catalog.sql";
/// How long a start waits for the views to be restored before it serves anyway.
const RESTORE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);
/// The connector name a view's rows carry when a query reads them as a table.
const VIEW_CONNECTOR: &str = "riffle-view";

impl Engine {
    /// The engine of `config`'s data directory: the statements of its catalog are replayed and
    /// the views' jobs start again from their latest checkpoints.
    pub fn open(config: EngineConfig, catalog: Catalog) -> riffle::Result<Engine> {
        std::fs::create_dir_all(&config.data_dir).map_err(|e| {
            riffle::Error::io(
                format!(
                    "cannot create the data directory `{}`",
                    config.data_dir.display()
                ),
                e,
            )
        })?;
        let shared_sources = config.shared_sources;
        let engine = Engine {
            config,
            state: Mutex::new(State {
                catalog,
                views: BTreeMap::new(),
                sinks: BTreeMap::new(),
                roles: vec!["riffle".to_string()],
                sources: SharedSources {
                    enabled: shared_sources,
                    ..SharedSources::default()
                },
            }),
        };
        let path = engine.config.data_dir.join(CATALOG_FILE);
        if path.exists() {
            let script = std::fs::read_to_string(&path)
                .map_err(|e| riffle::Error::io(format!("cannot read `{}`", path.display()), e))?;
            let statements = riffle_sql::parse::split_statements(&script).map_err(|e| {
                riffle::Error::config("--data-dir", format!("`{}`: {e}", path.display()))
            })?;
            for statement in statements {
                engine.run(&statement, true, None).map_err(|e| {
                    riffle::Error::config(
                        "--data-dir",
                        format!("`{}`: `{statement}`: {e}", path.display()),
                    )
                })?;
            }
            let mut state = engine.lock();
            let names: Vec<String> = state.views.keys().cloned().collect();
            for name in &names {
                engine
                    .start_view(&mut state, name)
                    .map_err(|e| riffle::Error::config("--data-dir", e.to_string()))?;
            }
            let sinks: Vec<String> = state.sinks.keys().cloned().collect();
            for name in &sinks {
                engine
                    .start_sink(&mut state, name)
                    .map_err(|e| riffle::Error::config("--data-dir", e.to_string()))?;
            }
            let readers: Vec<String> = (names.iter().cloned())
                .chain(sinks.iter().map(|s| sink_reader(s)))
                .collect();
            // Clients come in once every view is back (restored from its checkpoint, or
            // started afresh): none reads a view still empty from the restart.
            let tables: Vec<Arc<ViewTable>> =
                state.views.values().map(|v| v.table.clone()).collect();
            drop(state);
            let deadline = std::time::Instant::now() + RESTORE_WAIT;
            for table in tables {
                while !table.is_ready() && std::time::Instant::now() < deadline {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                if !table.is_ready() {
                    tracing::warn!(view = %table.name, "the view is not restored yet; it reads empty until it is");
                }
                // A view dropped just before a crash may still pin this one's changes in its
                // checkpoint: only views that exist do.
                table.keep_pins(|reader| readers.iter().any(|r| r == reader));
            }
        }
        Ok(engine)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The users who may connect (the server's users file; `riffle` alone when any user may):
    /// what `pg_catalog.pg_roles` and psql's `\du` list.
    pub fn set_roles(&self, roles: Vec<String>) {
        self.lock().roles = roles;
    }

    /// Runs one statement of a session.
    pub fn execute(&self, statement: &str) -> Result<Outcome> {
        self.run(statement, false, None)
    }

    /// Runs one statement of a session's transaction block whose reads see each view as
    /// `snapshot` holds it (`REPEATABLE READ`: see [`crate::isolation`]).
    pub fn execute_in(
        &self,
        statement: &str,
        snapshot: Option<&mut BlockSnapshot>,
    ) -> Result<Outcome> {
        self.run(statement, false, snapshot)
    }

    /// The statements of a query string (several may come in one simple query).
    pub fn split(&self, text: &str) -> Result<Vec<String>> {
        riffle_sql::parse::split_statements(text)
            .map_err(|e| StatementError::new("42601", e.to_string()))
    }

    fn run(
        &self,
        text: &str,
        replaying: bool,
        snapshot: Option<&mut BlockSnapshot>,
    ) -> Result<Outcome> {
        let words: Vec<String> = text
            .split_whitespace()
            .take(6)
            .map(|w| w.trim_end_matches(';').to_ascii_uppercase())
            .collect();
        let word = |i: usize| words.get(i).map(String::as_str).unwrap_or("");
        match (word(0), word(1), word(2)) {
            ("CREATE", "MATERIALIZED", "VIEW") => self.create_view(text, replaying),
            ("DROP", "MATERIALIZED", "VIEW") => self.drop_view(text, replaying),
            ("SHOW", "MATERIALIZED", "VIEWS") => Ok(self.show_views()),
            ("CREATE", "SINK", _) => self.create_sink(text, replaying),
            ("DROP", "SINK", _) => self.drop_sink(text, replaying),
            ("SHOW", "SINKS", _) => Ok(self.show_sinks()),
            ("SHOW", "SOURCES", _) => Ok(self.show_sources()),
            ("SHOW", "TABLES", _) => Ok(self.show_tables()),
            ("DROP", "TABLE" | "VIEW", _) => self.drop_definition(text, replaying),
            _ if subscribes(text).is_some() => Ok(Outcome::Subscribe(
                self.subscription(text).expect("a subscription")?,
            )),
            ("BEGIN" | "START" | "COMMIT" | "END" | "ROLLBACK" | "DISCARD" | "RESET", ..) => {
                Ok(Outcome::Done(word(0).to_string()))
            }
            // A Postgres client's session settings (`SET extra_float_digits = 3`): accepted.
            ("SET", key, _) if !key.starts_with('\'') => Ok(Outcome::Done("SET".into())),
            _ => self.sql(text, replaying, snapshot),
        }
    }

    /// Flink's statements: DDL into the catalog, queries read views.
    fn sql(
        &self,
        text: &str,
        replaying: bool,
        snapshot: Option<&mut BlockSnapshot>,
    ) -> Result<Outcome> {
        if crate::pg_catalog::is_read_by(text) {
            return match crate::pg_catalog::parse(text)? {
                Parsed::Query(query) => self.query(*query, true, snapshot),
                Parsed::Empty(schema) => Ok(Outcome::Rows {
                    schema,
                    rows: Vec::new(),
                }),
            };
        }
        let statement = riffle_sql::parse::parse_statement(text)?;
        match statement {
            Statement::Query(query) => self.query(*query, false, snapshot),
            Statement::Explain(query) => {
                let catalog = self.lock().catalog.clone();
                let plan = catalog.plan_query(&query)?;
                Ok(Outcome::Rows {
                    schema: Schema::new(vec![riffle_sql::Field::new(
                        "plan",
                        riffle_sql::DataType::Varchar,
                    )]),
                    rows: plan
                        .explain()
                        .lines()
                        .map(|l| Row(vec![Value::string(l)]))
                        .collect(),
                })
            }
            Statement::Insert { table, query } => self.insert(&table, &query, text, replaying),
            statement => {
                let mut state = self.lock();
                if let Statement::CreateTable(t) = &statement
                    && state.views.contains_key(&t.name)
                {
                    return Err(StatementError::new(
                        "42P07",
                        format!("`{}` is a materialized view", t.name),
                    ));
                }
                let done = state.catalog.define(statement)?;
                if !replaying {
                    self.log(text)?;
                }
                Ok(Outcome::Done(match done {
                    riffle_sql::Executed::Set(..) => "SET".into(),
                    _ => format!("CREATE {}", words_after_create(text)),
                }))
            }
        }
    }

    fn log(&self, statement: &str) -> Result<()> {
        let path = self.config.data_dir.join(CATALOG_FILE);
        let write = || -> std::io::Result<()> {
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)?;
            file.write_all(format!("{};\n", statement.trim().trim_end_matches(';')).as_bytes())?;
            file.sync_data()
        };
        write().map_err(|e| {
            StatementError::new("58030", format!("cannot write `{}`: {e}", path.display()))
        })
    }

    fn create_view(&self, text: &str, replaying: bool) -> Result<Outcome> {
        let (name, query, if_not_exists) = parse_create_view(text)?;
        let mut state = self.lock();
        if state.views.contains_key(&name) {
            if if_not_exists {
                return Ok(Outcome::Done("CREATE MATERIALIZED VIEW".into()));
            }
            return Err(StatementError::new(
                "42P07",
                format!("materialized view `{name}` already exists"),
            ));
        }
        if state.catalog.tables.contains_key(&name) || state.catalog.views.contains_key(&name) {
            return Err(StatementError::new(
                "42P07",
                format!("`{name}` is already a table or a view"),
            ));
        }
        let Statement::Query(ast) = riffle_sql::parse::parse_statement(&query)? else {
            return Err(StatementError::new(
                "42601",
                "CREATE MATERIALIZED VIEW name AS takes a query (SELECT ...)",
            ));
        };
        let plan = view_catalog(&state, &name, &name)
            .plan_query(&ast)
            .map_err(|e| {
                StatementError::from(SqlError::new(
                    format!("materialized view `{name}`: {}", e.message),
                    e.location,
                ))
            })?;
        let table = Arc::new(
            ViewTable::new(
                &name,
                plan.schema().clone(),
                plan.unique_key(),
                self.config.max_subscriber_lag,
            )
            .with_retained_changes(self.config.retained_changes),
        );
        // A view's name reads its query in other views' queries.
        state.catalog.views.insert(name.clone(), *ast);
        state.views.insert(
            name.clone(),
            View {
                query,
                table,
                appends: (plan.changelog_mode() == ChangelogMode::Append)
                    .then(|| plan.time().cloned()),
                job: None,
                reads: Vec::new(),
            },
        );
        if !replaying {
            if let Err(e) = self.start_view(&mut state, &name) {
                state.views.remove(&name);
                state.catalog.views.remove(&name);
                return Err(e);
            }
            self.log(text)?;
        }
        Ok(Outcome::Done("CREATE MATERIALIZED VIEW".into()))
    }

    fn view_dir(&self, name: &str) -> PathBuf {
        self.config.data_dir.join("views").join(name)
    }

    /// Starts the job of view `name`, from its latest checkpoint when it has one.
    fn start_view(&self, state: &mut State, name: &str) -> Result<()> {
        let view = state.views.get(name).expect("registered");
        let Statement::Query(ast) = riffle_sql::parse::parse_statement(&view.query)? else {
            unreachable!("checked when created")
        };
        let plan = view_catalog(state, name, name).plan_query(&ast)?;
        let reads = views_read(state, &plan);
        let table = view.table.clone();
        let finished = table.clone();
        // A state backend with stores (RocksDB) keeps the view's rows in the store of the
        // view operator's task, which only keyed operators get: the changes are keyed by
        // nothing (one subtask takes them all, as on the heap).
        let in_store = self.config.env.state_backend.keeps_local_files();
        let job = self
            .spawn_job(
                &format!("view-{name}"),
                &self.view_dir(name),
                move |env| {
                    let changes = riffle_sql::lower::lower(&plan, env)
                        .map_err(|e| riffle::Error::config("query", e.to_string()))?
                        .into_changelog();
                    let materialize = move || Materialize::new(table.clone());
                    let materialized = if in_store {
                        changes.key_by(|_| ()).transform("Materialize", materialize)
                    } else {
                        changes.transform("Materialize", materialize)
                    };
                    materialized
                        .set_parallelism(1)
                        .sink_fn(|()| Ok(()))
                        .name("Sink: view");
                    Ok(())
                },
                // The job ended with its input, after its final checkpoint completed: the view's
                // last changes are durable.
                move || finished.finish(),
            )
            .map_err(|e| StatementError::new(e.code, format!("view `{name}`: {}", e.message)))?;
        let view = state.views.get_mut(name).expect("registered");
        view.job = Some(job);
        view.reads = reads;
        Ok(())
    }

    /// Runs a job of the server (`job_name`, its checkpoints and state under `dir`, from its
    /// latest checkpoint when it has one) on a thread of its own: `build` declares it, `finished`
    /// runs when it ended with its input.
    fn spawn_job(
        &self,
        job_name: &str,
        dir: &Path,
        build: impl FnOnce(&StreamEnv) -> riffle::Result<()> + Send + 'static,
        finished: impl FnOnce() + Send + 'static,
    ) -> Result<ViewJob> {
        let mut config = self.config.env.clone();
        config.job_name = job_name.to_string();
        config.dead_letter_dir = dir.join("dead-letter");
        config.local_state_dir = dir.join("state");
        config.checkpoints.storage = dir.join("checkpoints").display().to_string();
        config.checkpoints.restore = Some(RestoreFrom::Latest);
        let (started, wait) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(job_name.to_string())
            .spawn(move || -> riffle::Result<()> {
                let env = StreamEnv::with_config(config);
                let job = build(&env).and_then(|()| env.execute_async());
                match job {
                    Ok(job) => {
                        let _ = started.send(Ok(job.monitor()));
                        job.wait()?;
                        finished();
                        Ok(())
                    }
                    Err(e) => {
                        let _ = started.send(Err(e.to_string()));
                        Err(e)
                    }
                }
            })
            .map_err(|e| StatementError::new("58000", format!("cannot start a thread: {e}")))?;
        let monitor = wait
            .recv()
            .map_err(|_| StatementError::new("XX000", "its job died"))?
            .map_err(|e| StatementError::new("42000", e))?;
        // A job without its UI still runs: the reason is logged.
        let web = self.config.web.as_ref().and_then(|config| {
            riffle_web::WebServer::start(monitor.clone(), config.clone())
                .inspect_err(
                    |e| tracing::warn!(job = job_name, error = %e, "no web UI for the job"),
                )
                .ok()
        });
        Ok(ViewJob {
            monitor,
            thread,
            web,
        })
    }

    fn sink_dir(&self, name: &str) -> PathBuf {
        self.config.data_dir.join("sinks").join(name)
    }

    /// `CREATE SINK [IF NOT EXISTS] name FROM view WITH ('connector' = ..)`: the view's changes
    /// written out by the connector, as a table of the view's columns with those options.
    fn create_sink(&self, text: &str, replaying: bool) -> Result<Outcome> {
        let (name, view, options, if_not_exists) = parse_create_sink(text)?;
        let mut state = self.lock();
        if state.sinks.contains_key(&name) {
            if if_not_exists {
                return Ok(Outcome::Done("CREATE SINK".into()));
            }
            return Err(StatementError::new(
                "42P07",
                format!("sink `{name}` already exists"),
            ));
        }
        let table = state
            .views
            .get(&view)
            .map(|v| v.table.clone())
            .ok_or_else(|| {
                StatementError::new(
                    "42P01",
                    format!(
                        "CREATE SINK {name} FROM {view}: materialized view `{view}` does not exist"
                    ),
                )
            })?;
        let mut def = view_table_def(&table, Arc::default());
        def.name = name.clone();
        def.rows = None;
        def.options = options;
        let Statement::Query(query) =
            riffle_sql::parse::parse_statement(&format!("SELECT * FROM {view}"))?
        else {
            unreachable!("a query")
        };
        self.add_sink(&mut state, &name, def, *query, text, replaying)?;
        Ok(Outcome::Done("CREATE SINK".into()))
    }

    /// `INSERT INTO table query`: a sink named `insert_<n>` writing the query's rows (the
    /// changes of the views it reads) into the table's connector, until dropped.
    fn insert(
        &self,
        table: &str,
        query: &ast::Query,
        text: &str,
        replaying: bool,
    ) -> Result<Outcome> {
        let mut state = self.lock();
        let def = state.catalog.tables.get(table).cloned().ok_or_else(|| {
            StatementError::new("42P01", format!("INSERT INTO {table}: no such table"))
        })?;
        let number = state
            .sinks
            .keys()
            .filter_map(|n| n.strip_prefix("insert_")?.parse::<u64>().ok())
            .max()
            .unwrap_or(0)
            + 1;
        let name = format!("insert_{number}");
        self.add_sink(&mut state, &name, def, query.clone(), text, replaying)?;
        Ok(Outcome::Done("INSERT 0 0".into()))
    }

    /// Registers sink `name`, starts it (which checks its query and its connector's options)
    /// unless the catalog is being replayed, and logs the statement that made it.
    fn add_sink(
        &self,
        state: &mut State,
        name: &str,
        table: TableDef,
        query: ast::Query,
        text: &str,
        replaying: bool,
    ) -> Result<()> {
        state.sinks.insert(
            name.to_string(),
            Sink {
                statement: text.trim().trim_end_matches(';').to_string(),
                table,
                query,
                job: None,
                reads: Vec::new(),
            },
        );
        if !replaying {
            if let Err(e) = self.start_sink(state, name) {
                state.sinks.remove(name);
                return Err(e);
            }
            self.log(text)?;
        }
        Ok(())
    }

    /// Starts the job of sink `name`, from its latest checkpoint when it has one.
    fn start_sink(&self, state: &mut State, name: &str) -> Result<()> {
        let sink = state.sinks.get(name).expect("registered");
        let plan = view_catalog(state, "", &sink_reader(name)).plan_query(&sink.query)?;
        let reads = views_read(state, &plan);
        let table = sink.table.clone();
        let job = self
            .spawn_job(
                &format!("sink-{name}"),
                &self.sink_dir(name),
                move |env| {
                    riffle_sql::lower::insert(env, &table, &plan)
                        .map_err(|e| riffle::Error::config("query", e.to_string()))
                },
                || {},
            )
            .map_err(|e| StatementError::new(e.code, format!("sink `{name}`: {}", e.message)))?;
        let sink = state.sinks.get_mut(name).expect("registered");
        sink.job = Some(job);
        sink.reads = reads;
        Ok(())
    }

    fn drop_sink(&self, text: &str, replaying: bool) -> Result<Outcome> {
        let (name, if_exists) = parse_drop(text, 2)?;
        let mut state = self.lock();
        let Some(sink) = state.sinks.remove(&name) else {
            if if_exists {
                return Ok(Outcome::Done("DROP SINK".into()));
            }
            return Err(StatementError::new(
                "42P01",
                format!("sink `{name}` does not exist"),
            ));
        };
        if let Some(job) = sink.job {
            job.stop();
        }
        unpin(&state.views, &sink.reads, &sink_reader(&name));
        if !replaying {
            self.log(text)?;
        }
        remove_dir(&self.sink_dir(&name))?;
        Ok(Outcome::Done("DROP SINK".into()))
    }

    fn show_sinks(&self) -> Outcome {
        let state = self.lock();
        let schema = Schema::new(vec![
            riffle_sql::Field::new("name", riffle_sql::DataType::Varchar),
            riffle_sql::Field::new("status", riffle_sql::DataType::Varchar),
            riffle_sql::Field::new("statement", riffle_sql::DataType::Varchar),
            riffle_sql::Field::new("web", riffle_sql::DataType::Varchar),
        ]);
        let rows = state
            .sinks
            .iter()
            .map(|(name, sink)| {
                Row(vec![
                    Value::string(name),
                    Value::string(job_status(sink.job.as_ref())),
                    Value::string(&sink.statement),
                    web_url(sink.job.as_ref()),
                ])
            })
            .collect();
        Outcome::Rows { schema, rows }
    }

    /// `SHOW SOURCES`: the tables whose sources views and sinks share, and how many records
    /// each read since the server started (once for all the jobs reading it, plus what a job
    /// read alone while it caught up with the others).
    fn show_sources(&self) -> Outcome {
        let state = self.lock();
        let schema = Schema::new(vec![
            riffle_sql::Field::new("name", riffle_sql::DataType::Varchar),
            riffle_sql::Field::new("connector", riffle_sql::DataType::Varchar),
            riffle_sql::Field::new("records_read", riffle_sql::DataType::BigInt),
        ]);
        let sources = state
            .sources
            .sources
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let rows = state
            .catalog
            .tables
            .iter()
            .filter_map(|(name, table)| {
                let (_, hub) = sources.get(name)?;
                Some(Row(vec![
                    Value::string(name),
                    Value::string(table.options.get("connector").map_or("", String::as_str)),
                    Value::Int(hub.records_read() as i64),
                ]))
            })
            .collect();
        Outcome::Rows { schema, rows }
    }

    fn drop_view(&self, text: &str, replaying: bool) -> Result<Outcome> {
        let (name, if_exists) = parse_drop(text, 3)?;
        let mut state = self.lock();
        let reader = (state.views.iter())
            .find(|(_, v)| v.reads.contains(&name))
            .map(|(reader, _)| format!("materialized view `{reader}`"))
            .or_else(|| {
                (state.sinks.iter())
                    .find(|(_, s)| s.reads.contains(&name))
                    .map(|(reader, _)| format!("sink `{reader}`"))
            });
        if let Some(reader) = reader {
            return Err(StatementError::new(
                "2BP01",
                format!(
                    "cannot drop materialized view `{name}`: {reader} reads it (drop it first)"
                ),
            ));
        }
        let Some(view) = state.views.remove(&name) else {
            if if_exists {
                return Ok(Outcome::Done("DROP MATERIALIZED VIEW".into()));
            }
            return Err(StatementError::new(
                "42P01",
                format!("materialized view `{name}` does not exist"),
            ));
        };
        state.catalog.views.remove(&name);
        if let Some(job) = view.job {
            job.stop();
        }
        view.table.close_subscriptions();
        unpin(&state.views, &view.reads, &name);
        if !replaying {
            self.log(text)?;
        }
        remove_dir(&self.view_dir(&name))?;
        Ok(Outcome::Done("DROP MATERIALIZED VIEW".into()))
    }

    fn drop_definition(&self, text: &str, replaying: bool) -> Result<Outcome> {
        let (name, if_exists) = parse_drop(text, 2)?;
        let mut state = self.lock();
        let removed = state.catalog.tables.remove(&name).is_some()
            || (!state.views.contains_key(&name) && state.catalog.views.remove(&name).is_some());
        if !removed && !if_exists {
            return Err(StatementError::new(
                "42P01",
                format!("table or view `{name}` does not exist"),
            ));
        }
        if removed && !replaying {
            self.log(text)?;
        }
        Ok(Outcome::Done(format!(
            "DROP {}",
            text.split_whitespace()
                .nth(1)
                .unwrap_or("")
                .to_ascii_uppercase()
        )))
    }

    fn show_views(&self) -> Outcome {
        let state = self.lock();
        let schema = Schema::new(vec![
            riffle_sql::Field::new("name", riffle_sql::DataType::Varchar),
            riffle_sql::Field::new("rows", riffle_sql::DataType::BigInt),
            riffle_sql::Field::new("progress", riffle_sql::DataType::BigInt),
            riffle_sql::Field::new("status", riffle_sql::DataType::Varchar),
            riffle_sql::Field::new("query", riffle_sql::DataType::Varchar),
            riffle_sql::Field::new("web", riffle_sql::DataType::Varchar),
        ]);
        let rows = state
            .views
            .iter()
            .map(|(name, view)| {
                // Both at one point: a batch applied between two reads would show a view of
                // more rows than changes.
                let (len, progress) = view.table.len_and_progress();
                let status = job_status(view.job.as_ref());
                Row(vec![
                    Value::string(name),
                    Value::Int(len as i64),
                    Value::Int(progress as i64),
                    Value::string(status),
                    Value::string(&view.query),
                    web_url(view.job.as_ref()),
                ])
            })
            .collect();
        Outcome::Rows { schema, rows }
    }

    fn show_tables(&self) -> Outcome {
        let state = self.lock();
        let schema = Schema::new(vec![
            riffle_sql::Field::new("name", riffle_sql::DataType::Varchar),
            riffle_sql::Field::new("kind", riffle_sql::DataType::Varchar),
        ]);
        let mut rows: Vec<Row> = Vec::new();
        for name in state.catalog.tables.keys() {
            rows.push(Row(vec![Value::string(name), Value::string("table")]));
        }
        for name in state.catalog.views.keys() {
            let kind = if state.views.contains_key(name) {
                "materialized view"
            } else {
                "view"
            };
            rows.push(Row(vec![Value::string(name), Value::string(kind)]));
        }
        rows.sort();
        Outcome::Rows { schema, rows }
    }

    /// What a `SUBSCRIBE v ..` or `COPY (SUBSCRIBE v ..) TO STDOUT` streams; `None` for any
    /// other statement.
    pub fn subscription(&self, text: &str) -> Option<Result<SubscribeRequest>> {
        let copy = subscribes(text)?;
        Some(parse_subscribe(text, copy).and_then(|(name, options)| {
            let state = self.lock();
            let view = state.views.get(&name).ok_or_else(|| {
                StatementError::new(
                    "42P01",
                    format!("SUBSCRIBE: materialized view `{name}` does not exist"),
                )
            })?;
            Ok(SubscribeRequest {
                view: view.table.clone(),
                copy,
                options,
            })
        }))
    }

    /// The view `name`'s rows (for a reader outside a session).
    pub fn view(&self, name: &str) -> Option<Arc<ViewTable>> {
        self.lock().views.get(name).map(|v| v.table.clone())
    }

    /// The columns a statement's rows will have (`None`: it returns no rows), without running
    /// it (a client's `Describe`).
    pub fn describe(&self, text: &str) -> Result<Option<Schema>> {
        // Parameters do not change the columns: planned as NULLs.
        let parameters = parameter_types(text, &[]).len();
        let bound;
        let text = if parameters > 0 {
            bound = bind_parameters(text, &vec!["NULL".to_string(); parameters])?;
            bound.as_str()
        } else {
            text
        };
        let first = text
            .trim_start()
            .split(|c: char| c.is_whitespace() || c == '(')
            .next()
            .unwrap_or("")
            .to_ascii_uppercase();
        if let Some(subscription) = self.subscription(text) {
            let request = subscription?;
            return Ok((!request.copy).then(|| request.view.subscription_schema()));
        }
        let is_query =
            matches!(first.as_str(), "SELECT" | "WITH") || text.trim_start().starts_with('(');
        if is_query {
            let mut query = match parse_query(text)? {
                Some(Parsed::Query(query)) => *query,
                Some(Parsed::Empty(schema)) => return Ok(Some(schema)),
                None => return Ok(None),
            };
            query.order_by = None;
            query.limit_clause = None;
            let (catalog, views) = self.catalog_for(&query, crate::pg_catalog::is_read_by(text));
            let (plan, _) = plan_over_views(catalog, &views, &query, |_| Ok(Arc::default()))?;
            return Ok(Some(plan.schema().clone()));
        }
        match first.as_str() {
            "SHOW" | "EXPLAIN" => match self.execute(text)? {
                Outcome::Rows { schema, .. } => Ok(Some(schema)),
                _ => Ok(None),
            },
            _ => Ok(None),
        }
    }

    /// The catalog, and the views by name.
    fn read_catalog(&self) -> (Catalog, HashMap<String, Arc<ViewTable>>) {
        let state = self.lock();
        let views = state
            .views
            .iter()
            .map(|(name, v)| (name.clone(), v.table.clone()))
            .collect();
        (state.catalog.clone(), views)
    }

    /// The catalog a `SELECT` reads in: with `information_schema.tables` and `.columns` (and
    /// `pg_catalog.pg_matviews`) when the query reads them, and with `pg_catalog`'s tables and
    /// functions when it was written over them (`pg_catalog`: see [`crate::pg_catalog`]).
    fn catalog_for(
        &self,
        query: &ast::Query,
        pg_catalog: bool,
    ) -> (Catalog, HashMap<String, Arc<ViewTable>>) {
        let (mut catalog, views) = self.read_catalog();
        if pg_catalog || crate::information_schema::is_read_by(&query.to_string()) {
            let queries = (self.lock().views.iter())
                .map(|(name, v)| (name.clone(), v.query.clone()))
                .collect();
            let relations = crate::information_schema::relations(&catalog, &views, &queries);
            let tables = crate::information_schema::tables(&relations);
            if pg_catalog {
                let roles = self.lock().roles.clone();
                crate::pg_catalog::add_to(&mut catalog, &relations, &roles);
            }
            for table in tables {
                catalog.tables.insert(table.name.clone(), table);
            }
        }
        (catalog, views)
    }

    /// A `SELECT` over materialized views: a lookup by a view's whole key reads one row;
    /// otherwise the query runs over the views' rows (filters and projections directly, other
    /// queries as a bounded job), then `ORDER BY` and `LIMIT` apply. With a block's
    /// `snapshot`, the views' rows are those it holds (taken at the block's first read of each).
    fn query(
        &self,
        mut query: ast::Query,
        pg_catalog: bool,
        mut snapshot: Option<&mut BlockSnapshot>,
    ) -> Result<Outcome> {
        let mut order_by = query.order_by.take();
        let limit = query.limit_clause.take();
        let (catalog, views) = self.catalog_for(&query, pg_catalog);
        // First with empty views: which views does the query read?
        let (planned, used) =
            plan_over_views(catalog.clone(), &views, &query, |_| Ok(Arc::default()))?;
        // `ORDER BY` a column the query does not return: computed as a hidden one (the views
        // read stay the same).
        let hidden = match order_by.as_mut() {
            Some(order_by) => hide_order_keys(&mut query, order_by, planned.schema()),
            None => 0,
        };
        // Then with the rows of the views it reads (a point lookup reads one row; a block's
        // snapshot, the rows it holds).
        let lookup = match used.as_slice() {
            [only] if snapshot.is_none() => point_lookup(&query, &views[only])?.map(Arc::new),
            _ => None,
        };
        let (plan, _) = plan_over_views(catalog, &views, &query, |table| {
            match (&lookup, snapshot.as_deref_mut()) {
                (Some(rows), _) => Ok(rows.clone()),
                (None, Some(snapshot)) => snapshot.rows(table),
                (None, None) => Ok(Arc::new(
                    table.try_rows().map_err(|e| unreadable(table, e))?.0,
                )),
            }
        })?;
        let schema = plan.schema().clone();
        let mut rows = match evaluate_directly(&plan) {
            Some(rows) => rows?,
            None => evaluate_as_job(&plan)?,
        };
        // A global aggregate over empty views answers one row, as over an empty table.
        if rows.is_empty()
            && let Some(row) = plan.row_over_no_input()
        {
            rows.push(row);
        }
        if let Some(order_by) = order_by {
            sort(&mut rows, &schema, &order_by)?;
        }
        if let Some(limit) = limit {
            apply_limit(&mut rows, &limit)?;
        }
        let mut schema = schema;
        if hidden > 0 {
            let width = schema.len() - hidden;
            schema.fields.truncate(width);
            rows.iter_mut().for_each(|row| row.0.truncate(width));
        }
        Ok(Outcome::Rows { schema, rows })
    }

    /// Stops every view's and sink's job (their state stays in their checkpoints).
    pub fn shutdown(&self) {
        let mut state = self.lock();
        for sink in state.sinks.values_mut() {
            if let Some(job) = sink.job.take() {
                job.stop();
            }
        }
        for view in state.views.values_mut() {
            if let Some(job) = view.job.take() {
                job.stop();
            }
            view.table.close_subscriptions();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The plan of `query` with each view it reads as a bounded table of `rows_of(view)`, and the
/// names of those views; a query reading a streaming table is refused (its rows never end).
fn plan_over_views(
    mut catalog: Catalog,
    views: &HashMap<String, Arc<ViewTable>>,
    query: &ast::Query,
    mut rows_of: impl FnMut(&Arc<ViewTable>) -> Result<Arc<Vec<Row>>>,
) -> Result<(Plan, Vec<String>)> {
    // Which views it reads, planned over empty ones first (cheap), then over their rows.
    for (name, table) in views {
        catalog.views.remove(name);
        catalog
            .tables
            .insert(name.clone(), view_table_def(table, Arc::default()));
    }
    let plan = catalog.plan_query(query)?;
    let mut used: Vec<String> = Vec::new();
    for table in plan.tables() {
        if table.name == riffle_sql::plan::NO_FROM {
            continue;
        }
        if table.rows.is_none() {
            return Err(StatementError::new(
                "0A000",
                format!(
                    "`{}` is a streaming table: a query here reads materialized views (CREATE MATERIALIZED VIEW v AS SELECT .. FROM {})",
                    table.name, table.name
                ),
            ));
        }
        if !used.contains(&table.name) {
            used.push(table.name.clone());
        }
    }
    // (A bounded table that is not a view, `information_schema.tables`, has its rows.)
    used.retain(|name| views.contains_key(name));
    for name in &used {
        let table = &views[name];
        catalog
            .tables
            .insert(name.clone(), view_table_def(table, rows_of(table)?));
    }
    Ok((catalog.plan_query(query)?, used))
}

/// The catalog a view's or a sink's query is planned in (`exclude`: the view itself): the
/// materialized views are tables of their changes (read as a durable subscriber named
/// `reader`, `view_source`), not queries. The tables' sources are shared with the other views and sinks reading them ([`SharedSources`]).
fn view_catalog(state: &State, exclude: &str, reader: &str) -> Catalog {
    let mut catalog = state.catalog.clone();
    catalog.views.remove(exclude);
    for table in catalog.tables.values_mut() {
        table.shared = state.sources.of(table);
    }
    for (other, view) in &state.views {
        if other == exclude {
            continue;
        }
        catalog.views.remove(other);
        let table = view.table.clone();
        let reader = reader.to_string();
        let mut def = view_table_def(&view.table, Arc::default());
        def.rows = None;
        def.changes = Some(match &view.appends {
            None => ProgramChangelog::new(move |env| {
                env.from_source(ViewSource::new(table.clone(), &reader))
            }),
            // Inserts only: read as appended rows, with event time and watermarks by the
            // view's time attribute, as its query had them.
            Some(time) => {
                def.watermark = time.as_ref().map(|t| {
                    let column = ast::Expr::Identifier(ast::Ident::new(&t.name));
                    let bound = format!("INTERVAL '{}' MILLISECOND", t.out_of_orderness_ms);
                    let bound =
                        sqlparser::parser::Parser::new(&sqlparser::dialect::GenericDialect {})
                            .try_with_sql(&bound)
                            .and_then(|mut p| p.parse_expr())
                            .expect("an interval literal");
                    let expr = ast::Expr::BinaryOp {
                        left: Box::new(column),
                        op: ast::BinaryOperator::Minus,
                        right: Box::new(bound),
                    };
                    (t.name.clone(), expr)
                });
                ProgramChangelog::appends(move |env, watermarks| {
                    let source = ViewSource::new(table.clone(), &reader);
                    match watermarks {
                        Some(strategy) => env.from_source_with_watermarks(source, strategy),
                        None => env.from_source(source),
                    }
                })
            }
        });
        catalog.tables.insert(other.clone(), def);
    }
    catalog
}

/// The materialized views `plan` reads the changes of.
fn views_read(state: &State, plan: &Plan) -> Vec<String> {
    plan.tables()
        .iter()
        .filter(|t| t.changes.is_some() && state.views.contains_key(&t.name))
        .map(|t| t.name.clone())
        .collect()
}

/// The name sink `name` reads views as (their pins of retained changes).
fn sink_reader(name: &str) -> String {
    format!("sink {name}")
}

/// What `SHOW` says of a job: `running`, `finished`, `failed`, ...
fn job_status(job: Option<&ViewJob>) -> String {
    match job {
        Some(job) => format!("{:?}", job.monitor.overview().status).to_lowercase(),
        None => "not started".to_string(),
    }
}

/// The URL of a job's web UI, `NULL` without one.
fn web_url(job: Option<&ViewJob>) -> Value {
    job.and_then(ViewJob::web_url)
        .map_or(Value::Null, Value::string)
}

/// Removes a dropped view's or sink's directory.
fn remove_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| {
            StatementError::new("58030", format!("cannot remove `{}`: {e}", dir.display()))
        })?;
    }
    Ok(())
}

/// `CREATE SINK [IF NOT EXISTS] name FROM view WITH ('connector' = .., ..)`: the sink's name,
/// the view's, the options, and whether `IF NOT EXISTS` was given.
fn parse_create_sink(text: &str) -> Result<(String, String, BTreeMap<String, String>, bool)> {
    let syntax = || {
        StatementError::new(
            "42601",
            "expected CREATE SINK [IF NOT EXISTS] name FROM view WITH ('connector' = '..', ..)",
        )
    };
    let text = text.trim().trim_end_matches(';').trim();
    let lower = text.to_ascii_lowercase();
    let with = lower.find(" with").ok_or_else(syntax)?;
    let words: Vec<&str> = text[..with].split_whitespace().collect();
    let (if_not_exists, rest) = match words.as_slice() {
        [_, _, i, n, e, rest @ ..]
            if i.eq_ignore_ascii_case("IF")
                && n.eq_ignore_ascii_case("NOT")
                && e.eq_ignore_ascii_case("EXISTS") =>
        {
            (true, rest)
        }
        [_, _, rest @ ..] => (false, rest),
        _ => return Err(syntax()),
    };
    let [name, from, view] = rest else {
        return Err(syntax());
    };
    if !from.eq_ignore_ascii_case("FROM") {
        return Err(syntax());
    }
    // The options as a table's (Flink's `WITH ('key' = 'value', ..)`).
    let options = &text[with + " with".len()..];
    let Statement::CreateTable(table) =
        riffle_sql::parse::parse_statement(&format!("CREATE TABLE sink (c INT) WITH {options}"))?
    else {
        return Err(syntax());
    };
    if !table.options.contains_key("connector") {
        return Err(StatementError::new(
            "42601",
            "CREATE SINK .. WITH (..) names its 'connector'",
        ));
    }
    Ok((name_of(name)?, name_of(view)?, table.options, if_not_exists))
}

/// A view's rows as a bounded table of its columns.
fn view_table_def(table: &ViewTable, rows: Arc<Vec<Row>>) -> TableDef {
    TableDef {
        name: table.name.clone(),
        columns: table
            .schema
            .fields
            .iter()
            .cloned()
            .map(ColumnDef::Physical)
            .collect(),
        watermark: None,
        primary_key: table
            .key
            .iter()
            .flatten()
            .map(|c| table.schema.fields[*c].name.clone())
            .collect(),
        options: BTreeMap::from([("connector".to_string(), VIEW_CONNECTOR.to_string())]),
        partition_keys: Vec::new(),
        rows: Some(rows),
        changes: None,
        shared: None,
    }
}

/// The rows of `SELECT .. FROM view WHERE k1 = lit AND k2 = lit ..` naming the view's whole key:
/// found by the key, not by reading the view.
fn point_lookup(query: &ast::Query, view: &ViewTable) -> Result<Option<Vec<Row>>> {
    Ok(match lookup_key(query, view) {
        Some(key) => view.try_lookup(&key).map_err(|e| unreadable(view, e))?,
        None => None,
    })
}

/// A view's rows could not be read (its store failed): `58030`, Postgres' `io_error`.
pub(crate) fn unreadable(view: &ViewTable, error: riffle::Error) -> StatementError {
    StatementError::new(
        "58030",
        format!("cannot read materialized view `{}`: {error}", view.name),
    )
}

/// The values of the view's key that `query`'s `WHERE` fixes, when it fixes them all.
fn lookup_key(query: &ast::Query, view: &ViewTable) -> Option<Row> {
    let key = view.key.as_ref()?;
    let ast::SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    if select.from.len() != 1 || !select.from[0].joins.is_empty() {
        return None;
    }
    let mut equal: HashMap<String, Value> = HashMap::new();
    let mut conjuncts = Vec::new();
    riffle_sql::plan::split_and(select.selection.as_ref()?, &mut conjuncts);
    for expr in conjuncts {
        if let ast::Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::Eq,
            right,
        } = expr
        {
            let (column, value) = match (column_name(left), literal(right)) {
                (Some(c), Some(v)) => (c, v),
                _ => match (column_name(right), literal(left)) {
                    (Some(c), Some(v)) => (c, v),
                    _ => continue,
                },
            };
            equal.insert(column, value);
        }
    }
    let values: Option<Vec<Value>> = key
        .iter()
        .map(|c| {
            let field = &view.schema.fields[*c];
            let value = equal.get(&field.name)?;
            // The literal as the column's type (an INT literal for a BIGINT key is the same
            // value; a string for a number column is not looked up).
            match (value, &field.ty) {
                (Value::Int(_), t) if t.is_numeric() => Some(value.clone()),
                (Value::String(_), riffle_sql::DataType::Varchar) => Some(value.clone()),
                _ => None,
            }
        })
        .collect();
    Some(Row(values?))
}

fn column_name(expr: &ast::Expr) -> Option<String> {
    match expr {
        ast::Expr::Identifier(ident) => Some(ident.value.clone()),
        ast::Expr::CompoundIdentifier(parts) => parts.last().map(|p| p.value.clone()),
        _ => None,
    }
}

fn literal(expr: &ast::Expr) -> Option<Value> {
    match expr {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::Number(n, _) => n.parse().ok().map(Value::Int),
            ast::Value::SingleQuotedString(s) => Some(Value::string(s)),
            _ => None,
        },
        ast::Expr::UnaryOp {
            op: ast::UnaryOperator::Minus,
            expr,
        } => match literal(expr)? {
            Value::Int(n) => Some(Value::Int(-n)),
            _ => None,
        },
        _ => None,
    }
}

/// The rows of a plan of filters and projections over views' rows, computed here; `None` for
/// any other plan.
fn evaluate_directly(plan: &Plan) -> Option<Result<Vec<Row>>> {
    let failed = |e: riffle::Error| StatementError::new("22000", e.to_string());
    match plan {
        Plan::Scan {
            table, computed, ..
        } if computed.is_empty() => table.rows.as_ref().map(|rows| Ok(rows.as_ref().clone())),
        Plan::Filter {
            input, predicate, ..
        } => Some(evaluate_directly(input)?.and_then(|rows| {
            let mut kept = Vec::with_capacity(rows.len());
            for row in rows {
                if matches!((predicate.eval)(&row).map_err(failed)?, Value::Bool(true)) {
                    kept.push(row);
                }
            }
            Ok(kept)
        })),
        Plan::Project { input, exprs, .. } => Some(evaluate_directly(input)?.and_then(|rows| {
            rows.iter()
                .map(|row| {
                    exprs
                        .iter()
                        .map(|e| (e.eval)(row))
                        .collect::<riffle::Result<Vec<Value>>>()
                        .map(Row)
                        .map_err(failed)
                })
                .collect()
        })),
        _ => None,
    }
}

/// The rows of any plan over views' rows: run as a bounded job, its changes applied in order.
fn evaluate_as_job(plan: &Plan) -> Result<Vec<Row>> {
    let env = StreamEnv::with_config(EnvConfig {
        parallelism: 1,
        job_name: "riffle-serve-read".into(),
        ..EnvConfig::default()
    });
    let changes = riffle_sql::lower::lower(plan, &env)?.into_changelog();
    let (sink, out) = CollectSink::new();
    changes.sink(sink);
    env.execute()
        .map_err(|e| StatementError::new("XX000", e.to_string()))?;
    let mut counts: BTreeMap<Row, i64> = BTreeMap::new();
    for change in out.values() {
        let n = counts.entry(change.row).or_insert(0);
        match change.op {
            RowKind::Insert | RowKind::UpdateAfter => *n += 1,
            RowKind::UpdateBefore | RowKind::Delete => *n -= 1,
        }
    }
    Ok(counts
        .into_iter()
        .flat_map(|(row, n)| std::iter::repeat_n(row, n.max(0) as usize))
        .collect())
}

/// A statement read as a query: a `SELECT` over `pg_catalog` in Postgres' dialect, rewritten
/// ([`crate::pg_catalog`]); any other in Flink's (`None`: not a query).
fn parse_query(text: &str) -> Result<Option<Parsed>> {
    if crate::pg_catalog::is_read_by(text) {
        return crate::pg_catalog::parse(text).map(Some);
    }
    Ok(match riffle_sql::parse::parse_statement(text)? {
        Statement::Query(query) => Some(Parsed::Query(query)),
        _ => None,
    })
}

/// The `ORDER BY` keys that are not columns of the result (`SELECT name FROM v ORDER BY n`),
/// added to a plain `SELECT`'s columns as hidden ones (taken off after sorting); how many.
fn hide_order_keys(query: &mut ast::Query, order_by: &mut ast::OrderBy, schema: &Schema) -> usize {
    let (ast::SetExpr::Select(select), ast::OrderByKind::Expressions(exprs)) =
        (query.body.as_mut(), &mut order_by.kind)
    else {
        return 0;
    };
    if select.distinct.is_some() {
        return 0;
    }
    let mut hidden = 0;
    for e in exprs {
        let returned = match &e.expr {
            ast::Expr::Value(v) => matches!(v.value, ast::Value::Number(..)),
            other => column_name(other).is_some_and(|name| schema.index_of(&name).is_some()),
        };
        if returned {
            continue;
        }
        let alias = ast::Ident::new(format!("__riffle_order_{hidden}"));
        select.projection.push(ast::SelectItem::ExprWithAlias {
            expr: e.expr.clone(),
            alias: alias.clone(),
        });
        e.expr = ast::Expr::Identifier(alias);
        hidden += 1;
    }
    hidden
}

/// `ORDER BY` output columns, by name or position.
fn sort(rows: &mut [Row], schema: &Schema, order_by: &ast::OrderBy) -> Result<()> {
    let ast::OrderByKind::Expressions(exprs) = &order_by.kind else {
        return Err(StatementError::new(
            "0A000",
            "ORDER BY ALL is not supported",
        ));
    };
    let mut keys = Vec::new();
    for e in exprs {
        let column = match &e.expr {
            ast::Expr::Value(v) => match &v.value {
                ast::Value::Number(n, _) => n
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=schema.len()).contains(n))
                    .map(|n| n - 1),
                _ => None,
            },
            other => column_name(other).and_then(|name| schema.index_of(&name)),
        }
        .ok_or_else(|| {
            StatementError::new(
                "42703",
                format!(
                    "ORDER BY {}: order by a column of the result, by name or position",
                    e.expr
                ),
            )
        })?;
        let descending = matches!(e.options.sort, Some(ast::OrderBySort::Desc));
        // Postgres puts NULLs last going up, first going down.
        let nulls_first = e.options.nulls_first.unwrap_or(descending);
        keys.push((column, descending, nulls_first));
    }
    rows.sort_by(|a, b| {
        for (column, descending, nulls_first) in &keys {
            let (x, y) = (a.get(*column), b.get(*column));
            let ordering = match (x.is_null(), y.is_null()) {
                (true, true) => std::cmp::Ordering::Equal,
                (true, false) if *nulls_first => std::cmp::Ordering::Less,
                (true, false) => std::cmp::Ordering::Greater,
                (false, true) if *nulls_first => std::cmp::Ordering::Greater,
                (false, true) => std::cmp::Ordering::Less,
                (false, false) if *descending => y.cmp(x),
                (false, false) => x.cmp(y),
            };
            if ordering.is_ne() {
                return ordering;
            }
        }
        std::cmp::Ordering::Equal
    });
    Ok(())
}

fn apply_limit(rows: &mut Vec<Row>, limit: &ast::LimitClause) -> Result<()> {
    let number = |e: &ast::Expr| -> Result<usize> {
        match literal(e) {
            Some(Value::Int(n)) if n >= 0 => Ok(n as usize),
            _ => Err(StatementError::new(
                "22023",
                format!("LIMIT/OFFSET {e}: a non-negative integer"),
            )),
        }
    };
    let (limit, offset) = match limit {
        ast::LimitClause::LimitOffset { limit, offset, .. } => (
            limit.as_ref().map(number).transpose()?,
            offset.as_ref().map(|o| number(&o.value)).transpose()?,
        ),
        ast::LimitClause::OffsetCommaLimit { offset, limit } => {
            (Some(number(limit)?), Some(number(offset)?))
        }
    };
    let offset = offset.unwrap_or(0).min(rows.len());
    rows.drain(..offset);
    if let Some(limit) = limit {
        rows.truncate(limit);
    }
    Ok(())
}

/// What `CREATE` made: `TABLE`, `VIEW`, `FUNCTION` (for the command tag).
fn words_after_create(text: &str) -> String {
    text.split_whitespace()
        .skip(1)
        .find(|w| !w.eq_ignore_ascii_case("TEMPORARY") && !w.eq_ignore_ascii_case("OR"))
        .unwrap_or("")
        .to_ascii_uppercase()
}

/// An identifier as a name: unquoted or in double quotes or backticks, of letters, digits and
/// `_` (a view's name is also its directory's: `..` or `/` never reach the file system).
fn name_of(word: &str) -> Result<String> {
    let name = word.trim_matches(|c| c == '"' || c == '`');
    let valid = !name.is_empty()
        && name.chars().count() <= 63
        && name.chars().all(|c| c.is_alphanumeric() || c == '_');
    if !valid {
        return Err(StatementError::new(
            "42602",
            format!("`{word}` is not a valid name: letters, digits and _ (at most 63)"),
        ));
    }
    Ok(name.to_string())
}

/// `CREATE MATERIALIZED VIEW [IF NOT EXISTS] name AS query`: the name, the query's text, and
/// whether `IF NOT EXISTS` was given.
fn parse_create_view(text: &str) -> Result<(String, String, bool)> {
    let syntax = || {
        StatementError::new(
            "42601",
            "expected CREATE MATERIALIZED VIEW [IF NOT EXISTS] name AS SELECT ...",
        )
    };
    let mut rest = text.trim();
    for word in ["CREATE", "MATERIALIZED", "VIEW"] {
        rest = strip_word(rest, word).ok_or_else(syntax)?;
    }
    let mut if_not_exists = false;
    if let Some(after) = strip_word(rest, "IF")
        .and_then(|r| strip_word(r, "NOT"))
        .and_then(|r| strip_word(r, "EXISTS"))
    {
        rest = after;
        if_not_exists = true;
    }
    let end = rest.find(char::is_whitespace).ok_or_else(syntax)?;
    let name = name_of(&rest[..end])?;
    let query = strip_word(rest[end..].trim_start(), "AS").ok_or_else(syntax)?;
    if name.is_empty() || query.trim().is_empty() {
        return Err(syntax());
    }
    Ok((
        name,
        query.trim().trim_end_matches(';').to_string(),
        if_not_exists,
    ))
}

/// `DROP <kind words> [IF EXISTS] name` (`skip`: how many words before the name).
fn parse_drop(text: &str, skip: usize) -> Result<(String, bool)> {
    let words: Vec<&str> = text
        .trim()
        .trim_end_matches(';')
        .split_whitespace()
        .skip(skip)
        .collect();
    match words.as_slice() {
        [name] => Ok((name_of(name)?, false)),
        [i, e, name] if i.eq_ignore_ascii_case("IF") && e.eq_ignore_ascii_case("EXISTS") => {
            Ok((name_of(name)?, true))
        }
        _ => Err(StatementError::new(
            "42601",
            "expected DROP ... [IF EXISTS] name",
        )),
    }
}

/// Whether `text` subscribes: `Some(false)` for `SUBSCRIBE ..`, `Some(true)` for
/// `COPY (SUBSCRIBE ..) ..`.
fn subscribes(text: &str) -> Option<bool> {
    if strip_word(text, "SUBSCRIBE").is_some() {
        return Some(false);
    }
    let inner = strip_word(text, "COPY")?.strip_prefix('(')?;
    strip_word(inner, "SUBSCRIBE").map(|_| true)
}

/// `SUBSCRIBE [TO] name [WITH (option [= value], ..)] [AS OF progress]`, or the same in `COPY
/// (..) TO STDOUT`: the view's name and the options.
fn parse_subscribe(text: &str, copy: bool) -> Result<(String, SubscribeOptions)> {
    let syntax = || {
        StatementError::new(
            "42601",
            "expected SUBSCRIBE [TO] view [WITH (DURABLE, SNAPSHOT = false, PROGRESS)] [AS OF progress], or COPY (SUBSCRIBE ..) TO STDOUT",
        )
    };
    let mut rest = text.trim().trim_end_matches(';').trim();
    if copy {
        rest = strip_word(rest, "COPY").ok_or_else(syntax)?;
        rest = rest.strip_prefix('(').ok_or_else(syntax)?.trim_start();
        let close = rest.rfind(')').ok_or_else(syntax)?;
        let target = rest[close + 1..].split_whitespace().collect::<Vec<_>>();
        if !matches!(target.as_slice(), [to, out] if to.eq_ignore_ascii_case("TO") && out.eq_ignore_ascii_case("STDOUT"))
        {
            return Err(syntax());
        }
        rest = rest[..close].trim();
    }
    rest = strip_word(rest, "SUBSCRIBE").ok_or_else(syntax)?;
    if let Some(after) = strip_word(rest, "TO") {
        rest = after;
    }
    let mut options = SubscribeOptions::default();
    // The options' parentheses apart, the words: name, then WITH (..) and AS OF n.
    let (head, with, tail) = match rest.find('(') {
        Some(open) => {
            let close = rest[open..].find(')').ok_or_else(syntax)? + open;
            (
                &rest[..open],
                Some(&rest[open + 1..close]),
                &rest[close + 1..],
            )
        }
        None => (rest, None, ""),
    };
    let mut words: Vec<&str> = head.split_whitespace().collect();
    let name = name_of(words.first().ok_or_else(syntax)?)?;
    let mut given = Vec::new();
    words = match with {
        Some(with) => {
            if !matches!(words.as_slice(), [_, w] if w.eq_ignore_ascii_case("WITH")) {
                return Err(syntax());
            }
            given = read_subscribe_options(with, &mut options)?;
            tail.split_whitespace().collect()
        }
        None => words[1..].to_vec(),
    };
    match words.as_slice() {
        [] => {}
        [as_, of, token] if as_.eq_ignore_ascii_case("AS") && of.eq_ignore_ascii_case("OF") => {
            let token = token.parse::<u64>().map_err(|_| {
                StatementError::new(
                    "22023",
                    format!("SUBSCRIBE .. AS OF {token}: a token is a progress a subscription sent (a whole number, at least 0)"),
                )
            })?;
            if given.contains(&("SNAPSHOT".to_string(), true))
                || given.contains(&("DURABLE".to_string(), false))
            {
                return Err(StatementError::new(
                    "22023",
                    "SUBSCRIBE .. AS OF resumes durably after a token, without the rows at the start: it does not go with SNAPSHOT = true or DURABLE = false",
                ));
            }
            options.as_of = Some(token);
            options.durable = true;
            options.snapshot = false;
        }
        _ => return Err(syntax()),
    }
    Ok((name, options))
}

/// `DURABLE [= true | false]`, `SNAPSHOT [= true | false]`, `PROGRESS [= true | false]`,
/// comma-separated: each option given, and its value.
fn read_subscribe_options(
    text: &str,
    options: &mut SubscribeOptions,
) -> Result<Vec<(String, bool)>> {
    let mut given = Vec::new();
    for option in text.split(',').map(str::trim).filter(|o| !o.is_empty()) {
        let (key, value) = match option.split_once('=') {
            Some((key, value)) => (key.trim(), Some(value.trim().trim_matches('\'').trim())),
            None => (option, None),
        };
        let flag = match value.map(str::to_ascii_lowercase).as_deref() {
            None | Some("true") | Some("on") => true,
            Some("false") | Some("off") => false,
            Some(other) => {
                return Err(StatementError::new(
                    "22023",
                    format!("SUBSCRIBE .. WITH ({key} = {other}): the value is true or false"),
                ));
            }
        };
        given.push((key.to_ascii_uppercase(), flag));
        match key.to_ascii_uppercase().as_str() {
            "DURABLE" => options.durable = flag,
            "SNAPSHOT" => options.snapshot = flag,
            "PROGRESS" => options.progress = flag,
            _ => {
                return Err(StatementError::new(
                    "22023",
                    format!(
                        "SUBSCRIBE .. WITH ({key}): the options are DURABLE, SNAPSHOT and PROGRESS"
                    ),
                ));
            }
        }
    }
    Ok(given)
}

/// `text` after its first word when that word is `word` (any case), trimmed.
fn strip_word<'a>(text: &'a str, word: &str) -> Option<&'a str> {
    let text = text.trim_start();
    let end = text
        .find(|c: char| c.is_whitespace() || c == '(')
        .unwrap_or(text.len());
    text[..end]
        .eq_ignore_ascii_case(word)
        .then(|| text[end..].trim_start())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statements_of_its_own_are_read() {
        assert_eq!(
            parse_create_view("create materialized view if not exists \"v\" as select 1").unwrap(),
            ("v".into(), "select 1".into(), true)
        );
        assert_eq!(
            parse_create_view("CREATE MATERIALIZED VIEW v AS SELECT a FROM t;").unwrap(),
            ("v".into(), "SELECT a FROM t".into(), false)
        );
        assert!(parse_create_view("CREATE MATERIALIZED VIEW v SELECT 1").is_err());
        assert_eq!(
            parse_drop("DROP MATERIALIZED VIEW IF EXISTS v;", 3).unwrap(),
            ("v".into(), true)
        );
        let plain = SubscribeOptions::default();
        let subscribe = |text: &str, copy| parse_subscribe(text, copy).unwrap();
        assert_eq!(
            subscribe("SUBSCRIBE TO v", false),
            ("v".into(), plain.clone())
        );
        assert_eq!(
            subscribe("subscribe v;", false),
            ("v".into(), plain.clone())
        );
        assert_eq!(
            subscribe("COPY (SUBSCRIBE v) TO STDOUT", true),
            ("v".into(), plain.clone())
        );
        assert!(parse_subscribe("COPY (SUBSCRIBE v) TO '/etc/passwd'", true).is_err());
        let durable = SubscribeOptions {
            durable: true,
            ..plain.clone()
        };
        assert_eq!(subscribe("SUBSCRIBE v WITH (DURABLE)", false).1, durable);
        assert_eq!(
            subscribe(
                "SUBSCRIBE TO v with (durable = 'true', snapshot = false);",
                false
            )
            .1,
            SubscribeOptions {
                snapshot: false,
                ..durable.clone()
            }
        );
        let resumed = SubscribeOptions {
            durable: true,
            snapshot: false,
            as_of: Some(42),
            progress: false,
        };
        assert!(
            subscribe("SUBSCRIBE v WITH (DURABLE, PROGRESS)", false)
                .1
                .progress
        );
        assert_eq!(subscribe("SUBSCRIBE v AS OF 42", false).1, resumed);
        assert_eq!(
            subscribe("COPY (SUBSCRIBE v WITH (DURABLE) AS OF 42) TO STDOUT", true),
            ("v".into(), resumed)
        );
        for bad in [
            "SUBSCRIBE v AS OF -1",
            "SUBSCRIBE v AS OF soon",
            "SUBSCRIBE v WITH (LOUD)",
            "SUBSCRIBE v WITH (DURABLE = maybe)",
            "SUBSCRIBE v AS 3",
            "SUBSCRIBE v w",
            "SUBSCRIBE v WITH DURABLE",
            "SUBSCRIBE v WITH (SNAPSHOT = true) AS OF 3",
            "SUBSCRIBE v WITH (DURABLE = false) AS OF 3",
            "SUBSCRIBE v AS OF 18446744073709551616",
        ] {
            assert!(parse_subscribe(bad, false).is_err(), "{bad}");
        }
        // A view's name names its directory: nothing that walks the file system.
        for bad in ["\"..\"", "\"../../x\"", "`a/b`", "\"\"", "\"a.b\""] {
            let e = parse_create_view(&format!("CREATE MATERIALIZED VIEW {bad} AS SELECT 1"))
                .unwrap_err();
            assert_eq!(e.code, "42602", "{bad}");
            assert!(parse_drop(&format!("DROP MATERIALIZED VIEW {bad}"), 3).is_err());
        }
    }
}

/// The statement's parameters (`$1`, `$2`, ..) and, where it tells, each one's type: the type of
/// the column it is compared with (`user_id = $1`), `BIGINT` after `LIMIT`/`OFFSET`; `None`
/// otherwise (sent as text). Index `i` is `$(i + 1)`.
pub fn parameter_types(text: &str, schemas: &[Schema]) -> Vec<Option<riffle_sql::DataType>> {
    use sqlparser::tokenizer::{Token, Tokenizer};
    let Ok(tokens) = Tokenizer::new(&sqlparser::dialect::GenericDialect {}, text).tokenize() else {
        return Vec::new();
    };
    let tokens: Vec<Token> = tokens
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect();
    let column_type = |name: &str| {
        schemas
            .iter()
            .find_map(|s| s.index_of(name).map(|i| s.fields[i].ty.clone()))
    };
    let comparison = |t: &Token| {
        matches!(
            t,
            Token::Eq | Token::Neq | Token::Lt | Token::Gt | Token::LtEq | Token::GtEq
        )
    };
    let mut types: Vec<Option<riffle_sql::DataType>> = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        let Token::Placeholder(p) = token else {
            continue;
        };
        let Some(n) = p.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()) else {
            continue;
        };
        if n == 0 {
            continue;
        }
        if types.len() < n {
            types.resize(n, None);
        }
        let word = |t: Option<&Token>| match t {
            Some(Token::Word(w)) => Some(w.value.clone()),
            _ => None,
        };
        let before = i.checked_sub(1).map(|b| &tokens[b]);
        let ty = if before.is_some_and(&comparison) {
            word(i.checked_sub(2).map(|b| &tokens[b])).and_then(|c| column_type(&c))
        } else if tokens.get(i + 1).is_some_and(comparison) {
            word(tokens.get(i + 2)).and_then(|c| column_type(&c))
        } else if matches!(before, Some(Token::Word(w)) if w.value.eq_ignore_ascii_case("LIMIT") || w.value.eq_ignore_ascii_case("OFFSET"))
        {
            Some(riffle_sql::DataType::BigInt)
        } else {
            None
        };
        if types[n - 1].is_none() {
            types[n - 1] = ty;
        }
    }
    types
}

/// `text` with each parameter `$n` outside quotes replaced by `values[n - 1]` (SQL literals);
/// the rest of the text is kept byte for byte.
pub fn bind_parameters(text: &str, values: &[String]) -> Result<String> {
    use sqlparser::tokenizer::{Token, Tokenizer};
    let tokens = Tokenizer::new(&sqlparser::dialect::GenericDialect {}, text)
        .tokenize_with_location()
        .map_err(|e| StatementError::new("42601", e.to_string()))?;
    // Byte offsets of each line's start: token locations are lines and columns of characters.
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let offset = |line: u64, column: u64| -> usize {
        let start = line_starts[(line as usize).saturating_sub(1).min(line_starts.len() - 1)];
        text[start..]
            .char_indices()
            .nth((column as usize).saturating_sub(1))
            .map_or(text.len(), |(i, _)| start + i)
    };
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for token in tokens {
        let Token::Placeholder(p) = &token.token else {
            continue;
        };
        let Some(n) = p.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()) else {
            continue;
        };
        let value = n
            .checked_sub(1)
            .and_then(|i| values.get(i))
            .ok_or_else(|| {
                StatementError::new(
                    "08P01",
                    format!("{p}: the statement was given {} parameters", values.len()),
                )
            })?;
        let from = offset(token.span.start.line, token.span.start.column);
        out.push_str(&text[copied..from]);
        out.push_str(value);
        copied = from + p.len();
    }
    out.push_str(&text[copied..]);
    Ok(out)
}

impl Engine {
    /// The columns a statement's parameters may be compared with: every view's and table's.
    pub fn schemas(&self) -> Vec<Schema> {
        let state = self.lock();
        let mut schemas: Vec<Schema> = state
            .views
            .values()
            .map(|v| v.table.schema.clone())
            .collect();
        for table in state.catalog.tables.values() {
            schemas.push(riffle_sql::lower::sink_schema(table));
        }
        schemas
    }
}

#[cfg(test)]
mod parameter_tests {
    use super::*;
    use riffle_sql::{DataType, Field};

    #[test]
    fn a_parameter_takes_the_type_of_the_column_it_is_compared_with() {
        let schema = Schema::new(vec![
            Field::new("user_id", DataType::BigInt),
            Field::new("name", DataType::Varchar),
        ]);
        let types = parameter_types(
            "SELECT * FROM v WHERE user_id = $1 AND $2 <> name AND x = '$3' LIMIT $3",
            &[schema],
        );
        assert_eq!(
            types,
            [
                Some(DataType::BigInt),
                Some(DataType::Varchar),
                Some(DataType::BigInt)
            ]
        );
    }

    #[test]
    fn parameters_are_bound_as_literals_outside_quotes() {
        let bound = bind_parameters(
            "SELECT '$1' AS t FROM v WHERE a = $1 AND b = $2",
            &["42".into(), "'it''s'".into()],
        )
        .unwrap();
        assert_eq!(
            bound,
            "SELECT '$1' AS t FROM v WHERE a = 42 AND b = 'it''s'"
        );
        let bound = bind_parameters("SELECT 'a''b',\n  $1", &["'x'".into()]).unwrap();
        assert_eq!(bound, "SELECT 'a''b',\n  'x'");
        assert_eq!(
            bind_parameters("SELECT $2", &["1".into()])
                .unwrap_err()
                .code,
            "08P01"
        );
    }
}
