//! The per-packet pipeline.
//!
//! It knows nothing of DPDK: it runs over any [`PacketBuf`] and is handed `now`, so every stage is
//! tested over heap buffers with simulated time. Each stage returns what happened to the packet as
//! a [`Verdict`] carrying exactly one [`Outcome`].

mod arp;
pub(crate) mod echo;
pub mod fanout;
pub mod flow_limit;
pub mod icmp_error;
pub(crate) mod ndp;
pub mod parse;
pub mod reasm;
pub mod service;
pub mod tunnel;
#[cfg(test)]
mod udp4_tests;

pub use fanout::{Choice, FanoutMode, FanoutState, FlowHash, Group, HashOnDemand};
pub use parse::{FragmentInfo, IpVersion, Parsed};
pub use service::{Action, Service, ServiceTable};

use crate::socket::Socket;

use crate::buf::{NicChecksum, PacketBuf};
use crate::outcome::Outcome;
use crate::wire::icmpv6::Icmpv6Message;
use crate::wire::ipv6::{is_solicited_node, solicited_node, ALL_NODES};
use crate::wire::{self, EtherType, EthernetAddress, EthernetFrame, IpProtocol, Toeplitz};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
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
    /// The packet was rewritten into an answer for another port (e.g. into a tunnel): send it
    /// out of `port`, then count `outcome` (or [`Outcome::TxFull`]).
    TransmitOn {
        /// DPDK port id.
        port: u16,
        /// The outcome once sent.
        outcome: Outcome,
    },
    /// A fragment of a datagram for a local address: hand it to the lcore's reassembler (the IP
    /// header is at `l3`). Its outcome comes when its datagram completes, times out or is
    /// refused.
    Reassemble {
        /// Offset of the IP header.
        l3: u16,
    },
    /// Hand the packet to the socket [`Pipeline::delivered_to`] names; it is staged and
    /// enqueued at the end of the burst: outcome `delivered`, or `socket_full` if the ring
    /// refuses it.
    ///
    /// The socket is not in the verdict, so that a delivery is one constant value: the fast
    /// path's delivery then goes straight from where it is decided to the staging. With the
    /// socket in it (`Deliver(u32)`) every verdict was packed into one word, merged, unpacked
    /// and dispatched through a jump table, ~16 instructions per delivered packet.
    Deliver,
}

// Returned in a register by every stage: as a 16-byte value it went through memory, written in
// pieces and read whole, which stalled store forwarding on every packet.
const _: () = assert!(std::mem::size_of::<Verdict>() <= 8);

impl Verdict {
    /// The outcome the verdict carries.
    pub fn outcome(self) -> Outcome {
        match self {
            Verdict::Drop(o) | Verdict::Transmit(o) | Verdict::TransmitOn { outcome: o, .. } => o,
            Verdict::Deliver => Outcome::Delivered,
            Verdict::Reassemble { .. } => Outcome::Reassembled,
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
        // One address (the common port) is one compare; the loop's setup and exit cost as much
        // again on every packet.
        match self.ipv4.as_slice() {
            [only] => *only == ip,
            all => all.contains(&ip),
        }
    }

    /// Whether `ip` is one of the port's IPv6 addresses.
    #[inline]
    pub fn has_ipv6(&self, ip: &Ipv6Addr) -> bool {
        self.ipv6.contains(ip)
    }

    /// The local address a packet to `dst` is for: `dst` itself when it is a local address;
    /// for the solicited-node group of a local address (RFC 4291 §2.7.1), that address; for
    /// all-nodes ff02::1, the first local address. `None`: the packet is not for us.
    pub fn ipv6_local_for(&self, dst: &Ipv6Addr) -> Option<Ipv6Addr> {
        if self.has_ipv6(dst) {
            return Some(*dst);
        }
        if *dst == ALL_NODES {
            return self.ipv6.first().copied();
        }
        if is_solicited_node(dst) {
            return self.ipv6.iter().find(|a| solicited_node(a) == *dst).copied();
        }
        None
    }
}

/// The read-only tables of one config generation, shared by every lcore.
///
/// A reload builds a whole new `Tables` off the data path and publishes it; each lcore adopts it
/// between bursts with [`Pipeline::apply`]. Nothing in here changes once published.
///
/// Read per packet by every lcore: 128-byte aligned, so that no heap object an lcore writes
/// shares its lines (see the runtime's `RunControl`).
#[derive(Clone, Debug, Default)]
#[repr(align(128))]
pub struct Tables {
    /// The config generation these tables belong to (1 for the config loaded at start).
    pub generation: u64,
    /// Indexed by DPDK port id.
    pub ports: Vec<PortAddrs>,
    /// The flow hash used when the NIC supplies none, built from the configured RSS key (the
    /// ports' RSS is programmed with the same key, so hardware and software hashes agree).
    pub hasher: Toeplitz,
    /// Local services by protocol and port.
    pub services: ServiceTable,
    /// Every service's sockets; services' groups index into it.
    pub sockets: Vec<Arc<Socket>>,
    /// Flow-limit shedding.
    pub flow_limit: flow_limit::FlowLimitConfig,
    /// GRE tunnels.
    pub tunnels: Vec<tunnel::Tunnel>,
    /// MTU (IP bytes) by DPDK port id; a missing entry means 1500.
    pub port_mtu: Vec<u16>,
    /// Reassembly settings.
    pub reassembly: reasm::ReasmConfig,
    /// ICMP error limits.
    pub icmp: icmp_error::IcmpConfig,
    /// The global ICMP budget, shared by every RX lcore (and kept across reloads).
    pub icmp_global: Option<Arc<icmp_error::GlobalBucket>>,
    /// ICMP counters per RX lcore.
    pub icmp_counters: Arc<icmp_error::IcmpCounters>,
}

impl Tables {
    /// The MTU of `port`.
    pub fn mtu(&self, port: u16) -> u16 {
        self.port_mtu.get(port as usize).copied().unwrap_or(1500)
    }
}

/// One pass of the pipeline over a frame.
enum Step {
    Done(Verdict),
    /// A tunnel header was stripped: the inner packet goes through again.
    Decapsulated(usize),
}

/// The verdict for a frame the port must not take by its Ethernet addresses: not to us (our
/// MAC or a group address), or from a group address (RFC 1122 §3.3.6 / IEEE 802: never a valid
/// source); `None` to go on.
#[inline(always)]
fn link_layer_refusal(local: &PortAddrs, dst: EthernetAddress, src: EthernetAddress) -> Option<Verdict> {
    if !dst.is_multicast() && dst != local.mac {
        return Some(Verdict::Drop(Outcome::NotForUs));
    }
    if !src.is_unicast() {
        return Some(Verdict::Drop(Outcome::Malformed));
    }
    None
}

/// [`link_layer_refusal`] on a frame's first 12 bytes (destination, source), each address read
/// as one word: the fixed-offset path's form, about half the instructions of assembling both
/// addresses first.
#[inline(always)]
fn link_layer_refusal_in(local: &PortAddrs, h: &[u8; 12]) -> Option<Verdict> {
    // Little-endian words: an address's first byte, with the group bit (its lowest), is the low
    // byte on any machine. The destination is bytes 0..6 of the word at 0, the source bytes
    // 2..8 of the word at 4.
    let word = |at: usize| {
        u64::from_le_bytes([
            h[at],
            h[at + 1],
            h[at + 2],
            h[at + 3],
            h[at + 4],
            h[at + 5],
            h[at + 6],
            h[at + 7],
        ])
    };
    let dst = word(0) & 0xffff_ffff_ffff;
    let src = word(4) >> 16;
    let m = local.mac.as_bytes();
    let mac = u64::from_le_bytes([m[0], m[1], m[2], m[3], m[4], m[5], 0, 0]);
    if dst != mac && dst & 1 == 0 {
        return Some(Verdict::Drop(Outcome::NotForUs));
    }
    if src & 1 != 0 || src == 0 {
        return Some(Verdict::Drop(Outcome::Malformed));
    }
    None
}

/// Whether `dst` is one of the port's own unicast addresses.
#[inline]
fn is_local(local: &PortAddrs, dst: IpAddr) -> bool {
    match dst {
        IpAddr::V4(a) => local.has_ipv4(a),
        IpAddr::V6(a) => local.has_ipv6(&a),
    }
}

/// One lcore's pipeline: the current generation's shared tables plus the lcore's own mutable
/// state, so nothing is shared for writing on the per-packet path.
#[derive(Clone, Debug)]
pub struct Pipeline {
    tables: Arc<Tables>,
    fanout: FanoutState,
    /// Rate limits for the ICMP errors this lcore sends.
    icmp: icmp_error::IcmpLimiter,
    /// This lcore's slot of the tables' ICMP counters (a detached set, counted by nobody, if
    /// the tables have no slot for it).
    icmp_counters: Arc<icmp_error::IcmpLcoreCounters>,
    /// This lcore's random numbers (ICMP credit draws).
    rng: u64,
    /// Keys the per-destination ICMP table (unpredictable, per lcore).
    icmp_seed: u64,
    /// Per tunnel: the last sequence number accepted on this lcore (RFC 2890 §2.2).
    gre_seq: Vec<Option<u32>>,
    /// Identification for the outer IPv4 headers this lcore builds.
    ident: u16,
    /// The socket of the last [`Verdict::Deliver`].
    delivered_to: u32,
}

impl Pipeline {
    /// A pipeline over `tables` for the RX lcore in counter slot `slot`.
    pub fn new(tables: Arc<Tables>, slot: usize) -> Self {
        let mut fanout = FanoutState::new(tables.sockets.len(), slot, 0x9e37_79b9_7f4a_7c15 ^ slot as u64);
        fanout.flow_limit = tables.flow_limit.for_slot(slot).map(flow_limit::FlowLimit::new);
        let gre_seq = vec![None; tables.tunnels.len()];
        // An unpredictable key for the per-destination table, so nobody can aim collisions at it.
        let icmp_seed = {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_usize(slot);
            h.finish()
        };
        let global = tables
            .icmp_global
            .clone()
            .unwrap_or_else(|| tables.icmp.global_bucket(Instant(0)));
        let icmp = icmp_error::IcmpLimiter::new(&tables.icmp, global, icmp_seed);
        let icmp_counters = tables.icmp_counters.rx.get(slot).cloned().unwrap_or_default();
        Pipeline {
            tables,
            fanout,
            icmp,
            icmp_counters,
            rng: icmp_seed | 1,
            icmp_seed,
            gre_seq,
            ident: (slot as u16).wrapping_mul(0x3779),
            delivered_to: 0,
        }
    }

