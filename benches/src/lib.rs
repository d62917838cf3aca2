//! Inputs shared by the micro-benchmarks in `benches/benches/`: the box under test and the frames
//! each benchmark feeds the pipeline. The unit tests below check that every frame takes the path
//! its benchmark claims to measure, so a changed stage cannot silently turn a benchmark of the
//! ARP answer into one of an early drop.
//!
//! The box is the one of `configs/demo.toml` and `configs/captures/gen_*.py`:
//! 02:00:00:00:00:01, 192.0.2.1 and 2001:db8::1 on port 0.

#![forbid(unsafe_code)]

use fastpath::buf::HeapBuf;
use fastpath::pipeline::tunnel::{Tunnel, TunnelCounters, TunnelOut};
use fastpath::pipeline::{FanoutMode, Group, Pipeline, PortAddrs};
use fastpath::socket::{SimQueue, Socket, SocketCounters};
use fastpath::wire::{ethernet, EtherType, EthernetAddress};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// The box's MAC address.
pub const ME_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
/// The box's IPv4 address.
pub const ME_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
/// A peer on the link.
pub const PEER_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 2, 7]);
/// The peer's IPv4 address.
pub const PEER_IP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);

/// A pipeline for the box on port 0.
pub fn pipeline() -> Pipeline {
    Pipeline::for_ports(vec![PortAddrs::new(ME_MAC, vec![ME_IP], vec![ME_IP6], false)])
}

fn ethernet(dst: EthernetAddress, src: EthernetAddress, ty: u16, vlan: Option<u16>) -> Vec<u8> {
    let mut v = vec![0u8; ethernet::HEADER_LEN];
    match vlan {
        None => ethernet::emit_header(&mut v, dst, src, EtherType::from(ty)),
        Some(id) => {
            ethernet::emit_header(&mut v, dst, src, EtherType::from(0x8100));
            v.extend_from_slice(&id.to_be_bytes());
            v.extend_from_slice(&ty.to_be_bytes());
        }
    }
    v
}

/// An ARP request from the peer for `target`, broadcast (28-byte ARP body, 42-byte frame, or 46
/// with a VLAN tag).
pub fn arp_request(target: Ipv4Addr, vlan: Option<u16>) -> Vec<u8> {
    let mut v = ethernet(EthernetAddress::BROADCAST, PEER_MAC, 0x0806, vlan);
    v.extend_from_slice(&[0, 1, 0x08, 0x00, 6, 4, 0, 1]); // Ethernet/IPv4, request
    v.extend_from_slice(&PEER_MAC.0);
    v.extend_from_slice(&PEER_IP.octets());
    v.extend_from_slice(&[0; 6]);
    v.extend_from_slice(&target.octets());
    v
}

/// RFC 1071 Internet checksum of `b`.
fn checksum(b: &[u8]) -> u16 {
    let mut sum = 0u32;
    for c in b.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A minimum-size UDP/IPv4 frame (60 bytes, 64 on the wire) from the peer to `dst_mac`/`ME_IP`
/// port `dport`, like those of `configs/captures/bench_udp.pcap`.
pub fn udp4(dst_mac: EthernetAddress, sport: u16, dport: u16) -> Vec<u8> {
    const PAYLOAD: usize = 18;
    let mut v = ethernet(dst_mac, PEER_MAC, 0x0800, None);
    let total = (20 + 8 + PAYLOAD) as u16;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&PEER_IP.octets());
    ip[16..20].copy_from_slice(&ME_IP.octets());
    let c = checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    v.extend_from_slice(&ip);
    v.extend_from_slice(&sport.to_be_bytes());
    v.extend_from_slice(&dport.to_be_bytes());
    v.extend_from_slice(&((8 + PAYLOAD) as u16).to_be_bytes());
    v.extend_from_slice(&[0, 0]); // no UDP checksum (allowed over IPv4)
    v.extend_from_slice(&[0xab; PAYLOAD]);
    v
}

/// The box's IPv6 address.
pub const ME_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);

