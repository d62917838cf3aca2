//! IPv4 headers (RFC 791), options included.

use super::checksum;
use super::{be16, ipv4_at, put_be16, Error, IpProtocol, Result};
use std::net::Ipv4Addr;

mod field {
    use core::ops::Range;
    pub(super) const VER_IHL: usize = 0;
    pub(super) const DSCP_ECN: usize = 1;
    pub(super) const LENGTH: usize = 2;
    pub(super) const IDENT: usize = 4;
    pub(super) const FLG_OFF: usize = 6;
    pub(super) const TTL: usize = 8;
    pub(super) const PROTOCOL: usize = 9;
    pub(super) const CHECKSUM: usize = 10;
    pub(super) const SRC: Range<usize> = 12..16;
    pub(super) const DST: Range<usize> = 16..20;
}

/// Length of an IPv4 header without options.
pub const MIN_HEADER_LEN: usize = 20;
/// Don't Fragment flag in the flags/offset word.
const DF: u16 = 0x4000;
/// More Fragments flag in the flags/offset word.
const MF: u16 = 0x2000;
/// Fragment offset mask (in 8-octet units).
const OFFSET_MASK: u16 = 0x1fff;

/// A view over an IPv4 datagram.
///
/// After [`Ipv4Packet::new_checked`]: `20 <= header_len <= total_len <= buffer.len()`. Bytes
/// beyond `total_len` (Ethernet padding) are not part of [`Ipv4Packet::payload`].
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Validates the length relations (RFC 791 §3.1): version 4, IHL at least 5 words, total
    /// length at least the header and no more than the buffer. Does not verify the checksum
    /// (see [`Ipv4Packet::verify_checksum`]).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[field::VER_IHL] >> 4 != 4 {
            return Err(Error::Malformed);
        }
        let hl = ((b[field::VER_IHL] & 0x0f) as usize) * 4;
        if hl < MIN_HEADER_LEN {
            return Err(Error::Malformed);
        }
        let total = be16(b, field::LENGTH) as usize;
        if total < hl {
            return Err(Error::Malformed);
        }
        if b.len() < total {
            return Err(Error::Truncated);
        }
        Ok(Ipv4Packet { buffer })
    }

    #[inline]
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Header length in bytes (IHL × 4), options included.
    #[inline]
    pub fn header_len(&self) -> usize {
        ((self.b()[field::VER_IHL] & 0x0f) as usize) * 4
    }
    /// DSCP (upper six bits of the former TOS byte).
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.b()[field::DSCP_ECN] >> 2
    }
    /// ECN (lower two bits).
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.b()[field::DSCP_ECN] & 3
    }
    /// Total length: header plus payload.
    #[inline]
    pub fn total_len(&self) -> usize {
        be16(self.b(), field::LENGTH) as usize
    }
    /// Identification.
    #[inline]
    pub fn ident(&self) -> u16 {
        be16(self.b(), field::IDENT)
    }
    /// Don't Fragment.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        be16(self.b(), field::FLG_OFF) & DF != 0
    }
    /// More Fragments.
    #[inline]
    pub fn more_frags(&self) -> bool {
        be16(self.b(), field::FLG_OFF) & MF != 0
    }
    /// Fragment offset in bytes.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (be16(self.b(), field::FLG_OFF) & OFFSET_MASK) << 3
    }
    /// Whether this is a fragment (MF set or offset non-zero).
    #[inline]
    pub fn is_fragment(&self) -> bool {
        be16(self.b(), field::FLG_OFF) & (MF | OFFSET_MASK) != 0
    }
    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.b()[field::TTL]
    }
    /// Protocol of the payload.
    #[inline]
    pub fn protocol(&self) -> IpProtocol {
        IpProtocol::from(self.b()[field::PROTOCOL])
    }
    /// Header checksum as stored.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.b(), field::CHECKSUM)
    }
    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv4Addr {
        ipv4_at(self.b(), field::SRC.start)
    }
    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv4Addr {
        ipv4_at(self.b(), field::DST.start)
    }
    /// The options bytes (empty when IHL is 5).
    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.b()[MIN_HEADER_LEN..self.header_len()]
    }
    /// Whether the header checksum is right (RFC 791 §3.1, RFC 1071).
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::verify(&self.b()[..self.header_len()])
    }
    /// The payload: from the end of the header to `total_len` (trailing padding excluded).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..self.total_len()]
    }
    /// Gives the buffer back.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    #[inline]
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the time to live (checksum not updated).
    #[inline]
    pub fn set_ttl(&mut self, v: u8) {
        self.bm()[field::TTL] = v;
    }
    /// Sets the header length in bytes, a multiple of 4 from 20 to 60 (checksum not updated).
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        let b = self.bm();
        b[field::VER_IHL] = (b[field::VER_IHL] & 0xf0) | ((len / 4) as u8 & 0x0f);
    }
    /// Sets the total length (checksum not updated).
    #[inline]
    pub fn set_total_len(&mut self, len: u16) {
        put_be16(self.bm(), field::LENGTH, len);
    }
    /// Sets or clears Don't Fragment (checksum not updated).
    #[inline]
    pub fn set_dont_frag(&mut self, df: bool) {
        let w = be16(self.b(), field::FLG_OFF) & !DF;
        put_be16(self.bm(), field::FLG_OFF, w | if df { DF } else { 0 });
    }
    /// Sets the protocol (checksum not updated).
    #[inline]
    pub fn set_protocol(&mut self, v: IpProtocol) {
        self.bm()[field::PROTOCOL] = v.into();
    }
    /// Sets the source address (checksum not updated).
    #[inline]
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.bm()[field::SRC].copy_from_slice(&a.octets());
    }
    /// Sets the destination address (checksum not updated).
    #[inline]
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.bm()[field::DST].copy_from_slice(&a.octets());
    }
    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        put_be16(self.bm(), field::CHECKSUM, v);
    }
    /// Recomputes the header checksum over the whole header.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self.header_len();
        let c = checksum::checksum(&self.b()[..hl]);
        self.set_checksum(c);
    }
    /// Sets the TTL and updates the checksum incrementally (RFC 1624): the TTL shares its
    /// 16-bit word with the protocol.
    #[inline]
    pub fn set_ttl_update_checksum(&mut self, ttl: u8) {
        let proto = self.b()[field::PROTOCOL];
        let old = u16::from_be_bytes([self.ttl(), proto]);
        let new = u16::from_be_bytes([ttl, proto]);
        let c = checksum::update16(self.checksum(), old, new);
        self.set_ttl(ttl);
        self.set_checksum(c);
    }
    /// The payload, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (hl, tl) = (self.header_len(), self.total_len());
        &mut self.bm()[hl..tl]
    }
}

