//! `riffle sql` without a file: the interactive SQL client, as Flink's SQL client. Statements
//! end with `;` and may span lines; the line editor keeps a history
//! (`$HOME/.riffle_sql_history`). DDL and `SET` change the session; a query runs as a job whose
//! rows are printed while they arrive (`| op | col | .. |`, `op` being `+I`, `-U`, `+U` or `-D`)
//! until its input ends or Ctrl-C stops it; an `INSERT INTO` runs as a job the same way.
//! `SHOW TABLES`, `DESCRIBE t`, `EXPLAIN ..`, `SET` (the options), `HELP` and `QUIT` are the
//! client's own. Standard input that is not a terminal is read the same way, line by line, so a
//! script can be piped in.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use riffle::{Change, StreamEnv};
use riffle_sql::parse::Statement;
use riffle_sql::{Row, Schema, SqlEnv};
use rustyline::error::ReadlineError;

use crate::progress::{human, reset_interrupts, run_with_progress};
use crate::sql::{SqlArgs, report_bad_records, rows_read};

const HELP: &str = "\
Statements end with ';' and may span several lines.
  CREATE TABLE t (..) WITH ('connector' = ..);   register a table (docs/sql.md: connectors)
  CREATE VIEW v AS SELECT ..;                     register a view
  SELECT ..;                                      run a query, its rows printed as they arrive
                                                  (Ctrl-C stops it)
  INSERT INTO t SELECT ..;                        run a job writing into t
  EXPLAIN SELECT ..;                              the plan, as Riffle operators
  SHOW TABLES;                                    the tables and views
  DESCRIBE t;                                     the columns of a table or view
  SET 'key' = 'value';  SET;                      set an option; list them
  HELP;  QUIT;";

/// What the client does after a statement.
enum Next {
    Continue,
    Quit,
}

/// Runs the client until `QUIT;`, the end of its input, or Ctrl-D.
pub fn run(args: &SqlArgs) -> riffle::Result<()> {
    let session = SqlEnv::new(&StreamEnv::new());
    crate::sql::register_functions(&session);
    crate::sql::define_all(&session, &args.defines)?;
    let mut editor = rustyline::DefaultEditor::new()
        .map_err(|e| riffle::Error::user(format!("cannot start the line editor: {e}")))?;
    let history = std::env::var_os("HOME")
        .map(|home| std::path::PathBuf::from(home).join(".riffle_sql_history"));
    if let Some(path) = &history {
        let _ = editor.load_history(path);
    }
    eprintln!("Riffle SQL client (Flink's dialect). HELP; for the statements, QUIT; to leave.");
    let mut statement = String::new();
    loop {
        let prompt = if statement.is_empty() {
            "riffle> "
        } else {
            "      > "
        };
        match editor.readline(prompt) {
            Ok(line) => {
                statement.push_str(&line);
                statement.push('\n');
                if !ends_statement(&statement) {
                    continue;
                }
                let text = std::mem::take(&mut statement);
                let _ = editor.add_history_entry(text.trim());
                match execute(&session, args, text.trim()) {
                    Ok(Next::Continue) => {}
                    Ok(Next::Quit) => break,
                    Err(e) => eprintln!("[ERROR] {e}"),
                }
            }
            // Ctrl-C at the prompt drops the statement being typed.
            Err(ReadlineError::Interrupted) => statement.clear(),
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(riffle::Error::user(format!("cannot read a line: {e}"))),
        }
    }
    if let Some(path) = &history {
        let _ = editor.save_history(path);
    }
    Ok(())
}

/// Whether `text` ends a statement: its last character outside quotes and comments is `;`.
fn ends_statement(text: &str) -> bool {
    let mut quote: Option<char> = None;
    let mut last = None;
    for line in text.lines() {
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match quote {
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None if c == '\'' || c == '"' || c == '`' => quote = Some(c),
                None if c == '-' && chars.peek() == Some(&'-') => break,
                None if !c.is_whitespace() => last = Some(c),
                None => {}
            }
            if quote.is_some() {
                last = Some(c);
            }
        }
    }
    quote.is_none() && last == Some(';')
}

