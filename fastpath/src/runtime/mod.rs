//! The lcore loops, thin drivers of DPDK queues: the RX lcore ([`RxLcore`], `rx.rs`) polls its
//! RX queues and hands each burst to the DPDK-free [`crate::rx::RxEngine`]; the plain forward
//! mode (`forward.rs`) sends bursts back out unchanged; the worker ([`WorkerLcore`],
//! `worker.rs`) polls the DPDK-free [`crate::worker::WorkerEngine`], which drains service sockets
//! and runs their actions. This file holds what they share:
//! start/stop coordination, the poll accounting and idle policy, the TSC clock.
//!
//! Each loop owns its queue handles, its pipeline copy and its counter block, so the per-packet
//! path takes no lock and writes no memory another lcore writes (the socket rings' own
//! head/tail and, only when a socket is short of room, its rollover hints excepted). Shared words
//! read in the loops: the stop flag and the published generation number, both written rarely.
//!
//! Stopping: RX lcores stop first and say so; workers then drain their sockets to empty, run
//! the action on every packet, and stop. So at a clean stop no packet is left in a socket and
//! every one has been counted.

use crate::dpdk::wake::{self, Doorbell, Waiter, Woken};
use crate::dpdk::{eal, MbufRing};
use crate::pipeline::Instant;
use crate::socket::{Socket, SocketQueue};
use crate::stats::LcoreStats;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod forward;
pub mod quiesce;
mod rx_lcore;
mod worker_lcore;

pub use crate::rx::EXPIRE_BUDGET;
pub use crate::tx::BURST;
pub use rx_lcore::RxLcore;
pub use worker_lcore::WorkerLcore;

/// What a loop does when it polls and finds nothing.
#[derive(Clone, Copy, Debug)]
pub struct IdlePolicy {
    /// TSC cycles of empty polls in a row (since the last poll that received something) for
    /// which the loop keeps polling, yielding its CPU between polls, before it blocks or
    /// sleeps. Polling bridges the gaps of steady traffic: a blocked lcore's wake-up cost ~30 µs
    /// on this project's VMs, and an answer through a worker needs two; a yield lets the
    /// client, the kernel or another lcore sharing the CPU run first (a spin held it: the
    /// echo's client, woken on the worker's CPU, waited out the worker's spin).
    pub poll_cycles: u64,
    /// A yield that gives the CPU away this long (TSC cycles) ran another task for a time
    /// slice, not a client for an answer: polling on would compete with that task, and the
    /// lcore would run only when the scheduler got round to it, up to a slice late, where a
    /// blocked lcore woken by its packet preempts at once. Two in a row end the window and keep
    /// the loop from polling for a backoff (`CROWDED_BACKOFF`).
    pub crowded_cycles: u64,
    /// How long to sleep per empty poll after that, where the loop has nothing to block on;
    /// 0 means never sleep nor block nor yield (pure busy polling).
    pub sleep: Duration,
    /// The longest the loop blocks after that on what wakes it (its RX queues' wake-up fds,
    /// its doorbell), before it polls again (timers, adoption); 0 means never block (sleep).
    pub wait: Duration,
}

impl IdlePolicy {
    /// Whether the loop ever blocks on a [`Waiter`].
    pub fn blocks(&self) -> bool {
        !self.sleep.is_zero() && !self.wait.is_zero()
    }
}

/// Consecutive waits woken by a wake-up fd whose next poll found nothing, after which the loop
/// sleeps instead of blocking: a wake-up fd that keeps reporting with nothing to receive (a
/// driver's fd we misread) must not become a busy loop.
const FUTILE_WAKES: u32 = 64;

/// One loop's idle policy and what it blocks on.
pub(crate) struct Idler {
    policy: IdlePolicy,
    waiter: Option<Waiter>,
    /// The last wait was woken by a wake-up fd.
    woken_by_io: bool,
    futile: u32,
    /// Until this TSC reading the loop does not poll when idle but blocks at once: two yields in
    /// a row gave the CPU away for `crowded_cycles` or more, so another task wants this CPU.
    crowded_until: u64,
    /// How long the next such finding (two long yields in a row) keeps the loop from polling:
    /// doubled at each, back to the least once a whole window was polled without one.
    backoff: u64,
    /// What the yields of the current window found.
    window: Window,
    /// Long yields since the last short one (across windows): one is a task that ran for a
    /// while (the client just answered, a kernel worker), two in a row a task that wants the
    /// CPU for as long as it gets it.
    long_in_a_row: u32,
}

