use super::*;
use crate::pipeline::maglev::{Backend, Maglev};
use std::net::Ipv4Addr;

const SEC: u64 = 1_000_000_000;

fn cfg(entries: u32) -> ConntrackConfig {
    ConntrackConfig {
        entries,
        ..ConntrackConfig::default()
    }
}

/// A small deterministic generator (tests only: the table's own seed comes from the OS).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }
}

/// A flow: client address and port towards the service 192.0.2.1:80, its flow hash.
#[derive(Clone, Copy)]
struct Flow {
    client: Ipv4Addr,
    port: u16,
    hash: u32,
}

fn flows(n: usize, rng: &mut Rng) -> Vec<Flow> {
    (0..n)
        .map(|_| {
            let r = rng.next();
            Flow {
                client: Ipv4Addr::from((r >> 32) as u32),
                port: r as u16 | 1024,
                hash: (r >> 16) as u32,
            }
        })
        .collect()
}

/// The backends by name; a flow's backend is an index into the names (the stable identity the
/// worker gives a tunnel name).
struct Set {
    names: Vec<&'static str>,
    backends: Vec<Backend>,
    maglev: Maglev,
}

impl Set {
    fn new(names: &[&'static str]) -> Set {
        let backends = names
            .iter()
            .map(|n| Backend {
                name: n.to_string(),
                weight: 100,
                drain: false,
                up: true,
            })
            .collect();
        let mut s = Set {
            names: names.to_vec(),
            backends,
            maglev: Maglev::build(&[]),
        };
        s.rebuild();
        s
    }
    fn rebuild(&mut self) {
        self.maglev = Maglev::build(&self.backends);
    }
    fn with<F: FnOnce(&mut Backend)>(&mut self, name: &str, f: F) {
        f(self.backends.iter_mut().find(|b| b.name == name).unwrap());
        self.rebuild();
    }
    fn add(&mut self, name: &'static str) {
        self.names.push(name);
        self.backends.push(Backend {
            name: name.to_string(),
            weight: 100,
            drain: false,
            up: true,
        });
        self.rebuild();
    }
    fn remove(&mut self, name: &str) {
        let i = self.backends.iter().position(|b| b.name == name).unwrap();
        self.backends.remove(i);
        self.rebuild();
    }
    /// Identity of a backend name (its first position in `names`, never reused).
    fn id(&self, name: &str) -> u16 {
        self.names.iter().position(|n| *n == name).unwrap() as u16
    }
    /// Whether a connection may stay on identity `id`: still a member, and up.
    fn valid(&self, id: u16) -> bool {
        let name = self.names[id as usize];
        self.backends.iter().any(|b| b.name == name && b.up)
    }
    fn pick(&self, hash: u32) -> Option<u16> {
        self.maglev.lookup(hash).map(|k| self.id(&self.backends[k].name))
    }
    fn stateless(&self, f: &Flow) -> u16 {
        self.pick(f.hash).unwrap()
    }
}

fn key(ct: &Conntrack, f: &Flow) -> u64 {
    ct.key(
        6,
        IpAddr::V4(f.client),
        f.port,
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
        80,
    )
}

fn send(ct: &mut Conntrack, set: &Set, f: &Flow, seen: Seen, now: Instant, c: &ConntrackCounters) -> u16 {
    let k = key(ct, f);
    ct.track(k, seen, now, c, |id| set.valid(id), || set.pick(f.hash))
        .unwrap()
}

/// SYN, then the handshake's ACK: a confirmed entry.
fn establish(ct: &mut Conntrack, set: &Set, f: &Flow, now: Instant, c: &ConntrackCounters) -> u16 {
    let b = send(ct, set, f, Seen::Syn, now, c);
    assert_eq!(send(ct, set, f, Seen::Tcp { closing: false }, now, c), b);
    b
}

#[test]
fn established_flows_keep_their_backend_through_add_reweight_drain() {
    let mut rng = Rng(1);
    let c = ConntrackCounters::default();
    let mut ct = Conntrack::new(&cfg(1 << 16), 7);
    let mut set = Set::new(&["a", "b", "c"]);
    let fl = flows(400, &mut rng);
    let now = Instant(SEC);
    let first: Vec<u16> = fl.iter().map(|f| establish(&mut ct, &set, f, now, &c)).collect();
    assert_eq!(c.confirmations.get(), 400);
    let storage = ct.storage();

    // A backend added: a stateless table moves about a quarter of the flows; tracked, none.
    set.add("d");
    let moved_stateless = fl.iter().zip(&first).filter(|(f, &b)| set.stateless(f) != b).count();
    assert!(moved_stateless > 50, "Maglev moved only {moved_stateless} of 400");
    for (f, &b) in fl.iter().zip(&first) {
        assert_eq!(send(&mut ct, &set, f, Seen::Tcp { closing: false }, now, &c), b);
    }
    // New flows follow the new table at once, "d" included.
    let fresh = flows(400, &mut rng);
    let to_d = fresh
        .iter()
        .filter(|f| {
            let b = send(&mut ct, &set, f, Seen::Syn, now, &c);
            assert_eq!(b, set.stateless(f));
            b == set.id("d")
        })
        .count();
    assert!(to_d > 50, "{to_d} new flows of 400 to the new backend");

    // Re-weighted, drained, weight 0: still alive, nothing established moves.
    set.with("a", |b| b.weight = 1000);
    set.with("b", |b| b.drain = true);
    set.with("c", |b| b.weight = 0);
    for (f, &b) in fl.iter().zip(&first) {
        assert_eq!(send(&mut ct, &set, f, Seen::Tcp { closing: false }, now, &c), b);
    }
    assert_eq!(c.repinned.get(), 0);
    assert_eq!(ct.storage(), storage, "the table never reallocates");
}

#[test]
fn a_removed_or_down_backends_flows_move_and_stay_moved() {
    let mut rng = Rng(2);
    let c = ConntrackCounters::default();
    let mut ct = Conntrack::new(&cfg(1 << 16), 8);
    let mut set = Set::new(&["a", "b", "c"]);
    let fl = flows(300, &mut rng);
    let now = Instant(SEC);
    let first: Vec<u16> = fl.iter().map(|f| establish(&mut ct, &set, f, now, &c)).collect();

    set.with("b", |b| b.up = false);
    let (b, a) = (set.id("b"), set.id("a"));
    let mut after_down = Vec::new();
    for (f, &was) in fl.iter().zip(&first) {
        let now_on = send(&mut ct, &set, f, Seen::Tcp { closing: false }, now, &c);
        if was == b {
            assert_ne!(now_on, b, "a down backend keeps no connection");
            assert_eq!(now_on, set.stateless(f));
        } else {
            assert_eq!(now_on, was);
        }
        after_down.push(now_on);
    }
    let on_b = first.iter().filter(|&&x| x == b).count() as u64;
    assert!(on_b > 50);
    assert_eq!(c.repinned.get(), on_b);
    // Up again: the moved flows stay where they went (re-pinned), others untouched.
    set.with("b", |b| b.up = true);
    for (f, &was) in fl.iter().zip(&after_down) {
        assert_eq!(send(&mut ct, &set, f, Seen::Tcp { closing: false }, now, &c), was);
    }
    // Removed: its flows move, the rest stay.
    set.remove("a");
    for (f, &was) in fl.iter().zip(&after_down) {
        let now_on = send(&mut ct, &set, f, Seen::Tcp { closing: false }, now, &c);
        if was == a {
            assert_ne!(now_on, a);
        } else {
            assert_eq!(now_on, was);
        }
    }
}

/// Floods of spoofed SYNs, ACKs and SYN+ACK pairs (which confirm) at 10 times the table's
/// capacity evict no confirmed entry: every confirmed flow keeps its backend through a backend
/// change made after the flood.
#[test]
fn floods_at_ten_times_capacity_leave_confirmed_entries_pinned() {
    for flood in ["syn", "ack", "syn+ack", "udp"] {
        let mut rng = Rng(3);
        let c = ConntrackCounters::default();
        let mut ct = Conntrack::new(&cfg(4096), 9);
        let cap = ct.capacity();
        assert_eq!(cap, 4096);
        let mut set = Set::new(&["a", "b", "c"]);
        let mut now = Instant(SEC);
        let real = flows(1500, &mut rng);
        let first: Vec<u16> = real.iter().map(|f| establish(&mut ct, &set, f, now, &c)).collect();
        let confirmed: Vec<bool> = real.iter().map(|f| is_confirmed(&ct, key(&ct, f))).collect();
        let n_confirmed = confirmed.iter().filter(|&&x| x).count();
        // Buckets of 4 with at most 3 confirmed: at 37% load nearly all fit.
        assert!(n_confirmed > 1400, "{n_confirmed} of 1500 confirmed");
        assert_eq!(ct.confirmed(), n_confirmed as u64);

        let spoofed = flows(10 * cap, &mut rng);
        for (i, f) in spoofed.iter().enumerate() {
            if i % 1000 == 0 {
                // The flood lasts: real flows keep talking meanwhile (their entries stay fresh).
                now = Instant(now.0 + SEC / 2);
                for r in &real {
                    send(&mut ct, &set, r, Seen::Tcp { closing: false }, now, &c);
                }
            }
            match flood {
                "syn" => drop(send(&mut ct, &set, f, Seen::Syn, now, &c)),
                "ack" => drop(send(&mut ct, &set, f, Seen::Tcp { closing: false }, now, &c)),
                "syn+ack" => drop(establish(&mut ct, &set, f, now, &c)),
                _ => {
                    let k = key(&ct, f) ^ 2;
                    ct.track(k, Seen::Udp, now, &c, |_| true, || Some(0));
                }
            }
        }
        assert!(
            c.evictions.get() + c.refused.get() > 0,
            "{flood}: the flood filled the table"
        );
        set.add("d");
        for ((f, &b), &conf) in real.iter().zip(&first).zip(&confirmed) {
            if conf {
                assert_eq!(
                    ct.peek(key(&ct, f), now),
                    Some(b),
                    "{flood}: a confirmed flow lost its entry"
                );
                assert_eq!(send(&mut ct, &set, f, Seen::Tcp { closing: false }, now, &c), b);
            }
        }
        // No bucket holds more than its share of confirmed entries.
        assert!(ct.confirmed() as usize <= cap / WAYS * MAX_CONFIRMED);
    }
}

fn is_confirmed(ct: &Conntrack, k: u64) -> bool {
    ct.entries().any(|(tag, _, conf)| tag == k && conf)
}

#[test]
fn timeouts_expire_entries_and_fin_or_rst_shortens_them() {
    let mut rng = Rng(4);
    let c = ConntrackCounters::default();
    let config = ConntrackConfig {
        entries: 1024,
        tcp_timeout_s: 100,
        tcp_closing_timeout_s: 5,
        udp_timeout_s: 20,
        unconfirmed_timeout_s: 3,
        icmp_per_sec: 0,
    };
    let mut ct = Conntrack::new(&config, 10);
    let set = Set::new(&["a", "b"]);
    let fl = flows(4, &mut rng);
    let t0 = SEC;
    let at = |s: u64| Instant(t0 + s * SEC);
    // Confirmed TCP: alive at 99 s idle, gone after 101 s.
    establish(&mut ct, &set, &fl[0], at(0), &c);
    assert!(ct.peek(key(&ct, &fl[0]), at(99)).is_some());
    assert!(ct.peek(key(&ct, &fl[0]), at(102)).is_none());
    // FIN: the closing timeout from then on.
    establish(&mut ct, &set, &fl[1], at(0), &c);
    send(&mut ct, &set, &fl[1], Seen::Tcp { closing: true }, at(10), &c);
    assert!(ct.peek(key(&ct, &fl[1]), at(14)).is_some());
    assert!(ct.peek(key(&ct, &fl[1]), at(16)).is_none());
    // A SYN alone: unconfirmed, gone after 3 s; a repeated SYN does not refresh it.
    send(&mut ct, &set, &fl[2], Seen::Syn, at(0), &c);
    send(&mut ct, &set, &fl[2], Seen::Syn, at(2), &c);
    assert!(ct.peek(key(&ct, &fl[2]), at(3)).is_some());
    assert!(ct.peek(key(&ct, &fl[2]), at(4)).is_none());
    // UDP: confirmed only by a packet a second after the first, then the UDP timeout.
    let k = key(&ct, &fl[3]) ^ 4;
    ct.track(k, Seen::Udp, at(0), &c, |_| true, || Some(1));
    ct.track(k, Seen::Udp, Instant(at(0).0 + SEC / 2), &c, |_| true, || Some(1));
    assert!(!is_confirmed(&ct, k));
    ct.track(k, Seen::Udp, Instant(at(1).0 + SEC / 10), &c, |_| true, || Some(1));
    assert!(is_confirmed(&ct, k));
    assert!(ct.peek(k, at(21)).is_some());
    assert!(ct.peek(k, at(23)).is_none());
    // The sweep takes what expired off the gauge.
    assert_eq!(ct.in_use(), 4);
    ct.sweep(at(200), ct.capacity() / WAYS, &c);
    assert_eq!(ct.in_use(), 0);
    assert_eq!(c.entries.get(), 0);
    assert_eq!(c.expired.get(), 4);
}

#[test]
fn zero_entries_tracks_nothing_and_follows_maglev() {
    let mut rng = Rng(5);
    let c = ConntrackCounters::default();
    let mut ct = Conntrack::new(&cfg(0), 11);
    assert!(ct.is_disabled());
    let mut set = Set::new(&["a", "b"]);
    let f = flows(1, &mut rng)[0];
    establish(&mut ct, &set, &f, Instant(0), &c);
    set.add("c");
    assert_eq!(
        send(&mut ct, &set, &f, Seen::Tcp { closing: false }, Instant(0), &c),
        set.stateless(&f)
    );
    assert_eq!(c.hits.get() + c.misses.get(), 0);
}

/// Two nodes behind ECMP, each with its own table: a flow the routers move from one to the other
/// reaches the same backend on the second while the backend set is unchanged (Maglev is a
/// function of the flow); after a change, the second node, which never saw the flow, gives the
/// new table's pick, so only flows that Maglev itself moves change backend.
#[test]
fn ecmp_nodes_do_not_share_tables_and_agree_through_maglev() {
    let mut rng = Rng(6);
    let (c1, c2) = (ConntrackCounters::default(), ConntrackCounters::default());
    let mut node1 = Conntrack::new(&cfg(1 << 14), 12);
    let mut node2 = Conntrack::new(&cfg(1 << 14), 13);
    let mut set = Set::new(&["a", "b", "c"]);
    let fl = flows(400, &mut rng);
    let now = Instant(SEC);
    let first: Vec<u16> = fl.iter().map(|f| establish(&mut node1, &set, f, now, &c1)).collect();
    // Moved by ECMP, backends unchanged: the same backend, mid-stream.
    for (f, &b) in fl.iter().zip(&first) {
        assert_eq!(send(&mut node2, &set, f, Seen::Tcp { closing: false }, now, &c2), b);
    }
    // A backend added, then moved by ECMP to a third node that never saw the flows.
    set.add("d");
    let mut node3 = Conntrack::new(&cfg(1 << 14), 14);
    let c3 = ConntrackCounters::default();
    let mut moved = 0;
    for (f, &b) in fl.iter().zip(&first) {
        let got = send(&mut node3, &set, f, Seen::Tcp { closing: false }, now, &c3);
        assert_eq!(got, set.stateless(f));
        moved += (got != b) as usize;
        // The node that had it keeps it, and so does the one that picked it up before the change.
        assert_eq!(send(&mut node1, &set, f, Seen::Tcp { closing: false }, now, &c1), b);
        assert_eq!(send(&mut node2, &set, f, Seen::Tcp { closing: false }, now, &c2), b);
    }
    assert!(
        moved > 50 && moved < 150,
        "{moved} of 400 moved on the node without state"
    );
}

/// A quoted flow is read only from a whole quote (IP header and 8 bytes); every shorter cut of
/// the error, and every byte flipped, gives an answer without a panic.
#[test]
fn quoted_flows_need_the_header_and_eight_bytes_and_never_panic() {
    use crate::pipeline::parse::tests::{tcp_bytes, v4_frame};
    use crate::wire::TcpFlags;
    let me = Ipv4Addr::new(192, 0, 2, 1);
    let client = Ipv4Addr::new(203, 0, 113, 9);
    let quoted = v4_frame(
        me,
        client,
        IpProtocol::TCP,
        &[],
        0,
        &tcp_bytes(80, 40000, TcpFlags::ACK),
    );
    let mut icmp = vec![3, 4, 0, 0, 0, 0, 5, 0x78];
    icmp.extend_from_slice(&quoted[14..14 + 28]);
    let frame = v4_frame(Ipv4Addr::new(203, 0, 113, 254), me, IpProtocol::ICMP, &[], 0, &icmp);
    let hasher = Toeplitz::default();
    let p = Parsed::parse(&frame, &hasher, None).unwrap();
    let q = quoted_flow(&frame, &p).unwrap();
    assert_eq!(
        (q.protocol, q.client, q.cport, q.service, q.sport),
        (IpProtocol::TCP, IpAddr::V4(client), 40000, IpAddr::V4(me), 80)
    );
    // The hash of the flow's own packets.
    let own = v4_frame(
        client,
        me,
        IpProtocol::TCP,
        &[],
        0,
        &tcp_bytes(40000, 80, TcpFlags::ACK),
    );
    assert_eq!(q.hash(&hasher), Parsed::parse(&own, &hasher, None).unwrap().hash);
    for cut in 0..frame.len() {
        let mut p = p;
        p.ip_end = p.ip_end.min(cut as u16);
        let got = quoted_flow(&frame[..cut], &p);
        assert_eq!(got.is_some(), cut == frame.len(), "cut at {cut}");
    }
    for i in 34..frame.len() {
        for bit in 0..8 {
            let mut f = frame.clone();
            f[i] ^= 1 << bit;
            let _ = quoted_flow(&f, &p);
        }
    }
}

/// The prefetch's address is the bucket a flow's lookup reads, inside the storage; prefetching
/// starts once the entries in use spread over more lines than PREFETCH_ABOVE.
#[test]
fn the_prefetched_bucket_is_the_one_looked_up_and_prefetching_waits_for_a_large_table() {
    let mut rng = Rng(12);
    let c = ConntrackCounters::default();
    let mut ct = Conntrack::new(&cfg(1 << 22), 12);
    let set = Set::new(&["a", "b"]);
    let (base, len) = ct.storage();
    let fs = flows(PREFETCH_ABOVE / 64 + 20_000, &mut rng);
    for (i, f) in fs.iter().enumerate() {
        let a = ct.bucket_addr(key(&ct, f)) as usize;
        assert!(
            a >= base && a < base + len * 64 && (a - base).is_multiple_of(64),
            "flow {i}: {a:#x}"
        );
        assert_eq!(a, base + ct.index(key(&ct, f)) * 64);
        assert_eq!(
            ct.larger_than_caches(),
            ct.in_use() as usize * 64 > PREFETCH_ABOVE,
            "after {i} flows"
        );
        send(&mut ct, &set, f, Seen::Syn, Instant(0), &c);
    }
    assert!(ct.larger_than_caches(), "{} entries in use", ct.in_use());
    assert!(ct.bucket_addr(1).is_null() == ct.is_disabled());
    assert!(Conntrack::new(&cfg(0), 1).bucket_addr(1).is_null());
}
