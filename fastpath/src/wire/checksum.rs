//! The Internet checksum: full computation (RFC 1071), incremental update (RFC 1624) and the
//! pseudo-headers of UDP, TCP and ICMPv6 for both address families.
//!
//! Sums are carried as `u32` "partial sums" of big-endian 16-bit words; [`fold`] turns one into
//! the 16-bit one's complement sum and [`finish`] into the value stored in a header. A partial
//! sum of up to 64 KiB of data cannot overflow a `u32` (32768 words × 0xffff < 2³¹), and adding a
//! handful of such sums (pseudo-header + data) is still safe.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Adds the bytes of `data` as big-endian 16-bit words to the partial sum `acc`; an odd final
/// byte is padded with a zero byte on the right (RFC 1071 §4.1).
#[inline]
pub fn sum(acc: u32, data: &[u8]) -> u32 {
    sum_words(acc, data, u32::from_be_bytes)
}

/// `data`'s 4-byte words as `word` reads them (an odd tail zero-padded on the right), added to
/// `acc` and folded to at most 18 bits: [`sum`] in network order, [`verify`] in memory order.
#[inline(always)]
fn sum_words(acc: u32, data: &[u8], word: impl Fn([u8; 4]) -> u32) -> u32 {
    let wide = sum_wide(acc, data, word);
    // Fold the u64 into 16-bit words: their one's complement sum is unchanged (2^16 ≡ 1 mod
    // 0xffff). Four lanes of at most 0xffff: the result fits in 18 bits.
    ((wide & 0xffff) + ((wide >> 16) & 0xffff) + ((wide >> 32) & 0xffff) + (wide >> 48)) as u32
}

/// `data`'s 4-byte words as `word` reads them (an odd tail zero-padded on the right), added to
/// `acc`, not folded.
#[inline(always)]
fn sum_wide(acc: u32, data: &[u8], word: impl Fn([u8; 4]) -> u32) -> u64 {
    // Accumulate 32-bit words in a u64: two 16-bit lanes at once, and no carry can be lost (2^32
    // words would be needed to overflow).
    let mut wide: u64 = acc as u64;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        wide += word([c[0], c[1], c[2], c[3]]) as u64;
    }
    let rest = chunks.remainder();
    let mut tail = [0u8; 4];
    tail[..rest.len()].copy_from_slice(rest);
    wide += word(tail) as u64;
    wide
}

/// Folds a partial sum into the 16-bit one's complement sum (end-around carry).
#[inline]
pub fn fold(mut s: u32) -> u16 {
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s as u16
}

/// The checksum field value for a partial sum: the one's complement of the folded sum.
#[inline]
pub fn finish(s: u32) -> u16 {
    !fold(s)
}

/// The RFC 1071 checksum of `data` (as stored in a header whose checksum field is zero).
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    finish(sum(0, data))
}

/// Whether `data`, checksum field included, sums to all ones (RFC 1071 §1 "checking").
///
/// Summed in the machine's byte order: the one's complement sum is independent of it (RFC 1071
/// §2(B): swapping the bytes of every word swaps the bytes of the sum), and all ones is the same
/// either way, so the check needs no byte swap per word. (An odd final byte, padded on the right
/// in network order, is its word's first byte in memory order too.)
///
/// Not folded either: the one's complement sum is all ones exactly when the plain sum of the
/// words is a non-zero multiple of 0xffff (2^16 ≡ 1 mod 0xffff, so every word width and every
/// end-around carry keeps the residue, and only a zero sum folds to zero). One remainder by a
/// constant (a multiply) instead of folding four lanes: fewer instructions, on every IPv4 packet
/// received without the NIC's verdict (benches/NOTES.md, "Checksums and addresses without byte
/// swaps").
///
/// The remainder itself is not computed: for an odd divisor `d`, `x` is a multiple of `d`
/// exactly when `x · d⁻¹ mod 2⁶⁴ ≤ (2⁶⁴ − 1) / d` (multiplying by the inverse maps the multiples
/// of `d` onto `0..=(2⁶⁴ − 1) / d` one to one; Granlund and Montgomery, "Division by invariant
/// integers using multiplication", 1994, §9). One multiply, a subtraction and one compare:
/// LLVM computed the remainder (a widening multiply, a shift, a subtract) for
/// `wide % 0xffff == 0` under the `wide != 0` test.
#[inline]
pub fn verify(data: &[u8]) -> bool {
    let wide = sum_wide(0, data, u32::from_ne_bytes);
    // The multiples of 0xffff map onto 0..=MAX / 0xffff, zero onto zero: one subtraction moves
    // zero past the end, so the one compare also refuses a zero sum.
    wide.wrapping_mul(INV_FFFF).wrapping_sub(1) < u64::MAX / 0xffff
}