/// What the yields of an lcore's polling window (since its last busy poll) found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Window {
    /// None yet.
    Unpolled,
    /// Every one was short.
    Clean,
    /// Two in a row gave the CPU away for long.
    Crowded,
}

/// How long two long yields in a row keep a loop from polling, at least and at most, in units of
/// `crowded_cycles` (250 µs by default: 50 ms and 1.6 s). A task that wants the CPU for its time
/// slice usually wants it for longer; each probe of whether it still does can cost a packet a
/// time slice (a tick, 4 ms).
const CROWDED_BACKOFF: (u64, u64) = (200, 6_400);

impl Idler {
    /// The policy, blocking on `bell` and `fds` where it blocks at all; without a waiter (no
    /// fd of any queue, or none could be made) it sleeps.
    pub(crate) fn new(policy: IdlePolicy, bell: Option<Arc<Doorbell>>, fds: &[RawFd]) -> Idler {
        if !policy.sleep.is_zero() {
            // A sleep or a wait's bound is what it says: the default 50 µs slack doubled both.
            wake::set_timer_slack(1_000);
        }
        let waiter = match bell {
            Some(b) if policy.blocks() => Waiter::new(b, fds).ok(),
            _ => None,
        };
        Idler {
            policy,
            waiter,
            woken_by_io: false,
            futile: 0,
            crowded_until: 0,
            backoff: policy.crowded_cycles.saturating_mul(CROWDED_BACKOFF.0),
            window: Window::Unpolled,
            long_in_a_row: 0,
        }
    }

    /// A poll that started at TSC `t0` found nothing, the last `for_cycles` of polls all empty;
    /// `idle()` re-checks, with the loop's doorbell armed, whatever arrives without a wake-up
    /// fd (a worker's sockets).
    #[inline]
    fn idle(&mut self, t0: u64, for_cycles: u64, stats: &LcoreStats, idle: impl FnOnce() -> bool) {
        if self.policy.sleep.is_zero() {
            eal::pause();
            return;
        }
        if for_cycles < self.policy.poll_cycles && t0 >= self.crowded_until {
            let t = eal::rdtsc();
            wake::yield_cpu();
            if eal::rdtsc().wrapping_sub(t) < self.policy.crowded_cycles {
                self.long_in_a_row = 0;
                if self.window == Window::Unpolled {
                    self.window = Window::Clean;
                }
            } else if std::mem::replace(&mut self.long_in_a_row, 1) > 0 {
                self.long_in_a_row = 0;
                self.crowded_until = t0.saturating_add(self.backoff);
                let most = self.policy.crowded_cycles.saturating_mul(CROWDED_BACKOFF.1);
                self.backoff = self.backoff.saturating_mul(2).min(most);
                self.window = Window::Crowded;
            }
            return;
        }
        if std::mem::replace(&mut self.window, Window::Unpolled) == Window::Clean {
            self.backoff = self.policy.crowded_cycles.saturating_mul(CROWDED_BACKOFF.0);
        }
        if std::mem::take(&mut self.woken_by_io) {
            self.futile = self.futile.saturating_add(1);
        }
        match &mut self.waiter {
            Some(w) if self.futile < FUTILE_WAKES => {
                let woken = w.wait(self.policy.wait, idle);
                self.woken_by_io = woken == Woken::Io;
                stats.wakeups[woken as usize].inc();
            }
            _ => std::thread::sleep(self.policy.sleep),
        }
    }

    /// A poll received something.
    #[inline]
    fn busy(&mut self) {
        self.woken_by_io = false;
        self.futile = 0;
        self.window = Window::Unpolled;
    }
}

