//! `[[service]]`: local UDP/TCP services, their sockets and what the workers do with packets.

use super::dpdk::DpdkConfig;
use super::errors::Errs;
use super::lcores::LcoreConfig;
use super::port::PortIndex;
use super::tunnel::TunnelConfig;
use super::valid_name;
use crate::locate::Seg::{Index, Key};
use fastpath::pipeline::{Action, FanoutMode};
use fastpath::wire::IpProtocol;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

/// Most sockets per service.
pub const MAX_SOCKETS: usize = 64;
/// Largest socket capacity (packets).
pub const MAX_SOCKET_CAPACITY: usize = 1 << 24;

/// One `[[service]]` as written.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct ServiceSection {
    name: String,
    protocol: Option<String>,
    ports: Vec<i64>,
    addresses: Option<Vec<String>>,
    sockets: Option<i64>,
    socket_capacity: Option<i64>,
    fanout: Option<String>,
    rollover: Option<bool>,
    action: String,
    tunnels: Option<Vec<String>>,
    tunnel: Option<String>,
    cost_ns: Option<u32>,
    free_on_rx: Option<bool>,
    huge_flow_rollover: Option<bool>,
    flow_limit: Option<bool>,
    echo_allow_low_ports: Option<bool>,
    tcp_state: Option<bool>,
    deny: Option<Vec<String>>,
    allow: Option<Vec<String>>,
    deny_file: Option<String>,
    allow_file: Option<String>,
}

/// One `[[service]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceConfig {
    /// Name (the `service` label).
    pub name: String,
    /// UDP or TCP.
    pub protocol: fastpath::wire::IpProtocol,
    /// Destination ports.
    pub ports: Vec<u16>,
    /// Local addresses it listens on; empty = all.
    pub addresses: Vec<std::net::IpAddr>,
    /// Number of sockets.
    pub sockets: usize,
    /// Packets each socket holds.
    pub socket_capacity: usize,
    /// Fanout mode.
    pub fanout: fastpath::pipeline::FanoutMode,
    /// Rollover on or off.
    pub rollover: bool,
    /// Huge flows roll over early (at LOW room).
    pub huge_flows: bool,
    /// The flow limit sheds this service's dominant flows (`[flow_limit]` enables the limit).
    pub flow_limit: bool,
    /// Action run by the workers.
    pub action: fastpath::pipeline::Action,
    /// Simulated per-packet processing cost in the worker (ns), for tests and benchmarks.
    pub cost_ns: u32,
    /// Benchmark only (`free_on_rx`, default false): the RX lcore frees the packets it would
    /// enqueue on this service's sockets, counted `delivered`; no worker sees them. For
    /// measurements where the RX lcore must run alone (callgrind runs one thread at a time,
    /// and a worker that cannot keep up would turn every delivery into `socket_full`).
    pub free_on_rx: bool,
    /// `echo_allow_low_ports` (default false): the echo action answers source ports 1 to 1023
    /// too (never 0, 7, 13, 17, 19 or 37). Read by the echo action only.
    pub echo_allow_low_ports: bool,
    /// `tcp_state` (default false): its TCP segments pass the RX lcores' TCP state table
    /// (`[tcp_state]`); a segment of no flow seen beginning is dropped, `tcp_out_of_state`.
    pub tcp_state: bool,
    /// Its own prefix filter (`deny`, `allow`, `deny_file`, `allow_file`), after `[filter]`.
    pub filter: super::FilterConfig,
}

/// The tunnel names a `tunnel` service sends into, by service index: resolved once the
/// tunnels are validated ([`resolve_tunnels`]).
pub(super) type TunnelRefs = Vec<(usize, Vec<String>)>;

/// A service on a port: its name and addresses (empty: every address).
type OnPort = (String, Vec<std::net::IpAddr>);

/// What the services seen so far took: their names, and (protocol, port) -> the services there.
#[derive(Default)]
struct Taken {
    names: BTreeSet<String>,
    ports: BTreeMap<(u8, u16), Vec<OnPort>>,
}

