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
    /// Courier events (order_id, courier_id, kind, event_time) as JSON lines, the input of
    /// `riffle demo cep --input`, in arrival order.
    CourierEvents(CourierEventsArgs),
}

/// Options of `riffle generate courier-events`.
#[derive(Args, Clone, Debug)]
pub struct CourierEventsArgs {
    /// Orders (an order is placed every 2 s of event time; about 2 + trip minutes × 60 /
    /// ping-secs events each).
    #[arg(long, value_name = "N")]
    pub orders: u64,
    /// Couriers.
    #[arg(long, default_value_t = 500)]
    pub couriers: u64,
    /// Seconds between two pings of a courier carrying an order.
    #[arg(long, default_value_t = 60)]
    pub ping_secs: u64,
    /// Minutes from the order within which its delivery is promised (one delivery in twelve
    /// is late).
    #[arg(long, default_value_t = 60)]
    pub promised_minutes: u64,
    /// Share of events that arrive 10 minutes late (behind the watermark).
    #[arg(long, default_value_t = 0.0)]
    pub late_share: f64,
    /// Seed: the same seed (and options) gives the same events.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// The JSON-lines file to write (replaced if it exists).
    #[arg(long, value_name = "FILE")]
    pub output: PathBuf,
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
        GenerateCommand::CourierEvents(args) => {
            let events = crate::demos::cep::generate(&crate::demos::cep::CourierConfig {
                orders: args.orders,
                couriers: args.couriers,
                seed: args.seed,
                promised_minutes: args.promised_minutes,
                ping_secs: args.ping_secs,
                late_share: args.late_share,
            });
            let written = write_lines(&args.output, events.iter().map(|(e, _)| e))?;
            println!(
                "riffle generate: {written} courier events ({} orders, seed {}) -> {}",
                args.orders,
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
    write_lines(&args.output, (0..args.count).map(|i| generator.generate(i)))
}

/// Writes `values` as JSON lines to `path` (its directory created); returns how many.
fn write_lines<T: serde::Serialize>(
    path: &std::path::Path,
    values: impl Iterator<Item = T>,
) -> riffle::Result<u64> {
    let io = |e| Error::io(format!("cannot write `{}`", path.display()), e);
    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    let file = std::fs::File::create(path)
        .map_err(|e| Error::config("--output", format!("`{}`: {e}", path.display())))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let mut written = 0;
    for value in values {
        serde_json::to_writer(&mut out, &value).map_err(|e| io(std::io::Error::other(e)))?;
        out.write_all(b"\n").map_err(io)?;
        written += 1;
    }
    out.flush().map_err(io)?;
    Ok(written)
}
