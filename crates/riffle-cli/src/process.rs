//! Measurements of a process from `/proc` (Linux): the CPU time and peak memory that the
//! benchmarks and `riffle nexmark run` report. Elsewhere they read 0.

/// CPU seconds (user + system) process `pid` has used so far (`"self"` for this one), from
/// `/proc/<pid>/stat`; 0 when it cannot be read.
pub fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// Peak resident memory of this process (`VmHWM`), bytes; 0 where unknown.
pub fn peak_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_has_used_cpu_and_memory() {
        let spin: u64 = (0..20_000_000u64).fold(0, |a, b| a.wrapping_add(b * b));
        assert!(spin > 0);
        assert!(super::cpu_seconds("self") > 0.0);
        assert!(super::peak_rss() > 1 << 20);
        assert_eq!(super::cpu_seconds("no-such-process"), 0.0);
    }
}
