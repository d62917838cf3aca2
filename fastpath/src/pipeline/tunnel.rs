//! GRE tunnels (RFC 2784, RFC 2890; Linux's "ip_gre: lockless xmit").
//!
//! - Decapsulation runs on RX lcores: GRE to a local address from a configured tunnel's remote
//!   (with the tunnel's key, if it has one) is stripped and the inner packet goes through the
//!   pipeline again; the per-tunnel receive sequence state (RFC 2890 §2.2) is RX-lcore local,
//!   which is exact because a tunnel's packets share one outer address pair and so one RSS hash.
//! - Encapsulation runs on worker lcores, each on its own TX queue with its own counters: no
//!   lock and no shared write per packet (Linux's LLTX). Tunnels with `sequence = true` are
//!   the exception the seed names: an atomic counter would hand out numbers in order but two
//!   lcores would still put them on the wire in another order (each through its own queue, at
//!   its own time), and the receiver drops every packet that arrives after a higher number. So
//!   such a tunnel has one owning worker; the others hand it their packets through a ring, and
//!   the owner numbers and sends them in one order.
//! - Nesting: a tunnel may be carried by another (`via`) to a depth of [`MAX_DEPTH`]; deeper
//!   chains and loops are refused when the config loads, and at run time a packet nested deeper
//!   (GRE in GRE in GRE ... on receive) is dropped and counted.

use crate::buf::PacketBuf;
use crate::ident::Idents;
use crate::stats::Counter;
use crate::wire::{
    ethernet, gre::GreRepr, EtherType, EthernetAddress, EthernetFrame, GrePacket, IpProtocol, Ipv4Packet, Ipv6Packet,
};
use std::net::IpAddr;

/// Most tunnel headers around one packet (the kernel's recursion limit for tunnels).
pub const MAX_DEPTH: usize = 3;

/// How a tunnel's packets leave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TunnelOut {
    /// Out of a port, to a next hop.
    Port {
        /// DPDK port id.
        port: u16,
        /// Our MAC on that port.
        src_mac: EthernetAddress,
        /// The next hop's MAC.
        dst_mac: EthernetAddress,
        /// The port's MTU (IP bytes).
        mtu: u16,
    },
    /// Through another tunnel (index into the tunnel table).
    Via(usize),
}

/// Counters one lcore keeps for one tunnel.
#[derive(Default, Debug)]
#[repr(align(64))]
pub struct TunnelLcoreCounters {
    /// Packets decapsulated.
    pub decap: Counter,
    /// Packets dropped by the sequence receive rule.
    pub seq_dropped: Counter,
    /// Packets encapsulated.
    pub encap: Counter,
    /// Packets too big for the path after encapsulation.
    pub too_big: Counter,
    /// Packets handed to the tunnel's owning worker (sequence tunnels).
    pub handed_off: Counter,
    /// Encapsulated packets the lcore's TX queue refused.
    pub tx_full: Counter,
    /// Encapsulated packets sent in outer fragments (too big for the path, inner DF clear).
    pub fragmented: Counter,
}

/// Counters of one tunnel, one slot per lcore; kept across reloads by name.
#[derive(Debug)]
pub struct TunnelCounters {
    /// By RX lcore slot.
    pub rx: Box<[TunnelLcoreCounters]>,
    /// By worker slot.
    pub workers: Box<[TunnelLcoreCounters]>,
}

impl TunnelCounters {
    /// Zeroed counters.
    pub fn new(rx: usize, workers: usize) -> Self {
        TunnelCounters {
            rx: (0..rx).map(|_| Default::default()).collect(),
            workers: (0..workers).map(|_| Default::default()).collect(),
        }
    }
    /// Sum over every slot.
    pub fn sum(&self, f: impl Fn(&TunnelLcoreCounters) -> &Counter) -> u64 {
        self.rx.iter().chain(self.workers.iter()).map(|c| f(c).get()).sum()
    }
}

/// One configured tunnel.
#[derive(Clone)]
pub struct Tunnel {
    /// Name (the `tunnel` label).
    pub name: String,
    /// Our underlay address.
    pub local: IpAddr,
    /// The far end's underlay address.
    pub remote: IpAddr,
    /// GRE key (RFC 2890 §2.1), if any.
    pub key: Option<u32>,
    /// Sequence numbers on (RFC 2890 §2.2).
    pub sequence: bool,
    /// GRE checksum on (RFC 2784 §2.5).
    pub checksum: bool,
    /// Outer TTL / hop limit.
    pub ttl: u8,
    /// Where encapsulated packets go.
    pub out: TunnelOut,
    /// Tunnel headers this tunnel puts around a packet, itself included (1 = straight to a port).
    pub depth: usize,
    /// The worker slot that owns a sequence tunnel.
    pub owner: usize,
    /// Counters.
    pub counters: std::sync::Arc<TunnelCounters>,
    /// For a sequence tunnel: the ring other lcores hand its packets to, drained by the owner.
    pub handoff: Option<std::sync::Arc<crate::socket::SocketQueue>>,
    /// For a sequence tunnel: the largest step forward a received sequence number may take
    /// from the last one accepted; a larger one is dropped (`gre_seq_dropped`), not adopted.
    pub max_seq_jump: u32,
}

