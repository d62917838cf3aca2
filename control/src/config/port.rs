//! `[[port]]`: the DPDK ports, their queues and local addresses.

use super::errors::Errs;
use super::lcores::{LcoreConfig, LcoreMode};
use crate::locate::Seg::{Index, Key};
use fastpath::wire::EthernetAddress;
use serde::Deserialize;
use std::collections::BTreeSet;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Most queues per port we accept in either direction.
pub const MAX_QUEUES: u16 = 64;

/// One `[[port]]` as written.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct PortSection {
    device: String,
    rx_queues: Option<u16>,
    tx_queues: Option<u16>,
    #[serde(default)]
    ipv4: Vec<String>,
    #[serde(default)]
    ipv6: Vec<String>,
    mac: Option<String>,
    mtu: Option<u16>,
    forward_to: Option<String>,
    kernel_interface: Option<String>,
    deny: Option<Vec<String>>,
    allow: Option<Vec<String>>,
    deny_file: Option<String>,
    allow_file: Option<String>,
}

/// One `[[port]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct PortConfig {
    /// DPDK device name (vdev name or PCI address).
    pub device: String,
    /// RX queues.
    pub rx_queues: u16,
    /// TX queues.
    pub tx_queues: u16,
    /// Local IPv4 addresses.
    pub ipv4: Vec<Ipv4Addr>,
    /// Local IPv6 addresses.
    pub ipv6: Vec<Ipv6Addr>,
    /// The prefix length written after each IPv4 address (`"192.0.2.1/24"`; 32 if none): the
    /// kernel interface gets the address with it, and so a route to the prefix.
    pub ipv4_prefix: Vec<u8>,
    /// The same for each IPv6 address (128 if none).
    pub ipv6_prefix: Vec<u8>,
    /// The Linux interface that mirrors the port (the exception path): created at start-up.
    pub kernel_interface: Option<String>,
    /// MAC override; the port's own address otherwise.
    pub mac: Option<EthernetAddress>,
    /// MTU to set.
    pub mtu: Option<u16>,
    /// With `[lcores] mode = "forward"`: index (in `Config::ports`) of the port that sends what
    /// this one receives; `None` is the port itself.
    pub forward_to: Option<usize>,
    /// Its own prefix filter (`deny`, `allow`, `deny_file`, `allow_file`), after `[filter]`.
    pub filter: super::FilterConfig,
}

/// The ports' local addresses and devices, for the sections that refer to them: one lookup
/// each, so validation stays linear however many addresses, services and tunnels there are.
pub(super) struct PortIndex {
    addrs: std::collections::HashSet<std::net::IpAddr>,
    devices: std::collections::HashMap<String, usize>,
}

impl PortIndex {
    pub(super) fn new(ports: &[PortConfig]) -> Self {
        let mut devices = std::collections::HashMap::with_capacity(ports.len());
        for (i, p) in ports.iter().enumerate() {
            devices.entry(p.device.clone()).or_insert(i);
        }
        let v4 = ports
            .iter()
            .flat_map(|p| p.ipv4.iter().map(|&a| std::net::IpAddr::V4(a)));
        let v6 = ports
            .iter()
            .flat_map(|p| p.ipv6.iter().map(|&a| std::net::IpAddr::V6(a)));
        PortIndex {
            addrs: v4.chain(v6).collect(),
            devices,
        }
    }

    /// Whether `ip` is a local address of some port.
    pub(super) fn is_local(&self, ip: std::net::IpAddr) -> bool {
        self.addrs.contains(&ip)
    }

    /// The index of the (first) port with `device`.
    pub(super) fn device(&self, device: &str) -> Option<usize> {
        self.devices.get(device).copied()
    }
}

/// Validates every `[[port]]` (`lcores` gives the TX queues each port needs and the mode
/// `forward_to` belongs to).
pub(super) fn validate(
    raw: Vec<PortSection>,
    lcores: &LcoreConfig,
    dir: &std::path::Path,
    errs: &mut Errs,
) -> Vec<PortConfig> {
    if raw.is_empty() {
        errs.add(&[Key("port")], "at least one [[port]] is needed");
    }
    let transmitters = lcores.transmitters().len();
    let mut devices = BTreeSet::new();
    let mut ports = Vec::new();
    let mut forward_to = Vec::new();
    for (pi, mut p) in raw.into_iter().enumerate() {
        forward_to.push(p.forward_to.take());
        let filter = super::filter::lists(
            &[Key("port"), Index(pi)],
            super::filter::FilterSection {
                deny: p.deny.take(),
                allow: p.allow.take(),
                deny_file: p.deny_file.take(),
                allow_file: p.allow_file.take(),
            },
            dir,
            errs,
        );
        let mut cfg = port(pi, p, transmitters, &mut devices, errs);
        cfg.filter = filter;
        ports.push(cfg);
    }
    resolve_forward_to(&mut ports, forward_to, lcores.mode, errs);
    let mut names = BTreeSet::new();
    for (pi, p) in ports.iter().enumerate() {
        if let Some(name) = &p.kernel_interface {
            if !names.insert(name.clone()) {
                errs.add(
                    &[Key("port"), Index(pi), Key("kernel_interface")],
                    format!("{name:?} is the kernel interface of two ports"),
                );
            }
            if lcores.mode == LcoreMode::Forward {
                errs.warn(
                    &[Key("port"), Index(pi), Key("kernel_interface")],
                    "created, but nothing reaches it with [lcores] mode = \"forward\" (nothing is local there)",
                );
            }
        }
    }
    ports
}

