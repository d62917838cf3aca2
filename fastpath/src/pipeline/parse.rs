//! The per-packet parse result: computed once, at the start of the pipeline, and read by every
//! later stage (offsets, addresses, protocol, ports, flags, fragment info, flow hash).
//!
//! Validation here is structural; a packet that fails it is `malformed`:
//! - IPv4 (RFC 791 §3.1): version 4, IHL >= 5, IHL <= total length <= frame; header checksum
//!   right (RFC 1122 §3.2.1.2: "A host MUST verify the IP header checksum on every received
//!   datagram and silently discard every datagram that has a bad checksum");
//! - IPv6 (RFC 8200 §3, §4): version 6, payload length within the frame, an extension chain
//!   that is complete and at most [`crate::wire::ipv6::MAX_EXT_HEADERS`] long;
//! - UDP and TCP headers of unfragmented datagrams must be complete (RFC 768 length >= 8 and
//!   within the datagram; RFC 9293 data offset >= 5 and within the segment).
//!
//! Frames may carry Ethernet padding past the IP datagram; `ip_end` marks where it ends.

use crate::buf::NicChecksum;
use crate::wire::{
    self, EtherType, EthernetFrame, IpProtocol, Ipv4Packet, Ipv6Packet, TcpFlags, TcpPacket, Toeplitz, UdpPacket,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// IP version of a parsed packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpVersion {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

/// Where a fragment sits in its datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragmentInfo {
    /// Fragment offset in bytes.
    pub offset: u16,
    /// More Fragments.
    pub more: bool,
    /// Identification (IPv4's 16 bits widened; IPv6's 32).
    pub ident: u32,
}

impl FragmentInfo {
    /// Whether this is the first fragment (offset zero): only it carries the upper-layer header.
    pub fn is_first(&self) -> bool {
        self.offset == 0
    }
}

/// Everything later stages need to know about an IP packet, computed once.
///
/// Offsets are from the start of the frame. `ports` and `tcp_flags` are set only when the
/// upper-layer header is in this packet: never for non-first fragments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parsed {
    /// Offset of the IP header (after Ethernet and VLAN tags).
    pub l3_offset: u16,
    /// Offset of the upper-layer header (after IPv4 options or IPv6 extension headers). For a
    /// non-first fragment: the start of its slice of the fragmentable part.
    pub l4_offset: u16,
    /// Offset just past the IP datagram (IPv4 total length, IPv6 40 + payload length); bytes
    /// after it are link-layer padding.
    pub ip_end: u16,
    /// VLAN id of the innermost tag.
    pub vlan_id: Option<u16>,
    /// Number of VLAN tags (0 to 2).
    pub vlan_tags: u8,
    /// EtherType after the VLAN tags.
    pub ethertype: EtherType,
    /// IP version.
    pub version: IpVersion,
    /// Source address.
    pub src: IpAddr,
    /// Destination address (of the fixed header; a routing header is not followed).
    pub dst: IpAddr,
    /// Upper-layer protocol (after extension headers).
    pub protocol: IpProtocol,
    /// TTL or hop limit.
    pub hop_limit: u8,
    /// (source, destination) ports for UDP and TCP.
    pub ports: Option<(u16, u16)>,
    /// TCP control bits.
    pub tcp_flags: Option<TcpFlags>,
    /// Fragment info, when the packet is a fragment (an IPv6 atomic fragment, offset 0 and M
    /// clear, is not: RFC 6946 §4 processes it in isolation).
    pub fragment: Option<FragmentInfo>,
    /// The flow hash, see [`Parsed::parse_ip`]; 0 after [`Parsed::parse_ip_unhashed`] until
    /// [`Parsed::flow_hash`] is asked.
    pub hash: u32,
    /// Whether a NIC's RSS hash may stand for the software one: not a fragment and no IPv6
    /// Fragment header (NICs disagree on what they hash there).
    pub nic_hash_ok: bool,
}

impl Parsed {
    /// A placeholder to parse into ([`Parsed::parse_ip_into`] overwrites every field).
    pub const EMPTY: Parsed = Parsed {
        l3_offset: 0,
        l4_offset: 0,
        ip_end: 0,
        vlan_id: None,
        vlan_tags: 0,
        ethertype: EtherType::IPV4,
        version: IpVersion::V4,
        src: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        dst: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        protocol: IpProtocol(0),
        hop_limit: 0,
        ports: None,
        tcp_flags: None,
        fragment: None,
        hash: 0,
        nic_hash_ok: false,
    };

    /// What the parsers make of an untagged IPv4 datagram with a 20-byte header, not a
    /// fragment, of UDP (RFC 768's lengths checked by the caller): the fields the pipeline's
    /// IPv4/UDP fast path read in place, for the stages it hands the packet on to. `total` is
    /// the IPv4 total length.
    #[inline(always)]
    pub fn untagged_udp4(src: Ipv4Addr, dst: Ipv4Addr, ttl: u8, ports: (u16, u16), total: u16) -> Parsed {
        Parsed {
            l3_offset: 14,
            l4_offset: 14 + 20,
            ip_end: 14 + total,
            vlan_id: None,
            vlan_tags: 0,
            ethertype: EtherType::IPV4,
            version: IpVersion::V4,
            src: IpAddr::V4(src),
            dst: IpAddr::V4(dst),
            protocol: IpProtocol::UDP,
            hop_limit: ttl,
            ports: Some(ports),
            tcp_flags: None,
            fragment: None,
            hash: 0,
            nic_hash_ok: true,
        }
    }

    /// What the parsers make of an untagged IPv4 datagram with a 20-byte header, not a
    /// fragment, of TCP (RFC 9293's data offset checked by the caller): [`Parsed::untagged_udp4`]
    /// for the TCP fast path, with the segment's control bits.
    #[inline(always)]
    pub fn untagged_tcp4(src: Ipv4Addr, dst: Ipv4Addr, ttl: u8, ports: (u16, u16), flags: u8, total: u16) -> Parsed {
        Parsed {
            protocol: IpProtocol::TCP,
            tcp_flags: Some(TcpFlags(flags)),
            ..Self::untagged_udp4(src, dst, ttl, ports, total)
        }
    }

