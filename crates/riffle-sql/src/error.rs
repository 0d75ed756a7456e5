//! The errors of SQL: where in the script, and what is wrong, never a panic.

use sqlparser::tokenizer::Location;

/// A statement Riffle cannot parse, plan or run, with where it is in the script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlError {
    /// What is wrong (it names the construct and, for what Riffle cannot run, why).
    pub message: String,
    /// Where, in the script (line and column, from 1), when known.
    pub location: Option<Location>,
}

impl SqlError {
    /// An error at `location`.
    pub fn new(message: impl Into<String>, location: Option<Location>) -> SqlError {
        SqlError {
            message: message.into(),
            location,
        }
    }

    /// An error with no location (planning a whole statement).
    pub fn plan(message: impl Into<String>) -> SqlError {
        SqlError::new(message, None)
    }
}

impl std::fmt::Display for SqlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.location {
            Some(at) if at.line > 0 => {
                write!(
                    f,
                    "line {}, column {}: {}",
                    at.line, at.column, self.message
                )
            }
            _ => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for SqlError {}

impl From<SqlError> for riffle::Error {
    fn from(e: SqlError) -> riffle::Error {
        riffle::Error::config("sql", e.to_string())
    }
}

impl From<riffle::Error> for SqlError {
    fn from(e: riffle::Error) -> SqlError {
        SqlError::plan(e.to_string())
    }
}

/// `Result` with [`SqlError`].
pub type Result<T, E = SqlError> = std::result::Result<T, E>;
