//! Local delivery: what is done with a parsed packet, reassembly and GRE first, then the host's
//! own services (echo, neighbor discovery), then the configured services and their sockets.

use super::{Pipeline, Step};
use crate::buf::PacketBuf;
use crate::outcome::Outcome;
use crate::pipeline::fanout::{Choice, HashOnDemand};
use crate::pipeline::parse::{IpVersion, Parsed};
use crate::pipeline::tables::PortAddrs;
use crate::pipeline::verdict::{Instant, Verdict};
use crate::pipeline::{arp, echo, icmp_error, ndp, source, tcp_reset};
use crate::wire::icmpv6::Icmpv6Message;
use crate::wire::IpProtocol;
use std::net::{IpAddr, Ipv6Addr};

impl Pipeline {
    /// The rest of [`Pipeline::process_once`] once the packet is parsed: local delivery, the
    /// services, the ICMP errors.
    #[inline(always)]
    pub(super) fn after_parse<B: PacketBuf>(
        &mut self,
        port: u16,
        pkt: &mut B,
        parsed: &Parsed,
        now: Instant,
        depth: usize,
    ) -> Step {
        let Some(local) = self.tables.ports.get(port as usize) else {
            return Step::Done(Verdict::Drop(Outcome::Unhandled));
        };
        let kernel = local.kernel && depth == 0;
        // Link-layer padding past the IP datagram is not part of it: drop it so every later
        // stage (and every answer built in place) sees the datagram only.
        let end = parsed.ip_end as usize;
        pkt.trim_to(end);
        // The source-validation rule (`pipeline/source.rs`) before anything acts on a packet for
        // us: reassembly, GRE, echo, NDP, the services, the ICMP errors.
        if let Some(v) = refusal(local, pkt.data(), parsed) {
            return Step::Done(v);
        }
        // Then the port-wide prefix filter (`pipeline/filter.rs`), also for what a tunnel held.
        if self.tables.filters.port_filtered(port) {
            if let Some(o) = self.filter_general(port, local, pkt.data(), parsed) {
                return Step::Done(Verdict::Drop(o));
            }
        }
        if parsed.fragment.is_some() && is_local(local, parsed.dst) {
            // RFC 791 §3.2 / RFC 8200 §4.5: fragments are reassembled before anything else
            // looks at the datagram (service lookup, echo, GRE).
            return Step::Done(Verdict::Reassemble { l3: parsed.l3_offset });
        }
        if parsed.protocol == IpProtocol::GRE && parsed.fragment.is_none() && is_local(local, parsed.dst) {
            return self.decapsulate(pkt, parsed, depth);
        }
        let v = local_delivery(local, parsed, pkt);
        if v == Verdict::Drop(Outcome::Unhandled) && matches!(parsed.protocol, IpProtocol::ICMP | IpProtocol::ICMPV6) {
            // RFC 1191 / RFC 8201: an error about a backend's answer is the backend's to act on.
            if let Some(v) = self.icmp_to_backend(pkt, parsed, now) {
                return Step::Done(v);
            }
        }
        if kernel && v != Verdict::Drop(Outcome::NoService) {
            // The kernel path (`pipeline/kernel.rs`): neighbour advertisements for the kernel's
            // own solicitations; with `unhandled`, what no stage handles.
            if let Some(k) = self.punt_other(port, parsed, pkt, v, now) {
                return Step::Done(k);
            }
        }
        if v == Verdict::Drop(Outcome::Unhandled)
            && parsed.version == IpVersion::V4
            && self
                .tables
                .ports
                .get(port as usize)
                .is_some_and(|l| is_local(l, parsed.dst))
            && !matches!(
                parsed.protocol,
                IpProtocol::ICMP | IpProtocol::UDP | IpProtocol::TCP | IpProtocol::GRE
            )
        {
            // RFC 1122 §3.2.2.1: a protocol the box does not deliver.
            return Step::Done(self.icmp_error(pkt, parsed, port, icmp_error::ErrorKind::ProtocolUnreachable, v, now));
        }
        if v != Verdict::Drop(Outcome::NoService) {
            return Step::Done(v);
        }
        let v = self.service_socket(parsed, pkt.data(), || pkt.rss_hash(), now);
        if v == Verdict::Drop(Outcome::NoService) && kernel {
            // A port no service has: to the kernel if `[kernel] punt` lists it (or `unhandled`),
            // instead of a reset or a Port Unreachable.
            if let Some(k) = self.punt_port(parsed, pkt.rss_hash(), now) {
                return Step::Done(k);
            }
        }
        if v == Verdict::Drop(Outcome::NoService) && parsed.protocol == IpProtocol::TCP {
            // RFC 9293 §3.10.7.1: a segment for a port nobody listens on gets a reset.
            return Step::Done(self.tcp_closed(pkt, parsed, port, now));
        }
        if v == Verdict::Drop(Outcome::NoService) && parsed.protocol == IpProtocol::UDP {
            // RFC 1122 §4.1.3.1: UDP to a port nobody listens on. (`no_service` spelled out, not
            // `v`: the compiler then knows it and does not assemble it per packet.)
            let no_service = Verdict::Drop(Outcome::NoService);
            return Step::Done(self.icmp_error(
                pkt,
                parsed,
                port,
                icmp_error::ErrorKind::PortUnreachable,
                no_service,
                now,
            ));
        }
        Step::Done(v)
    }

