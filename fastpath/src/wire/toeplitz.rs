//! The Toeplitz hash that NICs compute for Receive Side Scaling, in software.
//!
//! When the driver supplies no hash (vdevs such as `net_pcap`), the fast path computes the same
//! value the hardware would have, so software fanout lands a flow where hardware RSS would.
//!
//! Definition (Microsoft, "RSS hashing functions"): for each bit of the input, most significant
//! bit of the first byte first, if the bit is set XOR the result with the leftmost 32 bits of
//! the key, then shift the key left by one bit. The input is source address, destination
//! address, then (4-tuple) source port and destination port, all in network byte order.
//!
//! Speed: the bit loop is linear in the input, so the contribution of each input *byte* at each
//! position can be tabulated once per key: `table[i][v]` is the XOR of the key windows of the set
//! bits of `v` at byte position `i`. A hash is then one table load and XOR per input byte (at
//! most 36 for an IPv6 4-tuple). The tables (36 × 256 × 4 bytes = 36 KiB) are built when the key
//! is set; hashing allocates nothing.

use core::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Length of an RSS key.
pub const KEY_LEN: usize = 40;
/// Length of the longer key some NICs take (Intel's i40e and ice, `hash_key_size` 52).
pub const LONG_KEY_LEN: usize = 52;
/// The longest input: IPv6 addresses and ports.
pub const MAX_INPUT_LEN: usize = 36;

/// The key from Microsoft's RSS verification suite, also the default of many NIC drivers.
pub const MICROSOFT_KEY: [u8; KEY_LEN] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0, 0xca, 0x2b,
    0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac,
    0x01, 0xfa,
];

/// An RSS key as configured: 40 bytes, or 52 for NICs that take that many.
///
/// The hash of an `n`-byte input reads the key's first `n + 4` bytes, so for every input RSS
/// hashes here (at most [`MAX_INPUT_LEN`] bytes) only the first 40 count: a NIC given all 52
/// computes what [`Toeplitz`] computes with [`RssKey::hash_key`]. A key meant to be secret (so
/// nobody can choose flows that share a hash) stays out of logs: `Debug` shows no byte of it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RssKey {
    bytes: [u8; LONG_KEY_LEN],
    len: u8,
}

impl RssKey {
    /// The key of `bytes`: `None` unless it has [`KEY_LEN`] or [`LONG_KEY_LEN`] bytes.
    pub fn new(bytes: &[u8]) -> Option<RssKey> {
        if bytes.len() != KEY_LEN && bytes.len() != LONG_KEY_LEN {
            return None;
        }
        let mut k = RssKey {
            bytes: [0; LONG_KEY_LEN],
            len: bytes.len() as u8,
        };
        k.bytes[..bytes.len()].copy_from_slice(bytes);
        Some(k)
    }

    /// Every byte, as configured (40 or 52).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// The first 40 bytes: all the hash of any RSS input reads.
    pub fn hash_key(&self) -> &[u8; KEY_LEN] {
        match self.bytes[..KEY_LEN].try_into() {
            Ok(k) => k,
            Err(_) => unreachable!("a key has at least KEY_LEN bytes"),
        }
    }

    /// Whether it hashes as the published [`MICROSOFT_KEY`] does: anyone can then compute every
    /// flow's hash offline.
    pub fn is_public(&self) -> bool {
        *self.hash_key() == MICROSOFT_KEY
    }
}

impl Default for RssKey {
    /// [`MICROSOFT_KEY`], the default of many drivers: public.
    fn default() -> Self {
        RssKey::new(&MICROSOFT_KEY).unwrap_or_else(|| unreachable!("KEY_LEN bytes"))
    }
}

impl fmt::Debug for RssKey {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let what = if self.is_public() { "public" } else { "secret" };
        write!(f, "RssKey({} bytes, {what})", self.len)
    }
}

/// A Toeplitz hasher for one key.
///
/// **Symmetric mode** makes both directions of a conversation hash alike. Method: before
/// hashing, the two endpoints are put in a canonical order — the (address, port) pair that
/// compares smaller (address first, as big-endian bytes, then port) is used as the source. The
/// result is the plain Toeplitz hash of the reordered tuple, so it no longer equals what a NIC
/// computes for the packet as received: a caller in symmetric mode must ignore NIC hashes. (A
/// NIC can be made symmetric instead by a key whose 16-bit halves repeat, e.g. `6d5a` × 20; with
/// such a key the plain mode is already symmetric for address pairs and port pairs.)
#[derive(Clone)]
pub struct Toeplitz {
    key: [u8; KEY_LEN],
    symmetric: bool,
    table: Box<[[u32; 256]; MAX_INPUT_LEN]>,
}

