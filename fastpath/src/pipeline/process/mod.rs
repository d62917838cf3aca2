//! The orchestrator: one lcore's [`Pipeline`], which runs the stages on each packet in order.
//!
//! This file holds the struct, its construction and generation changes, its accessors and the
//! dispatch ([`Pipeline::process`]: the fast path, else parse and go on). The rest of
//! `impl Pipeline` is spread over files by concern, as smoltcp spreads its `Interface`:
//! - `udp4.rs`: the IPv4/UDP fast path; `udp6.rs`, `tcp.rs`: the IPv6/UDP and the TCP ones;
//! - `local.rs`: what is done with a parsed packet for us (reassembly, GRE, echo, NDP, the
//!   services and their sockets);
//! - `icmp.rs`: the ICMP errors sent about a packet, through the rate limits;
//! - `tunnel.rs`: GRE decapsulation, the inner packet's passes and answers through a tunnel.

#[cfg(test)]
mod answer_tests;
#[cfg(test)]
mod apply_tests;
#[cfg(test)]
mod fast_harness;
mod icmp;
mod local;
mod tcp;
#[cfg(test)]
mod tcp_tests;
mod tunnel;
mod udp4;
#[cfg(test)]
mod udp4_tests;
mod udp6;
#[cfg(test)]
mod udp6_tests;

use super::fanout::FanoutState;
use super::kernel::PuntMeter;
use super::parse::Parsed;
use super::tables::{PortAddrs, PortView, Tables};
use super::verdict::{Instant, Verdict};
use super::{arp, flow_limit, icmp_error, source, source_limit, tcp_reset, tcp_state};
use crate::buf::{NicChecksum, PacketBuf};
use crate::ident::Idents;
use crate::outcome::Outcome;
use crate::wire::{self, EtherType, EthernetAddress, EthernetFrame, Toeplitz};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// A fast path, by the frames it is for: the kind of traffic the RX engine's first loop is
/// compiled for in a burst (`RxEngine::burst`), the burst's *lead*. Under a flood the flood's
/// kind leads, so its packets take the tight loop the IPv4/UDP path has, not the decline and
/// the dispatch of the loop after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Lead {
    /// [`Pipeline::udp4`].
    Udp4 = Lead::UDP4,
    /// [`Pipeline::tcp4`].
    Tcp4 = Lead::TCP4,
    /// [`Pipeline::udp6`].
    Udp6 = Lead::UDP6,
    /// [`Pipeline::tcp6`].
    Tcp6 = Lead::TCP6,
}

impl Lead {
    /// [`Lead::Udp4`] as the const parameter of [`Pipeline::process_lead`].
    pub const UDP4: u8 = 0;
    /// [`Lead::Tcp4`], likewise.
    pub const TCP4: u8 = 1;
    /// [`Lead::Udp6`], likewise.
    pub const UDP6: u8 = 2;
    /// [`Lead::Tcp6`], likewise.
    pub const TCP6: u8 = 3;
    /// Every kind, by its number.
    pub const ALL: [Lead; 4] = [Lead::Udp4, Lead::Tcp4, Lead::Udp6, Lead::Tcp6];

