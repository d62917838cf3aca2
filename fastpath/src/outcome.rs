//! The closed set of things that can happen to a received packet.
//!
//! Every packet an RX lcore receives ends in exactly one [`Outcome`], counted once, so
//! `sum(rx) == sum(outcomes)` holds at every scrape and at exit. Later stages add variants;
//! the invariant stays.

/// What happened to one received packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use]
#[repr(u8)]
pub enum Outcome {
    /// Truncated or self-contradictory headers.
    Malformed,
    /// A frame that arrived in more than one segment (larger than the mbuf data room).
    Oversize,
    /// Unicast to a MAC address that is not the port's.
    NotForUs,
    /// An ARP request for a local IPv4 address, answered.
    ArpReply,
    /// A valid ARP packet that needs no answer (not for us, a reply, gratuitous).
    ArpIgnored,
    /// A valid frame no stage handles (yet): counted and dropped.
    Unhandled,
    /// An answer was built but the TX queue had no room for it.
    TxFull,
    /// An IP packet whose destination is not one of the port's addresses (nor a group it
    /// listens to).
    NotLocal,
    /// An ICMP or ICMPv6 echo request for a local address, answered.
    EchoReply,
    /// A Neighbor Solicitation for a local IPv6 address, answered with an advertisement.
    NdpReply,
    /// A Neighbor Discovery message that needs no answer (not for a local target, an
    /// advertisement, a router message) or that RFC 4861 §7.1.1 (§7.1.2) says to discard.
    NdpIgnored,
    /// Enqueued to one of a local service's sockets.
    Delivered,
    /// For a service whose sockets had no room (after rollover, where enabled).
    SocketFull,
    /// UDP or TCP to a local address and a port no service listens on.
    NoService,
    /// Shed by the flow limit: its socket was at least half full and its flow dominated.
    FlowLimited,
    /// GRE to a local address that matches no configured tunnel (remote, local, key).
    GreUnknownTunnel,
    /// GRE with a wrong checksum.
    GreBadChecksum,
    /// GRE older than the last accepted packet of a sequence tunnel (RFC 2890 §2.2).
    GreSeqDropped,
    /// Nested deeper than the tunnel recursion limit.
    GreRecursion,
    /// A fragment held until its datagram completed; the completing fragment's outcome is the
    /// datagram's.
    Reassembled,
    /// A fragment refused or dropped by the reassembler (see `fastpath_reasm_refused_total`).
    ReassemblyRefused,
    /// A fragment whose datagram did not complete in time.
    ReassemblyTimeout,
    /// A fragment still held at a clean stop.
    ReassemblyFlushed,
    /// Answered with an ICMP error (port or protocol unreachable, reassembly time exceeded).
    IcmpError,
    /// An ICMP error was due but the rate limits held it back (nothing was built).
    IcmpSuppressed,
    /// Sent on unchanged by the plain forward mode (`[lcores] mode = "forward"`), no stage run.
    Forwarded,
    /// UDP to a closed port with a wrong checksum (or none, over IPv6): silently discarded,
    /// not answered (RFC 1122 §4.1.3.4), once the limits would have let an error go.
    UdpBadChecksum,
    /// From a source the box never answers or delivers for (`pipeline/source.rs`: not one host,
    /// loopback, our own address), or a unicast datagram in a link-layer group frame
    /// (RFC 1122 §3.2.1.3, §3.3.6; RFC 4291 §2.5.3).
    Martian,
    /// Source routed: an IPv4 LSRR/SSRR option (RFC 7126 §4.3, §4.4: dropped, as Linux's
    /// `accept_source_route = 0`), or an IPv6 Routing header with segments left (RFC 5095 §3,
    /// RFC 8754 §4.3.3, RFC 8200 §4.4: a type we do not process).
    SourceRouted,
    /// TCP to a local port with no service, answered with a reset (RFC 9293 §3.10.7.1).
    TcpReset,
    /// A reset was due but the `[tcp_reset]` limits held it back (nothing was built).
    TcpResetSuppressed,
    /// TCP to a closed port with a wrong checksum, once the limits would have let a reset go:
    /// discarded, not answered (RFC 9293 §3.1).
    TcpBadChecksum,
    /// Handed to the kernel path (issue 33): queued for a port's kernel interface, by a
    /// `[kernel] punt` rule, an `action = "kernel"` service, or a neighbour reply the kernel
    /// asked for.
    Kernel,
    /// For the kernel path, but its queue was full: dropped (the RX lcore never waits).
    KernelFull,
    /// For the kernel path, but over this RX lcore's share of `[kernel] punt_rate` /
    /// `punt_burst`: dropped before it was queued.
    KernelLimited,
    /// An ARP reply or Neighbor Advertisement to us on a port with a kernel interface that
    /// answers no solicitation the kernel sent lately: dropped, so nobody on the link rewrites
    /// the kernel's neighbour entries unasked (RFC 4861 §7.2.5).
    NeighborUnsolicited,
}

