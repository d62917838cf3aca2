use super::sim::v4_fragment;
use super::*;
use crate::buf::HeapBuf;
use crate::pipeline::parse::tests::{udp_bytes, v4_frame, v6_frame};
use crate::pipeline::parse::Parsed;
use crate::wire::{IpProtocol, Toeplitz};
use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr};

const TS: usize = DEFAULT_TRUESIZE;
const A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const ME: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

fn a6() -> Ipv6Addr {
    "2001:db8::2".parse().unwrap()
}
fn me6() -> Ipv6Addr {
    "2001:db8::1".parse().unwrap()
}

/// Records every release, counts outcomes, feeds scripted random numbers.
#[derive(Default)]
struct Io {
    released: Vec<(Fate, Family, Vec<u8>)>,
    fail_alloc: bool,
    randoms: Vec<u32>,
}

impl Io {
    fn counted(&self) -> usize {
        self.released.iter().filter(|r| r.0.counts_outcome()).count()
    }
    fn fates(&self) -> Vec<Fate> {
        self.released.iter().map(|r| r.0).collect()
    }
}

impl ReasmIo<HeapBuf> for Io {
    fn alloc(&mut self, len: usize) -> Option<HeapBuf> {
        (!self.fail_alloc).then(|| HeapBuf::with_room(&[], 128, len))
    }
    fn release(&mut self, r: Released<HeapBuf>) {
        self.released.push((r.fate, r.family, r.buf.data().to_vec()));
    }
    fn random(&mut self) -> u32 {
        self.randoms.pop().unwrap_or(0)
    }
}

fn cfg() -> ReasmConfig {
    ReasmConfig {
        max_datagrams: 64,
        ..ReasmConfig::default()
    }
}

/// The `linux` policy, for the tests of its rules.
fn linux() -> ReasmConfig {
    ReasmConfig {
        policy: Policy::Linux,
        ..cfg()
    }
}

fn put(r: &mut Reassembler<HeapBuf>, io: &mut Io, t: u64, frame: &[u8]) -> Insert<HeapBuf> {
    let meta = FragMeta::from_ethernet(frame).expect("a fragment");
    r.insert(Instant(t), HeapBuf::new(frame), &meta, io)
}

fn complete(i: Insert<HeapBuf>) -> Vec<u8> {
    match i {
        Insert::Complete { datagram, .. } => {
            // Marked, so that a worker re-cuts rather than answers it too big.
            assert!(datagram.reassembled());
            datagram.data().to_vec()
        }
        other => panic!("not complete: {other:?}"),
    }
}

fn held(i: Insert<HeapBuf>) {
    assert!(matches!(i, Insert::Held), "{i:?}");
}

fn dropped(i: Insert<HeapBuf>) -> (Reason, usize) {
    match i {
        Insert::Dropped { reason, fragments } => (reason, fragments),
        other => panic!("not dropped: {other:?}"),
    }
}

/// v4 fragments of a 24-byte datagram 0, 1, ..., 23 cut at 8 and 16.
fn three_v4(ident: u16) -> [Vec<u8>; 3] {
    let d: Vec<u8> = (0..24).collect();
    [
        v4_fragment(A, ME, ident, 0, true, &d[..8]),
        v4_fragment(A, ME, ident, 8, true, &d[8..16]),
        v4_fragment(A, ME, ident, 16, false, &d[16..]),
    ]
}

const GOLDEN_V4: [u8; 14 + 20 + 24] = [
    2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00, // Ethernet
    0x45, 0x00, 0x00, 0x2c, 0x1c, 0x46, 0x00, 0x00, 0x40, 0x11, 0xda, 0x77, 192, 0, 2, 2, 192, 0, 2, 1, // IPv4
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23,
];

#[test]
fn golden_v4_in_order_reverse_and_mixed() {
    for order in [[0, 1, 2], [2, 1, 0], [1, 2, 0], [2, 0, 1]] {
        let mut r = Reassembler::new(cfg());
        let mut io = Io::default();
        let f = three_v4(0x1c46);
        held(put(&mut r, &mut io, 0, &f[order[0]]));
        held(put(&mut r, &mut io, 1, &f[order[1]]));
        assert_eq!(r.held_fragments(), 2);
        assert_eq!(r.memory(), 2 * TS);
        let out = complete(put(&mut r, &mut io, 2, &f[order[2]]));
        assert_eq!(out, GOLDEN_V4, "order {order:?}");
        // Released in offset order; the completing fragment is absorbed.
        let want: Vec<_> = (0..3)
            .map(|i| {
                if i == order[2] {
                    Fate::Absorbed
                } else {
                    Fate::Reassembled
                }
            })
            .collect();
        assert_eq!(io.fates(), want, "order {order:?}");
        assert_eq!(r.held_fragments(), 0);
        assert_eq!(r.memory(), 0);
        assert_eq!(r.datagrams(), 0);
        assert_eq!(r.stats().completed, [1, 0]);
        assert_eq!(r.stats().reassembled_fragments, [3, 0]);
        let ip = crate::wire::Ipv4Packet::new_checked(&out[14..]).unwrap();
        assert!(ip.verify_checksum() && !ip.is_fragment());
    }
}

/// Ethernet + IPv6 + Fragment header (next header UDP) + data.
fn v6_frag(ident: u32, offset: u16, more: bool, data: &[u8]) -> Vec<u8> {
    let mut fh = vec![17, 0];
    fh.extend_from_slice(&(offset | more as u16).to_be_bytes());
    fh.extend_from_slice(&ident.to_be_bytes());
    v6_frame(a6(), me6(), IpProtocol::IPV6_FRAG, &fh, 64, data)
}

#[rustfmt::skip]
const GOLDEN_V6: [u8; 14 + 40 + 16] = [
    2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x86, 0xdd, // Ethernet
    0x60, 0, 0, 0, 0x00, 0x10, 17, 64, // version, payload length 16, next header UDP, hop limit
    0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2,
    0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
    0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf,
];

#[test]
fn golden_v6_fragment_header_removed() {
    let d: Vec<u8> = (0xa0..0xb0).collect();
    // The first fragment must hold the UDP header (RFC 7112): its 8 bytes are the first data.
    let f0 = v6_frag(0x1234_5678, 0, true, &d[..8]);
    let f1 = v6_frag(0x1234_5678, 8, false, &d[8..]);
    let mut r = Reassembler::new(cfg());
    let mut io = Io::default();
    held(put(&mut r, &mut io, 0, &f1));
    assert_eq!(complete(put(&mut r, &mut io, 0, &f0)), GOLDEN_V6);
    assert_eq!(r.stats().completed, [0, 1]);
    assert_eq!(io.released.iter().map(|r| r.1).collect::<Vec<_>>(), [Family::V6; 2]);
}

