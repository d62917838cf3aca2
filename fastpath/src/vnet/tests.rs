use super::*;
use crate::buf::HeapBuf;
use crate::wire::{Ipv4Packet, Ipv6Packet, TcpPacket, UdpPacket};

const A4: [u8; 4] = [192, 0, 2, 1];
const B4: [u8; 4] = [198, 51, 100, 7];
const A6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const B6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

/// A TCP segment's frame, its checksums right, built here byte by byte.
#[derive(Clone)]
struct Spec {
    v6: bool,
    seq: u32,
    id: u16,
    flags: u8,
    payload: Vec<u8>,
    ts: Option<u32>,
    sport: u16,
}

impl Spec {
    fn new(v6: bool, seq: u32, id: u16, payload: Vec<u8>) -> Spec {
        Spec {
            v6,
            seq,
            id,
            flags: ACK,
            payload,
            ts: Some(7),
            sport: 40000,
        }
    }

    fn frame(&self) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
        f.extend_from_slice(if self.v6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
        let mut tcp = Vec::new();
        tcp.extend_from_slice(&self.sport.to_be_bytes());
        tcp.extend_from_slice(&5201u16.to_be_bytes());
        tcp.extend_from_slice(&self.seq.to_be_bytes());
        tcp.extend_from_slice(&99u32.to_be_bytes());
        tcp.push(if self.ts.is_some() { 0x80 } else { 0x50 });
        tcp.push(self.flags);
        tcp.extend_from_slice(&[0x01, 0xf5, 0, 0, 0, 0]);
        if let Some(ts) = self.ts {
            tcp.extend_from_slice(&[1, 1, 8, 10]);
            tcp.extend_from_slice(&ts.to_be_bytes());
            tcp.extend_from_slice(&3u32.to_be_bytes());
        }
        tcp.extend_from_slice(&self.payload);
        if self.v6 {
            let mut ip = vec![0x60, 0, 0, 0];
            ip.extend_from_slice(&(tcp.len() as u16).to_be_bytes());
            ip.extend_from_slice(&[TCP, 64]);
            ip.extend_from_slice(&A6);
            ip.extend_from_slice(&B6);
            let c = checksum::finish(checksum::sum(
                checksum::pseudo_v6(&A6.into(), &B6.into(), TCP, tcp.len() as u32),
                &tcp,
            ));
            tcp[16..18].copy_from_slice(&c.to_be_bytes());
            f.extend(ip);
        } else {
            let mut ip = vec![0x45, 0];
            ip.extend_from_slice(&((20 + tcp.len()) as u16).to_be_bytes());
            ip.extend_from_slice(&self.id.to_be_bytes());
            ip.extend_from_slice(&[0x40, 0, 64, TCP, 0, 0]);
            ip.extend_from_slice(&A4);
            ip.extend_from_slice(&B4);
            let c = checksum::checksum(&ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            let c = checksum::finish(checksum::sum(
                checksum::pseudo_v4(A4.into(), B4.into(), TCP, tcp.len() as u16),
                &tcp,
            ));
            tcp[16..18].copy_from_slice(&c.to_be_bytes());
            f.extend(ip);
        }
        f.extend(tcp);
        f
    }
}

fn bytes(n: usize, k: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + k * 13) as u8).collect()
}

/// `n` full segments of `mss` and a last of `last` bytes with PSH, in order.
fn stream(v6: bool, n: usize, mss: usize, last: usize) -> Vec<Spec> {
    let mut out = Vec::new();
    let mut seq = 1_000_000u32;
    for k in 0..=n {
        let len = if k == n { last } else { mss };
        let mut s = Spec::new(v6, seq, 300 + k as u16, bytes(len, k));
        if k == n {
            s.flags |= PSH;
        }
        seq = seq.wrapping_add(len as u32);
        out.push(s);
    }
    out
}

fn bufs(specs: &[Spec]) -> Vec<HeapBuf> {
    specs.iter().map(|s| HeapBuf::new(&s.frame())).collect()
}

/// What one write of the run puts on the wire: the head, then each packet's part.
fn written(pkts: &[HeapBuf], run: &Run, head: &[u8; HEAD_MAX]) -> Vec<u8> {
    let mut w = head[..run.head_len].to_vec();
    for p in &pkts[..run.count] {
        w.extend_from_slice(run.part(p.data()));
    }
    w
}

