//! The RX lcore: polls its RX queues and drives the [`RxEngine`] with each burst; between
//! polls it adopts a new generation; at the end it stops the engine (fragments still held are
//! counted). Everything done per packet is the engine's.

use super::{ring, wake_worker, IdlePolicy, Idler, Polls, RunControl, TscClock};
use crate::dpdk::eal;
use crate::dpdk::wake::Doorbell;
use crate::dpdk::{Mbuf, Mempool, RxQueue, TxQueue};
use crate::generation::Published;
use crate::pipeline::Tables;
use crate::rx::{RxEngine, RxIo};
use crate::socket::Socket;
use crate::stats::{LcoreStats, OutcomeCost};
use crate::tx::BURST;
use std::sync::Arc;

/// What the engine uses on a DPDK RX lcore: its TX queues, the packet pool for the fragments of
/// answers, the pool of 64 KiB buffers for reassembled datagrams, the sockets' rings.
pub(super) struct DpdkIo {
    pool: Arc<Mempool>,
    big: Arc<Mempool>,
    /// An allocation failed since the last reclaim: what reclaiming sockets' workers took
    /// (datagram buffers among them) is to be freed at the end of this poll.
    reclaim_due: bool,
    /// Each worker's doorbell by slot, rung when this lcore shows it packets (empty where
    /// loops never block: nothing to ring, no fence).
    workers: Arc<[Option<Arc<Doorbell>>]>,
}

impl RxIo<Mbuf> for DpdkIo {
    type Tx = TxQueue;
    #[inline]
    fn alloc(&mut self, len: usize) -> Option<Mbuf> {
        let m = self.pool.alloc();
        self.reclaim_due |= m.is_none();
        m.filter(|m| m.tailroom() >= len)
    }
    #[inline]
    fn alloc_datagram(&mut self, len: usize) -> Option<Mbuf> {
        let m = self.big.alloc();
        self.reclaim_due |= m.is_none();
        m.filter(|m| m.tailroom() >= len)
    }
    #[inline]
    fn take_reclaim_due(&mut self) -> bool {
        std::mem::take(&mut self.reclaim_due)
    }
    #[inline(always)]
    fn enqueue(&mut self, socket: &Socket, slot: usize, pkts: &mut Vec<Mbuf>, hold: bool) -> usize {
        let took = ring(socket, slot).map_or(0, |r| r.enqueue_held(pkts, hold));
        if !hold {
            // Published: the socket's worker may be asleep.
            wake_worker(&self.workers, socket.worker);
        }
        took
    }
    #[inline]
    fn publish(&mut self, socket: &Socket, slot: usize) {
        if let Some(r) = ring(socket, slot) {
            r.publish();
            wake_worker(&self.workers, socket.worker);
        }
    }
    #[inline(always)]
    fn prefetch_line(&mut self, addr: *const u8) {
        crate::dpdk::prefetch(addr);
    }
    #[inline(always)]
    fn prefetch(&mut self, socket: &Socket, slot: usize, step: u8) {
        use crate::dpdk::prefetch;
        match step {
            // The socket's own line (its queues, counters and flags).
            0 => prefetch(std::ptr::from_ref(socket).cast()),
            // Its queue's lines, and the counters' block.
            1 => {
                if let Some(r) = ring(socket, slot) {
                    prefetch(std::ptr::from_ref(r).cast());
                    r.prefetch(0);
                }
                prefetch(std::ptr::from_ref(&*socket.counters).cast());
            }
            // The slots the enqueue releases and fills, and this lcore's counters.
            _ => {
                if let Some(r) = ring(socket, slot) {
                    r.prefetch(1);
                }
                if let Some(c) = socket.counters.rx.get(slot) {
                    prefetch(std::ptr::from_ref(c).cast());
                }
            }
        }
    }
    fn hand_off(&mut self, tunnel: &crate::pipeline::tunnel::Tunnel, pkts: &mut Vec<Mbuf>) -> usize {
        let took = match super::handoff_ring(tunnel) {
            Some(r) => r.enqueue(pkts),
            None => 0,
        };
        wake_worker(&self.workers, tunnel.owner);
        took
    }
    /// Frees what the workers took from this lcore's reclaiming queues (a sink's) since its
    /// last enqueue to them, which would otherwise stay held until the socket's next packet.
    fn idle(&mut self, tables: &Tables, slot: usize) {
        for s in tables.sockets.iter() {
            if let Some(r) = ring(s, slot) {
                r.reclaim();
            }
        }
    }
}

/// An RX lcore: polls its RX queues, answers on its own TX queue of each port and hands
/// service packets to sockets.
pub struct RxLcore {
    pub(super) slot: usize,
    pub(super) rx: Vec<RxQueue>,
    pub(super) engine: RxEngine<Mbuf, DpdkIo>,
    pub(super) published: Arc<Published>,
    pub(super) idle: IdlePolicy,
    pub(super) clock: TscClock,
    /// Plain forward mode: `forward[rx port id]` is the port to send on; no stage runs.
    forward: Option<Box<[u16]>>,
}

