//! From a logical plan to DataStream operators: a scan is the connector's source with the
//! table's watermark, a filter and a projection are chained stateless operators over [`Row`]s
//! (their expressions compiled once), an updating aggregate is a keyed operator whose
//! accumulators are declared keyed state, and an `INSERT INTO` ends in the sink table's
//! connector.
//!
//! A step's rows are a stream of [`Row`]s when they are only added, of [`Change`]s of rows when
//! they are updated ([`Rows`], after the plan's changelog mode).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use riffle::aggregate::AggregateFunction;
use riffle::join::JoinType;
use riffle::state::{
    AggregatingStateDescriptor, MapStateDescriptor, StateTtl, ValueStateDescriptor,
};
use riffle::window::{Cumulating, Session, Sliding, Tumbling, WindowResult};
use riffle::{Change, DataStream, StreamEnv};

use crate::aggregate::{
    Acc, DistinctGroups, DistinctValue, RetractingAggregates, RowAggregates, SeenInMap,
};
use crate::connectors;
use crate::error::{Result, SqlError};
use crate::expr::{Eval, Place, Typed};
use crate::kept::JoinRow;
use crate::parse::{ColumnDef, TableDef};
use crate::placement::Placement;
use crate::plan::{ChangelogMode, Plan, WindowKind};
use crate::types::{DataType, Row, Schema, Value};

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

/// The values of `exprs` over `row`, as a row, at planning time (an error is the plan's).
fn eval_all_now(exprs: &[Typed], row: &Row) -> Result<Row> {
    let evals: Vec<Eval> = exprs.iter().map(|e| e.eval.clone()).collect();
    eval_all(&evals, row).map_err(|e| SqlError::plan(e.to_string()))
}

/// The values of `exprs` over `row`, as a row.
fn eval_all(evals: &[Eval], row: &Row) -> riffle::Result<Row> {
    let mut values = Vec::with_capacity(evals.len());
    for eval in evals {
        values.push(eval(row)?);
    }
    Ok(Row(values))
}

/// Whether `exprs` are the columns of a row of `width` columns, in order: the row as it is.
fn reads_row_as_it_is(exprs: &[Typed], width: usize) -> bool {
    exprs.len() == width
        && (exprs.iter().enumerate()).all(|(i, e)| e.place == Some(Place::Column(i)))
}

/// An aggregate's output row from its aggregated row (keys, window columns, aggregates): the
/// SELECT list's expressions, when `HAVING` keeps the row.
#[derive(Clone)]
struct Output {
    /// `None`: the SELECT list is the aggregated row's columns in order (the row as it is).
    post: Option<Arc<Projection>>,
    having: Option<Eval>,
}

impl Output {
    /// `width`: the aggregated row's number of columns.
    fn new(post: &[Typed], having: Option<&Typed>, width: usize) -> Output {
        let as_it_is = reads_row_as_it_is(post, width);
        Output {
            post: (!as_it_is).then(|| Arc::new(Projection::new(post))),
            having: having.map(|h| h.eval.clone()),
        }
    }

    /// The output row, `None` when `HAVING` drops it.
    fn of(&self, aggregated: Row) -> riffle::Result<Option<Row>> {
        if let Some(having) = &self.having
            && !matches!(having(&aggregated)?, Value::Bool(true))
        {
            return Ok(None);
        }
        match &self.post {
            None => Ok(Some(aggregated)),
            Some(post) => post.apply(aggregated).map(Some),
        }
    }
}

/// One step of a chain of stateless steps (filters and projections) lowered as one operator.
#[derive(Clone)]
enum Calc {
    /// Keeps the rows for which the predicate is true.
    Filter(Eval),
    /// Computes new columns.
    Project(Projection),
    /// A projection of every column in order: the row as it is.
    AsItIs,
}

/// A projection of rows it owns: the values of expressions that only read a place of the row
/// (a column, a field of a `ROW` column) are moved out of it rather than copied, the others
/// computed first, from the intact row.
#[derive(Clone)]
struct Projection {
    steps: Vec<Step>,
    /// Whether a step computes from the row (then the moves wait until every computation has
    /// read it intact); without one, the row is taken apart in one pass.
    computes: bool,
    /// A `ROW` column whose fields are moved to the same positions of the output (a view of a
    /// nested row's fields, `SELECT bid.auction, bid.bidder, .. FROM datagen`), and that
    /// nothing copies: the output is made in that row's own vector (its other positions
    /// overwritten), not in a new one.
    host: Option<usize>,
    /// Whether it is applied in the row's own vector ([`Projection::apply_in_place`]).
    in_place: bool,
}

/// How many values a projection applied in place may make, and move, without allocating.
const SCRATCH: usize = 4;

impl Step {
    /// The place it moves or copies.
    fn place(&self) -> Option<Place> {
        match self {
            Step::Move(place) | Step::Copy(place) => Some(*place),
            Step::Compute(_) | Step::Null => None,
        }
    }

    /// Whether, as the step of output position `at`, it leaves the column at `at` where it is.
    fn stays(&self, at: usize) -> bool {
        matches!(self, Step::Move(Place::Column(c)) if *c == at)
    }
}

/// How a [`Projection`] gets one output value.
#[derive(Clone)]
enum Step {
    /// Computed from the row.
    Compute(Eval),
    /// Moved out of the row (nothing else reads that place).
    Move(Place),
    /// Copied from the row (another step reads the same place or one inside it).
    Copy(Place),
    /// `NULL`: a column no one above reads ([`Reads::unread`]).
    Null,
}

impl Projection {
    fn new(exprs: &[Typed]) -> Projection {
        Projection::leaving_null(exprs, &[])
    }

    /// [`new`](Projection::new), the columns `unread` (their indexes) left `NULL`.
    fn leaving_null(exprs: &[Typed], unread: &[usize]) -> Projection {
        let steps = exprs
            .iter()
            .enumerate()
            .map(|(i, e)| match e.place {
                _ if unread.contains(&i) => Step::Null,
                None => Step::Compute(e.eval.clone()),
                Some(place) => Step::Move(place),
            })
            .collect();
        Projection::of_steps(steps)
    }

    /// The projection of `steps`, each place read by another step (or inside another's)
    /// copied, the others moved.
    fn of_steps(mut steps: Vec<Step>) -> Projection {
        let places: Vec<Option<Place>> = steps.iter().map(Step::place).collect();
        let overlap = |a: Place, b: Place| match (a, b) {
            (Place::Column(c), Place::Column(d))
            | (Place::Column(c), Place::Field(d, _))
            | (Place::Field(c, _), Place::Column(d)) => c == d,
            (Place::Field(c, f), Place::Field(d, g)) => (c, f) == (d, g),
        };
        for (i, step) in steps.iter_mut().enumerate() {
            if let Some(place) = step.place() {
                let shared = (places.iter().enumerate())
                    .any(|(j, other)| j != i && other.is_some_and(|o| overlap(place, o)));
                *step = match shared {
                    true => Step::Copy(place),
                    false => Step::Move(place),
                };
            }
        }
        let computes = steps.iter().any(|s| matches!(s, Step::Compute(_)));
        let host = Projection::host(&steps);
        let in_place = Projection::suits_in_place(&steps);
        Projection {
            steps,
            computes,
            host,
            in_place,
        }
    }

    /// The column whose fields at least two steps move to their own positions, when no step
    /// copies it or a field of it, or moves the whole column (see [`Projection::host`]).
    fn host(steps: &[Step]) -> Option<usize> {
        let column_of = |place: Place| match place {
            Place::Column(c) | Place::Field(c, _) => c,
        };
        let in_place = |i: usize, step: &Step| match step {
            Step::Move(Place::Field(c, f)) if *f == i => Some(*c),
            _ => None,
        };
        let host = steps.iter().enumerate().find_map(|(i, s)| in_place(i, s))?;
        let mut kept = 0;
        for (i, step) in steps.iter().enumerate() {
            match step {
                _ if in_place(i, step) == Some(host) => kept += 1,
                // Another field of it, moved elsewhere: taken out first.
                Step::Move(Place::Field(..)) => {}
                _ if step.place().is_some_and(|p| column_of(p) == host) => return None,
                _ => {}
            }
        }
        (kept >= 2).then_some(host)
    }

    /// [`apply`](Projection::apply) in the vector of the `ROW` column `host`, when the row
    /// holds one there (else the row is given back).
    fn apply_hosted(
        &self,
        host: usize,
        mut row: Row,
    ) -> riffle::Result<std::result::Result<Row, Row>> {
        if !matches!(row.get(host), Value::Row(_)) {
            return Ok(Err(row));
        }
        let computed = self.computed(&row)?;
        let Value::Row(mut values) = std::mem::take(&mut row.0[host]) else {
            unreachable!("a row, checked above")
        };
        // Its fields that move elsewhere, out before any position is overwritten.
        let mut moved: smallvec::SmallVec<[Value; 4]> = smallvec::SmallVec::new();
        for (i, step) in self.steps.iter().enumerate() {
            if let Step::Move(Place::Field(c, f)) = step
                && *c == host
                && *f != i
            {
                moved.push(values.get_mut(*f).map(std::mem::take).unwrap_or_default());
            }
        }
        values.resize_with(self.steps.len(), || Value::Null);
        let mut computed = computed.into_iter();
        let mut moved = moved.into_iter();
        for (i, step) in self.steps.iter().enumerate() {
            values[i] = match step {
                Step::Move(Place::Field(c, f)) if *c == host => match *f == i {
                    true => continue,
                    false => moved.next().unwrap_or_default(),
                },
                Step::Compute(_) => computed.next().unwrap_or(Value::Null),
                Step::Move(place) => place.take(&mut row),
                Step::Copy(place) => place.get(&row),
                Step::Null => Value::Null,
            };
        }
        Ok(Ok(Row(values)))
    }

    /// This projection and then `outer` as one projection, when `outer` computes nothing
    /// (it only takes columns, or fields of columns this one takes as they are) and no
    /// column this one computes is taken twice; `None` otherwise. (A view's projection under
    /// a query's: `SELECT auction, price FROM bid`.)
    fn then(&self, outer: &Projection) -> Option<Projection> {
        if outer.computes {
            return None;
        }
        let mut taken = vec![0usize; self.steps.len()];
        let mut steps = Vec::with_capacity(outer.steps.len());
        for step in &outer.steps {
            let step = match step.place() {
                None => Step::Null,
                Some(Place::Column(c)) => match self.steps.get(c) {
                    None => Step::Null,
                    Some(inner) => {
                        taken[c] += 1;
                        inner.clone()
                    }
                },
                Some(Place::Field(c, f)) => match self.steps.get(c) {
                    None | Some(Step::Null) => Step::Null,
                    Some(inner) => match inner.place() {
                        Some(Place::Column(k)) => Step::Move(Place::Field(k, f)),
                        // A field of a field, or of a computed row.
                        _ => return None,
                    },
                },
            };
            steps.push(step);
        }
        let computed_twice = (self.steps.iter().zip(&taken))
            .any(|(step, taken)| matches!(step, Step::Compute(_)) && *taken > 1);
        (!computed_twice).then(|| Projection::of_steps(steps))
    }

