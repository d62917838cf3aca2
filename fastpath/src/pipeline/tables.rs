//! What one config generation gives every lcore to read: the addresses each port answers for
//! ([`PortAddrs`]) and the whole read-only table set ([`Tables`]).

use super::service::ServiceTable;
use super::{flow_limit, icmp_error, reasm, tcp_reset, tunnel};
use crate::socket::Socket;
use crate::wire::ipv6::{is_solicited_node, solicited_node, ALL_NODES};
use crate::wire::{EthernetAddress, Toeplitz};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// What the fast paths read of a port on every packet, its [`PortAddrs`] digested: taken once
/// a burst (the RX engine's first loop: all of a burst is from one port, and the tables change
/// only between bursts), a packet reads it from the engine's stack, not through the tables, the
/// port list and its bound, which LLVM loaded again for every packet (benches/NOTES.md,
/// "Per-burst reads and the closed port's decision").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortView {
    /// The tables have the port. A view of one they do not have takes no frame (its MAC word
    /// matches none); the fast paths then decline every frame, as they did reading the list.
    pub(crate) known: bool,
    /// [`PortAddrs::mac_word`]; [`PortView::NO_MAC`] for a port the tables do not have.
    pub(crate) mac_word: u64,
    /// The port's IPv4 address, its bytes as they are in memory read as one number (the form
    /// a header's word is loaded in: no byte swap per packet) and widened, if it has exactly
    /// one; else [`PortView::LISTED`], which no address equals: the list then decides.
    pub(crate) v4: u64,
    /// The port's IPv6 address, if it has exactly one; else the list decides.
    pub(crate) v6: Option<Ipv6Addr>,
    /// [`PortAddrs::kernel`].
    pub(crate) kernel: bool,
    /// A port-wide prefix filter is configured ([`super::filter`]): the fast paths ask it.
    pub(crate) filtered: bool,
}

impl PortView {
    /// [`PortView::v4`] when the port has no IPv4 address or several.
    pub(crate) const LISTED: u64 = u64::MAX;
    /// [`PortView::mac_word`] of a port the tables do not have: its low 16 bits set, so no
    /// frame's destination word (whose are clear) equals it.
    pub(crate) const NO_MAC: u64 = u64::MAX;

    /// The view of a port the tables do not have.
    pub fn unknown() -> Self {
        PortView {
            known: false,
            mac_word: Self::NO_MAC,
            v4: Self::LISTED,
            v6: None,
            kernel: false,
            filtered: false,
        }
    }
}

/// The addresses a port answers for.
#[derive(Clone, Debug)]
pub struct PortAddrs {
    /// The port's MAC address ([`PortAddrs::mac`]; private so that `mac_word` follows it).
    mac: EthernetAddress,
    /// `mac` as the fast paths compare it: the little-endian word of its 6 bytes shifted into
    /// the top 48 bits, as a frame's destination read in one 8-byte load and shifted left by
    /// 16 (the two bytes of the source beyond it fall off). Assembled from the address on every
    /// packet it cost more (benches/NOTES.md, "The port's MAC as the word the destination check
    /// compares"); masked to the low 48 bits instead of shifted, the mask is a 10-byte constant
    /// load and a copy more.
    pub(crate) mac_word: u64,
    /// Local IPv4 addresses.
    pub ipv4: Vec<Ipv4Addr>,
    /// Local IPv6 addresses.
    pub ipv6: Vec<Ipv6Addr>,
    /// The port has a kernel interface ([`super::kernel`]): what `[kernel] punt` selects goes
    /// there. Read where a packet would otherwise be answered or dropped.
    pub kernel: bool,
}

impl Default for PortAddrs {
    fn default() -> Self {
        PortAddrs::new(EthernetAddress::default(), Vec::new(), Vec::new(), false)
    }
}

impl PortAddrs {
    /// A port with MAC `mac`, its IPv4 and IPv6 addresses, and whether it has a kernel
    /// interface.
    pub fn new(mac: EthernetAddress, ipv4: Vec<Ipv4Addr>, ipv6: Vec<Ipv6Addr>, kernel: bool) -> Self {
        PortAddrs {
            mac,
            mac_word: mac_word(mac),
            ipv4,
            ipv6,
            kernel,
        }
    }

