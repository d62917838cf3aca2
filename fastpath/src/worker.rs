//! The worker engine: everything a worker lcore decides, free of DPDK.
//!
//! A worker drains the service sockets assigned to its slot (each socket's per-RX-lcore queues
//! round robin) and runs their actions, one method each: `sink` counts and frees, `echo`
//! answers in place, `tunnel` encapsulates to the flow's backend or hands a sequence tunnel's
//! packet to its owner, `kernel` writes into the kernel interface of the port the packet came in
//! on. It owns the sequence tunnels assigned to its slot and numbers what every lcore hands it,
//! sends out of each port what the kernel wrote on its interface (recording the kernel's own
//! solicitations first), and decides, for a packet too big for a tunnel, between an ICMP error
//! and fragmenting (RFC 1191 / RFC 8201). Every answer leaves on the worker's own TX queue of a
//! port through one helper, `send`, which cuts it into fragments when it is larger than the
//! port's MTU.
//!
//! Generic over the buffer ([`LcoreBuf`]) and over the queues it drains, sends on and allocates
//! from ([`WorkerIo`]): the same code runs in the daemon over mbufs and DPDK rings
//! (`runtime::WorkerLcore`, which only polls, reads the clock, adopts generations and stops),
//! and in unit tests and the in-process corpus runner over heap buffers ([`HeapWorkerIo`]).
//!
//! Stopping: RX lcores stop first and say so; workers then drain their sockets to empty, run
//! the action on every packet, and stop. So at a clean stop no packet is left in a socket.

use crate::buf::{LcoreBuf, Tunnelled};
use crate::ident::Idents;
use crate::pipeline::conntrack::{self, Conntrack, ConntrackCounters, Seen};
use crate::pipeline::tunnel::Tunnel;
use crate::pipeline::{kernel, service, tunnel, Action, Backends, Instant, Tables};
use crate::socket::{Socket, SocketLcoreCounters};
use crate::stats::{ConntrackProbe, LcoreStats};
use crate::tx::{fragment_into_tunnel, needs_fragmenting, queue_in_fragments, Transmit, TxBatch, BURST};
use crate::wire::{IpProtocol, TcpFlags};
use std::collections::HashMap;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::Arc;

#[cfg(test)]
mod tests;

/// What the worker engine needs from the lcore that drives it: the sockets' queues, the
/// sequence tunnels' hand-off queues, the kernel interfaces' RX queues, buffers for fragments.
pub trait WorkerIo<B: LcoreBuf> {
    /// The lcore's TX queues (one per port, kernel interfaces included).
    type Tx: Transmit<B>;
    /// Takes packets from `socket`'s queue of RX lcore slot `slot` into the spare capacity of
    /// `out` (at most a burst); how many. `None` when that queue is not of this I/O's kind.
    fn dequeue(&mut self, socket: &Socket, slot: usize, out: &mut Vec<B>) -> Option<usize>;
    /// Takes up to `max` packets from `socket`'s queue of slot `slot` and frees them, or leaves
    /// them for the producer to free (a reclaiming queue); how many. `None` as for
    /// [`WorkerIo::dequeue`].
    fn dequeue_and_free(&mut self, socket: &Socket, slot: usize, max: usize) -> Option<usize>;
    /// What `socket`'s queue of slot `slot` holds as its consumer last saw it (no read of the
    /// producer's line), after a take from it.
    fn consumer_len(&mut self, socket: &Socket, slot: usize) -> usize;
    /// Hands `pkts` to the owner of sequence tunnel `tunnel`: what its queue takes leaves `pkts`
    /// from the front, the refused stay. How many it took.
    fn hand_off(&mut self, tunnel: &Tunnel, pkts: &mut Vec<B>) -> usize;
    /// Owner of sequence tunnel `tunnel`: takes what was handed to it into the spare capacity of
    /// `out`; how many. `None` when it has no hand-off queue of this I/O's kind.
    fn take_handed(&mut self, tunnel: &Tunnel, out: &mut Vec<B>) -> Option<usize>;
    /// An empty buffer with at least `len` bytes of tailroom, for a fragment of an answer.
    fn alloc(&mut self, len: usize) -> Option<B>;
    /// The kernel interfaces' RX queues this worker polls.
    fn kernel_queues(&self) -> usize;
    /// The DPDK port id of kernel interface queue `q`'s interface.
    fn kernel_interface(&self, q: usize) -> u16;
    /// Receives a burst of what the kernel wrote on interface queue `q`; how many.
    fn kernel_recv(&mut self, q: usize, out: &mut Vec<B>) -> usize;
    /// Busy-waits `cycles` of the clock the engine was made with (a service's `cost_ns`).
    fn spin(&mut self, cycles: u64);
    /// Asks the CPU to bring the cache line at `addr` into its caches (a hint; no read the
    /// program sees). Without a prefetch instruction to hand, nothing.
    #[inline(always)]
    fn prefetch(&self, addr: *const u8) {
        let _ = addr;
    }
    /// Now, in pipeline time (read only when the kernel solicits a neighbour).
    fn now(&mut self) -> Instant;
    /// No producer enqueues to `socket` again: frees what it keeps of what its consumer took
    /// (a reclaiming queue's, which its producer would have freed).
    fn release(&mut self, socket: &Socket);
}

/// A socket a worker drains, with the action to run on its packets.
struct Drained {
    socket: Arc<Socket>,
    action: Action,
    /// Busy-wait per packet, in clock cycles.
    cost_cycles: u64,
    /// `echo`: answer source ports below 1024 (the service's `echo_allow_low_ports`).
    echo_allow_low_ports: bool,
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
    /// An echo reply sent back through the tunnel its request came through: counted on both.
    EchoThrough {
        /// The socket's index in the work list.
        socket: u32,
        /// The tunnel's index in the current tables.
        tunnel: u32,
    },
    /// A fragment of an answer other than the last, or an ICMP error: counts nothing.
    Piece,
    /// A packet written into the kernel interface of `port` (DPDK id of the port it came in
    /// on), taken off the socket at this index of the work list.
    Kernel {
        /// The socket's index in the work list.
        socket: u32,
        /// The mirrored port.
        port: u16,
    },
    /// A packet from the kernel interface of `port`, sent out of that port.
    FromKernel {
        /// The mirrored port.
        port: u16,
    },
}

type Batch<B, Io> = TxBatch<<Io as WorkerIo<B>>::Tx, B, Tag>;

/// Per-generation worker state that depends on the tables.
struct WorkerTables<B> {
    tables: Arc<Tables>,
    work: Vec<Drained>,
    /// Per tunnel: packets staged for the tunnel's owner (sequence tunnels).
    handoff: Vec<Vec<B>>,
    /// Sequence tunnels this worker owns.
    owned: Vec<usize>,
}

/// What counting a sent packet needs: the work list (echo tags) and the tables (tunnel tags).
struct Ctx<'a> {
    work: &'a [Drained],
    tables: &'a Tables,
    slot: usize,
}

