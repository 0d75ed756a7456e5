//! Incremental aggregation: an accumulator updated record by record, merged across partial
//! results (which is what lets Riffle pre-aggregate before a shuffle), and turned into a result.
//! Built in: [`Count`], [`Sum`], [`Min`], [`Max`], [`Avg`].

use std::marker::PhantomData;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::record::Data;

/// An incremental aggregation of records of type `In`.
///
/// ```
/// use riffle::aggregate::{AggregateFunction, Sum};
/// let sum = Sum::of(|price: &u64| *price);
/// let mut acc = sum.create();
/// sum.add(&mut acc, &3);
/// sum.add(&mut acc, &4);
/// let mut other = sum.create();
/// sum.add(&mut other, &5);
/// sum.merge(&mut acc, other);
/// assert_eq!(sum.result(&acc), 12);
/// ```
pub trait AggregateFunction<In>: Send + Sync + 'static {
    /// The running state of the aggregation.
    type Acc: Data;
    /// The result.
    type Out: Data;
    /// An empty accumulator.
    fn create(&self) -> Self::Acc;
    /// Adds one record.
    fn add(&self, acc: &mut Self::Acc, value: &In);
    /// Adds another accumulator (a partial aggregate of other records).
    fn merge(&self, acc: &mut Self::Acc, other: Self::Acc);
    /// The result so far.
    fn result(&self, acc: &Self::Acc) -> Self::Out;
}

/// Counts records.
#[derive(Clone, Copy, Debug, Default)]
pub struct Count;

impl<In> AggregateFunction<In> for Count {
    type Acc = u64;
    type Out = u64;
    fn create(&self) -> u64 {
        0
    }
    fn add(&self, acc: &mut u64, _: &In) {
        *acc += 1;
    }
    fn merge(&self, acc: &mut u64, other: u64) {
        *acc += other;
    }
    fn result(&self, acc: &u64) -> u64 {
        *acc
    }
}

/// Numbers that [`Sum`], [`Min`], [`Max`] and [`Avg`] aggregate.
pub trait Number: Data + Copy + PartialOrd + Send + Sync {
    /// Zero.
    const ZERO: Self;
    /// The sum of two numbers (saturating for integers).
    fn plus(self, other: Self) -> Self;
    /// As a float, for averages.
    fn as_f64(self) -> f64;
}

macro_rules! number {
    ($($t:ty => $zero:expr, $plus:ident);*) => {$(
        impl Number for $t {
            const ZERO: Self = $zero;
            fn plus(self, other: Self) -> Self {
                self.$plus(other)
            }
            fn as_f64(self) -> f64 {
                self as f64
            }
        }
    )*};
}

number!(i64 => 0, saturating_add; u64 => 0, saturating_add; i32 => 0, saturating_add; u32 => 0, saturating_add);

impl Number for f64 {
    const ZERO: Self = 0.0;
    fn plus(self, other: Self) -> Self {
        self + other
    }
    fn as_f64(self) -> f64 {
        self
    }
}

/// The field an aggregation reads from each record.
type Field<In, N> = Arc<dyn Fn(&In) -> N + Send + Sync>;

macro_rules! field_aggregate {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        pub struct $name<In, N> {
            field: Field<In, N>,
            _type: PhantomData<fn(&In)>,
        }

        impl<In, N> $name<In, N> {
            /// Aggregates the number `field` reads from each record.
            pub fn of(field: impl Fn(&In) -> N + Send + Sync + 'static) -> Self {
                $name { field: Arc::new(field), _type: PhantomData }
            }
        }

        impl<In, N> Clone for $name<In, N> {
            fn clone(&self) -> Self {
                $name { field: self.field.clone(), _type: PhantomData }
            }
        }
    };
}

field_aggregate!(
    /// Sums a numeric field.
    Sum
);
field_aggregate!(
    /// The smallest value of a numeric field.
    Min
);
field_aggregate!(
    /// The largest value of a numeric field.
    Max
);
field_aggregate!(
    /// The average of a numeric field.
    Avg
);

