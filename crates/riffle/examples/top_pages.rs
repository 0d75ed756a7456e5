//! Top-N per window: the three most visited pages of every minute (a count per page and window,
//! then one ranking per window over all pages).
//!
//! ```sh
//! cargo run -p riffle --example top_pages
//! ```

use std::time::Duration;

use riffle::aggregate::Count;
use riffle::sink::CollectSink;
use riffle::time::WatermarkStrategy;
use riffle::window::Tumbling;
use riffle::{EnvConfig, StreamEnv};

/// A visit: page, event time (epoch ms).
type Visit = (String, i64);

/// One line per minute: `minute <m>: <page> (<count>), ...`, most visited first (ties by page).
fn top_pages(visits: Vec<Visit>, n: usize) -> riffle::Result<Vec<String>> {
    let env = StreamEnv::with_config(EnvConfig::deterministic());
    let (sink, output) = CollectSink::new();
    let minute = Tumbling::of(Duration::from_secs(60));
    env.from_iter_with_watermarks(
        visits,
        WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(5))
            .with_timestamps(|v: &Visit| v.1),
    )
    .key_by(|visit| visit.0.clone())
    .window(minute)
    .aggregate(Count)
    // Each count carries its window's last millisecond as event time: it falls in the same
    // minute of the ranking window.
    .window_all(minute)
    .process(move |_, window, counts, out| {
        let mut ranked: Vec<(u64, &str)> =
            counts.iter().map(|c| (c.value, c.key.as_str())).collect();
        ranked.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        let top: Vec<String> = ranked
            .iter()
            .take(n)
            .map(|(count, page)| format!("{page} ({count})"))
            .collect();
        out.emit(format!(
            "minute {}: {}",
            window.start / 60_000,
            top.join(", ")
        ))
    })
    .sink(sink);
    env.execute()?;
    Ok(output.sorted())
}

fn input() -> Vec<Visit> {
    let mut visits = Vec::new();
    let mut visit = |page: &str, times: usize, minute: i64| {
        for i in 0..times {
            visits.push((page.to_string(), minute * 60_000 + i as i64 * 1_000));
        }
    };
    visit("/home", 5, 0);
    visit("/search", 3, 0);
    visit("/item/1", 4, 0);
    visit("/item/2", 1, 0);
    visit("/cart", 2, 1);
    visit("/home", 2, 1);
    visit("/item/2", 6, 1);
    visit("/checkout", 1, 1);
    visits.sort_by_key(|v| v.1);
    visits
}

fn main() -> riffle::Result<()> {
    for line in top_pages(input(), 3)? {
        println!("{line}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_three_most_visited_pages_of_each_minute() {
        assert_eq!(
            super::top_pages(super::input(), 3).unwrap(),
            vec![
                "minute 0: /home (5), /item/1 (4), /search (3)",
                "minute 1: /item/2 (6), /cart (2), /home (2)",
            ]
        );
    }
}