    /// A UDP or TCP packet for a local address: its service's socket, or `no_service`.
    /// The service socket for a packet local delivery left to the services. Finding no service
    /// (a closed port: a flood's case) is a lookup inlined into the pipeline; the
    /// fanout to a socket is a call of its own, so the closed-port path carries none of its
    /// registers or code.
    #[inline(always)]
    fn service_socket(
        &mut self,
        p: &Parsed,
        frame: &[u8],
        nic_hash: impl FnOnce() -> Option<u32>,
        now: Instant,
    ) -> Verdict {
        let Some((_, dport)) = p.ports else {
            return Verdict::Drop(Outcome::NoService);
        };
        let Some(hit) = self.tables.services.lookup(p.protocol, dport, &p.dst) else {
            return Verdict::Drop(Outcome::NoService);
        };
        if self.tables.filters.any_service {
            if let Some(o) = self.service_filter(hit.svc(), p.src) {
                return Verdict::Drop(o);
            }
        }
        if self.tables.source_limit.applies(hit.svc()) {
            if let Some(o) = self.source_limit(p.src, now) {
                return Verdict::Drop(o);
            }
        }
        if p.protocol == IpProtocol::TCP && self.tables.tcp_state.applies(hit.svc()) {
            if let Some(o) = self.tcp_state_parsed(p, frame, now) {
                return Verdict::Drop(o);
            }
        }
        // One socket with room to spare (the common case): no decision to make, no call.
        if let Some(s) = self.fanout.choose_fast_single(hit.single()) {
            return self.deliver(s);
        }
        // The NIC's hash (a read of the mbuf's flags) only for a packet that has a service.
        self.fan_out(hit.svc(), p, nic_hash())
    }

    /// A TCP segment for a local port with no service: a reset if the limits allow one
    /// ([`tcp_reset`]), decided before anything is summed or built.
    #[inline(never)]
    fn tcp_closed<B: PacketBuf>(&mut self, pkt: &mut B, p: &Parsed, port: u16, now: Instant) -> Verdict {
        let no_service = Verdict::Drop(Outcome::NoService);
        let Some(flags) = p.tcp_flags else {
            return no_service;
        };
        let rng = &mut self.rng;
        let fam = tcp_reset::family(p);
        match self.tcp_reset.decide(now, &p.src, flags, || super::icmp::xorshift(rng)) {
            tcp_reset::ResetDecision::Ineligible => no_service,
            tcp_reset::ResetDecision::Suppressed(l) => {
                self.reset_counters.limited[fam][l.index()].inc();
                Verdict::Drop(Outcome::TcpResetSuppressed)
            }
            tcp_reset::ResetDecision::Send => self.tcp_reset_send(pkt, p, port),
        }
    }

