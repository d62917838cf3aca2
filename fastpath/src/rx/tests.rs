//! The RX engine over heap buffers: every packet in exactly one outcome, reassembly driven to
//! completion, timeout, and flush, answers batched and fragmented, sockets filled and refused,
//! generations adopted.

use super::*;
use crate::buf::{HeapBuf, PacketBuf};
use crate::pipeline::fanout::FanoutMode;
use crate::pipeline::parse::tests::{tcp_bytes, udp_bytes, v4_frame, v6_frame};
use crate::pipeline::reasm::sim::v4_fragment;
use crate::pipeline::tests::{port, with_udp_checksum};
use crate::pipeline::{Action, Group, Service, ServiceTable};
use crate::socket::{SimQueue, SocketCounters};
use crate::stats::QueueCounters;
use crate::tx::Collect;
use crate::wire::{self, checksum, IpProtocol, TcpFlags, Toeplitz};
use std::net::Ipv4Addr;

const ME: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const THEM: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);
const T0: Instant = Instant(1_000_000_000);

/// Tables of generation `generation` with a UDP echo service on port 7 over `sockets` sockets of
/// `capacity` packets each.
fn tables(generation: u64, sockets: usize, capacity: usize) -> Arc<Tables> {
    let socks = (0..sockets)
        .map(|i| {
            Arc::new(Socket::new(
                "svc",
                i,
                SimQueue::new(capacity),
                0,
                Arc::new(SocketCounters::new(1, 1)),
            ))
        })
        .collect();
    let svc = Service {
        name: "svc".into(),
        protocol: IpProtocol::UDP,
        addresses: vec![],
        group: Group {
            sockets: (0..sockets).collect(),
            mode: FanoutMode::Hash,
            rollover: false,
            huge_flows: false,
            flow_limit: true,
        },
        action: Action::Echo,
        cost_ns: 0,
        echo_allow_low_ports: false,
    };
    Arc::new(Tables {
        generation,
        ports: vec![port()],
        hasher: Toeplitz::default(),
        services: ServiceTable::new(vec![(svc, vec![7])]),
        sockets: socks,
        ..Default::default()
    })
}

type Engine = RxEngine<HeapBuf, HeapIo>;

fn engine_with(t: Arc<Tables>, tx: Collect<HeapBuf>) -> Engine {
    let stats = Arc::new(LcoreStats::new(
        0,
        vec![QueueCounters::new(0, 0)],
        vec![QueueCounters::new(0, 1)],
    ));
    let io = HeapIo {
        keep_delivered: true,
        ..Default::default()
    };
    RxEngine::new(t, 0, vec![tx], io, stats)
}

fn engine() -> Engine {
    engine_with(tables(1, 2, 64), Collect::new(0))
}

fn sent(e: &mut Engine) -> &mut Vec<HeapBuf> {
    &mut e.tx_mut(0).unwrap().queue_mut().sent
}

fn count(e: &Engine, o: Outcome) -> u64 {
    e.stats().outcomes[o.index()].get()
}

fn total(e: &Engine) -> u64 {
    e.stats().outcome_packets()
}

fn udp(dport: u16, payload: &[u8]) -> Vec<u8> {
    v4_frame(THEM, ME, IpProtocol::UDP, &[], 0, &udp_bytes(4000, dport, payload))
}

/// An ICMP echo request with `n` bytes of data, its checksum filled.
fn ping(n: usize) -> Vec<u8> {
    let mut icmp = vec![8, 0, 0, 0, 0x12, 0x34, 0, 1];
    icmp.extend((0..n).map(|i| i as u8));
    let c = checksum::checksum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    v4_frame(THEM, ME, IpProtocol::ICMP, &[], 0, &icmp)
}

/// The IPv4 payload of `frame` cut into fragments of `step` bytes (a multiple of 8).
fn fragments(frame: &[u8], ident: u16, step: usize) -> Vec<Vec<u8>> {
    fragments_from(THEM, frame, ident, step)
}