#[test]
fn v6_per_fragment_headers_kept_and_next_header_fixed() {
    // Hop-by-Hop (8 bytes, PadN) then the Fragment header.
    let hbh = [44u8, 0, 1, 4, 0, 0, 0, 0];
    let d = udp_bytes(1000, 7, &[0x55; 16]); // 24 bytes
    let frag = |off: u16, more: bool, data: &[u8]| {
        let mut e = hbh.to_vec();
        e.extend_from_slice(&[17, 0]);
        e.extend_from_slice(&(off | more as u16).to_be_bytes());
        e.extend_from_slice(&9u32.to_be_bytes());
        v6_frame(a6(), me6(), IpProtocol::HOP_BY_HOP, &e, 64, data)
    };
    let mut r = Reassembler::new(cfg());
    let mut io = Io::default();
    held(put(&mut r, &mut io, 0, &frag(16, false, &d[16..])));
    held(put(&mut r, &mut io, 0, &frag(0, true, &d[..8])));
    let out = complete(put(&mut r, &mut io, 0, &frag(8, true, &d[8..16])));
    let mut hbh_udp = hbh;
    hbh_udp[0] = 17;
    assert_eq!(out, v6_frame(a6(), me6(), IpProtocol::HOP_BY_HOP, &hbh_udp, 64, &d));
}

#[test]
fn vlan_tags_are_kept() {
    let tag = |v: &[u8]| {
        let mut t = v[..12].to_vec();
        t.extend_from_slice(&[0x81, 0x00, 0x00, 0x2a]);
        t.extend_from_slice(&v[12..]);
        t
    };
    let f = three_v4(0x1c46);
    let mut r = Reassembler::new(cfg());
    let mut io = Io::default();
    held(put(&mut r, &mut io, 0, &tag(&f[2])));
    held(put(&mut r, &mut io, 0, &tag(&f[0])));
    assert_eq!(complete(put(&mut r, &mut io, 0, &tag(&f[1]))), tag(&GOLDEN_V4));
}

#[test]
fn exact_duplicate_dropped_alone_and_different_bytes_are_an_overlap() {
    let f = three_v4(0x1c46);
    let mut r = Reassembler::new(cfg());
    let mut io = Io::default();
    held(put(&mut r, &mut io, 0, &f[0]));
    assert_eq!(dropped(put(&mut r, &mut io, 0, &f[0])), (Reason::Duplicate, 1));
    held(put(&mut r, &mut io, 0, &f[2]));
    assert_eq!(dropped(put(&mut r, &mut io, 0, &f[2])), (Reason::Duplicate, 1));
    assert_eq!(complete(put(&mut r, &mut io, 0, &f[1])), GOLDEN_V4);
    assert_eq!(r.stats().refused[0][Reason::Duplicate.index()], 2);

    // Same range, other bytes: RFC 5722 treats it as an overlap.
    let mut r = Reassembler::new(cfg());
    let mut io = Io::default();
    held(put(&mut r, &mut io, 0, &f[0]));
    held(put(&mut r, &mut io, 0, &f[2]));
    let evil = v4_fragment(A, ME, 0x1c46, 0, true, &[9; 8]);
    assert_eq!(dropped(put(&mut r, &mut io, 0, &evil)), (Reason::Overlap, 3));
    // Same range and bytes but MF flipped: inconsistent with what was held, also dropped whole.
    let mut r = Reassembler::new(cfg());
    held(put(&mut r, &mut io, 0, &f[1]));
    let flipped = v4_fragment(A, ME, 0x1c46, 8, false, &(8..16).collect::<Vec<u8>>());
    assert_eq!(dropped(put(&mut r, &mut io, 0, &flipped)), (Reason::Overlap, 2));
}

#[test]
fn overlap_drops_the_whole_datagram_and_the_fragments_not_yet_received() {
    let f = three_v4(2);
    let mut r = Reassembler::new(cfg());
    let mut io = Io::default();
    held(put(&mut r, &mut io, 0, &f[0]));
    held(put(&mut r, &mut io, 0, &f[2]));
    // Offset 8, 16 bytes: runs into the last fragment.
    let over = v4_fragment(A, ME, 2, 8, true, &[7; 16]);
    assert_eq!(dropped(put(&mut r, &mut io, 1, &over)), (Reason::Overlap, 3));
    assert_eq!(r.memory(), 0);
    assert_eq!(r.held_fragments(), 0);
    // The missing fragment arrives later: discarded too (RFC 5722 §4), it starts nothing.
    assert_eq!(dropped(put(&mut r, &mut io, 2, &f[1])), (Reason::Overlap, 1));
    assert_eq!(r.held_fragments(), 0);
    assert_eq!(r.stats().refused[0][Reason::Overlap.index()], 4);
    // Until the dead datagram's deadline: then the key is free again, and the tombstone's end
    // counts no timeout.
    let t = r.next_deadline().unwrap().0;
    assert_eq!(r.expire(Instant(t), 10, &mut io), 1);
    assert_eq!(r.stats().timeouts, [0, 0]);
    assert_eq!(r.datagrams(), 0);
    held(put(&mut r, &mut io, t + 1, &f[1]));
    // Overlap with the previous neighbour.
    let over = v4_fragment(A, ME, 2, 0, true, &[7; 16]);
    assert_eq!(dropped(put(&mut r, &mut io, t + 1, &over)), (Reason::Overlap, 2));
}

#[test]
fn last_fragment_fixes_the_length() {
    let f = three_v4(3);
    let mut io = Io::default();
    // A second last fragment with another end.
    let mut r = Reassembler::new(cfg());
    held(put(&mut r, &mut io, 0, &f[2]));
    let other_last = v4_fragment(A, ME, 3, 32, false, &[1; 8]);
    assert_eq!(dropped(put(&mut r, &mut io, 0, &other_last)), (Reason::Inconsistent, 2));
    // A fragment past the end.
    let mut r = Reassembler::new(cfg());
    held(put(&mut r, &mut io, 0, &f[2]));
    let past = v4_fragment(A, ME, 3, 24, true, &[1; 8]);
    assert_eq!(dropped(put(&mut r, &mut io, 0, &past)), (Reason::Inconsistent, 2));
    // A last fragment before data already held.
    let mut r = Reassembler::new(cfg());
    held(put(&mut r, &mut io, 0, &past));
    assert_eq!(dropped(put(&mut r, &mut io, 0, &f[2])), (Reason::Inconsistent, 2));
}

