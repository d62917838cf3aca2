//! The `[icmp] exempt` source prefixes as a lookup structure for step (b) of the limiter.
//!
//! The list is turned, off the data path (at load and reload, on the control thread), into
//! sorted, disjoint, merged address ranges per family; a lookup is one binary search over them
//! (at most 17 probes for [`MAX_EXEMPT`] ranges) instead of a scan of every prefix, and reads
//! only: no allocation, no lock, no write. Overlapping and duplicate prefixes merge, so the
//! ranges never outnumber the prefixes. The set is shared by `Arc` between the config generation
//! and every RX lcore's limiter, so adopting a generation copies a pointer and the last
//! reference is dropped with the retired generation on the control thread.

use super::Prefix;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

/// Most prefixes `[icmp] exempt` may list.
pub const MAX_EXEMPT: usize = 65_536;

/// Sorted, disjoint, non-adjacent inclusive ranges of one family's addresses.
#[derive(Debug, Default, PartialEq, Eq)]
struct Ranges<T> {
    starts: Box<[T]>,
    ends: Box<[T]>,
}

impl<T: Copy + Ord> Ranges<T> {
    /// Merges `ranges` (in any order, overlapping or not) into sorted disjoint ranges.
    fn build(mut ranges: Vec<(T, T)>, next: impl Fn(T) -> Option<T>) -> Self {
        ranges.sort_unstable();
        let mut merged: Vec<(T, T)> = Vec::with_capacity(ranges.len());
        for (s, e) in ranges {
            match merged.last_mut() {
                // Overlapping or touching (`s` right after the last end): one range.
                Some(last) if s <= last.1 || next(last.1) == Some(s) => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        Ranges {
            starts: merged.iter().map(|r| r.0).collect(),
            ends: merged.iter().map(|r| r.1).collect(),
        }
    }

    /// Whether `a` falls in a range: the last range starting at or below `a` must end at or
    /// above it.
    #[inline]
    fn contains(&self, a: T) -> bool {
        let i = self.starts.partition_point(|&s| s <= a);
        i > 0 && self.ends[i - 1] >= a
    }

    fn len(&self) -> usize {
        self.starts.len()
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Inner {
    /// The prefixes as listed (for display, comparison and the reload log).
    listed: Box<[Prefix]>,
    v4: Ranges<u32>,
    v6: Ranges<u128>,
}

impl Inner {
    #[inline(never)]
    fn contains(&self, ip: &IpAddr) -> bool {
        match *ip {
            IpAddr::V4(a) => self.v4.contains(u32::from(a)),
            IpAddr::V6(a) => self.v6.contains(u128::from(a)),
        }
    }
}

/// The exempt prefixes: a set whose lookup cost does not grow with the list (logarithmic in the
/// number of merged ranges). Cloning copies a pointer. Equal when the listed prefixes are.
#[derive(Clone, Debug, Default)]
pub struct ExemptSet(Option<Arc<Inner>>);

impl PartialEq for ExemptSet {
    fn eq(&self, other: &Self) -> bool {
        self.prefixes() == other.prefixes()
    }
}

impl Eq for ExemptSet {}

/// Why a list cannot become an [`ExemptSet`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooManyExempt(pub usize);

impl fmt::Display for TooManyExempt {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{} prefixes: at most {MAX_EXEMPT}", self.0)
    }
}

impl std::error::Error for TooManyExempt {}

/// Something in an exempt list that is allowed but probably not meant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExemptWarning {
    /// The prefix at this index repeats the one at the first index.
    Duplicate(usize, usize),
    /// The prefix at this index is `0.0.0.0/0` or `::/0`: every source of its family skips
    /// every limit.
    Everything(usize),
}

impl ExemptSet {
    /// The set of `prefixes` (at most [`MAX_EXEMPT`]). Call it off the data path: it allocates.
    pub fn new(prefixes: Vec<Prefix>) -> Result<Self, TooManyExempt> {
        if prefixes.len() > MAX_EXEMPT {
            return Err(TooManyExempt(prefixes.len()));
        }
        if prefixes.is_empty() {
            return Ok(ExemptSet(None));
        }
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        for p in &prefixes {
            match p.addr() {
                IpAddr::V4(a) => {
                    let start = u32::from(a);
                    let host = u32::MAX.checked_shr(p.len() as u32).unwrap_or(0);
                    v4.push((start, start | host));
                }
                IpAddr::V6(a) => {
                    let start = u128::from(a);
                    let host = u128::MAX.checked_shr(p.len() as u32).unwrap_or(0);
                    v6.push((start, start | host));
                }
            }
        }
        Ok(ExemptSet(Some(Arc::new(Inner {
            listed: prefixes.into_boxed_slice(),
            v4: Ranges::build(v4, |e: u32| e.checked_add(1)),
            v6: Ranges::build(v6, |e: u128| e.checked_add(1)),
        }))))
    }

    /// The prefixes as listed.
    pub fn prefixes(&self) -> &[Prefix] {
        self.0.as_ref().map_or(&[], |i| &i.listed)
    }

    /// No prefix at all (the lookup is then one compare of a pointer with null).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// The merged ranges a lookup searches (IPv4, IPv6).
    pub fn ranges(&self) -> (usize, usize) {
        self.0.as_ref().map_or((0, 0), |i| (i.v4.len(), i.v6.len()))
    }

    /// Whether `ip` is inside some listed prefix. Reads only; no allocation.
    ///
    /// The empty set (the default) is one compare inline; a listed set is searched out of line.
    /// Called out of line as a whole, the empty set's answer cost every closed-port decision a
    /// call (benches/NOTES.md, "The IPv6 and TCP paths, step by step").
    #[inline(always)]
    pub fn contains(&self, ip: &IpAddr) -> bool {
        match &self.0 {
            None => false,
            Some(i) => i.contains(ip),
        }
    }

    /// Duplicates and whole-family prefixes in `prefixes`, in list order.
    pub fn warnings(prefixes: &[Prefix]) -> Vec<ExemptWarning> {
        let mut first = std::collections::HashMap::new();
        let mut out = Vec::new();
        for (i, p) in prefixes.iter().enumerate() {
            if let Some(&j) = first.get(p) {
                out.push(ExemptWarning::Duplicate(i, j));
            } else {
                first.insert(*p, i);
            }
            if p.is_empty() {
                out.push(ExemptWarning::Everything(i));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(list: &[&str]) -> ExemptSet {
        ExemptSet::new(list.iter().map(|s| s.parse().unwrap()).collect()).unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn agrees_with_a_scan_of_the_prefixes() {
        // Overlapping, nested, adjacent, host routes, both families.
        let list = [
            "198.51.100.0/24",
            "198.51.100.128/25",
            "198.51.101.0/24",
            "10.0.0.0/8",
            "10.1.2.3",
            "203.0.113.7/32",
            "255.255.255.255/32",
            "2001:db8:7::/48",
            "2001:db8:7:1::/64",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128",
            "2001:db8::1",
        ];
        let s = set(&list);
        let prefixes: Vec<Prefix> = list.iter().map(|p| p.parse().unwrap()).collect();
        // 198.51.100.0/24 and .101.0/24 touch: one range; the /25 is inside it.
        assert_eq!(s.ranges(), (4, 3));
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut probes: Vec<IpAddr> = [
            "198.51.99.255",
            "198.51.100.0",
            "198.51.101.255",
            "198.51.102.0",
            "9.255.255.255",
            "10.0.0.0",
            "10.255.255.255",
            "11.0.0.0",
            "203.0.113.6",
            "203.0.113.7",
            "203.0.113.8",
            "255.255.255.255",
            "0.0.0.0",
            "2001:db8:6:ffff:ffff:ffff:ffff:ffff",
            "2001:db8:7::",
            "2001:db8:7:ffff:ffff:ffff:ffff:ffff",
            "2001:db8:8::",
            "2001:db8::1",
            "2001:db8::2",
            "::",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        ]
        .iter()
        .map(|a| ip(a))
        .collect();
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Random addresses near the listed ones, so both answers occur.
            let base = prefixes[(x % prefixes.len() as u64) as usize].addr();
            probes.push(match base {
                IpAddr::V4(a) => IpAddr::V4((u32::from(a) ^ ((x >> 32) as u32 & 0x1ff)).into()),
                IpAddr::V6(a) => IpAddr::V6((u128::from(a) ^ ((x as u128) << 60 >> (x % 64))).into()),
            });
        }
        for a in probes {
            let scan = prefixes.iter().any(|p| p.contains(a));
            assert_eq!(s.contains(&a), scan, "{a}");
        }
    }

    #[test]
    fn empty_and_whole_family() {
        let e = ExemptSet::new(Vec::new()).unwrap();
        assert!(e.is_empty());
        assert!(!e.contains(&ip("198.51.100.1")));
        let all4 = set(&["0.0.0.0/0"]);
        assert!(all4.contains(&ip("0.0.0.0")) && all4.contains(&ip("255.255.255.255")));
        assert!(!all4.contains(&ip("::1")));
        let all6 = set(&["::/0"]);
        assert!(all6.contains(&ip("ffff::1")) && !all6.contains(&ip("1.2.3.4")));
    }

    #[test]
    fn the_list_is_capped_and_equality_is_by_listed_prefixes() {
        let many: Vec<Prefix> = (0..=MAX_EXEMPT as u32)
            .map(|i| Prefix::new(IpAddr::V4((i << 8).into()), 24).unwrap())
            .collect();
        assert_eq!(ExemptSet::new(many.clone()).unwrap_err(), TooManyExempt(MAX_EXEMPT + 1));
        let at_cap = ExemptSet::new(many[..MAX_EXEMPT].to_vec()).unwrap();
        // Adjacent /24s merge into one range.
        assert_eq!(at_cap.ranges(), (1, 0));
        assert!(at_cap.contains(&ip("0.255.255.255")) && !at_cap.contains(&ip("1.0.0.0")));
        assert_eq!(set(&["10.0.0.0/8"]), set(&["10.0.0.0/8"]));
        assert_ne!(set(&["10.0.0.0/8"]), set(&["10.0.0.0/8", "10.0.0.0/8"]));
        assert_eq!(at_cap.prefixes().len(), MAX_EXEMPT);
    }

    #[test]
    fn duplicates_and_default_routes_are_warned() {
        let list: Vec<Prefix> = ["10.0.0.0/8", "::/0", "10.0.0.0/8", "0.0.0.0/0", "10.0.0.0/9"]
            .iter()
            .map(|p| p.parse().unwrap())
            .collect();
        assert_eq!(
            ExemptSet::warnings(&list),
            vec![
                ExemptWarning::Everything(1),
                ExemptWarning::Duplicate(2, 0),
                ExemptWarning::Everything(3)
            ]
        );
    }
}