    /// Adopts a new generation. Called by the owning lcore at a quiescent point (between
    /// bursts), so no packet ever sees a mix of two generations. Per-lcore state that depends on
    /// the tables is carried over or rebuilt here.
    pub fn apply(&mut self, tables: Arc<Tables>) {
        debug_assert!(
            self.fanout.touched().is_empty(),
            "generations change between bursts only"
        );
        let slot = self.fanout.slot;
        // The flow-limit table (and its history) carries over unless its length changed; a new
        // length means a whole new table, mask included.
        let keep = match (self.fanout.flow_limit.take(), tables.flow_limit.for_slot(slot)) {
            (Some(t), Some(len)) if t.table_len() == len => Some(t),
            _ => None,
        };
        // A tunnel that stays keeps its receive sequence state.
        let seq: Vec<Option<u32>> = tables
            .tunnels
            .iter()
            .map(|t| {
                let old = self.tables.tunnels.iter().position(|o| o.name == t.name);
                old.and_then(|i| self.gre_seq.get(i).copied().flatten())
            })
            .collect();
        // The ICMP limiter keeps its per-destination table when its size is unchanged.
        let mut icmp = std::mem::replace(
            &mut self.icmp,
            icmp_error::IcmpLimiter::new(&tables.icmp, tables.icmp.global_bucket(Instant(0)), 1),
        );
        let global = tables
            .icmp_global
            .clone()
            .unwrap_or_else(|| tables.icmp.global_bucket(Instant(0)));
        icmp.apply(&tables.icmp, global, self.icmp_seed);
        let (rng, icmp_seed) = (self.rng, self.icmp_seed);
        *self = Pipeline::new(tables, slot);
        self.gre_seq = seq;
        self.icmp = icmp;
        self.rng = rng;
        self.icmp_seed = icmp_seed;
        if keep.is_some() {
            self.fanout.flow_limit = keep;
        }
    }

    /// The flow-limit table length in use, if the limit is on for this lcore.
    pub fn flow_limit_len(&self) -> Option<u32> {
        self.fanout.flow_limit.as_ref().map(|t| t.table_len())
    }

    /// The socket (index into [`Tables::sockets`]) the last [`Verdict::Deliver`] is for.
    #[inline(always)]
    pub fn delivered_to(&self) -> usize {
        self.delivered_to as usize
    }

    /// This lcore's counter slot.
    pub fn slot(&self) -> usize {
        self.fanout.slot
    }

    /// The tables in use.
    pub fn tables(&self) -> &Arc<Tables> {
        &self.tables
    }

    /// The sockets packets were staged for in this burst, with how many each.
    pub fn staged(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.fanout.touched().iter().map(|&s| (s, self.fanout.staged(s)))
    }

    /// The caller enqueued (or dropped) every staged packet.
    pub fn burst_done(&mut self) {
        self.fanout.burst_done();
    }

