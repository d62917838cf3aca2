//! The worker engine over heap buffers: each action (echo, sink, tunnel, kernel both ways), the
//! sequence tunnels' hand-off and numbering, each too-big decision, and what
//! `fastpath_socket_processed_total` counts for each.

use super::*;
use crate::buf::{HeapBuf, PacketBuf, Tunnelled};
use crate::pipeline::fanout::FanoutMode;
use crate::pipeline::kernel::{KernelCounters, KernelPath, Solicitations};
use crate::pipeline::maglev::Backend;
use crate::pipeline::parse::tests::{udp_bytes, v4_frame, v6_frame, MAC};
use crate::pipeline::tests::{port, with_udp_checksum};
use crate::pipeline::tunnel::{TunnelCounters, TunnelOut};
use crate::pipeline::{Group, Service, ServiceTable};
use crate::socket::{SimQueue, SocketCounters};
use crate::stats::QueueCounters;
use crate::tx::Collect;
use crate::wire::{self, IpProtocol, Toeplitz};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const ME: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const THEM: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);
const REMOTE: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
const T0: Instant = Instant(1_000_000_000);
/// The heap engine's clock: nanoseconds, so a service's `cost_ns` is spun in cycles of 1 ns.
const HZ: u64 = 1_000_000_000;

fn me6() -> Ipv6Addr {
    "2001:db8::1".parse().unwrap()
}

fn them6() -> Ipv6Addr {
    "2001:db8::7".parse().unwrap()
}

/// Tunnel "t" to [`REMOTE`] with key 7 on port 0 (path MTU 1500: 1472 bytes inside), owned by
/// worker 1 when `sequence`.
fn gre_tunnel(sequence: bool) -> Tunnel {
    Tunnel {
        name: "t".into(),
        local: ME.into(),
        remote: REMOTE.into(),
        key: Some(7),
        sequence,
        checksum: false,
        ttl: 64,
        out: TunnelOut::Port {
            port: 0,
            src_mac: MAC,
            dst_mac: wire::EthernetAddress([2, 0, 0, 0, 0, 9]),
            mtu: 1500,
        },
        depth: 1,
        owner: 1,
        counters: Arc::new(TunnelCounters::new(1, 2)),
        handoff: None,
        max_seq_jump: crate::pipeline::tunnel::DEFAULT_MAX_SEQ_JUMP,
    }
}

/// Tables of generation 1 with one service of `action` on UDP port 7 over one socket of 64
/// packets fed by `rx_lcores` RX lcores and drained by worker 0 (of 2), a service cost of
/// `cost_ns`, and tunnel "t" ([`gre_tunnel`]).
fn tables_with(action: Action, rx_lcores: usize, cost_ns: u32, sequence: bool) -> Arc<Tables> {
    let queues = (0..rx_lcores).map(|_| SimQueue::new(64).into()).collect();
    let sock = Arc::new(Socket::with_queues(
        "svc",
        0,
        queues,
        0,
        Arc::new(SocketCounters::new(rx_lcores, 2)),
    ));
    let svc = Service {
        name: "svc".into(),
        protocol: IpProtocol::UDP,
        addresses: vec![],
        group: Group {
            sockets: vec![0],
            mode: FanoutMode::Hash,
            rollover: false,
            huge_flows: false,
            flow_limit: true,
        },
        action,
        cost_ns,
        echo_allow_low_ports: false,
    };
    Arc::new(Tables {
        generation: 1,
        ports: vec![port()],
        hasher: Toeplitz::default(),
        services: ServiceTable::new(vec![(svc, vec![7])]),
        sockets: vec![sock],
        tunnels: vec![gre_tunnel(sequence)],
        ..Default::default()
    })
}

fn tables(action: Action) -> Arc<Tables> {
    tables_with(action, 1, 0, false)
}

/// A `tunnel` service's backends: tunnel 0 alone.
fn to_tunnel() -> Action {
    Action::Tunnel(Backends::new(
        vec![0],
        &[Backend {
            name: "t".into(),
            weight: 1,
            drain: false,
            up: true,
        }],
    ))
}

