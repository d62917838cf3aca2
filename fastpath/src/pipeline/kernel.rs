//! The exception path into the kernel (issue 33): which packets for us the fast path hands to
//! the Linux kernel through a port's kernel interface (`[[port]] kernel_interface`), and the
//! counters of the workers that carry them both ways.
//!
//! The design, stated:
//! - **Into the kernel, through sockets.** What goes to the kernel is queued like a service's
//!   packets: an `action = "kernel"` service uses its own sockets; everything `[kernel] punt`
//!   selects goes to the internal service `kernel`, one socket per worker. So fanout, rollover
//!   and the flow limit apply before anything reaches the kernel, the queue has a capacity
//!   (overflow is the outcome `kernel_full`), and the RX lcore's cost is an enqueue: it never
//!   makes a system call and never waits on the kernel. The socket's worker writes the packet on
//!   its own TX queue of the kernel interface (a `net_tap` or virtio-user port with one queue
//!   pair per worker), cut into fragments if it is larger than the MTU (a reassembled datagram),
//!   which the kernel reassembles itself.
//! - **Out of the kernel.** Each worker polls its own RX queue of every kernel interface and
//!   sends what the kernel wrote out of the mirrored port, on the worker's own TX queue of that
//!   port (no shared TX lock). These packets are not "received" in the sense of
//!   `sum(rx) == sum(outcomes)`: they are counted `from_kernel`.
//! - **Neighbours.** The kernel interface has the port's MAC and addresses. The fast path keeps
//!   answering ARP requests and neighbour solicitations for the port's addresses (one answer,
//!   with the port's MAC: the kernel never sees them, so it never answers as well); ARP replies
//!   and neighbour advertisements sent to us go to the kernel, whose own requests they answer,
//!   so it learns each neighbour once, by itself.
//! - **What `punt` selects**, for a port with a kernel interface, packets at the first level (not
//!   inside a tunnel), to one of the port's addresses, after the source-validation rule and
//!   reassembly: `tcp:N` / `udp:N` (a port no service has; validation refuses overlaps), and
//!   `unhandled`: TCP and UDP to ports without a service (instead of a reset or a Port
//!   Unreachable), protocols the box does not deliver (instead of a Protocol Unreachable), ICMP
//!   and ICMPv6 messages the fast path does not answer (errors about the kernel's own
//!   connections, for instance). Echo, NDP, ARP requests and the services keep their fast path.
//! - **The kernel keeps our promises.** Under `unhandled`, a TCP connection attempt (SYN
//!   without ACK) goes to the kernel only where a kernel socket listens on its port
//!   ([`KernelListeners`], read by the control thread with `sock_diag`); elsewhere it gets
//!   fastpathd's own closed-port decision, the `[tcp_reset]` limiter, exactly as without a
//!   kernel interface (Linux would answer every spoofed SYN with a reset). Other segments may
//!   belong to the kernel's connections, its outgoing ones included, which only it knows: they
//!   are punted. Everything punted passes a budget first ([`PuntBudget`], `[kernel] punt_rate`
//!   and `punt_burst`, a share per RX lcore, checked before the enqueue: outcome
//!   `kernel_limited`), so what reaches the kernel, and what it can be made to answer, is
//!   bounded.

use super::parse::Parsed;
use super::verdict::Instant;
use crate::stats::Counter;
use crate::wire::{IpProtocol, TcpFlags};
use std::sync::atomic::{AtomicU64, Ordering};

/// Which TCP and UDP ports go to the kernel, and whether unhandled local traffic does.
#[derive(Clone, PartialEq, Eq)]
pub struct PuntRules {
    unhandled: bool,
    /// One bit per port, TCP then UDP.
    ports: Box<[u64; 2048]>,
}

impl std::fmt::Debug for PuntRules {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let n: u32 = self.ports.iter().map(|w| w.count_ones()).sum();
        write!(f, "PuntRules(unhandled {}, {n} ports)", self.unhandled)
    }
}

impl Default for PuntRules {
    fn default() -> Self {
        PuntRules::new(false, &[])
    }
}

fn bit(protocol: IpProtocol, port: u16) -> Option<usize> {
    match protocol {
        IpProtocol::TCP => Some(port as usize),
        IpProtocol::UDP => Some(65536 + port as usize),
        _ => None,
    }
}

impl PuntRules {
    /// `unhandled` and these (protocol, port) pairs (TCP or UDP; others are ignored).
    pub fn new(unhandled: bool, ports: &[(IpProtocol, u16)]) -> Self {
        let mut bits = Box::new([0u64; 2048]);
        for &(proto, port) in ports {
            if let Some(b) = bit(proto, port) {
                bits[b / 64] |= 1 << (b % 64);
            }
        }
        PuntRules { unhandled, ports: bits }
    }