/// Validates every `[[service]]` (its `action = "tunnel"` still carries no tunnel index: see
/// [`resolve_tunnels`]).
pub(super) fn validate(
    raw: Vec<ServiceSection>,
    ports: &PortIndex,
    lcores: &LcoreConfig,
    dpdk: &DpdkConfig,
    dir: &std::path::Path,
    errs: &mut Errs,
) -> (Vec<ServiceConfig>, TunnelRefs) {
    let mut tunnel_refs = Vec::new();
    let mut out: Vec<ServiceConfig> = Vec::new();
    let mut taken = Taken::default();
    if !raw.is_empty() && lcores.workers.is_empty() {
        errs.add(
            &[Key("lcores"), Key("workers")],
            "services need at least one worker lcore to drain their sockets",
        );
    }
    if raw.len() > u16::MAX as usize {
        errs.add(&[Key("service")], format!("{} services: at most 65535", raw.len()));
    }
    for (si, r) in raw.into_iter().enumerate() {
        let (service, tunnels) = service(si, r, ports, dpdk, dir, &mut taken, errs);
        if let Some(names) = tunnels {
            tunnel_refs.push((si, names));
        }
        out.push(service);
    }
    (out, tunnel_refs)
}

/// Validates `service[si]`; also returns the tunnel names of a `tunnel` action.
fn service(
    si: usize,
    r: ServiceSection,
    ports: &PortIndex,
    dpdk: &DpdkConfig,
    dir: &std::path::Path,
    taken: &mut Taken,
    errs: &mut Errs,
) -> (ServiceConfig, Option<Vec<String>>) {
    let at = |k: &'static str| [Key("service"), Index(si), Key(k)];
    let who = format!("service {:?}", r.name);
    if !valid_name(&r.name) {
        errs.add(
            &at("name"),
            format!("{who}: expected a name of letters, digits, '-' and '_'"),
        );
    } else if !taken.names.insert(r.name.clone()) {
        errs.add(&at("name"), format!("{who}: two services have this name"));
    }
    let protocol = protocol(si, &r, &who, errs);
    let addresses = addresses(si, &r, &who, ports, errs);
    let svc_ports = listen_ports(si, &r, protocol, &addresses, &who, taken, errs);
    let (sockets, cap) = sockets(si, &r, &who, dpdk, errs);
    if r.cost_ns.is_some_and(|c| c > 10_000_000) {
        errs.add(
            &at("cost_ns"),
            format!("{who}: cost_ns is at most 10000000 (10 ms per packet)"),
        );
    }
    let fanout = fanout(si, &r, &who, errs);
    let (action, tunnels) = action(si, &r, protocol, &who, errs);
    let kernel = matches!(action, Action::Kernel);
    if r.tcp_state == Some(true) && protocol != IpProtocol::TCP {
        errs.add(
            &at("tcp_state"),
            format!("{who}: tcp_state tracks TCP: it needs protocol = \"tcp\""),
        );
    }
    let service = ServiceConfig {
        name: r.name,
        protocol,
        ports: svc_ports,
        addresses,
        sockets: sockets.clamp(1, MAX_SOCKETS as i64) as usize,
        socket_capacity: cap.clamp(1, MAX_SOCKET_CAPACITY as i64) as usize,
        fanout,
        // The kernel behind an `action = "kernel"` service gets each flow whole and in order,
        // as from a NIC: no rollover (a TCP flow moved between workers arrives reordered) and
        // no flow limit (a lone bulk transfer is always dominant; Linux's own is off by default).
        rollover: r.rollover.unwrap_or(!kernel),
        huge_flows: r.huge_flow_rollover.unwrap_or(true),
        flow_limit: r.flow_limit.unwrap_or(!kernel),
        action,
        cost_ns: r.cost_ns.unwrap_or(0),
        free_on_rx: r.free_on_rx.unwrap_or(false),
        echo_allow_low_ports: r.echo_allow_low_ports.unwrap_or(false),
        tcp_state: r.tcp_state.unwrap_or(false),
        filter: super::filter::lists(
            &[Key("service"), Index(si)],
            super::filter::FilterSection {
                deny: r.deny,
                allow: r.allow,
                deny_file: r.deny_file,
                allow_file: r.allow_file,
            },
            dir,
            errs,
        ),
    };
    (service, tunnels)
}

