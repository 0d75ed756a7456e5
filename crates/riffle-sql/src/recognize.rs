//! `MATCH_RECOGNIZE` (SQL:2016 row pattern recognition, as Flink SQL), planned onto
//! Riffle's pattern matcher ([`riffle::cep`]).
//!
//! The rows of each partition, in the order of the input's time attribute, are matched against
//! the `PATTERN`: its variables become the stages of a [`Pattern`], each directly after the
//! one before (row patterns are strictly contiguous), quantifiers greedy unless reluctant
//! (`B+?`). `DEFINE` conditions and `MEASURES` are compiled with the expression compiler over
//! the input's columns plus one column per *navigation* they hold (`A.price` of another
//! variable, `FIRST(A.price, n)`, `LAST(A.price, n)`, `SUM/AVG/MIN/MAX/COUNT` over a variable's
//! rows, `MATCH_ROWTIME()`), computed from the rows matched so far before each evaluation.
//! In a `DEFINE` of `A`, `A.price` and an unqualified `price` are the row being tested, and
//! `LAST(A.price, 1)` the row before it in `A`; in `MEASURES`, `A.price` is the last row of `A`
//! and an unqualified column the match's last row. Flink's `WITHIN INTERVAL` after the
//! `PATTERN` bounds a match's time (see [`crate::parse`], which carries it into the `DEFINE`
//! list as [`WITHIN_SYMBOL`]).

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use riffle::aggregate::AggregateFunction;
use riffle::cep::{
    AfterMatchSkip, Match, Partial, Pattern, PatternContext, PatternProcessFunction,
};
use sqlparser::ast::{self, VisitMut, VisitorMut};

use crate::aggregate::{AggSpec, RowAggregates};
use crate::error::{Result, SqlError};
use crate::expr::{Scope, Typed, compile};
use crate::functions::Functions;
use crate::plan::Plan;
use crate::types::{DataType, Field, Row, Schema, Value};

/// The name under which the parser carries Flink's `WITHIN INTERVAL ..` in the `DEFINE` list.
pub const WITHIN_SYMBOL: &str = "__riffle_within";

/// One variable of the `PATTERN`.
#[derive(Clone)]
pub struct Variable {
    /// Its name.
    pub name: String,
    /// The fewest and most rows it takes (`None`: no limit).
    pub min: usize,
    /// See `min`.
    pub max: Option<usize>,
    /// `*`, `?`, `{0,n}`: it may take none.
    pub optional: bool,
    /// Greedy (the default) or reluctant (`+?`).
    pub greedy: bool,
    /// Its `DEFINE` condition (none: every row).
    pub define: Option<Navigated>,
}

/// An expression over the input's columns and navigations.
#[derive(Clone)]
pub struct Navigated {
    /// Compiled over the input's columns, then one column per navigation.
    pub expr: Typed,
    /// The navigations, in their columns' order.
    pub navs: Vec<Nav>,
    /// The expression's text.
    pub text: String,
}

/// What a navigation reads.
#[derive(Clone)]
pub enum NavKind {
    /// `LAST(v.c, n)`, and `v.c` of another variable (n = 0).
    Last(usize),
    /// `FIRST(v.c, n)`.
    First(usize),
    /// An aggregate over the variable's rows.
    Aggregate(RowAggregates),
    /// `MATCH_ROWTIME()`: the time of the match's last row.
    MatchRowtime,
}

/// A navigation: a value computed from the rows a variable took (all rows when `var` is
/// `None`).
#[derive(Clone)]
pub struct Nav {
    /// The variable, by index.
    pub var: Option<usize>,
    /// The input column it reads.
    pub column: usize,
    /// What it computes.
    pub kind: NavKind,
}

impl Nav {
    fn value<'r>(&self, rows: impl Iterator<Item = &'r Row> + Clone) -> Value {
        match &self.kind {
            NavKind::Last(n) | NavKind::First(n) => {
                let count = rows.clone().count();
                let at = match self.kind {
                    NavKind::Last(_) => count.checked_sub(n + 1),
                    _ => (*n < count).then_some(*n),
                };
                at.and_then(|i| rows.clone().nth(i))
                    .map_or(Value::Null, |row| row.get(self.column).clone())
            }
            NavKind::MatchRowtime => rows
                .last()
                .map_or(Value::Null, |row| row.get(self.column).clone()),
            NavKind::Aggregate(aggregate) => {
                let mut acc = aggregate.create();
                for row in rows {
                    aggregate.add(&mut acc, row);
                }
                aggregate.result(&acc).pop().unwrap_or(Value::Null)
            }
        }
    }
}