    /// The limits let a reset go about the segment `p`: its checksum verified (a wrong one gives
    /// the destination its credit back), then the reset built in place and counted.
    pub(super) fn tcp_reset_send<B: PacketBuf>(&mut self, pkt: &mut B, p: &Parsed, port: u16) -> Verdict {
        if !tcp_reset::checksum_ok(pkt.data(), p, pkt.l4_checksum()) {
            self.tcp_reset.refund_peer();
            return Verdict::Drop(Outcome::TcpBadChecksum);
        }
        let Some(local) = self.tables.ports.get(port as usize) else {
            return Verdict::Drop(Outcome::NoService);
        };
        let mac = local.mac();
        if !tcp_reset::build_in_place(pkt, p, mac, self.idents.atomic()) {
            return Verdict::Drop(Outcome::Malformed);
        }
        self.reset_counters.sent[tcp_reset::family(p)].inc();
        Verdict::Transmit(Outcome::TcpReset)
    }

    /// [`Verdict::Deliver`] to socket `s`, recorded for [`Pipeline::delivered_to`].
    #[inline(always)]
    pub(super) fn deliver(&mut self, s: usize) -> Verdict {
        self.delivered_to = s as u32;
        Verdict::Deliver
    }

    /// An ICMP error that quotes a packet of a `tunnel` service's flow: to the socket the flow's
    /// own packets reach (the hash of the quoted flow turned client → service), whose worker
    /// sends it to the flow's backend; within this lcore's share of `[conntrack] icmp_per_sec`.
    /// `None`: not such an error, or over the budget (the caller's handling stands).
    #[inline(never)]
    fn icmp_to_backend<B: PacketBuf>(&mut self, pkt: &B, p: &Parsed, now: Instant) -> Option<Verdict> {
        let t = &*self.tables;
        if t.conntrack.icmp_per_sec == 0 {
            return None;
        }
        let q = crate::pipeline::conntrack::quoted_flow(pkt.data(), p)?;
        let hit = t.services.lookup(q.protocol, q.sport, &q.service)?;
        if !matches!(
            t.services.services()[hit.svc()].action,
            crate::pipeline::Action::Tunnel(_)
        ) {
            return None;
        }
        if !self.to_backend.admit(t.icmp_to_backend, now) {
            self.icmp_counters.to_backend[1].inc();
            return None;
        }
        self.icmp_counters.to_backend[0].inc();
        let hash = q.hash(&t.hasher);
        Some(self.fan_out_hash(hit.svc(), hash))
    }

    /// [`Pipeline::fan_out`] for a flow hash already known.
    fn fan_out_hash(&mut self, svc: usize, hash: u32) -> Verdict {
        let t = &*self.tables;
        match self.fanout.choose_quick(
            &t.services.services()[svc].group,
            &t.sockets,
            HashOnDemand::new(|| hash),
        ) {
            Choice::Socket(s) => self.deliver(s),
            Choice::Full(s) => {
                t.sockets[s].counters.rx[self.fanout.slot].full.inc();
                Verdict::Drop(Outcome::SocketFull)
            }
            Choice::FlowLimited(_) => Verdict::Drop(Outcome::FlowLimited),
        }
    }

    #[inline(never)]
    pub(super) fn fan_out(&mut self, svc: usize, p: &Parsed, nic_hash: Option<u32>) -> Verdict {
        let t = &*self.tables;
        match self.fanout.choose_quick(
            &t.services.services()[svc].group,
            &t.sockets,
            HashOnDemand::new(|| p.flow_hash(&t.hasher, nic_hash)),
        ) {
            Choice::Socket(s) => self.deliver(s),
            Choice::Full(s) => {
                t.sockets[s].counters.rx[self.fanout.slot].full.inc();
                if t.sockets[s].kernel {
                    Verdict::Drop(Outcome::KernelFull)
                } else {
                    Verdict::Drop(Outcome::SocketFull)
                }
            }
            Choice::FlowLimited(_) => Verdict::Drop(Outcome::FlowLimited),
        }
    }
}

