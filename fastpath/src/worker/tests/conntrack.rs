//! The `tunnel` action with its connection table: established flows keep their backend across
//! reloads that add, drain, re-weight or reorder tunnels; a removed or down backend's flows move;
//! an ICMP error the RX lcore sent here reaches the backend of the flow it quotes.

use super::*;
use crate::pipeline::parse::tests::tcp_bytes;
use crate::wire::TcpFlags;

const CLIENT: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 9);
const ROUTER: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 254);

fn remote_of(name: &str) -> Ipv4Addr {
    Ipv4Addr::new(198, 51, 100, 10 + name.as_bytes()[0] - b'a')
}

/// Backend tunnel `name` (GRE to 198.51.100.10 + its letter).
fn backend(name: &str) -> Tunnel {
    Tunnel {
        name: name.into(),
        remote: remote_of(name).into(),
        ..gre_tunnel(false)
    }
}

/// A `tunnel` service on TCP port 80 over the tunnels `names` (in this order), with the
/// settings `edit` gives each backend; generation `generation`.
fn lb_tables(names: &[&str], edit: impl Fn(&mut Backend), generation: u64) -> Arc<Tables> {
    let tunnels: Vec<Tunnel> = names.iter().map(|n| backend(n)).collect();
    let backends: Vec<Backend> = names
        .iter()
        .map(|n| {
            let mut b = Backend {
                name: n.to_string(),
                weight: 100,
                drain: false,
                up: true,
            };
            edit(&mut b);
            b
        })
        .collect();
    let sock = Arc::new(Socket::with_queues(
        "lb",
        0,
        vec![SimQueue::new(4096).into()],
        0,
        Arc::new(SocketCounters::new(1, 2)),
    ));
    let svc = Service {
        name: "lb".into(),
        protocol: IpProtocol::TCP,
        addresses: vec![],
        group: Group {
            sockets: vec![0],
            mode: FanoutMode::Hash,
            rollover: false,
            huge_flows: false,
            flow_limit: true,
        },
        action: Action::Tunnel(Backends::new((0..names.len()).collect(), &backends)),
        cost_ns: 0,
        echo_allow_low_ports: false,
    };
    Arc::new(Tables {
        generation,
        ports: vec![port()],
        hasher: Toeplitz::default(),
        services: ServiceTable::new(vec![(svc, vec![80])]),
        sockets: vec![sock],
        tunnels,
        ..Default::default()
    })
}

fn seg(cport: u16, flags: TcpFlags) -> Vec<u8> {
    v4_frame(CLIENT, ME, IpProtocol::TCP, &[], 0, &tcp_bytes(cport, 80, flags))
}

/// Sends `frames` through the worker; the remote each left for, in order.
fn through(e: &mut Engine, frames: &[Vec<u8>], now: Instant) -> Vec<Ipv4Addr> {
    let mut out = Vec::new();
    for chunk in frames.chunks(32) {
        deliver(e, 0, chunk);
        e.poll(now);
        for m in sent(e, 0).drain(..) {
            let f = m.data();
            assert_eq!(f[14 + 9], 47, "GRE");
            out.push(Ipv4Addr::from(<[u8; 4]>::try_from(&f[30..34]).unwrap()));
        }
    }
    assert_eq!(out.len(), frames.len());
    out
}

const PORTS: std::ops::Range<u16> = 10_000..10_400;

/// 400 connections: SYN, then the handshake's ACK. Their backends.
fn connect(e: &mut Engine, now: Instant) -> Vec<Ipv4Addr> {
    let syn: Vec<_> = PORTS.map(|p| seg(p, TcpFlags::SYN)).collect();
    let ack: Vec<_> = PORTS.map(|p| seg(p, TcpFlags::ACK)).collect();
    let first = through(e, &syn, now);
    assert_eq!(through(e, &ack, now), first);
    first
}

fn data(e: &mut Engine, now: Instant) -> Vec<Ipv4Addr> {
    let frames: Vec<_> = PORTS.map(|p| seg(p, TcpFlags::ACK | TcpFlags::PSH)).collect();
    through(e, &frames, now)
}

