//! The lcore loops: burst receive, run the pipeline on each packet, burst transmit, count.
//!
//! Each loop owns its queue handles, its pipeline copy and its counter block, so the per-packet
//! path takes no lock and writes no memory another lcore writes. The only shared word read in the
//! loop is the stop flag, written once at shutdown.

use crate::buf::PacketBuf;
use crate::dpdk::{eal, Mbuf, RxQueue, TxQueue};
use crate::outcome::Outcome;
use crate::pipeline::{Instant, Pipeline, Verdict};
use crate::stats::{LcoreStats, QueueCounters};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Packets per RX and TX burst (the DPDK convention, and testpmd's default).
pub const BURST: usize = 32;

/// What a loop does when it polls and finds nothing.
#[derive(Clone, Copy, Debug)]
pub struct IdlePolicy {
    /// Empty polls in a row before the loop starts sleeping.
    pub spin_polls: u32,
    /// How long to sleep per empty poll after that; 0 means never sleep (pure busy polling).
    pub sleep: Duration,
}

impl IdlePolicy {
    #[inline]
    fn idle(&self, empty_in_a_row: u32) {
        if !self.sleep.is_zero() && empty_in_a_row > self.spin_polls {
            std::thread::sleep(self.sleep);
        } else {
            eal::pause();
        }
    }
}

/// Converts TSC ticks to the pipeline's nanosecond clock without division per packet.
#[derive(Clone, Copy, Debug)]
pub struct TscClock {
    /// ns per tick in 32.32 fixed point.
    mult: u64,
}

impl TscClock {
    /// A clock for a TSC running at `hz`.
    pub fn new(hz: u64) -> Self {
        TscClock {
            mult: ((1_000_000_000u128 << 32) / hz.max(1) as u128) as u64,
        }
    }
    /// Now, in pipeline time.
    #[inline]
    pub fn now(&self) -> Instant {
        self.at(eal::rdtsc())
    }
    /// The pipeline time of a TSC reading.
    #[inline]
    pub fn at(&self, tsc: u64) -> Instant {
        Instant(((tsc as u128 * self.mult as u128) >> 32) as u64)
    }
}

/// Packets waiting for one TX queue, with the outcome each gets once sent.
struct TxBatch {
    queue: TxQueue,
    /// Index of this queue in the lcore's `stats.tx`.
    stats_index: usize,
    pkts: Vec<Mbuf>,
    outcomes: Vec<Outcome>,
}

/// An RX lcore: polls its RX queues and answers on its own TX queue of each port.
pub struct RxLcore {
    rx: Vec<RxQueue>,
    /// Indexed by port id; `None` for ports this lcore cannot send on.
    tx: Vec<Option<TxBatch>>,
    pipeline: Pipeline,
    stats: Arc<LcoreStats>,
    idle: IdlePolicy,
    clock: TscClock,
    /// Plain forward mode: `forward[rx port id]` is the port to send on; no stage runs.
    forward: Option<Box<[u16]>>,
}

impl RxLcore {
    /// An RX lcore over `rx` queues (their counters are `stats.rx[i]`, same order) that transmits
    /// on `tx` queues (counters `stats.tx[i]`, same order; at most one per port).
    pub fn new(
        rx: Vec<RxQueue>,
        tx: Vec<TxQueue>,
        pipeline: Pipeline,
        stats: Arc<LcoreStats>,
        idle: IdlePolicy,
        clock: TscClock,
    ) -> Self {
        let ports = tx.iter().map(|q| q.port() as usize + 1).max().unwrap_or(0);
        let mut by_port: Vec<Option<TxBatch>> = (0..ports).map(|_| None).collect();
        for (i, q) in tx.into_iter().enumerate() {
            let p = q.port() as usize;
            by_port[p] = Some(TxBatch {
                queue: q,
                stats_index: i,
                pkts: Vec::with_capacity(BURST),
                outcomes: Vec::with_capacity(BURST),
            });
        }
        RxLcore {
            rx,
            tx: by_port,
            pipeline,
            stats,
            idle,
            clock,
            forward: None,
        }
    }

    /// Switches this lcore to the plain forward mode: what arrives on port `p` leaves unchanged
    /// on this lcore's TX queue of port `to[p]` (a port beyond `to` forwards to itself), in the
    /// same burst, with no stage run. Each packet counts as `forwarded`, or `tx_full` when the
    /// queue refuses it. It measures what the DPDK layer and this loop cost on their own.
    pub fn forwarding(mut self, to: Vec<u16>) -> Self {
        self.forward = Some(to.into_boxed_slice());
        self
    }

    /// Runs until `stop` is set. On return every received packet has been counted once.
    pub fn run(mut self, stop: &AtomicBool) {
        let mut burst: Vec<Mbuf> = Vec::with_capacity(BURST);
        let mut drops: Vec<Mbuf> = Vec::with_capacity(BURST);
        let mut empty_in_a_row = 0u32;
        // A busy poll's cycles run from its start to the start of the next poll, so one TSC read
        // per poll serves the cycle accounting and the pipeline clock (rdtsc is ~40 cycles).
        let mut busy_since: Option<u64> = None;
        while !stop.load(Ordering::Relaxed) {
            let t0 = eal::rdtsc();
            if let Some(t) = busy_since.take() {
                self.stats.busy_cycles.add(t0.wrapping_sub(t));
            }
            let mut got = 0usize;
            for qi in 0..self.rx.len() {
                let n = self.rx[qi].recv(&mut burst);
                if n == 0 {
                    continue;
                }
                got += n;
                let port = self.rx[qi].port();
                let qstats = &self.stats.rx[qi];
                qstats.packets.add(n as u64);
                if let Some(to) = &self.forward {
                    let dst = to.get(port as usize).copied().unwrap_or(port) as usize;
                    let tx = self.tx.get_mut(dst).and_then(Option::as_mut);
                    forward(tx, &mut burst, &self.stats, qstats);
                    continue;
                }
                let now = self.clock.at(t0);
                for mut m in burst.drain(..) {
                    qstats.bytes.add(m.pkt_len() as u64);
                    if m.segments() != 1 {
                        self.stats.outcome(Outcome::Oversize);
                        drops.push(m);
                        continue;
                    }
                    match self.pipeline.process(port, &mut m, now) {
                        Verdict::Drop(o) => {
                            self.stats.outcome(o);
                            drops.push(m);
                        }
                        Verdict::Transmit(o) => match self.tx.get_mut(port as usize) {
                            Some(Some(b)) => {
                                b.pkts.push(m);
                                b.outcomes.push(o);
                                if b.pkts.len() == BURST {
                                    flush(b, &self.stats, &mut drops);
                                }
                            }
                            _ => {
                                self.stats.outcome(Outcome::TxFull);
                                drops.push(m);
                            }
                        },
                    }
                    if drops.len() == BURST {
                        Mbuf::free_bulk(&mut drops);
                    }
                }
                Mbuf::free_bulk(&mut drops);
            }
            for b in self.tx.iter_mut().flatten() {
                flush(b, &self.stats, &mut drops);
            }
            Mbuf::free_bulk(&mut drops);
            if got == 0 {
                self.stats.idle_polls.inc();
                empty_in_a_row = empty_in_a_row.saturating_add(1);
                self.idle.idle(empty_in_a_row);
            } else {
                self.stats.busy_polls.inc();
                busy_since = Some(t0);
                empty_in_a_row = 0;
            }
        }
        if let Some(t) = busy_since {
            self.stats.busy_cycles.add(eal::rdtsc().wrapping_sub(t));
        }
    }
}

/// Forward mode: sends a whole received burst on `tx` at once; counts it `forwarded`, and what
/// the queue refuses (or all of it, without a queue) `tx_full`, then frees the refused.
#[inline]
fn forward(tx: Option<&mut TxBatch>, burst: &mut Vec<Mbuf>, stats: &LcoreStats, rxq: &QueueCounters) {
    let bytes: u64 = burst.iter().map(|m| m.pkt_len() as u64).sum();
    rxq.bytes.add(bytes);
    if let Some(b) = tx {
        let sent = b.queue.send(burst);
        let unsent_bytes: u64 = burst.iter().map(|m| m.pkt_len() as u64).sum();
        let q = &stats.tx[b.stats_index];
        q.packets.add(sent as u64);
        q.bytes.add(bytes - unsent_bytes);
        stats.outcomes_add(Outcome::Forwarded, sent as u64);
    }
    if !burst.is_empty() {
        stats.outcomes_add(Outcome::TxFull, burst.len() as u64);
        Mbuf::free_bulk(burst);
    }
}

/// Sends a TX batch; counts each sent packet's outcome and each refused one as `tx_full`.
#[inline]
fn flush(b: &mut TxBatch, stats: &LcoreStats, drops: &mut Vec<Mbuf>) {
    if b.pkts.is_empty() {
        return;
    }
    let mut bytes = 0u64;
    for m in &b.pkts {
        bytes += m.len() as u64;
    }
    let sent = b.queue.send(&mut b.pkts);
    for o in &b.outcomes[..sent] {
        stats.outcome(*o);
    }
    for _ in sent..b.outcomes.len() {
        stats.outcome(Outcome::TxFull);
    }
    let unsent_bytes: u64 = b.pkts.iter().map(|m| m.len() as u64).sum();
    let q = &stats.tx[b.stats_index];
    q.packets.add(sent as u64);
    q.bytes.add(bytes - unsent_bytes);
    b.outcomes.clear();
    drops.append(&mut b.pkts);
}

/// A worker lcore: drains the service sockets assigned to it and runs their actions. Until
/// services are configured it only idles and watches for shutdown.
pub struct WorkerLcore {
    stats: Arc<LcoreStats>,
    idle: IdlePolicy,
}

impl WorkerLcore {
    /// A worker counting into `stats`.
    pub fn new(stats: Arc<LcoreStats>, idle: IdlePolicy) -> Self {
        WorkerLcore { stats, idle }
    }

    /// Runs until `stop` is set.
    pub fn run(self, stop: &AtomicBool) {
        let mut empty_in_a_row = 0u32;
        while !stop.load(Ordering::Relaxed) {
            self.stats.idle_polls.inc();
            empty_in_a_row = empty_in_a_row.saturating_add(1);
            self.idle.idle(empty_in_a_row);
        }
    }
}
