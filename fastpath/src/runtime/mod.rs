//! The lcore loops: burst receive, run the pipeline on each packet, burst transmit, count; and
//! the workers that drain service sockets.
//!
//! Each loop owns its queue handles, its pipeline copy and its counter block, so the per-packet
//! path takes no lock and writes no memory another lcore writes (the socket rings' own
//! head/tail and, only when a socket is short of room, its rollover hints excepted). Shared words
//! read in the loops: the stop flag and the published generation number, both written rarely.
//!
//! Stopping: RX lcores stop first and say so; workers then drain their sockets to empty, run
//! the action on every packet, and stop. So at a clean stop no packet is left in a socket and
//! every one has been counted.

use crate::buf::PacketBuf;
use crate::dpdk::{eal, Mbuf, MbufRing, Mempool, RxQueue, TxQueue};
use crate::generation::Published;
use crate::outcome::Outcome;
use crate::pipeline::reasm::{fragment_v4, fragment_v6, Fate, FragMeta, Insert, ReasmIo, Reassembler, Released};
use crate::pipeline::{service, tunnel, Action, Instant, Pipeline, Tables, Verdict};
use crate::socket::Socket;
use crate::stats::LcoreStats;
use crate::wire::{EtherType, EthernetFrame};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Packets per RX and TX burst (the DPDK convention, and testpmd's default).
pub const BURST: usize = 32;

/// What a loop does when it polls and finds nothing.
#[derive(Clone, Copy, Debug)]
pub struct IdlePolicy {
    /// Empty polls in a row before the loop starts sleeping.
    pub spin_polls: u32,
    /// How long to sleep per empty poll after that; 0 means never sleep (pure busy polling).
    pub sleep: Duration,
}

impl IdlePolicy {
    #[inline]
    fn idle(&self, empty_in_a_row: u32) {
        if !self.sleep.is_zero() && empty_in_a_row > self.spin_polls {
            std::thread::sleep(self.sleep);
        } else {
            eal::pause();
        }
    }
}

/// The bookkeeping every poll of an lcore loop (RX or worker) does: one TSC read per poll (rdtsc is ~40 cycles)
/// serves the cycle accounting and the pipeline clock; a busy poll's cycles run from its start to
/// the start of the next poll; empty polls count as idle and run the idle policy.
#[derive(Default)]
struct Polls {
    busy_since: Option<u64>,
    empty_in_a_row: u32,
}

impl Polls {
    /// Starts a poll: its TSC reading.
    #[inline(always)]
    fn start(&mut self, stats: &LcoreStats) -> u64 {
        let t0 = eal::rdtsc();
        if let Some(t) = self.busy_since.take() {
            stats.busy_cycles.add(t0.wrapping_sub(t));
        }
        t0
    }

    /// Ends the poll that started at `t0` and received `got` packets.
    #[inline(always)]
    fn end(&mut self, t0: u64, got: usize, stats: &LcoreStats, idle: &IdlePolicy) {
        if got == 0 {
            stats.idle_polls.inc();
            self.empty_in_a_row = self.empty_in_a_row.saturating_add(1);
            idle.idle(self.empty_in_a_row);
        } else {
            stats.busy_polls.inc();
            self.busy_since = Some(t0);
            self.empty_in_a_row = 0;
        }
    }

    /// The loop stopped: the last busy poll's cycles.
    fn finish(self, stats: &LcoreStats) {
        if let Some(t) = self.busy_since {
            stats.busy_cycles.add(eal::rdtsc().wrapping_sub(t));
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
}

impl RunControl {
    /// Coordination for these RX lcores.
    pub fn new(rx_lcores: Vec<Arc<LcoreStats>>) -> Self {
        RunControl {
            stop: AtomicBool::new(false),
            rx_running: AtomicUsize::new(rx_lcores.len()),
            rx_lcores,
        }
    }
    /// Asks every loop to stop (RX lcores at once, workers once their sockets are empty).
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }
    /// Whether a stop was requested.
    #[inline]
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
    /// Start-up failed before every RX lcore ran: let the ones that did stop, and workers finish.
    pub fn abort(&self) {
        self.request_stop();
        self.rx_running.store(0, Ordering::SeqCst);
    }
    fn rx_exited(&self) {
        self.rx_running.fetch_sub(1, Ordering::SeqCst);
    }
    fn rx_all_exited(&self) -> bool {
        self.rx_running.load(Ordering::SeqCst) == 0
    }
    /// Whether every RX lcore runs generation `g` or later (or has exited).
    fn rx_all_reached(&self, g: u64) -> bool {
        self.rx_all_exited() || self.rx_lcores.iter().all(|l| l.generation() >= g)
    }
}

/// Packets waiting for one TX queue, with a tag each (what to count once it is sent or not).
struct TxBatch<T> {
    queue: TxQueue,
    /// Index of this queue in the lcore's `stats.tx`.
    stats_index: usize,
    pkts: Vec<Mbuf>,
    tags: Vec<T>,
}

impl<T: Copy> TxBatch<T> {
    fn by_port(tx: Vec<TxQueue>) -> Vec<Option<TxBatch<T>>> {
        let ports = tx.iter().map(|q| q.port() as usize + 1).max().unwrap_or(0);
        let mut by_port: Vec<Option<TxBatch<T>>> = (0..ports).map(|_| None).collect();
        for (i, q) in tx.into_iter().enumerate() {
            let p = q.port() as usize;
            by_port[p] = Some(TxBatch {
                queue: q,
                stats_index: i,
                pkts: Vec::with_capacity(BURST),
                tags: Vec::with_capacity(BURST),
            });
        }
        by_port
    }

    /// Sends the batch; `counted(tag, sent)` is called once per packet. Unsent packets go to
    /// `drops` to be freed.
    #[inline]
    fn flush(&mut self, stats: &LcoreStats, drops: &mut Vec<Mbuf>, mut counted: impl FnMut(T, bool)) {
        if self.pkts.is_empty() {
            return;
        }
        let bytes: u64 = self.pkts.iter().map(|m| m.len() as u64).sum();
        let sent = self.queue.send(&mut self.pkts);
        for (i, t) in self.tags.iter().enumerate() {
            counted(*t, i < sent);
        }
        let unsent_bytes: u64 = self.pkts.iter().map(|m| m.len() as u64).sum();
        let q = &stats.tx[self.stats_index];
        q.packets.add(sent as u64);
        q.bytes.add(bytes - unsent_bytes);
        self.tags.clear();
        drops.append(&mut self.pkts);
    }
}

/// The concrete ring behind a socket.
#[inline]
fn ring(s: &Socket) -> &MbufRing {
    s.queue
        .as_any()
        .downcast_ref::<MbufRing>()
        .expect("daemon sockets are DPDK rings")
}

/// An RX lcore: polls its RX queues, answers on its own TX queue of each port and hands
/// service packets to sockets.
pub struct RxLcore {
    rx: Vec<RxQueue>,
    /// Indexed by port id; `None` for ports this lcore cannot send on.
    tx: Vec<Option<TxBatch<Option<Outcome>>>>,
    pipeline: Pipeline,
    /// Per socket of the current generation: packets staged in this burst.
    staged: Vec<Vec<Mbuf>>,
    published: Arc<Published>,
    stats: Arc<LcoreStats>,
    idle: IdlePolicy,
    clock: TscClock,
    /// Plain forward mode: `forward[rx port id]` is the port to send on; no stage runs.
    forward: Option<Box<[u16]>>,
    /// This lcore's reassembly table (fragments of a datagram share an RSS hash, so one lcore).
    reasm: Reassembler<Mbuf>,
    io: ReasmPools,
    /// Mbufs for fragments this lcore sends.
    pool: Arc<Mempool>,
    /// Identification for IPv6 fragments this lcore sends.
    ident: u32,
    /// Fragments of an answer being sent (reused).
    scratch: Vec<Mbuf>,
}

/// Datagrams reassembled per loop iteration at most, when timing out (bounded work).
pub const EXPIRE_BUDGET: usize = 4;

/// What the reassembler needs from an RX lcore: big buffers for completed datagrams, a place
/// to hand fragments back, randomness.
struct ReasmPools {
    big: Arc<Mempool>,
    rng: u64,
    released: Vec<Released<Mbuf>>,
}

impl ReasmIo<Mbuf> for ReasmPools {
    fn alloc(&mut self, len: usize) -> Option<Mbuf> {
        self.big.alloc().filter(|m| m.tailroom() >= len)
    }
    fn release(&mut self, r: Released<Mbuf>) {
        self.released.push(r);
    }
    fn random(&mut self) -> u32 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 16) as u32
    }
}

