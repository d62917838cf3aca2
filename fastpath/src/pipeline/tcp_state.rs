//! The TCP state table in front of TCP services (`[[service]] tcp_state = true`, `[tcp_state]`):
//! a segment of a flow the RX lcore has not seen begin is dropped (outcome `tcp_out_of_state`)
//! before any socket sees it, and SYNs are held to a per-source budget.
//!
//! One table per RX lcore: RSS sends every packet of a flow to one RX lcore, so the lcore sees
//! all of a flow's inbound segments and no other lcore writes its table. Only inbound segments
//! are looked at (a tunnel service's answers never come back here; a kernel service's leave on
//! a worker), so the state is the client's side of RFC 9293's machine, coarsely:
//! - a SYN without ACK, once its source's SYN budget admits it, makes a *handshake* entry
//!   recording 24 bits of the client's ISN + 1, into a free, expired or unconfirmed way only;
//! - the client's next segment with ACK (or RST) and sequence number ISN + 1 confirms it
//!   (*established*; RFC 9293 §3.5: the third segment of the handshake); another sequence
//!   number is `bad_handshake`, dropped (the entry stays for the real one);
//! - FIN or RST from the client moves an established entry to the short closing timeout; a new
//!   SYN on a closing tuple starts a new handshake;
//! - any other segment (ACK, RST, data, FIN, SYN+ACK) of a flow without an entry is dropped:
//!   `rst_no_flow` for a RST, `no_flow` otherwise. Nothing is ever answered (a reset would make
//!   us a reflector for the spoofed sources).
//!
//! Admission is the connection table's (`conntrack.rs`, whose buckets, hash and timeouts this
//! reuses): a new entry never takes a live confirmed way, so a SYN or ACK flood of any size
//! cannot evict an established flow. Unlike the worker's table every way may be confirmed, and
//! a bucket holding four live established flows *fails open*: segments of flows it cannot
//! track are admitted and counted `table_full`. An attacker able to complete spoofed
//! handshakes (the ISN is its own, so it can) fills buckets at its SYN budget's rate; refusing
//! then would hand it every new client in those buckets, while admitting gives it nothing it
//! could not already send on its own established tuples.
//!
//! Connections that began before the table existed (a start, a restart, a reload that tracks
//! another service) have no entry: for `learn_s` from the table's first segment (or the
//! adoption that tracks a new service) a mid-stream segment without an entry is admitted
//! (`learned`) and gets an unconfirmed entry, confirmed by a segment at least
//! [`super::conntrack::CONFIRM_AFTER_NS`] after its first (a flood's one-off tuples never are).

use super::conntrack::{self, Conntrack, ConntrackConfig, CLOSING, CONFIRM_AFTER_NS, SYN_BORN, TCP, WAYS};
use super::source_limit::{SourceLimitConfig, SourceTable};
use super::verdict::Instant;
use crate::stats::{ConntrackCounters, Counter};
use crate::wire::TcpFlags;
use std::net::IpAddr;

/// `[tcp_state]` as the RX lcores read it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TcpStateConfig {
    /// Entries per RX lcore (0: no service is tracked, no table).
    pub entries: u32,
    /// Lifetime of a handshake (or learned, unconfirmed) entry, seconds.
    pub handshake_timeout_s: u32,
    /// Idle timeout of an established flow, seconds.
    pub established_timeout_s: u32,
    /// Idle timeout after the client's FIN or RST, seconds.
    pub closing_timeout_s: u32,
    /// The learning window, nanoseconds.
    pub learn_ns: u64,
    /// The per-source SYN budget (its `enabled` false: none).
    pub syn: SourceLimitConfig,
    /// By service index: whether its TCP segments are tracked.
    pub services: Vec<bool>,
    /// The tracked services' names, sorted: one new here restarts the learning window.
    pub tracked: Vec<String>,
}

impl TcpStateConfig {
    /// Whether service `svc`'s segments are tracked.
    #[inline]
    pub fn applies(&self, svc: usize) -> bool {
        self.services.get(svc).copied().unwrap_or(false)
    }

