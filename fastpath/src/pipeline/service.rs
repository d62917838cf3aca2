//! Local services: which packets go to which service, and what its workers do with them.

use super::fanout::Group;
use crate::buf::PacketBuf;
use crate::wire::{EthernetFrame, IpProtocol, Ipv4Packet, Ipv6Packet, UdpPacket};
use std::net::{IpAddr, Ipv4Addr};

/// What a service's workers do with each packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// A UDP echo server: send the datagram back to its sender (the server of the seeds'
    /// experiments).
    Echo,
    /// Count and free.
    Sink,
    /// Send each packet to a backend through one of these tunnels (indices into
    /// [`super::Tables::tunnels`]), chosen by flow hash.
    Tunnel(Vec<usize>),
}

impl Action {
    /// The config name.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Echo => "echo",
            Action::Sink => "sink",
            Action::Tunnel(_) => "tunnel",
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

impl Service {
    /// Whether it takes packets to `dst` (asked only if it is bound to addresses).
    #[inline(always)]
    fn serves(&self, dst: impl FnOnce() -> IpAddr) -> bool {
        self.addresses.is_empty() || self.addresses.contains(&dst())
    }
}

/// Maps (protocol, destination port) to a service: per protocol, an array indexed by port, so a
/// lookup is one load whether a service listens there or not (a closed-port flood's packets ask
/// it too, and miss). 2 × 128 KiB per generation; a flood touches one line of it. No hashing, no
/// allocation per packet.
#[derive(Clone, Debug)]
pub struct ServiceTable {
    services: Vec<Service>,
    /// Per UDP destination port: 1 + the service's index, 0 for none.
    udp: Box<[u16; 65536]>,
    /// The same for TCP.
    tcp: Box<[u16; 65536]>,
}

fn no_ports() -> Box<[u16; 65536]> {
    vec![0u16; 65536].into_boxed_slice().try_into().expect("65536 entries")
}

impl Default for ServiceTable {
    fn default() -> Self {
        ServiceTable {
            services: Vec::new(),
            udp: no_ports(),
            tcp: no_ports(),
        }
    }
}

impl ServiceTable {
    /// A table over `services`, each listening on its `ports`. The caller has rejected
    /// duplicate (protocol, port) pairs, more than 65535 services, and protocols other than UDP
    /// and TCP.
    pub fn new(services: Vec<(Service, Vec<u16>)>) -> Self {
        let mut t = ServiceTable::default();
        for (i, (svc, ports)) in services.into_iter().enumerate() {
            let by_port = match svc.protocol {
                IpProtocol::UDP => &mut t.udp,
                IpProtocol::TCP => &mut t.tcp,
                _ => {
                    t.services.push(svc);
                    continue;
                }
            };
            for p in ports {
                by_port[p as usize] = u16::try_from(i + 1).unwrap_or(0);
            }
            t.services.push(svc);
        }
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
    pub fn lookup(&self, protocol: IpProtocol, port: u16, dst: &IpAddr) -> Option<usize> {
        let by_port = match protocol {
            IpProtocol::UDP => &self.udp,
            IpProtocol::TCP => &self.tcp,
            _ => return None,
        };
        let svc = (by_port[port as usize] as usize).checked_sub(1)?;
        self.services[svc].serves(|| *dst).then_some(svc)
    }

    /// [`ServiceTable::lookup`] for UDP to an IPv4 address (the pipeline's fast path): the
    /// address is made an `IpAddr`, a value in memory, only for a service bound to addresses.
    #[inline(always)]
    pub fn lookup_udp4(&self, port: u16, dst: Ipv4Addr) -> Option<usize> {
        let svc = (self.udp[port as usize] as usize).checked_sub(1)?;
        self.services[svc].serves(|| IpAddr::V4(dst)).then_some(svc)
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
    // A NIC that verified the UDP checksum saves summing the whole datagram again; any other
    // verdict (bad included: some NICs misjudge a few datagrams) is checked here.
    let nic_good = pkt.l4_checksum() == crate::buf::NicChecksum::Good;
    let data = pkt.data_mut();
    let Ok(frame) = EthernetFrame::new_checked(&data[..]) else {
        return false;
    };
    let (l3, ty) = (frame.header_len(), frame.ethertype());
    let (src_mac, dst_mac) = (frame.src_addr(), frame.dst_addr());
    // Check first, change nothing for a datagram we will not answer. Like the host UDP layer
    // this action stands in for: RFC 1122 §4.1.3.4, a non-zero checksum must verify; RFC 8200
    // §8.1, an IPv6 UDP checksum of zero is invalid.
    let l4 = match ty {
        crate::wire::EtherType::IPV4 => {
            let Ok(ip) = Ipv4Packet::new_checked(&data[l3..]) else {
                return false;
            };
            if ip.protocol() != IpProtocol::UDP || ip.is_fragment() {
                return false;
            }
            let l4 = l3 + ip.header_len();
            let Ok(udp) = UdpPacket::new_checked(&data[l4..]) else {
                return false;
            };
            if udp.checksum() != 0 && !nic_good && !udp.verify_checksum_v4(ip.src_addr(), ip.dst_addr()) {
                return false;
            }
            l4
        }
        crate::wire::EtherType::IPV6 => {
            let Ok(ip) = Ipv6Packet::new_checked(&data[l3..]) else {
                return false;
            };
            // Only a plain IPv6 header followed by UDP: the worker does not walk extensions.
            if ip.next_header() != IpProtocol::UDP {
                return false;
            }
            let l4 = l3 + 40;
            let Ok(udp) = UdpPacket::new_checked(&data[l4..]) else {
                return false;
            };
            if udp.checksum() == 0 || (!nic_good && !udp.verify_checksum_v6(&ip.src_addr(), &ip.dst_addr())) {
                return false;
            }
            l4
        }
        _ => return false,
    };
    match ty {
        crate::wire::EtherType::IPV4 => {
            let Ok(mut ip) = Ipv4Packet::new_checked(&mut data[l3..]) else {
                return false;
            };
            let (s, d) = (ip.src_addr(), ip.dst_addr());
            ip.set_src_addr(d);
            ip.set_dst_addr(s);
            ip.set_ttl_update_checksum(ECHO_TTL);
        }
        _ => {
            let Ok(mut ip) = Ipv6Packet::new_checked(&mut data[l3..]) else {
                return false;
            };
            let (s, d) = (ip.src_addr(), ip.dst_addr());
            ip.set_src_addr(&d);
            ip.set_dst_addr(&s);
            ip.set_hop_limit(ECHO_TTL);
        }
    }
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
            },
            action: Action::Echo,
            cost_ns: 0,
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
        p.tables().sockets[s].queue.sim().unwrap()
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
            },
            action: Action::Sink,
            cost_ns: 0,
        };
        let t = ServiceTable::new(vec![
            (svc("a", IpProtocol::UDP), vec![1, 53, 65535]),
            (svc("b", IpProtocol::TCP), vec![53]),
            (svc("c", IpProtocol::UDP), vec![54]),
        ]);
        let me = IpAddr::V4(ME);
        let found = |proto, port| t.lookup(proto, port, &me);
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
        assert_eq!(
            p.process(0, &mut HeapBuf::new(&tcp), Instant(0)),
            Verdict::Drop(Outcome::NoService)
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
        assert!(echo_in_place(&mut b));
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
        assert!(echo_in_place(&mut b));
        let ip = Ipv6Packet::new_checked(&b.data()[14..]).unwrap();
        assert_eq!((ip.src_addr(), ip.dst_addr(), ip.hop_limit()), (me6, them6, ECHO_TTL));
        let u = UdpPacket::new_checked(&b.data()[54..]).unwrap();
        assert!(u.verify_checksum_v6(&me6, &them6));
        assert_eq!((u.src_port(), u.dst_port()), (7, 40000));

        // A wrong checksum, or an IPv6 checksum of zero: dropped, like a host's UDP would.
        let mut bad = v4_frame(THEM, ME, IpProtocol::UDP, &[], 0, &udp);
        let n = bad.len();
        bad[n - 1] ^= 0x55;
        assert!(!echo_in_place(&mut HeapBuf::new(&bad)));
        let zero6 = v6_frame(them6, me6, IpProtocol::UDP, &[], 64, &udp_bytes(40000, 7, b"hi"));
        assert!(
            !echo_in_place(&mut HeapBuf::new(&zero6)),
            "IPv6 UDP checksum 0 (RFC 8200 §8.1)"
        );
        // Not UDP, or a fragment: nothing to echo.
        let mut icmp = HeapBuf::new(&v4_frame(THEM, ME, IpProtocol::ICMP, &[], 0, &[8, 0, 0, 0, 0, 0, 0, 0]));
        assert!(!echo_in_place(&mut icmp));
        assert!(!echo_in_place(&mut udp4(7, 0x2000)));
        assert!(!echo_in_place(&mut HeapBuf::new(&[1, 2, 3])));
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
            echo_in_place(&mut b)
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
            },
            action: Action::Sink,
            cost_ns: 0,
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
            encapsulate(&mut b, &theirs, 0, None, 1).unwrap();
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