/// The default [`Tunnel::max_seq_jump`]: 2^16. RFC 2890 §2.2 accepts any number "after" the
/// last in serial arithmetic, up to 2^31 ahead, so one spoofed packet numbered 2^31 - 1 ahead
/// would make every later legitimate packet look old; a bound far below that keeps such a
/// packet from moving the window while allowing 65,536 lost packets in a row.
pub const DEFAULT_MAX_SEQ_JUMP: u32 = 1 << 16;

impl std::fmt::Debug for Tunnel {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "Tunnel({} {} -> {}, key {:?}, seq {}, depth {})",
            self.name, self.local, self.remote, self.key, self.sequence, self.depth
        )
    }
}

impl Tunnel {
    /// Bytes this tunnel alone adds (outer IP + GRE).
    pub fn overhead(&self) -> usize {
        let ip = if self.local.is_ipv4() { 20 } else { 40 };
        ip + 4 + 4 * (self.checksum as usize + self.key.is_some() as usize + self.sequence as usize)
    }
}

/// Why encapsulation did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncapError {
    /// Not an IPv4/IPv6 frame.
    NotIp,
    /// The result would exceed the path MTU; carries the largest inner IP packet that fits.
    TooBig(u16),
    /// No headroom for the outer headers.
    NoRoom,
}

/// The largest inner IP packet tunnel `t`'s path carries whole (its path MTU less every outer
/// header of the chain).
pub fn inner_mtu(tunnels: &[Tunnel], t: usize) -> u16 {
    let (_, _, _, mtu, overhead) = path_of(tunnels, t);
    (mtu as usize).saturating_sub(overhead).min(u16::MAX as usize) as u16
}

/// The port, MAC addresses and MTU at the end of tunnel `t`'s chain, and the total overhead.
pub fn path_of(tunnels: &[Tunnel], mut t: usize) -> (u16, EthernetAddress, EthernetAddress, u16, usize) {
    let mut overhead = 0;
    for _ in 0..=MAX_DEPTH {
        overhead += tunnels[t].overhead();
        match &tunnels[t].out {
            TunnelOut::Port {
                port,
                src_mac,
                dst_mac,
                mtu,
            } => return (*port, *src_mac, *dst_mac, *mtu, overhead),
            TunnelOut::Via(v) => t = *v,
        }
    }
    // The config refuses deeper chains; be safe anyway.
    (
        0,
        EthernetAddress::default(),
        EthernetAddress::default(),
        0,
        usize::MAX / 2,
    )
}

/// Wraps the IP packet in `pkt` (an Ethernet frame, VLAN tags allowed) in tunnel `t`, and in the
/// tunnels carrying it, in place: the result is an untagged Ethernet frame for the chain's port.
/// `seq` is the sequence number for a sequence tunnel (its owner's). Outer IPv4 headers take
/// their identification from `idents`, per destination. Returns the port to send on.
pub fn encapsulate<B: PacketBuf>(
    pkt: &mut B,
    tunnels: &[Tunnel],
    t: usize,
    seq: Option<u32>,
    idents: &mut Idents,
) -> Result<u16, EncapError> {
    encapsulate_inner(pkt, tunnels, t, seq, idents, true)
}

/// Like [`encapsulate`] without the MTU check: the result may be larger than the path MTU and
/// is then fragmented by its outer IPv4 header (allowed when the inner packet is IPv4 without
/// DF, RFC 2784 leaves fragmentation of the delivery packet to the encapsulator).
pub fn encapsulate_oversize<B: PacketBuf>(
    pkt: &mut B,
    tunnels: &[Tunnel],
    t: usize,
    seq: Option<u32>,
    idents: &mut Idents,
) -> Result<u16, EncapError> {
    encapsulate_inner(pkt, tunnels, t, seq, idents, false)
}

