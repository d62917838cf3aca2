//! The TCP fast paths ([`Pipeline::tcp4`], [`Pipeline::tcp6`]) against the general path
//! ([`Pipeline::process_general`]): segments over IPv4 and IPv6 drawn around their shape (and
//! just outside it, one field at a time: protocol or next header, IPv4 version, header length
//! and fragment bits, the lengths, the data offset, group and own addresses, the TCP checksum,
//! the control bits, padding, truncation), through tables with TCP services open, bound and
//! closed, and ports the kernel path takes, in bursts with ring backlogs that make the fanout
//! decide. Both must give the same verdict, leave the packet the same (a reset built in place,
//! padding trimmed), the fanout in the same state and the same reset counters.

use super::fast_harness::*;
use super::*;
use crate::buf::HeapBuf;
use crate::pipeline::parse::tests::{tcp_bytes, v4_frame, v6_frame};
use crate::pipeline::tests::{MAC, PEER};
use crate::wire::{IpProtocol, TcpFlags};
use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr};

/// One segment: a valid TCP/IPv4 or TCP/IPv6 frame, then the mutations drawn.
#[derive(Clone, Debug)]
struct Draw {
    v6: bool,
    dst_mac: usize,
    src_mac: usize,
    ethertype: usize,
    /// IPv4: version and header length; IPv6: the version nibble.
    version: usize,
    flags_frag: usize,
    protocol: usize,
    ip_len: usize,
    data_offset: usize,
    corrupt_ip_checksum: bool,
    ip_nic_checksum: usize,
    tcp_checksum: bool,
    l4_nic_checksum: usize,
    flags: usize,
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
    // Each field is most often the fast paths' value, so that a burst holds enough segments of
    // their shape to a closed port for the reset limits to hold some back.
    let often = |n: usize| prop_oneof![6 => Just(0usize), 1 => 0..n];
    (
        (
            any::<bool>(),
            often(5),
            often(4),
            often(3),
            often(3),
            often(5),
            often(5),
        ),
        (
            often(5),
            proptest::bool::weighted(0.1),
            0..3usize,
            proptest::bool::weighted(0.8),
            0..3usize,
            prop_oneof![2 => Just(0usize), 1 => 0..7usize],
            proptest::option::of(any::<u32>()),
        ),
        (
            prop_oneof![3 => 0..4usize, 1 => 4..8usize],
            often(5),
            any::<u16>(),
            prop_oneof![1 => Just(1usize), 1 => 0..7usize],
            prop_oneof![Just(0usize), 0..12usize],
            often(4),
        ),
        proptest::option::weighted(0.05, 0..100usize),
    )
        .prop_map(
            |(
                (v6, dst_mac, src_mac, ethertype, version, flags_frag, protocol),
                (ip_len, corrupt_ip_checksum, ip_nic_checksum, tcp_checksum, l4_nic_checksum, flags, rss),
                (src, dst, sport, dport, payload, padding),
                truncate,
            )| Draw {
                v6,
                dst_mac,
                src_mac,
                ethertype,
                version,
                flags_frag,
                protocol,
                ip_len,
                data_offset: 0,
                corrupt_ip_checksum,
                ip_nic_checksum,
                tcp_checksum,
                l4_nic_checksum,
                flags,
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
        .prop_flat_map(|d| (Just(d), prop_oneof![3 => Just(0usize), 1 => 0..5usize]))
        .prop_map(|(d, data_offset)| Draw { data_offset, ..d })
}

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// The segment: its TCP header (the data offset drawn: 5, options the payload stands for, too
/// short, none, past the segment) and payload, its checksum over `pseudo` (the pseudo-header's
/// sum) right unless drawn wrong.
fn segment(d: &Draw, pseudo: impl FnOnce(usize) -> u32) -> Vec<u8> {
    let dport = [22, 9, 443, 8080, 80, 22, 8080][d.dport];
    let flags = [
        TcpFlags::SYN,
        TcpFlags::ACK,
        TcpFlags::RST,
        TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0),
        TcpFlags(TcpFlags::FIN.0 | TcpFlags::ACK.0),
        TcpFlags(0),
        TcpFlags(TcpFlags::RST.0 | TcpFlags::ACK.0),
    ][d.flags];
    let mut t = tcp_bytes(d.sport, dport, flags);
    // Every other draw the handshake's ACK (a SYN's ISN + 1), for the TCP state table.
    t[4..8].copy_from_slice(&(0x0102_0304u32 + (d.payload % 2) as u32).to_be_bytes());
    t[8..12].copy_from_slice(&0x0a0b_0c0du32.to_be_bytes());
    t.extend(std::iter::repeat_n(0x01, d.payload));
    t[12] = [5u8, 6, 4, 0, 15][d.data_offset] << 4;
    let c = !wire::checksum::fold(wire::checksum::sum(pseudo(t.len()), &t));
    t[16..18].copy_from_slice(&(c ^ !d.tcp_checksum as u16).to_be_bytes());
    t
}

/// The pseudo-header's sum (RFC 9293 §3.1, RFC 8200 §8.1) for a segment of `len` bytes.
fn pseudo(src: &[u8], dst: &[u8], len: usize) -> u32 {
    let mut b = src.to_vec();
    b.extend_from_slice(dst);
    b.extend_from_slice(&(len as u32).to_be_bytes());
    b.extend_from_slice(&[0, 0, 0, 6]);
    wire::checksum::sum(0, &b)
}

fn frame(d: &Draw) -> HeapBuf {
    let mut v = if d.v6 {
        let dst = [
            ME6,
            ME6_2,
            v6("2001:db8::99"),
            v6("ff02::1"),
            crate::wire::ipv6::solicited_node(&ME6),
        ][d.dst];
        let src = match d.src {
            0..4 => Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, d.src as u16 + 1),
            s => [Ipv6Addr::UNSPECIFIED, v6("ff02::1"), ME6, v6("fe80::7")][s - 4],
        };
        let seg = segment(d, |len| pseudo(&src.octets(), &dst.octets(), len));
        let mut v = v6_frame(src, dst, IpProtocol::TCP, &[], 64, &seg);
        let plen = v.len() - 54;
        v[14] = (v[14] & 0x0f) | [0x60, 0x40, 0x70][d.version];
        v[20] = [6, 17, 58, 0, 44][d.protocol];
        let plen = [plen, plen + 1, plen - 1, 19, 0][d.ip_len];
        v[18..20].copy_from_slice(&(plen as u16).to_be_bytes());
        v[12..14].copy_from_slice(&[0x86ddu16, 0x0800, 0x8100][d.ethertype].to_be_bytes());
        v
    } else {
        let dst = [
            ME,
            ME2,
            Ipv4Addr::new(198, 51, 100, 1),
            Ipv4Addr::BROADCAST,
            Ipv4Addr::new(224, 0, 0, 1),
        ][d.dst];
        let src = match d.src {
            0..4 => Ipv4Addr::new(203, 0, 113, d.src as u8),
            s => [[0, 0, 0, 7], [127, 0, 0, 1], [224, 0, 0, 9], [192, 0, 2, 1]][s - 4].into(),
        };
        let seg = segment(d, |len| pseudo(&src.octets(), &dst.octets(), len));
        let flags = [0, 0x4000, 0x8000, 0x2000, 0x0001][d.flags_frag];
        let mut v = v4_frame(src, dst, IpProtocol::TCP, &[], flags, &seg);
        let ip_len = v.len() - 14;
        v[14] = [0x45, 0x46, 0x55][d.version];
        v[23] = [6, 17, 1, 47, 99][d.protocol];
        let total = [ip_len, ip_len + 1, ip_len - 1, 39, 0xffff][d.ip_len];
        v[16..18].copy_from_slice(&(total as u16).to_be_bytes());
        v[24..26].copy_from_slice(&[0, 0]);
        let c = !wire::checksum::fold(wire::checksum::sum(0, &v[14..34]));
        v[24..26].copy_from_slice(&(c ^ d.corrupt_ip_checksum as u16).to_be_bytes());
        v[12..14].copy_from_slice(&[0x0800u16, 0x86dd, 0x8100][d.ethertype].to_be_bytes());
        v
    };
    let group = if d.v6 {
        [0x33, 0x33, 0, 0, 0, 1]
    } else {
        [1, 0, 0x5e, 0, 0, 1]
    };
    v[0..6].copy_from_slice(&[MAC.0, PEER.0, [0xff; 6], group, [2, 0, 0, 0, 0, 9]][d.dst_mac]);
    v[6..12].copy_from_slice(&[PEER.0, [0xff; 6], [0; 6], [3, 0, 0, 0, 0, 2]][d.src_mac]);
    v.extend(std::iter::repeat_n(0xee, d.padding));
    if let Some(n) = d.truncate {
        v.truncate(n);
    }
    let mut b = HeapBuf::new(&v);
    let nic = [NicChecksum::Unknown, NicChecksum::Good, NicChecksum::Bad];
    b.set_ip_checksum(nic[d.ip_nic_checksum]);
    b.set_l4_checksum(nic[d.l4_nic_checksum]);
    b.set_rss_hash(d.rss);
    b
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_tcp_fast_paths_decide_as_the_general_path(
        bursts in proptest::collection::vec(
            (proptest::collection::vec(draw(), 1..40), proptest::array::uniform6(0..=CAPACITY)),
            1..4,
        ),
        shape in shape(),
        // Mostly too fast for the limits to refill, sometimes slow enough for them to.
        step_ns in prop_oneof![3 => 0u64..1_000_000, 1 => 0u64..60_000_000],
    ) {
        let (mut fast, mut general) = pair(shape);
        let a = run(&mut fast, &bursts, frame, step_ns, true);
        let b = run(&mut general, &bursts, frame, step_ns, false);
        assert_same(&a, &b, &fast, &general)?;
    }
}

