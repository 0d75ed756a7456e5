//! A session's transaction isolation, by Postgres' rules: under `READ COMMITTED` (the
//! default) each statement reads the views as they are when it starts; under `REPEATABLE READ`
//! or `SERIALIZABLE` every read of a transaction block sees each view as the block's first read
//! of it saw it ([`BlockSnapshot`]).
//!
//! The level comes from `BEGIN ISOLATION LEVEL ..` / `START TRANSACTION ISOLATION LEVEL ..`,
//! `SET TRANSACTION ISOLATION LEVEL ..` (before the block's first query), or the session's
//! default (`SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL ..`,
//! `SET default_transaction_isolation = '..'`); `SHOW transaction_isolation` tells it.
//!
//! ```
//! use riffle_serve::isolation::{Isolation, Transaction};
//!
//! let mut session = Transaction::default();
//! session.begin("BEGIN ISOLATION LEVEL REPEATABLE READ");
//! assert_eq!(session.isolation(), Isolation::RepeatableRead);
//! assert!(session.snapshot().is_some());
//! session.end();
//! assert!(session.snapshot().is_none());
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use riffle_sql::{DataType, Field, Row, Schema, Value};

use crate::engine::{Outcome, StatementError};
use crate::view::ViewTable;

/// A transaction's isolation level (`READ UNCOMMITTED` is `READ COMMITTED`, as in Postgres).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Isolation {
    /// Each statement reads the views as they are when it starts.
    #[default]
    ReadCommitted,
    /// Every read of a block sees each view as the block's first read of it did.
    RepeatableRead,
    /// As `RepeatableRead` (a block only reads here: no write can conflict).
    Serializable,
}

impl Isolation {
    /// The level `words` name (`REPEATABLE READ`, `'serializable'`, ...), if any.
    fn parse(words: &[String]) -> Option<Isolation> {
        let words: Vec<String> = words
            .iter()
            .flat_map(|w| w.trim_matches(|c| c == '\'' || c == ';').split_whitespace())
            .map(str::to_ascii_uppercase)
            .collect();
        match words.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            ["READ", "COMMITTED", ..] | ["READ", "UNCOMMITTED", ..] => {
                Some(Isolation::ReadCommitted)
            }
            ["REPEATABLE", "READ", ..] => Some(Isolation::RepeatableRead),
            ["SERIALIZABLE", ..] => Some(Isolation::Serializable),
            _ => None,
        }
    }

    /// How Postgres spells the level (`SHOW transaction_isolation`).
    pub fn name(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "read committed",
            Isolation::RepeatableRead => "repeatable read",
            Isolation::Serializable => "serializable",
        }
    }
}

/// The rows of each view a transaction block has read, as its first read of the view saw
/// them: its later reads of the view see the same rows.
#[derive(Default)]
pub struct BlockSnapshot {
    views: HashMap<String, (Arc<ViewTable>, Arc<Vec<Row>>)>,
}

impl BlockSnapshot {
    /// The rows of `view` this block reads: taken from the view on the block's first read of
    /// it. A view dropped and created again since then cannot be read in the block (`40001`).
    pub fn rows(&mut self, view: &Arc<ViewTable>) -> Result<Arc<Vec<Row>>, StatementError> {
        match self.views.get(&view.name) {
            Some((table, rows)) if Arc::ptr_eq(table, view) => Ok(rows.clone()),
            Some(_) => Err(StatementError::new(
                "40001",
                format!(
                    "could not serialize access: materialized view `{}` was dropped and created again since this transaction block first read it",
                    view.name
                ),
            )),
            None => {
                let rows = Arc::new(
                    view.try_rows()
                        .map_err(|e| crate::engine::unreadable(view, e))?
                        .0,
                );
                self.views
                    .insert(view.name.clone(), (view.clone(), rows.clone()));
                Ok(rows)
            }
        }
    }
}

/// A session's isolation: its default level, and its open transaction block.
#[derive(Default)]
pub struct Transaction {
    default: Isolation,
    block: Option<Block>,
}

struct Block {
    isolation: Isolation,
    /// Whether a query ran in the block (its level is fixed from then on).
    queried: bool,
    snapshot: BlockSnapshot,
}

impl Transaction {
    /// A block opens (`BEGIN` or `START TRANSACTION`, with the level it may name); a `BEGIN`
    /// inside a block changes nothing, as in Postgres.
    pub fn begin(&mut self, statement: &str) {
        if self.block.is_some() {
            return;
        }
        let words = words(statement);
        let isolation = level_after(&words, &["ISOLATION", "LEVEL"]).unwrap_or(self.default);
        self.block = Some(Block {
            isolation,
            queried: false,
            snapshot: BlockSnapshot::default(),
        });
    }

    /// The block ends (`COMMIT` or `ROLLBACK`): its snapshot goes.
    pub fn end(&mut self) {
        self.block = None;
    }

    /// The level of the open block, or the session's default outside one.
    pub fn isolation(&self) -> Isolation {
        self.block.as_ref().map_or(self.default, |b| b.isolation)
    }

    /// The snapshot a read of the open block uses, when its level holds one (and the block's
    /// level is fixed from then on).
    pub fn snapshot(&mut self) -> Option<&mut BlockSnapshot> {
        let block = self.block.as_mut()?;
        block.queried = true;
        match block.isolation {
            Isolation::ReadCommitted => None,
            Isolation::RepeatableRead | Isolation::Serializable => Some(&mut block.snapshot),
        }
    }

