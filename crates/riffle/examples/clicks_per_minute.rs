//! Clicks per user per minute, with late clicks to their own output: the README's example.
//!
//! ```sh
//! cargo run --release -p riffle --example clicks_per_minute
//! ```

use std::time::Duration;

use riffle::{
    OutputTag, StreamEnv, aggregate::Count, sink::FileSink, time::WatermarkStrategy,
    window::Tumbling,
};
use riffle_clicks::{Click, ClicksConfig};

fn main() -> riffle::Result<()> {
    let env = StreamEnv::new();
    let late = OutputTag::<Click>::new("late-clicks");
    let counts = env
        .from_source_with_watermarks(
            riffle_clicks::source(ClicksConfig::default()).count(1_000_000),
            WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(5))
                .with_timestamps(|c: &Click| c.event_time),
        )
        .filter(|click| !click.user_agent.contains("bot"))
        .key_by(|click| click.user_id)
        .window(Tumbling::of(Duration::from_secs(60)))
        .allowed_lateness(Duration::from_secs(30))
        .side_output_late(&late)
        .aggregate(Count);
    counts.sink(FileSink::new("out/agg-clicks"));
    counts
        .get_side_output(&late)
        .sink(FileSink::new("out/late-clicks"));
    let result = env.execute()?;
    println!(
        "{} clicks in, {} counts per user and minute out ({} late) in {:.1} s",
        result
            .metrics
            .operators
            .iter()
            .filter(|o| o.name.starts_with("Source:"))
            .map(|o| o.records_out)
            .sum::<u64>(),
        result.records_out("Window"),
        result
            .metrics
            .operator_total("Window")
            .map_or(0, |w| w.late_records_side_output),
        result.duration.as_secs_f64()
    );
    Ok(())
}
