//! Packet mbuf pools.

use super::{Error, Result};
use std::ffi::CString;
use std::ptr::NonNull;

/// A pool of packet mbufs (`rte_pktmbuf_pool_create`).
pub struct Mempool {
    raw: NonNull<dpdk_sys::rte_mempool>,
    size: u32,
}

// SAFETY: a DPDK mempool is designed for concurrent use from every lcore (lockless ring plus
// per-lcore caches); the handle is only a pointer to it.
unsafe impl Send for Mempool {}
// SAFETY: see Send; all operations we expose are thread-safe in DPDK.
unsafe impl Sync for Mempool {}

impl Mempool {
    /// Creates a pool of `n` mbufs with `data_room` bytes each (headroom included), a per-lcore
    /// cache of `cache` mbufs, on any NUMA socket, with DPDK's default mempool driver.
    pub fn new(name: &str, n: u32, cache: u32, data_room: u16) -> Result<Mempool> {
        Self::with_ops(name, n, cache, data_room, None)
    }

    /// Like [`Mempool::new`] with the mempool driver named `ops` (`"stack"`, `"ring_mp_mc"`,
    /// ...; `None` for DPDK's default).
    pub fn with_ops(name: &str, n: u32, cache: u32, data_room: u16, ops: Option<&str>) -> Result<Mempool> {
        Self::on_socket(name, (n, cache, data_room), ops, None)
    }

    /// Like [`Mempool::with_ops`] with the memory on NUMA socket `socket` (`None`: any):
    /// `(n, cache, data_room)` as there.
    pub fn on_socket(
        name: &str,
        (n, cache, data_room): (u32, u32, u16),
        ops: Option<&str>,
        socket: Option<u32>,
    ) -> Result<Mempool> {
        let socket_id = socket.map_or(dpdk_sys::SOCKET_ID_ANY, |s| s as i32);
        let cname = CString::new(name).map_err(|_| Error::new("mempool name", libc::EINVAL))?;
        let cops = ops
            .map(CString::new)
            .transpose()
            .map_err(|_| Error::new("mempool driver name", libc::EINVAL))?;
        // SAFETY: cname (and cops, if any) are valid C strings for the duration of the call;
        // DPDK copies them. The numeric arguments are plain values; a NULL return is handled
        // below.
        let raw = unsafe {
            dpdk_sys::rte_pktmbuf_pool_create_by_ops(
                cname.as_ptr(),
                n,
                cache,
                0,
                data_room,
                socket_id,
                cops.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            )
        };
        NonNull::new(raw).map(|raw| Mempool { raw, size: n }).ok_or_else(|| {
            Error::from_rte_errno(format!(
                "rte_pktmbuf_pool_create({name}, {n} mbufs, {})",
                ops.unwrap_or("default")
            ))
        })
    }

    /// The raw pool, for the port, mbuf and ring modules.
    pub(crate) fn as_ptr(&self) -> *mut dpdk_sys::rte_mempool {
        self.raw.as_ptr()
    }

    /// Number of mbufs the pool was created with.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Mbufs currently allocated (not in the pool nor in any lcore cache).
    pub fn in_use(&self) -> u32 {
        // SAFETY: the pool is alive (we own it); the count is a racy but safe read.
        unsafe { dpdk_sys::fp_mempool_in_use_count(self.raw.as_ptr()) }
    }

    /// Allocates one mbuf (empty, default headroom), `None` when the pool is exhausted.
    pub fn alloc(&self) -> Option<super::Mbuf> {
        // SAFETY: the pool is alive; a non-NULL return is a fresh mbuf we now own.
        let m = unsafe { dpdk_sys::fp_pktmbuf_alloc(self.raw.as_ptr()) };
        // SAFETY: m is either NULL or an mbuf we exclusively own.
        NonNull::new(m).map(|m| unsafe { super::Mbuf::from_raw(m) })
    }
}

impl Drop for Mempool {
    fn drop(&mut self) {
        // SAFETY: dropped after every port using it was closed and every mbuf returned (the
        // daemon's shutdown order); freeing an idle pool is sound.
        unsafe { dpdk_sys::rte_mempool_free(self.raw.as_ptr()) }
    }
}
