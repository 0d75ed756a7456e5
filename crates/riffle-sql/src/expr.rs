//! Expressions: an expression of a query is type-checked and compiled once, into a closure over
//! a [`Row`] (no per-record walk of the syntax tree, no lookup of columns by name).
//!
//! Types follow Flink's rules: integer arithmetic stays in the wider integer type (`/` divides
//! integers), any `DOUBLE` makes it `DOUBLE`, and a `DECIMAL` operand makes it `DECIMAL` with
//! Flink's precision and scale (a `*` adds the scales, and so on). `NULL` in gives `NULL` out,
//! and `AND`/`OR` follow three-valued logic. What an expression cannot do at run time (divide by
//! zero, cast `'abc'` to `INT`) fails the job with the expression in the message, as Flink does;
//! a `DECIMAL` that overflows its type is `NULL`, as in Flink.

use std::sync::Arc;

use compact_str::CompactString;
use sqlparser::ast::{self, BinaryOperator, UnaryOperator};

use crate::error::{Result, SqlError};
use crate::functions::{self, Functions};
use crate::parse;
use crate::types::{DataType, Decimal, Field, Row, Schema, Value, pow10};

/// A compiled expression's code: its value for a row.
pub type Eval = Arc<dyn Fn(&Row) -> riffle::Result<Value> + Send + Sync>;

/// A compiled expression: its type, and how to compute it.
#[derive(Clone)]
pub struct Typed {
    /// Its type.
    pub ty: DataType,
    /// Whether it may be `NULL`.
    pub nullable: bool,
    /// Its value for a row.
    pub eval: Eval,
    /// The name a query gives it without an alias (a column's name, the last field of a path).
    pub name: Option<String>,
    /// The column it reads, when it is one as it is (for time attributes and keys).
    pub column: Option<usize>,
    /// Where in the row its value sits, when it only reads it (a column, or a field of a column
    /// of `ROW` type): a projection of an owned row moves such values instead of copying them.
    pub place: Option<Place>,
    /// The places of its input row it reads (`None`: not known, take it as the whole row): a
    /// scan decodes only the places its readers read.
    pub reads: Option<Vec<Place>>,
}

/// Where an expression's value sits in a row ([`Typed::place`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Column `c`.
    Column(usize),
    /// Field `f` of column `c` (a `ROW`).
    Field(usize, usize),
}

impl Place {
    /// The value at this place of `row` (`NULL` when it is not there), copied.
    pub fn get(self, row: &Row) -> Value {
        self.get_ref(row).clone()
    }

    /// The value at this place of `row` (`NULL` when it is not there), read in place.
    pub fn get_ref(self, row: &Row) -> &Value {
        static NULL: Value = Value::Null;
        match self {
            Place::Column(c) => row.get(c),
            Place::Field(c, f) => match row.get(c) {
                Value::Row(values) => values.get(f).unwrap_or(&NULL),
                _ => &NULL,
            },
        }
    }

    /// The value at this place of `row`, taken out (`NULL` left behind).
    pub fn take(self, row: &mut Row) -> Value {
        let slot = match self {
            Place::Column(c) => row.0.get_mut(c),
            Place::Field(c, f) => match row.0.get_mut(c) {
                Some(Value::Row(values)) => values.get_mut(f),
                _ => None,
            },
        };
        slot.map(std::mem::take).unwrap_or(Value::Null)
    }
}

impl std::fmt::Debug for Typed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Typed")
            .field("ty", &self.ty)
            .field("nullable", &self.nullable)
            .field("name", &self.name)
            .finish()
    }
}

impl Typed {
    fn new(ty: DataType, nullable: bool, eval: Eval) -> Typed {
        Typed {
            ty,
            nullable,
            eval,
            name: None,
            column: None,
            place: None,
            reads: None,
        }
    }

    /// A constant.
    pub fn constant(value: Value, ty: DataType) -> Typed {
        let nullable = value.is_null();
        Typed {
            reads: Some(Vec::new()),
            ..Typed::new(ty, nullable, Arc::new(move |_| Ok(value.clone())))
        }
    }

    /// The value, when the expression reads nothing of the row (a literal, an interval).
    pub fn constant_value(&self) -> Option<Value> {
        (self.eval)(&Row::default()).ok()
    }

    /// This expression as a value of `to` (a cast; also the implicit widening of numbers).
    pub fn cast(self, to: &DataType) -> Result<Typed> {
        if &self.ty == to {
            return Ok(self);
        }
        let (from, target) = (self.ty.clone(), to.clone());
        if !castable(&from, &target) {
            return Err(SqlError::plan(format!("cannot cast {from} to {target}")));
        }
        let eval = self.eval;
        Ok(Typed {
            ty: target.clone(),
            nullable: self.nullable || matches!(target, DataType::Decimal { .. }),
            eval: Arc::new(move |row| cast_value(eval(row)?, &from, &target)),
            name: self.name,
            column: None,
            place: None,
            reads: self.reads,
        })
    }
}

/// What an expression can see: the columns of its input, by name, and the functions.
pub struct Scope<'a> {
    /// The input's columns.
    pub schema: &'a Schema,
    /// Names that qualify columns (`b.price`): a table's name or alias, with the columns that
    /// belong to it.
    pub qualifiers: Vec<(String, std::ops::Range<usize>)>,
    /// Built-in and registered functions.
    pub functions: &'a Functions,
}

impl<'a> Scope<'a> {
    /// The columns of `schema`, qualified by `name` (a table or its alias) when given.
    pub fn new(schema: &'a Schema, name: Option<&str>, functions: &'a Functions) -> Scope<'a> {
        Scope {
            schema,
            qualifiers: name
                .map(|n| vec![(n.to_string(), 0..schema.len())])
                .unwrap_or_default(),
            functions,
        }
    }

    fn column(&self, name: &str, range: std::ops::Range<usize>) -> Result<Typed> {
        let found: Vec<usize> = range
            .clone()
            .filter(|i| self.schema.fields[*i].name == name)
            .collect();
        let index = match found[..] {
            [index] => index,
            [] => {
                let hint = range
                    .clone()
                    .find(|i| self.schema.fields[*i].name.eq_ignore_ascii_case(name))
                    .map(|i| {
                        format!(
                            " (names are case-sensitive: did you mean `{}`?)",
                            self.schema.fields[i].name
                        )
                    })
                    .unwrap_or_default();
                return Err(SqlError::plan(format!(
                    "column `{name}` not found in {}{hint}",
                    Schema::new(self.schema.fields[range].to_vec())
                )));
            }
            _ => {
                return Err(SqlError::plan(format!(
                    "column `{name}` is ambiguous: qualify it with its table"
                )));
            }
        };
        let field = &self.schema.fields[index];
        Ok(Typed {
            ty: field.ty.clone(),
            nullable: field.nullable,
            eval: Arc::new(move |row: &Row| Ok(row.get(index).clone())),
            name: Some(field.name.clone()),
            column: Some(index),
            place: Some(crate::expr::Place::Column(index)),
            reads: Some(vec![crate::expr::Place::Column(index)]),
        })
    }
}

