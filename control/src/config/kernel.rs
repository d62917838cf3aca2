//! `[kernel]`: what local traffic goes to the ports' kernel interfaces (`[[port]]
//! kernel_interface`), the exception path of `fastpath::pipeline::kernel`.

use super::errors::Errs;
use super::lcores::LcoreConfig;
use super::port::PortConfig;
use super::service::{ServiceConfig, MAX_SOCKET_CAPACITY};
use crate::locate::Seg::{Index, Key};
use fastpath::pipeline::Action;
use fastpath::wire::IpProtocol;
use serde::Deserialize;

/// Packets each worker's socket of the internal `kernel` service holds by default.
pub const DEFAULT_KERNEL_CAPACITY: usize = 1024;

/// Packets a second all RX lcores together punt into the kernel path by default: ten times
/// the control traffic a host's SSH, BGP and DNS exchange, a small share of what a spoofed
/// flood pushes into the kernel without a budget (benches/NOTES.md, "The kernel path's default
/// punt budget").
pub const DEFAULT_PUNT_RATE: u32 = 10_000;
/// The punt budget's burst by default (0.1 s at the rate).
pub const DEFAULT_PUNT_BURST: u32 = 1_000;
/// The highest `punt_rate` / `punt_burst` accepted.
pub const MAX_PUNT: i64 = 100_000_000;

/// The name of the internal service punted packets are queued in (reserved).
pub const KERNEL_SERVICE: &str = "kernel";

/// `[kernel]` as written.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct KernelSection {
    punt: Option<Vec<String>>,
    socket_capacity: Option<i64>,
    punt_rate: Option<i64>,
    punt_burst: Option<i64>,
    rollover: Option<bool>,
    flow_limit: Option<bool>,
    offloads: Option<bool>,
}

/// `[kernel]`.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelConfig {
    /// `unhandled` is in `punt`.
    pub unhandled: bool,
    /// The `tcp:N` / `udp:N` entries of `punt`.
    pub ports: Vec<(IpProtocol, u16)>,
    /// `punt` as written (for the reload log).
    pub punt: Vec<String>,
    /// Packets each socket of the internal `kernel` service holds (one socket per worker).
    pub socket_capacity: usize,
    /// Packets a second punted into the kernel path, all RX lcores together (0: no limit).
    pub punt_rate: u32,
    /// Packets punted at once, all RX lcores together.
    pub punt_burst: u32,
    /// Punted packets may roll over to another worker's socket (default false: per-flow order).
    pub rollover: bool,
    /// The flow limit sheds dominant punted flows (default false: a bulk flow is not an attack).
    pub flow_limit: bool,
    /// The kernel interfaces are fastpathd's own TAP devices with offloads (coalescing into
    /// the kernel, segmentation out of it); false (the default): DPDK's `net_tap` (or
    /// virtio-user where `/dev/vhost-net` exists), a packet at a time.
    pub offloads: bool,
}

impl KernelConfig {
    /// Whether any port has a kernel interface (then the kernel path exists).
    pub fn enabled(ports: &[PortConfig]) -> bool {
        ports.iter().any(|p| p.kernel_interface.is_some())
    }
}

