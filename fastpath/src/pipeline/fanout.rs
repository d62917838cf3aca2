//! Choosing a service's socket for a packet: fanout by flow hash, round robin or random, with
//! the rollover of Linux's af_packet ("packet: refine rollover", 2015).
//!
//! The decision, for the socket `s` the fanout mode picks:
//! 1. room of `s` after this packet: NORMAL (more than 25% stays free), LOW (some stays free)
//!    or NONE; anything but NORMAL flags `s` under pressure;
//! 2. stay on `s` if NORMAL, or if LOW and the packet's flow is not huge (more than half of the
//!    socket's last 16 flow hashes equal it) — so ordinary flows are not reordered while a huge
//!    flow moves early;
//! 3. otherwise scan the other sockets, starting at the one remembered from the last rollover
//!    away from `s`, skipping `s` and sockets under pressure, and take the first with NORMAL room
//!    (remember it; count a rollover, and a huge rollover if `s` was only LOW);
//! 4. if none has NORMAL room the rollover failed (counted): the packet stays on `s` if it
//!    fits at all, and is dropped as `socket_full` if not.
//!
//! Most packets need none of it: while a socket's room stays NORMAL and its backlog below half
//! (where the flow limit does nothing), the packet stays on the socket its mode picks. The first
//! packet of a burst for a socket takes the whole decision and leaves a bound, the staged count
//! up to which that still holds (the snapshot of the ring is fixed for the burst and staged
//! packets only add); the next ones are checked against the bound alone
//! ([`FanoutState::choose_fast`], inlined into the pipeline for one-socket services, and
//! [`FanoutState::choose_quick`]), which makes exactly the choices [`FanoutState::choose`] would.
//!
//! The remembered socket, the round-robin cursor and the random generator are per RX lcore
//! (the kernel keeps the first per socket; keeping it per lcore removes a shared write without
//! changing the rule). Room counts the packets this lcore has staged for a socket in the current
//! burst and not yet enqueued.

use super::flow_limit::FlowLimit;
use crate::socket::{Room, Socket};
use std::sync::Arc;

/// A packet's flow hash as the fanout asks for it: only a decision that needs it computes it
/// (hash mode over more than one socket, the flow limit at half backlog, the huge-flow test at
/// LOW room). A service with one socket below half backlog never hashes; in software (no NIC
/// hash) that is a tenth of the RX lcore's time on the open-port benchmark.
pub trait FlowHash {
    /// The hash (the same value every time it is asked).
    fn get(&mut self) -> u32;
}

impl FlowHash for u32 {
    #[inline(always)]
    fn get(&mut self) -> u32 {
        *self
    }
}

/// A hash computed by `F` the first time it is asked, then remembered.
pub struct HashOnDemand<F> {
    compute: F,
    value: Option<u32>,
}

impl<F: FnMut() -> u32> HashOnDemand<F> {
    /// A hash that `compute` gives when first needed.
    #[inline(always)]
    pub fn new(compute: F) -> Self {
        HashOnDemand { compute, value: None }
    }
}

impl<F: FnMut() -> u32> FlowHash for HashOnDemand<F> {
    #[inline]
    fn get(&mut self) -> u32 {
        match self.value {
            Some(v) => v,
            None => {
                let v = (self.compute)();
                self.value = Some(v);
                v
            }
        }
    }
}

/// How a packet picks its socket before rollover.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FanoutMode {
    /// By flow hash (every packet of a flow to one socket).
    Hash,
    /// In turn.
    RoundRobin,
    /// At random.
    Random,
}

/// A service's sockets in one generation: indices into [`super::Tables::sockets`].
#[derive(Clone, Debug)]
pub struct Group {
    /// Global socket indices, in socket order.
    pub sockets: Vec<usize>,
    /// Fanout mode.
    pub mode: FanoutMode,
    /// Whether packets may roll over to another socket.
    pub rollover: bool,
    /// Whether huge flows roll over early, at LOW room (as af_packet's huge-flow rule); without it
    /// packets move only when their socket has no room.
    pub huge_flows: bool,
    /// Whether the flow limit (when `[flow_limit]` enables it) sheds this group's dominant
    /// flows. Off for the kernel path by default: Linux's own flow limit is off by default
    /// (`net.core.flow_limit_cpu_bitmap`), and a lone TCP bulk flow is always "dominant".
    pub flow_limit: bool,
}

impl Group {
    /// The group position a flow of `hash` takes before rollover, when the mode alone decides
    /// it (hash mode, or a single socket); `None` for round robin and random over several,
    /// which the RX lcore's cursor or generator decide. What `fastpathctl flow` names.
    pub fn hash_position(&self, hash: u32) -> Option<usize> {
        match self.mode {
            _ if self.sockets.len() == 1 => Some(0),
            FanoutMode::Hash if !self.sockets.is_empty() => Some(self.hash_position_of(hash)),
            _ => None,
        }
    }

    /// Hash mode's position: multiply-shift maps the hash onto 0..n without a division (Linux's
    /// reciprocal_scale).
    #[inline(always)]
    fn hash_position_of(&self, hash: u32) -> usize {
        ((hash as u64 * self.sockets.len() as u64) >> 32) as usize
    }
}

/// Where a packet goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Stage it for this socket (global index).
    Socket(usize),
    /// No room anywhere it may go: drop as `socket_full`, counted on this socket.
    Full(usize),
    /// Its socket is at least half full and its flow dominates: drop as `flow_limited`.
    FlowLimited(usize),
}

/// One RX lcore's private view of one socket.
///
/// Kept together and a cache line each: the per-packet decision loads one base pointer instead
/// of four, and a line-aligned allocation shares no line with another heap object some other
/// thread writes (with four small `Vec`s, `malloc` packed them among whatever the generation's
/// build allocated next; sampling the open-port benchmark put a sixth of the RX lcore's time on
/// the first of these loads).
#[derive(Clone, Copy, Debug, Default)]
#[repr(align(64))]
struct SocketView {
    /// The ring's length as read at the socket's first use in the current burst. A ring's
    /// length is two loads from lines the consumer and other producers keep writing; reading it
    /// once per burst, not per packet, keeps the common path off those lines (the packets staged
    /// since then are counted on top). For a single-producer ring, the producer's own view
    /// unless `snap_exact` ([`FanoutState::queued`]).
    snap: u32,
    /// Whether `snap` is the ring's true length (else an upper bound of it).
    snap_exact: bool,
    /// The burst `snap` was read in, or [`CARRIED`].
    snap_burst: u32,
    /// Packets staged in the current burst.
    staged: u32,
    /// The group position rolled over to last time.
    remembered: u16,
    /// The first backlog at which a rule could decide something other than "stay" for this
    /// socket (its group's rules at its capacity), once a decision has computed it; 0 before.
    rule: u32,
    /// While `staged` is below this (in the burst `snap` was read in), the next packet for this
    /// socket stays here for certain: the room after it is NORMAL and the backlog below half, so
    /// neither rollover nor the flow limit can decide otherwise (see [`FanoutState::stays`]).
    fast_end: u32,
}

