//! DPDK's own IPv4/IPv6 reassembly (librte_ip_frag), safe: the anchor the macro benchmark runs
//! beside fastpathd's reassembly (`crate::pipeline::reasm`) on the same captures
//! (`benches/examples/ip_frag_anchor.rs`). The daemon does not use it.
//!
//! Driven as DPDK's `examples/ip_reassembly/main.c` drives it (DPDK 22.11): per received
//! packet, if it is a fragment set `l2_len`/`l3_len` and hand it to
//! `rte_ipv{4,6}_frag_reassemble_packet` with the arrival TSC; what the table drops goes to
//! the death row, freed with `rte_ip_frag_free_death_row` after every burst.

use super::{Error, Mbuf, Result};
use crate::buf::PacketBuf;
use std::ptr::NonNull;

const ETHER_HDR: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const IPV6_HDR: usize = 40;
const IPV6_FRAG_EXT: usize = 8;
/// IPv6's Fragment header (RFC 8200 §4.5).
const IPPROTO_FRAGMENT: u8 = 44;
/// How many mbufs ahead `rte_ip_frag_free_death_row` prefetches (`PREFETCH_OFFSET` in DPDK's
/// examples/ip_reassembly/main.c).
const DEATH_ROW_PREFETCH: u32 = 3;

/// What the table did with one packet.
pub enum Reassembly {
    /// Not an IP fragment (or too short to be one): handed back untouched.
    NotFragment(Mbuf),
    /// A fragment the table now holds, or dropped onto the death row.
    Taken,
    /// The fragment completed its datagram: the reassembled packet (a chain of the fragments'
    /// mbufs, `l2_len`/`l3_len` set).
    Complete(Mbuf),
}

/// One lcore's reassembly table and death row (`rte_ip_frag_tbl` is not thread-safe: neither
/// `Send` nor `Sync`, so it stays on the lcore that made it).
pub struct IpFragTable {
    tbl: NonNull<dpdk_sys::rte_ip_frag_tbl>,
    dr: Box<dpdk_sys::rte_ip_frag_death_row>,
    /// Free the death row before a packet once it holds more than this (each call adds at most
    /// one datagram's fragments plus the packet itself).
    dr_limit: u32,
    /// Mbufs freed from the death row so far: fragments the table dropped (duplicates, no room,
    /// timed out, too many fragments, ...).
    dropped: u64,
}

impl IpFragTable {
    /// `rte_ip_frag_table_create(bucket_num, bucket_entries, max_entries, max_cycles,
    /// SOCKET_ID_ANY)`: at most `max_entries` datagrams pending, each kept at most `max_cycles`
    /// TSC cycles after its first fragment arrived. `bucket_entries` must be a power of two and
    /// `max_entries` at most `bucket_num × bucket_entries` rounded up to a power of two.
    pub fn new(bucket_num: u32, bucket_entries: u32, max_entries: u32, max_cycles: u64) -> Result<IpFragTable> {
        // SAFETY: plain values; the table is allocated with rte_zmalloc (EAL started by the
        // caller, or it returns NULL), NULL handled below.
        let tbl = unsafe {
            dpdk_sys::rte_ip_frag_table_create(
                bucket_num,
                bucket_entries,
                max_entries,
                max_cycles,
                dpdk_sys::SOCKET_ID_ANY,
            )
        };
        let tbl = NonNull::new(tbl).ok_or_else(|| {
            Error::new(
                format!("rte_ip_frag_table_create({bucket_num} buckets x {bucket_entries}, {max_entries} entries)"),
                libc::EINVAL,
            )
        })?;
        // SAFETY: plain getters of compile-time constants.
        let (row, max_frag) = unsafe {
            (
                dpdk_sys::fp_ip_frag_death_row_mbuf_len(),
                dpdk_sys::fp_ip_frag_max_frag(),
            )
        };
        Ok(IpFragTable {
            tbl,
            dr: Box::default(),
            dr_limit: row.saturating_sub(max_frag + 1),
            dropped: 0,
        })
    }

