//! An off-path attacker against the RX engine, in the styles of nmap's idle scan (`-sI`), SAD DNS
//! (CVE-2020-25705) and CVE-2016-5696: it cannot see what we send to others, only what we send
//! to its own addresses, and it wants to know whether a port is open. Each attack runs many
//! trials with the secret (open or closed) drawn at random; the attacker learns its best
//! threshold on the first half and is scored on the second. Its advantage (accuracy − ½) must
//! stay within the noise of the trial count.
//!
//! The engine, its limits and its identifications are the daemon's own, with the shipped
//! defaults (`[icmp]`, `[tcp_reset]`); time is simulated, so a run takes a second.

use super::*;
use crate::buf::{HeapBuf, PacketBuf};
use crate::pipeline::fanout::FanoutMode;
use crate::pipeline::parse::tests::{tcp_bytes, udp_bytes, v4_frame};
use crate::pipeline::tests::port;
use crate::pipeline::{Action, Group, Service, ServiceTable};
use crate::socket::{SimQueue, SocketCounters};
use crate::stats::QueueCounters;
use crate::tx::Collect;
use crate::wire::{checksum, IpProtocol, TcpFlags, Toeplitz};
use std::net::Ipv4Addr;

const ME: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
/// The open ports the attacker looks for.
const UDP_OPEN: u16 = 53;
const TCP_OPEN: u16 = 22;
/// Trials per attack: half to learn on, half to score. The score's standard deviation is
/// 0.5/√1000 ≈ 0.016.
const TRIALS: usize = 2000;
/// The advantage the attacks must stay below: 6 standard deviations of the score, above the
/// small advantage the randomised global budgets leave the batch attacks (as on Linux).
const NOISE: f64 = 0.1;

fn tables() -> Arc<Tables> {
    let service = |name: &str, protocol: IpProtocol, s: usize| Service {
        name: name.into(),
        protocol,
        addresses: vec![],
        group: Group {
            sockets: vec![s],
            mode: FanoutMode::Hash,
            rollover: false,
            huge_flows: false,
            flow_limit: true,
        },
        action: Action::Sink,
        cost_ns: 0,
        echo_allow_low_ports: false,
    };
    let socket = |name: &str| {
        Arc::new(Socket::new(
            name,
            0,
            SimQueue::new(1 << 30),
            0,
            Arc::new(SocketCounters::new(1, 1)),
        ))
    };
    Arc::new(Tables {
        generation: 1,
        ports: vec![port()],
        hasher: Toeplitz::default(),
        services: ServiceTable::new(vec![
            (service("dns", IpProtocol::UDP, 0), vec![UDP_OPEN]),
            (service("ssh", IpProtocol::TCP, 1), vec![TCP_OPEN]),
        ]),
        sockets: vec![socket("dns"), socket("ssh")],
        ..Default::default()
    })
}

/// The target: one RX lcore, what it sends kept.
struct Target {
    e: RxEngine<HeapBuf, HeapIo>,
    now: u64,
}

impl Target {
    fn new() -> Self {
        let stats = Arc::new(LcoreStats::new(
            0,
            vec![QueueCounters::new(0, 0)],
            vec![QueueCounters::new(0, 1)],
        ));
        let e = RxEngine::new(tables(), 0, vec![Collect::new(0)], HeapIo::default(), stats);
        Target { e, now: 1_000_000_000 }
    }

    /// One burst of `frames`; what was sent back, as (destination, IPv4 identification).
    fn send(&mut self, frames: &[Vec<u8>]) -> Vec<(Ipv4Addr, u16)> {
        let now = Instant(self.now);
        let mut burst: Vec<HeapBuf> = frames.iter().map(|f| HeapBuf::new(f)).collect();
        self.e.burst(0, 0, now, &mut burst);
        self.e.poll_done(now);
        let sent = &mut self.e.tx_mut(0).unwrap().queue_mut().sent;
        let out = sent
            .iter()
            .map(|b| {
                let d = b.data();
                (
                    Ipv4Addr::new(d[30], d[31], d[32], d[33]),
                    u16::from_be_bytes([d[18], d[19]]),
                )
            })
            .collect();
        sent.clear();
        out
    }

    fn wait_ms(&mut self, ms: u64) {
        self.now += ms * 1_000_000;
    }
}

fn udp_probe(src: Ipv4Addr, dport: u16) -> Vec<u8> {
    v4_frame(src, ME, IpProtocol::UDP, &[], 0, &udp_bytes(40000, dport, b"probe"))
}

fn syn_probe(src: Ipv4Addr, dport: u16) -> Vec<u8> {
    let mut f = v4_frame(
        src,
        ME,
        IpProtocol::TCP,
        &[],
        0,
        &tcp_bytes(40000, dport, TcpFlags::SYN),
    );
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&src.octets());
    pseudo.extend_from_slice(&ME.octets());
    pseudo.extend_from_slice(&[0, 6, 0, (f.len() - 34) as u8]);
    pseudo.extend_from_slice(&f[34..]);
    let c = checksum::checksum(&pseudo);
    f[50..52].copy_from_slice(&c.to_be_bytes());
    f
}

/// The attacker's randomness (not the target's): a xorshift from the OS-seeded hasher.
struct Coin(u64);