/// `SocketView::snap_burst` of a snapshot carried from this lcore's last enqueue
/// ([`FanoutState::carry`]): valid in every burst until the next one. Bursts count from 1 to
/// `u32::MAX - 1`; 0, a new view's, is no snapshot.
const CARRIED: u32 = u32::MAX;

/// The first backlog whose room after one more packet is no longer NORMAL
/// ([`Room::after_one_more`]: NORMAL needs `capacity - queued - 1 > capacity / 4`).
#[inline]
fn room_rule(capacity: usize) -> usize {
    (capacity - (capacity >> 2)).saturating_sub(1)
}

/// The first backlog at which the flow limit looks at the flow (`queued * 2 >= capacity`).
#[inline]
fn flow_rule(capacity: usize) -> usize {
    capacity.div_ceil(2)
}

/// The lowest backlog at which a fanout rule may decide something other than "stay", whether
/// or not rollover and the flow limit are on.
#[inline]
fn first_rule(capacity: usize) -> usize {
    room_rule(capacity).min(flow_rule(capacity))
}

/// One RX lcore's fanout state for one generation.
#[derive(Clone, Debug)]
pub struct FanoutState {
    /// This lcore's slot in the sockets' counters.
    pub slot: usize,
    rr: u32,
    rng: u64,
    /// Per global socket: this lcore's view of it (one cache line each, see [`SocketView`]).
    view: Vec<SocketView>,
    /// Global sockets with staged packets, in first-staged order.
    touched: Vec<usize>,
    /// This lcore's flow-limit table, if the limit is on here.
    pub flow_limit: Option<FlowLimit>,
    /// The current burst.
    burst: u32,
}

impl FanoutState {
    /// State for `sockets` sockets, for the lcore in counter slot `slot`; `seed` seeds the random
    /// generator (any value; the pipeline's comes from the OS, [`crate::seed`]).
    pub fn new(sockets: usize, slot: usize, seed: u64) -> Self {
        FanoutState {
            slot,
            rr: 0,
            rng: seed | 1,
            view: vec![SocketView::default(); sockets],
            touched: Vec::with_capacity(sockets),
            flow_limit: None,
            burst: 1,
        }
    }

    /// Packets in `socket` (global index `s`) counting this lcore's staged ones.
    ///
    /// A single-producer ring's length is first taken as its producer sees it, without reading
    /// the consumer's line: an upper bound. Every rule is a threshold that a larger backlog only
    /// makes more likely to trigger (flow limit at half, rollover once the room is not NORMAL,
    /// full at capacity), so below the lowest of them ([`first_rule`]) the bound decides what
    /// the true length would; from there on the true length is read once and used for the rest
    /// of the burst. The choices are the ones an exact read at the burst's start gives (a test
    /// holds them to it).
    #[inline]
    fn queued(&mut self, s: usize, socket: &Socket) -> usize {
        let burst = self.burst;
        let v = &mut self.view[s];
        if v.snap_burst != burst && v.snap_burst != CARRIED {
            let (len, exact) = socket.producer_len(self.slot, false);
            v.snap = len as u32;
            v.snap_exact = exact;
            v.snap_burst = burst;
            // The previous burst's bound is void: `choose` opens the fast path again once it
            // has staged a packet here with the new snapshot.
            v.fast_end = 0;
        }
        let queued = v.snap as usize + v.staged as usize;
        if v.snap_exact || queued < first_rule(socket.capacity()) {
            return queued;
        }
        v.snap = socket.producer_len(self.slot, true).0 as u32;
        v.snap_exact = true;
        // Exact now, in this burst only: a carried snapshot kept as exact would outlive the
        // consumer's next take (and hold a full socket full until this lcore enqueued to it
        // again, which it then never would). The carried bound goes with it (`stays` trusts
        // `fast_end` alone): `choose` opens the way again if it stages a packet here.
        v.snap_burst = burst;
        v.fast_end = 0;
        v.snap as usize + v.staged as usize
    }

    /// The random generator's state, to seed the next generation's state with
    /// (`Pipeline::apply`), so the sequence goes on rather than starting again.
    pub fn random_state(&self) -> u64 {
        self.rng
    }

    #[inline]
    fn next_random(&mut self) -> u32 {
        // xorshift64*: cheap, lcore-local, good enough for slot picking and random fanout.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
    }

    #[inline]
    fn stage(&mut self, socket: usize) {
        let v = &mut self.view[socket];
        if v.staged == 0 {
            self.touched.push(socket);
        }
        v.staged += 1;
    }

    /// Packets staged for `socket` in this burst.
    #[inline]
    pub fn staged(&self, socket: usize) -> usize {
        self.view[socket].staged as usize
    }

    /// The sockets with staged packets.
    pub fn touched(&self) -> &[usize] {
        &self.touched
    }

    /// The burst's staged packets were enqueued (or dropped): start counting afresh.
    pub fn burst_done(&mut self) {
        // A bound opened in this burst ends with it; a carried one (`carry`, after this
        // burst's enqueue) holds until the next enqueue. Only a touched socket can have one
        // of this burst (`open_fast` follows a packet staged there), so `stays` needs no test
        // of the snapshot's burst.
        for &s in &self.touched {
            let v = &mut self.view[s];
            v.staged = 0;
            if v.snap_burst != CARRIED {
                v.fast_end = 0;
            }
        }
        self.touched.clear();
        self.burst = self.burst % (CARRIED - 1) + 1;
    }

    /// The common case of [`FanoutState::choose`] for a service with one socket, inlined into
    /// the pipeline: see [`FanoutState::stays`]. `None` leaves the packet to `choose` (or
    /// [`FanoutState::choose_quick`]), which also opens the fast path for the rest of the burst.
    #[inline(always)]
    pub fn choose_fast(&mut self, group: &Group) -> Option<usize> {
        let single = match group.sockets.as_slice() {
            &[gi] => Some(gi),
            _ => None,
        };
        self.choose_fast_single(single)
    }

    /// [`FanoutState::choose_fast`] for a service whose one socket, if it has one, is `single`
    /// (`ServiceTable::single_socket`: no read of the group's list).
    #[inline(always)]
    pub fn choose_fast_single(&mut self, single: Option<usize>) -> Option<usize> {
        let gi = single?;
        self.stays(gi).then_some(gi)
    }

    /// After the burst's enqueue to socket `s`: the queue's length as its one producer (this
    /// lcore) then sees it, `len`, exact or not, becomes the snapshot of the next burst, and
    /// with it the bound below which the next packets stay without a decision. Only for a
    /// socket with one queue and one producer (`Socket::carries`): nothing but this lcore adds
    /// to it, so a length it saw remains an upper bound until it enqueues again.
    ///
    /// With many sockets a burst's packets go to different ones, each its first of the burst; with
    /// a snapshot read at that first packet, every packet took the decision and read its socket's
    /// ring, a chain of misses (socket, queue, ring) on the pipeline's critical path
    /// (benches/NOTES.md, "Many sockets"). Carried from the enqueue, whose lines are already in
    /// cache, the packet stays on its bound alone.
    #[inline]
    pub fn carry(&mut self, s: usize, len: usize, exact: bool) {
        let v = &mut self.view[s];
        v.snap = len.min(u32::MAX as usize) as u32;
        v.snap_exact = exact;
        v.snap_burst = CARRIED;
        v.fast_end = v.rule.saturating_sub(v.snap);
    }

