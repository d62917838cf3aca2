//! IPv6 headers (RFC 8200): the fixed header and a bounded walk over the extension headers
//! (hop-by-hop, routing, fragment, destination options).

use super::checksum;
use super::{be16, be32, ipv6_at, put_be16, put_be32, Error, EthernetAddress, IpProtocol, Result};
use std::net::Ipv6Addr;

mod field {
    use core::ops::Range;
    pub(super) const VER_TC_FLOW: usize = 0;
    pub(super) const LENGTH: usize = 4;
    pub(super) const NXT_HDR: usize = 6;
    pub(super) const HOP_LIMIT: usize = 7;
    pub(super) const SRC: Range<usize> = 8..24;
    pub(super) const DST: Range<usize> = 24..40;
    /// Fragment header (RFC 8200 §4.5), relative to its start.
    pub(super) const FRAG_OFF_M: usize = 2;
    pub(super) const FRAG_IDENT: usize = 4;
    pub(super) const FRAG_LEN: usize = 8;
}

/// Length of the fixed IPv6 header.
pub const HEADER_LEN: usize = 40;
/// Most extension headers [`Ipv6Packet::ext_chain`] walks before calling the chain malformed.
/// Real traffic carries two or three; a long chain is an attack on the parser (RFC 9098).
pub const MAX_EXT_HEADERS: usize = 8;

/// ff02::1, the link-local all-nodes group.
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// The solicited-node multicast group of `a`, ff02::1:ffXX:XXXX (RFC 4291 §2.7.1).
#[inline]
pub fn solicited_node(a: &Ipv6Addr) -> Ipv6Addr {
    let o = a.octets();
    Ipv6Addr::from([0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, o[13], o[14], o[15]])
}

/// Whether `a` is a solicited-node multicast group (ff02::1:ff00:0/104).
#[inline]
pub fn is_solicited_node(a: &Ipv6Addr) -> bool {
    a.octets()[..13] == [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff]
}

/// The Ethernet address an IPv6 multicast group maps to, 33:33 + its last 32 bits (RFC 2464 §7).
#[inline]
pub fn multicast_mac(a: &Ipv6Addr) -> EthernetAddress {
    let o = a.octets();
    EthernetAddress([0x33, 0x33, o[12], o[13], o[14], o[15]])
}

/// A Fragment header (RFC 8200 §4.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6FragmentHeader {
    /// Offset of the fragment header from the start of the IPv6 header.
    pub header_offset: usize,
    /// Fragment offset in bytes.
    pub offset: u16,
    /// More Fragments.
    pub more: bool,
    /// Identification.
    pub ident: u32,
}

/// The result of walking the extension headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6ExtChain {
    /// The upper-layer protocol: the first next-header value that is not an extension header
    /// walked here. For a non-first fragment it is the fragment header's next header, whose
    /// header is *not* at `upper_offset` (that holds a slice of the fragmentable part).
    pub upper: IpProtocol,
    /// Offset of the upper-layer header from the start of the IPv6 header.
    pub upper_offset: usize,
    /// Number of extension headers walked.
    pub count: u8,
    /// The fragment header, if the chain has one.
    pub fragment: Option<Ipv6FragmentHeader>,
}