type Engine = WorkerEngine<HeapBuf, HeapWorkerIo>;

/// The engine of worker `slot` over `t`, sending on ports 0 and 1.
fn engine_at(t: Arc<Tables>, slot: usize) -> Engine {
    let stats = Arc::new(LcoreStats::new(
        slot as u32,
        vec![],
        vec![QueueCounters::new(0, 0), QueueCounters::new(1, 0)],
    ));
    let tx = vec![Collect::new(0), Collect::new(1)];
    WorkerEngine::new(t, slot, tx, HeapWorkerIo::default(), stats, HZ)
}

fn engine(t: Arc<Tables>) -> Engine {
    engine_at(t, 0)
}

fn sent(e: &mut Engine, port: u16) -> &mut Vec<HeapBuf> {
    &mut e.tx_queue_mut(port).unwrap().sent
}

/// Puts `frames` in the socket's queue of RX lcore `slot`, as that RX lcore would.
fn deliver(e: &mut Engine, slot: usize, frames: &[Vec<u8>]) {
    let s = e.tables().sockets[0].clone();
    for f in frames {
        assert!(e.io_mut().deliver(&s, slot, HeapBuf::new(f)));
    }
}

/// `fastpath_socket_processed_total` of the socket by result, as the metrics sum it, with what
/// was dequeued: (dequeued, echoed, sunk, kernel, tx_full, invalid, refused).
fn processed(e: &Engine) -> [u64; 7] {
    let c = &e.tables().sockets[0].counters;
    [
        c.sum(|x| &x.dequeued),
        c.sum(|x| &x.echoed),
        c.sum(|x| &x.sunk),
        c.sum(|x| &x.kernel),
        c.sum(|x| &x.tx_full),
        c.sum(|x| &x.invalid),
        c.sum(|x| &x.refused),
    ]
}

fn tunnel_counters(e: &Engine) -> &TunnelCounters {
    &e.tables().tunnels[0].counters
}

/// A UDP datagram from THEM:`sport` to us on port 7 with `n` bytes of payload, flags `flags`
/// (0x4000: DF).
fn udp4(sport: u16, n: usize, flags: u16) -> Vec<u8> {
    let payload: Vec<u8> = (0..n).map(|i| i as u8).collect();
    v4_frame(THEM, ME, IpProtocol::UDP, &[], flags, &udp_bytes(sport, 7, &payload))
}

fn udp6(n: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..n).map(|i| i as u8).collect();
    with_udp_checksum(v6_frame(
        them6(),
        me6(),
        IpProtocol::UDP,
        &[],
        64,
        &udp_bytes(4000, 7, &payload),
    ))
}

/// Whether `frame` is IPv4 carrying GRE (or an outer fragment of it) from us to REMOTE.
fn is_gre_to_remote(frame: &[u8]) -> bool {
    frame[12..14] == [8, 0] && frame[14 + 9] == 47 && frame[14 + 16..14 + 20] == REMOTE.octets()
}

/// The IPv4 header's flags and fragment offset at byte `at`.
fn frag_field(frame: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([frame[at + 6], frame[at + 7]])
}

// ---------------------------------------------------------------------------------------------
// echo

#[test]
fn echo_answers_in_place_on_the_port_it_came_in_on() {
    let mut e = engine(tables(Action::Echo));
    deliver(&mut e, 0, &[udp4(4000, 5, 0)]);
    let got = e.poll(T0);
    assert_eq!(
        got,
        Polled {
            taken: 1,
            from_kernel: 0
        }
    );
    let out = sent(&mut e, 0);
    assert_eq!(out.len(), 1);
    let d = out[0].data();
    assert_eq!(&d[0..6], &[2, 0, 0, 0, 0, 2], "back to the sender's MAC");
    assert_eq!(&d[6..12], &MAC.0, "from the port's");
    assert_eq!((&d[26..30], &d[30..34]), (&ME.octets()[..], &THEM.octets()[..]));
    assert_eq!((&d[34..36], &d[36..38]), (&[0, 7][..], &4000u16.to_be_bytes()[..]));
    assert_eq!(processed(&e), [1, 1, 0, 0, 0, 0, 0]);
    assert!(e.tables().sockets[0].is_empty());
    assert_eq!(e.stats().tx[0].packets.get(), 1);
}

