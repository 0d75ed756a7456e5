//! SQL's aggregate functions over rows, as one Riffle [`AggregateFunction`]: `COUNT(*)`,
//! `COUNT(x)`, `COUNT(DISTINCT x)`, `SUM`, `MIN`, `MAX`, `AVG`, each with an optional
//! `FILTER (WHERE ..)`. Their arguments and filters are computed before the aggregation (a
//! projection that can fail the job with a clear error); adding a row to an accumulator only
//! reads columns, so it cannot fail. Accumulators are serializable state: window state is part
//! of checkpoints and rescales with its key groups.
//!
//! Over an updating input (an aggregate of an aggregate's result, of an outer join's rows),
//! [`RetractingAggregates`] takes a retracted row back out of the accumulators: `MIN`, `MAX`
//! and `COUNT(DISTINCT ..)` keep how many times each value is there, `SUM` and `AVG` subtract,
//! and a group whose every row was retracted is gone.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use riffle::aggregate::AggregateFunction;
use riffle::change::Change;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use crate::error::{Result, SqlError};
use crate::expr::{cast_value, to_decimal, to_f64};
use crate::types::{DataType, Decimal, Row, Value};

/// Which aggregate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AggKind {
    /// `COUNT(*)`.
    CountStar,
    /// `COUNT(x)`: rows where `x` is not `NULL`.
    Count,
    /// `COUNT(DISTINCT x)`.
    CountDistinct,
    /// `SUM(x)`.
    Sum,
    /// `MIN(x)`.
    Min,
    /// `MAX(x)`.
    Max,
    /// `AVG(x)`.
    Avg,
}

/// One aggregate of a grouped query.
#[derive(Clone, Debug)]
pub struct AggSpec {
    /// Which one.
    pub kind: AggKind,
    /// The column of the pre-computed row holding its argument.
    pub arg: Option<usize>,
    /// The column holding its `FILTER (WHERE ..)` condition.
    pub filter: Option<usize>,
    /// The argument's type.
    pub arg_type: DataType,
    /// The result's type (Flink's rules).
    pub ty: DataType,
}

impl AggSpec {
    /// The aggregate `name` (upper case) of an argument of type `arg_type` (`None`: `*`).
    pub fn kind_and_type(
        name: &str,
        distinct: bool,
        arg_type: Option<DataType>,
    ) -> Result<(AggKind, DataType)> {
        let numeric = |ty: &DataType| {
            if ty.is_numeric() || *ty == DataType::Null {
                Ok(())
            } else {
                Err(SqlError::plan(format!("{name} needs a number, got {ty}")))
            }
        };
        Ok(match (name, distinct, arg_type) {
            ("COUNT", false, None) => (AggKind::CountStar, DataType::BigInt),
            ("COUNT", false, Some(_)) => (AggKind::Count, DataType::BigInt),
            ("COUNT", true, Some(_)) => (AggKind::CountDistinct, DataType::BigInt),
            ("SUM", false, Some(ty)) => {
                numeric(&ty)?;
                let out = match ty {
                    DataType::Decimal { scale, .. } => DataType::Decimal {
                        precision: 38,
                        scale,
                    },
                    DataType::Float => DataType::Double,
                    DataType::Null => DataType::BigInt,
                    other => other,
                };
                (AggKind::Sum, out)
            }
            ("AVG", false, Some(ty)) => {
                numeric(&ty)?;
                let out = match ty {
                    DataType::Decimal { scale, .. } => DataType::Decimal {
                        precision: 38,
                        scale: scale.max(6),
                    },
                    DataType::Float => DataType::Double,
                    DataType::Null => DataType::BigInt,
                    other => other,
                };
                (AggKind::Avg, out)
            }
            ("MIN", false, Some(ty)) => (AggKind::Min, ty),
            ("MAX", false, Some(ty)) => (AggKind::Max, ty),
            (name, true, _) => {
                return Err(SqlError::plan(format!(
                    "{name}(DISTINCT ...) is not supported yet (COUNT(DISTINCT ...) is)"
                )));
            }
            (name, _, None) => {
                return Err(SqlError::plan(format!("{name}(*) is not an aggregate")));
            }
            (name, _, _) => {
                return Err(SqlError::plan(format!(
                    "the aggregate {name} is not supported yet"
                )));
            }
        })
    }
}

/// The running state of one aggregate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Acc {
    /// A count.
    Count(i64),
    /// The distinct values seen.
    Distinct(BTreeSet<Value>),
    /// A sum of the values seen (`NULL` while none was).
    Sum(Value),
    /// The least or greatest value seen (`NULL` while none was).
    Extreme(Value),
    /// A sum and a count.
    Avg(Value, i64),
    /// Each value seen and how many times it is there (`MIN`, `MAX` and `COUNT(DISTINCT ..)`
    /// over an updating input).
    Values(BTreeMap<Value, i64>),
    /// A sum and how many values make it (`SUM` over an updating input: `NULL` at none).
    RetractSum(Value, i64),
    /// The values seen by the `COUNT(DISTINCT x)`s of one column `x` (with different
    /// `FILTER`s: Nexmark q15's), each with a bit per aggregate that saw it, and the first
    /// aggregate's count; the others' counts are their `Count`s. One map lookup per row instead
    /// of one per aggregate, as Flink's distinct views share one map.
    SharedDistinct(SeenValues, i64),
    /// A count of distinct values that a map state holds, out of the accumulator (an updating
    /// `GROUP BY`'s, see [`SeenInMap`]): the accumulators merge no such counts.
    DistinctCount(i64),
}

