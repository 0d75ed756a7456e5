//! `riffle savepoint inspect DIR`: what a savepoint (or a checkpoint) holds, read from its
//! manifest without running anything: the job, each operator's uid, name, parallelism and key
//! groups with state, its sizes and watermark, and each declared state's name, version, type and
//! format (what a new version of the job must be able to read, docs/operations.md), then the
//! key-value stores' files.

use clap::{Args, Subcommand};
use riffle::checkpoint::{CheckpointStorage, Manifest, OperatorState};
use serde_json::json;

/// What `riffle savepoint` does besides taking one.
#[derive(Subcommand, Debug)]
pub enum SavepointCommand {
    /// List what a savepoint or checkpoint holds: operators, uids, state names, versions, types,
    /// key groups and sizes.
    Inspect(InspectArgs),
}

/// Options of `riffle savepoint inspect`.
#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The savepoint or checkpoint: its directory (the one holding `_manifest.json`) or
    /// s3://bucket/prefix (S3 settings from the AWS_* environment).
    #[arg(value_name = "DIR")]
    pub location: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs a `riffle savepoint` sub-command.
pub fn run(command: &SavepointCommand) -> riffle::Result<()> {
    match command {
        SavepointCommand::Inspect(args) => {
            let text = inspect(&args.location, args.json)?;
            println!("{text}");
            Ok(())
        }
    }
}

/// The report of `riffle savepoint inspect` on `location`.
pub fn inspect(location: &str, as_json: bool) -> riffle::Result<String> {
    if !location.starts_with("s3://") && !std::path::Path::new(location).is_dir() {
        return Err(riffle::Error::config(
            "DIR",
            format!("`{location}` is not a directory"),
        ));
    }
    let storage = CheckpointStorage::open(location, &[], "", "DIR")?;
    let manifest = storage.read_manifest("")?;
    Ok(if as_json {
        serde_json::to_string_pretty(&report_json(&manifest)).expect("JSON of a report")
    } else {
        report_text(&manifest, storage.description())
    })
}

/// Bytes of keyed and of operator state an operator's subtasks wrote, and its key groups with
/// keyed state.
fn sizes(operator: &OperatorState) -> (u64, u64, usize) {
    let keyed = operator
        .subtasks
        .iter()
        .flat_map(|s| s.keyed.iter().map(|(_, e)| e.len))
        .sum();
    let op = operator
        .subtasks
        .iter()
        .filter_map(|s| s.operator.map(|(_, e)| e.len))
        .sum();
    let groups = operator.subtasks.iter().map(|s| s.keyed.len()).sum();
    (keyed, op, groups)
}

/// The lowest watermark of the operator's subtasks (none before the first one).
fn watermark(operator: &OperatorState) -> Option<i64> {
    operator
        .subtasks
        .iter()
        .filter_map(|s| s.watermark)
        .min()
        .filter(|w| *w != i64::MIN)
}

/// An epoch-millisecond time as RFC 3339 (UTC), with the number.
fn taken_at(ms: i64) -> String {
    let time = u64::try_from(ms)
        .ok()
        .map(|ms| std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms));
    match time {
        Some(time) => format!("{} ({ms})", humantime::format_rfc3339_millis(time)),
        None => format!("{ms} (epoch ms)"),
    }
}

/// The declared states of the operator, one per name.
fn states(operator: &OperatorState) -> Vec<&riffle::state::StateSchema> {
    let mut states: Vec<&riffle::state::StateSchema> = Vec::new();
    for schema in operator.subtasks.iter().flat_map(|s| &s.states) {
        if !states.iter().any(|s| s.name == schema.name) {
            states.push(schema);
        }
    }
    states
}

fn kind(manifest: &Manifest) -> &'static str {
    match manifest.kind {
        riffle::checkpoint::SnapshotKind::Checkpoint => "checkpoint",
        riffle::checkpoint::SnapshotKind::Savepoint => "savepoint",
    }
}

fn bytes(n: u64) -> String {
    match n {
        0..1_024 => format!("{n} B"),
        1_024..1_048_576 => format!("{:.1} KiB", n as f64 / 1_024.0),
        _ => format!("{:.1} MiB", n as f64 / 1_048_576.0),
    }
}

fn report_text(manifest: &Manifest, location: &str) -> String {
    let mut out = format!(
        "{} {} of job `{}` in {location}\n  taken at {}, {} key groups, key hash version {}{}\n",
        kind(manifest),
        manifest.checkpoint_id,
        manifest.job,
        taken_at(manifest.timestamp),
        manifest.max_parallelism,
        manifest.key_hash_version,
        if manifest.finished {
            ", finished (a restore reads no input)"
        } else {
            ""
        },
    );
    for (uid, operator) in &manifest.operators {
        let (keyed, op, groups) = sizes(operator);
        out.push_str(&format!(
            "operator uid `{uid}` ({}): parallelism {}, {}",
            operator.name,
            operator.parallelism,
            if operator.keyed { "keyed" } else { "not keyed" }
        ));
        if groups > 0 {
            out.push_str(&format!(
                ", {groups} key groups with state ({})",
                bytes(keyed)
            ));
        }
        if op > 0 {
            out.push_str(&format!(", operator state {}", bytes(op)));
        }
        if let Some(w) = watermark(operator) {
            out.push_str(&format!(", watermark {w}"));
        }
        out.push('\n');
        for state in states(operator) {
            out.push_str(&format!(
                "  state `{}`: version {}, {}{}\n",
                state.name,
                state.version,
                state.type_name,
                state
                    .format
                    .as_ref()
                    .map(|f| format!(" = {}", f.describe()))
                    .unwrap_or_default()
            ));
        }
    }
    for store in &manifest.stores {
        let size: u64 = store.files.iter().map(|(_, f)| f.size).sum();
        out.push_str(&format!(
            "store `{}`: key groups {}..={}, {} files, {}\n",
            store.store_id,
            store.key_groups.0,
            store.key_groups.1,
            store.files.len(),
            bytes(size)
        ));
    }
    out.trim_end().to_string()
}

fn report_json(manifest: &Manifest) -> serde_json::Value {
    let operators: Vec<serde_json::Value> = manifest
        .operators
        .iter()
        .map(|(uid, operator)| {
            let (keyed, op, groups) = sizes(operator);
            json!({
                "uid": uid,
                "name": operator.name,
                "parallelism": operator.parallelism,
                "keyed": operator.keyed,
                "key_groups_with_state": groups,
                "keyed_bytes": keyed,
                "operator_bytes": op,
                "watermark": watermark(operator),
                "states": states(operator).iter().map(|s| json!({
                    "name": s.name,
                    "version": s.version,
                    "type": s.type_name,
                    "format": s.format.as_ref().map(|f| f.describe()),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let stores: Vec<serde_json::Value> = manifest
        .stores
        .iter()
        .map(|store| {
            json!({
                "store_id": store.store_id,
                "key_groups": [store.key_groups.0, store.key_groups.1],
                "files": store.files.len(),
                "bytes": store.files.iter().map(|(_, f)| f.size).sum::<u64>(),
            })
        })
        .collect();
    json!({
        "kind": kind(manifest),
        "job": manifest.job,
        "checkpoint_id": manifest.checkpoint_id,
        "timestamp": manifest.timestamp,
        "max_parallelism": manifest.max_parallelism,
        "key_hash_version": manifest.key_hash_version,
        "finished": manifest.finished,
        "operators": operators,
        "stores": stores,
    })
}
