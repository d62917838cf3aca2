//! The exception path into the kernel: which packets for us the fast path hands to
//! the Linux kernel through a port's kernel interface (`[[port]] kernel_interface`), and the
//! counters of the workers that carry them both ways.
//!
//! The design, stated:
//! - **Into the kernel, through sockets.** What goes to the kernel is queued like a service's
//!   packets: an `action = "kernel"` service uses its own sockets; everything `[kernel] punt`
//!   selects goes to the internal service `kernel`, one socket per worker. So the hash fanout
//!   keeps each flow on one worker, in order (rollover and the flow limit are off unless the
//!   config turns them on: a TCP flow moved between workers arrives reordered, and a lone bulk
//!   transfer is always the dominant flow), the queue has a capacity
//!   (overflow is the outcome `kernel_full`), and the RX lcore's cost is an enqueue: it never
//!   makes a system call and never waits on the kernel. The socket's worker writes the packet on
//!   its own TX queue of the kernel interface (a `net_tap` or virtio-user port, or with
//!   `[kernel] offloads` a TAP device of ours that coalesces TCP segments, one queue pair per
//!   worker), cut into fragments if it is larger than the MTU (a reassembled datagram), which
//!   the kernel reassembles itself.
//! - **Out of the kernel.** Each worker polls its own RX queue of every kernel interface and
//!   sends what the kernel wrote out of the mirrored port, on the worker's own TX queue of that
//!   port (no shared TX lock). These packets are not "received" in the sense of
//!   `sum(rx) == sum(outcomes)`: they are counted `from_kernel`.
//! - **Neighbours.** The kernel interface has the port's MAC and addresses. The fast path keeps
//!   answering ARP requests and neighbour solicitations for the port's addresses (one answer,
//!   with the port's MAC: the kernel never sees them, so it never answers as well, nor learns
//!   anything from them). The kernel resolves its neighbours itself: the worker that carries
//!   one of its ARP requests or neighbour solicitations out of the port records its target
//!   first ([`solicitation`], [`Solicitations`]), and an answer to us goes to the kernel only if
//!   it answers such a question asked on that port within [`ANSWER_WINDOW_NS`]: an ARP reply
//!   (unicast to us, for one of our addresses) from an address the kernel asked for, a
//!   neighbour advertisement (unicast to us, valid by RFC 4861 §7.1.2) with the Solicited flag
//!   for a target the kernel asked about. Any other such reply is the outcome
//!   `neighbor_unsolicited`: one advertisement with the Override flag would otherwise rewrite
//!   the kernel's entry for a peer (RFC 4861 §7.2.5), and one ARP reply likewise. Gratuitous
//!   ARP, advertisements to all nodes (announcements, Duplicate Address Detection) and router
//!   messages never reach the kernel.
//! - **What `punt` selects**, for a port with a kernel interface, packets at the first level (not
//!   inside a tunnel), to one of the port's addresses, after the source-validation rule and
//!   reassembly: `tcp:N` / `udp:N` (a port no service has; validation refuses overlaps), and
//!   `unhandled`: TCP and UDP to ports without a service (instead of a reset or a Port
//!   Unreachable), protocols the box does not deliver (instead of a Protocol Unreachable), ICMP
//!   and ICMPv6 messages the fast path does not answer (errors about the kernel's own
//!   connections, for instance). Echo, NDP, ARP requests and the services keep their fast path;
//!   `unhandled` takes no neighbour discovery or ARP message.
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
use crate::wire::{
    ArpOperation, ArpPacket, EtherType, EthernetFrame, Icmpv6Message, Icmpv6Packet, IpProtocol, Ipv6Packet,
    NeighborPacket, TcpFlags,
};
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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
    pub counters: Arc<KernelCounters>,
    /// The addresses the kernel asked about, by port (kept across reloads: a reload does not
    /// lose a solicitation in flight).
    pub solicited: Arc<Solicitations>,
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
        self.counters.slots.get(worker)?.get(self.index(id)?)
    }

    /// The index in the config of port (or kernel interface) `id`.
    #[inline]
    fn index(&self, id: u16) -> Option<usize> {
        self.index_of.get(id as usize).copied().flatten().map(usize::from)
    }

    /// Worker `worker` carried, out of kernel interface `interface`, the kernel's solicitation
    /// of `target` ([`solicitation`]) at `now`: answers about `target` are taken on the
    /// mirrored port for [`ANSWER_WINDOW_NS`]. Called before the solicitation leaves.
    pub fn record_solicitation(&self, worker: usize, interface: u16, target: IpAddr, now: Instant) {
        if let Some(i) = self.index(interface) {
            self.solicited.record(worker, i, target, now);
        }
    }

    /// Whether an answer about `target` received on `port` at `now` answers a solicitation the
    /// kernel sent ([`KernelPath::record_solicitation`]).
    pub fn solicited(&self, port: u16, target: IpAddr, now: Instant) -> bool {
        self.index(port).is_some_and(|i| self.solicited.asked(i, target, now))
    }
}