    /// Answers `statement` when it sets or shows the isolation level; `None` for any other.
    pub fn statement(&mut self, statement: &str) -> Option<Result<Outcome, StatementError>> {
        // Every statement of the session comes here: a query is let go without splitting it.
        let first = statement.split_whitespace().next()?;
        if !first.eq_ignore_ascii_case("SET") && !first.eq_ignore_ascii_case("SHOW") {
            return None;
        }
        let words = words(statement);
        let word = |i: usize| words.get(i).map(String::as_str).unwrap_or("");
        let set = || Some(Ok(Outcome::Done("SET".into())));
        match (word(0), word(1)) {
            ("SET", "TRANSACTION") => {
                let Some(level) = level_after(&words, &["ISOLATION", "LEVEL"]) else {
                    // (`SET TRANSACTION READ ONLY` and the like: every block reads only.)
                    return set();
                };
                // Outside a block Postgres warns and changes nothing.
                if let Some(block) = self.block.as_mut() {
                    if block.queried && block.isolation != level {
                        return Some(Err(StatementError::new(
                            "25001",
                            "SET TRANSACTION ISOLATION LEVEL must be called before any query",
                        )));
                    }
                    block.isolation = level;
                }
                set()
            }
            ("SET", "SESSION") if word(2) == "CHARACTERISTICS" => {
                if let Some(level) = level_after(&words, &["ISOLATION", "LEVEL"]) {
                    self.default = level;
                }
                set()
            }
            ("SET", "DEFAULT_TRANSACTION_ISOLATION") => {
                let value: Vec<String> = words[2..]
                    .iter()
                    .filter(|w| !matches!(w.as_str(), "=" | "TO"))
                    .cloned()
                    .collect();
                match Isolation::parse(&value) {
                    Some(level) => {
                        self.default = level;
                        set()
                    }
                    None => Some(Err(StatementError::new(
                        "22023",
                        format!(
                            "invalid value for parameter \"default_transaction_isolation\": {}",
                            value.join(" ").to_ascii_lowercase()
                        ),
                    ))),
                }
            }
            ("SHOW", "TRANSACTION_ISOLATION") => {
                Some(Ok(show("transaction_isolation", self.isolation())))
            }
            ("SHOW", "TRANSACTION") if word(2) == "ISOLATION" => {
                Some(Ok(show("transaction_isolation", self.isolation())))
            }
            ("SHOW", "DEFAULT_TRANSACTION_ISOLATION") => {
                Some(Ok(show("default_transaction_isolation", self.default)))
            }
            _ => None,
        }
    }
}

/// The statement's words, upper case, `=` apart (`SET a='b'` is `SET`, `A`, `=`, `'B'`).
fn words(statement: &str) -> Vec<String> {
    statement
        .replace('=', " = ")
        .split(|c: char| c.is_whitespace() || c == ';' || c == ',')
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_uppercase)
        .collect()
}

/// The level named after the words `before` (`.. ISOLATION LEVEL REPEATABLE READ`).
fn level_after(words: &[String], before: &[&str]) -> Option<Isolation> {
    let at = words
        .windows(before.len())
        .position(|w| w.iter().zip(before).all(|(a, b)| a == b))?;
    Isolation::parse(&words[at + before.len()..])
}

fn show(name: &str, level: Isolation) -> Outcome {
    Outcome::Rows {
        schema: Schema::new(vec![Field::new(name, DataType::Varchar)]),
        rows: vec![Row(vec![Value::string(level.name())])],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(session: &mut Transaction, statement: &str) -> String {
        match session.statement(statement) {
            Some(Ok(Outcome::Rows { rows, .. })) => match &rows[0].0[0] {
                Value::String(level) => level.to_string(),
                other => panic!("`{statement}` showed {other:?}"),
            },
            _ => panic!("`{statement}` showed nothing"),
        }
    }

    #[test]
    fn the_level_comes_from_begin_set_transaction_or_the_sessions_default() {
        let mut s = Transaction::default();
        assert_eq!(
            shown(&mut s, "SHOW transaction_isolation"),
            "read committed"
        );
        s.begin("START TRANSACTION ISOLATION LEVEL SERIALIZABLE, READ ONLY");
        assert_eq!(s.isolation(), Isolation::Serializable);
        s.end();
        assert_eq!(s.isolation(), Isolation::ReadCommitted);
        s.begin("BEGIN");
        assert!(
            s.statement("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                .is_some()
        );
        assert_eq!(
            shown(&mut s, "SHOW TRANSACTION ISOLATION LEVEL"),
            "repeatable read"
        );
        assert!(s.snapshot().is_some());
        // After a query the level is fixed.
        match s.statement("SET TRANSACTION ISOLATION LEVEL READ COMMITTED") {
            Some(Err(e)) => assert_eq!(e.code, "25001"),
            _ => panic!("the level changed after a query"),
        }
        s.end();
        assert!(s.snapshot().is_none(), "no block, no snapshot");
        s.statement("SET default_transaction_isolation = 'repeatable read'");
        assert_eq!(
            shown(&mut s, "show default_transaction_isolation"),
            "repeatable read"
        );
        s.begin("begin;");
        assert!(s.snapshot().is_some());
        s.end();
        s.statement("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ UNCOMMITTED");
        s.begin("BEGIN");
        assert!(s.snapshot().is_none(), "read uncommitted is read committed");
        match s.statement("SET default_transaction_isolation TO 'sometimes'") {
            Some(Err(e)) => assert_eq!(e.code, "22023"),
            _ => panic!("a bad level was taken"),
        }
        assert!(s.statement("SELECT 1").is_none());
    }
}