#[test]
fn tiny_and_too_big_fragments_are_dropped_alone() {
    let mut r = Reassembler::new(cfg());
    let mut io = Io::default();
    let f = three_v4(4);
    held(put(&mut r, &mut io, 0, &f[0]));
    // Non-last, 12 bytes: not a multiple of 8.
    let odd = v4_fragment(A, ME, 4, 8, true, &[0; 12]);
    assert_eq!(dropped(put(&mut r, &mut io, 0, &odd)), (Reason::Tiny, 1));
    // No data at all.
    let empty = v4_fragment(A, ME, 4, 8, true, &[]);
    assert_eq!(dropped(put(&mut r, &mut io, 0, &empty)), (Reason::Tiny, 1));
    // A last fragment may be any length.
    held(put(
        &mut r,
        &mut io,
        0,
        &v4_fragment(A, ME, 4, 16, false, &[16, 17, 18]),
    ));
    // Ends past 65535 - 20: the fragment alone (RFC 791 total length).
    let big = v4_fragment(A, ME, 4, 65512, true, &[0; 8]);
    assert_eq!(dropped(put(&mut r, &mut io, 0, &big)), (Reason::TooBig, 1));
    let edge = v4_fragment(A, ME, 5, 65504, false, &[0; 11]); // 20 + 65515 = 65535: fits
    held(put(&mut r, &mut io, 0, &edge));
    assert_eq!(r.held_fragments(), 3);
    // IPv6: the payload length of the result would pass 65535.
    let big6 = v6_frag(1, 65528, false, &[0; 8]);
    assert_eq!(dropped(put(&mut r, &mut io, 0, &big6)), (Reason::TooBig, 1));
    let edge6 = v6_frag(1, 65528, false, &[0; 7]);
    held(put(&mut r, &mut io, 0, &edge6));
    assert_eq!(r.stats().refused[0][Reason::Tiny.index()], 2);
    assert_eq!(r.stats().refused[0][Reason::TooBig.index()], 1);
    assert_eq!(r.stats().refused[1][Reason::TooBig.index()], 1);
}

#[test]
fn rfc7112_first_fragment_needs_the_whole_header_chain() {
    let mut r = Reassembler::new(cfg());
    let mut io = Io::default();
    let fh = |nh: u8, off: u16, more: bool| {
        let mut v = vec![nh, 0];
        v.extend_from_slice(&(off | more as u16).to_be_bytes());
        v.extend_from_slice(&7u32.to_be_bytes());
        v
    };
    // Destination Options (8 bytes, next header UDP) and no UDP header after it.
    let mut ext = fh(60, 0, true);
    ext.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]);
    let f = v6_frame(a6(), me6(), IpProtocol::IPV6_FRAG, &ext, 64, &[]);
    let m = FragMeta::from_ethernet(&f).unwrap();
    assert!(!m.chain_complete);
    assert_eq!(dropped(put(&mut r, &mut io, 0, &f)), (Reason::IncompleteChain, 1));
    // A Destination Options header that claims 16 bytes when 8 are there: the parser refuses it
    // as truncated; `FragMeta` still reads it, as incomplete.
    let mut ext = fh(60, 0, true);
    ext.extend_from_slice(&[17, 1, 1, 4, 0, 0, 0, 0]);
    let f = v6_frame(a6(), me6(), IpProtocol::IPV6_FRAG, &ext, 64, &[]);
    assert!(Parsed::parse(&f, &Toeplitz::default(), None).is_err());
    assert_eq!(dropped(put(&mut r, &mut io, 0, &f)), (Reason::IncompleteChain, 1));
    // TCP needs 20 bytes: 16 are not enough, 24 are.
    let f = v6_frame(a6(), me6(), IpProtocol::IPV6_FRAG, &fh(6, 0, true), 64, &[0; 16]);
    assert_eq!(dropped(put(&mut r, &mut io, 0, &f)), (Reason::IncompleteChain, 1));
    let f = v6_frame(a6(), me6(), IpProtocol::IPV6_FRAG, &fh(6, 0, true), 64, &[0; 24]);
    held(put(&mut r, &mut io, 0, &f));
    // Later fragments carry no chain.
    let f = v6_frame(a6(), me6(), IpProtocol::IPV6_FRAG, &fh(6, 64, true), 64, &[0; 8]);
    held(put(&mut r, &mut io, 0, &f));
    assert_eq!(r.stats().refused[1][Reason::IncompleteChain.index()], 3);
}

#[test]
fn atomic_fragments_and_whole_packets_are_not_fragments() {
    let atomic = v6_frag(1, 0, false, &[0; 8]);
    assert_eq!(FragMeta::from_ethernet(&atomic), None);
    let whole = v4_frame(A, ME, IpProtocol::UDP, &[], 0, &udp_bytes(1, 2, b"x"));
    assert_eq!(FragMeta::from_ethernet(&whole), None);
}

#[test]
fn timeouts_scale_with_usage() {
    let c = ReasmConfig {
        high_thresh_bytes: 10 * TS,
        timeout_ns: 1_000_000,
        ..linux()
    };
    let mut r = Reassembler::new(c.clone());
    let mut io = Io::default();
    assert_eq!(r.current_timeout_ns(), 1_000_000);
    // Datagram 0 at usage 0: full timeout.
    held(put(&mut r, &mut io, 0, &three_v4(0)[0]));
    assert_eq!(r.next_deadline(), Some(Instant(1_000_000)));
    // Four more datagrams: the fifth is created at usage 4/10 → 0.6 of the timeout.
    for id in 1..5 {
        held(put(&mut r, &mut io, 0, &three_v4(id)[0]));
    }
    assert_eq!(r.memory(), 5 * TS);
    assert_eq!(r.current_timeout_ns(), 500_000);
    held(put(&mut r, &mut io, 10, &three_v4(5)[0]));
    // Created at 10 with 0.5 ms: expires first, at exactly 500_010.
    assert_eq!(r.next_deadline(), Some(Instant(500_010)));
    assert_eq!(r.expire(Instant(500_009), 10, &mut io), 0);
    assert_eq!(r.expire(Instant(500_010), 10, &mut io), 1);
    assert_eq!(io.fates(), [Fate::TimedOut { first: true }]);
    assert_eq!(r.stats().timeouts, [1, 0]);
    // With the fixed timeout every datagram gets the full timeout.
    let mut r = Reassembler::new(ReasmConfig {
        pressure_scaled_timeout: false,
        ..c
    });
    for id in 0..9 {
        held(put(&mut r, &mut io, id as u64, &three_v4(id)[0]));
    }
    assert_eq!(r.current_timeout_ns(), 1_000_000);
    assert_eq!(r.next_deadline(), Some(Instant(1_000_000)));
}