/// What a worker's action did with one packet (for its trace record).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Did {
    /// Sent (an echo's answer; a kernel packet: into this interface) out of this port.
    Port(u16),
    /// Into this tunnel (encapsulated here or handed to its sequence owner).
    Tunnel(usize),
    /// Consumed.
    Sunk,
    /// Refused by the echo policy.
    Refused,
    /// The TX queue had no room.
    TxFull,
    /// Dropped: it could not be handled (see the action's `invalid` count).
    Invalid,
}

impl Did {
    fn note(self, action: &Action, tracked: bool) -> crate::trace::Note {
        use crate::trace::{Note, WorkerDid};
        let did = match self {
            Did::Port(p) => WorkerDid::Port(p as u32),
            Did::Tunnel(t) => WorkerDid::Tunnel(t as u32, tracked),
            Did::Sunk => WorkerDid::Sunk,
            Did::Refused => WorkerDid::Refused,
            Did::TxFull => WorkerDid::TxFull,
            Did::Invalid => WorkerDid::Invalid,
        };
        let action = match action {
            Action::Sink => 0,
            Action::Echo => 1,
            Action::Tunnel(_) => 2,
            Action::Kernel => 3,
        };
        Note::WorkerAction { action, did }
    }
}

impl Ctx<'_> {
    /// Sends `b`, counting each packet on its socket or tunnel.
    #[inline]
    fn flush<B: LcoreBuf, Q: Transmit<B>>(&self, b: &mut TxBatch<Q, B, Tag>, stats: &LcoreStats, drops: &mut Vec<B>) {
        b.flush(stats, drops, |tag, sent| match tag {
            Tag::Echo(wi) => {
                let c = &self.work[wi as usize].socket.counters.workers[self.slot];
                if sent {
                    c.echoed.inc()
                } else {
                    c.tx_full.inc()
                }
            }
            Tag::Tunnel(ti) => {
                let c = &self.tables.tunnels[ti as usize].counters.workers[self.slot];
                if sent {
                    c.encap.inc()
                } else {
                    c.tx_full.inc()
                }
            }
            Tag::EchoThrough { socket, tunnel } => {
                let c = &self.work[socket as usize].socket.counters.workers[self.slot];
                let t = &self.tables.tunnels[tunnel as usize].counters.workers[self.slot];
                if sent {
                    c.echoed.inc();
                    t.encap.inc();
                } else {
                    c.tx_full.inc();
                    t.tx_full.inc();
                }
            }
            Tag::Kernel { socket, port } => {
                let c = &self.work[socket as usize].socket.counters.workers[self.slot];
                let k = self.tables.kernel.as_ref().and_then(|k| k.counters(self.slot, port));
                if sent {
                    c.kernel.inc();
                    if let Some(k) = k {
                        k.to_kernel.inc();
                    }
                } else {
                    c.tx_full.inc();
                    if let Some(k) = k {
                        k.interface_full.inc();
                    }
                }
            }
            Tag::FromKernel { port } => {
                if let Some(k) = self.tables.kernel.as_ref().and_then(|k| k.counters(self.slot, port)) {
                    if sent {
                        k.from_kernel.inc();
                    } else {
                        k.port_full.inc();
                    }
                }
            }
            Tag::Piece => {}
        });
    }
}

/// The worker's sending side: its I/O, TX batches, what it frees, its scratch space.
struct Out<B: LcoreBuf, Io: WorkerIo<B>> {
    slot: usize,
    io: Io,
    stats: Arc<LcoreStats>,
    tx: Vec<Option<Batch<B, Io>>>,
    drops: Vec<B>,
    /// Fragments of an answer being sent (reused: no allocation per packet).
    scratch: Vec<B>,
    /// What such an answer leaves to free while its pieces are queued (reused likewise).
    spare: Vec<B>,
    /// The IP identification of what this worker originates ([`crate::ident`]).
    idents: Idents,
    /// Advanced every poll: the RX lcore slot whose queue of each socket is drained first, so
    /// that no RX lcore's queue is always served first (round robin over a socket's queues).
    turn: usize,
    /// The `tunnel` services' connection table and the backends' identities in it.
    flows: Flows,
}

/// A worker's connection table ([`conntrack`]) with the stable identities of the backends it
/// pins flows to: a tunnel name gets a number the first time this worker sees it and keeps it
/// for the worker's life, so entries survive reloads that reorder, add or remove tunnels.
struct Flows {
    table: Conntrack,
    /// By identity: the tunnel's name.
    names: Vec<Box<str>>,
    /// By identity: the tunnel's index in the current tables (`u32::MAX`: not there).
    tunnel_of: Vec<u32>,
    /// By tunnel index in the current tables: its identity.
    id_of: Vec<u16>,
    /// The poll's time.
    now: Instant,
    /// The number of the last question from the control side answered ([`ConntrackProbe`]).
    answered: u64,
}

impl Flows {
    fn new(t: &Tables) -> Flows {
        let mut f = Flows {
            table: Conntrack::new(&t.conntrack, crate::seed::os_u64()),
            names: Vec::new(),
            tunnel_of: Vec::new(),
            id_of: Vec::new(),
            now: Instant(0),
            answered: 0,
        };
        f.adopt(t);
        f
    }

    /// Maps identities to the tunnels of `t` (a name never seen gets the next identity; past
    /// 65535 names, which a long life of reloads could reach, the table's entries are forgotten
    /// and numbering starts again).
    fn adopt(&mut self, t: &Tables) {
        self.table.configure(&t.conntrack);
        if self.names.len() + t.tunnels.len() > u16::MAX as usize {
            self.table = Conntrack::new(&t.conntrack, crate::seed::os_u64());
            self.names.clear();
        }
        self.id_of.clear();
        for tun in &t.tunnels {
            let id = match self.names.iter().position(|n| **n == *tun.name) {
                Some(i) => i,
                None => {
                    self.names.push(tun.name.as_str().into());
                    self.names.len() - 1
                }
            };
            self.id_of.push(id as u16);
        }
        self.tunnel_of.clear();
        self.tunnel_of.resize(self.names.len(), u32::MAX);
        for (ti, &id) in self.id_of.iter().enumerate() {
            self.tunnel_of[id as usize] = ti as u32;
        }
    }

    /// Brings the table's buckets of the TCP and UDP flows in `pkts` into the cache before
    /// [`Flows::pick`] reads them one by one: in a table larger than the caches nearly every
    /// lookup misses, and a burst's misses then overlap instead of following each other. Not
    /// while the caches hold the entries in use, where it would only parse each packet twice.
    #[inline]
    fn prefetch<B: LcoreBuf>(&self, set: &Backends, t: &Tables, pkts: &[B], io: &impl WorkerIo<B>) {
        if set.tunnels.is_empty() || !self.table.larger_than_caches() {
            return;
        }
        for m in pkts {
            let Ok(p) = crate::pipeline::Parsed::parse(m.data(), &t.hasher, m.rss_hash()) else {
                continue;
            };
            if let (IpProtocol::TCP | IpProtocol::UDP, Some((sport, dport)), None) = (p.protocol, p.ports, p.fragment) {
                let key = self.table.key(p.protocol.into(), p.src, sport, p.dst, dport);
                io.prefetch(self.table.bucket_addr(key));
            }
        }
    }

