//! The owned mbuf.

use crate::buf::{LcoreBuf, NicChecksum, PacketBuf, Tunnelled};
use std::ptr::NonNull;

/// The `ol_flags` bits that say the `hash` union's `fdir.hi` word holds the packet's
/// [`Tunnelled`] record: "flow director ID present" (`RTE_MBUF_F_RX_FDIR_ID`, with
/// `RTE_MBUF_F_RX_FDIR`). fastpathd programs no flow director or `rte_flow` MARK rule, so no
/// driver sets them; the word sits beside the RSS hash (`fdir.lo`), not over it. (A registered
/// dynamic flag would do too, but with one registered the forward and closed-port benchmarks
/// ran slower in the same instructions: benches/NOTES.md, "The RX engine split".)
const TUNNELLED: u64 = (dpdk_sys::RTE_MBUF_F_RX_FDIR | dpdk_sys::RTE_MBUF_F_RX_FDIR_ID) as u64;

/// `packet_type` bit marking a datagram the reassembler built: DPDK's packet types use bits
/// 0-27 (`RTE_PTYPE_ALL_MASK`), so no driver sets it, nothing here reads the packet type, and
/// `rte_pktmbuf_alloc` clears the field when the buffer is taken again.
const REASSEMBLED: u32 = 1 << 31;

/// An mbuf we own: freed (returned to its pool) when dropped, unless it is handed to a TX queue.
///
/// `repr(transparent)` over a non-null pointer, so a slice of `Mbuf` has the layout of the
/// `struct rte_mbuf *` array the burst functions read and write.
#[repr(transparent)]
pub struct Mbuf(NonNull<dpdk_sys::rte_mbuf>);

// SAFETY: an owned mbuf can be moved to and freed from any lcore (mempools are MT-safe).
unsafe impl Send for Mbuf {}

impl Mbuf {
    /// Takes ownership of a raw mbuf.
    ///
    /// # Safety
    /// `m` must be a valid mbuf that nobody else owns or will free.
    #[inline(always)]
    pub(crate) unsafe fn from_raw(m: NonNull<dpdk_sys::rte_mbuf>) -> Self {
        Mbuf(m)
    }

    /// Gives up ownership: the caller (a DPDK function that takes the mbuf) frees it.
    #[inline(always)]
    pub(crate) fn into_raw(self) -> NonNull<dpdk_sys::rte_mbuf> {
        let m = self.0;
        std::mem::forget(self);
        m
    }

    /// A pointer to the mbuf, which stays ours.
    #[inline(always)]
    pub(crate) fn as_mut_ptr(&mut self) -> *mut dpdk_sys::rte_mbuf {
        self.0.as_ptr()
    }

    #[inline(always)]
    pub(crate) fn raw(&self) -> &dpdk_sys::rte_mbuf {
        // SAFETY: we own a valid mbuf for as long as self lives.
        unsafe { self.0.as_ref() }
    }

    #[inline(always)]
    fn raw_mut(&mut self) -> &mut dpdk_sys::rte_mbuf {
        // SAFETY: we own a valid mbuf exclusively for as long as self lives.
        unsafe { self.0.as_mut() }
    }

    /// The port the packet arrived on.
    #[inline]
    pub fn port(&self) -> u16 {
        self.raw().port
    }

    /// Sets the port the packet is accounted to (a buffer built here, e.g. a reassembled
    /// datagram, takes its fragments' port so answers leave the same way).
    #[inline]
    pub fn set_port(&mut self, port: u16) {
        self.raw_mut().port = port;
    }

    /// Total packet length over all segments.
    #[inline]
    pub fn pkt_len(&self) -> u32 {
        self.raw().pkt_len
    }

    /// Bytes free after the data in the (last) segment.
    #[inline]
    pub fn tailroom(&self) -> usize {
        // SAFETY: reads the buffer geometry of an mbuf we own.
        unsafe { dpdk_sys::fp_pktmbuf_tailroom(self.0.as_ptr()) as usize }
    }

    /// Number of segments; the pipeline only handles 1.
    #[inline]
    pub fn segments(&self) -> u16 {
        self.raw().nb_segs
    }

