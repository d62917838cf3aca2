//! Service sockets: bounded packet queues that RX lcores fill and worker lcores drain, plus the
//! per-socket state the fanout rollover (as Linux's "packet: refine rollover") reads (room,
//! pressure flag, recent flow hashes) and the per-lcore counters it writes.
//!
//! The queue itself is a [`PacketQueue`] (a DPDK ring in the daemon, [`SimQueue`] in tests), so
//! the rollover decision is tested without DPDK. What is shared between lcores, and why:
//! - the queue's occupancy: read per decision, written by the ring's producers and consumer;
//! - the pressure flag: read per rollover scan; written by a sender only when it changes (so a
//!   socket under pressure does not bounce a cache line), and cleared by the socket's one
//!   consumer when occupancy falls to half — a single clearer, so no clearer races another;
//! - the flow-hash history: read and written only when the socket is already short of room
//!   (never on the common path), one cache line, no lock and no index — a random slot is
//!   overwritten, as Linux's rollover does; a lost update only blurs a hint.
//!
//! Counters are per lcore (one cache-line-aligned slot per lcore), summed when read.

use crate::stats::Counter;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};

/// Flow hashes remembered per socket: 16 × 4 bytes, one cache line.
pub const HISTORY_LEN: usize = 16;

/// A bounded packet queue as the fanout sees it.
pub trait PacketQueue: Send + Sync + 'static {
    /// Packets queued now (may be stale by the time it is used; the ring's own enqueue is the
    /// final arbiter of room).
    fn len(&self) -> usize;
    /// For a single-producer queue's one producer: its view of the length and whether that is
    /// exact. A view that is not exact is at least the true length (the consumer only takes),
    /// cheap to have (no read of the consumer's line); `fresh` asks for the true length now.
    /// Queues without such a view return [`PacketQueue::len`], exact.
    #[inline]
    fn producer_len(&self, fresh: bool) -> (usize, bool) {
        let _ = fresh;
        (self.len(), true)
    }
    /// Packets the queue can hold.
    fn capacity(&self) -> usize;
    /// Whether nothing is queued.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The queue behind a socket (or a sequence tunnel's hand-off): a closed set, so the lcores
/// reach the concrete queue by a match, never a downcast, and the fanout reads its occupancy
/// without a virtual call.
// The ring in place, not boxed: with many sockets an RX lcore meets each socket's state cold,
// and every pointer between the socket and its ring's producer line is one more miss waiting
// for the last (benches/NOTES.md, "Many sockets").
#[allow(clippy::large_enum_variant)]
pub enum SocketQueue {
    /// The daemon's: a DPDK ring of mbufs (in the socket's queue slice, apart from the socket's
    /// own lines; its indices on lines of their own).
    #[cfg(feature = "dpdk")]
    Ring(crate::dpdk::MbufRing),
    /// Lengths only, no packets: tests, benchmarks and the in-process corpus runner.
    Sim(SimQueue),
    /// Any other view of a queue (test doubles).
    Other(Box<dyn PacketQueue>),
}

impl SocketQueue {
    /// The simulated queue, if it is one.
    pub fn sim(&self) -> Option<&SimQueue> {
        match self {
            SocketQueue::Sim(q) => Some(q),
            _ => None,
        }
    }

    /// The DPDK ring, if it is one.
    #[cfg(feature = "dpdk")]
    #[inline(always)]
    pub fn ring(&self) -> Option<&crate::dpdk::MbufRing> {
        match self {
            SocketQueue::Ring(r) => Some(r),
            _ => None,
        }
    }
}

