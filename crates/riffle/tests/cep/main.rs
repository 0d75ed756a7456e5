//! Complex event processing end to end: patterns on keyed streams, checked against a batch
//! matcher written independently in the tests.

mod groups;
mod jobs;
mod properties;
mod reference;
