//! Streaming SQL for Riffle (issue 29, docs/sql.md): Flink's dialect, planned onto the operators
//! the DataStream API builds, over schema-typed [`Row`]s.
//!
//! A script's DDL registers tables (`CREATE TABLE ... WITH ('connector' = ..)`), views and
//! functions; each `INSERT INTO` adds its pipeline to the [`StreamEnv`], and the job runs when the
//! environment is executed, with everything a DataStream job has: checkpoints, savepoints,
//! `--restore`, the web UI, state on the heap or in RocksDB. A query is parsed
//! ([`parse`]), planned into a logical plan whose expressions are type-checked and compiled once
//! ([`plan`], [`expr`]), and lowered onto DataStream operators ([`lower`]).
//!
//! ```
//! use riffle::{StreamEnv, sink::CollectSink};
//! use riffle_sql::{SqlEnv, Value};
//!
//! let env = StreamEnv::new();
//! let sql = SqlEnv::new(&env);
//! sql.execute_sql(
//!     "CREATE TABLE events (
//!          event_type INT,
//!          bid ROW<auction BIGINT, bidder BIGINT, price BIGINT, dateTime TIMESTAMP(3)>
//!      ) WITH ('connector' = 'nexmark', 'events.num' = '1000');",
//! )
//! .unwrap();
//! let (rows, schema) = sql
//!     .sql_query("SELECT bid.auction, bid.price FROM events WHERE event_type = 2 AND MOD(bid.auction, 123) = 0")
//!     .unwrap();
//! assert_eq!(schema.names(), ["auction", "price"]);
//! let (sink, out) = CollectSink::new();
//! rows.sink(sink);
//! env.execute().unwrap();
//! assert!(out.values().iter().all(|row| matches!(row.get(0), Value::Int(a) if a % 123 == 0)));
//! ```

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use riffle::{Change, DataStream, StreamEnv};

pub mod aggregate;
#[cfg(feature = "avro")]
pub mod avro;
pub mod connectors;
mod cse;
mod datagen;
mod debezium;
pub mod error;
pub mod expr;
pub mod format;
pub mod functions;
mod int_bits;
#[cfg(feature = "postgres")]
pub mod jdbc;
mod json;
#[cfg(feature = "kafka")]
pub mod kafka;
mod kept;
pub mod lower;
pub mod parse;
mod placement;
pub mod plan;
#[cfg(feature = "postgres")]
pub mod postgres_cdc;
pub mod recognize;
pub mod types;

pub use error::SqlError;
pub use functions::ScalarFunction;
#[cfg(feature = "kafka")]
pub use placement::GroupPlan;
pub use types::{DataType, Decimal, Field, Row, Schema, Value};

use error::Result;
use parse::Statement;
use placement::Placement;
use plan::Catalog;

/// What one statement of a script did.
#[derive(Debug)]
pub enum Executed {
    /// A table, view or function was registered.
    Created(String),
    /// An option was set.
    Set(String, String),
    /// A table or view was dropped (or there was none and `IF EXISTS` was given).
    Dropped(String),
    /// An `INSERT INTO` was added to the job (it runs when the environment is executed).
    Inserting(String),
    /// A query's rows will be printed while the job runs.
    Printing(Schema),
    /// `EXPLAIN`: the plan.
    Explained(String),
}

/// SQL over a [`StreamEnv`]: a catalog of tables, views and functions, and the statements that
/// add jobs to the environment.
pub struct SqlEnv {
    env: StreamEnv,
    catalog: RefCell<Catalog>,
    options: RefCell<BTreeMap<String, String>>,
    variables: RefCell<BTreeMap<String, String>>,
    /// Where the jobs run: in this process, or as a member of a group ([`placement`]).
    placement: RefCell<Rc<Placement>>,
}

impl SqlEnv {
    /// SQL whose jobs run in `env`.
    pub fn new(env: &StreamEnv) -> SqlEnv {
        SqlEnv {
            env: env.clone(),
            catalog: RefCell::new(Catalog::default()),
            options: RefCell::new(BTreeMap::new()),
            variables: RefCell::new(BTreeMap::new()),
            placement: RefCell::new(Rc::new(Placement::default())),
        }
    }

