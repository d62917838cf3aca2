//! What the cargo-fuzz target (`fastpath/fuzz/`) runs, shared with the test that replays its
//! corpus on stable and with the property tests. Not part of the data-plane API.

use crate::buf::{HeapBuf, NicChecksum, PacketBuf};
use crate::outcome::Outcome;
use crate::pipeline::{Instant, Parsed, Pipeline, PortAddrs};
use crate::wire::{
    ArpPacket, EthernetAddress, EthernetFrame, GrePacket, Icmpv4Packet, Icmpv6Packet, Ipv4Packet, Ipv6Packet,
    NeighborPacket, TcpPacket, Toeplitz, UdpPacket,
};
use std::hint::black_box;
use std::net::{Ipv4Addr, Ipv6Addr};

/// The port the fuzzed pipeline answers for: MAC 02:00:00:00:00:01, 192.0.2.1, 2001:db8::1.
pub fn port() -> PortAddrs {
    PortAddrs {
        mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
        ipv4: vec![Ipv4Addr::new(192, 0, 2, 1)],
        ipv6: vec![Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)],
    }
}

/// Runs `data` through every wire view (each accessor and writer, on the bytes as given and on
/// the bytes after a 14-byte Ethernet header), through [`Parsed::parse`], and as a frame through
/// [`Pipeline::process`]; returns the pipeline's outcome. Panics only if the code under test
/// does.
pub fn parse_one(data: &[u8]) -> Outcome {
    views(data);
    if let Some(rest) = data.get(14..) {
        views(rest);
    }
    let _ = black_box(Parsed::parse(data, &Toeplitz::default(), None));
    same_parse_both_ways(data);
    let mut p = Pipeline::for_ports(vec![port()]);
    let mut b = HeapBuf::new(data);
    b.set_rss_hash(Some(0x1234_5678));
    let outcome = p.process(0, &mut b, Instant(0)).outcome();
    // Whatever was built in place must still be a frame the views accept or reject cleanly.
    views(b.data());
    outcome
}

/// `data` parsed both ways, with the NIC's IPv4 header checksum verdict `nic`: by the fixed-offset
/// parse of the common frames ([`Parsed::parse_common_into`], `None` where it does not take the
/// frame) and by the general parser (`None` where it refuses the frame).
pub fn parse_both_ways(data: &[u8], nic: NicChecksum) -> (Option<Parsed>, Option<Parsed>) {
    let mut fixed = Parsed::EMPTY;
    let fixed = Parsed::parse_common_into(data, &mut fixed, nic).then_some(fixed);
    let general = EthernetFrame::new_checked(data).ok().and_then(|f| {
        let mut g = Parsed::EMPTY;
        Parsed::parse_ip_into(&f, &mut g, nic).ok().map(|()| g)
    });
    (fixed, general)
}

/// The pipeline reads the common frames from fixed offsets and everything else with the general
/// parser: wherever the first takes a frame, the second must take it too with exactly the same
/// result (the differential oracle the fuzzer checks).
fn same_parse_both_ways(data: &[u8]) {
    for nic in [NicChecksum::Unknown, NicChecksum::Good] {
        if let (Some(fixed), general) = parse_both_ways(data, nic) {
            assert_eq!(
                Some(fixed),
                general,
                "the fixed-offset and the general parse disagree ({nic:?})"
            );
        }
    }
}

