//! The IPv4/UDP fast path ([`Pipeline::udp4`]) against the general path
//! ([`Pipeline::process_general`]): frames drawn around its shape (and just outside it, one field
//! at a time), through tables with open, closed, bound and multi-socket ports, in bursts with
//! ring backlogs that make the fanout decide. Both must give the same verdict, leave the packet
//! the same (an ICMP error built in place, padding trimmed) and the fanout in the same state.

use super::*;
use crate::buf::HeapBuf;
use crate::pipeline::fanout::{FanoutMode, Group};
use crate::pipeline::parse::tests::{udp_bytes, v4_frame};
use crate::pipeline::service::{Action, Service, ServiceTable};
use crate::pipeline::tests::{MAC, PEER};
use crate::socket::{SimQueue, Socket, SocketCounters};
use crate::wire::IpProtocol;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use std::net::{IpAddr, Ipv4Addr};

const ME: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const ME2: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 3);
const CAPACITY: usize = 16;

/// One frame: a valid IPv4/UDP frame, then the mutations drawn.
#[derive(Clone, Debug)]
struct Draw {
    dst_mac: usize,
    src_mac: usize,
    ethertype: usize,
    version_ihl: usize,
    flags_frag: usize,
    protocol: usize,
    total_len: usize,
    udp_len: usize,
    corrupt_checksum: bool,
    nic_checksum: usize,
    rss: Option<u32>,
    src: u8,
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
        (often(5), often(4), often(4), often(4), often(5), often(5)),
        (
            often(6),
            often(5),
            proptest::bool::weighted(0.1),
            0..3usize,
            proptest::option::of(any::<u32>()),
        ),
        (
            prop_oneof![3 => 0..4u8, 1 => 4..8u8],
            often(4),
            any::<u16>(),
            0..6usize,
            0..20usize,
            often(4),
        ),
        proptest::option::weighted(0.05, 0..80usize),
    )
        .prop_map(
            |(
                (dst_mac, src_mac, ethertype, version_ihl, flags_frag, protocol),
                (total_len, udp_len, corrupt_checksum, nic_checksum, rss),
                (src, dst, sport, dport, payload, padding),
                truncate,
            )| Draw {
                dst_mac,
                src_mac,
                ethertype,
                version_ihl,
                flags_frag,
                protocol,
                total_len,
                udp_len,
                corrupt_checksum,
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

fn frame(d: &Draw) -> HeapBuf {
    let dst = [ME, ME2, Ipv4Addr::new(198, 51, 100, 1), Ipv4Addr::BROADCAST][d.dst];
    // Four hosts, then sources no error may answer (RFC 1122 §3.2.2): this network, loopback,
    // multicast, class E.
    let src = match d.src {
        0..4 => Ipv4Addr::new(203, 0, 113, d.src),
        s => [[0, 0, 0, 7], [127, 0, 0, 1], [224, 0, 0, 9], [240, 0, 0, 1]][s as usize - 4].into(),
    };
    let dport = [7, 9, 53, 67, 68, 7][d.dport];
    let flags = [0, 0x4000, 0x8000, 0x2000, 0x0001][d.flags_frag];
    let payload = vec![0x5a; d.payload];
    let mut v = v4_frame(
        src,
        dst,
        IpProtocol::UDP,
        &[],
        flags,
        &udp_bytes(d.sport, dport, &payload),
    );
    let ip_len = v.len() - 14;
    v[0..6].copy_from_slice(&[MAC.0, PEER.0, [0xff; 6], [1, 0, 0x5e, 0, 0, 1], [2, 0, 0, 0, 0, 9]][d.dst_mac]);
    v[6..12].copy_from_slice(&[PEER.0, [0xff; 6], [0; 6], [3, 0, 0, 0, 0, 2]][d.src_mac]);
    v[12..14].copy_from_slice(&[0x0800u16, 0x86dd, 0x8100, 0x0806][d.ethertype].to_be_bytes());
    v[14] = [0x45, 0x46, 0x55, 0x44][d.version_ihl];
    v[23] = [17, 6, 1, 47, 99][d.protocol];
    let total = [ip_len, ip_len + 1, ip_len - 1, 27, 19, 0xffff][d.total_len];
    v[16..18].copy_from_slice(&(total as u16).to_be_bytes());
    let udp = [ip_len - 20, 7, 8, ip_len - 19, 0][d.udp_len];
    v[38..40].copy_from_slice(&(udp as u16).to_be_bytes());
    // The header checksum over the mutated header, unless the draw wants it wrong.
    v[24..26].copy_from_slice(&[0, 0]);
    let c = !wire::checksum::fold(wire::checksum::sum(0, &v[14..34]));
    v[24..26].copy_from_slice(&(c ^ d.corrupt_checksum as u16).to_be_bytes());
    v.extend(std::iter::repeat_n(0xee, d.padding));
    if let Some(n) = d.truncate {
        v.truncate(n);
    }
    let mut b = HeapBuf::new(&v);
    b.set_ip_checksum([NicChecksum::Unknown, NicChecksum::Good, NicChecksum::Bad][d.nic_checksum]);
    b.set_rss_hash(d.rss);
    b
}

fn service(name: &str, sockets: Vec<usize>, addresses: Vec<IpAddr>, rollover: bool) -> Service {
    Service {
        name: name.into(),
        protocol: IpProtocol::UDP,
        addresses,
        group: Group {
            sockets,
            mode: FanoutMode::Hash,
            rollover,
            huge_flows: false,
            flow_limit: true,
        },
        action: Action::Sink,
        cost_ns: 0,
        echo_allow_low_ports: false,
    }
}

/// Port 7: one socket; 53: two; 67: one, bound to ME2 only; 9 and 68: closed.
fn tables(two_addresses: bool, rollover: bool, flow_limit: bool) -> Arc<Tables> {
    let sockets: Vec<Arc<Socket>> = (0..4)
        .map(|i| {
            let q = SimQueue::new(CAPACITY);
            Arc::new(Socket::new("svc", i, q, 0, Arc::new(SocketCounters::new(1, 1))))
        })
        .collect();
    let mut local = crate::pipeline::tests::port();
    if two_addresses {
        local.ipv4.push(ME2);
    }
    let services = ServiceTable::new(vec![
        (service("one", vec![0], vec![], rollover), vec![7]),
        (service("two", vec![1, 2], vec![], rollover), vec![53]),
        (service("bound", vec![3], vec![IpAddr::V4(ME2)], rollover), vec![67]),
    ]);
    Arc::new(Tables {
        generation: 1,
        ports: vec![local],
        services,
        sockets,
        flow_limit: flow_limit::FlowLimitConfig {
            enabled: flow_limit,
            ..Default::default()
        },
        icmp: icmp_error::IcmpConfig {
            burst: 4,
            peer_burst: 2,
            ..Default::default()
        },
        ..Default::default()
    })
}

fn pipeline(two_addresses: bool, rollover: bool, flow_limit: bool) -> Pipeline {
    Pipeline::new(tables(two_addresses, rollover, flow_limit), 0)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_udp4_fast_path_decides_as_the_general_path(
        bursts in proptest::collection::vec(
            (proptest::collection::vec(draw(), 1..40), proptest::array::uniform4(0..=CAPACITY)),
            1..4,
        ),
        two_addresses in any::<bool>(),
        rollover in any::<bool>(),
        flow_limit in any::<bool>(),
        step_ns in 0u64..3_000_000,
    ) {
        // The same state for both: the general one is a clone (its random draws included),
        // with tables of its own (sockets keep state: rollover's pressure, the flow history)
        // and a global ICMP budget of its own.
        let mut fast = pipeline(two_addresses, rollover, flow_limit);
        let mut general = fast.clone();
        general.apply(tables(two_addresses, rollover, flow_limit));
        for p in [&mut fast, &mut general] {
            let cfg = p.tables().icmp.clone();
            p.icmp = icmp_error::IcmpLimiter::new(&cfg, cfg.global_bucket(Instant(0)), p.icmp_seed);
        }
        let a = super::fast_harness::run(&mut fast, &bursts, frame, step_ns, true);
        let b = super::fast_harness::run(&mut general, &bursts, frame, step_ns, false);
        for (i, (x, y)) in a.0.iter().zip(&b.0).enumerate() {
            prop_assert_eq!(x, y, "packet {}", i);
        }
        prop_assert_eq!(a.1, b.1);
        prop_assert_eq!(icmp_counts(&fast), icmp_counts(&general), "ICMP errors sent and held back");
    }
}

/// The pipeline's ICMP counters: sent by family and type, then held back by family and limit.
fn icmp_counts(p: &Pipeline) -> Vec<u64> {
    let c = &p.icmp_counters;
    c.sent
        .iter()
        .flatten()
        .chain(c.limited.iter().flatten())
        .map(|x| x.get())
        .collect()
}

/// The draws reach every stage the fast path hands on to, and every way out of its shape, so
/// the property above compares something: a fixed sample's verdicts cover them all.
#[test]
fn the_draws_reach_every_verdict() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let d = proptest::collection::vec(draw(), 4000);
    let draws = d.new_tree(&mut runner).unwrap().current();
    let mut p = pipeline(true, true, true);
    let mut seen = std::collections::BTreeSet::new();
    for (i, chunk) in draws.chunks(32).enumerate() {
        // Backlogs from none to nearly full, so the fanout rolls over and refuses.
        for s in p.tables().sockets.clone().iter() {
            let q = s.queue(0).sim().unwrap();
            q.set_len(i % (CAPACITY + 1));
        }
        for d in chunk {
            let v = p.process(0, &mut frame(d), Instant(i as u64 * 1_000_000));
            seen.insert(format!("{:?}", v.outcome()));
        }
        p.burst_done();
    }
    for want in [
        "Delivered",
        "SocketFull",
        "IcmpError",
        "IcmpSuppressed",
        "NotLocal",
        "NotForUs",
        "Malformed",
        "Reassembled",
        "TcpBadChecksum",
    ] {
        assert!(seen.contains(want), "{want} never seen: {seen:?}");
    }
}

/// The burst's [`PortView`] digests the port: its one address of a family, or the list's
/// sentinel (none or several: the list decides); a port the tables do not have takes nothing,
/// and the fast path declines every frame on it (as when it looked the port up per packet).
#[test]
fn the_port_view_digests_the_port_and_an_unknown_port_takes_nothing() {
    let one = pipeline(false, false, false);
    let v = one.port_view(0);
    assert!(v.known && !v.kernel);
    assert_eq!(v.v4, u32::from_ne_bytes(ME.octets()) as u64);
    assert_eq!(v.mac_word, one.tables().ports[0].mac_word);
    assert_eq!(pipeline(true, false, false).port_view(0).v4, PortView::LISTED);
    let mut none = crate::pipeline::tests::port();
    none.ipv4.clear();
    assert_eq!(none.view().v4, PortView::LISTED);
    let unknown = one.port_view(1);
    assert_eq!(unknown, PortView::unknown());
    assert_eq!(unknown.mac_word, PortView::NO_MAC);
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let draws = proptest::collection::vec(draw(), 500)
        .new_tree(&mut runner)
        .unwrap()
        .current();
    let mut p = pipeline(false, false, false);
    let mut taken = 0;
    for d in &draws {
        assert_eq!(p.process_udp4(1, &mut frame(d), Instant(0)), None, "{d:?}");
        taken += p.process_udp4(0, &mut frame(d), Instant(0)).is_some() as usize;
    }
    assert!(
        taken > 100,
        "the same frames on the known port take the fast path: {taken}"
    );
}
