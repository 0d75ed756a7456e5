//! From a logical plan to DataStream operators: a scan is the connector's source with the
//! table's watermark, a filter and a projection are chained stateless operators over [`Row`]s
//! (their expressions compiled once), an updating aggregate is a keyed operator whose
//! accumulators are declared keyed state, and an `INSERT INTO` ends in the sink table's
//! connector.
//!
//! A step's rows are a stream of [`Row`]s when they are only added, of [`Change`]s of rows when
//! they are updated ([`Rows`], after the plan's changelog mode).

use std::sync::Arc;
use std::time::Duration;

use riffle::state::{AggregatingStateDescriptor, StateTtl};
use riffle::window::{Sliding, Tumbling};
use riffle::{Change, DataStream, StreamEnv};

use crate::aggregate::RowAggregates;
use crate::connectors;
use crate::error::{Result, SqlError};
use crate::expr::{Eval, Typed};
use crate::parse::{ColumnDef, TableDef};
use crate::plan::{Plan, WindowKind};
use crate::types::{Row, Schema, Value};

/// The rows of a lowered step: only added, or a changelog.
pub enum Rows {
    /// Rows only added (the plan's changelog mode is `append`).
    Append(DataStream<Row>),
    /// Rows added, updated and deleted (`retract`).
    Changelog(DataStream<Change<Row>>),
}

impl Rows {
    /// The rows as a changelog (appended rows are `+I`).
    pub fn into_changelog(self) -> DataStream<Change<Row>> {
        match self {
            Rows::Append(rows) => rows.map(Change::insert).name("Changelog"),
            Rows::Changelog(changes) => changes,
        }
    }

    /// The rows of an append-only step; `what` says who needs them so (in the error).
    pub fn into_append(self, what: &str) -> Result<DataStream<Row>> {
        match self {
            Rows::Append(rows) => Ok(rows),
            Rows::Changelog(_) => Err(SqlError::plan(format!(
                "{what} takes only appended rows, and this query's rows are updated (its result changes as rows arrive: a GROUP BY without a window); {}",
                "read it as a changelog (SqlEnv::sql_changelog), print it, or write it to a table whose format takes changes ('format' = 'debezium-json')"
            ))),
        }
    }

    /// Each row mapped by `f` (`None`: dropped), a change keeping its kind: filters and
    /// projections over either kind of rows.
    fn flat_map_rows(
        self,
        name: &str,
        f: impl Fn(Row) -> riffle::Result<Option<Row>> + Send + Sync + Clone + 'static,
    ) -> Rows {
        match self {
            Rows::Append(rows) => Rows::Append(
                rows.process(move |row: Row, ctx| match f(row)? {
                    Some(row) => ctx.emit(row),
                    None => Ok(()),
                })
                .name(name),
            ),
            Rows::Changelog(changes) => Rows::Changelog(
                changes
                    .process(move |change: Change<Row>, ctx| match f(change.row)? {
                        Some(row) => ctx.emit(Change::new(change.op, row)),
                        None => Ok(()),
                    })
                    .name(name),
            ),
        }
    }
}

/// The values of `exprs` over `row`, as a row.
fn eval_all(evals: &[Eval], row: &Row) -> riffle::Result<Row> {
    let mut values = Vec::with_capacity(evals.len());
    for eval in evals {
        values.push(eval(row)?);
    }
    Ok(Row(values))
}