/// Armed, the worker records what it did with each packet that passes the filter, and only
/// those; disarmed, nothing.
#[test]
fn a_traced_worker_records_where_each_packet_went() {
    use crate::trace::{Filter, Note, TraceSession, WorkerDid};
    let mut e = engine(tables(Action::Echo));
    let s = Arc::new(TraceSession::new(Filter::parse("src port 4000").unwrap(), u64::MAX, 64));
    e.stats().trace.arm(s.clone());
    deliver(&mut e, 0, &[udp4(4000, 5, 0), udp4(4001, 5, 0), udp4(7, 5, 0)]);
    e.poll(T0);
    let recs: Vec<_> = std::iter::from_fn(|| s.ring.pop()).collect();
    assert_eq!(recs.len(), 1, "{recs:?}");
    let r = &recs[0];
    assert!(r.worker && r.outcome == crate::outcome::Outcome::Delivered);
    assert_eq!(r.summary.ip.unwrap().ports, Some((4000, 7)));
    assert_eq!(
        r.notes(),
        &[
            Note::Worker { socket: 0 },
            Note::WorkerAction {
                action: 1,
                did: WorkerDid::Port(0)
            }
        ]
    );
    assert_eq!(
        sent(&mut e, 0).len(),
        2,
        "traced or not, the same answers (port 7: refused)"
    );
    let s = Arc::new(TraceSession::new(Filter::default(), u64::MAX, 64));
    e.stats().trace.arm(s.clone());
    deliver(&mut e, 0, &[udp4(7, 5, 0)]);
    e.poll(T0);
    let r = s.ring.pop().unwrap();
    assert_eq!(
        r.notes()[1],
        Note::WorkerAction {
            action: 1,
            did: WorkerDid::Refused
        }
    );
    e.stats().trace.disarm();
    deliver(&mut e, 0, &[udp4(4000, 5, 0)]);
    e.poll(T0);
    assert!(s.ring.pop().is_none());
}

#[test]
fn echo_above_the_port_mtu_leaves_in_fragments() {
    let mut e = engine(tables(Action::Echo));
    // A reassembled datagram of 3000 bytes: the answer is ours to fragment.
    let s = e.tables().sockets[0].clone();
    s.queue(0).sim().unwrap().push(1);
    e.io_mut()
        .place(&s, 0, HeapBuf::with_room(&udp4(4000, 2972, 0x4000), 128, 64));
    e.poll(T0);
    let out = sent(&mut e, 0);
    assert!(out.len() >= 3, "{} pieces", out.len());
    for (i, f) in out.iter().enumerate() {
        let d = f.data();
        assert!(d.len() <= 1514, "{} bytes", d.len());
        let more = frag_field(d, 14) & 0x2000 != 0;
        assert_eq!(more, i + 1 < out.len(), "more fragments on all but the last");
    }
    assert_eq!(
        processed(&e),
        [1, 1, 0, 0, 0, 0, 0],
        "counted once, with the last piece"
    );
}

#[test]
fn echo_counts_what_it_does_not_answer() {
    let mut e = engine(tables(Action::Echo));
    let mut bad_sum = udp6(8);
    let at = bad_sum.len() - 1;
    bad_sum[at] ^= 1;
    // A privileged source port, the echo port itself, a bad checksum, not UDP at all.
    deliver(&mut e, 0, &[udp4(53, 4, 0), udp4(7, 4, 0), bad_sum, vec![0u8; 60]]);
    e.poll(T0);
    assert!(sent(&mut e, 0).is_empty());
    assert_eq!(processed(&e), [4, 0, 0, 0, 0, 2, 2]);
}

