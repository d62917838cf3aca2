//! ICMP and ICMPv6 error messages, rate limited before any work is spent on them (Linux's "net:
//! optimize ICMP-reply code path"; docs/mechanisms.md, "Seed 000").
//!
//! Three parts, used in this order on the per-packet path:
//! 1. [`eligible`]: the rules of RFC 1122 §3.2.2, RFC 1812 §4.3.2.7 and RFC 4443 §2.4(e) about
//!    which packets must never cause an error (errors about errors, non-first fragments, group
//!    destinations, sources that are not one host);
//! 2. [`IcmpLimiter::decide`]: the limits, cheapest first, so a suppressed error costs a few loads
//!    and nothing is built: (a) the type/code mask, (b) exempt sources, (c) a non-consuming peek
//!    at the [`GlobalBucket`] shared by all lcores, (d) the per-destination bucket in this lcore's
//!    [`PeerTable`], (e) the global credit, consumed with Linux's post-CVE-2020-25705 randomisation
//!    (see [`limit`]);
//! 3. [`build_in_place`]: only for [`Decision::Send`], turns the offending frame into the error.
//!
//! `build_in_place` does not depend on the limiter, so a "build first, then ask" variant (the
//! benchmark's case (d), what Linux did before that change) is
//! `build_in_place(..)` followed by `decide(..)`.
//!
//! The per-destination table is per RX lcore. A destination whose packets RSS spreads over `k`
//! RX lcores (UDP hashes the 4-tuple, so one sender varying its source port reaches every lcore)
//! gets up to `k` bursts and `k` errors per interval instead of one. That is still bounded: every
//! error also needs global credit, and the global bucket is one for the whole host. A shared
//! table would cost a cache line bounced between lcores on every error; `k` is small (the RX
//! lcore count) and the global budget is what protects the network.
//!
//! Time is the caller's `now`; randomness is a word from the caller's lcore-local generator,
//! drawn only when global credit is consumed. Nothing here allocates per packet.

pub mod build;
pub mod exempt;
pub mod limit;

pub use build::{build_in_place, IPV4_MAX_ERROR_LEN, IPV6_MAX_ERROR_LEN};
pub use exempt::{ExemptSet, ExemptWarning, TooManyExempt, MAX_EXEMPT};
pub use limit::{GlobalBucket, PeerTable};

use super::parse::{IpVersion, Parsed};
use super::verdict::Instant;
use crate::buf::NicChecksum;
use crate::wire::IpProtocol;
use core::fmt;
use core::str::FromStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// The errors the fast path sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// UDP (or TCP) to a local address and a port no service listens on: ICMP Destination
    /// Unreachable code 3 (RFC 792, RFC 1122 §4.1.3.1) / ICMPv6 Destination Unreachable code 4
    /// (RFC 4443 §3.1).
    PortUnreachable,
    /// IPv4 only: a protocol the box does not deliver: Destination Unreachable code 2 (RFC 792,
    /// RFC 1122 §3.2.2.1). IPv6 reports that with a Parameter Problem, which this module does not
    /// send: ineligible for IPv6.
    ProtocolUnreachable,
    /// Reassembly gave up: ICMP Time Exceeded code 1 (RFC 792, RFC 1122 §3.3.2) / ICMPv6 Time
    /// Exceeded code 1 (RFC 4443 §3.3, RFC 8200 §4.5), about the first fragment.
    ReassemblyTimeExceeded,
    /// IPv4 only: Destination Unreachable code 4 with the next-hop MTU (RFC 1191 §4). Never rate
    /// limited: path MTU discovery depends on it.
    FragmentationNeeded {
        /// Next-hop MTU.
        mtu: u16,
    },
    /// IPv6 only: Packet Too Big (RFC 4443 §3.2). Never rate limited, and may answer a multicast
    /// packet (RFC 4443 §2.4(e.3)).
    PacketTooBig {
        /// MTU of the next hop.
        mtu: u32,
    },
}

