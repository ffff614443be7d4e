//! `process_*`: the Go Prometheus client's process collector (client_golang
//! `process_collector_procfsenabled.go`), which the peer's principal and agent expose from the
//! default registry: same names and help, read from `/proc/self` when scraped. Values as Go's
//! procfs computes them: CPU and start time in clock ticks of 1/100 s (`USER_HZ`), memory in
//! bytes, limits' `unlimited` as 2^64-1, network bytes summed over the interfaces of the
//! process's network namespace. Where `/proc` cannot be read (not Linux), the metrics are
//! left out, as the Go collector leaves them out.
//!
//! Hand-written over a crate (`procfs`, `prometheus`'s process feature): the collector needs five
//! small files of `/proc` and the workspace's exporter is prometheus-client, for which no kept
//! crate provides one.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// `USER_HZ`, as Go's procfs assumes it.
const TICKS: f64 = 100.0;

/// One reading of the process's figures.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Sample {
    pub cpu_seconds: Option<f64>,
    pub start_time_seconds: Option<f64>,
    pub virtual_memory_bytes: Option<f64>,
    pub resident_memory_bytes: Option<f64>,
    pub open_fds: Option<f64>,
    pub max_fds: Option<f64>,
    pub virtual_memory_max_bytes: Option<f64>,
    pub network_receive_bytes: Option<f64>,
    pub network_transmit_bytes: Option<f64>,
}

/// `utime + stime`, `starttime` (ticks), `vsize` (bytes) of `/proc/<pid>/stat`.
pub fn parse_stat(stat: &str) -> Option<(f64, f64, f64)> {
    // the command name is in parentheses and may hold spaces or parentheses itself
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // fields from the 3rd (state): utime 14th, stime 15th, starttime 22nd, vsize 23rd
    let n = |i: usize| f.get(i - 3)?.parse::<f64>().ok();
    Some((n(14)? + n(15)?, n(22)?, n(23)?))
}

/// `btime` of `/proc/stat`.
pub fn parse_btime(stat: &str) -> Option<f64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// `VmRSS` of `/proc/<pid>/status`, in bytes.
pub fn parse_rss(status: &str) -> Option<f64> {
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse::<f64>()
        .ok()?;
    Some(kb * 1024.0)
}

/// The soft limit of `name` (`Max open files`, `Max address space`) in `/proc/<pid>/limits`.
pub fn parse_limit(limits: &str, name: &str) -> Option<f64> {
    let v = limits
        .lines()
        .find_map(|l| l.strip_prefix(name))?
        .split_whitespace()
        .next()?;
    match v {
        "unlimited" => Some(u64::MAX as f64),
        v => v.parse().ok(),
    }
}

/// Received and transmitted bytes of all interfaces in `/proc/<pid>/net/dev`.
pub fn parse_net_dev(dev: &str) -> Option<(f64, f64)> {
    let mut rx = 0.0;
    let mut tx = 0.0;
    let mut any = false;
    for l in dev.lines().skip(2) {
        let Some((_, nums)) = l.split_once(':') else {
            continue;
        };
        let f: Vec<f64> = nums
            .split_whitespace()
            .filter_map(|s| s.parse().ok())
            .collect();
        if f.len() >= 9 {
            rx += f[0];
            tx += f[8];
            any = true;
        }
    }
    any.then_some((rx, tx))
}

/// Reads `/proc/self` now.
pub fn sample() -> Sample {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let mut s = Sample::default();
    if let Some((cpu, start, vsize)) = read("/proc/self/stat").as_deref().and_then(parse_stat) {
        s.cpu_seconds = Some(cpu / TICKS);
        s.virtual_memory_bytes = Some(vsize);
        s.start_time_seconds = read("/proc/stat")
            .as_deref()
            .and_then(parse_btime)
            .map(|b| b + start / TICKS);
    }
    s.resident_memory_bytes = read("/proc/self/status").as_deref().and_then(parse_rss);
    s.open_fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.count() as f64);
    if let Some(l) = read("/proc/self/limits") {
        s.max_fds = parse_limit(&l, "Max open files");
        s.virtual_memory_max_bytes = parse_limit(&l, "Max address space");
    }
    if let Some((rx, tx)) = read("/proc/self/net/dev")
        .as_deref()
        .and_then(parse_net_dev)
    {
        s.network_receive_bytes = Some(rx);
        s.network_transmit_bytes = Some(tx);
    }
    s
}