    /// A pipeline over `ports` alone (generation 1, Microsoft RSS key): for tests and tools.
    pub fn for_ports(ports: Vec<PortAddrs>) -> Self {
        Self::new(
            Arc::new(Tables {
                generation: 1,
                ports,
                ..Default::default()
            }),
            0,
        )
    }

    /// The flow hasher of the current generation.
    pub fn hasher(&self) -> &Toeplitz {
        &self.tables.hasher
    }

    /// The generation in use.
    pub fn generation(&self) -> u64 {
        self.tables.generation
    }

    /// Runs every stage on one packet received on `port`.
    #[inline]
    pub fn process<B: PacketBuf>(&mut self, port: u16, pkt: &mut B, now: Instant) -> Verdict {
        if let Some(v) = self.udp4(port, pkt, now) {
            return v;
        }
        self.process_general(port, pkt, now)
    }

    /// [`Pipeline::process`] without its IPv4/UDP fast path ([`Pipeline::udp4`]): every frame
    /// through the parsers and the stages in order. The fast path must decide as this does; a
    /// test holds the two to the same verdicts, packets and state.
    #[inline(always)]
    pub(crate) fn process_general<B: PacketBuf>(&mut self, port: u16, pkt: &mut B, now: Instant) -> Verdict {
        // The common case, no tunnel, returns straight from one pass: keeping a loop (and its
        // `Step`) around it made the compiler copy the verdict through memory byte-wise, which
        // stalled store forwarding on every packet.
        match self.process_once(port, pkt, now, 0) {
            Step::Done(v) => v,
            Step::Decapsulated(t) => self.process_tunnelled(port, pkt, now, t),
        }
    }

    /// The fast path of [`Pipeline::process`]: an untagged IPv4 datagram with a 20-byte header,
    /// not a fragment, of UDP, as received — a service's traffic, and the closed-port and
    /// not-local floods. Its checks read fixed offsets and keep every value in registers; a
    /// packet for a service whose socket the burst already knows has room is staged without
    /// anything written but the fanout's count. What it cannot settle in place (a fanout
    /// decision, an ICMP error) goes on to the same stages as from the general path, with the
    /// [`Parsed`] the parsers would have made.
    ///
    /// `None` (the frame is not of that shape; nothing was read but its first 42 bytes, nothing
    /// changed): [`Pipeline::process_general`] decides. Every verdict, packet change and state
    /// change here is the general path's for the same frame: a test holds them equal.
    ///
    /// Why a path of its own (seed 000's point, applied to delivery): through the general
    /// parser the frame became a 64-byte `Parsed` in memory, stored field by field and read back
    /// by each stage, and the verdict travelled through a `Step`; on the open-port benchmark
    /// that plumbing was about a third of the pipeline's instructions per packet.
    #[inline(always)]
    fn udp4<B: PacketBuf>(&mut self, port: u16, pkt: &mut B, now: Instant) -> Option<Verdict> {
        let local = self.tables.ports.get(port as usize)?;
        let frame = pkt.data();
        let h: &[u8; 42] = frame.first_chunk()?;
        // EtherType IPv4, version 4 with a 20-byte header, neither MF nor an offset, UDP: the
        // common parser's checks (the reserved flag is not looked at, as there).
        if wire::be16(h, 12) != 0x0800 || h[14] != 0x45 || wire::be16(h, 20) & 0x3fff != 0 || h[23] != IpProtocol::UDP.0
        {
            return None;
        }
        // The datagram within the frame, its end a frame offset (u16); RFC 768: 8 <= UDP length
        // <= what the datagram holds.
        let total = wire::be16(h, 16);
        let end = 14 + total as usize;
        let udp_len = wire::be16(h, 38) as usize;
        if frame.len() < end || end > u16::MAX as usize || udp_len < 8 || udp_len + 20 > total as usize {
            return None;
        }
        // From here the frame is the general path's common frame: its verdicts, in its order.
        if let Some(v) = link_layer_refusal_in(local, h.first_chunk()?) {
            return Some(v);
        }
        if !pkt.ip_checksum_ok(|| wire::checksum::verify(&h[14..34])) {
            return Some(Verdict::Drop(Outcome::Malformed));
        }
        let (src, dst) = (wire::ipv4_at(h, 26), wire::ipv4_at(h, 30));
        let (ttl, ports) = (h[22], (wire::be16(h, 34), wire::be16(h, 36)));
        // Link-layer padding is not part of the datagram (see `after_parse`).
        if pkt.len() > end {
            let _trimmed = pkt.trim(pkt.len() - end);
        }
        if !local.has_ipv4(dst) {
            return Some(Verdict::Drop(Outcome::NotLocal));
        }
        let t = &*self.tables;
        let Some(svc) = t.services.lookup_udp4(ports.1, dst) else {
            // RFC 1122 §4.1.3.1: a port nobody listens on. `icmp_error`'s decision from the
            // addresses in registers: the parse result is written only for an error sent.
            let no_service = Verdict::Drop(Outcome::NoService);
            let kind = icmp_error::ErrorKind::PortUnreachable;
            if t.icmp.build_first {
                let p = Parsed::untagged_udp4(src, dst, ttl, ports, total);
                return Some(self.icmp_error(pkt, &p, port, kind, no_service, now));
            }
            // (Read again rather than kept from above: one register less on the open path.)
            let group_frame = pkt.data().first().is_some_and(|b| b & 1 != 0);
            let rng = &mut self.rng;
            let decision = self
                .icmp
                .decide_udp4_port_unreachable(now, src, dst, group_frame, || xorshift(rng));
            return Some(match decision {
                icmp_error::Decision::Ineligible => no_service,
                icmp_error::Decision::Suppressed(l) => {
                    self.count_suppressed(IpVersion::V4, l);
                    Verdict::Drop(Outcome::IcmpSuppressed)
                }
                icmp_error::Decision::Send => self.udp4_port_unreachable(pkt, port, no_service),
            });
        };
        // `service_socket`'s two steps, written out again: through one shared helper taking the
        // fanout call as a closure LLVM inlined the pipeline differently, +51 instructions per
        // packet on open-sink and +28 on plain drop (callgrind, 8e1a69c).
        if let Some(s) = self.fanout.choose_fast(&t.services.services()[svc].group) {
            return Some(self.deliver(s));
        }
        let p = Parsed::untagged_udp4(src, dst, ttl, ports, total);
        Some(self.fan_out(svc, &p, pkt.rss_hash()))
    }

