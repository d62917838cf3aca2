//! Answering ICMP (RFC 792) and ICMPv6 (RFC 4443 §4) echo requests for local addresses, in
//! place: the payload is echoed unchanged, addresses swapped, checksums right.

use super::parse::Parsed;
use super::tables::PortAddrs;
use super::verdict::Verdict;
use crate::buf::PacketBuf;
use crate::outcome::Outcome;
use crate::wire::{ipv4, ipv6};
use crate::wire::{
    EthernetAddress, Icmpv4Message, Icmpv4Packet, Icmpv6Message, Icmpv6Packet, IpProtocol, Ipv4Packet, Ipv4Repr,
    Ipv6Repr,
};
use std::net::{IpAddr, Ipv6Addr};

/// TTL / hop limit of the answers (RFC 1700's default, as Linux uses).
const HOP_LIMIT: u8 = 64;

/// Answers an ICMP echo request to a local IPv4 address.
#[inline(never)] // kept out of the pipeline's common path (see `local_delivery`)
pub(super) fn answer_v4<B: PacketBuf>(local: &PortAddrs, p: &Parsed, pkt: &mut B) -> Verdict {
    let (IpAddr::V4(src), IpAddr::V4(dst)) = (p.src, p.dst) else {
        return Verdict::Drop(Outcome::Unhandled);
    };
    let (l3, l4, end) = (p.l3_offset as usize, p.l4_offset as usize, p.ip_end as usize);
    let (dscp_ecn, ident, dont_frag) = {
        let b = pkt.data();
        let Ok(icmp) = Icmpv4Packet::new_checked(&b[l4..end]) else {
            return Verdict::Drop(Outcome::Malformed);
        };
        if icmp.msg_type() != Icmpv4Message::EchoRequest {
            return Verdict::Drop(Outcome::Unhandled);
        }
        if !icmp.verify_checksum() {
            return Verdict::Drop(Outcome::Malformed);
        }
        // (The source was validated before any stage: `pipeline/source.rs`.)
        let Ok(ip) = Ipv4Packet::new_checked(&b[l3..end]) else {
            return Verdict::Drop(Outcome::Malformed);
        };
        (ip.dscp() << 2 | ip.ecn(), ip.ident(), ip.dont_frag())
    };
    let msg_len = end - l4;
    let b = pkt.data_mut();
    // IP options are not echoed: a source route would have to be reversed and record-route
    // filled in (RFC 1122 §3.2.2.6); the reply goes without them, its message moved up.
    let new_l4 = l3 + ipv4::MIN_HEADER_LEN;
    if l4 != new_l4 {
        b.copy_within(l4..end, new_l4);
    }
    let Ok(mut icmp) = Icmpv4Packet::new_checked(&mut b[new_l4..new_l4 + msg_len]) else {
        return Verdict::Drop(Outcome::Malformed);
    };
    // Type 8 -> 0, code 0: a 16-bit word change, so RFC 1624 updates the checksum without
    // reading the payload again.
    icmp.set_type_code_update_checksum(Icmpv4Message::EchoReply, 0);
    Ipv4Repr {
        src: dst,
        dst: src,
        protocol: IpProtocol::ICMP,
        payload_len: msg_len as u16,
        ttl: HOP_LIMIT,
        dscp_ecn,
        ident,
        dont_frag,
    }
    .emit(&mut b[l3..]);
    swap_ethernet(b, local.mac());
    let _shorter = pkt.set_len(new_l4 + msg_len);
    Verdict::Transmit(Outcome::EchoReply)
}