/// How long an answer is taken after the kernel asked about an address. Linux sends up to 3
/// solicitations 1 s apart (`mcast_solicit` / `ucast_solicit` 3, `retrans_time` 1 s), so an
/// entry waits in INCOMPLETE or PROBE about 3 s, and each solicitation opens the window again:
/// 5 s takes a slow answer to the last one, and an answer later than that meets an entry the
/// kernel has resolved or given up on.
pub const ANSWER_WINDOW_NS: u64 = 5_000_000_000;

/// Buckets of a [`Solicitations`] table.
const BUCKETS: usize = 64;
/// Entries per bucket.
const WAYS: usize = 4;

/// One bucket: each entry a tag (a keyed hash of the address, never 0; 0 is empty) and the time
/// the kernel last asked about it. One cache line.
#[derive(Default)]
#[repr(align(64))]
struct Bucket {
    tag: [AtomicU64; WAYS],
    at: [AtomicU64; WAYS],
}

/// The addresses the kernel asked about recently on each port: the targets of its ARP requests
/// and neighbour solicitations, written by the workers that carry them out of the kernel
/// interface, read by the RX lcores for an ARP reply or a neighbour advertisement to us. Both
/// are rare, so nothing here is written or read per packet.
///
/// Bounded: a table per worker and port of [`BUCKETS`] × [`WAYS`] entries (4 KiB), a bucket
/// chosen by a keyed hash (a key per daemon), a new entry replacing the bucket's oldest. Nobody
/// on the link can write to it, only the kernel's own solicitations do; one who makes the kernel
/// solicit many addresses (packets from many spoofed on-link sources to a punted port) can only
/// push entries out, which loses an answer that had not come yet, and the kernel's next probe
/// records it again. Answers within the window are all taken, as Linux takes every answer while
/// the entry is INCOMPLETE or PROBE.
///
/// Without a lock: each table has one writer, its worker (whichever worker carries a
/// solicitation records it, and a reader looks in every worker's table). The writer empties a
/// tag before it stores another address's time (release) and then the tag (release); a reader
/// takes an entry only if it reads the same tag before and after the time, so it never takes an
/// address as asked later than it last was (a fresh time another address was asked at after
/// it): an address asked long ago cannot look fresh.
pub struct Solicitations {
    key: std::collections::hash_map::RandomState,
    ports: usize,
    /// `tables[worker * ports + port]`.
    tables: Box<[Box<[Bucket]>]>,
}

impl std::fmt::Debug for Solicitations {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "Solicitations({} tables)", self.tables.len())
    }
}

impl Default for Solicitations {
    fn default() -> Self {
        Solicitations::new(0, 0)
    }
}

impl Solicitations {
    /// Empty tables for `workers` workers and `ports` ports, with a key of their own.
    pub fn new(workers: usize, ports: usize) -> Self {
        Solicitations {
            key: Default::default(),
            ports,
            tables: (0..workers * ports)
                .map(|_| (0..BUCKETS).map(|_| Bucket::default()).collect())
                .collect(),
        }
    }

    /// The keyed hash of `target`: its bucket index and its tag.
    #[inline]
    fn hash(&self, target: IpAddr) -> (usize, u64) {
        let h = self.key.hash_one(target);
        ((h >> 32) as usize % BUCKETS, h | 1)
    }

    /// Worker `worker` saw the kernel ask about `target` on port index `port` at `now`.
    pub fn record(&self, worker: usize, port: usize, target: IpAddr, now: Instant) {
        if port >= self.ports {
            return;
        }
        let (i, tag) = self.hash(target);
        let Some(b) = self.tables.get(worker * self.ports + port).and_then(|t| t.get(i)) else {
            return;
        };
        b.put(tag, now);
    }

