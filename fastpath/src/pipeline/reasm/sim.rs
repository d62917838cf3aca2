//! A fragment flood as a deterministic simulation (not a benchmark: simulated time, no
//! clock): legitimate fragmented datagrams mixed with a flood of first fragments that never
//! complete, from many sources, at several times the table's capacity. Used by a test (which
//! asserts the outcome) and meant for the benchmark crate to print a table from.
//!
//! "Capacity" is the number of datagrams the memory threshold admits, `high_thresh /
//! buffer_truesize`; a flood multiplier of `m` sends `m × capacity` flood datagrams per
//! timeout. With a fixed timeout the table fills after `timeout / m` and then admits a new
//! datagram only when an old one times out; with the pressure-scaled timeout the table settles
//! where lifetimes have shrunk enough to keep up (`timeout / (1 + m)` in a fluid model), below
//! the threshold, so new datagrams keep being admitted.
//!
//! [`FloodParams::line_rate`] is the flood `ci/bench` replays: fragments at line rate, cycling
//! through a set of datagrams or always new, or FragmentSmack's ([`FloodKind::Smack`]).
//!
//! The fraction of legitimate datagrams each policy reassembles, from `cargo run --release -p
//! benches --example reasm_flood`: benches/NOTES.md, "Reassembly under floods, simulated".
//! Peak memory: probation never above the threshold; linux up to the threshold plus one
//! datagram. Probation's bound: a datagram's fragments must follow each other within the time
//! the flood takes to turn the table over (113 datagrams / 10 Mpps = 11 µs; 182 µs for 1820).
//! The pressure-scaled timeout degrades gracefully against a flood spread over the timeout, but
//! a line-rate flood fills the threshold at once and then every new datagram is refused.

use super::{FragMeta, Insert, Policy, ReasmConfig, ReasmIo, ReasmStats, Reassembler, Released};
use crate::buf::{HeapBuf, PacketBuf};
use crate::pipeline::verdict::Instant;
use crate::wire::{ethernet, EtherType, EthernetAddress, IpProtocol, Ipv4Repr};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::Ipv4Addr;

/// What the flood sends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FloodKind {
    /// First fragments (MF set, 8 bytes of data) of datagrams that never complete.
    FirstFragments,
    /// FragmentSmack (CVE-2018-5391): 8-byte fragments of `datagrams` datagrams of `fragments`
    /// fragments each, drawn at random, the last fragment never sent: every datagram makes
    /// progress and none completes.
    Smack {
        /// Datagrams the flood keeps pending.
        datagrams: u32,
        /// Fragments per datagram, the missing last one included.
        fragments: u16,
    },
}

/// Parameters of one run.
#[derive(Clone, Debug, PartialEq)]
pub struct FloodParams {
    /// The reassembler's settings (`policy`, and under the `linux` policy
    /// `pressure_scaled_timeout`, pick what is under test).
    pub config: ReasmConfig,
    /// What the flood sends.
    pub flood_kind: FloodKind,
    /// Flood fragments per second; 0: `flood_multiplier` × capacity per timeout instead.
    pub flood_pps: f64,
    /// First fragments cycle through this many distinct datagrams, as a capture replayed in a
    /// loop does (`FirstFragments` only); 0: every one a new datagram.
    pub flood_distinct: u32,
    /// Simulated time.
    pub duration_ns: u64,
    /// Legitimate datagrams started before this are not measured (the table fills first).
    pub warmup_ns: u64,
    /// Flood first fragments per timeout, in multiples of the capacity.
    pub flood_multiplier: f64,
    /// Distinct flood source addresses (picked at random per fragment).
    pub flood_sources: u32,
    /// Legitimate datagrams per second.
    pub legit_per_sec: f64,
    /// Distinct legitimate source addresses.
    pub legit_sources: u32,
    /// Fragments per legitimate datagram.
    pub legit_fragments: u16,
    /// Time between the fragments of one legitimate datagram.
    pub fragment_gap_ns: u64,
    /// `expire` budget per received packet (the lcore calls it once per loop iteration).
    pub expire_budget: usize,
    /// Seed of the arrival process and of the reassembler's random generator.
    pub seed: u64,
}

impl FloodParams {
    /// The flood scenario at a reduced scale that runs quickly even unoptimized: a 512 KiB
    /// threshold (227 datagrams), the 30 s timeout, a flood of `multiplier` × capacity per
    /// timeout from 65536 sources, 20 legitimate 3-fragment datagrams per second, 4 minutes.
    /// The `linux` policy; [`FloodParams::with_policy`] picks another.
    pub fn seed_scenario(multiplier: f64, pressure_scaled_timeout: bool) -> Self {
        FloodParams {
            config: ReasmConfig {
                policy: Policy::Linux,
                high_thresh_bytes: 512 << 10,
                max_datagrams: 512,
                pressure_scaled_timeout,
                ..ReasmConfig::default()
            },
            flood_kind: FloodKind::FirstFragments,
            flood_pps: 0.0,
            flood_distinct: 0,
            duration_ns: 240_000_000_000,
            warmup_ns: 60_000_000_000,
            flood_multiplier: multiplier,
            flood_sources: 1 << 16,
            legit_per_sec: 20.0,
            legit_sources: 16,
            legit_fragments: 3,
            fragment_gap_ns: 100_000,
            expire_budget: 4,
            seed: 0x5eed_0001,
        }
    }

