//! Wire formats: zero-copy views over byte slices, one per protocol.
//!
//! Each view is `Packet<T: AsRef<[u8]>>` with its field offsets as named constants. `new_checked`
//! validates every length relation the accessors rely on, once; after it succeeds **no accessor
//! panics**, whatever the bytes are. Writers (`set_*`, `emit`) exist for the headers the fast path
//! emits. This module knows nothing of the pipeline, of DPDK, or of time.

pub mod arp;
pub mod ethernet;

pub use arp::{ArpOperation, ArpPacket};
pub use ethernet::{EtherType, EthernetAddress, EthernetFrame};

/// Why bytes are not a valid header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// Shorter than the header (or than a length field inside it) says.
    Truncated,
    /// Lengths or fields contradict each other.
    Malformed,
    /// Well formed, but a variant this code does not handle (e.g. ARP over non-Ethernet).
    Unsupported,
}

/// Result of the wire layer.
pub type Result<T> = core::result::Result<T, Error>;

/// Reads a big-endian u16 at `at`; caller guarantees bounds (checked by `new_checked`).
#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Writes a big-endian u16 at `at`.
#[inline]
pub(crate) fn put_be16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}