#[test]
fn new_datagrams_refused_above_the_threshold_and_memory_capped() {
    let c = ReasmConfig {
        high_thresh_bytes: 3 * TS + TS / 2,
        max_fragments: 4,
        ..linux()
    };
    let mut r = Reassembler::new(c);
    let mut io = Io::default();
    // Four datagrams: usage 0, 1, 2, 3 buffers when created (3 is not above the threshold).
    for id in 0..4 {
        held(put(&mut r, &mut io, 0, &three_v4(id)[0]));
    }
    assert_eq!(r.memory(), 4 * TS);
    assert_eq!(r.current_timeout_ns(), 0);
    assert_eq!(
        r.next_deadline(),
        Some(Instant(DEFAULT_TIMEOUT_NS / 7)),
        "the last at 0.5/3.5"
    );
    // Above the threshold: a new datagram is refused, alone.
    assert_eq!(dropped(put(&mut r, &mut io, 0, &three_v4(9)[0])), (Reason::Memory, 1));
    assert_eq!(r.datagrams(), 4);
    // A datagram in progress may still grow, and complete.
    held(put(&mut r, &mut io, 0, &three_v4(0)[1]));
    assert_eq!(complete(put(&mut r, &mut io, 0, &three_v4(0)[2])).len(), 58);
    // The hard limit: threshold + max_fragments (4) buffers = 7.5 buffers.
    assert_eq!(r.memory_limit(), 7 * TS + TS / 2);
    held(put(&mut r, &mut io, 0, &three_v4(1)[1]));
    held(put(&mut r, &mut io, 0, &three_v4(2)[1]));
    held(put(&mut r, &mut io, 0, &three_v4(3)[1]));
    held(put(&mut r, &mut io, 0, &v4_fragment(A, ME, 1, 16, true, &[0; 8])));
    assert_eq!(r.memory(), 7 * TS);
    // One more would pass it: that datagram can never complete, so it goes whole.
    assert_eq!(dropped(put(&mut r, &mut io, 0, &three_v4(2)[2])), (Reason::Memory, 3));
    assert!(r.memory() <= r.memory_limit());
    assert_eq!(r.stats().refused[0][Reason::Memory.index()], 4);
}

#[test]
fn per_source_cap_evicts_one_of_that_sources_datagrams_at_random() {
    let c = ReasmConfig {
        max_per_source: 3,
        ..cfg()
    };
    let mut r = Reassembler::new(c);
    let mut io = Io::default();
    let b = Ipv4Addr::new(198, 51, 100, 9);
    for id in 0..3 {
        held(put(&mut r, &mut io, 0, &three_v4(id)[0]));
    }
    held(put(&mut r, &mut io, 0, &v4_fragment(b, ME, 0, 0, true, &[0; 8])));
    // The list is newest first (ids 2, 1, 0): random 1 picks id 1.
    io.randoms = vec![1];
    held(put(&mut r, &mut io, 0, &three_v4(7)[0]));
    assert_eq!(io.fates(), [Fate::Refused(Reason::PerSource)]);
    assert_eq!(&io.released[0].2[18..20], &1u16.to_be_bytes(), "ident 1 evicted");
    assert_eq!(r.datagrams(), 4);
    // The evicted datagram's next fragment starts afresh; the others are intact.
    for id in [0, 2] {
        held(put(&mut r, &mut io, 0, &three_v4(id)[1]));
    }
    io.randoms = vec![5]; // 5 % 3 = 2: the oldest of (0, 2, 7 → list 7, 2, 0)... still A's
    held(put(&mut r, &mut io, 0, &three_v4(8)[0]));
    let evicted = &io.released[1];
    assert_eq!(evicted.0, Fate::Refused(Reason::PerSource));
    assert_eq!(&evicted.2[26..30], &A.octets(), "never another source's");
    // B's datagram was never touched.
    assert_eq!(
        complete(put(&mut r, &mut io, 0, &v4_fragment(b, ME, 0, 8, false, &[1; 8]))).len(),
        14 + 20 + 16
    );
    assert_eq!(r.stats().refused[0][Reason::PerSource.index()], 3);
}

#[test]
fn full_table_evicts_the_earliest_deadline() {
    let c = ReasmConfig {
        max_datagrams: 4,
        ..linux()
    };
    let mut r = Reassembler::new(c);
    let mut io = Io::default();
    for id in 0..4 {
        held(put(&mut r, &mut io, 100 - id as u64 * 10, &three_v4(id)[0]));
    }
    // Datagram 3 was created at the earliest time (70) with the longest... its deadline is the
    // earliest: usage grows, but 70 + 30 s × (1 - 3/1820) is still before the others'.
    let victim_deadline = r.next_deadline().unwrap();
    held(put(&mut r, &mut io, 200, &three_v4(9)[0]));
    assert_eq!(io.fates(), [Fate::Refused(Reason::TableFull)]);
    assert_eq!(&io.released[0].2[18..20], &3u16.to_be_bytes());
    assert!(r.next_deadline().unwrap() > victim_deadline);
    assert_eq!(r.datagrams(), 4);
}

#[test]
fn too_many_fragments_drops_the_datagram() {
    let c = ReasmConfig {
        max_fragments: 3,
        ..cfg()
    };
    let mut r = Reassembler::new(c);
    let mut io = Io::default();
    for i in 0..3u16 {
        held(put(&mut r, &mut io, 0, &v4_fragment(A, ME, 1, i * 8, true, &[0; 8])));
    }
    let fourth = v4_fragment(A, ME, 1, 24, false, &[0; 8]);
    assert_eq!(dropped(put(&mut r, &mut io, 0, &fourth)), (Reason::TooManyFragments, 4));
    assert_eq!(r.held_fragments(), 0);
}

#[test]
fn no_buffer_at_completion_drops_the_datagram() {
    let mut r = Reassembler::new(cfg());
    let mut io = Io::default();
    let f = three_v4(1);
    held(put(&mut r, &mut io, 0, &f[0]));
    held(put(&mut r, &mut io, 0, &f[1]));
    io.fail_alloc = true;
    assert_eq!(dropped(put(&mut r, &mut io, 0, &f[2])), (Reason::NoBuffer, 3));
    assert_eq!(io.counted(), 3);
    assert_eq!(r.memory(), 0);
}

#[test]
fn expiry_is_bounded_by_the_budget_and_quotes_the_first_fragment() {
    let c = ReasmConfig {
        timeout_ns: 1000,
        pressure_scaled_timeout: false,
        ..cfg()
    };
    let mut r = Reassembler::new(c);
    let mut io = Io::default();
    for id in 0..10 {
        held(put(&mut r, &mut io, id as u64, &three_v4(id)[2]));
        held(put(&mut r, &mut io, id as u64, &three_v4(id)[1]));
    }
    held(put(&mut r, &mut io, 50, &three_v4(20)[0]));
    held(put(&mut r, &mut io, 50, &three_v4(20)[2]));
    assert_eq!(r.expire(Instant(999), 100, &mut io), 0);
    assert_eq!(r.expire(Instant(2000), 3, &mut io), 3);
    assert_eq!(r.datagrams(), 8);
    assert_eq!(r.expire(Instant(2000), 3, &mut io), 3);
    assert_eq!(r.expire(Instant(2000), 100, &mut io), 5);
    assert_eq!(r.datagrams(), 0);
    assert_eq!(r.stats().timeouts, [11, 0]);
    assert_eq!(r.stats().timed_out_fragments, [22, 0]);
    // Only datagram 20 had its first fragment; it is released first, marked.
    let firsts: Vec<_> = io
        .released
        .iter()
        .filter(|x| x.0 == Fate::TimedOut { first: true })
        .collect();
    assert_eq!(firsts.len(), 1);
    assert_eq!(firsts[0].2, three_v4(20)[0]);
    let pos = io.released.iter().position(|x| x.2 == three_v4(20)[0]).unwrap();
    assert_eq!(io.released[pos + 1].0, Fate::TimedOut { first: false });
    assert_eq!(io.released[pos + 1].2, three_v4(20)[2]);
    assert_eq!(r.memory(), 0);
}

