//! IPv4 and IPv6 reassembly that survives fragment floods.
//!
//! One [`Reassembler`] per RX lcore (every fragment of a datagram hashes to the same lcore: the
//! flow hash of fragments is the 2-tuple, see [`crate::pipeline::Parsed::parse_ip`]). It holds
//! the received fragment buffers themselves and copies nothing until a datagram is complete;
//! then it copies the datagram into **one** buffer obtained from the caller ([`ReasmIo::alloc`]),
//! so later stages see an ordinary single-segment packet.
//!
//! # Table
//! Fixed slots (`max_datagrams`), each with room for `max_fragments` buffers, allocated once:
//! nothing is allocated per packet except the completion buffer. Datagrams are found through a
//! keyed-hash open-addressing index, their sources through a second one (per-source counts and
//! a list of each source's datagrams), and their deadlines sit in a min-heap.
//!
//! # Memory
//! Usage counts a fixed `buffer_truesize` per held buffer, whatever the frame length: a held
//! fragment pins a whole mempool element (data room plus the mbuf header, 2176 + 128 bytes in
//! the daemon), so a flood of 60-byte fragments drains the pool exactly as fast as one of
//! 1500-byte fragments; charging frame length would undercount it 25 times. The slot table
//! itself is preallocated and not charged.
//!
//! # Policies
//! [`Policy::Probation`] (the default) and [`Policy::Linux`], chosen by
//! `[reassembly] policy` and switchable by a reload (both keep the same queues).
//!
//! # The probation policy
//! The `linux` rule keeps up with a flood spread over the timeout, not with one at line rate: once
//! the flood fills `high_thresh` every new datagram is refused until something times out, so a
//! flood of first fragments a few times the table, replayed at line rate, or FragmentSmack
//! (CVE-2018-5391), starves every legitimate datagram (in the simulation and in `ci/bench`:
//! benches/NOTES.md, "The stages' own results"; Linux and DPDK's `rte_ip_frag` behave the same
//! way). The probation policy never refuses a new datagram for memory; it makes room, in the way
//! S3-FIFO (Yang et al., SOSP 2023) treats one-hit wonders:
//! - a new datagram enters a **probation** FIFO; its second fragment moves it to the tail of the
//!   **main** FIFO;
//! - before any fragment is held, datagrams are evicted (reason `evicted`; `table_full` when
//!   only a slot is short) until one more buffer fits under `high_thresh`: probation's oldest,
//!   unless main's oldest has been in main more than four times as long as probation's oldest
//!   has waited, ages counted in fragments arrived since (`make_room`);
//! - the timeout is fixed (`timeout_ms`): eviction, not shorter lifetimes, answers pressure.
//!
//! So memory never passes `high_thresh`, and a datagram completes if its second fragment
//! follows its first within the time the table takes to turn over under the flood, and it
//! completes within four times that. A legitimate sender emits its fragments together (a 10 Gb/s
//! sender's 1500-byte fragments are 1.2 µs apart), so that holds unless the flood is faster than
//! the table is deep: a first-fragment flood at R per second gives `high_thresh / truesize / R`
//! (1820 buffers at 10 Mpps: 182 µs). A flood of first fragments only churns probation and never
//! touches a datagram in progress; an attacker must send two fragments per datagram to churn
//! main. Progress buys no time in main: FragmentSmack's datagrams get fragment after fragment and
//! never complete, so they age out however often they are fed.
//!
//! # The `linux` rule (from the review of Linux's "ip: re-introduce fragments cache worker")
//! No garbage-collection worker: a **new** datagram is refused while usage is above
//! `high_thresh` (reason `memory`), and each new datagram's lifetime is
//! `timeout × (high_thresh − usage) / high_thresh`, usage taken when it is created, so under
//! pressure incomplete datagrams die young and the table keeps turning over. Fragments of
//! datagrams already in the table are still accepted above the threshold, up to
//! `high_thresh + max_fragments × buffer_truesize` ([`Reassembler::memory_limit`]): a datagram in
//! progress can finish, and usage never exceeds the threshold by more than one datagram. A
//! fragment refused at that hard limit takes its datagram with it (it could never complete).
//!
//! Expiry runs on the owning lcore: [`Reassembler::expire`] pops expired datagrams off the heap,
//! at most `budget` per call. A fragment for a datagram whose deadline has passed but that
//! `expire` has not reached yet finds it expired (it is timed out first), so behaviour does not
//! depend on how often `expire` runs.
//!
//! # Limits and rules, in the order they are checked
//! 1. `tiny`: a fragment with no data, or a non-last fragment whose data is not a multiple of 8
//!    octets (RFC 791 §3.2 fragments on 8-octet boundaries; RFC 8200 §4.5: "If the length of a
//!    fragment ... is not a multiple of 8 octets and the M flag of that fragment is 1, then that
//!    fragment must be discarded"). The fragment alone is dropped.
//! 2. `too_big`: the fragment would make the reassembled length field exceed 65535 (IPv4 total
//!    length, RFC 791; IPv6 payload length, RFC 8200 §4.5: "that fragment must be discarded").
//!    IPv6 jumbograms (RFC 2675) cannot be fragmented and are not supported. The fragment alone
//!    is dropped. For IPv4 the check is repeated at completion with the first fragment's header
//!    length, which later fragments may not carry in full.
//! 3. `incomplete_chain`: an IPv6 first fragment without the whole header chain, upper-layer
//!    header included (RFC 7112 §5, RFC 8200 §4.5: "that fragment should be discarded"). The
//!    fragment alone is dropped.
//! 4. For a datagram in the table:
//!    - `duplicate`: same offset, length, M flag and bytes as a held fragment. RFC 8200 §4.5 lets
//!      an implementation "drop exact duplicate fragments while keeping the other fragments
//!      belonging to the same packet" instead of treating them as overlaps: we do (the fragment
//!      alone is dropped), and a same-range fragment whose bytes or M flag differ is an overlap;
//!    - `overlap`: overlapping any held fragment drops the whole datagram, RFC 5722 §4 ("the
//!      entire datagram (and any constituent fragments, including those not yet received) MUST
//!      be silently discarded") and RFC 8200 §4.5; IPv4 follows the same policy (RFC 1858 §4's
//!      overlapping-fragment attack has no legitimate use);
//!    - `inconsistent`: a last fragment (M clear) fixes the length; a second last fragment with
//!      another end, a held fragment beyond it, or a later fragment ending at or past it drops
//!      the whole datagram;
//!    - `too_many_fragments`: one fragment more than `max_fragments` drops the whole datagram;
//!    - `memory`: over the hard limit, see above (whole datagram); under `probation`, when no
//!      other datagram can be evicted to make room below `high_thresh`.
//! 5. For a new datagram:
//!    - `memory`: usage above `high_thresh`: the fragment is refused (`linux`; `probation`
//!      evicts instead, see above, and refuses only if eight evictions did not make room);
//!    - `per_source`: its source already has `max_per_source` datagrams: one of **that source's**
//!      datagrams, chosen at random with the caller's generator, is evicted to make room (a
//!      source over its share only ever displaces itself);
//!    - `table_full`: no free slot: under `linux` the datagram with the earliest deadline is
//!      evicted (the one that would die first anyway; under pressure that is the youngest-dying
//!      flood entry), under `probation` the victim above.
//!      With the defaults memory binds first (4 MiB / 2304 = 1820 datagrams < 2048 slots); size
//!      `max_datagrams` above `high_thresh / buffer_truesize` to keep it that way.
//! 6. At completion: `too_big` (IPv4, above) or `no_buffer` when `alloc` fails; whole datagram.
//!
//! # Outcome accounting
//! Every fragment given to [`Reassembler::insert`] ends in exactly one place:
//! - still held ([`Reassembler::held_fragments`]);
//! - handed back through [`ReasmIo::release`] with a [`Fate`]: `Reassembled`, `Refused(reason)`,
//!   `TimedOut` or `Drained` each count one outcome for that fragment; `Absorbed` is the
//!   fragment that completed a datagram and counts nothing, because
//! - the datagram returned in [`Insert::Complete`] carries that fragment's outcome (whatever
//!   the pipeline then does with the datagram).
//!
//! So `fragments inserted == counted releases + completions + held_fragments()` at every
//! point, which the tests check; [`Insert`] repeats the counts for the fragment just inserted.

