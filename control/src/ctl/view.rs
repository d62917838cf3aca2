//! What the control socket answers, built from what the control and metrics threads already
//! read: the metric sources (every lcore's counters, the ports, the health verdict), the
//! published tables and the running config. Nothing here writes anything an lcore reads but a
//! question to the workers' connection tables (`flow` of a `tunnel` service's flow: each worker
//! answers about its own table between two polls, `fastpath::stats::ConntrackProbe`).

use crate::config::{Config, LcoreMode};
use crate::metrics::Sources;
use crate::reload::RunningConfig;
use fastpath::outcome::Outcome;
use fastpath::pipeline::explain::{self, FlowQuery, FlowVerdict, SocketPick};
use fastpath::pipeline::{Action, FanoutMode, Tables};
use fastpath::stats::{LcoreStats, PacketCounts};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

/// One question at a time to the workers' connection tables, numbered from 1.
static PROBING: AtomicBool = AtomicBool::new(false);
static PROBE_NUMBER: AtomicU64 = AtomicU64::new(0);
/// How long `flow` waits for the workers' answers (a worker sleeping when idle answers within
/// its sleep; one stuck in a poll does not).
const PROBE_WAIT: std::time::Duration = std::time::Duration::from_millis(300);

/// What the answers are read from.
pub struct View {
    /// What the metrics read.
    pub sources: Arc<Sources>,
    /// The running config.
    pub config: RunningConfig,
    /// The config file.
    pub config_path: PathBuf,
    /// When the daemon started (for uptimes and the stats' clock).
    pub started: std::time::Instant,
}

fn outcome(s: &Sources, o: Outcome) -> u64 {
    fastpath::stats::total_outcome(&s.lcores, o)
}

fn fanout_name(f: FanoutMode) -> &'static str {
    match f {
        FanoutMode::Hash => "hash",
        FanoutMode::RoundRobin => "roundrobin",
        FanoutMode::Random => "random",
    }
}

fn protocol_name(p: fastpath::wire::IpProtocol) -> &'static str {
    if p == fastpath::wire::IpProtocol::TCP {
        "tcp"
    } else {
        "udp"
    }
}

