//! A bounded single-producer, single-consumer ring of words whose two sides each keep a private
//! copy of the other's index, so that neither reads the other's line unless its copy runs out.
//!
//! DPDK's ring (even in single-producer/single-consumer mode) reads the peer's index on every
//! call: the producer's enqueue reads the consumer's tail to find free room, and the fanout read
//! the length (both indices) once per burst before that. The consumer writes its tail on every
//! dequeue, so each of those reads is a miss on a line the other core just wrote — on the
//! RX lcore's critical path, since the fanout's decision waits for it (`fp_ring_count` in
//! `perf`: benches/NOTES.md, "`SpscRing` with cached peer indices"). Here the producer re-reads
//! the consumer's index only when its copy says the ring is too full for the burst, and the
//! fanout asks for the exact length only once the producer's view, an upper bound, reaches a
//! level at which a rule could decide something ([`SpscRing::producer_len`]). The consumer,
//! which must look for new words, reads the producer's index when its copy says the ring is
//! empty — every poll when it keeps up, which is the producer's one remaining line crossing per
//! burst (its store of the index).
//!
//! Lamport's ring with the cached indices of Lee et al.'s "B-Queue" / Giacomoni et al.'s
//! "FastForward" line of work. Indices are free-running counters (wrapping `usize`), the slot of
//! index `i` is `i & mask`; the ring holds at most `capacity` words, which need not be a power
//! of two (the slot array is).
//!
//! A *reclaiming* ring is for a consumer that only needs to know how many words arrived (a sink
//! service counts its packets and frees them): it advances its index without reading the slots
//! ([`SpscRing::skip`]), and the producer, on its next push, hands the words the consumer passed
//! back to its caller ([`SpscRing::push_reclaiming`]) — the completion ring of a NIC's transmit
//! path, where the driver frees what the hardware reports sent. The slots (and what the words
//! point to: mbufs, freed into the producer's own mempool cache) never leave the producer's
//! core; the indices still cross once per publication each way.
//!
//! A producer may also hold words back ([`SpscRing::push_mapped`] with `hold`): stored, counted
//! in its own length, but published only by a later push or [`SpscRing::publish`]. Each
//! publication is a store to a line the consumer keeps reading, so its next store must fetch
//! the line back first (a cross-core transfer on the producer's critical path, dear on the
//! 2-vCPU guest when the vCPUs sit on distant cores: benches/NOTES.md, "One publication for
//! several full bursts"); one publication for several bursts makes that one transfer for several
//! bursts, as a NIC driver rings its doorbell once per batch.
//! The caller bounds what it holds (the RX engine: one ring, a few bursts).
//!
//! Ordering: the producer stores the slots, then publishes its index with `Release`; the
//! consumer loads that index with `Acquire` before reading the slots. The consumer publishes its
//! index with `Release` after reading the slots; the producer loads it with `Acquire` before it
//! reuses them. Private fields are atomics used with `Relaxed` (plain loads and stores on x86),
//! so the type is `Sync` without `unsafe`; breaking the single-producer / single-consumer
//! contract loses or repeats words but is not undefined behaviour.

use std::sync::atomic::{
    AtomicUsize,
    Ordering::{Acquire, Relaxed, Release},
};

/// Padding to two cache lines: x86's adjacent-line prefetcher pulls lines in pairs, so fields
/// two different cores write must be 128 bytes apart to stay off each other's lines.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Line<T>(T);

/// One side's private state: its own index and its copy of the other side's.
#[derive(Debug, Default)]
struct Side {
    /// Next index this side fills (producer) or takes (consumer).
    next: AtomicUsize,
    /// The other side's published index as last read.
    peer: AtomicUsize,
    /// Producer of a reclaiming ring only: every word below this index has been released.
    released: AtomicUsize,
    /// Producer only: the index last published in `filled` (below `next` while words are held).
    shown: AtomicUsize,
}

/// A bounded SPSC ring of `usize` words (see the module docs).
#[derive(Debug)]
pub struct SpscRing {
    producer: Line<Side>,
    /// Published by the producer: every index below it is filled.
    filled: Line<AtomicUsize>,
    consumer: Line<Side>,
    /// Published by the consumer: every index below it is taken.
    taken: Line<AtomicUsize>,
    slots: Box<[AtomicUsize]>,
    mask: usize,
    capacity: usize,
}