impl SocketQueue {
    /// Packets queued now ([`PacketQueue::len`]).
    #[inline]
    pub fn len(&self) -> usize {
        match self {
            #[cfg(feature = "dpdk")]
            SocketQueue::Ring(r) => r.len(),
            SocketQueue::Sim(q) => q.len(),
            SocketQueue::Other(q) => q.len(),
        }
    }
    /// The producer's view of the length ([`PacketQueue::producer_len`]).
    #[inline]
    pub fn producer_len(&self, fresh: bool) -> (usize, bool) {
        match self {
            #[cfg(feature = "dpdk")]
            SocketQueue::Ring(r) => r.producer_len(fresh),
            SocketQueue::Sim(q) => q.producer_len(fresh),
            SocketQueue::Other(q) => q.producer_len(fresh),
        }
    }
    /// Packets the queue can hold.
    #[inline]
    pub fn capacity(&self) -> usize {
        match self {
            #[cfg(feature = "dpdk")]
            SocketQueue::Ring(r) => r.capacity(),
            SocketQueue::Sim(q) => q.capacity(),
            SocketQueue::Other(q) => q.capacity(),
        }
    }
    /// Whether nothing is queued.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl From<SimQueue> for SocketQueue {
    fn from(q: SimQueue) -> Self {
        SocketQueue::Sim(q)
    }
}

#[cfg(feature = "dpdk")]
impl From<crate::dpdk::MbufRing> for SocketQueue {
    fn from(r: crate::dpdk::MbufRing) -> Self {
        SocketQueue::Ring(r)
    }
}

/// Who may use a queue at once, as its maker is told: DPDK's ring is cheaper with a single
/// producer or consumer (plain stores of its indices instead of a compare-and-swap per burst,
/// which waits for the line and for every store before it) and wrong with more than declared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueSync {
    /// Only one lcore ever enqueues (every socket queue: each RX lcore has its own).
    pub single_producer: bool,
    /// Only one lcore ever dequeues (a socket's one worker, a hand-off's owner).
    pub single_consumer: bool,
    /// The consumer only counts what it takes (a sink), and the producer frees it on its next
    /// enqueue (honoured with one producer and one consumer: `MbufRing`'s reclaiming slots, so
    /// for every socket queue of a sink).
    pub producer_reclaims: bool,
}

impl QueueSync {
    /// Any number of producers and consumers.
    pub const SHARED: QueueSync = QueueSync {
        single_producer: false,
        single_consumer: false,
        producer_reclaims: false,
    };
}

/// Room class of a socket for one more packet (Linux's `packet_rcv_has_room`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Room {
    /// More than 25% of the capacity stays free after this packet.
    Normal,
    /// Some room stays free, but not more than 25%.
    Low,
    /// Nothing would stay free.
    None,
}

impl Room {
    /// The room class for a queue of `capacity` holding `queued` packets, after one more.
    #[inline]
    pub fn after_one_more(queued: usize, capacity: usize) -> Room {
        let free_after = capacity as isize - queued as isize - 1;
        if free_after > (capacity >> 2) as isize {
            Room::Normal
        } else if free_after > 0 {
            Room::Low
        } else {
            Room::None
        }
    }
}

/// Counters one lcore keeps for one socket.
#[derive(Default, Debug)]
#[repr(align(64))]
pub struct SocketLcoreCounters {
    /// Packets this RX lcore enqueued to the socket (outcome `delivered`).
    pub delivered: Counter,
    /// Packets this RX lcore chose the socket for but could not enqueue (outcome `socket_full`).
    pub full: Counter,
    /// Packets whose chosen socket was this one and that moved to another.
    pub rollover: Counter,
    /// Of those, packets of a huge flow moved while this socket still had some room.
    pub rollover_huge: Counter,
    /// Rollovers that found no socket with NORMAL room.
    pub rollover_failed: Counter,
    /// Packets a worker took off the socket.
    pub dequeued: Counter,
    /// Echo action: datagrams sent back.
    pub echoed: Counter,
    /// Echo action: replies the worker's TX queue refused.
    pub tx_full: Counter,
    /// Echo action: packets that were not a complete UDP datagram (nothing to echo).
    pub invalid: Counter,
    /// Echo action: datagrams from a source port it never answers (reflection loops, see
    /// `pipeline::service::EchoPolicy`).
    pub refused: Counter,
    /// Sink action: packets consumed.
    pub sunk: Counter,
    /// Kernel action: packets written into a kernel interface.
    pub kernel: Counter,
}

