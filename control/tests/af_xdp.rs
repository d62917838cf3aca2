//! An AF_XDP port (DPDK's `net_af_xdp`) on a veth: the way to run beside the kernel on a NIC
//! the host keeps. fastpathd owns one end of a veth pair in a namespace of its own, the kernel
//! of a client namespace the other end; the client's ARP, ping and UDP must be answered through
//! the XDP socket, every packet counted once, and the interface left without its XDP program
//! when fastpathd stops.
//!
//! A veth reports no combined channels, so DPDK 22.11's driver gives it one RX/TX queue pair
//! (`queue_count` at most 1): one lcore, which answers ARP, ICMP and UDP errors itself; a
//! service needs a worker and so a second TX queue (a NIC with `ethtool -L IFACE combined 2`).

mod common;

use common::*;
use std::collections::BTreeMap;
use std::process::{Command, Output};

/// fastpathd's namespace (`host`, the veth end `port`, no address) and the client's (`client`,
/// 192.0.2.2/24 on `peer`). Removed on drop.
struct Veth {
    host: String,
    client: String,
    port: String,
    peer: String,
}

impl Veth {
    fn new() -> Veth {
        let id = std::process::id() % 100_000;
        let v = Veth {
            host: format!("fpx{id}h"),
            client: format!("fpx{id}c"),
            port: format!("fxp{id}"),
            peer: format!("fxc{id}"),
        };
        ip(&["netns", "add", &v.host]);
        ip(&["netns", "add", &v.client]);
        ip(&["link", "add", "dev", &v.port, "type", "veth", "peer", "name", &v.peer]);
        ip(&["link", "set", "dev", &v.port, "netns", &v.host]);
        ip(&["link", "set", "dev", &v.peer, "netns", &v.client]);
        ip(&["-n", &v.host, "link", "set", "lo", "up"]);
        ip(&["-n", &v.host, "link", "set", "dev", &v.port, "up"]);
        // The host's kernel keeps quiet on the port: what is answered is fastpathd's.
        let q = format!("net.ipv6.conf.{}.disable_ipv6=1", v.port);
        assert!(ns_exec(&v.host, &["sysctl", "-qw", &q]).status.success());
        ip(&["-n", &v.client, "link", "set", "lo", "up"]);
        ip(&["-n", &v.client, "addr", "add", "192.0.2.2/24", "dev", &v.peer]);
        ip(&["-n", &v.client, "link", "set", "dev", &v.peer, "up"]);
        // UDP checksums on the wire, as a NIC puts them there (veth leaves them to nobody).
        let out = ns_exec(&v.client, &["ethtool", "-K", &v.peer, "tx", "off"]);
        assert!(out.status.success(), "ethtool");
        v
    }

    fn client(&self, cmd: &[&str]) -> Output {
        ns_exec(&self.client, cmd)
    }