crate::label_set! {
    /// An [`ErrorKind`] without its data: the `type` label of `fastpath_icmp_sent_total`.
    pub enum ErrorType {
        /// [`ErrorKind::PortUnreachable`].
        PortUnreachable => "port_unreachable",
        /// [`ErrorKind::ProtocolUnreachable`].
        ProtocolUnreachable => "protocol_unreachable",
        /// [`ErrorKind::ReassemblyTimeExceeded`].
        TimeExceeded => "time_exceeded",
        /// [`ErrorKind::FragmentationNeeded`].
        FragNeeded => "frag_needed",
        /// [`ErrorKind::PacketTooBig`].
        PacketTooBig => "packet_too_big",
    }
}

/// The `type` label values of `fastpath_icmp_sent_total`, in [`ErrorKind::type_index`] order.
pub const TYPE_LABELS: [&str; ErrorType::COUNT] = ErrorType::LABELS;

/// Counters one RX lcore keeps for the ICMP errors it sends or holds back.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct IcmpLcoreCounters {
    /// Errors sent, by family and [`ErrorKind::type_index`].
    pub sent: [[crate::stats::Counter; ErrorType::COUNT]; 2],
    /// Errors held back, by family and [`Limit::index`].
    pub limited: [[crate::stats::Counter; 2]; 2],
    /// ICMP errors about a tunnel service's flow: forwarded to its backend, or over the
    /// `[conntrack] icmp_per_sec` budget (then `unhandled`).
    pub to_backend: [crate::stats::Counter; 2],
}

/// ICMP counters of every RX lcore, one slot each; kept across reloads.
#[derive(Debug, Default)]
pub struct IcmpCounters {
    /// By RX lcore slot; each lcore's pipeline holds its own slot's (counting is then one
    /// increment at a fixed offset, no index to check per packet).
    pub rx: Box<[Arc<IcmpLcoreCounters>]>,
}

impl IcmpCounters {
    /// Zeroed counters for `rx` RX lcores.
    pub fn new(rx: usize) -> Self {
        IcmpCounters {
            rx: (0..rx).map(|_| Arc::new(IcmpLcoreCounters::default())).collect(),
        }
    }
}

/// The `family` label values, in [`family_index`] order.
pub const FAMILY_LABELS: [&str; 2] = ["ipv4", "ipv6"];

/// The `family` label of a metric about an error for a packet of this version.
pub fn family_label(version: IpVersion) -> &'static str {
    FAMILY_LABELS[family_index(version)]
}

/// Index of `version` in [`FAMILY_LABELS`], for per-lcore counter arrays.
pub fn family_index(version: IpVersion) -> usize {
    match version {
        IpVersion::V4 => 0,
        IpVersion::V6 => 1,
    }
}

impl ErrorKind {
    /// The `type` label of `fastpath_icmp_sent_total`.
    pub fn type_label(self) -> &'static str {
        self.error_type().label()
    }

    /// The kind without its data.
    pub fn error_type(self) -> ErrorType {
        match self {
            ErrorKind::PortUnreachable => ErrorType::PortUnreachable,
            ErrorKind::ProtocolUnreachable => ErrorType::ProtocolUnreachable,
            ErrorKind::ReassemblyTimeExceeded => ErrorType::TimeExceeded,
            ErrorKind::FragmentationNeeded { .. } => ErrorType::FragNeeded,
            ErrorKind::PacketTooBig { .. } => ErrorType::PacketTooBig,
        }
    }

    /// Index of the kind in [`TYPE_LABELS`], for per-lcore counter arrays.
    #[inline]
    pub fn type_index(self) -> usize {
        self.error_type().index()
    }

    /// The ICMP (v4) or ICMPv6 type and code of this error for a packet of `version`, or `None`
    /// where the kind does not exist in that family.
    pub fn type_code(self, version: IpVersion) -> Option<(u8, u8)> {
        match (self, version) {
            (ErrorKind::PortUnreachable, IpVersion::V4) => Some((3, 3)),
            (ErrorKind::PortUnreachable, IpVersion::V6) => Some((1, 4)),
            (ErrorKind::ProtocolUnreachable, IpVersion::V4) => Some((3, 2)),
            (ErrorKind::ReassemblyTimeExceeded, IpVersion::V4) => Some((11, 1)),
            (ErrorKind::ReassemblyTimeExceeded, IpVersion::V6) => Some((3, 1)),
            (ErrorKind::FragmentationNeeded { .. }, IpVersion::V4) => Some((3, 4)),
            (ErrorKind::PacketTooBig { .. }, IpVersion::V6) => Some((2, 0)),
            _ => None,
        }
    }

    /// The 4 bytes after the checksum: zero, except the MTU of Fragmentation Needed (low 16 bits,
    /// RFC 1191 §4) and Packet Too Big (all 32, RFC 4443 §3.2).
    fn rest_of_header(self) -> u32 {
        match self {
            ErrorKind::FragmentationNeeded { mtu } => mtu as u32,
            ErrorKind::PacketTooBig { mtu } => mtu,
            _ => 0,
        }
    }
}

