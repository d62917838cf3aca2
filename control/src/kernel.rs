//! The kernel interfaces of the exception path (`[[port]] kernel_interface`, see
//! `fastpath::pipeline::kernel`): created at start-up as DPDK ports, given the port's MAC,
//! addresses and MTU, and brought up; closing the port removes the interface.
//!
//! The device is virtio-user over vhost-net where `/dev/vhost-net` exists (the kernel moves
//! the packets, no system call per packet on our side), else `net_tap` (a `writev`/`read` per
//! packet on the worker). Either has one queue pair per worker. Addresses are set with
//! iproute2 (`ip address replace ... nodad`): the one program every Debian system has for it,
//! called a few times at start-up and on a reload that changes addresses, never on the data
//! path.

use crate::config::{Config, PortConfig};
use fastpath::dpdk::{self, Mempool, Port, PortConf};
use std::process::Command;
use std::sync::Arc;

/// How a kernel interface is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// `net_virtio_user` on `/dev/vhost-net`.
    VhostNet,
    /// `net_tap`.
    Tap,
}

impl Backend {
    /// virtio-user where the kernel has vhost-net, else tap.
    pub fn detect() -> Backend {
        if std::path::Path::new("/dev/vhost-net").exists() {
            Backend::VhostNet
        } else {
            Backend::Tap
        }
    }

    /// The DPDK device name and arguments for interface `name` of port index `i`.
    pub fn devargs(
        self,
        i: usize,
        name: &str,
        mac: fastpath::wire::EthernetAddress,
        queues: usize,
    ) -> (String, String) {
        match self {
            Backend::VhostNet => {
                let dev = format!("net_virtio_user_kernel{i}");
                let args = format!("{dev},path=/dev/vhost-net,iface={name},mac={mac},queues={queues},queue_size=1024");
                (dev, args)
            }
            Backend::Tap => {
                let dev = format!("net_tap_kernel{i}");
                let args = format!("{dev},iface={name},mac={mac}");
                (dev, args)
            }
        }
    }
}

/// Creates, starts and addresses the kernel interface of every port that has one (`ports` in
/// config order); `None` for the others.
pub fn open(cfg: &Config, ports: &[Port], pool: &Arc<Mempool>) -> Result<Vec<Option<Port>>, String> {
    let queues = cfg.lcores.workers.len().max(1);
    let backend = Backend::detect();
    let mut out = Vec::new();
    for (i, (p, port)) in cfg.ports.iter().zip(ports).enumerate() {
        let Some(name) = &p.kernel_interface else {
            out.push(None);
            continue;
        };
        let mac = p.mac.unwrap_or(port.mac());
        let (dev, args) = backend.devargs(i, name, mac, queues);
        let at = |e: String| format!("port[{i}].kernel_interface ({name}): {e}");
        dpdk::port::probe(&args).map_err(|e| at(e.to_string()))?;
        let conf = PortConf {
            rx_queues: queues as u16,
            tx_queues: queues as u16,
            rx_desc: cfg.dpdk.rx_desc,
            tx_desc: cfg.dpdk.tx_desc,
            mtu: p.mtu,
            promiscuous: false,
            rss_key: cfg.rss.key,
            rss: false,
        };
        let k = Port::open(&dev, &conf, pool.clone()).map_err(|e| at(e.to_string()))?;
        set_up(name, p).map_err(at)?;
        tracing::info!(
            "fastpathd: kernel interface {name} for port {} ({} {dev}, id {}, mac {mac}, {queues} queue pairs, addresses {})",
            p.device,
            if backend == Backend::Tap { "net_tap" } else { "virtio-user on vhost-net" },
            k.id(),
            addresses(p).join(" ")
        );
        out.push(Some(k));
    }
    Ok(out)
}

/// The port's addresses as the kernel gets them (`a/len`).
fn addresses(p: &PortConfig) -> Vec<String> {
    let v4 = p.ipv4.iter().zip(&p.ipv4_prefix).map(|(a, l)| format!("{a}/{l}"));
    let v6 = p.ipv6.iter().zip(&p.ipv6_prefix).map(|(a, l)| format!("{a}/{l}"));
    v4.chain(v6).collect()
}

/// Runs `ip ARGS`.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip (iproute2): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Gives interface `name` the port's addresses (without duplicate address detection: the
/// fast path already answers for them) and brings it up.
fn set_up(name: &str, p: &PortConfig) -> Result<(), String> {
    // The kernel learns its neighbours from the replies to its own requests; it must not
    // announce itself or run DAD for addresses the fast path answers for.
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{name}/accept_dad"), "0");
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{name}/accept_ra"), "0");
    for a in addresses(p) {
        let mut args = vec!["address", "replace", a.as_str(), "dev", name];
        if a.contains(':') {
            args.push("nodad");
        }
        ip(&args)?;
    }
    ip(&["link", "set", "dev", name, "up"])
}

/// After a reload: the kernel interfaces get the new config's addresses (added and removed by
/// difference, so the kernel's connections on addresses that stay are not disturbed). Errors are
/// logged: the data path runs the new config either way.
pub fn sync_addresses(old: &Config, new: &Config) {
    for (o, n) in old.ports.iter().zip(&new.ports) {
        let Some(name) = &n.kernel_interface else { continue };
        let (before, after) = (addresses(o), addresses(n));
        for a in before.iter().filter(|a| !after.contains(a)) {
            if let Err(e) = ip(&["address", "del", a, "dev", name]) {
                tracing::warn!("fastpathd: kernel interface {name}: {e}");
            }
        }
        if before != after {
            if let Err(e) = set_up(name, n) {
                tracing::warn!("fastpathd: kernel interface {name}: {e}");
            } else {
                tracing::info!("fastpathd: kernel interface {name}: addresses now {}", after.join(" "));
            }
        }
    }
}