fn encapsulate_inner<B: PacketBuf>(
    pkt: &mut B,
    tunnels: &[Tunnel],
    t: usize,
    seq: Option<u32>,
    idents: &mut Idents,
    check_mtu: bool,
) -> Result<u16, EncapError> {
    let (port, src_mac, dst_mac, mtu, overhead) = path_of(tunnels, t);
    let (l2, inner_ty) = {
        let f = EthernetFrame::new_checked(pkt.data()).map_err(|_| EncapError::NotIp)?;
        (f.header_len(), f.ethertype())
    };
    if !matches!(inner_ty, EtherType::IPV4 | EtherType::IPV6) {
        return Err(EncapError::NotIp);
    }
    let inner_len = pkt.len() - l2;
    if check_mtu && inner_len + overhead > mtu as usize {
        return Err(EncapError::TooBig(
            (mtu as usize).saturating_sub(overhead).min(u16::MAX as usize) as u16,
        ));
    }
    if !pkt.adj(l2) {
        return Err(EncapError::NotIp);
    }
    let mut ty = inner_ty;
    let mut cur = t;
    let mut first = true;
    loop {
        let tun = &tunnels[cur];
        let g = GreRepr {
            protocol: ty,
            checksum: tun.checksum,
            key: tun.key,
            sequence: if tun.sequence {
                Some(if first { seq.unwrap_or(0) } else { 0 })
            } else {
                None
            },
        };
        let glen = g.header_len();
        let iplen = if tun.local.is_ipv4() { 20 } else { 40 };
        let payload = pkt.len();
        let Some(b) = pkt.prepend(iplen + glen) else {
            return Err(EncapError::NoRoom);
        };
        g.emit(&mut b[iplen..]);
        match (tun.local, tun.remote) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                crate::wire::ipv4::Ipv4Repr {
                    src,
                    dst,
                    protocol: IpProtocol::GRE,
                    payload_len: (glen + payload) as u16,
                    ttl: tun.ttl,
                    dscp_ecn: 0,
                    // Not atomic (a router may cut it): unique per backend (RFC 6864 §4.2).
                    ident: idents.reserve_in_slot(cur, IpAddr::V4(src), IpAddr::V4(dst), IpProtocol::GRE.0) as u16,
                    dont_frag: false,
                }
                .emit(b);
                ty = EtherType::IPV4;
            }
            (IpAddr::V6(src), IpAddr::V6(dst)) => {
                crate::wire::ipv6::Ipv6Repr {
                    src,
                    dst,
                    next_header: IpProtocol::GRE,
                    payload_len: (glen + payload) as u16,
                    hop_limit: tun.ttl,
                }
                .emit(b);
                ty = EtherType::IPV6;
            }
            _ => return Err(EncapError::NotIp),
        }
        first = false;
        match tun.out {
            TunnelOut::Port { .. } => break,
            TunnelOut::Via(v) => cur = v,
        }
    }
    let Some(b) = pkt.prepend(ethernet::HEADER_LEN) else {
        return Err(EncapError::NoRoom);
    };
    ethernet::emit_header(b, dst_mac, src_mac, ty);
    Ok(port)
}

/// What decapsulation found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decap {
    /// Stripped: the frame now holds the inner packet behind the original Ethernet header.
    Inner {
        /// The tunnel it came through.
        tunnel: usize,
    },
    /// No configured tunnel matches (remote, local, key).
    Unknown,
    /// The GRE checksum is wrong, or missing on a tunnel configured with `checksum = true`
    /// (Linux's `ip_tunnel_rcv` drops those too, as `rx_crc_errors`: a tunnel that checksums
    /// must not take an unchecked packet, or a sender skips the check by leaving the bit clear).
    BadChecksum,
    /// Older than the last accepted packet of a sequence tunnel (RFC 2890 §2.2).
    SeqOld {
        /// The tunnel.
        tunnel: usize,
    },
    /// A tunnel's packet whose payload type is not IPv4 or IPv6 (Ethernet over GRE, MPLS, ...):
    /// well formed, but nothing the box carries. Checked after the tunnel and its checksum, and
    /// before the sequence number, so it never moves a sequence tunnel's window.
    Unsupported,
    /// Not a GRE packet we can parse (version, reserved bits, truncated).
    Malformed,
}

/// Whether `inner` starts with a well-formed IP header of the GRE payload type `proto`: IPv4
/// with a valid header checksum and a total length that fits, or IPv6 whose payload fits.
fn inner_ip_valid(inner: &[u8], proto: EtherType) -> bool {
    match proto {
        EtherType::IPV4 => crate::wire::Ipv4Packet::new_checked(inner).is_ok_and(|ip| ip.verify_checksum()),
        EtherType::IPV6 => crate::wire::Ipv6Packet::new_checked(inner).is_ok(),
        _ => false,
    }
}

