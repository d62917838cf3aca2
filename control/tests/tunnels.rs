//! GRE through the real daemon over DPDK: decapsulation rules, answers back through the tunnel,
//! services forwarding through tunnels (lockless per worker, and a sequence tunnel owned by one
//! worker), the recursion limit; output read back with tshark.

mod common;

use common::*;

fn tunnel(name: &str, remote: &str, extra: &str) -> String {
    format!(
        "\n[[tunnel]]\nname = \"{name}\"\nlocal = \"192.0.2.1\"\nremote = \"{remote}\"\nport = \"net_pcap0\"\n\
         next_hop_mac = \"02:00:00:00:00:fe\"\n{extra}\n"
    )
}

#[test]
fn gre_capture_replay() {
    if missing(&["tshark"]) {
        return;
    }
    let s = Scratch::new("gre");
    let (q0, q1) = (s.path("q0.pcap"), s.path("q1.pcap"));
    let vdev = format!(
        "--vdev=net_pcap0,rx_pcap={},tx_pcap={},tx_pcap={}",
        repo().join("configs/captures/gre.pcap").display(),
        q0.display(),
        q1.display()
    );
    let mut cfg = format!(
        "[dpdk]\neal_args = {}\nmbufs = 32767\n\n[[port]]\ndevice = \"net_pcap0\"\ntx_queues = 2\n\
         ipv4 = [\"192.0.2.1\", \"10.9.0.1\"]\nmac = \"02:00:00:00:00:01\"\n\n[lcores]\nrx = [0]\nworkers = [1]\n\
         idle_sleep_us = 100\n{METRICS_ANY_PORT}\n\
         [[service]]\nname = \"fwd\"\nports = [9000]\nsockets = 2\naction = \"tunnel\"\ntunnels = [\"t-a\", \"t-b\"]\n\n\
         [[service]]\nname = \"fwdseq\"\nports = [9001]\nsockets = 2\naction = \"tunnel\"\ntunnel = \"t-seq\"\n",
        eal_args("gre", &[vdev])
    );
    cfg += &tunnel("t1", "198.51.100.2", "");
    cfg += &tunnel("keyed", "198.51.100.3", "key = 42");
    cfg += &tunnel("csum", "198.51.100.4", "checksum = true");
    cfg += &tunnel("tseq", "198.51.100.5", "sequence = true");
    cfg += &tunnel("t-a", "203.0.113.10", "key = 1");
    cfg += &tunnel("t-b", "203.0.113.11", "key = 2");
    cfg += &tunnel("t-seq", "203.0.113.12", "sequence = true\nchecksum = true");
    let cfg = s.write("c.toml", &cfg);
    let m = run_to_idle(&s, &cfg, 400);
    assert_eq!(assert_conservation(&m), 32);
    for (o, n) in [
        ("echo_reply", 7),
        ("gre_bad_checksum", 2),
        ("gre_unknown_tunnel", 2),
        ("gre_seq_dropped", 2),
        ("gre_recursion", 1),
        ("delivered", 18),
    ] {
        assert_eq!(outcome(&m, o), n, "outcome {o}");
    }
    let gre = |family: &str, t: &str| m[&format!("{family}{{tunnel=\"{t}\"}}")];
    // 1 + 3 layers of the allowed nesting + 3 stripped before the fourth is refused.
    assert_eq!(gre("fastpath_gre_decap_total", "t1"), 7.0);
    assert_eq!(gre("fastpath_gre_seq_dropped_total", "tseq"), 2.0);
    assert_eq!(m["fastpath_gre_recursion_dropped_total"], 1.0);
    assert_eq!(
        gre("fastpath_gre_encap_total", "t-a") + gre("fastpath_gre_encap_total", "t-b"),
        8.0
    );
    assert_eq!(gre("fastpath_gre_encap_total", "t-seq"), 10.0);

    // Answers through the tunnel they came from (RX lcore queue): GRE around an echo reply.
    let back = tshark_checked(
        &q0,
        "gre",
        &[
            "ip.dst",
            "gre.key",
            "gre.checksum.status",
            "icmp.type",
            "icmp.checksum.status",
        ],
    );
    let mut dsts: Vec<String> = back
        .iter()
        .map(|r| r[0].split(',').next().unwrap().to_string())
        .collect();
    dsts.sort();
    assert_eq!(
        dsts,
        ["198.51.100.2", "198.51.100.2", "198.51.100.3", "198.51.100.4"],
        "{back:?}"
    );
    for r in &back {
        assert_eq!(r[3], "0", "an echo reply inside: {r:?}");
        assert_eq!(r[4], "1", "good ICMP checksum: {r:?}");
    }
    assert!(
        back.iter().any(|r| r[1] == "0x0000002a"),
        "the keyed tunnel's key on the way back: {back:?}"
    );
    assert!(
        back.iter().any(|r| r[2] == "1"),
        "the checksummed tunnel's GRE checksum is good"
    );
    // A sequence tunnel's numbers belong to its owning worker: the RX lcore hands it the
    // answers, which leave numbered on the worker's queue; nothing leaves bare.
    assert_eq!(tshark_fields(&q0, "icmp && !gre", &["icmp.type"]).len(), 0);
    let seq = tshark_fields(
        &q1,
        "gre && ip.dst == 198.51.100.5 && icmp.type == 0",
        &["gre.sequence_number"],
    );
    assert_eq!(seq.len(), 3, "{seq:?}");

    // Services forwarding through tunnels (the worker's own queue).
    let fwd = tshark_checked(
        &q1,
        "gre && udp.dstport == 9000",
        &["ip.dst", "gre.key", "ip.checksum.status", "udp.srcport"],
    );
    assert_eq!(fwd.len(), 8);
    let mut keys: Vec<&str> = fwd.iter().map(|r| r[1].as_str()).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(
        keys,
        ["0x00000001", "0x00000002"],
        "flows spread over both tunnels by hash: {fwd:?}"
    );
    for r in &fwd {
        let want = if r[1] == "0x00000001" {
            "203.0.113.10"
        } else {
            "203.0.113.11"
        };
        assert!(r[0].starts_with(want), "{r:?}");
        assert!(r[2].starts_with('1'), "outer IPv4 checksum good: {r:?}");
    }
    // The sequence tunnel: strictly increasing numbers in wire order, checksums good.
    let seq = tshark_checked(
        &q1,
        "gre && udp.dstport == 9001",
        &["gre.sequence_number", "gre.checksum.status"],
    );
    let nums: Vec<u32> = seq.iter().map(|r| r[0].parse().unwrap()).collect();
    assert_eq!(nums, (1..=10).collect::<Vec<u32>>(), "{seq:?}");
    assert!(seq.iter().all(|r| r[1] == "1"));
}