    /// Whether the next packet for socket `gi` stays there for certain, and if so stages it:
    /// this burst's snapshot of its ring and the packets staged since leave no decision to
    /// make — the packet stays (NORMAL room, or without rollover room at all) and the backlog
    /// is below half, where the flow limit does nothing. The first packet of each burst for a
    /// socket is never certain (it reads the ring's length); `choose` then opens the way for
    /// the next ones.
    ///
    /// Exactly `choose`'s choice, not an approximation: the room only shrinks within a burst
    /// (the snapshot is fixed, staged packets only add), so a bound computed at one packet
    /// holds for the next until `staged` reaches it. A test holds the two to the same choices.
    #[inline(always)]
    fn stays(&mut self, gi: usize) -> bool {
        let Some(v) = self.view.get_mut(gi) else {
            return false;
        };
        // A bound is non-zero only while its snapshot holds (of this burst, or carried):
        // `burst_done` and `queued` clear it when it stops holding, once a socket and burst,
        // not a test of the snapshot's burst here for every packet (benches/NOTES.md, "Per-burst
        // reads and the closed port's decision").
        if v.staged < v.fast_end {
            debug_assert!(v.snap_burst == self.burst || v.snap_burst == CARRIED);
            // The burst's first packet here when the bound was carried from the last enqueue
            // (`carry`); otherwise `choose` staged one already and listed the socket.
            let first = v.staged == 0;
            v.staged += 1;
            if first {
                self.touched.push(gi);
            }
            return true;
        }
        false
    }

    /// Opens the fast path for socket `gi` (of `group`, of `capacity`) just after `choose`
    /// staged a packet there with NORMAL room (or, without rollover, with any room): the
    /// staged count up to which the next packets need no decision.
    #[inline]
    fn open_fast(&mut self, gi: usize, group: &Group, capacity: usize) {
        // The first backlog at which each rule could decide something other than "stay".
        let room = if group.rollover { room_rule(capacity) } else { capacity };
        let flow = if self.flow_limit.is_some() && group.flow_limit {
            flow_rule(capacity)
        } else {
            usize::MAX
        };
        let v = &mut self.view[gi];
        v.rule = room.min(flow).min(u32::MAX as usize) as u32;
        v.fast_end = v.rule.saturating_sub(v.snap);
    }

    /// The group position the fanout mode picks for a packet of flow `hash` (advances the
    /// round-robin cursor or the random generator).
    #[inline]
    fn pick(&mut self, group: &Group, hash: &mut impl FlowHash) -> usize {
        let n = group.sockets.len();
        match group.mode {
            _ if n == 1 => 0,
            FanoutMode::Hash => group.hash_position_of(hash.get()),
            FanoutMode::RoundRobin => {
                self.rr = self.rr.wrapping_add(1);
                self.rr as usize % n
            }
            FanoutMode::Random => ((self.next_random() as u64 * n as u64) >> 32) as usize,
        }
    }

    /// [`FanoutState::choose`] with the fast path first, for any number of sockets: the socket
    /// the mode picks takes the packet without a decision when [`FanoutState::stays`] says so.
    #[inline]
    pub fn choose_quick(&mut self, group: &Group, sockets: &[Arc<Socket>], mut hash: impl FlowHash) -> Choice {
        let pos = self.pick(group, &mut hash);
        let gi = group.sockets[pos];
        if self.stays(gi) {
            return Choice::Socket(gi);
        }
        self.choose_at(group, sockets, pos, hash)
    }

    /// Picks the socket for a packet of flow `hash` in `group`: the decision in full, every
    /// rule asked (the reference [`FanoutState::choose_quick`] is held to).
    #[inline]
    pub fn choose(&mut self, group: &Group, sockets: &[Arc<Socket>], mut hash: impl FlowHash) -> Choice {
        let pos = self.pick(group, &mut hash);
        self.choose_at(group, sockets, pos, hash)
    }

    /// The decision for the packet whose socket the mode put at group position `pos`.
    #[inline]
    fn choose_at(&mut self, group: &Group, sockets: &[Arc<Socket>], pos: usize, mut hash: impl FlowHash) -> Choice {
        let n = group.sockets.len();
        let gi = group.sockets[pos];
        let s = &sockets[gi];
        let queued = self.queued(gi, s);
        // Flow limit first (as Linux's RPS flow limit): a dominant flow is shed, a large one may
        // still roll over below. Consulted while the socket has room, as Linux's enqueue_to_backlog
        // does (`qlen <= max_backlog && !skb_flow_limit()`): a packet for a full socket is
        // refused or rolled over without hashing it into the history, so a flood that keeps a
        // socket full costs the RX lcore no hash per packet.
        if let Some(fl) = self.flow_limit.as_mut().filter(|_| group.flow_limit) {
            if queued * 2 >= s.capacity() && queued < s.capacity() && fl.over_limit(hash.get()) {
                return Choice::FlowLimited(gi);
            }
        }
        let room = Room::after_one_more(queued, s.capacity());
        if !group.rollover {
            let c = self.stay_if_it_fits(gi, s);
            if c == Choice::Socket(gi) {
                self.open_fast(gi, group, s.capacity());
            }
            return c;
        }
        if room == Room::Normal {
            self.stage(gi);
            self.open_fast(gi, group, s.capacity());
            return Choice::Socket(gi);
        }
        s.mark_pressure();
        if room == Room::Low {
            let slot = self.next_random() as usize;
            if !group.huge_flows || !s.flow_is_huge(hash.get(), slot) {
                self.stage(gi);
                return Choice::Socket(gi);
            }
        }
        let start = self.view[gi].remembered as usize % n;
        let mut i = start;
        loop {
            if i != pos {
                let gj = group.sockets[i];
                let other = &sockets[gj];
                if !other.under_pressure() {
                    if Room::after_one_more(self.queued(gj, other), other.capacity()) == Room::Normal {
                        self.view[gi].remembered = i as u16;
                        let c = &s.counters.rx[self.slot];
                        c.rollover.inc();
                        if room == Room::Low {
                            c.rollover_huge.inc();
                        }
                        self.stage(gj);
                        return Choice::Socket(gj);
                    }
                    other.mark_pressure();
                }
            }
            i = if i + 1 == n { 0 } else { i + 1 };
            if i == start {
                break;
            }
        }
        s.counters.rx[self.slot].rollover_failed.inc();
        self.stay_if_it_fits(gi, s)
    }