mod fragment;
mod index;
mod meta;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod sim;
#[cfg(test)]
mod tests;

pub use fragment::{fragment_v4, fragment_v6, FragError};
pub use meta::{FragKey, FragMeta};

use crate::buf::PacketBuf;
use crate::pipeline::verdict::Instant;
use crate::stats::{ReasmCounters, REASM_REFUSAL_REASONS};
use crate::wire::checksum;
use index::{DeadlineHeap, HeapSlots, Index};
use std::net::IpAddr;

/// Largest value of the IPv4 total length and IPv6 payload length fields.
pub const MAX_LEN_FIELD: u32 = 65535;
/// Default `high_thresh_bytes` (the kernel's `ipfrag_high_thresh`).
pub const DEFAULT_HIGH_THRESH: usize = 4 << 20;
/// Default timeout (the kernel's `ipfrag_time`; RFC 8200 §4.5 allows up to 60 s).
pub const DEFAULT_TIMEOUT_NS: u64 = 30_000_000_000;
/// Default bytes charged per held buffer: the daemon's mbuf data room (2048 + 128 headroom)
/// plus the 128-byte `struct rte_mbuf`.
pub const DEFAULT_TRUESIZE: usize = 2048 + 128 + 128;

crate::label_set! {
    /// Address family, the `family` label.
    pub enum Family {
        /// IPv4.
        V4 => "ipv4",
        /// IPv6.
        V6 => "ipv6",
    }
}

crate::label_set! {
    /// Why fragments were refused or dropped: the `reason` label of
    /// `fastpath_reasm_refused_total{family,reason}`. See the module doc for each rule.
    pub enum Reason {
        /// New datagram while usage is above `high_thresh`, or a fragment past the hard limit.
        Memory => "memory",
        /// Evicted: its source had `max_per_source` datagrams and started another.
        PerSource => "per_source",
        /// Evicted: no free slot for a new datagram.
        TableFull => "table_full",
        /// More than `max_fragments` fragments.
        TooManyFragments => "too_many_fragments",
        /// The reassembled length field would exceed 65535.
        TooBig => "too_big",
        /// Overlapping fragments (RFC 5722).
        Overlap => "overlap",
        /// Contradicting last fragments, or data past the last fragment's end.
        Inconsistent => "inconsistent",
        /// An exact duplicate of a held fragment (dropped alone).
        Duplicate => "duplicate",
        /// No data, or a non-last fragment whose data is not a multiple of 8 octets.
        Tiny => "tiny",
        /// An IPv6 first fragment without the whole header chain (RFC 7112).
        IncompleteChain => "incomplete_chain",
        /// The completion buffer could not be allocated.
        NoBuffer => "no_buffer",
        /// Evicted by the `probation` policy to make room below `high_thresh` for a newer fragment.
        Evicted => "evicted",
    }
}

