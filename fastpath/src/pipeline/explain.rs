//! What a generation's tables would do with one UDP or TCP packet, decided without a packet, a
//! clock or any lcore's state (`fastpathctl flow`): the same functions the stages call on the
//! data path (the flow hash, the service table, the fanout's hash position, Maglev, the source
//! rule, the kernel path's punt rules and the ICMP and reset eligibility), so the answer cannot
//! disagree with what the lcores do. Only what depends on state the lcores keep (round-robin
//! cursors, random draws, rollover, the flow limit, the limiters' buckets) is named, not decided.

use super::fanout::{FanoutMode, Group};
use super::icmp_error::{self, ErrorKind};
use super::parse::IpVersion;
use super::service::Action;
use super::{source, Tables};
use crate::wire::{IpProtocol, TcpFlags};
use std::net::IpAddr;

/// A packet to explain: a TCP segment is taken as a connection attempt (SYN).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowQuery {
    /// [`IpProtocol::UDP`] or [`IpProtocol::TCP`].
    pub protocol: IpProtocol,
    /// Source address and port.
    pub src: (IpAddr, u16),
    /// Destination address and port.
    pub dst: (IpAddr, u16),
}

/// The socket a fanout picks before rollover.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SocketPick {
    /// This socket (an index into [`Tables::sockets`]).
    Socket(usize),
    /// `fanout = "roundrobin"`: the RX lcore's cursor decides.
    RoundRobin,
    /// `fanout = "random"`: the RX lcore's generator decides.
    Random,
}

/// What happens to the packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlowVerdict {
    /// Its destination is no port's address: `not_local`.
    NotLocal,
    /// Its source is one the box never answers or delivers for: `martian`.
    Martian,
    /// To a service (an index into the service table), on this socket; a `tunnel` service's
    /// backend (an index into [`Tables::tunnels`], `None` when every tunnel is drained or of
    /// weight 0) when the socket is known.
    Service {
        /// The service's index.
        service: usize,
        /// The socket before rollover.
        socket: SocketPick,
        /// `action = "tunnel"`: the backend the worker's Maglev lookup picks.
        backend: Option<Option<usize>>,
    },
    /// Punted to the kernel through the internal `kernel` service, on this socket, if the RX
    /// lcore's share of the punt budget admits it (`kernel_limited` if not).
    Kernel {
        /// The internal service's index.
        service: usize,
        /// The socket before rollover.
        socket: SocketPick,
    },
    /// A TCP reset, if the `[tcp_reset]` limits let it go (`tcp_reset_suppressed` if not).
    TcpReset,
    /// A Port Unreachable; `limited`: subject to the `[icmp]` limits (`icmp_suppressed` when
    /// they hold it back), else sent whatever the rate (type outside the ratemask, or an exempt
    /// source).
    PortUnreachable {
        /// Whether the limits apply to it.
        limited: bool,
        /// Whether the source is in `[icmp] exempt`.
        exempt: bool,
    },
    /// Dropped unanswered: `no_service` (`[tcp_reset] enabled = false`).
    NoService,
}

/// The decision and what it was made from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explained {
    /// The flow hash the software computes with the tables' key ([`Tables::hasher`]): what a
    /// NIC programmed with the same key computes for the 4-tuple (unless `[rss] symmetric`).
    pub hash: u32,
    /// The DPDK port id whose address the destination is (the first, if several have it).
    pub port: Option<u16>,
    /// What happens.
    pub verdict: FlowVerdict,
}

/// The socket `group`'s fanout mode picks for a flow of `hash`, before rollover.
pub fn socket_pick(group: &Group, hash: u32) -> SocketPick {
    match group.hash_position(hash) {
        Some(pos) => SocketPick::Socket(group.sockets[pos]),
        None if group.mode == FanoutMode::RoundRobin => SocketPick::RoundRobin,
        None => SocketPick::Random,
    }
}

/// What `t` does with a packet `q` arriving at the port that has its destination address.
pub fn explain(t: &Tables, q: &FlowQuery) -> Explained {
    let (src, sport) = q.src;
    let (dst, dport) = q.dst;
    let ports = Some((sport, dport));
    let hash = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => t.hasher.hash_v4(s, d, ports),
        (IpAddr::V6(s), IpAddr::V6(d)) => t.hasher.hash_v6(&s, &d, ports),
        _ => 0,
    };
    let port = t.ports.iter().position(|p| match dst {
        IpAddr::V4(d) => p.has_ipv4(d),
        IpAddr::V6(d) => p.has_ipv6(&d),
    });
    let verdict = match port {
        None => FlowVerdict::NotLocal,
        Some(id) => local(t, id, q, hash),
    };
    Explained {
        hash,
        port: port.map(|p| p as u16),
        verdict,
    }
}

/// [`explain`] for a packet to one of port `id`'s addresses.
fn local(t: &Tables, id: usize, q: &FlowQuery, hash: u32) -> FlowVerdict {
    use crate::outcome::Outcome;
    let addrs = &t.ports[id];
    let (src, dst) = (q.src.0, q.dst.0);
    let refused = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => source::v4_to_local(addrs, d, s, || false),
        (IpAddr::V6(s), IpAddr::V6(d)) => source::v6_to_local(addrs, &d, &s, || false),
        _ => Some(Outcome::Martian),
    };
    match refused {
        Some(Outcome::NotLocal) => return FlowVerdict::NotLocal,
        Some(_) => return FlowVerdict::Martian,
        None => {}
    }
    if let Some(hit) = t.services.lookup(q.protocol, q.dst.1, &dst) {
        let service = hit.svc();
        let svc = &t.services.services()[service];
        let socket = socket_pick(&svc.group, hash);
        let backend = match &svc.action {
            Action::Tunnel(set) => Some(set.pick(hash)),
            _ => None,
        };
        return FlowVerdict::Service {
            service,
            socket,
            backend,
        };
    }
    if addrs.kernel {
        if let Some(k) = &t.kernel {
            let takes = match q.protocol {
                IpProtocol::TCP => k.takes_tcp(q.dst.1, TcpFlags::SYN),
                p => k.rules.takes(p, q.dst.1),
            };
            if takes {
                let service = k.service;
                let socket = socket_pick(&t.services.services()[service].group, hash);
                return FlowVerdict::Kernel { service, socket };
            }
        }
    }
    if q.protocol == IpProtocol::TCP {
        return match t.tcp_reset.enabled {
            true => FlowVerdict::TcpReset,
            false => FlowVerdict::NoService,
        };
    }
    let version = match dst {
        IpAddr::V4(_) => IpVersion::V4,
        IpAddr::V6(_) => IpVersion::V6,
    };
    let Some((ty, code)) = ErrorKind::PortUnreachable.type_code(version) else {
        return FlowVerdict::NoService;
    };
    let limited = match version {
        IpVersion::V4 => icmp_error::v4_type_limited(t.icmp.ratemask, ty, code),
        IpVersion::V6 => icmp_error::v6_type_limited(t.icmp.ratemask, ty),
    };
    let exempt = t.icmp.exempt.contains(&src);
    FlowVerdict::PortUnreachable {
        limited: limited && !exempt,
        exempt,
    }
}

#[cfg(test)]
mod tests;
