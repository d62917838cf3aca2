//! Micro-benchmarks of the data plane, in ns per packet, over heap buffers (no DPDK).
//!
//! `cargo bench -p benches` runs them all; `cargo bench -p benches -- pipeline/` a group. One
//! function per stage or path, each registered in `criterion_group!` at the bottom; the stages
//! still to come (see `benches/README.md`, "not yet measured") become further functions here,
//! with their inputs in `benches/src/lib.rs` and a test there that each input takes the path its
//! benchmark is named after.

use benches::{arp_request, buf, pipeline, udp4, ME_IP, ME_MAC};
use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use fastpath::pipeline::Instant;
use fastpath::wire::{EthernetAddress, EthernetFrame};
use std::net::Ipv4Addr;

/// Ethernet header parse: the length checks, addresses, EtherType and VLAN tags of one frame.
fn wire(c: &mut Criterion) {
    let mut g = c.benchmark_group("wire");
    g.throughput(Throughput::Elements(1));
    let untagged = udp4(ME_MAC, 40000, 9);
    let tagged = arp_request(ME_IP, Some(100));
    for (name, frame) in [("ethernet_parse", &untagged), ("ethernet_parse_vlan", &tagged)] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let f = EthernetFrame::new_checked(black_box(frame.as_slice())).expect("valid frame");
                // Fold the fields into one word: returning them all through black_box costs
                // more than the parse itself.
                let dst = f.dst_addr().is_multicast() || f.dst_addr() == ME_MAC;
                let src = f.src_addr().is_unicast();
                black_box((u16::from(f.ethertype()), f.header_len() as u8, dst, src))
            })
        });
    }
    g.finish();
}

/// The whole pipeline on one packet, per path. Paths that rewrite the packet in place (the ARP
/// answer) get a fresh copy per iteration, made outside the timed part.
fn pipeline_paths(c: &mut Criterion) {
    let mut g = c.benchmark_group("pipeline");
    g.throughput(Throughput::Elements(1));
    let mut p = pipeline();

    for (name, frame) in [
        ("arp_reply", arp_request(ME_IP, None)),
        ("arp_reply_vlan", arp_request(ME_IP, Some(100))),
    ] {
        let template = buf(&frame);
        g.bench_function(name, |b| {
            b.iter_batched_ref(
                || template.clone(),
                |pkt| black_box(p.process(0, pkt, Instant(0))),
                BatchSize::SmallInput,
            )
        });
    }

    // Drop paths leave the packet as it was, so one buffer serves every iteration.
    for (name, frame) in [
        ("drop_not_for_us", udp4(EthernetAddress([2, 0, 0, 0, 9, 9]), 40000, 9)),
        ("closed_port_udp", udp4(ME_MAC, 40000, 9)),
        ("drop_arp_ignored", arp_request(Ipv4Addr::new(192, 0, 2, 99), None)),
    ] {
        let mut pkt = buf(&frame);
        g.bench_function(name, |b| {
            b.iter(|| black_box(p.process(0, black_box(&mut pkt), Instant(0))))
        });
    }
    g.finish();
}

criterion_group!(stages, wire, pipeline_paths);
criterion_main!(stages);
