//! Eligibility, the limiter's order of checks with simulated time, and the builder's bytes.

use super::limit::credits_for_draw;
use super::*;
use crate::buf::{HeapBuf, PacketBuf};
use crate::pipeline::parse::tests::{udp_bytes, v4_frame, v6_frame, MAC};
use crate::wire::{
    EtherType, EthernetAddress, EthernetFrame, Icmpv4Packet, Icmpv6Packet, Ipv4Packet, Ipv6Packet, Toeplitz,
};
use proptest::prelude::*;

const MS: u64 = 1_000_000;
/// A draw that takes exactly one global credit.
const ONE: u32 = 0x8000_0000;
const ME4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const THEM4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);

fn me6() -> Ipv6Addr {
    "2001:db8::1".parse().unwrap()
}
fn them6() -> Ipv6Addr {
    "2001:db8::7".parse().unwrap()
}
fn at(ms: u64) -> Instant {
    Instant(ms * MS)
}
fn parse(v: &[u8]) -> Parsed {
    Parsed::parse(v, &Toeplitz::default(), None).unwrap()
}
fn udp4(src: Ipv4Addr, dst: Ipv4Addr) -> Vec<u8> {
    v4_frame(src, dst, IpProtocol::UDP, &[], 0, &udp_bytes(5000, 9, b"hello"))
}
fn udp6(src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
    v6_frame(src, dst, IpProtocol::UDP, &[], 64, &udp_bytes(5000, 9, b"hello"))
}
/// The caller's lcore-local generator, as tests have it (xorshift64).
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 32) as u32
    }
}

/// A draw for paths that must not reach step (e).
fn no_draw() -> u32 {
    panic!("the global credit was consumed on a path that must not reach step (e)")
}
fn limiter(cfg: &IcmpConfig) -> IcmpLimiter {
    IcmpLimiter::new(cfg, cfg.global_bucket(Instant(0)), 0x5eed)
}
/// `decide` about a UDP packet from `src` to us.
fn decide4(l: &mut IcmpLimiter, now: Instant, src: Ipv4Addr) -> Decision {
    let v = udp4(src, ME4);
    l.decide(now, ErrorKind::PortUnreachable, &parse(&v), &v, || ONE)
}

// ---- eligibility ----------------------------------------------------------------------------

const PU: ErrorKind = ErrorKind::PortUnreachable;
const TE: ErrorKind = ErrorKind::ReassemblyTimeExceeded;
const PTB: ErrorKind = ErrorKind::PacketTooBig { mtu: 1280 };
const FN: ErrorKind = ErrorKind::FragmentationNeeded { mtu: 1400 };

fn ok(kind: ErrorKind, v: &[u8]) -> bool {
    eligible(kind, &parse(v), v)
}

#[test]
fn unicast_packets_from_one_host_are_eligible() {
    assert!(ok(PU, &udp4(THEM4, ME4)));
    assert!(ok(ErrorKind::ProtocolUnreachable, &udp4(THEM4, ME4)));
    assert!(ok(TE, &udp4(THEM4, ME4)));
    assert!(ok(FN, &udp4(THEM4, ME4)));
    assert!(ok(PU, &udp6(them6(), me6())));
    assert!(ok(TE, &udp6(them6(), me6())));
    assert!(ok(PTB, &udp6(them6(), me6())));
}

#[test]
fn kinds_exist_in_their_family_only() {
    assert!(!ok(ErrorKind::ProtocolUnreachable, &udp6(them6(), me6())));
    assert!(!ok(FN, &udp6(them6(), me6())));
    assert!(!ok(PTB, &udp4(THEM4, ME4)));
    assert_eq!(PU.type_code(IpVersion::V4), Some((3, 3)));
    assert_eq!(PU.type_code(IpVersion::V6), Some((1, 4)));
    assert_eq!(ErrorKind::ProtocolUnreachable.type_code(IpVersion::V4), Some((3, 2)));
    assert_eq!(TE.type_code(IpVersion::V4), Some((11, 1)));
    assert_eq!(TE.type_code(IpVersion::V6), Some((3, 1)));
    assert_eq!(FN.type_code(IpVersion::V4), Some((3, 4)));
    assert_eq!(PTB.type_code(IpVersion::V6), Some((2, 0)));
}

