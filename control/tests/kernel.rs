//! The exception path against real programs: fastpathd on one end of a veth pair
//! (`net_af_packet`) in a namespace of its own, with its kernel interface there too; a client
//! namespace on the other end. Behind the kernel interface run a real DNS server (dnsmasq), a
//! kernel TCP server (Python's http.server) and an SSH-like banner server; the client uses kdig,
//! curl and Python. The wire on the client's side is read with tshark.
//!
//! The fastpathd namespace's kernel must not see the veth end fastpathd owns (in production the
//! NIC belongs to DPDK): it gets no IPv6, answers no ARP there and accepts nothing from it
//! (strict reverse-path filter), so everything it receives comes through the kernel interface.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Held by the tests that flood, move bulk data or measure time and CPU: two of them at once on
/// a 2-CPU machine make each other's end-to-end bounds fail (the harness runs two tests of this
/// file at a time; seen: a storm's 15 kdig queries took 10 s beside another).
static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn heavy() -> std::sync::MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}

/// The value of one sample, 0 if absent.
fn sample(m: &BTreeMap<String, f64>, key: &str) -> f64 {
    m.get(key).copied().unwrap_or(0.0)
}

/// Stops the daemon; asserts a clean exit, every mbuf back and every received packet in one
/// outcome at exit (the metrics dump); returns the dump.
fn stop_clean(d: Daemon, s: &Scratch) -> BTreeMap<String, f64> {
    let (code, log) = d.stop();
    assert_eq!(code, Some(0), "fastpathd exit:\n{log}");
    assert!(!log.contains("not returned to the pool"), "an mbuf leaked:\n{log}");
    // The kernel interface's counters are read before it is closed (DPDK complained at every stop).
    assert!(!log.contains("Invalid port_id"), "a closed port was asked for:\n{log}");
    let dump = parse_metrics(&std::fs::read_to_string(s.path("dump.prom")).unwrap());
    assert_conservation(&dump);
    dump
}

/// `sum(rx) == sum(outcomes)` on a live scrape (packets in flight between the two reads of a
/// scrape are counted in both or neither: the lcore's counters are read in one pass).
fn live_conservation(m: &BTreeMap<String, f64>) {
    let rx = family_sum(m, "fastpath_rx_packets_total");
    let outcomes = family_sum(m, "fastpath_packets_total");
    assert!((rx - outcomes).abs() <= 64.0, "rx {rx} outcomes {outcomes}");
}

/// A TCP server that sends an SSH-style banner and echoes one line (what `ssh` needs from the
/// kernel path: a TCP connection both ways).
const BANNER_SERVER: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("::", int(sys.argv[1])))
s.listen(8)
while True:
    c, _ = s.accept()
    c.sendall(b"SSH-2.0-fastpathd_kernel_path\r\n")
    line = c.makefile("rb").readline()
    c.sendall(b"echo " + line)
    c.close()
"#;

const BANNER_CLIENT: &str = r#"
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
f = c.makefile("rb")
banner = f.readline()
c.sendall(b"hello kernel\n")
print(banner.decode().strip(), "|", f.readline().decode().strip())
"#;

/// `connect()` to a port: prints "refused" or "connected".
const CONNECT: &str = r#"
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()
    print("connected")
except ConnectionRefusedError:
    print("refused")
except OSError as e:
    print("error", e)
"#;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn wait_until_listening(h: &Host, what: &str, port: u16, proto: &str) {
    let flag = if proto == "udp" { "-lun" } else { "-ltn" };
    wait_for(10, what, || {
        let out = Command::new("ip")
            .args(["netns", "exec", &h.host, "ss", "-H", flag])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).contains(&format!(":{port} "))
    });
}

/// dnsmasq answering fast.test (A and AAAA) on fastpathd's addresses.
fn start_dnsmasq(h: &mut Host, s: &Scratch) {
    let pid = s.path("dnsmasq.pid");
    let args = [
        "dnsmasq",
        "--no-daemon",
        "--no-resolv",
        "--no-hosts",
        "--bind-interfaces",
        "--listen-address=192.0.2.1",
        "--listen-address=2001:db8::1",
        "--address=/fast.test/198.51.100.77",
        "--address=/fast.test/2001:db8:77::1",
        // Queries up to 4 KiB (dnsmasq 2.90 drops larger ones than its default 1232 unread).
        "--edns-packet-max=4096",
        "--user=root",
    ];
    let pid_arg = format!("--pid-file={}", pid.display());
    let mut cmd: Vec<&str> = args.to_vec();
    cmd.push(&pid_arg);
    h.spawn(&cmd, &s.path("dnsmasq.log"));
    wait_until_listening(h, "dnsmasq listening", 53, "udp");
}

fn kdig(h: &Host, args: &[&str]) -> String {
    let mut cmd = vec!["kdig", "+short", "+time=2", "+retry=1"];
    cmd.extend_from_slice(args);
    stdout(&h.client(&cmd))
}

