//! Local services: which packets go to which service, and what its workers do with them.

use super::fanout::Group;
use crate::buf::PacketBuf;
use crate::wire::{EthernetAddress, EthernetFrame, IpProtocol, Ipv4Packet, Ipv6Packet, UdpPacket};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What a service's workers do with each packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// A UDP echo server: send the datagram back to its sender (the server of the seeds'
    /// experiments).
    Echo,
    /// Count and free.
    Sink,
    /// Send each packet to a backend through one of these tunnels, chosen by the flow's hash
    /// in their Maglev table.
    Tunnel(Backends),
    /// Into the kernel through the kernel interface of the port each packet came in on
    /// ([`super::kernel`]): a Linux program listening there gets it.
    Kernel,
}

/// A `tunnel` service's backends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backends {
    /// Its tunnels (indices into [`super::Tables::tunnels`]), in the config's order.
    pub tunnels: Vec<usize>,
    /// Which of them takes a flow: `lookup` gives a position in `tunnels`. Built on the
    /// control thread, shared read-only by the workers.
    pub table: std::sync::Arc<super::maglev::Maglev>,
    /// By tunnel index: whether a tracked connection may stay on it (a member of the set and
    /// up; drained or weight 0 still keeps its connections, [`super::conntrack`]).
    pub keeps: Vec<bool>,
}

impl Backends {
    /// `tunnels` (indices), with the names, weights, drain and up flags of each as `backends`.
    pub fn new(tunnels: Vec<usize>, backends: &[super::maglev::Backend]) -> Backends {
        let mut keeps = vec![false; tunnels.iter().max().map_or(0, |&m| m + 1)];
        for (k, &ti) in tunnels.iter().enumerate() {
            keeps[ti] = backends.get(k).is_none_or(|b| b.up);
        }
        Backends {
            tunnels,
            table: std::sync::Arc::new(super::maglev::Maglev::build(backends)),
            keeps,
        }
    }

    /// Whether a connection tracked on tunnel `ti` stays there.
    #[inline]
    pub fn keeps(&self, ti: usize) -> bool {
        self.keeps.get(ti).copied().unwrap_or(false)
    }

    /// The tunnel (an index into [`super::Tables::tunnels`]) for a flow's hash; `None` when
    /// every tunnel is drained or of weight 0.
    #[inline]
    pub fn pick(&self, hash: u32) -> Option<usize> {
        self.table.lookup(hash).map(|k| self.tunnels[k])
    }
}

impl Action {
    /// The config name.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Echo => "echo",
            Action::Sink => "sink",
            Action::Tunnel(_) => "tunnel",
            Action::Kernel => "kernel",
        }
    }
}

/// One configured service.
#[derive(Clone, Debug)]
pub struct Service {
    /// Its name (the `service` label).
    pub name: String,
    /// UDP or TCP.
    pub protocol: IpProtocol,
    /// Local addresses it listens on; empty means every local address.
    pub addresses: Vec<IpAddr>,
    /// Its sockets and how packets pick one.
    pub group: Group,
    /// What its workers do.
    pub action: Action,
    /// Simulated processing cost per packet in the worker, in nanoseconds (0: none). For
    /// tests and benchmarks that need a consumer slower than the line.
    pub cost_ns: u32,
    /// `echo` only: answer source ports 1 to 1023 too (see [`EchoPolicy`]).
    pub echo_allow_low_ports: bool,
}

impl Service {
    /// Whether it takes packets to `dst` (asked only if it is bound to addresses).
    #[inline(always)]
    fn serves(&self, dst: impl FnOnce() -> IpAddr) -> bool {
        self.addresses.is_empty() || self.addresses.contains(&dst())
    }
}

/// Maps (protocol, destination port) to a service: per protocol, an array indexed by port (at
/// [`slot`]: the port's header bytes as they lie), so a lookup is one load whether a service
/// listens there or not (a closed-port flood's packets ask it too, and miss). 2 × 256 KiB per
/// generation; a flood touches one line of it. No hashing, no allocation per packet.
#[derive(Clone, Debug)]
pub struct ServiceTable {
    services: Vec<Service>,
    /// Per service, its [`Hit`] (for the kernel path, which knows its service, not a port).
    hits: Vec<Hit>,
    /// Per UDP destination port, at [`slot`]: the [`Hit`] of the service there, 0 for none.
    udp: Box<[u32; 65536]>,
    /// The same for TCP.
    tcp: Box<[u32; 65536]>,
    /// Ports that more services than the first (in the port arrays) listen on, each bound to
    /// its own addresses (an IPv4 and an IPv6 service address on one port, with different
    /// backends): (protocol, slot, [`Hit`]), sorted. Read only when the first service there
    /// does not serve the destination, so a port with one service pays nothing for it.
    shared: Vec<(u8, u32, u32)>,
}

/// A port-table entry: everything the per-packet path reads of a service, in the word the lookup
/// loads. With many services a packet meets its service cold, and the `Service` (a 120-byte entry)
/// and its group's socket list (a heap block of its own) were two misses, one waiting for the
/// other, before the fanout could even look at the socket (benches/NOTES.md, "Many sockets");
/// a per-service word beside the port table took that to one
/// more load, and this to none.
///
/// Bits 16..32: 1 + the service's index (at most 65535 services); bit 15 ([`BOUND`]): the
/// service is bound to addresses (it has `addresses` to compare); bits 0..15: 1 + the global
/// index of its one socket, 0 with several (or none, or an index past 32766: the fanout's
/// general path decides for those).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit(u32);

/// [`Hit`]'s bit for a service bound to addresses.
const BOUND: u32 = 1 << 15;

impl Hit {
    /// The hit of service `i` (its index), or `None` past what an entry can name.
    fn of(i: usize, svc: &Service) -> Option<Hit> {
        let id = u32::try_from(i + 1).ok().filter(|&id| id <= 0xffff)?;
        let single = match svc.group.sockets.as_slice() {
            &[s] => u32::try_from(s + 1).ok().filter(|&s| s < BOUND).unwrap_or(0),
            _ => 0,
        };
        Some(Hit(id << 16
            | single
            | if svc.addresses.is_empty() { 0 } else { BOUND }))
    }

    /// The service's index.
    #[inline(always)]
    pub fn svc(self) -> usize {
        (self.0 >> 16) as usize - 1
    }

    /// The global index of the service's socket if it has exactly one (the fanout's fast path,
    /// [`crate::pipeline::fanout::FanoutState::choose_fast_single`]): no read of the group's
    /// list.
    #[inline(always)]
    pub fn single(self) -> Option<usize> {
        ((self.0 & (BOUND - 1)) as usize).checked_sub(1)
    }
}

