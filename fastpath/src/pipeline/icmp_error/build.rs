//! Building an ICMP or ICMPv6 error in place, from the frame that caused it.
//!
//! The offending frame becomes the error: its Ethernet header (VLAN tags included) is moved to
//! the front of 28 (IPv4) or 48 (IPv6) bytes of headroom and turned back to the sender, a new IP
//! and ICMP header are written where it was, and the offending IP packet, which does not move,
//! is the quote, cut to the length limit:
//!
//! ```text
//! before:            [eth + tags][offending IP packet ...........][padding]
//! after:  [eth + tags][new IP][ICMP][offending IP packet, cut]
//! ```
//!
//! Without the headroom, the quote is moved instead (at most 548 or 1232 bytes).
//!
//! What goes in, by RFC:
//! - quote: "as much of the original datagram as possible without the length of the ICMP datagram
//!   exceeding 576 bytes" (RFC 1812 §4.3.2.3; RFC 1122 §3.2.2 asks for more than RFC 792's 8 bytes),
//!   and for ICMPv6 "as much of invoking packet as possible without the ICMPv6 packet exceeding
//!   the minimum IPv6 MTU" (RFC 4443 §2.4(c), §3.1), 1280 bytes;
//! - source: the local address the offending packet was sent to (RFC 1122 §3.2.2 / RFC 4443
//!   §2.2: an address of ours, never a group), given by the caller; destination: the offending
//!   packet's source;
//! - IPv4: no options, TTL 64, DF clear (an error must not itself be lost to PMTU), a fresh
//!   identification from the caller (RFC 6864 §4.1: unique per source, destination and protocol
//!   for a datagram that may be fragmented), precedence 6 "Internetwork Control" (RFC 1812
//!   §4.3.2.5: errors other than Source Quench SHOULD use 6 or 7), ECN not-ECT;
//! - IPv6: traffic class and flow label zero, hop limit 64, no extension headers;
//! - the ICMP checksum over the whole message (RFC 792) / with the IPv6 pseudo-header (RFC 4443
//!   §2.3); the IPv4 header checksum (RFC 791).
//!
//! After a successful build the `Parsed` of the offending packet no longer describes the buffer.

use super::ErrorKind;
use crate::buf::PacketBuf;
use crate::pipeline::parse::{IpVersion, Parsed};
use crate::wire::{self, ethernet, icmpv4, icmpv6, ipv4, ipv6};
use crate::wire::{EtherType, EthernetAddress, Icmpv4Packet, Icmpv6Packet, IpProtocol, Ipv4Repr, Ipv6Repr};
use std::net::IpAddr;

/// Largest IPv4 error datagram (RFC 1812 §4.3.2.3).
pub const IPV4_MAX_ERROR_LEN: usize = 576;
/// Largest ICMPv6 error packet: the IPv6 minimum MTU (RFC 4443 §2.4(c), RFC 8200 §5).
pub const IPV6_MAX_ERROR_LEN: usize = 1280;
/// TTL / hop limit of the errors.
pub const HOP_LIMIT: u8 = 64;
/// DSCP/ECN byte of IPv4 errors: precedence 6 (RFC 1812 §4.3.2.5), ECN not-ECT.
pub const IPV4_ERROR_TOS: u8 = 0xc0;

