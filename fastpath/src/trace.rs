//! Per-packet trace: what the RX engine did with a packet and why, for an operator
//! (`fastpathctl trace`, `fastpathd --explain`).
//!
//! While no trace is armed the data path pays one relaxed load per burst ([`TraceTap::is_armed`],
//! read where the RX engine takes a burst). Armed, the engine runs the burst one packet at a
//! time through the same code (`RxEngine::burst_traced`), each packet settled (staged packets
//! enqueued, answers sent) before the next, so the lcore's own counters say what happened to
//! it: its outcome is the one outcome counter that moved, and the stages' counters that moved
//! with it (rollover, ICMP and reset limits, GRE decapsulation, reassembly) give the reasons.
//! What the tables decide statically (the service, the fanout's socket before rollover,
//! Maglev, the punt rule) comes from [`crate::pipeline::explain`], the same functions the
//! stages call. What is traced is what happened: a record never carries a guessed outcome.
//!
//! Records are fixed-size ([`Record`], packed into [`WORDS`] words) and go through a bounded
//! single-producer ring per lcore ([`RecordRing`]) to the control side: nothing allocates or
//! locks on the lcore, and a reader that falls behind loses records (counted), never packets.

use crate::outcome::Outcome;
use crate::pipeline::{Parsed, Tables};
use crate::wire::{IpProtocol, Toeplitz};
use arc_swap::ArcSwapOption;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Stage notes a record holds at most.
pub const MAX_NOTES: usize = 8;

/// Words a packed [`Record`] takes in a [`RecordRing`].
pub const WORDS: usize = 12 + 2 * MAX_NOTES;

/// Records a per-lcore ring holds by default.
pub const RING_RECORDS: usize = 1024;

/// The headers of a packet as received, before any stage rewrote it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Frame length.
    pub len: u32,
    /// The frame's EtherType (after at most one 802.1Q tag).
    pub ethertype: u16,
    /// The IP layer, when the frame is IPv4 or IPv6 that parses.
    pub ip: Option<IpSummary>,
}

/// The IP layer of a [`Summary`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpSummary {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// The upper-layer protocol.
    pub protocol: u8,
    /// Source and destination ports (UDP, TCP; not in a non-first fragment).
    pub ports: Option<(u16, u16)>,
    /// TCP flags.
    pub tcp_flags: Option<u8>,
    /// A fragment's offset in bytes, its More Fragments flag and identification.
    pub fragment: Option<(u16, bool, u32)>,
    /// The 802.1Q VLAN id, if tagged.
    pub vlan: Option<u16>,
    /// The flow hash the data path computes for it (the NIC's where it gave one).
    pub hash: u32,
}

impl Summary {
    /// The summary of `frame` (`len` bytes in all), its flow hash by `hasher` or the NIC's.
    pub fn of(frame: &[u8], len: u32, hasher: &Toeplitz, nic_hash: Option<u32>) -> Summary {
        let mut ethertype = frame.get(12..14).map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
        if ethertype == 0x8100 {
            ethertype = frame.get(16..18).map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
        }
        let ip = Parsed::parse(frame, hasher, nic_hash).ok().map(|p| IpSummary {
            src: p.src,
            dst: p.dst,
            protocol: p.protocol.0,
            ports: p.ports,
            tcp_flags: p.tcp_flags.map(|f| f.0),
            fragment: p.fragment.map(|f| (f.offset, f.more, f.ident)),
            vlan: p.vlan_id,
            hash: p.hash,
        });
        Summary { len, ethertype, ip }
    }

    /// One line: `198.51.100.7:5353 > 192.0.2.1:53 udp len 60`, the fragment and TCP flags
    /// where there are, or the EtherType of a frame that is not IP.
    pub fn line(&self) -> String {
        let Some(ip) = &self.ip else {
            return match self.ethertype {
                0x0806 => format!("arp len {}", self.len),
                t => format!("ethertype {t:#06x} len {}", self.len),
            };
        };
        let addr = |a: IpAddr, p: Option<u16>| match (a, p) {
            (IpAddr::V6(a), Some(p)) => format!("[{a}]:{p}"),
            (a, Some(p)) => format!("{a}:{p}"),
            (a, None) => a.to_string(),
        };
        let mut s = format!(
            "{} > {} {}",
            addr(ip.src, ip.ports.map(|p| p.0)),
            addr(ip.dst, ip.ports.map(|p| p.1)),
            protocol_name(ip.protocol)
        );
        if let Some(f) = ip.tcp_flags {
            s.push_str(&format!(" [{}]", tcp_flags(f)));
        }
        if let Some((off, more, id)) = ip.fragment {
            s.push_str(&format!(" frag id {id} offset {off}{}", if more { " +" } else { "" }));
        }
        if let Some(v) = ip.vlan {
            s.push_str(&format!(" vlan {v}"));
        }
        s.push_str(&format!(" len {}", self.len));
        s
    }
}

/// A protocol's name as the filter language and the summaries write it.
pub fn protocol_name(p: u8) -> String {
    match p {
        1 => "icmp".into(),
        6 => "tcp".into(),
        17 => "udp".into(),
        47 => "gre".into(),
        58 => "icmp6".into(),
        n => format!("proto {n}"),
    }
}

fn tcp_flags(f: u8) -> String {
    let names = [
        (0x02, 'S'),
        (0x10, '.'),
        (0x01, 'F'),
        (0x04, 'R'),
        (0x08, 'P'),
        (0x20, 'U'),
    ];
    names.iter().filter(|(b, _)| f & b != 0).map(|(_, c)| *c).collect()
}

