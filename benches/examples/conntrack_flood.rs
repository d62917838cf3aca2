//! A `tunnel` service's connection table at scale, through the worker engine (parse, the table,
//! Maglev, GRE encapsulation; heap buffers, no DPDK, one core): FLOWS established TCP
//! connections (SYN, then the handshake's ACK) over backends a, b and c; their data; a spoofed
//! SYN flood and then a spoofed ACK flood of FLOOD_X × the table's entries, every tuple new; a
//! reload that adds backend d (Maglev alone would move about a quarter of the flows); then one
//! segment of every established connection.
//!
//! Prints, per table size: Mpps of the worker's tunnel path for the handshakes, for the
//! established connections' data (the table warm; the fastest of CONNTRACK_REPS passes, 3), and
//! under each flood (time inside `WorkerEngine::poll` only: building the frames and freeing
//! what was sent are not counted), the hit rate of the data, the connections confirmed, and
//! the connections moved and the fraction on their first backend after the floods and the
//! reload (pinned). A connection can move only if it was never confirmed: a bucket holds at
//! most 3 confirmed entries, so a 4th connection hashed there stays unconfirmed and a flood
//! takes its way (asserted: confirmed entries before and after the floods are equal, and no
//! more connections moved than were left unconfirmed).
//!
//! `cargo run --release -p benches --example conntrack_flood` (1M connections, about a minute
//! and 200 MB); `CONNTRACK_FLOWS=20000 ...` for a smaller run; `CONNTRACK_ENTRIES=0,1024,...`
//! for other table sizes (default: none, 1024, the default 262144, and 4 × FLOWS: the sizing
//! docs/operating.md gives).

use fastpath::buf::{HeapBuf, PacketBuf};
use fastpath::pipeline::maglev::Backend;
use fastpath::pipeline::tunnel::{Tunnel, TunnelCounters, TunnelOut};
use fastpath::pipeline::{Action, Backends, FanoutMode, Group, Instant, PortAddrs, Service, ServiceTable, Tables};
use fastpath::socket::{SimQueue, Socket, SocketCounters};
use fastpath::stats::{ConntrackCounters, LcoreStats, QueueCounters};
use fastpath::tx::Collect;
use fastpath::wire::{EthernetAddress, IpProtocol, Toeplitz};
use fastpath::worker::{HeapWorkerIo, WorkerEngine};
use std::net::Ipv4Addr;
use std::sync::Arc;

type Engine = WorkerEngine<HeapBuf, HeapWorkerIo>;

const ME_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
const PEER_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 2, 7]);
const ME: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const PSH_ACK: u8 = 0x18;
/// Packets per poll (the worker's burst).
const BURST: usize = 32;
/// Simulated time: one moment (no entry expires during a run).
const NOW: Instant = Instant(1_000_000_000);

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Backend `name` (a, b, c, d): GRE to 203.0.113.10 + its letter, out of port 0.
fn backend(name: &str) -> Tunnel {
    Tunnel {
        name: name.to_string(),
        local: ME.into(),
        remote: Ipv4Addr::new(203, 0, 113, 10 + name.as_bytes()[0] - b'a').into(),
        key: None,
        sequence: false,
        checksum: false,
        ttl: 64,
        out: TunnelOut::Port {
            port: 0,
            src_mac: ME_MAC,
            dst_mac: PEER_MAC,
            mtu: 1500,
        },
        depth: 1,
        owner: 0,
        counters: Arc::new(TunnelCounters::new(1, 1)),
        handoff: None,
        max_seq_jump: fastpath::pipeline::tunnel::DEFAULT_MAX_SEQ_JUMP,
    }
}