/// Whether a frame's IP packet is larger than `mtu`.
#[inline]
fn needs_fragmenting(m: &Mbuf, mtu: u16) -> bool {
    // 14 bytes of Ethernet plus up to two VLAN tags never count against the MTU.
    m.len() > mtu as usize + 14 && {
        let l2 = EthernetFrame::new_checked(m.data())
            .map(|f| f.header_len())
            .unwrap_or(14);
        m.len() - l2 > mtu as usize
    }
}

/// Busy-waits `cycles` TSC cycles (a service's simulated per-packet cost; nothing for 0).
#[inline]
fn spin(cycles: u64) {
    if cycles > 0 {
        let until = eal::rdtsc().wrapping_add(cycles);
        while eal::rdtsc() < until {
            eal::pause();
        }
    }
}

/// Splits the IP datagram in `m` into fragments of at most `mtu` bytes from `pool`.
fn fragment_frame(m: &Mbuf, mtu: u16, pool: &Mempool, ident: u32, out: &mut Vec<Mbuf>) -> bool {
    let mut alloc = |len: usize| pool.alloc().filter(|b| b.tailroom() >= len);
    let mut emit = |b: Mbuf| out.push(b);
    let r = match EthernetFrame::new_checked(m.data()).map(|f| f.ethertype()) {
        Ok(EtherType::IPV4) => fragment_v4(m.data(), mtu as usize, &mut alloc, &mut emit),
        Ok(EtherType::IPV6) => fragment_v6(m.data(), mtu as usize, ident, &mut alloc, &mut emit),
        _ => return false,
    };
    r.is_ok()
}

/// Counts an RX lcore's sent (or refused) packet: its outcome, or `tx_full`; pieces that carry
/// no outcome (all fragments of an answer but the last) count nothing.
fn count_rx_tx(stats: &LcoreStats) -> impl FnMut(Option<Outcome>, bool) + '_ {
    move |o, sent| {
        if let Some(o) = o {
            stats.outcome(if sent { o } else { Outcome::TxFull })
        }
    }
}