    /// What the parsers make of an untagged IPv6 packet with no extension header whose next
    /// header is UDP or TCP (`protocol`; the upper layer's lengths checked by the caller): the
    /// fields the IPv6 fast paths read in place. `payload` is the IPv6 payload length, `flags`
    /// the TCP control bits (`None` for UDP).
    #[inline(always)]
    pub fn untagged_v6(
        protocol: IpProtocol,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        hop_limit: u8,
        ports: (u16, u16),
        flags: Option<u8>,
        payload: u16,
    ) -> Parsed {
        Parsed {
            l3_offset: 14,
            l4_offset: 14 + 40,
            ip_end: 14 + 40 + payload,
            vlan_id: None,
            vlan_tags: 0,
            ethertype: EtherType::IPV6,
            version: IpVersion::V6,
            src: IpAddr::V6(src),
            dst: IpAddr::V6(dst),
            protocol,
            hop_limit,
            ports: Some(ports),
            tcp_flags: flags.map(TcpFlags),
            fragment: None,
            hash: 0,
            nic_hash_ok: true,
        }
    }

    /// Parses an Ethernet frame carrying IPv4 or IPv6. Other EtherTypes and more VLAN tags than
    /// supported are [`wire::Error::Unsupported`]; anything else that fails is truncated or
    /// malformed.
    pub fn parse(frame: &[u8], hasher: &Toeplitz, nic_hash: Option<u32>) -> wire::Result<Self> {
        let f = EthernetFrame::new_checked(frame)?;
        Self::parse_ip(&f, hasher, nic_hash)
    }

    /// Parses the IP packet in an already validated frame.
    ///
    /// The flow hash is the Toeplitz RSS hash: over the 4-tuple for UDP and TCP, the 2-tuple for
    /// everything else and for **every fragment, first included**, so all fragments of a
    /// datagram hash alike. `nic_hash` is used instead when the driver supplied one, except
    /// where it may differ from what software computes: fragments and packets with an IPv6
    /// Fragment header (NICs disagree on what they hash there) and symmetric mode (a NIC hashes
    /// the tuple as received).
    #[inline(always)]
    pub fn parse_ip<T: AsRef<[u8]>>(
        frame: &EthernetFrame<T>,
        hasher: &Toeplitz,
        nic_hash: Option<u32>,
    ) -> wire::Result<Self> {
        let mut p = Self::parse_ip_unhashed(frame)?;
        p.hash = p.flow_hash(hasher, nic_hash);
        Ok(p)
    }

    /// The flow hash of [`Parsed::parse_ip`], for a result of [`Parsed::parse_ip_unhashed`].
    #[inline]
    pub fn flow_hash(&self, hasher: &Toeplitz, nic_hash: Option<u32>) -> u32 {
        match nic_hash {
            Some(h) if self.nic_hash_ok && !hasher.is_symmetric() => h,
            _ => {
                let hash_ports = if self.fragment.is_some() { None } else { self.ports };
                match (self.src, self.dst) {
                    (IpAddr::V4(s), IpAddr::V4(d)) => hasher.hash_v4(s, d, hash_ports),
                    (IpAddr::V6(s), IpAddr::V6(d)) => hasher.hash_v6(&s, &d, hash_ports),
                    _ => 0, // versions never mix: both come from one header
                }
            }
        }
    }

    /// [`Parsed::parse_ip`] without the flow hash (`hash` stays 0): the pipeline asks for it
    /// only on the way to a socket, so packets that are answered or dropped never pay for it.
    #[inline]
    pub fn parse_ip_unhashed<T: AsRef<[u8]>>(frame: &EthernetFrame<T>) -> wire::Result<Self> {
        let mut p = Parsed::EMPTY;
        Self::parse_ip_into(frame, &mut p, NicChecksum::Unknown)?;
        Ok(p)
    }

