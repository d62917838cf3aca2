use super::*;
use crate::pipeline::kernel::PuntBudget;
use std::net::Ipv4Addr;

const SVC: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
const SYN: TcpFlags = TcpFlags::SYN;
const ACK: TcpFlags = TcpFlags::ACK;
const RST: TcpFlags = TcpFlags::RST;
const FIN_ACK: TcpFlags = TcpFlags(TcpFlags::FIN.0 | TcpFlags::ACK.0);
const SYN_ACK: TcpFlags = TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0);
const SEC: u64 = 1_000_000_000;

fn cfg(entries: u32, learn_s: u64, syn: Option<(u32, u32, u32, u32)>) -> TcpStateConfig {
    TcpStateConfig {
        entries,
        handshake_timeout_s: 10,
        established_timeout_s: 300,
        closing_timeout_s: 5,
        learn_ns: learn_s * SEC,
        syn: match syn {
            Some((rate, burst, new_rate, new_burst)) => SourceLimitConfig {
                enabled: true,
                per_source: PuntBudget::per_lcore(rate, burst, 1),
                newcomers: PuntBudget::per_lcore(new_rate, new_burst, 1),
                ipv4_prefix: 32,
                ipv6_prefix: 64,
                entries: 4096,
                idle_ns: 10 * SEC,
                calm_ns: 10 * SEC,
                services: vec![],
            },
            None => SourceLimitConfig::default(),
        },
        services: vec![true],
        tracked: vec!["web".into()],
    }
}

fn client(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0xc633_6400 + i))
}

fn seg(c: IpAddr, port: u16, flags: TcpFlags, seq: u32) -> Segment {
    Segment {
        client: c,
        cport: port,
        service: SVC,
        sport: 443,
        flags,
        seq,
    }
}

struct T {
    st: TcpState,
    cfg: TcpStateConfig,
    c: TcpStateLcoreCounters,
}

impl T {
    fn new(cfg: TcpStateConfig) -> T {
        T {
            st: TcpState::new(&cfg, 0x5eed),
            cfg,
            c: TcpStateLcoreCounters::default(),
        }
    }

    fn judge(&mut self, s: Segment, now: u64) -> Result<(), Reason> {
        self.st.judge(&self.cfg, &s, Instant(now), &self.c)
    }

    fn count(&self, r: Reason) -> u64 {
        self.c.reasons[r as usize].get()
    }

    /// A full handshake of `c:port` at `now`, its ISN `isn`.
    fn connect(&mut self, c: IpAddr, port: u16, isn: u32, now: u64) {
        assert_eq!(self.judge(seg(c, port, SYN, isn), now), Ok(()), "SYN");
        assert_eq!(
            self.judge(seg(c, port, ACK, isn.wrapping_add(1)), now + 1000),
            Ok(()),
            "the handshake's ACK"
        );
    }
}

#[test]
fn a_handshake_then_data_then_close() {
    let mut t = T::new(cfg(1024, 0, None));
    let c = client(1);
    let now = 5 * SEC;
    assert_eq!(
        t.judge(seg(c, 1000, ACK, 7), now),
        Err(Reason::NoFlow),
        "before any SYN"
    );
    t.connect(c, 1000, 0xffff_ffff, now);
    assert_eq!(t.st.in_use(), (1, 1), "established");
    for i in 0..10 {
        assert_eq!(t.judge(seg(c, 1000, ACK, i * 1448), now + i as u64 * SEC), Ok(()));
    }
    assert_eq!(t.judge(seg(c, 1000, FIN_ACK, 99), now + 20 * SEC), Ok(()));
    // Closing: 5 s after the FIN the flow is gone; before, its last ACKs pass.
    assert_eq!(t.judge(seg(c, 1000, ACK, 100), now + 23 * SEC), Ok(()));
    assert_eq!(t.judge(seg(c, 1000, ACK, 100), now + 30 * SEC), Err(Reason::NoFlow));
    assert_eq!(t.count(Reason::NoFlow), 2);
    // The port used again: a new handshake.
    t.connect(c, 1000, 12345, now + 31 * SEC);
    assert_eq!(t.judge(seg(c, 1000, ACK, 20000), now + 32 * SEC), Ok(()));
}