/// A view over an IPv6 packet.
///
/// After [`Ipv6Packet::new_checked`]: `40 + payload_len <= buffer.len()`. Bytes beyond that
/// (Ethernet padding) are not part of [`Ipv6Packet::payload`].
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Validates version 6 and that the payload length fits the buffer (RFC 8200 §3).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[field::VER_TC_FLOW] >> 4 != 6 {
            return Err(Error::Malformed);
        }
        if b.len() < HEADER_LEN + be16(b, field::LENGTH) as usize {
            return Err(Error::Truncated);
        }
        Ok(Ipv6Packet { buffer })
    }

    #[inline]
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Traffic class.
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        ((be32(self.b(), field::VER_TC_FLOW) >> 20) & 0xff) as u8
    }
    /// Flow label.
    #[inline]
    pub fn flow_label(&self) -> u32 {
        be32(self.b(), field::VER_TC_FLOW) & 0x000f_ffff
    }
    /// Payload length (extension headers included).
    #[inline]
    pub fn payload_len(&self) -> usize {
        be16(self.b(), field::LENGTH) as usize
    }
    /// Header length plus payload length.
    #[inline]
    pub fn total_len(&self) -> usize {
        HEADER_LEN + self.payload_len()
    }
    /// Next header of the fixed header.
    #[inline]
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol::from(self.b()[field::NXT_HDR])
    }
    /// Hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.b()[field::HOP_LIMIT]
    }
    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv6Addr {
        ipv6_at(self.b(), field::SRC.start)
    }
    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv6Addr {
        ipv6_at(self.b(), field::DST.start)
    }
    /// The payload: extension headers and upper layer, without trailing padding.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.b()[HEADER_LEN..self.total_len()]
    }

    /// Walks the extension headers (RFC 8200 §4) up to the upper-layer header.
    ///
    /// - [`Error::Truncated`] when a header runs past the payload length (RFC 7112: the first
    ///   fragment carries the whole chain, so this holds for first fragments too);
    /// - [`Error::Malformed`] when hop-by-hop is not first (RFC 8200 §4.1: "MUST appear
    ///   immediately after the IPv6 header"), when the chain holds more than
    ///   [`MAX_EXT_HEADERS`] headers, or more than one fragment header.
    ///
    /// The walk stops after a fragment header whose offset is not zero: what follows is the
    /// middle of the fragmentable part, not a header.
    #[inline]
    pub fn ext_chain(&self) -> Result<Ipv6ExtChain> {
        let b = self.b();
        let end = self.total_len();
        let mut next = self.next_header();
        let mut at = HEADER_LEN;
        let mut count = 0u8;
        let mut fragment = None;
        let mut stop = false;
        while !stop {
            match next {
                IpProtocol::HOP_BY_HOP | IpProtocol::IPV6_ROUTE | IpProtocol::IPV6_OPTS => {
                    if next == IpProtocol::HOP_BY_HOP && count != 0 {
                        return Err(Error::Malformed);
                    }
                    // Next Header, Hdr Ext Len in 8-octet units not counting the first 8.
                    if end < at + 2 {
                        return Err(Error::Truncated);
                    }
                    let len = (b[at + 1] as usize + 1) * 8;
                    if end < at + len {
                        return Err(Error::Truncated);
                    }
                    next = IpProtocol::from(b[at]);
                    at += len;
                }
                IpProtocol::IPV6_FRAG => {
                    if fragment.is_some() {
                        return Err(Error::Malformed);
                    }
                    if end < at + field::FRAG_LEN {
                        return Err(Error::Truncated);
                    }
                    let om = be16(b, at + field::FRAG_OFF_M);
                    let f = Ipv6FragmentHeader {
                        header_offset: at,
                        offset: om & 0xfff8,
                        more: om & 1 != 0,
                        ident: be32(b, at + field::FRAG_IDENT),
                    };
                    fragment = Some(f);
                    next = IpProtocol::from(b[at]);
                    at += field::FRAG_LEN;
                    stop = f.offset != 0;
                }
                _ => break,
            }
            count += 1;
            if count as usize > MAX_EXT_HEADERS {
                return Err(Error::Malformed);
            }
        }
        Ok(Ipv6ExtChain {
            upper: next,
            upper_offset: at,
            count,
            fragment,
        })
    }

    /// Gives the buffer back.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    #[inline]
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the payload length.
    #[inline]
    pub fn set_payload_len(&mut self, len: u16) {
        let b = self.bm();
        b[field::LENGTH..field::LENGTH + 2].copy_from_slice(&len.to_be_bytes());
    }
    /// Sets the hop limit.
    #[inline]
    pub fn set_hop_limit(&mut self, v: u8) {
        self.bm()[field::HOP_LIMIT] = v;
    }
    /// Sets the next header of the fixed header.
    #[inline]
    pub fn set_next_header(&mut self, v: IpProtocol) {
        self.bm()[field::NXT_HDR] = v.into();
    }
    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: &Ipv6Addr) {
        self.bm()[field::SRC].copy_from_slice(&a.octets());
    }
    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: &Ipv6Addr) {
        self.bm()[field::DST].copy_from_slice(&a.octets());
    }
    /// The payload, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.total_len();
        &mut self.bm()[HEADER_LEN..end]
    }
}