#[test]
fn dns_http_and_ssh_reach_real_programs_through_the_kernel_interface() {
    if missing(&["dnsmasq", "tshark", "curl"]) {
        return;
    }
    let mut h = Host::new();
    let s = Scratch::new("kernel-programs");
    let web = s.path("www");
    std::fs::create_dir_all(&web).unwrap();
    // 1.5 MB: many segments larger than any single frame, both ways through the kernel path.
    let body: Vec<u8> = (0..1_500_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(web.join("big.bin"), &body).unwrap();
    let d = h.start(
        &s,
        "kernel-programs",
        "\n[[service]]\nname = \"dns\"\nports = [53]\nsockets = 2\nsocket_capacity = 256\naction = \"kernel\"\n\
         \n[[service]]\nname = \"web\"\nprotocol = \"tcp\"\nports = [80]\nsockets = 2\nsocket_capacity = 256\n\
         action = \"kernel\"\n\n[[service]]\nname = \"echo\"\nports = [7]\naction = \"echo\"\n\n\
         [kernel]\npunt = [\"tcp:22\", \"tcp:53\"]\n",
    );
    // The interface exists with the port's addresses and is up.
    let addr = stdout(&h.exec(&["ip", "-o", "addr", "show", "dev", &h.kif]));
    assert!(
        addr.contains("192.0.2.1/24") && addr.contains("2001:db8::1/64"),
        "{addr}"
    );
    let link = stdout(&h.exec(&["ip", "-o", "link", "show", "dev", &h.kif]));
    assert!(link.contains(",UP"), "{link}");
    // It takes no route from a redirect, whoever forged it.
    for family in ["ipv4", "ipv6"] {
        let key = format!("net.{family}.conf.{}.accept_redirects", h.kif);
        let v = stdout(&h.exec(&["sysctl", "-n", &key]));
        assert_eq!(v.trim(), "0", "{key}");
    }
    start_dnsmasq(&mut h, &s);
    let www = web.to_str().unwrap().to_string();
    h.spawn(
        &[
            "/usr/bin/python3",
            "-m",
            "http.server",
            "80",
            "--bind",
            "::",
            "--directory",
            &www,
        ],
        &s.path("http.log"),
    );
    h.spawn(&["/usr/bin/python3", "-c", BANNER_SERVER, "22"], &s.path("banner.log"));
    wait_until_listening(&h, "http.server listening", 80, "tcp");
    wait_until_listening(&h, "banner server listening", 22, "tcp");
    let cap = Capture::start(&h.client, &h.peer, s.path("wire.pcap"));

    // DNS over UDP (the `dns` service, action kernel) and over TCP (punted tcp:53), v4 and v6.
    assert_eq!(kdig(&h, &["@192.0.2.1", "fast.test", "A"]), "198.51.100.77");
    assert_eq!(kdig(&h, &["@2001:db8::1", "fast.test", "AAAA"]), "2001:db8:77::1");
    assert_eq!(kdig(&h, &["@192.0.2.1", "+tcp", "fast.test", "A"]), "198.51.100.77");
    // A query larger than the MTU arrives in fragments: reassembled here, then written into
    // the kernel interface in fragments again, which the kernel reassembles for dnsmasq. Over
    // IPv6: `net_af_packet`'s fanout has the kernel defragment IPv4 before we see it (the
    // datagram would arrive whole, as an oversize frame), not IPv6.
    assert_eq!(
        kdig(
            &h,
            &["@2001:db8::1", "+padding=3000", "+bufsize=4096", "fast.test", "A"]
        ),
        "198.51.100.77"
    );
    // HTTP: a file larger than the MTU, byte for byte, over IPv4 and IPv6.
    for url in ["http://192.0.2.1/big.bin", "http://[2001:db8::1]/big.bin"] {
        let got = s.path("got.bin");
        let out = h.client(&[
            "curl",
            "-s",
            "-m",
            "20",
            "-o",
            got.to_str().unwrap(),
            "-w",
            "%{http_code}",
            url,
        ]);
        assert_eq!(stdout(&out), "200", "{url}");
        assert!(std::fs::read(&got).unwrap() == body, "{url}: the file differs");
    }
    // SSH-like: a punted port (tcp:22) talks both ways.
    let banner = stdout(&h.client_python(BANNER_CLIENT, &["192.0.2.1", "22"]));
    assert_eq!(banner, "SSH-2.0-fastpathd_kernel_path | echo hello kernel");
    // Not punted and no service: the fast path's own reset, as before.
    assert_eq!(stdout(&h.client_python(CONNECT, &["192.0.2.1", "23"])), "refused");
    // The fast path still answers ping itself: one reply per request (the kernel never sees
    // the request, so never answers as well).
    let ping = stdout(&h.client(&["ping", "-c", "3", "-i", "0.2", "-W", "1", "192.0.2.1"]));
    assert!(ping.contains("3 received") && !ping.contains("duplicates"), "{ping}");
    let m = h.scrape();
    let pcap = cap.finish();
    for (k, v) in h
        .scrape()
        .iter()
        .filter(|(k, _)| k.starts_with("fastpath_rx_packets_total"))
    {
        eprintln!("{k} {v}");
    }

    // The wire: one ARP reply for each request for our address, all from the port's MAC; the
    // kernel asked for the client itself (from the port's MAC) and learned it once.
    let mac = stdout(&h.exec(&["cat", &format!("/sys/class/net/{}/address", h.kif)]));
    let port_mac = stdout(&h.exec(&["cat", &format!("/sys/class/net/{}/address", h.port)]));
    assert_eq!(mac, port_mac, "the kernel interface has the port's MAC");
    let asked = tshark_fields(
        &pcap,
        "arp.opcode == 1 && arp.dst.proto_ipv4 == 192.0.2.1",
        &["arp.src.hw_mac"],
    );
    let answered = tshark_fields(
        &pcap,
        "arp.opcode == 2 && arp.src.proto_ipv4 == 192.0.2.1",
        &["arp.src.hw_mac"],
    );
    assert!(!asked.is_empty(), "the client asked for our address");
    assert_eq!(answered.len(), asked.len(), "one ARP reply per request: {answered:?}");
    assert!(answered.iter().all(|r| r[0] == mac), "{answered:?}");
    let kernel_asks = tshark_fields(
        &pcap,
        "arp.opcode == 1 && arp.src.proto_ipv4 == 192.0.2.1 && eth.dst == ff:ff:ff:ff:ff:ff",
        &["arp.src.hw_mac"],
    );
    assert!(
        kernel_asks.len() <= 1,
        "the kernel resolved the client more than once: {kernel_asks:?}"
    );
    // The same for IPv6: one advertisement per solicitation for our address, from the port's
    // MAC; the kernel solicited the client itself, once (multicast; NUD after that is unicast).
    let solicited = tshark_fields(
        &pcap,
        "icmpv6.type == 135 && icmpv6.nd.ns.target_address == 2001:db8::1",
        &["eth.src"],
    );
    let advertised = tshark_fields(
        &pcap,
        "icmpv6.type == 136 && icmpv6.nd.na.target_address == 2001:db8::1",
        &["eth.src"],
    );
    assert!(!solicited.is_empty(), "the client solicited our IPv6 address");
    assert_eq!(advertised.len(), solicited.len(), "one NA per NS: {advertised:?}");
    assert!(advertised.iter().all(|r| r[0] == mac), "{advertised:?}");
    let kernel_solicits = tshark_fields(
        &pcap,
        "icmpv6.type == 135 && icmpv6.nd.ns.target_address == 2001:db8::2 && ipv6.dst == ff02::1:ff00:2",
        &["eth.src"],
    );
    assert!(
        kernel_solicits.len() <= 1 && kernel_solicits.iter().all(|r| r[0] == mac),
        "the kernel resolved the client's IPv6 address more than once: {kernel_solicits:?}"
    );
    // Every TCP segment and UDP datagram we sent carries a valid checksum and the port's MAC.
    let ours = "(ip.src == 192.0.2.1 || ipv6.src == 2001:db8::1)";
    let bad = tshark_checked(
        &pcap,
        &format!("{ours} && ((tcp && tcp.checksum.status != 1) || (udp && udp.checksum.status != 1))"),
        &["frame.number"],
    );
    assert!(bad.is_empty(), "segments with a bad checksum: {bad:?}");
    let dns = tshark_checked(
        &pcap,
        &format!("{ours} && dns.flags.response == 1"),
        &["dns.a", "dns.aaaa"],
    );
    assert!(dns.len() >= 4, "dnsmasq's answers on the wire: {dns:?}");
    let from_us = tshark_fields(&pcap, "ip.src == 192.0.2.1 && tcp", &["eth.src"]);
    assert!(
        from_us.len() > 1000 && from_us.iter().all(|r| r[0] == mac),
        "{}",
        from_us.len()
    );

    // Counters: everything the kernel got is an outcome `kernel`; both directions counted.
    live_conservation(&m);
    let kernel = outcome(&m, "kernel");
    let to = sample(
        &m,
        "fastpath_kernel_packets_total{port=\"net_af_packet0\",direction=\"to_kernel\"}",
    );
    let from = sample(
        &m,
        "fastpath_kernel_packets_total{port=\"net_af_packet0\",direction=\"from_kernel\"}",
    );
    assert!(kernel > 500 && from > 1000.0, "kernel {kernel} from {from}\n{m:#?}");
    // Written into the interface: every `kernel` packet so far, plus the fragments a datagram
    // reassembled here became (the scrape may be a moment behind the workers).
    assert!(to >= kernel as f64 - 10.0, "to_kernel {to} for {kernel} packets");
    assert!(outcome(&m, "tcp_reset") >= 1, "port 23 was reset by the fast path");
    assert_eq!(outcome(&m, "kernel_full"), 0);
    // Every neighbour answer the client sent answered one of the kernel's questions.
    assert_eq!(outcome(&m, "neighbor_unsolicited"), 0);
    for reason in ["interface_full", "port_full", "invalid"] {
        let k = format!("fastpath_kernel_dropped_total{{port=\"net_af_packet0\",reason=\"{reason}\"}}");
        assert_eq!(sample(&m, &k), 0.0, "{k}");
    }

    // A kernel interface set down is unhealthy, named; set up again, healthy.
    let health = |h: &Host| {
        stdout(&h.exec(&[
            "curl",
            "-s",
            "-m",
            "2",
            "-w",
            " %{http_code}",
            "http://127.0.0.1:9464/healthz",
        ]))
    };
    assert!(health(&h).ends_with(" 200"), "{}", health(&h));
    ip(&["-n", &h.host, "link", "set", "dev", &h.kif, "down"]);
    wait_for(5, "503 for the kernel interface", || {
        let r = health(&h);
        r.ends_with(" 503") && r.contains(&h.kif)
    });
    ip(&["-n", &h.host, "link", "set", "dev", &h.kif, "up"]);
    wait_for(5, "200 again", || health(&h).ends_with(" 200"));

    // A reload: a new address reaches the kernel interface; `tcp:23` is now the kernel's.
    let cfg = s.path("c.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    let text = text
        .replace("[\"192.0.2.1/24\"]", "[\"192.0.2.1/24\", \"192.0.2.5/24\"]")
        .replace(
            "punt = [\"tcp:22\", \"tcp:53\"]",
            "punt = [\"tcp:22\", \"tcp:53\", \"tcp:23\"]",
        );
    std::fs::write(&cfg, text).unwrap();
    d.signal("HUP");
    wait_for(5, "generation 2", || d.log_text().contains("generation 2 published"));
    wait_for(5, "the new address on the kernel interface", || {
        stdout(&h.exec(&["ip", "-o", "addr", "show", "dev", &h.kif])).contains("192.0.2.5/24")
    });
    let before = h.scrape();
    // Nothing listens on 23 in the kernel either: its reset, through the kernel path.
    assert_eq!(stdout(&h.client_python(CONNECT, &["192.0.2.1", "23"])), "refused");
    let banner = stdout(&h.client_python(BANNER_CLIENT, &["192.0.2.5", "22"]));
    assert!(banner.starts_with("SSH-2.0-"), "the new address: {banner}");
    let after = h.scrape();
    assert_eq!(
        outcome(&after, "tcp_reset"),
        outcome(&before, "tcp_reset"),
        "23 went to the kernel"
    );
    assert!(outcome(&after, "kernel") > outcome(&before, "kernel"));

    let dump = stop_clean(d, &s);
    assert!(outcome(&dump, "kernel") >= outcome(&after, "kernel"));
    // Closing the port removed the interface.
    let gone = h.exec(&["ip", "link", "show", "dev", &h.kif]);
    assert!(!gone.status.success(), "{} still exists after exit", h.kif);
}

/// UDP datagrams from one source port to `addr:port` as fast as Python sends them, for
/// `secs` seconds; prints how many.
const STORM: &str = r#"
import signal, socket, sys, time
addr, port, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
# SIGTERM ends it early (once the clients it storms against are done), still printing its count.
stopped = []
signal.signal(signal.SIGTERM, lambda *_: stopped.append(1))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 40000 + int(sys.argv[4])))
# A query dnsmasq answers (fast.test A): the storm is as welcome to the server as the others.
q = bytes.fromhex("abcd01000001000000000000") + b"\x04fast\x04test\x00\x00\x01\x00\x01"
n, end = 0, time.time() + secs
while time.time() < end and not stopped:
    for _ in range(64):
        try:
            s.sendto(q, (addr, port))
            n += 1
        except OSError:
            pass
print(n)
"#;

