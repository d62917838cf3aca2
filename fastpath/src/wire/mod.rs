//! Wire formats: zero-copy views over byte slices, one per protocol.
//!
//! Each view is `Packet<T: AsRef<[u8]>>` with its field offsets as named constants. `new_checked`
//! validates every length relation the accessors rely on, once; after it succeeds **no accessor
//! panics**, whatever the bytes are. Writers (`set_*`, `emit`) exist for the headers the fast path
//! emits. This module knows nothing of the pipeline, of DPDK, or of time.

pub mod arp;
pub mod checksum;
pub mod ethernet;
pub mod gre;
pub mod icmpv4;
pub mod icmpv6;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod tcp;
pub mod toeplitz;
pub mod udp;

pub use arp::{ArpOperation, ArpPacket};
pub use ethernet::{EtherType, EthernetAddress, EthernetFrame};
pub use gre::{GrePacket, GreRepr};
pub use icmpv4::{Icmpv4Message, Icmpv4Packet};
pub use icmpv6::{Icmpv6Message, Icmpv6Packet, NdpOption, NeighborFlags, NeighborPacket};
pub use ip::IpProtocol;
pub use ipv4::{Ipv4Packet, Ipv4Repr};
pub use ipv6::{Ipv6ExtChain, Ipv6FragmentHeader, Ipv6Packet, Ipv6Repr};
pub use tcp::{TcpFlags, TcpPacket};
pub use toeplitz::Toeplitz;
pub use udp::UdpPacket;

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

/// The two bytes at `at`, as they lie (a field used unswapped, e.g. a port as an index); caller
/// guarantees bounds.
#[inline(always)]
pub(crate) fn bytes2(b: &[u8], at: usize) -> [u8; 2] {
    match b[at..].first_chunk() {
        Some(&w) => w,
        None => [b[at], b[at + 1]],
    }
}

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

/// Reads a big-endian u32 at `at`; caller guarantees bounds (checked by `new_checked`).
#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Writes a big-endian u32 at `at`.
#[inline]
pub(crate) fn put_be32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// An IPv4 address from the four bytes at `at`.
#[inline]
pub(crate) fn ipv4_at(b: &[u8], at: usize) -> std::net::Ipv4Addr {
    // As one 4-byte array, not four bytes: where the same word was loaded already (the IPv4
    // header checksum sums it) the compiler reuses it as it is; built byte by byte, it was
    // taken apart and put together again.
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    std::net::Ipv4Addr::from(a)
}

/// An IPv6 address from the sixteen bytes at `at`.
#[inline]
pub(crate) fn ipv6_at(b: &[u8], at: usize) -> std::net::Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[at..at + 16]);
    std::net::Ipv6Addr::from(a)
}
