//! Per-lcore counter blocks.
//!
//! Each lcore owns one [`LcoreStats`] and is its only writer; readers (the metrics thread, the
//! stats line, the exit dump) sum the blocks. A [`Counter`] update is a relaxed load and a relaxed
//! store — plain `mov`s on x86, no locked instruction — which is correct only because there is
//! one writer. Blocks are cache-line aligned so lcores never share a written line.

use crate::outcome::Outcome;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A monotonically increasing counter with one writer and any number of readers.
#[derive(Default, Debug)]
#[repr(transparent)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`. Must only be called by the counter's owning lcore.
    #[inline(always)]
    pub fn add(&self, n: u64) {
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }
    /// Adds one.
    #[inline(always)]
    pub fn inc(&self) {
        self.add(1)
    }
    /// Sets the value (owner only; for gauges and copied counters).
    #[inline]
    pub fn set(&self, v: u64) {
        self.0.store(v, Relaxed);
    }
    /// Current value (any thread).
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// Packets and bytes through one (port, queue).
#[derive(Debug, Default)]
pub struct QueueCounters {
    /// DPDK port id.
    pub port: u16,
    /// Queue index on that port.
    pub queue: u16,
    /// Packets.
    pub packets: Counter,
    /// Bytes (frame length without FCS), if `counts_bytes`.
    pub bytes: Counter,
    /// Whether the loop using the queue counts its bytes (the plain forward mode does not: it
    /// does per packet what testpmd's io mode does; the port's own counters have the bytes).
    pub counts_bytes: bool,
}

impl QueueCounters {
    /// Zeroed counters for (port, queue).
    pub fn new(port: u16, queue: u16) -> Self {
        QueueCounters {
            port,
            queue,
            counts_bytes: true,
            ..Default::default()
        }
    }

    /// Zeroed counters for (port, queue) whose bytes are not counted.
    pub fn packets_only(port: u16, queue: u16) -> Self {
        QueueCounters {
            counts_bytes: false,
            ..Self::new(port, queue)
        }
    }
}

/// How many reasons a reassembler refuses fragments for: the length of
/// [`ReasmCounters::refused`]'s rows. The reassembler asserts at compile time that its reasons
/// number as many, so this block needs nothing of the pipeline.
pub const REASM_REFUSAL_REASONS: usize = 12;

/// Reassembly counters of one RX lcore, copied from its reassembler after each use (the
/// reassembler's statistics publish themselves here: `pipeline::reasm::ReasmStats::publish`).
#[derive(Debug, Default)]
pub struct ReasmCounters {
    /// Datagrams completed, per family (IPv4, IPv6).
    pub completed: [Counter; 2],
    /// Datagrams timed out, per family.
    pub timeouts: [Counter; 2],
    /// Fragments refused, per family and reason (`pipeline::reasm::Reason::index`).
    pub refused: [[Counter; REASM_REFUSAL_REASONS]; 2],
    /// Bytes held now.
    pub memory: Counter,
}

/// A worker's connection table (`pipeline::conntrack`), counted by the worker alone.
#[derive(Debug, Default)]
pub struct ConntrackCounters {
    /// Packets whose flow had an entry.
    pub hits: Counter,
    /// Packets whose flow had none.
    pub misses: Counter,
    /// Entries inserted.
    pub insertions: Counter,
    /// Live unconfirmed entries replaced by a new flow.
    pub evictions: Counter,
    /// Entries removed after their timeout.
    pub expired: Counter,
    /// New flows not inserted: their bucket held only live confirmed entries.
    pub refused: Counter,
    /// Entries confirmed.
    pub confirmations: Counter,
    /// Entries whose backend was gone or down, re-pinned to the Maglev pick.
    pub repinned: Counter,
    /// Entries in use now (gauge).
    pub entries: Counter,
    /// Of which confirmed (gauge).
    pub confirmed: Counter,
    /// The table's size in entries (gauge).
    pub capacity: Counter,
}