#[test]
fn never_about_an_icmp_error() {
    // RFC 1122 §3.2.2 / RFC 1812 §4.3.2.7: errors 3, 4, 5, 11, 12; Linux also refuses types it
    // does not know (> 18).
    for (ty, want) in [
        (0u8, true),
        (8, true),
        (13, true),
        (18, true),
        (3, false),
        (4, false),
        (5, false),
        (11, false),
        (12, false),
        (19, false),
        (200, false),
    ] {
        let v = v4_frame(THEM4, ME4, IpProtocol::ICMP, &[], 0, &[ty, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(ok(TE, &v), want, "ICMP type {ty}");
    }
    // A first fragment too short to hold the type: it might be an error.
    let v = v4_frame(THEM4, ME4, IpProtocol::ICMP, &[], 0x2000, &[]);
    assert!(!ok(TE, &v));
    let v = v4_frame(THEM4, ME4, IpProtocol::ICMP, &[], 0x2000, &[8]);
    assert!(ok(TE, &v));

    // RFC 4443 §2.4(e.1), (e.2): ICMPv6 errors (< 128) and Redirect (137).
    for (ty, want) in [
        (1u8, false),
        (2, false),
        (3, false),
        (4, false),
        (127, false),
        (137, false),
        (128, true),
        (129, true),
        (135, true),
    ] {
        let v = v6_frame(them6(), me6(), IpProtocol::ICMPV6, &[], 64, &[ty, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(ok(PU, &v), want, "ICMPv6 type {ty}");
        assert_eq!(ok(PTB, &v), want, "ICMPv6 type {ty}, Packet Too Big");
    }
}

#[test]
fn never_about_a_non_first_fragment() {
    let first = v4_frame(THEM4, ME4, IpProtocol::UDP, &[], 0x2000, &udp_bytes(1, 2, &[0; 8]));
    assert!(ok(TE, &first));
    let later = v4_frame(THEM4, ME4, IpProtocol::UDP, &[], 3, &[0; 8]);
    assert!(!ok(TE, &later));
    assert!(!ok(FN, &later));
    let frag_first = [17u8, 0, 0, 1, 0, 0, 0, 5];
    let v = v6_frame(
        them6(),
        me6(),
        IpProtocol::IPV6_FRAG,
        &frag_first,
        64,
        &udp_bytes(1, 2, &[0; 8]),
    );
    assert!(ok(TE, &v));
    let frag_later = [17u8, 0, 0, 0x10, 0, 0, 0, 5];
    let v = v6_frame(them6(), me6(), IpProtocol::IPV6_FRAG, &frag_later, 64, &[0; 8]);
    assert!(!ok(TE, &v));
    assert!(!ok(PTB, &v));
}

#[test]
fn never_about_a_packet_to_a_group_v4() {
    for dst in [
        Ipv4Addr::BROADCAST,
        Ipv4Addr::new(224, 0, 0, 1),
        Ipv4Addr::new(239, 1, 2, 3),
    ] {
        assert!(!ok(PU, &udp4(THEM4, dst)), "{dst}");
        assert!(!ok(FN, &udp4(THEM4, dst)), "{dst}: no PMTU exception for IPv4");
    }
    // Unicast IP in a link-layer broadcast or multicast frame (RFC 1812 §4.3.2.7).
    for mac in [[0xff; 6], [0x01, 0x00, 0x5e, 0, 0, 1]] {
        let mut v = udp4(THEM4, ME4);
        v[..6].copy_from_slice(&mac);
        assert!(!ok(PU, &v), "{mac:x?}");
        assert!(!ok(FN, &v), "{mac:x?}");
    }
}

#[test]
fn never_about_a_packet_to_a_group_v6_except_packet_too_big() {
    let all_nodes: Ipv6Addr = "ff02::1".parse().unwrap();
    let v = udp6(them6(), all_nodes);
    assert!(!ok(PU, &v));
    assert!(!ok(TE, &v));
    assert!(ok(PTB, &v), "RFC 4443 §2.4(e.3) exception");
    for mac in [[0x33, 0x33, 0, 0, 0, 1], [0xff; 6]] {
        let mut v = udp6(them6(), me6());
        v[..6].copy_from_slice(&mac);
        assert!(!ok(PU, &v), "(e.4), (e.5)");
        assert!(ok(PTB, &v), "(e.4), (e.5) exception");
    }
}

#[test]
fn never_to_a_source_that_is_not_one_host() {
    for src in [
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::new(0, 1, 2, 3),
        Ipv4Addr::LOCALHOST,
        Ipv4Addr::new(127, 9, 9, 9),
        Ipv4Addr::BROADCAST,
        Ipv4Addr::new(224, 0, 0, 5),
        Ipv4Addr::new(240, 0, 0, 1),
    ] {
        assert!(!ok(PU, &udp4(src, ME4)), "{src}");
        assert!(!ok(FN, &udp4(src, ME4)), "{src}");
    }
    assert!(ok(PU, &udp4(Ipv4Addr::new(1, 0, 0, 1), ME4)));
    assert!(ok(PU, &udp4(Ipv4Addr::new(223, 255, 255, 254), ME4)));
    for src in ["::", "::1", "ff02::1", "ff05::2"] {
        let src: Ipv6Addr = src.parse().unwrap();
        assert!(!ok(PU, &udp6(src, me6())), "{src}");
        assert!(!ok(PTB, &udp6(src, me6())), "{src}");
    }
}

// ---- the limiter --------------------------------------------------------------------------

#[test]
fn type_masks_like_linux() {
    let m = 0x1818;
    assert!(v4_type_limited(m, 3, 3));
    assert!(v4_type_limited(m, 3, 2));
    assert!(!v4_type_limited(m, 3, 4), "Fragmentation Needed is never limited");
    assert!(!v4_type_limited(u32::MAX, 3, 4));
    assert!(v4_type_limited(m, 11, 1));
    assert!(v4_type_limited(m, 12, 0));
    assert!(v4_type_limited(m, 4, 0));
    assert!(!v4_type_limited(m, 0, 0), "echo reply is not in the default mask");
    assert!(!v4_type_limited(m, 5, 0));
    assert!(!v4_type_limited(u32::MAX, 19, 0), "unknown types are never limited");
    assert!(!v4_type_limited(0, 3, 3));
    // ICMPv6 through the ICMP (v4) counterparts' bits.
    assert!(v6_type_limited(m, 1));
    assert!(!v6_type_limited(m, 2), "Packet Too Big is never limited");
    assert!(!v6_type_limited(u32::MAX, 2));
    assert!(v6_type_limited(m, 3));
    assert!(v6_type_limited(m, 4));
    assert!(
        v6_type_limited(0, 0) && v6_type_limited(0, 100),
        "unassigned error types"
    );
    assert!(
        !v6_type_limited(u32::MAX, 128) && !v6_type_limited(u32::MAX, 255),
        "informational"
    );
    assert!(!v6_type_limited(1 << 11 | 1 << 12, 1));
    assert!(!v6_type_limited(1 << 3 | 1 << 12, 3));
    assert!(!v6_type_limited(1 << 3 | 1 << 11, 4));
}

#[test]
fn global_burst_of_50_and_nothing_touched_when_suppressed_globally() {
    let mut l = limiter(&IcmpConfig::default());
    for i in 0..50u8 {
        assert_eq!(
            decide4(&mut l, at(0), Ipv4Addr::new(203, 0, 113, i)),
            Decision::Send,
            "{i}"
        );
    }
    assert_eq!(l.global().credit(), 0);
    let occupied = l.peers().occupied();
    let v = udp4(Ipv4Addr::new(203, 0, 113, 200), ME4);
    assert_eq!(
        l.decide(at(0), PU, &parse(&v), &v, no_draw),
        Decision::Suppressed(Limit::Global)
    );
    assert_eq!(
        l.peers().occupied(),
        occupied,
        "(c) stops before the per-destination table"
    );
    // The source turned away by the global limit still has its whole burst later.
    for i in 0..6 {
        assert_eq!(
            decide4(&mut l, at(1000), Ipv4Addr::new(203, 0, 113, 200)),
            Decision::Send,
            "{i}"
        );
    }
}

#[test]
fn global_refill_granularity_is_20ms() {
    let mut l = limiter(&IcmpConfig::default());
    let mut src = (0..).map(|i: u32| Ipv4Addr::from(0xcb00_7100 + i)); // 203.0.113.0 + i
    assert!(
        (0..1000).any(|_| decide4(&mut l, at(0), src.next().unwrap()) != Decision::Send),
        "never refused"
    );
    for ms in [1, 10, 19] {
        assert_eq!(
            decide4(&mut l, at(ms), src.next().unwrap()),
            Decision::Suppressed(Limit::Global),
            "{ms} ms"
        );
    }
    let sent = (0..100)
        .take_while(|_| decide4(&mut l, at(20), src.next().unwrap()) == Decision::Send)
        .count();
    assert_eq!(sent, 20, "1000/s refilled at 20 ms: 20 credits");
}

#[test]
fn per_destination_burst_of_6_then_one_per_second() {
    let cfg = IcmpConfig {
        msgs_per_sec: 1_000_000,
        burst: 1_000_000,
        ..Default::default()
    };
    let mut l = limiter(&cfg);
    for i in 0..6 {
        assert_eq!(decide4(&mut l, at(0), THEM4), Decision::Send, "{i}");
    }
    assert_eq!(decide4(&mut l, at(0), THEM4), Decision::Suppressed(Limit::Peer));
    assert_eq!(decide4(&mut l, at(999), THEM4), Decision::Suppressed(Limit::Peer));
    assert_eq!(decide4(&mut l, at(1000), THEM4), Decision::Send);
    assert_eq!(decide4(&mut l, at(1500), THEM4), Decision::Suppressed(Limit::Peer));
    assert_eq!(decide4(&mut l, at(2000), THEM4), Decision::Send);
    // Another destination is not affected.
    assert_eq!(
        decide4(&mut l, at(2000), Ipv4Addr::new(198, 51, 100, 8)),
        Decision::Send
    );
    // IPv6, same rule (plen 128: no scaling).
    let v = udp6(them6(), me6());
    let p = parse(&v);
    let n = (0..10)
        .filter(|_| l.decide(at(0), PU, &p, &v, || ONE) == Decision::Send)
        .count();
    assert_eq!(n, 6);
    assert_eq!(l.decide(at(999), PU, &p, &v, || ONE), Decision::Suppressed(Limit::Peer));
    assert_eq!(l.decide(at(1000), PU, &p, &v, || ONE), Decision::Send);
}

#[test]
fn unlimited_kinds_skip_every_limit_and_spend_nothing() {
    let cfg = IcmpConfig {
        ratemask: u32::MAX,
        burst: 0,
        msgs_per_sec: 0,
        ..Default::default()
    };
    let mut l = limiter(&cfg);
    assert_eq!(decide4(&mut l, at(0), THEM4), Decision::Suppressed(Limit::Global));
    let v4 = udp4(THEM4, ME4);
    let v6 = udp6(them6(), me6());
    for _ in 0..100 {
        assert_eq!(l.decide(at(0), FN, &parse(&v4), &v4, no_draw), Decision::Send);
        assert_eq!(l.decide(at(0), PTB, &parse(&v6), &v6, no_draw), Decision::Send);
    }
    assert_eq!(l.peers().occupied(), 0);
    // Types outside the mask: Time Exceeded without bit 11, Port Unreachable without bit 3 (for
    // IPv6 too, through its ICMP counterpart).
    let cfg = IcmpConfig {
        ratemask: 0x1818 & !(1 << 11),
        burst: 0,
        msgs_per_sec: 0,
        ..Default::default()
    };
    let mut l = limiter(&cfg);
    assert_eq!(l.decide(at(0), TE, &parse(&v4), &v4, no_draw), Decision::Send);
    assert_eq!(l.decide(at(0), TE, &parse(&v6), &v6, no_draw), Decision::Send);
    assert_eq!(
        l.decide(at(0), PU, &parse(&v6), &v6, no_draw),
        Decision::Suppressed(Limit::Global)
    );
    let cfg = IcmpConfig {
        ratemask: 0,
        burst: 0,
        msgs_per_sec: 0,
        ..Default::default()
    };
    let mut l = limiter(&cfg);
    assert_eq!(l.decide(at(0), PU, &parse(&v4), &v4, no_draw), Decision::Send);
    assert_eq!(l.decide(at(0), PU, &parse(&v6), &v6, no_draw), Decision::Send);
}

#[test]
fn ineligible_before_anything_else() {
    let mut l = limiter(&IcmpConfig {
        ratemask: 0,
        ..Default::default()
    });
    let v = udp4(THEM4, Ipv4Addr::BROADCAST);
    assert_eq!(l.decide(at(0), PU, &parse(&v), &v, no_draw), Decision::Ineligible);
    let v = udp4(THEM4, ME4);
    assert_eq!(l.decide(at(0), PTB, &parse(&v), &v, no_draw), Decision::Ineligible);
    assert_eq!(l.global().credit(), 50);
}

#[test]
fn exempt_sources_get_50_back_to_back() {
    // glibc's test: 50 iterations of UDP to a closed port, each must get its error.
    let cfg = IcmpConfig {
        exempt: ExemptSet::new(vec![
            "198.51.100.0/24".parse().unwrap(),
            "2001:db8:7::/48".parse().unwrap(),
        ])
        .unwrap(),
        ..Default::default()
    };
    let mut l = limiter(&cfg);
    // Drain the global budget first: exempt sources do not need it.
    for i in 0..50u8 {
        assert_eq!(decide4(&mut l, at(0), Ipv4Addr::new(203, 0, 113, i)), Decision::Send);
    }
    let v = udp4(THEM4, ME4);
    let p = parse(&v);
    for i in 0..50 {
        assert_eq!(l.decide(at(0), PU, &p, &v, no_draw), Decision::Send, "iteration {i}");
    }
    let trusted6: Ipv6Addr = "2001:db8:7::42".parse().unwrap();
    let v = udp6(trusted6, me6());
    for i in 0..50 {
        assert_eq!(l.decide(at(0), PU, &parse(&v), &v, no_draw), Decision::Send, "v6 {i}");
    }
    // Others are still limited.
    assert_eq!(
        decide4(&mut l, at(0), Ipv4Addr::new(198, 51, 101, 7)),
        Decision::Suppressed(Limit::Global)
    );
    // Exemption lifts limits, not the RFCs: a loopback source stays ineligible.
    let mut l = limiter(&IcmpConfig {
        exempt: ExemptSet::new(vec!["127.0.0.0/8".parse().unwrap()]).unwrap(),
        ..Default::default()
    });
    assert_eq!(decide4(&mut l, at(0), Ipv4Addr::LOCALHOST), Decision::Ineligible);
}

#[test]
fn a_busy_source_does_not_eat_the_others_budget() {
    // Eric Dumazet's review of "net: optimize ICMP-reply code path": one source at 1000 pps
    // took the whole global budget. Here one source floods at 100 packets a millisecond for
    // 2 s while a new source sends one packet every 2 ms: every one of them gets its error.
    let mut l = limiter(&IcmpConfig::default());
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    let flood = udp4(THEM4, ME4);
    let fp = parse(&flood);
    let mut flood_sent = 0;
    let mut others = 0;
    for ms in 0..2000u64 {
        for k in 0..100 {
            let now = Instant(ms * MS + k * 10_000);
            if l.decide(now, PU, &fp, &flood, || rng.next()) == Decision::Send {
                flood_sent += 1;
            }
        }
        if ms % 2 == 0 {
            let v = udp4(Ipv4Addr::from(0x0a00_0000 + ms as u32), ME4);
            assert_eq!(
                l.decide(Instant(ms * MS + 5 * MS / 10), PU, &parse(&v), &v, || rng.next()),
                Decision::Send,
                "new source at {ms} ms"
            );
            others += 1;
        }
    }
    assert_eq!(others, 1000);
    assert_eq!(flood_sent, 6 + 1, "the flooder's burst, then one a second");
}

#[test]
fn two_lcores_share_the_global_budget_exactly() {
    // Two RX lcores, each with its own limiter and per-destination table, one global bucket with
    // no refill. The credits their sends took add up to the bucket: nothing lost, nothing spent
    // twice (plus at most the one consumption that hit the floor).
    const CREDIT: u32 = 40_000;
    let cfg = IcmpConfig {
        msgs_per_sec: 0,
        burst: CREDIT,
        peer_burst: 1000,
        ..Default::default()
    };
    let global = cfg.global_bucket(Instant(0));
    let threads: Vec<_> = (0..2u32)
        .map(|t| {
            let (cfg, global) = (cfg.clone(), Arc::clone(&global));
            std::thread::spawn(move || {
                let mut l = IcmpLimiter::new(&cfg, global, t as u64);
                let mut rng = XorShift(0x9e37_79b9_7f4a_7c15 ^ t as u64);
                let (mut taken, mut sent, mut src) = (0u64, 0u64, 0u32);
                loop {
                    src += 1;
                    let v = udp4(Ipv4Addr::from(0x0a00_0000 | t << 23 | src >> 9), ME4);
                    let mut last = 0;
                    let d = l.decide(at(0), PU, &parse(&v), &v, || {
                        last = rng.next();
                        last
                    });
                    match d {
                        Decision::Send => {
                            taken += credits_for_draw(last) as u64;
                            sent += 1;
                        }
                        Decision::Suppressed(Limit::Global) => break,
                        other => panic!("{other:?}"),
                    }
                }
                (taken, sent)
            })
        })
        .collect();
    let r: Vec<(u64, u64)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let taken: u64 = r.iter().map(|x| x.0).sum();
    let sent: u64 = r.iter().map(|x| x.1).sum();
    assert_eq!(global.credit(), 0);
    assert!(taken == CREDIT as u64 || taken == CREDIT as u64 + 1, "taken {taken}");
    let ratio = sent as f64 / CREDIT as f64;
    assert!((0.97..1.03).contains(&ratio), "sent {sent} for {CREDIT} credits");
    assert!(r.iter().all(|x| x.1 > 0), "{r:?}");
}

#[test]
fn apply_keeps_the_table_unless_its_size_interval_or_burst_changes() {
    let cfg = IcmpConfig::default();
    let mut l = limiter(&cfg);
    assert!(
        (0..1000).any(|_| decide4(&mut l, at(0), THEM4) != Decision::Send),
        "never refused"
    );
    let g = Arc::clone(l.global());
    l.apply(
        &IcmpConfig {
            burst: 10,
            ..cfg.clone()
        },
        Arc::clone(&g),
        1,
    );
    assert_eq!(
        decide4(&mut l, at(0), THEM4),
        Decision::Suppressed(Limit::Peer),
        "remembered"
    );
    l.apply(
        &IcmpConfig {
            peer_table_size: 1024,
            ..cfg.clone()
        },
        g,
        1,
    );
    assert_eq!(l.peers().size(), 1024);
    assert_eq!(decide4(&mut l, at(0), THEM4), Decision::Send, "a new table forgets");
    // A bucket is a time that means something for one interval and burst: either changing
    // makes a new table too.
    for changed in [
        IcmpConfig {
            peer_table_size: 1024,
            peer_interval_ms: 500,
            ..cfg.clone()
        },
        IcmpConfig {
            peer_table_size: 1024,
            peer_interval_ms: 500,
            peer_burst: 3,
            ..cfg.clone()
        },
    ] {
        assert!(
            (0..1000).any(|_| decide4(&mut l, at(0), THEM4) != Decision::Send),
            "never refused"
        );
        l.apply(&changed, Arc::clone(l.global()), 1);
        assert_eq!(decide4(&mut l, at(0), THEM4), Decision::Send, "a new table forgets");
    }
}

// ---- config, prefixes, labels -------------------------------------------------------------

#[test]
fn defaults_are_linuxs() {
    let d = IcmpConfig::default();
    assert_eq!(
        (d.ratemask, d.msgs_per_sec, d.burst, d.peer_interval_ms, d.peer_burst),
        (0x1818, 1000, 50, 1000, 6)
    );
    assert_eq!(d.peer_table_size, 4096);
    assert!(d.exempt.is_empty());
}

#[test]
fn prefixes_parse_and_contain() {
    let p: Prefix = "198.51.100.0/24".parse().unwrap();
    assert_eq!((p.addr(), p.len()), (IpAddr::V4(Ipv4Addr::new(198, 51, 100, 0)), 24));
    assert_eq!(p.to_string(), "198.51.100.0/24");
    assert!(p.contains(IpAddr::V4(THEM4)));
    assert!(p.contains("198.51.100.255".parse().unwrap()));
    assert!(!p.contains("198.51.101.0".parse().unwrap()));
    assert!(!p.contains("::ffff:198.51.100.7".parse().unwrap()), "other family");
    let p6: Prefix = "2001:db8:1::/48".parse().unwrap();
    assert!(p6.contains("2001:db8:1:ffff::9".parse().unwrap()));
    assert!(!p6.contains("2001:db8:2::9".parse().unwrap()));
    assert!(!p6.contains(IpAddr::V4(THEM4)));
    let host: Prefix = "192.0.2.9".parse().unwrap();
    assert_eq!(host.len(), 32);
    assert!(host.contains("192.0.2.9".parse().unwrap()));
    assert!(!host.contains("192.0.2.8".parse().unwrap()));
    let host6: Prefix = "2001:db8::9".parse().unwrap();
    assert_eq!(host6.len(), 128);
    assert!(host6.contains("2001:db8::9".parse().unwrap()));
    assert!(!host6.contains("2001:db8::8".parse().unwrap()));
    let all: Prefix = "0.0.0.0/0".parse().unwrap();
    assert!(all.is_empty() && all.contains(IpAddr::V4(THEM4)));
    let all6: Prefix = "::/0".parse().unwrap();
    assert!(all6.contains("ff02::1".parse().unwrap()));
    assert_eq!("198.51.100.1/24".parse::<Prefix>(), Err(PrefixError::HostBits));
    assert_eq!("2001:db8::1/64".parse::<Prefix>(), Err(PrefixError::HostBits));
    assert_eq!("198.51.100.0/33".parse::<Prefix>(), Err(PrefixError::Length));
    assert_eq!("::/129".parse::<Prefix>(), Err(PrefixError::Length));
    assert_eq!("::/300".parse::<Prefix>(), Err(PrefixError::Length));
    for bad in [
        "",
        "/24",
        "198.51.100/24",
        "198.51.100.0/",
        "198.51.100.0/-1",
        "x/8",
        "1.2.3.4/+8",
    ] {
        assert_eq!(bad.parse::<Prefix>(), Err(PrefixError::Syntax), "{bad:?}");
    }
}

#[test]
fn metric_labels() {
    assert_eq!(PU.type_label(), "port_unreachable");
    assert_eq!(ErrorKind::ProtocolUnreachable.type_label(), "protocol_unreachable");
    assert_eq!(TE.type_label(), "time_exceeded");
    assert_eq!(FN.type_label(), "frag_needed");
    assert_eq!(PTB.type_label(), "packet_too_big");
    assert_eq!(family_label(IpVersion::V4), "ipv4");
    assert_eq!(family_label(IpVersion::V6), "ipv6");
    assert_eq!(Limit::Global.label(), "global");
    assert_eq!(Limit::Peer.label(), "peer");
    for (i, l) in Limit::ALL.iter().enumerate() {
        assert_eq!(l.index(), i);
    }
    for k in [PU, ErrorKind::ProtocolUnreachable, TE, FN, PTB] {
        assert_eq!(TYPE_LABELS[k.type_index()], k.type_label());
    }
}

// ---- the builder --------------------------------------------------------------------------

fn build(v: &[u8], local: IpAddr, kind: ErrorKind) -> Option<HeapBuf> {
    let p = parse(v);
    let mut b = HeapBuf::new(v);
    build_in_place(&mut b, &p, MAC, local, kind, 0xbeef).then_some(b)
}

#[test]
fn port_unreachable_v4_golden() {
    let v = udp4(THEM4, ME4);
    let b = build(&v, IpAddr::V4(ME4), PU).unwrap();
    #[rustfmt::skip]
    let expect: [u8; 75] = [
        // Ethernet: back to the sender, from us
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00,
        // IPv4: precedence 6, total 61, ident 0xbeef, DF (atomic), TTL 64, ICMP, us -> them
        0x45, 0xc0, 0x00, 0x3d, 0xbe, 0xef, 0x40, 0x00, 0x40, 0x01, 0x8e, 0xd4,
        0xc0, 0x00, 0x02, 0x01, 0xc6, 0x33, 0x64, 0x07,
        // ICMP Destination Unreachable, Port Unreachable, unused
        0x03, 0x03, 0xa5, 0x8c, 0x00, 0x00, 0x00, 0x00,
        // the offending datagram, whole
        0x45, 0x00, 0x00, 0x21, 0x12, 0x34, 0x00, 0x00, 0x40, 0x11, 0x7c, 0x5c,
        0xc6, 0x33, 0x64, 0x07, 0xc0, 0x00, 0x02, 0x01,
        0x13, 0x88, 0x00, 0x09, 0x00, 0x0d, 0x00, 0x00, 0x68, 0x65, 0x6c, 0x6c, 0x6f,
    ];
    assert_eq!(b.data(), &expect[..]);
    let f = EthernetFrame::new_checked(b.data()).unwrap();
    let ip = Ipv4Packet::new_checked(f.payload()).unwrap();
    assert!(ip.verify_checksum());
    assert!(Icmpv4Packet::new_checked(ip.payload()).unwrap().verify_checksum());
}

#[test]
fn port_unreachable_v6_golden() {
    let v = udp6(them6(), me6());
    let b = build(&v, IpAddr::V6(me6()), PU).unwrap();
    #[rustfmt::skip]
    let expect: [u8; 115] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x86, 0xdd,
        // IPv6: payload 61, ICMPv6, hop limit 64, us -> them
        0x60, 0x00, 0x00, 0x00, 0x00, 0x3d, 0x3a, 0x40,
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01,
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x07,
        // ICMPv6 Destination Unreachable, Port Unreachable, unused
        0x01, 0x04, 0x7e, 0xd2, 0x00, 0x00, 0x00, 0x00,
        // the offending packet, whole
        0x60, 0x00, 0x00, 0x00, 0x00, 0x0d, 0x11, 0x40,
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x07,
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01,
        0x13, 0x88, 0x00, 0x09, 0x00, 0x0d, 0x00, 0x00, 0x68, 0x65, 0x6c, 0x6c, 0x6f,
    ];
    assert_eq!(b.data(), &expect[..]);
    let f = EthernetFrame::new_checked(b.data()).unwrap();
    let ip = Ipv6Packet::new_checked(f.payload()).unwrap();
    assert!(Icmpv6Packet::new_checked(ip.payload())
        .unwrap()
        .verify_checksum(&me6(), &them6()));
}

/// Checks an error built from the frame `orig` (offending IP packet at `l3`): headers, lengths,
/// checksums (by the wire layer's own verifiers), type and code, and the quote. Returns the ICMP
/// message.
fn check_error(out: &[u8], orig: &[u8], p: &Parsed, local: IpAddr, kind: ErrorKind) -> Vec<u8> {
    let l3 = p.l3_offset as usize;
    let orig_ip = &orig[l3..p.ip_end as usize];
    let f = EthernetFrame::new_checked(out).unwrap();
    assert_eq!(f.header_len(), l3);
    assert_eq!(f.dst_addr(), EthernetAddress::from_bytes(&orig[6..12]));
    assert_eq!(f.src_addr(), MAC);
    assert_eq!(&out[12..l3 - 2], &orig[12..l3 - 2], "VLAN tags kept");
    let (ty, code) = kind.type_code(p.version).unwrap();
    let msg = match (local, p.src) {
        (IpAddr::V4(me), IpAddr::V4(them)) => {
            assert_eq!(f.ethertype(), EtherType::IPV4);
            let ip = Ipv4Packet::new_checked(f.payload()).unwrap();
            assert!(ip.verify_checksum());
            assert_eq!(ip.total_len(), f.payload().len());
            assert!(ip.total_len() <= IPV4_MAX_ERROR_LEN);
            assert_eq!((ip.src_addr(), ip.dst_addr()), (me, them));
            assert_eq!((ip.ttl(), ip.protocol(), ip.dont_frag()), (64, IpProtocol::ICMP, true));
            assert_eq!(ip.header_len(), 20);
            let icmp = Icmpv4Packet::new_checked(ip.payload()).unwrap();
            assert!(icmp.verify_checksum());
            assert_eq!((u8::from(icmp.msg_type()), icmp.code()), (ty, code));
            let want = orig_ip.len().min(IPV4_MAX_ERROR_LEN - 28);
            assert_eq!(icmp.data(), &orig_ip[..want]);
            ip.payload().to_vec()
        }
        (IpAddr::V6(me), IpAddr::V6(them)) => {
            assert_eq!(f.ethertype(), EtherType::IPV6);
            let ip = Ipv6Packet::new_checked(f.payload()).unwrap();
            assert_eq!(ip.total_len(), f.payload().len());
            assert!(ip.total_len() <= IPV6_MAX_ERROR_LEN);
            assert_eq!((ip.src_addr(), ip.dst_addr()), (me, them));
            assert_eq!((ip.hop_limit(), ip.next_header()), (64, IpProtocol::ICMPV6));
            let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
            assert!(icmp.verify_checksum(&me, &them));
            assert_eq!((u8::from(icmp.msg_type()), icmp.code()), (ty, code));
            let want = orig_ip.len().min(IPV6_MAX_ERROR_LEN - 48);
            assert_eq!(icmp.data(), &orig_ip[..want]);
            ip.payload().to_vec()
        }
        _ => unreachable!(),
    };
    msg
}

#[test]
fn quotes_are_cut_at_576_and_1280() {
    let v = v4_frame(THEM4, ME4, IpProtocol::UDP, &[], 0, &udp_bytes(1, 2, &[0x5a; 1400]));
    let b = build(&v, IpAddr::V4(ME4), PU).unwrap();
    check_error(b.data(), &v, &parse(&v), IpAddr::V4(ME4), PU);
    assert_eq!(b.len(), 14 + 576);
    let v = v6_frame(
        them6(),
        me6(),
        IpProtocol::UDP,
        &[],
        64,
        &udp_bytes(1, 2, &[0x5a; 1400]),
    );
    let b = build(&v, IpAddr::V6(me6()), PU).unwrap();
    check_error(b.data(), &v, &parse(&v), IpAddr::V6(me6()), PU);
    assert_eq!(b.len(), 14 + 1280);
}

#[test]
fn mtu_fields_and_other_kinds() {
    let v = udp4(THEM4, ME4);
    let b = build(&v, IpAddr::V4(ME4), FN).unwrap();
    let m = check_error(b.data(), &v, &parse(&v), IpAddr::V4(ME4), FN);
    assert_eq!(&m[4..8], &[0, 0, 0x05, 0x78], "unused, next-hop MTU 1400 (RFC 1191 §4)");
    for kind in [ErrorKind::ProtocolUnreachable, TE] {
        let b = build(&v, IpAddr::V4(ME4), kind).unwrap();
        let m = check_error(b.data(), &v, &parse(&v), IpAddr::V4(ME4), kind);
        assert_eq!(&m[4..8], &[0; 4]);
    }
    let v = udp6(them6(), me6());
    let b = build(&v, IpAddr::V6(me6()), ErrorKind::PacketTooBig { mtu: 0x0001_0500 }).unwrap();
    let m = check_error(
        b.data(),
        &v,
        &parse(&v),
        IpAddr::V6(me6()),
        ErrorKind::PacketTooBig { mtu: 0x0001_0500 },
    );
    assert_eq!(&m[4..8], &[0, 1, 5, 0], "MTU, 32 bits (RFC 4443 §3.2)");
    let b = build(&v, IpAddr::V6(me6()), TE).unwrap();
    check_error(b.data(), &v, &parse(&v), IpAddr::V6(me6()), TE);
}

#[test]
fn vlan_tags_and_ip_options_and_padding() {
    let v = v4_frame(THEM4, ME4, IpProtocol::UDP, &[1, 1, 1, 0], 0, &udp_bytes(1, 2, b"opts"));
    let mut t = v[..12].to_vec();
    t.extend_from_slice(&[0x88, 0xa8, 0x00, 0x07, 0x81, 0x00, 0x00, 0x2a]);
    t.extend_from_slice(&v[12..]);
    t.extend_from_slice(&[0xee; 9]); // Ethernet padding: not quoted
    let p = parse(&t);
    assert_eq!(p.l3_offset, 22);
    let mut b = HeapBuf::new(&t);
    assert!(build_in_place(&mut b, &p, MAC, IpAddr::V4(ME4), PU, 1));
    let m = check_error(b.data(), &t, &p, IpAddr::V4(ME4), PU);
    assert_eq!(
        m.len(),
        8 + 24 + 12,
        "the quote keeps the options and stops at the datagram's end"
    );
    assert_eq!(&b.data()[12..20], &[0x88, 0xa8, 0x00, 0x07, 0x81, 0x00, 0x00, 0x2a]);

    let v = udp6(them6(), me6());
    let mut t = v[..12].to_vec();
    t.extend_from_slice(&[0x81, 0x00, 0x00, 0x2a]);
    t.extend_from_slice(&v[12..]);
    let p = parse(&t);
    let mut b = HeapBuf::new(&t);
    assert!(build_in_place(&mut b, &p, MAC, IpAddr::V6(me6()), PU, 1));
    check_error(b.data(), &t, &p, IpAddr::V6(me6()), PU);
}

#[test]
fn without_headroom_the_quote_moves() {
    for v in [
        v4_frame(THEM4, ME4, IpProtocol::UDP, &[], 0, &udp_bytes(1, 2, &[7; 1000])),
        v6_frame(them6(), me6(), IpProtocol::UDP, &[], 64, &udp_bytes(1, 2, &[7; 1400])),
        udp4(THEM4, ME4),
    ] {
        let p = parse(&v);
        let local = match p.version {
            IpVersion::V4 => IpAddr::V4(ME4),
            IpVersion::V6 => IpAddr::V6(me6()),
        };
        let mut roomy = HeapBuf::new(&v);
        assert!(build_in_place(&mut roomy, &p, MAC, local, PU, 9));
        let mut tight = HeapBuf::with_room(&v, 0, 64);
        assert!(build_in_place(&mut tight, &p, MAC, local, PU, 9));
        assert_eq!(tight.data(), roomy.data());
    }
    // A short packet with no room at either end cannot grow by the headers.
    let v = udp4(THEM4, ME4);
    let mut b = HeapBuf::with_room(&v, 0, 0);
    assert!(!build_in_place(&mut b, &parse(&v), MAC, IpAddr::V4(ME4), PU, 9));
}

#[test]
fn refuses_what_it_cannot_build() {
    let v = udp4(THEM4, ME4);
    for (local, kind) in [
        (IpAddr::V6(me6()), PU),
        (IpAddr::V4(Ipv4Addr::UNSPECIFIED), PU),
        (IpAddr::V4(Ipv4Addr::new(224, 0, 0, 1)), PU),
        (IpAddr::V4(Ipv4Addr::BROADCAST), PU),
        (IpAddr::V4(ME4), PTB),
    ] {
        assert!(build(&v, local, kind).is_none(), "{local} {kind:?}");
    }
    let v = udp6(them6(), me6());
    for (local, kind) in [
        (IpAddr::V4(ME4), PU),
        (IpAddr::V6(Ipv6Addr::UNSPECIFIED), PU),
        (IpAddr::V6("ff02::1".parse().unwrap()), PU),
        (IpAddr::V6(me6()), FN),
        (IpAddr::V6(me6()), ErrorKind::ProtocolUnreachable),
    ] {
        assert!(build(&v, local, kind).is_none(), "{local} {kind:?}");
    }
}

#[test]
fn build_first_then_decide_is_possible() {
    // The benchmark's variant (d): the error is built, then the limiter refuses it.
    let mut l = limiter(&IcmpConfig {
        burst: 0,
        msgs_per_sec: 0,
        ..Default::default()
    });
    let v = udp4(THEM4, ME4);
    let p = parse(&v);
    let mut b = HeapBuf::new(&v);
    assert!(build_in_place(&mut b, &p, MAC, IpAddr::V4(ME4), PU, 1));
    assert_eq!(l.decide(at(0), PU, &p, &v, || ONE), Decision::Suppressed(Limit::Global));
}

// ---- properties ---------------------------------------------------------------------------

/// An offending frame: IPv4 (with options, maybe a fragment) or IPv6 (with extension headers,
/// maybe a fragment), UDP, TCP, ICMP or other, 0 to 2 VLAN tags, any payload, maybe padding.
fn arb_frame() -> impl Strategy<Value = Vec<u8>> {
    (
        any::<bool>(),
        0usize..3,
        prop_oneof![Just(17u8), Just(6u8), Just(1u8), Just(58u8), Just(47u8)],
        0usize..11,
        0u16..0x4000,
        proptest::collection::vec(any::<u8>(), 0..1600),
        0usize..20,
    )
        .prop_map(|(v6, tags, proto, opts, frag, mut payload, pad)| {
            // Mostly well-formed upper layers, so most frames parse and reach the builder.
            if proto == 17 && opts % 2 == 0 {
                payload = udp_bytes(1, 2, &payload);
            } else if proto == 6 && payload.len() >= 20 {
                payload[12] = 0x50;
            }
            let mut v = if v6 {
                let exts: Vec<u8> = if opts % 3 == 1 {
                    vec![proto, 0, 1, 4, 0, 0, 0, 0]
                } else if opts % 3 == 2 {
                    let om = (frag & 0x1fff) << 3 | (frag >> 13 & 1);
                    let mut f = vec![proto, 0];
                    f.extend_from_slice(&om.to_be_bytes());
                    f.extend_from_slice(&[0, 0, 0, 9]);
                    f
                } else {
                    vec![]
                };
                let first = match exts.len() {
                    0 => IpProtocol::from(proto),
                    _ if opts % 3 == 1 => IpProtocol::IPV6_OPTS,
                    _ => IpProtocol::IPV6_FRAG,
                };
                v6_frame(them6(), me6(), first, &exts, 64, &payload)
            } else {
                let options = vec![1u8; opts * 4];
                v4_frame(THEM4, ME4, IpProtocol::from(proto), &options, frag & 0x3fff, &payload)
            };
            for _ in 0..tags {
                v.splice(12..12, [0x81, 0x00, 0x00, 0x2a]);
            }
            v.extend(std::iter::repeat_n(0xee, pad));
            v
        })
}

const KINDS: [ErrorKind; 6] = [
    PU,
    ErrorKind::ProtocolUnreachable,
    TE,
    FN,
    PTB,
    ErrorKind::PacketTooBig { mtu: u32::MAX },
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn built_errors_are_always_valid(frame in arb_frame()) {
        let Ok(p) = Parsed::parse(&frame, &Toeplitz::default(), None) else {
            return Ok(());
        };
        let local = match p.version {
            IpVersion::V4 => IpAddr::V4(ME4),
            IpVersion::V6 => IpAddr::V6(me6()),
        };
        for kind in KINDS {
            let mut b = HeapBuf::new(&frame);
            let built = build_in_place(&mut b, &p, MAC, local, kind, 0x4242);
            prop_assert_eq!(built, kind.type_code(p.version).is_some());
            if built {
                check_error(b.data(), &frame, &p, local, kind);
            }
        }
    }

    #[test]
    fn arbitrary_bytes_and_mismatched_parses_never_panic(
        a in arb_frame(),
        junk in proptest::collection::vec(any::<u8>(), 0..300),
        headroom in 0usize..64,
    ) {
        let Ok(p) = Parsed::parse(&a, &Toeplitz::default(), None) else {
            return Ok(());
        };
        for kind in KINDS {
            for local in [IpAddr::V4(ME4), IpAddr::V6(me6())] {
                // The parse of one frame applied to other bytes, with little room.
                let mut b = HeapBuf::with_room(&junk, headroom, 16);
                let _ = build_in_place(&mut b, &p, MAC, local, kind, 1);
                let _ = eligible(kind, &p, &junk);
            }
        }
        // A random frame with its parse.
        let mut r = junk.clone();
        if r.len() >= 14 {
            r[12..14].copy_from_slice(if junk[0] & 1 == 0 { &[0x08, 0x00] } else { &[0x86, 0xdd] });
        }
        if let Ok(p) = Parsed::parse(&r, &Toeplitz::default(), None) {
            let mut l = limiter(&IcmpConfig::default());
            for kind in KINDS {
                let _ = l.decide(at(0), kind, &p, &r, || ONE);
                let mut b = HeapBuf::new(&r);
                let _ = build_in_place(&mut b, &p, MAC, IpAddr::V4(ME4), kind, 1);
            }
        }
    }
}

#[test]
fn a_long_exempt_list_exempts_its_sources_only() {
    // 65,536 host prefixes (the cap), 203.0.0.0 .. 203.0.255.255 every other address and a v6 /64
    // per index: found by the set as by a scan, with the global budget drained.
    let list: Vec<Prefix> = (0..MAX_EXEMPT as u32)
        .map(|i| {
            if i % 2 == 0 {
                Prefix::new(IpAddr::V4(Ipv4Addr::from(0xcb00_0000 | i)), 32).unwrap()
            } else {
                Prefix::new(
                    IpAddr::V6(Ipv6Addr::from(0x2001_0db8_0000_0000u128 << 64 | (i as u128) << 64)),
                    64,
                )
                .unwrap()
            }
        })
        .collect();
    let mut l = limiter(&IcmpConfig {
        exempt: ExemptSet::new(list).unwrap(),
        ..Default::default()
    });
    for i in 0..50u8 {
        assert_eq!(decide4(&mut l, at(0), Ipv4Addr::new(198, 18, 0, i)), Decision::Send);
    }
    assert_eq!(decide4(&mut l, at(0), Ipv4Addr::new(203, 0, 255, 254)), Decision::Send);
    assert_eq!(decide4(&mut l, at(0), Ipv4Addr::new(203, 0, 0, 0)), Decision::Send);
    assert_eq!(
        decide4(&mut l, at(0), Ipv4Addr::new(203, 0, 255, 255)),
        Decision::Suppressed(Limit::Global)
    );
    assert_eq!(
        decide4(&mut l, at(0), Ipv4Addr::new(203, 1, 0, 0)),
        Decision::Suppressed(Limit::Global)
    );
}