    /// Whether local traffic no stage or service handles goes to the kernel.
    #[inline]
    pub fn unhandled(&self) -> bool {
        self.unhandled
    }

    /// Whether `protocol` to `port` is listed (`tcp:N`, `udp:N`).
    #[inline]
    pub fn listed(&self, protocol: IpProtocol, port: u16) -> bool {
        bit(protocol, port).is_some_and(|b| self.ports[b / 64] & (1 << (b % 64)) != 0)
    }

    /// Whether a TCP or UDP packet to a port without a service goes to the kernel.
    #[inline]
    pub fn takes_port(&self, p: &Parsed) -> bool {
        p.ports.is_some_and(|(_, dport)| self.takes(p.protocol, dport))
    }

    /// Whether a packet of `protocol` to local port `dport` without a service is punted.
    #[inline]
    pub fn takes(&self, protocol: IpProtocol, dport: u16) -> bool {
        self.unhandled || self.listed(protocol, dport)
    }
}

/// The TCP ports a kernel socket listens on (bound to a wildcard address or to one of the
/// mirrored ports' addresses): one bit per port, written by the control thread when the set
/// changes, read by the RX lcores for a connection attempt to a port without a service.
#[derive(Debug)]
pub struct KernelListeners {
    bits: Box<[AtomicU64]>,
}

