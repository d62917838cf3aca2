//! Real-peer tests: fastpathd on one end of a veth pair through DPDK `net_af_packet`, the Linux
//! kernel on the other, each end in a network namespace the test creates (and always removes).
//! The kernel is the oracle: its ARP/NDP, ping, and UDP sockets must accept what we send.

mod common;

use common::*;
use std::process::{Command, Output};
use std::time::Duration;

/// [`VethPair`] (`a` for fastpathd, `b` for the kernel peer, which also has 2001:db8::2/64 and
/// puts checksums on the wire).
struct Peer(VethPair);

impl std::ops::Deref for Peer {
    type Target = VethPair;
    fn deref(&self) -> &VethPair {
        &self.0
    }
}

impl Peer {
    fn new() -> Peer {
        let p = Peer(VethPair::new("fpt"));
        ip(&["-n", &p.ns_b, "addr", "add", "2001:db8::2/64", "dev", &p.if_b, "nodad"]);
        p.checksums_on_wire();
        p
    }

    fn exec_b(&self, cmd: &[&str]) -> Output {
        ns_exec(&self.ns_b, cmd)
    }

    /// A Python snippet run by the peer's kernel side.
    fn python_b(&self, code: &str) -> Output {
        self.exec_b(&["/usr/bin/python3", "-c", code])
    }

    /// Starts fastpathd in namespace a with `extra` config appended; returns the daemon.
    fn start(&self, s: &Scratch, name: &str, extra: &str, dump: &std::path::Path) -> Daemon {
        self.start_with(s, name, "", &[], extra, dump)
    }