#[test]
fn an_echo_the_tx_queue_refuses_counts_tx_full() {
    let mut e = engine(tables(Action::Echo));
    e.tx_queue_mut(0).unwrap().room = Some(1);
    deliver(&mut e, 0, &[udp4(4000, 4, 0), udp4(4001, 4, 0), udp4(4002, 4, 0)]);
    e.poll(T0);
    assert_eq!(sent(&mut e, 0).len(), 1);
    assert_eq!(processed(&e), [3, 1, 0, 0, 2, 0, 0]);
}

#[test]
fn echo_through_a_tunnel_goes_back_through_it() {
    let mut e = engine(tables(Action::Echo));
    let mut m = HeapBuf::new(&udp4(4000, 16, 0));
    m.set_tunnelled(Some(Tunnelled {
        tunnel: 0,
        depth: 1,
        generation: 1,
    }));
    let s = e.tables().sockets[0].clone();
    assert!(e.io_mut().deliver(&s, 0, m));
    // Received under other tables: the index is not trusted, and nothing leaves bare.
    let mut stale = HeapBuf::new(&udp4(4001, 16, 0));
    stale.set_tunnelled(Some(Tunnelled {
        tunnel: 0,
        depth: 1,
        generation: 9,
    }));
    assert!(e.io_mut().deliver(&s, 0, stale));
    e.poll(T0);
    let out = sent(&mut e, 0);
    assert_eq!(out.len(), 1);
    assert!(is_gre_to_remote(out[0].data()));
    assert_eq!(processed(&e), [2, 1, 0, 0, 0, 1, 0]);
    assert_eq!(tunnel_counters(&e).sum(|c| &c.encap), 1);
}

// ---------------------------------------------------------------------------------------------
// sink

#[test]
fn a_sink_without_a_cost_takes_everything_ready_and_returns_the_buffers() {
    let mut e = engine(tables(Action::Sink));
    let frames: Vec<Vec<u8>> = (0..50).map(|i| udp4(4000 + i, 4, 0)).collect();
    deliver(&mut e, 0, &frames);
    assert_eq!(e.poll(T0).taken, 50, "more than a burst at once");
    assert_eq!(processed(&e), [50, 0, 50, 0, 0, 0, 0]);
    assert_eq!(e.io().unread, 50, "freed where they are, never read");
    assert!(e.tables().sockets[0].is_empty());
    assert_eq!(e.io().spun, 0);
    assert!(sent(&mut e, 0).is_empty());
    assert_eq!(e.poll(T0).taken, 0);
}

#[test]
fn a_sink_with_a_cost_takes_a_burst_at_a_time_and_spends_it() {
    let mut e = engine(tables_with(Action::Sink, 1, 1000, false));
    let frames: Vec<Vec<u8>> = (0..50).map(|i| udp4(4000 + i, 4, 0)).collect();
    deliver(&mut e, 0, &frames);
    assert_eq!(e.poll(T0).taken, BURST);
    assert_eq!(e.io().spun, 1000 * BURST as u64, "the cost of each packet taken");
    assert_eq!(e.tables().sockets[0].len(), 50 - BURST);
    assert_eq!(e.poll(T0).taken, 50 - BURST);
    assert_eq!(processed(&e), [50, 0, 50, 0, 0, 0, 0]);
}

#[test]
fn a_socket_fed_by_several_rx_lcores_is_drained_round_robin() {
    let mut e = engine(tables_with(Action::Echo, 2, 0, false));
    let a: Vec<Vec<u8>> = (0..40).map(|i| udp4(4000 + i, 4, 0)).collect();
    let b: Vec<Vec<u8>> = (0..40).map(|i| udp4(5000 + i, 4, 0)).collect();
    deliver(&mut e, 0, &a);
    deliver(&mut e, 1, &b);
    // A burst from each queue per poll, the first queue taking turns.
    assert_eq!(e.poll(T0).taken, 2 * BURST);
    assert_eq!(e.tables().sockets[0].len(), 80 - 2 * BURST);
    let sports: Vec<u16> = sent(&mut e, 0)
        .iter()
        .map(|f| u16::from_be_bytes([f.data()[36], f.data()[37]]))
        .collect();
    assert!(sports[..BURST].iter().all(|&p| p < 5000), "queue 0 first on poll 0");
    assert!(sports[BURST..].iter().all(|&p| p >= 5000));
    sent(&mut e, 0).clear();
    assert_eq!(e.poll(T0).taken, 80 - 2 * BURST);
    let first = u16::from_be_bytes([sent(&mut e, 0)[0].data()[36], sent(&mut e, 0)[0].data()[37]]);
    assert!(first >= 5000, "queue 1 first on poll 1");
    assert_eq!(processed(&e), [80, 80, 0, 0, 0, 0, 0]);
}

