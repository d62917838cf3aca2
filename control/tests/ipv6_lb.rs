//! IPv6 through a `tunnel` service end to end: a kernel client talks TCP (and UDP) over IPv6 to
//! a service address (VIP) on fastpathd, whose worker spreads the flows over GRE-over-IPv6
//! backends; Open vSwitch's user-space (netdev) datapath terminates them (`gre` ports with IPv6
//! endpoints, IP in GRE: OVS's `ip6gre` type carries Ethernet only) and hands the inner packets
//! to a kernel server on the VIP, which answers the client directly (direct server return, as
//! Katran's and VPP lb's backends do). One more GRE port with IPv4 endpoints carries the mixed
//! families.
//!
//! ```text
//!  ns fp                      ns ovs                                            ns client
//!  fastpathd ─ veth ──────── br-phy (netdev, LOCAL 2001:db8:1::a, ::b, ::c) ─ veth ─ 2001:db8:1::3
//!  2001:db8:1::1              │  native tunnelling: GRE to ::a, ::b, ::c is popped
//!  2001:db8:f::10 (VIP)       gre-a, gre-b, gre-c (GRE over IPv6, packet_type=legacy_l3)
//!  198.18.0.10 (VIP, v4)      │
//!  192.0.2.1 (v4 underlay)    br-int (netdev, LOCAL: into the kernel; the VIPs on lo, a server)
//!     └ mgmt veth (kernel) ── 2001:db8:2::2: the backends' health checks reach ::a, ::b, ::c
//! ```
//!
//! Each test reads the wire on the OVS side of fastpathd's veth with tshark and checks what
//! fastpathd sent: outer IPv6 (or IPv4) from fastpathd to the flow's backend, GRE, no outer
//! fragment, and the inner packet intact (its TCP, UDP, ICMP or ICMPv6 checksum good).

mod common;

use common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

const FP_MAC: &str = "02:00:00:00:6a:01";
const PHY_MAC: &str = "02:00:00:00:6b:01";
const INT_MAC: &str = "02:00:00:00:6b:02";
const CLIENT_MAC: &str = "02:00:00:00:6c:01";
const INNER_GW_MAC: &str = "02:00:00:00:6b:99";
const FP_UNDERLAY: &str = "2001:db8:1::1";
const CLIENT: &str = "2001:db8:1::3";
const VIP: &str = "2001:db8:f::10";
/// The IPv4 side of the mixed cases: fastpathd's IPv4 underlay address, the OVS side's, and an
/// IPv4 VIP.
const FP_UNDERLAY4: &str = "192.0.2.1";
const OVS_UNDERLAY4: &str = "192.0.2.2";
const CLIENT4: &str = "192.0.2.3";
const VIP4: &str = "198.18.0.10";
const FP_MGMT: &str = "2001:db8:2::1";
const OVS_MGMT: &str = "2001:db8:2::2";
const PORT: u16 = 9000;
/// The backend whose tunnel is keyed and checksummed (RFC 2890 key, RFC 2784 checksum) on both
/// ends; the others are plain.
const CHECKSUMMED: &str = "c";
const KEY: u32 = 7;

/// A backend: the tunnel's name, its underlay address on the OVS side, its GRE port's number.
#[derive(Clone, Copy, Debug)]
struct Backend {
    name: &'static str,
    addr: &'static str,
    ofport: u16,
    /// What its tunnel's `health` checks.
    health: &'static str,
}

const BACKENDS: [Backend; 3] = [
    Backend {
        name: "a",
        addr: "2001:db8:1::a",
        ofport: 10,
        health: "tcp:8080",
    },
    Backend {
        name: "b",
        addr: "2001:db8:1::b",
        ofport: 11,
        health: "http://[2001:db8:1::b]:8080/healthz",
    },
    Backend {
        name: "c",
        addr: "2001:db8:1::c",
        ofport: 12,
        health: "tcp:8080",
    },
];

/// The IPv4-underlay backend of the mixed case (IPv6 inside IPv4 GRE).
const BACKEND4: Backend = Backend {
    name: "v4",
    addr: OVS_UNDERLAY4,
    ofport: 20,
    health: "tcp:8080",
};

fn backend_of(addr: &str) -> &'static str {
    BACKENDS
        .iter()
        .chain([&BACKEND4])
        .find(|b| b.addr == addr)
        .map(|b| b.name)
        .unwrap_or_else(|| panic!("no backend at {addr}"))
}

/// The kernel server on the OVS side: TCP on both VIPs, port 9000; echoes what it reads, and
/// answers `big` with 6000 bytes. Plus the backends' health check target on port 8080 (HTTP
/// 200 to anything). Prints `ready`.
const SERVER_PY: &str = r#"
import socket, sys, threading
def serve(c):
    while True:
        d = c.recv(65536)
        if not d: return
        c.sendall(b'x' * 6000 if d == b'big' else d)