/// What one stage decided about a packet, in numbers; [`Note::stage`] and [`Note::reason`]
/// say it in words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Note {
    /// The stage that counts this outcome decided it, and the outcome says why.
    Final(Outcome),
    /// Decapsulated from tunnel (an index into [`Tables::tunnels`]) at nesting `depth`.
    GreDecap {
        /// The tunnel.
        tunnel: u32,
        /// 1 for the outer header.
        depth: u32,
    },
    /// Dropped by the tunnel's sequence receive rule.
    GreSeqDropped {
        /// The tunnel.
        tunnel: u32,
    },
    /// A fragment held by the reassembler (`held` fragments of `datagrams` now held).
    ReasmHeld {
        /// Fragments the lcore holds now.
        held: u32,
        /// Datagrams in progress.
        datagrams: u32,
    },
    /// This fragment completed its datagram, which went on through the pipeline.
    ReasmCompleted,
    /// The reassembler refused it (`pipeline::reasm::Reason::index`).
    ReasmRefused {
        /// The reason's index.
        reason: u32,
    },
    /// A held fragment's datagram ended later: completed by another fragment, timed out or
    /// flushed ([`Outcome`] of the fragment).
    ReasmLater(Outcome),
    /// Delivered to (or refused by) this socket, an index into [`Tables::sockets`].
    Service {
        /// The socket.
        socket: u32,
    },
    /// The fanout's choice: the socket its mode picked, and the one the packet went to.
    Fanout {
        /// Before rollover.
        from: u32,
        /// After.
        to: u32,
    },
    /// Rolled over from `from`, which had some room left, because the flow is huge.
    RolloverHuge {
        /// The socket it left.
        from: u32,
        /// Of the socket's last 16 flow hashes, how many are this flow's.
        seen: u32,
    },
    /// Rolled over from `from`, which had no room left.
    RolloverFull {
        /// The socket it left.
        from: u32,
    },
    /// No socket had normal room: it stayed on `from` (or found it full).
    RolloverFailed {
        /// The socket it stayed on.
        from: u32,
    },
    /// Shed by the flow limit: its flow dominates socket `socket`, at least half full.
    FlowLimited {
        /// The socket.
        socket: u32,
    },
    /// The `tunnel` service's Maglev lookup: the tunnel its worker sends it into
    /// (`u32::MAX`: none, every tunnel drained).
    Maglev {
        /// The tunnel.
        tunnel: u32,
    },
    /// Punted to the kernel: by the punt rule for this protocol and port.
    KernelRule {
        /// Protocol number.
        protocol: u32,
        /// Destination port.
        port: u32,
    },
    /// Punted to the kernel: `punt = "unhandled"` (or a kernel socket listens on the port).
    KernelUnhandled,
    /// The punt budget of this lcore was spent.
    KernelLimited,
    /// An ICMP error sent (`ErrorKind::type_index`).
    IcmpSent {
        /// The type index.
        kind: u32,
    },
    /// An ICMP error held back: 0 the global budget, 1 the per-destination budget.
    IcmpSuppressed {
        /// The limit.
        limit: u32,
    },
    /// A TCP reset sent.
    ResetSent,
    /// A TCP reset held back: 0 global, 1 per destination.
    ResetSuppressed {
        /// The limit.
        limit: u32,
    },
    /// The TCP state table's reason ([`crate::pipeline::tcp_state::Reason`] as a number).
    TcpState {
        /// The reason.
        reason: u32,
    },
    /// A worker took it from this socket (an index into [`Tables::sockets`]).
    Worker {
        /// The socket.
        socket: u32,
    },
    /// What the socket's action (0 sink, 1 echo, 2 tunnel, 3 kernel) did with it.
    WorkerAction {
        /// The action.
        action: u32,
        /// What it did.
        did: WorkerDid,
    },
}

/// What a worker's action did with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerDid {
    /// Sent out of this DPDK port (an echo's answer; a kernel packet: its kernel interface).
    Port(u32),
    /// Into this tunnel (an index into [`Tables::tunnels`]); pinned by the connection table.
    Tunnel(u32, bool),
    /// Consumed.
    Sunk,
    /// Refused by the echo policy (a source port echo never answers).
    Refused,
    /// The TX queue had no room.
    TxFull,
    /// Could not be handled (counted `invalid`).
    Invalid,
}

impl WorkerDid {
    fn pack(self) -> (u32, u32) {
        match self {
            WorkerDid::Port(p) => (0, p),
            WorkerDid::Tunnel(t, tracked) => (1 | (tracked as u32) << 8, t),
            WorkerDid::Sunk => (2, 0),
            WorkerDid::Refused => (3, 0),
            WorkerDid::TxFull => (4, 0),
            WorkerDid::Invalid => (5, 0),
        }
    }

    fn unpack(a: u32, b: u32) -> WorkerDid {
        match a & 0xff {
            0 => WorkerDid::Port(b),
            1 => WorkerDid::Tunnel(b, a >> 8 & 1 == 1),
            2 => WorkerDid::Sunk,
            3 => WorkerDid::Refused,
            4 => WorkerDid::TxFull,
            _ => WorkerDid::Invalid,
        }
    }
}

const ACTIONS: [&str; 4] = ["sink", "echo", "tunnel", "kernel"];

/// The trace's words for each [`crate::pipeline::icmp_error::ErrorType`], by its index.
const ICMP_KINDS: [&str; crate::pipeline::icmp_error::ErrorType::COUNT] = [
    "port unreachable",
    "protocol unreachable",
    "time exceeded (reassembly)",
    "fragmentation needed",
    "packet too big",
];