    /// Whether the mbuf may go straight back to `pool` (`rte_mempool_put`) without the checks
    /// `rte_pktmbuf_free` makes on it: it came from `pool`, is direct (no indirect or external
    /// buffer), has no other reference and one segment — DPDK's conditions for
    /// `rte_mbuf_raw_free`. Reads only the first cache line and `next`.
    #[inline]
    pub(crate) fn raw_freeable_into(&self, pool: *const dpdk_sys::rte_mempool) -> bool {
        let m = self.raw();
        // `refcnt` and `nb_segs` are neighbours (offsets 18 and 20): asked as one word, LLVM
        // reads them in one load and one compare (free_bulk runs this for every packet freed).
        const _: () = assert!(
            std::mem::offset_of!(dpdk_sys::rte_mbuf, nb_segs) == std::mem::offset_of!(dpdk_sys::rte_mbuf, refcnt) + 2
        );
        std::ptr::eq(m.pool, pool)
            && (m.refcnt as u32 | (m.nb_segs as u32) << 16) == 0x0001_0001
            && m.next.is_null()
            && m.ol_flags & (dpdk_sys::RTE_MBUF_F_INDIRECT | dpdk_sys::RTE_MBUF_F_EXTERNAL) == 0
    }

    /// Frees a batch of mbufs at once. Those [raw-freeable](Mbuf::raw_freeable_into) into the
    /// first one's pool — every packet a PMD received and the pipeline dropped — go back in one
    /// `rte_mempool_put_bulk`; the rest (another pool, chained, shared, indirect or external)
    /// through `rte_pktmbuf_free_bulk`.
    ///
    /// Why not `rte_pktmbuf_free_bulk` for all: it makes the same checks per mbuf, but through
    /// its general loop (a segment walk, a pool comparison through the batch's first entry, the
    /// pending array in memory), a large cost per mbuf on the RX lcore, where a flood's drops
    /// (closed port, SYN flood, not local) are much of the lcore's own work (benches/NOTES.md,
    /// "Drops go back to their pool unread by DPDK's general free").
    pub fn free_bulk(batch: &mut Vec<Mbuf>) {
        let n = batch.len();
        let Some(first) = batch.first() else {
            return;
        };
        let pool = first.raw().pool;
        if !batch.iter().all(|m| m.raw_freeable_into(pool)) {
            return Self::free_bulk_mixed(batch, pool);
        }
        // SAFETY: the Vec holds `n` owned, valid mbufs laid out as `struct rte_mbuf *`
        // (transparent), all from `pool`, direct, with one reference and one segment
        // (`raw_freeable_into`, DPDK's conditions for `rte_mbuf_raw_free`): they go back to
        // `pool` as they are, each once, and the Vec forgets them (length 0).
        unsafe {
            dpdk_sys::fp_mempool_put_bulk(pool, batch.as_ptr() as *const *mut std::ffi::c_void, n as u32);
            batch.set_len(0);
        }
    }

    /// [`Mbuf::free_bulk`] of a batch with some mbufs not raw-freeable into `pool`: those
    /// that are go back to it as they are, the rest through `rte_pktmbuf_free_bulk`.
    #[cold]
    #[inline(never)]
    fn free_bulk_mixed(batch: &mut Vec<Mbuf>, pool: *mut dpdk_sys::rte_mempool) {
        let n = batch.len();
        // The raw-freeable ones moved to the front, in place.
        let mut raw = 0;
        for i in 0..n {
            if batch[i].raw_freeable_into(pool) {
                batch.swap(raw, i);
                raw += 1;
            }
        }
        let base = batch.as_mut_ptr() as *mut *mut dpdk_sys::rte_mbuf;
        // SAFETY: the Vec holds `n` owned, valid mbufs laid out as `struct rte_mbuf *`
        // (transparent). The first `raw` are from `pool`, direct, with one reference and one
        // segment, so they go back to `pool` as they are; the rest are freed with the general
        // checks. Each is freed once, and the Vec forgets them all (length 0).
        unsafe {
            if raw > 0 {
                dpdk_sys::fp_mempool_put_bulk(pool, base as *const *mut std::ffi::c_void, raw as u32);
            }
            if raw < n {
                dpdk_sys::rte_pktmbuf_free_bulk(base.add(raw), (n - raw) as u32);
            }
            batch.set_len(0);
        }
    }
}

impl LcoreBuf for Mbuf {
    #[inline(always)]
    fn port(&self) -> u16 {
        Mbuf::port(self)
    }
    #[inline(always)]
    fn set_port(&mut self, port: u16) {
        Mbuf::set_port(self, port)
    }
    #[inline(always)]
    fn segments(&self) -> u16 {
        Mbuf::segments(self)
    }
    #[inline(always)]
    fn pkt_len(&self) -> u32 {
        Mbuf::pkt_len(self)
    }
    #[inline(always)]
    fn free_bulk(batch: &mut Vec<Self>) {
        Mbuf::free_bulk(batch)
    }
}

impl Drop for Mbuf {
    fn drop(&mut self) {
        // SAFETY: we own the mbuf; it is freed exactly once, here.
        unsafe { dpdk_sys::fp_pktmbuf_free(self.0.as_ptr()) }
    }
}

