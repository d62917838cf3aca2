//! The per-packet pipeline.
//!
//! It knows nothing of DPDK: it runs over any [`PacketBuf`] and is handed `now`, so every stage is
//! tested over heap buffers with simulated time. Each stage returns what happened to the packet as
//! a [`Verdict`] carrying exactly one [`Outcome`].

mod arp;

use crate::buf::PacketBuf;
use crate::outcome::Outcome;
use crate::wire::{self, EtherType, EthernetAddress, EthernetFrame};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// Monotonic time in nanoseconds, supplied by the caller (the lcore loop reads the TSC once per
/// burst). Stages never read a clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Instant(pub u64);

/// What the pipeline decided for a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Verdict {
    /// Free the packet; count the outcome.
    Drop(Outcome),
    /// The packet was rewritten in place into an answer: send it out of the port it came in
    /// on, then count the outcome (or [`Outcome::TxFull`] if the queue refuses it).
    Transmit(Outcome),
}

impl Verdict {
    /// The outcome the verdict carries.
    pub fn outcome(self) -> Outcome {
        match self {
            Verdict::Drop(o) | Verdict::Transmit(o) => o,
        }
    }
}

/// The addresses a port answers for.
#[derive(Clone, Debug, Default)]
pub struct PortAddrs {
    /// The port's MAC address.
    pub mac: EthernetAddress,
    /// Local IPv4 addresses.
    pub ipv4: Vec<Ipv4Addr>,
    /// Local IPv6 addresses.
    pub ipv6: Vec<Ipv6Addr>,
}

impl PortAddrs {
    /// Whether `ip` is one of the port's IPv4 addresses.
    #[inline]
    pub fn has_ipv4(&self, ip: Ipv4Addr) -> bool {
        self.ipv4.contains(&ip)
    }
}

/// The read-only tables of one config generation, shared by every lcore.
///
/// A reload builds a whole new `Tables` off the data path and publishes it; each lcore adopts it
/// between bursts with [`Pipeline::apply`]. Nothing in here changes once published.
#[derive(Clone, Debug, Default)]
pub struct Tables {
    /// The config generation these tables belong to (1 for the config loaded at start).
    pub generation: u64,
    /// Indexed by DPDK port id.
    pub ports: Vec<PortAddrs>,
}

/// One lcore's pipeline: the current generation's shared tables plus the lcore's own mutable
/// state, so nothing is shared for writing on the per-packet path.
#[derive(Clone, Debug)]
pub struct Pipeline {
    tables: Arc<Tables>,
}

impl Pipeline {
    /// A pipeline over `tables`.
    pub fn new(tables: Arc<Tables>) -> Self {
        Pipeline { tables }
    }

    /// Adopts a new generation. Called by the owning lcore at a quiescent point (between
    /// bursts), so no packet ever sees a mix of two generations. Per-lcore state that depends on
    /// the tables is carried over or rebuilt here.
    pub fn apply(&mut self, tables: Arc<Tables>) {
        self.tables = tables;
    }

    /// The generation in use.
    pub fn generation(&self) -> u64 {
        self.tables.generation
    }

    /// Runs every stage on one packet received on `port`.
    pub fn process<B: PacketBuf>(&mut self, port: u16, pkt: &mut B, _now: Instant) -> Verdict {
        let Some(local) = self.tables.ports.get(port as usize) else {
            return Verdict::Drop(Outcome::Unhandled);
        };
        let frame = match EthernetFrame::new_checked(pkt.data()) {
            Ok(f) => f,
            Err(wire::Error::Unsupported) => return Verdict::Drop(Outcome::Unhandled),
            Err(_) => return Verdict::Drop(Outcome::Malformed),
        };
        let dst = frame.dst_addr();
        if !dst.is_multicast() && dst != local.mac {
            return Verdict::Drop(Outcome::NotForUs);
        }
        if !frame.src_addr().is_unicast() {
            // RFC 1122 §3.3.6 / IEEE 802: a group address is never a valid source.
            return Verdict::Drop(Outcome::Malformed);
        }
        let l3 = frame.header_len();
        match frame.ethertype() {
            EtherType::Arp => arp::answer(local, pkt.data_mut(), l3),
            _ => Verdict::Drop(Outcome::Unhandled),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::buf::HeapBuf;

    pub(crate) const MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
    pub(crate) const PEER: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);

    pub(crate) fn pipeline() -> Pipeline {
        Pipeline::new(Arc::new(Tables {
            generation: 1,
            ports: vec![PortAddrs {
                mac: MAC,
                ipv4: vec![Ipv4Addr::new(192, 0, 2, 1)],
                ipv6: vec!["2001:db8::1".parse().unwrap()],
            }],
        }))
    }

    fn frame(dst: EthernetAddress, src: EthernetAddress, ty: u16, payload: &[u8]) -> HeapBuf {
        let mut v = vec![0u8; 14];
        wire::ethernet::emit_header(&mut v, dst, src, ty.into());
        v.extend_from_slice(payload);
        HeapBuf::new(&v)
    }

    #[test]
    fn l2_filter() {
        let mut p = pipeline();
        let mut other = frame(EthernetAddress([2, 9, 9, 9, 9, 9]), PEER, 0x0800, &[0; 20]);
        assert_eq!(p.process(0, &mut other, Instant(0)), Verdict::Drop(Outcome::NotForUs));
        let mut bad_src = frame(MAC, EthernetAddress::BROADCAST, 0x0800, &[0; 20]);
        assert_eq!(
            p.process(0, &mut bad_src, Instant(0)),
            Verdict::Drop(Outcome::Malformed)
        );
        let mut ip = frame(MAC, PEER, 0x0800, &[0; 20]);
        assert_eq!(p.process(0, &mut ip, Instant(0)), Verdict::Drop(Outcome::Unhandled));
        let mut unknown_port = frame(MAC, PEER, 0x0800, &[0; 20]);
        assert_eq!(
            p.process(7, &mut unknown_port, Instant(0)),
            Verdict::Drop(Outcome::Unhandled)
        );
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut p = pipeline();
        let mut seed = 0x1234_5678_9abc_def0u64;
        for len in 0..200usize {
            for _ in 0..50 {
                let mut v = vec![0u8; len];
                for b in v.iter_mut() {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    *b = seed as u8;
                }
                // Bias towards frames that reach the ARP stage.
                if len >= 14 && seed.is_multiple_of(2) {
                    v[..6].copy_from_slice(&MAC.0);
                    v[6..12].copy_from_slice(&PEER.0);
                    v[12..14].copy_from_slice(&[0x08, 0x06]);
                    if len >= 22 && seed.is_multiple_of(4) {
                        v[14..20].copy_from_slice(&[0, 1, 8, 0, 6, 4]);
                    }
                }
                let mut b = HeapBuf::new(&v);
                let _ = p.process(0, &mut b, Instant(0));
            }
        }
    }
}