fn alloc(len: usize) -> Option<HeapBuf> {
    Some(HeapBuf::with_room(&[], 128, len))
}

/// Checks the IP and TCP checksums of `frame` with the wire module's own verification.
fn verified(frame: &[u8]) -> bool {
    if frame[12] == 0x86 {
        let ip = Ipv6Packet::new_checked(&frame[14..]).unwrap();
        let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
        tcp.verify_checksum_v6(&ip.src_addr(), &ip.dst_addr())
    } else {
        let ip = Ipv4Packet::new_checked(&frame[14..]).unwrap();
        let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
        ip.verify_checksum() && tcp.verify_checksum_v4(ip.src_addr(), ip.dst_addr())
    }
}

#[test]
fn a_run_of_in_order_segments_is_written_as_one_gso_frame_that_cuts_back_into_the_same_segments() {
    for v6 in [false, true] {
        let specs = stream(v6, 30, 1448, 500);
        let pkts = bufs(&specs);
        let mut head = [0u8; HEAD_MAX];
        let run = coalesce(&pkts, &mut head);
        assert_eq!(run.count, 31, "v6 {v6}");
        let h = VnetHdr::parse(&head).unwrap();
        let hl = 14 + if v6 { 40 } else { 20 } + 32;
        assert_eq!(
            h,
            VnetHdr {
                flags: 0,
                gso_type: if v6 { GSO_TCPV6 } else { GSO_TCPV4 },
                hdr_len: hl as u16,
                gso_size: 1448,
                csum_start: 0,
                csum_offset: 0,
            }
        );
        let frame = written(&pkts, &run, &head)[HDR_LEN..].to_vec();
        assert_eq!(frame.len(), hl + 30 * 1448 + 500);
        // The frame's checksum, derived from the segments', verifies over the whole frame.
        assert!(verified(&frame), "v6 {v6}");
        let tcp_at = hl - 32;
        assert_eq!(frame[tcp_at + 13], ACK | PSH, "the last one's PSH");
        // The frame in from the other side (what the kernel's TSO would hand us) cuts back
        // into exactly the segments it was made of.
        let frame = written(&pkts, &run, &head)[HDR_LEN..].to_vec();
        let mut out = Vec::new();
        assert_eq!(segment(&h, &frame, alloc, &mut out), Ok(31));
        for (k, (o, s)) in out.iter().zip(&specs).enumerate() {
            assert_eq!(o.data(), &s.frame()[..], "v6 {v6} segment {k}");
            assert!(verified(o.data()));
        }
    }
}