crate::label_set! {
    /// Which limit suppressed an error: the `limit` label of `fastpath_icmp_rate_limited_total`.
    pub enum Limit {
        /// The host-wide budget ([`GlobalBucket`]).
        Global => "global",
        /// The per-destination budget ([`PeerTable`]).
        Peer => "peer",
    }
}

/// What to do about an error the pipeline would like to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Decision {
    /// The RFCs forbid an error about this packet (or the kind does not exist in its family):
    /// drop the packet as if no error were considered.
    Ineligible,
    /// A rate limit refused it: drop the packet (outcome `icmp_suppressed`), count the limit.
    Suppressed(Limit),
    /// Build it ([`build_in_place`]) and send it (outcome `icmp_error`).
    Send,
}

/// An IPv4 or IPv6 prefix, e.g. `198.51.100.0/24` or `2001:db8:1::/48`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prefix {
    addr: IpAddr,
    len: u8,
}

/// Why a string is not a [`Prefix`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrefixError {
    /// Not an address, or not `address/length`.
    Syntax,
    /// A length beyond 32 (IPv4) or 128 (IPv6).
    Length,
    /// Bits set after the prefix length (`198.51.100.1/24`): almost certainly a typo, refused
    /// rather than guessed.
    HostBits,
}

impl fmt::Display for PrefixError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            PrefixError::Syntax => "not an address/length prefix",
            PrefixError::Length => "prefix length too long for the address family",
            PrefixError::HostBits => "address has bits set past the prefix length",
        })
    }
}

impl std::error::Error for PrefixError {}

impl Prefix {
    /// The prefix of the first `len` bits of `addr`; the other bits must be zero.
    pub fn new(addr: IpAddr, len: u8) -> Result<Self, PrefixError> {
        let max: u8 = if addr.is_ipv4() { 32 } else { 128 };
        if len > max {
            return Err(PrefixError::Length);
        }
        if bits(addr) & !mask(max as u32, len) != 0 {
            return Err(PrefixError::HostBits);
        }
        Ok(Prefix { addr, len })
    }

    /// The network address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub fn len(&self) -> u8 {
        self.len
    }

    /// Whether the prefix is empty (length zero: it covers the whole family).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `ip` is inside the prefix (an address of the other family never is).
    #[inline]
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(_), IpAddr::V4(_)) => (bits(ip) ^ bits(self.addr)) & mask(32, self.len) == 0,
            (IpAddr::V6(_), IpAddr::V6(_)) => (bits(ip) ^ bits(self.addr)) & mask(128, self.len) == 0,
            _ => false,
        }
    }
}

/// The address as an integer (IPv4 in the low 32 bits).
#[inline]
fn bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u32::from(a) as u128,
        IpAddr::V6(a) => u128::from(a),
    }
}

/// The mask of the first `len` of `width` bits, aligned to the low end like [`bits`].
#[inline]
fn mask(width: u32, len: u8) -> u128 {
    let full = if width == 128 { u128::MAX } else { (1u128 << width) - 1 };
    full & !full.checked_shr(len as u32).unwrap_or(0)
}

