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
    PortAddrs::new(
        EthernetAddress([2, 0, 0, 0, 0, 1]),
        vec![Ipv4Addr::new(192, 0, 2, 1)],
        vec![Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)],
        false,
    )
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
            flow_limit: true,
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

/// Reads `data` front to back; past its end every read is zero.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn take(&mut self, n: usize) -> &[u8] {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        a
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What [`reasm_sequence`] saw: fragments inserted and where they ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReasmRun {
    /// Fragments given to the reassembler.
    pub inserted: u64,
    /// Datagrams completed.
    pub completed: u64,
    /// Fragments released as refused.
    pub refused: u64,
    /// Fragments released as timed out.
    pub timed_out: u64,
    /// Highest memory charge seen.
    pub peak_memory: usize,
}

impl ReasmRun {
    /// `<completed>done-<refused>refused-<timed out>expired`, the outcome part of a corpus
    /// file's name.
    pub fn name(&self) -> String {
        format!(
            "{}done-{}refused-{}expired",
            self.completed, self.refused, self.timed_out
        )
    }
}

/// Records the reassembler's releases by fate; allocation never fails.
#[derive(Default)]
struct ReasmTally {
    counted: u64,
    refused: Vec<crate::pipeline::reasm::Reason>,
    timed_out: u64,
    reassembled: u64,
    absorbed: u64,
    random: u32,
}

impl crate::pipeline::reasm::ReasmIo<HeapBuf> for ReasmTally {
    fn alloc(&mut self, len: usize) -> Option<HeapBuf> {
        Some(HeapBuf::with_room(&[], 128, len))
    }
    fn release(&mut self, r: crate::pipeline::reasm::Released<HeapBuf>) {
        use crate::pipeline::reasm::Fate;
        self.counted += r.fate.counts_outcome() as u64;
        match r.fate {
            Fate::Refused(reason) => self.refused.push(reason),
            Fate::TimedOut { .. } => self.timed_out += 1,
            Fate::Reassembled => self.reassembled += 1,
            Fate::Absorbed => self.absorbed += 1,
            Fate::Drained => {}
        }
    }
    fn random(&mut self) -> u32 {
        self.random = self.random.wrapping_mul(1_103_515_245).wrapping_add(12345);
        self.random >> 8
    }
}

const REASM_SRC4: [Ipv4Addr; 2] = [Ipv4Addr::new(198, 51, 100, 7), Ipv4Addr::new(203, 0, 113, 9)];
const REASM_SRC6: [Ipv6Addr; 2] = [
    Ipv6Addr::new(0x2001, 0xdb8, 7, 0, 0, 0, 0, 7),
    Ipv6Addr::new(0x2001, 0xdb8, 9, 0, 0, 0, 0, 9),
];

/// One fragment frame: IPv4 (`v6` false) or IPv6 with a Fragment header, from source `src`
/// (0 or 1) to [`port`], identification `ident`, at byte `offset`, `more` fragments flag, and
/// `data`. An IPv6 fragment's next header is UDP, or Destination Options with `dst_opts` (so a
/// short first fragment lacks the chain's end).
pub fn fragment_frame(
    v6: bool,
    src: usize,
    ident: u32,
    offset: u16,
    more: bool,
    dst_opts: bool,
    data: &[u8],
) -> Vec<u8> {
    use crate::wire::{ethernet, EtherType, IpProtocol, Ipv4Repr, Ipv6Repr};
    let me = port();
    let mut v = vec![0u8; 14];
    let ty = if v6 { EtherType::IPV6 } else { EtherType::IPV4 };
    ethernet::emit_header(&mut v, me.mac(), EthernetAddress([2, 0, 0, 0, 0, 2]), ty);
    let word = (offset & !7) | more as u16;
    if v6 {
        let mut h = [0u8; 48];
        Ipv6Repr {
            src: REASM_SRC6[src % 2],
            dst: me.ipv6[0],
            next_header: IpProtocol::IPV6_FRAG,
            payload_len: (8 + data.len()).min(u16::MAX as usize) as u16,
            hop_limit: 64,
        }
        .emit(&mut h);
        h[40] = if dst_opts { 60 } else { 17 };
        h[42..44].copy_from_slice(&word.to_be_bytes());
        h[44..48].copy_from_slice(&ident.to_be_bytes());
        v.extend_from_slice(&h);
    } else {
        let mut h = [0u8; 20];
        Ipv4Repr {
            src: REASM_SRC4[src % 2],
            dst: me.ipv4[0],
            protocol: IpProtocol::UDP,
            payload_len: data.len().min(u16::MAX as usize - 20) as u16,
            ttl: 64,
            dscp_ecn: 0,
            ident: ident as u16,
            dont_frag: false,
        }
        .emit(&mut h);
        let w = (offset / 8) | if more { 0x2000 } else { 0 };
        h[6..8].copy_from_slice(&w.to_be_bytes());
        h[10..12].copy_from_slice(&[0, 0]);
        let c = crate::wire::checksum::checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        v.extend_from_slice(&h);
    }
    v.extend_from_slice(data);
    v
}