    /// The tunnel of `set` for packet `m` (module docs of [`conntrack`]): a TCP or UDP flow's
    /// tracked backend while `set` keeps it, else the Maglev pick (then tracked); an ICMP error
    /// the RX lcore sent here goes to the backend of the flow it quotes, found the same way
    /// without touching the entry; anything else by its hash.
    #[inline]
    fn pick(&mut self, set: &Backends, t: &Tables, m: &impl LcoreBuf, c: &ConntrackCounters) -> Option<usize> {
        if set.tunnels.is_empty() {
            return None;
        }
        let p = crate::pipeline::Parsed::parse(m.data(), &t.hasher, m.rss_hash()).ok()?;
        let seen = match (p.protocol, p.tcp_flags) {
            (IpProtocol::TCP, Some(f)) if f.0 & (TcpFlags::SYN.0 | TcpFlags::ACK.0) == TcpFlags::SYN.0 => Seen::Syn,
            (IpProtocol::TCP, Some(f)) => Seen::Tcp {
                closing: f.0 & (TcpFlags::FIN.0 | TcpFlags::RST.0) != 0,
            },
            (IpProtocol::UDP, _) => Seen::Udp,
            (IpProtocol::ICMP | IpProtocol::ICMPV6, _) => return self.pick_quoted(set, t, m.data(), &p),
            _ => return set.pick(p.hash),
        };
        let (Some((sport, dport)), None) = (p.ports, p.fragment) else {
            return set.pick(p.hash);
        };
        let key = self.table.key(p.protocol.into(), p.src, sport, p.dst, dport);
        let (tunnel_of, id_of) = (&self.tunnel_of, &self.id_of);
        let id = self.table.track(
            key,
            seen,
            self.now,
            c,
            |id| tunnel_of.get(id as usize).is_some_and(|&ti| set.keeps(ti as usize)),
            || set.pick(p.hash).map(|ti| id_of[ti]),
        )?;
        Some(self.tunnel_of[id as usize] as usize)
    }

    /// Answers the control side's question about a flow, if there is a new one: one load a poll.
    #[inline]
    fn answer(&mut self, q: &ConntrackProbe, t: &Tables) {
        let asked = q.asked.load(Acquire);
        if asked != self.answered {
            self.answer_now(q, t, asked);
        }
    }

    #[cold]
    fn answer_now(&mut self, q: &ConntrackProbe, t: &Tables, asked: u64) {
        let w: [u64; 5] = std::array::from_fn(|i| q.flow[i].load(Relaxed));
        let addr = |hi: u64, lo: u64| {
            let a = std::net::Ipv6Addr::from_bits((hi as u128) << 64 | lo as u128);
            a.to_ipv4_mapped().map_or(std::net::IpAddr::V6(a), std::net::IpAddr::V4)
        };
        let key = self.table.key(
            (w[0] >> 32) as u8,
            addr(w[1], w[2]),
            (w[0] >> 16) as u16,
            addr(w[3], w[4]),
            w[0] as u16,
        );
        let set = match t
            .services
            .services()
            .get(q.service.load(Relaxed) as usize)
            .map(|s| &s.action)
        {
            Some(Action::Tunnel(set)) => Some(set),
            _ => None,
        };
        let answer = match self.table.lookup(key, self.now) {
            _ if self.table.is_disabled() => ConntrackProbe::DISABLED,
            None => 0,
            Some((id, confirmed)) => {
                let ti = self.tunnel_of.get(id as usize).copied().unwrap_or(u32::MAX);
                let kept = ti != u32::MAX && set.is_some_and(|set| set.keeps(ti as usize));
                let mut a = ConntrackProbe::FOUND | ti as u64;
                if confirmed {
                    a |= ConntrackProbe::CONFIRMED;
                }
                if kept {
                    a |= ConntrackProbe::KEPT;
                }
                a
            }
        };
        q.answer.store(answer, Relaxed);
        q.generation.store(t.generation, Relaxed);
        q.answered.store(asked, Release);
        self.answered = asked;
    }

    /// The tunnel of the flow an ICMP error quotes ([`conntrack::quoted_flow`]).
    #[cold]
    fn pick_quoted(&self, set: &Backends, t: &Tables, frame: &[u8], p: &crate::pipeline::Parsed) -> Option<usize> {
        let Some(q) = conntrack::quoted_flow(frame, p) else {
            return set.pick(p.hash);
        };
        let key = self.table.key(q.protocol.into(), q.client, q.cport, q.service, q.sport);
        let tracked = self.table.peek(key, self.now).and_then(|id| {
            let ti = *self.tunnel_of.get(id as usize)? as usize;
            set.keeps(ti).then_some(ti)
        });
        tracked.or_else(|| set.pick(q.hash(&t.hasher)))
    }
}

impl<B: LcoreBuf, Io: WorkerIo<B>> Out<B, Io> {
    /// Queues `m` on this worker's TX queue of `port`, first cut into fragments when it is
    /// larger than the port's MTU (only the last piece is counted as `tag`). False when there is
    /// no queue there or no buffer for the fragments: `m` is freed and nothing counted.
    #[inline]
    fn send(&mut self, cx: &Ctx, port: u16, m: B, tag: Tag) -> bool {
        let mtu = cx.tables.mtu(port);
        if !needs_fragmenting(&m, mtu) {
            return self.send_whole(cx, port, m, tag);
        }
        let ident = self.idents.for_frame(m.data());
        self.send_cut(cx, port, m, mtu, tag, ident)
    }

    /// Queues `m` as it is.
    #[inline]
    fn send_whole(&mut self, cx: &Ctx, port: u16, m: B, tag: Tag) -> bool {
        let Some(Some(b)) = self.tx.get_mut(port as usize) else {
            self.drops.push(m);
            return false;
        };
        if b.push(m, tag) {
            cx.flush(b, &self.stats, &mut self.drops);
        }
        true
    }

    /// Queues `m` cut into fragments of at most `mtu` bytes (IPv6 ones identified by `ident`).
    fn send_cut(&mut self, cx: &Ctx, port: u16, m: B, mtu: u16, tag: Tag, ident: u32) -> bool {
        let Some(Some(b)) = self.tx.get_mut(port as usize) else {
            self.drops.push(m);
            return false;
        };
        let (io, stats) = (&mut self.io, &*self.stats);
        queue_in_fragments(
            b,
            m,
            mtu,
            (tag, Tag::Piece),
            |len| io.alloc(len),
            ident,
            &mut self.scratch,
            &mut self.drops,
            |b, drops| cx.flush(b, stats, drops),
        )
    }

    /// Sends every batch.
    fn flush_all(&mut self, cx: &Ctx) {
        for b in self.tx.iter_mut().flatten() {
            cx.flush(b, &self.stats, &mut self.drops);
        }
    }