/// The tunnel MTU rule on a 1500-byte path with 28 bytes of tunnel overhead: DF or IPv6 inside gets
/// ICMP Fragmentation Needed / Packet Too Big with MTU 1472 back to its sender; IPv4 without DF is
/// encapsulated and sent in outer fragments that tshark reassembles.
#[test]
fn packets_too_big_for_the_tunnel() {
    if missing(&["tshark"]) {
        return;
    }
    let s = Scratch::new("gre-mtu");
    let q1 = s.path("q1.pcap");
    let vdev = format!(
        "--vdev=net_pcap0,rx_pcap={},tx_pcap=/dev/null,tx_pcap={}",
        repo().join("configs/captures/gre_mtu.pcap").display(),
        q1.display()
    );
    let cfg = format!(
        "[dpdk]\neal_args = {}\nmbufs = 16383\n\n[[port]]\ndevice = \"net_pcap0\"\ntx_queues = 2\n\
         ipv4 = [\"192.0.2.1\"]\nipv6 = [\"2001:db8::1\"]\nmac = \"02:00:00:00:00:01\"\n\n\
         [lcores]\nrx = [0]\nworkers = [1]\nidle_sleep_us = 100\n{METRICS_ANY_PORT}\n\
         [[service]]\nname = \"fwd\"\nports = [9000]\nsockets = 1\naction = \"tunnel\"\ntunnel = \"t-a\"\n{}",
        eal_args("gre-mtu", &[vdev]),
        tunnel("t-a", "203.0.113.10", "key = 1")
    );
    let cfg = s.write("c.toml", &cfg);
    let m = run_to_idle(&s, &cfg, 300);
    assert_eq!(assert_conservation(&m), 3);
    assert_eq!(m["fastpath_gre_too_big_total{tunnel=\"t-a\"}"], 3.0);
    let icmp = tshark_checked(
        &q1,
        "icmp || icmpv6",
        &[
            "ip.dst",
            "ipv6.dst",
            "icmp.type",
            "icmp.code",
            "icmp.mtu",
            "icmpv6.type",
            "icmpv6.mtu",
            "icmp.checksum.status",
            "icmpv6.checksum.status",
        ],
    );
    assert_eq!(icmp.len(), 2, "{icmp:?}");
    let v4 = icmp.iter().find(|r| !r[0].is_empty()).unwrap();
    assert_eq!(
        (
            v4[0].split(',').next().unwrap(),
            &v4[2][..],
            &v4[3][..],
            &v4[4][..],
            &v4[7][..]
        ),
        ("203.0.113.7", "3", "4", "1472", "1")
    );
    let v6 = icmp.iter().find(|r| r[0].is_empty()).unwrap();
    assert_eq!(
        (v6[1].split(',').next().unwrap(), &v6[5][..], &v6[6][..], &v6[8][..]),
        ("2001:db8:9::7", "2", "1472", "1")
    );
    // The DF-clear datagram went through the tunnel in two outer fragments.
    let frags = tshark_fields(&q1, "ip.dst == 203.0.113.10", &["frame.len", "ip.flags.mf"]);
    assert_eq!(frags.len(), 2, "{frags:?}");
    assert!(frags.iter().all(|f| f[0].parse::<usize>().unwrap() <= 1514));
    let whole = tshark_checked(&q1, "gre && udp.srcport == 7002", &["udp.length", "gre.key"]);
    assert_eq!(
        whole,
        vec![vec!["1480", "0x00000001"]],
        "reassembled by tshark, inner datagram intact"
    );
}