#[test]
fn out_of_state_reasons() {
    let mut t = T::new(cfg(1024, 0, None));
    let c = client(2);
    let now = 5 * SEC;
    assert_eq!(t.judge(seg(c, 1, RST, 0), now), Err(Reason::RstNoFlow));
    assert_eq!(
        t.judge(seg(c, 2, SYN_ACK, 0), now),
        Err(Reason::NoFlow),
        "a SYN+ACK opens nothing"
    );
    assert_eq!(t.judge(seg(c, 3, TcpFlags::FIN, 0), now), Err(Reason::NoFlow));
    assert_eq!(t.judge(seg(c, 4, SYN, 100), now), Ok(()));
    assert_eq!(
        t.judge(seg(c, 4, ACK, 100), now),
        Err(Reason::BadHandshake),
        "ISN, not ISN + 1"
    );
    assert_eq!(t.judge(seg(c, 4, ACK, 5000), now), Err(Reason::BadHandshake));
    assert_eq!(
        t.judge(seg(c, 4, TcpFlags(0), 101), now),
        Err(Reason::BadHandshake),
        "no ACK"
    );
    assert_eq!(t.judge(seg(c, 4, ACK, 101), now), Ok(()), "the real ACK still confirms");
    assert_eq!(t.st.in_use(), (1, 1));
    // A handshake's entry lives 10 s.
    assert_eq!(t.judge(seg(c, 5, SYN, 7), now), Ok(()));
    assert_eq!(t.judge(seg(c, 5, ACK, 8), now + 12 * SEC), Err(Reason::NoFlow));
    for (r, n) in [
        (Reason::RstNoFlow, 1),
        (Reason::NoFlow, 3),
        (Reason::BadHandshake, 3),
        (Reason::SynOverBudget, 0),
        (Reason::TableFull, 0),
        (Reason::Learned, 0),
    ] {
        assert_eq!(t.count(r), n, "{r:?}");
    }
}

/// Established flows filling the table's buckets, then a SYN flood and an ACK flood of spoofed
/// sources at ten times the table: none of them is evicted, and each still passes after.
#[test]
fn floods_never_evict_established_flows() {
    let mut t = T::new(cfg(1024, 0, None));
    let cap = t.st.capacity() as u32;
    let mut now = 5 * SEC;
    let legit: Vec<(IpAddr, u16)> = (0..cap / 4).map(|i| (client(i), 2000 + (i % 7) as u16)).collect();
    for &(c, p) in &legit {
        t.connect(c, p, p as u32 * 77, now);
    }
    let (_, established) = t.st.in_use();
    // A flow whose bucket four others filled is admitted untracked (its SYN and its ACK).
    assert_eq!(established, cap as u64 / 4 - t.count(Reason::TableFull) / 2);
    let storage = t.st.storage();
    for i in 0..cap * 10 {
        now += 1000;
        let spoofed = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i * 7919));
        assert_eq!(t.judge(seg(spoofed, 40000, SYN, i), now), Ok(()));
    }
    assert_eq!(
        t.st.in_use().1,
        established,
        "the SYN flood evicted no established entry"
    );
    let full = t.count(Reason::TableFull);
    for i in 0..cap * 10 {
        now += 1000;
        let spoofed = IpAddr::V4(Ipv4Addr::from(0x0b00_0000 + i * 7919));
        let r = t.judge(seg(spoofed, 40001, ACK, i), now);
        assert!(matches!(r, Err(Reason::NoFlow) | Ok(())), "{r:?}");
    }
    assert_eq!(
        t.st.in_use().1,
        established,
        "the ACK flood evicted no established entry"
    );
    assert_eq!(t.st.storage(), storage, "the table never grew or moved");
    let no_flow = t.count(Reason::NoFlow);
    // An ACK is admitted (failing open) only in a bucket the legit flows filled: with a quarter
    // of the table established, a few percent of the buckets.
    assert_eq!(no_flow + t.count(Reason::TableFull) - full, cap as u64 * 10);
    assert!(no_flow > cap as u64 * 9, "the ACK flood is dropped: {no_flow}");
    for &(c, p) in &legit {
        assert_eq!(t.judge(seg(c, p, ACK, 9), now), Ok(()), "{c}:{p} still established");
    }
}

