//! What IPv4 and IPv6 share: the protocol / next-header number space (IANA "Assigned Internet
//! Protocol Numbers").

/// An IPv4 protocol or IPv6 next-header number. Unknown values are kept, not rejected.
///
/// The number itself, not an enum of the known ones with an `Unknown(u8)` catch-all: reading it
/// from a header is one load and comparing it one byte compare, where the enum took a jump table
/// per packet to convert and two-byte compares after (the parse of every received packet reads
/// one).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct IpProtocol(pub u8);

impl IpProtocol {
    /// 0, IPv6 Hop-by-Hop Options (RFC 8200 §4.3)
    pub const HOP_BY_HOP: IpProtocol = IpProtocol(0);
    /// 1
    pub const ICMP: IpProtocol = IpProtocol(1);
    /// 6
    pub const TCP: IpProtocol = IpProtocol(6);
    /// 17
    pub const UDP: IpProtocol = IpProtocol(17);
    /// 43, IPv6 Routing header (RFC 8200 §4.4)
    pub const IPV6_ROUTE: IpProtocol = IpProtocol(43);
    /// 44, IPv6 Fragment header (RFC 8200 §4.5)
    pub const IPV6_FRAG: IpProtocol = IpProtocol(44);
    /// 47 (RFC 2784)
    pub const GRE: IpProtocol = IpProtocol(47);
    /// 50
    pub const ESP: IpProtocol = IpProtocol(50);
    /// 51
    pub const AH: IpProtocol = IpProtocol(51);
    /// 58
    pub const ICMPV6: IpProtocol = IpProtocol(58);
    /// 59, IPv6 No Next Header (RFC 8200 §4.7)
    pub const IPV6_NO_NXT: IpProtocol = IpProtocol(59);
    /// 60, IPv6 Destination Options (RFC 8200 §4.6)
    pub const IPV6_OPTS: IpProtocol = IpProtocol(60);

    /// The name of a number this crate knows, for logs.
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            IpProtocol::HOP_BY_HOP => "HopByHop",
            IpProtocol::ICMP => "Icmp",
            IpProtocol::TCP => "Tcp",
            IpProtocol::UDP => "Udp",
            IpProtocol::IPV6_ROUTE => "Ipv6Route",
            IpProtocol::IPV6_FRAG => "Ipv6Frag",
            IpProtocol::GRE => "Gre",
            IpProtocol::ESP => "Esp",
            IpProtocol::AH => "Ah",
            IpProtocol::ICMPV6 => "Icmpv6",
            IpProtocol::IPV6_NO_NXT => "Ipv6NoNxt",
            IpProtocol::IPV6_OPTS => "Ipv6Opts",
            _ => return None,
        })
    }
}

impl core::fmt::Debug for IpProtocol {
    fn fmt(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "Unknown({})", self.0),
        }
    }
}

impl From<u8> for IpProtocol {
    #[inline]
    fn from(v: u8) -> Self {
        IpProtocol(v)
    }
}

impl From<IpProtocol> for u8 {
    #[inline]
    fn from(v: IpProtocol) -> u8 {
        v.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_number_round_trips() {
        for v in 0..=255u8 {
            assert_eq!(u8::from(IpProtocol::from(v)), v);
        }
        assert_eq!(IpProtocol::from(17), IpProtocol::UDP);
        assert_eq!(IpProtocol::from(200), IpProtocol(200));
    }
}
