//! `riffle sql -f job.sql`: runs a SQL script (without `-f`: the interactive client,
//! [`crate::sql_client`]) in Flink's dialect (docs/sql.md). Its DDL
//! registers tables, views and functions; its `INSERT INTO` statements (and queries, whose rows
//! are printed as `+I[...]` lines) run as one job with the same engine options as the demos:
//! parallelism, checkpoints, `--restore`, `--state-backend`, the web UI and the progress line.

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
}

/// The functions every script can call: Nexmark's `count_char(text, 'c')` (q14, which names it
/// by `CREATE FUNCTION`), and the seed's `is_bot(user_agent)` and `ip_country(ip)` (`riffle
/// demo`'s bot filter and IP-prefix table; `examples/sql/clicks.sql`).
pub fn register_functions(sql: &SqlEnv) {
    for (name, function) in functions() {
        sql.register_function(name, function);
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
        return crate::sql_client::run(args);
    };
    let script = std::fs::read_to_string(file)
        .map_err(|e| riffle::Error::config("--file", format!("`{}`: {e}", file.display())))?;
    let env = StreamEnv::with_config(args.engine.env_config("sql")?);
    let sql = SqlEnv::new(&env);
    register_functions(&sql);
    define_all(&sql, &args.defines)?;
    if args.explain {
        for plan in sql.explain_sql(&script).map_err(sql_error(file))? {
            println!("{plan}\n");
        }
        return Ok(());
    }
    let done = sql.execute_sql(&script).map_err(sql_error(file))?;
    let mut jobs = 0;
    for executed in &done {
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
    if jobs == 0 {
        return Ok(());
    }
    let options = args.engine.run_options()?;
    let (result, _) = run_with_progress(&env, &options, |report| {
        let read: u64 = report
            .snapshot
            .operators
            .iter()
            .filter(|o| o.name.starts_with("Source:"))
            .map(|o| o.records_out)
            .sum();
        format!(
            "riffle sql: {} rows read in {:.1} s",
            human(read as f64),
            report.elapsed.as_secs_f64()
        )
    })?;
    let read: u64 = result
        .metrics
        .operators
        .iter()
        .filter(|o| o.name.starts_with("Source:"))
        .map(|o| o.records_out)
        .sum();
    eprintln!(
        "riffle sql: done: {read} rows read in {:.2} s",
        result.duration.as_secs_f64()
    );
    Ok(())
}

/// A SQL error as a configuration error naming the script.
fn sql_error(file: &std::path::Path) -> impl Fn(riffle_sql::SqlError) -> riffle::Error + '_ {
    move |e| riffle::Error::config("--file", format!("{}: {e}", file.display()))
}
