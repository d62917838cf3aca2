//! ARP for IPv4 over Ethernet (RFC 826).

use super::{be16, put_be16, Error, EthernetAddress, Result};
use std::net::Ipv4Addr;

/// ARP operation code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArpOperation {
    /// 1
    Request,
    /// 2
    Reply,
    /// Anything else.
    Unknown(u16),
}

impl From<u16> for ArpOperation {
    #[inline]
    fn from(v: u16) -> Self {
        match v {
            1 => ArpOperation::Request,
            2 => ArpOperation::Reply,
            o => ArpOperation::Unknown(o),
        }
    }
}

impl From<ArpOperation> for u16 {
    #[inline]
    fn from(v: ArpOperation) -> u16 {
        match v {
            ArpOperation::Request => 1,
            ArpOperation::Reply => 2,
            ArpOperation::Unknown(o) => o,
        }
    }
}

mod field {
    use core::ops::Range;
    pub(super) const HTYPE: usize = 0;
    pub(super) const PTYPE: usize = 2;
    pub(super) const HLEN: usize = 4;
    pub(super) const PLEN: usize = 5;
    pub(super) const OPER: usize = 6;
    pub(super) const SHA: Range<usize> = 8..14;
    pub(super) const SPA: Range<usize> = 14..18;
    pub(super) const THA: Range<usize> = 18..24;
    pub(super) const TPA: Range<usize> = 24..28;
}

/// Length of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = 28;

/// A view over an Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Validates length and that the packet is Ethernet (htype 1, hlen 6) over IPv4
    /// (ptype 0x0800, plen 4); other hardware or protocol types are [`Error::Unsupported`].
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < PACKET_LEN {
            return Err(Error::Truncated);
        }
        if be16(b, field::HTYPE) != 1 || be16(b, field::PTYPE) != 0x0800 {
            return Err(Error::Unsupported);
        }
        if b[field::HLEN] != 6 || b[field::PLEN] != 4 {
            return Err(Error::Malformed);
        }
        Ok(ArpPacket { buffer })
    }
    /// Operation.
    #[inline]
    pub fn operation(&self) -> ArpOperation {
        ArpOperation::from(be16(self.buffer.as_ref(), field::OPER))
    }
    /// Sender hardware address.
    #[inline]
    pub fn sender_hw(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.buffer.as_ref()[field::SHA])
    }
    /// Sender protocol address.
    #[inline]
    pub fn sender_ip(&self) -> Ipv4Addr {
        ip(&self.buffer.as_ref()[field::SPA])
    }
    /// Target hardware address.
    #[inline]
    pub fn target_hw(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.buffer.as_ref()[field::THA])
    }
    /// Target protocol address.
    #[inline]
    pub fn target_ip(&self) -> Ipv4Addr {
        ip(&self.buffer.as_ref()[field::TPA])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    /// Turns a request into the reply `answer_hw` sends for `answer_ip`, in place (RFC 826
    /// "swap hardware and protocol fields, put the local hardware and protocol addresses in the
    /// sender fields, set the opcode to reply").
    #[inline]
    pub fn make_reply(&mut self, answer_hw: EthernetAddress, answer_ip: Ipv4Addr) {
        let b = self.buffer.as_mut();
        let (sha, spa) = (EthernetAddress::from_bytes(&b[field::SHA]), ip(&b[field::SPA]));
        b[field::THA].copy_from_slice(&sha.0);
        b[field::TPA].copy_from_slice(&spa.octets());
        b[field::SHA].copy_from_slice(&answer_hw.0);
        b[field::SPA].copy_from_slice(&answer_ip.octets());
        put_be16(b, field::OPER, ArpOperation::Reply.into());
    }
}

/// Writes a complete Ethernet/IPv4 ARP packet into the first [`PACKET_LEN`] bytes of `b`.
#[inline]
pub fn emit(b: &mut [u8], op: ArpOperation, sha: EthernetAddress, spa: Ipv4Addr, tha: EthernetAddress, tpa: Ipv4Addr) {
    put_be16(b, field::HTYPE, 1);
    put_be16(b, field::PTYPE, 0x0800);
    b[field::HLEN] = 6;
    b[field::PLEN] = 4;
    put_be16(b, field::OPER, op.into());
    b[field::SHA].copy_from_slice(&sha.0);
    b[field::SPA].copy_from_slice(&spa.octets());
    b[field::THA].copy_from_slice(&tha.0);
    b[field::TPA].copy_from_slice(&tpa.octets());
}

#[inline]
fn ip(b: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(b[0], b[1], b[2], b[3])
}

#[cfg(test)]
mod tests {
    use super::*;

    // who-has 192.0.2.1 tell 192.0.2.2, from 02:00:00:00:00:02
    const REQUEST: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x01, //
        0x02, 0, 0, 0, 0, 0x02, 192, 0, 2, 2, //
        0, 0, 0, 0, 0, 0, 192, 0, 2, 1,
    ];

    #[test]
    fn parse_request() {
        let p = ArpPacket::new_checked(&REQUEST[..]).unwrap();
        assert_eq!(p.operation(), ArpOperation::Request);
        assert_eq!(p.sender_ip(), Ipv4Addr::new(192, 0, 2, 2));
        assert_eq!(p.target_ip(), Ipv4Addr::new(192, 0, 2, 1));
        assert_eq!(p.sender_hw(), EthernetAddress([2, 0, 0, 0, 0, 2]));
    }

    #[test]
    fn reply_golden_bytes() {
        let mut b = REQUEST;
        let me = EthernetAddress([2, 0, 0, 0, 0, 1]);
        ArpPacket::new_checked(&mut b[..])
            .unwrap()
            .make_reply(me, Ipv4Addr::new(192, 0, 2, 1));
        let expect: [u8; 28] = [
            0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x02, //
            0x02, 0, 0, 0, 0, 0x01, 192, 0, 2, 1, //
            0x02, 0, 0, 0, 0, 0x02, 192, 0, 2, 2,
        ];
        assert_eq!(b, expect);
        let mut e = [0u8; 28];
        emit(
            &mut e,
            ArpOperation::Reply,
            me,
            Ipv4Addr::new(192, 0, 2, 1),
            EthernetAddress([2, 0, 0, 0, 0, 2]),
            Ipv4Addr::new(192, 0, 2, 2),
        );
        assert_eq!(e, expect);
    }

    #[test]
    fn rejects_short_and_foreign() {
        assert_eq!(ArpPacket::new_checked(&REQUEST[..27]).unwrap_err(), Error::Truncated);
        let mut b = REQUEST;
        b[1] = 6; // IEEE 802 hardware
        assert_eq!(ArpPacket::new_checked(&b[..]).unwrap_err(), Error::Unsupported);
        let mut b = REQUEST;
        b[4] = 8;
        assert_eq!(ArpPacket::new_checked(&b[..]).unwrap_err(), Error::Malformed);
    }
}