/// Where port `port`'s entry is in the per-port arrays: at the number its two bytes make as they
/// lie on the wire (network order) read in the host's order, so that the fast paths index with
/// the bytes of the header as loaded, without a byte swap per lookup (benches/NOTES.md, "Per-port
/// arrays indexed by the port's wire bytes"). A permutation of the ports: one entry each.
#[inline(always)]
fn slot(port: u16) -> usize {
    wire_slot(port.to_be_bytes())
}

/// [`slot`] of the port whose header bytes are `wire`.
#[inline(always)]
fn wire_slot(wire: [u8; 2]) -> usize {
    u16::from_ne_bytes(wire) as usize
}

fn no_ports() -> Box<[u32; 65536]> {
    vec![0u32; 65536].into_boxed_slice().try_into().expect("65536 entries")
}

impl Default for ServiceTable {
    fn default() -> Self {
        ServiceTable {
            services: Vec::new(),
            hits: Vec::new(),
            udp: no_ports(),
            tcp: no_ports(),
            shared: Vec::new(),
        }
    }
}

impl ServiceTable {
    /// A table over `services`, each listening on its `ports`. The caller has rejected
    /// (protocol, port) pairs that two services share unless both are bound to addresses and
    /// none to the same one, more than 65535 services, and protocols other than UDP and TCP.
    pub fn new(services: Vec<(Service, Vec<u16>)>) -> Self {
        let mut t = ServiceTable::default();
        for (i, (svc, ports)) in services.into_iter().enumerate() {
            let hit = Hit::of(i, &svc).map_or(0, |h| h.0);
            t.hits.push(Hit(hit));
            let by_port = match svc.protocol {
                IpProtocol::UDP => &mut t.udp,
                IpProtocol::TCP => &mut t.tcp,
                _ => {
                    t.services.push(svc);
                    continue;
                }
            };
            for p in ports {
                let e = &mut by_port[slot(p)];
                if *e == 0 {
                    *e = hit;
                } else if hit != 0 {
                    t.shared.push((svc.protocol.0, slot(p) as u32, hit));
                }
            }
            t.services.push(svc);
        }
        t.shared.sort_unstable();
        t
    }

    /// The services, in config order.
    pub fn services(&self) -> &[Service] {
        &self.services
    }

    /// Whether no service is configured.
    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
    }

    /// The service for a packet of `protocol` to `dst`:`port`, if any. Inline: for a closed
    /// port this is the whole service step.
    #[inline(always)]
    pub fn lookup(&self, protocol: IpProtocol, port: u16, dst: &IpAddr) -> Option<Hit> {
        let by_port = match protocol {
            IpProtocol::UDP => &self.udp,
            IpProtocol::TCP => &self.tcp,
            _ => return None,
        };
        self.hit(protocol, slot(port), by_port[slot(port)], || *dst)
    }

    /// The service of port-table entry `entry` (a [`Hit`], 0 for none; the entry of `protocol`
    /// at `slot`) if it takes packets to `dst`: the entry says so for a service on every
    /// address, without a read of the service.
    #[inline(always)]
    fn hit(&self, protocol: IpProtocol, slot: usize, entry: u32, dst: impl FnOnce() -> IpAddr) -> Option<Hit> {
        if entry == 0 {
            return None;
        }
        let hit = Hit(entry);
        if entry & BOUND == 0 {
            return Some(hit);
        }
        let dst = dst();
        if self.services[hit.svc()].serves(|| dst) {
            return Some(hit);
        }
        if self.shared.is_empty() {
            return None;
        }
        self.shared_hit(protocol, slot, dst)
    }

    /// The other services on a shared port ([`ServiceTable::shared`]): the one bound to `dst`.
    #[cold]
    fn shared_hit(&self, protocol: IpProtocol, slot: usize, dst: IpAddr) -> Option<Hit> {
        let key = (protocol.0, slot as u32);
        let from = self.shared.partition_point(|&(p, s, _)| (p, s) < key);
        self.shared[from..]
            .iter()
            .take_while(|&&(p, s, _)| (p, s) == key)
            .map(|&(_, _, h)| Hit(h))
            .find(|h| self.services[h.svc()].serves(|| dst))
    }

    /// The [`Hit`] of service `svc`, as its ports' entries hold it (the kernel path's service).
    #[inline]
    pub fn hit_of(&self, svc: usize) -> Option<Hit> {
        self.hits.get(svc).copied().filter(|h| h.0 != 0)
    }

    /// The global index of service `svc`'s socket if it has exactly one ([`Hit::single`]).
    #[inline]
    pub fn single_socket(&self, svc: usize) -> Option<usize> {
        self.hit_of(svc)?.single()
    }

    /// Whether service `svc` takes packets to `dst` (tests: [`ServiceTable::hit`]'s decision).
    #[cfg(test)]
    fn serves(&self, svc: usize, dst: impl FnOnce() -> IpAddr) -> bool {
        self.hit_of(svc)
            .is_some_and(|h| h.0 & BOUND == 0 || self.services[h.svc()].serves(dst))
    }

    /// [`ServiceTable::lookup`] for UDP to an IPv4 address (the pipeline's fast path), the port
    /// as its header bytes: the address is made an `IpAddr`, a value in memory, only for a
    /// service bound to addresses.
    #[inline(always)]
    pub fn lookup_udp4(&self, port: [u8; 2], dst: Ipv4Addr) -> Option<Hit> {
        self.hit(IpProtocol::UDP, wire_slot(port), self.udp[wire_slot(port)], || {
            IpAddr::V4(dst)
        })
    }

    /// [`ServiceTable::lookup`] for UDP to an IPv6 address (the IPv6 fast path).
    #[inline(always)]
    pub fn lookup_udp6(&self, port: [u8; 2], dst: &Ipv6Addr) -> Option<Hit> {
        self.hit(IpProtocol::UDP, wire_slot(port), self.udp[wire_slot(port)], || {
            IpAddr::V6(*dst)
        })
    }

    /// [`ServiceTable::lookup`] for TCP to an IPv4 address (the TCP fast path).
    #[inline(always)]
    pub fn lookup_tcp4(&self, port: [u8; 2], dst: Ipv4Addr) -> Option<Hit> {
        self.hit(IpProtocol::TCP, wire_slot(port), self.tcp[wire_slot(port)], || {
            IpAddr::V4(dst)
        })
    }

    /// [`ServiceTable::lookup`] for TCP to an IPv6 address (the TCP fast path).
    #[inline(always)]
    pub fn lookup_tcp6(&self, port: [u8; 2], dst: &Ipv6Addr) -> Option<Hit> {
        self.hit(IpProtocol::TCP, wire_slot(port), self.tcp[wire_slot(port)], || {
            IpAddr::V6(*dst)
        })
    }

    /// Whether a UDP service with the `echo` action listens on `port` (on any address).
    #[inline]
    pub fn is_udp_echo_port(&self, port: u16) -> bool {
        let e = self.udp[slot(port)];
        let echo = |h: u32| self.services[Hit(h).svc()].action == Action::Echo;
        (e != 0 && echo(e))
            || self
                .shared
                .iter()
                .any(|&(p, s, h)| p == IpProtocol::UDP.0 && s as usize == slot(port) && echo(h))
    }
}