    /// What [`Parsed::parse_ip_unhashed`] returns, written into `p` (every field; on an error
    /// `p` holds a partial result that must not be used).
    ///
    /// The per-packet form: the fields are stored where the caller keeps them, once. Returned
    /// by value, the IPv4 and IPv6 results met in a temporary that was then copied whole into
    /// the caller's variable, a copy that cost more than the IPv4 header checks (benches/NOTES.md,
    /// "Parse in place").
    ///
    /// `ip_checksum` is what the NIC found checking the IPv4 header's checksum: `Good` or `Bad`
    /// spare the software check, `Unknown` asks for it. Only for the frame as received: after
    /// decapsulation the NIC's verdict was about another header.
    #[inline(always)]
    pub fn parse_ip_into<T: AsRef<[u8]>>(
        frame: &EthernetFrame<T>,
        p: &mut Parsed,
        ip_checksum: NicChecksum,
    ) -> wire::Result<()> {
        let l3 = frame.header_len();
        let bytes = frame.payload();
        let ethertype = frame.ethertype();
        match ethertype {
            EtherType::IPV4 => Self::ipv4_into(bytes, l3, p, ip_checksum)?,
            EtherType::IPV6 => Self::ipv6_into(bytes, l3, p)?,
            _ => return Err(wire::Error::Unsupported),
        }
        p.vlan_id = frame.inner_vlan_id();
        p.vlan_tags = frame.vlan_tags() as u8;
        p.ethertype = ethertype;
        p.ports = None;
        p.tcp_flags = None;
        p.hash = 0;
        let l4 = &bytes[p.l4_offset as usize - l3..p.ip_end as usize - l3];
        let whole = p.fragment.is_none();
        let first = p.fragment.is_some_and(|f| f.is_first());
        match p.protocol {
            IpProtocol::UDP if whole => {
                let u = UdpPacket::new_checked(l4)?;
                p.ports = Some((u.src_port(), u.dst_port()));
            }
            IpProtocol::TCP if whole => {
                let t = TcpPacket::new_checked(l4)?;
                p.ports = Some((t.src_port(), t.dst_port()));
                p.tcp_flags = Some(t.flags());
            }
            // A first fragment may be too short for the header (RFC 1858's tiny fragments): take
            // what is there, without judging it; reassembly sees the whole datagram.
            IpProtocol::UDP | IpProtocol::TCP if first && l4.len() >= 4 => {
                p.ports = Some((wire::be16(l4, 0), wire::be16(l4, 2)));
                if p.protocol == IpProtocol::TCP {
                    p.tcp_flags = TcpPacket::new_checked(l4).ok().map(|t| t.flags());
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The common frame parsed from fixed offsets: Ethernet without a VLAN tag or with one 802.1Q
    /// tag; IPv4 without options or IPv6 without extension headers; not a fragment; UDP, TCP or any
    /// other upper layer (ICMP, ICMPv6, GRE: its header is read by the stage that needs it). For
    /// such a frame `p` becomes exactly what [`Parsed::parse_ip_into`] would make of it and the
    /// result is `true`; for any other frame, or one that fails a check (lengths, the IPv4 header
    /// checksum, the UDP length, the TCP data offset), `false` and `p` must not be used: the
    /// general parser then decides (including what is wrong with it). The Ethernet addresses are
    /// not looked at here (the pipeline checks them as for any frame). ARP and every other
    /// EtherType are the general parser's.
    ///
    /// Why it exists: the general parser (VLAN tags, options, IPv6 extension headers, fragments,
    /// every error its own verdict) costs instructions these frames do not need, on every path a
    /// flood takes (plain drop, closed port, open port; benches/NOTES.md, "Fixed-offset parse of
    /// common frames"). A property test holds the two to the same result. IPv4 is inline (the
    /// floods' frame); IPv6 is a call, so that its 32 bytes of addresses do not crowd the IPv4
    /// path.
    #[inline(always)]
    pub fn parse_common_into(frame: &[u8], p: &mut Parsed, ip_checksum: NicChecksum) -> bool {
        Self::parse_common_with(frame, p, |header| ip_checksum.ok_or(|| wire::checksum::verify(header)))
    }

    /// [`Parsed::parse_common_into`] with the IPv4 header's checksum judged by `ip_header_ok`
    /// (given the header's bytes), asked only where it is needed: the pipeline passes
    /// [`PacketBuf::ip_checksum_ok`](crate::buf::PacketBuf::ip_checksum_ok), which tests the RX
    /// flags with branches; the NIC's verdict read before the parse (an argument) compiled to
    /// conditional moves on every packet (benches/NOTES.md, "Checksums and addresses without byte
    /// swaps").
    #[inline(always)]
    pub fn parse_common_with(frame: &[u8], p: &mut Parsed, ip_header_ok: impl FnOnce(&[u8]) -> bool) -> bool {
        // The shortest common frame (IPv4, UDP, no data): every other is longer.
        let Some(h) = frame.get(..14 + 20 + 8) else {
            return false;
        };
        // IPv4 tested first, the others in a call: as one `match` (or `if` chain) the compiler
        // tested IPv6 and 802.1Q before IPv4, the floods' frame.
        if wire::be16(h, 12) == 0x0800 {
            Self::common_v4_into::<14>(frame, p, ip_header_ok)
        } else {
            Self::common_other_into(frame, p, ip_header_ok)
        }
    }

    /// [`Parsed::parse_common_into`] for a frame that is not untagged IPv4.
    #[inline(never)]
    fn common_other_into(frame: &[u8], p: &mut Parsed, ip_header_ok: impl FnOnce(&[u8]) -> bool) -> bool {
        let Some(h) = frame.get(..14) else {
            return false;
        };
        match wire::be16(h, 12) {
            0x86dd => Self::common_v6_into::<14>(frame, p),
            0x8100 => Self::common_tagged_into(frame, p, ip_header_ok),
            _ => false,
        }
    }

    /// [`Parsed::parse_common_into`] behind one 802.1Q tag (ports do not ask the NIC to strip
    /// tags: a trunk's frames arrive with theirs, and answers keep them). Out of line: the
    /// untagged path does not carry it. A second tag (802.1ad) is the general parser's.
    #[inline(never)]
    fn common_tagged_into(frame: &[u8], p: &mut Parsed, ip_header_ok: impl FnOnce(&[u8]) -> bool) -> bool {
        let Some(h) = frame.get(..18) else {
            return false;
        };
        let taken = match wire::be16(h, 16) {
            0x0800 => Self::common_v4_into::<18>(frame, p, ip_header_ok),
            0x86dd => Self::common_v6_into::<18>(frame, p),
            _ => false,
        };
        if taken {
            p.vlan_id = Some(wire::be16(h, 14) & 0x0fff);
            p.vlan_tags = 1;
        }
        taken
    }

    /// [`Parsed::parse_common_into`] for an IPv4 packet at `L3` (the EtherType read, at least 42
    /// bytes in the frame), as if untagged: the caller sets the tag's fields.
    #[inline(always)]
    fn common_v4_into<const L3: usize>(frame: &[u8], p: &mut Parsed, ip_header_ok: impl FnOnce(&[u8]) -> bool) -> bool {
        let l4 = L3 + 20;
        let Some(h) = frame.get(..l4 + 8) else {
            return false;
        };
        // Version 4 with a 20-byte header; neither MF nor an offset (the reserved bit is not
        // looked at, as by the general parser).
        if h[L3] != 0x45 || wire::be16(h, L3 + 6) & 0x3fff != 0 {
            return false;
        }
        let total = wire::be16(h, L3 + 2) as usize;
        // The datagram within the frame, and its end a frame offset (u16) as the general parser
        // requires: a reassembled 65535-byte datagram behind its Ethernet header is not.
        if frame.len() < L3 + total || L3 + total > u16::MAX as usize {
            return false;
        }
        let protocol = h[L3 + 9];
        if protocol == IpProtocol::UDP.0 {
            // The floods' frame, with its UDP header already in `h`: RFC 768, 8 <= length <= what
            // the datagram holds.
            let udp_len = wire::be16(h, l4 + 4) as usize;
            if udp_len < 8 || udp_len + 20 > total {
                return false;
            }
            p.protocol = IpProtocol::UDP;
            p.ports = Some((wire::be16(h, l4), wire::be16(h, l4 + 2)));
            p.tcp_flags = None;
        } else if total < 20 || !Self::common_l4_into(frame, l4, total - 20, protocol, p) {
            return false;
        }
        if !ip_header_ok(&h[L3..l4]) {
            return false;
        }
        let (src, dst) = (wire::ipv4_at(h, L3 + 12), wire::ipv4_at(h, L3 + 16));
        Self::set_common_ip(p, [L3, l4, L3 + total], IpAddr::V4(src), IpAddr::V4(dst), h[L3 + 8]);
        true
    }

    /// [`Parsed::parse_common_into`] for an IPv6 packet at `L3` (the EtherType read), as if
    /// untagged: no extension header, so no fragment either.
    #[inline(never)]
    fn common_v6_into<const L3: usize>(frame: &[u8], p: &mut Parsed) -> bool {
        let l4 = L3 + 40;
        let Some(h) = frame.get(..l4) else {
            return false;
        };
        if h[L3] >> 4 != 6 {
            return false;
        }
        let payload = wire::be16(h, L3 + 4) as usize;
        if frame.len() < l4 + payload || l4 + payload > u16::MAX as usize {
            return false;
        }
        // An extension header (RFC 8200 §4: Hop-by-Hop, Routing, Fragment, Destination
        // Options) is the general parser's to walk.
        let next = h[L3 + 6];
        if matches!(
            IpProtocol(next),
            IpProtocol::HOP_BY_HOP | IpProtocol::IPV6_ROUTE | IpProtocol::IPV6_FRAG | IpProtocol::IPV6_OPTS
        ) || !Self::common_l4_into(frame, l4, payload, next, p)
        {
            return false;
        }
        let (src, dst) = (wire::ipv6_at(h, L3 + 8), wire::ipv6_at(h, L3 + 24));
        Self::set_common_ip(p, [L3, l4, l4 + payload], IpAddr::V6(src), IpAddr::V6(dst), h[L3 + 7]);
        true
    }

    /// The fields of a common frame's IP header, as if untagged and not a fragment (the
    /// upper layer's are set by [`Parsed::common_l4_into`], a tag's by the caller): `at` is the
    /// IP header's offset, the upper layer's and the datagram's end, all below 65536.
    #[inline(always)]
    fn set_common_ip(p: &mut Parsed, at: [usize; 3], src: IpAddr, dst: IpAddr, hop_limit: u8) {
        let [l3, l4, end] = at;
        p.l3_offset = l3 as u16;
        p.l4_offset = l4 as u16;
        p.ip_end = end as u16;
        p.vlan_id = None;
        p.vlan_tags = 0;
        (p.ethertype, p.version) = match src {
            IpAddr::V4(_) => (EtherType::IPV4, IpVersion::V4),
            IpAddr::V6(_) => (EtherType::IPV6, IpVersion::V6),
        };
        p.src = src;
        p.dst = dst;
        p.hop_limit = hop_limit;
        p.fragment = None;
        p.hash = 0;
        p.nic_hash_ok = true;
    }

    /// The upper-layer header at `l4` of a whole datagram whose upper-layer part is `len` bytes:
    /// for UDP and TCP the general parser's checks (RFC 768: 8 <= UDP length <= what the
    /// datagram holds; RFC 9293: 5 <= data offset, the header within the segment) and their
    /// ports; any other protocol (never an IPv6 extension header: the caller's check) as the
    /// general parser takes it, unread.
    #[inline(always)]
    fn common_l4_into(frame: &[u8], l4: usize, len: usize, protocol: u8, p: &mut Parsed) -> bool {
        match IpProtocol(protocol) {
            IpProtocol::UDP => {
                let Some(u) = frame.get(l4..l4 + 8) else {
                    return false;
                };
                let udp_len = wire::be16(u, 4) as usize;
                if udp_len < 8 || udp_len > len {
                    return false;
                }
                p.ports = Some((wire::be16(u, 0), wire::be16(u, 2)));
                p.tcp_flags = None;
            }
            IpProtocol::TCP => {
                let Some(t) = frame.get(l4..l4 + 20) else {
                    return false;
                };
                let header = (t[12] >> 4) as usize * 4;
                if header < 20 || header > len {
                    return false;
                }
                p.ports = Some((wire::be16(t, 0), wire::be16(t, 2)));
                p.tcp_flags = Some(TcpFlags(t[13]));
            }
            // ICMP, ICMPv6, GRE, ...: the upper-layer header is the later stages' to read.
            _ => {
                p.ports = None;
                p.tcp_flags = None;
            }
        }
        p.protocol = IpProtocol(protocol);
        true
    }

    #[inline(always)]
    fn ipv4_into(b: &[u8], l3: usize, p: &mut Parsed, ip_checksum: NicChecksum) -> wire::Result<()> {
        let ip = Ipv4Packet::new_checked(b)?;
        let checksum_ok = match ip_checksum {
            NicChecksum::Good => true,
            NicChecksum::Bad => false,
            NicChecksum::Unknown => ip.verify_checksum(),
        };
        if !checksum_ok {
            return Err(wire::Error::Malformed);
        }
        let fragment = ip.is_fragment().then(|| FragmentInfo {
            offset: ip.frag_offset(),
            more: ip.more_frags(),
            ident: ip.ident() as u32,
        });
        p.l3_offset = l3 as u16;
        p.l4_offset = (l3 + ip.header_len()) as u16;
        p.ip_end = offset(l3 + ip.total_len())?;
        p.version = IpVersion::V4;
        p.src = IpAddr::V4(ip.src_addr());
        p.dst = IpAddr::V4(ip.dst_addr());
        p.protocol = ip.protocol();
        p.hop_limit = ip.ttl();
        p.fragment = fragment;
        p.nic_hash_ok = fragment.is_none();
        Ok(())
    }

    /// IPv6 out of line: its extension-header walk would crowd the IPv4 path the compiler
    /// inlines into the pipeline.
    #[inline(never)]
    fn ipv6_into(b: &[u8], l3: usize, p: &mut Parsed) -> wire::Result<()> {
        let ip = Ipv6Packet::new_checked(b)?;
        let chain = ip.ext_chain()?;
        let fragment = chain
            .fragment
            .filter(|f| f.offset != 0 || f.more)
            .map(|f| FragmentInfo {
                offset: f.offset,
                more: f.more,
                ident: f.ident,
            });
        p.l3_offset = l3 as u16;
        p.l4_offset = offset(l3 + chain.upper_offset)?;
        p.ip_end = offset(l3 + ip.total_len())?;
        p.version = IpVersion::V6;
        p.src = IpAddr::V6(ip.src_addr());
        p.dst = IpAddr::V6(ip.dst_addr());
        p.protocol = chain.upper;
        p.hop_limit = ip.hop_limit();
        p.fragment = fragment;
        p.nic_hash_ok = chain.fragment.is_none();
        Ok(())
    }

    /// Whether the packet is a fragment.
    pub fn is_fragment(&self) -> bool {
        self.fragment.is_some()
    }

    /// Length of the upper-layer part: from `l4_offset` to `ip_end`.
    pub fn l4_len(&self) -> usize {
        (self.ip_end - self.l4_offset) as usize
    }
}

/// A frame offset as u16: frames fit a 2 KiB mbuf, but a 64 KiB IPv6 payload behind VLAN tags
/// could exceed u16 in theory; such a packet is refused rather than wrapped.
fn offset(v: usize) -> wire::Result<u16> {
    u16::try_from(v).map_err(|_| wire::Error::Unsupported)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::wire::{checksum, ethernet, tcp, udp, EthernetAddress, Ipv4Repr, Ipv6Repr};
    use std::net::{Ipv4Addr, Ipv6Addr};

    pub(crate) const MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
    pub(crate) const PEER: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);

    /// Ethernet + IPv4 (+ options) + `l4` bytes, checksums right.
    pub(crate) fn v4_frame(
        src: Ipv4Addr,
        dst: Ipv4Addr,
        proto: IpProtocol,
        options: &[u8],
        flags_frag: u16,
        l4: &[u8],
    ) -> Vec<u8> {
        let mut v = vec![0u8; 14 + 20];
        ethernet::emit_header(&mut v, MAC, PEER, EtherType::IPV4);
        Ipv4Repr {
            src,
            dst,
            protocol: proto,
            payload_len: (options.len() + l4.len()) as u16,
            ttl: 64,
            dscp_ecn: 0,
            ident: 0x1234,
            dont_frag: false,
        }
        .emit(&mut v[14..]);
        v.extend_from_slice(options);
        v.extend_from_slice(l4);
        v[14] = 0x40 | ((20 + options.len()) / 4) as u8;
        v[20..22].copy_from_slice(&flags_frag.to_be_bytes());
        v[24..26].copy_from_slice(&[0, 0]);
        let c = checksum::checksum(&v[14..34 + options.len()]);
        v[24..26].copy_from_slice(&c.to_be_bytes());
        v
    }

    /// Ethernet + IPv6 + extension header bytes + `l4`.
    pub(crate) fn v6_frame(
        src: Ipv6Addr,
        dst: Ipv6Addr,
        first: IpProtocol,
        exts: &[u8],
        hop_limit: u8,
        l4: &[u8],
    ) -> Vec<u8> {
        let mut v = vec![0u8; 14 + 40];
        ethernet::emit_header(&mut v, MAC, PEER, EtherType::IPV6);
        Ipv6Repr {
            src,
            dst,
            next_header: first,
            payload_len: (exts.len() + l4.len()) as u16,
            hop_limit,
        }
        .emit(&mut v[14..]);
        v.extend_from_slice(exts);
        v.extend_from_slice(l4);
        v
    }

    pub(crate) fn udp_bytes(sp: u16, dp: u16, payload: &[u8]) -> Vec<u8> {
        let mut u = vec![0u8; 8];
        udp::emit_header(&mut u, sp, dp, payload.len() as u16);
        u.extend_from_slice(payload);
        u
    }

    pub(crate) fn tcp_bytes(sp: u16, dp: u16, flags: TcpFlags) -> Vec<u8> {
        let mut t = vec![0u8; tcp::MIN_HEADER_LEN];
        t[0..2].copy_from_slice(&sp.to_be_bytes());
        t[2..4].copy_from_slice(&dp.to_be_bytes());
        t[12] = 0x50;
        t[13] = flags.0;
        t
    }

    const A: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);
    const B: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

    fn a6() -> Ipv6Addr {
        "2001:db8::7".parse().unwrap()
    }
    fn b6() -> Ipv6Addr {
        "2001:db8::1".parse().unwrap()
    }

    fn parse(v: &[u8]) -> wire::Result<Parsed> {
        Parsed::parse(v, &Toeplitz::default(), None)
    }

    #[test]
    fn ipv4_udp() {
        let mut v = v4_frame(A, B, IpProtocol::UDP, &[], 0, &udp_bytes(5000, 53, b"q"));
        v.extend_from_slice(&[0; 9]); // Ethernet padding
        let p = parse(&v).unwrap();
        assert_eq!(p.l3_offset, 14);
        assert_eq!(p.l4_offset, 34);
        assert_eq!(p.ip_end, 34 + 9);
        assert_eq!(p.l4_len(), 9);
        assert_eq!(p.version, IpVersion::V4);
        assert_eq!(p.ethertype, EtherType::IPV4);
        assert_eq!((p.src, p.dst), (IpAddr::V4(A), IpAddr::V4(B)));
        assert_eq!(p.protocol, IpProtocol::UDP);
        assert_eq!(p.hop_limit, 64);
        assert_eq!(p.ports, Some((5000, 53)));
        assert_eq!(p.tcp_flags, None);
        assert_eq!(p.fragment, None);
        assert_eq!(p.hash, Toeplitz::default().hash_v4(A, B, Some((5000, 53))));
        assert_eq!(p.vlan_id, None);
    }

    #[test]
    fn ipv4_tcp_with_options_and_vlan() {
        let opts = [1, 1, 1, 0]; // NOP NOP NOP EOL
        let v = v4_frame(
            A,
            B,
            IpProtocol::TCP,
            &opts,
            0x4000,
            &tcp_bytes(40000, 80, TcpFlags::SYN),
        );
        let mut t = v[..12].to_vec();
        t.extend_from_slice(&[0x81, 0x00, 0x00, 0x2a]);
        t.extend_from_slice(&v[12..]);
        let p = parse(&t).unwrap();
        assert_eq!(p.vlan_id, Some(42));
        assert_eq!(p.vlan_tags, 1);
        assert_eq!(p.l3_offset, 18);
        assert_eq!(p.l4_offset, 18 + 24);
        assert_eq!(p.ports, Some((40000, 80)));
        assert_eq!(p.tcp_flags, Some(TcpFlags::SYN));
    }

    /// The pipeline parses every packet into one place: whatever the previous packet left there
    /// (a TCP segment's flags, a fragment, the other family's addresses, VLAN tags, a hash) must
    /// not show through in the next packet's result.
    #[test]
    fn parsing_into_a_used_result_leaves_nothing_of_the_last_packet() {
        let tcp = v4_frame(
            A,
            B,
            IpProtocol::TCP,
            &[1, 1, 1, 0],
            0,
            &tcp_bytes(40000, 80, TcpFlags::SYN),
        );
        let mut tagged = tcp[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x2a]);
        tagged.extend_from_slice(&tcp[12..]);
        let frames = [
            tagged,
            v6_frame(
                a6(),
                b6(),
                IpProtocol::IPV6_FRAG,
                &[17u8, 0, 0, 9, 0, 0, 0, 5],
                9,
                &[0; 16],
            ),
            v4_frame(A, B, IpProtocol::UDP, &[], 0, &udp_bytes(5000, 53, b"q")),
            v4_frame(B, A, IpProtocol::UDP, &[], 0x2000 | 3, &[0; 8]),
            v6_frame(a6(), b6(), IpProtocol::UDP, &[], 64, &udp_bytes(7, 9, b"z")),
            v4_frame(A, B, IpProtocol::GRE, &[], 0, &[0; 4]),
        ];
        let mut reused = Parsed::EMPTY;
        reused.hash = 0xdead_beef;
        for (i, f) in frames.iter().chain(frames.iter().rev()).enumerate() {
            let e = EthernetFrame::new_checked(&f[..]).unwrap();
            let fresh = Parsed::parse_ip_unhashed(&e).unwrap();
            Parsed::parse_ip_into(&e, &mut reused, NicChecksum::Unknown).unwrap();
            assert_eq!(reused, fresh, "frame {i}");
        }
    }

    #[test]
    fn protocol_and_ethertype_numbers_print_as_before() {
        assert_eq!(format!("{:?}", IpProtocol::UDP), "Udp");
        assert_eq!(format!("{:?}", IpProtocol(200)), "Unknown(200)");
        assert_eq!(format!("{:?}", EtherType::IPV6), "Ipv6");
        assert_eq!(format!("{:?}", EtherType(0x6558)), "Unknown(0x6558)");
    }

    #[test]
    fn ipv4_fragments_hash_on_the_two_tuple() {
        let h = Toeplitz::default();
        let two = h.hash_v4(A, B, None);
        let first = v4_frame(A, B, IpProtocol::UDP, &[], 0x2000, &udp_bytes(1, 2, &[0; 16]));
        let p = Parsed::parse(&first, &h, Some(0xdead)).unwrap();
        assert_eq!(
            p.fragment,
            Some(FragmentInfo {
                offset: 0,
                more: true,
                ident: 0x1234
            })
        );
        assert!(p.fragment.unwrap().is_first());
        assert_eq!(p.ports, Some((1, 2)));
        assert_eq!(p.hash, two, "NIC hash ignored for fragments");
        let later = v4_frame(A, B, IpProtocol::UDP, &[], 3, &[9; 8]);
        let p = parse(&later).unwrap();
        assert_eq!(p.fragment.unwrap().offset, 24);
        assert!(!p.fragment.unwrap().more);
        assert_eq!(p.ports, None);
        assert_eq!(p.hash, two);
        // tiny first fragment: no ports, no error
        let tiny = v4_frame(A, B, IpProtocol::TCP, &[], 0x2000, &[0, 1]);
        assert_eq!(parse(&tiny).unwrap().ports, None);
    }

    #[test]
    fn nic_hash_used_when_equivalent() {
        let v = v4_frame(A, B, IpProtocol::UDP, &[], 0, &udp_bytes(1, 2, &[]));
        let h = Toeplitz::default();
        assert_eq!(Parsed::parse(&v, &h, Some(77)).unwrap().hash, 77);
        let sym = Toeplitz::new(&wire::toeplitz::MICROSOFT_KEY, true);
        let p = Parsed::parse(&v, &sym, Some(77)).unwrap();
        assert_eq!(p.hash, sym.hash_v4(A, B, Some((1, 2))));
        assert_eq!(p.hash, sym.hash_v4(B, A, Some((2, 1))));
    }

    #[test]
    fn ipv4_malformed() {
        let good = v4_frame(A, B, IpProtocol::UDP, &[], 0, &udp_bytes(1, 2, b"xy"));
        let m = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut v = good.clone();
            f(&mut v);
            parse(&v)
        };
        assert!(m(&|_| {}).is_ok());
        // bad checksum
        assert_eq!(m(&|v| v[25] ^= 1), Err(wire::Error::Malformed));
        // bad version
        assert_eq!(m(&|v| v[14] = 0x55), Err(wire::Error::Malformed));
        // bad IHL
        assert_eq!(m(&|v| v[14] = 0x44), Err(wire::Error::Malformed));
        // total length beyond the frame
        assert_eq!(m(&|v| v.truncate(v.len() - 1)), Err(wire::Error::Truncated));
        // UDP length beyond the datagram (checksum kept right)
        assert_eq!(
            m(&|v| {
                v[38..40].copy_from_slice(&20u16.to_be_bytes());
            }),
            Err(wire::Error::Truncated)
        );
        // not IP at all
        assert_eq!(
            m(&|v| v[12..14].copy_from_slice(&[0x88, 0xcc])),
            Err(wire::Error::Unsupported)
        );
    }