impl RxLcore {
    /// Switches this lcore to the plain forward mode: what arrives on port `p` leaves unchanged
    /// on this lcore's TX queue of port `to[p]` (a port beyond `to` forwards to itself), in the
    /// same burst, with no stage run. Each packet counts as `forwarded`, or `tx_full` when the
    /// queue refuses it. It measures what the DPDK layer and this loop cost on their own.
    pub fn forwarding(mut self, to: Vec<u16>) -> Self {
        self.forward = Some(to.into_boxed_slice());
        self
    }

    /// An RX lcore in counter slot `slot` over `rx` queues (their counters are `stats.rx[i]`,
    /// same order) that transmits on `tx` queues (counters `stats.tx[i]`, at most one per port).
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
        let pipeline = Pipeline::new(published.current(), slot);
        let reasm = Reassembler::new(pipeline.tables().reassembly.clone());
        let io = ReasmPools {
            big: pools.1,
            rng: 0x2545_f491_4f6c_dd1d ^ (slot as u64 + 1),
            released: Vec::with_capacity(256),
        };
        stats.set_generation(pipeline.generation());
        let staged = staging(pipeline.tables());
        RxLcore {
            rx,
            tx: TxBatch::by_port(tx),
            pipeline,
            staged,
            published,
            stats,
            idle,
            clock,
            forward: None,
            reasm,
            io,
            pool: pools.0,
            ident: slot as u32,
            scratch: Vec::with_capacity(64),
        }
    }

    /// Runs until a stop is requested. On return every received packet has been counted once.
    pub fn run(mut self, control: &RunControl) {
        if let Some(to) = self.forward.take() {
            return self.run_forward(&to, control);
        }
        let mut burst: Vec<Mbuf> = Vec::with_capacity(BURST);
        let mut drops: Vec<Mbuf> = Vec::with_capacity(BURST);
        let mut polls = Polls::default();
        while !control.stop_requested() {
            let t0 = polls.start(&self.stats);
            let got = self.poll_queues(&mut burst, |me, qi, port, b| {
                me.pipeline_burst(qi, port, me.clock.at(t0), b, &mut drops)
            });
            // Reassembly expiry: bounded work per iteration, no background thread (seed 001).
            if self.reasm.next_deadline().is_some_and(|d| d <= self.clock.at(t0)) {
                self.reasm.expire(self.clock.at(t0), EXPIRE_BUDGET, &mut self.io);
                self.settle_reassembly(&mut drops);
            }
            self.flush_all(&mut drops);
            Mbuf::free_bulk(&mut drops);
            // Quiescent point: nothing staged or in flight, so a new generation applies to whole
            // bursts.
            if let Some(t) = self.published.newer_than(self.pipeline.generation()) {
                if t.reassembly != *self.reasm.config() {
                    self.reasm.reconfigure(t.reassembly.clone(), &mut self.io);
                    self.settle_reassembly(&mut drops);
                    Mbuf::free_bulk(&mut drops);
                }
                self.pipeline.apply(t);
                self.staged = staging(self.pipeline.tables());
                self.stats.set_generation(self.pipeline.generation());
            }
            if got == 0 {
                self.reclaim_idle();
            }
            polls.end(t0, got, &self.stats, &self.idle);
        }
        polls.finish(&self.stats);
        // Clean stop: fragments still held are handed back and counted.
        self.reasm.drain_all(&mut self.io);
        self.settle_reassembly(&mut drops);
        Mbuf::free_bulk(&mut drops);
        control.rx_exited();
    }

    /// An idle poll: frees what the workers took from reclaiming sockets (a sink fed by this,
    /// the only, RX lcore) since its last enqueue to them, which would otherwise stay held
    /// until the socket's next packet.
    #[cold]
    fn reclaim_idle(&self) {
        for s in self.pipeline.tables().sockets.iter() {
            ring(s).reclaim();
        }
    }

    /// Polls each RX queue once; a queue that received packets has them counted and its burst
    /// handed to `each` (with the queue's index and port). The packets received in all.
    #[inline(always)]
    fn poll_queues(
        &mut self,
        burst: &mut Vec<Mbuf>,
        mut each: impl FnMut(&mut Self, usize, u16, &mut Vec<Mbuf>),
    ) -> usize {
        let mut got = 0usize;
        for qi in 0..self.rx.len() {
            let n = self.rx[qi].recv(burst);
            if n == 0 {
                continue;
            }
            got += n;
            let port = self.rx[qi].port();
            self.stats.rx[qi].packets.add(n as u64);
            each(self, qi, port, burst);
        }
        got
    }

    /// The plain forward mode's loop: each burst received on a port goes out on `to[port]` as it
    /// is, nothing else per poll but the accounting every loop does and the generation check (a
    /// reload must see every lcore reach it). It measures what the DPDK layer costs, so it does
    /// per packet what testpmd's io mode does and no more: the queues' bytes are not counted
    /// (the daemon gives them packet-only counters; the ports' own counters have the bytes).
    fn run_forward(mut self, to: &[u16], control: &RunControl) {
        let mut burst: Vec<Mbuf> = Vec::with_capacity(BURST);
        let mut polls = Polls::default();
        while !control.stop_requested() {
            let t0 = polls.start(&self.stats);
            let got = self.poll_queues(&mut burst, |me, _, port, b| {
                let dst = to.get(port as usize).copied().unwrap_or(port) as usize;
                forward(me.tx.get_mut(dst).and_then(Option::as_mut), b, &me.stats);
            });
            if let Some(t) = self.published.newer_than(self.pipeline.generation()) {
                self.pipeline.apply(t);
                self.stats.set_generation(self.pipeline.generation());
            }
            polls.end(t0, got, &self.stats, &self.idle);
        }
        polls.finish(&self.stats);
        control.rx_exited();
    }

    /// Runs a received burst through the pipeline, then hands the staged packets to their
    /// sockets and frees the dropped ones.
    ///
    /// A call of its own (one per burst), so the whole pipeline inlined here does not share a
    /// function, and its registers and stack frame, with the poll loop: when it did, the
    /// forward mode's loop got ~10 cycles per packet slower as the pipeline grew.
    #[inline(never)]
    fn pipeline_burst(&mut self, qi: usize, port: u16, now: Instant, burst: &mut Vec<Mbuf>, drops: &mut Vec<Mbuf>) {
        let mut bytes = 0u64;
        for m in burst.drain(..) {
            bytes += m.pkt_len() as u64;
            if m.segments() != 1 {
                self.stats.outcome(Outcome::Oversize);
                drops.push(m);
                continue;
            }
            self.handle(port, m, now, drops);
            if drops.len() >= BURST {
                Mbuf::free_bulk(drops);
            }
        }
        self.stats.rx[qi].bytes.add(bytes);
        self.enqueue_staged(drops);
        Mbuf::free_bulk(drops);
    }

    /// Runs one received packet through the pipeline and acts on the verdict; a fragment goes
    /// to the reassembler and, if it completes its datagram, the datagram goes through again
    /// (its outcome is the completing fragment's).
    #[inline]
    fn handle(&mut self, port: u16, mut m: Mbuf, now: Instant, drops: &mut Vec<Mbuf>) {
        loop {
            let v = self.pipeline.process(port, &mut m, now);
            match v {
                Verdict::Drop(o) => {
                    self.stats.outcome(o);
                    drops.push(m);
                }
                Verdict::Transmit(o) => self.transmit(port, m, o, drops),
                Verdict::TransmitOn { port: out, outcome } => self.transmit(out, m, outcome, drops),
                Verdict::Deliver => self.staged[self.pipeline.delivered_to()].push(m),
                Verdict::Reassemble { l3 } => {
                    let Some(meta) = FragMeta::from_frame(m.data(), l3 as usize) else {
                        self.stats.outcome(Outcome::Malformed);
                        drops.push(m);
                        return;
                    };
                    let done = self.reasm.insert(now, m, &meta, &mut self.io);
                    self.settle_reassembly(drops);
                    if let Insert::Complete { mut datagram, .. } = done {
                        datagram.set_port(port);
                        m = datagram;
                        continue;
                    }
                }
            }
            return;
        }
    }

    /// Queues an answer on this lcore's TX queue of `port`, fragmenting it first if it is larger
    /// than the port's MTU (a reassembled datagram's answer); only the last piece carries the
    /// packet's outcome.
    #[inline]
    fn transmit(&mut self, port: u16, m: Mbuf, o: Outcome, drops: &mut Vec<Mbuf>) {
        let mtu = self.pipeline.tables().mtu(port);
        let Some(Some(b)) = self.tx.get_mut(port as usize) else {
            self.stats.outcome(Outcome::TxFull);
            drops.push(m);
            return;
        };
        let stats = &self.stats;
        if !needs_fragmenting(&m, mtu) {
            b.pkts.push(m);
            b.tags.push(Some(o));
            if b.pkts.len() >= BURST {
                b.flush(stats, drops, count_rx_tx(stats));
            }
            return;
        }
        self.ident = self.ident.wrapping_add(1);
        // A reused scratch vector: no allocation per packet, even on this rare path.
        let pieces = &mut self.scratch;
        let ok = fragment_frame(&m, mtu, &self.pool, self.ident, pieces);
        drops.push(m);
        let n = pieces.len();
        if !ok || n == 0 {
            stats.outcome(Outcome::TxFull);
            drops.append(pieces);
            return;
        }
        for (i, p) in pieces.drain(..).enumerate() {
            b.pkts.push(p);
            b.tags.push((i + 1 == n).then_some(o));
            if b.pkts.len() >= BURST {
                b.flush(stats, drops, count_rx_tx(stats));
            }
        }
    }

    fn flush_all(&mut self, drops: &mut Vec<Mbuf>) {
        let stats = &self.stats;
        for b in self.tx.iter_mut().flatten() {
            b.flush(stats, drops, count_rx_tx(stats));
        }
    }

    /// Counts the outcome of every fragment the reassembler handed back and frees it; copies the
    /// reassembler's statistics for the metrics.
    fn settle_reassembly(&mut self, drops: &mut Vec<Mbuf>) {
        let mut released = std::mem::take(&mut self.io.released);
        for mut r in released.drain(..) {
            if r.fate == (Fate::TimedOut { first: true }) {
                // RFC 792 / RFC 8200 §4.5: Time Exceeded code 1 about the first fragment,
                // through the ICMP rate limits; it is that fragment's outcome when sent.
                let port = r.buf.port();
                let now = self.clock.now();
                if let Some(Verdict::Transmit(o)) = self.pipeline.reassembly_timeout(port, &mut r.buf, now) {
                    self.transmit(port, r.buf, o, drops);
                    continue;
                }
            }
            let o = match r.fate {
                Fate::Reassembled => Some(Outcome::Reassembled),
                Fate::Absorbed => None,
                Fate::Refused(_) => Some(Outcome::ReassemblyRefused),
                Fate::TimedOut { .. } => Some(Outcome::ReassemblyTimeout),
                Fate::Drained => Some(Outcome::ReassemblyFlushed),
            };
            if let Some(o) = o {
                self.stats.outcome(o);
            }
            drops.push(r.buf);
            if drops.len() >= BURST {
                Mbuf::free_bulk(drops);
            }
        }
        self.io.released = released;
        self.stats.reasm.sync(self.reasm.stats(), self.reasm.memory());
    }

    /// Enqueues every socket's staged packets in one burst each: `delivered` for what the ring
    /// took, `socket_full` for what it refused (another lcore filled it meanwhile).
    #[inline]
    fn enqueue_staged(&mut self, drops: &mut Vec<Mbuf>) {
        let slot = self.pipeline.slot();
        // Borrowed, not cloned: an Arc clone is an atomic write to a line every lcore shares.
        let tables = self.pipeline.tables();
        for (s, _) in self.pipeline.staged() {
            let pkts = &mut self.staged[s];
            let socket = &tables.sockets[s];
            let n = if socket.free_on_rx {
                let n = pkts.len();
                Mbuf::free_bulk(pkts);
                n as u64
            } else {
                ring(socket).enqueue(pkts) as u64
            };
            let c = &socket.counters.rx[slot];
            c.delivered.add(n);
            self.stats.outcomes[Outcome::Delivered.index()].add(n);
            let refused = pkts.len() as u64;
            if refused > 0 {
                c.full.add(refused);
                self.stats.outcomes[Outcome::SocketFull.index()].add(refused);
                drops.append(pkts);
            }
        }
        self.pipeline.burst_done();
    }
}

