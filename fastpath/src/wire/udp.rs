//! UDP headers (RFC 768).

use super::checksum;
use super::{be16, put_be16, Error, Result};
use std::net::{Ipv4Addr, Ipv6Addr};

mod field {
    pub(super) const SRC_PORT: usize = 0;
    pub(super) const DST_PORT: usize = 2;
    pub(super) const LENGTH: usize = 4;
    pub(super) const CHECKSUM: usize = 6;
}

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;
const PROTO: u8 = 17;

/// A view over a UDP datagram.
///
/// After [`UdpPacket::new_checked`]: `8 <= len <= buffer.len()`, where `len` is the length
/// field; bytes beyond it are not part of [`UdpPacket::payload`].
#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Validates that the header is present and that the length field covers at least the
    /// header and no more than the buffer (RFC 768 "Length ... minimum value is eight").
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let len = be16(b, field::LENGTH) as usize;
        if len < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if b.len() < len {
            return Err(Error::Truncated);
        }
        Ok(UdpPacket { buffer })
    }

    #[inline]
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Source port.
    #[inline(always)]
    pub fn src_port(&self) -> u16 {
        be16(self.b(), field::SRC_PORT)
    }
    /// Destination port.
    #[inline(always)]
    pub fn dst_port(&self) -> u16 {
        be16(self.b(), field::DST_PORT)
    }
    /// The length field: header plus payload.
    #[inline]
    pub fn len(&self) -> usize {
        be16(self.b(), field::LENGTH) as usize
    }
    /// Whether the payload is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == HEADER_LEN
    }
    /// Checksum as stored.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.b(), field::CHECKSUM)
    }
    /// The payload.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.b()[HEADER_LEN..self.len()]
    }
    /// Verifies the checksum over IPv4: a zero checksum means "none" (RFC 768).
    #[inline]
    pub fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let len = self.len();
        let s = checksum::pseudo_v4(src, dst, PROTO, len as u16);
        checksum::fold(checksum::sum(s, &self.b()[..len])) == 0xffff
    }
    /// Verifies the checksum over IPv6, where it is mandatory: a zero checksum is invalid
    /// (RFC 8200 §8.1).
    #[inline]
    pub fn verify_checksum_v6(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        if self.checksum() == 0 {
            return false;
        }
        let len = self.len();
        let s = checksum::pseudo_v6(src, dst, PROTO, len as u32);
        checksum::fold(checksum::sum(s, &self.b()[..len])) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    #[inline]
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the source port (checksum not updated).
    #[inline]
    pub fn set_src_port(&mut self, v: u16) {
        put_be16(self.bm(), field::SRC_PORT, v);
    }
    /// Sets the destination port (checksum not updated).
    #[inline]
    pub fn set_dst_port(&mut self, v: u16) {
        put_be16(self.bm(), field::DST_PORT, v);
    }
    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        put_be16(self.bm(), field::CHECKSUM, v);
    }
    /// Computes the checksum for IPv4; a computed 0 is sent as 0xffff (RFC 768).
    #[inline]
    pub fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        let len = self.len();
        let s = checksum::pseudo_v4(src, dst, PROTO, len as u16);
        self.fill(s, len);
    }
    /// Computes the checksum for IPv6; a computed 0 is sent as 0xffff (RFC 8200 §8.1).
    #[inline]
    pub fn fill_checksum_v6(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        let len = self.len();
        let s = checksum::pseudo_v6(src, dst, PROTO, len as u32);
        self.fill(s, len);
    }
    #[inline]
    fn fill(&mut self, pseudo: u32, len: usize) {
        self.set_checksum(0);
        let c = checksum::finish(checksum::sum(pseudo, &self.b()[..len]));
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }
    /// The payload, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = self.len();
        &mut self.bm()[HEADER_LEN..len]
    }
}

/// Writes a UDP header for a `payload_len`-byte payload into the front of `b`, checksum zero.
#[inline]
pub fn emit_header(b: &mut [u8], src_port: u16, dst_port: u16, payload_len: u16) {
    put_be16(b, field::SRC_PORT, src_port);
    put_be16(b, field::DST_PORT, dst_port);
    put_be16(b, field::LENGTH, payload_len.saturating_add(HEADER_LEN as u16));
    put_be16(b, field::CHECKSUM, 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
    const DST: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    // 12345 -> 7, payload "hi", checksum over the IPv4 pseudo-header.
    const DATAGRAM: [u8; 10] = [0x30, 0x39, 0x00, 0x07, 0x00, 0x0a, 0xe3, 0x2c, b'h', b'i'];

    #[test]
    fn parse_golden() {
        let u = UdpPacket::new_checked(&DATAGRAM[..]).unwrap();
        assert_eq!(u.src_port(), 12345);
        assert_eq!(u.dst_port(), 7);
        assert_eq!(u.len(), 10);
        assert_eq!(u.payload(), b"hi");
        assert!(u.verify_checksum_v4(SRC, DST));
        assert!(!u.verify_checksum_v4(DST, Ipv4Addr::new(192, 0, 2, 3)));
    }

    #[test]
    fn emit_golden() {
        let mut b = [0u8; 10];
        emit_header(&mut b, 12345, 7, 2);
        b[8..].copy_from_slice(b"hi");
        let mut u = UdpPacket::new_checked(&mut b[..]).unwrap();
        u.fill_checksum_v4(SRC, DST);
        assert_eq!(b, DATAGRAM);
    }

    #[test]
    fn truncated_overlong_malformed() {
        assert_eq!(UdpPacket::new_checked(&DATAGRAM[..7]).unwrap_err(), Error::Truncated);
        assert_eq!(UdpPacket::new_checked(&DATAGRAM[..9]).unwrap_err(), Error::Truncated);
        let mut b = DATAGRAM;
        b[5] = 7;
        assert_eq!(UdpPacket::new_checked(&b[..]).unwrap_err(), Error::Malformed);
        let mut v = DATAGRAM.to_vec();
        v.push(0);
        assert_eq!(UdpPacket::new_checked(&v[..]).unwrap().payload(), b"hi");
    }

    #[test]
    fn v6_checksum_is_mandatory() {
        let a: Ipv6Addr = "2001:db8::2".parse().unwrap();
        let z: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let mut b = DATAGRAM;
        let mut u = UdpPacket::new_checked(&mut b[..]).unwrap();
        u.fill_checksum_v6(&a, &z);
        assert!(u.verify_checksum_v6(&a, &z));
        assert!(!u.verify_checksum_v6(&z, &z));
        u.set_checksum(0);
        assert!(!u.verify_checksum_v6(&a, &z));
        assert!(u.verify_checksum_v4(SRC, DST));
    }
}
