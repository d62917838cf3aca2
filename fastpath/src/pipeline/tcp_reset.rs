//! TCP resets for segments to a local port with no service (RFC 9293 §3.10.7.1), rate limited
//! like the ICMP errors and with their own budget and counters.
//!
//! A host answers a segment for a closed port with a reset, so that the peer's connect fails at
//! once (`ECONNREFUSED`) instead of after its SYN retries. The answer, by RFC 9293 §3.10.7.1
//! ("If the state is CLOSED"):
//! - an incoming reset is never answered;
//! - if the segment has ACK: `<SEQ=SEG.ACK><CTL=RST>`;
//! - otherwise: `<SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>`, SEG.LEN counting SYN and FIN.
//!
//! Like an ICMP error, a reset is an answer an attacker can aim at a third party by spoofing
//! the source: the limits are decided before anything is built or summed (as ICMP errors):
//! (a) a peek at the global budget, (b) the per-destination bucket, (c) the global credit
//! (the same lock-free [`GlobalBucket`] and per-lcore [`PeerTable`] as the ICMP limiter, their
//! own instances). The segment's checksum is verified only once the limits allowed a reset; a
//! wrong one gives the destination its credit back (the global credit stays spent, so a flood of
//! wrong checksums costs at most the global rate in checksums). FreeBSD limits these resets the
//! same way (`net.inet.icmp.icmplim` covers "closed port RST response", 200 a second by
//! default). Sources were validated before (`pipeline/source.rs`): no reset goes to a martian,
//! our own address, or for a group frame.
//!
//! The reset is built in place from the segment: Ethernet header (VLAN tags kept) back to the
//! sender, a fresh option-less IP header, a 20-byte TCP header with no options and no data.

use super::icmp_error::limit::{GlobalBucket, GlobalView, PeerRate, PeerTable};
use super::icmp_error::ExemptSet;
use super::icmp_error::{family_index, Limit};
use super::parse::{IpVersion, Parsed};
use super::verdict::Instant;
use crate::buf::{NicChecksum, PacketBuf};
use crate::stats::Counter;
use crate::wire::{self, ethernet, ipv4, ipv6, tcp, EtherType, EthernetAddress, IpProtocol, TcpFlags, TcpPacket};
use crate::wire::{Ipv4Repr, Ipv6Repr};
use std::net::IpAddr;
use std::sync::Arc;

/// TTL / hop limit of the resets.
pub const HOP_LIMIT: u8 = 64;

/// The `[tcp_reset]` settings (plain data; the config layer parses and validates them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpResetConfig {
    /// Whether resets are sent at all (off: a segment for a closed port is dropped, `no_service`).
    pub enabled: bool,
    /// Global budget: resets a second.
    pub msgs_per_sec: u32,
    /// Global budget: most resets at once.
    pub burst: u32,
    /// Per destination: one reset per this many milliseconds; 0: no per-destination limit.
    pub peer_interval_ms: u32,
    /// Per destination: most resets at once.
    pub peer_burst: u32,
    /// Per-destination table slots per RX lcore (a power of two).
    pub peer_table_size: usize,
    /// Sources that skip every limit (an operator's own scanner), as `[icmp] exempt`. With
    /// none, a SYN flood's segments cost what they did: the global refusal is remembered; with
    /// some, each refusal is asked of the bucket so an exempt source can be seen.
    pub exempt: ExemptSet,
}

impl Default for TcpResetConfig {
    /// FreeBSD's global limit (200 a second), a burst like the ICMP one, and a per-destination
    /// limit loose enough for a client retrying a closed port (10 a second, 10 at once) and tight
    /// enough that one spoofed victim gets little.
    fn default() -> Self {
        TcpResetConfig {
            enabled: true,
            msgs_per_sec: 200,
            burst: 50,
            peer_interval_ms: 100,
            peer_burst: 10,
            peer_table_size: 4096,
            exempt: ExemptSet::default(),
        }
    }
}

