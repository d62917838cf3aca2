//! The trace's records ([`crate::trace`]): for each kind of decision, a packet whose record
//! names the stage, the reason and the outcome, and every record's outcome is the one the
//! engine counted.

use super::*;
use crate::pipeline::maglev::Backend;
use crate::pipeline::Backends;
use crate::trace::{Filter, Note, Record, TraceSession};

/// Arms `e`'s trace for every packet.
fn arm(e: &Engine) -> Arc<TraceSession> {
    let s = Arc::new(TraceSession::new(Filter::default(), u64::MAX, 4096));
    e.stats().trace.arm(s.clone());
    s
}

fn drain(s: &TraceSession) -> Vec<Record> {
    std::iter::from_fn(|| s.ring.pop()).collect()
}

/// `frames` in one burst at `now` through an armed engine: the records, checked against the
/// engine's counts (every record's outcome counted, as many records as packets that ended).
fn traced(e: &mut Engine, s: &TraceSession, frames: &[Vec<u8>], now: Instant) -> Vec<Record> {
    let before: Vec<u64> = Outcome::ALL.iter().map(|o| count(e, *o)).collect();
    run_burst(e, frames, now);
    let recs = drain(s);
    let mut want = std::collections::BTreeMap::new();
    for (i, o) in Outcome::ALL.iter().enumerate() {
        let d = count(e, *o) - before[i];
        if d > 0 {
            want.insert(o.name(), d);
        }
    }
    let mut got = std::collections::BTreeMap::new();
    for r in &recs {
        assert!(!r.notes().is_empty(), "{r:?}");
        *got.entry(r.outcome.name()).or_insert(0u64) += 1;
    }
    assert_eq!(got, want, "records' outcomes against the counters");
    recs
}

fn reasons(e: &Engine, r: &Record) -> Vec<String> {
    let t = e.pipeline().tables();
    r.notes()
        .iter()
        .map(|n| format!("{}: {}", n.stage(), n.reason(Some(t), &r.summary)))
        .collect()
}

fn has(e: &Engine, r: &Record, want: &str) -> bool {
    reasons(e, r).iter().any(|x| x == want)
}

#[test]
fn a_delivered_packet_names_its_service_and_socket() {
    let mut e = engine();
    let s = arm(&e);
    let r = traced(&mut e, &s, &[udp(7, b"x")], T0);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].outcome, Outcome::Delivered);
    let to = e.pipeline().delivered_to();
    assert!(
        has(&e, &r[0], &format!("service: svc socket {to}")),
        "{:?}",
        reasons(&e, &r[0])
    );
    assert!(r[0].has_stage("fanout"), "two sockets: the fanout decided");
    assert_eq!(
        r[0].summary.line(),
        format!("{THEM}:4000 > {ME}:7 udp len {}", udp(7, b"x").len())
    );
}

#[test]
fn rollover_names_the_socket_left_and_why() {
    // The LOW band (the last quarter) is 64 packets: the history's 16 slots are written at
    // random, and 64 writes leave at most 8 of them to the flow with probability ~1e-15.
    let mut t = (*tables(1, 2, 256)).clone();
    let mut svc = t.services.services()[0].clone();
    svc.group.rollover = true;
    svc.group.huge_flows = true;
    t.services = ServiceTable::new(vec![(svc, vec![7])]);
    let mut e = engine_with(Arc::new(t), Collect::new(0));
    let s = arm(&e);
    let flood: Vec<Vec<u8>> = (0..32).map(|_| udp(7, b"one flow")).collect();
    let mut recs = Vec::new();
    for _ in 0..9 {
        recs.extend(traced(&mut e, &s, &flood, T0));
    }
    let rolled: Vec<&Record> = recs.iter().filter(|r| r.has_stage("rollover")).collect();
    assert!(!rolled.is_empty(), "the flow rolled over");
    for r in &rolled {
        assert_eq!(r.outcome, Outcome::Delivered);
        let why = reasons(&e, r);
        assert!(
            why.iter().any(|w| w.starts_with("rollover: socket ")
                && (w.contains("ROOM_LOW and flow huge (") || w.ends_with("ROOM_NONE"))),
            "{why:?}"
        );
        assert!(
            why.iter()
                .any(|w| w.starts_with("fanout: socket ") && w.contains(" → ")),
            "{why:?}"
        );
    }
    let huge = rolled
        .iter()
        .find(|r| r.notes().iter().any(|n| matches!(n, Note::RolloverHuge { .. })))
        .expect("a huge-flow rollover at LOW room");
    assert!(
        huge.notes()
            .iter()
            .any(|n| matches!(n, Note::RolloverHuge { seen, .. } if *seen > 8 && *seen <= 16)),
        "{:?}",
        reasons(&e, huge)
    );
}