    /// The environment the jobs run in.
    pub fn env(&self) -> &StreamEnv {
        &self.env
    }

    /// The same tables, views, functions, options and variables, adding jobs to `env` (a SQL
    /// client runs each query in an environment of its own).
    ///
    /// ```
    /// use riffle::StreamEnv;
    /// use riffle_sql::SqlEnv;
    /// let session = SqlEnv::new(&StreamEnv::new());
    /// session.execute_sql("CREATE TABLE t (a BIGINT) WITH ('connector' = 'blackhole');").unwrap();
    /// let job = session.with_env(&StreamEnv::new());
    /// assert_eq!(job.names(), ["t"]);
    /// ```
    pub fn with_env(&self, env: &StreamEnv) -> SqlEnv {
        SqlEnv {
            env: env.clone(),
            catalog: RefCell::new(self.catalog.borrow().clone()),
            options: RefCell::new(self.options.borrow().clone()),
            variables: RefCell::new(self.variables.borrow().clone()),
            placement: RefCell::new(self.placement.borrow().clone()),
        }
    }

    /// Plans `script` as the members of the process group `name` run it (`riffle sql --group`,
    /// docs/scale-out.md): what its statements did, and the topics a member reads (its Kafka
    /// tables', and one repartition topic of `partitions` partitions per keyed step). Run it on
    /// an environment that is not executed; create the plan's repartition topics
    /// ([`GroupPlan::shuffles`]), join the group with [`GroupPlan::all_topics`], and run the
    /// script in each run of the group on a new environment after [`in_group`](Self::in_group).
    /// A table a group cannot read or write (a file, a generator) is refused, naming it.
    #[cfg(feature = "kafka")]
    pub fn plan_group(
        &self,
        name: &str,
        partitions: usize,
        script: &str,
    ) -> Result<(Vec<Executed>, GroupPlan)> {
        if partitions == 0 {
            return Err(SqlError::plan(
                "a repartition topic needs at least 1 partition",
            ));
        }
        let planning = Rc::new(Placement::planning(name, partitions));
        *self.placement.borrow_mut() = planning.clone();
        let done = self.execute_sql(script);
        *self.placement.borrow_mut() = Rc::new(Placement::default());
        let done = done?;
        let plan = planning.plan().expect("a planning placement has a plan");
        if plan.kafka.is_none() {
            return Err(SqlError::plan(
                "a group of processes (--group) reads Kafka topics: the script reads no kafka table",
            ));
        }
        Ok((done, plan))
    }

    /// Runs the jobs of the scripts executed after this as one member of `group`, whose job
    /// [`plan_group`](Self::plan_group) planned as `plan`: Kafka tables read the partitions the
    /// group assigns and write in its transactions, keyed steps exchange rows through the
    /// plan's repartition topics.
    #[cfg(feature = "kafka")]
    pub fn in_group(&self, group: &riffle_kafka::KafkaGroup, plan: &GroupPlan) -> Result<()> {
        *self.placement.borrow_mut() = Rc::new(Placement::member(group, plan)?);
        Ok(())
    }

    /// The names of the tables and views, sorted (`SHOW TABLES`).
    pub fn names(&self) -> Vec<String> {
        let catalog = self.catalog.borrow();
        let mut names: Vec<String> = catalog
            .tables
            .keys()
            .chain(catalog.views.keys())
            .cloned()
            .collect();
        names.sort();
        names
    }

    /// The columns of table or view `name` (`DESCRIBE name`): a table's physical and computed
    /// columns, a view's query's.
    pub fn describe(&self, name: &str) -> Result<Schema> {
        let query = format!("SELECT * FROM {name}");
        let (_, schema) = self.plan_select(&query, "DESCRIBE")?;
        Ok(schema)
    }

    /// Registers a scalar function, called as `name(...)` (what `CREATE FUNCTION name AS
    /// '...'` then names).
    pub fn register_function(&self, name: &str, function: ScalarFunction) {
        self.catalog.borrow_mut().functions.register(name, function);
    }

