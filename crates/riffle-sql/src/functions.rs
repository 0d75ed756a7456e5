//! Scalar functions: the built-in ones Nexmark and common jobs use, and functions registered
//! from Rust ([`Functions::register`], what `CREATE FUNCTION name AS '...'` names).
//!
//! Built-in: `MOD`, `ABS`, `ROUND`, `FLOOR`, `CEIL`, `LOWER`, `UPPER`, `CHAR_LENGTH`,
//! `CONCAT`, `SUBSTRING`, `TRIM`/`LTRIM`/`RTRIM`, `REPLACE`, `COALESCE`, `IFNULL`, `NULLIF`,
//! `IF`, `REGEXP_EXTRACT`, `SPLIT_INDEX`, `DATE_FORMAT`, `HOUR`, `MINUTE`, `SECOND`, `YEAR`,
//! `MONTH`, `DAYOFMONTH` and `EXTRACT(unit FROM t)`.

use std::collections::BTreeMap;
use std::sync::Arc;

use compact_str::CompactString;

use crate::error::{Result, SqlError};
use crate::expr::{Eval, Read, Typed, common_type, to_f64};
use crate::types::{DataType, Decimal, Row, Value};

/// The result type of a registered function for its argument types, or why they are refused.
pub type ResultType =
    Arc<dyn Fn(&[DataType]) -> std::result::Result<DataType, String> + Send + Sync>;
/// A registered function's code: argument values in, a value out (an error fails the job).
pub type FunctionEval = Arc<dyn Fn(&[Value]) -> std::result::Result<Value, String> + Send + Sync>;

/// A function registered from Rust: its result type for the argument types (an error names what
/// it accepts), and its code over the argument values.
#[derive(Clone)]
pub struct ScalarFunction {
    /// The result type for the argument types, or why they are refused.
    pub result_type: ResultType,
    /// The function: argument values in, a value out (an error fails the job).
    pub eval: FunctionEval,
}

impl ScalarFunction {
    /// A function of a fixed result type.
    ///
    /// ```
    /// use riffle_sql::{DataType, Value};
    /// use riffle_sql::functions::ScalarFunction;
    /// // count_char(text, 'c'): how often a character occurs (Nexmark q14's UDF).
    /// let count_char = ScalarFunction::returning(DataType::BigInt, |args| match args {
    ///     [Value::String(text), Value::String(c)] => {
    ///         let c = c.chars().next().unwrap_or('\0');
    ///         Ok(Value::Int(text.chars().filter(|x| *x == c).count() as i64))
    ///     }
    ///     _ => Ok(Value::Null),
    /// });
    /// assert_eq!((count_char.eval)(&[Value::string("cocoa"), Value::string("c")]), Ok(Value::Int(2)));
    /// ```
    pub fn returning(
        ty: DataType,
        eval: impl Fn(&[Value]) -> std::result::Result<Value, String> + Send + Sync + 'static,
    ) -> ScalarFunction {
        ScalarFunction {
            result_type: Arc::new(move |_| Ok(ty.clone())),
            eval: Arc::new(eval),
        }
    }
}

/// The functions a query can call: built-in ones, and those registered from Rust.
#[derive(Clone, Default)]
pub struct Functions {
    registered: BTreeMap<String, ScalarFunction>,
    /// The registered functions declared deterministic (upper case).
    deterministic: std::collections::BTreeSet<String>,
}

/// Whether `name` (upper case) is an aggregate function.
pub fn is_aggregate(name: &str) -> bool {
    matches!(
        name,
        "COUNT" | "SUM" | "MIN" | "MAX" | "AVG" | "FIRST_VALUE" | "LAST_VALUE" | "LISTAGG"
    )
}

fn arity(name: &str, args: &[Typed], allowed: std::ops::RangeInclusive<usize>) -> Result<()> {
    if allowed.contains(&args.len()) {
        return Ok(());
    }
    let expected = if allowed.start() == allowed.end() {
        allowed.start().to_string()
    } else {
        format!("{} to {}", allowed.start(), allowed.end())
    };
    Err(SqlError::plan(format!(
        "{name} takes {expected} argument(s), got {}",
        args.len()
    )))
}