/// The draws reach every stage the fast paths hand on to, and every way out of their shape.
#[test]
fn the_draws_reach_every_verdict() {
    let seen = outcomes_seen(draw(), frame);
    for want in [
        "Delivered",
        "SocketFull",
        "KernelFull",
        "TcpReset",
        "TcpResetSuppressed",
        "TcpBadChecksum",
        "NoService",
        "NotLocal",
        "NotForUs",
        "Martian",
        "Filtered",
        "SourceLimited",
        "TcpOutOfState",
        "Malformed",
        "Reassembled",
        "Unhandled",
    ] {
        assert!(seen.contains(want), "{want} never seen: {seen:?}");
    }
}

/// The fast paths take the common segments (the property above would hold, and test nothing of
/// them, if they declined everything): a service's, and one to a closed port, over both families.
#[test]
fn the_fast_paths_take_their_segments() {
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
        v6: false,
        dst_mac: 0,
        src_mac: 0,
        ethertype: 0,
        version: 0,
        flags_frag: 0,
        protocol: 0,
        ip_len: 0,
        data_offset: 0,
        corrupt_ip_checksum: false,
        ip_nic_checksum: 0,
        tcp_checksum: true,
        l4_nic_checksum: 0,
        flags: 0,
        rss: None,
        src: 0,
        dst: 0,
        sport: 4000,
        dport: 0,
        payload: 0,
        padding: 6,
        truncate: None,
    };
    for v6 in [false, true] {
        let open = Draw { v6, ..base.clone() };
        let closed = Draw {
            dport: 1,
            ..open.clone()
        };
        let reset = Draw {
            flags: 2,
            ..closed.clone()
        };
        let f = |p: &mut Pipeline, port: u16, b: &mut HeapBuf, now: Instant| {
            let view = p.port_view(port);
            if v6 {
                p.tcp6(&view, port, b, now)
            } else {
                p.tcp4(&view, port, b, now)
            }
        };
        assert_eq!(
            f(&mut p, 0, &mut frame(&open), Instant(0)),
            Some(Verdict::Deliver),
            "v6 {v6}"
        );
        assert_eq!(
            f(&mut p, 0, &mut frame(&closed), Instant(0)),
            Some(Verdict::Transmit(Outcome::TcpReset)),
            "v6 {v6}"
        );
        assert_eq!(
            f(&mut p, 0, &mut frame(&reset), Instant(0)),
            Some(Verdict::Drop(Outcome::NoService)),
            "v6 {v6}: a reset is not answered"
        );
        p.burst_done();
    }
}
