//! Answers that must not be sent: the source-validation rule (`pipeline/source.rs`),
//! source routes and the RFC 6980 NDP rule, through the whole pipeline, fast path included.

use crate::buf::{HeapBuf, PacketBuf};
use crate::outcome::Outcome;
use crate::pipeline::echo::tests::{echo4, echo6};
use crate::pipeline::ndp::tests::{ns, SLLA};
use crate::pipeline::parse::tests::{udp_bytes, v4_frame, v6_frame};
use crate::pipeline::tests::{pipeline, with_udp_checksum, MAC, PEER};
use crate::pipeline::{Instant, Verdict};
use crate::wire::ipv6::solicited_node;
use crate::wire::{ArpOperation, EtherType, EthernetAddress, IpProtocol};
use std::net::{Ipv4Addr, Ipv6Addr};

const ME: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const THEM: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);

fn me6() -> Ipv6Addr {
    "2001:db8::1".parse().unwrap()
}
fn them6() -> Ipv6Addr {
    "2001:db8::7".parse().unwrap()
}

fn run(v: &[u8]) -> Verdict {
    pipeline().process(0, &mut HeapBuf::new(v), Instant(0))
}

/// Martian sources get nothing: no Port Unreachable (fast path: IPv4/UDP), no echo, no ICMP
/// error, over both families; a valid source still does.
#[test]
fn martian_sources_are_not_answered() {
    let martians4 = [
        Ipv4Addr::BROADCAST,
        Ipv4Addr::new(224, 0, 0, 1),
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::new(127, 0, 0, 1),
        Ipv4Addr::new(240, 1, 2, 3),
        ME,
    ];
    for src in martians4 {
        let udp = with_udp_checksum(v4_frame(src, ME, IpProtocol::UDP, &[], 0, &udp_bytes(40000, 9, b"x")));
        assert_eq!(run(&udp), Verdict::Drop(Outcome::Martian), "UDP from {src}");
        let icmp = v4_frame(src, ME, IpProtocol::ICMP, &[], 0, &echo4(b"x"));
        assert_eq!(run(&icmp), Verdict::Drop(Outcome::Martian), "ping from {src}");
        let frag = v4_frame(src, ME, IpProtocol::UDP, &[], 0x2000, &udp_bytes(40000, 9, b"x"));
        assert_eq!(run(&frag), Verdict::Drop(Outcome::Martian), "fragment from {src}");
        let proto = v4_frame(src, ME, IpProtocol(253), &[], 0, b"xxxxxxxx");
        assert_eq!(run(&proto), Verdict::Drop(Outcome::Martian), "protocol 253 from {src}");
    }
    let ok = with_udp_checksum(v4_frame(THEM, ME, IpProtocol::UDP, &[], 0, &udp_bytes(40000, 9, b"x")));
    assert_eq!(run(&ok), Verdict::Transmit(Outcome::IcmpError));
    // Not for us stays not_local, whatever the source.
    let other = v4_frame(
        Ipv4Addr::LOCALHOST,
        THEM,
        IpProtocol::UDP,
        &[],
        0,
        &udp_bytes(1, 9, b"x"),
    );
    assert_eq!(run(&other), Verdict::Drop(Outcome::NotLocal));

    for src in [
        Ipv6Addr::LOCALHOST,
        me6(),
        "ff02::1".parse().unwrap(),
        Ipv6Addr::UNSPECIFIED,
    ] {
        let udp = with_udp_checksum(v6_frame(
            src,
            me6(),
            IpProtocol::UDP,
            &[],
            64,
            &udp_bytes(40000, 9, b"x"),
        ));
        assert_eq!(run(&udp), Verdict::Drop(Outcome::Martian), "UDP from {src}");
        let icmp = v6_frame(src, me6(), IpProtocol::ICMPV6, &[], 64, &echo6(&src, &me6(), b"x"));
        assert_eq!(run(&icmp), Verdict::Drop(Outcome::Martian), "ping from {src}");
    }
    let ok6 = v6_frame(
        them6(),
        me6(),
        IpProtocol::ICMPV6,
        &[],
        64,
        &echo6(&them6(), &me6(), b"x"),
    );
    assert_eq!(run(&ok6), Verdict::Transmit(Outcome::EchoReply));
}