/// A `MATCH_RECOGNIZE` compiled: what [`Plan::MatchRecognize`] runs.
pub struct Recognize {
    /// `PARTITION BY`, over the input's columns.
    pub partition: Vec<Typed>,
    /// The pattern's variables, in order.
    pub variables: Vec<Variable>,
    /// `AFTER MATCH SKIP ..` (default: past the last row).
    pub skip: AfterMatchSkip,
    /// `WITHIN INTERVAL ..`.
    pub within: Option<Duration>,
    /// Ordered by processing time (`PROCTIME()`), not event time.
    pub processing_time: bool,
    /// `MEASURES`, in order.
    pub measures: Vec<Navigated>,
    /// The time column (`MATCH_ROWTIME()` reads it).
    pub time_column: usize,
}

/// An event of the matcher: the row's partition key, and the row.
pub type Keyed = (Row, Row);

impl Recognize {
    /// The pattern the rows are matched against.
    pub fn pattern(self: &Arc<Self>) -> Pattern<Keyed> {
        let mut pattern: Option<Pattern<Keyed>> = None;
        for (i, var) in self.variables.iter().enumerate() {
            let mut p = match pattern {
                None => Pattern::begin(var.name.clone()),
                Some(p) => p.next(var.name.clone()),
            };
            if var.define.is_some() {
                let me = self.clone();
                p = p.where_with(move |event: &Keyed, partial| me.defines(i, event, partial));
            }
            if var.max != Some(1) || var.min != 1 {
                p = p.times(match var.max {
                    Some(max) => riffle::cep::Times::from(var.min..=max),
                    None => riffle::cep::Times::from(var.min..),
                });
                p = p.consecutive();
                if var.greedy && var.max != Some(var.min) {
                    p = p.greedy();
                }
            }
            if var.optional {
                p = p.optional();
            }
            pattern = Some(p);
        }
        let mut pattern = pattern
            .expect("a pattern has a variable")
            .after_match(self.skip.clone());
        if let Some(within) = self.within {
            pattern = pattern.within(within);
        }
        pattern
    }

    /// Whether `event` is a row of variable `var` after the rows of `partial`. An error of the
    /// condition fails the job (a condition cannot say "unknown").
    fn defines(&self, var: usize, event: &Keyed, partial: &Partial<'_, Keyed>) -> bool {
        let define = self.variables[var]
            .define
            .as_ref()
            .expect("called for defined variables");
        let rows_of = |of: Option<usize>| {
            let mine = match of {
                None => true,
                Some(v) => v == var,
            };
            let taken: Vec<&Row> = match of {
                None => partial.events().map(|(_, e)| &e.1).collect(),
                Some(v) => partial.get(&self.variables[v].name).map(|e| &e.1).collect(),
            };
            taken.into_iter().chain(mine.then_some(&event.1))
        };
        let result = if define.navs.is_empty() {
            (define.expr.eval)(&event.1)
        } else {
            let mut row = event.1.clone();
            for nav in &define.navs {
                row.0.push(nav.value(rows_of(nav.var)));
            }
            (define.expr.eval)(&row)
        };
        match result {
            Ok(Value::Bool(b)) => b,
            Ok(_) => false,
            Err(e) => panic!(
                "MATCH_RECOGNIZE: DEFINE {} AS {} failed: {e}",
                self.variables[var].name, define.text
            ),
        }
    }

    /// The output row of a match: the partition key, then the measures.
    pub fn output(&self, key: &Row, matched: &Match<Keyed>) -> riffle::Result<Row> {
        let all: Vec<&Row> = matched
            .iter()
            .flat_map(|(_, events)| events.iter().map(|e| &e.1))
            .collect();
        let last = *all.last().expect("a match has a row");
        let mut values = key.0.clone();
        for measure in &self.measures {
            let mut row = last.clone();
            for nav in &measure.navs {
                let value = match nav.var {
                    None => nav.value(all.iter().copied()),
                    Some(v) => nav.value(matched.get(&self.variables[v].name).iter().map(|e| &e.1)),
                };
                row.0.push(value);
            }
            values.push((measure.expr.eval)(&row)?);
        }
        Ok(Row(values))
    }

