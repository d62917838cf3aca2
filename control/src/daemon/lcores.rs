//! Every lcore's role, built before launch (RX lcores, workers), and their launch.

use super::startup::Pools;
use crate::config::{self, Config, LcoreMode};
use control::kernel_interface::KernelInterface;
use fastpath::dpdk::{Eal, Mempool, Port, WorkerTx};
use fastpath::generation::Published;
use fastpath::runtime::{IdlePolicy, RunControl, RxLcore, TscClock, WorkerLcore};
use fastpath::stats::{LcoreStats, QueueCounters};
use std::sync::Arc;
use std::time::Duration;

/// An lcore's job, built before launch.
pub(super) enum Role {
    Rx(Box<RxLcore>),
    Worker(WorkerLcore),
}

/// Every lcore's role, by lcore id.
pub(super) type Roles = Vec<(u32, Role)>;

impl Role {
    pub(super) fn run(self, stop: &RunControl) {
        match self {
            Role::Rx(l) => l.run(stop),
            Role::Worker(w) => w.run(stop),
        }
    }
}

/// What every lcore's loop is built from.
#[derive(Clone, Copy)]
pub(super) struct LcoreKit<'a> {
    pub(super) cfg: &'a Config,
    pub(super) ports: &'a [Port],
    /// By port index: its kernel interface.
    pub(super) kernel_ports: &'a [Option<KernelInterface>],
    pub(super) published: &'a Arc<Published>,
    pub(super) pools: &'a Pools,
    pub(super) big: &'a Arc<Mempool>,
    pub(super) idle: IdlePolicy,
    pub(super) clock: TscClock,
    pub(super) eal: &'a Eal,
    pub(super) counters: fn(u16, u16) -> QueueCounters,
}

impl<'a> LcoreKit<'a> {
    pub(super) fn new(
        cfg: &'a Config,
        eal: &'a Eal,
        (ports, kernel_ports): (&'a [Port], &'a [Option<KernelInterface>]),
        published: &'a Arc<Published>,
        (pools, big): (&'a Pools, &'a Arc<Mempool>),
    ) -> Self {
        LcoreKit {
            cfg,
            ports,
            kernel_ports,
            published,
            pools,
            big,
            idle: IdlePolicy {
                // Polling stops after idle_poll_us of empty polls, idle_sleep_us at least
                // (docs/operating.md, "Idle lcores").
                poll_cycles: (cfg.lcores.idle_poll_us.max(cfg.lcores.idle_sleep_us) as u128 * eal.tsc_hz() as u128
                    / 1_000_000) as u64,
                // An eighth of the default window: longer than answering a client takes.
                crowded_cycles: (250 * eal.tsc_hz() as u128 / 1_000_000) as u64,
                sleep: Duration::from_micros(cfg.lcores.idle_sleep_us),
                wait: Duration::from_millis(cfg.lcores.idle_wait_ms),
            },
            clock: TscClock::new(eal.tsc_hz()),
            eal,
            counters: lcore_counters(cfg.lcores.mode),
        }
    }
}

/// The plain forward mode counts packets per queue, as testpmd's io mode does; the bytes are
/// the ports' counters.
pub(super) fn lcore_counters(mode: LcoreMode) -> fn(u16, u16) -> QueueCounters {
    if mode == LcoreMode::Forward {
        QueueCounters::packets_only
    } else {
        QueueCounters::new
    }
}

/// One role per lcore, every lcore's counters (RX lcores first), and the run control over the
/// RX lcores' counters.
pub(super) fn lcore_roles(kit: &LcoreKit) -> (Roles, Vec<Arc<LcoreStats>>, Arc<RunControl>) {
    let mut roles: Roles = Vec::new();
    let mut all_stats = Vec::new();
    rx_roles(kit, &mut roles, &mut all_stats);
    let run_control = Arc::new(RunControl::new(all_stats.clone(), kit.cfg.lcores.workers.len()));
    worker_roles(kit, &mut roles, &mut all_stats);
    (roles, all_stats, run_control)
}

/// Forward mode: TX port id per RX port id.
pub(super) fn forward_map(cfg: &Config, ports: &[Port]) -> Vec<u16> {
    let max_id = ports.iter().map(|p| p.id()).max().unwrap_or(0);
    let mut forward_to: Vec<u16> = (0..=max_id).collect();
    for (i, (p, port)) in cfg.ports.iter().zip(ports).enumerate() {
        let to = p.forward_to.unwrap_or(i);
        forward_to[port.id() as usize] = ports[to].id();
        if cfg.lcores.mode == LcoreMode::Forward {
            tracing::info!(
                "fastpathd: forward mode, no stage runs: {} -> {}",
                p.device,
                cfg.ports[to].device
            );
        }
    }
    forward_to
}

