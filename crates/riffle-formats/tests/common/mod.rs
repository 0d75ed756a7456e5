//! What the Avro tests share: the test schema registry and subjects no other test uses.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};

use riffle_formats::SchemaRegistry;

/// The registry `scripts/test.sh` starts (`RIFFLE_SCHEMA_REGISTRY_URL`).
pub fn registry() -> SchemaRegistry {
    let url = std::env::var("RIFFLE_SCHEMA_REGISTRY_URL").expect(
        "RIFFLE_SCHEMA_REGISTRY_URL is not set: start a registry with `./scripts/schema-registry.sh start && eval \"$(./scripts/schema-registry.sh env)\"` (the README's test command does)",
    );
    SchemaRegistry::new(&url).expect("a registry URL")
}

/// A name no other test (or earlier run) uses.
pub fn unique(name: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{name}-{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}
