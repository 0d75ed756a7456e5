//! Helpers shared by the SQL test binaries.

use riffle_sql::{Row, Value};

/// A row as the tests write their expectations: `[1, ann, NULL]`.
pub fn row_text(row: &Row) -> String {
    let values: Vec<String> = row
        .0
        .iter()
        .map(|v| match v {
            Value::Int(i) => i.to_string(),
            Value::String(s) => s.to_string(),
            Value::Null => "NULL".into(),
            other => format!("{other:?}"),
        })
        .collect();
    format!("[{}]", values.join(", "))
}