/// What became of a fragment buffer handed back through [`ReasmIo::release`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Held, then its datagram completed: outcome `reassembled`.
    Reassembled,
    /// The fragment that completed a datagram: counts **no** outcome, the datagram returned
    /// in [`Insert::Complete`] carries it. Just free the buffer.
    Absorbed,
    /// Refused or dropped with its datagram: outcome `reassembly_refused`.
    Refused(Reason),
    /// Its datagram timed out. `first`: this is the offset-zero fragment, which an ICMP Time
    /// Exceeded code 1 quotes (RFC 792; RFC 1122 §3.3.2; RFC 8200 §4.5 "If the first fragment
    /// ... has been received, an ICMP Time Exceeded -- Fragment Reassembly Time Exceeded message
    /// should be sent to the source of that fragment"). Buffers of one datagram are released
    /// together, the first fragment first.
    TimedOut {
        /// The offset-zero fragment.
        first: bool,
    },
    /// Handed back by [`Reassembler::drain_all`] at a clean stop.
    Drained,
}

impl Fate {
    /// Whether this release counts an outcome for the fragment (all but `Absorbed`).
    pub fn counts_outcome(self) -> bool {
        self != Fate::Absorbed
    }
}

/// A fragment buffer the reassembler gives back.
#[derive(Debug)]
pub struct Released<B> {
    /// The buffer, unmodified.
    pub buf: B,
    /// What happened to it.
    pub fate: Fate,
    /// Its address family.
    pub family: Family,
}

/// What the reassembler needs from the lcore: buffers, a place to return them, randomness.
pub trait ReasmIo<B> {
    /// An empty buffer with at least `len` bytes of tailroom, for a completed datagram.
    fn alloc(&mut self, len: usize) -> Option<B>;
    /// Takes back a fragment buffer (count its outcome per [`Fate::counts_outcome`], free it or,
    /// for a first fragment that timed out, quote it in an ICMP error).
    fn release(&mut self, r: Released<B>);
    /// A random number (the lcore's own generator; used to pick per-source evictions).
    fn random(&mut self) -> u32;
}

/// What [`Reassembler::insert`] did with the fragment.
#[derive(Debug)]
#[must_use]
pub enum Insert<B> {
    /// Kept; its outcome comes later (release or completion).
    Held,
    /// The datagram is complete: here it is in one buffer, link header (VLAN tags included) and
    /// IP header of the first fragment rewritten as an unfragmented datagram. The `fragments -
    /// 1` other fragments were released as [`Fate::Reassembled`]; the inserted one as
    /// [`Fate::Absorbed`], its outcome is the datagram's.
    Complete {
        /// The reassembled datagram.
        datagram: B,
        /// Fragments it was made of.
        fragments: usize,
    },
    /// The fragment was dropped for `reason`, and with it `fragments - 1` held fragments of its
    /// datagram when the rule drops the whole datagram; all were released as
    /// [`Fate::Refused`].
    Dropped {
        /// Why.
        reason: Reason,
        /// Fragments dropped, this one included.
        fragments: usize,
    },
}

crate::label_set! {
    /// How the table makes room under pressure (`[reassembly] policy`, its value the label).
    /// See the module doc.
    #[derive(Default)]
    pub enum Policy {
        /// New datagrams enter a probation FIFO; a second fragment promotes one to the main
        /// FIFO; room below `high_thresh` is made by evicting the oldest datagram of probation
        /// (or of main while probation holds less than its share); the timeout is fixed.
        #[default]
        Probation => "probation",
        /// Refuse new datagrams above `high_thresh`, pressure-scaled timeout.
        Linux => "linux",
    }
}

impl Policy {
    /// The policy a config value names.
    pub fn from_label(s: &str) -> Option<Policy> {
        Policy::ALL.into_iter().find(|p| p.label() == s)
    }
}

/// Reassembly settings of one lcore.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReasmConfig {
    /// How room is made under pressure.
    pub policy: Policy,
    /// Above this usage new datagrams are refused; the timeout scales down towards it.
    pub high_thresh_bytes: usize,
    /// Lifetime of a datagram created with nothing in use, in nanoseconds.
    pub timeout_ns: u64,
    /// Most fragments per datagram.
    pub max_fragments: usize,
    /// Most concurrent datagrams per source address.
    pub max_per_source: usize,
    /// Table slots: most concurrent datagrams.
    pub max_datagrams: usize,
    /// Bytes charged per held buffer.
    pub buffer_truesize: usize,
    /// Scale each new datagram's timeout by free memory, under [`Policy::Linux`] only.
    /// `false` gives every datagram the full timeout, as the kernel did before; kept for the
    /// comparison in the simulation.
    pub pressure_scaled_timeout: bool,
}

impl Default for ReasmConfig {
    fn default() -> Self {
        ReasmConfig {
            policy: Policy::default(),
            high_thresh_bytes: DEFAULT_HIGH_THRESH,
            timeout_ns: DEFAULT_TIMEOUT_NS,
            max_fragments: 64,
            max_per_source: 64,
            max_datagrams: 2048,
            buffer_truesize: DEFAULT_TRUESIZE,
            pressure_scaled_timeout: true,
        }
    }
}

/// Counters of one lcore's reassembler (written by its lcore only).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReasmStats {
    /// Datagrams completed, per family (`fastpath_reasm_completed_total`).
    pub completed: [u64; 2],
    /// Fragments released as `Reassembled` plus the absorbed ones, per family.
    pub reassembled_fragments: [u64; 2],
    /// Datagrams timed out, per family (`fastpath_reasm_timeouts_total`).
    pub timeouts: [u64; 2],
    /// Fragments released as `TimedOut`, per family.
    pub timed_out_fragments: [u64; 2],
    /// Fragments refused or dropped, per family and [`Reason`]
    /// (`fastpath_reasm_refused_total`).
    pub refused: [[u64; Reason::COUNT]; 2],
    /// Fragments released as `Drained`, per family.
    pub drained: [u64; 2],
}