impl View {
    fn config(&self) -> Arc<Config> {
        self.config.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn uptime(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// The DPDK port id of the config's port `device`.
    fn port_id(&self, device: &str) -> Option<u16> {
        self.sources
            .port_names
            .iter()
            .position(|n| n == device)
            .map(|i| i as u16)
    }

    /// The share of an lcore's loop cycles spent in busy iterations (of busy and idle together).
    fn busy_share(&self, l: &LcoreStats) -> f64 {
        let (busy, idle) = (l.busy_cycles.get() as f64, l.idle_cycles.get() as f64);
        if busy + idle <= 0.0 {
            return 0.0;
        }
        busy / (busy + idle)
    }

    /// `status`: version, uptime, config, ports, lcores, health.
    pub fn status(&self) -> Value {
        let s = &self.sources;
        let cfg = self.config();
        let tables = s.published.current();
        let ports: Vec<Value> = cfg
            .ports
            .iter()
            .map(|p| {
                let id = self.port_id(&p.device);
                let info = id.and_then(|i| s.port_info.get(i as usize).cloned().flatten());
                let addrs = id.and_then(|i| tables.ports.get(i as usize));
                let counted = |tx: bool| -> u64 {
                    s.lcores
                        .iter()
                        .flat_map(|l| if tx { l.tx.iter() } else { l.rx.iter() })
                        .filter(|q| Some(q.port) == id)
                        .map(|q| q.packets.get())
                        .sum()
                };
                json!({
                    "device": p.device,
                    "port_id": id,
                    "driver": info.as_ref().map(|i| i.driver.clone()),
                    "rss": info.as_ref().map(|i| i.rss),
                    "link": match id.and_then(|i| s.health.link_up(i)) {
                        Some(true) => "up",
                        Some(false) => "down",
                        None => "unknown",
                    },
                    "rx_queues": p.rx_queues,
                    "tx_queues": p.tx_queues,
                    "mac": addrs.map(|a| a.mac().to_string()),
                    "ipv4": addrs.map(|a| a.ipv4.iter().map(|x| x.to_string()).collect::<Vec<_>>()).unwrap_or_default(),
                    "ipv6": addrs.map(|a| a.ipv6.iter().map(|x| x.to_string()).collect::<Vec<_>>()).unwrap_or_default(),
                    "mtu": p.mtu.unwrap_or(1500),
                    "kernel_interface": p.kernel_interface,
                    "rx_packets": counted(false),
                    "tx_packets": counted(true),
                })
            })
            .collect();
        let assignment = cfg.rx_assignment();
        let lcores: Vec<Value> = s
            .lcores
            .iter()
            .map(|l| {
                let rx_slot = cfg.lcores.rx.iter().position(|&r| r == l.lcore);
                let queues: Vec<Value> = rx_slot
                    .map(|i| {
                        assignment[i]
                            .iter()
                            .map(|&(p, q)| json!({"port": cfg.ports[p].device, "queue": q}))
                            .collect()
                    })
                    .unwrap_or_default();
                json!({
                    "lcore": l.lcore,
                    "role": if rx_slot.is_some() { "rx" } else { "worker" },
                    "cpus": cfg.lcores.cpus_of(&[l.lcore]),
                    "rx_queues": queues,
                    "generation": l.generation(),
                    "busy_share": self.busy_share(l),
                    "rx_packets": l.rx_packets(),
                    "tx_packets": l.tx.iter().map(|q| q.packets.get()).sum::<u64>(),
                })
            })
            .collect();
        let health = match s.health.answer() {
            Ok(()) => json!({"ok": true, "reasons": []}),
            Err(r) => json!({"ok": false, "reasons": r.split("; ").collect::<Vec<_>>()}),
        };
        // Backends down do not make the node unhealthy (/healthz): every node sees the same
        // backends, so withdrawing one would move flows without helping them.
        let mut backends: Vec<String> = s
            .backends
            .snapshot()
            .into_iter()
            .filter(|h| !h.up)
            .map(|h| format!("backend {} down: {} ({})", h.name, h.spec, h.last))
            .collect();
        backends.extend(
            s.backends
                .failing_open()
                .into_iter()
                .map(|svc| format!("service {svc}: every backend fails its health check; sending to all of them")),
        );
        json!({
            "version": env!("CARGO_PKG_VERSION"),
            "commit": env!("FASTPATHD_COMMIT"),
            "dpdk": s.dpdk_version,
            "pid": std::process::id(),
            "uptime_seconds": self.uptime(),
            "start_time": s.start_time,
            "mode": match cfg.lcores.mode { LcoreMode::Pipeline => "pipeline", LcoreMode::Forward => "forward" },
            "config": {
                "path": self.config_path.display().to_string(),
                "generation": s.published.generation(),
                "reloads": {
                    "success": s.reload.success.load(Relaxed),
                    "failure": s.reload.failure.load(Relaxed),
                },
                "last_reload_success": s.reload.last_success_seconds(),
            },
            "ports": ports,
            "lcores": lcores,
            "mbufs": { "in_use": (s.mbufs_in_use)(), "capacity": s.mbufs_capacity },
            "health": health,
            "backends": backends,
        })
    }

    /// `show WHAT`.
    pub fn show(&self, what: super::Show) -> Value {
        use super::Show;
        let tables = self.sources.published.current();
        let cfg = self.config();
        match what {
            Show::Services => self.services(&tables, &cfg),
            Show::Sockets => json!({ "generation": tables.generation, "sockets": sockets(&tables) }),
            Show::Tunnels => tunnels(&tables, &cfg, &self.sources.backends.snapshot()),
            Show::Limits => self.limits(&tables),
            Show::Reassembly => self.reassembly(&cfg),
            Show::Kernel => self.kernel(&tables, &cfg),
        }
    }

    fn services(&self, t: &Tables, cfg: &Config) -> Value {
        let list: Vec<Value> = t
            .services
            .services()
            .iter()
            .map(|svc| {
                let conf = cfg.services.iter().find(|c| c.name == svc.name);
                let socks = &svc.group.sockets;
                let sum = |f: fn(&fastpath::socket::SocketLcoreCounters) -> &fastpath::stats::Counter| -> u64 {
                    socks
                        .iter()
                        .filter_map(|&i| t.sockets.get(i))
                        .map(|s| s.counters.sum(f))
                        .sum()
                };
                let tunnels: Vec<&str> = match &svc.action {
                    Action::Tunnel(set) => set
                        .tunnels
                        .iter()
                        .filter_map(|&i| t.tunnels.get(i))
                        .map(|t| t.name.as_str())
                        .collect(),
                    _ => Vec::new(),
                };
                json!({
                    "name": svc.name,
                    "internal": conf.is_none(),
                    "protocol": protocol_name(svc.protocol),
                    "ports": conf.map(|c| c.ports.clone()).unwrap_or_default(),
                    "addresses": svc.addresses.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
                    "action": svc.action.name(),
                    "tunnels": tunnels,
                    "fanout": fanout_name(svc.group.mode),
                    "rollover": svc.group.rollover,
                    "sockets": socks.len(),
                    "socket_capacity": socks.first().and_then(|&i| t.sockets.get(i)).map(|s| s.capacity()),
                    "depth": socks.iter().filter_map(|&i| t.sockets.get(i)).map(|s| s.len()).sum::<usize>(),
                    "delivered": sum(|x| &x.delivered),
                    "full": sum(|x| &x.full),
                    "rollover_total": sum(|x| &x.rollover),
                })
            })
            .collect();
        json!({ "generation": t.generation, "services": list })
    }

    fn limits(&self, t: &Tables) -> Value {
        use fastpath::pipeline::icmp_error::{Limit, FAMILY_LABELS, TYPE_LABELS};
        let s = &self.sources;
        let i = &t.icmp;
        let mut sent = serde_json::Map::new();
        let mut limited = serde_json::Map::new();
        for (fi, fam) in FAMILY_LABELS.iter().enumerate() {
            let mut by_type = serde_json::Map::new();
            for (ti, ty) in TYPE_LABELS.iter().enumerate() {
                let n: u64 = t.icmp_counters.rx.iter().map(|c| c.sent[fi][ti].get()).sum();
                by_type.insert(ty.to_string(), n.into());
            }
            sent.insert(fam.to_string(), by_type.into());
            let mut by_limit = serde_json::Map::new();
            for l in Limit::ALL {
                let n: u64 = t.icmp_counters.rx.iter().map(|c| c.limited[fi][l.index()].get()).sum();
                by_limit.insert(l.label().to_string(), n.into());
            }
            limited.insert(fam.to_string(), by_limit.into());
        }
        let r = &t.tcp_reset;
        let mut rsent = serde_json::Map::new();
        let mut rlimited = serde_json::Map::new();
        for (fi, fam) in FAMILY_LABELS.iter().enumerate() {
            let n: u64 = t.tcp_reset_counters.rx.iter().map(|c| c.sent[fi].get()).sum();
            rsent.insert(fam.to_string(), n.into());
            let mut by_limit = serde_json::Map::new();
            for l in Limit::ALL {
                let n: u64 = t
                    .tcp_reset_counters
                    .rx
                    .iter()
                    .map(|c| c.limited[fi][l.index()].get())
                    .sum();
                by_limit.insert(l.label().to_string(), n.into());
            }
            rlimited.insert(fam.to_string(), by_limit.into());
        }
        json!({
            "generation": t.generation,
            "icmp": {
                "ratemask": format!("{:#x}", i.ratemask),
                "msgs_per_sec": i.msgs_per_sec,
                "burst": i.burst,
                "peer_interval_ms": i.peer_interval_ms,
                "peer_burst": i.peer_burst,
                "peer_table_size": i.peer_table_size,
                "exempt": i.exempt.prefixes().iter().map(|p| p.to_string()).collect::<Vec<_>>(),
                "sent": sent,
                "rate_limited": limited,
                "outcomes": {
                    "icmp_error": outcome(s, Outcome::IcmpError),
                    "icmp_suppressed": outcome(s, Outcome::IcmpSuppressed),
                },
            },
            "tcp_reset": {
                "enabled": r.enabled,
                "msgs_per_sec": r.msgs_per_sec,
                "burst": r.burst,
                "peer_interval_ms": r.peer_interval_ms,
                "peer_burst": r.peer_burst,
                "peer_table_size": r.peer_table_size,
                "sent": rsent,
                "rate_limited": rlimited,
                "outcomes": {
                    "tcp_reset": outcome(s, Outcome::TcpReset),
                    "tcp_reset_suppressed": outcome(s, Outcome::TcpResetSuppressed),
                },
            },
        })
    }

    fn reassembly(&self, cfg: &Config) -> Value {
        use fastpath::pipeline::reasm::{Family, Reason};
        let s = &self.sources;
        let r = &cfg.reassembly;
        let rx: Vec<&Arc<LcoreStats>> = s.lcores.iter().filter(|l| !l.rx.is_empty()).collect();
        let mut families = serde_json::Map::new();
        for f in Family::ALL {
            let fi = f.index();
            let mut refused = serde_json::Map::new();
            for reason in Reason::ALL {
                let n: u64 = rx.iter().map(|l| l.reasm.refused[fi][reason.index()].get()).sum();
                refused.insert(reason.label().to_string(), n.into());
            }
            families.insert(
                f.label().to_string(),
                json!({
                    "completed": rx.iter().map(|l| l.reasm.completed[fi].get()).sum::<u64>(),
                    "timeouts": rx.iter().map(|l| l.reasm.timeouts[fi].get()).sum::<u64>(),
                    "refused": refused,
                }),
            );
        }
        json!({
            "policy": r.policy.label(),
            "high_thresh_bytes": r.high_thresh_bytes,
            "timeout_ms": r.timeout_ns / 1_000_000,
            "max_fragments": r.max_fragments,
            "max_per_source": r.max_per_source,
            "max_datagrams": r.max_datagrams,
            "buffers": cfg.reassembly_buffers,
            "memory": rx.iter().map(|l| json!({"lcore": l.lcore, "bytes": l.reasm.memory.get()})).collect::<Vec<_>>(),
            "memory_bytes": rx.iter().map(|l| l.reasm.memory.get()).sum::<u64>(),
            "families": families,
            "outcomes": {
                "reassembled": outcome(s, Outcome::Reassembled),
                "reassembly_refused": outcome(s, Outcome::ReassemblyRefused),
                "reassembly_timeout": outcome(s, Outcome::ReassemblyTimeout),
            },
        })
    }

    fn kernel(&self, t: &Tables, cfg: &Config) -> Value {
        let s = &self.sources;
        let Some(k) = &t.kernel else {
            return json!({ "enabled": false });
        };
        let interfaces: Vec<Value> = cfg
            .ports
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let name = p.kernel_interface.as_ref()?;
                let c = &k.counters;
                let interface_id = self.port_id(name);
                Some(json!({
                    "port": p.device,
                    "kernel_interface": name,
                    "link": match interface_id.and_then(|id| s.health.link_up(id)) {
                        Some(true) => "up",
                        Some(false) => "down",
                        None => "unknown",
                    },
                    "to_kernel": c.sum(i, |x| &x.to_kernel),
                    "from_kernel": c.sum(i, |x| &x.from_kernel),
                    "interface_full": c.sum(i, |x| &x.interface_full),
                    "port_full": c.sum(i, |x| &x.port_full),
                    "invalid": c.sum(i, |x| &x.invalid),
                    "coalesced": c.sum(i, |x| &x.coalesced),
                    "segmented": c.sum(i, |x| &x.segmented),
                }))
            })
            .collect();
        let socks: Vec<Value> = sockets(t).into_iter().filter(|v| v["kernel"] == true).collect();
        json!({
            "enabled": true,
            "generation": t.generation,
            "punt": cfg.kernel.punt,
            "unhandled": k.rules.unhandled(),
            "socket_capacity": cfg.kernel.socket_capacity,
            "punt_rate": cfg.kernel.punt_rate,
            "punt_burst": cfg.kernel.punt_burst,
            "offloads": cfg.kernel.offloads,
            "budget_per_rx_lcore": { "cost_ns": k.budget.cost_ns, "limit_ns": k.budget.limit_ns },
            "listeners": k.listeners.ports(),
            "interfaces": interfaces,
            "sockets": socks,
            "outcomes": {
                "kernel": outcome(s, Outcome::Kernel),
                "kernel_full": outcome(s, Outcome::KernelFull),
                "kernel_limited": outcome(s, Outcome::KernelLimited),
                "neighbor_unsolicited": outcome(s, Outcome::NeighborUnsolicited),
            },
        })
    }