    /// The same with the daemon's defaults: a 4 MiB threshold (1820 datagrams), 2048 slots.
    pub fn default_scale(multiplier: f64, pressure_scaled_timeout: bool) -> Self {
        FloodParams {
            config: ReasmConfig {
                policy: Policy::Linux,
                pressure_scaled_timeout,
                ..ReasmConfig::default()
            },
            ..Self::seed_scenario(multiplier, pressure_scaled_timeout)
        }
    }

    /// A flood at line rate, as `ci/bench` replays one: `pps` flood fragments a second for
    /// 0.2 s (after 0.05 s of warm-up), 20,000 legitimate 3-fragment datagrams a second whose
    /// fragments are 2 µs apart (a 10 Gb/s sender's 1500-byte fragments are 1.2 µs apart), a
    /// 256 KiB threshold (113 datagrams), 30 s timeout, flood sources 65536.
    pub fn line_rate(kind: FloodKind, pps: f64, distinct: u32) -> Self {
        FloodParams {
            config: ReasmConfig {
                high_thresh_bytes: 256 << 10,
                max_datagrams: 256,
                ..ReasmConfig::default()
            },
            flood_kind: kind,
            flood_pps: pps,
            flood_distinct: distinct,
            duration_ns: 250_000_000,
            warmup_ns: 50_000_000,
            flood_multiplier: 0.0,
            legit_per_sec: 20_000.0,
            fragment_gap_ns: 2_000,
            legit_sources: 1024,
            expire_budget: 4,
            ..Self::seed_scenario(0.0, true)
        }
    }

    /// These parameters under `policy`.
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.config.policy = policy;
        self
    }

    /// Datagrams the memory threshold admits.
    pub fn capacity(&self) -> usize {
        self.config.high_thresh_bytes / self.config.buffer_truesize.max(1)
    }
}

/// What a run measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FloodResult {
    /// Legitimate datagrams sent after the warm-up.
    pub legit_measured: u64,
    /// Of those, reassembled.
    pub legit_completed: u64,
    /// Flood fragments sent.
    pub flood_sent: u64,
    /// Fragments given to the reassembler.
    pub fragments_in: u64,
    /// Outcomes counted: releases that count one, completions, and fragments still held at the
    /// end (before the final drain). Equals `fragments_in` when accounting is exact.
    pub outcomes: u64,
    /// Highest memory usage seen.
    pub max_memory: usize,
    /// The threshold.
    pub high_thresh: usize,
    /// The threshold plus one legitimate datagram's buffers.
    pub high_thresh_plus_datagram: usize,
    /// The reassembler's hard limit (threshold plus one maximal datagram).
    pub memory_limit: usize,
    /// The reassembler's counters at the end.
    pub stats: ReasmStats,
}

impl FloodResult {
    /// Fraction of measured legitimate datagrams reassembled.
    pub fn completion_rate(&self) -> f64 {
        if self.legit_measured == 0 {
            return 1.0;
        }
        self.legit_completed as f64 / self.legit_measured as f64
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// An exponential inter-arrival time for `rate` per second, in ns.
    fn exp_ns(&mut self, rate: f64) -> u64 {
        let u = self.unit().max(1e-12);
        (-u.ln() / rate * 1e9) as u64
    }
}

struct SimIo {
    rng: Rng,
    counted: u64,
}

impl ReasmIo<HeapBuf> for SimIo {
    fn alloc(&mut self, len: usize) -> Option<HeapBuf> {
        Some(HeapBuf::with_room(&[], 0, len))
    }
    fn release(&mut self, r: Released<HeapBuf>) {
        if r.fate.counts_outcome() {
            self.counted += 1;
        }
    }
    fn random(&mut self) -> u32 {
        (self.rng.next() >> 32) as u32
    }
}

/// An Ethernet + IPv4 fragment: `data` at byte `offset` of the datagram, MF as given.
pub fn v4_fragment(src: Ipv4Addr, dst: Ipv4Addr, ident: u16, offset: u16, more: bool, data: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; 14 + 20];
    ethernet::emit_header(
        &mut v,
        EthernetAddress([2, 0, 0, 0, 0, 1]),
        EthernetAddress([2, 0, 0, 0, 0, 2]),
        EtherType::IPV4,
    );
    Ipv4Repr {
        src,
        dst,
        protocol: IpProtocol::UDP,
        payload_len: data.len() as u16,
        ttl: 64,
        dscp_ecn: 0,
        ident,
        dont_frag: false,
    }
    .emit(&mut v[14..]);
    let word = (offset / 8) | if more { 0x2000 } else { 0 };
    v[20..22].copy_from_slice(&word.to_be_bytes());
    v[24..26].copy_from_slice(&[0, 0]);
    let c = crate::wire::checksum::checksum(&v[14..34]);
    v[24..26].copy_from_slice(&c.to_be_bytes());
    v.extend_from_slice(data);
    v
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Flood,
    LegitStart,
    /// Fragment `index` of legitimate datagram `seq`.
    Legit {
        seq: u32,
        index: u16,
    },
}