/// The values of an [`Acc::SharedDistinct`] with their bits, hashed (each row looks one up).
/// Integers (the usual ids: bidders, auctions) are kept apart, mostly in arrays of their bits
/// by blocks of consecutive ids ([`IntBits`](crate::int_bits::IntBits)); checkpoints hold one
/// map of values, as when this was a `HashMap<Value, u64>`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SeenValues {
    ints: crate::int_bits::IntBits,
    others: std::collections::HashMap<Value, u64, foldhash::fast::RandomState>,
}

impl SeenValues {
    /// Marks `value` seen by the aggregates of `mask`; gives the bits of `mask` it was not seen
    /// by before.
    pub fn see(&mut self, value: &Value, mask: u64) -> u64 {
        let bits = match value {
            Value::Int(i) => return mask & !self.ints.join(*i, mask),
            other => match self.others.get_mut(other) {
                Some(bits) => bits,
                None => {
                    self.others.insert(other.clone(), mask);
                    return mask;
                }
            },
        };
        let new = mask & !*bits;
        *bits |= mask;
        new
    }

    /// How many values were seen.
    pub fn len(&self) -> usize {
        self.ints.len() + self.others.len()
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bits of each value seen.
    pub fn bits(&self) -> impl Iterator<Item = u64> + '_ {
        (self.ints.entries().map(|(_, bits)| bits)).chain(self.others.values().copied())
    }

    /// Each value seen, with its bits.
    pub fn entries(&self) -> impl Iterator<Item = (Value, u64)> + '_ {
        let ints = self.ints.entries().map(|(i, bits)| (Value::Int(i), bits));
        ints.chain(self.others.iter().map(|(v, bits)| (v.clone(), *bits)))
    }

    /// Adds the values of `other`, their bits joined.
    pub fn merge(&mut self, other: SeenValues) {
        for (i, bits) in other.ints.entries() {
            self.ints.join(i, bits);
        }
        for (value, bits) in other.others {
            *self.others.entry(value).or_insert(0) |= bits;
        }
    }

    fn insert(&mut self, value: Value, bits: u64) {
        match value {
            Value::Int(i) => {
                self.ints.join(i, bits);
            }
            other => *self.others.entry(other).or_insert(0) |= bits,
        }
    }
}

impl Serialize for SeenValues {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_map(self.entries())
    }
}

impl<'de> Deserialize<'de> for SeenValues {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        let map =
            std::collections::HashMap::<Value, u64, foldhash::fast::RandomState>::deserialize(
                deserializer,
            )?;
        let mut seen = SeenValues::default();
        for (value, bits) in map {
            seen.insert(value, bits);
        }
        Ok(seen)
    }
}

/// The `COUNT(DISTINCT ..)`s of an updating `GROUP BY` whose values a map state holds, one
/// entry per group of aggregates and value: `(group, value)` → the bits of the group's
/// aggregates that saw the value, as Flink keeps a distinct aggregate's values in a `MapView`.
/// The aggregates of one argument column (up to 64) make a group, so a row looks a value up
/// once for all of them (Nexmark q15's four `FILTER`s).
///
/// In a store (RocksDB) each entry is a store entry of its own: a row reads one entry per
/// group, not every value the group has seen.
#[derive(Clone, Debug, Default)]
pub struct DistinctGroups {
    groups: Vec<DistinctGroup>,
}

#[derive(Clone, Debug)]
struct DistinctGroup {
    /// The argument's column.
    arg: usize,
    /// The aggregates, by index, their bits in this order.
    members: Vec<usize>,
    /// Their `FILTER`s' columns.
    filters: Vec<Option<usize>>,
}

/// The key of a map state entry of [`DistinctGroups`]: the group and a value, integers (the
/// usual ids: bidders, auctions) apart, hashed and compared as numbers.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DistinctValue {
    /// An integer value of group `.0`.
    Int(u32, i64),
    /// Any other value of group `.0`.
    Other(u32, Value),
}

impl DistinctValue {
    /// `value` of group `group`.
    pub fn of(group: usize, value: Value) -> Self {
        match value {
            Value::Int(i) => DistinctValue::Int(group as u32, i),
            other => DistinctValue::Other(group as u32, other),
        }
    }
}

/// A pre-computed row and, per group of [`DistinctGroups`], the bits of the aggregates that
/// see a new value in it.
#[derive(Clone, Debug)]
pub struct Marked {
    /// The row.
    pub row: Row,
    /// The bits, per group.
    pub new: SmallVec<[u64; 2]>,
}

impl DistinctGroups {
    /// The groups of the `COUNT(DISTINCT ..)`s of `specs`.
    pub fn of(specs: &[AggSpec]) -> Self {
        let mut groups: Vec<DistinctGroup> = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            let (AggKind::CountDistinct, Some(arg)) = (spec.kind, spec.arg) else {
                continue;
            };
            match groups
                .iter_mut()
                .find(|g| g.arg == arg && g.members.len() < 64)
            {
                Some(group) => {
                    group.members.push(i);
                    group.filters.push(spec.filter);
                }
                None => groups.push(DistinctGroup {
                    arg,
                    members: vec![i],
                    filters: vec![spec.filter],
                }),
            }
        }
        DistinctGroups { groups }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// The pre-computed `row` marked, per group, with the bits of the aggregates that see a
    /// new value in it, after `see` marked the value seen by those whose `FILTER` it passes:
    /// `see(value, mask)` gives the bits of `mask` that had not seen it.
    pub fn mark(
        &self,
        row: Row,
        mut see: impl FnMut(DistinctValue, u64) -> riffle::Result<u64>,
    ) -> riffle::Result<Marked> {
        let mut new = SmallVec::with_capacity(self.groups.len());
        for (g, group) in self.groups.iter().enumerate() {
            let value = row.get(group.arg);
            let mut mask = 0u64;
            if !value.is_null() {
                for (bit, filter) in group.filters.iter().enumerate() {
                    if filter.is_none_or(|f| matches!(row.get(f), Value::Bool(true))) {
                        mask |= 1 << bit;
                    }
                }
            }
            new.push(match mask {
                0 => 0,
                _ => see(DistinctValue::of(g, value.clone()), mask)?,
            });
        }
        Ok(Marked { row, new })
    }
}