/// A `tunnel` service's backend is chosen by Maglev. Two nodes with the same tunnels (listed in
/// another order) send every flow to the same backend; draining one moves its flows and no other.
#[test]
fn maglev_choice_agrees_across_nodes_and_a_drain_moves_only_its_flows() {
    if missing(&["tshark"]) {
        return;
    }
    let s = Scratch::new("maglev");
    let input = s.path("flows.pcap");
    let gen = std::process::Command::new("/usr/bin/python3")
        .args([
            "-c",
            &format!(
                "from scapy.all import Ether, IP, UDP, wrpcap\n\
                 e = Ether(src='02:00:00:00:00:02', dst='02:00:00:00:00:01')\n\
                 wrpcap('{}', [e/IP(src='198.51.100.%d' % (1 + i % 50), dst='192.0.2.1')/UDP(sport=20000 + i, dport=9000)/b'flow' for i in range(600)])\n",
                input.display()
            ),
        ])
        .output()
        .unwrap();
    assert!(gen.status.success(), "{}", String::from_utf8_lossy(&gen.stderr));
    // Runs one node with the tunnels in `order`, `extra` added to tunnel b2; returns source port
    // -> GRE remote for every packet it sent into a tunnel.
    let node = |name: &str, order: &[&str], b2_extra: &str| -> std::collections::BTreeMap<String, String> {
        let out = s.path(&format!("{name}-q1.pcap"));
        let vdev = format!(
            "--vdev=net_pcap0,rx_pcap={},tx_pcap=/dev/null,tx_pcap={}",
            input.display(),
            out.display()
        );
        let list = order.iter().map(|t| format!("{t:?}")).collect::<Vec<_>>().join(", ");
        let mut cfg = format!(
            "[dpdk]\neal_args = {}\nmbufs = 16383\n\n[[port]]\ndevice = \"net_pcap0\"\ntx_queues = 2\n\
             ipv4 = [\"192.0.2.1\"]\nmac = \"02:00:00:00:00:01\"\n\n[lcores]\nrx = [0]\nworkers = [1]\n\
             idle_sleep_us = 100\n{METRICS_ANY_PORT}\n\
             [[service]]\nname = \"lb\"\nports = [9000]\nsockets = 1\nsocket_capacity = 1024\naction = \"tunnel\"\n\
             tunnels = [{list}]\n",
            eal_args(&format!("maglev-{name}"), &[vdev])
        );
        for t in order {
            let remote = match *t {
                "b1" => "203.0.113.1",
                "b2" => "203.0.113.2",
                _ => "203.0.113.3",
            };
            cfg += &tunnel(t, remote, if *t == "b2" { b2_extra } else { "" });
        }
        let cfg = s.write(&format!("{name}.toml"), &cfg);
        let m = run_to_idle(&s, &cfg, 400);
        assert_eq!(assert_conservation(&m), 600);
        assert_eq!(outcome(&m, "delivered"), 600, "{name}");
        tshark_checked(&out, "gre && udp", &["udp.srcport", "ip.dst"])
            .into_iter()
            .map(|r| (r[0].clone(), r[1].split(',').next().unwrap().to_string()))
            .collect()
    };
    let a = node("a", &["b1", "b2", "b3"], "");
    let b = node("b", &["b3", "b1", "b2"], "");
    assert_eq!(a.len(), 600, "every flow was sent into a tunnel");
    assert_eq!(
        a, b,
        "the same tunnels in another order choose the same backend for every flow"
    );
    for remote in ["203.0.113.1", "203.0.113.2", "203.0.113.3"] {
        let n = a.values().filter(|r| *r == remote).count();
        assert!((140..=260).contains(&n), "{remote} took {n} of 600 flows");
    }
    let c = node("c", &["b1", "b2", "b3"], "drain = true");
    assert_eq!(c.len(), 600);
    // Maglev moves the drained backend's flows and at most a few others (the table is rebuilt
    // without it): at most 2% of the flows that stayed.
    let mut others_moved = 0;
    for (port, before) in &a {
        let after = &c[port];
        if before == "203.0.113.2" {
            assert_ne!(after, "203.0.113.2", "flow {port} still on the drained backend");
        } else if after != before {
            others_moved += 1;
        }
    }
    assert!(
        others_moved * 50 <= 600,
        "{others_moved} flows of the other backends moved"
    );
}