/// Compiles `expr` in `scope`.
pub fn compile(expr: &ast::Expr, scope: &Scope<'_>) -> Result<Typed> {
    let mut typed = compile_expr(expr, scope)?;
    if typed.reads.is_none() {
        typed.reads = reads_of(expr, scope);
    }
    Ok(typed)
}

/// The places of the input row that `expr` reads: those of the columns and fields it names
/// (`None` when one cannot be placed, or it holds a subquery).
fn reads_of(expr: &ast::Expr, scope: &Scope<'_>) -> Option<Vec<Place>> {
    use std::ops::ControlFlow;
    let mut places = Vec::new();
    let flow = ast::visit_expressions(expr, |e| {
        let place = match e {
            ast::Expr::Identifier(_) | ast::Expr::CompoundIdentifier(_) => {
                compile_expr(e, scope).ok().and_then(|t| t.reads)
            }
            ast::Expr::Subquery(_) | ast::Expr::Exists { .. } => None,
            ast::Expr::In { target, .. } if !matches!(target, ast::InTarget::List(_)) => None,
            _ => Some(Vec::new()),
        };
        match place {
            Some(found) => {
                places.extend(found);
                ControlFlow::Continue(())
            }
            None => ControlFlow::Break(()),
        }
    });
    match flow {
        ControlFlow::Continue(()) => Some(places),
        ControlFlow::Break(()) => None,
    }
}

/// [`compile`] without working out what the expression reads.
fn compile_expr(expr: &ast::Expr, scope: &Scope<'_>) -> Result<Typed> {
    use ast::Expr as E;
    match expr {
        E::Identifier(ident) => scope.column(&ident.value, 0..scope.schema.len()),
        E::CompoundIdentifier(parts) => compound(parts, scope),
        E::Nested(inner) => compile(inner, scope),
        E::Value(value) => literal(&value.value),
        E::Interval(interval) => interval_literal(interval),
        E::TypedString(typed) => typed_string(typed),
        E::BinaryOp { left, op, right } => binary(left, op, right, scope),
        E::UnaryOp { op, expr } => unary(*op, expr, scope),
        E::IsNull(e) => is_null(e, scope, false),
        E::IsNotNull(e) => is_null(e, scope, true),
        E::IsTrue(e) => is_bool(e, scope, Some(true), false),
        E::IsNotTrue(e) => is_bool(e, scope, Some(true), true),
        E::IsFalse(e) => is_bool(e, scope, Some(false), false),
        E::IsNotFalse(e) => is_bool(e, scope, Some(false), true),
        E::Between {
            expr,
            negated,
            low,
            high,
        } => between(expr, *negated, low, high, scope),
        E::In {
            expr,
            target: ast::InTarget::List(list),
            negated,
            ..
        } => in_list(expr, list, *negated, scope),
        E::Like {
            negated,
            expr,
            pattern,
            escape_char,
            any: false,
        } => like(expr, pattern, escape_char.as_deref(), *negated, scope),
        E::Case {
            operand,
            conditions,
            else_result,
            ..
        } => case(
            operand.as_deref(),
            conditions,
            else_result.as_deref(),
            scope,
        ),
        E::Cast {
            kind,
            expr,
            data_type,
            ..
        } => {
            let to = sql_type(data_type)?;
            let value = compile(expr, scope)?;
            match kind {
                ast::CastKind::TryCast | ast::CastKind::SafeCast => try_cast(value, &to),
                _ => value.cast(&to),
            }
        }
        E::Extract { field, expr, .. } => {
            let unit = field.to_string();
            functions::extract(&unit, compile(expr, scope)?)
        }
        E::Substring {
            expr,
            substring_from,
            substring_for,
            ..
        } => {
            let mut args = vec![compile(expr, scope)?];
            if let Some(from) = substring_from {
                args.push(compile(from, scope)?);
            }
            if let Some(length) = substring_for {
                args.push(compile(length, scope)?);
            }
            scope.functions.call("SUBSTRING", args)
        }
        E::Trim {
            expr,
            trim_where,
            trim_what,
            ..
        } => {
            let what = match trim_what {
                Some(what) => compile(what, scope)?,
                None => Typed::constant(Value::string(" "), DataType::Varchar),
            };
            let name = match trim_where {
                Some(ast::TrimWhereField::Leading) => "LTRIM",
                Some(ast::TrimWhereField::Trailing) => "RTRIM",
                _ => "TRIM",
            };
            scope
                .functions
                .call(name, vec![compile(expr, scope)?, what])
        }
        E::Function(function) => call(function, scope),
        other => Err(SqlError::plan(format!(
            "the expression `{other}` is not supported yet"
        ))),
    }
}

/// `a.b.c`: a qualified column, or a column of `ROW` type and its fields.
fn compound(parts: &[ast::Ident], scope: &Scope<'_>) -> Result<Typed> {
    // A qualifier may name several ranges of columns (a derived table without a name keeps
    // its columns' qualifiers): the first that holds the column.
    let ranges: Vec<&std::ops::Range<usize>> = scope
        .qualifiers
        .iter()
        .filter(|(name, _)| *name == parts[0].value)
        .map(|(_, range)| range)
        .collect();
    let (mut value, rest) = match ranges.first() {
        Some(first) if parts.len() > 1 => {
            let found = ranges
                .iter()
                .find_map(|range| scope.column(&parts[1].value, (*range).clone()).ok());
            match found {
                Some(value) => (value, &parts[2..]),
                // Not in any: the first range's error names the column.
                None => (
                    scope.column(&parts[1].value, (*first).clone())?,
                    &parts[2..],
                ),
            }
        }
        _ => (
            scope.column(&parts[0].value, 0..scope.schema.len())?,
            &parts[1..],
        ),
    };
    for part in rest {
        value = field_of(value, &part.value)?;
    }
    Ok(value)
}

/// The field `name` of a `ROW` value.
fn field_of(row: Typed, name: &str) -> Result<Typed> {
    let DataType::Row(fields) = &row.ty else {
        return Err(SqlError::plan(format!(
            "`{}` is {}, not a ROW: it has no field `{name}`",
            row.name.as_deref().unwrap_or("the expression"),
            row.ty
        )));
    };
    let Some(index) = fields.iter().position(|f| f.name == name) else {
        return Err(SqlError::plan(format!("{} has no field `{name}`", row.ty)));
    };
    let field: Field = fields[index].clone();
    let place = row.column.map(|column| Place::Field(column, index));
    let eval: Eval = match place {
        // A field of a column (`bid.price`) is read in place: only the field is copied.
        Some(place) => Arc::new(move |r: &Row| Ok(place.get(r))),
        None => {
            let eval = row.eval;
            Arc::new(move |r: &Row| {
                Ok(match eval(r)? {
                    Value::Row(mut values) if index < values.len() => values.swap_remove(index),
                    _ => Value::Null,
                })
            })
        }
    };
    let reads = match place {
        Some(place) => Some(vec![place]),
        None => row.reads,
    };
    Ok(Typed {
        ty: field.ty,
        nullable: true,
        eval,
        name: Some(field.name),
        column: None,
        place,
        reads,
    })
}

