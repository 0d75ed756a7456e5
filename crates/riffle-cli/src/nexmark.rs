//! `riffle nexmark`: the Nexmark benchmark (crate `riffle-nexmark`). `generate` writes the
//! events as JSON lines so other systems can run on identical data; `run` runs a query (or all
//! of them) and reports events per second, events per CPU-second of the whole process, and the
//! peak resident memory.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use riffle::source::BadRecordPolicy;
use riffle::source::file::FileSource;
use riffle::time::WatermarkStrategy;
use riffle::{EnvConfig, Error, StreamEnv};
use riffle_nexmark::{Event, NexmarkConfig, NexmarkSource, Query, ResultSink, add_query};
use serde::{Deserialize, Serialize};

use crate::demos::StateBackendArg;

/// What `riffle nexmark` does.
#[derive(Subcommand, Debug)]
pub enum NexmarkCommand {
    /// Write the events as JSON lines: `events/` (every event, tagged by type) and `person/`,
    /// `auction/`, `bid/` (one directory per type).
    Generate(GenerateArgs),
    /// Run a query (or --all) and print events/s, events per CPU-second and peak memory.
    Run(RunArgs),
}

/// The generator's settings.
#[derive(Args, Clone, Debug)]
pub struct GeneratorArgs {
    /// Events in all (1 person, 3 auctions, 46 bids in every 50).
    #[arg(long, value_name = "N", default_value_t = 10_000_000)]
    pub events: u64,
    /// Events per second of event time (the inter-event delay is its inverse); the nexmark
    /// project's suite uses 10M.
    #[arg(long, value_name = "N", default_value_t = riffle_nexmark::source::DEFAULT_EVENTS_PER_SECOND)]
    pub events_per_second: f64,
    /// Shuffle events within groups of this many event numbers (1: in order).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub out_of_order_group_size: usize,
    /// Time of the first event, epoch ms.
    #[arg(long, value_name = "MS", default_value_t = riffle_nexmark::source::DEFAULT_BASE_TIME)]
    pub base_time: i64,
}

impl GeneratorArgs {
    /// The source's configuration, checked; errors name the flag.
    pub fn config(&self, rate: Option<f64>) -> riffle::Result<NexmarkConfig> {
        let config = NexmarkConfig {
            events: Some(self.events),
            events_per_second: self.events_per_second,
            base_time: self.base_time,
            out_of_order_group_size: self.out_of_order_group_size,
            rate,
            ..NexmarkConfig::default()
        };
        config.validate().map_err(|e| match e {
            Error::Config { setting, message } => {
                Error::config(format!("--{}", setting.replace('_', "-")), message)
            }
            other => other,
        })?;
        Ok(config)
    }
}

/// Options of `riffle nexmark generate`.
#[derive(Args, Clone, Debug)]
pub struct GenerateArgs {
    /// The events.
    #[command(flatten)]
    pub generator: GeneratorArgs,
    /// Directory to write into.
    #[arg(long, value_name = "DIR")]
    pub output: PathBuf,
}

/// Options of `riffle nexmark run`.
#[derive(Args, Clone, Debug)]
pub struct RunArgs {
    /// The query: q0–q22.
    #[arg(long, value_name = "QUERY", required_unless_present = "all")]
    pub query: Option<Query>,
    /// Run every implemented query, each in its own process, and print one table.
    #[arg(long, conflicts_with = "query")]
    pub all: bool,
    /// The events (ignored with --input, which brings its own).
    #[command(flatten)]
    pub generator: GeneratorArgs,
    /// Parallel subtasks per operator (default: the number of cores).
    #[arg(long, short = 'p')]
    pub parallelism: Option<usize>,
    /// Where keyed state lives: heap, or rocksdb (riffle built with --features rocksdb).
    #[arg(long, value_enum, default_value_t = StateBackendArg::Heap)]
    pub state_backend: StateBackendArg,
    /// Read the events from a `riffle nexmark generate` directory instead of generating them.
    #[arg(long, value_name = "DIR")]
    pub input: Option<PathBuf>,
    /// Write the results as JSON lines under DIR/<query>/ (changelog rows marked +I / +U; q10:
    /// CSV files under DIR/q10/dt=<date>/hm=<HH%3Amm>/); without it they are counted and
    /// dropped, as the benchmark does (q10 writes into a scratch directory, removed after).
    #[arg(long, value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Generate at most this many events per second (wall clock).
    #[arg(long, value_name = "EVENTS_PER_SEC")]
    pub rate: Option<f64>,
    /// Run the query's SQL text (the nexmark project's, `riffle_nexmark::sql`) through Riffle's
    /// SQL instead of its DataStream program, on the same generated events (every query; not
    /// with --input or --output).
    #[arg(long)]
    pub sql: bool,
    /// Print the measurements as one JSON object (what --all reads from its child processes).
    #[arg(long, hide = true)]
    pub json: bool,
}

