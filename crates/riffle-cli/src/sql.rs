//! `riffle sql -f job.sql`: runs a SQL script (without `-f`: the interactive client,
//! [`crate::sql_client`]) in Flink's dialect (docs/sql.md). Its DDL
//! registers tables, views and functions; its `INSERT INTO` statements (and queries, whose rows
//! are printed as `+I[...]` lines) run as one job with the same engine options as the demos:
//! parallelism, checkpoints, `--restore`, `--state-backend`, the web UI and the progress line.
//! With `--group NAME` the process is one member of a group of processes running the script
//! together on Kafka ([`crate::sql_group`], docs/scale-out.md).

use std::path::PathBuf;

use clap::Args;
use riffle::StreamEnv;
use riffle_sql::{DataType, Executed, ScalarFunction, SqlEnv, Value};

use crate::demos::EngineArgs;
use crate::progress::{human, run_with_progress};

/// Options of `riffle sql`.
#[derive(Args, Clone, Debug)]
pub struct SqlArgs {
    /// The script to run (statements separated by `;`); without it, the interactive SQL client.
    #[arg(long = "file", short = 'f', value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Replace `${NAME}` in the script by VALUE (repeatable).
    #[arg(long = "define", short = 'D', value_name = "NAME=VALUE")]
    pub defines: Vec<String>,
    /// Print the plan of each INSERT and query instead of running the job.
    #[arg(long)]
    pub explain: bool,
    /// How the engine runs the job.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// How the script runs as a group of processes.
    #[command(flatten)]
    pub group: SqlGroupArgs,
}

/// The options of `riffle sql --group` (parsed in every build, so that one without Kafka
/// support says so).
#[derive(Args, Clone, Debug)]
pub struct SqlGroupArgs {
    /// Run the script as one member of the process group NAME (docs/scale-out.md): start the
    /// same command in several processes, on one machine or many. Kafka's consumer group
    /// assigns each the partitions of the script's Kafka tables and of the repartition topics
    /// `NAME-sql-<n>-<step>-repartition` in front of its keyed steps (created when absent),
    /// and keyed state moves with them. Only kafka and upsert-kafka tables are read, and
    /// kafka, upsert-kafka, print and blackhole tables written; the Kafka sinks write in the
    /// group's transactions (exactly-once). Needs a checkpoint storage the members share (S3).
    #[arg(long, value_name = "NAME")]
    pub group: Option<String>,
    /// With --group: partitions of each repartition topic it creates (the most processes that
    /// share a keyed step).
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub shuffle_partitions: usize,
    /// With --group: keep a warm copy of the keyed state of the partitions N other members own
    /// (as `riffle demo --group`).
    #[arg(long, value_name = "N")]
    pub num_standby_replicas: Option<usize>,
    /// With --group: replace the group's job, whose fingerprint (HASH) a member refused with
    /// another job names, by this one (as `riffle demo --group`).
    #[arg(long, value_name = "HASH")]
    pub upgrade_from: Option<String>,
}

/// The functions every script can call: Nexmark's `count_char(text, 'c')` (q14, which names it
/// by `CREATE FUNCTION`), and the seed's `is_bot(user_agent)` and `ip_country(ip)` (`riffle
/// demo`'s bot filter and IP-prefix table; `examples/sql/clicks.sql`).
/// All three are deterministic: a condition calling them may filter a join's side first.
pub fn register_functions(sql: &SqlEnv) {
    for (name, function) in functions() {
        sql.register_deterministic_function(name, function);
    }
}

/// The functions of [`register_functions`], by name (`riffle serve` registers them too).
pub fn functions() -> Vec<(&'static str, ScalarFunction)> {
    vec![
        // The seed's job in SQL: its bot filter and its IP-prefix enrichment, as `riffle demo`'s.
        (
            "is_bot",
            ScalarFunction::returning(DataType::Boolean, |args| match args {
                [Value::String(agent)] => Ok(Value::Bool(crate::clicks::is_bot(agent))),
                _ => Ok(Value::Null),
            }),
        ),
        (
            "ip_country",
            ScalarFunction::returning(DataType::Varchar, |args| match args {
                [Value::String(ip)] => {
                    let country = crate::clicks::IpCountryTable::embedded()
                        .lookup(ip)
                        .unwrap_or(crate::clicks::Country::UNKNOWN);
                    Ok(Value::string(country.as_str()))
                }
                _ => Ok(Value::Null),
            }),
        ),
        (
            "count_char",
            ScalarFunction::returning(DataType::BigInt, |args| match args {
                [Value::String(text), Value::String(c)] => {
                    let c = c.chars().next().unwrap_or('\0');
                    Ok(Value::Int(text.chars().filter(|x| *x == c).count() as i64))
                }
                _ => Ok(Value::Null),
            }),
        ),
    ]
}

/// Replaces `${NAME}` by VALUE in what `sql` runs, for each `NAME=VALUE` of `--define`.
pub fn define_all(sql: &SqlEnv, defines: &[String]) -> riffle::Result<()> {
    for define in defines {
        let (name, value) = define.split_once('=').ok_or_else(|| {
            riffle::Error::config("--define", format!("`{define}` is not NAME=VALUE"))
        })?;
        sql.define(name.trim(), value);
    }
    Ok(())
}

