//! `pg_catalog`: the system tables psql's `\d`, `\dt`, `\dv`, `\dm`, `\d NAME`, `\d+ NAME`, `\l`,
//! `\dn`, `\du` and `\df` read (and drivers' metadata calls like them), answered from the server's catalog.
//!
//! A query naming `pg_catalog.` is parsed in Postgres' dialect (`~`, `OPERATOR(pg_catalog.~)`,
//! `::regclass`, `COLLATE`, `E'..'`) and rewritten into Flink SQL the planner runs over bounded
//! tables:
//! - `pg_class`, `pg_namespace`, `pg_attribute`, `pg_type`, `pg_am`, `pg_database`,
//!   `pg_tables` and `pg_views` hold the catalog's tables, views and materialized views, their
//!   columns and the types they are sent as, under the stable oids `oid_of` gives; `pg_roles`
//!   the users who may connect; `pg_proc` and `pg_language` the functions registered from Rust
//!   (`\df`): their result type when it does not depend on the arguments, any arguments;
//! - the functions psql calls (`pg_table_is_visible`, `format_type`, `pg_get_viewdef`, ...) are
//!   registered for that query only;
//! - a relation of what Riffle does not have (`pg_policy`, `pg_inherits`, `pg_publication`,
//!   `pg_statistic_ext`, `pg_rewrite`, `pg_index`, ...: no policies, inheritance, indexes or
//!   rules exist here) reads as empty; any other relation of `pg_catalog` is refused as
//!   unknown; a scalar subquery in a projection (psql's column defaults and collations, neither
//!   of which Riffle has) reads as `NULL`.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use pgwire::api::Type;
use riffle_sql::parse::TableDef;
use riffle_sql::plan::Catalog;
use riffle_sql::{DataType, Field, Row, ScalarFunction, Schema, Value};
use sqlparser::ast;
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

use crate::engine::StatementError;
use crate::information_schema::{self, Relation};

/// The namespaces: `pg_catalog`, `public` (every relation of the server) and
/// `information_schema`, with Postgres' oids for them.
const NAMESPACES: [(i64, &str); 3] = [
    (11, "pg_catalog"),
    (PUBLIC, "public"),
    (13_000, "information_schema"),
];
const PUBLIC: i64 = 2200;
/// The owner of everything (`pg_get_userbyid` of it is `riffle`).
const OWNER: i64 = 10;

/// Postgres' catalog relations of what Riffle does not have (row-level policies, inheritance,
/// indexes, constraints, triggers, rules, column defaults, collations, publications, extended
/// statistics, comments, role memberships, sequences, extensions, ...): they read as empty. Any other
/// `pg_catalog` relation not in [`tables`] does not exist here.
const EMPTY: [&str; 34] = [
    "pg_policy",
    "pg_statistic_ext",
    "pg_publication",
    "pg_publication_namespace",
    "pg_publication_rel",
    "pg_inherits",
    "pg_rewrite",
    "pg_index",
    "pg_indexes",
    "pg_constraint",
    "pg_trigger",
    "pg_event_trigger",
    "pg_attrdef",
    "pg_collation",
    "pg_user",
    "pg_auth_members",
    "pg_description",
    "pg_shdescription",
    "pg_extension",
    "pg_foreign_table",
    "pg_foreign_server",
    "pg_foreign_data_wrapper",
    "pg_user_mapping",
    "pg_partitioned_table",
    "pg_sequence",
    "pg_sequences",
    "pg_depend",
    "pg_default_acl",
    "pg_init_privs",
    "pg_seclabel",
    "pg_subscription",
    "pg_enum",
    "pg_range",
    "pg_stat_activity",
];

/// Whether `text` (a statement) reads `pg_catalog`.
pub(crate) fn is_read_by(text: &str) -> bool {
    text.to_ascii_lowercase().contains("pg_catalog.")
}

/// A query over `pg_catalog`, as the planner reads it.
pub(crate) enum CatalogQuery {
    /// Rewritten into Flink SQL over the tables [`tables`] gives.
    Query(Box<ast::Query>),
    /// It reads a relation Riffle keeps no rows for: no rows, these columns.
    Empty(Schema),
}

