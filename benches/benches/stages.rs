//! Micro-benchmarks of the data plane, in ns per packet, over heap buffers (no DPDK).
//!
//! `cargo bench -p benches` runs them all; `cargo bench -p benches -- pipeline/` a group. One
//! function per stage or path, each registered in `criterion_group!` at the bottom; the stages
//! still to come (see `benches/README.md`, "not yet measured") become further functions here,
//! with their inputs in `benches/src/lib.rs` and a test there that each input takes the path its
//! benchmark is named after.

use benches::{
    arp_request, buf, hash_for, ip_frame, parse_mix, pipeline, sim_group, sim_queue, tunnel, udp4, ME_IP, ME_MAC,
};
use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use fastpath::buf::{HeapBuf, NicChecksum, PacketBuf};
use fastpath::pipeline::flow_limit::FlowLimit;
use fastpath::pipeline::icmp_error::{self, ErrorKind, IcmpConfig, IcmpLimiter};
use fastpath::pipeline::reasm::sim::v4_fragment;
use fastpath::pipeline::reasm::{FragMeta, Insert, ReasmConfig, ReasmIo, Reassembler, Released};
use fastpath::pipeline::{tunnel as gre, FanoutState, Instant, Parsed, Pipeline, PortAddrs, Tables};
use fastpath::wire::{EthernetAddress, EthernetFrame, Toeplitz};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

/// Ethernet header parse: the length checks, addresses, EtherType and VLAN tags of one frame.
fn wire(c: &mut Criterion) {
    let mut g = c.benchmark_group("wire");
    g.throughput(Throughput::Elements(1));
    let untagged = udp4(ME_MAC, 40000, 9);
    let tagged = arp_request(ME_IP, Some(100));
    for (name, frame) in [("ethernet_parse", &untagged), ("ethernet_parse_vlan", &tagged)] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let f = EthernetFrame::new_checked(black_box(frame.as_slice())).expect("valid frame");
                // Fold the fields into one word: returning them all through black_box costs
                // more than the parse itself.
                let dst = f.dst_addr().is_multicast() || f.dst_addr() == ME_MAC;
                let src = f.src_addr().is_unicast();
                black_box((u16::from(f.ethertype()), f.header_len() as u8, dst, src))
            })
        });
    }
    g.finish();
}

/// The whole pipeline on one packet, per path. Paths that rewrite the packet in place (the ARP
/// answer) get a fresh copy per iteration, made outside the timed part.
fn pipeline_paths(c: &mut Criterion) {
    let mut g = c.benchmark_group("pipeline");
    g.throughput(Throughput::Elements(1));
    let mut p = pipeline();

    for (name, frame) in [
        ("arp_reply", arp_request(ME_IP, None)),
        ("arp_reply_vlan", arp_request(ME_IP, Some(100))),
    ] {
        let template = buf(&frame);
        g.bench_function(name, |b| {
            b.iter_batched_ref(
                || template.clone(),
                |pkt| black_box(p.process(0, pkt, Instant(0))),
                BatchSize::SmallInput,
            )
        });
    }

    // Drop paths leave the packet as it was, so one buffer serves every iteration.
    for (name, frame) in [
        ("drop_not_for_us", udp4(EthernetAddress([2, 0, 0, 0, 9, 9]), 40000, 9)),
        ("closed_port_udp", udp4(ME_MAC, 40000, 9)),
        ("drop_arp_ignored", arp_request(Ipv4Addr::new(192, 0, 2, 99), None)),
    ] {
        let mut pkt = buf(&frame);
        g.bench_function(name, |b| {
            b.iter(|| black_box(p.process(0, black_box(&mut pkt), Instant(0))))
        });
    }
    g.finish();
}

/// Fresh copies per batch for the benchmarks that rewrite their packet: a pool about the size of
/// a burst's worth of mbufs in flight, so the copies are warm in cache as received mbufs are,
/// rather than a large cold batch (criterion's `SmallInput`) that measures cache misses.
const POOL: u64 = 256;