    /// The step's description for `EXPLAIN`.
    pub fn explain(&self, schema_in: &Schema) -> String {
        let keys: Vec<String> = self
            .partition
            .iter()
            .map(|k| k.name.clone().unwrap_or_else(|| "?".into()))
            .collect();
        let pattern: Vec<String> = self
            .variables
            .iter()
            .map(|v| {
                let q = match (v.min, v.max, v.optional) {
                    (1, Some(1), false) => String::new(),
                    (1, Some(1), true) => "?".into(),
                    (1, None, false) => "+".into(),
                    (1, None, true) => "*".into(),
                    (n, None, _) => format!("{{{n},}}"),
                    (n, Some(m), _) if n == m => format!("{{{n}}}"),
                    (n, Some(m), _) => format!("{{{n},{m}}}"),
                };
                let reluctant = if !v.greedy && (v.min, v.max) != (1, Some(1)) {
                    "?"
                } else {
                    ""
                };
                format!("{}{q}{reluctant}", v.name)
            })
            .collect();
        let defines: Vec<String> = self
            .variables
            .iter()
            .filter_map(|v| {
                v.define
                    .as_ref()
                    .map(|d| format!("{} AS {}", v.name, d.text))
            })
            .collect();
        let measures: Vec<String> = self.measures.iter().map(|m| m.text.clone()).collect();
        let time = if self.processing_time {
            "processing time"
        } else {
            "event time"
        };
        format!(
            "MatchRecognize: keyed by [{}], rows in {time} order by `{}`, PATTERN ({}) as strictly contiguous stages{}, AFTER MATCH {}, DEFINE [{}], MEASURES [{}] (keyed state: each key's partial matches and the rows they took)",
            keys.join(", "),
            schema_in.fields[self.time_column].name,
            pattern.join(" "),
            self.within
                .map_or(String::new(), |w| format!(" WITHIN {} ms", w.as_millis())),
            match &self.skip {
                AfterMatchSkip::NoSkip => "NO SKIP".to_string(),
                AfterMatchSkip::SkipToNext => "SKIP TO NEXT ROW".into(),
                AfterMatchSkip::SkipPastLastEvent => "SKIP PAST LAST ROW".into(),
                AfterMatchSkip::SkipToFirst(v) => format!("SKIP TO FIRST {v}"),
                AfterMatchSkip::SkipToLast(v) => format!("SKIP TO LAST {v}"),
            },
            defines.join(", "),
            measures.join(", ")
        )
    }
}

/// Emits the output row of each match.
#[derive(Clone)]
pub struct Output(pub Arc<Recognize>);

impl PatternProcessFunction<Row, Keyed, Row> for Output {
    fn process_match(
        &mut self,
        key: &Row,
        matched: Match<Keyed>,
        ctx: &mut PatternContext<Keyed, Row>,
    ) -> riffle::Result<()> {
        let row = self.0.output(key, &matched)?;
        ctx.emit(row)
    }
}

/// The parts of a `MATCH_RECOGNIZE` clause.
pub struct Clause<'a> {
    /// `PARTITION BY`.
    pub partition_by: &'a [ast::Expr],
    /// `ORDER BY`.
    pub order_by: &'a [ast::OrderByExpr],
    /// `MEASURES`.
    pub measures: &'a [ast::Measure],
    /// `ONE ROW PER MATCH` or `ALL ROWS ..`.
    pub rows_per_match: Option<&'a ast::RowsPerMatch>,
    /// `AFTER MATCH SKIP ..`.
    pub after_match_skip: Option<&'a ast::AfterMatchSkip>,
    /// `PATTERN (..)`.
    pub pattern: &'a ast::MatchRecognizePattern,
    /// `DEFINE ..` (with the carried `WITHIN`).
    pub symbols: &'a [ast::SymbolDefinition],
}