/// Strips the GRE encapsulation of the packet at `l3` (whose outer header ends at `l4`, from
/// `src` to `dst`) if a tunnel matches. `last_seq[t]` is this lcore's receive state for tunnel t.
pub fn decapsulate<B: PacketBuf>(
    pkt: &mut B,
    l3: usize,
    l4: usize,
    src: IpAddr,
    dst: IpAddr,
    tunnels: &[Tunnel],
    last_seq: &mut [Option<u32>],
) -> Decap {
    let (glen, proto, key, seqno, csum_present, csum_ok) = {
        let Some(rest) = pkt.data().get(l4..) else {
            return Decap::Malformed;
        };
        let Ok(g) = GrePacket::new_checked(rest) else {
            return Decap::Malformed;
        };
        (
            g.header_len(),
            g.protocol(),
            g.key(),
            g.sequence(),
            g.checksum_present(),
            !g.checksum_present() || g.verify_checksum(),
        )
    };
    // RFC 2890 §2.1: a tunnel is identified by its endpoints and key; a packet without the key a
    // tunnel has (or with one it has not) does not belong to it.
    let Some(t) = tunnels
        .iter()
        .position(|t| t.remote == src && t.local == dst && t.key == key)
    else {
        return Decap::Unknown;
    };
    if !csum_ok || (tunnels[t].checksum && !csum_present) {
        return Decap::BadChecksum;
    }
    if !matches!(proto, EtherType::IPV4 | EtherType::IPV6) {
        return Decap::Unsupported;
    }
    if tunnels[t].sequence {
        // RFC 2890 §2.2: accept only a number after the last one received, in serial-number
        // arithmetic (RFC 1982), so the counter may wrap; and no further ahead than the
        // tunnel's bound, so a spoofed number cannot push the window out of reach.
        let Some(s) = seqno else {
            return Decap::SeqOld { tunnel: t };
        };
        if let Some(last) = last_seq[t] {
            let step = s.wrapping_sub(last);
            if (step as i32) <= 0 || step > tunnels[t].max_seq_jump {
                return Decap::SeqOld { tunnel: t };
            }
        }
        // Only a packet whose inner IP header holds moves the window: a malformed one (a
        // spoofer's cheapest packet) is dropped without touching it.
        if !inner_ip_valid(pkt.data().get(l4 + glen..).unwrap_or(&[]), proto) {
            return Decap::Malformed;
        }
        last_seq[t] = Some(s);
    }
    // Remove outer IP + GRE between the Ethernet header and the inner packet: move the Ethernet
    // header (with its VLAN tags) forward, then drop the front.
    let strip = l4 - l3 + glen;
    let d = pkt.data_mut();
    d.copy_within(0..l3, strip);
    let ty: u16 = proto.into();
    d[strip + l3 - 2..strip + l3].copy_from_slice(&ty.to_be_bytes());
    if !pkt.adj(strip) {
        return Decap::Malformed;
    }
    Decap::Inner { tunnel: t }
}

/// Checks a packet's nesting before the pipeline runs it again: `true` if one more level is
/// allowed.
#[inline]
pub fn may_nest(depth: usize) -> bool {
    depth < MAX_DEPTH
}

/// Whether `p` (an inner IPv4 packet) has DF set, so it must not be fragmented by the outer header.
pub fn inner_dont_frag(frame: &[u8], l2: usize) -> bool {
    Ipv4Packet::new_checked(&frame[l2..])
        .map(|p| p.dont_frag())
        .unwrap_or(false)
        || Ipv6Packet::new_checked(&frame[l2..]).is_ok()
}

#[cfg(test)]
pub(crate) mod tests {
    /// Identification state for the tests (its values are not what they check).
    fn ids() -> Idents {
        Idents::with_keys([1, 2, 3, 4])
    }

    use super::*;
    use crate::buf::HeapBuf;
    use crate::pipeline::parse::tests::{udp_bytes, v4_frame};
    use std::net::Ipv4Addr;
    use std::sync::Arc;