/// Counters of one socket, one slot per lcore. Kept across reloads for a socket that stays.
#[derive(Debug)]
pub struct SocketCounters {
    /// Indexed by RX lcore slot (position in `[lcores] rx`).
    pub rx: Box<[SocketLcoreCounters]>,
    /// Indexed by worker slot (position in `[lcores] workers`).
    pub workers: Box<[SocketLcoreCounters]>,
}

impl SocketCounters {
    /// Zeroed counters for `rx` RX lcores and `workers` worker lcores.
    pub fn new(rx: usize, workers: usize) -> Self {
        SocketCounters {
            rx: (0..rx).map(|_| SocketLcoreCounters::default()).collect(),
            workers: (0..workers).map(|_| SocketLcoreCounters::default()).collect(),
        }
    }

    /// Sum of one counter over every slot.
    pub fn sum(&self, f: impl Fn(&SocketLcoreCounters) -> &Counter) -> u64 {
        self.rx.iter().chain(self.workers.iter()).map(|c| f(c).get()).sum()
    }
}

#[derive(Debug, Default)]
#[repr(align(64))]
struct History([AtomicU32; HISTORY_LEN]);

#[derive(Debug, Default)]
#[repr(align(64))]
struct Pressure(AtomicBool);

/// Per RX lcore slot: how many packets the consumer left in that slot's queue at its last take,
/// written only by the consumer, read by the producers (see [`Socket::producer_len`]).
#[derive(Debug)]
#[repr(align(128))]
struct Depth(Box<[AtomicU32]>);

/// One socket of a service.
///
/// Its queue is one single-producer, single-consumer queue per RX lcore (`queues[slot]`, filled
/// only by the RX lcore in counter slot `slot`), drained round robin by the socket's one worker:
/// no line is written by two producers, and the producer's enqueue is a plain store of its own
/// index. The socket's occupancy, which the fanout's rollover and the flow limit are about, is
/// the sum of its queues; `capacity` bounds that sum (each queue can hold the
/// whole capacity, so one RX lcore alone can fill the socket, as with one shared queue).
///
/// An RX lcore knows its own queue's length without a read of another core's line (its own
/// view, an upper bound). The other queues' lengths it takes from [`Depth`]: what the consumer
/// left in each after its last take, on one line the consumer writes only when a count
/// changes, so that the per-burst cost of the sum is one line whatever the number of RX
/// lcores, instead of two lines per other queue. Those counts lag the truth by what the other
/// RX lcores enqueued since the consumer's last poll (a lower bound of them); the hard bound
/// of what a socket holds is therefore its queues' capacities, which the packet pool's budget
/// charges.
///
/// Read per burst by its RX lcores and per poll by its worker: 128-byte aligned, so that no
/// heap object an lcore writes shares its lines (its own written fields are on lines of their
/// own too).
// In declaration order, what an RX lcore's enqueue reads first: the queues, the counters, the
// capacity and the flags share the first line (with many sockets each is met cold).
#[repr(C, align(128))]
pub struct Socket {
    /// One queue per RX lcore slot.
    queues: Box<[SocketQueue]>,
    /// Counters, shared with the socket's successor across reloads.
    pub counters: std::sync::Arc<SocketCounters>,
    /// The queues' capacity, read per packet by fanout: a plain field, not a virtual call.
    capacity: usize,
    /// Benchmark only: the RX lcore frees what it would enqueue here, counted delivered (the
    /// service's `free_on_rx`).
    pub free_on_rx: bool,
    /// A socket of the kernel path (an `action = "kernel"` service or the internal `kernel`
    /// service): what it takes is counted `kernel`, what it refuses `kernel_full`.
    pub kernel: bool,
    /// How its queues were made (a reload keeps a socket only for the same use).
    pub sync: QueueSync,
    /// The worker slot that drains it.
    pub worker: usize,
    /// The service's name.
    pub service: String,
    /// Index of the socket in its service.
    pub index: usize,
    pressure: Pressure,
    history: History,
    depth: Depth,
}