/// A bucket of four established flows fails open: the fifth flow of that bucket is admitted
/// untracked, counted `table_full`, and established flows stay.
#[test]
fn a_full_bucket_fails_open() {
    let mut t = T::new(cfg(1024, 0, None));
    let now = 5 * SEC;
    let buckets = t.st.capacity() / WAYS;
    // Flows to one bucket, found through the table's own hash.
    let mut same = Vec::new();
    let mut first = None;
    for port in 1..u16::MAX {
        let s = seg(client(9), port, SYN, 0);
        let key = t.st.table.key(6, s.client, s.cport, s.service, s.sport);
        let (bi, _) = t.st.table.find(key, 0);
        if *first.get_or_insert(bi) == bi {
            same.push(port);
        }
        if same.len() == WAYS + 1 {
            break;
        }
    }
    assert!(buckets > 1 && same.len() == WAYS + 1);
    for &p in &same[..WAYS] {
        t.connect(client(9), p, 1, now);
    }
    assert_eq!(t.st.in_use(), (WAYS as u64, WAYS as u64));
    let extra = same[WAYS];
    assert_eq!(t.judge(seg(client(9), extra, SYN, 1), now), Ok(()));
    assert_eq!(t.judge(seg(client(9), extra, ACK, 2), now), Ok(()));
    assert_eq!(t.judge(seg(client(9), extra, ACK, 3), now), Ok(()));
    assert_eq!(t.count(Reason::TableFull), 3);
    assert_eq!(t.st.in_use(), (WAYS as u64, WAYS as u64));
}

#[test]
fn the_learning_window_admits_running_connections_then_closes() {
    let mut t = T::new(cfg(1024, 30, None));
    let c = client(3);
    let start = 100 * SEC;
    // A connection from before the table: learned, then confirmed by a segment a second later.
    assert_eq!(t.judge(seg(c, 1, ACK, 5), start), Ok(()));
    assert_eq!(t.count(Reason::Learned), 1);
    assert_eq!(t.st.in_use(), (1, 0));
    assert_eq!(t.judge(seg(c, 1, ACK, 6), start + SEC / 2), Ok(()));
    assert_eq!(t.st.in_use(), (1, 0), "not yet: half a second");
    assert_eq!(t.judge(seg(c, 1, ACK, 7), start + 2 * SEC), Ok(()));
    assert_eq!(t.st.in_use(), (1, 1), "confirmed");
    // A one-off spoofed segment in the window is admitted but never confirmed: it expires.
    assert_eq!(t.judge(seg(client(4), 1, ACK, 5), start + 3 * SEC), Ok(()));
    // After the window: the learned connection goes on, a new mid-stream one is dropped.
    assert_eq!(t.judge(seg(c, 1, ACK, 8), start + 40 * SEC), Ok(()));
    assert_eq!(
        t.judge(seg(client(5), 1, ACK, 5), start + 40 * SEC),
        Err(Reason::NoFlow)
    );
    assert_eq!(
        t.judge(seg(client(4), 1, ACK, 5), start + 40 * SEC),
        Err(Reason::NoFlow),
        "expired"
    );
    // A reload that tracks another service opens the window again, from the next segment.
    let cfg2 = t.cfg.clone();
    t.st.configure(&cfg2, true);
    assert_eq!(t.judge(seg(client(5), 1, ACK, 5), start + 100 * SEC), Ok(()));
    assert_eq!(t.judge(seg(client(6), 1, ACK, 5), start + 129 * SEC), Ok(()));
    assert_eq!(
        t.judge(seg(client(7), 1, ACK, 5), start + 131 * SEC),
        Err(Reason::NoFlow)
    );
}

#[test]
fn timeouts_follow_the_configuration() {
    let mut t = T::new(cfg(1024, 0, None));
    let c = client(8);
    let now = 5 * SEC;
    t.connect(c, 1, 1, now);
    assert_eq!(t.judge(seg(c, 1, ACK, 3), now + 299 * SEC), Ok(()), "idle 299 s of 300");
    assert_eq!(
        t.judge(seg(c, 1, ACK, 3), now + 600 * SEC),
        Err(Reason::NoFlow),
        "idle 301 s"
    );
    // A reload with a shorter timeout applies to the running table.
    t.connect(c, 2, 1, now + 700 * SEC);
    let mut short = t.cfg.clone();
    short.established_timeout_s = 10;
    t.st.configure(&short, false);
    assert_eq!(t.judge(seg(c, 2, ACK, 3), now + 720 * SEC), Err(Reason::NoFlow));
    // The sweep takes expired entries out of the gauges.
    let c2 = TcpStateLcoreCounters::default();
    t.connect(c, 3, 1, now + 800 * SEC);
    let before = t.st.in_use().0;
    t.st.sweep(Instant(now + 2000 * SEC), t.st.capacity() / WAYS, &c2);
    assert!(t.st.in_use().0 < before);
    assert_eq!(t.st.in_use().0, 0);
}

