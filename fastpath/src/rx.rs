//! The RX engine: everything an RX lcore does with a received burst, free of DPDK.
//!
//! It owns the whole per-burst path: the [`Pipeline`], the lcore's [`Reassembler`] (a fragment's
//! verdict sends it there, and a completed datagram goes through the pipeline again, its outcome
//! the completing fragment's), the staging of delivered packets per socket (enqueued in one burst
//! each at the end of the burst), the counting of every packet in exactly one outcome, and the
//! batching of answers on the lcore's own TX queue of each port (fragmented when larger than the
//! port's MTU). Generic over the buffer ([`LcoreBuf`]) and over what it sends to and allocates
//! from ([`RxIo`]), so the same code runs in the daemon over mbufs and DPDK queues, and in unit
//! tests, the in-process corpus runner, the benchmarks and the fuzz target over heap buffers.
//!
//! The driver (the DPDK RX lcore, `runtime::RxLcore`) only polls queues and reads the clock:
//! for each burst it calls [`RxEngine::burst`], once per poll [`RxEngine::poll_done`], at its
//! quiescent point [`RxEngine::adopt`] for a new generation, and [`RxEngine::stop`] at the end.

use crate::buf::LcoreBuf;
use crate::outcome::Outcome;
use crate::pipeline::reasm::{Fate, FragMeta, Insert, ReasmIo, Reassembler, Released};
use crate::pipeline::PortView;
use crate::pipeline::{Instant, Lead, Pipeline, Tables, Verdict};
use crate::socket::Socket;
use crate::stats::LcoreStats;
use crate::tx::{fragment_into_tunnel, needs_fragmenting, queue_in_fragments, Transmit, TxBatch, BURST};
use std::sync::Arc;

#[cfg(test)]
mod attack_tests;
#[cfg(test)]
mod tests;
mod trace;

/// Datagrams reassembled per poll at most, when timing out (bounded work).
pub const EXPIRE_BUDGET: usize = 4;

/// Bursts mostly declined by the lead's path that [`RxEngine::burst`] lets pass without an
/// election after one that changed nothing: a flood that starts behind such traffic leads
/// after at most this many more of its bursts (~2,000 packets).
pub const ELECTION_BACKOFF: u32 = 63;

/// Full bursts in a row whose packets for one socket may stay unpublished in its queue
/// ([`RxIo::enqueue`] with `hold`): the last of them publishes.
///
/// Each publication is a store to a line the socket's worker keeps reading (it polls the queue), so
/// the RX lcore's next one waits for that line to come back: one cross-core transfer a burst, dear
/// where the guest's two vCPUs sit on distant cores. Publishing every 4 bursts instead of every
/// burst took away open-sink's slow rounds (benches/NOTES.md, "One publication for several full
/// bursts"). Held only under load (a full burst) and only for one socket (the burst's only one), so
/// what a queue's consumer has not seen is at most `HOLD_BURSTS - 1` bursts of one lcore. A flood
/// spread over many sockets is held by [`HOLD_MANY`].
pub const HOLD_BURSTS: u32 = 4;

/// Full bursts in a row, each touching several sockets, whose packets may stay unpublished in
/// their sockets' queues: the last of them publishes every socket held.
///
/// A burst spread over many sockets crosses the cores once per socket (each queue's published
/// index stored, its consumer's index read), where one socket crosses once per burst; held for
/// a window, each socket's queue publishes once for all the packets it took in the window, and
/// its consumer, shown nothing new meanwhile, writes nothing the producer reads (benches/NOTES.md,
/// "Many sockets"). A socket is held only while what it holds stays within a quarter of its
/// capacity (well in NORMAL room and under the flow limit's half), so the window never makes a
/// socket look fuller to the fanout than a late worker would; the held packets are in their
/// queues, charged to the pool's budget like any queued packet.
pub const HOLD_MANY: u32 = 16;

/// What the RX engine needs from the lcore that drives it.
pub trait RxIo<B: LcoreBuf> {
    /// The lcore's TX queues.
    type Tx: Transmit<B>;
    /// An empty buffer with at least `len` bytes of tailroom, for a fragment of an answer.
    fn alloc(&mut self, len: usize) -> Option<B>;
    /// An empty buffer with at least `len` bytes of tailroom, for a reassembled datagram.
    fn alloc_datagram(&mut self, len: usize) -> Option<B>;
    /// Enqueues `pkts` to `socket`'s queue of RX lcore slot `slot` (this lcore's): what it
    /// takes leaves `pkts` from the front, the refused stay. Returns how many it took. With
    /// `hold`, the queue may leave them (and what it held before) unseen by its consumer until
    /// [`RxIo::publish`] or an enqueue without `hold` ([`HOLD_BURSTS`]).
    fn enqueue(&mut self, socket: &Socket, slot: usize, pkts: &mut Vec<B>, hold: bool) -> usize;
    /// Shows `socket`'s queue of slot `slot` to its consumer: whatever enqueues with `hold`
    /// left unseen.
    fn publish(&mut self, socket: &Socket, slot: usize) {
        let _ = (socket, slot);
    }
    /// Prefetches step `step` (0, 1, 2) of what an enqueue to `socket`'s queue of slot `slot`
    /// and its counting read, each step's lines found through the last step's: the end of a
    /// burst issues each step for every socket it will enqueue to before it enqueues, so that
    /// the misses of many sockets overlap instead of queueing one behind another; the start of
    /// a burst issues step 1 for the socket the last burst alone enqueued to.
    #[inline(always)]
    fn prefetch(&mut self, socket: &Socket, slot: usize, step: u8) {
        let _ = (socket, slot, step);
    }
    /// Asks the CPU to bring the cache line at `addr` into its caches (a hint; no read the
    /// program sees). Without a prefetch instruction to hand, nothing.
    #[inline(always)]
    fn prefetch_line(&mut self, addr: *const u8) {
        let _ = addr;
    }
    /// Hands `pkts` (answers, not yet encapsulated) to the owning worker of sequence tunnel
    /// `tunnel`: what its ring takes leaves `pkts` from the front, the refused stay. Returns how
    /// many it took.
    fn hand_off(&mut self, tunnel: &crate::pipeline::tunnel::Tunnel, pkts: &mut Vec<B>) -> usize;
    /// A poll found nothing: time for work the sockets' queues of RX lcore slot `slot` (this
    /// lcore's) may want done while idle.
    fn idle(&mut self, tables: &Tables, slot: usize) {
        let _ = (tables, slot);
    }
    /// Whether the sockets' idle work is due now although the lcore is busy (and clears it):
    /// a buffer allocation failed that it may cure.
    fn take_reclaim_due(&mut self) -> bool {
        false
    }
}

