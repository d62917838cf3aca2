//! ICMP errors about a `tunnel` service's flow (RFC 1191, RFC 8201, RFC 4443 §3.2): delivered to
//! the socket the flow's own packets reach, so the worker holding the flow's table entry sends
//! them to its backend; anything else keeps its old handling (`unhandled`).

use super::*;
use crate::pipeline::maglev::Backend;
use crate::pipeline::Backends;
use std::net::Ipv6Addr;

const CLIENT: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 9);
const ROUTER: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 254);

fn me6() -> Ipv6Addr {
    "2001:db8::1".parse().unwrap()
}
fn client6() -> Ipv6Addr {
    "2001:db8:99::9".parse().unwrap()
}

/// A `tunnel` service on TCP port 80 over 4 sockets (hash fanout) and an echo service on UDP
/// port 7; ICMP forwarding at `per_sec` (burst a tenth, as the control side sets it).
fn lb_tables(per_sec: u32) -> Arc<Tables> {
    let socks: Vec<_> = (0..5)
        .map(|i| {
            Arc::new(Socket::new(
                "s",
                i,
                SimQueue::new(256),
                0,
                Arc::new(SocketCounters::new(1, 1)),
            ))
        })
        .collect();
    let group = |sockets: Vec<usize>| Group {
        sockets,
        mode: FanoutMode::Hash,
        rollover: false,
        huge_flows: false,
        flow_limit: true,
    };
    let backends = [Backend {
        name: "t".into(),
        weight: 1,
        drain: false,
        up: true,
    }];
    let lb = Service {
        name: "lb".into(),
        protocol: IpProtocol::TCP,
        addresses: vec![],
        group: group(vec![0, 1, 2, 3]),
        action: Action::Tunnel(Backends::new(vec![0], &backends)),
        cost_ns: 0,
        echo_allow_low_ports: false,
    };
    let echo = Service {
        name: "echo".into(),
        protocol: IpProtocol::UDP,
        addresses: vec![],
        group: group(vec![4]),
        action: Action::Echo,
        cost_ns: 0,
        echo_allow_low_ports: false,
    };
    let mut t = Tables {
        generation: 1,
        ports: vec![port()],
        hasher: Toeplitz::default(),
        services: ServiceTable::new(vec![(lb, vec![80]), (echo, vec![7])]),
        sockets: socks,
        icmp_counters: Arc::new(crate::pipeline::icmp_error::IcmpCounters::new(1)),
        ..Default::default()
    };
    t.conntrack.icmp_per_sec = per_sec;
    t.icmp_to_backend = crate::pipeline::kernel::PuntBudget::per_lcore(per_sec, per_sec / 10, 1);
    Arc::new(t)
}

/// ICMP type 3 `code` from a router, quoting `quoted` (a frame: its IP header and `keep` bytes
/// after it).
fn unreachable(code: u8, quoted: &[u8], keep: usize) -> Vec<u8> {
    let mut icmp = vec![3, code, 0, 0, 0, 0, 0x05, 0x78];
    icmp.extend_from_slice(&quoted[14..14 + 20 + keep]);
    let c = checksum::checksum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    v4_frame(ROUTER, ME, IpProtocol::ICMP, &[], 0, &icmp)
}

/// The backend's answer to the client (service → client), as a router quotes it.
fn answer(sport: u16, cport: u16, proto: IpProtocol) -> Vec<u8> {
    let l4 = if proto == IpProtocol::TCP {
        tcp_bytes(sport, cport, TcpFlags::ACK)
    } else {
        udp_bytes(sport, cport, b"")
    };
    v4_frame(ME, CLIENT, proto, &[], 0x4000, &l4)
}

fn delivered_socket(e: &mut Engine, frame: Vec<u8>) -> Option<usize> {
    e.io_mut().delivered.clear();
    run_burst(e, &[frame], T0);
    e.io_mut().delivered.pop().map(|(s, _)| s)
}

#[test]
fn frag_needed_for_a_served_flow_reaches_the_flows_own_socket() {
    let mut e = engine_with(lb_tables(1_000_000), Collect::new(0));
    let mut sockets = std::collections::HashSet::new();
    for cport in 40_000..40_064u16 {
        let own = v4_frame(
            CLIENT,
            ME,
            IpProtocol::TCP,
            &[],
            0,
            &tcp_bytes(cport, 80, TcpFlags::ACK),
        );
        let s = delivered_socket(&mut e, own).expect("the flow's packet is delivered");
        let icmp = unreachable(4, &answer(80, cport, IpProtocol::TCP), 8);
        assert_eq!(
            delivered_socket(&mut e, icmp),
            Some(s),
            "port {cport}: the flow's socket"
        );
        sockets.insert(s);
    }
    assert!(
        sockets.len() > 1,
        "the flows spread over the sockets, and their errors with them"
    );
    assert_eq!(count(&e, Outcome::Delivered), 128);
    assert_eq!(e.pipeline().tables().icmp_counters.rx[0].to_backend[0].get(), 64);
    assert_eq!(total(&e), 128);
}