#[test]
fn coalescing_stops_where_linux_gro_would_not_merge() {
    let mut head = [0u8; HEAD_MAX];
    let run_of = |specs: &[Spec], head: &mut [u8; HEAD_MAX]| coalesce(&bufs(specs), head).count;
    let base = stream(false, 5, 1000, 1000);
    assert_eq!(run_of(&base, &mut head), 6);
    let with = |k: usize, f: &dyn Fn(&mut Spec)| {
        let mut s = base.clone();
        f(&mut s[k]);
        s
    };
    // A sequence gap, another flow, a SYN/FIN/RST/URG-bearing segment, a changed timestamp,
    // non-consecutive IDs, a longer segment, an empty one: the run ends before it.
    assert_eq!(run_of(&with(3, &|s| s.seq += 1), &mut head), 3);
    assert_eq!(run_of(&with(3, &|s| s.sport += 1), &mut head), 3);
    for flag in [0x01, 0x02, 0x04, 0x20, 0x40, 0x80] {
        assert_eq!(run_of(&with(3, &|s| s.flags |= flag), &mut head), 3, "flag {flag:#x}");
    }
    assert_eq!(run_of(&with(3, &|s| s.ts = Some(8)), &mut head), 3);
    assert_eq!(run_of(&with(3, &|s| s.ts = None), &mut head), 3);
    assert_eq!(run_of(&with(3, &|s| s.id += 1), &mut head), 3);
    assert_eq!(run_of(&with(3, &|s| s.payload.push(0)), &mut head), 3);
    assert_eq!(run_of(&with(3, &|s| s.payload.clear()), &mut head), 3);
    // A shorter or PSH segment is the last of its run.
    assert_eq!(run_of(&with(2, &|s| s.payload.truncate(10)), &mut head), 3);
    assert_eq!(run_of(&with(2, &|s| s.flags |= PSH), &mut head), 3);
    // A first segment that cannot start a run: written alone behind a zero header.
    let run = coalesce(&bufs(&with(0, &|s| s.flags |= 0x02)), &mut head);
    assert_eq!(
        run,
        Run {
            count: 1,
            head_len: HDR_LEN,
            from: 0
        }
    );
    assert_eq!(head[..HDR_LEN], [0; HDR_LEN]);
    // A corrupted payload (its TCP checksum wrong) makes the whole frame fail the kernel's
    // check: the frame's checksum is derived from the segments' own.
    for k in [0, 3, 5] {
        let mut pkts = bufs(&base);
        pkts[k].data_mut()[100] ^= 0x5a;
        let run = coalesce(&pkts, &mut head);
        assert_eq!(run.count, 6);
        assert!(
            !verified(&written(&pkts, &run, &head)[HDR_LEN..]),
            "corrupt segment {k}"
        );
    }
    // An odd MSS: never merged.
    assert_eq!(run_of(&stream(false, 3, 999, 999), &mut head), 1);
    // IPv4 options: never.
    let mut f = base[0].frame();
    f[14] = 0x46;
    assert_eq!(
        coalesce(&[HeapBuf::new(&f), HeapBuf::new(&base[1].frame())], &mut head).count,
        1
    );
    // Not more than 64 KB of IP: 50 segments of 1448 make two runs.
    let big = stream(false, 49, 1448, 1448);
    let pkts = bufs(&big);
    let first = coalesce(&pkts, &mut head).count;
    assert_eq!(first, 45, "(65535 - 52) / 1448");
    assert_eq!(coalesce(&pkts[first..], &mut head).count, 5);
    // Ethernet padding after a short segment is not payload.
    let mut pkts = bufs(&stream(false, 1, 4, 4));
    for p in &mut pkts {
        p.append(6).unwrap().fill(0xee);
    }
    let run = coalesce(&pkts, &mut head);
    assert_eq!(run.count, 2);
    assert_eq!(run.part(pkts[1].data()).len(), 4);
}

#[test]
fn a_gso_frame_from_the_kernel_is_cut_into_mss_segments_with_ids_flags_and_checksums() {
    for v6 in [false, true] {
        // What Linux hands a TSO device: one big segment, CWR|PSH|FIN, the TCP checksum field
        // holding the pseudo-header's sum for the whole length.
        let mut big = Spec::new(v6, 0xffff_f000, 0xfffe, bytes(10_000, 1));
        big.flags = ACK | PSH | FIN | CWR;
        let mut frame = big.frame();
        let l4 = 14 + if v6 { 40 } else { 20 };
        let tcp_len = frame.len() - l4;
        let sum = pseudo(v6, &frame[14..], tcp_len);
        frame[l4 + 16..l4 + 18].copy_from_slice(&checksum::fold(sum).to_be_bytes());
        let h = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: if v6 { GSO_TCPV6 } else { GSO_TCPV4 } | GSO_ECN,
            hdr_len: (l4 + 32) as u16,
            gso_size: 1448,
            csum_start: l4 as u16,
            csum_offset: 16,
        };
        let mut out = Vec::new();
        assert_eq!(segment(&h, &frame, alloc, &mut out), Ok(7));
        let mut seq = 0xffff_f000u32;
        let mut payload = Vec::new();
        for (k, o) in out.iter().enumerate() {
            let d = o.data();
            assert!(verified(d), "v6 {v6} segment {k}");
            let tcp = TcpPacket::new_checked(&d[l4..]).unwrap();
            let want = if k == 6 { 10_000 - 6 * 1448 } else { 1448 };
            assert_eq!(tcp.payload().len(), want);
            assert_eq!(tcp.seq_number(), seq, "the sequence wraps with the stream");
            seq = seq.wrapping_add(want as u32);
            let f = d[l4 + 13];
            assert_eq!(f & CWR != 0, k == 0, "CWR on the first only");
            assert_eq!(
                f & (FIN | PSH),
                if k == 6 { FIN | PSH } else { 0 },
                "FIN, PSH on the last only"
            );
            assert_eq!(f & ACK, ACK);
            if !v6 {
                let ip = Ipv4Packet::new_checked(&d[14..]).unwrap();
                assert_eq!(ip.ident(), 0xfffeu16.wrapping_add(k as u16));
                assert_eq!(ip.total_len(), d.len() - 14);
            } else {
                let ip = Ipv6Packet::new_checked(&d[14..]).unwrap();
                assert_eq!(ip.payload_len(), d.len() - 54);
            }
            payload.extend_from_slice(tcp.payload());
        }
        assert_eq!(payload, bytes(10_000, 1));
    }
}