    /// The fast path a frame's EtherType and next protocol point at (whether it takes the
    /// frame is that path's decision), from its first 24 bytes.
    #[inline(always)]
    pub fn of(frame: &[u8]) -> Option<Lead> {
        let h = frame.first_chunk::<24>()?;
        match (wire::be16(h, 12), h[20], h[23]) {
            (0x0800, _, 17) => Some(Lead::Udp4),
            (0x0800, _, 6) => Some(Lead::Tcp4),
            (0x86dd, 17, _) => Some(Lead::Udp6),
            (0x86dd, 6, _) => Some(Lead::Tcp6),
            _ => None,
        }
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
    if !dst.is_multicast() && dst != local.mac() {
        return Some(Verdict::Drop(Outcome::NotForUs));
    }
    if !src.is_unicast() {
        return Some(Verdict::Drop(Outcome::Malformed));
    }
    None
}

/// [`link_layer_refusal`] on a frame's first 12 bytes (destination, source), each address read
/// as one word: the fixed-offset form, fewer instructions than assembling both addresses first
/// (benches/NOTES.md, "The port's MAC as the word the destination check compares").
#[inline(always)]
fn link_layer_refusal_in(mac_word: u64, h: &[u8; 12]) -> Option<Verdict> {
    // Branches, each on the common case (to us, from a unicast source): as one branch-free
    // expression LLVM evaluated every term of both tests on every packet (benches/NOTES.md,
    // "Tests as branches on the common case").
    if dst_word(h) != mac_word {
        std::hint::cold_path();
        if h[0] & 1 == 0 {
            return Some(Verdict::Drop(Outcome::NotForUs));
        }
    }
    if !unicast_source(h) {
        std::hint::cold_path();
        return Some(Verdict::Drop(Outcome::Malformed));
    }
    None
}

/// [`link_layer_refusal_in`] for the fast paths, from the burst's [`PortView`]: a port the
/// tables do not have takes no frame (its MAC word matches none), and the fast paths decline
/// every frame on it, as when they looked the port up.
#[inline(always)]
fn link_layer_refusal_view(view: &PortView, h: &[u8; 12]) -> Option<Verdict> {
    if !view.known {
        return None;
    }
    link_layer_refusal_in(view.mac_word, h)
}

/// The fast paths' link-layer test on a frame's first 12 bytes: whether it is to our MAC from
/// a unicast source. A frame that is not goes to [`link_layer_refusal_in`], whose `None` (a
/// frame to a group address) the fast paths decline, leaving it to the general path (RFC 1122
/// §3.3.6 makes a unicast datagram in it martian, and a group's own rules are the general
/// path's). What follows `true` knows the frame is not a group frame without reading it again.
#[inline(always)]
fn link_layer_unicast_in(mac_word: u64, h: &[u8; 12]) -> bool {
    if dst_word(h) != mac_word {
        std::hint::cold_path();
        return false;
    }
    unicast_source(h)
}

/// A frame's destination address (bytes 0..6 of `h`) as the top 48 bits of a word, its first
/// byte (with the group bit, bit 16) the lowest of them on any machine, the low 16 bits clear:
/// [`PortAddrs::mac_word`]'s form.
#[inline(always)]
fn dst_word(h: &[u8; 12]) -> u64 {
    u64::from_le_bytes(*h.first_chunk::<8>().unwrap_or(&[0; 8])) << 16
}

/// Whether a frame's source address (bytes 6..12 of `h`) is one station: neither a group
/// address nor all zeros (RFC 1122 §3.3.6 / IEEE 802).
#[inline(always)]
fn unicast_source(h: &[u8; 12]) -> bool {
    // Bytes 2..8 of the little-endian word at 4.
    let src = u64::from_le_bytes(*h.last_chunk::<8>().unwrap_or(&[0; 8])) >> 16;
    even_non_zero(src)
}

/// The fast paths' bound on a datagram's end in `frame`: its length, but at most `u16::MAX`
/// (an end is a `u16` frame offset), so that `frame_end(frame) < end` is both tests. An mbuf's
/// data length is a `u16`: the `min` is free there, and one compare is left where LLVM kept
/// two (benches/NOTES.md, "Per-burst reads and the closed port's decision").
#[inline(always)]
fn frame_end(frame: &[u8]) -> usize {
    frame.len().min(u16::MAX as usize)
}

/// `x & 1 == 0 && x != 0` for `x` below 2⁶³, in one compare: `x − 1` flips the low bit of an
/// even `x` ≠ 0 (then `^ 1` gives `x − 2`, below `x`) and not of an odd one (`^ 1` gives `x`
/// back); 0 wraps to the top of the range. Two tests made LLVM set two flags and test them
/// (`sete`, `setae`, `test`) on every fast path.
#[inline(always)]
fn even_non_zero(x: u64) -> bool {
    (x.wrapping_sub(1) ^ 1) < x
}

/// Mixed into the ICMP seed for the reset limiter's table: its own key, no shared collisions.
/// Set apart from the ICMP key: the `[source_limit]` table's.
const SOURCE_SEED: u64 = 0x5eed_0f5e_ed50_c0de;
/// Set apart from the ICMP key: the TCP state table's (and its SYN budget's).
const TCP_STATE_SEED: u64 = 0x7c9_5a7e_0f1e_e7ab;
const RESET_SEED: u64 = 0x5bd1_e995_7f4a_7c15;

/// One lcore's pipeline: the current generation's shared tables plus the lcore's own mutable
/// state, so nothing is shared for writing on the per-packet path.
#[derive(Clone, Debug)]
pub struct Pipeline {
    pub(super) tables: Arc<Tables>,
    pub(super) fanout: FanoutState,
    /// Rate limits for the ICMP errors this lcore sends.
    pub(super) icmp: icmp_error::IcmpLimiter,
    /// This lcore's slot of the tables' ICMP counters (a detached set, counted by nobody, if
    /// the tables have no slot for it).
    pub(super) icmp_counters: Arc<icmp_error::IcmpLcoreCounters>,
    /// Rate limits for the TCP resets this lcore sends.
    pub(super) tcp_reset: tcp_reset::ResetLimiter,
    /// This lcore's slot of the tables' reset counters.
    pub(super) reset_counters: Arc<tcp_reset::ResetLcoreCounters>,
    /// This lcore's random numbers (ICMP credit draws).
    pub(super) rng: u64,
    /// Keys the per-destination ICMP table (unpredictable, per lcore).
    pub(super) icmp_seed: u64,
    /// Per tunnel: the last sequence number accepted on this lcore (RFC 2890 §2.2).
    pub(super) gre_seq: Vec<Option<u32>>,
    /// The IP identification of everything this lcore originates (kept across reloads).
    pub(super) idents: Idents,
    /// This lcore's use of the kernel path's punt budget (kept across reloads).
    pub(super) punt: PuntMeter,
    /// This lcore's use of the budget of ICMP errors forwarded to backends (kept across reloads).
    pub(super) to_backend: PuntMeter,
    /// The socket of the last [`Verdict::Deliver`].
    pub(super) delivered_to: u32,
    /// This lcore's table of sources and budgets, while `[source_limit]` is on (kept across
    /// reloads that keep its size).
    pub(super) sources: Option<source_limit::SourceTable>,
    /// This lcore's TCP state table, while a service asks for one (kept across reloads that
    /// keep its size).
    pub(super) tcp_state: Option<tcp_state::TcpState>,
}

impl Pipeline {
    /// This lcore's TCP state table, when its entries in use outgrow the caches: the burst's
    /// buckets are then prefetched before the packets are judged one by one.
    #[inline(always)]
    pub fn tcp_state_to_prefetch(&self) -> Option<&tcp_state::TcpState> {
        self.tcp_state.as_ref().filter(|t| t.outgrows_caches())
    }