/// What one run measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Measurement {
    /// The query.
    pub query: String,
    /// Parallelism.
    pub parallelism: usize,
    /// Events read by the source.
    pub events: u64,
    /// Result rows (changelog rows for updating queries).
    pub results: u64,
    /// Wall-clock seconds of the job.
    pub seconds: f64,
    /// CPU seconds (user + system) of the whole process.
    pub cpu_seconds: f64,
    /// Peak resident memory of the process, bytes.
    pub peak_rss: u64,
}

impl Measurement {
    /// Events per wall-clock second.
    pub fn events_per_second(&self) -> f64 {
        self.events as f64 / self.seconds.max(1e-9)
    }

    /// Events per CPU-second of the whole process.
    pub fn events_per_cpu_second(&self) -> f64 {
        self.events as f64 / self.cpu_seconds.max(1e-9)
    }
}

/// Runs `riffle nexmark`.
pub fn run(command: &NexmarkCommand) -> riffle::Result<()> {
    match command {
        NexmarkCommand::Generate(args) => {
            let started = Instant::now();
            let counts = generate(args)?;
            println!(
                "riffle nexmark generate: {} events ({} persons, {} auctions, {} bids) in {:.1} s -> {}/{{events,person,auction,bid}}/part-0.jsonl",
                counts.iter().sum::<u64>(),
                counts[0],
                counts[1],
                counts[2],
                started.elapsed().as_secs_f64(),
                args.output.display()
            );
            Ok(())
        }
        NexmarkCommand::Run(args) if args.all => run_all(args),
        NexmarkCommand::Run(args) => {
            let query = args.query.expect("clap requires --query without --all");
            let m = run_query(query, args)?;
            if args.json {
                println!("{}", serde_json::to_string(&m).expect("serializes"));
            } else {
                print_table(&[m]);
            }
            Ok(())
        }
    }
}

/// Writes the events of `args`; returns the persons, auctions and bids written.
pub fn generate(args: &GenerateArgs) -> riffle::Result<[u64; 3]> {
    let config = args.generator.config(None)?;
    let dir = &args.output;
    let io =
        |path: &Path, e: std::io::Error| Error::io(format!("cannot write `{}`", path.display()), e);
    let mut files = Vec::new();
    for name in ["events", "person", "auction", "bid"] {
        let sub = dir.join(name);
        std::fs::create_dir_all(&sub)
            .map_err(|e| Error::config("--output", format!("`{}`: {e}", sub.display())))?;
        let path = sub.join("part-0.jsonl");
        let file = std::fs::File::create(&path).map_err(|e| io(&path, e))?;
        files.push((path, std::io::BufWriter::with_capacity(1 << 20, file)));
    }
    let mut counts = [0u64; 3];
    for event in config.iter() {
        let (path, all) = &mut files[0];
        write_line(all, &event).map_err(|e| io(path, e))?;
        let (index, result) = match &event {
            Event::Person(p) => (0, write_line(&mut files[1].1, p)),
            Event::Auction(a) => (1, write_line(&mut files[2].1, a)),
            Event::Bid(b) => (2, write_line(&mut files[3].1, b)),
        };
        result.map_err(|e| io(&files[index + 1].0, e))?;
        counts[index] += 1;
    }
    for (path, mut file) in files {
        file.flush().map_err(|e| io(&path, e))?;
    }
    Ok(counts)
}

fn write_line<T: Serialize>(out: &mut impl Write, value: &T) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, value).map_err(std::io::Error::other)?;
    out.write_all(b"\n")
}

fn state_backend(arg: StateBackendArg) -> riffle::Result<Arc<dyn riffle::state::StateBackend>> {
    match arg {
        StateBackendArg::Heap => Ok(Arc::new(riffle::state::HeapBackend)),
        #[cfg(feature = "rocksdb")]
        StateBackendArg::Rocksdb => Ok(Arc::new(riffle_rocksdb::RocksDbBackend::new())),
        #[cfg(not(feature = "rocksdb"))]
        StateBackendArg::Rocksdb => Err(Error::config(
            "--state-backend",
            "this riffle was built without RocksDB: build it with `cargo build --release -p riffle-cli --features rocksdb`",
        )),
    }
}

