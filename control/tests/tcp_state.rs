//! The TCP state table (`[[service]] tcp_state`) against real kernel TCP: fastpathd on one end
//! of a veth pair (`net_af_packet`) in a namespace of its own, with a kernel interface there and
//! a kernel TCP server behind an `action = "kernel"` service; a client namespace on the other
//! end runs kernel TCP clients and a spoofed ACK flood from a raw socket. With tracking on the
//! flood never reaches the service and the clients' transfers complete byte-exact; turned off
//! by a reload, the same flood reaches the service (so the test can fail).

mod common;

use common::*;
use std::collections::BTreeMap;
use std::process::Output;
use std::time::Duration;

/// argv[4] clients at once, each sending argv[3] bytes to argv[1]:argv[2] on its own
/// connection; prints what the server counted for each.
const BULK_CLIENTS: &str = r#"
import socket, sys, threading
host, port, n, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
got = [None] * k
def one(i):
    c = socket.create_connection((host, port), timeout=30)
    chunk, sent = bytes(65536), 0
    while sent < n:
        c.sendall(chunk[: min(len(chunk), n - sent)])
        sent += min(len(chunk), n - sent)
    c.shutdown(socket.SHUT_WR)
    got[i] = c.recv(64).decode()
ts = [threading.Thread(target=one, args=(i,)) for i in range(k)]
[t.start() for t in ts]
[t.join() for t in ts]
print(" ".join(str(g) for g in got))
"#;

/// Spoofed ACKs (random sources in 198.18.0.0/15, random ports, sequence and acknowledgment
/// numbers, valid checksums) to argv[1]:argv[2] for argv[3] seconds from a raw socket; prints
/// how many were sent.
const ACK_FLOOD: &str = r#"
import random, socket, struct, sys, time
dst, port, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
d = socket.inet_aton(dst)
pkts = []
for i in range(4096):
    src = socket.inet_aton("198.%d.%d.%d" % (18 + (i & 1), random.randrange(256), random.randrange(1, 255)))
    sport = random.randrange(1024, 65536)
    flags = 0x04 if i % 16 == 0 else 0x10
    tcp = struct.pack("!HHIIBBHHH", sport, port, random.getrandbits(32), random.getrandbits(32), 5 << 4, flags, 65535, 0, 0)
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

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn sample(m: &BTreeMap<String, f64>, key: &str) -> f64 {
    m.get(key).copied().unwrap_or(0.0)
}

/// What the service's sockets took (outcome `delivered` for it).
fn delivered(m: &BTreeMap<String, f64>) -> f64 {
    m.iter()
        .filter(|(k, _)| k.starts_with("fastpath_socket_delivered_total{service=\"bulk\","))
        .map(|(_, v)| v)
        .sum()
}

