//! The IPv6/UDP fast path: [`Pipeline::udp6`] and its cold Port Unreachable.

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
    /// [`Pipeline::udp4`] for IPv6: an untagged IPv6 packet whose next header is UDP (no
    /// extension header, so no fragment), to one of the port's unicast addresses — a service's
    /// traffic and the closed-port flood. Its checks read fixed offsets and keep the addresses
    /// in registers; what it cannot settle in place (a fanout decision, an ICMPv6 error to
    /// build) goes on to the same stages as from the general path, with the [`Parsed`] the
    /// parsers would have made.
    ///
    /// `None` (not of that shape, or to a multicast address, which the general path's NDP and
    /// group rules decide; nothing changed): [`Pipeline::process_general`] decides. Every
    /// verdict, packet change and state change here is the general path's for the same frame:
    /// `udp6_tests.rs` holds them equal.
    ///
    /// Why: through the general path an IPv6 frame is parsed by a call (`common_v6_into`) into
    /// the 64-byte `Parsed`, then `refusal` and `local_delivery_v6` (two more calls) each look
    /// the destination up among the port's addresses again; the closed port over IPv6 ran well
    /// behind the IPv4 one (benches/NOTES.md, "The IPv6 and TCP paths, step by step").
    ///
    /// `view` is the port's [`PortView`], taken once a burst.
    #[inline(always)]
    pub(super) fn udp6<B: PacketBuf>(
        &mut self,
        view: &PortView,
        port: u16,
        pkt: &mut B,
        now: Instant,
    ) -> Option<Verdict> {
        let frame = pkt.data();
        let h: &[u8; 62] = frame.first_chunk()?;
        // EtherType IPv6, version 6, next header UDP (RFC 8200 §3: an extension header would
        // stand there first; the general parser walks those).
        if wire::be16(h, 12) != 0x86dd || h[14] >> 4 != 6 || h[20] != IpProtocol::UDP.0 {
            return None;
        }
        // The packet within the frame, its end a frame offset (u16); RFC 768: 8 <= UDP length
        // <= the payload.
        let payload = wire::be16(h, 18);
        let end = 14 + 40 + payload as usize;
        let udp_len = wire::be16(h, 58) as usize;
        if frame_end(frame) < end || udp_len < 8 || udp_len > payload as usize {
            return None;
        }
        // A group destination (all-nodes, a solicited-node group): the general path's. Tested
        // on the first byte (RFC 4291 §2.7), as in `tcp6`.
        if h[38] == 0xff {
            return None;
        }
        // From here the frame is the general path's common frame: its verdicts, in its order.
        // A group frame declines here (`link_layer_unicast_in`): none goes on below.
        if !link_layer_unicast_in(view.mac_word, h.first_chunk()?) {
            return link_layer_refusal_view(view, h.first_chunk()?);
        }
        // Link-layer padding is not part of the packet (see `after_parse`).
        pkt.trim_to(end);
        // The frame read again after the trim (its bytes did not move), as in `udp4`: the
        // addresses and ports where they are used, not held across the trim (LLVM spilled
        // them, and byte-swapped the ports for the cold paths, on every packet).
        let Some(h) = pkt.data().first_chunk::<62>() else {
            return Some(Verdict::Drop(Outcome::Malformed));
        };
        let dst = wire::ipv6_at(h, 38);
        let src = wire::ipv6_at(h, 22);
        // Not multicast, so ours only if it is one of the port's addresses (`ipv6_local_for`).
        // Then the source-validation rule (`pipeline/source.rs`), for a service's traffic and
        // a closed port's alike; not a Neighbor Solicitation, so `::` is martian too. Not a
        // group frame (declined above).
        if let Some(o) = source::v6_to_local_view(view, &dst, &src, || self.v6_to_local_listed(port, &dst, &src)) {
            return Some(Verdict::Drop(o));
        }
        // The port-wide prefix filter (`pipeline/filter.rs`), before any other work.
        if view.filtered {
            if let Some(o) = self.filter_v6(port, &src) {
                return Some(Verdict::Drop(o));
            }
        }
        let t = &*self.tables;
        let Some(hit) = t.services.lookup_udp6(wire::bytes2(h, 56), &dst) else {
            if view.kernel {
                if let Some(k) = t
                    .kernel
                    .as_ref()
                    .filter(|k| k.rules.takes(IpProtocol::UDP, wire::be16(h, 56)))
                {
                    // `[kernel] punt` takes it (`punt_port`'s decision), as in `udp4`.
                    let (svc, budget) = (k.service, k.budget);
                    if !self.punt.admit(budget, now) {
                        return Some(Verdict::Drop(Outcome::KernelLimited));
                    }
                    if let Some(s) = self.fanout.choose_fast_single(t.services.single_socket(svc)) {
                        return Some(self.deliver(s));
                    }
                    let p = udp6_parsed(h);
                    return Some(self.fan_out(svc, &p, pkt.rss_hash()));
                }
            }
            // RFC 4443 §3.1 (code 4): a port nobody listens on. `icmp_error`'s decision from the
            // addresses in registers: the parse result is written only for an error sent.
            let no_service = Verdict::Drop(Outcome::NoService);
            let kind = icmp_error::ErrorKind::PortUnreachable;
            if t.icmp.build_first {
                let p = udp6_parsed(h);
                return Some(self.icmp_error(pkt, &p, port, kind, no_service, now));
            }
            // RFC 4443 §2.4(e.3-e.6) hold: the destination is unicast, and the source rule
            // refused a group frame and every source that is not one node.
            let rng = &mut self.rng;
            let decision = self.icmp.decide_udp6_port_unreachable(now, &src, || xorshift(rng));
            return Some(match decision {
                icmp_error::Decision::Ineligible => no_service,
                icmp_error::Decision::Suppressed(l) => {
                    self.count_suppressed(IpVersion::V6, l);
                    Verdict::Drop(Outcome::IcmpSuppressed)
                }
                // (A zero UDP checksum is refused there, RFC 8200 §8.1, as on the general path.)
                icmp_error::Decision::Send => self.udp6_port_unreachable(pkt, port, no_service),
            });
        };
        if t.filters.any_service {
            if let Some(o) = self.service_filter_frame(hit.svc(), pkt.data(), true) {
                return Some(Verdict::Drop(o));
            }
        }
        if t.source_limit.applies(hit.svc()) {
            if let Some(o) = self.source_limit_frame(pkt.data(), true, now) {
                return Some(Verdict::Drop(o));
            }
        }
        // `service_socket`'s two steps, written out as in `udp4`.
        if let Some(s) = self.fanout.choose_fast_single(hit.single()) {
            return Some(self.deliver(s));
        }
        let p = udp6_parsed(h);
        Some(self.fan_out(hit.svc(), &p, pkt.rss_hash()))
    }

    /// [`Pipeline::udp6`]'s Port Unreachable, the limits having let it go: the parse result
    /// from the frame (read again, so the fast path keeps fewer values live), then the error
    /// built in place (its UDP checksum checked first, a zero one refused: RFC 8200 §8.1).
    #[cold]
    fn udp6_port_unreachable<B: PacketBuf>(&mut self, pkt: &mut B, port: u16, no_service: Verdict) -> Verdict {
        let Some(h) = pkt.data().first_chunk::<62>() else {
            return no_service;
        };
        let p = udp6_parsed(h);
        self.icmp_error_send(pkt, &p, port, icmp_error::ErrorKind::PortUnreachable, no_service)
    }
}

/// The parse result of a frame [`Pipeline::udp6`] took, from its fixed offsets.
#[inline(always)]
fn udp6_parsed(h: &[u8; 62]) -> Parsed {
    let (src, dst) = (wire::ipv6_at(h, 22), wire::ipv6_at(h, 38));
    let (hop_limit, ports, payload) = (h[21], (wire::be16(h, 54), wire::be16(h, 56)), wire::be16(h, 18));
    Parsed::untagged_v6(IpProtocol::UDP, src, dst, hop_limit, ports, None, payload)
}