#[test]
fn the_flow_limit_sheds_a_storm_on_a_kernel_service_while_other_clients_get_answers() {
    if missing(&["dnsmasq", "curl"]) {
        return;
    }
    let _heavy = heavy();
    let mut h = Host::new();
    let s = Scratch::new("kernel-storm");
    // A slow consumer (cost_ns: 40 us a packet, 25,000 packets/s) and small sockets, so the
    // storm fills them and the flow limit has something to do (turned on: a `kernel` service
    // has none by default).
    let d = h.start(
        &s,
        "kernel-storm",
        "\n[[service]]\nname = \"dns\"\nports = [53]\nsockets = 2\nsocket_capacity = 64\naction = \"kernel\"\n\
         cost_ns = 40000\nflow_limit = true\nrollover = true\n\n[kernel]\npunt = []\n",
    );
    start_dnsmasq(&mut h, &s);
    let mut storm = Command::new("ip")
        .args([
            "netns",
            "exec",
            &h.client,
            "/usr/bin/python3",
            "-c",
            STORM,
            "192.0.2.1",
            "53",
            // At most; stopped once the clients are done (they took 7 to 10 s on a loaded
            // 2-CPU machine: the storm's sender and the lcores leave kdig little CPU).
            "40",
            "1",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // Normal clients, each query from a new source port, while the storm runs.
    let t = Instant::now();
    let mut answered = 0;
    let total = 15;
    for _ in 0..total {
        if kdig(&h, &["@192.0.2.1", "fast.test", "A"]) == "198.51.100.77" {
            answered += 1;
        }
    }
    let during = t.elapsed();
    let storm_still_on = storm.try_wait().unwrap().is_none();
    kill("TERM", storm.id());
    let sent: u64 = stdout(&storm.wait_with_output().unwrap()).parse().unwrap_or(0);
    let m = h.scrape();
    live_conservation(&m);
    let shed = outcome(&m, "flow_limited");
    eprintln!(
        "storm: {sent} sent, {shed} flow_limited, {} kernel, {} kernel_full; {answered}/{total} answered in {during:?}",
        outcome(&m, "kernel"),
        outcome(&m, "kernel_full")
    );
    assert!(storm_still_on, "the normal queries ran past the storm ({during:?})");
    assert!(
        answered >= total - 2,
        "{answered}/{total} normal queries answered during the storm"
    );
    assert!(shed > sent / 4, "the storm was not shed: {shed} flow_limited of {sent}");
    stop_clean(d, &s);
}

/// UDP to many closed ports (punted: `unhandled`) from one socket for `secs`; prints how many.
const FLOOD: &str = r#"
import socket, sys, time
addr, secs = sys.argv[1], float(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
n, end = 0, time.time() + secs
while time.time() < end:
    for p in range(9000, 9064):
        try:
            s.sendto(b"x" * 18, (addr, p))
            n += 1
        except OSError:
            pass
print(n)
"#;

/// Echo requests to port 7, one every 2 ms; prints "answered sent".
const ECHO_CLIENT: &str = r#"
import socket, sys, time
addr, count = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 45000))
s.settimeout(1.0)
got = set()
for i in range(count):
    s.sendto(b"echo %06d" % i, (addr, 7))
    time.sleep(0.002)
    s.setblocking(False)
    try:
        while True:
            got.add(s.recv(64))
    except BlockingIOError:
        pass
    s.settimeout(1.0)
end = time.time() + 1
while time.time() < end and len(got) < count:
    try:
        got.add(s.recv(64))
    except socket.timeout:
        break
print(len(got), count)
"#;

#[test]
fn a_flood_into_the_kernel_path_leaves_the_fast_paths_echo_service_alone() {
    if missing(&["curl"]) {
        return;
    }
    let _heavy = heavy();
    let h = Host::new();
    let s = Scratch::new("kernel-flood");
    let d = h.start_with_port(
        &s,
        "kernel-flood",
        "mtu = 1400\n",
        "\n[[service]]\nname = \"echo\"\nports = [7]\naction = \"echo\"\n\n[kernel]\npunt = [\"unhandled\"]\n\
         socket_capacity = 32\n",
    );
    let flood = Command::new("ip")
        .args([
            "netns",
            "exec",
            &h.client,
            "/usr/bin/python3",
            "-c",
            FLOOD,
            "192.0.2.1",
            "4",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // The kernel interface has the port's MTU.
    let link = stdout(&h.exec(&["ip", "-o", "link", "show", "dev", &h.kif]));
    assert!(link.contains("mtu 1400"), "{link}");
    let echo = stdout(&h.client_python(ECHO_CLIENT, &["192.0.2.1", "500"]));
    let flooded: u64 = stdout(&flood.wait_with_output().unwrap()).parse().unwrap_or(0);
    let m = h.scrape();
    live_conservation(&m);
    let (got, sent) = echo.split_once(' ').unwrap();
    let got: u32 = got.parse().unwrap();
    let kernel = outcome(&m, "kernel");
    let bounded = outcome(&m, "kernel_full") + outcome(&m, "flow_limited");
    // The echo service's own sockets: what reached them, and what they refused.
    let echo_sum = |family: &str| -> f64 {
        m.iter()
            .filter(|(k, _)| k.starts_with(&format!("{family}{{service=\"echo\",")))
            .map(|(_, v)| v)
            .sum()
    };
    let delivered = echo_sum("fastpath_socket_delivered_total");
    let refused = echo_sum("fastpath_socket_full_total");
    eprintln!(
        "flood: {flooded} sent, {kernel} to the kernel, {bounded} refused at its queue; \
         echo {got}/{sent}, {delivered} delivered to it, {refused} refused by it"
    );
    // Isolation, as fastpathd sees it: every request that reached the echo service got in and
    // was answered, whatever the kernel path's queue was doing. A request the host dropped
    // before fastpathd read it (the af_packet ring, when the 2-CPU machine is busy elsewhere)
    // never reaches it; that is what the looser end-to-end bound below leaves room for.
    assert_eq!(refused, 0.0, "the echo service's socket refused requests");
    assert!(
        delivered >= f64::from(got) && delivered - f64::from(got) <= 2.0,
        "echo: {delivered} delivered to the service, {got} answers came back"
    );
    // End to end, 90%: the flood's sender, the echo client and the two lcores share two CPUs,
    // and what the host's af_packet ring drops while they do never reaches fastpathd (seen:
    // 454 to 500 of 500, every one that arrived answered).
    assert!(got >= 450, "echo answered {got} of {sent} during the flood");
    assert!(kernel > 1000, "the flood reached the kernel path: {kernel}");
    // ... through its budget (`[kernel] punt_rate` 10,000 a second, burst 1,000), checked first:
    // the rest was `kernel_limited` before any queue.
    let limited = outcome(&m, "kernel_limited");
    assert!(limited > 0, "a flood of {flooded} left the punt budget unused");
    assert!(
        kernel <= 10_000 * 8 + 1_000,
        "{kernel} punted in the flood's few seconds"
    );
    // The kernel answered the closed ports itself (ICMP, under its own rate limit), through the
    // kernel interface: nothing of the fast path's ICMP machinery ran for them.
    assert_eq!(outcome(&m, "icmp_error") + outcome(&m, "icmp_suppressed"), 0);
    let from = sample(
        &m,
        "fastpath_kernel_packets_total{port=\"net_af_packet0\",direction=\"from_kernel\"}",
    );
    assert!(from > 0.0, "the kernel's own Port Unreachables went out: {from}");
    // The kernel's own drop counters of the interface are exported as it counts them.
    for (direction, file) in [("to_kernel", "rx_dropped"), ("from_kernel", "tx_dropped")] {
        let key =
            format!("fastpath_kernel_interface_dropped_total{{port=\"net_af_packet0\",direction=\"{direction}\"}}");
        let exported = sample(&h.scrape(), &key);
        let path = format!("/sys/class/net/{}/statistics/{file}", h.kif);
        let kernel: f64 = stdout(&h.exec(&["cat", &path])).trim().parse().unwrap();
        assert!(
            exported <= kernel && kernel - exported <= 64.0,
            "{key} {exported}, the kernel's {kernel}"
        );
    }
    stop_clean(d, &s);
}

/// Spoofed SYNs (random sources in 198.18.0.0/15, valid checksums) to `addr`:`port` for `secs`
/// seconds from a raw socket; prints how many were sent.
const SYN_FLOOD: &str = r#"
import random, socket, struct, sys, time
dst, port, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
d = socket.inet_aton(dst)
pkts = []
for i in range(2048):
    src = socket.inet_aton("198.%d.%d.%d" % (18 + (i & 1), random.randrange(256), random.randrange(1, 255)))
    sport = random.randrange(1024, 65536)
    tcp = struct.pack("!HHIIBBHHH", sport, port, random.getrandbits(32), 0, 5 << 4, 0x02, 65535, 0, 0)
    c = csum(src + d + struct.pack("!BBH", 0, 6, len(tcp)) + tcp)
    tcp = tcp[:16] + struct.pack("!H", c) + tcp[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40, random.getrandbits(16), 0, 64, 6, 0, src, d)
    pkts.append(ip + tcp)
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
n, end = 0, time.time() + secs
while time.time() < end:
    for p in pkts[:256]:
        s.sendto(p, (dst, 0))
        n += 1
    pkts = pkts[256:] + pkts[:256]
print(n)
"#;

/// Runs [`SYN_FLOOD`] at 192.0.2.1 `port` from the client while a kernel-filtered capture in the
/// client's namespace keeps the resets coming back; (SYNs sent, resets seen on the wire).
fn syn_flood_resets(h: &Host, s: &Scratch, port: u16, tag: &str) -> (u64, usize) {
    let pcap = s.path(&format!("resets-{tag}.pcap"));
    let mut cap = Command::new("ip")
        .args(["netns", "exec", &h.client, "dumpcap", "-q", "-i", &h.peer])
        .args(["-f", "src host 192.0.2.1 and tcp[tcpflags] & tcp-rst != 0", "-w"])
        .arg(&pcap)
        .stderr(Stdio::null())
        .spawn()
        .expect("dumpcap (tshark's) is needed: apt-get install -y tshark (ci/setup does it)");
    std::thread::sleep(Duration::from_millis(1500));
    let out = h.client_python(SYN_FLOOD, &["192.0.2.1", &port.to_string(), "3"]);
    assert!(
        out.status.success(),
        "the SYN flood: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sent: u64 = stdout(&out).trim().parse().unwrap_or(0);
    std::thread::sleep(Duration::from_millis(500));
    let _ = Command::new("kill").args(["-INT", &cap.id().to_string()]).status();
    let _ = cap.wait();
    (
        sent,
        tshark_fields(&pcap, "tcp.flags.reset == 1", &["frame.number"]).len(),
    )
}

#[test]
fn a_spoofed_syn_flood_at_a_closed_port_gets_no_more_resets_through_the_kernel_interface() {
    if missing(&["tshark", "curl"]) {
        return;
    }
    let _heavy = heavy();
    // The same flood at a port nobody listens on, without and with a kernel interface (punt
    // `unhandled`, the default, and a route back for the kernel's own answers): the resets on
    // the wire are the `[tcp_reset]` budget's either way, and no SYN reaches the kernel. Linux
    // behind a punt-everything path answered each one (107,067 resets in 3 s).
    let mut seen = Vec::new();
    for kernel in [false, true] {
        let h = Host::new();
        let s = Scratch::new(if kernel {
            "kernel-synflood"
        } else {
            "kernel-synflood-bare"
        });
        let d = if kernel {
            let d = h.start(&s, "kernel-synflood", "");
            ip(&[
                "-n",
                &h.host,
                "route",
                "add",
                "default",
                "via",
                "192.0.2.2",
                "dev",
                &h.kif,
            ]);
            d
        } else {
            h.start_config(&s, "kernel-synflood-bare", (2, ""), "rx = [0]\nworkers = [1]", "")
        };
        let (sent, resets) = syn_flood_resets(&h, &s, 23, if kernel { "kernel" } else { "bare" });
        let m = h.scrape();
        live_conservation(&m);
        let (ours, punted) = (outcome(&m, "tcp_reset"), outcome(&m, "kernel"));
        eprintln!(
            "kernel interface {kernel}: {sent} SYNs, {resets} resets on the wire, {ours} fastpathd's, {punted} punted"
        );
        assert!(sent > 10_000, "the flood sent only {sent}");
        assert_eq!(punted, 0, "SYNs for a port the kernel does not listen on reached it");
        // Every reset on the wire is ours, and within the budget: a burst of 50, 200 a second.
        assert!(
            resets as u64 <= ours,
            "{resets} resets on the wire, {ours} sent by fastpathd"
        );
        assert!(ours <= 50 + 200 * 5, "{ours} resets for a {sent}-SYN flood");
        seen.push(resets);
        stop_clean(d, &s);
    }
    assert!(
        seen[0] >= 100,
        "the bare run saw {} resets: the capture missed them",
        seen[0]
    );
    assert!(
        seen[1] as f64 <= seen[0] as f64 * 1.25 + 20.0,
        "with a kernel interface {} resets, without {}",
        seen[1],
        seen[0]
    );
}

#[test]
fn a_syn_reaches_the_kernel_where_it_listens_and_nowhere_else() {
    if missing(&["curl"]) {
        return;
    }
    // sock_diag's view in the daemon's namespace: a kernel listener on 2222 gets its SYNs (and
    // answers with a SYN-ACK), the closed port 2223 gets fastpathd's reset.
    let mut h = Host::new();
    let s = Scratch::new("kernel-listen");
    let d = h.start(&s, "kernel-listen", "");
    h.spawn(
        &[
            "/usr/bin/python3",
            "-c",
            "import socket,time\ns=socket.create_server(('0.0.0.0',2222))\ntime.sleep(60)",
        ],
        &s.path("listener.log"),
    );
    wait_until_listening(&h, "the listener", 2222, "tcp");
    // The control thread reads the kernel's listeners every 100 ms.
    std::thread::sleep(Duration::from_millis(300));
    let connect = r#"
import socket, sys
for port in (2222, 2223):
    try:
        socket.create_connection(("192.0.2.1", port), timeout=3).close()
        print(port, "open")
    except ConnectionRefusedError:
        print(port, "refused")
    except OSError as e:
        print(port, "error", e)
"#;
    // The trace names the kernel path for the SYN to 2222.
    let mut trace = Command::new(env!("CARGO_BIN_EXE_fastpathctl"))
        .arg("--socket")
        .arg(s.path("control.sock"))
        .args([
            "trace",
            "--count",
            "1",
            "--filter",
            "proto tcp and dst port 2222",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::BufRead;
        let mut first = String::new();
        std::io::BufReader::new(trace.stderr.as_mut().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert!(first.starts_with("fastpathctl: tracing "), "{first:?}");
    }
    let out = stdout(&h.client_python(connect, &[]));
    assert!(out.contains("2222 open") && out.contains("2223 refused"), "{out}");
    let traced = trace.wait_with_output().unwrap();
    let records: Vec<String> = String::from_utf8_lossy(&traced.stdout)
        .lines()
        .filter(|l| l.contains("\"role\":\"rx\""))
        .map(str::to_string)
        .collect();
    assert_eq!(records.len(), 1, "{records:?}");
    assert!(
        records[0].contains("\"outcome\":\"kernel\"")
            && records[0].contains("punted: no service takes it (punt = unhandled)"),
        "{}",
        records[0]
    );
    let m = h.scrape();
    assert!(
        outcome(&m, "kernel") >= 2,
        "the connection to 2222 went through the kernel path"
    );
    assert_eq!(
        outcome(&m, "tcp_reset"),
        1,
        "the refused connection was fastpathd's reset"
    );
    stop_clean(d, &s);
}

#[test]
fn two_workers_each_carry_the_kernel_path_on_their_own_queue_pair() {
    if missing(&["curl"]) {
        return;
    }
    let mut h = Host::new();
    let s = Scratch::new("kernel-workers");
    let web = s.path("www");
    std::fs::create_dir_all(&web).unwrap();
    let body: Vec<u8> = (0..200_000u32)
        .map(|i| (i.wrapping_mul(2246822519) >> 11) as u8)
        .collect();
    std::fs::write(web.join("f.bin"), &body).unwrap();
    // Three lcores on this machine's two CPUs (correctness, not speed).
    let d = h.start_with(
        &s,
        "kernel-workers",
        (3, ""),
        "rx = [0]\nworkers = [1, 2]\ncpus = \"0@0,1@1,2@1\"",
        "\n[kernel]\npunt = [\"tcp:80\"]\n",
    );
    let www = web.to_str().unwrap().to_string();
    h.spawn(
        &[
            "/usr/bin/python3",
            "-m",
            "http.server",
            "80",
            "--bind",
            "192.0.2.1",
            "--directory",
            &www,
        ],
        &s.path("http.log"),
    );
    wait_until_listening(&h, "http.server listening", 80, "tcp");
    // 16 connections, 16 flows: the fanout spreads them over both workers' sockets, and the
    // kernel spreads its answers over both queues of the interface.
    for i in 0..16 {
        let got = s.path(&format!("got{i}.bin"));
        let out = h.client(&[
            "curl",
            "-s",
            "-m",
            "20",
            "-o",
            got.to_str().unwrap(),
            "-w",
            "%{http_code}",
            "http://192.0.2.1/f.bin",
        ]);
        assert_eq!(stdout(&out), "200");
        assert!(std::fs::read(&got).unwrap() == body, "request {i}: the file differs");
    }
    let m = h.scrape();
    live_conservation(&m);
    let into = |q: u32| {
        sample(
            &m,
            &format!("fastpath_tx_packets_total{{port=\"{}\",queue=\"{q}\"}}", h.kif),
        )
    };
    let out_of = |q: u32| {
        sample(
            &m,
            &format!("fastpath_tx_packets_total{{port=\"net_af_packet0\",queue=\"{q}\"}}"),
        )
    };
    let socket = |i: u32| {
        sample(
            &m,
            &format!("fastpath_socket_processed_total{{service=\"kernel\",socket=\"{i}\",result=\"kernel\"}}"),
        )
    };
    eprintln!(
        "into the kernel by queue {} {}; out of the port by worker queue {} {}; kernel sockets {} {}",
        into(0),
        into(1),
        out_of(1),
        out_of(2),
        socket(0),
        socket(1)
    );
    assert!(
        into(0) > 0.0 && into(1) > 0.0,
        "both workers wrote into the kernel interface"
    );
    assert!(socket(0) > 0.0 && socket(1) > 0.0, "both kernel sockets carried flows");
    // The kernel's questions left through either worker; the answers found them all.
    assert_eq!(outcome(&m, "neighbor_unsolicited"), 0);
    // What the kernel sent left on the workers' own TX queues of the port (1 and 2; queue 0 is
    // the RX lcore's), both of them.
    assert!(
        out_of(1) > 100.0 && out_of(2) > 100.0,
        "both workers sent the kernel's segments"
    );
    stop_clean(d, &s);
}

/// Forged neighbour answers from the client's namespace, written raw on its interface
/// (`sys.argv[1]`), all claiming the client's own addresses (192.0.2.2, 2001:db8::2) for the
/// link-layer address `sys.argv[3]`, sent to fastpathd's MAC `sys.argv[2]` (or to everyone):
/// each kind an on-link attacker would use to take over the kernel's entry for the client.
const FORGE: &str = r#"
import socket, struct, sys
iface = sys.argv[1]
port_mac, bogus = (bytes.fromhex(a.replace(":", "")) for a in sys.argv[2:4])
me4, them4 = socket.inet_aton("192.0.2.2"), socket.inet_aton("192.0.2.1")
me6, them6 = (socket.inet_pton(socket.AF_INET6, a) for a in ("2001:db8::2", "2001:db8::1"))
all_nodes = socket.inet_pton(socket.AF_INET6, "ff02::1")
def csum(b):
    b += b"\0" * (len(b) % 2)
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
def advert(flags, dst, eth_dst):
    # RFC 4861 4.4: flags (R S O), the target, a Target Link-Layer Address option.
    icmp = struct.pack("!BBHB3x", 136, 0, 0, flags) + me6 + bytes([2, 1]) + bogus
    c = csum(me6 + dst + struct.pack("!I3xB", len(icmp), 58) + icmp)
    icmp = icmp[:2] + struct.pack("!H", c) + icmp[4:]
    ip6 = struct.pack("!IHBB", 6 << 28, len(icmp), 58, 255) + me6 + dst
    return eth_dst + bogus + b"\x86\xdd" + ip6 + icmp
def arp(op, eth_dst, tha, tpa):
    return eth_dst + bogus + b"\x08\x06" + struct.pack("!HHBBH", 1, 0x0800, 6, 4, op) + bogus + me4 + tha + tpa
bcast = b"\xff" * 6
frames = {
    # Unicast to us: each one rewrote the kernel's entry before.
    "unsolicited NA, override": advert(0x20, them6, port_mac),
    "NA claiming solicited, override": advert(0x60, them6, port_mac),
    "unsolicited ARP reply": arp(2, port_mac, port_mac, them4),
    # To everyone: gratuitous ARP (request and reply), an NA announcing to all nodes.
    "gratuitous ARP request": arp(1, bcast, b"\0" * 6, me4),
    "gratuitous ARP reply": arp(2, bcast, bcast, me4),
    "NA to all nodes, override": advert(0x20, all_nodes, b"\x33\x33\x00\x00\x00\x01"),
}
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((iface, 0))
for name, f in frames.items():
    s.send(f)
print(len(frames))
"#;

/// The MAC the host's kernel holds for `addr` on its kernel interface (`ip neigh`), if any.
fn neighbour_mac(h: &Host, addr: &str) -> String {
    let out = stdout(&h.exec(&["ip", "neigh", "show", addr, "dev", &h.kif]));
    out.split_whitespace()
        .skip_while(|w| *w != "lladdr")
        .nth(1)
        .unwrap_or("")
        .to_string()
}

#[test]
fn unsolicited_neighbour_answers_do_not_rewrite_the_kernels_entries() {
    if missing(&["curl"]) {
        return;
    }
    let mut h = Host::new();
    let s = Scratch::new("kernel-neigh");
    let d = h.start(&s, "kernel-neigh", "\n[kernel]\npunt = [\"tcp:22\"]\n");
    h.spawn(&["/usr/bin/python3", "-c", BANNER_SERVER, "22"], &s.path("banner.log"));
    wait_until_listening(&h, "banner server listening", 22, "tcp");
    // The kernel resolves the client over both families, by itself: its answers (solicited)
    // are handed to it.
    for addr in ["192.0.2.1", "2001:db8::1"] {
        let banner = stdout(&h.client_python(BANNER_CLIENT, &[addr, "22"]));
        assert_eq!(banner, "SSH-2.0-fastpathd_kernel_path | echo hello kernel", "{addr}");
    }
    let client_mac = stdout(&h.client(&["cat", &format!("/sys/class/net/{}/address", h.peer)]));
    let port_mac = stdout(&h.exec(&["cat", &format!("/sys/class/net/{}/address", h.port)]));
    for addr in ["192.0.2.2", "2001:db8::2"] {
        assert_eq!(neighbour_mac(&h, addr), client_mac, "the kernel learned {addr}");
    }
    let learned = h.scrape();
    assert!(outcome(&learned, "kernel") > 0);
    assert_eq!(
        outcome(&learned, "neighbor_unsolicited"),
        0,
        "the answers were solicited"
    );
    // Past the answer window of the kernel's last question (5 s), the forged answers.
    std::thread::sleep(Duration::from_millis(5_500));
    let before = h.scrape();
    let bogus = "02:66:66:66:66:66";
    let sent = h.client_python(FORGE, &[&h.peer, &port_mac, bogus]);
    assert!(sent.status.success(), "{}", String::from_utf8_lossy(&sent.stderr));
    assert_eq!(stdout(&sent), "6");
    let received = |m: &BTreeMap<String, f64>| family_sum(m, "fastpath_rx_packets_total");
    wait_for(5, "the forged frames received", || {
        received(&h.scrape()) >= received(&before) + 6.0
    });
    // Let anything the kernel was handed take effect, then look at its entries.
    std::thread::sleep(Duration::from_millis(300));
    for addr in ["192.0.2.2", "2001:db8::2"] {
        let mac = neighbour_mac(&h, addr);
        assert_eq!(
            mac, client_mac,
            "the kernel's entry for {addr} was rewritten (to {bogus}?)"
        );
    }
    let m = h.scrape();
    live_conservation(&m);
    let more = |name: &str| outcome(&m, name) - outcome(&before, name);
    assert_eq!(more("neighbor_unsolicited"), 3, "the NAs and the ARP reply to us");
    assert_eq!(more("kernel"), 0, "none of them reached the kernel");
    assert!(more("arp_ignored") >= 2, "the gratuitous ARP");
    assert!(more("ndp_ignored") >= 1, "the NA to all nodes");
    // The kernel path still works both ways.
    for addr in ["192.0.2.1", "2001:db8::1"] {
        let banner = stdout(&h.client_python(BANNER_CLIENT, &[addr, "22"]));
        assert_eq!(banner, "SSH-2.0-fastpathd_kernel_path | echo hello kernel", "{addr}");
    }
    stop_clean(d, &s);
}

/// Sends argv[3] bytes to argv[1]:argv[2] on one connection; prints what the server counted.
const BULK_CLIENT: &str = r#"
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
n, chunk = int(sys.argv[3]), bytes(65536)
sent = 0
while sent < n:
    c.sendall(chunk[: min(len(chunk), n - sent)])
    sent += min(len(chunk), n - sent)
c.shutdown(socket.SHUT_WR)
print(c.recv(64).decode())
"#;

/// The client namespace's TCP counters (`/proc/net/netstat` TcpExt, `/proc/net/snmp` Tcp).
fn tcp_counters(h: &Host) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for file in ["/proc/net/netstat", "/proc/net/snmp"] {
        let text = stdout(&h.client(&["cat", file]));
        let lines: Vec<&str> = text.lines().collect();
        for pair in lines.chunks(2) {
            let [names, values] = pair else { continue };
            let (Some((p, names)), Some((_, values))) = (names.split_once(':'), values.split_once(':')) else {
                continue;
            };
            for (k, v) in names.split_whitespace().zip(values.split_whitespace()) {
                if let Ok(v) = v.parse() {
                    out.insert(format!("{p}.{k}"), v);
                }
            }
        }
    }
    out
}

/// The data frames to `port` captured on the way out (`output`) that left in another order
/// than their segments arrived (`input`), and the bytes of data the way out carried. Segments are told apart by their IP
/// ID (the sender's per-connection counter: unique within a transfer of under 65,536 segments).
fn reordered(input: &Path, output: &Path, port: u16) -> (usize, u64) {
    let segments = |pcap: &Path| -> Vec<(String, u64)> {
        tshark_fields(
            pcap,
            &format!("tcp.dstport == {port} && tcp.len > 0"),
            &["ip.id", "tcp.len"],
        )
        .into_iter()
        .map(|f| (f[0].clone(), f[1].parse().unwrap()))
        .collect()
    };
    let arrival: std::collections::HashMap<String, usize> = segments(input)
        .into_iter()
        .enumerate()
        .map(|(i, (id, _))| (id, i))
        .collect();
    // With the kernel interface's offloads a frame written into the kernel carries a run of
    // segments under the first one's ID: its place is the first's, its bytes all of theirs.
    let out = segments(output);
    let order: Vec<usize> = out.iter().filter_map(|(id, _)| arrival.get(id).copied()).collect();
    let bytes = out.iter().map(|(_, len)| len).sum();
    (order.windows(2).filter(|w| w[1] < w[0]).count(), bytes)
}

/// One bulk transfer of `bytes` to `port`: the counters' increase on the sender (reordering
/// the sender detected, segments it retransmitted).
fn bulk(h: &Host, port: u16, bytes: u64) -> (u64, u64) {
    let before = tcp_counters(h);
    let out = h.client_python(BULK_CLIENT, &["192.0.2.1", &port.to_string(), &bytes.to_string()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stdout(&out),
        bytes.to_string(),
        "port {port}: the server counted another length: {err}"
    );
    let after = tcp_counters(h);
    let d = |k: &str| after.get(k).copied().unwrap_or(0) - before.get(k).copied().unwrap_or(0);
    let reorder = d("TcpExt.TCPSACKReorder") + d("TcpExt.TCPTSReorder") + d("TcpExt.TCPRenoReorder");
    eprintln!(
        "port {port}: SACKReorder {} TSReorder {} RenoReorder {} DSACKRecv {} RetransSegs {} LostRetransmit {}",
        d("TcpExt.TCPSACKReorder"),
        d("TcpExt.TCPTSReorder"),
        d("TcpExt.TCPRenoReorder"),
        d("TcpExt.TCPDSACKRecv"),
        d("Tcp.RetransSegs"),
        d("TcpExt.TCPLostRetransmit")
    );
    (reorder, d("Tcp.RetransSegs"))
}

#[test]
fn a_tcp_bulk_flow_reaches_the_kernel_whole_and_in_order() {
    if missing(&["tshark", "curl"]) {
        return;
    }
    let _heavy = heavy();
    let mut h = Host::new();
    let s = Scratch::new("kernel-bulk");
    // DPDK's af_packet puts its rings in a fanout group with the rollover flag: a flow whose
    // ring is three-quarters full moves to another ring, reordered before fastpathd sees it.
    // Rings of 4096 frames (not 512) never get there while the transfer backs off at a 64-packet
    // queue (docs/operating.md, on a veth).
    h.af_packet_args = ",framecnt=4096".to_string();
    // Two workers (two sockets to roll over to) on small queues, and a slow `kernel` service
    // (20 us a packet): the transfer fills its queue until TCP backs off, so the fanout's rules
    // are asked on every transfer; by default none may shed or move a packet of it.
    let service = "\n[[service]]\nname = \"bulk\"\nprotocol = \"tcp\"\nports = [5002]\nsockets = 2\n\
                   socket_capacity = 64\naction = \"kernel\"\ncost_ns = 20000\n";
    let d = h.start_with(
        &s,
        "kernel-bulk",
        (3, ""),
        "rx = [0]\nworkers = [1, 2]\ncpus = \"0@0,1@1,2@1\"",
        &format!("{service}\n[kernel]\nsocket_capacity = 64\npunt_rate = 0\n"),
    );
    for port in ["5001", "5002"] {
        h.spawn(
            &["/usr/bin/python3", "-c", BULK_SERVER, port],
            &s.path(&format!("bulk{port}.log")),
        );
        wait_until_listening(&h, "bulk server listening", port.parse().unwrap(), "tcp");
    }
    // fastpathd reads the kernel's listeners every 100 ms: until then a SYN to 5001 is refused.
    std::thread::sleep(Duration::from_millis(300));
    let bytes = 12 << 20;
    // 5001: punted (`unhandled`, the internal `kernel` service); 5002: the `kernel` service.
    // Captured where fastpathd reads (its veth end) and where it writes (the kernel interface).
    let input = Capture::start(&h.host, &h.port, s.path("in.pcap"));
    let output = Capture::start(&h.host, &h.kif, s.path("out.pcap"));
    let (punted_reorder, punted_retrans) = bulk(&h, 5001, bytes);
    let (svc_reorder, svc_retrans) = bulk(&h, 5002, bytes);
    let (input, output) = (input.finish(), output.finish());
    for port in [5001, 5002] {
        let (moved, carried) = reordered(&input, &output, port);
        eprintln!("port {port}: {carried} bytes of data carried, {moved} frames out of their arrival order");
        assert!(carried >= bytes, "port {port}: {carried} bytes captured of {bytes}");
        assert_eq!(moved, 0, "port {port}: fastpathd reordered the flow");
    }
    let m = h.scrape();
    live_conservation(&m);
    let rollovers = family_sum(&m, "fastpath_rollover_total");
    let full = outcome(&m, "kernel_full");
    eprintln!(
        "defaults: punted reorder {punted_reorder} retrans {punted_retrans}; service reorder {svc_reorder} \
         retrans {svc_retrans}; flow_limited {}, rollovers {rollovers}, kernel_full {full}, kernel {}",
        outcome(&m, "flow_limited"),
        outcome(&m, "kernel")
    );
    assert!(
        full > 0,
        "the transfers never filled a queue: the test asked no fanout rule"
    );
    assert_eq!(outcome(&m, "flow_limited"), 0, "the flow limit shed a bulk flow");
    assert_eq!(rollovers, 0.0, "a bulk flow rolled over to another worker");

    // The same transfer with the service's rollover and flow limit turned on (a reload): the
    // fanout's rules do act on it, so the assertions above can fail.
    let cfg = s.path("c.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        text.replace(
            "cost_ns = 20000\n",
            "cost_ns = 20000\nrollover = true\nflow_limit = true\n",
        ),
    )
    .unwrap();
    d.signal("HUP");
    wait_for(10, "the reload", || d.log_text().contains("generation 2 published"));
    let (on_reorder, _) = bulk(&h, 5002, bytes);
    let m2 = h.scrape();
    let acted = outcome(&m2, "flow_limited") as f64 + family_sum(&m2, "fastpath_rollover_total");
    eprintln!(
        "rollover and flow limit on: flow_limited {}, rollovers {}, the sender saw {on_reorder} reorderings",
        outcome(&m2, "flow_limited"),
        family_sum(&m2, "fastpath_rollover_total")
    );
    assert!(acted > 0.0, "with them on, neither rule acted on the transfer");
    stop_clean(d, &s);
}

/// CPU time (user + system) of process `pid` so far, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces): utime and stime are 14 and 15.
    let rest: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    rest[11].parse::<u64>().unwrap() + rest[12].parse::<u64>().unwrap()
}

/// The services the idle tests run: DNS through the kernel path, UDP echo on a worker.
const IDLE_SERVICES: &str = "\n[[service]]\nname = \"dns\"\nports = [53]\nsockets = 2\nsocket_capacity = 256\n\
                             action = \"kernel\"\n\n[[service]]\nname = \"echo\"\nports = [7]\naction = \"echo\"\n";

#[test]
fn an_idle_fastpathd_uses_little_cpu() {
    if missing(&["dnsmasq", "curl"]) {
        return;
    }
    let _heavy = heavy();
    // The default idle policy: its lcores block on their queues' fds and doorbells. The old
    // one (a 50 µs sleep per empty poll, ~110 µs with the default timer slack) took 25 % of a
    // core here; 15 % leaves room for a busy CI machine.
    let mut h = Host::new();
    let s = Scratch::new("kernel-idle-cpu");
    let d = h.start_with(&s, "kernel-idle-cpu", (2, ""), "rx = [0]\nworkers = [1]", IDLE_SERVICES);
    start_dnsmasq(&mut h, &s);
    let ping = stdout(&h.client(&["ping", "-c", "3", "-i", "0.2", "-W", "1", "192.0.2.1"]));
    assert!(ping.contains("3 received"), "{ping}");
    assert_eq!(kdig(&h, &["@192.0.2.1", "fast.test", "A"]), "198.51.100.77");
    std::thread::sleep(Duration::from_millis(500));
    let pid = d.child.id();
    let hz = 100.0; // USER_HZ: what /proc/PID/stat counts in on Linux
    let (t0, c0) = (Instant::now(), cpu_ticks(pid));
    std::thread::sleep(Duration::from_secs(3));
    let (secs, ticks) = (t0.elapsed().as_secs_f64(), cpu_ticks(pid) - c0);
    let share = ticks as f64 / hz / secs;
    assert!(share < 0.15, "an idle fastpathd used {:.1} % of a core", share * 100.0);
    // The lcores did block, and woke at their bound (no traffic).
    let m = h.scrape();
    for l in [0, 1] {
        let timeouts = sample(
            &m,
            &format!("fastpath_lcore_wakeups_total{{lcore=\"{l}\",reason=\"timeout\"}}"),
        );
        assert!(timeouts > 0.0, "lcore {l} never blocked: {m:?}");
    }
    stop_clean(d, &s);
}

/// One request every 50-200 ms, by turns an ICMP echo (the RX lcore answers), a UDP echo (a
/// worker) and a DNS query (a worker, the kernel interface, dnsmasq): prints each kind and its
/// round trip in ms, or `lost`.
const SPACED_CLIENT: &str = r#"
import random, socket, struct, sys, time
n = int(sys.argv[1])
def csum(b):
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xffff)
    return ~(s + (s >> 16)) & 0xffff
icmp = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for s in (icmp, udp):
    s.settimeout(0.5)
for i in range(n):
    time.sleep(random.uniform(0.05, 0.2))
    kind = ("icmp", "udp", "dns")[i % 3]
    t0 = time.monotonic()
    try:
        if kind == "icmp":
            h = struct.pack("!BBHHH", 8, 0, 0, 0x4650, i) + b"idle"
            icmp.sendto(h[:2] + struct.pack("!H", csum(h)) + h[4:], ("192.0.2.1", 0))
            while True:
                d = icmp.recv(2048)
                if d[20] == 0 and struct.unpack("!HH", d[24:28]) == (0x4650, i):
                    break
        elif kind == "udp":
            udp.sendto(struct.pack("!I", i), ("192.0.2.1", 7))
            while udp.recv(2048)[:4] != struct.pack("!I", i):
                pass
        else:
            q = b"\x04fast\x04test\x00" + struct.pack("!HH", 1, 1)
            udp.sendto(struct.pack("!HHHHHH", i, 0x0100, 1, 0, 0, 0) + q, ("192.0.2.1", 53))
            while udp.recv(2048)[:2] != struct.pack("!H", i):
                pass
        print(kind, (time.monotonic() - t0) * 1000)
    except socket.timeout:
        print(kind, "lost")
"#;

#[test]
fn packets_after_a_long_idle_are_answered_at_once() {
    if missing(&["dnsmasq", "curl"]) {
        return;
    }
    let _heavy = heavy();
    // The longest bound (100 ms): a lost wake-up would leave a request waiting for it, so
    // round trips under 20 ms mean the request woke its lcore (the RX lcore through its
    // af_packet socket, the worker through its doorbell and then the tap's fd).
    let mut h = Host::new();
    let s = Scratch::new("kernel-idle-wake");
    let d = h.start_with(
        &s,
        "kernel-idle-wake",
        (2, ""),
        "rx = [0]\nworkers = [1]\nidle_wait_ms = 100",
        IDLE_SERVICES,
    );
    start_dnsmasq(&mut h, &s);
    // The client's neighbour entry and dnsmasq's first answer, before anything is timed.
    assert_eq!(kdig(&h, &["@192.0.2.1", "fast.test", "A"]), "198.51.100.77");
    let out = stdout(&h.client_python(SPACED_CLIENT, &["60"]));
    let lines: Vec<(&str, f64)> = out
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(kind, ms)| {
            let ms = ms
                .parse()
                .unwrap_or_else(|_| panic!("a {kind} request was not answered:\n{out}"));
            (kind, ms)
        })
        .collect();
    assert_eq!(lines.len(), 60, "{out}");
    // A wake-up that never comes leaves most requests waiting 0-100 ms; a busy machine
    // delays only a few (another process on the lcore's CPU).
    let slow = lines.iter().filter(|(_, ms)| *ms >= 20.0).count();
    assert!(
        slow <= 6,
        "{slow} of 60 requests after an idle took 20 ms or more:\n{out}"
    );
    let m = h.scrape();
    let woken = |reason: &str| -> f64 {
        m.iter()
            .filter(|(k, _)| {
                k.starts_with("fastpath_lcore_wakeups_total{") && k.contains(&format!("reason=\"{reason}\""))
            })
            .map(|(_, v)| v)
            .sum()
    };
    assert!(woken("io") >= 20.0, "the RX lcore woke by its queues' fds: {m:?}");
    assert!(woken("bell") >= 20.0, "the worker woke by its doorbell: {m:?}");
    stop_clean(d, &s);
}

/// Sends `argv[2]` datagrams to 192.0.2.1:`argv[1]` as fast as it can; prints how many left.
const BLAST: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
n = 0
for i in range(int(sys.argv[2])):
    try:
        s.sendto(b"x" * 64, ("192.0.2.1", int(sys.argv[1])))
        n += 1
    except OSError:
        pass
print(n)
"#;

#[test]
fn frames_the_af_packet_rings_dropped_are_counted_missed() {
    if missing(&["curl"]) {
        return;
    }
    let _heavy = heavy();
    let h = Host::new();
    let s = Scratch::new("kernel-ring-drops");
    // The RX lcore on a thread of its own (lcore 1), so that it alone can be stopped.
    let d = h.start_with(&s, "kernel-ring-drops", (2, ""), "rx = [1]\nworkers = [0]", "");
    let pid = d.child.id();
    let rx_thread = thread_named(pid, "rte-worker-1");
    // The client learns fastpathd's MAC first: with the RX lcore stopped nobody answers ARP.
    assert!(h.client(&["ping", "-c", "1", "-W", "2", "192.0.2.1"]).status.success());
    let before = sample(&h.scrape(), "fastpath_port_rx_missed_total{port=\"net_af_packet0\"}");
    // While the RX lcore is stopped the flow's ring (512 frames) fills; the rest is dropped by
    // the kernel, which only PACKET_STATISTICS tells.
    let stopped = StoppedThread::new(rx_thread, 3.0);
    let sent: u64 = stdout(&h.client_python(BLAST, &["9", "20000"])).parse().unwrap();
    drop(stopped);
    std::thread::sleep(Duration::from_millis(500));
    let m = h.scrape();
    let missed = sample(&m, "fastpath_port_rx_missed_total{port=\"net_af_packet0\"}") - before;
    let rx = sample(&m, "fastpath_port_rx_packets_total{port=\"net_af_packet0\"}");
    eprintln!("{sent} sent while the RX lcore was stopped: {missed} missed, {rx} received in all");
    assert!(missed > 0.0, "no ring drop counted");
    // The driver's own counters too (ethdev's generic ones at least).
    let good = sample(
        &m,
        "fastpath_port_xstats_total{port=\"net_af_packet0\",name=\"rx_good_packets\"}",
    );
    assert_eq!(good, rx, "xstats rx_good_packets against the port's received packets");
    assert!(
        missed >= sent as f64 - rx - 64.0 && missed <= sent as f64,
        "{missed} missed of {sent} ({rx} received)"
    );
    stop_clean(d, &s);
}

/// A server in fastpathd's namespace: `PUT n` reads n bytes and answers their SHA-256, `GET n`
/// sends n bytes of a fixed pseudo-random stream (IPv4 and IPv6).
const EXACT_SERVER: &str = r#"
import hashlib, random, socket, sys, threading
s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
s.bind(("::", int(sys.argv[1])))
s.listen(8)
def serve(c):
    f = c.makefile("rb")
    op, n = f.readline().split()
    n = int(n)
    if op == b"PUT":
        h, left = hashlib.sha256(), n
        while left:
            b = f.read(min(left, 1 << 20))
            if not b:
                break
            h.update(b)
            left -= len(b)
        c.sendall(h.hexdigest().encode())
    else:
        c.sendall(random.Random(n).randbytes(n))
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,)).start()
"#;

