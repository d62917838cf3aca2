//! The one source-validation rule: whom the box may answer or deliver for.
//!
//! Every packet for a local address (or a group the port listens to) passes [`valid_v4`] or
//! [`valid_v6`] before any stage acts on it — reassembly, GRE (outer and inner packets), ICMP and
//! ICMPv6 echo, NDP, the services (whose workers answer UDP echo) and the ICMP errors — and ARP
//! asks [`valid_v4_sender`] of a request's sender. A packet that fails is `martian`: nothing is
//! sent about it, nothing is delivered.
//!
//! The rule:
//! - IPv4 source (RFC 1122 §3.2.1.3: a source that is not one host is discarded; RFC 1812
//!   §5.3.7): not 0/8, 127/8, 224/4 or 240/4 (the limited broadcast included).
//! - IPv6 source (RFC 4291 §2.5.2, §2.5.3, §2.7; RFC 4443 §2.4(e.6)): not `::`, `::1` or
//!   ff00::/8. `::` is allowed only for what RFC 4861 §7.2.4 answers to all-nodes, a Duplicate
//!   Address Detection solicitation (the NDP stage checks the rest of §7.1.1).
//! - Not one of the port's own addresses: a packet from "us" on the wire is a loop or a spoof,
//!   and answering it sends to ourselves (Linux's `fib_validate_source` drops it too).
//! - A datagram to a unicast address that arrived in a link-layer broadcast or multicast frame
//!   is discarded (RFC 1122 §3.3.6): answering it answers a frame meant for many.

use super::tables::{PortAddrs, PortView};
use std::net::{Ipv4Addr, Ipv6Addr};

/// Whether an IPv4 source is one host (see the module rule): the first octet alone decides.
#[inline(always)]
pub fn v4_is_one_host(src: Ipv4Addr) -> bool {
    // One load from a 256-byte table: the two compares LLVM made branch-free took more
    // instructions a packet (benches/NOTES.md, "The IPv4 source rule by a first-octet table");
    // the table is 4 lines, kept in L1 by the flood that asks.
    ONE_HOST_FIRST_OCTET[src.octets()[0] as usize]
}

/// By first octet, whether an IPv4 address with it is one host: not 0/8 (this network, the
/// unspecified address included), 127/8 (loopback), 224/4 (multicast), 240/4 (Class E, the
/// limited broadcast included).
static ONE_HOST_FIRST_OCTET: [bool; 256] = {
    let mut t = [false; 256];
    let mut o = 1;
    while o < 224 {
        t[o] = o != 127;
        o += 1;
    }
    t
};

/// The rule for an IPv4 datagram from `src` to a local unicast address, `group_frame` if its
/// Ethernet destination had the group bit.
#[inline(always)]
pub fn valid_v4(local: &PortAddrs, group_frame: bool, src: Ipv4Addr) -> bool {
    !group_frame && v4_is_one_host(src) && !local.has_ipv4(src)
}

/// For an IPv4 datagram to `dst` from `src` (the fast paths): `NotLocal` unless `dst` is one of
/// the port's addresses, then `Martian` unless [`valid_v4`] holds, `None` if both do. With one
/// address the port's list is looked at once for both (asked one after the other, LLVM checked
/// its length twice); `group_frame` is asked last, the three martian tests being one outcome.
#[inline(always)]
pub fn v4_to_local(
    local: &PortAddrs,
    dst: Ipv4Addr,
    src: Ipv4Addr,
    group_frame: impl FnOnce() -> bool,
) -> Option<crate::outcome::Outcome> {
    use crate::outcome::Outcome::{Martian, NotLocal};
    match local.ipv4.as_slice() {
        [only] if *only != dst => Some(NotLocal),
        [only] => (!v4_is_one_host(src) || src == *only || group_frame()).then_some(Martian),
        all if !all.contains(&dst) => Some(NotLocal),
        _ => (!valid_v4(local, group_frame(), src)).then_some(Martian),
    }
}