/// The reassembler's side of the engine: buffers for datagrams, fragments handed back,
/// randomness.
struct ReasmSide<B, Io> {
    io: Io,
    rng: u64,
    released: Vec<Released<B>>,
}

impl<B: LcoreBuf, Io: RxIo<B>> ReasmIo<B> for ReasmSide<B, Io> {
    fn alloc(&mut self, len: usize) -> Option<B> {
        self.io.alloc_datagram(len)
    }
    fn release(&mut self, r: Released<B>) {
        self.released.push(r);
    }
    fn random(&mut self) -> u32 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 16) as u32
    }
}

/// A TX batch of the engine: each packet tagged with the outcome it counts once sent (pieces of
/// an answer but the last count nothing).
type RxTx<B, Io> = TxBatch<<Io as RxIo<B>>::Tx, B, Option<Outcome>>;

/// One RX lcore's packet processing (module docs).
pub struct RxEngine<B: LcoreBuf, Io: RxIo<B>> {
    pipeline: Pipeline,
    reasm: Reassembler<B>,
    side: ReasmSide<B, Io>,
    /// Indexed by port id; `None` for ports this lcore cannot send on.
    tx: Vec<Option<RxTx<B, Io>>>,
    /// Per socket of the current generation: packets staged in this burst.
    staged: Vec<Vec<B>>,
    /// Per tunnel of the current generation: answers for a sequence tunnel's owner, with the
    /// outcome each counts once handed off.
    handoff: Vec<(Vec<B>, Vec<Option<Outcome>>)>,
    /// Packets to free, in bulk.
    drops: Vec<B>,
    /// The burst's packets the lead's fast path declined, for [`RxEngine::burst`]'s second loop.
    rest: Vec<B>,
    /// The fast path the first loop runs ([`RxEngine::burst`]): the kind most of a recent
    /// burst was, IPv4/UDP until another kind is.
    lead: Lead,
    /// Bursts the election skips before it looks again: after one that changed nothing (most
    /// of the traffic declined by its own kind's path, as fragments are), [`ELECTION_BACKOFF`].
    election_wait: u32,
    /// Packets that went through the second loop, for tests.
    #[cfg(test)]
    second_loop: u64,
    stats: Arc<LcoreStats>,
    /// Fragments of an answer being sent (reused: no allocation per packet, even there).
    scratch: Vec<B>,
    /// What such an answer leaves to free while its pieces are queued (reused likewise).
    spare: Vec<B>,
    /// Indexed by port id: the longest frame the port takes ([`max_frame`]).
    max_frame: Vec<u32>,
    /// The one socket the last burst enqueued to, if it touched only one: its queue's lines
    /// are prefetched as the next burst starts ([`RxEngine::burst_led`]). The line that
    /// matters is the consumer's published index, which its worker wrote after that enqueue
    /// and the next enqueue reads: a miss on the lcore's critical path when read cold
    /// (benches/NOTES.md, "The burst start warms the one socket the last burst enqueued to"). A
    /// burst that touched several sockets prefetched them at its end.
    warm: Option<usize>,
    /// The sockets whose queues hold packets their consumer has not been shown ([`HOLD_BURSTS`],
    /// [`HOLD_MANY`]).
    held: Held,
    /// The per-packet trace's state ([`crate::trace`]).
    trace: Box<trace::TraceScratch>,
    /// Whether the reassembler's releases are reported to the trace now.
    trace_on: bool,
}

/// The longest frame a port with `mtu` takes: the MTU, the Ethernet header and two VLAN tags
/// (802.1ad), as a NIC sizes its receive limit. A longer frame cannot be on a link of that MTU
/// (RFC 894: Ethernet carries at most the MTU), and answering it would send what the link
/// cannot carry; a NIC with the limit drops it before we see it, a vdev does not.
fn max_frame(t: &Tables) -> Vec<u32> {
    let ports = t.ports.len().max(t.port_mtu.len());
    (0..ports).map(|p| t.mtu(p as u16) as u32 + 14 + 8).collect()
}

/// Whether a received frame is one buffer no longer than `max`, its port's [`max_frame`].
#[inline(always)]
fn fits<B: LcoreBuf>(max: u32, m: &B) -> bool {
    m.segments() == 1 && m.pkt_len() <= max
}

/// Counts an RX lcore's sent (or refused) packet: its outcome, or `tx_full`.
#[inline(always)]
fn count_rx_tx(stats: &LcoreStats) -> impl FnMut(Option<Outcome>, bool) + '_ {
    move |o, sent| {
        if let Some(o) = o {
            stats.outcome(if sent { o } else { Outcome::TxFull })
        }
    }
}

/// The sockets whose queues (of this lcore) hold packets not yet shown to their consumer.
struct Held {
    /// By socket index: held now.
    marked: Vec<bool>,
    /// The sockets marked, in the order they were (a socket published by an enqueue and held
    /// again may be listed twice; only the marked are published). Reserved for the most a
    /// window can list, so a push never allocates.
    list: Vec<usize>,
    /// Full bursts of the window so far.
    bursts: u32,
    /// Packets held in the window.
    packets: usize,
    /// Bursts left before several sockets may be held again: a window whose sockets took
    /// fewer than [`HOLD_GAIN`] packets each saved no crossing and cost a second visit to each.
    rest: u32,
}

/// Packets a held socket must take in a window, on average, for holding several to go on.
const HOLD_GAIN: usize = 2;

/// Bursts without holding several sockets after a window that did not pay ([`HOLD_GAIN`]): the
/// next window is a probe, cut at half its length when it does not pay either.
const HOLD_REST: u32 = 16 * HOLD_MANY;