impl Default for KernelListeners {
    fn default() -> Self {
        KernelListeners {
            bits: (0..1024).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl KernelListeners {
    /// Whether a kernel socket listens on TCP port `port`.
    #[inline]
    pub fn listening(&self, port: u16) -> bool {
        self.bits[port as usize / 64].load(Ordering::Relaxed) & (1 << (port % 64)) != 0
    }

    /// Makes `ports` the listening set; only the words that change are written. Returns
    /// whether anything changed.
    pub fn set(&self, ports: impl IntoIterator<Item = u16>) -> bool {
        let mut next = [0u64; 1024];
        for p in ports {
            next[p as usize / 64] |= 1 << (p % 64);
        }
        let mut changed = false;
        for (w, n) in self.bits.iter().zip(next) {
            if w.load(Ordering::Relaxed) != n {
                w.store(n, Ordering::Relaxed);
                changed = true;
            }
        }
        changed
    }

    /// The listening ports, in order.
    pub fn ports(&self) -> Vec<u16> {
        (0..=u16::MAX).filter(|&p| self.listening(p)).collect()
    }
}

/// One RX lcore's share of `[kernel] punt_rate` / `punt_burst`, as a generic cell rate
/// (GCRA): a packet costs `cost_ns` of credit and at most `limit_ns` may be owed ahead of now.
/// `cost_ns` 0: no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PuntBudget {
    /// Nanoseconds of credit a packet takes (`rx_lcores` × 10⁹ / rate).
    pub cost_ns: u64,
    /// The burst in nanoseconds of credit.
    pub limit_ns: u64,
}

impl PuntBudget {
    /// `rate` packets a second and `burst` at once across `rx_lcores` RX lcores (each its share,
    /// a burst of at least one); `rate` 0: no limit.
    pub fn per_lcore(rate: u32, burst: u32, rx_lcores: usize) -> Self {
        if rate == 0 {
            return PuntBudget::default();
        }
        let n = rx_lcores.max(1) as u64;
        let cost_ns = (1_000_000_000 * n / rate as u64).max(1);
        let share = (burst as u64 / n).max(1);
        PuntBudget {
            cost_ns,
            limit_ns: cost_ns * share,
        }
    }
}

/// An RX lcore's use of its [`PuntBudget`]: the theoretical arrival time of the next packet
/// (kept across reloads).
#[derive(Clone, Copy, Debug, Default)]
pub struct PuntMeter {
    tat: u64,
}

impl PuntMeter {
    /// Whether a packet may be punted at `now`; if so, its credit is taken.
    #[inline]
    pub fn admit(&mut self, b: PuntBudget, now: Instant) -> bool {
        if b.cost_ns == 0 {
            return true;
        }
        let tat = self.tat.max(now.0);
        let next = tat + b.cost_ns;
        if next - now.0 > b.limit_ns {
            return false;
        }
        self.tat = next;
        true
    }
}

/// The kernel path of a generation: the rules, the internal `kernel` service and which port
/// mirrors into which kernel interface.
#[derive(Clone, Debug, Default)]
pub struct KernelPath {
    /// What `[kernel] punt` selects.
    pub rules: PuntRules,
    /// This generation's per-RX-lcore punt budget.
    pub budget: PuntBudget,
    /// Where the kernel listens (kept across reloads; the control thread keeps it current).
    pub listeners: std::sync::Arc<KernelListeners>,
    /// The internal service (index into the service table) whose sockets queue punted packets.
    pub service: usize,
    /// By DPDK port id: the DPDK port id of its kernel interface.
    pub interface_of: Vec<Option<u16>>,
    /// By DPDK port id of a kernel interface: the port it mirrors.
    pub port_of: Vec<Option<u16>>,
    /// By DPDK port id (of the port or of its kernel interface): the index of the port in the
    /// config, which indexes [`KernelCounters`].
    pub index_of: Vec<Option<u16>>,
    /// The workers' counters (kept across reloads).
    pub counters: std::sync::Arc<KernelCounters>,
}

impl KernelPath {
    /// Whether a TCP segment with `flags` to local port `dport`, which no service has, goes to
    /// the kernel: listed (`tcp:N`) it does; under `unhandled`, a connection attempt only where
    /// the kernel listens (else it is fastpathd's to answer, through the reset limiter), any
    /// other segment always (it may be the kernel's connection's).
    #[inline]
    pub fn takes_tcp(&self, dport: u16, flags: TcpFlags) -> bool {
        if self.rules.listed(IpProtocol::TCP, dport) {
            return true;
        }
        let attempt = flags.0 & (TcpFlags::SYN.0 | TcpFlags::ACK.0 | TcpFlags::RST.0) == TcpFlags::SYN.0;
        self.rules.unhandled() && (!attempt || self.listeners.listening(dport))
    }

    /// [`KernelPath::takes_tcp`], or for UDP [`PuntRules::takes`], for the packet `p` to a port
    /// without a service.
    #[inline]
    pub fn takes_port(&self, p: &Parsed) -> bool {
        match (p.protocol, p.ports) {
            (IpProtocol::TCP, Some((_, dport))) => self.takes_tcp(dport, p.tcp_flags.unwrap_or(TcpFlags(0))),
            _ => self.rules.takes_port(p),
        }
    }

    /// The kernel interface of `port`, if it has one.
    #[inline]
    pub fn interface(&self, port: u16) -> Option<u16> {
        self.interface_of.get(port as usize).copied().flatten()
    }

    /// The port a kernel interface mirrors.
    #[inline]
    pub fn mirrored(&self, interface: u16) -> Option<u16> {
        self.port_of.get(interface as usize).copied().flatten()
    }

    /// `worker`'s counters for port (or kernel interface) `id`.
    #[inline]
    pub fn counters(&self, worker: usize, id: u16) -> Option<&KernelPortCounters> {
        let i = self.index_of.get(id as usize).copied().flatten()? as usize;
        self.counters.slots.get(worker)?.get(i)
    }
}

/// One worker's counters for one port's kernel path (one writer: that worker).
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct KernelPortCounters {
    /// Written into the kernel interface (`fastpath_kernel_packets_total{direction="to_kernel"}`).
    pub to_kernel: Counter,
    /// Sent out of the port from the kernel interface (`direction="from_kernel"`).
    pub from_kernel: Counter,
    /// Refused by the kernel interface's TX queue (`fastpath_kernel_dropped_total{reason="interface_full"}`).
    pub interface_full: Counter,
    /// From the kernel, refused by the port's TX queue (`reason="port_full"`).
    pub port_full: Counter,
    /// Could not be written: no kernel interface for the port it came in on, a packet inside a
    /// tunnel, no buffer to cut it into fragments (`reason="invalid"`).
    pub invalid: Counter,
}

/// Every worker's [`KernelPortCounters`], by worker slot and port index.
#[derive(Debug, Default)]
pub struct KernelCounters {
    /// `slots[worker][port index]`.
    pub slots: Vec<Vec<KernelPortCounters>>,
}

impl KernelCounters {
    /// Counters for `workers` workers and `ports` ports.
    pub fn new(workers: usize, ports: usize) -> Self {
        KernelCounters {
            slots: (0..workers)
                .map(|_| (0..ports).map(|_| KernelPortCounters::default()).collect())
                .collect(),
        }
    }

    /// The sum over workers of one counter of port index `port`.
    pub fn sum(&self, port: usize, f: impl Fn(&KernelPortCounters) -> &Counter) -> u64 {
        self.slots.iter().filter_map(|w| w.get(port)).map(|c| f(c).get()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_list_ports_per_protocol() {
        let r = PuntRules::new(
            false,
            &[(IpProtocol::TCP, 22), (IpProtocol::UDP, 53), (IpProtocol::TCP, 65535)],
        );
        assert!(r.listed(IpProtocol::TCP, 22));
        assert!(!r.listed(IpProtocol::UDP, 22));
        assert!(r.listed(IpProtocol::UDP, 53));
        assert!(!r.listed(IpProtocol::TCP, 53));
        assert!(r.listed(IpProtocol::TCP, 65535));
        assert!(!r.listed(IpProtocol::UDP, 65535));
        assert!(!r.listed(IpProtocol::TCP, 0));
        assert!(!r.listed(IpProtocol::ICMP, 22));
        assert!(!r.unhandled());
        assert!(PuntRules::new(true, &[]).unhandled());
    }
}