impl TcpResetConfig {
    /// A new global bucket for these settings, full, its clock starting at `now`.
    pub fn global_bucket(&self, now: Instant) -> Arc<GlobalBucket> {
        Arc::new(GlobalBucket::new(self.msgs_per_sec, self.burst, now))
    }

    fn peer_rate(&self) -> PeerRate {
        PeerRate::new(self.peer_interval_ms as u64 * 1_000_000, self.peer_burst)
    }
}

/// One RX lcore's reset counters.
#[derive(Debug, Default)]
pub struct ResetLcoreCounters {
    /// Resets sent, by family.
    pub sent: [Counter; 2],
    /// Resets held back, by family and [`Limit::index`].
    pub limited: [[Counter; 2]; 2],
}

impl ResetLcoreCounters {
    /// Counts a reset of `family` held back by `limit`, out of line: the per-destination limit's
    /// count, which the fast paths keep apart from the global one's (their inline counts, at a
    /// fixed place, are what a SYN flood's segments cost).
    #[cold]
    #[inline(never)]
    pub fn limited_cold(&self, family: usize, limit: Limit) {
        self.limited[family][limit.index()].inc();
    }
}

/// Reset counters of every RX lcore, one slot each; kept across reloads.
#[derive(Debug, Default)]
pub struct ResetCounters {
    /// By RX lcore slot.
    pub rx: Box<[Arc<ResetLcoreCounters>]>,
}

impl ResetCounters {
    /// Zeroed counters for `rx` RX lcores.
    pub fn new(rx: usize) -> Self {
        ResetCounters {
            rx: (0..rx).map(|_| Arc::new(ResetLcoreCounters::default())).collect(),
        }
    }
}

/// What to do about a segment for a closed port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum ResetDecision {
    /// No reset may be sent about it (resets off, or it is a reset itself).
    Ineligible,
    /// Held back by a limit.
    Suppressed(Limit),
    /// Send one: the budget is spent.
    Send,
}

/// The limiter's view of the global bucket: remembering refusals unless sources are exempt.
fn view(cfg: &TcpResetConfig, global: Arc<GlobalBucket>) -> GlobalView {
    if cfg.exempt.is_empty() {
        GlobalView::new(global)
    } else {
        GlobalView::forgetful(global)
    }
}

/// One RX lcore's reset limiter: its own per-destination table and a handle on the global
/// bucket the lcores share.
#[derive(Clone, Debug)]
pub struct ResetLimiter {
    enabled: bool,
    exempt: ExemptSet,
    global: GlobalView,
    peers: PeerTable,
    rate: PeerRate,
    /// The per-destination slot the last [`ResetDecision::Send`] took credit from.
    granted: usize,
}

impl ResetLimiter {
    /// A limiter with `cfg`'s settings (validated), sharing `global`, its table keyed by `seed`
    /// (unpredictable, per lcore).
    pub fn new(cfg: &TcpResetConfig, global: Arc<GlobalBucket>, seed: u64) -> Self {
        ResetLimiter {
            enabled: cfg.enabled,
            exempt: cfg.exempt.clone(),
            global: view(cfg, global),
            peers: PeerTable::new(cfg.peer_table_size, seed),
            rate: cfg.peer_rate(),
            granted: usize::MAX,
        }
    }

    /// Adopts a new generation: the table (and what it remembers) is kept unless its size or
    /// rate changed.
    pub fn apply(&mut self, cfg: &TcpResetConfig, global: Arc<GlobalBucket>, seed: u64) {
        let size = cfg
            .peer_table_size
            .clamp(1, super::icmp_error::limit::MAX_PEER_TABLE_SIZE)
            .next_power_of_two();
        if self.peers.size() != size || self.rate != cfg.peer_rate() {
            self.peers = PeerTable::new(cfg.peer_table_size, seed);
        }
        self.enabled = cfg.enabled;
        self.exempt = cfg.exempt.clone();
        self.global = view(cfg, global);
        self.rate = cfg.peer_rate();
        self.granted = usize::MAX;
    }

    /// The global bucket this limiter draws on.
    pub fn global(&self) -> &Arc<GlobalBucket> {
        self.global.bucket()
    }

