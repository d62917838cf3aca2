//! GRE (RFC 2784) with the key and sequence number extensions (RFC 2890).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! |C| |K|S| Reserved0       | Ver |         Protocol Type         |
//! |      Checksum (optional)      |       Reserved1 (optional)    |
//! |                         Key (optional)                        |
//! |                 Sequence Number (optional)                    |
//! ```

use super::checksum;
use super::{be16, be32, put_be16, put_be32, Error, EtherType, Result};

mod field {
    pub(super) const FLAGS: usize = 0;
    pub(super) const PROTOCOL: usize = 2;
    pub(super) const OPTIONAL: usize = 4;
}

const C: u16 = 0x8000;
const K: u16 = 0x2000;
const S: u16 = 0x1000;
/// Reserved0 bits 1, 4 and 5: RFC 1701's routing-present and strict-source-route bits and one
/// of its recursion bits.
const RFC1701_BITS: u16 = 0x4000 | 0x0800 | 0x0400;
const VERSION: u16 = 0x0007;

/// Length of the GRE header without optional fields.
pub const MIN_HEADER_LEN: usize = 4;

/// A view over a GRE packet (header and payload).
///
/// After [`GrePacket::new_checked`]: version 0, no RFC 1701 bits, and the buffer holds every
/// optional field the C, K and S bits announce.
#[derive(Debug, Clone)]
pub struct GrePacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> GrePacket<T> {
    /// Validates the header.
    ///
    /// - Version must be 0 (RFC 2784 §2.3.1); version 1 (PPTP) is [`Error::Unsupported`].
    /// - Reserved0 bits 1-5 other than K and S make it [`Error::Unsupported`]: RFC 2784 §2.5.1
    ///   "A receiver MUST discard a packet where any of bits 1-5 are non-zero, unless that
    ///   receiver implements RFC 1701", and RFC 2890 assigns bits 2 and 3. Bits 6-12 are ignored.
    /// - Every optional field the flags announce must be present ([`Error::Truncated`]).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let f = be16(b, field::FLAGS);
        if f & VERSION != 0 || f & RFC1701_BITS != 0 {
            return Err(Error::Unsupported);
        }
        let p = GrePacket { buffer };
        if p.buffer.as_ref().len() < p.header_len() {
            return Err(Error::Truncated);
        }
        Ok(p)
    }

    #[inline]
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    #[inline]
    fn flags(&self) -> u16 {
        be16(self.b(), field::FLAGS)
    }
    /// C: a checksum field is present.
    #[inline]
    pub fn checksum_present(&self) -> bool {
        self.flags() & C != 0
    }
    /// K: a key field is present.
    #[inline]
    pub fn key_present(&self) -> bool {
        self.flags() & K != 0
    }
    /// S: a sequence number field is present.
    #[inline]
    pub fn seq_present(&self) -> bool {
        self.flags() & S != 0
    }
    /// Protocol type of the payload (an EtherType).
    #[inline]
    pub fn protocol(&self) -> EtherType {
        EtherType::from(be16(self.b(), field::PROTOCOL))
    }
    /// Header length: 4 plus 4 for each of C, K and S.
    #[inline]
    pub fn header_len(&self) -> usize {
        MIN_HEADER_LEN
            + 4 * (self.checksum_present() as usize + self.key_present() as usize + self.seq_present() as usize)
    }
    #[inline]
    fn key_at(&self) -> usize {
        field::OPTIONAL + 4 * self.checksum_present() as usize
    }
    /// The checksum, if present.
    #[inline]
    pub fn checksum(&self) -> Option<u16> {
        self.checksum_present().then(|| be16(self.b(), field::OPTIONAL))
    }
    /// The key, if present.
    #[inline]
    pub fn key(&self) -> Option<u32> {
        self.key_present().then(|| be32(self.b(), self.key_at()))
    }
    /// The sequence number, if present.
    #[inline]
    pub fn sequence(&self) -> Option<u32> {
        let at = self.key_at() + 4 * self.key_present() as usize;
        self.seq_present().then(|| be32(self.b(), at))
    }
    /// Whether the checksum (over header and payload, RFC 2784 §2.5) is right; true when
    /// there is none.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        !self.checksum_present() || checksum::verify(self.b())
    }
    /// The payload.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..]
    }
}

/// The fields of a GRE header the fast path emits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GreRepr {
    /// Protocol type of the payload.
    pub protocol: EtherType,
    /// Whether to send a checksum.
    pub checksum: bool,
    /// The key, if any (RFC 2890 §2.1).
    pub key: Option<u32>,
    /// The sequence number, if any (RFC 2890 §2.2).
    pub sequence: Option<u32>,
}

impl GreRepr {
    /// Length of the header this emits.
    #[inline]
    pub fn header_len(&self) -> usize {
        MIN_HEADER_LEN + 4 * (self.checksum as usize + self.key.is_some() as usize + self.sequence.is_some() as usize)
    }