impl Note {
    /// The stage's name.
    pub fn stage(&self) -> &'static str {
        match self {
            Note::Final(o) => outcome_stage(*o),
            Note::GreDecap { .. } | Note::GreSeqDropped { .. } => "gre",
            Note::ReasmHeld { .. } | Note::ReasmCompleted | Note::ReasmRefused { .. } | Note::ReasmLater(_) => {
                "reassembly"
            }
            Note::Service { .. } => "service",
            Note::Fanout { .. } => "fanout",
            Note::RolloverHuge { .. } | Note::RolloverFull { .. } | Note::RolloverFailed { .. } => "rollover",
            Note::FlowLimited { .. } => "flow_limit",
            Note::Maglev { .. } => "maglev",
            Note::KernelRule { .. } | Note::KernelUnhandled | Note::KernelLimited => "kernel",
            Note::IcmpSent { .. } | Note::IcmpSuppressed { .. } => "icmp",
            Note::ResetSent | Note::ResetSuppressed { .. } => "tcp_reset",
            Note::TcpState { .. } => "tcp_state",
            Note::Worker { .. } => "worker",
            Note::WorkerAction { action, .. } => ACTIONS.get(*action as usize).copied().unwrap_or("worker"),
        }
    }

    /// The reason in an operator's words, with names from `t` (the generation the record was
    /// made with, or a later one: then an index may name nothing and is shown as a number).
    pub fn reason(&self, t: Option<&Tables>, s: &Summary) -> String {
        let socket = |i: u32| match t.and_then(|t| t.sockets.get(i as usize)) {
            Some(s) => format!("{} socket {}", s.service, s.index),
            None => format!("socket #{i}"),
        };
        let sock_index = |i: u32| match t.and_then(|t| t.sockets.get(i as usize)) {
            Some(s) => format!("socket {}", s.index),
            None => format!("socket #{i}"),
        };
        let tunnel = |i: u32| match t.and_then(|t| t.tunnels.get(i as usize)) {
            Some(t) => match t.key {
                Some(k) => format!("tunnel {} key {k}", t.name),
                None => format!("tunnel {}", t.name),
            },
            None => format!("tunnel #{i}"),
        };
        let src = s.ip.map_or_else(|| "the source".to_string(), |ip| ip.src.to_string());
        match *self {
            Note::Final(o) => outcome_reason(o, s),
            Note::GreDecap { tunnel: i, depth } => format!("decap {}, depth {depth}", tunnel(i)),
            Note::GreSeqDropped { tunnel: i } => {
                format!("dropped: not newer than the last packet accepted on {}", tunnel(i))
            }
            Note::ReasmHeld { held, datagrams } => {
                format!("held, {held} fragments of {datagrams} datagrams held now")
            }
            Note::ReasmCompleted => "completed the datagram, which went on".into(),
            Note::ReasmRefused { reason } => format!(
                "refused: {}",
                crate::pipeline::reasm::Reason::ALL
                    .get(reason as usize)
                    .map_or("unknown", |r| r.label())
            ),
            Note::ReasmLater(o) => match o {
                Outcome::Reassembled => "held, then its datagram completed".into(),
                Outcome::ReassemblyTimeout => "held, then its datagram timed out".into(),
                Outcome::ReassemblyFlushed => "held, then flushed at the stop".into(),
                Outcome::IcmpError => "held, then its datagram timed out (time exceeded sent)".into(),
                o => format!("held, then {}", o.name()),
            },
            Note::Service { socket: i } => socket(i),
            Note::Fanout { from, to } if from == to => format!("picked {}", sock_index(to)),
            Note::Fanout { from, to } => format!("{} → {}", sock_index(from), sock_index(to)),
            Note::RolloverHuge { from, seen } => format!("{} ROOM_LOW and flow huge ({seen} of 16)", sock_index(from)),
            Note::RolloverFull { from } => format!("{} ROOM_NONE", sock_index(from)),
            Note::RolloverFailed { from } => {
                format!("failed: no socket with normal room, stayed on {}", sock_index(from))
            }
            Note::FlowLimited { socket: i } => format!("flow dominates {}, at least half full", socket(i)),
            Note::Maglev { tunnel: u32::MAX } => "no backend (every tunnel drained)".into(),
            Note::Maglev { tunnel: i } => match t.and_then(|t| t.tunnels.get(i as usize)) {
                Some(t) => format!("backend {}", t.name),
                None => format!("backend #{i}"),
            },
            Note::KernelRule { protocol, port } => {
                format!("punted by rule {}:{port}", protocol_name(protocol as u8))
            }
            Note::KernelUnhandled => "punted: no service takes it (punt = unhandled)".into(),
            Note::KernelLimited => "limited by punt budget".into(),
            Note::IcmpSent { kind } => format!("sent {}", ICMP_KINDS.get(kind as usize).unwrap_or(&"error")),
            Note::IcmpSuppressed { limit: 0 } => "suppressed, global budget empty".into(),
            Note::IcmpSuppressed { .. } => format!("suppressed, per-destination budget of {src} empty"),
            Note::ResetSent => "sent".into(),
            Note::ResetSuppressed { limit: 0 } => "suppressed (global)".into(),
            Note::ResetSuppressed { .. } => format!("suppressed (per-destination budget of {src})"),
            Note::TcpState { reason } => match reason {
                0 => "dropped: no flow began with a SYN (no_flow)".into(),
                1 => "dropped: a reset of no flow (rst_no_flow)".into(),
                2 => "dropped: not the handshake's ACK of the SYN's ISN + 1 (bad_handshake)".into(),
                3 => format!("dropped: SYN over the SYN budget of {src} (syn_over_budget)"),
                4 => "admitted untracked: its bucket is full of established flows (table_full)".into(),
                _ => "admitted and learned: mid-stream in the learning window (learned)".into(),
            },
            Note::Worker { socket: i } => format!("took it from {}", socket(i)),
            Note::WorkerAction { action, did } => match did {
                WorkerDid::Port(p) if action == 3 => format!("written to the kernel interface (port {p})"),
                WorkerDid::Port(p) => format!("answer sent out of port {p}"),
                WorkerDid::Tunnel(i, tracked) if action == 2 => format!(
                    "into {} ({})",
                    tunnel(i),
                    if tracked {
                        "pinned by the connection table"
                    } else {
                        "the Maglev pick"
                    }
                ),
                WorkerDid::Tunnel(i, _) => format!("answer into {}", tunnel(i)),
                WorkerDid::Sunk => "consumed".into(),
                WorkerDid::Refused => "refused: a source port echo never answers".into(),
                WorkerDid::TxFull => "the TX queue was full: dropped".into(),
                WorkerDid::Invalid => "dropped: it could not be handled (counted invalid)".into(),
            },
        }
    }

    fn pack(&self) -> [u64; 2] {
        let (tag, a, b): (u64, u32, u32) = match *self {
            Note::Final(o) => (0, o.index() as u32, 0),
            Note::GreDecap { tunnel, depth } => (1, tunnel, depth),
            Note::GreSeqDropped { tunnel } => (2, tunnel, 0),
            Note::ReasmHeld { held, datagrams } => (3, held, datagrams),
            Note::ReasmCompleted => (4, 0, 0),
            Note::ReasmRefused { reason } => (5, reason, 0),
            Note::ReasmLater(o) => (6, o.index() as u32, 0),
            Note::Service { socket } => (7, socket, 0),
            Note::Fanout { from, to } => (8, from, to),
            Note::RolloverHuge { from, seen } => (9, from, seen),
            Note::RolloverFull { from } => (10, from, 0),
            Note::RolloverFailed { from } => (11, from, 0),
            Note::FlowLimited { socket } => (12, socket, 0),
            Note::Maglev { tunnel } => (13, tunnel, 0),
            Note::KernelRule { protocol, port } => (14, protocol, port),
            Note::KernelUnhandled => (15, 0, 0),
            Note::KernelLimited => (16, 0, 0),
            Note::IcmpSent { kind } => (17, kind, 0),
            Note::IcmpSuppressed { limit } => (18, limit, 0),
            Note::ResetSent => (19, 0, 0),
            Note::ResetSuppressed { limit } => (20, limit, 0),
            Note::TcpState { reason } => (23, reason, 0),
            Note::Worker { socket } => (21, socket, 0),
            Note::WorkerAction { action, did } => {
                let (a, b) = did.pack();
                (22 | (action as u64) << 16, a, b)
            }
        };
        [tag | (a as u64) << 32, b as u64]
    }

    fn unpack(w: [u64; 2]) -> Note {
        let (tag, a, b) = (w[0] as u32, (w[0] >> 32) as u32, w[1] as u32);
        let outcome = |i: u32| Outcome::ALL.get(i as usize).copied().unwrap_or(Outcome::Unhandled);
        match tag {
            1 => Note::GreDecap { tunnel: a, depth: b },
            2 => Note::GreSeqDropped { tunnel: a },
            3 => Note::ReasmHeld { held: a, datagrams: b },
            4 => Note::ReasmCompleted,
            5 => Note::ReasmRefused { reason: a },
            6 => Note::ReasmLater(outcome(a)),
            7 => Note::Service { socket: a },
            8 => Note::Fanout { from: a, to: b },
            9 => Note::RolloverHuge { from: a, seen: b },
            10 => Note::RolloverFull { from: a },
            11 => Note::RolloverFailed { from: a },
            12 => Note::FlowLimited { socket: a },
            13 => Note::Maglev { tunnel: a },
            14 => Note::KernelRule { protocol: a, port: b },
            15 => Note::KernelUnhandled,
            16 => Note::KernelLimited,
            17 => Note::IcmpSent { kind: a },
            18 => Note::IcmpSuppressed { limit: a },
            19 => Note::ResetSent,
            20 => Note::ResetSuppressed { limit: a },
            23 => Note::TcpState { reason: a },
            21 => Note::Worker { socket: a },
            t if t & 0xffff == 22 => Note::WorkerAction {
                action: t >> 16,
                did: WorkerDid::unpack(a, b),
            },
            _ => Note::Final(outcome(a)),
        }
    }
}

