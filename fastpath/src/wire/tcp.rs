//! TCP headers (RFC 9293): ports, sequence numbers, flags. The fast path reads TCP (flow hash,
//! flags for later stages) and does not terminate it.

use super::checksum;
use super::{be16, be32, put_be16, Error, Result};
use core::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

mod field {
    pub(super) const SRC_PORT: usize = 0;
    pub(super) const DST_PORT: usize = 2;
    pub(super) const SEQ: usize = 4;
    pub(super) const ACK: usize = 8;
    pub(super) const OFF: usize = 12;
    pub(super) const FLAGS: usize = 13;
    pub(super) const WINDOW: usize = 14;
    pub(super) const CHECKSUM: usize = 16;
    pub(super) const URGENT: usize = 18;
}

/// Length of a TCP header without options.
pub const MIN_HEADER_LEN: usize = 20;
const PROTO: u8 = 6;

/// The eight TCP control bits of byte 13 (RFC 9293 §3.1, RFC 3168 for CWR/ECE).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    /// No more data from sender.
    pub const FIN: TcpFlags = TcpFlags(0x01);
    /// Synchronize sequence numbers.
    pub const SYN: TcpFlags = TcpFlags(0x02);
    /// Reset the connection.
    pub const RST: TcpFlags = TcpFlags(0x04);
    /// Push function.
    pub const PSH: TcpFlags = TcpFlags(0x08);
    /// Acknowledgment field significant.
    pub const ACK: TcpFlags = TcpFlags(0x10);
    /// Urgent pointer field significant.
    pub const URG: TcpFlags = TcpFlags(0x20);
    /// ECN-Echo.
    pub const ECE: TcpFlags = TcpFlags(0x40);
    /// Congestion Window Reduced.
    pub const CWR: TcpFlags = TcpFlags(0x80);

    /// Whether every bit of `other` is set.
    #[inline]
    pub fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for TcpFlags {
    type Output = TcpFlags;
    #[inline]
    fn bitor(self, o: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | o.0)
    }
}

impl fmt::Debug for TcpFlags {
    #[inline]
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        const NAMES: [&str; 8] = ["FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"];
        let mut first = true;
        for (i, n) in NAMES.iter().enumerate() {
            if self.0 & (1 << i) != 0 {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(n)?;
                first = false;
            }
        }
        if first {
            f.write_str("-")?;
        }
        Ok(())
    }
}