impl FromStr for Prefix {
    type Err = PrefixError;
    /// `address/length`, or a bare address for a single host (/32, /128).
    fn from_str(s: &str) -> Result<Self, PrefixError> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a.trim().parse().map_err(|_| PrefixError::Syntax)?;
        let len = match l {
            Some(l) if !l.is_empty() && l.bytes().all(|c| c.is_ascii_digit()) => {
                l.parse::<u8>().map_err(|_| PrefixError::Length)?
            }
            Some(_) => return Err(PrefixError::Syntax),
            None if addr.is_ipv4() => 32,
            None => 128,
        };
        Prefix::new(addr, len)
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// Largest `peer_burst` accepted (the config layer refuses more).
pub const MAX_PEER_BURST: u32 = 10_000;
/// Largest `peer_interval_ms` accepted (an hour).
pub const MAX_PEER_INTERVAL_MS: u32 = 3_600_000;

/// The `[icmp]` settings (plain data; the config layer parses and validates them into this).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IcmpConfig {
    /// Which ICMP (v4) types are rate limited, one bit per type (Linux `icmp_ratemask`). ICMPv6
    /// errors use the bit of their ICMP (v4) counterpart, see [`v6_type_limited`].
    pub ratemask: u32,
    /// Global budget: messages a second (Linux `icmp_msgs_per_sec`).
    pub msgs_per_sec: u32,
    /// Global budget: most messages at once (Linux `icmp_msgs_burst`).
    pub burst: u32,
    /// Per destination: one message per this many milliseconds (Linux `icmp_ratelimit`); 0: no
    /// per-destination limit.
    pub peer_interval_ms: u32,
    /// Per destination: most messages at once (Linux `XRLIM_BURST_FACTOR`).
    pub peer_burst: u32,
    /// Sources that skip every limit (e.g. a trusted test client). Default none: on a NIC,
    /// loopback sources are martians and are never answered at all. Built off the data path
    /// ([`ExemptSet::new`]); the lcores share it.
    pub exempt: ExemptSet,
    /// Per-destination table slots per RX lcore (a power of two).
    pub peer_table_size: usize,
    /// Benchmark only (`[icmp] build_first`, default false): build the error before asking the
    /// limiter, as Linux did before it changed the order, so `ci/bench` can measure what the order
    /// saves. Never turn it on in production: a suppressed error then costs a whole build.
    pub build_first: bool,
}

impl Default for IcmpConfig {
    /// Linux's defaults.
    fn default() -> Self {
        IcmpConfig {
            ratemask: 0x1818,
            msgs_per_sec: 1000,
            burst: 50,
            peer_interval_ms: 1000,
            peer_burst: 6,
            exempt: ExemptSet::default(),
            peer_table_size: 4096,
            build_first: false,
        }
    }
}

impl IcmpConfig {
    /// A new global bucket for these settings, full, its clock starting at `now`.
    pub fn global_bucket(&self, now: Instant) -> Arc<GlobalBucket> {
        Arc::new(GlobalBucket::new(self.msgs_per_sec, self.burst, now))
    }
}

/// Linux's `NR_ICMP_TYPES`: the last ICMP (v4) type it knows.
const NR_ICMP_TYPES: u8 = 18;

/// Step (a) for ICMP (v4), Linux's `icmpv4_mask_allow` inverted: whether an error of `ty`/`code`
/// is rate limited at all. Types above 18 are not; Fragmentation Needed (3/4) never is, so path
/// MTU discovery keeps working (RFC 1191); the others are if their bit is set in `ratemask`.
#[inline]
pub fn v4_type_limited(ratemask: u32, ty: u8, code: u8) -> bool {
    if ty > NR_ICMP_TYPES || (ty == 3 && code == 4) {
        return false;
    }
    ratemask & (1 << ty) != 0
}

/// Step (a) for ICMPv6, after Linux's `icmpv6_mask_allow`. ICMPv6 numbers its types differently
/// and Linux gives it a separate 256-bit `icmpv6_ratemask` (default "0-1,3-127": every error but
/// Packet Too Big). We have one `ratemask`, in ICMP (v4) numbering, and apply it to an ICMPv6
/// error through its ICMP (v4) counterpart: Destination Unreachable (1) uses bit 3, Time Exceeded
/// (3) bit 11, Parameter Problem (4) bit 12. Packet Too Big (2) is never limited (PMTU discovery,
/// RFC 8201), nor are informational messages (128..=255, RFC 4443 §2.1); other error types
/// (unassigned, experimental) always are, as in Linux's default. With the default 0x1818 this
/// equals Linux's default ICMPv6 mask for every type.
#[inline]
pub fn v6_type_limited(ratemask: u32, ty: u8) -> bool {
    match ty {
        1 => ratemask & (1 << 3) != 0,
        2 => false,
        3 => ratemask & (1 << 11) != 0,
        4 => ratemask & (1 << 12) != 0,
        128..=255 => false,
        _ => true,
    }
}