    /// [`apply`](Projection::apply) in the row's own vector, when it leaves at least one
    /// column where it is (`Move` of column `i` to position `i`) and at most [`SCRATCH`]
    /// values are made or moved elsewhere: they are gathered first (computations and copies
    /// from the intact row), then written to their positions, the columns past the last
    /// dropped. No vector is allocated nor freed (a view's column list and a `WHERE`'s
    /// shared calls stack maps that each keep most columns where they are).
    fn apply_in_place(&self, mut row: Row) -> riffle::Result<Row> {
        let computed = self.computed(&row)?;
        let mut taken: smallvec::SmallVec<[Value; SCRATCH]> = smallvec::SmallVec::new();
        for (i, step) in self.steps.iter().enumerate() {
            match step {
                _ if step.stays(i) => {}
                Step::Move(place) => taken.push(place.take(&mut row)),
                Step::Copy(place) => taken.push(place.get(&row)),
                Step::Compute(_) | Step::Null => {}
            }
        }
        let values = &mut row.0;
        values.resize_with(self.steps.len(), || Value::Null);
        let (mut computed, mut taken) = (computed.into_iter(), taken.into_iter());
        for (value, (i, step)) in values.iter_mut().zip(self.steps.iter().enumerate()) {
            *value = match step {
                _ if step.stays(i) => continue,
                Step::Move(_) | Step::Copy(_) => taken.next().unwrap_or_default(),
                Step::Compute(_) => computed.next().unwrap_or_default(),
                Step::Null => Value::Null,
            };
        }
        Ok(row)
    }

    /// The values its `Compute` steps make of the intact row, in order.
    fn computed(&self, row: &Row) -> riffle::Result<smallvec::SmallVec<[Value; SCRATCH]>> {
        let mut computed = smallvec::SmallVec::new();
        if self.computes {
            for step in &self.steps {
                if let Step::Compute(eval) = step {
                    computed.push(eval(row)?);
                }
            }
        }
        Ok(computed)
    }

    /// Whether [`apply_in_place`](Projection::apply_in_place) suits `steps`: one stays, and
    /// at most [`SCRATCH`] are computed and [`SCRATCH`] moved or copied elsewhere.
    fn suits_in_place(steps: &[Step]) -> bool {
        let (mut stay, mut made, mut moved) = (0, 0, 0);
        for (i, step) in steps.iter().enumerate() {
            match step {
                _ if step.stays(i) => stay += 1,
                Step::Compute(_) => made += 1,
                Step::Move(_) | Step::Copy(_) => moved += 1,
                Step::Null => {}
            }
        }
        stay > 0 && made <= SCRATCH && moved <= SCRATCH
    }

    fn apply(&self, mut row: Row) -> riffle::Result<Row> {
        if let Some(host) = self.host {
            match self.apply_hosted(host, row)? {
                Ok(done) => return Ok(done),
                Err(given_back) => row = given_back,
            }
        }
        if self.in_place {
            return self.apply_in_place(row);
        }
        let mut values: Vec<Value> = Vec::with_capacity(self.steps.len());
        if !self.computes {
            // No place is read twice where it is moved: one pass.
            for step in &self.steps {
                values.push(match step {
                    Step::Copy(place) => place.get(&row),
                    Step::Move(place) => place.take(&mut row),
                    Step::Null | Step::Compute(_) => Value::Null,
                });
            }
            return Ok(Row(values));
        }
        for step in &self.steps {
            values.push(match step {
                Step::Compute(eval) => eval(&row)?,
                Step::Copy(place) => place.get(&row),
                Step::Move(_) | Step::Null => Value::Null,
            });
        }
        for (value, step) in values.iter_mut().zip(&self.steps) {
            if let Step::Move(place) = step {
                *value = place.take(&mut row);
            }
        }
        Ok(Row(values))
    }

    /// [`apply`](Projection::apply) to a row it does not own: every place copied.
    fn apply_lent(&self, row: &Row) -> riffle::Result<Row> {
        let mut values: Vec<Value> = Vec::with_capacity(self.steps.len());
        for step in &self.steps {
            values.push(match step {
                Step::Compute(eval) => eval(row)?,
                Step::Copy(place) | Step::Move(place) => place.get(row),
                Step::Null => Value::Null,
            });
        }
        Ok(Row(values))
    }
}

/// `steps` with each projection that only takes columns of the one before it made one with
/// it (see [`Projection::then`]), and the rows passed as they are dropped: a view's
/// projection under a query's copies each row once, not twice.
fn fused(steps: Vec<Calc>) -> Vec<Calc> {
    let mut out: Vec<Calc> = Vec::with_capacity(steps.len());
    for step in steps {
        match (out.last_mut(), step) {
            (_, Calc::AsItIs) => {}
            (Some(Calc::Project(inner)), Calc::Project(outer)) => match inner.then(&outer) {
                Some(both) => *inner = both,
                None => out.push(Calc::Project(outer)),
            },
            (_, step) => out.push(step),
        }
    }
    out
}

/// Consecutive filters and projections of appended rows as one operator (one call per row,
/// no emit between them). When its input has other readers in its task (a table read by two
/// views: Nexmark's `auction` and `bid` of one scan), it reads their rows lent: a row its
/// filters drop is not copied, and a projection copies only what it keeps.
#[derive(Clone)]
struct CalcRows {
    steps: Arc<[Calc]>,
}

impl CalcRows {
    fn new(steps: Vec<Calc>) -> CalcRows {
        CalcRows {
            steps: fused(steps).into(),
        }
    }

    /// The row the steps make of an owned `row`, if its filters keep it.
    fn owned(&self, row: Row) -> riffle::Result<Option<Row>> {
        Self::run_owned(&self.steps, row)
    }

    /// The row `steps` make of an owned `row`, if their filters keep it.
    fn run_owned(steps: &[Calc], mut row: Row) -> riffle::Result<Option<Row>> {
        for step in steps {
            match step {
                Calc::Filter(predicate) => {
                    if !matches!(predicate(&row)?, Value::Bool(true)) {
                        return Ok(None);
                    }
                }
                Calc::Project(projection) => row = projection.apply(row)?,
                Calc::AsItIs => {}
            }
        }
        Ok(Some(row))
    }

    /// [`owned`](CalcRows::owned) of a lent row: read in place up to the first projection,
    /// which makes an owned row of it (a row of filters only is copied once kept).
    fn lent(&self, row: &Row) -> riffle::Result<Option<Row>> {
        for (i, step) in self.steps.iter().enumerate() {
            match step {
                Calc::Filter(predicate) => {
                    if !matches!(predicate(row)?, Value::Bool(true)) {
                        return Ok(None);
                    }
                }
                Calc::Project(projection) => {
                    return Self::run_owned(&self.steps[i + 1..], projection.apply_lent(row)?);
                }
                Calc::AsItIs => {}
            }
        }
        Ok(Some(row.clone()))
    }
}

impl riffle::operators::Operator for CalcRows {
    type In = Row;
    type Out = Row;

    fn process(
        &mut self,
        batch: &mut Vec<riffle::Record<Row>>,
        out: &mut riffle::operators::Collector<'_, Row>,
    ) -> riffle::Result<()> {
        for record in batch.drain(..) {
            let timestamp = record.timestamp;
            if let Some(row) = self.owned(record.value)? {
                out.emit(riffle::Record::timed(row, timestamp))?;
            }
        }
        Ok(())
    }

    fn process_shared(
        &mut self,
        batch: &[riffle::Record<Row>],
        out: &mut riffle::operators::Collector<'_, Row>,
    ) -> riffle::Result<bool> {
        for record in batch {
            if let Some(row) = self.lent(&record.value)? {
                out.emit(record.with_value(row))?;
            }
        }
        Ok(true)
    }
}

/// A group's key followed by its aggregates' results, in one allocation.
fn key_and(key: &Row, results: Vec<Value>) -> Row {
    let mut row = Vec::with_capacity(key.0.len() + results.len());
    row.extend(key.0.iter().cloned());
    row.extend(results);
    Row(row)
}

/// A join key that no other row has: an outer join's row whose key is `NULL` (which equals
/// nothing, in SQL) is kept under it, and emitted padded.
fn unmatched_key() -> Row {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Row(vec![
        Value::Null,
        Value::Int(std::process::id() as i64),
        Value::Int(n as i64),
    ])
}

/// An OVER aggregation's partition (see [`Plan::OverAggregate`]): its rows kept in order, as
/// carried (`[partition keys.., order keys.., arguments.., output columns..]`), each row's
/// output the aggregate of it and the `preceding` rows before it.
#[derive(Clone)]
struct Over {
    partitions: usize,
    descending: Vec<bool>,
    aggregates: RowAggregates,
    preceding: usize,
    outputs: Vec<std::result::Result<usize, usize>>,
}

impl Over {
    /// The order of two carried rows: by the order keys, then (ties) by the whole row.
    fn cmp(&self, a: &Row, b: &Row) -> std::cmp::Ordering {
        for (i, descending) in self.descending.iter().enumerate() {
            let at = self.partitions + i;
            let order = a.get(at).cmp(b.get(at));
            let order = if *descending { order.reverse() } else { order };
            if order.is_ne() {
                return order;
            }
        }
        a.cmp(b)
    }

    /// The output of the row at `at` of `rows`.
    fn output(&self, rows: &[Row], at: usize) -> Row {
        let mut acc = self.aggregates.create();
        for row in &rows[at.saturating_sub(self.preceding)..=at] {
            self.aggregates.add(&mut acc, row);
        }
        let values = self.aggregates.result(&acc);
        Row(self
            .outputs
            .iter()
            .map(|output| match output {
                Ok(column) => rows[at].get(*column).clone(),
                Err(aggregate) => values[*aggregate].clone(),
            })
            .collect())
    }

