//! State descriptors: the name, type and time-to-live of a piece of keyed state. Declare them as
//! `static`s and reach the state through the keyed context.

use std::marker::PhantomData;
use std::time::Duration;

/// When the time-to-live of an entry starts again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TtlUpdate {
    /// On every write (Flink's `OnCreateAndWrite`).
    OnWrite,
    /// On every read and write (`OnReadAndWrite`).
    OnReadAndWrite,
}

/// Time-to-live of state entries: an entry not touched for `ttl` (processing time) is gone; it
/// reads as absent and is cleaned up in the background.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateTtl {
    /// How long an entry lives after its last update.
    pub ttl: Duration,
    /// What counts as an update.
    pub update: TtlUpdate,
}

impl StateTtl {
    /// Entries expire `ttl` after their last write.
    pub const fn after_write(ttl: Duration) -> Self {
        StateTtl {
            ttl,
            update: TtlUpdate::OnWrite,
        }
    }

    /// Entries expire `ttl` after their last read or write.
    pub const fn after_access(ttl: Duration) -> Self {
        StateTtl {
            ttl,
            update: TtlUpdate::OnReadAndWrite,
        }
    }
}

macro_rules! descriptor {
    ($(#[$doc:meta])* $name:ident<$($t:ident),*>) => {
        $(#[$doc])*
        pub struct $name<$($t),*> {
            pub(crate) name: &'static str,
            pub(crate) ttl: Option<StateTtl>,
            _type: PhantomData<fn() -> ($($t,)*)>,
        }

        impl<$($t),*> $name<$($t),*> {
            /// A descriptor named `name` (unique within the operator).
            pub const fn new(name: &'static str) -> Self {
                $name { name, ttl: None, _type: PhantomData }
            }

            /// Gives entries a time-to-live.
            pub const fn with_ttl(mut self, ttl: StateTtl) -> Self {
                self.ttl = Some(ttl);
                self
            }

            /// The state's name.
            pub fn name(&self) -> &'static str {
                self.name
            }
        }
    };
}

descriptor!(
    /// One value per key.
    ValueStateDescriptor<V>
);
descriptor!(
    /// A list of values per key.
    ListStateDescriptor<V>
);
descriptor!(
    /// A map per key.
    MapStateDescriptor<UK, UV>
);

/// One value per key, combined with each new one by a reduce function.
pub struct ReducingStateDescriptor<V> {
    pub(crate) name: &'static str,
    pub(crate) ttl: Option<StateTtl>,
    pub(crate) reduce: fn(V, V) -> V,
}

impl<V> ReducingStateDescriptor<V> {
    /// A descriptor named `name` combining values with `reduce`.
    pub const fn new(name: &'static str, reduce: fn(V, V) -> V) -> Self {
        ReducingStateDescriptor {
            name,
            ttl: None,
            reduce,
        }
    }

    /// Gives entries a time-to-live.
    pub const fn with_ttl(mut self, ttl: StateTtl) -> Self {
        self.ttl = Some(ttl);
        self
    }
}

/// One accumulator per key, fed by an [`AggregateFunction`](crate::aggregate::AggregateFunction).
pub struct AggregatingStateDescriptor<In, A> {
    pub(crate) name: &'static str,
    pub(crate) ttl: Option<StateTtl>,
    pub(crate) aggregate: A,
    _type: PhantomData<fn(In)>,
}

impl<In, A> AggregatingStateDescriptor<In, A> {
    /// A descriptor named `name` aggregating with `aggregate`.
    pub const fn new(name: &'static str, aggregate: A) -> Self {
        AggregatingStateDescriptor {
            name,
            ttl: None,
            aggregate,
            _type: PhantomData,
        }
    }

    /// Gives entries a time-to-live.
    pub const fn with_ttl(mut self, ttl: StateTtl) -> Self {
        self.ttl = Some(ttl);
        self
    }
}