    #[test]
    fn ipv6_with_extension_headers_and_fragments() {
        let hbh = [60u8, 0, 1, 4, 0, 0, 0, 0];
        let dst = [17u8, 0, 1, 4, 0, 0, 0, 0];
        let mut exts = hbh.to_vec();
        exts.extend_from_slice(&dst);
        let v = v6_frame(a6(), b6(), IpProtocol::HOP_BY_HOP, &exts, 64, &udp_bytes(7, 9, b"z"));
        let p = parse(&v).unwrap();
        assert_eq!(p.version, IpVersion::V6);
        assert_eq!(p.l4_offset, 14 + 40 + 16);
        assert_eq!(p.ip_end as usize, v.len());
        assert_eq!(p.protocol, IpProtocol::UDP);
        assert_eq!(p.ports, Some((7, 9)));
        assert_eq!(p.fragment, None);
        assert_eq!(p.hash, Toeplitz::default().hash_v6(&a6(), &b6(), Some((7, 9))));

        let h = Toeplitz::default();
        let two = h.hash_v6(&a6(), &b6(), None);
        let frag_first = [17u8, 0, 0, 1, 0, 0, 0, 5];
        let v = v6_frame(
            a6(),
            b6(),
            IpProtocol::IPV6_FRAG,
            &frag_first,
            64,
            &udp_bytes(7, 9, &[0; 16]),
        );
        let p = Parsed::parse(&v, &h, Some(1)).unwrap();
        assert_eq!(
            p.fragment,
            Some(FragmentInfo {
                offset: 0,
                more: true,
                ident: 5
            })
        );
        assert_eq!(p.ports, Some((7, 9)));
        assert_eq!(p.hash, two);
        let frag_later = [17u8, 0, 0, 0x10, 0, 0, 0, 5];
        let v = v6_frame(a6(), b6(), IpProtocol::IPV6_FRAG, &frag_later, 64, &[1; 8]);
        let p = parse(&v).unwrap();
        assert_eq!(p.fragment.unwrap().offset, 16);
        assert_eq!(p.ports, None);
        assert_eq!(p.hash, two);
        // atomic fragment: not a fragment, ports read, software hash over the 4-tuple
        let atomic = [17u8, 0, 0, 0, 0, 0, 0, 5];
        let v = v6_frame(a6(), b6(), IpProtocol::IPV6_FRAG, &atomic, 64, &udp_bytes(7, 9, &[]));
        let p = Parsed::parse(&v, &h, Some(1)).unwrap();
        assert_eq!(p.fragment, None);
        assert_eq!(p.ports, Some((7, 9)));
        assert_eq!(p.hash, h.hash_v6(&a6(), &b6(), Some((7, 9))));
    }

