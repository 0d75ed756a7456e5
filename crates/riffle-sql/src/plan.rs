//! The logical plan: what a query computes, as a tree of relational steps, each with its output
//! schema and its changelog mode (what its output rows mean: `append`, rows only added, or
//! `retract`, rows added and taken back as a result changes).
//! Expressions are compiled while planning ([`crate::expr`]), so a plan that exists type-checks.
//! [`crate::lower`] turns a plan into DataStream operators; [`Plan::explain`] prints it.

use std::collections::BTreeMap;

use sqlparser::ast;

use crate::Executed;
use crate::aggregate::{AggKind, AggSpec};
use crate::error::{Result, SqlError};
use crate::expr::{Place, Scope, Typed, compile};
use crate::functions::Functions;
use crate::parse::{ColumnDef, Statement, TableDef};
use crate::types::{DataType, Field, Row, Schema};

/// What the output rows of a step mean (Flink's changelog modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangelogMode {
    /// Rows are only added (`+I`).
    Append,
    /// Rows are added (`+I`), updated (`-U` the old row, then `+U` the new one) and deleted
    /// (`-D`): a consumer that applies every change in order holds the current result
    /// (`riffle::change`'s contract).
    Retract,
}

impl std::fmt::Display for ChangelogMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChangelogMode::Append => f.write_str("append"),
            ChangelogMode::Retract => f.write_str("retract: +I -U +U -D"),
        }
    }
}

/// A table's time attribute: the column whose value is each row's event time, and the
/// watermark's bound of out-of-orderness behind it.
#[derive(Clone, Debug)]
pub struct TimeAttribute {
    /// The column.
    pub column: usize,
    /// Its name.
    pub name: String,
    /// `WATERMARK FOR c AS c - INTERVAL ...`: how far behind the watermark trails.
    pub out_of_orderness_ms: i64,
}

/// The windows of a window table function (`TUMBLE`, `HOP`), over the input's time attribute.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WindowKind {
    /// `TUMBLE(.., size)`.
    Tumble {
        /// Window length, ms.
        size: i64,
    },
    /// `HOP(.., slide, size)`: windows of `size` starting every `slide`.
    Hop {
        /// Distance between window starts, ms.
        slide: i64,
        /// Window length, ms.
        size: i64,
    },
    /// `CUMULATE(.., step, size)`: windows from a common start growing by `step` up to `size`.
    Cumulate {
        /// How much each window of a cycle is longer than the one before, ms.
        step: i64,
        /// The largest window, ms.
        size: i64,
    },
    /// `SESSION(time, gap)` (a group window): a key's rows closer than `gap` to each other, one
    /// window from the first to the last row plus `gap`.
    Session {
        /// The gap of inactivity that closes a session, ms.
        gap: i64,
    },
}

impl std::fmt::Display for WindowKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WindowKind::Tumble { size } => write!(f, "TUMBLE({size} ms)"),
            WindowKind::Hop { slide, size } => write!(f, "HOP({size} ms every {slide} ms)"),
            WindowKind::Cumulate { step, size } => {
                write!(f, "CUMULATE({size} ms by steps of {step} ms)")
            }
            WindowKind::Session { gap } => write!(f, "SESSION({gap} ms gap)"),
        }
    }
}

/// One step of a plan.
#[derive(Clone, Debug)]
pub enum Plan {
    /// `GROUP BY window_start, window_end, keys` over a window table function: one row per key
    /// and window, when the watermark passes the window's end.
    WindowAggregate {
        /// The input of the window table function.
        input: Box<Plan>,
        /// The windows.
        window: WindowKind,
        /// Whether they are of processing time (fired by the clock, not the watermark).
        processing_time: bool,
        /// Riffle's extension, `SET 'riffle.window.late-rows-table' = 't'`: the table that the
        /// rows too late for their windows are written into, and its columns over the input
        /// (by name, cast to the table's types).
        late: Option<(Box<TableDef>, Vec<Typed>)>,
        /// What each input row contributes: the group keys (first `keys` columns), then the
        /// aggregates' arguments and filters.
        pre: Vec<Typed>,
        /// How many of `pre` are group keys.
        keys: usize,
        /// The aggregates, reading `pre`'s columns.
        aggs: Vec<AggSpec>,
        /// The output columns, over `[keys.., window_start, window_end, window_time, aggs..]`.
        post: Vec<Typed>,
        /// `HAVING`: which aggregated rows are kept, over the same columns as `post`.
        having: Option<Typed>,
        /// Texts for `EXPLAIN`: keys and aggregates.
        texts: Vec<String>,
        /// The output columns.
        schema: Schema,
    },
    /// `GROUP BY keys` without a window (an updating aggregate): one row per key, updated as
    /// rows of the key arrive (`+I` for a new key, `-U` and `+U` when its result changes).
    GroupAggregate {
        /// The input (append-only, or a changelog whose retracted rows are taken back).
        input: Box<Plan>,
        /// What each input row contributes: the group keys (first `keys` columns), then the
        /// aggregates' arguments and filters.
        pre: Vec<Typed>,
        /// How many of `pre` are group keys.
        keys: usize,
        /// The aggregates, reading `pre`'s columns.
        aggs: Vec<AggSpec>,
        /// The output columns, over `[keys.., aggs..]`.
        post: Vec<Typed>,
        /// `HAVING`: which aggregated rows are kept, over the same columns as `post`.
        having: Option<Typed>,
        /// Texts for `EXPLAIN`: keys and aggregates.
        texts: Vec<String>,
        /// The output columns.
        schema: Schema,
        /// How long a key's state lives after its last update (`table.exec.state.ttl`).
        ttl: Option<std::time::Duration>,
    },
    /// `ROW_NUMBER() OVER (PARTITION BY .. ORDER BY ..)` bounded by the outer query's `WHERE rn
    /// <= n`: the first `limit` rows of each partition in that order (Top-N; with `limit` 1,
    /// deduplication), updated as rows arrive. Rows that tie on the order are ordered by their
    /// columns (so the result does not depend on arrival order).
    TopN {
        /// The input (append-only).
        input: Box<Plan>,
        /// The partition keys, over the input's columns.
        partition: Vec<Typed>,
        /// The order, over the input's columns, each with `true` for `DESC`.
        order: Vec<(Typed, bool)>,
        /// How many rows of each partition are kept.
        limit: usize,
        /// The output columns but the rank, over the input's columns.
        project: Vec<Typed>,
        /// Where the rank (`BIGINT`, 1 to `limit`) sits among the output columns.
        rank_at: usize,
        /// Texts for `EXPLAIN`: partition keys, then the order.
        texts: Vec<String>,
        /// The output columns.
        schema: Schema,
        /// How long a partition's state lives after its last update (`table.exec.state.ttl`).
        ttl: Option<std::time::Duration>,
    },
    /// A regular join (Flink SQL's, unbounded): each row of either side joins every row of the
    /// other side with equal keys, earlier or later; an outer join's row without a match is
    /// padded with `NULL`s, and that padded row retracted when a match comes.
    Join {
        /// The left input (append-only).
        left: Box<Plan>,
        /// The right input (append-only).
        right: Box<Plan>,
        /// Inner, left, right or full.
        kind: riffle::join::JoinType,
        /// The keys, over the left input's columns.
        left_keys: Vec<Typed>,
        /// The keys, over the right input's columns, in the same order.
        right_keys: Vec<Typed>,
        /// The equalities, for `EXPLAIN`.
        texts: Vec<String>,
        /// The left columns, then the right ones.
        schema: Schema,
        /// How long a row is kept for later matches (`table.exec.state.ttl`).
        ttl: Option<std::time::Duration>,
    },
    /// `a JOIN t FOR SYSTEM_TIME AS OF a.time ON a.k = t.k` with `t` a bounded table (Flink's
    /// lookup join): each row of the input looks its key up in `t`, read whole when the job
    /// starts; no state (the table does not change while the job runs).
    LookupJoin {
        /// The input.
        input: Box<Plan>,
        /// The looked-up table.
        table: Box<TableDef>,
        /// Inner or left.
        kind: riffle::join::JoinType,
        /// The keys, over the input's columns.
        left_keys: Vec<Typed>,
        /// The keys, over the table's columns, in the same order.
        right_keys: Vec<Typed>,
        /// The equalities, for `EXPLAIN`.
        texts: Vec<String>,
        /// The input's columns, then the table's.
        schema: Schema,
    },
    /// `SELECT .., AGG(x) OVER (PARTITION BY p ORDER BY o ROWS BETWEEN n PRECEDING AND CURRENT
    /// ROW) FROM t`: each row of `t` with the aggregate of itself and the `n` rows before it in
    /// its partition's order; a changelog (a row that comes in, or goes, changes the results of
    /// the `n` rows after it).
    OverAggregate {
        /// The input (append-only or a changelog).
        input: Box<Plan>,
        /// What each input row carries: the partition keys (first `partitions`), the order
        /// keys (next `descending.len()`), the aggregates' arguments, the other output columns.
        pre: Vec<Typed>,
        /// How many of `pre` are partition keys.
        partitions: usize,
        /// Per order key, whether it sorts descending.
        descending: Vec<bool>,
        /// The aggregates, reading `pre`'s columns.
        aggs: Vec<AggSpec>,
        /// How many rows before the current one the frame holds.
        preceding: usize,
        /// Each output column: a column of `pre` (`Ok`) or an aggregate (`Err`).
        outputs: Vec<std::result::Result<usize, usize>>,
        /// Texts for `EXPLAIN`: partition keys, order keys, aggregates.
        texts: Vec<String>,
        /// The output columns.
        schema: Schema,
    },
    /// `t MATCH_RECOGNIZE (..)`: the rows of each partition matched against a row pattern in
    /// time order (Riffle's pattern matcher), one row per match.
    MatchRecognize {
        /// The input (append-only, with a time attribute).
        input: Box<Plan>,
        /// The clause, compiled.
        spec: std::sync::Arc<crate::recognize::Recognize>,
        /// The partition columns, then the measures.
        schema: Schema,
    },
    /// `a UNION ALL b ..`: every row of each input.
    Union {
        /// The inputs, their columns of the same types (cast where they were not).
        inputs: Vec<Plan>,
        /// The first input's columns (their names).
        schema: Schema,
    },
    /// Reading a table: its connector's columns, then its computed columns.
    Scan {
        /// The table.
        table: Box<TableDef>,
        /// The physical columns (what the connector fills).
        physical: Schema,
        /// The computed columns, over the physical ones, in order after them.
        computed: Vec<Typed>,
        /// Physical then computed columns.
        schema: Schema,
        /// Event time, when the table declares a watermark.
        time: Option<TimeAttribute>,
    },
    /// Rows for which `predicate` is true.
    Filter {
        /// The input.
        input: Box<Plan>,
        /// The condition, over the input's columns.
        predicate: Typed,
        /// Its text, for `EXPLAIN`.
        text: String,
    },
    /// New columns computed from each row.
    Project {
        /// The input.
        input: Box<Plan>,
        /// The columns, over the input's.
        exprs: Vec<Typed>,
        /// Their texts, for `EXPLAIN`.
        texts: Vec<String>,
        /// The output columns.
        schema: Schema,
        /// The input column that is still the event time, if one is passed on as it is.
        time: Option<TimeAttribute>,
        /// The column of processing time (`PROCTIME()`, or an input's passed on as it is).
        proc_time: Option<TimeAttribute>,
    },
}

/// The columns `exprs` read as they are, in order; `None` when one computes anything.
pub(crate) fn columns_as_they_are(exprs: &[Typed]) -> Option<Vec<usize>> {
    exprs
        .iter()
        .map(|e| match e.place {
            Some(Place::Column(c)) => Some(c),
            _ => None,
        })
        .collect()
}

impl Plan {
    /// The row a query reading bounded tables answers when its input has no row, as SQL over a
    /// table does (a streaming job emits nothing then): a global aggregate's one row (`COUNT`
    /// 0, the other aggregates `NULL`), through the projections above it. `None` for any other
    /// plan, and for one that filters the aggregate's row (`HAVING`, a `WHERE` over it): no
    /// row out of it does not say its input was empty.
    ///
    /// ```
    /// use riffle_sql::parse::{Statement, parse_statement};
    /// use riffle_sql::plan::Catalog;
    ///
    /// let mut catalog = Catalog::default();
    /// let table = "CREATE TABLE t (a BIGINT) WITH ('connector' = 'datagen')";
    /// catalog.define(parse_statement(table).unwrap()).unwrap();
    /// let Statement::Query(query) = parse_statement("SELECT COUNT(*) + 1, MAX(a) FROM t").unwrap()
    /// else {
    ///     unreachable!()
    /// };
    /// let plan = catalog.plan_query(&query).unwrap();
    /// let row = plan.row_over_no_input().unwrap();
    /// assert_eq!(row.0, vec![riffle_sql::Value::Int(1), riffle_sql::Value::Null]);
    /// ```
    pub fn row_over_no_input(&self) -> Option<Row> {
        let eval = |exprs: &[Typed], row: &Row| {
            let values = exprs.iter().map(|e| (e.eval)(row));
            values.collect::<riffle::Result<Vec<_>>>().ok().map(Row)
        };
        match self {
            Plan::GroupAggregate {
                keys: 0,
                aggs,
                post,
                having: None,
                ..
            } => {
                let empty = aggs.iter().map(|agg| match agg.kind {
                    AggKind::CountStar | AggKind::Count | AggKind::CountDistinct => {
                        crate::Value::Int(0)
                    }
                    AggKind::Sum | AggKind::Min | AggKind::Max | AggKind::Avg => crate::Value::Null,
                });
                eval(post, &Row(empty.collect()))
            }
            Plan::Project { input, exprs, .. } => eval(exprs, &input.row_over_no_input()?),
            _ => None,
        }
    }

    /// The output columns.
    pub fn schema(&self) -> &Schema {
        match self {
            Plan::Scan { schema, .. }
            | Plan::Project { schema, .. }
            | Plan::WindowAggregate { schema, .. }
            | Plan::GroupAggregate { schema, .. }
            | Plan::TopN { schema, .. }
            | Plan::Join { schema, .. }
            | Plan::LookupJoin { schema, .. }
            | Plan::OverAggregate { schema, .. }
            | Plan::MatchRecognize { schema, .. }
            | Plan::Union { schema, .. } => schema,
            Plan::Filter { input, .. } => input.schema(),
        }
    }