    /// Whether the kernel asked about `target` on port index `port` within
    /// [`ANSWER_WINDOW_NS`] before `now`, through any worker.
    pub fn asked(&self, port: usize, target: IpAddr, now: Instant) -> bool {
        if port >= self.ports {
            return false;
        }
        let (i, tag) = self.hash(target);
        self.tables
            .iter()
            .skip(port)
            .step_by(self.ports)
            .filter_map(|t| t.get(i))
            .any(|b| b.fresh(tag, now))
    }
}

impl Bucket {
    /// Its one writer records `tag` at `now`: the entry that has it, else an empty one, else
    /// the oldest.
    fn put(&self, tag: u64, now: Instant) {
        // One writer: what it reads back is what it wrote.
        if let Some(w) = (0..WAYS).find(|&w| self.tag[w].load(Ordering::Relaxed) == tag) {
            self.at[w].store(now.0, Ordering::Release);
            return;
        }
        let w = (0..WAYS)
            .min_by_key(|&w| {
                (
                    self.tag[w].load(Ordering::Relaxed) != 0,
                    self.at[w].load(Ordering::Relaxed),
                )
            })
            .unwrap_or(0);
        self.tag[w].store(0, Ordering::Relaxed);
        self.at[w].store(now.0, Ordering::Release);
        self.tag[w].store(tag, Ordering::Release);
    }

    /// Whether `tag` was recorded within [`ANSWER_WINDOW_NS`] before `now`.
    fn fresh(&self, tag: u64, now: Instant) -> bool {
        self.asked_at(tag)
            .is_some_and(|at| now.0.saturating_sub(at) <= ANSWER_WINDOW_NS)
    }

    /// When `tag` was recorded, if it is here: never a time recorded for another tag after it
    /// (the writer's clock only goes forward, so an earlier time at worst).
    fn asked_at(&self, tag: u64) -> Option<u64> {
        (0..WAYS).find_map(|w| {
            if self.tag[w].load(Ordering::Acquire) != tag {
                return None;
            }
            // A time stored after the tag was emptied is seen with the tag read again.
            let at = self.at[w].load(Ordering::Acquire);
            (self.tag[w].load(Ordering::Relaxed) == tag).then_some(at)
        })
    }
}

/// The address a frame the kernel wrote asks about: the target of an ARP request or of a
/// neighbour solicitation (multicast, or a unicast reachability probe, RFC 4861 §7.3.3). `None`
/// for any other frame, and for the questions whose answers never come to us as a unicast
/// reply: announcements (gratuitous ARP, sender = target), RFC 5227 probes (sender 0.0.0.0) and
/// Duplicate Address Detection (source `::`, answered to all nodes, RFC 4862 §5.4.3).
#[inline]
pub fn solicitation(frame: &[u8]) -> Option<IpAddr> {
    // Most of what the kernel writes is neither: one compare on its EtherType.
    let ty = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    match EtherType(ty) {
        EtherType::ARP | EtherType::VLAN | EtherType::QINQ => solicitation_in(frame),
        EtherType::IPV6 if frame.get(20) == Some(&58) && frame.get(54) == Some(&135) => solicitation_in(frame),
        _ => None,
    }
}

