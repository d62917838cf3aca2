//! The virtio-net header a TAP device opened with `IFF_VNET_HDR` puts before every frame, and
//! the two offloads it carries, free of DPDK and of system calls (the kernel interface's own
//! backend, `dpdk::tap`, does the I/O):
//!
//! - **Into the kernel, coalescing (GRO).** [`coalesce`] finds, at the front of a burst, a run
//!   of in-order TCP segments of one flow that Linux's own GRO would merge, and builds the
//!   header of ONE frame for them: the first segment's headers with the lengths of the whole,
//!   and a virtio-net header that says "TCP segmentation, this MSS, checksum to complete". The
//!   payloads are written after it as they are (one `writev`, no copy): the kernel sees one
//!   64 KB skb where it would have taken ~44 one by one. The rules are conservative: same
//!   4-tuple and IP header apart from length/ID/checksum, IPv4 IDs consecutive, no IP options
//!   or IPv6 extension headers, TCP flags ACK (PSH only on the last), same ACK, window and
//!   option bytes (none, or a timestamp), contiguous sequence numbers, payloads of the first
//!   one's size (even) except a shorter last. The frame's TCP checksum is derived from the
//!   segments' own (each one's payload sum is what its checksum leaves once its pseudo-header
//!   and header are taken out, RFC 1624 arithmetic), never from a pass over the payload; the
//!   frame is not marked `NEEDS_CSUM` or `DATA_VALID`, so the kernel verifies it as it verified
//!   each segment, and a corrupt segment fails the whole frame. Measured: verifying each
//!   segment in user space first cost the worker as much as the system calls it saved.
//!   Anything else is written alone behind a zero header.
//! - **Out of the kernel, segmentation (TSO).** [`segment`] cuts a frame the kernel handed us
//!   with a GSO header into MSS-sized segments, each with its lengths, IPv4 ID (incremented per
//!   segment), sequence number, flags (CWR on the first only, FIN and PSH on the last only) and
//!   checksums computed; a frame without GSO gets its partial checksum completed.

use crate::buf::PacketBuf;
use crate::wire::checksum;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Bytes of `struct virtio_net_hdr` (no `num_buffers`): what `TUNSETVNETHDRSZ` is set to.
pub const HDR_LEN: usize = 10;
/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the checksum from `csum_start` on is to be completed; the
/// field holds the pseudo-header's sum.
pub const F_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_F_DATA_VALID`: the checksums were verified.
pub const F_DATA_VALID: u8 = 2;
/// `VIRTIO_NET_HDR_GSO_NONE`.
pub const GSO_NONE: u8 = 0;
/// `VIRTIO_NET_HDR_GSO_TCPV4`.
pub const GSO_TCPV4: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_TCPV6`.
pub const GSO_TCPV6: u8 = 4;
/// `VIRTIO_NET_HDR_GSO_ECN`: the TCP segments carry CWR (on the first only).
pub const GSO_ECN: u8 = 0x80;

/// Segments one coalesced frame holds at most (a burst is 32; the write's iovecs are this
/// plus the header).
pub const MAX_SEGMENTS: usize = 64;
/// Room for the header of a coalesced frame: virtio-net, Ethernet, IPv6 (the larger, no
/// extension) and TCP with the largest options.
pub const HEAD_MAX: usize = HDR_LEN + 14 + 40 + 60;
/// The read buffer behind the header: a GSO frame's 64 KB (the TAP device's `gso_max_size`)
/// plus Ethernet and a VLAN tag, with room to spare.
pub const FRAME_MAX: usize = 65536 + 64;

const ETH_LEN: usize = 14;
const TCP: u8 = 6;
const FIN: u8 = 0x01;
const PSH: u8 = 0x08;
const ACK: u8 = 0x10;
const CWR: u8 = 0x80;
/// Offset of the TCP checksum field in its header.
const TCP_CSUM: usize = 16;

/// `struct virtio_net_hdr`, in the host's byte order (a legacy header: the TAP device uses the
/// native order unless told otherwise).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VnetHdr {
    /// `F_*`.
    pub flags: u8,
    /// `GSO_*`.
    pub gso_type: u8,
    /// Bytes of headers (Ethernet to TCP) in a GSO frame.
    pub hdr_len: u16,
    /// Payload bytes per segment.
    pub gso_size: u16,
    /// Where the checksummed part starts (from the frame's start).
    pub csum_start: u16,
    /// Where the checksum field is in it.
    pub csum_offset: u16,
}