fn views(data: &[u8]) {
    let v4 = Ipv4Addr::new(192, 0, 2, 1);
    let v6 = Ipv6Addr::LOCALHOST;
    if let Ok(f) = EthernetFrame::new_checked(data) {
        black_box((
            f.dst_addr(),
            f.src_addr(),
            f.ethertype(),
            f.vlan_tags(),
            f.inner_vlan_id(),
            f.payload(),
        ));
    }
    if let Ok(a) = ArpPacket::new_checked(data) {
        black_box((
            a.operation(),
            a.sender_hw(),
            a.sender_ip(),
            a.target_hw(),
            a.target_ip(),
        ));
    }
    if let Ok(p) = Ipv4Packet::new_checked(data) {
        black_box((p.dscp(), p.ecn(), p.ident(), p.dont_frag(), p.more_frags()));
        black_box((p.frag_offset(), p.is_fragment(), p.ttl(), p.protocol(), p.checksum()));
        black_box((
            p.src_addr(),
            p.dst_addr(),
            p.options(),
            p.verify_checksum(),
            p.payload(),
        ));
        let mut m = data.to_vec();
        if let Ok(mut p) = Ipv4Packet::new_checked(&mut m[..]) {
            p.set_ttl_update_checksum(1);
            let incremental = p.checksum();
            p.fill_checksum();
            black_box((incremental, p.verify_checksum(), p.payload_mut().len()));
        }
    }
    if let Ok(p) = Ipv6Packet::new_checked(data) {
        black_box((p.traffic_class(), p.flow_label(), p.payload_len(), p.next_header()));
        black_box((
            p.hop_limit(),
            p.src_addr(),
            p.dst_addr(),
            p.payload(),
            p.ext_chain().ok(),
        ));
    }
    if let Ok(u) = UdpPacket::new_checked(data) {
        black_box((u.src_port(), u.dst_port(), u.len(), u.checksum(), u.payload()));
        black_box((u.verify_checksum_v4(v4, v4), u.verify_checksum_v6(&v6, &v6)));
        let mut m = data.to_vec();
        if let Ok(mut u) = UdpPacket::new_checked(&mut m[..]) {
            u.fill_checksum_v4(v4, v4);
            u.fill_checksum_v6(&v6, &v6);
        }
    }
    if let Ok(t) = TcpPacket::new_checked(data) {
        black_box((t.src_port(), t.dst_port(), t.seq_number(), t.ack_number(), t.flags()));
        black_box((t.window(), t.checksum(), t.urgent(), t.options(), t.payload()));
        black_box((t.verify_checksum_v4(v4, v4), t.verify_checksum_v6(&v6, &v6)));
    }
    if let Ok(i) = Icmpv4Packet::new_checked(data) {
        black_box((i.msg_type(), i.code(), i.checksum(), i.echo_ident(), i.echo_seq()));
        black_box((i.data(), i.verify_checksum()));
    }
    if let Ok(i) = Icmpv6Packet::new_checked(data) {
        black_box((i.msg_type(), i.code(), i.checksum(), i.echo_ident(), i.echo_seq()));
        black_box((i.data(), i.verify_checksum(&v6, &v6)));
    }
    if let Ok(n) = NeighborPacket::new_checked(data) {
        black_box((n.flags(), n.target_addr()));
        for o in n.options() {
            black_box(o.ok());
        }
    }
    if let Ok(g) = GrePacket::new_checked(data) {
        black_box((g.protocol(), g.checksum(), g.key(), g.sequence(), g.header_len()));
        black_box((g.verify_checksum(), g.payload()));
    }
}

/// Tables for the fuzzed RX engine: [`port`], a UDP echo service on port 7 and a TCP sink on
/// port 80, each over two sockets of 8 packets (so they fill and refuse).
fn engine_tables() -> std::sync::Arc<crate::pipeline::Tables> {
    use crate::pipeline::{Action, FanoutMode, Group, Service, ServiceTable, Tables};
    use crate::socket::{SimQueue, Socket, SocketCounters};
    use crate::wire::IpProtocol;
    use std::sync::Arc;
    let sockets = (0..4)
        .map(|i| {
            Arc::new(Socket::new(
                if i < 2 { "echo" } else { "sink" },
                i % 2,
                SimQueue::new(8),
                0,
                Arc::new(SocketCounters::new(1, 1)),
            ))
        })
        .collect();
    let svc = |name: &str, protocol, sockets: Vec<usize>, action| Service {
        name: name.into(),
        protocol,
        addresses: vec![],
        group: Group {
            sockets,
            mode: FanoutMode::Hash,
            rollover: true,
            huge_flows: true,
        },
        action,
        cost_ns: 0,
        echo_allow_low_ports: false,
    };
    Arc::new(Tables {
        generation: 1,
        ports: vec![port()],
        services: ServiceTable::new(vec![
            (svc("echo", IpProtocol::UDP, vec![0, 1], Action::Echo), vec![7]),
            (svc("sink", IpProtocol::TCP, vec![2, 3], Action::Sink), vec![80]),
        ]),
        sockets,
        ..Default::default()
    })
}

