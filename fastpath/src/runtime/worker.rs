//! The worker lcore: drains the service sockets assigned to its slot and runs their actions
//! (one method each: [`Out::sink`], [`Out::echo`], [`Out::tunnel`]), sending on its own TX queue
//! of each port; owns the sequence tunnels assigned to its slot and numbers what the other
//! workers hand it. Every answer goes out through one helper, [`Out::send`], which cuts it into
//! fragments when it is larger than the port's MTU.
//!
//! Stopping: RX lcores stop first and say so; workers then drain their sockets to empty, run
//! the action on every packet, and stop. So at a clean stop no packet is left in a socket.

use super::{handoff_ring, ring, spin, IdlePolicy, Polls, RunControl, TscClock};
use crate::buf::{PacketBuf, Tunnelled};
use crate::dpdk::{Mbuf, Mempool, RxQueue, TxQueue};
use crate::generation::Published;
use crate::ident::Idents;
use crate::pipeline::{kernel, service, tunnel, Action, Backends, Tables};
use crate::socket::{Socket, SocketLcoreCounters};
use crate::stats::LcoreStats;
use crate::tx::{fragment_into_tunnel, needs_fragmenting, queue_in_fragments, TxBatch, BURST};
use std::collections::HashMap;
use std::sync::Arc;