impl RxLcore {
    /// An RX lcore in counter slot `slot` over `rx` queues (their counters are `stats.rx[i]`,
    /// same order) that transmits on `tx` queues (counters `stats.tx[i]`, at most one per port);
    /// `pools` are the packet pool and the reassembly buffers' pool.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        slot: usize,
        rx: Vec<RxQueue>,
        tx: Vec<TxQueue>,
        published: Arc<Published>,
        stats: Arc<LcoreStats>,
        idle: IdlePolicy,
        clock: TscClock,
        pools: (Arc<Mempool>, Arc<Mempool>),
    ) -> Self {
        let io = DpdkIo {
            pool: pools.0,
            big: pools.1,
            reclaim_due: false,
            workers: Arc::new([]),
        };
        RxLcore {
            slot,
            rx,
            engine: RxEngine::new(published.current(), slot, tx, io, stats),
            published,
            idle,
            clock,
            forward: None,
        }
    }

    /// Switches this lcore to the plain forward mode: what arrives on port `p` leaves unchanged
    /// on this lcore's TX queue of port `to[p]` (a port beyond `to` forwards to itself), in the
    /// same burst, with no stage run. Each packet counts as `forwarded`, or `tx_full` when the
    /// queue refuses it. It measures what the DPDK layer and this loop cost on their own.
    pub fn forwarding(mut self, to: Vec<u16>) -> Self {
        self.forward = Some(to.into_boxed_slice());
        self
    }

    /// Runs until a stop is requested. On return every received packet has been counted once.
    pub fn run(mut self, control: &RunControl) {
        if let Some(to) = self.forward.take() {
            return self.run_forward(&to, control);
        }
        let mut idler = self.idler(control);
        if self.idle.blocks() {
            self.engine.io_mut().workers = control.worker_bells().clone();
        }
        let mut burst: Vec<Mbuf> = Vec::with_capacity(BURST);
        let mut polls = Polls::default();
        let stats = self.engine.stats().clone();
        let _running = super::quiesce::Running::new(&stats);
        while !control.stop_requested() {
            let t0 = polls.start(&stats);
            let now = self.clock.at(t0);
            // One poll in COST_SAMPLE_POLLS is timed by outcome (one decrement a poll otherwise).
            let sampled = stats.cost.due().then(|| OutcomeCost::snapshot(&stats.outcomes));
            let got = self.poll_queues(&mut burst, |e, qi, port, b| e.burst(qi, port, now, b));
            if got == 0 {
                // Reassembly expiry and an adoption count outcomes too.
                stats.open();
            }
            self.engine.poll_done(now);
            if let Some(before) = sampled {
                if got == 0 {
                    stats.cost.missed();
                } else {
                    stats
                        .cost
                        .record(&before, &stats.outcomes, eal::rdtsc().wrapping_sub(t0));
                }
            }
            // Quiescent point: nothing staged or in flight, so a new generation applies to whole
            // bursts.
            if let Some(t) = self.published.newer_than(self.engine.pipeline().generation()) {
                self.engine.adopt(t, now);
            }
            // Every packet of the poll has its outcome: a reader may take the counters.
            stats.close();
            if got == 0 {
                self.engine.idle();
            }
            // Nothing to re-check: the queues' fds are level-triggered.
            polls.end(t0, got, &stats, &mut idler, || true);
        }
        polls.finish(&stats);
        stats.open();
        self.engine.stop(self.clock.now());
        stats.close();
        control.rx_exited();
    }

    /// The idle policy of this lcore, blocking on its queues' wake-up fds and its doorbell:
    /// only if every queue has such an fd (one without would wait for the bound).
    pub(super) fn idler(&self, control: &RunControl) -> Idler {
        let fds: Option<Vec<_>> = self.rx.iter().map(RxQueue::wake_fd).collect();
        match fds {
            Some(fds) => Idler::new(self.idle, control.rx_bell(self.slot), &fds),
            None => Idler::new(self.idle, None, &[]),
        }
    }

    /// Polls each RX queue once; a queue that received packets has them counted and its burst
    /// handed to `each` (with the engine, the queue's index and port). The packets received in
    /// all; if any, a section of the lcore's counters is open ([`LcoreStats::open`]), for the
    /// caller to close once every one of them has its outcome.
    #[inline(always)]
    pub(super) fn poll_queues(
        &mut self,
        burst: &mut Vec<Mbuf>,
        mut each: impl FnMut(&mut RxEngine<Mbuf, DpdkIo>, usize, u16, &mut Vec<Mbuf>),
    ) -> usize {
        let mut got = 0usize;
        for qi in 0..self.rx.len() {
            let n = self.rx[qi].recv(burst);
            if n == 0 {
                continue;
            }
            let stats = self.engine.stats();
            if got == 0 {
                // After the first receive: a reader that waits for the section's end need not
                // wait for the driver's receive too.
                stats.open();
            }
            got += n;
            let port = self.rx[qi].port();
            stats.rx[qi].packets.add(n as u64);
            each(&mut self.engine, qi, port, burst);
        }
        got
    }
}