/// A numeric, string, boolean or `NULL` literal. An integer is an `INT` (a `BIGINT` when it
/// does not fit), a number with a point a `DECIMAL` of its digits, one with an exponent a
/// `DOUBLE`.
pub fn literal(value: &ast::Value) -> Result<Typed> {
    use ast::Value as V;
    Ok(match value {
        V::Number(text, _) => number_literal(text)?,
        V::SingleQuotedString(s) | V::DoubleQuotedString(s) => {
            Typed::constant(Value::string(s), DataType::Varchar)
        }
        V::Boolean(b) => Typed::constant(Value::Bool(*b), DataType::Boolean),
        V::Null => Typed::constant(Value::Null, DataType::Null),
        other => {
            return Err(SqlError::plan(format!(
                "the literal {other} is not supported"
            )));
        }
    })
}

fn number_literal(text: &str) -> Result<Typed> {
    let bad = || SqlError::plan(format!("bad number literal {text}"));
    if text.contains(['e', 'E']) {
        let value: f64 = text.parse().map_err(|_| bad())?;
        return Ok(Typed::constant(Value::Double(value), DataType::Double));
    }
    if let Some((whole, fraction)) = text.split_once('.') {
        let digits = format!("{whole}{fraction}");
        let unscaled: i128 = digits.parse().map_err(|_| bad())?;
        let scale = fraction.len() as u8;
        let precision = (digits.trim_start_matches('0').len() as u8)
            .max(scale)
            .max(1);
        return Ok(Typed::constant(
            Value::Decimal(Decimal::new(unscaled, scale)),
            DataType::Decimal { precision, scale },
        ));
    }
    let value: i64 = text.parse().map_err(|_| bad())?;
    let ty = if i32::try_from(value).is_ok() {
        DataType::Int
    } else {
        DataType::BigInt
    };
    Ok(Typed::constant(Value::Int(value), ty))
}

/// `INTERVAL '4' SECOND` and the other day-time intervals, in milliseconds.
fn interval_literal(interval: &ast::Interval) -> Result<Typed> {
    let text = match interval.value.as_ref() {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::SingleQuotedString(s) => s.clone(),
            ast::Value::Number(n, _) => n.clone(),
            other => return Err(SqlError::plan(format!("bad interval value {other}"))),
        },
        other => return Err(SqlError::plan(format!("bad interval value {other}"))),
    };
    let unit = interval
        .leading_field
        .as_ref()
        .map(|f| f.to_string().to_ascii_uppercase())
        .unwrap_or_else(|| "SECOND".into());
    let per_unit: f64 = match unit.trim_end_matches('S') {
        "MILLISECOND" => 1.0,
        "SECOND" => 1_000.0,
        "MINUTE" => 60_000.0,
        "HOUR" => 3_600_000.0,
        "DAY" => 86_400_000.0,
        other => {
            return Err(SqlError::plan(format!(
                "INTERVAL ... {other}: only day-time intervals (MILLISECOND to DAY) are supported"
            )));
        }
    };
    let amount: f64 = text.trim().parse().map_err(|_| {
        SqlError::plan(format!(
            "INTERVAL '{text}' {unit}: the value must be a number"
        ))
    })?;
    Ok(Typed::constant(
        Value::Interval((amount * per_unit).round() as i64),
        DataType::Interval,
    ))
}

/// `TIMESTAMP '2026-01-15 00:00:00'`, `DATE '2026-01-15'`.
fn typed_string(typed: &ast::TypedString) -> Result<Typed> {
    let text = match &typed.value.value {
        ast::Value::SingleQuotedString(s) => s.clone(),
        other => return Err(SqlError::plan(format!("bad literal {other}"))),
    };
    let to = sql_type(&typed.data_type)?;
    Typed::constant(Value::string(&text), DataType::Varchar).cast(&to)
}

/// A `sqlparser` type as Riffle's.
pub fn sql_type(ty: &ast::DataType) -> Result<DataType> {
    parse::convert_type(ty).ok_or_else(|| SqlError::plan(format!("type {ty} is not supported")))
}

fn binary(
    left: &ast::Expr,
    op: &BinaryOperator,
    right: &ast::Expr,
    scope: &Scope<'_>,
) -> Result<Typed> {
    let (l, r) = (compile(left, scope)?, compile(right, scope)?);
    use BinaryOperator as B;
    match op {
        B::Plus | B::Minus | B::Multiply | B::Divide | B::Modulo => arithmetic(op, l, r),
        B::Eq | B::NotEq | B::Lt | B::LtEq | B::Gt | B::GtEq => {
            let l = Operand::of(l, is_literal(left));
            let r = Operand::of(r, is_literal(right));
            compare(op, l, r)
        }
        B::And | B::Or => logic(matches!(op, B::And), l, r),
        B::StringConcat => scope.functions.call("CONCAT", vec![l, r]),
        other => Err(SqlError::plan(format!(
            "the operator {other} is not supported yet"
        ))),
    }
}

/// The type two numeric operands meet in (for comparisons, `CASE` branches, `COALESCE`).
pub fn common_type(a: &DataType, b: &DataType) -> Option<DataType> {
    use DataType as T;
    if a == b {
        return Some(a.clone());
    }
    match (a, b) {
        (T::Null, other) | (other, T::Null) => Some(other.clone()),
        (T::Double | T::Float, n) | (n, T::Double | T::Float) if n.is_numeric() => Some(T::Double),
        (x, y) if x.is_integer() && y.is_integer() => Some(wider_integer(x, y)),
        (x, y) if x.is_numeric() && y.is_numeric() => {
            let ((p1, s1), (p2, s2)) = (x.as_decimal()?, y.as_decimal()?);
            let scale = s1.max(s2);
            let precision = ((p1 - s1).max(p2 - s2) + scale).min(38);
            Some(T::Decimal { precision, scale })
        }
        (T::Timestamp { precision: p }, T::Timestamp { precision: q }) => Some(T::Timestamp {
            precision: (*p).max(*q),
        }),
        (T::Varchar, T::Varchar) => Some(T::Varchar),
        _ => None,
    }
}

fn wider_integer(a: &DataType, b: &DataType) -> DataType {
    let rank = |t: &DataType| match t {
        DataType::TinyInt => 0,
        DataType::SmallInt => 1,
        DataType::Int => 2,
        _ => 3,
    };
    if rank(a) >= rank(b) {
        a.clone()
    } else {
        b.clone()
    }
}

/// Flink's rule for a `DECIMAL` result too large: at most 38 digits, keeping at least 6
/// after the point (or fewer, if the value had fewer).
fn adjust(precision: u32, scale: u32) -> DataType {
    if precision <= 38 {
        return DataType::Decimal {
            precision: precision as u8,
            scale: scale as u8,
        };
    }
    let integral = precision - scale;
    let min_scale = scale.min(6);
    let scale = (38u32.saturating_sub(integral)).max(min_scale);
    DataType::Decimal {
        precision: 38,
        scale: scale as u8,
    }
}