/// `text` parsed in Postgres' dialect and rewritten (see the module's comment).
pub(crate) fn parse(text: &str) -> Result<CatalogQuery, StatementError> {
    let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, text)
        .map_err(|e| StatementError::new("42601", e.to_string()))?;
    let (Some(ast::Statement::Query(mut query)), None) = (statements.pop(), statements.pop())
    else {
        return Err(StatementError::new(
            "0A000",
            "only a single SELECT can read pg_catalog",
        ));
    };
    let mut names = Vec::new();
    relations_read(&query.body, &mut names);
    let empty = names.iter().any(|name| {
        name.strip_prefix("pg_catalog.")
            .is_some_and(|table| EMPTY.contains(&table))
    });
    if empty {
        return Ok(CatalogQuery::Empty(projection_schema(&query.body)));
    }
    let _ = ast::visit_expressions_mut(&mut *query, |expr| {
        rewrite(expr);
        ControlFlow::<()>::Continue(())
    });
    Ok(CatalogQuery::Query(query))
}

/// The relations the query's `FROM` clauses read (of every branch of a `UNION`), lower case.
fn relations_read(body: &ast::SetExpr, out: &mut Vec<String>) {
    fn factor(relation: &ast::TableFactor, out: &mut Vec<String>) {
        match relation {
            ast::TableFactor::Table { name, .. } => {
                out.push(name.to_string().to_ascii_lowercase());
            }
            ast::TableFactor::Derived { subquery, .. } => relations_read(&subquery.body, out),
            ast::TableFactor::NestedJoin {
                table_with_joins, ..
            } => from(table_with_joins, out),
            _ => {}
        }
    }
    fn from(table: &ast::TableWithJoins, out: &mut Vec<String>) {
        factor(&table.relation, out);
        for join in &table.joins {
            factor(&join.relation, out);
        }
    }
    match body {
        ast::SetExpr::Select(select) => select.from.iter().for_each(|t| from(t, out)),
        ast::SetExpr::Query(query) => relations_read(&query.body, out),
        ast::SetExpr::SetOperation { left, right, .. } => {
            relations_read(left, out);
            relations_read(right, out);
        }
        _ => {}
    }
}

/// The columns a query's (first) `SELECT` names, as text.
fn projection_schema(body: &ast::SetExpr) -> Schema {
    let select = match body {
        ast::SetExpr::Select(select) => select,
        ast::SetExpr::SetOperation { left, .. } => return projection_schema(left),
        ast::SetExpr::Query(query) => return projection_schema(&query.body),
        _ => return Schema::new(Vec::new()),
    };
    let fields = select
        .projection
        .iter()
        .map(|item| {
            let name = match item {
                ast::SelectItem::ExprWithAlias { alias, .. } => alias.value.clone(),
                ast::SelectItem::UnnamedExpr(ast::Expr::Identifier(ident)) => ident.value.clone(),
                ast::SelectItem::UnnamedExpr(ast::Expr::CompoundIdentifier(parts)) => {
                    parts.last().map(|p| p.value.clone()).unwrap_or_default()
                }
                ast::SelectItem::UnnamedExpr(ast::Expr::Function(f)) => {
                    f.name.0.last().map(|p| p.to_string()).unwrap_or_default()
                }
                _ => "?column?".to_string(),
            };
            Field::new(name, DataType::Varchar)
        })
        .collect();
    Schema::new(fields)
}

