//! ICMP for IPv4 (RFC 792).

use super::checksum;
use super::{be16, put_be16, Error, Result};

/// An ICMPv4 message type. Unknown values are kept, not rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Icmpv4Message {
    /// 0
    EchoReply,
    /// 3
    DstUnreachable,
    /// 5
    Redirect,
    /// 8
    EchoRequest,
    /// 11
    TimeExceeded,
    /// 12
    ParamProblem,
    /// Anything else.
    Unknown(u8),
}

impl From<u8> for Icmpv4Message {
    #[inline]
    fn from(v: u8) -> Self {
        match v {
            0 => Icmpv4Message::EchoReply,
            3 => Icmpv4Message::DstUnreachable,
            5 => Icmpv4Message::Redirect,
            8 => Icmpv4Message::EchoRequest,
            11 => Icmpv4Message::TimeExceeded,
            12 => Icmpv4Message::ParamProblem,
            o => Icmpv4Message::Unknown(o),
        }
    }
}

impl From<Icmpv4Message> for u8 {
    #[inline]
    fn from(v: Icmpv4Message) -> u8 {
        match v {
            Icmpv4Message::EchoReply => 0,
            Icmpv4Message::DstUnreachable => 3,
            Icmpv4Message::Redirect => 5,
            Icmpv4Message::EchoRequest => 8,
            Icmpv4Message::TimeExceeded => 11,
            Icmpv4Message::ParamProblem => 12,
            Icmpv4Message::Unknown(o) => o,
        }
    }
}

mod field {
    pub(super) const TYPE: usize = 0;
    pub(super) const CODE: usize = 1;
    pub(super) const CHECKSUM: usize = 2;
    pub(super) const ECHO_IDENT: usize = 4;
    pub(super) const ECHO_SEQ: usize = 6;
}

/// Length of the ICMP header (type, code, checksum and the 4-byte rest of header).
pub const HEADER_LEN: usize = 8;

/// A view over an ICMPv4 message. The buffer is exactly the message (the IP payload): the
/// checksum covers all of it.
///
/// After [`Icmpv4Packet::new_checked`]: `buffer.len() >= 8`.
#[derive(Debug, Clone)]
pub struct Icmpv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
    /// Validates that the 8-byte header is present.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Icmpv4Packet { buffer })
    }
    #[inline]
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Message type.
    #[inline]
    pub fn msg_type(&self) -> Icmpv4Message {
        Icmpv4Message::from(self.b()[field::TYPE])
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
    /// What follows the 8-byte header (echo data, or the invoking datagram of an error).
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.b()[HEADER_LEN..]
    }
    /// Whether the checksum over the whole message is right (RFC 792).
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::verify(self.b())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv4Packet<T> {
    #[inline]
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the type (checksum not updated).
    #[inline]
    pub fn set_msg_type(&mut self, v: Icmpv4Message) {
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
    /// Sets the echo identifier (checksum not updated).
    #[inline]
    pub fn set_echo_ident(&mut self, v: u16) {
        put_be16(self.bm(), field::ECHO_IDENT, v);
    }
    /// Sets the echo sequence number (checksum not updated).
    #[inline]
    pub fn set_echo_seq(&mut self, v: u16) {
        put_be16(self.bm(), field::ECHO_SEQ, v);
    }
    /// Recomputes the checksum over the whole message.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.b());
        self.set_checksum(c);
    }
    /// Sets type and code and updates the checksum incrementally (RFC 1624 eqn. 3): type and
    /// code form the first 16-bit word. O(1) whatever the payload length.
    #[inline]
    pub fn set_type_code_update_checksum(&mut self, ty: Icmpv4Message, code: u8) {
        let old = be16(self.b(), field::TYPE);
        let new = u16::from_be_bytes([ty.into(), code]);
        let c = checksum::update16(self.checksum(), old, new);
        put_be16(self.bm(), field::TYPE, new);
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Echo request id 0x1234 seq 1, data "abcd".
    const REQUEST: [u8; 12] = [0x08, 0x00, 0x21, 0x04, 0x12, 0x34, 0x00, 0x01, b'a', b'b', b'c', b'd'];

    #[test]
    fn parse_golden() {
        let p = Icmpv4Packet::new_checked(&REQUEST[..]).unwrap();
        assert_eq!(p.msg_type(), Icmpv4Message::EchoRequest);
        assert_eq!(p.code(), 0);
        assert_eq!(p.echo_ident(), 0x1234);
        assert_eq!(p.echo_seq(), 1);
        assert_eq!(p.data(), b"abcd");
        assert!(p.verify_checksum());
        assert_eq!(Icmpv4Message::from(42), Icmpv4Message::Unknown(42));
    }

    #[test]
    fn emit_golden_and_reply() {
        let mut b = [0u8; 12];
        let mut p = Icmpv4Packet::new_checked(&mut b[..]).unwrap();
        p.set_msg_type(Icmpv4Message::EchoRequest);
        p.set_code(0);
        p.set_echo_ident(0x1234);
        p.set_echo_seq(1);
        b[8..].copy_from_slice(b"abcd");
        let mut p = Icmpv4Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum();
        assert_eq!(b, REQUEST);

        let mut p = Icmpv4Packet::new_checked(&mut b[..]).unwrap();
        p.set_type_code_update_checksum(Icmpv4Message::EchoReply, 0);
        assert!(p.verify_checksum());
        // 0x2104 + 0x0800
        assert_eq!(&b[..4], &[0x00, 0x00, 0x29, 0x04]);
    }

    #[test]
    fn truncated_and_overlong() {
        assert_eq!(Icmpv4Packet::new_checked(&REQUEST[..7]).unwrap_err(), Error::Truncated);
        let p = Icmpv4Packet::new_checked(&REQUEST[..8]).unwrap();
        assert!(p.data().is_empty());
        // A longer buffer is a longer message: the checksum then fails.
        let mut v = REQUEST.to_vec();
        v.push(1);
        assert!(!Icmpv4Packet::new_checked(&v[..]).unwrap().verify_checksum());
    }
}