fn protocol(si: usize, r: &ServiceSection, who: &str, errs: &mut Errs) -> IpProtocol {
    match r.protocol.as_deref().unwrap_or("udp") {
        "udp" => IpProtocol::UDP,
        "tcp" => IpProtocol::TCP,
        other => {
            errs.add(
                &[Key("service"), Index(si), Key("protocol")],
                format!("{who}: {other:?}: expected \"udp\" or \"tcp\""),
            );
            IpProtocol::UDP
        }
    }
}

/// `service[si].ports`: valid ports that no earlier service of the protocol has, unless each
/// service on the port is bound to `addresses` of its own (an IPv4 and an IPv6 service address
/// on one port with different backends).
fn listen_ports(
    si: usize,
    r: &ServiceSection,
    protocol: IpProtocol,
    addresses: &[std::net::IpAddr],
    who: &str,
    taken: &mut Taken,
    errs: &mut Errs,
) -> Vec<u16> {
    let mut svc_ports = Vec::new();
    if r.ports.is_empty() {
        errs.add(
            &[Key("service"), Index(si), Key("ports")],
            format!("{who}: at least one port is needed"),
        );
    }
    for (pi, &p) in r.ports.iter().enumerate() {
        let here = [Key("service"), Index(si), Key("ports"), Index(pi)];
        let port = match u16::try_from(p) {
            Ok(port) if port != 0 => port,
            _ => {
                errs.add(&here, format!("{who}: {p}: expected a port 1..65535"));
                continue;
            }
        };
        let there = taken.ports.entry((u8::from(protocol), port)).or_default();
        let clash = there.iter().find(|(_, theirs)| {
            addresses.is_empty() || theirs.is_empty() || theirs.iter().any(|a| addresses.contains(a))
        });
        match clash {
            Some((other, _)) => errs.add(
                &here,
                format!(
                    "{who}: port {port} already belongs to service {other:?} (services share a port only \
                     when each has addresses of its own)"
                ),
            ),
            None => {
                there.push((r.name.clone(), addresses.to_vec()));
                svc_ports.push(port);
            }
        }
    }
    svc_ports
}

/// `service[si].addresses`: local addresses of some `[[port]]`.
fn addresses(si: usize, r: &ServiceSection, who: &str, ports: &PortIndex, errs: &mut Errs) -> Vec<std::net::IpAddr> {
    let mut addresses = Vec::new();
    for (ai, a) in r.addresses.iter().flatten().enumerate() {
        let here = [Key("service"), Index(si), Key("addresses"), Index(ai)];
        match a.parse::<std::net::IpAddr>() {
            Ok(ip) => {
                if ports.is_local(ip) {
                    addresses.push(ip);
                } else {
                    errs.add(&here, format!("{who}: {ip} is not a local address of any [[port]]"));
                }
            }
            Err(_) => errs.add(&here, format!("{who}: {a:?}: expected an IP address")),
        }
    }
    addresses
}

/// `service[si].sockets` and `socket_capacity`, unclamped.
fn sockets(si: usize, r: &ServiceSection, who: &str, dpdk: &DpdkConfig, errs: &mut Errs) -> (i64, i64) {
    let at = |k: &'static str| [Key("service"), Index(si), Key(k)];
    let sockets = r.sockets.unwrap_or(1);
    if !(1..=MAX_SOCKETS as i64).contains(&sockets) {
        errs.add(
            &at("sockets"),
            format!("{who}: {sockets} sockets: expected 1 to {MAX_SOCKETS}"),
        );
    }
    let cap = r.socket_capacity.unwrap_or(1024);
    if !(1..=MAX_SOCKET_CAPACITY as i64).contains(&cap) {
        errs.add(
            &at("socket_capacity"),
            format!("{who}: capacity {cap}: a socket ring holds 1 to {MAX_SOCKET_CAPACITY} packets"),
        );
    } else if cap > dpdk.mbufs as i64 {
        errs.add(
            &at("socket_capacity"),
            format!(
                "{who}: capacity {cap} is more than the whole mbuf pool (dpdk.mbufs = {}): the ring could never fill \
                 and a full one would starve RX",
                dpdk.mbufs
            ),
        );
    }
    (sockets, cap)
}