/// A socket a worker drains, with the action to run on its packets.
struct Drained {
    socket: Arc<Socket>,
    action: Action,
    /// Busy-wait per packet, in TSC cycles.
    cost_cycles: u64,
    /// For a socket the current generation no longer has: the generation every RX lcore must
    /// reach before it can receive nothing more.
    retired_at: Option<u64>,
}

/// What a worker's TX packet is counted against once sent (or refused).
#[derive(Clone, Copy, Debug)]
enum Tag {
    /// An echo reply, counted on the socket at this index of the work list.
    Echo(u32),
    /// An encapsulated packet of this tunnel (index in the current tables).
    Tunnel(u32),
    /// A fragment of an answer other than the last: counts nothing.
    Piece,
}

/// A worker lcore: drains the service sockets assigned to its slot and runs their actions,
/// sending on its own TX queue of each port; owns the sequence tunnels assigned to its slot.
pub struct WorkerLcore {
    slot: usize,
    tsc_hz: u64,
    /// Mbufs for the fragments of answers larger than the MTU.
    pool: Arc<Mempool>,
    tx: Vec<Option<TxBatch<Tag>>>,
    published: Arc<Published>,
    stats: Arc<LcoreStats>,
    idle: IdlePolicy,
}

/// Per-generation worker state that depends on the tables.
struct WorkerTables {
    tables: Arc<Tables>,
    work: Vec<Drained>,
    /// Per tunnel: packets staged for the tunnel's owner (sequence tunnels).
    handoff: Vec<Vec<Mbuf>>,
    /// Sequence tunnels this worker owns.
    owned: Vec<usize>,
}