/// Runs the scenario. Deterministic for given parameters.
pub fn simulate_flood(p: &FloodParams) -> FloodResult {
    let mut r: Reassembler<HeapBuf> = Reassembler::new(p.config.clone());
    let mut rng = Rng(p.seed | 1);
    let mut io = SimIo {
        rng: Rng(p.seed.rotate_left(17) | 1),
        counted: 0,
    };
    let flood_rate = if p.flood_pps > 0.0 {
        p.flood_pps
    } else {
        p.flood_multiplier * p.capacity() as f64 / (p.config.timeout_ns as f64 / 1e9)
    };
    let mut flood_next = 0u32;
    let dst = Ipv4Addr::new(192, 0, 2, 1);
    let mut events = BinaryHeap::new();
    let mut seq_no = 0u64;
    let mut push = |ev: &mut BinaryHeap<_>, t: u64, e: Event| {
        seq_no += 1;
        ev.push(Reverse((t, seq_no, e)));
    };
    if flood_rate > 0.0 {
        let t = rng.exp_ns(flood_rate);
        push(&mut events, t, Event::Flood);
    }
    if p.legit_per_sec > 0.0 {
        let t = rng.exp_ns(p.legit_per_sec);
        push(&mut events, t, Event::LegitStart);
    }
    let mut res = FloodResult {
        high_thresh: r.config().high_thresh_bytes,
        high_thresh_plus_datagram: r.config().high_thresh_bytes
            + p.legit_fragments as usize * r.config().buffer_truesize,
        memory_limit: r.memory_limit(),
        ..Default::default()
    };
    let mut legit_measured = Vec::new();
    let mut completions = 0u64;
    let frag_len = 8usize;
    while let Some(Reverse((t, _, ev))) = events.pop() {
        if t > p.duration_ns {
            break;
        }
        let now = Instant(t);
        let frame = match ev {
            Event::Flood => {
                let next = t + rng.exp_ns(flood_rate);
                push(&mut events, next, Event::Flood);
                res.flood_sent += 1;
                let sources = p.flood_sources.max(1);
                let (d, offset) = match p.flood_kind {
                    FloodKind::FirstFragments if p.flood_distinct > 0 => {
                        flood_next = (flood_next + 1) % p.flood_distinct;
                        (flood_next, 0)
                    }
                    FloodKind::FirstFragments => (rng.next() as u32, 0),
                    FloodKind::Smack { datagrams, fragments } => {
                        let d = (rng.next() % datagrams.max(1) as u64) as u32;
                        let j = (rng.next() % fragments.saturating_sub(1).max(1) as u64) as u16;
                        (d, j * 8)
                    }
                };
                // A datagram's source and identification follow from its number, so a
                // repeated number is the same datagram.
                let src = Ipv4Addr::from(0x0a00_0000 | ((d % sources) & 0x00ff_ffff));
                v4_fragment(src, dst, (d / sources) as u16 ^ (d as u16), offset, true, &[0xf1; 8])
            }
            Event::LegitStart => {
                let next = t + rng.exp_ns(p.legit_per_sec);
                push(&mut events, next, Event::LegitStart);
                let seq = legit_measured.len() as u32;
                legit_measured.push(t >= p.warmup_ns);
                for index in 0..p.legit_fragments {
                    push(
                        &mut events,
                        t + index as u64 * p.fragment_gap_ns,
                        Event::Legit { seq, index },
                    );
                }
                continue;
            }
            Event::Legit { seq, index } => {
                let s = seq % p.legit_sources.max(1);
                let src = Ipv4Addr::from(0xc612_0000 | s);
                let last = index + 1 == p.legit_fragments;
                let mut data = [0u8; 8];
                data[..4].copy_from_slice(&seq.to_be_bytes());
                v4_fragment(
                    src,
                    dst,
                    (seq / p.legit_sources.max(1)) as u16,
                    index * frag_len as u16,
                    !last,
                    &data,
                )
            }
        };
        r.expire(now, p.expire_budget, &mut io);
        let meta = FragMeta::from_ethernet(&frame).expect("a fragment");
        res.fragments_in += 1;
        match r.insert(now, HeapBuf::with_room(&frame, 0, 0), &meta, &mut io) {
            Insert::Complete { datagram, .. } => {
                completions += 1;
                let d = datagram.data();
                let seq = u32::from_be_bytes([d[34], d[35], d[36], d[37]]);
                if d[26] == 0xc6 && legit_measured.get(seq as usize) == Some(&true) {
                    res.legit_completed += 1;
                }
            }
            Insert::Held | Insert::Dropped { .. } => {}
        }
        res.max_memory = res.max_memory.max(r.memory());
    }
    res.legit_measured = legit_measured.iter().filter(|&&m| m).count() as u64;
    res.outcomes = io.counted + completions + r.held_fragments() as u64;
    res.stats = r.stats().clone();
    r.drain_all(&mut io);
    res
}
