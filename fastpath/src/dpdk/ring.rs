//! Mbuf rings: the bounded queues behind service sockets.

use super::{Error, Mbuf, Mempool, Result};
use crate::socket::{PacketQueue, QueueSync};
use crate::spsc::SpscRing;
use std::ffi::{c_void, CString};
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Set in a ring slot's pointer (mbufs are cache-line aligned, so the low bits are free) when
/// the mbuf may not go back to the ring's home pool without being looked at (another pool,
/// chained, shared, indirect or external: `Mbuf::raw_freeable_into`'s conditions fail). The
/// common mbuf is the untagged one, so a run of released words with no tag is already the
/// array of pointers `rte_mempool_put_bulk` takes ([`Freed::push_run`]).
const CHECK_FREE: usize = 1;

/// Most packets [`MbufRing::dequeue_and_free`] takes at once.
pub const FREE_BURST: usize = 64;

/// A DPDK ring of mbufs with exactly the requested capacity (`RING_F_EXACT_SZ`), in the sync
/// modes its maker declares ([`QueueSync`]): single-producer when only one lcore enqueues (a
/// socket with one RX lcore), single-consumer when only one dequeues (a socket's worker; a ring
/// is also drained on drop, when nothing else holds it). Bursts, no per-packet lock.
///
/// The multi-producer enqueue takes its slots with a compare-and-swap on the producer index: a
/// locked instruction, which waits for that line (the consumer reads it on every poll) and for
/// every store before it (the burst's mbuf writes) to complete; single-producer mode stores
/// the index (benches/NOTES.md, "The hand-off to the workers").
///
/// Handing packets to another lcore costs cache lines, not instructions: the producer wrote
/// each mbuf's header, and if the consumer reads it (as `rte_pktmbuf_free` does, for the pool,
/// the reference count and the segments) the line is shared, and the producer's next write to
/// it — when the mbuf is allocated again — waits for the consumer's copy to be invalidated. A
/// consumer that only frees (a `sink`) need not read it: the producer, which has the header in
/// its cache anyway, marks in the ring slot each mbuf that may not go straight back to the
/// ring's home pool (not from that pool, or not direct with one reference and one segment:
/// `rte_mbuf_raw_free`'s conditions), and [`MbufRing::dequeue_and_free`] returns the unmarked
/// ones to the pool in one put without touching them, so the RX lcore's mbuf resets
/// (`rte_pktmbuf_reset` in the PMD's allocation) no longer wait for the worker's copy.
///
/// They go straight to the pool's shared store, not through the worker's own mempool cache:
/// the RX lcore refills its cache from that store, so an mbuf is back in its hands after the
/// ring and the RX lcore's cache, without also waiting behind the hundreds the worker's cache
/// holds before it flushes. Fewer mbufs in flight means more of their lines are still in the RX
/// core's cache when it writes them again (benches/NOTES.md, "The hand-off to the workers").
///
/// With one producer and one consumer the slots are an [`SpscRing`] instead of a DPDK ring:
/// the same words (tagged mbuf pointers), but the producer reads the consumer's index only when
/// its copy says the ring is too full, and the fanout's per-burst view of the length is the
/// producer's own ([`PacketQueue::producer_len`]), so the RX lcore no longer waits every burst
/// for a line the worker just wrote.
///
/// A `sink` fed by one RX lcore goes further ([`QueueSync::producer_reclaims`]): its worker
/// only counts what it takes and advances its index without reading the slots
/// ([`SpscRing::skip`]), and the RX lcore, on its next enqueue, frees the mbufs the worker
/// passed into its own mempool cache ([`SpscRing::push_reclaiming`]) — a NIC driver's transmit
/// completion, where the lcore that allocated the buffers frees them once told they are done.
/// Those it left unmarked at enqueue go back without a read of their headers, as in the
/// marked free above (`Freed`): by then they have left the core's cache when the ring is one
/// of many.
/// The slots and the mbufs never leave the RX lcore's cache and the worker touches no mempool
/// (no shared store, no spinlock); what crosses is one index each way per publication (a burst,
/// or several under load: `rx::HOLD_BURSTS`); faster than the marked free above
/// (benches/NOTES.md, "The hand-off to the workers"). Such a ring hands its consumer no packet
/// ([`MbufRing::dequeue`] returns none), so the daemon keeps a socket across a reload only
/// for the same use (`Socket::sync`).
pub struct MbufRing {
    slots: Slots,
    capacity: usize,
    home: Arc<Mempool>,
}

