//! Transmit batching, shared by every loop that sends (the RX engine, the worker lcores) and
//! free of DPDK: a [`Transmit`] queue is a DPDK TX queue in the daemon and a plain collector in
//! tests and the in-process corpus runner.
//!
//! A loop owns one [`TxBatch`] per port it can send on (its own TX queue of that port: no TX
//! queue is ever shared, so no TX lock exists). Each packet carries a tag that says what to count
//! once the queue took it or refused it, so counting is decided at the flush, where the queue's
//! answer is known.

use crate::buf::{LcoreBuf, PacketBuf};
use crate::ident::Idents;
use crate::pipeline::reasm::{fragment_v4, fragment_v6};
use crate::pipeline::tunnel::{self, Tunnel};
use crate::stats::LcoreStats;
use crate::wire::{EtherType, EthernetFrame};

/// Packets per RX and TX burst (the DPDK convention, and testpmd's default).
pub const BURST: usize = 32;

/// A transmit queue owned by one lcore.
pub trait Transmit<B> {
    /// The port the queue sends on.
    fn port(&self) -> u16;
    /// Sends as many packets from the front of `pkts` as the queue takes; they leave `pkts`, the
    /// refused ones stay in it, in order. Returns how many were sent.
    fn send(&mut self, pkts: &mut Vec<B>) -> usize;
}

/// Packets waiting for one TX queue, with a tag each (what to count once it is sent or not).
pub struct TxBatch<Q, B, T> {
    queue: Q,
    /// Index of this queue in the lcore's `stats.tx`.
    stats_index: usize,
    pkts: Vec<B>,
    tags: Vec<T>,
}