    /// Whether a reset may be sent at `now` to `src` about a segment with `flags`. `draw` is a
    /// fresh word of the lcore's generator (0 to 2 global credits are taken, as for ICMP).
    #[inline]
    pub fn decide(&mut self, now: Instant, src: &IpAddr, flags: TcpFlags, draw: impl FnOnce() -> u32) -> ResetDecision {
        self.decide_with(now, flags, || *src, draw)
    }

    /// [`ResetLimiter::decide`] with the source made only once the global budget has credit:
    /// under a flood the budget is spent and the decision is its peek, inline, with the address
    /// still in registers (the TCP fast paths); the per-destination bucket is a call.
    #[inline(always)]
    pub fn decide_with(
        &mut self,
        now: Instant,
        flags: TcpFlags,
        src: impl FnOnce() -> IpAddr,
        draw: impl FnOnce() -> u32,
    ) -> ResetDecision {
        // A reset is never answered; then the remembered deadline, the one load a SYN flood's
        // segments need, before `enabled` (it is only set while resets are enabled, and a new
        // generation forgets it). Separate tests: LLVM turned the two of `!enabled || RST`, and
        // the deadline's nested over the flag, into selects on every segment (benches/NOTES.md,
        // "A SYN flood's reset decision from the remembered quiet time").
        if flags.contains(TcpFlags::RST) {
            return ResetDecision::Ineligible;
        }
        if self.global.quiet(now) {
            return ResetDecision::Suppressed(Limit::Global);
        }
        if !self.enabled {
            return ResetDecision::Ineligible;
        }
        if !self.global.peek(now) {
            return self.unless_exempt(&src(), ResetDecision::Suppressed(Limit::Global));
        }
        self.decide_peer(now, &src(), draw)
    }

    /// `d`, or [`ResetDecision::Send`] for an exempt source (which takes no credit).
    #[cold]
    #[inline(never)]
    fn unless_exempt(&mut self, src: &IpAddr, d: ResetDecision) -> ResetDecision {
        if self.exempt.contains(src) {
            self.granted = usize::MAX;
            return ResetDecision::Send;
        }
        d
    }

    /// The rest of [`ResetLimiter::decide`] once the global budget has credit: the
    /// per-destination bucket, then the global credit.
    #[inline(never)]
    fn decide_peer(&mut self, now: Instant, src: &IpAddr, draw: impl FnOnce() -> u32) -> ResetDecision {
        let (ok, slot) = self.peers.allow_at(now, src, self.rate);
        if !ok {
            return self.unless_exempt(src, ResetDecision::Suppressed(Limit::Peer));
        }
        if !self.global.try_consume(draw()) {
            self.peers.refund(slot, self.rate.interval_ns);
            return ResetDecision::Suppressed(Limit::Global);
        }
        self.granted = slot;
        ResetDecision::Send
    }

    /// Gives the destination of the last [`ResetDecision::Send`] its credit back (the reset was
    /// not sent: the segment's checksum was wrong).
    pub fn refund_peer(&mut self) {
        let slot = std::mem::replace(&mut self.granted, usize::MAX);
        if slot != usize::MAX {
            self.peers.refund(slot, self.rate.interval_ns);
        }
    }
}

/// Whether the TCP segment `p` describes in `frame` has a right checksum (`nic`: the NIC's
/// verdict; `Good` spares summing it).
pub fn checksum_ok(frame: &[u8], p: &Parsed, nic: NicChecksum) -> bool {
    let Some(l4) = frame.get(p.l4_offset as usize..p.ip_end as usize) else {
        return false;
    };
    let Ok(t) = TcpPacket::new_checked(l4) else {
        return false;
    };
    if nic == NicChecksum::Good {
        return true;
    }
    match (p.src, p.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => t.verify_checksum_v4(s, d),
        (IpAddr::V6(s), IpAddr::V6(d)) => t.verify_checksum_v6(&s, &d),
        _ => false,
    }
}