/// The bookkeeping every poll of an lcore loop (RX or worker) does: one TSC read per poll (rdtsc is ~40 cycles)
/// serves the cycle accounting and the pipeline clock; a busy poll's cycles run from its start to
/// the start of the next poll; empty polls count as idle and run the idle policy.
#[derive(Default)]
pub(crate) struct Polls {
    busy_since: Option<u64>,
    /// The start of the last poll that received nothing (its cycles, sleep included, are
    /// counted idle when the next poll starts).
    idle_since: Option<u64>,
    empty_in_a_row: u32,
    /// The start of the first of those empty polls.
    empty_since: u64,
}

impl Polls {
    /// Starts a poll: its TSC reading.
    #[inline(always)]
    pub(crate) fn start(&mut self, stats: &LcoreStats) -> u64 {
        let t0 = eal::rdtsc();
        if let Some(t) = self.busy_since.take() {
            stats.busy_cycles.add(t0.wrapping_sub(t));
        } else if let Some(t) = self.idle_since.take() {
            stats.idle_cycles.add(t0.wrapping_sub(t));
        }
        t0
    }

    /// Ends the poll that started at `t0` and received `got` packets; an empty one runs the
    /// idle policy, `idle` being its re-check ([`Idler`]).
    #[inline(always)]
    pub(crate) fn end(
        &mut self,
        t0: u64,
        got: usize,
        stats: &LcoreStats,
        idler: &mut Idler,
        idle: impl FnOnce() -> bool,
    ) {
        if got == 0 {
            stats.idle_polls.inc();
            self.idle_since = Some(t0);
            self.empty_in_a_row = self.empty_in_a_row.saturating_add(1);
            if self.empty_in_a_row == 1 {
                self.empty_since = t0;
            }
            let for_cycles = t0.wrapping_sub(self.empty_since);
            idler.idle(t0, for_cycles, stats, idle);
        } else {
            stats.busy_polls.inc();
            self.busy_since = Some(t0);
            self.empty_in_a_row = 0;
            idler.busy();
        }
    }

    /// The loop stopped: the last busy poll's cycles.
    pub(crate) fn finish(self, stats: &LcoreStats) {
        if let Some(t) = self.busy_since {
            stats.busy_cycles.add(eal::rdtsc().wrapping_sub(t));
        } else if let Some(t) = self.idle_since {
            stats.idle_cycles.add(eal::rdtsc().wrapping_sub(t));
        }
    }
}

/// Converts TSC ticks to the pipeline's nanosecond clock without division per packet.
#[derive(Clone, Copy, Debug)]
pub struct TscClock {
    /// ns per tick in 32.32 fixed point.
    mult: u64,
}

impl TscClock {
    /// A clock for a TSC running at `hz`.
    pub fn new(hz: u64) -> Self {
        TscClock {
            mult: ((1_000_000_000u128 << 32) / hz.max(1) as u128) as u64,
        }
    }
    /// Now, in pipeline time.
    #[inline]
    pub fn now(&self) -> Instant {
        self.at(eal::rdtsc())
    }
    /// The pipeline time of a TSC reading.
    #[inline]
    pub fn at(&self, tsc: u64) -> Instant {
        Instant(((tsc as u128 * self.mult as u128) >> 32) as u64)
    }
}

/// Start and stop coordination between the control thread, RX lcores and workers.
///
/// Every lcore reads the stop flag on every poll, so the struct has lines of its own (128-byte
/// alignment: the adjacent-line prefetcher moves lines in pairs): sharing one with a heap
/// object an RX lcore writes per packet, it was a line bouncing between the RX lcore and the
/// worker's polls, and the open-port benchmark's RX lcore ran at half speed or full speed
/// depending on where the allocator happened to put it (the size of the environment moved it).
#[repr(align(128))]
pub struct RunControl {
    stop: AtomicBool,
    rx_running: AtomicUsize,
    rx_lcores: Vec<Arc<LcoreStats>>,
    /// Each RX lcore's doorbell, by slot (`None`: eventfd failed, that lcore sleeps instead).
    rx_bells: Vec<Option<Arc<Doorbell>>>,
    /// Each worker's doorbell, by slot: rung by whoever hands it work.
    worker_bells: Arc<[Option<Arc<Doorbell>>]>,
}

