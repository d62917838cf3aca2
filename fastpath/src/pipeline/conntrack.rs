//! Connection tracking for `tunnel` services: a flow, once shown to be real, stays on the
//! backend it started on while that backend is alive, whatever the Maglev table says since.
//!
//! One table per worker, sized at start and never grown: a flow's packets reach one socket by
//! their hash and a socket belongs to one worker, so a worker sees every packet of its flows and
//! no other lcore writes its table. (Rollover under overload, or a reload that changes a
//! service's sockets, can move a flow to another worker: that worker's table misses and the flow
//! takes the Maglev pick, its old backend unless the backend set changed meanwhile; see
//! docs/operating.md.)
//!
//! Layout: buckets of [`WAYS`] entries of 16 bytes, one cache line each; a flow's keyed 64-bit
//! hash picks the bucket and is the entry's tag (a collision needs two flows agreeing on 64 bits
//! of a hash keyed by a secret seed). An entry stores the backend by a stable identity (the
//! worker's number for the tunnel's name, remapped at each reload), the state and one time.
//!
//! Admission (what a spoofed flood can and cannot do):
//! - a flow the table misses gets an *unconfirmed* entry, which may only take an empty or
//!   expired way, or the oldest unconfirmed one: a SYN or ACK flood of any size churns the
//!   unconfirmed ways and never evicts a confirmed entry;
//! - an entry is *confirmed* by what shows the flow is real: after a SYN, the client's next
//!   segment without SYN (the handshake's ACK); for a flow first seen mid-stream (UDP, or TCP
//!   picked up after a restart), a packet at least [`CONFIRM_AFTER_NS`] after the first;
//! - at most [`MAX_CONFIRMED`] ways of a bucket are confirmed, so one stays free for new
//!   handshakes; a flow confirmed into a full bucket stays unconfirmed (still pinned while it
//!   lasts). Confirmed entries leave only by timeout (idle; shorter after a FIN or RST), or when
//!   their backend is removed or down: a full table refuses new flows, which then follow the
//!   Maglev table statelessly, rather than evict established ones.
//!
//! The same table (layout, hash, timeouts, admission) is the RX lcores' TCP state table
//! (`tcp_state.rs`), through the `pub(super)` primitives below, with every way of a bucket
//! allowed to be confirmed ([`Conntrack::with_max_confirmed`]) and the 16-bit backend field
//! and the word's top byte holding 24 bits of the client's ISN + 1.

use super::icmp_error::limit::mix;
use super::parse::Parsed;
use super::verdict::Instant;
pub use crate::stats::ConntrackCounters;
use crate::wire::{IpProtocol, Toeplitz};
use std::net::IpAddr;

/// Entries per bucket (16 bytes each: a bucket is one 64-byte cache line).
pub const WAYS: usize = 4;
/// Confirmed entries a bucket may hold: the rest is kept for handshakes.
pub const MAX_CONFIRMED: usize = WAYS - 1;
/// A flow first seen without a SYN is confirmed by a packet at least this long after its first
/// (a flood's one-off spoofed tuples never are).
pub const CONFIRM_AFTER_NS: u64 = 1_000_000_000;
/// The smallest table (entries).
pub const MIN_ENTRIES: u32 = 1024;
/// The largest table per worker (entries; 16 bytes each: 1 GiB).
pub const MAX_ENTRIES: u32 = 1 << 26;

/// A table whose entries in use spread over more cache lines than this (bytes) has the buckets
/// of a worker's burst prefetched before its lookups: below it the caches hold them and the
/// second parse costs more than the misses it hides (benches/NOTES.md, "Prefetching the
/// worker's connection table").
pub const PREFETCH_ABOVE: usize = 16 << 20;

/// Time in the table: nanoseconds >> 26 (67 ms units; 32 bits wrap after 9 years).
const TICK_SHIFT: u32 = 26;

pub(super) const CONFIRMED: u64 = 1;
pub(super) const SYN_BORN: u64 = 2;
pub(super) const CLOSING: u64 = 4;
pub(super) const TCP: u64 = 8;

