//! Ethernet II frames, with up to two VLAN tags (IEEE 802.1Q and 802.1ad QinQ).

use super::{be16, put_be16, Error, Result};
use core::fmt;
use core::str::FromStr;

/// A 48-bit MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct EthernetAddress(pub [u8; 6]);

impl EthernetAddress {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: EthernetAddress = EthernetAddress([0xff; 6]);

    /// Builds an address from the first six bytes of `b`; `b` must hold at least six.
    #[inline]
    pub fn from_bytes(b: &[u8]) -> Self {
        let mut a = [0u8; 6];
        a.copy_from_slice(&b[..6]);
        EthernetAddress(a)
    }
    /// The bytes of the address.
    #[inline]
    pub fn as_bytes(&self) -> &[u8; 6] {
        &self.0
    }
    /// Whether this is the broadcast address.
    #[inline]
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }
    /// Whether the group bit is set (multicast, broadcast included).
    #[inline]
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 != 0
    }
    /// Whether this may be a frame's source: not multicast, not all zero.
    #[inline]
    pub fn is_unicast(&self) -> bool {
        !self.is_multicast() && self.0 != [0; 6]
    }
}

impl fmt::Display for EthernetAddress {
    #[inline]
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for EthernetAddress {
    #[inline]
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for EthernetAddress {
    type Err = ();
    /// Parses `aa:bb:cc:dd:ee:ff` (or with `-`).
    #[inline]
    fn from_str(s: &str) -> core::result::Result<Self, ()> {
        let mut out = [0u8; 6];
        let mut n = 0;
        for part in s.split([':', '-']) {
            if n == 6 || part.len() != 2 {
                return Err(());
            }
            out[n] = u8::from_str_radix(part, 16).map_err(|_| ())?;
            n += 1;
        }
        if n != 6 {
            return Err(());
        }
        Ok(EthernetAddress(out))
    }
}

/// An EtherType. Unknown values are kept, not rejected.
///
/// The number itself (see [`crate::wire::IpProtocol`] for why: no conversion per frame, one
/// compare per test).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct EtherType(pub u16);

impl EtherType {
    /// 0x0800
    pub const IPV4: EtherType = EtherType(0x0800);
    /// 0x0806
    pub const ARP: EtherType = EtherType(0x0806);
    /// 0x86dd
    pub const IPV6: EtherType = EtherType(0x86dd);
    /// 0x8100, IEEE 802.1Q customer tag
    pub const VLAN: EtherType = EtherType(0x8100);
    /// 0x88a8, IEEE 802.1ad service tag
    pub const QINQ: EtherType = EtherType(0x88a8);
}

impl fmt::Debug for EtherType {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match *self {
            EtherType::IPV4 => f.write_str("Ipv4"),
            EtherType::ARP => f.write_str("Arp"),
            EtherType::IPV6 => f.write_str("Ipv6"),
            EtherType::VLAN => f.write_str("Vlan"),
            EtherType::QINQ => f.write_str("QinQ"),
            EtherType(other) => write!(f, "Unknown({other:#06x})"),
        }
    }
}

impl From<u16> for EtherType {
    #[inline]
    fn from(v: u16) -> Self {
        EtherType(v)
    }
}

impl From<EtherType> for u16 {
    #[inline]
    fn from(v: EtherType) -> u16 {
        v.0
    }
}

mod field {
    use core::ops::Range;
    pub(super) const DST: Range<usize> = 0..6;
    pub(super) const SRC: Range<usize> = 6..12;
    pub(super) const ETHERTYPE: usize = 12;
    pub(super) const HEADER_LEN: usize = 14;
    pub(super) const VLAN_TAG_LEN: usize = 4;
}

/// Length of an untagged Ethernet II header.
pub const HEADER_LEN: usize = field::HEADER_LEN;
/// Most VLAN tags we walk (QinQ: a service tag then a customer tag).
pub const MAX_VLAN_TAGS: usize = 2;

/// A view over an Ethernet II frame (without FCS).
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
    /// Offset of the EtherType that names the payload (after VLAN tags).
    inner_type_at: usize,
    vlan_tags: u8,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Validates the frame: the 14-byte header and every VLAN tag (at most [`MAX_VLAN_TAGS`])
    /// must be present. More tags than that is [`Error::Unsupported`].
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < field::HEADER_LEN {
            return Err(Error::Truncated);
        }
        let mut at = field::ETHERTYPE;
        let mut tags = 0u8;
        while let EtherType::VLAN | EtherType::QINQ = EtherType::from(be16(b, at)) {
            if tags as usize == MAX_VLAN_TAGS {
                return Err(Error::Unsupported);
            }
            tags += 1;
            at += field::VLAN_TAG_LEN;
            if b.len() < at + 2 {
                return Err(Error::Truncated);
            }
        }
        Ok(EthernetFrame {
            buffer,
            inner_type_at: at,
            vlan_tags: tags,
        })
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.buffer.as_ref()[field::DST])
    }
    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.buffer.as_ref()[field::SRC])
    }
    /// The EtherType of the payload, after any VLAN tags.
    #[inline]
    pub fn ethertype(&self) -> EtherType {
        EtherType::from(be16(self.buffer.as_ref(), self.inner_type_at))
    }
    /// Number of VLAN tags walked.
    #[inline]
    pub fn vlan_tags(&self) -> usize {
        self.vlan_tags as usize
    }
    /// The VLAN id of the innermost tag, if any.
    #[inline]
    pub fn inner_vlan_id(&self) -> Option<u16> {
        if self.vlan_tags == 0 {
            None
        } else {
            Some(be16(self.buffer.as_ref(), self.inner_type_at - 2) & 0x0fff)
        }
    }
    /// Length of the header including VLAN tags: the offset of the payload.
    #[inline]
    pub fn header_len(&self) -> usize {
        self.inner_type_at + 2
    }
    /// The payload (L3 header and beyond).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
    /// Gives the buffer back.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.0);
    }
    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.0);
    }
    /// The payload, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let at = self.header_len();
        &mut self.buffer.as_mut()[at..]
    }
}