impl WorkerLcore {
    /// The worker in socket slot `slot`, sending on `tx` (at most one queue per port; counters
    /// `stats.tx[i]`).
    pub fn new(
        slot: usize,
        tx: Vec<TxQueue>,
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
            tx: TxBatch::by_port(tx),
            published,
            stats,
            idle,
        }
    }

    fn tables_for(&self, t: Arc<Tables>, retired: Vec<Drained>) -> WorkerTables {
        let mut work = retired;
        work.extend(sockets_of(self.slot, &t, self.tsc_hz));
        let handoff = (0..t.tunnels.len()).map(|_| Vec::new()).collect();
        let owned = t
            .tunnels
            .iter()
            .enumerate()
            .filter(|(_, x)| x.sequence && x.owner == self.slot)
            .map(|(i, _)| i)
            .collect();
        WorkerTables {
            tables: t,
            work,
            handoff,
            owned,
        }
    }

    /// Runs until a stop is requested, every RX lcore has stopped and its sockets are empty.
    pub fn run(self, control: &RunControl) {
        let first = self.published.current();
        self.stats.set_generation(first.generation);
        let mut w = self.tables_for(first, Vec::new());
        let mut tx = std::mem::take(&mut { self.tx });
        let me = WorkerLcore { tx: Vec::new(), ..self };
        let mut buf: Vec<Mbuf> = Vec::with_capacity(BURST);
        let mut drops: Vec<Mbuf> = Vec::with_capacity(BURST);
        // Fragments of an answer being sent (reused: no allocation per packet).
        let mut scratch: Vec<Mbuf> = Vec::with_capacity(64);
        // Next sequence number of each owned sequence tunnel, by name (kept across reloads).
        let mut next_seq: std::collections::HashMap<String, u32> = Default::default();
        let mut ident: u16 = (me.slot as u16).wrapping_mul(0x9e37).wrapping_add(0x5555);
        let mut polls = Polls::default();
        loop {
            // Read before draining: if RX had already stopped, an empty pass means truly empty.
            let finishing = control.stop_requested() && control.rx_all_exited();
            let t0 = polls.start(&me.stats);
            let mut got = 0usize;
            // Borrowed, not cloned: an Arc clone is an atomic write to a line every lcore shares.
            let tables: &Tables = &w.tables;
            for wi in 0..w.work.len() {
                let d = &w.work[wi];
                if let Action::Sink = d.action {
                    // Consumed unread: freed straight from the ring, or with one RX lcore
                    // left to it to free (see `MbufRing`: the headers, and with one RX lcore
                    // the ring's slots, stay in the RX lcore's cache).
                    let n = ring(&d.socket).dequeue_and_free(BURST);
                    if n > 0 {
                        spin(d.cost_cycles.saturating_mul(n as u64));
                        let c = &d.socket.counters.workers[me.slot];
                        c.dequeued.add(n as u64);
                        c.sunk.add(n as u64);
                        got += n;
                    }
                    d.socket.consumer_update_pressure();
                    continue;
                }
                let n = ring(&d.socket).dequeue(&mut buf);
                if n == 0 {
                    d.socket.consumer_update_pressure();
                    continue;
                }
                got += n;
                let c = &d.socket.counters.workers[me.slot];
                c.dequeued.add(n as u64);
                for mut m in buf.drain(..) {
                    spin(d.cost_cycles);
                    match &d.action {
                        // Drained above without this loop; handled the same way all the same.
                        Action::Sink => {
                            c.sunk.inc();
                            drops.push(m);
                        }
                        Action::Echo => {
                            if !service::echo_in_place(&mut m) {
                                c.invalid.inc();
                                drops.push(m);
                                continue;
                            }
                            let port = m.port() as usize;
                            match tx.get_mut(port) {
                                Some(Some(b)) if needs_fragmenting(&m, tables.mtu(port as u16)) => {
                                    // A reassembled datagram's echo: fragments, the last one
                                    // carrying the count.
                                    ident = ident.wrapping_add(1);
                                    let ok = fragment_frame(
                                        &m,
                                        tables.mtu(port as u16),
                                        &me.pool,
                                        ident as u32,
                                        &mut scratch,
                                    );
                                    drops.push(m);
                                    if !ok || scratch.is_empty() {
                                        c.tx_full.inc();
                                        drops.append(&mut scratch);
                                        continue;
                                    }
                                    let n = scratch.len();
                                    for (i, p) in scratch.drain(..).enumerate() {
                                        b.pkts.push(p);
                                        b.tags.push(if i + 1 == n { Tag::Echo(wi as u32) } else { Tag::Piece });
                                        if b.pkts.len() >= BURST {
                                            flush_worker(b, &me.stats, &mut drops, &w.work, tables, me.slot);
                                        }
                                    }
                                }
                                Some(Some(b)) => {
                                    b.pkts.push(m);
                                    b.tags.push(Tag::Echo(wi as u32));
                                    if b.pkts.len() == BURST {
                                        flush_worker(b, &me.stats, &mut drops, &w.work, tables, me.slot);
                                    }
                                }
                                _ => {
                                    c.tx_full.inc();
                                    drops.push(m);
                                }
                            }
                        }
                        Action::Tunnel(set) => {
                            let Some(ti) = pick_tunnel(set, tables, &m) else {
                                c.invalid.inc();
                                drops.push(m);
                                continue;
                            };
                            let tun = &tables.tunnels[ti];
                            if tun.sequence {
                                // Its owner numbers and sends it, in one order (module docs).
                                tun.counters.workers[me.slot].handed_off.inc();
                                w.handoff[ti].push(m);
                                continue;
                            }
                            ident = ident.wrapping_add(1);
                            encap_and_queue(
                                m,
                                tables,
                                ti,
                                None,
                                ident,
                                me.slot,
                                &mut tx,
                                &mut drops,
                                &me.stats,
                                &w.work,
                                &me.pool,
                                &mut scratch,
                            );
                        }
                    }
                    if drops.len() == BURST {
                        Mbuf::free_bulk(&mut drops);
                    }
                }
                w.work[wi].socket.consumer_update_pressure();
            }
            // Hand sequence-tunnel packets to their owners, one burst per tunnel.
            for (ti, staged) in w.handoff.iter_mut().enumerate() {
                if staged.is_empty() {
                    continue;
                }
                match tables.tunnels[ti]
                    .handoff
                    .as_deref()
                    .and_then(|q| q.as_any().downcast_ref::<MbufRing>())
                {
                    Some(r) => {
                        r.enqueue(staged);
                        let refused = staged.len() as u64;
                        tables.tunnels[ti].counters.workers[me.slot].tx_full.add(refused);
                    }
                    None => tables.tunnels[ti].counters.workers[me.slot]
                        .tx_full
                        .add(staged.len() as u64),
                }
                drops.append(staged);
            }
            // Owned sequence tunnels: number and send what everyone handed over, in ring order.
            for &ti in &w.owned {
                let tun = &tables.tunnels[ti];
                let Some(r) = tun
                    .handoff
                    .as_deref()
                    .and_then(|q| q.as_any().downcast_ref::<MbufRing>())
                else {
                    continue;
                };
                let n = r.dequeue(&mut buf);
                got += n;
                if n > 0 && !next_seq.contains_key(&tun.name) {
                    next_seq.insert(tun.name.clone(), 1);
                }
                let Some(seq) = next_seq.get_mut(&tun.name) else {
                    continue;
                };
                for m in buf.drain(..) {
                    let s = *seq;
                    *seq = seq.wrapping_add(1);
                    ident = ident.wrapping_add(1);
                    encap_and_queue(
                        m,
                        tables,
                        ti,
                        Some(s),
                        ident,
                        me.slot,
                        &mut tx,
                        &mut drops,
                        &me.stats,
                        &w.work,
                        &me.pool,
                        &mut scratch,
                    );
                    if drops.len() == BURST {
                        Mbuf::free_bulk(&mut drops);
                    }
                }
            }
            for b in tx.iter_mut().flatten() {
                flush_worker(b, &me.stats, &mut drops, &w.work, tables, me.slot);
            }
            Mbuf::free_bulk(&mut drops);

            // Sockets a reload removed: dropped once no RX lcore can still enqueue to them and
            // they are empty.
            w.work.retain(|d| match d.retired_at {
                Some(g) => {
                    let gone = control.rx_all_reached(g) && d.socket.queue.is_empty();
                    if gone {
                        // No RX lcore enqueues to it again, so none frees what this worker took
                        // from a reclaiming ring: freed here.
                        ring(&d.socket).release_rest(false);
                    }
                    !gone
                }
                None => true,
            });
            if let Some(t) = me.published.newer_than(w.tables.generation) {
                let next = sockets_of(me.slot, &t, me.tsc_hz);
                let mut retired: Vec<Drained> = std::mem::take(&mut w.work);
                for d in retired.iter_mut() {
                    if !next.iter().any(|n| Arc::ptr_eq(&n.socket, &d.socket)) && d.retired_at.is_none() {
                        d.retired_at = Some(t.generation);
                    }
                }
                retired.retain(|d| d.retired_at.is_some());
                me.stats.set_generation(t.generation);
                w = me.tables_for(t, retired);
            }
            if got == 0 && finishing {
                break;
            }
            polls.end(t0, got, &me.stats, &me.idle);
        }
        // Every RX lcore has exited: what this worker took from reclaiming rings is freed here
        // (before the exit's count of mbufs in use).
        for d in &w.work {
            ring(&d.socket).release_rest(false);
        }
        polls.finish(&me.stats);
    }
}