/// RFC 1122 §3.3.6: a unicast datagram in a link-layer broadcast or multicast frame is
/// discarded; a group datagram in a group frame is not refused for it.
#[test]
fn unicast_datagrams_in_group_frames_are_not_answered() {
    for dst_mac in [[0xff; 6], [0x01, 0x00, 0x5e, 0, 0, 1]] {
        let mut ping = v4_frame(THEM, ME, IpProtocol::ICMP, &[], 0, &echo4(b"x"));
        ping[..6].copy_from_slice(&dst_mac);
        assert_eq!(run(&ping), Verdict::Drop(Outcome::Martian));
        let mut udp = with_udp_checksum(v4_frame(THEM, ME, IpProtocol::UDP, &[], 0, &udp_bytes(40000, 9, b"x")));
        udp[..6].copy_from_slice(&dst_mac);
        assert_eq!(run(&udp), Verdict::Drop(Outcome::Martian), "fast path");
    }
    let mut ping6 = v6_frame(
        them6(),
        me6(),
        IpProtocol::ICMPV6,
        &[],
        64,
        &echo6(&them6(), &me6(), b"x"),
    );
    ping6[..6].copy_from_slice(&[0x33, 0x33, 0, 0, 0, 1]);
    assert_eq!(run(&ping6), Verdict::Drop(Outcome::Martian));
    let all: Ipv6Addr = "ff02::1".parse().unwrap();
    let mut ping_all = v6_frame(them6(), all, IpProtocol::ICMPV6, &[], 64, &echo6(&them6(), &all, b"x"));
    ping_all[..6].copy_from_slice(&[0x33, 0x33, 0, 0, 0, 1]);
    assert_eq!(run(&ping_all), Verdict::Transmit(Outcome::EchoReply));
}

/// IPv4 source routes are dropped (RFC 7126 §4.3.4, §4.4.4), malformed options too; other
/// options are not copied into the echo (the reply has a 20-byte header).
#[test]
fn source_routed_and_malformed_options_are_dropped() {
    let lsrr = [0x83, 7, 4, 203, 0, 113, 9, 0];
    let ssrr = [0x89, 7, 4, 203, 0, 113, 9, 0];
    for opts in [lsrr, ssrr] {
        let ping = v4_frame(THEM, ME, IpProtocol::ICMP, &opts, 0, &echo4(b"x"));
        assert_eq!(run(&ping), Verdict::Drop(Outcome::SourceRouted));
        let udp = with_udp_checksum(v4_frame(
            THEM,
            ME,
            IpProtocol::UDP,
            &opts,
            0,
            &udp_bytes(40000, 9, b"x"),
        ));
        assert_eq!(run(&udp), Verdict::Drop(Outcome::SourceRouted));
    }
    // Record Route whose length runs past the header.
    let bad_rr = [7, 39, 4, 0, 0, 0, 0, 0];
    let ping = v4_frame(THEM, ME, IpProtocol::ICMP, &bad_rr, 0, &echo4(b"x"));
    assert_eq!(run(&ping), Verdict::Drop(Outcome::Malformed));
    let rr = [7, 7, 4, 0, 0, 0, 0, 0];
    let mut b = HeapBuf::new(&v4_frame(THEM, ME, IpProtocol::ICMP, &rr, 0, &echo4(b"x")));
    assert_eq!(
        pipeline().process(0, &mut b, Instant(0)),
        Verdict::Transmit(Outcome::EchoReply)
    );
    assert_eq!(b.data()[14], 0x45, "no option copied");
}

