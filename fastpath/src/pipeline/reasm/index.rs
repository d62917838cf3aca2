//! Fixed-capacity building blocks of the reassembly table: an open-addressing map and the
//! deadline heap. Both are sized once at construction and never allocate afterwards.

use foldhash::quality::SeedableRandomState;
use foldhash::SharedSeed;
use std::hash::{BuildHasher, Hash};

/// A map from `K` to `V` with linear probing and backward-shift deletion (no tombstones, so
/// lookups never degrade after many removals). It holds at most half as many entries as cells,
/// which bounds probe lengths and guarantees every probe ends at an empty cell.
///
/// Keys are hashed under a per-table secret seed (foldhash's `quality` hash, a folded multiply
/// with a final avalanche, seeded from std's `RandomState`, whose keys come from the OS): the keys are chosen by
/// remote senders (addresses, IP identification), and a fixed hash would let them build
/// colliding keys and turn every lookup into a scan of the table. SipHash, std's, does the same
/// at several times the cost, and under a fragment flood its hashing dominated the RX lcore
/// (benches/NOTES.md, "The reassembly table's hash"). Each cell keeps its key's home, so a
/// removal's backward shift rehashes nothing.
pub(super) struct Index<K, V> {
    cells: Box<[Option<(K, V, u32)>]>,
    mask: usize,
    len: usize,
    limit: usize,
    hasher: SeedableRandomState,
}

impl<K: Copy + Eq + Hash, V: Copy> Index<K, V> {
    /// A map for up to `n` entries.
    pub(super) fn with_capacity(n: usize) -> Self {
        let cells = (n.max(1) * 2).next_power_of_two();
        Index {
            cells: (0..cells).map(|_| None).collect(),
            mask: cells - 1,
            len: 0,
            limit: n.max(1),
            hasher: SeedableRandomState::with_seed(secret_seed(), SharedSeed::global_random()),
        }
    }

    #[inline]
    fn home(&self, k: &K) -> usize {
        self.hasher.hash_one(k) as usize & self.mask
    }

    #[inline]
    fn find(&self, k: &K) -> Option<usize> {
        let mut i = self.home(k);
        loop {
            match &self.cells[i] {
                None => return None,
                Some((c, _, _)) if c == k => return Some(i),
                Some(_) => i = (i + 1) & self.mask,
            }
        }
    }

    /// The value stored for `k`.
    #[inline]
    pub(super) fn get(&self, k: &K) -> Option<V> {
        self.find(k).and_then(|i| self.cells[i].map(|(_, v, _)| v))
    }

    /// The value stored for `k`, writable.
    #[inline]
    pub(super) fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        let i = self.find(k)?;
        self.cells[i].as_mut().map(|(_, v, _)| v)
    }

    /// Stores `v` for `k`, which must be absent; `false` when the map is at its capacity.
    pub(super) fn insert(&mut self, k: K, v: V) -> bool {
        debug_assert!(self.find(&k).is_none());
        if self.len >= self.limit {
            return false;
        }
        let home = self.home(&k);
        let mut i = home;
        while self.cells[i].is_some() {
            i = (i + 1) & self.mask;
        }
        // `cells` is at most 2^32 long: `n` is a slot count below u32::MAX, doubled.
        self.cells[i] = Some((k, v, home as u32));
        self.len += 1;
        true
    }

    /// Removes `k`, returning its value. Entries after it in its probe run move back so that
    /// every entry stays reachable from its home cell.
    pub(super) fn remove(&mut self, k: &K) -> Option<V> {
        let mut hole = self.find(k)?;
        let (_, v, _) = self.cells[hole].take()?;
        self.len -= 1;
        let mut j = hole;
        loop {
            j = (j + 1) & self.mask;
            let Some((_, _, h)) = self.cells[j] else { break };
            let h = h as usize;
            // The entry at j may stay only if its home lies cyclically in (hole, j].
            let stays = if hole <= j {
                hole < h && h <= j
            } else {
                hole < h || h <= j
            };
            if !stays {
                self.cells[hole] = self.cells[j].take();
                hole = j;
            }
        }
        Some(v)
    }

    /// Number of entries.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Removes every entry.
    pub(super) fn clear(&mut self) {
        self.cells.iter_mut().for_each(|c| *c = None);
        self.len = 0;
    }
}

/// A secret per-table seed: std's `RandomState` holds keys drawn from the OS's random source
/// (foldhash's own random seed mixes addresses and a counter, which an attacker could guess).
fn secret_seed() -> u64 {
    std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64)
}

/// A binary min-heap of slot numbers ordered by `(deadline, slot)`, with each slot's position
/// kept by the caller so that any slot can be removed in O(log n) (a completed or evicted
/// datagram leaves the heap at once; no lazy deletion that would let dead entries pile up).
pub(super) struct DeadlineHeap {
    heap: Vec<u32>,
}

/// What the heap needs to know about slots: their deadline and where they sit in the heap.
pub(super) trait HeapSlots {
    fn deadline(&self, slot: u32) -> u64;
    fn set_pos(&mut self, slot: u32, pos: u32);
    fn pos(&self, slot: u32) -> u32;
}