/// The tunnel of `set` for this packet's flow (hash of the inner packet), if it is IP.
fn pick_tunnel(set: &[usize], t: &Tables, m: &Mbuf) -> Option<usize> {
    if set.is_empty() {
        return None;
    }
    let p = crate::pipeline::Parsed::parse(m.data(), &t.hasher, m.rss_hash()).ok()?;
    Some(set[((p.hash as u64 * set.len() as u64) >> 32) as usize])
}

/// Encapsulates `m` in tunnel `ti` and queues it on this worker's TX queue of the tunnel's port.
#[allow(clippy::too_many_arguments)]
#[inline]
fn encap_and_queue(
    mut m: Mbuf,
    tables: &Tables,
    ti: usize,
    seq: Option<u32>,
    ident: u16,
    slot: usize,
    tx: &mut [Option<TxBatch<Tag>>],
    drops: &mut Vec<Mbuf>,
    stats: &LcoreStats,
    work: &[Drained],
    pool: &Mempool,
    scratch: &mut Vec<Mbuf>,
) {
    let c = &tables.tunnels[ti].counters.workers[slot];
    let r = tunnel::encapsulate(&mut m, &tables.tunnels, ti, seq, ident);
    if let Err(tunnel::EncapError::TooBig(inner_mtu)) = r {
        // Issue 8 / RFC 1191 / RFC 8201: DF or IPv6 inside -> ICMP Fragmentation Needed /
        // Packet Too Big with the tunnel's MTU back to the sender (never rate limited); IPv4
        // without DF -> encapsulate anyway and fragment the outer packet.
        c.too_big.inc();
        return too_big(
            m, tables, ti, seq, ident, inner_mtu, slot, tx, drops, stats, work, pool, scratch,
        );
    }
    match r {
        Ok(port) => match tx.get_mut(port as usize) {
            Some(Some(b)) => {
                b.pkts.push(m);
                b.tags.push(Tag::Tunnel(ti as u32));
                if b.pkts.len() == BURST {
                    flush_worker(b, stats, drops, work, tables, slot);
                }
            }
            _ => {
                c.tx_full.inc();
                drops.push(m);
            }
        },
        Err(_) => {
            // Not IP, or no headroom: nothing to send.
            c.tx_full.inc();
            drops.push(m);
        }
    }
}

