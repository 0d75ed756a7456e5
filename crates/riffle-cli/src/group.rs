//! `riffle group`: an operator's actions on a process group (`riffle demo --kafka B --group
//! NAME`, docs/scale-out.md), through the group's checkpoint storage.
//!
//! When a committed offset names a snapshot that is gone, the group's members do not exit (a
//! replacement would fail the same way, for ever): they wait, and report each such partition in
//! the storage. `riffle group missing-state` lists what they reported; `riffle group
//! accept-state-loss` accepts the loss, and the members start those partitions with empty state
//! at their committed offsets.

use clap::{Args, Subcommand};

/// What `riffle group` does.
#[derive(Subcommand, Debug)]
pub enum GroupCommand {
    /// List the partitions whose committed state the group's members cannot find (they wait).
    MissingState(GroupStorage),
    /// Accept the loss of the state the members reported missing: they start those partitions
    /// with empty state at their committed offsets (what they counted there is lost).
    AcceptStateLoss {
        /// Which group, and where its checkpoints are.
        #[command(flatten)]
        storage: GroupStorage,
        /// Only this partition (TOPIC-P, repeatable); default: every reported one.
        #[arg(long = "partition", value_name = "TOPIC-P")]
        partitions: Vec<String>,
    },
}

/// Which group, and where its checkpoints are.
#[derive(Args, Debug)]
pub struct GroupStorage {
    /// The group's name (the members' --group).
    #[arg(long, value_name = "NAME")]
    pub group: String,
    /// The group's checkpoint storage (the members' --checkpoint-dir: a directory or
    /// s3://bucket/prefix, S3 settings from the AWS_* environment); default: the demo's,
    /// riffle-out/pipeline/checkpoints.
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<String>,
}

/// Runs a `riffle group` command.
pub fn run(command: &GroupCommand) -> riffle::Result<()> {
    #[cfg(feature = "kafka")]
    return run_with_kafka(command);
    #[cfg(not(feature = "kafka"))]
    {
        let _ = command;
        Err(riffle::Error::config(
            "group",
            "process groups need riffle built with Kafka support (cargo build --features kafka)",
        ))
    }
}

#[cfg(feature = "kafka")]
fn run_with_kafka(command: &GroupCommand) -> riffle::Result<()> {
    let storage_of = |storage: &GroupStorage| {
        let dir = storage
            .checkpoint_dir
            .clone()
            .unwrap_or_else(|| "riffle-out/pipeline/checkpoints".to_string());
        riffle::checkpoint::CheckpointStorage::open(&dir, &[], "", "--checkpoint-dir")
    };
    match command {
        GroupCommand::MissingState(storage) => {
            let checkpoints = storage_of(storage)?;
            let missing = riffle_kafka::reported_missing_state(&checkpoints, &storage.group)?;
            if missing.is_empty() {
                println!(
                    "group `{}`: no missing state reported in {}",
                    storage.group,
                    checkpoints.description()
                );
            }
            for lost in &missing {
                println!("{lost}");
            }
            Ok(())
        }
        GroupCommand::AcceptStateLoss {
            storage,
            partitions,
        } => {
            let checkpoints = storage_of(storage)?;
            let reported = riffle_kafka::reported_missing_state(&checkpoints, &storage.group)?;
            let chosen: Vec<riffle_kafka::MissingState> = reported
                .into_iter()
                .filter(|lost| {
                    partitions.is_empty()
                        || partitions.contains(&format!("{}-{}", lost.topic, lost.partition))
                })
                .collect();
            if chosen.is_empty() {
                return Err(riffle::Error::config(
                    "--group",
                    format!(
                        "`{}` has no missing state reported in {}{}",
                        storage.group,
                        checkpoints.description(),
                        if partitions.is_empty() {
                            String::new()
                        } else {
                            format!(" for {}", partitions.join(", "))
                        }
                    ),
                ));
            }
            let by = format!(
                "riffle group accept-state-loss (pid {}, user {})",
                std::process::id(),
                std::env::var("USER").unwrap_or_else(|_| "?".into())
            );
            riffle_kafka::accept_state_loss(&checkpoints, &storage.group, &chosen, &by)?;
            for lost in &chosen {
                println!("accepted the loss of {lost}");
            }
            Ok(())
        }
    }
}
