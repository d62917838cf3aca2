//! Fragmentation for what the fast path sends (echo replies, GRE encapsulation): RFC 791 §3.2
//! for IPv4, RFC 8200 §4.5 for IPv6. Each fragment is built in a fresh buffer from the caller's
//! allocator; the datagram itself is only read.

use crate::buf::PacketBuf;
use crate::wire::{be16, checksum, EtherType, EthernetFrame, Ipv4Packet, Ipv6Packet};

/// Why a datagram could not be fragmented.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FragError {
    /// The frame is not Ethernet + a valid IP datagram of the expected version.
    Malformed,
    /// IPv4 with Don't Fragment set and larger than the MTU (the sender of the datagram should
    /// get an ICMP Fragmentation Needed, RFC 1191).
    DontFragment,
    /// The MTU leaves no room for 8 octets of data after the headers every fragment repeats.
    MtuTooSmall,
    /// An IPv6 packet that already has a Fragment header (RFC 8200 §4.5 allows one).
    AlreadyFragmented,
    /// The allocator returned no buffer, or one with too little tailroom. Fragments already
    /// emitted stay emitted (the receiver will time the datagram out).
    NoBuffer,
}

fn take_buf<B: PacketBuf>(alloc: &mut impl FnMut(usize) -> Option<B>, len: usize) -> Result<B, FragError> {
    let mut b = alloc(len).ok_or(FragError::NoBuffer)?;
    b.append(len).ok_or(FragError::NoBuffer)?;
    Ok(b)
}

/// Emits a copy of the datagram when it already fits.
fn whole<B: PacketBuf>(
    frame: &[u8],
    len: usize,
    alloc: &mut impl FnMut(usize) -> Option<B>,
    emit: &mut impl FnMut(B),
) -> Result<usize, FragError> {
    let mut b = take_buf(alloc, len)?;
    b.data_mut().copy_from_slice(&frame[..len]);
    emit(b);
    Ok(1)
}

/// Splits the IPv4 datagram in `frame` (Ethernet, VLAN tags allowed, then IPv4) into fragments
/// of at most `mtu` bytes of IP packet each, passed to `emit` in order; returns how many.
///
/// - A datagram that fits is emitted as one unchanged copy.
/// - DF set and too big: [`FragError::DontFragment`].
/// - Every fragment but the last carries a multiple of 8 data octets (RFC 791 §3.2); the first
///   keeps all options, the others only those with the copied flag (RFC 791 §3.1, "Options"),
///   padded with End of Option List to a 4-octet boundary.
/// - A datagram that is itself a fragment is refragmented: offsets add up and the last piece
///   keeps its MF flag (RFC 791 §3.2).
/// - Identification, TTL, protocol, addresses are copied; total length, flags and offset are
///   set and the header checksum computed per fragment.
pub fn fragment_v4<B: PacketBuf>(
    frame: &[u8],
    mtu: usize,
    alloc: &mut impl FnMut(usize) -> Option<B>,
    emit: &mut impl FnMut(B),
) -> Result<usize, FragError> {
    let eth = EthernetFrame::new_checked(frame).map_err(|_| FragError::Malformed)?;
    if eth.ethertype() != EtherType::IPV4 {
        return Err(FragError::Malformed);
    }
    let l3 = eth.header_len();
    let ip = Ipv4Packet::new_checked(&frame[l3..]).map_err(|_| FragError::Malformed)?;
    let (ihl, total) = (ip.header_len(), ip.total_len());
    if total <= mtu {
        return whole(frame, l3 + total, alloc, emit);
    }
    if ip.dont_frag() {
        return Err(FragError::DontFragment);
    }
    // Options copied into every fragment (copied flag, the type's top bit).
    let mut copied = [0u8; 40];
    let mut clen = 0;
    let opts = ip.options();
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            0 => break,
            1 => i += 1,
            ty => {
                let olen = *opts.get(i + 1).ok_or(FragError::Malformed)? as usize;
                if olen < 2 || i + olen > opts.len() {
                    return Err(FragError::Malformed);
                }
                if ty & 0x80 != 0 {
                    copied[clen..clen + olen].copy_from_slice(&opts[i..i + olen]);
                    clen += olen;
                }
                i += olen;
            }
        }
    }
    let rest_ihl = 20 + clen.div_ceil(4) * 4;
    let first_room = mtu.saturating_sub(ihl) & !7;
    let rest_room = mtu.saturating_sub(rest_ihl) & !7;
    if first_room < 8 || rest_room < 8 {
        return Err(FragError::MtuTooSmall);
    }
    let fw = be16(&frame[l3..], 6);
    let base = (fw & 0x1fff) as usize * 8;
    let orig_more = fw & 0x2000 != 0;
    let data = &frame[l3 + ihl..l3 + total];
    let mut off = 0;
    let mut n = 0;
    while off < data.len() {
        let (hl, room) = if off == 0 {
            (ihl, first_room)
        } else {
            (rest_ihl, rest_room)
        };
        let chunk = room.min(data.len() - off);
        let more = off + chunk < data.len() || orig_more;
        let mut b = take_buf(alloc, l3 + hl + chunk)?;
        let d = b.data_mut();
        d[..l3].copy_from_slice(&frame[..l3]);
        let h = &mut d[l3..l3 + hl];
        if off == 0 {
            h.copy_from_slice(&frame[l3..l3 + ihl]);
        } else {
            h[..20].copy_from_slice(&frame[l3..l3 + 20]);
            h[20..20 + clen].copy_from_slice(&copied[..clen]);
            h[20 + clen..].fill(0);
            h[0] = 0x40 | (hl / 4) as u8;
        }
        h[2..4].copy_from_slice(&((hl + chunk) as u16).to_be_bytes());
        let word = (fw & 0xc000) | if more { 0x2000 } else { 0 } | ((base + off) / 8) as u16;
        h[6..8].copy_from_slice(&word.to_be_bytes());
        h[10..12].copy_from_slice(&[0, 0]);
        let c = checksum::checksum(h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        d[l3 + hl..].copy_from_slice(&data[off..off + chunk]);
        emit(b);
        off += chunk;
        n += 1;
    }
    Ok(n)
}