// ---------------------------------------------------------------------------------------------
// tunnel

#[test]
fn a_tunnel_service_encapsulates_to_the_flows_backend() {
    let mut e = engine(tables(to_tunnel()));
    deliver(&mut e, 0, &[udp4(4000, 100, 0), vec![0u8; 60]]);
    e.poll(T0);
    let out = sent(&mut e, 0);
    assert_eq!(out.len(), 1);
    let d = out[0].data();
    assert!(is_gre_to_remote(d));
    // GRE with key 7 (flags 0x2000, protocol IPv4), then the datagram unchanged.
    assert_eq!(&d[34..42], &[0x20, 0, 8, 0, 0, 0, 0, 7]);
    assert_eq!(&d[42..], &udp4(4000, 100, 0)[14..]);
    assert_eq!(tunnel_counters(&e).sum(|c| &c.encap), 1);
    // Not IP: no backend for it.
    assert_eq!(processed(&e), [2, 0, 0, 0, 0, 1, 0]);
}

#[test]
fn a_sequence_tunnels_packets_go_to_its_owner_who_numbers_them_in_order() {
    let t = tables_with(to_tunnel(), 1, 0, true);
    let mut e = engine_at(t.clone(), 0);
    let frames: Vec<Vec<u8>> = (0..3).map(|i| udp4(4000 + i, 8, 0)).collect();
    deliver(&mut e, 0, &frames);
    e.poll(T0);
    assert!(sent(&mut e, 0).is_empty(), "not this worker's to number");
    let handed: Vec<HeapBuf> = e.io().handed("t").cloned().collect();
    assert_eq!(handed.len(), 3);
    assert_eq!(tunnel_counters(&e).sum(|c| &c.handed_off), 3);
    // The owner, worker 1, with what RX lcores handed it too.
    let mut owner = engine_at(t, 1);
    for h in handed {
        owner.io_mut().hand("t", h);
    }
    owner.io_mut().hand("t", HeapBuf::new(&udp4(4003, 8, 0)));
    assert_eq!(owner.poll(T0).taken, 4);
    let out = sent(&mut owner, 0);
    assert_eq!(out.len(), 4);
    for (i, f) in out.iter().enumerate() {
        let d = f.data();
        assert!(is_gre_to_remote(d));
        // Key and sequence (flags 0x3000): numbered from 1 in the order handed over.
        assert_eq!(&d[34..36], &[0x30, 0]);
        assert_eq!(u32::from_be_bytes(d[42..46].try_into().unwrap()), i as u32 + 1);
        assert_eq!(u16::from_be_bytes([d[46 + 20], d[46 + 21]]), 4000 + i as u16);
    }
    assert_eq!(owner.tables().tunnels[0].counters.workers[1].encap.get(), 4);
    // Numbering goes on across polls.
    owner.io_mut().hand("t", HeapBuf::new(&udp4(4004, 8, 0)));
    owner.poll(T0);
    let d = sent(&mut owner, 0)[4].data().to_vec();
    assert_eq!(u32::from_be_bytes(d[42..46].try_into().unwrap()), 5);
}

#[test]
fn a_refused_hand_off_counts_tx_full_on_the_tunnel() {
    let mut e = engine_at(tables_with(to_tunnel(), 1, 0, true), 0);
    e.io_mut().handoff_room = Some(1);
    deliver(&mut e, 0, &[udp4(4000, 8, 0), udp4(4001, 8, 0)]);
    e.poll(T0);
    assert_eq!(e.io().handed("t").count(), 1);
    let c = &tunnel_counters(&e).workers[0];
    assert_eq!((c.handed_off.get(), c.tx_full.get()), (2, 1));
}