    /// The table's sizes and timeouts in the connection table's terms.
    pub fn table(&self) -> ConntrackConfig {
        ConntrackConfig {
            entries: self.entries,
            tcp_timeout_s: self.established_timeout_s,
            tcp_closing_timeout_s: self.closing_timeout_s,
            udp_timeout_s: self.established_timeout_s,
            unconfirmed_timeout_s: self.handshake_timeout_s,
            icmp_per_sec: 0,
        }
    }
}

crate::label_set! {
    /// Why a segment was dropped, or admitted without an entry's say-so: the `reason` label.
    pub enum Reason {
        /// Dropped: not a SYN, and its flow has no entry.
        NoFlow => "no_flow",
        /// Dropped: a RST, and its flow has no entry.
        RstNoFlow => "rst_no_flow",
        /// Dropped: the handshake's next segment without ACK or RST, or with another sequence
        /// number than the SYN's ISN + 1.
        BadHandshake => "bad_handshake",
        /// Dropped: a SYN over its source's SYN budget (or a newcomer over the newcomers').
        SynOverBudget => "syn_over_budget",
        /// Admitted untracked: its bucket holds only live established flows (fail open).
        TableFull => "table_full",
        /// Admitted and learned: a mid-stream segment in the learning window.
        Learned => "learned",
    }
}

impl Reason {
    /// The first `DROPS` reasons drop the segment (outcome `tcp_out_of_state`).
    pub const DROPS: usize = 4;
}

/// One RX lcore's counts (its own writer).
#[derive(Debug, Default)]
pub struct TcpStateLcoreCounters {
    /// By [`Reason`].
    pub reasons: [Counter; Reason::COUNT],
    /// The table's own (entries, established, insertions, evictions...).
    pub table: ConntrackCounters,
}

/// Every RX lcore's counts (kept across reloads).
#[derive(Debug, Default)]
pub struct TcpStateCounters {
    /// By RX lcore slot.
    pub rx: Box<[TcpStateLcoreCounters]>,
}

impl TcpStateCounters {
    /// Zeroed counters for `rx` RX lcores.
    pub fn new(rx: usize) -> Self {
        TcpStateCounters {
            rx: (0..rx).map(|_| TcpStateLcoreCounters::default()).collect(),
        }
    }

    /// Every lcore's count of `r`.
    pub fn total(&self, r: Reason) -> u64 {
        self.rx.iter().map(|c| c.reasons[r as usize].get()).sum()
    }
}

/// What the table reads of a segment, in the client → service direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Its source.
    pub client: IpAddr,
    /// Its source port.
    pub cport: u16,
    /// Its destination (the service's address).
    pub service: IpAddr,
    /// Its destination port.
    pub sport: u16,
    /// Its flags.
    pub flags: TcpFlags,
    /// Its sequence number.
    pub seq: u32,
}

/// The learning window starts at the next segment.
const LEARN_PENDING: u64 = u64::MAX;
/// 24 bits of the ISN + 1 are kept.
const ISN_MASK: u32 = 0x00ff_ffff;

/// One RX lcore's TCP state (module docs).
#[derive(Clone, Debug)]
pub struct TcpState {
    table: Conntrack,
    syn: SourceTable,
    /// Mid-stream segments are learned until this time (ns; [`LEARN_PENDING`]: not begun).
    learn_until: u64,
    learn_ns: u64,
}

/// The word of a handshake entry whose SYN had sequence number `isn` (the low 16 bits of
/// ISN + 1 in the value field, the next 8 in the top byte).
fn handshake_meta(isn: u32) -> (u16, u64) {
    let next = isn.wrapping_add(1) & ISN_MASK;
    (next as u16, SYN_BORN | TCP | ((next >> 16) as u64) << 8)
}

/// The ISN + 1 a handshake entry's word records.
fn expected_seq(word: u64) -> u32 {
    ((word >> 32) & 0xffff) as u32 | (((word >> 56) & 0xff) as u32) << 16
}

/// A table whose entries in use spread over more lines than this (bytes: beyond a core's L2)
/// has each burst's buckets prefetched: the frame's tuple is read at fixed offsets, a few
/// instructions, where the worker's table needs a parse (benches/NOTES.md, "Prefetching the
/// TCP state table").
pub const PREFETCH_ABOVE: usize = 256 << 10;