/// Answers an ICMPv6 echo request to `me` (a local address, or a group we listen to).
pub(super) fn answer_v6<B: PacketBuf>(local: &PortAddrs, me: Ipv6Addr, p: &Parsed, pkt: &mut B) -> Verdict {
    let (IpAddr::V6(src), IpAddr::V6(dst)) = (p.src, p.dst) else {
        return Verdict::Drop(Outcome::Unhandled);
    };
    let (l3, l4, end) = (p.l3_offset as usize, p.l4_offset as usize, p.ip_end as usize);
    {
        let Ok(icmp) = Icmpv6Packet::new_checked(&pkt.data()[l4..end]) else {
            return Verdict::Drop(Outcome::Malformed);
        };
        if !icmp.verify_checksum(&src, &dst) {
            return Verdict::Drop(Outcome::Malformed);
        }
    }
    // RFC 4291 §2.7 (multicast is never a source) and RFC 4443 §4.2: the source was validated
    // before any stage (`pipeline/source.rs`: only a solicitation may come from `::`).
    // RFC 4443 §4.2: "If the Echo Request message was sent to an IPv6 multicast or anycast
    // address, the source address of the reply MUST be a unicast address belonging to the
    // interface on which the Echo Request message was received." `me` is that address.
    let msg_len = end - l4;
    let b = pkt.data_mut();
    // Extension headers are not echoed; the message moves up behind a fresh fixed header.
    let new_l4 = l3 + ipv6::HEADER_LEN;
    if l4 != new_l4 {
        b.copy_within(l4..end, new_l4);
    }
    Ipv6Repr {
        src: me,
        dst: src,
        next_header: IpProtocol::ICMPV6,
        payload_len: msg_len as u16,
        hop_limit: HOP_LIMIT,
    }
    .emit(&mut b[l3..]);
    let Ok(mut icmp) = Icmpv6Packet::new_checked(&mut b[new_l4..new_l4 + msg_len]) else {
        return Verdict::Drop(Outcome::Malformed);
    };
    icmp.set_msg_type(Icmpv6Message::EchoReply);
    icmp.set_code(0);
    // The pseudo-header may change (a multicast destination becomes our unicast source), so
    // the checksum is recomputed over it (RFC 4443 §2.3).
    icmp.fill_checksum(&me, &src);
    swap_ethernet(b, local.mac());
    let _shorter = pkt.set_len(new_l4 + msg_len);
    Verdict::Transmit(Outcome::EchoReply)
}

