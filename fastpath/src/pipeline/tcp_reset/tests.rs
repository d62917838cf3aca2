//! The reset's fields by RFC 9293 §3.10.7.1, read back through the wire views, and its limits.

use super::*;
use crate::buf::HeapBuf;
use crate::outcome::Outcome;
use crate::pipeline::parse::tests::{tcp_bytes, v4_frame, v6_frame};
use crate::pipeline::tests::{pipeline, MAC, PEER};
use crate::pipeline::verdict::Verdict;
use crate::pipeline::Pipeline;
use crate::wire::{checksum, Ipv4Packet, Ipv6Packet, Toeplitz};
use std::net::{Ipv4Addr, Ipv6Addr};

const ME: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const THEM: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);

fn me6() -> Ipv6Addr {
    "2001:db8::1".parse().unwrap()
}
fn them6() -> Ipv6Addr {
    "2001:db8::7".parse().unwrap()
}

/// A TCP segment from port 40000 to `dport` with `flags`, `seq`, `ack` and `data`, checksum
/// right, over IPv4 (with `options`) or IPv6.
fn segment(v6: bool, options: &[u8], dport: u16, flags: TcpFlags, seq: u32, ack: u32, data: &[u8]) -> Vec<u8> {
    let mut t = tcp_bytes(40000, dport, flags);
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[8..12].copy_from_slice(&ack.to_be_bytes());
    t[14..16].copy_from_slice(&64240u16.to_be_bytes());
    t.extend_from_slice(data);
    let mut f = if v6 {
        v6_frame(them6(), me6(), IpProtocol::TCP, &[], 64, &t)
    } else {
        v4_frame(THEM, ME, IpProtocol::TCP, options, 0, &t)
    };
    let p = Parsed::parse(&f, &Toeplitz::default(), None).unwrap();
    let mut tcp = TcpPacket::new_checked(&mut f[p.l4_offset as usize..p.ip_end as usize]).unwrap();
    match (p.src, p.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => tcp.fill_checksum_v4(s, d),
        (IpAddr::V6(s), IpAddr::V6(d)) => tcp.fill_checksum_v6(&s, &d),
        _ => unreachable!(),
    }
    f
}

/// A SYN to port 80 from `src` over IPv4, checksums right.
fn syn_from(src: Ipv4Addr) -> Vec<u8> {
    let mut f = segment(false, &[], 80, TcpFlags::SYN, 1, 0, b"");
    f[26..30].copy_from_slice(&src.octets());
    f[24..26].copy_from_slice(&[0, 0]);
    let c = checksum::checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    let mut t = TcpPacket::new_checked(&mut f[34..]).unwrap();
    t.fill_checksum_v4(src, ME);
    f
}

/// What a reset read back from the wire says: (seq, ack, flags), after checking everything
/// else about it (addresses, ports, lengths, checksums, MACs).
fn read_reset(frame: &[u8], v6: bool) -> (u32, u32, u8) {
    assert_eq!(&frame[0..6], &PEER.0, "to the sender's MAC");
    assert_eq!(&frame[6..12], &MAC.0, "from ours");
    let (l4, len) = if v6 {
        let ip = Ipv6Packet::new_checked(&frame[14..]).unwrap();
        assert_eq!((ip.src_addr(), ip.dst_addr()), (me6(), them6()));
        assert_eq!(ip.next_header(), IpProtocol::TCP);
        (54, 14 + 40 + 20)
    } else {
        let ip = Ipv4Packet::new_checked(&frame[14..]).unwrap();
        assert_eq!((ip.src_addr(), ip.dst_addr()), (ME, THEM));
        assert_eq!((ip.header_len(), ip.total_len()), (20, 40));
        assert_eq!(checksum::checksum(&frame[14..34]), 0, "IPv4 header checksum");
        (34, 14 + 20 + 20)
    };
    assert_eq!(frame.len(), len, "headers only, no data, no options");
    let t = TcpPacket::new_checked(&frame[l4..]).unwrap();
    assert_eq!((t.src_port(), t.dst_port()), (80, 40000));
    assert_eq!((t.header_len(), t.window(), t.payload().len()), (20, 0, 0));
    let ok = if v6 {
        t.verify_checksum_v6(&me6(), &them6())
    } else {
        t.verify_checksum_v4(ME, THEM)
    };
    assert!(ok, "TCP checksum");
    (t.seq_number(), t.ack_number(), t.flags().0)
}

fn run(p: &mut Pipeline, f: &[u8]) -> (Verdict, Vec<u8>) {
    let mut b = HeapBuf::new(f);
    let v = p.process(0, &mut b, Instant(0));
    (v, b.data().to_vec())
}

const RST: u8 = TcpFlags::RST.0;
const RST_ACK: u8 = TcpFlags::RST.0 | TcpFlags::ACK.0;