/// Where a ring's words live.
// One per socket: boxing the larger variant would only add a pointer to follow per burst.
#[allow(clippy::large_enum_variant)]
enum Slots {
    /// A DPDK ring, in the sync modes of its `QueueSync`.
    Dpdk(NonNull<dpdk_sys::rte_ring>),
    /// One producer, one consumer.
    Spsc(SpscRing),
    /// One producer that frees what its one consumer skipped (`QueueSync::producer_reclaims`).
    Reclaiming(SpscRing),
}

// SAFETY: an rte_ring may be used from any thread, and an SpscRing is Send; how many may enqueue
// or dequeue at once is the contract `MbufRing::new`'s caller accepts with its `QueueSync`.
unsafe impl Send for MbufRing {}
// SAFETY: see Send; every method goes through DPDK's ring functions, which honour the ring's
// sync modes, or through the SpscRing's atomics.
unsafe impl Sync for MbufRing {}

static RING_SEQ: AtomicU64 = AtomicU64::new(0);

impl MbufRing {
    /// A ring holding up to `capacity` packets, most of which come from `home`, used as `sync`
    /// says (more producers or consumers than declared corrupt it).
    pub fn new(capacity: usize, home: Arc<Mempool>, sync: QueueSync) -> Result<MbufRing> {
        Self::on_socket(capacity, home, sync, None)
    }

    /// Like [`MbufRing::new`], a DPDK ring's memory on NUMA socket `socket` (`None`: any): its
    /// consumer's, which polls it. A one-producer one-consumer ring is a heap array of this
    /// process's allocator, where the kernel places pages on first touch.
    pub fn on_socket(capacity: usize, home: Arc<Mempool>, sync: QueueSync, socket: Option<u32>) -> Result<MbufRing> {
        if sync.single_producer && sync.single_consumer {
            if capacity == 0 || u32::try_from(capacity).is_err() {
                return Err(Error::new("ring capacity", libc::EINVAL));
            }
            return Ok(MbufRing {
                slots: if sync.producer_reclaims {
                    Slots::Reclaiming(SpscRing::new(capacity))
                } else {
                    Slots::Spsc(SpscRing::new(capacity))
                },
                capacity,
                home,
            });
        }
        let name = format!("fps{}", RING_SEQ.fetch_add(1, Ordering::Relaxed));
        let cname = CString::new(name.clone()).expect("no NUL in a generated name");
        let count = u32::try_from(capacity).map_err(|_| Error::new("ring capacity", libc::EINVAL))?;
        let socket_id = socket.map_or(dpdk_sys::SOCKET_ID_ANY, |s| s as i32);
        let mut flags = dpdk_sys::RING_F_EXACT_SZ;
        if sync.single_producer {
            flags |= dpdk_sys::RING_F_SP_ENQ;
        }
        if sync.single_consumer {
            flags |= dpdk_sys::RING_F_SC_DEQ;
        }
        // SAFETY: cname is a valid C string for the call (DPDK copies it); count and flags are
        // plain values; a NULL return is handled below.
        let raw = unsafe { dpdk_sys::rte_ring_create(cname.as_ptr(), count, socket_id, flags) };
        NonNull::new(raw)
            .map(|raw| MbufRing {
                slots: Slots::Dpdk(raw),
                capacity,
                home,
            })
            .ok_or_else(|| Error::from_rte_errno(format!("rte_ring_create({name}, {capacity})")))
    }

    /// Prefetches what [`MbufRing::enqueue`] reads, in two steps a caller issues one pass
    /// apart over many rings (the second reads lines the first brought in): `0`, the ring's own
    /// lines; `1`, the slots it will release from and write to. Nothing of the consumer's.
    #[inline]
    pub fn prefetch(&self, step: u8) {
        let r = match &self.slots {
            Slots::Spsc(r) | Slots::Reclaiming(r) => r,
            Slots::Dpdk(_) => return,
        };
        if step == 0 {
            r.producer_lines().into_iter().for_each(super::prefetch);
        } else {
            r.producer_slots().into_iter().for_each(super::prefetch);
        }
    }

    /// Enqueues as many packets from the front of `pkts` as fit; they leave `pkts`, the rest stay
    /// (in order). Returns how many were enqueued.
    #[inline]
    pub fn enqueue(&self, pkts: &mut Vec<Mbuf>) -> usize {
        self.enqueue_held(pkts, false)
    }

