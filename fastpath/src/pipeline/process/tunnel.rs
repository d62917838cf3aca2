//! GRE glue: a tunnel header stripped from a packet for us, the inner packet's further passes,
//! and an answer sent back through the tunnel it came from (the tunnels themselves are
//! [`crate::pipeline::tunnel`]).

use super::{Pipeline, Step};
use crate::buf::{PacketBuf, Tunnelled};
use crate::outcome::Outcome;
use crate::pipeline::parse::Parsed;
use crate::pipeline::tunnel;
use crate::pipeline::verdict::{Instant, Verdict};

impl Pipeline {
    /// The rest of [`Pipeline::process`] once a tunnel header was stripped: the inner packet
    /// goes through again (up to the recursion limit), and an answer goes back through the
    /// tunnel it came from.
    #[inline(never)]
    pub(super) fn process_tunnelled<B: PacketBuf>(
        &mut self,
        port: u16,
        pkt: &mut B,
        now: Instant,
        first: usize,
    ) -> Verdict {
        self.inner_passes(port, pkt, now, first, 1)
    }

    /// A packet that came through tunnel `t.tunnel` earlier, `t.depth` GRE headers deep, and
    /// was held since (a datagram reassembled from fragments that arrived inside the tunnel):
    /// it goes on through the pipeline where it stopped, so its answer goes back through the
    /// tunnel and the nesting limit counts the headers stripped before reassembly too. A
    /// tunnel index from another generation is not trusted: `gre_unknown_tunnel`.
    pub fn process_after_tunnel<B: PacketBuf>(
        &mut self,
        port: u16,
        pkt: &mut B,
        now: Instant,
        t: Tunnelled,
    ) -> Verdict {
        pkt.set_tunnelled(None);
        match self.tables.tunnel_of(t) {
            Some(via) => self.inner_passes(port, pkt, now, via, t.depth as usize),
            None => Verdict::Drop(Outcome::GreUnknownTunnel),
        }
    }

    /// The tunnel record for a packet that came through tunnel `via` at `depth`.
    fn tunnelled(&self, via: usize, depth: usize) -> Tunnelled {
        Tunnelled {
            tunnel: via as u16,
            depth: depth as u8,
            generation: self.tables.generation as u8,
        }
    }

    /// Passes over the inner packet of tunnel `via`, `depth` headers deep, until a verdict. A
    /// packet handed on (to a socket or the reassembler) carries the tunnel with it; an answer
    /// goes back through it.
    fn inner_passes<B: PacketBuf>(
        &mut self,
        port: u16,
        pkt: &mut B,
        now: Instant,
        first: usize,
        depth: usize,
    ) -> Verdict {
        let mut via = first;
        let mut depth = depth;
        loop {
            match self.process_once(port, pkt, now, depth) {
                Step::Done(v @ (Verdict::Deliver | Verdict::Reassemble { .. })) => {
                    pkt.set_tunnelled(Some(self.tunnelled(via, depth)));
                    return v;
                }
                Step::Done(v) => return self.answer_through(v, Some(via), pkt),
                Step::Decapsulated(t) => {
                    via = t;
                    depth += 1;
                }
            }
        }
    }

    /// An answer about a packet that came through tunnel `t` (a reassembly's Time Exceeded)
    /// goes back through it.
    pub(super) fn answer_through_tunnelled<B: PacketBuf>(
        &mut self,
        v: Verdict,
        t: Option<Tunnelled>,
        pkt: &mut B,
    ) -> Verdict {
        match t {
            Some(t) if self.tables.tunnel_of(t).is_some() => self.answer_through(v, Some(t.tunnel as usize), pkt),
            // Never bare onto the underlay: an answer for a tunnel we no longer know is dropped.
            Some(_) => Verdict::Drop(v.outcome()),
            None => v,
        }
    }

    /// An answer to a packet that came through a tunnel goes back through it (through the
    /// owning worker for a sequence tunnel).
    fn answer_through<B: PacketBuf>(&mut self, v: Verdict, via: Option<usize>, pkt: &mut B) -> Verdict {
        let (Verdict::Transmit(o), Some(t)) = (v, via) else {
            return v;
        };
        let tunnels = &self.tables.tunnels;
        if tunnels[t].sequence {
            // Its numbers belong to its owning worker: two senders would put them on the wire
            // out of order, and the receiver drops every late one.
            return Verdict::HandOff {
                tunnel: t as u16,
                outcome: o,
            };
        }
        match tunnel::encapsulate(pkt, tunnels, t, None, &mut self.idents) {
            Ok(port) => {
                tunnels[t].counters.rx[self.fanout.slot].encap.inc();
                Verdict::TransmitOn { port, outcome: o }
            }
            // Our own answer larger than the tunnel's path (the echo of a reassembled
            // datagram): the RX engine cuts it into pieces that fit, each encapsulated.
            Err(tunnel::EncapError::TooBig(_)) => Verdict::TransmitThrough {
                tunnel: t as u16,
                outcome: o,
            },
            // Never sent bare onto the underlay.
            Err(_) => {
                tunnels[t].counters.rx[self.fanout.slot].too_big.inc();
                Verdict::Drop(o)
            }
        }
    }

    /// GRE to a local address: strip it if a tunnel matches (see [`tunnel::decapsulate`]).
    pub(super) fn decapsulate<B: PacketBuf>(&mut self, pkt: &mut B, p: &Parsed, depth: usize) -> Step {
        if !tunnel::may_nest(depth) {
            return Step::Done(Verdict::Drop(Outcome::GreRecursion));
        }
        let t = &self.tables.tunnels;
        let slot = self.fanout.slot;
        match tunnel::decapsulate(
            pkt,
            p.l3_offset as usize,
            p.l4_offset as usize,
            p.src,
            p.dst,
            t,
            &mut self.gre_seq,
        ) {
            tunnel::Decap::Inner { tunnel } => {
                t[tunnel].counters.rx[slot].decap.inc();
                // The NIC hashed and checked the outer headers: the inner flow (fanout here, a
                // tunnel choice on a worker) must hash in software, or every flow of a tunnel
                // hashes alike, and the inner UDP checksum must be checked in software.
                pkt.clear_rx_offload_flags();
                Step::Decapsulated(tunnel)
            }
            tunnel::Decap::Unknown => Step::Done(Verdict::Drop(Outcome::GreUnknownTunnel)),
            tunnel::Decap::BadChecksum => Step::Done(Verdict::Drop(Outcome::GreBadChecksum)),
            tunnel::Decap::SeqOld { tunnel } => {
                t[tunnel].counters.rx[slot].seq_dropped.inc();
                Step::Done(Verdict::Drop(Outcome::GreSeqDropped))
            }
            tunnel::Decap::Unsupported => Step::Done(Verdict::Drop(Outcome::Unhandled)),
            tunnel::Decap::Malformed => Step::Done(Verdict::Drop(Outcome::Malformed)),
        }
    }
}