/// One expression of Postgres' dialect in the planner's terms.
fn rewrite(expr: &mut ast::Expr) {
    use ast::BinaryOperator as B;
    let replacement = match expr {
        // `ARRAY(SELECT ..)` (the roles a role is a member of): none.
        ast::Expr::Function(f)
            if matches!(f.args, ast::FunctionArguments::Subquery(_))
                && f.name.to_string().eq_ignore_ascii_case("array") =>
        {
            Some(ast::Expr::value(ast::Value::SingleQuotedString(
                "{}".into(),
            )))
        }
        // psql's column defaults and collations: Riffle has none.
        ast::Expr::Subquery(_) => Some(null()),
        ast::Expr::Function(f) if matches!(f.args, ast::FunctionArguments::Subquery(_)) => {
            Some(null())
        }
        ast::Expr::Function(f) => {
            // `pg_catalog.format_type(..)` is `format_type(..)`.
            if f.name.0.len() == 2 && f.name.0[0].to_string().eq_ignore_ascii_case("pg_catalog") {
                f.name.0.remove(0);
            }
            None
        }
        ast::Expr::Collate { expr: inner, .. } => Some((**inner).clone()),
        ast::Expr::Value(value) => match &value.value {
            ast::Value::EscapedStringLiteral(s) => {
                Some(ast::Expr::value(ast::Value::SingleQuotedString(s.clone())))
            }
            _ => None,
        },
        ast::Expr::BinaryOp { left, op, right } => {
            let regex = match op {
                B::PGRegexMatch => Some((false, false)),
                B::PGRegexIMatch => Some((false, true)),
                B::PGRegexNotMatch => Some((true, false)),
                B::PGRegexNotIMatch => Some((true, true)),
                B::PGCustomBinaryOperator(parts) => match parts.last().map(String::as_str) {
                    Some("~") => Some((false, false)),
                    Some("~*") => Some((false, true)),
                    Some("!~") => Some((true, false)),
                    Some("!~*") => Some((true, true)),
                    _ => None,
                },
                _ => None,
            };
            if let Some((negated, insensitive)) = regex {
                let matched = call(
                    "pg_regex_match",
                    vec![
                        (**left).clone(),
                        (**right).clone(),
                        ast::Expr::value(ast::Value::Boolean(insensitive)),
                    ],
                );
                Some(if negated {
                    ast::Expr::UnaryOp {
                        op: ast::UnaryOperator::Not,
                        expr: Box::new(matched),
                    }
                } else {
                    matched
                })
            } else {
                // `c.oid = '16431'`: Postgres reads the quoted literal as the other side's type.
                if matches!(op, B::Eq | B::NotEq | B::Lt | B::LtEq | B::Gt | B::GtEq) {
                    for side in [left, right] {
                        if let ast::Expr::Value(v) = &mut **side
                            && let ast::Value::SingleQuotedString(s) = &v.value
                            && !s.is_empty()
                            && s.bytes().all(|b| b.is_ascii_digit())
                        {
                            v.value = ast::Value::Number(s.clone(), false);
                        }
                    }
                }
                None
            }
        }
        ast::Expr::Cast {
            expr: inner,
            data_type,
            ..
        } => {
            let ty = data_type.to_string().to_ascii_lowercase();
            let ty = ty.strip_prefix("pg_catalog.").unwrap_or(&ty).to_string();
            let inner = (**inner).clone();
            match ty.as_str() {
                "regclass" => Some(call("pg_regclass", vec![inner])),
                "regtype" => Some(call("pg_regtype", vec![inner])),
                "regnamespace" => Some(call("pg_regnamespace", vec![inner])),
                "oid" | "regproc" => Some(cast(inner, ast::DataType::BigInt(None))),
                "text" | "name" | "char" | "\"char\"" => {
                    Some(cast(inner, ast::DataType::Varchar(None)))
                }
                t if t.ends_with("[]") => Some(null()),
                _ => None,
            }
        }
        _ => None,
    };
    if let Some(replacement) = replacement {
        *expr = replacement;
    }
}

fn null() -> ast::Expr {
    ast::Expr::value(ast::Value::Null)
}

fn cast(expr: ast::Expr, data_type: ast::DataType) -> ast::Expr {
    ast::Expr::Cast {
        kind: ast::CastKind::Cast,
        expr: Box::new(expr),
        data_type,
        format: None,
    }
}

fn call(name: &str, args: Vec<ast::Expr>) -> ast::Expr {
    ast::Expr::Function(ast::Function {
        name: ast::ObjectName::from(vec![ast::Ident::new(name)]),
        uses_odbc_syntax: false,
        parameters: ast::FunctionArguments::None,
        args: ast::FunctionArguments::List(ast::FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|e| ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)))
                .collect(),
            clauses: Vec::new(),
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: Vec::new(),
    })
}