#[test]
fn the_flow_limit_names_the_socket_its_flow_dominates() {
    let mut t = (*tables(1, 1, 400)).clone();
    t.flow_limit = crate::pipeline::flow_limit::FlowLimitConfig {
        enabled: true,
        table_len: 4096,
        rx_slots: None,
    };
    // Half full already: the limit looks at every packet from the first.
    assert_eq!(t.sockets[0].queue(0).sim().unwrap().push(200), 200);
    let mut e = engine_with(Arc::new(t), Collect::new(0));
    let s = arm(&e);
    let flood: Vec<Vec<u8>> = (0..32).map(|_| udp(7, b"one flow")).collect();
    let mut recs = Vec::new();
    for _ in 0..6 {
        recs.extend(traced(&mut e, &s, &flood, T0));
    }
    let shed = recs
        .iter()
        .find(|r| r.outcome == Outcome::FlowLimited)
        .expect("the dominant flow was shed");
    assert!(
        has(&e, shed, "flow_limit: flow dominates svc socket 0, at least half full"),
        "{:?}",
        reasons(&e, shed)
    );
}

#[test]
fn icmp_suppression_names_the_global_and_the_per_destination_budget() {
    // Per destination: Linux's defaults, a burst of 6 for one source, then suppressed.
    let mut e = engine();
    let s = arm(&e);
    let closed: Vec<Vec<u8>> = (0..10).map(|_| with_udp_checksum(udp(9, b"closed"))).collect();
    let recs = traced(&mut e, &s, &closed, T0);
    let sent = recs.iter().find(|r| r.outcome == Outcome::IcmpError).expect("sent");
    assert!(has(&e, sent, "icmp: sent port unreachable"), "{:?}", reasons(&e, sent));
    let held = recs
        .iter()
        .find(|r| r.outcome == Outcome::IcmpSuppressed)
        .expect("suppressed");
    assert!(
        has(
            &e,
            held,
            &format!("icmp: suppressed, per-destination budget of {THEM} empty")
        ),
        "{:?}",
        reasons(&e, held)
    );
    // Global: a budget of one, per-destination budgets that never run out.
    let mut t = (*tables(1, 1, 16)).clone();
    t.icmp.burst = 1;
    t.icmp.msgs_per_sec = 1;
    t.icmp.peer_burst = 1000;
    t.icmp.peer_interval_ms = 1;
    t.icmp_global = Some(t.icmp.global_bucket(T0));
    let mut e = engine_with(Arc::new(t), Collect::new(0));
    let s = arm(&e);
    let recs = traced(&mut e, &s, &closed, T0);
    let held = recs
        .iter()
        .find(|r| r.outcome == Outcome::IcmpSuppressed)
        .expect("suppressed");
    assert!(
        has(&e, held, "icmp: suppressed, global budget empty"),
        "{:?}",
        reasons(&e, held)
    );
}

#[test]
fn fragments_are_held_then_their_datagram_goes_on() {
    let mut e = engine();
    let s = arm(&e);
    let frags = fragments(&udp(7, &[7u8; 64]), 42, 24);
    assert_eq!(frags.len(), 3);
    let first = traced(&mut e, &s, &frags[..1], T0);
    assert!(first.is_empty(), "held: no outcome yet");
    let recs = traced(&mut e, &s, &frags[1..], T0);
    assert_eq!(recs.len(), 3, "the held ones finish with the datagram");
    let done = recs
        .iter()
        .find(|r| r.notes().contains(&Note::ReasmCompleted))
        .expect("the completing fragment");
    assert_eq!(done.outcome, Outcome::Delivered);
    assert!(done.has_stage("service"));
    let held: Vec<&Record> = recs.iter().filter(|r| r.outcome == Outcome::Reassembled).collect();
    assert_eq!(held.len(), 2);
    for r in held {
        let why = reasons(&e, r);
        assert!(why.iter().any(|w| w.starts_with("reassembly: held, ")), "{why:?}");
        assert!(
            why.contains(&"reassembly: held, then its datagram completed".to_string()),
            "{why:?}"
        );
    }
    // One that never completes: timed out, its record finished at the expiry.
    let lone = fragments(&udp(7, &[7u8; 64]), 43, 24);
    let _ = traced(&mut e, &s, &lone[1..2], T0);
    let later = Instant(T0.0 + 60_000_000_000);
    e.poll_done(later);
    let recs = drain(&s);
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].outcome, Outcome::ReassemblyTimeout);
    assert!(has(&e, &recs[0], "reassembly: held, then its datagram timed out"));
}