/// [`fragments`] from source `src`.
fn fragments_from(src: Ipv4Addr, frame: &[u8], ident: u16, step: usize) -> Vec<Vec<u8>> {
    let proto = frame[14 + 9];
    let payload = &frame[34..];
    let mut out = Vec::new();
    for (i, chunk) in payload.chunks(step).enumerate() {
        let off = i * step;
        let more = off + chunk.len() < payload.len();
        let mut f = v4_fragment(src, ME, ident, off as u16, more, chunk);
        // v4_fragment writes UDP; the protocol is the datagram's (checksum fixed below).
        f[14 + 9] = proto;
        f[24..26].copy_from_slice(&[0, 0]);
        let c = checksum::checksum(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        out.push(f);
    }
    out
}

/// One poll of one burst, as the DPDK RX lcore drives it: the packets counted received in the
/// lcore's section, which closes after the poll's end.
fn run_burst(e: &mut Engine, frames: &[Vec<u8>], now: Instant) {
    let mut burst: Vec<HeapBuf> = frames.iter().map(|f| HeapBuf::new(f)).collect();
    let stats = e.stats().clone();
    stats.open();
    stats.rx[0].packets.add(burst.len() as u64);
    e.burst(0, 0, now, &mut burst);
    e.poll_done(now);
    stats.close();
}

#[test]
fn every_packet_counts_once_and_answers_leave_on_the_tx_queue() {
    let mut e = engine();
    let frames = vec![udp(7, b"hello"), udp(9, b"closed"), vec![0u8; 10], ping(32)];
    run_burst(&mut e, &frames, T0);
    assert_eq!(count(&e, Outcome::Delivered), 1);
    assert_eq!(count(&e, Outcome::IcmpError), 1);
    assert_eq!(count(&e, Outcome::Malformed), 1);
    assert_eq!(count(&e, Outcome::EchoReply), 1);
    assert_eq!(total(&e), 4);
    assert_eq!(
        e.stats().rx[0].bytes.get(),
        frames.iter().map(|f| f.len() as u64).sum::<u64>()
    );
    // The Port Unreachable and the echo reply, in the order they were made.
    let out = sent(&mut e);
    assert_eq!(out.len(), 2);
    assert_eq!((out[0].data()[34], out[0].data()[35]), (3, 3));
    assert_eq!(out[1].data()[34], 0);
    assert_eq!(e.stats().tx[0].packets.get(), 2);
    // The datagram reached a socket: counted on it, and in its queue.
    let t = e.pipeline().tables().clone();
    let on_sockets: u64 = t.sockets.iter().map(|s| s.counters.sum(|c| &c.delivered)).sum();
    let queued: usize = t.sockets.iter().map(|s| s.len()).sum();
    assert_eq!((on_sockets, queued, e.io().delivered.len()), (1, 1, 1));
}

#[test]
fn a_mixed_burst_counts_every_packet_once_and_keeps_each_kinds_order() {
    // One socket; the same flow as fast-path frames, as frames with an IP option (the general
    // path, `burst`'s second loop), a fragmented datagram and a ping, interleaved.
    let mut e = engine_with(tables(1, 1, 64), Collect::new(0));
    let optioned = |i: u8| {
        v4_frame(
            THEM,
            ME,
            IpProtocol::UDP,
            &[1, 1, 1, 1],
            0,
            &udp_bytes(4000, 7, &[b'o', i]),
        )
    };
    let mut frames = Vec::new();
    for i in 0..12u8 {
        frames.push(if i % 3 == 0 { optioned(i) } else { udp(7, &[b'f', i]) });
        if i == 5 {
            frames.extend(fragments(&udp(7, &[b'd'; 40]), 9, 16));
            frames.push(ping(8));
        }
    }
    run_burst(&mut e, &frames, T0);
    assert_eq!(total(&e), frames.len() as u64);
    assert_eq!(count(&e, Outcome::Delivered), 12 + 1);
    assert_eq!(count(&e, Outcome::EchoReply), 1);
    assert!(e.rest.is_empty(), "the second loop's packets are all handed on");
    let payload = |b: &HeapBuf| {
        let d = b.data();
        let l4 = 14 + (d[14] & 0xf) as usize * 4 + 8;
        (d[l4], d.get(l4 + 1).copied().unwrap_or(0))
    };
    let got: Vec<(u8, u8)> = e.io().delivered.iter().map(|(_, b)| payload(b)).collect();
    for kind in [b'f', b'o'] {
        let seq: Vec<u8> = got.iter().filter(|p| p.0 == kind).map(|p| p.1).collect();
        let want: Vec<u8> = (0..12u8).filter(|i| (i % 3 == 0) == (kind == b'o')).collect();
        assert_eq!(seq, want, "{}", kind as char);
    }
    assert_eq!(got.iter().filter(|p| p.0 == b'd').count(), 1);
}

#[test]
fn receive_one_at_a_time_counts_as_a_burst_does() {
    // The corpus runner hands frames one by one (`receive`); the lcore, in bursts.
    let frames = vec![
        udp(7, b"a"),
        ping(8),
        udp(9, b"closed"),
        v4_frame(THEM, ME, IpProtocol::UDP, &[1, 1, 1, 1], 0, &udp_bytes(4000, 7, b"opt")),
        vec![0u8; 10],
        udp(7, b"b"),
    ];
    let mut burst = engine_with(tables(1, 1, 64), Collect::new(0));
    run_burst(&mut burst, &frames, T0);
    let mut single = engine_with(tables(1, 1, 64), Collect::new(0));
    for f in &frames {
        single.receive(0, HeapBuf::new(f), T0);
    }
    single.end_burst();
    single.poll_done(T0);
    for o in Outcome::ALL {
        assert_eq!(count(&burst, o), count(&single, o), "{}", o.name());
    }
    assert_eq!(total(&single), frames.len() as u64);
    assert_eq!(burst.io().delivered.len(), 3);
    assert_eq!(single.io().delivered.len(), 3);
}

#[test]
fn a_multi_segment_packet_is_oversize() {
    let mut e = engine();
    let mut b = HeapBuf::new(&udp(7, b"x"));
    b.set_segments(2);
    e.burst(0, 0, T0, &mut vec![b]);
    assert_eq!((count(&e, Outcome::Oversize), total(&e)), (1, 1));
}

/// A frame longer than the port's MTU allows (MTU + Ethernet header + two VLAN tags) cannot
/// have crossed the link: `oversize`, not answered; one byte shorter is taken.
#[test]
fn a_frame_above_the_mtu_is_oversize() {
    let mut e = engine();
    let mtu = e.pipeline().tables().mtu(0) as usize;
    // The longest frame the port takes, then one byte more: an echo request each.
    let longest = ping(mtu - 28);
    assert_eq!(longest.len(), 14 + mtu);
    let mut tagged_max = longest.clone();
    tagged_max.extend_from_slice(&[0; 8]); // link-layer padding up to MTU + 22
    let mut over = tagged_max.clone();
    over.push(0);
    run_burst(&mut e, &[longest, tagged_max], T0);
    assert_eq!((count(&e, Outcome::EchoReply), total(&e)), (2, 2));
    run_burst(&mut e, &[over], T0);
    assert_eq!((count(&e, Outcome::Oversize), total(&e)), (1, 3));
}

#[test]
fn fragments_complete_into_one_datagram_that_goes_through_the_pipeline_again() {
    let mut e = engine();
    let frags = fragments(&udp(7, &[7u8; 40]), 99, 16);
    assert_eq!(frags.len(), 3);
    // In two bursts: the reassembler holds fragments across them.
    run_burst(&mut e, &frags[..1], T0);
    assert_eq!(total(&e), 0, "a held fragment has no outcome yet");
    run_burst(&mut e, &frags[1..], T0);
    assert_eq!(count(&e, Outcome::Reassembled), 2);
    assert_eq!(count(&e, Outcome::Delivered), 1);
    assert_eq!(total(&e), 3);
    let (_, d) = &e.io().delivered[0];
    assert_eq!(d.len(), 14 + 20 + 8 + 40, "the whole datagram in one buffer");
    assert_eq!(e.reassembly_memory(), 0);
}

/// `RxEngine::adopt` keeps the reassembler (and what it holds) while `[reassembly]` is
/// unchanged: a datagram whose fragments straddle a reload completes.
#[test]
fn a_reload_keeps_the_fragments_held() {
    let mut e = engine();
    let frags = fragments(&udp(7, &[7u8; 40]), 98, 16);
    run_burst(&mut e, &frags[..1], T0);
    let held = e.reassembly_memory();
    assert!(held > 0);
    e.adopt(tables(2, 2, 64), T0);
    assert_eq!(e.stats().generation(), 2);
    assert_eq!(e.reassembly_memory(), held, "the held fragment survives the reload");
    run_burst(&mut e, &frags[1..], T0);
    assert_eq!(count(&e, Outcome::Reassembled), 2);
    assert_eq!(count(&e, Outcome::Delivered), 1);
    assert_eq!(total(&e), 3);
}

#[test]
fn an_answer_larger_than_the_mtu_leaves_in_fragments_the_last_one_counted() {
    let mut e = engine();
    // 3000 bytes of ping data: reassembled, answered, and the answer cut at the 1500-byte MTU.
    let frags = fragments(&ping(3000), 7, 1480);
    run_burst(&mut e, &frags, T0);
    assert_eq!(count(&e, Outcome::EchoReply), 1);
    assert_eq!(count(&e, Outcome::Reassembled), frags.len() as u64 - 1);
    assert_eq!(total(&e), frags.len() as u64);
    let out = sent(&mut e);
    assert!(out.len() >= 3, "{} pieces", out.len());
    assert!(out.iter().all(|p| p.len() <= 1514));
    let ip_bytes: usize = out.iter().map(|p| p.len() - 34).sum();
    assert_eq!(ip_bytes, 8 + 3000);
}

#[test]
fn a_refused_answer_is_tx_full_instead_of_its_outcome() {
    let mut tx = Collect::new(0);
    tx.room = Some(0);
    let mut e = engine_with(tables(1, 2, 64), tx);
    run_burst(&mut e, &[udp(9, b"closed"), ping(8)], T0);
    assert_eq!(count(&e, Outcome::TxFull), 2);
    assert_eq!(count(&e, Outcome::IcmpError) + count(&e, Outcome::EchoReply), 0);
    assert_eq!(e.stats().tx[0].packets.get(), 0);
}

#[test]
fn a_full_socket_refuses_what_does_not_fit_as_socket_full() {
    let mut e = engine_with(tables(1, 1, 4), Collect::new(0));
    let frames: Vec<Vec<u8>> = (0..10).map(|_| udp(7, b"same flow")).collect();
    run_burst(&mut e, &frames, T0);
    let delivered = count(&e, Outcome::Delivered);
    let full = count(&e, Outcome::SocketFull);
    assert_eq!(delivered + full, 10);
    assert!(full >= 6 && delivered <= 4, "delivered {delivered}, full {full}");
    let s = &e.pipeline().tables().sockets[0];
    assert_eq!(s.len() as u64, delivered);
    assert_eq!(s.counters.sum(|c| &c.full), full);
}

#[test]
fn a_timed_out_first_fragment_is_answered_with_time_exceeded() {
    let mut e = engine();
    let frags = fragments(&udp(7, &[1u8; 40]), 5, 16);
    run_burst(&mut e, &frags[..1], T0);
    let due = e.next_deadline().expect("a deadline");
    e.poll_done(due);
    assert_eq!(total(&e), 1);
    let out = sent(&mut e);
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].data()[34], out[0].data()[35]),
        (11, 1),
        "Time Exceeded, reassembly"
    );
    assert_eq!(e.next_deadline(), None);
}

#[test]
fn a_clean_stop_counts_every_held_fragment() {
    let mut e = engine();
    let frags = fragments(&udp(7, &[1u8; 40]), 6, 16);
    run_burst(&mut e, &frags[..2], T0);
    assert_eq!(total(&e), 0);
    e.stop(T0);
    assert_eq!(count(&e, Outcome::ReassemblyFlushed), 2);
    assert_eq!(total(&e), 2);
    assert_eq!(e.reassembly_memory(), 0);
}

#[test]
fn a_new_generation_is_adopted_with_staging_for_its_sockets() {
    let mut e = engine_with(tables(1, 1, 64), Collect::new(0));
    assert_eq!(e.stats().generation(), 1);
    e.adopt(tables(2, 3, 64), T0);
    assert_eq!(e.stats().generation(), 2);
    let frames: Vec<Vec<u8>> = (0..30u16)
        .map(|i| v4_frame(THEM, ME, IpProtocol::UDP, &[], 0, &udp_bytes(1000 + i, 7, b"x")))
        .collect();
    run_burst(&mut e, &frames, T0);
    assert_eq!(count(&e, Outcome::Delivered), 30);
    let used = e
        .io()
        .delivered
        .iter()
        .map(|(s, _)| *s)
        .collect::<std::collections::BTreeSet<_>>();
    assert!(used.len() > 1, "30 flows over 3 sockets went to {used:?}");
}

/// A burst that enqueued to one socket warms that socket's queue as the next burst starts
/// (the consumer's index, which its worker wrote since: a miss at the enqueue otherwise); after
/// a burst that touched several (prefetched at their enqueue) or none, and across a new
/// generation whose sockets are others, nothing is.
#[test]
fn the_next_burst_warms_the_one_socket_the_last_enqueued_to() {
    let mut e = engine_with(tables(1, 3, 64), Collect::new(0));
    let flow = |sport: u16| v4_frame(THEM, ME, IpProtocol::UDP, &[], 0, &udp_bytes(sport, 7, b"x"));
    let starts = |e: &mut Engine| {
        std::mem::take(&mut e.io_mut().prefetched)
            .into_iter()
            .filter(|p| p.1 == 1)
            .collect::<Vec<_>>()
    };
    run_burst(&mut e, &[flow(1000), flow(1000)], T0);
    let s = e.io().delivered[0].0;
    assert_eq!(starts(&mut e), vec![], "the first burst has nothing to warm");
    run_burst(&mut e, &[flow(1000)], T0);
    assert_eq!(
        starts(&mut e),
        vec![(s, 1)],
        "the socket of the last burst, warmed once"
    );
    // Many flows over 3 sockets: the end of the burst prefetches them (steps 0, 1, 2 each).
    let many: Vec<Vec<u8>> = (0..30).map(|i| flow(2000 + i)).collect();
    run_burst(&mut e, &many, T0);
    let at_enqueue = starts(&mut e).len();
    assert!(at_enqueue > 1, "step 1 at the enqueue of each socket touched");
    run_burst(&mut e, &[flow(1000)], T0);
    assert_eq!(
        starts(&mut e),
        vec![],
        "after several sockets, the burst start warms none"
    );
    run_burst(&mut e, &[flow(1000)], T0);
    assert_eq!(starts(&mut e), vec![(s, 1)]);
    // A new generation (its socket `s` is another socket): the remembered index is forgotten,
    // not looked up in it.
    e.adopt(tables(2, 3, 64), T0);
    run_burst(&mut e, &[flow(1000)], T0);
    assert_eq!(starts(&mut e), vec![]);
    run_burst(&mut e, &[flow(1000)], T0);
    assert_eq!(starts(&mut e), vec![(s, 1)]);
    assert_eq!(count(&e, Outcome::Delivered), 2 + 1 + 30 + 1 + 1 + 1 + 1);
}