fn arithmetic(op: &BinaryOperator, l: Typed, r: Typed) -> Result<Typed> {
    use BinaryOperator as B;
    use DataType as T;
    let nullable = l.nullable || r.nullable;
    // Time arithmetic: a timestamp plus or minus an interval.
    if l.ty.is_timestamp() && r.ty == T::Interval && matches!(op, B::Plus | B::Minus) {
        let sign = if matches!(op, B::Plus) { 1 } else { -1 };
        let (le, re) = (l.eval, r.eval);
        return Ok(Typed::new(
            l.ty,
            nullable,
            Arc::new(move |row| {
                Ok(match (le(row)?, re(row)?) {
                    (Value::Timestamp(t), Value::Interval(i)) => Value::Timestamp(t + sign * i),
                    _ => Value::Null,
                })
            }),
        ));
    }
    if !l.ty.is_numeric() && l.ty != T::Null || !r.ty.is_numeric() && r.ty != T::Null {
        return Err(SqlError::plan(format!(
            "{op} needs numbers, got {} and {}",
            l.ty, r.ty
        )));
    }
    let kind = op.clone();
    let (lt, rt) = (l.ty.clone(), r.ty.clone());
    let result = match (&lt, &rt) {
        (x, y) if matches!(x, T::Double | T::Float) || matches!(y, T::Double | T::Float) => {
            T::Double
        }
        (x, y) if (x.is_integer() || *x == T::Null) && (y.is_integer() || *y == T::Null) => {
            if *x == T::Null {
                y.clone()
            } else if *y == T::Null {
                x.clone()
            } else {
                wider_integer(x, y)
            }
        }
        (x, y) => {
            let (p1, s1) = x.as_decimal().unwrap_or((19, 0));
            let (p2, s2) = y.as_decimal().unwrap_or((19, 0));
            let (p1, s1, p2, s2) = (p1 as u32, s1 as u32, p2 as u32, s2 as u32);
            match op {
                B::Plus | B::Minus => {
                    let scale = s1.max(s2);
                    adjust((p1 - s1).max(p2 - s2) + scale + 1, scale)
                }
                B::Multiply => adjust(p1 + p2 + 1, s1 + s2),
                B::Divide => {
                    let scale = 6u32.max(s1 + p2 + 1);
                    adjust(p1 - s1 + s2 + scale, scale)
                }
                _ => {
                    let scale = s1.max(s2);
                    adjust((p1 - s1).min(p2 - s2) + scale, scale)
                }
            }
        }
    };
    let (le, re) = (l.eval, r.eval);
    let out = result.clone();
    let text = format!("{op}");
    Ok(Typed::new(
        result,
        nullable || matches!(out, T::Decimal { .. }) || matches!(op, B::Divide | B::Modulo),
        Arc::new(move |row| {
            let (a, b) = (le(row)?, re(row)?);
            if a.is_null() || b.is_null() {
                return Ok(Value::Null);
            }
            compute(&kind, &a, &b, &out).map_err(|e| riffle::Error::user(format!("{text}: {e}")))
        }),
    ))
}

/// `a op b` in the result type `out`.
fn compute(op: &BinaryOperator, a: &Value, b: &Value, out: &DataType) -> Result<Value, String> {
    use BinaryOperator as B;
    match out {
        DataType::Double | DataType::Float => {
            let (x, y) = (to_f64(a), to_f64(b));
            Ok(Value::Double(match op {
                B::Plus => x + y,
                B::Minus => x - y,
                B::Multiply => x * y,
                B::Divide => x / y,
                _ => x % y,
            }))
        }
        DataType::Decimal { precision, scale } => {
            let (x, y) = (to_decimal(a), to_decimal(b));
            let result = match op {
                B::Plus | B::Minus => {
                    let s = x.scale.max(y.scale);
                    let (xa, ya) = (x.rescale(s), y.rescale(s));
                    match (xa, ya) {
                        (Some(xa), Some(ya)) => {
                            let u = if matches!(op, B::Plus) {
                                xa.unscaled.checked_add(ya.unscaled)
                            } else {
                                xa.unscaled.checked_sub(ya.unscaled)
                            };
                            u.map(|u| Decimal::new(u, s))
                        }
                        _ => None,
                    }
                }
                B::Multiply => x
                    .unscaled
                    .checked_mul(y.unscaled)
                    .map(|u| Decimal::new(u, x.scale + y.scale)),
                B::Divide => {
                    if y.unscaled == 0 {
                        return Err("division by zero".into());
                    }
                    // x / y at `scale` digits: x * 10^(scale + ys - xs) / y, rounded half up.
                    let shift = *scale as i32 + y.scale as i32 - x.scale as i32;
                    let numerator = if shift >= 0 {
                        x.unscaled.checked_mul(pow10(shift as u8))
                    } else {
                        Some(x.unscaled / pow10((-shift) as u8))
                    };
                    numerator.map(|n| {
                        let (q, r) = (n / y.unscaled, n % y.unscaled);
                        let up = (r.abs() * 2 >= y.unscaled.abs()) as i128;
                        let sign = if (n < 0) != (y.unscaled < 0) { -1 } else { 1 };
                        Decimal::new(q + sign * up, *scale)
                    })
                }
                _ => {
                    if y.unscaled == 0 {
                        return Err("division by zero".into());
                    }
                    let s = x.scale.max(y.scale);
                    match (x.rescale(s), y.rescale(s)) {
                        (Some(xa), Some(ya)) => Some(Decimal::new(xa.unscaled % ya.unscaled, s)),
                        _ => None,
                    }
                }
            };
            // Overflow, or more digits than the type holds: NULL, as in Flink.
            Ok(result
                .and_then(|d| d.rescale(*scale))
                .filter(|d| d.fits(*precision))
                .map_or(Value::Null, Value::Decimal))
        }
        _ => {
            let (x, y) = (to_i64(a), to_i64(b));
            let result = match op {
                B::Plus => x.wrapping_add(y),
                B::Minus => x.wrapping_sub(y),
                B::Multiply => x.wrapping_mul(y),
                B::Divide => {
                    if y == 0 {
                        return Err("division by zero".into());
                    }
                    x.wrapping_div(y)
                }
                _ => {
                    if y == 0 {
                        return Err("division by zero".into());
                    }
                    x.wrapping_rem(y)
                }
            };
            Ok(Value::Int(wrap_integer(result, out)))
        }
    }
}

/// An integer result wrapped to its type's width (Flink's `INT` arithmetic wraps).
fn wrap_integer(value: i64, ty: &DataType) -> i64 {
    match ty {
        DataType::TinyInt => value as i8 as i64,
        DataType::SmallInt => value as i16 as i64,
        DataType::Int => value as i32 as i64,
        _ => value,
    }
}

/// A number as a double.
pub fn to_f64(value: &Value) -> f64 {
    match value {
        Value::Int(i) => *i as f64,
        Value::Double(d) => *d,
        Value::Decimal(d) => d.to_f64(),
        _ => f64::NAN,
    }
}

