//! DPDK's own tools keep working on a fastpathd run with its defaults on hugepages (shared
//! runtime directory, telemetry on): `dpdk-telemetry.py` and `dpdk-proc-info` (a secondary
//! process) read the port's counters, and once traffic has stopped they agree with the metrics
//! endpoint. The port is `net_af_packet` on a veth whose far end (the kernel, in a namespace of
//! its own) pings us: `net_pcap` cannot be used, DPDK 22.11's `dpdk-proc-info` crashes in its
//! own clean-up of a `net_pcap` port (after printing the stats).

mod common;

use common::*;
use std::collections::BTreeMap;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Namespace `a` (fastpathd) and `b` (the kernel at 192.0.2.2), a [`VethPair`] with IPv6 off on
/// both ends so nothing but the test's traffic crosses it.
fn pair() -> VethPair {
    let p = VethPair::new("fptl");
    sysctl(&p.ns_b, &[&format!("net.ipv6.conf.{}.disable_ipv6=1", p.if_b)]);
    p
}

fn scrape(ns: &str, port: u16) -> BTreeMap<String, f64> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "curl", "-sf", "-m", "5"])
        .arg(format!("http://127.0.0.1:{port}/metrics"))
        .output()
        .expect("curl is needed (ci/setup installs it)");
    assert!(out.status.success(), "scrape failed");
    parse_metrics(&String::from_utf8_lossy(&out.stdout))
}

/// `dpdk-telemetry.py -f PREFIX` answering `cmd` (read from its stdin, as an operator pipes it).
fn telemetry(prefix: &str, cmd: &str) -> serde_json::Value {
    let mut child = Command::new("timeout")
        .args(["20", "/usr/bin/dpdk-telemetry.py", "-f", prefix])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("dpdk-telemetry.py (package dpdk)");
    use std::io::Write;
    writeln!(child.stdin.take().unwrap(), "{cmd}").unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "dpdk-telemetry.py: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = text
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON from telemetry: {text}"));
    serde_json::from_str(json).unwrap()
}

/// `dpdk-proc-info --file-prefix=PREFIX -- --stats` in namespace `ns` (a secondary process
/// attaching the port); its NIC statistics as `RX-packets` -> n.
fn proc_info_stats(ns: &str, prefix: &str) -> BTreeMap<String, u64> {
    let out: Output = Command::new("ip")
        .args(["netns", "exec", ns, "timeout", "20", "dpdk-proc-info"])
        .args([
            &format!("--file-prefix={prefix}"),
            "--log-level=lib.eal:error",
            "--",
            "--stats",
        ])
        .output()
        .expect("dpdk-proc-info (package dpdk)");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "dpdk-proc-info exit {:?}: {text}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    // "  RX-packets: 21          RX-errors:  0           RX-bytes:  2058"
    let block = text
        .split("NIC statistics for port 0")
        .nth(1)
        .unwrap_or_else(|| panic!("no port statistics: {text}"));
    let mut m = BTreeMap::new();
    for line in block.lines().take_while(|l| !l.contains("Stats reg")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        for w in words.windows(2) {
            if let (Some(k), Ok(v)) = (w[0].strip_suffix(':'), w[1].parse()) {
                m.insert(k.to_string(), v);
            }
        }
    }
    m
}