/// A namespace pair for the health-check test: `c` sends the traffic and sees the GRE that
/// comes back; `d` runs fastpathd (`net_af_packet` on its veth end) and the backends' check
/// targets, listeners on addresses of its loopback. Both removed on drop, listeners first.
struct HealthLab {
    c: String,
    d: String,
    ifc: String,
    ifd: String,
    listeners: std::collections::BTreeMap<&'static str, std::process::Child>,
}

/// A check target: `tcp` accepts and closes, `http` answers every request 200.
const LISTENER_PY: &str = "import socket, sys\n\
    mode, addr = sys.argv[1], sys.argv[2]\n\
    s = socket.socket()\n\
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
    s.bind((addr, 8080))\n\
    s.listen(128)\n\
    print('ready', flush=True)\n\
    while True:\n\
    \x20   c, _ = s.accept()\n\
    \x20   if mode == 'http':\n\
    \x20       c.recv(4096)\n\
    \x20       c.sendall(b'HTTP/1.0 200 OK\\r\\nContent-Length: 2\\r\\n\\r\\nok')\n\
    \x20   c.close()\n";

impl HealthLab {
    fn new() -> HealthLab {
        let id = std::process::id() % 100_000;
        let lab = HealthLab {
            c: format!("fph{id}c"),
            d: format!("fph{id}d"),
            ifc: format!("fphc{id}"),
            ifd: format!("fphd{id}"),
            listeners: Default::default(),
        };
        ip(&["netns", "add", &lab.c]);
        ip(&["netns", "add", &lab.d]);
        ip(&["link", "add", &lab.ifc, "type", "veth", "peer", "name", &lab.ifd]);
        for (ns, ifname) in [(&lab.c, &lab.ifc), (&lab.d, &lab.ifd)] {
            ip(&["link", "set", ifname, "netns", ns]);
            ip(&["-n", ns, "link", "set", ifname, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            // Neither kernel speaks on the veth: only scapy and fastpathd do.
            let _ = ns_exec(
                ns,
                &["sysctl", "-qw", &format!("net.ipv6.conf.{ifname}.disable_ipv6=1")],
            );
        }
        for a in ["10.99.0.1/32", "10.99.0.2/32", "10.99.0.3/32"] {
            ip(&["-n", &lab.d, "addr", "add", a, "dev", "lo"]);
        }
        lab
    }

    fn mac(&self, ns: &str, ifname: &str) -> String {
        let out = ns_exec(ns, &["cat", &format!("/sys/class/net/{ifname}/address")]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Starts backend `name`'s check target and waits until it listens.
    fn listen(&mut self, name: &'static str, mode: &str, addr: &str) {
        use std::io::BufRead;
        let mut child = std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.d,
                "/usr/bin/python3",
                "-c",
                LISTENER_PY,
                mode,
                addr,
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "listener {name} on {addr}");
        self.listeners.insert(name, child);
    }

    /// Kills backend `name`'s check target: its port is closed once this returns.
    fn kill(&mut self, name: &str) {
        let mut child = self.listeners.remove(name).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Sends one datagram of each of 300 flows to the service from `c` and returns source
    /// port -> GRE remote for every one fastpathd sent into a tunnel.
    fn batch(&self, s: &Scratch, name: &str, port_mac: &str) -> std::collections::BTreeMap<String, String> {
        self.batch_from(s, name, port_mac, 20000)
    }

    /// [`Lab::batch`] from source ports `first`..`first + 300`.
    fn batch_from(
        &self,
        s: &Scratch,
        name: &str,
        port_mac: &str,
        first: u16,
    ) -> std::collections::BTreeMap<String, String> {
        let mac = self.mac(&self.c, &self.ifc);
        let cap = Capture::start(&self.c, &self.ifc, s.path(&format!("{name}.pcap")));
        let out = ns_exec(
            &self.c,
            &[
                "/usr/bin/python3",
                "-c",
                &format!(
                    "from scapy.all import Ether, IP, UDP, sendp\n\
                     e = Ether(src='{mac}', dst='{port_mac}')\n\
                     sendp([e/IP(src='198.51.100.%d' % (1 + i % 50), dst='192.0.2.1')/UDP(sport={first} + i, dport=9000)/b'flow' \
                     for i in range(300)], iface='{}', verbose=False)\n",
                    self.ifc
                ),
            ],
        );
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let pcap = s.path(&format!("{name}.pcap"));
        // Until all 300 came back (the worker sends them within milliseconds).
        wait_for(10, "300 flows back through the tunnels", || {
            tshark_fields(&pcap, "gre && udp.dstport == 9000", &["udp.srcport"]).len() >= 300
        });
        cap.finish();
        let got: std::collections::BTreeMap<String, String> =
            tshark_checked(&pcap, "gre && udp.dstport == 9000", &["udp.srcport", "ip.dst"])
                .into_iter()
                .map(|r| (r[0].clone(), r[1].split(',').next().unwrap().to_string()))
                .collect();
        assert_eq!(got.len(), 300, "{name}: every flow once");
        got
    }
}

impl Drop for HealthLab {
    fn drop(&mut self) {
        for (_, mut l) in std::mem::take(&mut self.listeners) {
            let _ = l.kill();
            let _ = l.wait();
        }
        for ns in [&self.c, &self.d] {
            let _ = std::process::Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Polls until backend `name` is `up` (false: down); the time it took.
fn until_state(sock: &std::path::Path, name: &str, up: bool, limit: std::time::Duration) -> std::time::Duration {
    let t = std::time::Instant::now();
    while tunnel_row(sock, name)["up"] != up {
        assert!(
            t.elapsed() < limit + std::time::Duration::from_secs(10),
            "{name} never went {}",
            if up { "up" } else { "down" }
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    t.elapsed()
}

/// Backend health checks end to end: three backends of one `tunnel` service, whose checks are
/// real listeners (TCP for b1 and b2, HTTP for b3) in the daemon's namespace. Killing b1's
/// listener takes it down within fall × interval + timeout + one interval, its flows move and
/// no others, a reload keeps it down; bringing it back restores every flow's backend after
/// `rise` checks; with every listener gone the service keeps sending to all of them.
#[test]
fn a_backend_failing_its_health_check_leaves_the_table_and_returns() {
    use std::time::Duration;
    let s = Scratch::new("health");
    let mut lab = HealthLab::new();
    lab.listen("b1", "tcp", "10.99.0.1");
    lab.listen("b2", "tcp", "10.99.0.2");
    lab.listen("b3", "http", "10.99.0.3");
    let client_mac = lab.mac(&lab.c, &lab.ifc);
    let port_mac = lab.mac(&lab.d, &lab.ifd);
    let (interval, timeout, rise, fall) = (400u64, 200u64, 2u64, 3u64);
    let timing = format!(
        "health_interval_ms = {interval}\nhealth_timeout_ms = {timeout}\nhealth_rise = {rise}\nhealth_fall = {fall}"
    );
    let vdev = format!("--vdev=net_af_packet0,iface={},qpairs=2", lab.ifd);
    let mut cfg = format!(
        "[dpdk]\neal_args = {}\nmbufs = 8191\n\n[[port]]\ndevice = \"net_af_packet0\"\nrx_queues = 2\ntx_queues = 2\n\
         ipv4 = [\"192.0.2.1\"]\n\n[lcores]\nrx = [0]\nworkers = [1]\nidle_sleep_us = 100\n{METRICS_ANY_PORT}\n\
         [[service]]\nname = \"lb\"\nports = [9000]\nsockets = 1\naction = \"tunnel\"\ntunnels = [\"b1\", \"b2\", \"b3\"]\n",
        eal_args("health", &[vdev])
    );
    for (name, remote, check) in [
        ("b1", "10.99.0.1", "tcp:8080"),
        ("b2", "10.99.0.2", "tcp:8080"),
        ("b3", "10.99.0.3", "http://remote:8080/healthz"),
    ] {
        cfg += &format!(
            "\n[[tunnel]]\nname = \"{name}\"\nlocal = \"192.0.2.1\"\nremote = \"{remote}\"\nport = \"net_af_packet0\"\n\
             next_hop_mac = \"{client_mac}\"\nhealth = \"{check}\"\n{timing}\n"
        );
    }
    let cfg = s.write("c.toml", &cfg);
    let dump = s.path("metrics.prom");
    let d = Daemon::start_cmd(
        &s,
        std::process::Command::new("ip")
            .args(["netns", "exec", &lab.d, env!("CARGO_BIN_EXE_fastpathd")])
            .args([
                "--config",
                cfg.to_str().unwrap(),
                "--metrics-dump",
                dump.to_str().unwrap(),
            ]),
    );
    let sock = s.path("control.sock");
    // The first checks pass; nobody changed state.
    wait_for(10, "every check passed once", || {
        ["b1", "b2", "b3"]
            .iter()
            .all(|b| tunnel_row(&sock, b)["health_last"] == "ok")
    });
    let all = lab.batch(&s, "all", &port_mac);
    for remote in ["10.99.0.1", "10.99.0.2", "10.99.0.3"] {
        let n = all.values().filter(|r| *r == remote).count();
        assert!((50..=150).contains(&n), "{remote} took {n} of 300 flows");
    }

    // b1's listener dies: down within fall × interval + timeout (+ one interval of slack).
    lab.kill("b1");
    let bound = Duration::from_millis(fall * interval + timeout + interval);
    let took = until_state(&sock, "b1", false, bound);
    eprintln!(
        "b1 down {} ms after its listener died (bound {} ms)",
        took.as_millis(),
        bound.as_millis()
    );
    assert!(took <= bound, "b1 went down after {took:?}, more than {bound:?}");
    let row = tunnel_row(&sock, "b1");
    assert!(row["health_last"].as_str().unwrap().contains("refused"), "{row}");
    assert_eq!(row["transitions"], serde_json::json!({"up": 0, "down": 1}));
    let text = std::process::Command::new(env!("CARGO_BIN_EXE_fastpathctl"))
        .arg("--socket")
        .arg(&sock)
        .args(["show", "tunnels"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout).to_string();
    let b1 = text
        .lines()
        .find(|l| l.starts_with("b1 "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(b1.contains("tcp:8080") && b1.contains("false"), "{text}");
    assert!(text.lines().next().unwrap().contains("HEALTH"), "{text}");
    // A reload of the unchanged file keeps it down (same name, same check).
    d.signal("HUP");
    wait_for(10, "the reload", || {
        d.log_text().contains("reload (SIGHUP): generation")
    });
    assert_eq!(tunnel_row(&sock, "b1")["up"], false, "the reload kept b1's state");
    let down = lab.batch(&s, "b1-down", &port_mac);
    let mut others_moved = 0;
    for (port, before) in &all {
        let after = &down[port];
        if before == "10.99.0.1" {
            assert_ne!(after, "10.99.0.1", "flow {port} still sent to the down backend");
        } else if after != before {
            others_moved += 1;
        }
    }
    // Maglev: the rest keep their backend (a few slots may shift in the refill: at most 2%).
    assert!(
        others_moved * 50 <= 300,
        "{others_moved} flows of the healthy backends moved"
    );

    // b1 comes back after `rise` passing checks. The connection table keeps every flow where
    // it is (b1's moved flows stay on their new backends: moving them back would break them
    // again); new flows follow the table with b1 in it.
    lab.listen("b1", "tcp", "10.99.0.1");
    let bound = Duration::from_millis(rise * interval + timeout + interval);
    let took = until_state(&sock, "b1", true, bound);
    eprintln!(
        "b1 up {} ms after its listener came back (bound {} ms)",
        took.as_millis(),
        bound.as_millis()
    );
    assert!(took <= bound, "b1 came back after {took:?}, more than {bound:?}");
    let back = lab.batch(&s, "b1-back", &port_mac);
    assert_eq!(back, down, "tracked flows stay where they are");
    let fresh = lab.batch_from(&s, "b1-back-new", &port_mac, 30000);
    let to_b1 = fresh.values().filter(|b| *b == "10.99.0.1").count();
    assert!(
        (60..=140).contains(&to_b1),
        "{to_b1} of 300 new flows to b1 (a third expected)"
    );

    // Every check fails: the service keeps all three (the table with every backend).
    for b in ["b1", "b2", "b3"] {
        lab.kill(b);
    }
    for b in ["b1", "b2", "b3"] {
        until_state(
            &sock,
            b,
            false,
            Duration::from_millis(fall * interval + timeout + interval),
        );
    }
    wait_for(5, "the service reported failing open", || {
        d.log_text()
            .contains("service lb: every backend fails its health check")
    });
    let status = ctl_json(&sock, &["status"]);
    let reasons = status["backends"].to_string();
    assert!(
        reasons.contains("backend b3 down") && reasons.contains("service lb: every backend"),
        "{status}"
    );
    assert_eq!(status["health"]["ok"], true, "backends do not fail /healthz: {status}");
    let m = d.scrape_in(&lab.d);
    assert_eq!(m["fastpath_backend_up{tunnel=\"b1\"}"], 0.0);
    assert_eq!(m["fastpath_backend_transitions_total{tunnel=\"b1\",to=\"down\"}"], 2.0);
    assert_eq!(m["fastpath_backend_transitions_total{tunnel=\"b1\",to=\"up\"}"], 1.0);
    assert_eq!(m["fastpath_service_backends_all_down{service=\"lb\"}"], 1.0);
    let open = lab.batch(&s, "all-down", &port_mac);
    assert_eq!(open, back, "every backend down: tracked flows stay where they are");
    let fresh = lab.batch_from(&s, "all-down-new", &port_mac, 40000);
    for b in ["10.99.0.1", "10.99.0.2", "10.99.0.3"] {
        let n = fresh.values().filter(|x| *x == b).count();
        assert!(
            (60..=140).contains(&n),
            "{n} of 300 new flows to {b}: sent to all of them"
        );
    }

    let (code, log) = d.stop();
    assert_eq!(code, Some(0));
    assert_eq!(log.matches("backend b1 down:").count(), 2, "one line per change");
    assert_eq!(log.matches("backend b1 up:").count(), 1, "one line per change");
    let m = parse_metrics(&std::fs::read_to_string(&dump).unwrap());
    assert_eq!(outcome(&m, "delivered"), 1800);
    assert_conservation(&m);
}