impl std::fmt::Debug for Socket {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "Socket({}/{}, {}/{} in {} queues)",
            self.service,
            self.index,
            self.len(),
            self.capacity,
            self.queues.len()
        )
    }
}

impl Socket {
    /// A socket over one `queue` (one RX lcore), drained by worker slot `worker`.
    pub fn new(
        service: &str,
        index: usize,
        queue: impl Into<SocketQueue>,
        worker: usize,
        counters: std::sync::Arc<SocketCounters>,
    ) -> Self {
        Socket::with_queues(service, index, vec![queue.into()], worker, counters)
    }

    /// A socket over `queues`, one per RX lcore slot, all of the same capacity (at least one
    /// queue), drained by worker slot `worker`.
    pub fn with_queues(
        service: &str,
        index: usize,
        queues: Vec<SocketQueue>,
        worker: usize,
        counters: std::sync::Arc<SocketCounters>,
    ) -> Self {
        assert!(!queues.is_empty(), "a socket has a queue per RX lcore");
        let capacity = queues[0].capacity();
        assert!(
            queues.iter().all(|q| q.capacity() == capacity),
            "a socket's queues have one capacity"
        );
        Socket {
            service: service.to_string(),
            index,
            free_on_rx: false,
            kernel: false,
            sync: QueueSync::SHARED,
            capacity,
            depth: Depth((0..queues.len()).map(|_| AtomicU32::new(0)).collect()),
            queues: queues.into_boxed_slice(),
            worker,
            counters,
            pressure: Pressure::default(),
            history: History::default(),
        }
    }

    /// Whether its RX lcore's view of its length, taken after an enqueue, stays an upper bound
    /// until that lcore's next enqueue: one queue, which only that lcore fills
    /// ([`crate::pipeline::fanout::FanoutState::carry`]).
    #[inline]
    pub fn carries(&self) -> bool {
        self.queues.len() == 1 && self.sync.single_producer
    }

    /// How many packets the socket holds at most (in all its queues; each queue too).
    #[inline]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The queue RX lcore slot `slot` fills.
    #[inline(always)]
    pub fn queue(&self, slot: usize) -> &SocketQueue {
        &self.queues[slot]
    }

    /// Every queue, by RX lcore slot.
    #[inline]
    pub fn queues(&self) -> &[SocketQueue] {
        &self.queues
    }

    /// Packets queued now in all queues (reads every queue's indices: for metrics and tests).
    pub fn len(&self) -> usize {
        self.queues.iter().map(SocketQueue::len).sum()
    }

    /// Whether nothing is queued in any queue.
    pub fn is_empty(&self) -> bool {
        self.queues.iter().all(SocketQueue::is_empty)
    }

    /// The socket's occupancy as RX lcore slot `slot` sees it, and whether that is exact: its
    /// own queue's producer view ([`PacketQueue::producer_len`]; `fresh` asks for the true
    /// length) plus the other queues' counts. With one queue that is the queue's own answer.
    /// The other queues count what their consumer last left in them (a DPDK ring's socket, see
    /// the type docs), or their length (any other queue: simulations and test doubles).
    ///
    /// Inlined with the other queues' sum out of line: as one function LLVM kept it a call for
    /// each socket a burst touched (benches/NOTES.md, "Many sockets"), where one queue's answer is
    /// a few loads.
    #[inline(always)]
    pub fn producer_len(&self, slot: usize, fresh: bool) -> (usize, bool) {
        let (own, exact) = self.queues[slot].producer_len(fresh);
        if self.queues.len() == 1 {
            return (own, exact);
        }
        (own + self.others_len(slot), exact)
    }

    /// What the queues other than slot `slot`'s hold, as [`Socket::producer_len`] counts them.
    #[inline(never)]
    fn others_len(&self, slot: usize) -> usize {
        let mut others = 0;
        for (j, q) in self.queues.iter().enumerate() {
            if j != slot {
                others += match q {
                    #[cfg(feature = "dpdk")]
                    SocketQueue::Ring(_) => self.depth.0[j].load(Relaxed) as usize,
                    q => q.len(),
                };
            }
        }
        others
    }