    /// Like [`Peer::start`] with more local IPv4 addresses, more vdevs and more `[[port]]`s.
    fn start_with(
        &self,
        s: &Scratch,
        name: &str,
        more_ipv4: &str,
        more_vdevs: &[String],
        extra: &str,
        dump: &std::path::Path,
    ) -> Daemon {
        // af_packet spreads received packets over qpairs sockets with PACKET_FANOUT, so every
        // queue pair it opens is polled (rx_queues = qpairs).
        let mut vdevs = vec![format!("--vdev=net_af_packet0,iface={},qpairs=2", self.if_a)];
        vdevs.extend(more_vdevs.iter().cloned());
        let cfg = s.write(
            "c.toml",
            &format!(
                "[dpdk]\neal_args = {}\nmbufs = 16383\n\n[[port]]\ndevice = \"net_af_packet0\"\nrx_queues = 2\n\
                 tx_queues = 2\nipv4 = [\"192.0.2.1\"{more_ipv4}]\nipv6 = [\"2001:db8::1\"]\n\n[lcores]\nrx = [0]\n\
                 workers = [1]\nidle_sleep_us = 50\n\n[control]\nsocket = \"control.sock\"\n\n[metrics]\nenabled = false\n[reassembly]\nbuffers = 32\n{extra}",
                eal_args(name, &vdevs)
            ),
        );
        Daemon::start_in(s, &self.ns_a, &cfg, dump)
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

/// The kernel's UDP sockets see our ICMP errors: a connected socket's next receive fails with
/// ECONNREFUSED (v4 and v6). The seed's glibc story: 50 back-to-back sends to a closed port from
/// a trusted (exempt) source each get their error; from an untrusted one only the
/// per-destination burst (6) does.
#[test]
fn the_kernel_accepts_our_port_unreachables_and_exempt_sources_get_every_one() {
    let p = Peer::new();
    let out = p.exec_b(&["ip", "addr", "add", "192.0.2.3/24", "dev", &p.if_b]);
    assert!(out.status.success());
    let s = Scratch::new("peer-icmp");
    let dump = s.path("metrics.prom");
    let d = p.start(&s, "peer-icmp", "\n[icmp]\nexempt = [\"192.0.2.2/32\"]\n", &dump);
    let out = p.python_b(
        "import socket, errno\n\
         for fam, addr in ((socket.AF_INET, '192.0.2.1'), (socket.AF_INET6, '2001:db8::1')):\n\
         \x20   s = socket.socket(fam, socket.SOCK_DGRAM); s.settimeout(3); s.connect((addr, 9999))\n\
         \x20   s.send(b'anyone?')\n\
         \x20   try:\n\
         \x20       s.recv(100); raise SystemExit('no error')\n\
         \x20   except ConnectionRefusedError:\n\
         \x20       print('refused', addr)\n\
         def burst(src):\n\
         \x20   s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((src, 0)); s.settimeout(0.3)\n\
         \x20   s.connect(('192.0.2.1', 9998)); n = 0\n\
         \x20   for i in range(50):\n\
         \x20       s.send(b'x')\n\
         \x20       try:\n\
         \x20           s.recv(10)\n\
         \x20       except ConnectionRefusedError:\n\
         \x20           n += 1\n\
         \x20       except socket.timeout:\n\
         \x20           s.settimeout(0.05)\n\
         \x20   return n\n\
         print('trusted', burst('192.0.2.2'))\n\
         import time; t = time.time(); n = burst('192.0.2.3')\n\
         print('untrusted', n); print('seconds', time.time() - t)\n",
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("refused 192.0.2.1") && text.contains("refused 2001:db8::1"),
        "{text}"
    );
    assert!(
        text.contains("trusted 50\n"),
        "every one of 50 back-to-back errors reached the exempt client: {text}"
    );
    // One a second refills the per-destination bucket while the loop runs (its time printed).
    let untrusted: f64 = text
        .split("untrusted ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let secs: f64 = text
        .split("seconds ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        untrusted >= 6.0 && untrusted <= 6.0 + secs.ceil(),
        "an untrusted source gets the burst of 6 (+1/s): {text}"
    );
    let (code, _) = d.stop();
    assert_eq!(code, Some(0));
    let m = parse_metrics(&std::fs::read_to_string(&dump).unwrap());
    assert_conservation(&m);
    assert_eq!(
        m["fastpath_icmp_rate_limited_total{family=\"ipv4\",limit=\"peer\"}"],
        50.0 - untrusted
    );
}

/// The kernel's TCP accepts our resets (RFC 9293 §3.10.7.1): a connect to a port without a
/// service fails at once with ECONNREFUSED, v4 and v6, which the kernel allows only for a reset
/// that acknowledges its SYN exactly (§3.10.7.3, SYN-SENT). The per-destination limit then holds
/// (burst 3, no refill during the test): the 4th and 5th connect from the same address time out.
#[test]
fn the_kernel_gets_econnrefused_from_our_resets_within_the_limits() {
    let p = Peer::new();
    let s = Scratch::new("peer-rst");
    let dump = s.path("metrics.prom");
    let extra = "\n[tcp_reset]\npeer_burst = 3\npeer_interval_ms = 600000\n";
    let d = p.start(&s, "peer-rst", &format!("{ECHO_SERVICE}{extra}"), &dump);
    let out = p.python_b(
        "import socket, time\n\
         def attempt(fam, addr, timeout):\n\
         \x20   s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(timeout); t = time.time()\n\
         \x20   try:\n\
         \x20       s.connect((addr, 2222)); return 'connected'\n\
         \x20   except ConnectionRefusedError:\n\
         \x20       return 'refused %.3f' % (time.time() - t)\n\
         \x20   except socket.timeout:\n\
         \x20       return 'timeout'\n\
         \x20   finally:\n\
         \x20       s.close()\n\
         print('v4', attempt(socket.AF_INET, '192.0.2.1', 3))\n\
         print('v6', attempt(socket.AF_INET6, '2001:db8::1', 3))\n\
         print('more', ','.join(attempt(socket.AF_INET, '192.0.2.1', 0.4).split()[0] for _ in range(4)))\n",
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text} {}", String::from_utf8_lossy(&out.stderr));
    let took = |fam: &str| -> f64 {
        let line = text.lines().find(|l| l.starts_with(fam)).unwrap_or_default();
        assert!(line.starts_with(&format!("{fam} refused ")), "{fam}: {text}");
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    // Refused by the first SYN's answer, not after the kernel's 1 s retransmission.
    assert!(took("v4") < 0.9 && took("v6") < 0.9, "{text}");
    assert!(
        text.contains("more refused,refused,timeout,timeout"),
        "burst of 3 per destination: {text}"
    );
    let (code, _) = d.stop();
    assert_eq!(code, Some(0));
    let m = parse_metrics(&std::fs::read_to_string(&dump).unwrap());
    assert_conservation(&m);
    assert_eq!(outcome(&m, "tcp_reset"), 4);
    assert_eq!(m["fastpath_tcp_resets_sent_total{family=\"ipv4\"}"], 3.0);
    assert_eq!(m["fastpath_tcp_resets_sent_total{family=\"ipv6\"}"], 1.0);
    // Each timed-out connect is one SYN (its retransmission would come after 1 s).
    assert_eq!(
        m["fastpath_tcp_resets_rate_limited_total{family=\"ipv4\",limit=\"peer\"}"],
        2.0
    );
    assert_eq!(outcome(&m, "tcp_reset_suppressed"), 2);
}

/// A namespace holding fastpathd on a DPDK `net_tap` port; the kernel side of the tap is the
/// peer (192.0.2.2/24, 2001:db8::2/64). Used where `net_af_packet` cannot show the real thing:
/// its PACKET_FANOUT asks the kernel to defragment (PACKET_FANOUT_FLAG_DEFRAG), so fragments
/// would never reach our reassembly.
struct TapPeer {
    ns: String,
    tap: String,
}

impl TapPeer {
    fn new() -> TapPeer {
        let id = lab_id();
        let p = TapPeer {
            ns: format!("fpt{id}t"),
            tap: format!("fptap{id}"),
        };
        ip(&["netns", "add", &p.ns]);
        ip(&["-n", &p.ns, "link", "set", "lo", "up"]);
        p
    }

    fn exec(&self, cmd: &[&str]) -> Output {
        ns_exec(&self.ns, cmd)
    }

    fn start(&self, s: &Scratch, name: &str, extra: &str, dump: &std::path::Path) -> Daemon {
        self.start_dpdk(s, name, "mbufs = 16383", extra, dump)
    }

    /// Like [`TapPeer::start`] with `dpdk` as the `[dpdk]` keys after `eal_args`.
    fn start_dpdk(&self, s: &Scratch, name: &str, dpdk: &str, extra: &str, dump: &std::path::Path) -> Daemon {
        let cfg = s.write(
            "c.toml",
            &format!(
                "[dpdk]\neal_args = {}\n{dpdk}\n\n[[port]]\ndevice = \"net_tap0\"\nrx_queues = 2\n\
                 tx_queues = 2\nipv4 = [\"192.0.2.1\"]\nipv6 = [\"2001:db8::1\"]\n\n[lcores]\nrx = [0]\n\
                 workers = [1]\nidle_sleep_us = 50\n\n[control]\nsocket = \"control.sock\"\n\n[metrics]\nenabled = false\n[reassembly]\nbuffers = 32\n{extra}",
                // The tap PMD wants as many RX as TX queues; one RX lcore polls both.
                eal_args(name, &[format!("--vdev=net_tap0,iface={}", self.tap)])
            ),
        );
        let d = Daemon::start_in(s, &self.ns, &cfg, dump);
        // The tap exists once the port is up: give the kernel side its addresses.
        ip(&["-n", &self.ns, "addr", "add", "192.0.2.2/24", "dev", &self.tap]);
        ip(&[
            "-n",
            &self.ns,
            "addr",
            "add",
            "2001:db8::2/64",
            "dev",
            &self.tap,
            "nodad",
        ]);
        ip(&["-n", &self.ns, "link", "set", &self.tap, "up"]);
        assert!(self.exec(&["ethtool", "-K", &self.tap, "tx", "off"]).status.success());
        d
    }
}

impl Drop for TapPeer {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

/// 4000-byte datagrams in both directions: the kernel fragments them, we reassemble, answer,
/// and fragment the answer; the kernel reassembles it (UDP echo and ping, v4 and v6).
#[test]
fn big_datagrams_are_reassembled_and_answered_in_fragments() {
    let p = TapPeer::new();
    let s = Scratch::new("peer-frag");
    let dump = s.path("metrics.prom");
    let d = p.start(&s, "peer-frag", ECHO_SERVICE, &dump);
    let out = p.exec(&[
        "/usr/bin/python3",
        "-c",
        "import socket\n\
         for fam, addr in ((socket.AF_INET, '192.0.2.1'), (socket.AF_INET6, '2001:db8::1')):\n\
         \x20   s = socket.socket(fam, socket.SOCK_DGRAM); s.settimeout(3); s.connect((addr, 7))\n\
         \x20   for i in range(3):\n\
         \x20       msg = bytes((i + j) % 251 for j in range(4000))\n\
         \x20       s.send(msg); got = s.recv(65535)\n\
         \x20       assert got == msg, (len(got), i)\n\
         print('big echo ok')\n",
    ]);
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("big echo ok"));
    let out = p.exec(&["ping", "-c", "2", "-i", "0.2", "-W", "2", "-s", "4000", "192.0.2.1"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("2 received"),
        "ping -s 4000"
    );
    let out = p.exec(&[
        "ping",
        "-6",
        "-c",
        "2",
        "-i",
        "0.2",
        "-W",
        "2",
        "-s",
        "4000",
        "2001:db8::1",
    ]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("2 received"),
        "ping -6 -s 4000"
    );
    let (code, _) = d.stop();
    assert_eq!(code, Some(0));
    let m = parse_metrics(&std::fs::read_to_string(&dump).unwrap());
    assert_conservation(&m);
    // 3 UDP datagrams and 2 pings per family, each of 3 fragments.
    assert_eq!(m["fastpath_reasm_completed_total{family=\"ipv4\"}"], 5.0);
    assert_eq!(m["fastpath_reasm_completed_total{family=\"ipv6\"}"], 5.0);
    assert_eq!(outcome(&m, "reassembled"), 20);
}

/// The tap PMD checks UDP checksums on receive (RX offload): the port turns that on, the echo
/// service answers the datagrams it found right and still refuses the ones with a wrong sum (the
/// NIC's "bad" is checked again in software; a unit test shows a "good" is taken as is).
#[test]
fn the_nics_udp_checksum_verdicts_reach_the_echo_service() {
    let p = TapPeer::new();
    let s = Scratch::new("peer-cksum");
    let dump = s.path("metrics.prom");
    let d = p.start(&s, "peer-cksum", ECHO_SERVICE, &dump);
    let out = p.exec(&[
        "/usr/bin/python3",
        "-c",
        "import socket, struct\n\
         def csum(b):\n\
         \x20   if len(b) % 2: b += b'\\0'\n\
         \x20   s = sum(struct.unpack('!%dH' % (len(b) // 2), b))\n\
         \x20   while s >> 16: s = (s & 0xffff) + (s >> 16)\n\
         \x20   return ~s & 0xffff\n\
         u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(3); u.bind(('192.0.2.2', 4000))\n\
         for i in range(3):\n\
         \x20   u.sendto(b'right %d' % i, ('192.0.2.1', 7)); got, _ = u.recvfrom(2048)\n\
         \x20   assert got == b'right %d' % i, got\n\
         r = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)\n\
         for i in range(2):\n\
         \x20   data = b'wrong %d' % i\n\
         \x20   hdr = struct.pack('!HHHH', 4000, 7, 8 + len(data), 0)\n\
         \x20   pseudo = socket.inet_aton('192.0.2.2') + socket.inet_aton('192.0.2.1') + struct.pack('!BBH', 0, 17, 8 + len(data))\n\
         \x20   good = csum(pseudo + hdr + data) or 0xffff\n\
         \x20   bad = good ^ 0x0101\n\
         \x20   r.sendto(struct.pack('!HHHH', 4000, 7, 8 + len(data), bad) + data, ('192.0.2.1', 0))\n\
         u.settimeout(1)\n\
         try:\n\
         \x20   got = u.recvfrom(2048); raise SystemExit('echoed a wrong checksum: %r' % (got,))\n\
         except socket.timeout:\n\
         \x20   pass\n\
         print('checksums ok')\n",
    ]);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("checksums ok"),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, log) = d.stop();
    assert_eq!(code, Some(0));
    assert!(
        log.contains("(net_tap) id 0") && log.contains("rx checksum offload ipv4,udp"),
        "the tap port should check IPv4 and UDP checksums:\n{log}"
    );
    let m = parse_metrics(&std::fs::read_to_string(&dump).unwrap());
    assert_conservation(&m);
    assert_eq!(
        m.get("fastpath_port_info{port=\"net_tap0\",driver=\"net_tap\",rss=\"on\",rx_checksum_offload=\"ipv4,udp\"}"),
        Some(&1.0),
        "{:?}",
        m.keys()
            .filter(|k| k.starts_with("fastpath_port_info"))
            .collect::<Vec<_>>()
    );
    let processed = |result: &str| -> f64 {
        m.iter()
            .filter(|(k, _)| {
                k.starts_with("fastpath_socket_processed_total{") && k.contains(&format!("result=\"{result}\""))
            })
            .map(|(_, v)| v)
            .sum()
    };
    assert_eq!(processed("echoed"), 3.0);
    assert_eq!(processed("invalid"), 2.0);
}

/// Never-completing first fragments from random sources in 10/8 (so no per-source limit binds),
/// sent by a raw socket at `pps` for `secs`. Through a tap: `net_af_packet`'s fanout would have the
/// kernel hold them for its own reassembly.
const FRAGMENT_FLOOD: &str = "import socket, struct, sys, time, random\n\
    secs, pps = float(sys.argv[1]), int(sys.argv[2])\n\
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)\n\
    udp = struct.pack('!HHHH', 40000, 9, 64, 0) + b'x' * 16\n\
    dst = socket.inet_aton('192.0.2.1'); t0 = time.time(); n = 0\n\
    while time.time() - t0 < secs:\n\
    \x20   src = bytes([10, random.randrange(256), random.randrange(256), random.randrange(1, 255)])\n\
    \x20   ip = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + len(udp), random.randrange(1, 65536), 0x2000, 64, 17, 0, src, dst)\n\
    \x20   s.sendto(ip + udp, ('192.0.2.1', 0)); n += 1\n\
    \x20   ahead = n / pps - (time.time() - t0)\n\
    \x20   if ahead > 0: time.sleep(ahead)\n\
    print('fragments', n)\n";

/// UDP datagrams to the slow sink on port 9000 at `pps` for `secs`.
const UDP_FLOOD: &str = "import socket, sys, time\n\
    secs, pps = float(sys.argv[1]), int(sys.argv[2])\n\
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(('192.0.2.1', 9000))\n\
    t0 = time.time(); n = 0\n\
    while time.time() - t0 < secs:\n\
    \x20   s.send(b'y' * 32); n += 1\n\
    \x20   ahead = n / pps - (time.time() - t0)\n\
    \x20   if ahead > 0: time.sleep(ahead)\n\
    print('datagrams', n)\n";

impl TapPeer {
    fn spawn_b(&self, code: &str, args: &[&str]) -> std::process::Child {
        Command::new("ip")
            .args(["netns", "exec", &self.ns, "/usr/bin/python3", "-c", code])
            .args(args)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// The peer forgets our MACs, then pings us over IPv4 and IPv6: ARP, NDP and echo must all
    /// be answered, every time.
    fn arp_ndp_and_ping(&self, when: &str) {
        assert!(self.exec(&["ip", "neigh", "flush", "dev", &self.tap]).status.success());
        for target in [["-4", "192.0.2.1"], ["-6", "2001:db8::1"]] {
            let out = self.exec(&["ping", target[0], "-c", "5", "-i", "0.2", "-W", "2", target[1]]);
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && text.contains("5 received"),
                "{when}: ping {target:?}: {text}"
            );
        }
    }
}

/// With a config that passes the pool budget, the pool cannot run dry. A fragment flood fills the
/// reassembler to its threshold and a flood to a slow sink fills its socket rings, first one then
/// both at once, and the kernel still resolves us by ARP and NDP and gets every ping answered; no
/// RX mbuf allocation ever fails. The same config with 8 MiB of held fragments is refused by
/// `--check-config`.
#[test]
fn arp_ndp_and_ping_keep_working_while_fragments_and_socket_rings_fill() {
    // Budget: RX 2 x 256 + TX 2 x 256 + fragments (2 MiB / 2304 -> 911, + 64) + rings 2 x 1024
    // + caches 2 x 96 + reserve 2 x 32 + 256 = 4559 <= 4800.
    let dpdk = "mbufs = 4800\nmbuf_cache = 64\nrx_desc = 256\ntx_desc = 256";
    let sink = "\n[flow_limit]\nenabled = false\n\n[[service]]\nname = \"slow\"\nports = [9000]\nsockets = 2\n\
                socket_capacity = 1024\naction = \"sink\"\ncost_ns = 10000000\n";
    let reasm = "\n[reassembly]\nbuffers = 32\nhigh_thresh_bytes = 2097152\n";
    let s = Scratch::new("peer-pool");
    // The same with 8 MiB of fragments could take the pool: refused before anything starts.
    let too_much = s.write(
        "too-much.toml",
        &format!(
            "[dpdk]\neal_args = []\n{dpdk}\n\n[[port]]\ndevice = \"net_tap0\"\nrx_queues = 2\ntx_queues = 2\n\
             ipv4 = [\"192.0.2.1\"]\n\n[lcores]\nrx = [0]\nworkers = [1]\n{sink}{}",
            reasm.replace("2097152", "8388608")
        ),
    );
    let out = fastpathd()
        .args(["--config", too_much.to_str().unwrap(), "--check-config"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("held fragments 3705") && err.contains("> dpdk.mbufs 4800"),
        "{err}"
    );

    let p = TapPeer::new();
    let dump = s.path("metrics.prom");
    // `extra` continues the `[reassembly]` table (`buffers = 32`) the start writes.
    let d = p.start_dpdk(
        &s,
        "peer-pool",
        dpdk,
        &format!("high_thresh_bytes = 2097152\n{sink}"),
        &dump,
    );
    p.arp_ndp_and_ping("before any flood");

    let frags = p.spawn_b(FRAGMENT_FLOOD, &["6", "3000"]);
    std::thread::sleep(Duration::from_secs(2));
    p.arp_ndp_and_ping("during the fragment flood");
    let udp = p.spawn_b(UDP_FLOOD, &["3", "3000"]);
    std::thread::sleep(Duration::from_millis(1500));
    p.arp_ndp_and_ping("during the fragment and socket-ring floods");
    for (what, child) in [("fragments", frags), ("datagrams", udp)] {
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains(what), "{what} flood: {text}");
    }

    let (code, log) = d.stop();
    assert_eq!(code, Some(0), "{log}");
    let m = parse_metrics(&std::fs::read_to_string(&dump).unwrap());
    assert_conservation(&m);
    let sum = |f: &str, label: &str| -> f64 {
        m.iter()
            .filter(|(k, _)| k.starts_with(&format!("{f}{{")) && k.contains(label))
            .map(|(_, v)| v)
            .sum()
    };
    // The floods did what they were for: the reassembler reached its threshold (the default
    // probation policy evicting to stay under it) and the sink's rings were full.
    assert!(sum("fastpath_reasm_refused_total", "reason=\"evicted\"") > 0.0, "{m:?}");
    assert!(outcome(&m, "socket_full") > 0, "{m:?}");
    assert_eq!(
        family_sum(&m, "fastpath_port_rx_nombuf_total"),
        0.0,
        "the pool never ran dry"
    );
    assert!(outcome(&m, "arp_reply") >= 3, "{m:?}");
    assert!(outcome(&m, "ndp_reply") >= 3, "{m:?}");
    assert!(outcome(&m, "echo_reply") >= 30, "{m:?}");
}