impl VnetHdr {
    /// From the first [`HDR_LEN`] bytes of `b`.
    pub fn parse(b: &[u8]) -> Option<VnetHdr> {
        let b = b.get(..HDR_LEN)?;
        let w = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        Some(VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: w(2),
            gso_size: w(4),
            csum_start: w(6),
            csum_offset: w(8),
        })
    }

    /// Into the first [`HDR_LEN`] bytes of `out`.
    pub fn write(&self, out: &mut [u8]) {
        out[0] = self.flags;
        out[1] = self.gso_type;
        out[2..4].copy_from_slice(&self.hdr_len.to_ne_bytes());
        out[4..6].copy_from_slice(&self.gso_size.to_ne_bytes());
        out[6..8].copy_from_slice(&self.csum_start.to_ne_bytes());
        out[8..10].copy_from_slice(&self.csum_offset.to_ne_bytes());
    }
}

#[inline]
fn be16(b: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([b[i], b[i + 1]])
}

#[inline]
fn be32(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

fn v4_addrs(ip: &[u8]) -> (Ipv4Addr, Ipv4Addr) {
    let a = |i: usize| Ipv4Addr::new(ip[i], ip[i + 1], ip[i + 2], ip[i + 3]);
    (a(12), a(16))
}

fn v6_addrs(ip: &[u8]) -> (Ipv6Addr, Ipv6Addr) {
    let a = |i: usize| {
        let mut o = [0u8; 16];
        o.copy_from_slice(&ip[i..i + 16]);
        Ipv6Addr::from(o)
    };
    (a(8), a(24))
}

/// The pseudo-header's partial sum for `tcp_len` bytes of TCP in the IP packet at `ip`.
fn pseudo(v6: bool, ip: &[u8], tcp_len: usize) -> u32 {
    if v6 {
        let (s, d) = v6_addrs(ip);
        checksum::pseudo_v6(&s, &d, TCP, tcp_len as u32)
    } else {
        let (s, d) = v4_addrs(ip);
        checksum::pseudo_v4(s, d, TCP, tcp_len as u16)
    }
}

/// A TCP segment that may be coalesced: where its parts are.
#[derive(Clone, Copy, Debug)]
struct Seg {
    v6: bool,
    /// Offset of the TCP header.
    l4: usize,
    /// Offset of the payload (headers' length).
    hl: usize,
    /// End of the IP packet (Ethernet padding excluded).
    end: usize,
    seq: u32,
    flags: u8,
    /// IPv4 identification.
    id: u16,
}

impl Seg {
    fn payload(&self) -> usize {
        self.end - self.hl
    }
}

/// `frame` as a segment coalescing may take: untagged Ethernet, IPv4 without options or
/// fragmentation or IPv6 without extension headers, TCP with ACK (and PSH) only, no options or
/// a timestamp alone, a payload, and a right IPv4 header checksum (the header is rewritten).
fn seg_of(frame: &[u8]) -> Option<Seg> {
    let ethertype = be16(frame.get(..ETH_LEN)?, 12);
    let (v6, l4, end) = match ethertype {
        0x0800 => {
            let ip = frame.get(ETH_LEN..ETH_LEN + 20)?;
            // Version 4, no options; not a fragment (MF clear, offset 0).
            if ip[0] != 0x45 || ip[9] != TCP || be16(ip, 6) & 0x3fff != 0 || !checksum::verify(ip) {
                return None;
            }
            (false, ETH_LEN + 20, ETH_LEN + be16(ip, 2) as usize)
        }
        0x86dd => {
            let ip = frame.get(ETH_LEN..ETH_LEN + 40)?;
            if ip[0] >> 4 != 6 || ip[6] != TCP {
                return None;
            }
            (true, ETH_LEN + 40, ETH_LEN + 40 + be16(ip, 4) as usize)
        }
        _ => return None,
    };
    let tcp = frame.get(l4..end)?;
    let thl = (*tcp.get(12)? >> 4) as usize * 4;
    let flags = tcp[13];
    if tcp.len() <= thl || thl < 20 || flags & !(ACK | PSH) != 0 || flags & ACK == 0 || be16(tcp, 18) != 0 {
        return None;
    }
    // No options, or NOP NOP TIMESTAMP alone: what Linux's own segments carry.
    let opts_ok = thl == 20 || (thl == 32 && tcp[20..24] == [1, 1, 8, 10]);
    if !opts_ok {
        return None;
    }
    Some(Seg {
        v6,
        l4,
        hl: l4 + thl,
        end,
        seq: be32(tcp, 4),
        flags,
        id: be16(frame, ETH_LEN + 4),
    })
}

/// Whether `b` continues `prev` (which follows `first`, of `a`'s frame) in the same flow:
/// same addresses, header fields and options, consecutive IDs and sequence numbers.
fn continues(a: &[u8], first: &Seg, prev: &Seg, b: &[u8], next: &Seg) -> bool {
    let mss = first.payload();
    if next.v6 != first.v6 || next.hl != first.hl || prev.flags & PSH != 0 || prev.payload() != mss {
        return false;
    }
    if next.payload() > mss || next.seq != prev.seq.wrapping_add(mss as u32) {
        return false;
    }
    let (ia, ib) = (&a[ETH_LEN..], &b[ETH_LEN..]);
    let ip_same = if first.v6 {
        // Version, class, flow label; next header, hop limit; addresses.
        ia[0..4] == ib[0..4] && ia[6..40] == ib[6..40]
    } else {
        // Version, IHL, TOS; flags; TTL, protocol; addresses. The ID the next one.
        ia[0..2] == ib[0..2] && ia[6..10] == ib[6..10] && ia[12..20] == ib[12..20] && next.id == prev.id.wrapping_add(1)
    };
    // Ethernet; ports; ACK, offset, window, urgent and options (not seq, flags, checksum).
    let (ta, tb) = (&a[first.l4..first.hl], &b[next.l4..next.hl]);
    ip_same
        && a[..ETH_LEN] == b[..ETH_LEN]
        && ta[0..4] == tb[0..4]
        && ta[8..13] == tb[8..13]
        && ta[14..16] == tb[14..16]
        && ta[18..] == tb[18..]
}

/// The one's complement sum of segment `s`'s payload as its checksum states it: what is left
/// of the all-ones total once its pseudo-header and header (checksum field included) are taken
/// out. Wrong if the segment is corrupt, and then so is the coalesced frame's checksum.
fn payload_sum_of(frame: &[u8], s: &Seg) -> u32 {
    let tcp = &frame[s.l4..s.end];
    let known = checksum::sum(pseudo(s.v6, &frame[ETH_LEN..], tcp.len()), &tcp[..s.hl - s.l4]);
    !checksum::fold(known) as u32
}

/// A run of packets at the front of a burst to write as one frame ([`coalesce`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// Packets in it (1: written alone).
    pub count: usize,
    /// Bytes of the head to write first: the virtio-net header, and for a run of more than one
    /// the coalesced frame's headers.
    pub head_len: usize,
    /// Where each packet's part starts: 0 alone (the whole frame), else the payload's offset.
    pub from: usize,
}