// ---------------------------------------------------------------------------------------------
// too big for the tunnel

#[test]
fn too_big_ipv4_with_df_gets_fragmentation_needed_with_the_tunnel_mtu() {
    let mut e = engine(tables(to_tunnel()));
    // 1500 bytes of IP: 28 more for IPv4 and GRE with a key do not fit the path's 1500.
    deliver(&mut e, 0, &[udp4(4000, 1472, 0x4000)]);
    e.poll(T0);
    let out = sent(&mut e, 0);
    assert_eq!(out.len(), 1);
    let d = out[0].data();
    assert_eq!(d[14 + 9], 1, "ICMP");
    assert_eq!(&d[30..34], &THEM.octets(), "to the sender");
    assert_eq!((d[34], d[35]), (3, 4), "Destination Unreachable, Fragmentation Needed");
    assert_eq!(u16::from_be_bytes([d[40], d[41]]), 1472, "the tunnel's inner MTU");
    let c = tunnel_counters(&e);
    assert_eq!((c.sum(|c| &c.too_big), c.sum(|c| &c.encap)), (1, 0));
}

#[test]
fn too_big_ipv6_gets_packet_too_big() {
    let mut e = engine(tables(to_tunnel()));
    deliver(&mut e, 0, &[udp6(1452)]);
    e.poll(T0);
    let out = sent(&mut e, 0);
    assert_eq!(out.len(), 1);
    let d = out[0].data();
    assert_eq!(d[14 + 6], 58, "ICMPv6");
    assert_eq!(&d[38..54], &them6().octets(), "to the sender");
    assert_eq!((d[54], d[55]), (2, 0), "Packet Too Big");
    assert_eq!(u32::from_be_bytes(d[58..62].try_into().unwrap()), 1472);
    assert_eq!(tunnel_counters(&e).sum(|c| &c.too_big), 1);
}

#[test]
fn too_big_ipv6_that_was_reassembled_here_leaves_in_inner_fragments_each_encapsulated() {
    let mut e = engine(tables(to_tunnel()));
    let mut m = HeapBuf::new(&udp6(1452));
    m.set_reassembled();
    let s = e.tables().sockets[0].clone();
    assert!(e.io_mut().deliver(&s, 0, m));
    e.poll(T0);
    let out = sent(&mut e, 0);
    assert_eq!(out.len(), 2, "no Packet Too Big: its sender's fragments fitted");
    for (i, f) in out.iter().enumerate() {
        let d = f.data();
        assert!(is_gre_to_remote(d));
        assert!(d.len() <= 1514);
        assert_eq!(frag_field(d, 14) & 0x3fff, 0, "not an outer fragment");
        // Inside GRE (outer IPv4 20 + GRE with key 8): IPv6 with a Fragment header.
        assert_eq!(d[42 + 6], 44, "an inner IPv6 fragment");
        let more = u16::from_be_bytes([d[42 + 40 + 2], d[42 + 40 + 3]]) & 1;
        assert_eq!(more == 1, i == 0, "more fragments on the first");
    }
    let c = tunnel_counters(&e);
    assert_eq!((c.sum(|c| &c.too_big), c.sum(|c| &c.encap)), (1, 1));
}

#[test]
fn too_big_ipv4_without_df_is_encapsulated_in_outer_fragments() {
    let mut e = engine(tables(to_tunnel()));
    deliver(&mut e, 0, &[udp4(4000, 1472, 0)]);
    e.poll(T0);
    let out = sent(&mut e, 0);
    assert_eq!(out.len(), 2);
    for (i, f) in out.iter().enumerate() {
        let d = f.data();
        assert!(is_gre_to_remote(d));
        assert!(d.len() <= 1514);
        let ff = frag_field(d, 14);
        assert_eq!(ff & 0x2000 != 0, i == 0, "more fragments on the first");
        assert_eq!(ff & 0x1fff == 0, i == 0, "offset 0 on the first only");
    }
    let c = tunnel_counters(&e);
    assert_eq!(
        (c.sum(|c| &c.too_big), c.sum(|c| &c.fragmented), c.sum(|c| &c.encap)),
        (1, 1, 1)
    );
}

