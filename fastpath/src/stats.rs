//! Per-lcore counter blocks.
//!
//! Each lcore owns one [`LcoreStats`] and is its only writer; readers (the metrics thread, the
//! stats line, the exit dump) sum the blocks. A [`Counter`] update is a relaxed load and a relaxed
//! store — plain `mov`s on x86, no locked instruction — which is correct only because there is
//! one writer. Blocks are cache-line aligned so lcores never share a written line.
//!
//! The packets an RX lcore has received and the outcomes it has counted are read together
//! ([`LcoreStats::packet_counts`]): the lcore brackets the work between counting a poll's
//! packets received and counting the last of their outcomes in a section ([`LcoreStats::open`],
//! [`LcoreStats::close`]: a sequence number, odd while open, one store each, no locked
//! instruction), and a reader takes the counters only between sections, retrying until the
//! sequence is even and unchanged around its reads (a seqlock with the lcore its only writer).
//! A reader never makes the lcore wait: an lcore always busy may close and reopen faster than a
//! reader on another core can read, so after [`LIVE_TRIES`] failed tries the reader asks for a
//! copy, which the lcore makes at its next close (a relaxed load per close when nobody asks).
//! An lcore that does not close for [`READ_PATIENCE`] (stuck, or descheduled on a busy host)
//! gets the newest consistent read a reader made before: late, but balanced and never going
//! back.

use crate::outcome::Outcome;