#[test]
fn a_fragment_after_the_deadline_finds_its_datagram_expired() {
    let c = ReasmConfig {
        timeout_ns: 1000,
        ..cfg()
    };
    let mut r = Reassembler::new(c);
    let mut io = Io::default();
    let f = three_v4(1);
    held(put(&mut r, &mut io, 0, &f[0]));
    held(put(&mut r, &mut io, 1, &f[1]));
    // No expire call in between: the late fragment must not complete the stale datagram.
    held(put(&mut r, &mut io, 1000, &f[2]));
    assert_eq!(
        io.fates(),
        [Fate::TimedOut { first: true }, Fate::TimedOut { first: false }]
    );
    assert_eq!(r.held_fragments(), 1);
}

#[test]
fn drain_all_hands_back_everything() {
    let mut r = Reassembler::new(cfg());
    let mut io = Io::default();
    for id in 0..5 {
        held(put(&mut r, &mut io, 0, &three_v4(id)[0]));
        held(put(&mut r, &mut io, 0, &three_v4(id)[2]));
    }
    held(put(&mut r, &mut io, 0, &v6_frag(3, 8, false, &[1; 8])));
    assert_eq!(r.drain_all(&mut io), 11);
    assert_eq!(io.fates(), vec![Fate::Drained; 11]);
    assert_eq!((r.memory(), r.held_fragments(), r.datagrams()), (0, 0, 0));
    assert_eq!(r.stats().drained, [10, 1]);
    assert_eq!(r.next_deadline(), None);
    // Usable afterwards.
    let f = three_v4(1);
    held(put(&mut r, &mut io, 0, &f[0]));
    held(put(&mut r, &mut io, 0, &f[1]));
    assert_eq!(complete(put(&mut r, &mut io, 0, &f[2])).len(), GOLDEN_V4.len());
}

#[test]
fn reconfigure_keeps_or_rebuilds() {
    let mut r = Reassembler::new(cfg());
    let mut io = Io::default();
    held(put(&mut r, &mut io, 0, &three_v4(1)[0]));
    r.reconfigure(ReasmConfig { timeout_ns: 5, ..cfg() }, &mut io);
    assert_eq!(r.held_fragments(), 1);
    assert_eq!(r.config().timeout_ns, 5);
    r.reconfigure(
        ReasmConfig {
            max_datagrams: 8,
            ..cfg()
        },
        &mut io,
    );
    assert_eq!(io.fates(), [Fate::Drained]);
    assert_eq!(r.held_fragments(), 0);
    assert_eq!(r.config().max_datagrams, 8);
}

#[test]
fn reason_labels_are_unique_snake_case() {
    let mut names: Vec<_> = Reason::ALL.iter().map(|r| r.label()).collect();
    for (i, r) in Reason::ALL.iter().enumerate() {
        assert_eq!(r.index(), i);
    }
    names.sort();
    names.dedup();
    assert_eq!(names.len(), Reason::COUNT);
    assert!(names
        .iter()
        .all(|n| n.bytes().all(|c| c.is_ascii_lowercase() || c == b'_')));
    assert_eq!(Family::V4.label(), "ipv4");
    assert_eq!(Family::V6.label(), "ipv6");
}

// ---- fragmenter ----

fn alloc(len: usize) -> Option<HeapBuf> {
    Some(HeapBuf::with_room(&[], 128, len))
}

fn frag4(frame: &[u8], mtu: usize) -> Result<Vec<Vec<u8>>, FragError> {
    let mut out = Vec::new();
    fragment_v4(frame, mtu, &mut alloc, &mut |b: HeapBuf| out.push(b.data().to_vec()))?;
    Ok(out)
}

fn frag6(frame: &[u8], mtu: usize, ident: u32) -> Result<Vec<Vec<u8>>, FragError> {
    let mut out = Vec::new();
    fragment_v6(frame, mtu, ident, &mut alloc, &mut |b: HeapBuf| {
        out.push(b.data().to_vec())
    })?;
    Ok(out)
}

#[test]
fn fragment_v4_headers() {
    // Options: a copied one (type 0x94, Router Alert, 4 bytes) and a non-copied one (type 7,
    // Record Route, 7 bytes) then EOL: 12 bytes.
    let opts = [0x94, 4, 0, 0, 7, 7, 4, 0, 0, 0, 0, 0];
    let udp = udp_bytes(1, 7, &(0..200u8).collect::<Vec<_>>());
    let dg = v4_frame(A, ME, IpProtocol::UDP, &opts, 0, &udp);
    let frags = frag4(&dg, 100).unwrap();
    let mut expect_off = 0;
    for (i, f) in frags.iter().enumerate() {
        let p = Parsed::parse(f, &Toeplitz::default(), None).expect("valid, checksum right");
        let fi = p.fragment.unwrap();
        assert!(f.len() - 14 <= 100);
        assert_eq!(fi.offset, expect_off);
        assert_eq!(fi.ident, 0x1234);
        let hl = (f[14] & 0xf) as usize * 4;
        assert_eq!(hl, if i == 0 { 32 } else { 24 }, "only the copied option repeats");
        if i > 0 {
            assert_eq!(&f[34..38], &[0x94, 4, 0, 0]);
        }
        let len = f.len() - 14 - hl;
        if fi.more {
            assert_eq!(len % 8, 0);
        }
        assert_eq!(fi.more, i + 1 < frags.len());
        expect_off += len as u16;
    }
    assert_eq!(expect_off as usize, udp.len());
    // Fits: one unchanged copy.
    assert_eq!(frag4(&dg, 1500).unwrap(), vec![dg.clone()]);
    // DF.
    let df = v4_frame(A, ME, IpProtocol::UDP, &[], 0x4000, &udp);
    assert_eq!(frag4(&df, 100), Err(FragError::DontFragment));
    assert_eq!(frag4(&dg, 36), Err(FragError::MtuTooSmall));
    assert_eq!(frag4(&dg[..20], 100), Err(FragError::Malformed));
    let v6 = v6_frame(a6(), me6(), IpProtocol::UDP, &[], 64, &udp);
    assert_eq!(frag4(&v6, 100), Err(FragError::Malformed));
    let mut none = |_| None::<HeapBuf>;
    assert_eq!(fragment_v4(&dg, 100, &mut none, &mut |_| {}), Err(FragError::NoBuffer));
}

