//! `riffle sql -f job.sql --group NAME`: the script run by a group of processes on Kafka
//! (docs/scale-out.md, "SQL jobs in a group"), as `riffle demo --kafka B --group NAME` runs the
//! seed's job.
//!
//! The script is planned once on an environment that never runs ([`SqlEnv::plan_group`]): that
//! gives the Kafka cluster, the topics its tables read and a repartition topic per keyed step,
//! which are created when absent. The process then joins the consumer group `NAME` for all of
//! them and, for each run the group starts (an assignment), runs the script again on a new
//! environment as a member ([`SqlEnv::in_group`]): its Kafka tables read the partitions
//! assigned, its keyed steps read theirs from the repartition topics, and its Kafka sinks
//! commit with the input offsets and the state snapshot in the group's transactions.
//!
//! [`SqlEnv::plan_group`]: riffle_sql::SqlEnv::plan_group
//! [`SqlEnv::in_group`]: riffle_sql::SqlEnv::in_group

use std::path::Path;

use riffle::StreamEnv;
use riffle_kafka::{KafkaGroup, run_in_group_with};

use crate::demos::kafka::{member_engine, member_run_options, print_run};
use crate::sql::{SqlArgs, report, run_job, session, sql_error};

/// Runs `script` (read from `file`) as one member of the process group `name` until it is
/// stopped.
pub fn run(args: &SqlArgs, file: &Path, script: &str, name: &str) -> riffle::Result<()> {
    let engine = member_engine(&args.engine)?;
    let partitions = args.group.shuffle_partitions;
    if partitions == 0 {
        return Err(riffle::Error::config(
            "--shuffle-partitions",
            "must be at least 1",
        ));
    }
    // The plan, on an environment that is never executed.
    let planning = StreamEnv::with_config(engine.env_config("sql")?);
    let (done, plan) = session(&planning, args)?
        .plan_group(name, partitions, script)
        .map_err(sql_error(file))?;
    if report(&done) == 0 {
        return Err(riffle::Error::config(
            "--file",
            format!(
                "{}: a group runs jobs: the script has no INSERT INTO and no query",
                file.display()
            ),
        ));
    }
    let shuffles = plan.shuffles();
    for shuffle in &shuffles {
        shuffle.create_topic()?;
    }
    let kafka = plan.kafka.clone().expect("a group's plan has its cluster");
    let group = KafkaGroup::join(kafka.clone(), name, plan.all_topics())?;
    group.set_standby_replicas(args.group.num_standby_replicas.unwrap_or(0));
    if let Some(hash) = &args.group.upgrade_from {
        group.set_upgrade_from(hash.clone());
    }
    let repartitions: Vec<String> = shuffles.iter().map(|s| s.topic()).collect();
    println!(
        "riffle sql --group {name}: a member on {}; reads {}; repartitions through {} (exactly-once, commits every {} ms)",
        kafka.bootstrap(),
        plan.topics.join(", "),
        if repartitions.is_empty() {
            "none".to_string()
        } else {
            repartitions.join(", ")
        },
        engine
            .checkpoint_interval_ms
            .expect("a member's engine has a checkpoint interval"),
    );
    let options = member_run_options(&engine, &group)?;
    let mut runs = 0u64;
    run_in_group_with(
        &group,
        |group| {
            runs += 1;
            print_run(runs, group);
            let env = StreamEnv::with_config(engine.env_config("sql")?);
            let sql = session(&env, args)?;
            sql.in_group(group, &plan).map_err(sql_error(file))?;
            sql.execute_sql(script).map_err(sql_error(file))?;
            Ok(env)
        },
        |env| run_job(env, &options),
    )?;
    Ok(())
}