/// All the aggregates of a grouped query, over its pre-computed rows.
///
/// Where a `COUNT(DISTINCT x)` keeps the values it saw:
/// - [`new`](Self::new), in the accumulator (a window's, an `OVER`'s): the `COUNT(DISTINCT
///   x)`s of one pre-computed column (two or more, up to 64) share them, the first in an
///   [`Acc::SharedDistinct`], the others counting;
/// - [`SeenInMap`], out of it (an updating `GROUP BY`'s in a store, RocksDB, whose groups
///   live as long as the job): a map state of the operator's holds them, one entry per value
///   ([`DistinctGroups`]), and the accumulator only counts ([`Acc::DistinctCount`]).
///
/// An accumulator made before either (each with its own [`Acc::Distinct`], or a shared one, in
/// a savepoint) goes on as it was.
#[derive(Clone, Debug)]
pub struct RowAggregates {
    /// The aggregates, in order.
    pub specs: Vec<AggSpec>,
}

impl RowAggregates {
    /// The aggregates `specs`, each keeping in its accumulator what it needs.
    pub fn new(specs: Vec<AggSpec>) -> Self {
        RowAggregates { specs }
    }

    /// The aggregates sharing the values seen with aggregate `leader` (it first), when it is
    /// the first `COUNT(DISTINCT ..)` of its column and others read it too.
    fn sharing(&self, leader: usize) -> Option<Vec<usize>> {
        let spec = &self.specs[leader];
        let arg = spec.arg?;
        let same = |s: &AggSpec| s.kind == AggKind::CountDistinct && s.arg == Some(arg);
        if !same(spec) || self.specs[..leader].iter().any(same) {
            return None;
        }
        let members: Vec<usize> = (leader..self.specs.len())
            .filter(|i| same(&self.specs[*i]))
            .collect();
        (members.len() > 1 && members.len() <= 64).then_some(members)
    }

    /// The aggregates that share the distinct values of `leader` (an [`Acc::SharedDistinct`]'s),
    /// `leader` first, as [`sharing`](Self::sharing) gives them, without a vector.
    fn members(&self, leader: usize) -> impl Iterator<Item = usize> + '_ {
        let arg = self.specs[leader].arg;
        (leader..self.specs.len())
            .filter(move |i| {
                let spec = &self.specs[*i];
                spec.kind == AggKind::CountDistinct && spec.arg == arg
            })
            .take(64)
    }

    /// Adds `row` to the shared distinct values of `leader` and its members.
    fn add_shared(&self, accs: &mut [Acc], leader: usize, row: &Row) {
        let value = row.get(self.specs[leader].arg.expect("a shared argument"));
        if value.is_null() {
            return;
        }
        let mut mask = 0u64;
        for (bit, member) in self.members(leader).enumerate() {
            let passes = self.specs[member]
                .filter
                .is_none_or(|f| matches!(row.get(f), Value::Bool(true)));
            if passes {
                mask |= 1 << bit;
            }
        }
        if mask == 0 {
            return;
        }
        let Acc::SharedDistinct(seen, count) = &mut accs[leader] else {
            return;
        };
        let new = seen.see(value, mask);
        *count += (new & 1) as i64;
        for (bit, member) in self.members(leader).enumerate().skip(1) {
            if new & (1 << bit) != 0
                && let Acc::Count(n) = &mut accs[member]
            {
                *n += 1;
            }
        }
    }
}

fn add_values(a: &Value, b: &Value, ty: &DataType) -> Value {
    match (a, b) {
        (Value::Null, v) | (v, Value::Null) => v.clone(),
        _ => match ty {
            DataType::Double | DataType::Float => Value::Double(to_f64(a) + to_f64(b)),
            DataType::Decimal { .. } => {
                let (x, y) = (to_decimal(a), to_decimal(b));
                let scale = x.scale.max(y.scale);
                match (x.rescale(scale), y.rescale(scale)) {
                    (Some(x), Some(y)) => x
                        .unscaled
                        .checked_add(y.unscaled)
                        .map_or(Value::Null, |u| Value::Decimal(Decimal::new(u, scale))),
                    _ => Value::Null,
                }
            }
            _ => match (a, b) {
                (Value::Int(x), Value::Int(y)) => Value::Int(x.wrapping_add(*y)),
                _ => Value::Null,
            },
        },
    }
}

impl AggregateFunction<Row> for RowAggregates {
    type Acc = Vec<Acc>;
    type Out = Vec<Value>;

    fn create(&self) -> Vec<Acc> {
        let shared: Vec<usize> = (0..self.specs.len())
            .filter_map(|i| self.sharing(i))
            .flatten()
            .collect();
        self.specs
            .iter()
            .enumerate()
            .map(|(i, spec)| match spec.kind {
                AggKind::CountStar | AggKind::Count => Acc::Count(0),
                AggKind::CountDistinct if self.sharing(i).is_some() => {
                    Acc::SharedDistinct(SeenValues::default(), 0)
                }
                AggKind::CountDistinct if shared.contains(&i) => Acc::Count(0),
                AggKind::CountDistinct => Acc::Distinct(BTreeSet::new()),
                AggKind::Sum => Acc::Sum(Value::Null),
                AggKind::Min | AggKind::Max => Acc::Extreme(Value::Null),
                AggKind::Avg => Acc::Avg(Value::Null, 0),
            })
            .collect()
    }

    fn add(&self, accs: &mut Vec<Acc>, row: &Row) {
        self.add_marked(accs, row, &[], &[]);
    }

