//! The TCP fast paths, [`Pipeline::tcp4`] and [`Pipeline::tcp6`], and their cold reset.

use super::icmp::xorshift;
use super::{frame_end, link_layer_refusal_view, link_layer_unicast_in, Pipeline};
use crate::buf::PacketBuf;
use crate::outcome::Outcome;
use crate::pipeline::icmp_error::Limit;
use crate::pipeline::parse::Parsed;
use crate::pipeline::service::Hit;
use crate::pipeline::verdict::{Instant, Verdict};
use crate::pipeline::PortView;
use crate::pipeline::{source, tcp_reset};
use crate::wire::{self, IpProtocol, TcpFlags};
use std::net::IpAddr;

impl Pipeline {
    /// [`Pipeline::udp4`] for TCP: an untagged IPv4 datagram with a 20-byte header, not a
    /// fragment, of TCP — a TCP service's traffic, the kernel path's `tcp:N`, and the segments
    /// to a port without a service (a SYN flood), whose reset the limiter decides in place.
    ///
    /// `None` (not of that shape; nothing changed): [`Pipeline::process_general`] decides.
    /// Every verdict, packet change and state change here is the general path's for the same
    /// frame: `tcp_tests.rs` holds them equal.
    ///
    /// Why: a SYN flood to a port without a service went through the general parse and the
    /// `Parsed` in memory, then `tcp_closed` (a call) read it back; it ran well behind the IPv4
    /// plain drop, which does less only by stopping at the address (benches/NOTES.md, "The IPv6
    /// and TCP paths, step by step").
    ///
    /// `view` is the port's [`PortView`], taken once a burst.
    #[inline(always)]
    pub(super) fn tcp4<B: PacketBuf>(
        &mut self,
        view: &PortView,
        port: u16,
        pkt: &mut B,
        now: Instant,
    ) -> Option<Verdict> {
        let frame = pkt.data();
        let h: &[u8; 54] = frame.first_chunk()?;
        // EtherType IPv4, version 4 with a 20-byte header, neither MF nor an offset, TCP: the
        // common parser's checks (the reserved flag is not looked at, as there).
        if wire::be16(h, 12) != 0x0800 || h[14] != 0x45 || wire::be16(h, 20) & 0x3fff != 0 || h[23] != IpProtocol::TCP.0
        {
            return None;
        }
        // The datagram within the frame, its end a frame offset (u16); RFC 9293 §3.1: a data
        // offset of at least 5 words, the header within the segment.
        let total = wire::be16(h, 16);
        let end = 14 + total as usize;
        let header = (h[46] >> 4) as usize * 4;
        if frame_end(frame) < end || header < 20 || header + 20 > total as usize {
            return None;
        }
        // A group frame declines here (`link_layer_unicast_in`): none goes on below.
        if !link_layer_unicast_in(view.mac_word, h.first_chunk()?) {
            return link_layer_refusal_view(view, h.first_chunk()?);
        }
        if !pkt.ip_checksum_ok(|| wire::checksum::verify(&h[14..34])) {
            return Some(Verdict::Drop(Outcome::Malformed));
        }
        let (src, dst) = (wire::ipv4_at(h, 26), wire::ipv4_at(h, 30));
        if let Some(o) = source::v4_to_local_view(view, dst, src, || self.v4_to_local_listed(port, dst, src)) {
            return Some(Verdict::Drop(o));
        }
        if view.filtered {
            if let Some(o) = self.filter_v4(port, src) {
                return Some(Verdict::Drop(o));
            }
        }
        // The rest read where it is used: held from above, LLVM spilled it to the stack on
        // every packet, and a SYN flood's packets use only the destination port and flags.
        let t = &*self.tables;
        let Some(hit) = t.services.lookup_tcp4(wire::bytes2(h, 36), dst) else {
            if view.kernel {
                // `[kernel] punt` takes it (`punt_port`'s decision): the kernel's own
                // connections, as a service's packets.
                if let Some(hit) = self.kernel_takes_tcp(h, 36) {
                    if !self.punt_admit(now) {
                        return Some(Verdict::Drop(Outcome::KernelLimited));
                    }
                    return Some(self.tcp4_service(hit, pkt, end));
                }
            }
            // RFC 9293 §3.10.7.1: a segment for a port nobody listens on gets a reset, if the
            // limits allow one (`tcp_closed`'s decision from the values in registers). Link-layer
            // padding is not trimmed for a drop: only what is kept needs its true length.
            let rng = &mut self.rng;
            return Some(
                match self
                    .tcp_reset
                    .decide_with(now, TcpFlags(h[47]), || IpAddr::V4(src), || xorshift(rng))
                {
                    tcp_reset::ResetDecision::Ineligible => Verdict::Drop(Outcome::NoService),
                    tcp_reset::ResetDecision::Suppressed(Limit::Global) => {
                        self.reset_counters.limited[0][Limit::Global.index()].inc();
                        Verdict::Drop(Outcome::TcpResetSuppressed)
                    }
                    tcp_reset::ResetDecision::Suppressed(l) => {
                        self.reset_counters.limited_cold(0, l);
                        Verdict::Drop(Outcome::TcpResetSuppressed)
                    }
                    tcp_reset::ResetDecision::Send => self.tcp4_reset(pkt, port, end),
                },
            );
        };
        // A service's segment (not one punted above): its own filter, then its source's budget.
        if self.tables.filters.any_service {
            if let Some(o) = self.service_filter_frame(hit.svc(), pkt.data(), false) {
                return Some(Verdict::Drop(o));
            }
        }
        if self.tables.source_limit.applies(hit.svc()) {
            if let Some(o) = self.source_limit_frame(pkt.data(), false, now) {
                return Some(Verdict::Drop(o));
            }
        }
        // Then the TCP state table: a segment of no flow it saw begin goes no further.
        if self.tables.tcp_state.applies(hit.svc()) {
            if let Some(o) = self.tcp_state_frame(pkt.data(), false, now) {
                return Some(Verdict::Drop(o));
            }
        }
        Some(self.tcp4_service(hit, pkt, end))
    }