/// A number as an exact decimal (a double by its shortest decimal form).
pub fn to_decimal(value: &Value) -> Decimal {
    match value {
        Value::Int(i) => Decimal::new(*i as i128, 0),
        Value::Decimal(d) => *d,
        Value::Double(d) => parse_decimal(&d.to_string()).unwrap_or(Decimal::new(0, 0)),
        _ => Decimal::new(0, 0),
    }
}

fn to_i64(value: &Value) -> i64 {
    match value {
        Value::Int(i) => *i,
        Value::Double(d) => *d as i64,
        Value::Decimal(d) => (d.unscaled / pow10(d.scale)) as i64,
        _ => 0,
    }
}

/// `"-12.340"` as a decimal.
pub fn parse_decimal(text: &str) -> Option<Decimal> {
    let text = text.trim();
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty() && fraction.is_empty()
        || !whole
            .chars()
            .chain(fraction.chars())
            .all(|c| c.is_ascii_digit())
    {
        return None;
    }
    let unscaled: i128 = format!("{whole}{fraction}").parse().ok()?;
    let scale = u8::try_from(fraction.len()).ok().filter(|s| *s <= 38)?;
    Some(Decimal::new(
        if negative { -unscaled } else { unscaled },
        scale,
    ))
}

/// Whether `expr` is a literal: its value, computed once, is its value for every row.
fn is_literal(expr: &ast::Expr) -> bool {
    use ast::Expr as E;
    match expr {
        E::Value(_) | E::Interval(_) | E::TypedString(_) => true,
        E::Nested(inner) => is_literal(inner),
        E::UnaryOp { expr, .. } => is_literal(expr),
        _ => false,
    }
}

/// One side of a comparison, with how it is read for a row: in place when it is a column or
/// a field of one (no copy of a string), once at plan time when it is a literal, else
/// computed.
struct Operand {
    typed: Typed,
    read: Read,
}

/// How a value an expression needs (an [`Operand`], a function's argument) is read for a row.
#[derive(Clone)]
pub(crate) enum Read {
    /// In place: a column, or a field of one.
    Place(Place),
    /// A literal's value, computed once.
    Constant(Value),
    /// Computed for each row.
    Computed(Eval),
}

impl Operand {
    /// `typed`, a literal's value computed once when `literal`.
    fn of(typed: Typed, literal: bool) -> Operand {
        let constant = literal.then(|| typed.constant_value()).flatten();
        let read = match (typed.place, constant) {
            (Some(place), _) => Read::Place(place),
            (None, Some(value)) => Read::Constant(value),
            (None, None) => Read::Computed(typed.eval.clone()),
        };
        Operand { typed, read }
    }
}

impl Read {
    /// In place where `typed` is a place, else computed.
    pub(crate) fn of(typed: &Typed) -> Read {
        match typed.place {
            Some(place) => Read::Place(place),
            None => Read::Computed(typed.eval.clone()),
        }
    }

    /// The value for `row`, where a computed one was computed into `computed` before.
    #[inline]
    pub(crate) fn get<'a>(&'a self, row: &'a Row, computed: &'a Value) -> &'a Value {
        match self {
            Read::Place(place) => place.get_ref(row),
            Read::Constant(value) => value,
            Read::Computed(_) => computed,
        }
    }
}

fn compare(op: &BinaryOperator, l: Operand, r: Operand) -> Result<Typed> {
    let (l, le) = (l.typed, l.read);
    let (r, re) = (r.typed, r.read);
    let comparable = l.ty == r.ty
        || common_type(&l.ty, &r.ty).is_some()
        || (l.ty.is_timestamp() && r.ty.is_timestamp());
    if !comparable {
        return Err(SqlError::plan(format!(
            "{op} cannot compare {} with {}",
            l.ty, r.ty
        )));
    }
    use BinaryOperator as B;
    let test: fn(std::cmp::Ordering) -> bool = match op {
        B::Eq => |o| o.is_eq(),
        B::NotEq => |o| o.is_ne(),
        B::Lt => |o| o.is_lt(),
        B::LtEq => |o| o.is_le(),
        B::Gt => |o| o.is_gt(),
        _ => |o| o.is_ge(),
    };
    let nullable = l.nullable || r.nullable;
    let decide = move |a: &Value, b: &Value| match a.is_null() || b.is_null() {
        true => Value::Null,
        false => Value::Bool(test(a.cmp(b))),
    };
    static NULL: Value = Value::Null;
    // One closure per way of reading the two sides: only a computed side makes a value.
    let eval: Eval = match (le, re) {
        (Read::Computed(le), Read::Computed(re)) => Arc::new(move |row| {
            let a = le(row)?;
            Ok(decide(&a, &re(row)?))
        }),
        (Read::Computed(le), re) => Arc::new(move |row| Ok(decide(&le(row)?, re.get(row, &NULL)))),
        (le, Read::Computed(re)) => Arc::new(move |row| Ok(decide(le.get(row, &NULL), &re(row)?))),
        (le, re) => Arc::new(move |row| Ok(decide(le.get(row, &NULL), re.get(row, &NULL)))),
    };
    Ok(Typed::new(DataType::Boolean, nullable, eval))
}

fn require_boolean(t: &Typed, what: &str) -> Result<()> {
    if matches!(t.ty, DataType::Boolean | DataType::Null) {
        Ok(())
    } else {
        Err(SqlError::plan(format!(
            "{what} needs a BOOLEAN, got {}",
            t.ty
        )))
    }
}

fn logic(and: bool, l: Typed, r: Typed) -> Result<Typed> {
    require_boolean(&l, if and { "AND" } else { "OR" })?;
    require_boolean(&r, if and { "AND" } else { "OR" })?;
    let nullable = l.nullable || r.nullable;
    let (le, re) = (l.eval, r.eval);
    Ok(Typed::new(
        DataType::Boolean,
        nullable,
        Arc::new(move |row| {
            let a = le(row)?;
            // Short cut: FALSE AND x, TRUE OR x.
            match (and, &a) {
                (true, Value::Bool(false)) => return Ok(Value::Bool(false)),
                (false, Value::Bool(true)) => return Ok(Value::Bool(true)),
                _ => {}
            }
            let b = re(row)?;
            Ok(match (a, b) {
                (Value::Bool(x), Value::Bool(y)) => Value::Bool(if and { x && y } else { x || y }),
                (_, Value::Bool(false)) if and => Value::Bool(false),
                (_, Value::Bool(true)) if !and => Value::Bool(true),
                _ => Value::Null,
            })
        }),
    ))
}