#[test]
fn established_flows_keep_their_backend_across_a_reload_that_adds_one() {
    let mut e = engine(lb_tables(&["a", "b", "c"], |_| {}, 1));
    let first = connect(&mut e, T0);
    let c = &e.stats().conntrack;
    assert_eq!(c.confirmations.get(), 400);
    // A fourth backend, listed first: tunnel indexes all change, identities do not.
    e.adopt(lb_tables(&["d", "a", "b", "c"], |_| {}, 2));
    assert_eq!(data(&mut e, T0), first, "no established flow moved");
    // New connections follow the new table at once: "d" gets about a quarter.
    let fresh: Vec<_> = (20_000..20_400).map(|p| seg(p, TcpFlags::SYN)).collect();
    let to_d = through(&mut e, &fresh, T0)
        .iter()
        .filter(|&&r| r == remote_of("d"))
        .count();
    assert!((50..150).contains(&to_d), "{to_d} of 400 new flows on the new backend");
    // Without the table the reload would have moved about as many established ones.
    let mut stateless = engine(lb_tables(&["d", "a", "b", "c"], |_| {}, 1));
    let moved = data(&mut stateless, T0)
        .iter()
        .zip(&first)
        .filter(|(a, b)| a != b)
        .count();
    assert!(moved > 50, "Maglev alone moves {moved} of 400");
}

#[test]
fn drain_reweight_keep_flows_and_down_or_removed_moves_only_theirs() {
    let mut e = engine(lb_tables(&["a", "b", "c"], |_| {}, 1));
    let first = connect(&mut e, T0);
    e.adopt(lb_tables(
        &["a", "b", "c"],
        |b| match b.name.as_str() {
            "a" => b.drain = true,
            "b" => b.weight = 1000,
            _ => b.weight = 0,
        },
        2,
    ));
    assert_eq!(data(&mut e, T0), first, "drained, re-weighted, weight 0: nothing moves");
    // Every new flow goes to "b", the only one with slots.
    let fresh: Vec<_> = (20_000..20_100).map(|p| seg(p, TcpFlags::SYN)).collect();
    assert!(through(&mut e, &fresh, T0).iter().all(|&r| r == remote_of("b")));

    e.adopt(lb_tables(&["a", "b", "c"], |b| b.up = b.name != "a", 3));
    let after = data(&mut e, T0);
    for (now_on, was) in after.iter().zip(&first) {
        if *was == remote_of("a") {
            assert_ne!(*now_on, remote_of("a"), "a down backend keeps no flow");
        } else {
            assert_eq!(now_on, was);
        }
    }
    e.adopt(lb_tables(&["b", "c"], |_| {}, 4));
    for (now_on, was) in data(&mut e, T0).iter().zip(&after) {
        assert_eq!(now_on, was, "flows already moved off a, and the others, stay");
    }
    e.adopt(lb_tables(&["b"], |_| {}, 5));
    assert!(
        data(&mut e, T0).iter().all(|&r| r == remote_of("b")),
        "c removed: its flows move"
    );
}

/// ICMP Fragmentation Needed from a router on the path to the client, quoting the backend's
/// answer (service → client), as the RX lcore delivers it to the flow's socket.
fn frag_needed(cport: u16) -> Vec<u8> {
    let quoted = v4_frame(
        ME,
        CLIENT,
        IpProtocol::TCP,
        &[],
        0x4000,
        &tcp_bytes(80, cport, TcpFlags::ACK),
    );
    let mut icmp = vec![3, 4, 0, 0, 0, 0, 0x05, 0x78];
    icmp.extend_from_slice(&quoted[14..14 + 28]);
    let c = crate::wire::checksum::checksum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    v4_frame(ROUTER, ME, IpProtocol::ICMP, &[], 0, &icmp)
}