#[test]
fn gre_decapsulation_names_the_tunnel_key_and_depth() {
    let mut e = engine_with(tunnel_tables(), Collect::new(0));
    let s = arm(&e);
    let recs = traced(&mut e, &s, &[from_remote(&udp(7, b"inside"))], T0);
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].outcome, Outcome::Delivered);
    assert!(
        has(&e, &recs[0], "gre: decap tunnel t key 7, depth 1"),
        "{:?}",
        reasons(&e, &recs[0])
    );
}

#[test]
fn a_tunnel_service_names_its_maglev_backend() {
    let mut t = (*tunnel_tables()).clone();
    let mut svc = t.services.services()[0].clone();
    let backends = [Backend {
        name: "t".into(),
        weight: 1,
        drain: false,
        up: true,
    }];
    svc.action = Action::Tunnel(Backends::new(vec![0], &backends));
    t.services = ServiceTable::new(vec![(svc, vec![7])]);
    let mut e = engine_with(Arc::new(t), Collect::new(0));
    let s = arm(&e);
    let recs = traced(&mut e, &s, &[udp(7, b"to the backend")], T0);
    assert!(has(&e, &recs[0], "maglev: backend t"), "{:?}", reasons(&e, &recs[0]));
}

#[test]
fn kernel_punts_name_the_rule_and_the_budget() {
    let t = kernel_tables(true, false, &[(IpProtocol::TCP, 22)], 64);
    let mut e = engine_with(t, Collect::new(0));
    let s = arm(&e);
    let recs = traced(&mut e, &s, &[tcp(22)], T0);
    assert_eq!(recs[0].outcome, Outcome::Kernel);
    assert!(
        has(&e, &recs[0], "kernel: punted by rule tcp:22"),
        "{:?}",
        reasons(&e, &recs[0])
    );
    let budget = crate::pipeline::kernel::PuntBudget::per_lcore(1000, 2, 1);
    let t = kernel_tables_with(true, true, &[], 64, budget, &[]);
    let mut e = engine_with(t, Collect::new(0));
    let s = arm(&e);
    let flood: Vec<Vec<u8>> = (0..4).map(|_| udp(9, b"flood")).collect();
    let recs = traced(&mut e, &s, &flood, T0);
    let limited = recs
        .iter()
        .find(|r| r.outcome == Outcome::KernelLimited)
        .expect("limited");
    assert!(
        has(&e, limited, "kernel: limited by punt budget"),
        "{:?}",
        reasons(&e, limited)
    );
}

#[test]
fn a_closed_port_reset_is_sent_then_suppressed() {
    let mut e = engine();
    let s = arm(&e);
    let syns: Vec<Vec<u8>> = (0..16).map(|_| tcp(23)).collect();
    let recs = traced(&mut e, &s, &syns, T0);
    let sent = recs.iter().find(|r| r.outcome == Outcome::TcpReset).expect("a reset");
    assert!(has(&e, sent, "tcp_reset: sent"), "{:?}", reasons(&e, sent));
    let held = recs
        .iter()
        .find(|r| r.outcome == Outcome::TcpResetSuppressed)
        .expect("suppressed");
    assert!(
        reasons(&e, held)
            .iter()
            .any(|w| w.starts_with("tcp_reset: suppressed (")),
        "{:?}",
        reasons(&e, held)
    );
}

#[test]
fn the_filter_count_and_disarm_hold() {
    let mut e = engine();
    let s = Arc::new(TraceSession::new(Filter::parse("dst port 9").unwrap(), 2, 16));
    e.stats().trace.arm(s.clone());
    let mixed: Vec<Vec<u8>> = (0..6).flat_map(|_| [udp(7, b"a"), udp(9, b"b")]).collect();
    run_burst(&mut e, &mixed, T0);
    let recs = drain(&s);
    assert_eq!(recs.len(), 2, "the count");
    assert!(recs.iter().all(|r| r.summary.ip.unwrap().ports.unwrap().1 == 9));
    assert_eq!(total(&e), 12, "every packet still counted once");
    e.stats().trace.disarm();
    run_burst(&mut e, &mixed, T0);
    assert_eq!(s.ring.pop(), None);
    assert_eq!(Arc::strong_count(&s), 1, "the lcore holds no session");
    // A ring that is not read loses records, not packets.
    let s = Arc::new(TraceSession::new(Filter::default(), u64::MAX, 4));
    e.stats().trace.arm(s.clone());
    run_burst(&mut e, &mixed, T0);
    assert_eq!(drain(&s).len(), 4);
    assert_eq!(s.lost.load(std::sync::atomic::Ordering::Relaxed), 8);
    assert_eq!(total(&e), 36);
}
