//! What IPv4 and IPv6 share: the protocol / next-header number space (IANA "Assigned Internet
//! Protocol Numbers").

/// An IPv4 protocol or IPv6 next-header number. Unknown values are kept, not rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpProtocol {
    /// 0, IPv6 Hop-by-Hop Options (RFC 8200 §4.3)
    HopByHop,
    /// 1
    Icmp,
    /// 6
    Tcp,
    /// 17
    Udp,
    /// 43, IPv6 Routing header (RFC 8200 §4.4)
    Ipv6Route,
    /// 44, IPv6 Fragment header (RFC 8200 §4.5)
    Ipv6Frag,
    /// 47 (RFC 2784)
    Gre,
    /// 50
    Esp,
    /// 51
    Ah,
    /// 58
    Icmpv6,
    /// 59, IPv6 No Next Header (RFC 8200 §4.7)
    Ipv6NoNxt,
    /// 60, IPv6 Destination Options (RFC 8200 §4.6)
    Ipv6Opts,
    /// Anything else.
    Unknown(u8),
}

impl From<u8> for IpProtocol {
    fn from(v: u8) -> Self {
        match v {
            0 => IpProtocol::HopByHop,
            1 => IpProtocol::Icmp,
            6 => IpProtocol::Tcp,
            17 => IpProtocol::Udp,
            43 => IpProtocol::Ipv6Route,
            44 => IpProtocol::Ipv6Frag,
            47 => IpProtocol::Gre,
            50 => IpProtocol::Esp,
            51 => IpProtocol::Ah,
            58 => IpProtocol::Icmpv6,
            59 => IpProtocol::Ipv6NoNxt,
            60 => IpProtocol::Ipv6Opts,
            o => IpProtocol::Unknown(o),
        }
    }
}

impl From<IpProtocol> for u8 {
    fn from(v: IpProtocol) -> u8 {
        match v {
            IpProtocol::HopByHop => 0,
            IpProtocol::Icmp => 1,
            IpProtocol::Tcp => 6,
            IpProtocol::Udp => 17,
            IpProtocol::Ipv6Route => 43,
            IpProtocol::Ipv6Frag => 44,
            IpProtocol::Gre => 47,
            IpProtocol::Esp => 50,
            IpProtocol::Ah => 51,
            IpProtocol::Icmpv6 => 58,
            IpProtocol::Ipv6NoNxt => 59,
            IpProtocol::Ipv6Opts => 60,
            IpProtocol::Unknown(o) => o,
        }
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
        assert_eq!(IpProtocol::from(17), IpProtocol::Udp);
        assert_eq!(IpProtocol::from(200), IpProtocol::Unknown(200));
    }
}