impl Coin {
    fn new() -> Self {
        use std::hash::{BuildHasher, Hasher};
        Coin(std::collections::hash_map::RandomState::new().build_hasher().finish() | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn flip(&mut self) -> bool {
        self.next() & 1 == 1
    }
    /// A source address nobody else uses in this run (spoofed, or one of the attacker's own).
    fn addr(&mut self, net: u8) -> Ipv4Addr {
        let x = self.next() as u32;
        Ipv4Addr::new(net, (x >> 16) as u8, (x >> 8) as u8, x as u8)
    }
}

/// Plays `trials` of `attack(target, secret_open) -> feature` (the secret drawn at random),
/// learns the attacker's best threshold rule on the first half and returns its accuracy − ½ on
/// the second.
fn advantage(mut attack: impl FnMut(&mut Target, &mut Coin, bool) -> Option<f64>) -> f64 {
    let mut t = Target::new();
    let mut coin = Coin::new();
    let mut seen: Vec<(f64, bool)> = Vec::with_capacity(TRIALS);
    for _ in 0..TRIALS {
        let open = coin.flip();
        // Every trial starts with full budgets, as a patient attacker's would.
        t.wait_ms(2_000);
        // A trial the attacker could not read (no answer at all) is a coin flip.
        let feature = attack(&mut t, &mut coin, open).unwrap_or_else(|| (coin.next() % 65536) as f64);
        seen.push((feature, open));
    }
    let (learn, score) = seen.split_at(TRIALS / 2);
    // The rule "open iff feature <= x" or "open iff feature > x" that does best on `learn`.
    let mut cuts: Vec<f64> = learn.iter().map(|s| s.0).collect();
    cuts.sort_by(f64::total_cmp);
    cuts.dedup();
    let accuracy = |set: &[(f64, bool)], x: f64, below: bool| {
        set.iter().filter(|&&(f, open)| ((f <= x) == below) == open).count() as f64 / set.len() as f64
    };
    let (mut best, mut rule) = (0.0, (f64::INFINITY, true));
    for &x in &cuts {
        for below in [true, false] {
            let a = accuracy(learn, x, below);
            if a > best {
                (best, rule) = (a, (x, below));
            }
        }
    }
    accuracy(score, rule.0, rule.1) - 0.5
}

/// The idle scan: the identification of an answer to itself before and after `spoofed`
/// probes from others to the port; a counter shared by every destination moves by the number
/// of answers those got.
fn idle_scan(probe: fn(Ipv4Addr, u16) -> Vec<u8>, open_port: u16, spoofed: usize) -> f64 {
    advantage(|t, coin, open| {
        let port = if open { open_port } else { open_port + 1 };
        let me1 = coin.addr(203);
        let (_, a) = *t.send(&[probe(me1, 9)]).first()?;
        let others: Vec<_> = (0..spoofed).map(|_| probe(coin.addr(198), port)).collect();
        t.send(&others);
        let me2 = coin.addr(203);
        let (_, b) = *t.send(&[probe(me2, 9)]).iter().find(|(d, _)| *d == me2)?;
        Some(b.wrapping_sub(a) as f64)
    })
}

/// The global-budget probe: `batch` spoofed probes, one of them to the open port when it is,
/// the rest to closed ports; then `verify` probes from its own addresses to a closed port,
/// counting answers. A deterministic shared budget answers one more when a port was open.
fn budget_probe(probe: fn(Ipv4Addr, u16) -> Vec<u8>, open_port: u16, batch: usize, verify: usize) -> f64 {
    advantage(|t, coin, open| {
        let spoofed: Vec<_> = (0..batch)
            .map(|i| {
                let port = if open && i == 0 { open_port } else { 1000 + i as u16 };
                probe(coin.addr(198), port)
            })
            .collect();
        // Within one refill period (the budget refills only after 20 ms), as the attacks do.
        t.send(&spoofed);
        t.wait_ms(1);
        let mine: Vec<_> = (0..verify).map(|_| probe(coin.addr(203), 9)).collect();
        let answered = t.send(&mine).iter().filter(|(d, _)| d.octets()[0] == 203).count();
        Some(answered as f64)
    })
}

#[test]
fn the_identification_of_icmp_errors_does_not_count_what_others_got() {
    let a = idle_scan(udp_probe, UDP_OPEN, 8);
    assert!(a < NOISE, "idle scan through ICMP errors: advantage {a:.3}");
}

#[test]
fn the_identification_of_resets_does_not_count_what_others_got() {
    let a = idle_scan(syn_probe, TCP_OPEN, 8);
    assert!(a < NOISE, "idle scan through resets: advantage {a:.3}");
}

#[test]
fn the_global_icmp_budget_does_not_tell_one_open_port_in_a_batch() {
    // SAD DNS: 50 (the burst) spoofed probes, then the attacker's own.
    let a = budget_probe(udp_probe, UDP_OPEN, 50, 1);
    assert!(a < NOISE, "SAD DNS style: advantage {a:.3}");
}

#[test]
fn the_global_reset_budget_does_not_tell_one_open_port_in_a_batch() {
    // CVE-2016-5696's counting, with resets: the burst of spoofed SYNs, then the attacker's own.
    let a = budget_probe(syn_probe, TCP_OPEN, 50, 1);
    assert!(a < NOISE, "CVE-2016-5696 style: advantage {a:.3}");
}

#[test]
fn the_attacker_wins_where_the_channel_is_open() {
    // The harness tells a leak when there is one: probing the port itself, the attacker wins.
    let a = advantage(|t, coin, open| {
        let port = if open { UDP_OPEN } else { UDP_OPEN + 1 };
        Some(t.send(&[udp_probe(coin.addr(203), port)]).len() as f64)
    });
    assert!(a > 0.45, "a direct probe: advantage {a:.3}");
}