/// ICMP (v4) error types (RFC 1812 §4.3.2.7, RFC 792): Destination Unreachable, Source Quench,
/// Redirect, Time Exceeded, Parameter Problem.
#[inline]
fn v4_is_error_type(ty: u8) -> bool {
    // Types Linux does not know (above 18) are treated as errors too, as its `icmp_send` does:
    // when unsure whether a message is an error, not answering is the side that cannot loop.
    matches!(ty, 3 | 4 | 5 | 11 | 12) || ty > NR_ICMP_TYPES
}

/// The address part of [`eligible`] for IPv4: not about a frame or datagram sent to a group
/// (RFC 1122 §3.2.2: a link-layer broadcast or multicast, an IP broadcast or multicast
/// destination), nor from a source that is not one host.
#[inline(always)]
fn v4_addresses_eligible(group_frame: bool, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
    !(group_frame || dst.is_broadcast() || dst.is_multicast() || !v4_source_is_one_host(src))
}

/// Whether `src` may be the source of a packet an IPv4 error answers: RFC 1122 §3.2.2 ("a
/// datagram whose source address does not define a single host -- e.g., a zero address, a
/// loopback address, a broadcast address, a multicast address, or a Class E address") and RFC
/// 1812 §4.3.2.7 / §5.3.7 (a source with a network prefix of zero, 0.0.0.0/8): the source
/// rule's own test ([`crate::pipeline::source::v4_is_one_host`]).
#[inline(always)]
fn v4_source_is_one_host(src: Ipv4Addr) -> bool {
    crate::pipeline::source::v4_is_one_host(src)
}

/// Whether `src` may be the source of a packet an IPv6 error answers: RFC 4443 §2.4(e.6), "a
/// packet whose source address does not uniquely identify a single node -- e.g., the IPv6
/// Unspecified Address, an IPv6 multicast address, or an address known by the ICMP message
/// originator to be an IPv6 anycast address", and the loopback address (RFC 4291 §2.5.3: never
/// sent on a link). Anycast addresses other than the subnet-router one are not recognisable
/// without the link's prefixes, which the fast path does not have.
#[inline]
fn v6_source_is_one_node(src: &Ipv6Addr) -> bool {
    !(src.is_unspecified() || src.is_loopback() || src.is_multicast())
}

/// The RFCs' "never send an error about this" rules; the first step of [`IcmpLimiter::decide`],
/// public for paths that build before they decide.
///
/// `frame` is the received frame (`Parsed`'s offsets index it); its first byte gives the
/// Ethernet destination's group bit.
///
/// IPv4 (RFC 1122 §3.2.2, RFC 1812 §4.3.2.7), never about: an ICMP error; a non-first fragment;
/// a datagram to an IP broadcast or multicast address (255.255.255.255 and 224/4; a
/// subnet-directed broadcast is not recognisable without subnet masks); a datagram sent as a
/// link-layer broadcast **or multicast** — RFC 1122 names link-layer broadcast, RFC 1812 both,
/// and we follow the stricter rule: a group frame is addressed to many, whatever its IP
/// destination, and answering it is how one packet becomes many answers; a source that is not one
/// host ([`v4_source_is_one_host`]).
///
/// IPv6 (RFC 4443 §2.4(e)), never about: an ICMPv6 error (types 0..=127, e.1) or a Redirect
/// (137, e.2); a packet to a multicast address (e.3) or sent as link-layer multicast or broadcast
/// (e.4, e.5), except that Packet Too Big may answer those (the other exception, Parameter
/// Problem code 2, is not a kind we send); a source that is not one node (e.6). Non-first
/// fragments are excluded as for IPv4: they carry no upper-layer header (so no port to be
/// unreachable), and reassembly reports its timeout about the first fragment (RFC 8200 §4.5).
///
/// An ICMP packet whose type byte is not in the packet (a first fragment of one byte) is
/// ineligible: it might be an error.
#[inline(always)]
pub fn eligible(kind: ErrorKind, p: &Parsed, frame: &[u8]) -> bool {
    if kind.type_code(p.version).is_none() {
        return false;
    }
    if p.fragment.is_some_and(|f| !f.is_first()) {
        return false;
    }
    let group_frame = frame.first().is_some_and(|b| b & 1 != 0);
    let icmp_type = || {
        let l4 = p.l4_offset as usize;
        if l4 < p.ip_end as usize {
            frame.get(l4).copied()
        } else {
            None
        }
    };
    match (&p.src, &p.dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            if !v4_addresses_eligible(group_frame, *src, *dst) {
                return false;
            }
            if p.protocol == IpProtocol::ICMP {
                return icmp_type().is_some_and(|t| !v4_is_error_type(t));
            }
            true
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            let may_answer_group = matches!(kind, ErrorKind::PacketTooBig { .. });
            if (group_frame || dst.is_multicast()) && !may_answer_group {
                return false;
            }
            if !v6_source_is_one_node(src) {
                return false;
            }
            if p.protocol == IpProtocol::ICMPV6 {
                return icmp_type().is_some_and(|t| t >= 128 && t != 137);
            }
            true
        }
        _ => false,
    }
}