impl fmt::Debug for Toeplitz {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        // The key may be secret: whether it is the public one, never its bytes.
        let key = if self.key == MICROSOFT_KEY { "public" } else { "secret" };
        f.debug_struct("Toeplitz")
            .field("key", &key)
            .field("symmetric", &self.symmetric)
            .finish_non_exhaustive()
    }
}

impl Default for Toeplitz {
    /// The Microsoft key, not symmetric.
    fn default() -> Self {
        Toeplitz::new(&MICROSOFT_KEY, false)
    }
}

impl Toeplitz {
    /// Builds the lookup tables for `key`.
    pub fn new(key: &[u8; KEY_LEN], symmetric: bool) -> Self {
        let mut table: Box<[[u32; 256]; MAX_INPUT_LEN]> =
            match vec![[0u32; 256]; MAX_INPUT_LEN].into_boxed_slice().try_into() {
                Ok(t) => t,
                Err(_) => unreachable!("the vector has MAX_INPUT_LEN rows"),
            };
        for (i, row) in table.iter_mut().enumerate() {
            // The 40 key bits starting at input byte i: enough for the 32-bit window of each of
            // the byte's 8 bits (i + 4 <= 39 since i < 36).
            let mut v = 0u64;
            for &k in &key[i..i + 5] {
                v = v << 8 | k as u64;
            }
            for bit in 0..8 {
                // The input bit with value 0x80 >> bit takes the window starting `bit` bits in.
                row[0x80 >> bit] = (v >> (8 - bit)) as u32;
            }
            for x in 1..256usize {
                let low = x & x.wrapping_neg();
                if low != x {
                    row[x] = row[x ^ low] ^ row[low];
                }
            }
        }
        Toeplitz {
            key: *key,
            symmetric,
            table,
        }
    }

    /// The key.
    pub fn key(&self) -> &[u8; KEY_LEN] {
        &self.key
    }

    /// Whether the hasher is symmetric.
    pub fn is_symmetric(&self) -> bool {
        self.symmetric
    }

    /// The Toeplitz hash of `input` as given (no symmetric reordering). Only the first
    /// [`MAX_INPUT_LEN`] bytes are hashed: no RSS input is longer.
    #[inline]
    pub fn hash_bytes(&self, input: &[u8]) -> u32 {
        let mut h = 0u32;
        for (row, &b) in self.table.iter().zip(input) {
            h ^= row[b as usize];
        }
        h
    }

    /// Hash of an IPv4 2-tuple (`ports` None) or 4-tuple (`ports` = (source, destination)).
    #[inline]
    pub fn hash_v4(&self, src: Ipv4Addr, dst: Ipv4Addr, ports: Option<(u16, u16)>) -> u32 {
        let (mut s, mut d) = (src.octets(), dst.octets());
        let (mut sp, mut dp) = ports.unwrap_or((0, 0));
        if self.symmetric && (s, sp) > (d, dp) {
            core::mem::swap(&mut s, &mut d);
            core::mem::swap(&mut sp, &mut dp);
        }
        let mut input = [0u8; 12];
        input[..4].copy_from_slice(&s);
        input[4..8].copy_from_slice(&d);
        input[8..10].copy_from_slice(&sp.to_be_bytes());
        input[10..12].copy_from_slice(&dp.to_be_bytes());
        let n = if ports.is_some() { 12 } else { 8 };
        self.hash_bytes(&input[..n])
    }

