//! The pipeline's answer for a packet ([`Verdict`]) and the time it is handed ([`Instant`]): the
//! vocabulary every stage speaks, apart from the orchestrator that calls them.

use crate::outcome::Outcome;

/// Monotonic time in nanoseconds, supplied by the caller (the lcore loop reads the TSC once per
/// burst). Stages never read a clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Instant(pub u64);

/// What the pipeline decided for a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Verdict {
    /// Free the packet; count the outcome.
    Drop(Outcome),
    /// The packet was rewritten in place into an answer: send it out of the port it came in
    /// on, then count the outcome (or [`Outcome::TxFull`] if the queue refuses it).
    Transmit(Outcome),
    /// The packet was rewritten into an answer for another port (e.g. into a tunnel): send it
    /// out of `port`, then count `outcome` (or [`Outcome::TxFull`]).
    TransmitOn {
        /// DPDK port id.
        port: u16,
        /// The outcome once sent.
        outcome: Outcome,
    },
    /// The packet was rewritten in place into an answer for tunnel `tunnel` but is too big for
    /// the tunnel's path (the echo of a reassembled datagram): cut it into fragments that fit,
    /// encapsulate each and send them, then count `outcome` (or [`Outcome::TxFull`]).
    TransmitThrough {
        /// Index of the tunnel in [`Tables::tunnels`](super::Tables::tunnels).
        tunnel: u16,
        /// The outcome once sent.
        outcome: Outcome,
    },
    /// The packet was rewritten in place into an answer for a sequence tunnel (RFC 2890 §2.2):
    /// hand it, not yet encapsulated, to the tunnel's owning worker, which numbers and sends
    /// everything for that tunnel in one order; count `outcome` once the owner's ring took it
    /// (or [`Outcome::TxFull`]).
    HandOff {
        /// Index of the tunnel in [`Tables::tunnels`](super::Tables::tunnels).
        tunnel: u16,
        /// The outcome once handed off.
        outcome: Outcome,
    },
    /// A fragment of a datagram for a local address: hand it to the lcore's reassembler (the IP
    /// header is at `l3`). Its outcome comes when its datagram completes, times out or is
    /// refused.
    Reassemble {
        /// Offset of the IP header.
        l3: u16,
    },
    /// Hand the packet to the socket [`Pipeline::delivered_to`] names; it is staged and
    /// enqueued at the end of the burst: outcome `delivered`, or `socket_full` if the ring
    /// refuses it.
    ///
    /// The socket is not in the verdict, so that a delivery is one constant value: the fast
    /// path's delivery then goes straight from where it is decided to the staging. With the
    /// socket in it (`Deliver(u32)`) every verdict was packed into one word, merged, unpacked
    /// and dispatched through a jump table on every delivered packet (benches/NOTES.md,
    /// "`Verdict` fits a register and `Deliver` carries no socket").
    ///
    /// [`Pipeline::delivered_to`]: super::Pipeline::delivered_to
    Deliver,
}

// Returned in a register by every stage: as a 16-byte value it went through memory, written in
// pieces and read whole, which stalled store forwarding on every packet.
const _: () = assert!(std::mem::size_of::<Verdict>() <= 8);

impl Verdict {
    /// The outcome the verdict carries.
    pub fn outcome(self) -> Outcome {
        match self {
            Verdict::Drop(o)
            | Verdict::Transmit(o)
            | Verdict::TransmitOn { outcome: o, .. }
            | Verdict::HandOff { outcome: o, .. }
            | Verdict::TransmitThrough { outcome: o, .. } => o,
            Verdict::Deliver => Outcome::Delivered,
            Verdict::Reassemble { .. } => Outcome::Reassembled,
        }
    }
}