/// Under load (full bursts) to one socket, its queue publishes every HOLD_BURSTS bursts; a
/// burst that is not full, touches another socket alone, an idle poll, a new generation and the
/// stop publish what is held.
#[test]
fn full_bursts_to_one_socket_publish_every_few_bursts_and_anything_else_at_once() {
    let mut e = engine_with(tables(1, 3, 4096), Collect::new(0));
    let flow = |sport: u16| v4_frame(THEM, ME, IpProtocol::UDP, &[], 0, &udp_bytes(sport, 7, b"x"));
    let full = |sport: u16| vec![flow(sport); BURST];
    let held = |e: &Engine| e.io().held.clone();
    // Two flows on different sockets.
    run_burst(&mut e, &[flow(1000)], T0);
    let a = e.io().delivered[0].0;
    let other = (1001..1100)
        .find(|&p| {
            run_burst(&mut e, &[flow(p)], T0);
            e.io().delivered.last().unwrap().0 != a
        })
        .expect("a flow on another socket");
    let b = e.io().delivered.last().unwrap().0;
    assert_eq!(held(&e), vec![], "bursts that are not full publish");
    let mut fed = e.io().delivered.len();
    let mut burst = |e: &mut Engine, frames: &[Vec<u8>]| {
        fed += frames.len();
        let mut v: Vec<HeapBuf> = frames.iter().map(|f| HeapBuf::new(f)).collect();
        e.burst(0, 0, T0, &mut v);
    };
    for round in 0..3 {
        for i in 1..HOLD_BURSTS as usize {
            burst(&mut e, &full(1000));
            assert_eq!(held(&e), vec![(a, i * BURST)], "round {round}, burst {i}");
        }
        burst(&mut e, &full(1000));
        assert_eq!(held(&e), vec![], "the {HOLD_BURSTS}th publishes");
    }
    // Another socket: what the first held is published, the other's held.
    burst(&mut e, &full(1000));
    burst(&mut e, &full(other));
    assert_eq!(held(&e), vec![(b, BURST)]);
    // A burst that is not full, to the held socket: published.
    burst(&mut e, &[flow(other)]);
    assert_eq!(held(&e), vec![]);
    // Two sockets in one full burst: both held, as several sockets are (HOLD_MANY).
    let mut two = full(1000);
    two[0] = flow(other);
    burst(&mut e, &two);
    let mut both = held(&e);
    both.sort();
    let mut want = vec![(a, BURST - 1), (b, 1)];
    want.sort();
    assert_eq!(both, want);
    // A burst with no delivery (all to a closed port): the held one is published.
    burst(&mut e, &full(1000));
    burst(&mut e, &vec![udp(9, b"closed"); BURST]);
    assert_eq!(held(&e), vec![]);
    // An idle poll, a new generation, the stop.
    burst(&mut e, &full(1000));
    e.idle();
    assert_eq!(held(&e), vec![]);
    burst(&mut e, &full(1000));
    e.adopt(tables(2, 3, 4096), T0);
    assert_eq!(held(&e), vec![]);
    burst(&mut e, &full(1000));
    assert_eq!(held(&e).len(), 1);
    e.stop(T0);
    assert_eq!(held(&e), vec![]);
    assert_eq!(total(&e), fed as u64, "every packet counted once");
}

/// Under load (full bursts) spread over several sockets, their queues publish together every
/// HOLD_MANY bursts; a socket past a quarter of its capacity is published at once; a window
/// whose sockets took fewer than HOLD_GAIN packets each stops the holding for a while; a burst
/// that is not full and an idle poll publish everything.
#[test]
fn full_bursts_to_many_sockets_publish_together_every_few_bursts() {
    let mut e = engine_with(tables(1, 8, 4096), Collect::new(0));
    let flow = |sport: u16| v4_frame(THEM, ME, IpProtocol::UDP, &[], 0, &udp_bytes(sport, 7, b"x"));
    // A flow for each socket, found one packet at a time (bursts that are not full publish).
    let sockets = e.pipeline().tables().sockets.len();
    let mut seen = vec![false; sockets];
    let one_each: Vec<Vec<u8>> = (2000..5000u16)
        .filter(|&p| {
            run_burst(&mut e, &[flow(p)], T0);
            let s = e.io().delivered.last().unwrap().0;
            !std::mem::replace(&mut seen[s], true)
        })
        .map(flow)
        .take(sockets)
        .collect();
    assert_eq!(one_each.len(), sockets);
    let spread: Vec<Vec<u8>> = (0..BURST as u16).map(|i| flow(1000 + i)).collect();
    let held = |e: &Engine| e.io().held.clone();
    let count = |e: &Engine| held(e).iter().map(|&(_, n)| n).sum::<usize>();
    let mut fed = e.io().delivered.len();
    let mut burst = |e: &mut Engine, frames: &[Vec<u8>]| {
        fed += frames.len();
        let mut v: Vec<HeapBuf> = frames.iter().map(|f| HeapBuf::new(f)).collect();
        e.burst(0, 0, T0, &mut v);
    };
    for round in 0..2 {
        for i in 1..HOLD_MANY as usize {
            burst(&mut e, &spread);
            assert!(held(&e).len() > 1, "round {round}, burst {i}: several sockets held");
            assert_eq!(count(&e), i * BURST, "round {round}, burst {i}: every packet held");
        }
        burst(&mut e, &spread);
        assert_eq!(held(&e), vec![], "the {HOLD_MANY}th publishes");
    }
    // A socket past a quarter of its capacity: published at once, the others held.
    let first = e.io().delivered.last().unwrap().0;
    e.pipeline().tables().sockets[first]
        .queue(0)
        .sim()
        .unwrap()
        .set_len(4096 / 4);
    burst(&mut e, &spread);
    assert!(!held(&e).is_empty());
    assert!(held(&e).iter().all(|&(s, _)| s != first), "{:?}", held(&e));
    // Not full: everything published; so does an idle poll.
    burst(&mut e, &spread[..BURST - 1]);
    assert_eq!(held(&e), vec![]);
    e.pipeline().tables().sockets[first].queue(0).sim().unwrap().set_len(0);
    burst(&mut e, &spread);
    assert!(!held(&e).is_empty());
    e.idle();
    assert_eq!(held(&e), vec![]);
    // One packet per socket in a window (one full burst of one flow per socket, the rest to a
    // closed port, then a burst that is not full): no crossing saved, so the next full bursts
    // hold nothing for a while.
    let mut sparse_full: Vec<Vec<u8>> = one_each.clone();
    sparse_full.extend(std::iter::repeat_with(|| udp(9, b"closed")).take(BURST - sockets));
    burst(&mut e, &sparse_full);
    assert_eq!(count(&e), sockets, "held, one packet each");
    burst(&mut e, &[udp(9, b"closed")]);
    assert_eq!(held(&e), vec![]);
    for i in 0..HOLD_REST {
        burst(&mut e, &spread);
        assert_eq!(held(&e), vec![], "burst {i} of the rest");
    }
    // (Emptied: the rest filled them past a quarter.)
    for s in e.pipeline().tables().sockets.iter() {
        s.queue(0).sim().unwrap().set_len(0);
    }
    burst(&mut e, &spread);
    assert!(!held(&e).is_empty(), "held again after the rest");
    e.stop(T0);
    assert_eq!(held(&e), vec![]);
    assert_eq!(total(&e), fed as u64, "every packet counted once");
}

proptest::proptest! {
    /// Datagrams to an open and a closed port, cut into fragments, some lost, shuffled, in bursts
    /// of random sizes and times: whatever completes, times out or is flushed at the stop, every
    /// frame ends in exactly one outcome and nothing stays held.
    #[test]
    fn every_frame_of_any_fragment_mix_counts_once(
        seed in proptest::prelude::any::<u64>(),
        sizes in proptest::collection::vec(8usize..3000, 1..6),
        lost in proptest::prelude::any::<u32>(),
        burst in 1usize..40,
        step_ms in 0u64..20_000,
    ) {
        let mut frames = Vec::new();
        for (i, n) in sizes.iter().enumerate() {
            let dport = if i % 2 == 0 { 7 } else { 9 };
            for (j, f) in fragments(&udp(dport, &vec![i as u8; *n]), i as u16, 8 * (1 + (seed as usize + i) % 200))
                .into_iter()
                .enumerate()
            {
                if lost >> ((i * 7 + j) % 32) & 1 == 0 || j == 0 {
                    frames.push(f);
                }
            }
        }
        let mut rng = seed | 1;
        for i in (1..frames.len()).rev() {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            frames.swap(i, (rng % (i as u64 + 1)) as usize);
        }
        let mut e = engine();
        let mut now = T0;
        for b in frames.chunks(burst) {
            run_burst(&mut e, b, now);
            // What a scrape reads between polls balances, fragments held included.
            let c = e.stats().packet_counts();
            proptest::prop_assert_eq!(c.rx_packets(), c.outcome_packets() + c.held);
            proptest::prop_assert_eq!(c.held, e.reassembly_held() as u64);
            now = Instant(now.0 + step_ms * 1_000_000);
        }
        e.stop(now);
        proptest::prop_assert_eq!(e.stats().reasm.held.get(), 0);
        proptest::prop_assert_eq!(total(&e), frames.len() as u64);
        proptest::prop_assert_eq!(e.reassembly_memory(), 0);
    }
}