/// Validates `port[pi]`; `devices` collects the device names seen so far.
fn port(pi: usize, p: PortSection, transmitters: usize, devices: &mut BTreeSet<String>, errs: &mut Errs) -> PortConfig {
    let at = |k: &'static str| [Key("port"), Index(pi), Key(k)];
    if p.device.trim().is_empty() {
        errs.add(&at("device"), "expected a DPDK device name (vdev name or PCI address)");
    } else if !devices.insert(p.device.clone()) {
        errs.add(
            &at("device"),
            format!("device {:?} appears in two [[port]] sections", p.device),
        );
    }
    let (rx_queues, tx_queues) = queues(pi, &p, transmitters, errs);
    let (ipv4, ipv4_prefix) = local_addrs(
        &p.ipv4,
        pi,
        "ipv4",
        "192.0.2.1",
        32,
        |a: &Ipv4Addr| a.is_unspecified() || a.is_multicast() || a.is_broadcast() || a.is_loopback(),
        |a: &Ipv4Addr, len| {
            // RFC 919/922, RFC 3021: below /31 the all-zeros host is the network and the all-ones
            // one its broadcast; answering as either takes traffic meant for every host.
            let host = u32::MAX.checked_shr(len as u32).unwrap_or(0);
            match u32::from(*a) & host {
                _ if len >= 31 => None,
                0 => Some("the network address of its prefix"),
                h if h == host => Some("the broadcast address of its prefix"),
                _ => None,
            }
        },
        errs,
    );
    let (ipv6, ipv6_prefix) = local_addrs(
        &p.ipv6,
        pi,
        "ipv6",
        "2001:db8::1",
        128,
        |a: &Ipv6Addr| a.is_unspecified() || a.is_multicast() || a.is_loopback(),
        |a: &Ipv6Addr, len| {
            // RFC 4291 §2.6.1: the all-zeros host of a prefix is its Subnet-Router anycast address.
            let host = u128::MAX.checked_shr(len as u32).unwrap_or(0);
            (len < 127 && u128::from(*a) & host == 0).then_some("the Subnet-Router anycast address of its prefix")
        },
        errs,
    );
    let kernel_interface = p.kernel_interface.clone();
    if let Some(name) = &kernel_interface {
        if !valid_interface_name(name) {
            errs.add(
                &at("kernel_interface"),
                format!("{name:?}: expected a Linux interface name (1 to 15 letters, digits, '-', '_' or '.')"),
            );
        }
    }
    let mac = mac(pi, p.mac.as_deref(), errs);
    if let Some(mtu) = p.mtu {
        if !(68..=9600).contains(&mtu) {
            errs.add(&at("mtu"), "expected an MTU between 68 and 9600");
        }
    }
    PortConfig {
        device: p.device,
        rx_queues,
        tx_queues,
        ipv4,
        ipv6,
        ipv4_prefix,
        ipv6_prefix,
        kernel_interface,
        mac,
        mtu: p.mtu,
        forward_to: None,
        filter: Default::default(),
    }
}

/// `port[pi]`'s RX and TX queues: a TX queue for each of the `transmitters` lcores.
fn queues(pi: usize, p: &PortSection, transmitters: usize, errs: &mut Errs) -> (u16, u16) {
    let at = |k: &'static str| [Key("port"), Index(pi), Key(k)];
    let rx_queues = p.rx_queues.unwrap_or(1);
    if !(1..=MAX_QUEUES).contains(&rx_queues) {
        errs.add(&at("rx_queues"), format!("expected 1 to {MAX_QUEUES} RX queues"));
    }
    let tx_queues = p.tx_queues.unwrap_or(transmitters.max(1) as u16);
    if !(1..=MAX_QUEUES).contains(&tx_queues) {
        errs.add(&at("tx_queues"), format!("expected 1 to {MAX_QUEUES} TX queues"));
    } else if (tx_queues as usize) < transmitters {
        errs.add(
            &at("tx_queues"),
            format!(
                "{tx_queues} TX queues, but {transmitters} lcores (rx + workers) each need their own TX queue on \
                 every port (no shared TX lock); set tx_queues = {transmitters}"
            ),
        );
    }
    (rx_queues, tx_queues)
}