#[test]
fn fragment_v6_headers() {
    let udp = udp_bytes(1, 7, &(0..255u8).cycle().take(3000).collect::<Vec<_>>());
    let hbh = [17u8, 0, 1, 4, 0, 0, 0, 0];
    let dg = v6_frame(a6(), me6(), IpProtocol::HOP_BY_HOP, &hbh, 64, &udp);
    let frags = frag6(&dg, 1280, 0xabcd).unwrap();
    assert_eq!(frags.len(), 3);
    let mut off = 0;
    for (i, f) in frags.iter().enumerate() {
        assert!(f.len() - 14 <= 1280);
        assert_eq!(f[14 + 6], 0, "Hop-by-Hop stays first");
        assert_eq!(f[14 + 40], 44, "it now names the Fragment header");
        let m = FragMeta::from_ethernet(f).unwrap();
        assert_eq!(
            m.key,
            FragKey::V6 {
                src: a6(),
                dst: me6(),
                ident: 0xabcd,
                tunnel: 0
            }
        );
        assert_eq!(m.offset, off);
        assert_eq!(m.more, i < 2);
        assert_eq!(m.frag_next_header, 17);
        assert!(m.chain_complete);
        if m.more {
            assert_eq!(m.data_len() % 8, 0);
        }
        off += m.data_len() as u16;
    }
    assert_eq!(off as usize, udp.len());
    assert_eq!(frag6(&dg, 1500, 1).unwrap().len(), 3);
    let small = v6_frame(a6(), me6(), IpProtocol::UDP, &[], 64, &udp[..100]);
    assert_eq!(frag6(&small, 1280, 1).unwrap(), vec![small.clone()]);
    let already = v6_frag(1, 0, true, &udp[..2000]);
    assert_eq!(frag6(&already, 1280, 1), Err(FragError::AlreadyFragmented));
    assert_eq!(frag6(&dg, 56, 1), Err(FragError::MtuTooSmall));
}

// ---- properties ----

/// Inserts `frames` in order; every fragment but the last must be held, the last completes.
fn reassemble_all(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut r = Reassembler::new(cfg());
    let mut io = Io::default();
    let mut out = None;
    for (i, f) in frames.iter().enumerate() {
        match put(&mut r, &mut io, i as u64, f) {
            Insert::Held => assert!(i + 1 < frames.len()),
            Insert::Complete { datagram, fragments } => {
                assert_eq!(i + 1, frames.len());
                assert_eq!(fragments, frames.len());
                out = Some(datagram.data().to_vec());
            }
            d => panic!("{d:?}"),
        }
    }
    assert_eq!(io.counted(), frames.len() - 1);
    out.expect("completed")
}

fn shuffled(mut v: Vec<Vec<u8>>, seed: u64) -> Vec<Vec<u8>> {
    let mut x = seed | 1;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_permutation_of_v4_fragments_reassembles(
        payload in proptest::collection::vec(any::<u8>(), 1..3000),
        mtu in 68usize..1500,
        seed in any::<u64>(),
    ) {
        let dg = v4_frame(A, ME, IpProtocol::UDP, &[], 0, &udp_bytes(9, 7, &payload));
        let frags = frag4(&dg, mtu).unwrap();
        prop_assume!(frags.len() > 1);
        prop_assert_eq!(reassemble_all(&shuffled(frags, seed)), dg);
    }

    #[test]
    fn any_permutation_of_v6_fragments_reassembles(
        payload in proptest::collection::vec(any::<u8>(), 1..6000),
        mtu in 1280usize..1500,
        with_hbh in any::<bool>(),
        ident in any::<u32>(),
        seed in any::<u64>(),
    ) {
        let udp = udp_bytes(9, 7, &payload);
        let dg = if with_hbh {
            v6_frame(a6(), me6(), IpProtocol::HOP_BY_HOP, &[17, 0, 1, 4, 0, 0, 0, 0], 64, &udp)
        } else {
            v6_frame(a6(), me6(), IpProtocol::UDP, &[], 64, &udp)
        };
        let frags = frag6(&dg, mtu, ident).unwrap();
        prop_assume!(frags.len() > 1);
        prop_assert_eq!(reassemble_all(&shuffled(frags, seed)), dg);
    }

    /// Whatever arrives, every fragment is in exactly one place: held, released with an
    /// outcome, or absorbed into a completed datagram; memory never passes the hard limit.
    #[test]
    fn every_fragment_is_accounted_for(
        ops in proptest::collection::vec((0u16..6, 0u16..8, 0usize..4, any::<bool>(), 0u64..3000), 1..300),
        policy in proptest::sample::select(Policy::ALL.to_vec()),
    ) {
        let c = ReasmConfig {
            policy,
            high_thresh_bytes: 6 * TS,
            timeout_ns: 1000,
            max_fragments: 4,
            max_per_source: 3,
            max_datagrams: 5,
            ..ReasmConfig::default()
        };
        let mut r = Reassembler::new(c);
        let mut io = Io { randoms: (0..1000).collect(), ..Io::default() };
        let mut inserted = 0;
        let mut completions = 0;
        let mut now = 0;
        for (id, slot, src, more, dt) in ops {
            now += dt;
            let _ = r.expire(Instant(now), 2, &mut io);
            let s = Ipv4Addr::new(10, 0, 0, src as u8);
            let len = if more { 8 } else { 5 };
            let f = v4_fragment(s, ME, id, slot * 8, more, &[slot as u8; 8][..len]);
            if FragMeta::from_ethernet(&f).is_none() {
                continue; // offset 0 and MF clear: a whole datagram
            }
            inserted += 1;
            if let Insert::Complete { .. } = put(&mut r, &mut io, now, &f) {
                completions += 1;
            }
            prop_assert_eq!(inserted, io.counted() + completions + r.held_fragments());
            prop_assert!(r.memory() <= r.memory_limit());
            if policy == Policy::Probation {
                prop_assert!(r.memory() <= 6 * TS, "probation never passes high_thresh");
            }
            prop_assert_eq!(r.memory(), r.held_fragments() * TS);
        }
        r.drain_all(&mut io);
        prop_assert_eq!(inserted, io.counted() + completions);
    }
}

// ---- the flood scenario ----

// The sweep over flood sizes is `cargo run --release -p benches --example reasm_flood`.