/// The rows of `plan`, as a stream of `env`.
pub fn lower(plan: &Plan, env: &StreamEnv) -> Result<Rows> {
    let append =
        |plan: &Plan| -> Result<DataStream<Row>> { lower(plan, env)?.into_append("an aggregate") };
    Ok(match plan {
        Plan::Scan {
            table,
            physical,
            computed,
            time,
            ..
        } => Rows::Append(connectors::scan(
            env,
            table,
            physical,
            computed.clone(),
            time.clone(),
        )?),
        Plan::Filter {
            input, predicate, ..
        } => {
            let eval = predicate.eval.clone();
            lower(input, env)?.flat_map_rows("Filter", move |row: Row| {
                Ok(matches!(eval(&row)?, Value::Bool(true)).then_some(row))
            })
        }
        Plan::WindowAggregate {
            input,
            window,
            pre,
            keys,
            aggs,
            post,
            ..
        } => {
            let pre: Vec<_> = pre.iter().map(|e| e.eval.clone()).collect();
            let post: Vec<_> = post.iter().map(|e| e.eval.clone()).collect();
            let key_count = *keys;
            let windows = match window {
                WindowKind::Tumble { size } => Tumbling::of(Duration::from_millis(*size as u64)),
                WindowKind::Hop { slide, size } => Sliding::of(
                    Duration::from_millis(*size as u64),
                    Duration::from_millis(*slide as u64),
                ),
            };
            let aggregates = RowAggregates {
                specs: aggs.clone(),
            };
            Rows::Append(
                append(input)?
                    .try_map(move |row: Row| eval_all(&pre, &row))
                    .name("Pre-aggregate")
                    .key_by(move |row: &Row| Row(row.0[..key_count].to_vec()))
                    .window(windows)
                    .aggregate(aggregates)
                    .try_map(move |result| -> riffle::Result<Row> {
                        let riffle::window::WindowResult {
                            key,
                            window_start,
                            window_end,
                            value,
                            ..
                        } = result;
                        let mut aggregated = key.0;
                        aggregated.push(Value::Timestamp(window_start));
                        aggregated.push(Value::Timestamp(window_end));
                        aggregated.push(Value::Timestamp(window_end - 1));
                        aggregated.extend(value);
                        eval_all(&post, &Row(aggregated))
                    })
                    .name("Calc"),
            )
        }
        Plan::GroupAggregate {
            input,
            pre,
            keys,
            aggs,
            post,
            ttl,
            ..
        } => {
            let pre: Vec<_> = pre.iter().map(|e| e.eval.clone()).collect();
            let post: Arc<Vec<Eval>> = Arc::new(post.iter().map(|e| e.eval.clone()).collect());
            let key_count = *keys;
            let aggregates = RowAggregates {
                specs: aggs.clone(),
            };
            let mut accumulators = AggregatingStateDescriptor::new("group-aggregate", aggregates);
            if let Some(ttl) = ttl {
                accumulators = accumulators.with_ttl(StateTtl::after_write(*ttl));
            }
            let accumulators = Arc::new(accumulators);
            // The output row of a key from its aggregates' results.
            let output = move |key: &Row, results: Vec<Value>| -> riffle::Result<Row> {
                let mut aggregated = key.0.clone();
                aggregated.extend(results);
                eval_all(&post, &Row(aggregated))
            };
            Rows::Changelog(
                append(input)?
                    .try_map(move |row: Row| eval_all(&pre, &row))
                    .name("Pre-aggregate")
                    .key_by(move |row: &Row| Row(row.0[..key_count].to_vec()))
                    .process(move |key: &Row, row: Row, ctx| {
                        let (before, after) = {
                            let mut state = ctx.aggregating(&accumulators);
                            let before = state.get()?;
                            state.add(&row)?;
                            (before, state.get()?.unwrap_or_default())
                        };
                        let after = output(key, after)?;
                        match before {
                            None => ctx.emit(Change::insert(after)),
                            Some(before) => {
                                let before = output(key, before)?;
                                // An unchanged result is not sent again (as in Flink).
                                if before == after {
                                    return Ok(());
                                }
                                ctx.emit(Change::update_before(before))?;
                                ctx.emit(Change::update_after(after))
                            }
                        }
                    })
                    .name("GroupAggregate"),
            )
        }
        Plan::Project { input, exprs, .. } => {
            let evals: Vec<_> = exprs.iter().map(|e| e.eval.clone()).collect();
            lower(input, env)?
                .flat_map_rows("Calc", move |row: Row| eval_all(&evals, &row).map(Some))
        }
    })
}

/// The physical columns of a sink table.
pub fn sink_schema(table: &TableDef) -> Schema {
    Schema::new(
        table
            .columns
            .iter()
            .filter_map(|c| match c {
                ColumnDef::Physical(field) => Some(field.clone()),
                ColumnDef::Computed { .. } => None,
            })
            .collect(),
    )
}

/// `INSERT INTO table`: the query's rows cast to the table's columns, written by its connector.
pub fn insert(env: &StreamEnv, table: &TableDef, plan: &Plan) -> Result<()> {
    let target = sink_schema(table);
    let source = plan.schema();
    if source.len() != target.len() {
        return Err(SqlError::plan(format!(
            "INSERT INTO {}: the query has {} column(s) {source}, the table {} {target}",
            table.name,
            source.len(),
            target.len()
        )));
    }
    let mut casts = Vec::new();
    for (index, (from, to)) in source.fields.iter().zip(&target.fields).enumerate() {
        let column = Typed {
            ty: from.ty.clone(),
            nullable: from.nullable,
            eval: std::sync::Arc::new(move |row: &Row| Ok(row.get(index).clone())),
            name: Some(from.name.clone()),
            column: Some(index),
        };
        let cast = column.cast(&to.ty).map_err(|e| {
            SqlError::plan(format!(
                "INSERT INTO {}: column `{}` ({}) cannot be written as `{}` ({}): {}",
                table.name, from.name, from.ty, to.name, to.ty, e.message
            ))
        })?;
        casts.push((from.ty == to.ty, cast.eval));
    }
    let mut rows = lower(plan, env)?;
    if casts.iter().any(|(same, _)| !same) {
        let casts: Vec<Eval> = casts.into_iter().map(|(_, cast)| cast).collect();
        rows = rows.flat_map_rows("Cast", move |row: Row| eval_all(&casts, &row).map(Some));
    }
    connectors::sink(rows, table, &target)
}
