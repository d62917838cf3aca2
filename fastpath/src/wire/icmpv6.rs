//! ICMPv6 (RFC 4443) and the Neighbor Discovery messages the fast path answers (RFC 4861).

use super::checksum;
use super::{be16, ipv6_at, put_be16, Error, EthernetAddress, Result};
use std::net::Ipv6Addr;

/// An ICMPv6 message type. Unknown values are kept, not rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Icmpv6Message {
    /// 1
    DstUnreachable,
    /// 2
    PacketTooBig,
    /// 3
    TimeExceeded,
    /// 4
    ParamProblem,
    /// 128
    EchoRequest,
    /// 129
    EchoReply,
    /// 133
    RouterSolicit,
    /// 134
    RouterAdvert,
    /// 135
    NeighborSolicit,
    /// 136
    NeighborAdvert,
    /// 137
    Redirect,
    /// Anything else.
    Unknown(u8),
}

impl From<u8> for Icmpv6Message {
    #[inline]
    fn from(v: u8) -> Self {
        match v {
            1 => Icmpv6Message::DstUnreachable,
            2 => Icmpv6Message::PacketTooBig,
            3 => Icmpv6Message::TimeExceeded,
            4 => Icmpv6Message::ParamProblem,
            128 => Icmpv6Message::EchoRequest,
            129 => Icmpv6Message::EchoReply,
            133 => Icmpv6Message::RouterSolicit,
            134 => Icmpv6Message::RouterAdvert,
            135 => Icmpv6Message::NeighborSolicit,
            136 => Icmpv6Message::NeighborAdvert,
            137 => Icmpv6Message::Redirect,
            o => Icmpv6Message::Unknown(o),
        }
    }
}

impl From<Icmpv6Message> for u8 {
    #[inline]
    fn from(v: Icmpv6Message) -> u8 {
        match v {
            Icmpv6Message::DstUnreachable => 1,
            Icmpv6Message::PacketTooBig => 2,
            Icmpv6Message::TimeExceeded => 3,
            Icmpv6Message::ParamProblem => 4,
            Icmpv6Message::EchoRequest => 128,
            Icmpv6Message::EchoReply => 129,
            Icmpv6Message::RouterSolicit => 133,
            Icmpv6Message::RouterAdvert => 134,
            Icmpv6Message::NeighborSolicit => 135,
            Icmpv6Message::NeighborAdvert => 136,
            Icmpv6Message::Redirect => 137,
            Icmpv6Message::Unknown(o) => o,
        }
    }
}

mod field {
    use core::ops::Range;
    pub(super) const TYPE: usize = 0;
    pub(super) const CODE: usize = 1;
    pub(super) const CHECKSUM: usize = 2;
    pub(super) const ECHO_IDENT: usize = 4;
    pub(super) const ECHO_SEQ: usize = 6;
    /// Neighbor Solicitation / Advertisement (RFC 4861 §4.3, §4.4).
    pub(super) const NEIGH_FLAGS: usize = 4;
    pub(super) const NEIGH_RESERVED: Range<usize> = 4..8;
    pub(super) const NEIGH_TARGET: Range<usize> = 8..24;
}

/// Length of the ICMPv6 header (type, code, checksum, 4 bytes of message body).
pub const HEADER_LEN: usize = 8;
/// Length of a Neighbor Solicitation or Advertisement without options.
pub const NEIGHBOR_LEN: usize = 24;
/// Length of the Ethernet link-layer address option (RFC 4861 §4.6.1, RFC 2464 §6).
pub const LLADDR_OPT_LEN: usize = 8;
const PROTO: u8 = 58;

/// A view over an ICMPv6 message: the buffer is exactly the message (the upper-layer payload
/// of the IPv6 packet), which the checksum covers.
///
/// After [`Icmpv6Packet::new_checked`]: `buffer.len() >= 8`.
#[derive(Debug, Clone)]
pub struct Icmpv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
    /// Validates that the 8-byte header is present.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Icmpv6Packet { buffer })
    }
    #[inline]
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Message type.
    #[inline]
    pub fn msg_type(&self) -> Icmpv6Message {
        Icmpv6Message::from(self.b()[field::TYPE])
    }
    /// Code.
    #[inline]
    pub fn code(&self) -> u8 {
        self.b()[field::CODE]
    }
    /// Checksum as stored.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.b(), field::CHECKSUM)
    }
    /// Echo identifier (meaningful for echo messages).
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        be16(self.b(), field::ECHO_IDENT)
    }
    /// Echo sequence number (meaningful for echo messages).
    #[inline]
    pub fn echo_seq(&self) -> u16 {
        be16(self.b(), field::ECHO_SEQ)
    }
    /// What follows the 8-byte header.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.b()[HEADER_LEN..]
    }
    /// Whether the checksum, pseudo-header included (RFC 4443 §2.3), is right.
    #[inline]
    pub fn verify_checksum(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        let b = self.b();
        let s = checksum::pseudo_v6(src, dst, PROTO, b.len() as u32);
        checksum::fold(checksum::sum(s, b)) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6Packet<T> {
    #[inline]
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the type (checksum not updated).
    #[inline]
    pub fn set_msg_type(&mut self, v: Icmpv6Message) {
        self.bm()[field::TYPE] = v.into();
    }
    /// Sets the code (checksum not updated).
    #[inline]
    pub fn set_code(&mut self, v: u8) {
        self.bm()[field::CODE] = v;
    }
    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        put_be16(self.bm(), field::CHECKSUM, v);
    }
    /// Computes the checksum over the pseudo-header and the whole message (RFC 4443 §2.3).
    #[inline]
    pub fn fill_checksum(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let b = self.b();
        let c = checksum::finish(checksum::sum(checksum::pseudo_v6(src, dst, PROTO, b.len() as u32), b));
        self.set_checksum(c);
    }
}

