//! Real-peer tests: fastpathd on one end of a veth pair through DPDK `net_af_packet`, the Linux
//! kernel on the other, each end in a network namespace the test creates (and always removes).
//! The kernel is the oracle: its ARP/NDP, ping, and UDP sockets must accept what we send.

mod common;

use common::*;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// Two namespaces joined by a veth pair: `a` for fastpathd (no address on its end), `b` for the
/// kernel peer with 192.0.2.2/24 and 2001:db8::2/64. Removed on drop, even when a test fails.
struct Peer {
    ns_a: String,
    ns_b: String,
    if_a: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("iproute2 is needed (ci/setup installs it)");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Peer {
    fn new() -> Peer {
        let n = SEQ.fetch_add(1, Ordering::SeqCst);
        let id = format!("{}{n}", std::process::id() % 100_000);
        let p = Peer {
            ns_a: format!("fpt{id}a"),
            ns_b: format!("fpt{id}b"),
            if_a: format!("fpa{id}"),
        };
        let if_b = format!("fpb{id}");
        ip(&["netns", "add", &p.ns_a]);
        ip(&["netns", "add", &p.ns_b]);
        ip(&["link", "add", &p.if_a, "type", "veth", "peer", "name", &if_b]);
        ip(&["link", "set", &p.if_a, "netns", &p.ns_a]);
        ip(&["link", "set", &if_b, "netns", &p.ns_b]);
        ip(&["-n", &p.ns_a, "link", "set", "lo", "up"]);
        ip(&["-n", &p.ns_a, "link", "set", &p.if_a, "up"]);
        // The kernel of namespace a must not speak on fastpathd's interface.
        p.exec_a(&["sysctl", "-qw", &format!("net.ipv6.conf.{}.disable_ipv6=1", p.if_a)]);
        ip(&["-n", &p.ns_b, "link", "set", "lo", "up"]);
        ip(&["-n", &p.ns_b, "addr", "add", "192.0.2.2/24", "dev", &if_b]);
        ip(&["-n", &p.ns_b, "addr", "add", "2001:db8::2/64", "dev", &if_b, "nodad"]);
        ip(&["-n", &p.ns_b, "link", "set", &if_b, "up"]);
        // veth leaves UDP checksums to "hardware" that does not exist on the way to a packet
        // socket: make the peer's kernel compute them, as a real NIC would have them on the wire.
        let out = p.exec_b(&["ethtool", "-K", &if_b, "tx", "off"]);
        assert!(
            out.status.success(),
            "ethtool: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        p
    }

    fn exec_a(&self, cmd: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.ns_a])
            .args(cmd)
            .output()
            .unwrap()
    }

    fn exec_b(&self, cmd: &[&str]) -> Output {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns_b])
            .args(cmd)
            .output()
            .unwrap();
        eprintln!(
            "--- [{}] {cmd:?}: {:?}\n{}{}",
            self.ns_b,
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// A Python snippet run by the peer's kernel side.
    fn python_b(&self, code: &str) -> Output {
        self.exec_b(&["/usr/bin/python3", "-c", code])
    }

    /// Starts fastpathd in namespace a with `extra` config appended; returns the daemon.
    fn start(&self, s: &Scratch, name: &str, extra: &str, dump: &std::path::Path) -> Daemon {
        let cfg = s.write(
            "c.toml",
            &format!(
                "[dpdk]\neal_args = {}\nmbufs = 4095\n\n[[port]]\ndevice = \"net_af_packet0\"\nrx_queues = 2\n\
                 tx_queues = 2\nipv4 = [\"192.0.2.1\"]\nipv6 = [\"2001:db8::1\"]\n\n[lcores]\nrx = [0]\n\
                 workers = [1]\nidle_sleep_us = 50\n\n[metrics]\nenabled = false\n{extra}",
                // af_packet spreads received packets over qpairs sockets with PACKET_FANOUT, so
                // every queue pair it opens is polled (rx_queues = qpairs).
                eal_args(name, &[format!("--vdev=net_af_packet0,iface={},qpairs=2", self.if_a)])
            ),
        );
        let bin = env!("CARGO_BIN_EXE_fastpathd");
        Daemon::start_cmd(
            s,
            Command::new("ip")
                .args(["netns", "exec", &self.ns_a, bin, "--config", cfg.to_str().unwrap()])
                .args(["--metrics-dump", dump.to_str().unwrap()]),
        )
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // Deleting the namespaces removes the veth pair with them.
        let _ = Command::new("ip").args(["netns", "del", &self.ns_a]).status();
        let _ = Command::new("ip").args(["netns", "del", &self.ns_b]).status();
    }
}

const ECHO_SERVICE: &str =
    "\n[[service]]\nname = \"echo\"\nports = [7]\nsockets = 2\nsocket_capacity = 256\naction = \"echo\"\n";

#[test]
fn the_kernel_pings_us_and_talks_to_our_echo_service() {
    let p = Peer::new();
    let s = Scratch::new("peer-basic");
    let dump = s.path("metrics.prom");
    let d = p.start(&s, "peer-basic", ECHO_SERVICE, &dump);

    // ARP, then ICMP echo, with the kernel's own ping.
    let out = p.exec_b(&["ping", "-c", "3", "-i", "0.2", "-W", "2", "192.0.2.1"]);
    assert!(out.status.success(), "ping 192.0.2.1");
    assert!(String::from_utf8_lossy(&out.stdout).contains("3 received"));
    // NDP, then ICMPv6 echo.
    let out = p.exec_b(&["ping", "-6", "-c", "3", "-i", "0.2", "-W", "2", "2001:db8::1"]);
    assert!(out.status.success(), "ping -6 2001:db8::1");
    assert!(String::from_utf8_lossy(&out.stdout).contains("3 received"));
    let neigh = p.exec_b(&["ip", "neigh", "show", "2001:db8::1"]);
    assert!(
        String::from_utf8_lossy(&neigh.stdout).contains("lladdr"),
        "the kernel learned our MAC by NDP"
    );

    // A UDP client gets its datagrams echoed, v4 and v6, by the kernel's own sockets.
    let out = p.python_b(
        "import socket\n\
         for fam, addr in ((socket.AF_INET, '192.0.2.1'), (socket.AF_INET6, '2001:db8::1')):\n\
         \x20   s = socket.socket(fam, socket.SOCK_DGRAM); s.settimeout(3); s.connect((addr, 7))\n\
         \x20   for i in range(10):\n\
         \x20       msg = b'datagram %d via %s' % (i, addr.encode())\n\
         \x20       s.send(msg); got = s.recv(2000)\n\
         \x20       assert got == msg, (got, msg)\n\
         print('echo ok')\n",
    );
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("echo ok"));

    let (code, _) = d.stop();
    assert_eq!(code, Some(0));
    let m = parse_metrics(&std::fs::read_to_string(&dump).unwrap());
    assert_conservation(&m);
    assert!(outcome(&m, "arp_reply") >= 1);
    assert!(outcome(&m, "ndp_reply") >= 1);
    assert_eq!(outcome(&m, "echo_reply"), 6);
    assert_eq!(outcome(&m, "delivered"), 20);
}