    /// [`Pipeline::udp4`]'s Port Unreachable, the limits having let it go: the parse result
    /// from the frame (the fast path's, read again so the open path keeps fewer values live),
    /// then the error built in place.
    #[cold]
    fn udp4_port_unreachable<B: PacketBuf>(&mut self, pkt: &mut B, port: u16, no_service: Verdict) -> Verdict {
        let Some(h) = pkt.data().first_chunk::<42>() else {
            return no_service;
        };
        let (src, dst) = (wire::ipv4_at(h, 26), wire::ipv4_at(h, 30));
        let (ttl, ports, total) = (h[22], (wire::be16(h, 34), wire::be16(h, 36)), wire::be16(h, 16));
        let p = Parsed::untagged_udp4(src, dst, ttl, ports, total);
        self.icmp_error_send(pkt, &p, port, icmp_error::ErrorKind::PortUnreachable, no_service)
    }

    /// The rest of [`Pipeline::process`] once a tunnel header was stripped: the inner packet
    /// goes through again (up to the recursion limit), and an answer goes back through the
    /// tunnel it came from.
    #[inline(never)]
    fn process_tunnelled<B: PacketBuf>(&mut self, port: u16, pkt: &mut B, now: Instant, first: usize) -> Verdict {
        let mut via = first;
        let mut depth = 1;
        loop {
            match self.process_once(port, pkt, now, depth) {
                Step::Done(v) => return self.answer_through(v, Some(via), pkt),
                Step::Decapsulated(t) => {
                    via = t;
                    depth += 1;
                }
            }
        }
    }

    /// An answer to a packet that came through a tunnel goes back through it (a sequence
    /// tunnel's numbers belong to its owning worker, so answers from RX lcores leave plain).
    fn answer_through<B: PacketBuf>(&mut self, v: Verdict, via: Option<usize>, pkt: &mut B) -> Verdict {
        let (Verdict::Transmit(o), Some(t)) = (v, via) else {
            return v;
        };
        let tunnels = &self.tables.tunnels;
        if tunnels[t].sequence {
            return v;
        }
        self.ident = self.ident.wrapping_add(1);
        match tunnel::encapsulate(pkt, tunnels, t, None, self.ident) {
            Ok(port) => {
                tunnels[t].counters.rx[self.fanout.slot].encap.inc();
                Verdict::TransmitOn { port, outcome: o }
            }
            Err(_) => {
                tunnels[t].counters.rx[self.fanout.slot].too_big.inc();
                v
            }
        }
    }

    /// One pass over a frame: a verdict, or "decapsulated, run me again".
    #[inline(always)]
    fn process_once<B: PacketBuf>(&mut self, port: u16, pkt: &mut B, now: Instant, depth: usize) -> Step {
        let Some(local) = self.tables.ports.get(port as usize) else {
            return Step::Done(Verdict::Drop(Outcome::Unhandled));
        };
        let mut parsed = Parsed::EMPTY;
        // The common frame (untagged or one 802.1Q tag, IPv4 without options or IPv6 without
        // extension headers, not a fragment) as received: read from fixed offsets; anything
        // else goes through the general parser below.
        let frame = pkt.data();
        if depth == 0
            && Parsed::parse_common_with(frame, &mut parsed, |header| {
                pkt.ip_checksum_ok(|| wire::checksum::verify(header))
            })
        {
            // The same frame slice the parser checked (at least 42 bytes): no second length
            // check, and the addresses compared in place.
            if let Some(v) = frame.first_chunk().and_then(|h| link_layer_refusal_in(local, h)) {
                return Step::Done(v);
            }
        } else {
            match Self::parse_general(local, pkt, &mut parsed, depth) {
                Ok(()) => {}
                Err(v) => return Step::Done(v),
            }
        }
        self.after_parse(port, pkt, &parsed, now, depth)
    }

    /// The general parser's part of [`Pipeline::process_once`]: the frame's Ethernet checks,
    /// ARP, then any IPv4 or IPv6 packet into `parsed`; `Err` is the verdict for a frame that
    /// goes no further.
    #[inline(always)]
    fn parse_general<B: PacketBuf>(
        local: &PortAddrs,
        pkt: &mut B,
        parsed: &mut Parsed,
        depth: usize,
    ) -> Result<(), Verdict> {
        let frame = match EthernetFrame::new_checked(pkt.data()) {
            Ok(f) => f,
            Err(wire::Error::Unsupported) => return Err(Verdict::Drop(Outcome::Unhandled)),
            Err(_) => return Err(Verdict::Drop(Outcome::Malformed)),
        };
        if let Some(v) = link_layer_refusal(local, frame.dst_addr(), frame.src_addr()) {
            return Err(v);
        }
        let l3 = frame.header_len();
        // The NIC checked the header it received, not one a decapsulation uncovered.
        let ip_checksum = if depth == 0 {
            pkt.ip_checksum()
        } else {
            NicChecksum::Unknown
        };
        match frame.ethertype() {
            EtherType::ARP if depth == 0 => Err(arp::answer(local, pkt.data_mut(), l3)),
            EtherType::IPV4 | EtherType::IPV6 => match Parsed::parse_ip_into(&frame, parsed, ip_checksum) {
                Ok(()) => Ok(()),
                Err(wire::Error::Unsupported) => Err(Verdict::Drop(Outcome::Unhandled)),
                Err(_) => Err(Verdict::Drop(Outcome::Malformed)),
            },
            _ => Err(Verdict::Drop(Outcome::Unhandled)),
        }
    }

    /// The rest of [`Pipeline::process_once`] once the packet is parsed: local delivery, the
    /// services, the ICMP errors.
    #[inline(always)]
    fn after_parse<B: PacketBuf>(
        &mut self,
        port: u16,
        pkt: &mut B,
        parsed: &Parsed,
        now: Instant,
        depth: usize,
    ) -> Step {
        let Some(local) = self.tables.ports.get(port as usize) else {
            return Step::Done(Verdict::Drop(Outcome::Unhandled));
        };
        // Link-layer padding past the IP datagram is not part of it: drop it so every later
        // stage (and every answer built in place) sees the datagram only.
        let end = parsed.ip_end as usize;
        if pkt.len() > end {
            let _trimmed = pkt.trim(pkt.len() - end);
        }
        if parsed.fragment.is_some() && is_local(local, parsed.dst) {
            // RFC 791 §3.2 / RFC 8200 §4.5: fragments are reassembled before anything else
            // looks at the datagram (service lookup, echo, GRE).
            return Step::Done(Verdict::Reassemble { l3: parsed.l3_offset });
        }
        if parsed.protocol == IpProtocol::GRE && parsed.fragment.is_none() && is_local(local, parsed.dst) {
            return self.decapsulate(pkt, parsed, depth);
        }
        let v = local_delivery(local, parsed, pkt);
        if v == Verdict::Drop(Outcome::Unhandled)
            && parsed.version == IpVersion::V4
            && is_local(local, parsed.dst)
            && !matches!(
                parsed.protocol,
                IpProtocol::ICMP | IpProtocol::UDP | IpProtocol::TCP | IpProtocol::GRE
            )
        {
            // RFC 1122 §3.2.2.1: a protocol the box does not deliver.
            return Step::Done(self.icmp_error(pkt, parsed, port, icmp_error::ErrorKind::ProtocolUnreachable, v, now));
        }
        if v != Verdict::Drop(Outcome::NoService) {
            return Step::Done(v);
        }
        let v = self.service_socket(parsed, || pkt.rss_hash());
        if v == Verdict::Drop(Outcome::NoService) && parsed.protocol == IpProtocol::UDP {
            // RFC 1122 §4.1.3.1: UDP to a port nobody listens on. (`no_service` spelled out, not
            // `v`: the compiler then knows it and does not assemble it per packet.)
            let no_service = Verdict::Drop(Outcome::NoService);
            return Step::Done(self.icmp_error(
                pkt,
                parsed,
                port,
                icmp_error::ErrorKind::PortUnreachable,
                no_service,
                now,
            ));
        }
        Step::Done(v)
    }