    /// The outputs of the `count` rows from `at` on (fewer at the end).
    fn outputs_from(&self, rows: &[Row], at: usize, count: usize) -> Vec<Row> {
        let end = rows.len().min(at.saturating_add(count));
        (at..end).map(|i| self.output(rows, i)).collect()
    }

    /// `change` applied to the partition's rows `kept`: the changes of the output (a row in,
    /// out or updated; `-U`/`+U` pairs, then `-D` or `+I` for what is left). A retraction of a
    /// row that is not there changes nothing.
    fn apply(&self, kept: &mut Vec<Row>, change: Change<Row>) -> Vec<Change<Row>> {
        // The rows whose output a row at `at` changes: it and the `preceding` after it.
        let n = self.preceding;
        let at = kept.partition_point(|r| self.cmp(r, &change.row).is_lt());
        let (before, mut after) = if change.op.is_retract() {
            if kept.get(at) != Some(&change.row) {
                return Vec::new();
            }
            let before = self.outputs_from(kept, at, n.saturating_add(1));
            kept.remove(at);
            (before, self.outputs_from(kept, at, n))
        } else {
            let before = self.outputs_from(kept, at, n);
            kept.insert(at, change.row);
            (before, self.outputs_from(kept, at, n.saturating_add(1)))
        };
        let mut gone = Vec::new();
        for row in before {
            match after.iter().position(|r| *r == row) {
                Some(i) => {
                    after.remove(i);
                }
                None => gone.push(row),
            }
        }
        let mut changes = Vec::with_capacity(gone.len() + after.len());
        let mut came = after.into_iter();
        for row in gone {
            match came.next() {
                Some(new) => {
                    changes.push(Change::update_before(row));
                    changes.push(Change::update_after(new));
                }
                None => changes.push(Change::delete(row)),
            }
        }
        changes.extend(came.map(Change::insert));
        changes
    }
}

/// The state of a Top-N's partition: its first rows, in order, as carried (see [`TopN`]).
type RowsState = ValueStateDescriptor<Vec<Row>>;

/// The ranking of a Top-N (`ROW_NUMBER() OVER (..)` bounded by `rn <= limit`), over rows
/// carried as `[partition keys.., order keys.., the input row's columns..]`.
#[derive(Clone)]
struct TopN {
    /// How many partition keys lead a carried row.
    keys: usize,
    /// Per order key, whether it sorts descending.
    descending: Vec<bool>,
    /// Rows kept per partition.
    limit: usize,
    /// The output columns but the rank, over the input row.
    project: Vec<Eval>,
    /// The input row's columns `project` takes as they are, when that is all it does.
    columns: Option<Vec<usize>>,
    /// Where the rank goes among the output columns.
    rank_at: usize,
}

impl TopN {
    /// Which of two carried rows of a partition comes first: by the order keys, then (ties) by
    /// the input row's columns, ascending.
    fn compare(&self, a: &Row, b: &Row) -> std::cmp::Ordering {
        let orders = self.keys..self.keys + self.descending.len();
        for (i, descending) in orders.clone().zip(&self.descending) {
            let ordering = a.0[i].cmp(&b.0[i]);
            let ordering = if *descending {
                ordering.reverse()
            } else {
                ordering
            };
            if ordering.is_ne() {
                return ordering;
            }
        }
        a.0[orders.end..].cmp(&b.0[orders.end..])
    }

    /// [`output`](TopN::output) of a carried row that leaves the partition: its values moved,
    /// not copied.
    fn output_owned(&self, mut carried: Row, rank: usize) -> riffle::Result<Row> {
        let from = self.keys + self.descending.len();
        let mut values = match &self.columns {
            Some(columns) => {
                let mut taken = vec![false; carried.0.len()];
                let mut values: Vec<Value> = Vec::with_capacity(columns.len() + 1);
                for &c in columns {
                    let at = from + c;
                    // A column taken twice is copied the second time.
                    values.push(match std::mem::replace(&mut taken[at], true) {
                        false => std::mem::take(&mut carried.0[at]),
                        true => values[columns.iter().position(|&d| d == c).unwrap_or(0)].clone(),
                    });
                }
                values
            }
            None => {
                carried.0.drain(..from);
                eval_all(&self.project, &carried)?.0
            }
        };
        values.insert(self.rank_at, Value::Int(rank as i64));
        Ok(Row(values))
    }

    /// The output row of a carried row at rank `rank` (1, 2, ...).
    fn output(&self, carried: &Row, rank: usize) -> riffle::Result<Row> {
        let from = self.keys + self.descending.len();
        let mut values = match &self.columns {
            // Columns of the input row as they are: taken from the carried row.
            Some(columns) => columns
                .iter()
                .map(|c| carried.0[from + c].clone())
                .collect(),
            None => eval_all(&self.project, &Row(carried.0[from..].to_vec()))?.0,
        };
        values.insert(self.rank_at, Value::Int(rank as i64));
        Ok(Row(values))
    }

    /// Where `row` would rank among `kept` (a partition's first rows, in order), from 0.
    fn position(&self, kept: &[Row], row: &Row) -> usize {
        kept.partition_point(|x| self.compare(x, row).is_le())
    }

    /// Puts `row` among `kept` (a partition's first rows, in order); the changes of the ranks
    /// it moved, or `None` when it does not get in (and `kept` is left as it was). A row at
    /// rank r moves the rows below it: ranks r to the end are updated (`-U` the old row, `+U`
    /// the new), a rank that was empty is inserted (`+I`), and the row pushed past `limit`
    /// leaves.
    fn insert(&self, kept: &mut Vec<Row>, row: Row) -> riffle::Result<Option<Vec<Change<Row>>>> {
        if self.limit == 1 {
            return self.replace_first(kept, row);
        }
        let at = self.position(kept, &row);
        if at >= self.limit {
            return Ok(None);
        }
        // The old rows' outputs at their ranks, before they move (no copy of the rows); the
        // one pushed past the limit (a deduplication's old row) leaves, its output made of it.
        let mut changes = Vec::with_capacity(2 * (kept.len() + 1 - at));
        let mut before = Vec::with_capacity(kept.len().min(self.limit) - at.min(kept.len()));
        let leaving = self.limit - 1;
        for (offset, old) in kept.iter().enumerate().skip(at).take(self.limit - at) {
            before.push(match offset == leaving {
                true => None,
                false => Some(self.output(old, offset + 1)?),
            });
        }
        kept.insert(at, row);
        let mut gone = kept.split_off(self.limit.min(kept.len())).into_iter();
        let mut before = before.into_iter();
        for (offset, now) in kept[at..].iter().enumerate() {
            let rank = at + offset + 1;
            match before.next() {
                Some(old) => {
                    let old = match old {
                        Some(old) => old,
                        None => {
                            let left = gone.next().expect("the row at the limit was pushed out");
                            self.output_owned(left, rank)?
                        }
                    };
                    changes.push(Change::update_before(old));
                    changes.push(Change::update_after(self.output(now, rank)?));
                }
                None => changes.push(Change::insert(self.output(now, rank)?)),
            }
        }
        Ok(Some(changes))
    }

    /// [`insert`](TopN::insert) for a limit of 1 (a deduplication): the row takes the kept
    /// one's place if it comes first, without the general case's vectors of moved ranks.
    fn replace_first(
        &self,
        kept: &mut Vec<Row>,
        row: Row,
    ) -> riffle::Result<Option<Vec<Change<Row>>>> {
        let Some(first) = kept.first_mut() else {
            let change = Change::insert(self.output(&row, 1)?);
            kept.push(row);
            return Ok(Some(vec![change]));
        };
        if self.compare(first, &row).is_le() {
            return Ok(None);
        }
        let old = std::mem::replace(first, row);
        let now = self.output(first, 1)?;
        Ok(Some(vec![
            Change::update_before(self.output_owned(old, 1)?),
            Change::update_after(now),
        ]))
    }
}

/// The scans of one statement's plan, by table: a table read twice (a join of two views of
/// it, Nexmark's `auction` and `bid`) is read once, its rows going to both readers (as Flink
/// reuses a scan), and only what its readers read of it is decoded.
struct Scans<'a> {
    /// Where the statement's jobs run (its keyed steps' exchanges, its tables' connectors).
    placement: &'a Placement,
    built: std::cell::RefCell<HashMap<String, DataStream<Row>>>,
    reads: HashMap<String, Option<Vec<Place>>>,
    /// The columns of projections no one reads ([`Reads::unread`]).
    unread: HashMap<usize, Vec<usize>>,
    /// Window aggregations computed once for every reader, by what they compute (see
    /// [`window_digest`]): Nexmark q5's two equal `HOP` counts are one operator (as Flink
    /// reuses a sub-plan).
    windows: std::cell::RefCell<HashMap<String, WindowResults>>,
}

/// The results of a window aggregation: per key and window, the aggregates' values.
type WindowResults = DataStream<WindowResult<Row, Vec<Value>>>;

/// What a window aggregation computes, as text, when two plans that give the same text are
/// sure to compute the same results: its window, keys and aggregates over an input of scans,
/// filters and projections only (whose `EXPLAIN` says all they do). `None` otherwise (an
/// input with other steps, late rows to a table), and the aggregation is not shared.
fn window_digest(plan: &Plan) -> Option<String> {
    let Plan::WindowAggregate {
        input,
        window,
        processing_time,
        late: None,
        keys,
        texts,
        ..
    } = plan
    else {
        return None;
    };
    let mut node: &Plan = input;
    loop {
        match node {
            Plan::Filter { input, .. } | Plan::Project { input, .. } => node = input,
            Plan::Scan { .. } => break,
            _ => return None,
        }
    }
    Some(format!(
        "{window} {processing_time} keys {keys} {texts:?}\n{}",
        input.explain()
    ))
}

/// The rows of `plan`, as a stream of `env`.
pub fn lower(plan: &Plan, env: &StreamEnv) -> Result<Rows> {
    lower_placed(plan, env, &Placement::default())
}

/// [`lower`], the jobs placed by `placement` (in a group of processes: [`crate::placement`]).
pub(crate) fn lower_placed(plan: &Plan, env: &StreamEnv, placement: &Placement) -> Result<Rows> {
    let mut reads = Reads::default();
    scan_reads(plan, None, &mut reads);
    let scans = Scans {
        placement,
        built: Default::default(),
        reads: reads.tables,
        unread: reads.unread,
        windows: Default::default(),
    };
    lower_in(plan, env, &scans)
}