    /// Mbufs the table has dropped (freed from the death row) so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Hands `m` to the table if it is an IPv4 fragment or an IPv6 packet whose first extension
    /// header is a Fragment header (what `rte_ipv6_frag_get_ipv6_fragment_header` looks at), on
    /// plain Ethernet; `tsc` is its arrival time. A fragment whose lengths do not fit its
    /// frame is not handed over (DPDK's reassembly trusts them).
    pub fn reassemble(&mut self, mut m: Mbuf, tsc: u64) -> Reassembly {
        if m.segments() != 1 {
            return Reassembly::NotFragment(m);
        }
        let Some((v6, l3_len)) = classify(m.data()) else {
            return Reassembly::NotFragment(m);
        };
        if self.dr.cnt > self.dr_limit {
            self.free_death_row();
        }
        let raw = m.as_mut_ptr();
        let ip = m.data_mut()[ETHER_HDR..].as_mut_ptr();
        // SAFETY: `raw` is the mbuf we own; setting two header-length fields.
        unsafe { dpdk_sys::fp_mbuf_set_l2_l3_len(raw, ETHER_HDR as u16, l3_len as u16) };
        let m = m.into_raw().as_ptr();
        // SAFETY: the table and death row are ours (this lcore's); `m` is an owned
        // single-segment mbuf whose l2_len/l3_len are set and whose first segment holds the
        // whole IP header (checked above) at `ip`, inside the mbuf, with total lengths within
        // the frame; the death row has room for what one call adds (freed above when it had
        // not). The table takes `m`: it returns NULL (held, or put on the death row) or the
        // reassembled chain, which we then own.
        let out = unsafe {
            if v6 {
                let ip6 = ip as *mut dpdk_sys::rte_ipv6_hdr;
                let frag = dpdk_sys::fp_ipv6_frag_get_ipv6_fragment_header(ip6);
                dpdk_sys::rte_ipv6_frag_reassemble_packet(self.tbl.as_ptr(), &mut *self.dr, m, tsc, ip6, frag)
            } else {
                dpdk_sys::rte_ipv4_frag_reassemble_packet(
                    self.tbl.as_ptr(),
                    &mut *self.dr,
                    m,
                    tsc,
                    ip as *mut dpdk_sys::rte_ipv4_hdr,
                )
            }
        };
        match NonNull::new(out) {
            // SAFETY: a non-NULL return is the reassembled packet, handed to us.
            Some(done) => Reassembly::Complete(unsafe { Mbuf::from_raw(done) }),
            None => Reassembly::Taken,
        }
    }

    /// Frees what the table dropped (`rte_ip_frag_free_death_row`): call once per burst, as
    /// DPDK's example does. Returns how many mbufs were freed.
    pub fn free_death_row(&mut self) -> u32 {
        let n = self.dr.cnt;
        if n > 0 {
            // SAFETY: the death row holds `cnt` mbufs the table gave up, ours to free; the call
            // frees them and resets `cnt`.
            unsafe { dpdk_sys::rte_ip_frag_free_death_row(&mut *self.dr, DEATH_ROW_PREFETCH) };
            self.dropped += u64::from(n);
        }
        n
    }
}

/// Whether the Ethernet frame `data` is a fragment DPDK's table takes, and which: `(is IPv6,
/// l3_len)`. IPv4: a fragment by `rte_ipv4_frag_pkt_is_fragmented` (MF set or an offset), header
/// and total length within the frame. IPv6: next header 44 (Fragment) right after the fixed
/// header, the only place `rte_ipv6_frag_get_ipv6_fragment_header` looks, payload within the frame.
fn classify(data: &[u8]) -> Option<(bool, usize)> {
    if data.len() < ETHER_HDR + 20 {
        return None;
    }
    let l3 = &data[ETHER_HDR..];
    match u16::from_be_bytes([data[12], data[13]]) {
        ETHERTYPE_IPV4 => {
            let ihl = usize::from(l3[0] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([l3[2], l3[3]]));
            if l3[0] >> 4 != 4 || ihl < 20 || total < ihl || total > l3.len() {
                return None;
            }
            // SAFETY: l3 holds at least 20 bytes (checked above), all
            // rte_ipv4_frag_pkt_is_fragmented reads; struct rte_ipv4_hdr is packed (align 1).
            let frag =
                unsafe { dpdk_sys::fp_ipv4_frag_pkt_is_fragmented(l3.as_ptr() as *const dpdk_sys::rte_ipv4_hdr) };
            (frag != 0).then_some((false, ihl))
        }
        ETHERTYPE_IPV6 => {
            if l3.len() < IPV6_HDR + IPV6_FRAG_EXT || l3[0] >> 4 != 6 || l3[6] != IPPROTO_FRAGMENT {
                return None;
            }
            let total = IPV6_HDR + usize::from(u16::from_be_bytes([l3[4], l3[5]]));
            (total <= l3.len()).then_some((true, IPV6_HDR + IPV6_FRAG_EXT))
        }
        _ => None,
    }
}

