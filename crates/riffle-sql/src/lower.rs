//! From a logical plan to DataStream operators: a scan is the connector's source with the
//! table's watermark, a filter and a projection are chained stateless operators over [`Row`]s
//! (their expressions compiled once), and an `INSERT INTO` ends in the sink table's connector.

use std::time::Duration;

use riffle::window::{Sliding, Tumbling};
use riffle::{DataStream, StreamEnv};

use crate::aggregate::RowAggregates;
use crate::connectors;
use crate::error::{Result, SqlError};
use crate::expr::Typed;
use crate::parse::{ColumnDef, TableDef};
use crate::plan::{Plan, WindowKind};
use crate::types::{Row, Schema, Value};

/// The rows of `plan`, as a stream of `env`.
pub fn lower(plan: &Plan, env: &StreamEnv) -> Result<DataStream<Row>> {
    Ok(match plan {
        Plan::Scan {
            table,
            physical,
            computed,
            time,
            ..
        } => connectors::scan(env, table, physical, computed.clone(), time.clone())?,
        Plan::Filter {
            input, predicate, ..
        } => {
            let eval = predicate.eval.clone();
            lower(input, env)?
                .process(move |row: Row, ctx| match eval(&row)? {
                    Value::Bool(true) => ctx.emit(row),
                    _ => Ok(()),
                })
                .name("Filter")
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
            lower(input, env)?
                .try_map(move |row: Row| -> riffle::Result<Row> {
                    let mut values = Vec::with_capacity(pre.len());
                    for eval in &pre {
                        values.push(eval(&row)?);
                    }
                    Ok(Row(values))
                })
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
                    let aggregated = Row(aggregated);
                    let mut values = Vec::with_capacity(post.len());
                    for eval in &post {
                        values.push(eval(&aggregated)?);
                    }
                    Ok(Row(values))
                })
                .name("Calc")
        }
        Plan::Project { input, exprs, .. } => {
            let evals: Vec<_> = exprs.iter().map(|e| e.eval.clone()).collect();
            lower(input, env)?
                .try_map(move |row: Row| -> riffle::Result<Row> {
                    let mut values = Vec::with_capacity(evals.len());
                    for eval in &evals {
                        values.push(eval(&row)?);
                    }
                    Ok(Row(values))
                })
                .name("Calc")
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
        rows = rows
            .try_map(move |row: Row| -> riffle::Result<Row> {
                let mut values = Vec::with_capacity(casts.len());
                for (_, cast) in &casts {
                    values.push(cast(&row)?);
                }
                Ok(Row(values))
            })
            .name("Cast");
    }
    connectors::sink(rows, table, &target)
}
