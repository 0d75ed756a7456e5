//! Sessionization: a user's clicks separated by less than 30 minutes form a session; for each
//! session, its start, end, number of clicks and pages in order (Flink's session windows).
//!
//! ```sh
//! cargo run -p riffle --example sessionization
//! ```

use std::time::Duration;

use riffle::sink::CollectSink;
use riffle::time::WatermarkStrategy;
use riffle::window::Session;
use riffle::{EnvConfig, StreamEnv};

/// A click: user, page, event time (epoch ms).
type Click = (u64, String, i64);

const MINUTE: i64 = 60_000;

/// One line per session: `user <u> [start, end) <n> clicks: <pages>`.
fn sessions(clicks: Vec<Click>) -> riffle::Result<Vec<String>> {
    let env = StreamEnv::with_config(EnvConfig::deterministic());
    let (sink, output) = CollectSink::new();
    env.from_iter_with_watermarks(
        clicks,
        WatermarkStrategy::bounded_out_of_orderness(Duration::from_secs(60))
            .with_timestamps(|c: &Click| c.2),
    )
    .key_by(|click| click.0)
    .window(Session::with_gap(Duration::from_secs(30 * 60)))
    .process(|user, window, clicks, out| {
        let mut clicks = clicks.to_vec();
        clicks.sort_by_key(|c| c.2);
        let pages: Vec<&str> = clicks.iter().map(|c| c.1.as_str()).collect();
        out.emit(format!(
            "user {user} [{}, {}) {} clicks: {}",
            window.start / MINUTE,
            window.end / MINUTE,
            clicks.len(),
            pages.join(" ")
        ))
    })
    .sink(sink);
    env.execute()?;
    Ok(output.sorted())
}

fn input() -> Vec<Click> {
    let click = |user, page: &str, minute: i64| (user, page.to_string(), minute * MINUTE);
    vec![
        click(1, "/home", 0),
        click(2, "/home", 5),
        click(1, "/search", 10),
        click(1, "/item/7", 25),
        click(2, "/cart", 50), // 45 minutes after user 2's first click: a new session
        click(1, "/checkout", 20), // out of order, within the first session
        click(1, "/home", 120),
    ]
}

fn main() -> riffle::Result<()> {
    for line in sessions(input())? {
        println!("{line}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn sessions_close_after_30_minutes_of_inactivity() {
        assert_eq!(
            super::sessions(super::input()).unwrap(),
            vec![
                "user 1 [0, 55) 4 clicks: /home /search /checkout /item/7",
                "user 1 [120, 150) 1 clicks: /home",
                "user 2 [5, 35) 1 clicks: /home",
                "user 2 [50, 80) 1 clicks: /cart",
            ]
        );
    }
}
