//! Sets of IPv4 and IPv6 prefixes asked one question per packet: does one of them hold this
//! address? Built on the control thread at load and reload, read by the RX lcores without a
//! lock; a lookup touches a bounded number of cache lines whatever the set's size, so a list
//! of 1,000,000 prefixes costs a packet what one of 100 does (`benches/curves.py`).
//!
//! IPv4 (the DIR-24-8 idea of Gupta, Lin and McKeown, "Routing Lookups in Hardware at Memory
//! Access Speeds", 1998, reduced to membership): two bits per /24, 4 MiB for the whole space:
//! none of it, all of it, or some of it. Only "some" (a prefix longer than /24 inside) looks
//! further, in an open-addressing table of the /24s that have one, holding a 256-bit map of
//! their last octet. One load for any address in a /24 wholly in or out of the set, three at
//! most otherwise.
//!
//! IPv6: one open-addressing table per prefix length present, of the masked prefixes; a lookup
//! probes each length's table once (lists in practice hold a handful of lengths, /32 to /64).
//! The tables are at most half full and their longest probe run is bounded at build.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A prefix: an address and a length (bits past the length are zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Prefix {
    /// The address, its host bits zero.
    pub addr: IpAddr,
    /// The length in bits.
    pub len: u8,
}

impl Prefix {
    /// Parses `ADDR/LEN` or a bare address (a host prefix). Host bits set are refused (a
    /// mistyped prefix would otherwise drop more, or less, than its writer meant).
    pub fn parse(text: &str) -> Result<Prefix, String> {
        let text = text.trim();
        let (a, l) = match text.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (text, None),
        };
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("{text:?} is not a prefix (ADDR/LEN or an address)"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match l {
            None => max,
            Some(l) => l
                .parse::<u8>()
                .ok()
                .filter(|&n| n <= max)
                .ok_or_else(|| format!("{text:?}: the length must be 0 to {max}"))?,
        };
        let masked = mask(addr, len);
        if masked != addr {
            return Err(format!(
                "{text:?} has host bits set past /{len} (the prefix is {masked}/{len})"
            ));
        }
        Ok(Prefix { addr, len })
    }
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

fn mask(a: IpAddr, len: u8) -> IpAddr {
    match a {
        IpAddr::V4(v) => IpAddr::V4(Ipv4Addr::from(u32::from(v) & v4_mask(len))),
        IpAddr::V6(v) => IpAddr::V6(Ipv6Addr::from(u128::from(v) & v6_mask(len))),
    }
}

fn v4_mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - len as u32)
    }
}

fn v6_mask(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - len as u32)
    }
}

/// A /24's state in [`V4Set::top`].
const NONE: u64 = 0;
const ALL: u64 = 1;
const SOME: u64 = 2;

/// The IPv4 half of a [`PrefixSet`].
#[derive(Clone)]
struct V4Set {
    /// Two bits per /24 (`NONE`, `ALL`, `SOME`), 32 /24s a word.
    top: Box<[u64]>,
    /// The /24s in state `SOME`: keys (the /24's number + 1; 0 empty), by [`slot_of`].
    keys: Box<[u32]>,
    /// The last-octet map of each key's /24.
    maps: Box<[[u64; 4]]>,
    /// The longest probe run a lookup may take.
    probes: usize,
}

/// Knuth's multiplicative hash into a table of `2^bits` slots.
#[inline(always)]
fn slot_of(key: u64, bits: u32) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - bits)) as usize
}

/// Slots for `n` keys at most half full: a power of two, at least 2.
fn table_bits(n: usize) -> u32 {
    (n.max(1) * 2).next_power_of_two().trailing_zeros().max(1)
}