    /// The keys this plan's rows are partitioned by among subtasks, each as the columns that make it
    /// up in key order: a row sits in the subtask that `key_by` on those columns would send it to.
    /// Only what is certain: an inner join of appended rows is partitioned by its left keys and by
    /// its right keys, when they are columns as they are (a row it emits sits where both its keys,
    /// equal, belong); a filter keeps its input's partitioning; a projection keeps the keys whose
    /// every column it passes as it is.
    pub(crate) fn partitioned_by(&self) -> Vec<Vec<usize>> {
        match self {
            Plan::Join {
                left,
                right,
                kind: riffle::join::JoinType::Inner,
                left_keys,
                right_keys,
                ..
            } if left.changelog_mode() == ChangelogMode::Append
                && right.changelog_mode() == ChangelogMode::Append =>
            {
                let left_len = left.schema().len();
                let on_right = columns_as_they_are(right_keys)
                    .map(|columns| columns.into_iter().map(|c| c + left_len).collect());
                columns_as_they_are(left_keys)
                    .into_iter()
                    .chain(on_right)
                    .collect()
            }
            Plan::Filter { input, .. } => input.partitioned_by(),
            Plan::Project { input, exprs, .. } => {
                let passed =
                    |c: usize| exprs.iter().position(|e| e.place == Some(Place::Column(c)));
                input
                    .partitioned_by()
                    .into_iter()
                    .filter_map(|key| key.into_iter().map(passed).collect())
                    .collect()
            }
            _ => Vec::new(),
        }
    }

    /// Whether this plan's rows are partitioned by `keys` (columns as they are), see
    /// [`partitioned_by`](Plan::partitioned_by): a keyed step on them needs no exchange.
    pub(crate) fn partitioned_by_exprs(&self, keys: &[Typed]) -> bool {
        columns_as_they_are(keys).is_some_and(|columns| self.partitioned_by().contains(&columns))
    }

    /// What the output rows mean.
    pub fn changelog_mode(&self) -> ChangelogMode {
        match self {
            Plan::Scan { table, .. } if crate::connectors::is_changelog(table) => {
                ChangelogMode::Retract
            }
            Plan::Scan { .. } | Plan::WindowAggregate { .. } | Plan::MatchRecognize { .. } => {
                ChangelogMode::Append
            }
            // `SELECT DISTINCT` (a group aggregate of no aggregates) only adds rows: a result
            // never changes, so it is never sent again.
            Plan::GroupAggregate {
                aggs,
                having,
                input,
                ..
            } if aggs.is_empty()
                && having.is_none()
                && input.changelog_mode() == ChangelogMode::Append =>
            {
                ChangelogMode::Append
            }
            Plan::GroupAggregate { .. } | Plan::TopN { .. } | Plan::OverAggregate { .. } => {
                ChangelogMode::Retract
            }
            Plan::Union { inputs, .. } => {
                if inputs
                    .iter()
                    .all(|i| i.changelog_mode() == ChangelogMode::Append)
                {
                    ChangelogMode::Append
                } else {
                    ChangelogMode::Retract
                }
            }
            // An inner join of appended rows only adds rows; an outer join retracts the padded
            // row of a match that comes later.
            // A join of an updating input retracts the results of the rows taken back.
            Plan::Join {
                kind, left, right, ..
            } => match kind {
                riffle::join::JoinType::Inner
                    if left.changelog_mode() == ChangelogMode::Append
                        && right.changelog_mode() == ChangelogMode::Append =>
                {
                    ChangelogMode::Append
                }
                _ => ChangelogMode::Retract,
            },
            Plan::Filter { input, .. }
            | Plan::Project { input, .. }
            | Plan::LookupJoin { input, .. } => input.changelog_mode(),
        }
    }

    /// The output's event-time attribute, if it has one.
    pub fn time(&self) -> Option<&TimeAttribute> {
        match self {
            Plan::Scan { time, .. } | Plan::Project { time, .. } => time.as_ref(),
            // The input's columns come first, as they were.
            Plan::Filter { input, .. } | Plan::LookupJoin { input, .. } => input.time(),
            // Rows of a window aggregation carry `window_time` as their event time (not a
            // column one can window again yet); an updating aggregate's rows have none.
            Plan::WindowAggregate { .. }
            | Plan::GroupAggregate { .. }
            | Plan::OverAggregate { .. }
            | Plan::TopN { .. }
            | Plan::MatchRecognize { .. }
            | Plan::Join { .. } => None,
            // The inputs' time attribute, when they all have it at the same column.
            Plan::Union { inputs, .. } => {
                let first = inputs.first()?.time()?;
                inputs[1..]
                    .iter()
                    .all(|i| i.time().is_some_and(|t| t.column == first.column))
                    .then_some(first)
            }
        }
    }

    /// The output's processing-time attribute (a `PROCTIME()` column), if it has one.
    pub fn proc_time(&self) -> Option<&TimeAttribute> {
        match self {
            Plan::Project { proc_time, .. } => proc_time.as_ref(),
            Plan::Filter { input, .. } | Plan::LookupJoin { input, .. } => input.proc_time(),
            _ => None,
        }
    }

    /// The steps this one reads.
    pub fn inputs(&self) -> Vec<&Plan> {
        match self {
            Plan::Scan { .. } => Vec::new(),
            Plan::Join { left, right, .. } => vec![left, right],
            Plan::Union { inputs, .. } => inputs.iter().collect(),
            Plan::WindowAggregate { input, .. }
            | Plan::GroupAggregate { input, .. }
            | Plan::TopN { input, .. }
            | Plan::LookupJoin { input, .. }
            | Plan::OverAggregate { input, .. }
            | Plan::MatchRecognize { input, .. }
            | Plan::Filter { input, .. }
            | Plan::Project { input, .. } => vec![input],
        }
    }

    /// The tables the plan reads: its scans' and its lookup joins', leaves in order.
    ///
    /// ```
    /// use riffle_sql::plan::Catalog;
    /// use riffle_sql::parse::{parse_statement, Statement};
    /// let mut catalog = Catalog::default();
    /// let Statement::CreateTable(t) = parse_statement(
    ///     "CREATE TABLE t (a BIGINT) WITH ('connector' = 'blackhole')").unwrap() else { panic!() };
    /// catalog.tables.insert("t".into(), *t);
    /// let Statement::Query(q) = parse_statement("SELECT a FROM t WHERE a > 1").unwrap() else { panic!() };
    /// let plan = catalog.plan_query(&q).unwrap();
    /// assert_eq!(plan.tables().iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["t"]);
    /// ```
    pub fn tables(&self) -> Vec<&TableDef> {
        let mut tables = Vec::new();
        if let Plan::Scan { table, .. } | Plan::LookupJoin { table, .. } = self {
            tables.push(table.as_ref());
        }
        for input in self.inputs() {
            tables.extend(input.tables());
        }
        tables
    }

    /// The output columns whose values identify a row of the result, when the plan knows them
    /// (Flink's upsert key): an updating aggregate's group keys, a window aggregate's keys with
    /// its window's start or end, as far as the projections above pass them on. `Some(vec![])`:
    /// the result has at most one row (an aggregate without `GROUP BY`). A materialized view
    /// (`riffle serve`) is held by this key, and a lookup by all of it finds one row.
    pub fn unique_key(&self) -> Option<Vec<usize>> {
        // Where each of `wanted` (columns of the layout `post` reads) is in the output.
        fn placed(post: &[Typed], wanted: &[usize]) -> Option<Vec<usize>> {
            wanted
                .iter()
                .map(|w| post.iter().position(|p| p.column == Some(*w)))
                .collect()
        }
        match self {
            Plan::GroupAggregate { keys, post, .. } => {
                placed(post, &(0..*keys).collect::<Vec<_>>())
            }
            Plan::WindowAggregate { keys, post, .. } => {
                let mut key = placed(post, &(0..*keys).collect::<Vec<_>>())?;
                // `window_start` (or else `window_end`) tells the windows of a key apart.
                let window = placed(post, &[*keys]).or_else(|| placed(post, &[*keys + 1]))?;
                key.extend(window);
                Some(key)
            }
            Plan::Filter { input, .. } => input.unique_key(),
            Plan::Project { input, exprs, .. } => placed(exprs, &input.unique_key()?),
            _ => None,
        }
    }

    /// The plan as Riffle operators, one line per step, leaves last (what `EXPLAIN` prints).
    pub fn explain(&self) -> String {
        let mut lines = Vec::new();
        self.explain_into(0, &mut lines);
        lines.join("\n")
    }

    fn explain_into(&self, depth: usize, lines: &mut Vec<String>) {
        let pad = "  ".repeat(depth);
        let mode = self.changelog_mode();
        match self {
            Plan::Scan {
                table,
                schema,
                time,
                ..
            } => {
                let connector = table.options.get("connector").map_or("?", |c| c.as_str());
                let time = time.as_ref().map_or(String::new(), |t| {
                    format!(
                        ", event time `{}`, watermark {} ms behind",
                        schema.fields[t.column].name, t.out_of_orderness_ms
                    )
                });
                // A changelog read by key goes through keyed state first (the upserts of
                // `upsert-kafka`, the changes of `postgres-cdc`); Debezium events do not.
                let normalized = crate::connectors::is_changelog(table)
                    && matches!(connector, "upsert-kafka" | "postgres-cdc");
                let source_pad = if normalized {
                    lines.push(format!(
                        "{pad}ChangelogNormalize: keyed by the primary key [{}] (keyed state: the key's last row, no TTL) [{mode}]",
                        table.primary_key.join(", ")
                    ));
                    format!("{pad}  ")
                } else {
                    pad.clone()
                };
                lines.push(format!(
                    "{source_pad}Source: {connector} table `{}` {schema}{time} [{mode}]",
                    table.name
                ));
            }
            Plan::Filter { input, text, .. } => {
                lines.push(format!("{pad}Filter: {text} (chained, stateless) [{mode}]"));
                input.explain_into(depth + 1, lines);
            }
            Plan::Project {
                input,
                texts,
                schema,
                ..
            } => {
                lines.push(format!(
                    "{pad}Map: {} -> {schema} (chained, stateless) [{mode}]",
                    texts.join(", ")
                ));
                input.explain_into(depth + 1, lines);
            }
            Plan::WindowAggregate {
                input,
                window,
                processing_time,
                late,
                keys,
                texts,
                schema,
                ..
            } => {
                let (key_texts, agg_texts) = texts.split_at(*keys);
                let (time, fired) = match processing_time {
                    true => (" of processing time", "the clock"),
                    false => ("", "the watermark"),
                };
                let fired = match late {
                    Some((table, _)) => format!("{fired}; late rows to `{}`", table.name),
                    None => fired.to_string(),
                };
                // An event-time HOP whose size is a multiple of its slide keeps slices.
                let kept = match (window, processing_time) {
                    (WindowKind::Hop { slide, size }, false)
                        if *slide > 0 && size > slide && size % slide == 0 =>
                    {
                        format!(
                            "one accumulator per key and slice of {slide} ms, merged into each window as it fires"
                        )
                    }
                    _ => "one accumulator per key and window".to_string(),
                };
                lines.push(format!(
                    "{pad}Window: {window}{time}, keyed by [{}], aggregates [{}] -> {schema} (keyed state: {kept}, fired by {fired}) [{mode}]",
                    key_texts.join(", "),
                    agg_texts.join(", ")
                ));
                lines.push(format!(
                    "{pad}  Hash by [{}], pre-computed keys and arguments (chained)",
                    key_texts.join(", ")
                ));
                input.explain_into(depth + 2, lines);
            }
            Plan::GroupAggregate {
                input,
                keys,
                aggs,
                texts,
                schema,
                ttl,
                ..
            } => {
                let (key_texts, agg_texts) = texts.split_at(*keys);
                let ttl = ttl.map_or("no TTL: one entry per key for ever".to_string(), |t| {
                    format!("TTL {} ms after the key's last update", t.as_millis())
                });
                // Over an updating input, a retracted row is taken back out of the accumulators.
                let retracting = match input.changelog_mode() {
                    ChangelogMode::Append
                        if aggs.iter().any(|a| a.kind == AggKind::CountDistinct) =>
                    {
                        ", COUNT(DISTINCT ..)'s values in the accumulator on the heap, in a map state (an entry per key and value) in RocksDB"
                    }
                    ChangelogMode::Append => "",
                    ChangelogMode::Retract => {
                        ", retracting: MIN/MAX/DISTINCT keep each value's count"
                    }
                };
                lines.push(format!(
                    "{pad}GroupAggregate: keyed by [{}], aggregates [{}] -> {schema} (keyed state: one accumulator per key, {ttl}{retracting}) [{mode}]",
                    key_texts.join(", "),
                    agg_texts.join(", ")
                ));
                lines.push(format!(
                    "{pad}  Hash by [{}], pre-computed keys and arguments (chained)",
                    key_texts.join(", ")
                ));
                input.explain_into(depth + 2, lines);
            }
            Plan::Union { inputs, schema } => {
                lines.push(format!(
                    "{pad}Union: {} inputs -> {schema} (no state) [{mode}]",
                    inputs.len()
                ));
                for input in inputs {
                    input.explain_into(depth + 1, lines);
                }
            }
            Plan::OverAggregate {
                input,
                partitions,
                descending,
                preceding,
                texts,
                schema,
                ..
            } => {
                let (partition, rest) = texts.split_at(*partitions);
                let (order, aggs) = rest.split_at(descending.len());
                lines.push(format!(
                    "{pad}OverAggregate: partitioned by [{}], ordered by [{}], ROWS {preceding} PRECEDING, aggregates [{}] -> {schema} (keyed state: each partition's rows in order; a row in or out updates the {preceding} after it) [{mode}]",
                    partition.join(", "),
                    order.join(", "),
                    aggs.join(", ")
                ));
                lines.push(format!(
                    "{pad}  Hash by [{}], pre-computed keys and arguments (chained)",
                    partition.join(", ")
                ));
                input.explain_into(depth + 2, lines);
            }
            Plan::LookupJoin {
                input,
                table,
                kind,
                texts,
                schema,
                ..
            } => {
                let path = table.options.get("path").map_or("?", String::as_str);
                lines.push(format!(
                    "{pad}LookupJoin: {kind:?} with `{}` ({path}, read whole at start) on [{}] -> {schema} (no state) [{mode}]",
                    table.name,
                    texts.join(" AND ")
                ));
                input.explain_into(depth + 1, lines);
            }
            Plan::Join {
                left,
                right,
                kind,
                texts,
                schema,
                ttl,
                ..
            } => {
                let ttl = ttl.map_or("no TTL: every row kept".to_string(), |t| {
                    format!("TTL {} ms after a row arrived", t.as_millis())
                });
                // Over an updating input, a retracted row takes back the equal row kept.
                let retracting = match (left.changelog_mode(), right.changelog_mode()) {
                    (ChangelogMode::Append, ChangelogMode::Append) => "",
                    _ => ", a retracted row takes back its side's equal row and its results",
                };
                lines.push(format!(
                    "{pad}Join: {kind:?} on [{}] -> {schema} (keyed state: both sides' rows per key, {ttl}{retracting}) [{mode}]",
                    texts.join(" AND ")
                ));
                lines.push(format!("{pad}  Hash by the left keys"));
                left.explain_into(depth + 2, lines);
                lines.push(format!("{pad}  Hash by the right keys"));
                right.explain_into(depth + 2, lines);
            }
            Plan::TopN {
                input,
                partition,
                limit,
                texts,
                schema,
                ttl,
                ..
            } => {
                let (key_texts, order_texts) = texts.split_at(partition.len());
                let what = if *limit == 1 { "Deduplicate" } else { "TopN" };
                let ttl = ttl.map_or("no TTL".to_string(), |t| {
                    format!("TTL {} ms after the partition's last update", t.as_millis())
                });
                lines.push(format!(
                    "{pad}{what}: first {limit} by [{}] per [{}], ties by the row's columns -> {schema} (keyed state: the partition's first {limit} rows, {ttl}) [{mode}]",
                    order_texts.join(", "),
                    key_texts.join(", ")
                ));
                lines.push(match input.partitioned_by_exprs(partition) {
                    true => format!(
                        "{pad}  Kept in place: partitioned by [{}] already, no exchange (in one process)",
                        key_texts.join(", ")
                    ),
                    false => format!("{pad}  Hash by [{}] (chained)", key_texts.join(", ")),
                });
                input.explain_into(depth + 2, lines);
            }
            Plan::MatchRecognize {
                input,
                spec,
                schema,
            } => {
                lines.push(format!(
                    "{pad}{} -> {schema} [{mode}]",
                    spec.explain(input.schema())
                ));
                lines.push(format!("{pad}  Hash by the partition keys (chained)"));
                input.explain_into(depth + 2, lines);
            }
        }
    }
}