impl Held {
    fn new(sockets: usize) -> Held {
        Held {
            marked: vec![false; sockets],
            list: Vec::with_capacity((HOLD_MANY.max(HOLD_BURSTS) as usize * BURST).max(sockets)),
            bursts: 0,
            packets: 0,
            rest: 0,
        }
    }

    /// Socket `s`'s enqueue at the end of a burst holds (`hold`) or publishes it.
    #[inline(always)]
    fn note(&mut self, s: usize, hold: bool, n: usize) {
        let m = &mut self.marked[s];
        if hold {
            if !*m {
                self.list.push(s);
            }
            self.packets += n;
        }
        *m = hold;
    }

    /// Whether socket `s` is held, and nothing else.
    #[inline]
    fn only(&self, s: usize) -> bool {
        self.marked[s] && self.list.iter().all(|&h| h == s || !self.marked[h])
    }
}

fn staging<B>(t: &Tables) -> Vec<Vec<B>> {
    (0..t.sockets.len()).map(|_| Vec::with_capacity(BURST)).collect()
}

fn handoff_staging<B>(t: &Tables) -> Vec<(Vec<B>, Vec<Option<Outcome>>)> {
    (0..t.tunnels.len()).map(|_| (Vec::new(), Vec::new())).collect()
}

impl<B: LcoreBuf, Io: RxIo<B>> RxEngine<B, Io> {
    /// The engine of the RX lcore in counter slot `slot`, over `tables`, sending on `tx` (at most
    /// one queue per port, queue `i` counted in `stats.tx[i]`).
    pub fn new(tables: Arc<Tables>, slot: usize, tx: Vec<Io::Tx>, io: Io, stats: Arc<LcoreStats>) -> Self {
        let pipeline = Pipeline::new(tables, slot);
        let pipeline_sockets = pipeline.tables().sockets.len();
        let reasm = Reassembler::new(pipeline.tables().reassembly.clone());
        stats.set_generation(pipeline.generation());
        RxEngine {
            staged: staging(pipeline.tables()),
            handoff: handoff_staging(pipeline.tables()),
            max_frame: max_frame(pipeline.tables()),
            pipeline,
            reasm,
            side: ReasmSide {
                io,
                // From the OS: which datagram a per-source cap evicts must not be foreseeable.
                rng: crate::seed::os_u64() | 1,
                released: Vec::with_capacity(256),
            },
            tx: TxBatch::by_port(tx),
            // About BURST when a burst ends, plus at most a burst's staged packets (refused or
            // freed on RX): room for both, so the end of a burst does not grow it.
            drops: Vec::with_capacity(2 * BURST),
            rest: Vec::with_capacity(BURST),
            lead: Lead::Udp4,
            election_wait: 0,
            #[cfg(test)]
            second_loop: 0,
            stats,
            scratch: Vec::with_capacity(64),
            spare: Vec::with_capacity(64),
            warm: None,
            held: Held::new(pipeline_sockets),
            trace: trace::TraceScratch::new(),
            trace_on: false,
        }
    }

    /// The pipeline (and through it the tables and generation in use).
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// The lcore's counters.
    pub fn stats(&self) -> &Arc<LcoreStats> {
        &self.stats
    }

    /// What the engine sends to and allocates from.
    pub fn io(&self) -> &Io {
        &self.side.io
    }

    /// What the engine sends to and allocates from, writable.
    pub fn io_mut(&mut self) -> &mut Io {
        &mut self.side.io
    }

    /// The lcore's TX batch for `port`, if it sends there (plain forward mode sends bursts
    /// through it unchanged).
    pub fn tx_mut(&mut self, port: u16) -> Option<&mut RxTx<B, Io>> {
        self.tx.get_mut(port as usize).and_then(Option::as_mut)
    }

    /// The lcore's TX queues and its counters, for a driver that bypasses the pipeline
    /// (plain forward mode).
    pub fn tx_and_stats(&mut self) -> (&mut [Option<RxTx<B, Io>>], &LcoreStats) {
        (&mut self.tx, &self.stats)
    }