/// A `tunnel` service on TCP port 80 over `names`, one socket, a table of `entries`.
fn tables(names: &[&str], entries: u32, generation: u64) -> Arc<Tables> {
    let backends: Vec<Backend> = names
        .iter()
        .map(|n| Backend {
            name: n.to_string(),
            weight: 100,
            drain: false,
            up: true,
        })
        .collect();
    let sock = Arc::new(Socket::with_queues(
        "lb",
        0,
        vec![SimQueue::new(2 * BURST).into()],
        0,
        Arc::new(SocketCounters::new(1, 1)),
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
    let mut t = Tables {
        generation,
        ports: vec![PortAddrs::new(ME_MAC, vec![ME], vec![], false)],
        hasher: Toeplitz::default(),
        services: ServiceTable::new(vec![(svc, vec![80])]),
        sockets: vec![sock],
        tunnels: names.iter().map(|n| backend(n)).collect(),
        ..Default::default()
    };
    t.conntrack.entries = entries;
    Arc::new(t)
}

fn checksum(b: &[u8]) -> u16 {
    let mut s: u32 = b
        .chunks(2)
        .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32)
        .sum();
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// A TCP segment (no payload) from `src`:`sport` to ME:80 with `flags`, into `f`.
fn segment(f: &mut Vec<u8>, src: u32, sport: u16, flags: u8) {
    f.clear();
    f.extend_from_slice(&ME_MAC.0);
    f.extend_from_slice(&PEER_MAC.0);
    f.extend_from_slice(&[8, 0]);
    let ip = 14;
    f.extend_from_slice(&[0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0]);
    f.extend_from_slice(&src.to_be_bytes());
    f.extend_from_slice(&ME.octets());
    let c = checksum(&f[ip..ip + 20]);
    f[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
    let tcp = f.len();
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&80u16.to_be_bytes());
    f.extend_from_slice(&1000u32.to_be_bytes());
    f.extend_from_slice(&u32::from(flags & ACK != 0).to_be_bytes());
    f.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    let mut pseudo = Vec::with_capacity(32);
    pseudo.extend_from_slice(&f[ip + 12..ip + 20]);
    pseudo.extend_from_slice(&[0, 6, 0, 20]);
    pseudo.extend_from_slice(&f[tcp..]);
    let c = checksum(&pseudo);
    f[tcp + 16..tcp + 18].copy_from_slice(&c.to_be_bytes());
}

/// Established connection `i`: from 10.0.0.0 + i, port 40000.
fn conn(i: u32) -> (u32, u16) {
    (0x0a00_0000 + i, 40_000)
}

/// Flood tuple `j` of the SYN flood (100.64.0.0/10, then the next port) or the ACK flood
/// (11.0.0.0/8, the same): never an established connection's, never each other's.
fn spoofed(j: u64, syn: bool) -> (u32, u16) {
    if syn {
        (0x6440_0000 + (j & 0x3f_ffff) as u32, 1024 + (j >> 22) as u16)
    } else {
        (0x0b00_0000 + (j & 0xff_ffff) as u32, 1024 + (j >> 24) as u16)
    }
}

/// Runs `n` packets (`frame(k, buf)` writes the k-th) through the worker, `BURST` a poll; calls
/// `out` with the last octet of each encapsulated packet's outer destination when `keep`.
/// Seconds spent inside `poll`.
fn run(e: &mut Engine, n: u64, keep: bool, mut frame: impl FnMut(u64, &mut Vec<u8>), mut out: impl FnMut(u8)) -> f64 {
    let sock = e.tables().sockets[0].clone();
    e.tx_queue_mut(0).expect("a TX queue on port 0").keep = keep;
    let mut f = Vec::with_capacity(64);
    let mut spent = std::time::Duration::ZERO;
    let mut k = 0;
    while k < n {
        let m = (n - k).min(BURST as u64);
        for _ in 0..m {
            frame(k, &mut f);
            assert!(e.io_mut().deliver(&sock, 0, HeapBuf::new(&f)));
            k += 1;
        }
        let t = std::time::Instant::now();
        e.poll(NOW);
        spent += t.elapsed();
        if keep {
            for p in e.tx_queue_mut(0).unwrap().sent.drain(..) {
                out(p.data()[14 + 19]);
            }
        }
    }
    spent.as_secs_f64()
}

fn snapshot(c: &ConntrackCounters) -> [u64; 5] {
    [
        c.hits.get(),
        c.misses.get(),
        c.evictions.get(),
        c.refused.get(),
        c.confirmations.get(),
    ]
}

fn main() {
    let flows: u32 = env_or("CONNTRACK_FLOWS", 1_000_000);
    let flood_x: u64 = env_or("CONNTRACK_FLOOD_X", 10);
    let reps: u64 = env_or("CONNTRACK_REPS", 3);
    let sizes: Vec<u32> = std::env::var("CONNTRACK_ENTRIES")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![0, 1024, 262_144, 4 * flows]);
    println!(
        "{flows} established TCP connections over backends a, b, c; SYN then ACK floods of {flood_x} x each \
         table's entries (new tuples); a reload adds backend d. Worker engine, heap buffers, one core.\n"
    );
    println!(
        "| entries | handshakes Mpps | data Mpps | data hit rate | confirmed | SYN flood Mpps | ACK flood Mpps | \
         flood evictions | refused | confirmed after the floods | moved | pinned after the floods and the reload |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for entries in sizes {
        let stats = Arc::new(LcoreStats::new(0, vec![], vec![QueueCounters::new(0, 0)]));
        let mut e = Engine::new(
            tables(&["a", "b", "c"], entries, 1),
            0,
            vec![Collect::new(0)],
            HeapWorkerIo::default(),
            stats.clone(),
            1_000_000_000,
        );
        let c = &stats.conntrack;
        let capacity = c.capacity.get();
        let n = flows as u64;
        // Handshakes: each connection's SYN and ACK, 16 connections a burst.
        let mut first = vec![0u8; flows as usize];
        let mut seen = 0usize;
        let hs = run(
            &mut e,
            2 * n,
            true,
            |k, f| {
                let (i, syn) = ((k / 32) * 16 + k % 16, k % 32 < 16);
                let (src, port) = conn(i as u32);
                segment(f, src, port, if syn { SYN } else { ACK });
            },
            |dst| {
                // Outputs come in order: per burst, 16 SYNs then their ACKs.
                let (i, syn) = ((seen / 32) * 16 + seen % 16, seen % 32 < 16);
                if syn {
                    first[i] = dst;
                } else {
                    assert_eq!(first[i], dst, "the handshake's ACK on its SYN's backend");
                }
                seen += 1;
            },
        );
        let confirmed = c.confirmed.get();
        // Data of every connection, twice, in a scattered order (a stride prime to the count).
        let stride = (1_000_003 % n.max(2)) | 1;
        let stride = if gcd(stride, n) == 1 { stride } else { 1 };
        let before = snapshot(c);
        // The fastest of REPS passes: the machine is shared, and others only ever slow a pass.
        let data = (0..reps)
            .map(|_| {
                run(
                    &mut e,
                    n,
                    false,
                    |k, f| {
                        let (src, port) = conn(((k * stride) % n) as u32);
                        segment(f, src, port, PSH_ACK);
                    },
                    |_| {},
                )
            })
            .fold(f64::INFINITY, f64::min);
        let after = snapshot(c);
        let hit_rate = (after[0] - before[0]) as f64 / (reps * n) as f64;
        // The floods: FLOOD_X x the table, at least FLOOD_X x 1024 without one.
        let fl = flood_x * capacity.max(1024);
        let f0 = snapshot(c);
        let syn = run(
            &mut e,
            fl,
            false,
            |k, f| {
                let (src, port) = spoofed(k, true);
                segment(f, src, port, SYN);
            },
            |_| {},
        );
        let ack = run(
            &mut e,
            fl,
            false,
            |k, f| {
                let (src, port) = spoofed(k, false);
                segment(f, src, port, ACK);
            },
            |_| {},
        );
        let f1 = snapshot(c);
        let confirmed_after = c.confirmed.get();
        // The reload that adds d, then one segment of each connection.
        e.adopt(tables(&["a", "b", "c", "d"], entries, 2));
        let mut pinned = 0u64;
        let mut k = 0usize;
        run(
            &mut e,
            n,
            true,
            |k, f| {
                let (src, port) = conn(k as u32);
                segment(f, src, port, PSH_ACK);
            },
            |dst| {
                pinned += u64::from(first[k] == dst);
                k += 1;
            },
        );
        let mpps = |pkts: u64, s: f64| pkts as f64 / s / 1e6;
        println!(
            "| {capacity} | {:.2} | {:.2} | {:.4} | {confirmed} | {:.2} | {:.2} | {} | {} | {confirmed_after} | {} | {:.6} |",
            mpps(2 * n, hs),
            mpps(n, data),
            hit_rate,
            mpps(fl, syn),
            mpps(fl, ack),
            f1[2] - f0[2],
            f1[3] - f0[3],
            n - pinned,
            pinned as f64 / n as f64,
        );
        assert_eq!(f1[4], f0[4], "the floods confirmed nothing");
        if capacity > 0 {
            assert_eq!(confirmed_after, confirmed, "the floods evicted no confirmed entry");
            assert!(n - pinned <= n - confirmed, "only connections never confirmed moved");
        }
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