#[test]
fn frag_needed_goes_to_the_backend_holding_the_flow_with_the_icmp_inside_gre() {
    let mut e = engine(lb_tables(&["a", "b", "c"], |_| {}, 1));
    let first = connect(&mut e, T0);
    e.adopt(lb_tables(&["a", "b", "c", "d"], |_| {}, 2));
    // Flows whose Maglev pick changed: only the table knows their backend.
    let mut stateless = engine(lb_tables(&["a", "b", "c", "d"], |_| {}, 1));
    let now_maglev = data(&mut stateless, T0);
    let moved: Vec<usize> = (0..400).filter(|&i| now_maglev[i] != first[i]).collect();
    assert!(moved.len() > 50);
    for &i in &moved {
        let cport = PORTS.start + i as u16;
        let icmp = frag_needed(cport);
        deliver(&mut e, 0, std::slice::from_ref(&icmp));
        e.poll(T0);
        let out: Vec<HeapBuf> = sent(&mut e, 0).drain(..).collect();
        assert_eq!(out.len(), 1);
        let f = out[0].data();
        assert_eq!(f[30..34], first[i].octets(), "to the backend that holds the flow");
        assert!(f.ends_with(&icmp[14..]), "the original ICMP, whole, inside GRE");
    }
    // Not a sign of life: it neither inserted nor confirmed anything.
    let c = &e.stats().conntrack;
    assert_eq!(c.insertions.get(), 400);
    // A flow the table does not know: the Maglev pick of the quoted flow turned around, the
    // backend its own packets get.
    let unknown = 30_000;
    let icmp = frag_needed(unknown);
    deliver(&mut e, 0, std::slice::from_ref(&icmp));
    e.poll(T0);
    let to = sent(&mut e, 0).drain(..).next().unwrap().data()[30..34].to_vec();
    let own = through(&mut stateless, &[seg(unknown, TcpFlags::ACK)], T0)[0];
    assert_eq!(to, own.octets());
}

#[test]
fn no_tracking_with_zero_entries() {
    let t = lb_tables(&["a", "b", "c"], |_| {}, 1);
    let mut t = Arc::try_unwrap(t).unwrap();
    t.conntrack.entries = 0;
    let mut e = engine(Arc::new(t));
    let first = connect(&mut e, T0);
    let mut t2 = Arc::try_unwrap(lb_tables(&["d", "a", "b", "c"], |_| {}, 2)).unwrap();
    t2.conntrack.entries = 0;
    e.adopt(Arc::new(t2));
    let moved = data(&mut e, T0).iter().zip(&first).filter(|(a, b)| a != b).count();
    assert!(moved > 50, "stateless: {moved} moved");
    assert_eq!(e.stats().conntrack.capacity.get(), 0);
}

#[test]
fn the_worker_answers_the_control_sides_question_about_a_flow_at_its_next_poll() {
    use crate::stats::ConntrackProbe as P;
    let mut e = engine(lb_tables(&["a", "b", "c"], |_| {}, 1));
    let first = connect(&mut e, T0);
    let stats = e.stats().clone();
    let p = &stats.conntrack_probe;
    let flow = |port: u16| ((IpAddr::V4(CLIENT), port), (IpAddr::V4(ME), 80));
    let (c, s) = flow(PORTS.start);
    p.ask(1, 6, c, s, 0);
    assert_eq!(p.answer_to(1), None, "answered by the worker, between polls");
    e.poll(T0);
    let (a, g) = p.answer_to(1).expect("answered");
    assert_eq!(g, 1);
    assert_eq!(
        a & (P::FOUND | P::CONFIRMED | P::KEPT),
        P::FOUND | P::CONFIRMED | P::KEPT
    );
    let ti = (a & u32::MAX as u64) as usize;
    assert_eq!(e.tables().tunnels[ti].remote, IpAddr::V4(first[0]));
    // Once its backend is removed the entry is still there, but no longer kept.
    let gone = e.tables().tunnels[ti].name.clone();
    let rest: Vec<&str> = ["a", "b", "c"].into_iter().filter(|n| **n != *gone).collect();
    e.adopt(lb_tables(&rest, |_| {}, 2));
    p.ask(2, 6, c, s, 0);
    e.poll(T0);
    let (a, g) = p.answer_to(2).expect("answered");
    assert_eq!((a & (P::FOUND | P::KEPT), g), (P::FOUND, 2));
    // A flow it never saw, and a question asked twice: one answer each.
    let (c, s) = flow(PORTS.end);
    p.ask(3, 6, c, s, 0);
    e.poll(T0);
    e.poll(T0);
    assert_eq!(p.answer_to(3), Some((0, 2)));
    assert_eq!(p.answer_to(2), None);
}
