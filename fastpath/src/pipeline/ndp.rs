//! Answering IPv6 Neighbor Solicitations for local addresses (RFC 4861), so IPv6 hosts can
//! resolve the box's link-layer address — the IPv6 counterpart of the ARP stage.
//!
//! Outcomes: a solicitation that fails a §7.1.1 length or checksum check, or has a zero-length
//! option, is `malformed`; one that fails the other §7.1.1 checks (hop limit, code, multicast
//! target, unspecified-source rules) or whose target is not ours is `ndp_ignored`.

use super::parse::Parsed;
use super::tables::PortAddrs;
use super::verdict::Verdict;
use crate::buf::PacketBuf;
use crate::outcome::Outcome;
use crate::wire::icmpv6::{self, NdpOption, NeighborFlags, NeighborPacket};
use crate::wire::ipv6::{self, is_solicited_node, multicast_mac, ALL_NODES};
use crate::wire::{EthernetAddress, Icmpv6Packet, IpProtocol, Ipv6Repr};
use std::net::{IpAddr, Ipv6Addr};

/// Length of the advertisement we send: NA header plus target link-layer address option.
const NA_LEN: usize = icmpv6::NEIGHBOR_LEN + icmpv6::LLADDR_OPT_LEN;

/// What a valid solicitation asks.
struct Solicitation {
    src: Ipv6Addr,
    target: Ipv6Addr,
    source_lladdr: Option<EthernetAddress>,
}

/// A solicitation or advertisement that passed the checks both share: its addresses, the
/// message.
struct Checked<'a> {
    src: Ipv6Addr,
    dst: Ipv6Addr,
    msg: NeighborPacket<&'a [u8]>,
}

/// The checks RFC 4861 §7.1.1 (solicitations) and §7.1.2 (advertisements) share, on the
/// message `p` describes: hop limit, length, checksum, code, target.
fn checked<'a>(p: &Parsed, frame: &'a [u8]) -> Result<Checked<'a>, Outcome> {
    let (IpAddr::V6(src), IpAddr::V6(dst)) = (p.src, p.dst) else {
        return Err(Outcome::Unhandled);
    };
    let Some(msg) = frame.get(p.l4_offset as usize..p.ip_end as usize) else {
        return Err(Outcome::Malformed);
    };
    // "The IP Hop Limit field has a value of 255, i.e., the packet could not possibly have been
    // forwarded by a router."
    if p.hop_limit != 255 {
        return Err(Outcome::NdpIgnored);
    }
    // "ICMP length (derived from the IP length) is 24 or more octets."
    let Ok(icmp) = Icmpv6Packet::new_checked(msg) else {
        return Err(Outcome::Malformed);
    };
    let Ok(nd) = NeighborPacket::new_checked(msg) else {
        return Err(Outcome::Malformed);
    };
    // "The ICMP Checksum is valid."
    if !icmp.verify_checksum(&src, &dst) {
        return Err(Outcome::Malformed);
    }
    // "ICMP Code is 0."
    if icmp.code() != 0 {
        return Err(Outcome::NdpIgnored);
    }
    // "Target Address is not a multicast address."
    if nd.target_addr().is_multicast() {
        return Err(Outcome::NdpIgnored);
    }
    Ok(Checked { src, dst, msg: nd })
}

/// What a valid Neighbor Advertisement says.
pub(super) struct Advert {
    /// The address it advertises.
    pub(super) target: Ipv6Addr,
    /// The Solicited flag: sent in answer to a solicitation (RFC 4861 §4.4).
    pub(super) solicited: bool,
}

/// Validates the Neighbor Advertisement `p` describes, per RFC 4861 §7.1.2 (the kernel path
/// takes only valid answers to its solicitations, `pipeline/kernel.rs`).
pub(super) fn advert(p: &Parsed, frame: &[u8]) -> Result<Advert, Outcome> {
    let Checked { dst, msg, .. } = checked(p, frame)?;
    let solicited = msg.flags().solicited;
    // "If the IP Destination Address is a multicast address the Solicited flag is zero."
    if dst.is_multicast() && solicited {
        return Err(Outcome::NdpIgnored);
    }
    // "All included options have a length that is greater than zero."
    if msg.options().any(|o| o.is_err()) {
        return Err(Outcome::Malformed);
    }
    Ok(Advert {
        target: msg.target_addr(),
        solicited,
    })
}