/// A function of its arguments' values: `NULL` if any is (unless `null_in` says otherwise).
/// The `index`th part (from 0) of `text` cut at each byte `separator`, an ASCII character: a
/// byte that is no part of another character's encoding, so each cut is between characters.
/// (`str::split` by a `char` searches for its encoding's last byte with `memchr` and compares
/// the whole encoding at each find: slow for a URL's short parts.)
fn nth_part(text: &str, separator: u8, index: usize) -> Option<&str> {
    let mut start = 0;
    let mut left = index;
    for (i, byte) in text.bytes().enumerate() {
        if byte == separator {
            if left == 0 {
                return text.get(start..i);
            }
            left -= 1;
            start = i + 1;
        }
    }
    (left == 0).then(|| text.get(start..)).flatten()
}

fn of_values(
    ty: DataType,
    args: Vec<Typed>,
    f: impl Fn(&[&Value]) -> std::result::Result<Value, String> + Send + Sync + 'static,
    name: &'static str,
) -> Typed {
    /// Arguments read without allocating (the functions here take at most 3).
    const ARGS: usize = 4;
    let nullable = true;
    let reads: Vec<Read> = args.iter().map(Read::of).collect();
    Typed {
        ty,
        nullable,
        eval: Arc::new(move |row: &Row| {
            // Columns and fields are read in place (a URL is not copied to be split); each
            // argument in order, the first `NULL` making the result `NULL`.
            static NULL: Value = Value::Null;
            let mut computed: smallvec::SmallVec<[Value; ARGS]> = smallvec::SmallVec::new();
            for read in &reads {
                let null = match read {
                    Read::Computed(eval) => {
                        let value = eval(row)?;
                        let null = value.is_null();
                        computed.push(value);
                        null
                    }
                    other => other.get(row, &NULL).is_null(),
                };
                if null {
                    return Ok(Value::Null);
                }
            }
            let mut computed = computed.iter();
            let values: smallvec::SmallVec<[&Value; ARGS]> = (reads.iter())
                .map(|read| match read {
                    Read::Computed(_) => computed.next().unwrap_or(&NULL),
                    other => other.get(row, &NULL),
                })
                .collect();
            f(&values).map_err(|e| riffle::Error::user(format!("{name}: {e}")))
        }),
        name: None,
        column: None,
        place: None,
        reads: None,
    }
}

/// The time `DATE_FORMAT` formats: a timestamp, or a string read as one (`None`: another
/// value, formatted as `NULL`).
fn date_format_time(value: &Value) -> std::result::Result<Option<i64>, String> {
    match value {
        Value::Timestamp(ms) => Ok(Some(*ms)),
        Value::String(s) => crate::format::parse_timestamp(s)
            .map(Some)
            .ok_or_else(|| format!("`{s}` is not a timestamp")),
        _ => Ok(None),
    }
}

/// `DATE_FORMAT(t, pattern)` with a constant pattern: read once, and the last text made kept
/// with the span of time it stands for (a day for `yyyy-MM-dd`), so that the rows of one day
/// (or second) format once. Subtasks sharing the function share the kept text; one that finds
/// it taken formats on its own.
fn date_format(mut args: Vec<Typed>, pattern: &str) -> Typed {
    let pattern = crate::format::DatePattern::new(pattern);
    let span = pattern.granularity_ms();
    let last: std::sync::Mutex<Option<(i64, Value)>> = std::sync::Mutex::new(None);
    args.truncate(1);
    of_values(
        DataType::Varchar,
        args,
        move |v| {
            let Some(ms) = date_format_time(v[0])? else {
                return Ok(Value::Null);
            };
            let at = ms.div_euclid(span);
            let Ok(mut last) = last.try_lock() else {
                return Ok(Value::String(pattern.format(ms)));
            };
            match &*last {
                Some((kept, text)) if *kept == at => Ok(text.clone()),
                _ => {
                    let text = Value::String(pattern.format(ms));
                    *last = Some((at, text.clone()));
                    Ok(text)
                }
            }
        },
        "DATE_FORMAT",
    )
}