/// Plans `MATCH_RECOGNIZE` over `input`.
pub fn plan(input: Plan, clause: Clause<'_>, functions: &Functions) -> Result<Plan> {
    let fail = |message: String| Err(SqlError::plan(format!("MATCH_RECOGNIZE: {message}")));
    if let Some(ast::RowsPerMatch::AllRows(_)) = clause.rows_per_match {
        return fail(
            "ALL ROWS PER MATCH is not supported (Flink SQL neither): use ONE ROW PER MATCH".into(),
        );
    }
    if input.changelog_mode() != crate::plan::ChangelogMode::Append {
        return fail(
            "its input's rows are updated (a changelog); it matches appended rows only".into(),
        );
    }
    let schema = input.schema().clone();
    // ORDER BY the time attribute.
    let [order] = clause.order_by else {
        return fail("ORDER BY names the input's time attribute, and only it".into());
    };
    let time_name = match &order.expr {
        ast::Expr::Identifier(id) => id.value.clone(),
        ast::Expr::CompoundIdentifier(parts) => {
            parts.last().map(|p| p.value.clone()).unwrap_or_default()
        }
        other => {
            return fail(format!(
                "ORDER BY {other}: order by the time attribute column"
            ));
        }
    };
    if matches!(order.options.sort, Some(ast::OrderBySort::Desc)) {
        return fail(format!(
            "ORDER BY {time_name} DESC: rows are matched in ascending time"
        ));
    }
    let (time_column, processing_time) = match (input.time(), input.proc_time()) {
        (Some(t), _) if t.name == time_name => (t.column, false),
        (_, Some(t)) if t.name == time_name => (t.column, true),
        (time, _) => {
            return fail(format!(
                "ORDER BY `{time_name}`: rows are ordered by the input's time attribute{}",
                time.map_or(
                    " (the input has none: declare a WATERMARK on the table)".to_string(),
                    |t| format!(", `{}`", t.name)
                )
            ));
        }
    };
    // The variables.
    let mut variables = Vec::new();
    let mut elements = Vec::new();
    flatten(clause.pattern, &mut elements)?;
    for (name, quantifier) in elements {
        if variables.iter().any(|v: &Variable| v.name == name) {
            return fail(format!(
                "the variable `{name}` appears twice in the PATTERN (not supported yet)"
            ));
        }
        let (mut quantifier, mut greedy) = (quantifier, true);
        if let Some(ast::RepetitionQuantifier::Reluctant(inner)) = quantifier.clone() {
            quantifier = Some(*inner);
            greedy = false;
        }
        use ast::RepetitionQuantifier as Q;
        let (min, max, optional) = match quantifier {
            None => (1, Some(1), false),
            Some(Q::ZeroOrMore) => (1, None, true),
            Some(Q::OneOrMore) => (1, None, false),
            Some(Q::AtMostOne) => (1, Some(1), true),
            Some(Q::Exactly(n)) if n > 0 => (n as usize, Some(n as usize), false),
            Some(Q::AtLeast(0)) => (1, None, true),
            Some(Q::AtLeast(n)) => (n as usize, None, false),
            Some(Q::AtMost(m)) if m > 0 => (1, Some(m as usize), true),
            Some(Q::Range(0, m)) if m > 0 => (1, Some(m as usize), true),
            Some(Q::Range(n, m)) if n <= m && m > 0 => (n as usize, Some(m as usize), false),
            Some(q) => return fail(format!("the quantifier {q} of `{name}` takes no row")),
        };
        variables.push(Variable {
            name,
            min,
            max,
            optional,
            greedy,
            define: None,
        });
    }
    let last = variables.last().expect("a pattern has a variable");
    if last.optional || last.max != Some(last.min) {
        return fail(format!(
            "a quantifier on the last variable (`{}`) would need the rows after the match to know where it ends: end the PATTERN with a variable of a fixed count (as Flink SQL requires)",
            last.name
        ));
    }
    if variables[0].optional {
        return fail(format!(
            "the first variable (`{}`) cannot be optional",
            variables[0].name
        ));
    }
    // WITHIN and DEFINE.
    let mut within = None;
    let names: Vec<String> = variables.iter().map(|v| v.name.clone()).collect();
    for symbol in clause.symbols {
        let name = &symbol.symbol.value;
        if name == WITHIN_SYMBOL {
            let ms = crate::plan::constant_interval(
                Some(&symbol.definition),
                "MATCH_RECOGNIZE",
                "WITHIN",
            )?;
            within = Some(Duration::from_millis(ms as u64));
            continue;
        }
        let Some(var) = names.iter().position(|n| n == name) else {
            return fail(format!(
                "DEFINE {name}: `{name}` is not a variable of the PATTERN ({})",
                names.join(" ")
            ));
        };
        let define = navigated(
            &symbol.definition,
            &names,
            &schema,
            Some(var),
            time_column,
            functions,
        )?;
        if define.expr.ty != DataType::Boolean && define.expr.ty != DataType::Null {
            return fail(format!(
                "DEFINE {name} AS {}: a condition, not a {}",
                define.text, define.expr.ty
            ));
        }
        variables[var].define = Some(define);
    }
    let skip = match clause.after_match_skip {
        None | Some(ast::AfterMatchSkip::PastLastRow) => AfterMatchSkip::SkipPastLastEvent,
        Some(ast::AfterMatchSkip::ToNextRow) => AfterMatchSkip::SkipToNext,
        Some(ast::AfterMatchSkip::ToFirst(v)) | Some(ast::AfterMatchSkip::ToLast(v)) => {
            if !names.contains(&v.value) {
                return fail(format!(
                    "AFTER MATCH SKIP TO {}: not a variable of the PATTERN",
                    v.value
                ));
            }
            match clause.after_match_skip {
                Some(ast::AfterMatchSkip::ToFirst(_)) => {
                    AfterMatchSkip::SkipToFirst(v.value.clone())
                }
                _ => AfterMatchSkip::SkipToLast(v.value.clone()),
            }
        }
    };
    // PARTITION BY and MEASURES.
    let scope = Scope::new(&schema, None, functions);
    let mut fields = Vec::new();
    let mut partition = Vec::new();
    for expr in clause.partition_by {
        let typed = compile(expr, &scope)?;
        let Some(name) = typed.name.clone() else {
            return fail(format!("PARTITION BY {expr}: partition by columns"));
        };
        fields.push(Field {
            name,
            ty: typed.ty.clone(),
            nullable: typed.nullable,
        });
        partition.push(typed);
    }
    let mut measures = Vec::new();
    for measure in clause.measures {
        let navigated = navigated(&measure.expr, &names, &schema, None, time_column, functions)?;
        fields.push(Field {
            name: measure.alias.value.clone(),
            ty: navigated.expr.ty.clone(),
            nullable: navigated.expr.nullable,
        });
        measures.push(navigated);
    }
    let recognize = Arc::new(Recognize {
        partition,
        variables,
        skip,
        within,
        processing_time,
        measures,
        time_column,
    });
    // The pattern must be one the matcher takes (it says which stage is wrong).
    recognize
        .pattern()
        .validate()
        .map_err(|e| SqlError::plan(format!("MATCH_RECOGNIZE: {e}")))?;
    Ok(Plan::MatchRecognize {
        input: Box::new(input),
        spec: recognize,
        schema: Schema::new(fields),
    })
}

