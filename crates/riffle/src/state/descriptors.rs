//! State descriptors: the name, type and time-to-live of a piece of keyed state. Declare them as
//! `static`s and reach the state through the keyed context.

use std::marker::PhantomData;
use std::time::Duration;

use crate::error::Result;
use crate::state::evolution::StateValue;

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

/// Reads a value of an older version of a state's type (see [`StateValue`]): gets the old value
/// and the version that wrote it.
pub type Migration<V> = fn(StateValue, u32) -> Result<V>;

macro_rules! descriptor {
    ($(#[$doc:meta])* $name:ident<$($t:ident),*> migrates $m:ident) => {
        $(#[$doc])*
        pub struct $name<$($t),*> {
            pub(crate) name: &'static str,
            pub(crate) ttl: Option<StateTtl>,
            pub(crate) version: u32,
            pub(crate) migrate: Option<Migration<$m>>,
            _type: PhantomData<fn() -> ($($t,)*)>,
        }

        impl<$($t),*> $name<$($t),*> {
            /// A descriptor named `name` (unique within the operator), version 1.
            pub const fn new(name: &'static str) -> Self {
                $name { name, ttl: None, version: 1, migrate: None, _type: PhantomData }
            }

            /// Gives entries a time-to-live.
            pub const fn with_ttl(mut self, ttl: StateTtl) -> Self {
                self.ttl = Some(ttl);
                self
            }

            /// Declares the version of the state's type (1 unless declared). A savepoint written
            /// by an older version restores through the migration ([`with_migration`](Self::with_migration)),
            /// or by serde when the change is compatible; one written by a newer version does not.
            pub const fn with_version(mut self, version: u32) -> Self {
                self.version = version;
                self
            }

            /// Declares how a value of an older version is read (see [`StateValue`]).
            pub const fn with_migration(mut self, migrate: Migration<$m>) -> Self {
                self.migrate = Some(migrate);
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
    ValueStateDescriptor<V> migrates V
);
descriptor!(
    /// A list of values per key (a migration reads one old value of the list).
    ListStateDescriptor<V> migrates V
);
descriptor!(
    /// A map per key (a migration reads one old value of the map; the keys cannot change).
    MapStateDescriptor<UK, UV> migrates UV
);

/// One value per key, combined with each new one by a reduce function.
pub struct ReducingStateDescriptor<V> {
    pub(crate) name: &'static str,
    pub(crate) ttl: Option<StateTtl>,
    pub(crate) reduce: fn(V, V) -> V,
    pub(crate) version: u32,
    pub(crate) migrate: Option<Migration<V>>,
}

impl<V> ReducingStateDescriptor<V> {
    /// A descriptor named `name` combining values with `reduce`.
    pub const fn new(name: &'static str, reduce: fn(V, V) -> V) -> Self {
        ReducingStateDescriptor {
            name,
            ttl: None,
            reduce,
            version: 1,
            migrate: None,
        }
    }

    /// Gives entries a time-to-live.
    pub const fn with_ttl(mut self, ttl: StateTtl) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Declares the version of the state's type (see [`ValueStateDescriptor::with_version`]).
    pub const fn with_version(mut self, version: u32) -> Self {
        self.version = version;
        self
    }

    /// Declares how a value of an older version is read (see [`StateValue`]).
    pub const fn with_migration(mut self, migrate: Migration<V>) -> Self {
        self.migrate = Some(migrate);
        self
    }
}

/// One accumulator per key, fed by an [`AggregateFunction`](crate::aggregate::AggregateFunction).
///
/// Its accumulator's type evolves as serde allows (a field added with a default, one removed);
/// its version can be declared, a migration cannot (use a value state for that).
pub struct AggregatingStateDescriptor<In, A> {
    pub(crate) name: &'static str,
    pub(crate) ttl: Option<StateTtl>,
    pub(crate) aggregate: A,
    pub(crate) version: u32,
    _type: PhantomData<fn(In)>,
}

impl<In, A> AggregatingStateDescriptor<In, A> {
    /// A descriptor named `name` aggregating with `aggregate`.
    pub const fn new(name: &'static str, aggregate: A) -> Self {
        AggregatingStateDescriptor {
            name,
            ttl: None,
            aggregate,
            version: 1,
            _type: PhantomData,
        }
    }

    /// Gives entries a time-to-live.
    pub const fn with_ttl(mut self, ttl: StateTtl) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Declares the version of the accumulator's type (see [`ValueStateDescriptor::with_version`]).
    pub const fn with_version(mut self, version: u32) -> Self {
        self.version = version;
        self
    }
}