    /// Frees what is waiting to be freed once a burst of it has gathered.
    #[inline]
    fn free_if_full(&mut self) {
        if self.drops.len() >= BURST {
            B::free_bulk(&mut self.drops);
        }
    }

    /// Drains socket `wi` of the work list once (a burst from each of its queues, round robin)
    /// and runs its action on each packet. Returns the packets taken.
    fn drain(&mut self, cx: &Ctx, wi: usize, buf: &mut Vec<B>, handoff: &mut [Vec<B>]) -> usize {
        let d = &cx.work[wi];
        if let Action::Sink = d.action {
            return self.sink(d);
        }
        let queues = d.socket.queues().len();
        let mut total = 0;
        for k in 0..queues {
            let j = if queues == 1 { 0 } else { (self.turn + k) % queues };
            let Some(n) = self.io.dequeue(&d.socket, j, buf) else {
                continue;
            };
            if queues > 1 {
                d.socket.publish_depth(j, self.io.consumer_len(&d.socket, j));
            }
            if n == 0 {
                continue;
            }
            total += n;
            let c = &d.socket.counters.workers[self.slot];
            c.dequeued.add(n as u64);
            // The trace (`crate::trace`): one relaxed load a burst while none is armed.
            if self.stats.trace.is_armed() {
                self.act_traced(cx, wi, buf, handoff);
                continue;
            }
            if let Action::Tunnel(set) = &d.action {
                self.flows.prefetch(set, cx.tables, buf, &self.io);
            }
            for m in buf.drain(..) {
                self.io.spin(d.cost_cycles);
                let _ = self.act(cx, wi, c, m, handoff);
                self.free_if_full();
            }
        }
        d.socket.consumer_update_pressure();
        total
    }

    /// Socket `wi`'s action on `m`, and what it did.
    #[inline(always)]
    fn act(&mut self, cx: &Ctx, wi: usize, c: &SocketLcoreCounters, m: B, handoff: &mut [Vec<B>]) -> Did {
        match &cx.work[wi].action {
            // Drained by `sink` without this loop; handled the same way all the same.
            Action::Sink => {
                c.sunk.inc();
                self.drops.push(m);
                Did::Sunk
            }
            Action::Echo => self.echo(cx, wi, c, m, handoff),
            Action::Tunnel(set) => self.tunnel(cx, set, c, m, handoff),
            Action::Kernel => self.kernel(cx, wi, c, m),
        }
    }

    /// The burst in `buf` of socket `wi` while a trace is armed: each packet's action as
    /// untraced, and for those that pass the filter a record of what this worker did with it
    /// (the RX lcore's record said which socket; this one says where it went from there).
    #[cold]
    #[inline(never)]
    fn act_traced(&mut self, cx: &Ctx, wi: usize, buf: &mut Vec<B>, handoff: &mut [Vec<B>]) {
        let stats = Arc::clone(&self.stats);
        let guard = stats.trace.session();
        let d = &cx.work[wi];
        let c = &d.socket.counters.workers[self.slot];
        let socket = cx
            .tables
            .sockets
            .iter()
            .position(|s| Arc::ptr_eq(s, &d.socket))
            .map_or(u32::MAX, |i| i as u32);
        for m in buf.drain(..) {
            self.io.spin(d.cost_cycles);
            let rec = guard.as_deref().filter(|s| !s.exhausted()).and_then(|s| {
                let summary = crate::trace::Summary::of(m.data(), m.pkt_len(), &cx.tables.hasher, m.rss_hash());
                s.filter.matches_packet(&summary, m.port(), 0).then(|| {
                    let mut r = crate::trace::Record::new(
                        stats.lcore,
                        m.port(),
                        0,
                        self.flows.now.0,
                        cx.tables.generation,
                        summary,
                    );
                    r.worker = true;
                    r.outcome = if d.socket.kernel {
                        crate::outcome::Outcome::Kernel
                    } else {
                        crate::outcome::Outcome::Delivered
                    };
                    r.push(crate::trace::Note::Worker { socket });
                    r
                })
            });
            let hits = stats.conntrack.hits.get();
            let did = self.act(cx, wi, c, m, handoff);
            if let (Some(mut r), Some(s)) = (rec, guard.as_deref()) {
                let tracked = stats.conntrack.hits.get() != hits;
                r.push(did.note(&d.action, tracked));
                s.emit(&r);
            }
            self.free_if_full();
        }
    }

    /// `sink`: consumed unread, freed straight from the queue, or left to the RX lcore that
    /// filled it to free (a reclaiming queue: the headers and the queue's slots stay in that RX
    /// lcore's cache; `dpdk::MbufRing`). A burst from each queue, round robin.
    #[inline]
    fn sink(&mut self, d: &Drained) -> usize {
        let queues = d.socket.queues().len();
        let mut total = 0;
        for k in 0..queues {
            let j = if queues == 1 { 0 } else { (self.turn + k) % queues };
            // A sink without a cost takes all that is ready (one store of the ring's index for
            // a publication of several bursts, `rx::HOLD_BURSTS`); one with a cost a burst at a
            // time, so that its backlog stays what it has not yet spent the cost on.
            let max = if d.cost_cycles == 0 { usize::MAX } else { BURST };
            let Some(n) = self.io.dequeue_and_free(&d.socket, j, max) else {
                continue;
            };
            if queues > 1 {
                d.socket.publish_depth(j, self.io.consumer_len(&d.socket, j));
            }
            total += n;
        }
        if total > 0 {
            self.io.spin(d.cost_cycles.saturating_mul(total as u64));
            let c = &d.socket.counters.workers[self.slot];
            c.dequeued.add(total as u64);
            c.sunk.add(total as u64);
        }
        d.socket.consumer_update_pressure();
        total
    }

    /// `echo`: the datagram back to its sender, from the port it came in on, or back through
    /// the tunnel it came through (a sequence tunnel's owner numbers it).
    fn echo(&mut self, cx: &Ctx, wi: usize, c: &SocketLcoreCounters, mut m: B, handoff: &mut [Vec<B>]) -> Did {
        let via = m.tunnelled();
        m.set_tunnelled(None);
        let port = m.port();
        let policy = service::EchoPolicy {
            mac: cx.tables.ports.get(port as usize).map(|p| p.mac()).unwrap_or_default(),
            mtu: cx.tables.mtu(port),
            allow_low_ports: cx.work[wi].echo_allow_low_ports,
            services: Some(&cx.tables.services),
        };
        match service::echo_in_place(&mut m, &policy) {
            service::Echo::Answer => {}
            service::Echo::Invalid => {
                c.invalid.inc();
                self.drops.push(m);
                return Did::Invalid;
            }
            service::Echo::Refused => {
                c.refused.inc();
                self.drops.push(m);
                return Did::Refused;
            }
        }
        let Some(t) = via else {
            if !self.send(cx, port, m, Tag::Echo(wi as u32)) {
                c.tx_full.inc();
                return Did::TxFull;
            }
            return Did::Port(port);
        };
        let Some(ti) = cx.tables.tunnel_of(t) else {
            // Received under tables this worker no longer has (a reload in between): the tunnel
            // index is not trusted, and an answer never leaves bare.
            c.invalid.inc();
            self.drops.push(m);
            return Did::Invalid;
        };
        let tag = Tag::EchoThrough {
            socket: wi as u32,
            tunnel: ti as u32,
        };
        if self.send_through(cx, m, ti, tag, handoff) {
            // The owner counts it sent (or refused) on the tunnel.
            c.echoed.inc();
        }
        Did::Tunnel(ti)
    }

