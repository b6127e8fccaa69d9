//! CPU time and resident memory of a process, and the machine's CPU time, from Linux `/proc`.

use std::sync::OnceLock;

/// Clock ticks per second of `/proc` CPU times (`getconf CLK_TCK`; 100 when that cannot run).
pub fn clock_ticks() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|t| *t > 0.0)
            .unwrap_or(100.0)
    })
}

/// User plus system CPU seconds used by process `pid` (`"self"` for this one).
pub fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_cpu_ticks(&stat).map(|t| t as f64 / clock_ticks())
}

/// utime + stime (fields 14 and 15) of a `/proc/PID/stat` line; the command name (field 2) may hold
/// spaces and parentheses, so fields are counted after its last `)`.
pub fn parse_stat_cpu_ticks(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    // `after` starts at field 3 (state): utime is field 14, so the 12th item from here.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Resident set size of process `pid` in bytes (`VmRSS`).
pub fn rss_bytes(pid: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_status_kib(&status, "VmRSS:").map(|k| k * 1024)
}

/// A `kB` field of `/proc/PID/status`.
pub fn parse_status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// The whole machine's CPU seconds since boot, from the `cpu` line of `/proc/stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MachineCpu {
    /// Everything but idle and iowait.
    pub busy: f64,
    /// Interrupt and softirq time (loopback TCP is mostly softirq), part of `busy` and charged to no
    /// process.
    pub irq: f64,
    pub total: f64,
}

/// See [`MachineCpu`].
pub fn machine_cpu() -> Option<MachineCpu> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is already in user)
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4).unwrap_or(&0);
    let irq = v.get(5).unwrap_or(&0) + v.get(6).unwrap_or(&0);
    let t = clock_ticks();
    Some(MachineCpu {
        busy: (total - idle) as f64 / t,
        irq: irq as f64 / t,
        total: total as f64 / t,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let line = "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 500 0 0 0 120 30 0 0 20 0 3 0 100 \
                    1000000 300 18446744073709551615";
        assert_eq!(parse_stat_cpu_ticks(line), Some(150));
    }

    #[test]
    fn status_kib_fields() {
        let s = "Name:\therald\nVmPeak:\t  200 kB\nVmRSS:\t   12345 kB\n";
        assert_eq!(parse_status_kib(s, "VmRSS:"), Some(12345));
        assert_eq!(parse_status_kib(s, "VmSwap:"), None);
    }

    #[test]
    fn this_process_is_readable() {
        assert!(cpu_seconds("self").is_some());
        assert!(rss_bytes("self").expect("VmRSS") > 0);
        let m = machine_cpu().expect("/proc/stat");
        assert!(m.irq <= m.busy && m.busy <= m.total);
    }
}