    fn merge(&self, accs: &mut Vec<Acc>, others: Vec<Acc>) {
        self.merge_all(accs, others)
    }

    fn result(&self, accs: &Vec<Acc>) -> Vec<Value> {
        self.results(accs)
    }
}

/// The aggregates of an updating `GROUP BY`, whose `COUNT(DISTINCT ..)`s find the values they
/// saw in a map state: they add [`Marked`] rows, [`DistinctGroups::mark`]ed with the aggregates
/// that see a new value, and count.
#[derive(Clone, Debug)]
pub struct SeenInMap {
    aggregates: RowAggregates,
    /// Per aggregate, for the `COUNT(DISTINCT ..)`s: its group and its bit in the group's
    /// ([`DistinctGroups`], [`Marked`]).
    seen: Vec<Option<(usize, u64)>>,
}

impl SeenInMap {
    /// The aggregates `specs`.
    pub fn new(specs: Vec<AggSpec>) -> Self {
        let groups = DistinctGroups::of(&specs);
        let mut seen = vec![None; specs.len()];
        for (g, group) in groups.groups.iter().enumerate() {
            for (bit, member) in group.members.iter().enumerate() {
                seen[*member] = Some((g, 1u64 << bit));
            }
        }
        SeenInMap {
            aggregates: RowAggregates { specs },
            seen,
        }
    }

    /// A new group's accumulators: its `COUNT(DISTINCT ..)`s count.
    pub fn create(&self) -> Vec<Acc> {
        let mut accs = self.aggregates.create();
        for (acc, seen) in accs.iter_mut().zip(&self.seen) {
            if seen.is_some() {
                *acc = Acc::DistinctCount(0);
            }
        }
        accs
    }

    /// Adds a marked row to a group's accumulators (`fresh`: just made); gives the results
    /// before it (`None` if fresh) and after it, and the values an accumulator made before
    /// ([`RowAggregates::new`]'s, in a savepoint) held itself, taken out of it for the map
    /// state (it goes on counting, as a [`DistinctCount`](Acc::DistinctCount)).
    #[allow(clippy::type_complexity)]
    pub fn add_and_get(
        &self,
        accs: &mut [Acc],
        marked: &Marked,
        fresh: bool,
    ) -> (Option<Vec<Value>>, Vec<Value>, Vec<(DistinctValue, u64)>) {
        let aggregates = &self.aggregates;
        let before = (!fresh).then(|| aggregates.results(accs));
        aggregates.add_marked(accs, &marked.row, &marked.new, &self.seen);
        let after = aggregates.results(accs);
        let held = if accs
            .iter()
            .any(|acc| matches!(acc, Acc::Distinct(_) | Acc::SharedDistinct(..)))
        {
            self.take_values(accs)
        } else {
            Vec::new()
        };
        (before, after, held)
    }

    /// Takes the values out of accumulators that hold them (a set per aggregate, or one shared
    /// by the aggregates of a column), as map entries with the bits of the aggregates that
    /// saw them; they count on as [`DistinctCount`](Acc::DistinctCount)s.
    fn take_values(&self, accs: &mut [Acc]) -> Vec<(DistinctValue, u64)> {
        let mut values: HashMap<DistinctValue, u64> = HashMap::new();
        for (g, group) in DistinctGroups::of(&self.aggregates.specs)
            .groups
            .iter()
            .enumerate()
        {
            for (bit, member) in group.members.iter().enumerate() {
                let count = match std::mem::replace(&mut accs[*member], Acc::DistinctCount(0)) {
                    Acc::Distinct(set) => {
                        let count = set.len() as i64;
                        for value in set {
                            *values.entry(DistinctValue::of(g, value)).or_insert(0) |= 1 << bit;
                        }
                        count
                    }
                    // The first aggregate of the column: its members' bits follow its own.
                    Acc::SharedDistinct(seen, count) => {
                        for (value, bits) in seen.entries() {
                            *values.entry(DistinctValue::of(g, value)).or_insert(0) |= bits;
                        }
                        count
                    }
                    Acc::Count(count) | Acc::DistinctCount(count) => count,
                    other => {
                        accs[*member] = other;
                        continue;
                    }
                };
                accs[*member] = Acc::DistinctCount(count);
            }
        }
        values.into_iter().collect()
    }
}

impl RowAggregates {
    /// Adds `row`, `new` the bits of the aggregates that see a new value in it, per group of
    /// [`DistinctGroups`] (none unless their values are in a map state).
    /// `seen`: each aggregate's group and bit, for those that count ([`SeenInMap`]).
    fn add_marked(&self, accs: &mut [Acc], row: &Row, new: &[u64], seen: &[Option<(usize, u64)>]) {
        for (i, (spec, acc)) in self.specs.iter().zip(accs.iter_mut()).enumerate() {
            if let Some(filter) = spec.filter
                && !matches!(row.get(filter), Value::Bool(true))
            {
                continue;
            }
            let value = spec.arg.map_or(&Value::Null, |i| row.get(i));
            match (spec.kind, acc) {
                (AggKind::CountStar, Acc::Count(n)) => *n += 1,
                (_, _) if value.is_null() => {}
                (AggKind::Count, Acc::Count(n)) => *n += 1,
                (AggKind::CountDistinct, Acc::Distinct(seen)) if !seen.contains(value) => {
                    seen.insert(value.clone());
                }
                (AggKind::CountDistinct, Acc::DistinctCount(n)) => {
                    if let Some(Some((group, bit))) = seen.get(i)
                        && new.get(*group).is_some_and(|bits| bits & bit != 0)
                    {
                        *n += 1;
                    }
                }
                (AggKind::Sum, Acc::Sum(sum)) => *sum = add_values(sum, value, &spec.ty),
                (AggKind::Min, Acc::Extreme(least)) if least.is_null() || value < least => {
                    *least = value.clone();
                }
                (AggKind::Max, Acc::Extreme(greatest))
                    if greatest.is_null() || value > greatest =>
                {
                    *greatest = value.clone();
                }
                (AggKind::Avg, Acc::Avg(sum, n)) => {
                    *sum = add_values(sum, value, &spec.arg_type);
                    *n += 1;
                }
                // (A `COUNT(DISTINCT ..)` sharing its values: below, with the others.)
                _ => {}
            }
        }
        for leader in 0..accs.len() {
            if matches!(accs[leader], Acc::SharedDistinct(..)) {
                self.add_shared(accs, leader, row);
            }
        }
    }