/// [`v4_to_local`] from a port's [`PortView`] (the fast paths): with one address, that compare
/// and the rule; with none or several, `listed` (the port's list, through [`v4_to_local`]).
#[inline(always)]
pub fn v4_to_local_view(
    view: &PortView,
    dst: Ipv4Addr,
    src: Ipv4Addr,
    listed: impl FnOnce() -> Option<crate::outcome::Outcome>,
) -> Option<crate::outcome::Outcome> {
    use crate::outcome::Outcome::{Martian, NotLocal};
    if u32::from_ne_bytes(dst.octets()) as u64 == view.v4 {
        return (!v4_is_one_host(src) || src == dst).then_some(Martian);
    }
    if view.v4 != PortView::LISTED {
        return Some(NotLocal);
    }
    std::hint::cold_path();
    listed()
}

/// [`v6_to_local`] from a port's [`PortView`], as [`v4_to_local_view`].
#[inline(always)]
pub fn v6_to_local_view(
    view: &PortView,
    dst: &Ipv6Addr,
    src: &Ipv6Addr,
    listed: impl FnOnce() -> Option<crate::outcome::Outcome>,
) -> Option<crate::outcome::Outcome> {
    use crate::outcome::Outcome::{Martian, NotLocal};
    let Some(only) = view.v6 else {
        std::hint::cold_path();
        return listed();
    };
    if only != *dst {
        return Some(NotLocal);
    }
    // `v6_to_local`'s classes, as there.
    let s = src.to_bits();
    if s <= 1 || s >> 120 == 0xff || src == dst {
        // Off the common path: the outcome is then set where it is taken, not before the test
        // on every packet (benches/NOTES.md, "Per-burst reads and the closed port's decision";
        // the same hint in the IPv4 rule cost instructions there).
        std::hint::cold_path();
        return Some(Martian);
    }
    None
}

/// [`v4_to_local`] for an IPv6 packet to a unicast `dst` that is not a Neighbor Solicitation
/// (the rule of [`valid_v6_to_unicast`]).
#[inline(always)]
pub fn v6_to_local(
    local: &PortAddrs,
    dst: &Ipv6Addr,
    src: &Ipv6Addr,
    group_frame: impl FnOnce() -> bool,
) -> Option<crate::outcome::Outcome> {
    use crate::outcome::Outcome::{Martian, NotLocal};
    match local.ipv6.as_slice() {
        [only] if only != dst => Some(NotLocal),
        [only] => {
            // `valid_v6_to_unicast`'s address classes, written out: through one helper shared
            // with it LLVM laid the IPv6 paths out longer (benches/NOTES.md, "Ours-then-martian
            // in one look"). The test `v6_to_local_is_ours_then_the_rule_...` holds the two equal.
            let s = src.to_bits();
            (s <= 1 || s >> 120 == 0xff || src == only || group_frame()).then_some(Martian)
        }
        all if !all.contains(dst) => Some(NotLocal),
        _ => (!valid_v6_to_unicast(local, group_frame(), src)).then_some(Martian),
    }
}

/// The rule for an ARP request's sender protocol address: [`valid_v4`]'s address part, except
/// that 0.0.0.0 is an RFC 5227 §2.1.1 probe (answered, so the prober learns the address is in
/// use). A request is broadcast by design, so the frame is not looked at.
#[inline]
pub fn valid_v4_sender(local: &PortAddrs, spa: Ipv4Addr) -> bool {
    spa.is_unspecified() || (v4_is_one_host(spa) && !local.has_ipv4(spa))
}

/// The rule for an IPv6 packet from `src` to `dst` (a local address or a group the port listens
/// to), `group_frame` as for [`valid_v4`]; `dad` if it is a Neighbor Solicitation, the one
/// message `::` may send us.
#[inline]
pub fn valid_v6(local: &PortAddrs, group_frame: bool, src: &Ipv6Addr, dst: &Ipv6Addr, dad: bool) -> bool {
    if group_frame && !dst.is_multicast() {
        return false;
    }
    if src.is_unspecified() {
        return dad;
    }
    !(src.is_loopback() || src.is_multicast() || local.has_ipv6(src))
}