/// Runs one query in this process and measures it.
pub fn run_query(query: Query, args: &RunArgs) -> riffle::Result<Measurement> {
    let defaults = EnvConfig::default();
    let parallelism = args.parallelism.unwrap_or(defaults.parallelism);
    let state_dir = std::env::temp_dir().join(format!("riffle-nexmark-{}", std::process::id()));
    let output = args.output.as_ref().map(|dir| dir.join(query.name()));
    let env = StreamEnv::with_config(EnvConfig {
        job_name: format!("nexmark-{query}"),
        parallelism,
        state_backend: state_backend(args.state_backend)?,
        local_state_dir: state_dir.clone(),
        dead_letter_dir: output
            .clone()
            .unwrap_or_else(|| state_dir.clone())
            .join("dead-letter"),
        free_state_at_end: !crate::process_ends_with_its_job(),
        ..defaults
    });
    if args.sql {
        return run_sql_query(query, args, env, parallelism, &state_dir);
    }
    let (events, source_name) = match &args.input {
        Some(dir) => {
            let path = dir.join("events");
            let source = FileSource::<Event>::json(&path)
                .setting_name("--input")
                .bad_records(BadRecordPolicy::Fail);
            let name = format!("Source: file {}", path.display());
            let strategy = WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(4))
                .with_timestamps(Event::date_time)
                .with_max_future_skew(None)
                .with_max_watermark_jump(None);
            (env.from_source_with_watermarks(source, strategy), name)
        }
        None => {
            let source = NexmarkSource::new(args.generator.config(args.rate)?);
            (source.stream(&env), "Source: nexmark".to_string())
        }
    };
    let sink = match &output {
        Some(dir) => {
            if dir.exists() {
                std::fs::remove_dir_all(dir)
                    .map_err(|e| Error::io(format!("cannot clear `{}`", dir.display()), e))?;
            }
            ResultSink::Files(dir.clone())
        }
        // q10's query is to write files: without --output they go to the run's scratch
        // directory, removed after the run.
        None if query == Query::Q10 => ResultSink::Files(state_dir.join("q10-output")),
        None => ResultSink::Discard,
    };
    add_query(query, &events, &sink)?;
    let cpu_before = crate::process::cpu_seconds("self");
    let started = Instant::now();
    let result = env.execute();
    let seconds = started.elapsed().as_secs_f64();
    let cpu = crate::process::cpu_seconds("self") - cpu_before;
    let _ = std::fs::remove_dir_all(&state_dir);
    let result = result?;
    Ok(Measurement {
        query: query.name().to_string(),
        parallelism,
        events: result.records_out(&source_name),
        results: result.records_in("results"),
        seconds,
        cpu_seconds: cpu,
        peak_rss: crate::process::peak_rss(),
    })
}

/// Runs the SQL text of `query` on `env` (a fresh environment of `run_query`) and measures it
/// as `run_query` measures the DataStream program: events read by the source, rows reaching
/// the sink table (changes, for the updating queries), CPU of the whole process.
fn run_sql_query(
    query: Query,
    args: &RunArgs,
    env: StreamEnv,
    parallelism: usize,
    state_dir: &Path,
) -> riffle::Result<Measurement> {
    let refuse = |setting: &str, why: &str| Err(Error::config(setting, why.to_string()));
    if args.input.is_some() {
        return refuse(
            "--input",
            "--sql reads the generator (the datagen table), not files",
        );
    }
    if args.output.is_some() {
        return refuse(
            "--output",
            "--sql writes its sink table, 'blackhole' as in the nexmark project",
        );
    }
    let Some(text) = riffle_nexmark::sql::query(query) else {
        return Err(Error::config(
            "--query",
            format!("Riffle's SQL does not run {query} yet"),
        ));
    };
    let sql = riffle_sql::SqlEnv::new(&env);
    crate::sql::register_functions(&sql);
    for (name, value) in riffle_nexmark::sql::variables(&args.generator.config(args.rate)?) {
        sql.define(name, &value);
    }
    // q10 writes its files into the run's scratch directory, removed after (as the DataStream
    // program does without --output).
    sql.define(
        "NEXMARK_DIR",
        &state_dir.join("q10-output").display().to_string(),
    );
    sql.define("SUBMIT_TIME", "run");
    // q13's side table, where the nexmark project keeps it: `${FLINK_HOME}/data/`.
    let flink_home = state_dir.join("q13-home");
    if query == Query::Q13 {
        let data = flink_home.join("data");
        std::fs::create_dir_all(&data)
            .and_then(|()| {
                std::fs::write(
                    data.join("side_input.txt"),
                    riffle_nexmark::sql::q13_side_input(),
                )
            })
            .map_err(|e| {
                Error::io(
                    format!("cannot write q13's side table under `{}`", data.display()),
                    e,
                )
            })?;
    }
    sql.define("FLINK_HOME", &flink_home.display().to_string());
    let failed = |e: riffle_sql::SqlError| Error::config("--sql", e.to_string());
    for script in [
        riffle_nexmark::sql::DDL_GEN,
        riffle_nexmark::sql::DDL_VIEWS,
        text,
    ] {
        sql.execute_sql(script).map_err(failed)?;
    }
    let cpu_before = crate::process::cpu_seconds("self");
    let started = Instant::now();
    let result = env.execute();
    let seconds = started.elapsed().as_secs_f64();
    let cpu = crate::process::cpu_seconds("self") - cpu_before;
    let _ = std::fs::remove_dir_all(state_dir);
    let result = result?;
    Ok(Measurement {
        query: format!("{} (SQL)", query.name()),
        parallelism,
        events: result.records_out("Source: datagen"),
        // The rows of the INSERT's sink, whatever the script names its table (q12: `discard_sink`).
        results: sink_names(&result)
            .iter()
            .map(|name| result.records_in(name))
            .sum(),
        seconds,
        cpu_seconds: cpu,
        peak_rss: crate::process::peak_rss(),
    })
}

