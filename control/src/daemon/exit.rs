//! The stop, in the order the daemon's module doc gives: ports closed, final metrics and the
//! exit summary written, DPDK objects freed before the EAL, runtime files removed.

use super::startup::Pools;
use super::FinalPortStats;
use crate::cli::Options;
use crate::metrics::{self, Sources};
use control::kernel_interface::KernelInterface;
use fastpath::dpdk::{self, Eal, Mempool, Port};
use fastpath::generation::Published;
use fastpath::outcome::Outcome;
use fastpath::runtime::RunControl;
use prometheus::Registry;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What start-up made that shutdown releases, in its order.
pub(super) struct Dataplane {
    pub(super) eal: Eal,
    pub(super) pools: Pools,
    pub(super) big: Arc<Mempool>,
    pub(super) ports: Vec<Port>,
    pub(super) kernel_ports: Vec<KernelInterface>,
    pub(super) published: Arc<Published>,
    pub(super) run_control: Arc<RunControl>,
    pub(super) sources: Arc<Sources>,
    pub(super) registry: Registry,
    pub(super) final_port_stats: FinalPortStats,
}

/// Once every lcore returned: closes the ports, writes the final metrics and the summary, then
/// frees every DPDK object before the EAL.
pub(super) fn shutdown(d: Dataplane, opts: &Options, started: Instant, failed_lcores: Vec<u32>) -> Result<(), String> {
    let Dataplane {
        eal,
        pools,
        big,
        mut ports,
        mut kernel_ports,
        published,
        run_control,
        sources,
        registry,
        final_port_stats,
    } = d;
    // The final port counters while every port is open (a closed kernel interface's id is
    // invalid: DPDK said so at every stop), then the kernel interfaces (closing one removes the
    // interface), then the ports.
    snapshot_port_stats(&sources, &final_port_stats);
    let mut close_errors: Vec<String> = kernel_ports.iter_mut().filter_map(|k| k.close().err()).collect();
    close_errors.extend(close_ports(&mut ports));
    let text = metrics::render(&registry);
    if let Some(path) = &opts.metrics_dump {
        if let Err(e) = std::fs::write(path, &text) {
            tracing::error!("fastpathd: cannot write the metrics dump {}: {e}", path.display());
        }
    }
    summary(&sources, started.elapsed());
    let held: u32 = ports.iter().map(Port::held_at_close).sum();
    drop(ports);
    drop(kernel_ports);
    let leaked = pools.in_use() + big.in_use();
    if leaked > held {
        tracing::error!("fastpathd: {leaked} mbufs were not returned to the pool at exit");
    } else if leaked != 0 {
        tracing::info!(
            "fastpathd: {leaked} mbufs stay with the kernel's AF_XDP rings at exit (net_af_xdp lends \
             up to {held} and does not take them back at close)"
        );
    }
    // Everything that holds DPDK objects goes before the EAL: the tables' socket rings (which
    // return any packet still queued to the pool), then the pool.
    drop(registry);
    drop(sources);
    drop(run_control);
    let last = Arc::strong_count(&published);
    drop(published);
    if last != 1 {
        tracing::error!(
            "fastpathd: BUG: {} references to the config tables outlive the lcores",
            last - 1
        );
    }
    drop(big);
    let Pools { by_socket, main } = pools;
    drop(main);
    for (_, pool) in by_socket {
        if let Ok(pool) = Arc::try_unwrap(pool) {
            drop(pool);
        }
    }
    let runtime = eal.runtime_dir();
    eal.cleanup();
    if let Some(dir) = runtime {
        remove_runtime_files(&dir);
    }
    if !failed_lcores.is_empty() {
        return Err(format!("lcores {failed_lcores:?} stopped abnormally"));
    }
    if !close_errors.is_empty() {
        return Err(close_errors.join("; "));
    }
    Ok(())
}

/// What DPDK 22.11 leaves behind a primary process that stopped cleanly: its runtime directory
/// and, on hugepages, the files backing its memory (`<prefix>map_*` on every hugetlbfs mount).
/// A stop is the last of them (no secondary attaches to a primary that is gone), so both go.
pub(super) fn remove_runtime_files(dir: &std::path::Path) {
    let Some(prefix) = dir.file_name().and_then(|n| n.to_str()).map(String::from) else {
        return;
    };
    if let Err(e) = std::fs::remove_dir_all(dir) {
        tracing::debug!("fastpathd: runtime directory {} not removed: {e}", dir.display());
    }
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    for mount in mounts.lines().filter_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(2) == Some(&"hugetlbfs"))
            .then(|| f.get(1).map(|m| m.to_string()))
            .flatten()
    }) {
        let Ok(entries) = std::fs::read_dir(&mount) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            if name.to_str().is_some_and(|n| n.starts_with(&format!("{prefix}map_"))) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Every port's counters as they stand, kept for the final metrics.
pub(super) fn snapshot_port_stats(sources: &Sources, final_port_stats: &FinalPortStats) {
    *final_port_stats.lock().unwrap_or_else(|e| e.into_inner()) = Some(
        // Ids that name a DPDK port only: between the ports and a TAP kernel interface's id
        // (past every port's) are ids of nothing, and DPDK logs each refusal.
        (0..sources.port_names.len() as u16)
            .map(|id| {
                let named = !sources.port_names[id as usize].is_empty() && id < dpdk::tap::TAP_ID_BASE;
                named.then(|| dpdk::port::stats_of(id).ok()).flatten()
            })
            .collect(),
    );
}

/// Stops and closes every port (drivers flush their output there). Returns what failed.
pub(super) fn close_ports(ports: &mut [Port]) -> Vec<String> {
    let mut close_errors = Vec::new();
    for p in ports.iter_mut() {
        if let Err(e) = p.close() {
            close_errors.push(e.to_string());
        }
    }
    close_errors
}

/// Packets every RX lcore received so far.
pub(super) fn total_rx(src: &Sources) -> u64 {
    src.lcores.iter().map(|l| l.rx_packets()).sum()
}

/// Every outcome's total over the lcores.
pub(super) fn outcome_totals(src: &Sources) -> Vec<(Outcome, u64)> {
    Outcome::ALL
        .iter()
        .map(|&o| (o, fastpath::stats::total_outcome(&src.lcores, o)))
        .collect()
}

pub(super) fn summary(src: &Sources, up: Duration) {
    let rx = total_rx(src);
    let totals = outcome_totals(src);
    let counted: u64 = totals.iter().map(|(_, n)| n).sum();
    let mut s = format!(
        "fastpathd: stopped after {:.1}s: {rx} packets received;",
        up.as_secs_f64()
    );
    for (o, n) in totals.iter().filter(|(_, n)| *n > 0) {
        s.push_str(&format!(" {}={n}", o.name()));
    }
    tracing::info!("{s}");
    if counted != rx {
        tracing::error!("fastpathd: BUG: {rx} packets received but {counted} outcomes counted");
    }
}