/// Sends the frame back where it came from: destination = old source, source = us. VLAN tags
/// stay, so the answer leaves on the VLAN the request came from.
fn swap_ethernet(b: &mut [u8], mac: EthernetAddress) {
    let (dst, src) = b.split_at_mut(6);
    dst.copy_from_slice(&src[..6]);
    src[..6].copy_from_slice(&mac.0);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::parse::tests::{v4_frame, v6_frame, MAC, PEER};
    use super::super::tests::pipeline;
    use super::super::*;
    use super::*;
    use crate::buf::HeapBuf;
    use crate::wire::ipv6::ALL_NODES;
    use crate::wire::{checksum, EthernetFrame, Ipv6Packet};
    use std::net::Ipv4Addr;

    const ME: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    const THEM: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);

    pub(crate) fn echo4(data: &[u8]) -> Vec<u8> {
        let mut m = vec![8u8, 0, 0, 0, 0x12, 0x34, 0, 1];
        m.extend_from_slice(data);
        let c = checksum::checksum(&m);
        m[2..4].copy_from_slice(&c.to_be_bytes());
        m
    }

    pub(crate) fn echo6(src: &Ipv6Addr, dst: &Ipv6Addr, data: &[u8]) -> Vec<u8> {
        let mut m = vec![128u8, 0, 0, 0, 0x12, 0x34, 0, 1];
        m.extend_from_slice(data);
        let c = checksum::finish(checksum::sum(checksum::pseudo_v6(src, dst, 58, m.len() as u32), &m));
        m[2..4].copy_from_slice(&c.to_be_bytes());
        m
    }

    #[test]
    fn echo_v4_golden() {
        let mut p = pipeline();
        let mut v = v4_frame(THEM, ME, IpProtocol::ICMP, &[], 0x4000, &echo4(b"ping"));
        v.extend_from_slice(&[0; 6]); // padding, trimmed away
        let mut b = HeapBuf::new(&v);
        assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Transmit(Outcome::EchoReply));
        #[rustfmt::skip]
        let expect: [u8; 46] = [
            2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00,
            0x45, 0, 0, 32, 0x12, 0x34, 0x40, 0, 64, 1, 0x3c, 0x6d,
            192, 0, 2, 1, 198, 51, 100, 7,
            0, 0, 0x0e, 0xfa, 0x12, 0x34, 0, 1, b'p', b'i', b'n', b'g',
        ];
        assert_eq!(b.data(), &expect[..]);
        let f = EthernetFrame::new_checked(b.data()).unwrap();
        let ip = Ipv4Packet::new_checked(f.payload()).unwrap();
        assert!(ip.verify_checksum());
        assert!(Icmpv4Packet::new_checked(ip.payload()).unwrap().verify_checksum());
    }

    #[test]
    fn echo_v4_with_options_and_odd_payload() {
        let mut p = pipeline();
        let v = v4_frame(THEM, ME, IpProtocol::ICMP, &[1, 1, 1, 0], 0, &echo4(b"odd"));
        let mut b = HeapBuf::new(&v);
        assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Transmit(Outcome::EchoReply));
        let f = EthernetFrame::new_checked(b.data()).unwrap();
        assert_eq!(f.dst_addr(), PEER);
        assert_eq!(f.src_addr(), MAC);
        let ip = Ipv4Packet::new_checked(f.payload()).unwrap();
        assert_eq!(ip.header_len(), 20);
        assert_eq!(ip.total_len(), f.payload().len());
        assert!(ip.verify_checksum());
        assert_eq!((ip.src_addr(), ip.dst_addr()), (ME, THEM));
        let icmp = Icmpv4Packet::new_checked(ip.payload()).unwrap();
        assert!(icmp.verify_checksum());
        assert_eq!(icmp.msg_type(), Icmpv4Message::EchoReply);
        assert_eq!((icmp.echo_ident(), icmp.echo_seq()), (0x1234, 1));
        assert_eq!(icmp.data(), b"odd");
    }

    #[test]
    fn echo_v4_refusals() {
        let mut p = pipeline();
        let mut bad = echo4(b"x");
        bad[8] ^= 1;
        for (v, want) in [
            (v4_frame(THEM, ME, IpProtocol::ICMP, &[], 0, &bad), Outcome::Malformed),
            (
                v4_frame(THEM, ME, IpProtocol::ICMP, &[], 0, &[8, 0, 0]),
                Outcome::Malformed,
            ),
            (
                v4_frame(Ipv4Addr::BROADCAST, ME, IpProtocol::ICMP, &[], 0, &echo4(b"")),
                Outcome::Martian,
            ),
            (
                v4_frame(THEM, Ipv4Addr::new(192, 0, 2, 9), IpProtocol::ICMP, &[], 0, &echo4(b"")),
                Outcome::NotLocal,
            ),
            // a reply, and a fragment: not for this stage
            (
                v4_frame(THEM, ME, IpProtocol::ICMP, &[], 0, &{
                    let mut m = echo4(b"");
                    m[0] = 0;
                    m[2] = m[2].wrapping_add(8);
                    m
                }),
                Outcome::Unhandled,
            ),
        ] {
            let mut b = HeapBuf::new(&v);
            assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Drop(want));
        }
        // A fragment goes to the reassembler first.
        let frag = v4_frame(THEM, ME, IpProtocol::ICMP, &[], 0x2000, &echo4(b""));
        assert_eq!(
            p.process(0, &mut HeapBuf::new(&frag), Instant(0)),
            Verdict::Reassemble { l3: 14 }
        );
    }

    fn me6() -> Ipv6Addr {
        "2001:db8::1".parse().unwrap()
    }
    fn them6() -> Ipv6Addr {
        "2001:db8::7".parse().unwrap()
    }

    fn check_v6_reply(b: &HeapBuf, data: &[u8]) {
        let f = EthernetFrame::new_checked(b.data()).unwrap();
        assert_eq!((f.dst_addr(), f.src_addr()), (PEER, MAC));
        let ip = Ipv6Packet::new_checked(f.payload()).unwrap();
        assert_eq!(ip.total_len(), f.payload().len());
        assert_eq!((ip.src_addr(), ip.dst_addr()), (me6(), them6()));
        assert_eq!(ip.next_header(), IpProtocol::ICMPV6);
        assert_eq!(ip.hop_limit(), 64);
        let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
        assert_eq!(icmp.msg_type(), Icmpv6Message::EchoReply);
        assert!(icmp.verify_checksum(&me6(), &them6()));
        assert_eq!((icmp.echo_ident(), icmp.echo_seq()), (0x1234, 1));
        assert_eq!(icmp.data(), data);
    }

    #[test]
    fn echo_v6_golden() {
        let mut p = pipeline();
        let v = v6_frame(
            them6(),
            me6(),
            IpProtocol::ICMPV6,
            &[],
            64,
            &echo6(&them6(), &me6(), b"ping6"),
        );
        let mut b = HeapBuf::new(&v);
        assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Transmit(Outcome::EchoReply));
        check_v6_reply(&b, b"ping6");
        // The request's checksum plus 0x0100 (type 128 -> 129), pseudo-header sum unchanged.
        let req = echo6(&them6(), &me6(), b"ping6");
        let want = checksum::update16(u16::from_be_bytes([req[2], req[3]]), 0x8000, 0x8100);
        assert_eq!(&b.data()[14 + 40 + 2..14 + 40 + 4], &want.to_be_bytes());
    }

    #[test]
    fn echo_v6_to_all_nodes_and_with_extension_header() {
        let mut p = pipeline();
        let v = v6_frame(
            them6(),
            ALL_NODES,
            IpProtocol::ICMPV6,
            &[],
            64,
            &echo6(&them6(), &ALL_NODES, b"m"),
        );
        let mut b = HeapBuf::new(&v);
        assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Transmit(Outcome::EchoReply));
        check_v6_reply(&b, b"m");

        let dst_opts = [58u8, 0, 1, 4, 0, 0, 0, 0];
        let v = v6_frame(
            them6(),
            me6(),
            IpProtocol::IPV6_OPTS,
            &dst_opts,
            64,
            &echo6(&them6(), &me6(), b"ext"),
        );
        let mut b = HeapBuf::new(&v);
        assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Transmit(Outcome::EchoReply));
        check_v6_reply(&b, b"ext");
    }

    #[test]
    fn echo_v6_refusals() {
        let mut p = pipeline();
        let mut bad = echo6(&them6(), &me6(), b"x");
        bad[8] ^= 1;
        let mcast_src: Ipv6Addr = "ff02::5".parse().unwrap();
        for (v, want) in [
            (
                v6_frame(them6(), me6(), IpProtocol::ICMPV6, &[], 64, &bad),
                Outcome::Malformed,
            ),
            (
                v6_frame(
                    mcast_src,
                    me6(),
                    IpProtocol::ICMPV6,
                    &[],
                    64,
                    &echo6(&mcast_src, &me6(), b""),
                ),
                Outcome::Martian,
            ),
            (
                v6_frame(
                    them6(),
                    them6(),
                    IpProtocol::ICMPV6,
                    &[],
                    64,
                    &echo6(&them6(), &them6(), b""),
                ),
                Outcome::NotLocal,
            ),
        ] {
            let mut b = HeapBuf::new(&v);
            assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Drop(want));
        }
        // UDP to a closed port is answered by ICMPv6 Port Unreachable, not by the echo stage.
        let udp = crate::pipeline::tests::with_udp_checksum(v6_frame(
            them6(),
            me6(),
            IpProtocol::UDP,
            &[],
            64,
            &[0, 1, 0, 2, 0, 8, 0, 0],
        ));
        assert_eq!(
            p.process(0, &mut HeapBuf::new(&udp), Instant(0)),
            Verdict::Transmit(Outcome::IcmpError)
        );
    }
}