/// The table's settings (`[conntrack]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConntrackConfig {
    /// Entries per worker (0: no tracking). Fixed at start.
    pub entries: u32,
    /// Idle timeout of a confirmed TCP flow, seconds.
    pub tcp_timeout_s: u32,
    /// Idle timeout of a TCP flow after the client's FIN or RST, seconds.
    pub tcp_closing_timeout_s: u32,
    /// Idle timeout of a confirmed UDP flow, seconds.
    pub udp_timeout_s: u32,
    /// Lifetime of an unconfirmed entry, seconds.
    pub unconfirmed_timeout_s: u32,
    /// ICMP errors about a tunnel service's flows forwarded to the flow's backend, per second
    /// over all RX lcores (0: none, they are `unhandled` as before).
    pub icmp_per_sec: u32,
}

impl Default for ConntrackConfig {
    fn default() -> Self {
        ConntrackConfig {
            entries: 262_144,
            tcp_timeout_s: 900,
            tcp_closing_timeout_s: 30,
            udp_timeout_s: 300,
            unconfirmed_timeout_s: 10,
            icmp_per_sec: 1000,
        }
    }
}

/// What a packet tells the table about its flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// A TCP SYN without ACK (a connection's first segment).
    Syn,
    /// Any other TCP segment; `closing`: FIN or RST set.
    Tcp {
        /// FIN or RST.
        closing: bool,
    },
    /// A UDP datagram.
    Udp,
}

/// One cache line: the ways' tags (0: empty), then their words: time (bits 0–31), backend
/// (32–47), state (48–55).
#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct Bucket {
    tag: [u64; WAYS],
    word: [u64; WAYS],
}

/// The timeouts in ticks, by state.
#[derive(Clone, Copy, Debug, Default)]
struct Timeouts {
    unconfirmed: u32,
    tcp: u32,
    closing: u32,
    udp: u32,
    confirm: u32,
}

impl Timeouts {
    #[inline]
    fn of(&self, word: u64) -> u32 {
        let meta = word >> 48;
        if meta & CONFIRMED == 0 {
            self.unconfirmed
        } else if meta & TCP == 0 {
            self.udp
        } else if meta & CLOSING != 0 {
            self.closing
        } else {
            self.tcp
        }
    }

    #[inline]
    fn expired(&self, word: u64, t: u32) -> bool {
        t.wrapping_sub(word as u32) > self.of(word)
    }
}

/// A worker's flow table (module docs).
#[derive(Clone)]
pub struct Conntrack {
    buckets: Box<[Bucket]>,
    mask: usize,
    seed: [u64; 2],
    timeouts: Timeouts,
    /// The next bucket [`Conntrack::sweep`] looks at.
    cursor: usize,
    in_use: u64,
    confirmed: u64,
    /// Confirmed entries a bucket may hold ([`MAX_CONFIRMED`] here; [`WAYS`] for the TCP state
    /// table, which fails open rather than keep a way for handshakes).
    max_confirmed: usize,
}

impl std::fmt::Debug for Conntrack {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "Conntrack({} entries, {} in use)", self.capacity(), self.in_use)
    }
}

pub(super) fn ticks(now: Instant) -> u32 {
    (now.0 >> TICK_SHIFT) as u32
}

fn secs_to_ticks(s: u32) -> u32 {
    ((s as u64 * 1_000_000_000).div_ceil(1 << TICK_SHIFT)).min(u32::MAX as u64 / 2) as u32
}

pub(super) fn is_confirmed(word: u64) -> bool {
    (word >> 48) & CONFIRMED != 0
}

impl Conntrack {
    /// A table of at least `cfg.entries` entries (rounded up to a power of two of buckets; none
    /// when 0), its hash keyed by `seed` (from the OS). All its memory is taken and written
    /// here.
    pub fn new(cfg: &ConntrackConfig, seed: u64) -> Conntrack {
        let buckets = if cfg.entries == 0 {
            0
        } else {
            (cfg.entries.clamp(MIN_ENTRIES, MAX_ENTRIES) as usize)
                .div_ceil(WAYS)
                .next_power_of_two()
        };
        let mut t = Conntrack {
            buckets: vec![Bucket::default(); buckets].into_boxed_slice(),
            mask: buckets.wrapping_sub(1),
            seed: [mix(seed ^ 0x452821e638d01377), mix(seed ^ 0xbe5466cf34e90c6c)],
            timeouts: Timeouts::default(),
            cursor: 0,
            in_use: 0,
            confirmed: 0,
            max_confirmed: MAX_CONFIRMED,
        };
        t.configure(cfg);
        t
    }

    /// [`Conntrack::new`] whose buckets may hold `max` confirmed entries (at most [`WAYS`]).
    pub fn with_max_confirmed(cfg: &ConntrackConfig, seed: u64, max: usize) -> Conntrack {
        let mut t = Conntrack::new(cfg, seed);
        t.max_confirmed = max.min(WAYS);
        t
    }

