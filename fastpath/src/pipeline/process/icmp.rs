//! ICMP error glue: the errors the pipeline sends about a packet (Port and Protocol
//! Unreachable, reassembly Time Exceeded), decided through the rate limits and built in place
//! (the messages and limits themselves are [`crate::pipeline::icmp_error`]).

use super::Pipeline;
use crate::buf::PacketBuf;
use crate::outcome::Outcome;
use crate::pipeline::icmp_error;
use crate::pipeline::parse::{IpVersion, Parsed};
use crate::pipeline::verdict::{Instant, Verdict};

impl Pipeline {
    /// Answers the packet with an ICMP error of `kind` if the rate limits allow (every
    /// cheap check first, the packet built only when it will be sent); `otherwise` is the verdict
    /// when no error may be sent at all.
    #[inline(always)]
    pub fn icmp_error<B: PacketBuf>(
        &mut self,
        pkt: &mut B,
        p: &Parsed,
        port: u16,
        kind: icmp_error::ErrorKind,
        otherwise: Verdict,
        now: Instant,
    ) -> Verdict {
        if self.tables.icmp.build_first {
            return self.icmp_error_build_first(pkt, p, port, kind, otherwise, now);
        }
        let rng = &mut self.rng;
        // The decision is inline (under a flood it is the whole per-packet cost); counting a
        // suppression is one increment; sending is a call.
        match self.icmp.decide(now, kind, p, pkt.data(), || xorshift(rng)) {
            icmp_error::Decision::Ineligible => otherwise,
            icmp_error::Decision::Suppressed(l) => {
                self.count_suppressed(p.version, l);
                Verdict::Drop(Outcome::IcmpSuppressed)
            }
            icmp_error::Decision::Send => self.icmp_error_send(pkt, p, port, kind, otherwise),
        }
    }

    /// The limits let the error of `kind` go: build it in place and count it.
    #[inline(never)]
    pub(super) fn icmp_error_send<B: PacketBuf>(
        &mut self,
        pkt: &mut B,
        p: &Parsed,
        port: u16,
        kind: icmp_error::ErrorKind,
        otherwise: Verdict,
    ) -> Verdict {
        if let Err(v) = self.build_error(pkt, p, port, kind, otherwise) {
            if v == Verdict::Drop(Outcome::UdpBadChecksum) {
                // Not sent: the sender's burst is not the datagram's to take.
                self.icmp.refund_peer();
            }
            return v;
        }
        self.count_sent(p, kind);
        Verdict::Transmit(Outcome::IcmpError)
    }

    /// Turns `pkt` into the error of `kind` about it, if it may be answered (its UDP checksum,
    /// see [`icmp_error::answerable`]); otherwise the verdict for it.
    fn build_error<B: PacketBuf>(
        &mut self,
        pkt: &mut B,
        p: &Parsed,
        port: u16,
        kind: icmp_error::ErrorKind,
        otherwise: Verdict,
    ) -> Result<(), Verdict> {
        // (A decapsulation cleared the NIC's verdict: it was about the outer packet.)
        if !icmp_error::answerable(kind, p, pkt.data(), pkt.l4_checksum()) {
            return Err(Verdict::Drop(Outcome::UdpBadChecksum));
        }
        let Some(local) = self.tables.ports.get(port as usize) else {
            return Err(otherwise);
        };
        let mac = local.mac();
        if !icmp_error::build_in_place(pkt, p, mac, p.dst, kind, self.idents.atomic()) {
            return Err(Verdict::Drop(Outcome::Malformed));
        }
        Ok(())
    }

    #[inline]
    fn count_sent(&self, p: &Parsed, kind: icmp_error::ErrorKind) {
        self.icmp_counters.sent[icmp_error::family_index(p.version)][kind.type_index()].inc();
    }

    #[inline]
    pub(super) fn count_suppressed(&self, version: IpVersion, l: icmp_error::Limit) {
        self.icmp_counters.limited[icmp_error::family_index(version)][l.index()].inc();
    }

    /// `[icmp] build_first` (benchmark only): Linux's old order, the error built before the
    /// limiter is asked, so a suppressed error costs a whole build. Same counters as
    /// [`Pipeline::icmp_error`].
    #[cold]
    fn icmp_error_build_first<B: PacketBuf>(
        &mut self,
        pkt: &mut B,
        p: &Parsed,
        port: u16,
        kind: icmp_error::ErrorKind,
        otherwise: Verdict,
        now: Instant,
    ) -> Verdict {
        if !icmp_error::eligible(kind, p, pkt.data()) {
            return otherwise;
        }
        if let Err(v) = self.build_error(pkt, p, port, kind, otherwise) {
            return v;
        }
        let rng = &mut self.rng;
        match self.icmp.decide_limits(now, kind, p, || xorshift(rng)) {
            icmp_error::Decision::Ineligible => otherwise,
            icmp_error::Decision::Suppressed(l) => {
                self.count_suppressed(p.version, l);
                Verdict::Drop(Outcome::IcmpSuppressed)
            }
            icmp_error::Decision::Send => {
                self.count_sent(p, kind);
                Verdict::Transmit(Outcome::IcmpError)
            }
        }
    }