impl Pipeline {
    /// TCP or UDP to a local port without a service, on a port with a kernel interface: into the
    /// kernel path if the rules take it ([`crate::pipeline::kernel::PuntRules::takes_port`]).
    #[inline(never)]
    fn punt_port(&mut self, p: &Parsed, nic_hash: Option<u32>, now: Instant) -> Option<Verdict> {
        let k = self.tables.kernel.as_ref()?;
        if !k.takes_port(p) {
            return None;
        }
        let svc = k.service;
        if !self.punt_admit(now) {
            return Some(Verdict::Drop(Outcome::KernelLimited));
        }
        Some(self.fan_out(svc, p, nic_hash))
    }

    /// Whether this lcore's share of the punt budget (`[kernel] punt_rate`) admits one more
    /// packet into the kernel path at `now`; asked before anything is queued.
    #[inline]
    pub(super) fn punt_admit(&mut self, now: Instant) -> bool {
        let budget = self.tables.kernel.as_ref().map(|k| k.budget).unwrap_or_default();
        self.punt.admit(budget, now)
    }

    /// A local packet local delivery did not take (verdict `v`), on a port with a kernel
    /// interface: a neighbour advertisement to our MAC ([`Pipeline::punt_advert`]); with
    /// `unhandled`, a packet for one of our addresses that nothing here handles (another
    /// protocol, an ICMP or ICMPv6 message the fast path does not answer).
    #[inline(never)]
    fn punt_other<B: PacketBuf>(
        &mut self,
        port: u16,
        p: &Parsed,
        pkt: &B,
        v: Verdict,
        now: Instant,
    ) -> Option<Verdict> {
        let k = self.tables.kernel.as_ref()?;
        let local = self.tables.ports.get(port as usize)?;
        let unicast = pkt.data().first().is_some_and(|b| b & 1 == 0);
        let take = match v {
            Verdict::Drop(Outcome::NdpIgnored) => {
                let advert = unicast
                    && p.protocol == IpProtocol::ICMPV6
                    && pkt.data().get(p.l4_offset as usize).copied() == Some(Icmpv6Message::NeighborAdvert.into());
                return advert.then(|| self.punt_advert(port, p, pkt.data(), now));
            }
            Verdict::Drop(Outcome::Unhandled) => k.rules.unhandled() && unicast && is_local(local, p.dst),
            _ => false,
        };
        if !take {
            return None;
        }
        let svc = k.service;
        if !self.punt_admit(now) {
            return Some(Verdict::Drop(Outcome::KernelLimited));
        }
        Some(self.fan_out(svc, p, None))
    }

    /// A neighbour advertisement to our MAC, on a port with a kernel interface: into the kernel
    /// path only if it answers the kernel's own solicitation, the Solicited flag set (RFC 4861
    /// §4.4; Linux's `drop_unsolicited_na`) and its target one the kernel asked about lately
    /// ([`crate::pipeline::kernel::KernelPath::solicited`]). Any other valid one is
    /// `neighbor_unsolicited`: with the Override flag it would rewrite the kernel's entry for its
    /// target (§7.2.5).
    fn punt_advert(&mut self, port: u16, p: &Parsed, frame: &[u8], now: Instant) -> Verdict {
        let a = match ndp::advert(p, frame) {
            Ok(a) => a,
            Err(o) => return Verdict::Drop(o),
        };
        let Some(k) = self.tables.kernel.as_ref() else {
            return Verdict::Drop(Outcome::NdpIgnored);
        };
        if !(a.solicited && k.solicited(port, IpAddr::V6(a.target), now)) {
            return Verdict::Drop(Outcome::NeighborUnsolicited);
        }
        let svc = k.service;
        if !self.punt_admit(now) {
            return Verdict::Drop(Outcome::KernelLimited);
        }
        self.fan_out(svc, p, None)
    }

