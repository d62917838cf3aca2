//! The worker lcore: polls the [`WorkerEngine`] (which drains the service sockets assigned to
//! its slot and runs their actions), reads the TSC once per poll, adopts new generations between
//! polls, and at a stop drains its sockets to empty. Everything done per packet is the engine's.
//!
//! Stopping: RX lcores stop first and say so; workers then drain their sockets to empty, run
//! the action on every packet, and stop. So at a clean stop no packet is left in a socket.

use super::{handoff_ring, ring, spin, wake_worker, IdlePolicy, Idler, Polls, RunControl, TscClock};
use crate::dpdk::wake::Doorbell;
use crate::dpdk::{KernelRx, Mbuf, Mempool, WorkerTx};
use crate::generation::Published;
use crate::pipeline::tunnel::Tunnel;
use crate::pipeline::Instant;
use crate::socket::Socket;
use crate::stats::LcoreStats;
use crate::worker::{WorkerEngine, WorkerIo};
use std::sync::Arc;

/// What the engine uses on a DPDK worker lcore: the sockets' and hand-offs' rings, the packet
/// pool for the fragments of answers, its RX queue of each kernel interface, the TSC.
pub(super) struct DpdkIo {
    pool: Arc<Mempool>,
    /// This worker's RX queue of each kernel interface (`pipeline/kernel.rs`).
    kernel_rx: Vec<KernelRx>,
    /// Read when the kernel solicits a neighbour, to time the answers it may take.
    clock: TscClock,
    /// Each worker's doorbell by slot, rung when this worker hands a sequence tunnel's owner
    /// packets (empty where loops never block).
    workers: Arc<[Option<Arc<Doorbell>>]>,
}

impl WorkerIo<Mbuf> for DpdkIo {
    type Tx = WorkerTx;
    #[inline]
    fn dequeue(&mut self, socket: &Socket, slot: usize, out: &mut Vec<Mbuf>) -> Option<usize> {
        ring(socket, slot).map(|r| r.dequeue(out))
    }
    #[inline(always)]
    fn dequeue_and_free(&mut self, socket: &Socket, slot: usize, max: usize) -> Option<usize> {
        ring(socket, slot).map(|r| r.dequeue_and_free(max))
    }
    #[inline]
    fn consumer_len(&mut self, socket: &Socket, slot: usize) -> usize {
        ring(socket, slot).map_or(0, |r| r.consumer_len())
    }
    #[inline]
    fn hand_off(&mut self, tunnel: &Tunnel, pkts: &mut Vec<Mbuf>) -> usize {
        let took = handoff_ring(tunnel).map_or(0, |r| r.enqueue(pkts));
        wake_worker(&self.workers, tunnel.owner);
        took
    }

    #[inline]
    fn take_handed(&mut self, tunnel: &Tunnel, out: &mut Vec<Mbuf>) -> Option<usize> {
        handoff_ring(tunnel).map(|r| r.dequeue(out))
    }
    #[inline]
    fn alloc(&mut self, len: usize) -> Option<Mbuf> {
        self.pool.alloc().filter(|x| x.tailroom() >= len)
    }
    #[inline]
    fn kernel_queues(&self) -> usize {
        self.kernel_rx.len()
    }
    #[inline]
    fn kernel_interface(&self, q: usize) -> u16 {
        self.kernel_rx[q].port()
    }
    #[inline]
    fn kernel_recv(&mut self, q: usize, out: &mut Vec<Mbuf>) -> usize {
        self.kernel_rx[q].recv(out)
    }
    #[inline]
    fn spin(&mut self, cycles: u64) {
        spin(cycles);
    }
    #[inline(always)]
    fn prefetch(&self, addr: *const u8) {
        crate::dpdk::prefetch(addr);
    }
    #[inline]
    fn now(&mut self) -> Instant {
        self.clock.now()
    }
    fn release(&mut self, socket: &Socket) {
        for q in socket.queues() {
            if let Some(r) = q.ring() {
                r.release_rest(false);
            }
        }
    }
}

/// A worker lcore (module docs).
pub struct WorkerLcore {
    slot: usize,
    tsc_hz: u64,
    pool: Arc<Mempool>,
    tx: Vec<WorkerTx>,
    kernel_rx: Vec<KernelRx>,
    published: Arc<Published>,
    stats: Arc<LcoreStats>,
    idle: IdlePolicy,
}

impl WorkerLcore {
    /// The worker in socket slot `slot`, sending on `tx` (at most one queue per port; counters
    /// `stats.tx[i]`); `pool` gives the buffers of fragments.
    pub fn new(
        slot: usize,
        tx: Vec<WorkerTx>,
        published: Arc<Published>,
        stats: Arc<LcoreStats>,
        idle: IdlePolicy,
        tsc_hz: u64,
        pool: Arc<Mempool>,
    ) -> Self {
        WorkerLcore {
            slot,
            tsc_hz,
            pool,
            tx,
            kernel_rx: Vec::new(),
            published,
            stats,
            idle,
        }
    }

    /// Also polls these RX queues of kernel interfaces (one per interface), sending what the
    /// kernel wrote out of the port each mirrors.
    pub fn with_kernel_rx(mut self, queues: Vec<KernelRx>) -> Self {
        self.kernel_rx = queues;
        self
    }

    /// Runs until a stop is requested, every RX lcore has stopped and its sockets are empty.
    pub fn run(self, control: &RunControl) {
        // Woken by its doorbell (an RX lcore or worker handed it packets, a stop) and by the
        // kernel writing into a kernel interface: only if every such queue has an fd.
        let fds: Option<Vec<_>> = self.kernel_rx.iter().map(KernelRx::wake_fd).collect();
        let bell = control.worker_bells().get(self.slot).cloned().flatten();
        let mut idler = match fds {
            Some(fds) => Idler::new(self.idle, bell, &fds),
            None => Idler::new(self.idle, None, &[]),
        };
        let io = DpdkIo {
            pool: self.pool,
            kernel_rx: self.kernel_rx,
            clock: TscClock::new(self.tsc_hz),
            workers: if self.idle.blocks() {
                control.worker_bells().clone()
            } else {
                Arc::new([])
            },
        };
        let stats = self.stats;
        let mut engine = WorkerEngine::new(
            self.published.current(),
            self.slot,
            self.tx,
            io,
            stats.clone(),
            self.tsc_hz,
        );
        let mut polls = Polls::default();
        let clock = TscClock::new(self.tsc_hz);
        let _running = super::quiesce::Running::new(&stats);
        loop {
            // Read before draining: if RX had already stopped, an empty pass means truly empty.
            let finishing = control.stop_requested() && control.rx_all_exited();
            let t0 = polls.start(&stats);
            // Nanoseconds: the connection table's timeouts are in them.
            let got = engine.poll(clock.at(t0));
            engine.forget_retired(|g| control.rx_all_reached(g));
            if let Some(t) = self.published.newer_than(engine.generation()) {
                engine.adopt(t);
            }
            if got.taken == 0 && finishing {
                break;
            }
            // Asked with the doorbell armed: what an RX lcore published before it read the flag.
            polls.end(t0, got.taken + got.from_kernel, &stats, &mut idler, || {
                let finishing = control.stop_requested() && control.rx_all_exited();
                !(finishing || engine.has_pending())
            });
        }
        // Every RX lcore has exited: what this worker took from reclaiming rings is freed here
        // (before the exit's count of mbufs in use).
        engine.stop();
        polls.finish(&stats);
    }
}