impl Drop for IpFragTable {
    fn drop(&mut self) {
        self.free_death_row();
        // SAFETY: the table is ours and used by no one else; rte_ip_frag_table_destroy frees the
        // fragments it still holds (lib/ip_frag/rte_ip_frag_common.c) and the table.
        unsafe { dpdk_sys::rte_ip_frag_table_destroy(self.tbl.as_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    use super::classify;

    /// An Ethernet frame with an IPv4 header of `ihl` words, the flags/offset word `frag`,
    /// total length `total` and `payload` bytes after the header.
    fn v4(ihl: u8, frag: u16, total: u16, payload: usize) -> Vec<u8> {
        let mut f = vec![0u8; 14 + usize::from(ihl) * 4 + payload];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x40 | ihl;
        f[16..18].copy_from_slice(&total.to_be_bytes());
        f[20..22].copy_from_slice(&frag.to_be_bytes());
        f[23] = 17;
        f
    }

    /// An Ethernet frame with an IPv6 header whose next header is `next` and payload length
    /// `plen`, followed by `payload` bytes.
    fn v6(next: u8, plen: u16, payload: usize) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 40 + payload];
        f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        f[14] = 0x60;
        f[18..20].copy_from_slice(&plen.to_be_bytes());
        f[20] = next;
        f
    }

    #[test]
    fn ipv4_fragments_are_the_ones_dpdk_calls_fragmented() {
        const MF: u16 = 0x2000;
        // First (MF, offset 0), middle (MF, offset), last (offset only): fragments.
        assert_eq!(classify(&v4(5, MF, 44, 24)), Some((false, 20)));
        assert_eq!(classify(&v4(5, MF | 50, 428, 408)), Some((false, 20)));
        assert_eq!(classify(&v4(5, 100, 228, 208)), Some((false, 20)));
        // Options: l3_len is the header's length.
        assert_eq!(classify(&v4(6, MF, 48, 24)), Some((false, 24)));
        // Not a fragment: no MF, offset 0 (DF alone does not make one).
        assert_eq!(classify(&v4(5, 0, 44, 24)), None);
        assert_eq!(classify(&v4(5, 0x4000, 44, 24)), None);
        // Lengths DPDK would trust but the frame does not hold, or a header too short.
        assert_eq!(classify(&v4(5, MF, 45, 24)), None);
        assert_eq!(classify(&v4(5, MF, 19, 24)), None);
        assert_eq!(classify(&v4(4, MF, 44, 28)), None);
        assert_eq!(classify(&v4(5, MF, 44, 24)[..33]), None);
    }

    #[test]
    fn ipv6_fragments_are_a_fragment_header_right_after_the_fixed_one() {
        assert_eq!(classify(&v6(44, 16, 16)), Some((true, 48)));
        // UDP after the fixed header, or the Fragment header behind another extension header
        // (DPDK's helper does not walk the chain): not handed over.
        assert_eq!(classify(&v6(17, 16, 16)), None);
        assert_eq!(classify(&v6(0, 16, 16)), None);
        // Payload length beyond the frame; too short for the Fragment header.
        assert_eq!(classify(&v6(44, 17, 16)), None);
        assert_eq!(classify(&v6(44, 4, 4)), None);
        // Not IP at all (ARP).
        let mut arp = v4(5, 0x2000, 44, 24);
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(classify(&arp), None);
    }

    /// Every frame of bench_frags.pcap (what the anchor benchmark replays) is an IPv4 fragment.
    #[test]
    fn every_frame_of_the_benchmark_capture_is_handed_over() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/captures/bench_frags.pcap");
        let pcap = std::fs::read(path).expect("configs/captures/bench_frags.pcap");
        // pcap: a 24-byte file header, then per frame 16 bytes (incl_len at 8..12, little-endian here).
        assert_eq!(&pcap[..4], &[0xd4, 0xc3, 0xb2, 0xa1], "a little-endian pcap");
        let (mut at, mut frames) = (24, 0);
        while at < pcap.len() {
            let len = u32::from_le_bytes(pcap[at + 8..at + 12].try_into().unwrap()) as usize;
            let frame = &pcap[at + 16..at + 16 + len];
            assert_eq!(classify(frame), Some((false, 20)), "frame {frames}");
            at += 16 + len;
            frames += 1;
        }
        assert_eq!(frames, 1216);
    }
}