/// The stage that counts outcome `o`, for a record whose last word is the outcome itself.
pub fn outcome_stage(o: Outcome) -> &'static str {
    use Outcome::*;
    match o {
        Malformed | Unhandled => "parse",
        Oversize => "rx",
        NotForUs => "link",
        ArpReply | ArpIgnored => "arp",
        TxFull => "tx",
        NotLocal => "ip",
        EchoReply => "echo",
        NdpReply | NdpIgnored => "ndp",
        Delivered | SocketFull | NoService => "service",
        FlowLimited => "flow_limit",
        GreUnknownTunnel | GreBadChecksum | GreSeqDropped | GreRecursion => "gre",
        Reassembled | ReassemblyRefused | ReassemblyTimeout | ReassemblyFlushed => "reassembly",
        IcmpError | IcmpSuppressed | UdpBadChecksum => "icmp",
        Forwarded => "forward",
        Martian | SourceRouted => "source",
        TcpReset | TcpResetSuppressed | TcpBadChecksum => "tcp_reset",
        Kernel | KernelFull | KernelLimited | NeighborUnsolicited => "kernel",
        Filtered => "filter",
        SourceLimited => "source_limit",
        TcpOutOfState => "tcp_state",
    }
}

fn outcome_reason(o: Outcome, s: &Summary) -> String {
    use Outcome::*;
    let ip = s.ip;
    match o {
        Malformed => "malformed: truncated or self-contradictory headers".into(),
        Unhandled => "no stage handles it".into(),
        Oversize => "oversize: longer than the port's MTU or in several segments".into(),
        NotForUs => "not to the port's MAC address".into(),
        ArpReply => "answered".into(),
        ArpIgnored => "needs no answer".into(),
        TxFull => "the TX queue refused the answer".into(),
        NotLocal => match ip {
            Some(ip) => format!("{} is not a local address", ip.dst),
            None => "not to a local address".into(),
        },
        EchoReply => "answered".into(),
        NdpReply => "answered".into(),
        NdpIgnored => "needs no answer".into(),
        Delivered => "delivered".into(),
        SocketFull => "its socket was full".into(),
        NoService => match ip.and_then(|ip| ip.ports.map(|p| (ip.protocol, p.1))) {
            Some((p, port)) => format!("no service on {}:{port}", protocol_name(p)),
            None => "no service".into(),
        },
        FlowLimited => "shed by the flow limit".into(),
        GreUnknownTunnel => "no tunnel matches (remote, local, key)".into(),
        GreBadChecksum => "bad or missing GRE checksum".into(),
        GreSeqDropped => "sequence number not newer".into(),
        GreRecursion => "nested more than 3 deep".into(),
        Reassembled => "held until its datagram completed".into(),
        ReassemblyRefused => "refused by the reassembler".into(),
        ReassemblyTimeout => "its datagram timed out".into(),
        ReassemblyFlushed => "flushed at the stop".into(),
        IcmpError => "error sent".into(),
        IcmpSuppressed => "suppressed by the rate limits".into(),
        UdpBadChecksum => "closed port, bad UDP checksum: not answered".into(),
        Forwarded => "forwarded".into(),
        Martian => match ip {
            Some(ip) => format!("martian: source {} is never answered", ip.src),
            None => "martian".into(),
        },
        SourceRouted => "source routed".into(),
        TcpReset => "sent".into(),
        TcpResetSuppressed => "suppressed by the rate limits".into(),
        TcpBadChecksum => "closed port, bad TCP checksum: not answered".into(),
        Kernel => "punted".into(),
        KernelFull => "the kernel socket was full".into(),
        KernelLimited => "limited by punt budget".into(),
        NeighborUnsolicited => "a neighbour answer the kernel did not ask for".into(),
        Filtered => match ip {
            Some(ip) => format!("source {} refused: in a deny list, or not in an allow list", ip.src),
            None => "refused by a prefix filter".into(),
        },
        SourceLimited => match ip {
            Some(ip) => format!(
                "source {} over its [source_limit] budget (or a newcomer over the newcomers')",
                ip.src
            ),
            None => "over its source's budget".into(),
        },
        TcpOutOfState => "a segment of no flow the TCP state table saw begin, or a SYN over budget".into(),
    }
}