/// Validates the Neighbor Solicitation `p` describes, per RFC 4861 §7.1.1.
fn validate(p: &Parsed, frame: &[u8]) -> Result<Solicitation, Outcome> {
    let Checked { src, dst, msg: ns } = checked(p, frame)?;
    let target = ns.target_addr();
    // "All included options have a length that is greater than zero."
    let mut source_lladdr = None;
    for o in ns.options() {
        match o {
            Ok(NdpOption::SourceLinkLayer(mac)) => source_lladdr = Some(mac),
            Ok(_) => {}
            Err(_) => return Err(Outcome::Malformed),
        }
    }
    // The source-validation rule's link-layer half (`pipeline/source.rs`): the advertisement
    // goes to the Source Link-Layer Address, so a group address there would send our unicast
    // answer to many (RFC 4861 §4.6.1: the option is the sender's link-layer address).
    if source_lladdr.is_some_and(|m| !m.is_unicast()) {
        return Err(Outcome::Martian);
    }
    if src.is_unspecified() {
        // "If the IP source address is the unspecified address, the IP destination address is
        // a solicited-node multicast address."
        if !is_solicited_node(&dst) {
            return Err(Outcome::NdpIgnored);
        }
        // "If the IP source address is the unspecified address, there is no source link-layer
        // address option in the message."
        if source_lladdr.is_some() {
            return Err(Outcome::NdpIgnored);
        }
    } else if src.is_multicast() {
        // RFC 4291 §2.7: a multicast address is never a source.
        return Err(Outcome::Malformed);
    }
    Ok(Solicitation {
        src,
        target,
        source_lladdr,
    })
}