#[test]
fn errors_about_flows_we_do_not_serve_keep_their_old_handling() {
    let mut e = engine_with(lb_tables(1_000_000), Collect::new(0));
    let other_src = {
        let mut f = answer(80, 40_000, IpProtocol::TCP);
        f[14 + 12..14 + 16].copy_from_slice(&[192, 0, 2, 99]);
        f
    };
    let cases = [
        (
            "a port no service has",
            unreachable(4, &answer(81, 40_000, IpProtocol::TCP), 8),
        ),
        (
            "an echo service's",
            unreachable(4, &answer(7, 40_000, IpProtocol::UDP), 8),
        ),
        (
            "UDP to the TCP service's port",
            unreachable(4, &answer(80, 40_000, IpProtocol::UDP), 8),
        ),
        ("quoting another source", unreachable(4, &other_src, 8)),
        (
            "fewer than 8 bytes after the header",
            unreachable(4, &answer(80, 40_000, IpProtocol::TCP), 4),
        ),
        ("not Destination Unreachable", {
            let mut f = unreachable(4, &answer(80, 40_000, IpProtocol::TCP), 8);
            f[34] = 11;
            f
        }),
    ];
    for (what, frame) in cases {
        let before = count(&e, Outcome::Unhandled);
        assert_eq!(delivered_socket(&mut e, frame), None, "{what}");
        assert_eq!(count(&e, Outcome::Unhandled), before + 1, "{what}");
    }
    assert_eq!(e.pipeline().tables().icmp_counters.rx[0].to_backend[0].get(), 0);
}

#[test]
fn packet_too_big_for_a_served_ipv6_flow_reaches_the_flows_own_socket() {
    let mut e = engine_with(lb_tables(1_000_000), Collect::new(0));
    for cport in 40_000..40_032u16 {
        let own = v6_frame(
            client6(),
            me6(),
            IpProtocol::TCP,
            &[],
            64,
            &tcp_bytes(cport, 80, TcpFlags::ACK),
        );
        let s = delivered_socket(&mut e, own).unwrap();
        let quoted = v6_frame(
            me6(),
            client6(),
            IpProtocol::TCP,
            &[],
            64,
            &tcp_bytes(80, cport, TcpFlags::ACK),
        );
        let mut icmp = vec![2, 0, 0, 0, 0, 0, 0x05, 0x00];
        icmp.extend_from_slice(&quoted[14..14 + 48]);
        let router: Ipv6Addr = "2001:db8:99::fe".parse().unwrap();
        let mut frame = v6_frame(router, me6(), IpProtocol::ICMPV6, &[], 64, &icmp);
        let sum = checksum::finish(checksum::sum(
            checksum::pseudo_v6(&router, &me6(), 58, 56),
            &frame[54..],
        ));
        frame[56..58].copy_from_slice(&sum.to_be_bytes());
        assert_eq!(delivered_socket(&mut e, frame), Some(s));
    }
    assert_eq!(e.pipeline().tables().icmp_counters.rx[0].to_backend[0].get(), 32);
}

#[test]
fn forwarding_is_rate_limited_and_what_is_over_is_unhandled() {
    // 10 a second, a burst of one.
    let mut e = engine_with(lb_tables(10), Collect::new(0));
    let frames: Vec<_> = (0..20u16)
        .map(|i| unreachable(4, &answer(80, 40_000 + i, IpProtocol::TCP), 8))
        .collect();
    run_burst(&mut e, &frames, T0);
    let c = &e.pipeline().tables().icmp_counters.rx[0];
    let (fwd, limited) = (c.to_backend[0].get(), c.to_backend[1].get());
    assert!((1..=2).contains(&fwd), "{fwd} forwarded at once");
    assert_eq!(fwd + limited, 20);
    assert_eq!(count(&e, Outcome::Delivered), fwd);
    assert_eq!(count(&e, Outcome::Unhandled), limited);
    // A second later, about ten more.
    run_burst(&mut e, &frames, Instant(T0.0 + 1_000_000_000));
    let more = e.pipeline().tables().icmp_counters.rx[0].to_backend[0].get() - fwd;
    assert!((1..=11).contains(&more), "{more} a second later");
    // Off: nothing is forwarded.
    let mut off = engine_with(lb_tables(0), Collect::new(0));
    run_burst(&mut off, &frames, T0);
    assert_eq!(count(&off, Outcome::Unhandled), 20);
}