    /// When the next reassembly timeout is due, if one is pending.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.reasm.next_deadline()
    }

    /// Bytes the reassembler holds.
    pub fn reassembly_memory(&self) -> usize {
        self.reasm.memory()
    }

    /// Fragments the reassembler holds now.
    pub fn reassembly_held(&self) -> usize {
        self.reasm.held_fragments()
    }

    /// Runs a burst received on RX queue `qi` (counted in `stats.rx[qi]`) of `port` through the
    /// pipeline, then hands the staged packets to their sockets and frees the dropped ones.
    ///
    /// Two loops: the lead's fast path ([`Lead`]: IPv4/UDP, TCP over IPv4, UDP or TCP over
    /// IPv6) over the burst, then everything it declined (other kinds, fragments, ARP,
    /// tunnels...) in a call of its own. In one loop, the rest of the pipeline behind a call per
    /// packet cost every IPv6 or TCP packet that call, and inlined there it cost the IPv4 paths
    /// spills; a packet the first loop declines costs more than one it takes (benches/NOTES.md,
    /// "The IPv6 and TCP paths, step by step").
    /// So the first loop is compiled once per kind ([`RxEngine::burst_led`]), and the kind that
    /// was more than half of a burst leads from the next one on: under a flood, the flood's
    /// kind (a SYN flood, an IPv6 one), with whatever else comes paying the decline. A burst's
    /// packets are reordered only across the two loops: a flow's keep their order unless some
    /// of them take the other loop (an IP option, a fragment), which then follow the rest, as
    /// IP allows.
    ///
    /// While a trace is armed ([`crate::trace`]; one relaxed load a burst, as the generation
    /// check) the burst takes the traced variant instead.
    #[inline]
    pub fn burst(&mut self, qi: usize, port: u16, now: Instant, burst: &mut Vec<B>) {
        if self.stats.trace.is_armed() {
            return self.burst_traced(qi, port, now, burst);
        }
        self.burst_untraced(qi, port, now, burst)
    }

    /// [`RxEngine::burst`] without the trace.
    #[inline(always)]
    fn burst_untraced(&mut self, qi: usize, port: u16, now: Instant, burst: &mut Vec<B>) {
        match self.lead {
            Lead::Udp4 => self.burst_led::<{ Lead::UDP4 }>(qi, port, now, burst),
            Lead::Tcp4 => self.burst_led::<{ Lead::TCP4 }>(qi, port, now, burst),
            Lead::Udp6 => self.burst_led::<{ Lead::UDP6 }>(qi, port, now, burst),
            Lead::Tcp6 => self.burst_led::<{ Lead::TCP6 }>(qi, port, now, burst),
        }
    }

    /// [`RxEngine::burst`] with lead `L` (a [`Lead`] as `u8`).
    ///
    /// A call of its own (one per burst), so the whole pipeline inlined here does not share a
    /// function, and its registers and stack frame, with the poll loop: when it did, the
    /// forward mode's loop got slower as the pipeline grew (benches/NOTES.md, "One call per
    /// burst").
    #[inline(never)]
    fn burst_led<const L: u8>(&mut self, qi: usize, port: u16, now: Instant, burst: &mut Vec<B>) {
        let mut bytes = 0u64;
        let n = burst.len();
        // The port's limit and what the fast paths read of it taken once a burst, not per
        // packet (benches/NOTES.md, "Tests as branches on the common case" and "Per-burst reads
        // and the closed port's decision").
        let max = self.max_frame(port);
        let view = self.pipeline.port_view(port);
        if let Some(s) = self.warm {
            if let Some(socket) = self.pipeline.tables().sockets.get(s) {
                self.side.io.prefetch(socket, self.pipeline.slot(), 1);
            }
        }
        if let Some(t) = self.pipeline.tcp_state_to_prefetch() {
            for m in burst.iter() {
                if let Some(a) = t.bucket_of_frame(m.data()) {
                    self.side.io.prefetch_line(a);
                }
            }
        }
        for m in burst.drain(..) {
            bytes += m.pkt_len() as u64;
            if let Some(m) = self.first_pass::<L>(&view, port, max, m, now) {
                self.rest.push(m);
            }
        }
        if !self.rest.is_empty() {
            if self.rest.len() * 2 > n {
                if self.election_wait == 0 {
                    self.elect_lead(n);
                } else {
                    self.election_wait -= 1;
                }
            }
            self.burst_rest(&view, port, now, Lead::ALL[L as usize]);
        }
        self.stats.rx[qi].bytes.add(bytes);
        self.end_burst_of(n >= BURST);
    }

    /// More than half of a burst of `n` went to the second loop: the kind that is more than
    /// half of the burst, if one is and it is not the lead already, leads from the next burst
    /// on; else the next [`ELECTION_BACKOFF`] such bursts are not looked at (a fragment flood
    /// is declined by its own kind's path burst after burst, and counting each cost every
    /// fragment: benches/NOTES.md, "The burst's lead kind").
    #[cold]
    #[inline(never)]
    fn elect_lead(&mut self, n: usize) {
        let mut kinds = [0usize; Lead::ALL.len()];
        for m in &self.rest {
            if let Some(k) = Lead::of(m.data()) {
                kinds[k as usize] += 1;
            }
        }
        match Lead::ALL.iter().find(|k| kinds[**k as usize] * 2 > n) {
            Some(&k) if k != self.lead => self.lead = k,
            _ => self.election_wait = ELECTION_BACKOFF,
        }
    }

    /// Runs one packet received on `port` through the pipeline, as [`RxEngine::burst`] does a
    /// burst's (staged packets wait for [`RxEngine::end_burst`]): for a driver that hands
    /// packets one at a time, such as the corpus runner printing each frame's outcomes. Not
    /// counted as received: the driver counts bursts.
    pub fn receive(&mut self, port: u16, m: B, now: Instant) {
        let view = self.pipeline.port_view(port);
        if let Some(m) = self.first_pass::<{ Lead::UDP4 }>(&view, port, self.max_frame(port), m, now) {
            self.handle_cold(port, m, now, Some(Lead::Udp4));
        }
    }

    /// A received packet through fast path `L` ([`Lead`]), acted on, or back if the path
    /// declined it (nothing changed); an oversize frame (one not [`fits`] in `max`, the
    /// port's [`RxEngine::max_frame`]) is counted and dropped here.
    #[inline(always)]
    fn first_pass<const L: u8>(&mut self, view: &PortView, port: u16, max: u32, mut m: B, now: Instant) -> Option<B> {
        if !fits(max, &m) {
            self.stats.outcome(Outcome::Oversize);
            self.drops.push(m);
        } else {
            match self.pipeline.process_lead::<L, B>(view, port, &mut m, now) {
                // Staged: `drops` did not grow, so its test is not made on a delivered packet.
                Some(Verdict::Deliver) => {
                    self.staged[self.pipeline.delivered_to()].push(m);
                    return None;
                }
                Some(v) => self.act(port, m, v, now),
                None => return Some(m),
            }
        }
        if self.drops.len() >= BURST {
            B::free_bulk(&mut self.drops);
        }
        None
    }

    /// [`RxEngine::burst`]'s second loop: the packets the fast path of `lead` declined, through
    /// the rest of the pipeline.
    #[inline(never)]
    fn burst_rest(&mut self, view: &PortView, port: u16, now: Instant, lead: Lead) {
        let mut rest = std::mem::take(&mut self.rest);
        #[cfg(test)]
        {
            self.second_loop += rest.len() as u64;
        }
        for m in rest.drain(..) {
            self.handle(view, port, m, now, Some(lead));
            if self.drops.len() >= BURST {
                B::free_bulk(&mut self.drops);
            }
        }
        self.rest = rest;
    }

    /// The longest frame `port` takes ([`max_frame`]).
    #[inline(always)]
    fn max_frame(&self, port: u16) -> u32 {
        self.max_frame.get(port as usize).copied().unwrap_or(u32::MAX)
    }

    /// The burst's packets are all received: enqueues every socket's staged packets in one
    /// burst each (`delivered` for what its queue took, `socket_full` for the rest; `kernel` and
    /// `kernel_full` for a socket of the kernel path) and frees
    /// the dropped ones.
    #[inline]
    pub fn end_burst(&mut self) {
        self.end_burst_of(false)
    }

    /// [`RxEngine::end_burst`] of a burst that was `full` ([`BURST`] packets: the lcore is
    /// behind, so its one socket's enqueue may be held back, [`HOLD_BURSTS`]).
    #[inline]
    fn end_burst_of(&mut self, full: bool) {
        let slot = self.pipeline.slot();
        // With many sockets each is cold here; with one, three calls per burst.
        if self.pipeline.touched() > 1 {
            for step in 0..3 {
                let io = &mut self.side.io;
                self.pipeline
                    .each_touched(|tables, s| io.prefetch(&tables.sockets[s], slot, step));
            }
        }
        let touched = self.pipeline.touched();
        let single = match touched {
            1 => self.pipeline.first_touched(),
            _ => None,
        };
        let window = self.hold_window(single, touched, full);
        let (staged, io, stats, drops, held) = (
            &mut self.staged,
            &mut self.side.io,
            &*self.stats,
            &mut self.drops,
            &mut self.held,
        );
        // The tables borrowed, not cloned: an Arc clone is an atomic write to a line every
        // lcore shares.
        self.pipeline.each_staged(|tables, s, _| {
            let pkts = &mut staged[s];
            let socket = &tables.sockets[s];
            let n = if socket.free_on_rx {
                // Freed with the burst's drops, in one bulk below: a free call per socket cost
                // each socket a burst touched (1000 sink services: benches/NOTES.md, "Many
                // sockets"), a cost of the stand-in, not of the path it stands in for. A lone
                // packet is pushed, not appended (`append` is a `memcpy` call).
                let n = pkts.len();
                match pkts.pop() {
                    Some(m) if n == 1 => drops.push(m),
                    Some(m) => {
                        drops.append(pkts);
                        drops.push(m);
                    }
                    None => {}
                }
                n as u64
            } else {
                // One socket keeps the rule of HOLD_BURSTS; among several, a socket is held only
                // well inside NORMAL room (HOLD_MANY).
                let hold = window
                    && (single.is_some() || (socket.producer_len(slot, false).0 + pkts.len()) * 4 <= socket.capacity());
                held.note(s, hold, pkts.len());
                io.enqueue(socket, slot, pkts, hold) as u64
            };
            let c = &socket.counters.rx[slot];
            c.delivered.add(n);
            let (taken, full) = if socket.kernel {
                (Outcome::Kernel, Outcome::KernelFull)
            } else {
                (Outcome::Delivered, Outcome::SocketFull)
            };
            stats.outcomes[taken.index()].add(n);
            let refused = pkts.len() as u64;
            if refused > 0 {
                c.full.add(refused);
                stats.outcomes[full.index()].add(refused);
                drops.append(pkts);
            }
            socket.carries().then(|| socket.producer_len(slot, false))
        });
        self.warm = match self.pipeline.touched() {
            1 => self.pipeline.first_touched(),
            _ => None,
        };
        self.pipeline.burst_done();
        B::free_bulk(&mut self.drops);
    }

    /// The end of a poll that started at `now`: reassembly expiry (bounded work per poll, no
    /// background thread), then every TX batch sent; the identifications' clock.
    pub fn poll_done(&mut self, now: Instant) {
        self.pipeline.idents().set_now(now);
        self.pipeline.poll_done(now);
        if self.reasm.next_deadline().is_some_and(|d| d <= now) {
            self.trace_on = self.trace.waiting();
            self.reasm.expire(now, EXPIRE_BUDGET, &mut self.side);
            self.settle_reassembly(now);
            if self.trace_on {
                self.trace_settled();
            }
        }
        self.flush_tx();
        B::free_bulk(&mut self.drops);
        // A busy lcore never idles: buffers a reclaiming socket's worker is done with would
        // stay held until that socket's next enqueue, which a datagram refused for want of a
        // buffer never makes (reassembly into a sink would stop for good).
        if self.side.io.take_reclaim_due() {
            self.idle();
        }
    }

    /// Whether the end of a burst that enqueues to `single` alone (or to `touched` sockets) may
    /// hold its enqueues back, and the window's count of bursts moved on: a full burst's one
    /// socket, for fewer than [`HOLD_BURSTS`] bursts in a row (another socket held before is
    /// published first); a full burst's several sockets, for fewer than [`HOLD_MANY`]. When the
    /// window closes, what this burst does not enqueue to is published here, the rest by its
    /// enqueue without `hold`.
    #[inline]
    fn hold_window(&mut self, single: Option<usize>, touched: usize, full: bool) -> bool {
        let (bursts, limit) = match single {
            Some(s) if self.held.only(s) => (self.held.bursts, HOLD_BURSTS),
            Some(_) => {
                self.publish_held();
                (0, HOLD_BURSTS)
            }
            None if touched == 0 => (0, 0),
            None if self.held.rest > 0 => {
                self.held.rest -= 1;
                (0, 0)
            }
            // A window whose first half found a new socket for nearly every packet is spread
            // too thin to pay (each socket would take about one packet in it): cut short.
            None if self.held.bursts == HOLD_MANY / 2 && 2 * self.held.packets < 3 * self.held.list.len() => {
                self.publish_held();
                self.held.rest = HOLD_REST;
                (0, 0)
            }
            None => (self.held.bursts, HOLD_MANY),
        };
        let window = full && bursts + 1 < limit;
        if window {
            self.held.bursts = bursts + 1;
        } else {
            self.publish_held();
        }
        window
    }

    /// Publishes what the last bursts held back ([`HOLD_BURSTS`]), if anything.
    pub fn publish_held(&mut self) {
        self.held.bursts = 0;
        let packets = std::mem::take(&mut self.held.packets);
        if self.held.list.is_empty() {
            return;
        }
        let (held, io, tables) = (&mut self.held, &mut self.side.io, self.pipeline.tables());
        let slot = self.pipeline.slot();
        if held.list.len() > 1 {
            if packets < HOLD_GAIN * held.list.len() {
                held.rest = HOLD_REST;
            }
            // Each socket's queue is cold again by now: its lines asked for together.
            for &s in &held.list {
                if let Some(socket) = tables.sockets.get(s) {
                    io.prefetch(socket, slot, 1);
                }
            }
        }
        for &s in &held.list {
            if std::mem::take(&mut held.marked[s]) {
                if let Some(socket) = tables.sockets.get(s) {
                    io.publish(socket, slot);
                }
            }
        }
        held.list.clear();
    }

    /// A poll found nothing: what was held back is published and the sockets' queues do their
    /// idle work ([`RxIo::idle`]).
    #[cold]
    pub fn idle(&mut self) {
        self.publish_held();
        self.side.io.idle(self.pipeline.tables(), self.pipeline.slot());
    }

    /// Sends every TX batch now, and hands sequence tunnels' answers to their owners.
    pub fn flush_tx(&mut self) {
        let stats = &*self.stats;
        for b in self.tx.iter_mut().flatten() {
            b.flush(stats, &mut self.drops, count_rx_tx(stats));
        }
        let tables = self.pipeline.tables();
        let slot = self.pipeline.slot();
        for (t, (pkts, outcomes)) in self.handoff.iter_mut().enumerate() {
            if pkts.is_empty() {
                continue;
            }
            let took = self.side.io.hand_off(&tables.tunnels[t], pkts);
            tables.tunnels[t].counters.rx[slot].handed_off.add(took as u64);
            for (i, o) in outcomes.drain(..).enumerate() {
                if let Some(o) = o {
                    stats.outcome(if i < took { o } else { Outcome::TxFull });
                }
            }
            self.drops.append(pkts);
        }
    }

    /// Adopts generation `t` at a quiescent point (nothing staged or in flight, so it applies
    /// to whole bursts): the reassembler is reconfigured if its settings changed, the pipeline's
    /// per-lcore state carried over or rebuilt, the staging resized.
    pub fn adopt(&mut self, t: Arc<Tables>, now: Instant) {
        // Before the tables change: `held` is a socket of these.
        self.publish_held();
        if t.reassembly != *self.reasm.config() {
            self.reasm.reconfigure(t.reassembly.clone(), &mut self.side);
            self.settle_reassembly(now);
            self.flush_tx();
            B::free_bulk(&mut self.drops);
        }
        self.pipeline.apply(t);
        self.max_frame = max_frame(self.pipeline.tables());
        self.staged = staging(self.pipeline.tables());
        self.handoff = handoff_staging(self.pipeline.tables());
        self.held = Held::new(self.pipeline.tables().sockets.len());
        self.warm = None;
        self.stats.set_generation(self.pipeline.generation());
    }

    /// Adopts generation `t` without touching anything but the pipeline's tables (plain forward
    /// mode, where no stage runs).
    pub fn adopt_tables_only(&mut self, t: Arc<Tables>) {
        self.pipeline.apply(t);
        self.stats.set_generation(self.pipeline.generation());
    }

    /// Clean stop: fragments still held are handed back and counted, and whatever is queued
    /// is sent. Afterwards every packet received has been counted once.
    pub fn stop(&mut self, now: Instant) {
        self.trace_on = self.trace.waiting();
        self.reasm.drain_all(&mut self.side);
        self.settle_reassembly(now);
        if self.trace_on {
            self.trace_settled();
        }
        self.flush_tx();
        B::free_bulk(&mut self.drops);
        self.publish_held();
    }

    /// [`RxEngine::handle`] out of line, for [`RxEngine::act`].
    #[cold]
    #[inline(never)]
    fn handle_cold(&mut self, port: u16, m: B, now: Instant, tried: Option<Lead>) {
        let view = self.pipeline.port_view(port);
        self.handle(&view, port, m, now, tried);
    }

    /// Acts on the pipeline's verdict for `m` (any but [`Verdict::Reassemble`], which only
    /// [`RxEngine::handle`] gets and acts on).
    #[inline(always)]
    fn act(&mut self, port: u16, m: B, v: Verdict, now: Instant) {
        match v {
            Verdict::Drop(o) => {
                self.stats.outcome(o);
                self.drops.push(m);
            }
            Verdict::Transmit(o) => self.transmit(port, m, o),
            Verdict::TransmitOn { port: out, outcome } => self.transmit(out, m, outcome),
            Verdict::HandOff { tunnel, outcome } => self.stage_handoff(tunnel, m, outcome),
            Verdict::TransmitThrough { tunnel, outcome } => self.transmit_through(tunnel, m, outcome),
            Verdict::Deliver => self.staged[self.pipeline.delivered_to()].push(m),
            // Not from the IPv4/UDP fast path, and `handle` acts on it itself: through the
            // pipeline again (the verdict changed nothing).
            Verdict::Reassemble { .. } => self.handle_cold(port, m, now, None),
        }
    }

    /// Runs one packet through the pipeline (all but fast path `tried`, which declined it) and
    /// acts on the verdict; a fragment goes to the
    /// reassembler and, if it completes its datagram, the datagram goes on through the pipeline
    /// (from where its fragments stopped, if they came through a tunnel).
    #[inline(always)]
    fn handle(&mut self, view: &PortView, port: u16, mut m: B, now: Instant, mut tried: Option<Lead>) {
        // Inlined into `burst_rest` (and into `handle_cold`, the rare callers' copy): behind
        // a call per packet, the rest of the pipeline cost more on every packet
        // (benches/NOTES.md, "The RX engine split").
        let mut after: Option<crate::buf::Tunnelled> = None;
        // `m` is a reassembled datagram (in a 64 KiB buffer), not a received frame.
        let mut datagram_buffer = false;
        loop {
            let v = match after.take() {
                None => self.pipeline.process_rest(view, port, &mut m, now, tried.take()),
                Some(t) => self.pipeline.process_after_tunnel(port, &mut m, now, t),
            };
            match v {
                Verdict::Reassemble { l3 } => {
                    let Some(mut meta) = FragMeta::from_frame(m.data(), l3 as usize) else {
                        self.stats.outcome(Outcome::Malformed);
                        self.drops.push(m);
                        return;
                    };
                    let via = m.tunnelled();
                    if let Some(t) = via {
                        meta.key = meta.key.through(t.to_word());
                    }
                    if self.trace_on {
                        self.trace.set_current(trace::frag_id(&meta));
                    }
                    if datagram_buffer {
                        // A reassembled datagram that is itself a fragment (fragments in a
                        // fragmented tunnel packet): held as it is, it would pin a 64 KiB buffer
                        // charged as one packet buffer, and a few hundred small frames would hold
                        // every datagram buffer. It is held in a packet buffer instead; one that
                        // does not fit is refused (`no_buffer`).
                        match self.copy_to_packet_buffer(&m) {
                            Some(small) => {
                                self.drops.push(m);
                                m = small;
                            }
                            None => {
                                let _ = self.reasm.refuse(
                                    m,
                                    &meta,
                                    crate::pipeline::reasm::Reason::NoBuffer,
                                    &mut self.side,
                                );
                                self.settle_reassembly(now);
                                return;
                            }
                        }
                    }
                    let done = self.reasm.insert(now, m, &meta, &mut self.side);
                    self.settle_reassembly(now);
                    if let Insert::Complete { mut datagram, .. } = done {
                        datagram.set_port(port);
                        m = datagram;
                        after = via;
                        datagram_buffer = true;
                        continue;
                    }
                }
                v => self.act(port, m, v, now),
            }
            return;
        }
    }

    /// A copy of `m` (its frame, port and tunnel record) in a packet buffer, if one is free and
    /// the frame fits.
    #[cold]
    fn copy_to_packet_buffer(&mut self, m: &B) -> Option<B> {
        let len = m.len();
        let mut small = self.side.io.alloc(len)?;
        let Some(dst) = small.append(len) else {
            self.drops.push(small);
            return None;
        };
        dst.copy_from_slice(m.data());
        small.set_port(m.port());
        small.set_tunnelled(m.tunnelled());
        Some(small)
    }

    /// Stages an answer for sequence tunnel `tunnel`'s owner (handed off at the next flush),
    /// cut first into pieces the tunnel carries whole if it is too big (only the last piece
    /// counts the outcome).
    #[cold]
    fn stage_handoff(&mut self, tunnel: u16, m: B, o: Outcome) {
        let tables = self.pipeline.tables();
        let t = tunnel as usize;
        let Some((pkts, outcomes)) = self.handoff.get_mut(t) else {
            self.stats.outcome(Outcome::TxFull);
            self.drops.push(m);
            return;
        };
        let mtu = crate::pipeline::tunnel::inner_mtu(&tables.tunnels, t);
        if !needs_fragmenting(&m, mtu) {
            pkts.push(m);
            outcomes.push(Some(o));
            return;
        }
        let ident = self.pipeline.idents().for_frame(m.data());
        let io = &mut self.side.io;
        let ok = crate::tx::fragment_frame(&m, mtu, |len| io.alloc(len), ident, &mut self.scratch);
        self.drops.push(m);
        let n = self.scratch.len();
        if !ok || n == 0 {
            self.drops.append(&mut self.scratch);
            self.stats.outcome(Outcome::TxFull);
            return;
        }
        for (i, p) in self.scratch.drain(..).enumerate() {
            pkts.push(p);
            outcomes.push((i + 1 == n).then_some(o));
        }
    }

    /// Sends an answer too big for tunnel `tunnel`'s path in pieces that fit, each
    /// encapsulated ([`fragment_into_tunnel`]); the last piece counts the outcome.
    #[cold]
    fn transmit_through(&mut self, tunnel: u16, m: B, o: Outcome) {
        let slot = self.pipeline.slot();
        let (tables, idents) = self.pipeline.tables_and_idents();
        let t = tunnel as usize;
        let stats = &*self.stats;
        let (tx, drops) = (&mut self.tx, &mut self.drops);
        let io = &mut self.side.io;
        let mut counted = false;
        let held = &mut self.spare;
        let sent = fragment_into_tunnel(
            m,
            &tables.tunnels,
            t,
            |len| io.alloc(len),
            idents,
            &mut self.scratch,
            held,
            |port, piece, last| match tx.get_mut(port as usize) {
                Some(Some(b)) => {
                    counted |= last;
                    if b.push(piece, last.then_some(o)) {
                        b.flush(stats, drops, count_rx_tx(stats));
                    }
                }
                _ => drops.push(piece),
            },
        );
        drops.append(held);
        if sent && counted {
            tables.tunnels[t].counters.rx[slot].encap.inc();
        } else if !counted {
            stats.outcome(Outcome::TxFull);
        }
    }

    /// Queues an answer on this lcore's TX queue of `port`, fragmenting it first if it is larger
    /// than the port's MTU (a reassembled datagram's answer); only the last piece carries the
    /// packet's outcome.
    #[inline]
    fn transmit(&mut self, port: u16, m: B, o: Outcome) {
        let mtu = self.pipeline.tables().mtu(port);
        let stats = &*self.stats;
        let Some(Some(b)) = self.tx.get_mut(port as usize) else {
            stats.outcome(Outcome::TxFull);
            self.drops.push(m);
            return;
        };
        if !needs_fragmenting(&m, mtu) {
            if b.push(m, Some(o)) {
                b.flush(stats, &mut self.drops, count_rx_tx(stats));
            }
            return;
        }
        let ident = self.pipeline.idents().for_frame(m.data());
        let io = &mut self.side.io;
        let sent = queue_in_fragments(
            b,
            m,
            mtu,
            (Some(o), None),
            |len| io.alloc(len),
            ident,
            &mut self.scratch,
            &mut self.drops,
            |b, drops| b.flush(stats, drops, count_rx_tx(stats)),
        );
        if !sent {
            stats.outcome(Outcome::TxFull);
        }
    }

    /// Counts the outcome of every fragment the reassembler handed back and frees it; a first
    /// fragment that timed out is answered with Time Exceeded when the ICMP limits allow;
    /// publishes the reassembler's statistics for the metrics.
    fn settle_reassembly(&mut self, now: Instant) {
        let mut released = std::mem::take(&mut self.side.released);
        for mut r in released.drain(..) {
            // Before an answer rewrites it: the fragment's identity for the trace.
            let id = if self.trace_on { trace::released_id(&r.buf) } else { 0 };
            if r.fate == (Fate::TimedOut { first: true }) {
                // RFC 792 / RFC 8200 §4.5: Time Exceeded code 1 about the first fragment,
                // through the ICMP rate limits; it is that fragment's outcome when sent.
                let port = r.buf.port();
                let v = self.pipeline.reassembly_timeout(port, &mut r.buf, now);
                if self.trace_on {
                    if let Some(o) = v.filter(|v| !matches!(v, Verdict::Drop(_))).map(Verdict::outcome) {
                        self.trace_released(id, Some(o));
                    }
                }
                match v {
                    Some(Verdict::Transmit(o)) => {
                        self.transmit(port, r.buf, o);
                        continue;
                    }
                    Some(Verdict::TransmitOn { port, outcome }) => {
                        self.transmit(port, r.buf, outcome);
                        continue;
                    }
                    Some(Verdict::HandOff { tunnel, outcome }) => {
                        self.stage_handoff(tunnel, r.buf, outcome);
                        continue;
                    }
                    Some(Verdict::TransmitThrough { tunnel, outcome }) => {
                        self.transmit_through(tunnel, r.buf, outcome);
                        continue;
                    }
                    _ => {}
                }
            }
            let o = match r.fate {
                Fate::Reassembled => Some(Outcome::Reassembled),
                Fate::Absorbed => None,
                Fate::Refused(_) => Some(Outcome::ReassemblyRefused),
                Fate::TimedOut { .. } => Some(Outcome::ReassemblyTimeout),
                Fate::Drained => Some(Outcome::ReassemblyFlushed),
            };
            if self.trace_on {
                self.trace_released(id, o);
            }
            if let Some(o) = o {
                self.stats.outcome(o);
            }
            self.drops.push(r.buf);
            if self.drops.len() >= BURST {
                B::free_bulk(&mut self.drops);
            }
        }
        self.side.released = released;
        self.reasm.stats().publish(self.reasm.memory(), &self.stats.reasm);
        // Received, with no outcome yet: the third term of the lcore's balance.
        self.stats.reasm.held.set(self.reasm.held_fragments() as u64);
    }
}