/// The names of a finished job's sinks (`Sink: <table>`), each once.
fn sink_names(result: &riffle::JobResult) -> std::collections::BTreeSet<&str> {
    result
        .metrics
        .operators
        .iter()
        .map(|o| o.name.as_str())
        .filter(|name| name.starts_with("Sink: "))
        .collect()
}

/// Runs every query, each in a child process (so CPU time and peak memory are its own).
fn run_all(args: &RunArgs) -> riffle::Result<()> {
    let exe = std::env::current_exe()
        .map_err(|e| Error::io("cannot find the riffle executable".to_string(), e))?;
    let mut rows = Vec::new();
    // With --sql: each query that has SQL text, as its DataStream program and as SQL, in turns.
    let runs: Vec<(Query, bool)> = Query::ALL
        .iter()
        .flat_map(|&query| match args.sql {
            false => vec![(query, false)],
            true if riffle_nexmark::sql::query(query).is_some() => {
                vec![(query, false), (query, true)]
            }
            true => vec![],
        })
        .collect();
    for (query, sql) in runs {
        let mut command = std::process::Command::new(&exe);
        command.args(["nexmark", "run", "--json", "--query", query.name()]);
        if sql {
            command.arg("--sql");
        }
        command.args(["--events", &args.generator.events.to_string()]);
        command.args([
            "--events-per-second",
            &args.generator.events_per_second.to_string(),
        ]);
        command.args([
            "--out-of-order-group-size",
            &args.generator.out_of_order_group_size.to_string(),
        ]);
        command.args(["--base-time", &args.generator.base_time.to_string()]);
        if let Some(p) = args.parallelism {
            command.args(["-p", &p.to_string()]);
        }
        if args.state_backend == StateBackendArg::Rocksdb {
            command.args(["--state-backend", "rocksdb"]);
        }
        for (flag, value) in [("--input", &args.input), ("--output", &args.output)] {
            if let Some(path) = value {
                command.arg(flag).arg(path);
            }
        }
        if let Some(rate) = args.rate {
            command.args(["--rate", &rate.to_string()]);
        }
        let out = command
            .stderr(std::process::Stdio::inherit())
            .output()
            .map_err(|e| Error::io(format!("cannot run {query}"), e))?;
        if !out.status.success() {
            return Err(Error::user(format!("{query} failed ({})", out.status)));
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let m: Measurement = stdout
            .lines()
            .find_map(|l| serde_json::from_str(l).ok())
            .ok_or_else(|| Error::user(format!("{query} printed no measurement: {stdout}")))?;
        eprintln!(
            "{}: {:.0} events per CPU-second",
            m.query,
            m.events_per_cpu_second()
        );
        rows.push(m);
    }
    print_table(&rows);
    if args.sql {
        println!();
        println!("| query | SQL CPU per event / DataStream's |");
        println!("|---|---|");
        for pair in rows.chunks(2) {
            if let [datastream, sql] = pair {
                println!(
                    "| {} | {:.2} |",
                    datastream.query,
                    datastream.events_per_cpu_second() / sql.events_per_cpu_second()
                );
            }
        }
    }
    Ok(())
}

fn human(n: f64) -> String {
    if n >= 1e6 {
        format!("{:.2}M", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.1}K", n / 1e3)
    } else {
        format!("{n:.0}")
    }
}

/// Prints measurements as a table.
pub fn print_table(rows: &[Measurement]) {
    println!(
        "| query | p | events | results | wall s | events/s | CPU s | events per CPU-s | peak RSS |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for m in rows {
        println!(
            "| {} | {} | {} | {} | {:.2} | {} | {:.2} | {} | {} MB |",
            m.query,
            m.parallelism,
            m.events,
            m.results,
            m.seconds,
            human(m.events_per_second()),
            m.cpu_seconds,
            human(m.events_per_cpu_second()),
            m.peak_rss >> 20
        );
    }
}