/// A view over a TCP segment.
///
/// After [`TcpPacket::new_checked`]: `20 <= header_len <= buffer.len()`. The segment runs to the
/// end of the buffer: the caller hands in exactly the IP payload.
#[derive(Debug, Clone)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Validates the data offset: at least five words (RFC 9293 §3.1) and within the buffer.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = (b[field::OFF] >> 4) as usize * 4;
        if hl < MIN_HEADER_LEN {
            return Err(Error::Malformed);
        }
        if b.len() < hl {
            return Err(Error::Truncated);
        }
        Ok(TcpPacket { buffer })
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
    /// Sequence number.
    #[inline]
    pub fn seq_number(&self) -> u32 {
        be32(self.b(), field::SEQ)
    }
    /// Acknowledgment number.
    #[inline]
    pub fn ack_number(&self) -> u32 {
        be32(self.b(), field::ACK)
    }
    /// Header length in bytes (data offset × 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        (self.b()[field::OFF] >> 4) as usize * 4
    }
    /// Control bits.
    #[inline]
    pub fn flags(&self) -> TcpFlags {
        TcpFlags(self.b()[field::FLAGS])
    }
    /// Window.
    #[inline]
    pub fn window(&self) -> u16 {
        be16(self.b(), field::WINDOW)
    }
    /// Checksum as stored.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.b(), field::CHECKSUM)
    }
    /// Urgent pointer.
    #[inline]
    pub fn urgent(&self) -> u16 {
        be16(self.b(), field::URGENT)
    }
    /// The options bytes.
    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.b()[MIN_HEADER_LEN..self.header_len()]
    }
    /// The payload.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..]
    }
    /// Verifies the checksum over IPv4 (the whole buffer is the segment).
    #[inline]
    pub fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        let b = self.b();
        let s = checksum::pseudo_v4(src, dst, PROTO, b.len() as u16);
        checksum::fold(checksum::sum(s, b)) == 0xffff
    }
    /// Verifies the checksum over IPv6.
    #[inline]
    pub fn verify_checksum_v6(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        let b = self.b();
        let s = checksum::pseudo_v6(src, dst, PROTO, b.len() as u32);
        checksum::fold(checksum::sum(s, b)) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
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
    /// Sets the control bits (checksum not updated).
    #[inline]
    pub fn set_flags(&mut self, f: TcpFlags) {
        self.bm()[field::FLAGS] = f.0;
    }
    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        put_be16(self.bm(), field::CHECKSUM, v);
    }
    /// Computes the checksum over IPv4.
    #[inline]
    pub fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let b = self.b();
        let c = checksum::finish(checksum::sum(checksum::pseudo_v4(src, dst, PROTO, b.len() as u16), b));
        self.set_checksum(c);
    }
    /// Computes the checksum over IPv6.
    #[inline]
    pub fn fill_checksum_v6(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let b = self.b();
        let c = checksum::finish(checksum::sum(checksum::pseudo_v6(src, dst, PROTO, b.len() as u32), b));
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
    const DST: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    // 40000 -> 80 SYN, seq 1, window 65535, MSS option 1460, checksum for SRC -> DST.
    const SYN: [u8; 24] = [
        0x9c, 0x40, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x60, 0x02, 0xff, 0xff, 0x77, 0x91, 0, 0, 0x02, 0x04, 0x05,
        0xb4,
    ];

    #[test]
    fn parse_golden() {
        let t = TcpPacket::new_checked(&SYN[..]).unwrap();
        assert_eq!(t.src_port(), 40000);
        assert_eq!(t.dst_port(), 80);
        assert_eq!(t.seq_number(), 1);
        assert_eq!(t.ack_number(), 0);
        assert_eq!(t.header_len(), 24);
        assert_eq!(t.flags(), TcpFlags::SYN);
        assert!(!t.flags().contains(TcpFlags::SYN | TcpFlags::ACK));
        assert_eq!(t.window(), 65535);
        assert_eq!(t.urgent(), 0);
        assert_eq!(t.options(), &[2, 4, 5, 0xb4]);
        assert!(t.payload().is_empty());
        assert!(t.verify_checksum_v4(SRC, DST));
        assert_eq!(format!("{:?}", TcpFlags::SYN | TcpFlags::ACK), "SYN|ACK");
    }

    #[test]
    fn emit_golden() {
        let mut b = SYN;
        b[16] = 0;
        b[17] = 0;
        let mut t = TcpPacket::new_checked(&mut b[..]).unwrap();
        t.fill_checksum_v4(SRC, DST);
        assert_eq!(b, SYN);
        let mut t = TcpPacket::new_checked(&mut b[..]).unwrap();
        t.set_flags(TcpFlags::RST | TcpFlags::ACK);
        t.set_src_port(1);
        t.set_dst_port(2);
        assert_eq!(&b[..4], &[0, 1, 0, 2]);
        assert_eq!(b[13], 0x14);
    }

    #[test]
    fn truncated_overlong_malformed() {
        assert_eq!(TcpPacket::new_checked(&SYN[..19]).unwrap_err(), Error::Truncated);
        assert_eq!(TcpPacket::new_checked(&SYN[..23]).unwrap_err(), Error::Truncated);
        let mut b = SYN;
        b[12] = 0x40; // data offset 4
        assert_eq!(TcpPacket::new_checked(&b[..]).unwrap_err(), Error::Malformed);
        let mut v = SYN.to_vec();
        v.extend_from_slice(b"data");
        assert_eq!(TcpPacket::new_checked(&v[..]).unwrap().payload(), b"data");
    }
}