/// The inverse of 0xffff modulo 2⁶⁴ (Newton's iteration: each step doubles the correct low bits,
/// from 3 for any odd number, its own inverse modulo 8).
const INV_FFFF: u64 = {
    let d: u64 = 0xffff;
    let mut x = d;
    let mut i = 0;
    while i < 5 {
        x = x.wrapping_mul(2u64.wrapping_sub(d.wrapping_mul(x)));
        i += 1;
    }
    assert!(d.wrapping_mul(x) == 1);
    x
};

/// RFC 1624 §3, eqn. 3: the header checksum after one 16-bit word changes from `old` to `new`,
/// `HC' = ~(~HC + ~m + m')`. Unlike eqn. 2 it never produces the -0 (0xffff ↔ 0x0000) error; it
/// equals a full recompute unless every checksummed word of the new header is zero.
#[inline]
pub fn update16(hc: u16, old: u16, new: u16) -> u16 {
    !fold(!hc as u32 + !old as u32 + new as u32)
}

/// [`update16`] for a 32-bit field (an IPv4 address): both halves at once.
#[inline]
pub fn update32(hc: u16, old: u32, new: u32) -> u16 {
    let s = !hc as u32 + (!old >> 16) + (!old & 0xffff) + (new >> 16) + (new & 0xffff);
    !fold(s)
}

/// [`update16`] for a run of bytes at an even offset of the checksummed data: `old` and `new`
/// must have the same length (an odd length is zero padded, like [`sum`]).
#[inline]
pub fn update_bytes(hc: u16, old: &[u8], new: &[u8]) -> u16 {
    debug_assert_eq!(old.len(), new.len());
    // ~m summed word by word is the one's complement of the sum of m.
    let s = !hc as u32 + !fold(sum(0, old)) as u32 + sum(0, new);
    !fold(s)
}

/// Partial sum of the IPv4 pseudo-header (RFC 768, RFC 9293 §3.1): source, destination, zero,
/// protocol, upper-layer length.
#[inline]
pub fn pseudo_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, len: u16) -> u32 {
    let s = src.octets();
    let d = dst.octets();
    be_word(s[0], s[1]) + be_word(s[2], s[3]) + be_word(d[0], d[1]) + be_word(d[2], d[3]) + protocol as u32 + len as u32
}

/// Partial sum of the IPv6 pseudo-header (RFC 8200 §8.1): source, destination, 32-bit
/// upper-layer length, three zero bytes, next header.
#[inline]
pub fn pseudo_v6(src: &Ipv6Addr, dst: &Ipv6Addr, next_header: u8, len: u32) -> u32 {
    let s = sum(0, &src.octets());
    let d = sum(0, &dst.octets());
    s + d + (len >> 16) + (len & 0xffff) + next_header as u32
}