// The lcore's counter block sizes its refusal rows without knowing `Reason`.
const _: () = assert!(Reason::COUNT == REASM_REFUSAL_REASONS);

impl ReasmStats {
    /// Copies these statistics, and `memory` (the bytes held now, [`Reassembler::memory`]), into
    /// the lcore's counter block `to` (owner lcore only).
    pub fn publish(&self, memory: usize, to: &ReasmCounters) {
        for f in 0..2 {
            to.completed[f].set(self.completed[f]);
            to.timeouts[f].set(self.timeouts[f]);
            for (r, c) in to.refused[f].iter().enumerate() {
                c.set(self.refused[f][r]);
            }
        }
        to.memory.set(memory as u64);
    }
}

/// A held fragment.
#[derive(Debug)]
struct Frag<B> {
    buf: B,
    off: u16,
    end: u16,
    more: bool,
    l3: u16,
    data_start: u16,
    header_len: u16,
    next_header_at: u16,
    frag_next_header: u8,
}

impl<B: PacketBuf> Frag<B> {
    fn data(&self) -> &[u8] {
        let s = self.data_start as usize;
        &self.buf.data()[s..s + (self.end - self.off) as usize]
    }
}

const NIL: u32 = u32::MAX;

/// One datagram's slot.
#[derive(Debug)]
struct Slot<B> {
    key: Option<FragKey>,
    /// Held fragments sorted by offset, never overlapping; capacity `max_fragments`.
    frags: Vec<Frag<B>>,
    /// The datagram's data length, once the last fragment arrived.
    total: Option<u32>,
    /// Data bytes held.
    received: u32,
    deadline: u64,
    heap_pos: u32,
    src_prev: u32,
    src_next: u32,
    /// Dropped for overlapping fragments: kept, empty, until its deadline so that the fragments
    /// "not yet received" are discarded too (RFC 5722 §4) instead of starting a new datagram.
    dead: bool,
    /// When it entered its queue, in fragments inserted ([`Reassembler::insert`] counts them):
    /// its creation in probation, its second fragment in main.
    since: u64,
    /// The queue it is in, and its neighbours there (older, newer).
    queue: Queue,
    q_older: u32,
    q_newer: u32,
}

/// The two FIFOs of the probation policy, oldest first (kept under both policies, so a reload may
/// switch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Queue {
    /// Not in use.
    None,
    /// One fragment so far.
    Probation,
    /// Two or more.
    Main,
}

/// A FIFO threaded through the slots: oldest at `head`, newest at `tail`.
#[derive(Clone, Copy, Debug)]
struct Fifo {
    head: u32,
    tail: u32,
    len: u32,
}

impl Fifo {
    const EMPTY: Fifo = Fifo {
        head: NIL,
        tail: NIL,
        len: 0,
    };
}

/// A source's datagrams: how many, and the head of their list through the slots.
#[derive(Clone, Copy, Debug)]
struct SourceList {
    count: u32,
    head: u32,
}

struct Slots<'a, B>(&'a mut [Slot<B>]);

impl<B> HeapSlots for Slots<'_, B> {
    fn deadline(&self, s: u32) -> u64 {
        self.0[s as usize].deadline
    }
    fn set_pos(&mut self, s: u32, p: u32) {
        self.0[s as usize].heap_pos = p;
    }
    fn pos(&self, s: u32) -> u32 {
        self.0[s as usize].heap_pos
    }
}

/// One RX lcore's reassembly table. See the module doc.
pub struct Reassembler<B> {
    cfg: ReasmConfig,
    slots: Box<[Slot<B>]>,
    free: Vec<u32>,
    index: Index<FragKey, u32>,
    sources: Index<IpAddr, SourceList>,
    heap: DeadlineHeap,
    probation: Fifo,
    main: Fifo,
    memory: usize,
    held: usize,
    /// Fragments inserted so far: the probation policy's clock. Ages are counted in arrivals,
    /// not nanoseconds: the RX engine gives a whole burst one `now`, so a probation turned over
    /// within a burst would have waited "0 ns" and make any datagram in main look stale.
    arrivals: u64,
    stats: ReasmStats,
}

impl<B: PacketBuf> Reassembler<B> {
    /// A table for `cfg` (values below 1 are raised to 1). Allocates every slot now.
    pub fn new(cfg: ReasmConfig) -> Self {
        let mut cfg = cfg;
        cfg.max_datagrams = cfg.max_datagrams.clamp(1, u32::MAX as usize - 1);
        cfg.max_fragments = cfg.max_fragments.max(1);
        cfg.max_per_source = cfg.max_per_source.max(1);
        cfg.high_thresh_bytes = cfg.high_thresh_bytes.max(1);
        cfg.buffer_truesize = cfg.buffer_truesize.max(1);
        let n = cfg.max_datagrams;
        let slots = (0..n)
            .map(|_| Slot {
                key: None,
                frags: Vec::with_capacity(cfg.max_fragments),
                total: None,
                received: 0,
                deadline: 0,
                heap_pos: 0,
                src_prev: NIL,
                src_next: NIL,
                dead: false,
                since: 0,
                queue: Queue::None,
                q_older: NIL,
                q_newer: NIL,
            })
            .collect();
        Reassembler {
            free: (0..n as u32).rev().collect(),
            index: Index::with_capacity(n),
            sources: Index::with_capacity(n),
            heap: DeadlineHeap::with_capacity(n),
            slots,
            cfg,
            probation: Fifo::EMPTY,
            main: Fifo::EMPTY,
            memory: 0,
            held: 0,
            arrivals: 0,
            stats: ReasmStats::default(),
        }
    }

    /// The settings in use.
    pub fn config(&self) -> &ReasmConfig {
        &self.cfg
    }