// ---------------------------------------------------------------------------------------------
// Answers to what came through a tunnel go back through it, reassembled or not.

const REMOTE: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);

fn gre_tunnel(
    local: Ipv4Addr,
    remote: Ipv4Addr,
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
) -> crate::pipeline::tunnel::Tunnel {
    use crate::pipeline::tunnel::{Tunnel, TunnelCounters, TunnelOut};
    Tunnel {
        name: "t".into(),
        local: local.into(),
        remote: remote.into(),
        key: Some(7),
        sequence: false,
        checksum: false,
        ttl: 64,
        out: TunnelOut::Port {
            port: 0,
            src_mac: crate::wire::EthernetAddress(src_mac),
            dst_mac: crate::wire::EthernetAddress(dst_mac),
            mtu: 1500,
        },
        depth: 1,
        owner: 0,
        counters: Arc::new(TunnelCounters::new(1, 1)),
        handoff: None,
        max_seq_jump: crate::pipeline::tunnel::DEFAULT_MAX_SEQ_JUMP,
    }
}

/// The tables of [`tables`] with tunnel "t" to [`REMOTE`] (key 7).
fn tunnel_tables() -> Arc<Tables> {
    let mut t = (*tables(1, 2, 64)).clone();
    t.tunnels = vec![gre_tunnel(ME, REMOTE, [2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])];
    Arc::new(t)
}

/// `inner` as the far end of tunnel "t" sends it: in GRE with key 7, from REMOTE to us.
fn from_remote(inner: &[u8]) -> Vec<u8> {
    let peer = [gre_tunnel(REMOTE, ME, [2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1])];
    let mut b = HeapBuf::new(inner);
    crate::pipeline::tunnel::encapsulate_oversize(&mut b, &peer, 0, None, &mut crate::ident::Idents::from_os())
        .expect("encapsulated");
    b.data().to_vec()
}

/// Whether `frame` is IPv4 carrying GRE (or an outer fragment of it) from us to REMOTE.
fn is_gre_to_remote(frame: &[u8]) -> bool {
    frame[12..14] == [8, 0] && frame[14 + 9] == 47 && frame[14 + 16..14 + 20] == REMOTE.octets()
}

#[test]
fn a_reassembled_tunnelled_datagram_is_answered_through_the_tunnel() {
    let mut e = engine_with(tunnel_tables(), Collect::new(0));
    // A 3000-byte ping cut into fragments by the sender, each fragment sent through the tunnel.
    let frags: Vec<Vec<u8>> = fragments(&ping(3000), 9, 1400).iter().map(|f| from_remote(f)).collect();
    run_burst(&mut e, &frags, T0);
    assert_eq!(count(&e, Outcome::EchoReply), 1);
    assert_eq!(count(&e, Outcome::Reassembled), frags.len() as u64 - 1);
    let out = sent(&mut e);
    assert!(!out.is_empty());
    assert!(out.len() >= 3, "cut into pieces that fit: {}", out.len());
    for f in out.iter() {
        let d = f.data();
        assert!(is_gre_to_remote(d), "left bare: {:02x?}", &d[..40]);
        assert!(d.len() <= 1514, "{} bytes", d.len());
        // Inner fragments each encapsulated whole: no outer fragment for the far end to join.
        assert_eq!((d[14 + 6] & 0x3f, d[14 + 7]), (0, 0), "an outer fragment");
    }
    assert_eq!(e.pipeline().tables().tunnels[0].counters.sum(|c| &c.encap), 1);
}

#[test]
fn a_tunnelled_fragment_that_times_out_gets_time_exceeded_through_the_tunnel() {
    let mut e = engine_with(tunnel_tables(), Collect::new(0));
    let frags = fragments(&udp(7, &[1u8; 40]), 5, 16);
    run_burst(&mut e, &[from_remote(&frags[0])], T0);
    let due = e.next_deadline().expect("a deadline");
    e.poll_done(due);
    let out = sent(&mut e);
    assert_eq!(out.len(), 1);
    assert!(is_gre_to_remote(out[0].data()), "left bare");
    // Inside: ICMP Time Exceeded, reassembly (outer 14 + 20 + GRE 8 with key, inner IPv4 20).
    assert_eq!((out[0].data()[62], out[0].data()[63]), (11, 1));
}

#[test]
fn a_tunnelled_packet_for_a_socket_carries_its_tunnel_to_the_worker() {
    let mut e = engine_with(tunnel_tables(), Collect::new(0));
    run_burst(&mut e, &[from_remote(&udp(7, b"hi")), udp(7, b"bare")], T0);
    assert_eq!(count(&e, Outcome::Delivered), 2);
    let marks: Vec<_> = e.io().delivered.iter().map(|(_, b)| b.tunnelled()).collect();
    assert!(marks.contains(&Some(crate::buf::Tunnelled {
        tunnel: 0,
        depth: 1,
        generation: 1
    })));
    assert!(marks.contains(&None));
}

#[test]
fn tunnelled_fragments_do_not_mix_with_bare_ones_of_the_same_datagram() {
    let mut e = engine_with(tunnel_tables(), Collect::new(0));
    let frags = fragments(&udp(7, &[3u8; 40]), 11, 16);
    // Two through the tunnel, the last one bare: two different datagrams, neither complete.
    run_burst(
        &mut e,
        &[from_remote(&frags[0]), from_remote(&frags[1]), frags[2].clone()],
        T0,
    );
    assert_eq!(total(&e), 0);
    e.stop(T0);
    assert_eq!(count(&e, Outcome::ReassemblyFlushed), 3);
}

#[test]
fn the_nesting_limit_counts_the_headers_stripped_before_reassembly() {
    // Fragments inside one GRE header of a datagram that holds `inside` more GRE headers around
    // a ping: 3 in all are answered, 4 are `gre_recursion`.
    for (inside, want) in [(2, Outcome::EchoReply), (3, Outcome::GreRecursion)] {
        let mut e = engine_with(tunnel_tables(), Collect::new(0));
        let mut datagram = ping(64);
        for _ in 0..inside {
            datagram = from_remote(&datagram);
        }
        let frags: Vec<Vec<u8>> = fragments_from(REMOTE, &datagram, 3, 48)
            .iter()
            .map(|f| from_remote(f))
            .collect();
        run_burst(&mut e, &frags, T0);
        assert_eq!(count(&e, want), 1, "{inside} headers inside");
        assert_eq!(total(&e), frags.len() as u64);
    }
}

#[test]
fn an_answer_on_a_sequence_tunnel_goes_to_its_owner_not_the_wire() {
    let mut t = (*tunnel_tables()).clone();
    t.tunnels[0].sequence = true;
    let mut e = engine_with(Arc::new(t), Collect::new(0));
    let peer = {
        let mut p = gre_tunnel(REMOTE, ME, [2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1]);
        p.sequence = true;
        [p]
    };
    let mut b = HeapBuf::new(&ping(16));
    crate::pipeline::tunnel::encapsulate(&mut b, &peer, 0, Some(1), &mut crate::ident::Idents::from_os()).unwrap();
    run_burst(&mut e, &[b.data().to_vec()], T0);
    assert_eq!(count(&e, Outcome::EchoReply), 1);
    assert!(sent(&mut e).is_empty(), "nothing on the RX lcore's queue");
    let handed = &e.io().handed_off;
    assert_eq!(handed.len(), 1);
    assert_eq!(handed[0].0, "t");
    assert_eq!(handed[0].1.data()[14 + 20], 0, "the echo reply, not yet encapsulated");
    assert_eq!(e.pipeline().tables().tunnels[0].counters.sum(|c| &c.handed_off), 1);
}

/// A fragmented tunnel packet whose inner packet is itself a fragment. Once the outer fragments
/// complete, the inner fragment is held in a packet buffer (a copy), never in the 64 KiB datagram
/// buffer the outer reassembly used, which goes back at once; the inner datagram then completes
/// as any other.
#[test]
fn an_inner_fragment_from_an_outer_reassembly_is_held_in_a_packet_buffer() {
    let mut e = engine_with(tunnel_tables(), Collect::new(0));
    let inner = fragments(&udp(7, &[5u8; 64]), 21, 32);
    let outer = fragments_from(REMOTE, &from_remote(&inner[0]), 9, 32);
    run_burst(&mut e, &outer, T0);
    assert_eq!(e.io().datagram_buffers, 1, "the outer reassembly");
    assert_eq!(e.io().packet_buffers, 1, "the inner fragment copied out of it");
    assert_eq!(
        e.reassembly_memory(),
        crate::pipeline::reasm::DEFAULT_TRUESIZE,
        "one packet buffer held"
    );
    let rest: Vec<Vec<u8>> = inner[1..].iter().map(|f| from_remote(f)).collect();
    run_burst(&mut e, &rest, T0);
    assert_eq!(count(&e, Outcome::Delivered), 1);
    assert_eq!(total(&e), (outer.len() + rest.len()) as u64);
    assert_eq!(e.reassembly_memory(), 0);
}