/// One packet's trace record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// The RX lcore.
    pub lcore: u32,
    /// DPDK port id it came in on.
    pub port: u16,
    /// RX queue.
    pub queue: u16,
    /// The engine's clock when its burst was taken, in ns.
    pub time_ns: u64,
    /// The config generation that decided it.
    pub generation: u64,
    /// Its headers as received.
    pub summary: Summary,
    /// Its outcome (`fastpath_packets_total{outcome}`).
    pub outcome: Outcome,
    /// Made by a worker lcore (what it did with a packet an RX lcore delivered; the outcome
    /// is the RX lcore's, counted there).
    pub worker: bool,
    notes: [Note; MAX_NOTES],
    len: u8,
}

impl Record {
    /// An empty record (no notes, outcome `unhandled` until set).
    pub fn new(lcore: u32, port: u16, queue: u16, time_ns: u64, generation: u64, summary: Summary) -> Record {
        Record {
            lcore,
            port,
            queue,
            time_ns,
            generation,
            summary,
            outcome: Outcome::Unhandled,
            worker: false,
            notes: [Note::Final(Outcome::Unhandled); MAX_NOTES],
            len: 0,
        }
    }

    /// The stages' notes, in the order they decided.
    pub fn notes(&self) -> &[Note] {
        &self.notes[..self.len as usize]
    }

    /// Appends a note (beyond [`MAX_NOTES`], the last one is replaced: the final word stays).
    pub fn push(&mut self, n: Note) {
        if (self.len as usize) < MAX_NOTES {
            self.notes[self.len as usize] = n;
            self.len += 1;
        } else {
            self.notes[MAX_NOTES - 1] = n;
        }
    }

    /// Whether a note of `stage` is there.
    pub fn has_stage(&self, stage: &str) -> bool {
        self.notes().iter().any(|n| n.stage() == stage)
    }