/// An IP frame from the peer to the box: IPv4 or IPv6, UDP (17) or TCP (6, a SYN), optionally
/// VLAN-tagged, `payload` bytes after the transport header, the peer's address varied by
/// `host` so a mix has many flows. Checksums: the IPv4 header's is right, transport ones are
/// zero (the parser does not verify them; UDP over IPv4 allows zero).
pub fn ip_frame(v6: bool, proto: u8, vlan: Option<u16>, host: u8, sport: u16, dport: u16, payload: usize) -> Vec<u8> {
    let l4_len = if proto == 6 { 20 } else { 8 } + payload;
    let mut v = ethernet(ME_MAC, PEER_MAC, if v6 { 0x86dd } else { 0x0800 }, vlan);
    if v6 {
        let mut ip = [0u8; 40];
        ip[0] = 0x60;
        ip[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
        ip[6] = proto;
        ip[7] = 64;
        let src = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, host as u16 + 7);
        ip[8..24].copy_from_slice(&src.octets());
        ip[24..40].copy_from_slice(&ME_IP6.octets());
        v.extend_from_slice(&ip);
    } else {
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&((20 + l4_len) as u16).to_be_bytes());
        ip[8] = 64;
        ip[9] = proto;
        ip[12..16].copy_from_slice(&Ipv4Addr::new(198, 51, 100, host).octets());
        ip[16..20].copy_from_slice(&ME_IP.octets());
        let c = checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        v.extend_from_slice(&ip);
    }
    v.extend_from_slice(&sport.to_be_bytes());
    v.extend_from_slice(&dport.to_be_bytes());
    if proto == 6 {
        v.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
    // seq 1, SYN
    } else {
        v.extend_from_slice(&(l4_len as u16).to_be_bytes());
        v.extend_from_slice(&[0, 0]);
    }
    v.extend(std::iter::repeat_n(0xab, payload));
    if proto == 17 {
        // A real sender's checksum: mandatory over IPv6, and a closed port answers only
        // datagrams whose checksum is right (RFC 1122 §4.1.3.4).
        let l4 = v.len() - l4_len;
        let mut u = fastpath::wire::UdpPacket::new_checked(&mut v[l4..]).expect("a whole UDP header");
        if v6 {
            u.fill_checksum_v6(
                &Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, host as u16 + 7),
                &ME_IP6,
            );
        } else {
            u.fill_checksum_v4(Ipv4Addr::new(198, 51, 100, host), ME_IP);
        }
    }
    v
}

/// The parse + hash mix: 64 frames, about what a busy UDP/TCP server sees. Half IPv4 UDP, a
/// quarter IPv4 TCP, an eighth IPv6 UDP, an eighth IPv6 TCP; one in eight VLAN-tagged; 64
/// different flows.
pub fn parse_mix() -> Vec<Vec<u8>> {
    (0..64u8)
        .map(|i| {
            let (v6, proto) = match i % 8 {
                0..=3 => (false, 17),
                4 | 5 => (false, 6),
                6 => (true, 17),
                _ => (true, 6),
            };
            let vlan = (i % 8 == 3 || i % 16 == 7).then_some(100);
            ip_frame(
                v6,
                proto,
                vlan,
                i,
                40000 + i as u16 * 7,
                if proto == 6 { 443 } else { 53 },
                18,
            )
        })
        .collect()
}

/// A service's sockets over [`SimQueue`]s of `capacity`, one RX and one worker counter slot
/// each, and the group that fans out to them (by hash).
pub fn sim_group(n: usize, capacity: usize, rollover: bool, huge_flows: bool) -> (Group, Vec<Arc<Socket>>) {
    let sockets = (0..n)
        .map(|i| {
            Arc::new(Socket::new(
                "bench",
                i,
                SimQueue::new(capacity),
                0,
                Arc::new(SocketCounters::new(1, 1)),
            ))
        })
        .collect();
    let group = Group {
        sockets: (0..n).collect(),
        mode: FanoutMode::Hash,
        rollover,
        huge_flows,
        flow_limit: true,
    };
    (group, sockets)
}

/// The simulated queue behind a socket made by [`sim_group`].
pub fn sim_queue(s: &Socket) -> &SimQueue {
    s.queue(0).sim().expect("a SimQueue socket")
}

/// A flow hash that Hash fanout maps to position `pos` of `n` sockets.
pub fn hash_for(pos: usize, n: usize) -> u32 {
    ((pos as u64 * (1u64 << 32) + (1u64 << 31)) / n as u64) as u32
}

