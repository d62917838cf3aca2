//! Live capture of a running fastpathd with DPDK's own `dpdk-dumpcap`, on hugepages (a secondary
//! process attaches through the shared runtime directory): RX and TX, with a BPF filter, read
//! back with tshark.

mod common;

use common::*;
use std::process::Command;

/// 4 echo requests and 4 UDP datagrams to a closed port, looped by net_pcap (`infinite_rx`) so traffic
/// flows while the capture runs.
fn write_traffic(s: &Scratch) -> std::path::PathBuf {
    let pcap = s.path("in.pcap");
    let out = Command::new("/usr/bin/python3")
        .args([
            "-c",
            &format!(
                "from scapy.all import Ether, IP, ICMP, UDP, wrpcap\n\
                 e = Ether(src='02:00:00:00:00:02', dst='02:00:00:00:00:01')\n\
                 f = [e/IP(src='198.51.100.7', dst='192.0.2.1')/ICMP(id=1, seq=i)/b'dumpcap' for i in range(4)]\n\
                 f += [e/IP(src='198.51.100.7', dst='192.0.2.1')/UDP(sport=4000 + i, dport=9)/b'sink' for i in range(4)]\n\
                 wrpcap('{}', f)\n",
                pcap.display()
            ),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    pcap
}

fn dumpcap(prefix: &str, out: &std::path::Path, extra: &[&str]) {
    let run = Command::new("timeout")
        .args([
            "30",
            "dpdk-dumpcap",
            &format!("--file-prefix={prefix}"),
            "-i",
            "net_pcap0",
            "-q",
        ])
        .args(extra)
        .args(["-w", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "dpdk-dumpcap: {}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
}

#[test]
fn dpdk_dumpcap_captures_rx_and_tx_of_a_running_daemon() {
    let huge = HugePrefix::new("dumpcap", 300);
    let s = Scratch::new("dumpcap");
    let input = write_traffic(&s);
    let vdev = format!("--vdev=net_pcap0,rx_pcap={},infinite_rx=1", input.display());
    let cfg = s.write(
        "c.toml",
        &format!(
            "[dpdk]\neal_args = {}\nmbufs = 8191\n\n[[port]]\ndevice = \"net_pcap0\"\ntx_queues = 1\n\
             ipv4 = [\"192.0.2.1\"]\nmac = \"02:00:00:00:00:01\"\n\n[lcores]\nrx = [0]\n\n[metrics]\nenabled = false\n",
            huge.eal_args(&[vdev])
        ),
    );
    let dump = s.path("metrics.prom");
    let d = Daemon::start(
        &s,
        &[
            "--config",
            cfg.to_str().unwrap(),
            "--metrics-dump",
            dump.to_str().unwrap(),
        ],
    );
    // Both directions: requests in, replies out.
    let all = s.path("all.pcapng");
    dumpcap(&huge.prefix, &all, &["-c", "400"]);
    let count = |f: &std::path::Path, filter: &str| tshark_checked(f, filter, &["frame.number"]).len();
    // dumpcap stops after the burst that reaches the count.
    let frames = count(&all, "frame");
    assert!((400..400 + 64).contains(&frames), "{frames} frames");
    let (req, rep, udp) = (
        count(
            &all,
            "icmp.type == 8 && ip.dst == 192.0.2.1 && data.data == 64:75:6d:70:63:61:70",
        ),
        count(
            &all,
            "icmp.type == 0 && ip.src == 192.0.2.1 && eth.src == 02:00:00:00:00:01",
        ),
        count(&all, "udp.dstport == 9 && !icmp"),
    );
    // (A few Port Unreachables about the UDP datagrams, rate limited, are outbound too.)
    let errors = count(&all, "icmp.type == 3");
    assert!(
        req > 0 && rep > 0 && udp > 0,
        "requests {req}, replies {rep}, udp {udp}"
    );
    assert_eq!(
        req + rep + udp + errors,
        frames,
        "nothing else on the port: {req} {rep} {udp} {errors}"
    );
    // The direction is recorded: received frames inbound, answers outbound.
    assert_eq!(count(&all, "frame.packet_flags_direction == 2"), rep + errors);
    // A BPF filter: the UDP datagrams only.
    let udp_only = s.path("udp.pcapng");
    dumpcap(&huge.prefix, &udp_only, &["-c", "50", "-f", "udp"]);
    let frames = count(&udp_only, "frame");
    assert!(frames >= 50, "{frames} frames");
    assert_eq!(count(&udp_only, "udp.dstport == 9 && !icmp"), frames);
    let (code, log) = d.stop();
    assert_eq!(code, Some(0), "{log}");
    let m = parse_metrics(&std::fs::read_to_string(&dump).unwrap());
    assert_conservation(&m);
    assert_eq!(m.get("fastpath_mbufs_in_use").copied(), Some(0.0));
}