/// Whether the UDP datagram `p` (in `frame`) may be answered as far as its checksum goes: RFC
/// 1122 §4.1.3.4, "If a UDP datagram is received with a checksum that is non-zero and invalid,
/// UDP MUST silently discard the datagram"; over IPv6 a zero checksum is invalid too (RFC 8200
/// §8.1). Linux checks it before its Port Unreachable (`__udp4_lib_rcv`: "No socket. Drop
/// packet silently, if checksum is wrong").
///
/// The pipeline asks only once the limits allowed an error, so a flood the limiter holds back
/// pays nothing for it; the per-destination credit such a datagram took is then given
/// back ([`IcmpLimiter::refund_peer`]), the global credit is not.
///
/// `nic` is what the NIC found checking it ([`crate::buf::PacketBuf::l4_checksum`]): `Good`
/// spares summing the datagram (but an IPv6 zero checksum is refused whatever it says); any other
/// verdict is checked here.
pub fn udp_checksum_ok(frame: &[u8], p: &Parsed, nic: NicChecksum) -> bool {
    let Some(l4) = frame.get(p.l4_offset as usize..p.ip_end as usize) else {
        return false;
    };
    let Ok(u) = crate::wire::UdpPacket::new_checked(l4) else {
        return false;
    };
    if nic == NicChecksum::Good {
        return p.version == IpVersion::V4 || u.checksum() != 0;
    }
    match (p.src, p.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => u.verify_checksum_v4(s, d),
        (IpAddr::V6(s), IpAddr::V6(d)) => u.verify_checksum_v6(&s, &d),
        _ => false,
    }
}

/// Whether an error of `kind` about `p` may be answered at all once the limits allow it: a UDP
/// datagram's Port Unreachable needs a right checksum ([`udp_checksum_ok`]).
#[inline]
pub fn answerable(kind: ErrorKind, p: &Parsed, frame: &[u8], nic: NicChecksum) -> bool {
    kind != ErrorKind::PortUnreachable || p.protocol != IpProtocol::UDP || udp_checksum_ok(frame, p, nic)
}

/// One RX lcore's ICMP error limiter: its own per-destination table, a handle on the global
/// bucket all lcores share, and the settings of the current config generation.
#[derive(Clone, Debug)]
pub struct IcmpLimiter {
    global: limit::GlobalView,
    peers: PeerTable,
    ratemask: u32,
    /// The per-destination limit of IPv4 and of IPv6 destinations.
    peer_rate: [limit::PeerRate; 2],
    exempt: ExemptSet,
    /// The per-destination slot and family of the last [`Decision::Send`] that took
    /// per-destination credit (`usize::MAX`: none), for [`IcmpLimiter::refund_peer`].
    granted: (usize, usize),
}

/// The per-destination limits of the two families for `interval_ns` and `burst`: IPv6's
/// interval scaled by the prefix it assumes ([`limit::v6_peer_interval`]).
fn peer_rates(interval_ns: u64, burst: u32) -> [limit::PeerRate; 2] {
    [
        limit::PeerRate::new(interval_ns, burst),
        limit::PeerRate::new(limit::v6_peer_interval(interval_ns, limit::V6_PEER_PLEN), burst),
    ]
}