    /// [`Pipeline::tcp4`]'s segment for service `svc` (a frame the fast path took, its datagram
    /// ending at frame offset `end`): trimmed of link-layer padding (see `after_parse`), then to
    /// a socket.
    #[inline(always)]
    fn tcp4_service<B: PacketBuf>(&mut self, hit: Hit, pkt: &mut B, end: usize) -> Verdict {
        pkt.trim_to(end);
        if let Some(s) = self.fanout.choose_fast_single(hit.single()) {
            return self.deliver(s);
        }
        let Some(h) = pkt.data().first_chunk() else {
            return Verdict::Drop(Outcome::Malformed);
        };
        let p = tcp4_parsed(h);
        self.fan_out(hit.svc(), &p, pkt.rss_hash())
    }

    /// [`Pipeline::tcp4`] for IPv6: an untagged IPv6 packet whose next header is TCP (no
    /// extension header), to one of the port's unicast addresses; `None` otherwise (a
    /// multicast destination included: TCP has none, the general path says what it is).
    ///
    /// `view` is the port's [`PortView`], taken once a burst.
    #[inline(always)]
    pub(super) fn tcp6<B: PacketBuf>(
        &mut self,
        view: &PortView,
        port: u16,
        pkt: &mut B,
        now: Instant,
    ) -> Option<Verdict> {
        let frame = pkt.data();
        let h: &[u8; 74] = frame.first_chunk()?;
        if wire::be16(h, 12) != 0x86dd || h[14] >> 4 != 6 || h[20] != IpProtocol::TCP.0 {
            return None;
        }
        let payload = wire::be16(h, 18);
        let end = 14 + 40 + payload as usize;
        let header = (h[66] >> 4) as usize * 4;
        if frame_end(frame) < end || header < 20 || header > payload as usize {
            return None;
        }
        // A group destination (RFC 4291 §2.7: its first byte is 0xff), tested on the byte: as
        // `Ipv6Addr::is_multicast` on the address LLVM loaded it in four pieces and spilled them.
        if h[38] == 0xff {
            return None;
        }
        // A group frame declines here (`link_layer_unicast_in`): none goes on below.
        if !link_layer_unicast_in(view.mac_word, h.first_chunk()?) {
            return link_layer_refusal_view(view, h.first_chunk()?);
        }
        let dst = wire::ipv6_at(h, 38);
        let src = wire::ipv6_at(h, 22);
        if let Some(o) = source::v6_to_local_view(view, &dst, &src, || self.v6_to_local_listed(port, &dst, &src)) {
            return Some(Verdict::Drop(o));
        }
        if view.filtered {
            if let Some(o) = self.filter_v6(port, &src) {
                return Some(Verdict::Drop(o));
            }
        }
        // As in `tcp4`: the rest read where it is used, the padding trimmed only for what is kept.
        let t = &*self.tables;
        let Some(hit) = t.services.lookup_tcp6(wire::bytes2(h, 56), &dst) else {
            if view.kernel {
                if let Some(hit) = self.kernel_takes_tcp(h, 56) {
                    if !self.punt_admit(now) {
                        return Some(Verdict::Drop(Outcome::KernelLimited));
                    }
                    return Some(self.tcp6_service(hit, pkt, end));
                }
            }
            // RFC 9293 §3.10.7.1, as in `tcp4`.
            let rng = &mut self.rng;
            return Some(
                match self
                    .tcp_reset
                    .decide_with(now, TcpFlags(h[67]), || IpAddr::V6(src), || xorshift(rng))
                {
                    tcp_reset::ResetDecision::Ineligible => Verdict::Drop(Outcome::NoService),
                    tcp_reset::ResetDecision::Suppressed(Limit::Global) => {
                        self.reset_counters.limited[1][Limit::Global.index()].inc();
                        Verdict::Drop(Outcome::TcpResetSuppressed)
                    }
                    tcp_reset::ResetDecision::Suppressed(l) => {
                        self.reset_counters.limited_cold(1, l);
                        Verdict::Drop(Outcome::TcpResetSuppressed)
                    }
                    tcp_reset::ResetDecision::Send => self.tcp6_reset(pkt, port, end),
                },
            );
        };
        // A service's segment (not one punted above): its own filter, then its source's budget.
        if self.tables.filters.any_service {
            if let Some(o) = self.service_filter_frame(hit.svc(), pkt.data(), true) {
                return Some(Verdict::Drop(o));
            }
        }
        if self.tables.source_limit.applies(hit.svc()) {
            if let Some(o) = self.source_limit_frame(pkt.data(), true, now) {
                return Some(Verdict::Drop(o));
            }
        }
        // Then the TCP state table: a segment of no flow it saw begin goes no further.
        if self.tables.tcp_state.applies(hit.svc()) {
            if let Some(o) = self.tcp_state_frame(pkt.data(), true, now) {
                return Some(Verdict::Drop(o));
            }
        }
        Some(self.tcp6_service(hit, pkt, end))
    }