/// The tables, views and functions statements see.
#[derive(Clone, Default)]
pub struct Catalog {
    /// Tables, by name.
    pub tables: BTreeMap<String, TableDef>,
    /// Views, by name.
    pub views: BTreeMap<String, ast::Query>,
    /// Functions.
    pub functions: Functions,
    /// The options `SET` gave (`table.exec.state.ttl`, ...).
    pub options: BTreeMap<String, String>,
}

/// A window table function in FROM: its input, the windows, whether of processing time, and a
/// SESSION window's `PARTITION BY` columns.
struct WindowFunction {
    input: Plan,
    qualifier: Option<String>,
    window: WindowKind,
    processing: bool,
    partition: Option<Vec<String>>,
}

impl Catalog {
    /// Registers what a DDL statement defines: a table (checked readable now, not when
    /// queried), a view (its query planned now), a function Rust registered under the name, or
    /// an option (`SET`, checked now when the planner reads it). Other statements are refused.
    pub fn define(&mut self, statement: Statement) -> Result<Executed> {
        match statement {
            Statement::CreateTable(table) => {
                let table = *table;
                let name = table.name.clone();
                self.scan(&table)?;
                self.tables.insert(name.clone(), table);
                Ok(Executed::Created(name))
            }
            Statement::CreateView { name, query } => {
                self.plan_query(&query).map_err(|e| {
                    SqlError::new(format!("view `{name}`: {}", e.message), e.location)
                })?;
                self.views.insert(name.clone(), *query);
                Ok(Executed::Created(name))
            }
            Statement::CreateFunction { name, class } => {
                if !self.functions.is_registered(&name) {
                    return Err(SqlError::plan(format!(
                        "CREATE FUNCTION {name} AS '{class}': Riffle runs no JVM classes; register a Rust function named `{name}` (SqlEnv::register_function)"
                    )));
                }
                Ok(Executed::Created(name))
            }
            Statement::Set { key, value } => {
                let before = self.options.insert(key.clone(), value.clone());
                if let Err(e) = self.check_options() {
                    match before {
                        Some(before) => self.options.insert(key.clone(), before),
                        None => self.options.remove(&key),
                    };
                    return Err(e);
                }
                Ok(Executed::Set(key, value))
            }
            Statement::Drop {
                name,
                view,
                if_exists,
            } => {
                let removed = match view {
                    true => self.views.remove(&name).is_some(),
                    false => self.tables.remove(&name).is_some(),
                };
                let kind = if view { "view" } else { "table" };
                match (removed, if_exists) {
                    (true, _) => Ok(Executed::Dropped(name)),
                    (false, true) => Ok(Executed::Dropped(name)),
                    (false, false) => Err(SqlError::plan(format!(
                        "DROP {}: there is no {kind} `{name}` (IF EXISTS skips a missing one)",
                        kind.to_uppercase()
                    ))),
                }
            }
            _ => Err(SqlError::plan(
                "only CREATE TABLE, CREATE VIEW, CREATE FUNCTION, DROP and SET define something",
            )),
        }
    }

    /// The plan of reading table `def` (its physical columns, computed columns and watermark).
    pub fn scan(&self, def: &TableDef) -> Result<Plan> {
        let physical = Schema::new(
            def.columns
                .iter()
                .filter_map(|c| match c {
                    ColumnDef::Physical(field) => Some(field.clone()),
                    ColumnDef::Computed { .. } => None,
                })
                .collect(),
        );
        let scope = Scope::new(&physical, Some(&def.name), &self.functions);
        let mut computed = Vec::new();
        let mut fields = physical.fields.clone();
        for column in &def.columns {
            if let ColumnDef::Computed { name, expr } = column {
                let typed = compile(expr, &scope).map_err(|e| {
                    SqlError::plan(format!(
                        "computed column `{name}` of `{}`: {}",
                        def.name, e.message
                    ))
                })?;
                fields.push(Field {
                    name: name.clone(),
                    ty: typed.ty.clone(),
                    nullable: typed.nullable,
                });
                computed.push(typed);
            }
        }
        let schema = Schema::new(fields);
        let time = match &def.watermark {
            None => None,
            Some((column, expr)) => Some(time_attribute(&def.name, &schema, column, expr)?),
        };
        Ok(Plan::Scan {
            table: Box::new(def.clone()),
            physical,
            computed,
            schema,
            time,
        })
    }

    /// The plan of `query`.
    pub fn plan_query(&self, query: &ast::Query) -> Result<Plan> {
        if let Some(with) = &query.with {
            // Each common table expression is a view of this query (later ones see earlier).
            if with.recursive {
                return Err(SqlError::plan("WITH RECURSIVE is not supported"));
            }
            let mut scoped = self.clone();
            for cte in &with.cte_tables {
                if !cte.alias.columns.is_empty() {
                    return Err(SqlError::plan(format!(
                        "WITH {}(columns) AS ..: name the columns in the query instead",
                        cte.alias.name
                    )));
                }
                scoped
                    .views
                    .insert(cte.alias.name.value.clone(), (*cte.query).clone());
            }
            let mut body = query.clone();
            body.with = None;
            return scoped.plan_query(&body);
        }
        if query.order_by.is_some() {
            return Err(SqlError::plan(
                "ORDER BY on a stream is not supported (a streaming query's rows never end; use a window, or ORDER BY in a Top-N query)",
            ));
        }
        if query.limit_clause.is_some() || query.fetch.is_some() {
            return Err(SqlError::plan("LIMIT is not supported yet"));
        }
        self.plan_set(query.body.as_ref())
    }

    /// The plan of a query's body: a SELECT, a query in parentheses, or a `UNION ALL`.
    fn plan_set(&self, body: &ast::SetExpr) -> Result<Plan> {
        match body {
            ast::SetExpr::Select(select) => self.plan_select(select),
            ast::SetExpr::Query(inner) => self.plan_query(inner),
            ast::SetExpr::SetOperation {
                left,
                op: ast::SetOperator::Union,
                set_quantifier: ast::SetQuantifier::All,
                right,
            } => self.union(self.plan_set(left)?, self.plan_set(right)?),
            ast::SetExpr::SetOperation {
                op, set_quantifier, ..
            } => Err(SqlError::plan(format!(
                "{op} {set_quantifier} is not supported yet (UNION ALL is; a UNION without ALL is SELECT DISTINCT of a UNION ALL)"
            ))),
            other => Err(SqlError::plan(format!(
                "`{}` is not supported yet",
                other.to_string().chars().take(60).collect::<String>()
            ))),
        }
    }

    /// `left UNION ALL right`: their columns must match in number and, after a cast, in type.
    fn union(&self, left: Plan, right: Plan) -> Result<Plan> {
        let (l, r) = (left.schema().clone(), right.schema().clone());
        if l.len() != r.len() {
            return Err(SqlError::plan(format!(
                "UNION ALL of {} columns {l} and {} columns {r}",
                l.len(),
                r.len()
            )));
        }
        // The right side's columns cast to the left side's types where they differ.
        let right = if l.fields.iter().zip(&r.fields).all(|(a, b)| a.ty == b.ty) {
            right
        } else {
            let mut exprs = Vec::new();
            for (index, (a, b)) in l.fields.iter().zip(&r.fields).enumerate() {
                let cast = column_of(&r, index).cast(&a.ty).map_err(|e| {
                    SqlError::plan(format!(
                        "UNION ALL: column {} is {} on the left and {} on the right ({})",
                        index + 1,
                        a.ty,
                        b.ty,
                        e.message
                    ))
                })?;
                exprs.push(cast);
            }
            let fields = l
                .fields
                .iter()
                .zip(&r.fields)
                .map(|(a, b)| Field {
                    nullable: a.nullable || b.nullable,
                    ..a.clone()
                })
                .collect();
            Plan::Project {
                input: Box::new(right),
                texts: r.fields.iter().map(|f| f.name.clone()).collect(),
                exprs,
                schema: Schema::new(fields),
                time: None,
                proc_time: None,
            }
        };
        let mut inputs = match left {
            Plan::Union { inputs, .. } => inputs,
            other => vec![other],
        };
        inputs.push(right);
        Ok(Plan::Union { inputs, schema: l })
    }

    /// The plan of a relation of `FROM`, and the name that qualifies its columns.
    fn plan_relation(&self, relation: &ast::TableFactor) -> Result<(Plan, Option<String>)> {
        match relation {
            ast::TableFactor::Table {
                name, alias, args, ..
            } => {
                if args.is_some() {
                    return Err(SqlError::plan(format!(
                        "the table function {name}(...) is not supported yet"
                    )));
                }
                let name = name.to_string();
                let qualifier = alias
                    .as_ref()
                    .map_or(name.clone(), |a| a.name.value.clone());
                Ok((self.plan_name(&name)?, Some(qualifier)))
            }
            ast::TableFactor::Derived {
                subquery, alias, ..
            } => Ok((
                self.plan_query(subquery)?,
                alias.as_ref().map(|a| a.name.value.clone()),
            )),
            ast::TableFactor::MatchRecognize {
                table,
                partition_by,
                order_by,
                measures,
                rows_per_match,
                after_match_skip,
                pattern,
                symbols,
                alias,
            } => {
                let (input, _) = self.plan_relation(table)?;
                let clause = crate::recognize::Clause {
                    partition_by,
                    order_by,
                    measures,
                    rows_per_match: rows_per_match.as_ref(),
                    after_match_skip: after_match_skip.as_ref(),
                    pattern,
                    symbols,
                };
                Ok((
                    crate::recognize::plan(input, clause, &self.functions)?,
                    alias.as_ref().map(|a| a.name.value.clone()),
                ))
            }
            other => Err(SqlError::plan(format!("FROM {other} is not supported yet"))),
        }
    }

    /// The plan of the table or view `name`.
    fn plan_name(&self, name: &str) -> Result<Plan> {
        if let Some(view) = self.views.get(name) {
            return self.plan_query(view);
        }
        match self.tables.get(name) {
            Some(def) => self.scan(def),
            None => Err(SqlError::plan(format!(
                "no table or view `{name}` (known: {})",
                self.known_names()
            ))),
        }
    }

    fn known_names(&self) -> String {
        let names: Vec<&str> = self
            .tables
            .keys()
            .chain(self.views.keys())
            .map(String::as_str)
            .collect();
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    }

    fn plan_select(&self, select: &ast::Select) -> Result<Plan> {
        match &select.distinct {
            None | Some(ast::Distinct::All) => {}
            Some(ast::Distinct::Distinct) => return self.plan_distinct(select),
            Some(other) => return Err(SqlError::plan(format!("{other} is not supported"))),
        }
        let group_by = match &select.group_by {
            ast::GroupByExpr::Expressions(exprs, _) => exprs.clone(),
            ast::GroupByExpr::All(_) => {
                return Err(SqlError::plan("GROUP BY ALL is not supported"));
            }
        };
        if select
            .projection
            .iter()
            .any(|item| over_call(item).is_some())
        {
            return self.plan_over(select);
        }
        let aggregating = select.projection.iter().any(|item| match item {
            ast::SelectItem::UnnamedExpr(e) | ast::SelectItem::ExprWithAlias { expr: e, .. } => {
                has_aggregate(e)
            }
            _ => false,
        });
        if !group_by.is_empty() || aggregating || select.having.is_some() {
            return self.plan_grouped(select, &group_by);
        }
        if let Some(plan) = self.plan_top_n_in_place(select)? {
            return Ok(plan);
        }
        if let Some((plan, qualifiers, rest)) = self.plan_top_n(select)? {
            let plan = self.filter(plan, &qualifiers, rest.as_ref())?;
            return self.project(plan, &qualifiers, &select.projection);
        }
        let (plan, qualifiers, condition) = self.plan_from(select)?;
        self.filter_and_project(plan, &qualifiers, condition, &select.projection)
    }