/// Hop limit / TTL of the datagrams the echo action sends.
pub const ECHO_TTL: u8 = 64;

/// Source ports the echo action never answers, whatever `echo_allow_low_ports` says: 0 (RFC
/// 768: "no port", nobody to answer) and the services that answer anything sent to them —
/// echo (7, RFC 862), daytime (13, RFC 867), QOTD (17, RFC 865), chargen (19, RFC 864), time
/// (37, RFC 868). Answering them is how one spoofed datagram starts a loop between two servers
/// that never ends (CVE-2024-2169).
pub const ECHO_REFUSED_PORTS: [u16; 6] = [0, 7, 13, 17, 19, 37];

/// How the echo action answers on one port.
#[derive(Clone, Copy, Debug)]
pub struct EchoPolicy<'a> {
    /// The port's MAC: every answer comes from it (never from the group address a request may
    /// have been sent to).
    pub mac: EthernetAddress,
    /// The port's MTU: an answer larger than it is ours to fragment, so its DF bit is cleared.
    pub mtu: u16,
    /// Answer source ports 1 to 1023 (but never [`ECHO_REFUSED_PORTS`]); default false: a
    /// privileged port is a server's, not a client's, and servers answering servers loop.
    pub allow_low_ports: bool,
    /// The services of the generation: a datagram from a port one of our own echo services
    /// listens on is never answered (two instances of this config, or two echo services of
    /// one, answering each other loop forever whatever the port number).
    pub services: Option<&'a ServiceTable>,
}

impl EchoPolicy<'_> {
    /// Whether a datagram from source port `sport` is answered.
    #[inline]
    pub fn answers(&self, sport: u16) -> bool {
        echo_answers_port(sport, self.allow_low_ports) && !self.services.is_some_and(|t| t.is_udp_echo_port(sport))
    }
}

/// What the echo action made of a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Echo {
    /// Turned into its answer, to be sent.
    Answer,
    /// Not a complete, unfragmented UDP datagram with a right checksum: unchanged.
    Invalid,
    /// From a source port the policy never answers: unchanged.
    Refused,
}

/// Whether the echo action answers a datagram from source port `sport`.
#[inline]
pub fn echo_answers_port(sport: u16, allow_low_ports: bool) -> bool {
    !ECHO_REFUSED_PORTS.contains(&sport) && (allow_low_ports || sport >= 1024)
}