    #[test]
    fn ipv6_malformed() {
        let opts = [60u8, 0, 1, 4, 0, 0, 0, 0];
        let long: Vec<u8> = opts.repeat(9);
        let v = v6_frame(a6(), b6(), IpProtocol::IPV6_OPTS, &long, 64, &[]);
        assert_eq!(parse(&v), Err(wire::Error::Malformed));
        let v = v6_frame(a6(), b6(), IpProtocol::IPV6_OPTS, &opts[..4], 64, &[]);
        assert_eq!(parse(&v), Err(wire::Error::Truncated));
        let mut v = v6_frame(a6(), b6(), IpProtocol::UDP, &[], 64, &udp_bytes(1, 2, &[]));
        v[14] = 0x70;
        assert_eq!(parse(&v), Err(wire::Error::Malformed));
        let mut v = v6_frame(a6(), b6(), IpProtocol::UDP, &[], 64, &udp_bytes(1, 2, &[]));
        v.pop();
        assert_eq!(parse(&v), Err(wire::Error::Truncated));
        // TCP data offset below 5 in an unfragmented segment
        let mut t = tcp_bytes(1, 2, TcpFlags::ACK);
        t[12] = 0x40;
        let v = v6_frame(a6(), b6(), IpProtocol::TCP, &[], 64, &t);
        assert_eq!(parse(&v), Err(wire::Error::Malformed));
    }
}