    /// Sends `m` into tunnel `ti`, counted as `tag` once sent: encapsulated here, or handed to
    /// the owner of a sequence tunnel (then true: the owner counts it on the tunnel alone).
    fn send_through(&mut self, cx: &Ctx, m: B, ti: usize, tag: Tag, handoff: &mut [Vec<B>]) -> bool {
        let tun = &cx.tables.tunnels[ti];
        if tun.sequence {
            // Its owner numbers and sends it, in one order (docs/operating.md: GRE tunnels).
            tun.counters.workers[self.slot].handed_off.inc();
            handoff[ti].push(m);
            return true;
        }
        self.encap(cx, m, ti, None, tag);
        false
    }

    /// `tunnel`: into the flow's tunnel of `set`; a sequence tunnel's packets go to its owner.
    fn tunnel(&mut self, cx: &Ctx, set: &Backends, c: &SocketLcoreCounters, m: B, handoff: &mut [Vec<B>]) -> Did {
        // A packet that came through a tunnel keeps its record (through a hand-off too) until
        // it is encapsulated: an ICMP error about it goes back the way it came.
        let Some(ti) = self.flows.pick(set, cx.tables, &m, &self.stats.conntrack) else {
            c.invalid.inc();
            self.drops.push(m);
            return Did::Invalid;
        };
        self.send_through(cx, m, ti, Tag::Tunnel(ti as u32), handoff);
        Did::Tunnel(ti)
    }

    /// `kernel`: into the kernel interface of the port the packet came in on, on this worker's
    /// own TX queue of it, cut into fragments above the MTU (a reassembled datagram; the kernel
    /// reassembles them). A packet from inside a tunnel has no such port: dropped.
    fn kernel(&mut self, cx: &Ctx, wi: usize, c: &SocketLcoreCounters, m: B) -> Did {
        let port = m.port();
        let interface = cx.tables.kernel.as_ref().and_then(|k| k.interface(port));
        let (Some(interface), None) = (interface, m.tunnelled()) else {
            c.invalid.inc();
            if let Some(k) = cx.tables.kernel.as_ref().and_then(|k| k.counters(self.slot, port)) {
                k.invalid.inc();
            }
            self.drops.push(m);
            return Did::Invalid;
        };
        let tag = Tag::Kernel {
            socket: wi as u32,
            port,
        };
        if !self.send(cx, interface, m, tag) {
            c.invalid.inc();
            if let Some(k) = cx.tables.kernel.as_ref().and_then(|k| k.counters(self.slot, port)) {
                k.invalid.inc();
            }
            return Did::Invalid;
        }
        Did::Port(interface)
    }

    /// What the kernel wrote on kernel interface queue `q`: out of the port it mirrors, on this
    /// worker's own TX queue of that port. Its ARP requests and neighbour solicitations are
    /// recorded first, so that the answer, however quick, finds them
    /// ([`kernel::KernelPath::record_solicitation`]). Returns the packets taken.
    fn out_of_kernel(&mut self, cx: &Ctx, q: usize, buf: &mut Vec<B>) -> usize {
        let n = self.io.kernel_recv(q, buf);
        if n == 0 {
            return 0;
        }
        let interface = self.io.kernel_interface(q);
        let path = cx.tables.kernel.as_ref();
        let port = path.and_then(|k| k.mirrored(interface));
        for m in buf.drain(..) {
            match (path, port) {
                (Some(k), Some(port)) => {
                    if let Some(target) = kernel::solicitation(m.data()) {
                        k.record_solicitation(self.slot, interface, target, self.io.now());
                    }
                    self.send_whole(cx, port, m, Tag::FromKernel { port });
                }
                _ => self.drops.push(m),
            }
            self.free_if_full();
        }
        n
    }

    /// Hands sequence-tunnel packets to their owners, one burst per tunnel.
    fn hand_off(&mut self, cx: &Ctx, handoff: &mut [Vec<B>]) {
        for (ti, staged) in handoff.iter_mut().enumerate() {
            if staged.is_empty() {
                continue;
            }
            let tun = &cx.tables.tunnels[ti];
            self.io.hand_off(tun, staged);
            tun.counters.workers[self.slot].tx_full.add(staged.len() as u64);
            self.drops.append(staged);
        }
    }

    /// Owned sequence tunnel `ti`: numbers and sends what every worker handed over, in queue
    /// order. Returns the packets taken.
    fn number_and_send(&mut self, cx: &Ctx, ti: usize, buf: &mut Vec<B>, next_seq: &mut HashMap<String, u32>) -> usize {
        let tun = &cx.tables.tunnels[ti];
        let Some(n) = self.io.take_handed(tun, buf) else {
            return 0;
        };
        if n > 0 && !next_seq.contains_key(&tun.name) {
            next_seq.insert(tun.name.clone(), 1);
        }
        let Some(seq) = next_seq.get_mut(&tun.name) else {
            return n;
        };
        for m in buf.drain(..) {
            let s = *seq;
            *seq = seq.wrapping_add(1);
            self.encap(cx, m, ti, Some(s), Tag::Tunnel(ti as u32));
            self.free_if_full();
        }
        n
    }

    /// Encapsulates `m` in tunnel `ti` (sequence number `seq` on a sequence tunnel) and queues
    /// it on this worker's TX queue of the tunnel's port, counted as `tag` once sent.
    #[inline]
    fn encap(&mut self, cx: &Ctx, mut m: B, ti: usize, seq: Option<u32>, tag: Tag) {
        let c = &cx.tables.tunnels[ti].counters.workers[self.slot];
        let came_through = m.tunnelled();
        m.set_tunnelled(None);
        match tunnel::encapsulate(&mut m, &cx.tables.tunnels, ti, seq, &mut self.idents) {
            Ok(port) => {
                if !self.send_whole(cx, port, m, tag) {
                    c.tx_full.inc();
                }
            }
            // Our own echo reply, too big for the tunnel: in inner pieces that fit, each
            // encapsulated whole (as a sender behind a tunnel device sends).
            Err(tunnel::EncapError::TooBig(_)) if matches!(tag, Tag::EchoThrough { .. }) => {
                if !self.send_in_pieces(cx, m, ti, tag) {
                    c.tx_full.inc();
                }
            }
            Err(tunnel::EncapError::TooBig(inner_mtu)) => {
                // RFC 1191 / RFC 8201: DF or IPv6 inside -> ICMP Fragmentation Needed / Packet
                // Too Big with the tunnel's MTU back to the sender (never rate limited); IPv4
                // without DF -> encapsulate anyway and fragment the outer packet.
                c.too_big.inc();
                self.too_big(cx, m, ti, seq, inner_mtu, came_through);
            }
            Err(_) => {
                // Not IP, or no headroom: nothing to send.
                c.tx_full.inc();
                self.drops.push(m);
            }
        }
    }