impl V4Set {
    fn build(prefixes: &[(u32, u8)]) -> V4Set {
        let mut top = vec![0u64; (1 << 24) / 32].into_boxed_slice();
        let set = |top: &mut [u64], i: usize, v: u64| {
            let (w, s) = (i / 32, (i % 32) * 2);
            top[w] = (top[w] & !(3 << s)) | (v << s);
        };
        let get = |top: &[u64], i: usize| (top[i / 32] >> ((i % 32) * 2)) & 3;
        // Short prefixes first: a /16 then marks every /24 ALL; a /28 inside one then finds
        // it ALL and adds nothing.
        let mut sorted = prefixes.to_vec();
        sorted.sort_by_key(|&(_, l)| l);
        let mut deep: std::collections::HashMap<u32, [u64; 4]> = std::collections::HashMap::new();
        for &(a, len) in &sorted {
            if len <= 24 {
                // Sorted by length, no /24 is SOME yet. 32 /24s a word: /19 and shorter fill
                // whole words.
                let first = (a >> 8) as usize;
                let n = 1usize << (24 - len);
                if n >= 32 {
                    top[first / 32..(first + n) / 32].fill(0x5555_5555_5555_5555);
                } else {
                    for i in first..first + n {
                        set(&mut top, i, ALL);
                    }
                }
            } else {
                let i = (a >> 8) as usize;
                if get(&top, i) == ALL {
                    continue;
                }
                set(&mut top, i, SOME);
                let map = deep.entry(i as u32).or_insert([0; 4]);
                let first = (a & 0xff) as usize;
                for o in first..first + (1usize << (32 - len)) {
                    map[o / 64] |= 1 << (o % 64);
                }
            }
        }
        let bits = table_bits(deep.len());
        let n = 1usize << bits;
        let mut keys = vec![0u32; n].into_boxed_slice();
        let mut maps = vec![[0u64; 4]; n].into_boxed_slice();
        let mut probes = 1;
        for (k, m) in deep {
            let mut s = slot_of(k as u64, bits);
            let mut run = 1;
            while keys[s] != 0 {
                s = (s + 1) & (n - 1);
                run += 1;
            }
            keys[s] = k + 1;
            maps[s] = m;
            probes = probes.max(run);
        }
        V4Set {
            top,
            keys,
            maps,
            probes,
        }
    }

    #[inline(always)]
    fn contains(&self, a: u32) -> bool {
        let i = (a >> 8) as usize;
        match (self.top[i / 32] >> ((i % 32) * 2)) & 3 {
            NONE => false,
            ALL => true,
            _ => self.deep(i as u32, a as u8),
        }
    }

    #[cold]
    fn deep(&self, i: u32, last: u8) -> bool {
        let mask = self.keys.len() - 1;
        let mut s = slot_of(i as u64, mask.count_ones());
        for _ in 0..self.probes {
            match self.keys[s] {
                0 => return false,
                k if k == i + 1 => return self.maps[s][last as usize / 64] >> (last % 64) & 1 == 1,
                _ => s = (s + 1) & mask,
            }
        }
        false
    }
}

/// One prefix length's table in a [`V6Set`].
#[derive(Clone)]
struct V6Len {
    mask: u128,
    bits: u32,
    /// Masked prefixes; `None` empty.
    keys: Box<[Option<u128>]>,
    probes: usize,
}

/// The IPv6 half of a [`PrefixSet`].
#[derive(Clone, Default)]
struct V6Set {
    /// Longest first (a lookup stops at the first table that holds the address).
    lens: Vec<V6Len>,
}

fn fold(k: u128) -> u64 {
    (k as u64) ^ ((k >> 64) as u64).rotate_left(29)
}

impl V6Set {
    fn build(prefixes: &[(u128, u8)]) -> V6Set {
        let mut by_len: std::collections::BTreeMap<u8, Vec<u128>> = Default::default();
        for &(a, l) in prefixes {
            by_len.entry(l).or_default().push(a);
        }
        let mut lens: Vec<V6Len> = by_len
            .into_iter()
            .map(|(len, mut v)| {
                v.sort_unstable();
                v.dedup();
                let bits = table_bits(v.len());
                let n = 1usize << bits;
                let mut keys = vec![None; n].into_boxed_slice();
                let mut probes = 1;
                for k in v {
                    let mut s = slot_of(fold(k), bits);
                    let mut run = 1;
                    while keys[s].is_some() {
                        s = (s + 1) & (n - 1);
                        run += 1;
                    }
                    keys[s] = Some(k);
                    probes = probes.max(run);
                }
                V6Len {
                    mask: v6_mask(len),
                    bits,
                    keys,
                    probes,
                }
            })
            .collect();
        lens.reverse();
        V6Set { lens }
    }

    #[inline]
    fn contains(&self, a: u128) -> bool {
        self.lens.iter().any(|t| {
            let k = a & t.mask;
            let n = t.keys.len();
            let mut s = slot_of(fold(k), t.bits);
            for _ in 0..t.probes {
                match t.keys[s] {
                    None => return false,
                    Some(x) if x == k => return true,
                    _ => s = (s + 1) & (n - 1),
                }
            }
            false
        })
    }
}