#[inline]
fn be_word(hi: u8, lo: u8) -> u32 {
    u16::from_be_bytes([hi, lo]) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // A real IPv4 header (UDP, 192.168.0.1 -> 192.168.0.199) whose checksum is 0xb861.
    const IPV4_HEADER: [u8; 20] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8,
        0x00, 0xc7,
    ];

    #[test]
    fn ipv4_header_golden() {
        let mut h = IPV4_HEADER;
        assert!(verify(&h));
        h[10] = 0;
        h[11] = 0;
        assert_eq!(checksum(&h), 0xb861);
    }

    #[test]
    fn rfc1071_example_and_odd_length() {
        // RFC 1071 §3: the words 0001 f203 f4f5 f6f7 sum to ddf2 (with carries folded).
        let b = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(0, &b)), 0xddf2);
        assert_eq!(checksum(&b), !0xddf2);
        // An odd trailing byte is the high byte of a zero-padded word.
        assert_eq!(fold(sum(0, &[0x12, 0x34, 0x56])), 0x1234 + 0x5600);
        assert_eq!(fold(sum(0, &[0xab])), 0xab00);
        assert_eq!(checksum(&[]), 0xffff);
        // All zeros sum to zero, which is not all ones (it folds to 0, "-0" only in theory):
        // `verify` refuses it, whatever the length; 0xffff words sum to all ones and pass.
        for n in [0, 1, 2, 20, 40] {
            assert!(!verify(&vec![0; n]), "{n} zero bytes");
        }
        assert!(verify(&[0xff, 0xff]) && verify(&[0xff; 20]));
    }

    #[test]
    fn pseudo_headers() {
        // Words of the v4 pseudo-header, summed by hand.
        let s = pseudo_v4(Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(198, 51, 100, 2), 17, 0x1234);
        assert_eq!(s, 0xc000 + 0x0201 + 0xc633 + 0x6402 + 17 + 0x1234);
        let a: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let b: Ipv6Addr = "fe80::2".parse().unwrap();
        let s = pseudo_v6(&a, &b, 58, 0x0001_0002);
        assert_eq!(fold(s), fold(0x2001 + 0x0db8 + 1 + 0xfe80 + 2 + 1 + 2 + 58));
    }

    #[test]
    fn update_golden() {
        // ICMP echo request -> reply: the type word 0x0800 becomes 0x0000, the checksum grows by
        // 0x0800.
        assert_eq!(update16(0x2104, 0x0800, 0x0000), 0x2904);
        assert_eq!(update16(0x1234, 0x0800, 0x0000), 0x1a34);
        // Where every other word is zero, eqn. 3 gives 0x0000: the -0 that a full recompute
        // writes as 0xffff, the one case in which the two differ (see `update16`).
        assert_eq!(update16(0xf7ff, 0x0800, 0x0000), 0x0000);
    }

    fn full(words: &[u8], at: usize) -> u16 {
        let mut w = words.to_vec();
        w[at] = 0;
        w[at + 1] = 0;
        checksum(&w)
    }

    proptest! {
        #[test]
        fn incremental_equals_full_recompute(
            mut data in proptest::collection::vec(any::<u8>(), 4..200),
            ck in 0usize..100,
            field in 0usize..100,
            new in any::<u16>(),
        ) {
            let n = data.len() / 2;
            let ck = (ck % n) * 2;
            let mut field = (field % n) * 2;
            if field == ck {
                field = (field + 2) % (n * 2);
            }
            prop_assume!(field != ck);
            let c = full(&data, ck);
            data[ck..ck + 2].copy_from_slice(&c.to_be_bytes());
            let old = u16::from_be_bytes([data[field], data[field + 1]]);
            data[field..field + 2].copy_from_slice(&new.to_be_bytes());
            // RFC 1624 eqn. 3 differs from a full recompute only for all-zero data (+0 vs -0).
            let all_zero = data.iter().enumerate().all(|(i, &b)| i / 2 == ck / 2 || b == 0);
            prop_assume!(!all_zero);
            let inc = update16(c, old, new);
            prop_assert_eq!(inc, full(&data, ck));
            data[ck..ck + 2].copy_from_slice(&inc.to_be_bytes());
            prop_assert!(verify(&data));
        }

        #[test]
        fn incremental_32_and_bytes_equal_full(
            mut data in proptest::collection::vec(any::<u8>(), 12..64),
            new in any::<u32>(),
        ) {
            // checksum at 0..2, a 32-bit field at 4..8
            let c = full(&data, 0);
            data[0..2].copy_from_slice(&c.to_be_bytes());
            let old: [u8; 4] = data[4..8].try_into().unwrap();
            data[4..8].copy_from_slice(&new.to_be_bytes());
            prop_assume!(data[2..].iter().any(|&b| b != 0));
            let want = full(&data, 0);
            prop_assert_eq!(update32(c, u32::from_be_bytes(old), new), want);
            prop_assert_eq!(update_bytes(c, &old, &new.to_be_bytes()), want);
        }

        #[test]
        fn wide_sum_equals_word_by_word(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut s: u32 = 0;
            for (i, &b) in data.iter().enumerate() {
                s += if i % 2 == 0 { (b as u32) << 8 } else { b as u32 };
            }
            prop_assert_eq!(fold(sum(0, &data)), fold(s));
        }

        /// `verify`'s sum in memory order says what the network-order sum says, for any length
        /// (odd ones included) and for data that checks and data that does not.
        #[test]
        fn verify_in_memory_order_agrees_with_the_network_order_sum(
            mut data in proptest::collection::vec(any::<u8>(), 0..300),
            fix in any::<bool>(),
        ) {
            if fix && data.len() >= 2 {
                data[0] = 0;
                data[1] = 0;
                let c = checksum(&data);
                data[0..2].copy_from_slice(&c.to_be_bytes());
            }
            prop_assert_eq!(verify(&data), fold(sum(0, &data)) == 0xffff);
        }

        /// The multiply-by-inverse test is the remainder test, near multiples of 0xffff and
        /// anywhere in a sum's range (a 20-byte header sums to below 5 · 2³²).
        #[test]
        fn the_inverse_test_is_the_remainder_test(k in 0u64..(5 << 32) / 0xffff + 2, off in -2i64..=2, x in any::<u64>()) {
            let near = (k * 0xffff).wrapping_add_signed(off);
            for v in [near, x, x % (5 << 32)] {
                prop_assert_eq!(v.wrapping_mul(INV_FFFF) <= u64::MAX / 0xffff, v % 0xffff == 0, "{:#x}", v);
            }
        }
    }
}
