//! Fixtures the pipeline's tests share: a port, a pipeline over it, and a UDP checksum filler.

use super::parse::Parsed;
use super::{Pipeline, PortAddrs};
use crate::wire::{self, EthernetAddress};
use std::net::{IpAddr, Ipv4Addr};

pub(crate) const MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
pub(crate) const PEER: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);

pub(crate) fn port() -> PortAddrs {
    PortAddrs::new(
        MAC,
        vec![Ipv4Addr::new(192, 0, 2, 1)],
        vec!["2001:db8::1".parse().unwrap()],
        false,
    )
}

pub(crate) fn pipeline() -> Pipeline {
    Pipeline::for_ports(vec![port()])
}

/// Fills the UDP checksum of a frame the test helpers built with none.
pub(crate) fn with_udp_checksum(mut v: Vec<u8>) -> Vec<u8> {
    let p = Parsed::parse(&v, &wire::Toeplitz::default(), None).unwrap();
    let mut u = wire::UdpPacket::new_checked(&mut v[p.l4_offset as usize..p.ip_end as usize]).unwrap();
    match (p.src, p.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => u.fill_checksum_v4(s, d),
        (IpAddr::V6(s), IpAddr::V6(d)) => u.fill_checksum_v6(&s, &d),
        _ => unreachable!(),
    }
    v
}