    fn merge_all(&self, accs: &mut [Acc], others: Vec<Acc>) {
        // The counts of shared distinct values are counted again from the merged values.
        let mut recount = Vec::new();
        for (i, ((spec, acc), other)) in self
            .specs
            .iter()
            .zip(accs.iter_mut())
            .zip(others)
            .enumerate()
        {
            match (acc, other) {
                (Acc::SharedDistinct(a, _), Acc::SharedDistinct(b, _)) => {
                    a.merge(b);
                    recount.push(i);
                }
                (Acc::Count(_), Acc::Count(_)) if spec.kind == AggKind::CountDistinct => {}
                (Acc::Count(a), Acc::Count(b)) => *a += b,
                (Acc::Distinct(a), Acc::Distinct(b)) => a.extend(b),
                (Acc::Sum(a), Acc::Sum(b)) => *a = add_values(a, &b, &spec.ty),
                (Acc::Extreme(a), Acc::Extreme(b)) => {
                    let keep_b = !b.is_null()
                        && (a.is_null()
                            || (spec.kind == AggKind::Min && b < *a)
                            || (spec.kind == AggKind::Max && b > *a));
                    if keep_b {
                        *a = b;
                    }
                }
                (Acc::Avg(a, n), Acc::Avg(b, m)) => {
                    *a = add_values(a, &b, &spec.arg_type);
                    *n += m;
                }
                _ => {}
            }
        }
        for leader in recount {
            let Some(members) = self.sharing(leader) else {
                continue;
            };
            let Acc::SharedDistinct(seen, _) = &accs[leader] else {
                continue;
            };
            let counts: Vec<i64> = (0..members.len())
                .map(|bit| seen.bits().filter(|bits| *bits & (1 << bit) != 0).count() as i64)
                .collect();
            for (bit, member) in members.iter().enumerate() {
                match &mut accs[*member] {
                    Acc::SharedDistinct(_, n) | Acc::Count(n) => *n = counts[bit],
                    _ => {}
                }
            }
        }
    }

    fn results(&self, accs: &[Acc]) -> Vec<Value> {
        self.specs
            .iter()
            .zip(accs)
            .map(|(spec, acc)| match acc {
                Acc::Count(n) => Value::Int(*n),
                Acc::Distinct(seen) => Value::Int(seen.len() as i64),
                Acc::Sum(sum) => {
                    cast_value(sum.clone(), &spec.arg_type, &spec.ty).unwrap_or(Value::Null)
                }
                Acc::Extreme(value) => value.clone(),
                Acc::Avg(_, 0) => Value::Null,
                Acc::Avg(sum, n) => average(sum, *n, &spec.ty),
                Acc::SharedDistinct(_, n) | Acc::DistinctCount(n) => Value::Int(*n),
                // Only the retracting aggregates make these.
                Acc::Values(_) | Acc::RetractSum(..) => Value::Null,
            })
            .collect()
    }
}

/// `a - b` in the type `ty` (an integer wraps, a decimal that overflows is `NULL`).
fn sub_values(a: &Value, b: &Value, ty: &DataType) -> Value {
    let negated = match b {
        Value::Int(v) => Value::Int(v.wrapping_neg()),
        Value::Double(v) => Value::Double(-v),
        Value::Null => Value::Null,
        other => {
            let d = to_decimal(other);
            Value::Decimal(Decimal::new(-d.unscaled, d.scale))
        }
    };
    add_values(a, &negated, ty)
}

/// All the aggregates of a grouped query over an updating input, fed its changes: `+I` and
/// `+U` add a row, `-U` and `-D` take one back. The result is `None` once every row of the
/// group was taken back (the group's row is then deleted).
#[derive(Clone, Debug)]
pub struct RetractingAggregates {
    /// The aggregates, in order.
    pub specs: Vec<AggSpec>,
}

/// The accumulators of a group over an updating input: how many rows are in it, and each
/// aggregate's running state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RetractAcc {
    /// Rows added less rows taken back.
    pub rows: i64,
    /// Each aggregate's accumulator.
    pub accs: Vec<Acc>,
}

/// `value` counted `by` more times in `values` (a value at no count leaves the map).
fn count_value(values: &mut BTreeMap<Value, i64>, value: &Value, by: i64) {
    match values.get_mut(value) {
        Some(n) => {
            *n += by;
            if *n <= 0 {
                values.remove(value);
            }
        }
        None if by > 0 => {
            values.insert(value.clone(), by);
        }
        None => {}
    }
}

impl AggregateFunction<Change<Row>> for RetractingAggregates {
    type Acc = RetractAcc;
    type Out = Option<Vec<Value>>;

    fn create(&self) -> RetractAcc {
        RetractAcc {
            rows: 0,
            accs: self
                .specs
                .iter()
                .map(|spec| match spec.kind {
                    AggKind::CountStar | AggKind::Count => Acc::Count(0),
                    AggKind::CountDistinct | AggKind::Min | AggKind::Max => {
                        Acc::Values(BTreeMap::new())
                    }
                    AggKind::Sum => Acc::RetractSum(Value::Null, 0),
                    AggKind::Avg => Acc::Avg(Value::Null, 0),
                })
                .collect(),
        }
    }