/// The variables of a pattern, each with its quantifier, in order.
fn flatten(
    pattern: &ast::MatchRecognizePattern,
    out: &mut Vec<(String, Option<ast::RepetitionQuantifier>)>,
) -> Result<()> {
    use ast::MatchRecognizePattern as P;
    match pattern {
        P::Concat(parts) => {
            for part in parts {
                flatten(part, out)?;
            }
            Ok(())
        }
        P::Symbol(ast::MatchRecognizeSymbol::Named(name)) => {
            out.push((name.value.clone(), None));
            Ok(())
        }
        P::Repetition(inner, quantifier) => match inner.as_ref() {
            P::Symbol(ast::MatchRecognizeSymbol::Named(name)) => {
                out.push((name.value.clone(), Some(quantifier.clone())));
                Ok(())
            }
            other => Err(SqlError::plan(format!(
                "MATCH_RECOGNIZE: the quantifier of `{other}` applies to one variable here, not to a group"
            ))),
        },
        other => Err(SqlError::plan(format!(
            "MATCH_RECOGNIZE: `{other}` in a PATTERN is not supported yet (variables in sequence, each with a quantifier, are)"
        ))),
    }
}

/// `expr` compiled over the input's columns and its navigations. `current`: the variable a
/// `DEFINE` is about (its own `v.c` is the row tested); `None` for `MEASURES`.
fn navigated(
    expr: &ast::Expr,
    vars: &[String],
    schema: &Schema,
    current: Option<usize>,
    time_column: usize,
    functions: &Functions,
) -> Result<Navigated> {
    let mut rewritten = expr.clone();
    let mut finder = Navigations {
        vars,
        schema,
        current,
        time_column,
        navs: Vec::new(),
        types: Vec::new(),
        error: None,
    };
    let _ = rewritten.visit(&mut finder);
    if let Some(error) = finder.error {
        return Err(error);
    }
    let mut fields = schema.fields.clone();
    for (i, ty) in finder.types.iter().enumerate() {
        fields.push(Field::new(nav_name(i), ty.clone()));
    }
    let extended = Schema::new(fields);
    let scope = Scope::new(&extended, None, functions);
    let compiled = compile(&rewritten, &scope)?;
    Ok(Navigated {
        expr: compiled,
        navs: finder.navs,
        text: expr.to_string(),
    })
}

