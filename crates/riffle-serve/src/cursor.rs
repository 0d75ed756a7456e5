//! Cursors over subscriptions, for drivers that read a subscription a batch at a time
//! (Materialize's form; psycopg's server-side cursors, JDBC's fetch size):
//!
//! ```sql
//! BEGIN;
//! DECLARE c CURSOR FOR SUBSCRIBE v;
//! FETCH ALL c;                           -- the view's rows (op 'insert'), at least one row
//! FETCH 100 c WITH (timeout = '1s');     -- up to 100 changes; none if none came within 1 s
//! CLOSE c;
//! COMMIT;
//! ```
//!
//! A `FETCH` returns up to its count of the rows the subscription has (the view's rows first,
//! then its changes, with the `progress` and `op` columns of `SUBSCRIBE`): at once when it has
//! any, else it waits for the first one, at most the `timeout` when one is given (`0s`: it does
//! not wait). `FETCH` without a count takes one row, `FETCH ALL` every row there is. A cursor
//! belongs to its connection; `COMMIT`, `ROLLBACK` and the end of the connection close it. A
//! cursor whose reader fell more than `--max-subscriber-lag` changes behind is cut off: its next
//! `FETCH` says so (SQLSTATE 53400).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use riffle_sql::{Row, Schema, Value};

use crate::engine::{Engine, Outcome, StatementError};
use crate::view::{Subscription, TryNext, ViewTable};

/// The cursors of one connection.
#[derive(Default)]
pub struct Cursors {
    open: tokio::sync::Mutex<HashMap<String, Cursor>>,
}

