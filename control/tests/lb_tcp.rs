//! The load balancer with real kernel TCP on both ends: clients in a namespace of their own,
//! fastpathd (a `tunnel` service on a VIP), and backends that really decapsulate GRE (one
//! private Open vSwitch user-space datapath each) and hand the inner packet to a kernel TCP
//! server that owns the VIP on its loopback; the backends answer the client directly (direct
//! server return) through a router, never through fastpathd.
//!
//! ```text
//!  ns cl (client)        ns rt (router)                        ns b<x> (one per backend)
//!  10.0.0.2 ── veth ──── 10.0.0.1                               OVS br-phy (netdev) 192.0.2.1x
//!                        br0 192.0.2.254/24 ── veth ──────────── │ GRE from 192.0.2.1 popped
//!                         │  (VIP via 192.0.2.1)                 br-int ── kernel: VIP on lo,
//!  ns fp                  │                                       a TCP server on :80,
//!  fastpathd ── veth ─────┘                                       default route via 192.0.2.254
//!  192.0.2.1, VIP 198.18.0.10
//!  kernel: 10.3.0.2 ── veth ── 10.3.0.1 (the health checks' path to 192.0.2.1x)
//! ```
//!
//! Long-lived connections stream a known pattern that the server echoes (each checked byte for
//! byte by the client) while reloads add, re-weight, drain and remove backends and a backend's
//! server dies; a path with a lower MTU toward the client shows that a router's Fragmentation
//! Needed reaches the backend through fastpathd (RFC 1191 path MTU discovery over direct server
//! return), and that without that forwarding the download black-holes.

mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

const VIP: &str = "198.18.0.10";
const FP_UNDERLAY: &str = "192.0.2.1";
const ROUTER_UNDERLAY: &str = "192.0.2.254";
const CLIENT: &str = "10.0.0.2";
/// The backends' inner bridge MAC (what OVS addresses the decapsulated packet to).
const INT_MAC: &str = "02:00:00:00:0c:02";
const INNER_GW_MAC: &str = "02:00:00:00:0c:99";
const GRE_OFPORT: &str = "10";
/// Every backend that exists in a lab: name and underlay address (its GRE remote).
const BACKENDS: [(&str, &str); 4] = [
    ("a", "192.0.2.10"),
    ("b", "192.0.2.11"),
    ("c", "192.0.2.12"),
    ("d", "192.0.2.13"),
];

/// The backend's TCP server, on every address port 80: a greeting naming the backend, then
/// per the client's first line `echo` (everything back until EOF) or `get N` (N bytes of its
/// pattern, 64 KiB of SHA-256 blocks repeated, then close). A connection with no line (a
/// health check) is just closed.
const SERVER_PY: &str = r#"
import hashlib, socket, sys, threading
name = sys.argv[1]
BLK = b''.join(hashlib.sha256(b'fastpathd %d' % k).digest() for k in range(2048))
def line(c):
    b = b''
    while not b.endswith(b'\n'):
        d = c.recv(1)
        if not d: return b''
        b += d
    return b
def serve(c):
    try:
        c.sendall(b'backend %s\n' % name.encode())
        l = line(c)
        if l.startswith(b'get '):
            n, off = int(l[4:]), 0
            while off < n:
                m = min(len(BLK), n - off)
                c.sendall(BLK[:m]); off += m
        elif l == b'echo\n':
            while True:
                d = c.recv(65536)
                if not d: break
                c.sendall(d)
    except OSError:
        pass
    finally:
        c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('0.0.0.0', 80))