    /// Takes new timeouts (a reload); the size stays.
    pub fn configure(&mut self, cfg: &ConntrackConfig) {
        self.timeouts = Timeouts {
            unconfirmed: secs_to_ticks(cfg.unconfirmed_timeout_s),
            tcp: secs_to_ticks(cfg.tcp_timeout_s),
            closing: secs_to_ticks(cfg.tcp_closing_timeout_s),
            udp: secs_to_ticks(cfg.udp_timeout_s),
            confirm: (CONFIRM_AFTER_NS.div_ceil(1 << TICK_SHIFT)) as u32,
        };
    }

    /// Entries the table holds at most.
    pub fn capacity(&self) -> usize {
        self.buckets.len() * WAYS
    }

    /// Whether it tracks nothing (`entries = 0`).
    pub fn is_disabled(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Entries in use (including expired ones not yet swept).
    pub fn in_use(&self) -> u64 {
        self.in_use
    }

    /// Confirmed entries in use.
    pub fn confirmed(&self) -> u64 {
        self.confirmed
    }

    /// The address and length of the storage (tests: it never moves, never grows).
    pub fn storage(&self) -> (usize, usize) {
        (self.buckets.as_ptr() as usize, self.buckets.len())
    }

    /// The keyed hash of a flow in the client → service direction (`proto` the IP protocol
    /// number). Never 0. IPv4: one multiply and one mix of the seeded words (measured: the
    /// general form's five mixes and its copies of the addresses were half of the table's cost).
    #[inline]
    pub fn key(&self, proto: u8, client: IpAddr, cport: u16, service: IpAddr, sport: u16) -> u64 {
        let ports = (proto as u64) << 32 | (cport as u64) << 16 | sport as u64;
        let h = match (client, service) {
            (IpAddr::V4(c), IpAddr::V4(s)) => {
                let a = (u32::from(c) as u64) << 32 | u32::from(s) as u64;
                mix((a ^ self.seed[0]).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ports.wrapping_add(self.seed[1]))
            }
            (c, s) => self.key_wide(ports, c, s),
        };
        h | 1
    }

    #[cold]
    fn key_wide(&self, ports: u64, client: IpAddr, service: IpAddr) -> u64 {
        let mut h = self.seed[0] ^ ports;
        for a in [client, service] {
            let v = match a {
                IpAddr::V4(a) => a.to_ipv6_mapped().to_bits(),
                IpAddr::V6(a) => a.to_bits(),
            };
            h = mix(h ^ (v >> 64) as u64).wrapping_add(self.seed[1]);
            h = mix(h ^ v as u64).wrapping_add(self.seed[1]);
        }
        mix(h)
    }

    #[inline]
    fn index(&self, key: u64) -> usize {
        (key >> 20) as usize & self.mask
    }

    /// The address of flow `key`'s bucket (a cache line), for a prefetch. Never read through.
    #[inline]
    pub fn bucket_addr(&self, key: u64) -> *const u8 {
        if self.is_disabled() {
            return std::ptr::null();
        }
        std::ptr::from_ref(&self.buckets[self.index(key)]).cast()
    }

    /// Whether the entries in use spread over more lines than the caches hold
    /// ([`PREFETCH_ABOVE`], a line an entry at worst): lookups miss, and prefetching a burst's
    /// buckets pays.
    #[inline]
    pub fn larger_than_caches(&self) -> bool {
        self.larger_than(PREFETCH_ABOVE)
    }

    /// Whether the entries in use spread over more than `bytes` of lines (a line an entry at
    /// worst).
    #[inline]
    pub fn larger_than(&self, bytes: usize) -> bool {
        self.in_use as usize * std::mem::size_of::<Bucket>() > bytes
    }

    /// The backend of the flow `key` for a packet that says `seen` at `now`: its entry's backend
    /// if `valid` accepts it; else `pick()` (the Maglev choice), recorded in its entry (a new
    /// one on a miss, if the bucket admits it). `None` when there is no entry and `pick` gives
    /// none. No allocation; one cache line read and written.
    #[inline]
    pub fn track(
        &mut self,
        key: u64,
        seen: Seen,
        now: Instant,
        c: &ConntrackCounters,
        valid: impl Fn(u16) -> bool,
        pick: impl FnOnce() -> Option<u16>,
    ) -> Option<u16> {
        if self.is_disabled() {
            return pick();
        }
        let t = ticks(now);
        let bi = self.index(key);
        let Conntrack {
            buckets,
            timeouts: tm,
            confirmed,
            max_confirmed,
            ..
        } = self;
        let b = &mut buckets[bi];
        let way = b.tag.iter().position(|&x| x == key);
        let Some(w) = way.filter(|&w| !tm.expired(b.word[w], t)) else {
            c.misses.inc();
            let id = pick()?;
            self.insert(bi, key, id, seen, t, c);
            return Some(id);
        };
        c.hits.inc();
        let word = b.word[w];
        let mut meta = word >> 48;
        let mut id = (word >> 32) as u16;
        let mut time = word as u32;
        if !valid(id) {
            id = pick()?;
            c.repinned.inc();
        }
        let closing = matches!(seen, Seen::Tcp { closing: true });
        if meta & CONFIRMED != 0 {
            if !matches!(seen, Seen::Syn) {
                time = t;
            }
            if closing {
                meta |= CLOSING;
            }
        } else {
            let confirms = match seen {
                Seen::Syn => false,
                Seen::Tcp { .. } if meta & SYN_BORN != 0 => true,
                _ => t.wrapping_sub(time) >= tm.confirm,
            };
            if confirms && Self::room(b, tm, t, *max_confirmed) {
                meta |= CONFIRMED;
                time = t;
                *confirmed += 1;
                c.confirmations.inc();
                c.confirmed.set(*confirmed);
                if closing {
                    meta |= CLOSING;
                }
            }
        }
        b.word[w] = meta << 48 | (id as u64) << 32 | time as u64;
        Some(id)
    }

    /// Whether bucket `b` may hold one more confirmed entry.
    #[cold]
    fn room(b: &Bucket, tm: &Timeouts, t: u32, max: usize) -> bool {
        (0..WAYS)
            .filter(|&x| b.tag[x] != 0 && is_confirmed(b.word[x]) && !tm.expired(b.word[x], t))
            .count()
            < max
    }

    /// The bucket of flow `key` and its live way, if it has one (`t` from [`ticks`]).
    #[inline]
    pub(super) fn find(&self, key: u64, t: u32) -> (usize, Option<usize>) {
        let bi = self.index(key);
        let b = &self.buckets[bi];
        let w = (0..WAYS).find(|&w| b.tag[w] == key && !self.timeouts.expired(b.word[w], t));
        (bi, w)
    }

    /// The word of way `w` of bucket `bi`.
    #[inline]
    pub(super) fn word(&self, bi: usize, w: usize) -> u64 {
        self.buckets[bi].word[w]
    }

    /// Rewrites way `w`'s word keeping its confirmation (use [`Conntrack::confirm`] and
    /// [`Conntrack::unconfirm`] to change that: they keep the counts).
    #[inline]
    pub(super) fn set_word(&mut self, bi: usize, w: usize, word: u64) {
        let old = self.buckets[bi].word[w];
        self.buckets[bi].word[w] = (word & !(CONFIRMED << 48)) | (old & CONFIRMED << 48);
    }

    /// Confirms way `w` at tick `t` if its bucket has room; whether it did.
    pub(super) fn confirm(&mut self, bi: usize, w: usize, t: u32, c: &ConntrackCounters) -> bool {
        let word = self.buckets[bi].word[w];
        if is_confirmed(word) {
            return true;
        }
        if !Self::room(&self.buckets[bi], &self.timeouts, t, self.max_confirmed) {
            return false;
        }
        self.buckets[bi].word[w] = (word & !0xffff_ffff) | (CONFIRMED << 48) | t as u64;
        self.confirmed += 1;
        c.confirmations.inc();
        c.confirmed.set(self.confirmed);
        true
    }

    /// Makes way `w` unconfirmed again with word `word` (a new handshake on a closing flow's
    /// tuple).
    pub(super) fn unconfirm(&mut self, bi: usize, w: usize, word: u64, c: &ConntrackCounters) {
        if is_confirmed(self.buckets[bi].word[w]) {
            self.confirmed -= 1;
            c.confirmed.set(self.confirmed);
        }
        self.buckets[bi].word[w] = word & !(CONFIRMED << 48);
    }

    /// A new unconfirmed entry for `key` (which has no live one) in bucket `bi`: `value` in
    /// the backend field, `meta` the state bits (and top byte), at tick `t`. False when the
    /// bucket holds only live confirmed entries (counted `refused`).
    #[inline]
    pub(super) fn insert_meta(
        &mut self,
        bi: usize,
        key: u64,
        value: u16,
        meta: u64,
        t: u32,
        c: &ConntrackCounters,
    ) -> bool {
        self.insert_word(bi, key, (meta & !CONFIRMED) << 48 | (value as u64) << 32 | t as u64, c)
    }

    /// A new unconfirmed entry in bucket `bi` (which does not hold `key` alive): the way of an
    /// expired `key`, an empty or expired way, else the oldest unconfirmed one; never a live
    /// confirmed one.
    #[cold]
    fn insert(&mut self, bi: usize, key: u64, id: u16, seen: Seen, t: u32, c: &ConntrackCounters) {
        let meta = match seen {
            Seen::Syn => SYN_BORN | TCP,
            Seen::Tcp { .. } => TCP,
            Seen::Udp => 0,
        };
        self.insert_word(bi, key, meta << 48 | (id as u64) << 32 | t as u64, c);
    }

    /// [`Conntrack::insert`] of a whole word (its time the entry's birth).
    fn insert_word(&mut self, bi: usize, key: u64, word: u64, c: &ConntrackCounters) -> bool {
        let tm = self.timeouts;
        let t = word as u32;
        let b = &self.buckets[bi];
        let mut free = None;
        let mut oldest: Option<(usize, u32)> = None;
        for w in 0..WAYS {
            if b.tag[w] == 0 {
                free = Some((w, false));
                break;
            }
            let word = b.word[w];
            if tm.expired(word, t) {
                free = Some((w, true));
                break;
            }
            if !is_confirmed(word) {
                let age = t.wrapping_sub(word as u32);
                if oldest.is_none_or(|(_, a)| age > a) {
                    oldest = Some((w, age));
                }
            }
        }
        let w = match (free, oldest) {
            (Some((w, expired)), _) => {
                if expired {
                    self.remove(bi, w, c);
                    c.expired.inc();
                }
                w
            }
            (None, Some((w, _))) => {
                self.remove(bi, w, c);
                c.evictions.inc();
                w
            }
            (None, None) => {
                c.refused.inc();
                return false;
            }
        };
        let b = &mut self.buckets[bi];
        b.tag[w] = key;
        b.word[w] = word;
        self.in_use += 1;
        c.insertions.inc();
        c.entries.set(self.in_use);
        true
    }

    /// Whether bucket `bi` could take a new entry at tick `t` (an empty, expired or
    /// unconfirmed way).
    pub(super) fn can_insert(&self, bi: usize, t: u32) -> bool {
        let b = &self.buckets[bi];
        (0..WAYS).any(|w| b.tag[w] == 0 || self.timeouts.expired(b.word[w], t) || !is_confirmed(b.word[w]))
    }

    fn remove(&mut self, bi: usize, w: usize, c: &ConntrackCounters) {
        let b = &mut self.buckets[bi];
        if is_confirmed(b.word[w]) {
            self.confirmed -= 1;
            c.confirmed.set(self.confirmed);
        }
        b.tag[w] = 0;
        b.word[w] = 0;
        self.in_use -= 1;
        c.entries.set(self.in_use);
    }

    /// The backend recorded for flow `key`, without touching its entry (an ICMP error about the
    /// flow is no sign of life).
    pub fn peek(&self, key: u64, now: Instant) -> Option<u16> {
        if self.is_disabled() {
            return None;
        }
        let t = ticks(now);
        let b = &self.buckets[self.index(key)];
        (0..WAYS)
            .find(|&w| b.tag[w] == key && !self.timeouts.expired(b.word[w], t))
            .map(|w| (b.word[w] >> 32) as u16)
    }

    /// The live entry of flow `key`, without touching it: (backend identity, confirmed).
    pub fn lookup(&self, key: u64, now: Instant) -> Option<(u16, bool)> {
        if self.is_disabled() {
            return None;
        }
        let t = ticks(now);
        let b = &self.buckets[self.index(key)];
        (0..WAYS)
            .find(|&w| b.tag[w] == key && !self.timeouts.expired(b.word[w], t))
            .map(|w| ((b.word[w] >> 32) as u16, is_confirmed(b.word[w])))
    }

    /// Removes the expired entries of the next `buckets` buckets (called once a poll, so the
    /// gauge of entries in use follows the flows that ended).
    pub fn sweep(&mut self, now: Instant, buckets: usize, c: &ConntrackCounters) {
        if self.is_disabled() || self.in_use == 0 {
            return;
        }
        let t = ticks(now);
        for _ in 0..buckets {
            let bi = self.cursor;
            self.cursor = (self.cursor + 1) & self.mask;
            for w in 0..WAYS {
                let b = &self.buckets[bi];
                if b.tag[w] != 0 && self.timeouts.expired(b.word[w], t) {
                    self.remove(bi, w, c);
                    c.expired.inc();
                }
            }
        }
    }

    /// Every entry in use: (tag, backend identity, confirmed). For tests and inspection.
    pub fn entries(&self) -> impl Iterator<Item = (u64, u16, bool)> + '_ {
        self.buckets.iter().flat_map(|b| {
            (0..WAYS)
                .filter(move |&w| b.tag[w] != 0)
                .map(move |w| (b.tag[w], (b.word[w] >> 32) as u16, is_confirmed(b.word[w])))
        })
    }
}