/// Answers, in place, a Neighbor Solicitation for a local address with a Neighbor
/// Advertisement (RFC 4861 §7.2.4).
pub(super) fn answer<B: PacketBuf>(local: &PortAddrs, p: &Parsed, pkt: &mut B) -> Verdict {
    let ns = match validate(p, pkt.data()) {
        Ok(ns) => ns,
        Err(o) => return Verdict::Drop(o),
    };
    if !local.has_ipv6(&ns.target) {
        return Verdict::Drop(Outcome::NdpIgnored);
    }
    let frame_src = EthernetAddress::from_bytes(&pkt.data()[6..12]);
    // §7.2.4: "If the source of the solicitation is the unspecified address, the node MUST set
    // the Solicited flag to zero and multicast the advertisement to the all-nodes address.
    // Otherwise, the node MUST set the Solicited flag to one and unicast the advertisement to
    // the Source Address of the solicitation." The Override flag is set: the target is not an
    // anycast address. The Target Link-Layer Address option is always included (it MUST be
    // when answering a multicast solicitation).
    let (ip_dst, eth_dst, solicited) = if ns.src.is_unspecified() {
        (ALL_NODES, multicast_mac(&ALL_NODES), false)
    } else {
        (ns.src, ns.source_lladdr.unwrap_or(frame_src), true)
    };
    let l3 = p.l3_offset as usize;
    // The answer replaces everything from the IPv6 header on (extension headers included).
    if !pkt.set_len(l3 + ipv6::HEADER_LEN + NA_LEN) {
        // No tailroom for the 8 bytes an option-less solicitation lacks: cannot answer.
        return Verdict::Drop(Outcome::NdpIgnored);
    }
    let b = pkt.data_mut();
    b[0..6].copy_from_slice(&eth_dst.0);
    b[6..12].copy_from_slice(&local.mac().0);
    Ipv6Repr {
        src: ns.target,
        dst: ip_dst,
        next_header: IpProtocol::ICMPV6,
        payload_len: NA_LEN as u16,
        // §7.1.2 (receivers check it is 255, so it must be sent as 255)
        hop_limit: 255,
    }
    .emit(&mut b[l3..]);
    let na = &mut b[l3 + ipv6::HEADER_LEN..];
    let flags = NeighborFlags {
        router: false,
        solicited,
        override_: true,
    };
    icmpv6::emit_neighbor_advert(na, flags, &ns.target, Some(local.mac()));
    if let Ok(mut icmp) = Icmpv6Packet::new_checked(&mut na[..NA_LEN]) {
        icmp.fill_checksum(&ns.target, &ip_dst);
    }
    Verdict::Transmit(Outcome::NdpReply)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::parse::tests::{v6_frame, MAC, PEER};
    use super::super::tests::pipeline;
    use super::super::*;
    use super::*;
    use crate::buf::HeapBuf;
    use crate::wire::ipv6::solicited_node;
    use crate::wire::{checksum, EtherType, EthernetFrame, Icmpv6Message, Ipv6Packet};

    fn me() -> Ipv6Addr {
        "2001:db8::1".parse().unwrap()
    }
    fn peer() -> Ipv6Addr {
        "fe80::2".parse().unwrap()
    }

    /// A solicitation for `target`, checksum right, with the given options.
    pub(crate) fn ns(src: Ipv6Addr, dst: Ipv6Addr, target: Ipv6Addr, hop: u8, opts: &[u8]) -> HeapBuf {
        let mut m = vec![135u8, 0, 0, 0, 0, 0, 0, 0];
        m.extend_from_slice(&target.octets());
        m.extend_from_slice(opts);
        let s = checksum::pseudo_v6(&src, &dst, 58, m.len() as u32);
        let c = checksum::finish(checksum::sum(s, &m));
        m[2..4].copy_from_slice(&c.to_be_bytes());
        let mut v = v6_frame(src, dst, IpProtocol::ICMPV6, &[], hop, &m);
        v[0..6].copy_from_slice(&multicast_mac(&dst).0);
        HeapBuf::new(&v)
    }

    pub(crate) const SLLA: [u8; 8] = [1, 1, 2, 0, 0, 0, 0, 0x22];

    fn check_na(b: &HeapBuf, eth_dst: EthernetAddress, ip_dst: Ipv6Addr, solicited: bool) {
        let f = EthernetFrame::new_checked(b.data()).unwrap();
        assert_eq!(f.dst_addr(), eth_dst);
        assert_eq!(f.src_addr(), MAC);
        assert_eq!(f.ethertype(), EtherType::IPV6);
        let ip = Ipv6Packet::new_checked(f.payload()).unwrap();
        assert_eq!(ip.total_len(), f.payload().len());
        assert_eq!(ip.hop_limit(), 255);
        assert_eq!(ip.src_addr(), me());
        assert_eq!(ip.dst_addr(), ip_dst);
        assert_eq!(ip.next_header(), IpProtocol::ICMPV6);
        let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
        assert_eq!(icmp.msg_type(), Icmpv6Message::NeighborAdvert);
        assert_eq!(icmp.code(), 0);
        assert!(icmp.verify_checksum(&me(), &ip_dst));
        let na = NeighborPacket::new_checked(ip.payload()).unwrap();
        assert_eq!(na.target_addr(), me());
        assert_eq!(
            na.flags(),
            NeighborFlags {
                router: false,
                solicited,
                override_: true
            }
        );
        let opts: Vec<_> = na.options().collect();
        assert_eq!(opts, vec![Ok(NdpOption::TargetLinkLayer(MAC))]);
    }

    #[test]
    fn answers_address_resolution() {
        let mut p = pipeline();
        let mut b = ns(peer(), solicited_node(&me()), me(), 255, &SLLA);
        assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Transmit(Outcome::NdpReply));
        // Ethernet destination from the source link-layer address option, not the frame.
        check_na(&b, EthernetAddress([2, 0, 0, 0, 0, 0x22]), peer(), true);
    }

    #[test]
    fn answers_unicast_nud_without_option_to_frame_source() {
        let mut p = pipeline();
        let mut b = ns(peer(), me(), me(), 255, &[]);
        b.data_mut()[0..6].copy_from_slice(&MAC.0);
        assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Transmit(Outcome::NdpReply));
        check_na(&b, PEER, peer(), true);
    }

    #[test]
    fn answers_dad_to_all_nodes() {
        let mut p = pipeline();
        let mut b = ns(Ipv6Addr::UNSPECIFIED, solicited_node(&me()), me(), 255, &[]);
        assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Transmit(Outcome::NdpReply));
        check_na(&b, EthernetAddress([0x33, 0x33, 0, 0, 0, 1]), ALL_NODES, false);
    }

    #[test]
    fn golden_reply_bytes() {
        let mut p = pipeline();
        let mut b = ns(peer(), solicited_node(&me()), me(), 255, &SLLA);
        assert!(matches!(p.process(0, &mut b, Instant(0)), Verdict::Transmit(_)));
        #[rustfmt::skip]
        let expect: [u8; 86] = [
            2, 0, 0, 0, 0, 0x22, 2, 0, 0, 0, 0, 1, 0x86, 0xdd,
            0x60, 0, 0, 0, 0, 32, 58, 255,
            0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2,
            136, 0, 0xb9, 0xab, 0x60, 0, 0, 0,
            0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
            2, 1, 2, 0, 0, 0, 0, 1,
        ];
        assert_eq!(b.data(), &expect[..]);
    }

    #[test]
    fn rfc4861_validation() {
        let mut p = pipeline();
        let sn = solicited_node(&me());
        let cases: Vec<(HeapBuf, Outcome)> = vec![
            // hop limit not 255: could have been forwarded
            (ns(peer(), sn, me(), 254, &SLLA), Outcome::NdpIgnored),
            // multicast target
            (ns(peer(), sn, sn, 255, &SLLA), Outcome::NdpIgnored),
            // target not ours
            (
                ns(peer(), sn, "2001:db8::99".parse().unwrap(), 255, &SLLA),
                Outcome::NdpIgnored,
            ),
            // DAD with a source link-layer option
            (ns(Ipv6Addr::UNSPECIFIED, sn, me(), 255, &SLLA), Outcome::NdpIgnored),
            // DAD not to the solicited-node group (in a group frame: refused first by the
            // source-validation rule, a unicast datagram in a multicast frame)
            (ns(Ipv6Addr::UNSPECIFIED, me(), me(), 255, &[]), Outcome::Martian),
            // zero-length option
            (ns(peer(), sn, me(), 255, &[1, 0, 0, 0, 0, 0, 0, 0]), Outcome::Malformed),
            // option running past the message
            (ns(peer(), sn, me(), 255, &SLLA[..6]), Outcome::Malformed),
            // a solicitation to somebody else's group
            (
                ns(peer(), solicited_node(&"2001:db8::2".parse().unwrap()), me(), 255, &[]),
                Outcome::NotLocal,
            ),
        ];
        for (i, (mut b, want)) in cases.into_iter().enumerate() {
            assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Drop(want), "case {i}");
        }
        // bad checksum
        let mut b = ns(peer(), sn, me(), 255, &SLLA);
        b.data_mut()[14 + 40 + 2] ^= 1;
        assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Drop(Outcome::Malformed));
        // non-zero code
        let mut b = ns(peer(), sn, me(), 255, &SLLA);
        let at = 14 + 40;
        b.data_mut()[at + 1] = 1;
        b.data_mut()[at + 2..at + 4].copy_from_slice(&[0, 0]);
        let c = checksum::finish(checksum::sum(
            checksum::pseudo_v6(&peer(), &sn, 58, 32),
            &b.data()[at..],
        ));
        b.data_mut()[at + 2..at + 4].copy_from_slice(&c.to_be_bytes());
        assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Drop(Outcome::NdpIgnored));
        // shorter than 24 bytes
        let mut short = v6_frame(peer(), sn, IpProtocol::ICMPV6, &[], 255, &[135, 0, 0, 0, 0, 0, 0, 0]);
        short[0..6].copy_from_slice(&multicast_mac(&sn).0);
        let mut b = HeapBuf::new(&short);
        assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Drop(Outcome::Malformed));
        // advertisements need no answer
        let mut b = ns(peer(), sn, me(), 255, &[]);
        b.data_mut()[14 + 40] = 136;
        assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Drop(Outcome::NdpIgnored));
    }
}