/// A packet too big for tunnel `ti`'s path: an ICMP error to its sender, or outer fragments.
#[allow(clippy::too_many_arguments)]
fn too_big(
    mut m: Mbuf,
    tables: &Tables,
    ti: usize,
    seq: Option<u32>,
    ident: u16,
    inner_mtu: u16,
    slot: usize,
    tx: &mut [Option<TxBatch<Tag>>],
    drops: &mut Vec<Mbuf>,
    stats: &LcoreStats,
    work: &[Drained],
    pool: &Mempool,
    pieces: &mut Vec<Mbuf>,
) {
    use crate::pipeline::icmp_error::{self, ErrorKind};
    let Ok(p) = crate::pipeline::Parsed::parse(m.data(), &tables.hasher, None) else {
        drops.push(m);
        return;
    };
    let df = p.version == crate::pipeline::IpVersion::V6
        || crate::wire::Ipv4Packet::new_checked(&m.data()[p.l3_offset as usize..]).is_ok_and(|ip| ip.dont_frag());
    let port = m.port();
    if df {
        let kind = if p.version == crate::pipeline::IpVersion::V6 {
            ErrorKind::PacketTooBig { mtu: inner_mtu as u32 }
        } else {
            ErrorKind::FragmentationNeeded { mtu: inner_mtu }
        };
        let mac = tables.ports.get(port as usize).map(|a| a.mac).unwrap_or_default();
        if icmp_error::eligible(kind, &p, m.data()) && icmp_error::build_in_place(&mut m, &p, mac, p.dst, kind, ident) {
            if let Some(Some(b)) = tx.get_mut(port as usize) {
                b.pkts.push(m);
                b.tags.push(Tag::Piece);
                if b.pkts.len() >= BURST {
                    flush_worker(b, stats, drops, work, tables, slot);
                }
                return;
            }
        }
        drops.push(m);
        return;
    }
    let Ok(out_port) = tunnel::encapsulate_oversize(&mut m, &tables.tunnels, ti, seq, ident) else {
        drops.push(m);
        return;
    };
    let mtu = tunnel::path_of(&tables.tunnels, ti).3;
    let ok = fragment_frame(&m, mtu, pool, ident as u32, pieces);
    drops.push(m);
    let Some(Some(b)) = tx.get_mut(out_port as usize) else {
        drops.append(pieces);
        return;
    };
    if !ok || pieces.is_empty() {
        tables.tunnels[ti].counters.workers[slot].tx_full.inc();
        drops.append(pieces);
        return;
    }
    tables.tunnels[ti].counters.workers[slot].fragmented.inc();
    let n = pieces.len();
    for (i, piece) in pieces.drain(..).enumerate() {
        b.pkts.push(piece);
        b.tags
            .push(if i + 1 == n { Tag::Tunnel(ti as u32) } else { Tag::Piece });
        if b.pkts.len() >= BURST {
            flush_worker(b, stats, drops, work, tables, slot);
        }
    }
}