/// The R, S and O bits of a Neighbor Advertisement (RFC 4861 §4.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct NeighborFlags {
    /// Router: the sender is a router.
    pub router: bool,
    /// Solicited: sent in response to a Neighbor Solicitation.
    pub solicited: bool,
    /// Override: the advertisement should override a cached link-layer address.
    pub override_: bool,
}

impl NeighborFlags {
    #[inline]
    fn to_byte(self) -> u8 {
        (self.router as u8) << 7 | (self.solicited as u8) << 6 | (self.override_ as u8) << 5
    }
    #[inline]
    fn from_byte(b: u8) -> Self {
        NeighborFlags {
            router: b & 0x80 != 0,
            solicited: b & 0x40 != 0,
            override_: b & 0x20 != 0,
        }
    }
}

/// A view over a Neighbor Solicitation or Neighbor Advertisement (RFC 4861 §4.3, §4.4): they
/// share a layout (flags word, target address, options).
///
/// After [`NeighborPacket::new_checked`]: `buffer.len() >= 24` (RFC 4861 §7.1.1 "ICMP length
/// ... is 24 or more octets").
#[derive(Debug, Clone)]
pub struct NeighborPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> NeighborPacket<T> {
    /// Validates the length. The type is not checked (see [`Icmpv6Packet::msg_type`]).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < NEIGHBOR_LEN {
            return Err(Error::Truncated);
        }
        Ok(NeighborPacket { buffer })
    }
    /// The R/S/O flags (an advertisement's; reserved in a solicitation).
    #[inline]
    pub fn flags(&self) -> NeighborFlags {
        NeighborFlags::from_byte(self.buffer.as_ref()[field::NEIGH_FLAGS])
    }
    /// Target address.
    #[inline]
    pub fn target_addr(&self) -> Ipv6Addr {
        ipv6_at(self.buffer.as_ref(), field::NEIGH_TARGET.start)
    }
    /// The options, as an iterator that validates each (RFC 4861 §4.6).
    #[inline]
    pub fn options(&self) -> NdpOptions<'_> {
        NdpOptions {
            rest: &self.buffer.as_ref()[NEIGHBOR_LEN..],
        }
    }
}

/// One Neighbor Discovery option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NdpOption<'a> {
    /// Type 1: the sender's link-layer address.
    SourceLinkLayer(EthernetAddress),
    /// Type 2: the target's link-layer address.
    TargetLinkLayer(EthernetAddress),
    /// Any other option: its type and its bytes after the type/length pair.
    Other(u8, &'a [u8]),
}

/// Iterator over Neighbor Discovery options. Yields [`Error::Malformed`] for an option of
/// length zero (RFC 4861 §4.6: "Nodes MUST silently discard an ND packet that contains an
/// option with length zero") and [`Error::Truncated`] for one that runs past the message; it
/// ends after an error.
#[derive(Clone, Debug)]
pub struct NdpOptions<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for NdpOptions<'a> {
    type Item = Result<NdpOption<'a>>;
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let r = self.rest;
        if r.is_empty() {
            return None;
        }
        if r.len() < 2 {
            self.rest = &[];
            return Some(Err(Error::Truncated));
        }
        let len = r[1] as usize * 8;
        if len == 0 {
            self.rest = &[];
            return Some(Err(Error::Malformed));
        }
        if r.len() < len {
            self.rest = &[];
            return Some(Err(Error::Truncated));
        }
        self.rest = &r[len..];
        // Every option is at least 8 bytes here, so a 6-byte address fits after type/len.
        Some(Ok(match r[0] {
            1 => NdpOption::SourceLinkLayer(EthernetAddress::from_bytes(&r[2..8])),
            2 => NdpOption::TargetLinkLayer(EthernetAddress::from_bytes(&r[2..8])),
            t => NdpOption::Other(t, &r[2..len]),
        }))
    }
}