    const A: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
    const B: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 0xfe]);

    /// A GRE tunnel 192.0.2.1 -> 198.51.100.2 for tests (`port()` for a port's output).
    pub(crate) fn tunnel(name: &str, key: Option<u32>, sequence: bool, checksum: bool, out: TunnelOut) -> Tunnel {
        Tunnel {
            name: name.into(),
            local: "192.0.2.1".parse().unwrap(),
            remote: "198.51.100.2".parse().unwrap(),
            key,
            sequence,
            checksum,
            ttl: 64,
            out,
            depth: 1,
            owner: 0,
            counters: Arc::new(TunnelCounters::new(1, 1)),
            handoff: None,
            max_seq_jump: crate::pipeline::tunnel::DEFAULT_MAX_SEQ_JUMP,
        }
    }

    pub(crate) fn port() -> TunnelOut {
        TunnelOut::Port {
            port: 0,
            src_mac: A,
            dst_mac: B,
            mtu: 1500,
        }
    }

    fn inner() -> Vec<u8> {
        v4_frame(
            Ipv4Addr::new(203, 0, 113, 9),
            Ipv4Addr::new(10, 1, 0, 5),
            IpProtocol::UDP,
            &[],
            0,
            &udp_bytes(1000, 9000, b"payload"),
        )
    }

    #[test]
    fn golden_bytes_for_every_flag_combination() {
        for (key, seq, csum, glen) in [
            (None, false, false, 4),
            (Some(0x0102_0304), false, false, 8),
            (None, true, false, 8),
            (None, false, true, 8),
            (Some(42), true, true, 16),
        ] {
            let tuns = vec![tunnel("t", key, seq, csum, port())];
            let orig = inner();
            let mut b = HeapBuf::new(&orig);
            assert_eq!(encapsulate(&mut b, &tuns, 0, Some(7), &mut ids()), Ok(0));
            let d = b.data();
            assert_eq!(&d[0..6], &B.0);
            assert_eq!(&d[6..12], &A.0);
            assert_eq!(&d[12..14], &[0x08, 0x00]);
            let ip = Ipv4Packet::new_checked(&d[14..]).unwrap();
            assert!(ip.verify_checksum());
            assert_eq!(
                (ip.protocol(), ip.ttl(), ip.total_len()),
                (IpProtocol::GRE, 64, 20 + glen + orig.len() - 14)
            );
            assert_eq!(ip.src_addr(), Ipv4Addr::new(192, 0, 2, 1));
            assert_eq!(ip.dst_addr(), Ipv4Addr::new(198, 51, 100, 2));
            let g = GrePacket::new_checked(&d[34..]).unwrap();
            assert_eq!(g.header_len(), glen);
            assert_eq!(g.key(), key);
            assert_eq!(g.sequence(), seq.then_some(7));
            assert_eq!(g.checksum_present(), csum);
            assert!(g.verify_checksum());
            let flags = u16::from_be_bytes([d[34], d[35]]);
            let want = (csum as u16) << 15 | (key.is_some() as u16) << 13 | (seq as u16) << 12;
            assert_eq!(flags, want, "C/K/S bits, version 0");
            assert_eq!(&d[34 + glen..], &orig[14..], "inner packet untouched");
        }
    }

    #[test]
    fn a_spoofed_sequence_number_does_not_move_the_window() {
        let tuns = vec![tunnel("t", None, true, false, port())];
        let (src, dst): (IpAddr, IpAddr) = ("198.51.100.2".parse().unwrap(), "192.0.2.1".parse().unwrap());
        let rx = vec![Tunnel {
            local: dst,
            remote: src,
            ..tuns[0].clone()
        }];
        let wrap = |seq: u32, inner_bytes: &[u8]| {
            let mut b = HeapBuf::new(inner_bytes);
            encapsulate(&mut b, &tuns, 0, Some(seq), &mut ids()).unwrap();
            b
        };
        let good = inner();
        let mut last = vec![None];
        let decap = |b: &mut HeapBuf, last: &mut Vec<Option<u32>>| decapsulate(b, 14, 34, src, dst, &rx, last);
        assert_eq!(decap(&mut wrap(10, &good), &mut last), Decap::Inner { tunnel: 0 });
        // 2^31 - 16 ahead (what RFC 2890's serial arithmetic alone would adopt): dropped.
        assert_eq!(
            decap(&mut wrap(10 + (1 << 31) - 16, &good), &mut last),
            Decap::SeqOld { tunnel: 0 }
        );
        // Newer and close, but the inner IPv4 header is broken: dropped, window unmoved.
        let mut broken = good.clone();
        broken[14 + 10] ^= 0xff; // its header checksum
        assert_eq!(decap(&mut wrap(500, &broken), &mut last), Decap::Malformed);
        assert_eq!(last[0], Some(10));
        // The next legitimate packets still arrive; the bound itself is accepted.
        assert_eq!(decap(&mut wrap(11, &good), &mut last), Decap::Inner { tunnel: 0 });
        assert_eq!(
            decap(&mut wrap(11 + DEFAULT_MAX_SEQ_JUMP, &good), &mut last),
            Decap::Inner { tunnel: 0 }
        );
    }

    #[test]
    fn decap_is_the_inverse_and_checks_key_checksum_and_sequence() {
        let tuns = vec![tunnel("t", Some(9), true, true, port())];
        let orig = inner();
        let wrap = |seq: u32| {
            let mut b = HeapBuf::new(&orig);
            encapsulate(&mut b, &tuns, 0, Some(seq), &mut ids()).unwrap();
            b
        };
        let mut last = vec![None];
        let (src, dst): (IpAddr, IpAddr) = ("198.51.100.2".parse().unwrap(), "192.0.2.1".parse().unwrap());
        // Received: roles reversed (the far end sent it to us).
        let rx = vec![Tunnel {
            local: dst,
            remote: src,
            ..tuns[0].clone()
        }];
        let mut b = wrap(5);
        assert_eq!(
            decapsulate(&mut b, 14, 34, src, dst, &rx, &mut last),
            Decap::Inner { tunnel: 0 }
        );
        assert_eq!(&b.data()[14..], &orig[14..]);
        assert_eq!(&b.data()[12..14], &[0x08, 0x00]);
        // Same or older sequence: dropped; newer: accepted; wrap-around is newer.
        assert_eq!(
            decapsulate(&mut wrap(5), 14, 34, src, dst, &rx, &mut last),
            Decap::SeqOld { tunnel: 0 }
        );
        assert_eq!(
            decapsulate(&mut wrap(4), 14, 34, src, dst, &rx, &mut last),
            Decap::SeqOld { tunnel: 0 }
        );
        assert_eq!(
            decapsulate(&mut wrap(6), 14, 34, src, dst, &rx, &mut last),
            Decap::Inner { tunnel: 0 }
        );
        last[0] = Some(u32::MAX - 1);
        assert_eq!(
            decapsulate(&mut wrap(2), 14, 34, src, dst, &rx, &mut last),
            Decap::Inner { tunnel: 0 }
        );
        // Bad checksum.
        let mut b = wrap(100);
        let n = b.len();
        b.data_mut()[n - 1] ^= 0xff;
        assert_eq!(
            decapsulate(&mut b, 14, 34, src, dst, &rx, &mut last),
            Decap::BadChecksum
        );
        // A checksum tunnel refuses a packet without one; a tunnel without takes either.
        let plain = vec![Tunnel {
            checksum: false,
            ..tuns[0].clone()
        }];
        let unchecked = |seq: u32| {
            let mut b = HeapBuf::new(&orig);
            encapsulate(&mut b, &plain, 0, Some(seq), &mut ids()).unwrap();
            b
        };
        assert_eq!(
            decapsulate(&mut unchecked(101), 14, 34, src, dst, &rx, &mut last),
            Decap::BadChecksum
        );
        let rx_plain = vec![Tunnel {
            checksum: false,
            ..rx[0].clone()
        }];
        assert_eq!(
            decapsulate(&mut unchecked(102), 14, 34, src, dst, &rx_plain, &mut last),
            Decap::Inner { tunnel: 0 }
        );
        assert_eq!(
            decapsulate(&mut wrap(103), 14, 34, src, dst, &rx_plain, &mut last),
            Decap::Inner { tunnel: 0 }
        );
        // Ethernet over GRE (0x6558) to a known tunnel: well formed, not carried; the sequence
        // window stays where it was. From an unknown remote it is an unknown tunnel first.
        let before = last.clone();
        let mut teb = unchecked(500);
        teb.data_mut()[36..38].copy_from_slice(&[0x65, 0x58]);
        assert_eq!(
            decapsulate(&mut teb, 14, 34, src, dst, &rx_plain, &mut last),
            Decap::Unsupported
        );
        assert_eq!(last, before, "an unsupported packet does not move the sequence window");
        let stranger: IpAddr = "198.51.100.99".parse().unwrap();
        assert_eq!(
            decapsulate(&mut teb, 14, 34, stranger, dst, &rx_plain, &mut last),
            Decap::Unknown
        );
        // Wrong key, wrong remote: unknown.
        let other_key = vec![Tunnel {
            key: Some(10),
            ..rx[0].clone()
        }];
        assert_eq!(
            decapsulate(&mut wrap(200), 14, 34, src, dst, &other_key, &mut last),
            Decap::Unknown
        );
        let no_key = vec![Tunnel {
            key: None,
            ..rx[0].clone()
        }];
        assert_eq!(
            decapsulate(&mut wrap(201), 14, 34, src, dst, &no_key, &mut last),
            Decap::Unknown
        );
        let other: IpAddr = "198.51.100.3".parse().unwrap();
        assert_eq!(
            decapsulate(&mut wrap(202), 14, 34, other, dst, &rx, &mut last),
            Decap::Unknown
        );
        // Zeros after the outer header are a GRE header without a key (so not this keyed
        // tunnel's); two bytes are no GRE header at all.
        let mut zeros = HeapBuf::new(&[0u8; 40]);
        assert_eq!(
            decapsulate(&mut zeros, 14, 34, src, dst, &rx, &mut last),
            Decap::Unknown
        );
        let mut cut = HeapBuf::new(&[0u8; 36]);
        assert_eq!(
            decapsulate(&mut cut, 14, 34, src, dst, &rx, &mut last),
            Decap::Malformed
        );
    }

    #[test]
    fn nested_tunnels_wrap_in_order_and_respect_the_mtu() {
        let mut outer = tunnel("outer", Some(1), false, false, port());
        outer.remote = "198.51.100.9".parse().unwrap();
        let inner_t = Tunnel {
            depth: 2,
            ..tunnel("inner", Some(2), false, false, TunnelOut::Via(1))
        };
        let tuns = vec![inner_t, outer];
        let orig = inner();
        let mut b = HeapBuf::new(&orig);
        assert_eq!(encapsulate(&mut b, &tuns, 0, None, &mut ids()), Ok(0));
        let d = b.data();
        let o = Ipv4Packet::new_checked(&d[14..]).unwrap();
        assert_eq!(
            o.dst_addr(),
            Ipv4Addr::new(198, 51, 100, 9),
            "outermost is the carrying tunnel"
        );
        assert_eq!(GrePacket::new_checked(&d[34..]).unwrap().key(), Some(1));
        let i = Ipv4Packet::new_checked(&d[42..]).unwrap();
        assert_eq!(i.dst_addr(), Ipv4Addr::new(198, 51, 100, 2));
        assert_eq!(GrePacket::new_checked(&d[62..]).unwrap().key(), Some(2));
        assert_eq!(&d[70..], &orig[14..]);

        let small = vec![tunnel(
            "t",
            None,
            false,
            false,
            TunnelOut::Port {
                port: 0,
                src_mac: A,
                dst_mac: B,
                mtu: 50,
            },
        )];
        let mut b = HeapBuf::new(&orig);
        assert_eq!(
            encapsulate(&mut b, &small, 0, None, &mut ids()),
            Err(EncapError::TooBig(26))
        );
        assert_eq!(b.data(), &orig[..], "untouched when refused");
    }

    #[test]
    fn ipv6_underlay() {
        let mut t = tunnel("v6", None, false, true, port());
        t.local = "2001:db8::1".parse().unwrap();
        t.remote = "2001:db8::2".parse().unwrap();
        let orig = inner();
        let mut b = HeapBuf::new(&orig);
        encapsulate(&mut b, &[t], 0, None, &mut ids()).unwrap();
        let d = b.data();
        assert_eq!(&d[12..14], &[0x86, 0xdd]);
        let ip = Ipv6Packet::new_checked(&d[14..]).unwrap();
        assert_eq!(ip.next_header(), IpProtocol::GRE);
        assert_eq!(ip.payload_len(), 8 + orig.len() - 14);
        assert!(GrePacket::new_checked(&d[54..]).unwrap().verify_checksum());
    }

    #[test]
    fn nesting_limit() {
        assert!(may_nest(0) && may_nest(2));
        assert!(!may_nest(3));
    }
}