#[test]
fn every_segment_for_a_closed_port_gets_the_reset_rfc_9293_asks_for() {
    let syn = TcpFlags::SYN;
    let fin = TcpFlags::FIN;
    let ack = TcpFlags::ACK;
    let psh_ack = TcpFlags(TcpFlags::PSH.0 | TcpFlags::ACK.0);
    let syn_fin = TcpFlags(TcpFlags::SYN.0 | TcpFlags::FIN.0);
    for v6 in [false, true] {
        for (name, flags, seq, ackno, data, want) in [
            // No ACK: SEQ=0, ACK=SEG.SEQ+SEG.LEN (SYN counts one), RST|ACK.
            ("SYN", syn, 1000u32, 0u32, &b""[..], (0, 1001, RST_ACK)),
            ("SYN at the wrap", syn, u32::MAX, 0, &b""[..], (0, 0, RST_ACK)),
            ("FIN with 5 bytes", fin, 7, 0, &b"hello"[..], (0, 13, RST_ACK)),
            ("SYN+FIN", syn_fin, 7, 0, &b""[..], (0, 9, RST_ACK)),
            // ACK: SEQ=SEG.ACK, RST alone.
            ("ACK", ack, 5, 0xdead_beef, &b""[..], (0xdead_beef, 0, RST)),
            ("PSH+ACK with data", psh_ack, 5, 77, &b"payload"[..], (77, 0, RST)),
        ] {
            let mut p = pipeline();
            let f = segment(v6, &[], 80, flags, seq, ackno, data);
            let (v, out) = run(&mut p, &f);
            assert_eq!(v, Verdict::Transmit(Outcome::TcpReset), "{name} v6={v6}");
            assert_eq!(read_reset(&out, v6), want, "{name} v6={v6}");
        }
    }
}

#[test]
fn a_reset_is_never_answered_and_options_are_not_copied() {
    let mut p = pipeline();
    for flags in [TcpFlags::RST, TcpFlags(TcpFlags::RST.0 | TcpFlags::ACK.0)] {
        let f = segment(false, &[], 80, flags, 1, 2, b"");
        assert_eq!(run(&mut p, &f).0, Verdict::Drop(Outcome::NoService));
    }
    // IPv4 options that do not stop delivery (four NOPs): the reset has a bare 20-byte header.
    let f = segment(false, &[1, 1, 1, 1], 80, TcpFlags::SYN, 10, 0, b"");
    let (v, out) = run(&mut p, &f);
    assert_eq!(v, Verdict::Transmit(Outcome::TcpReset));
    assert_eq!(read_reset(&out, false), (0, 11, RST_ACK));
}

#[test]
fn a_wrong_checksum_is_dropped_and_leaves_the_burst_alone() {
    // A global budget the test does not reach (wrong checksums spend it: that is what bounds
    // the checksums a flood of them costs).
    let cfg = TcpResetConfig {
        msgs_per_sec: 10_000,
        burst: 10_000,
        ..Default::default()
    };
    for v6 in [false, true] {
        let mut p = pipeline();
        p.tcp_reset.apply(&cfg, cfg.global_bucket(Instant(0)), 1);
        let right = segment(v6, &[], 80, TcpFlags::SYN, 1, 0, b"");
        let mut wrong = right.clone();
        let last = wrong.len() - 1;
        wrong[last - 2] ^= 0x10; // the urgent pointer: covered by the checksum only
        for _ in 0..50 {
            assert_eq!(run(&mut p, &wrong).0, Verdict::Drop(Outcome::TcpBadChecksum));
        }
        assert!(p.tcp_reset.global().credit() < 10_000, "the global credit is spent");
        // The default per-destination burst (10) is all there.
        for i in 0..10 {
            assert_eq!(run(&mut p, &right).0, Verdict::Transmit(Outcome::TcpReset), "#{i}");
        }
        assert_eq!(run(&mut p, &right).0, Verdict::Drop(Outcome::TcpResetSuppressed));
    }
}

#[test]
fn limits_per_destination_then_global_and_off_when_disabled() {
    let cfg = TcpResetConfig {
        peer_burst: 3,
        peer_interval_ms: 1000,
        msgs_per_sec: 100,
        burst: 1000,
        ..Default::default()
    };
    let mut p = pipeline();
    p.tcp_reset.apply(&cfg, cfg.global_bucket(Instant(0)), 1);
    let a = syn_from(THEM);
    let b = syn_from(Ipv4Addr::new(198, 51, 100, 8));
    let outcomes = |p: &mut Pipeline, f: &[u8], n: usize| (0..n).map(|_| run(p, f).0.outcome()).collect::<Vec<_>>();
    use Outcome::{TcpReset as R, TcpResetSuppressed as S};
    // A: its burst of 3, then held back per destination.
    assert_eq!(outcomes(&mut p, &a, 5), [R, R, R, S, S]);
    // B: a burst of its own.
    let b_sent = outcomes(&mut p, &b, 3).iter().filter(|&&o| o == R).count();
    assert_eq!(b_sent, 3);
    let c = p.reset_counters.limited[0][Limit::Peer.index()].get();
    assert_eq!(c, 2, "held back per destination, counted");
    assert_eq!(p.reset_counters.sent[0].get(), 3 + b_sent as u64);
    // Off: no_service.
    let off = TcpResetConfig {
        enabled: false,
        ..Default::default()
    };
    let mut p = pipeline();
    p.tcp_reset.apply(&off, off.global_bucket(Instant(0)), 1);
    assert_eq!(run(&mut p, &a).0, Verdict::Drop(Outcome::NoService));
}