fn unary(op: UnaryOperator, expr: &ast::Expr, scope: &Scope<'_>) -> Result<Typed> {
    let value = compile(expr, scope)?;
    match op {
        UnaryOperator::Not => {
            require_boolean(&value, "NOT")?;
            let eval = value.eval;
            Ok(Typed::new(
                DataType::Boolean,
                value.nullable,
                Arc::new(move |row| {
                    Ok(match eval(row)? {
                        Value::Bool(b) => Value::Bool(!b),
                        _ => Value::Null,
                    })
                }),
            ))
        }
        UnaryOperator::Minus => {
            // A negative literal stays a literal of its type.
            let zero = Typed::constant(Value::Int(0), DataType::Int);
            let ty = value.ty.clone();
            arithmetic(&BinaryOperator::Minus, zero, value)
                .and_then(|t| if ty.is_numeric() { t.cast(&ty) } else { Ok(t) })
        }
        UnaryOperator::Plus => Ok(value),
        other => Err(SqlError::plan(format!(
            "the operator {other} is not supported"
        ))),
    }
}

fn is_null(expr: &ast::Expr, scope: &Scope<'_>, negated: bool) -> Result<Typed> {
    let eval = compile(expr, scope)?.eval;
    Ok(Typed::new(
        DataType::Boolean,
        false,
        Arc::new(move |row| Ok(Value::Bool(eval(row)?.is_null() != negated))),
    ))
}

fn is_bool(
    expr: &ast::Expr,
    scope: &Scope<'_>,
    wanted: Option<bool>,
    negated: bool,
) -> Result<Typed> {
    let value = compile(expr, scope)?;
    require_boolean(&value, "IS TRUE / IS FALSE")?;
    let eval = value.eval;
    Ok(Typed::new(
        DataType::Boolean,
        false,
        Arc::new(move |row| {
            let is = match eval(row)? {
                Value::Bool(b) => Some(b) == wanted,
                _ => false,
            };
            Ok(Value::Bool(is != negated))
        }),
    ))
}

fn between(
    expr: &ast::Expr,
    negated: bool,
    low: &ast::Expr,
    high: &ast::Expr,
    scope: &Scope<'_>,
) -> Result<Typed> {
    let value = compile(expr, scope)?;
    let (low_literal, high_literal) = (is_literal(low), is_literal(high));
    let ge = compare(
        &BinaryOperator::GtEq,
        Operand::of(value.clone(), false),
        Operand::of(compile(low, scope)?, low_literal),
    )?;
    let le = compare(
        &BinaryOperator::LtEq,
        Operand::of(value, false),
        Operand::of(compile(high, scope)?, high_literal),
    )?;
    let both = logic(true, ge, le)?;
    if !negated {
        return Ok(both);
    }
    let eval = both.eval;
    Ok(Typed::new(
        DataType::Boolean,
        both.nullable,
        Arc::new(move |row| {
            Ok(match eval(row)? {
                Value::Bool(b) => Value::Bool(!b),
                _ => Value::Null,
            })
        }),
    ))
}

fn in_list(
    expr: &ast::Expr,
    list: &[ast::Expr],
    negated: bool,
    scope: &Scope<'_>,
) -> Result<Typed> {
    let value = compile(expr, scope)?;
    let mut options = Vec::new();
    for item in list {
        let item = compile(item, scope)?;
        if common_type(&value.ty, &item.ty).is_none() && value.ty != item.ty {
            return Err(SqlError::plan(format!(
                "IN cannot compare {} with {}",
                value.ty, item.ty
            )));
        }
        options.push(item.eval);
    }
    let eval = value.eval;
    Ok(Typed::new(
        DataType::Boolean,
        true,
        Arc::new(move |row| {
            let v = eval(row)?;
            if v.is_null() {
                return Ok(Value::Null);
            }
            let mut saw_null = false;
            for option in &options {
                let o = option(row)?;
                if o.is_null() {
                    saw_null = true;
                } else if o == v {
                    return Ok(Value::Bool(!negated));
                }
            }
            Ok(if saw_null {
                Value::Null
            } else {
                Value::Bool(negated)
            })
        }),
    ))
}

/// `LIKE` with `%` and `_` (and an escape character).
fn like(
    expr: &ast::Expr,
    pattern: &ast::Expr,
    escape: Option<&ast::Expr>,
    negated: bool,
    scope: &Scope<'_>,
) -> Result<Typed> {
    let value = compile(expr, scope)?;
    let pattern = compile(pattern, scope)?;
    let escape = match escape.map(|e| compile(e, scope)).transpose()? {
        Some(e) => match e.constant_value() {
            Some(Value::String(s)) => s.chars().next(),
            _ => return Err(SqlError::plan("LIKE ... ESCAPE needs a constant character")),
        },
        None => None,
    };
    let (ve, pe) = (value.eval, pattern.eval);
    Ok(Typed::new(
        DataType::Boolean,
        true,
        Arc::new(move |row| {
            Ok(match (ve(row)?, pe(row)?) {
                (Value::String(s), Value::String(p)) => {
                    Value::Bool(like_matches(&s, &p, escape) != negated)
                }
                _ => Value::Null,
            })
        }),
    ))
}

/// Whether `text` matches the `LIKE` pattern `pattern`.
pub fn like_matches(text: &str, pattern: &str, escape: Option<char>) -> bool {
    let text: Vec<char> = text.chars().collect();
    // (char, is a wildcard)
    let mut tokens: Vec<(char, bool)> = Vec::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if Some(c) == escape {
            if let Some(next) = chars.next() {
                tokens.push((next, false));
            }
        } else {
            tokens.push((c, c == '%' || c == '_'));
        }
    }
    // Dynamic programming over (pattern position, text position).
    let mut reach = vec![false; text.len() + 1];
    reach[0] = true;
    for (c, wild) in tokens {
        let mut next = vec![false; text.len() + 1];
        for i in 0..=text.len() {
            if !reach[i] {
                continue;
            }
            match (c, wild) {
                ('%', true) => {
                    for slot in next.iter_mut().skip(i) {
                        *slot = true;
                    }
                }
                ('_', true) => {
                    if i < text.len() {
                        next[i + 1] = true;
                    }
                }
                (c, _) => {
                    if i < text.len() && text[i] == c {
                        next[i + 1] = true;
                    }
                }
            }
        }
        reach = next;
    }
    reach[text.len()]
}