    fn pack(&self, w: &mut [u64; WORDS]) {
        let s = &self.summary;
        w[0] = self.lcore as u64 | (self.port as u64) << 32 | (self.queue as u64) << 48;
        w[1] = self.time_ns;
        w[2] = self.generation;
        w[3] = self.outcome.index() as u64 | (self.len as u64) << 8 | (s.ethertype as u64) << 16 | (s.len as u64) << 32;
        match &s.ip {
            None => w[4..12].fill(0),
            Some(ip) => {
                let v6 = ip.src.is_ipv6();
                let bits = |a: IpAddr| match a {
                    IpAddr::V4(a) => u32::from(a) as u128,
                    IpAddr::V6(a) => u128::from(a),
                };
                let (src, dst) = (bits(ip.src), bits(ip.dst));
                w[4] = src as u64;
                w[5] = (src >> 64) as u64;
                w[6] = dst as u64;
                w[7] = (dst >> 64) as u64;
                let (sp, dp) = ip.ports.unwrap_or((0, 0));
                w[8] = 1
                    | (v6 as u64) << 1
                    | (ip.ports.is_some() as u64) << 2
                    | (ip.tcp_flags.is_some() as u64) << 3
                    | (ip.fragment.is_some() as u64) << 4
                    | (ip.fragment.is_some_and(|f| f.1) as u64) << 5
                    | (ip.vlan.is_some() as u64) << 6
                    | (ip.protocol as u64) << 8
                    | (ip.tcp_flags.unwrap_or(0) as u64) << 16
                    | (sp as u64) << 32
                    | (dp as u64) << 48;
                let (off, _, id) = ip.fragment.unwrap_or((0, false, 0));
                w[9] = off as u64 | (id as u64) << 16;
                w[10] = ip.hash as u64 | (ip.vlan.unwrap_or(0) as u64) << 32;
            }
        }
        w[11] = self.worker as u64;
        for (i, n) in self.notes().iter().enumerate() {
            let p = n.pack();
            w[12 + 2 * i] = p[0];
            w[13 + 2 * i] = p[1];
        }
    }

    fn unpack(w: &[u64; WORDS]) -> Record {
        let len = ((w[3] >> 8) as u8).min(MAX_NOTES as u8);
        let ip = (w[8] & 1 == 1).then(|| {
            let v6 = w[8] & 2 != 0;
            let addr = |lo: u64, hi: u64| {
                let b = lo as u128 | (hi as u128) << 64;
                if v6 {
                    IpAddr::V6(Ipv6Addr::from(b))
                } else {
                    IpAddr::V4(Ipv4Addr::from(b as u32))
                }
            };
            let flag = |b: u32| w[8] & (1 << b) != 0;
            IpSummary {
                src: addr(w[4], w[5]),
                dst: addr(w[6], w[7]),
                protocol: (w[8] >> 8) as u8,
                ports: flag(2).then_some(((w[8] >> 32) as u16, (w[8] >> 48) as u16)),
                tcp_flags: flag(3).then_some((w[8] >> 16) as u8),
                fragment: flag(4).then_some((w[9] as u16, flag(5), (w[9] >> 16) as u32)),
                vlan: flag(6).then_some((w[10] >> 32) as u16),
                hash: w[10] as u32,
            }
        });
        let mut r = Record::new(
            w[0] as u32,
            (w[0] >> 32) as u16,
            (w[0] >> 48) as u16,
            w[1],
            w[2],
            Summary {
                len: (w[3] >> 32) as u32,
                ethertype: (w[3] >> 16) as u16,
                ip,
            },
        );
        r.outcome = Outcome::ALL
            .get((w[3] & 0xff) as usize)
            .copied()
            .unwrap_or(Outcome::Unhandled);
        r.worker = w[11] & 1 == 1;
        for i in 0..len as usize {
            r.push(Note::unpack([w[12 + 2 * i], w[13 + 2 * i]]));
        }
        r
    }
}

/// A bounded single-producer, single-consumer ring of [`Record`]s, each stored as [`WORDS`]
/// relaxed atomic words: the producer stores a record's words, then publishes its index with
/// `Release`; the consumer reads the index with `Acquire`, then the words. A full ring refuses
/// (the producer counts a lost record). Atomics, no `unsafe`: breaking the one-producer,
/// one-consumer contract garbles records, never memory.
#[derive(Debug)]
pub struct RecordRing {
    slots: Box<[AtomicU64]>,
    capacity: usize,
    head: AtomicUsize,
    tail: AtomicUsize,
}

impl RecordRing {
    /// A ring of `capacity` records.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        RecordRing {
            slots: (0..capacity * WORDS).map(|_| AtomicU64::new(0)).collect(),
            capacity,
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
        }
    }

    /// Stores `r` if there is room (producer only).
    pub fn push(&self, r: &Record) -> bool {
        let head = self.head.load(Ordering::Relaxed);
        if head.wrapping_sub(self.tail.load(Ordering::Acquire)) >= self.capacity {
            return false;
        }
        let mut w = [0u64; WORDS];
        r.pack(&mut w);
        let base = (head % self.capacity) * WORDS;
        for (slot, v) in self.slots[base..base + WORDS].iter().zip(w) {
            slot.store(v, Ordering::Relaxed);
        }
        self.head.store(head.wrapping_add(1), Ordering::Release);
        true
    }

    /// Takes the oldest record, if any (consumer only).
    pub fn pop(&self) -> Option<Record> {
        let tail = self.tail.load(Ordering::Relaxed);
        if tail == self.head.load(Ordering::Acquire) {
            return None;
        }
        let base = (tail % self.capacity) * WORDS;
        let mut w = [0u64; WORDS];
        for (v, slot) in w.iter_mut().zip(&self.slots[base..base + WORDS]) {
            *v = slot.load(Ordering::Relaxed);
        }
        self.tail.store(tail.wrapping_add(1), Ordering::Release);
        Some(Record::unpack(&w))
    }
}