    /// A pipeline over `tables` for the RX lcore in counter slot `slot`, its seeds drawn from
    /// the OS (a constant seed would make `fanout = "random"` the same sequence at every start).
    /// Only here is per-lcore state made from nothing; [`Pipeline::apply`] carries it on.
    pub fn new(tables: Arc<Tables>, slot: usize) -> Self {
        let fanout_seed = crate::seed::os_u64();
        // An unpredictable key for the per-destination tables, so nobody can aim collisions at it.
        let icmp_seed = crate::seed::os_u64();
        let mut fanout = FanoutState::new(tables.sockets.len(), slot, fanout_seed);
        fanout.flow_limit = tables.flow_limit.for_slot(slot).map(flow_limit::FlowLimit::new);
        let icmp = icmp_error::IcmpLimiter::new(&tables.icmp, icmp_global(&tables), icmp_seed);
        let tcp_reset = tcp_reset::ResetLimiter::new(&tables.tcp_reset, reset_global(&tables), icmp_seed ^ RESET_SEED);
        Pipeline {
            fanout,
            icmp,
            icmp_counters: tables.icmp_counters.rx.get(slot).cloned().unwrap_or_default(),
            tcp_reset,
            reset_counters: tables.tcp_reset_counters.rx.get(slot).cloned().unwrap_or_default(),
            rng: icmp_seed | 1,
            icmp_seed,
            gre_seq: vec![None; tables.tunnels.len()],
            idents: Idents::from_os(),
            punt: PuntMeter::default(),
            to_backend: PuntMeter::default(),
            delivered_to: 0,
            sources: new_source_table(&tables, icmp_seed),
            tcp_state: new_tcp_state(&tables, icmp_seed),
            tables,
        }
    }

