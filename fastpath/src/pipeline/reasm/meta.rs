//! What the reassembler needs to know about one received fragment, read from its bytes.

use super::Family;
use crate::wire::{be16, be32, ipv4_at, ipv6::MAX_EXT_HEADERS, ipv6_at, EthernetFrame};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Which datagram a fragment belongs to.
///
/// IPv4 (RFC 791 §3.2, "Fragmentation and reassembly"): source, destination, protocol and
/// identification. IPv6 (RFC 8200 §4.5): source, destination and identification; the Next
/// Header of the Fragment header may legitimately differ between fragments ("Only the value from
/// the Offset zero fragment packet is used for reassembly"), so it is not part of the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FragKey {
    /// An IPv4 datagram.
    V4 {
        /// Source address.
        src: Ipv4Addr,
        /// Destination address.
        dst: Ipv4Addr,
        /// Identification.
        ident: u16,
        /// Protocol.
        protocol: u8,
        /// The tunnel the fragments came through ([`crate::buf::Tunnelled::to_word`], 0 for
        /// none): inner address spaces of different tunnels may overlap, so their fragments
        /// never mix.
        tunnel: u32,
    },
    /// An IPv6 packet.
    V6 {
        /// Source address.
        src: Ipv6Addr,
        /// Destination address.
        dst: Ipv6Addr,
        /// Identification of the Fragment header.
        ident: u32,
        /// The tunnel the fragments came through (as for IPv4).
        tunnel: u32,
    },
}

impl FragKey {
    /// The address family.
    pub fn family(&self) -> Family {
        match self {
            FragKey::V4 { .. } => Family::V4,
            FragKey::V6 { .. } => Family::V6,
        }
    }

    /// The same datagram as received through tunnel `word` ([`crate::buf::Tunnelled::to_word`]).
    pub fn through(mut self, word: u32) -> Self {
        match &mut self {
            FragKey::V4 { tunnel, .. } | FragKey::V6 { tunnel, .. } => *tunnel = word,
        }
        self
    }

    /// The source address (the per-source limit counts datagrams by it).
    pub fn src(&self) -> IpAddr {
        match *self {
            FragKey::V4 { src, .. } => IpAddr::V4(src),
            FragKey::V6 { src, .. } => IpAddr::V6(src),
        }
    }
}

/// One fragment, as the reassembler sees it. Offsets are from the start of the frame and stay
/// valid while the reassembler holds the (unmodified) buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragMeta {
    /// The datagram it belongs to.
    pub key: FragKey,
    /// Fragment offset in bytes.
    pub offset: u16,
    /// More Fragments.
    pub more: bool,
    /// Offset of the IP header.
    pub l3_offset: u16,
    /// Offset of the fragment's data: after the IPv4 header (options included), or after the
    /// IPv6 Fragment header.
    pub data_start: u16,
    /// Offset just past the fragment's data (the IP datagram's end; padding excluded).
    pub data_end: u16,
    /// The header bytes the reassembled datagram's length field counts besides the data: the
    /// IPv4 header length, or the IPv6 extension headers before the Fragment header (the
    /// "Per-Fragment headers" of RFC 8200 §4.5).
    pub header_len: u16,
    /// IPv6: offset of the Next Header field that names the Fragment header.
    pub next_header_at: u16,
    /// IPv6: the Next Header of the Fragment header (the first header of the fragmentable part).
    pub frag_next_header: u8,
    /// Whether a first fragment holds the whole header chain up to and including the
    /// upper-layer header (RFC 7112 §5; always true for IPv4 and for later fragments).
    pub chain_complete: bool,
}

impl FragMeta {
    /// Reads the fragment fields of the IPv4 or IPv6 packet at `l3_offset` of `frame` (an
    /// Ethernet frame; VLAN tags are part of the link header and kept in the reassembled
    /// datagram). `None` when the packet is not a fragment (an IPv6 atomic fragment, offset
    /// zero and M clear, is not one: RFC 6946 §4) or its headers are unreadable.
    ///
    /// Call it for packets [`crate::pipeline::Parsed`] marked as fragments (their headers and
    /// IPv4 checksum are already validated). It also accepts an IPv6 first fragment whose chain
    /// after the Fragment header is truncated, which the parser refuses as malformed: it comes
    /// back with `chain_complete == false`, so the caller can let the reassembler count it as
    /// `incomplete_chain`.
    pub fn from_frame(frame: &[u8], l3_offset: usize) -> Option<FragMeta> {
        let b = frame;
        match b.get(l3_offset)? >> 4 {
            4 => Self::v4(b, l3_offset),
            6 => Self::v6(b, l3_offset),
            _ => None,
        }
    }

    /// [`FragMeta::from_frame`] for a frame whose IP header follows its Ethernet header.
    pub fn from_ethernet(frame: &[u8]) -> Option<FragMeta> {
        let l3 = EthernetFrame::new_checked(frame).ok()?.header_len();
        Self::from_frame(frame, l3)
    }