impl Mbuf {
    /// A checksum verdict from the RX flags: the two bits under `mask` say good, bad, or
    /// neither (unknown, or "none": not checked against the field).
    #[inline]
    fn rx_verdict(&self, mask: u32, good: u32, bad: u32) -> NicChecksum {
        match self.raw().ol_flags & mask as u64 {
            f if f == good as u64 => NicChecksum::Good,
            f if f == bad as u64 => NicChecksum::Bad,
            _ => NicChecksum::Unknown,
        }
    }
}

/// [`PacketBuf::ip_checksum_ok`] from an mbuf's `ol_flags`: the NIC's verdict where it gave
/// one (GOOD or BAD), else `verify` (UNKNOWN, and NONE: "not correct in the packet data, but
/// the integrity of the IP header is verified", rte_mbuf_core.h, so an answer built in place
/// from it would carry a wrong checksum; the software check decides, as `ip_checksum` says).
#[inline(always)]
fn ip_checksum_ok_by_flags(ol_flags: u64, verify: impl FnOnce() -> bool) -> bool {
    const MASK: u64 = dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_MASK as u64;
    const GOOD: u64 = dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_GOOD as u64;
    const _: () = assert!(MASK == GOOD | dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_BAD as u64);
    let f = ol_flags & MASK;
    // One bit of the two set is the NIC's verdict; none or both ask `verify`. Written so,
    // LLVM tests the flags once for the unchecked case instead of twice (as three `if`s it
    // tested BAD first and kept the flags for a second test; benches/NOTES.md, "Tests as branches
    // on the common case").
    if f != 0 && f != MASK {
        f == GOOD
    } else {
        verify()
    }
}

impl PacketBuf for Mbuf {
    #[inline(always)]
    fn data(&self) -> &[u8] {
        let m = self.raw();
        // SAFETY: buf_addr + data_off points at data_len initialised bytes of the first
        // segment, inside the mbuf's buffer, valid while we own the mbuf (rte_pktmbuf_mtod).
        unsafe { std::slice::from_raw_parts((m.buf_addr as *const u8).add(m.data_off as usize), m.data_len as usize) }
    }

    #[inline(always)]
    fn data_mut(&mut self) -> &mut [u8] {
        let m = self.raw_mut();
        // SAFETY: as in `data`, and we own the mbuf exclusively (refcnt 1 for received mbufs and
        // for mbufs we allocated), so writing does not race.
        unsafe { std::slice::from_raw_parts_mut((m.buf_addr as *mut u8).add(m.data_off as usize), m.data_len as usize) }
    }

    fn prepend(&mut self, n: usize) -> Option<&mut [u8]> {
        let n16 = u16::try_from(n).ok()?;
        // SAFETY: we own the mbuf; rte_pktmbuf_prepend checks headroom and returns NULL (changing
        // nothing) when it is too small.
        let p = unsafe { dpdk_sys::fp_pktmbuf_prepend(self.0.as_ptr(), n16) };
        if p.is_null() {
            None
        } else {
            Some(self.data_mut())
        }
    }

    fn adj(&mut self, n: usize) -> bool {
        let Ok(n16) = u16::try_from(n) else {
            return false;
        };
        // SAFETY: we own the mbuf; rte_pktmbuf_adj checks the length and returns NULL when the
        // first segment is shorter.
        !unsafe { dpdk_sys::fp_pktmbuf_adj(self.0.as_ptr(), n16) }.is_null()
    }

    fn append(&mut self, n: usize) -> Option<&mut [u8]> {
        if self.segments() != 1 {
            // The pipeline's view is the first segment only.
            return None;
        }
        let n16 = u16::try_from(n).ok()?;
        // SAFETY: we own the mbuf; rte_pktmbuf_append checks the tailroom of the last segment.
        let p = unsafe { dpdk_sys::fp_pktmbuf_append(self.0.as_ptr(), n16) };
        if p.is_null() {
            return None;
        }
        let len = self.len();
        Some(&mut self.data_mut()[len - n..])
    }

    #[inline]
    fn trim(&mut self, n: usize) -> bool {
        if self.segments() != 1 {
            return false;
        }
        // rte_pktmbuf_trim for one segment (the last is the first), written here: through the
        // shim it was a call on every padded frame (a minimum-size TCP SYN carries padding), which
        // the fast paths trim as the general path does.
        let m = self.raw_mut();
        if n > m.data_len as usize {
            return false;
        }
        m.data_len -= n as u16;
        m.pkt_len -= n as u32;
        true
    }

