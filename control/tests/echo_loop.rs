//! Two fastpathd instances with the same echo service, back to back on a veth pair (each end in
//! a namespace the test creates and removes): one spoofed datagram must not start an endless
//! ping-pong between them (CVE-2024-2169), while a client's datagram is still echoed.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

struct Pair {
    ns: [String; 2],
    ifs: [String; 2],
}

impl Pair {
    fn new() -> Pair {
        let id = std::process::id() % 100_000;
        let p = Pair {
            ns: [format!("fpl{id}a"), format!("fpl{id}b")],
            ifs: [format!("fpla{id}"), format!("fplb{id}")],
        };
        for n in &p.ns {
            ip(&["netns", "add", n]);
        }
        ip(&["link", "add", &p.ifs[0], "type", "veth", "peer", "name", &p.ifs[1]]);
        for i in 0..2 {
            ip(&["link", "set", &p.ifs[i], "netns", &p.ns[i]]);
            ip(&["-n", &p.ns[i], "link", "set", &p.ifs[i], "up"]);
            // Neither kernel speaks on these interfaces: only the two daemons do.
            let _ = ns_exec(
                &p.ns[i],
                &["sysctl", "-qw", &format!("net.ipv6.conf.{}.disable_ipv6=1", p.ifs[i])],
            );
            let out = ns_exec(&p.ns[i], &["ethtool", "-K", &p.ifs[i], "tx", "off"]);
            assert!(out.status.success());
        }
        p
    }

    fn mac(&self, i: usize) -> String {
        let out = ns_exec(
            &self.ns[i],
            &["cat", &format!("/sys/class/net/{}/address", self.ifs[i])],
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn start(&self, s: &Scratch, i: usize, addr: &str, dump: &std::path::Path) -> Daemon {
        let vdev = format!("--vdev=net_af_packet{i},iface={},qpairs=2", self.ifs[i]);
        let cfg = s.write(
            "c.toml",
            &format!(
                "[dpdk]\neal_args = {}\nmbufs = 8191\n\n[[port]]\ndevice = \"net_af_packet{i}\"\n\
                 rx_queues = 2\ntx_queues = 2\nipv4 = [\"{addr}\"]\n\n[lcores]\nrx = [0]\nworkers = [1]\nidle_sleep_us = 50\n\n\
                 [control]\nsocket = \"control{i}.sock\"\n\n[metrics]\nenabled = false\n\n[[service]]\nname = \"echo\"\nports = [5000]\nsockets = 1\n\
                 action = \"echo\"\n",
                eal_args(&format!("loop{i}"), &[vdev])
            ),
        );
        Daemon::start_cmd(
            s,
            Command::new("ip")
                .args(["netns", "exec", &self.ns[i], env!("CARGO_BIN_EXE_fastpathd")])
                .args([
                    "--config",
                    cfg.to_str().unwrap(),
                    "--metrics-dump",
                    dump.to_str().unwrap(),
                ]),
        )
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for n in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

fn processed(m: &BTreeMap<String, f64>, result: &str) -> f64 {
    m.iter()
        .filter(|(k, _)| {
            k.starts_with("fastpath_socket_processed_total{") && k.contains(&format!("result=\"{result}\""))
        })
        .map(|(_, v)| v)
        .sum()
}

#[test]
fn one_spoofed_datagram_does_not_start_a_loop_between_two_echo_servers() {
    let p = Pair::new();
    let (sa, sb) = (Scratch::new("loop-a"), Scratch::new("loop-b"));
    let (da, db) = (sa.path("metrics.prom"), sb.path("metrics.prom"));
    let a = p.start(&sa, 0, "192.0.2.1", &da);
    let b = p.start(&sb, 1, "192.0.2.2", &db);
    let (mac_a, mac_b) = (p.mac(0), p.mac(1));
    // Written onto A's wire as if A had sent them, to B's echo service: from A's own echo port
    // (the loop CVE-2024-2169 describes, with any port number), from the echo port 7, and from
    // a client's port, which must be echoed once (and A, with no service there, answers that
    // echo with a Port Unreachable that B never answers).
    let out = ns_exec(
        &p.ns[0],
        &[
            "/usr/bin/python3",
            "-c",
            &format!(
                "from scapy.all import Ether, IP, UDP, sendp\n\
                 for sport in (5000, 7, 40000):\n\
                 \x20   sendp(Ether(src='{mac_a}', dst='{mac_b}')/IP(src='192.0.2.1', dst='192.0.2.2')/\
                 UDP(sport=sport, dport=5000)/b'reflect me', iface='{}', verbose=False)\n",
                p.ifs[0]
            ),
        ],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // A loop would have bounced thousands of times by now (on this machine ~150,000 a second).
    std::thread::sleep(Duration::from_millis(1500));
    let (ca, _) = a.stop();
    let (cb, _) = b.stop();
    assert_eq!((ca, cb), (Some(0), Some(0)));
    let ma = parse_metrics(&std::fs::read_to_string(&da).unwrap());
    let mb = parse_metrics(&std::fs::read_to_string(&db).unwrap());
    let (rx_a, rx_b) = (assert_conservation(&ma), assert_conservation(&mb));
    assert_eq!(processed(&mb, "refused"), 2.0, "B refused the two reflection ports");
    assert_eq!(processed(&mb, "echoed"), 1.0, "B echoed the client's datagram once");
    assert_eq!(
        processed(&ma, "echoed") + processed(&ma, "refused"),
        0.0,
        "nothing reached A's echo"
    );
    assert_eq!(
        outcome(&ma, "icmp_error"),
        1,
        "A: Port Unreachable about the echo to port 40000"
    );
    assert_eq!(outcome(&mb, "delivered"), 3);
    // Three datagrams in, one echo and one error back: nothing bounced.
    assert!(rx_b <= 5 && rx_a <= 5, "received: A {rx_a}, B {rx_b}");
}
