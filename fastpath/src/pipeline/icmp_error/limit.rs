//! The two rate limiters of ICMP errors: the global bucket every lcore shares, and the
//! per-destination buckets each RX lcore keeps for itself.
//!
//! # Global bucket ([`GlobalBucket`])
//!
//! Linux's `icmp_global_allow()` (commit 4cdf507d5452, "icmp: add a global rate limitation"): a
//! token bucket of `msgs_per_sec` credits a second, holding at most `burst`, refilled only when at
//! least 20 ms (`HZ / 50`) have passed since the last refill. Under pressure (no credit, less than
//! 20 ms since the refill) the check is two loads of a cache line every lcore only reads, so a
//! flood costs no write and no line bouncing between lcores.
//!
//! It is lock-free: the credit and the refill stamp are two atomics. A refill is claimed by a
//! compare-and-swap on the stamp, so among lcores that see 20 ms passed exactly one adds the
//! credit; consumption is a compare-and-swap loop on the credit that never takes it below zero.
//!
//! ## Randomised consumption (CVE-2020-25705, "SAD DNS")
//!
//! With a deterministic bucket of 50, the global limiter is a shared counter an off-path attacker
//! can read: it sends 50 UDP probes to candidate ports of a resolver, spoofing the source of the
//! resolver's upstream server (so the errors go there, unseen), then one packet to a port known to
//! be closed from its own address. If the 50 probes were all closed ports they used up the 50
//! credits and the attacker gets no error; if one hit the open port it gets one. 50 ports per
//! round, binary-searched, finds the resolver's ephemeral port in seconds, then the DNS answer is
//! spoofed. Linux's fix, b38e7819cae9 ("icmp: randomize the global rate limiter"), takes a random
//! 0, 1 or 2 credits (`prandom_u32_max(3)`, mean 1) per message instead of exactly one. The credit
//! left after N closed-port probes is then a sum of N independent draws (variance 2N/3: about ±6
//! credits after 50 probes) and a single open port, one credit, drowns in it: the verification
//! packet no longer says whether any probe hit an open port. [`GlobalBucket::try_consume`] does
//! the same with a draw from the caller's lcore-local generator (a caller-supplied `u32`, mapped
//! to 0..3 by `(draw * 3) >> 32` like `prandom_u32_max`). Unlike Linux since 2024 (which may
//! drive the credit negative with an unconditional `atomic_sub`) the credit saturates at zero, and
//! a message is only sent if some credit was left when it was consumed.
//!
//! The order of the checks is Linux's since 8c2bd38b95f7 ("icmp: change the order of rate
//! limits", reported by Keyu Man): a non-consuming peek at the global bucket first (so nothing is
//! spent on a packet that cannot be answered), then the per-destination limit, and only then the
//! global credit is consumed. Consuming global credit before the per-destination check let
//! packets a per-destination limit refused still drain the shared budget, which is again an
//! observable side channel; consuming it last means each spoofed source can drain at most its own
//! per-destination allowance.
//!
//! # Per-destination buckets ([`PeerTable`])
//!
//! Linux's `inet_peer_xrlim_allow()`: a bucket of time credit per destination, `interval` per
//! message, at most `burst × interval` banked (`XRLIM_BURST_FACTOR` = 6), a new destination
//! starting full. A slot keeps it as the one time at which the bucket is full again (the
//! generic cell rate algorithm's form of a token bucket), so a refusal reads the slot and writes
//! nothing. Linux keeps it in the inetpeer tree; here (as Eric Dumazet suggests in the review
//! of "net: optimize ICMP-reply code path": "a hash table to quickly filter elephant flows,
//! preventing them from stealing all the global ICMP credits") it is a fixed-size
//! open-addressing table, allocated once, with at most [`PROBES`] slots probed per lookup and
//! the fullest of them evicted when all are taken. The hash is keyed by a per-table secret so
//! an attacker cannot aim addresses at one probe window.
//!
//! An evicted destination comes back with a full burst, as a new inetpeer node does in Linux.
//! Evicting the fullest bucket means a flooding source (its bucket empty, the least full in its
//! window) keeps its exhausted bucket, evicting a bucket that has refilled forgets nothing, while many spoofed sources can at worst hand legitimate, idle
//! destinations a fresh burst; what all of them together can send stays bounded by the global
//! bucket.

use crate::pipeline::verdict::Instant;
use std::net::IpAddr;
use std::sync::atomic::{
    AtomicU32, AtomicU64,
    Ordering::{Acquire, Relaxed},
};
use std::sync::Arc;

/// Nanoseconds per second.
pub const NS_PER_SEC: u64 = 1_000_000_000;
/// The global bucket is refilled at most this often: Linux's `HZ / 50`, 20 ms.
pub const REFILL_INTERVAL_NS: u64 = 20_000_000;
/// Slots probed per per-destination lookup (the table's probe window).
pub const PROBES: usize = 4;
/// Largest per-destination table accepted.
pub const MAX_PEER_TABLE_SIZE: usize = 1 << 20;

/// How many credits a random draw takes: 0, 1 or 2, each with probability 1/3 (the multiply-shift
/// of Linux's `prandom_u32_max(3)`, which avoids a division and the bias of `% 3`).
#[inline]
pub fn credits_for_draw(draw: u32) -> u32 {
    ((draw as u64 * 3) >> 32) as u32
}

/// The host-wide ICMP error budget, shared by every RX lcore through an `Arc`.
///
/// Aligned to a cache line of its own: under a flood every lcore reads it on every packet, and
/// nothing else may share (and dirty) that line.
#[derive(Debug)]
#[repr(align(64))]
pub struct GlobalBucket {
    credit: AtomicU32,
    /// `now` of the last refill, in nanoseconds.
    stamp: AtomicU64,
    msgs_per_sec: AtomicU32,
    burst: AtomicU32,
}