    /// `flow`: what the published tables do with the packet (see `fastpath::pipeline::explain`).
    /// `flow`, with what each worker's connection table holds for a `tunnel` service's flow:
    /// its entry's backend, state, and whether it pins the flow away from Maglev's pick.
    pub async fn flow_tracked(&self, q: &FlowQuery) -> Value {
        let mut v = self.flow(q);
        let t = self.sources.published.current();
        let FlowVerdict::Service {
            service,
            backend: Some(pick),
            ..
        } = explain::explain(&t, q).verdict
        else {
            return v;
        };
        let name = |ti: usize| t.tunnels.get(ti).map(|x| x.name.clone());
        let workers: Vec<&Arc<LcoreStats>> = self
            .sources
            .lcores
            .iter()
            .filter(|l| l.conntrack.capacity.get() > 0)
            .collect();
        if workers.is_empty() {
            v["detail"]["conntrack"] = json!([]);
            v["detail"]["conntrack_note"] =
                json!("no connection table ([conntrack] entries = 0): every flow takes Maglev's pick");
            return v;
        }
        let deadline = tokio::time::Instant::now() + PROBE_WAIT;
        while PROBING.swap(true, std::sync::atomic::Ordering::Acquire) {
            if tokio::time::Instant::now() >= deadline {
                v["detail"]["conntrack_note"] = json!("another question to the connection tables is under way: Maglev's pick; the connection table may pin established flows elsewhere");
                return v;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        // Released however this ends (a connection dropped mid-wait drops this future).
        struct Probing;
        impl Drop for Probing {
            fn drop(&mut self) {
                PROBING.store(false, std::sync::atomic::Ordering::Release);
            }
        }
        let probing = Probing;
        let n = PROBE_NUMBER.fetch_add(1, Relaxed) + 1;
        for w in &workers {
            w.conntrack_probe.ask(n, q.protocol.into(), q.src, q.dst, service);
        }
        let mut answers: Vec<Option<(u64, u64)>> = vec![None; workers.len()];
        loop {
            for (a, w) in answers.iter_mut().zip(&workers) {
                if a.is_none() {
                    *a = w.conntrack_probe.answer_to(n);
                }
            }
            if answers.iter().all(Option::is_some) || tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        drop(probing);
        use fastpath::stats::ConntrackProbe as P;
        let mut tracked = Vec::new();
        let mut pinned_elsewhere = false;
        for (a, w) in answers.iter().zip(&workers) {
            let entry = match *a {
                None => json!({"lcore": w.lcore, "state": "no answer"}),
                Some((a, _)) if a & P::FOUND == 0 => continue,
                Some((a, g)) => {
                    let ti = (a & u32::MAX as u64) as usize;
                    let same = g == t.generation;
                    let kept = a & P::KEPT != 0;
                    let pinned = same && kept && Some(ti) != pick;
                    pinned_elsewhere |= pinned;
                    json!({
                        "lcore": w.lcore,
                        "state": if a & P::CONFIRMED != 0 { "confirmed" } else { "unconfirmed" },
                        "backend": if same { json!(name(ti)) } else { Value::Null },
                        "generation": g,
                        "kept": kept,
                        "pinned": pinned,
                    })
                }
            };
            tracked.push(entry);
        }
        let note = if tracked.is_empty() {
            "no worker's connection table has this flow: its next packet takes Maglev's pick".to_string()
        } else if pinned_elsewhere {
            format!(
                "pinned: the connection table keeps this flow on its backend, not on Maglev's pick ({})",
                pick.and_then(name)
                    .unwrap_or_else(|| "none: no backend takes new flows".into())
            )
        } else {
            "tracked on Maglev's pick".to_string()
        };
        v["detail"]["conntrack"] = json!(tracked);
        v["detail"]["conntrack_note"] = json!(note);
        v
    }

    pub fn flow(&self, q: &FlowQuery) -> Value {
        let t = self.sources.published.current();
        let cfg = self.config();
        let e = explain::explain(&t, q);
        let port = e.port.and_then(|id| self.sources.port_names.get(id as usize).cloned());
        let conf = port
            .as_ref()
            .and_then(|d| cfg.ports.iter().position(|p| &p.device == d));
        // The RX queue: the port's RSS spreads by the hash over its queues; with the default
        // redirection table (entry i -> queue i mod n) that is the hash mod the queue count.
        let (queue, basis) = match conf.map(|i| &cfg.ports[i]) {
            None => (None, "no port has the destination address"),
            Some(p) if p.rx_queues == 1 => (Some(0), "the port has one RX queue"),
            Some(p) => {
                let rss = e
                    .port
                    .and_then(|id| self.sources.port_info.get(id as usize).cloned().flatten())
                    .is_some_and(|i| i.rss);
                if rss {
                    (
                        Some((e.hash % p.rx_queues as u32) as u16),
                        "hash mod rx_queues: the driver's default redirection table, programmed with the [rss] key",
                    )
                } else {
                    (None, "the port's driver does no RSS: its own choice")
                }
            }
        };
        let lcore = match (conf, queue) {
            (Some(p), Some(q)) => cfg
                .rx_assignment()
                .iter()
                .position(|a| a.contains(&(p, q)))
                .map(|i| cfg.lcores.rx[i]),
            _ => None,
        };
        let socket = |pick: SocketPick| match pick {
            SocketPick::Socket(i) => t.sockets.get(i).map_or(
                Value::Null,
                |s| json!({"service": s.service, "socket": s.index, "depth": s.len(), "capacity": s.capacity()}),
            ),
            SocketPick::RoundRobin => json!("roundrobin: the RX lcore's turn decides"),
            SocketPick::Random => json!("random: the RX lcore's draw decides"),
        };
        let svc_name = |i: usize| t.services.services().get(i).map(|s| s.name.clone());
        let (decision, detail) = match &e.verdict {
            FlowVerdict::NotLocal => ("not_local", json!({"outcome": "not_local"})),
            FlowVerdict::Martian => ("martian", json!({"outcome": "martian"})),
            FlowVerdict::Service {
                service,
                socket: pick,
                backend,
            } => (
                "service",
                json!({
                    "outcome": "delivered",
                    "service": svc_name(*service),
                    "socket": socket(*pick),
                    "backend": backend.map(|b| b.and_then(|i| t.tunnels.get(i)).map(|t| t.name.clone())),
                    "note": "before rollover and the flow limit, which depend on the sockets' backlog",
                }),
            ),
            FlowVerdict::Kernel { service, socket: pick } => (
                "kernel",
                json!({
                    "outcome": "kernel",
                    "service": svc_name(*service),
                    "socket": socket(*pick),
                    "note": "if the RX lcore's share of [kernel] punt_rate / punt_burst admits it (else kernel_limited)",
                }),
            ),
            FlowVerdict::TcpReset => (
                "tcp_reset",
                json!({"outcome": "tcp_reset", "note": "a SYN to a closed port: a reset, if the [tcp_reset] limits let it go (else tcp_reset_suppressed)"}),
            ),
            FlowVerdict::PortUnreachable { limited, exempt } => (
                "icmp_error",
                json!({
                    "outcome": "icmp_error",
                    "rate_limited": limited,
                    "exempt": exempt,
                    "note": if *limited { "a Port Unreachable, if the [icmp] limits let it go (else icmp_suppressed)" } else { "a Port Unreachable, not rate limited" },
                }),
            ),
            FlowVerdict::NoService => ("no_service", json!({"outcome": "no_service"})),
        };
        json!({
            "protocol": protocol_name(q.protocol),
            "src": endpoint(q.src),
            "dst": endpoint(q.dst),
            "generation": t.generation,
            "hash": format!("{:#010x}", e.hash),
            "hash_basis": if t.hasher.is_symmetric() { "Toeplitz with the [rss] key, symmetric (endpoints ordered)" } else { "Toeplitz with the [rss] key over addresses and ports" },
            "port": port,
            "rx_queue": queue,
            "rx_queue_basis": basis,
            "rx_lcore": lcore,
            "decision": decision,
            "detail": detail,
        })
    }

    /// `stats`: every lcore's and queue's counters now, with the daemon's clock.
    pub fn stats(&self) -> Value {
        let s = &self.sources;
        let name = |id: u16| s.port_names.get(id as usize).cloned().unwrap_or_else(|| id.to_string());
        let queues = |l: &LcoreStats, tx: bool, rx_packets: &[u64]| -> Vec<Value> {
            let qs = if tx { &l.tx } else { &l.rx };
            qs.iter()
                .enumerate()
                .map(|(i, q)| {
                    let packets = if tx { q.packets.get() } else { rx_packets[i] };
                    json!({"port": name(q.port), "queue": q.queue, "packets": packets, "bytes": q.bytes.get()})
                })
                .collect()
        };
        // Packets received and outcomes read together, as the metrics read them.
        let counts: Vec<PacketCounts> = s.lcores.iter().map(|l| l.packet_counts()).collect();
        let lcores: Vec<Value> = s
            .lcores
            .iter()
            .zip(&counts)
            .map(|(l, c)| {
                json!({
                    "lcore": l.lcore,
                    "role": if l.rx.is_empty() { "worker" } else { "rx" },
                    "busy_cycles": l.busy_cycles.get(),
                    "idle_cycles": l.idle_cycles.get(),
                    "busy_polls": l.busy_polls.get(),
                    "idle_polls": l.idle_polls.get(),
                    // Sampled cost by outcome (RX lcores): {outcome: [cycles, packets]}.
                    "cost": Outcome::ALL
                        .iter()
                        .filter(|o| l.cost.packets[o.index()].get() > 0)
                        .map(|o| {
                            let i = o.index();
                            (o.name().to_string(), json!([l.cost.cycles[i].get(), l.cost.packets[i].get()]))
                        })
                        .collect::<serde_json::Map<String, Value>>(),
                    "rx": queues(l, false, &c.rx),
                    "tx": queues(l, true, &[]),
                })
            })
            .collect();
        let outcomes: serde_json::Map<String, Value> = Outcome::ALL
            .iter()
            .map(|&o| {
                (
                    o.name().to_string(),
                    counts.iter().map(|c| c.outcomes[o.index()]).sum::<u64>().into(),
                )
            })
            .collect();
        json!({
            "uptime_seconds": self.uptime(),
            "tsc_hz": s.tsc_hz,
            "generation": s.published.generation(),
            "lcores": lcores,
            "outcomes": outcomes,
        })
    }
}

fn endpoint((ip, port): (std::net::IpAddr, u16)) -> String {
    std::net::SocketAddr::new(ip, port).to_string()
}

/// Every socket of `t`: depth, capacity, counters.
fn sockets(t: &Tables) -> Vec<Value> {
    t.sockets
        .iter()
        .map(|s| {
            let c = &s.counters;
            json!({
                "service": s.service,
                "socket": s.index,
                "kernel": s.kernel,
                "worker": s.worker,
                "depth": s.len(),
                "capacity": s.capacity(),
                "pressure": s.under_pressure(),
                "delivered": c.sum(|x| &x.delivered),
                "full": c.sum(|x| &x.full),
                "rollover": c.sum(|x| &x.rollover),
                "rollover_huge": c.sum(|x| &x.rollover_huge),
                "rollover_failed": c.sum(|x| &x.rollover_failed),
                "dequeued": c.sum(|x| &x.dequeued),
                "processed": {
                    "echoed": c.sum(|x| &x.echoed),
                    "sunk": c.sum(|x| &x.sunk),
                    "kernel": c.sum(|x| &x.kernel),
                    "tx_full": c.sum(|x| &x.tx_full),
                    "invalid": c.sum(|x| &x.invalid),
                    "refused": c.sum(|x| &x.refused),
                },
            })
        })
        .collect()
}

/// Every tunnel: where it goes, its weight and drain, its health, its counters.
fn tunnels(t: &Tables, cfg: &Config, health: &[crate::backends::TunnelHealth]) -> Value {
    let list: Vec<Value> = t
        .tunnels
        .iter()
        .map(|tu| {
            let conf = cfg.tunnels.iter().find(|c| c.name == tu.name);
            let c = &tu.counters;
            let services: Vec<&str> = t
                .services
                .services()
                .iter()
                .filter(|s| matches!(&s.action, Action::Tunnel(set) if set.tunnels.iter().any(|&i| t.tunnels.get(i).is_some_and(|x| x.name == tu.name))))
                .map(|s| s.name.as_str())
                .collect();
            let h = health.iter().find(|h| h.name == tu.name);
            json!({
                "name": tu.name,
                "local": tu.local.to_string(),
                "remote": tu.remote.to_string(),
                "key": tu.key,
                "sequence": tu.sequence,
                "checksum": tu.checksum,
                "ttl": tu.ttl,
                "depth": tu.depth,
                "weight": conf.map(|c| c.weight),
                "drain": conf.map(|c| c.drain),
                "health": h.map(|h| h.spec.clone()),
                "up": h.is_none_or(|h| h.up),
                "health_last": h.map(|h| h.last.clone()),
                "transitions": h.map(|h| json!({"up": h.to_up, "down": h.to_down})),
                "services": services,
                "encap": c.sum(|x| &x.encap),
                "decap": c.sum(|x| &x.decap),
                "seq_dropped": c.sum(|x| &x.seq_dropped),
                "too_big": c.sum(|x| &x.too_big),
                "handoff": c.sum(|x| &x.handed_off),
                "tx_full": c.sum(|x| &x.tx_full),
            })
        })
        .collect();
    json!({ "generation": t.generation, "tunnels": list })
}