/// Everything one lcore counts.
#[derive(Debug)]
#[repr(align(64))]
pub struct LcoreStats {
    /// The lcore id.
    pub lcore: u32,
    /// Received packets per outcome, indexed by [`Outcome::index`].
    pub outcomes: [Counter; Outcome::COUNT],
    /// The RX queues this lcore polls (it alone writes them).
    pub rx: Box<[QueueCounters]>,
    /// The TX queues this lcore owns.
    pub tx: Box<[QueueCounters]>,
    /// Poll iterations that received nothing.
    pub idle_polls: Counter,
    /// Poll iterations that received at least one packet.
    pub busy_polls: Counter,
    /// TSC cycles spent in iterations that received packets.
    pub busy_cycles: Counter,
    /// TSC cycles of the iterations that received nothing, their idle policy's sleep included:
    /// busy and idle together are the lcore's time since its loop started.
    pub idle_cycles: Counter,
    /// The config generation this lcore runs (it stores it after adopting one).
    pub generation: AtomicU64,
    /// Reassembly (RX lcores).
    pub reasm: ReasmCounters,
    /// The connection table (workers).
    pub conntrack: ConntrackCounters,
    /// The per-packet trace's switch (RX lcores): armed by the control side, read once a burst.
    pub trace: crate::trace::TraceTap,
}

impl LcoreStats {
    /// A zeroed block for `lcore` with the given queues.
    pub fn new(lcore: u32, rx: Vec<QueueCounters>, tx: Vec<QueueCounters>) -> Self {
        LcoreStats {
            lcore,
            outcomes: std::array::from_fn(|_| Counter::default()),
            rx: rx.into_boxed_slice(),
            tx: tx.into_boxed_slice(),
            idle_polls: Counter::default(),
            busy_polls: Counter::default(),
            busy_cycles: Counter::default(),
            idle_cycles: Counter::default(),
            generation: AtomicU64::new(0),
            reasm: ReasmCounters::default(),
            conntrack: ConntrackCounters::default(),
            trace: Default::default(),
        }
    }

    /// Counts one packet's outcome.
    #[inline(always)]
    pub fn outcome(&self, o: Outcome) {
        self.outcomes[o.index()].inc();
    }

    /// Records the generation this lcore switched to.
    pub fn set_generation(&self, g: u64) {
        self.generation.store(g, Relaxed);
    }

    /// The generation this lcore runs.
    pub fn generation(&self) -> u64 {
        self.generation.load(Relaxed)
    }

    /// Counts `n` packets with the same outcome at once (a whole burst).
    #[inline(always)]
    pub fn outcomes_add(&self, o: Outcome, n: u64) {
        self.outcomes[o.index()].add(n);
    }

    /// The lcore's heartbeat: its poll iterations so far. Every lcore loop (RX, forward,
    /// worker) counts each iteration in `idle_polls` or `busy_polls` (one relaxed store by the
    /// lcore itself, once per poll, never per packet), so the heartbeat costs the data path
    /// nothing of its own; the control thread reads it, and a value that stops moving is an
    /// lcore that stopped polling (an empty loop sleeps at most `idle_sleep_us`, 100 ms, per
    /// poll).
    pub fn heartbeat(&self) -> u64 {
        self.idle_polls.get().wrapping_add(self.busy_polls.get())
    }

    /// Packets this lcore received.
    pub fn rx_packets(&self) -> u64 {
        self.rx.iter().map(|q| q.packets.get()).sum()
    }

    /// Packets this lcore has assigned an outcome to.
    pub fn outcome_packets(&self) -> u64 {
        self.outcomes.iter().map(Counter::get).sum()
    }
}

/// Sums one outcome over all lcores.
pub fn total_outcome(all: &[std::sync::Arc<LcoreStats>], o: Outcome) -> u64 {
    all.iter().map(|s| s.outcomes[o.index()].get()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_sums() {
        let s = LcoreStats::new(3, vec![QueueCounters::new(0, 0), QueueCounters::new(1, 0)], vec![]);
        s.rx[0].packets.add(5);
        s.rx[1].packets.inc();
        s.outcome(Outcome::Malformed);
        s.outcome(Outcome::ArpReply);
        s.outcome(Outcome::ArpReply);
        assert_eq!(s.rx_packets(), 6);
        assert_eq!(s.outcome_packets(), 3);
        assert_eq!(s.outcomes[Outcome::ArpReply.index()].get(), 2);
        assert_eq!(std::mem::align_of::<LcoreStats>(), 64);
    }
}