    /// Sends our own answer `m`, too big for tunnel `ti`, in inner pieces that fit
    /// ([`fragment_into_tunnel`]); the last piece is counted as `tag`.
    #[cold]
    fn send_in_pieces(&mut self, cx: &Ctx, m: B, ti: usize, tag: Tag) -> bool {
        let (tx, drops, stats, io) = (&mut self.tx, &mut self.drops, &*self.stats, &mut self.io);
        let mut queued_last = false;
        let ok = fragment_into_tunnel(
            m,
            &cx.tables.tunnels,
            ti,
            |len| io.alloc(len),
            &mut self.idents,
            &mut self.scratch,
            &mut self.spare,
            |port, piece, last| match tx.get_mut(port as usize) {
                Some(Some(b)) => {
                    queued_last |= last;
                    if b.push(piece, if last { tag } else { Tag::Piece }) {
                        cx.flush(b, stats, drops);
                    }
                }
                _ => drops.push(piece),
            },
        );
        self.drops.append(&mut self.spare);
        ok && queued_last
    }

    /// A packet too big for tunnel `ti`'s path: an ICMP error to its sender (back through the
    /// tunnel it came through, if it did), or outer fragments.
    fn too_big(
        &mut self,
        cx: &Ctx,
        mut m: B,
        ti: usize,
        seq: Option<u32>,
        inner_mtu: u16,
        came_through: Option<Tunnelled>,
    ) {
        use crate::pipeline::icmp_error::{self, ErrorKind};
        use crate::pipeline::{IpVersion, Parsed};
        let tables = cx.tables;
        let Ok(p) = Parsed::parse(m.data(), &tables.hasher, None) else {
            self.drops.push(m);
            return;
        };
        if p.version == IpVersion::V6 && m.reassembled() && seq.is_none() {
            // Its sender sent fragments that fit; fastpathd reassembled them for the service
            // (RFC 8200 §4.5). A Packet Too Big would not help the sender (the next datagram is
            // reassembled just as big), so the datagram is cut again into inner fragments that
            // fit the tunnel, as Linux re-fragments what its conntrack reassembled.
            if !self.send_in_pieces(cx, m, ti, Tag::Tunnel(ti as u32)) {
                tables.tunnels[ti].counters.workers[self.slot].tx_full.inc();
            }
            return;
        }
        let df = p.version == IpVersion::V6
            || crate::wire::Ipv4Packet::new_checked(&m.data()[p.l3_offset as usize..]).is_ok_and(|ip| ip.dont_frag());
        if df {
            let kind = if p.version == IpVersion::V6 {
                ErrorKind::PacketTooBig { mtu: inner_mtu as u32 }
            } else {
                ErrorKind::FragmentationNeeded { mtu: inner_mtu }
            };
            let port = m.port();
            let mac = tables.ports.get(port as usize).map(|a| a.mac()).unwrap_or_default();
            if !(icmp_error::eligible(kind, &p, m.data())
                && icmp_error::build_in_place(&mut m, &p, mac, p.dst, kind, self.idents.atomic()))
            {
                self.drops.push(m);
                return;
            }
            let Some(t) = came_through else {
                self.send_whole(cx, port, m, Tag::Piece);
                return;
            };
            match tables.tunnel_of(t) {
                Some(vi) if !tables.tunnels[vi].sequence => {
                    match tunnel::encapsulate(&mut m, &tables.tunnels, vi, None, &mut self.idents) {
                        Ok(out) => {
                            self.send_whole(cx, out, m, Tag::Tunnel(vi as u32));
                        }
                        Err(_) => self.drops.push(m),
                    }
                }
                // A sequence tunnel's numbers are its owner's, and a record from other tables
                // is not trusted: dropped, never sent bare onto the underlay.
                _ => self.drops.push(m),
            }
            return;
        }
        let Ok(out_port) = tunnel::encapsulate_oversize(&mut m, &tables.tunnels, ti, seq, &mut self.idents) else {
            self.drops.push(m);
            return;
        };
        let mtu = tunnel::path_of(&tables.tunnels, ti).3;
        let has_queue = matches!(self.tx.get(out_port as usize), Some(Some(_)));
        let c = &tables.tunnels[ti].counters.workers[self.slot];
        // The outer header's own identification (IPv4 fragments keep their datagram's).
        let ident = self.idents.for_frame(m.data());
        if self.send_cut(cx, out_port, m, mtu, Tag::Tunnel(ti as u32), ident) {
            c.fragmented.inc();
        } else if has_queue {
            c.tx_full.inc();
        }
    }
}

/// The sockets worker `slot` drains in `t`, each service's cost in cycles of a `hz` clock.
fn sockets_of(slot: usize, t: &Tables, hz: u64) -> Vec<Drained> {
    let mut out = Vec::new();
    for svc in t.services.services() {
        let cost_cycles = (svc.cost_ns as u128 * hz as u128 / 1_000_000_000) as u64;
        for &i in &svc.group.sockets {
            let s = &t.sockets[i];
            if s.worker == slot {
                out.push(Drained {
                    socket: s.clone(),
                    action: svc.action.clone(),
                    cost_cycles,
                    echo_allow_low_ports: svc.echo_allow_low_ports,
                    retired_at: None,
                });
            }
        }
    }
    out
}

/// The work of generation `t` for worker `slot`, after the `retired` sockets still to drain.
fn tables_for<B>(slot: usize, hz: u64, t: Arc<Tables>, retired: Vec<Drained>) -> WorkerTables<B> {
    let mut work = retired;
    work.extend(sockets_of(slot, &t, hz));
    let handoff = (0..t.tunnels.len()).map(|_| Vec::new()).collect();
    let owned = t
        .tunnels
        .iter()
        .enumerate()
        .filter(|(_, x)| x.sequence && x.owner == slot)
        .map(|(i, _)| i)
        .collect();
    WorkerTables {
        tables: t,
        work,
        handoff,
        owned,
    }
}

/// What one [`WorkerEngine::poll`] took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Polled {
    /// Packets taken from sockets and hand-off queues (what a stop waits for).
    pub taken: usize,
    /// Packets the kernel wrote (not waited for at a stop: a kernel that keeps writing does
    /// not hold it up).
    pub from_kernel: usize,
}

/// One worker lcore's packet processing (module docs).
pub struct WorkerEngine<B: LcoreBuf, Io: WorkerIo<B>> {
    out: Out<B, Io>,
    w: WorkerTables<B>,
    /// The burst being worked on (reused).
    buf: Vec<B>,
    /// Next sequence number of each owned sequence tunnel, by name (kept across reloads).
    next_seq: HashMap<String, u32>,
    /// Cycles per second of the clock a service's cost is spun on ([`WorkerIo::spin`]).
    hz: u64,
}