    /// A SELECT's `WHERE` and projection over `plan`, the calls they repeat computed once per
    /// row as columns below them ([`crate::cse`]).
    fn filter_and_project(
        &self,
        plan: Plan,
        qualifiers: &Qualifiers,
        mut condition: Option<ast::Expr>,
        items: &[ast::SelectItem],
    ) -> Result<Plan> {
        let mut exprs: Vec<ast::Expr> = Vec::new();
        for item in items {
            match item {
                ast::SelectItem::UnnamedExpr(e)
                | ast::SelectItem::ExprWithAlias { expr: e, .. } => exprs.push(e.clone()),
                // (`*` would read the computed columns too.)
                _ => exprs.clear(),
            }
            if exprs.is_empty() {
                break;
            }
        }
        let candidate = |e: &ast::Expr| match e {
            ast::Expr::Function(f) => {
                f.over.is_none()
                    && f.filter.is_none()
                    && matches!(&f.args, ast::FunctionArguments::List(l) if !l.args.is_empty())
                    && !crate::functions::is_aggregate(&f.name.to_string().to_ascii_uppercase())
                    && self.is_deterministic(e)
            }
            _ => false,
        };
        // (A column of the input named like a computed one would be read in its place.)
        let markers_free = !(plan.schema().fields.iter()).any(|f| f.name.starts_with("$cse"));
        let shared = match exprs.len() == items.len() && markers_free {
            true => crate::cse::take_repeated_calls(&mut condition, &mut exprs, &candidate),
            false => Vec::new(),
        };
        if shared.is_empty() {
            let plan = self.filter(plan, qualifiers, condition.as_ref())?;
            return self.project(plan, qualifiers, items);
        }
        // An unnamed item keeps the name it had (not its computed column's).
        let scope_schema = plan.schema().clone();
        let scope = self.scope(&scope_schema, qualifiers);
        let mut rewritten = Vec::with_capacity(items.len());
        for (position, (item, expr)) in items.iter().zip(exprs).enumerate() {
            rewritten.push(match item {
                ast::SelectItem::ExprWithAlias { alias, .. } => ast::SelectItem::ExprWithAlias {
                    expr,
                    alias: alias.clone(),
                },
                ast::SelectItem::UnnamedExpr(original) if *original != expr => {
                    let name = compile(original, &scope)?
                        .name
                        .unwrap_or_else(|| format!("EXPR${position}"));
                    ast::SelectItem::ExprWithAlias {
                        expr,
                        alias: ast::Ident::new(name),
                    }
                }
                _ => ast::SelectItem::UnnamedExpr(expr),
            });
        }
        let (before, after): (Vec<_>, Vec<_>) = shared.into_iter().partition(|s| s.before_where);
        let mut plan = plan;
        if !before.is_empty() {
            plan = self.with_columns(plan, qualifiers, &before)?;
        }
        plan = self.filter(plan, qualifiers, condition.as_ref())?;
        if !after.is_empty() {
            plan = self.with_columns(plan, qualifiers, &after)?;
        }
        self.project(plan, qualifiers, &rewritten)
    }

    /// `input`'s columns as they are, then a column of each of `calls`' values.
    fn with_columns(
        &self,
        input: Plan,
        qualifiers: &Qualifiers,
        calls: &[crate::cse::Shared],
    ) -> Result<Plan> {
        let schema = input.schema().clone();
        let scope = self.scope(&schema, qualifiers);
        let mut exprs: Vec<Typed> = (0..schema.len()).map(|i| column_of(&schema, i)).collect();
        let mut texts: Vec<String> = schema.fields.iter().map(|f| f.name.clone()).collect();
        let mut fields = schema.fields.clone();
        for shared in calls {
            let typed = compile(&shared.call, &scope)?;
            fields.push(Field {
                name: shared.name.clone(),
                ty: typed.ty.clone(),
                nullable: typed.nullable,
            });
            texts.push(format!("{} AS {}", shared.call, shared.name));
            exprs.push(typed);
        }
        Ok(Plan::Project {
            time: input.time().cloned(),
            proc_time: input.proc_time().cloned(),
            input: Box::new(input),
            exprs,
            texts,
            schema: Schema::new(fields),
        })
    }

    /// The relation of a SELECT's FROM (a table, a view, a derived table, or a join of two),
    /// the names that qualify its columns, and what is left of the SELECT's WHERE to apply to
    /// its rows (a join of `FROM a, b` takes its keys out of the WHERE).
    fn plan_from(&self, select: &ast::Select) -> Result<(Plan, Qualifiers, Option<ast::Expr>)> {
        match &select.from[..] {
            // `SELECT 1`, `SELECT now()`: over one row of no columns (clients' health checks).
            [] => {
                let one_row = TableDef {
                    name: NO_FROM.to_string(),
                    columns: Vec::new(),
                    watermark: None,
                    primary_key: Vec::new(),
                    options: BTreeMap::new(),
                    partition_keys: Vec::new(),
                    rows: Some(std::sync::Arc::new(vec![Row(Vec::new())])),
                    changes: None,
                    shared: None,
                };
                let plan = self.scan(&one_row)?;
                Ok((plan, Qualifiers::new(), select.selection.clone()))
            }
            [from] => {
                let (mut plan, name) = self.plan_relation(&from.relation)?;
                let mut qualifiers = match name {
                    Some(name) => named(Some(name), &plan),
                    None => unnamed_derived_qualifiers(&from.relation),
                };
                // The joined relations (a temporal table is looked up, not planned).
                let mut rights = Vec::new();
                for join in &from.joins {
                    let (kind, condition) = join_kind(join)?;
                    let right = match self.temporal_table(&join.relation)? {
                        Some(table) => Err(table),
                        None => Ok(self.plan_relation(&join.relation)?),
                    };
                    rights.push((kind, condition, right));
                }
                let mut selection = select.selection.clone();
                if !rights.is_empty()
                    && rights
                        .iter()
                        .all(|(kind, ..)| *kind == riffle::join::JoinType::Inner)
                    && let Some(condition) = &select.selection
                {
                    // Inner joins: a conjunct of the WHERE over one relation's columns filters
                    // that relation before the joins (fewer rows kept, fewer joined).
                    let mut relations = vec![(&plan, qualifiers.clone())];
                    for (_, _, right) in &rights {
                        if let Ok((right, name)) = right {
                            relations.push((right, named(name.clone(), right)));
                        }
                    }
                    let (filters, kept) = self.push_down(condition, &relations);
                    selection = kept;
                    let mut filters = filters.into_iter();
                    if let Some(filter) = filters.next().flatten() {
                        plan = self.filter(plan, &qualifiers, Some(&filter))?;
                    }
                    let mut filtered = Vec::with_capacity(rights.len());
                    for (kind, condition, right) in rights {
                        let right = match right {
                            Ok((right, name)) => {
                                let names = named(name.clone(), &right);
                                let filter = filters.next().flatten();
                                Ok((self.filter(right, &names, filter.as_ref())?, name))
                            }
                            lookup => lookup,
                        };
                        filtered.push((kind, condition, right));
                    }
                    rights = filtered;
                }
                let mut residual = Vec::new();
                for (kind, condition, right) in rights {
                    let (right, name) = match right {
                        Err((table, alias)) => {
                            let (joined, names, rest) =
                                self.lookup_join(plan, qualifiers, table, alias, kind, condition)?;
                            (plan, qualifiers) = (joined, names);
                            residual.extend(rest);
                            continue;
                        }
                        Ok(planned) => planned,
                    };
                    let (joined, names, rest) =
                        self.join(plan, qualifiers, right, name, kind, condition)?;
                    if !rest.is_empty() && kind != riffle::join::JoinType::Inner {
                        return Err(SqlError::plan(format!(
                            "the ON of an outer join takes equalities of both sides' columns (`{}` is not one); filter in WHERE or a derived table",
                            rest[0]
                        )));
                    }
                    (plan, qualifiers) = (joined, names);
                    residual.extend(rest);
                }
                residual.extend(selection);
                Ok((plan, qualifiers, and_all(residual)))
            }
            [a, b] if a.joins.is_empty() && b.joins.is_empty() => {
                let Some(condition) = &select.selection else {
                    return Err(SqlError::plan(
                        "FROM a, b without a WHERE that equates their columns is a cross join, which is not supported",
                    ));
                };
                let (left, left_name) = self.plan_relation(&a.relation)?;
                let (right, right_name) = self.plan_relation(&b.relation)?;
                let qualifiers = named(left_name, &left);
                let right_names = named(right_name.clone(), &right);
                let (filters, kept) = self.push_down(
                    condition,
                    &[(&left, qualifiers.clone()), (&right, right_names.clone())],
                );
                // (With nothing left to join on, the join says so.)
                let condition = kept.unwrap_or_else(|| condition.clone());
                let left = self.filter(left, &qualifiers, filters[0].as_ref())?;
                let right = self.filter(right, &right_names, filters[1].as_ref())?;
                let (plan, qualifiers, rest) = self.join(
                    left,
                    qualifiers,
                    right,
                    right_name,
                    riffle::join::JoinType::Inner,
                    &condition,
                )?;
                Ok((plan, qualifiers, and_all(rest)))
            }
            _ => Err(SqlError::plan(
                "a FROM of more than two tables is not supported yet (join two, in a view or a derived table)",
            )),
        }
    }

    /// The filter of each of an inner join's `relations` (a plan and the names of its columns):
    /// the conjuncts of `condition` that read its columns and no other relation's, as Flink's
    /// planner pushes a filter below a join; and what is left of `condition` (`None`: nothing).
    /// A conjunct of a function whose value may change between calls (`NOW()`, a function
    /// registered from Rust) stays where it was written.
    fn push_down(
        &self,
        condition: &ast::Expr,
        relations: &[(&Plan, Qualifiers)],
    ) -> (Vec<Option<ast::Expr>>, Option<ast::Expr>) {
        let mut conjuncts = Vec::new();
        split_and(condition, &mut conjuncts);
        let mut pushed: Vec<Vec<ast::Expr>> = vec![Vec::new(); relations.len()];
        let mut kept = Vec::new();
        for conjunct in conjuncts {
            let fits: Vec<usize> = (0..relations.len())
                .filter(|&i| {
                    let (plan, names) = &relations[i];
                    compile(conjunct, &self.scope(plan.schema(), names)).is_ok()
                })
                .collect();
            match fits[..] {
                [only] if self.is_deterministic(conjunct) => pushed[only].push(conjunct.clone()),
                _ => kept.push(conjunct.clone()),
            }
        }
        (pushed.into_iter().map(and_all).collect(), and_all(kept))
    }

    /// Whether `expr` calls no function whose value may change between calls.
    fn is_deterministic(&self, expr: &ast::Expr) -> bool {
        deterministic(&self.functions, expr)
    }

    /// The table of `t FOR SYSTEM_TIME AS OF time` (the parser's rewrite names it
    /// `` `t FOR SYSTEM_TIME AS OF time` ``) and its qualifier, if `relation` is one.
    fn temporal_table(&self, relation: &ast::TableFactor) -> Result<Option<(TableDef, String)>> {
        let ast::TableFactor::Table { name, alias, .. } = relation else {
            return Ok(None);
        };
        let Some(ast::ObjectNamePart::Identifier(ident)) = name.0.last() else {
            return Ok(None);
        };
        let Some((table, _time)) = ident.value.split_once(crate::parse::SYSTEM_TIME_MARK) else {
            return Ok(None);
        };
        let Some(def) = self.tables.get(table) else {
            return Err(SqlError::plan(format!(
                "`{table}` FOR SYSTEM_TIME AS OF: a lookup join reads a table (CREATE TABLE), and there is no table `{table}` (known: {})",
                self.known_names()
            )));
        };
        let qualifier = alias
            .as_ref()
            .map_or(table.to_string(), |a| a.name.value.clone());
        Ok(Some((def.clone(), qualifier)))
    }

    /// The lookup join of `left` with the bounded table `table` (named `name`) on `condition`
    /// (equalities of a left and a table expression; the rest filters the joined rows of an
    /// inner join): a [`Plan::LookupJoin`], its qualifiers, and the rest of the condition.
    fn lookup_join(
        &self,
        left: Plan,
        qualifiers: Qualifiers,
        table: TableDef,
        name: String,
        kind: riffle::join::JoinType,
        condition: &ast::Expr,
    ) -> Result<(Plan, Qualifiers, Vec<ast::Expr>)> {
        use riffle::join::JoinType;
        if !matches!(kind, JoinType::Inner | JoinType::Left) {
            return Err(SqlError::plan(format!(
                "a lookup join (`{}` FOR SYSTEM_TIME AS OF ..) is INNER or LEFT, as in Flink (got {kind:?})",
                table.name
            )));
        }
        let connector = table.options.get("connector").map_or("", String::as_str);
        if connector != "filesystem" {
            return Err(SqlError::plan(format!(
                "a lookup join reads a bounded `filesystem` table whole at start; `{}` is '{connector}'",
                table.name
            )));
        }
        let right = self.scan(&table)?;
        let (joined, names, rest) =
            self.join(left, qualifiers, right, Some(name), kind, condition)?;
        let Plan::Join {
            left,
            left_keys,
            right_keys,
            texts,
            schema,
            ..
        } = joined
        else {
            unreachable!("join plans a Join");
        };
        let plan = Plan::LookupJoin {
            input: left,
            table: Box::new(table),
            kind,
            left_keys,
            right_keys,
            texts,
            schema,
        };
        Ok((plan, names, rest))
    }

    /// The regular join of `left` (its columns named by `qualifiers`) and `right` (named `name`)
    /// on `condition`: its equalities of a left and a right expression are the keys; the plan,
    /// its qualifiers, and the conjuncts of `condition` that are not keys.
    fn join(
        &self,
        left: Plan,
        qualifiers: Qualifiers,
        right: Plan,
        name: Option<String>,
        kind: riffle::join::JoinType,
        condition: &ast::Expr,
    ) -> Result<(Plan, Qualifiers, Vec<ast::Expr>)> {
        use riffle::join::JoinType;
        let left_len = left.schema().len();
        let right_names = named(name, &right);
        let mut all = qualifiers.clone();
        all.extend(
            right_names
                .iter()
                .map(|(n, r)| (n.clone(), r.start + left_len..r.end + left_len)),
        );
        // The side an outer join pads may be NULL.
        let nullable = |fields: &[Field], padded: bool| -> Vec<Field> {
            fields
                .iter()
                .map(|f| Field {
                    nullable: f.nullable || padded,
                    ..f.clone()
                })
                .collect()
        };
        let mut fields = nullable(
            &left.schema().fields,
            matches!(kind, JoinType::Right | JoinType::Full),
        );
        fields.extend(nullable(
            &right.schema().fields,
            matches!(kind, JoinType::Left | JoinType::Full),
        ));
        let schema = Schema::new(fields);
        let joined = self.scope(&schema, &all);
        let left_scope = self.scope(left.schema(), &qualifiers);
        let right_scope = self.scope(right.schema(), &right_names);
        let mut conjuncts = Vec::new();
        split_and(condition, &mut conjuncts);
        let (mut left_keys, mut right_keys, mut texts, mut rest) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for conjunct in conjuncts {
            // Every name resolves over both sides (an unqualified column of both is ambiguous).
            compile(conjunct, &joined)?;
            let pair = match conjunct {
                ast::Expr::BinaryOp {
                    left: a,
                    op: ast::BinaryOperator::Eq,
                    right: b,
                } => match (compile(a, &left_scope), compile(b, &right_scope)) {
                    (Ok(x), Ok(y)) => Some((x, y)),
                    _ => match (compile(b, &left_scope), compile(a, &right_scope)) {
                        (Ok(x), Ok(y)) => Some((x, y)),
                        _ => None,
                    },
                },
                _ => None,
            };
            match pair {
                Some((x, y)) => {
                    let y = if x.ty == y.ty || (x.ty.is_integer() && y.ty.is_integer()) {
                        y
                    } else {
                        let from = y.ty.clone();
                        y.cast(&x.ty).map_err(|e| {
                            SqlError::plan(format!(
                                "join keys `{conjunct}`: {} and {from} do not compare ({})",
                                x.ty, e.message
                            ))
                        })?
                    };
                    left_keys.push(x);
                    right_keys.push(y);
                    texts.push(conjunct.to_string());
                }
                None => rest.push(conjunct.clone()),
            }
        }
        if left_keys.is_empty() {
            return Err(SqlError::plan(format!(
                "a join needs an equality of a column of each side (`{condition}` has none): a cross join or a join on a range alone is not supported yet"
            )));
        }
        let plan = Plan::Join {
            left: Box::new(left),
            right: Box::new(right),
            kind,
            left_keys,
            right_keys,
            texts,
            schema,
            ttl: self.state_ttl()?,
        };
        Ok((plan, all, rest))
    }