/// Writes an untagged Ethernet II header into the first 14 bytes of `b` (caller sizes `b`).
#[inline]
pub fn emit_header(b: &mut [u8], dst: EthernetAddress, src: EthernetAddress, ty: EtherType) {
    b[field::DST].copy_from_slice(&dst.0);
    b[field::SRC].copy_from_slice(&src.0);
    put_be16(b, field::ETHERTYPE, ty.into());
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRAME: [u8; 18] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // dst
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, // src
        0x08, 0x06, // ARP
        0xde, 0xad, 0xbe, 0xef,
    ];

    #[test]
    fn parse_untagged() {
        let f = EthernetFrame::new_checked(&FRAME[..]).unwrap();
        assert!(f.dst_addr().is_broadcast());
        assert_eq!(f.src_addr(), "02:00:00:00:00:02".parse().unwrap());
        assert_eq!(f.ethertype(), EtherType::ARP);
        assert_eq!(f.header_len(), 14);
        assert_eq!(f.payload(), &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(f.inner_vlan_id(), None);
    }

    #[test]
    fn parse_qinq() {
        let mut v = FRAME[..12].to_vec();
        v.extend_from_slice(&[0x88, 0xa8, 0x00, 0x0a, 0x81, 0x00, 0x00, 0x14, 0x86, 0xdd, 1]);
        let f = EthernetFrame::new_checked(&v[..]).unwrap();
        assert_eq!(f.vlan_tags(), 2);
        assert_eq!(f.inner_vlan_id(), Some(20));
        assert_eq!(f.ethertype(), EtherType::IPV6);
        assert_eq!(f.payload(), &[1]);
    }

    #[test]
    fn truncated_and_too_many_tags() {
        assert_eq!(EthernetFrame::new_checked(&FRAME[..13]).unwrap_err(), Error::Truncated);
        let mut v = FRAME[..12].to_vec();
        v.extend_from_slice(&[0x81, 0x00, 0x00, 0x0a]);
        assert_eq!(EthernetFrame::new_checked(&v[..]).unwrap_err(), Error::Truncated);
        v.extend_from_slice(&[0x81, 0x00, 0x00, 0x0a, 0x81, 0x00, 0, 1, 8, 0]);
        assert_eq!(EthernetFrame::new_checked(&v[..]).unwrap_err(), Error::Unsupported);
    }

    #[test]
    fn mac_parse_and_print() {
        let a: EthernetAddress = "02:00:5e:10:00:ff".parse().unwrap();
        assert_eq!(a.to_string(), "02:00:5e:10:00:ff");
        assert!(a.is_unicast());
        assert!("02:00:5e:10:00".parse::<EthernetAddress>().is_err());
        assert!("02:00:5e:10:00:ff:11".parse::<EthernetAddress>().is_err());
        assert!("zz:00:5e:10:00:ff".parse::<EthernetAddress>().is_err());
    }

    #[test]
    fn emit_then_parse() {
        let mut b = [0u8; 14];
        let src = EthernetAddress([2, 0, 0, 0, 0, 1]);
        emit_header(&mut b, EthernetAddress::BROADCAST, src, EtherType::IPV6);
        let f = EthernetFrame::new_checked(&b[..]).unwrap();
        assert_eq!(f.src_addr(), src);
        assert_eq!(f.ethertype(), EtherType::IPV6);
    }
}