impl IcmpLimiter {
    /// A limiter with `cfg`'s settings (validated), sharing `global` with the other lcores.
    /// `seed` keys the per-destination table's hash; it must be unpredictable to senders (drawn
    /// at start from a real random source, e.g. `rte_rand()` or getrandom) and differ per lcore.
    pub fn new(cfg: &IcmpConfig, global: Arc<GlobalBucket>, seed: u64) -> Self {
        IcmpLimiter {
            global: limit::GlobalView::new(global),
            peers: PeerTable::new(cfg.peer_table_size, seed),
            ratemask: cfg.ratemask,
            peer_rate: peer_rates(cfg.peer_interval_ms as u64 * 1_000_000, cfg.peer_burst),
            exempt: cfg.exempt.clone(),
            granted: (usize::MAX, 0),
        }
    }

    /// Adopts a new config generation, between bursts. The per-destination table (and what it
    /// remembers) is kept unless its size, the interval or the burst changed (its buckets are
    /// times that mean something only for one interval and burst: a new table gives every
    /// destination a full burst once, which the global budget still bounds); `global` is the
    /// bucket of the new generation (the same `Arc`, [`GlobalBucket::reconfigure`]d, keeps the
    /// credit earned so far).
    pub fn apply(&mut self, cfg: &IcmpConfig, global: Arc<GlobalBucket>, seed: u64) {
        let size = cfg
            .peer_table_size
            .clamp(1, limit::MAX_PEER_TABLE_SIZE)
            .next_power_of_two();
        // (Equal rates with a different burst happen only with no per-destination limit at all,
        // interval 0, where no bucket holds anything to lose.)
        let rate = peer_rates(cfg.peer_interval_ms as u64 * 1_000_000, cfg.peer_burst);
        if self.peers.size() != size || self.peer_rate != rate {
            self.peers = PeerTable::new(cfg.peer_table_size, seed);
        }
        self.global = limit::GlobalView::new(global);
        self.ratemask = cfg.ratemask;
        self.peer_rate = rate;
        self.exempt = cfg.exempt.clone();
        self.granted = (usize::MAX, 0);
    }

    /// Gives the destination of the last [`Decision::Send`] its per-destination credit back:
    /// the error was not sent after all because the datagram turned out not to be answerable (a
    /// wrong UDP checksum, which is checked only once the limits allowed an error so that a flood
    /// they hold back costs no checksum). Linux verifies the checksum before it asks its
    /// limiter, so a spoofed datagram with a wrong checksum never takes the burst of the host it
    /// names; neither does it here. The global credit stays spent: it bounds the checksums a
    /// flood of wrong ones can make us compute, and a flood with right checksums spends it just
    /// the same. Nothing happens if the last decision took no per-destination credit (exempt
    /// sources, unlimited types) or was not a send.
    #[inline]
    pub fn refund_peer(&mut self) {
        let (slot, family) = std::mem::replace(&mut self.granted, (usize::MAX, 0));
        if slot != usize::MAX {
            self.peers.refund(slot, self.peer_rate[family].interval_ns);
        }
    }

    /// The global bucket this limiter draws on.
    pub fn global(&self) -> &Arc<GlobalBucket> {
        self.global.bucket()
    }

    /// The per-destination table.
    pub fn peers(&self) -> &PeerTable {
        &self.peers
    }

    /// Whether an error of `kind` about the packet `p` (in `frame`, the received frame) may be
    /// sent at `now`. Cheapest first, and nothing is built: eligibility, then (a) the type mask,
    /// (b) exempt sources, (c) a peek at the global bucket, (d) the per-destination bucket, (e)
    /// the global credit, consumed with a random 0..=2 credits from `draw()` (a word of the
    /// caller's lcore-local generator, called only at step (e)).
    ///
    /// [`Decision::Send`] has consumed the budget: the caller must send the error (or count it as
    /// lost on TX).
    #[inline(always)]
    pub fn decide(
        &mut self,
        now: Instant,
        kind: ErrorKind,
        p: &Parsed,
        frame: &[u8],
        draw: impl FnOnce() -> u32,
    ) -> Decision {
        if !eligible(kind, p, frame) {
            return Decision::Ineligible;
        }
        self.decide_limits(now, kind, p, draw)
    }

    /// [`IcmpLimiter::decide`] without the eligibility check (which needs the offending frame):
    /// steps (a) to (e) only, for a caller that checked [`eligible`] itself. The benchmark's
    /// "build first" variant uses it after the frame has become the error.
    #[inline(always)]
    pub fn decide_limits(&mut self, now: Instant, kind: ErrorKind, p: &Parsed, draw: impl FnOnce() -> u32) -> Decision {
        let Some(type_code) = kind.type_code(p.version) else {
            return Decision::Ineligible;
        };
        self.limits(now, p.version, type_code, &p.src, draw)
    }