/// A relation's oid: a hash of its name, so that it stays the same between the queries of one
/// `\d` (psql reads the oid, then asks by it) and across restarts.
fn oid_of(name: &str) -> i64 {
    // FNV-1a, 32 bits, into the range of user oids (from 16384 up, below 2^31).
    let mut hash: u32 = 0x811c_9dc5;
    for byte in name.bytes() {
        hash = (hash ^ byte as u32).wrapping_mul(0x0100_0193);
    }
    16_384 + (hash as i64 % (i32::MAX as i64 - 16_384))
}

/// The Postgres type a column of `ty` is sent as, and its type modifier (a timestamp's
/// precision, a numeric's precision and scale).
fn type_of(ty: &DataType) -> (Type, i64) {
    let modifier = match ty {
        DataType::Timestamp { precision } | DataType::TimestampLtz { precision } => {
            *precision as i64
        }
        DataType::Decimal { precision, scale } => ((*precision as i64) << 16 | *scale as i64) + 4,
        _ => -1,
    };
    (crate::wire::pg_type(ty), modifier)
}

/// The types columns are sent as, with their `pg_type` names.
const TYPES: [(Type, &str, &str); 12] = [
    (Type::BOOL, "bool", "boolean"),
    (Type::INT2, "int2", "smallint"),
    (Type::INT4, "int4", "integer"),
    (Type::INT8, "int8", "bigint"),
    (Type::FLOAT4, "float4", "real"),
    (Type::FLOAT8, "float8", "double precision"),
    (Type::NUMERIC, "numeric", "numeric"),
    (Type::TEXT, "text", "text"),
    (Type::VARCHAR, "varchar", "character varying"),
    (Type::DATE, "date", "date"),
    (Type::TIMESTAMP, "timestamp", "timestamp without time zone"),
    (Type::TIMESTAMPTZ, "timestamptz", "timestamp with time zone"),
];

/// `format_type(oid, typmod)`: a type's name as psql shows it.
fn format_type(oid: i64, modifier: i64) -> String {
    let Some((_, _, name)) = TYPES.iter().find(|(t, ..)| t.oid() as i64 == oid) else {
        return "???".to_string();
    };
    match (oid as u32, modifier) {
        (oid, m) if m >= 0 && oid == Type::NUMERIC.oid() => {
            let m = m - 4;
            format!("numeric({},{})", m >> 16, m & 0xffff)
        }
        (oid, m) if m >= 0 && (oid == Type::TIMESTAMP.oid() || oid == Type::TIMESTAMPTZ.oid()) => {
            let (head, zone) = name.split_once(' ').unwrap_or((name, ""));
            format!("{head}({m}) {zone}")
        }
        _ => name.to_string(),
    }
}