/// Parse (Ethernet, VLAN, IPv4/IPv6, UDP/TCP) plus the software Toeplitz hash over the 4-tuple,
/// on a realistic mix (see [`parse_mix`]), and the hash alone.
fn parse_hash(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse");
    let mix = parse_mix();
    let h = Toeplitz::default();
    g.throughput(Throughput::Elements(mix.len() as u64));
    g.bench_function("parse_and_hash_mix", |b| {
        b.iter(|| {
            let mut acc = 0u32;
            for f in &mix {
                let p = Parsed::parse(black_box(f), &h, None).expect("valid");
                acc ^= p.hash ^ p.l4_offset as u32;
            }
            black_box(acc)
        })
    });
    g.bench_function("parse_mix_nic_hash", |b| {
        b.iter(|| {
            let mut acc = 0u32;
            for f in &mix {
                let p = Parsed::parse(black_box(f), &h, Some(0x1234_5678)).expect("valid");
                acc ^= p.hash ^ p.l4_offset as u32;
            }
            black_box(acc)
        })
    });
    // The parse alone, no hash, as the pipeline runs it: the general parser on every frame,
    // against the fixed-offset parse of the common frames (every frame of this mix is one).
    g.bench_function("general_parse_mix", |b| {
        b.iter(|| {
            let mut acc = 0u32;
            for f in &mix {
                let frame = EthernetFrame::new_checked(black_box(&f[..])).expect("valid");
                let mut p = Parsed::EMPTY;
                Parsed::parse_ip_into(&frame, &mut p, NicChecksum::Unknown).expect("valid");
                acc ^= p.l4_offset as u32 ^ p.ip_end as u32;
            }
            black_box(acc)
        })
    });
    g.bench_function("fixed_offset_parse_mix", |b| {
        b.iter(|| {
            let mut acc = 0u32;
            for f in &mix {
                let mut p = Parsed::EMPTY;
                assert!(Parsed::parse_common_into(black_box(f), &mut p, NicChecksum::Unknown));
                acc ^= p.l4_offset as u32 ^ p.ip_end as u32;
            }
            black_box(acc)
        })
    });
    g.throughput(Throughput::Elements(1));
    let (a, bb) = (Ipv4Addr::new(198, 51, 100, 7), ME_IP);
    g.bench_function("toeplitz_v4_4tuple", |b| {
        b.iter(|| black_box(h.hash_v4(black_box(a), black_box(bb), Some((40000, 53)))))
    });
    let (a6, b6) = ("2001:db8:100::7".parse().unwrap(), benches::ME_IP6);
    g.bench_function("toeplitz_v6_4tuple", |b| {
        b.iter(|| black_box(h.hash_v6(black_box(&a6), black_box(&b6), Some((40000, 53)))))
    });
    g.finish();
}

/// The fanout decision for a burst of 32 packets of 32 flows over 4 sockets of 1024, then the
/// end-of-burst reset: the common case (every socket has NORMAL room), and rollover (the
/// flows' socket has no room, each packet moves to the remembered one), and a huge flow moved
/// early at LOW room (the history check plus the move).
fn fanout(c: &mut Criterion) {
    let mut g = c.benchmark_group("fanout");
    g.throughput(Throughput::Elements(32));
    let spread: Vec<u32> = (0..32u32).map(|i| i.wrapping_mul(0x9e37_79b9)).collect();
    {
        let (grp, socks) = sim_group(4, 1024, true, true);
        let mut st = FanoutState::new(4, 0, 1);
        g.bench_function("no_rollover", |b| {
            b.iter(|| {
                for &h in &spread {
                    black_box(st.choose(&grp, &socks, black_box(h)));
                }
                st.burst_done();
            })
        });
    }
    {
        let (grp, socks) = sim_group(4, 1024, false, false);
        let mut st = FanoutState::new(4, 0, 1);
        g.bench_function("rollover_off", |b| {
            b.iter(|| {
                for &h in &spread {
                    black_box(st.choose(&grp, &socks, black_box(h)));
                }
                st.burst_done();
            })
        });
    }
    {
        // Socket 0 full but for one slot: every packet of flows on it rolls over (NONE room).
        let (grp, socks) = sim_group(4, 1024, true, true);
        sim_queue(&socks[0]).set_len(1023);
        let mut st = FanoutState::new(4, 0, 1);
        let h = hash_for(0, 4);
        g.bench_function("rollover", |b| {
            b.iter(|| {
                for _ in 0..32 {
                    black_box(st.choose(&grp, &socks, black_box(h)));
                }
                st.burst_done();
            })
        });
    }
    {
        // Socket 0 at 80% (LOW): one flow dominates its history and moves early.
        let (grp, socks) = sim_group(4, 1024, true, true);
        sim_queue(&socks[0]).set_len(820);
        let mut st = FanoutState::new(4, 0, 1);
        let h = hash_for(0, 4);
        g.bench_function("rollover_huge_flow", |b| {
            b.iter(|| {
                for _ in 0..32 {
                    black_box(st.choose(&grp, &socks, black_box(h)));
                }
                st.burst_done();
            })
        });
    }
    g.finish();
}