    /// [`MbufRing::enqueue`]; with `hold`, an SPSC ring's consumer may see these packets, and
    /// any held before, only after [`MbufRing::publish`] or an enqueue without `hold`
    /// ([`SpscRing::push_mapped`]; a DPDK ring publishes every enqueue). What is held stays the
    /// ring's: counted in its producer's length, freed with it.
    #[inline]
    pub fn enqueue_held(&self, pkts: &mut Vec<Mbuf>, hold: bool) -> usize {
        let len = pkts.len();
        if len == 0 {
            if !hold {
                self.publish();
            }
            return 0;
        }
        let slots = pkts.as_mut_ptr() as *mut usize;
        let home = self.home.as_ptr();
        // An owned mbuf's pointer as a word, marked if it may not go back to `home` unread.
        let tag = |w: usize| {
            // SAFETY: `w` is one of `pkts`' words, an owned, untagged mbuf pointer (Mbuf is a
            // transparent pointer), read here only to test its header.
            let raw = unsafe { (*(&w as *const usize).cast::<Mbuf>()).raw_freeable_into(home) };
            if raw {
                w
            } else {
                w | CHECK_FREE
            }
        };
        // SAFETY: the Vec's buffer holds `len` initialised words (the untagged pointers),
        // borrowed as such only for an SPSC ring's push; the ring stores the tagged words of
        // those that fit, and `pkts` keeps its own untagged.
        let words = || unsafe { std::slice::from_raw_parts(slots, len) };
        // The ring takes ownership of the first n, and its consumers untag them (`dequeue*`
        // below). The SPSC rings mark each word as they store it: one pass over the packets.
        let n = match &self.slots {
            // Freed into this (the producer's) lcore's mempool cache when the consumer has
            // passed them, the unmarked ones without a read of their headers (`Freed`).
            Slots::Reclaiming(r) => {
                let mut freed = Freed::new(home);
                let n = r.push_reclaiming_mapped(words(), tag, |run| freed.push_run(run), hold);
                freed.flush();
                n
            }
            Slots::Spsc(r) => r.push_mapped(words(), tag, hold),
            Slots::Dpdk(raw) => {
                // SAFETY: i < len: marking changes slot i's bits, not the mbuf; the slots the
                // ring did not take are unmarked again before `pkts` is used as mbufs.
                unsafe {
                    for i in 0..len {
                        *slots.add(i) = tag(*slots.add(i));
                    }
                    let n = dpdk_sys::fp_ring_enqueue_burst(
                        raw.as_ptr(),
                        slots as *const *mut c_void,
                        len as u32,
                        std::ptr::null_mut(),
                    ) as usize;
                    for i in n..len {
                        *slots.add(i) &= !CHECK_FREE;
                    }
                    n
                }
            }
        };
        // SAFETY: the first n mbufs now belong to the ring: shift the rest (untagged) down
        // without dropping anything and shorten the Vec.
        unsafe {
            std::ptr::copy(pkts.as_ptr().add(n), pkts.as_mut_ptr(), len - n);
            pkts.set_len(len - n);
        }
        n
    }

    /// Producer: publishes what [`MbufRing::enqueue_held`] held back, if anything.
    #[inline]
    pub fn publish(&self) {
        match &self.slots {
            Slots::Spsc(r) | Slots::Reclaiming(r) => r.publish(),
            Slots::Dpdk(_) => {}
        }
    }

    /// Dequeues up to the spare capacity of `out` packets, appending them; returns how many.
    /// A reclaiming ring hands out none (its consumer only counts: [`MbufRing::dequeue_and_free`]).
    #[inline]
    pub fn dequeue(&self, out: &mut Vec<Mbuf>) -> usize {
        let spare = out.spare_capacity_mut();
        if spare.is_empty() {
            return 0;
        }
        let slots = spare.as_mut_ptr() as *mut usize;
        let max = spare.len();
        // SAFETY: the spare capacity has room for spare.len() pointers; the ring writes n <= that
        // many (possibly tagged) owned mbuf pointers, untagged here before they become Mbufs.
        let n = unsafe {
            match &self.slots {
                Slots::Dpdk(raw) => {
                    let n = dpdk_sys::fp_ring_dequeue_burst(
                        raw.as_ptr(),
                        slots as *mut *mut c_void,
                        max as u32,
                        std::ptr::null_mut(),
                    ) as usize;
                    for i in 0..n {
                        *slots.add(i) &= !CHECK_FREE;
                    }
                    n
                }
                Slots::Spsc(r) => {
                    let mut i = 0;
                    r.pop(max, |w| {
                        *slots.add(i) = w & !CHECK_FREE;
                        i += 1;
                    })
                }
                // Its packets stay the producer's: the consumer only counts them.
                Slots::Reclaiming(_) => 0,
            }
        };
        // SAFETY: n slots were initialised with owned, untagged mbufs.
        unsafe { out.set_len(out.len() + n) };
        n
    }