impl TcpState {
    /// Whether the entries in use outgrow the caches ([`PREFETCH_ABOVE`]).
    #[inline(always)]
    pub fn outgrows_caches(&self) -> bool {
        self.table.larger_than(PREFETCH_ABOVE)
    }

    /// The bucket a plain Ethernet/IPv4 or IPv6 TCP frame's flow would be judged in (for a
    /// prefetch; never read through). `None` for anything else (VLAN-tagged, IPv4 options, an
    /// extension header, a fragment): those are judged without it.
    #[inline(always)]
    pub fn bucket_of_frame(&self, f: &[u8]) -> Option<*const u8> {
        let (client, service, ports) = match (f.get(12..14)?, f.get(14)?) {
            // TCP, not a fragment (offset 0, no More Fragments).
            ([0x08, 0x00], 0x45) if f.get(23) == Some(&6) && f.get(20)? & 0x3f == 0 && f.get(21) == Some(&0) => {
                let a: [u8; 4] = f.get(26..30)?.try_into().ok()?;
                let b: [u8; 4] = f.get(30..34)?.try_into().ok()?;
                (IpAddr::from(a), IpAddr::from(b), f.get(34..38)?)
            }
            ([0x86, 0xdd], v) if v >> 4 == 6 && f.get(20) == Some(&6) => {
                let a: [u8; 16] = f.get(22..38)?.try_into().ok()?;
                let b: [u8; 16] = f.get(38..54)?.try_into().ok()?;
                (IpAddr::from(a), IpAddr::from(b), f.get(54..58)?)
            }
            _ => return None,
        };
        let cport = u16::from_be_bytes([ports[0], ports[1]]);
        let sport = u16::from_be_bytes([ports[2], ports[3]]);
        Some(self.table.bucket_addr(self.table.key(6, client, cport, service, sport)))
    }

    /// A table sized by `cfg.entries`, its hashes keyed by `seed` (from the OS). All its memory
    /// is taken here.
    pub fn new(cfg: &TcpStateConfig, seed: u64) -> TcpState {
        TcpState {
            table: Conntrack::with_max_confirmed(&cfg.table(), seed, WAYS),
            syn: SourceTable::new(cfg.syn.entries, seed.rotate_left(17) ^ 0x9e37_79b9),
            learn_until: LEARN_PENDING,
            learn_ns: cfg.learn_ns,
        }
    }

    /// Whether this table is the size `cfg` asks for (else a new one is made).
    pub fn fits(&self, cfg: &TcpStateConfig) -> bool {
        let want = (cfg.entries.clamp(conntrack::MIN_ENTRIES, conntrack::MAX_ENTRIES) as usize)
            .div_ceil(WAYS)
            .next_power_of_two()
            * WAYS;
        self.table.capacity() == want
    }

    /// Takes a new generation's timeouts and learning window; `relearn`: a service is tracked
    /// that was not, so its running connections are learned from the next segment on.
    pub fn configure(&mut self, cfg: &TcpStateConfig, relearn: bool) {
        self.table.configure(&cfg.table());
        self.learn_ns = cfg.learn_ns;
        if relearn {
            self.learn_until = LEARN_PENDING;
        }
    }

    /// Entries (tests).
    pub fn capacity(&self) -> usize {
        self.table.capacity()
    }

    /// Entries in use and established (including expired ones not yet swept).
    pub fn in_use(&self) -> (u64, u64) {
        (self.table.in_use(), self.table.confirmed())
    }

    /// The storage (tests: it never moves, never grows).
    pub fn storage(&self) -> (usize, usize) {
        self.table.storage()
    }

    /// Removes the expired entries of the next `buckets` buckets (once a poll: the gauges).
    pub fn sweep(&mut self, now: Instant, buckets: usize, c: &TcpStateLcoreCounters) {
        self.table.sweep(now, buckets, &c.table);
    }