    /// Answers the packet with an ICMP error of `kind` if the rate limits allow (seed 000: every
    /// cheap check first, the packet built only when it will be sent); `otherwise` is the verdict
    /// when no error may be sent at all.
    #[inline(always)]
    pub fn icmp_error<B: PacketBuf>(
        &mut self,
        pkt: &mut B,
        p: &Parsed,
        port: u16,
        kind: icmp_error::ErrorKind,
        otherwise: Verdict,
        now: Instant,
    ) -> Verdict {
        if self.tables.icmp.build_first {
            return self.icmp_error_build_first(pkt, p, port, kind, otherwise, now);
        }
        let rng = &mut self.rng;
        // The decision is inline (under a flood it is the whole per-packet cost: seed 000's
        // point); counting a suppression is one increment; sending is a call.
        match self.icmp.decide(now, kind, p, pkt.data(), || xorshift(rng)) {
            icmp_error::Decision::Ineligible => otherwise,
            icmp_error::Decision::Suppressed(l) => {
                self.count_suppressed(p.version, l);
                Verdict::Drop(Outcome::IcmpSuppressed)
            }
            icmp_error::Decision::Send => self.icmp_error_send(pkt, p, port, kind, otherwise),
        }
    }

    /// The limits let the error of `kind` go: build it in place and count it.
    #[inline(never)]
    fn icmp_error_send<B: PacketBuf>(
        &mut self,
        pkt: &mut B,
        p: &Parsed,
        port: u16,
        kind: icmp_error::ErrorKind,
        otherwise: Verdict,
    ) -> Verdict {
        if let Err(v) = self.build_error(pkt, p, port, kind, otherwise) {
            return v;
        }
        self.count_sent(p, kind);
        Verdict::Transmit(Outcome::IcmpError)
    }

    /// Turns `pkt` into the error of `kind` about it, if it may be answered (its UDP checksum,
    /// see [`icmp_error::answerable`]); otherwise the verdict for it.
    fn build_error<B: PacketBuf>(
        &mut self,
        pkt: &mut B,
        p: &Parsed,
        port: u16,
        kind: icmp_error::ErrorKind,
        otherwise: Verdict,
    ) -> Result<(), Verdict> {
        // (A decapsulation cleared the NIC's verdict: it was about the outer packet.)
        if !icmp_error::answerable(kind, p, pkt.data(), pkt.l4_checksum()) {
            return Err(Verdict::Drop(Outcome::UdpBadChecksum));
        }
        let Some(local) = self.tables.ports.get(port as usize) else {
            return Err(otherwise);
        };
        let mac = local.mac;
        self.ident = self.ident.wrapping_add(1);
        if !icmp_error::build_in_place(pkt, p, mac, p.dst, kind, self.ident) {
            return Err(Verdict::Drop(Outcome::Malformed));
        }
        Ok(())
    }

    #[inline]
    fn count_sent(&self, p: &Parsed, kind: icmp_error::ErrorKind) {
        self.icmp_counters.sent[icmp_error::family_index(p.version)][kind.type_index()].inc();
    }

    #[inline]
    fn count_suppressed(&self, version: IpVersion, l: icmp_error::Limit) {
        self.icmp_counters.limited[icmp_error::family_index(version)][l.index()].inc();
    }

    /// `[icmp] build_first` (benchmark only): the order seed 000 fixed, the error built before the
    /// limiter is asked, so a suppressed error costs a whole build. Same counters as
    /// [`Pipeline::icmp_error`].
    #[cold]
    fn icmp_error_build_first<B: PacketBuf>(
        &mut self,
        pkt: &mut B,
        p: &Parsed,
        port: u16,
        kind: icmp_error::ErrorKind,
        otherwise: Verdict,
        now: Instant,
    ) -> Verdict {
        if !icmp_error::eligible(kind, p, pkt.data()) {
            return otherwise;
        }
        if let Err(v) = self.build_error(pkt, p, port, kind, otherwise) {
            return v;
        }
        let rng = &mut self.rng;
        match self.icmp.decide_limits(now, kind, p, || xorshift(rng)) {
            icmp_error::Decision::Ineligible => otherwise,
            icmp_error::Decision::Suppressed(l) => {
                self.count_suppressed(p.version, l);
                Verdict::Drop(Outcome::IcmpSuppressed)
            }
            icmp_error::Decision::Send => {
                self.count_sent(p, kind);
                Verdict::Transmit(Outcome::IcmpError)
            }
        }
    }

    /// A reassembly timed out: ICMP Time Exceeded code 1 about its first fragment, in `pkt`
    /// (RFC 792; RFC 8200 §4.5), through the same rate limits; `None` when none is sent.
    pub fn reassembly_timeout<B: PacketBuf>(&mut self, port: u16, pkt: &mut B, now: Instant) -> Option<Verdict> {
        let p = Parsed::parse(pkt.data(), &self.tables.hasher, None).ok()?;
        let v = self.icmp_error(
            pkt,
            &p,
            port,
            icmp_error::ErrorKind::ReassemblyTimeExceeded,
            Verdict::Drop(Outcome::ReassemblyTimeout),
            now,
        );
        matches!(v, Verdict::Transmit(_)).then_some(v)
    }