    /// An ARP reply to one of our addresses, on a port with a kernel interface: into the kernel
    /// path, hashed by its sender's address, if the kernel asked about its sender lately (it
    /// answers the kernel's own request); `neighbor_unsolicited` if not, as Linux's
    /// `arp_accept = 0` keeps an unasked reply from making an entry, and more: here it cannot
    /// rewrite one either.
    #[inline(never)]
    pub(super) fn punt_arp_reply<B: PacketBuf>(&mut self, port: u16, pkt: &B, now: Instant) -> Option<Verdict> {
        let k = self.tables.kernel.as_ref()?;
        let local = self.tables.ports.get(port as usize)?;
        let sender = arp::reply_for(local, pkt.data())?;
        if !k.solicited(port, IpAddr::V4(sender), now) {
            return Some(Verdict::Drop(Outcome::NeighborUnsolicited));
        }
        let svc = k.service;
        if !self.punt_admit(now) {
            return Some(Verdict::Drop(Outcome::KernelLimited));
        }
        let t = &*self.tables;
        match self.fanout.choose_quick(
            &t.services.services()[svc].group,
            &t.sockets,
            HashOnDemand::new(|| t.hasher.hash_v4(sender, sender, None)),
        ) {
            Choice::Socket(s) => Some(self.deliver(s)),
            Choice::Full(s) => {
                t.sockets[s].counters.rx[self.fanout.slot].full.inc();
                Some(Verdict::Drop(Outcome::KernelFull))
            }
            Choice::FlowLimited(_) => Some(Verdict::Drop(Outcome::FlowLimited)),
        }
    }
}

impl Pipeline {
    /// The port-wide filter for a packet the general path has for us (a local unicast
    /// destination; Neighbor Discovery passes, as ARP does: the link keeps working).
    #[inline(never)]
    fn filter_general(&self, port: u16, local: &PortAddrs, frame: &[u8], p: &Parsed) -> Option<Outcome> {
        match (p.src, p.dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) if local.has_ipv4(dst) => self.filter_v4(port, src),
            (IpAddr::V6(src), IpAddr::V6(dst)) if local.ipv6.contains(&dst) => {
                let ndp = p.protocol == IpProtocol::ICMPV6
                    && p.fragment.is_none()
                    && frame.get(p.l4_offset as usize).is_some_and(|t| (133..=137).contains(t));
                if ndp {
                    return None;
                }
                self.filter_v6(port, &src)
            }
            _ => None,
        }
    }
}

/// The source-validation rule and the source-route and RFC 6980 refusals for a packet for us,
/// the general path's: a call, so the pipeline's inlined code (and the fast path's registers)
/// do not grow with it.
#[inline(never)]
fn refusal(local: &PortAddrs, frame: &[u8], parsed: &Parsed) -> Option<Verdict> {
    let group_frame = frame.first().is_some_and(|b| b & 1 != 0);
    match (parsed.src, parsed.dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) if local.has_ipv4(dst) => {
            if !source::valid_v4(local, group_frame, src) {
                return Some(Verdict::Drop(Outcome::Martian));
            }
            if parsed.l4_offset - parsed.l3_offset > 20 {
                return v4_options_refusal(frame, parsed);
            }
            None
        }
        (IpAddr::V6(_), IpAddr::V6(_)) => v6_refusal(local, frame, parsed, group_frame),
        _ => None,
    }
}