impl<In: 'static, N: Number> AggregateFunction<In> for Sum<In, N> {
    type Acc = N;
    type Out = N;
    fn create(&self) -> N {
        N::ZERO
    }
    fn add(&self, acc: &mut N, value: &In) {
        *acc = acc.plus((self.field)(value));
    }
    fn merge(&self, acc: &mut N, other: N) {
        *acc = acc.plus(other);
    }
    fn result(&self, acc: &N) -> N {
        *acc
    }
}

fn pick<N: Number>(acc: &mut Option<N>, value: N, replace: impl Fn(N, N) -> bool) {
    match acc {
        Some(current) if !replace(*current, value) => {}
        _ => *acc = Some(value),
    }
}

impl<In: 'static, N: Number> AggregateFunction<In> for Min<In, N> {
    type Acc = Option<N>;
    type Out = Option<N>;
    fn create(&self) -> Option<N> {
        None
    }
    fn add(&self, acc: &mut Option<N>, value: &In) {
        pick(acc, (self.field)(value), |current, new| new < current);
    }
    fn merge(&self, acc: &mut Option<N>, other: Option<N>) {
        if let Some(other) = other {
            pick(acc, other, |current, new| new < current);
        }
    }
    fn result(&self, acc: &Option<N>) -> Option<N> {
        *acc
    }
}

impl<In: 'static, N: Number> AggregateFunction<In> for Max<In, N> {
    type Acc = Option<N>;
    type Out = Option<N>;
    fn create(&self) -> Option<N> {
        None
    }
    fn add(&self, acc: &mut Option<N>, value: &In) {
        pick(acc, (self.field)(value), |current, new| new > current);
    }
    fn merge(&self, acc: &mut Option<N>, other: Option<N>) {
        if let Some(other) = other {
            pick(acc, other, |current, new| new > current);
        }
    }
    fn result(&self, acc: &Option<N>) -> Option<N> {
        *acc
    }
}

/// Combines records pairwise with a function (Flink's `reduce`): the result is the first
/// record folded with each next one.
///
/// ```
/// use riffle::aggregate::{AggregateFunction, Reduce};
/// let longest = Reduce::new(|a: String, b: String| if b.len() > a.len() { b } else { a });
/// let mut acc = longest.create();
/// longest.add(&mut acc, &"ab".to_string());
/// longest.add(&mut acc, &"abc".to_string());
/// assert_eq!(longest.result(&acc), "abc");
/// ```
pub struct Reduce<T> {
    combine: Arc<dyn Fn(T, T) -> T + Send + Sync>,
}

impl<T> Clone for Reduce<T> {
    fn clone(&self) -> Self {
        Reduce {
            combine: self.combine.clone(),
        }
    }
}

impl<T> Reduce<T> {
    /// Reduces with `combine(accumulated, next)`.
    pub fn new(combine: impl Fn(T, T) -> T + Send + Sync + 'static) -> Self {
        Reduce {
            combine: Arc::new(combine),
        }
    }

    fn fold(&self, acc: &mut Option<T>, value: T) {
        *acc = Some(match acc.take() {
            Some(current) => (self.combine)(current, value),
            None => value,
        });
    }
}

impl<T: Data + Sync> AggregateFunction<T> for Reduce<T> {
    type Acc = Option<T>;
    type Out = T;
    fn create(&self) -> Option<T> {
        None
    }
    fn add(&self, acc: &mut Option<T>, value: &T) {
        self.fold(acc, value.clone());
    }
    fn merge(&self, acc: &mut Option<T>, other: Option<T>) {
        if let Some(other) = other {
            self.fold(acc, other);
        }
    }
    /// The reduced record. Results are asked only of accumulators that saw a record (a window
    /// with records, a key after its first record).
    fn result(&self, acc: &Option<T>) -> T {
        acc.clone()
            .expect("a reduce result is asked only after a record")
    }
}