/// The client: `put`/`get` n bytes through `addr`:`port`; prints `ok` when what arrived is
/// byte for byte what was sent.
const EXACT_CLIENT: &str = r#"
import hashlib, random, socket, sys
addr, port, op, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
data = random.Random(n).randbytes(n)
c = socket.create_connection((addr, port), timeout=30)
if op == "put":
    c.sendall(b"PUT %d\n" % n + data)
    c.shutdown(socket.SHUT_WR)
    got = c.makefile("rb").read().decode()
    print("ok" if got == hashlib.sha256(data).hexdigest() else "mismatch: " + got)
else:
    c.sendall(b"GET %d\n" % n)
    got = c.makefile("rb").read()
    print("ok" if got == data else "mismatch: %d bytes" % len(got))
"#;

/// A sysfs counter of the kernel interface.
fn kif_stat(h: &Host, name: &str) -> u64 {
    let path = format!("/sys/class/net/{}/statistics/{name}", h.kif);
    stdout(&h.exec(&["cat", &path])).trim().parse().unwrap_or(0)
}

#[test]
fn with_offloads_a_bulk_transfer_crosses_the_kernel_interface_exact_in_64k_frames_both_ways() {
    if missing(&["curl"]) {
        return;
    }
    let _heavy = heavy();
    let mut h = Host::new();
    let s = Scratch::new("kernel-offload");
    h.af_packet_args = ",framecnt=4096".to_string();
    let d = h.start(&s, "kernel-offload", "[kernel]\npunt_rate = 0\noffloads = true\n");
    assert!(d.log_text().contains("TAP with offloads"), "{}", d.log_text());
    h.spawn(&["/usr/bin/python3", "-c", EXACT_SERVER, "5003"], &s.path("exact.log"));
    wait_until_listening(&h, "exact server listening", 5003, "tcp");
    // fastpathd reads the kernel's listeners every 100 ms: until then a SYN to 5003 is refused.
    std::thread::sleep(Duration::from_millis(300));
    let (rx0, tx0) = (kif_stat(&h, "rx_packets"), kif_stat(&h, "tx_packets"));
    let before = h.scrape();
    let bytes = (8 << 20).to_string();
    for addr in ["192.0.2.1", "2001:db8::1"] {
        for op in ["put", "get"] {
            let out = h.client_python(EXACT_CLIENT, &[addr, "5003", op, &bytes]);
            assert_eq!(
                stdout(&out).trim(),
                "ok",
                "{op} {addr}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let m = h.scrape();
    live_conservation(&m);
    let d_of = |k: &str| sample(&m, k) - sample(&before, k);
    let port = "port=\"net_af_packet0\"";
    let to_kernel = d_of(&format!(
        "fastpath_kernel_packets_total{{{port},direction=\"to_kernel\"}}"
    ));
    let from_kernel = d_of(&format!(
        "fastpath_kernel_packets_total{{{port},direction=\"from_kernel\"}}"
    ));
    let coalesced = d_of(&format!(
        "fastpath_kernel_offloaded_total{{{port},direction=\"to_kernel\"}}"
    ));
    let cut = d_of(&format!(
        "fastpath_kernel_offloaded_total{{{port},direction=\"from_kernel\"}}"
    ));
    // What the kernel itself counted on the interface: frames it took from us, frames it gave.
    let (frames_in, frames_out) = (kif_stat(&h, "rx_packets") - rx0, kif_stat(&h, "tx_packets") - tx0);
    eprintln!(
        "to the kernel: {to_kernel} packets, {coalesced} of them coalesced, in {frames_in} frames; \
         from it: {frames_out} frames, {from_kernel} packets, {cut} cut from large frames"
    );
    // 2 × 8 MiB each way: at least 11,000 full segments each way.
    assert!(to_kernel > 11_000.0 && from_kernel > 11_000.0);
    assert!(coalesced > 0.0, "nothing was coalesced");
    assert!(
        (frames_in as f64) < to_kernel * 0.75,
        "the kernel took {frames_in} frames for {to_kernel} packets"
    );
    assert!(cut > 0.0, "the kernel wrote no large frame");
    assert!(
        (frames_out as f64) < from_kernel * 0.5,
        "the kernel wrote {frames_out} frames for {from_kernel} packets"
    );
    assert_eq!(
        sample(
            &m,
            &format!("fastpath_kernel_dropped_total{{{port},reason=\"invalid\"}}")
        ),
        0.0
    );
    stop_clean(d, &s);
}

/// A many-source flood of DNS queries from spoofed addresses (198.18.0.0 + i, `count` of them in
/// turn), raw frames to fastpathd's port at `rate` a second for `secs`; prints how many were sent.
const SPOOFED_FLOOD: &str = r#"
import socket, struct, sys, time
iface, dst_mac, src_mac, count, rate, secs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((iface, 0))
q = bytes.fromhex("abcd01000001000000000000") + b"\x04fast\x04test\x00\x00\x01\x00\x01"
eth = bytes.fromhex(dst_mac.replace(":", "")) + bytes.fromhex(src_mac.replace(":", "")) + b"\x08\x00"
def csum(b):
    t = sum(struct.unpack("!10H", b))
    t = (t & 0xFFFF) + (t >> 16)
    return ~((t & 0xFFFF) + (t >> 16)) & 0xFFFF
frames = []
for i in range(count):
    src = ((198 << 24) | (18 << 16)) + i
    udp = struct.pack("!HHHH", 1024 + i % 50000, 53, 8 + len(q), 0) + q
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), i & 0xFFFF, 0, 64, 17, 0,
                     src.to_bytes(4, "big"), bytes([192, 0, 2, 1]))
    frames.append(eth + ip[:10] + struct.pack("!H", csum(ip)) + ip[12:] + udp)
n, start = 0, time.time()
while True:
    now = time.time()
    if now >= start + secs:
        break
    # In batches of 100, each when the rate allows it.
    ahead = n / rate - (now - start)
    if ahead > 0:
        time.sleep(ahead)
    for _ in range(100):
        try:
            s.send(frames[n % count])
        except OSError:
            pass
        n += 1
print(n)
"#;

/// A DNS client asking fast.test A from one source port for `secs`, a query every 5 ms (200 a
/// second, within a known source's budget below) unless it is still waiting for the last one's
/// answer (100 ms at most); prints "answered sent".
const DNS_CLIENT: &str = r#"
import socket, struct, sys, time
addr, secs = sys.argv[1], float(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 45053))
s.settimeout(0.1)
sent = answered = 0
end = time.time() + secs
while time.time() < end:
    qid = sent & 0xFFFF
    s.sendto(struct.pack("!H", qid) + bytes.fromhex("01000001000000000000") + b"\x04fast\x04test\x00\x00\x01\x00\x01", (addr, 53))
    sent += 1
    start = time.time()
    t = start + 0.1
    while time.time() < t:
        try:
            a = s.recv(512)
        except socket.timeout:
            break
        if len(a) > 2 and struct.unpack("!H", a[:2])[0] == qid:
            answered += 1
            time.sleep(max(0.0, start + 0.005 - time.time()))
            break