/// [`Parsed::parse_common_into`] against the general parser: whenever the fixed-offset parser
/// takes a frame, the general one takes it too and fills in exactly the same fields; and it
/// takes the common frames it exists for (IPv4 and IPv6, UDP and TCP).
#[cfg(test)]
mod fixed_offsets {
    use super::tests::{tcp_bytes, udp_bytes, v4_frame, v6_frame};
    use super::*;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn general(frame: &[u8], c: NicChecksum) -> Option<Parsed> {
        crate::fuzzing::parse_both_ways(frame, c).1
    }

    fn fixed(frame: &[u8], c: NicChecksum) -> Option<Parsed> {
        crate::fuzzing::parse_both_ways(frame, c).0
    }

    fn checksum_verdict(i: u8) -> NicChecksum {
        [NicChecksum::Unknown, NicChecksum::Good, NicChecksum::Bad][i as usize % 3]
    }

    /// The twelve common frames: 0 IPv4 UDP, 1 IPv4 TCP, 2 IPv6 UDP, 3 IPv6 TCP, 8 an ICMP
    /// and 10 an ICMPv6 Echo Request, and each of them behind an 802.1Q tag (VLAN 100, priority
    /// 5) with 4 added (`payload` bytes after the UDP, TCP or ICMP header). Bit 0 picks TCP,
    /// bit 1 IPv6, bit 2 the tag, bit 3 ICMP (over bit 0).
    fn common(kind: u8, payload: usize) -> Vec<u8> {
        let data = vec![0xab; payload];
        let (icmp, v6) = (kind & 8 != 0, kind & 2 != 0);
        let (proto, l4) = if icmp {
            let mut m = vec![if v6 { 128 } else { 8 }, 0, 0, 0, 0, 1, 0, 1];
            m.extend_from_slice(&data);
            (if v6 { IpProtocol::ICMPV6 } else { IpProtocol::ICMP }, m)
        } else if kind & 1 == 0 {
            (IpProtocol::UDP, udp_bytes(40000, 9, &data))
        } else {
            let mut t = tcp_bytes(40000, 9, TcpFlags::SYN);
            t.extend_from_slice(&data);
            (IpProtocol::TCP, t)
        };
        let mut f = if !v6 {
            v4_frame(
                Ipv4Addr::new(198, 51, 100, 7),
                Ipv4Addr::new(192, 0, 2, 1),
                proto,
                &[],
                0,
                &l4,
            )
        } else {
            let src: Ipv6Addr = "2001:db8::7".parse().unwrap();
            let dst: Ipv6Addr = "2001:db8::1".parse().unwrap();
            v6_frame(src, dst, proto, &[], 64, &l4)
        };
        if kind & 4 != 0 {
            f.splice(12..12, [0x81, 0x00, 0xa0, 100]);
        }
        f
    }