    #[inline]
    fn stay_if_it_fits(&mut self, gi: usize, s: &Socket) -> Choice {
        if self.queued(gi, s) < s.capacity() {
            self.stage(gi);
            Choice::Socket(gi)
        } else {
            Choice::Full(gi)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::{SimQueue, SocketCounters};

    pub(super) fn group(n: usize, cap: usize, rollover: bool) -> (Group, Vec<Arc<Socket>>) {
        let sockets = (0..n)
            .map(|i| {
                Arc::new(Socket::new(
                    "svc",
                    i,
                    SimQueue::new(cap),
                    0,
                    Arc::new(SocketCounters::new(1, 1)),
                ))
            })
            .collect();
        (
            Group {
                sockets: (0..n).collect(),
                mode: FanoutMode::Hash,
                rollover,
                huge_flows: true,
                flow_limit: true,
            },
            sockets,
        )
    }

    pub(super) fn q(s: &Socket) -> &SimQueue {
        s.queue(0).sim().unwrap()
    }

    /// A hash the Hash mode maps to position `pos` of `n`.
    pub(super) fn hash_for(pos: usize, n: usize) -> u32 {
        ((pos as u64 * (1u64 << 32) + (1u64 << 31)) / n as u64) as u32
    }

    #[test]
    fn normal_room_stays_without_touching_shared_state() {
        let (g, s) = group(4, 100, true);
        let mut st = FanoutState::new(4, 0, 1);
        for pos in 0..4 {
            assert_eq!(st.choose(&g, &s, hash_for(pos, 4)), Choice::Socket(pos));
        }
        assert_eq!(st.touched(), &[0, 1, 2, 3]);
        assert!(s.iter().all(|s| !s.under_pressure()));
        assert_eq!(s[0].counters.sum(|c| &c.rollover), 0);
    }

    #[test]
    fn low_room_keeps_small_flows_and_moves_huge_ones() {
        let (g, s) = group(4, 100, true);
        q(&s[1]).set_len(80); // LOW: 19 free after one more
        let mut st = FanoutState::new(4, 0, 7);
        let small = hash_for(1, 4);
        assert_eq!(
            st.choose(&g, &s, small),
            Choice::Socket(1),
            "a flow seen once is not huge"
        );
        assert!(s[1].under_pressure(), "LOW room flags the socket");
        st.burst_done();
        // One flow dominating the history becomes huge and moves while room is only LOW.
        let huge = hash_for(1, 4) + 1;
        let mut moved = 0;
        for _ in 0..64 {
            if let Choice::Socket(i) = st.choose(&g, &s, huge) {
                if i != 1 {
                    moved += 1;
                }
            }
            st.burst_done();
        }
        assert!(moved > 0, "the huge flow rolled over");
        let c = &s[1].counters.rx[0];
        assert_eq!(c.rollover.get(), moved);
        assert_eq!(
            c.rollover_huge.get(),
            moved,
            "every one of them was a huge rollover from LOW room"
        );
        assert_eq!(c.rollover_failed.get(), 0);
    }

    #[test]
    fn scan_starts_at_remembered_skips_pressure_and_needs_normal_room() {
        let (g, s) = group(4, 100, true);
        q(&s[0]).set_len(99); // NONE
        q(&s[1]).set_len(10);
        s[1].mark_pressure(); // skipped although it has room
        q(&s[2]).set_len(80); // LOW: not good enough, gets flagged
        q(&s[3]).set_len(10);
        let mut st = FanoutState::new(4, 0, 3);
        assert_eq!(st.choose(&g, &s, hash_for(0, 4)), Choice::Socket(3));
        assert!(s[2].under_pressure());
        assert_eq!(s[0].counters.rx[0].rollover.get(), 1);
        assert_eq!(
            s[0].counters.rx[0].rollover_huge.get(),
            0,
            "NONE room: not a huge-flow rollover"
        );
        // Remembered: the next scan starts at socket 3, even though 1 lost its pressure flag.
        s[1].consumer_update_pressure();
        assert!(!s[1].under_pressure());
        assert_eq!(st.choose(&g, &s, hash_for(0, 4)), Choice::Socket(3));
        // Staged packets count: fill socket 3 up to its LOW boundary through staging.
        q(&s[3]).set_len(73);
        st.burst_done();
        assert_eq!(st.choose(&g, &s, hash_for(0, 4)), Choice::Socket(3)); // 73 queued + 1: 26 free
        assert_eq!(st.choose(&g, &s, hash_for(0, 4)), Choice::Socket(1)); // 74 + 1 staged: LOW; wrap to 1
    }

    #[test]
    fn failed_rollover_stays_if_it_fits_else_socket_full() {
        let (g, s) = group(2, 10, true);
        q(&s[0]).set_len(9); // NONE, but one packet still fits
        q(&s[1]).set_len(9);
        let mut st = FanoutState::new(2, 0, 3);
        assert_eq!(st.choose(&g, &s, hash_for(0, 2)), Choice::Socket(0));
        assert_eq!(s[0].counters.rx[0].rollover_failed.get(), 1);
        assert_eq!(
            st.choose(&g, &s, hash_for(0, 2)),
            Choice::Full(0),
            "the staged packet filled it"
        );
        assert_eq!(s[0].counters.rx[0].rollover_failed.get(), 2);
        assert!(s[0].under_pressure() && s[1].under_pressure());
    }

    #[test]
    fn without_rollover_packets_stay_until_full() {
        let (g, s) = group(2, 4, false);
        let mut st = FanoutState::new(2, 0, 3);
        for _ in 0..4 {
            assert_eq!(st.choose(&g, &s, hash_for(1, 2)), Choice::Socket(1));
        }
        assert_eq!(st.choose(&g, &s, hash_for(1, 2)), Choice::Full(1));
        assert_eq!(s[1].counters.sum(|c| &c.rollover_failed), 0);
        assert!(!s[1].under_pressure());
    }

    #[test]
    fn round_robin_and_random_spread() {
        let (mut g, s) = group(4, 1000, true);
        let mut st = FanoutState::new(4, 0, 99);
        g.mode = FanoutMode::RoundRobin;
        let picks: Vec<_> = (0..8).map(|_| st.choose(&g, &s, 5)).collect();
        assert_eq!(picks, [1, 2, 3, 0, 1, 2, 3, 0].map(Choice::Socket));
        st.burst_done();
        g.mode = FanoutMode::Random;
        let mut seen = [0; 4];
        for _ in 0..400 {
            if let Choice::Socket(i) = st.choose(&g, &s, 5) {
                seen[i] += 1;
            }
            st.burst_done();
        }
        assert!(seen.iter().all(|&n| n > 50), "{seen:?}");
    }

    #[test]
    fn without_the_huge_flow_rule_packets_move_only_at_no_room() {
        let (mut g, s) = group(2, 100, true);
        g.huge_flows = false;
        q(&s[0]).set_len(80); // LOW
        let mut st = FanoutState::new(2, 0, 3);
        for _ in 0..40 {
            assert_eq!(
                st.choose(&g, &s, hash_for(0, 2)),
                Choice::Socket(0),
                "LOW room: stays, however huge"
            );
            st.burst_done();
        }
        q(&s[0]).set_len(99); // NONE
        assert_eq!(st.choose(&g, &s, hash_for(0, 2)), Choice::Socket(1));
        let c = &s[0].counters.rx[0];
        assert_eq!((c.rollover.get(), c.rollover_huge.get()), (1, 0));
    }

    /// The rollover experiment in small: 4 sockets, one flow far beyond one consumer's rate.
    /// Without the huge-flow rule the flow fills its socket and overflows at NONE; with it, the
    /// flow is spread while its socket still has room, and nothing is dropped.
    #[test]
    fn single_flow_storm_is_spread_without_drops() {
        for rollover in [false, true] {
            let (g, s) = group(4, 256, rollover);
            let mut st = FanoutState::new(4, 0, 11);
            let mut dropped = 0;
            for _round in 0..2000 {
                for _ in 0..32 {
                    match st.choose(&g, &s, 0xdead_beef) {
                        Choice::Socket(_) => {}
                        Choice::Full(_) | Choice::FlowLimited(_) => dropped += 1,
                    }
                }
                for (i, sock) in s.iter().enumerate() {
                    q(sock).push(st.staged(i));
                }
                st.burst_done();
                // Each consumer serves 10 packets per round: the flow sends 32.
                for sock in &s {
                    q(sock).pop(10);
                    sock.consumer_update_pressure();
                }
            }
            let delivered: Vec<usize> = s.iter().map(|x| x.len()).collect();
            if rollover {
                assert_eq!(
                    dropped, 0,
                    "spread over 4 consumers (40/round) the flow fits: {delivered:?}"
                );
                let c = s.iter().map(|x| x.counters.sum(|c| &c.rollover)).sum::<u64>();
                assert!(c > 0);
            } else {
                assert!(dropped > 40_000, "one consumer serves 10 of 32: {dropped}");
            }
        }
    }
}

#[cfg(test)]
mod ordering {
    use super::*;
    use crate::socket::{SimQueue, SocketCounters};
    use std::collections::VecDeque;

    /// With a huge flow rolled over, every other flow keeps its order: its packets all go to
    /// one socket, so their consumption order is their sending order.
    #[test]
    fn small_flows_keep_their_order_while_a_huge_flow_rolls_over() {
        let n = 4;
        let sockets: Vec<Arc<Socket>> = (0..n)
            .map(|i| {
                Arc::new(Socket::new(
                    "svc",
                    i,
                    SimQueue::new(64),
                    0,
                    Arc::new(SocketCounters::new(1, 1)),
                ))
            })
            .collect();
        let g = Group {
            sockets: (0..n).collect(),
            mode: FanoutMode::Hash,
            rollover: true,
            huge_flows: true,
            flow_limit: true,
        };
        let mut fifo: Vec<VecDeque<(u32, u32)>> = vec![VecDeque::new(); n];
        let mut st = FanoutState::new(n, 0, 5);
        let huge: u32 = 0x1000_0000; // maps to socket 0
        let small: Vec<u32> = (0..30u32)
            .map(|i| 0x4000_0000u32.wrapping_add(i.wrapping_mul(0x0813_5a7f)))
            .collect();
        let mut next_seq = vec![0u32; small.len() + 1];
        let mut consumed: Vec<(u32, u32)> = Vec::new();
        let mut dropped = 0;
        for round in 0..3000u32 {
            let mut burst: Vec<u32> = vec![huge; 20];
            for (i, &h) in small.iter().enumerate() {
                if (round + i as u32).is_multiple_of(3) {
                    burst.insert((i * 7) % burst.len(), h);
                }
            }
            for h in burst {
                let flow = if h == huge {
                    small.len() as u32
                } else {
                    small.iter().position(|&x| x == h).unwrap() as u32
                };
                let seq = next_seq[flow as usize];
                next_seq[flow as usize] += 1;
                match st.choose(&g, &sockets, h) {
                    Choice::Socket(s) => fifo[s].push_back((flow, seq)),
                    Choice::Full(_) | Choice::FlowLimited(_) => dropped += 1,
                }
            }
            for (i, s) in sockets.iter().enumerate() {
                s.queue(0).sim().unwrap().set_len(fifo[i].len());
            }
            st.burst_done();
            // Consumers: 8 packets per round each (32 in all, for 30 sent).
            for (i, s) in sockets.iter().enumerate() {
                for _ in 0..8 {
                    if let Some(p) = fifo[i].pop_front() {
                        consumed.push(p);
                    }
                }
                s.queue(0).sim().unwrap().set_len(fifo[i].len());
                s.consumer_update_pressure();
            }
        }
        assert_eq!(dropped, 0);
        let rolled: u64 = sockets.iter().map(|s| s.counters.sum(|c| &c.rollover)).sum();
        let rolled_huge: u64 = sockets.iter().map(|s| s.counters.sum(|c| &c.rollover_huge)).sum();
        assert!(rolled_huge > 1000, "the huge flow was spread: {rolled_huge}");
        assert_eq!(rolled, rolled_huge, "only the huge flow moved");
        let mut last = vec![None; small.len()];
        for (flow, seq) in consumed {
            if (flow as usize) < small.len() {
                if let Some(prev) = last[flow as usize] {
                    assert!(seq > prev, "flow {flow} reordered: {seq} after {prev}");
                }
                last[flow as usize] = Some(seq);
            }
        }
    }
}

#[cfg(test)]
mod flow_limit_tests {
    use super::tests::{group, hash_for, q};
    use super::*;
    use crate::pipeline::flow_limit::{FlowLimit, FlowLimitConfig};
    use crate::pipeline::{Pipeline, Tables};
    use crate::socket::{SimQueue, SocketCounters};

    fn one_socket(cap: usize, len: usize) -> (Group, Vec<Arc<Socket>>) {
        let q = SimQueue::new(cap);
        q.set_len(len);
        let s = vec![Arc::new(Socket::new(
            "svc",
            0,
            q,
            0,
            Arc::new(SocketCounters::new(1, 1)),
        ))];
        (
            Group {
                sockets: vec![0],
                mode: FanoutMode::Hash,
                rollover: true,
                huge_flows: true,
                flow_limit: true,
            },
            s,
        )
    }

    #[test]
    fn no_effect_below_half_backlog() {
        let (g, s) = one_socket(100, 49);
        let mut st = FanoutState::new(1, 0, 1);
        st.flow_limit = Some(FlowLimit::new(4096));
        for _ in 0..1000 {
            assert_eq!(st.choose(&g, &s, 42), Choice::Socket(0));
            st.burst_done();
        }
        assert_eq!(
            st.flow_limit.as_ref().unwrap().bucket(42),
            0,
            "nothing recorded below half"
        );
    }

    #[test]
    fn a_full_socket_refuses_without_recording_or_hashing_like_linux_backlog() {
        // Linux's enqueue_to_backlog asks skb_flow_limit() only while qlen <= max_backlog.
        let asked = std::cell::Cell::new(0);
        let (g, s) = one_socket(100, 100);
        let mut st = FanoutState::new(1, 0, 1);
        st.flow_limit = Some(FlowLimit::new(4096));
        for _ in 0..300 {
            assert_eq!(st.choose_quick(&g, &s, counted(42, &asked)), Choice::Full(0));
            st.burst_done();
        }
        assert_eq!(asked.get(), 0, "no hash for a packet the full socket refuses anyway");
        assert_eq!(
            st.flow_limit.as_ref().unwrap().bucket(42),
            0,
            "nothing recorded while full"
        );
        // One slot free again: the same dominant flow is recorded and, once dominant, shed.
        s[0].queue(0).sim().unwrap().set_len(99);
        let shed = (0..300)
            .filter(|_| {
                let c = st.choose_quick(&g, &s, counted(42, &asked));
                st.burst_done();
                c == Choice::FlowLimited(0)
            })
            .count();
        assert!(shed > 0 && asked.get() > 0, "shed {shed}, hashed {}", asked.get());
    }

    /// Counts how often the fanout asked for the hash.
    fn counted(hash: u32, asked: &std::cell::Cell<u32>) -> HashOnDemand<impl FnMut() -> u32 + '_> {
        HashOnDemand::new(move || {
            asked.set(asked.get() + 1);
            hash
        })
    }

    #[test]
    fn the_hash_is_computed_only_when_a_decision_needs_it_and_then_once() {
        let asked = std::cell::Cell::new(0);
        // One socket, below half backlog, flow limit on: nothing to decide by flow.
        let (g, s) = one_socket(100, 40);
        let mut st = FanoutState::new(1, 0, 1);
        st.flow_limit = Some(FlowLimit::new(4096));
        assert_eq!(st.choose(&g, &s, counted(42, &asked)), Choice::Socket(0));
        assert_eq!(asked.get(), 0, "one socket below half backlog: no hash");
        st.burst_done();
        // At half backlog the flow limit needs it.
        let (g, s) = one_socket(100, 50);
        assert_eq!(st.choose(&g, &s, counted(42, &asked)), Choice::Socket(0));
        assert_eq!(asked.get(), 1, "flow limit at half backlog: hashed");
        // LOW room with huge-flow detection needs it too (no flow limit here).
        let (g, s) = one_socket(100, 80);
        let mut st = FanoutState::new(1, 0, 1);
        asked.set(0);
        assert_eq!(st.choose(&g, &s, counted(42, &asked)), Choice::Socket(0));
        assert_eq!(asked.get(), 1, "LOW room: the huge-flow test hashed");
        // Hash mode over several sockets picks by it; asked once even when the flow limit
        // and the huge-flow test want it as well.
        let (g, s) = group(4, 100, true);
        for (i, sock) in s.iter().enumerate() {
            q(sock).push(if i == 2 { 80 } else { 10 });
        }
        let mut st = FanoutState::new(4, 0, 1);
        st.flow_limit = Some(FlowLimit::new(4096));
        asked.set(0);
        let c = st.choose(&g, &s, counted(hash_for(2, 4), &asked));
        assert_eq!(
            asked.get(),
            1,
            "hash mode: hashed once for position, limit and huge test"
        );
        assert!(matches!(c, Choice::Socket(_)));
        // Round robin over several sockets below half backlog: no hash.
        let (mut g, s) = group(4, 100, true);
        g.mode = FanoutMode::RoundRobin;
        let mut st = FanoutState::new(4, 0, 1);
        asked.set(0);
        st.choose(&g, &s, counted(7, &asked));
        assert_eq!(asked.get(), 0, "round robin: no hash");
    }

    #[test]
    fn a_dominant_flow_is_shed_at_half_backlog_before_rollover() {
        let (g, s) = one_socket(100, 50);
        let mut st = FanoutState::new(1, 0, 1);
        st.flow_limit = Some(FlowLimit::new(4096));
        let mut first_drop = None;
        for i in 0..300 {
            let c = st.choose(&g, &s, 42);
            st.burst_done();
            if c == Choice::FlowLimited(0) && first_drop.is_none() {
                first_drop = Some(i);
            }
        }
        assert_eq!(
            first_drop,
            Some(128),
            "the 129th packet of the last 256 is the first shed"
        );
        assert_eq!(s[0].counters.sum(|c| &c.rollover), 0, "shed, not rolled over");
        // Another flow still passes.
        assert_eq!(st.choose(&g, &s, 7), Choice::Socket(0));
    }

    fn tables(generation: u64, flow_limit: FlowLimitConfig) -> Arc<Tables> {
        Arc::new(Tables {
            generation,
            flow_limit,
            ..Default::default()
        })
    }

    #[test]
    fn reload_keeps_the_table_unless_its_length_changes() {
        let mut p = Pipeline::new(tables(1, FlowLimitConfig::default()), 0);
        assert_eq!(p.flow_limit_len(), Some(4096));
        p.fanout.flow_limit.as_mut().unwrap().over_limit(5);
        p.apply(tables(2, FlowLimitConfig::default()));
        assert_eq!(
            p.fanout.flow_limit.as_ref().unwrap().bucket(5),
            1,
            "same length: history kept"
        );
        p.apply(tables(
            3,
            FlowLimitConfig {
                table_len: 1024,
                ..Default::default()
            },
        ));
        assert_eq!(p.flow_limit_len(), Some(1024));
        assert_eq!(
            p.fanout.flow_limit.as_ref().unwrap().bucket(5),
            0,
            "new length: a whole new table"
        );
        p.apply(tables(
            4,
            FlowLimitConfig {
                enabled: false,
                ..Default::default()
            },
        ));
        assert_eq!(p.flow_limit_len(), None);
        p.apply(tables(
            5,
            FlowLimitConfig {
                rx_slots: Some(vec![1]),
                ..Default::default()
            },
        ));
        assert_eq!(p.flow_limit_len(), None, "slot 0 is not in the list");
        let q = Pipeline::new(
            tables(
                5,
                FlowLimitConfig {
                    rx_slots: Some(vec![1]),
                    ..Default::default()
                },
            ),
            1,
        );
        assert_eq!(q.flow_limit_len(), Some(4096));
    }
}

/// The random fanout's seed: the OS's, per pipeline, never the slot's.
#[cfg(test)]
mod seed_tests {
    use super::tests::group;
    use super::*;
    use crate::pipeline::{Pipeline, Tables};

