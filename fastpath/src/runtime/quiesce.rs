//! Which lcore loops are running, and a wait until each has finished a poll it began after a
//! given moment: the grace period after an ethdev RX/TX callback is removed (a capture tool
//! stopping), before what the callback used may be freed. See `dpdk-sys/shim.c` for why.
//!
//! Not on the packet path: a loop registers once when it starts; the wait runs on the thread
//! that removed the callback (the EAL's multi-process thread) and only reads the loops' poll
//! counters, which each lcore bumps at the end of every poll anyway.

use crate::stats::LcoreStats;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

static RUNNING: Mutex<Vec<Arc<LcoreStats>>> = Mutex::new(Vec::new());

fn running() -> MutexGuard<'static, Vec<Arc<LcoreStats>>> {
    // A panic while the list was held leaves it consistent (pushes and removals only).
    RUNNING.lock().unwrap_or_else(|e| e.into_inner())
}

fn polls(s: &LcoreStats) -> u64 {
    s.idle_polls.get().wrapping_add(s.busy_polls.get())
}

/// A running lcore loop, counted by [`wait_for_every_loop`] until dropped (the loop returned).
pub(crate) struct Running(Arc<LcoreStats>);

impl Running {
    /// Registers the loop whose polls `stats` counts.
    pub(crate) fn new(stats: &Arc<LcoreStats>) -> Running {
        running().push(stats.clone());
        Running(stats.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        running().retain(|s| !Arc::ptr_eq(s, &self.0));
    }
}

/// Waits until every running loop has completed two polls since the call (so at least one
/// poll that began after it), or has returned; `false` if `limit` passed first. A loop bumps
/// its count after its bursts, so a burst that was under way at the call, and any callback it
/// was running, has then ended.
pub fn wait_for_every_loop(limit: Duration) -> bool {
    let seen: Vec<(Arc<LcoreStats>, u64)> = running().iter().map(|s| (s.clone(), polls(s))).collect();
    let deadline = Instant::now() + limit;
    loop {
        let pending = {
            let now_running = running();
            seen.iter()
                .any(|(s, at)| now_running.iter().any(|r| Arc::ptr_eq(r, s)) && polls(s).wrapping_sub(*at) < 2)
        };
        if !pending {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_micros(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// One test: the registry is process-wide.
    #[test]
    fn the_wait_ends_when_every_running_loop_has_polled_twice_or_returned() {
        assert!(wait_for_every_loop(Duration::ZERO), "nothing running");
        let a = Arc::new(LcoreStats::new(1, vec![], vec![]));
        let b = Arc::new(LcoreStats::new(2, vec![], vec![]));
        let (ra, rb) = (Running::new(&a), Running::new(&b));
        // Polls before the call do not count; neither loop polls after it: the wait gives up.
        a.busy_polls.inc();
        a.idle_polls.inc();
        assert!(!wait_for_every_loop(Duration::from_millis(5)));
        // `b` returns and `a` keeps polling (another thread): the wait ends.
        drop(rb);
        let stop = Arc::new(AtomicBool::new(false));
        let poller = {
            let (a, stop) = (a.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    a.idle_polls.inc();
                    std::thread::sleep(Duration::from_micros(50));
                }
            })
        };
        assert!(wait_for_every_loop(Duration::from_secs(5)));
        stop.store(true, Ordering::Relaxed);
        poller.join().unwrap();
        // One poll after the call is not enough: it may have begun before.
        let once = {
            let a = a.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(1));
                a.busy_polls.inc();
            })
        };
        assert!(!wait_for_every_loop(Duration::from_millis(20)), "one poll only");
        once.join().unwrap();
        drop(ra);
        assert!(wait_for_every_loop(Duration::ZERO), "every loop returned");
    }
}