    /// The XDP program attached to the port, as `ip link` shows it (empty if none).
    fn xdp_prog(&self) -> String {
        let out = Command::new("ip")
            .args(["-n", &self.host, "-d", "link", "show", "dev", &self.port])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        text.lines()
            .filter(|l| l.contains("prog/xdp"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn mac(&self) -> String {
        let out = Command::new("ip")
            .args(["-n", &self.host, "-br", "link", "show", "dev", &self.port])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        text.split_whitespace().nth(2).unwrap_or_default().to_string()
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.host]).status();
        let _ = Command::new("ip").args(["netns", "del", &self.client]).status();
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// A UDP datagram to 192.0.2.1:PORT from the client: prints "refused" (an ICMP port
/// unreachable came back), "timeout" or what was received.
const UDP: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
s.connect(("192.0.2.1", int(sys.argv[1])))
s.send(b"to nobody")
try:
    print(s.recv(100))
except ConnectionRefusedError:
    print("refused")
except socket.timeout:
    print("timeout")
"#;

#[test]
fn arp_ping_and_udp_are_answered_through_an_af_xdp_socket_on_a_veth() {
    if missing(&["hugepages"]) {
        return;
    }
    let v = Veth::new();
    let s = Scratch::new("af-xdp");
    let huge = HugePrefix::new("afxdp", 96);
    let cfg = s.write(
        "c.toml",
        &format!(
            "[dpdk]\neal_args = {}\nmbufs = 8191\n\n[[port]]\ndevice = \"net_af_xdp0\"\nrx_queues = 1\n\
             tx_queues = 1\nipv4 = [\"192.0.2.1/24\"]\n\n[lcores]\nrx = [0]\n{METRICS_ANY_PORT}\
             cache_ms = 0\n\n[reassembly]\nbuffers = 32\n",
            huge.eal_args(&[format!("--vdev=net_af_xdp0,iface={}", v.port)]),
        ),
    );
    let check = Command::new("ip")
        .args([
            "netns",
            "exec",
            &v.host,
            env!("CARGO_BIN_EXE_fastpathd"),
            "--check-config",
            "--config",
        ])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    let d = Daemon::start_cmd(
        &s,
        Command::new("ip")
            .args(["netns", "exec", &v.host, env!("CARGO_BIN_EXE_fastpathd"), "--config"])
            .arg(&cfg)
            .args(["--metrics-dump", s.path("dump.prom").to_str().unwrap()]),
    );
    // The driver put its XDP program on the interface: the kernel redirects to the socket.
    assert!(v.xdp_prog().contains("prog/xdp"), "no XDP program on {}", v.port);
    assert!(d.log_text().contains("(net_af_xdp)"), "{}", d.log_text());

    let ping = v.client(&["ping", "-c", "3", "-i", "0.2", "-W", "2", "192.0.2.1"]);
    assert!(ping.status.success(), "ping: {}", stdout(&ping));
    assert!(stdout(&ping).contains("3 received"), "{}", stdout(&ping));
    // ARP answered with the interface's own address (AF_XDP keeps the NIC's MAC).
    let neigh = stdout(&v.client(&["ip", "neigh", "show", "192.0.2.1"]));
    assert!(neigh.contains(&v.mac()), "{neigh} (port mac {})", v.mac());
    // UDP to a port with no service: the RX lcore answers port unreachable (RFC 1122 3.2.2.1).
    let udp = v.client(&["/usr/bin/python3", "-c", UDP, "9"]);
    assert_eq!(stdout(&udp), "refused");

    let m: BTreeMap<String, f64> = d.scrape_in(&v.host);
    assert!(outcome(&m, "arp_reply") >= 1, "{m:?}");
    assert_eq!(outcome(&m, "echo_reply"), 3);
    assert!(outcome(&m, "icmp_error") >= 1, "{m:?}");
    assert_eq!(outcome(&m, "udp_bad_checksum"), 0);
    // The driver's statistics are exported like any port's.
    let rx_xstat = m
        .iter()
        .filter(|(k, _)| k.starts_with("fastpath_port_xstats_total{") && k.contains("rx_good_packets"))
        .map(|(_, v)| *v)
        .sum::<f64>();
    assert!(rx_xstat >= 5.0, "rx_good_packets {rx_xstat}");

    let (code, log) = d.stop();
    assert_eq!(code, Some(0), "fastpathd exit:\n{log}");
    assert!(!log.contains("not returned to the pool"), "an mbuf leaked:\n{log}");
    // What the driver's fill ring still holds is said, not hidden (2048 per queue pair).
    assert!(log.contains("stay with the kernel's AF_XDP rings"), "{log}");
    let dump = parse_metrics(&std::fs::read_to_string(s.path("dump.prom")).unwrap());
    let rx = family_sum(&dump, "fastpath_rx_packets_total");
    assert!(rx >= 5.0, "{rx}");
    assert_eq!(
        rx,
        family_sum(&dump, "fastpath_packets_total"),
        "sum(rx) == sum(outcomes)"
    );
    assert_eq!(
        rx,
        family_sum(&dump, "fastpath_port_rx_packets_total"),
        "the driver's count"
    );
    // The mbufs in use at exit are the fill ring's (and sent ones not yet reaped), no more.
    let in_use = dump["fastpath_mbufs_in_use"];
    assert!((2048.0..=4096.0).contains(&in_use), "{in_use} mbufs in use at exit");
    // Closing the port took the XDP program off: the interface is the kernel's again.
    assert_eq!(v.xdp_prog(), "", "XDP program left on {}", v.port);
    assert!(huge.leftovers().is_empty(), "{:?}", huge.leftovers());
}
