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
        let data = m.data();
        if data.len() < ETHER_HDR + 20 {
            return Reassembly::NotFragment(m);
        }
        let ethertype = u16::from_be_bytes([data[12], data[13]]);
        let l3 = &data[ETHER_HDR..];
        let (v6, l3_len) = match ethertype {
            ETHERTYPE_IPV4 => {
                let ihl = usize::from(l3[0] & 0x0f) * 4;
                let total = usize::from(u16::from_be_bytes([l3[2], l3[3]]));
                if l3[0] >> 4 != 4 || ihl < 20 || total < ihl || total > l3.len() {
                    return Reassembly::NotFragment(m);
                }
                // SAFETY: l3 holds at least 20 bytes (checked above), all
                // rte_ipv4_frag_pkt_is_fragmented reads; struct rte_ipv4_hdr is packed.
                if unsafe { dpdk_sys::fp_ipv4_frag_pkt_is_fragmented(l3.as_ptr() as *const dpdk_sys::rte_ipv4_hdr) }
                    == 0
                {
                    return Reassembly::NotFragment(m);
                }
                (false, ihl)
            }
            ETHERTYPE_IPV6 => {
                let total = IPV6_HDR + usize::from(u16::from_be_bytes([l3[4], l3[5]]));
                // Next header 44: a Fragment header right after the fixed header.
                if l3.len() < IPV6_HDR + IPV6_FRAG_EXT || l3[0] >> 4 != 6 || l3[6] != 44 || total > l3.len() {
                    return Reassembly::NotFragment(m);
                }
                (true, IPV6_HDR + IPV6_FRAG_EXT)
            }
            _ => return Reassembly::NotFragment(m),
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

impl Drop for IpFragTable {
    fn drop(&mut self) {
        self.free_death_row();
        // SAFETY: the table is ours and used by no one else; rte_ip_frag_table_destroy frees the
        // fragments it still holds (lib/ip_frag/rte_ip_frag_common.c) and the table.
        unsafe { dpdk_sys::rte_ip_frag_table_destroy(self.tbl.as_ptr()) }
    }
}
