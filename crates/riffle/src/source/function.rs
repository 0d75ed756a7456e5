//! A source from a closure, for quick jobs and tests: record `i` is `f(i)`, for `i` in
//! `0..count`. Its position is the next index, so it replays exactly after a restore.

use std::sync::Arc;

use crate::record::Data;
use crate::source::datagen::Generator;

/// A [`Generator`] calling a closure: what [`StreamEnv::from_fn`](crate::StreamEnv::from_fn)
/// reads.
pub struct FnGenerator<T> {
    f: Arc<dyn Fn(u64) -> T + Send + Sync>,
}

impl<T> FnGenerator<T> {
    /// Record `i` is `f(i)`.
    pub fn new(f: impl Fn(u64) -> T + Send + Sync + 'static) -> Self {
        FnGenerator { f: Arc::new(f) }
    }
}

impl<T: Data> Generator for FnGenerator<T> {
    type Item = T;

    fn generate(&self, index: u64) -> T {
        (self.f)(index)
    }

    fn name(&self) -> String {
        "from_fn".into()
    }
}