/// `data` as a reassembly scenario, run straight against a [`Reassembler`]: the first two
/// bytes pick small limits (1 to 4 slots, 2 to 8 fragments per datagram, 1 or 2 datagrams per
/// source, a threshold of 1 to 16 buffers, pressure-scaled timeout or not), then each
/// operation:
/// - `0x00..=0xbf`: a fragment, IPv4 or IPv6 (bit 0) of source bit 1, identification bits
///   2-3 (so few datagrams, which collide), M flag bit 4, IPv6 Destination Options bit 5; then
///   its offset in 8-byte units, its length, and a fill byte (byte `i` of a datagram is `fill ^
///   i`, so the same fill gives exact duplicates and another fill an overlap that differs);
/// - `0xc0..=0xdf`: time moves on by 1 to 32 twentieths of the 1 s timeout;
/// - `0xe0..=0xef`: expiry runs with a budget of 1 to 16 datagrams;
/// - `0xf0..=0xff`: the next byte is a length, that many bytes a raw frame, inserted if it
///   reads as a fragment at all.
///
/// After every operation: every fragment inserted is held, released with an outcome or in a
/// completed datagram (exactly one of these), what [`Insert`](crate::pipeline::reasm::Insert)
/// reports matches the releases, memory is the held buffers' charge and never above
/// [`Reassembler::memory_limit`], and a completed datagram is a whole unfragmented IP
/// packet. At the end time runs past every deadline: nothing is held and every fragment has
/// its one outcome.
///
/// [`Reassembler`]: crate::pipeline::reasm::Reassembler
/// [`Reassembler::memory_limit`]: crate::pipeline::reasm::Reassembler::memory_limit
pub fn reasm_sequence(data: &[u8]) -> ReasmRun {
    use crate::pipeline::reasm::{FragMeta, Insert, Policy, ReasmConfig, Reason, Reassembler};
    let mut input = Bytes(data);
    let (a, b) = (input.u8(), input.u8());
    let truesize = 256;
    let cfg = ReasmConfig {
        max_datagrams: 1 + (a & 3) as usize,
        max_fragments: 2 + 2 * ((a >> 2) & 3) as usize,
        max_per_source: 1 + ((a >> 4) & 1) as usize,
        high_thresh_bytes: (1 + (b & 15) as usize) * truesize,
        timeout_ns: 1_000_000_000,
        buffer_truesize: truesize,
        pressure_scaled_timeout: b & 0x10 == 0,
        // Bit 0x20 picks the probation policy (`linux` without: the corpus predates it).
        policy: if b & 0x20 != 0 {
            Policy::Probation
        } else {
            Policy::Linux
        },
    };
    let mut r: Reassembler<HeapBuf> = Reassembler::new(cfg);
    let mut io = ReasmTally::default();
    let mut run = ReasmRun::default();
    let mut now = Instant(1_000_000_000);
    let check = |r: &Reassembler<HeapBuf>, io: &ReasmTally, run: &mut ReasmRun| {
        assert_eq!(
            run.inserted,
            io.counted + run.completed + r.held_fragments() as u64,
            "every fragment held, released with an outcome, or in a datagram"
        );
        assert_eq!(r.memory(), r.held_fragments() * truesize, "memory is the held buffers");
        assert!(r.memory() <= r.memory_limit(), "memory {} over its limit", r.memory());
        if r.config().policy == Policy::Probation {
            let h = r.config().high_thresh_bytes;
            assert!(r.memory() <= h, "probation: memory {} over high_thresh {h}", r.memory());
        }
        run.peak_memory = run.peak_memory.max(r.memory());
    };
    while !input.is_empty() {
        let op = input.u8();
        let frame = match op {
            0xc0..=0xdf => {
                now = Instant(now.0 + (1 + (op & 0x1f) as u64) * 50_000_000);
                continue;
            }
            0xe0..=0xef => {
                let before = io.timed_out;
                let n = r.expire(now, 1 + (op & 15) as usize, &mut io);
                assert!(n <= 1 + (op & 15) as usize && (io.timed_out > before) <= (n > 0));
                check(&r, &io, &mut run);
                continue;
            }
            0xf0..=0xff => {
                let n = input.u8() as usize;
                input.take(n).to_vec()
            }
            _ => {
                let (off, len, fill) = (input.u8() as u16 * 8, input.u8() as usize, input.u8());
                let bytes: Vec<u8> = (0..len).map(|i| fill ^ (off as usize + i) as u8).collect();
                let (v6, src, ident) = (op & 1 != 0, ((op >> 1) & 1) as usize, ((op >> 2) & 3) as u32);
                fragment_frame(v6, src, ident, off, op & 0x10 != 0, op & 0x20 != 0, &bytes)
            }
        };
        let Some(meta) = FragMeta::from_ethernet(&frame) else {
            continue;
        };
        let (refused_before, reassembled_before, absorbed_before) = (io.refused.len(), io.reassembled, io.absorbed);
        run.inserted += 1;
        match r.insert(now, HeapBuf::new(&frame), &meta, &mut io) {
            Insert::Held => {}
            Insert::Complete { datagram, fragments } => {
                run.completed += 1;
                assert_eq!(io.absorbed - absorbed_before, 1, "one fragment absorbed");
                assert_eq!(io.reassembled - reassembled_before, fragments as u64 - 1);
                whole_datagram(datagram.data(), meta.l3_offset as usize);
                let _ = black_box(Parsed::parse(datagram.data(), &Toeplitz::default(), None));
            }
            Insert::Dropped { reason, fragments } => {
                let new = &io.refused[refused_before..];
                if !matches!(reason, Reason::PerSource | Reason::TableFull | Reason::Evicted) {
                    let n = new.iter().filter(|&&x| x == reason).count();
                    assert_eq!(n, fragments, "{reason:?}: {fragments} dropped, {n} released");
                }
            }
        }
        check(&r, &io, &mut run);
    }
    while let Some(d) = r.next_deadline() {
        assert!(r.expire(d, usize::MAX, &mut io) > 0, "a deadline that expires nothing");
    }
    check(&r, &io, &mut run);
    assert_eq!(
        (r.held_fragments(), r.memory(), r.datagrams()),
        (0, 0, 0),
        "everything freed after the last timeout"
    );
    run.refused = io.refused.len() as u64;
    run.timed_out = io.timed_out;
    run
}