#[test]
fn a_frame_without_gso_has_its_partial_checksum_completed() {
    // UDP/IPv4 from the kernel with NEEDS_CSUM: the field holds the pseudo-header's sum.
    let payload = b"hello, kernel";
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 8, 0];
    let udp_len = 8 + payload.len();
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&((20 + udp_len) as u16).to_be_bytes());
    ip.extend_from_slice(&[0, 1, 0x40, 0, 64, 17, 0, 0]);
    ip.extend_from_slice(&A4);
    ip.extend_from_slice(&B4);
    let c = checksum::checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend(ip);
    f.extend_from_slice(&53u16.to_be_bytes());
    f.extend_from_slice(&5353u16.to_be_bytes());
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    let s = checksum::pseudo_v4(A4.into(), B4.into(), 17, udp_len as u16);
    f.extend_from_slice(&checksum::fold(s).to_be_bytes());
    f.extend_from_slice(payload);
    let h = VnetHdr {
        flags: F_NEEDS_CSUM,
        csum_start: 34,
        csum_offset: 6,
        ..Default::default()
    };
    let mut out = Vec::new();
    assert_eq!(segment(&h, &f, alloc, &mut out), Ok(1));
    let d = out[0].data();
    let ip = Ipv4Packet::new_checked(&d[14..]).unwrap();
    let udp = UdpPacket::new_checked(ip.payload()).unwrap();
    assert!(udp.verify_checksum_v4(ip.src_addr(), ip.dst_addr()));
    assert_eq!(&d[..34], &f[..34]);
    // Without NEEDS_CSUM the frame goes as it is.
    let mut out = Vec::new();
    assert_eq!(segment(&VnetHdr::default(), &f, alloc, &mut out), Ok(1));
    assert_eq!(out[0].data(), &f[..]);
}

#[test]
fn no_buffer_or_a_malformed_frame_leaves_nothing_of_it_and_never_panics() {
    let mut big = Spec::new(false, 1, 1, bytes(5000, 2));
    big.flags = ACK;
    let frame = big.frame();
    let h = VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_TCPV4,
        hdr_len: 66,
        gso_size: 1000,
        csum_start: 34,
        csum_offset: 16,
    };
    let mut out = vec![HeapBuf::new(b"earlier")];
    let mut left = 2;
    let r = segment(
        &h,
        &frame,
        |len| {
            left -= 1;
            (left >= 0).then(|| HeapBuf::with_room(&[], 0, len))
        },
        &mut out,
    );
    assert_eq!(r, Err(CutError::NoBuffer));
    assert_eq!(out.len(), 1, "what came before stays, nothing of the frame");
    // Every truncation and a few corruptions of the header and the frame: an answer, no panic.
    for cut_at in 0..frame.len().min(120) {
        for hdr in [
            h,
            VnetHdr { gso_size: 0, ..h },
            VnetHdr { gso_type: 3, ..h },
            VnetHdr { csum_start: 60000, ..h },
            VnetHdr {
                gso_type: GSO_NONE,
                ..h
            },
        ] {
            let mut out = Vec::new();
            let _ = segment(&hdr, &frame[..cut_at], alloc, &mut out);
        }
        let mut head = [0u8; HEAD_MAX];
        let pkts = [HeapBuf::new(&frame[..cut_at]), HeapBuf::new(&frame[..cut_at])];
        let run = coalesce(&pkts, &mut head);
        for p in &pkts[..run.count] {
            let _ = run.part(p.data());
        }
    }
}