    /// The scope of `schema`'s columns, qualified by `qualifiers`.
    fn scope<'a>(&'a self, schema: &'a Schema, qualifiers: &Qualifiers) -> Scope<'a> {
        Scope {
            schema,
            qualifiers: qualifiers.clone(),
            functions: &self.functions,
        }
    }

    /// `plan`'s rows for which `condition` (a WHERE) is true; `plan` itself when there is none.
    fn filter(
        &self,
        plan: Plan,
        qualifiers: &Qualifiers,
        condition: Option<&ast::Expr>,
    ) -> Result<Plan> {
        let mut plan = plan;
        if let Some(condition) = condition {
            let schema = plan.schema().clone();
            let scope = self.scope(&schema, qualifiers);
            let predicate = compile(condition, &scope)?;
            if !matches!(predicate.ty, DataType::Boolean | DataType::Null) {
                return Err(SqlError::plan(format!(
                    "WHERE needs a BOOLEAN condition, got {} ({condition})",
                    predicate.ty
                )));
            }
            plan = Plan::Filter {
                input: Box::new(plan),
                predicate,
                text: condition.to_string(),
            };
        }
        Ok(plan)
    }

    /// `SELECT .. FROM (SELECT .., ROW_NUMBER() OVER (PARTITION BY .. ORDER BY ..) AS rn FROM t)
    /// WHERE rn <= n [AND ..]`, Flink's Top-N and deduplication: the Top-N plan, the derived
    /// table's name, and what is left of the outer WHERE. `None` when `select` reads no such
    /// derived table.
    fn plan_top_n(&self, select: &ast::Select) -> Result<Option<TopNQuery>> {
        let [from] = &select.from[..] else {
            return Ok(None);
        };
        let ast::TableFactor::Derived {
            subquery, alias, ..
        } = &from.relation
        else {
            return Ok(None);
        };
        let ast::SetExpr::Select(inner) = subquery.body.as_ref() else {
            return Ok(None);
        };
        if row_number_of(inner)?.is_none() {
            return Ok(None);
        }
        if !from.joins.is_empty() {
            return Err(SqlError::plan("JOIN is not supported yet"));
        }
        self.top_n_of(
            inner,
            alias.as_ref().map(|a| a.name.value.clone()),
            select.selection.as_ref(),
        )
    }

    /// `SELECT *, ROW_NUMBER() OVER (..) AS rn FROM t WHERE rn <= n` (Nexmark q6's form: the
    /// bound in the WHERE of the SELECT that numbers the rows, which Flink does not read): the
    /// Top-N of `t` (the WHERE's other conjuncts filter `t` first), as the nested form plans it.
    fn plan_top_n_in_place(&self, select: &ast::Select) -> Result<Option<Plan>> {
        let Some((_, rank_name, _)) = row_number_of(select)? else {
            return Ok(None);
        };
        let Some(selection) = &select.selection else {
            return Ok(None);
        };
        let mut conjuncts = Vec::new();
        split_and(selection, &mut conjuncts);
        let (bounds, others): (Vec<&ast::Expr>, Vec<&ast::Expr>) = conjuncts
            .into_iter()
            .partition(|c| rank_bound(c, &rank_name).is_some());
        if bounds.is_empty() {
            return Ok(None);
        }
        let mut inner = select.clone();
        inner.selection = and_all(others.into_iter().cloned().collect());
        let bound = and_all(bounds.into_iter().cloned().collect());
        let Some((plan, qualifiers, rest)) = self.top_n_of(&inner, None, bound.as_ref())? else {
            return Ok(None);
        };
        Ok(Some(self.filter(plan, &qualifiers, rest.as_ref())?))
    }