    #[test]
    fn takes_the_common_frames_and_agrees_on_them() {
        for kind in (0..16).filter(|k| k & 8 == 0 || k & 1 == 0) {
            for payload in [0, 1, 18, 1400] {
                let mut f = common(kind, payload);
                for c in [NicChecksum::Unknown, NicChecksum::Good] {
                    let p = fixed(&f, c).unwrap_or_else(|| panic!("common frame {kind}, {payload} bytes"));
                    assert_eq!(Some(p), general(&f, c));
                    let icmp = kind & 8 != 0;
                    assert_eq!(p.ports, (!icmp).then_some((40000, 9)));
                    assert_eq!(p.tcp_flags, (!icmp && kind & 1 == 1).then_some(TcpFlags::SYN));
                    assert_eq!(p.version, if kind & 2 == 0 { IpVersion::V4 } else { IpVersion::V6 });
                    assert_eq!(p.vlan_id, (kind & 4 != 0).then_some(100));
                    assert_eq!(p.ip_end as usize, f.len());
                }
                // Link-layer padding after the datagram: not part of it, for both.
                f.extend_from_slice(&[0; 7]);
                let p = fixed(&f, NicChecksum::Unknown).unwrap();
                assert_eq!(Some(p), general(&f, NicChecksum::Unknown));
                assert_eq!(p.ip_end as usize, f.len() - 7);
            }
        }
    }