fn nav_name(i: usize) -> String {
    format!("__nav{i}")
}

/// Finds the navigations of an expression and puts a column of its own in each one's place.
struct Navigations<'a> {
    vars: &'a [String],
    schema: &'a Schema,
    current: Option<usize>,
    time_column: usize,
    navs: Vec<Nav>,
    types: Vec<DataType>,
    error: Option<SqlError>,
}

impl Navigations<'_> {
    /// `v.c` (or `c`): the variable (`None` for all rows) and the column.
    fn reference(&self, expr: &ast::Expr) -> Option<(Option<usize>, usize)> {
        match expr {
            ast::Expr::CompoundIdentifier(parts) if parts.len() == 2 => {
                let var = self.vars.iter().position(|v| *v == parts[0].value)?;
                Some((Some(var), self.schema.index_of(&parts[1].value)?))
            }
            ast::Expr::Identifier(id) => Some((None, self.schema.index_of(&id.value)?)),
            _ => None,
        }
    }

    fn replace(&mut self, expr: &mut ast::Expr, nav: Nav, ty: DataType) {
        *expr = ast::Expr::Identifier(ast::Ident::new(nav_name(self.navs.len())));
        self.navs.push(nav);
        self.types.push(ty);
    }

    fn fail(&mut self, message: String) {
        if self.error.is_none() {
            self.error = Some(SqlError::plan(format!("MATCH_RECOGNIZE: {message}")));
        }
    }
}