/// A GRE tunnel from the box to 203.0.113.10 out of port 1, plain or with key, sequence
/// numbers and checksum.
pub fn tunnel(all_options: bool) -> Tunnel {
    Tunnel {
        name: if all_options { "full" } else { "plain" }.to_string(),
        local: IpAddr::V4(ME_IP),
        remote: IpAddr::V4(Ipv4Addr::new(203, 0, 113, 10)),
        key: all_options.then_some(42),
        sequence: all_options,
        checksum: all_options,
        ttl: 64,
        out: TunnelOut::Port {
            port: 1,
            src_mac: ME_MAC,
            dst_mac: PEER_MAC,
            mtu: 1500,
        },
        depth: 1,
        owner: 0,
        counters: Arc::new(TunnelCounters::new(1, 1)),
        handoff: None,
        max_seq_jump: fastpath::pipeline::tunnel::DEFAULT_MAX_SEQ_JUMP,
    }
}

/// A heap buffer holding `frame` with mbuf-like head- and tailroom.
pub fn buf(frame: &[u8]) -> HeapBuf {
    HeapBuf::new(frame)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fastpath::outcome::Outcome;
    use fastpath::pipeline::{Instant, Verdict};

    #[test]
    fn each_benchmark_frame_takes_the_path_it_is_named_after() {
        let mut p = pipeline();
        let cases = [
            (arp_request(ME_IP, None), Verdict::Transmit(Outcome::ArpReply)),
            (arp_request(ME_IP, Some(100)), Verdict::Transmit(Outcome::ArpReply)),
            (
                arp_request(Ipv4Addr::new(192, 0, 2, 99), None),
                Verdict::Drop(Outcome::ArpIgnored),
            ),
            (
                udp4(EthernetAddress([2, 0, 0, 0, 9, 9]), 40000, 9),
                Verdict::Drop(Outcome::NotForUs),
            ),
            (udp4(ME_MAC, 40000, 9), Verdict::Transmit(Outcome::IcmpError)),
        ];
        for (frame, want) in cases {
            let mut b = buf(&frame);
            assert_eq!(p.process(0, &mut b, Instant(0)), want, "{frame:02x?}");
        }
    }

    #[test]
    fn the_parse_mix_parses_to_what_it_says() {
        use fastpath::pipeline::{IpVersion, Parsed};
        use fastpath::wire::{IpProtocol, Toeplitz};
        let h = Toeplitz::default();
        let mix = parse_mix();
        let parsed: Vec<Parsed> = mix
            .iter()
            .map(|f| Parsed::parse(f, &h, None).expect("parses"))
            .collect();
        let count = |f: &dyn Fn(&Parsed) -> bool| parsed.iter().filter(|p| f(p)).count();
        assert_eq!(count(&|p| p.version == IpVersion::V6), 16);
        assert_eq!(count(&|p| p.protocol == IpProtocol::TCP), 24);
        assert_eq!(count(&|p| p.vlan_tags == 1), 12);
        assert!(parsed.iter().all(|p| p.ports.is_some() && p.fragment.is_none()));
        let mut hashes: Vec<u32> = parsed.iter().map(|p| p.hash).collect();
        hashes.sort_unstable();
        hashes.dedup();
        assert_eq!(hashes.len(), 64, "64 flows");
        // Every frame is a common one: `parse/fixed_offset_parse_mix` times the fixed-offset
        // parse alone, and it agrees with the general one.
        for (f, general) in mix.iter().zip(&parsed) {
            let mut p = Parsed::EMPTY;
            assert!(Parsed::parse_common_into(
                f,
                &mut p,
                fastpath::buf::NicChecksum::Unknown
            ));
            assert_eq!(p, Parsed { hash: 0, ..*general });
        }
        // Every frame of the mix reaches a local service lookup: closed ports here (the TCP
        // frames carry no checksum, so the reset that would answer them is not sent).
        let mut p = pipeline();
        for f in &mix {
            let v = p.process(0, &mut buf(f), Instant(0)).outcome();
            assert!(
                matches!(
                    v,
                    Outcome::IcmpError
                        | Outcome::IcmpSuppressed
                        | Outcome::TcpBadChecksum
                        | Outcome::TcpResetSuppressed
                ),
                "{v:?}"
            );
        }
    }

    #[test]
    fn udp_frame_is_minimum_size_with_a_valid_ip_checksum() {
        let f = udp4(ME_MAC, 1, 2);
        assert_eq!(f.len(), 60);
        assert_eq!(checksum(&f[14..34]), 0);
        assert_eq!(arp_request(ME_IP, None).len(), 42);
    }
}