/// A reassembled datagram is one unfragmented IP packet exactly as long as its frame.
fn whole_datagram(d: &[u8], l3: usize) {
    let ip = &d[l3..];
    match ip.first().map(|b| b >> 4) {
        Some(4) => {
            let p = Ipv4Packet::new_checked(ip).expect("a reassembled IPv4 header");
            assert!(p.verify_checksum() && !p.is_fragment(), "reassembled IPv4 header");
            assert_eq!(p.total_len(), ip.len(), "IPv4 total length");
        }
        Some(6) => {
            let p = Ipv6Packet::new_checked(ip).expect("a reassembled IPv6 header");
            assert_eq!(p.payload_len() + 40, ip.len(), "IPv6 payload length");
        }
        v => panic!("reassembled a datagram of IP version {v:?}"),
    }
}

/// The tunnels of [`gre_frames`]: 0 and 1 from 198.51.100.9 to 192.0.2.1 (no key; key 7 with
/// checksums required), 2 and 3 from 2001:db8::9 to 2001:db8::1 (key 9 with sequence numbers,
/// at most 1000 ahead; no key). Each answers out of port 0.
pub fn gre_tunnels() -> Vec<crate::pipeline::tunnel::Tunnel> {
    use crate::pipeline::tunnel::{Tunnel, TunnelCounters, TunnelOut};
    let v4: (std::net::IpAddr, std::net::IpAddr) = (
        Ipv4Addr::new(192, 0, 2, 1).into(),
        Ipv4Addr::new(198, 51, 100, 9).into(),
    );
    let v6: (std::net::IpAddr, std::net::IpAddr) = (
        port().ipv6[0].into(),
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 9).into(),
    );
    let t = |name: &str, (local, remote), key, sequence, checksum| Tunnel {
        name: name.into(),
        local,
        remote,
        key,
        sequence,
        checksum,
        ttl: 64,
        out: TunnelOut::Port {
            port: 0,
            src_mac: port().mac(),
            dst_mac: EthernetAddress([2, 0, 0, 0, 0, 0xfe]),
            mtu: 1500,
        },
        depth: 1,
        owner: 0,
        counters: std::sync::Arc::new(TunnelCounters::new(1, 1)),
        handoff: None,
        max_seq_jump: 1000,
    };
    vec![
        t("plain4", v4, None, false, false),
        t("keyed4", v4, Some(7), false, true),
        t("seq6", v6, Some(9), true, false),
        t("plain6", v6, None, false, false),
    ]
}