/// `pg_catalog`'s tables over the catalog's relations, and the functions psql calls, added to
/// `catalog` for one query.
pub(crate) fn add_to(catalog: &mut Catalog, relations: &[Relation], roles: &[String]) {
    // The functions registered from Rust (before psql's own are added below), each with its
    // result type's name.
    let procs: Vec<Proc> = catalog
        .functions
        .registered()
        .map(|(name, function)| Proc {
            name: name.to_ascii_lowercase(),
            result: match (function.result_type)(&[]) {
                Ok(ty) => {
                    let (t, modifier) = type_of(&ty);
                    format_type(t.oid() as i64, modifier)
                }
                // A result type that depends on the arguments' types.
                Err(_) => "anyelement".to_string(),
            },
        })
        .collect();
    for table in tables(relations, roles) {
        catalog.tables.insert(table.name.clone(), table);
    }
    catalog.tables.extend(
        proc_tables(&procs)
            .into_iter()
            .map(|table| (table.name.clone(), table)),
    );
    let results: Arc<HashMap<i64, String>> = Arc::new(
        procs
            .iter()
            .map(|p| (proc_oid(&p.name), p.result.clone()))
            .collect(),
    );
    let names: Arc<HashMap<i64, (String, Option<String>)>> = Arc::new(
        relations
            .iter()
            .map(|r| (oid_of(&r.name), (r.name.clone(), r.definition.clone())))
            .collect(),
    );
    let by_oid = |f: fn(&(String, Option<String>)) -> Option<String>| {
        let names = names.clone();
        ScalarFunction::returning(DataType::Varchar, move |args| {
            Ok(match args.first() {
                Some(Value::Int(oid)) => names.get(oid).and_then(f).map(Value::string),
                _ => None,
            }
            .unwrap_or(Value::Null))
        })
    };
    let text = |s: &'static str| {
        ScalarFunction::returning(DataType::Varchar, move |_| Ok(Value::string(s)))
    };
    let functions = &mut catalog.functions;
    functions.register("pg_regclass", by_oid(|(name, _)| Some(name.clone())));
    functions.register(
        "pg_get_viewdef",
        by_oid(|(_, definition)| definition.clone()),
    );
    functions.register("pg_get_userbyid", text("riffle"));
    functions.register(
        "pg_get_function_result",
        ScalarFunction::returning(DataType::Varchar, move |args| {
            Ok(match args.first() {
                Some(Value::Int(oid)) => results.get(oid).map(Value::string),
                _ => None,
            }
            .unwrap_or(Value::Null))
        }),
    );
    // A function registered from Rust takes any arguments; its own code checks them.
    functions.register("pg_get_function_arguments", text("VARIADIC \"any\""));
    functions.register(
        "pg_function_is_visible",
        ScalarFunction::returning(DataType::Boolean, |_| Ok(Value::Bool(true))),
    );
    functions.register("pg_encoding_to_char", text("UTF8"));
    // No comments, column defaults or sizes are kept (a Kafka table's size is not Riffle's).
    for name in [
        "col_description",
        "obj_description",
        "pg_get_function_sqlbody",
        "pg_get_expr",
        "pg_size_pretty",
    ] {
        functions.register(
            name,
            ScalarFunction::returning(DataType::Varchar, |_| Ok(Value::Null)),
        );
    }
    functions.register(
        "pg_table_size",
        ScalarFunction::returning(DataType::BigInt, |_| Ok(Value::Null)),
    );
    functions.register(
        "pg_table_is_visible",
        ScalarFunction::returning(DataType::Boolean, |_| Ok(Value::Bool(true))),
    );
    functions.register(
        "format_type",
        ScalarFunction::returning(DataType::Varchar, |args| {
            Ok(match args {
                [Value::Int(oid), Value::Int(m)] => Value::string(format_type(*oid, *m)),
                [Value::Int(oid), ..] => Value::string(format_type(*oid, -1)),
                _ => Value::Null,
            })
        }),
    );
    functions.register(
        "pg_regtype",
        ScalarFunction::returning(DataType::Varchar, |args| {
            Ok(match args {
                [Value::Int(oid)] => Value::string(format_type(*oid, -1)),
                _ => Value::Null,
            })
        }),
    );
    functions.register(
        "pg_regnamespace",
        ScalarFunction::returning(DataType::Varchar, |args| {
            Ok(match args {
                [Value::Int(oid)] => NAMESPACES
                    .iter()
                    .find(|(o, _)| o == oid)
                    .map(|(_, name)| Value::string(name))
                    .unwrap_or_else(|| Value::string(oid.to_string())),
                _ => Value::Null,
            })
        }),
    );
    functions.register(
        "array_to_string",
        ScalarFunction::returning(DataType::Varchar, |args| {
            Ok(match args.first() {
                Some(Value::String(s)) => Value::String(s.clone()),
                _ => Value::Null,
            })
        }),
    );
    functions.register(
        "pg_regex_match",
        ScalarFunction::returning(DataType::Boolean, |args| match args {
            [Value::String(text), Value::String(pattern), insensitive] => {
                let regex = regex::RegexBuilder::new(pattern)
                    .case_insensitive(matches!(insensitive, Value::Bool(true)))
                    .build()
                    .map_err(|e| format!("invalid regular expression {pattern:?}: {e}"))?;
                Ok(Value::Bool(regex.is_match(text)))
            }
            _ => Ok(Value::Null),
        }),
    );
}