impl<Q: Transmit<B>, B: LcoreBuf, T: Copy> TxBatch<Q, B, T> {
    /// One batch per port, indexed by port id (`None` for a port without a queue here); queue
    /// `i` of `tx` is counted in `stats.tx[i]`.
    pub fn by_port(tx: Vec<Q>) -> Vec<Option<Self>> {
        let ports = tx.iter().map(|q| q.port() as usize + 1).max().unwrap_or(0);
        let mut by_port: Vec<Option<Self>> = (0..ports).map(|_| None).collect();
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

    /// Queues `pkt` counted as `tag`; true when the batch is a burst long and should be flushed.
    #[inline(always)]
    #[must_use]
    pub fn push(&mut self, pkt: B, tag: T) -> bool {
        self.pkts.push(pkt);
        self.tags.push(tag);
        self.pkts.len() >= BURST
    }

    /// Sends the batch; `counted(tag, sent)` is called once per packet. Unsent packets go to
    /// `drops` to be freed.
    #[inline(always)]
    pub fn flush(&mut self, stats: &LcoreStats, drops: &mut Vec<B>, counted: impl FnMut(T, bool)) {
        // The empty test inline: every poll flushes every port's batch, most of them empty
        // under a flood that sends nothing (out of line, each was a call: benches/NOTES.md,
        // "Per-burst reads and the closed port's decision").
        if !self.pkts.is_empty() {
            self.send_batch(stats, drops, counted);
        }
    }

    /// [`TxBatch::flush`] of a batch that holds packets.
    #[inline(never)]
    fn send_batch(&mut self, stats: &LcoreStats, drops: &mut Vec<B>, mut counted: impl FnMut(T, bool)) {
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

    /// The queue.
    pub fn queue_mut(&mut self) -> &mut Q {
        &mut self.queue
    }

    /// Sends a whole burst as it is, bypassing the batch (plain forward mode); counts the
    /// packets sent (not their bytes: testpmd's io mode does not either). The refused stay in
    /// `burst`.
    #[inline]
    pub fn send_now(&mut self, burst: &mut Vec<B>, stats: &LcoreStats) -> usize {
        let sent = self.queue.send(burst);
        stats.tx[self.stats_index].packets.add(sent as u64);
        sent
    }
}

/// Whether a frame's IP packet is larger than `mtu`.
#[inline]
pub fn needs_fragmenting<B: PacketBuf>(m: &B, mtu: u16) -> bool {
    // 14 bytes of Ethernet plus up to two VLAN tags never count against the MTU.
    m.len() > mtu as usize + 14 && {
        let l2 = EthernetFrame::new_checked(m.data())
            .map(|f| f.header_len())
            .unwrap_or(14);
        m.len() - l2 > mtu as usize
    }
}

/// Splits the IP datagram in `m` into fragments of at most `mtu` bytes, each in a buffer from
/// `alloc`, appended to `out`. False when it could not (not IP, or no buffer).
pub fn fragment_frame<B: PacketBuf>(
    m: &B,
    mtu: u16,
    mut alloc: impl FnMut(usize) -> Option<B>,
    ident: u32,
    out: &mut Vec<B>,
) -> bool {
    let mut emit = |b: B| out.push(b);
    let r = match EthernetFrame::new_checked(m.data()).map(|f| f.ethertype()) {
        Ok(EtherType::IPV4) => fragment_v4(m.data(), mtu as usize, &mut alloc, &mut emit),
        Ok(EtherType::IPV6) => fragment_v6(m.data(), mtu as usize, ident, &mut alloc, &mut emit),
        _ => return false,
    };
    r.is_ok()
}

/// Queues `m`, an answer larger than `mtu` (see [`needs_fragmenting`]; e.g. the echo of a
/// reassembled datagram), on `b` cut into fragments from `alloc`: only the last piece is counted
/// as `tag`, the others as `piece`. `flush` is called whenever the batch is a burst long; `m`
/// itself goes to `drops`. False (and nothing queued) when it could not be cut.
#[allow(clippy::too_many_arguments)]
pub fn queue_in_fragments<Q: Transmit<B>, B: LcoreBuf, T: Copy>(
    b: &mut TxBatch<Q, B, T>,
    m: B,
    mtu: u16,
    (tag, piece): (T, T),
    alloc: impl FnMut(usize) -> Option<B>,
    ident: u32,
    scratch: &mut Vec<B>,
    drops: &mut Vec<B>,
    mut flush: impl FnMut(&mut TxBatch<Q, B, T>, &mut Vec<B>),
) -> bool {
    let ok = fragment_frame(&m, mtu, alloc, ident, scratch);
    drops.push(m);
    let n = scratch.len();
    if !ok || n == 0 {
        drops.append(scratch);
        return false;
    }
    for (i, p) in scratch.drain(..).enumerate() {
        if b.push(p, if i + 1 == n { tag } else { piece }) {
            flush(b, drops);
        }
    }
    true
}

/// Sends our own answer `m`, too big for tunnel `t`'s path, as a sender behind a tunnel device
/// would: cut into inner fragments that fit ([`tunnel::inner_mtu`], IPv6 ones identified from
/// `idents`, per destination), each encapsulated whole, so the far end needs no outer reassembly (which Open
/// vSwitch's user-space datapath, for one, does not do). `each(port, piece, last)` queues every
/// encapsulated piece; `m` and what cannot be cut or encapsulated go to `drops`. False when
/// nothing could be sent.
#[allow(clippy::too_many_arguments)]
pub fn fragment_into_tunnel<B: PacketBuf>(
    m: B,
    tunnels: &[Tunnel],
    t: usize,
    alloc: impl FnMut(usize) -> Option<B>,
    idents: &mut Idents,
    scratch: &mut Vec<B>,
    drops: &mut Vec<B>,
    mut each: impl FnMut(u16, B, bool),
) -> bool {
    let ident = idents.for_frame(m.data());
    let ok = fragment_frame(&m, tunnel::inner_mtu(tunnels, t), alloc, ident, scratch);
    drops.push(m);
    if !ok || scratch.is_empty() {
        drops.append(scratch);
        return false;
    }
    let n = scratch.len();
    let mut all = true;
    for (i, mut piece) in scratch.drain(..).enumerate() {
        match tunnel::encapsulate(&mut piece, tunnels, t, None, idents) {
            Ok(port) => each(port, piece, i + 1 == n),
            Err(_) => {
                all = false;
                drops.push(piece);
            }
        }
    }
    all
}

/// A [`Transmit`] queue that takes everything (or, with a limit, up to `room` packets per send)
/// and keeps what it took: for tests, benchmarks and the in-process corpus runner.
#[derive(Debug, Default)]
pub struct Collect<B> {
    /// The port it stands for.
    pub port: u16,
    /// Packets taken per send at most (`None`: all).
    pub room: Option<usize>,
    /// Everything sent, in order (cleared by the owner when it likes).
    pub sent: Vec<B>,
    /// Whether to keep what was sent (`false`: drop it at once).
    pub keep: bool,
}

impl<B> Collect<B> {
    /// A queue on `port` that takes everything and keeps it.
    pub fn new(port: u16) -> Self {
        Collect {
            port,
            room: None,
            sent: Vec::new(),
            keep: true,
        }
    }
}

impl<B> Transmit<B> for Collect<B> {
    fn port(&self) -> u16 {
        self.port
    }
    fn send(&mut self, pkts: &mut Vec<B>) -> usize {
        let n = self.room.map_or(pkts.len(), |r| r.min(pkts.len()));
        if self.keep {
            self.sent.extend(pkts.drain(..n));
        } else {
            pkts.drain(..n);
        }
        n
    }
}
