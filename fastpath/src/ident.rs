//! The identification of every IP packet an lcore originates, chosen so that no host can learn
//! from it what was sent to another (RFC 6864, RFC 7739; the idle-scan channel of nmap's `-sI`).
//!
//! One [`Idents`] per lcore, made once from the OS's randomness and kept for the lcore's life
//! (`Pipeline::apply` and `WorkerEngine::adopt` carry it across reloads, each tested), owns all
//! of it:
//! - **Atomic datagrams** (DF set, not a fragment: our TCP resets and ICMP errors): a random
//!   identification per message, from a keyed PRF over a counter (RFC 6864 §4.1: any value; a
//!   counter shared by all destinations told an attacker how many messages went to others).
//! - **Datagrams that may be fragmented, and IPv6 Fragment headers** (GRE outer headers, the
//!   fragments we cut): a counter per destination bucket, buckets chosen by a keyed hash of
//!   (source, destination, protocol), each started at a random value and advanced by a random
//!   amount up to the milliseconds it stood idle: Linux's `ip_idents_reserve` (with the random
//!   increments of its 2019 fix), RFC 7739 §5.3. The IDs stay unique per destination within
//!   the reassembly lifetime as RFC 6864 §4.2 requires; an attacker sees only its own bucket.
//! - **Echo replies** keep the request's identification: a function of what the asker sent,
//!   which tells it nothing new.

use crate::pipeline::Instant;
use crate::wire::{EtherType, EthernetFrame, Ipv4Packet, Ipv6Packet};
use siphasher::sip::SipHasher13;
use std::hash::Hasher;
use std::net::IpAddr;

/// Destination buckets per lcore (Linux has 2048 at least; 32 KiB here).
pub const BUCKETS: usize = 4096;

/// One destination bucket: the next identification and when it was last used (in
/// [`Idents::now`]'s units, about a millisecond; 0: never).
#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    next: u32,
    stamp: u32,
}

/// An lcore's identification state (module doc). Not `Default`: every instance is keyed.
#[derive(Clone)]
pub struct Idents {
    /// Keys the PRF that draws random values.
    prf: SipHasher13,
    /// Keys the destination hash.
    dest: SipHasher13,
    /// PRF input: how many 64-bit values were drawn.
    drawn: u64,
    /// Random bits not yet handed out, and how many 16-bit pieces are left in them.
    pool: u64,
    left: u32,
    /// The owner's clock in units of 2^20 ns (about a millisecond), set each poll.
    now: u32,
    buckets: Box<[Bucket]>,
    /// The bucket last found for the key of each of a few slots the callers name (a tunnel's
    /// index): a GRE outer header's bucket without the keyed hash on every packet.
    recent: [Option<(IpAddr, IpAddr, u8, u32)>; RECENT],
}

/// Slots of [`Idents::reserve_in_slot`]'s memory.
const RECENT: usize = 16;

impl std::fmt::Debug for Idents {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        // The keys are secrets: never printed.
        write!(f, "Idents({} drawn)", self.drawn)
    }
}

impl Idents {
    /// Keyed from the OS's randomness.
    pub fn from_os() -> Self {
        Self::with_keys(std::array::from_fn(|_| crate::seed::os_u64()))
    }

    /// Keyed with `keys` (tests that need a repeatable sequence).
    pub fn with_keys(keys: [u64; 4]) -> Self {
        Idents {
            prf: SipHasher13::new_with_keys(keys[0], keys[1]),
            dest: SipHasher13::new_with_keys(keys[2], keys[3]),
            drawn: 0,
            pool: 0,
            left: 0,
            now: 0,
            // Zeroed (stamp 0: never used); a bucket draws its random start at first use.
            buckets: vec![Bucket::default(); BUCKETS].into_boxed_slice(),
            recent: [None; RECENT],
        }
    }

    /// Sets the clock the destination counters' random increments follow (once a poll).
    #[inline]
    pub fn set_now(&mut self, now: Instant) {
        // Never 0, which marks a bucket never used.
        self.now = ((now.0 >> 20) as u32).max(1);
    }