/// The tables `pg_class`, `pg_namespace`, `pg_attribute`, `pg_type`, `pg_am`, `pg_database`,
/// `pg_tables` and `pg_views`.
fn tables(relations: &[Relation], roles: &[String]) -> Vec<TableDef> {
    let text = |name: &str| Field::new(name, DataType::Varchar);
    let int = |name: &str| Field::new(name, DataType::BigInt);
    let boolean = |name: &str| Field::new(name, DataType::Boolean);
    let s = |text: &str| Value::string(text);
    let class_schema = Schema::new(vec![
        int("oid"),
        text("relname"),
        int("relnamespace"),
        text("relkind"),
        int("relowner"),
        int("relam"),
        int("relnatts"),
        int("relchecks"),
        boolean("relhasindex"),
        boolean("relhasrules"),
        boolean("relhastriggers"),
        boolean("relrowsecurity"),
        boolean("relforcerowsecurity"),
        boolean("relispartition"),
        text("reloptions"),
        int("reltablespace"),
        int("reloftype"),
        text("relpersistence"),
        text("relreplident"),
        int("reltoastrelid"),
    ]);
    let class_rows = relations
        .iter()
        .map(|r| {
            let kind = match r.kind {
                "BASE TABLE" => "r",
                "VIEW" => "v",
                _ => "m",
            };
            let mut row = vec![
                Value::Int(oid_of(&r.name)),
                s(&r.name),
                Value::Int(PUBLIC),
                s(kind),
                Value::Int(OWNER),
                Value::Int(0),
                Value::Int(r.columns.len() as i64),
                Value::Int(0),
            ];
            row.extend(std::iter::repeat_n(Value::Bool(false), 6));
            row.extend([Value::Null, Value::Int(0), Value::Int(0), s("p"), s("d")]);
            row.push(Value::Int(0));
            Row(row)
        })
        .collect();
    let namespace_schema = Schema::new(vec![int("oid"), text("nspname"), int("nspowner")]);
    let namespace_rows = NAMESPACES
        .iter()
        .map(|(oid, name)| Row(vec![Value::Int(*oid), s(name), Value::Int(OWNER)]))
        .collect();
    let attribute_schema = Schema::new(vec![
        int("attrelid"),
        text("attname"),
        int("atttypid"),
        int("atttypmod"),
        int("attnum"),
        boolean("attnotnull"),
        boolean("attisdropped"),
        boolean("atthasdef"),
        int("attcollation"),
        text("attidentity"),
        text("attgenerated"),
        text("attstorage"),
        text("attcompression"),
        int("attstattarget"),
    ]);
    let attribute_rows = relations
        .iter()
        .flat_map(|r| {
            r.columns.iter().enumerate().map(|(i, field)| {
                let (ty, modifier) = type_of(&field.ty);
                let fixed = [Type::BOOL, Type::INT2, Type::INT4, Type::INT8, Type::FLOAT8]
                    .contains(&ty)
                    || ty == Type::DATE
                    || ty == Type::TIMESTAMP
                    || ty == Type::TIMESTAMPTZ;
                Row(vec![
                    Value::Int(oid_of(&r.name)),
                    s(&field.name),
                    Value::Int(ty.oid() as i64),
                    Value::Int(modifier),
                    Value::Int(i as i64 + 1),
                    Value::Bool(!field.nullable),
                    Value::Bool(false),
                    Value::Bool(false),
                    Value::Int(0),
                    s(""),
                    s(""),
                    s(if fixed { "p" } else { "x" }),
                    s(""),
                    Value::Int(-1),
                ])
            })
        })
        .collect();
    let type_schema = Schema::new(vec![
        int("oid"),
        text("typname"),
        int("typnamespace"),
        text("typtype"),
        int("typelem"),
        int("typbasetype"),
        int("typcollation"),
    ]);
    let type_rows = TYPES
        .iter()
        .map(|(ty, name, _)| {
            Row(vec![
                Value::Int(ty.oid() as i64),
                s(name),
                Value::Int(11),
                s("b"),
                Value::Int(0),
                Value::Int(0),
                Value::Int(0),
            ])
        })
        .collect();
    let am_schema = Schema::new(vec![int("oid"), text("amname"), text("amtype")]);
    let am_rows = vec![Row(vec![Value::Int(2), s("heap"), s("t")])];
    let database_schema = Schema::new(vec![
        int("oid"),
        text("datname"),
        int("datdba"),
        int("encoding"),
        text("datcollate"),
        text("datctype"),
        text("daticulocale"),
        text("datlocprovider"),
        text("datacl"),
        boolean("datistemplate"),
        boolean("datallowconn"),
    ]);
    let database_rows = vec![Row(vec![
        Value::Int(16_384),
        s("riffle"),
        Value::Int(OWNER),
        Value::Int(6),
        s("C"),
        s("C"),
        Value::Null,
        s("c"),
        Value::Null,
        Value::Bool(false),
        Value::Bool(true),
    ])];
    let tables_schema = Schema::new(vec![
        text("schemaname"),
        text("tablename"),
        text("tableowner"),
        text("tablespace"),
        boolean("hasindexes"),
        boolean("hasrules"),
        boolean("hastriggers"),
        boolean("rowsecurity"),
    ]);
    let tables_rows = (relations.iter().filter(|r| r.kind == "BASE TABLE"))
        .map(|r| {
            let mut row = vec![s("public"), s(&r.name), s("riffle"), Value::Null];
            row.extend(std::iter::repeat_n(Value::Bool(false), 4));
            Row(row)
        })
        .collect();
    let views_schema = Schema::new(vec![
        text("schemaname"),
        text("viewname"),
        text("viewowner"),
        text("definition"),
    ]);
    let views_rows = (relations.iter().filter(|r| r.kind == "VIEW"))
        .map(|r| {
            let definition = r.definition.as_deref().unwrap_or_default();
            Row(vec![s("public"), s(&r.name), s("riffle"), s(definition)])
        })
        .collect();
    // Every user may do everything (Riffle has no privileges): each is a superuser that can
    // log in, and nothing else.
    let roles_schema = Schema::new(vec![
        int("oid"),
        text("rolname"),
        boolean("rolsuper"),
        boolean("rolinherit"),
        boolean("rolcreaterole"),
        boolean("rolcreatedb"),
        boolean("rolcanlogin"),
        boolean("rolreplication"),
        int("rolconnlimit"),
        text("rolvaliduntil"),
        boolean("rolbypassrls"),
        text("rolconfig"),
    ]);
    let roles_rows = roles
        .iter()
        .map(|name| {
            let oid = if name == "riffle" {
                OWNER
            } else {
                oid_of(name)
            };
            let flags = [true, true, false, false, true, false].map(Value::Bool);
            let mut row = vec![Value::Int(oid), s(name)];
            row.extend(flags);
            row.extend([Value::Int(-1), Value::Null, Value::Bool(false), Value::Null]);
            Row(row)
        })
        .collect();
    let table = information_schema::table;
    vec![
        table("pg_catalog.pg_roles", roles_schema, roles_rows),
        table("pg_catalog.pg_tables", tables_schema, tables_rows),
        table("pg_catalog.pg_views", views_schema, views_rows),
        table("pg_catalog.pg_class", class_schema, class_rows),
        table("pg_catalog.pg_namespace", namespace_schema, namespace_rows),
        table("pg_catalog.pg_attribute", attribute_schema, attribute_rows),
        table("pg_catalog.pg_type", type_schema, type_rows),
        table("pg_catalog.pg_am", am_schema, am_rows),
        table("pg_catalog.pg_database", database_schema, database_rows),
    ]
}