    /// Dequeues up to `max` (at most [`FREE_BURST`]) packets and frees them; returns how many.
    /// Those the producer left unmarked go back to the home pool's shared store in one put,
    /// without a read of their headers (type docs); the rest through `rte_pktmbuf_free_bulk`.
    /// A reclaiming ring's consumer only takes them (up to `max`, any number: it reads none):
    /// the producer frees them on its next enqueue.
    #[inline]
    pub fn dequeue_and_free(&self, max: usize) -> usize {
        if let Slots::Reclaiming(r) = &self.slots {
            return r.skip(max);
        }
        // Not zeroed: the worker calls this on every poll, most of them finding the ring empty.
        let mut slots = [const { MaybeUninit::<usize>::uninit() }; FREE_BURST];
        let mut plain = [const { MaybeUninit::<*mut dpdk_sys::rte_mbuf>::uninit() }; FREE_BURST];
        let max = max.min(FREE_BURST);
        let n = match &self.slots {
            // SAFETY: slots has room for FREE_BURST >= max pointers; the ring writes n of them,
            // owned (possibly tagged) mbufs, which we free below, each once.
            Slots::Dpdk(raw) => unsafe {
                dpdk_sys::fp_ring_dequeue_burst(
                    raw.as_ptr(),
                    slots.as_mut_ptr() as *mut *mut c_void,
                    max as u32,
                    std::ptr::null_mut(),
                ) as usize
            },
            Slots::Spsc(r) => {
                let mut i = 0;
                r.pop(max, |w| {
                    slots[i] = MaybeUninit::new(w);
                    i += 1;
                })
            }
            Slots::Reclaiming(_) => unreachable!("returned above"),
        };
        // Marked ones are compacted to the front of `slots`, the others moved to `plain`.
        let (mut raw, mut other) = (0, 0);
        for i in 0..n {
            // SAFETY: i < n: the ring wrote slot i.
            let p = unsafe { slots[i].assume_init() };
            if p & CHECK_FREE == 0 {
                slots[raw] = MaybeUninit::new(p);
                raw += 1;
            } else {
                plain[other] = MaybeUninit::new((p & !CHECK_FREE) as *mut dpdk_sys::rte_mbuf);
                other += 1;
            }
        }
        // SAFETY: the first `raw` slots and `other` entries of `plain` were written above. The
        // first `raw` slots are mbufs the producer found to be from the home pool,
        // direct, with one reference and one segment when it gave up ownership; nobody has
        // touched them since, so they may be put back as they are. `plain` holds the other
        // owned mbufs, freed normally.
        unsafe {
            if raw > 0 {
                dpdk_sys::fp_mempool_put_bulk_uncached(
                    self.home.as_ptr(),
                    slots.as_ptr() as *const *mut c_void,
                    raw as u32,
                );
            }
            if other > 0 {
                dpdk_sys::rte_pktmbuf_free_bulk(plain.as_mut_ptr() as *mut *mut dpdk_sys::rte_mbuf, other as u32);
            }
        }
        n
    }

    /// Producer of a reclaiming ring: frees what the consumer took since the last enqueue (as
    /// the next enqueue would). For an idle producer, so that a drained ring holds no mbuf.
    /// Nothing for other rings.
    pub fn reclaim(&self) {
        if let Slots::Reclaiming(r) = &self.slots {
            let mut freed = Freed::new(self.home.as_ptr());
            r.push_reclaiming(&[], |run| freed.push_run(run));
            freed.flush();
        }
    }

    /// For a reclaiming ring whose producer will never enqueue again (every RX lcore has moved
    /// past the ring's last generation, or exited): frees what the consumer took and the
    /// producer has not freed yet, and with `queued` what is still queued too. Nothing for other
    /// rings. Racing the producer's enqueue would free mbufs twice.
    pub fn release_rest(&self, queued: bool) {
        if let Slots::Reclaiming(r) = &self.slots {
            let mut freed = Freed::new(self.home.as_ptr());
            r.release_rest(queued, |run| freed.push_run(run));
            freed.flush();
        }
    }

    /// Dequeues and frees everything still queued; returns how many packets that was.
    pub fn drain_and_free(&self) -> usize {
        let mut total = 0;
        loop {
            let n = self.dequeue_and_free(FREE_BURST);
            if n == 0 {
                return total;
            }
            total += n;
        }
    }
}

impl MbufRing {
    /// Consumer only: packets queued as the consumer last saw them (an SPSC ring's own copy of
    /// the producer's index: no read of the producer's line; a DPDK ring's count).
    #[inline]
    pub fn consumer_len(&self) -> usize {
        match &self.slots {
            Slots::Spsc(r) | Slots::Reclaiming(r) => r.consumer_len(),
            Slots::Dpdk(_) => self.len(),
        }
    }
}