    /// GRE to a local address: strip it if a tunnel matches (see [`tunnel::decapsulate`]).
    fn decapsulate<B: PacketBuf>(&mut self, pkt: &mut B, p: &Parsed, depth: usize) -> Step {
        if !tunnel::may_nest(depth) {
            return Step::Done(Verdict::Drop(Outcome::GreRecursion));
        }
        let t = &self.tables.tunnels;
        let slot = self.fanout.slot;
        match tunnel::decapsulate(
            pkt,
            p.l3_offset as usize,
            p.l4_offset as usize,
            p.src,
            p.dst,
            t,
            &mut self.gre_seq,
        ) {
            tunnel::Decap::Inner { tunnel } => {
                t[tunnel].counters.rx[slot].decap.inc();
                // The NIC hashed and checked the outer headers: the inner flow (fanout here, a
                // tunnel choice on a worker) must hash in software, or every flow of a tunnel
                // hashes alike, and the inner UDP checksum must be checked in software.
                pkt.clear_rx_offload_flags();
                Step::Decapsulated(tunnel)
            }
            tunnel::Decap::Unknown => Step::Done(Verdict::Drop(Outcome::GreUnknownTunnel)),
            tunnel::Decap::BadChecksum => Step::Done(Verdict::Drop(Outcome::GreBadChecksum)),
            tunnel::Decap::SeqOld { tunnel } => {
                t[tunnel].counters.rx[slot].seq_dropped.inc();
                Step::Done(Verdict::Drop(Outcome::GreSeqDropped))
            }
            tunnel::Decap::Unsupported => Step::Done(Verdict::Drop(Outcome::Unhandled)),
            tunnel::Decap::Malformed => Step::Done(Verdict::Drop(Outcome::Malformed)),
        }
    }

    /// A UDP or TCP packet for a local address: its service's socket, or `no_service`.
    /// The service socket for a packet local delivery left to the services. Finding no service
    /// (a closed port: the flood case of seed 000) is a lookup inlined into the pipeline; the
    /// fanout to a socket is a call of its own, so the closed-port path carries none of its
    /// registers or code.
    #[inline(always)]
    fn service_socket(&mut self, p: &Parsed, nic_hash: impl FnOnce() -> Option<u32>) -> Verdict {
        let Some((_, dport)) = p.ports else {
            return Verdict::Drop(Outcome::NoService);
        };
        let Some(svc) = self.tables.services.lookup(p.protocol, dport, &p.dst) else {
            return Verdict::Drop(Outcome::NoService);
        };
        // One socket with room to spare (the common case): no decision to make, no call.
        if let Some(s) = self.fanout.choose_fast(&self.tables.services.services()[svc].group) {
            return self.deliver(s);
        }
        // The NIC's hash (a read of the mbuf's flags) only for a packet that has a service.
        self.fan_out(svc, p, nic_hash())
    }

    /// [`Verdict::Deliver`] to socket `s`, recorded for [`Pipeline::delivered_to`].
    #[inline(always)]
    fn deliver(&mut self, s: usize) -> Verdict {
        self.delivered_to = s as u32;
        Verdict::Deliver
    }

    #[inline(never)]
    fn fan_out(&mut self, svc: usize, p: &Parsed, nic_hash: Option<u32>) -> Verdict {
        let t = &*self.tables;
        match self.fanout.choose_quick(
            &t.services.services()[svc].group,
            &t.sockets,
            HashOnDemand::new(|| p.flow_hash(&t.hasher, nic_hash)),
        ) {
            Choice::Socket(s) => self.deliver(s),
            Choice::Full(s) => {
                t.sockets[s].counters.rx[self.fanout.slot].full.inc();
                Verdict::Drop(Outcome::SocketFull)
            }
            Choice::FlowLimited(_) => Verdict::Drop(Outcome::FlowLimited),
        }
    }
}

/// The next word of an lcore-local xorshift generator (the ICMP credit draws).
#[inline(always)]
fn xorshift(rng: &mut u64) -> u32 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    (*rng >> 32) as u32
}

/// Packets for the host itself: the services every host must offer (echo, neighbor discovery).
///
/// The IPv4 decisions (not ours; no service yet) are a few compares inlined into the pipeline;
/// building an answer and the IPv6 cases are calls, so the common path carries none of their
/// code.
#[inline(always)]
fn local_delivery<B: PacketBuf>(local: &PortAddrs, p: &Parsed, pkt: &mut B) -> Verdict {
    match p.dst {
        IpAddr::V4(dst) => {
            if !local.has_ipv4(dst) {
                return Verdict::Drop(Outcome::NotLocal);
            }
            if p.fragment.is_some() {
                return Verdict::Drop(Outcome::Unhandled);
            }
            match p.protocol {
                IpProtocol::UDP | IpProtocol::TCP => Verdict::Drop(Outcome::NoService),
                IpProtocol::ICMP => echo::answer_v4(local, p, pkt),
                _ => Verdict::Drop(Outcome::Unhandled),
            }
        }
        IpAddr::V6(dst) => local_delivery_v6(local, &dst, p, pkt),
    }
}