/// One term of a [`Filter`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Term {
    /// `src ADDR`.
    Src(IpAddr),
    /// `dst ADDR`.
    Dst(IpAddr),
    /// `host ADDR`: either address.
    Host(IpAddr),
    /// `src port N`.
    SrcPort(u16),
    /// `dst port N`.
    DstPort(u16),
    /// `port N`: either port.
    Port(u16),
    /// `proto NAME|N`.
    Proto(u8),
    /// `outcome NAME`.
    Outcome(Outcome),
    /// `rxport N`: the DPDK port it came in on.
    RxPort(u16),
    /// `rxqueue N`: the RX queue it came in on.
    RxQueue(u16),
}

/// Terms a filter joins at most.
pub const MAX_TERMS: usize = 8;

/// Which packets a trace records: every term must hold (`and`); no term, every packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    terms: [Option<Term>; MAX_TERMS],
}

impl Filter {
    /// Parses the filter language: terms joined by `and`, each one of `src ADDR`, `dst ADDR`,
    /// `host ADDR`, `src port N`, `dst port N`, `port N`, `proto tcp|udp|icmp|icmp6|gre|N`,
    /// `outcome NAME` (an outcome label value), `rxport N`, `rxqueue N`. Empty: everything.
    pub fn parse(text: &str) -> Result<Filter, String> {
        let mut f = Filter::default();
        let words: Vec<&str> = text.split_whitespace().collect();
        if words.is_empty() {
            return Ok(f);
        }
        for (n, chunk) in words.split(|w| w.eq_ignore_ascii_case("and")).enumerate() {
            let term = Self::term(chunk)?;
            if n == MAX_TERMS {
                return Err(format!("at most {MAX_TERMS} terms"));
            }
            f.terms[n] = Some(term);
        }
        Ok(f)
    }

    fn term(w: &[&str]) -> Result<Term, String> {
        let addr = |s: &str| s.parse::<IpAddr>().map_err(|_| format!("{s:?} is not an IP address"));
        let num = |s: &str| s.parse::<u16>().map_err(|_| format!("{s:?} is not a number 0-65535"));
        match w {
            [] => Err("empty term (\"and\" at an end, or twice)".into()),
            ["src", "port", p] => Ok(Term::SrcPort(num(p)?)),
            ["dst", "port", p] => Ok(Term::DstPort(num(p)?)),
            ["src", a] => Ok(Term::Src(addr(a)?)),
            ["dst", a] => Ok(Term::Dst(addr(a)?)),
            ["host", a] => Ok(Term::Host(addr(a)?)),
            ["port", p] => Ok(Term::Port(num(p)?)),
            ["rxport", p] => Ok(Term::RxPort(num(p)?)),
            ["rxqueue", q] => Ok(Term::RxQueue(num(q)?)),
            ["proto", p] => Ok(Term::Proto(match *p {
                "icmp" => 1,
                "tcp" => 6,
                "udp" => 17,
                "gre" => 47,
                "icmp6" => 58,
                n => n
                    .parse::<u8>()
                    .map_err(|_| format!("unknown protocol {n:?} (tcp, udp, icmp, icmp6, gre or 0-255)"))?,
            })),
            ["outcome", o] => Outcome::ALL
                .iter()
                .find(|x| x.name() == *o)
                .map(|o| Term::Outcome(*o))
                .ok_or_else(|| format!("unknown outcome {o:?}")),
            w => Err(format!(
                "cannot read {:?}: expected src|dst|host ADDR, [src|dst] port N, proto P, outcome NAME, rxport N or rxqueue N",
                w.join(" ")
            )),
        }
    }

    /// The terms.
    pub fn terms(&self) -> impl Iterator<Item = &Term> {
        self.terms.iter().flatten()
    }

    /// Whether the packet's headers and where it came in hold every term but `outcome`.
    pub fn matches_packet(&self, s: &Summary, port: u16, queue: u16) -> bool {
        let ip = s.ip.as_ref();
        let ports = ip.and_then(|i| i.ports);
        self.terms().all(|t| match *t {
            Term::Src(a) => ip.is_some_and(|i| i.src == a),
            Term::Dst(a) => ip.is_some_and(|i| i.dst == a),
            Term::Host(a) => ip.is_some_and(|i| i.src == a || i.dst == a),
            Term::SrcPort(p) => ports.is_some_and(|x| x.0 == p),
            Term::DstPort(p) => ports.is_some_and(|x| x.1 == p),
            Term::Port(p) => ports.is_some_and(|x| x.0 == p || x.1 == p),
            Term::Proto(p) => ip.is_some_and(|i| i.protocol == p),
            Term::Outcome(_) => true,
            Term::RxPort(p) => port == p,
            Term::RxQueue(q) => queue == q,
        })
    }

    /// Whether outcome `o` holds the `outcome` terms.
    pub fn matches_outcome(&self, o: Outcome) -> bool {
        self.terms().all(|t| match *t {
            Term::Outcome(x) => x == o,
            _ => true,
        })
    }
}

/// One armed trace on one lcore: what it records, how many more, and the ring to the reader.
#[derive(Debug)]
pub struct TraceSession {
    /// Which packets.
    pub filter: Filter,
    /// Records still to make (the lcore counts down; 0: done, records no more).
    pub remaining: AtomicU64,
    /// Records to the reader.
    pub ring: RecordRing,
    /// Records the ring refused: the reader fell behind.
    pub lost: AtomicU64,
}

impl TraceSession {
    /// A session recording up to `count` packets that pass `filter` (`u64::MAX`: no end).
    pub fn new(filter: Filter, count: u64, ring: usize) -> Self {
        TraceSession {
            filter,
            remaining: AtomicU64::new(count),
            ring: RecordRing::new(ring),
            lost: AtomicU64::new(0),
        }
    }