#[test]
fn flood_simulation_pressure_scaled_keeps_legit_traffic_fixed_collapses() {
    for m in [5.0, 10.0] {
        let probation = sim::simulate_flood(&sim::FloodParams::seed_scenario(m, true).with_policy(Policy::Probation));
        assert_eq!(
            probation.fragments_in, probation.outcomes,
            "every fragment has one outcome"
        );
        assert!(probation.max_memory <= probation.high_thresh, "{m}: {probation:?}");
        assert!(probation.completion_rate() >= 0.99, "probation at {m}x: {probation:?}");
        let scaled = sim::simulate_flood(&sim::FloodParams::seed_scenario(m, true));
        let fixed = sim::simulate_flood(&sim::FloodParams::seed_scenario(m, false));
        for r in [&scaled, &fixed] {
            assert!(r.legit_measured > 2000, "{r:?}");
            assert_eq!(r.fragments_in, r.outcomes, "every fragment has one outcome");
            assert!(r.max_memory <= r.memory_limit);
            assert!(r.max_memory <= r.high_thresh_plus_datagram, "{m}: {r:?}");
        }
        assert!(
            scaled.completion_rate() >= 0.9,
            "pressure-scaled at {m}x: {:.3}",
            scaled.completion_rate()
        );
        assert!(
            fixed.completion_rate() < 0.5,
            "fixed timeout at {m}x: {:.3}",
            fixed.completion_rate()
        );
    }
}

#[test]
fn publish_copies_the_stats_into_the_lcore_block() {
    let mut s = ReasmStats {
        completed: [3, 4],
        timeouts: [5, 6],
        ..Default::default()
    };
    for (f, row) in s.refused.iter_mut().enumerate() {
        for (r, n) in row.iter_mut().enumerate() {
            *n = (100 * f + r) as u64;
        }
    }
    let to = crate::stats::ReasmCounters::default();
    to.memory.set(99);
    s.publish(4096, &to);
    assert_eq!(to.completed.each_ref().map(|c| c.get()), [3, 4]);
    assert_eq!(to.timeouts.each_ref().map(|c| c.get()), [5, 6]);
    for f in 0..2 {
        for r in Reason::ALL {
            assert_eq!(to.refused[f][r.index()].get(), s.refused[f][r.index()], "{f} {r:?}");
        }
    }
    assert_eq!(to.memory.get(), 4096, "memory is set, not added");
    // Published again, the values are copied, not added.
    s.publish(0, &to);
    assert_eq!(to.completed[1].get(), 4);
    assert_eq!(to.memory.get(), 0);
}

// ---- the probation policy ----

/// A probation table with room for `buffers` buffers.
fn probation(buffers: usize) -> ReasmConfig {
    ReasmConfig {
        high_thresh_bytes: buffers * TS,
        max_fragments: 8,
        ..cfg()
    }
}

#[test]
fn probation_is_the_default_and_labels_round_trip() {
    assert_eq!(ReasmConfig::default().policy, Policy::Probation);
    for p in Policy::ALL {
        assert_eq!(Policy::from_label(p.label()), Some(p));
    }
    assert_eq!(Policy::from_label("lru"), None);
}

#[test]
fn probation_evicts_the_oldest_first_fragment_instead_of_refusing() {
    let mut r = Reassembler::new(probation(4));
    let mut io = Io::default();
    for id in 0..4 {
        held(put(&mut r, &mut io, id as u64, &three_v4(id)[0]));
    }
    assert_eq!(r.memory(), 4 * TS);
    // Full: the fifth datagram evicts the oldest (id 0), with the reason `evicted`.
    held(put(&mut r, &mut io, 10, &three_v4(4)[0]));
    assert_eq!(io.fates(), [Fate::Refused(Reason::Evicted)]);
    assert_eq!(&io.released[0].2[18..20], &0u16.to_be_bytes());
    assert_eq!(r.memory(), 4 * TS, "never above high_thresh");
    assert_eq!(r.stats().refused[0][Reason::Evicted.index()], 1);
    // The fixed timeout: no pressure scaling under this policy.
    assert_eq!(r.current_timeout_ns(), DEFAULT_TIMEOUT_NS);
    // The newest completes.
    held(put(&mut r, &mut io, 11, &three_v4(4)[1]));
    assert_eq!(complete(put(&mut r, &mut io, 12, &three_v4(4)[2])).len(), 58);
}

#[test]
fn a_datagram_in_progress_outlives_a_flood_of_first_fragments() {
    // Datagram 0 has two fragments (main); then a flood of first fragments twice the table turns
    // probation over: main's datagram is younger than four times probation's oldest, so it stays.
    let mut r = Reassembler::new(probation(6));
    let mut io = Io::default();
    held(put(&mut r, &mut io, 100, &three_v4(0)[0]));
    held(put(&mut r, &mut io, 100, &three_v4(0)[1]));
    for (i, id) in (100..112).enumerate() {
        held(put(&mut r, &mut io, 101 + i as u64, &three_v4(id)[0]));
        assert!(r.memory() <= 6 * TS);
    }
    assert!(io.fates().iter().all(|f| *f == Fate::Refused(Reason::Evicted)));
    assert_eq!(io.released.len(), 12 + 2 - 6);
    assert!(
        io.released.iter().all(|r| r.2[18..20] != 0u16.to_be_bytes()),
        "datagram 0 kept"
    );
    assert_eq!(complete(put(&mut r, &mut io, 113, &three_v4(0)[2])).len(), 58);
}

#[test]
fn a_datagram_that_stays_in_main_too_long_is_evicted_before_newcomers() {
    // FragmentSmack's shape: datagram 0 keeps getting fragments and never completes. Newcomers
    // are evicted first while it is young; once it has been in main more than four times as many
    // arrivals as probation's oldest has waited, it is the victim, whatever it was fed meanwhile.
    let mut r = Reassembler::new(probation(5));
    let mut io = Io::default();
    held(put(&mut r, &mut io, 0, &v4_fragment(A, ME, 0, 0, true, &[0; 8]))); // arrival 1
    held(put(&mut r, &mut io, 0, &v4_fragment(A, ME, 0, 8, true, &[0; 8]))); // 2: in main
    held(put(&mut r, &mut io, 0, &three_v4(100)[0])); // 3
    held(put(&mut r, &mut io, 0, &three_v4(101)[0])); // 4: full
    let mut evicted = vec![];
    let mut offset = 16;
    for (i, id) in (102..120).enumerate() {
        if i % 3 == 2 {
            // Fed: progress buys no time.
            held(put(&mut r, &mut io, 0, &v4_fragment(A, ME, 0, offset, true, &[0; 8])));
            offset += 8;
        }
        held(put(&mut r, &mut io, 0, &three_v4(id)[0]));
        assert!(r.memory() <= 5 * TS);
        let ident = |x: &(Fate, Family, Vec<u8>)| u16::from_be_bytes([x.2[18], x.2[19]]);
        evicted = io.released.iter().map(ident).collect::<Vec<_>>();
        if evicted.contains(&0) {
            break;
        }
    }
    // Probation's oldest went first, then datagram 0 as a whole (all its fragments at once).
    let first0 = evicted.iter().position(|&x| x == 0).expect("datagram 0 evicted");
    assert!(first0 >= 2, "newcomers before it: {evicted:?}");
    assert!(evicted[..first0].iter().all(|&x| x >= 100), "{evicted:?}");
    assert!(evicted[first0..].iter().all(|&x| x == 0), "{evicted:?}");
    assert!(evicted.len() - first0 >= 3, "with what it was fed: {evicted:?}");
    assert!(io.fates().iter().all(|f| *f == Fate::Refused(Reason::Evicted)));
}

