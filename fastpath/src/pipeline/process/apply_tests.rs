//! [`Pipeline::apply`]: each per-lcore component it carries survives a reload (one test each),
//! and what depends on the size of a table is rebuilt only when that size changes. Carried
//! elsewhere and tested there: the flow-limit table (`fanout.rs`,
//! `reload_keeps_the_table_unless_its_length_changes`), the ICMP limiter's table
//! (`icmp_error/tests.rs`, `apply_keeps_the_table_unless_its_size_interval_or_burst_changes`),
//! the reassembler (`rx/tests.rs`, `a_reload_keeps_the_fragments_held`), the workers'
//! connection tables (`worker/tests/conntrack.rs`).

use super::*;
use crate::pipeline::kernel::PuntBudget;
use crate::pipeline::source_limit::SourceLimitConfig;
use crate::pipeline::tcp_state::TcpStateConfig;
use std::net::IpAddr;

fn reload(p: &mut Pipeline, edit: impl FnOnce(&mut Tables)) {
    let mut t = (**p.tables()).clone();
    t.generation += 1;
    edit(&mut t);
    p.apply(Arc::new(t));
}

fn v4(a: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(192, 0, 2, a))
}

#[test]
fn a_reload_keeps_the_ip_identification() {
    let mut p = Pipeline::new(Arc::new(Tables::default()), 0);
    p.idents().set_now(Instant(7 << 20));
    let first = p.idents().reserve(v4(1), v4(2), 17, 1);
    let _ = p.idents().atomic();
    let mut twin = p.idents().clone();
    reload(&mut p, |_| {});
    // The same keys and the same place in the sequence: neither redrawn nor restarted.
    let after: Vec<u16> = (0..8).map(|_| p.idents().atomic()).collect();
    let expected: Vec<u16> = (0..8).map(|_| twin.atomic()).collect();
    assert_eq!(after, expected);
    // A destination's counter goes on (within one tick, by one), not from a new random start.
    assert_eq!(p.idents().reserve(v4(1), v4(2), 17, 1), first.wrapping_add(1));
}

#[test]
fn a_reload_keeps_the_seeds_and_the_punt_meters() {
    let mut p = Pipeline::new(Arc::new(Tables::default()), 0);
    let budget = PuntBudget {
        cost_ns: 1000,
        limit_ns: 1000,
    };
    assert!(p.punt.admit(budget, Instant(5_000)));
    assert!(p.to_backend.admit(budget, Instant(5_000)));
    let before = (
        p.rng,
        p.icmp_seed,
        p.fanout.random_state(),
        format!("{:?} {:?}", p.punt, p.to_backend),
    );
    reload(&mut p, |t| t.generation += 1);
    let after = (
        p.rng,
        p.icmp_seed,
        p.fanout.random_state(),
        format!("{:?} {:?}", p.punt, p.to_backend),
    );
    assert_eq!(before, after);
    // The meter's credit is still spent: no second packet at the same moment.
    assert!(!p.punt.admit(budget, Instant(5_000)));
}

#[test]
fn a_reload_keeps_the_gre_receive_sequences_by_tunnel_name() {
    let mut p = Pipeline::new(Arc::new(Tables::default()), 0);
    let mut t = (**p.tables()).clone();
    use crate::pipeline::tunnel::tests::{port, tunnel as gre};
    let tunnel = |name: &str| gre(name, None, true, false, port());
    t.tunnels = vec![tunnel("a"), tunnel("b")];
    p.apply(Arc::new(t));
    p.gre_seq = vec![Some(10), Some(20)];
    // "a" removed, "c" added before "b": "b" keeps its state at its new index.
    reload(&mut p, |t| t.tunnels = vec![tunnel("c"), tunnel("b")]);
    assert_eq!(p.gre_seq, vec![None, Some(20)]);
}

fn source_limit(entries: usize) -> SourceLimitConfig {
    SourceLimitConfig {
        enabled: true,
        entries,
        ..Default::default()
    }
}

#[test]
fn a_reload_keeps_the_source_budgets_while_their_size_does() {
    let t = Tables {
        source_limit: source_limit(64),
        ..Default::default()
    };
    let mut p = Pipeline::new(Arc::new(t), 0);
    let cfg = p.tables().source_limit.clone();
    let table = p.sources.as_mut().unwrap();
    for a in 1..4 {
        let _ = table.admit(&cfg, v4(a), Instant(1));
    }
    let used = table.used();
    assert!(used > 0, "no source entered");
    reload(&mut p, |t| t.source_limit.idle_ns = 5);
    assert_eq!(p.sources.as_ref().unwrap().used(), used, "kept");
    reload(&mut p, |t| t.source_limit = source_limit(128));
    assert_eq!(p.sources.as_ref().unwrap().used(), 0, "a new size: a new table");
    // Turned off, a table of the same size stays (nothing asks it while off) and goes on when
    // turned on again; a new size while off: none.
    reload(&mut p, |t| t.source_limit.enabled = false);
    assert!(p.sources.is_some());
    reload(&mut p, |t| {
        t.source_limit.enabled = false;
        t.source_limit.entries = 256;
    });
    assert!(p.sources.is_none());
}

#[test]
fn a_reload_keeps_the_tcp_state_table_while_its_size_does() {
    let cfg = |entries, established_timeout_s| TcpStateConfig {
        entries,
        established_timeout_s,
        ..Default::default()
    };
    let t = Tables {
        tcp_state: cfg(1024, 60),
        ..Default::default()
    };
    let mut p = Pipeline::new(Arc::new(t), 0);
    let storage = p.tcp_state.as_ref().unwrap().storage();
    reload(&mut p, |t| t.tcp_state = cfg(1024, 30));
    assert_eq!(p.tcp_state.as_ref().unwrap().storage(), storage, "kept");
    reload(&mut p, |t| t.tcp_state = cfg(4096, 30));
    assert_ne!(
        p.tcp_state.as_ref().unwrap().storage(),
        storage,
        "a new size: a new table"
    );
    reload(&mut p, |t| t.tcp_state = cfg(0, 30));
    assert!(p.tcp_state.is_none());
}

#[test]
fn a_reload_keeps_the_reset_limiters_memory_of_each_destination() {
    use crate::pipeline::tcp_reset::ResetDecision;
    use crate::wire::TcpFlags;
    let mut p = Pipeline::new(Arc::new(Tables::default()), 0);
    let (now, them) = (Instant(1_000_000), v4(9));
    let decide = |p: &mut Pipeline| p.tcp_reset.decide(now, &them, TcpFlags::SYN, || 1);
    assert!(
        (0..1000).any(|_| decide(&mut p) == ResetDecision::Suppressed(icmp_error::Limit::Peer)),
        "the per-destination limit never held one back"
    );
    // A new global rate keeps the per-destination table: that destination is still held back.
    reload(&mut p, |t| t.tcp_reset.msgs_per_sec += 1);
    assert_eq!(decide(&mut p), ResetDecision::Suppressed(icmp_error::Limit::Peer));
    // A new table size forgets it.
    reload(&mut p, |t| t.tcp_reset.peer_table_size *= 2);
    assert_eq!(decide(&mut p), ResetDecision::Send);
}