/// Runs one statement of the client.
fn execute(session: &SqlEnv, args: &SqlArgs, text: &str) -> riffle::Result<Next> {
    let bare = text.trim_end_matches(';').trim();
    let words: Vec<String> = bare
        .split_whitespace()
        .map(|w| w.to_ascii_uppercase())
        .collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let failed = |e: riffle_sql::SqlError| riffle::Error::user(e.to_string());
    match words.as_slice() {
        [] => {}
        ["HELP"] => println!("{HELP}"),
        ["QUIT"] | ["EXIT"] => return Ok(Next::Quit),
        ["SHOW", "TABLES"] => {
            for name in session.names() {
                println!("{name}");
            }
        }
        ["DESCRIBE" | "DESC", _] => {
            let name = bare.split_whitespace().nth(1).unwrap_or_default();
            let schema = session.describe(name).map_err(failed)?;
            println!("| name | type | null |");
            for field in &schema.fields {
                println!(
                    "| {} | {} | {} |",
                    field.name,
                    field.ty,
                    if field.nullable { "TRUE" } else { "FALSE" }
                );
            }
        }
        ["SET"] => {
            for (key, value) in session.options() {
                println!("'{key}' = '{value}'");
            }
        }
        ["EXPLAIN", ..] => {
            for plan in session.explain_sql(text).map_err(failed)? {
                println!("{plan}");
            }
        }
        _ => match riffle_sql::parse::parse_statement(text).map_err(failed)? {
            Statement::Query(_) => run_query(session, args, text)?,
            Statement::Insert { table, .. } => run_insert(session, args, text, &table)?,
            _ => {
                for done in session.execute_sql(text).map_err(failed)? {
                    println!("[INFO] {done:?}");
                }
            }
        },
    }
    Ok(Next::Continue)
}

/// Runs a query as a job of its own, printing its rows as they arrive.
fn run_query(session: &SqlEnv, args: &SqlArgs, text: &str) -> riffle::Result<()> {
    let env = StreamEnv::with_config(args.engine.env_config("sql-client")?);
    let job = session.with_env(&env);
    let (changes, schema) = job
        .sql_changelog(text)
        .map_err(|e| riffle::Error::user(e.to_string()))?;
    println!("{}", header(&schema));
    let rows = Arc::new(AtomicU64::new(0));
    let counted = rows.clone();
    changes
        .sink_fn(move |change: Change<Row>| {
            counted.fetch_add(1, Ordering::Relaxed);
            println!("{}", tableau(&change, &schema));
            Ok(())
        })
        .name("Sink: client")
        .set_parallelism(1);
    run_job(&env, args)?;
    eprintln!("[INFO] {} rows", rows.load(Ordering::Relaxed));
    Ok(())
}

/// Runs an `INSERT INTO table ..` as a job until its input ends or Ctrl-C stops it.
fn run_insert(session: &SqlEnv, args: &SqlArgs, text: &str, table: &str) -> riffle::Result<()> {
    let env = StreamEnv::with_config(args.engine.env_config("sql-client")?);
    session
        .with_env(&env)
        .execute_sql(text)
        .map_err(|e| riffle::Error::user(e.to_string()))?;
    let read = run_job(&env, args)?;
    eprintln!("[INFO] INSERT INTO {table}: {read} rows read");
    Ok(())
}

/// Runs a client's job with the progress line; Ctrl-C stops it (and only it). The rows read.
fn run_job(env: &StreamEnv, args: &SqlArgs) -> riffle::Result<u64> {
    reset_interrupts();
    let options = args.engine.run_options()?;
    let ran = run_with_progress(env, &options, |report| {
        format!(
            "{} rows read in {:.1} s (Ctrl-C stops the query)",
            human(rows_read(report.snapshot) as f64),
            report.elapsed.as_secs_f64()
        )
    });
    reset_interrupts();
    let (result, _) = ran?;
    report_bad_records(env, &result, "[WARN] ");
    Ok(rows_read(&result.metrics))
}

/// The header of a query's rows: `| op | a | b |`.
fn header(schema: &Schema) -> String {
    let names: Vec<&str> = schema.fields.iter().map(|f| f.name.as_str()).collect();
    format!("| op | {} |", names.join(" | "))
}

/// A change as a row of the client's table: `| +I | 1 | ann |`.
fn tableau(change: &Change<Row>, schema: &Schema) -> String {
    let values: Vec<String> = change
        .row
        .0
        .iter()
        .zip(&schema.fields)
        .map(|(value, field)| riffle_sql::format::display(value, &field.ty))
        .collect();
    format!("| {} | {} |", change.op.short_string(), values.join(" | "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_ends_at_a_semicolon_outside_quotes_and_comments() {
        assert!(ends_statement("SHOW TABLES;"));
        assert!(ends_statement("SELECT 1\nFROM t;  \n"));
        assert!(!ends_statement("SELECT 1\nFROM t"));
        assert!(!ends_statement("SELECT ';"));
        assert!(ends_statement("SELECT ';' FROM t;"));
        assert!(!ends_statement("SELECT 1 FROM t -- ends here;"));
        assert!(ends_statement("SELECT 1 FROM t; -- done"));
    }
}