    /// `n` picks of `p`'s random fanout over `g`, one burst each.
    fn picks(p: &mut Pipeline, g: &Group, s: &[Arc<Socket>], n: usize) -> Vec<Choice> {
        (0..n)
            .map(|_| {
                let c = p.fanout.choose(g, s, 5);
                p.fanout.burst_done();
                c
            })
            .collect()
    }

    /// How many of the picks of `a` and `b` are the same socket.
    fn agree(a: &[Choice], b: &[Choice]) -> usize {
        a.iter().zip(b).filter(|(x, y)| x == y).count()
    }

    /// Two pipelines for one slot over the same tables, as two starts of the daemon make: their
    /// random fanouts are independent sequences (a constant seed would make them the same at
    /// every start). Over 16 sockets two independent picks agree with probability 1/16, so 256 of
    /// them agree about 16 times, and 64 or more times (a quarter) with probability below 1e-19
    /// (Chernoff: exp(-256 D(1/4 || 1/16))); equal seeds agree all 256 times. The same holds for
    /// the sequence after a reload against the one before: it goes on, it does not start again.
    #[test]
    fn pipelines_of_one_slot_draw_different_random_fanouts() {
        let (mut g, s) = group(16, 1 << 20, false);
        g.mode = FanoutMode::Random;
        let tables = |generation| {
            Arc::new(Tables {
                generation,
                sockets: s.clone(),
                ..Default::default()
            })
        };
        let (mut a, mut b) = (Pipeline::new(tables(1), 0), Pipeline::new(tables(1), 0));
        let (x, y) = (picks(&mut a, &g, &s, 256), picks(&mut b, &g, &s, 256));
        assert!(agree(&x, &y) < 64, "{} of 256 picks the same", agree(&x, &y));
        // Every socket is picked in the 512: a spread, not a stuck generator (one missing has
        // probability below 16 (15/16)^512 < 1e-13).
        assert!((0..16).all(|i| x.contains(&Choice::Socket(i)) || y.contains(&Choice::Socket(i))));
        a.apply(tables(2));
        let z = picks(&mut a, &g, &s, 256);
        assert!(
            agree(&x, &z) < 64,
            "after a reload: {} of 256 picks as at the start",
            agree(&x, &z)
        );
    }
}

#[cfg(test)]
mod snapshot_tests {
    use super::*;
    use crate::socket::{PacketQueue, SocketCounters, SocketQueue};
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    /// A queue that counts how often its length is read (into a counter the test keeps).
    struct Counting(Arc<AtomicUsize>);