impl PacketQueue for MbufRing {
    #[inline]
    fn len(&self) -> usize {
        match &self.slots {
            // SAFETY: the ring is alive; the count is a racy but safe read of its head/tail.
            Slots::Dpdk(raw) => unsafe { dpdk_sys::fp_ring_count(raw.as_ptr()) as usize },
            Slots::Spsc(r) | Slots::Reclaiming(r) => r.len(),
        }
    }
    #[inline]
    fn producer_len(&self, fresh: bool) -> (usize, bool) {
        match &self.slots {
            Slots::Spsc(r) | Slots::Reclaiming(r) => r.producer_len(fresh),
            Slots::Dpdk(_) => (self.len(), true),
        }
    }
    fn capacity(&self) -> usize {
        self.capacity
    }
}

/// Mbufs a reclaiming ring released (owned pointers as words, tagged [`CHECK_FREE`] where the
/// producer found them not raw-freeable into the ring's home pool when it enqueued them), freed
/// into the calling lcore's mempool cache: the unmarked ones put back as they are
/// (`rte_mempool_put_bulk`), without a read of their headers, the others through
/// `rte_pktmbuf_free_bulk`. A run of the ring with no mark (every packet of a flood) goes back
/// in one put straight from the ring's slots ([`Freed::push_run`]); a mixed run word by word,
/// in bulks of up to [`FREE_BURST`].
///
/// Nobody touches a reclaiming ring's mbufs between the enqueue and the release (its consumer
/// only counts them), so what the mark says still holds. Reading every header again at release
/// was the larger part of the RX lcore's cost for a sink's packets: `rte_pktmbuf_free_bulk`'s
/// checks per mbuf, and with many sockets a cache miss per mbuf, released long after it was
/// enqueued (benches/NOTES.md, "Many sockets").
struct Freed {
    home: *mut dpdk_sys::rte_mempool,
    raw: usize,
    plain: usize,
    // Not zeroed: an enqueue makes one, and most release one mbuf or none (with many sockets
    // zeroing the two arrays was a measurable share of the RX lcore: NOTES, "Many sockets").
    raw_words: [MaybeUninit<usize>; FREE_BURST],
    plain_words: [MaybeUninit<usize>; FREE_BURST],
}

impl Freed {
    #[inline]
    fn new(home: *mut dpdk_sys::rte_mempool) -> Self {
        Freed {
            home,
            raw: 0,
            plain: 0,
            raw_words: [const { MaybeUninit::uninit() }; FREE_BURST],
            plain_words: [const { MaybeUninit::uninit() }; FREE_BURST],
        }
    }

    /// Frees a run of released words as they lie in the ring. Word by word (a call per word
    /// behind the release closure, copying each into a bulk) this was a large share of the RX
    /// lcore's path to a sink (benches/NOTES.md, "The reclaiming release a run at a time"); a run
    /// without a mark is one test per word and one put.
    #[inline]
    fn push_run(&mut self, run: &[AtomicUsize]) {
        let marks = run.iter().fold(0, |acc, w| acc | w.load(Ordering::Relaxed)) & CHECK_FREE;
        if marks == 0 {
            // SAFETY: every word of the run is an untagged mbuf pointer the ring released to us
            // (owned, each released once, referenced by nothing else) that the producer found
            // raw-freeable into `home` when it enqueued it, untouched since; AtomicUsize has
            // usize's layout, and no thread writes these slots while they are released: only
            // the producer writes slots, and it is this thread (a push, whose append comes after
            // the release returns) or gone (`release_rest`).
            unsafe { dpdk_sys::fp_mempool_put_bulk(self.home, run.as_ptr() as *const *mut c_void, run.len() as u32) };
            return;
        }
        for w in run {
            self.push(w.load(Ordering::Relaxed));
        }
    }

    #[inline]
    fn push(&mut self, w: usize) {
        if w & CHECK_FREE == 0 {
            self.raw_words[self.raw] = MaybeUninit::new(w);
            self.raw += 1;
            if self.raw == FREE_BURST {
                self.flush();
            }
        } else {
            self.plain_words[self.plain] = MaybeUninit::new(w & !CHECK_FREE);
            self.plain += 1;
            if self.plain == FREE_BURST {
                self.flush();
            }
        }
    }

    #[inline]
    fn flush(&mut self) {
        if self.raw > 0 {
            // SAFETY: the first `raw` words were written by `push`: mbufs the ring released to
            // us (owned, each released once, referenced by nothing else) that the producer
            // found to be from `home`, direct, with one reference and one segment when it
            // enqueued them; nobody has touched them since, so they go back to the pool as
            // they are.
            unsafe {
                dpdk_sys::fp_mempool_put_bulk(
                    self.home,
                    self.raw_words.as_ptr() as *const *mut c_void,
                    self.raw as u32,
                )
            };
            self.raw = 0;
        }
        if self.plain > 0 {
            // SAFETY: the first `plain` words were written by `push`: owned mbufs the ring
            // released to us, untagged, each released once, referenced by nothing else.
            unsafe {
                dpdk_sys::rte_pktmbuf_free_bulk(
                    self.plain_words.as_mut_ptr() as *mut *mut dpdk_sys::rte_mbuf,
                    self.plain as u32,
                )
            };
            self.plain = 0;
        }
    }
}