impl<B: LcoreBuf, Io: WorkerIo<B>> WorkerEngine<B, Io> {
    /// The engine of the worker in socket slot `slot`, over `tables`, sending on `tx` (at most
    /// one queue per port, queue `i` counted in `stats.tx[i]`); a service's `cost_ns` is spun in
    /// cycles of a clock of `hz` cycles per second.
    pub fn new(tables: Arc<Tables>, slot: usize, tx: Vec<Io::Tx>, io: Io, stats: Arc<LcoreStats>, hz: u64) -> Self {
        stats.set_generation(tables.generation);
        let flows = Flows::new(&tables);
        stats.conntrack.capacity.set(flows.table.capacity() as u64);
        WorkerEngine {
            out: Out {
                slot,
                io,
                stats,
                tx: TxBatch::by_port(tx),
                drops: Vec::with_capacity(BURST),
                scratch: Vec::with_capacity(64),
                spare: Vec::with_capacity(64),
                idents: Idents::from_os(),
                turn: 0,
                flows,
            },
            w: tables_for(slot, hz, tables, Vec::new()),
            buf: Vec::with_capacity(BURST),
            next_seq: HashMap::new(),
            hz,
        }
    }

    /// The tables in use.
    pub fn tables(&self) -> &Arc<Tables> {
        &self.w.tables
    }

    /// The generation in use.
    pub fn generation(&self) -> u64 {
        self.w.tables.generation
    }

    /// The lcore's counters.
    pub fn stats(&self) -> &Arc<LcoreStats> {
        &self.out.stats
    }

    /// What the engine drains, sends to and allocates from.
    pub fn io(&self) -> &Io {
        &self.out.io
    }

    /// What the engine drains, sends to and allocates from, writable.
    pub fn io_mut(&mut self) -> &mut Io {
        &mut self.out.io
    }

    /// The worker's TX queue of `port`, if it sends there.
    pub fn tx_queue_mut(&mut self, port: u16) -> Option<&mut Io::Tx> {
        self.out
            .tx
            .get_mut(port as usize)
            .and_then(Option::as_mut)
            .map(TxBatch::queue_mut)
    }

    /// Sockets the worker drains (those of the current generation and retired ones not yet
    /// empty).
    pub fn sockets(&self) -> usize {
        self.w.work.len()
    }

    /// One poll: drains every socket once and runs its action, hands sequence-tunnel packets
    /// to their owners, numbers and sends what was handed to the tunnels it owns, sends out of
    /// each port what the kernel wrote, flushes every TX batch and frees what it dropped.
    /// `now` times the identifications' random increments only (its scale does not matter).
    pub fn poll(&mut self, now: Instant) -> Polled {
        self.out.idents.set_now(now);
        self.out.flows.now = now;
        // A few buckets a poll: an idle worker sweeps a table of 1M entries in well under a
        // second, a busy one touches 4 more lines per burst.
        self.out.flows.table.sweep(now, 4, &self.out.stats.conntrack);
        self.out.flows.answer(&self.out.stats.conntrack_probe, &self.w.tables);
        let (out, w, buf) = (&mut self.out, &mut self.w, &mut self.buf);
        let mut taken = 0usize;
        let mut from_kernel = 0usize;
        // Borrowed, not cloned: an Arc clone is an atomic write to a line every lcore shares.
        let cx = Ctx {
            work: &w.work,
            tables: &w.tables,
            slot: out.slot,
        };
        for wi in 0..w.work.len() {
            taken += out.drain(&cx, wi, buf, &mut w.handoff);
        }
        out.hand_off(&cx, &mut w.handoff);
        for &ti in &w.owned {
            taken += out.number_and_send(&cx, ti, buf, &mut self.next_seq);
        }
        for q in 0..out.io.kernel_queues() {
            from_kernel += out.out_of_kernel(&cx, q, buf);
        }
        out.flush_all(&cx);
        out.turn = out.turn.wrapping_add(1);
        B::free_bulk(&mut out.drops);
        Polled { taken, from_kernel }
    }

    /// Whether a socket it drains, or the hand-off queue of a sequence tunnel it owns, holds
    /// packets now (the producers' indices read afresh): the re-check of an idle worker that
    /// has said it is going to sleep, so that what an RX lcore published before it read that
    /// is not left waiting.
    pub fn has_pending(&self) -> bool {
        let t = &self.w.tables;
        self.w.work.iter().any(|d| !d.socket.is_empty())
            || self
                .w
                .owned
                .iter()
                .any(|&ti| t.tunnels[ti].handoff.as_ref().is_some_and(|q| !q.is_empty()))
    }

    /// Drops the sockets a reload removed once no RX lcore can still enqueue to them (every RX
    /// lcore has reached the generation that removed them: `reached(generation)`) and they are
    /// empty.
    pub fn forget_retired(&mut self, reached: impl Fn(u64) -> bool) {
        let io = &mut self.out.io;
        self.w.work.retain(|d| match d.retired_at {
            Some(g) => {
                let gone = reached(g) && d.socket.is_empty();
                if gone {
                    // No RX lcore enqueues to it again, so none frees what this worker took
                    // from a reclaiming queue: freed here.
                    io.release(&d.socket);
                }
                !gone
            }
            None => true,
        });
    }

    /// Adopts generation `t` (at the quiescent point between polls): sockets it no longer has
    /// are kept until drained.
    ///
    /// Every field is named below, one step each (no `..`: a new field does not compile until
    /// its step is written): the per-generation part (`w`) is rebuilt from `t`, the
    /// connection table reconfigured, everything else carried as it is.
    pub fn adopt(&mut self, t: Arc<Tables>) {
        let WorkerEngine {
            out,
            w,
            buf: _,
            next_seq: _,
            hz,
        } = self;
        // Carried: the I/O, TX batches and scratch space, the IP identification (a counter
        // that restarted would repeat IDs a destination still reassembles, RFC 6864 §4.2), the
        // round-robin turn, and the sequence tunnels' next numbers by name (`next_seq`).
        let Out {
            slot,
            io: _,
            stats,
            tx: _,
            drops: _,
            scratch: _,
            spare: _,
            idents: _,
            turn: _,
            flows,
        } = out;
        let slot = *slot;
        let next = sockets_of(slot, &t, *hz);
        let mut retired = std::mem::take(&mut w.work);
        for d in retired.iter_mut() {
            if !next.iter().any(|n| Arc::ptr_eq(&n.socket, &d.socket)) && d.retired_at.is_none() {
                d.retired_at = Some(t.generation);
            }
        }
        retired.retain(|d| d.retired_at.is_some());
        stats.set_generation(t.generation);
        // The connection table: entries kept, backends remapped by tunnel name.
        flows.adopt(&t);
        *w = tables_for(slot, *hz, t, retired);
    }

    /// Every RX lcore has exited and the sockets are drained: what this worker took from
    /// reclaiming queues is freed.
    pub fn stop(&mut self) {
        for d in &self.w.work {
            self.out.io.release(&d.socket);
        }
    }
}