/// Whether `plan`'s rows pass a keyed step (or an upsert table's normalization) on their way
/// to its root: in a group of processes, a repartition topic.
fn exchanged(plan: &Plan) -> bool {
    match plan {
        Plan::WindowAggregate { .. }
        | Plan::GroupAggregate { .. }
        | Plan::TopN { .. }
        | Plan::Join { .. }
        | Plan::OverAggregate { .. }
        | Plan::MatchRecognize { .. } => true,
        Plan::Scan { table, .. } => {
            table.options.get("connector").map(String::as_str) == Some("upsert-kafka")
        }
        other => other.inputs().into_iter().any(exchanged),
    }
}

/// What a statement's plan reads ([`scan_reads`]).
#[derive(Default)]
struct Reads {
    /// The places of each table's physical columns read, by table (`None`: all of them).
    tables: HashMap<String, Option<Vec<Place>>>,
    /// The columns of each projection that nothing above it reads, by the projection's address:
    /// they are left `NULL` instead of computed (a join then keeps only what is read of its
    /// rows).
    unread: HashMap<usize, Vec<usize>>,
}

/// What `plan` reads, given the places of its output its reader reads (`above`): the places
/// of its tables' physical columns, and the columns of its projections no one reads. Only what
/// is known for certain is left out: a step whose rows pass on whole (a lookup join,
/// `MATCH_RECOGNIZE`) reads all; a Top-N reads its keys, its order and its output; a join reads
/// its keys and what is read of its output.
fn scan_reads(plan: &Plan, above: Option<Vec<Place>>, out: &mut Reads) {
    let union = |exprs: &mut dyn Iterator<Item = &Typed>| -> Option<Vec<Place>> {
        let mut places = Vec::new();
        for expr in exprs {
            places.extend(expr.reads.as_ref()?.iter().copied());
        }
        Some(places)
    };
    match plan {
        Plan::Scan {
            table,
            physical,
            computed,
            time,
            ..
        } => {
            // Every computed column is computed for every row: what they read is read.
            let needed = above.and_then(|above| {
                let mut places = union(&mut computed.iter())?;
                let time = time.as_ref().map(|t| Place::Column(t.column));
                for place in above.into_iter().chain(time) {
                    let column = match place {
                        Place::Column(c) | Place::Field(c, _) => c,
                    };
                    match column.checked_sub(physical.len()) {
                        None => places.push(place),
                        Some(k) => places.extend(computed.get(k)?.reads.as_ref()?.iter().copied()),
                    }
                }
                Some(places)
            });
            let merged = match (out.tables.remove(&table.name), needed) {
                // First reader of the table.
                (None, needed) => needed,
                (Some(Some(mut before)), Some(now)) => {
                    before.extend(now);
                    Some(before)
                }
                _ => None,
            };
            out.tables.insert(table.name.clone(), merged);
        }
        Plan::Filter {
            input, predicate, ..
        } => {
            let needed = above.and_then(|mut above| {
                above.extend(predicate.reads.as_ref()?.iter().copied());
                Some(above)
            });
            scan_reads(input, needed, out);
        }
        Plan::Project { input, exprs, .. } => {
            // Only the columns read above are computed: the others are left `NULL`.
            let read = above.as_ref().map(|places| columns_of(places));
            if let Some(read) = &read {
                let unread: Vec<usize> = (0..exprs.len()).filter(|i| !read.contains(i)).collect();
                if !unread.is_empty() {
                    out.unread.insert(plan as *const Plan as usize, unread);
                }
            }
            let mut used = exprs
                .iter()
                .enumerate()
                .filter(|(i, _)| read.as_ref().is_none_or(|read| read.contains(i)))
                .map(|(_, e)| e);
            scan_reads(input, union(&mut used), out)
        }
        Plan::WindowAggregate {
            input, pre, late, ..
        } => {
            let late = late.iter().flat_map(|(_, columns)| columns);
            scan_reads(input, union(&mut pre.iter().chain(late)), out);
        }
        Plan::GroupAggregate { input, pre, .. } | Plan::OverAggregate { input, pre, .. } => {
            scan_reads(input, union(&mut pre.iter()), out)
        }
        Plan::Union { inputs, .. } => {
            for input in inputs {
                scan_reads(input, above.clone(), out);
            }
        }
        Plan::TopN {
            input,
            partition,
            order,
            project,
            ..
        } => {
            // The rows kept are compared (ties) by the columns they carry: a column nothing
            // reads is `NULL` in every row, so two rows it alone told apart give the same
            // output whichever is kept.
            let mut read = partition.iter().chain(order.iter().map(|(e, _)| e));
            let needed = union(&mut read.by_ref().chain(project.iter()));
            scan_reads(input, needed, out)
        }
        Plan::LookupJoin { input, .. } | Plan::MatchRecognize { input, .. } => {
            scan_reads(input, None, out)
        }
        Plan::Join {
            left,
            right,
            left_keys,
            right_keys,
            ..
        } => {
            // Each side: what is read of its columns above, and its keys (Flink's projection
            // push-down through a join: the join keeps only what is read of its rows).
            let left_len = left.schema().len();
            let side = |keys: &[Typed], on_side: &dyn Fn(usize) -> Option<usize>| {
                let mut places = union(&mut keys.iter())?;
                for place in above.as_ref()? {
                    match *place {
                        Place::Column(c) => places.extend(on_side(c).map(Place::Column)),
                        Place::Field(c, f) => places.extend(on_side(c).map(|c| Place::Field(c, f))),
                    }
                }
                Some(places)
            };
            let on_left = |c: usize| (c < left_len).then_some(c);
            let on_right = |c: usize| c.checked_sub(left_len);
            scan_reads(left, side(left_keys, &on_left), out);
            scan_reads(right, side(right_keys, &on_right), out);
        }
    }
}

/// The columns of `places`.
fn columns_of(places: &[Place]) -> std::collections::BTreeSet<usize> {
    places
        .iter()
        .map(|place| match *place {
            Place::Column(c) | Place::Field(c, _) => c,
        })
        .collect()
}

/// `physical` as a scan decodes it when only `reads` of it are read: the fields read by no one
/// (a column, or a field of a `ROW` column) renamed behind [`UNREAD`] (see [`unread_name`]),
/// a name no input has, so that a format skips them and leaves them `NULL`.
fn pruned(physical: &Schema, reads: &[Place]) -> Schema {
    let unread = |field: &crate::types::Field| crate::types::Field {
        name: format!("{UNREAD}{}", field.name),
        ..field.clone()
    };
    let fields = physical
        .fields
        .iter()
        .enumerate()
        .map(|(c, field)| {
            if reads.contains(&Place::Column(c)) {
                return field.clone();
            }
            let read_fields: Vec<usize> = reads
                .iter()
                .filter_map(|place| match place {
                    Place::Field(column, f) if *column == c => Some(*f),
                    _ => None,
                })
                .collect();
            match &field.ty {
                _ if read_fields.is_empty() => unread(field),
                DataType::Row(inner) => crate::types::Field {
                    ty: DataType::Row(
                        inner
                            .iter()
                            .enumerate()
                            .map(|(f, inner)| match read_fields.contains(&f) {
                                true => inner.clone(),
                                false => unread(inner),
                            })
                            .collect(),
                    ),
                    ..field.clone()
                },
                _ => field.clone(),
            }
        })
        .collect();
    Schema::new(fields)
}

/// The start of the name of a field no one reads, in the schema a scan decodes (see
/// [`pruned`]); its own name follows.
pub(crate) const UNREAD: &str = "\u{0}unread:";

/// The name in the input of a field of a decoded schema, and whether anyone reads it: a JSON
/// reader matches the keys of unread fields in place and skips their values.
#[inline]
pub(crate) fn unread_name(name: &str) -> Option<&str> {
    // Most names are read: one byte tells.
    match name.as_bytes().first() {
        Some(0) => name.strip_prefix(UNREAD),
        _ => None,
    }
}