def listen(addr, port, fam, handler):
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port)); s.listen(256)
    def loop():
        while True:
            c, _ = s.accept()
            threading.Thread(target=handler, args=(c,), daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()
def health(c):
    c.recv(4096); c.sendall(b'HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok'); c.close()
listen(sys.argv[1], 9000, socket.AF_INET6, serve)
listen(sys.argv[2], 9000, socket.AF_INET, serve)
listen('::', 8080, socket.AF_INET6, health)
def udp():
    u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    u.bind((sys.argv[1], 9001))
    while True:
        d, src = u.recvfrom(65536)
        u.sendto(b'got %d' % len(d), src)
threading.Thread(target=udp, daemon=True).start()
print('ready', flush=True)
sys.stdin.read()
"#;

/// The client: reads commands on stdin, answers `ok ...` on stdout (or exits with the error).
/// `open VIP FIRST COUNT`: connections from source ports FIRST.., each says hello and reads the
/// echo, and stays open; `talk`: every open connection sends and reads its echo again; `big
/// PORT`: the connection from PORT asks for 6000 bytes; `upload PORT N`: sends N bytes and reads
/// them back.
const CLIENT_PY: &str = r#"
import socket, sys
vip6 = sys.argv[1]
conns = {}
def recv_n(s, n):
    got = b''
    while len(got) < n:
        d = s.recv(65536)
        if not d: raise SystemExit('closed after %d of %d bytes' % (len(got), n))
        got += d
    return got
for line in sys.stdin:
    w = line.split()
    if w[0] == 'open':
        vip, first, count = w[1], int(w[2]), int(w[3])
        fam = socket.AF_INET6 if ':' in vip else socket.AF_INET
        for port in range(first, first + count):
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.settimeout(5)
            s.bind(('', port)); s.connect((vip, 9000))
            msg = b'hello %d' % port
            s.sendall(msg)
            assert recv_n(s, len(msg)) == msg
            conns[port] = s
    elif w[0] == 'talk':
        for port, s in conns.items():
            msg = b'again %d' % port
            s.sendall(msg)
            assert recv_n(s, len(msg)) == msg
    elif w[0] == 'big':
        s = conns[int(w[1])]
        s.sendall(b'big')
        assert recv_n(s, 6000) == b'x' * 6000
    elif w[0] == 'datagram':
        u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        u.settimeout(3)
        u.bind(('', int(w[1])))
        n = int(w[2])
        u.sendto(b'd' * n, (vip6, 9001))
        got = u.recv(100)
        assert got == b'got %d' % n, got
    elif w[0] == 'upload':
        s, n = conns[int(w[1])], int(w[2])
        s.sendall(b'u' * n)
        assert recv_n(s, n) == b'u' * n
    print('ok', line.strip(), flush=True)
"#;

/// A running client (see [`CLIENT_PY`]).
struct Client {
    child: Child,
    stdin: ChildStdin,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Client {
    fn ask(&mut self, cmd: &str) {
        writeln!(self.stdin, "{cmd}").unwrap();
        match self.lines.next() {
            Some(Ok(l)) if l == format!("ok {cmd}") => {}
            other => {
                let _ = self.child.kill();
                let mut err = String::new();
                let _ = std::io::Read::read_to_string(self.child.stderr.as_mut().unwrap(), &mut err);
                panic!("client {cmd:?}: {other:?}: {err}");
            }
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// fastpathd, OVS and the kernel client and server (see the module doc). Everything is stopped
/// and removed on drop (fastpathd, the server and OVS, then the namespaces), also when a test
/// fails half way through setting it up.
struct Lab {
    ns_fp: String,
    ns_ovs: String,
    ns_client: String,
    if_fp: String,
    if_ovs: String,
    if_cl: String,
    fastpathd: Option<Daemon>,
    server: Option<Program>,
    ovs: Option<Ovs>,
    netns: Netns,
    dump: PathBuf,
    cfg: PathBuf,
    /// Appended to the config (more services).
    extra: String,
    s: Scratch,
}

impl Lab {
    fn new(name: &str) -> Lab {
        let id = lab_id();
        let s = Scratch::new(&format!("v6lb-{name}"));
        let mut lab = Lab {
            ns_fp: format!("v6l{id}f"),
            ns_ovs: format!("v6l{id}o"),
            ns_client: format!("v6l{id}c"),
            if_fp: format!("v6a{id}"),
            if_ovs: format!("v6b{id}"),
            if_cl: format!("v6c{id}"),
            fastpathd: None,
            server: None,
            ovs: None,
            netns: Netns::default(),
            dump: s.path("metrics.prom"),
            cfg: s.path("c.toml"),
            extra: String::new(),
            s,
        };
        lab.underlay();
        lab.start_ovs();
        lab.start_server();
        lab
    }

    fn underlay(&mut self) {
        let (fp, ovs, cl) = (&self.ns_fp.clone(), &self.ns_ovs.clone(), &self.ns_client.clone());
        let if_cl_ovs = self.if_fp.replace("v6a", "v6d");
        let (mgmt_fp, mgmt_ovs) = (self.if_fp.replace("v6a", "v6m"), self.if_fp.replace("v6a", "v6n"));
        for ns in [fp, ovs, cl] {
            self.netns.add(ns);
        }
        ip(&["link", "add", &self.if_fp, "type", "veth", "peer", "name", &self.if_ovs]);
        ip(&["link", "set", &self.if_fp, "netns", fp, "address", FP_MAC]);
        ip(&["link", "set", &self.if_ovs, "netns", ovs]);
        ip(&["link", "add", &self.if_cl, "type", "veth", "peer", "name", &if_cl_ovs]);
        ip(&["link", "set", &self.if_cl, "netns", cl, "address", CLIENT_MAC]);
        ip(&["link", "set", &if_cl_ovs, "netns", ovs]);
        ip(&["link", "add", &mgmt_fp, "type", "veth", "peer", "name", &mgmt_ovs]);
        ip(&["link", "set", &mgmt_fp, "netns", fp]);
        ip(&["link", "set", &mgmt_ovs, "netns", ovs]);
        // fastpathd's kernel says nothing on the veth DPDK drives; the OVS side's kernel sends no
        // router solicitations into it.
        sysctl(fp, &[&format!("net.ipv6.conf.{}.disable_ipv6=1", self.if_fp)]);
        sysctl(
            ovs,
            &[
                "net.ipv6.conf.default.router_solicitations=0",
                "net.ipv6.conf.all.router_solicitations=0",
                "net.ipv4.conf.all.rp_filter=0",
                "net.ipv4.conf.default.rp_filter=0",
            ],
        );
        for (ns, ifname) in [
            (fp, &self.if_fp),
            (ovs, &self.if_ovs),
            (ovs, &if_cl_ovs),
            (cl, &self.if_cl),
        ] {
            ip(&["-n", ns, "link", "set", ifname, "up"]);
        }
        // The client: the VIPs through fastpathd, whose MAC it knows (no neighbour discovery to
        // wait for); its kernel computes checksums (veth leaves them to "hardware").
        ip(&words(&format!(
            "-n {cl} addr add {CLIENT}/64 dev {} nodad",
            self.if_cl
        )));
        ip(&words(&format!("-n {cl} addr add {CLIENT4}/24 dev {}", self.if_cl)));
        ip(&words(&format!("-n {cl} -6 route add {VIP} via {FP_UNDERLAY}")));
        ip(&words(&format!("-n {cl} route add {VIP4} via {FP_UNDERLAY4}")));
        ip(&words(&format!(
            "-n {cl} -6 neigh replace {FP_UNDERLAY} lladdr {FP_MAC} dev {} nud permanent",
            self.if_cl
        )));
        ip(&words(&format!(
            "-n {cl} neigh replace {FP_UNDERLAY4} lladdr {FP_MAC} dev {} nud permanent",
            self.if_cl
        )));
        must(ns_exec(cl, &["ethtool", "-K", &self.if_cl, "tx", "off"]), "ethtool");
        must(ns_exec(ovs, &["ethtool", "-K", &self.if_ovs, "tx", "off"]), "ethtool");
        // The management network: fastpathd's health checks reach the backends' addresses.
        ip(&words(&format!("-n {fp} addr add {FP_MGMT}/64 dev {mgmt_fp} nodad")));
        ip(&words(&format!("-n {ovs} addr add {OVS_MGMT}/64 dev {mgmt_ovs} nodad")));
        ip(&["-n", fp, "link", "set", &mgmt_fp, "up"]);
        ip(&["-n", ovs, "link", "set", &mgmt_ovs, "up"]);
        ip(&words(&format!("-n {fp} -6 route add 2001:db8:1::/64 via {OVS_MGMT}")));
    }

    fn ovs(&self) -> &Ovs {
        self.ovs.as_ref().unwrap()
    }

    /// ovsdb-server, ovs-vswitchd, the bridges, one GRE-over-IPv6 port per backend (and the IPv4 GRE
    /// port of the mixed case), the flows into the kernel, the addresses.
    fn start_ovs(&mut self) {
        self.ovs = Some(Ovs::start(&self.ns_ovs, self.s.path("ovs")));
        let ovs = self.ovs();
        let if_cl_ovs = self.if_fp.replace("v6a", "v6d");
        let mut cmd = format!(
            "add-br br-phy -- set bridge br-phy datapath_type=netdev other-config:hwaddr={PHY_MAC} \
             -- add-port br-phy {} -- add-port br-phy {if_cl_ovs} \
             -- add-br br-int -- set bridge br-int datapath_type=netdev other-config:hwaddr={INT_MAC}",
            self.if_ovs
        );
        // IP in GRE (protocol type 0x86dd/0x0800), not Ethernet: packet_type=legacy_l3. OVS's
        // `ip6gre` type carries Ethernet only ("cannot carry L3 traffic"); `gre` with IPv6
        // endpoints is its GRE over IPv6 for IP payloads.
        for b in BACKENDS {
            cmd += &format!(
                " -- add-port br-int gre-{0} -- set interface gre-{0} type=gre ofport_request={1} \
                 options:remote_ip={FP_UNDERLAY} options:local_ip={2} options:packet_type=legacy_l3",
                b.name, b.ofport, b.addr
            );
            if b.name == CHECKSUMMED {
                cmd += &format!(" options:csum=true options:key={KEY}");
            }
        }
        cmd += &format!(
            " -- add-port br-int gre-v4 -- set interface gre-v4 type=gre ofport_request={} \
             options:remote_ip={FP_UNDERLAY4} options:local_ip={OVS_UNDERLAY4} options:packet_type=legacy_l3",
            BACKEND4.ofport
        );
        ovs.vsctl(&words(&cmd));
        ovs.run(&["ovs-ofctl", "del-flows", "br-int"]);
        for b in BACKENDS.iter().chain([&BACKEND4]) {
            for proto in ["ip", "ipv6"] {
                ovs.run(&[
                    "ovs-ofctl",
                    "add-flow",
                    "br-int",
                    &format!(
                        "in_port={},{proto},actions=mod_dl_src:{INNER_GW_MAC},mod_dl_dst:{INT_MAC},LOCAL",
                        b.ofport
                    ),
                ]);
            }
        }
        let ns = &self.ns_ovs;
        for b in BACKENDS {
            ip(&words(&format!("-n {ns} addr add {}/64 dev br-phy nodad", b.addr)));
        }
        ip(&words(&format!("-n {ns} addr add {OVS_UNDERLAY4}/24 dev br-phy")));
        ip(&["-n", ns, "link", "set", "br-phy", "up"]);
        ip(&["-n", ns, "link", "set", "br-int", "up"]);
        ip(&words(&format!("-n {ns} addr add {VIP}/128 dev lo nodad")));
        ip(&words(&format!("-n {ns} addr add {VIP4}/32 dev lo")));
        // The server answers the client directly, over br-phy.
        ip(&words(&format!(
            "-n {ns} -6 neigh replace {CLIENT} lladdr {CLIENT_MAC} dev br-phy nud permanent"
        )));
        ip(&words(&format!(
            "-n {ns} neigh replace {CLIENT4} lladdr {CLIENT_MAC} dev br-phy nud permanent"
        )));
        // OVS learns the bridges' addresses from the namespace's netlink: GRE to each backend
        // address must be terminated before the first flow.
        wait_for(10, "OVS terminating GRE to every backend address", || {
            let ports = ovs.appctl(&["tnl/ports/show", "-v"]);
            BACKENDS
                .iter()
                .all(|b| ports.contains(&format!("dst={},proto=47", b.addr)))
                && ports.contains(&format!("dst={OVS_UNDERLAY4},proto=47"))
        });
    }

    fn start_server(&mut self) {
        self.server = Some(Program::python_ready(&self.ns_ovs, SERVER_PY, &[VIP, VIP4]));
    }

    /// The config: the `lb` service on `vips` over `backends`; every IPv6 tunnel with its
    /// health check.
    fn config(&self, backends: &[&str], vips: &[&str]) -> String {
        let vdev = format!("--vdev=net_af_packet0,iface={},qpairs=2", self.if_fp);
        let list = |b: &[&str]| b.iter().map(|b| format!("\"{b}\"")).collect::<Vec<_>>().join(", ");
        let mut cfg = format!(
            "[dpdk]\neal_args = {}\nmbufs = 16383\n\n[[port]]\ndevice = \"net_af_packet0\"\nrx_queues = 2\n\
             tx_queues = 2\nipv6 = [\"{FP_UNDERLAY}/64\", \"{VIP}\"]\nipv4 = [\"{FP_UNDERLAY4}/24\", \"{VIP4}\"]\n\n\
             [lcores]\nrx = [0]\nworkers = [1]\nidle_sleep_us = 50\n\n[control]\nsocket = \"control.sock\"\n\n\
             [metrics]\nenabled = false\n\n[reassembly]\nbuffers = 32\n\n[conntrack]\nentries = 65536\n\n\
             [[service]]\nname = \"lb\"\nprotocol = \"tcp\"\nports = [{PORT}]\naddresses = [{}]\nsockets = 2\n\
             socket_capacity = 1024\naction = \"tunnel\"\ntunnels = [{2}]\n\n\
             [[service]]\nname = \"lbu\"\nprotocol = \"udp\"\nports = [9001]\naddresses = [\"{VIP}\"]\nsockets = 2\n\
             socket_capacity = 1024\naction = \"tunnel\"\ntunnels = [{2}]\n",
            eal_args(&format!("v6lb-{}", self.ns_fp), &[vdev]),
            list(vips),
            list(backends)
        );
        for b in BACKENDS {
            cfg += &format!(
                "\n[[tunnel]]\nname = \"{}\"\nlocal = \"{FP_UNDERLAY}\"\nremote = \"{}\"\nport = \"net_af_packet0\"\n\
                 next_hop_mac = \"{PHY_MAC}\"\nhealth = \"{}\"\nhealth_interval_ms = 200\nhealth_timeout_ms = 150\n\
                 health_rise = 1\nhealth_fall = 2\n",
                b.name, b.addr, b.health
            );
            if b.name == CHECKSUMMED {
                cfg += &format!("checksum = true\nkey = {KEY}\n");
            }
        }
        cfg += &format!(
            "\n[[tunnel]]\nname = \"{}\"\nlocal = \"{FP_UNDERLAY4}\"\nremote = \"{}\"\nport = \"net_af_packet0\"\n\
             next_hop_mac = \"{PHY_MAC}\"\n",
            BACKEND4.name, BACKEND4.addr
        );
        cfg + &self.extra
    }

    fn start_fastpathd(&mut self, backends: &[&str], vips: &[&str]) {
        std::fs::write(&self.cfg, self.config(backends, vips)).unwrap();
        self.fastpathd = Some(Daemon::start_in(&self.s, &self.ns_fp, &self.cfg, &self.dump));
    }

    /// Rewrites the config and waits for the reload that publishes `generation`.
    fn reload(&self, backends: &[&str], vips: &[&str], generation: u32) {
        std::fs::write(&self.cfg, self.config(backends, vips)).unwrap();
        let d = self.fastpathd.as_ref().unwrap();
        d.signal("HUP");
        wait_for(20, "the reload", || {
            d.log_text().contains(&format!("generation {generation} published"))
        });
    }

    fn ctl(&self, args: &[&str]) -> serde_json::Value {
        ctl_json(&self.s.path("control.sock"), args)
    }

    fn tunnel_row(&self, name: &str) -> serde_json::Value {
        tunnel_row(&self.s.path("control.sock"), name)
    }

    fn client(&self) -> Client {
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns_client,
                "/usr/bin/python3",
                "-c",
                CLIENT_PY,
                VIP,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Client { child, stdin, lines }
    }

    /// A capture on the OVS side of fastpathd's veth (what fastpathd sends, what the client sends it).
    fn capture(&self, name: &str) -> Capture {
        Capture::start(&self.ns_ovs, &self.if_ovs, self.s.path(&format!("{name}.pcap")))
    }

    /// A capture on the client's veth (what the server answers).
    fn capture_client(&self, name: &str) -> Capture {
        Capture::start(&self.ns_client, &self.if_cl, self.s.path(&format!("{name}.pcap")))
    }

    fn stop_fastpathd(&mut self) -> BTreeMap<String, f64> {
        self.fastpathd.take().unwrap().stop_clean(&self.dump)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // What runs in the namespaces stops before `netns` deletes them.
        drop(self.fastpathd.take());
        drop(self.server.take());
        drop(self.ovs.take());
    }
}

const FIELDS: &[&str] = &[
    "frame.number",
    "eth.src",
    "eth.type",
    "ipv6.src",
    "ipv6.dst",
    "ipv6.nxt",
    "ip.src",
    "ip.dst",
    "ip.proto",
    "ip.flags.mf",
    "gre.proto",
    "tcp.srcport",
    "tcp.dstport",
    "tcp.checksum.status",
    "tcp.len",
    "tcp.seq_raw",
    "icmpv6.type",
    "icmpv6.checksum.status",
    "icmpv6.mtu",
    "ipv6.plen",
    "ip.len",
    "ip.checksum.status",
    "icmp.type",
    "icmp.code",
    "icmp.checksum.status",
    "udp.checksum.status",
    "udp.dstport",
    "gre.flags.checksum",
    "gre.checksum.status",
    "gre.key",
];

/// One frame as tshark decoded it; fields in several headers are comma-separated, outermost first.
struct Frame(Vec<String>);

impl Frame {
    fn f(&self, name: &str) -> &str {
        let i = FIELDS.iter().position(|f| *f == name).unwrap();
        self.0.get(i).map(String::as_str).unwrap_or("")
    }
    fn outer(&self, name: &str) -> &str {
        self.f(name).split(',').next().unwrap()
    }
    fn inner(&self, name: &str) -> &str {
        self.f(name).rsplit(',').next().unwrap()
    }
    fn line(&self) -> String {
        self.0.join(" | ")
    }
    /// IPv6 in IPv6 GRE (or IPv4 in it): the outer header is IPv6 with next header GRE.
    fn is_gre6(&self) -> bool {
        self.f("eth.type") == "0x86dd" && self.outer("ipv6.nxt") == "47"
    }
}

fn read_wire(pcap: &Path) -> Vec<Frame> {
    let frames: Vec<Frame> = tshark_checked(pcap, "", FIELDS).into_iter().map(Frame).collect();
    eprintln!("--- {} ({} frames)", pcap.display(), frames.len());
    for f in frames.iter().take(400) {
        eprintln!("{}", f.line());
    }
    frames
}

/// Everything wrong with what fastpathd (its MAC) sent: anything but neighbour discovery that
/// is not GRE to a backend from our underlay address, outer fragments, inner packets whose
/// TCP or ICMPv6 checksum is not good.
fn tunnel_problems(frames: &[Frame]) -> Vec<String> {
    let mut problems = vec![];
    for f in frames.iter().filter(|f| f.f("eth.src") == FP_MAC) {
        let icmp = f.f("icmpv6.type");
        if f.f("eth.type") == "0x86dd" && f.outer("ipv6.nxt") == "58" && matches!(icmp, "135" | "136") {
            continue;
        }
        if f.f("eth.type") == "0x0806" {
            continue;
        }
        // fastpathd's own Packet Too Big to a client whose segment does not fit a tunnel.
        if icmp == "2" && f.outer("ipv6.src") == VIP && f.outer("ipv6.dst") == CLIENT && f.outer("ipv6.nxt") == "58" {
            continue;
        }
        let (src, dst) = if f.f("eth.type") == "0x86dd" {
            (f.outer("ipv6.src"), f.outer("ipv6.dst"))
        } else {
            (f.outer("ip.src"), f.outer("ip.dst"))
        };
        let gre = f.outer("ipv6.nxt") == "47" || f.outer("ip.proto") == "47";
        let ours = src == FP_UNDERLAY || src == FP_UNDERLAY4;
        if !gre || !ours || !BACKENDS.iter().chain([&BACKEND4]).any(|b| b.addr == dst) {
            problems.push(format!("not GRE to a backend: {}", f.line()));
            continue;
        }
        if f.f("eth.type") == "0x0800" && f.outer("ip.checksum.status") != "1" {
            problems.push(format!("an outer IPv4 checksum not good: {}", f.line()));
        }
        let csum = matches!(f.f("gre.flags.checksum").split(',').next(), Some("1" | "True" | "true"));
        if dst == BACKENDS[2].addr {
            if !csum || f.f("gre.checksum.status").split(',').next() != Some("1") {
                problems.push(format!("no good GRE checksum to {CHECKSUMMED}: {}", f.line()));
            }
            if f.f("gre.key").split(',').next() != Some(&format!("0x{KEY:08x}")) {
                problems.push(format!("not GRE key {KEY} to {CHECKSUMMED}: {}", f.line()));
            }
        } else if csum || !f.f("gre.key").is_empty() {
            problems.push(format!("a checksum or key on a plain tunnel: {}", f.line()));
        }
        if f.f("ip.flags.mf").split(',').any(|v| v == "1" || v == "True") {
            problems.push(format!("an outer fragment: {}", f.line()));
        }
        // (A quoted segment in an ICMP error is cut short: its checksum cannot be checked.)
        let quoted = !icmp.is_empty() || !f.f("icmp.type").is_empty();
        if !quoted && !f.f("tcp.checksum.status").is_empty() && f.f("tcp.checksum.status") != "1" {
            problems.push(format!("an inner TCP checksum not good: {}", f.line()));
        }
        if !quoted && !f.f("udp.checksum.status").is_empty() && f.f("udp.checksum.status") != "1" {
            problems.push(format!("an inner UDP checksum not good: {}", f.line()));
        }
        if !f.f("icmp.checksum.status").is_empty() && f.f("icmp.checksum.status") != "1" {
            problems.push(format!("an inner ICMP checksum not good: {}", f.line()));
        }
        if !f.f("icmpv6.checksum.status").is_empty() && f.f("icmpv6.checksum.status") != "1" {
            problems.push(format!("an inner ICMPv6 checksum not good: {}", f.line()));
        }
    }
    problems
}

/// Per client source port: the backends its segments went to, from fastpathd's GRE on the wire.
fn backends_by_port(frames: &[Frame], vip: &str) -> BTreeMap<u16, BTreeSet<&'static str>> {
    let mut out: BTreeMap<u16, BTreeSet<&'static str>> = BTreeMap::new();
    let gre = |f: &&Frame| f.outer("ipv6.nxt") == "47" || f.outer("ip.proto") == "47";
    for f in frames.iter().filter(|f| f.f("eth.src") == FP_MAC).filter(gre) {
        let dst = if f.is_gre6() {
            f.outer("ipv6.dst")
        } else {
            f.outer("ip.dst")
        };
        let inner_dst = if vip.contains(':') {
            f.inner("ipv6.dst")
        } else {
            f.inner("ip.dst")
        };
        if inner_dst != vip || f.f("tcp.dstport") != PORT.to_string() {
            continue;
        }
        let port: u16 = f.f("tcp.srcport").parse().unwrap();
        out.entry(port).or_default().insert(backend_of(dst));
    }
    out
}

const OLD: u16 = 40_000;
const NEW: u16 = 41_000;
/// Connections opened while a backend is down.
const DOWN: u16 = 43_000;
const FLOWS: u16 = 24;

/// TCP over IPv6 from a kernel client to the VIP, spread by Maglev over two GRE-over-IPv6
/// backends whose health checks (`tcp:8080`, `http://[v6]:8080/healthz`) pass; a reload adds a
/// third; every established connection keeps its backend (the connection table), new ones
/// follow the new table, `fastpathctl flow` names the tracked backend of a v6 flow; the wire
/// carries only well-formed GRE over IPv6 with intact inner segments. Then backend b fails its
/// check (`http://[2001:db8:1::b]:8080/healthz`) and new connections avoid it until it is back.
#[test]
fn v6_vip_over_gre_over_ipv6_backends_keeps_established_flows_across_a_reload() {
    if missing(NEEDS_OVS) {
        return;
    }
    let t0 = Instant::now();
    let mut lab = Lab::new("keep");
    lab.start_fastpathd(&["a", "b"], &[VIP]);
    wait_for(10, "every backend's health check passed", || {
        ["a", "b", "c"].iter().all(|b| lab.tunnel_row(b)["health_last"] == "ok")
    });
    let cap = lab.capture("keep");
    let mut client = lab.client();
    client.ask(&format!("open {VIP} {OLD} {FLOWS}"));
    lab.reload(&["a", "b", "c"], &[VIP], 2);
    client.ask("talk");
    client.ask(&format!("open {VIP} {NEW} {FLOWS}"));
    // `fastpathctl flow` over v6: the worker's tracked backend, pinned where Maglev moved.
    let mut pinned = 0;
    let wire = read_wire(&cap.finish());
    let by_port = backends_by_port(&wire, VIP);
    for port in OLD..OLD + FLOWS {
        let seen = by_port
            .get(&port)
            .unwrap_or_else(|| panic!("port {port}: no GRE on the wire"));
        assert_eq!(
            seen.len(),
            1,
            "port {port}: one backend for the connection's life: {seen:?}"
        );
        let was = *seen.iter().next().unwrap();
        let f = lab.ctl(&["flow", "tcp", &format!("[{CLIENT}]:{port}"), &format!("[{VIP}]:{PORT}")]);
        let d = &f["detail"];
        let tracked = d["conntrack"].as_array().expect("the worker's answer");
        assert_eq!(tracked.len(), 1, "{f}");
        assert_eq!(tracked[0]["backend"].as_str(), Some(was), "{f}");
        let moved = d["backend"].as_str() != Some(was);
        assert_eq!(tracked[0]["pinned"].as_bool(), Some(moved), "{f}");
        pinned += moved as usize;
    }
    let old: Vec<&str> = (OLD..OLD + FLOWS)
        .map(|p| *by_port[&p].iter().next().unwrap())
        .collect();
    assert!(
        old.contains(&"a") && old.contains(&"b") && !old.contains(&"c"),
        "{old:?}"
    );
    let to_c = (NEW..NEW + FLOWS)
        .filter(|p| by_port.get(p).is_some_and(|s| s.contains("c")))
        .count();
    eprintln!(
        "v6: 0 of {FLOWS} established moved, {pinned} pinned away from the new Maglev pick; \
         {to_c} of {FLOWS} new on the added backend"
    );
    assert!(pinned > 0, "adding c moves about a third of Maglev's picks");
    assert!(to_c > 0, "new connections follow the new table");
    let problems = tunnel_problems(&wire);
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    // Backend b fails its HTTP check over IPv6 (its address is gone: no answer within the
    // timeout): it leaves the table, new connections avoid it; back, it takes its share again.
    let b = BACKENDS[1].addr;
    let ns = lab.ns_ovs.clone();
    ip(&words(&format!("-n {ns} addr del {b}/64 dev br-phy")));
    wait_for(10, "b down", || lab.tunnel_row("b")["up"] == false);
    let row = lab.tunnel_row("b");
    eprintln!("b: {}", row["health_last"]);
    let cap = lab.capture("down");
    client.ask(&format!("open {VIP} {DOWN} {FLOWS}"));
    let down = backends_by_port(&read_wire(&cap.finish()), VIP);
    let on: BTreeSet<&str> = (DOWN..DOWN + FLOWS).flat_map(|p| down[&p].iter().copied()).collect();
    assert_eq!(
        on,
        BTreeSet::from(["a", "c"]),
        "new connections avoid b while it is down"
    );
    ip(&words(&format!("-n {ns} addr add {b}/64 dev br-phy nodad")));
    wait_for(10, "b up again", || lab.tunnel_row("b")["up"] == true);
    drop(client);
    let m = lab.stop_fastpathd();
    let n = FLOWS as f64;
    assert_eq!(family_sum(&m, "fastpath_conntrack_confirmations_total"), 3.0 * n);
    assert!(family_sum(&m, "fastpath_conntrack_hits_total") > 0.0);
    eprintln!("test took {:?}", t0.elapsed());
}

/// Reads the newest server → client segment of the connection from `port` in a client-side
/// capture: the sequence number right after it (what the server has sent).
fn server_next_seq(frames: &[Frame], port: u16) -> u32 {
    let f = frames
        .iter()
        .rfind(|f| f.f("tcp.dstport") == port.to_string() && f.f("tcp.srcport") == PORT.to_string())
        .expect("a segment from the server");
    let seq: u64 = f.f("tcp.seq_raw").parse().unwrap();
    let len: u64 = f.f("tcp.len").parse().unwrap();
    (seq + len) as u32
}

/// The largest IP packet (IPv6: payload length + 40) of the server's segments to `port`.
fn largest_answer(frames: &[Frame], port: u16) -> u32 {
    frames
        .iter()
        .filter(|f| f.f("tcp.dstport") == port.to_string() && f.f("tcp.srcport") == PORT.to_string())
        .map(|f| {
            f.f("ipv6.plen")
                .parse::<u32>()
                .map(|l| l + 40)
                .or_else(|_| f.f("ip.len").parse::<u32>())
                .unwrap_or(0)
        })
        .max()
        .unwrap_or(0)
}

/// An ICMPv6 Packet Too Big (MTU 1300) that quotes the server's answer to the client on the
/// connection from `port` (in-window sequence number `seq`), sent by the client's side to the
/// VIP, as a router on the way back would.
const PTB_PY: &str = r#"
import socket, struct, sys
vip, client, port, seq, mtu = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
tcp = struct.pack('!HHIIBBHHH', 9000, port, seq, 0, 0x50, 0x18, 65535, 0, 0)
quoted = struct.pack('!IHBB16s16s', 6 << 28, 1400, 6, 64, socket.inet_pton(socket.AF_INET6, vip),
                     socket.inet_pton(socket.AF_INET6, client)) + tcp + b'\0' * 200
s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
s.bind((client, 0))
s.sendto(struct.pack('!BBHI', 2, 0, 0, mtu) + quoted, (vip, 0))
"#;

/// An ICMPv6 Packet Too Big about a service flow reaches that flow's backend through its
/// tunnel, intact, and the backend's kernel acts on it (its answers on that connection shrink
/// to the MTU given); and a client segment too big for the tunnel is answered with a Packet
/// Too Big from fastpathd, after which the client's kernel sends smaller segments that arrive.
#[test]
fn v6_packet_too_big_reaches_the_flows_backend_and_the_tunnels_mtu_is_told_to_the_client() {
    if missing(NEEDS_OVS) {
        return;
    }
    let t0 = Instant::now();
    let mut lab = Lab::new("ptb");
    lab.start_fastpathd(&["a", "b", "c"], &[VIP]);
    let cap = lab.capture("ptb");
    let capc = lab.capture_client("ptb-client");
    let mut client = lab.client();
    let port = OLD;
    client.ask(&format!("open {VIP} {port} 1"));
    client.ask(&format!("big {port}"));
    // Nothing in the way yet: the server's segments fill the 1500-byte path.
    std::thread::sleep(Duration::from_millis(200));
    let cwire = read_wire(&capc.finish());
    assert!(
        largest_answer(&cwire, port) > 1400,
        "full-sized answers before the Packet Too Big"
    );
    let seq = server_next_seq(&cwire, port);
    must(
        ns_exec(
            &lab.ns_client,
            &[
                "/usr/bin/python3",
                "-c",
                PTB_PY,
                VIP,
                CLIENT,
                &port.to_string(),
                &seq.to_string(),
                "1300",
            ],
        ),
        "the Packet Too Big",
    );
    let capc = lab.capture_client("ptb-after");
    // The backend's kernel lowered its path MTU to the client: its answers shrink.
    std::thread::sleep(Duration::from_millis(300));
    client.ask(&format!("big {port}"));
    // A segment too big for the tunnel (1500 > 1456): fastpathd says so, the client resends.
    client.ask(&format!("upload {port} 4000"));
    let after = read_wire(&capc.finish());
    let wire = read_wire(&cap.finish());
    let flow_backend = {
        let by_port = backends_by_port(&wire, VIP);
        let seen = &by_port[&port];
        assert_eq!(seen.len(), 1, "{seen:?}");
        *seen.iter().next().unwrap()
    };
    let backend_addr = BACKENDS.iter().find(|b| b.name == flow_backend).unwrap().addr;
    let ptb: Vec<&Frame> = wire
        .iter()
        .filter(|f| f.f("eth.src") == FP_MAC && f.is_gre6() && f.inner("icmpv6.type") == "2")
        .collect();
    assert_eq!(ptb.len(), 1, "the Packet Too Big, in GRE");
    assert_eq!(
        ptb[0].outer("ipv6.dst"),
        backend_addr,
        "to the flow's backend: {}",
        ptb[0].line()
    );
    assert_eq!(ptb[0].inner("icmpv6.mtu"), "1300", "{}", ptb[0].line());
    assert_eq!(ptb[0].f("icmpv6.checksum.status"), "1", "{}", ptb[0].line());
    let largest = largest_answer(&after, port);
    eprintln!("the backend's answers after the Packet Too Big: at most {largest} bytes");
    assert!(
        largest <= 1300,
        "the backend's kernel took the Packet Too Big: {largest}"
    );
    // fastpathd's own Packet Too Big to the client for the upload, with the tunnel's inner MTU.
    let told: Vec<&Frame> = wire
        .iter()
        .filter(|f| f.f("eth.src") == FP_MAC && !f.is_gre6() && f.f("icmpv6.type") == "2")
        .collect();
    eprintln!(
        "Packet Too Big to the client: {:?}",
        told.iter().map(|f| f.line()).collect::<Vec<_>>()
    );
    assert!(!told.is_empty(), "fastpathd told the client the tunnel's MTU");
    // 1500 less IPv6 (40) and GRE (4; 12 with the checksum and key of c's tunnel).
    let want = if flow_backend == CHECKSUMMED { 1448 } else { 1456 };
    assert_eq!(told[0].f("icmpv6.mtu"), want.to_string(), "through {flow_backend}");
    let problems = tunnel_problems(&wire);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    drop(client);
    let m = lab.stop_fastpathd();
    assert_eq!(
        m.get("fastpath_icmp_to_backend_total{result=\"forwarded\"}"),
        Some(&1.0)
    );
    eprintln!("test took {:?}", t0.elapsed());
}

/// An ICMP Fragmentation Needed (next-hop MTU 1300) quoting the server's answer on the IPv4
/// connection from `port` (in-window sequence number `seq`), to the IPv4 VIP.
const FRAG_NEEDED_PY: &str = r#"
import socket, struct, sys
vip, client, port, seq, mtu = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
def csum(b):
    if len(b) % 2: b += b'\0'
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
ip = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 1400, 1, 0x4000, 64, 6, 0, socket.inet_aton(vip), socket.inet_aton(client))
ip = ip[:10] + struct.pack('!H', csum(ip)) + ip[12:]
quoted = ip + struct.pack('!HHI', 9000, port, seq)
msg = struct.pack('!BBHHH', 3, 4, 0, 0, mtu) + quoted
msg = msg[:2] + struct.pack('!H', csum(msg)) + msg[4:]
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
s.bind((client, 0))
s.sendto(msg, (vip, 0))
"#;

/// The mixed families through the same paths: one service on an IPv6 and an IPv4 VIP over an
/// IPv6 GRE backend (`a`) and an IPv4 GRE one (`v4`), so Maglev puts flows of each family on
/// tunnels of each (IPv6 inside IPv4 GRE, IPv4 inside IPv6 GRE). Every kernel connection
/// works, the wire is well-formed GRE of the tunnel's family with the flow's protocol type,
/// each flow keeps one backend, and an ICMP error about a flow carried by the other family
/// (a Fragmentation Needed about an IPv4 flow on `a`, a Packet Too Big about an IPv6 flow on
/// `v4`) reaches that flow's backend, whose kernel then answers within the MTU it gave.
#[test]
fn mixed_families_v6_in_ipv4_gre_and_v4_in_ipv6_gre() {
    if missing(NEEDS_OVS) {
        return;
    }
    let t0 = Instant::now();
    let mut lab = Lab::new("mixed");
    lab.start_fastpathd(&["a", "v4"], &[VIP, VIP4]);
    let cap = lab.capture("mixed");
    let capc = lab.capture_client("mixed-client");
    let mut client = lab.client();
    client.ask(&format!("open {VIP} {OLD} {FLOWS}"));
    client.ask(&format!("open {VIP4} {NEW} {FLOWS}"));
    client.ask("talk");
    // Which backend each flow has, by `fastpathctl flow` (the tracked entry).
    let backend = |client_ep: String, vip_ep: String| -> String {
        let f = lab.ctl(&["flow", "tcp", &client_ep, &vip_ep]);
        f["detail"]["conntrack"][0]["backend"]
            .as_str()
            .unwrap_or_else(|| panic!("{f}"))
            .to_string()
    };
    let v6_on_v4 = (OLD..OLD + FLOWS)
        .find(|p| backend(format!("[{CLIENT}]:{p}"), format!("[{VIP}]:{PORT}")) == "v4")
        .expect("an IPv6 flow on the IPv4 tunnel");
    let v4_on_a = (NEW..NEW + FLOWS)
        .find(|p| backend(format!("{CLIENT4}:{p}"), format!("{VIP4}:{PORT}")) == "a")
        .expect("an IPv4 flow on the IPv6 tunnel");
    for p in [v6_on_v4, v4_on_a] {
        client.ask(&format!("big {p}"));
    }
    std::thread::sleep(Duration::from_millis(200));
    let cwire = read_wire(&capc.finish());
    for p in [v6_on_v4, v4_on_a] {
        assert!(
            largest_answer(&cwire, p) > 1400,
            "port {p}: full-sized answers before the error"
        );
    }
    let errors = [
        (PTB_PY, VIP, CLIENT, v6_on_v4),
        (FRAG_NEEDED_PY, VIP4, CLIENT4, v4_on_a),
    ];
    for (py, vip, client_addr, p) in errors {
        let seq = server_next_seq(&cwire, p).to_string();
        let p = p.to_string();
        must(
            ns_exec(
                &lab.ns_client,
                &["/usr/bin/python3", "-c", py, vip, client_addr, &p, &seq, "1300"],
            ),
            "the ICMP error",
        );
    }
    let capc = lab.capture_client("mixed-after");
    std::thread::sleep(Duration::from_millis(300));
    for p in [v6_on_v4, v4_on_a] {
        client.ask(&format!("big {p}"));
    }
    let after = read_wire(&capc.finish());
    let wire = read_wire(&cap.finish());
    let mut combos = BTreeSet::new();
    for (vip, ports) in [(VIP, OLD..OLD + FLOWS), (VIP4, NEW..NEW + FLOWS)] {
        let by_port = backends_by_port(&wire, vip);
        for p in ports {
            let seen = by_port.get(&p).unwrap_or_else(|| panic!("port {p}: no GRE"));
            assert_eq!(seen.len(), 1, "port {p}: {seen:?}");
            combos.insert((vip, *seen.iter().next().unwrap()));
        }
    }
    eprintln!("flows (VIP, backend): {combos:?}");
    assert_eq!(combos.len(), 4, "each family's flows on both tunnels: {combos:?}");
    // The tunnel's family outside, the flow's inside (the GRE protocol type says which).
    for f in wire
        .iter()
        .filter(|f| f.f("eth.src") == FP_MAC && !f.f("gre.proto").is_empty())
    {
        let v6_headers = f.f("ipv6.dst").split(',').filter(|a| !a.is_empty()).count();
        let v6_inside = v6_headers > usize::from(f.f("eth.type") == "0x86dd");
        let want = if v6_inside { "0x86dd" } else { "0x0800" };
        assert_eq!(f.f("gre.proto"), want, "{}", f.line());
    }
    let problems = tunnel_problems(&wire);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let a_addr = BACKENDS[0].addr;
    let frag_needed: Vec<&Frame> = wire
        .iter()
        .filter(|f| f.f("eth.src") == FP_MAC && f.is_gre6() && f.f("icmp.type") == "3")
        .collect();
    assert_eq!(frag_needed.len(), 1, "the Fragmentation Needed, in GRE over IPv6");
    assert_eq!(frag_needed[0].outer("ipv6.dst"), a_addr, "{}", frag_needed[0].line());
    let ptb: Vec<&Frame> = wire
        .iter()
        .filter(|f| f.f("eth.src") == FP_MAC && f.f("eth.type") == "0x0800" && f.f("icmpv6.type") == "2")
        .collect();
    assert_eq!(ptb.len(), 1, "the Packet Too Big, in GRE over IPv4");
    assert_eq!(ptb[0].outer("ip.dst"), OVS_UNDERLAY4, "{}", ptb[0].line());
    for p in [v6_on_v4, v4_on_a] {
        let largest = largest_answer(&after, p);
        eprintln!("port {p}: the backend's answers after the ICMP error: at most {largest} bytes");
        assert!(largest <= 1300, "port {p}: the backend's kernel took it: {largest}");
    }
    drop(client);
    let m = lab.stop_fastpathd();
    assert_eq!(
        m.get("fastpath_icmp_to_backend_total{result=\"forwarded\"}"),
        Some(&2.0)
    );
    eprintln!("test took {:?}", t0.elapsed());
}

/// A UDP datagram larger than the path, sent to the IPv6 VIP in fragments by the client's
/// kernel: fastpathd reassembles it for the service, and it must still reach the backend
/// whole (the client sent fragments that fit; a Packet Too Big would not help it).
#[test]
fn v6_fragmented_datagram_to_the_vip_reaches_its_backend() {
    if missing(NEEDS_OVS) {
        return;
    }
    let mut lab = Lab::new("frag");
    lab.start_fastpathd(&["a", "b"], &[VIP]);
    let cap = lab.capture("frag");
    let mut client = lab.client();
    client.ask("datagram 42000 1000");
    client.ask("datagram 42001 3000");
    client.ask("datagram 42002 3000");
    let wire = read_wire(&cap.finish());
    let problems = tunnel_problems(&wire);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    drop(client);
    let m = lab.stop_fastpathd();
    assert_eq!(
        m.get("fastpath_reasm_completed_total{family=\"ipv6\"}"),
        Some(&2.0),
        "{m:?}"
    );
}

/// An IPv4 and an IPv6 service address on one port, each its own service with its own
/// backends (as Katran's and VPP lb's VIPs are): the IPv6 one's connections reach only its
/// GRE-over-IPv6 backends, the IPv4 one's only its IPv4 backend.
#[test]
fn a_v4_and_a_v6_service_share_a_port_with_their_own_backends() {
    if missing(NEEDS_OVS) {
        return;
    }
    let mut lab = Lab::new("shared");
    lab.extra = format!(
        "\n[[service]]\nname = \"lb4\"\nprotocol = \"tcp\"\nports = [{PORT}]\naddresses = [\"{VIP4}\"]\nsockets = 2\n\
         action = \"tunnel\"\ntunnels = [\"v4\"]\n"
    );
    lab.start_fastpathd(&["a", "b"], &[VIP]);
    let cap = lab.capture("shared");
    let mut client = lab.client();
    client.ask(&format!("open {VIP} {OLD} {FLOWS}"));
    client.ask(&format!("open {VIP4} {NEW} 8"));
    client.ask("talk");
    let wire = read_wire(&cap.finish());
    let problems = tunnel_problems(&wire);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let v6: BTreeSet<&str> = backends_by_port(&wire, VIP).values().flatten().copied().collect();
    let v4: BTreeSet<&str> = backends_by_port(&wire, VIP4).values().flatten().copied().collect();
    assert_eq!(v6, BTreeSet::from(["a", "b"]), "the IPv6 service's backends");
    assert_eq!(v4, BTreeSet::from(["v4"]), "the IPv4 service's backend");
    let f = lab.ctl(&["flow", "tcp", &format!("{CLIENT4}:{NEW}"), &format!("{VIP4}:{PORT}")]);
    assert_eq!(f["detail"]["service"].as_str(), Some("lb4"), "{f}");
    drop(client);
    lab.stop_fastpathd();
}
