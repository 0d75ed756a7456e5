//! Complex event processing end to end: patterns on keyed streams in real jobs.

mod jobs;