/// [`lower`], sharing the statement's `scans`.
fn lower_in(plan: &Plan, env: &StreamEnv, scans: &Scans) -> Result<Rows> {
    let lower = |plan: &Plan, env: &StreamEnv| lower_in(plan, env, scans);
    let append =
        |plan: &Plan| -> Result<DataStream<Row>> { lower(plan, env)?.into_append("an aggregate") };
    Ok(match plan {
        Plan::Scan {
            table,
            physical,
            computed,
            time,
            ..
        } => {
            if connectors::is_changelog(table) {
                // Its every column decoded: the key's are needed to normalize the upserts.
                return Ok(Rows::Changelog(connectors::changelog_scan_in(
                    scans.placement,
                    env,
                    table,
                    physical,
                    computed.clone(),
                    time.clone(),
                )?));
            }
            if let Some(rows) = scans.built.borrow().get(&table.name) {
                return Ok(Rows::Append(rows.clone()));
            }
            let read = match scans.reads.get(&table.name) {
                Some(Some(reads)) => pruned(physical, reads),
                _ => physical.clone(),
            };
            let rows = connectors::scan_in(
                scans.placement,
                env,
                table,
                physical,
                &read,
                computed.clone(),
                time.clone(),
            )?;
            scans
                .built
                .borrow_mut()
                .insert(table.name.clone(), rows.clone());
            Rows::Append(rows)
        }
        Plan::Filter { .. } | Plan::Project { .. } => {
            // Consecutive filters and projections run as one step: one call per row, no
            // emit between them.
            let mut steps = Vec::new();
            let mut node = plan;
            loop {
                match node {
                    Plan::Filter {
                        input, predicate, ..
                    } => {
                        steps.push(Calc::Filter(predicate.eval.clone()));
                        node = input;
                    }
                    Plan::Project { input, exprs, .. } => {
                        let unread = (scans.unread)
                            .get(&(node as *const Plan as usize))
                            .map_or(&[][..], Vec::as_slice);
                        // `SELECT *` over a step (the row as it is: q18's and q19's outer
                        // query) computes nothing: the step keeps its name, not its work.
                        let as_it_is =
                            unread.is_empty() && reads_row_as_it_is(exprs, input.schema().len());
                        steps.push(match as_it_is {
                            true => Calc::AsItIs,
                            false => Calc::Project(Projection::leaving_null(exprs, unread)),
                        });
                        node = input;
                    }
                    _ => break,
                }
            }
            steps.reverse();
            let name: Vec<&str> = steps
                .iter()
                .map(|step| match step {
                    Calc::Filter(_) => "Filter",
                    Calc::Project(_) | Calc::AsItIs => "Calc",
                })
                .collect();
            let calc = CalcRows::new(steps);
            let name = name.join(" -> ");
            match lower(node, env)? {
                Rows::Append(rows) => Rows::Append(rows.transform(&name, move || calc.clone())),
                changes => changes.flat_map_rows(&name, move |row| calc.owned(row)),
            }
        }
        Plan::WindowAggregate {
            input,
            window,
            processing_time,
            late,
            pre,
            keys,
            aggs,
            post,
            having,
            ..
        } => {
            if !*processing_time && exchanged(input) {
                scans.placement.event_time_once("a window aggregation")?;
            }
            // The late rows' table's columns ride along after the aggregates' arguments.
            let late_from = pre.len();
            let mut pre = pre.clone();
            if let Some((_, columns)) = late {
                pre.extend(columns.iter().cloned());
            }
            let pre = Projection::new(&pre);
            let output = Output::new(post, having.as_ref(), keys + 3 + aggs.len());
            let key_count = *keys;
            let ms = |ms: &i64| Duration::from_millis(*ms as u64);
            let windows = match (window, *processing_time) {
                (WindowKind::Tumble { size }, false) => Tumbling::of(ms(size)),
                (WindowKind::Tumble { size }, true) => Tumbling::processing_time(ms(size)),
                (WindowKind::Hop { slide, size }, false) => Sliding::of(ms(size), ms(slide)),
                (WindowKind::Hop { slide, size }, true) => {
                    Sliding::processing_time(ms(size), ms(slide))
                }
                (WindowKind::Cumulate { step, size }, false) => Cumulating::of(ms(size), ms(step)),
                (WindowKind::Cumulate { step, size }, true) => {
                    Cumulating::processing_time(ms(size), ms(step))
                }
                (WindowKind::Session { gap }, false) => Session::with_gap(ms(gap)),
                (WindowKind::Session { gap }, true) => Session::processing_time(ms(gap)),
            };
            let aggregates = RowAggregates::new(aggs.clone());
            let late_tag = riffle::operators::OutputTag::<Row>::new("late-rows");
            let digest = window_digest(plan);
            let shared = digest
                .as_ref()
                .and_then(|d| scans.windows.borrow().get(d).cloned());
            let results = match shared {
                Some(results) => results,
                None => {
                    let keyed = append(input)?
                        .try_map(move |row: Row| pre.apply(row))
                        .name("Pre-aggregate")
                        .key_by(move |row: &Row| Row(row.0[..key_count].to_vec()));
                    // Sliding windows as slices, as Flink SQL keeps them: a row is added once,
                    // not once per window (SQL's aggregates merge as they add).
                    let mut windowed = scans
                        .placement
                        .exchange(keyed, "window")
                        .window(windows)
                        .sliced();
                    if late.is_some() {
                        windowed = windowed.side_output_late(&late_tag);
                    }
                    let results = windowed.aggregate(aggregates);
                    if let Some(digest) = digest {
                        scans.windows.borrow_mut().insert(digest, results.clone());
                    }
                    results
                }
            };
            if let Some((table, _)) = late {
                let late_rows = results
                    .get_side_output(&late_tag)
                    .map(move |mut row: Row| Row(row.0.split_off(late_from)))
                    .name("Late rows");
                connectors::sink_in(
                    scans.placement,
                    Rows::Append(late_rows),
                    table,
                    &sink_schema(table),
                )?;
            }
            Rows::Append(
                results
                    .process(move |result, ctx| {
                        let riffle::window::WindowResult {
                            key,
                            window_start,
                            window_end,
                            value,
                            ..
                        } = result;
                        let mut aggregated = key.0;
                        aggregated.reserve(3 + value.len());
                        aggregated.push(Value::Timestamp(window_start));
                        aggregated.push(Value::Timestamp(window_end));
                        aggregated.push(Value::Timestamp(window_end - 1));
                        aggregated.extend(value);
                        match output.of(Row(aggregated))? {
                            Some(row) => ctx.emit(row),
                            None => Ok(()),
                        }
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
            having,
            ttl,
            ..
        } => {
            let pre = Projection::new(pre);
            let post = Output::new(post, having.as_ref(), keys + aggs.len());
            let key_count = *keys;
            if input.changelog_mode() == ChangelogMode::Retract {
                return Ok(Rows::Changelog(retracting_aggregate(
                    scans.placement,
                    lower(input, env)?.into_changelog(),
                    pre,
                    key_count,
                    RetractingAggregates {
                        specs: aggs.clone(),
                    },
                    post,
                    *ttl,
                )));
            }
            // The values of the `COUNT(DISTINCT ..)`s: in a store (RocksDB), a map state, one
            // entry per value (the groups live as long as the job), their accumulators
            // counting; on the heap, in the accumulator, changed in place.
            let distinct = DistinctGroups::of(aggs);
            let in_map = SeenInMap::new(aggs.clone());
            let mut in_acc = AggregatingStateDescriptor::new(
                "group-aggregate",
                RowAggregates::new(aggs.clone()),
            );
            // The same accumulators, as a value (in a store, with the values in a map).
            let mut counts = ValueStateDescriptor::<Vec<Acc>>::new("group-aggregate");
            let mut seen =
                MapStateDescriptor::<DistinctValue, u64>::new("group-aggregate-distinct");
            if let Some(ttl) = ttl {
                in_acc = in_acc.with_ttl(StateTtl::after_write(*ttl));
                counts = counts.with_ttl(StateTtl::after_write(*ttl));
                seen = seen.with_ttl(StateTtl::after_write(*ttl));
            }
            let (in_acc, counts, seen) = (Arc::new(in_acc), Arc::new(counts), Arc::new(seen));
            // The output row of a key from its aggregates' results (`None`: HAVING drops it).
            let output = move |key: &Row, results: Vec<Value>| -> riffle::Result<Option<Row>> {
                post.of(key_and(key, results))
            };
            let keyed = append(input)?
                .try_map(move |row: Row| pre.apply(row))
                .name("Pre-aggregate")
                .key_by(move |row: &Row| Row(row.0[..key_count].to_vec()));
            let changes = scans
                .placement
                .exchange(keyed, "group-aggregate")
                .process(move |key: &Row, row: Row, ctx| {
                    let (before, after) = if distinct.is_empty() || !ctx.state_in_store() {
                        ctx.aggregating(&in_acc).add_and_get(&row)?
                    } else {
                        let marked = distinct.mark(row, |value, mask| {
                            ctx.map(&seen).modify(
                                value,
                                || 0,
                                |bits| {
                                    let new = mask & !*bits;
                                    *bits |= mask;
                                    new
                                },
                            )
                        })?;
                        let fresh = std::cell::Cell::new(false);
                        let (before, after, held) = ctx.value(&counts).modify(
                            || {
                                fresh.set(true);
                                in_map.create()
                            },
                            |accs| in_map.add_and_get(accs, &marked, fresh.get()),
                        )?;
                        // Values an accumulator of before held itself (a savepoint's).
                        for (value, bits) in held {
                            ctx.map(&seen).modify(value, || 0, |seen| *seen |= bits)?;
                        }
                        (before, after)
                    };
                    let after = output(key, after)?;
                    let before = before.map(|b| output(key, b)).transpose()?.flatten();
                    emit_group_change(before, after, ctx)
                })
                .name("GroupAggregate");
            match plan.changelog_mode() {
                // SELECT DISTINCT: only inserts.
                ChangelogMode::Append => Rows::Append(changes.map(|c| c.row).name("Distinct rows")),
                ChangelogMode::Retract => Rows::Changelog(changes),
            }
        }
        Plan::Union { inputs, .. } => {
            let lowered = inputs
                .iter()
                .map(|input| lower(input, env))
                .collect::<Result<Vec<Rows>>>()?;
            if lowered.iter().all(|rows| matches!(rows, Rows::Append(_))) {
                let streams: Vec<DataStream<Row>> = lowered
                    .into_iter()
                    .filter_map(|rows| match rows {
                        Rows::Append(rows) => Some(rows),
                        Rows::Changelog(_) => None,
                    })
                    .collect();
                let others: Vec<&DataStream<Row>> = streams[1..].iter().collect();
                Rows::Append(streams[0].union(&others))
            } else {
                let streams: Vec<DataStream<Change<Row>>> =
                    lowered.into_iter().map(Rows::into_changelog).collect();
                let others: Vec<&DataStream<Change<Row>>> = streams[1..].iter().collect();
                Rows::Changelog(streams[0].union(&others))
            }
        }
        Plan::OverAggregate {
            input,
            pre,
            partitions,
            descending,
            aggs,
            preceding,
            outputs,
            ..
        } => {
            let pre = Projection::new(pre);
            let over = Over {
                partitions: *partitions,
                descending: descending.clone(),
                aggregates: RowAggregates::new(aggs.clone()),
                preceding: *preceding,
                outputs: outputs.clone(),
            };
            let rows = Arc::new(RowsState::new("over-rows"));
            let key_count = *partitions;
            let keyed = lower(input, env)?
                .into_changelog()
                .try_map(move |change: Change<Row>| -> riffle::Result<Change<Row>> {
                    Ok(Change::new(change.op, pre.apply(change.row)?))
                })
                .name("Pre-over")
                .key_by(move |change: &Change<Row>| Row(change.row.0[..key_count].to_vec()));
            Rows::Changelog(
                scans
                    .placement
                    .exchange(keyed, "over")
                    .process(move |_: &Row, change: Change<Row>, ctx| {
                        let mut state = ctx.value(&rows);
                        let mut kept = state.get()?.unwrap_or_default();
                        let changes = over.apply(&mut kept, change);
                        if changes.is_empty() {
                            return Ok(());
                        }
                        if kept.is_empty() {
                            state.clear()?;
                        } else {
                            state.set(kept)?;
                        }
                        drop(state);
                        for change in changes {
                            ctx.emit(change)?;
                        }
                        Ok(())
                    })
                    .name("OverAggregate"),
            )
        }
        Plan::LookupJoin {
            input,
            table,
            kind,
            left_keys,
            right_keys,
            schema,
            ..
        } => {
            let table_schema = crate::lower::sink_schema(table);
            let mut lookup: HashMap<Row, Vec<Row>> = HashMap::new();
            for row in connectors::read_bounded(table, &table_schema)? {
                let key = eval_all_now(right_keys, &row)?;
                // A NULL key matches nothing.
                if !key.0.iter().any(Value::is_null) {
                    lookup.entry(key).or_default().push(row);
                }
            }
            let lookup = Arc::new(lookup);
            let keys: Vec<Eval> = left_keys.iter().map(|k| k.eval.clone()).collect();
            let (width, outer) = (schema.len(), *kind == JoinType::Left);
            let joined = move |row: &Row| -> riffle::Result<Vec<Row>> {
                let key = eval_all(&keys, row)?;
                let matches = match key.0.iter().any(Value::is_null) {
                    true => None,
                    false => lookup.get(&key),
                };
                let pair = |other: Option<&Row>| {
                    let mut values = Vec::with_capacity(width);
                    values.extend(row.0.iter().cloned());
                    match other {
                        Some(other) => values.extend(other.0.iter().cloned()),
                        None => values.resize_with(width, || Value::Null),
                    }
                    Row(values)
                };
                Ok(match matches {
                    Some(rows) => rows.iter().map(|other| pair(Some(other))).collect(),
                    None if outer => vec![pair(None)],
                    None => Vec::new(),
                })
            };
            match lower(input, env)? {
                Rows::Append(rows) => Rows::Append(
                    rows.process(move |row: Row, ctx| {
                        for out in joined(&row)? {
                            ctx.emit(out)?;
                        }
                        Ok(())
                    })
                    .name("LookupJoin"),
                ),
                Rows::Changelog(changes) => Rows::Changelog(
                    changes
                        .process(move |change: Change<Row>, ctx| {
                            for out in joined(&change.row)? {
                                ctx.emit(Change::new(change.op, out))?;
                            }
                            Ok(())
                        })
                        .name("LookupJoin"),
                ),
            }
        }
        Plan::Join {
            left,
            right,
            kind,
            left_keys,
            right_keys,
            ttl,
            ..
        } => {
            let kind = *kind;
            let (left_len, right_len) = (left.schema().len(), right.schema().len());
            if left.changelog_mode() == ChangelogMode::Retract
                || right.changelog_mode() == ChangelogMode::Retract
            {
                let pair = move |l: Option<&(Row, Row)>, r: Option<&(Row, Row)>| {
                    let mut values = Vec::with_capacity(left_len + right_len);
                    match l {
                        Some((_, row)) => values.extend(row.0.iter().cloned()),
                        None => values.resize_with(left_len, || Value::Null),
                    }
                    match r {
                        Some((_, row)) => values.extend(row.0.iter().cloned()),
                        None => values.resize_with(left_len + right_len, || Value::Null),
                    }
                    Row(values)
                };
                return Ok(Rows::Changelog(changelog_join(
                    scans.placement,
                    [
                        (lower(left, env)?.into_changelog(), left_keys),
                        (lower(right, env)?.into_changelog(), right_keys),
                    ],
                    kind,
                    *ttl,
                    pair,
                )));
            }
            // Rows of appended inputs are kept packed (see `kept`): the join keeps them all.
            let pair = move |l: Option<&JoinRow>, r: Option<&JoinRow>| {
                let mut values = Vec::with_capacity(left_len + right_len);
                match l {
                    Some(row) => row.extend_into(&mut values),
                    None => values.resize_with(left_len, || Value::Null),
                }
                match r {
                    Some(row) => row.extend_into(&mut values),
                    None => values.resize_with(left_len + right_len, || Value::Null),
                }
                Row(values)
            };
            let keyed = |plan: &Plan, keys: &[Typed], name: &str| -> Result<DataStream<JoinRow>> {
                let keys: Vec<Eval> = keys.iter().map(|k| k.eval.clone()).collect();
                // A NULL key matches nothing: an inner join drops the row, an outer join keys
                // it apart (a key no other row has), so that it is emitted padded.
                let outer = kind != JoinType::Inner;
                Ok(append(plan)?
                    .process(move |row: Row, ctx| {
                        let key = eval_all(&keys, &row)?;
                        match key.0.iter().any(Value::is_null) {
                            false => ctx.emit(JoinRow::Fresh(key, row)),
                            true if outer => ctx.emit(JoinRow::Fresh(unmatched_key(), row)),
                            true => Ok(()),
                        }
                    })
                    .name(name))
            };
            let (left, right) = scans.placement.exchange_join(
                keyed(left, left_keys, "Join keys (left)")?,
                keyed(right, right_keys, "Join keys (right)")?,
                JoinRow::key,
            );
            let mut join = left
                .join_regular(&right)
                .join_type(kind)
                .keep_rows_as(JoinRow::packed, JoinRow::packed);
            if let Some(ttl) = ttl {
                join = join.with_state_ttl(*ttl);
            }
            let joined = join.apply(pair);
            match kind {
                // An inner join of appended rows only inserts.
                JoinType::Inner => Rows::Append(joined.map(|change| change.row).name("Join rows")),
                _ => Rows::Changelog(joined),
            }
        }
        Plan::MatchRecognize { input, spec, .. } => {
            if !spec.processing_time && exchanged(input) {
                scans.placement.event_time_once("MATCH_RECOGNIZE")?;
            }
            // Each row is carried with its partition key, computed once before the shuffle
            // (where an error can fail the job).
            let keys: Vec<Eval> = spec.partition.iter().map(|e| e.eval.clone()).collect();
            let keyed = append(input)?
                .try_map(move |row: Row| -> riffle::Result<(Row, Row)> {
                    Ok((eval_all(&keys, &row)?, row))
                })
                .name("Pre-match")
                .key_by(|(key, _): &(Row, Row)| key.clone());
            let mut matched = scans
                .placement
                .exchange(keyed, "match")
                .pattern(spec.pattern());
            if spec.processing_time {
                matched = matched.in_processing_time();
            }
            Rows::Append(
                matched
                    .process(crate::recognize::Output(spec.clone()))
                    .name("MatchRecognize"),
            )
        }
        Plan::TopN {
            input,
            partition,
            order,
            limit,
            project,
            rank_at,
            ttl,
            ..
        } => {
            // Each input row is carried as [partition keys.., order keys.., the row's columns..]:
            // the keys are computed once, before the shuffle (where an error can fail the job).
            let keys: Vec<Eval> = partition.iter().map(|e| e.eval.clone()).collect();
            let orders: Vec<Eval> = order.iter().map(|(e, _)| e.eval.clone()).collect();
            let top = TopN {
                keys: keys.len(),
                descending: order.iter().map(|(_, desc)| *desc).collect(),
                limit: *limit,
                project: project.iter().map(|e| e.eval.clone()).collect(),
                columns: crate::plan::columns_as_they_are(project),
                rank_at: *rank_at,
            };
            let mut rows = RowsState::new("top-n");
            if let Some(ttl) = ttl {
                rows = rows.with_ttl(StateTtl::after_write(*ttl));
            }
            let rows = Arc::new(rows);
            let key_count = keys.len();
            let carried = append(input)?
                .try_map(move |row: Row| -> riffle::Result<Row> {
                    let mut carried = Vec::with_capacity(keys.len() + orders.len() + row.0.len());
                    for eval in keys.iter().chain(&orders) {
                        carried.push(eval(&row)?);
                    }
                    carried.extend(row.0);
                    Ok(Row(carried))
                })
                .name("Pre-rank");
            // Rows partitioned by the partition keys already (a join on them) stay where they
            // are: the Top-N runs in the join's task.
            let in_place = input.partitioned_by_exprs(partition);
            let keyed = scans.placement.keyed(
                carried,
                move |row: &Row| Row(row.0[..key_count].to_vec()),
                in_place,
                "rank",
            );
            Rows::Changelog(
                keyed
                    .process(move |_: &Row, row: Row, ctx| {
                        // One lookup: a row that does not get in leaves the partition as it
                        // was, and nothing is written (a TTL after write is not refreshed).
                        let Some(changes) = ctx
                            .value(&rows)
                            .modify_if(Vec::new, |kept| top.insert(kept, row).transpose())?
                        else {
                            return Ok(());
                        };
                        let changes = changes?;
                        for change in changes {
                            ctx.emit(change)?;
                        }
                        Ok(())
                    })
                    .name(if *limit == 1 { "Deduplicate" } else { "TopN" }),
            )
        }
    })
}

/// A regular join of two changelogs (at least one updating): each side's changes carried with
/// their join keys, keyed by them, and joined by the core's changelog join (a retracted row
/// takes back its side's equal row and retracts its results). A row whose key has a `NULL`
/// matches nothing: an inner join drops its changes, an outer join keys them by the row itself
/// and its side (so that its retraction finds it, and no row of the other side shares it).
fn changelog_join(
    placement: &Placement,
    [(left, left_keys), (right, right_keys)]: [(DataStream<Change<Row>>, &Vec<Typed>); 2],
    kind: JoinType,
    ttl: Option<Duration>,
    pair: impl Fn(Option<&(Row, Row)>, Option<&(Row, Row)>) -> Row + Send + Sync + 'static,
) -> DataStream<Change<Row>> {
    let keyed = |changes: DataStream<Change<Row>>, keys: &[Typed], side: i64, name: &str| {
        let keys: Vec<Eval> = keys.iter().map(|k| k.eval.clone()).collect();
        let outer = kind != JoinType::Inner;
        changes
            .process(move |change: Change<Row>, ctx| {
                let key = eval_all(&keys, &change.row)?;
                let key = match key.0.iter().any(Value::is_null) {
                    false => key,
                    true if outer => {
                        let mut apart = vec![Value::Null, Value::Int(side)];
                        apart.extend(change.row.0.iter().cloned());
                        Row(apart)
                    }
                    true => return Ok(()),
                };
                ctx.emit(Change::new(change.op, (key, change.row)))
            })
            .name(name)
    };
    let (left, right) = placement.exchange_join(
        keyed(left, left_keys, 0, "Join keys (left)"),
        keyed(right, right_keys, 1, "Join keys (right)"),
        |change: &Change<(Row, Row)>| change.row.0.clone(),
    );
    let mut join = left.join_regular(&right).join_type(kind);
    if let Some(ttl) = ttl {
        join = join.with_state_ttl(ttl);
    }
    join.apply_changelog(pair)
}

/// What a group's row did when a row of it came: nothing, appeared (`+I`), went (`-D`: `HAVING`
/// no longer keeps it, or its every row was retracted) or changed (`-U`, `+U`); an unchanged
/// result is not sent again (as in Flink).
fn emit_group_change(
    before: Option<Row>,
    after: Option<Row>,
    ctx: &mut riffle::operators::KeyedContext<'_, '_, Row, Change<Row>>,
) -> riffle::Result<()> {
    match (before, after) {
        (None, None) => Ok(()),
        (None, Some(after)) => ctx.emit(Change::insert(after)),
        (Some(before), None) => ctx.emit(Change::delete(before)),
        (Some(before), Some(after)) if before == after => Ok(()),
        (Some(before), Some(after)) => {
            ctx.emit(Change::update_before(before))?;
            ctx.emit(Change::update_after(after))
        }
    }
}

/// A `GROUP BY` over an updating input: each change's row pre-computed (keys, arguments,
/// filters), keyed by the group, and added to (`+I`, `+U`) or taken back out of (`-U`, `-D`)
/// the group's accumulators, one declared aggregating state per key; a group whose every row
/// was taken back is deleted and its state cleared. A retraction of a group the operator does
/// not hold (its state expired) changes nothing.
fn retracting_aggregate(
    placement: &Placement,
    changes: DataStream<Change<Row>>,
    pre: Projection,
    key_count: usize,
    aggregates: RetractingAggregates,
    post: Output,
    ttl: Option<std::time::Duration>,
) -> DataStream<Change<Row>> {
    let mut accumulators = AggregatingStateDescriptor::new("group-aggregate", aggregates);
    if let Some(ttl) = ttl {
        accumulators = accumulators.with_ttl(StateTtl::after_write(ttl));
    }
    let accumulators = Arc::new(accumulators);
    let output = move |key: &Row, results: Option<Vec<Value>>| -> riffle::Result<Option<Row>> {
        let Some(results) = results else {
            return Ok(None);
        };
        post.of(key_and(key, results))
    };
    let keyed = changes
        .try_map(move |change: Change<Row>| -> riffle::Result<Change<Row>> {
            Ok(Change::new(change.op, pre.apply(change.row)?))
        })
        .name("Pre-aggregate")
        .key_by(move |change: &Change<Row>| Row(change.row.0[..key_count].to_vec()));
    placement
        .exchange(keyed, "group-aggregate")
        .process(move |key: &Row, change: Change<Row>, ctx| {
            let (before, after) = {
                let mut state = ctx.aggregating(&accumulators);
                let (before, after) = if change.op.is_retract() {
                    // A retraction of a group not held (its state expired) changes nothing.
                    let Some(before) = state.get()? else {
                        return Ok(());
                    };
                    state.add(&change)?;
                    (Some(before), state.get()?.flatten())
                } else {
                    state.add_and_get(&change)?
                };
                if after.is_none() {
                    state.clear()?;
                }
                (before.flatten(), after)
            };
            let before = output(key, before)?;
            let after = output(key, after)?;
            emit_group_change(before, after, ctx)
        })
        .name("GroupAggregate")
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
    insert_placed(env, table, plan, &Placement::default())
}

/// [`insert`], the job placed by `placement` (in a group of processes: [`crate::placement`]).
pub(crate) fn insert_placed(
    env: &StreamEnv,
    table: &TableDef,
    plan: &Plan,
    placement: &Placement,
) -> Result<()> {
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
            place: Some(crate::expr::Place::Column(index)),
            reads: Some(vec![crate::expr::Place::Column(index)]),
        };
        let cast = column.cast(&to.ty).map_err(|e| {
            SqlError::plan(format!(
                "INSERT INTO {}: column `{}` ({}) cannot be written as `{}` ({}): {}",
                table.name, from.name, from.ty, to.name, to.ty, e.message
            ))
        })?;
        casts.push((from.ty == to.ty, cast.eval));
    }
    let mut rows = lower_placed(plan, env, placement)?;
    // Only the columns whose type differs are cast, in place; the others stay where they are.
    let casts: Vec<(usize, Eval)> = casts
        .into_iter()
        .enumerate()
        .filter(|(_, (same, _))| !same)
        .map(|(index, (_, cast))| (index, cast))
        .collect();
    if !casts.is_empty() {
        rows = rows.flat_map_rows("Cast", move |mut row: Row| {
            for (index, cast) in &casts {
                let value = cast(&row)?;
                row.0[*index] = value;
            }
            Ok(Some(row))
        });
    }
    connectors::sink_in(placement, rows, table, &target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::DataType;
    use proptest::prelude::{Strategy as _, prop_assert, prop_assert_eq};

    /// An expression that reads `place` of the row.
    fn at(place: Place) -> Typed {
        Typed {
            ty: DataType::BigInt,
            nullable: true,
            eval: Arc::new(move |row: &Row| Ok(place.get(row))),
            name: None,
            column: None,
            place: Some(place),
            reads: Some(vec![place]),
        }
    }

    #[test]
    fn a_join_keeps_only_what_is_read_of_its_rows() {
        let mut catalog = crate::plan::Catalog::default();
        for ddl in [
            "CREATE TABLE t (k INT, id BIGINT, price BIGINT, note STRING, extra STRING) \
             WITH ('connector' = 'datagen')",
            "CREATE VIEW bids AS SELECT id, price, note, extra FROM t WHERE k = 2",
            "CREATE VIEW items AS SELECT id, note, extra FROM t WHERE k = 1",
        ] {
            catalog
                .define(crate::parse::parse_statement(ddl).unwrap())
                .unwrap();
        }
        let query = "SELECT i.note, MAX(b.price) FROM items i JOIN bids b ON i.id = b.id \
                     GROUP BY i.note";
        let crate::parse::Statement::Query(query) = crate::parse::parse_statement(query).unwrap()
        else {
            unreachable!()
        };
        let plan = catalog.plan_query(&query).unwrap();
        let mut reads = Reads::default();
        scan_reads(&plan, None, &mut reads);
        // The table: k (the views' filters), id (the keys), price and note (read above the
        // join); not extra.
        let table = reads.tables["t"].as_ref().expect("known columns");
        assert_eq!(
            columns_of(table).into_iter().collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        // The views' projections leave NULL what no one reads: bids' note and extra, items'
        // extra.
        let mut unread: Vec<Vec<usize>> = reads.unread.values().cloned().collect();
        unread.sort();
        assert_eq!(unread, [vec![2], vec![2, 3]]);
    }

    /// A column of a generated projection: a place, a computed row (`[column 0, 7]`), or
    /// `NULL` (unread).
    fn generated(kind: u8, column: usize, field: usize) -> Option<Typed> {
        Some(match kind {
            0 => at(Place::Column(column)),
            1 => at(Place::Field(column, field)),
            2 => Typed {
                eval: Arc::new(|row: &Row| Ok(Value::Row(vec![row.get(0).clone(), Value::Int(7)]))),
                place: None,
                reads: None,
                ..at(Place::Column(0))
            },
            _ => return None,
        })
    }

    /// A projection of generated columns ([`generated`]).
    fn generated_projection(columns: &[(u8, usize, usize)]) -> Projection {
        let exprs: Vec<Typed> = (columns.iter())
            .map(|&(kind, c, f)| generated(kind, c, f).unwrap_or_else(|| at(Place::Column(0))))
            .collect();
        let unread: Vec<usize> = (columns.iter().enumerate())
            .filter(|(_, (kind, ..))| generated(*kind, 0, 0).is_none())
            .map(|(i, _)| i)
            .collect();
        Projection::leaving_null(&exprs, &unread)
    }

    #[test]
    fn a_projection_keeping_columns_where_they_are_is_made_in_the_rows_vector() {
        // Column 0 stays; a computed row, column 3 moved to 2, a column taken twice, NULL.
        let columns = [
            (0, 0, 0),
            (2, 0, 0),
            (0, 3, 0),
            (0, 1, 0),
            (0, 1, 0),
            (9, 0, 0),
        ];
        let projection = generated_projection(&columns);
        assert!(projection.in_place);
        let row = Row(vec![
            Value::Int(1),
            Value::Int(2),
            Value::string("dropped"),
            Value::Int(4),
        ]);
        let pointer = row.0.as_ptr();
        let expected = Row(vec![
            Value::Int(1),
            Value::Row(vec![Value::Int(1), Value::Int(7)]),
            Value::Int(4),
            Value::Int(2),
            Value::Int(2),
            Value::Null,
        ]);
        assert_eq!(projection.apply_lent(&row).unwrap(), expected);
        let mut roomy = row.clone();
        roomy.0.reserve_exact(2);
        let pointer_roomy = roomy.0.as_ptr();
        let made = projection.apply(roomy).unwrap();
        assert_eq!(made, expected);
        assert_eq!(
            made.0.as_ptr(),
            pointer_roomy,
            "made in the row's own vector"
        );
        // Shorter output: the columns past it dropped, the vector kept.
        let short = generated_projection(&[(0, 0, 0), (0, 3, 0)]);
        let made = short.apply(row).unwrap();
        assert_eq!(made, Row(vec![Value::Int(1), Value::Int(4)]));
        assert_eq!(made.0.as_ptr(), pointer);
        // Nothing stays where it is: a new vector, as before.
        assert!(!generated_projection(&[(0, 1, 0), (0, 0, 0)]).in_place);
    }

    proptest::proptest! {
        /// A projection made one with the projection under it gives every row the two give,
        /// owned or lent; it is refused only for what it cannot take (a computed column, a
        /// field of a field or of a computed row, a computed column taken twice).
        #[test]
        fn two_projections_made_one_give_the_same_rows(
            row in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just(Value::Null),
                    (0i64..100).prop_map(Value::Int),
                    proptest::collection::vec((0i64..100).prop_map(Value::Int), 0..3)
                        .prop_map(Value::Row),
                ],
                0..4,
            ),
            room in 0usize..8,
            inner_columns in proptest::collection::vec((0u8..4, 0usize..4, 0usize..3), 0..6),
            outer_columns in proptest::collection::vec((0u8..4, 0usize..7, 0usize..3), 0..6),
        ) {
            let mut row = Row(row);
            row.0.reserve_exact(room);
            let inner = generated_projection(&inner_columns);
            let outer = generated_projection(&outer_columns);
            let two = outer.apply(inner.apply(row.clone()).unwrap()).unwrap();
            // Owned (taken apart, or made in a nested row's vector) as lent (copied).
            prop_assert_eq!(inner.apply(row.clone()).unwrap(), inner.apply_lent(&row).unwrap());
            match inner.then(&outer) {
                Some(one) => {
                    prop_assert_eq!(&one.apply(row.clone()).unwrap(), &two);
                    prop_assert_eq!(&one.apply_lent(&row).unwrap(), &two);
                }
                None => {
                    let field_of_unplaced = outer.steps.iter().any(|step| match step.place() {
                        Some(Place::Field(c, _)) => inner
                            .steps
                            .get(c)
                            .is_some_and(|s| !matches!(s.place(), Some(Place::Column(_)) | None) || matches!(s, Step::Compute(_))),
                        _ => false,
                    });
                    let computed_twice = (0..inner.steps.len()).any(|c| {
                        matches!(inner.steps[c], Step::Compute(_))
                            && outer.steps.iter().filter(|s| s.place().is_some_and(|p| match p {
                                Place::Column(d) => d == c,
                                Place::Field(..) => false,
                            })).count() > 1
                    });
                    prop_assert!(outer.computes || field_of_unplaced || computed_twice);
                }
            }
        }
    }

    /// [`TopN::insert`] with every output copied from the kept rows (as it was before the row
    /// pushed out gave its own): the reference.
    fn insert_by_copy(top: &TopN, kept: &mut Vec<Row>, row: Row) -> Option<Vec<Change<Row>>> {
        let at = top.position(kept, &row);
        if at >= top.limit {
            return None;
        }
        let before: Vec<Row> = (kept.iter().enumerate().skip(at).take(top.limit - at))
            .map(|(offset, old)| top.output(old, offset + 1).unwrap())
            .collect();
        kept.insert(at, row);
        kept.truncate(top.limit);
        let mut before = before.into_iter();
        let mut changes = Vec::new();
        for (offset, now) in kept[at..].iter().enumerate() {
            let now = top.output(now, at + offset + 1).unwrap();
            match before.next() {
                Some(old) => {
                    changes.push(Change::update_before(old));
                    changes.push(Change::update_after(now));
                }
                None => changes.push(Change::insert(now)),
            }
        }
        Some(changes)
    }

    proptest::proptest! {
        /// A Top-N's changes, the row pushed out of the partition moved into its `-U`, are the
        /// changes made by copying every output, for any rows, limit and output columns.
        #[test]
        fn a_top_n_moves_the_row_it_drops_into_its_retraction(
            rows in proptest::collection::vec((0i64..4, 0i64..3, "[a-c]{0,30}"), 1..30),
            limit in 1usize..4,
            columns in proptest::option::of(proptest::collection::vec(0usize..2, 1..4)),
            rank_at in 0usize..2,
        ) {
            let project: Vec<Eval> = vec![Arc::new(|row: &Row| Ok(Value::Row(row.0.clone())))];
            let top = TopN {
                keys: 1,
                descending: vec![true],
                limit,
                project,
                rank_at: rank_at.min(columns.as_ref().map_or(1, Vec::len)),
                columns,
            };
            let (mut kept, mut reference): (Vec<Row>, Vec<Row>) = (Vec::new(), Vec::new());
            for (partition, order, text) in rows {
                // Carried: [partition, order, the input row (order, text)].
                let row = Row(vec![
                    Value::Int(partition),
                    Value::Int(order),
                    Value::Int(order),
                    Value::string(text),
                ]);
                let expected = insert_by_copy(&top, &mut reference, row.clone());
                proptest::prop_assert_eq!(top.insert(&mut kept, row).unwrap(), expected);
                proptest::prop_assert_eq!(&kept, &reference);
            }
        }
    }

    #[test]
    fn a_view_of_a_nested_rows_fields_is_made_in_its_vector() {
        // `bid` (`SELECT bid.auction, bid.bidder, dateTime, bid.extra FROM datagen`): fields
        // 0, 1 and 3 of column 1 stay where they are, column 2 replaces field 2.
        let view = generated_projection(&[(1, 1, 0), (1, 1, 1), (0, 2, 0), (1, 1, 3)]);
        assert_eq!(view.host, Some(1));
        let bid = vec![
            Value::Int(7),
            Value::Int(8),
            Value::Int(0),
            Value::string("x"),
        ];
        let row = Row(vec![Value::Int(2), Value::Row(bid), Value::Timestamp(5)]);
        let expected = Row(vec![
            Value::Int(7),
            Value::Int(8),
            Value::Timestamp(5),
            Value::string("x"),
        ]);
        assert_eq!(view.apply(row.clone()).unwrap(), expected);
        // A NULL row: every field NULL, as a place of it reads.
        let null = Row(vec![Value::Int(2), Value::Null, Value::Timestamp(5)]);
        assert_eq!(
            view.apply(null).unwrap().0,
            [Value::Null, Value::Null, Value::Timestamp(5), Value::Null]
        );
        // Another field moved elsewhere (`SELECT bid.auction, bid.bidder, bid.extra`): still.
        let moved = generated_projection(&[(1, 1, 0), (1, 1, 1), (1, 1, 3)]);
        assert_eq!(moved.host, Some(1));
        assert_eq!(
            moved.apply(row.clone()).unwrap().0,
            [Value::Int(7), Value::Int(8), Value::string("x")]
        );
        // Another step reading the whole column: not hosted.
        let twice = generated_projection(&[(1, 1, 0), (1, 1, 1), (0, 1, 0)]);
        assert_eq!(twice.host, None);
    }

    #[test]
    fn a_view_and_the_query_over_it_project_once() {
        // `bid` (`SELECT bid.auction, bid.price, dateTime FROM datagen`), then
        // `SELECT price, auction, price FROM bid`, as the Nexmark queries read it.
        let view = generated_projection(&[(1, 3, 0), (1, 3, 2), (0, 4, 0)]);
        let query = generated_projection(&[(0, 1, 0), (0, 0, 0), (0, 1, 0)]);
        let one = view.then(&query).expect("places only");
        assert!(matches!(
            one.steps.as_slice(),
            [
                Step::Copy(Place::Field(3, 2)),
                Step::Move(Place::Field(3, 0)),
                Step::Copy(Place::Field(3, 2))
            ]
        ));
        let steps = fused(vec![
            Calc::Filter(Arc::new(|_: &Row| Ok(Value::Bool(true)))),
            Calc::Project(view),
            Calc::AsItIs,
            Calc::Project(query),
        ]);
        assert!(matches!(
            steps.as_slice(),
            [Calc::Filter(_), Calc::Project(_)]
        ));
        // A query that computes keeps its own projection.
        let computing = generated_projection(&[(2, 0, 0)]);
        assert!(
            generated_projection(&[(0, 0, 0)])
                .then(&computing)
                .is_none()
        );
    }

    #[test]
    fn a_projection_moves_what_only_it_reads_and_copies_what_is_read_twice() {
        let row = Row(vec![
            Value::Int(1),
            Value::Row(vec![Value::Int(20), Value::Int(21)]),
            Value::Int(3),
        ]);
        let doubled = Typed {
            eval: Arc::new(|row: &Row| match row.get(0) {
                Value::Int(i) => Ok(Value::Int(i * 2)),
                _ => Ok(Value::Null),
            }),
            place: None,
            reads: None,
            ..at(Place::Column(0))
        };
        let projection = Projection::new(&[
            at(Place::Field(1, 1)),
            at(Place::Column(1)),
            at(Place::Column(2)),
            at(Place::Column(0)),
            doubled,
            at(Place::Field(1, 0)),
        ]);
        assert!(matches!(
            projection.steps.as_slice(),
            [
                Step::Copy(_),
                Step::Copy(_),
                Step::Move(_),
                Step::Move(_),
                Step::Compute(_),
                Step::Copy(_)
            ]
        ));
        // The same values whether the projection owns the row or has it lent.
        let project = |projection: &Projection| {
            let projected = projection.apply(row.clone()).unwrap();
            assert_eq!(projection.apply_lent(&row).unwrap(), projected);
            projected.0
        };
        assert_eq!(
            project(&projection),
            vec![
                Value::Int(21),
                row.0[1].clone(),
                Value::Int(3),
                Value::Int(1),
                Value::Int(2),
                Value::Int(20)
            ]
        );
        // Without a computed column, one pass; the columns no one reads `NULL`. A place read
        // again only by an unread column is moved, not copied.
        let projection = Projection::leaving_null(
            &[
                at(Place::Field(1, 1)),
                at(Place::Column(2)),
                at(Place::Column(1)),
                at(Place::Column(0)),
                at(Place::Column(2)),
            ],
            &[2, 4],
        );
        assert!(!projection.computes);
        assert!(matches!(
            projection.steps.as_slice(),
            [
                Step::Move(_),
                Step::Move(_),
                Step::Null,
                Step::Move(_),
                Step::Null
            ]
        ));
        assert_eq!(
            project(&projection),
            vec![
                Value::Int(21),
                Value::Int(3),
                Value::Null,
                Value::Int(1),
                Value::Null
            ]
        );
    }

    /// Filters and projections give the same rows whether they own their input or have it
    /// lent (a table read by several views), with filters before, between and after the
    /// projections, and with filters only.
    #[test]
    fn filters_and_projections_give_the_same_rows_owned_or_lent() {
        let above = |column: usize, limit: i64| -> Eval {
            Arc::new(move |row: &Row| {
                Ok(Value::Bool(
                    matches!(row.get(column), Value::Int(i) if *i > limit),
                ))
            })
        };
        let swap = Projection::new(&[at(Place::Column(1)), at(Place::Column(0))]);
        let pick = Projection::new(&[at(Place::Field(2, 0)), at(Place::Column(1))]);
        let chains: Vec<Vec<Calc>> = vec![
            vec![Calc::Filter(above(0, 3))],
            vec![Calc::Filter(above(0, 3)), Calc::Project(pick.clone())],
            vec![Calc::Project(swap), Calc::Filter(above(0, 5)), Calc::AsItIs],
            vec![
                Calc::Filter(above(1, 2)),
                Calc::Project(pick.clone()),
                Calc::Filter(above(0, 40)),
            ],
            vec![
                Calc::Filter(above(1, 2)),
                Calc::Project(pick),
                Calc::Project(Projection::new(&[
                    at(Place::Column(1)),
                    at(Place::Column(0)),
                    at(Place::Column(1)),
                ])),
            ],
        ];
        for steps in chains {
            // As written, step by step; and as run, projections made one.
            let one_by_one = CalcRows {
                steps: steps.clone().into(),
            };
            let calc = CalcRows::new(steps);
            let mut kept = 0;
            for i in 0..10 {
                let row = Row(vec![
                    Value::Int(i),
                    Value::Int(9 - i),
                    Value::Row(vec![Value::Int(i * 10), Value::string("x".repeat(40))]),
                ]);
                let owned = one_by_one.owned(row.clone()).unwrap();
                assert_eq!(calc.owned(row.clone()).unwrap(), owned, "row {i}");
                assert_eq!(calc.lent(&row).unwrap(), owned, "row {i}");
                kept += usize::from(owned.is_some());
            }
            assert!(
                kept > 0 && kept < 10,
                "{kept} kept: the filters keep some rows"
            );
        }
    }
}