impl Run {
    /// The bytes of packet `frame` (one of the run) written after the head.
    pub fn part<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        if self.count == 1 {
            return frame;
        }
        let ip = &frame[ETH_LEN..];
        let end = if frame[12] == 0x86 {
            ETH_LEN + 40 + be16(ip, 4) as usize
        } else {
            ETH_LEN + be16(ip, 2) as usize
        };
        &frame[self.from..end]
    }
}

/// The run at the front of `pkts` (not empty) and its head, written into `head`: the longest
/// run of TCP segments Linux's GRO would merge (module docs), at most [`MAX_SEGMENTS`] and 64 KB
/// of IP; else the first packet alone behind a zero header.
pub fn coalesce<B: PacketBuf>(pkts: &[B], head: &mut [u8; HEAD_MAX]) -> Run {
    let alone = |head: &mut [u8; HEAD_MAX]| {
        head[..HDR_LEN].fill(0);
        Run {
            count: 1,
            head_len: HDR_LEN,
            from: 0,
        }
    };
    let Some(p0) = pkts.first() else {
        return alone(head);
    };
    if pkts.len() < 2 {
        return alone(head);
    }
    let a = p0.data();
    let Some(first) = seg_of(a) else {
        return alone(head);
    };
    let ip_hdr = first.l4 - ETH_LEN;
    let thl = first.hl - first.l4;
    let mut prev = first;
    let mut count = 1;
    let mut payload = first.payload();
    let mut payload_sum = payload_sum_of(a, &first);
    for p in &pkts[1..pkts.len().min(MAX_SEGMENTS)] {
        let b = p.data();
        let Some(next) = seg_of(b) else {
            break;
        };
        let ip_len = if first.v6 { 0 } else { ip_hdr } + thl + payload + next.payload();
        if ip_len > 65535 || !continues(a, &first, &prev, b, &next) {
            break;
        }
        payload += next.payload();
        payload_sum += payload_sum_of(b, &next);
        count += 1;
        prev = next;
    }
    if count == 1 || first.payload() % 2 != 0 {
        // An odd MSS would put the next payloads' words across segment boundaries.
        return alone(head);
    }
    // The coalesced frame's headers: the first segment's, with the lengths of the whole and
    // the last one's PSH; IPv4's checksum recomputed, TCP's from the payloads' sums.
    let hl = first.hl;
    let h = &mut head[HDR_LEN..HDR_LEN + hl];
    h.copy_from_slice(&a[..hl]);
    let tcp_len = thl + payload;
    {
        let ip = &mut h[ETH_LEN..];
        if first.v6 {
            ip[4..6].copy_from_slice(&(tcp_len as u16).to_be_bytes());
        } else {
            ip[2..4].copy_from_slice(&((ip_hdr + tcp_len) as u16).to_be_bytes());
            ip[10..12].fill(0);
            let c = checksum::checksum(&ip[..ip_hdr]);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
        }
    }
    let pseudo_sum = pseudo(first.v6, &h[ETH_LEN..], tcp_len);
    let tcp = &mut h[first.l4..];
    tcp[13] |= prev.flags & PSH;
    tcp[TCP_CSUM..TCP_CSUM + 2].fill(0);
    let c = checksum::finish(checksum::sum(pseudo_sum + payload_sum, tcp));
    tcp[TCP_CSUM..TCP_CSUM + 2].copy_from_slice(&c.to_be_bytes());
    VnetHdr {
        flags: 0,
        gso_type: if first.v6 { GSO_TCPV6 } else { GSO_TCPV4 },
        hdr_len: hl as u16,
        gso_size: first.payload() as u16,
        csum_start: 0,
        csum_offset: 0,
    }
    .write(&mut head[..HDR_LEN]);
    Run {
        count,
        head_len: HDR_LEN + hl,
        from: hl,
    }
}