/// Writes a Neighbor Advertisement into the front of `b`: header, `target`, and a Target
/// Link-Layer Address option when `lladdr` is given. Returns its length (24 or 32); the caller
/// sizes `b` and then fills the checksum ([`Icmpv6Packet::fill_checksum`]).
#[inline]
pub fn emit_neighbor_advert(
    b: &mut [u8],
    flags: NeighborFlags,
    target: &Ipv6Addr,
    lladdr: Option<EthernetAddress>,
) -> usize {
    b[field::TYPE] = Icmpv6Message::NeighborAdvert.into();
    b[field::CODE] = 0;
    put_be16(b, field::CHECKSUM, 0);
    b[field::NEIGH_RESERVED].fill(0);
    b[field::NEIGH_FLAGS] = flags.to_byte();
    b[field::NEIGH_TARGET].copy_from_slice(&target.octets());
    match lladdr {
        None => NEIGHBOR_LEN,
        Some(mac) => {
            let o = &mut b[NEIGHBOR_LEN..NEIGHBOR_LEN + LLADDR_OPT_LEN];
            o[0] = 2;
            o[1] = 1;
            o[2..].copy_from_slice(&mac.0);
            NEIGHBOR_LEN + LLADDR_OPT_LEN
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    // Neighbor Solicitation from fe80::2 to ff02::1:ff00:1 for 2001:db8::1, with a source
    // link-layer address option 02:00:00:00:00:02.
    const NS: [u8; 32] = [
        135, 0, 0x4b, 0x5f, 0, 0, 0, 0, //
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, //
        1, 1, 2, 0, 0, 0, 0, 2,
    ];

    #[test]
    fn parse_ns_golden() {
        let p = Icmpv6Packet::new_checked(&NS[..]).unwrap();
        assert_eq!(p.msg_type(), Icmpv6Message::NeighborSolicit);
        assert_eq!(p.code(), 0);
        assert!(p.verify_checksum(&a("fe80::2"), &a("ff02::1:ff00:1")));
        assert!(!p.verify_checksum(&a("fe80::3"), &a("ff02::1:ff00:1")));
        let n = NeighborPacket::new_checked(&NS[..]).unwrap();
        assert_eq!(n.target_addr(), a("2001:db8::1"));
        let opts: Vec<_> = n.options().collect();
        assert_eq!(
            opts,
            vec![Ok(NdpOption::SourceLinkLayer(EthernetAddress([2, 0, 0, 0, 0, 2])))]
        );
    }

    #[test]
    fn emit_na_golden() {
        let mut b = [0u8; 32];
        let n = emit_neighbor_advert(
            &mut b,
            NeighborFlags {
                router: false,
                solicited: true,
                override_: true,
            },
            &a("2001:db8::1"),
            Some(EthernetAddress([2, 0, 0, 0, 0, 1])),
        );
        assert_eq!(n, 32);
        let mut p = Icmpv6Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum(&a("2001:db8::1"), &a("fe80::2"));
        let expect: [u8; 32] = [
            136, 0, 0xb9, 0xab, 0x60, 0, 0, 0, //
            0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, //
            2, 1, 2, 0, 0, 0, 0, 1,
        ];
        assert_eq!(b, expect);
        let n = NeighborPacket::new_checked(&b[..]).unwrap();
        assert_eq!(
            n.flags(),
            NeighborFlags {
                router: false,
                solicited: true,
                override_: true
            }
        );
        assert_eq!(
            n.options().next(),
            Some(Ok(NdpOption::TargetLinkLayer(EthernetAddress([2, 0, 0, 0, 0, 1]))))
        );
    }

    #[test]
    fn truncated_and_bad_options() {
        assert_eq!(Icmpv6Packet::new_checked(&NS[..7]).unwrap_err(), Error::Truncated);
        assert_eq!(NeighborPacket::new_checked(&NS[..23]).unwrap_err(), Error::Truncated);
        // option cut short
        let n = NeighborPacket::new_checked(&NS[..30]).unwrap();
        assert_eq!(n.options().collect::<Vec<_>>(), vec![Err(Error::Truncated)]);
        let n = NeighborPacket::new_checked(&NS[..25]).unwrap();
        assert_eq!(n.options().collect::<Vec<_>>(), vec![Err(Error::Truncated)]);
        // zero-length option, then the iterator stops
        let mut b = NS.to_vec();
        b[25] = 0;
        let n = NeighborPacket::new_checked(&b[..]).unwrap();
        assert_eq!(n.options().collect::<Vec<_>>(), vec![Err(Error::Malformed)]);
        // unknown option kept; overlong buffer = another option
        let mut b = NS.to_vec();
        b.extend_from_slice(&[14, 1, 1, 2, 3, 4, 5, 6]);
        let n = NeighborPacket::new_checked(&b[..]).unwrap();
        let o: Vec<_> = n.options().collect();
        assert_eq!(o[1], Ok(NdpOption::Other(14, &[1, 2, 3, 4, 5, 6][..])));
        assert_eq!(Icmpv6Message::from(200), Icmpv6Message::Unknown(200));
        assert_eq!(u8::from(Icmpv6Message::EchoReply), 129);
    }
}