    #[inline]
    fn rss_hash(&self) -> Option<u32> {
        // Read in Rust, not through the shim: this runs for every packet and an FFI call per
        // packet is measurable (cross-language inlining is not on).
        let m = self.raw();
        if m.ol_flags & dpdk_sys::RTE_MBUF_F_RX_RSS_HASH as u64 != 0 {
            // SAFETY: with RTE_MBUF_F_RX_RSS_HASH set, the driver wrote the `rss` member of the
            // hash union (rte_mbuf_core.h); any bit pattern is a valid u32 besides.
            Some(unsafe { m.__bindgen_anon_2.hash.rss })
        } else {
            None
        }
    }

    #[inline]
    fn clear_rss_hash(&mut self) {
        self.raw_mut().ol_flags &= !(dpdk_sys::RTE_MBUF_F_RX_RSS_HASH as u64);
    }

    #[inline]
    fn ip_checksum(&self) -> NicChecksum {
        // NONE ("not correct in the packet data, but the integrity of the IP header is
        // verified", rte_mbuf_core.h) stays Unknown: an answer built in place from such a
        // header would carry its wrong checksum, so the software check decides.
        self.rx_verdict(
            dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_MASK,
            dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_GOOD,
            dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_BAD,
        )
    }

    #[inline(always)]
    fn ip_checksum_ok(&self, verify: impl FnOnce() -> bool) -> bool {
        ip_checksum_ok_by_flags(self.raw().ol_flags, verify)
    }

    #[inline]
    fn l4_checksum(&self) -> NicChecksum {
        // NONE (the data is intact but the checksum field is not filled in) stays Unknown, as
        // for the IP header: an echo built in place would carry that field.
        self.rx_verdict(
            dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_MASK,
            dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_GOOD,
            dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_BAD,
        )
    }

    #[inline]
    fn clear_rx_offload_flags(&mut self) {
        self.raw_mut().ol_flags &= !((dpdk_sys::RTE_MBUF_F_RX_RSS_HASH
            | dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_MASK
            | dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_MASK) as u64);
    }

    #[inline]
    fn tunnelled(&self) -> Option<Tunnelled> {
        let m = self.raw();
        if m.ol_flags & TUNNELLED == TUNNELLED {
            // SAFETY: with both flags set, `set_tunnelled` wrote `fdir.hi` of the hash union;
            // any bit pattern is a valid u32 besides (and the word carries its own validity bit).
            Tunnelled::from_word(unsafe { m.__bindgen_anon_2.hash.fdir.hi })
        } else {
            None
        }
    }

    #[inline]
    fn set_tunnelled(&mut self, t: Option<Tunnelled>) {
        let m = self.raw_mut();
        match t {
            Some(t) => {
                m.ol_flags |= TUNNELLED;
                m.__bindgen_anon_2.hash.fdir.hi = t.to_word();
            }
            None => m.ol_flags &= !TUNNELLED,
        }
    }

    #[inline]
    fn reassembled(&self) -> bool {
        // SAFETY: `packet_type` is a plain u32 in a union with the bit fields over the same
        // 32 bits; every bit pattern is a valid u32.
        let t = unsafe { self.raw().__bindgen_anon_1.packet_type };
        t & REASSEMBLED != 0
    }

    #[inline]
    fn set_reassembled(&mut self) {
        let m = self.raw_mut();
        // SAFETY: as in `reassembled`: any u32 is a valid `packet_type`.
        let t = unsafe { m.__bindgen_anon_1.packet_type };
        m.__bindgen_anon_1.packet_type = t | REASSEMBLED;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast form decides as [`NicChecksum`] from the same flags (`ip_checksum`'s
    /// reading): GOOD and BAD are the NIC's word, UNKNOWN and NONE ask for the software check,
    /// whatever other bits are set.
    #[test]
    fn ip_checksum_ok_by_flags_is_the_nics_verdict_or_the_software_check() {
        let good = dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_GOOD as u64;
        let bad = dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_BAD as u64;
        let others = [0, 1 << 1, dpdk_sys::RTE_MBUF_F_RX_RSS_HASH as u64, !(good | bad)];
        for other in others {
            for (bits, verdict) in [
                (0, NicChecksum::Unknown),
                (good, NicChecksum::Good),
                (bad, NicChecksum::Bad),
                (good | bad, NicChecksum::Unknown),
            ] {
                for software in [false, true] {
                    let mut asked = false;
                    let ok = ip_checksum_ok_by_flags(other | bits, || {
                        asked = true;
                        software
                    });
                    assert_eq!(ok, verdict.ok_or(|| software), "flags {:#x}", other | bits);
                    assert_eq!(asked, verdict == NicChecksum::Unknown, "flags {:#x}", other | bits);
                }
            }
        }
    }
}
