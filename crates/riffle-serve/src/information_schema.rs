//! `information_schema.tables`, `information_schema.columns` and `pg_catalog.pg_matviews`:
//! what clients read to list a database's relations and their columns (table and column
//! pickers of Grafana, DBeaver, dbt's adapter), answered from the server's catalog as
//! bounded tables a `SELECT` reads like a view's rows.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use riffle_sql::parse::{ColumnDef, Statement, TableDef};
use riffle_sql::plan::Catalog;
use riffle_sql::{DataType, Field, Row, Schema, Value};

use crate::view::ViewTable;

/// The database and schema every relation is in.
const DATABASE: &str = "riffle";
const SCHEMA: &str = "public";

/// A relation of the catalog: its name, its `table_type`, its columns (when they can be told).
pub(crate) struct Relation {
    pub(crate) name: String,
    pub(crate) kind: &'static str,
    pub(crate) columns: Vec<Field>,
    pub(crate) definition: Option<String>,
}

/// Whether `text` (a query) reads one of these relations.
pub(crate) fn is_read_by(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    text.contains("information_schema.") || text.contains("pg_matviews")
}

/// The relations as bounded tables, to put into the catalog a query is planned in.
pub(crate) fn tables(relations: &[Relation]) -> Vec<TableDef> {
    let varchar = |name: &str| Field::new(name, DataType::Varchar);
    let tables = Schema::new(vec![
        varchar("table_catalog"),
        varchar("table_schema"),
        varchar("table_name"),
        varchar("table_type"),
    ]);
    let table_rows = relations
        .iter()
        .map(|r| {
            Row(vec![
                Value::string(DATABASE),
                Value::string(SCHEMA),
                Value::string(&r.name),
                Value::string(r.kind),
            ])
        })
        .collect();
    let columns = Schema::new(vec![
        varchar("table_catalog"),
        varchar("table_schema"),
        varchar("table_name"),
        varchar("column_name"),
        Field::new("ordinal_position", DataType::Int),
        varchar("is_nullable"),
        varchar("data_type"),
    ]);
    let column_rows = relations
        .iter()
        .flat_map(|r| {
            r.columns.iter().enumerate().map(|(i, field)| {
                Row(vec![
                    Value::string(DATABASE),
                    Value::string(SCHEMA),
                    Value::string(&r.name),
                    Value::string(&field.name),
                    Value::Int(i as i64 + 1),
                    Value::string(if field.nullable { "YES" } else { "NO" }),
                    Value::string(data_type(&field.ty)),
                ])
            })
        })
        .collect();
    let matviews = Schema::new(vec![
        varchar("schemaname"),
        varchar("matviewname"),
        varchar("matviewowner"),
        varchar("definition"),
    ]);
    let matview_rows = relations
        .iter()
        .filter(|r| r.kind == "MATERIALIZED VIEW")
        .map(|r| {
            Row(vec![
                Value::string(SCHEMA),
                Value::string(&r.name),
                Value::string(DATABASE),
                Value::string(r.definition.as_deref().unwrap_or("")),
            ])
        })
        .collect();
    vec![
        table("information_schema.tables", tables, table_rows),
        table("information_schema.columns", columns, column_rows),
        table("pg_catalog.pg_matviews", matviews, matview_rows),
    ]
}

/// A bounded table of `rows`.
pub(crate) fn table(name: &str, schema: Schema, rows: Vec<Row>) -> TableDef {
    TableDef {
        name: name.to_string(),
        columns: schema.fields.into_iter().map(ColumnDef::Physical).collect(),
        watermark: None,
        primary_key: Vec::new(),
        options: BTreeMap::from([("connector".to_string(), "riffle-catalog".to_string())]),
        partition_keys: Vec::new(),
        rows: Some(Arc::new(rows)),
        changes: None,
        shared: None,
    }
}

/// The catalog's tables (`BASE TABLE`), views (`VIEW`) and materialized views, by name.
pub(crate) fn relations(
    catalog: &Catalog,
    views: &HashMap<String, Arc<ViewTable>>,
    queries: &BTreeMap<String, String>,
) -> Vec<Relation> {
    let mut relations = Vec::new();
    for (name, def) in &catalog.tables {
        if def.rows.is_some() {
            continue;
        }
        // Computed columns have the type their expression plans to.
        let columns = columns_of(catalog, name).unwrap_or_else(|| {
            def.columns
                .iter()
                .filter_map(|c| match c {
                    ColumnDef::Physical(field) => Some(field.clone()),
                    ColumnDef::Computed { .. } => None,
                })
                .collect()
        });
        relations.push(Relation {
            name: name.clone(),
            kind: "BASE TABLE",
            columns,
            definition: None,
        });
    }
    for (name, query) in &catalog.views {
        if views.contains_key(name) {
            continue;
        }
        relations.push(Relation {
            name: name.clone(),
            kind: "VIEW",
            columns: columns_of(catalog, name).unwrap_or_default(),
            definition: Some(query.to_string()),
        });
    }
    for (name, view) in views {
        relations.push(Relation {
            name: name.clone(),
            kind: "MATERIALIZED VIEW",
            columns: view.schema.fields.clone(),
            definition: queries.get(name).cloned(),
        });
    }
    relations.sort_by(|a, b| a.name.cmp(&b.name));
    relations
}

/// The columns of relation `name`, as `SELECT *` from it plans.
fn columns_of(catalog: &Catalog, name: &str) -> Option<Vec<Field>> {
    // (A name that needs quoting keeps its physical columns.)
    if !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return None;
    }
    let Ok(Statement::Query(query)) =
        riffle_sql::parse::parse_statement(&format!("SELECT * FROM {name}"))
    else {
        return None;
    };
    catalog
        .plan_query(&query)
        .ok()
        .map(|plan| plan.schema().fields.clone())
}

/// A type's name as Postgres' `information_schema.columns.data_type` says it.
fn data_type(ty: &DataType) -> &'static str {
    match ty {
        DataType::Boolean => "boolean",
        DataType::TinyInt | DataType::SmallInt => "smallint",
        DataType::Int => "integer",
        DataType::BigInt => "bigint",
        DataType::Float => "real",
        DataType::Double => "double precision",
        DataType::Decimal { .. } => "numeric",
        DataType::Varchar => "character varying",
        DataType::Date => "date",
        DataType::Timestamp { .. } => "timestamp without time zone",
        DataType::TimestampLtz { .. } => "timestamp with time zone",
        DataType::Interval => "interval",
        DataType::Array(_) => "ARRAY",
        DataType::Row(_) | DataType::Map(..) | DataType::Null => "USER-DEFINED",
    }
}