print(answered, sent)
"#;

/// Runs DNS_CLIENT from the client namespace for `secs`: (answered, sent).
fn dns_client(h: &Host, secs: f64) -> (u64, u64) {
    let out = stdout(&h.client_python(DNS_CLIENT, &["192.0.2.1", &secs.to_string()]));
    let (a, s) = out.split_once(' ').unwrap_or_else(|| panic!("dns client: {out:?}"));
    (a.parse().unwrap(), s.parse().unwrap())
}

/// The MAC address of `dev` in namespace `ns`.
fn mac_of(ns: &str, dev: &str) -> String {
    let out = stdout(&ns_exec(ns, &["cat", &format!("/sys/class/net/{dev}/address")]));
    assert_eq!(out.len(), 17, "the MAC of {dev}: {out:?}");
    out
}

/// The DNS client's answers while SPOOFED_FLOOD runs for `secs`: (answered, sent, flood sent).
fn dns_client_under_flood(h: &Host, secs: f64) -> (u64, u64, u64) {
    let (dst, src) = (mac_of(&h.host, &h.port), mac_of(&h.client, &h.peer));
    let flood = Command::new("ip")
        .args(["netns", "exec", &h.client, "/usr/bin/python3", "-c", SPOOFED_FLOOD])
        .args([h.peer.as_str(), &dst, &src, "8192", "60000", &(secs + 0.5).to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let (answered, sent) = dns_client(h, secs);
    let flooded: u64 = stdout(&flood.wait_with_output().unwrap()).parse().unwrap_or(0);
    (answered, sent, flooded)
}

/// What the issue of a DDoS-facing front end is: a flood of spoofed sources at a `kernel`
/// service (dnsmasq behind the kernel path, its socket drained at 25,000 queries a second by
/// `cost_ns`) takes the socket from a client who was there before, unless `[source_limit]`
/// holds the flood to the newcomers' budget while the client keeps its own. The same daemon
/// runs both, budgets off and then on by reload.
#[test]
fn under_a_spoofed_many_source_flood_a_known_dns_client_keeps_its_answers_with_source_budgets() {
    if missing(&["dnsmasq", "curl"]) {
        return;
    }
    let _heavy = heavy();
    let mut h = Host::new();
    let s = Scratch::new("kernel-sources");
    let d = h.start(
        &s,
        "kernel-sources",
        "\n[[service]]\nname = \"dns\"\nports = [53]\nsockets = 1\nsocket_capacity = 64\naction = \"kernel\"\n\
         cost_ns = 40000\n\n[kernel]\npunt = []\n",
    );
    start_dnsmasq(&mut h, &s);
    // dnsmasq answers the spoofed sources as a server would (through the kernel path, to
    // nobody): the strict reverse-path filter would otherwise drop the flood in the kernel.
    let route = h.exec(&["ip", "route", "add", "198.18.0.0/15", "via", "192.0.2.2", "dev", &h.kif]);
    assert!(
        route.status.success(),
        "route: {}",
        String::from_utf8_lossy(&route.stderr)
    );

    let (alone, alone_sent) = dns_client(&h, 2.0);
    assert!(
        alone >= 200 && alone * 10 >= alone_sent * 9,
        "without a flood: {alone}/{alone_sent}"
    );
    let before = h.scrape();
    let (off, off_sent, off_flood) = dns_client_under_flood(&h, 3.0);
    let m_off = h.scrape();
    live_conservation(&m_off);
    let refused = |m: &BTreeMap<String, f64>| outcome(m, "kernel_full") + outcome(m, "source_limited");
    let off_refused = refused(&m_off) - refused(&before);

    // Budgets on, live: a client is known from its first query after the reload.
    let cfg = s.path("c.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        text + "\n[source_limit]\nrate = 1000\nburst = 100\nnew_rate = 2000\nnew_burst = 200\nservices = [\"dns\"]\n",
    )
    .unwrap();
    d.signal("HUP");
    wait_for(10, "the reload", || d.log_text().contains("generation 2 published"));
    let (known, known_sent) = dns_client(&h, 1.0);
    let before_on = h.scrape();
    let (on, on_sent, on_flood) = dns_client_under_flood(&h, 3.0);
    let m_on = h.scrape();
    live_conservation(&m_on);
    let newcomers = sample(&m_on, "fastpath_source_limited_total{reason=\"newcomer\"}")
        - sample(&before_on, "fastpath_source_limited_total{reason=\"newcomer\"}");
    let over = sample(&m_on, "fastpath_source_limited_total{reason=\"over_budget\"}");
    let rate = |a: u64, secs: f64| a as f64 / secs;
    let outcomes: Vec<String> = m_on
        .iter()
        .filter(|(k, v)| k.starts_with("fastpath_packets_total{") && **v > 0.0)
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    eprintln!(
        "at the end: {outcomes:?}, missed {}",
        family_sum(&m_on, "fastpath_port_rx_missed_total")
    );
    eprintln!(
        "alone {alone}/{alone_sent} in 2 s ({:.0}/s); budgets off: {off}/{off_sent} under a flood of {off_flood} \
         ({:.0}/s, {off_refused} of the flood refused at the socket); on: known {known}/{known_sent}, then \
         {on}/{on_sent} under a flood of {on_flood} ({:.0}/s, {newcomers} refused as newcomers, {over} over budget)",
        rate(alone, 2.0),
        rate(off, 3.0),
        rate(on, 3.0),
    );
    // The flood overwhelmed the socket with no budgets (so what follows can fail) ...
    assert!(off_flood > 20_000, "the flood sent only {off_flood}");
    assert!(
        off_refused as f64 > off_flood as f64 * 0.3,
        "without budgets the flood did not fill the socket: {off_refused} of {off_flood} refused"
    );
    // ... and with them it is held to the newcomers' 2,000 a second, before the socket ...
    assert!(on_flood > 20_000, "the flood sent only {on_flood}");
    assert!(
        newcomers > on_flood as f64 * 0.5,
        "the flood was not held to the newcomers' budget: {newcomers} of {on_flood}"
    );
    assert_eq!(over, 0.0, "the client was held to its budget");
    // ... while the client, known before it, is answered as it is alone: 90% of its queries
    // (seen: 99-100%; 17-50% with no budgets, at 2-9 answers a second), at half its rate alone
    // at least (seen: 71-100%: the flood's sender shares the two CPUs with the client, dnsmasq
    // and fastpathd's lcores, and slows the client's own loop).
    assert!(
        rate(on, 3.0) >= 0.5 * rate(alone, 2.0) && on * 10 >= on_sent * 9,
        "the known client under the flood: {on}/{on_sent} in 3 s, {alone}/{alone_sent} in 2 s alone"
    );
    stop_clean(d, &s);
}