/// Runs `riffle sql`: the script of `--file`, or the interactive client without one.
pub fn run(args: &SqlArgs) -> riffle::Result<()> {
    let Some(file) = &args.file else {
        if args.group.group.is_some() {
            return Err(riffle::Error::config(
                "--group",
                "a group runs a script: give it with -f FILE",
            ));
        }
        return crate::sql_client::run(args);
    };
    let script = std::fs::read_to_string(file)
        .map_err(|e| riffle::Error::config("--file", format!("`{}`: {e}", file.display())))?;
    let group = &args.group;
    if group.group.is_none() {
        let flag = match (group.num_standby_replicas, &group.upgrade_from) {
            (Some(_), _) => Some("--num-standby-replicas"),
            (None, Some(_)) => Some("--upgrade-from"),
            (None, None) => None,
        };
        if let Some(flag) = flag {
            return Err(riffle::Error::config(flag, "needs --group"));
        }
    }
    let env = StreamEnv::with_config(args.engine.env_config("sql")?);
    let sql = session(&env, args)?;
    if args.explain {
        for plan in sql.explain_sql(&script).map_err(sql_error(file))? {
            println!("{plan}\n");
        }
        return Ok(());
    }
    if let Some(name) = &group.group {
        return run_group(args, file, &script, name);
    }
    let done = sql.execute_sql(&script).map_err(sql_error(file))?;
    if report(&done) == 0 {
        return Ok(());
    }
    run_job(&env, &args.engine.run_options()?)?;
    Ok(())
}

/// A SQL session adding jobs to `env`: the functions every script can call, and `--define`'s
/// variables.
pub(crate) fn session(env: &StreamEnv, args: &SqlArgs) -> riffle::Result<SqlEnv> {
    let sql = SqlEnv::new(env);
    register_functions(&sql);
    define_all(&sql, &args.defines)?;
    Ok(sql)
}

#[cfg(feature = "kafka")]
fn run_group(
    args: &SqlArgs,
    file: &std::path::Path,
    script: &str,
    name: &str,
) -> riffle::Result<()> {
    crate::sql_group::run(args, file, script, name)
}

#[cfg(not(feature = "kafka"))]
fn run_group(_: &SqlArgs, _: &std::path::Path, _: &str, _: &str) -> riffle::Result<()> {
    Err(riffle::Error::config(
        "--group",
        "process groups need riffle built with Kafka support (cargo build --features kafka)",
    ))
}

/// Prints what each statement did; returns how many jobs (`INSERT INTO` and queries) they
/// added.
pub(crate) fn report(done: &[Executed]) -> usize {
    let mut jobs = 0;
    for executed in done {
        match executed {
            Executed::Created(name) => eprintln!("riffle sql: created {name}"),
            Executed::Set(key, value) => eprintln!("riffle sql: set {key} = {value}"),
            Executed::Dropped(name) => eprintln!("riffle sql: dropped {name}"),
            Executed::Inserting(table) => {
                jobs += 1;
                eprintln!("riffle sql: INSERT INTO {table}");
            }
            Executed::Printing(schema) => {
                jobs += 1;
                eprintln!("riffle sql: a query, printing its rows {schema}");
            }
            Executed::Explained(plan) => println!("{plan}"),
        }
    }
    jobs
}

/// Runs `env`'s job to its end with the progress line, and prints how many rows it read.
pub(crate) fn run_job(
    env: &StreamEnv,
    options: &crate::progress::RunOptions,
) -> riffle::Result<riffle::JobResult> {
    let (result, _) = run_with_progress(env, options, |report| {
        format!(
            "riffle sql: {} rows read in {:.1} s",
            human(rows_read(report.snapshot) as f64),
            report.elapsed.as_secs_f64()
        )
    })?;
    eprintln!(
        "riffle sql: done: {} rows read in {:.2} s",
        rows_read(&result.metrics),
        result.duration.as_secs_f64()
    );
    report_bad_records(env, &result, "riffle sql: ");
    Ok(result)
}

/// The rows a job's sources read.
pub(crate) fn rows_read(snapshot: &riffle::metrics::MetricsSnapshot) -> u64 {
    (snapshot.operators.iter())
        .filter(|o| o.name.starts_with("Source:"))
        .map(|o| o.records_out)
        .sum()
}

/// Says how many rows a finished job's sources could not read, and where they are kept (rows
/// are never dropped in silence); nothing when there were none.
pub(crate) fn report_bad_records(env: &StreamEnv, result: &riffle::JobResult, prefix: &str) {
    let bad = result.bad_records();
    if bad > 0 {
        eprintln!(
            "{prefix}{bad} bad record{} (rows a source could not read), kept with their errors \
             in {}/",
            if bad == 1 { "" } else { "s" },
            env.config().dead_letter_dir.display()
        );
    }
}

/// A SQL error as a configuration error naming the script.
pub(crate) fn sql_error(
    file: &std::path::Path,
) -> impl Fn(riffle_sql::SqlError) -> riffle::Error + '_ {
    move |e| riffle::Error::config("--file", format!("{}: {e}", file.display()))
}