impl GlobalBucket {
    /// A full bucket (`burst` credits) refilled at `msgs_per_sec`, its refill clock starting at
    /// `now`. (Linux starts empty with a stamp of zero, which its first call turns into a full
    /// bucket; starting full says the same thing directly.)
    pub fn new(msgs_per_sec: u32, burst: u32, now: Instant) -> Self {
        GlobalBucket {
            credit: AtomicU32::new(burst),
            stamp: AtomicU64::new(now.0),
            msgs_per_sec: AtomicU32::new(msgs_per_sec),
            burst: AtomicU32::new(burst),
        }
    }

    /// Changes the rate and the burst in place (a config reload), keeping the credit earned so
    /// far, clamped to the new burst. Off the per-packet path.
    pub fn reconfigure(&self, msgs_per_sec: u32, burst: u32) {
        self.msgs_per_sec.store(msgs_per_sec, Relaxed);
        self.burst.store(burst, Relaxed);
        self.credit.fetch_min(burst, Relaxed);
    }

    /// Credits left now.
    pub fn credit(&self) -> u32 {
        self.credit.load(Relaxed)
    }

    /// Messages a second.
    pub fn msgs_per_sec(&self) -> u32 {
        self.msgs_per_sec.load(Relaxed)
    }

    /// Most credits held.
    pub fn burst(&self) -> u32 {
        self.burst.load(Relaxed)
    }

    /// Whether an error may be sent as far as the global budget goes, without consuming
    /// anything: step (c). Refills the bucket when it is empty and at least 20 ms have passed
    /// since the last refill; otherwise only reads.
    ///
    /// Under a flood the bucket is empty and the last refill recent: that answer is three reads
    /// here (credit, stamp, credit again), without the call to the refill; the lcores' limiters
    /// ask through a [`GlobalView`], which skips even those until a refill can be due.
    #[inline]
    pub fn peek(&self, now: Instant) -> bool {
        self.peek_quiet(now).is_ok()
    }

    /// [`GlobalBucket::peek`], and when it says no without a refill having been due, the time
    /// before which it cannot say yes: `Err(t)`, no credit until `t` (`Err(0)`: a refill was
    /// due and earned nothing).
    ///
    /// Credit comes only from a refill, and a refill only once [`REFILL_INTERVAL_NS`] have
    /// passed since the stamp (`reconfigure` only lowers the credit). A refill writes the
    /// stamp, then the credit; so the credit is read again after the stamp (acquire: that
    /// read cannot move before it): zero then means no refill since that stamp, and none can
    /// come before it is an interval old, on any lcore whose clock agrees.
    #[inline]
    pub fn peek_quiet(&self, now: Instant) -> Result<(), u64> {
        if self.credit.load(Relaxed) > 0 {
            return Ok(());
        }
        let stamp = self.stamp.load(Acquire);
        if self.credit.load(Relaxed) > 0 {
            return Ok(());
        }
        let until = stamp.saturating_add(REFILL_INTERVAL_NS);
        if now.0 < until {
            return Err(until);
        }
        if self.refill(now) {
            Ok(())
        } else {
            Err(0)
        }
    }

    /// Linux's lock-free refill (8c2bd38b95f7): at most a second's worth (`delta` capped at 1 s,
    /// so the product below fits a u64), credited only if at least one whole message was earned;
    /// the lcore whose compare-and-swap moves the stamp adds the credit, the others see it.
    #[cold]
    fn refill(&self, now: Instant) -> bool {
        let old = self.stamp.load(Relaxed);
        let delta = now.0.saturating_sub(old).min(NS_PER_SEC);
        if delta < REFILL_INTERVAL_NS {
            return false;
        }
        let incr = (self.msgs_per_sec.load(Relaxed) as u64 * delta / NS_PER_SEC) as u32;
        if incr == 0 {
            return false;
        }
        if self.stamp.compare_exchange(old, now.0, Relaxed, Relaxed).is_ok() {
            let burst = self.burst.load(Relaxed);
            let _always_some = self
                .credit
                .fetch_update(Relaxed, Relaxed, |c| Some(c.saturating_add(incr).min(burst)));
        }
        self.credit.load(Relaxed) > 0
    }

    /// Consumes the credit of one message: step (e). `draw` is a fresh random word from the
    /// caller's lcore-local generator; 0, 1 or 2 credits are taken ([`credits_for_draw`]), never
    /// more than are left. `false` if no credit was left (another lcore took the last of it since
    /// the peek): the message must not be sent.
    #[inline]
    pub fn try_consume(&self, draw: u32) -> bool {
        let take = credits_for_draw(draw);
        if take == 0 {
            return self.credit.load(Relaxed) > 0;
        }
        self.credit
            .fetch_update(Relaxed, Relaxed, |c| (c > 0).then(|| c.saturating_sub(take)))
            .is_ok()
    }
}

/// One lcore's handle on the [`GlobalBucket`]: the bucket and, once a peek found it empty
/// with no refill due, the time before which no peek can say yes ([`GlobalBucket::peek_quiet`]).
///
/// Under a flood the bucket is empty nearly all the time, and every lcore's peek read two words of
/// the line all lcores share on every packet; from this lcore's own copy of that deadline a refused
/// packet reads one word of its own (benches/NOTES.md, "The global budget's quiet time, per
/// lcore"). What the lcores may send is unchanged: credit cannot appear before that time (a clock
/// skew between lcores at most defers this lcore's share of a refill by the skew).
#[derive(Clone, Debug)]
pub struct GlobalView {
    bucket: Arc<GlobalBucket>,
    quiet_until: u64,
    /// Whether a refusal's deadline is remembered (off: every [`GlobalView::peek`] asks the
    /// bucket, so a caller can look at what it refuses, e.g. for exempt sources).
    remember: bool,
}

impl GlobalView {
    /// A view of `bucket`, knowing nothing yet.
    pub fn new(bucket: Arc<GlobalBucket>) -> Self {
        GlobalView {
            bucket,
            quiet_until: 0,
            remember: true,
        }
    }

    /// [`GlobalView::new`] that never answers from a remembered deadline ([`GlobalView::quiet`]
    /// is then always false).
    pub fn forgetful(bucket: Arc<GlobalBucket>) -> Self {
        GlobalView {
            bucket,
            quiet_until: 0,
            remember: false,
        }
    }

