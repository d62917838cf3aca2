//! The plain forward mode (`[lcores] mode = "forward"`) of the real fastpathd over net_pcap:
//! every frame leaves unchanged on the `forward_to` port and counts as `forwarded`.

mod common;

use common::*;
use std::path::Path;

/// The frames of a classic little-endian pcap file (micro- or nanosecond timestamps: net_pcap
/// writes nanoseconds), without their timestamps.
fn frames(pcap: &Path) -> Vec<Vec<u8>> {
    let b = std::fs::read(pcap).unwrap_or_else(|e| panic!("{}: {e}", pcap.display()));
    assert!(b.len() >= 24, "{}: no pcap header", pcap.display());
    let magic = u32::from_le_bytes(b[..4].try_into().unwrap());
    assert!(
        magic == 0xa1b2_c3d4 || magic == 0xa1b2_3c4d,
        "{}: not a little-endian pcap",
        pcap.display()
    );
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= b.len() {
        let caplen = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        out.push(b[at + 16..at + 16 + caplen].to_vec());
        at += 16 + caplen;
    }
    assert_eq!(at, b.len(), "{}: trailing bytes", pcap.display());
    out
}

#[test]
fn forward_mode_sends_every_frame_unchanged_on_the_forward_to_port() {
    let s = Scratch::new("forward");
    let input = repo().join("configs/captures/demo.pcap");
    // A capture with no frame: the second port's RX side.
    let empty = s.path("empty.pcap");
    std::fs::write(&empty, &std::fs::read(&input).unwrap()[..24]).unwrap();
    let (out0, out1) = (s.path("out-q0.pcap"), s.path("out-q1.pcap"));
    let (back0, back1) = (s.path("back-q0.pcap"), s.path("back-q1.pcap"));
    let vdevs = [
        format!(
            "--vdev=net_pcap0,rx_pcap={},tx_pcap={},tx_pcap={}",
            input.display(),
            back0.display(),
            back1.display()
        ),
        format!(
            "--vdev=net_pcap1,rx_pcap={},tx_pcap={},tx_pcap={}",
            empty.display(),
            out0.display(),
            out1.display()
        ),
    ];
    let cfg = s.write(
        "c.toml",
        &format!(
            "[dpdk]\neal_args = {}\nmbufs = 16383\n\n\
             [[port]]\ndevice = \"net_pcap0\"\nipv4 = [\"192.0.2.1\"]\nmac = \"02:00:00:00:00:01\"\n\
             forward_to = \"net_pcap1\"\n\n\
             [[port]]\ndevice = \"net_pcap1\"\n\n\
             [lcores]\nrx = [0]\nworkers = [1]\nmode = \"forward\"\nidle_sleep_us = 200\n",
            eal_args("forward", &vdevs)
        ),
    );
    let dump = s.path("metrics.prom");
    let out = run(&[
        "--config",
        cfg.to_str().unwrap(),
        "--exit-when-idle",
        "300",
        "--metrics-dump",
        dump.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("forward mode, no stage runs: net_pcap0 -> net_pcap1"),
        "{stderr}"
    );

    let m = parse_metrics(&std::fs::read_to_string(&dump).unwrap());
    assert_eq!(assert_conservation(&m), 22, "demo.pcap holds 22 frames");
    // Runts, junk and ARP requests alike: no stage looks at them.
    assert_eq!(outcome(&m, "forwarded"), 22);
    assert_eq!(m["fastpath_tx_packets_total{port=\"net_pcap1\",queue=\"0\"}"], 22.0);
    // The loop counts what testpmd's io mode counts (packets); the bytes are the ports'.
    let bytes: usize = frames(&input).iter().map(Vec::len).sum();
    assert_eq!(m["fastpath_port_rx_packets_total{port=\"net_pcap0\"}"], 22.0);
    assert_eq!(m["fastpath_port_rx_bytes_total{port=\"net_pcap0\"}"], bytes as f64);
    assert_eq!(m["fastpath_port_tx_packets_total{port=\"net_pcap1\"}"], 22.0);
    assert_eq!(m["fastpath_port_tx_bytes_total{port=\"net_pcap1\"}"], bytes as f64);
    assert_eq!(m["fastpath_port_rx_missed_total{port=\"net_pcap0\"}"], 0.0);
    assert!(
        !m.keys()
            .any(|k| k.starts_with("fastpath_rx_bytes_total") || k.starts_with("fastpath_tx_bytes_total")),
        "no per-queue byte series in forward mode"
    );
    assert_eq!(m["fastpath_lcore_packets_total{lcore=\"0\"}"], 22.0);
    assert!(m["fastpath_lcore_cycles_per_packet{lcore=\"0\"}"] > 0.0);
    assert!(m["fastpath_tsc_hz"] > 0.0);

    assert_eq!(frames(&out0), frames(&input), "forwarded byte for byte, in order");
    assert!(frames(&out1).is_empty(), "the worker sent nothing");
    assert!(frames(&back0).is_empty(), "nothing went back out of the RX port");
}
