//! Window join and co-group as full-window functions over both inputs' records (Flink's
//! `CoGroupedStreams` over a tagged union): the window operator keeps `Either::Left` and
//! `Either::Right` records of a key and window together, and when the window fires these
//! functions split them into the first input's and the second's.

use std::marker::PhantomData;

use crate::error::Result;
use crate::record::{Data, Either};
use crate::window::{ProcessWindowFunction, TimeWindow, WindowCollector};

/// Splits a window's records into the first input's and the second's, in arrival order.
fn split<A: Clone, B: Clone>(records: &[Either<A, B>]) -> (Vec<A>, Vec<B>) {
    let mut lefts = Vec::new();
    let mut rights = Vec::new();
    for record in records {
        match record {
            Either::Left(a) => lefts.push(a.clone()),
            Either::Right(b) => rights.push(b.clone()),
        }
    }
    (lefts, rights)
}

/// A window join: `function(left, right, out)` for every pair of a left and a right record of
/// one key in one window (lefts in arrival order, then rights in arrival order).
#[derive(Clone)]
pub(crate) struct JoinPairs<F, A, B> {
    pub(crate) function: F,
    pub(crate) _types: PhantomData<fn(A, B)>,
}

impl<K, A, B, Out, F> ProcessWindowFunction<K, Either<A, B>, Out> for JoinPairs<F, A, B>
where
    A: Data,
    B: Data,
    Out: Data,
    F: FnMut(A, B, &mut WindowCollector<Out>) -> Result<()> + Send + 'static,
{
    fn process(
        &mut self,
        _key: &K,
        _window: TimeWindow,
        records: &[Either<A, B>],
        out: &mut WindowCollector<Out>,
    ) -> Result<()> {
        let (lefts, rights) = split(records);
        if rights.is_empty() {
            return Ok(());
        }
        for left in &lefts {
            for right in &rights {
                (self.function)(left.clone(), right.clone(), out)?;
            }
        }
        Ok(())
    }
}

/// A window co-group: `function(key, lefts, rights, out)` once per key and window, with all the
/// records of both inputs (either side may be empty).
#[derive(Clone)]
pub(crate) struct CoGroupAll<F, A, B> {
    pub(crate) function: F,
    pub(crate) _types: PhantomData<fn(A, B)>,
}

impl<K, A, B, Out, F> ProcessWindowFunction<K, Either<A, B>, Out> for CoGroupAll<F, A, B>
where
    A: Data,
    B: Data,
    Out: Data,
    F: FnMut(&K, Vec<A>, Vec<B>, &mut WindowCollector<Out>) -> Result<()> + Send + 'static,
{
    fn process(
        &mut self,
        key: &K,
        _window: TimeWindow,
        records: &[Either<A, B>],
        out: &mut WindowCollector<Out>,
    ) -> Result<()> {
        let (lefts, rights) = split(records);
        (self.function)(key, lefts, rights, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_split_by_input_in_arrival_order() {
        let records = vec![
            Either::Left(1),
            Either::Right("a"),
            Either::Left(2),
            Either::Right("b"),
        ];
        assert_eq!(split(&records), (vec![1, 2], vec!["a", "b"]));
    }
}
