//! The one safe layer over `dpdk-sys`, and the only module that touches mbufs.
//!
//! - [`eal`]: EAL start from an argument list, lcores, launching loops on them, the TSC;
//! - [`mempool`]: packet mbuf pools;
//! - [`mbuf`]: [`Mbuf`], an owned mbuf that frees itself, implementing [`crate::buf::PacketBuf`];
//! - [`port`]: ethdev ports (queues, RSS where the driver has it, start/stop/close, stats) and the
//!   per-lcore [`RxQueue`]/[`TxQueue`] handles used for bursts;
//! - [`log`]: DPDK's own log routed into the caller's sink, at the caller's level;
//! - [`ring`]: [`MbufRing`], the bounded queue behind a service socket;
//! - [`tap`]: the kernel interface's own TAP backend with offloads, and the worker's queue
//!   handles over either kind of kernel interface ([`WorkerTx`], [`KernelRx`]);
//! - [`ip_frag`]: DPDK's own reassembly (librte_ip_frag), for the benchmark's anchor only;
//! - [`wake`]: what an idle lcore blocks on (its RX queues' wake-up fds, a doorbell others ring).
//!
//! Every `unsafe` block says why it is sound in a `// SAFETY:` comment. C return codes become
//! [`Error`]s formatted with `rte_strerror`.

pub mod eal;
pub mod ip_frag;
pub mod log;
pub mod mbuf;
pub mod mempool;
pub mod port;
pub mod ring;
pub mod tap;
pub mod wake;

pub use eal::Eal;
pub use mbuf::Mbuf;
pub use mempool::Mempool;
pub use port::{Port, PortConf, PortStats, RxQueue, TxQueue};
pub use ring::MbufRing;
pub use tap::{KernelRx, TapDevice, WorkerTx};

use std::ffi::CStr;
use std::fmt;

/// Asks the CPU to bring the cache line at `addr` into its caches: a hint that never faults,
/// whatever the address, and reads nothing the program can see.
#[inline(always)]
pub fn prefetch(addr: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 only hints the cache hierarchy: it does not fault on any address and
    // changes no architectural state; SSE is in every x86-64 CPU.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr.cast())
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

/// A DPDK call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// What was being done, e.g. "rte_eth_dev_configure(port 0)".
    pub what: String,
    /// The (positive) errno DPDK reported.
    pub errno: i32,
}

impl Error {
    /// An error from a negative-errno return code or `rte_errno`.
    pub(crate) fn new(what: impl Into<String>, code: i32) -> Self {
        Error {
            what: what.into(),
            errno: code.abs(),
        }
    }

    /// An error from the current `rte_errno`.
    pub(crate) fn from_rte_errno(what: impl Into<String>) -> Self {
        // SAFETY: fp_errno reads the calling thread's rte_errno, a per-thread variable; always valid.
        let e = unsafe { dpdk_sys::fp_errno() };
        Error::new(what, e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        // SAFETY: rte_strerror accepts any int and returns a pointer to a static or per-thread
        // NUL-terminated string that stays valid until the next call on this thread; we copy it
        // out before returning.
        let msg = unsafe { CStr::from_ptr(dpdk_sys::rte_strerror(self.errno)) };
        write!(
            f,
            "{} failed: {} (errno {})",
            self.what,
            msg.to_string_lossy(),
            self.errno
        )
    }
}

impl std::error::Error for Error {}

/// Result of the DPDK layer.
pub type Result<T> = std::result::Result<T, Error>;

/// DPDK's own software Toeplitz hash (`rte_softrss`) over `tuple` (host-order 32-bit words, as
/// `rte_thash_tuple` lays them out) with a 40-byte `key`: the reference the wire layer's hash is
/// tested against. Needs no EAL.
pub fn softrss(tuple: &[u32], key: &[u8; 40]) -> u32 {
    assert!(tuple.len() <= 9, "rte_softrss reads key bytes up to 4 * len + 4");
    let mut words = tuple.to_vec();
    // SAFETY: `words` holds `len` initialised u32s and `key` 40 bytes, the most rte_softrss reads
    // for tuples of up to 9 words (IPv6 with ports, checked above); both outlive the call.
    unsafe { dpdk_sys::fp_softrss(words.as_mut_ptr(), words.len() as u32, key.as_ptr()) }
}

/// The DPDK version string, e.g. "DPDK 22.11.11".
pub fn version() -> String {
    // SAFETY: rte_version returns a pointer to a static NUL-terminated string.
    unsafe { CStr::from_ptr(dpdk_sys::fp_version()) }
        .to_string_lossy()
        .into_owned()
}