/// Turns the frame `pkt`, holding the TCP segment `p` describes (for our address `p.dst`, not a
/// fragment), into the reset that answers it, in place, from `local_mac`. `ident` is the IPv4
/// identification. `false` (drop it, the buffer in an unspecified state) if the segment does not
/// fit the frame or is itself a reset.
pub fn build_in_place<B: PacketBuf>(pkt: &mut B, p: &Parsed, local_mac: EthernetAddress, ident: u16) -> bool {
    let (l3, l4, end) = (p.l3_offset as usize, p.l4_offset as usize, p.ip_end as usize);
    if l3 < ethernet::HEADER_LEN || end > pkt.len() || l4 > end {
        return false;
    }
    let (seq, ack, flags, sport, dport, seg_len) = {
        let Ok(t) = TcpPacket::new_checked(&pkt.data()[l4..end]) else {
            return false;
        };
        let f = t.flags();
        if f.contains(TcpFlags::RST) {
            return false;
        }
        // SEG.LEN: the data, plus one for each of SYN and FIN (RFC 9293 §3.4).
        let len = t.payload().len() as u32 + f.contains(TcpFlags::SYN) as u32 + f.contains(TcpFlags::FIN) as u32;
        (t.seq_number(), t.ack_number(), f, t.src_port(), t.dst_port(), len)
    };
    let ip_len = match p.version {
        IpVersion::V4 => ipv4::MIN_HEADER_LEN,
        IpVersion::V6 => ipv6::HEADER_LEN,
    };
    let total = l3 + ip_len + tcp::MIN_HEADER_LEN;
    // The reset is never longer than the segment (which had at least these headers), so it
    // fits where the segment was.
    if total > end || !pkt.set_len(total) {
        return false;
    }
    let b = pkt.data_mut();
    let (dst, src) = b.split_at_mut(6);
    dst.copy_from_slice(&src[..6]);
    src[..6].copy_from_slice(&local_mac.0);
    let ethertype = match p.version {
        IpVersion::V4 => EtherType::IPV4,
        IpVersion::V6 => EtherType::IPV6,
    };
    wire::put_be16(b, l3 - 2, ethertype.into());
    // The TCP header first (it may overlap where IPv4 options or IPv6 extension headers were).
    let at = l3 + ip_len;
    let h = &mut b[at..total];
    h.fill(0);
    wire::put_be16(h, 0, dport);
    wire::put_be16(h, 2, sport);
    if flags.contains(TcpFlags::ACK) {
        wire::put_be32(h, 4, ack);
        h[13] = TcpFlags::RST.0;
    } else {
        wire::put_be32(h, 8, seq.wrapping_add(seg_len));
        h[13] = TcpFlags::RST.0 | TcpFlags::ACK.0;
    }
    h[12] = (tcp::MIN_HEADER_LEN as u8 / 4) << 4;
    match (p.dst, p.src) {
        (IpAddr::V4(me), IpAddr::V4(them)) => {
            Ipv4Repr {
                src: me,
                dst: them,
                protocol: IpProtocol::TCP,
                payload_len: tcp::MIN_HEADER_LEN as u16,
                ttl: HOP_LIMIT,
                dscp_ecn: 0,
                ident,
                dont_frag: true,
            }
            .emit(&mut b[l3..]);
            match TcpPacket::new_checked(&mut b[at..total]) {
                Ok(mut t) => t.fill_checksum_v4(me, them),
                Err(_) => return false,
            }
        }
        (IpAddr::V6(me), IpAddr::V6(them)) => {
            Ipv6Repr {
                src: me,
                dst: them,
                next_header: IpProtocol::TCP,
                payload_len: tcp::MIN_HEADER_LEN as u16,
                hop_limit: HOP_LIMIT,
            }
            .emit(&mut b[l3..]);
            match TcpPacket::new_checked(&mut b[at..total]) {
                Ok(mut t) => t.fill_checksum_v6(&me, &them),
                Err(_) => return false,
            }
        }
        _ => return false,
    }
    true
}

/// [`family_index`] of a parsed packet, for the counters.
#[inline]
pub fn family(p: &Parsed) -> usize {
    family_index(p.version)
}

#[cfg(test)]
mod tests;