/// Turns a received UDP datagram into its echo, in place: IP addresses and UDP ports swapped,
/// Ethernet back to the sender from the port's own MAC, TTL/hop limit reset. IPv4 options are
/// not copied (RFC 1122 §3.2.1.8 would have a source route reversed and a record route filled
/// in; the pipeline already dropped source-routed datagrams): the datagram moves up behind a
/// 20-byte header. Bytes past the UDP length (RFC 768: not part of the datagram) are not sent
/// back. Swapping leaves the UDP checksum valid (the one's-complement sum does not depend on
/// the order of its terms); the IPv4 header checksum is recomputed when the header changed
/// beyond the TTL, else updated incrementally (RFC 1624). See [`Echo`] for what is not answered.
pub fn echo_in_place<B: PacketBuf>(pkt: &mut B, policy: &EchoPolicy) -> Echo {
    // A NIC that verified the UDP checksum saves summing the whole datagram again; any other
    // verdict (bad included: some NICs misjudge a few datagrams) is checked here.
    let nic_good = pkt.l4_checksum() == crate::buf::NicChecksum::Good;
    let data = pkt.data_mut();
    let Ok(frame) = EthernetFrame::new_checked(&data[..]) else {
        return Echo::Invalid;
    };
    let (l3, ty) = (frame.header_len(), frame.ethertype());
    let src_mac = frame.src_addr();
    // Check first, change nothing for a datagram we will not answer. Like the host UDP layer
    // this action stands in for: RFC 1122 §4.1.3.4, a non-zero checksum must verify; RFC 8200
    // §8.1, an IPv6 UDP checksum of zero is invalid.
    let (l4, udp_len, sport) = match ty {
        crate::wire::EtherType::IPV4 => {
            let Ok(ip) = Ipv4Packet::new_checked(&data[l3..]) else {
                return Echo::Invalid;
            };
            if ip.protocol() != IpProtocol::UDP || ip.is_fragment() {
                return Echo::Invalid;
            }
            let l4 = l3 + ip.header_len();
            let Ok(udp) = UdpPacket::new_checked(&data[l4..l3 + ip.total_len()]) else {
                return Echo::Invalid;
            };
            if udp.checksum() != 0 && !nic_good && !udp.verify_checksum_v4(ip.src_addr(), ip.dst_addr()) {
                return Echo::Invalid;
            }
            (l4, udp.len(), udp.src_port())
        }
        crate::wire::EtherType::IPV6 => {
            let Ok(ip) = Ipv6Packet::new_checked(&data[l3..]) else {
                return Echo::Invalid;
            };
            // Only a plain IPv6 header followed by UDP: the worker does not walk extensions.
            if ip.next_header() != IpProtocol::UDP {
                return Echo::Invalid;
            }
            let l4 = l3 + 40;
            let Ok(udp) = UdpPacket::new_checked(&data[l4..l3 + ip.total_len()]) else {
                return Echo::Invalid;
            };
            if udp.checksum() == 0 || (!nic_good && !udp.verify_checksum_v6(&ip.src_addr(), &ip.dst_addr())) {
                return Echo::Invalid;
            }
            (l4, udp.len(), udp.src_port())
        }
        _ => return Echo::Invalid,
    };
    if !policy.answers(sport) {
        return Echo::Refused;
    }
    let new_l4 = match ty {
        crate::wire::EtherType::IPV4 => {
            // Options dropped: the UDP datagram moves up behind a 20-byte header.
            let new_l4 = l3 + 20;
            if l4 != new_l4 {
                data.copy_within(l4..l4 + udp_len, new_l4);
            }
            let Ok(mut ip) = Ipv4Packet::new_checked(&mut data[l3..]) else {
                return Echo::Invalid;
            };
            let (s, d) = (ip.src_addr(), ip.dst_addr());
            ip.set_src_addr(d);
            ip.set_dst_addr(s);
            let total = 20 + udp_len;
            let df = ip.dont_frag() && total <= policy.mtu as usize;
            if l4 != new_l4 || ip.total_len() != total || df != ip.dont_frag() {
                ip.set_header_len(20);
                ip.set_total_len(total as u16);
                ip.set_dont_frag(df);
                ip.set_ttl(ECHO_TTL);
                ip.fill_checksum();
            } else {
                ip.set_ttl_update_checksum(ECHO_TTL);
            }
            new_l4
        }
        _ => {
            let Ok(mut ip) = Ipv6Packet::new_checked(&mut data[l3..]) else {
                return Echo::Invalid;
            };
            let (s, d) = (ip.src_addr(), ip.dst_addr());
            ip.set_src_addr(&d);
            ip.set_dst_addr(&s);
            ip.set_hop_limit(ECHO_TTL);
            ip.set_payload_len(udp_len as u16);
            l4
        }
    };
    let Ok(mut udp) = UdpPacket::new_checked(&mut data[new_l4..new_l4 + udp_len]) else {
        return Echo::Invalid;
    };
    let (sp, dp) = (udp.src_port(), udp.dst_port());
    udp.set_src_port(dp);
    udp.set_dst_port(sp);
    data[0..6].copy_from_slice(&src_mac.0);
    data[6..12].copy_from_slice(&policy.mac.0);
    let _shorter = pkt.set_len(new_l4 + udp_len);
    Echo::Answer
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::HeapBuf;
    use crate::outcome::Outcome;
    use crate::pipeline::fanout::FanoutMode;
    use crate::pipeline::parse::tests::{udp_bytes, v4_frame, v6_frame};
    use crate::pipeline::tests::port;
    use crate::pipeline::{Instant, Pipeline, Tables, Verdict};
    use crate::socket::{SimQueue, Socket, SocketCounters};
    use crate::wire::Toeplitz;
    use std::net::{Ipv4Addr, Ipv6Addr};
    use std::sync::Arc;

    /// The echo action with the default policy, answered or not.
    fn echo(b: &mut HeapBuf) -> bool {
        echo_in_place(b, &policy(false)) == Echo::Answer
    }

    fn policy(allow_low_ports: bool) -> EchoPolicy<'static> {
        EchoPolicy {
            mac: crate::pipeline::tests::MAC,
            mtu: 1500,
            allow_low_ports,
            services: None,
        }
    }

    fn with_checksum4(mut v: Vec<u8>) -> Vec<u8> {
        let l4 = 14 + (v[14] & 0xf) as usize * 4;
        UdpPacket::new_checked(&mut v[l4..]).unwrap().fill_checksum_v4(THEM, ME);
        v
    }

    /// The port-table entries agree with the services they summarise: the one socket only for
    /// a group of one, every address only for a service bound to none, for every protocol.
    #[test]
    fn the_entries_say_what_each_service_says() {
        let svc = |protocol, sockets: Vec<usize>, addresses: Vec<IpAddr>| Service {
            name: "s".into(),
            protocol,
            addresses,
            group: crate::pipeline::Group {
                sockets,
                mode: FanoutMode::Hash,
                rollover: false,
                huge_flows: false,
                flow_limit: true,
            },
            action: Action::Sink,
            cost_ns: 0,
            echo_allow_low_ports: false,
        };
        let bound = vec![IpAddr::V4(ME)];
        let t = ServiceTable::new(vec![
            (svc(IpProtocol::UDP, vec![5], vec![]), vec![1]),
            (svc(IpProtocol::UDP, vec![6, 7], vec![]), vec![2]),
            (svc(IpProtocol::TCP, vec![], bound.clone()), vec![3]),
            (svc(IpProtocol::ICMP, vec![9], bound.clone()), vec![]),
            (svc(IpProtocol::TCP, vec![8], bound), vec![4]),
        ]);
        assert_eq!(
            (0..5).map(|i| t.hit_of(i).and_then(Hit::single)).collect::<Vec<_>>(),
            [Some(5), None, None, Some(9), Some(8)]
        );
        assert_eq!(
            (0..5).map(|i| t.hit_of(i).map(Hit::svc)).collect::<Vec<_>>(),
            (0..5).map(Some).collect::<Vec<_>>()
        );
        // Past the services: none.
        for svc in [5, 65534, 65535, usize::MAX] {
            assert_eq!(t.hit_of(svc), None, "service {svc}");
        }
        // Past what an entry can name: no service past 65535, no single socket past 32766 (the
        // fanout's general path decides).
        let one = |s| svc(IpProtocol::UDP, vec![s], vec![]);
        assert_eq!(Hit::of(65534, &one(0)).map(Hit::svc), Some(65534));
        assert_eq!(Hit::of(65535, &one(0)), None);
        assert_eq!(Hit::of(0, &one(32766)).and_then(Hit::single), Some(32766));
        assert_eq!(Hit::of(0, &one(32767)).and_then(Hit::single), None);
        assert_eq!(Hit::of(0, &one(usize::MAX - 1)).and_then(Hit::single), None);
        let other = IpAddr::V4(THEM);
        for i in 0..5 {
            let s = &t.services()[i];
            for dst in [IpAddr::V4(ME), other] {
                assert_eq!(t.serves(i, || dst), s.serves(|| dst), "service {i}, {dst}");
            }
        }
        assert_eq!(
            t.lookup_udp4(1u16.to_be_bytes(), THEM).map(Hit::svc),
            Some(0),
            "any address"
        );
        assert_eq!(t.lookup_tcp4(4u16.to_be_bytes(), ME).map(Hit::svc), Some(4));
        assert_eq!(
            t.lookup_tcp4(4u16.to_be_bytes(), THEM),
            None,
            "bound to another address"
        );
        // The bytes as on the wire: port 1 is [0, 1]; [1, 0] is port 256, which nobody has.
        assert_eq!(t.lookup_udp4([1, 0], THEM), None);
        assert_eq!(t.lookup_udp6([0, 2], &Ipv6Addr::LOCALHOST).map(Hit::svc), Some(1));
        // The fast paths' lookups are the general one for every port, both protocols.
        let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        for port in 0..=u16::MAX {
            let w = port.to_be_bytes();
            for dst in [ME, THEM] {
                assert_eq!(t.lookup_udp4(w, dst), t.lookup(IpProtocol::UDP, port, &IpAddr::V4(dst)));
                assert_eq!(t.lookup_tcp4(w, dst), t.lookup(IpProtocol::TCP, port, &IpAddr::V4(dst)));
            }
            assert_eq!(
                t.lookup_udp6(w, &Ipv6Addr::LOCALHOST),
                t.lookup(IpProtocol::UDP, port, &v6)
            );
            assert_eq!(
                t.lookup_tcp6(w, &Ipv6Addr::LOCALHOST),
                t.lookup(IpProtocol::TCP, port, &v6)
            );
            // To us: UDP 1, 2 and TCP 3, 4; to another address only the UDP ones (TCP's are bound).
            let ours = [
                (IpProtocol::UDP, 1),
                (IpProtocol::UDP, 2),
                (IpProtocol::TCP, 3),
                (IpProtocol::TCP, 4),
            ];
            for proto in [IpProtocol::UDP, IpProtocol::TCP] {
                let want = ours.contains(&(proto, port));
                assert_eq!(
                    t.lookup(proto, port, &IpAddr::V4(ME)).is_some(),
                    want,
                    "{proto:?} {port}"
                );
                let udp = want && proto == IpProtocol::UDP;
                assert_eq!(
                    t.lookup(proto, port, &IpAddr::V4(THEM)).is_some(),
                    udp,
                    "{proto:?} {port}"
                );
            }
        }
    }

    /// CVE-2024-2169: never the echo/chargen/daytime/QOTD/time ports or port 0, and no port
    /// below 1024 unless the service allows it.
    #[test]
    fn services_bound_to_their_own_addresses_share_a_port() {
        let svc = |protocol, addresses: Vec<IpAddr>, action| Service {
            name: "s".into(),
            protocol,
            addresses,
            group: crate::pipeline::Group {
                sockets: vec![0],
                mode: FanoutMode::Hash,
                rollover: false,
                huge_flows: false,
                flow_limit: true,
            },
            action,
            cost_ns: 0,
            echo_allow_low_ports: false,
        };
        let v6: IpAddr = "2001:db8::10".parse().unwrap();
        let v6b: IpAddr = "2001:db8::11".parse().unwrap();
        let t = ServiceTable::new(vec![
            (svc(IpProtocol::TCP, vec![IpAddr::V4(ME)], Action::Sink), vec![443, 80]),
            (svc(IpProtocol::TCP, vec![v6], Action::Sink), vec![443]),
            (svc(IpProtocol::TCP, vec![v6b], Action::Sink), vec![443]),
            (svc(IpProtocol::UDP, vec![v6], Action::Echo), vec![443]),
            (svc(IpProtocol::UDP, vec![IpAddr::V4(ME)], Action::Sink), vec![443]),
        ]);
        let tcp = |port: u16, dst: IpAddr| t.lookup(IpProtocol::TCP, port, &dst).map(Hit::svc);
        assert_eq!(tcp(443, IpAddr::V4(ME)), Some(0));
        assert_eq!(tcp(443, v6), Some(1));
        assert_eq!(tcp(443, v6b), Some(2));
        assert_eq!(tcp(443, IpAddr::V4(THEM)), None, "nobody's address");
        assert_eq!(tcp(80, v6), None, "only the first listens on 80");
        if let IpAddr::V6(a) = v6b {
            assert_eq!(
                t.lookup_tcp6(443u16.to_be_bytes(), &a).map(Hit::svc),
                Some(2),
                "the fast path too"
            );
        }
        assert_eq!(t.lookup_udp4(443u16.to_be_bytes(), ME).map(Hit::svc), Some(4));
        if let IpAddr::V6(a) = v6 {
            assert_eq!(t.lookup_udp6(443u16.to_be_bytes(), &a).map(Hit::svc), Some(3));
        }
        assert!(
            t.is_udp_echo_port(443),
            "an echo service on the port, on one of its addresses"
        );
        assert!(!t.is_udp_echo_port(80));
    }

    #[test]
    fn echo_refuses_reflection_ports() {
        for (sport, low_ok, want) in [
            (40000, false, Echo::Answer),
            (1024, false, Echo::Answer),
            (1023, false, Echo::Refused),
            (1023, true, Echo::Answer),
            (53, true, Echo::Answer),
            (0, true, Echo::Refused),
            (7, true, Echo::Refused),
            (13, true, Echo::Refused),
            (17, true, Echo::Refused),
            (19, true, Echo::Refused),
            (37, true, Echo::Refused),
            (7, false, Echo::Refused),
        ] {
            let v = with_checksum4(v4_frame(THEM, ME, IpProtocol::UDP, &[], 0, &udp_bytes(sport, 7, b"x")));
            let mut b = HeapBuf::new(&v);
            assert_eq!(
                echo_in_place(&mut b, &policy(low_ok)),
                want,
                "port {sport}, low ports {low_ok}"
            );
            if want == Echo::Refused {
                assert_eq!(b.data(), &v[..], "unchanged");
            }
        }
    }

    /// Two instances of one config (or two echo services of one box) must not answer each
    /// other: a datagram from a port one of our echo services listens on is refused, whatever
    /// its number; a port of a sink service, or of a TCP service, is answered.
    #[test]
    fn echo_refuses_the_ports_of_our_own_echo_services() {
        let svc = |name: &str, protocol, action| Service {
            name: name.into(),
            protocol,
            addresses: vec![],
            group: Group {
                sockets: vec![0],
                mode: FanoutMode::Hash,
                rollover: false,
                huge_flows: false,
                flow_limit: true,
            },
            action,
            cost_ns: 0,
            echo_allow_low_ports: false,
        };
        let t = ServiceTable::new(vec![
            (svc("echo", IpProtocol::UDP, Action::Echo), vec![5000, 6000]),
            (svc("sink", IpProtocol::UDP, Action::Sink), vec![7000]),
            (svc("tcp-echo", IpProtocol::TCP, Action::Echo), vec![8000]),
        ]);
        let p = EchoPolicy {
            services: Some(&t),
            ..policy(false)
        };
        for (sport, want) in [
            (5000, Echo::Refused),
            (6000, Echo::Refused),
            (7000, Echo::Answer),
            (8000, Echo::Answer),
            (40000, Echo::Answer),
        ] {
            let v = with_checksum4(v4_frame(
                THEM,
                ME,
                IpProtocol::UDP,
                &[],
                0,
                &udp_bytes(sport, 5000, b"x"),
            ));
            let mut b = HeapBuf::new(&v);
            assert_eq!(echo_in_place(&mut b, &p), want, "from port {sport}");
        }
    }

    /// The answer comes from the port's MAC, even to a request sent to a group address; bytes
    /// past the UDP length are not echoed (RFC 768); IPv4 options are not copied (RFC 1122
    /// §3.2.1.8); an answer above the MTU loses DF (ours to fragment).
    #[test]
    fn echo_answers_from_our_mac_without_options_or_trailing_bytes() {
        let mut v = v4_frame(
            THEM,
            ME,
            IpProtocol::UDP,
            &[7, 7, 4, 0, 0, 0, 0, 0],
            0x4000,
            &udp_bytes(40000, 7, b"hello"),
        );
        v = with_checksum4(v);
        v[..6].copy_from_slice(&[0xff; 6]);
        // Three bytes inside the IP datagram but past the UDP length.
        v.extend_from_slice(b"xyz");
        let total = (v.len() - 14) as u16;
        v[16..18].copy_from_slice(&total.to_be_bytes());
        v[24..26].copy_from_slice(&[0, 0]);
        let c = crate::wire::checksum::checksum(&v[14..14 + 28]);
        v[24..26].copy_from_slice(&c.to_be_bytes());
        let mut b = HeapBuf::new(&v);
        assert_eq!(echo_in_place(&mut b, &policy(false)), Echo::Answer);
        let d = b.data();
        assert_eq!(&d[6..12], &crate::pipeline::tests::MAC.0, "from the port's MAC");
        assert_eq!(&d[0..6], &v[6..12], "to the sender");
        let ip = Ipv4Packet::new_checked(&d[14..]).unwrap();
        assert_eq!(ip.header_len(), 20, "options not copied");
        assert_eq!(ip.total_len(), 20 + 8 + 5, "bytes past the UDP length not echoed");
        assert_eq!(d.len(), 14 + 20 + 13);
        assert!(ip.verify_checksum());
        assert!(ip.dont_frag(), "fits the MTU: DF kept");
        let u = UdpPacket::new_checked(ip.payload()).unwrap();
        assert_eq!((u.src_port(), u.dst_port(), u.payload()), (7, 40000, &b"hello"[..]));
        assert!(u.verify_checksum_v4(ME, THEM));

        let big = with_checksum4(v4_frame(
            THEM,
            ME,
            IpProtocol::UDP,
            &[],
            0x4000,
            &udp_bytes(40000, 7, &[1; 1600]),
        ));
        let mut b = HeapBuf::new(&big);
        assert_eq!(echo_in_place(&mut b, &policy(false)), Echo::Answer);
        let ip = Ipv4Packet::new_checked(&b.data()[14..]).unwrap();
        assert!(!ip.dont_frag(), "above the MTU: DF cleared, the worker fragments it");
        assert!(ip.verify_checksum());
    }

    const ME: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    const THEM: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);

    fn pipeline(addresses: Vec<IpAddr>, rollover: bool) -> Pipeline {
        let sockets: Vec<Arc<Socket>> = (0..2)
            .map(|i| {
                Arc::new(Socket::new(
                    "svc",
                    i,
                    SimQueue::new(4),
                    0,
                    Arc::new(SocketCounters::new(1, 1)),
                ))
            })
            .collect();
        let svc = Service {
            name: "svc".into(),
            protocol: IpProtocol::UDP,
            addresses,
            group: Group {
                sockets: vec![0, 1],
                mode: FanoutMode::Hash,
                rollover,
                huge_flows: true,
                flow_limit: true,
            },
            action: Action::Echo,
            cost_ns: 0,
            echo_allow_low_ports: false,
        };
        let tables = Tables {
            generation: 1,
            ports: vec![port()],
            hasher: Toeplitz::default(),
            services: ServiceTable::new(vec![(svc, vec![7, 5353])]),
            sockets,
            flow_limit: Default::default(),
            ..Default::default()
        };
        Pipeline::new(Arc::new(tables), 0)
    }

    fn udp4(dport: u16, frag: u16) -> HeapBuf {
        HeapBuf::new(&v4_frame(
            THEM,
            ME,
            IpProtocol::UDP,
            &[],
            frag,
            &udp_bytes(4000, dport, b"abc"),
        ))
    }

    fn sim(p: &Pipeline, s: usize) -> &SimQueue {
        p.tables().sockets[s].queue(0).sim().unwrap()
    }

    #[test]
    fn the_port_table_maps_every_port_of_each_protocol_on_its_own() {
        let svc = |name: &str, protocol| Service {
            name: name.into(),
            protocol,
            addresses: vec![],
            group: Group {
                sockets: vec![0],
                mode: FanoutMode::Hash,
                rollover: false,
                huge_flows: false,
                flow_limit: true,
            },
            action: Action::Sink,
            cost_ns: 0,
            echo_allow_low_ports: false,
        };
        let t = ServiceTable::new(vec![
            (svc("a", IpProtocol::UDP), vec![1, 53, 65535]),
            (svc("b", IpProtocol::TCP), vec![53]),
            (svc("c", IpProtocol::UDP), vec![54]),
        ]);
        let me = IpAddr::V4(ME);
        let found = |proto, port| t.lookup(proto, port, &me).map(Hit::svc);
        assert_eq!(
            [1, 53, 65535, 54].map(|p| found(IpProtocol::UDP, p)),
            [Some(0), Some(0), Some(0), Some(2)]
        );
        assert_eq!(found(IpProtocol::TCP, 53), Some(1));
        for (proto, port) in [
            (IpProtocol::UDP, 0),
            (IpProtocol::UDP, 2),
            (IpProtocol::TCP, 54),
            (IpProtocol::TCP, 65535),
        ] {
            assert_eq!(found(proto, port), None, "{proto:?} {port}");
        }
        assert_eq!(found(IpProtocol::ICMP, 53), None, "only UDP and TCP have ports");
        assert_eq!(ServiceTable::default().lookup(IpProtocol::UDP, 53, &me), None);
    }

    #[test]
    fn lookup_by_protocol_port_and_address() {
        let mut p = pipeline(vec![], false);
        assert_eq!(p.process(0, &mut udp4(7, 0), Instant(0)), Verdict::Deliver);
        let s = p.delivered_to();
        assert!(s < 2);
        assert_eq!(p.staged().collect::<Vec<_>>(), vec![(s, 1)]);
        p.burst_done();
        assert!(matches!(p.process(0, &mut udp4(5353, 0), Instant(0)), Verdict::Deliver));
        // A closed UDP port is answered with ICMP Port Unreachable (rate limited).
        assert_eq!(
            p.process(0, &mut udp4(8, 0), Instant(0)),
            Verdict::Transmit(Outcome::IcmpError)
        );
        let tcp = v4_frame(
            THEM,
            ME,
            IpProtocol::TCP,
            &[],
            0,
            &[0, 1, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 2, 0, 0, 0, 0, 0, 0],
        );
        // A closed TCP port: no socket; a reset would answer it, but this segment carries no
        // checksum, so it is dropped (`tcp_reset`'s tests cover the reset).
        assert_eq!(
            p.process(0, &mut HeapBuf::new(&tcp), Instant(0)),
            Verdict::Drop(Outcome::TcpBadChecksum)
        );
        // A fragment is not a datagram yet: reassembly comes first.
        assert_eq!(
            p.process(0, &mut udp4(7, 0x2000), Instant(0)),
            Verdict::Reassemble { l3: 14 }
        );

        let mut only_other = pipeline(vec![IpAddr::V4(Ipv4Addr::new(192, 0, 2, 5))], false);
        assert_eq!(
            only_other.process(0, &mut udp4(7, 0), Instant(0)),
            Verdict::Transmit(Outcome::IcmpError)
        );
        let mut only_me = pipeline(vec![IpAddr::V4(ME)], false);
        assert!(matches!(
            only_me.process(0, &mut udp4(7, 0), Instant(0)),
            Verdict::Deliver
        ));
    }

    #[test]
    fn a_full_socket_drops_and_counts() {
        let mut p = pipeline(vec![], false);
        assert_eq!(p.process(0, &mut udp4(7, 0), Instant(0)), Verdict::Deliver);
        let s = p.delivered_to();
        p.burst_done();
        sim(&p, s).set_len(4);
        assert_eq!(
            p.process(0, &mut udp4(7, 0), Instant(0)),
            Verdict::Drop(Outcome::SocketFull)
        );
        assert_eq!(p.tables().sockets[s].counters.rx[0].full.get(), 1);
        // With rollover the same packet goes to the other socket.
        let mut p = pipeline(vec![], true);
        assert_eq!(p.process(0, &mut udp4(7, 0), Instant(0)), Verdict::Deliver);
        let s = p.delivered_to();
        p.burst_done();
        sim(&p, s).set_len(4);
        assert_eq!(p.process(0, &mut udp4(7, 0), Instant(0)), Verdict::Deliver);
        assert_eq!(p.delivered_to(), 1 - s);
        assert_eq!(p.tables().sockets[s].counters.rx[0].rollover.get(), 1);
    }

    #[test]
    fn echo_swaps_and_keeps_checksums_valid() {
        let mut udp = udp_bytes(40000, 7, b"hello");
        let mut v = v4_frame(THEM, ME, IpProtocol::UDP, &[], 0, &udp);
        {
            let l4 = v.len() - udp.len();
            let mut u = UdpPacket::new_checked(&mut v[l4..]).unwrap();
            u.fill_checksum_v4(THEM, ME);
            udp = v[l4..].to_vec();
        }
        let mut b = HeapBuf::new(&v);
        assert!(echo(&mut b));
        let d = b.data();
        assert_eq!(&d[0..6], &v[6..12], "back to the sender's MAC");
        let ip = Ipv4Packet::new_checked(&d[14..]).unwrap();
        assert_eq!((ip.src_addr(), ip.dst_addr(), ip.ttl()), (ME, THEM, ECHO_TTL));
        assert!(ip.verify_checksum());
        let u = UdpPacket::new_checked(ip.payload()).unwrap();
        assert_eq!((u.src_port(), u.dst_port(), u.payload()), (7, 40000, &b"hello"[..]));
        assert!(u.verify_checksum_v4(ME, THEM));
        assert_ne!(u.checksum(), 0);
        let _ = udp;

        let (me6, them6): (Ipv6Addr, Ipv6Addr) = ("2001:db8::1".parse().unwrap(), "2001:db8::7".parse().unwrap());
        let mut v = v6_frame(them6, me6, IpProtocol::UDP, &[], 64, &udp_bytes(40000, 7, b"hi"));
        {
            let mut u = UdpPacket::new_checked(&mut v[54..]).unwrap();
            u.fill_checksum_v6(&them6, &me6);
        }
        let mut b = HeapBuf::new(&v);
        assert!(echo(&mut b));
        let ip = Ipv6Packet::new_checked(&b.data()[14..]).unwrap();
        assert_eq!((ip.src_addr(), ip.dst_addr(), ip.hop_limit()), (me6, them6, ECHO_TTL));
        let u = UdpPacket::new_checked(&b.data()[54..]).unwrap();
        assert!(u.verify_checksum_v6(&me6, &them6));
        assert_eq!((u.src_port(), u.dst_port()), (7, 40000));

        // A wrong checksum, or an IPv6 checksum of zero: dropped, like a host's UDP would.
        let mut bad = v4_frame(THEM, ME, IpProtocol::UDP, &[], 0, &udp);
        let n = bad.len();
        bad[n - 1] ^= 0x55;
        assert!(!echo(&mut HeapBuf::new(&bad)));
        let zero6 = v6_frame(them6, me6, IpProtocol::UDP, &[], 64, &udp_bytes(40000, 7, b"hi"));
        assert!(!echo(&mut HeapBuf::new(&zero6)), "IPv6 UDP checksum 0 (RFC 8200 §8.1)");
        // Not UDP, or a fragment: nothing to echo.
        let mut icmp = HeapBuf::new(&v4_frame(THEM, ME, IpProtocol::ICMP, &[], 0, &[8, 0, 0, 0, 0, 0, 0, 0]));
        assert!(!echo(&mut icmp));
        assert!(!echo(&mut udp4(7, 0x2000)));
        assert!(!echo(&mut HeapBuf::new(&[1, 2, 3])));
    }

    /// A NIC that verified the UDP checksum (RX offload) spares the worker the sum; any other
    /// verdict is checked in software, and an IPv6 zero checksum is refused whatever the NIC says.
    #[test]
    fn echo_takes_the_nics_good_udp_checksum_and_rechecks_anything_else() {
        use crate::buf::NicChecksum;
        let mut v = v4_frame(THEM, ME, IpProtocol::UDP, &[], 0, &udp_bytes(40000, 7, b"hello"));
        let l4 = v.len() - 8 - 5;
        UdpPacket::new_checked(&mut v[l4..]).unwrap().fill_checksum_v4(THEM, ME);
        let mut wrong = v.clone();
        let n = wrong.len();
        wrong[n - 1] ^= 0x55;
        let with = |bytes: &[u8], c| {
            let mut b = HeapBuf::new(bytes);
            b.set_l4_checksum(c);
            echo(&mut b)
        };
        // Trusted: a wrong sum the NIC called good is not summed again (so the verdict is used).
        assert!(with(&wrong, NicChecksum::Good));
        for c in [NicChecksum::Unknown, NicChecksum::Bad] {
            assert!(!with(&wrong, c), "{c:?}: checked in software");
            assert!(with(&v, c), "{c:?}: a right sum is echoed whatever the NIC said");
        }
        let (me6, them6): (Ipv6Addr, Ipv6Addr) = ("2001:db8::1".parse().unwrap(), "2001:db8::7".parse().unwrap());
        let zero6 = v6_frame(them6, me6, IpProtocol::UDP, &[], 64, &udp_bytes(40000, 7, b"hi"));
        assert!(!with(&zero6, NicChecksum::Good), "IPv6 UDP checksum 0 (RFC 8200 §8.1)");
        let mut wrong6 = zero6.clone();
        UdpPacket::new_checked(&mut wrong6[54..])
            .unwrap()
            .fill_checksum_v6(&them6, &me6);
        let n = wrong6.len();
        wrong6[n - 1] ^= 0x55;
        assert!(with(&wrong6, NicChecksum::Good));
        assert!(!with(&wrong6, NicChecksum::Bad));
    }
}