/// The flow-limit check inside the fanout decision (one socket of 1024, a table of 4096):
/// below half backlog (the comparison only), above half with 32 flows sharing the socket
/// (recorded, passed) and above half with one dominant flow (recorded, shed); and the table
/// update alone.
fn flow_limit(c: &mut Criterion) {
    let mut g = c.benchmark_group("flow_limit");
    g.throughput(Throughput::Elements(32));
    let spread: Vec<u32> = (0..32u32).map(|i| i.wrapping_mul(0x9e37_79b9)).collect();
    for (name, len, storm) in [
        ("below_half", 100, false),
        ("above_half_passed", 600, false),
        ("above_half_shed", 600, true),
    ] {
        let (grp, socks) = sim_group(1, 1024, true, true);
        sim_queue(&socks[0]).set_len(len);
        let mut st = FanoutState::new(1, 0, 1);
        st.flow_limit = Some(FlowLimit::new(4096));
        g.bench_function(name, |b| {
            b.iter(|| {
                for &h in &spread {
                    let h = if storm { 0xdead_beef } else { h };
                    black_box(st.choose(&grp, &socks, black_box(h)));
                }
                st.burst_done();
            })
        });
    }
    g.throughput(Throughput::Elements(1));
    let mut fl = FlowLimit::new(4096);
    let mut i = 0u32;
    g.bench_function("over_limit_only", |b| {
        b.iter(|| {
            i = i.wrapping_add(0x9e37_79b9);
            black_box(fl.over_limit(black_box(i)))
        })
    });
    g.finish();
}

/// The TCP state table alone, per segment: an established flow's ACK (a hit), and a spoofed
/// flood's ACK of no flow (a miss, dropped), over 16384 flows in a table of 65536 entries.
fn tcp_state(c: &mut Criterion) {
    use fastpath::pipeline::tcp_state::{Segment, TcpState, TcpStateConfig, TcpStateLcoreCounters};
    use fastpath::wire::TcpFlags;
    let mut g = c.benchmark_group("tcp_state");
    g.throughput(Throughput::Elements(1));
    let cfg = TcpStateConfig {
        entries: 65536,
        handshake_timeout_s: 10,
        established_timeout_s: 7440,
        closing_timeout_s: 30,
        learn_ns: 0,
        services: vec![true],
        ..Default::default()
    };
    let counters = TcpStateLcoreCounters::default();
    let seg = |i: u32, flags: TcpFlags, seq: u32| Segment {
        client: IpAddr::V4(Ipv4Addr::from(0xc612_0000 + i)),
        cport: 1024 + (i % 60000) as u16,
        service: IpAddr::V4(ME_IP),
        sport: 80,
        flags,
        seq,
    };
    let mut st = TcpState::new(&cfg, 0x5eed);
    let now = Instant(5_000_000_000);
    for i in 0..16384 {
        let _ = st.judge(&cfg, &seg(i, TcpFlags::SYN, i), now, &counters);
        let _ = st.judge(&cfg, &seg(i, TcpFlags::ACK, i + 1), now, &counters);
    }
    let mut i = 0u32;
    g.bench_function("established_hit", |b| {
        b.iter(|| {
            i = (i + 1) & 16383;
            black_box(st.judge(&cfg, black_box(&seg(i, TcpFlags::ACK, 7)), now, &counters))
        })
    });
    g.bench_function("flood_no_flow", |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            black_box(st.judge(&cfg, black_box(&seg(i | 1 << 20, TcpFlags::ACK, 7)), now, &counters))
        })
    });
    g.finish();
}

