//! SQL's aggregate functions over rows, as one Riffle [`AggregateFunction`]: `COUNT(*)`,
//! `COUNT(x)`, `COUNT(DISTINCT x)`, `SUM`, `MIN`, `MAX`, `AVG`, each with an optional
//! `FILTER (WHERE ..)`. Their arguments and filters are computed before the aggregation (a
//! projection that can fail the job with a clear error); adding a row to an accumulator only
//! reads columns, so it cannot fail. Accumulators are serializable state: window state is part
//! of checkpoints and rescales with its key groups.

use std::collections::BTreeSet;

use riffle::aggregate::AggregateFunction;
use serde::{Deserialize, Serialize};

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
}

/// All the aggregates of a grouped query, over its pre-computed rows.
#[derive(Clone, Debug)]
pub struct RowAggregates {
    /// The aggregates, in order.
    pub specs: Vec<AggSpec>,
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
        self.specs
            .iter()
            .map(|spec| match spec.kind {
                AggKind::CountStar | AggKind::Count => Acc::Count(0),
                AggKind::CountDistinct => Acc::Distinct(BTreeSet::new()),
                AggKind::Sum => Acc::Sum(Value::Null),
                AggKind::Min | AggKind::Max => Acc::Extreme(Value::Null),
                AggKind::Avg => Acc::Avg(Value::Null, 0),
            })
            .collect()
    }

    fn add(&self, accs: &mut Vec<Acc>, row: &Row) {
        for (spec, acc) in self.specs.iter().zip(accs.iter_mut()) {
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
                _ => {}
            }
        }
    }

    fn merge(&self, accs: &mut Vec<Acc>, others: Vec<Acc>) {
        for ((spec, acc), other) in self.specs.iter().zip(accs.iter_mut()).zip(others) {
            match (acc, other) {
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
    }

    fn result(&self, accs: &Vec<Acc>) -> Vec<Value> {
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
            })
            .collect()
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

    #[test]
    fn counts_sums_extremes_and_averages_follow_sql() {
        let aggs = RowAggregates {
            specs: vec![
                spec("COUNT", false, None, None),
                spec("COUNT", false, Some((0, DataType::BigInt)), None),
                spec("COUNT", true, Some((0, DataType::BigInt)), None),
                spec("SUM", false, Some((0, DataType::BigInt)), None),
                spec("MIN", false, Some((0, DataType::BigInt)), None),
                spec("MAX", false, Some((0, DataType::BigInt)), Some(1)),
                spec("AVG", false, Some((0, DataType::BigInt)), None),
            ],
        };
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
    fn decimal_sums_and_averages_are_exact() {
        let ty = DataType::Decimal {
            precision: 10,
            scale: 2,
        };
        let aggs = RowAggregates {
            specs: vec![
                spec("SUM", false, Some((0, ty.clone())), None),
                spec("AVG", false, Some((0, ty.clone())), None),
            ],
        };
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
