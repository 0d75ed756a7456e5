//! `riffle jobs | savepoint | stop | cancel`: the jobs running on this machine (found through the
//! registry their web servers write) or at an address, and their control through the REST API.
//!
//! A job found in the registry is verified before any control request: the server at its
//! address must prove it holds the key of the job's registry entry, and only then is the token
//! sent. Tokens come from `--token-file`, `RIFFLE_WEB_TOKEN` or `--token` (which other users can
//! read in the process list).

use clap::Args;
use riffle_web::client::JobClient;
use riffle_web::registry;
use serde_json::{Value, json};

/// How to reach a job.
#[derive(Args, Clone, Debug)]
pub struct Target {
    /// The job: its id (or a prefix of at least 4 characters) or its name, as `riffle jobs`
    /// lists them.
    pub job: Option<String>,
    /// The job's API address (HOST:PORT) instead of looking the job up on this machine.
    #[arg(long, value_name = "HOST:PORT")]
    pub address: Option<String>,
    /// The job's token (when it was started with one). Other users on this machine can read a
    /// command line: prefer --token-file or the RIFFLE_WEB_TOKEN environment variable.
    #[arg(
        long,
        env = "RIFFLE_WEB_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// Read the job's token from this file (its first line); it takes precedence over --token
    /// and RIFFLE_WEB_TOKEN.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<std::path::PathBuf>,
}

/// The token in `file`: its first line, without surrounding white space.
pub fn read_token_file(file: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read the token file {}: {e}", file.display()))?;
    let token = text.lines().next().unwrap_or_default().trim();
    if token.is_empty() {
        return Err(format!("the token file {} is empty", file.display()));
    }
    Ok(token.to_string())
}

impl Target {
    fn token(&self) -> Result<Option<String>, String> {
        match &self.token_file {
            Some(file) => read_token_file(file).map(Some),
            None => Ok(self.token.clone()),
        }
    }

    /// A client of the job; for a registered job, verified before it gets the token.
    fn client(&self) -> Result<JobClient, String> {
        let token = self.token()?;
        match (&self.address, &self.job) {
            (Some(address), _) => {
                // A registered job at that address is verified; any other address is the
                // caller's own choice.
                let registered = registry::list()
                    .unwrap_or_default()
                    .into_iter()
                    .find(|entry| entry.address == *address);
                match registered {
                    Some(entry) => JobClient::verified(&entry, token).map_err(|e| e.to_string()),
                    None => Ok(JobClient::new(address, token)),
                }
            }
            (None, Some(job)) => {
                let entry = registry::find(job)?;
                JobClient::verified(&entry, token).map_err(|e| e.to_string())
            }
            (None, None) => Err("name the job (`riffle jobs` lists them) or give --address".into()),
        }
    }
}

/// `riffle jobs`: one line per job.
pub fn jobs(address: Option<&str>) -> Result<(), String> {
    let addresses: Vec<String> = match address {
        Some(address) => vec![address.to_string()],
        None => registry::list()
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|j| j.address)
            .collect(),
    };
    if addresses.is_empty() {
        println!(
            "no running jobs on this machine (registry: {})",
            registry::jobs_dir()
                .map(|d| d.display().to_string())
                .map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    println!(
        "{:<10} {:<28} {:<11} {:>10} {:>12} {:>12}  UI  GROUP",
        "ID", "NAME", "STATUS", "UPTIME", "IN/S", "OUT/S"
    );
    for address in addresses {
        let client = JobClient::new(&address, None);
        match client.get("/api/v1/job") {
            Ok(job) => {
                let status = if job["stopping"] == true {
                    "STOPPING"
                } else {
                    job["status"].as_str().unwrap_or("?")
                };
                println!(
                    "{:<10} {:<28} {:<11} {:>10} {:>12.0} {:>12.0}  {}/  {}",
                    job["id"].as_str().unwrap_or("?"),
                    job["name"].as_str().unwrap_or("?"),
                    status,
                    format!("{}s", job["uptime_ms"].as_u64().unwrap_or(0) / 1000),
                    job["source_records_per_sec"].as_f64().unwrap_or(0.0),
                    job["sink_records_per_sec"].as_f64().unwrap_or(0.0),
                    client.url(),
                    group_column(&client)
                );
            }
            Err(e) => println!("{:<10} {:<28} {:<11} ({e})", "?", "?", "UNREACHABLE"),
        }
    }
    Ok(())
}

/// `riffle jobs`' GROUP column: for a member of a process group, the group, the partitions the
/// member owns, the group's members and its lag by topic; `-` for a job in one process.
fn group_column(client: &JobClient) -> String {
    let Ok(group) = client.get("/api/v1/group") else {
        return "-".to_string();
    };
    let owned: Vec<&str> = group["owned"]
        .as_array()
        .map(|o| o.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let lag: Vec<String> = group["lag"]
        .as_object()
        .map(|l| l.iter().map(|(topic, n)| format!("{topic} {n}")).collect())
        .unwrap_or_default();
    let standby: Vec<&str> = group["standby"]
        .as_array()
        .map(|o| o.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    format!(
        "{} ({} members; owns {}; lag {}{})",
        group["group"].as_str().unwrap_or("?"),
        // The coordinator's live members when the brokers describe the group, else those
        // that committed.
        group["assigned"]
            .as_object()
            .filter(|m| !m.is_empty())
            .or(group["members"].as_object())
            .map_or(0, |m| m.len()),
        if owned.is_empty() {
            "nothing".to_string()
        } else {
            owned.join(" ")
        },
        lag.join(", "),
        if standby.is_empty() {
            String::new()
        } else {
            format!("; standby for {}", standby.join(" "))
        }
    )
}

fn post(target: &Target, path: &str, body: Value) -> Result<Value, String> {
    target
        .client()?
        .post(path, &body)
        .map_err(|e| e.to_string())
}

/// `riffle savepoint <job> [--target DIR]`: prints the savepoint's location.
pub fn savepoint(target: &Target, directory: Option<&str>) -> Result<(), String> {
    let answer = post(
        target,
        "/api/v1/job/savepoints",
        json!({ "target_directory": absolute(directory)? }),
    )?;
    println!("{}", answer["location"].as_str().unwrap_or_default());
    Ok(())
}

/// `riffle stop <job> [--savepoint [DIR]]`.
pub fn stop(target: &Target, savepoint: Option<&str>) -> Result<(), String> {
    let body = match savepoint {
        None => json!({}),
        Some("") => json!({ "savepoint": true }),
        Some(dir) => json!({ "savepoint": true, "target_directory": absolute(Some(dir))? }),
    };
    let answer = post(target, "/api/v1/job/stop", body)?;
    match answer["savepoint"].as_str() {
        Some(location) => println!("stopping after savepoint {location}"),
        None => println!("stopping: the job drains what is in flight"),
    }
    Ok(())
}

/// `riffle cancel <job>`.
pub fn cancel(target: &Target) -> Result<(), String> {
    post(target, "/api/v1/job/cancel", json!({}))?;
    println!("cancelling");
    Ok(())
}

/// A local directory made absolute against this shell's working directory (the job may run
/// elsewhere); `s3://` locations as given.
fn absolute(directory: Option<&str>) -> Result<Option<String>, String> {
    match directory {
        None => Ok(None),
        Some(dir) if dir.contains("://") => Ok(Some(dir.to_string())),
        Some(dir) => std::path::absolute(dir)
            .map(|p| Some(p.display().to_string()))
            .map_err(|e| format!("savepoint directory `{dir}`: {e}")),
    }
}