    /// The consumer, after taking from the queue of RX lcore slot `slot`: `left` packets stay
    /// in it as far as it knows. Written only when the count changes.
    #[inline]
    pub fn publish_depth(&self, slot: usize, left: usize) {
        let d = &self.depth.0[slot];
        let left = left.min(u32::MAX as usize) as u32;
        if d.load(Relaxed) != left {
            d.store(left, Relaxed);
        }
    }

    /// What the consumer last published for every queue, summed.
    #[cfg(feature = "dpdk")]
    #[inline]
    fn published_depth(&self) -> usize {
        self.depth.0.iter().map(|d| d.load(Relaxed) as usize).sum()
    }

    /// Room for one more packet, counting `staged` packets this lcore holds for it but has not
    /// enqueued yet (they are enqueued at the end of the burst).
    #[inline]
    pub fn room(&self, staged: usize) -> Room {
        Room::after_one_more(self.len() + staged, self.capacity)
    }

    /// Whether the socket is flagged under pressure.
    #[inline]
    pub fn under_pressure(&self) -> bool {
        self.pressure.0.load(Relaxed)
    }

    /// A sender found no NORMAL room: flag it (written only when it changes).
    #[inline]
    pub fn mark_pressure(&self) {
        if !self.pressure.0.load(Relaxed) {
            self.pressure.0.store(true, Relaxed);
        }
    }

    /// Called by the socket's consumer after draining: clears the flag once occupancy is at most
    /// half the capacity (the seed review's threshold, not "empty"). Only the consumer clears.
    /// Occupancy is the queues' lengths, or with several DPDK-ring queues what the consumer
    /// published after taking from each (its own view, no read of the producers' lines).
    #[inline]
    pub fn consumer_update_pressure(&self) {
        if !self.pressure.0.load(Relaxed) {
            return;
        }
        let queued = match &*self.queues {
            [q] => q.len(),
            #[cfg(feature = "dpdk")]
            [SocketQueue::Ring(_), ..] => self.published_depth(),
            _ => self.len(),
        };
        if queued * 2 <= self.capacity {
            self.pressure.0.store(false, Relaxed);
        }
    }

    /// How many of the last [`HISTORY_LEN`] recorded hashes equal `hash` (read only: the trace).
    pub fn flow_seen(&self, hash: u32) -> usize {
        self.history.0.iter().filter(|h| h.load(Relaxed) == hash).count()
    }

    /// Whether more than half of the last [`HISTORY_LEN`] recorded hashes equal `hash`; records
    /// `hash` in slot `slot` (the caller's random number), with no lock and no index.
    #[inline]
    pub fn flow_is_huge(&self, hash: u32, slot: usize) -> bool {
        let mut count = 0;
        for h in &self.history.0 {
            count += (h.load(Relaxed) == hash) as usize;
        }
        self.history.0[slot % HISTORY_LEN].store(hash, Relaxed);
        count > HISTORY_LEN / 2
    }
}

/// A queue for tests and simulations: only a length and a capacity, and optionally a producer
/// whose view of the length lags the consumer by some packets ([`SimQueue::set_producer_lag`]).
#[derive(Debug)]
pub struct SimQueue {
    len: std::sync::atomic::AtomicUsize,
    capacity: usize,
    lag: std::sync::atomic::AtomicUsize,
}