    fn add(&self, acc: &mut RetractAcc, change: &Change<Row>) {
        let by: i64 = if change.op.is_retract() { -1 } else { 1 };
        acc.rows += by;
        let row = &change.row;
        for (spec, acc) in self.specs.iter().zip(acc.accs.iter_mut()) {
            if let Some(filter) = spec.filter
                && !matches!(row.get(filter), Value::Bool(true))
            {
                continue;
            }
            let value = spec.arg.map_or(&Value::Null, |i| row.get(i));
            match (spec.kind, acc) {
                (AggKind::CountStar, Acc::Count(n)) => *n += by,
                (_, _) if value.is_null() => {}
                (AggKind::Count, Acc::Count(n)) => *n += by,
                (_, Acc::Values(values)) => count_value(values, value, by),
                (AggKind::Sum, Acc::RetractSum(sum, n)) => {
                    *sum = match by {
                        1 => add_values(sum, value, &spec.ty),
                        _ => sub_values(sum, value, &spec.ty),
                    };
                    *n += by;
                    if *n == 0 {
                        *sum = Value::Null;
                    }
                }
                (AggKind::Avg, Acc::Avg(sum, n)) => {
                    *sum = match by {
                        1 => add_values(sum, value, &spec.arg_type),
                        _ => sub_values(sum, value, &spec.arg_type),
                    };
                    *n += by;
                    if *n == 0 {
                        *sum = Value::Null;
                    }
                }
                _ => {}
            }
        }
    }

    fn merge(&self, acc: &mut RetractAcc, other: RetractAcc) {
        acc.rows += other.rows;
        for ((spec, acc), other) in self.specs.iter().zip(acc.accs.iter_mut()).zip(other.accs) {
            match (acc, other) {
                (Acc::Count(a), Acc::Count(b)) => *a += b,
                (Acc::Values(a), Acc::Values(b)) => {
                    for (value, n) in b {
                        count_value(a, &value, n);
                    }
                }
                (Acc::RetractSum(a, n), Acc::RetractSum(b, m)) => {
                    *a = add_values(a, &b, &spec.ty);
                    *n += m;
                }
                (Acc::Avg(a, n), Acc::Avg(b, m)) => {
                    *a = add_values(a, &b, &spec.arg_type);
                    *n += m;
                }
                _ => {}
            }
        }
    }

    fn result(&self, acc: &RetractAcc) -> Option<Vec<Value>> {
        if acc.rows <= 0 {
            return None;
        }
        Some(
            self.specs
                .iter()
                .zip(&acc.accs)
                .map(|(spec, acc)| match (spec.kind, acc) {
                    (AggKind::CountDistinct, Acc::Values(values)) => {
                        Value::Int(values.len() as i64)
                    }
                    (AggKind::Min, Acc::Values(values)) => {
                        values.keys().next().cloned().unwrap_or(Value::Null)
                    }
                    (_, Acc::Values(values)) => {
                        values.keys().next_back().cloned().unwrap_or(Value::Null)
                    }
                    (_, Acc::Count(n)) => Value::Int(*n),
                    (_, Acc::RetractSum(_, 0)) | (_, Acc::Avg(_, 0)) => Value::Null,
                    (_, Acc::RetractSum(sum, _)) => {
                        cast_value(sum.clone(), &spec.arg_type, &spec.ty).unwrap_or(Value::Null)
                    }
                    (_, Acc::Avg(sum, n)) => average(sum, *n, &spec.ty),
                    _ => Value::Null,
                })
                .collect(),
        )
    }
}

