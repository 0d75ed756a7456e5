//! Running a job from the terminal: live progress every second, Ctrl-C to stop cleanly (a second
//! Ctrl-C cancels), an optional time limit, and the final result.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use riffle::metrics::{MetricsSnapshot, OperatorRates, process_rss_bytes};
use riffle::{JobResult, StreamEnv};

static INTERRUPTS: AtomicUsize = AtomicUsize::new(0);

/// Counts Ctrl-C presses instead of letting the first one kill the process.
pub fn install_ctrlc_handler() {
    let _ = ctrlc::set_handler(|| {
        INTERRUPTS.fetch_add(1, Ordering::SeqCst);
    });
}

/// Forgets the Ctrl-C presses so far: the SQL client's next job starts with none (a Ctrl-C
/// stopped the previous one).
pub fn reset_interrupts() {
    INTERRUPTS.store(0, Ordering::SeqCst);
}

/// What the renderer of a progress report gets.
pub struct Report<'a> {
    /// Time since the job started.
    pub elapsed: Duration,
    /// Current value of every metric.
    pub snapshot: &'a MetricsSnapshot,
    /// Rates over the last reporting interval, operators in topological order.
    pub rates: &'a [OperatorRates],
    /// Resident memory of the process.
    pub rss_bytes: u64,
    /// Whether the job is draining after a stop.
    pub stopping: bool,
}

/// How a job is run from the terminal.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Stop the job (drain and finish) after this long.
    pub duration: Option<Duration>,
    /// How often to report progress.
    pub every: Duration,
    /// Serve the job's UI, REST API and metrics while it runs.
    pub web: Option<riffle_web::WebConfig>,
}

/// Starts the job, shows `render`'s report every interval until the job ends, and returns the
/// job's result together with the highest resident memory seen.
pub fn run_with_progress(
    env: &StreamEnv,
    options: &RunOptions,
    mut render: impl FnMut(&Report<'_>) -> String,
) -> riffle::Result<(JobResult, u64)> {
    let job = env.execute_async()?;
    let monitor = job.monitor();
    let _web = match &options.web {
        Some(config) => {
            let web = riffle_web::WebServer::start(monitor.clone(), config.clone())
                .map_err(crate::demos::web_flag)?;
            let id = monitor.overview().id;
            eprintln!(
                "job {id}: web UI and REST API at {} (riffle jobs · riffle savepoint {id} · riffle stop {id} --savepoint)",
                web.url()
            );
            Some(web)
        }
        None => None,
    };
    let terminal = std::io::stderr().is_terminal();
    let bar = terminal.then(|| {
        let bar = ProgressBar::new_spinner();
        bar.set_style(ProgressStyle::with_template("{spinner} {msg}").expect("valid template"));
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    });
    let started = Instant::now();
    let mut previous = monitor.metrics();
    let mut next_report = started + options.every;
    let mut max_rss = process_rss_bytes().unwrap_or(0);
    let mut stopping = false;
    let mut cancelled = false;
    // The end of the job is noticed within 5 ms (a short job's wall time is not rounded up by
    // half a polling period); signals, memory and reports are looked at every 50 ms.
    let mut next_look = Instant::now();
    while !job.is_finished() {
        std::thread::sleep(Duration::from_millis(5));
        if Instant::now() < next_look {
            continue;
        }
        next_look = Instant::now() + Duration::from_millis(50);
        let interrupts = INTERRUPTS.load(Ordering::SeqCst);
        let time_up = options.duration.is_some_and(|d| started.elapsed() >= d);
        if !stopping && (interrupts >= 1 || time_up) {
            stopping = true;
            monitor.stop();
            let message = "stopping: draining the records in flight (Ctrl-C again to cancel)";
            match &bar {
                Some(bar) => bar.println(message),
                None => eprintln!("{message}"),
            }
        }
        if !cancelled && interrupts >= 2 {
            cancelled = true;
            monitor.cancel();
        }
        let rss = process_rss_bytes().unwrap_or(0);
        max_rss = max_rss.max(rss);
        if Instant::now() >= next_report {
            next_report += options.every;
            let snapshot = monitor.metrics();
            let rates = snapshot.rates_since(&previous);
            let text = render(&Report {
                elapsed: started.elapsed(),
                snapshot: &snapshot,
                rates: &rates,
                rss_bytes: rss,
                stopping,
            });
            match &bar {
                Some(bar) => bar.set_message(text),
                None => eprintln!("{text}"),
            }
            previous = snapshot;
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let result = job.wait()?;
    Ok((result, max_rss))
}

/// A count with a K/M suffix.
pub fn human(n: f64) -> String {
    match n.abs() {
        x if x >= 1e9 => format!("{:.2}G", n / 1e9),
        x if x >= 1e6 => format!("{:.2}M", n / 1e6),
        x if x >= 1e4 => format!("{:.1}K", n / 1e3),
        _ => format!("{n:.0}"),
    }
}

/// Megabytes, rounded.
pub fn megabytes(bytes: u64) -> String {
    format!("{} MB", bytes / (1024 * 1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn humans_read_suffixes() {
        assert_eq!(human(950.0), "950");
        assert_eq!(human(12_345.0), "12.3K");
        assert_eq!(human(2_500_000.0), "2.50M");
        assert_eq!(megabytes(3 * 1024 * 1024 + 5), "3 MB");
    }
}