    /// Hash of an IPv6 2-tuple (`ports` None) or 4-tuple.
    #[inline]
    pub fn hash_v6(&self, src: &Ipv6Addr, dst: &Ipv6Addr, ports: Option<(u16, u16)>) -> u32 {
        let (mut s, mut d) = (src.octets(), dst.octets());
        let (mut sp, mut dp) = ports.unwrap_or((0, 0));
        if self.symmetric && (s, sp) > (d, dp) {
            core::mem::swap(&mut s, &mut d);
            core::mem::swap(&mut sp, &mut dp);
        }
        let mut input = [0u8; 36];
        input[..16].copy_from_slice(&s);
        input[16..32].copy_from_slice(&d);
        input[32..34].copy_from_slice(&sp.to_be_bytes());
        input[34..36].copy_from_slice(&dp.to_be_bytes());
        let n = if ports.is_some() { 36 } else { 32 };
        self.hash_bytes(&input[..n])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Microsoft, "Verifying the RSS Hash Calculation": (source, sport, destination, dport,
    /// hash of the addresses, hash with ports), default key.
    const V4: [(&str, u16, &str, u16, u32, u32); 5] = [
        ("66.9.149.187", 2794, "161.142.100.80", 1766, 0x323e8fc2, 0x51ccc178),
        ("199.92.111.2", 14230, "65.69.140.83", 4739, 0xd718262a, 0xc626b0ea),
        ("24.19.198.95", 12898, "12.22.207.184", 38024, 0xd2d0a5de, 0x5c2b394a),
        ("38.27.205.30", 48228, "209.142.163.6", 2217, 0x82989176, 0xafc7327f),
        ("153.39.163.191", 44251, "202.188.127.2", 1303, 0x5d1809c5, 0x10e828a2),
    ];
    const V6: [(&str, u16, &str, u16, u32, u32); 3] = [
        (
            "3ffe:2501:200:1fff::7",
            2794,
            "3ffe:2501:200:3::1",
            1766,
            0x2cc18cd5,
            0x40207d3d,
        ),
        (
            "3ffe:501:8::260:97ff:fe40:efab",
            14230,
            "ff02::1",
            4739,
            0x0f0c461c,
            0xdde51bbf,
        ),
        (
            "3ffe:1900:4545:3:200:f8ff:fe21:67cf",
            44251,
            "fe80::200:f8ff:fe21:67cf",
            38024,
            0x4b61e985,
            0x02d1feef,
        ),
    ];

    #[test]
    fn microsoft_vectors_ipv4() {
        let t = Toeplitz::default();
        for (s, sp, d, dp, h2, h4) in V4 {
            let (s, d) = (s.parse().unwrap(), d.parse().unwrap());
            assert_eq!(t.hash_v4(s, d, None), h2, "{s} {d}");
            assert_eq!(t.hash_v4(s, d, Some((sp, dp))), h4, "{s} {d}");
        }
    }

    #[test]
    fn microsoft_vectors_ipv6() {
        let t = Toeplitz::default();
        for (s, sp, d, dp, h2, h4) in V6 {
            let (s, d): (Ipv6Addr, Ipv6Addr) = (s.parse().unwrap(), d.parse().unwrap());
            assert_eq!(t.hash_v6(&s, &d, None), h2, "{s} {d}");
            assert_eq!(t.hash_v6(&s, &d, Some((sp, dp))), h4, "{s} {d}");
        }
    }

    /// DPDK's `rte_softrss` (lib/hash/rte_thash.h), restated: the input as 32-bit words in host
    /// order, and for every set bit `i` (from 31 down) of word `j`, XOR the 32 key bits that start
    /// `31 - i` bits into key word `j`.
    fn softrss(words: &[u32], key: &[u8; KEY_LEN]) -> u32 {
        let kw = |j: usize| u32::from_be_bytes([key[4 * j], key[4 * j + 1], key[4 * j + 2], key[4 * j + 3]]);
        let mut ret = 0u32;
        for (j, &w) in words.iter().enumerate() {
            for i in (0..32).rev() {
                if w & (1 << i) != 0 {
                    ret ^= kw(j) << (31 - i) | ((kw(j + 1) as u64) >> (i + 1)) as u32;
                }
            }
        }
        ret
    }

    fn words_v4(s: Ipv4Addr, d: Ipv4Addr, ports: Option<(u16, u16)>) -> Vec<u32> {
        let mut w = vec![u32::from(s), u32::from(d)];
        if let Some((sp, dp)) = ports {
            w.push((sp as u32) << 16 | dp as u32);
        }
        w
    }

    fn words_v6(s: &Ipv6Addr, d: &Ipv6Addr, ports: Option<(u16, u16)>) -> Vec<u32> {
        let mut w = Vec::new();
        for a in [s, d] {
            let o = a.octets();
            for c in o.chunks(4) {
                w.push(u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
            }
        }
        if let Some((sp, dp)) = ports {
            w.push((sp as u32) << 16 | dp as u32);
        }
        w
    }

    #[test]
    fn oracle_reproduces_the_vectors_too() {
        let (s, sp, d, dp, _, h4) = V4[0];
        let w = words_v4(s.parse().unwrap(), d.parse().unwrap(), Some((sp, dp)));
        assert_eq!(softrss(&w, &MICROSOFT_KEY), h4);
    }

    proptest! {
        #[test]
        fn matches_softrss_v4(
            key in proptest::array::uniform32(any::<u8>()),
            tail in proptest::array::uniform8(any::<u8>()),
            s in any::<u32>(), d in any::<u32>(),
            ports in proptest::option::of(any::<(u16, u16)>()),
        ) {
            let mut k = [0u8; KEY_LEN];
            k[..32].copy_from_slice(&key);
            k[32..].copy_from_slice(&tail);
            let t = Toeplitz::new(&k, false);
            let (s, d) = (Ipv4Addr::from(s), Ipv4Addr::from(d));
            prop_assert_eq!(t.hash_v4(s, d, ports), softrss(&words_v4(s, d, ports), &k));
            let m = Toeplitz::default();
            prop_assert_eq!(
                m.hash_v4(s, d, ports),
                softrss(&words_v4(s, d, ports), &MICROSOFT_KEY)
            );
        }

        #[test]
        fn matches_softrss_v6(
            key in proptest::array::uniform32(any::<u8>()),
            tail in proptest::array::uniform8(any::<u8>()),
            s in any::<u128>(), d in any::<u128>(),
            ports in proptest::option::of(any::<(u16, u16)>()),
        ) {
            let mut k = [0u8; KEY_LEN];
            k[..32].copy_from_slice(&key);
            k[32..].copy_from_slice(&tail);
            let t = Toeplitz::new(&k, false);
            let (s, d) = (Ipv6Addr::from(s), Ipv6Addr::from(d));
            prop_assert_eq!(t.hash_v6(&s, &d, ports), softrss(&words_v6(&s, &d, ports), &k));
        }

        #[test]
        fn symmetric_mode_is_symmetric(
            s in any::<u32>(), d in any::<u32>(), sp in any::<u16>(), dp in any::<u16>(),
            s6 in any::<u128>(), d6 in any::<u128>(),
        ) {
            let t = Toeplitz::new(&MICROSOFT_KEY, true);
            let (s, d) = (Ipv4Addr::from(s), Ipv4Addr::from(d));
            prop_assert_eq!(t.hash_v4(s, d, Some((sp, dp))), t.hash_v4(d, s, Some((dp, sp))));
            prop_assert_eq!(t.hash_v4(s, d, None), t.hash_v4(d, s, None));
            let (s6, d6) = (Ipv6Addr::from(s6), Ipv6Addr::from(d6));
            prop_assert_eq!(
                t.hash_v6(&s6, &d6, Some((sp, dp))),
                t.hash_v6(&d6, &s6, Some((dp, sp)))
            );
            // In canonical order it is the plain hash.
            let plain = Toeplitz::default();
            let (lo, hi) = if s <= d { (s, d) } else { (d, s) };
            prop_assert_eq!(t.hash_v4(s, d, None), plain.hash_v4(lo, hi, None));
        }
    }

    #[test]
    fn keys_of_40_or_52_bytes_hash_with_their_first_40_and_debug_shows_none() {
        let long: Vec<u8> = (0..LONG_KEY_LEN as u8).map(|i| i.wrapping_mul(37) ^ 0xa5).collect();
        let k = RssKey::new(&long).unwrap();
        assert_eq!((k.as_bytes(), &k.hash_key()[..]), (&long[..], &long[..KEY_LEN]));
        let short = RssKey::new(&long[..KEY_LEN]).unwrap();
        assert_eq!(short.hash_key(), k.hash_key());
        assert_ne!(short, k, "the NIC may take all 52");
        assert!(RssKey::new(&long[..41]).is_none() && RssKey::new(&[]).is_none());
        assert!(!k.is_public() && RssKey::default().is_public());
        let t = Toeplitz::new(k.hash_key(), true);
        assert_eq!(format!("{k:?}"), "RssKey(52 bytes, secret)");
        assert_eq!(format!("{short:?}"), "RssKey(40 bytes, secret)");
        assert_eq!(format!("{t:?}"), "Toeplitz { key: \"secret\", symmetric: true, .. }");
        assert_eq!(format!("{:?}", RssKey::default()), "RssKey(40 bytes, public)");
    }

    #[test]
    fn plain_mode_is_not_symmetric() {
        let t = Toeplitz::default();
        let (s, d) = ("66.9.149.187".parse().unwrap(), "161.142.100.80".parse().unwrap());
        assert_ne!(t.hash_v4(s, d, None), t.hash_v4(d, s, None));
        assert!(!t.is_symmetric());
        assert_eq!(t.key(), &MICROSOFT_KEY);
    }
}