/// Turns the frame `pkt`, holding the packet `p` describes, into an error of `kind` about it, in
/// place: from `local_mac` and `local_ip` (a unicast address of ours in the packet's family,
/// normally the one it was sent to) back to the packet's sender. `ident` is the IPv4
/// identification (ignored for IPv6): the datagram is atomic (DF set), so a random one
/// ([`crate::ident::Idents::atomic`]).
///
/// `false`, with the packet in an unspecified state (drop it), when the error cannot be built:
/// `kind` does not exist in the packet's family, `local_ip` is of the other family or not
/// unicast, `p` does not fit the frame, or there is neither headroom nor tailroom for the headers.
/// Eligibility and rate limits are not checked here: that is [`super::IcmpLimiter::decide`]'s
/// work, done first.
pub fn build_in_place<B: PacketBuf>(
    pkt: &mut B,
    p: &Parsed,
    local_mac: EthernetAddress,
    local_ip: IpAddr,
    kind: ErrorKind,
    ident: u16,
) -> bool {
    let Some((ty, code)) = kind.type_code(p.version) else {
        return false;
    };
    let (hdr_len, max_len, ethertype) = match (p.version, local_ip, p.src) {
        (IpVersion::V4, IpAddr::V4(me), IpAddr::V4(_))
            if !(me.is_unspecified() || me.is_broadcast() || me.is_multicast()) =>
        {
            (
                ipv4::MIN_HEADER_LEN + icmpv4::HEADER_LEN,
                IPV4_MAX_ERROR_LEN,
                EtherType::IPV4,
            )
        }
        (IpVersion::V6, IpAddr::V6(me), IpAddr::V6(_)) if !(me.is_unspecified() || me.is_multicast()) => (
            ipv6::HEADER_LEN + icmpv6::HEADER_LEN,
            IPV6_MAX_ERROR_LEN,
            EtherType::IPV6,
        ),
        _ => return false,
    };
    let l3 = p.l3_offset as usize;
    let len = pkt.len();
    // Padding past the datagram is not part of it (nor of the quote).
    let ip_end = (p.ip_end as usize).min(len);
    if l3 < ethernet::HEADER_LEN || l3 > ip_end {
        return false;
    }
    let quote_len = (ip_end - l3).min(max_len - hdr_len);
    let total = l3 + hdr_len + quote_len;

    if pkt.prepend(hdr_len).is_some() {
        // [room][eth + tags][offending IP ...]: the Ethernet header moves to the front; the quote
        // is already where it belongs.
        pkt.data_mut().copy_within(hdr_len..hdr_len + l3, 0);
        if !pkt.set_len(total) {
            return false;
        }
    } else {
        // No headroom: make the frame `total` long and move the quote behind the new headers.
        if !pkt.set_len(total) {
            return false;
        }
        pkt.data_mut().copy_within(l3..l3 + quote_len, l3 + hdr_len);
    }

    let b = pkt.data_mut();
    // Back to the sender, from us, on the VLAN(s) it came from.
    let (dst, src) = b.split_at_mut(6);
    dst.copy_from_slice(&src[..6]);
    src[..6].copy_from_slice(&local_mac.0);
    wire::put_be16(b, l3 - 2, ethertype.into());

    let msg_len = icmpv4::HEADER_LEN + quote_len;
    match (local_ip, p.src) {
        (IpAddr::V4(me), IpAddr::V4(them)) => {
            Ipv4Repr {
                src: me,
                dst: them,
                protocol: IpProtocol::ICMP,
                payload_len: msg_len as u16,
                ttl: HOP_LIMIT,
                dscp_ecn: IPV4_ERROR_TOS,
                // Atomic (RFC 6864 §4.1), so `ident` may be random: at most 576 bytes, which
                // every IPv4 path carries (RFC 1812 §4.3.2.3), it is never cut on the way.
                ident,
                dont_frag: true,
            }
            .emit(&mut b[l3..]);
            let at = l3 + ipv4::MIN_HEADER_LEN;
            write_icmp_header(&mut b[at..], ty, code, kind.rest_of_header());
            match Icmpv4Packet::new_checked(&mut b[at..total]) {
                Ok(mut icmp) => icmp.fill_checksum(),
                Err(_) => return false,
            }
        }
        (IpAddr::V6(me), IpAddr::V6(them)) => {
            Ipv6Repr {
                src: me,
                dst: them,
                next_header: IpProtocol::ICMPV6,
                payload_len: msg_len as u16,
                hop_limit: HOP_LIMIT,
            }
            .emit(&mut b[l3..]);
            let at = l3 + ipv6::HEADER_LEN;
            write_icmp_header(&mut b[at..], ty, code, kind.rest_of_header());
            match Icmpv6Packet::new_checked(&mut b[at..total]) {
                Ok(mut icmp) => icmp.fill_checksum(&me, &them),
                Err(_) => return false,
            }
        }
        _ => return false, // families were matched above
    }
    true
}

/// Type, code, a zero checksum and the 32-bit rest of the header (both ICMP versions share the
/// layout).
#[inline]
fn write_icmp_header(b: &mut [u8], ty: u8, code: u8, rest: u32) {
    b[0] = ty;
    b[1] = code;
    wire::put_be16(b, 2, 0);
    wire::put_be32(b, 4, rest);
}