/// The kernel path (`pipeline/kernel.rs`): tables with an echo service on port 7 (socket 0) and
/// the internal `kernel` service (socket 1, `capacity` packets), port 0 mirrored into a kernel
/// interface when `kernel_port`, `[kernel] punt` = `unhandled` (if asked) and `ports`.
fn kernel_tables(kernel_port: bool, unhandled: bool, ports: &[(IpProtocol, u16)], capacity: usize) -> Arc<Tables> {
    kernel_tables_with(kernel_port, unhandled, ports, capacity, Default::default(), &[])
}

/// [`kernel_tables`] with a punt budget and the TCP ports the kernel listens on.
fn kernel_tables_with(
    kernel_port: bool,
    unhandled: bool,
    ports: &[(IpProtocol, u16)],
    capacity: usize,
    budget: crate::pipeline::kernel::PuntBudget,
    listening: &[u16],
) -> Arc<Tables> {
    use crate::pipeline::kernel::{KernelCounters, KernelListeners, KernelPath, PuntRules, Solicitations};
    let listeners = KernelListeners::default();
    listeners.set(listening.iter().copied());
    let socket = |name: &str, cap: usize, kernel: bool| {
        let mut s = Socket::new(name, 0, SimQueue::new(cap), 0, Arc::new(SocketCounters::new(1, 1)));
        s.kernel = kernel;
        Arc::new(s)
    };
    let group = |s: usize| Group {
        sockets: vec![s],
        mode: FanoutMode::Hash,
        rollover: false,
        huge_flows: false,
        flow_limit: true,
    };
    let service = |name: &str, s: usize, action: Action| Service {
        name: name.into(),
        protocol: IpProtocol::UDP,
        addresses: vec![],
        group: group(s),
        action,
        cost_ns: 0,
        echo_allow_low_ports: false,
    };
    let mut local = port();
    local.kernel = kernel_port;
    Arc::new(Tables {
        generation: 1,
        ports: vec![local],
        hasher: Toeplitz::default(),
        services: ServiceTable::new(vec![
            (service("echo", 0, Action::Echo), vec![7]),
            (service("kernel", 1, Action::Kernel), vec![]),
        ]),
        sockets: vec![socket("echo", 64, false), socket("kernel", capacity, true)],
        kernel: Some(KernelPath {
            rules: PuntRules::new(unhandled, ports),
            service: 1,
            interface_of: vec![kernel_port.then_some(1)],
            port_of: vec![None, kernel_port.then_some(0)],
            index_of: vec![Some(0), Some(0)],
            counters: Arc::new(KernelCounters::new(1, 1)),
            budget,
            listeners: Arc::new(listeners),
            solicited: Arc::new(Solicitations::new(1, 1)),
        }),
        ..Default::default()
    })
}

fn tcp(dport: u16) -> Vec<u8> {
    tcp_with(dport, TcpFlags::SYN)
}

/// A TCP segment from THEM with `flags` and a valid checksum.
fn tcp_with(dport: u16, flags: TcpFlags) -> Vec<u8> {
    use crate::pipeline::parse::tests::tcp_bytes;
    let mut f = v4_frame(THEM, ME, IpProtocol::TCP, &[], 0, &tcp_bytes(4000, dport, flags));
    // A valid TCP checksum, so a reset is due where one would be sent.
    let (src, dst) = (THEM.octets(), ME.octets());
    let seg_len = f.len() - 34;
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&src);
    pseudo.extend_from_slice(&dst);
    pseudo.extend_from_slice(&[0, 6]);
    pseudo.extend_from_slice(&(seg_len as u16).to_be_bytes());
    f[34 + 16..34 + 18].copy_from_slice(&[0, 0]);
    pseudo.extend_from_slice(&f[34..]);
    let c = checksum::checksum(&pseudo);
    f[34 + 16..34 + 18].copy_from_slice(&c.to_be_bytes());
    f
}

/// An ARP packet `op` (1 request, 2 reply) from THEM to ME, unicast to our MAC.
fn arp(op: u16) -> Vec<u8> {
    use crate::pipeline::tests::MAC;
    arp_from(op, MAC, THEM, ME)
}

/// An ARP packet `op` from PEER claiming `spa`, for `tpa`, to `dst`.
fn arp_from(op: u16, dst: wire::EthernetAddress, spa: Ipv4Addr, tpa: Ipv4Addr) -> Vec<u8> {
    use crate::pipeline::tests::{MAC, PEER};
    use crate::wire::{arp, ethernet, ArpOperation, EtherType};
    let mut v = vec![0u8; 14 + arp::PACKET_LEN];
    ethernet::emit_header(&mut v, dst, PEER, EtherType::ARP);
    let op = if op == 1 {
        ArpOperation::Request
    } else {
        ArpOperation::Reply
    };
    arp::emit(&mut v[14..], op, PEER, spa, MAC, tpa);
    v
}

/// A neighbour advertisement from 2001:db8::7 for itself, to 2001:db8::1 (unicast), Solicited
/// and Override set.
fn neighbour_advert() -> Vec<u8> {
    advert(SOLICITED | OVERRIDE, THEM6.parse().unwrap(), ME6.parse().unwrap())
}

/// The Solicited and Override flags of an advertisement (RFC 4861 §4.4).
const SOLICITED: u8 = 0x40;
const OVERRIDE: u8 = 0x20;

/// A neighbour advertisement from 2001:db8::7 for `target` with `flags`, to `dst` (in a group
/// frame if `dst` is a group), with a Target Link-Layer Address option, checksum right.
fn advert(flags: u8, target: std::net::Ipv6Addr, dst: std::net::Ipv6Addr) -> Vec<u8> {
    let them: std::net::Ipv6Addr = THEM6.parse().unwrap();
    let mut na = vec![136, 0, 0, 0, flags, 0, 0, 0];
    na.extend_from_slice(&target.octets());
    na.extend_from_slice(&[2, 1, 2, 0, 0, 0, 0x66, 0x66]);
    let c = checksum::finish(checksum::sum(
        checksum::pseudo_v6(&them, &dst, 58, na.len() as u32),
        &na,
    ));
    na[2..4].copy_from_slice(&c.to_be_bytes());
    let mut v = v6_frame(them, dst, IpProtocol::ICMPV6, &[], 255, &na);
    if dst.is_multicast() {
        v[..6].copy_from_slice(&wire::ipv6::multicast_mac(&dst).0);
    }
    v
}

/// The kernel's ARP request for `target`, from ME.
fn kernel_arp_request(target: Ipv4Addr) -> Vec<u8> {
    let mut v = arp_from(1, wire::EthernetAddress::BROADCAST, ME, target);
    v[6..12].copy_from_slice(&crate::pipeline::tests::MAC.0);
    v
}

/// The kernel's neighbour solicitation for `target`, from ME6: to its solicited-node group, or
/// unicast to it (a reachability probe).
fn kernel_ns(target: std::net::Ipv6Addr, unicast: bool) -> Vec<u8> {
    use crate::pipeline::ndp::tests::{ns, SLLA};
    let dst = if unicast {
        target
    } else {
        wire::ipv6::solicited_node(&target)
    };
    ns(ME6.parse().unwrap(), dst, target, 255, &SLLA).data().to_vec()
}

/// The kernel writes `frame` on its interface (DPDK port 1), and worker 0's engine carries it
/// out of port 0 at `now`, recording what it solicits.
fn kernel_sends(e: &Engine, frame: &[u8], now: Instant) {
    use crate::worker::{HeapWorkerIo, WorkerEngine};
    let stats = Arc::new(LcoreStats::new(1, vec![], vec![QueueCounters::new(0, 1)]));
    let t = e.pipeline().tables().clone();
    let mut w = WorkerEngine::new(
        t,
        0,
        vec![Collect::new(0)],
        HeapWorkerIo::default(),
        stats,
        1_000_000_000,
    );
    w.io_mut().now = now;
    w.io_mut().kernel = vec![(1, [HeapBuf::new(frame)].into())];
    assert_eq!(w.poll(now).from_kernel, 1);
    assert_eq!(w.tx_queue_mut(0).unwrap().sent.len(), 1, "out of the port");
}

/// One frame received at `now`.
fn one_at(e: &mut Engine, frame: Vec<u8>, now: Instant) {
    run_burst(e, &[frame], now);
    e.end_burst();
}

fn one(e: &mut Engine, frame: Vec<u8>) {
    run_burst(e, &[frame], T0);
    e.end_burst();
}

