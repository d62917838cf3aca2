//! The IPv6/UDP fast path ([`Pipeline::udp6`]) against the general path
//! ([`Pipeline::process_general`]): frames drawn around its shape (and just outside it, one field
//! at a time: next header, lengths, hop limit, group and link-local addresses, the UDP checksum,
//! padding, truncation), through tables with open, closed, bound, multi-socket and punted ports,
//! in bursts with ring backlogs that make the fanout decide. Both must give the same verdict,
//! leave the packet the same (an ICMPv6 error built in place, padding trimmed), the fanout in the
//! same state and the same ICMP counters.

use super::fast_harness::*;
use super::*;
use crate::buf::HeapBuf;
use crate::pipeline::parse::tests::{udp_bytes, v6_frame};
use crate::pipeline::tests::{MAC, PEER};
use crate::wire::{ipv6::solicited_node, IpProtocol};
use proptest::prelude::*;
use std::net::Ipv6Addr;

/// One frame: a valid IPv6/UDP frame, then the mutations drawn.
#[derive(Clone, Debug)]
struct Draw {
    dst_mac: usize,
    src_mac: usize,
    ethertype: usize,
    version: usize,
    next_header: usize,
    payload_len: usize,
    udp_len: usize,
    hop_limit: usize,
    checksum: usize,
    nic_checksum: usize,
    rss: Option<u32>,
    src: usize,
    dst: usize,
    sport: u16,
    dport: usize,
    payload: usize,
    padding: usize,
    truncate: Option<usize>,
}

fn draw() -> impl Strategy<Value = Draw> {
    // Each field is most often the fast path's value, so most frames take it and reach the
    // service and ICMP stages; the rest leave it one way or another.
    let often = |n: usize| prop_oneof![3 => Just(0usize), 1 => 0..n];
    (
        (often(5), often(4), often(3), often(3), often(8), often(7)),
        (
            often(5),
            often(4),
            often(3),
            0..3usize,
            proptest::option::of(any::<u32>()),
        ),
        (
            prop_oneof![3 => 0..4usize, 1 => 4..10usize],
            often(8),
            any::<u16>(),
            0..6usize,
            0..20usize,
            often(4),
        ),
        proptest::option::weighted(0.05, 0..100usize),
    )
        .prop_map(
            |(
                (dst_mac, src_mac, ethertype, version, next_header, payload_len),
                (udp_len, hop_limit, checksum, nic_checksum, rss),
                (src, dst, sport, dport, payload, padding),
                truncate,
            )| Draw {
                dst_mac,
                src_mac,
                ethertype,
                version,
                next_header,
                payload_len,
                udp_len,
                hop_limit,
                checksum,
                nic_checksum,
                rss,
                src,
                dst,
                sport,
                dport,
                payload,
                padding: [0, 1, 6, 20][padding],
                truncate,
            },
        )
}

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

