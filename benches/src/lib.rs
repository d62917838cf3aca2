//! Inputs shared by the micro-benchmarks in `benches/benches/`: the box under test and the frames
//! each benchmark feeds the pipeline. The unit tests below check that every frame takes the path
//! its benchmark claims to measure, so a changed stage cannot silently turn a benchmark of the
//! ARP answer into one of an early drop.
//!
//! The box is the one of `configs/demo.toml` and `configs/captures/gen_*.py`:
//! 02:00:00:00:00:01, 192.0.2.1 and 2001:db8::1 on port 0.

use fastpath::buf::HeapBuf;
use fastpath::pipeline::{Pipeline, PortAddrs};
use fastpath::wire::{ethernet, EtherType, EthernetAddress};
use std::net::Ipv4Addr;

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
    Pipeline::for_ports(vec![PortAddrs {
        mac: ME_MAC,
        ipv4: vec![ME_IP],
        ipv6: vec!["2001:db8::1".parse().expect("valid address")],
    }])
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
    fn udp_frame_is_minimum_size_with_a_valid_ip_checksum() {
        let f = udp4(ME_MAC, 1, 2);
        assert_eq!(f.len(), 60);
        assert_eq!(checksum(&f[14..34]), 0);
        assert_eq!(arp_request(ME_IP, None).len(), 42);
    }
}