/// The engine over heap buffers, for unit tests, the in-process corpus runner, the benchmarks
/// and the fuzz target: TX queues are [`Collect`](crate::tx::Collect)ors, sockets must be
/// [`SimQueue`](crate::socket::SimQueue)s (a socket of another kind takes nothing), buffers come
/// from the heap (an allocator that never runs dry).
#[derive(Debug, Default)]
pub struct HeapIo {
    /// Keep the packets sockets took (in [`HeapIo::delivered`]) instead of dropping them.
    pub keep_delivered: bool,
    /// What the sockets took, in order, with the socket's [`Socket::index`], if kept.
    pub delivered: Vec<(usize, crate::buf::HeapBuf)>,
    /// The address of the socket each packet of `delivered` went to (which socket of which
    /// service: for a runner that hands them on to the workers' engines).
    pub delivered_to: Vec<usize>,
    /// What was handed to sequence tunnels' owners, with the tunnel's name, if kept (with
    /// `keep_delivered`).
    pub handed_off: Vec<(String, crate::buf::HeapBuf)>,
    /// Packet buffers allocated ([`RxIo::alloc`]).
    pub packet_buffers: u64,
    /// Datagram buffers allocated ([`RxIo::alloc_datagram`]).
    pub datagram_buffers: u64,
    /// Each prefetch asked for, as (socket index, step), if kept (with `keep_delivered`).
    pub prefetched: Vec<(usize, u8)>,
    /// Per socket (its [`Socket::index`]) whose queue holds packets back, how many
    /// ([`RxIo::enqueue`] with `hold`, until [`RxIo::publish`] or an enqueue without).
    pub held: Vec<(usize, usize)>,
}