/// The `reason` label of `fastpath_lcore_wakeups_total`, by index of [`LcoreStats::wakeups`]:
/// a wake-up fd of an RX queue had input, another lcore rang (a worker's socket filled, a
/// stop), the wait's bound passed.
pub const WAKE_REASONS: [&str; 3] = ["io", "bell", "timeout"];
use std::sync::atomic::{fence, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Reads of the live counters a reader tries before it asks the lcore for a copy (a few µs: an
/// idle or lightly loaded lcore is read at once, a saturated one is asked).
pub const LIVE_TRIES: u32 = 64;

/// How long a reader waits for a fresh consistent read (an lcore stuck inside a section, or
/// descheduled by a busy host for this long) before it returns the newest one any reader made.
pub const READ_PATIENCE: Duration = Duration::from_millis(500);

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

/// Busy polls between two sampled ones ([`OutcomeCost`]): a sampled poll costs ~300
/// instructions more, ~0.15 a packet at 32-packet bursts, within the noise of the instruction
/// counts (docs/operating.md).
pub const COST_SAMPLE_POLLS: u32 = 64;

/// Cycles per packet by outcome, sampled: every [`COST_SAMPLE_POLLS`]th poll that received
/// packets has its cycles (from its start to its packets' last outcome, the driver's receive
/// included) shared among the outcomes its packets took, each in proportion to its packets (a
/// poll of one outcome, the common case under load, is exact; a mixed one gives each its share
/// of the average). `cycles[o] / packets[o]` is outcome `o`'s cost per packet.
#[derive(Debug)]
pub struct OutcomeCost {
    /// Cycles attributed to each outcome ([`Outcome::index`]).
    pub cycles: [Counter; Outcome::COUNT],
    /// Packets of sampled polls, by outcome.
    pub packets: [Counter; Outcome::COUNT],
    /// Polls until the next sample (the owning lcore's alone: relaxed load and store).
    countdown: std::sync::atomic::AtomicU32,
}

impl Default for OutcomeCost {
    fn default() -> Self {
        OutcomeCost {
            cycles: std::array::from_fn(|_| Counter::default()),
            packets: std::array::from_fn(|_| Counter::default()),
            countdown: std::sync::atomic::AtomicU32::new(COST_SAMPLE_POLLS),
        }
    }
}

impl OutcomeCost {
    /// Whether the poll starting now is sampled (owner only; once a poll).
    #[inline(always)]
    pub fn due(&self) -> bool {
        let n = self.countdown.load(Relaxed).saturating_sub(1);
        let due = n == 0;
        self.countdown.store(if due { COST_SAMPLE_POLLS } else { n }, Relaxed);
        due
    }

    /// The sampled poll received nothing: sample the next one instead.
    #[cold]
    pub fn missed(&self) {
        self.countdown.store(1, Relaxed);
    }

    /// The outcome counters now, before a sampled poll.
    #[cold]
    pub fn snapshot(outcomes: &[Counter; Outcome::COUNT]) -> [u64; Outcome::COUNT] {
        std::array::from_fn(|i| outcomes[i].get())
    }

    /// A sampled poll took `cycles`; its packets' outcomes are `outcomes` less `before`.
    #[cold]
    pub fn record(&self, before: &[u64; Outcome::COUNT], outcomes: &[Counter; Outcome::COUNT], cycles: u64) {
        let delta: [u64; Outcome::COUNT] = std::array::from_fn(|i| outcomes[i].get().wrapping_sub(before[i]));
        let n: u64 = delta.iter().sum();
        if n == 0 {
            return;
        }
        for (i, &d) in delta.iter().enumerate().filter(|(_, d)| **d > 0) {
            self.packets[i].add(d);
            self.cycles[i].add((cycles as u128 * d as u128 / n as u128) as u64);
        }
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
    /// Fragments held now: received, their outcome not yet counted (set inside the lcore's
    /// section, so [`LcoreStats::packet_counts`] reads it with the packets and outcomes).
    pub held: Counter,
}

/// A question about one flow to a worker's connection table, from the control socket's thread
/// (`fastpathctl flow`), answered by the worker itself between two polls: the table has one
/// writer and no lock, so nobody else reads it. The asker (one at a time) writes `flow` and
/// `service`, then `asked` (Release); the worker reads `asked` once a poll (Acquire) and, when
/// it is not the last it answered, writes `answer` and `generation`, then `answered` (Release).
/// All atomics: a late answer to an abandoned question is wrong, never undefined behaviour, and
/// the asker only takes the answer whose number is its own.
#[derive(Debug, Default)]
pub struct ConntrackProbe {
    /// The question's number (0: none yet).
    pub asked: AtomicU64,
    /// The flow, client → service: protocol << 32 | client port << 16 | service port; the
    /// client's address (IPv6 or IPv4-mapped) high and low; the service's, the same.
    pub flow: [AtomicU64; 5],
    /// The service's index in the asker's tables.
    pub service: AtomicU64,
    /// The number of the question last answered.
    pub answered: AtomicU64,
    /// The answer ([`ConntrackProbe::FOUND`] and the other bits, the tunnel index in the low 32).
    pub answer: AtomicU64,
    /// The generation of the tables the worker answered with.
    pub generation: AtomicU64,
}

impl ConntrackProbe {
    /// The flow has a live entry.
    pub const FOUND: u64 = 1 << 63;
    /// The entry is confirmed.
    pub const CONFIRMED: u64 = 1 << 62;
    /// Its backend is still a member of the service and up (else its next packet re-pins it).
    pub const KEPT: u64 = 1 << 61;
    /// The worker tracks nothing (`entries = 0`).
    pub const DISABLED: u64 = 1 << 60;

    /// Asks question number `n` (never 0, never reused; one asker at a time) about the flow
    /// `protocol` `client`:`cport` → `server`:`sport` of service `service`.
    pub fn ask(
        &self,
        n: u64,
        protocol: u8,
        client: (std::net::IpAddr, u16),
        server: (std::net::IpAddr, u16),
        service: usize,
    ) {
        let bits = |a: std::net::IpAddr| match a {
            std::net::IpAddr::V4(a) => a.to_ipv6_mapped().to_bits(),
            std::net::IpAddr::V6(a) => a.to_bits(),
        };
        let (c, s) = (bits(client.0), bits(server.0));
        let words = [
            (protocol as u64) << 32 | (client.1 as u64) << 16 | server.1 as u64,
            (c >> 64) as u64,
            c as u64,
            (s >> 64) as u64,
            s as u64,
        ];
        for (w, v) in self.flow.iter().zip(words) {
            w.store(v, Relaxed);
        }
        self.service.store(service as u64, Relaxed);
        self.asked.store(n, Release);
    }

    /// The answer to question `n` once the worker gave it: (answer, generation).
    pub fn answer_to(&self, n: u64) -> Option<(u64, u64)> {
        if self.answered.load(Acquire) != n {
            return None;
        }
        let got = (self.answer.load(Relaxed), self.generation.load(Relaxed));
        fence(Acquire);
        (self.answered.load(Relaxed) == n).then_some(got)
    }
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
    /// Sampled cost by outcome (RX lcores): [`OutcomeCost`].
    pub cost: OutcomeCost,
    /// Times an idle loop blocked and woke, by why ([`WAKE_REASONS`] order: `io`, `bell`,
    /// `timeout`).
    pub wakeups: [Counter; 3],
    /// The config generation this lcore runs (it stores it after adopting one).
    pub generation: AtomicU64,
    /// Reassembly (RX lcores).
    pub reasm: ReasmCounters,
    /// The connection table (workers).
    pub conntrack: ConntrackCounters,
    /// Questions to the connection table (workers): `fastpathctl flow`.
    pub conntrack_probe: ConntrackProbe,
    /// The per-packet trace's switch (RX lcores): armed by the control side, read once a burst.
    pub trace: crate::trace::TraceTap,
    /// The section's sequence number: odd while packets counted received may lack their
    /// outcome (module docs).
    seq: AtomicU64,
    /// A copy of `rx`'s packets and `outcomes` made at a close, for a reader that asked.
    copy: PacketCopy,
    /// Readers' requests for a copy (on a line of its own: readers write it).
    asked: Asked,
    /// The newest consistent read a reader made, for a reader that gets none within
    /// [`READ_PATIENCE`]. Readers only (the metrics and control threads): the lcore never
    /// touches it.
    last: Mutex<Option<PacketCounts>>,
}

/// Readers' requests for a copy: the number of the last one.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Asked(AtomicU64);

/// A copy of an lcore's packet counters, written by the lcore only.
#[derive(Debug)]
struct PacketCopy {
    /// Odd while the lcore writes the copy.
    seq: AtomicU64,
    /// The request ([`Asked`]) the copy answers, or a later one.
    served: AtomicU64,
    rx: Box<[Counter]>,
    outcomes: [Counter; Outcome::COUNT],
    held: Counter,
    /// The lcore's section sequence when it copied.
    at: Counter,
}

/// An RX lcore's packets received per RX queue, outcomes counted and fragments held, read at one
/// moment between sections ([`LcoreStats::packet_counts`]): the packets received are the
/// outcomes plus the fragments held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketCounts {
    /// Packets per RX queue, in the order of [`LcoreStats::rx`].
    pub rx: Vec<u64>,
    /// Packets per outcome, indexed by [`Outcome::index`].
    pub outcomes: [u64; Outcome::COUNT],
    /// Fragments held for reassembly ([`ReasmCounters::held`]).
    pub held: u64,
    /// The lcore's section sequence number the read was taken at (even): one lcore's reads
    /// are ordered by it.
    pub at: u64,
    /// No fresh consistent read came within [`READ_PATIENCE`]: this is the newest one a reader
    /// made before (balanced, not moving backwards, late).
    pub stale: bool,
    /// Whether the counters balance: false only when no consistent read was ever made of an
    /// lcore stuck in a section (taken as they were).
    pub consistent: bool,
}

impl PacketCounts {
    /// Packets received.
    pub fn rx_packets(&self) -> u64 {
        self.rx.iter().sum()
    }

    /// Packets with an outcome.
    pub fn outcome_packets(&self) -> u64 {
        self.outcomes.iter().sum()
    }
}

/// Sequence-checked reads (the reader's half of the seqlock): `read` fills `out` from relaxed
/// loads; the sequence number if it was even before and unchanged after them.
fn read_between(seq: &AtomicU64, read: impl FnOnce()) -> Option<u64> {
    let s = seq.load(Acquire);
    if s & 1 == 1 {
        return None;
    }
    read();
    // Orders the reads before the second load: a read that saw a store made after an open
    // makes this load see that open (the writer's release fence after it).
    fence(Acquire);
    (seq.load(Relaxed) == s).then_some(s)
}

/// Opens a section on `seq` (its only writer): odd, then the counters' stores.
#[inline(always)]
fn seq_open(seq: &AtomicU64) {
    seq.store(seq.load(Relaxed).wrapping_add(1), Relaxed);
    // Orders the odd number before the section's stores (a compiler fence on x86).
    fence(Release);
}

/// Closes a section on `seq`: even, after the counters' stores.
#[inline(always)]
fn seq_close(seq: &AtomicU64) {
    seq.store(seq.load(Relaxed).wrapping_add(1), Release);
}

impl LcoreStats {
    /// A zeroed block for `lcore` with the given queues.
    pub fn new(lcore: u32, rx: Vec<QueueCounters>, tx: Vec<QueueCounters>) -> Self {
        let rx_len = rx.len();
        LcoreStats {
            lcore,
            outcomes: std::array::from_fn(|_| Counter::default()),
            rx: rx.into_boxed_slice(),
            tx: tx.into_boxed_slice(),
            idle_polls: Counter::default(),
            wakeups: Default::default(),
            busy_polls: Counter::default(),
            busy_cycles: Counter::default(),
            idle_cycles: Counter::default(),
            cost: OutcomeCost::default(),
            generation: AtomicU64::new(0),
            reasm: ReasmCounters::default(),
            conntrack: ConntrackCounters::default(),
            conntrack_probe: ConntrackProbe::default(),
            trace: Default::default(),
            seq: AtomicU64::new(0),
            copy: PacketCopy {
                seq: AtomicU64::new(0),
                served: AtomicU64::new(0),
                rx: (0..rx_len).map(|_| Counter::default()).collect(),
                outcomes: std::array::from_fn(|_| Counter::default()),
                held: Counter::default(),
                at: Counter::default(),
            },
            asked: Asked::default(),
            last: Mutex::new(None),
        }
    }

    /// Opens a section (owner only; not while one is open): until [`LcoreStats::close`], the
    /// packets counted received may lack their outcome. One store (and the section's order, a
    /// compiler fence on x86); once per poll, never per packet.
    #[inline(always)]
    pub fn open(&self) {
        seq_open(&self.seq);
    }

    /// Closes the open section: every packet counted received has its outcome (or is held, a
    /// fragment). One store, and a relaxed load of the readers' requests; the copy a reader
    /// asked for, if one did.
    #[inline(always)]
    pub fn close(&self) {
        seq_close(&self.seq);
        let asked = self.asked.0.load(Relaxed);
        if asked != self.copy.served.load(Relaxed) {
            self.serve(asked);
        }
    }

    /// Copies the packet counters for the readers that asked up to request `asked`.
    #[cold]
    #[inline(never)]
    fn serve(&self, asked: u64) {
        let c = &self.copy;
        seq_open(&c.seq);
        for (to, q) in c.rx.iter().zip(self.rx.iter()) {
            to.set(q.packets.get());
        }
        for (to, o) in c.outcomes.iter().zip(&self.outcomes) {
            to.set(o.get());
        }
        c.held.set(self.reasm.held.get());
        c.at.set(self.seq.load(Relaxed));
        seq_close(&c.seq);
        c.served.store(asked, Release);
    }

    /// The packets received per RX queue, the outcomes counted and the fragments held, read
    /// between sections, so that they balance; any thread, never making the lcore wait.
    /// A reader that gets no fresh read within [`READ_PATIENCE`] returns the newest a reader
    /// made before ([`PacketCounts::stale`]).
    pub fn packet_counts(&self) -> PacketCounts {
        let mut out = PacketCounts {
            rx: vec![0; self.rx.len()],
            outcomes: [0; Outcome::COUNT],
            held: 0,
            at: 0,
            stale: false,
            consistent: true,
        };
        if self.read_fresh(&mut out) {
            let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            if last.as_ref().is_none_or(|l| l.at < out.at) {
                *last = Some(out.clone());
            }
            return out;
        }
        if let Some(l) = self.last.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            return PacketCounts {
                stale: true,
                ..l.clone()
            };
        }
        self.fill_live(&mut out);
        out.consistent = false;
        out
    }

    /// Tries the live counters, then asks for a copy and waits for it (or for a live read) up
    /// to [`READ_PATIENCE`].
    fn read_fresh(&self, out: &mut PacketCounts) -> bool {
        for _ in 0..LIVE_TRIES {
            if self.read_live(out) {
                return true;
            }
            std::hint::spin_loop();
        }
        let ticket = self.asked.0.fetch_add(1, Relaxed).wrapping_add(1);
        let deadline = Instant::now() + READ_PATIENCE;
        loop {
            if self.copy.served.load(Acquire) >= ticket && self.read_copy(out) {
                return true;
            }
            if self.read_live(out) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::yield_now();
        }
    }

    /// One try at reading the live counters between sections.
    fn read_live(&self, out: &mut PacketCounts) -> bool {
        let at = read_between(&self.seq, || self.fill_live(out));
        out.at = at.unwrap_or(0);
        at.is_some()
    }

    /// The live counters as they are.
    fn fill_live(&self, out: &mut PacketCounts) {
        for (to, q) in out.rx.iter_mut().zip(self.rx.iter()) {
            *to = q.packets.get();
        }
        for (to, o) in out.outcomes.iter_mut().zip(&self.outcomes) {
            *to = o.get();
        }
        out.held = self.reasm.held.get();
    }

    /// One try at reading the lcore's last copy.
    fn read_copy(&self, out: &mut PacketCounts) -> bool {
        let c = &self.copy;
        read_between(&c.seq, || {
            for (to, q) in out.rx.iter_mut().zip(c.rx.iter()) {
                *to = q.get();
            }
            for (to, o) in out.outcomes.iter_mut().zip(&c.outcomes) {
                *to = o.get();
            }
            out.held = c.held.get();
            out.at = c.at.get();
        })
        .is_some()
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
    fn one_poll_in_the_sample_period_is_timed_and_its_cycles_shared_by_outcome() {
        let s = LcoreStats::new(0, vec![], vec![]);
        let due: Vec<bool> = (0..3 * COST_SAMPLE_POLLS).map(|_| s.cost.due()).collect();
        assert_eq!(due.iter().filter(|d| **d).count(), 3);
        assert!(due[COST_SAMPLE_POLLS as usize - 1] && !due[0]);
        // A sampled poll that received nothing passes the sample to the next poll.
        s.cost.missed();
        assert!(s.cost.due());
        // A poll of 30 delivered and 10 closed-port packets that took 4,000 cycles: 3,000 and 1,000.
        let before = OutcomeCost::snapshot(&s.outcomes);
        s.outcomes[Outcome::Delivered.index()].add(30);
        s.outcomes[Outcome::IcmpError.index()].add(10);
        s.cost.record(&before, &s.outcomes, 4000);
        let at = |o: Outcome| (s.cost.cycles[o.index()].get(), s.cost.packets[o.index()].get());
        assert_eq!(at(Outcome::Delivered), (3000, 30));
        assert_eq!(at(Outcome::IcmpError), (1000, 10));
        assert_eq!(at(Outcome::Malformed), (0, 0));
        // A poll whose packets have no outcome yet records nothing.
        s.cost.record(&OutcomeCost::snapshot(&s.outcomes), &s.outcomes, 500);
        assert_eq!(at(Outcome::Delivered), (3000, 30));
    }

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
        assert_eq!(s.packet_counts().rx, vec![5, 1]);
        assert_eq!(s.packet_counts().outcome_packets(), 3);
    }

    /// A writer that counts bursts as an RX lcore does (received first, each packet's outcome
    /// after, spread over outcomes and queues, some held as fragments and released in a later
    /// burst), with `gap` spins between its sections, against a reader on another thread: every
    /// read balances (received = outcomes + held), and is consistent. Returns the reads and the
    /// copies the writer made.
    fn hammer(gap: u32, reads: usize) -> (usize, u64) {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        let s = Arc::new(LcoreStats::new(
            1,
            vec![QueueCounters::new(0, 0), QueueCounters::new(1, 0)],
            vec![],
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (s, stop) = (s.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                let mut held = 0u64;
                while !stop.load(Relaxed) {
                    n = n.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let burst = 1 + (n >> 59); // 1 to 32
                    s.open();
                    s.rx[(n >> 20) as usize & 1].packets.add(burst);
                    for i in 0..burst {
                        // Work between the counts, as the pipeline's.
                        for _ in 0..(n >> 30) & 7 {
                            std::hint::spin_loop();
                        }
                        if (n >> (i % 32)) & 7 == 0 {
                            held += 1;
                            continue;
                        }
                        s.outcome(Outcome::ALL[((n >> 8) as usize + i as usize) % Outcome::COUNT]);
                    }
                    let released = held.min((n >> 40) & 3);
                    s.outcomes_add(Outcome::ReassemblyTimeout, released);
                    held -= released;
                    s.reasm.held.set(held);
                    s.close();
                    for _ in 0..gap {
                        std::hint::spin_loop();
                    }
                }
            })
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while s.rx_packets() == 0 && Instant::now() < deadline {
            std::thread::yield_now();
        }
        let mut last = 0;
        let mut took = 0;
        while took < reads && Instant::now() < deadline {
            let c = s.packet_counts();
            assert!(c.consistent, "read {took}: no consistent read");
            assert_eq!(c.rx_packets(), c.outcome_packets() + c.held, "read {took}: {c:?}");
            assert!(c.rx_packets() >= last, "read {took} went back");
            last = c.rx_packets();
            took += 1;
        }
        stop.store(true, Relaxed);
        writer.join().unwrap();
        assert_eq!(took, reads, "reads in 60 s");
        assert!(last > 0, "the writer never ran");
        (took, s.copy.served.load(Relaxed))
    }

    #[test]
    fn every_read_balances_against_a_writer_with_pauses() {
        hammer(2000, 20_000);
    }

    #[test]
    fn every_read_balances_against_a_writer_that_never_pauses() {
        // Back-to-back sections: the live reads mostly lose the race, and the copies answer.
        let (_, copies) = hammer(0, 2_000);
        assert!(copies > 0, "no copy was asked for: the test does not cover the copy");
    }

    #[test]
    fn a_reader_gives_up_on_a_section_that_never_closes() {
        let s = LcoreStats::new(1, vec![QueueCounters::new(0, 0)], vec![]);
        s.open();
        s.rx[0].packets.add(3);
        // Never read before: the counters as they are, said to be so.
        let t = Instant::now();
        let c = s.packet_counts();
        assert!(!c.consistent);
        assert_eq!(c.rx, vec![3]);
        assert!(t.elapsed() >= READ_PATIENCE);
        s.outcomes_add(Outcome::Malformed, 3);
        s.close();
        // The close answered the reader's request with a copy; a reader now takes the live
        // counters, balanced.
        assert_eq!(s.copy.served.load(Relaxed), 1);
        let fresh = s.packet_counts();
        assert!(fresh.consistent && !fresh.stale);
        assert_eq!((fresh.rx_packets(), fresh.outcome_packets()), (3, 3));
        // Stuck again: the newest consistent read, late but balanced and not going back.
        s.open();
        s.rx[0].packets.add(5);
        let c = s.packet_counts();
        assert!(c.consistent && c.stale);
        assert_eq!(PacketCounts { stale: false, ..c }, fresh);
        s.outcomes_add(Outcome::Malformed, 5);
        s.close();
        let c = s.packet_counts();
        assert!(!c.stale && c.at > fresh.at);
        assert_eq!((c.rx_packets(), c.outcome_packets()), (8, 8));
    }
}