#[test]
fn probation_makes_room_for_a_growing_datagram_and_never_passes_the_threshold() {
    let mut r = Reassembler::new(probation(3));
    let mut io = Io::default();
    held(put(&mut r, &mut io, 0, &three_v4(1)[0]));
    held(put(&mut r, &mut io, 1, &three_v4(0)[0]));
    held(put(&mut r, &mut io, 2, &three_v4(2)[0]));
    // Datagram 0's second fragment needs a buffer: probation's oldest (id 1) goes.
    held(put(&mut r, &mut io, 3, &three_v4(0)[1]));
    assert_eq!(io.fates(), [Fate::Refused(Reason::Evicted)]);
    assert_eq!(&io.released[0].2[18..20], &1u16.to_be_bytes());
    assert_eq!(complete(put(&mut r, &mut io, 4, &three_v4(0)[2])).len(), 58);
    // A datagram alone in a table too small for it is dropped whole, as `memory`.
    let mut r = Reassembler::new(probation(2));
    let mut io = Io::default();
    held(put(&mut r, &mut io, 0, &three_v4(0)[0]));
    held(put(&mut r, &mut io, 0, &three_v4(0)[1]));
    assert_eq!(dropped(put(&mut r, &mut io, 0, &three_v4(0)[2])), (Reason::Memory, 3));
    assert_eq!(r.memory(), 0);
}

#[test]
fn probation_reuses_slots_and_clears_tombstones() {
    // Slots bind before memory: a full table evicts probation's oldest as `table_full`.
    let c = ReasmConfig {
        max_datagrams: 2,
        ..probation(100)
    };
    let mut r = Reassembler::new(c);
    let mut io = Io::default();
    held(put(&mut r, &mut io, 0, &three_v4(0)[0]));
    // Datagram 1 dies of an overlap: a tombstone (no buffer, a slot) until its deadline.
    held(put(&mut r, &mut io, 1, &three_v4(1)[0]));
    let (reason, _) = dropped(put(&mut r, &mut io, 1, &v4_fragment(A, ME, 1, 0, true, &[9; 8])));
    assert_eq!(reason, Reason::Overlap);
    let before = io.counted();
    held(put(&mut r, &mut io, 2, &three_v4(2)[0]));
    held(put(&mut r, &mut io, 3, &three_v4(3)[0]));
    assert_eq!(r.datagrams(), 2);
    assert_eq!(
        io.counted() - before,
        1,
        "the tombstone ends quietly, datagram 0 counts one"
    );
    assert_eq!(r.stats().refused[0][Reason::TableFull.index()], 1);
}

#[test]
fn line_rate_floods_keep_legitimate_datagrams_completing_under_probation_only() {
    use sim::{FloodKind, FloodParams};
    let cap = FloodParams::line_rate(FloodKind::FirstFragments, 1.0, 0).capacity() as u32;
    let smack = FloodKind::Smack {
        datagrams: 600,
        fragments: 8,
    };
    for (name, mut p) in [
        ("9x", FloodParams::line_rate(FloodKind::FirstFragments, 10e6, 9 * cap)),
        (
            "100x",
            FloodParams::line_rate(FloodKind::FirstFragments, 10e6, 100 * cap),
        ),
        ("FragmentSmack", FloodParams::line_rate(smack, 10e6, 0)),
    ] {
        // A tenth of the benchmark's simulated time keeps the test quick unoptimized.
        p.duration_ns /= 10;
        p.warmup_ns /= 10;
        p.legit_per_sec *= 10.0;
        let pr = sim::simulate_flood(&p.clone().with_policy(Policy::Probation));
        let lx = sim::simulate_flood(&p.with_policy(Policy::Linux));
        for r in [&pr, &lx] {
            assert!(r.legit_measured > 1000, "{name}: {r:?}");
            assert_eq!(r.fragments_in, r.outcomes, "{name}: every fragment has one outcome");
        }
        assert!(pr.max_memory <= pr.high_thresh, "{name}: {pr:?}");
        assert!(
            pr.completion_rate() >= 0.9,
            "{name} probation: {:.3}",
            pr.completion_rate()
        );
        assert!(lx.completion_rate() < 0.1, "{name} linux: {:.3}", lx.completion_rate());
    }
}

#[test]
fn probation_treats_ipv6_like_ipv4_and_shares_the_table() {
    // Three IPv6 first fragments and one IPv4 datagram in progress fill a 4-buffer table; the
    // next IPv6 datagram evicts the oldest IPv6 first fragment (probation), never the IPv4
    // datagram in main, and the golden IPv6 datagram still completes.
    let mut r = Reassembler::new(probation(4));
    let mut io = Io::default();
    held(put(&mut r, &mut io, 0, &three_v4(7)[0]));
    held(put(&mut r, &mut io, 1, &three_v4(7)[1]));
    held(put(&mut r, &mut io, 2, &v6_frag(1, 0, true, &[1; 8])));
    held(put(&mut r, &mut io, 3, &v6_frag(2, 0, true, &[2; 8])));
    let d: Vec<u8> = (0xa0..0xb0).collect();
    held(put(&mut r, &mut io, 4, &v6_frag(0x1234_5678, 0, true, &d[..8])));
    assert_eq!(io.released.len(), 1);
    assert_eq!(io.released[0].0, Fate::Refused(Reason::Evicted));
    assert_eq!(io.released[0].1, Family::V6);
    assert_eq!(r.stats().refused[1][Reason::Evicted.index()], 1);
    // Completing the golden datagram needs a buffer: the next oldest first fragment goes.
    let out = complete(put(&mut r, &mut io, 5, &v6_frag(0x1234_5678, 8, false, &d[8..])));
    assert_eq!(out, GOLDEN_V6);
    assert_eq!(io.released[1].0, Fate::Refused(Reason::Evicted));
    assert_eq!(complete(put(&mut r, &mut io, 6, &three_v4(7)[2])).len(), 58);
    assert!(r.memory() <= 4 * TS);
}