impl Drop for MbufRing {
    fn drop(&mut self) {
        // The last owner: no producer is left.
        self.release_rest(true);
        // Nothing may leak: packets still queued (a socket removed by a reload before its worker
        // drained it, or a ring dropped at exit) are freed.
        self.drain_and_free();
        if let Slots::Dpdk(raw) = &self.slots {
            // SAFETY: we own the ring and nothing else references it any more (the last Arc of
            // its socket is being dropped).
            unsafe { dpdk_sys::rte_ring_free(raw.as_ptr()) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::PacketBuf;
    use crate::dpdk::Eal;

    fn fill(pool: &Mempool, n: usize, tag: u8) -> Vec<Mbuf> {
        (0..n)
            .map(|i| {
                let mut m = pool.alloc().expect("an mbuf");
                m.append(4).expect("room").copy_from_slice(&[tag, i as u8, 0xaa, 0x55]);
                m
            })
            .collect()
    }

    fn refcnt(m: &Mbuf) -> u16 {
        m.raw().refcnt
    }

    /// One test, one EAL (DPDK allows one per process): every case of the marked free.
    #[test]
    fn marked_mbufs_go_back_to_the_home_pool_unread_and_the_rest_are_freed_normally() {
        let args: Vec<String> = [
            "ring-test",
            "--no-huge",
            "-m",
            "128",
            "--no-pci",
            "--no-shconf",
            "--no-telemetry",
            "--log-level=lib.eal:warning",
            "-l",
            "0",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([format!("--file-prefix=fpring{}", std::process::id())])
        .collect();
        let _eal = Eal::init(&args).expect("EAL");
        let home = Arc::new(Mempool::new("ring_home", 1023, 32, 2048).expect("home pool"));
        let other = Mempool::new("ring_other", 1023, 32, 2048).expect("other pool");
        // Both kinds of slots: an SpscRing (one producer, one consumer), a DPDK ring otherwise.
        let spsc = QueueSync {
            single_producer: true,
            single_consumer: true,
            producer_reclaims: false,
        };
        for sync in [spsc, QueueSync::SHARED] {
            check_ring(&home, &other, sync);
        }
        check_reclaiming(&home, &other);
        check_free_bulk(&home, &other);
    }

    /// A second owner of `m` (its reference count raised), for a test that frees one.
    fn second_owner(m: &Mbuf) -> Mbuf {
        // SAFETY: the count is raised before the second `Mbuf` exists, so each owner frees one
        // reference.
        unsafe {
            let raw = NonNull::new(m.raw() as *const dpdk_sys::rte_mbuf as *mut dpdk_sys::rte_mbuf).expect("non-null");
            dpdk_sys::fp_mbuf_refcnt_update(raw.as_ptr(), 1);
            Mbuf::from_raw(raw)
        }
    }

    /// `Mbuf::free_bulk`: a batch the first mbuf's pool can take back as it is goes back
    /// whole; any other mbuf in it (another pool, shared, chained) is freed by DPDK's checks,
    /// whatever its place in the batch, and nothing is freed twice or leaks.
    fn check_free_bulk(home: &Arc<Mempool>, other: &Mempool) {
        Mbuf::free_bulk(&mut Vec::new());
        let mut all = fill(home, 40, 1);
        Mbuf::free_bulk(&mut all);
        assert!(all.is_empty());
        assert_eq!(home.in_use(), 0);

        // A chain of two: the head says two segments, the tail hangs from it.
        let chain = |tag| {
            let mut two = fill(home, 2, tag);
            let tail = two.pop().expect("two").into_raw();
            let head = two.pop().expect("two");
            // SAFETY: `head` and `tail` are ours; the tail's ownership passes to the head's
            // chain (`rte_pktmbuf_chain`'s effect for one-segment mbufs).
            unsafe {
                let h = head.raw() as *const dpdk_sys::rte_mbuf as *mut dpdk_sys::rte_mbuf;
                (*h).next = tail.as_ptr();
                (*h).nb_segs = 2;
                (*h).pkt_len += (*tail.as_ptr()).data_len as u32;
            }
            head
        };
        for first_other in [false, true] {
            let mut batch = fill(home, 3, 2);
            let shared = fill(home, 1, 3).pop().expect("one");
            let second = second_owner(&shared);
            batch.insert(1, shared);
            batch.insert(2, chain(4));
            batch.extend(fill(other, 2, 5));
            batch.extend(fill(home, 2, 6));
            if first_other {
                batch.rotate_right(2);
            }
            assert_eq!((home.in_use(), other.in_use()), (8, 2));
            Mbuf::free_bulk(&mut batch);
            assert!(batch.is_empty());
            assert_eq!(
                (home.in_use(), other.in_use()),
                (1, 0),
                "all freed but the shared one (first from the other pool: {first_other})"
            );
            assert_eq!(refcnt(&second), 1);
            // The pool's next mbufs are not the shared one: it was not put back.
            let again = fill(home, 12, 7);
            assert_eq!(second.data(), &[3, 0, 0xaa, 0x55]);
            drop(again);
            drop(second);
            assert_eq!(home.in_use(), 0);
        }
    }

    /// A reclaiming ring: the consumer's take frees nothing; the producer's next enqueue frees
    /// what was taken, whatever pool it came from; `release_rest` and the drop free the rest.
    fn check_reclaiming(home: &Arc<Mempool>, other: &Mempool) {
        let sync = QueueSync {
            single_producer: true,
            single_consumer: true,
            producer_reclaims: true,
        };
        let ring = MbufRing::new(8, home.clone(), sync).expect("ring");
        assert!(matches!(ring.slots, Slots::Reclaiming(_)));

        let mut pkts = fill(home, 5, 1);
        pkts.extend(fill(other, 6, 2));
        assert_eq!(ring.enqueue(&mut pkts), 8, "as many as fit");
        assert_eq!(pkts.len(), 3);
        for (i, m) in pkts.iter().enumerate() {
            assert_eq!(m.data(), &[2, 3 + i as u8, 0xaa, 0x55], "the rest stay, in order");
        }
        assert_eq!(
            ring.dequeue_and_free(usize::MAX),
            8,
            "a reclaiming ring's consumer takes any number"
        );
        let mut out = Vec::with_capacity(16);
        assert_eq!(ring.dequeue(&mut out), 0, "the consumer is handed nothing");
        assert_eq!((home.in_use(), other.in_use()), (5, 6), "taken, not freed");
        assert_eq!(ring.len(), 0);

        // The next enqueue frees the eight taken, to their own pools, and has room.
        assert_eq!(ring.enqueue(&mut pkts), 3);
        assert!(pkts.is_empty());
        assert_eq!((home.in_use(), other.in_use()), (0, 3));
        assert_eq!(ring.len(), 3);

        // Taken: the producer is gone, so the consumer's side releases them.
        assert_eq!(ring.dequeue_and_free(5), 3);
        ring.release_rest(false);
        assert_eq!((home.in_use(), other.in_use()), (0, 0), "those taken");
        ring.release_rest(false);
        assert_eq!((home.in_use(), other.in_use()), (0, 0), "each once");

        // Held back: invisible to the consumer until published; queued and held ones both go
        // with `release_rest(true)`.
        let mut pkts = fill(home, 4, 4);
        assert_eq!(ring.enqueue_held(&mut pkts, true), 4);
        assert_eq!((ring.len(), ring.dequeue_and_free(8)), (0, 0));
        ring.publish();
        assert_eq!(ring.dequeue_and_free(3), 3, "at most `max`");
        assert_eq!(ring.dequeue_and_free(8), 1);
        let mut pkts = fill(home, 2, 6);
        assert_eq!(ring.enqueue_held(&mut pkts, false), 2, "releases the four taken");
        assert_eq!(home.in_use(), 2);
        let mut pkts = fill(home, 3, 7);
        assert_eq!(ring.enqueue_held(&mut pkts, true), 3);
        assert_eq!(ring.len(), 2, "the published two");
        ring.release_rest(true);
        assert_eq!((home.in_use(), other.in_use()), (0, 0), "queued and held");

        ring.release_rest(true);
        assert_eq!((home.in_use(), other.in_use()), (0, 0));
        drop(ring);
        assert_eq!((home.in_use(), other.in_use()), (0, 0), "nothing freed twice");
        // A shared mbuf (a second owner) is marked: the release drops one reference and
        // leaves it to its other owner; the home pool's mbufs around it are put back unread.
        let ring = MbufRing::new(8, home.clone(), sync).expect("ring");
        let mut mixed = fill(home, 2, 3);
        let shared = fill(home, 1, 5).pop().expect("one");
        // SAFETY: a second owner for the test; it only reads the packet and frees it last.
        let second = unsafe {
            let raw =
                NonNull::new(shared.raw() as *const dpdk_sys::rte_mbuf as *mut dpdk_sys::rte_mbuf).expect("non-null");
            dpdk_sys::fp_mbuf_refcnt_update(raw.as_ptr(), 1);
            Mbuf::from_raw(raw)
        };
        mixed.insert(1, shared);
        assert_eq!(ring.enqueue(&mut mixed), 3);
        assert_eq!(ring.dequeue_and_free(3), 3);
        assert_eq!(ring.enqueue(&mut Vec::new()), 0);
        ring.reclaim();
        assert_eq!(home.in_use(), 1, "the shared mbuf is still held by its second owner");
        assert_eq!(refcnt(&second), 1);
        assert_eq!(second.data(), &[5, 0, 0xaa, 0x55]);
        drop(second);
        assert_eq!(home.in_use(), 0);

        // Dropping the ring frees what is still queued.
        let mut pkts = fill(home, 4, 7);
        assert_eq!(ring.enqueue(&mut pkts), 4);
        drop(ring);
        assert_eq!((home.in_use(), other.in_use()), (0, 0));
    }

    fn check_ring(home: &Arc<Mempool>, other: &Mempool, sync: QueueSync) {
        let home = home.clone();
        let ring = MbufRing::new(8, home.clone(), sync).expect("ring");
        assert_eq!(
            matches!(ring.slots, Slots::Spsc(_)),
            sync.single_producer && sync.single_consumer
        );

        // Round trip: marks never leak out of the ring; every mbuf comes back intact.
        let mut pkts = fill(&home, 6, 1);
        let ptrs: Vec<usize> = pkts.iter().map(|m| m.raw() as *const _ as usize).collect();
        assert_eq!(ring.enqueue(&mut pkts), 6);
        assert!(pkts.is_empty());
        let mut out = Vec::with_capacity(16);
        assert_eq!(ring.dequeue(&mut out), 6);
        let back: Vec<usize> = out.iter().map(|m| m.raw() as *const _ as usize).collect();
        assert_eq!(back, ptrs, "dequeue returns the very pointers, unmarked");
        for (i, m) in out.iter().enumerate() {
            assert_eq!(m.data(), &[1, i as u8, 0xaa, 0x55]);
        }
        Mbuf::free_bulk(&mut out);
        assert_eq!(home.in_use(), 0);

        // A full ring: what does not fit stays in the Vec, unmarked and usable.
        let mut pkts = fill(&home, 11, 2);
        assert_eq!(ring.enqueue(&mut pkts), 8);
        assert_eq!(pkts.len(), 3);
        for (i, m) in pkts.iter_mut().enumerate() {
            assert_eq!(m.data(), &[2, 8 + i as u8, 0xaa, 0x55]);
            m.data_mut()[2] = 0xbb;
        }
        Mbuf::free_bulk(&mut pkts);
        assert_eq!(home.in_use(), 8);
        assert_eq!(ring.dequeue_and_free(FREE_BURST), 8);
        assert_eq!(home.in_use(), 0, "marked mbufs are back in the home pool");
        assert_eq!(ring.len(), 0);

        // Not marked: from another pool, or with another owner. Each must go back to its own
        // pool, and a shared one only lose a reference.
        let mut mixed = fill(&home, 2, 3);
        mixed.extend(fill(other, 2, 4));
        let shared = fill(&home, 1, 5).pop().expect("one");
        // SAFETY: a second owner for the test; it only reads the packet and frees it last.
        let second = unsafe {
            let raw =
                NonNull::new(shared.raw() as *const dpdk_sys::rte_mbuf as *mut dpdk_sys::rte_mbuf).expect("non-null");
            dpdk_sys::fp_mbuf_refcnt_update(raw.as_ptr(), 1);
            Mbuf::from_raw(raw)
        };
        mixed.push(shared);
        assert_eq!((home.in_use(), other.in_use()), (3, 2));
        assert_eq!(ring.enqueue(&mut mixed), 5);
        assert_eq!(ring.dequeue_and_free(FREE_BURST), 5);
        assert_eq!(other.in_use(), 0, "another pool's mbufs go back there");
        assert_eq!(home.in_use(), 1, "the shared mbuf is still held by its second owner");
        assert_eq!(refcnt(&second), 1);
        assert_eq!(second.data(), &[5, 0, 0xaa, 0x55]);
        drop(second);
        assert_eq!(home.in_use(), 0);

        // Dropping a ring frees what it still holds, marked or not.
        let mut pkts = fill(&home, 3, 6);
        pkts.extend(fill(other, 2, 7));
        assert_eq!(ring.enqueue(&mut pkts), 5);
        drop(ring);
        assert_eq!((home.in_use(), other.in_use()), (0, 0));
    }
}
