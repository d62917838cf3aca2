//! Local services: which packets go to which service, and what its workers do with them.

use super::fanout::Group;
use crate::buf::PacketBuf;
use crate::wire::{EthernetFrame, IpProtocol, Ipv4Packet, Ipv6Packet, UdpPacket};
use std::net::IpAddr;

/// What a service's workers do with each packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// A UDP echo server: send the datagram back to its sender (the server of the seeds'
    /// experiments).
    Echo,
    /// Count and free.
    Sink,
}

impl Action {
    /// The config name.
    pub fn name(self) -> &'static str {
        match self {
            Action::Echo => "echo",
            Action::Sink => "sink",
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
}

/// Maps (protocol, destination port) to a service. Sorted, searched by bisection: no hashing,
/// no allocation per packet.
#[derive(Clone, Debug, Default)]
pub struct ServiceTable {
    services: Vec<Service>,
    /// (protocol number, port, service index), sorted.
    index: Vec<(u8, u16, u16)>,
}

impl ServiceTable {
    /// A table over `services`, each listening on its `ports`. The caller has rejected
    /// duplicate (protocol, port) pairs.
    pub fn new(services: Vec<(Service, Vec<u16>)>) -> Self {
        let mut index = Vec::new();
        let mut list = Vec::new();
        for (i, (svc, ports)) in services.into_iter().enumerate() {
            for p in ports {
                index.push((u8::from(svc.protocol), p, i as u16));
            }
            list.push(svc);
        }
        index.sort_unstable();
        ServiceTable { services: list, index }
    }

    /// The services, in config order.
    pub fn services(&self) -> &[Service] {
        &self.services
    }

    /// Whether no service is configured.
    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
    }

    /// The service for a packet of `protocol` to `dst`:`port`, if any.
    #[inline]
    pub fn lookup(&self, protocol: IpProtocol, port: u16, dst: IpAddr) -> Option<usize> {
        let key = (u8::from(protocol), port);
        let at = self.index.binary_search_by(|e| (e.0, e.1).cmp(&key)).ok()?;
        let svc = self.index[at].2 as usize;
        let s = &self.services[svc];
        if s.addresses.is_empty() || s.addresses.contains(&dst) {
            Some(svc)
        } else {
            None
        }
    }
}

/// Hop limit / TTL of the datagrams the echo action sends.
pub const ECHO_TTL: u8 = 64;

/// Turns a received UDP datagram into its echo, in place: Ethernet, IP addresses and UDP ports
/// swapped, TTL/hop limit reset. Swapping leaves the IPv4 header and UDP checksums valid (the
/// one's-complement sum does not depend on the order of its terms); the TTL change is applied
/// incrementally (RFC 1624). Returns `false` (packet unchanged or not to be sent) if it is not
/// a complete, unfragmented UDP datagram.
pub fn echo_in_place<B: PacketBuf>(pkt: &mut B) -> bool {
    let data = pkt.data_mut();
    let Ok(frame) = EthernetFrame::new_checked(&data[..]) else {
        return false;
    };
    let (l3, ty) = (frame.header_len(), frame.ethertype());
    let (src_mac, dst_mac) = (frame.src_addr(), frame.dst_addr());
    let l4 = match ty {
        crate::wire::EtherType::Ipv4 => {
            let Ok(mut ip) = Ipv4Packet::new_checked(&mut data[l3..]) else {
                return false;
            };
            if ip.protocol() != IpProtocol::Udp || ip.is_fragment() {
                return false;
            }
            let (s, d) = (ip.src_addr(), ip.dst_addr());
            ip.set_src_addr(d);
            ip.set_dst_addr(s);
            ip.set_ttl_update_checksum(ECHO_TTL);
            l3 + ip.header_len()
        }
        crate::wire::EtherType::Ipv6 => {
            let Ok(mut ip) = Ipv6Packet::new_checked(&mut data[l3..]) else {
                return false;
            };
            // Only a plain IPv6 header followed by UDP: the worker does not walk extensions.
            if ip.next_header() != IpProtocol::Udp {
                return false;
            }
            let (s, d) = (ip.src_addr(), ip.dst_addr());
            ip.set_src_addr(&d);
            ip.set_dst_addr(&s);
            ip.set_hop_limit(ECHO_TTL);
            l3 + 40
        }
        _ => return false,
    };
    let Ok(mut udp) = UdpPacket::new_checked(&mut data[l4..]) else {
        return false;
    };
    let (sp, dp) = (udp.src_port(), udp.dst_port());
    udp.set_src_port(dp);
    udp.set_dst_port(sp);
    data[0..6].copy_from_slice(&src_mac.0);
    data[6..12].copy_from_slice(&dst_mac.0);
    true
}