/// One GRE frame of [`gre_frames`], decoded from its bytes, and whether every one of its layers
/// is what its tunnel takes, on a tunnel without sequence numbers, around an echo request.
fn gre_frame(input: &mut Bytes, tunnels: &[crate::pipeline::tunnel::Tunnel]) -> (Vec<u8>, bool, usize) {
    use crate::wire::{ethernet, gre::GreRepr, EtherType, IpProtocol, Ipv4Repr, Ipv6Repr};
    let h = input.u8();
    let layers = 1 + (h & 3) as usize;
    let inner_kind = (h >> 2) & 3;
    let mut specs = Vec::new();
    for _ in 0..layers {
        specs.push((input.u8(), input.u32()));
    }
    let me = port();
    let inner_src4 = Ipv4Addr::new(10, 0, 0, 2);
    let inner_src6 = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2);
    let ip = |v6: bool, src: std::net::IpAddr, dst: std::net::IpAddr, proto: IpProtocol, payload: &[u8]| {
        let mut v = vec![0u8; if v6 { 40 } else { 20 }];
        match (src, dst) {
            (std::net::IpAddr::V6(src), std::net::IpAddr::V6(dst)) => Ipv6Repr {
                src,
                dst,
                next_header: proto,
                payload_len: payload.len().min(u16::MAX as usize) as u16,
                hop_limit: 64,
            }
            .emit(&mut v),
            (std::net::IpAddr::V4(src), std::net::IpAddr::V4(dst)) => Ipv4Repr {
                src,
                dst,
                protocol: proto,
                payload_len: payload.len().min(u16::MAX as usize - 20) as u16,
                ttl: 64,
                dscp_ecn: 0,
                ident: 1,
                dont_frag: false,
            }
            .emit(&mut v),
            _ => unreachable!("one family per header"),
        }
        v.extend_from_slice(payload);
        v
    };
    let (mut pkt, mut v6, mut valid) = match inner_kind {
        0 => {
            let mut m = vec![8u8, 0, 0, 0, 0x12, 0x34, 0, 1, b'g', b'r', b'e'];
            let c = crate::wire::checksum::checksum(&m);
            m[2..4].copy_from_slice(&c.to_be_bytes());
            (
                ip(false, inner_src4.into(), me.ipv4[0].into(), IpProtocol::ICMP, &m),
                false,
                true,
            )
        }
        1 => {
            use crate::wire::checksum::{finish, pseudo_v6, sum};
            let mut m = vec![128u8, 0, 0, 0, 0x12, 0x34, 0, 1, b'g', b'r', b'e'];
            let c = finish(sum(pseudo_v6(&inner_src6, &me.ipv6[0], 58, m.len() as u32), &m));
            m[2..4].copy_from_slice(&c.to_be_bytes());
            (
                ip(true, inner_src6.into(), me.ipv6[0].into(), IpProtocol::ICMPV6, &m),
                true,
                true,
            )
        }
        2 => {
            let n = input.u8() as usize;
            let body = input.take(n).to_vec();
            (
                ip(false, inner_src4.into(), me.ipv4[0].into(), IpProtocol::UDP, &body),
                false,
                false,
            )
        }
        _ => {
            let n = input.u8() as usize;
            (input.take(n).to_vec(), false, false)
        }
    };
    // Innermost layer last in `specs`: wrap from the inside out.
    for &(f, seq) in specs.iter().rev() {
        let t = &tunnels[(f & 3) as usize];
        let (checksum, key_bit, seq_bit, bad_ck, wrong_key, teb) = (
            f & 4 != 0,
            f & 8 != 0,
            f & 16 != 0,
            f & 32 != 0,
            f & 64 != 0,
            f & 128 != 0,
        );
        let key = key_bit.then(|| t.key.unwrap_or(5).wrapping_add(wrong_key as u32));
        let protocol = match (teb, v6) {
            (true, _) => EtherType::from(0x6558),
            (false, true) => EtherType::IPV6,
            (false, false) => EtherType::IPV4,
        };
        let repr = GreRepr {
            protocol,
            checksum,
            key,
            sequence: seq_bit.then_some(seq),
        };
        let mut g = vec![0u8; repr.header_len()];
        g.extend_from_slice(&pkt);
        repr.emit(&mut g);
        if bad_ck && checksum {
            g[4] ^= 0x5a;
        }
        // The tunnel's key, its checksum if it requires one, a right checksum, IP inside, and no
        // sequence numbers (whose window this oracle does not follow).
        let ck_ok = if checksum { !bad_ck } else { !t.checksum };
        valid &= key == t.key && ck_ok && !teb && !t.sequence;
        v6 = t.local.is_ipv6();
        pkt = ip(v6, t.remote, t.local, IpProtocol::GRE, &g);
    }
    let mut frame = vec![0u8; 14];
    let ty = if v6 { EtherType::IPV6 } else { EtherType::IPV4 };
    ethernet::emit_header(&mut frame, me.mac(), EthernetAddress([2, 0, 0, 0, 0, 0xfe]), ty);
    if h & 0x10 != 0 {
        frame.splice(12..12, [0x81, 0x00, 0x00, 0x05]);
    }
    frame.extend_from_slice(&pkt);
    if h & 0x20 != 0 {
        let cut = input.u8() as usize;
        frame.truncate(frame.len().saturating_sub(cut));
        valid &= cut == 0;
    }
    if h & 0x40 != 0 {
        let (at, x) = (input.u8() as usize, input.u8());
        if let Some(b) = frame.get_mut(at) {
            *b ^= x;
            valid &= x == 0;
        }
    }
    (frame, valid, layers)
}

