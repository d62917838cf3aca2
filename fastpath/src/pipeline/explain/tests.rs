//! [`explain`] against the pipeline itself: for flows to open, closed and kernel ports, over
//! IPv4 and IPv6, the socket it names is the one `Pipeline::process` delivers to, and its
//! closed-port answer is the pipeline's outcome.

use super::*;
use crate::buf::HeapBuf;
use crate::outcome::Outcome;
use crate::pipeline::fanout::{FanoutMode, Group};
use crate::pipeline::kernel::{KernelPath, PuntRules};
use crate::pipeline::maglev::Backend;
use crate::pipeline::parse::tests::{tcp_bytes, udp_bytes, v4_frame, v6_frame};
use crate::pipeline::service::{Backends, Service, ServiceTable};
use crate::pipeline::tests::{port, with_udp_checksum};
use crate::pipeline::{Instant, Parsed, Pipeline, Verdict};
use crate::socket::{SimQueue, Socket, SocketCounters};
use crate::wire::toeplitz::RssKey;
use crate::wire::Toeplitz;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

const ME: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

fn me6() -> Ipv6Addr {
    "2001:db8::1".parse().unwrap()
}

fn service(name: &str, protocol: IpProtocol, sockets: Vec<usize>, mode: FanoutMode, action: Action) -> Service {
    Service {
        name: name.into(),
        protocol,
        addresses: vec![],
        group: Group {
            sockets,
            mode,
            rollover: true,
            huge_flows: true,
            flow_limit: true,
        },
        action,
        cost_ns: 0,
        echo_allow_low_ports: false,
    }
}