    /// The bucket.
    pub fn bucket(&self) -> &Arc<GlobalBucket> {
        &self.bucket
    }

    /// Whether the remembered deadline alone refuses at `now` (what [`GlobalView::peek`] asks
    /// first): `false` says nothing, the bucket is asked.
    #[inline(always)]
    pub fn quiet(&self, now: Instant) -> bool {
        now.0 < self.quiet_until
    }

    /// [`GlobalBucket::peek`], answered from the remembered deadline while it holds.
    #[inline(always)]
    pub fn peek(&mut self, now: Instant) -> bool {
        if self.quiet(now) {
            return false;
        }
        // The credit read inline, the rest a call: while the budget has credit (a flood the
        // per-destination limit holds back) the call was most of the peek's cost (benches/NOTES.md,
        // "Per-burst reads and the closed port's decision").
        if self.bucket.credit.load(Relaxed) > 0 {
            return true;
        }
        match self.bucket.peek_quiet(now) {
            Ok(()) => true,
            Err(until) => {
                if self.remember {
                    self.quiet_until = until;
                }
                false
            }
        }
    }

    /// [`GlobalBucket::try_consume`].
    #[inline]
    pub fn try_consume(&self, draw: u32) -> bool {
        self.bucket.try_consume(draw)
    }
}

/// The per-destination interval for IPv6, scaled like Linux's `icmpv6_xrlim_allow()`: "Give more
/// bandwidth to wider prefixes": `tmo >>= (128 - plen) >> 5` for the prefix length of the route to
/// the destination (a /64 gets a quarter of the interval, a default route 1/16).
///
/// We have no routing table: the error goes back out of the port it came in on, to the host that
/// sent the packet, so the "route" is that host, plen 128 ([`V6_PEER_PLEN`]), and the interval
/// is not scaled. The table is keyed by the full address accordingly.
#[inline]
pub fn v6_peer_interval(interval_ns: u64, plen: u8) -> u64 {
    if plen < 128 {
        interval_ns >> ((128 - plen as u32) >> 5)
    } else {
        interval_ns
    }
}

/// The prefix length the per-destination limit assumes for an IPv6 destination; see
/// [`v6_peer_interval`].
pub const V6_PEER_PLEN: u8 = 128;

/// A per-destination limit in the form [`PeerTable::allow_at`] uses: one error per
/// `interval_ns`, and the `slack_ns` a bucket may owe and still send (`burst - 1` intervals: the
/// bucket holds `burst` intervals of credit). Computed once per config, not per packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerRate {
    /// Nanoseconds of credit one error takes; 0 means no per-destination limit.
    pub interval_ns: u64,
    /// `interval_ns × (burst - 1)`, saturating.
    pub slack_ns: u64,
}

impl PeerRate {
    /// One error per `interval_ns`, at most `burst` banked (`burst >= 1`, validated; 0 is taken
    /// as 1).
    pub fn new(interval_ns: u64, burst: u32) -> Self {
        PeerRate {
            interval_ns,
            slack_ns: interval_ns.saturating_mul(burst.saturating_sub(1) as u64),
        }
    }
}

/// One per-destination bucket: 32 bytes, aligned so that it never straddles a cache line (a
/// lookup reads one line, two slots of the probe window per line).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(32))]
struct PeerSlot {
    /// The address ([`PeerTable::key`]); `[0, 0]` marks an empty slot.
    key: [u64; 2],
    /// When the bucket is full again if nothing more is sent, in `now` nanoseconds (the
    /// "theoretical arrival time" of the generic cell rate algorithm, ITU-T I.371): the token
    /// bucket of `burst × interval` nanoseconds of credit with `tokens = cap - (full_at - now)`,
    /// kept as one time instead of a balance and a stamp, so that a refusal only reads it.
    full_at: u64,
}

/// Key of an empty slot.
const EMPTY: [u64; 2] = [0, 0];
/// Upper key word of every IPv4 address.
const V4_TAG: u64 = u64::MAX;

// One slot, one half cache line.
const _: () = assert!(std::mem::size_of::<PeerSlot>() == 32);

/// Fixed-size open-addressing table of per-destination token buckets, owned by one RX lcore.
#[derive(Clone, Debug)]
pub struct PeerTable {
    mask: usize,
    seed: [u64; 2],
    /// Secret odd multiplier of the multiply-shift that picks the home slot.
    mul: u64,
    /// `32 - log2(size)`: the home slot is the top `log2(size)` bits of the product.
    shift: u32,
    /// What the keyed fold of the upper key word gives for every IPv4 key (whose upper word is
    /// always `V4_TAG`), computed once.
    v4_fold: u64,
    /// The slot of the last decision (always an index of `slots`) and the low word of the key
    /// it held then (`EMPTY`'s before the first): a filter, the slot's own key decides.
    /// Checking the last destination again reads this table and that slot, not the hash.
    recent: usize,
    recent_low: u64,
    slots: Box<[PeerSlot]>,
}

/// The keyed fold of a key's upper word that [`PeerTable::home`] mixes into the lower one.
#[inline]
fn fold(seed: [u64; 2], upper: u64) -> u64 {
    (upper ^ seed[0]).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ seed[1]
}