#[cfg(test)]
mod tunnelled {
    use super::*;
    use crate::buf::HeapBuf;
    use crate::pipeline::fanout::FanoutMode;
    use crate::pipeline::parse::tests::{udp_bytes, v4_frame, MAC, PEER};
    use crate::pipeline::tests::port;
    use crate::pipeline::tunnel::{encapsulate, Tunnel, TunnelCounters, TunnelOut};
    use crate::pipeline::{Instant, Pipeline, Tables, Verdict};
    use crate::socket::{SimQueue, Socket, SocketCounters};
    use crate::wire::{EthernetAddress, Toeplitz};
    use std::net::Ipv4Addr;
    use std::sync::Arc;

    fn gre(local: &str, remote: &str, src_mac: EthernetAddress, dst_mac: EthernetAddress) -> Tunnel {
        Tunnel {
            name: "t1".into(),
            local: local.parse().unwrap(),
            remote: remote.parse().unwrap(),
            key: None,
            sequence: false,
            checksum: false,
            ttl: 64,
            out: TunnelOut::Port {
                port: 0,
                src_mac,
                dst_mac,
                mtu: 1500,
            },
            depth: 1,
            owner: 0,
            counters: Arc::new(TunnelCounters::new(1, 1)),
            handoff: None,
            max_seq_jump: crate::pipeline::tunnel::DEFAULT_MAX_SEQ_JUMP,
        }
    }