/// A service's flow an ICMP error quotes, in the client → service direction (the direction
/// whose packets the flow's hash and table entry were made from).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quoted {
    /// TCP or UDP.
    pub protocol: IpProtocol,
    /// The client: the quoted packet's destination.
    pub client: IpAddr,
    /// The client's port.
    pub cport: u16,
    /// The service address: the quoted packet's source, and the error's destination.
    pub service: IpAddr,
    /// The service's port.
    pub sport: u16,
}

impl Quoted {
    /// The flow hash the flow's own packets have ([`super::Parsed::flow_hash`] of a
    /// client → service packet).
    pub fn hash(&self, hasher: &Toeplitz) -> u32 {
        let ports = Some((self.cport, self.sport));
        match (self.client, self.service) {
            (IpAddr::V4(c), IpAddr::V4(s)) => hasher.hash_v4(c, s, ports),
            (IpAddr::V6(c), IpAddr::V6(s)) => hasher.hash_v6(&c, &s, ports),
            _ => 0,
        }
    }
}

/// The flow quoted by the ICMP Destination Unreachable (RFC 792; type 3, any code, Fragmentation
/// Needed among them: RFC 1191) or ICMPv6 Destination Unreachable / Packet Too Big (RFC 4443
/// §3.1, §3.2; RFC 8201) in `frame` (parsed as `p`), if it quotes a TCP or UDP packet sent from
/// the error's destination address, with its IP header and at least 8 bytes after it (RFC 792,
/// RFC 1812 §4.3.2.3: the ports). A quoted IPv4 fragment other than the first, or an IPv6
/// packet with extension headers before its ports, is not looked into.
pub fn quoted_flow(frame: &[u8], p: &Parsed) -> Option<Quoted> {
    if p.fragment.is_some() {
        return None;
    }
    let msg = frame.get(p.l4_offset as usize..p.ip_end as usize)?;
    let inner = msg.get(8..)?;
    let (protocol, src, dst, l4) = match (p.protocol, p.dst) {
        (IpProtocol::ICMP, IpAddr::V4(_)) if msg[0] == 3 => {
            let ihl = (*inner.first()? & 0x0f) as usize * 4;
            if inner[0] >> 4 != 4 || ihl < 20 || inner.len() < ihl + 8 {
                return None;
            }
            if u16::from_be_bytes([inner[6], inner[7]]) & 0x1fff != 0 {
                return None;
            }
            let a = |o: usize| IpAddr::from(<[u8; 4]>::try_from(&inner[o..o + 4]).unwrap_or_default());
            (inner[9], a(12), a(16), &inner[ihl..])
        }
        (IpProtocol::ICMPV6, IpAddr::V6(_)) if msg[0] == 1 || msg[0] == 2 => {
            if inner.len() < 48 || inner[0] >> 4 != 6 {
                return None;
            }
            let a = |o: usize| IpAddr::from(<[u8; 16]>::try_from(&inner[o..o + 16]).unwrap_or_default());
            (inner[6], a(8), a(24), &inner[40..])
        }
        _ => return None,
    };
    let protocol = match protocol {
        6 => IpProtocol::TCP,
        17 => IpProtocol::UDP,
        _ => return None,
    };
    if src != p.dst {
        return None;
    }
    Some(Quoted {
        protocol,
        client: dst,
        cport: u16::from_be_bytes([l4[2], l4[3]]),
        service: src,
        sport: u16::from_be_bytes([l4[0], l4[1]]),
    })
}

#[cfg(test)]
mod tests;