    /// The Top-N of the SELECT `inner` (which numbers its rows with `ROW_NUMBER() OVER (..)`),
    /// bounded by `outer_where` (`rn <= n`, ...), named `alias`: the plan, its qualifiers, and
    /// the rest of `outer_where`.
    fn top_n_of(
        &self,
        inner: &ast::Select,
        alias: Option<String>,
        outer_where: Option<&ast::Expr>,
    ) -> Result<Option<TopNQuery>> {
        let Some((rank_at, rank_name, spec)) = row_number_of(inner)? else {
            return Ok(None);
        };
        if inner.distinct.is_some()
            || !matches!(&inner.group_by, ast::GroupByExpr::Expressions(e, _) if e.is_empty())
        {
            return Err(SqlError::plan(
                "ROW_NUMBER() OVER (..) of a grouped or DISTINCT query is not supported yet",
            ));
        }
        // The outer WHERE bounds the rank: `rn <= n`, `rn < n` or `rn = 1`.
        let mut conjuncts = Vec::new();
        if let Some(selection) = outer_where {
            split_and(selection, &mut conjuncts);
        }
        let mut limit = None;
        let mut rest = Vec::new();
        for conjunct in conjuncts {
            match rank_bound(conjunct, &rank_name) {
                Some(n) if limit.is_none() => limit = Some(n),
                _ => rest.push(conjunct.clone()),
            }
        }
        let Some(limit) = limit.filter(|n| *n >= 1) else {
            return Err(SqlError::plan(format!(
                "ROW_NUMBER() OVER (..) AS {rank_name} is supported as a Top-N or a deduplication: the outer query bounds it, WHERE {rank_name} <= N (or {rank_name} = 1)"
            )));
        };
        let rest = and_all(rest);
        let (input, qualifiers, condition) = self.plan_from(inner)?;
        let input = self.filter(input, &qualifiers, condition.as_ref())?;
        if input.changelog_mode() != ChangelogMode::Append {
            return Err(SqlError::plan(format!(
                "ROW_NUMBER() OVER (..) over an updating input (its rows are {}) is not supported yet",
                input.changelog_mode()
            )));
        }
        let schema = input.schema().clone();
        let scope = self.scope(&schema, &qualifiers);
        let mut texts = Vec::new();
        let mut partition = Vec::new();
        for expr in &spec.partition_by {
            partition.push(compile(expr, &scope)?);
            texts.push(expr.to_string());
        }
        let mut order = Vec::new();
        for item in &spec.order_by {
            order.push(order_key(item, &scope)?);
            texts.push(item.to_string());
        }
        if order.is_empty() {
            return Err(SqlError::plan(
                "ROW_NUMBER() OVER (..) needs an ORDER BY (which rows come first)",
            ));
        }
        // The derived table's other columns, over the input's; the rank goes in at its place.
        let items: Vec<ast::SelectItem> = inner
            .projection
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != rank_at)
            .map(|(_, item)| item.clone())
            .collect();
        let Plan::Project {
            exprs: project,
            schema: projected,
            ..
        } = self.project(input.clone(), &qualifiers, &items)?
        else {
            unreachable!("a projection plans to a Project");
        };
        // The rank's place among the output columns: after the columns of the items before it
        // (`SELECT A.*, ROW_NUMBER() ..`: A's columns).
        let rank_column = self
            .project(input.clone(), &qualifiers, &inner.projection[..rank_at])?
            .schema()
            .len();
        let mut fields = projected.fields.clone();
        fields.insert(
            rank_column,
            Field {
                name: rank_name.clone(),
                ty: DataType::BigInt,
                nullable: false,
            },
        );
        let top_n = Plan::TopN {
            input: Box::new(input),
            partition,
            order,
            limit,
            project,
            rank_at: rank_column,
            texts,
            schema: Schema::new(fields),
            ttl: self.state_ttl()?,
        };
        let qualifiers = named(alias, &top_n);
        Ok(Some((top_n, qualifiers, rest)))
    }

    /// `SELECT .., AGG(x) OVER (PARTITION BY .. ORDER BY .. ROWS BETWEEN n PRECEDING AND
    /// CURRENT ROW) FROM ..`: an [`Plan::OverAggregate`] (every OVER of the query the same).
    fn plan_over(&self, select: &ast::Select) -> Result<Plan> {
        let (input, qualifiers, condition) = self.plan_from(select)?;
        let input = self.filter(input, &qualifiers, condition.as_ref())?;
        let schema = input.schema().clone();
        let scope = self.scope(&schema, &qualifiers);
        // The window: the first OVER's, which every other must repeat.
        let spec = select
            .projection
            .iter()
            .find_map(over_call)
            .map(|(_, spec)| spec.clone())
            .expect("plan_over is called for a query with an OVER");
        let ast::WindowType::WindowSpec(spec) = spec else {
            return Err(SqlError::plan(
                "a named window (OVER w) is not supported yet: write OVER (PARTITION BY .. ORDER BY ..)",
            ));
        };
        let frame_error = || {
            SqlError::plan(format!(
                "OVER ({spec}): the frame Riffle supports is ROWS BETWEEN <n> PRECEDING AND CURRENT ROW"
            ))
        };
        let frame = spec.window_frame.as_ref().ok_or_else(frame_error)?;
        let preceding = match (&frame.units, &frame.start_bound, &frame.end_bound) {
            (
                ast::WindowFrameUnits::Rows,
                ast::WindowFrameBound::Preceding(Some(n)),
                None | Some(ast::WindowFrameBound::CurrentRow),
            ) => match compile(n, &scope)?.constant_value() {
                Some(crate::types::Value::Int(n)) if n >= 0 => n as usize,
                _ => return Err(frame_error()),
            },
            _ => return Err(frame_error()),
        };
        let mut pre = Vec::new();
        let mut filters = Vec::new();
        let mut texts = Vec::new();
        for expr in &spec.partition_by {
            pre.push(compile(expr, &scope)?);
            texts.push(expr.to_string());
        }
        let partitions = pre.len();
        let mut descending = Vec::new();
        for item in &spec.order_by {
            let (key, desc) = order_key(item, &scope)?;
            descending.push(desc);
            pre.push(key);
            texts.push(item.to_string());
        }
        if descending.is_empty() {
            return Err(SqlError::plan(format!(
                "OVER ({spec}) needs an ORDER BY (which rows come before)"
            )));
        }
        let mut aggs = Vec::new();
        let mut outputs = Vec::new();
        let mut fields = Vec::new();
        for (position, item) in select.projection.iter().enumerate() {
            let (expr, alias) = match item {
                ast::SelectItem::UnnamedExpr(e) => (e, None),
                ast::SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.value.clone())),
                _ => {
                    return Err(SqlError::plan(
                        "SELECT * of an OVER aggregation: name the columns",
                    ));
                }
            };
            if let Some((function, over)) = over_call(item) {
                if over.to_string() != ast::WindowType::WindowSpec(spec.clone()).to_string() {
                    return Err(SqlError::plan(format!(
                        "every OVER of a query is the same window (got `{over}` and `{spec}`)"
                    )));
                }
                let mut plain = function.clone();
                plain.over = None;
                let mut found = Vec::new();
                rewrite_grouped(&ast::Expr::Function(plain), &[], &mut found)?;
                let [aggregate] = &found[..] else {
                    return Err(SqlError::plan(format!(
                        "{function}: an aggregate (COUNT, SUM, MIN, MAX, AVG) OVER a window"
                    )));
                };
                let spec = aggregate_spec(aggregate, &scope, &mut pre, &mut filters)?;
                texts.push(function.to_string());
                fields.push(Field {
                    name: alias.unwrap_or_else(|| format!("EXPR${position}")),
                    ty: spec.ty.clone(),
                    nullable: true,
                });
                outputs.push(Err(aggs.len()));
                aggs.push(spec);
            } else {
                if has_aggregate(expr) {
                    return Err(SqlError::plan(format!(
                        "`{expr}`: an aggregate in a query with OVER needs its own OVER (..)"
                    )));
                }
                let typed = compile(expr, &scope)?;
                fields.push(Field {
                    name: alias.unwrap_or_else(|| {
                        typed
                            .name
                            .clone()
                            .unwrap_or_else(|| format!("EXPR${position}"))
                    }),
                    ty: typed.ty.clone(),
                    nullable: typed.nullable,
                });
                pre.push(typed);
                outputs.push(Ok(pre.len() - 1));
            }
        }
        Ok(Plan::OverAggregate {
            input: Box::new(input),
            pre,
            partitions,
            descending,
            aggs,
            preceding,
            outputs,
            texts,
            schema: Schema::new(fields),
        })
    }

    /// `SELECT DISTINCT a, b FROM ..`: a group aggregate by every column of the SELECT list,
    /// without aggregates (each distinct row sent once).
    fn plan_distinct(&self, select: &ast::Select) -> Result<Plan> {
        let grouped =
            !matches!(&select.group_by, ast::GroupByExpr::Expressions(e, _) if e.is_empty());
        if grouped || select.having.is_some() {
            return Err(SqlError::plan(
                "SELECT DISTINCT of a grouped query is not supported yet (its groups are distinct already)",
            ));
        }
        let mut keys = Vec::new();
        for item in &select.projection {
            match item {
                ast::SelectItem::UnnamedExpr(e)
                | ast::SelectItem::ExprWithAlias { expr: e, .. } => {
                    if has_aggregate(e) {
                        return Err(SqlError::plan(
                            "SELECT DISTINCT with an aggregate is not supported yet",
                        ));
                    }
                    keys.push(e.clone());
                }
                _ => {
                    return Err(SqlError::plan(
                        "SELECT DISTINCT * is not supported yet: name the columns",
                    ));
                }
            }
        }
        let mut select = select.clone();
        select.distinct = None;
        self.plan_grouped(&select, &keys)
    }

    /// `SELECT .. FROM TABLE(TUMBLE(..)) GROUP BY window_start, window_end, ..` (a window
    /// aggregation), or `SELECT .. FROM t GROUP BY ..` (an updating aggregate).
    fn plan_grouped(&self, select: &ast::Select, group_by: &[ast::Expr]) -> Result<Plan> {
        // Whether the windows are of processing time (a `PROCTIME()` column's).
        let mut processing_time = false;
        // A SESSION window table function's PARTITION BY columns (none: one session stream).
        let mut session_partition: Option<Vec<String>> = None;
        let (mut input, qualifiers, window, selection) = match &select.from[..] {
            [from] if matches!(from.relation, ast::TableFactor::TableFunction { .. }) => {
                if !from.joins.is_empty() {
                    return Err(SqlError::plan(
                        "a join of a window table function is not supported yet",
                    ));
                }
                let ast::TableFactor::TableFunction { expr, .. } = &from.relation else {
                    unreachable!("matched above");
                };
                let function = self.window_function(expr)?;
                processing_time = function.processing;
                session_partition = match function.window {
                    WindowKind::Session { .. } => Some(function.partition.unwrap_or_default()),
                    _ => None,
                };
                let qualifiers = named(function.qualifier, &function.input);
                (
                    function.input,
                    qualifiers,
                    Some(function.window),
                    select.selection.clone(),
                )
            }
            _ => {
                let (input, qualifiers, condition) = self.plan_from(select)?;
                // A group window in GROUP BY (`TUMBLE(time, size)`, `HOP(..)`, `SESSION(..)`,
                // Flink's legacy form) over the input's time attribute.
                let window = self.group_window(&input, &qualifiers, group_by)?;
                (input, qualifiers, window, condition)
            }
        };
        if window.is_some() && input.changelog_mode() != ChangelogMode::Append {
            return Err(SqlError::plan(format!(
                "a window aggregation over an updating input (its rows are {}) is not supported yet: a window's result is final when the watermark passes it, and a later retraction could not change it; aggregate the updating rows with a GROUP BY without a window",
                input.changelog_mode()
            )));
        }
        let schema = input.schema().clone();
        let scope = self.scope(&schema, &qualifiers);
        if let Some(condition) = &selection {
            let predicate = compile(condition, &scope).map_err(|e| {
                SqlError::plan(format!(
                    "WHERE {condition}: {} (a WHERE of a window aggregation reads the input's columns)",
                    e.message
                ))
            })?;
            input = Plan::Filter {
                input: Box::new(input),
                predicate,
                text: condition.to_string(),
            };
        }
        // The group keys: window_start and window_end of a window, and the input's expressions.
        let mut has_start = false;
        let mut has_end = false;
        let mut keys: Vec<(String, Typed)> = Vec::new();
        for expr in group_by {
            match expr {
                ast::Expr::Identifier(i) if window.is_some() && i.value == "window_start" => {
                    has_start = true
                }
                ast::Expr::Identifier(i) if window.is_some() && i.value == "window_end" => {
                    has_end = true
                }
                // The group window of the legacy form stands for both.
                ast::Expr::Function(f) if window.is_some() && group_window_name(f).is_some() => {
                    (has_start, has_end) = (true, true)
                }
                other => keys.push((other.to_string(), compile(other, &scope)?)),
            }
        }
        // Sessions are per partition key: the grouping keys are exactly those columns.
        if let Some(partition) = &session_partition {
            let mut keys_sorted: Vec<&str> = keys.iter().map(|(t, _)| t.as_str()).collect();
            let mut partition_sorted: Vec<&str> = partition.iter().map(String::as_str).collect();
            keys_sorted.sort_unstable();
            partition_sorted.sort_unstable();
            if keys_sorted != partition_sorted {
                return Err(SqlError::plan(format!(
                    "a SESSION window aggregation groups by its PARTITION BY columns ({}) and window_start, window_end: sessions are found per partition key (GROUP BY {} is not supported)",
                    if partition.is_empty() {
                        "none".to_string()
                    } else {
                        partition.join(", ")
                    },
                    keys.iter()
                        .map(|(t, _)| t.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
        if window.is_some() && !(has_start && has_end) {
            return Err(SqlError::plan(
                "a window aggregation groups by window_start and window_end (GROUP BY window_start, window_end, ...)",
            ));
        }
        let key_names: Vec<String> = keys.iter().map(|(t, _)| t.clone()).collect();
        let mut found: Vec<FoundAggregate> = Vec::new();
        let mut outputs = Vec::new();
        for item in &select.projection {
            let (expr, alias) = match item {
                ast::SelectItem::UnnamedExpr(e) => (e, None),
                ast::SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.value.clone())),
                _ => {
                    return Err(SqlError::plan(
                        "SELECT * of a window aggregation: name the keys, window columns and aggregates",
                    ));
                }
            };
            let rewritten = rewrite_grouped(expr, &key_names, &mut found)?;
            outputs.push((rewritten, alias, expr.to_string()));
        }
        let having = select
            .having
            .as_ref()
            .map(|h| rewrite_grouped(h, &key_names, &mut found).map(|r| (r, h.to_string())))
            .transpose()?;
        // Pre-computed row: keys, then each aggregate's argument and filter.
        let mut pre: Vec<Typed> = keys.iter().map(|(_, t)| t.clone()).collect();
        let mut texts: Vec<String> = key_names.clone();
        let mut aggs = Vec::new();
        let mut filters = Vec::new();
        for aggregate in &found {
            texts.push(aggregate.text.clone());
            aggs.push(aggregate_spec(aggregate, &scope, &mut pre, &mut filters)?);
        }
        // The aggregated row: keys, window bounds and time, aggregates.
        let mut fields: Vec<Field> = keys
            .iter()
            .enumerate()
            .map(|(i, (_, t))| Field {
                name: format!("$key{i}"),
                ty: t.ty.clone(),
                nullable: t.nullable,
            })
            .collect();
        let window_columns: &[&str] = match window {
            Some(_) => &["window_start", "window_end", "window_time"],
            None => &[],
        };
        for name in window_columns {
            fields.push(Field {
                name: name.to_string(),
                ty: DataType::Timestamp { precision: 3 },
                nullable: false,
            });
        }
        for (i, spec) in aggs.iter().enumerate() {
            fields.push(Field {
                name: format!("$agg{i}"),
                ty: spec.ty.clone(),
                nullable: !matches!(
                    spec.kind,
                    AggKind::CountStar | AggKind::Count | AggKind::CountDistinct
                ),
            });
        }
        let aggregated = Schema::new(fields);
        let post_scope = Scope::new(&aggregated, None, &self.functions);
        let mut post = Vec::new();
        let mut out_fields = Vec::new();
        for (position, (expr, alias, text)) in outputs.into_iter().enumerate() {
            let typed = compile(&expr, &post_scope)?;
            let name = alias.unwrap_or_else(|| match &typed.name {
                Some(name) if !name.starts_with('$') => name.clone(),
                // A key by its own name (`auction`, `B.auction` -> `auction`).
                _ => key_output_name(&text).unwrap_or_else(|| format!("EXPR${position}")),
            });
            out_fields.push(Field {
                name,
                ty: typed.ty.clone(),
                nullable: typed.nullable,
            });
            post.push(typed);
        }
        let having = match having {
            Some((condition, text)) => {
                let predicate = compile(&condition, &post_scope)?;
                if !matches!(predicate.ty, DataType::Boolean | DataType::Null) {
                    return Err(SqlError::plan(format!(
                        "HAVING needs a BOOLEAN condition, got {} ({text})",
                        predicate.ty
                    )));
                }
                texts.push(format!("HAVING {text}"));
                Some(predicate)
            }
            None => None,
        };
        let (input, keys, schema) = (Box::new(input), keys.len(), Schema::new(out_fields));
        Ok(match window {
            Some(window) => Plan::WindowAggregate {
                late: self.late_rows_table(&input, &scope)?,
                input,
                window,
                processing_time,
                keys,
                pre,
                aggs,
                post,
                having,
                texts,
                schema,
            },
            None => Plan::GroupAggregate {
                input,
                having,
                keys,
                pre,
                aggs,
                post,
                texts,
                schema,
                ttl: self.state_ttl()?,
            },
        })
    }

    /// Riffle's extension to Flink's SQL, `SET 'riffle.window.late-rows-table' = 't'`: the rows
    /// of a window aggregation's input too late for their windows (behind the watermark) go to
    /// table `t` instead of being dropped (the DataStream API's late side output). Each of
    /// `t`'s columns is the input's column of its name, cast to its type.
    fn late_rows_table(
        &self,
        input: &Plan,
        scope: &Scope<'_>,
    ) -> Result<Option<(Box<TableDef>, Vec<Typed>)>> {
        const KEY: &str = "riffle.window.late-rows-table";
        let Some(name) = self.options.get(KEY) else {
            return Ok(None);
        };
        let Some(table) = self.tables.get(name) else {
            return Err(SqlError::plan(format!(
                "SET '{KEY}' = '{name}': no table `{name}` (known: {})",
                self.known_names()
            )));
        };
        let mut columns = Vec::new();
        for field in crate::lower::sink_schema(table).fields {
            let column = compile(&ast::Expr::Identifier(ast::Ident::new(&field.name)), scope)
                .map_err(|e| {
                    SqlError::plan(format!(
                        "SET '{KEY}' = '{name}': its column `{}` is not a column of the window's input ({}; the input has {})",
                        field.name,
                        e.message,
                        input.schema()
                    ))
                })?;
            columns.push(column.cast(&field.ty)?);
        }
        Ok(Some((Box::new(table.clone()), columns)))
    }

    /// Checks the options the planner reads (`SET` calls it, so that a bad value fails at the
    /// statement that gave it).
    pub fn check_options(&self) -> Result<()> {
        self.state_ttl().map(|_| ())
    }

    /// `SET 'table.exec.state.ttl' = '..'`: how long the state of a key lives after its last
    /// update (`None`, the default, or 0: for ever), as Flink's option. A number alone is
    /// milliseconds; units `ms`, `s`, `min`, `h` and `d` (with or without a space, long forms
    /// too: `1 hour`, `30 minutes`).
    fn state_ttl(&self) -> Result<Option<std::time::Duration>> {
        const KEY: &str = "table.exec.state.ttl";
        let Some(text) = self.options.get(KEY) else {
            return Ok(None);
        };
        let ms = parse_duration_ms(text).ok_or_else(|| {
            SqlError::plan(format!(
                "SET '{KEY}' = '{text}': not a duration (say '1 h', '30 min', '3600 s' or milliseconds)"
            ))
        })?;
        Ok((ms > 0).then(|| std::time::Duration::from_millis(ms)))
    }

    /// The group window among `group_by` (Flink's legacy form: `TUMBLE(time, size)`, `HOP(time,
    /// slide, size)`, `SESSION(time, gap)`), over `input`'s time attribute; `None` without one.
    fn group_window(
        &self,
        input: &Plan,
        qualifiers: &Qualifiers,
        group_by: &[ast::Expr],
    ) -> Result<Option<WindowKind>> {
        let mut windows = group_by.iter().filter_map(|e| match e {
            ast::Expr::Function(f) => group_window_name(f).map(|name| (name, f)),
            _ => None,
        });
        let Some((name, function)) = windows.next() else {
            return Ok(None);
        };
        if windows.next().is_some() {
            return Err(SqlError::plan("GROUP BY takes one group window"));
        }
        let args = function_args(function)?;
        let schema = input.schema().clone();
        let scope = self.scope(&schema, qualifiers);
        let Some(time) = input.time() else {
            return Err(SqlError::plan(format!(
                "{name}(..) in GROUP BY: the input has no event time (a WATERMARK; processing-time windows are not supported yet)"
            )));
        };
        match args.first().map(|a| compile(a, &scope)).transpose()? {
            Some(t) if t.column == Some(time.column) => {}
            _ => {
                return Err(SqlError::plan(format!(
                    "{name}(time, ..) in GROUP BY: the first argument is the input's time attribute `{}`",
                    time.name
                )));
            }
        }
        let interval = |i: usize, what: &str| constant_interval(args.get(i).copied(), &name, what);
        Ok(Some(match (name.as_str(), args.len()) {
            ("TUMBLE", 2) => WindowKind::Tumble {
                size: interval(1, "size")?,
            },
            ("HOP", 3) => {
                let (slide, size) = (interval(1, "slide")?, interval(2, "size")?);
                if size % slide != 0 {
                    return Err(SqlError::plan(format!(
                        "HOP: the size ({size} ms) must be a multiple of the slide ({slide} ms)"
                    )));
                }
                WindowKind::Hop { slide, size }
            }
            ("SESSION", 2) => WindowKind::Session {
                gap: interval(1, "gap")?,
            },
            (name, n) => {
                return Err(SqlError::plan(format!(
                    "{name}(..) in GROUP BY takes {} arguments, got {n}",
                    match name {
                        "HOP" => 3,
                        _ => 2,
                    }
                )));
            }
        }))
    }

    /// `TUMBLE(t, DESCRIPTOR(time), size)` / `HOP(t, DESCRIPTOR(time), slide, size)`: the input
    /// plan, its qualifier, the windows.
    fn window_function(&self, expr: &ast::Expr) -> Result<WindowFunction> {
        let ast::Expr::Function(function) = expr else {
            return Err(SqlError::plan(format!(
                "FROM TABLE({expr}) is not a window table function"
            )));
        };
        let name = function.name.to_string().to_ascii_uppercase();
        let args: Vec<&ast::Expr> = match &function.args {
            ast::FunctionArguments::List(list) => list
                .args
                .iter()
                .map(|a| match a {
                    ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => Ok(e),
                    other => Err(SqlError::plan(format!(
                        "{name}: the argument `{other}` is not supported (pass them in order)"
                    ))),
                })
                .collect::<Result<_>>()?,
            _ => Vec::new(),
        };
        let table = match args.first() {
            Some(ast::Expr::Identifier(i)) => i.value.clone(),
            Some(ast::Expr::CompoundIdentifier(parts)) => parts
                .iter()
                .map(|p| p.value.clone())
                .collect::<Vec<_>>()
                .join("."),
            _ => {
                return Err(SqlError::plan(format!(
                    "{name}(TABLE t, DESCRIPTOR(time), ...): the first argument names a table or view"
                )));
            }
        };
        // `TABLE t PARTITION BY a, b` (parse's rewrite): a session window's keys.
        let (table, partition) = match table.split_once(crate::parse::PARTITION_MARK) {
            Some((table, columns)) => (
                table.to_string(),
                Some(columns.split(',').map(str::to_string).collect::<Vec<_>>()),
            ),
            None => (table, None),
        };
        if partition.is_some() && name != "SESSION" {
            return Err(SqlError::plan(format!(
                "{name}(TABLE {table} PARTITION BY ..): only SESSION windows take PARTITION BY"
            )));
        }
        let (input, qualifier) = (self.plan_name(&table)?, Some(table.clone()));
        let descriptor = match args.get(1) {
            Some(ast::Expr::Function(f))
                if f.name.to_string().eq_ignore_ascii_case("DESCRIPTOR") =>
            {
                match &f.args {
                    ast::FunctionArguments::List(list) => match list.args.first() {
                        Some(ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(
                            ast::Expr::Identifier(column),
                        ))) => column.value.clone(),
                        _ => String::new(),
                    },
                    _ => String::new(),
                }
            }
            _ => String::new(),
        };
        let processing = input.proc_time().is_some_and(|t| t.name == descriptor);
        let time = match (processing, input.time()) {
            (true, _) => input.proc_time().expect("checked"),
            (false, Some(time)) => time,
            // A table of changes the program gives (`riffle serve`'s materialized view).
            (false, None) if self.tables.get(&table).is_some_and(|t| t.changes.is_some()) => {
                return Err(SqlError::plan(format!(
                    "{name}: `{table}` has no event time: a window reads a materialized view whose query only appends rows and selects its input's time attribute as it is (no GROUP BY, no regular join; `{table}`'s rows {})",
                    match input.changelog_mode() {
                        ChangelogMode::Append =>
                            "are appended, but its query drops or computes the time attribute",
                        _ => "are updated",
                    }
                )));
            }
            (false, None) => {
                return Err(SqlError::plan(format!(
                    "{name}: `{table}` has no event time (declare WATERMARK FOR <column> AS ... in its CREATE TABLE) and `{descriptor}` is not its processing time (a PROCTIME() column)"
                )));
            }
        };
        if descriptor != time.name {
            return Err(SqlError::plan(format!(
                "{name}(.., DESCRIPTOR({descriptor}), ..): the windows follow `{table}`'s time attribute `{}`",
                time.name
            )));
        }
        let interval = |i: usize, what: &str| -> Result<i64> {
            let functions = Functions::default();
            let empty = Schema::default();
            let scope = Scope::new(&empty, None, &functions);
            match args
                .get(i)
                .map(|e| compile(e, &scope))
                .transpose()?
                .and_then(|t| t.constant_value())
            {
                Some(crate::types::Value::Interval(ms)) if ms > 0 => Ok(ms),
                _ => Err(SqlError::plan(format!(
                    "{name}: the {what} must be a positive constant INTERVAL"
                ))),
            }
        };
        let window = match (name.as_str(), args.len()) {
            ("TUMBLE", 3) => WindowKind::Tumble {
                size: interval(2, "size")?,
            },
            ("HOP", 4) => {
                let (slide, size) = (interval(2, "slide")?, interval(3, "size")?);
                if size % slide != 0 {
                    return Err(SqlError::plan(format!(
                        "HOP: the size ({size} ms) must be a multiple of the slide ({slide} ms)"
                    )));
                }
                WindowKind::Hop { slide, size }
            }
            ("CUMULATE", 4) => {
                let (step, size) = (interval(2, "step")?, interval(3, "size")?);
                if size % step != 0 {
                    return Err(SqlError::plan(format!(
                        "CUMULATE: the size ({size} ms) must be a multiple of the step ({step} ms)"
                    )));
                }
                WindowKind::Cumulate { step, size }
            }
            ("SESSION", 3) => WindowKind::Session {
                gap: interval(2, "gap")?,
            },
            ("TUMBLE" | "HOP" | "CUMULATE" | "SESSION", n) => {
                return Err(SqlError::plan(format!(
                    "{name} takes {} arguments, got {n}",
                    if matches!(name.as_str(), "HOP" | "CUMULATE") {
                        4
                    } else {
                        3
                    }
                )));
            }
            (other, _) => {
                return Err(SqlError::plan(format!(
                    "the window table function {other} is not supported yet (TUMBLE, HOP, CUMULATE and SESSION are)"
                )));
            }
        };
        Ok(WindowFunction {
            input,
            qualifier,
            window,
            processing,
            partition,
        })
    }

    fn project(
        &self,
        input: Plan,
        qualifiers: &Qualifiers,
        items: &[ast::SelectItem],
    ) -> Result<Plan> {
        let schema = input.schema().clone();
        let scope = self.scope(&schema, qualifiers);
        let mut exprs = Vec::new();
        let mut texts = Vec::new();
        let mut fields: Vec<Field> = Vec::new();
        let mut push = |typed: Typed, name: String, text: String| {
            fields.push(Field {
                name,
                ty: typed.ty.clone(),
                nullable: typed.nullable,
            });
            exprs.push(typed);
            texts.push(text);
        };
        for (position, item) in items.iter().enumerate() {
            match item {
                ast::SelectItem::UnnamedExpr(expr) => {
                    let typed = compile(expr, &scope)?;
                    let name = typed
                        .name
                        .clone()
                        .unwrap_or_else(|| format!("EXPR${position}"));
                    push(typed, name, expr.to_string());
                }
                ast::SelectItem::ExprWithAlias { expr, alias } => {
                    let typed = compile(expr, &scope)?;
                    push(
                        typed,
                        alias.value.clone(),
                        format!("{expr} AS {}", alias.value),
                    );
                }
                ast::SelectItem::Wildcard(_) => {
                    for (index, field) in schema.fields.iter().enumerate() {
                        let typed = column_of(&schema, index);
                        push(typed, field.name.clone(), field.name.clone());
                    }
                }
                ast::SelectItem::ExprWithAliases { expr, .. } => {
                    return Err(SqlError::plan(format!(
                        "`{expr} AS (a, b, ...)` is not supported"
                    )));
                }
                ast::SelectItem::QualifiedWildcard(kind, _) => {
                    let text = kind.to_string();
                    let name = text.strip_suffix(".*").unwrap_or(&text).to_string();
                    let Some((_, columns)) = qualifiers.iter().find(|(n, _)| *n == name) else {
                        return Err(SqlError::plan(format!("no table `{name}` in FROM")));
                    };
                    for index in columns.clone() {
                        let field = &schema.fields[index];
                        push(
                            column_of(&schema, index),
                            field.name.clone(),
                            field.name.clone(),
                        );
                    }
                }
            }
        }
        // A name that repeats (`B.dateTime, A.dateTime`) is made unique as Flink's planner
        // does: `dateTime`, `dateTime0`, `dateTime1`, ...
        let mut seen = std::collections::BTreeSet::new();
        for field in &mut fields {
            if !seen.insert(field.name.clone()) {
                let unique = (0..)
                    .map(|n| format!("{}{n}", field.name))
                    .find(|name| !seen.contains(name))
                    .expect("an unused name");
                seen.insert(unique.clone());
                field.name = unique;
            }
        }
        // The event time is passed on when its column is selected as it is.
        let time = input.time().and_then(|t| {
            exprs
                .iter()
                .position(|e| e.column == Some(t.column))
                .map(|column| TimeAttribute {
                    column,
                    name: t.name.clone(),
                    out_of_orderness_ms: t.out_of_orderness_ms,
                })
        });
        // The processing time: a `PROCTIME()` column, or the input's passed on as it is.
        let proc_time = texts
            .iter()
            .position(|text| {
                let call: String = text.chars().filter(|c| !c.is_whitespace()).collect();
                call.to_ascii_uppercase().starts_with("PROCTIME()")
            })
            .or_else(|| {
                let column = input.proc_time()?.column;
                exprs.iter().position(|e| e.column == Some(column))
            })
            .map(|column| TimeAttribute {
                column,
                name: fields[column].name.clone(),
                out_of_orderness_ms: 0,
            });
        Ok(Plan::Project {
            input: Box::new(input),
            exprs,
            texts,
            schema: Schema::new(fields),
            time,
            proc_time,
        })
    }
}

/// A duration as Flink's options write it (`500`, `500 ms`, `10 s`, `5 min`, `1 h`, `1 d`, long
/// unit names too), in milliseconds; `None` when it is not one.
pub fn parse_duration_ms(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    let per_unit: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "ms" | "milli" | "millis" | "millisecond" | "milliseconds" => 1,
        "s" | "sec" | "secs" | "second" | "seconds" => 1_000,
        "min" | "mins" | "minute" | "minutes" => 60_000,
        "h" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        _ => return None,
    };
    number.checked_mul(per_unit)
}

/// Column `index` of `schema` as an expression.
fn column_of(schema: &Schema, index: usize) -> Typed {
    let field = &schema.fields[index];
    Typed {
        ty: field.ty.clone(),
        nullable: field.nullable,
        eval: std::sync::Arc::new(move |row| Ok(row.get(index).clone())),
        name: Some(field.name.clone()),
        column: Some(index),
        place: Some(crate::expr::Place::Column(index)),
        reads: Some(vec![crate::expr::Place::Column(index)]),
    }
}

/// `WATERMARK FOR column AS column [- INTERVAL ...]`.
fn time_attribute(
    table: &str,
    schema: &Schema,
    column: &str,
    expr: &ast::Expr,
) -> Result<TimeAttribute> {
    let index = schema.index_of(column).ok_or_else(|| {
        SqlError::plan(format!(
            "WATERMARK FOR `{column}`: `{table}` has no such column"
        ))
    })?;
    if !schema.fields[index].ty.is_timestamp() {
        return Err(SqlError::plan(format!(
            "WATERMARK FOR `{column}`: the time attribute must be a TIMESTAMP(3) or TIMESTAMP_LTZ(3), `{column}` is {}",
            schema.fields[index].ty
        )));
    }
    let is_column = |e: &ast::Expr| matches!(e, ast::Expr::Identifier(i) if i.value == column);
    let out_of_orderness_ms = match expr {
        e if is_column(e) => 0,
        ast::Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::Minus,
            right,
        } if is_column(left) => {
            let functions = Functions::default();
            let scope = Scope::new(schema, None, &functions);
            match compile(right, &scope)?.constant_value() {
                Some(crate::types::Value::Interval(ms)) if ms >= 0 => ms,
                _ => {
                    return Err(SqlError::plan(format!(
                        "WATERMARK FOR `{column}` AS {expr}: the bound must be a constant INTERVAL"
                    )));
                }
            }
        }
        other => {
            return Err(SqlError::plan(format!(
                "WATERMARK FOR `{column}` AS {other}: Riffle supports `{column}` and `{column} - INTERVAL '...' unit` (bounded out-of-orderness)"
            )));
        }
    };
    Ok(TimeAttribute {
        column: index,
        name: column.to_string(),
        out_of_orderness_ms,
    })
}

