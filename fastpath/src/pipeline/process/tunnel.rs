//! GRE glue: a tunnel header stripped from a packet for us, the inner packet's further passes,
//! and an answer sent back through the tunnel it came from (the tunnels themselves are
//! [`crate::pipeline::tunnel`]).

use super::{Pipeline, Step};
use crate::buf::PacketBuf;
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
        let mut via = first;
        let mut depth = 1;
        loop {
            match self.process_once(port, pkt, now, depth) {
                Step::Done(v) => return self.answer_through(v, Some(via), pkt),
                Step::Decapsulated(t) => {
                    via = t;
                    depth += 1;
                }
            }
        }
    }

    /// An answer to a packet that came through a tunnel goes back through it (a sequence
    /// tunnel's numbers belong to its owning worker, so answers from RX lcores leave plain).
    fn answer_through<B: PacketBuf>(&mut self, v: Verdict, via: Option<usize>, pkt: &mut B) -> Verdict {
        let (Verdict::Transmit(o), Some(t)) = (v, via) else {
            return v;
        };
        let tunnels = &self.tables.tunnels;
        if tunnels[t].sequence {
            return v;
        }
        self.ident = self.ident.wrapping_add(1);
        match tunnel::encapsulate(pkt, tunnels, t, None, self.ident) {
            Ok(port) => {
                tunnels[t].counters.rx[self.fanout.slot].encap.inc();
                Verdict::TransmitOn { port, outcome: o }
            }
            Err(_) => {
                tunnels[t].counters.rx[self.fanout.slot].too_big.inc();
                v
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