    fn v4(b: &[u8], l3: usize) -> Option<FragMeta> {
        if b.len() < l3 + 20 {
            return None;
        }
        let ihl = (b[l3] & 0x0f) as usize * 4;
        let total = be16(b, l3 + 2) as usize;
        if ihl < 20 || total < ihl || b.len() < l3 + total {
            return None;
        }
        let fw = be16(b, l3 + 6);
        let offset = (fw & 0x1fff) << 3;
        let more = fw & 0x2000 != 0;
        if offset == 0 && !more {
            return None;
        }
        Some(FragMeta {
            key: FragKey::V4 {
                src: ipv4_at(b, l3 + 12),
                dst: ipv4_at(b, l3 + 16),
                ident: be16(b, l3 + 4),
                protocol: b[l3 + 9],
                tunnel: 0,
            },
            offset,
            more,
            l3_offset: u16::try_from(l3).ok()?,
            data_start: u16::try_from(l3 + ihl).ok()?,
            data_end: u16::try_from(l3 + total).ok()?,
            header_len: ihl as u16,
            next_header_at: 0,
            frag_next_header: 0,
            chain_complete: true,
        })
    }

    fn v6(b: &[u8], l3: usize) -> Option<FragMeta> {
        if b.len() < l3 + 40 {
            return None;
        }
        let end = l3 + 40 + be16(b, l3 + 4) as usize;
        if b.len() < end {
            return None;
        }
        // Walk the per-fragment headers (RFC 8200 §4.5: Hop-by-Hop, Routing, Destination
        // Options before the Fragment header) to the Fragment header.
        let mut nh = b[l3 + 6];
        let mut nh_at = l3 + 6;
        let mut at = l3 + 40;
        let mut count = 0;
        while nh != 44 {
            if !matches!(nh, 0 | 43 | 60) || count == MAX_EXT_HEADERS || end < at + 2 {
                return None;
            }
            let len = (b[at + 1] as usize + 1) * 8;
            if end < at + len {
                return None;
            }
            nh = b[at];
            nh_at = at;
            at += len;
            count += 1;
        }
        if end < at + 8 {
            return None;
        }
        let om = be16(b, at + 2);
        let offset = om & 0xfff8;
        let more = om & 1 != 0;
        if offset == 0 && !more {
            return None;
        }
        let data_start = at + 8;
        let frag_next = b[at];
        let chain_complete = offset != 0 || chain_complete(b, data_start, end, frag_next, count + 1);
        Some(FragMeta {
            key: FragKey::V6 {
                src: ipv6_at(b, l3 + 8),
                dst: ipv6_at(b, l3 + 24),
                ident: be32(b, at + 4),
                tunnel: 0,
            },
            offset,
            more,
            l3_offset: u16::try_from(l3).ok()?,
            data_start: u16::try_from(data_start).ok()?,
            data_end: u16::try_from(end).ok()?,
            header_len: (at - l3 - 40) as u16,
            next_header_at: u16::try_from(nh_at).ok()?,
            frag_next_header: frag_next,
            chain_complete,
        })
    }

    /// Length of the fragment's data.
    pub fn data_len(&self) -> usize {
        (self.data_end - self.data_start) as usize
    }

    /// End of the fragment's data in the original datagram's data, in bytes.
    pub fn end(&self) -> u32 {
        self.offset as u32 + self.data_len() as u32
    }
}

/// RFC 7112 §5: "the first fragment of a fragmented packet MUST contain the entire IPv6 header
/// chain", which ends with the upper-layer header when there is one (§2). Walks the extension
/// headers of the fragmentable part from `at` and checks that they, and the minimum header of
/// the upper-layer protocol, end before `end`.
///
/// Minimum upper-layer header lengths: TCP 20 (RFC 9293 §3.1), UDP 8 (RFC 768), ICMPv6 8 (the
/// type/code/checksum word and the 4-byte message body every RFC 4443 message starts with), GRE
/// 4 (RFC 2784), ESP 8 (SPI and sequence number, RFC 4303); 0 for protocols we do not know.
fn chain_complete(b: &[u8], mut at: usize, end: usize, mut nh: u8, mut count: usize) -> bool {
    loop {
        let min = match nh {
            59 => return true,  // No Next Header (RFC 8200 §4.7)
            44 => return false, // a second Fragment header is malformed (RFC 8200 §4.5)
            6 => 20,
            17 => 8,
            58 => 8,
            47 => 4,
            50 => 8,
            0 | 43 | 60 | 51 | 135 | 139 | 140 => {
                if count >= MAX_EXT_HEADERS || end < at + 2 {
                    return false;
                }
                // AH counts its length in 4-octet units minus 2 (RFC 4302 §2.2); the others in
                // 8-octet units not counting the first 8 (RFC 8200 §4, RFC 6564).
                let len = if nh == 51 {
                    (b[at + 1] as usize + 2) * 4
                } else {
                    (b[at + 1] as usize + 1) * 8
                };
                if end < at + len {
                    return false;
                }
                nh = b[at];
                at += len;
                count += 1;
                continue;
            }
            _ => 0,
        };
        return at + min <= end;
    }
}