    /// Registers `function` under `name`, declared deterministic (the same arguments always
    /// give the same value): conditions calling it may filter a join's side before the join,
    /// and its repeated calls are computed once per row. See
    /// [`Functions::register_deterministic`](crate::functions::Functions::register_deterministic).
    pub fn register_deterministic_function(&self, name: &str, function: ScalarFunction) {
        self.catalog
            .borrow_mut()
            .functions
            .register_deterministic(name, function);
    }

    /// Replaces `${name}` in the scripts run after this by `value` (the nexmark project's
    /// scripts use `${NEXMARK_TABLE}`, `${TPS}`, ...).
    pub fn define(&self, name: &str, value: &str) {
        self.variables
            .borrow_mut()
            .insert(name.to_string(), value.to_string());
    }

    /// The options `SET` gave, by key.
    pub fn options(&self) -> BTreeMap<String, String> {
        self.options.borrow().clone()
    }

    fn substitute(&self, script: &str) -> Result<String> {
        let variables = self.variables.borrow();
        let mut out = String::with_capacity(script.len());
        let mut rest = script;
        while let Some(at) = rest.find("${") {
            out.push_str(&rest[..at]);
            let after = &rest[at + 2..];
            let Some(end) = after.find('}') else {
                out.push_str(&rest[at..]);
                rest = "";
                break;
            };
            let name = &after[..end];
            let value = variables.get(name).ok_or_else(|| {
                SqlError::plan(format!(
                    "the script uses ${{{name}}}, which is not defined (define it: --define {name}=VALUE)"
                ))
            })?;
            out.push_str(value);
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    /// Runs the statements of `script`: DDL registers, `SET` sets, `INSERT INTO` adds a
    /// pipeline to the environment, a query prints its rows (`+I[...]`) while the job runs.
    pub fn execute_sql(&self, script: &str) -> Result<Vec<Executed>> {
        let script = self.substitute(script)?;
        let mut done = Vec::new();
        for statement in parse::parse_script(&script)? {
            done.push(self.execute(statement)?);
        }
        Ok(done)
    }

    fn execute(&self, statement: Statement) -> Result<Executed> {
        match statement {
            statement @ (Statement::CreateTable(_)
            | Statement::CreateView { .. }
            | Statement::CreateFunction { .. }
            | Statement::Drop { .. }
            | Statement::Set { .. }) => {
                let done = self.catalog.borrow_mut().define(statement)?;
                if let Executed::Set(key, value) = &done {
                    self.options.borrow_mut().insert(key.clone(), value.clone());
                }
                Ok(done)
            }
            Statement::Insert { table, query } => {
                let catalog = self.catalog.borrow();
                let def = catalog
                    .tables
                    .get(&table)
                    .ok_or_else(|| SqlError::plan(format!("INSERT INTO {table}: no such table")))?;
                let plan = catalog.plan_query(&query)?;
                lower::insert_placed(&self.env, def, &plan, &self.placement.borrow())?;
                Ok(Executed::Inserting(table))
            }
            Statement::Query(query) => {
                let plan = self.catalog.borrow().plan_query(&query)?;
                let schema = plan.schema().clone();
                let shown = schema.clone();
                lower::lower_placed(&plan, &self.env, &self.placement.borrow())?
                    .into_changelog()
                    .sink_fn(move |change: Change<Row>| {
                        println!("{}", connectors::change_text(&change, &shown));
                        Ok(())
                    })
                    .name("Sink: print");
                Ok(Executed::Printing(schema))
            }
            Statement::Explain(query) => {
                let plan = self.catalog.borrow().plan_query(&query)?;
                Ok(Executed::Explained(plan.explain()))
            }
        }
    }

    /// Like [`execute_sql`](Self::execute_sql), but `INSERT INTO` and queries are explained
    /// (their plans returned, one per statement) instead of added to the job.
    pub fn explain_sql(&self, script: &str) -> Result<Vec<String>> {
        let script = self.substitute(script)?;
        let mut plans = Vec::new();
        for statement in parse::parse_script(&script)? {
            match statement {
                Statement::Insert { table, query } => {
                    let plan = self.catalog.borrow().plan_query(&query)?;
                    plans.push(format!(
                        "Sink: table `{table}`\n  {}",
                        plan.explain().replace('\n', "\n  ")
                    ));
                }
                Statement::Query(query) | Statement::Explain(query) => {
                    plans.push(self.catalog.borrow().plan_query(&query)?.explain());
                }
                other => {
                    self.execute(other)?;
                }
            }
        }
        Ok(plans)
    }

    /// A query's rows as a stream of the environment, with their schema. The query's rows must
    /// only be added (an updating query, such as a `GROUP BY` without a window, is read with
    /// [`sql_changelog`](Self::sql_changelog)).
    pub fn sql_query(&self, query: &str) -> Result<(DataStream<Row>, Schema)> {
        let (plan, schema) = self.plan_select(query, "sql_query")?;
        let rows = lower::lower(&plan, &self.env)?.into_append("sql_query")?;
        Ok((rows, schema))
    }

    /// A query's rows as a changelog (`riffle::change`'s contract: applying every change in
    /// order gives the query's current result), with their schema: the changes of an updating
    /// query, or every row of an append-only one as an insert (`+I`).
    ///
    /// ```
    /// use riffle::{StreamEnv, sink::CollectSink};
    /// use riffle::change::UpsertTable;
    /// use riffle_sql::{SqlEnv, Value};
    ///
    /// let env = StreamEnv::new();
    /// let sql = SqlEnv::new(&env);
    /// sql.execute_sql(
    ///     "CREATE TABLE events (event_type INT, bid ROW<auction BIGINT, price BIGINT>)
    ///      WITH ('connector' = 'nexmark', 'events.num' = '1000');",
    /// )
    /// .unwrap();
    /// let (changes, _) = sql
    ///     .sql_changelog("SELECT bid.auction, COUNT(*) AS bids FROM events WHERE event_type = 2 GROUP BY bid.auction")
    ///     .unwrap();
    /// let (sink, out) = CollectSink::new();
    /// changes.sink(sink);
    /// env.execute().unwrap();
    /// // Applied by key (the auction), the changes leave one row per auction.
    /// let mut table = UpsertTable::new();
    /// for change in out.values() {
    ///     table.apply(change.row.get(0).clone(), change);
    /// }
    /// let bids: i64 = table.rows().values().map(|row| match row.get(1) { Value::Int(n) => *n, _ => 0 }).sum();
    /// assert_eq!(bids, 920); // 46 of every 50 events are bids
    /// ```
    pub fn sql_changelog(&self, query: &str) -> Result<(DataStream<Change<Row>>, Schema)> {
        let (plan, schema) = self.plan_select(query, "sql_changelog")?;
        Ok((lower::lower(&plan, &self.env)?.into_changelog(), schema))
    }

    /// The plan of the query `query` (what `caller` takes) and its output schema.
    fn plan_select(&self, query: &str, caller: &str) -> Result<(plan::Plan, Schema)> {
        let query = self.substitute(query)?;
        match parse::parse_statement(&query)? {
            Statement::Query(query) => {
                let plan = self.catalog.borrow().plan_query(&query)?;
                let schema = plan.schema().clone();
                Ok((plan, schema))
            }
            _ => Err(SqlError::plan(format!(
                "{caller} takes a query (SELECT ...)"
            ))),
        }
    }

    /// The plan of a query, as `EXPLAIN` prints it.
    pub fn explain(&self, query: &str) -> Result<String> {
        let query = self.substitute(query)?;
        match parse::parse_statement(&query)? {
            Statement::Query(query) | Statement::Explain(query) => {
                Ok(self.catalog.borrow().plan_query(&query)?.explain())
            }
            Statement::Insert { query, .. } => {
                Ok(self.catalog.borrow().plan_query(&query)?.explain())
            }
            _ => Err(SqlError::plan("EXPLAIN takes a query or an INSERT")),
        }
    }
}