    impl PacketQueue for Counting {
        fn len(&self) -> usize {
            self.0.fetch_add(1, Relaxed);
            10
        }
        fn capacity(&self) -> usize {
            1000
        }
    }

    #[test]
    fn the_ring_length_is_read_once_per_burst_and_staged_packets_count_on_top() {
        let count = Arc::new(AtomicUsize::new(0));
        let s = vec![Arc::new(Socket::new(
            "svc",
            0,
            SocketQueue::Other(Box::new(Counting(count.clone()))),
            0,
            Arc::new(SocketCounters::new(1, 1)),
        ))];
        let g = Group {
            sockets: vec![0],
            mode: FanoutMode::Hash,
            rollover: true,
            huge_flows: true,
            flow_limit: true,
        };
        let mut st = FanoutState::new(1, 0, 1);
        let reads = || count.load(Relaxed);
        for _ in 0..32 {
            assert_eq!(st.choose(&g, &s, 1), Choice::Socket(0));
        }
        assert_eq!(reads(), 1, "one read for the whole burst");
        assert_eq!(st.queued(0, &s[0]), 10 + 32);
        st.burst_done();
        assert_eq!(st.choose(&g, &s, 1), Choice::Socket(0));
        assert_eq!(reads(), 2, "a new burst reads again");
    }
}

/// Sockets fed by several RX lcores: one queue per RX lcore, the rules over their sum.
#[cfg(test)]
mod many_lcores_tests {
    use super::*;
    use crate::pipeline::flow_limit::FlowLimit;
    use crate::socket::{SimQueue, SocketCounters};