/// [`valid_v6`] for a packet to a unicast address that is not a Neighbor Solicitation (the
/// IPv6 fast paths' UDP and TCP): not in a group frame, from neither `::`, `::1`, ff00::/8 nor
/// one of the port's addresses, the address read as one number.
#[inline(always)]
pub fn valid_v6_to_unicast(local: &PortAddrs, group_frame: bool, src: &Ipv6Addr) -> bool {
    let s = src.to_bits();
    // 0 is `::`, 1 is `::1`; the top byte 0xff is multicast.
    !group_frame && s > 1 && s >> 120 != 0xff && !local.has_ipv6(src)
}

/// IPv4 option types that source route (RFC 791 §3.1): Loose and Strict Source and Record Route.
const LSRR: u8 = 0x83;
const SSRR: u8 = 0x89;

/// What an IPv4 header's options say for local delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum V4Options {
    /// Nothing that stops delivery.
    Plain,
    /// An LSRR or SSRR option.
    SourceRouted,
    /// They do not parse: a length below 2 or past the header (RFC 791 §3.1; Linux's
    /// `ip_options_compile` drops them).
    Malformed,
}

/// Reads an IPv4 header's options ([`V4Options`]). Source-routed datagrams are dropped, not answered along
/// the reversed route (RFC 7126 §4.3.4, §4.4.4 recommend dropping them by default, as Linux's
/// `accept_source_route = 0` does; RFC 1122 §3.2.1.8's reversal is what let a spoofed route aim
/// the answer at a third party). Other options are never copied into an answer: echo answers
/// are built with a 20-byte header.
pub fn v4_options(opts: &[u8]) -> V4Options {
    let mut at = 0;
    while at < opts.len() {
        match opts[at] {
            0 => return V4Options::Plain,
            1 => at += 1,
            ty => {
                let Some(&len) = opts.get(at + 1) else {
                    return V4Options::Malformed;
                };
                let len = len as usize;
                if len < 2 || at + len > opts.len() {
                    return V4Options::Malformed;
                }
                if ty == LSRR || ty == SSRR {
                    return V4Options::SourceRouted;
                }
                at += len;
            }
        }
    }
    V4Options::Plain
}

/// What an IPv6 extension header chain (the frame's bytes from the fixed header at `l3` to the
/// upper-layer header at `l4`, already walked by the parser) holds that matters here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct V6Chain {
    /// A Routing header with Segments Left above zero: RFC 8200 §4.4 says to discard it unless
    /// its type is one we process, and we process none (RFC 5095 §3 deprecates type 0; RFC
    /// 8754 §4.3.3: a node that is not an SR endpoint treats type 4 as unrecognised).
    pub routed: bool,
    /// A Fragment header, atomic or not (RFC 6980 §5: NDP messages carrying one are ignored).
    pub fragment_header: bool,
}