#[test]
fn syns_are_held_to_a_budget_per_source() {
    // A known source: 5 at once; newcomers: 20 at once, together.
    let mut t = T::new(cfg(4096, 0, Some((10, 5, 100, 20))));
    let now = 5 * SEC;
    let c = client(1);
    let ok = (0..20)
        .filter(|&p| t.judge(seg(c, 3000 + p, SYN, 1), now).is_ok())
        .count();
    // The first SYN was a newcomer's and made the source known, charged to its own 5 too.
    assert_eq!(ok, 5);
    assert_eq!(t.count(Reason::SynOverBudget), 15);
    // A spoofed SYN flood from fresh sources gets the newcomers' budget and no more...
    let flood = (0..10_000u32)
        .filter(|&i| {
            let s = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
            t.judge(seg(s, 1, SYN, i), now + 1000 + i as u64).is_ok()
        })
        .count();
    assert!(flood <= 22, "{flood}");
    // ... while the known source goes on at its own rate.
    assert!(t.judge(seg(c, 4000, SYN, 1), now + SEC).is_ok());
    // Handshake ACKs are no SYNs: never charged.
    assert_eq!(t.judge(seg(c, 4000, ACK, 2), now + SEC), Ok(()));
}

#[test]
fn a_new_syn_on_an_established_flow_keeps_it() {
    let mut t = T::new(cfg(1024, 0, None));
    let c = client(1);
    let now = 5 * SEC;
    t.connect(c, 1, 50, now);
    assert_eq!(
        t.judge(seg(c, 1, SYN, 999), now + SEC),
        Ok(()),
        "the service answers it"
    );
    assert_eq!(t.st.in_use(), (1, 1));
    assert_eq!(t.judge(seg(c, 1, ACK, 3), now + SEC), Ok(()), "still established");
    // RST on an established flow: admitted, then closing.
    assert_eq!(t.judge(seg(c, 1, RST, 3), now + 2 * SEC), Ok(()));
    assert_eq!(t.judge(seg(c, 1, ACK, 3), now + 20 * SEC), Err(Reason::NoFlow));
}

#[test]
fn the_isn_wraps() {
    let mut t = T::new(cfg(1024, 0, None));
    let c = client(1);
    t.connect(c, 1, u32::MAX, 5 * SEC);
    t.connect(c, 2, 0x00ff_ffff, 5 * SEC);
    assert_eq!(t.st.in_use(), (2, 2));
}

/// The prefetched bucket is the one a segment of the frame's flow is judged in, for IPv4 and
/// IPv6; frames the prefetch cannot read at fixed offsets get none.
#[test]
fn the_prefetched_bucket_is_the_judged_flows() {
    use crate::pipeline::parse::tests::{tcp_bytes, udp_bytes, v4_frame, v6_frame};
    use crate::wire::IpProtocol;
    use std::net::Ipv6Addr;
    let t = T::new(cfg(4096, 0, None));
    let (c4, s4) = (Ipv4Addr::new(198, 51, 100, 7), Ipv4Addr::new(192, 0, 2, 1));
    let bucket = |c: IpAddr, s: IpAddr| t.st.table.bucket_addr(t.st.table.key(6, c, 40000, s, 443));
    let tcp = tcp_bytes(40000, 443, ACK);
    let f = v4_frame(c4, s4, IpProtocol::TCP, &[], 0x4000, &tcp);
    assert_eq!(t.st.bucket_of_frame(&f), Some(bucket(c4.into(), s4.into())));
    assert_ne!(
        t.st.bucket_of_frame(&f),
        Some(bucket(s4.into(), c4.into())),
        "the direction matters (else this test proves nothing)"
    );
    let (c6, s6): (Ipv6Addr, Ipv6Addr) = ("2001:db8::7".parse().unwrap(), "2001:db8::1".parse().unwrap());
    let f6 = v6_frame(c6, s6, IpProtocol::TCP, &[], 64, &tcp);
    assert_eq!(t.st.bucket_of_frame(&f6), Some(bucket(c6.into(), s6.into())));
    // Not TCP, a fragment, options: none.
    let udp = udp_bytes(40000, 443, b"x");
    assert_eq!(
        t.st.bucket_of_frame(&v4_frame(c4, s4, IpProtocol::UDP, &[], 0, &udp)),
        None
    );
    assert_eq!(
        t.st.bucket_of_frame(&v4_frame(c4, s4, IpProtocol::TCP, &[], 0x2000, &tcp)),
        None
    );
    assert_eq!(
        t.st.bucket_of_frame(&v4_frame(c4, s4, IpProtocol::TCP, &[], 0x0001, &tcp)),
        None
    );
    assert_eq!(
        t.st.bucket_of_frame(&v4_frame(c4, s4, IpProtocol::TCP, &[1, 1, 1, 1], 0, &tcp)),
        None
    );
    assert_eq!(t.st.bucket_of_frame(&f[..30]), None);
    assert_eq!(t.st.bucket_of_frame(&[]), None);
}
