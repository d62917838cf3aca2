//! Mbuf rings: the bounded queues behind service sockets.

use super::{Error, Mbuf, Result};
use crate::socket::PacketQueue;
use std::ffi::{c_void, CString};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// A DPDK ring of mbufs with exactly the requested capacity (`RING_F_EXACT_SZ`), multi-producer
/// (every RX lcore may enqueue) and multi-consumer-safe (only the socket's worker dequeues, but
/// MC costs one CAS per burst and makes misuse impossible). Bursts, no per-packet lock.
pub struct MbufRing {
    raw: NonNull<dpdk_sys::rte_ring>,
    capacity: usize,
}

// SAFETY: rte_ring with default (MP/MC) sync modes is safe to use from any number of threads.
unsafe impl Send for MbufRing {}
// SAFETY: see Send; every method goes through DPDK's MP/MC-safe ring functions.
unsafe impl Sync for MbufRing {}

static RING_SEQ: AtomicU64 = AtomicU64::new(0);

impl MbufRing {
    /// A ring holding up to `capacity` packets.
    pub fn new(capacity: usize) -> Result<MbufRing> {
        let name = format!("fps{}", RING_SEQ.fetch_add(1, Ordering::Relaxed));
        let cname = CString::new(name.clone()).expect("no NUL in a generated name");
        let count = u32::try_from(capacity).map_err(|_| Error::new("ring capacity", libc::EINVAL))?;
        // SAFETY: cname is a valid C string for the call (DPDK copies it); count and flags are
        // plain values; a NULL return is handled below.
        let raw = unsafe {
            dpdk_sys::rte_ring_create(
                cname.as_ptr(),
                count,
                dpdk_sys::SOCKET_ID_ANY,
                dpdk_sys::RING_F_EXACT_SZ,
            )
        };
        NonNull::new(raw)
            .map(|raw| MbufRing { raw, capacity })
            .ok_or_else(|| Error::from_rte_errno(format!("rte_ring_create({name}, {capacity})")))
    }

    /// Enqueues as many packets from the front of `pkts` as fit; they leave `pkts`, the rest stay
    /// (in order). Returns how many were enqueued.
    #[inline]
    pub fn enqueue(&self, pkts: &mut Vec<Mbuf>) -> usize {
        let len = pkts.len();
        if len == 0 {
            return 0;
        }
        // SAFETY: pkts holds `len` owned mbufs laid out as pointers (Mbuf is transparent); the
        // ring takes ownership of the first n.
        let n = unsafe {
            dpdk_sys::fp_ring_enqueue_burst(
                self.raw.as_ptr(),
                pkts.as_ptr() as *const *mut c_void,
                len as u32,
                std::ptr::null_mut(),
            )
        } as usize;
        // SAFETY: the first n mbufs now belong to the ring: shift the rest down without dropping
        // anything and shorten the Vec.
        unsafe {
            std::ptr::copy(pkts.as_ptr().add(n), pkts.as_mut_ptr(), len - n);
            pkts.set_len(len - n);
        }
        n
    }

    /// Dequeues up to the spare capacity of `out` packets, appending them; returns how many.
    #[inline]
    pub fn dequeue(&self, out: &mut Vec<Mbuf>) -> usize {
        let spare = out.spare_capacity_mut();
        if spare.is_empty() {
            return 0;
        }
        // SAFETY: the spare capacity has room for spare.len() pointers; the ring writes n <= that
        // many valid mbuf pointers whose ownership passes to us.
        let n = unsafe {
            dpdk_sys::fp_ring_dequeue_burst(
                self.raw.as_ptr(),
                spare.as_mut_ptr() as *mut *mut c_void,
                spare.len() as u32,
                std::ptr::null_mut(),
            )
        } as usize;
        // SAFETY: n slots were initialised with owned mbufs.
        unsafe { out.set_len(out.len() + n) };
        n
    }

    /// Dequeues and frees everything still queued; returns how many packets that was.
    pub fn drain_and_free(&self) -> usize {
        let mut total = 0;
        let mut batch = Vec::with_capacity(64);
        loop {
            let n = self.dequeue(&mut batch);
            if n == 0 {
                return total;
            }
            total += n;
            Mbuf::free_bulk(&mut batch);
        }
    }
}

impl PacketQueue for MbufRing {
    #[inline]
    fn len(&self) -> usize {
        // SAFETY: the ring is alive; the count is a racy but safe read of its head/tail.
        unsafe { dpdk_sys::fp_ring_count(self.raw.as_ptr()) as usize }
    }
    fn capacity(&self) -> usize {
        self.capacity
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Drop for MbufRing {
    fn drop(&mut self) {
        // Nothing may leak: packets still queued (a socket removed by a reload before its worker
        // drained it, or a ring dropped at exit) are freed.
        self.drain_and_free();
        // SAFETY: we own the ring and nothing else references it any more (the last Arc of its
        // socket is being dropped).
        unsafe { dpdk_sys::rte_ring_free(self.raw.as_ptr()) }
    }
}