/// A pipeline whose ICMP settings are `icmp`.
fn pipeline_with_icmp(icmp: IcmpConfig) -> Pipeline {
    let t = Tables {
        generation: 1,
        ports: vec![PortAddrs::new(ME_MAC, vec![ME_IP], vec![benches::ME_IP6], false)],
        icmp_global: Some(icmp.global_bucket(Instant(0))),
        icmp,
        ..Default::default()
    };
    Pipeline::new(Arc::new(t), 0)
}

/// The ICMP error path: the limiter's decision alone (suppressed by the global budget, as in a
/// flood; suppressed by the per-destination limit; allowed), the error built in place alone,
/// and the whole pipeline on a closed-port datagram with the limiter saturated, asking first
/// (seed 000's order) or building first (the order it replaced).
fn icmp(c: &mut Criterion) {
    let mut g = c.benchmark_group("icmp");
    g.throughput(Throughput::Elements(1));
    let h = Toeplitz::default();
    let frame = udp4(ME_MAC, 40000, 9);
    let parsed = Parsed::parse(&frame, &h, None).expect("valid");
    let draw = || 0x8000_0000u32;

    let saturated = IcmpConfig {
        burst: 0,
        ..Default::default()
    };
    let mut lim = IcmpLimiter::new(&saturated, saturated.global_bucket(Instant(0)), 7);
    g.bench_function("decide_limited_global", |b| {
        b.iter(|| black_box(lim.decide(Instant(0), ErrorKind::PortUnreachable, &parsed, black_box(&frame), draw)))
    });

    let peer_limited = IcmpConfig {
        burst: u32::MAX,
        msgs_per_sec: u32::MAX,
        peer_burst: 1,
        ..Default::default()
    };
    let mut lim = IcmpLimiter::new(&peer_limited, peer_limited.global_bucket(Instant(0)), 7);
    let _first = lim.decide(Instant(0), ErrorKind::PortUnreachable, &parsed, &frame, draw);
    g.bench_function("decide_limited_peer", |b| {
        b.iter(|| black_box(lim.decide(Instant(0), ErrorKind::PortUnreachable, &parsed, black_box(&frame), draw)))
    });

    // Allowed: 1024 sources in turn, time moving a second per decision so every destination's
    // bucket has refilled; the global bucket never runs dry.
    let open = IcmpConfig {
        burst: u32::MAX,
        msgs_per_sec: u32::MAX,
        ..Default::default()
    };
    let mut lim = IcmpLimiter::new(&open, open.global_bucket(Instant(0)), 7);
    let mut p = parsed;
    let mut n = 0u64;
    g.bench_function("decide_allowed", |b| {
        b.iter(|| {
            n += 1;
            p.src = IpAddr::V4(Ipv4Addr::from(0xc633_6400 | (n as u32 & 0x3ff)));
            let d = lim.decide(Instant(n * 1_000_000_000), ErrorKind::PortUnreachable, &p, &frame, draw);
            debug_assert_eq!(d, icmp_error::Decision::Send);
            black_box(d)
        })
    });

    let template = buf(&frame);
    g.bench_function("build_port_unreachable_v4", |b| {
        b.iter_batched_ref(
            || template.clone(),
            |pkt| {
                black_box(icmp_error::build_in_place(
                    pkt,
                    &parsed,
                    ME_MAC,
                    IpAddr::V4(ME_IP),
                    ErrorKind::PortUnreachable,
                    1,
                ))
            },
            BatchSize::NumIterations(POOL),
        )
    });
    let frame6 = ip_frame(true, 17, None, 7, 40000, 9, 18);
    let parsed6 = Parsed::parse(&frame6, &h, None).expect("valid");
    let template6 = buf(&frame6);
    g.bench_function("build_port_unreachable_v6", |b| {
        b.iter_batched_ref(
            || template6.clone(),
            |pkt| {
                black_box(icmp_error::build_in_place(
                    pkt,
                    &parsed6,
                    ME_MAC,
                    IpAddr::V6(benches::ME_IP6),
                    ErrorKind::PortUnreachable,
                    1,
                ))
            },
            BatchSize::NumIterations(POOL),
        )
    });

    for (name, build_first) in [("closed_port_ask_first", false), ("closed_port_build_first", true)] {
        let mut pl = pipeline_with_icmp(IcmpConfig {
            burst: 0,
            build_first,
            ..Default::default()
        });
        g.bench_function(name, |b| {
            b.iter_batched_ref(
                || template.clone(),
                |pkt| black_box(pl.process(0, pkt, Instant(0))),
                BatchSize::NumIterations(POOL),
            )
        });
    }
    g.finish();
}