impl SpscRing {
    /// An empty ring holding at most `capacity` words (at least 1).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        let size = capacity.next_power_of_two();
        SpscRing {
            producer: Line::default(),
            filled: Line::default(),
            consumer: Line::default(),
            taken: Line::default(),
            slots: (0..size).map(|_| AtomicUsize::new(0)).collect(),
            mask: size - 1,
            capacity,
        }
    }

    /// For a producer that prefetches before it pushes: the addresses of what a push reads
    /// first (its own line, the line holding the slot array's pointer, the consumer's published
    /// index); none is read here.
    #[inline]
    pub fn producer_lines(&self) -> [*const u8; 3] {
        [
            std::ptr::from_ref(&self.producer).cast(),
            std::ptr::from_ref(&self.slots).cast(),
            std::ptr::from_ref(&self.taken).cast(),
        ]
    }

    /// For a producer that prefetches before it pushes: the slots a push reclaims from first
    /// (the oldest unreleased word) and writes to next. Reads the producer's own line and the
    /// slot array's pointer, not the slots.
    #[inline]
    pub fn producer_slots(&self) -> [*const u8; 2] {
        let p = &self.producer.0;
        let at = |i: usize| std::ptr::from_ref(&self.slots[i & self.mask]).cast();
        [at(p.released.load(Relaxed)), at(p.next.load(Relaxed))]
    }

    /// Words the ring holds at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Words published and not yet taken, from any thread (racy but within `0..=capacity`);
    /// words the producer holds back are not counted.
    pub fn len(&self) -> usize {
        // Taken first: `filled` only grows, so a later read of it is at least `taken`.
        let taken = self.taken.0.load(Acquire);
        let filled = self.filled.0.load(Acquire);
        filled.wrapping_sub(taken).min(self.capacity)
    }

    /// Whether nothing is queued now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Consumer only: the words queued as the consumer last saw them (its copy of the
    /// producer's index, no read of the producer's line): at most the true length.
    #[inline]
    pub fn consumer_len(&self) -> usize {
        let c = &self.consumer.0;
        c.peer.load(Relaxed).wrapping_sub(c.next.load(Relaxed))
    }

    /// Producer only: the length as the producer sees it without reading the consumer's line —
    /// at least the true length, since the consumer only takes — and `false`; with `fresh`, the
    /// true length now (the consumer's index read and kept) and `true`.
    #[inline]
    pub fn producer_len(&self, fresh: bool) -> (usize, bool) {
        let p = &self.producer.0;
        let next = p.next.load(Relaxed);
        if fresh {
            let taken = self.taken.0.load(Acquire);
            p.peer.store(taken, Relaxed);
            return (next.wrapping_sub(taken), true);
        }
        (next.wrapping_sub(p.peer.load(Relaxed)), false)
    }

    /// Producer only: appends as many of `words` as fit, in order; returns how many.
    #[inline]
    pub fn push(&self, words: &[usize]) -> usize {
        self.push_mapped(words, |w| w, false)
    }

    /// [`SpscRing::push`], each word stored as `map` makes it (only those that fit are mapped);
    /// with `hold`, nothing is published (the consumer sees these words, and any held before,
    /// after the next push without `hold` or [`SpscRing::publish`]).
    #[inline]
    pub fn push_mapped(&self, words: &[usize], map: impl FnMut(usize) -> usize, hold: bool) -> usize {
        let p = &self.producer.0;
        let next = p.next.load(Relaxed);
        let mut room = self.capacity - next.wrapping_sub(p.peer.load(Relaxed));
        if room < words.len() {
            let taken = self.taken.0.load(Acquire);
            p.peer.store(taken, Relaxed);
            room = self.capacity - next.wrapping_sub(taken);
        }
        self.append(next, &words[..words.len().min(room)], map, hold)
    }

    /// Producer: publishes the words it holds back, if any.
    #[inline]
    pub fn publish(&self) {
        let p = &self.producer.0;
        let next = p.next.load(Relaxed);
        if p.shown.load(Relaxed) != next {
            p.shown.store(next, Relaxed);
            self.filled.0.store(next, Release);
        }
    }

    /// Producer: stores `words` (each as `map` makes it) from index `next` on and, unless
    /// `hold`, publishes them (and any held before); returns how many. At most `capacity` words:
    /// in at most two runs of the slots.
    ///
    /// The runs are slices taken once: indexed slot by slot, each store reloaded the slots'
    /// address, length and mask (a store to an atomic may, for all LLVM knows, change them) and
    /// tested the bounds, several times the store's own instructions (benches/NOTES.md, "The
    /// reclaiming release a run at a time").
    #[inline]
    fn append(&self, next: usize, words: &[usize], mut map: impl FnMut(usize) -> usize, hold: bool) -> usize {
        let slots = &*self.slots;
        let start = next & self.mask;
        let (a, b) = words.split_at(words.len().min(slots.len() - start));
        for (slot, &w) in slots[start..].iter().zip(a) {
            slot.store(map(w), Relaxed);
        }
        for (slot, &w) in slots.iter().zip(b) {
            slot.store(map(w), Relaxed);
        }
        let next = next.wrapping_add(words.len());
        let p = &self.producer.0;
        p.next.store(next, Relaxed);
        if !hold {
            p.shown.store(next, Relaxed);
            self.filled.0.store(next, Release);
        }
        words.len()
    }

    /// Producer of a reclaiming ring: hands every word the consumer has skipped and this side
    /// has not yet released to `release` (oldest first, as at most two runs of the ring's
    /// slots), then appends as many of `words` as fit; returns how many did.
    ///
    /// It reads the consumer's index on every call: the words it releases are the ones that
    /// index passed. Room counts the unreleased words as held, so no slot is overwritten before
    /// its word is released.
    #[inline]
    pub fn push_reclaiming(&self, words: &[usize], release: impl FnMut(&[AtomicUsize])) -> usize {
        self.push_reclaiming_mapped(words, |w| w, release, false)
    }

    /// [`SpscRing::push_reclaiming`], each word stored as `map` makes it (only those that fit
    /// are mapped), held back with `hold` as in [`SpscRing::push_mapped`].
    #[inline]
    pub fn push_reclaiming_mapped(
        &self,
        words: &[usize],
        map: impl FnMut(usize) -> usize,
        release: impl FnMut(&[AtomicUsize]),
        hold: bool,
    ) -> usize {
        let p = &self.producer.0;
        let next = p.next.load(Relaxed);
        let taken = self.taken.0.load(Acquire);
        self.release_to(taken, release);
        p.peer.store(taken, Relaxed);
        let room = self.capacity - next.wrapping_sub(taken);
        self.append(next, &words[..words.len().min(room)], map, hold)
    }

    /// Consumer of a reclaiming ring: takes up to `max` words without reading them (their slots
    /// stay on the producer's core); returns how many. The producer releases them.
    #[inline]
    pub fn skip(&self, max: usize) -> usize {
        let (next, n) = self.ready(max);
        self.advance(next, n);
        n
    }

    /// A reclaiming ring whose producer will never push again: hands the words it has not
    /// released to `release` — those the consumer took, and with `queued` also those still
    /// queued (held back ones included). Called by the consumer once the producer is gone, or by
    /// the ring's last owner. Racing [`SpscRing::push_reclaiming`] would release words twice.
    pub fn release_rest(&self, queued: bool, release: impl FnMut(&[AtomicUsize])) {
        let end = if queued {
            // The producer's own index (it is gone, its last store seen through whatever said
            // so): what it held back is queued too.
            self.producer.0.next.load(Relaxed)
        } else {
            self.taken.0.load(Acquire)
        };
        self.release_to(end, release);
    }

    /// Releases the words from the last released index up to `end` (a taken or filled index):
    /// hands them to `release` as they lie in the ring, in at most two runs (the second when
    /// they wrap), oldest first, so that a caller can free a run in one call without copying it.
    #[inline]
    fn release_to(&self, end: usize, mut release: impl FnMut(&[AtomicUsize])) {
        let p = &self.producer.0;
        let r = p.released.load(Acquire);
        if r == end {
            return;
        }
        let (start, n) = (r & self.mask, end.wrapping_sub(r));
        let first = n.min(self.slots.len() - start);
        release(&self.slots[start..start + first]);
        if first < n {
            release(&self.slots[..n - first]);
        }
        p.released.store(end, Release);
    }

    /// Consumer only: takes up to `max` words, oldest first, handing each to `take`; returns
    /// how many.
    #[inline]
    pub fn pop(&self, max: usize, mut take: impl FnMut(usize)) -> usize {
        let (next, n) = self.ready(max);
        for i in 0..n {
            take(self.slots[next.wrapping_add(i) & self.mask].load(Relaxed));
        }
        self.advance(next, n);
        n
    }

    /// Consumer: the next index to take and how many words from it (at most `max`) are ready;
    /// reads the producer's index only when the copy of it has fewer than `max`.
    #[inline]
    fn ready(&self, max: usize) -> (usize, usize) {
        let c = &self.consumer.0;
        let next = c.next.load(Relaxed);
        let mut ready = c.peer.load(Relaxed).wrapping_sub(next);
        if ready < max {
            let filled = self.filled.0.load(Acquire);
            c.peer.store(filled, Relaxed);
            ready = filled.wrapping_sub(next);
        }
        (next, max.min(ready))
    }

    /// Consumer: publishes that the `n` words from index `next` on are taken.
    #[inline]
    fn advance(&self, next: usize, n: usize) {
        if n > 0 {
            let next = next.wrapping_add(n);
            self.consumer.0.next.store(next, Relaxed);
            self.taken.0.store(next, Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::Arc;

    /// A release callback taking each word of each run.
    fn each(mut f: impl FnMut(usize)) -> impl FnMut(&[AtomicUsize]) {
        move |run| run.iter().for_each(|w| f(w.load(Relaxed)))
    }

    /// Held-back words: stored and counted by the producer, invisible to the consumer until a
    /// push without `hold` or `publish`, and released by `release_rest` if never published.
    #[test]
    fn held_words_wait_for_a_publication() {
        let r = SpscRing::new(8);
        assert_eq!(r.push_mapped(&[1, 2, 3], |w| w, true), 3);
        assert_eq!(r.producer_len(false).0, 3, "the producer counts them");
        assert_eq!((r.len(), r.skip(8)), (0, 0), "the consumer does not see them");
        assert_eq!(r.push_mapped(&[4], |w| w, true), 1);
        r.publish();
        let mut got = Vec::new();
        assert_eq!(r.pop(8, |w| got.push(w)), 4);
        assert_eq!(got, [1, 2, 3, 4]);
        r.publish();
        assert_eq!(r.pop(8, |_| ()), 0, "a second publication shows nothing new");
        // A push without `hold` publishes what was held before it.
        r.push_mapped(&[5, 6], |w| w, true);
        r.push_mapped(&[7], |w| w, false);
        got.clear();
        assert_eq!(r.pop(8, |w| got.push(w)), 3);
        assert_eq!(got, [5, 6, 7]);
        // Held words take room: the ring is full with them.
        assert_eq!(r.push_mapped(&[0; 9], |w| w, true), 8);
        assert_eq!(r.push_mapped(&[0], |w| w, false), 0);
        // Reclaiming: what is held when the producer goes is released with the queued words.
        let r = SpscRing::new(8);
        r.push_reclaiming_mapped(&[1, 2], |w| w, |_| (), false);
        assert_eq!(r.skip(8), 2);
        let mut released = Vec::new();
        r.push_reclaiming_mapped(&[3, 4], |w| w, each(|w| released.push(w)), true);
        assert_eq!(released, [1, 2], "a held push still releases what was taken");
        assert_eq!(r.skip(8), 0);
        r.push_reclaiming_mapped(&[5], |w| w, |_| (), true);
        let mut rest = Vec::new();
        r.release_rest(true, each(|w| rest.push(w)));
        assert_eq!(rest, [3, 4, 5], "held ones, each once");
    }

    /// Released words come as they lie in the ring: one run, or two where they wrap.
    #[test]
    fn a_release_is_one_run_or_two_where_it_wraps() {
        let r = SpscRing::new(5); // 8 slots
        let runs = |r: &SpscRing, words: &[usize]| {
            let mut runs = Vec::new();
            r.push_reclaiming(words, |run| {
                runs.push(run.iter().map(|w| w.load(Relaxed)).collect::<Vec<_>>())
            });
            runs
        };
        assert!(runs(&r, &[1, 2, 3, 4, 5]).is_empty());
        assert_eq!(r.skip(5), 5);
        assert_eq!(runs(&r, &[6, 7, 8, 9, 10]), vec![vec![1, 2, 3, 4, 5]]);
        assert_eq!(r.skip(5), 5);
        assert_eq!(runs(&r, &[]), vec![vec![6, 7, 8], vec![9, 10]], "slots 5..8, then 0..2");
        assert!(runs(&r, &[]).is_empty(), "each word once");
    }

    fn pop_vec(r: &SpscRing, max: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let n = r.pop(max, |w| out.push(w));
        assert_eq!(n, out.len());
        out
    }

    #[test]
    fn holds_exactly_its_capacity_and_keeps_order_across_the_wrap() {
        let r = SpscRing::new(5);
        assert_eq!(r.push(&[1, 2, 3, 4, 5, 6, 7]), 5, "5 of 7 fit");
        assert_eq!(r.len(), 5);
        assert_eq!(r.push(&[8]), 0, "full");
        assert_eq!(pop_vec(&r, 3), vec![1, 2, 3]);
        assert_eq!(r.producer_len(false), (5, false), "the producer has not seen the pops");
        assert_eq!(r.push(&[6, 7, 8, 9]), 3, "room found by reading the consumer's index");
        assert_eq!(r.producer_len(false), (5, false));
        assert_eq!(pop_vec(&r, 10), vec![4, 5, 6, 7, 8]);
        assert!(r.is_empty());
        assert_eq!(r.producer_len(false), (5, false), "stale: an upper bound");
        assert_eq!(r.producer_len(true), (0, true));
        assert_eq!(r.producer_len(false), (0, false), "kept");
        assert_eq!(pop_vec(&r, 4), Vec::<usize>::new());
    }

    proptest! {
        /// Against a model queue, one thread: what goes in comes out in order, never more than
        /// the capacity is held, and the producer's view is an upper bound that a fresh read
        /// makes exact.
        #[test]
        fn behaves_as_a_bounded_fifo(
            cap in 1usize..20,
            ops in prop::collection::vec((any::<bool>(), 0usize..25, any::<bool>()), 1..200),
        ) {
            let r = SpscRing::new(cap);
            let mut model = std::collections::VecDeque::new();
            let mut seq = 0usize;
            for (push, k, fresh) in ops {
                if push {
                    let words: Vec<usize> = (seq..seq + k).collect();
                    let n = r.push(&words);
                    prop_assert_eq!(n, k.min(cap - model.len()));
                    model.extend(&words[..n]);
                    seq += n;
                } else {
                    let got = pop_vec(&r, k);
                    let want: Vec<usize> = (0..k.min(model.len())).map(|_| model.pop_front().unwrap()).collect();
                    prop_assert_eq!(got, want);
                }
                prop_assert_eq!(r.len(), model.len());
                let (view, exact) = r.producer_len(fresh);
                prop_assert!(view >= model.len() && view <= cap);
                prop_assert_eq!(exact, fresh);
                if fresh {
                    prop_assert_eq!(view, model.len());
                }
            }
        }
    }

    proptest! {
        /// A reclaiming ring against a model, one thread: a push releases exactly the words
        /// skipped since the last release, oldest first, and has room for what is not queued;
        /// `release_rest` releases the rest, each word once.
        #[test]
        fn a_reclaiming_ring_releases_each_skipped_word_once_in_order(
            cap in 1usize..20,
            ops in prop::collection::vec((0u8..3, 0usize..25), 1..200),
            queued_too in any::<bool>(),
        ) {
            let r = SpscRing::new(cap);
            let mut queued = std::collections::VecDeque::new();
            let mut skipped = Vec::new();
            let mut released = Vec::new();
            let mut seq = 0usize;
            for (op, k) in ops {
                match op {
                    0 | 1 => {
                        let words: Vec<usize> = (seq..seq + k).collect();
                        let mut got = Vec::new();
                        let n = r.push_reclaiming(&words, each(|w| got.push(w)));
                        prop_assert_eq!(&got, &skipped, "releases what was skipped, in order");
                        released.append(&mut skipped);
                        prop_assert_eq!(n, k.min(cap - queued.len()));
                        queued.extend(&words[..n]);
                        seq += n;
                    }
                    _ => {
                        let n = r.skip(k);
                        prop_assert_eq!(n, k.min(queued.len()));
                        skipped.extend(queued.drain(..n));
                    }
                }
                prop_assert_eq!(r.len(), queued.len());
            }
            let mut rest = Vec::new();
            r.release_rest(queued_too, each(|w| rest.push(w)));
            let mut want = skipped.clone();
            if queued_too {
                want.extend(queued.iter());
            }
            prop_assert_eq!(&rest, &want);
            released.extend(rest);
            prop_assert!(released.windows(2).all(|w| w[0] + 1 == w[1]), "each word once, in order");
            let mut again = Vec::new();
            r.release_rest(true, each(|w| again.push(w)));
            prop_assert_eq!(again.len(), if queued_too { 0 } else { queued.len() }, "never twice");
        }
    }

    /// Two threads on a reclaiming ring: every word the producer pushes comes back to it once,
    /// in order, and only after the consumer skipped it.
    #[test]
    fn two_threads_reclaim_every_word_once_in_order() {
        const N: usize = 1_000_000;
        let r = Arc::new(SpscRing::new(29));
        let skipped = Arc::new(AtomicUsize::new(0));
        let consumer = {
            let (r, skipped) = (r.clone(), skipped.clone());
            std::thread::spawn(move || {
                let mut max = 1;
                while skipped.load(Relaxed) < N {
                    // Announced before the skip makes them releasable: at least `k` are queued,
                    // and only this thread takes.
                    let k = max.min(r.len());
                    skipped.fetch_add(k, Release);
                    assert_eq!(r.skip(k), k);
                    max = max % 40 + 1;
                }
            })
        };
        let mut next = 1usize;
        let mut want = 1usize;
        let mut burst = 1;
        let check = |w: usize, want: &mut usize| {
            assert_eq!(w, *want, "released in order, each once");
            assert!(w <= skipped.load(Acquire), "released only once skipped");
            *want += 1;
        };
        while next <= N {
            let words: Vec<usize> = (next..(next + burst).min(N + 1)).collect();
            next += r.push_reclaiming(&words, each(|w| check(w, &mut want)));
            burst = burst % 45 + 1;
        }
        consumer.join().unwrap();
        r.push_reclaiming(&[], each(|w| check(w, &mut want)));
        assert_eq!(want, N + 1, "every word released");
        r.release_rest(true, each(|w| panic!("{w} released twice")));
    }

    /// Two threads, a small ring, bursts of every size: nothing lost, repeated or reordered.
    #[test]
    fn two_threads_hand_over_every_word_in_order() {
        const N: usize = 2_000_000;
        let r = Arc::new(SpscRing::new(37));
        let producer = {
            let r = r.clone();
            std::thread::spawn(move || {
                let mut next = 1usize;
                let mut burst = 1;
                while next <= N {
                    let words: Vec<usize> = (next..(next + burst).min(N + 1)).collect();
                    next += r.push(&words);
                    burst = burst % 45 + 1;
                    if r.producer_len(false).0 > 30 {
                        let _ = r.producer_len(true);
                    }
                }
            })
        };
        let mut want = 1usize;
        let mut max = 1;
        while want <= N {
            for w in pop_vec(&r, max) {
                assert_eq!(w, want, "words come out in order, each once");
                want += 1;
            }
            max = max % 50 + 1;
        }
        producer.join().unwrap();
        assert!(r.is_empty());
    }
}