/// `sum / n` in the result type (integers divide as integers, as in Flink).
fn average(sum: &Value, n: i64, ty: &DataType) -> Value {
    match ty {
        DataType::Double | DataType::Float => Value::Double(to_f64(sum) / n as f64),
        DataType::Decimal { scale, .. } => {
            let s = to_decimal(sum);
            // s / n at `scale` digits, half up.
            let Some(at) = s.rescale(*scale) else {
                return Value::Null;
            };
            let (q, r) = (at.unscaled / n as i128, at.unscaled % n as i128);
            let up = i128::from(r.abs() * 2 >= n as i128) * at.unscaled.signum();
            Value::Decimal(Decimal::new(q + up, *scale))
        }
        _ => match sum {
            Value::Int(s) => Value::Int(s / n),
            _ => Value::Null,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seen_values_are_written_and_traced_as_the_map_of_values_they_were() {
        type Before = std::collections::HashMap<Value, u64, foldhash::fast::RandomState>;
        let mut seen = SeenValues::default();
        assert_eq!(seen.see(&Value::Int(7), 0b01), 0b01);
        assert_eq!(seen.see(&Value::Int(7), 0b11), 0b10);
        assert_eq!(seen.see(&Value::Int(7), 0b11), 0);
        assert_eq!(seen.see(&Value::string("web"), 0b10), 0b10);
        assert_eq!(seen.see(&Value::string("web"), 0b10), 0);
        assert_eq!(seen.see(&Value::Int(i64::MIN), 0b100), 0b100);
        assert_eq!(seen.len(), 3);
        let before: Before = seen.entries().collect();
        let bytes = postcard::to_allocvec(&seen).unwrap();
        // A checkpoint of either reads as the other (the map's order is the hash's).
        let read: Before = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(read, before);
        let written = postcard::to_allocvec(&before).unwrap();
        assert_eq!(postcard::from_bytes::<SeenValues>(&written).unwrap(), seen);
        assert_eq!(
            riffle::state::evolution::format_of::<SeenValues>(),
            riffle::state::evolution::format_of::<Before>()
        );
        let mut other = SeenValues::default();
        other.see(&Value::Int(7), 0b100);
        other.see(&Value::Int(8), 0b1);
        seen.merge(other);
        let mut bits: Vec<u64> = seen.bits().collect();
        bits.sort();
        assert_eq!(bits, [0b1, 0b10, 0b100, 0b111]);
    }

    fn spec(
        name: &str,
        distinct: bool,
        arg: Option<(usize, DataType)>,
        filter: Option<usize>,
    ) -> AggSpec {
        let (kind, ty) =
            AggSpec::kind_and_type(name, distinct, arg.as_ref().map(|(_, t)| t.clone())).unwrap();
        AggSpec {
            kind,
            arg: arg.as_ref().map(|(i, _)| *i),
            filter,
            arg_type: arg.map_or(DataType::Null, |(_, t)| t),
            ty,
        }
    }

    /// q15's shape: `COUNT(DISTINCT x)` of one column under three `FILTER`s and none, and one
    /// of another column. Rows are `[x, y, f1, f2, f3]`.
    fn distinct_counts() -> RowAggregates {
        RowAggregates::new(vec![
            spec("COUNT", false, None, None),
            spec("COUNT", true, Some((0, DataType::BigInt)), None),
            spec("COUNT", true, Some((0, DataType::BigInt)), Some(2)),
            spec("SUM", false, Some((1, DataType::BigInt)), Some(3)),
            spec("COUNT", true, Some((0, DataType::BigInt)), Some(3)),
            spec("COUNT", true, Some((1, DataType::BigInt)), None),
            spec("COUNT", true, Some((0, DataType::BigInt)), Some(4)),
        ])
    }

    /// What `distinct_counts` gives over `rows`, counted directly.
    fn distinct_counts_of(rows: &[Row]) -> Vec<Value> {
        let distinct = |arg: usize, filter: Option<usize>| {
            let seen: BTreeSet<&Value> = rows
                .iter()
                .filter(|r| filter.is_none_or(|f| r.get(f) == &Value::Bool(true)))
                .map(|r| r.get(arg))
                .filter(|v| !v.is_null())
                .collect();
            Value::Int(seen.len() as i64)
        };
        let sum: Option<i64> = rows
            .iter()
            .filter(|r| r.get(3) == &Value::Bool(true))
            .filter_map(|r| match r.get(1) {
                Value::Int(v) => Some(*v),
                _ => None,
            })
            .reduce(|a, b| a + b);
        vec![
            Value::Int(rows.len() as i64),
            distinct(0, None),
            distinct(0, Some(2)),
            sum.map_or(Value::Null, Value::Int),
            distinct(0, Some(3)),
            distinct(1, None),
            distinct(0, Some(4)),
        ]
    }

    proptest::proptest! {
        #[test]
        fn distinct_counts_sharing_their_values_count_as_each_alone(
            rows in proptest::collection::vec(
                (proptest::option::of(0i64..8), proptest::option::of(0i64..5), proptest::bool::ANY, proptest::bool::ANY, proptest::bool::ANY),
                0..40,
            ),
            split in 0usize..40,
        ) {
            let rows: Vec<Row> = rows
                .into_iter()
                .map(|(x, y, a, b, c)| {
                    let int = |v: Option<i64>| v.map_or(Value::Null, Value::Int);
                    Row(vec![int(x), int(y), Value::Bool(a), Value::Bool(b), Value::Bool(c)])
                })
                .collect();
            let aggs = distinct_counts();
            let want = distinct_counts_of(&rows);
            let mut whole = aggs.create();
            proptest::prop_assert!(matches!(whole[1], Acc::SharedDistinct(..)));
            proptest::prop_assert!(matches!(whole[5], Acc::Distinct(..)), "alone on its column");
            for row in &rows {
                aggs.add(&mut whole, row);
            }
            proptest::prop_assert_eq!(aggs.result(&whole), want.clone());
            // In two parts, merged.
            let at = split.min(rows.len());
            let (mut a, mut b) = (aggs.create(), aggs.create());
            rows[..at].iter().for_each(|row| aggs.add(&mut a, row));
            rows[at..].iter().for_each(|row| aggs.add(&mut b, row));
            aggs.merge(&mut a, b);
            proptest::prop_assert_eq!(aggs.result(&a), want.clone());
            // An accumulator of before the sharing (a savepoint's: a set per aggregate) goes on
            // as it was.
            let mut old: Vec<Acc> = aggs
                .specs
                .iter()
                .map(|s| match s.kind {
                    AggKind::CountDistinct => Acc::Distinct(BTreeSet::new()),
                    AggKind::Sum => Acc::Sum(Value::Null),
                    _ => Acc::Count(0),
                })
                .collect();
            for row in &rows {
                aggs.add(&mut old, row);
            }
            proptest::prop_assert_eq!(aggs.result(&old), want.clone());
            // The values in a map state (an updating GROUP BY's in RocksDB), one entry per
            // group and value, the accumulators counting.
            let in_map = SeenInMap::new(aggs.specs.clone());
            let groups = DistinctGroups::of(&aggs.specs);
            let feed = |accs: &mut Vec<Acc>, map: &mut HashMap<DistinctValue, u64>, rows: &[Row]| {
                let mut last = in_map.aggregates.results(accs);
                for row in rows {
                    let marked = groups
                        .mark(row.clone(), |value, mask| {
                            let bits = map.entry(value).or_insert(0);
                            let new = mask & !*bits;
                            *bits |= mask;
                            Ok(new)
                        })
                        .unwrap();
                    let (_, after, held) = in_map.add_and_get(accs, &marked, false);
                    for (value, bits) in held {
                        *map.entry(value).or_insert(0) |= bits;
                    }
                    last = after;
                }
                last
            };
            let mut counted = in_map.create();
            proptest::prop_assert!(matches!(counted[1], Acc::DistinctCount(0)));
            proptest::prop_assert!(matches!(counted[5], Acc::DistinctCount(0)));
            proptest::prop_assert_eq!(feed(&mut counted, &mut HashMap::new(), &rows), want.clone());
            // An accumulator made before, holding the values itself (a savepoint's), hands
            // them to the map at its next row and counts on.
            let mut earlier = aggs.create();
            rows[..at].iter().for_each(|row| aggs.add(&mut earlier, row));
            let mut map = HashMap::new();
            proptest::prop_assert_eq!(feed(&mut earlier, &mut map, &rows[at..]), want);
            if at < rows.len() {
                proptest::prop_assert!(earlier.iter().all(|a| !matches!(a, Acc::Distinct(_) | Acc::SharedDistinct(..))));
            }
        }
    }

    #[test]
    fn counts_sums_extremes_and_averages_follow_sql() {
        let aggs = RowAggregates::new(vec![
            spec("COUNT", false, None, None),
            spec("COUNT", false, Some((0, DataType::BigInt)), None),
            spec("COUNT", true, Some((0, DataType::BigInt)), None),
            spec("SUM", false, Some((0, DataType::BigInt)), None),
            spec("MIN", false, Some((0, DataType::BigInt)), None),
            spec("MAX", false, Some((0, DataType::BigInt)), Some(1)),
            spec("AVG", false, Some((0, DataType::BigInt)), None),
        ]);
        let rows = [
            Row(vec![Value::Int(5), Value::Bool(true)]),
            Row(vec![Value::Null, Value::Bool(true)]),
            Row(vec![Value::Int(2), Value::Bool(false)]),
            Row(vec![Value::Int(5), Value::Bool(true)]),
        ];
        // In two halves, merged: the same as in one.
        let (mut a, mut b) = (aggs.create(), aggs.create());
        aggs.add(&mut a, &rows[0]);
        aggs.add(&mut a, &rows[1]);
        aggs.add(&mut b, &rows[2]);
        aggs.add(&mut b, &rows[3]);
        aggs.merge(&mut a, b);
        let mut whole = aggs.create();
        for row in &rows {
            aggs.add(&mut whole, row);
        }
        assert_eq!(aggs.result(&a), aggs.result(&whole));
        assert_eq!(
            aggs.result(&whole),
            vec![
                Value::Int(4),
                Value::Int(3),
                Value::Int(2),
                Value::Int(12),
                Value::Int(2),
                Value::Int(5),
                Value::Int(4)
            ]
        );
        // Nothing but NULLs: counts 0, the others NULL.
        let mut empty = aggs.create();
        aggs.add(&mut empty, &Row(vec![Value::Null, Value::Bool(false)]));
        let result = aggs.result(&empty);
        assert_eq!(result[0], Value::Int(1));
        assert_eq!(result[1], Value::Int(0));
        assert!(result[3].is_null() && result[4].is_null() && result[6].is_null());
    }

    #[test]
    fn retracted_rows_are_taken_back_and_an_emptied_group_has_no_result() {
        let specs = vec![
            spec("COUNT", false, None, None),
            spec("MIN", false, Some((0, DataType::BigInt)), None),
            spec("MAX", false, Some((0, DataType::BigInt)), None),
            spec("SUM", false, Some((0, DataType::BigInt)), None),
            spec("COUNT", true, Some((0, DataType::BigInt)), None),
            spec("AVG", false, Some((0, DataType::BigInt)), None),
        ];
        let aggs = RetractingAggregates { specs };
        let row = |v: i64| Row(vec![Value::Int(v)]);
        let ints = |v: &[i64]| Some(v.iter().map(|x| Value::Int(*x)).collect::<Vec<_>>());
        let mut acc = aggs.create();
        for v in [7, 3, 7, 9] {
            aggs.add(&mut acc, &Change::insert(row(v)));
        }
        assert_eq!(aggs.result(&acc), ints(&[4, 3, 9, 26, 3, 6]));
        // One 7 of two, then the 9 and the 3: the other 7 is the minimum and the maximum.
        aggs.add(&mut acc, &Change::update_before(row(7)));
        aggs.add(&mut acc, &Change::delete(row(9)));
        aggs.add(&mut acc, &Change::delete(row(3)));
        assert_eq!(aggs.result(&acc), ints(&[1, 7, 7, 7, 1, 7]));
        // In two halves, merged: the same as in one.
        let (mut a, mut b) = (aggs.create(), aggs.create());
        aggs.add(&mut a, &Change::insert(row(7)));
        aggs.add(&mut b, &Change::insert(row(5)));
        aggs.add(&mut b, &Change::delete(row(5)));
        aggs.merge(&mut a, b);
        assert_eq!(aggs.result(&a), aggs.result(&acc));
        aggs.add(&mut acc, &Change::delete(row(7)));
        assert_eq!(aggs.result(&acc), None);
    }

    #[test]
    fn decimal_sums_and_averages_are_exact() {
        let ty = DataType::Decimal {
            precision: 10,
            scale: 2,
        };
        let aggs = RowAggregates::new(vec![
            spec("SUM", false, Some((0, ty.clone())), None),
            spec("AVG", false, Some((0, ty.clone())), None),
        ]);
        let mut acc = aggs.create();
        for cents in [10, 20, 20] {
            aggs.add(&mut acc, &Row(vec![Value::Decimal(Decimal::new(cents, 2))]));
        }
        let result = aggs.result(&acc);
        assert_eq!(result[0], Value::Decimal(Decimal::new(50, 2)));
        assert_eq!(
            crate::format::display(&result[1], &aggs.specs[1].ty),
            "0.166667"
        );
        assert_eq!(aggs.specs[0].ty.to_string(), "DECIMAL(38, 2)");
    }
}