/// A Top-N query's plan, the name of its derived table, and the rest of its outer WHERE.
type TopNQuery = (Plan, Qualifiers, Option<ast::Expr>);

/// The `ROW_NUMBER() OVER (..) AS name` of a SELECT list: its position, its name and its window.
fn row_number_of(select: &ast::Select) -> Result<Option<(usize, String, ast::WindowSpec)>> {
    let mut found = None;
    for (position, item) in select.projection.iter().enumerate() {
        let (expr, alias) = match item {
            ast::SelectItem::UnnamedExpr(e) => (e, None),
            ast::SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.value.clone())),
            _ => continue,
        };
        let ast::Expr::Function(function) = expr else {
            continue;
        };
        let Some(over) = &function.over else {
            continue;
        };
        let name = function.name.to_string().to_ascii_uppercase();
        if name != "ROW_NUMBER" {
            return Err(SqlError::plan(format!(
                "{name}(..) OVER (..) is not supported yet (ROW_NUMBER() for Top-N and deduplication is)"
            )));
        }
        let ast::WindowType::WindowSpec(spec) = over else {
            return Err(SqlError::plan(
                "a named window (OVER w) is not supported yet: write OVER (PARTITION BY .. ORDER BY ..)",
            ));
        };
        if spec.window_frame.is_some() {
            return Err(SqlError::plan(
                "ROW_NUMBER() OVER (..) takes no frame (ROWS/RANGE ..)",
            ));
        }
        let Some(alias) = alias else {
            return Err(SqlError::plan(
                "ROW_NUMBER() OVER (..) needs a name (AS rn), for the outer query to bound it",
            ));
        };
        if found.is_some() {
            return Err(SqlError::plan(
                "one ROW_NUMBER() OVER (..) per query is supported",
            ));
        }
        found = Some((position, alias, spec.clone()));
    }
    Ok(found)
}

/// The table a `SELECT` without `FROM` reads: one row of no columns.
pub const NO_FROM: &str = "(no FROM)";

/// The names that qualify a relation's columns (`B.price`): each table name or alias with the
/// columns it qualifies.
pub type Qualifiers = Vec<(String, std::ops::Range<usize>)>;

/// The qualifiers of one relation: `name` over all of `plan`'s columns (none without a name).
fn named(name: Option<String>, plan: &Plan) -> Qualifiers {
    name.map(|n| vec![(n, 0..plan.schema().len())])
        .unwrap_or_default()
}

/// The qualifiers of a derived table without a name (`FROM (SELECT A.id, B.price FROM ..)`,
/// as Nexmark q6 writes): each column its SELECT list gives as a qualified column (`A.id`)
/// keeps that qualifier, so that `A.id` still names it outside (Calcite's lenient reading).
fn unnamed_derived_qualifiers(relation: &ast::TableFactor) -> Qualifiers {
    let ast::TableFactor::Derived { subquery, .. } = relation else {
        return Vec::new();
    };
    let ast::SetExpr::Select(select) = subquery.body.as_ref() else {
        return Vec::new();
    };
    let mut qualifiers = Vec::new();
    for (i, item) in select.projection.iter().enumerate() {
        match item {
            ast::SelectItem::UnnamedExpr(ast::Expr::CompoundIdentifier(parts))
                if parts.len() == 2 =>
            {
                qualifiers.push((parts[0].value.clone(), i..i + 1));
            }
            // Before a `*`, the positions after it are not known.
            ast::SelectItem::Wildcard(_) | ast::SelectItem::QualifiedWildcard(..) => break,
            _ => {}
        }
    }
    qualifiers
}

/// The kind and condition of a `JOIN .. ON ..`.
fn join_kind(join: &ast::Join) -> Result<(riffle::join::JoinType, &ast::Expr)> {
    use ast::JoinOperator as J;
    use riffle::join::JoinType;
    let (kind, constraint) = match &join.join_operator {
        J::Join(c) | J::Inner(c) => (JoinType::Inner, c),
        J::Left(c) | J::LeftOuter(c) => (JoinType::Left, c),
        J::Right(c) | J::RightOuter(c) => (JoinType::Right, c),
        J::FullOuter(c) => (JoinType::Full, c),
        other => {
            return Err(SqlError::plan(format!(
                "this kind of join is not supported yet: {other:?}"
            )));
        }
    };
    match constraint {
        ast::JoinConstraint::On(condition) => Ok((kind, condition)),
        _ => Err(SqlError::plan(
            "a join takes its condition in ON (USING and NATURAL are not supported yet)",
        )),
    }
}

/// `a AND b AND ..` of `conjuncts`, `None` when there are none.
fn and_all(conjuncts: Vec<ast::Expr>) -> Option<ast::Expr> {
    conjuncts.into_iter().reduce(|a, b| ast::Expr::BinaryOp {
        left: Box::new(a),
        op: ast::BinaryOperator::And,
        right: Box::new(b),
    })
}

/// The name of a group window function of GROUP BY (`TUMBLE`, `HOP`, `SESSION`), upper case.
fn group_window_name(function: &ast::Function) -> Option<String> {
    let name = function.name.to_string().to_ascii_uppercase();
    matches!(name.as_str(), "TUMBLE" | "HOP" | "SESSION").then_some(name)
}