/// Buffers from the heap, released ones dropped.
struct HeapIo(u32);

impl ReasmIo<HeapBuf> for HeapIo {
    fn alloc(&mut self, len: usize) -> Option<HeapBuf> {
        Some(HeapBuf::with_room(&[], 128, len))
    }
    fn release(&mut self, r: Released<HeapBuf>) {
        black_box(r);
    }
    fn random(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        self.0
    }
}

/// Reassembly: a 3000-byte UDP datagram in three fragments (1480, 1480, 40 bytes of data)
/// inserted and completed into one buffer (per fragment, the copy included); a first fragment
/// of a new datagram held (1000 different datagrams into a fresh table); and the flood's
/// steady state, a first fragment refused because memory is above the threshold.
fn reassembly(c: &mut Criterion) {
    let mut g = c.benchmark_group("reasm");
    let src = Ipv4Addr::new(198, 51, 100, 7);
    let udp = {
        let mut v = vec![0u8; 3008];
        v[0..2].copy_from_slice(&40000u16.to_be_bytes());
        v[2..4].copy_from_slice(&9u16.to_be_bytes());
        v[4..6].copy_from_slice(&3008u16.to_be_bytes());
        v
    };
    let frags: Vec<Vec<u8>> = [(0usize, 1480usize, true), (1480, 2960, true), (2960, 3008, false)]
        .iter()
        .map(|&(a, z, more)| v4_fragment(src, ME_IP, 0x4242, a as u16, more, &udp[a..z]))
        .collect();
    let metas: Vec<FragMeta> = frags
        .iter()
        .map(|f| FragMeta::from_ethernet(f).expect("a fragment"))
        .collect();
    let bufs: Vec<HeapBuf> = frags.iter().map(|f| buf(f)).collect();
    let mut r: Reassembler<HeapBuf> = Reassembler::new(ReasmConfig::default());
    let mut io = HeapIo(1);
    g.throughput(Throughput::Elements(3));
    g.bench_function("insert_3_fragments_complete", |b| {
        b.iter_batched(
            || bufs.clone(),
            |v| {
                let mut done = None;
                for (pkt, m) in v.into_iter().zip(&metas) {
                    if let Insert::Complete { datagram, .. } = r.insert(Instant(0), pkt, m, &mut io) {
                        done = Some(datagram);
                    }
                }
                assert!(done.is_some());
                done
            },
            BatchSize::NumIterations(POOL),
        )
    });

    // 1000 first fragments of different datagrams (64-byte frames) into a fresh default table.
    let firsts: Vec<(HeapBuf, FragMeta)> = (0..1000u32)
        .map(|i| {
            let f = v4_fragment(Ipv4Addr::from(0x0a00_0000 + i), ME_IP, i as u16, 0, true, &[0u8; 24]);
            let m = FragMeta::from_ethernet(&f).expect("a fragment");
            (buf(&f), m)
        })
        .collect();
    g.throughput(Throughput::Elements(firsts.len() as u64));
    g.bench_function("insert_first_fragment_held", |b| {
        b.iter_batched(
            || (Reassembler::<HeapBuf>::new(ReasmConfig::default()), firsts.clone()),
            |(mut r, v)| {
                let mut io = HeapIo(1);
                for (pkt, m) in v {
                    black_box(matches!(r.insert(Instant(0), pkt, &m, &mut io), Insert::Held));
                }
                r
            },
            BatchSize::PerIteration,
        )
    });

    // Over the threshold: a small table already full of never-completing datagrams.
    let mut full: Reassembler<HeapBuf> = Reassembler::new(ReasmConfig {
        high_thresh_bytes: 64 << 10,
        ..ReasmConfig::default()
    });
    for (pkt, m) in firsts.iter().cloned() {
        let _ = full.insert(Instant(0), pkt, &m, &mut io);
    }
    let (late, late_meta) = {
        let f = v4_fragment(Ipv4Addr::new(10, 9, 9, 9), ME_IP, 7, 0, true, &[0u8; 24]);
        let m = FragMeta::from_ethernet(&f).expect("a fragment");
        (buf(&f), m)
    };
    g.throughput(Throughput::Elements(1));
    g.bench_function("flood_first_fragment_refused", |b| {
        b.iter_batched(
            || late.clone(),
            |pkt| {
                black_box(matches!(
                    full.insert(Instant(0), pkt, &late_meta, &mut io),
                    Insert::Dropped { .. }
                ))
            },
            BatchSize::NumIterations(POOL),
        )
    });
    g.finish();
}