#[inline(never)]
fn local_delivery_v6<B: PacketBuf>(local: &PortAddrs, dst: &Ipv6Addr, p: &Parsed, pkt: &mut B) -> Verdict {
    let Some(me) = local.ipv6_local_for(dst) else {
        return Verdict::Drop(Outcome::NotLocal);
    };
    if matches!(p.protocol, IpProtocol::UDP | IpProtocol::TCP) && p.fragment.is_none() && *dst == me {
        return Verdict::Drop(Outcome::NoService);
    }
    if p.protocol != IpProtocol::ICMPV6 || p.fragment.is_some() {
        return Verdict::Drop(Outcome::Unhandled);
    }
    let Some(&ty) = pkt.data().get(p.l4_offset as usize) else {
        return Verdict::Drop(Outcome::Malformed);
    };
    match Icmpv6Message::from(ty) {
        Icmpv6Message::EchoRequest => echo::answer_v6(local, me, p, pkt),
        Icmpv6Message::NeighborSolicit => ndp::answer(local, p, pkt),
        Icmpv6Message::NeighborAdvert
        | Icmpv6Message::RouterSolicit
        | Icmpv6Message::RouterAdvert
        | Icmpv6Message::Redirect => Verdict::Drop(Outcome::NdpIgnored),
        _ => Verdict::Drop(Outcome::Unhandled),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::buf::HeapBuf;

    pub(crate) const MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
    pub(crate) const PEER: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);

    pub(crate) fn port() -> PortAddrs {
        PortAddrs {
            mac: MAC,
            ipv4: vec![Ipv4Addr::new(192, 0, 2, 1)],
            ipv6: vec!["2001:db8::1".parse().unwrap()],
        }
    }

    pub(crate) fn pipeline() -> Pipeline {
        Pipeline::for_ports(vec![port()])
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
        let mut zeros = frame(MAC, PEER, 0x0800, &[0; 20]);
        assert_eq!(p.process(0, &mut zeros, Instant(0)), Verdict::Drop(Outcome::Malformed));
        let mut lldp = frame(MAC, PEER, 0x88cc, &[0; 20]);
        assert_eq!(p.process(0, &mut lldp, Instant(0)), Verdict::Drop(Outcome::Unhandled));
        let mut unknown_port = frame(MAC, PEER, 0x0800, &[0; 20]);
        assert_eq!(
            p.process(7, &mut unknown_port, Instant(0)),
            Verdict::Drop(Outcome::Unhandled)
        );
    }

    proptest::proptest! {
        /// The fixed-offset path's in-place address check decides as the general one, for
        /// addresses drawn to hit our MAC, group addresses and the all-zero source often.
        #[test]
        fn in_place_link_layer_check_agrees_with_the_general_one(
            mac in proptest::array::uniform6(0u8..4),
            dst in proptest::array::uniform6(0u8..4),
            src in proptest::array::uniform6(0u8..4),
            dst_is_mac in proptest::bool::ANY,
            src_is_zero in proptest::bool::ANY,
        ) {
            let mut local = port();
            local.mac = EthernetAddress(mac);
            let dst = if dst_is_mac { mac } else { dst };
            let src = if src_is_zero { [0; 6] } else { src };
            let mut h = [0u8; 12];
            h[..6].copy_from_slice(&dst);
            h[6..].copy_from_slice(&src);
            proptest::prop_assert_eq!(
                link_layer_refusal_in(&local, &h),
                link_layer_refusal(&local, EthernetAddress(dst), EthernetAddress(src))
            );
        }
    }

    #[test]
    fn the_nics_ipv4_checksum_verdict_replaces_the_software_check() {
        use parse::tests::{udp_bytes, v4_frame};
        let them = Ipv4Addr::new(198, 51, 100, 7);
        let other = Ipv4Addr::new(203, 0, 113, 9);
        let good = v4_frame(them, other, IpProtocol::UDP, &[], 0, &udp_bytes(1, 7, b"x"));
        let mut wrong = good.clone();
        wrong[14 + 10] ^= 0xff;
        let run = |bytes: &[u8], c: NicChecksum| {
            let mut b = HeapBuf::new(bytes);
            b.set_ip_checksum(c);
            pipeline().process(0, &mut b, Instant(0))
        };
        assert_eq!(run(&good, NicChecksum::Unknown), Verdict::Drop(Outcome::NotLocal));
        assert_eq!(run(&wrong, NicChecksum::Unknown), Verdict::Drop(Outcome::Malformed));
        assert_eq!(
            run(&wrong, NicChecksum::Good),
            Verdict::Drop(Outcome::NotLocal),
            "the NIC's word is taken: no second check"
        );
        assert_eq!(run(&good, NicChecksum::Bad), Verdict::Drop(Outcome::Malformed));
    }

    #[test]
    fn local_and_not_local() {
        use parse::tests::{udp_bytes, v4_frame, v6_frame};
        let mut p = pipeline();
        let me = Ipv4Addr::new(192, 0, 2, 1);
        let them = Ipv4Addr::new(198, 51, 100, 7);
        let udp = udp_bytes(1, 7, b"x");
        let mut v = v4_frame(them, me, IpProtocol::UDP, &[], 0, &udp);
        let ip_len = v.len();
        v.extend_from_slice(&[0xaa; 13]);
        // Padding is trimmed before anything looks at the datagram: a closed port (port 7 here)
        // gets a Port Unreachable quoting exactly the datagram.
        let mut b = HeapBuf::new(&v);
        let mut q = pipeline();
        q.icmp = icmp_error::IcmpLimiter::new(
            &icmp_error::IcmpConfig {
                burst: 0,
                ..Default::default()
            },
            icmp_error::IcmpConfig {
                burst: 0,
                ..Default::default()
            }
            .global_bucket(Instant(0)),
            1,
        );
        assert_eq!(q.process(0, &mut b, Instant(0)), Verdict::Drop(Outcome::IcmpSuppressed));
        assert_eq!(b.len(), ip_len, "padding trimmed");
        let mut b = HeapBuf::new(&v);
        assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Transmit(Outcome::IcmpError));
        assert_eq!(
            b.len(),
            14 + 20 + 8 + (ip_len - 14),
            "the quote is the datagram without padding"
        );
        let mut b = HeapBuf::new(&v4_frame(me, them, IpProtocol::UDP, &[], 0, &udp));
        assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Drop(Outcome::NotLocal));
        let bcast = v4_frame(them, Ipv4Addr::BROADCAST, IpProtocol::UDP, &[], 0, &udp);
        assert_eq!(
            p.process(0, &mut HeapBuf::new(&bcast), Instant(0)),
            Verdict::Drop(Outcome::NotLocal)
        );

        let me6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let them6: Ipv6Addr = "2001:db8::7".parse().unwrap();
        for (dst, want) in [
            (me6, Outcome::IcmpError),
            (ALL_NODES, Outcome::Unhandled),
            (solicited_node(&me6), Outcome::Unhandled),
            (them6, Outcome::NotLocal),
            (solicited_node(&them6), Outcome::NotLocal),
            ("ff02::2".parse().unwrap(), Outcome::NotLocal),
        ] {
            let v = with_udp_checksum(v6_frame(them6, dst, IpProtocol::UDP, &[], 64, &udp));
            let got = p.process(0, &mut HeapBuf::new(&v), Instant(0));
            let want = if want == Outcome::IcmpError {
                Verdict::Transmit(want)
            } else {
                Verdict::Drop(want)
            };
            assert_eq!(got, want, "{dst}");
        }
    }

    /// Fills the UDP checksum of a frame the test helpers built with none.
    pub(crate) fn with_udp_checksum(mut v: Vec<u8>) -> Vec<u8> {
        let p = Parsed::parse(&v, &wire::Toeplitz::default(), None).unwrap();
        let mut u = wire::UdpPacket::new_checked(&mut v[p.l4_offset as usize..p.ip_end as usize]).unwrap();
        match (p.src, p.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => u.fill_checksum_v4(s, d),
            (IpAddr::V6(s), IpAddr::V6(d)) => u.fill_checksum_v6(&s, &d),
            _ => unreachable!(),
        }
        v
    }

    /// RFC 1122 §4.1.3.4: a UDP datagram with a wrong checksum is discarded, not answered with
    /// Port Unreachable (over IPv6 a missing checksum is wrong too, RFC 8200 §8.1), and the check
    /// comes after the limits: a flood they hold back costs no checksum.
    #[test]
    fn closed_port_errors_only_about_datagrams_with_a_right_checksum() {
        use parse::tests::{udp_bytes, v4_frame, v6_frame};
        let me = Ipv4Addr::new(192, 0, 2, 1);
        let them = Ipv4Addr::new(198, 51, 100, 7);
        let me6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let them6: Ipv6Addr = "2001:db8::7".parse().unwrap();
        let udp = udp_bytes(1, 7, b"payload");
        let corrupt = |mut v: Vec<u8>| {
            let last = v.len() - 1;
            v[last] ^= 0x40;
            v
        };
        let v4_none = v4_frame(them, me, IpProtocol::UDP, &[], 0, &udp);
        let v4_right = with_udp_checksum(v4_none.clone());
        let v6_none = v6_frame(them6, me6, IpProtocol::UDP, &[], 64, &udp);
        let v6_right = with_udp_checksum(v6_none.clone());
        for (name, frame, want) in [
            (
                "v4, checksum right",
                v4_right.clone(),
                Verdict::Transmit(Outcome::IcmpError),
            ),
            (
                "v4, no checksum (RFC 768)",
                v4_none,
                Verdict::Transmit(Outcome::IcmpError),
            ),
            (
                "v4, checksum wrong",
                corrupt(v4_right.clone()),
                Verdict::Drop(Outcome::UdpBadChecksum),
            ),
            (
                "v6, checksum right",
                v6_right.clone(),
                Verdict::Transmit(Outcome::IcmpError),
            ),
            ("v6, no checksum", v6_none, Verdict::Drop(Outcome::UdpBadChecksum)),
            (
                "v6, checksum wrong",
                corrupt(v6_right),
                Verdict::Drop(Outcome::UdpBadChecksum),
            ),
        ] {
            // A fresh pipeline each time: the per-destination burst is not what is tested.
            let mut p = pipeline();
            let mut b = HeapBuf::new(&frame);
            assert_eq!(p.process(0, &mut b, Instant(0)), want, "{name}");
            if want == Verdict::Drop(Outcome::UdpBadChecksum) {
                assert_eq!(b.data(), &frame[..], "{name}: nothing built");
            }
        }
        // With no budget left the limiter answers first: suppressed, whatever the checksum.
        let mut p = pipeline();
        let cfg = icmp_error::IcmpConfig {
            burst: 0,
            ..Default::default()
        };
        p.icmp.apply(&cfg, cfg.global_bucket(Instant(0)), 1);
        let mut b = HeapBuf::new(&corrupt(v4_right));
        assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Drop(Outcome::IcmpSuppressed));
    }

    /// The UDP checksum verdict of a NIC with the RX offload: "good" is taken (nothing summed),
    /// anything else is checked in software; an IPv6 zero checksum is wrong whatever it says.
    #[test]
    fn closed_port_checksum_check_takes_the_nics_good_verdict() {
        use crate::buf::NicChecksum;
        use parse::tests::{udp_bytes, v4_frame, v6_frame};
        let me = Ipv4Addr::new(192, 0, 2, 1);
        let them = Ipv4Addr::new(198, 51, 100, 7);
        let udp = udp_bytes(1, 7, b"payload");
        let right = with_udp_checksum(v4_frame(them, me, IpProtocol::UDP, &[], 0, &udp));
        let mut wrong = right.clone();
        let last = wrong.len() - 1;
        wrong[last] ^= 0x40;
        let v6_none = v6_frame(
            "2001:db8::7".parse().unwrap(),
            "2001:db8::1".parse().unwrap(),
            IpProtocol::UDP,
            &[],
            64,
            &udp,
        );
        for (name, frame, nic, want) in [
            (
                "wrong, NIC good",
                &wrong,
                NicChecksum::Good,
                Verdict::Transmit(Outcome::IcmpError),
            ),
            (
                "wrong, NIC bad",
                &wrong,
                NicChecksum::Bad,
                Verdict::Drop(Outcome::UdpBadChecksum),
            ),
            (
                "right, NIC bad",
                &right,
                NicChecksum::Bad,
                Verdict::Transmit(Outcome::IcmpError),
            ),
            (
                "v6 zero, NIC good",
                &v6_none,
                NicChecksum::Good,
                Verdict::Drop(Outcome::UdpBadChecksum),
            ),
        ] {
            let mut p = pipeline();
            let mut b = HeapBuf::new(frame);
            b.set_l4_checksum(nic);
            assert_eq!(p.process(0, &mut b, Instant(0)), want, "{name}");
        }
    }

    #[test]
    fn build_first_builds_even_what_the_limiter_then_suppresses() {
        use parse::tests::{udp_bytes, v4_frame};
        let v = v4_frame(
            Ipv4Addr::new(198, 51, 100, 7),
            Ipv4Addr::new(192, 0, 2, 1),
            IpProtocol::UDP,
            &[],
            0,
            &udp_bytes(1, 9, b"x"),
        );
        for (build_first, grew) in [(false, false), (true, true)] {
            let cfg = icmp_error::IcmpConfig {
                burst: 0,
                build_first,
                ..Default::default()
            };
            let mut p = pipeline();
            let mut t = (*p.tables).clone();
            t.icmp = cfg.clone();
            p.tables = Arc::new(t);
            p.icmp = icmp_error::IcmpLimiter::new(&cfg, cfg.global_bucket(Instant(0)), 1);
            let mut b = HeapBuf::new(&v);
            assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Drop(Outcome::IcmpSuppressed));
            assert_eq!(b.len() > v.len(), grew, "build_first = {build_first}");
        }
    }

    #[test]
    fn has_ipv4_with_none_one_and_several_addresses() {
        let (a, b, c) = (
            Ipv4Addr::new(192, 0, 2, 1),
            Ipv4Addr::new(10, 9, 0, 1),
            Ipv4Addr::new(198, 51, 100, 7),
        );
        let mut local = port();
        for (addrs, yes, no) in [
            (vec![], vec![], vec![a, b]),
            (vec![a], vec![a], vec![b, c]),
            (vec![a, b], vec![a, b], vec![c]),
            (vec![b, c, a], vec![a, b, c], vec![Ipv4Addr::UNSPECIFIED]),
        ] {
            local.ipv4 = addrs;
            assert!(yes.iter().all(|&x| local.has_ipv4(x)), "{:?}", local.ipv4);
            assert!(!no.iter().any(|&x| local.has_ipv4(x)), "{:?}", local.ipv4);
        }
    }

    #[test]
    fn ipv6_local_for() {
        let a = pipeline().tables.ports[0].clone();
        let me6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        assert_eq!(a.ipv6_local_for(&me6), Some(me6));
        assert_eq!(a.ipv6_local_for(&ALL_NODES), Some(me6));
        assert_eq!(a.ipv6_local_for(&solicited_node(&me6)), Some(me6));
        assert_eq!(a.ipv6_local_for(&"2001:db8::2".parse().unwrap()), None);
        let none = PortAddrs::default();
        assert_eq!(none.ipv6_local_for(&ALL_NODES), None);
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
                if len >= 14 && seed & 1 == 0 {
                    v[..6].copy_from_slice(&MAC.0);
                    v[6..12].copy_from_slice(&PEER.0);
                    v[12..14].copy_from_slice(&[0x08, 0x06]);
                    if len >= 22 && seed & 3 == 0 {
                        v[14..20].copy_from_slice(&[0, 1, 8, 0, 6, 4]);
                    }
                }
                let mut b = HeapBuf::new(&v);
                let _ = p.process(0, &mut b, Instant(0));
            }
        }
    }
}