#[test]
fn punted_packets_go_to_the_kernel_sockets_and_count_as_kernel() {
    // `unhandled`: closed UDP and TCP ports (a segment of a connection, a connection attempt
    // where the kernel listens), another protocol, an ARP reply and an NA answering the
    // kernel's own questions.
    let t = kernel_tables_with(true, true, &[], 64, Default::default(), &[2222]);
    let mut e = engine_with(t, Collect::new(0));
    kernel_sends(&e, &kernel_arp_request(THEM), T0);
    kernel_sends(&e, &kernel_ns(THEM6.parse().unwrap(), false), T0);
    for f in [
        udp(9, b"closed"),
        tcp_with(23, TcpFlags::ACK),
        tcp(2222),
        v4_frame(THEM, ME, IpProtocol(99), &[], 0, b"other protocol"),
        arp(2),
        neighbour_advert(),
    ] {
        one(&mut e, f);
    }
    assert_eq!(count(&e, Outcome::Kernel), 6);
    assert_eq!(e.pipeline().tables().sockets[1].len(), 6);
    // What the fast path answers itself stays there: echo service, ARP request, ping, and a
    // connection attempt where the kernel does not listen (our reset, through our limits).
    for f in [udp(7, b"echo me"), arp(1), ping(8), tcp(23)] {
        one(&mut e, f);
    }
    assert_eq!(count(&e, Outcome::Kernel), 6);
    assert_eq!(count(&e, Outcome::Delivered), 1);
    assert_eq!(count(&e, Outcome::ArpReply), 1);
    assert_eq!(count(&e, Outcome::EchoReply), 1);
    assert_eq!(count(&e, Outcome::TcpReset), 1);
    assert_eq!(total(&e), 10);
}

#[test]
fn a_syn_flood_to_a_closed_port_gets_no_more_resets_through_a_kernel_interface_than_without() {
    // The same spoofed flood (one burst of 32 SYNs, 40 times, 1 ms apart) at a closed port,
    // with the kernel path (`unhandled`) and without: the resets are the `[tcp_reset]`
    // limiter's either way, and nothing reaches the kernel.
    let flood: Vec<Vec<u8>> = (0..32).map(|_| tcp(23)).collect();
    let mut resets = vec![];
    for kernel in [true, false] {
        let mut e = engine_with(kernel_tables(kernel, true, &[], 1024), Collect::new(0));
        for i in 0..40u64 {
            run_burst(&mut e, &flood, Instant(T0.0 + i * 1_000_000));
            e.end_burst();
        }
        assert_eq!(count(&e, Outcome::Kernel), 0, "kernel interface {kernel}");
        assert_eq!(total(&e), 32 * 40);
        resets.push(count(&e, Outcome::TcpReset));
    }
    assert_eq!(resets[0], resets[1]);
    // The per-destination limit: one source gets its burst of 10.
    assert!(resets[0] <= 10, "{} resets to one spoofed source", resets[0]);
}

#[test]
fn the_punt_budget_admits_a_burst_then_the_rate_before_anything_is_queued() {
    use crate::pipeline::kernel::PuntBudget;
    // 1000 a second, 10 at once: 100 packets at once admit 10; 5 ms later 5 more; a second
    // later a full burst again, never more.
    let budget = PuntBudget::per_lcore(1000, 10, 1);
    let t = kernel_tables_with(true, true, &[], 1024, budget, &[]);
    let mut e = engine_with(t, Collect::new(0));
    let flood: Vec<Vec<u8>> = (0..25).map(|_| udp(9, b"flood")).collect();
    let at = |ms: u64| Instant(T0.0 + ms * 1_000_000);
    for _ in 0..4 {
        run_burst(&mut e, &flood, at(0));
    }
    assert_eq!(count(&e, Outcome::Kernel), 10);
    assert_eq!(count(&e, Outcome::KernelLimited), 90);
    run_burst(&mut e, &flood, at(5));
    assert_eq!(count(&e, Outcome::Kernel), 15);
    run_burst(&mut e, &flood, at(1000));
    assert_eq!(count(&e, Outcome::Kernel), 25);
    assert_eq!(count(&e, Outcome::KernelLimited), 125);
    // Checked before the queue: the limited never reached it.
    assert_eq!(e.pipeline().tables().sockets[1].len(), 25);
    assert_eq!(count(&e, Outcome::KernelFull), 0);
}

#[test]
fn only_listed_ports_are_punted_without_unhandled_and_the_rest_keeps_its_answers() {
    let rules = [(IpProtocol::TCP, 22), (IpProtocol::UDP, 53)];
    let mut e = engine_with(kernel_tables(true, false, &rules, 64), Collect::new(0));
    for f in [tcp(22), udp(53, b"query")] {
        one(&mut e, f);
    }
    assert_eq!(count(&e, Outcome::Kernel), 2);
    // Not listed: a reset, a Port Unreachable, a Protocol Unreachable, as without a kernel path.
    for f in [
        tcp(23),
        udp(54, b"closed"),
        v4_frame(THEM, ME, IpProtocol(99), &[], 0, b"x"),
    ] {
        one(&mut e, f);
    }
    assert_eq!(count(&e, Outcome::TcpReset), 1);
    assert_eq!(count(&e, Outcome::IcmpError), 2);
    // The neighbour replies the kernel asked for go to it whatever the rules.
    kernel_sends(&e, &kernel_arp_request(THEM), T0);
    kernel_sends(&e, &kernel_ns(THEM6.parse().unwrap(), false), T0);
    for f in [arp(2), neighbour_advert()] {
        one(&mut e, f);
    }
    assert_eq!(count(&e, Outcome::Kernel), 4);
}

#[test]
fn an_unsolicited_neighbour_advert_is_dropped_and_counted() {
    let mut e = engine_with(kernel_tables(true, true, &[], 64), Collect::new(0));
    let (me, them): (std::net::Ipv6Addr, std::net::Ipv6Addr) = (ME6.parse().unwrap(), THEM6.parse().unwrap());
    // Nothing asked: with the Override flag it would rewrite the kernel's entry for `them`
    // (RFC 4861 §7.2.5), with the Solicited flag too.
    for flags in [OVERRIDE, SOLICITED | OVERRIDE, SOLICITED, 0] {
        one(&mut e, advert(flags, them, me));
    }
    assert_eq!(count(&e, Outcome::NeighborUnsolicited), 4);
    assert_eq!(count(&e, Outcome::Kernel), 0);
    assert_eq!(e.pipeline().tables().sockets[1].len(), 0, "nothing reached the kernel");
    // Asked about `them`: an advertisement without the Solicited flag is still no answer
    // (Linux's `drop_unsolicited_na`).
    kernel_sends(&e, &kernel_ns(them, false), T0);
    one(&mut e, advert(OVERRIDE, them, me));
    assert_eq!(count(&e, Outcome::NeighborUnsolicited), 5);
    assert_eq!(count(&e, Outcome::Kernel), 0);
    assert_eq!(total(&e), 5);
}

#[test]
fn a_solicited_advert_for_a_target_the_kernel_asked_about_is_punted() {
    let mut e = engine_with(kernel_tables(true, false, &[], 64), Collect::new(0));
    let me: std::net::Ipv6Addr = ME6.parse().unwrap();
    let them: std::net::Ipv6Addr = THEM6.parse().unwrap();
    let probed: std::net::Ipv6Addr = "2001:db8::9".parse().unwrap();
    // A multicast solicitation for `them`, a unicast reachability probe of `probed`.
    kernel_sends(&e, &kernel_ns(them, false), T0);
    kernel_sends(&e, &kernel_ns(probed, true), T0);
    let later = Instant(T0.0 + 1_000_000);
    one_at(&mut e, advert(SOLICITED | OVERRIDE, them, me), later);
    one_at(&mut e, advert(SOLICITED, probed, me), later);
    assert_eq!(count(&e, Outcome::Kernel), 2);
    // A second answer within the window is taken too, as Linux takes every answer while the
    // entry is INCOMPLETE or PROBE.
    one_at(&mut e, advert(SOLICITED | OVERRIDE, them, me), later);
    assert_eq!(count(&e, Outcome::Kernel), 3);
    assert_eq!(e.pipeline().tables().sockets[1].len(), 3);
    // An address the kernel did not ask about, though others were.
    one_at(
        &mut e,
        advert(SOLICITED | OVERRIDE, "2001:db8::8".parse().unwrap(), me),
        later,
    );
    assert_eq!(count(&e, Outcome::NeighborUnsolicited), 1);
    // The fast path still answers solicitations for our own address itself.
    let group = wire::ipv6::solicited_node(&me);
    let ns = crate::pipeline::ndp::tests::ns(them, group, me, 255, &crate::pipeline::ndp::tests::SLLA);
    one_at(&mut e, ns.data().to_vec(), later);
    assert_eq!(count(&e, Outcome::NdpReply), 1);
    assert_eq!(count(&e, Outcome::Kernel), 3);
    assert_eq!(total(&e), 5);
}