/// A set of IPv4 and IPv6 prefixes.
#[derive(Clone, Default)]
pub struct PrefixSet {
    v4: Option<V4Set>,
    v6: V6Set,
    /// Prefixes as given (after removing repeats).
    len: usize,
    /// The IPv6 prefix lengths present.
    v6_lengths: usize,
}

impl std::fmt::Debug for PrefixSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PrefixSet({} prefixes)", self.len)
    }
}

impl PrefixSet {
    /// The set of `prefixes`.
    pub fn new(prefixes: &[Prefix]) -> PrefixSet {
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        for p in prefixes {
            match p.addr {
                IpAddr::V4(a) => v4.push((u32::from(a), p.len)),
                IpAddr::V6(a) => v6.push((u128::from(a), p.len)),
            }
        }
        v4.sort_unstable();
        v4.dedup();
        let mut v6d = v6.clone();
        v6d.sort_unstable();
        v6d.dedup();
        let v6set = V6Set::build(&v6d);
        PrefixSet {
            len: v4.len() + v6d.len(),
            v6_lengths: v6set.lens.len(),
            v4: (!v4.is_empty()).then(|| V4Set::build(&v4)),
            v6: v6set,
        }
    }

    /// Prefixes in the set.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No prefix.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether a prefix of the set holds `a`.
    #[inline]
    pub fn contains_v4(&self, a: Ipv4Addr) -> bool {
        self.v4.as_ref().is_some_and(|s| s.contains(u32::from(a)))
    }

    /// Whether a prefix of the set holds `a`.
    #[inline]
    pub fn contains_v6(&self, a: &Ipv6Addr) -> bool {
        self.v6_lengths != 0 && self.v6.contains(u128::from(*a))
    }

    /// Whether a prefix of the set holds `a`.
    pub fn contains(&self, a: IpAddr) -> bool {
        match a {
            IpAddr::V4(v) => self.contains_v4(v),
            IpAddr::V6(v) => self.contains_v6(&v),
        }
    }
}