impl RunControl {
    /// Coordination for these RX lcores and `workers` workers.
    pub fn new(rx_lcores: Vec<Arc<LcoreStats>>, workers: usize) -> Self {
        let bell = || Doorbell::new().ok().map(Arc::new);
        RunControl {
            stop: AtomicBool::new(false),
            rx_running: AtomicUsize::new(rx_lcores.len()),
            rx_bells: rx_lcores.iter().map(|_| bell()).collect(),
            worker_bells: (0..workers).map(|_| bell()).collect(),
            rx_lcores,
        }
    }
    /// Asks every loop to stop (RX lcores at once, workers once their sockets are empty).
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.rx_bells.iter().flatten().for_each(|b| b.ring());
        self.worker_bells.iter().flatten().for_each(|b| b.ring());
    }
    /// Whether a stop was requested.
    #[inline]
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
    /// Start-up failed before every RX lcore ran: let the ones that did stop, and workers finish.
    pub fn abort(&self) {
        self.rx_running.store(0, Ordering::SeqCst);
        self.request_stop();
    }
    pub(crate) fn rx_exited(&self) {
        self.rx_running.fetch_sub(1, Ordering::SeqCst);
        // Workers wait for every RX lcore's exit before they drain and stop.
        self.worker_bells.iter().flatten().for_each(|b| b.ring());
    }
    pub(crate) fn rx_all_exited(&self) -> bool {
        self.rx_running.load(Ordering::SeqCst) == 0
    }
    /// Whether every RX lcore runs generation `g` or later (or has exited).
    pub(crate) fn rx_all_reached(&self, g: u64) -> bool {
        self.rx_all_exited() || self.rx_lcores.iter().all(|l| l.generation() >= g)
    }
    /// RX lcore `slot`'s doorbell.
    pub(crate) fn rx_bell(&self, slot: usize) -> Option<Arc<Doorbell>> {
        self.rx_bells.get(slot).cloned().flatten()
    }
    /// Every worker's doorbell, by slot.
    pub(crate) fn worker_bells(&self) -> &Arc<[Option<Arc<Doorbell>>]> {
        &self.worker_bells
    }
}

/// Rings worker `slot`'s doorbell if it sleeps: it has just been handed work (`bells` is empty
/// where loops never block).
#[inline(always)]
pub(crate) fn wake_worker(bells: &[Option<Arc<Doorbell>>], slot: usize) {
    if let Some(Some(b)) = bells.get(slot) {
        b.ring_if_asleep();
    }
}

/// The DPDK ring behind a socket's queue of RX lcore slot `slot` (the daemon's table builder
/// makes every socket queue one; a queue of another kind takes and gives nothing).
#[inline(always)]
pub(crate) fn ring(s: &Socket, slot: usize) -> Option<&MbufRing> {
    s.queue(slot).ring()
}

/// Busy-waits `cycles` TSC cycles (a service's simulated per-packet cost; nothing for 0).
#[inline]
pub(crate) fn spin(cycles: u64) {
    if cycles > 0 {
        let until = eal::rdtsc().wrapping_add(cycles);
        while eal::rdtsc() < until {
            eal::pause();
        }
    }
}

