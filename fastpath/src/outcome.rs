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
    /// Sent on unchanged by the plain forward mode (`[lcores] mode = "forward"`), no stage run.
    Forwarded,
}

impl Outcome {
    /// Every outcome, in counter-index order.
    pub const ALL: [Outcome; 8] = [
        Outcome::Malformed,
        Outcome::Oversize,
        Outcome::NotForUs,
        Outcome::ArpReply,
        Outcome::ArpIgnored,
        Outcome::Unhandled,
        Outcome::TxFull,
        Outcome::Forwarded,
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
            Outcome::Forwarded => "forwarded",
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
    }
}