    /// Adopts new settings (a config reload). If the table's shape changes (`max_datagrams`
    /// or `max_fragments`) every held fragment is released as `Drained` and the table rebuilt,
    /// off the per-packet path; otherwise the datagrams in progress are kept and the new limits
    /// apply from the next fragment on.
    pub fn reconfigure(&mut self, cfg: ReasmConfig, io: &mut impl ReasmIo<B>) {
        if cfg.max_datagrams != self.cfg.max_datagrams || cfg.max_fragments != self.cfg.max_fragments {
            self.drain_all(io);
            let stats = std::mem::take(&mut self.stats);
            *self = Reassembler::new(cfg);
            self.stats = stats;
        } else {
            let shape = (self.cfg.max_datagrams, self.cfg.max_fragments);
            self.cfg = cfg;
            (self.cfg.max_datagrams, self.cfg.max_fragments) = shape;
            self.cfg.max_per_source = self.cfg.max_per_source.max(1);
            self.cfg.high_thresh_bytes = self.cfg.high_thresh_bytes.max(1);
            self.cfg.buffer_truesize = self.cfg.buffer_truesize.max(1);
        }
    }

    /// Bytes charged for the buffers held now (`fastpath_reasm_memory_bytes`).
    pub fn memory(&self) -> usize {
        self.memory
    }

    /// The most [`Reassembler::memory`] can ever reach: `high_thresh` plus one datagram of
    /// `max_fragments` buffers (under [`Policy::Linux`]; [`Policy::Probation`] stays within
    /// `high_thresh`).
    pub fn memory_limit(&self) -> usize {
        self.cfg.high_thresh_bytes + self.cfg.max_fragments * self.cfg.buffer_truesize
    }

    /// Datagrams in progress.
    pub fn datagrams(&self) -> usize {
        self.index.len()
    }

    /// Fragments held.
    pub fn held_fragments(&self) -> usize {
        self.held
    }

    /// The counters.
    pub fn stats(&self) -> &ReasmStats {
        &self.stats
    }