/// The fields of an option-less IPv4 header the fast path emits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source.
    pub src: Ipv4Addr,
    /// Destination.
    pub dst: Ipv4Addr,
    /// Payload protocol.
    pub protocol: IpProtocol,
    /// Payload length in bytes (the header adds 20).
    pub payload_len: u16,
    /// Time to live.
    pub ttl: u8,
    /// DSCP and ECN byte.
    pub dscp_ecn: u8,
    /// Identification.
    pub ident: u16,
    /// Don't Fragment.
    pub dont_frag: bool,
}

impl Ipv4Repr {
    /// Writes the 20-byte header, checksum included, into the front of `b` (caller sizes `b`
    /// to at least [`MIN_HEADER_LEN`]). `payload_len` must not exceed `65535 - 20`.
    #[inline]
    pub fn emit(&self, b: &mut [u8]) {
        b[field::VER_IHL] = 0x45;
        b[field::DSCP_ECN] = self.dscp_ecn;
        put_be16(b, field::LENGTH, self.payload_len.saturating_add(MIN_HEADER_LEN as u16));
        put_be16(b, field::IDENT, self.ident);
        put_be16(b, field::FLG_OFF, if self.dont_frag { DF } else { 0 });
        b[field::TTL] = self.ttl;
        b[field::PROTOCOL] = self.protocol.into();
        put_be16(b, field::CHECKSUM, 0);
        b[field::SRC].copy_from_slice(&self.src.octets());
        b[field::DST].copy_from_slice(&self.dst.octets());
        let c = checksum::checksum(&b[..MIN_HEADER_LEN]);
        put_be16(b, field::CHECKSUM, c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // 192.0.2.2 -> 192.0.2.1, ICMP, TTL 64, DF, id 0x1c46, total 28: echo request header only.
    const PACKET: [u8; 28] = [
        0x45, 0x00, 0x00, 0x1c, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x01, 0x9a, 0x97, 192, 0, 2, 2, 192, 0, 2, 1, // IP
        0x08, 0x00, 0xf7, 0xff, 0x00, 0x00, 0x00, 0x00, // ICMP echo request id 0 seq 0
    ];

    #[test]
    fn parse_golden() {
        let p = Ipv4Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 28);
        assert_eq!(p.ident(), 0x1c46);
        assert!(p.dont_frag());
        assert!(!p.more_frags());
        assert!(!p.is_fragment());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), IpProtocol::ICMP);
        assert_eq!(p.src_addr(), Ipv4Addr::new(192, 0, 2, 2));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(192, 0, 2, 1));
        assert!(p.verify_checksum());
        assert_eq!(p.payload(), &PACKET[20..]);
        assert!(p.options().is_empty());
    }

    #[test]
    fn emit_golden() {
        let mut b = [0u8; 20];
        Ipv4Repr {
            src: Ipv4Addr::new(192, 0, 2, 2),
            dst: Ipv4Addr::new(192, 0, 2, 1),
            protocol: IpProtocol::ICMP,
            payload_len: 8,
            ttl: 64,
            dscp_ecn: 0,
            ident: 0x1c46,
            dont_frag: true,
        }
        .emit(&mut b);
        assert_eq!(b[..], PACKET[..20]);
    }

    #[test]
    fn truncated_and_bad_lengths() {
        assert_eq!(Ipv4Packet::new_checked(&PACKET[..19]).unwrap_err(), Error::Truncated);
        // total length 28 but only 27 bytes
        assert_eq!(Ipv4Packet::new_checked(&PACKET[..27]).unwrap_err(), Error::Truncated);
        let mut b = PACKET;
        b[0] = 0x65; // version 6
        assert_eq!(Ipv4Packet::new_checked(&b[..]).unwrap_err(), Error::Malformed);
        let mut b = PACKET;
        b[0] = 0x44; // IHL 4
        assert_eq!(Ipv4Packet::new_checked(&b[..]).unwrap_err(), Error::Malformed);
        let mut b = PACKET;
        b[3] = 19; // total length below the header
        assert_eq!(Ipv4Packet::new_checked(&b[..]).unwrap_err(), Error::Malformed);
        let mut b = PACKET;
        b[0] = 0x47; // 28-byte header claimed, but total length 28 leaves no payload: fine
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.options().len(), 8);
        assert!(p.payload().is_empty());
        b[0] = 0x48; // 32-byte header, total 28
        assert_eq!(Ipv4Packet::new_checked(&b[..]).unwrap_err(), Error::Malformed);
    }

    #[test]
    fn overlong_buffer_is_trimmed_to_total_length() {
        let mut v = PACKET.to_vec();
        v.extend_from_slice(&[0xee; 18]); // Ethernet padding
        let p = Ipv4Packet::new_checked(&v[..]).unwrap();
        assert_eq!(p.payload(), &PACKET[20..]);
    }

    #[test]
    fn checksum_and_fragment_fields() {
        let mut b = PACKET;
        b[11] ^= 1;
        assert!(!Ipv4Packet::new_checked(&b[..]).unwrap().verify_checksum());
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum();
        assert!(p.verify_checksum());
        p.set_ttl_update_checksum(1);
        assert_eq!(p.ttl(), 1);
        assert!(p.verify_checksum());

        let mut b = PACKET;
        b[6] = 0x20 | 0x01; // MF, offset 0x100 units
        b[7] = 0x00;
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.more_frags());
        assert!(!p.dont_frag());
        assert!(p.is_fragment());
        assert_eq!(p.frag_offset(), 0x100 * 8);
    }
}