/// `port[pi].mac`: a unicast address, if given.
fn mac(pi: usize, text: Option<&str>, errs: &mut Errs) -> Option<EthernetAddress> {
    let at = [Key("port"), Index(pi), Key("mac")];
    match text.map(str::parse::<EthernetAddress>) {
        None => None,
        Some(Ok(m)) if m.is_unicast() => Some(m),
        Some(Ok(m)) => {
            errs.add(&at, format!("{m} is not a unicast address"));
            None
        }
        Some(Err(())) => {
            errs.add(&at, "expected a MAC address like \"02:00:00:00:00:01\"");
            None
        }
    }
}

/// Resolves each `forward_to` (a device name) to the index of its port, once every port is known.
fn resolve_forward_to(ports: &mut [PortConfig], forward_to: Vec<Option<String>>, mode: LcoreMode, errs: &mut Errs) {
    let index = PortIndex::new(ports);
    for (pi, to) in forward_to.into_iter().enumerate() {
        let Some(to) = to else { continue };
        let at = [Key("port"), Index(pi), Key("forward_to")];
        if mode != LcoreMode::Forward {
            errs.add(&at, "only used with [lcores] mode = \"forward\"");
        }
        match index.device(&to) {
            Some(i) => ports[pi].forward_to = Some(i),
            None => errs.add(&at, format!("{to:?}: expected the device of a [[port]] in this file")),
        }
    }
}