fn case(
    operand: Option<&ast::Expr>,
    conditions: &[ast::CaseWhen],
    else_result: Option<&ast::Expr>,
    scope: &Scope<'_>,
) -> Result<Typed> {
    let operand = operand.map(|o| compile(o, scope)).transpose()?;
    // `CASE WHEN c = 0 THEN .. WHEN c = 1 THEN ..` (or `CASE c WHEN 0 ..`), one column or field
    // against literals (Nexmark's `dateTime` of each event kind): `c` read once, in place.
    let switch = conditions
        .iter()
        .map(|when| match &operand {
            Some(operand) => Some((
                operand.place?,
                is_literal(&when.condition)
                    .then(|| compile(&when.condition, scope).ok()?.constant_value())??,
            )),
            None => place_equals_literal(&when.condition, scope),
        })
        .collect::<Option<Vec<(Place, Value)>>>()
        .filter(|arms| arms.windows(2).all(|w| w[0].0 == w[1].0));
    let mut whens = Vec::new();
    let mut results = Vec::new();
    for when in conditions {
        let condition = compile(&when.condition, scope)?;
        let condition = match &operand {
            Some(operand) => compare(
                &BinaryOperator::Eq,
                Operand::of(operand.clone(), false),
                Operand::of(condition, is_literal(&when.condition)),
            )?,
            None => {
                require_boolean(&condition, "WHEN")?;
                condition
            }
        };
        whens.push(condition.eval);
        results.push(compile(&when.result, scope)?);
    }
    let otherwise = match else_result {
        Some(e) => compile(e, scope)?,
        None => Typed::constant(Value::Null, DataType::Null),
    };
    results.push(otherwise);
    let mut ty = DataType::Null;
    for result in &results {
        ty = common_type(&ty, &result.ty).ok_or_else(|| {
            SqlError::plan(format!(
                "CASE branches of types {ty} and {} have no common type",
                result.ty
            ))
        })?;
    }
    let nullable = results.iter().any(|r| r.nullable);
    let results: Vec<Eval> = results
        .into_iter()
        .map(|r| r.cast(&ty).map(|r| r.eval))
        .collect::<Result<_>>()?;
    if let Some(arms) = switch
        && let Some(&(place, _)) = arms.first()
    {
        let keys: Vec<Value> = arms.into_iter().map(|(_, key)| key).collect();
        return Ok(Typed::new(
            ty,
            nullable,
            Arc::new(move |row| {
                let value = place.get_ref(row);
                if !value.is_null() {
                    for (key, result) in keys.iter().zip(&results) {
                        // As `value = key`: `NULL` (never true) when either is.
                        if !key.is_null() && value.cmp(key).is_eq() {
                            return result(row);
                        }
                    }
                }
                results.last().expect("the ELSE branch")(row)
            }),
        ));
    }
    Ok(Typed::new(
        ty,
        nullable,
        Arc::new(move |row| {
            for (when, result) in whens.iter().zip(&results) {
                if let Value::Bool(true) = when(row)? {
                    return result(row);
                }
            }
            results.last().expect("the ELSE branch")(row)
        }),
    ))
}

/// `place = literal` (or `literal = place`): the place, and the literal's value.
fn place_equals_literal(condition: &ast::Expr, scope: &Scope<'_>) -> Option<(Place, Value)> {
    let ast::Expr::BinaryOp {
        left,
        op: BinaryOperator::Eq,
        right,
    } = condition
    else {
        return None;
    };
    let (place, literal) = match (is_literal(left), is_literal(right)) {
        (false, true) => (left, right),
        (true, false) => (right, left),
        _ => return None,
    };
    let place = compile(place, scope).ok()?.place?;
    Some((place, compile(literal, scope).ok()?.constant_value()?))
}

/// `TRY_CAST`: `NULL` where the cast fails.
fn try_cast(value: Typed, to: &DataType) -> Result<Typed> {
    let cast = value.cast(to)?;
    let eval = cast.eval;
    Ok(Typed::new(
        cast.ty,
        true,
        Arc::new(move |row| Ok(eval(row).unwrap_or(Value::Null))),
    ))
}

/// Whether a value of `from` can be cast to `to`.
fn castable(from: &DataType, to: &DataType) -> bool {
    use DataType as T;
    match (from, to) {
        (T::Null, _) => true,
        (a, b) if a.is_numeric() && b.is_numeric() => true,
        (_, T::Varchar) => true,
        (T::Varchar, _) => !matches!(to, T::Row(_) | T::Array(_) | T::Map(..)),
        (a, b) if a.is_timestamp() && b.is_timestamp() => true,
        (a, T::Date) | (T::Date, a) if a.is_timestamp() => true,
        (T::Boolean, b) if b.is_numeric() => true,
        (a, T::Boolean) if a.is_numeric() => true,
        (a, b) if a.is_integer() && b.is_timestamp() => true,
        (T::Row(a), T::Row(b)) => a.len() == b.len(),
        _ => from == to,
    }
}

/// `value` (of type `from`) as a value of `to`.
pub fn cast_value(value: Value, from: &DataType, to: &DataType) -> riffle::Result<Value> {
    use DataType as T;
    if value.is_null() {
        return Ok(Value::Null);
    }
    let fail = |why: &str| {
        riffle::Error::user(format!(
            "CAST({} AS {to}): {why}",
            crate::format::display(&value, from)
        ))
    };
    Ok(match (to, &value) {
        (T::Varchar, _) => Value::String(CompactString::new(crate::format::display(&value, from))),
        (t, Value::String(s)) if t.is_integer() => Value::Int(
            s.trim()
                .parse()
                .map_err(|_| fail("not an integer"))
                .map(|v| wrap_integer(v, t))?,
        ),
        (T::Double | T::Float, Value::String(s)) => {
            Value::Double(s.trim().parse().map_err(|_| fail("not a number"))?)
        }
        (T::Decimal { precision, scale }, Value::String(s)) => parse_decimal(s)
            .and_then(|d| d.rescale(*scale))
            .filter(|d| d.fits(*precision))
            .map_or(Value::Null, Value::Decimal),
        (T::Boolean, Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => return Err(fail("not a boolean")),
        },
        (t, Value::String(s)) if t.is_timestamp() => Value::Timestamp(
            crate::format::parse_timestamp(s).ok_or_else(|| fail("not a timestamp"))?,
        ),
        (T::Date, Value::String(s)) => {
            Value::Date(crate::format::parse_date(s).ok_or_else(|| fail("not a date"))?)
        }
        (t, v) if t.is_integer() => Value::Int(wrap_integer(to_i64(v), t)),
        (T::Double | T::Float, v) => Value::Double(to_f64(v)),
        (T::Decimal { precision, scale }, v) => Some(to_decimal(v))
            .and_then(|d| d.rescale(*scale))
            .filter(|d| d.fits(*precision))
            .map_or(Value::Null, Value::Decimal),
        (T::Boolean, v) => Value::Bool(to_f64(v) != 0.0),
        (t, Value::Int(i)) if t.is_timestamp() => Value::Timestamp(*i * 1000),
        (t, Value::Timestamp(ms)) if t.is_timestamp() => Value::Timestamp(*ms),
        (T::Date, Value::Timestamp(ms)) => Value::Date(ms.div_euclid(86_400_000) as i32),
        (t, Value::Date(days)) if t.is_timestamp() => Value::Timestamp(*days as i64 * 86_400_000),
        (T::Row(_), Value::Row(values)) => Value::Row(values.clone()),
        _ => value.clone(),
    })
}