fn string_arg(value: &Value) -> &str {
    match value {
        Value::String(s) => s.as_str(),
        _ => "",
    }
}

fn int_arg(value: &Value) -> i64 {
    match value {
        Value::Int(i) => *i,
        other => to_f64(other) as i64,
    }
}

fn require(name: &str, arg: &Typed, ok: bool, what: &str) -> Result<()> {
    if ok || arg.ty == DataType::Null {
        Ok(())
    } else {
        Err(SqlError::plan(format!(
            "{name} needs {what}, got {}",
            arg.ty
        )))
    }
}

/// `EXTRACT(unit FROM t)` and `HOUR(t)` and the like.
pub fn extract(unit: &str, value: Typed) -> Result<Typed> {
    let unit = unit.to_ascii_uppercase();
    require(
        &unit,
        &value,
        value.ty.is_timestamp() || value.ty == DataType::Date,
        "a TIMESTAMP or DATE",
    )?;
    let field: fn(i64) -> i64 = match unit.as_str() {
        "YEAR" => |ms| crate::format::parts(ms).0,
        "MONTH" => |ms| crate::format::parts(ms).1 as i64,
        "DAY" | "DAYOFMONTH" => |ms| crate::format::parts(ms).2 as i64,
        "HOUR" => |ms| crate::format::parts(ms).3 as i64,
        "MINUTE" => |ms| crate::format::parts(ms).4 as i64,
        "SECOND" => |ms| crate::format::parts(ms).5 as i64,
        "MILLISECOND" => |ms| crate::format::parts(ms).6 as i64,
        "DOW" | "DAYOFWEEK" => |ms| (ms.div_euclid(86_400_000) + 4).rem_euclid(7) + 1,
        other => {
            return Err(SqlError::plan(format!(
                "EXTRACT({other} FROM ...) is not supported"
            )));
        }
    };
    Ok(of_values(
        DataType::BigInt,
        vec![value],
        move |v| {
            Ok(match &v[0] {
                Value::Timestamp(ms) => Value::Int(field(*ms)),
                Value::Date(days) => Value::Int(field(*days as i64 * 86_400_000)),
                _ => Value::Null,
            })
        },
        "EXTRACT",
    ))
}

impl Functions {
    /// Registers `function` under `name` (case-insensitive): queries call it as `name(...)`.
    /// The planner takes it as one whose value may change between calls with the same
    /// arguments (as `RAND()`): it neither moves a condition calling it below a join, nor
    /// computes its repeated calls once. See
    /// [`register_deterministic`](Self::register_deterministic).
    pub fn register(&mut self, name: impl Into<String>, function: ScalarFunction) {
        let name = name.into().to_ascii_uppercase();
        self.deterministic.remove(&name);
        self.registered.insert(name, function);
    }

    /// Registers `function` under `name`, declared deterministic: the same arguments always
    /// give the same value, with no effect besides (Flink's `isDeterministic()`, true for its
    /// user-defined functions unless they say otherwise). The planner may then filter a
    /// join's side before the join with a condition calling it, and compute a call repeated in
    /// a `SELECT` and its `WHERE` once per row.
    ///
    /// ```
    /// use riffle_sql::{DataType, Value};
    /// use riffle_sql::functions::{Functions, ScalarFunction};
    /// let mut functions = Functions::default();
    /// let is_bot = ScalarFunction::returning(DataType::Boolean, |args| {
    ///     Ok(Value::Bool(matches!(&args[0], Value::String(agent) if agent.contains("bot"))))
    /// });
    /// functions.register_deterministic("is_bot", is_bot);
    /// assert!(functions.is_deterministic("IS_BOT"));
    /// ```
    pub fn register_deterministic(&mut self, name: impl Into<String>, function: ScalarFunction) {
        let name = name.into().to_ascii_uppercase();
        self.deterministic.insert(name.clone());
        self.registered.insert(name, function);
    }