impl VisitorMut for Navigations<'_> {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &mut ast::Expr) -> ControlFlow<()> {
        match expr {
            ast::Expr::CompoundIdentifier(parts) if parts.len() == 2 => {
                let Some((Some(var), column)) = self.reference(expr) else {
                    if self.vars.iter().any(|v| *v == parts_name(expr)) {
                        let text = expr.to_string();
                        self.fail(format!("{text}: no such column"));
                    }
                    return ControlFlow::Continue(());
                };
                if self.current == Some(var) {
                    // The row being tested.
                    let column_name = self.schema.fields[column].name.clone();
                    *expr = ast::Expr::Identifier(ast::Ident::new(column_name));
                } else {
                    let ty = self.schema.fields[column].ty.clone();
                    self.replace(
                        expr,
                        Nav {
                            var: Some(var),
                            column,
                            kind: NavKind::Last(0),
                        },
                        ty,
                    );
                }
            }
            ast::Expr::Function(function) => {
                let name = function.name.to_string().to_ascii_uppercase();
                let args: Vec<ast::FunctionArgExpr> = match &function.args {
                    ast::FunctionArguments::List(list) => list
                        .args
                        .iter()
                        .filter_map(|a| match a {
                            ast::FunctionArg::Unnamed(e) => Some(e.clone()),
                            _ => None,
                        })
                        .collect(),
                    ast::FunctionArguments::None => Vec::new(),
                    ast::FunctionArguments::Subquery(_) => return ControlFlow::Continue(()),
                };
                let text = expr.to_string();
                match name.as_str() {
                    "FIRST" | "LAST" => {
                        let (target, offset) = match args.as_slice() {
                            [ast::FunctionArgExpr::Expr(target)] => (target, 0),
                            [
                                ast::FunctionArgExpr::Expr(target),
                                ast::FunctionArgExpr::Expr(ast::Expr::Value(v)),
                            ] => match v.value.to_string().parse::<usize>() {
                                Ok(n) => (target, n),
                                Err(_) => {
                                    self.fail(format!("{text}: the offset is a constant integer"));
                                    return ControlFlow::Break(());
                                }
                            },
                            _ => {
                                self.fail(format!("{text}: {name}(variable.column [, offset])"));
                                return ControlFlow::Break(());
                            }
                        };
                        let Some((var, column)) = self.reference(target) else {
                            self.fail(format!(
                                "{text}: {name} reads a column of a variable (A.price)"
                            ));
                            return ControlFlow::Break(());
                        };
                        let ty = self.schema.fields[column].ty.clone();
                        let kind = if name == "FIRST" {
                            NavKind::First(offset)
                        } else {
                            NavKind::Last(offset)
                        };
                        self.replace(expr, Nav { var, column, kind }, ty);
                    }
                    "MATCH_ROWTIME" if args.is_empty() => {
                        if self.current.is_some() {
                            self.fail("MATCH_ROWTIME() is a measure, not a condition".into());
                            return ControlFlow::Break(());
                        }
                        let column = self.time_column;
                        let ty = self.schema.fields[column].ty.clone();
                        self.replace(
                            expr,
                            Nav {
                                var: None,
                                column,
                                kind: NavKind::MatchRowtime,
                            },
                            ty,
                        );
                    }
                    "SUM" | "AVG" | "MIN" | "MAX" | "COUNT" => {
                        let (var, column, arg_type) = match args.as_slice() {
                            [ast::FunctionArgExpr::Wildcard] if name == "COUNT" => (None, 0, None),
                            [ast::FunctionArgExpr::QualifiedWildcard(v)] if name == "COUNT" => {
                                let v = v.to_string();
                                let Some(var) = self.vars.iter().position(|n| *n == v) else {
                                    self.fail(format!("{text}: `{v}` is not a variable"));
                                    return ControlFlow::Break(());
                                };
                                (Some(var), 0, None)
                            }
                            [ast::FunctionArgExpr::Expr(target)] => match self.reference(target) {
                                Some((var, column)) => {
                                    (var, column, Some(self.schema.fields[column].ty.clone()))
                                }
                                None => {
                                    self.fail(format!("{text}: {name} over a variable's column (A.price) is supported, not over an expression yet"));
                                    return ControlFlow::Break(());
                                }
                            },
                            _ => {
                                self.fail(format!("{text}: one argument"));
                                return ControlFlow::Break(());
                            }
                        };
                        let (kind, ty) =
                            match AggSpec::kind_and_type(&name, false, arg_type.clone()) {
                                Ok(k) => k,
                                Err(e) => {
                                    self.fail(format!("{text}: {e}"));
                                    return ControlFlow::Break(());
                                }
                            };
                        let aggregate = RowAggregates::new(vec![AggSpec {
                            kind,
                            arg: arg_type.as_ref().map(|_| column),
                            filter: None,
                            arg_type: arg_type.unwrap_or(DataType::Null),
                            ty: ty.clone(),
                        }]);
                        self.replace(
                            expr,
                            Nav {
                                var,
                                column,
                                kind: NavKind::Aggregate(aggregate),
                            },
                            ty,
                        );
                    }
                    _ => {}
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

fn parts_name(expr: &ast::Expr) -> String {
    match expr {
        ast::Expr::CompoundIdentifier(parts) => parts[0].value.clone(),
        _ => String::new(),
    }
}

impl std::fmt::Debug for Recognize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.variables.iter().map(|v| v.name.as_str()).collect();
        write!(f, "Recognize({})", names.join(" "))
    }
}