#[test]
fn the_global_budget_holds_over_many_sources() {
    let cfg = TcpResetConfig {
        msgs_per_sec: 10,
        burst: 4,
        ..Default::default()
    };
    let mut p = pipeline();
    p.tcp_reset.apply(&cfg, cfg.global_bucket(Instant(0)), 1);
    let mut sent = 0;
    for i in 0..100u8 {
        let src = Ipv4Addr::new(198, 51, 100, i + 1);
        let mut f = segment(false, &[], 80, TcpFlags::SYN, 1, 0, b"");
        f[26..30].copy_from_slice(&src.octets());
        f[24..26].copy_from_slice(&[0, 0]);
        let c = checksum::checksum(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        TcpPacket::new_checked(&mut f[34..]).unwrap().fill_checksum_v4(src, ME);
        if run(&mut p, &f).0 == Verdict::Transmit(Outcome::TcpReset) {
            sent += 1;
        }
    }
    // 4 credits, each reset taking 0, 1 or 2 (1 on average): a handful, never 100.
    assert!((2..=12).contains(&sent), "{sent} resets sent on a budget of 4");
    let held = p.reset_counters.limited[0][Limit::Global.index()].get();
    assert!(held >= 88);
    // The budget spent (this lcore remembers until when): a reset is still never answered,
    // `no_service` and not held back, and a SYN is held back at the global limit.
    let rst = segment(false, &[], 80, TcpFlags::RST, 1, 0, b"");
    let syn = segment(false, &[], 80, TcpFlags::SYN, 1, 0, b"");
    assert_eq!(run(&mut p, &rst).0, Verdict::Drop(Outcome::NoService));
    assert_eq!(run(&mut p, &syn).0, Verdict::Drop(Outcome::TcpResetSuppressed));
    assert_eq!(p.reset_counters.limited[0][Limit::Global.index()].get(), held + 1);
    // Resets turned off on the same bucket: what the lcore remembered does not outlive it.
    let off = TcpResetConfig { enabled: false, ..cfg };
    let bucket = p.tcp_reset.global().clone();
    p.tcp_reset.apply(&off, bucket, 1);
    assert_eq!(run(&mut p, &syn).0, Verdict::Drop(Outcome::NoService));
    assert_eq!(p.reset_counters.limited[0][Limit::Global.index()].get(), held + 1);
}

#[test]
fn an_exempt_source_skips_every_limit_and_the_rest_keep_theirs() {
    // An operator's scanner in 198.51.100.0/24: every SYN answered, through a per-destination
    // burst of 2 and a global budget of 5 that a flood from elsewhere has spent; by the fast
    // path and the general one alike.
    use crate::pipeline::icmp_error::ExemptSet;
    let cfg = TcpResetConfig {
        peer_burst: 2,
        peer_interval_ms: 1000,
        msgs_per_sec: 1,
        burst: 5,
        exempt: ExemptSet::new(vec!["198.51.100.0/24".parse().unwrap()]).unwrap(),
        ..Default::default()
    };
    for general in [false, true] {
        let mut p = pipeline();
        p.tcp_reset.apply(&cfg, cfg.global_bucket(Instant(0)), 1);
        let mut go = |f: &[u8]| {
            let mut b = HeapBuf::new(f);
            let v = if general {
                p.process_general(0, &mut b, Instant(1_000_000_000))
            } else {
                p.process(0, &mut b, Instant(1_000_000_000))
            };
            v.outcome()
        };
        // 200 sources once each: the global budget (5 credits, each reset taking 0, 1 or 2 at
        // random) lets a few through; 40 would need 35 draws of 0 in 40 (probability < 1e-10).
        let flood: Vec<Outcome> = (0..200u32)
            .map(|i| go(&syn_from(Ipv4Addr::from(0xcb00_7100 + i))))
            .collect();
        let sent = flood.iter().filter(|&&o| o == Outcome::TcpReset).count();
        assert!(
            (1..40).contains(&sent),
            "general {general}: {sent} of the flood answered"
        );
        let scanner: Vec<Outcome> = (0..20).map(|_| go(&syn_from(THEM))).collect();
        assert!(
            scanner.iter().all(|&o| o == Outcome::TcpReset),
            "general {general}: {scanner:?}"
        );
        assert_eq!(
            go(&syn_from(Ipv4Addr::new(203, 0, 113, 99))),
            Outcome::TcpResetSuppressed
        );
    }
}
