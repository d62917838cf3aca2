//! Where the threads that are not lcores run: the control thread (reloads, stats lines) and the
//! metrics thread (scrapes).
//!
//! The EAL pins the main thread to the main lcore's CPU, and a thread inherits its creator's
//! affinity, so without a choice of their own these threads would share the main lcore's CPU
//! whatever runs there — an RX lcore when the lowest lcore receives (`rx = [0]`), where every
//! scrape would take cycles from the packet loop. They get, in this order of preference:
//! 1. the CPUs the process may use that run no lcore at all (what `rte_ctrl_thread_create` picks);
//! 2. else the CPUs of worker lcores that are not RX lcores: a scrape delays socket draining, which
//!    the sockets' depth absorbs, instead of reception, which nothing absorbs;
//! 3. else every allowed CPU (every CPU receives: nothing better exists).
//!
//! The lcores run where `[lcores] cpus` puts them (lcore N on CPU N by default); the choice
//! above is made over their CPUs, not their numbers.

/// The threads of this process that the EAL started for itself and that are not lcores (its
/// interrupt thread, the multi-process channel, telemetry), by kernel thread id and name:
/// every thread but the main one (an lcore), the EAL's lcore threads (`rte-worker-N` in DPDK
/// 22.11, `lcore-worker-N` in older releases) and
/// ours (`fastpath-*`, pinned as they start). Read from `/proc/self/task`.
pub fn eal_service_threads() -> Vec<(i32, String)> {
    let me = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for t in dir.flatten() {
        let Some(tid) = t.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let comm = comm.trim();
        let lcore = comm.starts_with("rte-worker-") || comm.starts_with("lcore-worker-");
        if tid != me && !lcore && !comm.starts_with("fastpath-") {
            out.push((tid, comm.to_string()));
        }
    }
    out.sort();
    out
}

/// The CPUs this process may run on, from `/proc/self/status`; read it before the EAL starts
/// (the EAL then narrows the main thread to one CPU). `None` if it cannot be read.
pub fn allowed_cpus() -> Option<Vec<u32>> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    parse_cpu_list(list.trim())
}

/// Parses a kernel CPU list such as `0-3,8,10-11`.
pub fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                if a > b || b - a > 4096 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    out.sort_unstable();
    out.dedup();
    (!out.is_empty()).then_some(out)
}

/// The CPUs for the control and metrics threads (see the module documentation), with the reason
/// for the log line.
pub fn housekeeping_cpus(allowed: &[u32], rx: &[u32], workers: &[u32]) -> (Vec<u32>, &'static str) {
    let free: Vec<u32> = allowed
        .iter()
        .copied()
        .filter(|c| !rx.contains(c) && !workers.contains(c))
        .collect();
    if !free.is_empty() {
        return (free, "no lcore runs there");
    }
    let not_rx: Vec<u32> = allowed.iter().copied().filter(|c| !rx.contains(c)).collect();
    if !not_rx.is_empty() {
        return (not_rx, "shared with worker lcores, never with an RX lcore");
    }
    (allowed.to_vec(), "every CPU runs an RX lcore")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,8,10-11"), Some(vec![0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(parse_cpu_list("1"), Some(vec![1]));
        assert_eq!(parse_cpu_list("3,1-2,2"), Some(vec![1, 2, 3]));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("2-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert!(allowed_cpus().is_some_and(|c| !c.is_empty()));
    }

    #[test]
    fn preference_order() {
        // A CPU with no lcore wins.
        assert_eq!(housekeeping_cpus(&[0, 1, 2, 3], &[1], &[2]).0, vec![0, 3]);
        // Two CPUs, RX on the lowest (the EAL main lcore): the worker's CPU, not the main lcore's.
        assert_eq!(housekeeping_cpus(&[0, 1], &[0], &[1]).0, vec![1]);
        // The benchmark's layout: RX on 1, worker on 0.
        assert_eq!(housekeeping_cpus(&[0, 1], &[1], &[0]).0, vec![0]);
        // Every CPU receives: all of them.
        assert_eq!(housekeeping_cpus(&[0, 1], &[0, 1], &[0]).0, vec![0, 1]);
    }
}