    /// The deadline of the datagram that expires first, so a caller can skip
    /// [`Reassembler::expire`] until then.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.heap.peek().map(|s| Instant(self.slots[s as usize].deadline))
    }

    /// The lifetime a datagram created now gets (the pressure-scaled heuristic).
    pub fn current_timeout_ns(&self) -> u64 {
        if self.cfg.policy == Policy::Probation || !self.cfg.pressure_scaled_timeout {
            return self.cfg.timeout_ns;
        }
        let h = self.cfg.high_thresh_bytes as u128;
        let free = h.saturating_sub(self.memory as u128);
        (self.cfg.timeout_ns as u128 * free / h) as u64
    }

    /// Takes one received fragment (`meta` read from `pkt` by [`FragMeta::from_frame`]).
    pub fn insert(&mut self, now: Instant, pkt: B, meta: &FragMeta, io: &mut impl ReasmIo<B>) -> Insert<B> {
        self.arrivals += 1;
        let fam = meta.key.family();
        let len = meta.data_len();
        let end = meta.end();
        if len == 0 || (meta.more && !len.is_multiple_of(8)) {
            return self.refuse_one(pkt, fam, Reason::Tiny, io);
        }
        if meta.header_len as u32 + end > MAX_LEN_FIELD {
            return self.refuse_one(pkt, fam, Reason::TooBig, io);
        }
        if meta.offset == 0 && !meta.chain_complete {
            return self.refuse_one(pkt, fam, Reason::IncompleteChain, io);
        }
        let frag = Frag {
            buf: pkt,
            off: meta.offset,
            end: end as u16,
            more: meta.more,
            l3: meta.l3_offset,
            data_start: meta.data_start,
            header_len: meta.header_len,
            next_header_at: meta.next_header_at,
            frag_next_header: meta.frag_next_header,
        };
        let slot = match self.index.get(&meta.key) {
            Some(s) if self.slots[s as usize].deadline <= now.0 => {
                self.time_out(s, io);
                None
            }
            s => s,
        };
        match slot {
            Some(s) if self.slots[s as usize].dead => self.refuse_one(frag.buf, fam, Reason::Overlap, io),
            Some(s) => self.add_to(s, frag, fam, io),
            None => self.create(now, frag, meta.key, io),
        }
    }

    /// Refuses a fragment before it is held, counted as any refusal for `reason` (the engine's
    /// own rules: a fragment it cannot hold in a packet buffer).
    pub fn refuse(&mut self, pkt: B, meta: &FragMeta, reason: Reason, io: &mut impl ReasmIo<B>) -> Insert<B> {
        self.refuse_one(pkt, meta.key.family(), reason, io)
    }

    fn refuse_one(&mut self, buf: B, family: Family, reason: Reason, io: &mut impl ReasmIo<B>) -> Insert<B> {
        self.stats.refused[family.index()][reason.index()] += 1;
        io.release(Released {
            buf,
            fate: Fate::Refused(reason),
            family,
        });
        Insert::Dropped { reason, fragments: 1 }
    }

    /// Drops the datagram in slot `s` and the fragment that condemned it. After an overlap the
    /// slot stays, empty and dead, until its deadline (RFC 5722 §4).
    fn drop_whole(
        &mut self,
        s: u32,
        frag: Frag<B>,
        fam: Family,
        reason: Reason,
        io: &mut impl ReasmIo<B>,
    ) -> Insert<B> {
        let held = if reason == Reason::Overlap {
            self.slots[s as usize].dead = true;
            self.release_frags(s, |_, _| Fate::Refused(reason), io)
        } else {
            self.release_slot(s, |_, _| Fate::Refused(reason), io)
        };
        self.stats.refused[fam.index()][reason.index()] += held as u64;
        let _ = self.refuse_one(frag.buf, fam, reason, io);
        Insert::Dropped {
            reason,
            fragments: held + 1,
        }
    }

    fn add_to(&mut self, s: u32, frag: Frag<B>, fam: Family, io: &mut impl ReasmIo<B>) -> Insert<B> {
        let slot = &self.slots[s as usize];
        let frags = &slot.frags;
        let p = frags.partition_point(|f| f.off < frag.off);
        if let Some(same) = frags.get(p).filter(|f| f.off == frag.off && f.end == frag.end) {
            return if same.more == frag.more && same.data() == frag.data() {
                self.refuse_one(frag.buf, fam, Reason::Duplicate, io)
            } else {
                self.drop_whole(s, frag, fam, Reason::Overlap, io)
            };
        }
        let overlaps = (p > 0 && frags[p - 1].end > frag.off) || frags.get(p).is_some_and(|f| f.off < frag.end);
        if overlaps {
            return self.drop_whole(s, frag, fam, Reason::Overlap, io);
        }
        let max_end = frags.last().map_or(0, |f| f.end);
        let inconsistent = match (frag.more, slot.total) {
            (false, Some(t)) => t != frag.end as u32,
            (false, None) => max_end > frag.end,
            (true, Some(t)) => frag.end as u32 >= t,
            (true, None) => false,
        };
        if inconsistent {
            return self.drop_whole(s, frag, fam, Reason::Inconsistent, io);
        }
        if frags.len() >= self.cfg.max_fragments {
            return self.drop_whole(s, frag, fam, Reason::TooManyFragments, io);
        }
        // A second fragment is progress: out of probation, the newest of main.
        if slot.queue == Queue::Probation {
            self.q_unlink(s);
            self.q_push(s, Queue::Main);
            self.slots[s as usize].since = self.arrivals;
        }
        let room = match self.cfg.policy {
            Policy::Linux => self.memory + self.cfg.buffer_truesize <= self.memory_limit(),
            Policy::Probation => self.make_room(Some(s), false, io),
        };
        if !room {
            return self.drop_whole(s, frag, fam, Reason::Memory, io);
        }
        self.hold(s, p, frag);
        self.maybe_complete(s, p, fam, io)
    }

    fn hold(&mut self, s: u32, at: usize, frag: Frag<B>) {
        let slot = &mut self.slots[s as usize];
        slot.received += (frag.end - frag.off) as u32;
        if !frag.more {
            slot.total = Some(frag.end as u32);
        }
        debug_assert!(slot.frags.len() < slot.frags.capacity(), "never grows");
        slot.frags.insert(at, frag);
        self.memory += self.cfg.buffer_truesize;
        self.held += 1;
    }

    fn create(&mut self, now: Instant, frag: Frag<B>, key: FragKey, io: &mut impl ReasmIo<B>) -> Insert<B> {
        let fam = key.family();
        if self.cfg.policy == Policy::Linux && self.memory > self.cfg.high_thresh_bytes {
            return self.refuse_one(frag.buf, fam, Reason::Memory, io);
        }
        let src = key.src();
        if let Some(list) = self.sources.get(&src) {
            if list.count as usize >= self.cfg.max_per_source {
                // Walk to a random one of this source's datagrams (at most max_per_source steps).
                let mut victim = list.head;
                for _ in 0..io.random() % list.count {
                    victim = self.slots[victim as usize].src_next;
                }
                self.evict(victim, Reason::PerSource, io);
            }
        }
        match self.cfg.policy {
            Policy::Linux if self.free.is_empty() => {
                let victim = self.heap.peek().expect("a full table has deadlines");
                self.evict(victim, Reason::TableFull, io);
            }
            Policy::Linux => {}
            Policy::Probation => {
                if !self.make_room(None, true, io) {
                    return self.refuse_one(frag.buf, fam, Reason::Memory, io);
                }
            }
        }
        // Usage is taken after any eviction: the memory this datagram will actually share.
        let lifetime = self.current_timeout_ns();
        let s = self.free.pop().expect("a slot was freed");
        let slot = &mut self.slots[s as usize];
        slot.key = Some(key);
        slot.total = None;
        slot.received = 0;
        slot.deadline = now.0.saturating_add(lifetime);
        slot.src_prev = NIL;
        slot.dead = false;
        slot.since = self.arrivals;
        self.q_push(s, Queue::Probation);
        let inserted = self.index.insert(key, s);
        debug_assert!(inserted, "the index holds as many keys as there are slots");
        self.heap.push(&mut Slots(&mut self.slots), s);
        match self.sources.get_mut(&src) {
            Some(list) => {
                let old = list.head;
                list.head = s;
                list.count += 1;
                self.slots[s as usize].src_next = old;
                self.slots[old as usize].src_prev = s;
            }
            None => {
                self.slots[s as usize].src_next = NIL;
                let inserted = self.sources.insert(src, SourceList { count: 1, head: s });
                debug_assert!(inserted, "no more sources than slots");
            }
        }
        self.hold(s, 0, frag);
        self.maybe_complete(s, 0, fam, io)
    }

    /// Most evictions one fragment may cause under [`Policy::Probation`]. One is enough but for
    /// RFC 5722 tombstones (a slot, no buffer); past this many the fragment is refused, so the
    /// work per packet stays bounded whatever the table holds.
    const MAX_EVICTIONS: usize = 8;

    /// How many times longer than probation's oldest has waited a datagram may stay in main
    /// before it is the one evicted (see `make_room`).
    const MAIN_GRACE: u64 = 4;

    /// [`Policy::Probation`]: evicts datagrams (never `keep`) until one more buffer fits under
    /// `high_thresh` and, with `slot`, a slot is free. The victim is probation's oldest — one
    /// fragment and nothing since — unless main's oldest has been there more than
    /// [`Self::MAIN_GRACE`] times as long (ages in fragments arrived since). A datagram's second
    /// fragment must come within the arrivals that turn probation over, and it must complete
    /// within four times that: a flood of first fragments turns probation over and never touches a datagram in
    /// progress; FragmentSmack's datagrams, which get fragment after fragment and never
    /// complete, age out of main, however often they are fed (progress buys no time: a
    /// legitimate sender's fragments arrive together and complete young). Returns whether the
    /// room was made.
    fn make_room(&mut self, keep: Option<u32>, slot: bool, io: &mut impl ReasmIo<B>) -> bool {
        for _ in 0..Self::MAX_EVICTIONS {
            let memory_short = self.memory + self.cfg.buffer_truesize > self.cfg.high_thresh_bytes;
            let slot_short = slot && self.free.is_empty();
            if !memory_short && !slot_short {
                return true;
            }
            let p = self.probation.head;
            let mut m = self.main.head;
            if m != NIL && Some(m) == keep {
                m = self.slots[m as usize].q_newer;
            }
            let waited = |x: u32| self.arrivals - self.slots[x as usize].since;
            let victim = match (p, m) {
                (NIL, NIL) => return false,
                (p, NIL) => p,
                (NIL, m) => m,
                (p, m) if waited(m) > waited(p).saturating_mul(Self::MAIN_GRACE) => m,
                (p, _) => p,
            };
            let reason = if memory_short {
                Reason::Evicted
            } else {
                Reason::TableFull
            };
            if self.slots[victim as usize].dead {
                self.release_slot(victim, |_, _| Fate::Drained, io);
            } else {
                self.evict(victim, reason, io);
            }
        }
        let memory_ok = self.memory + self.cfg.buffer_truesize <= self.cfg.high_thresh_bytes;
        memory_ok && !(slot && self.free.is_empty())
    }

    fn fifo(&mut self, q: Queue) -> &mut Fifo {
        match q {
            Queue::Probation => &mut self.probation,
            _ => &mut self.main,
        }
    }

    /// Appends slot `s` (in no FIFO) as the newest of `q`.
    fn q_push(&mut self, s: u32, q: Queue) {
        debug_assert_eq!(self.slots[s as usize].queue, Queue::None);
        let f = *self.fifo(q);
        {
            let slot = &mut self.slots[s as usize];
            slot.queue = q;
            slot.q_older = f.tail;
            slot.q_newer = NIL;
        }
        if f.tail != NIL {
            self.slots[f.tail as usize].q_newer = s;
        }
        let f = self.fifo(q);
        f.tail = s;
        if f.head == NIL {
            f.head = s;
        }
        f.len += 1;
    }

    /// Takes slot `s` out of its FIFO, if in one.
    fn q_unlink(&mut self, s: u32) {
        let (q, older, newer) = {
            let slot = &mut self.slots[s as usize];
            let r = (slot.queue, slot.q_older, slot.q_newer);
            slot.queue = Queue::None;
            slot.q_older = NIL;
            slot.q_newer = NIL;
            r
        };
        if q == Queue::None {
            return;
        }
        if older != NIL {
            self.slots[older as usize].q_newer = newer;
        }
        if newer != NIL {
            self.slots[newer as usize].q_older = older;
        }
        let f = self.fifo(q);
        if f.head == s {
            f.head = newer;
        }
        if f.tail == s {
            f.tail = older;
        }
        f.len -= 1;
    }

    fn evict(&mut self, s: u32, reason: Reason, io: &mut impl ReasmIo<B>) {
        let fam = self.slots[s as usize].key.map_or(Family::V4, |k| k.family());
        let n = self.release_slot(s, |_, _| Fate::Refused(reason), io);
        self.stats.refused[fam.index()][reason.index()] += n as u64;
    }

    fn time_out(&mut self, s: u32, io: &mut impl ReasmIo<B>) {
        if self.slots[s as usize].dead {
            // A tombstone ends quietly: its fragments were counted when it died.
            self.release_slot(s, |_, _| Fate::Drained, io);
            return;
        }
        let fam = self.slots[s as usize].key.map_or(Family::V4, |k| k.family());
        let n = self.release_slot(s, |_, f| Fate::TimedOut { first: f.off == 0 }, io);
        self.stats.timeouts[fam.index()] += 1;
        self.stats.timed_out_fragments[fam.index()] += n as u64;
    }

    /// Releases slot `s`'s fragments with the fate `fate` gives each (by position and fragment),
    /// keeping the slot. Returns how many were released.
    fn release_frags(&mut self, s: u32, fate: impl Fn(usize, &Frag<B>) -> Fate, io: &mut impl ReasmIo<B>) -> usize {
        let slot = &mut self.slots[s as usize];
        let Some(key) = slot.key else {
            return 0;
        };
        let family = key.family();
        let n = slot.frags.len();
        for (i, f) in slot.frags.drain(..).enumerate() {
            let fate = fate(i, &f);
            io.release(Released {
                buf: f.buf,
                fate,
                family,
            });
        }
        slot.total = None;
        slot.received = 0;
        self.memory -= n * self.cfg.buffer_truesize;
        self.held -= n;
        n
    }

    /// Frees slot `s` (releasing its fragments like [`Reassembler::release_frags`]): out of the
    /// index, the heap and its source's list. Returns how many fragments were released.
    fn release_slot(&mut self, s: u32, fate: impl Fn(usize, &Frag<B>) -> Fate, io: &mut impl ReasmIo<B>) -> usize {
        let n = self.release_frags(s, fate, io);
        let Some(key) = self.slots[s as usize].key.take() else {
            return n;
        };
        self.index.remove(&key);
        self.heap.remove(&mut Slots(&mut self.slots), s);
        self.q_unlink(s);
        let src = key.src();
        let (prev, next) = (self.slots[s as usize].src_prev, self.slots[s as usize].src_next);
        if prev != NIL {
            self.slots[prev as usize].src_next = next;
        }
        if next != NIL {
            self.slots[next as usize].src_prev = prev;
        }
        if let Some(list) = self.sources.get_mut(&src) {
            list.count -= 1;
            if list.head == s {
                list.head = next;
            }
            if list.count == 0 {
                self.sources.remove(&src);
            }
        }
        self.slots[s as usize].dead = false;
        self.free.push(s);
        n
    }

    fn maybe_complete(&mut self, s: u32, inserted_at: usize, fam: Family, io: &mut impl ReasmIo<B>) -> Insert<B> {
        let slot = &self.slots[s as usize];
        let Some(total) = slot.total else {
            return Insert::Held;
        };
        if slot.received != total {
            return Insert::Held;
        }
        // No overlaps and `received == total` with every fragment inside [0, total): the
        // fragments tile the datagram, so the first is at offset zero.
        let first = &slot.frags[0];
        debug_assert_eq!(first.off, 0);
        let n = slot.frags.len();
        let (head_len, len_field) = match fam {
            Family::V4 => (first.data_start as usize, first.header_len as u32 + total),
            // The Fragment header (8 bytes before the data) is left out.
            Family::V6 => (first.data_start as usize - 8, first.header_len as u32 + total),
        };
        if len_field > MAX_LEN_FIELD {
            self.release_slot(s, |_, _| Fate::Refused(Reason::TooBig), io);
            self.stats.refused[fam.index()][Reason::TooBig.index()] += n as u64;
            return Insert::Dropped {
                reason: Reason::TooBig,
                fragments: n,
            };
        }
        let out_len = head_len + total as usize;
        let mut out = io.alloc(out_len);
        if let Some(b) = out.as_mut() {
            b.set_reassembled();
        }
        let room = out.as_mut().and_then(|b| b.append(out_len));
        let Some(dst) = room else {
            drop(out);
            self.release_slot(s, |_, _| Fate::Refused(Reason::NoBuffer), io);
            self.stats.refused[fam.index()][Reason::NoBuffer.index()] += n as u64;
            return Insert::Dropped {
                reason: Reason::NoBuffer,
                fragments: n,
            };
        };
        dst[..head_len].copy_from_slice(&first.buf.data()[..head_len]);
        let l3 = first.l3 as usize;
        match fam {
            Family::V4 => {
                let ihl = first.header_len as usize;
                dst[l3 + 2..l3 + 4].copy_from_slice(&(len_field as u16).to_be_bytes());
                // Keep DF and the reserved bit; clear MF and the offset (RFC 791 §3.2).
                let fw = u16::from_be_bytes([dst[l3 + 6], dst[l3 + 7]]) & 0xc000;
                dst[l3 + 6..l3 + 8].copy_from_slice(&fw.to_be_bytes());
                dst[l3 + 10..l3 + 12].copy_from_slice(&[0, 0]);
                let c = checksum::checksum(&dst[l3..l3 + ihl]);
                dst[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
            }
            Family::V6 => {
                // RFC 8200 §4.5: the Next Header of the last per-fragment header is taken from
                // the first fragment's Fragment header, and the Payload Length is recomputed.
                dst[first.next_header_at as usize] = first.frag_next_header;
                dst[l3 + 4..l3 + 6].copy_from_slice(&(len_field as u16).to_be_bytes());
            }
        }
        let mut at = head_len;
        for f in &slot.frags {
            let d = f.data();
            dst[at..at + d.len()].copy_from_slice(d);
            at += d.len();
        }
        debug_assert_eq!(at, out_len);
        // Release: the inserted fragment is absorbed, the others reassembled.
        self.release_slot(
            s,
            |i, _| {
                if i == inserted_at {
                    Fate::Absorbed
                } else {
                    Fate::Reassembled
                }
            },
            io,
        );
        self.stats.completed[fam.index()] += 1;
        self.stats.reassembled_fragments[fam.index()] += n as u64;
        Insert::Complete {
            datagram: out.expect("allocated above"),
            fragments: n,
        }
    }

    /// Times out datagrams whose deadline is at or before `now`, at most `budget` of them (each
    /// releases at most `max_fragments` buffers, so the work per call is bounded). Returns how
    /// many timed out. Call it once per loop iteration.
    pub fn expire(&mut self, now: Instant, budget: usize, io: &mut impl ReasmIo<B>) -> usize {
        let mut done = 0;
        while done < budget {
            match self.heap.peek() {
                Some(s) if self.slots[s as usize].deadline <= now.0 => {
                    self.time_out(s, io);
                    done += 1;
                }
                _ => break,
            }
        }
        done
    }

    /// Releases every held fragment as [`Fate::Drained`] (clean stop, or a table rebuild).
    /// Returns how many.
    pub fn drain_all(&mut self, io: &mut impl ReasmIo<B>) -> usize {
        let mut n = 0;
        while let Some(s) = self.heap.peek() {
            let fam = self.slots[s as usize].key.map_or(Family::V4, |k| k.family());
            let k = self.release_slot(s, |_, _| Fate::Drained, io);
            self.stats.drained[fam.index()] += k as u64;
            n += k;
        }
        debug_assert_eq!(self.held, 0);
        debug_assert_eq!(self.memory, 0);
        self.index.clear();
        self.sources.clear();
        self.heap.clear();
        debug_assert_eq!((self.probation.len, self.main.len), (0, 0));
        n
    }
}