fn fanout(si: usize, r: &ServiceSection, who: &str, errs: &mut Errs) -> FanoutMode {
    match r.fanout.as_deref().unwrap_or("hash") {
        "hash" => FanoutMode::Hash,
        "roundrobin" => FanoutMode::RoundRobin,
        "random" => FanoutMode::Random,
        other => {
            errs.add(
                &[Key("service"), Index(si), Key("fanout")],
                format!("{who}: {other:?}: expected \"hash\", \"roundrobin\" or \"random\""),
            );
            FanoutMode::Hash
        }
    }
}

/// `service[si].action`, and for `"tunnel"` the names in `tunnel` and `tunnels`.
fn action(
    si: usize,
    r: &ServiceSection,
    protocol: IpProtocol,
    who: &str,
    errs: &mut Errs,
) -> (Action, Option<Vec<String>>) {
    let at = [Key("service"), Index(si), Key("action")];
    let mut tunnels = None;
    let action = match r.action.as_str() {
        "echo" if protocol == IpProtocol::TCP => {
            errs.add(
                &at,
                format!("{who}: echo is a UDP echo server; a tcp service can use \"sink\""),
            );
            Action::Sink
        }
        "echo" => Action::Echo,
        "sink" => Action::Sink,
        "kernel" => Action::Kernel,
        "tunnel" => {
            let names: Vec<String> = r
                .tunnel
                .iter()
                .cloned()
                .chain(r.tunnels.iter().flatten().cloned())
                .collect();
            if names.is_empty() {
                errs.add(
                    &at,
                    format!("{who}: action \"tunnel\" needs tunnel = \"NAME\" or tunnels = [..]"),
                );
            }
            tunnels = Some(names);
            Action::Sink
        }
        other => {
            errs.add(
                &at,
                format!("{who}: unknown action {other:?}: expected \"echo\", \"sink\", \"tunnel\" or \"kernel\""),
            );
            Action::Sink
        }
    };
    if (r.tunnel.is_some() || r.tunnels.is_some()) && r.action != "tunnel" {
        errs.add(&at, format!("{who}: tunnel/tunnels are only for action = \"tunnel\""));
    }
    (action, tunnels)
}

/// Turns each `tunnel` service's tunnel names into indexes of `tunnels`.
pub(super) fn resolve_tunnels(
    services: &mut [ServiceConfig],
    refs: &[(usize, Vec<String>)],
    tunnels: &[TunnelConfig],
    errs: &mut Errs,
) {
    let mut by_name: std::collections::HashMap<&str, usize> = std::collections::HashMap::with_capacity(tunnels.len());
    for (i, t) in tunnels.iter().enumerate() {
        by_name.entry(t.name.as_str()).or_insert(i);
    }
    for (si, names) in refs {
        let mut set = Vec::new();
        for (k, n) in names.iter().enumerate() {
            match by_name.get(n.as_str()).copied() {
                Some(i) => set.push(i),
                None => errs.add(
                    &[Key("service"), Index(*si), Key("tunnels"), Index(k)],
                    format!("service {:?}: no tunnel is named {n:?}", services[*si].name),
                ),
            }
        }
        let backends: Vec<fastpath::pipeline::maglev::Backend> = set
            .iter()
            .map(|&i| fastpath::pipeline::maglev::Backend {
                name: tunnels[i].name.clone(),
                weight: tunnels[i].weight,
                drain: tunnels[i].drain,
                up: true,
            })
            .collect();
        services[*si].action = Action::Tunnel(fastpath::pipeline::Backends::new(set, &backends));
    }
}