struct Cursor {
    view: Arc<ViewTable>,
    subscription: Subscription,
    /// The view's rows at the start, until they may be sent (a durable subscription's wait
    /// for a checkpoint holding them).
    snapshot: Option<Vec<Row>>,
    /// Rows received and not fetched yet: progress, op, the view's row.
    pending: VecDeque<(u64, &'static str, Row)>,
    /// The changes ended (the view was dropped, or the reader was cut off).
    ended: bool,
    /// `WITH (PROGRESS)`: a `progress` row after the rows at the start and after each batch.
    progress_rows: bool,
}

/// A cursor statement.
#[derive(Debug, PartialEq)]
pub(crate) enum Statement {
    /// `DECLARE name CURSOR [WITHOUT HOLD] FOR SUBSCRIBE ..`.
    Declare { name: String, subscribe: String },
    /// `FETCH [FORWARD] [n | ALL | NEXT] [FROM | IN] name [WITH (timeout = '..')]`.
    Fetch {
        name: String,
        /// `None`: all there is.
        count: Option<usize>,
        timeout: Option<Duration>,
    },
    /// `CLOSE name | ALL`.
    Close { name: Option<String> },
    /// `COMMIT`, `ROLLBACK`, `END`, `ABORT` (the word): the transaction's cursors close.
    EndTransaction(String),
}

fn syntax(message: impl Into<String>) -> StatementError {
    StatementError {
        code: "42601",
        message: message.into(),
    }
}

/// The words of `text` (up to a `WITH (` clause), and that clause's inside.
fn words(text: &str) -> (Vec<&str>, Option<&str>) {
    let text = text.trim().trim_end_matches(';').trim();
    let lower = text.to_ascii_lowercase();
    let (head, with) = match lower.find(" with (").or_else(|| lower.find(" with(")) {
        Some(at) => {
            let rest = &text[at..];
            let open = rest.find('(').map(|i| at + i + 1);
            let close = text.rfind(')');
            match (open, close) {
                (Some(open), Some(close)) if close > open => {
                    (&text[..at], Some(&text[open..close]))
                }
                _ => (text, None),
            }
        }
        None => (text, None),
    };
    (head.split_whitespace().collect(), with)
}

/// Reads a cursor statement (`None`: `text` is none).
pub(crate) fn parse(text: &str) -> Option<Result<Statement, StatementError>> {
    let (words, with) = words(text);
    let first = words.first()?.to_ascii_uppercase();
    let upper: Vec<String> = words.iter().map(|w| w.to_ascii_uppercase()).collect();
    match first.as_str() {
        "DECLARE" => {
            // DECLARE name [BINARY] [NO SCROLL] CURSOR [WITHOUT HOLD] FOR <query>
            let cursor = upper.iter().position(|w| w == "CURSOR")?;
            let name = words.get(1)?.to_string();
            let trimmed = text.trim().trim_end_matches(';');
            let lower = trimmed.to_ascii_lowercase();
            let for_at = lower
                .match_indices(" for ")
                .map(|(i, _)| i)
                .find(|&i| i > lower.find(" cursor").unwrap_or(0))?;
            let query = trimmed[for_at + 5..].trim().to_string();
            if upper[cursor + 1..]
                .iter()
                .take_while(|w| *w != "FOR")
                .any(|w| w == "WITH")
            {
                return Some(Err(StatementError {
                    code: "0A000",
                    message: "DECLARE .. CURSOR WITH HOLD is not supported: a cursor over a \
                              subscription closes with its transaction"
                        .into(),
                }));
            }
            Some(Ok(Statement::Declare {
                name,
                subscribe: query,
            }))
        }
        "FETCH" => Some(parse_fetch(&words, &upper, with)),
        "CLOSE" => match words.get(1) {
            Some(w) if w.eq_ignore_ascii_case("ALL") => Some(Ok(Statement::Close { name: None })),
            Some(name) if words.len() == 2 => Some(Ok(Statement::Close {
                name: Some(name.to_string()),
            })),
            _ => Some(Err(syntax("CLOSE takes a cursor's name, or ALL"))),
        },
        "COMMIT" | "ROLLBACK" | "END" | "ABORT" => Some(Ok(Statement::EndTransaction(first))),
        _ => None,
    }
}

fn parse_fetch(
    words: &[&str],
    upper: &[String],
    with: Option<&str>,
) -> Result<Statement, StatementError> {
    let mut i = 1;
    let mut count = Some(1);
    if upper.get(i).is_some_and(|w| w == "FORWARD") {
        i += 1;
    }
    match upper.get(i).map(String::as_str) {
        Some("ALL") => {
            count = None;
            i += 1;
        }
        Some("NEXT") => i += 1,
        Some(w) if w.parse::<usize>().is_ok() => {
            count = Some(w.parse::<usize>().expect("checked"));
            i += 1;
        }
        _ => {}
    }
    if upper.get(i).is_some_and(|w| w == "FROM" || w == "IN") {
        i += 1;
    }
    let name = match (words.get(i), words.len()) {
        (Some(name), n) if n == i + 1 => name.to_string(),
        _ => {
            return Err(syntax(
                "FETCH [FORWARD] [n | ALL | NEXT] [FROM] cursor [WITH (timeout = '1s')]",
            ));
        }
    };
    let timeout = match with {
        None => None,
        Some(options) => Some(parse_timeout(options)?),
    };
    Ok(Statement::Fetch {
        name,
        count,
        timeout,
    })
}

/// `timeout = '1s'` (also `500ms`, `2min`, a number of seconds).
fn parse_timeout(options: &str) -> Result<Duration, StatementError> {
    let bad = || {
        syntax(format!(
            "FETCH .. WITH ({options}): the option is timeout = '<duration>'"
        ))
    };
    let (key, value) = options.split_once('=').ok_or_else(bad)?;
    if !key.trim().eq_ignore_ascii_case("timeout") {
        return Err(bad());
    }
    let value = value.trim().trim_matches('\'').trim();
    let number_end = value
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(value.len());
    let number: f64 = value[..number_end].parse().map_err(|_| bad())?;
    let millis = match value[number_end..].trim() {
        "ms" => number,
        "" | "s" => number * 1_000.0,
        "min" | "m" => number * 60_000.0,
        "h" => number * 3_600_000.0,
        _ => return Err(bad()),
    };
    if !millis.is_finite() || millis < 0.0 {
        return Err(bad());
    }
    Ok(Duration::from_millis(millis as u64))
}

impl Cursors {
    /// Runs a cursor statement of this connection.
    pub(crate) async fn execute(
        &self,
        engine: &Engine,
        statement: Statement,
    ) -> Result<Outcome, StatementError> {
        match statement {
            Statement::Declare { name, subscribe } => {
                let request = engine.subscription(&subscribe).unwrap_or_else(|| {
                    Err(StatementError {
                        code: "0A000",
                        message: format!(
                            "DECLARE {name} CURSOR: a cursor reads a subscription here \
                             (DECLARE {name} CURSOR FOR SUBSCRIBE v); for a query, SELECT"
                        ),
                    })
                })?;
                if request.copy {
                    return Err(syntax("DECLARE .. CURSOR FOR SUBSCRIBE v (not COPY)"));
                }
                let mut open = self.open.lock().await;
                if open.contains_key(&name) {
                    return Err(StatementError {
                        code: "42P03",
                        message: format!("cursor `{name}` already exists"),
                    });
                }
                let mut subscription =
                    request
                        .view
                        .subscribe(&request.options)
                        .map_err(|e| StatementError {
                            code: e.code,
                            message: e.message,
                        })?;
                let snapshot = Some(std::mem::take(&mut subscription.snapshot));
                open.insert(
                    name,
                    Cursor {
                        view: request.view,
                        subscription,
                        snapshot,
                        pending: VecDeque::new(),
                        ended: false,
                        progress_rows: request.options.progress,
                    },
                );
                Ok(Outcome::Done("DECLARE CURSOR".into()))
            }
            Statement::Fetch {
                name,
                count,
                timeout,
            } => {
                let mut open = self.open.lock().await;
                let cursor = open.get_mut(&name).ok_or_else(|| no_cursor(&name))?;
                cursor.fetch(count, timeout).await
            }
            Statement::Close { name: Some(name) } => {
                let mut open = self.open.lock().await;
                open.remove(&name).ok_or_else(|| no_cursor(&name))?;
                Ok(Outcome::Done("CLOSE CURSOR".into()))
            }
            Statement::Close { name: None } => {
                self.open.lock().await.clear();
                Ok(Outcome::Done("CLOSE CURSOR".into()))
            }
            Statement::EndTransaction(word) => {
                self.open.lock().await.clear();
                Ok(Outcome::Done(word))
            }
        }
    }