/// A function registered from Rust, as `pg_proc` shows it.
struct Proc {
    /// Its name, lower case.
    name: String,
    /// Its result type's name (`format_type`).
    result: String,
}

/// A function's oid: stable as a relation's, apart from relations of the same name.
fn proc_oid(name: &str) -> i64 {
    oid_of(&format!("{name}()"))
}

/// The oid of the one language in `pg_language`: functions are registered from Rust.
const RUST: i64 = 16_000;

/// The tables `pg_proc` (the functions registered from Rust) and `pg_language`.
fn proc_tables(procs: &[Proc]) -> Vec<TableDef> {
    let text = |name: &str| Field::new(name, DataType::Varchar);
    let int = |name: &str| Field::new(name, DataType::BigInt);
    let boolean = |name: &str| Field::new(name, DataType::Boolean);
    let s = |text: &str| Value::string(text);
    let proc_schema = Schema::new(vec![
        int("oid"),
        text("proname"),
        int("pronamespace"),
        int("proowner"),
        int("prolang"),
        text("prokind"),
        boolean("prosecdef"),
        boolean("proretset"),
        text("provolatile"),
        text("proparallel"),
        int("pronargs"),
        text("proacl"),
        text("prosrc"),
    ]);
    let proc_rows = procs
        .iter()
        .map(|p| {
            Row(vec![
                Value::Int(proc_oid(&p.name)),
                s(&p.name),
                Value::Int(PUBLIC),
                Value::Int(OWNER),
                Value::Int(RUST),
                s("f"),
                Value::Bool(false),
                Value::Bool(false),
                // Riffle cannot tell what a registered function does: volatile, as Postgres
                // takes a function it knows nothing of.
                s("v"),
                s("u"),
                Value::Int(0),
                Value::Null,
                s("registered from Rust"),
            ])
        })
        .collect();
    let language_schema = Schema::new(vec![int("oid"), text("lanname"), int("lanowner")]);
    let language_rows = vec![Row(vec![Value::Int(RUST), s("rust"), Value::Int(OWNER)])];
    let table = information_schema::table;
    vec![
        table("pg_catalog.pg_proc", proc_schema, proc_rows),
        table("pg_catalog.pg_language", language_schema, language_rows),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(text: &str) -> String {
        match parse(text).unwrap() {
            CatalogQuery::Query(q) => q.to_string(),
            CatalogQuery::Empty(schema) => format!("empty {schema:?}"),
        }
    }

    #[test]
    fn postgres_operators_and_casts_become_calls_the_planner_knows() {
        assert_eq!(
            rewritten(
                "SELECT c.oid::pg_catalog.regclass FROM pg_catalog.pg_class c \
                 WHERE c.relname OPERATOR(pg_catalog.~) '^(v)$' COLLATE pg_catalog.default \
                 AND c.oid = '16431' AND n.nspname !~ '^pg_toast'"
            ),
            "SELECT pg_regclass(c.oid) FROM pg_catalog.pg_class c \
             WHERE pg_regex_match(c.relname, '^(v)$', false) AND c.oid = 16431 \
             AND NOT pg_regex_match(n.nspname, '^pg_toast', false)"
        );
        assert_eq!(
            rewritten(
                "SELECT pg_catalog.format_type(a.atttypid, a.atttypmod), \
                 (SELECT c.collname FROM pg_catalog.pg_collation c) AS attcollation \
                 FROM pg_catalog.pg_attribute a"
            ),
            "SELECT format_type(a.atttypid, a.atttypmod), NULL AS attcollation \
             FROM pg_catalog.pg_attribute a"
        );
    }

    #[test]
    fn a_relation_riffle_has_no_rows_for_reads_as_empty_with_the_columns_named() {
        let CatalogQuery::Empty(schema) = parse(
            "SELECT pol.polname, pol.polpermissive, CASE WHEN true THEN 1 END, \
             pg_catalog.pg_get_expr(pol.polqual, pol.polrelid) AS q \
             FROM pg_catalog.pg_policy pol WHERE pol.polrelid = '1' ORDER BY 1",
        )
        .unwrap() else {
            panic!("pg_policy has no rows")
        };
        let names: Vec<&str> = schema.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["polname", "polpermissive", "?column?", "q"]);
    }

    #[test]
    fn types_are_named_as_psql_shows_them() {
        let named = |ty: DataType| {
            let (t, m) = type_of(&ty);
            format_type(t.oid() as i64, m)
        };
        assert_eq!(named(DataType::BigInt), "bigint");
        assert_eq!(named(DataType::Varchar), "character varying");
        assert_eq!(
            named(DataType::Timestamp { precision: 3 }),
            "timestamp(3) without time zone"
        );
        assert_eq!(
            named(DataType::Decimal {
                precision: 10,
                scale: 2
            }),
            "numeric(10,2)"
        );
        assert_eq!(oid_of("clicks"), oid_of("clicks"));
        assert!((16_384..i32::MAX as i64).contains(&oid_of("clicks")));
    }
}