/// Splits `data` into frames (each a 2-byte big-endian length, then that many bytes; a short
/// tail is the last frame) and runs them through the RX engine over heap buffers in bursts of up
/// to 8, 100 ms apart, then lets every reassembly time out and stops. Checks that every frame
/// ended in exactly one outcome and the reassembler holds nothing; returns the frame count.
pub fn engine_frames(data: &[u8]) -> u64 {
    use crate::rx::{HeapIo, RxEngine};
    use crate::stats::{LcoreStats, QueueCounters};
    use crate::tx::Collect;
    use std::sync::Arc;
    let mut frames: Vec<&[u8]> = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let (len, body) = match rest {
            [a, b, body @ ..] => (u16::from_be_bytes([*a, *b]) as usize, body),
            _ => (rest.len(), rest),
        };
        let n = len.min(body.len());
        frames.push(&body[..n]);
        rest = &body[n..];
    }
    let stats = Arc::new(LcoreStats::new(
        0,
        vec![QueueCounters::new(0, 0)],
        vec![QueueCounters::new(0, 1)],
    ));
    let mut tx = Collect::new(0);
    tx.keep = false;
    let mut e = RxEngine::new(engine_tables(), 0, vec![tx], HeapIo::default(), stats.clone());
    let mut now = Instant(1_000_000_000);
    for burst in frames.chunks(8) {
        let mut b: Vec<HeapBuf> = burst.iter().map(|f| HeapBuf::new(f)).collect();
        e.burst(0, 0, now, &mut b);
        e.poll_done(now);
        now = Instant(now.0 + 100_000_000);
    }
    while let Some(d) = e.next_deadline() {
        e.poll_done(d);
    }
    e.stop(now);
    let n = frames.len() as u64;
    assert_eq!(stats.outcome_packets(), n, "every frame in exactly one outcome");
    assert_eq!(e.reassembly_memory(), 0, "nothing held after the stop");
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::tests as pt;
    use crate::wire::checksum;
    use proptest::prelude::*;

    /// Frames that reach deep into the pipeline: valid Ethernet to our MAC, a valid IPv4 header
    /// (checksum right) or IPv6 header, then arbitrary bytes; `proto` picks the next header.
    fn deep_frame(kind: u8, proto: u8, mut body: Vec<u8>) -> Vec<u8> {
        let mut v = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        match kind % 3 {
            0 => {
                v.extend_from_slice(&[0x08, 0x00]);
                let total = (20 + body.len()).min(u16::MAX as usize) as u16;
                let mut h = [
                    0x45, 0, 0, 0, 0, 1, 0, 0, 64, proto, 0, 0, 198, 51, 100, 7, 192, 0, 2, 1,
                ];
                h[2..4].copy_from_slice(&total.to_be_bytes());
                if kind & 4 != 0 {
                    h[6] = 0x20; // a first fragment now and then
                }
                let c = checksum::checksum(&h);
                h[10..12].copy_from_slice(&c.to_be_bytes());
                v.extend_from_slice(&h);
            }
            1 => {
                v.extend_from_slice(&[0x86, 0xdd]);
                let mut h = [0u8; 40];
                h[0] = 0x60;
                h[4..6].copy_from_slice(&(body.len() as u16).to_be_bytes());
                h[6] = proto;
                h[7] = 255;
                h[8..24].copy_from_slice(&Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2).octets());
                h[24..40].copy_from_slice(&port().ipv6[0].octets());
                v.extend_from_slice(&h);
            }
            _ => {
                // ARP-shaped
                v.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4]);
            }
        }
        v.append(&mut body);
        v
    }

    const PROTOS: [u8; 9] = [0, 1, 6, 17, 43, 44, 47, 58, 60];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_one(&data);
        }

        #[test]
        fn arbitrary_ip_payloads_never_panic(
            kind in any::<u8>(),
            proto in proptest::sample::select(&PROTOS[..]),
            body in proptest::collection::vec(any::<u8>(), 0..120),
        ) {
            let _ = parse_one(&deep_frame(kind, proto, body));
        }
    }

    /// The frames of the committed corpus (`fastpath/fuzz/corpus/parse/`), named
    /// `<expected outcome>--<what>`. Rewritten by `write_fuzz_corpus`.
    pub(crate) fn corpus() -> Vec<(&'static str, Vec<u8>)> {
        use crate::pipeline::echo::tests::{echo4, echo6};
        use crate::pipeline::ndp::tests::{ns, SLLA};
        use crate::pipeline::parse::tests::{udp_bytes, v4_frame, v6_frame};
        use crate::wire::ipv6::solicited_node;
        use crate::wire::{arp, ethernet, ArpOperation, EtherType, IpProtocol};
        let me = Ipv4Addr::new(192, 0, 2, 1);
        let them = Ipv4Addr::new(198, 51, 100, 7);
        let me6 = port().ipv6[0];
        let them6: Ipv6Addr = "2001:db8::7".parse().unwrap();
        let fe80: Ipv6Addr = "fe80::2".parse().unwrap();

        let mut arp_req = vec![0u8; 14 + 28];
        ethernet::emit_header(&mut arp_req, EthernetAddress::BROADCAST, pt::PEER, EtherType::ARP);
        arp::emit(
            &mut arp_req[14..],
            ArpOperation::Request,
            pt::PEER,
            them,
            EthernetAddress([0; 6]),
            me,
        );
        let mut bad_ck = v4_frame(them, me, IpProtocol::UDP, &[], 0, &udp_bytes(1, 7, b"x"));
        bad_ck[24] ^= 0x10;
        let mut long_total = v4_frame(them, me, IpProtocol::UDP, &[], 0, &udp_bytes(1, 7, b"x"));
        long_total.truncate(long_total.len() - 1);
        let mut vlan = v4_frame(them, me, IpProtocol::UDP, &[], 0, &udp_bytes(9, 7, b"hi"));
        vlan.splice(12..12, [0x81, 0x00, 0x00, 0x64]);
        let opts = [60u8, 0, 1, 4, 0, 0, 0, 0].repeat(9);
        let mut other_mac = v4_frame(them, me, IpProtocol::ICMP, &[], 0, &echo4(b"x"));
        other_mac[0..6].copy_from_slice(&[2, 9, 9, 9, 9, 9]);
        let mut padded = v4_frame(them, me, IpProtocol::ICMP, &[], 0, &echo4(b"pad"));
        padded.extend_from_slice(&[0; 17]);
        let frag6 = [17u8, 0, 0, 1, 0, 0, 0, 9];
        let gre = [0x20u8, 0, 0x08, 0x00, 0, 0, 0, 42, 0x45, 0];
        vec![
            ("arp_reply--request", arp_req),
            (
                "echo_reply--icmpv4",
                v4_frame(them, me, IpProtocol::ICMP, &[], 0x4000, &echo4(b"ping")),
            ),
            (
                "echo_reply--icmpv4-options",
                v4_frame(them, me, IpProtocol::ICMP, &[1, 1, 1, 0], 0, &echo4(b"opt")),
            ),
            ("echo_reply--icmpv4-padded", padded),
            (
                "echo_reply--icmpv6",
                v6_frame(them6, me6, IpProtocol::ICMPV6, &[], 64, &echo6(&them6, &me6, b"ping6")),
            ),
            (
                "ndp_reply--ns",
                ns(fe80, solicited_node(&me6), me6, 255, &SLLA).data().to_vec(),
            ),
            (
                "ndp_reply--dad",
                ns(Ipv6Addr::UNSPECIFIED, solicited_node(&me6), me6, 255, &[])
                    .data()
                    .to_vec(),
            ),
            (
                "ndp_ignored--hop-limit",
                ns(fe80, solicited_node(&me6), me6, 64, &SLLA).data().to_vec(),
            ),
            ("malformed--empty", vec![]),
            ("malformed--ipv4-bad-checksum", bad_ck),
            ("malformed--ipv4-total-length-beyond-frame", long_total),
            (
                "malformed--ipv6-ext-chain-too-long",
                v6_frame(them6, me6, IpProtocol::IPV6_OPTS, &opts, 64, &[]),
            ),
            (
                "malformed--ipv6-ext-truncated",
                v6_frame(them6, me6, IpProtocol::IPV6_OPTS, &opts[..5], 64, &[]),
            ),
            ("icmp_error--ipv4-udp-vlan", vlan),
            (
                "reassembled--ipv6-first-fragment",
                v6_frame(them6, me6, IpProtocol::IPV6_FRAG, &frag6, 64, &udp_bytes(1, 7, &[0; 8])),
            ),
            (
                "gre_unknown_tunnel--ipv4-gre",
                v4_frame(them, me, IpProtocol::GRE, &[], 0, &gre),
            ),
            (
                "not_local--ipv6-udp",
                v6_frame(them6, them6, IpProtocol::UDP, &[], 64, &udp_bytes(1, 7, b"")),
            ),
            ("not_for_us--other-mac", other_mac),
        ]
    }

    #[test]
    fn corpus_outcomes_are_the_names() {
        for (name, frame) in corpus() {
            let want = name.split("--").next().unwrap();
            assert_eq!(parse_one(&frame).name(), want, "{name}");
        }
    }

    /// The committed corpus (`fuzz/corpus/parse`) is exactly what `corpus()` generates; run with
    /// `FASTPATH_WRITE_CORPUS=1` to rewrite it after changing `corpus()`.
    #[test]
    fn committed_corpus_is_current() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/parse");
        let write = std::env::var_os("FASTPATH_WRITE_CORPUS").is_some();
        if write {
            std::fs::create_dir_all(&dir).unwrap();
        }
        for (name, frame) in corpus() {
            let path = dir.join(name);
            if write {
                std::fs::write(&path, &frame).unwrap();
            } else {
                let committed = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                assert_eq!(
                    committed,
                    frame,
                    "{} is stale: FASTPATH_WRITE_CORPUS=1 cargo test",
                    path.display()
                );
            }
        }
    }
}