/// The arguments of a function call, in order.
fn function_args(function: &ast::Function) -> Result<Vec<&ast::Expr>> {
    match &function.args {
        ast::FunctionArguments::List(list) => list
            .args
            .iter()
            .map(|a| match a {
                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => Ok(e),
                other => Err(SqlError::plan(format!(
                    "{}: the argument `{other}` is not supported (pass them in order)",
                    function.name
                ))),
            })
            .collect(),
        _ => Ok(Vec::new()),
    }
}

/// A positive constant `INTERVAL`, in ms: argument `what` of window function `name`.
pub(crate) fn constant_interval(arg: Option<&ast::Expr>, name: &str, what: &str) -> Result<i64> {
    let functions = Functions::default();
    let empty = Schema::default();
    let scope = Scope::new(&empty, None, &functions);
    match arg
        .map(|e| compile(e, &scope))
        .transpose()?
        .and_then(|t| t.constant_value())
    {
        Some(crate::types::Value::Interval(ms)) if ms > 0 => Ok(ms),
        _ => Err(SqlError::plan(format!(
            "{name}: the {what} must be a positive constant INTERVAL"
        ))),
    }
}

/// The conjuncts of `expr` (`a AND b AND c`: `a`, `b`, `c`).
pub fn split_and<'a>(expr: &'a ast::Expr, out: &mut Vec<&'a ast::Expr>) {
    match expr {
        ast::Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::And,
            right,
        } => {
            split_and(left, out);
            split_and(right, out);
        }
        ast::Expr::Nested(inner) => split_and(inner, out),
        other => out.push(other),
    }
}

/// The number of rows `condition` keeps when it bounds the rank `rank`: `rank <= n`, `rank < n`
/// (`n - 1`), `rank = 1`, or the same with the sides swapped.
fn rank_bound(condition: &ast::Expr, rank: &str) -> Option<usize> {
    use ast::BinaryOperator as Op;
    let ast::Expr::BinaryOp { left, op, right } = condition else {
        return None;
    };
    let is_rank = |e: &ast::Expr| match e {
        ast::Expr::Identifier(i) => i.value.eq_ignore_ascii_case(rank),
        ast::Expr::CompoundIdentifier(parts) => parts
            .last()
            .is_some_and(|i| i.value.eq_ignore_ascii_case(rank)),
        _ => false,
    };
    let number = |e: &ast::Expr| match e {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::Number(n, _) => n.parse::<usize>().ok(),
            _ => None,
        },
        _ => None,
    };
    // `rank OP n`, with a swapped comparison turned around.
    let (op, n) = if is_rank(left) {
        (op.clone(), number(right)?)
    } else if is_rank(right) {
        let flipped = match op {
            Op::GtEq => Op::LtEq,
            Op::Gt => Op::Lt,
            Op::Eq => Op::Eq,
            _ => return None,
        };
        (flipped, number(left)?)
    } else {
        return None;
    };
    match (op, n) {
        (Op::LtEq, n) => Some(n),
        (Op::Lt, n) => n.checked_sub(1),
        (Op::Eq, 1) => Some(1),
        _ => None,
    }
}

/// An aggregate call found in a grouped query's SELECT list.
struct FoundAggregate {
    name: String,
    distinct: bool,
    arg: Option<ast::Expr>,
    filter: Option<ast::Expr>,
    text: String,
}

/// An `ORDER BY` key of an `OVER (..)` over `scope`'s columns, and whether it is descending.
fn order_key(item: &ast::OrderByExpr, scope: &Scope<'_>) -> Result<(Typed, bool)> {
    let descending = match &item.options.sort {
        None | Some(ast::OrderBySort::Asc) => false,
        Some(ast::OrderBySort::Desc) => true,
        Some(_) => {
            return Err(SqlError::plan(format!(
                "ORDER BY {item} in OVER (..) is not supported (ASC or DESC)"
            )));
        }
    };
    if item.options.nulls_first.is_some() {
        return Err(SqlError::plan(
            "NULLS FIRST / NULLS LAST in OVER (..) is not supported yet (NULLs come first ascending, last descending)",
        ));
    }
    Ok((compile(&item.expr, scope)?, descending))
}

/// Whether `expr` calls no function whose value may change between calls (`RAND()`, `NOW()`,
/// a function registered as not deterministic).
fn deterministic(functions: &Functions, expr: &ast::Expr) -> bool {
    let mut deterministic = true;
    let _ = ast::visit_expressions(expr, |e| {
        if let ast::Expr::Function(f) = e {
            let name = f.name.to_string().to_ascii_uppercase();
            if (functions.is_registered(&name) && !functions.is_deterministic(&name))
                || [
                    "NOW",
                    "PROCTIME",
                    "RAND",
                    "RAND_INTEGER",
                    "UUID",
                    "CURRENT_TIMESTAMP",
                    "CURRENT_ROW_TIMESTAMP",
                    "LOCALTIMESTAMP",
                    "CURRENT_DATE",
                    "CURRENT_TIME",
                    "LOCALTIME",
                    "UNIX_TIMESTAMP",
                ]
                .contains(&name.as_str())
            {
                deterministic = false;
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    deterministic
}

/// The spec of `aggregate` over `scope`'s columns, its argument and `FILTER` condition
/// pushed onto the pre-computed row `pre`. A deterministic `FILTER` condition written before
/// (in `filters`, with its column of `pre`) is computed once for all (Nexmark q15 and q16
/// count rows, bidders and auctions under the same three price ranges).
fn aggregate_spec(
    aggregate: &FoundAggregate,
    scope: &Scope<'_>,
    pre: &mut Vec<Typed>,
    filters: &mut Vec<(ast::Expr, usize)>,
) -> Result<AggSpec> {
    let arg = aggregate
        .arg
        .as_ref()
        .map(|a| compile(a, scope))
        .transpose()?;
    let (kind, ty) = AggSpec::kind_and_type(
        &aggregate.name,
        aggregate.distinct,
        arg.as_ref().map(|a| a.ty.clone()),
    )?;
    let arg_type = arg.as_ref().map_or(DataType::Null, |a| a.ty.clone());
    // `COUNT(DISTINCT x)`s of one column read one pre-computed column: their accumulators
    // then share the values seen (see `RowAggregates`).
    let shared = arg.as_ref().and_then(|arg| {
        let place = arg.place?;
        (kind == crate::aggregate::AggKind::CountDistinct)
            .then(|| {
                pre.iter()
                    .position(|p| p.place == Some(place) && p.ty == arg.ty)
            })
            .flatten()
    });
    let mut push = |typed: Typed| {
        pre.push(typed);
        pre.len() - 1
    };
    let arg = match (shared, arg) {
        (Some(at), _) => Some(at),
        (None, arg) => arg.map(&mut push),
    };
    let filter = match &aggregate.filter {
        Some(filter) => Some(match filters.iter().find(|(seen, _)| seen == filter) {
            Some((_, at)) => *at,
            None => {
                let at = push(compile(filter, scope)?);
                if deterministic(scope.functions, filter) {
                    filters.push((filter.clone(), at));
                }
                at
            }
        }),
        None => None,
    };
    Ok(AggSpec {
        kind,
        arg,
        filter,
        arg_type,
        ty,
    })
}

/// The function of a SELECT item that is an aggregate `OVER (..)` (not `ROW_NUMBER()`, a
/// Top-N's), and its window.
fn over_call(item: &ast::SelectItem) -> Option<(&ast::Function, &ast::WindowType)> {
    let (ast::SelectItem::UnnamedExpr(ast::Expr::Function(function))
    | ast::SelectItem::ExprWithAlias {
        expr: ast::Expr::Function(function),
        ..
    }) = item
    else {
        return None;
    };
    let over = function.over.as_ref()?;
    (!function.name.to_string().eq_ignore_ascii_case("ROW_NUMBER")).then_some((function, over))
}

/// Whether `expr` calls an aggregate function.
fn has_aggregate(expr: &ast::Expr) -> bool {
    let mut found = Vec::new();
    rewrite_grouped(expr, &[], &mut found).is_ok() && !found.is_empty()
        || matches!(expr, ast::Expr::Function(f) if crate::functions::is_aggregate(&f.name.to_string().to_ascii_uppercase()))
}

/// The output name of a key's text: the last identifier (`B.auction` -> `auction`).
fn key_output_name(text: &str) -> Option<String> {
    let last = text.rsplit('.').next()?;
    last.chars()
        .all(|c| c.is_alphanumeric() || c == '_')
        .then(|| last.to_string())
}

/// `expr` of a grouped query's SELECT list over the aggregated row: group keys become `$keyN`,
/// aggregates `$aggN` (collected in `found`); any other column is an error.
fn rewrite_grouped(
    expr: &ast::Expr,
    keys: &[String],
    found: &mut Vec<FoundAggregate>,
) -> Result<ast::Expr> {
    use ast::Expr as E;
    let text = expr.to_string();
    if let Some(i) = keys.iter().position(|k| *k == text) {
        return Ok(E::Identifier(ast::Ident::new(format!("$key{i}"))));
    }
    let rewrite = |e: &ast::Expr, found: &mut Vec<FoundAggregate>| rewrite_grouped(e, keys, found);
    Ok(match expr {
        E::Identifier(ident)
            if matches!(
                ident.value.as_str(),
                "window_start" | "window_end" | "window_time"
            ) =>
        {
            expr.clone()
        }
        E::Identifier(_) | E::CompoundIdentifier(_) => {
            return Err(SqlError::plan(format!(
                "`{expr}` is neither grouped nor aggregated: add it to GROUP BY or aggregate it"
            )));
        }
        E::Value(_) | E::Interval(_) | E::TypedString(_) => expr.clone(),
        E::Nested(inner) => E::Nested(Box::new(rewrite(inner, found)?)),
        E::BinaryOp { left, op, right } => E::BinaryOp {
            left: Box::new(rewrite(left, found)?),
            op: op.clone(),
            right: Box::new(rewrite(right, found)?),
        },
        E::UnaryOp { op, expr } => E::UnaryOp {
            op: *op,
            expr: Box::new(rewrite(expr, found)?),
        },
        E::Cast {
            kind,
            expr,
            data_type,
            format,
        } => E::Cast {
            kind: kind.clone(),
            expr: Box::new(rewrite(expr, found)?),
            data_type: data_type.clone(),
            format: format.clone(),
        },
        E::Function(function) => {
            let name = function.name.to_string().to_ascii_uppercase();
            let args: Vec<&ast::FunctionArg> = match &function.args {
                ast::FunctionArguments::List(list) => list.args.iter().collect(),
                _ => Vec::new(),
            };
            // The legacy group window's properties: `SESSION_START(time, gap)` is `window_start`.
            if let Some((_, property)) = name.split_once('_')
                && matches!(name.split('_').next(), Some("TUMBLE" | "HOP" | "SESSION"))
            {
                let column = match property {
                    "START" => "window_start",
                    "END" => "window_end",
                    "ROWTIME" => "window_time",
                    _ => {
                        return Err(SqlError::plan(format!(
                            "{name}(..) is not supported (_START, _END and _ROWTIME are)"
                        )));
                    }
                };
                return Ok(E::Identifier(ast::Ident::new(column)));
            }
            if crate::functions::is_aggregate(&name) {
                let distinct = matches!(
                    &function.args,
                    ast::FunctionArguments::List(list)
                        if matches!(list.duplicate_treatment, Some(ast::DuplicateTreatment::Distinct))
                );
                let arg = match args.as_slice() {
                    [] | [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Wildcard)] => None,
                    [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e))] => Some(e.clone()),
                    _ => {
                        return Err(SqlError::plan(format!(
                            "{name} takes one argument ({function})"
                        )));
                    }
                };
                found.push(FoundAggregate {
                    name,
                    distinct,
                    arg,
                    filter: function.filter.as_deref().cloned(),
                    text: function.to_string(),
                });
                return Ok(E::Identifier(ast::Ident::new(format!(
                    "$agg{}",
                    found.len() - 1
                ))));
            }
            let mut function = function.clone();
            if let ast::FunctionArguments::List(list) = &mut function.args {
                for arg in &mut list.args {
                    if let ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) = arg {
                        *e = rewrite(e, found)?;
                    }
                }
            }
            E::Function(function)
        }
        E::Case {
            case_token,
            end_token,
            operand,
            conditions,
            else_result,
        } => E::Case {
            case_token: case_token.clone(),
            end_token: end_token.clone(),
            operand: operand
                .as_ref()
                .map(|o| rewrite(o, found).map(Box::new))
                .transpose()?,
            conditions: conditions
                .iter()
                .map(|w| {
                    Ok(ast::CaseWhen {
                        condition: rewrite(&w.condition, found)?,
                        result: rewrite(&w.result, found)?,
                    })
                })
                .collect::<Result<_>>()?,
            else_result: else_result
                .as_ref()
                .map(|e| rewrite(e, found).map(Box::new))
                .transpose()?,
        },
        other => {
            return Err(SqlError::plan(format!(
                "`{other}` in a grouped query's SELECT list is not supported yet"
            )));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pre-computed row of the one aggregation in `query` over `t`.
    fn pre_of(query: &str) -> Vec<Typed> {
        let mut catalog = Catalog::default();
        // A function not declared deterministic (a coin toss, as far as the planner knows).
        let coin = crate::functions::ScalarFunction::returning(DataType::Boolean, |_| {
            Ok(crate::types::Value::Bool(true))
        });
        catalog.functions.register("coin", coin);
        let ddl = "CREATE TABLE t (id BIGINT, price BIGINT) WITH ('connector' = 'datagen')";
        catalog
            .define(crate::parse::parse_statement(ddl).unwrap())
            .unwrap();
        let crate::parse::Statement::Query(query) = crate::parse::parse_statement(query).unwrap()
        else {
            unreachable!()
        };
        let mut plan = catalog.plan_query(&query).unwrap();
        loop {
            plan = match plan {
                Plan::GroupAggregate { pre, .. } => return pre,
                other => other
                    .inputs()
                    .into_iter()
                    .next()
                    .expect("an aggregation")
                    .clone(),
            }
        }
    }

    #[test]
    fn a_filter_written_again_is_computed_once_unless_it_may_change() {
        // Key, then: the filter once, `id` once (the distinct counts share it).
        let pre = pre_of(
            "SELECT id % 2, COUNT(*) FILTER (WHERE price < 10), \
             COUNT(DISTINCT id) FILTER (WHERE price < 10), \
             COUNT(DISTINCT id) FILTER (WHERE price < 10) FROM t GROUP BY id % 2",
        );
        assert_eq!(pre.len(), 3);
        // Another condition is its own; one that may change between calls is computed for
        // each aggregate.
        let pre = pre_of(
            "SELECT id % 2, COUNT(*) FILTER (WHERE price < 10), \
             COUNT(*) FILTER (WHERE price <= 10), COUNT(*) FILTER (WHERE coin(id)), \
             COUNT(*) FILTER (WHERE coin(id)) FROM t GROUP BY id % 2",
        );
        assert_eq!(pre.len(), 5);
    }
}