    /// The table's decision on segment `s` of a tracked service at `now`: `Ok` to go on (its
    /// entry made or moved), `Err` to drop it (outcome `tcp_out_of_state`). Every reason is
    /// counted in `c`. No allocation; one bucket (a cache line) read and written, and for a SYN
    /// one of the SYN budget's.
    #[inline]
    pub fn judge(
        &mut self,
        cfg: &TcpStateConfig,
        s: &Segment,
        now: Instant,
        c: &TcpStateLcoreCounters,
    ) -> Result<(), Reason> {
        let r = self.decide(cfg, s, now, &c.table);
        match r {
            Ok(None) => Ok(()),
            Ok(Some(why)) => {
                c.reasons[why as usize].inc();
                Ok(())
            }
            Err(why) => {
                c.reasons[why as usize].inc();
                Err(why)
            }
        }
    }

    /// [`TcpState::judge`] uncounted: `Ok(Some(reason))` admitted for that reason.
    fn decide(
        &mut self,
        cfg: &TcpStateConfig,
        s: &Segment,
        now: Instant,
        c: &ConntrackCounters,
    ) -> Result<Option<Reason>, Reason> {
        if self.learn_until == LEARN_PENDING {
            self.learn_until = now.0.saturating_add(self.learn_ns);
        }
        let t = conntrack::ticks(now);
        let key = self.table.key(6, s.client, s.cport, s.service, s.sport);
        let (bi, way) = self.table.find(key, t);
        let f = s.flags;
        let closing = f.contains(TcpFlags::FIN) || f.contains(TcpFlags::RST);
        if f.contains(TcpFlags::SYN) && !f.contains(TcpFlags::ACK) {
            if cfg.syn.enabled && self.syn.admit(&cfg.syn, s.client, now).is_err() {
                return Err(Reason::SynOverBudget);
            }
            let (value, meta) = handshake_meta(s.seq);
            let Some(w) = way else {
                return Ok((!self.table.insert_meta(bi, key, value, meta, t, c)).then_some(Reason::TableFull));
            };
            let word = self.table.word(bi, w);
            if conntrack::is_confirmed(word) && (word >> 48) & CLOSING == 0 {
                // An established flow's SYN is the service's to answer (RFC 9293 §3.10.7.4:
                // a challenge ACK); its entry stays.
                return Ok(None);
            }
            // A retransmitted or new SYN of a handshake, or a new connection on a closing
            // tuple (RFC 9293 §3.6.1): a handshake again, from its ISN.
            self.table
                .unconfirm(bi, w, meta << 48 | (value as u64) << 32 | t as u64, c);
            return Ok(None);
        }
        let Some(w) = way else {
            if !self.table.can_insert(bi, t) {
                return Ok(Some(Reason::TableFull));
            }
            if now.0 < self.learn_until {
                let _ = self.table.insert_meta(bi, key, 0, TCP, t, c);
                return Ok(Some(Reason::Learned));
            }
            return Err(if f.contains(TcpFlags::RST) {
                Reason::RstNoFlow
            } else {
                Reason::NoFlow
            });
        };
        let word = self.table.word(bi, w);
        let meta = word >> 48;
        if conntrack::is_confirmed(word) {
            let meta = if closing { meta | CLOSING } else { meta };
            self.table
                .set_word(bi, w, meta << 48 | (word & 0xffff_0000_0000) | t as u64);
            return Ok(None);
        }
        let confirms = if meta & SYN_BORN != 0 {
            // RFC 9293 §3.10.7.4: the client's ACK of our SYN,ACK (or its RST) carries the
            // sequence number after its SYN's.
            if !(f.contains(TcpFlags::ACK) || f.contains(TcpFlags::RST)) || s.seq & ISN_MASK != expected_seq(word) {
                return Err(Reason::BadHandshake);
            }
            true
        } else {
            // Learned: confirmed by a segment a second after its first.
            t.wrapping_sub(word as u32) > conntrack::ticks(Instant(CONFIRM_AFTER_NS))
        };
        if confirms {
            if !self.table.confirm(bi, w, t, c) {
                return Ok(Some(Reason::TableFull));
            }
            if closing {
                let word = self.table.word(bi, w);
                self.table.set_word(bi, w, word | CLOSING << 48);
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests;