    /// Whether the function registered as `name` was declared deterministic
    /// ([`register_deterministic`](Self::register_deterministic)).
    pub fn is_deterministic(&self, name: &str) -> bool {
        self.deterministic.contains(&name.to_ascii_uppercase())
    }

    /// The registered functions, by name (upper case), in the order of their names.
    ///
    /// ```
    /// use riffle_sql::DataType;
    /// use riffle_sql::functions::{Functions, ScalarFunction};
    /// let mut functions = Functions::default();
    /// functions.register("twice", ScalarFunction::returning(DataType::BigInt, |args| Ok(args[0].clone())));
    /// let names: Vec<&str> = functions.registered().map(|(name, _)| name).collect();
    /// assert_eq!(names, ["TWICE"]);
    /// ```
    pub fn registered(&self) -> impl Iterator<Item = (&str, &ScalarFunction)> {
        self.registered.iter().map(|(name, f)| (name.as_str(), f))
    }

    /// Whether a function of this name is registered.
    pub fn is_registered(&self, name: &str) -> bool {
        self.registered.contains_key(&name.to_ascii_uppercase())
    }

    /// A call of `name` (upper case) with `args`.
    pub fn call(&self, name: &str, args: Vec<Typed>) -> Result<Typed> {
        if let Some(function) = self.registered.get(name) {
            let types: Vec<DataType> = args.iter().map(|a| a.ty.clone()).collect();
            let ty = (function.result_type)(&types)
                .map_err(|e| SqlError::plan(format!("{name}: {e}")))?;
            let eval = function.eval.clone();
            let evals: Vec<Eval> = args.into_iter().map(|a| a.eval).collect();
            let shown = name.to_string();
            return Ok(Typed {
                ty,
                nullable: true,
                eval: Arc::new(move |row: &Row| {
                    let values = evals
                        .iter()
                        .map(|e| e(row))
                        .collect::<riffle::Result<Vec<_>>>()?;
                    eval(&values).map_err(|e| riffle::Error::user(format!("{shown}: {e}")))
                }),
                name: None,
                column: None,
                place: None,
                reads: None,
            });
        }
        builtin(name, args)
    }
}