/// [`solicitation`] past its first test: the frame parsed.
#[cold]
#[inline(never)]
fn solicitation_in(frame: &[u8]) -> Option<IpAddr> {
    let f = EthernetFrame::new_checked(frame).ok()?;
    match f.ethertype() {
        EtherType::ARP => {
            let a = ArpPacket::new_checked(f.payload()).ok()?;
            let (spa, tpa) = (a.sender_ip(), a.target_ip());
            let asks = a.operation() == ArpOperation::Request && !spa.is_unspecified() && spa != tpa;
            asks.then_some(IpAddr::V4(tpa))
        }
        EtherType::IPV6 => {
            // Linux sends its solicitations without extension headers.
            let ip = Ipv6Packet::new_checked(f.payload()).ok()?;
            if ip.next_header() != IpProtocol::ICMPV6 || ip.src_addr().is_unspecified() {
                return None;
            }
            let icmp = Icmpv6Packet::new_checked(ip.payload()).ok()?;
            let ns = NeighborPacket::new_checked(ip.payload()).ok()?;
            let target = ns.target_addr();
            (icmp.msg_type() == Icmpv6Message::NeighborSolicit && !target.is_multicast()).then_some(IpAddr::V6(target))
        }
        _ => None,
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
    /// tunnel, no buffer to cut it into fragments; from the kernel, a frame that could not be
    /// cut into segments (`reason="invalid"`).
    pub invalid: Counter,
    /// Written into the kernel inside a coalesced frame (GRO, the TAP backend:
    /// `fastpath_kernel_offloaded_total{direction="to_kernel"}`).
    pub coalesced: Counter,
    /// Cut out of a large frame the kernel wrote (TSO, `direction="from_kernel"`).
    pub segmented: Counter,
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
    use crate::buf::PacketBuf;
    use crate::pipeline::ndp::tests::ns;
    use crate::pipeline::parse::tests::{v6_frame, MAC};
    use crate::wire::ipv6::solicited_node;
    use crate::wire::{arp, ethernet, EthernetAddress};
    use std::net::{Ipv4Addr, Ipv6Addr};

    const ME: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    const THEM: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
    const T: Instant = Instant(1_000_000_000);

    fn me6() -> Ipv6Addr {
        "2001:db8::1".parse().unwrap()
    }
    fn them6() -> Ipv6Addr {
        "2001:db8::2".parse().unwrap()
    }

    /// An ARP packet `op` from the kernel (our MAC), `tags` 802.1Q tags in front of it.
    fn arp_frame(op: ArpOperation, spa: Ipv4Addr, tpa: Ipv4Addr, tags: usize) -> Vec<u8> {
        let mut v = vec![0u8; 14];
        ethernet::emit_header(&mut v, EthernetAddress::BROADCAST, MAC, EtherType::ARP);
        for _ in 0..tags {
            v.splice(12..12, [0x81, 0x00, 0x00, 0x07]);
        }
        let at = v.len();
        v.resize(at + arp::PACKET_LEN, 0);
        arp::emit(&mut v[at..], op, MAC, spa, EthernetAddress([0; 6]), tpa);
        v
    }

    /// The kernel's solicitation of `target` from `src` to `dst`.
    fn ns_frame(src: Ipv6Addr, dst: Ipv6Addr, target: Ipv6Addr) -> Vec<u8> {
        ns(src, dst, target, 255, &[1, 1, 2, 0, 0, 0, 0, 1]).data().to_vec()
    }

    #[test]
    fn only_the_kernels_questions_are_solicitations() {
        let v4 = |a| Some(IpAddr::V4(a));
        let v6 = |a| Some(IpAddr::V6(a));
        // ARP: a request, also behind one or two VLAN tags; not a reply, an announcement
        // (gratuitous, sender = target) or an RFC 5227 probe (sender 0.0.0.0).
        assert_eq!(solicitation(&arp_frame(ArpOperation::Request, ME, THEM, 0)), v4(THEM));
        assert_eq!(solicitation(&arp_frame(ArpOperation::Request, ME, THEM, 1)), v4(THEM));
        assert_eq!(solicitation(&arp_frame(ArpOperation::Request, ME, THEM, 2)), v4(THEM));
        assert_eq!(solicitation(&arp_frame(ArpOperation::Reply, ME, THEM, 0)), None);
        assert_eq!(solicitation(&arp_frame(ArpOperation::Request, ME, ME, 0)), None);
        assert_eq!(
            solicitation(&arp_frame(ArpOperation::Request, Ipv4Addr::UNSPECIFIED, THEM, 0)),
            None
        );
        let mut short = arp_frame(ArpOperation::Request, ME, THEM, 0);
        short.truncate(short.len() - 1);
        assert_eq!(solicitation(&short), None);
        // NDP: a multicast solicitation and a unicast reachability probe; not Duplicate Address
        // Detection (from ::), a multicast target, an advertisement.
        let (me, them) = (me6(), them6());
        assert_eq!(solicitation(&ns_frame(me, solicited_node(&them), them)), v6(them));
        assert_eq!(solicitation(&ns_frame(me, them, them)), v6(them));
        assert_eq!(
            solicitation(&ns_frame(Ipv6Addr::UNSPECIFIED, solicited_node(&me), me)),
            None
        );
        let group: Ipv6Addr = "ff02::1".parse().unwrap();
        assert_eq!(solicitation(&ns_frame(me, group, group)), None);
        let mut na = ns_frame(me, them, them);
        na[54] = 136;
        assert_eq!(solicitation(&na), None);
        // Anything else the kernel writes.
        let udp = v6_frame(me, them, IpProtocol::UDP, &[], 64, &[0; 16]);
        assert_eq!(solicitation(&udp), None);
        assert_eq!(solicitation(&[0; 13]), None);
        assert_eq!(solicitation(&[]), None);
    }

    #[test]
    fn an_answer_is_taken_for_the_window_after_each_question_on_its_port() {
        let t = Solicitations::new(2, 2);
        let (a, b) = (IpAddr::V4(THEM), IpAddr::V6(them6()));
        assert!(!t.asked(0, a, T), "nothing asked yet");
        t.record(1, 0, a, T);
        assert!(t.asked(0, a, T), "asked through the second worker");
        assert!(
            t.asked(0, a, Instant(T.0 - 1)),
            "an RX burst's clock a moment behind the worker's"
        );
        assert!(t.asked(0, a, Instant(T.0 + ANSWER_WINDOW_NS)));
        assert!(!t.asked(0, a, Instant(T.0 + ANSWER_WINDOW_NS + 1)), "expired");
        assert!(!t.asked(1, a, T), "asked on another port");
        assert!(!t.asked(0, b, T), "another address");
        assert!(!t.asked(2, a, T), "a port the tables do not have");
        // Asked again, through either worker: the window runs from the last question.
        t.record(0, 0, a, Instant(T.0 + 3 * ANSWER_WINDOW_NS));
        assert!(t.asked(0, a, Instant(T.0 + 4 * ANSWER_WINDOW_NS)));
        t.record(1, 0, a, Instant(T.0 + 5 * ANSWER_WINDOW_NS));
        assert!(t.asked(0, a, Instant(T.0 + 6 * ANSWER_WINDOW_NS)));
        assert!(!t.asked(0, a, Instant(T.0 + 6 * ANSWER_WINDOW_NS + 1)));
        // No tables (a worker or port out of range) ask nothing and record nothing.
        t.record(2, 0, b, T);
        t.record(0, 2, b, T);
        assert!(!t.asked(0, b, T) && !t.asked(1, b, T));
        assert!(!Solicitations::default().asked(0, a, T));
        Solicitations::default().record(0, 0, a, T);
    }

    #[test]
    fn a_table_stays_bounded_and_keeps_each_buckets_newest_questions() {
        let t = Solicitations::new(1, 1);
        let addr = |i: u32| IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
        let n = 10_000u32;
        let mut by_bucket: Vec<Vec<u32>> = vec![Vec::new(); BUCKETS];
        for i in 0..n {
            let now = Instant(T.0 + i as u64);
            t.record(0, 0, addr(i), now);
            assert!(t.asked(0, addr(i), now), "the newest question {i}");
            by_bucket[t.hash(addr(i)).0].push(i);
        }
        let now = Instant(T.0 + n as u64);
        let kept: Vec<u32> = (0..n).filter(|&i| t.asked(0, addr(i), now)).collect();
        assert_eq!(kept.len(), BUCKETS * WAYS, "every entry holds one question, no more");
        for b in by_bucket {
            let newest = &b[b.len().saturating_sub(WAYS)..];
            assert!(newest.iter().all(|i| kept.contains(i)), "the oldest is replaced first");
        }
    }

    /// The writer and a reader without a lock: the time read for an address is never one the
    /// writer stored for another address after it (which could make an address asked long ago
    /// look fresh), however the reads interleave with the writes replacing its entry.
    #[test]
    fn a_reader_never_pairs_an_address_with_a_later_ones_time() {
        const TAGS: usize = 8;
        let tag = |i: usize| 2 * i as u64 + 1;
        let b = Arc::new(Bucket::default());
        // Per tag, the last time the writer is recording or has recorded for it.
        let last: Arc<[AtomicU64; TAGS]> = Arc::new(Default::default());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (b, last, stop) = (b.clone(), last.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut t = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    t += 1;
                    // Eight addresses in four entries: each replaces the oldest; every third
                    // question is the first address again (refreshed, or back in).
                    let i = if t.is_multiple_of(3) { 0 } else { t as usize % TAGS };
                    last[i].store(t, Ordering::Relaxed);
                    b.put(tag(i), Instant(t));
                }
                t
            })
        };
        let mut seen = 0u64;
        for k in 0..3_000_000 {
            let i = k % TAGS;
            if let Some(at) = b.asked_at(tag(i)) {
                std::sync::atomic::fence(Ordering::Acquire);
                let l = last[i].load(Ordering::Relaxed);
                assert!(at <= l, "address {i} read with time {at}, last recorded for it at {l}");
                seen += 1;
            }
        }
        stop.store(true, Ordering::Relaxed);
        let rounds = writer.join().unwrap();
        assert!(seen > 0 && rounds > 1000, "{seen} found, {rounds} questions written");
    }

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