#[cfg(test)]
mod pipeline_tests {
    use super::*;
    use crate::buf::HeapBuf;
    use crate::outcome::Outcome;
    use crate::pipeline::parse::tests::v4_frame;
    use crate::pipeline::{Instant, Pipeline, PortAddrs, Tables, Verdict};
    use std::net::Ipv4Addr;
    use std::sync::Arc;

    const ME_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
    const PEER_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);

    fn t(
        key: Option<u32>,
        sequence: bool,
        local: &str,
        remote: &str,
        mac: (EthernetAddress, EthernetAddress),
    ) -> Tunnel {
        Tunnel {
            name: "t1".into(),
            local: local.parse().unwrap(),
            remote: remote.parse().unwrap(),
            key,
            sequence,
            checksum: false,
            ttl: 64,
            out: TunnelOut::Port {
                port: 0,
                src_mac: mac.0,
                dst_mac: mac.1,
                mtu: 1500,
            },
            depth: 1,
            owner: 0,
            counters: Arc::new(TunnelCounters::new(1, 1)),
            handoff: None,
            max_seq_jump: crate::pipeline::tunnel::DEFAULT_MAX_SEQ_JUMP,
        }
    }

    /// Our side: 192.0.2.1 and 10.9.0.1 (inside the tunnel) with tunnel t1 to 192.0.2.2.
    fn pipeline(sequence: bool) -> Pipeline {
        let ours = t(Some(5), sequence, "192.0.2.1", "192.0.2.2", (ME_MAC, PEER_MAC));
        Pipeline::new(
            Arc::new(Tables {
                generation: 1,
                ports: vec![PortAddrs::new(
                    ME_MAC,
                    vec![Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(10, 9, 0, 1)],
                    vec![],
                    false,
                )],
                tunnels: vec![ours],
                ..Default::default()
            }),
            0,
        )
    }

    /// What the peer sends: `layers` GRE headers around a ping to 10.9.0.1.
    fn from_peer(layers: usize, seq: u32) -> HeapBuf {
        from_peer_with(layers, seq, |_| {})
    }

    /// [`from_peer`] with the ping frame changed by `change` before it is wrapped.
    fn from_peer_with(layers: usize, seq: u32, change: impl FnOnce(&mut Vec<u8>)) -> HeapBuf {
        let mut ping = v4_frame(
            Ipv4Addr::new(10, 9, 0, 2),
            Ipv4Addr::new(10, 9, 0, 1),
            IpProtocol::ICMP,
            &[],
            0,
            &[8, 0, 0xf7, 0xfe, 0, 1, 0, 0],
        );
        ping[0..6].copy_from_slice(&ME_MAC.0);
        ping[6..12].copy_from_slice(&PEER_MAC.0);
        change(&mut ping);
        let theirs = vec![t(Some(5), seq > 0, "192.0.2.2", "192.0.2.1", (PEER_MAC, ME_MAC))];
        let mut b = HeapBuf::with_room(&ping, 512, 512);
        for _ in 0..layers {
            encapsulate(&mut b, &theirs, 0, Some(seq), &mut Idents::with_keys([1, 2, 3, 4])).unwrap();
        }
        b
    }

    #[test]
    fn a_ping_through_the_tunnel_is_answered_through_it() {
        let mut p = pipeline(false);
        let mut b = from_peer(1, 0);
        let v = p.process(0, &mut b, Instant(0));
        assert_eq!(
            v,
            Verdict::TransmitOn {
                port: 0,
                outcome: Outcome::EchoReply
            }
        );
        let d = b.data();
        assert_eq!(&d[0..6], &PEER_MAC.0);
        let outer = Ipv4Packet::new_checked(&d[14..]).unwrap();
        assert_eq!(
            (outer.src_addr(), outer.dst_addr()),
            (Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 2))
        );
        let g = GrePacket::new_checked(outer.payload()).unwrap();
        assert_eq!(g.key(), Some(5));
        let inner = Ipv4Packet::new_checked(g.payload()).unwrap();
        assert_eq!(inner.dst_addr(), Ipv4Addr::new(10, 9, 0, 2));
        assert_eq!(inner.payload()[0], 0, "an echo reply");
        let c = &p.tables().tunnels[0].counters;
        assert_eq!((c.sum(|c| &c.decap), c.sum(|c| &c.encap)), (1, 1));
    }

    #[test]
    fn the_nics_ipv4_checksum_verdict_covers_the_outer_header_only() {
        use crate::buf::NicChecksum;
        let mut p = pipeline(false);
        let mut b = from_peer(1, 0);
        b.set_ip_checksum(NicChecksum::Good);
        assert!(matches!(
            p.process(0, &mut b, Instant(0)),
            Verdict::TransmitOn {
                outcome: Outcome::EchoReply,
                ..
            }
        ));
        // The NIC vouched for the outer header; the inner one is checked in software.
        let mut b = from_peer_with(1, 0, |ping| ping[14 + 10] ^= 0xff);
        b.set_ip_checksum(NicChecksum::Good);
        assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Drop(Outcome::Malformed));
        // A NIC that found the outer checksum wrong: dropped before any GRE processing.
        let mut b = from_peer(1, 0);
        b.set_ip_checksum(NicChecksum::Bad);
        assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Drop(Outcome::Malformed));
        let c = &p.tables().tunnels[0].counters;
        assert_eq!(
            c.sum(|c| &c.decap),
            2,
            "the first and the inner-corrupt one were decapsulated"
        );
    }

    #[test]
    fn nesting_deeper_than_three_is_dropped() {
        let mut p = pipeline(false);
        for layers in 1..=3 {
            let v = p.process(0, &mut from_peer(layers, 0), Instant(0));
            assert!(
                matches!(
                    v,
                    Verdict::TransmitOn {
                        outcome: Outcome::EchoReply,
                        ..
                    }
                ),
                "{layers} layers: {v:?}"
            );
        }
        assert_eq!(
            p.process(0, &mut from_peer(4, 0), Instant(0)),
            Verdict::Drop(Outcome::GreRecursion)
        );
    }

    #[test]
    fn unknown_tunnel_and_sequence_rule() {
        let mut p = pipeline(true);
        // Without a sequence number on a sequence tunnel: dropped by the receive rule.
        assert_eq!(
            p.process(0, &mut from_peer(1, 0), Instant(0)),
            Verdict::Drop(Outcome::GreSeqDropped)
        );
        // The answer goes to the tunnel's owner, which numbers it.
        assert_eq!(
            p.process(0, &mut from_peer(1, 10), Instant(0)),
            Verdict::HandOff {
                tunnel: 0,
                outcome: Outcome::EchoReply
            }
        );
        assert_eq!(
            p.process(0, &mut from_peer(1, 9), Instant(0)),
            Verdict::Drop(Outcome::GreSeqDropped)
        );
        assert_eq!(p.tables().tunnels[0].counters.sum(|c| &c.seq_dropped), 2);
        let mut other = pipeline(false);
        let mut tables = (**other.tables()).clone();
        tables.tunnels[0].key = Some(6);
        other.apply(Arc::new(tables));
        assert_eq!(
            other.process(0, &mut from_peer(1, 0), Instant(0)),
            Verdict::Drop(Outcome::GreUnknownTunnel)
        );
    }
}