    /// 64 random bits: the PRF of the next counter value.
    #[inline]
    fn random64(&mut self) -> u64 {
        self.drawn = self.drawn.wrapping_add(1);
        let mut h = self.prf;
        h.write_u64(self.drawn);
        h.finish()
    }

    /// A random identification for an atomic IPv4 datagram (RFC 6864 §4.1).
    #[inline]
    pub fn atomic(&mut self) -> u16 {
        if self.left == 0 {
            self.pool = self.random64();
            self.left = 4;
        }
        self.left -= 1;
        let id = self.pool as u16;
        self.pool >>= 16;
        id
    }

    /// A random value in `0..n` (0 when `n` is 0).
    #[inline]
    fn below(&mut self, n: u32) -> u32 {
        (((self.random64() >> 32) * n as u64) >> 32) as u32
    }

    /// The bucket of datagrams from `src` to `dst` of `protocol`.
    fn bucket(&self, src: IpAddr, dst: IpAddr, protocol: u8) -> usize {
        let mut h = self.dest;
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                h.write_u64((u32::from(s) as u64) << 32 | u32::from(d) as u64);
            }
            (s, d) => {
                let (s, d) = (to_v6_bits(s), to_v6_bits(d));
                h.write_u128(s);
                h.write_u128(d);
            }
        }
        h.write_u8(protocol);
        h.finish() as usize % BUCKETS
    }

    /// Reserves `n` consecutive identifications for datagrams from `src` to `dst` of
    /// `protocol` and returns the first (IPv4 uses its low 16 bits). The bucket moves on by a
    /// random amount below the time it stood idle, then by `n`.
    pub fn reserve(&mut self, src: IpAddr, dst: IpAddr, protocol: u8, n: u32) -> u32 {
        let i = self.bucket(src, dst, protocol);
        self.reserve_bucket(i, n)
    }

    /// [`Idents::reserve`] for a key that comes back often under the same `slot` (a tunnel's
    /// index): its bucket is remembered, so the keyed hash runs when the slot's key changes only.
    #[inline]
    pub fn reserve_in_slot(&mut self, slot: usize, src: IpAddr, dst: IpAddr, protocol: u8) -> u32 {
        let r = slot % RECENT;
        let i = match self.recent[r] {
            Some((s, d, p, i)) if (s, d, p) == (src, dst, protocol) => i as usize,
            _ => {
                let i = self.bucket(src, dst, protocol);
                self.recent[r] = Some((src, dst, protocol, i as u32));
                i
            }
        };
        self.reserve_bucket(i, 1)
    }

    fn reserve_bucket(&mut self, i: usize, n: u32) -> u32 {
        let now = self.now.max(1);
        let Bucket { next, stamp } = self.buckets[i];
        let start = if stamp == 0 {
            self.random64() as u32
        } else if stamp != now {
            next.wrapping_add(self.below(now.wrapping_sub(stamp)))
        } else {
            next
        };
        self.buckets[i] = Bucket {
            next: start.wrapping_add(n),
            stamp: now,
        };
        start
    }

    /// [`Idents::reserve`] of one for the IP datagram in Ethernet `frame` (VLAN tags allowed),
    /// by its addresses and protocol; a random value if it is not IP.
    pub fn for_frame(&mut self, frame: &[u8]) -> u32 {
        match ip_endpoints(frame) {
            Some((src, dst, protocol)) => self.reserve(src, dst, protocol, 1),
            None => self.random64() as u32,
        }
    }
}

/// The source, destination and protocol (IPv6: the first next header) of the IP datagram in
/// Ethernet `frame`.
fn ip_endpoints(frame: &[u8]) -> Option<(IpAddr, IpAddr, u8)> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    let l3 = frame.get(eth.header_len()..)?;
    match eth.ethertype() {
        EtherType::IPV4 => {
            let ip = Ipv4Packet::new_checked(l3).ok()?;
            Some((IpAddr::V4(ip.src_addr()), IpAddr::V4(ip.dst_addr()), ip.protocol().0))
        }
        EtherType::IPV6 => {
            let ip = Ipv6Packet::new_checked(l3).ok()?;
            Some((IpAddr::V6(ip.src_addr()), IpAddr::V6(ip.dst_addr()), ip.next_header().0))
        }
        _ => None,
    }
}