    /// A reassembly timed out: ICMP Time Exceeded code 1 about its first fragment, in `pkt`
    /// (RFC 792; RFC 8200 §4.5), through the same rate limits, and back through the tunnel the
    /// fragment came through, if it did; `None` when none is sent.
    pub fn reassembly_timeout<B: PacketBuf>(&mut self, port: u16, pkt: &mut B, now: Instant) -> Option<Verdict> {
        let via = pkt.tunnelled();
        pkt.set_tunnelled(None);
        let p = Parsed::parse(pkt.data(), &self.tables.hasher, None).ok()?;
        let v = self.icmp_error(
            pkt,
            &p,
            port,
            icmp_error::ErrorKind::ReassemblyTimeExceeded,
            Verdict::Drop(Outcome::ReassemblyTimeout),
            now,
        );
        if !matches!(v, Verdict::Transmit(_)) {
            return None;
        }
        let v = self.answer_through_tunnelled(v, via, pkt);
        matches!(
            v,
            Verdict::Transmit(_) | Verdict::TransmitOn { .. } | Verdict::HandOff { .. }
        )
        .then_some(v)
    }
}

/// The next word of an lcore-local xorshift generator (the ICMP credit draws).
#[inline(always)]
pub(super) fn xorshift(rng: &mut u64) -> u32 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    (*rng >> 32) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::HeapBuf;
    use crate::pipeline::parse;
    use crate::pipeline::tests::{pipeline, with_udp_checksum};
    use crate::wire::IpProtocol;
    use std::net::{Ipv4Addr, Ipv6Addr};
    use std::sync::Arc;

    /// RFC 1122 §4.1.3.4: a UDP datagram with a wrong checksum is discarded, not answered with
    /// Port Unreachable (over IPv6 a missing checksum is wrong too, RFC 8200 §8.1), and the check
    /// comes after the limits: a flood they hold back costs no checksum.
    #[test]
    fn closed_port_errors_only_about_datagrams_with_a_right_checksum() {
        use parse::tests::{udp_bytes, v4_frame, v6_frame};
        let me = Ipv4Addr::new(192, 0, 2, 1);
        let them = Ipv4Addr::new(198, 51, 100, 7);
        let me6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let them6: Ipv6Addr = "2001:db8::7".parse().unwrap();
        let udp = udp_bytes(1, 7, b"payload");
        let corrupt = |mut v: Vec<u8>| {
            let last = v.len() - 1;
            v[last] ^= 0x40;
            v
        };
        let v4_none = v4_frame(them, me, IpProtocol::UDP, &[], 0, &udp);
        let v4_right = with_udp_checksum(v4_none.clone());
        let v6_none = v6_frame(them6, me6, IpProtocol::UDP, &[], 64, &udp);
        let v6_right = with_udp_checksum(v6_none.clone());
        for (name, frame, want) in [
            (
                "v4, checksum right",
                v4_right.clone(),
                Verdict::Transmit(Outcome::IcmpError),
            ),
            (
                "v4, no checksum (RFC 768)",
                v4_none,
                Verdict::Transmit(Outcome::IcmpError),
            ),
            (
                "v4, checksum wrong",
                corrupt(v4_right.clone()),
                Verdict::Drop(Outcome::UdpBadChecksum),
            ),
            (
                "v6, checksum right",
                v6_right.clone(),
                Verdict::Transmit(Outcome::IcmpError),
            ),
            ("v6, no checksum", v6_none, Verdict::Drop(Outcome::UdpBadChecksum)),
            (
                "v6, checksum wrong",
                corrupt(v6_right),
                Verdict::Drop(Outcome::UdpBadChecksum),
            ),
        ] {
            // A fresh pipeline each time: the per-destination burst is not what is tested.
            let mut p = pipeline();
            let mut b = HeapBuf::new(&frame);
            assert_eq!(p.process(0, &mut b, Instant(0)), want, "{name}");
            if want == Verdict::Drop(Outcome::UdpBadChecksum) {
                assert_eq!(b.data(), &frame[..], "{name}: nothing built");
            }
        }
        // With no budget left the limiter answers first: suppressed, whatever the checksum.
        let mut p = pipeline();
        let cfg = icmp_error::IcmpConfig {
            burst: 0,
            ..Default::default()
        };
        p.icmp.apply(&cfg, cfg.global_bucket(Instant(0)), 1);
        let mut b = HeapBuf::new(&corrupt(v4_right));
        assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Drop(Outcome::IcmpSuppressed));
    }

    /// Datagrams with a wrong checksum do not spend the burst of the host they name (Linux checks
    /// the checksum before its limiter): 20 spoofed ones from a source, then its valid datagram
    /// still gets the Port Unreachable, and the burst it then has left is the whole burst less
    /// one; the global credit they took is spent (it bounds the checksums computed).
    #[test]
    fn wrong_checksums_leave_the_named_sources_burst_alone() {
        use parse::tests::{udp_bytes, v4_frame, v6_frame};
        let me = Ipv4Addr::new(192, 0, 2, 1);
        let them = Ipv4Addr::new(198, 51, 100, 7);
        let udp = udp_bytes(1, 7, b"payload");
        let right4 = with_udp_checksum(v4_frame(them, me, IpProtocol::UDP, &[], 0, &udp));
        let right6 = with_udp_checksum(v6_frame(
            "2001:db8::7".parse().unwrap(),
            "2001:db8::1".parse().unwrap(),
            IpProtocol::UDP,
            &[],
            64,
            &udp,
        ));
        for right in [right4, right6] {
            let mut wrong = right.clone();
            let last = wrong.len() - 1;
            wrong[last] ^= 0x40;
            let mut p = pipeline();
            let cfg = icmp_error::IcmpConfig {
                peer_burst: 6,
                peer_interval_ms: 1000,
                msgs_per_sec: 1000,
                burst: 1000,
                ..Default::default()
            };
            p.icmp.apply(&cfg, cfg.global_bucket(Instant(0)), 1);
            let global_before = p.icmp.global().credit();
            for i in 0..20 {
                let mut b = HeapBuf::new(&wrong);
                assert_eq!(
                    p.process(0, &mut b, Instant(0)),
                    Verdict::Drop(Outcome::UdpBadChecksum),
                    "wrong #{i}"
                );
            }
            assert!(p.icmp.global().credit() < global_before, "the global credit is spent");
            for i in 0..6 {
                let mut b = HeapBuf::new(&right);
                assert_eq!(
                    p.process(0, &mut b, Instant(0)),
                    Verdict::Transmit(Outcome::IcmpError),
                    "right #{i}"
                );
            }
            let mut b = HeapBuf::new(&right);
            assert_eq!(
                p.process(0, &mut b, Instant(0)),
                Verdict::Drop(Outcome::IcmpSuppressed),
                "the burst is 6, then the limit holds"
            );
        }
    }

    /// The UDP checksum verdict of a NIC with the RX offload: "good" is taken (nothing summed),
    /// anything else is checked in software; an IPv6 zero checksum is wrong whatever it says.
    #[test]
    fn closed_port_checksum_check_takes_the_nics_good_verdict() {
        use crate::buf::NicChecksum;
        use parse::tests::{udp_bytes, v4_frame, v6_frame};
        let me = Ipv4Addr::new(192, 0, 2, 1);
        let them = Ipv4Addr::new(198, 51, 100, 7);
        let udp = udp_bytes(1, 7, b"payload");
        let right = with_udp_checksum(v4_frame(them, me, IpProtocol::UDP, &[], 0, &udp));
        let mut wrong = right.clone();
        let last = wrong.len() - 1;
        wrong[last] ^= 0x40;
        let v6_none = v6_frame(
            "2001:db8::7".parse().unwrap(),
            "2001:db8::1".parse().unwrap(),
            IpProtocol::UDP,
            &[],
            64,
            &udp,
        );
        for (name, frame, nic, want) in [
            (
                "wrong, NIC good",
                &wrong,
                NicChecksum::Good,
                Verdict::Transmit(Outcome::IcmpError),
            ),
            (
                "wrong, NIC bad",
                &wrong,
                NicChecksum::Bad,
                Verdict::Drop(Outcome::UdpBadChecksum),
            ),
            (
                "right, NIC bad",
                &right,
                NicChecksum::Bad,
                Verdict::Transmit(Outcome::IcmpError),
            ),
            (
                "v6 zero, NIC good",
                &v6_none,
                NicChecksum::Good,
                Verdict::Drop(Outcome::UdpBadChecksum),
            ),
        ] {
            let mut p = pipeline();
            let mut b = HeapBuf::new(frame);
            b.set_l4_checksum(nic);
            assert_eq!(p.process(0, &mut b, Instant(0)), want, "{name}");
        }
    }

    #[test]
    fn build_first_builds_even_what_the_limiter_then_suppresses() {
        use parse::tests::{udp_bytes, v4_frame};
        let v = v4_frame(
            Ipv4Addr::new(198, 51, 100, 7),
            Ipv4Addr::new(192, 0, 2, 1),
            IpProtocol::UDP,
            &[],
            0,
            &udp_bytes(1, 9, b"x"),
        );
        for (build_first, grew) in [(false, false), (true, true)] {
            let cfg = icmp_error::IcmpConfig {
                burst: 0,
                build_first,
                ..Default::default()
            };
            let mut p = pipeline();
            let mut t = (*p.tables).clone();
            t.icmp = cfg.clone();
            p.tables = Arc::new(t);
            p.icmp = icmp_error::IcmpLimiter::new(&cfg, cfg.global_bucket(Instant(0)), 1);
            let mut b = HeapBuf::new(&v);
            assert_eq!(p.process(0, &mut b, Instant(0)), Verdict::Drop(Outcome::IcmpSuppressed));
            assert_eq!(b.len() > v.len(), grew, "build_first = {build_first}");
        }
    }
}