/// The collector: register with `Registry::register_collector(Box::new(ProcessCollector))`.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), fmt::Error> {
        let s = sample();
        let counter = |enc: &mut DescriptorEncoder, name, help, v: Option<f64>| match v {
            Some(v) => ConstCounter::new(v).encode(enc.encode_descriptor(
                name,
                help,
                None,
                MetricType::Counter,
            )?),
            None => Ok(()),
        };
        let gauge = |enc: &mut DescriptorEncoder, name, help, v: Option<f64>| match v {
            Some(v) => ConstGauge::new(v).encode(enc.encode_descriptor(
                name,
                help,
                None,
                MetricType::Gauge,
            )?),
            None => Ok(()),
        };
        // counters are named without `_total` (prometheus-client appends it to the sample)
        counter(
            &mut enc,
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds.",
            s.cpu_seconds,
        )?;
        gauge(
            &mut enc,
            "process_open_fds",
            "Number of open file descriptors.",
            s.open_fds,
        )?;
        gauge(
            &mut enc,
            "process_max_fds",
            "Maximum number of open file descriptors.",
            s.max_fds,
        )?;
        gauge(
            &mut enc,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            s.virtual_memory_bytes,
        )?;
        gauge(
            &mut enc,
            "process_virtual_memory_max_bytes",
            "Maximum amount of virtual memory available in bytes.",
            s.virtual_memory_max_bytes,
        )?;
        gauge(
            &mut enc,
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            s.resident_memory_bytes,
        )?;
        gauge(
            &mut enc,
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            s.start_time_seconds,
        )?;
        counter(
            &mut enc,
            "process_network_receive_bytes",
            "Number of bytes received by the process over the network.",
            s.network_receive_bytes,
        )?;
        counter(
            &mut enc,
            "process_network_transmit_bytes",
            "Number of bytes sent by the process over the network.",
            s.network_transmit_bytes,
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_are_read_as_gos_procfs_reads_them() {
        let stat = "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 1000 0 0 0 150 50 0 0 20 0 8 0 123456 987654321 2500 18446744073709551615";
        assert_eq!(parse_stat(stat), Some((200.0, 123456.0, 987654321.0)));
        assert_eq!(parse_btime("cpu 1 2\nbtime 1700000000\n"), Some(1.7e9));
        assert_eq!(
            parse_rss("Name:\tx\nVmRSS:\t  2048 kB\n"),
            Some(2048.0 * 1024.0)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
            Max address space         unlimited            unlimited            bytes\n\
            Max open files            1024                 524288               files\n";
        assert_eq!(parse_limit(limits, "Max open files"), Some(1024.0));
        assert_eq!(
            parse_limit(limits, "Max address space"),
            Some(18446744073709551615.0)
        );
        let dev = "Inter-|   Receive                                                |  Transmit\n \
            face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
            lo: 100 1 0 0 0 0 0 0 100 1 0 0 0 0 0 0\n  \
            eth0: 5000 10 0 0 0 0 0 0 7000 12 0 0 0 0 0 0\n";
        assert_eq!(parse_net_dev(dev), Some((5100.0, 7100.0)));
    }

    #[test]
    fn this_process_is_sampled_and_rendered() {
        let mut reg = argocd_pull_ops::metrics::Registry::default();
        reg.register_collector(Box::new(ProcessCollector));
        let text = argocd_pull_ops::metrics::render(&reg);
        for name in [
            "process_cpu_seconds_total ",
            "process_open_fds ",
            "process_max_fds ",
            "process_virtual_memory_bytes ",
            "process_virtual_memory_max_bytes ",
            "process_resident_memory_bytes ",
            "process_start_time_seconds ",
            "process_network_receive_bytes_total ",
        ] {
            assert!(
                text.lines().any(|l| l.starts_with(name)),
                "{name}in\n{text}"
            );
        }
        let s = sample();
        assert!(s.resident_memory_bytes.unwrap() > 0.0);
        assert!(s.open_fds.unwrap() >= 3.0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = s.start_time_seconds.unwrap();
        assert!(start <= now + 1.0 && start > now - 86_400.0, "{start}");
    }
}