/// The options of an IPv4 datagram for us: malformed ones and source routes refused
/// ([`source::v4_options`]).
#[cold]
#[inline(never)]
fn v4_options_refusal(frame: &[u8], p: &Parsed) -> Option<Verdict> {
    let opts = frame.get(p.l3_offset as usize + 20..p.l4_offset as usize)?;
    match source::v4_options(opts) {
        source::V4Options::Plain => None,
        source::V4Options::SourceRouted => Some(Verdict::Drop(Outcome::SourceRouted)),
        source::V4Options::Malformed => Some(Verdict::Drop(Outcome::Malformed)),
    }
}

/// The source-validation rule for an IPv6 packet for us (a local address or a group the port
/// listens to), then its extension headers: a Routing header with segments left refused, an
/// NDP message with a Fragment header ignored (RFC 6980 §5: "MUST silently ignore"; a first
/// fragment of one is dropped before reassembly, so it never completes).
#[inline]
fn v6_refusal(local: &PortAddrs, frame: &[u8], p: &Parsed, group_frame: bool) -> Option<Verdict> {
    let (IpAddr::V6(src), IpAddr::V6(dst)) = (p.src, p.dst) else {
        return None;
    };
    local.ipv6_local_for(&dst)?;
    let (l3, l4) = (p.l3_offset as usize, p.l4_offset as usize);
    let first_or_whole = p.fragment.is_none_or(|f| f.is_first());
    let icmp_type = (p.protocol == IpProtocol::ICMPV6 && first_or_whole && l4 < p.ip_end as usize)
        .then(|| frame.get(l4).copied())
        .flatten();
    let dad = icmp_type == Some(Icmpv6Message::NeighborSolicit.into()) && p.fragment.is_none();
    if !source::valid_v6(local, group_frame, &src, &dst, dad) {
        return Some(Verdict::Drop(Outcome::Martian));
    }
    if l4 > l3 + 40 {
        let chain = source::v6_chain(frame, l3, l4);
        if chain.routed {
            return Some(Verdict::Drop(Outcome::SourceRouted));
        }
        if chain.fragment_header && icmp_type.is_some_and(|t| (133..=137).contains(&t)) {
            return Some(Verdict::Drop(Outcome::NdpIgnored));
        }
    }
    None
}

/// Whether `dst` is one of the port's own unicast addresses.
#[inline]
fn is_local(local: &PortAddrs, dst: IpAddr) -> bool {
    match dst {
        IpAddr::V4(a) => local.has_ipv4(a),
        IpAddr::V6(a) => local.has_ipv6(&a),
    }
}

/// Packets for the host itself: the services every host must offer (echo, neighbor discovery).
///
/// The IPv4 decisions (not ours; no service yet) are a few compares inlined into the pipeline;
/// building an answer and the IPv6 cases are calls, so the common path carries none of their
/// code.
#[inline(always)]
fn local_delivery<B: PacketBuf>(local: &PortAddrs, p: &Parsed, pkt: &mut B) -> Verdict {
    match p.dst {
        IpAddr::V4(dst) => {
            if !local.has_ipv4(dst) {
                return Verdict::Drop(Outcome::NotLocal);
            }
            if p.fragment.is_some() {
                return Verdict::Drop(Outcome::Unhandled);
            }
            match p.protocol {
                IpProtocol::UDP | IpProtocol::TCP => Verdict::Drop(Outcome::NoService),
                IpProtocol::ICMP => echo::answer_v4(local, p, pkt),
                _ => Verdict::Drop(Outcome::Unhandled),
            }
        }
        IpAddr::V6(dst) => local_delivery_v6(local, &dst, p, pkt),
    }
}