    /// `n` sockets of capacity `cap`, each with a queue for each of `lcores` RX lcores.
    fn sockets(n: usize, cap: usize, lcores: usize) -> (Group, Vec<Arc<Socket>>) {
        let s = (0..n)
            .map(|i| {
                let queues = (0..lcores).map(|_| SimQueue::new(cap).into()).collect();
                Arc::new(Socket::with_queues(
                    "svc",
                    i,
                    queues,
                    0,
                    Arc::new(SocketCounters::new(lcores, 1)),
                ))
            })
            .collect();
        let g = Group {
            sockets: (0..n).collect(),
            mode: FanoutMode::Hash,
            rollover: true,
            huge_flows: true,
            flow_limit: true,
        };
        (g, s)
    }

    fn fill(s: &Socket, slot: usize, n: usize) {
        s.queue(slot).sim().unwrap().set_len(n);
    }

    #[test]
    fn room_counts_every_rx_lcores_queue() {
        // Capacity 100, NORMAL needs more than 25 free after the packet. Socket 0 holds 40 from
        // lcore 1 and 33 from lcore 2: lcore 0, with nothing of its own, sees 73 and stays.
        let (g, s) = sockets(2, 100, 3);
        let first = super::tests::hash_for(0, 2);
        fill(&s[0], 1, 40);
        fill(&s[0], 2, 33);
        let mut st = FanoutState::new(2, 0, 1);
        assert_eq!(st.choose(&g, &s, first), Choice::Socket(0));
        assert!(!s[0].under_pressure());
        // One more in lcore 2's queue: LOW room, so the socket is flagged (the flow is not huge
        // and stays); with lcore 1's queue one short of the capacity, NONE: it rolls over.
        fill(&s[0], 2, 34);
        let mut st = FanoutState::new(2, 0, 1);
        assert_eq!(st.choose(&g, &s, first), Choice::Socket(0));
        assert!(s[0].under_pressure(), "set by the producer that found LOW room");
        fill(&s[0], 1, 65);
        let mut st = FanoutState::new(2, 0, 1);
        assert_eq!(st.choose(&g, &s, first), Choice::Socket(1));
        assert_eq!(s[0].counters.rx[0].rollover.get(), 1, "counted on this lcore's slot");
        assert_eq!(s[0].counters.rx[1].rollover.get(), 0);
        // Full over the sum: nothing anywhere with NORMAL room and the sum at capacity.
        let (g, s) = sockets(2, 100, 2);
        for x in &s {
            fill(x, 0, 30);
            fill(x, 1, 70);
        }
        let mut st = FanoutState::new(2, 0, 1);
        assert_eq!(st.choose(&g, &s, super::tests::hash_for(0, 2)), Choice::Full(0));
    }

    #[test]
    fn the_flow_limit_looks_at_the_sum_from_any_lcore() {
        // Capacity 100: the limit applies from 50 queued; 30 of them are the other lcore's.
        let (mut g, s) = sockets(1, 100, 2);
        g.rollover = false;
        let mut st = FanoutState::new(1, 1, 1);
        st.flow_limit = Some(FlowLimit::new(64));
        let flow = 7u32;
        fill(&s[0], 0, 30);
        fill(&s[0], 1, 19);
        // 49 queued: below half, the dominant flow passes and is not even recorded.
        for _ in 0..300 {
            assert_eq!(st.choose(&g, &s, flow), Choice::Socket(0));
            st.burst_done();
        }
        fill(&s[0], 1, 20);
        // At half of the sum it is recorded, and shed once it holds more than half the history.
        let choices: Vec<Choice> = (0..300)
            .map(|_| {
                let c = st.choose(&g, &s, flow);
                st.burst_done();
                c
            })
            .collect();
        assert!(choices[..128].iter().all(|&c| c == Choice::Socket(0)));
        assert!(choices[128..].iter().all(|&c| c == Choice::FlowLimited(0)));
    }
}

#[cfg(test)]
mod fast_path_tests {
    use super::tests::{group, q};
    use super::*;
    use crate::pipeline::flow_limit::FlowLimit;
    use crate::socket::{SimQueue, SocketCounters};
    use proptest::prelude::*;

    fn set_len(s: &Socket, n: usize) {
        s.queue(0).sim().unwrap().set_len(n);
    }

    /// How `run` asks for each packet's socket.
    #[derive(Clone, Copy, Debug)]
    enum Ask {
        /// `choose` alone: the reference.
        Choose,
        /// `choose_fast` (the pipeline's inlined one-socket case), then `choose`.
        Fast,
        /// `choose_quick`.
        Quick,
    }