#[test]
fn an_advert_after_the_answer_window_is_dropped() {
    use crate::pipeline::kernel::ANSWER_WINDOW_NS;
    let mut e = engine_with(kernel_tables(true, true, &[], 64), Collect::new(0));
    let (me, them) = (ME6.parse().unwrap(), THEM6.parse().unwrap());
    kernel_sends(&e, &kernel_ns(them, true), T0);
    one_at(&mut e, advert(SOLICITED, them, me), Instant(T0.0 + ANSWER_WINDOW_NS));
    assert_eq!(count(&e, Outcome::Kernel), 1, "the last moment of the window");
    let expired = Instant(T0.0 + ANSWER_WINDOW_NS + 1);
    one_at(&mut e, advert(SOLICITED, them, me), expired);
    assert_eq!(count(&e, Outcome::NeighborUnsolicited), 1, "expired");
    // The kernel's next probe opens the window again.
    kernel_sends(&e, &kernel_ns(them, true), expired);
    one_at(&mut e, advert(SOLICITED, them, me), expired);
    assert_eq!(count(&e, Outcome::Kernel), 2);
}

#[test]
fn an_arp_reply_is_punted_only_if_the_kernel_asked_for_its_sender() {
    use crate::pipeline::kernel::ANSWER_WINDOW_NS;
    use crate::pipeline::tests::MAC;
    let mut e = engine_with(kernel_tables(true, true, &[], 64), Collect::new(0));
    one(&mut e, arp(2));
    assert_eq!(count(&e, Outcome::NeighborUnsolicited), 1, "nobody asked");
    kernel_sends(&e, &kernel_arp_request(THEM), T0);
    one(&mut e, arp(2));
    assert_eq!(count(&e, Outcome::Kernel), 1, "the kernel asked for THEM");
    // Another sender, though the kernel asked for THEM.
    let other = Ipv4Addr::new(198, 51, 100, 8);
    one(&mut e, arp_from(2, MAC, other, ME));
    assert_eq!(count(&e, Outcome::NeighborUnsolicited), 2);
    // Too late.
    one_at(&mut e, arp(2), Instant(T0.0 + ANSWER_WINDOW_NS + 1));
    assert_eq!(count(&e, Outcome::NeighborUnsolicited), 3);
    assert_eq!(count(&e, Outcome::Kernel), 1);
    assert_eq!(e.pipeline().tables().sockets[1].len(), 1);
    // The fast path still answers requests for our address itself.
    one(&mut e, arp(1));
    assert_eq!(count(&e, Outcome::ArpReply), 1);
    assert_eq!(total(&e), 5);
}

/// Gratuitous ARP (request or reply, sender = target) and unsolicited advertisements to all
/// nodes (an address announced, or defended in Duplicate Address Detection) never reach the
/// kernel, even while it is asking about that address.
#[test]
fn gratuitous_arp_and_announcements_never_reach_the_kernel() {
    use crate::pipeline::tests::MAC;
    use wire::EthernetAddress;
    let mut e = engine_with(kernel_tables(true, true, &[], 64), Collect::new(0));
    let them6: std::net::Ipv6Addr = THEM6.parse().unwrap();
    kernel_sends(&e, &kernel_arp_request(THEM), T0);
    kernel_sends(&e, &kernel_ns(them6, false), T0);
    let all_nodes = wire::ipv6::ALL_NODES;
    for f in [
        arp_from(1, EthernetAddress::BROADCAST, THEM, THEM),
        arp_from(2, EthernetAddress::BROADCAST, THEM, THEM),
        arp_from(1, MAC, THEM, THEM),
        arp_from(2, MAC, THEM, THEM),
        arp_from(2, EthernetAddress::BROADCAST, THEM, ME),
        advert(OVERRIDE, them6, all_nodes),
        advert(0, them6, all_nodes),
    ] {
        one(&mut e, f);
    }
    assert_eq!(count(&e, Outcome::ArpIgnored), 5);
    assert_eq!(count(&e, Outcome::NdpIgnored), 2);
    assert_eq!(count(&e, Outcome::Kernel), 0);
    assert_eq!(e.pipeline().tables().sockets[1].len(), 0);
    // The kernel's own announcements and Duplicate Address Detection ask about nothing.
    let ours6: std::net::Ipv6Addr = ME6.parse().unwrap();
    let dad = crate::pipeline::ndp::tests::ns(
        std::net::Ipv6Addr::UNSPECIFIED,
        wire::ipv6::solicited_node(&ours6),
        ours6,
        255,
        &[],
    );
    kernel_sends(&e, dad.data(), T0);
    kernel_sends(&e, &kernel_arp_request(ME), T0);
    for f in [arp_from(2, MAC, ME, ME), advert(SOLICITED | OVERRIDE, ours6, ours6)] {
        one(&mut e, f);
    }
    assert_eq!(count(&e, Outcome::Kernel), 0);
}

#[test]
fn an_invalid_advert_is_not_punted_even_when_asked() {
    let mut e = engine_with(kernel_tables(true, true, &[], 64), Collect::new(0));
    let (me, them): (std::net::Ipv6Addr, std::net::Ipv6Addr) = (ME6.parse().unwrap(), THEM6.parse().unwrap());
    kernel_sends(&e, &kernel_ns(them, false), T0);
    // RFC 4861 §7.1.2: forwarded (hop limit below 255), a wrong checksum, the Solicited flag on
    // an advertisement to a group.
    let mut forwarded = advert(SOLICITED, them, me);
    forwarded[14 + 7] = 64;
    let mut bad_sum = advert(SOLICITED, them, me);
    bad_sum[14 + 40 + 2] ^= 0xff;
    for f in [forwarded, bad_sum, advert(SOLICITED, them, wire::ipv6::ALL_NODES)] {
        one(&mut e, f);
    }
    assert_eq!(count(&e, Outcome::NdpIgnored), 2);
    assert_eq!(count(&e, Outcome::Malformed), 1);
    assert_eq!(count(&e, Outcome::Kernel), 0);
    one(&mut e, advert(SOLICITED, them, me));
    assert_eq!(count(&e, Outcome::Kernel), 1, "the same answer, valid");
}

#[test]
fn a_port_without_a_kernel_interface_keeps_todays_behaviour() {
    let mut e = engine_with(
        kernel_tables(false, true, &[(IpProtocol::TCP, 22)], 64),
        Collect::new(0),
    );
    for f in [tcp(22), udp(9, b"closed"), arp(2), neighbour_advert()] {
        one(&mut e, f);
    }
    assert_eq!(count(&e, Outcome::Kernel), 0);
    assert_eq!(count(&e, Outcome::TcpReset), 1);
    assert_eq!(count(&e, Outcome::IcmpError), 1);
    assert_eq!(count(&e, Outcome::ArpIgnored), 1);
    assert_eq!(count(&e, Outcome::NdpIgnored), 1);
}

#[test]
fn a_full_kernel_queue_refuses_as_kernel_full_without_waiting() {
    let mut e = engine_with(kernel_tables(true, true, &[], 4), Collect::new(0));
    // One burst of 10 packets of one flow for a queue of 4: the RX lcore never waits.
    let frames: Vec<Vec<u8>> = (0..10).map(|_| udp(9, b"flood")).collect();
    run_burst(&mut e, &frames, T0);
    e.end_burst();
    let (kernel, full) = (count(&e, Outcome::Kernel), count(&e, Outcome::KernelFull));
    assert_eq!(kernel + full, 10);
    assert!(kernel <= 4 && full >= 6, "kernel {kernel}, full {full}");
    assert_eq!(count(&e, Outcome::SocketFull) + count(&e, Outcome::Delivered), 0);
}

#[test]
fn the_udp_fast_path_and_the_general_path_agree_on_a_kernel_port() {
    use crate::pipeline::Pipeline;
    // Punted by `unhandled`, by the rule for 53, not at all; on a mirrored port or not; the same
    // frame again and again (the fanout's and the ICMP limiter's state must evolve alike).
    for (kernel_port, unhandled) in [(true, false), (true, true), (false, true)] {
        let t = kernel_tables(kernel_port, unhandled, &[(IpProtocol::UDP, 53)], 64);
        for dport in [7u16, 9, 53] {
            let f = udp(dport, b"same frame");
            let mut a = Pipeline::new(t.clone(), 0);
            // A clone: the same random draws (the identifications of the errors included).
            let mut b = a.clone();
            for round in 0..8 {
                let (mut x, mut y) = (HeapBuf::new(&f), HeapBuf::new(&f));
                let (va, vb) = (a.process(0, &mut x, T0), b.process_general(0, &mut y, T0));
                assert_eq!(
                    va, vb,
                    "port {dport}, unhandled {unhandled}, kernel port {kernel_port}, round {round}"
                );
                assert_eq!(x.data(), y.data());
                if va == crate::pipeline::Verdict::Deliver {
                    assert_eq!(a.delivered_to(), b.delivered_to());
                }
            }
        }
    }
}

const ME6: &str = "2001:db8::1";
const THEM6: &str = "2001:db8::7";

/// A TCP segment with `flags` from THEM:`sport` to ME:`dport`, checksums right.
fn tcp4(sport: u16, dport: u16, flags: TcpFlags) -> Vec<u8> {
    let mut t = tcp_bytes(sport, dport, flags);
    let c = !checksum::fold(checksum::sum(checksum::pseudo_v4(THEM, ME, 6, t.len() as u16), &t));
    t[16..18].copy_from_slice(&c.to_be_bytes());
    v4_frame(THEM, ME, IpProtocol::TCP, &[], 0, &t)
}