/// Whether `name` can name a Linux network interface (`dev_valid_name`: at most 15 bytes, no
/// '/', ':' or white space, not "." or ".."; here also only letters, digits, '-', '_', '.').
fn valid_interface_name(name: &str) -> bool {
    (1..=15).contains(&name.len())
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Parses `port[pi].<key>`: local unicast addresses, each once, each with an optional prefix
/// length (`/24`; `max_prefix` if none).
#[allow(clippy::too_many_arguments)]
fn local_addrs<A: std::str::FromStr + Eq + std::hash::Hash + Clone + fmt::Display>(
    list: &[String],
    pi: usize,
    key: &'static str,
    example: &str,
    max_prefix: u8,
    not_unicast: impl Fn(&A) -> bool,
    in_prefix: impl Fn(&A, u8) -> Option<&'static str>,
    errs: &mut Errs,
) -> (Vec<A>, Vec<u8>) {
    let mut out: Vec<A> = Vec::new();
    let mut prefixes = Vec::new();
    let mut seen: std::collections::HashSet<A> = std::collections::HashSet::with_capacity(list.len());
    for (i, s) in list.iter().enumerate() {
        let at = [Key("port"), Index(pi), Key(key), Index(i)];
        let (text, prefix) = match s.split_once('/') {
            Some((a, len)) => match len.parse::<u8>() {
                Ok(l) if l <= max_prefix => (a, l),
                _ => {
                    errs.add(
                        &at,
                        format!("{s:?}: the prefix length after '/' must be 0 to {max_prefix}"),
                    );
                    continue;
                }
            },
            None => (s.as_str(), max_prefix),
        };
        match text.parse::<A>() {
            Ok(a) if not_unicast(&a) => errs.add(&at, format!("{a} cannot be a local unicast address")),
            Ok(a) if in_prefix(&a, prefix).is_some() => errs.add(
                &at,
                format!(
                    "{s:?}: {a} is {}, not a host's",
                    in_prefix(&a, prefix).unwrap_or_default()
                ),
            ),
            Ok(a) if !seen.insert(a.clone()) => errs.add(&at, format!("{a} is listed twice")),
            Ok(a) => {
                out.push(a);
                prefixes.push(prefix);
            }
            Err(_) => errs.add(
                &at,
                format!(
                    "{s:?}: expected an {} address like \"{example}\"",
                    key.to_uppercase().replace("IPV", "IPv")
                ),
            ),
        }
    }
    (out, prefixes)
}

/// Every `--vdev` of `eal_args` (`--vdev=SPEC` or `--vdev SPEC`), in order.
fn vdev_specs(eal_args: &[String]) -> Vec<&str> {
    let mut out = Vec::new();
    let mut args = eal_args.iter();
    while let Some(a) = args.next() {
        match a.strip_prefix("--vdev=") {
            Some(s) => out.push(s),
            None if a == "--vdev" => out.extend(args.next().map(String::as_str)),
            None => {}
        }
    }
    out
}

/// `net_af_xdp` vdevs in `eal_args` (`--vdev=net_af_xdp0,iface=eth1,queue_count=2`). DPDK
/// 22.11's driver gives `queue_count` (default 1) RX/TX queue pairs and refuses any other
/// count, RX and TX alike; and it builds its UMEM over the packet pool, which receives nothing
/// when the pool sits on the 4 KiB pages of `--no-huge` (measured: the port opens, the kernel
/// redirects every packet to the socket, none arrive).
pub(super) fn check_af_xdp(eal_args: &[String], ports: &[PortConfig], errs: &mut Errs) {
    let no_huge = eal_args.iter().any(|a| a == "--no-huge");
    for spec in vdev_specs(eal_args) {
        let mut parts = spec.split(',');
        let name = parts.next().unwrap_or_default();
        if !name.starts_with("net_af_xdp") {
            continue;
        }
        let kv: Vec<&str> = parts.collect();
        let pairs = kv
            .iter()
            .filter_map(|x| x.strip_prefix("queue_count="))
            .next_back()
            .and_then(|n| n.parse::<u16>().ok())
            .unwrap_or(1);
        for (pi, p) in ports.iter().enumerate().filter(|(_, p)| p.device == name) {
            if no_huge {
                errs.add(
                    &[Key("port"), Index(pi), Key("device")],
                    format!(
                        "{name}: net_af_xdp needs the EAL on hugepages (drop --no-huge from [dpdk] eal_args): \
                         it lends the packet pool to the kernel as its UMEM, and a pool on 4 KiB pages \
                         receives nothing"
                    ),
                );
            }
            for (key, n) in [("rx_queues", p.rx_queues), ("tx_queues", p.tx_queues)] {
                if n != pairs {
                    errs.add(
                        &[Key("port"), Index(pi), Key(key)],
                        format!(
                            "{name} has queue_count={pairs} in [dpdk] eal_args (1 unless given), so {key} \
                             must be {pairs}: the driver gives exactly that many RX/TX queue pairs (at most \
                             the interface's combined channels, `ethtool -l`; a veth has none, so 1: one \
                             lcore, lcores.rx = [0] and no workers)"
                        ),
                    );
                }
            }
        }
    }
}

/// af_packet ring frames below which a port with several queue pairs gets a warning.
pub const AF_PACKET_FRAMES: u32 = 4096;

/// `net_af_packet` vdevs in `eal_args` (`--vdev=net_af_packet0,iface=eth1,qpairs=2`): a port on
/// one must poll every queue pair, or the kernel's fanout hands packets to a queue nobody reads
/// and a service behind it is silently dead.
pub(super) fn check_af_packet_queues(eal_args: &[String], ports: &[PortConfig], errs: &mut Errs) {
    for spec in vdev_specs(eal_args) {
        let mut parts = spec.split(',');
        let name = parts.next().unwrap_or_default();
        if !name.starts_with("net_af_packet") {
            continue;
        }
        let kv: Vec<&str> = parts.collect();
        let arg = |key: &str| kv.iter().filter_map(|x| x.strip_prefix(key)).next_back();
        let qpairs = arg("qpairs=").and_then(|n| n.parse::<u16>().ok()).unwrap_or(1);
        // DPDK 22.11's af_packet fans its rings out with the rollover flag (hard-coded): a flow
        // whose ring is three-quarters full continues in another, reordered (512 frames by default).
        let frames = arg("framecnt=").and_then(|n| n.parse::<u32>().ok()).unwrap_or(512);
        if qpairs > 1 && frames < AF_PACKET_FRAMES {
            for (pi, _) in ports.iter().enumerate().filter(|(_, p)| p.device == name) {
                errs.warn(
                    &[Key("port"), Index(pi), Key("device")],
                    format!(
                        "{name}: DPDK's af_packet moves a flow to another of its {qpairs} rings when its \
                         ring of {frames} frames is three-quarters full, and a TCP flow arrives reordered; \
                         framecnt={AF_PACKET_FRAMES} in its --vdev gives the rings room"
                    ),
                );
            }
        }
        for (pi, p) in ports.iter().enumerate().filter(|(_, p)| p.device == name) {
            if p.rx_queues != qpairs {
                errs.add(
                    &[Key("port"), Index(pi), Key("rx_queues")],
                    format!(
                        "{name} has qpairs={qpairs} in [dpdk] eal_args, so rx_queues must be {qpairs}: \
                         the kernel spreads packets over every queue pair, and those of a queue \
                         nobody polls are lost"
                    ),
                );
            }
        }
    }
}