/// Walks the extension headers between `l3 + 40` and `l4` (the parser validated their lengths).
pub fn v6_chain(frame: &[u8], l3: usize, l4: usize) -> V6Chain {
    let mut c = V6Chain::default();
    let (Some(&first), mut at) = (frame.get(l3 + 6), l3 + 40) else {
        return c;
    };
    let mut next = first;
    while at < l4 {
        let Some(h) = frame.get(at..at + 8) else {
            break;
        };
        match next {
            // Hop-by-Hop, Destination Options
            0 | 60 => at += (h[1] as usize + 1) * 8,
            43 => {
                c.routed |= h[3] != 0;
                at += (h[1] as usize + 1) * 8;
            }
            44 => {
                c.fragment_header = true;
                at += 8;
            }
            _ => break,
        }
        next = h[0];
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::tests::port;

    /// The fast paths' form decides as the rule for a unicast destination, over the addresses
    /// it singles out and their neighbours, with one and with two local addresses.
    #[test]
    fn v6_to_unicast_is_the_rule_for_a_unicast_destination() {
        let mut local = port();
        let dst = local.ipv6[0];
        let mut srcs: Vec<Ipv6Addr> = [
            "::",
            "::1",
            "::2",
            "ff02::1",
            "ff00::",
            "feff::1",
            "fe80::1",
            "2001:db8::7",
        ]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
        srcs.push(dst);
        srcs.push("2001:db8::3".parse().unwrap());
        for two in [false, true] {
            if two {
                local.ipv6.push("2001:db8::3".parse().unwrap());
            }
            for src in &srcs {
                for group_frame in [false, true] {
                    assert_eq!(
                        valid_v6_to_unicast(&local, group_frame, src),
                        valid_v6(&local, group_frame, src, &dst, false),
                        "{src} group frame {group_frame}, two addresses {two}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_first_octet_table_is_the_rule_for_every_octet() {
        for o in 0..=255u8 {
            let a = Ipv4Addr::new(o, 1, 2, 3);
            let written = !(a.octets()[0] == 0 || a.is_loopback() || a.is_multicast() || o >= 240);
            assert_eq!(v4_is_one_host(a), written, "{a}");
        }
        assert!(!v4_is_one_host(Ipv4Addr::BROADCAST) && !v4_is_one_host(Ipv4Addr::UNSPECIFIED));
    }

    #[test]
    fn to_local_is_ours_then_the_rule_with_any_number_of_addresses() {
        use crate::outcome::Outcome::{Martian, NotLocal};
        let (a, b, c) = (
            Ipv4Addr::new(192, 0, 2, 1),
            Ipv4Addr::new(10, 9, 0, 1),
            Ipv4Addr::new(198, 51, 100, 7),
        );
        let others = [
            c,
            Ipv4Addr::new(127, 0, 0, 1),
            Ipv4Addr::new(224, 0, 0, 1),
            Ipv4Addr::UNSPECIFIED,
        ];
        let mut local = port();
        for addrs in [vec![], vec![a], vec![a, b], vec![b, c, a]] {
            local.ipv4 = addrs;
            for dst in [a, b, c, Ipv4Addr::BROADCAST] {
                for src in [a, b].into_iter().chain(others) {
                    for group in [false, true] {
                        let want = if !local.has_ipv4(dst) {
                            Some(NotLocal)
                        } else if !valid_v4(&local, group, src) {
                            Some(Martian)
                        } else {
                            None
                        };
                        let got = v4_to_local(&local, dst, src, || group);
                        assert_eq!(got, want, "{:?} {dst} from {src}, group {group}", local.ipv4);
                        // The fast paths' form (a group frame never reaches it), deciding
                        // itself for one address and through the list otherwise.
                        if !group {
                            let listed = || v4_to_local(&local, dst, src, || false);
                            let view = v4_to_local_view(&local.view(), dst, src, listed);
                            assert_eq!(view, want, "view: {:?} {dst} from {src}", local.ipv4);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn v6_to_local_is_ours_then_the_rule_with_any_number_of_addresses() {
        use crate::outcome::Outcome::{Martian, NotLocal};
        let a: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let b: Ipv6Addr = "fe80::1".parse().unwrap();
        let c: Ipv6Addr = "2001:db8::99".parse().unwrap();
        let others = [
            c,
            Ipv6Addr::LOCALHOST,
            Ipv6Addr::UNSPECIFIED,
            "ff02::1".parse().unwrap(),
        ];
        let mut local = port();
        for addrs in [vec![], vec![a], vec![a, b], vec![b, c, a]] {
            local.ipv6 = addrs;
            for dst in [a, b, c] {
                for src in [a, b].into_iter().chain(others) {
                    for group in [false, true] {
                        let want = if !local.has_ipv6(&dst) {
                            Some(NotLocal)
                        } else if !valid_v6_to_unicast(&local, group, &src) {
                            Some(Martian)
                        } else {
                            None
                        };
                        let got = v6_to_local(&local, &dst, &src, || group);
                        assert_eq!(got, want, "{:?} {dst} from {src}, group {group}", local.ipv6);
                        if !group {
                            let listed = || v6_to_local(&local, &dst, &src, || false);
                            let view = v6_to_local_view(&local.view(), &dst, &src, listed);
                            assert_eq!(view, want, "view: {:?} {dst} from {src}", local.ipv6);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn v4_rule() {
        let local = port();
        let me = local.ipv4[0];
        for bad in [
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "224.0.0.1",
            "239.9.9.9",
            "240.0.0.1",
            "255.255.255.255",
        ] {
            let a: Ipv4Addr = bad.parse().unwrap();
            assert!(!valid_v4(&local, false, a), "{a}");
            assert!(!valid_v4_sender(&local, a) || a.is_unspecified(), "{a}");
        }
        assert!(!valid_v4(&local, false, me), "our own address");
        assert!(!valid_v4_sender(&local, me));
        let them = Ipv4Addr::new(198, 51, 100, 7);
        assert!(valid_v4(&local, false, them));
        assert!(
            !valid_v4(&local, true, them),
            "RFC 1122 §3.3.6: a unicast datagram in a group frame"
        );
        assert!(valid_v4_sender(&local, them));
        assert!(valid_v4_sender(&local, Ipv4Addr::UNSPECIFIED), "RFC 5227 probe");
        assert!(valid_v4(&local, false, Ipv4Addr::new(223, 255, 255, 254)));
        assert!(valid_v4(&local, false, Ipv4Addr::new(1, 0, 0, 0)));
    }

    #[test]
    fn v6_rule() {
        let local = port();
        let me = local.ipv6[0];
        let them: Ipv6Addr = "2001:db8::7".parse().unwrap();
        let all: Ipv6Addr = "ff02::1".parse().unwrap();
        for bad in ["::1", "ff02::1", "ff05::2"] {
            let a: Ipv6Addr = bad.parse().unwrap();
            assert!(!valid_v6(&local, false, &a, &me, true), "{a}");
        }
        assert!(!valid_v6(&local, false, &me, &me, false), "our own address");
        assert!(!valid_v6(&local, false, &Ipv6Addr::UNSPECIFIED, &me, false));
        assert!(valid_v6(&local, true, &Ipv6Addr::UNSPECIFIED, &all, true), "DAD");
        assert!(valid_v6(&local, false, &them, &me, false));
        assert!(valid_v6(&local, true, &them, &all, false), "a group frame to a group");
        assert!(
            !valid_v6(&local, true, &them, &me, false),
            "a group frame to a unicast address"
        );
        assert!(valid_v6(&local, false, &"fe80::1".parse().unwrap(), &me, false));
    }

    #[test]
    fn v4_option_walk() {
        assert_eq!(v4_options(&[]), V4Options::Plain);
        assert_eq!(v4_options(&[1, 1, 1, 0]), V4Options::Plain);
        // Record Route, 3 slots, pointer 4
        assert_eq!(
            v4_options(&[7, 15, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            V4Options::Plain
        );
        assert_eq!(v4_options(&[1, 0x83, 7, 4, 10, 0, 0, 1, 0]), V4Options::SourceRouted);
        assert_eq!(v4_options(&[0x89, 7, 4, 10, 0, 0, 1, 0]), V4Options::SourceRouted);
        // What follows End of Options is not looked at.
        assert_eq!(v4_options(&[0, 0x83, 7, 4]), V4Options::Plain);
        assert_eq!(v4_options(&[7, 1, 0, 0]), V4Options::Malformed, "length below 2");
        assert_eq!(v4_options(&[7, 40, 4, 0]), V4Options::Malformed, "past the header");
        assert_eq!(v4_options(&[7]), V4Options::Malformed, "no length");
    }

    #[test]
    fn v6_chains() {
        let mut f = vec![0u8; 14];
        let mut ip = vec![0u8; 40];
        ip[6] = 43;
        f.extend_from_slice(&ip);
        // Routing type 0, segments left 1, then a Fragment header, then UDP.
        f.extend_from_slice(&[44, 2, 0, 1, 0, 0, 0, 0]);
        f.extend_from_slice(&[0; 16]);
        f.extend_from_slice(&[17, 0, 0, 0, 0, 0, 0, 1]);
        let l4 = f.len();
        assert_eq!(
            v6_chain(&f, 14, l4),
            V6Chain {
                routed: true,
                fragment_header: true
            }
        );
        f[14 + 40 + 3] = 0;
        assert_eq!(
            v6_chain(&f, 14, l4),
            V6Chain {
                routed: false,
                fragment_header: true
            }
        );
        assert_eq!(v6_chain(&f, 14, 54), V6Chain::default(), "no extension header");
    }
}