/// A socket a worker drains, with the action to run on its packets.
struct Drained {
    socket: Arc<Socket>,
    action: Action,
    /// Busy-wait per packet, in TSC cycles.
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

type Batch = TxBatch<TxQueue, Mbuf, Tag>;

/// A worker lcore (module docs).
pub struct WorkerLcore {
    slot: usize,
    tsc_hz: u64,
    /// Mbufs for the fragments of answers larger than the MTU.
    pool: Arc<Mempool>,
    tx: Vec<TxQueue>,
    /// This worker's RX queue of each kernel interface (`pipeline/kernel.rs`).
    kernel_rx: Vec<RxQueue>,
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

/// What counting a sent packet needs: the work list (echo tags) and the tables (tunnel tags).
struct Ctx<'a> {
    work: &'a [Drained],
    tables: &'a Tables,
    slot: usize,
}

impl Ctx<'_> {
    /// Sends `b`, counting each packet on its socket or tunnel.
    #[inline]
    fn flush(&self, b: &mut Batch, stats: &LcoreStats, drops: &mut Vec<Mbuf>) {
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

/// The worker's sending side: its TX batches, what it frees, its scratch space.
struct Out {
    slot: usize,
    pool: Arc<Mempool>,
    stats: Arc<LcoreStats>,
    tx: Vec<Option<Batch>>,
    drops: Vec<Mbuf>,
    /// Fragments of an answer being sent (reused: no allocation per packet).
    scratch: Vec<Mbuf>,
    /// What such an answer leaves to free while its pieces are queued (reused likewise).
    spare: Vec<Mbuf>,
    /// The IP identification of what this worker originates ([`crate::ident`]).
    idents: Idents,
    /// Advanced every poll: the RX lcore slot whose queue of each socket is drained first, so
    /// that no RX lcore's queue is always served first (round robin over a socket's queues).
    turn: usize,
    /// Read when the kernel solicits a neighbour, to time the answers it may take.
    clock: TscClock,
}

impl Out {
    /// Queues `m` on this worker's TX queue of `port`, first cut into fragments when it is
    /// larger than the port's MTU (only the last piece is counted as `tag`). False when there is
    /// no queue there or no buffer for the fragments: `m` is freed and nothing counted.
    #[inline]
    fn send(&mut self, cx: &Ctx, port: u16, m: Mbuf, tag: Tag) -> bool {
        let mtu = cx.tables.mtu(port);
        if !needs_fragmenting(&m, mtu) {
            return self.send_whole(cx, port, m, tag);
        }
        let ident = self.idents.for_frame(m.data());
        self.send_cut(cx, port, m, mtu, tag, ident)
    }

    /// Queues `m` as it is.
    #[inline]
    fn send_whole(&mut self, cx: &Ctx, port: u16, m: Mbuf, tag: Tag) -> bool {
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
    fn send_cut(&mut self, cx: &Ctx, port: u16, m: Mbuf, mtu: u16, tag: Tag, ident: u32) -> bool {
        let Some(Some(b)) = self.tx.get_mut(port as usize) else {
            self.drops.push(m);
            return false;
        };
        let (pool, stats) = (&self.pool, &*self.stats);
        queue_in_fragments(
            b,
            m,
            mtu,
            (tag, Tag::Piece),
            |len| pool.alloc().filter(|x| x.tailroom() >= len),
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
            Mbuf::free_bulk(&mut self.drops);
        }
    }

    /// Drains socket `wi` of the work list once (a burst from each of its queues, round robin)
    /// and runs its action on each packet. Returns the packets taken.
    fn drain(&mut self, cx: &Ctx, wi: usize, buf: &mut Vec<Mbuf>, handoff: &mut [Vec<Mbuf>]) -> usize {
        let d = &cx.work[wi];
        if let Action::Sink = d.action {
            return self.sink(d);
        }
        let queues = d.socket.queues().len();
        let mut total = 0;
        for k in 0..queues {
            let j = if queues == 1 { 0 } else { (self.turn + k) % queues };
            let Some(r) = ring(&d.socket, j) else {
                continue;
            };
            let n = r.dequeue(buf);
            if queues > 1 {
                d.socket.publish_depth(j, r.consumer_len());
            }
            if n == 0 {
                continue;
            }
            total += n;
            let c = &d.socket.counters.workers[self.slot];
            c.dequeued.add(n as u64);
            for m in buf.drain(..) {
                spin(d.cost_cycles);
                match &d.action {
                    // Drained by `sink` without this loop; handled the same way all the same.
                    Action::Sink => {
                        c.sunk.inc();
                        self.drops.push(m);
                    }
                    Action::Echo => self.echo(cx, wi, c, m, handoff),
                    Action::Tunnel(set) => self.tunnel(cx, set, c, m, handoff),
                    Action::Kernel => self.kernel(cx, wi, c, m),
                }
                self.free_if_full();
            }
        }
        d.socket.consumer_update_pressure();
        total
    }

    /// `sink`: consumed unread, freed straight from the ring, or left to the RX lcore that
    /// filled the queue to free (see `MbufRing`: the headers and the queue's slots stay in that
    /// RX lcore's cache). A burst from each queue, round robin.
    #[inline]
    fn sink(&mut self, d: &Drained) -> usize {
        let queues = d.socket.queues().len();
        let mut total = 0;
        for k in 0..queues {
            let j = if queues == 1 { 0 } else { (self.turn + k) % queues };
            let Some(r) = ring(&d.socket, j) else {
                continue;
            };
            // A sink without a cost takes all that is ready (one store of the ring's index for
            // a publication of several bursts, `rx::HOLD_BURSTS`); one with a cost a burst at a
            // time, so that its backlog stays what it has not yet spent the cost on.
            let n = r.dequeue_and_free(if d.cost_cycles == 0 { usize::MAX } else { BURST });
            if queues > 1 {
                d.socket.publish_depth(j, r.consumer_len());
            }
            total += n;
        }
        if total > 0 {
            spin(d.cost_cycles.saturating_mul(total as u64));
            let c = &d.socket.counters.workers[self.slot];
            c.dequeued.add(total as u64);
            c.sunk.add(total as u64);
        }
        d.socket.consumer_update_pressure();
        total
    }

    /// `echo`: the datagram back to its sender, from the port it came in on, or back through
    /// the tunnel it came through (a sequence tunnel's owner numbers it).
    fn echo(&mut self, cx: &Ctx, wi: usize, c: &SocketLcoreCounters, mut m: Mbuf, handoff: &mut [Vec<Mbuf>]) {
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
                return;
            }
            service::Echo::Refused => {
                c.refused.inc();
                self.drops.push(m);
                return;
            }
        }
        let Some(t) = via else {
            if !self.send(cx, port, m, Tag::Echo(wi as u32)) {
                c.tx_full.inc();
            }
            return;
        };
        let Some(ti) = cx.tables.tunnel_of(t) else {
            // Received under tables this worker no longer has (a reload in between): the tunnel
            // index is not trusted, and an answer never leaves bare.
            c.invalid.inc();
            self.drops.push(m);
            return;
        };
        let tag = Tag::EchoThrough {
            socket: wi as u32,
            tunnel: ti as u32,
        };
        if self.send_through(cx, m, ti, tag, handoff) {
            // The owner counts it sent (or refused) on the tunnel.
            c.echoed.inc();
        }
    }

    /// Sends `m` into tunnel `ti`, counted as `tag` once sent: encapsulated here, or handed to
    /// the owner of a sequence tunnel (then true: the owner counts it on the tunnel alone).
    fn send_through(&mut self, cx: &Ctx, m: Mbuf, ti: usize, tag: Tag, handoff: &mut [Vec<Mbuf>]) -> bool {
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
    fn tunnel(&mut self, cx: &Ctx, set: &Backends, c: &SocketLcoreCounters, m: Mbuf, handoff: &mut [Vec<Mbuf>]) {
        // A packet that came through a tunnel keeps its record (through a hand-off too) until
        // it is encapsulated: an ICMP error about it goes back the way it came.
        let Some(ti) = pick_tunnel(set, cx.tables, &m) else {
            c.invalid.inc();
            self.drops.push(m);
            return;
        };
        self.send_through(cx, m, ti, Tag::Tunnel(ti as u32), handoff);
    }

    /// `kernel`: into the kernel interface of the port the packet came in on, on this worker's
    /// own TX queue of it, cut into fragments above the MTU (a reassembled datagram; the kernel
    /// reassembles them). A packet from inside a tunnel has no such port: dropped.
    fn kernel(&mut self, cx: &Ctx, wi: usize, c: &SocketLcoreCounters, m: Mbuf) {
        let port = m.port();
        let interface = cx.tables.kernel.as_ref().and_then(|k| k.interface(port));
        let (Some(interface), None) = (interface, m.tunnelled()) else {
            c.invalid.inc();
            if let Some(k) = cx.tables.kernel.as_ref().and_then(|k| k.counters(self.slot, port)) {
                k.invalid.inc();
            }
            self.drops.push(m);
            return;
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
        }
    }

    /// What the kernel wrote on kernel interface queue `q`: out of the port it mirrors, on this
    /// worker's own TX queue of that port. Its ARP requests and neighbour solicitations are
    /// recorded first, so that the answer, however quick, finds them
    /// ([`kernel::KernelPath::record_solicitation`]). Returns the packets taken.
    fn out_of_kernel(&mut self, cx: &Ctx, q: &mut RxQueue, buf: &mut Vec<Mbuf>) -> usize {
        let n = q.recv(buf);
        if n == 0 {
            return 0;
        }
        let path = cx.tables.kernel.as_ref();
        let port = path.and_then(|k| k.mirrored(q.port()));
        for m in buf.drain(..) {
            match (path, port) {
                (Some(k), Some(port)) => {
                    if let Some(target) = kernel::solicitation(m.data()) {
                        k.record_solicitation(self.slot, q.port(), target, self.clock.now());
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
    fn hand_off(&mut self, cx: &Ctx, handoff: &mut [Vec<Mbuf>]) {
        for (ti, staged) in handoff.iter_mut().enumerate() {
            if staged.is_empty() {
                continue;
            }
            let c = &cx.tables.tunnels[ti].counters.workers[self.slot];
            if let Some(r) = handoff_ring(&cx.tables.tunnels[ti]) {
                r.enqueue(staged);
            }
            c.tx_full.add(staged.len() as u64);
            self.drops.append(staged);
        }
    }

    /// Owned sequence tunnel `ti`: numbers and sends what every worker handed over, in ring
    /// order. Returns the packets taken.
    fn number_and_send(
        &mut self,
        cx: &Ctx,
        ti: usize,
        buf: &mut Vec<Mbuf>,
        next_seq: &mut HashMap<String, u32>,
    ) -> usize {
        let tun = &cx.tables.tunnels[ti];
        let Some(r) = handoff_ring(tun) else {
            return 0;
        };
        let n = r.dequeue(buf);
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
    fn encap(&mut self, cx: &Ctx, mut m: Mbuf, ti: usize, seq: Option<u32>, tag: Tag) {
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
                // Issue 8 / RFC 1191 / RFC 8201: DF or IPv6 inside -> ICMP Fragmentation Needed /
                // Packet Too Big with the tunnel's MTU back to the sender (never rate limited);
                // IPv4 without DF -> encapsulate anyway and fragment the outer packet.
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
    fn send_in_pieces(&mut self, cx: &Ctx, m: Mbuf, ti: usize, tag: Tag) -> bool {
        let (tx, drops, stats, pool) = (&mut self.tx, &mut self.drops, &*self.stats, &self.pool);
        let mut queued_last = false;
        let ok = fragment_into_tunnel(
            m,
            &cx.tables.tunnels,
            ti,
            |len| pool.alloc().filter(|x| x.tailroom() >= len),
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
        mut m: Mbuf,
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

/// The tunnel of `set` for this packet's flow (hash of the inner packet), if it is IP.
fn pick_tunnel(set: &Backends, t: &Tables, m: &Mbuf) -> Option<usize> {
    if set.tunnels.is_empty() || set.table.is_empty() {
        return None;
    }
    let p = crate::pipeline::Parsed::parse(m.data(), &t.hasher, m.rss_hash()).ok()?;
    set.pick(p.hash)
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
                    echo_allow_low_ports: svc.echo_allow_low_ports,
                    retired_at: None,
                });
            }
        }
    }
    out
}

impl WorkerTables {
    /// Drops the sockets a reload removed once no RX lcore can still enqueue to them and they
    /// are empty.
    fn forget_retired(&mut self, control: &RunControl) {
        self.work.retain(|d| match d.retired_at {
            Some(g) => {
                let gone = control.rx_all_reached(g) && d.socket.is_empty();
                if gone {
                    // No RX lcore enqueues to it again, so none frees what this worker took
                    // from a reclaiming ring: freed here.
                    for q in d.socket.queues() {
                        if let Some(r) = q.ring() {
                            r.release_rest(false);
                        }
                    }
                }
                !gone
            }
            None => true,
        });
    }
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
            tx,
            kernel_rx: Vec::new(),
            published,
            stats,
            idle,
        }
    }

    /// The work of generation `t`, after the `retired` sockets still to drain.
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

    /// Also polls these RX queues of kernel interfaces (one per interface), sending what the
    /// kernel wrote out of the port each mirrors.
    pub fn with_kernel_rx(mut self, queues: Vec<RxQueue>) -> Self {
        self.kernel_rx = queues;
        self
    }

    /// Adopts generation `t`: sockets it no longer has are kept until drained.
    fn adopt(&self, w: WorkerTables, t: Arc<Tables>) -> WorkerTables {
        let next = sockets_of(self.slot, &t, self.tsc_hz);
        let mut retired = w.work;
        for d in retired.iter_mut() {
            if !next.iter().any(|n| Arc::ptr_eq(&n.socket, &d.socket)) && d.retired_at.is_none() {
                d.retired_at = Some(t.generation);
            }
        }
        retired.retain(|d| d.retired_at.is_some());
        self.stats.set_generation(t.generation);
        self.tables_for(t, retired)
    }

    /// Runs until a stop is requested, every RX lcore has stopped and its sockets are empty.
    pub fn run(mut self, control: &RunControl) {
        let first = self.published.current();
        self.stats.set_generation(first.generation);
        let mut w = self.tables_for(first, Vec::new());
        let mut out = Out {
            slot: self.slot,
            pool: self.pool.clone(),
            stats: self.stats.clone(),
            tx: TxBatch::by_port(std::mem::take(&mut self.tx)),
            drops: Vec::with_capacity(BURST),
            scratch: Vec::with_capacity(64),
            spare: Vec::with_capacity(64),
            idents: Idents::from_os(),
            turn: 0,
            clock: TscClock::new(self.tsc_hz),
        };
        let mut buf: Vec<Mbuf> = Vec::with_capacity(BURST);
        // Next sequence number of each owned sequence tunnel, by name (kept across reloads).
        let mut next_seq: HashMap<String, u32> = HashMap::new();
        let mut polls = Polls::default();
        let _running = super::quiesce::Running::new(&self.stats);
        loop {
            // Read before draining: if RX had already stopped, an empty pass means truly empty.
            let finishing = control.stop_requested() && control.rx_all_exited();
            let t0 = polls.start(&self.stats);
            // TSC ticks for nanoseconds: only the scale of the random increments follows it.
            out.idents.set_now(crate::pipeline::Instant(t0));
            let mut got = 0usize;
            let mut from_kernel = 0usize;
            {
                // Borrowed, not cloned: an Arc clone is an atomic write to a line every lcore
                // shares.
                let cx = Ctx {
                    work: &w.work,
                    tables: &w.tables,
                    slot: self.slot,
                };
                for wi in 0..w.work.len() {
                    got += out.drain(&cx, wi, &mut buf, &mut w.handoff);
                }
                out.hand_off(&cx, &mut w.handoff);
                for &ti in &w.owned {
                    got += out.number_and_send(&cx, ti, &mut buf, &mut next_seq);
                }
                // Not counted in `got`: a kernel that keeps writing does not hold up the stop.
                for q in self.kernel_rx.iter_mut() {
                    from_kernel += out.out_of_kernel(&cx, q, &mut buf);
                }
                out.flush_all(&cx);
                out.turn = out.turn.wrapping_add(1);
            }
            Mbuf::free_bulk(&mut out.drops);
            w.forget_retired(control);
            if let Some(t) = self.published.newer_than(w.tables.generation) {
                w = self.adopt(w, t);
            }
            if got == 0 && finishing {
                break;
            }
            polls.end(t0, got + from_kernel, &self.stats, &self.idle);
        }
        // Every RX lcore has exited: what this worker took from reclaiming rings is freed here
        // (before the exit's count of mbufs in use).
        for d in &w.work {
            for q in d.socket.queues() {
                if let Some(r) = q.ring() {
                    r.release_rest(false);
                }
            }
        }
        polls.finish(&self.stats);
    }
}
