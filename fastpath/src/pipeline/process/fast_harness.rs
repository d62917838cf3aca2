//! What the equivalence tests of the IPv6/UDP and TCP fast paths (`udp6_tests.rs`,
//! `tcp_tests.rs`) share: tables with UDP and TCP services (open, bound to one address,
//! several sockets) and, drawn, a kernel path taking some ports; a runner that puts the same
//! bursts through [`Pipeline::process`] and [`Pipeline::process_general`]; and the counters to
//! compare.

use super::*;
use crate::buf::HeapBuf;
use crate::pipeline::fanout::{FanoutMode, Group};
use crate::pipeline::kernel::{KernelCounters, KernelListeners, KernelPath, PuntBudget, PuntRules, Solicitations};
use crate::pipeline::service::{Action, Service, ServiceTable};
use crate::socket::{SimQueue, Socket, SocketCounters};
use crate::wire::IpProtocol;
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub(super) const ME: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
pub(super) const ME2: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 3);
pub(super) const ME6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
pub(super) const ME6_2: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 3);
pub(super) const CAPACITY: usize = 16;
/// Sockets: 0 to 4 the services', 5 the kernel path's.
pub(super) const SOCKETS: usize = 6;

/// The tables' shape, drawn per case.
#[derive(Clone, Copy, Debug)]
pub(super) struct Shape {
    pub two_addresses: bool,
    pub rollover: bool,
    pub flow_limit: bool,
    /// With the flow limit on, services `two` and `ssh` are exempt from it (as the kernel path is).
    pub exempt: bool,
    /// The port has a kernel interface, `[kernel] punt = ["udp:68", "tcp:8080"]`.
    pub kernel: bool,
    /// ... and `unhandled` (the kernel listens on TCP 80).
    pub unhandled: bool,
    /// A punt budget of 2 at once, 1000 a second: some punts are `kernel_limited`.
    pub tight_punt: bool,
    /// Prefix filters ([`filters`]).
    pub filtered: bool,
    /// The TCP state table in front of "ssh" and "https" ([`tcp_state`]).
    pub tcp_state: bool,
}

pub(super) fn shape() -> impl Strategy<Value = Shape> {
    (
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        proptest::bool::weighted(0.2),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(two_addresses, rollover, flow_limit, exempt, kernel, unhandled, tight_punt, filtered, tcp_state)| Shape {
                two_addresses,
                rollover,
                flow_limit,
                exempt,
                kernel,
                unhandled,
                tight_punt,
                filtered,
                tcp_state,
            },
        )
}

fn service(
    name: &str,
    protocol: IpProtocol,
    sockets: Vec<usize>,
    addresses: Vec<IpAddr>,
    (rollover, flow_limit): (bool, bool),
) -> Service {
    Service {
        name: name.into(),
        protocol,
        addresses,
        group: Group {
            sockets,
            mode: FanoutMode::Hash,
            rollover,
            huge_flows: false,
            flow_limit,
        },
        action: Action::Sink,
        cost_ns: 0,
        echo_allow_low_ports: false,
    }
}

/// UDP 7: one socket; UDP 53: two; UDP 67: one, bound to ME2 and ME6_2 only; TCP 22: one;
/// TCP 443: one, bound to ME2 and ME6_2 only; UDP 9 and 68, TCP 9 and 8080: closed (68 and
/// 8080 punted when the port has a kernel interface).
pub(super) fn tables(s: Shape) -> Arc<Tables> {
    let sockets: Vec<Arc<Socket>> = (0..SOCKETS)
        .map(|i| {
            let q = SimQueue::new(CAPACITY);
            let mut sock = Socket::new("svc", i, q, 0, Arc::new(SocketCounters::new(1, 1)));
            sock.kernel = i == 5;
            Arc::new(sock)
        })
        .collect();
    let mut local = crate::pipeline::tests::port();
    if s.two_addresses {
        local.ipv4.push(ME2);
        local.ipv6.push(ME6_2);
    }
    local.kernel = s.kernel;
    let bound = vec![IpAddr::V4(ME2), IpAddr::V6(ME6_2)];
    let (udp, tcp) = (IpProtocol::UDP, IpProtocol::TCP);
    let (r, fl) = (s.rollover, !s.exempt);
    let services = ServiceTable::new(vec![
        (service("one", udp, vec![0], vec![], (r, true)), vec![7]),
        (service("two", udp, vec![1, 2], vec![], (r, fl)), vec![53]),
        (service("bound", udp, vec![3], bound.clone(), (r, true)), vec![67]),
        (service("ssh", tcp, vec![4], vec![], (r, fl)), vec![22]),
        (service("https", tcp, vec![3], bound, (r, true)), vec![443]),
        (service("kernel", udp, vec![5], vec![], (false, false)), vec![]),
    ]);
    Arc::new(Tables {
        generation: 1,
        ports: vec![local],
        services,
        sockets,
        flow_limit: flow_limit::FlowLimitConfig {
            enabled: s.flow_limit,
            ..Default::default()
        },
        icmp: icmp_error::IcmpConfig {
            burst: 4,
            peer_burst: 2,
            ..Default::default()
        },
        tcp_reset: tcp_reset::TcpResetConfig {
            burst: 4,
            peer_burst: 2,
            ..Default::default()
        },
        kernel: Some(KernelPath {
            rules: PuntRules::new(s.unhandled, &[(IpProtocol::UDP, 68), (IpProtocol::TCP, 8080)]),
            budget: if s.tight_punt {
                PuntBudget::per_lcore(1000, 2, 1)
            } else {
                PuntBudget::default()
            },
            listeners: {
                let l = KernelListeners::default();
                l.set([80]);
                Arc::new(l)
            },
            service: 5,
            interface_of: vec![s.kernel.then_some(1)],
            port_of: vec![None, s.kernel.then_some(0)],
            index_of: vec![Some(0), Some(0)],
            counters: Arc::new(KernelCounters::new(1, 1)),
            solicited: Arc::new(Solicitations::new(1, 1)),
        }),
        filters: if s.filtered { filters() } else { Default::default() },
        source_limit: if s.filtered {
            crate::pipeline::source_limit::SourceLimitConfig {
                enabled: true,
                per_source: PuntBudget::per_lcore(100, 1, 1),
                newcomers: PuntBudget::per_lcore(1000, 5, 1),
                ipv4_prefix: 32,
                ipv6_prefix: 64,
                entries: 16,
                idle_ns: 1_000_000,
                calm_ns: 1_000_000,
                services: vec![],
            }
        } else {
            Default::default()
        },
        source_limit_counters: Arc::new(crate::pipeline::source_limit::SourceLimitCounters::new(1)),
        tcp_state: if s.tcp_state { tcp_state() } else { Default::default() },
        tcp_state_counters: Arc::new(crate::pipeline::tcp_state::TcpStateCounters::new(1)),
        ..Default::default()
    })
}