fn flood(h: &Host, secs: &str) -> u64 {
    let out = h.client_python(ACK_FLOOD, &["192.0.2.1", "5002", secs]);
    assert!(
        out.status.success(),
        "the flood: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout(&out).parse().unwrap()
}

/// `sum(rx) == sum(outcomes)` on a live scrape, within what a scrape's two reads can miss.
fn live_conservation(m: &BTreeMap<String, f64>) {
    let rx = family_sum(m, "fastpath_rx_packets_total");
    let outcomes = family_sum(m, "fastpath_packets_total");
    assert!((rx - outcomes).abs() <= 64.0, "rx {rx} outcomes {outcomes}");
}

#[test]
fn a_spoofed_ack_flood_never_reaches_a_tracked_tcp_service_and_its_clients_transfer_whole() {
    if missing(&["curl"]) {
        return;
    }
    let mut h = Host::new();
    let s = Scratch::new("tcp-state");
    // No learning window: every flow here starts after fastpathd does.
    let d = h.start(
        &s,
        "tcp-state",
        "\n[[service]]\nname = \"bulk\"\nprotocol = \"tcp\"\nports = [5002]\naction = \"kernel\"\n\
         tcp_state = true\n\n[tcp_state]\nlearn_s = 0\n",
    );
    h.spawn(&["/usr/bin/python3", "-c", BULK_SERVER, "5002"], &s.path("server.log"));
    wait_for(10, "the server listening", || {
        stdout(&ns_exec(&h.host, &["ss", "-H", "-ltn"])).contains(":5002 ")
    });

    // The flood alone: not one segment reaches the service; every one is tcp_out_of_state.
    let sent = flood(&h, "2");
    std::thread::sleep(Duration::from_millis(300));
    let m = h.scrape();
    live_conservation(&m);
    let dropped = outcome(&m, "tcp_out_of_state");
    eprintln!(
        "flood alone: {sent} sent, {dropped} tcp_out_of_state, {} delivered",
        delivered(&m)
    );
    assert!(dropped > 1000, "{dropped} of {sent} counted tcp_out_of_state");
    assert_eq!(delivered(&m), 0.0, "a spoofed segment reached the service");
    let no_flow = sample(&m, "fastpath_tcp_state_total{reason=\"no_flow\"}");
    let rst = sample(&m, "fastpath_tcp_state_total{reason=\"rst_no_flow\"}");
    assert!(rst > 0.0 && no_flow > rst, "no_flow {no_flow}, rst_no_flow {rst}");
    assert_eq!((no_flow + rst) as u64, dropped, "every drop has its reason");

    // Clients transferring while the flood goes on: every byte arrives.
    let flooding = h.client_spawn(ACK_FLOOD, &["192.0.2.1", "5002", "5"]);
    std::thread::sleep(Duration::from_millis(300));
    let bytes = 4 << 20;
    let out = h.client_python(BULK_CLIENTS, &["192.0.2.1", "5002", &bytes.to_string(), "4"]);
    let counted = stdout(&out);
    let flood_out = flooding.wait_with_output().unwrap();
    assert_eq!(
        counted,
        vec![bytes.to_string(); 4].join(" "),
        "the server counted other lengths: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sent2: u64 = stdout(&flood_out).parse().unwrap_or(0);
    let m = h.scrape();
    live_conservation(&m);
    let dropped2 = outcome(&m, "tcp_out_of_state");
    let established = sample(&m, "fastpath_tcp_state_entries{state=\"established\"}");
    eprintln!(
        "flood with 4 clients: {sent2} sent, {} more tcp_out_of_state, {} delivered, {established} established",
        dropped2 - dropped,
        delivered(&m)
    );
    assert!(dropped2 - dropped > 1000, "the second flood was not dropped");
    assert_eq!(sample(&m, "fastpath_tcp_state_total{reason=\"bad_handshake\"}"), 0.0);
    assert_eq!(sample(&m, "fastpath_tcp_state_total{reason=\"table_full\"}"), 0.0);
    // The clients' segments are all that reached the service: 4 × 4 MiB is at least 2,900
    // full segments, and the flood's were thousands more.
    assert!(delivered(&m) >= 2900.0, "{}", delivered(&m));

    // Tracking off (a reload): the same flood reaches the service.
    let cfg = s.path("c.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text.replace("tcp_state = true\n", "tcp_state = false\n")).unwrap();
    d.signal("HUP");
    wait_for(10, "the reload", || d.log_text().contains("generation 2 published"));
    let before = delivered(&h.scrape());
    let sent3 = flood(&h, "2");
    std::thread::sleep(Duration::from_millis(300));
    let m = h.scrape();
    live_conservation(&m);
    let reached = delivered(&m) - before;
    eprintln!("tracking off: {sent3} sent, {reached} delivered to the service");
    assert!(
        reached > 1000.0,
        "tracking off, the flood did not reach the service: {reached}"
    );
    assert_eq!(
        outcome(&m, "tcp_out_of_state"),
        dropped2,
        "nothing dropped with tracking off"
    );

    let (code, log) = d.stop();
    assert_eq!(code, Some(0), "fastpathd exit:\n{log}");
    let dump = parse_metrics(&std::fs::read_to_string(s.path("dump.prom")).unwrap());
    assert_conservation(&dump);
}