/// An IPv6 Routing header with segments left (type 0, RFC 5095; type 4, RFC 8754) is dropped;
/// with none left it is passed over (RFC 8200 §4.4).
#[test]
fn routing_headers_with_segments_left_are_dropped() {
    for ty in [0u8, 4] {
        for (left, want) in [(1u8, Some(Outcome::SourceRouted)), (0, None)] {
            let rh = [
                IpProtocol::ICMPV6.0,
                2,
                ty,
                left,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
            ];
            let v = v6_frame(
                them6(),
                me6(),
                IpProtocol::IPV6_ROUTE,
                &rh,
                64,
                &echo6(&them6(), &me6(), b"x"),
            );
            let got = run(&v);
            match want {
                Some(o) => assert_eq!(got, Verdict::Drop(o), "type {ty}, left {left}"),
                None => assert_eq!(got, Verdict::Transmit(Outcome::EchoReply), "type {ty}, left {left}"),
            }
        }
    }
}

/// RFC 6980 §5: an NDP message with a Fragment header (atomic, or a first fragment) is
/// ignored; an NS whose Source Link-Layer Address is a group address is not answered.
#[test]
fn ndp_rfc6980_and_group_link_layer_addresses() {
    let sn = solicited_node(&me6());
    let plain = ns(them6(), sn, me6(), 255, &SLLA);
    assert!(matches!(run(plain.data()), Verdict::Transmit(Outcome::NdpReply)));
    // Insert a Fragment header after the fixed header.
    let with_frag = |more: bool| {
        let d = plain.data();
        let mut v = d[..54].to_vec();
        v[20] = IpProtocol::IPV6_FRAG.0;
        let plen = u16::from_be_bytes([v[18], v[19]]) + 8;
        v[18..20].copy_from_slice(&plen.to_be_bytes());
        v.extend_from_slice(&[IpProtocol::ICMPV6.0, 0, 0, more as u8, 0, 0, 0, 9]);
        v.extend_from_slice(&d[54..]);
        v
    };
    assert_eq!(
        run(&with_frag(false)),
        Verdict::Drop(Outcome::NdpIgnored),
        "atomic fragment"
    );
    assert_eq!(
        run(&with_frag(true)),
        Verdict::Drop(Outcome::NdpIgnored),
        "first fragment"
    );
    for group in [[0xff; 6], [0x33, 0x33, 0, 0, 0, 1]] {
        let mut slla = SLLA;
        slla[2..].copy_from_slice(&group);
        let b = ns(them6(), sn, me6(), 255, &slla);
        assert_eq!(run(b.data()), Verdict::Drop(Outcome::Martian), "SLLA {group:?}");
    }
}

fn arp_request(sender: Ipv4Addr, pad: usize) -> Vec<u8> {
    let mut v = vec![0u8; 14 + 28];
    crate::wire::ethernet::emit_header(&mut v, EthernetAddress::BROADCAST, PEER, EtherType::ARP);
    crate::wire::arp::emit(
        &mut v[14..],
        ArpOperation::Request,
        PEER,
        sender,
        EthernetAddress([0; 6]),
        ME,
    );
    v.extend(std::iter::repeat_n(0xa5, pad));
    v
}

/// ARP: martian senders are not answered (a probe's 0.0.0.0 is, RFC 5227); a reply carries no
/// padding of the request.
#[test]
fn arp_martians_and_padding() {
    for s in [
        Ipv4Addr::new(127, 0, 0, 1),
        Ipv4Addr::new(224, 0, 0, 1),
        Ipv4Addr::BROADCAST,
        Ipv4Addr::new(192, 0, 2, 1),
    ] {
        let got = run(&arp_request(s, 18));
        let want = if s == ME { Outcome::ArpIgnored } else { Outcome::Martian };
        assert_eq!(got, Verdict::Drop(want), "{s}");
    }
    let mut b = HeapBuf::new(&arp_request(Ipv4Addr::new(192, 0, 2, 2), 18));
    assert_eq!(
        pipeline().process(0, &mut b, Instant(0)),
        Verdict::Transmit(Outcome::ArpReply)
    );
    assert_eq!(b.len(), 42, "the request's padding is not sent back");
    assert_eq!(&b.data()[6..12], &MAC.0);
    let mut probe = HeapBuf::new(&arp_request(Ipv4Addr::UNSPECIFIED, 18));
    assert_eq!(
        pipeline().process(0, &mut probe, Instant(0)),
        Verdict::Transmit(Outcome::ArpReply)
    );
}
