//! The closed set of things that can happen to a received packet.
//!
//! Every packet an RX lcore receives ends in exactly one [`Outcome`], counted once, so
//! `sum(rx) == sum(outcomes)` holds at every scrape and at exit. Later stages add variants;
//! the invariant stays.

/// Declares [`Outcome`], [`Outcome::ALL`] and [`Outcome::name`] from one list, so a variant
/// cannot be left out of either (an outcome missing from `ALL` compiled, passed the tests and
/// indexed past the counters on the data path).
macro_rules! outcomes {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)*) => {
        /// What happened to one received packet.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[must_use]
        #[repr(u8)]
        pub enum Outcome {
            $($(#[$doc])* $variant,)*
        }

        impl Outcome {
            /// Every outcome, in counter-index order.
            pub const ALL: [Outcome; [$($name),*].len()] = [$(Outcome::$variant),*];

            /// The `outcome` label value (never renamed once released).
            pub fn name(self) -> &'static str {
                match self {
                    $(Outcome::$variant => $name,)*
                }
            }
        }
    };
}

outcomes! {
    /// Truncated or self-contradictory headers.
    Malformed => "malformed",
    /// A frame that arrived in more than one segment (larger than the mbuf data room).
    Oversize => "oversize",
    /// Unicast to a MAC address that is not the port's.
    NotForUs => "not_for_us",
    /// An ARP request for a local IPv4 address, answered.
    ArpReply => "arp_reply",
    /// A valid ARP packet that needs no answer (not for us, a reply, gratuitous).
    ArpIgnored => "arp_ignored",
    /// A valid frame no stage handles (yet): counted and dropped.
    Unhandled => "unhandled",
    /// An answer was built but the TX queue had no room for it.
    TxFull => "tx_full",
    /// An IP packet whose destination is not one of the port's addresses (nor a group it
    /// listens to).
    NotLocal => "not_local",
    /// An ICMP or ICMPv6 echo request for a local address, answered.
    EchoReply => "echo_reply",
    /// A Neighbor Solicitation for a local IPv6 address, answered with an advertisement.
    NdpReply => "ndp_reply",
    /// A Neighbor Discovery message that needs no answer (not for a local target, an
    /// advertisement, a router message) or that RFC 4861 §7.1.1 (§7.1.2) says to discard.
    NdpIgnored => "ndp_ignored",
    /// Enqueued to one of a local service's sockets.
    Delivered => "delivered",
    /// For a service whose sockets had no room (after rollover, where enabled).
    SocketFull => "socket_full",
    /// UDP or TCP to a local address and a port no service listens on.
    NoService => "no_service",
    /// Shed by the flow limit: its socket was at least half full and its flow dominated.
    FlowLimited => "flow_limited",
    /// GRE to a local address that matches no configured tunnel (remote, local, key).
    GreUnknownTunnel => "gre_unknown_tunnel",
    /// GRE with a wrong checksum.
    GreBadChecksum => "gre_bad_checksum",
    /// GRE older than the last accepted packet of a sequence tunnel (RFC 2890 §2.2).
    GreSeqDropped => "gre_seq_dropped",
    /// Nested deeper than the tunnel recursion limit.
    GreRecursion => "gre_recursion",
    /// A fragment held until its datagram completed; the completing fragment's outcome is the
    /// datagram's.
    Reassembled => "reassembled",
    /// A fragment refused or dropped by the reassembler (see `fastpath_reasm_refused_total`).
    ReassemblyRefused => "reassembly_refused",
    /// A fragment whose datagram did not complete in time.
    ReassemblyTimeout => "reassembly_timeout",
    /// A fragment still held at a clean stop.
    ReassemblyFlushed => "reassembly_flushed",
    /// Answered with an ICMP error (port or protocol unreachable, reassembly time exceeded).
    IcmpError => "icmp_error",
    /// An ICMP error was due but the rate limits held it back (nothing was built).
    IcmpSuppressed => "icmp_suppressed",
    /// Sent on unchanged by the plain forward mode (`[lcores] mode = "forward"`), no stage run.
    Forwarded => "forwarded",
    /// UDP to a closed port with a wrong checksum (or none, over IPv6): silently discarded,
    /// not answered (RFC 1122 §4.1.3.4), once the limits would have let an error go.
    UdpBadChecksum => "udp_bad_checksum",
    /// From a source the box never answers or delivers for (`pipeline/source.rs`: not one host,
    /// loopback, our own address), or a unicast datagram in a link-layer group frame
    /// (RFC 1122 §3.2.1.3, §3.3.6; RFC 4291 §2.5.3).
    Martian => "martian",
    /// Source routed: an IPv4 LSRR/SSRR option (RFC 7126 §4.3, §4.4: dropped, as Linux's
    /// `accept_source_route = 0`), or an IPv6 Routing header with segments left (RFC 5095 §3,
    /// RFC 8754 §4.3.3, RFC 8200 §4.4: a type we do not process).
    SourceRouted => "source_routed",
    /// TCP to a local port with no service, answered with a reset (RFC 9293 §3.10.7.1).
    TcpReset => "tcp_reset",
    /// A reset was due but the `[tcp_reset]` limits held it back (nothing was built).
    TcpResetSuppressed => "tcp_reset_suppressed",
    /// TCP to a closed port with a wrong checksum, once the limits would have let a reset go:
    /// discarded, not answered (RFC 9293 §3.1).
    TcpBadChecksum => "tcp_bad_checksum",
    /// Handed to the kernel path: queued for a port's kernel interface, by a
    /// `[kernel] punt` rule, an `action = "kernel"` service, or a neighbour reply the kernel
    /// asked for.
    Kernel => "kernel",
    /// For the kernel path, but its queue was full: dropped (the RX lcore never waits).
    KernelFull => "kernel_full",
    /// For the kernel path, but over this RX lcore's share of `[kernel] punt_rate` /
    /// `punt_burst`: dropped before it was queued.
    KernelLimited => "kernel_limited",
    /// An ARP reply or Neighbor Advertisement to us on a port with a kernel interface that
    /// answers no solicitation the kernel sent lately: dropped, so nobody on the link rewrites
    /// the kernel's neighbour entries unasked (RFC 4861 §7.2.5).
    NeighborUnsolicited => "neighbor_unsolicited",
    /// From a source a prefix filter refuses (`[filter]` or the service's own lists: in a deny
    /// list, or not in an allow list), dropped before any other work.
    Filtered => "filtered",
    /// For a service, over its source's `[source_limit]` budget, or a newcomer over the
    /// newcomers' shared budget: dropped before the fanout.
    SourceLimited => "source_limited",
    /// For a service with `tcp_state`, a segment of a flow its RX lcore has not seen begin (or
    /// a SYN over its source's SYN budget): dropped before the fanout, never answered.
    TcpOutOfState => "tcp_out_of_state",
}

impl Outcome {
    /// Number of outcomes.
    pub const COUNT: usize = Self::ALL.len();

    /// Counter index.
    #[inline]
    pub fn index(self) -> usize {
        self as usize
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

    #[test]
    fn the_contract_lists_every_outcome_and_nothing_else() {
        let contract = include_str!("../../docs/contract.md");
        let section = contract
            .split("## Packet outcomes")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .expect("docs/contract.md has a Packet outcomes section");
        // The first column of the table's rows: `name` or `a` / `b`.
        let mut listed: Vec<&str> = section
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split(" |").next())
            .flat_map(|cell| cell.split('`').filter(|t| !t.trim().is_empty() && t.trim() != "/"))
            .collect();
        listed.sort_unstable();
        let mut ours: Vec<&str> = Outcome::ALL.iter().map(|o| o.name()).collect();
        ours.sort_unstable();
        assert_eq!(listed, ours, "docs/contract.md's outcome table and Outcome::ALL differ");
    }
}