    /// Whether it records no more.
    #[inline]
    pub fn exhausted(&self) -> bool {
        self.remaining.load(Ordering::Relaxed) == 0
    }

    /// Hands a finished record to the reader if it passes the outcome terms and the count
    /// allows (lcore side: one writer of `remaining` and `lost`).
    pub fn emit(&self, r: &Record) {
        if !self.filter.matches_outcome(r.outcome) {
            return;
        }
        let left = self.remaining.load(Ordering::Relaxed);
        if left == 0 {
            return;
        }
        self.remaining.store(left - 1, Ordering::Relaxed);
        if !self.ring.push(r) {
            self.lost
                .store(self.lost.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
    }
}

/// An lcore's trace switch: the control side arms it with a session and disarms it; the lcore
/// reads [`TraceTap::is_armed`] once per burst.
#[derive(Debug, Default)]
pub struct TraceTap {
    armed: AtomicBool,
    session: ArcSwapOption<TraceSession>,
}

impl TraceTap {
    /// Whether a trace is armed (one relaxed load: the per-burst check).
    #[inline(always)]
    pub fn is_armed(&self) -> bool {
        self.armed.load(Ordering::Relaxed)
    }

    /// Arms `s`. The caller keeps its own reference until the lcore has let go (a session
    /// is freed by the control side, never on an lcore), e.g. [`Arc::strong_count`] back at 1
    /// after [`TraceTap::disarm`].
    pub fn arm(&self, s: Arc<TraceSession>) {
        self.session.store(Some(s));
        self.armed.store(true, Ordering::Release);
    }

    /// Disarms: from the lcore's next burst on, nothing is traced.
    pub fn disarm(&self) {
        self.armed.store(false, Ordering::Release);
        self.session.store(None);
    }

    /// The armed session, for the lcore (a guard, no reference count taken).
    #[inline]
    pub fn session(&self) -> arc_swap::Guard<Option<Arc<TraceSession>>> {
        self.session.load()
    }
}

/// Whether `p` is a protocol with ports the explain helper answers for.
pub(crate) fn flow_protocol(p: u8) -> Option<IpProtocol> {
    match p {
        6 => Some(IpProtocol::TCP),
        17 => Some(IpProtocol::UDP),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary() -> Summary {
        Summary {
            len: 60,
            ethertype: 0x0800,
            ip: Some(IpSummary {
                src: "198.51.100.7".parse().unwrap(),
                dst: "192.0.2.1".parse().unwrap(),
                protocol: 17,
                ports: Some((5353, 53)),
                tcp_flags: None,
                fragment: Some((8, true, 77)),
                vlan: Some(5),
                hash: 0xdead_beef,
            }),
        }
    }

    #[test]
    fn records_survive_the_ring() {
        let ring = RecordRing::new(2);
        let mut r = Record::new(3, 1, 2, 99, 7, summary());
        r.outcome = Outcome::IcmpSuppressed;
        r.push(Note::IcmpSuppressed { limit: 1 });
        r.push(Note::Fanout { from: 3, to: 1 });
        r.push(Note::Worker { socket: 4 });
        for did in [
            WorkerDid::Port(2),
            WorkerDid::Tunnel(9, true),
            WorkerDid::Tunnel(9, false),
            WorkerDid::Sunk,
            WorkerDid::Refused,
            WorkerDid::TxFull,
            WorkerDid::Invalid,
        ] {
            r.push(Note::WorkerAction { action: 2, did });
        }
        r.worker = true;
        assert!(ring.push(&r));
        let mut v6 = r;
        v6.summary.ip.as_mut().unwrap().src = "2001:db8::7".parse().unwrap();
        v6.summary.ip.as_mut().unwrap().dst = "2001:db8::1".parse().unwrap();
        assert!(ring.push(&v6));
        assert!(!ring.push(&r), "full: refused");
        assert_eq!(ring.pop(), Some(r));
        assert_eq!(ring.pop(), Some(v6));
        assert_eq!(ring.pop(), None);
    }

    #[test]
    fn filter_language() {
        let f = Filter::parse("src 198.51.100.7 and dst port 53 and proto udp").unwrap();
        let s = summary();
        assert!(f.matches_packet(&s, 0, 0));
        assert!(!Filter::parse("proto tcp").unwrap().matches_packet(&s, 0, 0));
        assert!(!Filter::parse("src port 53").unwrap().matches_packet(&s, 0, 0));
        assert!(Filter::parse("port 53 and host 192.0.2.1")
            .unwrap()
            .matches_packet(&s, 0, 0));
        assert!(Filter::parse("rxport 1 and rxqueue 2")
            .unwrap()
            .matches_packet(&s, 1, 2));
        assert!(!Filter::parse("rxqueue 2").unwrap().matches_packet(&s, 1, 0));
        let o = Filter::parse("outcome icmp_suppressed").unwrap();
        assert!(o.matches_packet(&s, 0, 0));
        assert!(o.matches_outcome(Outcome::IcmpSuppressed));
        assert!(!o.matches_outcome(Outcome::Delivered));
        assert!(Filter::parse("").unwrap().matches_outcome(Outcome::Delivered));
        for bad in [
            "src",
            "outcome nope",
            "proto sctp",
            "port 70000",
            "src 1.2.3.4 and",
            "frob 1",
        ] {
            assert!(Filter::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn summary_line() {
        assert_eq!(
            summary().line(),
            "198.51.100.7:5353 > 192.0.2.1:53 udp frag id 77 offset 8 + vlan 5 len 60"
        );
    }
}