fn builtin(name: &str, mut args: Vec<Typed>) -> Result<Typed> {
    Ok(match name {
        "MOD" => {
            arity(name, &args, 2..=2)?;
            let (a, b) = (args.remove(0), args.remove(0));
            require(name, &a, a.ty.is_integer(), "integers")?;
            require(name, &b, b.ty.is_integer(), "integers")?;
            let ty = b.ty.clone();
            of_values(
                ty,
                vec![a, b],
                |v| match (&v[0], &v[1]) {
                    (_, Value::Int(0)) => Err("division by zero".into()),
                    (Value::Int(x), Value::Int(y)) => Ok(Value::Int(x % y)),
                    _ => Ok(Value::Null),
                },
                "MOD",
            )
        }
        "ABS" => {
            arity(name, &args, 1..=1)?;
            let a = args.remove(0);
            require(name, &a, a.ty.is_numeric(), "a number")?;
            let ty = a.ty.clone();
            of_values(
                ty,
                vec![a],
                |v| {
                    Ok(match &v[0] {
                        Value::Int(i) => Value::Int(i.wrapping_abs()),
                        Value::Double(d) => Value::Double(d.abs()),
                        Value::Decimal(d) => {
                            Value::Decimal(Decimal::new(d.unscaled.abs(), d.scale))
                        }
                        _ => Value::Null,
                    })
                },
                "ABS",
            )
        }
        "ROUND" | "FLOOR" | "CEIL" | "CEILING" => {
            arity(name, &args, 1..=2)?;
            let a = args.remove(0);
            require(name, &a, a.ty.is_numeric(), "a number")?;
            let digits = match args.pop() {
                Some(d) => match d.constant_value() {
                    Some(Value::Int(n)) => n,
                    _ => {
                        return Err(SqlError::plan(format!(
                            "{name}: the digits must be a constant integer"
                        )));
                    }
                },
                None => 0,
            };
            let mode = match name {
                "ROUND" => 0,
                "FLOOR" => 1,
                _ => 2,
            };
            let ty = match &a.ty {
                DataType::Decimal { precision, .. } => DataType::Decimal {
                    precision: *precision,
                    scale: digits.clamp(0, 38) as u8,
                },
                other => other.clone(),
            };
            of_values(ty, vec![a], move |v| Ok(round(v[0], digits, mode)), "ROUND")
        }
        "LOWER" | "UPPER" | "CHAR_LENGTH" | "CHARACTER_LENGTH" | "LENGTH" => {
            arity(name, &args, 1..=1)?;
            let a = args.remove(0);
            require(name, &a, a.ty == DataType::Varchar, "a string")?;
            let (ty, f): (DataType, fn(&str) -> Value) = match name {
                "LOWER" => (DataType::Varchar, |s| Value::string(s.to_lowercase())),
                "UPPER" => (DataType::Varchar, |s| Value::string(s.to_uppercase())),
                _ => (DataType::Int, |s| Value::Int(s.chars().count() as i64)),
            };
            of_values(ty, vec![a], move |v| Ok(f(string_arg(v[0]))), "LOWER")
        }
        "CONCAT" => {
            let evals: Vec<Eval> = args.into_iter().map(|a| a.eval).collect();
            Typed {
                ty: DataType::Varchar,
                nullable: true,
                eval: Arc::new(move |row| {
                    let mut out = CompactString::default();
                    for eval in &evals {
                        match eval(row)? {
                            Value::Null => return Ok(Value::Null),
                            Value::String(s) => out.push_str(&s),
                            other => out.push_str(&crate::format::display(&other, &DataType::Null)),
                        }
                    }
                    Ok(Value::String(out))
                }),
                name: None,
                column: None,
                place: None,
                reads: None,
            }
        }
        "SUBSTRING" | "SUBSTR" => {
            arity(name, &args, 2..=3)?;
            of_values(
                DataType::Varchar,
                args,
                |v| {
                    let chars: Vec<char> = string_arg(v[0]).chars().collect();
                    // 1-based; a start of 0 or less counts from the first character.
                    let start = (int_arg(v[1]).max(1) - 1) as usize;
                    let length = v.get(2).map_or(chars.len(), |l| int_arg(l).max(0) as usize);
                    Ok(Value::string(
                        chars.iter().skip(start).take(length).collect::<String>(),
                    ))
                },
                "SUBSTRING",
            )
        }
        "TRIM" | "LTRIM" | "RTRIM" => {
            arity(name, &args, 1..=2)?;
            let side = match name {
                "LTRIM" => 1,
                "RTRIM" => 2,
                _ => 0,
            };
            if args.len() == 1 {
                args.push(Typed::constant(Value::string(" "), DataType::Varchar));
            }
            of_values(
                DataType::Varchar,
                args,
                move |v| {
                    let (s, what) = (string_arg(v[0]), string_arg(v[1]));
                    let set: Vec<char> = what.chars().collect();
                    let trimmed = match side {
                        1 => s.trim_start_matches(set.as_slice()),
                        2 => s.trim_end_matches(set.as_slice()),
                        _ => s.trim_matches(set.as_slice()),
                    };
                    Ok(Value::string(trimmed))
                },
                "TRIM",
            )
        }
        "REPLACE" => {
            arity(name, &args, 3..=3)?;
            of_values(
                DataType::Varchar,
                args,
                |v| {
                    Ok(Value::string(
                        string_arg(v[0]).replace(string_arg(v[1]), string_arg(v[2])),
                    ))
                },
                "REPLACE",
            )
        }
        "COALESCE" | "IFNULL" => {
            if args.is_empty() || name == "IFNULL" && args.len() != 2 {
                return Err(SqlError::plan(format!("{name} needs arguments")));
            }
            let mut ty = DataType::Null;
            for a in &args {
                ty = common_type(&ty, &a.ty).ok_or_else(|| {
                    SqlError::plan(format!("{name}: {ty} and {} have no common type", a.ty))
                })?;
            }
            let nullable = args.iter().all(|a| a.nullable);
            let evals: Vec<Eval> = args
                .into_iter()
                .map(|a| a.cast(&ty).map(|a| a.eval))
                .collect::<Result<_>>()?;
            Typed {
                ty,
                nullable,
                eval: Arc::new(move |row| {
                    for eval in &evals {
                        let v = eval(row)?;
                        if !v.is_null() {
                            return Ok(v);
                        }
                    }
                    Ok(Value::Null)
                }),
                name: None,
                column: None,
                place: None,
                reads: None,
            }
        }
        "NULLIF" => {
            arity(name, &args, 2..=2)?;
            let ty = args[0].ty.clone();
            let (a, b) = (args.remove(0).eval, args.remove(0).eval);
            Typed {
                ty,
                nullable: true,
                eval: Arc::new(move |row| {
                    let (x, y) = (a(row)?, b(row)?);
                    Ok(if !y.is_null() && x == y {
                        Value::Null
                    } else {
                        x
                    })
                }),
                name: None,
                column: None,
                place: None,
                reads: None,
            }
        }
        "IF" => {
            arity(name, &args, 3..=3)?;
            let condition = args.remove(0);
            let (then, otherwise) = (args.remove(0), args.remove(0));
            let ty = common_type(&then.ty, &otherwise.ty).ok_or_else(|| {
                SqlError::plan(format!(
                    "IF: {} and {} have no common type",
                    then.ty, otherwise.ty
                ))
            })?;
            let nullable = then.nullable || otherwise.nullable;
            let (c, t, o) = (
                condition.eval,
                then.cast(&ty)?.eval,
                otherwise.cast(&ty)?.eval,
            );
            Typed {
                ty,
                nullable,
                eval: Arc::new(move |row| match c(row)? {
                    Value::Bool(true) => t(row),
                    _ => o(row),
                }),
                name: None,
                column: None,
                place: None,
                reads: None,
            }
        }
        "REGEXP_EXTRACT" => {
            arity(name, &args, 2..=3)?;
            let pattern = match args[1].constant_value() {
                Some(Value::String(p)) => regex::Regex::new(&p).map_err(|e| {
                    SqlError::plan(format!("REGEXP_EXTRACT: bad pattern `{p}`: {e}"))
                })?,
                _ => {
                    return Err(SqlError::plan(
                        "REGEXP_EXTRACT: the pattern must be a constant string",
                    ));
                }
            };
            let group = match args.get(2).map(|g| g.constant_value()) {
                Some(Some(Value::Int(g))) => g as usize,
                Some(_) => {
                    return Err(SqlError::plan(
                        "REGEXP_EXTRACT: the group index must be a constant integer",
                    ));
                }
                None => 1,
            };
            args.truncate(1);
            of_values(
                DataType::Varchar,
                args,
                move |v| {
                    Ok(pattern
                        .captures(string_arg(v[0]))
                        .and_then(|c| c.get(group))
                        .map_or(Value::Null, |m| Value::string(m.as_str())))
                },
                "REGEXP_EXTRACT",
            )
        }
        "SPLIT_INDEX" => {
            arity(name, &args, 3..=3)?;
            of_values(
                DataType::Varchar,
                args,
                |v| {
                    let (text, separator) = (string_arg(v[0]), string_arg(v[1]));
                    let index = int_arg(v[2]);
                    if index < 0 || separator.is_empty() {
                        return Ok(Value::Null);
                    }
                    let part = match separator.as_bytes() {
                        // One ASCII character (`'/'`): a byte to count.
                        [one] => nth_part(text, *one, index as usize),
                        _ => text.split(separator).nth(index as usize),
                    };
                    Ok(part.map_or(Value::Null, Value::string))
                },
                "SPLIT_INDEX",
            )
        }
        "DATE_FORMAT" => {
            arity(name, &args, 2..=2)?;
            require(
                name,
                &args[0],
                args[0].ty.is_timestamp() || args[0].ty == DataType::Varchar,
                "a TIMESTAMP",
            )?;
            // A literal pattern (it reads nothing of the row).
            if args[1].reads.as_ref().is_some_and(Vec::is_empty)
                && let Some(Value::String(pattern)) = args[1].constant_value()
            {
                return Ok(date_format(args, &pattern));
            }
            of_values(
                DataType::Varchar,
                args,
                |v| {
                    let Some(ms) = date_format_time(v[0])? else {
                        return Ok(Value::Null);
                    };
                    Ok(Value::string(crate::format::format_with_pattern(
                        ms,
                        string_arg(v[1]),
                    )))
                },
                "DATE_FORMAT",
            )
        }
        // The processing time (the wall clock, ms since the epoch) when the row is computed: a
        // column of it is a processing-time attribute that windows can follow.
        "PROCTIME" => {
            arity(name, &args, 0..=0)?;
            Typed {
                ty: DataType::TimestampLtz { precision: 3 },
                nullable: false,
                eval: Arc::new(|_: &Row| {
                    use riffle::time::Clock;
                    Ok(Value::Timestamp(riffle::time::SystemClock.now()))
                }),
                name: None,
                column: None,
                place: None,
                reads: None,
            }
        }
        "HOUR" | "MINUTE" | "SECOND" | "YEAR" | "MONTH" | "DAYOFMONTH" => {
            arity(name, &args, 1..=1)?;
            extract(name, args.remove(0))?
        }
        other => {
            return Err(SqlError::plan(format!(
                "no function `{other}`: not built in and not registered (CREATE FUNCTION needs a function registered from Rust under that name)"
            )));
        }
    })
}