macro_rules! record_by_field {
    ($(#[$doc:meta])* $name:ident, $replace:expr) => {
        $(#[$doc])*
        pub struct $name<In, N> {
            field: Field<In, N>,
        }

        impl<In, N> $name<In, N> {
            /// Keeps the record whose `field` wins (the first one on a tie).
            pub fn of(field: impl Fn(&In) -> N + Send + Sync + 'static) -> Self {
                $name { field: Arc::new(field) }
            }
        }

        impl<In, N> Clone for $name<In, N> {
            fn clone(&self) -> Self {
                $name { field: self.field.clone() }
            }
        }

        impl<In: Data + Sync, N: Number> AggregateFunction<In> for $name<In, N> {
            type Acc = Option<In>;
            type Out = In;
            fn create(&self) -> Option<In> {
                None
            }
            fn add(&self, acc: &mut Option<In>, value: &In) {
                let replace: fn(N, N) -> bool = $replace;
                if acc
                    .as_ref()
                    .is_none_or(|current| replace((self.field)(current), (self.field)(value)))
                {
                    *acc = Some(value.clone());
                }
            }
            fn merge(&self, acc: &mut Option<In>, other: Option<In>) {
                if let Some(other) = other {
                    self.add(acc, &other);
                }
            }
            /// The winning record (asked only after a record).
            fn result(&self, acc: &Option<In>) -> In {
                acc.clone().expect("a result is asked only after a record")
            }
        }
    };
}

record_by_field!(
    /// The record with the smallest value of a numeric field (Flink's `minBy`).
    MinBy,
    |current, new| new < current
);
record_by_field!(
    /// The record with the largest value of a numeric field (Flink's `maxBy`).
    MaxBy,
    |current, new| new > current
);

/// The running sum and count of an average.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AvgAcc {
    /// Sum of the values.
    pub sum: f64,
    /// Number of values.
    pub count: u64,
}

impl<In: 'static, N: Number> AggregateFunction<In> for Avg<In, N> {
    type Acc = AvgAcc;
    type Out = Option<f64>;
    fn create(&self) -> AvgAcc {
        AvgAcc::default()
    }
    fn add(&self, acc: &mut AvgAcc, value: &In) {
        acc.sum += (self.field)(value).as_f64();
        acc.count += 1;
    }
    fn merge(&self, acc: &mut AvgAcc, other: AvgAcc) {
        acc.sum += other.sum;
        acc.count += other.count;
    }
    fn result(&self, acc: &AvgAcc) -> Option<f64> {
        (acc.count > 0).then(|| acc.sum / acc.count as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<A: AggregateFunction<i64>>(agg: &A, values: &[i64]) -> A::Out {
        // Split in two partial aggregates and merge, as a pre-aggregation would.
        let (left, right) = values.split_at(values.len() / 2);
        let mut acc = agg.create();
        left.iter().for_each(|v| agg.add(&mut acc, v));
        let mut other = agg.create();
        right.iter().for_each(|v| agg.add(&mut other, v));
        agg.merge(&mut acc, other);
        agg.result(&acc)
    }

    #[test]
    fn built_in_aggregates() {
        let values = [4, -2, 9, 3];
        assert_eq!(run(&Count, &values), 4);
        assert_eq!(run(&Sum::of(|v: &i64| *v), &values), 14);
        assert_eq!(run(&Min::of(|v: &i64| *v), &values), Some(-2));
        assert_eq!(run(&Max::of(|v: &i64| *v), &values), Some(9));
        assert_eq!(run(&Avg::of(|v: &i64| *v), &values), Some(3.5));
        assert_eq!(run(&Min::of(|v: &i64| *v), &[]), None);
        assert_eq!(run(&Avg::of(|v: &i64| *v), &[]), None);
    }
}