/// splitmix64's finaliser: a full-avalanche mix of 64 bits (Maglev's name hash uses it too).
#[inline]
pub(crate) fn mix(mut h: u64) -> u64 {
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

impl PeerTable {
    /// A table of `size` slots (a power of two, at most [`MAX_PEER_TABLE_SIZE`]; validated by the
    /// config, clamped and rounded up here), its hash keyed by `seed`, which must be
    /// unpredictable to senders (drawn at start from a real random source).
    pub fn new(size: usize, seed: u64) -> Self {
        let len = size.clamp(1, MAX_PEER_TABLE_SIZE).next_power_of_two();
        let keys = [mix(seed ^ 0x243f_6a88_85a3_08d3), mix(seed ^ 0x1319_8a2e_0370_7344)];
        PeerTable {
            mask: len - 1,
            seed: keys,
            mul: mix(seed ^ 0xa409_3822_299f_31d0) | 1,
            shift: 32 - len.trailing_zeros(),
            v4_fold: fold(keys, V4_TAG),
            recent: 0,
            recent_low: EMPTY[1],
            slots: vec![PeerSlot::default(); len].into(),
        }
    }

    /// Number of slots.
    pub fn size(&self) -> usize {
        self.mask + 1
    }

    /// Destinations currently remembered.
    pub fn occupied(&self) -> usize {
        self.slots.iter().filter(|s| s.key != EMPTY).count()
    }

    /// The slot key of an address, family included: an IPv4 address is `[V4_TAG, address]`. No
    /// IPv6 source that may be answered has all ones in its upper half (that is multicast,
    /// RFC 4291 §2.7) or is all zeros (unspecified), so keys of the two families never meet and
    /// `[0, 0]` is free to mean "empty"; an ineligible address that a caller passes anyway is
    /// nudged into a neighbour's key (it then shares that bucket, nothing worse).
    #[inline]
    fn key(addr: &IpAddr) -> [u64; 2] {
        match addr {
            IpAddr::V4(a) => [V4_TAG, u32::from(*a) as u64],
            IpAddr::V6(a) => {
                let v = u128::from(*a);
                let k = [(v >> 64) as u64, v as u64];
                match k {
                    [V4_TAG, lo] => [V4_TAG - 1, lo],
                    EMPTY => [0, 1],
                    k => k,
                }
            }
        }
    }

    /// The home slot of `key`.
    ///
    /// A keyed multiply folds the upper word into the lower, then a multiply-shift with a
    /// secret odd multiplier takes the slot from the product's top bits (Dietzfelbinger et al.'s
    /// universal family: two distinct keys share a home slot with probability at most
    /// 2 / size, whatever keys a sender picks without the secret). For an IPv4 key the first
    /// multiply does not depend on the address (its upper word is always `V4_TAG`), so from the
    /// address to the slot's load there is one multiply: this runs for every packet to a closed
    /// port while the global budget has credit, and a full 64-bit finaliser there put its chain
    /// of multiplies and shifts on every packet's latency.
    #[inline]
    fn home(&self, key: [u64; 2]) -> usize {
        // An IPv4 key's upper word is always `V4_TAG`: a compare instead of a multiply.
        let upper = if key[0] == V4_TAG {
            self.v4_fold
        } else {
            fold(self.seed, key[0])
        };
        let h = upper ^ key[1];
        // Two shifts: `shift` is 32 for a one-slot table, and the result then is 0.
        (h.wrapping_mul(self.mul) >> 32 >> self.shift) as usize
    }

    /// Whether `addr` may be sent one more error at `now`, given one error per `interval_ns` and
    /// at most `burst` banked (Linux's `inet_peer_xrlim_allow`). Also returns the slot used, for
    /// [`PeerTable::refund`]. `interval_ns == 0` means no per-destination limit. A table must
    /// be used with one `interval_ns` and `burst` for each family (a bucket's state is a time
    /// that means something only for those); [`IcmpLimiter::apply`] makes a new table when they
    /// change.
    ///
    /// [`IcmpLimiter::apply`]: super::IcmpLimiter::apply
    ///
    /// The slot of the last decision is tried first: under a flood from one source (the common
    /// case: a client or an attacker that does not spoof) that is nearly every lookup, and that
    /// slot's address does not wait for the hash, a chain of two multiplies and shifts from the
    /// parsed source to the load that a decision otherwise ends on (benches/NOTES.md, "Cheap
    /// refusals"). A key is in at most one slot (it is only inserted where its
    /// window lacks it), so finding it there is finding it where the hash leads. Then a destination
    /// in its home slot (the first of its window: a flood from a few sources) is decided inline;
    /// the window scan and the eviction are a call.
    #[inline(always)]
    pub fn allow(&mut self, now: Instant, addr: &IpAddr, interval_ns: u64, burst: u32) -> (bool, usize) {
        self.allow_at(now, addr, PeerRate::new(interval_ns, burst))
    }

    /// [`PeerTable::allow`] with the interval and burst in the form a decision uses, computed
    /// once per config ([`PeerRate::new`]).
    #[inline(always)]
    pub fn allow_at(&mut self, now: Instant, addr: &IpAddr, rate: PeerRate) -> (bool, usize) {
        let key = Self::key(addr);
        let recent = self.recent;
        // The low word alone first: a flood from many sources differs there, and one compare
        // and branch says so; the slot's key then decides (it may have been evicted since).
        // Comparing a remembered whole key, LLVM tested both words and the index's bound
        // branch-free on every packet from another source than the last (benches/NOTES.md,
        // "Per-burst reads and the closed port's decision").
        if key[1] == self.recent_low {
            if let Some(s) = self.slots.get_mut(recent).filter(|s| s.key == key) {
                return (Self::spend(s, now, rate), recent);
            }
        }
        let home = self.home(key) & self.mask;
        match self.slots.get_mut(home) {
            Some(s) if s.key == key => {
                (self.recent, self.recent_low) = (home, key[1]);
                (Self::spend(s, now, rate), home)
            }
            _ => self.allow_in_window(now, key, home, rate),
        }
    }

    /// Takes one interval of credit if the bucket holds that much at `now`. Credit held is
    /// `cap - (full_at - now)` (all of `cap` once `full_at` has passed), so "at least one
    /// interval" is `full_at <= now + cap - interval`, and taking it moves `full_at` one interval
    /// later, from `now` if it had passed. A refusal (the flood case) writes nothing, so the
    /// slot's line is never dirtied by the packets it refuses.
    #[inline(always)]
    fn spend(s: &mut PeerSlot, now: Instant, rate: PeerRate) -> bool {
        if s.full_at <= now.0.saturating_add(rate.slack_ns) {
            s.full_at = s.full_at.max(now.0).saturating_add(rate.interval_ns);
            true
        } else {
            false
        }
    }

    /// [`PeerTable::allow`] past the home slot: one pass over the window finds the slot holding
    /// `key`, else the first empty one, else the fullest (the earliest `full_at`: evicting a full
    /// bucket forgets nothing, and a destination being refused has the latest), which a new
    /// destination takes with a full burst (Linux sets `rate_last` 60 s back).
    #[inline(never)]
    fn allow_in_window(&mut self, now: Instant, key: [u64; 2], base: usize, rate: PeerRate) -> (bool, usize) {
        let mut victim = base & self.mask;
        let mut victim_last = u64::MAX;
        let mut found = None;
        for i in 0..PROBES.min(self.mask + 1) {
            let idx = (base + i) & self.mask;
            let s = &self.slots[idx];
            if s.key == key {
                found = Some(idx);
                break;
            }
            let age = if s.key == EMPTY { 0 } else { s.full_at.saturating_add(1) };
            if age < victim_last {
                victim = idx;
                victim_last = age;
            }
        }
        let idx = match found {
            Some(idx) => idx,
            None => {
                self.slots[victim] = PeerSlot { key, full_at: now.0 };
                victim
            }
        };
        (self.recent, self.recent_low) = (idx, key[1]);
        (Self::spend(&mut self.slots[idx], now, rate), idx)
    }

    /// Gives back the credit [`PeerTable::allow`] took from slot `idx` for a message that was not
    /// sent after all (the global credit ran out between peek and consume).
    /// (Any `full_at` before `now` means full, so subtracting past it caps at `burst`.)
    #[inline]
    pub fn refund(&mut self, idx: usize, interval_ns: u64) {
        if let Some(s) = self.slots.get_mut(idx) {
            s.full_at = s.full_at.saturating_sub(interval_ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn home_slots_spread_consecutive_addresses_and_fit_any_size() {
        for seed in [1u64, 7, 0xdead_beef, u64::MAX] {
            let t = PeerTable::new(4096, seed);
            let v4: std::collections::HashSet<usize> = (0..256u32)
                .map(|i| t.home(PeerTable::key(&IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)))) & t.mask)
                .collect();
            // 256 keys into 4096 slots: ~8 collisions expected from a random function.
            assert!(v4.len() >= 230, "seed {seed}: {} distinct home slots of 256", v4.len());
            let v6: std::collections::HashSet<usize> = (0..256u128)
                .map(|i| {
                    t.home(PeerTable::key(&IpAddr::V6(Ipv6Addr::from(
                        (0x2001_0db8u128 << 96) + (i << 64) + 1,
                    )))) & t.mask
                })
                .collect();
            assert!(
                v6.len() >= 230,
                "seed {seed}: {} distinct home slots of 256 /64s",
                v6.len()
            );
        }
        for size in [1, 2, 4096, MAX_PEER_TABLE_SIZE] {
            let t = PeerTable::new(size, 3);
            for i in 0..1000u32 {
                assert!(t.home(PeerTable::key(&IpAddr::V4(Ipv4Addr::from(i)))) <= t.mask);
            }
        }
    }
    use std::sync::Arc;

    const MS: u64 = 1_000_000;
    /// A draw that takes exactly one credit.
    const ONE: u32 = 0x8000_0000;
    /// Draws that take 0 and 2 credits.
    const ZERO: u32 = 0;
    const TWO: u32 = u32::MAX;

    fn at(ms: u64) -> Instant {
        Instant(ms * MS)
    }

    fn at_ns(ns: u64) -> Instant {
        Instant(ns)
    }

    /// Takes every credit, one at a time (bounded, so a broken floor fails instead of hanging).
    fn drain(g: &GlobalBucket) {
        for _ in 0..10_000_000 {
            if !g.try_consume(ONE) {
                return;
            }
        }
        panic!("the bucket never ran dry");
    }

    #[test]
    fn draws_map_to_0_1_2_uniformly() {
        assert_eq!(credits_for_draw(ZERO), 0);
        assert_eq!(credits_for_draw(ONE), 1);
        assert_eq!(credits_for_draw(TWO), 2);
        // The thirds of the u32 range.
        let third = (1u64 << 32) / 3;
        assert_eq!(credits_for_draw(third as u32), 0);
        assert_eq!(credits_for_draw(third as u32 + 1), 1);
        assert_eq!(credits_for_draw((2 * third) as u32), 1);
        assert_eq!(credits_for_draw((2 * third) as u32 + 1), 2);
    }

    #[test]
    fn burst_of_50_then_empty() {
        let g = GlobalBucket::new(1000, 50, at(0));
        for i in 0..50 {
            assert!(g.peek(at(0)), "message {i}");
            assert!(g.try_consume(ONE), "message {i}");
        }
        assert_eq!(g.credit(), 0);
        assert!(!g.peek(at(0)));
        assert!(!g.try_consume(ONE));
        assert!(!g.try_consume(ZERO), "a zero draw does not send without credit either");
    }

    #[test]
    fn refill_only_after_20ms() {
        let g = GlobalBucket::new(1000, 50, at(0));
        drain(&g);
        // Suppressed peeks are reads: checking every millisecond does not push the refill back.
        for ms in 0..20 {
            assert!(!g.peek(at(ms)), "{ms} ms");
        }
        assert!(!g.peek(Instant(20 * MS - 1)));
        assert_eq!(g.credit(), 0);
        assert!(g.peek(at(20)));
        assert_eq!(g.credit(), 20, "1000/s × 20 ms");
        // The refill restarted the 20 ms clock.
        drain(&g);
        assert!(!g.peek(at(39)));
        assert!(g.peek(at(40)));
        assert_eq!(g.credit(), 20);
    }

    #[test]
    fn refill_is_capped_by_burst_and_by_one_second() {
        let g = GlobalBucket::new(1000, 50, at(0));
        drain(&g);
        assert!(g.peek(at(10_000)));
        assert_eq!(g.credit(), 50);
        let g = GlobalBucket::new(100_000, 1_000_000, at(0));
        while g.credit() > 0 {
            let _ = g.try_consume(TWO);
        }
        assert!(g.peek(at(60_000)));
        assert_eq!(g.credit(), 100_000, "a second's worth at most");
        // A rate too low to earn one message in the elapsed time: no refill, the stamp stays.
        let g = GlobalBucket::new(10, 5, at(0));
        drain(&g);
        assert!(!g.peek(at(99)));
        assert!(g.peek(at(100)));
        assert_eq!(g.credit(), 1);
    }

    proptest::proptest! {
        /// Two lcores' views of one bucket answer, step by step, what the rule answers on a
        /// twin bucket, and both buckets stay in the same state: a view skips the shared reads
        /// only while no refill could happen (a deadline cached 1 ms late fails this).
        #[test]
        fn views_answer_as_the_shared_peek(
            rate in proptest::prop_oneof![0u32..300, 0u32..5000],
            burst in 1u32..8,
            // Mostly short steps and sends, so the bucket runs dry often and a view is asked
            // near the end of its quiet time.
            steps in proptest::collection::vec(
                (proptest::prop_oneof![0u64..2 * MS, 0u64..25 * MS], 0usize..2, proptest::prop_oneof![1u8..3, 0u8..4]),
                1..300,
            ),
        ) {
            let viewed = Arc::new(GlobalBucket::new(rate, burst, at(0)));
            let twin = GlobalBucket::new(rate, burst, at(0));
            let mut views = [GlobalView::new(Arc::clone(&viewed)), GlobalView::new(Arc::clone(&viewed))];
            let mut now = 0u64;
            for (i, (dt, lcore, op)) in steps.into_iter().enumerate() {
                now += dt;
                let t = at_ns(now);
                match op {
                    // Peek, then take a credit if it said yes (a send).
                    0 | 1 => {
                        // The twin by the rule itself (Linux's `icmp_global_allow`): credit
                        // left, or a refill due that earns some.
                        let b = twin.credit() > 0 || twin.refill(t);
                        let a = views[lcore].peek(t);
                        proptest::prop_assert_eq!(a, b, "step {} at {} ns", i, now);
                        if a && op == 1 {
                            proptest::prop_assert_eq!(views[lcore].try_consume(ONE), twin.try_consume(ONE));
                        }
                    }
                    // Another lcore spends without looking (a consume after its own peek).
                    2 => proptest::prop_assert_eq!(viewed.try_consume(TWO), twin.try_consume(TWO)),
                    // A reload lowers the burst.
                    _ => {
                        viewed.reconfigure(rate, burst / 2 + 1);
                        twin.reconfigure(rate, burst / 2 + 1);
                    }
                }
                proptest::prop_assert_eq!(viewed.credit(), twin.credit(), "step {}", i);
                proptest::prop_assert_eq!(viewed.stamp.load(Relaxed), twin.stamp.load(Relaxed), "step {}", i);
            }
        }
    }

    #[test]
    fn a_view_remembers_the_refill_time_and_not_past_it() {
        let g = Arc::new(GlobalBucket::new(1000, 1, at(0)));
        let mut v = GlobalView::new(Arc::clone(&g));
        drain(&g);
        assert!(!v.peek(at(5)), "empty, no refill due");
        assert_eq!(v.quiet_until, 20 * MS, "quiet until the stamp is an interval old");
        // A credit that could not have come from a refill (none is due): the view does not
        // look, which is the point; the shared peek would.
        g.credit.store(1, Relaxed);
        assert!(!v.peek(at(19)));
        assert!(g.peek(at(19)));
        drain(&g);
        // From the deadline on it asks the bucket again, which refills.
        assert!(v.peek(at(20)), "refilled at 20 ms");
        assert_eq!(g.stamp.load(Relaxed), 20 * MS);
    }

    #[test]
    fn consumption_never_goes_negative() {
        let g = GlobalBucket::new(1000, 1, at(0));
        assert!(g.try_consume(TWO), "one credit left: sent");
        assert_eq!(g.credit(), 0, "saturated, not wrapped");
        assert!(!g.try_consume(TWO));
        assert_eq!(g.credit(), 0);
    }

    #[test]
    fn randomised_consumption_averages_one_credit() {
        let n = 300_000u32;
        let g = GlobalBucket::new(0, u32::MAX, at(0));
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut hist = [0u32; 3];
        for _ in 0..n {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let draw = (rng >> 32) as u32;
            hist[credits_for_draw(draw) as usize] += 1;
            assert!(g.try_consume(draw));
        }
        let spent = u32::MAX - g.credit();
        assert_eq!(spent, hist[1] + 2 * hist[2]);
        let mean = spent as f64 / n as f64;
        assert!((0.99..1.01).contains(&mean), "mean {mean}");
        for h in hist {
            assert!((h as f64 / n as f64 - 1.0 / 3.0).abs() < 0.01, "{hist:?}");
        }
    }

    #[test]
    fn shared_by_threads_without_losing_or_double_spending() {
        // No refill (rate 0): every credit is spent exactly once. Each thread records the credits
        // its successful consumptions took; together they are the initial credit, plus at most one
        // for the single consumption that hit the floor (1 left, 2 drawn).
        // Both threads start together (a barrier) on a budget that lasts tens of milliseconds,
        // so they contend even when spawning one is slow on a loaded machine (with 200 000
        // credits and no barrier, the first thread sometimes spent everything alone).
        const CREDIT: u32 = 4_000_000;
        let g = Arc::new(GlobalBucket::new(0, CREDIT, at(0)));
        let start = Arc::new(std::sync::Barrier::new(2));
        let threads: Vec<_> = (0..2u64)
            .map(|t| {
                let g = Arc::clone(&g);
                let start = Arc::clone(&start);
                std::thread::spawn(move || {
                    let mut rng = 0x2545_f491_4f6c_dd1d ^ (t + 1);
                    let (mut taken, mut sent) = (0u64, 0u64);
                    start.wait();
                    loop {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let draw = (rng >> 32) as u32;
                        if !g.peek(at(0)) {
                            break;
                        }
                        if g.try_consume(draw) {
                            taken += credits_for_draw(draw) as u64;
                            sent += 1;
                        }
                    }
                    (taken, sent)
                })
            })
            .collect();
        let results: Vec<(u64, u64)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let taken: u64 = results.iter().map(|r| r.0).sum();
        let sent: u64 = results.iter().map(|r| r.1).sum();
        assert_eq!(g.credit(), 0);
        assert!(
            taken == CREDIT as u64 || taken == CREDIT as u64 + 1,
            "taken {taken} of {CREDIT}"
        );
        assert!(results.iter().all(|r| r.1 > 0), "both threads sent: {results:?}");
        let ratio = sent as f64 / CREDIT as f64;
        assert!((0.98..1.02).contains(&ratio), "sent {sent}");
    }

    #[test]
    fn reconfigure_clamps_credit_and_changes_rate() {
        let g = GlobalBucket::new(1000, 50, at(0));
        g.reconfigure(100, 10);
        assert_eq!(g.credit(), 10);
        drain(&g);
        assert!(!g.peek(at(19)));
        assert!(g.peek(at(20)));
        assert_eq!(g.credit(), 2, "100/s × 20 ms");
        assert_eq!((g.msgs_per_sec(), g.burst()), (100, 10));
    }

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7));
    const SEC: u64 = 1000 * MS;

    #[test]
    fn peer_burst_of_6_then_one_per_interval() {
        let mut t = PeerTable::new(4096, 1);
        for i in 0..6 {
            assert!(t.allow(at(0), &A, SEC, 6).0, "message {i}");
        }
        assert!(!t.allow(at(0), &A, SEC, 6).0);
        assert!(!t.allow(at(999), &A, SEC, 6).0);
        assert!(t.allow(at(1000), &A, SEC, 6).0);
        assert!(!t.allow(at(1001), &A, SEC, 6).0);
        assert!(!t.allow(at(1999), &A, SEC, 6).0);
        assert!(t.allow(at(2000), &A, SEC, 6).0);
        // Idle for long: the bank holds 6, not more.
        let n = (0..20).filter(|_| t.allow(at(60_000), &A, SEC, 6).0).count();
        assert_eq!(n, 6);
        // An interval of zero is no limit (a table is used with one interval).
        let mut t = PeerTable::new(4096, 1);
        assert!((0..100).all(|_| t.allow(at(60_000), &A, 0, 6).0));
        // A burst of one: one now, the next a whole interval later.
        let mut t = PeerTable::new(4096, 1);
        assert!(t.allow(at(5), &A, SEC, 1).0);
        assert!(!t.allow(at(5), &A, SEC, 1).0);
        assert!(!t.allow(at(1004), &A, SEC, 1).0);
        assert!(t.allow(at(1005), &A, SEC, 1).0);
    }

    #[test]
    fn decisions_match_a_token_bucket_per_destination() {
        // Reference: Linux's form (banked tokens and a stamp per destination, in a map that
        // forgets nothing). The table (its one-time form, the recent-slot shortcut, the hash)
        // must decide exactly the same for a few sources interleaved at random times.
        struct Bucket {
            tokens: u64,
            last: u64,
        }
        let srcs: Vec<IpAddr> = (0..8u8)
            .map(|i| IpAddr::V4(Ipv4Addr::new(198, 51, 100, i)))
            .chain([IpAddr::V6("2001:db8::7".parse().unwrap())])
            .collect();
        for (interval, burst) in [(SEC, 6), (250 * MS, 1), (3 * MS, 3)] {
            let mut t = PeerTable::new(4096, 11);
            let mut model: std::collections::HashMap<IpAddr, Bucket> = Default::default();
            let (mut now, mut x) = (1u64, 0x2545_f491_4f6c_dd1du64);
            let (mut sent, mut refused) = (0, 0);
            for _ in 0..20_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Runs of one source (the shortcut) and switches (the hash).
                let src = srcs[((x >> 8) % 16).min(srcs.len() as u64 - 1) as usize];
                now += (x >> 40) % (interval / 4 + 1);
                let cap = interval * burst as u64;
                let b = model.entry(src).or_insert(Bucket { tokens: cap, last: now });
                b.tokens = (b.tokens + (now - b.last)).min(cap);
                b.last = now;
                let want = b.tokens >= interval;
                if want {
                    b.tokens -= interval;
                    sent += 1;
                } else {
                    refused += 1;
                }
                assert_eq!(t.allow(at_ns(now), &src, interval, burst).0, want, "{src} at {now} ns");
            }
            assert!(
                sent > 100 && refused > 100,
                "both outcomes exercised: {sent} / {refused}"
            );
        }
    }

    #[test]
    fn the_last_destination_shortcut_follows_evictions() {
        // Eight sources through four slots: every lookup may evict, the shortcut's slot too.
        // After each decision the remembered key is the one in the remembered slot, no key is
        // in two slots, and a destination is found (refused once its burst is spent) whether
        // the shortcut or the hash finds it.
        let mut t = PeerTable::new(4, 5);
        let addr = |i: u64| IpAddr::V4(Ipv4Addr::new(203, 0, 113, (i % 8) as u8));
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for n in 0..5_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let a = addr(x >> 20);
            let runs = 2 + (x >> 50) % 8;
            for _ in 0..runs {
                t.allow(at(n), &a, SEC, 2);
            }
            assert!(!t.allow(at(n), &a, SEC, 2).0, "{a}: a burst of 2 after {runs} messages");
            assert_eq!(t.slots[t.recent].key, PeerTable::key(&a), "step {n}");
            assert_eq!(t.recent_low, PeerTable::key(&a)[1]);
            let mut keys: Vec<_> = t.slots.iter().map(|s| s.key).filter(|k| *k != EMPTY).collect();
            let len = keys.len();
            keys.sort_unstable();
            keys.dedup();
            assert_eq!(keys.len(), len, "a key in two slots at step {n}");
        }
    }

    #[test]
    fn ipv4_keys_take_the_precomputed_fold() {
        // The same home slots as the general fold, in a table large enough to tell slots apart.
        for seed in [0u64, 5, u64::MAX] {
            let t = PeerTable::new(MAX_PEER_TABLE_SIZE, seed);
            for i in 0..1000u32 {
                let key = PeerTable::key(&IpAddr::V4(Ipv4Addr::from(i.wrapping_mul(0x9e37_79b9))));
                let general = (fold(t.seed, key[0]) ^ key[1]).wrapping_mul(t.mul) >> 32 >> t.shift;
                assert_eq!(t.home(key), general as usize, "seed {seed}, key {key:?}");
            }
        }
    }

    #[test]
    fn peers_are_independent_and_families_distinct() {
        let mut t = PeerTable::new(64, 7);
        let b = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 8));
        // An IPv6 address whose low 32 bits equal A's IPv4 address.
        let a6 = IpAddr::V6(Ipv6Addr::from(u32::from(Ipv4Addr::new(198, 51, 100, 7)) as u128));
        assert!((0..1000).any(|_| !(t.allow(at(0), &A, SEC, 6).0)), "never refused");
        assert!(t.allow(at(0), &b, SEC, 6).0);
        assert!(t.allow(at(0), &a6, SEC, 6).0);
        assert_eq!(t.occupied(), 3);
    }

    #[test]
    fn the_shortcut_filter_is_not_the_key() {
        // An IPv6 source whose key's low word is the last (refused) IPv4 destination's: the
        // shortcut's filter matches, the slot's key does not, so it gets a bucket of its own
        // (trusting the filter, an attacker picking such sources would spend a victim's).
        let mut t = PeerTable::new(64, 11);
        let a6 = IpAddr::V6(Ipv6Addr::from(u32::from(Ipv4Addr::new(198, 51, 100, 7)) as u128));
        assert_eq!(PeerTable::key(&a6)[1], PeerTable::key(&A)[1]);
        assert!((0..1000).any(|_| !(t.allow(at(0), &A, SEC, 6).0)), "never refused");
        assert!(!t.allow(at(0), &A, SEC, 6).0);
        assert!(t.allow(at(0), &a6, SEC, 6).0, "a bucket of its own");
        assert!(!t.allow(at(0), &A, SEC, 6).0, "A still refused");
        assert_eq!(t.occupied(), 2);
    }

    #[test]
    fn full_window_evicts_the_fullest() {
        // Four slots, four probes: every address shares one window whatever the hash.
        let mut t = PeerTable::new(4, 3);
        let addr = |i: u8| IpAddr::V4(Ipv4Addr::new(203, 0, 113, i));
        for i in 0..4u8 {
            assert!(
                (0..1000).any(|_| !(t.allow(at(i as u64), &addr(i), SEC, 6).0)),
                "never refused"
            );
        }
        assert_eq!(t.occupied(), 4);
        // A fifth destination takes the slot of the fullest (addr 0, whose burst was spent first).
        assert!(t.allow(at(10), &addr(4), SEC, 6).0);
        assert_eq!(t.occupied(), 4);
        // The others kept their exhausted buckets...
        for i in 1..4u8 {
            assert!(!t.allow(at(11), &addr(i), SEC, 6).0, "addr {i}");
        }
        // ...and the evicted one comes back with a full burst (evicting addr 4, now the fullest).
        for i in 0..6 {
            assert!(t.allow(at(12), &addr(0), SEC, 6).0, "message {i}");
        }
        assert!(!t.allow(at(12), &addr(0), SEC, 6).0);
    }

    #[test]
    fn families_and_odd_addresses_keep_their_own_buckets() {
        // An IPv4 address and the IPv6 address with the same low bits; 0.0.0.0 (whose low word
        // is zero like an empty slot's); an IPv6 address in the IPv4 tag's range.
        let v4 = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
        let v6 = IpAddr::V6(Ipv6Addr::from(0xc000_0201u128));
        let zero = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        let tagged = IpAddr::V6(Ipv6Addr::from(u128::MAX << 64 | 0xc000_0201));
        let mut t = PeerTable::new(64, 7);
        for _ in 0..6 {
            assert!(t.allow(at(0), &v4, SEC, 6).0);
        }
        assert!(!t.allow(at(0), &v4, SEC, 6).0, "burst of 6 spent");
        for a in [v6, zero, tagged] {
            assert!(t.allow(at(0), &a, SEC, 6).0, "{a} has a bucket of its own");
        }
        assert_eq!(t.occupied(), 4);
    }

    #[test]
    fn refund_gives_one_message_back() {
        let mut t = PeerTable::new(16, 0);
        let mut last = 0;
        loop {
            let (ok, idx) = t.allow(at(0), &A, SEC, 6);
            if !ok {
                break;
            }
            last = idx;
        }
        t.refund(last, SEC);
        assert!(t.allow(at(0), &A, SEC, 6).0);
        assert!(!t.allow(at(0), &A, SEC, 6).0);
        // Never above the cap.
        for _ in 0..20 {
            t.refund(last, SEC);
        }
        assert_eq!((0..10).filter(|_| t.allow(at(0), &A, SEC, 6).0).count(), 6);
    }

    #[test]
    fn table_size_is_a_clamped_power_of_two() {
        assert_eq!(PeerTable::new(4096, 0).size(), 4096);
        assert_eq!(PeerTable::new(1000, 0).size(), 1024);
        assert_eq!(PeerTable::new(0, 0).size(), 1);
        assert_eq!(PeerTable::new(usize::MAX, 0).size(), MAX_PEER_TABLE_SIZE);
        // A one-slot table still works (every destination evicts the last).
        let mut t = PeerTable::new(1, 0);
        assert!(t.allow(at(0), &A, SEC, 6).0);
    }

    #[test]
    fn v6_interval_scaling_like_linux() {
        assert_eq!(v6_peer_interval(SEC, 128), SEC);
        assert_eq!(v6_peer_interval(SEC, V6_PEER_PLEN), SEC);
        assert_eq!(v6_peer_interval(SEC, 96), SEC >> 1);
        assert_eq!(v6_peer_interval(SEC, 64), SEC >> 2);
        assert_eq!(v6_peer_interval(SEC, 48), SEC >> 2);
        assert_eq!(v6_peer_interval(SEC, 0), SEC >> 4);
    }
}
