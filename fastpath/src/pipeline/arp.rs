//! Answering ARP requests for local IPv4 addresses (RFC 826), so real hosts can reach the box.

use super::source;
use super::tables::PortAddrs;
use super::verdict::Verdict;
use crate::buf::PacketBuf;
use crate::outcome::Outcome;
use crate::wire::{self, ArpOperation, ArpPacket};

/// Handles the ARP packet at `frame[l3..]`. Answers, in place, a request whose target is a local
/// address; everything else valid is ignored.
pub(super) fn answer<B: PacketBuf>(local: &PortAddrs, pkt: &mut B, l3: usize) -> Verdict {
    let frame = pkt.data_mut();
    let (requester, spa, tpa) = {
        let arp = match ArpPacket::new_checked(&frame[l3..]) {
            Ok(a) => a,
            Err(wire::Error::Unsupported) => return Verdict::Drop(Outcome::ArpIgnored),
            Err(_) => return Verdict::Drop(Outcome::Malformed),
        };
        if arp.operation() != ArpOperation::Request {
            return Verdict::Drop(Outcome::ArpIgnored);
        }
        (arp.sender_hw(), arp.sender_ip(), arp.target_ip())
    };
    if !local.has_ipv4(tpa) {
        return Verdict::Drop(Outcome::ArpIgnored);
    }
    if spa == tpa {
        // Gratuitous ARP announcing "our" address: nothing to answer.
        return Verdict::Drop(Outcome::ArpIgnored);
    }
    if !requester.is_unicast() {
        // RFC 826 answers to the sender hardware address; a group address there is bogus.
        return Verdict::Drop(Outcome::Malformed);
    }
    if !source::valid_v4_sender(local, spa) {
        // The source-validation rule (`pipeline/source.rs`): no answer to a sender that is not
        // one host, or is one of our own addresses.
        return Verdict::Drop(Outcome::Martian);
    }
    // A probe (RFC 5227, sender IP 0.0.0.0) is answered like any request so the prober sees the
    // address is taken; the reply then targets 0.0.0.0 at the prober's MAC, as Linux does.
    let Ok(mut arp) = ArpPacket::new_checked(&mut frame[l3..]) else {
        return Verdict::Drop(Outcome::Malformed);
    };
    arp.make_reply(local.mac(), tpa);
    // Ethernet: back to the requester from us; VLAN tags are kept, so the reply leaves on the
    // VLAN the request came from.
    frame[0..6].copy_from_slice(&requester.0);
    frame[6..12].copy_from_slice(&local.mac().0);
    // The reply is the ARP packet only: the request's link-layer padding (whatever its sender
    // put there) is not sent back; the NIC pads the frame to the minimum with zeros.
    let _shorter = pkt.set_len(l3 + wire::arp::PACKET_LEN);
    Verdict::Transmit(Outcome::ArpReply)
}

/// The sender of the ARP reply in `frame` if it is a valid reply to one of the port's addresses
/// (unicast to us, from a valid sender): the kernel path's test (`pipeline/kernel.rs`).
pub(super) fn reply_for(local: &PortAddrs, frame: &[u8]) -> Option<std::net::Ipv4Addr> {
    let l3 = wire::EthernetFrame::new_checked(frame).ok()?.header_len();
    let arp = ArpPacket::new_checked(frame.get(l3..)?).ok()?;
    let ours = arp.operation() == ArpOperation::Reply
        && local.has_ipv4(arp.target_ip())
        && arp.sender_hw().is_unicast()
        && source::valid_v4_sender(local, arp.sender_ip())
        && frame.first().is_some_and(|b| b & 1 == 0);
    ours.then(|| arp.sender_ip())
}

#[cfg(test)]
mod tests {
    use super::super::tests::{pipeline, MAC, PEER};
    use super::super::*;
    use crate::buf::{HeapBuf, PacketBuf};
    use crate::outcome::Outcome;
    use crate::wire::{arp, ethernet, EtherType, EthernetAddress, EthernetFrame};
    use std::net::Ipv4Addr;