/// [`tcp4`] over IPv6.
fn tcp6(sport: u16, dport: u16, flags: TcpFlags) -> Vec<u8> {
    let (src, dst) = (THEM6.parse().unwrap(), ME6.parse().unwrap());
    let mut t = tcp_bytes(sport, dport, flags);
    let c = !checksum::fold(checksum::sum(checksum::pseudo_v6(&src, &dst, 6, t.len() as u32), &t));
    t[16..18].copy_from_slice(&c.to_be_bytes());
    v6_frame(src, dst, IpProtocol::TCP, &[], 64, &t)
}

/// A UDP datagram from THEM6 to ME6:`dport`, its checksum filled (IPv6 requires one).
fn udp6(dport: u16, payload: &[u8]) -> Vec<u8> {
    let (src, dst) = (THEM6.parse().unwrap(), ME6.parse().unwrap());
    with_udp_checksum(v6_frame(
        src,
        dst,
        IpProtocol::UDP,
        &[],
        64,
        &udp_bytes(4000, dport, payload),
    ))
}

/// The kind a frame is delivered as, and its sequence number: the first two payload bytes.
fn tag(b: &HeapBuf) -> (u8, u8) {
    let d = b.data();
    let l4 = if wire::be16(d, 12) == 0x86dd {
        54
    } else {
        14 + (d[14] & 0xf) as usize * 4
    };
    (d[l4 + 8], d.get(l4 + 9).copied().unwrap_or(0))
}

/// Outcome counts, the ICMP errors and TCP resets sent or suppressed counted together: which
/// of a destination's packets draws the limiter's random credits depends on the order they
/// are decided in, which the loops change, not on how many there are.
fn outcome_counts(e: &Engine) -> Vec<(String, u64)> {
    let merge = |o: Outcome| match o {
        Outcome::IcmpSuppressed => Outcome::IcmpError,
        Outcome::TcpResetSuppressed => Outcome::TcpReset,
        o => o,
    };
    let mut counts = std::collections::BTreeMap::new();
    for o in Outcome::ALL {
        *counts.entry(merge(o).name().to_string()).or_default() += count(e, o);
    }
    counts.into_iter().collect()
}

/// Builds the `i`th frame of a flood.
type Frame = fn(u16) -> Vec<u8>;

#[test]
fn a_flood_of_one_kind_leads_the_next_bursts_and_decides_as_before() {
    // A SYN flood to a port without a service, UDP over IPv6 to the service, a SYN flood
    // over IPv6, then IPv4/UDP again: after one burst of each, the first loop runs that
    // kind's fast path and nothing goes to the second loop.
    let floods: [(Lead, Frame); 4] = [
        (Lead::Tcp4, |i| tcp4(1000 + i, 9, TcpFlags::SYN)),
        (Lead::Udp6, |i| udp6(7, &[b'6', i as u8])),
        (Lead::Tcp6, |i| tcp6(1000 + i, 9, TcpFlags::SYN)),
        (Lead::Udp4, |i| udp(7, &[b'4', i as u8])),
    ];
    let mut e = engine_with(tables(1, 1, 4096), Collect::new(0));
    let mut reference = engine_with(tables(1, 1, 4096), Collect::new(0));
    let mut received = 0;
    for (lead, frame) in &floods {
        for b in 0..3u16 {
            let frames: Vec<Vec<u8>> = (0..32).map(|i| frame(b * 32 + i)).collect();
            let before = e.second_loop;
            run_burst(&mut e, &frames, T0);
            for f in &frames {
                reference.receive(0, HeapBuf::new(f), T0);
            }
            reference.end_burst();
            reference.poll_done(T0);
            received += frames.len() as u64;
            assert_eq!(e.lead, *lead, "after burst {b}");
            let second = e.second_loop - before;
            assert_eq!(second, if b == 0 { 32 } else { 0 }, "{lead:?}, burst {b}");
        }
    }
    assert_eq!(total(&e), received);
    assert_eq!(outcome_counts(&e), outcome_counts(&reference));
    assert_eq!(count(&e, Outcome::Delivered), 2 * 3 * 32);
    assert!(count(&e, Outcome::TcpReset) > 0 && count(&e, Outcome::TcpResetSuppressed) > 0);
    let got: Vec<(u8, u8)> = e.io().delivered.iter().map(|(_, b)| tag(b)).collect();
    let want: Vec<(u8, u8)> = reference.io().delivered.iter().map(|(_, b)| tag(b)).collect();
    assert_eq!(got, want);
}

#[test]
fn only_a_kind_that_is_more_than_half_a_burst_leads() {
    let mut e = engine_with(tables(1, 1, 4096), Collect::new(0));
    // Half SYNs, half datagrams for the service: IPv4/UDP keeps the lead.
    let half: Vec<Vec<u8>> = (0..32u16)
        .map(|i| {
            if i % 2 == 0 {
                tcp4(i, 9, TcpFlags::SYN)
            } else {
                udp(7, &[b'a', i as u8])
            }
        })
        .collect();
    run_burst(&mut e, &half, T0);
    assert_eq!(e.lead, Lead::Udp4);
    // Most of the burst goes to the second loop but no kind is more than half of it (pings,
    // SYNs, IPv6 datagrams): no change either.
    let spread: Vec<Vec<u8>> = (0..30u16)
        .map(|i| match i % 3 {
            0 => ping(8),
            1 => tcp4(i, 9, TcpFlags::SYN),
            _ => udp6(7, &[b'b', i as u8]),
        })
        .collect();
    run_burst(&mut e, &spread, T0);
    assert_eq!(e.lead, Lead::Udp4);
    // 17 of 32 over IPv6: it leads, once the election that changed nothing has waited its
    // bursts out; the IPv4 datagrams behind it are still delivered, each kind in order.
    let mostly6: Vec<Vec<u8>> = (0..32u16)
        .map(|i| {
            if i < 17 {
                udp6(7, &[b'6', i as u8])
            } else {
                udp(7, &[b'4', i as u8])
            }
        })
        .collect();
    for b in 0..ELECTION_BACKOFF {
        run_burst(&mut e, &mostly6, T0);
        assert_eq!(e.lead, Lead::Udp4, "burst {b} of the wait");
    }
    run_burst(&mut e, &mostly6, T0);
    assert_eq!(e.lead, Lead::Udp6);
    let before = e.io().delivered.len();
    // Six of eight to the second loop, four of them IPv4/UDP: exactly half is not more.
    let interleaved: Vec<Vec<u8>> = (0..8u8)
        .map(|i| match i % 4 {
            0 => udp6(7, &[b'x', i]),
            2 => tcp4(i as u16, 9, TcpFlags::SYN),
            _ => udp(7, &[b'y', i]),
        })
        .collect();
    run_burst(&mut e, &interleaved, T0);
    assert_eq!(e.lead, Lead::Udp6, "half a burst does not change the lead");
    let got: Vec<(u8, u8)> = e.io().delivered[before..].iter().map(|(_, b)| tag(b)).collect();
    assert_eq!(
        got,
        vec![(b'x', 0), (b'x', 4), (b'y', 1), (b'y', 3), (b'y', 5), (b'y', 7)]
    );
    assert_eq!(total(&e), 32 + 30 + 32 * (ELECTION_BACKOFF as u64 + 1) + 8);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Any mix of kinds, in bursts of any size: the same outcomes as one packet at a time,
    /// every packet counted once, each kind's deliveries in arrival order.
    #[test]
    fn any_mix_of_kinds_decides_as_one_packet_at_a_time(
        kinds in proptest::collection::vec(0u8..8, 1..400),
        cuts in proptest::collection::vec(1usize..=32, 1..40),
    ) {
        let frames: Vec<Vec<u8>> = kinds
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let i = i as u16;
                match k {
                    0 => udp(7, &[b'u', i as u8]),
                    1 => udp(9, b"closed"),
                    2 => tcp4(i, 9, TcpFlags::SYN),
                    3 => udp6(7, &[b'v', i as u8]),
                    4 => tcp6(i, 9, TcpFlags::SYN),
                    5 => v4_frame(THEM, ME, IpProtocol::UDP, &[1, 1, 1, 1], 0, &udp_bytes(4000, 7, &[b'o', i as u8])),
                    6 => ping(8),
                    _ => vec![0u8; 30],
                }
            })
            .collect();
        let mut e = engine_with(tables(1, 1, 4096), Collect::new(0));
        let mut reference = engine_with(tables(1, 1, 4096), Collect::new(0));
        let mut at = 0;
        for cut in cuts.iter().cycle() {
            if at == frames.len() {
                break;
            }
            let end = (at + cut).min(frames.len());
            run_burst(&mut e, &frames[at..end], T0);
            at = end;
        }
        for f in &frames {
            reference.receive(0, HeapBuf::new(f), T0);
        }
        reference.end_burst();
        reference.poll_done(T0);
        proptest::prop_assert_eq!(total(&e), frames.len() as u64);
        proptest::prop_assert_eq!(outcome_counts(&e), outcome_counts(&reference));
        for kind in [b'u', b'v', b'o'] {
            let seq = |e: &Engine| -> Vec<u8> {
                e.io().delivered.iter().map(|(_, b)| tag(b)).filter(|t| t.0 == kind).map(|t| t.1).collect()
            };
            proptest::prop_assert_eq!(seq(&e), seq(&reference));
        }
    }
}

mod trace_tests;

mod icmp_backend_tests;