#[test]
fn too_big_through_the_tunnel_it_came_by_gets_its_error_through_it() {
    let mut e = engine(tables(to_tunnel()));
    let mut m = HeapBuf::new(&udp4(4000, 1472, 0x4000));
    m.set_tunnelled(Some(Tunnelled {
        tunnel: 0,
        depth: 1,
        generation: 1,
    }));
    let s = e.tables().sockets[0].clone();
    assert!(e.io_mut().deliver(&s, 0, m));
    e.poll(T0);
    let out = sent(&mut e, 0);
    assert_eq!(out.len(), 1);
    let d = out[0].data();
    assert!(is_gre_to_remote(d), "back the way it came, never bare");
    // Inside: outer IPv4 20 + GRE with key 8, then the ICMP error.
    assert_eq!((d[42 + 20], d[42 + 21]), (3, 4));
}

#[test]
fn our_own_echo_reply_too_big_for_its_tunnel_leaves_in_inner_pieces_each_encapsulated() {
    let mut e = engine(tables(Action::Echo));
    let mut m = HeapBuf::new(&udp4(4000, 1472, 0));
    m.set_tunnelled(Some(Tunnelled {
        tunnel: 0,
        depth: 1,
        generation: 1,
    }));
    let s = e.tables().sockets[0].clone();
    assert!(e.io_mut().deliver(&s, 0, m));
    e.poll(T0);
    let out = sent(&mut e, 0);
    assert_eq!(out.len(), 2);
    for (i, f) in out.iter().enumerate() {
        let d = f.data();
        assert!(is_gre_to_remote(d));
        assert!(d.len() <= 1514);
        assert_eq!(frag_field(d, 14) & 0x3fff, 0, "not an outer fragment");
        assert_eq!(frag_field(d, 42) & 0x2000 != 0, i == 0, "an inner fragment");
    }
    assert_eq!(processed(&e), [1, 1, 0, 0, 0, 0, 0]);
    let c = tunnel_counters(&e);
    assert_eq!((c.sum(|c| &c.encap), c.sum(|c| &c.too_big)), (1, 0));
}

// ---------------------------------------------------------------------------------------------
// kernel

/// [`tables`] with a `kernel` service and port 0 mirrored into kernel interface port 1.
fn kernel_tables() -> Arc<Tables> {
    let mut t = (*tables(Action::Kernel)).clone();
    t.kernel = Some(KernelPath {
        interface_of: vec![Some(1)],
        port_of: vec![None, Some(0)],
        index_of: vec![Some(0), Some(0)],
        counters: Arc::new(KernelCounters::new(2, 1)),
        solicited: Arc::new(Solicitations::new(2, 1)),
        ..Default::default()
    });
    Arc::new(t)
}

fn kernel_counters(e: &Engine) -> &crate::pipeline::kernel::KernelPortCounters {
    e.tables().kernel.as_ref().unwrap().counters(0, 0).unwrap()
}

#[test]
fn a_kernel_packet_is_written_to_the_interface_of_the_port_it_came_in_on() {
    let mut e = engine(kernel_tables());
    let mut inside = HeapBuf::new(&udp4(4001, 8, 0));
    inside.set_tunnelled(Some(Tunnelled {
        tunnel: 0,
        depth: 1,
        generation: 1,
    }));
    deliver(&mut e, 0, &[udp4(4000, 8, 0)]);
    let s = e.tables().sockets[0].clone();
    assert!(e.io_mut().deliver(&s, 0, inside));
    e.poll(T0);
    assert!(sent(&mut e, 0).is_empty());
    let out = sent(&mut e, 1);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].data(), &udp4(4000, 8, 0)[..], "unchanged");
    // From inside a tunnel: no port of its own to mirror.
    assert_eq!(processed(&e), [2, 0, 0, 1, 0, 1, 0]);
    let k = kernel_counters(&e);
    assert_eq!((k.to_kernel.get(), k.invalid.get()), (1, 1));
}