    /// A NIC hash describes the outer (GRE) packet: every flow inside a tunnel has the same one.
    /// Fanout must hash the inner flow instead, or one tunnel's flows would all land on one
    /// socket.
    #[test]
    fn decapsulated_flows_are_spread_by_their_own_hash() {
        let sockets: Vec<Arc<Socket>> = (0..2)
            .map(|i| {
                let q = SimQueue::new(1 << 20);
                Arc::new(Socket::new("svc", i, q, 0, Arc::new(SocketCounters::new(1, 1))))
            })
            .collect();
        let svc = Service {
            name: "svc".into(),
            protocol: IpProtocol::UDP,
            addresses: vec![],
            group: Group {
                sockets: vec![0, 1],
                mode: FanoutMode::Hash,
                rollover: false,
                huge_flows: false,
                flow_limit: true,
            },
            action: Action::Sink,
            cost_ns: 0,
            echo_allow_low_ports: false,
        };
        let hasher = Toeplitz::default();
        let mut p = Pipeline::new(
            Arc::new(Tables {
                generation: 1,
                ports: vec![port()],
                hasher: hasher.clone(),
                services: ServiceTable::new(vec![(svc, vec![7])]),
                sockets,
                tunnels: vec![gre("192.0.2.1", "198.51.100.2", MAC, PEER)],
                ..Default::default()
            }),
            0,
        );
        let theirs = vec![gre("198.51.100.2", "192.0.2.1", PEER, MAC)];
        let (src, dst) = (Ipv4Addr::new(203, 0, 113, 9), Ipv4Addr::new(192, 0, 2, 1));
        let mut per_socket = [0; 2];
        for sport in 1000..1064u16 {
            let mut b = HeapBuf::with_room(
                &v4_frame(src, dst, IpProtocol::UDP, &[], 0, &udp_bytes(sport, 7, b"x")),
                256,
                256,
            );
            encapsulate(&mut b, &theirs, 0, None, &mut crate::ident::Idents::from_os()).unwrap();
            b.set_rss_hash(Some(0x8000_0000)); // what a NIC would give every packet of the tunnel
                                               // And its checksum verdicts, about the outer packet: the worker must not take them
                                               // for the inner datagram's.
            b.set_ip_checksum(crate::buf::NicChecksum::Good);
            b.set_l4_checksum(crate::buf::NicChecksum::Good);
            assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Deliver);
            let s = p.delivered_to() as u32;
            assert_eq!(b.rss_hash(), None);
            assert_eq!(b.l4_checksum(), crate::buf::NicChecksum::Unknown);
            assert_eq!(b.ip_checksum(), crate::buf::NicChecksum::Unknown);
            let want = ((hasher.hash_v4(src, dst, Some((sport, 7))) as u64 * 2) >> 32) as u32;
            assert_eq!(s, want, "source port {sport}");
            per_socket[s as usize] += 1;
            p.burst_done();
        }
        assert!(per_socket.iter().all(|&n| n > 10), "{per_socket:?}");
    }
}