/// The TCP state table in front of "ssh" and "https", no learning window, a SYN budget of 2 at
/// once a source (100 a second) and 4 at once for newcomers: every reason is drawn.
fn tcp_state() -> crate::pipeline::tcp_state::TcpStateConfig {
    crate::pipeline::tcp_state::TcpStateConfig {
        entries: 1024,
        handshake_timeout_s: 10,
        established_timeout_s: 100,
        closing_timeout_s: 5,
        learn_ns: 0,
        syn: crate::pipeline::source_limit::SourceLimitConfig {
            enabled: true,
            per_source: PuntBudget::per_lcore(100, 2, 1),
            newcomers: PuntBudget::per_lcore(1000, 4, 1),
            ipv4_prefix: 32,
            ipv6_prefix: 64,
            entries: 16,
            idle_ns: 1_000_000,
            calm_ns: 1_000_000,
            services: vec![],
        },
        services: vec![false, false, false, true, true, false],
        tracked: vec!["https".into(), "ssh".into()],
    }
}

/// With it, `[source_limit]`: one packet at once a source (100 a second), 5 at once for newcomers.
///
/// `[filter] deny` one IPv4 and one IPv6 test source; "two" (UDP 53) and "ssh" (TCP 22) allow
/// only some of the others.
fn filters() -> crate::pipeline::filter::Filters {
    use crate::pipeline::filter::{Filter, FilterCounters, Filters};
    use crate::pipeline::prefix::{Prefix, PrefixSet};
    let set = |l: &[&str]| {
        Some(PrefixSet::new(
            &l.iter().map(|p| Prefix::parse(p).unwrap()).collect::<Vec<_>>(),
        ))
    };
    let f = |deny, allow| {
        Some(Arc::new(Filter {
            name: "f".into(),
            deny,
            allow,
            counters: Arc::new(FilterCounters::new(1)),
        }))
    };
    let allow = || {
        f(
            None,
            set(&["203.0.113.0/31", "198.51.100.0/24", "2001:db8:1::/127", "::ffff:0:0/96"]),
        )
    };
    Filters {
        global: f(set(&["203.0.113.1", "2001:db8:1::2", "198.51.100.9"]), None),
        ports: vec![f(set(&["203.0.113.3", "2001:db8:1::4"]), None)],
        services: vec![None, allow(), None, allow(), None, None],
        any_service: true,
    }
}

/// A fast pipeline and a general one in the same state: the general one a clone (its random
/// draws included) with tables of its own (sockets keep state: rollover's pressure, the flow
/// history) and global ICMP and reset budgets of their own.
pub(super) fn pair(s: Shape) -> (Pipeline, Pipeline) {
    let mut fast = Pipeline::new(tables(s), 0);
    let mut general = fast.clone();
    general.apply(tables(s));
    for p in [&mut fast, &mut general] {
        let cfg = p.tables().icmp.clone();
        p.icmp = icmp_error::IcmpLimiter::new(&cfg, cfg.global_bucket(Instant(0)), p.icmp_seed);
        let cfg = p.tables().tcp_reset.clone();
        p.tcp_reset = tcp_reset::ResetLimiter::new(&cfg, cfg.global_bucket(Instant(0)), p.icmp_seed ^ RESET_SEED);
    }
    (fast, general)
}