/// Splits the IPv6 packet in `frame` (Ethernet, VLAN tags allowed, then IPv6) into fragments of
/// at most `mtu` bytes of IP packet each, with Fragment headers of identification `ident`
/// (RFC 8200 §4.5; the caller picks it, RFC 7739 says how), passed to `emit` in order; returns
/// how many.
///
/// - A packet that fits is emitted as one unchanged copy (no atomic fragments: RFC 8021).
/// - The unfragmentable part (the IPv6 header, then Hop-by-Hop Options, Destination Options
///   before a Routing header, and the Routing header) is repeated in every fragment, the Next
///   Header of its last header set to 44, followed by the Fragment header whose Next Header is
///   the first fragmentable header's; every fragment but the last carries a multiple of 8
///   octets of the fragmentable part.
/// - IPv6 has no DF: only the source fragments, which is what this is for.
pub fn fragment_v6<B: PacketBuf>(
    frame: &[u8],
    mtu: usize,
    ident: u32,
    alloc: &mut impl FnMut(usize) -> Option<B>,
    emit: &mut impl FnMut(B),
) -> Result<usize, FragError> {
    let eth = EthernetFrame::new_checked(frame).map_err(|_| FragError::Malformed)?;
    if eth.ethertype() != EtherType::IPV6 {
        return Err(FragError::Malformed);
    }
    let l3 = eth.header_len();
    let ip = Ipv6Packet::new_checked(&frame[l3..]).map_err(|_| FragError::Malformed)?;
    let total = ip.total_len();
    if total <= mtu {
        return whole(frame, l3 + total, alloc, emit);
    }
    let b = &frame[l3..l3 + total];
    // Find where the unfragmentable part ends: after the last Routing header, else after
    // Hop-by-Hop, else right after the fixed header (RFC 8200 §4.5).
    let (mut at, mut nh) = (40usize, b[6]);
    let (mut unfrag_end, mut unfrag_nh_at) = (40usize, 6usize);
    let mut count = 0;
    loop {
        match nh {
            0 | 43 | 60 => {
                if count == crate::wire::ipv6::MAX_EXT_HEADERS || total < at + 2 {
                    return Err(FragError::Malformed);
                }
                let len = (b[at + 1] as usize + 1) * 8;
                if total < at + len {
                    return Err(FragError::Malformed);
                }
                let (this, this_at) = (nh, at);
                nh = b[at];
                at += len;
                count += 1;
                if this != 60 {
                    unfrag_end = at;
                    unfrag_nh_at = this_at;
                }
            }
            44 => return Err(FragError::AlreadyFragmented),
            _ => break,
        }
    }
    let frag_next = b[unfrag_nh_at];
    let room = mtu.saturating_sub(unfrag_end + 8) & !7;
    if room < 8 {
        return Err(FragError::MtuTooSmall);
    }
    let data = &b[unfrag_end..];
    let mut off = 0;
    let mut n = 0;
    while off < data.len() {
        let chunk = room.min(data.len() - off);
        let more = off + chunk < data.len();
        let hdr = l3 + unfrag_end;
        let mut out = take_buf(alloc, hdr + 8 + chunk)?;
        let d = out.data_mut();
        d[..hdr].copy_from_slice(&frame[..hdr]);
        d[l3 + unfrag_nh_at] = 44;
        let plen = (unfrag_end - 40 + 8 + chunk) as u16;
        d[l3 + 4..l3 + 6].copy_from_slice(&plen.to_be_bytes());
        let fh = &mut d[hdr..hdr + 8];
        fh[0] = frag_next;
        fh[1] = 0;
        fh[2..4].copy_from_slice(&(off as u16 | more as u16).to_be_bytes());
        fh[4..8].copy_from_slice(&ident.to_be_bytes());
        d[hdr + 8..].copy_from_slice(&data[off..off + chunk]);
        emit(out);
        off += chunk;
        n += 1;
    }
    Ok(n)
}