/// What the `[rss]` key is for: a `tunnel` service's backend is its Maglev table's pick for the
/// flow hash, as a worker takes it (`Parsed::parse` of the packet, then [`Backends::pick`]).
#[cfg(test)]
mod backend_key {
    use super::*;
    use crate::pipeline::maglev::Backend;
    use crate::pipeline::parse::tests::{udp_bytes, v4_frame};
    use crate::pipeline::Parsed;
    use crate::wire::toeplitz::{RssKey, LONG_KEY_LEN};
    use crate::wire::Toeplitz;

    const VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 10);

    /// Flows aimed offline at one backend through the public key spread over the backends once
    /// the key is secret.
    ///
    /// 50 UDP flows (random sources and source ports) that all reach backend 0 of 3 under the
    /// Microsoft key; then a random 52-byte key, as `head -c 52 /dev/urandom` makes one. Under it
    /// each flow reaches backend 0 with probability its share of the table, 21846 of 65537 slots
    /// at most (~1/3), so 40 or more of the 50 (80%) there has probability 1.7e-11 (the
    /// binomial tail: 1 - P(X <= 39) for X ~ B(50, 21846/65537)), while the public key sends all
    /// 50 there every time.
    #[test]
    fn flows_aimed_at_one_backend_under_the_public_key_spread_under_a_secret_one() {
        let backends: Vec<Backend> = ["a", "b", "c"]
            .iter()
            .map(|n| Backend {
                name: n.to_string(),
                weight: 1,
                drain: false,
                up: true,
            })
            .collect();
        let set = Backends::new(vec![0, 1, 2], &backends);
        let pick = |t: &Toeplitz, (src, sport): (Ipv4Addr, u16)| {
            let frame = v4_frame(src, VIP, IpProtocol::UDP, &[], 0, &udp_bytes(sport, 9000, b"x"));
            set.pick(Parsed::parse(&frame, t, None).unwrap().hash)
        };
        // What an attacker computes offline: the tables' hasher without an `[rss]` key.
        let public = Toeplitz::default();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let aimed: Vec<(Ipv4Addr, u16)> = std::iter::repeat_with(|| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (
                Ipv4Addr::from(0x0a00_0000 | ((x >> 32) as u32 & 0x00ff_ffff)),
                x as u16 | 1024,
            )
        })
        .filter(|&f| pick(&public, f) == Some(0))
        .take(50)
        .collect();
        assert!(aimed.iter().all(|&f| pick(&public, f) == Some(0)));
        let mut key = [0u8; LONG_KEY_LEN];
        getrandom::fill(&mut key).unwrap();
        let secret = Toeplitz::new(RssKey::new(&key).unwrap().hash_key(), false);
        let mut per_backend = [0; 3];
        for &f in &aimed {
            per_backend[pick(&secret, f).unwrap()] += 1;
        }
        assert!(per_backend[0] < 40, "{per_backend:?} of 50 under a secret key");
    }
}