/// The RX lcores' roles; RX lcore i owns TX queue i on every port.
pub(super) fn rx_roles(kit: &LcoreKit, roles: &mut Roles, all_stats: &mut Vec<Arc<LcoreStats>>) {
    let LcoreKit {
        cfg,
        ports,
        published,
        pools,
        big,
        idle,
        clock,
        counters,
        eal,
        ..
    } = *kit;
    let forward_to = forward_map(cfg, ports);
    for (i, (&lcore, assigned)) in cfg.lcores.rx.iter().zip(cfg.rx_assignment()).enumerate() {
        let rxqs: Vec<_> = assigned.iter().filter_map(|&(p, q)| ports[p].rx_queue(q)).collect();
        let txqs: Vec<_> = ports.iter().filter_map(|p| p.tx_queue(i as u16)).collect();
        let stats = Arc::new(LcoreStats::new(
            lcore,
            rxqs.iter().map(|q| counters(q.port(), q.queue())).collect(),
            txqs.iter().map(|q| counters(q.port(), q.queue())).collect(),
        ));
        all_stats.push(stats.clone());
        let mut rx_lcore = RxLcore::new(
            i,
            rxqs,
            txqs,
            published.clone(),
            stats,
            idle,
            clock,
            // What the lcore allocates (ICMP errors, fragments) from its own socket's pool.
            (pools.on(eal.lcore_socket(lcore)).clone(), big.clone()),
        );
        if cfg.lcores.mode == LcoreMode::Forward {
            rx_lcore = rx_lcore.forwarding(forward_to.clone());
        }
        roles.push((lcore, Role::Rx(Box::new(rx_lcore))));
    }
}

/// The workers' roles; worker w owns TX queue rx.len() + w on every port.
pub(super) fn worker_roles(kit: &LcoreKit, roles: &mut Roles, all_stats: &mut Vec<Arc<LcoreStats>>) {
    let LcoreKit {
        cfg,
        ports,
        kernel_ports,
        published,
        pools,
        idle,
        eal,
        counters,
        ..
    } = *kit;
    let nrx = cfg.lcores.rx.len();
    for (w, &lcore) in cfg.lcores.workers.iter().enumerate() {
        // Worker w also owns queue pair w of every kernel interface.
        let tables = published.current();
        let offload_counters = tables.kernel.as_ref().map(|k| (&k.counters, &k.index_of));
        let (kernel_tx, kernel_rx): (Vec<_>, Vec<_>) = kernel_ports
            .iter()
            .flatten()
            .filter_map(|k| {
                let index = offload_counters
                    .and_then(|(c, at)| at.get(k.id() as usize).copied().flatten().map(|i| (c, i as usize)));
                k.queue_pair(w, &pools.main, index)
            })
            .unzip();
        let txqs: Vec<WorkerTx> = ports
            .iter()
            .filter_map(|p| p.tx_queue((nrx + w) as u16))
            .map(WorkerTx::Port)
            .chain(kernel_tx)
            .collect();
        let stats = Arc::new(LcoreStats::new(
            lcore,
            vec![],
            txqs.iter().map(|q| counters(q.port(), q.queue())).collect(),
        ));
        all_stats.push(stats.clone());
        roles.push((
            lcore,
            Role::Worker(
                WorkerLcore::new(
                    w,
                    txqs,
                    published.clone(),
                    stats,
                    idle,
                    eal.tsc_hz(),
                    pools.on(eal.lcore_socket(lcore)).clone(),
                )
                .with_kernel_rx(kernel_rx),
            ),
        ));
    }
}

/// Launches every role but the main lcore's, which is returned to run on this thread, with the
/// lcores launched, and logs that the daemon runs. If one cannot be launched, the others are
/// stopped and waited for.
pub(super) fn launch(
    eal: &Eal,
    lcores: &config::LcoreConfig,
    roles: Roles,
    run_control: &Arc<RunControl>,
) -> Result<(Option<Role>, Vec<u32>), String> {
    let main_lcore = eal.main_lcore();
    let mut main_role = None;
    let mut launched = Vec::new();
    for (lcore, role) in roles {
        if lcore == main_lcore {
            main_role = Some(role);
            continue;
        }
        let flag = run_control.clone();
        if let Err(e) = eal.launch(lcore, move || role.run(&flag)) {
            run_control.abort();
            for l in &launched {
                let _ = eal.wait(*l);
            }
            return Err(format!("{e}"));
        }
        launched.push(lcore);
    }
    tracing::info!(
        "fastpathd: running: rx lcores {:?}, workers {:?}, main lcore {main_lcore}; SIGINT/SIGTERM to stop",
        lcores.rx,
        lcores.workers
    );
    crate::notify::Notifier::from_env().ready();
    Ok((main_role, launched))
}