/// Partial checksum sum of the pseudo-header for an upper-layer packet of `len` bytes carried by
/// an IPv6 packet from `src` to `dst` (RFC 8200 §8.1).
#[inline]
pub fn pseudo_sum(src: &Ipv6Addr, dst: &Ipv6Addr, protocol: IpProtocol, len: usize) -> u32 {
    checksum::pseudo_v6(src, dst, protocol.into(), len as u32)
}

/// The fields of an IPv6 fixed header the fast path emits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6Repr {
    /// Source.
    pub src: Ipv6Addr,
    /// Destination.
    pub dst: Ipv6Addr,
    /// Next header.
    pub next_header: IpProtocol,
    /// Payload length.
    pub payload_len: u16,
    /// Hop limit.
    pub hop_limit: u8,
}

impl Ipv6Repr {
    /// Writes the 40-byte fixed header (traffic class and flow label zero) into the front of
    /// `b` (caller sizes `b`).
    #[inline]
    pub fn emit(&self, b: &mut [u8]) {
        put_be32(b, field::VER_TC_FLOW, 6 << 28);
        put_be16(b, field::LENGTH, self.payload_len);
        b[field::NXT_HDR] = self.next_header.into();
        b[field::HOP_LIMIT] = self.hop_limit;
        b[field::SRC].copy_from_slice(&self.src.octets());
        b[field::DST].copy_from_slice(&self.dst.octets());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2001:db8::2 -> 2001:db8::1, UDP, hop limit 64, payload 8 (a bare UDP header).
    const PACKET: [u8; 48] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x08, 17, 64, //
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, //
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, //
        0x30, 0x39, 0x00, 0x07, 0x00, 0x08, 0x00, 0x00,
    ];

    fn with_ext(first: u8, exts: &[&[u8]]) -> Vec<u8> {
        let mut v = PACKET[..40].to_vec();
        v[6] = first;
        for e in exts {
            v.extend_from_slice(e);
        }
        v.extend_from_slice(&PACKET[40..]);
        let plen = (v.len() - 40) as u16;
        v[4..6].copy_from_slice(&plen.to_be_bytes());
        v
    }