    /// What one lcore observes: the choices, then every counter and flag the decisions write.
    #[allow(clippy::too_many_arguments)]
    fn run(
        ask: Ask,
        n: usize,
        mode: FanoutMode,
        cap: usize,
        rollover: bool,
        limit: bool,
        bursts: &[(usize, Vec<u32>)],
        lag: usize,
    ) -> (Vec<Choice>, Vec<[u64; 4]>, Vec<bool>) {
        let (mut g, socks) = group(n, cap, rollover);
        for s in &socks {
            s.queue(0).sim().unwrap().set_producer_lag(lag);
        }
        g.mode = mode;
        let mut st = FanoutState::new(n, 0, 11);
        st.flow_limit = limit.then(|| FlowLimit::new(64));
        let mut choices = Vec::new();
        for (len, hashes) in bursts {
            for s in &socks {
                set_len(s, *len);
            }
            for &h in hashes {
                let c = match ask {
                    Ask::Choose => st.choose(&g, &socks, h),
                    Ask::Fast => match st.choose_fast(&g) {
                        Some(s) => Choice::Socket(s),
                        None => st.choose(&g, &socks, h),
                    },
                    Ask::Quick => st.choose_quick(&g, &socks, h),
                };
                choices.push(c);
            }
            let staged: Vec<usize> = (0..n).map(|s| st.staged(s)).collect();
            let from_choices = (0..n)
                .map(|s| {
                    let burst_start = choices.len() - hashes.len();
                    choices[burst_start..]
                        .iter()
                        .filter(|&&c| c == Choice::Socket(s))
                        .count()
                })
                .collect::<Vec<_>>();
            assert_eq!(staged, from_choices, "staged counts match the choices");
            for &s in st.touched() {
                assert!(st.staged(s) > 0, "only sockets with staged packets are touched");
            }
            assert_eq!(
                st.touched().len(),
                staged.iter().filter(|&&k| k > 0).count(),
                "every socket with staged packets is touched (else they are never enqueued)"
            );
            st.burst_done();
        }
        let counters = socks
            .iter()
            .map(|s| {
                let c = &s.counters.rx[0];
                [
                    c.rollover.get(),
                    c.rollover_huge.get(),
                    c.rollover_failed.get(),
                    c.full.get(),
                ]
            })
            .collect();
        let pressure = socks.iter().map(|s| s.under_pressure()).collect();
        (choices, counters, pressure)
    }

    proptest! {
        /// The fast path makes exactly the choices `choose` alone makes, with the same side
        /// effects, whatever the backlog, burst size, flows, rules, fanout mode and socket
        /// count (the random generator and the round-robin cursor advance alike); and so do
        /// both when the producer's view of each ring overstates its length (a single-producer
        /// ring whose consumer took packets the producer has not seen), against `choose` with
        /// exact lengths.
        #[test]
        fn the_fast_path_chooses_what_choose_would(
            n in 1usize..4,
            mode in prop::sample::select(vec![FanoutMode::Hash, FanoutMode::RoundRobin, FanoutMode::Random]),
            cap in 1usize..80,
            rollover: bool,
            limit: bool,
            bursts in prop::collection::vec(
                (0usize..90, prop::collection::vec(prop::sample::select(vec![1u32, 2, 0x8000_0001, 0xdead_beef]), 0..70)),
                1..8,
            ),
            lag in prop::sample::select(vec![0usize, 1, 5, 40, 1000]),
        ) {
            let slow = run(Ask::Choose, n, mode, cap, rollover, limit, &bursts, 0);
            prop_assert_eq!(&slow, &run(Ask::Fast, n, mode, cap, rollover, limit, &bursts, lag));
            prop_assert_eq!(&slow, &run(Ask::Quick, n, mode, cap, rollover, limit, &bursts, lag));
            prop_assert_eq!(&slow, &run(Ask::Choose, n, mode, cap, rollover, limit, &bursts, lag));
        }
    }

    #[test]
    fn the_fast_path_opens_after_the_first_packet_and_closes_at_the_first_bound() {
        // 100 slots, 40 queued: NORMAL while one more leaves more than 25 free (up to 73
        // queued), the flow limit from 50 queued.
        let (g, socks) = group(1, 100, true);
        set_len(&socks[0], 40);
        let mut st = FanoutState::new(1, 0, 3);
        st.flow_limit = Some(FlowLimit::new(64));
        assert_eq!(st.choose_fast(&g), None, "the first packet of a burst reads the ring");
        assert_eq!(st.choose(&g, &socks, 7), Choice::Socket(0));
        let fast = (0..100).take_while(|_| st.choose_fast(&g).is_some()).count();
        assert_eq!(fast, 9, "40 + 1 + 9 = 50: the flow limit's half backlog ends it");
        st.burst_done();
        st.flow_limit = None;
        assert_eq!(st.choose_fast(&g), None, "a new burst: the bound is void");
        assert_eq!(st.choose(&g, &socks, 7), Choice::Socket(0));
        let fast = (0..100).take_while(|_| st.choose_fast(&g).is_some()).count();
        assert_eq!(fast, 33, "the 34th packet sees 73 queued: the last with NORMAL room");
        assert_eq!(st.staged(0), 34);
    }

    /// What `RxEngine::end_burst` does for a socket that carries: the queue takes the staged
    /// packets and the producer's view of its length goes into the next bursts.
    fn enqueue_and_carry(st: &mut FanoutState, s: &Socket) {
        let staged = st.staged(0);
        q(s).push(staged);
        let (len, exact) = s.producer_len(0, false);
        st.carry(0, len, exact);
        st.burst_done();
    }

    #[test]
    fn a_carried_length_decides_later_bursts_without_a_read_and_never_holds_a_socket_full() {
        let mut socket = Socket::new("svc", 0, SimQueue::new(100), 0, Arc::new(SocketCounters::new(1, 1)));
        socket.sync.single_producer = true;
        assert!(socket.carries());
        let (g, _) = group(1, 100, false);
        let sockets = vec![Arc::new(socket)];
        let s = &sockets[0];
        let mut st = FanoutState::new(1, 0, 3);
        // The first burst decides once (no carried length yet) and opens the bound.
        assert_eq!(st.choose_fast(&g), None);
        assert_eq!(st.choose(&g, &sockets, 0u32), Choice::Socket(0));
        assert_eq!(st.choose_fast(&g), Some(0));
        enqueue_and_carry(&mut st, s);
        // The next burst's first packet stays on the carried length alone, and is listed for
        // the enqueue.
        assert_eq!(st.choose_fast(&g), Some(0), "carried: no decision, no read");
        assert_eq!(st.touched(), &[0]);
        st.burst_done();
        // The socket fills up (this lcore's enqueues) and the carried length says so.
        q(s).set_len(100);
        st.carry(0, 100, false);
        assert_eq!(st.choose_fast(&g), None, "no bound once the rules may decide");
        assert_eq!(st.choose(&g, &sockets, 0u32), Choice::Full(0));
        st.burst_done();
        // The consumer drains it; nothing was enqueued since, so nothing was carried: the
        // exact read of the full socket counted for its burst only, the next reads again.
        q(s).set_len(0);
        assert_eq!(
            st.choose(&g, &sockets, 0u32),
            Choice::Socket(0),
            "a full socket's read outlived its burst"
        );
        assert_eq!(st.choose_fast(&g), Some(0));
    }
}