fn to_v6_bits(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(a) => u128::from(a.to_ipv6_mapped()),
        IpAddr::V6(a) => u128::from(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::net::Ipv4Addr;

    fn v4(a: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(a))
    }

    #[test]
    fn atomic_ids_are_not_a_sequence_and_differ_per_instance() {
        let (mut a, mut b) = (Idents::from_os(), Idents::from_os());
        let xs: Vec<u16> = (0..64).map(|_| a.atomic()).collect();
        let ys: Vec<u16> = (0..64).map(|_| b.atomic()).collect();
        assert_ne!(xs, ys, "two lcores draw the same identifications");
        // Consecutive differences of a counter are constant; of 63 random ones, at most a few
        // repeat (each pair equal with probability 2^-16).
        let diffs: HashSet<u16> = xs.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
        assert!(diffs.len() > 55, "{} distinct steps of 63", diffs.len());
    }

    #[test]
    fn one_destinations_counter_moves_by_what_it_was_given_when_busy() {
        let mut i = Idents::with_keys([1, 2, 3, 4]);
        i.set_now(Instant(5 << 20));
        let first = i.reserve(v4(1), v4(2), 17, 1);
        // Within one tick: consecutive, so a burst of fragmented datagrams never repeats one.
        assert_eq!(i.reserve(v4(1), v4(2), 17, 3), first.wrapping_add(1));
        assert_eq!(i.reserve(v4(1), v4(2), 17, 1), first.wrapping_add(4));
    }

    #[test]
    fn an_idle_destinations_counter_jumps_at_random() {
        let mut i = Idents::from_os();
        let mut steps = HashSet::new();
        let mut last = None;
        for t in 1..200u64 {
            // 1000 ticks apart: a jump below 1000 each time.
            i.set_now(Instant((t * 1000) << 20));
            let id = i.reserve(v4(1), v4(2), 17, 1);
            if let Some(l) = last {
                let step = id.wrapping_sub(l);
                assert!((1..=1000).contains(&step), "step {step}");
                steps.insert(step);
            }
            last = Some(id);
        }
        assert!(steps.len() > 150, "{} distinct steps of 198", steps.len());
    }

    #[test]
    fn a_slot_remembers_its_bucket_and_follows_a_new_key() {
        let mut i = Idents::with_keys([5, 6, 7, 8]);
        i.set_now(Instant(3 << 20));
        let a = i.reserve_in_slot(2, v4(1), v4(2), 47);
        // The same counter as `reserve` for that key: the slot only remembers where it is.
        assert_eq!(i.reserve(v4(1), v4(2), 47, 1), a.wrapping_add(1));
        assert_eq!(i.reserve_in_slot(2, v4(1), v4(2), 47), a.wrapping_add(2));
        // Another key under the slot: its own bucket, found anew.
        let b = i.reserve_in_slot(2, v4(1), v4(3), 47);
        assert_eq!(i.reserve(v4(1), v4(3), 47, 1), b.wrapping_add(1));
        assert_eq!(i.reserve_in_slot(2, v4(1), v4(2), 47), a.wrapping_add(3));
    }

    #[test]
    fn other_destinations_do_not_move_yours() {
        // Within one tick, what goes to 10,000 other hosts moves a host's counter only where
        // they share its bucket: the idle scan through the identification sees nothing.
        let mut i = Idents::from_os();
        i.set_now(Instant(1 << 20));
        let me = v4(0x0a00_0001);
        let before = i.reserve(v4(1), me, 1, 1);
        let own = i.bucket(v4(1), me, 1);
        let mut sharing = 0;
        for k in 0..10_000u32 {
            let other = v4(0xc000_0000 + k);
            sharing += (i.bucket(v4(1), other, 1) == own) as u32;
            i.reserve(v4(1), other, 1, 1);
        }
        let after = i.reserve(v4(1), me, 1, 1);
        assert_eq!(after.wrapping_sub(before), 1 + sharing);
        assert!(sharing < 20, "{sharing} of 10,000 share one of {BUCKETS} buckets");
    }
}