#[inline]
fn flush_worker(
    b: &mut TxBatch<Tag>,
    stats: &LcoreStats,
    drops: &mut Vec<Mbuf>,
    work: &[Drained],
    tables: &Tables,
    slot: usize,
) {
    b.flush(stats, drops, |tag, sent| match tag {
        Tag::Echo(wi) => {
            let c = &work[wi as usize].socket.counters.workers[slot];
            if sent {
                c.echoed.inc()
            } else {
                c.tx_full.inc()
            }
        }
        Tag::Tunnel(ti) => {
            let c = &tables.tunnels[ti as usize].counters.workers[slot];
            if sent {
                c.encap.inc()
            } else {
                c.tx_full.inc()
            }
        }
        Tag::Piece => {}
    });
}

/// The sockets worker `slot` drains in `t`.
fn sockets_of(slot: usize, t: &Tables, tsc_hz: u64) -> Vec<Drained> {
    let mut out = Vec::new();
    for svc in t.services.services() {
        let cost_cycles = (svc.cost_ns as u128 * tsc_hz as u128 / 1_000_000_000) as u64;
        for &i in &svc.group.sockets {
            let s = &t.sockets[i];
            if s.worker == slot {
                out.push(Drained {
                    socket: s.clone(),
                    action: svc.action.clone(),
                    cost_cycles,
                    retired_at: None,
                });
            }
        }
    }
    out
}

/// Forward mode: sends a whole received burst on `tx` at once; counts it `forwarded`, and what
/// the queue refuses (or all of it, without a queue) `tx_full`, then frees the refused.
#[inline]
fn forward(tx: Option<&mut TxBatch<Option<Outcome>>>, burst: &mut Vec<Mbuf>, stats: &LcoreStats) {
    if let Some(b) = tx {
        let sent = b.queue.send(burst);
        stats.tx[b.stats_index].packets.add(sent as u64);
        stats.outcomes_add(Outcome::Forwarded, sent as u64);
    }
    if !burst.is_empty() {
        stats.outcomes_add(Outcome::TxFull, burst.len() as u64);
        Mbuf::free_bulk(burst);
    }
}

fn staging(t: &Tables) -> Vec<Vec<Mbuf>> {
    (0..t.sockets.len()).map(|_| Vec::with_capacity(BURST)).collect()
}