/// Per packet its verdict (and socket) and bytes, per burst the sockets staged for.
#[allow(clippy::type_complexity)]
pub(super) type Run = (Vec<(Verdict, Option<usize>, Vec<u8>)>, Vec<Vec<(usize, usize)>>);

/// Runs the bursts of frames `frame` makes through `p` (the ring lengths of its `N` sockets set
/// before each), by the fast paths or not.
pub(super) fn run<D, const N: usize>(
    p: &mut Pipeline,
    bursts: &[(Vec<D>, [usize; N])],
    frame: impl Fn(&D) -> HeapBuf,
    step_ns: u64,
    fast: bool,
) -> Run {
    let (mut pkts, mut staged) = (vec![], vec![]);
    let mut now = 1_000_000_000;
    for (frames, lens) in bursts {
        for (s, &len) in p.tables().sockets.clone().iter().zip(lens) {
            s.queue(0).sim().unwrap().set_len(len);
        }
        for d in frames {
            let mut b = frame(d);
            now += step_ns;
            let v = if fast {
                p.process(0, &mut b, Instant(now))
            } else {
                p.process_general(0, &mut b, Instant(now))
            };
            let to = (v == Verdict::Deliver).then(|| p.delivered_to());
            // A dropped packet's bytes are nobody's: the fast paths leave its padding (the
            // trim is for what is kept).
            let bytes = if matches!(v, Verdict::Drop(_)) {
                vec![]
            } else {
                b.data().to_vec()
            };
            pkts.push((v, to, bytes));
        }
        staged.push(p.staged().collect());
        p.burst_done();
    }
    (pkts, staged)
}

/// The pipeline's ICMP and reset counters: sent, then held back, by family and kind.
pub(super) fn counts(p: &Pipeline) -> Vec<u64> {
    let (c, r) = (&p.icmp_counters, &p.reset_counters);
    c.sent
        .iter()
        .flatten()
        .chain(c.limited.iter().flatten())
        .chain(r.sent.iter())
        .chain(r.limited.iter().flatten())
        .map(|x| x.get())
        .collect()
}

/// Both runs the same, packet by packet, then the fanout's staging and the counters.
pub(super) fn assert_same(a: &Run, b: &Run, fast: &Pipeline, general: &Pipeline) -> Result<(), TestCaseError> {
    for (i, (x, y)) in a.0.iter().zip(&b.0).enumerate() {
        prop_assert_eq!(x, y, "packet {}", i);
    }
    prop_assert_eq!(&a.1, &b.1);
    prop_assert_eq!(
        counts(fast),
        counts(general),
        "ICMP errors and resets sent and held back"
    );
    let reasons = |p: &Pipeline| -> Vec<u64> {
        let c = &p.tables().tcp_state_counters.rx[0];
        c.reasons
            .iter()
            .map(|x| x.get())
            .chain([c.table.entries.get(), c.table.confirmed.get()])
            .collect()
    };
    prop_assert_eq!(reasons(fast), reasons(general), "TCP state reasons and entries");
    Ok(())
}

/// Runs a deterministic sample of `n` draws through a pipeline of every shape the tests draw
/// (bursts with backlogs from none to nearly full, so the fanout rolls over and refuses),
/// returning the outcomes seen: for the tests that the draws reach every verdict.
pub(super) fn outcomes_seen<D: std::fmt::Debug>(
    strategy: impl Strategy<Value = D>,
    frame: impl Fn(&D) -> HeapBuf,
) -> std::collections::BTreeSet<String> {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let draws = proptest::collection::vec(strategy, 4000)
        .new_tree(&mut runner)
        .unwrap()
        .current();
    let mut seen = std::collections::BTreeSet::new();
    for (k, kernel) in [false, true].into_iter().enumerate() {
        let mut p = Pipeline::new(
            tables(Shape {
                two_addresses: true,
                rollover: true,
                flow_limit: true,
                exempt: false,
                kernel,
                unhandled: false,
                tight_punt: false,
                filtered: kernel,
                tcp_state: !kernel,
            }),
            0,
        );
        // Fixed seeds, so that the sample's verdicts are the same on every run.
        p.rng = 0x2545_f491_4f6c_dd1d;
        let cfg = p.tables().icmp.clone();
        p.icmp = icmp_error::IcmpLimiter::new(&cfg, cfg.global_bucket(Instant(0)), 7);
        let cfg = p.tables().tcp_reset.clone();
        p.tcp_reset = tcp_reset::ResetLimiter::new(&cfg, cfg.global_bucket(Instant(0)), 11);
        for (i, chunk) in draws.chunks(32).enumerate() {
            for s in p.tables().sockets.clone().iter() {
                s.queue(0).sim().unwrap().set_len((i + k) % (CAPACITY + 1));
            }
            for d in chunk {
                let v = p.process(0, &mut frame(d), Instant(i as u64 * 1_000_000));
                seen.insert(format!("{:?}", v.outcome()));
            }
            p.burst_done();
        }
    }
    seen
}