/// UDP 53: four sockets by hash; TCP 80: three by hash; UDP 123: round robin over two; UDP
/// 4789: a tunnel service over three backends (one sequence-free set, weights 1, 2, 1); the
/// internal `kernel` service; port 0 with a kernel interface when `kernel`, `[kernel] punt =
/// ["udp:5000"]`; a key of its own, so the default key cannot pass by luck.
fn tables(kernel: bool, resets: bool) -> Tables {
    let sockets: Vec<Arc<Socket>> = (0..12)
        .map(|i| {
            Arc::new(Socket::new(
                "s",
                i,
                SimQueue::new(64),
                0,
                Arc::new(SocketCounters::new(1, 1)),
            ))
        })
        .collect();
    let backends: Vec<Backend> = [("a", 1), ("b", 2), ("c", 1)]
        .iter()
        .map(|&(n, w)| Backend {
            name: n.into(),
            weight: w,
            drain: false,
            up: true,
        })
        .collect();
    let services = ServiceTable::new(vec![
        (
            service("dns", IpProtocol::UDP, vec![0, 1, 2, 3], FanoutMode::Hash, Action::Sink),
            vec![53],
        ),
        (
            service("web", IpProtocol::TCP, vec![4, 5, 6], FanoutMode::Hash, Action::Sink),
            vec![80],
        ),
        (
            service("ntp", IpProtocol::UDP, vec![7, 8], FanoutMode::RoundRobin, Action::Sink),
            vec![123],
        ),
        (
            service(
                "lb",
                IpProtocol::UDP,
                vec![9, 10],
                FanoutMode::Hash,
                Action::Tunnel(Backends::new(vec![0, 1, 2], &backends)),
            ),
            vec![4789],
        ),
        (
            service("kernel", IpProtocol::UDP, vec![11], FanoutMode::Hash, Action::Kernel),
            vec![],
        ),
    ]);
    let mut local = port();
    local.kernel = kernel;
    let key: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
    Tables {
        generation: 1,
        ports: vec![local],
        hasher: Toeplitz::new(RssKey::new(&key).unwrap().hash_key(), false),
        services,
        sockets,
        tcp_reset: crate::pipeline::tcp_reset::TcpResetConfig {
            enabled: resets,
            ..Default::default()
        },
        kernel: Some(KernelPath {
            rules: PuntRules::new(false, &[(IpProtocol::UDP, 5000)]),
            service: 4,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn sources(n: u16) -> impl Iterator<Item = (Ipv4Addr, u16)> {
    (0..n).map(|i| {
        (
            Ipv4Addr::new(198, 51, 100 + (i % 3) as u8, 1 + (i * 7) as u8),
            1024 + i * 131,
        )
    })
}

/// What the pipeline does with `frame` on port 0: its verdict and, for a delivery, the socket.
fn run(t: &Arc<Tables>, frame: Vec<u8>) -> (Verdict, usize) {
    let mut p = Pipeline::new(t.clone(), 0);
    let mut b = HeapBuf::new(&frame);
    let v = p.process(0, &mut b, Instant(1_000_000_000));
    (v, p.delivered_to())
}

#[test]
fn the_socket_named_is_the_one_the_pipeline_delivers_to() {
    let t = Arc::new(tables(false, true));
    let mut spread = std::collections::BTreeSet::new();
    for (src, sport) in sources(64) {
        for (proto, dport) in [(IpProtocol::UDP, 53), (IpProtocol::TCP, 80), (IpProtocol::UDP, 4789)] {
            let q = FlowQuery {
                protocol: proto,
                src: (src.into(), sport),
                dst: (ME.into(), dport),
            };
            let e = explain(&t, &q);
            let l4 = match proto {
                IpProtocol::UDP => udp_bytes(sport, dport, b"x"),
                _ => tcp_bytes(sport, dport, TcpFlags::SYN),
            };
            let frame = v4_frame(src, ME, proto, &[], 0, &l4);
            assert_eq!(e.hash, Parsed::parse(&frame, &t.hasher, None).unwrap().hash, "{q:?}");
            let (v, to) = run(&t, frame.clone());
            assert_eq!(v, Verdict::Deliver, "{q:?}");
            let FlowVerdict::Service {
                socket: SocketPick::Socket(s),
                backend,
                ..
            } = e.verdict
            else {
                panic!("{q:?}: {:?}", e.verdict)
            };
            assert_eq!(s, to, "{q:?}");
            spread.insert(s);
            // The worker's backend: Maglev over the hash it parses from the packet.
            if dport == 4789 {
                let Action::Tunnel(set) = &t.services.services()[3].action else {
                    unreachable!()
                };
                let worker = set.pick(Parsed::parse(&frame, &t.hasher, None).unwrap().hash);
                assert_eq!(backend, Some(worker), "{q:?}");
                assert!(worker.is_some());
            } else {
                assert_eq!(backend, None);
            }
        }
    }
    assert!(spread.len() >= 8, "flows spread over the sockets: {spread:?}");
    // IPv6 alike.
    for i in 0..32u16 {
        let src: Ipv6Addr = format!("2001:db8:1::{:x}", i + 1).parse().unwrap();
        let q = FlowQuery {
            protocol: IpProtocol::UDP,
            src: (src.into(), 5000 + i),
            dst: (me6().into(), 53),
        };
        let e = explain(&t, &q);
        let frame = with_udp_checksum(v6_frame(
            src,
            me6(),
            IpProtocol::UDP,
            &[],
            64,
            &udp_bytes(5000 + i, 53, b"x"),
        ));
        let (v, to) = run(&t, frame);
        assert_eq!(v, Verdict::Deliver);
        assert_eq!(
            e.verdict,
            FlowVerdict::Service {
                service: 0,
                socket: SocketPick::Socket(to),
                backend: None
            }
        );
    }
}

#[test]
fn round_robin_is_named_not_decided_and_closed_ports_get_the_pipelines_answer() {
    let t = Arc::new(tables(false, true));
    let q = |proto, src: IpAddr, dst: IpAddr, dport| FlowQuery {
        protocol: proto,
        src: (src, 40000),
        dst: (dst, dport),
    };
    let them: IpAddr = Ipv4Addr::new(198, 51, 100, 7).into();
    let e = explain(&t, &q(IpProtocol::UDP, them, ME.into(), 123));
    assert!(
        matches!(
            e.verdict,
            FlowVerdict::Service {
                socket: SocketPick::RoundRobin,
                ..
            }
        ),
        "{e:?}"
    );
    // A closed UDP port: a Port Unreachable, rate limited, which the pipeline sends.
    let e = explain(&t, &q(IpProtocol::UDP, them, ME.into(), 9));
    assert_eq!(
        e.verdict,
        FlowVerdict::PortUnreachable {
            limited: true,
            exempt: false
        }
    );
    let frame = v4_frame(
        Ipv4Addr::new(198, 51, 100, 7),
        ME,
        IpProtocol::UDP,
        &[],
        0,
        &udp_bytes(40000, 9, b"x"),
    );
    assert_eq!(run(&t, frame).0.outcome(), Outcome::IcmpError);
    // A closed TCP port: a reset; with resets off, nothing.
    assert_eq!(
        explain(&t, &q(IpProtocol::TCP, them, ME.into(), 22)).verdict,
        FlowVerdict::TcpReset
    );
    let off = tables(false, false);
    assert_eq!(
        explain(&off, &q(IpProtocol::TCP, them, ME.into(), 22)).verdict,
        FlowVerdict::NoService
    );
    // Not ours; from a martian source (loopback, ourselves).
    let other: IpAddr = Ipv4Addr::new(192, 0, 2, 200).into();
    let e = explain(&t, &q(IpProtocol::UDP, them, other, 53));
    assert_eq!((e.port, e.verdict), (None, FlowVerdict::NotLocal));
    for src in [Ipv4Addr::LOCALHOST, ME] {
        assert_eq!(
            explain(&t, &q(IpProtocol::UDP, src.into(), ME.into(), 53)).verdict,
            FlowVerdict::Martian
        );
        let frame = v4_frame(src, ME, IpProtocol::UDP, &[], 0, &udp_bytes(40000, 53, b"x"));
        assert_eq!(run(&t, frame).0.outcome(), Outcome::Martian);
    }
}

#[test]
fn a_port_with_a_kernel_interface_punts_what_the_rules_take() {
    let t = Arc::new(tables(true, true));
    let them = Ipv4Addr::new(198, 51, 100, 7);
    let q = FlowQuery {
        protocol: IpProtocol::UDP,
        src: (them.into(), 40000),
        dst: (ME.into(), 5000),
    };
    assert_eq!(
        explain(&t, &q).verdict,
        FlowVerdict::Kernel {
            service: 4,
            socket: SocketPick::Socket(11)
        }
    );
    let (v, to) = run(
        &t,
        v4_frame(them, ME, IpProtocol::UDP, &[], 0, &udp_bytes(40000, 5000, b"x")),
    );
    assert_eq!((v, to), (Verdict::Deliver, 11));
    // Not listed: the closed-port answer as without a kernel interface.
    let q = FlowQuery {
        dst: (ME.into(), 5001),
        ..q
    };
    assert!(matches!(explain(&t, &q).verdict, FlowVerdict::PortUnreachable { .. }));
    // A SYN under `unhandled` goes to the kernel only where it listens.
    let mut k = tables(true, true);
    k.kernel.as_mut().unwrap().rules = PuntRules::new(true, &[]);
    let syn = |dport| FlowQuery {
        protocol: IpProtocol::TCP,
        src: (them.into(), 40000),
        dst: (ME.into(), dport),
    };
    assert_eq!(explain(&k, &syn(22)).verdict, FlowVerdict::TcpReset);
    k.kernel.as_ref().unwrap().listeners.set([22]);
    assert!(matches!(explain(&k, &syn(22)).verdict, FlowVerdict::Kernel { .. }));
}

#[test]
fn an_exempt_source_skips_the_limits() {
    use crate::pipeline::icmp_error::{ExemptSet, Prefix};
    let mut t = tables(false, true);
    t.icmp.exempt = ExemptSet::new(vec![Prefix::new(Ipv4Addr::new(198, 51, 100, 0).into(), 24).unwrap()]).unwrap();
    let q = FlowQuery {
        protocol: IpProtocol::UDP,
        src: (Ipv4Addr::new(198, 51, 100, 7).into(), 40000),
        dst: (ME.into(), 9),
    };
    assert_eq!(
        explain(&t, &q).verdict,
        FlowVerdict::PortUnreachable {
            limited: false,
            exempt: true
        }
    );
}