impl SimQueue {
    /// An empty queue of `capacity`.
    pub fn new(capacity: usize) -> Self {
        SimQueue {
            len: Default::default(),
            capacity,
            lag: Default::default(),
        }
    }
    /// The producer's view of the length ([`PacketQueue::producer_len`]) overstates it by `n`
    /// packets (within the capacity), as a single-producer ring's does after the consumer took
    /// that many unseen; 0 makes the view exact.
    pub fn set_producer_lag(&self, n: usize) {
        self.lag.store(n, Relaxed);
    }
    /// Sets the length.
    pub fn set_len(&self, n: usize) {
        self.len.store(n.min(self.capacity), Relaxed);
    }
    /// Adds `n` packets if they fit; returns how many did.
    pub fn push(&self, n: usize) -> usize {
        let l = self.len.load(Relaxed);
        let take = n.min(self.capacity - l);
        self.len.store(l + take, Relaxed);
        take
    }
    /// Removes up to `n` packets; returns how many.
    pub fn pop(&self, n: usize) -> usize {
        let l = self.len.load(Relaxed);
        let take = n.min(l);
        self.len.store(l - take, Relaxed);
        take
    }
}

impl PacketQueue for SimQueue {
    fn len(&self) -> usize {
        self.len.load(Relaxed)
    }
    fn producer_len(&self, fresh: bool) -> (usize, bool) {
        let lag = self.lag.load(Relaxed);
        if fresh || lag == 0 {
            return (self.len(), true);
        }
        ((self.len() + lag).min(self.capacity), false)
    }
    fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn room_classes_at_the_boundaries() {
        // capacity 100: NORMAL while more than 25 stay free after the packet.
        assert_eq!(Room::after_one_more(73, 100), Room::Normal); // 26 free after
        assert_eq!(Room::after_one_more(74, 100), Room::Low); // 25 free after
        assert_eq!(Room::after_one_more(98, 100), Room::Low); // 1 free after
        assert_eq!(Room::after_one_more(99, 100), Room::None); // 0 free after
        assert_eq!(Room::after_one_more(100, 100), Room::None);
        assert_eq!(Room::after_one_more(0, 1), Room::None);
    }

    #[test]
    fn pressure_is_cleared_by_the_consumer_at_half() {
        let q = SimQueue::new(100);
        q.set_len(90);
        let s = Socket::new("s", 0, q, 0, Arc::new(SocketCounters::new(1, 1)));
        s.mark_pressure();
        assert!(s.under_pressure());
        s.consumer_update_pressure();
        assert!(s.under_pressure(), "still above half");
        s.queue(0).sim().unwrap().set_len(50);
        s.consumer_update_pressure();
        assert!(!s.under_pressure());
    }

    #[test]
    fn several_queues_count_as_one_socket() {
        let queues = (0..3).map(|_| SimQueue::new(100).into()).collect();
        let s = Socket::with_queues("s", 0, queues, 0, Arc::new(SocketCounters::new(3, 1)));
        assert_eq!((s.capacity(), s.queues().len()), (100, 3));
        s.queue(0).sim().unwrap().set_len(10);
        s.queue(1).sim().unwrap().set_len(20);
        s.queue(2).sim().unwrap().set_len(30);
        s.queue(0).sim().unwrap().set_producer_lag(5);
        assert_eq!(s.len(), 60);
        assert_eq!(s.producer_len(0, false), (65, false), "its own view plus the others");
        assert_eq!(s.producer_len(0, true), (60, true));
        assert_eq!(s.producer_len(2, false), (60, true));
        // Pressure is cleared over the sum.
        s.mark_pressure();
        s.consumer_update_pressure();
        assert!(s.under_pressure(), "60 of 100");
        s.queue(2).sim().unwrap().set_len(20);
        s.consumer_update_pressure();
        assert!(!s.under_pressure(), "50 of 100");
    }

    #[test]
    fn huge_flow_needs_more_than_half_of_the_history() {
        let s = Socket::new("s", 0, SimQueue::new(8), 0, Arc::new(SocketCounters::new(1, 1)));
        // Fill 8 of 16 slots with hash 7: exactly half is not huge.
        for slot in 0..8 {
            assert!(!s.flow_is_huge(7, slot));
        }
        assert!(!s.flow_is_huge(7, 8), "8 of 16 before this packet: not more than half");
        // Now 9 of 16 hold 7.
        assert!(s.flow_is_huge(7, 9));
        assert!(!s.flow_is_huge(8, 0), "another flow is not huge");
    }
}