/// GRE encapsulation of a 60-byte UDP/IPv4 frame, in place, into a plain tunnel and into one with
/// key, sequence number and checksum (the checksum covers the whole packet).
fn gre_encap(c: &mut Criterion) {
    let mut g = c.benchmark_group("gre");
    g.throughput(Throughput::Elements(1));
    let template = buf(&udp4(ME_MAC, 40000, 9000));
    for (name, full) in [("encap_plain", false), ("encap_key_seq_csum", true)] {
        let tunnels = vec![tunnel(full)];
        let mut seq = 0u32;
        let mut idents = fastpath::ident::Idents::from_os();
        g.bench_function(name, |b| {
            b.iter_batched_ref(
                || template.clone(),
                |pkt| {
                    seq = seq.wrapping_add(1);
                    let r = gre::encapsulate(pkt, &tunnels, 0, full.then_some(seq), &mut idents);
                    debug_assert_eq!(r, Ok(1));
                    black_box(pkt.len())
                },
                BatchSize::NumIterations(POOL),
            )
        });
    }
    g.finish();
}

/// The RX engine (`fastpath::rx`, what the daemon's RX lcore runs per burst) on a burst of 32:
/// to a UDP sink service (staged, enqueued in one burst, the queue emptied between bursts), to a
/// closed port (Port Unreachable built, batched and sent), and a mix of both. Fresh copies per
/// batch, made outside the timed part.
fn rx_engine(c: &mut Criterion) {
    use fastpath::pipeline::{Action, Service, ServiceTable};
    use fastpath::rx::{HeapIo, RxEngine};
    use fastpath::stats::{LcoreStats, QueueCounters};
    use fastpath::tx::Collect;
    let mut g = c.benchmark_group("rx_engine");
    g.throughput(Throughput::Elements(32));
    let (group, sockets) = sim_group(2, 1 << 20, true, true);
    let svc = Service {
        name: "bench".into(),
        protocol: fastpath::wire::IpProtocol::UDP,
        addresses: vec![],
        group,
        action: Action::Sink,
        cost_ns: 0,
        echo_allow_low_ports: false,
    };
    let tables = Arc::new(Tables {
        generation: 1,
        ports: pipeline().tables().ports.clone(),
        services: ServiceTable::new(vec![(svc, vec![7])]),
        sockets,
        ..Default::default()
    });
    let stats = Arc::new(LcoreStats::new(
        0,
        vec![QueueCounters::new(0, 0)],
        vec![QueueCounters::new(0, 1)],
    ));
    let mut tx = Collect::new(0);
    tx.keep = false;
    let mut e = RxEngine::new(tables.clone(), 0, vec![tx], HeapIo::default(), stats);
    let open: Vec<HeapBuf> = (0..32).map(|i| buf(&udp4(ME_MAC, 40000 + i, 7))).collect();
    let closed: Vec<HeapBuf> = (0..32).map(|i| buf(&udp4(ME_MAC, 40000 + i, 9))).collect();
    let mixed: Vec<HeapBuf> = open
        .iter()
        .zip(&closed)
        .flat_map(|(a, b)| [a.clone(), b.clone()])
        .take(32)
        .collect();
    for (name, template) in [("open_sink", open), ("closed_port", closed), ("mixed", mixed)] {
        g.bench_function(name, |b| {
            b.iter_batched_ref(
                || template.clone(),
                |burst| {
                    e.burst(0, 0, Instant(1_000_000_000), burst);
                    e.poll_done(Instant(1_000_000_000));
                    for s in tables.sockets.iter() {
                        sim_queue(s).set_len(0);
                    }
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

criterion_group!(
    stages,
    rx_engine,
    wire,
    pipeline_paths,
    parse_hash,
    fanout,
    flow_limit,
    icmp,
    reassembly,
    gre_encap,
    tcp_state
);
criterion_main!(stages);