impl RxIo<crate::buf::HeapBuf> for HeapIo {
    type Tx = crate::tx::Collect<crate::buf::HeapBuf>;
    fn alloc(&mut self, len: usize) -> Option<crate::buf::HeapBuf> {
        self.packet_buffers += 1;
        Some(crate::buf::HeapBuf::with_room(&[], crate::buf::DEFAULT_HEADROOM, len))
    }
    fn alloc_datagram(&mut self, len: usize) -> Option<crate::buf::HeapBuf> {
        self.datagram_buffers += 1;
        // The daemon's 64 KiB buffers leave room behind a datagram; so does this one.
        Some(crate::buf::HeapBuf::with_room(
            &[],
            crate::buf::DEFAULT_HEADROOM,
            len + 256,
        ))
    }
    fn enqueue(&mut self, socket: &Socket, slot: usize, pkts: &mut Vec<crate::buf::HeapBuf>, hold: bool) -> usize {
        let Some(q) = socket.queue(slot).sim() else {
            return 0;
        };
        let took = q.push(pkts.len());
        for p in pkts.drain(..took) {
            if self.keep_delivered {
                self.delivered.push((socket.index, p));
                self.delivered_to.push(std::ptr::from_ref(socket).addr());
            }
        }
        if hold {
            match self.held.iter_mut().find(|(s, _)| *s == socket.index) {
                Some((_, n)) => *n += took,
                None => self.held.push((socket.index, took)),
            }
        } else {
            self.publish(socket, slot);
        }
        took
    }
    fn publish(&mut self, socket: &Socket, _slot: usize) {
        self.held.retain(|(s, _)| *s != socket.index);
    }
    fn prefetch(&mut self, socket: &Socket, _slot: usize, step: u8) {
        if self.keep_delivered {
            self.prefetched.push((socket.index, step));
        }
    }
    fn hand_off(&mut self, tunnel: &crate::pipeline::tunnel::Tunnel, pkts: &mut Vec<crate::buf::HeapBuf>) -> usize {
        let n = pkts.len();
        for p in pkts.drain(..) {
            if self.keep_delivered {
                self.handed_off.push((tunnel.name.clone(), p));
            }
        }
        n
    }
}