    #[test]
    fn parse_golden() {
        let p = Ipv6Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!(p.payload_len(), 8);
        assert_eq!(p.next_header(), IpProtocol::UDP);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.traffic_class(), 0);
        assert_eq!(p.flow_label(), 0);
        assert_eq!(p.src_addr(), "2001:db8::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst_addr(), "2001:db8::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.payload(), &PACKET[40..]);
        let c = p.ext_chain().unwrap();
        assert_eq!(
            c,
            Ipv6ExtChain {
                upper: IpProtocol::UDP,
                upper_offset: 40,
                count: 0,
                fragment: None
            }
        );
    }

    #[test]
    fn emit_golden() {
        let mut b = [0u8; 40];
        Ipv6Repr {
            src: "2001:db8::2".parse().unwrap(),
            dst: "2001:db8::1".parse().unwrap(),
            next_header: IpProtocol::UDP,
            payload_len: 8,
            hop_limit: 64,
        }
        .emit(&mut b);
        assert_eq!(b[..], PACKET[..40]);
    }

    #[test]
    fn truncated_overlong_and_version() {
        assert_eq!(Ipv6Packet::new_checked(&PACKET[..39]).unwrap_err(), Error::Truncated);
        assert_eq!(Ipv6Packet::new_checked(&PACKET[..47]).unwrap_err(), Error::Truncated);
        let mut b = PACKET;
        b[0] = 0x40;
        assert_eq!(Ipv6Packet::new_checked(&b[..]).unwrap_err(), Error::Malformed);
        let mut v = PACKET.to_vec();
        v.extend_from_slice(&[0; 10]);
        let p = Ipv6Packet::new_checked(&v[..]).unwrap();
        assert_eq!(p.payload(), &PACKET[40..]);
    }

    #[test]
    fn walks_extension_headers() {
        let hbh: &[u8] = &[60, 0, 1, 4, 0, 0, 0, 0]; // -> dst opts, PadN
        let dst: &[u8] = &[43, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]; // -> routing, 16 bytes
        let rt: &[u8] = &[44, 0, 4, 0, 0, 0, 0, 0]; // -> fragment, type 4 segments left 0
        let frag: &[u8] = &[17, 0, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef]; // offset 0, M, -> UDP
        let v = with_ext(0, &[hbh, dst, rt, frag]);
        let p = Ipv6Packet::new_checked(&v[..]).unwrap();
        let c = p.ext_chain().unwrap();
        assert_eq!(c.upper, IpProtocol::UDP);
        assert_eq!(c.upper_offset, 40 + 8 + 16 + 8 + 8);
        assert_eq!(c.count, 4);
        assert_eq!(
            c.fragment,
            Some(Ipv6FragmentHeader {
                header_offset: 40 + 32,
                offset: 0,
                more: true,
                ident: 0xdeadbeef
            })
        );
        assert_eq!(&v[c.upper_offset..c.upper_offset + 2], &[0x30, 0x39]);
    }

    #[test]
    fn non_first_fragment_stops_the_walk() {
        let frag: &[u8] = &[17, 0, 0x05, 0x28, 0, 0, 0, 7]; // offset 1320, M clear
        let v = with_ext(44, &[frag]);
        let c = Ipv6Packet::new_checked(&v[..]).unwrap().ext_chain().unwrap();
        assert_eq!(c.upper, IpProtocol::UDP);
        assert_eq!(c.upper_offset, 48);
        let f = c.fragment.unwrap();
        assert_eq!((f.offset, f.more, f.ident), (1320, false, 7));
    }

    #[test]
    fn bad_chains() {
        let opts: &[u8] = &[60, 0, 1, 4, 0, 0, 0, 0];
        // nine destination-options headers: over the bound
        let v = with_ext(60, &[opts; 9]);
        assert_eq!(
            Ipv6Packet::new_checked(&v[..]).unwrap().ext_chain(),
            Err(Error::Malformed)
        );
        // eight is fine (the last one points at 60 again, so end it with UDP)
        let last: &[u8] = &[17, 0, 1, 4, 0, 0, 0, 0];
        let mut eight = vec![opts; 7];
        eight.push(last);
        let v = with_ext(60, &eight);
        assert_eq!(Ipv6Packet::new_checked(&v[..]).unwrap().ext_chain().unwrap().count, 8);
        // hop-by-hop not first
        let to_hbh: &[u8] = &[0, 0, 1, 4, 0, 0, 0, 0];
        let hbh: &[u8] = &[17, 0, 1, 4, 0, 0, 0, 0];
        let v = with_ext(60, &[to_hbh, hbh]);
        assert_eq!(
            Ipv6Packet::new_checked(&v[..]).unwrap().ext_chain(),
            Err(Error::Malformed)
        );
        // a header whose length runs past the payload
        let long: &[u8] = &[17, 4, 1, 4, 0, 0, 0, 0];
        let v = with_ext(60, &[long]);
        assert_eq!(
            Ipv6Packet::new_checked(&v[..]).unwrap().ext_chain(),
            Err(Error::Truncated)
        );
        // chain that ends exactly at the payload end, with one byte of the next header missing
        let mut v = with_ext(60, &[opts]);
        v.truncate(48);
        v[4..6].copy_from_slice(&8u16.to_be_bytes());
        assert_eq!(
            Ipv6Packet::new_checked(&v[..]).unwrap().ext_chain(),
            Err(Error::Truncated)
        );
        // two fragment headers
        let f1: &[u8] = &[44, 0, 0, 1, 0, 0, 0, 1];
        let f2: &[u8] = &[17, 0, 0, 1, 0, 0, 0, 1];
        let v = with_ext(44, &[f1, f2]);
        assert_eq!(
            Ipv6Packet::new_checked(&v[..]).unwrap().ext_chain(),
            Err(Error::Malformed)
        );
    }

    #[test]
    fn multicast_helpers() {
        let a: Ipv6Addr = "2001:db8::12:3456".parse().unwrap();
        let s = solicited_node(&a);
        assert_eq!(s, "ff02::1:ff12:3456".parse::<Ipv6Addr>().unwrap());
        assert!(is_solicited_node(&s));
        assert!(!is_solicited_node(&ALL_NODES));
        assert_eq!(multicast_mac(&s), EthernetAddress([0x33, 0x33, 0xff, 0x12, 0x34, 0x56]));
    }
}