    /// Adopts a new generation. Called by the owning lcore at a quiescent point (between
    /// bursts), so no packet ever sees a mix of two generations.
    ///
    /// Every field is named below, one step each: carried as it is, carried and reconfigured,
    /// or rebuilt from the new tables. The destructuring has no `..`, so a field added to
    /// [`Pipeline`] does not compile until its step is written here; `apply_keeps` in
    /// `process/apply_tests.rs` holds each carried component to surviving a reload. Nothing
    /// here draws from the OS.
    pub fn apply(&mut self, tables: Arc<Tables>) {
        debug_assert!(
            self.fanout.touched().is_empty(),
            "generations change between bursts only"
        );
        let old = std::mem::replace(&mut self.tables, tables);
        let Pipeline {
            tables,
            fanout,
            icmp,
            icmp_counters,
            tcp_reset,
            reset_counters,
            rng: _,
            icmp_seed,
            gre_seq,
            idents: _,
            punt: _,
            to_backend: _,
            delivered_to,
            sources,
            tcp_state,
        } = self;
        let icmp_seed = *icmp_seed;
        // Kept as they are: the ICMP credit draws (`rng`) and the tables' key (`icmp_seed`);
        // the IP identification (`idents`: a counter that restarted would repeat the IDs a
        // destination still reassembles, RFC 6864 §4.2); the punt and ICMP-forwarding meters.

        // Fanout: views resized to the new sockets, the random fanout going on from where it
        // was; the flow-limit table (and its history) kept unless its length changed.
        let slot = fanout.slot;
        let kept_flow_limit = match (fanout.flow_limit.take(), tables.flow_limit.for_slot(slot)) {
            (Some(t), Some(len)) if t.table_len() == len => Some(t),
            (_, len) => len.map(flow_limit::FlowLimit::new),
        };
        *fanout = FanoutState::new(tables.sockets.len(), slot, fanout.random_state());
        fanout.flow_limit = kept_flow_limit;

        // ICMP errors and TCP resets: the limiters keep their per-destination tables while
        // their size and rate do; the counters are this lcore's slot of the new tables'.
        icmp.apply(&tables.icmp, icmp_global(tables), icmp_seed);
        *icmp_counters = tables.icmp_counters.rx.get(slot).cloned().unwrap_or_default();
        tcp_reset.apply(&tables.tcp_reset, reset_global(tables), icmp_seed ^ RESET_SEED);
        *reset_counters = tables.tcp_reset_counters.rx.get(slot).cloned().unwrap_or_default();

        // GRE: a tunnel that stays (by name) keeps its receive sequence state.
        *gre_seq = tables
            .tunnels
            .iter()
            .map(|t| {
                let i = old.tunnels.iter().position(|o| o.name == t.name);
                i.and_then(|i| gre_seq.get(i).copied().flatten())
            })
            .collect();

        // Set by each `Verdict::Deliver` before it is read.
        *delivered_to = 0;

        // Source budgets: the table stays while its size does; a new one only when
        // `[source_limit]` changed it or was turned on (made here, never on a packet).
        *sources = match sources.take() {
            Some(t) if t.len() == source_limit::SourceTable::entries_for(tables.source_limit.entries) => Some(t),
            _ => new_source_table(tables, icmp_seed),
        };

        // TCP state: the table stays while its size does, taking the new timeouts; a service
        // tracked now that was not has its running connections learned again.
        let relearn = tables
            .tcp_state
            .tracked
            .iter()
            .any(|n| !old.tcp_state.tracked.contains(n));
        *tcp_state = match tcp_state.take() {
            Some(mut t) if tables.tcp_state.entries > 0 && t.fits(&tables.tcp_state) => {
                t.configure(&tables.tcp_state, relearn);
                Some(t)
            }
            _ => new_tcp_state(tables, icmp_seed),
        };
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

    /// The IP identification state of this lcore ([`crate::ident`]).
    #[inline]
    pub fn idents(&mut self) -> &mut Idents {
        &mut self.idents
    }

    /// The tables in use and the identification state, borrowed together.
    #[inline]
    pub fn tables_and_idents(&mut self) -> (&Arc<Tables>, &mut Idents) {
        (&self.tables, &mut self.idents)
    }

    /// This lcore's ICMP error counters (what the trace reads before and after a packet).
    pub fn icmp_counters(&self) -> &icmp_error::IcmpLcoreCounters {
        &self.icmp_counters
    }

    /// This lcore's TCP reset counters (likewise).
    pub fn reset_counters(&self) -> &tcp_reset::ResetLcoreCounters {
        &self.reset_counters
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

    /// Calls `f` with the tables, each socket packets were staged for in this burst and how
    /// many; `f` enqueues them and returns the socket's length as its producer then sees it
    /// (and whether exactly), carried as the next burst's snapshot
    /// ([`crate::pipeline::fanout::FanoutState::carry`]) where the socket allows it.
    #[inline(always)]
    pub fn each_staged(&mut self, mut f: impl FnMut(&Tables, usize, usize) -> Option<(usize, bool)>) {
        let tables = &*self.tables;
        for i in 0..self.fanout.touched().len() {
            let s = self.fanout.touched()[i];
            if let Some((len, exact)) = f(tables, s, self.fanout.staged(s)) {
                self.fanout.carry(s, len, exact);
            }
        }
    }

    /// How many sockets packets were staged for in this burst.
    #[inline]
    pub fn touched(&self) -> usize {
        self.fanout.touched().len()
    }

    /// The first socket packets were staged for in this burst, if any.
    #[inline]
    pub fn first_touched(&self) -> Option<usize> {
        self.fanout.touched().first().copied()
    }

    /// Calls `f` with the tables and each socket packets were staged for in this burst.
    #[inline(always)]
    pub fn each_touched(&self, mut f: impl FnMut(&Tables, usize)) {
        for &s in self.fanout.touched() {
            f(&self.tables, s);
        }
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

    /// Runs every stage on one packet received on `port`: [`Pipeline::process_udp4`], else
    /// [`Pipeline::process_rest`]. The RX engine calls the two from two loops (IPv4/UDP
    /// first, the rest of the burst after, `RxEngine::burst`), so that neither path pays for
    /// the other's registers and code.
    #[inline]
    pub fn process<B: PacketBuf>(&mut self, port: u16, pkt: &mut B, now: Instant) -> Verdict {
        let view = self.port_view(port);
        if let Some(v) = self.udp4(&view, port, pkt, now) {
            return v;
        }
        self.process_rest(&view, port, pkt, now, Some(Lead::Udp4))
    }

    /// The IPv4/UDP fast path ([`Pipeline::udp4`]: untagged, no options, not a fragment): its
    /// verdict, or `None` with nothing read but the frame's first bytes and nothing changed.
    /// Never a [`Verdict::Reassemble`].
    #[inline(always)]
    pub fn process_udp4<B: PacketBuf>(&mut self, port: u16, pkt: &mut B, now: Instant) -> Option<Verdict> {
        let view = self.port_view(port);
        self.udp4(&view, port, pkt, now)
    }

    /// The fast path of kind `L` (a [`Lead`] as `u8`, so that each caller's loop is compiled
    /// for one path alone): its verdict, or `None` with nothing changed, as
    /// [`Pipeline::process_udp4`]. Never a [`Verdict::Reassemble`].
    #[inline(always)]
    pub fn process_lead<const L: u8, B: PacketBuf>(
        &mut self,
        view: &PortView,
        port: u16,
        pkt: &mut B,
        now: Instant,
    ) -> Option<Verdict> {
        match L {
            Lead::UDP4 => self.udp4(view, port, pkt, now),
            Lead::TCP4 => self.tcp4(view, port, pkt, now),
            Lead::UDP6 => self.udp6(view, port, pkt, now),
            _ => self.tcp6(view, port, pkt, now),
        }
    }

    /// The source rule of [`source::v4_to_local`] over `port`'s list of addresses: the fast
    /// paths' [`source::v4_to_local_view`] for a port without exactly one IPv4 address.
    #[cold]
    #[inline(never)]
    fn v4_to_local_listed(&self, port: u16, dst: Ipv4Addr, src: Ipv4Addr) -> Option<Outcome> {
        match self.tables.ports.get(port as usize) {
            Some(local) => source::v4_to_local(local, dst, src, || false),
            None => Some(Outcome::NotLocal),
        }
    }

    /// The port-wide prefix filters' verdict (`[filter]`, then the port's own:
    /// [`crate::pipeline::filter`]) on an IPv4 source arriving on `port`, counted: `Filtered`,
    /// or `None` to go on. Asked only where one is configured.
    #[inline(never)]
    fn filter_v4(&self, port: u16, src: Ipv4Addr) -> Option<Outcome> {
        for f in self.tables.filters.of_port(port) {
            if let Some(l) = f.refuses_v4(src) {
                f.count(self.fanout.slot, l);
                return Some(Outcome::Filtered);
            }
        }
        None
    }

    /// [`Pipeline::filter_v4`] for IPv6.
    #[inline(never)]
    fn filter_v6(&self, port: u16, src: &Ipv6Addr) -> Option<Outcome> {
        for f in self.tables.filters.of_port(port) {
            if let Some(l) = f.refuses_v6(src) {
                f.count(self.fanout.slot, l);
                return Some(Outcome::Filtered);
            }
        }
        None
    }

    /// Service `svc`'s own prefix filter on `src`, counted. Asked only where some service has
    /// one.
    #[inline(never)]
    fn service_filter(&self, svc: usize, src: std::net::IpAddr) -> Option<Outcome> {
        let f = self.tables.filters.service(svc)?;
        let l = f.refuses(src)?;
        f.count(self.fanout.slot, l);
        Some(Outcome::Filtered)
    }

    /// The TCP state table's decision on segment `s` of a tracked service: `TcpOutOfState` or
    /// `None` to go on.
    #[inline(never)]
    fn tcp_state(&mut self, s: &tcp_state::Segment, now: Instant) -> Option<Outcome> {
        let table = self.tcp_state.as_mut()?;
        let detached;
        let c = match self.tables.tcp_state_counters.rx.get(self.fanout.slot) {
            Some(c) => c,
            None => {
                detached = tcp_state::TcpStateLcoreCounters::default();
                &detached
            }
        };
        table.judge(&self.tables.tcp_state, s, now, c).err()?;
        Some(Outcome::TcpOutOfState)
    }

    /// [`Pipeline::tcp_state`] for a fast path's untagged frame (IPv6 if `v6`), read from its
    /// fixed offsets.
    #[inline(never)]
    fn tcp_state_frame(&mut self, frame: &[u8], v6: bool, now: Instant) -> Option<Outcome> {
        let s = if v6 {
            let h: &[u8; 74] = frame.first_chunk()?;
            tcp_state::Segment {
                client: std::net::IpAddr::V6(crate::wire::ipv6_at(h, 22)),
                cport: crate::wire::be16(h, 54),
                service: std::net::IpAddr::V6(crate::wire::ipv6_at(h, 38)),
                sport: crate::wire::be16(h, 56),
                flags: crate::wire::TcpFlags(h[67]),
                seq: u32::from_be_bytes([h[58], h[59], h[60], h[61]]),
            }
        } else {
            let h: &[u8; 54] = frame.first_chunk()?;
            tcp_state::Segment {
                client: std::net::IpAddr::V4(crate::wire::ipv4_at(h, 26)),
                cport: crate::wire::be16(h, 34),
                service: std::net::IpAddr::V4(crate::wire::ipv4_at(h, 30)),
                sport: crate::wire::be16(h, 36),
                flags: crate::wire::TcpFlags(h[47]),
                seq: u32::from_be_bytes([h[38], h[39], h[40], h[41]]),
            }
        };
        self.tcp_state(&s, now)
    }

    /// [`Pipeline::tcp_state`] for a parsed TCP segment of `frame`.
    #[inline(never)]
    fn tcp_state_parsed(&mut self, p: &Parsed, frame: &[u8], now: Instant) -> Option<Outcome> {
        let (cport, sport) = p.ports?;
        let l4 = p.l4_offset as usize;
        let seq = frame.get(l4 + 4..l4 + 8)?;
        let s = tcp_state::Segment {
            client: p.src,
            cport,
            service: p.dst,
            sport,
            flags: p.tcp_flags.unwrap_or(crate::wire::TcpFlags(0)),
            seq: u32::from_be_bytes([seq[0], seq[1], seq[2], seq[3]]),
        };
        self.tcp_state(&s, now)
    }

    /// The end of a poll: the TCP state table's sweep (a few buckets, for its gauges).
    pub fn poll_done(&mut self, now: Instant) {
        if let Some(t) = self.tcp_state.as_mut() {
            if let Some(c) = self.tables.tcp_state_counters.rx.get(self.fanout.slot) {
                t.sweep(now, 4, c);
            }
        }
    }

    /// `[source_limit]` for a packet of service `svc` from `src` at `now`: `SourceLimited`
    /// (counted) or `None` to go on. Asked only where the budgets apply to the service.
    #[inline(never)]
    fn source_limit(&mut self, src: std::net::IpAddr, now: Instant) -> Option<Outcome> {
        let table = self.sources.as_mut()?;
        let r = table.admit(&self.tables.source_limit, src, now).err()?;
        if let Some(c) = self.tables.source_limit_counters.rx.get(self.fanout.slot) {
            c[r as usize].inc();
        }
        Some(Outcome::SourceLimited)
    }

    /// [`Pipeline::source_limit`] for a fast path's untagged frame (IPv6 if `v6`).
    #[inline(never)]
    fn source_limit_frame(&mut self, frame: &[u8], v6: bool, now: Instant) -> Option<Outcome> {
        let src = if v6 {
            std::net::IpAddr::V6(crate::wire::ipv6_at(frame.get(..38)?, 22))
        } else {
            std::net::IpAddr::V4(crate::wire::ipv4_at(frame.get(..30)?, 26))
        };
        self.source_limit(src, now)
    }

    /// [`Pipeline::service_filter`] for a fast path's untagged frame, its source read from
    /// the frame (IPv6 if `v6`), so the fast path keeps no value live for it.
    #[inline(never)]
    fn service_filter_frame(&self, svc: usize, frame: &[u8], v6: bool) -> Option<Outcome> {
        let src = if v6 {
            std::net::IpAddr::V6(crate::wire::ipv6_at(frame.get(..38)?, 22))
        } else {
            std::net::IpAddr::V4(crate::wire::ipv4_at(frame.get(..30)?, 26))
        };
        self.service_filter(svc, src)
    }

    /// [`Pipeline::v4_to_local_listed`] for IPv6 ([`source::v6_to_local`]).
    #[cold]
    #[inline(never)]
    fn v6_to_local_listed(&self, port: u16, dst: &Ipv6Addr, src: &Ipv6Addr) -> Option<Outcome> {
        match self.tables.ports.get(port as usize) {
            Some(local) => source::v6_to_local(local, dst, src, || false),
            None => Some(Outcome::NotLocal),
        }
    }

    /// What the fast paths read of `port` on every packet ([`PortView`]), for a caller to take
    /// once a burst and pass to [`Pipeline::process_lead`] and [`Pipeline::process_rest`].
    #[inline]
    pub fn port_view(&self, port: u16) -> PortView {
        self.tables.port_view(port)
    }

    /// What the burst's lead fast path declines ([`Lead`]): the fast path the frame's
    /// EtherType and next protocol point at ([`Lead::of`]) unless it is `tried` (it declined
    /// the frame already), else, or if that declines too, [`Pipeline::process_general`], which
    /// decides as the fast paths do.
    ///
    /// TCP over IPv4 in `udp4` itself (one path for both protocols) ran a SYN flood in fewer
    /// instructions than here but cost the IPv4/UDP paths more (benches/NOTES.md, "The IPv6 and
    /// TCP paths, step by step").
    #[inline(always)]
    pub fn process_rest<B: PacketBuf>(
        &mut self,
        view: &PortView,
        port: u16,
        pkt: &mut B,
        now: Instant,
        tried: Option<Lead>,
    ) -> Verdict {
        // IPv4/UDP too: behind another lead (`RxEngine::burst`) the first loop did not try it.
        // The path that declined the frame is not asked again (its checks again on every
        // fragment of a flood).
        let fast = match Lead::of(pkt.data()) {
            k if k == tried => None,
            Some(Lead::Udp4) => self.udp4(view, port, pkt, now),
            Some(Lead::Tcp4) => self.tcp4(view, port, pkt, now),
            Some(Lead::Udp6) => self.udp6(view, port, pkt, now),
            Some(Lead::Tcp6) => self.tcp6(view, port, pkt, now),
            None => None,
        };
        match fast {
            Some(v) => v,
            None => self.process_general(port, pkt, now),
        }
    }

    /// [`Pipeline::process`] without its fast paths ([`Pipeline::udp4`], [`Pipeline::tcp4`],
    /// [`Pipeline::udp6`], [`Pipeline::tcp6`]): every frame through the parsers and the stages
    /// in order. The fast paths must decide as this does; tests hold them to the same verdicts,
    /// packets and state.
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
            if let Some(v) = frame
                .first_chunk()
                .and_then(|h| link_layer_refusal_in(local.mac_word, h))
            {
                return Step::Done(v);
            }
        } else {
            match Self::parse_general(local, pkt, &mut parsed, depth) {
                Ok(()) => {}
                Err(Verdict::Drop(Outcome::ArpIgnored)) if local.kernel && depth == 0 => {
                    // An ARP reply may answer the kernel's own request (`pipeline/kernel.rs`).
                    let v = self.punt_arp_reply(port, pkt, now);
                    return Step::Done(v.unwrap_or(Verdict::Drop(Outcome::ArpIgnored)));
                }
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
            EtherType::ARP if depth == 0 => Err(arp::answer(local, pkt, l3)),
            EtherType::IPV4 | EtherType::IPV6 => match Parsed::parse_ip_into(&frame, parsed, ip_checksum) {
                Ok(()) => Ok(()),
                Err(wire::Error::Unsupported) => Err(Verdict::Drop(Outcome::Unhandled)),
                Err(_) => Err(Verdict::Drop(Outcome::Malformed)),
            },
            _ => Err(Verdict::Drop(Outcome::Unhandled)),
        }
    }
}

/// The ICMP errors' global bucket of `tables` (a fresh one where the tables have none).
fn icmp_global(tables: &Tables) -> Arc<icmp_error::GlobalBucket> {
    (tables.icmp_global.clone()).unwrap_or_else(|| tables.icmp.global_bucket(Instant(0)))
}

/// The TCP resets' global bucket of `tables`, likewise.
fn reset_global(tables: &Tables) -> Arc<icmp_error::GlobalBucket> {
    (tables.tcp_reset_global.clone()).unwrap_or_else(|| tables.tcp_reset.global_bucket(Instant(0)))
}

/// An lcore's `[source_limit]` table for `tables`, if it is on, keyed from its `icmp_seed`.
fn new_source_table(tables: &Tables, icmp_seed: u64) -> Option<source_limit::SourceTable> {
    let cfg = &tables.source_limit;
    cfg.enabled
        .then(|| source_limit::SourceTable::new(cfg.entries, icmp_seed ^ SOURCE_SEED))
}

/// An lcore's TCP state table for `tables`, if a service is tracked.
fn new_tcp_state(tables: &Tables, icmp_seed: u64) -> Option<tcp_state::TcpState> {
    let cfg = &tables.tcp_state;
    (cfg.entries > 0).then(|| tcp_state::TcpState::new(cfg, icmp_seed ^ TCP_STATE_SEED))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::HeapBuf;
    use crate::pipeline::parse;
    use crate::pipeline::tests::{pipeline, port, MAC, PEER};
    use crate::wire::IpProtocol;
    use std::net::Ipv4Addr;

    fn frame(dst: EthernetAddress, src: EthernetAddress, ty: u16, payload: &[u8]) -> HeapBuf {
        let mut v = vec![0u8; 14];
        wire::ethernet::emit_header(&mut v, dst, src, ty.into());
        v.extend_from_slice(payload);
        HeapBuf::new(&v)
    }

    /// `unicast_source`'s one compare is the two tests it replaced, for every 48-bit address
    /// shape that matters (0, the group bit, the ends of the range) and random ones.
    #[test]
    fn even_non_zero_is_the_two_tests() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let edges = [
            0,
            1,
            2,
            3,
            4,
            (1 << 48) - 1,
            (1 << 48) - 2,
            1 << 47,
            (1 << 47) + 1,
            (1 << 63) - 1,
            (1 << 63) - 2,
        ];
        let random = (0..100_000).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x >> 16
        });
        for v in edges.into_iter().chain(random) {
            assert_eq!(even_non_zero(v), v & 1 == 0 && v != 0, "{v:#x}");
        }
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
        /// The fixed-offset paths' in-place address checks decide as the general one, for
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
            local.set_mac(EthernetAddress(mac));
            let dst = if dst_is_mac { mac } else { dst };
            let src = if src_is_zero { [0; 6] } else { src };
            let mut h = [0u8; 12];
            h[..6].copy_from_slice(&dst);
            h[6..].copy_from_slice(&src);
            let general = link_layer_refusal(&local, EthernetAddress(dst), EthernetAddress(src));
            proptest::prop_assert_eq!(link_layer_refusal_in(local.mac_word, &h), general);
            // The fast paths' test: taken only if to our MAC and the general check takes it;
            // otherwise `link_layer_refusal_in` decides, its `None` a group destination.
            let unicast = link_layer_unicast_in(local.mac_word, &h);
            proptest::prop_assert_eq!(unicast, dst == mac && general.is_none());
            if !unicast && general.is_none() {
                proptest::prop_assert!(EthernetAddress(dst).is_multicast());
            }
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