    /// The columns `FETCH .. name` returns, when the cursor is open.
    pub(crate) async fn schema(&self, name: &str) -> Option<Schema> {
        let open = self.open.lock().await;
        open.get(name).map(|c| c.view.subscription_schema())
    }
}

fn no_cursor(name: &str) -> StatementError {
    StatementError {
        code: "34000",
        message: format!("cursor `{name}` does not exist"),
    }
}

impl Cursor {
    /// Moves the batches that may be sent now into `pending`.
    fn drain(&mut self) {
        loop {
            match self.subscription.try_next() {
                TryNext::Batch(batch) => self.take(&batch),
                TryNext::Nothing => return,
                TryNext::Ended => {
                    self.ended = true;
                    return;
                }
            }
        }
    }

    /// Moves the view's starting rows into `pending` once they may be sent (waiting until
    /// `deadline` at most); whether they have been.
    async fn release_snapshot(&mut self, deadline: Option<tokio::time::Instant>) -> bool {
        let Some(rows) = self.snapshot.take() else {
            return true;
        };
        let progress = self.subscription.progress;
        let ready = self.subscription.ready_to_send(progress);
        let ready = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, ready).await.ok(),
            None => Some(ready.await),
        };
        match ready {
            Some(true) => {
                self.pending
                    .extend(rows.into_iter().map(|row| (progress, "insert", row)));
                self.push_progress(progress);
                true
            }
            Some(false) => {
                self.ended = true;
                false
            }
            None => {
                self.snapshot = Some(rows);
                false
            }
        }
    }

    fn take(&mut self, batch: &crate::view::ChangeBatch) {
        let keyed = self.view.key.is_some();
        for (progress, op, row) in crate::wire::subscription_rows(batch, keyed) {
            self.pending.push_back((progress, op, row.clone()));
        }
        self.push_progress(batch.progress);
    }

    /// With `WITH (PROGRESS)`: a `progress` row, the view's columns `NULL`.
    fn push_progress(&mut self, progress: u64) {
        if self.progress_rows {
            let nulls = Row(vec![Value::Null; self.view.schema.len()]);
            self.pending.push_back((progress, "progress", nulls));
        }
    }

    async fn fetch(
        &mut self,
        count: Option<usize>,
        timeout: Option<Duration>,
    ) -> Result<Outcome, StatementError> {
        let deadline = timeout.map(|limit| tokio::time::Instant::now() + limit);
        if self.release_snapshot(deadline).await {
            self.drain();
            if self.pending.is_empty() && !self.ended {
                let next = self.subscription.next();
                let received = match deadline {
                    Some(deadline) => tokio::time::timeout_at(deadline, next).await.ok(),
                    None => Some(next.await),
                };
                match received {
                    Some(Some(batch)) => {
                        self.take(&batch);
                        self.drain();
                    }
                    Some(None) => self.ended = true,
                    None => {}
                }
            }
        }
        if self.pending.is_empty()
            && self.ended
            && let Some(reason) = self.subscription.cut_off()
        {
            return Err(StatementError {
                code: reason.code,
                message: reason.message,
            });
        }
        let take = count.unwrap_or(usize::MAX).min(self.pending.len());
        let rows = self
            .pending
            .drain(..take)
            .map(|(progress, op, row)| {
                let mut values = Vec::with_capacity(row.0.len() + 2);
                values.push(Value::Int(progress as i64));
                values.push(Value::string(op));
                values.extend(row.0);
                Row(values)
            })
            .collect();
        Ok(Outcome::Rows {
            schema: self.view.subscription_schema(),
            rows,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_statements_are_read() {
        assert_eq!(
            parse("DECLARE c CURSOR FOR SUBSCRIBE v;").unwrap().unwrap(),
            Statement::Declare {
                name: "c".into(),
                subscribe: "SUBSCRIBE v".into()
            }
        );
        assert_eq!(
            parse("declare c no scroll cursor without hold for subscribe to v")
                .unwrap()
                .unwrap(),
            Statement::Declare {
                name: "c".into(),
                subscribe: "subscribe to v".into()
            }
        );
        assert!(
            parse("DECLARE c CURSOR WITH HOLD FOR SUBSCRIBE v")
                .unwrap()
                .is_err()
        );
        let fetch = |text: &str| parse(text).unwrap().unwrap();
        assert_eq!(
            fetch("FETCH c"),
            Statement::Fetch {
                name: "c".into(),
                count: Some(1),
                timeout: None
            }
        );
        assert_eq!(
            fetch("FETCH ALL FROM c"),
            Statement::Fetch {
                name: "c".into(),
                count: None,
                timeout: None
            }
        );
        assert_eq!(
            fetch("fetch forward 100 in c with (timeout = '1.5s');"),
            Statement::Fetch {
                name: "c".into(),
                count: Some(100),
                timeout: Some(Duration::from_millis(1_500))
            }
        );
        assert_eq!(
            fetch("FETCH 5 c WITH (TIMEOUT = '0s')"),
            Statement::Fetch {
                name: "c".into(),
                count: Some(5),
                timeout: Some(Duration::ZERO)
            }
        );
        for bad in [
            "FETCH",
            "FETCH 5",
            "FETCH c d",
            "FETCH c WITH (size = 3)",
            "FETCH c WITH (timeout = 'soon')",
            "FETCH c WITH (timeout = '-1s')",
            "CLOSE",
        ] {
            assert!(parse(bad).unwrap().is_err(), "{bad}");
        }
        assert_eq!(fetch("CLOSE ALL"), Statement::Close { name: None });
        assert_eq!(
            fetch("close c"),
            Statement::Close {
                name: Some("c".into())
            }
        );
        assert_eq!(fetch("commit;"), Statement::EndTransaction("COMMIT".into()));
        assert!(parse("SELECT 1").is_none());
        assert!(parse("SUBSCRIBE v").is_none());
    }
}
