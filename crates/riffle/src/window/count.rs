//! Count windows (Flink's `countWindow`): a tumbling count window fires when its key has
//! `size` records and then starts empty; a sliding one fires every `slide` records over the
//! key's last `size` records. The windows are keyed state, so they are part of checkpoints and
//! rescale with their key groups. The API is [`crate::api::CountWindowedStream`].

use std::hash::Hash;

use crate::error::Result;
use crate::operators::{KeyedContext, KeyedProcessFunction};
use crate::record::Data;
use crate::state::{ListStateDescriptor, ValueStateDescriptor};

/// Name of the state holding the records of a key's current count window.
const WINDOW_STATE: &str = "count-window";
/// Records of the key since the window last fired (sliding windows).
static SINCE_FIRED: ValueStateDescriptor<u64> = ValueStateDescriptor::new("count-window-since");

/// The keyed function behind count windows.
#[derive(Clone)]
pub(crate) struct CountWindow<T, F> {
    size: u64,
    slide: u64,
    function: F,
    _records: std::marker::PhantomData<fn() -> T>,
}

impl<T, F> CountWindow<T, F> {
    /// Windows of `size` records per key, firing every `slide` records (`slide == size`:
    /// tumbling), each given to `function`.
    pub(crate) fn new(size: u64, slide: u64, function: F) -> Self {
        CountWindow {
            size,
            slide,
            function,
            _records: std::marker::PhantomData,
        }
    }
}

impl<K, T, Out, F> KeyedProcessFunction<K, T, Out> for CountWindow<T, F>
where
    K: Data + Hash + Eq,
    T: Data,
    Out: Data,
    F: FnMut(&K, &[T], &mut KeyedContext<'_, '_, K, Out>) -> Result<()> + Send + 'static,
{
    fn process_element(
        &mut self,
        key: &K,
        value: T,
        ctx: &mut KeyedContext<'_, '_, K, Out>,
    ) -> Result<()> {
        let descriptor = window_of::<T>();
        let mut records = ctx.list(&descriptor).get()?;
        records.push(value);
        if records.len() as u64 > self.size {
            records.remove(0);
        }
        let since = ctx.value(&SINCE_FIRED).get()?.unwrap_or(0) + 1;
        let tumbling = self.slide == self.size;
        let fires = if tumbling {
            records.len() as u64 == self.size
        } else {
            since == self.slide
        };
        if !fires {
            ctx.list(&descriptor).update(records)?;
            return ctx.value(&SINCE_FIRED).set(since);
        }
        (self.function)(key, &records, ctx)?;
        if tumbling {
            ctx.list(&descriptor).clear()?;
        } else {
            ctx.list(&descriptor).update(records)?;
        }
        ctx.value(&SINCE_FIRED).clear()
    }
}

/// The window's list state, typed for the records.
fn window_of<T>() -> ListStateDescriptor<T> {
    ListStateDescriptor::new(WINDOW_STATE)
}