#[inline(never)]
fn local_delivery_v6<B: PacketBuf>(local: &PortAddrs, dst: &Ipv6Addr, p: &Parsed, pkt: &mut B) -> Verdict {
    let Some(me) = local.ipv6_local_for(dst) else {
        return Verdict::Drop(Outcome::NotLocal);
    };
    if matches!(p.protocol, IpProtocol::UDP | IpProtocol::TCP) && p.fragment.is_none() && *dst == me {
        return Verdict::Drop(Outcome::NoService);
    }
    if p.protocol != IpProtocol::ICMPV6 || p.fragment.is_some() {
        return Verdict::Drop(Outcome::Unhandled);
    }
    let Some(&ty) = pkt.data().get(p.l4_offset as usize) else {
        return Verdict::Drop(Outcome::Malformed);
    };
    match Icmpv6Message::from(ty) {
        Icmpv6Message::EchoRequest => echo::answer_v6(local, me, p, pkt),
        Icmpv6Message::NeighborSolicit => ndp::answer(local, p, pkt),
        Icmpv6Message::NeighborAdvert
        | Icmpv6Message::RouterSolicit
        | Icmpv6Message::RouterAdvert
        | Icmpv6Message::Redirect => Verdict::Drop(Outcome::NdpIgnored),
        _ => Verdict::Drop(Outcome::Unhandled),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::HeapBuf;
    use crate::pipeline::parse;
    use crate::pipeline::tests::{pipeline, with_udp_checksum};
    use crate::wire::ipv6::{solicited_node, ALL_NODES};
    use std::net::Ipv4Addr;

    #[test]
    fn local_and_not_local() {
        use parse::tests::{udp_bytes, v4_frame, v6_frame};
        let mut p = pipeline();
        let me = Ipv4Addr::new(192, 0, 2, 1);
        let them = Ipv4Addr::new(198, 51, 100, 7);
        let udp = udp_bytes(1, 7, b"x");
        let mut v = v4_frame(them, me, IpProtocol::UDP, &[], 0, &udp);
        let ip_len = v.len();
        v.extend_from_slice(&[0xaa; 13]);
        // Padding is trimmed before anything looks at the datagram: a closed port (port 7 here)
        // gets a Port Unreachable quoting exactly the datagram.
        let mut b = HeapBuf::new(&v);
        let mut q = pipeline();
        q.icmp = icmp_error::IcmpLimiter::new(
            &icmp_error::IcmpConfig {
                burst: 0,
                ..Default::default()
            },
            icmp_error::IcmpConfig {
                burst: 0,
                ..Default::default()
            }
            .global_bucket(Instant(0)),
            1,
        );
        assert_eq!(q.process(0, &mut b, Instant(0)), Verdict::Drop(Outcome::IcmpSuppressed));
        assert_eq!(b.len(), ip_len, "padding trimmed");
        let mut b = HeapBuf::new(&v);
        assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Transmit(Outcome::IcmpError));
        assert_eq!(
            b.len(),
            14 + 20 + 8 + (ip_len - 14),
            "the quote is the datagram without padding"
        );
        let mut b = HeapBuf::new(&v4_frame(me, them, IpProtocol::UDP, &[], 0, &udp));
        assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Drop(Outcome::NotLocal));
        let bcast = v4_frame(them, Ipv4Addr::BROADCAST, IpProtocol::UDP, &[], 0, &udp);
        assert_eq!(
            p.process(0, &mut HeapBuf::new(&bcast), Instant(0)),
            Verdict::Drop(Outcome::NotLocal)
        );

        let me6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let them6: Ipv6Addr = "2001:db8::7".parse().unwrap();
        for (dst, want) in [
            (me6, Outcome::IcmpError),
            (ALL_NODES, Outcome::Unhandled),
            (solicited_node(&me6), Outcome::Unhandled),
            (them6, Outcome::NotLocal),
            (solicited_node(&them6), Outcome::NotLocal),
            ("ff02::2".parse().unwrap(), Outcome::NotLocal),
        ] {
            let v = with_udp_checksum(v6_frame(them6, dst, IpProtocol::UDP, &[], 64, &udp));
            let got = p.process(0, &mut HeapBuf::new(&v), Instant(0));
            let want = if want == Outcome::IcmpError {
                Verdict::Transmit(want)
            } else {
                Verdict::Drop(want)
            };
            assert_eq!(got, want, "{dst}");
        }
    }
}
