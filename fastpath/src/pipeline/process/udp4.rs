//! The IPv4/UDP fast path: [`Pipeline::udp4`] and its cold Port Unreachable.

use super::icmp::xorshift;
use super::{frame_end, link_layer_refusal_view, link_layer_unicast_in, Pipeline};
use crate::buf::PacketBuf;
use crate::outcome::Outcome;
use crate::pipeline::parse::{IpVersion, Parsed};
use crate::pipeline::verdict::{Instant, Verdict};
use crate::pipeline::PortView;
use crate::pipeline::{icmp_error, source};
use crate::wire::{self, IpProtocol};

impl Pipeline {
    /// The fast path of [`Pipeline::process`]: an untagged IPv4 datagram with a 20-byte header,
    /// not a fragment, of UDP, as received — a service's traffic, and the closed-port and
    /// not-local floods. Its checks read fixed offsets and keep every value in registers; a
    /// packet for a service whose socket the burst already knows has room is staged without
    /// anything written but the fanout's count. What it cannot settle in place (a fanout
    /// decision, an ICMP error) goes on to the same stages as from the general path, with the
    /// [`Parsed`] the parsers would have made.
    ///
    /// `None` (the frame is not of that shape; nothing was read but its first 42 bytes, nothing
    /// changed): [`Pipeline::process_general`] decides. Every verdict, packet change and state
    /// change here is the general path's for the same frame: a test holds them equal.
    ///
    /// Why a path of its own (no work before the decision, applied to delivery): through the
    /// general parser the frame became a 64-byte `Parsed` in memory, stored field by field and
    /// read back by each stage, and the verdict travelled through a `Step`; on the open-port
    /// benchmark that plumbing was a large share of the pipeline's instructions
    /// (benches/NOTES.md, "The IPv4/UDP fast path").
    ///
    /// `view` is the port's [`PortView`], taken once a burst.
    #[inline(always)]
    pub(super) fn udp4<B: PacketBuf>(
        &mut self,
        view: &PortView,
        port: u16,
        pkt: &mut B,
        now: Instant,
    ) -> Option<Verdict> {
        let frame = pkt.data();
        let h: &[u8; 42] = frame.first_chunk()?;
        // EtherType IPv4, version 4 with a 20-byte header, neither MF nor an offset, UDP: the
        // common parser's checks (the reserved flag is not looked at, as there).
        if wire::be16(h, 12) != 0x0800 || h[14] != 0x45 || wire::be16(h, 20) & 0x3fff != 0 || h[23] != IpProtocol::UDP.0
        {
            return None;
        }
        // The datagram within the frame, its end a frame offset (u16); RFC 768: 8 <= UDP length
        // <= what the datagram holds.
        let total = wire::be16(h, 16);
        let end = 14 + total as usize;
        let udp_len = wire::be16(h, 38) as usize;
        if frame_end(frame) < end || udp_len < 8 || udp_len + 20 > total as usize {
            return None;
        }
        // From here the frame is the general path's common frame: its verdicts, in its order.
        // A group frame declines here (`link_layer_unicast_in`): none goes on below.
        if !link_layer_unicast_in(view.mac_word, h.first_chunk()?) {
            return link_layer_refusal_view(view, h.first_chunk()?);
        }
        if !pkt.ip_checksum_ok(|| wire::checksum::verify(&h[14..34])) {
            return Some(Verdict::Drop(Outcome::Malformed));
        }
        let (src, dst) = (wire::ipv4_at(h, 26), wire::ipv4_at(h, 30));
        // Link-layer padding is not part of the datagram (see `after_parse`).
        pkt.trim_to(end);
        // The frame read again after the trim (its bytes did not move): the ports where they
        // are used, not held in registers LLVM spilled on every packet (as in `tcp4`).
        let Some(h) = pkt.data().first_chunk::<42>() else {
            return Some(Verdict::Drop(Outcome::Malformed));
        };
        // Ours, then the source-validation rule (`pipeline/source.rs`), for a service's traffic
        // and a closed port's alike; not a group frame (declined above).
        if let Some(o) = source::v4_to_local_view(view, dst, src, || self.v4_to_local_listed(port, dst, src)) {
            return Some(Verdict::Drop(o));
        }
        // The port-wide prefix filter (`pipeline/filter.rs`), before any other work.
        if view.filtered {
            if let Some(o) = self.filter_v4(port, src) {
                return Some(Verdict::Drop(o));
            }
        }
        let t = &*self.tables;
        let Some(hit) = t.services.lookup_udp4(wire::bytes2(h, 36), dst) else {
            if view.kernel {
                // The port in host order only here (its byte swap was an instruction on every
                // packet to a closed port).
                let dport = wire::be16(h, 36);
                if let Some(k) = t.kernel.as_ref().filter(|k| k.rules.takes(IpProtocol::UDP, dport)) {
                    // `[kernel] punt` takes it (`punt_port`'s decision): into the kernel path's
                    // sockets, as a service's packet, without the general parse: a flood aimed
                    // at the kernel path is received faster (benches/NOTES.md, "The kernel
                    // path's punt decided on the fast path").
                    let (svc, budget) = (k.service, k.budget);
                    if !self.punt.admit(budget, now) {
                        return Some(Verdict::Drop(Outcome::KernelLimited));
                    }
                    if let Some(s) = self.fanout.choose_fast_single(t.services.single_socket(svc)) {
                        return Some(self.deliver(s));
                    }
                    let p = udp4_parsed(h);
                    return Some(self.fan_out(svc, &p, pkt.rss_hash()));
                }
            }
            // RFC 1122 §4.1.3.1: a port nobody listens on. `icmp_error`'s decision from the
            // addresses in registers: the parse result is written only for an error sent.
            let no_service = Verdict::Drop(Outcome::NoService);
            let kind = icmp_error::ErrorKind::PortUnreachable;
            if t.icmp.build_first {
                let p = udp4_parsed(h);
                return Some(self.icmp_error(pkt, &p, port, kind, no_service, now));
            }
            // A group frame declined above; the source admitted by `v4_to_local`.
            let rng = &mut self.rng;
            let decision = self.icmp.decide_udp4_port_unreachable(now, src, dst, || xorshift(rng));
            return Some(match decision {
                icmp_error::Decision::Ineligible => no_service,
                icmp_error::Decision::Suppressed(l) => {
                    self.count_suppressed(IpVersion::V4, l);
                    Verdict::Drop(Outcome::IcmpSuppressed)
                }
                icmp_error::Decision::Send => self.udp4_port_unreachable(pkt, port, no_service),
            });
        };
        if t.filters.any_service {
            if let Some(o) = self.service_filter_frame(hit.svc(), pkt.data(), false) {
                return Some(Verdict::Drop(o));
            }
        }
        if t.source_limit.applies(hit.svc()) {
            if let Some(o) = self.source_limit_frame(pkt.data(), false, now) {
                return Some(Verdict::Drop(o));
            }
        }
        // `service_socket`'s two steps, written out again: through one shared helper taking the
        // fanout call as a closure LLVM inlined the pipeline differently and every path paid for
        // it (benches/NOTES.md, "The IPv4/UDP fast path").
        if let Some(s) = self.fanout.choose_fast_single(hit.single()) {
            return Some(self.deliver(s));
        }
        let p = udp4_parsed(h);
        Some(self.fan_out(hit.svc(), &p, pkt.rss_hash()))
    }

    /// [`Pipeline::udp4`]'s Port Unreachable, the limits having let it go: the parse result
    /// from the frame (the fast path's, read again so the open path keeps fewer values live),
    /// then the error built in place.
    #[cold]
    fn udp4_port_unreachable<B: PacketBuf>(&mut self, pkt: &mut B, port: u16, no_service: Verdict) -> Verdict {
        let Some(h) = pkt.data().first_chunk::<42>() else {
            return no_service;
        };
        let p = udp4_parsed(h);
        self.icmp_error_send(pkt, &p, port, icmp_error::ErrorKind::PortUnreachable, no_service)
    }
}

/// The parse result of a frame [`Pipeline::udp4`] took, from its fixed offsets.
#[inline(always)]
fn udp4_parsed(h: &[u8; 42]) -> Parsed {
    let (src, dst) = (wire::ipv4_at(h, 26), wire::ipv4_at(h, 30));
    let (ttl, ports, total) = (h[22], (wire::be16(h, 34), wire::be16(h, 36)), wire::be16(h, 16));
    Parsed::untagged_udp4(src, dst, ttl, ports, total)
}
