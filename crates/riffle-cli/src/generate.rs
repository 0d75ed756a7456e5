//! `riffle generate clicks`: the seed's click stream (the built-in generator,
//! [`ClickGenerator`]) written as JSON lines, so that anyone can produce the inputs of the
//! benchmarks and demos (`riffle demo --input FILE`) without another tool.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use riffle::Error;
use riffle::source::datagen::Generator;
use riffle_clicks::{ClickGenerator, ClicksConfig};

/// What `riffle generate` writes.
#[derive(Subcommand, Debug)]
pub enum GenerateCommand {
    /// The seed's clicks (user_id, url, user_agent, ip, event_time) as JSON lines.
    Clicks(ClicksArgs),
}

/// Options of `riffle generate clicks`.
#[derive(Args, Clone, Debug)]
pub struct ClicksArgs {
    /// Clicks to write.
    #[arg(long, value_name = "N")]
    pub count: u64,
    /// Distinct users.
    #[arg(long, value_name = "U", default_value_t = 1_000_000)]
    pub users: u64,
    /// Clicks arrive up to this many milliseconds out of order.
    #[arg(long, value_name = "MS", default_value_t = 2_000)]
    pub disorder_ms: i64,
    /// Share of clicks that arrive 6 minutes late.
    #[arg(long, value_name = "SHARE", default_value_t = 0.001)]
    pub late_share: f64,
    /// Share of clicks from bots.
    #[arg(long, value_name = "SHARE", default_value_t = 0.3)]
    pub bot_share: f64,
    /// Seed: the same seed (and options) gives the same clicks.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// The JSON-lines file to write (replaced if it exists).
    #[arg(long, value_name = "FILE")]
    pub output: PathBuf,
}

impl ClicksArgs {
    /// The generator's configuration, checked; errors name the flag.
    pub fn config(&self) -> riffle::Result<ClicksConfig> {
        let config = ClicksConfig {
            seed: self.seed,
            users: self.users,
            bot_share: self.bot_share,
            late_share: self.late_share,
            max_out_of_orderness_ms: self.disorder_ms,
            ..ClicksConfig::default()
        };
        config.validate().map_err(|e| match e {
            Error::Config { setting, message } => {
                let flag = match setting.as_str() {
                    "max_out_of_orderness_ms" => "--disorder-ms".to_string(),
                    other => format!("--{}", other.replace('_', "-")),
                };
                Error::config(flag, message)
            }
            other => other,
        })?;
        Ok(config)
    }
}

/// Runs `riffle generate`.
pub fn run(command: &GenerateCommand) -> riffle::Result<()> {
    match command {
        GenerateCommand::Clicks(args) => {
            let written = write_clicks(args)?;
            println!(
                "riffle generate: {written} clicks ({} users, seed {}) -> {}",
                args.users,
                args.seed,
                args.output.display()
            );
            Ok(())
        }
    }
}

/// Writes the clicks of `args`; returns how many.
pub fn write_clicks(args: &ClicksArgs) -> riffle::Result<u64> {
    let generator = ClickGenerator::new(args.config()?);
    let io = |e| Error::io(format!("cannot write `{}`", args.output.display()), e);
    if let Some(parent) = args.output.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    let file = std::fs::File::create(&args.output)
        .map_err(|e| Error::config("--output", format!("`{}`: {e}", args.output.display())))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    for i in 0..args.count {
        serde_json::to_writer(&mut out, &generator.generate(i))
            .map_err(|e| io(std::io::Error::other(e)))?;
        out.write_all(b"\n").map_err(io)?;
    }
    out.flush().map_err(io)?;
    Ok(args.count)
}