/// Why a frame the kernel wrote was not sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutError {
    /// Its header or headers make no sense (or ask for an offload we did not offer).
    Malformed,
    /// No buffer for it or one of its segments.
    NoBuffer,
}

/// The frame `frame` the kernel wrote behind `hdr`, as packets to send, appended to `out`
/// (buffers from `alloc(len)`): cut into segments if `hdr` asks for TCP segmentation, else one
/// packet with its partial checksum completed. Returns how many; on an error nothing of the
/// frame is left in `out`.
pub fn segment<B: PacketBuf>(
    hdr: &VnetHdr,
    frame: &[u8],
    mut alloc: impl FnMut(usize) -> Option<B>,
    out: &mut Vec<B>,
) -> Result<usize, CutError> {
    let before = out.len();
    let r = if hdr.gso_type == GSO_NONE {
        whole(hdr, frame, &mut alloc, out)
    } else {
        cut(hdr, frame, &mut alloc, out)
    };
    if r.is_err() {
        out.truncate(before);
    }
    r
}

/// `frame` in one buffer, its partial checksum completed.
fn whole<B: PacketBuf>(
    hdr: &VnetHdr,
    frame: &[u8],
    alloc: &mut impl FnMut(usize) -> Option<B>,
    out: &mut Vec<B>,
) -> Result<usize, CutError> {
    let mut m = alloc(frame.len()).ok_or(CutError::NoBuffer)?;
    if !m.set_len(frame.len()) {
        return Err(CutError::NoBuffer);
    }
    let d = m.data_mut();
    d.copy_from_slice(frame);
    if hdr.flags & F_NEEDS_CSUM != 0 {
        let (start, off) = (hdr.csum_start as usize, hdr.csum_offset as usize);
        if start + off + 2 > d.len() {
            return Err(CutError::Malformed);
        }
        // The field holds the pseudo-header's sum: the sum from `start` on includes it. A zero
        // result is sent as all ones (what Linux's own completion does; UDP's "no checksum").
        let c = match checksum::finish(checksum::sum(0, &d[start..])) {
            0 => 0xffff,
            c => c,
        };
        d[start + off..start + off + 2].copy_from_slice(&c.to_be_bytes());
    }
    out.push(m);
    Ok(1)
}