    /// [`IcmpLimiter::decide`] for a Port Unreachable about an IPv4 UDP datagram that is not a
    /// fragment, in a unicast frame, from a source the source rule admitted (the pipeline's
    /// IPv4/UDP fast path): the same checks in the same order, so that a flood the limits hold
    /// back is decided without a parse result. RFC 1122 §3.2.2's source part holds already
    /// ([`crate::pipeline::source::v4_to_local`] asks the same table of the same address), and
    /// so does the frame part; the destination's class is asked here. Asking the source again
    /// cost every packet to a closed port (benches/NOTES.md, "Per-burst reads and the closed
    /// port's decision").
    #[inline(always)]
    pub fn decide_udp4_port_unreachable(
        &mut self,
        now: Instant,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        draw: impl FnOnce() -> u32,
    ) -> Decision {
        debug_assert!(v4_source_is_one_host(src));
        if dst.is_broadcast() || dst.is_multicast() {
            return Decision::Ineligible;
        }
        let Some(type_code) = ErrorKind::PortUnreachable.type_code(IpVersion::V4) else {
            return Decision::Ineligible;
        };
        self.limits(now, IpVersion::V4, type_code, &IpAddr::V4(src), draw)
    }

    /// [`IcmpLimiter::decide`] for a Port Unreachable about an IPv6 UDP packet with no extension
    /// header to a unicast address, which the source rule admitted (the pipeline's IPv6/UDP
    /// fast path): RFC 4443 §2.4(e.3-e.6) hold already ([`crate::pipeline::source::valid_v6`]
    /// refuses a group frame to a unicast address and every source that is not one node), so
    /// the limits alone decide, without a parse result.
    #[inline(always)]
    pub fn decide_udp6_port_unreachable(
        &mut self,
        now: Instant,
        src: &Ipv6Addr,
        draw: impl FnOnce() -> u32,
    ) -> Decision {
        debug_assert!(v6_source_is_one_node(src));
        let Some(type_code) = ErrorKind::PortUnreachable.type_code(IpVersion::V6) else {
            return Decision::Ineligible;
        };
        self.limits(now, IpVersion::V6, type_code, &IpAddr::V6(*src), draw)
    }

    /// Steps (a) to (e) for an error of `type_code` in `version` to `src`.
    #[inline(always)]
    fn limits(
        &mut self,
        now: Instant,
        version: IpVersion,
        (ty, code): (u8, u8),
        src: &IpAddr,
        draw: impl FnOnce() -> u32,
    ) -> Decision {
        // (a) Not rate limited at all: PMTU errors, types outside the mask.
        let limited = match version {
            IpVersion::V4 => v4_type_limited(self.ratemask, ty, code),
            IpVersion::V6 => v6_type_limited(self.ratemask, ty),
        };
        if !limited {
            self.granted.0 = usize::MAX;
            return Decision::Send;
        }
        // (b) Trusted sources skip every limit (glibc's test suite expects 50 back-to-back
        // errors; Linux exempts packets that arrived on loopback). A binary search over merged
        // ranges; with no exempt prefix, one compare of a pointer with null.
        if self.exempt.contains(src) {
            self.granted.0 = usize::MAX;
            return Decision::Send;
        }
        // (c) Nothing left host-wide: stop before touching per-destination state.
        if !self.global.peek(now) {
            return Decision::Suppressed(Limit::Global);
        }
        // (d) Per destination: the error goes to the packet's source.
        let rate = self.peer_rate[family_index(version)];
        let (ok, slot) = self.peers.allow_at(now, src, rate);
        if !ok {
            return Decision::Suppressed(Limit::Peer);
        }
        // (e) Consume global credit. If another lcore took the last of it since (c), the
        // destination gets its credit back: it did not receive anything.
        if !self.global.try_consume(draw()) {
            self.peers.refund(slot, rate.interval_ns);
            return Decision::Suppressed(Limit::Global);
        }
        self.granted = (slot, family_index(version));
        Decision::Send
    }
}

#[cfg(test)]
mod tests;