    fn request(eth_dst: EthernetAddress, sender: Ipv4Addr, target: Ipv4Addr) -> HeapBuf {
        let mut v = vec![0u8; 14 + 28];
        ethernet::emit_header(&mut v, eth_dst, PEER, EtherType::ARP);
        arp::emit(
            &mut v[14..],
            ArpOperation::Request,
            PEER,
            sender,
            EthernetAddress([0; 6]),
            target,
        );
        HeapBuf::new(&v)
    }

    use crate::wire::{ArpOperation, ArpPacket};

    #[test]
    fn answers_request_for_local_address() {
        let mut p = pipeline();
        let mut b = request(
            EthernetAddress::BROADCAST,
            Ipv4Addr::new(192, 0, 2, 2),
            Ipv4Addr::new(192, 0, 2, 1),
        );
        assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Transmit(Outcome::ArpReply));
        let f = EthernetFrame::new_checked(b.data()).unwrap();
        assert_eq!(f.dst_addr(), PEER);
        assert_eq!(f.src_addr(), MAC);
        let a = ArpPacket::new_checked(f.payload()).unwrap();
        assert_eq!(a.operation(), ArpOperation::Reply);
        assert_eq!(a.sender_hw(), MAC);
        assert_eq!(a.sender_ip(), Ipv4Addr::new(192, 0, 2, 1));
        assert_eq!(a.target_hw(), PEER);
        assert_eq!(a.target_ip(), Ipv4Addr::new(192, 0, 2, 2));
    }

    #[test]
    fn answers_probe_and_vlan_request() {
        let mut p = pipeline();
        let mut probe = request(
            EthernetAddress::BROADCAST,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::new(192, 0, 2, 1),
        );
        assert_eq!(
            p.process(0, &mut probe, Instant(0)),
            Verdict::Transmit(Outcome::ArpReply)
        );

        let plain = request(MAC, Ipv4Addr::new(192, 0, 2, 2), Ipv4Addr::new(192, 0, 2, 1));
        let mut v = plain.data()[..12].to_vec();
        v.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        v.extend_from_slice(&plain.data()[12..]);
        let mut tagged = HeapBuf::new(&v);
        assert_eq!(
            p.process(0, &mut tagged, Instant(0)),
            Verdict::Transmit(Outcome::ArpReply)
        );
        let f = EthernetFrame::new_checked(tagged.data()).unwrap();
        assert_eq!(f.inner_vlan_id(), Some(7));
        assert_eq!(
            ArpPacket::new_checked(f.payload()).unwrap().operation(),
            ArpOperation::Reply
        );
    }

    #[test]
    fn ignores_what_needs_no_answer() {
        let mut p = pipeline();
        let mut other = request(
            EthernetAddress::BROADCAST,
            Ipv4Addr::new(192, 0, 2, 2),
            Ipv4Addr::new(192, 0, 2, 99),
        );
        assert_eq!(p.process(0, &mut other, Instant(0)), Verdict::Drop(Outcome::ArpIgnored));
        let mut grat = request(
            EthernetAddress::BROADCAST,
            Ipv4Addr::new(192, 0, 2, 1),
            Ipv4Addr::new(192, 0, 2, 1),
        );
        assert_eq!(p.process(0, &mut grat, Instant(0)), Verdict::Drop(Outcome::ArpIgnored));
        let mut reply = request(
            EthernetAddress::BROADCAST,
            Ipv4Addr::new(192, 0, 2, 2),
            Ipv4Addr::new(192, 0, 2, 1),
        );
        reply.data_mut()[14 + 7] = 2;
        assert_eq!(p.process(0, &mut reply, Instant(0)), Verdict::Drop(Outcome::ArpIgnored));
        let mut short = request(
            EthernetAddress::BROADCAST,
            Ipv4Addr::new(192, 0, 2, 2),
            Ipv4Addr::new(192, 0, 2, 1),
        );
        assert!(short.trim(1));
        assert_eq!(p.process(0, &mut short, Instant(0)), Verdict::Drop(Outcome::Malformed));
    }
}