    /// What the fast paths read of this port on every packet ([`PortView`]).
    pub fn view(&self) -> PortView {
        PortView {
            known: true,
            mac_word: self.mac_word,
            v4: match self.ipv4.as_slice() {
                [only] => u32::from_ne_bytes(only.octets()) as u64,
                _ => PortView::LISTED,
            },
            v6: match self.ipv6.as_slice() {
                [only] => Some(*only),
                _ => None,
            },
            kernel: self.kernel,
            filtered: false,
        }
    }

    /// The port's MAC address.
    #[inline]
    pub fn mac(&self) -> EthernetAddress {
        self.mac
    }

    /// A new MAC address for the port.
    pub fn set_mac(&mut self, mac: EthernetAddress) {
        self.mac = mac;
        self.mac_word = mac_word(mac);
    }

    /// Whether `ip` is one of the port's IPv4 addresses.
    #[inline]
    pub fn has_ipv4(&self, ip: Ipv4Addr) -> bool {
        // One address (the common port) is one compare; the loop's setup and exit cost as much
        // again on every packet.
        match self.ipv4.as_slice() {
            [only] => *only == ip,
            all => all.contains(&ip),
        }
    }

    /// Whether `ip` is one of the port's IPv6 addresses.
    #[inline]
    pub fn has_ipv6(&self, ip: &Ipv6Addr) -> bool {
        // One address is one compare, as in `has_ipv4` (the IPv6 fast paths ask twice a packet).
        match self.ipv6.as_slice() {
            [only] => only == ip,
            all => all.contains(ip),
        }
    }

    /// The local address a packet to `dst` is for: `dst` itself when it is a local address;
    /// for the solicited-node group of a local address (RFC 4291 §2.7.1), that address; for
    /// all-nodes ff02::1, the first local address. `None`: the packet is not for us.
    pub fn ipv6_local_for(&self, dst: &Ipv6Addr) -> Option<Ipv6Addr> {
        if self.has_ipv6(dst) {
            return Some(*dst);
        }
        if *dst == ALL_NODES {
            return self.ipv6.first().copied();
        }
        if is_solicited_node(dst) {
            return self.ipv6.iter().find(|a| solicited_node(a) == *dst).copied();
        }
        None
    }
}

/// [`PortAddrs::mac_word`] of `mac`.
fn mac_word(mac: EthernetAddress) -> u64 {
    let m = mac.0;
    u64::from_le_bytes([0, 0, m[0], m[1], m[2], m[3], m[4], m[5]])
}