/// `data` as a sequence of GRE frames through a [`Pipeline`] with the tunnels of
/// [`gre_tunnels`] (the sequence state carries from one frame to the next). Each frame: a byte
/// with the number of GRE layers (1 to 4, bits 0-1), the innermost packet (bits 2-3: an ICMPv4
/// or ICMPv6 echo request to us, a UDP datagram, or raw bytes, these two with a length byte
/// and the bytes), a VLAN tag (bit 4), a cut off tail (bit 5, a length byte) and a flipped
/// byte (bit 6, a position and a mask); then per layer, outermost first, a byte (the tunnel in
/// bits 0-1; checksum, key, sequence number present; checksum wrong; key off by one;
/// Ethernet instead of IP inside) and a 4-byte sequence number. Returns each frame's outcome.
///
/// Never panics, every answer is one the views read, and a frame whose layers all match a
/// tunnel without sequence numbers around an echo request is answered (an echo reply) when it
/// has at most [`MAX_DEPTH`](crate::pipeline::tunnel::MAX_DEPTH) layers and dropped as too deep
/// otherwise.
pub fn gre_frames(data: &[u8]) -> Vec<Outcome> {
    use crate::pipeline::tunnel::MAX_DEPTH;
    use crate::pipeline::Tables;
    let tables = std::sync::Arc::new(Tables {
        generation: 1,
        ports: vec![port()],
        tunnels: gre_tunnels(),
        ..Default::default()
    });
    let mut p = Pipeline::new(tables.clone(), 0);
    let mut input = Bytes(data);
    let mut out = Vec::new();
    let mut now = Instant(1_000_000_000);
    while !input.is_empty() && out.len() < 64 {
        let (frame, valid, layers) = gre_frame(&mut input, &tables.tunnels);
        let mut b = HeapBuf::new(&frame);
        let outcome = p.process(0, &mut b, now).outcome();
        views(b.data());
        if valid {
            let want = if layers <= MAX_DEPTH {
                Outcome::EchoReply
            } else {
                Outcome::GreRecursion
            };
            assert_eq!(outcome, want, "{layers} valid GRE layers around an echo request");
        }
        out.push(outcome);
        // Far apart, so no ICMP rate limit is in the way.
        now = Instant(now.0 + 1_000_000_000);
    }
    out
}

