//! Publishing config generations to the lcores, RCU-style.
//!
//! The control thread builds a complete new [`Tables`] off the data path and [`Published::publish`]es
//! it in one step (a lock-free pointer swap, then the generation number). Each lcore, at a
//! quiescent point of its loop (between bursts), compares the published number with the one it
//! runs; on a change it takes the new tables and drops its reference to the old ones. The old
//! generation is freed only when no lcore holds it any more: the control thread keeps it in a
//! retired list and frees it itself once it holds the last reference, so no lcore ever runs a
//! deallocation and no packet ever sees a half-applied config.

use crate::pipeline::Tables;
use arc_swap::ArcSwap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The current generation, readable by every lcore without a lock.
///
/// Every lcore reads the generation number on every poll: 128-byte aligned so that no heap
/// object another lcore writes shares its lines (as for the runtime's `RunControl`).
#[repr(align(128))]
pub struct Published {
    current: ArcSwap<Tables>,
    number: AtomicU64,
}

impl Published {
    /// Starts with `tables` (whose `generation` is the first number).
    pub fn new(tables: Arc<Tables>) -> Self {
        let n = tables.generation;
        Published {
            current: ArcSwap::new(tables),
            number: AtomicU64::new(n),
        }
    }

    /// The published generation number: one relaxed-acquire load of a line that is written only
    /// on reload, so checking it every loop iteration costs next to nothing.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.number.load(Ordering::Acquire)
    }

    /// The tables to adopt if the published generation differs from `running`.
    #[inline]
    pub fn newer_than(&self, running: u64) -> Option<Arc<Tables>> {
        if self.generation() == running {
            None
        } else {
            Some(self.current.load_full())
        }
    }

    /// The current tables.
    pub fn current(&self) -> Arc<Tables> {
        self.current.load_full()
    }

    /// Publishes `tables` (its `generation` must be the next number) and returns the previous
    /// generation for the caller to retire.
    pub fn publish(&self, tables: Arc<Tables>) -> Arc<Tables> {
        let n = tables.generation;
        let old = self.current.swap(tables);
        self.number.store(n, Ordering::Release);
        old
    }
}

/// Generations that were replaced but may still be in use by an lcore.
#[derive(Default)]
pub struct Retired {
    list: Vec<Arc<Tables>>,
}

impl Retired {
    /// Keeps `old` until no lcore holds it.
    pub fn retire(&mut self, old: Arc<Tables>) {
        self.list.push(old);
    }

    /// Frees every retired generation that only this list still references; returns how many
    /// are still held by some lcore.
    pub fn collect(&mut self) -> usize {
        self.list.retain(|t| Arc::strong_count(t) > 1);
        self.list.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables(n: u64) -> Arc<Tables> {
        Arc::new(Tables {
            generation: n,
            ..Default::default()
        })
    }

    #[test]
    fn lcore_adopts_new_generation_and_old_is_freed_after_it_moves() {
        let p = Published::new(tables(1));
        let mut running = p.current();
        assert!(p.newer_than(running.generation).is_none());

        let mut retired = Retired::default();
        retired.retire(p.publish(tables(2)));
        assert_eq!(p.generation(), 2);
        // The lcore still runs generation 1: it must not be freed yet.
        assert_eq!(retired.collect(), 1);

        running = p.newer_than(running.generation).expect("generation 2 is visible");
        assert_eq!(running.generation, 2);
        assert_eq!(retired.collect(), 0, "freed once the lcore moved past it");
        assert!(p.newer_than(running.generation).is_none());
    }
}