/// The read-only tables of one config generation, shared by every lcore.
///
/// A reload builds a whole new `Tables` off the data path and publishes it; each lcore adopts it
/// between bursts with [`Pipeline::apply`]. Nothing in here changes once published.
///
/// Read per packet by every lcore: 128-byte aligned, so that no heap object an lcore writes
/// shares its lines (see the runtime's `RunControl`).
///
/// [`Pipeline::apply`]: super::Pipeline::apply
#[derive(Clone, Debug, Default)]
#[repr(align(128))]
pub struct Tables {
    /// The config generation these tables belong to (1 for the config loaded at start).
    pub generation: u64,
    /// Indexed by DPDK port id.
    pub ports: Vec<PortAddrs>,
    /// The flow hash used when the NIC supplies none, built from the configured RSS key (the
    /// ports' RSS is programmed with the same key, so hardware and software hashes agree).
    pub hasher: Toeplitz,
    /// Local services by protocol and port.
    pub services: ServiceTable,
    /// Every service's sockets; services' groups index into it.
    pub sockets: Vec<Arc<Socket>>,
    /// Flow-limit shedding.
    pub flow_limit: flow_limit::FlowLimitConfig,
    /// GRE tunnels.
    pub tunnels: Vec<tunnel::Tunnel>,
    /// MTU (IP bytes) by DPDK port id; a missing entry means 1500.
    pub port_mtu: Vec<u16>,
    /// Reassembly settings.
    pub reassembly: reasm::ReasmConfig,
    /// ICMP error limits.
    pub icmp: icmp_error::IcmpConfig,
    /// The global ICMP budget, shared by every RX lcore (and kept across reloads).
    pub icmp_global: Option<Arc<icmp_error::GlobalBucket>>,
    /// ICMP counters per RX lcore.
    pub icmp_counters: Arc<icmp_error::IcmpCounters>,
    /// TCP reset limits.
    pub tcp_reset: tcp_reset::TcpResetConfig,
    /// The global reset budget, shared by every RX lcore (and kept across reloads).
    pub tcp_reset_global: Option<Arc<icmp_error::GlobalBucket>>,
    /// Reset counters per RX lcore.
    pub tcp_reset_counters: Arc<tcp_reset::ResetCounters>,
    /// The tunnel services' connection tables (their size is read once, at start).
    pub conntrack: super::conntrack::ConntrackConfig,
    /// Each RX lcore's budget of ICMP errors forwarded to a flow's backend.
    pub icmp_to_backend: super::kernel::PuntBudget,
    /// The exception path into the kernel, if any port has a kernel interface.
    pub kernel: Option<super::kernel::KernelPath>,
    /// Prefix filters, port-wide and per service.
    pub filters: super::filter::Filters,
    /// Per-source budgets in front of services.
    pub source_limit: super::source_limit::SourceLimitConfig,
    /// What they refused, per RX lcore (kept across reloads).
    pub source_limit_counters: Arc<super::source_limit::SourceLimitCounters>,
    /// The TCP state table in front of the services that ask for it.
    pub tcp_state: super::tcp_state::TcpStateConfig,
    /// What it decided, per RX lcore (kept across reloads).
    pub tcp_state_counters: Arc<super::tcp_state::TcpStateCounters>,
}

impl Tables {
    /// The index of the tunnel a packet recorded it came through, if these tables are the
    /// ones the record was made under (an index from another generation is not trusted).
    pub fn tunnel_of(&self, t: crate::buf::Tunnelled) -> Option<usize> {
        (t.generation == self.generation as u8 && (t.tunnel as usize) < self.tunnels.len()).then_some(t.tunnel as usize)
    }

    /// What the fast paths read of `port` on every packet ([`PortView`]).
    pub fn port_view(&self, port: u16) -> PortView {
        let mut v = self
            .ports
            .get(port as usize)
            .map_or_else(PortView::unknown, PortAddrs::view);
        v.filtered = self.filters.port_filtered(port);
        v
    }

    /// The MTU of `port`.
    pub fn mtu(&self, port: u16) -> u16 {
        self.port_mtu.get(port as usize).copied().unwrap_or(1500)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::tests::{pipeline, port};

    #[test]
    fn has_ipv4_with_none_one_and_several_addresses() {
        let (a, b, c) = (
            Ipv4Addr::new(192, 0, 2, 1),
            Ipv4Addr::new(10, 9, 0, 1),
            Ipv4Addr::new(198, 51, 100, 7),
        );
        let mut local = port();
        for (addrs, yes, no) in [
            (vec![], vec![], vec![a, b]),
            (vec![a], vec![a], vec![b, c]),
            (vec![a, b], vec![a, b], vec![c]),
            (vec![b, c, a], vec![a, b, c], vec![Ipv4Addr::UNSPECIFIED]),
        ] {
            local.ipv4 = addrs;
            assert!(yes.iter().all(|&x| local.has_ipv4(x)), "{:?}", local.ipv4);
            assert!(!no.iter().any(|&x| local.has_ipv4(x)), "{:?}", local.ipv4);
        }
    }

    #[test]
    fn ipv6_local_for() {
        let a = pipeline().tables.ports[0].clone();
        let me6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        assert_eq!(a.ipv6_local_for(&me6), Some(me6));
        assert_eq!(a.ipv6_local_for(&ALL_NODES), Some(me6));
        assert_eq!(a.ipv6_local_for(&solicited_node(&me6)), Some(me6));
        assert_eq!(a.ipv6_local_for(&"2001:db8::2".parse().unwrap()), None);
        let none = PortAddrs::default();
        assert_eq!(none.ipv6_local_for(&ALL_NODES), None);
    }
}