/// Reads a list file's text: one prefix a line, `#` to the end of a line a comment, blank lines
/// skipped. An error names the line (1-based).
pub fn parse_list(text: &str) -> Result<Vec<Prefix>, (usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        out.push(Prefix::parse(line).map_err(|e| (i + 1, e))?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(list: &[&str]) -> PrefixSet {
        PrefixSet::new(&list.iter().map(|p| Prefix::parse(p).unwrap()).collect::<Vec<_>>())
    }

    /// The obvious answer: some prefix's masked bits equal the address's.
    fn naive(list: &[Prefix], a: IpAddr) -> bool {
        list.iter()
            .any(|p| p.addr.is_ipv4() == a.is_ipv4() && mask(a, p.len) == p.addr)
    }

    #[test]
    fn prefixes_parse_and_bad_ones_say_why() {
        assert_eq!(Prefix::parse("192.0.2.0/24").unwrap().len, 24);
        assert_eq!(Prefix::parse(" 192.0.2.7 ").unwrap().len, 32);
        assert_eq!(Prefix::parse("2001:db8::/32").unwrap().len, 32);
        assert_eq!(Prefix::parse("::/0").unwrap().len, 0);
        for (bad, why) in [
            ("192.0.2.1/24", "host bits set past /24 (the prefix is 192.0.2.0/24)"),
            ("192.0.2.0/33", "0 to 32"),
            ("2001:db8::/129", "0 to 128"),
            ("banana", "not a prefix"),
            ("192.0.2.0/", "0 to 32"),
        ] {
            let e = Prefix::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn lists_skip_comments_and_blanks_and_name_the_bad_line() {
        let l = parse_list("# botnet\n\n198.51.100.0/24  # one\n2001:db8::/48\n").unwrap();
        assert_eq!(l.len(), 2);
        let (line, e) = parse_list("10.0.0.0/8\n\n10.0.0.1/8\n").unwrap_err();
        assert_eq!(line, 3);
        assert!(e.contains("host bits"), "{e}");
    }

    #[test]
    fn v4_edges_whole_deep_and_overlapping() {
        let s = set(&[
            "10.0.0.0/8",
            "192.0.2.128/25",
            "192.0.2.5",
            "198.51.100.0/24",
            "198.51.100.7/32",
        ]);
        let yes = [
            "10.255.255.255",
            "10.0.0.0",
            "192.0.2.128",
            "192.0.2.255",
            "192.0.2.5",
            "198.51.100.7",
            "198.51.100.0",
        ];
        let no = [
            "11.0.0.0",
            "9.255.255.255",
            "192.0.2.127",
            "192.0.2.4",
            "192.0.2.6",
            "198.51.101.0",
            "0.0.0.0",
        ];
        for a in yes {
            assert!(s.contains(a.parse().unwrap()), "{a}");
        }
        for a in no {
            assert!(!s.contains(a.parse().unwrap()), "{a}");
        }
        assert!(set(&["0.0.0.0/0"]).contains("203.0.113.9".parse().unwrap()));
        assert!(!set(&["2001:db8::/32"]).contains("203.0.113.9".parse().unwrap()));
        assert!(set(&[]).is_empty());
        assert!(!set(&[]).contains("203.0.113.9".parse().unwrap()));
    }

    #[test]
    fn v6_lengths_each_probed() {
        let s = set(&["2001:db8::/32", "2001:db8:1:2::/64", "2001:db9::1", "fe80::/10"]);
        for a in ["2001:db8:ffff::1", "2001:db9::1", "febf::1", "fe80::"] {
            assert!(s.contains(a.parse().unwrap()), "{a}");
        }
        for a in ["2001:db7::1", "2001:db9::2", "fec0::1", "::"] {
            assert!(!s.contains(a.parse().unwrap()), "{a}");
        }
        assert!(!s.contains("192.0.2.1".parse().unwrap()));
    }

    /// Random prefixes of every length against the obvious answer, at random addresses and at
    /// each prefix's first and last address and their neighbours.
    #[test]
    fn random_sets_answer_as_the_naive_scan() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..8 {
            let mut list = Vec::new();
            for _ in 0..(50 + round * 20) {
                let r = rnd();
                if r % 3 == 0 {
                    // Clustered, so that short and long prefixes overlap.
                    let len = 8 + (r >> 8) as u8 % 121;
                    let a = (0x2001_0db8u128 << 96) | ((rnd() as u128) << 32 >> 32);
                    list.push(Prefix {
                        addr: mask(IpAddr::V6(a.into()), len),
                        len,
                    });
                } else {
                    let len = (r >> 8) as u8 % 33;
                    let a = 0xc000_0000u32 | (rnd() as u32 & 0x00ff_ffff);
                    list.push(Prefix {
                        addr: mask(IpAddr::V4(a.into()), len),
                        len,
                    });
                }
            }
            let s = PrefixSet::new(&list);
            let mut probes: Vec<IpAddr> = Vec::new();
            for p in &list {
                match p.addr {
                    IpAddr::V4(a) => {
                        let lo = u32::from(a);
                        let hi = lo | !v4_mask(p.len);
                        for v in [lo.wrapping_sub(1), lo, hi, hi.wrapping_add(1)] {
                            probes.push(IpAddr::V4(v.into()));
                        }
                    }
                    IpAddr::V6(a) => {
                        let lo = u128::from(a);
                        let hi = lo | !v6_mask(p.len);
                        for v in [lo.wrapping_sub(1), lo, hi, hi.wrapping_add(1)] {
                            probes.push(IpAddr::V6(v.into()));
                        }
                    }
                }
            }
            for _ in 0..2000 {
                probes.push(IpAddr::V4((0xc000_0000u32 | (rnd() as u32 & 0x00ff_ffff)).into()));
                probes.push(IpAddr::V6(
                    ((0x2001_0db8u128 << 96) | ((rnd() as u128) << 32 >> 32)).into(),
                ));
            }
            for a in probes {
                assert_eq!(s.contains(a), naive(&list, a), "{a} in {list:?}");
            }
        }
    }

    #[test]
    fn a_million_prefixes_build_and_answer() {
        let list: Vec<Prefix> = (0..1_000_000u32)
            .map(|i| Prefix {
                addr: IpAddr::V4(Ipv4Addr::from(0x0100_0000 + i * 7 * 256)),
                len: if i % 10 == 0 { 28 } else { 24 },
            })
            .collect();
        let s = PrefixSet::new(&list);
        assert_eq!(s.len(), 1_000_000);
        assert!(s.contains_v4(Ipv4Addr::from(0x0100_0000 + 7 * 256 + 200)));
        assert!(!s.contains_v4(Ipv4Addr::from(0x0100_0000 + 256)));
        // A /28 answers for its 16 addresses only.
        assert!(s.contains_v4(Ipv4Addr::from(0x0100_0000 + 15)));
        assert!(!s.contains_v4(Ipv4Addr::from(0x0100_0000 + 16)));
    }
}
