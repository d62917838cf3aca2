//! `fastpathd --explain`: offline, no DPDK, no root; pcap and pcapng read alike.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

fn explain(cfg: &Path, capture: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_fastpathd"))
        .arg("--config")
        .arg(cfg)
        .arg("--explain")
        .arg(capture)
        .args(extra)
        .output()
        .expect("fastpathd runs")
}

const CONFIG: &str = r#"
[dpdk]
mbufs = 8191

[[port]]
device = "net_pcap0"
tx_queues = 2
ipv4 = ["192.0.2.1"]
ipv6 = ["2001:db8::1"]
mac = "02:00:00:00:00:01"

[lcores]
rx = [0]
workers = [1]

[[service]]
name = "echo"
ports = [7]
sockets = 2
socket_capacity = 64
action = "echo"
"#;

/// The demo capture as pcapng, microsecond timestamps, written with the library's reader's
/// own crate.
fn to_pcapng(pcap: &Path, out: &Path) {
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
    use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
    use pcap_file::pcapng::PcapNgWriter;
    let frames = control::replay::read_capture(pcap).unwrap();
    let mut w = PcapNgWriter::new(Vec::new()).unwrap();
    w.write_pcapng_block(InterfaceDescriptionBlock {
        linktype: pcap_file::DataLink::ETHERNET,
        snaplen: 0,
        options: vec![],
    })
    .unwrap();
    for f in &frames {
        // Without if_tsresol the unit is a microsecond.
        w.write_pcapng_block(EnhancedPacketBlock {
            interface_id: 0,
            timestamp: std::time::Duration::from_nanos(f.ts_ns / 1000),
            original_len: f.data.len() as u32,
            data: f.data.as_slice().into(),
            options: vec![],
        })
        .unwrap();
    }
    std::fs::write(out, w.into_inner()).unwrap();
}

#[test]
fn every_packet_gets_a_record_from_pcap_and_pcapng_alike() {
    let s = Scratch::new("explain-formats");
    let cfg = s.write("fastpathd.toml", CONFIG);
    let pcap = repo().join("configs/captures/demo.pcap");
    let ng = s.path("demo.pcapng");
    to_pcapng(&pcap, &ng);
    let mut outputs = Vec::new();
    for capture in [&pcap, &ng] {
        let out = explain(&cfg, capture, &["--json", "--capture-time"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let (summary, records) = lines.split_last().unwrap();
        assert_eq!(summary["summary"]["frames"], 22);
        assert_eq!(records.len(), 22);
        for r in records {
            assert!(r["lcore"].is_u64() && r["outcome"].is_string(), "{r}");
            assert!(r["stages"].as_array().is_some_and(|a| !a.is_empty()), "{r}");
        }
        outputs.push(text);
    }
    assert_eq!(outputs[0], outputs[1], "the same records from either format");
    // Text: one line per record, then the summary.
    let out = explain(&cfg, &pcap, &[]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.lines().any(|l| l.contains("> 192.0.2.1:7 udp")
            && l.contains("service: echo socket")
            && l.ends_with("=> delivered")),
        "{text}"
    );
    assert!(text.contains("22 frames, 22 records"), "{text}");
}

#[test]
fn an_unreadable_capture_or_config_is_exit_1_and_json_needs_explain() {
    let s = Scratch::new("explain-errors");
    let cfg = s.write("fastpathd.toml", CONFIG);
    let junk = s.write("junk.pcap", "not a capture");
    let out = explain(&cfg, &junk, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("junk.pcap"));
    let bad = s.write("bad.toml", "[nope]\n");
    let out = explain(&bad, &repo().join("configs/captures/demo.pcap"), &[]);
    assert_eq!(out.status.code(), Some(1));
    let out = Command::new(env!("CARGO_BIN_EXE_fastpathd"))
        .args(["--config", "x.toml", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "--json without --explain is a usage error");
}