/// The outcome part of a GRE corpus file's name: the frames' outcomes joined by `+`.
pub fn gre_name(outcomes: &[Outcome]) -> String {
    outcomes.iter().map(|o| o.name()).collect::<Vec<_>>().join("+")
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

    /// Inputs of the `reasm` target (see [`reasm_sequence`]), named `<run name>--<what>`.
    pub(crate) fn reasm_corpus() -> Vec<(&'static str, Vec<u8>)> {
        // Limits: 4 slots, 8 fragments, 2 per source; threshold 16 buffers, scaled timeout.
        let roomy = [0x1f, 0x0f];
        let with = |limits: [u8; 2], ops: &[&[u8]]| {
            let mut v = limits.to_vec();
            for op in ops {
                v.extend_from_slice(op);
            }
            v
        };
        // Fragment op: kind (v6 bit 0, source bit 1, ident bits 2-3, M bit 4), offset/8, length, fill.
        let later = [0xdf]; // 1.6 s: past the 1 s timeout
        vec![
            (
                "1done-0refused-0expired--v4-in-order",
                with(roomy, &[&[0x10, 0, 16, 1], &[0x10, 2, 16, 1], &[0x00, 4, 5, 1]]),
            ),
            (
                "1done-0refused-0expired--v4-reverse",
                with(roomy, &[&[0x00, 4, 5, 1], &[0x10, 2, 16, 1], &[0x10, 0, 16, 1]]),
            ),
            (
                "1done-0refused-0expired--v6-mixed",
                with(roomy, &[&[0x11, 2, 16, 3], &[0x01, 4, 9, 3], &[0x11, 0, 16, 3]]),
            ),
            (
                "1done-1refused-0expired--v4-duplicate",
                with(roomy, &[&[0x10, 0, 16, 1], &[0x10, 0, 16, 1], &[0x00, 2, 8, 1]]),
            ),
            (
                "0done-2refused-0expired--v4-overlap-differs",
                with(roomy, &[&[0x10, 0, 16, 1], &[0x00, 1, 16, 2]]),
            ),
            (
                "0done-2refused-0expired--v6-same-range-other-bytes",
                with(roomy, &[&[0x11, 0, 16, 1], &[0x11, 0, 16, 2]]),
            ),
            (
                "0done-2refused-0expired--v4-inconsistent-ends",
                with(roomy, &[&[0x00, 2, 8, 1], &[0x00, 3, 8, 1]]),
            ),
            ("0done-1refused-0expired--v4-tiny", with(roomy, &[&[0x10, 0, 5, 1]])),
            (
                "0done-0refused-2expired--v4-times-out",
                with(roomy, &[&[0x10, 0, 16, 1], &[0x00, 4, 8, 1], &later, &[0xef]]),
            ),
            (
                "0done-0refused-2expired--late-fragment-finds-expired",
                with(roomy, &[&[0x10, 0, 16, 1], &later, &[0x00, 2, 8, 1]]),
            ),
            (
                "2done-0refused-0expired--v4-and-v6-interleaved",
                with(
                    roomy,
                    &[&[0x10, 0, 8, 1], &[0x11, 0, 8, 1], &[0x01, 1, 8, 1], &[0x00, 1, 3, 1]],
                ),
            ),
            // 1 slot: a second datagram evicts the first.
            (
                "0done-1refused-1expired--table-full",
                with([0x1c, 0x0f], &[&[0x10, 0, 8, 1], &[0x14, 0, 8, 1]]),
            ),
            // Threshold of 1 buffer: with 2 held, a new datagram is refused for memory.
            (
                "0done-1refused-2expired--memory",
                with([0x1f, 0x00], &[&[0x10, 0, 8, 1], &[0x10, 1, 8, 1], &[0x12, 0, 8, 1]]),
            ),
            // Probation (bit 0x20), threshold of 2 buffers: a third datagram evicts the oldest.
            (
                "0done-1refused-2expired--probation-evicts",
                with([0x1f, 0x21], &[&[0x10, 0, 8, 1], &[0x12, 0, 8, 1], &[0x16, 0, 8, 1]]),
            ),
            // 2 fragments at most: the third takes the datagram.
            (
                "0done-3refused-0expired--too-many-fragments",
                with([0x13, 0x0f], &[&[0x10, 0, 8, 1], &[0x10, 1, 8, 1], &[0x10, 2, 8, 1]]),
            ),
            // IPv6 first fragment whose Destination Options header runs past its data.
            (
                "0done-1refused-0expired--v6-incomplete-chain",
                with(roomy, &[&[0x31, 0, 8, 0x11]]),
            ),
            (
                "0done-0refused-0expired--raw-not-a-fragment",
                with(roomy, &[&[0xf0, 4, 1, 2, 3, 4]]),
            ),
        ]
    }

    /// Inputs of the `gre` target (see [`gre_frames`]), named `<outcomes joined by +>--<what>`.
    pub(crate) fn gre_corpus() -> Vec<(&'static str, Vec<u8>)> {
        // A frame: header byte, then per layer a flags byte (tunnel bits 0-1; C 4, K 8, S 16,
        // bad checksum 32, wrong key 64, Ethernet inside 128) and 4 sequence bytes.
        let frame = |h: u8, layers: &[(u8, u32)], tail: &[u8]| {
            let mut v = vec![h];
            for (f, seq) in layers {
                v.push(*f);
                v.extend_from_slice(&seq.to_be_bytes());
            }
            v.extend_from_slice(tail);
            v
        };
        let seq6 = |s| (0x1a, s);
        vec![
            ("echo_reply--plain4", frame(0x00, &[(0x00, 0)], &[])),
            ("echo_reply--plain4-vlan", frame(0x10, &[(0x00, 0)], &[])),
            ("echo_reply--keyed4-checksum", frame(0x00, &[(0x0d, 0)], &[])),
            (
                "gre_bad_checksum--keyed4-checksum-missing",
                frame(0x00, &[(0x09, 0)], &[]),
            ),
            (
                "gre_bad_checksum--keyed4-checksum-wrong",
                frame(0x00, &[(0x2d, 0)], &[]),
            ),
            ("gre_unknown_tunnel--keyed4-wrong-key", frame(0x00, &[(0x4d, 0)], &[])),
            ("gre_unknown_tunnel--plain4-with-a-key", frame(0x00, &[(0x08, 0)], &[])),
            ("echo_reply--plain6-echo6", frame(0x04, &[(0x03, 0)], &[])),
            ("echo_reply--plain6-carries-ipv4", frame(0x00, &[(0x03, 0)], &[])),
            ("echo_reply--nested-2", frame(0x01, &[(0x00, 0), (0x03, 0)], &[])),
            (
                "echo_reply--nested-3",
                frame(0x02, &[(0x03, 0), (0x0d, 0), (0x00, 0)], &[]),
            ),
            ("gre_recursion--nested-4", frame(0x03, &[(0x00, 0); 4], &[])),
            (
                "echo_reply+echo_reply+gre_seq_dropped+gre_seq_dropped+echo_reply--seq6-replay-jump",
                [
                    frame(0x04, &[seq6(1)], &[]),
                    frame(0x04, &[seq6(2)], &[]),
                    frame(0x04, &[seq6(2)], &[]),
                    frame(0x04, &[seq6(5000)], &[]),
                    frame(0x04, &[seq6(900)], &[]),
                ]
                .concat(),
            ),
            ("gre_seq_dropped--seq6-without-number", frame(0x04, &[(0x0a, 0)], &[])),
            ("malformed--plain4-truncated", frame(0x20, &[(0x00, 0)], &[20])),
            (
                "malformed--plain4-raw-inner",
                frame(0x0c, &[(0x00, 0)], &[3, 0x45, 0, 0]),
            ),
            (
                "icmp_error--plain4-udp-inner",
                frame(0x08, &[(0x00, 0)], &[8, 0, 9, 0, 9, 0, 8, 0, 0]),
            ),
            ("unhandled--plain4-ethernet-inside", frame(0x00, &[(0x80, 0)], &[])),
            ("malformed--plain4-version-bit", frame(0x40, &[(0x00, 0)], &[34 + 1, 1])),
        ]
    }

    #[test]
    fn reasm_and_gre_corpus_outcomes_are_the_names() {
        for (name, input) in reasm_corpus() {
            assert_eq!(
                reasm_sequence(&input).name(),
                name.split("--").next().unwrap(),
                "{name}"
            );
        }
        for (name, input) in gre_corpus() {
            assert_eq!(
                gre_name(&gre_frames(&input)),
                name.split("--").next().unwrap(),
                "{name}"
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        #[test]
        fn arbitrary_reasm_and_gre_inputs_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = reasm_sequence(&data);
            let _ = gre_frames(&data);
        }
    }

    /// The committed corpora (`fuzz/corpus/{parse,reasm,gre}`) are exactly what `corpus()`,
    /// `reasm_corpus()` and `gre_corpus()` generate; run with `FASTPATH_WRITE_CORPUS=1` to
    /// rewrite them after changing those.
    #[test]
    fn committed_corpus_is_current() {
        for (sub, entries) in [("parse", corpus()), ("reasm", reasm_corpus()), ("gre", gre_corpus())] {
            check_corpus(sub, entries);
        }
    }

    fn check_corpus(sub: &str, entries: Vec<(&'static str, Vec<u8>)>) {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/corpus")
            .join(sub);
        let write = std::env::var_os("FASTPATH_WRITE_CORPUS").is_some();
        if write {
            std::fs::create_dir_all(&dir).unwrap();
        }
        for (name, frame) in entries {
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