    #[test]
    fn leaves_everything_else_to_the_general_parser() {
        let (a, b) = (Ipv4Addr::new(198, 51, 100, 7), Ipv4Addr::new(192, 0, 2, 1));
        // IPv4: a NIC-refused or wrong header checksum, cut short.
        let f = common(0, 4);
        assert!(fixed(&f, NicChecksum::Bad).is_none());
        let mut wrong = f.clone();
        wrong[24] ^= 1;
        assert!(fixed(&wrong, NicChecksum::Unknown).is_none());
        assert!(fixed(&f[..f.len() - 1], NicChecksum::Unknown).is_none());
        // Fragments, options.
        let frag = v4_frame(a, b, IpProtocol::UDP, &[], 0x2000, &udp_bytes(40000, 9, b"x"));
        assert!(fixed(&frag, NicChecksum::Unknown).is_none());
        let opts = v4_frame(a, b, IpProtocol::UDP, &[1, 1, 1, 0], 0, &udp_bytes(40000, 9, b"x"));
        assert!(fixed(&opts, NicChecksum::Unknown).is_none());
        assert!(general(&opts, NicChecksum::Unknown).is_some());
        // (Other upper layers are taken, unread: GRE's header is the decapsulation's to check.)
        let gre = v4_frame(a, b, IpProtocol::GRE, &[], 0, &[0; 8]);
        assert_eq!(fixed(&gre, NicChecksum::Unknown), general(&gre, NicChecksum::Unknown));
        assert!(fixed(&gre, NicChecksum::Unknown).is_some());
        // TCP with a data offset below 5 or past the segment.
        for off in [0x40, 0x60] {
            let mut t = tcp_bytes(1, 2, TcpFlags::ACK);
            t[12] = off;
            let f = v4_frame(a, b, IpProtocol::TCP, &[], 0, &t);
            assert!(fixed(&f, NicChecksum::Unknown).is_none());
            assert!(general(&f, NicChecksum::Unknown).is_none());
        }
        // IPv6 with an extension header (here a Fragment header), or a payload past the frame.
        let (s6, d6): (Ipv6Addr, Ipv6Addr) = ("2001:db8::7".parse().unwrap(), "2001:db8::1".parse().unwrap());
        let mut ext = vec![IpProtocol::UDP.0, 0, 0, 0, 0, 0, 0, 1];
        ext[2..4].copy_from_slice(&0u16.to_be_bytes());
        let f = v6_frame(s6, d6, IpProtocol::IPV6_FRAG, &ext, 64, &udp_bytes(1, 2, b"x"));
        assert!(fixed(&f, NicChecksum::Unknown).is_none());
        assert!(general(&f, NicChecksum::Unknown).is_some());
        for first in [IpProtocol::HOP_BY_HOP, IpProtocol::IPV6_ROUTE, IpProtocol::IPV6_OPTS] {
            // Next header UDP, 8 bytes long, PadN over the rest (a Routing header's type 0 with
            // no segments left is ignored the same way).
            let ext = [IpProtocol::UDP.0, 0, 1, 4, 0, 0, 0, 0];
            let f = v6_frame(s6, d6, first, &ext, 64, &udp_bytes(1, 2, b"x"));
            assert!(fixed(&f, NicChecksum::Unknown).is_none(), "{first:?}");
            assert_eq!(
                general(&f, NicChecksum::Unknown).map(|p| p.protocol),
                Some(IpProtocol::UDP)
            );
        }
        let f = common(2, 4);
        assert!(fixed(&f[..f.len() - 1], NicChecksum::Unknown).is_none());
        // Two tags (802.1ad outside 802.1Q), or an 802.1ad tag alone.
        let mut qinq = common(4, 4);
        qinq.splice(12..12, [0x88, 0xa8, 0x00, 0x07]);
        assert!(fixed(&qinq, NicChecksum::Unknown).is_none());
        assert_eq!(general(&qinq, NicChecksum::Unknown).map(|p| p.vlan_tags), Some(2));
        let mut stag = common(0, 4);
        stag.splice(12..12, [0x88, 0xa8, 0x00, 0x07]);
        assert!(fixed(&stag, NicChecksum::Unknown).is_none());
        assert!(general(&stag, NicChecksum::Unknown).is_some());
    }

    /// A datagram whose end is past what a frame offset (u16) holds: the general parser refuses
    /// it as unsupported and so must the fixed one (it once wrapped `ip_end` to a few bytes, and
    /// the pipeline's padding trim would have cut the datagram there).
    #[test]
    fn refuses_a_datagram_ending_past_a_u16_offset() {
        let big = v4_frame(
            Ipv4Addr::new(198, 51, 100, 7),
            Ipv4Addr::new(192, 0, 2, 1),
            IpProtocol::UDP,
            &[],
            0,
            &udp_bytes(40000, 9, &vec![0; 65535 - 28]),
        );
        assert_eq!(big.len(), 14 + 65535);
        assert!(fixed(&big, NicChecksum::Unknown).is_none());
        assert!(general(&big, NicChecksum::Unknown).is_none());
        let big6 = v6_frame(
            "2001:db8::7".parse().unwrap(),
            "2001:db8::1".parse().unwrap(),
            IpProtocol::UDP,
            &[],
            64,
            &udp_bytes(40000, 9, &vec![0; 65535 - 8]),
        );
        assert!(fixed(&big6, NicChecksum::Unknown).is_none());
        assert!(general(&big6, NicChecksum::Unknown).is_none());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]
        /// Frames near a common one (a few bytes of its Ethernet, IP and UDP or TCP headers
        /// changed, cut short or lengthened; any NIC verdict): whatever the fixed-offset parser
        /// takes, the general parser takes the same way.
        #[test]
        fn never_takes_what_the_general_parser_reads_otherwise(
            kind in 0u8..16,
            payload in 0usize..40,
            edits in proptest::collection::vec((0usize..78, any::<u8>()), 0..4),
            cut in 0usize..8,
            extra in 0usize..8,
            verdict in 0u8..3,
        ) {
            let mut f = common(kind, payload);
            for (at, b) in edits {
                if at < f.len() {
                    f[at] = b;
                }
            }
            f.truncate(f.len().saturating_sub(cut));
            f.extend(std::iter::repeat_n(0x5a, extra));
            let c = checksum_verdict(verdict);
            if let Some(p) = fixed(&f, c) {
                prop_assert_eq!(Some(p), general(&f, c));
            }
        }
    }
}