/// The worker engine over heap buffers, for unit tests and the in-process corpus runner: TX
/// queues are [`Collect`](crate::tx::Collect)ors, a socket's queue must be a
/// [`SimQueue`](crate::socket::SimQueue) (its length, which the fanout reads) with the packets
/// kept here (a socket of another kind gives nothing), a sequence tunnel's hand-off queue is
/// kept here by the tunnel's name (its `handoff` field is not looked at), buffers come from the
/// heap, the cost of a service is counted, not spun.
#[derive(Debug, Default)]
pub struct HeapWorkerIo {
    /// Packets in each socket queue, by the socket's address and the RX lcore slot.
    queues: Vec<(usize, usize, std::collections::VecDeque<crate::buf::HeapBuf>)>,
    /// Packets handed to each sequence tunnel's owner, by the tunnel's name.
    handed: Vec<(String, std::collections::VecDeque<crate::buf::HeapBuf>)>,
    /// Hand-offs each take at most this many (`None`: all).
    pub handoff_room: Option<usize>,
    /// The kernel interfaces: each one's DPDK port id and what the kernel wrote on it, unread.
    pub kernel: Vec<(u16, std::collections::VecDeque<crate::buf::HeapBuf>)>,
    /// The clock ([`WorkerIo::now`]).
    pub now: Instant,
    /// Packet buffers allocated ([`WorkerIo::alloc`]).
    pub packet_buffers: u64,
    /// Cycles spun ([`WorkerIo::spin`]).
    pub spun: u64,
    /// Packets taken without being read ([`WorkerIo::dequeue_and_free`]).
    pub unread: u64,
    /// Sockets released ([`WorkerIo::release`]).
    pub released: usize,
}

impl HeapWorkerIo {
    fn queue_of(
        &mut self,
        socket: &Socket,
        slot: usize,
    ) -> Option<&mut std::collections::VecDeque<crate::buf::HeapBuf>> {
        socket.queue(slot).sim()?;
        let key = std::ptr::from_ref(socket).addr();
        let i = match self.queues.iter().position(|(s, j, _)| (*s, *j) == (key, slot)) {
            Some(i) => i,
            None => {
                self.queues.push((key, slot, Default::default()));
                self.queues.len() - 1
            }
        };
        Some(&mut self.queues[i].2)
    }

    /// Puts `p` in `socket`'s queue of RX lcore slot `slot`, counted in its [`SimQueue`] as an
    /// RX lcore's enqueue would (false, and `p` dropped, when it is full or not a `SimQueue`).
    ///
    /// [`SimQueue`]: crate::socket::SimQueue
    pub fn deliver(&mut self, socket: &Socket, slot: usize, p: crate::buf::HeapBuf) -> bool {
        if socket.queue(slot).sim().is_none_or(|q| q.push(1) == 0) {
            return false;
        }
        self.place(socket, slot, p)
    }

    /// Puts `p` in `socket`'s queue of slot `slot` behind what it holds, already counted in its
    /// [`SimQueue`](crate::socket::SimQueue) (what an RX engine's `HeapIo` took).
    pub fn place(&mut self, socket: &Socket, slot: usize, p: crate::buf::HeapBuf) -> bool {
        match self.queue_of(socket, slot) {
            Some(q) => {
                q.push_back(p);
                true
            }
            None => false,
        }
    }

    /// Hands `p` to the owner of the sequence tunnel named `tunnel` (as another lcore would).
    pub fn hand(&mut self, tunnel: &str, p: crate::buf::HeapBuf) {
        match self.handed.iter_mut().find(|(n, _)| n == tunnel) {
            Some((_, q)) => q.push_back(p),
            None => self.handed.push((tunnel.to_string(), [p].into())),
        }
    }

    /// Packets waiting for the owner of the sequence tunnel named `tunnel`.
    pub fn handed<'a>(&'a self, tunnel: &'a str) -> impl Iterator<Item = &'a crate::buf::HeapBuf> + 'a {
        self.handed
            .iter()
            .filter(move |(n, _)| n == tunnel)
            .flat_map(|(_, q)| q.iter())
    }
}

impl WorkerIo<crate::buf::HeapBuf> for HeapWorkerIo {
    type Tx = crate::tx::Collect<crate::buf::HeapBuf>;
    fn dequeue(&mut self, socket: &Socket, slot: usize, out: &mut Vec<crate::buf::HeapBuf>) -> Option<usize> {
        let room = BURST.saturating_sub(out.len());
        let q = self.queue_of(socket, slot)?;
        let n = room.min(q.len());
        out.extend(q.drain(..n));
        socket.queue(slot).sim()?.pop(n);
        Some(n)
    }
    fn dequeue_and_free(&mut self, socket: &Socket, slot: usize, max: usize) -> Option<usize> {
        let q = self.queue_of(socket, slot)?;
        let n = max.min(q.len());
        q.drain(..n);
        self.unread += n as u64;
        socket.queue(slot).sim()?.pop(n);
        Some(n)
    }
    fn consumer_len(&mut self, socket: &Socket, slot: usize) -> usize {
        socket.queue(slot).len()
    }
    fn hand_off(&mut self, tunnel: &Tunnel, pkts: &mut Vec<crate::buf::HeapBuf>) -> usize {
        let n = self.handoff_room.map_or(pkts.len(), |r| r.min(pkts.len()));
        for p in pkts.drain(..n) {
            self.hand(&tunnel.name, p);
        }
        n
    }
    fn take_handed(&mut self, tunnel: &Tunnel, out: &mut Vec<crate::buf::HeapBuf>) -> Option<usize> {
        let room = BURST.saturating_sub(out.len());
        let Some((_, q)) = self.handed.iter_mut().find(|(n, _)| *n == tunnel.name) else {
            return Some(0);
        };
        let n = room.min(q.len());
        out.extend(q.drain(..n));
        Some(n)
    }
    fn alloc(&mut self, len: usize) -> Option<crate::buf::HeapBuf> {
        self.packet_buffers += 1;
        Some(crate::buf::HeapBuf::with_room(&[], crate::buf::DEFAULT_HEADROOM, len))
    }
    fn kernel_queues(&self) -> usize {
        self.kernel.len()
    }
    fn kernel_interface(&self, q: usize) -> u16 {
        self.kernel[q].0
    }
    fn kernel_recv(&mut self, q: usize, out: &mut Vec<crate::buf::HeapBuf>) -> usize {
        let room = BURST.saturating_sub(out.len());
        let k = &mut self.kernel[q];
        let n = room.min(k.1.len());
        out.extend(k.1.drain(..n));
        for p in out.iter_mut() {
            crate::buf::LcoreBuf::set_port(p, k.0);
        }
        n
    }
    fn spin(&mut self, cycles: u64) {
        self.spun += cycles;
    }
    fn now(&mut self) -> Instant {
        self.now
    }
    fn release(&mut self, _socket: &Socket) {
        self.released += 1;
    }
}