/// The TCP segments of a GSO frame.
fn cut<B: PacketBuf>(
    hdr: &VnetHdr,
    frame: &[u8],
    alloc: &mut impl FnMut(usize) -> Option<B>,
    out: &mut Vec<B>,
) -> Result<usize, CutError> {
    let v6 = match hdr.gso_type & !GSO_ECN {
        GSO_TCPV4 => false,
        GSO_TCPV6 => true,
        _ => return Err(CutError::Malformed),
    };
    let bad = CutError::Malformed;
    let ethertype = be16(frame.get(..ETH_LEN).ok_or(bad)?, 12);
    let l4 = match (v6, ethertype) {
        (false, 0x0800) => {
            let ihl = (*frame.get(ETH_LEN).ok_or(bad)? & 0x0f) as usize * 4;
            if ihl < 20 || frame.get(ETH_LEN + 9) != Some(&TCP) {
                return Err(bad);
            }
            ETH_LEN + ihl
        }
        (true, 0x86dd) if frame.get(ETH_LEN + 6) == Some(&TCP) => ETH_LEN + 40,
        _ => return Err(bad),
    };
    let thl = (*frame.get(l4 + 12).ok_or(bad)? >> 4) as usize * 4;
    let hl = l4 + thl;
    let mss = hdr.gso_size as usize;
    if thl < 20 || hl > frame.len() || mss == 0 {
        return Err(bad);
    }
    let (headers, payload) = frame.split_at(hl);
    if payload.len() <= mss {
        // One segment's worth: sent whole, its checksum computed.
        let mut m = alloc(frame.len()).ok_or(CutError::NoBuffer)?;
        if !m.set_len(frame.len()) {
            return Err(CutError::NoBuffer);
        }
        m.data_mut().copy_from_slice(frame);
        fill_lengths(m.data_mut(), v6, l4, thl + payload.len());
        finish_tcp(m.data_mut(), v6, l4);
        out.push(m);
        return Ok(1);
    }
    let seq0 = be32(headers, l4 + 4);
    let id0 = be16(headers, ETH_LEN + 4);
    let flags0 = headers[l4 + 13];
    let n = payload.len().div_ceil(mss);
    for (k, chunk) in payload.chunks(mss).enumerate() {
        let len = hl + chunk.len();
        let mut m = alloc(len).ok_or(CutError::NoBuffer)?;
        if !m.set_len(len) {
            return Err(CutError::NoBuffer);
        }
        let d = m.data_mut();
        d[..hl].copy_from_slice(headers);
        d[hl..].copy_from_slice(chunk);
        if !v6 {
            d[ETH_LEN + 4..ETH_LEN + 6].copy_from_slice(&id0.wrapping_add(k as u16).to_be_bytes());
        }
        fill_lengths(d, v6, l4, thl + chunk.len());
        let tcp = &mut d[l4..];
        tcp[4..8].copy_from_slice(&seq0.wrapping_add((k * mss) as u32).to_be_bytes());
        let mut f = flags0;
        if k > 0 {
            f &= !CWR;
        }
        if k + 1 < n {
            f &= !(FIN | PSH);
        }
        tcp[13] = f;
        finish_tcp(d, v6, l4);
        out.push(m);
    }
    Ok(n)
}

/// Sets the IP length fields (and IPv4's checksum) for `tcp_len` bytes of TCP.
fn fill_lengths(d: &mut [u8], v6: bool, l4: usize, tcp_len: usize) {
    let ip = &mut d[ETH_LEN..l4];
    if v6 {
        ip[4..6].copy_from_slice(&(tcp_len as u16).to_be_bytes());
    } else {
        let ihl = ip.len();
        ip[2..4].copy_from_slice(&((ihl + tcp_len) as u16).to_be_bytes());
        ip[10..12].fill(0);
        let c = checksum::checksum(ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
    }
}

/// Computes the TCP checksum of the segment from `l4` to the end of `d`.
fn finish_tcp(d: &mut [u8], v6: bool, l4: usize) {
    let tcp_len = d.len() - l4;
    d[l4 + TCP_CSUM..l4 + TCP_CSUM + 2].fill(0);
    let s = checksum::sum(pseudo(v6, &d[ETH_LEN..], tcp_len), &d[l4..]);
    let c = checksum::finish(s);
    d[l4 + TCP_CSUM..l4 + TCP_CSUM + 2].copy_from_slice(&c.to_be_bytes());
}

#[cfg(test)]
mod tests;