impl Outcome {
    /// Every outcome, in counter-index order.
    pub const ALL: [Outcome; 36] = [
        Outcome::Malformed,
        Outcome::Oversize,
        Outcome::NotForUs,
        Outcome::ArpReply,
        Outcome::ArpIgnored,
        Outcome::Unhandled,
        Outcome::TxFull,
        Outcome::NotLocal,
        Outcome::EchoReply,
        Outcome::NdpReply,
        Outcome::NdpIgnored,
        Outcome::Delivered,
        Outcome::SocketFull,
        Outcome::NoService,
        Outcome::FlowLimited,
        Outcome::GreUnknownTunnel,
        Outcome::GreBadChecksum,
        Outcome::GreSeqDropped,
        Outcome::GreRecursion,
        Outcome::Reassembled,
        Outcome::ReassemblyRefused,
        Outcome::ReassemblyTimeout,
        Outcome::ReassemblyFlushed,
        Outcome::IcmpError,
        Outcome::IcmpSuppressed,
        Outcome::Forwarded,
        Outcome::UdpBadChecksum,
        Outcome::Martian,
        Outcome::SourceRouted,
        Outcome::TcpReset,
        Outcome::TcpResetSuppressed,
        Outcome::TcpBadChecksum,
        Outcome::Kernel,
        Outcome::KernelFull,
        Outcome::KernelLimited,
        Outcome::NeighborUnsolicited,
    ];
    /// Number of outcomes.
    pub const COUNT: usize = Self::ALL.len();

    /// Counter index.
    #[inline]
    pub fn index(self) -> usize {
        self as usize
    }

    /// The `outcome` label value.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Malformed => "malformed",
            Outcome::Oversize => "oversize",
            Outcome::NotForUs => "not_for_us",
            Outcome::ArpReply => "arp_reply",
            Outcome::ArpIgnored => "arp_ignored",
            Outcome::Unhandled => "unhandled",
            Outcome::TxFull => "tx_full",
            Outcome::NotLocal => "not_local",
            Outcome::EchoReply => "echo_reply",
            Outcome::NdpReply => "ndp_reply",
            Outcome::NdpIgnored => "ndp_ignored",
            Outcome::Delivered => "delivered",
            Outcome::SocketFull => "socket_full",
            Outcome::NoService => "no_service",
            Outcome::FlowLimited => "flow_limited",
            Outcome::GreUnknownTunnel => "gre_unknown_tunnel",
            Outcome::GreBadChecksum => "gre_bad_checksum",
            Outcome::GreSeqDropped => "gre_seq_dropped",
            Outcome::GreRecursion => "gre_recursion",
            Outcome::Reassembled => "reassembled",
            Outcome::ReassemblyRefused => "reassembly_refused",
            Outcome::ReassemblyTimeout => "reassembly_timeout",
            Outcome::ReassemblyFlushed => "reassembly_flushed",
            Outcome::IcmpError => "icmp_error",
            Outcome::IcmpSuppressed => "icmp_suppressed",
            Outcome::Forwarded => "forwarded",
            Outcome::UdpBadChecksum => "udp_bad_checksum",
            Outcome::Martian => "martian",
            Outcome::SourceRouted => "source_routed",
            Outcome::TcpReset => "tcp_reset",
            Outcome::TcpResetSuppressed => "tcp_reset_suppressed",
            Outcome::TcpBadChecksum => "tcp_bad_checksum",
            Outcome::Kernel => "kernel",
            Outcome::KernelFull => "kernel_full",
            Outcome::KernelLimited => "kernel_limited",
            Outcome::NeighborUnsolicited => "neighbor_unsolicited",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_match_table_and_names_are_unique() {
        for (i, o) in Outcome::ALL.iter().enumerate() {
            assert_eq!(o.index(), i);
        }
        let mut names: Vec<_> = Outcome::ALL.iter().map(|o| o.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Outcome::COUNT);
        // Label values are snake_case.
        for n in names {
            assert!(n.bytes().all(|c| c.is_ascii_lowercase() || c == b'_'), "{n}");
        }
    }
}