/// Validates `[kernel]` against the ports (some must have a kernel interface for it to mean
/// anything), the services (a listed port must not be a service's) and the workers (which carry
/// the packets). Default `punt`: `["unhandled"]`.
pub(super) fn validate(
    raw: Option<KernelSection>,
    ports: &[PortConfig],
    services: &[ServiceConfig],
    lcores: &LcoreConfig,
    errs: &mut Errs,
) -> KernelConfig {
    let given = raw.is_some();
    let r = raw.unwrap_or_default();
    let enabled = KernelConfig::enabled(ports);
    if given && !enabled {
        errs.add(
            &[Key("kernel")],
            "no [[port]] has a kernel_interface: [kernel] would select packets for nothing",
        );
    }
    if enabled && lcores.workers.is_empty() {
        errs.add(
            &[Key("lcores"), Key("workers")],
            "a kernel_interface needs at least one worker lcore: workers carry packets to and from the kernel",
        );
    }
    let punt = r.punt.unwrap_or_else(|| vec!["unhandled".to_string()]);
    let mut out = KernelConfig {
        unhandled: false,
        ports: Vec::new(),
        punt: punt.clone(),
        socket_capacity: DEFAULT_KERNEL_CAPACITY,
        punt_rate: DEFAULT_PUNT_RATE,
        punt_burst: DEFAULT_PUNT_BURST,
        rollover: r.rollover.unwrap_or(false),
        flow_limit: r.flow_limit.unwrap_or(false),
        offloads: r.offloads.unwrap_or(true),
    };
    for (key, value, min, out) in [
        ("punt_rate", r.punt_rate, 0, &mut out.punt_rate),
        ("punt_burst", r.punt_burst, 1, &mut out.punt_burst),
    ] {
        match value {
            Some(v) if !(min..=MAX_PUNT).contains(&v) => errs.add(
                &[Key("kernel"), Key(key)],
                format!(
                    "expected {min} to {MAX_PUNT} packets{}",
                    if min == 0 { " a second (0: no limit)" } else { "" }
                ),
            ),
            Some(v) => *out = v as u32,
            None => {}
        }
    }
    for (i, entry) in punt.iter().enumerate() {
        let at = [Key("kernel"), Key("punt"), Index(i)];
        if entry == "unhandled" {
            out.unhandled = true;
            continue;
        }
        let parsed = entry.split_once(':').and_then(|(proto, port)| {
            let proto = match proto {
                "tcp" => IpProtocol::TCP,
                "udp" => IpProtocol::UDP,
                _ => return None,
            };
            port.parse::<u16>().ok().filter(|&p| p != 0).map(|p| (proto, p))
        });
        let Some((proto, port)) = parsed else {
            errs.add(
                &at,
                format!("{entry:?}: expected \"unhandled\", \"tcp:PORT\" or \"udp:PORT\" (PORT 1..65535)"),
            );
            continue;
        };
        if let Some(s) = services.iter().find(|s| s.protocol == proto && s.ports.contains(&port)) {
            errs.add(
                &at,
                format!(
                    "{entry:?}: port {port} belongs to service {:?}; a service's packets go where its action says \
                     (action = \"kernel\" sends them to the kernel)",
                    s.name
                ),
            );
            continue;
        }
        if out.ports.contains(&(proto, port)) {
            errs.add(&at, format!("{entry:?} is listed twice"));
            continue;
        }
        out.ports.push((proto, port));
    }
    if let Some(c) = r.socket_capacity {
        if !(1..=MAX_SOCKET_CAPACITY as i64).contains(&c) {
            errs.add(
                &[Key("kernel"), Key("socket_capacity")],
                format!("expected 1 to {MAX_SOCKET_CAPACITY} packets"),
            );
        } else {
            out.socket_capacity = c as usize;
        }
    }
    for (si, s) in services.iter().enumerate() {
        if s.name == KERNEL_SERVICE {
            errs.add(
                &[Key("service"), Index(si), Key("name")],
                format!("{KERNEL_SERVICE:?} is the name of the kernel path's own queues; choose another"),
            );
        }
        if s.action != Action::Kernel {
            continue;
        }
        // Every port the service can receive on must have a kernel interface to write to.
        let bare: Vec<&str> = ports
            .iter()
            .filter(|p| p.kernel_interface.is_none())
            .filter(|p| {
                let has = |a: &std::net::IpAddr| match a {
                    std::net::IpAddr::V4(v4) => p.ipv4.contains(v4),
                    std::net::IpAddr::V6(v6) => p.ipv6.contains(v6),
                };
                if s.addresses.is_empty() {
                    !p.ipv4.is_empty() || !p.ipv6.is_empty()
                } else {
                    s.addresses.iter().any(has)
                }
            })
            .map(|p| p.device.as_str())
            .collect();
        if !bare.is_empty() {
            errs.add(
                &[Key("service"), Index(si), Key("action")],
                format!(
                    "service {:?}: action \"kernel\" writes into the kernel interface of the port a packet came in on, \
                     but port {} (which has the service's addresses) has no kernel_interface",
                    s.name,
                    bare.join(", ")
                ),
            );
        }
    }
    out
}