/// A function call: an aggregate is refused here (the planner takes those out first).
fn call(function: &ast::Function, scope: &Scope<'_>) -> Result<Typed> {
    let name = function.name.to_string().to_ascii_uppercase();
    if function.over.is_some() {
        return Err(SqlError::plan(format!(
            "{name}(...) OVER (...) is not supported here"
        )));
    }
    if functions::is_aggregate(&name) {
        return Err(SqlError::plan(format!(
            "the aggregate {name}(...) is only allowed in the SELECT list or HAVING of a grouped query"
        )));
    }
    let args = match &function.args {
        ast::FunctionArguments::None => Vec::new(),
        ast::FunctionArguments::List(list) => list
            .args
            .iter()
            .map(|arg| match arg {
                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => compile(e, scope),
                other => Err(SqlError::plan(format!(
                    "the argument `{other}` of {name} is not supported"
                ))),
            })
            .collect::<Result<Vec<_>>>()?,
        ast::FunctionArguments::Subquery(_) => {
            return Err(SqlError::plan(format!("{name}(subquery) is not supported")));
        }
    };
    scope.functions.call(&name, args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::dialect::GenericDialect;
    use sqlparser::parser::Parser;

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("price", DataType::BigInt),
            Field::new("name", DataType::Varchar),
            Field::new(
                "bid",
                DataType::Row(vec![
                    Field::new("auction", DataType::BigInt),
                    Field::new("dateTime", DataType::Timestamp { precision: 3 }),
                ]),
            ),
            Field::new("ratio", DataType::Double),
        ])
    }

    fn row() -> Row {
        Row(vec![
            Value::Int(1_000),
            Value::string("Apple"),
            Value::Row(vec![Value::Int(123), Value::Timestamp(1_768_435_200_000)]),
            Value::Double(0.5),
        ])
    }

    fn eval(sql: &str) -> (DataType, Value) {
        let expr = Parser::new(&GenericDialect {})
            .try_with_sql(sql)
            .unwrap()
            .parse_expr()
            .unwrap();
        let functions = Functions::default();
        let schema = schema();
        let scope = Scope::new(&schema, Some("t"), &functions);
        let typed = compile(&expr, &scope).unwrap_or_else(|e| panic!("{sql}: {e}"));
        let value = (typed.eval)(&row()).unwrap();
        (typed.ty, value)
    }

    /// `sql` compiled over [`schema`], evaluated for `row`.
    fn eval_on(sql: &str, row: &Row) -> Value {
        let expr = Parser::new(&GenericDialect {})
            .try_with_sql(sql)
            .unwrap()
            .parse_expr()
            .unwrap();
        let (functions, schema) = (Functions::default(), schema());
        let typed = compile(&expr, &Scope::new(&schema, Some("t"), &functions)).unwrap();
        (typed.eval)(row).unwrap()
    }

    proptest::proptest! {
        /// A `CASE` over one column or field against literals (read once, in place) gives
        /// what the same `CASE` over a computed value does, `NULL`s and numbers of other
        /// kinds included.
        #[test]
        fn a_case_over_one_column_against_literals_is_the_general_case(
            price in proptest::option::of(-2i64..4),
            auction in proptest::option::of(-2i64..4),
        ) {
            let value = |v: Option<i64>| v.map_or(Value::Null, Value::Int);
            let row = Row(vec![
                value(price),
                Value::string("x"),
                Value::Row(vec![value(auction), Value::Timestamp(7)]),
                Value::Double(0.5),
            ]);
            for (read, computed) in [("price", "(price + 0)"), ("bid.auction", "(bid.auction + 0)")] {
                for text in [
                    "CASE WHEN {c} = 0 THEN 'a' WHEN 1 = {c} THEN 'b' WHEN {c} = NULL THEN 'n' \
                     WHEN {c} = 2.0 THEN 'd' WHEN {c} = 3e0 THEN 'e' ELSE 'z' END",
                    "CASE {c} WHEN 0 THEN bid.dateTime WHEN -1 THEN TIMESTAMP '2026-01-15 00:00:00' END",
                ] {
                    let switch = eval_on(&text.replace("{c}", read), &row);
                    let general = eval_on(&text.replace("{c}", computed), &row);
                    proptest::prop_assert_eq!(switch, general, "{}", text);
                }
            }
        }
    }

    #[test]
    fn decimal_arithmetic_has_flinks_types_and_exact_values() {
        let (ty, value) = eval("0.908 * price");
        assert_eq!(ty.to_string(), "DECIMAL(23, 3)"); // as the Nexmark q1 sink declares it
        assert_eq!(value, Value::Decimal(Decimal::new(908_000, 3)));
        let (ty, _) = eval("price + 1.5");
        assert_eq!(ty.to_string(), "DECIMAL(21, 1)");
        let (_, value) = eval("1.0 / 3");
        assert_eq!(
            crate::format::display(
                &value,
                &DataType::Decimal {
                    precision: 38,
                    scale: 6
                }
            ),
            "0.333333"
        );
        assert_eq!(eval("7 / 2").1, Value::Int(3));
        assert_eq!(eval("MOD(price, 123)").1, Value::Int(1_000 % 123));
        assert_eq!(eval("price * ratio").1, Value::Double(500.0));
    }

    #[test]
    fn columns_fields_and_qualifiers_resolve() {
        assert_eq!(eval("bid.auction").1, Value::Int(123));
        assert_eq!(eval("t.bid.auction").1, Value::Int(123));
        assert_eq!(eval("t.price").1, Value::Int(1_000));
        assert_eq!(eval("HOUR(bid.dateTime)").1, Value::Int(0));
    }

    #[test]
    fn case_logic_and_null_follow_sql() {
        assert_eq!(
            eval("CASE WHEN lower(name) = 'apple' THEN '0' ELSE 'x' END").1,
            Value::string("0")
        );
        assert_eq!(eval("NULL AND FALSE").1, Value::Bool(false));
        assert_eq!(eval("NULL OR FALSE").1, Value::Null);
        assert_eq!(eval("price IN (1, 1000)").1, Value::Bool(true));
        assert_eq!(eval("price BETWEEN 1 AND 10").1, Value::Bool(false));
        assert_eq!(eval("name LIKE 'A%l_'").1, Value::Bool(true));
        assert_eq!(eval("name IS NOT NULL").1, Value::Bool(true));
        assert_eq!(eval("CAST(price AS VARCHAR)").1, Value::string("1000"));
        assert_eq!(
            eval("CAST('12.345' AS DECIMAL(5, 2))").1,
            Value::Decimal(Decimal::new(1235, 2))
        );
    }

    #[test]
    fn errors_name_what_is_wrong() {
        let functions = Functions::default();
        let schema = schema();
        let scope = Scope::new(&schema, None, &functions);
        let compile_err = |sql: &str| {
            let expr = Parser::new(&GenericDialect {})
                .try_with_sql(sql)
                .unwrap()
                .parse_expr()
                .unwrap();
            compile(&expr, &scope).unwrap_err().to_string()
        };
        assert!(compile_err("Price").contains("did you mean `price`"));
        assert!(compile_err("name + 1").contains("needs numbers"));
        assert!(compile_err("bid.nothing").contains("no field `nothing`"));
        assert!(compile_err("nosuch(1)").to_lowercase().contains("nosuch"));
    }

    #[test]
    fn like_patterns_match_as_sql_does() {
        assert!(like_matches("abc", "a%", None));
        assert!(like_matches("abc", "_b_", None));
        assert!(!like_matches("abc", "_b", None));
        assert!(like_matches("50%", "50!%", Some('!')));
        assert!(like_matches("", "%", None));
    }
}