    /// Writes the header into the front of `b`, which holds the whole GRE packet (header then
    /// payload, already in place): the checksum, when asked for, covers all of `b`.
    #[inline]
    pub fn emit(&self, b: &mut [u8]) {
        let mut flags = 0u16;
        let mut at = field::OPTIONAL;
        if self.checksum {
            flags |= C;
            put_be32(b, at, 0); // checksum and Reserved1, filled below
            at += 4;
        }
        if let Some(k) = self.key {
            flags |= K;
            put_be32(b, at, k);
            at += 4;
        }
        if let Some(s) = self.sequence {
            flags |= S;
            put_be32(b, at, s);
        }
        put_be16(b, field::FLAGS, flags);
        put_be16(b, field::PROTOCOL, self.protocol.into());
        if self.checksum {
            let c = checksum::checksum(b);
            put_be16(b, field::OPTIONAL, c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // C, K and S set, IPv4 payload "abcd", key 42, sequence 7.
    const FULL: [u8; 20] = [
        0xb0, 0x00, 0x08, 0x00, // flags, protocol
        0x00, 0x00, 0x00, 0x00, // checksum (patched by the test), reserved1
        0x00, 0x00, 0x00, 0x2a, // key
        0x00, 0x00, 0x00, 0x07, // sequence
        b'a', b'b', b'c', b'd',
    ];

    fn full() -> [u8; 20] {
        let mut b = FULL;
        let c = checksum::checksum(&b);
        b[4..6].copy_from_slice(&c.to_be_bytes());
        b
    }

    #[test]
    fn parse_golden() {
        let b = full();
        assert_eq!(&b[4..6], &[0x83, 0x07]);
        let g = GrePacket::new_checked(&b[..]).unwrap();
        assert!(g.checksum_present() && g.key_present() && g.seq_present());
        assert_eq!(g.protocol(), EtherType::IPV4);
        assert_eq!(g.header_len(), 16);
        assert_eq!(g.checksum(), Some(0x8307));
        assert_eq!(g.key(), Some(42));
        assert_eq!(g.sequence(), Some(7));
        assert!(g.verify_checksum());
        assert_eq!(g.payload(), b"abcd");

        let plain = [0x00, 0x00, 0x86, 0xdd, 1, 2];
        let g = GrePacket::new_checked(&plain[..]).unwrap();
        assert_eq!(g.protocol(), EtherType::IPV6);
        assert_eq!((g.checksum(), g.key(), g.sequence()), (None, None, None));
        assert!(g.verify_checksum());
        assert_eq!(g.payload(), &[1, 2]);

        // only S: the sequence is right after the base header
        let s_only = [0x10, 0x00, 0x08, 0x00, 0, 0, 0, 9];
        let g = GrePacket::new_checked(&s_only[..]).unwrap();
        assert_eq!((g.key(), g.sequence()), (None, Some(9)));
    }

    #[test]
    fn emit_golden() {
        let mut b = [0u8; 20];
        b[16..].copy_from_slice(b"abcd");
        let r = GreRepr {
            protocol: EtherType::IPV4,
            checksum: true,
            key: Some(42),
            sequence: Some(7),
        };
        assert_eq!(r.header_len(), 16);
        r.emit(&mut b);
        assert_eq!(b, full());
        let mut k = [0u8; 8];
        GreRepr {
            protocol: EtherType(0x6558),
            checksum: false,
            key: Some(0x01020304),
            sequence: None,
        }
        .emit(&mut k);
        assert_eq!(k, [0x20, 0, 0x65, 0x58, 1, 2, 3, 4]);
    }

    #[test]
    fn truncated_unsupported_and_bad_checksum() {
        let b = full();
        assert_eq!(GrePacket::new_checked(&b[..3]).unwrap_err(), Error::Truncated);
        assert_eq!(GrePacket::new_checked(&b[..15]).unwrap_err(), Error::Truncated);
        assert!(GrePacket::new_checked(&b[..16]).unwrap().payload().is_empty());
        let mut v = b;
        v[1] = 0x01; // version 1
        assert_eq!(GrePacket::new_checked(&v[..]).unwrap_err(), Error::Unsupported);
        let mut v = b;
        v[0] |= 0x40; // RFC 1701 routing present
        assert_eq!(GrePacket::new_checked(&v[..]).unwrap_err(), Error::Unsupported);
        let mut v = b;
        v[1] |= 0x08; // a bit of 6-12: ignored on receipt
        assert!(GrePacket::new_checked(&v[..]).is_ok());
        let mut v = b;
        v[19] ^= 0xff;
        assert!(!GrePacket::new_checked(&v[..]).unwrap().verify_checksum());
    }
}