#[test]
fn what_the_kernel_writes_goes_out_of_its_port_and_its_questions_are_recorded() {
    let mut e = engine(kernel_tables());
    let asked = Ipv4Addr::new(192, 0, 2, 2);
    let mut arp = vec![0u8; 14 + wire::arp::PACKET_LEN];
    wire::ethernet::emit_header(&mut arp, wire::EthernetAddress::BROADCAST, MAC, wire::EtherType::ARP);
    wire::arp::emit(
        &mut arp[14..],
        wire::arp::ArpOperation::Request,
        MAC,
        ME,
        wire::EthernetAddress([0; 6]),
        asked,
    );
    let asked6: Ipv6Addr = "2001:db8::2".parse().unwrap();
    let ns = crate::pipeline::ndp::tests::ns(me6(), asked6, asked6, 255, &[1, 1, 2, 0, 0, 0, 0, 1]);
    let other = udp4(4000, 8, 0);
    e.io_mut().kernel = vec![(1, [HeapBuf::new(&arp), ns.clone(), HeapBuf::new(&other)].into())];
    e.io_mut().now = T0;
    let k = e.tables().kernel.clone().unwrap();
    assert!(!k.solicited(0, IpAddr::V4(asked), T0));
    let got = e.poll(T0);
    assert_eq!(
        got,
        Polled {
            taken: 0,
            from_kernel: 3
        },
        "not what a stop waits for"
    );
    let out = sent(&mut e, 0);
    assert_eq!(out.len(), 3, "out of the mirrored port");
    assert_eq!(out[0].data(), &arp[..]);
    assert!(k.solicited(0, IpAddr::V4(asked), T0), "the ARP request");
    assert!(k.solicited(0, IpAddr::V6(asked6), T0), "the neighbour solicitation");
    assert!(!k.solicited(0, IpAddr::V4(THEM), T0));
    assert_eq!(kernel_counters(&e).from_kernel.get(), 3);
    assert_eq!(processed(&e), [0; 7], "no socket's");
}

// ---------------------------------------------------------------------------------------------
// generations

#[test]
fn a_socket_a_reload_removes_is_drained_then_released() {
    let mut e = engine(tables(Action::Sink));
    let old = e.tables().sockets[0].clone();
    deliver(&mut e, 0, &[udp4(4000, 4, 0)]);
    e.adopt(tables_with(Action::Sink, 1, 0, false).with_generation(2));
    assert_eq!(e.generation(), 2);
    assert_eq!(e.stats().generation(), 2);
    assert_eq!(e.sockets(), 2, "the old socket is kept until drained");
    e.forget_retired(|_| false);
    assert_eq!(e.sockets(), 2, "an RX lcore may still enqueue to it");
    e.poll(T0);
    assert_eq!(old.counters.workers[0].sunk.get(), 1);
    e.forget_retired(|g| g >= 2);
    assert_eq!((e.sockets(), e.io().released), (1, 1));
    e.stop();
    assert_eq!(e.io().released, 2);
}

#[test]
fn a_reload_keeps_the_workers_ip_identification() {
    let mut e = engine(tables(Action::Sink));
    let _ = e.out.idents.atomic();
    let mut twin = e.out.idents.clone();
    e.adopt(tables_with(Action::Sink, 1, 0, false).with_generation(2));
    let after: Vec<u16> = (0..8).map(|_| e.out.idents.atomic()).collect();
    let expected: Vec<u16> = (0..8).map(|_| twin.atomic()).collect();
    assert_eq!(after, expected, "neither redrawn nor restarted");
}

trait WithGeneration {
    fn with_generation(self, g: u64) -> Arc<Tables>;
}

impl WithGeneration for Arc<Tables> {
    fn with_generation(self, g: u64) -> Arc<Tables> {
        let mut t = (*self).clone();
        t.generation = g;
        Arc::new(t)
    }
}

mod conntrack;