#[test]
fn telemetry_and_proc_info_agree_with_the_metrics_on_hugepages() {
    if missing(&["dpdk-proc-info", "dpdk-telemetry.py", "hugepages"]) {
        return;
    }
    let huge = HugePrefix::new("telemetry", 300);
    let p = pair();
    let s = Scratch::new("telemetry");
    let port = free_port();
    // fastpathd's defaults: telemetry on, the shared runtime directory (no --no-shconf).
    let eal = [
        "--no-pci".to_string(),
        format!("--file-prefix={}", huge.prefix),
        "--log-level=lib.eal:warning".into(),
        format!("--vdev=net_af_packet0,iface={}", p.if_a),
    ];
    let cfg = s.write(
        "c.toml",
        &format!(
            "[dpdk]\neal_args = {eal:?}\nmbufs = 8191\n\n[[port]]\ndevice = \"net_af_packet0\"\ntx_queues = 1\n\
             ipv4 = [\"192.0.2.1\"]\n\n[lcores]\nrx = [0]\n\n[control]\nsocket = \"control.sock\"\n\n[metrics]\nlisten = \"127.0.0.1:{port}\"\ncache_ms = 0\n\
             [reassembly]\nbuffers = 32\n"
        ),
    );
    let dump = s.path("metrics.prom");
    let bin = env!("CARGO_BIN_EXE_fastpathd");
    let d = Daemon::start_cmd(
        &s,
        Command::new("ip")
            .args(["netns", "exec", &p.ns_a, bin, "--config", cfg.to_str().unwrap()])
            .args(["--metrics-dump", dump.to_str().unwrap()]),
    );
    let out = ns_exec(&p.ns_b, &["ping", "-c", "20", "-i", "0.01", "-W", "2", "192.0.2.1"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("20 received"));
    // Traffic has stopped once the port's count holds still for 500 ms.
    let rx_of = |m: &BTreeMap<String, f64>| {
        m.get("fastpath_port_rx_packets_total{port=\"net_af_packet0\"}")
            .copied()
    };
    let mut last = None;
    let mut still = 0;
    wait_for(10, "traffic to stop", || {
        let now = rx_of(&scrape(&p.ns_a, port));
        still = if now == last { still + 1 } else { 0 };
        last = now;
        std::thread::sleep(Duration::from_millis(100));
        still >= 5
    });

    let list = telemetry(&huge.prefix, "/ethdev/list");
    assert_eq!(list["/ethdev/list"], serde_json::json!([0]), "{list}");
    let t = &telemetry(&huge.prefix, "/ethdev/stats,0")["/ethdev/stats"];
    let pi = proc_info_stats(&p.ns_a, &huge.prefix);
    let m = scrape(&p.ns_a, port);
    let metric = |k: &str| m.get(&format!("{k}{{port=\"net_af_packet0\"}}")).copied().unwrap() as u64;
    let rx = metric("fastpath_port_rx_packets_total");
    let tx = metric("fastpath_port_tx_packets_total");
    eprintln!("metrics rx {rx} tx {tx}; telemetry {t}; proc-info {pi:?}");
    assert!(rx >= 21, "an ARP request and 20 echo requests at least: {rx}");
    assert_eq!(t["ipackets"].as_u64(), Some(rx), "telemetry rx");
    assert_eq!(t["opackets"].as_u64(), Some(tx), "telemetry tx");
    assert_eq!(t["ibytes"].as_u64(), Some(metric("fastpath_port_rx_bytes_total")));
    assert_eq!(pi.get("RX-packets"), Some(&rx), "proc-info rx");
    assert_eq!(pi.get("TX-packets"), Some(&tx), "proc-info tx");
    assert_eq!(
        family_sum(&m, "fastpath_rx_packets_total") as u64,
        rx,
        "the lcores' count"
    );
    assert_eq!(family_sum(&m, "fastpath_packets_total") as u64, rx, "one outcome each");

    // The daemon is none the worse for the secondary process: it still answers and stops cleanly.
    let out = ns_exec(&p.ns_b, &["ping", "-c", "2", "-i", "0.1", "-W", "2", "192.0.2.1"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("2 received"));
    let (code, log) = d.stop();
    assert_eq!(code, Some(0), "{log}");
    assert!(!log.contains("BUG"), "{log}");
    // A clean stop leaves neither hugepage files nor the runtime directory behind.
    assert_eq!(huge.leftovers(), Vec::<std::path::PathBuf>::new());
    assert_conservation(&parse_metrics(&std::fs::read_to_string(&dump).unwrap()));
}