    /// [`Pipeline::tcp4_service`] for IPv6.
    #[inline(always)]
    fn tcp6_service<B: PacketBuf>(&mut self, hit: Hit, pkt: &mut B, end: usize) -> Verdict {
        pkt.trim_to(end);
        if let Some(s) = self.fanout.choose_fast_single(hit.single()) {
            return self.deliver(s);
        }
        let Some(h) = pkt.data().first_chunk() else {
            return Verdict::Drop(Outcome::Malformed);
        };
        let p = tcp6_parsed(h);
        self.fan_out(hit.svc(), &p, pkt.rss_hash())
    }

    /// [`Pipeline::tcp4`]'s reset, the limits having let it go: the parse result from the
    /// frame (read again), then `tcp_closed`'s send.
    #[cold]
    #[inline(never)]
    fn tcp4_reset<B: PacketBuf>(&mut self, pkt: &mut B, port: u16, end: usize) -> Verdict {
        pkt.trim_to(end);
        let Some(h) = pkt.data().first_chunk() else {
            return Verdict::Drop(Outcome::NoService);
        };
        let p = tcp4_parsed(h);
        self.tcp_reset_send(pkt, &p, port)
    }

    /// [`Pipeline::tcp6`]'s reset, as [`Pipeline::tcp4_reset`].
    #[cold]
    #[inline(never)]
    fn tcp6_reset<B: PacketBuf>(&mut self, pkt: &mut B, port: u16, end: usize) -> Verdict {
        pkt.trim_to(end);
        let Some(h) = pkt.data().first_chunk() else {
            return Verdict::Drop(Outcome::NoService);
        };
        let p = tcp6_parsed(h);
        self.tcp_reset_send(pkt, &p, port)
    }

    /// The kernel path's service if `[kernel] punt` takes the TCP segment whose destination
    /// port is at `at` in `h` and flags at `at + 11` ([`crate::pipeline::kernel::KernelPath::takes_tcp`]; no service
    /// having the port). Out of line, the port read here: inline, it stayed live
    /// past the service lookup and LLVM spilled it on every segment of a SYN flood; a method,
    /// so the tables are found through `self` here (passed, LLVM kept them on the stack for
    /// the call on every segment).
    #[inline(never)]
    fn kernel_takes_tcp(&self, h: &[u8], at: usize) -> Option<Hit> {
        let dport = wire::be16(h.get(..at + 2)?, at);
        let flags = TcpFlags(*h.get(at + 11)?);
        self.tables
            .kernel
            .as_ref()
            .filter(|k| k.takes_tcp(dport, flags))
            .and_then(|k| self.tables.services.hit_of(k.service))
    }
}

/// The parse result of a frame [`Pipeline::tcp4`] took, from its fixed offsets.
#[inline(always)]
fn tcp4_parsed(h: &[u8; 54]) -> Parsed {
    let (src, dst) = (wire::ipv4_at(h, 26), wire::ipv4_at(h, 30));
    let (ttl, ports, flags, total) = (h[22], (wire::be16(h, 34), wire::be16(h, 36)), h[47], wire::be16(h, 16));
    Parsed::untagged_tcp4(src, dst, ttl, ports, flags, total)
}

/// The parse result of a frame [`Pipeline::tcp6`] took, from its fixed offsets.
#[inline(always)]
fn tcp6_parsed(h: &[u8; 74]) -> Parsed {
    let (src, dst) = (wire::ipv6_at(h, 22), wire::ipv6_at(h, 38));
    let (hop_limit, ports, flags, payload) = (h[21], (wire::be16(h, 54), wire::be16(h, 56)), h[67], wire::be16(h, 18));
    Parsed::untagged_v6(IpProtocol::TCP, src, dst, hop_limit, ports, Some(flags), payload)
}