impl DeadlineHeap {
    pub(super) fn with_capacity(n: usize) -> Self {
        DeadlineHeap {
            heap: Vec::with_capacity(n),
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.heap.len()
    }

    pub(super) fn clear(&mut self) {
        self.heap.clear();
    }

    /// The slot with the earliest deadline.
    pub(super) fn peek(&self) -> Option<u32> {
        self.heap.first().copied()
    }

    #[inline]
    fn less(s: &impl HeapSlots, a: u32, b: u32) -> bool {
        (s.deadline(a), a) < (s.deadline(b), b)
    }

    fn place(&mut self, s: &mut impl HeapSlots, pos: usize, slot: u32) {
        self.heap[pos] = slot;
        s.set_pos(slot, pos as u32);
    }

    fn sift_up(&mut self, s: &mut impl HeapSlots, mut pos: usize) {
        let slot = self.heap[pos];
        while pos > 0 {
            let parent = (pos - 1) / 2;
            let p = self.heap[parent];
            if !Self::less(s, slot, p) {
                break;
            }
            self.place(s, pos, p);
            pos = parent;
        }
        self.place(s, pos, slot);
    }

    fn sift_down(&mut self, s: &mut impl HeapSlots, mut pos: usize) {
        let slot = self.heap[pos];
        let n = self.heap.len();
        loop {
            let l = 2 * pos + 1;
            if l >= n {
                break;
            }
            let r = l + 1;
            let c = if r < n && Self::less(s, self.heap[r], self.heap[l]) {
                r
            } else {
                l
            };
            if !Self::less(s, self.heap[c], slot) {
                break;
            }
            let cs = self.heap[c];
            self.place(s, pos, cs);
            pos = c;
        }
        self.place(s, pos, slot);
    }

    /// Adds `slot` (its deadline already set). Never grows past the capacity given at
    /// construction: there are never more slots than that.
    pub(super) fn push(&mut self, s: &mut impl HeapSlots, slot: u32) {
        debug_assert!(self.heap.len() < self.heap.capacity());
        self.heap.push(slot);
        let pos = self.heap.len() - 1;
        self.sift_up(s, pos);
    }

    /// Removes `slot`, wherever it is.
    pub(super) fn remove(&mut self, s: &mut impl HeapSlots, slot: u32) {
        let pos = s.pos(slot) as usize;
        debug_assert_eq!(self.heap[pos], slot);
        let last = self.heap.pop().expect("slot is in the heap");
        if pos < self.heap.len() {
            self.heap[pos] = last;
            s.set_pos(last, pos as u32);
            self.sift_down(s, pos);
            let now_at = s.pos(last) as usize;
            self.sift_up(s, now_at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_insert_get_remove_under_churn() {
        let mut m: Index<u32, u32> = Index::with_capacity(64);
        let mut model = std::collections::HashMap::new();
        let mut x = 0x1234_5678u32;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let k = x % 200;
            if let std::collections::hash_map::Entry::Vacant(e) = model.entry(k) {
                if m.insert(k, k * 3) {
                    e.insert(k * 3);
                } else {
                    assert_eq!(m.len(), 64, "refused only when full");
                }
            } else {
                assert_eq!(m.remove(&k), model.remove(&k));
            }
            assert_eq!(m.len(), model.len());
        }
        for k in 0..200 {
            assert_eq!(m.get(&k), model.get(&k).copied(), "{k}");
        }
        *m.get_mut(&model.keys().next().copied().unwrap()).unwrap() = 7;
        m.clear();
        assert_eq!(m.len(), 0);
        assert_eq!(m.get(&1), None);
    }

    struct Slots {
        deadline: Vec<u64>,
        pos: Vec<u32>,
    }
    impl HeapSlots for Slots {
        fn deadline(&self, s: u32) -> u64 {
            self.deadline[s as usize]
        }
        fn set_pos(&mut self, s: u32, p: u32) {
            self.pos[s as usize] = p;
        }
        fn pos(&self, s: u32) -> u32 {
            self.pos[s as usize]
        }
    }

    #[test]
    fn heap_pops_in_deadline_order_with_arbitrary_removals() {
        let n = 100;
        let mut s = Slots {
            deadline: (0..n).map(|i| (i * 7919 % 101) as u64).collect(),
            pos: vec![0; n],
        };
        let mut h = DeadlineHeap::with_capacity(n);
        for i in 0..n as u32 {
            h.push(&mut s, i);
        }
        for i in (0..n as u32).step_by(3) {
            h.remove(&mut s, i);
        }
        let mut last = (0u64, 0u32);
        let mut count = 0;
        while let Some(top) = h.peek() {
            let k = (s.deadline(top), top);
            assert!(k >= last);
            assert!(top % 3 != 0, "removed slots never come back");
            last = k;
            h.remove(&mut s, top);
            count += 1;
        }
        assert_eq!(count, n - n.div_ceil(3));
        assert_eq!(h.len(), 0);
    }
}