/// `ROUND` (mode 0, half up), `FLOOR` (1), `CEIL` (2) at `digits` after the point.
fn round(value: &Value, digits: i64, mode: u8) -> Value {
    match value {
        Value::Int(i) => Value::Int(*i),
        Value::Double(d) => {
            let factor = 10f64.powi(digits as i32);
            let scaled = d * factor;
            let r = match mode {
                0 => scaled.round(),
                1 => scaled.floor(),
                _ => scaled.ceil(),
            };
            Value::Double(r / factor)
        }
        Value::Decimal(d) => {
            let target = digits.clamp(0, 38) as u8;
            if target >= d.scale {
                return Value::Decimal(*d);
            }
            let divisor = crate::types::pow10(d.scale - target);
            let (q, r) = (
                d.unscaled.div_euclid(divisor),
                d.unscaled.rem_euclid(divisor),
            );
            let unscaled = match mode {
                0 => match d.rescale(target) {
                    Some(rounded) => rounded.unscaled,
                    None => q,
                },
                1 => q,
                _ => q + i128::from(r != 0),
            };
            Value::Decimal(Decimal::new(unscaled, target))
        }
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Column 0 of a row, as a `TIMESTAMP(3)` or a string.
    fn column(ty: DataType) -> Typed {
        Typed {
            ty,
            nullable: true,
            eval: Arc::new(|row: &Row| Ok(row.get(0).clone())),
            name: None,
            column: Some(0),
            place: None,
            reads: None,
        }
    }

    #[test]
    fn split_index_by_one_character_or_more_and_arguments_read_in_place_or_computed() {
        // The text as a field read in place, the separator computed, the index a constant.
        let text = Typed {
            eval: Arc::new(|row: &Row| Ok(crate::expr::Place::Field(1, 0).get(row))),
            place: Some(crate::expr::Place::Field(1, 0)),
            ..column(DataType::Varchar)
        };
        let separator = Typed {
            eval: Arc::new(|row: &Row| {
                Ok(match row.get(0) {
                    Value::Int(1) => Value::string("/"),
                    Value::Int(_) => Value::string("/é"),
                    _ => Value::Null,
                })
            }),
            ..column(DataType::Varchar)
        };
        let split = |index: i64| {
            builtin(
                "SPLIT_INDEX",
                vec![
                    text.clone(),
                    separator.clone(),
                    Typed::constant(Value::Int(index), DataType::Int),
                ],
            )
            .unwrap()
        };
        let row = |separator: Option<i64>, text: &str| {
            let separator = separator.map_or(Value::Null, Value::Int);
            Row(vec![separator, Value::Row(vec![Value::string(text)])])
        };
        let url = "https://www.nexmark.com/xX/bCd/item.htm?query=1";
        let cases = [
            (1, 3, url, Value::string("xX")),
            (1, 5, url, Value::string("item.htm?query=1")),
            (1, 6, url, Value::Null),
            (1, -1, url, Value::Null),
            (1, 0, "", Value::string("")),
            // `/é`: two characters, one of two bytes.
            (2, 1, "a/éb/éc", Value::string("b")),
            (2, 2, "a/éb/éc", Value::string("c")),
            (2, 1, "a/b", Value::Null),
        ];
        for (n, index, text, expected) in cases {
            let got = (split(index).eval)(&row(Some(n), text)).unwrap();
            assert_eq!(got, expected, "{text} by {n} at {index}");
        }
        // A `NULL` argument, read in place or computed, makes `NULL`.
        let nulls = Row(vec![Value::Int(1), Value::Row(vec![Value::Null])]);
        assert_eq!((split(1).eval)(&nulls).unwrap(), Value::Null);
        assert_eq!((split(1).eval)(&row(None, url)).unwrap(), Value::Null);
    }

    proptest::proptest! {
        #[test]
        fn a_part_cut_at_an_ascii_byte_is_the_part_split_gives(
            text in "[a/é.?]{0,12}",
            separator in proptest::sample::select(vec![b'/', b'.', b'a', b'?']),
            index in 0usize..8,
        ) {
            let expected = text.split(separator as char).nth(index);
            proptest::prop_assert_eq!(nth_part(&text, separator, index), expected);
        }
    }

    #[test]
    fn date_format_of_a_constant_pattern_keeps_its_last_text_only_within_its_span() {
        let formats = |pattern: &str| {
            builtin(
                "DATE_FORMAT",
                vec![
                    column(DataType::Timestamp { precision: 3 }),
                    Typed::constant(Value::string(pattern), DataType::Varchar),
                ],
            )
            .unwrap()
        };
        let day = 86_400_000;
        // Back and forth across midnight, before and after 1970, and at the types' edges.
        let times = [
            1_768_435_199_999,
            1_768_435_200_000,
            1_768_435_199_999,
            1_768_435_200_000 + day - 1,
            -1,
            0,
            -day,
            -day - 1,
            1_768_435_200_000,
            1_768_435_200_999,
            1_768_435_201_000,
        ];
        for pattern in [
            "yyyy-MM-dd",
            "yyyy-MM-dd HH:mm:ss",
            "HH:mm:ss.SSS",
            "'day' d",
        ] {
            let f = formats(pattern);
            for ms in times {
                let text = (f.eval)(&Row(vec![Value::Timestamp(ms)])).unwrap();
                assert_eq!(
                    text,
                    Value::string(crate::format::format_with_pattern(ms, pattern)),
                    "{pattern} at {ms}"
                );
            }
            assert_eq!((f.eval)(&Row(vec![Value::Null])).unwrap(), Value::Null);
            let text = (f.eval)(&Row(vec![Value::string("2026-01-15 10:00:00")])).unwrap();
            assert_eq!(
                text,
                Value::string(crate::format::format_with_pattern(
                    1_768_471_200_000,
                    pattern
                ))
            );
        }
    }
}
