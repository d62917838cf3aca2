//! The wire layer's Toeplitz hash against DPDK's own `rte_softrss` on random tuples (IPv4 and
//! IPv6, with and without ports), with the Microsoft key and random keys.
#![cfg(feature = "dpdk")]

use fastpath::dpdk::softrss;
use fastpath::wire::toeplitz::{Toeplitz, MICROSOFT_KEY};
use std::net::{Ipv4Addr, Ipv6Addr};

fn words(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn toeplitz_matches_rte_softrss() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for k in 0..20 {
        let mut key = MICROSOFT_KEY;
        if k > 0 {
            for b in key.iter_mut() {
                *b = rnd() as u8;
            }
        }
        let t = Toeplitz::new(&key, false);
        for _ in 0..200 {
            let (s4, d4) = (Ipv4Addr::from(rnd() as u32), Ipv4Addr::from(rnd() as u32));
            let (sp, dp) = (rnd() as u16, rnd() as u16);
            let mut tuple = words(&[s4.octets(), d4.octets()].concat());
            assert_eq!(t.hash_v4(s4, d4, None), softrss(&tuple, &key), "v4 2-tuple");
            tuple.push(((sp as u32) << 16) | dp as u32);
            assert_eq!(t.hash_v4(s4, d4, Some((sp, dp))), softrss(&tuple, &key), "v4 4-tuple");

            let s6 = Ipv6Addr::from(((rnd() as u128) << 64) | rnd() as u128);
            let d6 = Ipv6Addr::from(((rnd() as u128) << 64) | rnd() as u128);
            let mut tuple = words(&[s6.octets(), d6.octets()].concat());
            assert_eq!(t.hash_v6(&s6, &d6, None), softrss(&tuple, &key), "v6 2-tuple");
            tuple.push(((sp as u32) << 16) | dp as u32);
            assert_eq!(t.hash_v6(&s6, &d6, Some((sp, dp))), softrss(&tuple, &key), "v6 4-tuple");
        }
    }
}