/// A sequence tunnel's hand-off ring (the daemon builds them as [`MbufRing`]s, shared modes: the
/// RX lcores and every worker hand its owner what it must number).
#[inline]
pub(crate) fn handoff_ring(t: &crate::pipeline::tunnel::Tunnel) -> Option<&MbufRing> {
    t.handoff.as_deref().and_then(SocketQueue::ring)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks(stats: &LcoreStats) -> u64 {
        stats.wakeups.iter().map(|c| c.get()).sum()
    }

    /// After a poll that received something, empty polls keep polling (no block, nothing
    /// counted as a wake-up) for `poll_cycles`; the first empty poll after that blocks on the
    /// waiter (here until its bound: nothing rings). The TSC readings are the test's own.
    #[test]
    fn an_lcore_keeps_polling_for_the_window_after_traffic_then_blocks() {
        let stats = LcoreStats::new(0, vec![], vec![]);
        let bell = Arc::new(Doorbell::new().unwrap());
        let policy = IdlePolicy {
            poll_cycles: 1_000_000,
            crowded_cycles: u64::MAX,
            sleep: Duration::from_micros(50),
            wait: Duration::from_millis(1),
        };
        let mut idler = Idler::new(policy, Some(bell), &[]);
        assert!(idler.waiter.is_some());
        let mut polls = Polls::default();
        polls.end(0, 5, &stats, &mut idler, || true);
        for t in (1..1_000_000).step_by(100_000) {
            polls.end(t, 0, &stats, &mut idler, || true);
        }
        assert_eq!(blocks(&stats), 0, "polled, never blocked, within the window");
        // The window runs from the first empty poll: this one is past it.
        polls.end(1_000_001, 0, &stats, &mut idler, || true);
        assert_eq!(blocks(&stats), 1, "blocked once past the window");
        // Traffic again: a new window.
        polls.end(2_000_000, 3, &stats, &mut idler, || true);
        polls.end(2_000_001, 0, &stats, &mut idler, || true);
        polls.end(2_900_000, 0, &stats, &mut idler, || true);
        assert_eq!(blocks(&stats), 1, "a new window after traffic");
        // Without a window, the first empty poll blocks.
        let mut idler = Idler::new(
            IdlePolicy {
                poll_cycles: 0,
                ..policy
            },
            Some(Arc::new(Doorbell::new().unwrap())),
            &[],
        );
        polls.end(3_000_000, 1, &stats, &mut idler, || true);
        polls.end(3_000_001, 0, &stats, &mut idler, || true);
        assert_eq!(blocks(&stats), 2);
        // Two yields in a row that gave the CPU away for `crowded_cycles` (here: any, 1 cycle)
        // end the window and keep the loop from polling for a backoff (200 cycles), doubled at
        // each; one does not.
        let crowded = IdlePolicy {
            crowded_cycles: 1,
            ..policy
        };
        let mut idler = Idler::new(crowded, Some(Arc::new(Doorbell::new().unwrap())), &[]);
        polls.end(3_500_000, 1, &stats, &mut idler, || true);
        polls.end(3_500_001, 0, &stats, &mut idler, || true);
        assert_eq!(blocks(&stats), 2, "one long yield: polls on");
        assert_eq!(idler.crowded_until, 0);
        polls.end(3_500_002, 0, &stats, &mut idler, || true);
        assert_eq!(blocks(&stats), 2, "the second yields too");
        assert_eq!(idler.crowded_until, 3_500_202, "two in a row: crowded");
        polls.end(3_500_003, 0, &stats, &mut idler, || true);
        assert_eq!(blocks(&stats), 3, "crowded: blocks within the window");
        polls.end(3_500_100, 1, &stats, &mut idler, || true);
        polls.end(3_500_101, 0, &stats, &mut idler, || true);
        assert_eq!(blocks(&stats), 4, "traffic within the backoff: blocks at once");
        polls.end(3_600_000, 1, &stats, &mut idler, || true);
        polls.end(3_600_001, 0, &stats, &mut idler, || true);
        polls.end(3_600_002, 0, &stats, &mut idler, || true);
        assert_eq!(blocks(&stats), 4, "past the backoff: polls again");
        assert_eq!(idler.crowded_until, 3_600_402, "crowded again: twice the backoff");
        polls.end(3_600_003, 0, &stats, &mut idler, || true);
        assert_eq!(blocks(&stats), 5);
        // Pure polling never blocks.
        let mut idler = Idler::new(
            IdlePolicy {
                sleep: Duration::ZERO,
                ..policy
            },
            None,
            &[],
        );
        polls.end(4_000_000, 1, &stats, &mut idler, || true);
        polls.end(9_000_000, 0, &stats, &mut idler, || true);
        assert_eq!(blocks(&stats), 5);
    }
}