s.listen(512)
print('ready', flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// The clients, driven by commands on stdin, one JSON line of answer each:
/// `long N` opens N echo connections that stream 2 KiB of their own pattern every 20 ms and
/// check the echo byte for byte (a reset, 4 s without progress, a mismatch or an early end is
/// the connection's `err`); `probe N` opens N connections, reads which backend greets, closes;
/// `status` lists every long connection; `stop X` ends those on backend X (`all`: every one)
/// with a clean close (FIN both ways, nothing after the last echo) and lists them; `get N`
/// downloads N bytes and checks them against the server's pattern within 5 s.
const DRIVER_PY: &str = r#"
import hashlib, json, socket, sys, threading, time
vip = sys.argv[1]
BLK = b''.join(hashlib.sha256(b'fastpathd %d' % k).digest() for k in range(2048))
def greet(s):
    b = b''
    while not b.endswith(b'\n'):
        d = s.recv(1)
        if not d: raise EOFError('closed before the greeting')
        b += d
    return b.split()[1].decode()
class Long(threading.Thread):
    def __init__(self, i):
        super().__init__(daemon=True)
        self.i, self.sent, self.err, self.closed, self.stop = i, 0, None, False, False
        self.s = socket.create_connection((vip, 80), timeout=5)
        self.port = self.s.getsockname()[1]
        self.backend = greet(self.s)
        self.s.sendall(b'echo\n')
        self.s.settimeout(4)
        self.data = b''.join(hashlib.sha256(b'%d %d' % (i, k)).digest() for k in range(256))
    def run(self):
        try:
            while not self.stop:
                off = self.sent % len(self.data)
                chunk = (self.data[off:] + self.data)[:2048]
                self.s.sendall(chunk)
                got = b''
                while len(got) < len(chunk):
                    d = self.s.recv(len(chunk) - len(got))
                    if not d: raise EOFError('closed by the other end')
                    got += d
                if got != chunk:
                    self.err = 'mismatch after %d bytes' % self.sent
                    return
                self.sent += len(chunk)
                time.sleep(0.02)
            self.s.shutdown(socket.SHUT_WR)
            if self.s.recv(1) != b'':
                self.err = 'data after the end'
                return
            self.closed = True
        except ConnectionResetError:
            self.err = 'reset'
        except socket.timeout:
            self.err = 'stall'
        except Exception as e:
            self.err = repr(e)
        finally:
            self.s.close()
    def row(self):
        return {'i': self.i, 'port': self.port, 'backend': self.backend, 'bytes': self.sent,
                'err': self.err, 'closed': self.closed}
conns = []
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == 'long':
        new = [Long(len(conns) + k) for k in range(int(cmd[1]))]
        for c in new: c.start()
        conns += new
        out = [c.row() for c in new]
    elif cmd[0] == 'probe':
        out = []
        for k in range(int(cmd[1])):
            try:
                s = socket.create_connection((vip, 80), timeout=3)
                s.settimeout(3)
                out.append(greet(s))
                s.close()
            except Exception as e:
                out.append('error: %r' % e)
    elif cmd[0] == 'status':
        out = [c.row() for c in conns]
    elif cmd[0] == 'stop':
        mine = [c for c in conns if cmd[1] in ('all', c.backend) and c.is_alive()]
        for c in mine: c.stop = True
        for c in mine: c.join(10)
        out = [c.row() for c in mine]
    elif cmd[0] == 'get':
        n, got, h, err, port, backend = int(cmd[1]), 0, hashlib.sha256(), None, None, None
        t = time.time()
        try:
            s = socket.create_connection((vip, 80), timeout=3)
            port = s.getsockname()[1]
            backend = greet(s)
            s.sendall(b'get %d\n' % n)
            s.settimeout(5)
            while got < n and time.time() - t < 5:
                d = s.recv(65536)
                if not d: break
                h.update(d); got += len(d)
            s.close()
        except socket.timeout:
            err = 'stall'
        except Exception as e:
            err = repr(e)
        want = hashlib.sha256((BLK * (n // len(BLK) + 1))[:n]).hexdigest()
        out = {'port': port, 'backend': backend, 'bytes': got, 'err': err,
               'exact': got == n and h.hexdigest() == want, 'secs': time.time() - t}
    print(json.dumps(out), flush=True)
"#;

/// One backend: its namespace, its Open vSwitch (GRE in, the inner packet to its stack) and its
/// server.
struct Backend {
    name: &'static str,
    addr: &'static str,
    ns: String,
    /// The router's end of its underlay veth (the other end is a port of its br-phy).
    rt: String,
    mac: String,
    /// Stopped before its Open vSwitch (fields drop in order).
    server: Option<Program>,
    /// Kept for its drop, which stops it.
    _ovs: Ovs,
}

/// The namespaces, backends and fastpathd of one test; everything is stopped and removed on
/// drop (fastpathd and the programs first, then the namespaces), also when a test fails half way.
struct Lab {
    id: String,
    fp: String,
    rt: String,
    cl: String,
    /// fastpathd's veth end (in `fp`) and its peer on the router's bridge.
    fp_if: String,
    fp_rt: String,
    backends: Vec<Backend>,
    fastpathd: Option<Daemon>,
    driver: Option<Driver>,
    /// Every namespace made so far (a backend's too before its setup completes).
    netns: Netns,
    s: Scratch,
}

impl Lab {
    /// The lab with backends `names` (of [`BACKENDS`]) and a client link of MTU `client_mtu`;
    /// the router's route to the client has MTU `path_mtu` (forwarding honours it: a larger
    /// packet with DF gets Fragmentation Needed).
    fn new(name: &str, names: &[&str], client_mtu: u32, path_mtu: u32) -> Lab {
        let id = lab_id();
        let s = Scratch::new(&format!("lb-{name}"));
        let mut lab = Lab {
            fp: format!("lb{id}fp"),
            rt: format!("lb{id}rt"),
            cl: format!("lb{id}cl"),
            fp_if: format!("lb{id}f"),
            fp_rt: format!("lb{id}F"),
            id,
            backends: vec![],
            fastpathd: None,
            driver: None,
            netns: Netns::default(),
            s,
        };
        for ns in [lab.fp.clone(), lab.rt.clone(), lab.cl.clone()] {
            lab.netns.add(&ns);
        }
        lab.router(client_mtu, path_mtu);
        for (i, (b, addr)) in BACKENDS.iter().enumerate() {
            if names.contains(b) {
                lab.add_backend(i, b, addr);
            }
        }
        lab
    }

    /// The router, the client, fastpathd's veth and the health checks' path.
    fn router(&mut self, client_mtu: u32, path_mtu: u32) {
        let (fp, rt, cl, id) = (&self.fp, &self.rt, &self.cl, &self.id);
        for ns in [fp, rt, cl] {
            sysctl(
                ns,
                &[
                    "net.ipv6.conf.all.disable_ipv6=1",
                    "net.ipv6.conf.default.disable_ipv6=1",
                    "net.ipv4.conf.all.rp_filter=0",
                    "net.ipv4.conf.default.rp_filter=0",
                ],
            );
        }
        // Path MTU discovery as Linux does it by default, set here rather than assumed.
        sysctl(cl, &["net.ipv4.ip_no_pmtu_disc=0", "net.ipv4.tcp_mtu_probing=0"]);
        sysctl(rt, &["net.ipv4.ip_forward=1"]);
        ip(&["-n", rt, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", rt, "addr", "add", &format!("{ROUTER_UNDERLAY}/24"), "dev", "br0"]);
        ip(&["-n", rt, "link", "set", "br0", "up"]);
        // fastpathd's port: its kernel takes no part on it (no address, no IPv6).
        ip(&["link", "add", &self.fp_if, "type", "veth", "peer", "name", &self.fp_rt]);
        ip(&["link", "set", &self.fp_if, "netns", fp]);
        ip(&["link", "set", &self.fp_rt, "netns", rt]);
        ip(&["-n", rt, "link", "set", &self.fp_rt, "master", "br0", "up"]);
        ip(&["-n", fp, "link", "set", &self.fp_if, "up"]);
        // The client's link.
        let (cl_if, rt_cl) = (format!("lb{id}c"), format!("lb{id}C"));
        ip(&["link", "add", &cl_if, "type", "veth", "peer", "name", &rt_cl]);
        ip(&["link", "set", &cl_if, "netns", cl]);
        ip(&["link", "set", &rt_cl, "netns", rt]);
        for (ns, dev, addr) in [(cl, &cl_if, "10.0.0.2/24"), (rt, &rt_cl, "10.0.0.1/24")] {
            ip(&["-n", ns, "addr", "add", addr, "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "mtu", &client_mtu.to_string(), "up"]);
        }
        ip(&["-n", cl, "route", "add", "default", "via", "10.0.0.1"]);
        ip(&words(&format!(
            "-n {rt} route replace 10.0.0.0/24 dev {rt_cl} proto kernel scope link src 10.0.0.1 mtu {path_mtu}"
        )));
        ip(&["-n", rt, "route", "add", VIP, "via", FP_UNDERLAY]);
        // The health checks: fastpathd's host reaches the backends' underlay through the router.
        let (fp_m, rt_m) = (format!("lb{id}m"), format!("lb{id}M"));
        ip(&["link", "add", &fp_m, "type", "veth", "peer", "name", &rt_m]);
        ip(&["link", "set", &fp_m, "netns", fp]);
        ip(&["link", "set", &rt_m, "netns", rt]);
        for (ns, dev, addr) in [(fp, &fp_m, "10.3.0.2/24"), (rt, &rt_m, "10.3.0.1/24")] {
            ip(&["-n", ns, "addr", "add", addr, "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
        }
        ip(&["-n", fp, "route", "add", "192.0.2.0/24", "via", "10.3.0.1"]);
        // Checksums on the wire, as a NIC would put them there (veth leaves them to nobody),
        // and segments no larger than the MTU (no TSO without them).
        for (ns, dev) in [(cl, &cl_if), (rt, &rt_cl), (fp, &fp_m), (rt, &rt_m), (rt, &self.fp_rt)] {
            must(ns_exec(ns, &["ethtool", "-K", dev, "tx", "off"]), "ethtool");
        }
    }

    /// Backend `name` (`i`-th of [`BACKENDS`]) at underlay address `addr`.
    fn add_backend(&mut self, i: usize, name: &'static str, addr: &'static str) {
        let id = &self.id;
        let ns = format!("lb{id}b{name}");
        let (up, rt) = (format!("lb{id}u{name}"), format!("lb{id}U{name}"));
        let mac = format!("02:00:00:00:0b:{:02x}", 0x10 + i);
        self.netns.add(&ns);
        sysctl(
            &ns,
            &[
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
                // The client's packets come out of the tunnel (br-int); the route back to it
                // is through br-phy.
                "net.ipv4.conf.all.rp_filter=0",
                "net.ipv4.conf.default.rp_filter=0",
                "net.ipv4.ip_no_pmtu_disc=0",
                "net.ipv4.tcp_mtu_probing=0",
            ],
        );
        ip(&["link", "add", &up, "type", "veth", "peer", "name", &rt]);
        ip(&["link", "set", &up, "netns", &ns]);
        ip(&["link", "set", &rt, "netns", &self.rt]);
        ip(&["-n", &self.rt, "link", "set", &rt, "master", "br0", "up"]);
        ip(&["-n", &ns, "link", "set", &up, "up"]);
        for (n, dev) in [(&ns, &up), (&self.rt, &rt)] {
            must(ns_exec(n, &["ethtool", "-K", dev, "tx", "off"]), "ethtool");
        }
        let ovs = Ovs::start(&ns, self.s.path(&format!("ovs-{name}")));
        let bridges = format!(
            "add-br br-phy -- set bridge br-phy datapath_type=netdev other-config:hwaddr={mac} \
             -- add-port br-phy {up} \
             -- add-br br-int -- set bridge br-int datapath_type=netdev other-config:hwaddr={INT_MAC} \
             -- add-port br-int gre0 -- set interface gre0 type=gre ofport_request={GRE_OFPORT} \
             options:remote_ip={FP_UNDERLAY} options:local_ip={addr} options:packet_type=legacy_l3"
        );
        ovs.vsctl(&words(&bridges));
        // What comes out of the tunnel, given an Ethernet header addressed to br-int, to the
        // stack; nothing goes into it (the backend answers the client directly).
        ovs.run(&["ovs-ofctl", "del-flows", "br-int"]);
        ovs.run(&[
            "ovs-ofctl",
            "add-flow",
            "br-int",
            &format!("in_port={GRE_OFPORT},ip,actions=mod_dl_src:{INNER_GW_MAC},mod_dl_dst:{INT_MAC},LOCAL"),
        ]);
        ip(&["-n", &ns, "addr", "add", &format!("{addr}/24"), "dev", "br-phy"]);
        ip(&["-n", &ns, "link", "set", "br-phy", "up"]);
        ip(&["-n", &ns, "link", "set", "br-int", "up"]);
        ip(&["-n", &ns, "addr", "add", &format!("{VIP}/32"), "dev", "lo"]);
        ip(&["-n", &ns, "route", "add", "default", "via", ROUTER_UNDERLAY]);
        wait_for(10, "OVS terminating GRE to its underlay address", || {
            ovs.appctl(&["tnl/ports/show", "-v"])
                .contains(&format!("dst={addr},proto=47"))
        });
        let mut b = Backend {
            name,
            addr,
            ns,
            rt,
            mac,
            server: None,
            _ovs: ovs,
        };
        b.start_server();
        self.backends.push(b);
    }

    fn backend(&mut self, name: &str) -> &mut Backend {
        self.backends.iter_mut().find(|b| b.name == name).unwrap()
    }

    /// fastpathd's config: the service over `members` (name, weight, drain), every backend of
    /// the lab a `[[tunnel]]` (with `health`, when given, its check's keys), and `conntrack`
    /// as the `[conntrack]` keys.
    fn config(&self, members: &[(&str, u32, bool)], conntrack: &str, health: Option<&str>) -> String {
        let vdev = format!("--vdev=net_af_packet0,iface={},qpairs=2", self.fp_if);
        let list: Vec<String> = members.iter().map(|(b, _, _)| format!("\"{b}\"")).collect();
        let mut cfg = format!(
            "[dpdk]\neal_args = {}\nmbufs = 16383\n\n[[port]]\ndevice = \"net_af_packet0\"\nrx_queues = 2\n\
             tx_queues = 2\nipv4 = [\"{FP_UNDERLAY}\", \"{VIP}\"]\n\n[lcores]\nrx = [0]\nworkers = [1]\n\
             idle_sleep_us = 50\n{METRICS_ANY_PORT}cache_ms = 0\n\n[reassembly]\nbuffers = 32\n\n\
             [conntrack]\n{conntrack}\n\n\
             [[service]]\nname = \"lb\"\nprotocol = \"tcp\"\nports = [80]\naddresses = [\"{VIP}\"]\nsockets = 2\n\
             socket_capacity = 1024\naction = \"tunnel\"\ntunnels = [{}]\n",
            eal_args(&format!("lb{}", self.id), &[vdev]),
            list.join(", ")
        );
        for b in &self.backends {
            let (weight, drain) = members
                .iter()
                .find(|m| m.0 == b.name)
                .map(|m| (m.1, m.2))
                .unwrap_or((1, false));
            cfg += &format!(
                "\n[[tunnel]]\nname = \"{}\"\nlocal = \"{FP_UNDERLAY}\"\nremote = \"{}\"\nport = \"net_af_packet0\"\n\
                 next_hop_mac = \"{}\"\nweight = {weight}\ndrain = {drain}\n",
                b.name, b.addr, b.mac
            );
            if let Some(h) = health {
                cfg += &format!("health = \"tcp:80\"\n{h}\n");
            }
        }
        cfg
    }

    fn start_fastpathd(&mut self, cfg: &str) {
        let path = self.s.write("c.toml", cfg);
        self.fastpathd = Some(Daemon::start_in(&self.s, &self.fp, &path, &self.s.path("metrics.prom")));
    }

    fn daemon(&self) -> &Daemon {
        self.fastpathd.as_ref().unwrap()
    }

    /// Writes `cfg`, sends SIGHUP and waits until the reload is published.
    fn reload(&self, cfg: &str) {
        let d = self.daemon();
        let count = |t: &str| t.lines().filter(|l| l.contains("reload (SIGHUP): generation")).count();
        let before = count(&d.log_text());
        self.s.write("c.toml", cfg);
        d.signal("HUP");
        wait_for(20, "the reload", || count(&d.log_text()) > before);
        let log = d.log_text();
        let last = log.lines().rfind(|l| l.contains("reload (SIGHUP)")).unwrap();
        assert!(last.contains("published"), "the reload was refused: {last}");
    }

    fn scrape(&self) -> BTreeMap<String, f64> {
        self.daemon().scrape_in(&self.fp)
    }

    /// Stops fastpathd (exit 0) and returns its metrics at exit, conservation checked.
    fn stop_fastpathd(&mut self) -> BTreeMap<String, f64> {
        self.fastpathd.take().unwrap().stop_clean(&self.s.path("metrics.prom"))
    }

    fn driver(&mut self) -> &mut Driver {
        if self.driver.is_none() {
            self.driver = Some(Driver::start(&self.cl));
        }
        self.driver.as_mut().unwrap()
    }

    /// A capture on the router's port toward backend `name`, or toward fastpathd (`fp`).
    fn capture(&self, toward: &str, file: &str) -> Capture {
        let dev = if toward == "fp" {
            self.fp_rt.clone()
        } else {
            self.backends.iter().find(|b| b.name == toward).unwrap().rt.clone()
        };
        Capture::start(&self.rt, &dev, self.s.path(file))
    }
}

impl Backend {
    fn start_server(&mut self) {
        self.server = Some(Program::python_ready(&self.ns, SERVER_PY, &[self.name]));
    }

    /// Kills the server: its port is closed once this returns.
    fn kill_server(&mut self) {
        drop(self.server.take());
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        drop(self.driver.take());
        drop(self.fastpathd.take());
        // Servers before their OVS; `netns` then deletes the namespaces (the veth pairs, the
        // bridge and OVS's taps go with them).
        self.backends.clear();
    }
}

/// [`DRIVER_PY`] in the client's namespace.
struct Driver {
    child: Child,
    stdin: ChildStdin,
    out: BufReader<ChildStdout>,
}

impl Driver {
    fn start(ns: &str) -> Driver {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns, "/usr/bin/python3", "-c", DRIVER_PY, VIP])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        Driver { child, stdin, out }
    }

    fn ask(&mut self, cmd: &str) -> Value {
        writeln!(self.stdin, "{cmd}").unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        assert!(!line.is_empty(), "the client driver died at {cmd:?}");
        serde_json::from_str(&line).unwrap()
    }

    /// `probe N`: per backend, how many of the N new connections it greeted.
    fn probe(&mut self, n: usize) -> BTreeMap<String, usize> {
        let mut per = BTreeMap::new();
        for b in self.ask(&format!("probe {n}")).as_array().unwrap() {
            *per.entry(b.as_str().unwrap().to_string()).or_insert(0) += 1;
        }
        per
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rows(v: &Value) -> &Vec<Value> {
    v.as_array().unwrap()
}

/// Waits `secs`, then asserts every long connection not yet ended (`done`) moved more bytes
/// than at `before` and has no error; returns the new status.
fn all_progress(dr: &mut Driver, before: &Value, secs: f64, what: &str) -> Value {
    std::thread::sleep(Duration::from_secs_f64(secs));
    let now = dr.ask("status");
    for (b, n) in rows(before).iter().zip(rows(&now)) {
        if b["closed"] == true {
            continue;
        }
        assert!(
            n["err"].is_null() && n["bytes"].as_u64() > b["bytes"].as_u64(),
            "{what}: connection {n} stopped (it was {b})"
        );
    }
    now
}

fn count(per: &BTreeMap<String, usize>, b: &str) -> usize {
    per.get(b).copied().unwrap_or(0)
}

/// How many of the long connections `fastpathctl flow` shows pinned away from the Maglev pick.
fn pinned(lab: &Lab, status: &Value) -> usize {
    let sock = lab.s.path("control.sock");
    let mut n = 0;
    for c in rows(status) {
        if c["closed"] == true || !c["err"].is_null() {
            continue;
        }
        let src = format!("{CLIENT}:{}", c["port"]);
        let out = Command::new(env!("CARGO_BIN_EXE_fastpathctl"))
            .arg("--socket")
            .arg(&sock)
            .args(["flow", "tcp", &src, &format!("{VIP}:80"), "--json"])
            .output()
            .unwrap();
        let f: Value = serde_json::from_slice(&must(out, "fastpathctl flow").into_bytes()).unwrap();
        let e = &f["detail"]["conntrack"][0];
        assert_eq!(
            e["backend"], c["backend"],
            "the table holds the connection's backend: {f}"
        );
        if e["pinned"] == true {
            n += 1;
        }
    }
    n
}

const LONG: usize = 16;
const PROBES: usize = 40;

/// Item by item: a reload that adds a backend, one that re-weights it, one that drains a
/// backend and one that removes it (once its connections ended, as a drain is meant to be
/// used), with 16 + 8 long-lived connections streaming through all of them; the connections
/// opened after each reload follow the new weights.
#[test]
fn established_tcp_connections_survive_reloads_that_add_reweight_drain_and_remove_backends() {
    if missing(NEEDS_OVS) {
        return;
    }
    let t0 = Instant::now();
    let mut lab = Lab::new("reload", &["a", "b", "c"], 1400, 1400);
    let ct = "entries = 65536";
    lab.start_fastpathd(&lab.config(&[("a", 1, false), ("b", 1, false)], ct, None));
    let dr = lab.driver();
    let first = dr.ask(&format!("long {LONG}"));
    let per = dr.probe(PROBES);
    eprintln!("a, b: {per:?}");
    assert_eq!(count(&per, "a") + count(&per, "b"), PROBES, "{per:?}");
    assert!(
        count(&per, "a") >= PROBES / 5 && count(&per, "b") >= PROBES / 5,
        "{per:?}"
    );
    let mut st = all_progress(dr, &first, 1.0, "before any reload");

    // Add c.
    lab.reload(&lab.config(&[("a", 1, false), ("b", 1, false), ("c", 1, false)], ct, None));
    let dr = lab.driver();
    all_progress(dr, &st, 1.5, "after adding c");
    let per = dr.probe(PROBES);
    eprintln!("a, b, c: {per:?}");
    // A third expected (13 of 40); the bound is 3 standard deviations below.
    assert!(
        count(&per, "c") >= 5,
        "new connections reach the added backend: {per:?}"
    );
    dr.ask("long 8");
    st = dr.ask("status");
    let pinned_after_add = pinned(&lab, &st);

    // c takes weight 3: three fifths of the new connections.
    lab.reload(&lab.config(&[("a", 1, false), ("b", 1, false), ("c", 3, false)], ct, None));
    let dr = lab.driver();
    st = all_progress(dr, &st, 1.5, "after re-weighting c");
    let per = dr.probe(PROBES);
    eprintln!("a, b, c×3: {per:?}");
    // 24 of 40 expected; 3.5 standard deviations below is 13.
    assert!(count(&per, "c") >= 13, "c's weight 3: {per:?}");
    let pinned_after_weight = pinned(&lab, &st);

    // Drain a: no new connection there, the ones it holds go on.
    lab.reload(&lab.config(&[("a", 1, true), ("b", 1, false), ("c", 3, false)], ct, None));
    let dr = lab.driver();
    st = all_progress(dr, &st, 1.5, "after draining a");
    let per = dr.probe(PROBES);
    eprintln!("a drained: {per:?}");
    assert_eq!(count(&per, "a"), 0, "a is drained: {per:?}");
    assert_eq!(count(&per, "b") + count(&per, "c"), PROBES, "{per:?}");
    let on_a = st.as_array().unwrap().iter().filter(|c| c["backend"] == "a").count();
    assert!(on_a > 0, "some long connections are on a: {st}");
    // Its connections end, cleanly; then it is removed.
    let ended = dr.ask("stop a");
    for c in rows(&ended) {
        assert!(
            c["closed"] == true && c["err"].is_null(),
            "a drained connection ends cleanly: {c}"
        );
    }
    st = dr.ask("status");
    lab.reload(&lab.config(&[("b", 1, false), ("c", 3, false)], ct, None));
    let dr = lab.driver();
    all_progress(dr, &st, 1.5, "after removing a");
    let per = dr.probe(PROBES);
    eprintln!("b, c×3: {per:?}");
    assert_eq!(count(&per, "b") + count(&per, "c"), PROBES, "{per:?}");
    assert!(count(&per, "c") >= 20, "c's weight 3 of 4: {per:?}");

    let end = dr.ask("stop all");
    let mut bytes = 0;
    for c in rows(&end) {
        assert!(c["closed"] == true && c["err"].is_null(), "{c}");
    }
    let all = dr.ask("status");
    for c in rows(&all) {
        assert!(c["closed"] == true && c["err"].is_null(), "{c}");
        bytes += c["bytes"].as_u64().unwrap();
    }
    let m = lab.stop_fastpathd();
    let hits = family_sum(&m, "fastpath_conntrack_hits_total");
    let misses = family_sum(&m, "fastpath_conntrack_misses_total");
    let opened = (LONG + 8 + 5 * PROBES) as f64;
    eprintln!(
        "{} long connections, {bytes} bytes echoed byte-exact, none reset; pinned away from Maglev: {pinned_after_add} \
         after adding c, {pinned_after_weight} after re-weighting; conntrack hits {hits}, misses {misses}, \
         confirmations {}, repinned {}; {:.1} s",
        rows(&all).len(),
        family_sum(&m, "fastpath_conntrack_confirmations_total"),
        family_sum(&m, "fastpath_conntrack_repinned_total"),
        t0.elapsed().as_secs_f64()
    );
    assert!(
        pinned_after_weight > 0,
        "re-weighting moves Maglev's picks of most connections"
    );
    // Each connection missed once (its SYN) and was confirmed by its handshake's ACK; every
    // later packet, across every reload, found its entry.
    assert_eq!(misses, opened, "one miss a connection");
    assert_eq!(
        family_sum(&m, "fastpath_conntrack_confirmations_total"),
        opened,
        "every connection's handshake confirmed its entry"
    );
    assert!(hits > 20.0 * opened, "the streams' packets hit the table: {hits}");
    assert_eq!(
        family_sum(&m, "fastpath_conntrack_repinned_total"),
        0.0,
        "nothing moved"
    );
}

/// The same reload that adds a backend, without a connection table (`entries = 0`): Maglev
/// moves about a third of the established connections to c, whose kernel knows nothing of
/// them and resets them.
#[test]
fn without_a_table_adding_a_backend_breaks_established_tcp_connections() {
    if missing(NEEDS_OVS) {
        return;
    }
    let mut lab = Lab::new("nct", &["a", "b", "c"], 1400, 1400);
    let ct = "entries = 0";
    lab.start_fastpathd(&lab.config(&[("a", 1, false), ("b", 1, false)], ct, None));
    let dr = lab.driver();
    let n = 24;
    let first = dr.ask(&format!("long {n}"));
    let st = all_progress(dr, &first, 1.0, "before the reload");
    lab.reload(&lab.config(&[("a", 1, false), ("b", 1, false), ("c", 1, false)], ct, None));
    let dr = lab.driver();
    std::thread::sleep(Duration::from_secs(5));
    let after = dr.ask("status");
    let broken: Vec<&Value> = rows(&after).iter().filter(|c| !c["err"].is_null()).collect();
    let progressed = rows(&st)
        .iter()
        .zip(rows(&after))
        .filter(|(b, a)| a["err"].is_null() && a["bytes"].as_u64() > b["bytes"].as_u64())
        .count();
    eprintln!(
        "untracked: {} of {n} established connections broke after adding c ({:?}), {progressed} kept going",
        broken.len(),
        broken.iter().map(|c| c["err"].as_str().unwrap()).collect::<Vec<_>>()
    );
    assert!(!broken.is_empty(), "stateless Maglev moves some connections: {after}");
    assert_eq!(broken.len() + progressed, n, "the others kept going: {after}");
    let m = lab.stop_fastpathd();
    assert_eq!(family_sum(&m, "fastpath_conntrack_hits_total"), 0.0);
}

const MB: usize = 1 << 20;

/// What [`download`] saw.
struct Download {
    /// The driver's answer: `backend`, `port`, `bytes`, `exact`, `err`, `secs`.
    got: Value,
    /// The underlay address of the backend that served it.
    addr: &'static str,
    /// (`ip.len`, `tcp.len`) of each data segment the serving backend sent, as it left it.
    segments: Vec<(u32, u32)>,
    /// GRE frames with an ICMP Fragmentation Needed inside that reached the serving backend's
    /// port, and the other backend's.
    icmp_in_gre: usize,
    icmp_in_gre_other: usize,
    /// The metrics at exit.
    m: BTreeMap<String, f64>,
    lab: Lab,
}

/// A 1 MiB download from the VIP (two backends, a and b) over a path whose last hop toward
/// the client has an MTU of 1400 (the router's route to the client, as a lower-MTU link beyond
/// it would; the client's own link is 1500, so it offers an MSS of 1460), with `[conntrack]
/// icmp_per_sec` = `icmp_per_sec`. The router's ports toward fastpathd and toward each backend
/// are captured.
fn download(name: &str, icmp_per_sec: u32) -> Download {
    let mut lab = Lab::new(name, &["a", "b"], 1500, 1400);
    let ct = format!("entries = 65536\nicmp_per_sec = {icmp_per_sec}");
    lab.start_fastpathd(&lab.config(&[("a", 1, false), ("b", 1, false)], &ct, None));
    let to_fp = lab.capture("fp", "to-fp.pcap");
    let to_a = lab.capture("a", "to-a.pcap");
    let to_b = lab.capture("b", "to-b.pcap");
    let got = lab.driver().ask(&format!("get {MB}"));
    to_fp.finish();
    let (a, b) = (to_a.finish(), to_b.finish());
    let m = lab.stop_fastpathd();
    let served = got["backend"].as_str().unwrap().to_string();
    let (pcap, other) = if served == "a" { (a, b) } else { (b, a) };
    let data = format!("!gre && ip.src == {VIP} && tcp.srcport == 80 && tcp.len > 100");
    let segments: Vec<(u32, u32)> = tshark_fields(&pcap, &data, &["ip.len", "tcp.len"])
        .iter()
        .map(|r| (r[0].parse().unwrap(), r[1].parse().unwrap()))
        .collect();
    assert!(
        tshark_fields(&other, &data, &["frame.number"]).is_empty(),
        "only backend {served} answered"
    );
    let icmp = "gre && icmp.type == 3 && icmp.code == 4";
    let icmp_in_gre = tshark_fields(&pcap, icmp, &["frame.number"]).len();
    let icmp_in_gre_other = tshark_fields(&other, icmp, &["frame.number"]).len();
    eprintln!(
        "icmp_per_sec {icmp_per_sec}: {got}; {} data segments from backend {served}, {} of them over 1400 bytes",
        segments.len(),
        segments.iter().filter(|s| s.0 > 1400).count()
    );
    let addr = BACKENDS.iter().find(|b| b.0 == served).unwrap().1;
    Download {
        got,
        addr,
        segments,
        icmp_in_gre,
        icmp_in_gre_other,
        m,
        lab,
    }
}

/// The router's Fragmentation Needed to the VIP (IPv4 frames on the router's port toward
/// fastpathd, not in GRE): (source, next-hop MTU).
fn router_frag_needed(lab: &Lab) -> Vec<(String, String)> {
    tshark_fields(
        &lab.s.path("to-fp.pcap"),
        &format!("!gre && ip.dst == {VIP} && icmp.type == 3 && icmp.code == 4"),
        &["ip.src", "icmp.mtu"],
    )
    .into_iter()
    .map(|r| (r[0].split(',').next().unwrap().to_string(), r[1].clone()))
    .collect()
}

/// fastpathd's GRE carrying an ICMP Fragmentation Needed: (outer source, outer destination,
/// the quoted TCP ports).
fn forwarded_frag_needed(lab: &Lab) -> Vec<(String, String, String, String)> {
    tshark_fields(
        &lab.s.path("to-fp.pcap"),
        "gre && icmp.type == 3 && icmp.code == 4",
        &["ip.src", "ip.dst", "tcp.srcport", "tcp.dstport"],
    )
    .into_iter()
    .map(|r| {
        let first = |f: &str| f.split(',').next().unwrap().to_string();
        (first(&r[0]), first(&r[1]), r[2].clone(), r[3].clone())
    })
    .collect()
}

/// Path MTU discovery over direct server return: the router's Fragmentation Needed (to the
/// VIP, the answers' source) reaches fastpathd, which sends it through the GRE tunnel of the
/// flow's backend; the backend's kernel lowers its path MTU to the client and the download
/// completes byte for byte in smaller segments.
#[test]
fn path_mtu_discovery_works_through_fastpathd() {
    if missing(NEEDS_OVS) {
        return;
    }
    let Download {
        got,
        addr,
        segments,
        icmp_in_gre,
        icmp_in_gre_other,
        m,
        lab,
    } = download("pmtu", 1000);
    let frag = router_frag_needed(&lab);
    assert!(!frag.is_empty(), "the router sent Fragmentation Needed to the VIP");
    assert!(
        frag.iter()
            .all(|f| *f == (ROUTER_UNDERLAY.to_string(), "1400".to_string())),
        "{frag:?}"
    );
    let port = got["port"].to_string();
    let fwd = forwarded_frag_needed(&lab);
    assert!(!fwd.is_empty(), "fastpathd forwarded it into a tunnel");
    for f in &fwd {
        assert_eq!(
            f,
            &(
                FP_UNDERLAY.to_string(),
                addr.to_string(),
                "80".to_string(),
                port.clone()
            ),
            "in GRE to the flow's backend, quoting the flow"
        );
    }
    assert_eq!(
        (icmp_in_gre, icmp_in_gre_other),
        (fwd.len(), 0),
        "each reached the flow's backend, none the other"
    );
    assert!(
        segments.first().is_some_and(|s| s.0 > 1400),
        "the backend first sent full-size segments: {:?}",
        &segments[..segments.len().min(5)]
    );
    let small = segments.iter().filter(|s| s.0 <= 1400).count();
    assert!(
        segments.last().is_some_and(|s| s.0 <= 1400) && small * 1360 >= MB,
        "then segments that fit 1400 bytes carried the download: {small} of {}",
        segments.len()
    );
    assert_eq!(got["exact"], true, "the download completed byte for byte: {got}");
    let forwarded = m
        .get("fastpath_icmp_to_backend_total{result=\"forwarded\"}")
        .copied()
        .unwrap_or(0.0);
    assert_eq!(forwarded, fwd.len() as f64, "each forwarded error counted");
    eprintln!(
        "path MTU: {} Fragmentation Needed from the router, {} forwarded in GRE, {} segments over 1400 bytes \
         before the backend lowered its path MTU; {MB} bytes in {:.2} s",
        frag.len(),
        fwd.len(),
        segments.iter().filter(|s| s.0 > 1400).count(),
        got["secs"].as_f64().unwrap()
    );
}

/// The same download with the forwarding off (`icmp_per_sec = 0`): the router's errors stop at
/// fastpathd, the backend never learns the path MTU and the download black-holes.
#[test]
fn without_icmp_forwarding_the_download_black_holes() {
    if missing(NEEDS_OVS) {
        return;
    }
    let d = download("pmtu-off", 0);
    assert!(
        !router_frag_needed(&d.lab).is_empty(),
        "the router sent Fragmentation Needed"
    );
    assert!(forwarded_frag_needed(&d.lab).is_empty(), "fastpathd forwarded none");
    assert_eq!((d.icmp_in_gre, d.icmp_in_gre_other), (0, 0));
    assert_eq!(d.got["exact"], false, "{}", d.got);
    assert!(d.got["bytes"].as_u64().unwrap() < MB as u64 / 10, "{}", d.got);
    assert!(
        !d.segments.is_empty() && d.segments.iter().all(|s| s.0 > 1400),
        "the backend kept sending full-size segments: {:?}",
        d.segments
    );
    assert_eq!(
        d.m.get("fastpath_icmp_to_backend_total{result=\"forwarded\"}")
            .copied()
            .unwrap_or(0.0),
        0.0
    );
}

/// `fastpath_backend_up{tunnel}`.
fn backend_up(m: &BTreeMap<String, f64>, name: &str) -> Option<f64> {
    m.get(&format!("fastpath_backend_up{{tunnel=\"{name}\"}}")).copied()
}

/// Backends with `health = "tcp:80"` checks (the backend's own server): b's server dies;
/// `fastpath_backend_up{tunnel="b"}` drops to 0 within fall × interval + one interval, the
/// connections on a and c go on, and new connections go to a and c only.
#[test]
fn a_backend_whose_server_dies_goes_down_and_new_connections_avoid_it() {
    if missing(NEEDS_OVS) {
        return;
    }
    let (interval, timeout, fall) = (400u64, 200u64, 3u64);
    let health = format!(
        "health_interval_ms = {interval}\nhealth_timeout_ms = {timeout}\nhealth_rise = 2\nhealth_fall = {fall}"
    );
    let mut lab = Lab::new("health", &["a", "b", "c"], 1400, 1400);
    let members = [("a", 1, false), ("b", 1, false), ("c", 1, false)];
    lab.start_fastpathd(&lab.config(&members, "entries = 65536", Some(&health)));
    let sock = lab.s.path("control.sock");
    wait_for(10, "every backend's check passed", || {
        ["a", "b", "c"]
            .iter()
            .all(|b| tunnel_row(&sock, b)["health_last"] == "ok")
    });
    let dr = lab.driver();
    let first = dr.ask(&format!("long {LONG}"));
    let per = dr.probe(PROBES);
    eprintln!("a, b, c: {per:?}");
    assert!(["a", "b", "c"].iter().all(|b| count(&per, b) > 0), "{per:?}");
    let st = all_progress(dr, &first, 1.0, "before b's server dies");
    assert!(
        rows(&st).iter().any(|c| c["backend"] == "b"),
        "some long connections are on b: {st}"
    );
    assert_eq!(backend_up(&lab.scrape(), "b"), Some(1.0));

    lab.backend("b").kill_server();
    let killed = Instant::now();
    let took = loop {
        let asked = killed.elapsed();
        if backend_up(&lab.scrape(), "b") == Some(0.0) {
            break asked;
        }
        assert!(killed.elapsed() < Duration::from_secs(10), "b never went down");
        std::thread::sleep(Duration::from_millis(20));
    };
    let bound = Duration::from_millis(fall * interval + interval);
    eprintln!(
        "b down {} ms after its server died (bound {} ms: fall {fall} × interval {interval} ms + one interval)",
        took.as_millis(),
        bound.as_millis()
    );
    assert!(took <= bound, "b went down after {took:?}, more than {bound:?}");

    let dr = lab.driver();
    std::thread::sleep(Duration::from_secs(1));
    let after = dr.ask("status");
    for (b, a) in rows(&st).iter().zip(rows(&after)) {
        if a["backend"] == "b" {
            assert!(!a["err"].is_null(), "b's connections died with its server: {a}");
        } else {
            assert!(
                a["err"].is_null() && a["bytes"].as_u64() > b["bytes"].as_u64(),
                "a connection on a live backend stopped: {a}"
            );
        }
    }
    let per = dr.probe(PROBES);
    eprintln!("b down: {per:?}");
    assert_eq!(count(&per, "a") + count(&per, "c"), PROBES, "only a and c: {per:?}");
    let end = dr.ask("stop all");
    for c in rows(&end) {
        assert!(c["closed"] == true && c["err"].is_null(), "{c}");
    }
    // Live, and in the metrics written at exit.
    for m in [lab.scrape(), lab.stop_fastpathd()] {
        assert_eq!(
            m.get("fastpath_backend_transitions_total{tunnel=\"b\",to=\"down\"}")
                .copied(),
            Some(1.0),
            "b went down once"
        );
        assert_eq!(
            (backend_up(&m, "a"), backend_up(&m, "b"), backend_up(&m, "c")),
            (Some(1.0), Some(0.0), Some(1.0))
        );
    }
}