fn frame(d: &Draw) -> HeapBuf {
    // Ours (two), not ours, all-nodes, our solicited-node group, another's, link-local (not
    // ours), another group, a v4-mapped address.
    let dst = [
        ME6,
        ME6_2,
        v6("2001:db8::99"),
        v6("ff02::1"),
        solicited_node(&ME6),
        solicited_node(&v6("2001:db8::99")),
        v6("fe80::1"),
        v6("ff05::2"),
    ][d.dst];
    // Four hosts, then sources no error may answer and the rule refuses (RFC 4291, RFC 4443
    // §2.4(e.6)): unspecified, loopback, multicast, our own address; and ones it takes: a
    // link-local source, a v4-mapped one.
    let src = match d.src {
        0..4 => Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, d.src as u16 + 1),
        s => [
            Ipv6Addr::UNSPECIFIED,
            Ipv6Addr::LOCALHOST,
            v6("ff02::1"),
            ME6,
            v6("fe80::7"),
            v6("::ffff:198.51.100.7"),
        ][s - 4],
    };
    let dport = [7, 9, 53, 67, 68, 7][d.dport];
    let payload = vec![0x5a; d.payload];
    let hop_limit = [64, 0, 1, 255][d.hop_limit];
    let mut v = v6_frame(
        src,
        dst,
        IpProtocol::UDP,
        &[],
        hop_limit,
        &udp_bytes(d.sport, dport, &payload),
    );
    // The UDP checksum over the valid frame: right, zero (RFC 8200 §8.1: invalid over IPv6)
    // or wrong.
    let mut v = crate::pipeline::tests::with_udp_checksum(std::mem::take(&mut v));
    match d.checksum {
        1 => v[60..62].copy_from_slice(&[0, 0]),
        2 => v[61] ^= 0x21,
        _ => {}
    }
    let payload_len = v.len() - 54;
    v[0..6].copy_from_slice(&[MAC.0, PEER.0, [0xff; 6], [0x33, 0x33, 0, 0, 0, 1], [2, 0, 0, 0, 0, 9]][d.dst_mac]);
    v[6..12].copy_from_slice(&[PEER.0, [0xff; 6], [0; 6], [3, 0, 0, 0, 0, 2]][d.src_mac]);
    v[12..14].copy_from_slice(&[0x86ddu16, 0x0800, 0x8100][d.ethertype].to_be_bytes());
    v[14] = (v[14] & 0x0f) | [0x60, 0x40, 0x70][d.version];
    // UDP, then TCP, ICMPv6, the extension headers (Hop-by-Hop, Routing, Fragment, Destination
    // Options) and No Next Header.
    v[20] = [17, 6, 58, 0, 43, 44, 60, 59][d.next_header];
    let plen = [payload_len, payload_len + 1, payload_len - 1, 7, 8, 0, 0xffff][d.payload_len];
    v[18..20].copy_from_slice(&(plen as u16).to_be_bytes());
    let udp = [payload_len, 7, 8, payload_len + 1, 0][d.udp_len];
    v[58..60].copy_from_slice(&(udp as u16).to_be_bytes());
    v.extend(std::iter::repeat_n(0xee, d.padding));
    if let Some(n) = d.truncate {
        v.truncate(n);
    }
    let mut b = HeapBuf::new(&v);
    b.set_l4_checksum([NicChecksum::Unknown, NicChecksum::Good, NicChecksum::Bad][d.nic_checksum]);
    b.set_rss_hash(d.rss);
    b
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_udp6_fast_path_decides_as_the_general_path(
        bursts in proptest::collection::vec(
            (proptest::collection::vec(draw(), 1..40), proptest::array::uniform6(0..=CAPACITY)),
            1..4,
        ),
        shape in shape(),
        step_ns in 0u64..3_000_000,
    ) {
        let (mut fast, mut general) = pair(shape);
        let a = run(&mut fast, &bursts, frame, step_ns, true);
        let b = run(&mut general, &bursts, frame, step_ns, false);
        assert_same(&a, &b, &fast, &general)?;
    }
}

/// The draws reach every stage the fast path hands on to, and every way out of its shape, so
/// the property above compares something: a fixed sample's verdicts cover them all.
#[test]
fn the_draws_reach_every_verdict() {
    let seen = outcomes_seen(draw(), frame);
    for want in [
        "Delivered",
        "SocketFull",
        "KernelFull",
        "IcmpError",
        "IcmpSuppressed",
        "UdpBadChecksum",
        "NotLocal",
        "NotForUs",
        "Martian",
        "Filtered",
        "SourceLimited",
        "Malformed",
        "Unhandled",
    ] {
        assert!(seen.contains(want), "{want} never seen: {seen:?}");
    }
}

/// The fast path takes the common IPv6/UDP frames (the property above would hold, and test
/// nothing of it, if it declined everything): a closed port, a service's datagram, a zero
/// checksum, each decided without the general path.
#[test]
fn the_fast_path_takes_its_frames() {
    let s = Shape {
        two_addresses: false,
        rollover: false,
        flow_limit: false,
        exempt: false,
        kernel: false,
        unhandled: false,
        tight_punt: false,
        filtered: false,
        tcp_state: false,
    };
    let mut p = Pipeline::new(tables(s), 0);
    let base = Draw {
        dst_mac: 0,
        src_mac: 0,
        ethertype: 0,
        version: 0,
        next_header: 0,
        payload_len: 0,
        udp_len: 0,
        hop_limit: 0,
        checksum: 0,
        nic_checksum: 0,
        rss: None,
        src: 0,
        dst: 0,
        sport: 4000,
        dport: 0,
        payload: 4,
        padding: 0,
        truncate: None,
    };
    let closed = Draw {
        dport: 1,
        ..base.clone()
    };
    let zero = Draw {
        checksum: 1,
        ..closed.clone()
    };
    let mcast = Draw {
        dst: 3,
        ..closed.clone()
    };
    assert_eq!(
        p.process_lead::<{ Lead::UDP6 }, _>(&p.port_view(0), 0, &mut frame(&base), Instant(0)),
        Some(Verdict::Deliver)
    );
    assert_eq!(
        p.process_lead::<{ Lead::UDP6 }, _>(&p.port_view(0), 0, &mut frame(&closed), Instant(0)),
        Some(Verdict::Transmit(Outcome::IcmpError))
    );
    assert_eq!(
        p.process_lead::<{ Lead::UDP6 }, _>(&p.port_view(0), 0, &mut frame(&Draw { src: 1, ..zero }), Instant(0)),
        Some(Verdict::Drop(Outcome::UdpBadChecksum))
    );
    assert_eq!(
        p.process_lead::<{ Lead::UDP6 }, _>(&p.port_view(0), 0, &mut frame(&mcast), Instant(0)),
        None,
        "a group is the general path's"
    );
}
