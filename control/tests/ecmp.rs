//! Scale out: two fastpathd nodes announce one service address by BGP through BIRD, gated by
//! `fastpathd-announce` on each node's `/healthz`; a router running FRR installs both as one ECMP
//! route and spreads a client's flows over them by the 5-tuple; the service tunnels every datagram
//! to one of three backends (Maglev over the flow hash, the same on every node with the same
//! tunnels), and the test reads each node's tunnel output on the router's side of its veth.
//!
//! ```text
//!  ns client             ns router (FRR: zebra + bgpd, maximum-paths, L4 multipath hash)
//!  10.0.9.2 ── veth ──── 10.0.9.1
//!                        10.0.1.1 ── veth ── ns node1: fastpathd 10.0.1.3 + 198.18.0.10 (net_af_packet)
//!                        │                            kernel 10.0.1.2: BIRD (BGP), fastpathd-announce
//!                        10.0.2.1 ── veth ── ns node2: the same with 10.0.2.x
//!                        203.0.113.0/24 blackhole (the backends: GRE is read, not delivered)
//! ```
//!
//! fastpathd and the node's kernel share the veth (af_packet sees every frame; the kernel keeps
//! its own address for BGP), as a host with a bifurcated NIC or a management NIC would; BIRD
//! announces the service address with fastpathd's address as the next hop.
//!
//! Checked: both nodes carry flows; each flow crosses one node and reaches one backend; the
//! flow → backend map is the same whichever node a flow crossed; SIGTERM and then SIGKILL of
//! node 1 leave the router's kernel route with one next hop within a few seconds, every flow
//! then crosses node 2 and reaches the backend it had; the route is back to two next hops once
//! node 1 runs again. A second test drives the helper with a port going down and an lcore
//! stopped, reading BIRD's protocol state.

mod common;

use common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const VIP: &str = "198.18.0.10";
/// The IPv6 service address of the IPv6 test, and fastpathd's IPv6 address on node `i`'s link.
const VIP6: &str = "2001:db8:f::10";

fn node_addr6(i: usize) -> String {
    format!("2001:db8:{i}::3")
}
const SERVICE_PORT: u16 = 9000;
const NODES_AS: u32 = 65001;
const ROUTER_AS: u32 = 65000;
const BACKENDS: [&str; 3] = ["203.0.113.1", "203.0.113.2", "203.0.113.3"];
const FLOWS: u16 = 200;
const FIRST_PORT: u16 = 20000;
const ROUNDS: usize = 3;
const CLIENT: &str = "10.0.9.2";

fn repo_file(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap()
}

/// Sends SIGTERM to a child, SIGKILL after 5 s, and reaps it.
fn stop_child(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .stderr(Stdio::null())
        .status();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A process started in a namespace (`ip netns exec` execs, so the child is the process),
/// stopped on drop; its stderr (and stdout) go to `log`.
struct Proc {
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn spawn(ns: &str, argv: &[&str], log: PathBuf) -> Proc {
        let f = std::fs::File::create(&log).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(argv)
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap_or_else(|e| panic!("{argv:?}: {e} (ci/setup installs bird2 and frr)"));
        Proc { child, log }
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        stop_child(&mut self.child);
    }
}

impl Capture {
    /// Stops it and returns the frames.
    fn stop(self) -> Vec<Vec<u8>> {
        read_pcap(&self.finish())
    }
}

fn read_pcap(p: &Path) -> Vec<Vec<u8>> {
    let b = std::fs::read(p).unwrap();
    let mut out = vec![];
    let mut i = 24;
    while i + 16 <= b.len() {
        let len = u32::from_le_bytes(b[i + 8..i + 12].try_into().unwrap()) as usize;
        out.push(b[i + 16..i + 16 + len].to_vec());
        i += 16 + len;
    }
    out
}

fn ipv4(b: &[u8]) -> String {
    format!("{}.{}.{}.{}", b[0], b[1], b[2], b[3])
}

/// A datagram of the client's as a node tunnelled it: (phase tag, flow's source port, backend).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Tunnelled {
    phase: String,
    flow: u16,
    backend: String,
}

/// Every GRE frame from `src_mac` carrying the client's UDP to the service: plain GRE (4
/// bytes, IPv4 inside), the payload `PHASE FLOW ROUND`.
fn tunnelled(frames: &[Vec<u8>], src_mac: [u8; 6]) -> Vec<Tunnelled> {
    let mut out = vec![];
    for f in frames {
        if f.len() < 14 + 20 + 4 + 20 + 8 || f[6..12] != src_mac || f[12..14] != [8, 0] || f[23] != 47 {
            continue;
        }
        let outer = 14;
        let ihl = (f[outer] & 0xf) as usize * 4;
        let gre = outer + ihl;
        assert_eq!(&f[gre..gre + 4], &[0, 0, 8, 0], "plain GRE with IPv4 inside");
        let inner = gre + 4;
        let iihl = (f[inner] & 0xf) as usize * 4;
        let udp = inner + iihl;
        if f[inner + 9] != 17 || ipv4(&f[inner + 12..inner + 16]) != CLIENT {
            continue;
        }
        assert_eq!(ipv4(&f[inner + 16..inner + 20]), VIP);
        assert_eq!(u16::from_be_bytes([f[udp + 2], f[udp + 3]]), SERVICE_PORT);
        let payload = String::from_utf8_lossy(&f[udp + 8..]).to_string();
        let phase = payload.split(' ').next().unwrap().to_string();
        out.push(Tunnelled {
            phase,
            flow: u16::from_be_bytes([f[udp], f[udp + 1]]),
            backend: ipv4(&f[outer + 16..outer + 20]),
        });
    }
    out
}

fn mac(s: &str) -> [u8; 6] {
    let v: Vec<u8> = s.split(':').map(|h| u8::from_str_radix(h, 16).unwrap()).collect();
    v.try_into().unwrap()
}

fn node_mac(i: usize) -> String {
    format!("02:00:00:00:0{i}:02")
}

fn router_mac(i: usize) -> String {
    format!("02:00:00:00:0{i}:01")
}

/// One node: its namespace, veth, BIRD, helper and fastpathd (restartable).
struct Node {
    i: usize,
    ns: String,
    s: Scratch,
    cfg: PathBuf,
    fastpathd: Option<Daemon>,
    helper: Option<Proc>,
    bird: Option<Proc>,
}

impl Node {
    fn bird_socket(&self) -> PathBuf {
        self.s.path("bird.ctl")
    }

    fn start_bird(&mut self, cfg: &str, protocols: &[&str]) {
        let bird_cfg = self.s.write("bird.conf", cfg);
        let ctl = self.bird_socket();
        self.bird = Some(Proc::spawn(
            &self.ns,
            &[
                "bird",
                "-f",
                "-c",
                bird_cfg.to_str().unwrap(),
                "-s",
                ctl.to_str().unwrap(),
                "-P",
                self.s.path("bird.pid").to_str().unwrap(),
            ],
            self.s.path("bird.log"),
        ));
        wait_for(10, "BIRD's control socket", || self.vips_state() == "down");
        self.helper = Some(start_helper(
            &self.ns,
            METRICS_PORT,
            &ctl,
            protocols,
            self.s.path("announce.log"),
        ));
    }

    fn start_fastpathd(&mut self) {
        let bin = env!("CARGO_BIN_EXE_fastpathd");
        self.fastpathd = Some(Daemon::start_cmd(
            &self.s,
            Command::new("ip").args(["netns", "exec", &self.ns, bin, "--config", self.cfg.to_str().unwrap()]),
        ));
    }

    fn birdc(&self, args: &[&str]) -> String {
        let out = Command::new("birdc")
            .arg("-s")
            .arg(self.bird_socket())
            .args(args)
            .output()
            .expect("birdc (ci/setup installs bird2)");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// BIRD's state of the protocol holding the service route: "up" (announced) or "down".
    fn vips_state(&self) -> String {
        self.state_of("fastpathd_vips")
    }

    /// BIRD's state of protocol `name`.
    fn state_of(&self, name: &str) -> String {
        let out = self.birdc(&["show", "protocols", name]);
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .and_then(|l| l.split_whitespace().nth(3))
            .unwrap_or("?")
            .to_string()
    }
}

/// The fastpathd config of node `i`: one service address, a `tunnel` service over three
/// backends, the metrics endpoint on the namespace's own loopback (where the helper asks).
fn node_config(name: &str, i: usize, ns_iface: &str, metrics_port: u16) -> String {
    let tunnels: String = BACKENDS
        .iter()
        .enumerate()
        .map(|(b, remote)| {
            format!(
                "[[tunnel]]\nname = \"backend{b}\"\nlocal = \"10.0.{i}.3\"\nremote = \"{remote}\"\n\
                 port = \"net_af_packet0\"\nnext_hop_mac = \"{}\"\n\n",
                router_mac(i)
            )
        })
        .collect();
    format!(
        "[dpdk]\neal_args = {}\nmbufs = 16383\nrx_desc = 256\ntx_desc = 256\n\n\
         [[port]]\ndevice = \"net_af_packet0\"\nrx_queues = 2\ntx_queues = 2\nipv4 = [\"10.0.{i}.3\", \"{VIP}\"]\n\n\
         [lcores]\nrx = [0]\nworkers = [1]\n\n[control]\nsocket = \"control.sock\"\n\n[metrics]\nlisten = \"127.0.0.1:{metrics_port}\"\ncache_ms = 0\n\n\
         [reassembly]\nbuffers = 32\n\n\
         [[service]]\nname = \"vip\"\nports = [{SERVICE_PORT}]\naddresses = [\"{VIP}\"]\nsockets = 2\n\
         action = \"tunnel\"\ntunnels = [\"backend0\", \"backend1\", \"backend2\"]\n\n{tunnels}",
        eal_args(name, &[format!("--vdev=net_af_packet0,iface={ns_iface},qpairs=2")])
    )
}

/// The shipped BIRD template with a node's values; the second router line is dropped (one
/// router here), and the first too without a router; without `next_hop6` the lines marked
/// `# v6` (the IPv6 service address) are dropped, as the template says.
fn bird_config(router_id: &str, router: Option<&str>, next_hop: &str) -> String {
    bird_config_with(router_id, router, next_hop, None)
}

fn bird_config_with(router_id: &str, router: Option<&str>, next_hop: &str, next_hop6: Option<&str>) -> String {
    let t = repo_file("configs/bird/fastpathd-bird.conf");
    let text: String = t
        .lines()
        .filter(|l| !l.contains("@ROUTER2@") && (router.is_some() || !l.contains("@ROUTER1@")))
        .filter(|l| next_hop6.is_some() || !l.ends_with("# v6"))
        .map(|l| format!("{l}\n"))
        .collect();
    let text = text
        .replace("@ROUTER_ID@", router_id)
        .replace("@LOCAL_AS@", &NODES_AS.to_string())
        .replace("@ROUTER_AS@", &ROUTER_AS.to_string())
        .replace("@ROUTER1@", router.unwrap_or_default())
        .replace("@NEXT_HOP@", next_hop)
        .replace("@VIP@", VIP)
        .replace("@NEXT_HOP6@", next_hop6.unwrap_or_default())
        .replace("@VIP6@", VIP6);
    let code_lines: Vec<&str> = text.lines().filter(|l| !l.trim_start().starts_with('#')).collect();
    assert!(
        !code_lines.iter().any(|l| l.contains('@')),
        "every placeholder filled: {text}"
    );
    text
}

/// The helper, in the node's namespace, on the node's fastpathd and BIRD (its defaults: every
/// second, rise 3, fall 1).
fn start_helper(ns: &str, metrics_port: u16, bird_socket: &Path, protocols: &[&str], log: PathBuf) -> Proc {
    let healthz = format!("127.0.0.1:{metrics_port}");
    let mut argv = vec![
        env!("CARGO_BIN_EXE_fastpathd-announce"),
        "--healthz",
        &healthz,
        "--bird-socket",
        bird_socket.to_str().unwrap(),
    ];
    for p in protocols {
        argv.extend(["--protocol", p]);
    }
    Proc::spawn(ns, &argv, log)
}

/// The namespaces, veths, daemons; everything stopped and removed on drop, failure or not.
struct Lab {
    id: String,
    /// Dual-stack nodes (the IPv6 test): IPv6 on the links, an IPv6 service address too.
    v6: bool,
    router: String,
    client: String,
    nodes: Vec<Node>,
    frr: Vec<Proc>,
    s: Scratch,
}

const METRICS_PORT: u16 = 9464;

impl Lab {
    fn new() -> Lab {
        Lab::with(false, 2)
    }

    /// `nodes` nodes; `v6`: dual-stack ([`Lab::v6`]).
    fn with(v6: bool, nodes: usize) -> Lab {
        // Its own names for the IPv6 lab: the tests of this file run side by side.
        let id = format!("{}{}", if v6 { "v" } else { "" }, std::process::id() % 100_000);
        let s = Scratch::new(if v6 { "ecmp-v6" } else { "ecmp" });
        let mut lab = Lab {
            router: format!("ecr{id}"),
            client: format!("ecc{id}"),
            id,
            v6,
            nodes: vec![],
            frr: vec![],
            s,
        };
        // Registered before anything is made, so a failure half way removes what exists.
        for ns in [lab.router.clone(), lab.client.clone()] {
            ip(&["netns", "add", &ns]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
        }
        let r = lab.router.clone();
        sysctl(
            &r,
            &[
                "net.ipv4.ip_forward=1",
                "net.ipv4.fib_multipath_hash_policy=1",
                "net.ipv4.conf.all.rp_filter=0",
                "net.ipv4.conf.default.rp_filter=0",
                &format!("net.ipv6.conf.all.disable_ipv6={}", u8::from(!v6)),
                &format!("net.ipv6.conf.default.disable_ipv6={}", u8::from(!v6)),
            ],
        );
        // Client link.
        let (rc, cc) = (format!("ecr{}c", lab.id), format!("ecc{}c", lab.id));
        ip(&["link", "add", &rc, "type", "veth", "peer", "name", &cc]);
        ip(&["link", "set", &rc, "netns", &r]);
        ip(&["link", "set", &cc, "netns", &lab.client]);
        sysctl(
            &lab.client,
            &[
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ],
        );
        ip(&["-n", &r, "addr", "add", "10.0.9.1/24", "dev", &rc]);
        ip(&["-n", &r, "link", "set", &rc, "up"]);
        ip(&["-n", &lab.client, "addr", "add", &format!("{CLIENT}/24"), "dev", &cc]);
        ip(&["-n", &lab.client, "link", "set", &cc, "up"]);
        ip(&["-n", &lab.client, "route", "add", "default", "via", "10.0.9.1"]);
        // The backends are beyond the router: GRE to them is read on the nodes' links, then
        // dropped here without an ICMP error.
        ip(&["-n", &r, "route", "add", "blackhole", "203.0.113.0/24"]);
        for i in 1..=nodes {
            lab.add_node(i);
        }
        lab.start_frr();
        for n in &mut lab.nodes {
            n.start_fastpathd();
        }
        lab
    }

    fn add_node(&mut self, i: usize) {
        let ns = format!("ecn{}n{i}", self.id);
        let (rif, nif) = (format!("ecr{}n{i}", self.id), format!("ecn{}n{i}", self.id));
        ip(&["netns", "add", &ns]);
        let s = Scratch::new(&format!("ecmp-node{i}"));
        let mut text = node_config(
            &format!("ecmp-n{}{i}", if self.v6 { "v" } else { "" }),
            i,
            &nif,
            METRICS_PORT,
        );
        if self.v6 {
            // fastpathd's IPv6 address on the link, and the IPv6 service address.
            text = text
                .replace(
                    &format!("ipv4 = [\"10.0.{i}.3\", \"{VIP}\"]\n"),
                    &format!(
                        "ipv4 = [\"10.0.{i}.3\", \"{VIP}\"]\nipv6 = [\"{}/64\", \"{VIP6}\"]\n",
                        node_addr6(i)
                    ),
                )
                .replace(
                    &format!("addresses = [\"{VIP}\"]"),
                    &format!("addresses = [\"{VIP}\", \"{VIP6}\"]"),
                );
            assert!(text.contains(VIP6), "{text}");
        }
        let cfg = s.write("fastpathd.toml", &text);
        self.nodes.push(Node {
            i,
            ns: ns.clone(),
            s,
            cfg,
            fastpathd: None,
            helper: None,
            bird: None,
        });
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        let off = u8::from(!self.v6);
        sysctl(
            &ns,
            &[
                &format!("net.ipv6.conf.all.disable_ipv6={off}"),
                &format!("net.ipv6.conf.default.disable_ipv6={off}"),
            ],
        );
        ip(&["link", "add", &rif, "type", "veth", "peer", "name", &nif]);
        ip(&["link", "set", &rif, "netns", &self.router, "address", &router_mac(i)]);
        ip(&["link", "set", &nif, "netns", &ns, "address", &node_mac(i)]);
        ip(&[
            "-n",
            &self.router,
            "addr",
            "add",
            &format!("10.0.{i}.1/24"),
            "dev",
            &rif,
        ]);
        ip(&["-n", &self.router, "link", "set", &rif, "up"]);
        // The kernel's address on the node's link: BGP. fastpathd has 10.0.i.3.
        ip(&["-n", &ns, "addr", "add", &format!("10.0.{i}.2/24"), "dev", &nif]);
        if self.v6 {
            let (r6, k6) = (format!("2001:db8:{i}::1/64"), format!("2001:db8:{i}::2/64"));
            ip(&["-n", &self.router, "addr", "add", &r6, "dev", &rif, "nodad"]);
            ip(&["-n", &ns, "addr", "add", &k6, "dev", &nif, "nodad"]);
        }
        ip(&["-n", &ns, "link", "set", &nif, "up"]);
        // veth leaves checksums to "hardware": the router's side must put real ones on the wire.
        let out = ns_exec(&self.router, &["ethtool", "-K", &rif, "tx", "off"]);
        assert!(out.status.success(), "ethtool (ci/setup installs it)");
        let v6 = self.v6.then(|| node_addr6(i));
        let protocols: &[&str] = if self.v6 {
            &["fastpathd_vips", "fastpathd_vips6"]
        } else {
            &[]
        };
        let n = self.nodes.last_mut().unwrap();
        n.start_bird(
            &bird_config_with(
                &format!("10.0.{i}.2"),
                Some(&format!("10.0.{i}.1")),
                &format!("10.0.{i}.3"),
                v6.as_deref(),
            ),
            protocols,
        );
    }

    /// zebra and bgpd in the router namespace, from the shipped router config, with their
    /// files in a directory of the test's that the `frr` user owns (FRR drops to it).
    fn start_frr(&mut self) {
        let dir = self.s.path("frr");
        std::fs::create_dir_all(&dir).unwrap();
        let ok = Command::new("chown").args(["frr:frr"]).arg(&dir).status().unwrap();
        assert!(ok.success(), "chown frr: the frr package (ci/setup) makes the user");
        let nodes: String = self
            .nodes
            .iter()
            .map(|n| format!(" neighbor 10.0.{}.2 peer-group NODES\n", n.i))
            .collect();
        let t = repo_file("configs/bird/frr-router.conf")
            .replace("@ROUTER_ID@", "10.0.9.1")
            .replace("@ROUTER_AS@", &ROUTER_AS.to_string())
            .replace("@NODES_AS@", &NODES_AS.to_string())
            .replace(" neighbor @NODE@ peer-group NODES\n", &nodes);
        assert!(!t.lines().any(|l| !l.starts_with('!') && l.contains('@')), "{t}");
        std::fs::write(dir.join("bgpd.conf"), t).unwrap();
        std::fs::write(dir.join("zebra.conf"), "hostname router\n").unwrap();
        let d = dir.to_str().unwrap().to_string();
        for daemon in ["zebra", "bgpd"] {
            let conf = format!("{d}/{daemon}.conf");
            let pid = format!("{d}/{daemon}.pid");
            let zserv = format!("{d}/zserv.api");
            let bin = format!("/usr/lib/frr/{daemon}");
            assert!(Path::new(&bin).exists(), "{bin}: ci/setup installs frr");
            let p = Proc::spawn(
                &self.router,
                &[
                    &bin,
                    "-f",
                    &conf,
                    "-i",
                    &pid,
                    "-z",
                    &zserv,
                    "--vty_socket",
                    &d,
                    "-u",
                    "frr",
                    "-g",
                    "frr",
                ],
                self.s.path(&format!("{daemon}.log")),
            );
            self.frr.push(p);
            // bgpd connects to zebra's socket: zebra first.
            if daemon == "zebra" {
                wait_for(10, "zebra's socket", || dir.join("zserv.api").exists());
            }
        }
    }

    /// The router's kernel next hops for `addr` (IPv4 or IPv6).
    fn next_hops_of(&self, addr: &str) -> BTreeSet<String> {
        let family = if addr.contains(':') { "-6" } else { "-4" };
        let out = Command::new("ip")
            .args(["-n", &self.router, family, "route", "show", addr])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let w: Vec<&str> = text.split_whitespace().collect();
        w.windows(2)
            .filter(|p| p[0] == "via")
            .map(|p| p[1].to_string())
            .collect()
    }

    /// Waits until the route has exactly `want` next hops; returns how long that took.
    fn wait_next_hops(&self, want: &[&str], secs: u64, what: &str) -> Duration {
        self.wait_next_hops_of(&[(VIP, want)], secs, what)
    }

    /// Waits until each address's route has exactly its next hops; how long that took.
    fn wait_next_hops_of(&self, want: &[(&str, &[&str])], secs: u64, what: &str) -> Duration {
        let want: Vec<(&str, BTreeSet<String>)> = want
            .iter()
            .map(|(a, w)| (*a, w.iter().map(|s| s.to_string()).collect()))
            .collect();
        let t = Instant::now();
        loop {
            let got: Vec<BTreeSet<String>> = want.iter().map(|(a, _)| self.next_hops_of(a)).collect();
            if got.iter().zip(&want).all(|(g, (_, w))| g == w) {
                return t.elapsed();
            }
            if t.elapsed() > Duration::from_secs(secs) {
                self.dump();
                panic!("{what}: the router's routes have next hops {got:?}, not {want:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn dump(&self) {
        for n in &self.nodes {
            if let Some(h) = &n.helper {
                eprintln!("--- node {} fastpathd-announce\n{}", n.i, h.text());
            }
            if let Some(b) = &n.bird {
                eprintln!("--- node {} bird\n{}", n.i, b.text());
            }
            eprintln!("--- node {} birdc\n{}", n.i, n.birdc(&["show", "protocols"]));
        }
        let v = ns_exec(
            &self.router,
            &[
                "vtysh",
                "--vty_socket",
                self.s.path("frr").to_str().unwrap(),
                "-c",
                "show ip bgp",
                "-c",
                "show bgp ipv6 unicast",
            ],
        );
        let _ = v;
    }

    /// The client sends ROUNDS datagrams on each of FLOWS flows (source ports), tagged `phase`.
    fn send(&self, phase: &str) {
        let code = format!(
            "import socket, time\n\
             socks = []\n\
             for i in range({FLOWS}):\n\
             \x20   s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
             \x20   s.bind(('{CLIENT}', {FIRST_PORT} + i)); socks.append(s)\n\
             for r in range({ROUNDS}):\n\
             \x20   for i, s in enumerate(socks):\n\
             \x20       s.sendto(b'{phase} %d %d' % (i, r), ('{VIP}', {SERVICE_PORT}))\n\
             \x20       if i % 20 == 19: time.sleep(0.002)\n"
        );
        let out = ns_exec(&self.client, &["/usr/bin/python3", "-c", &code]);
        assert!(out.status.success(), "client");
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.dump();
        }
        for n in &mut self.nodes {
            drop(n.helper.take());
            drop(n.fastpathd.take());
            drop(n.bird.take());
        }
        while let Some(p) = self.frr.pop() {
            drop(p);
        }
        let mut all = vec![self.router.clone(), self.client.clone()];
        all.extend(self.nodes.iter().map(|n| n.ns.clone()));
        for ns in all {
            let _ = Command::new("ip")
                .args(["netns", "del", &ns])
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn sysctl(ns: &str, kv: &[&str]) {
    let mut cmd = vec!["sysctl", "-qw"];
    cmd.extend_from_slice(kv);
    let out = ns_exec(ns, &cmd);
    assert!(out.status.success(), "sysctl {kv:?}");
}

/// What the captures saw in one phase: flow → (node, backend) for every datagram.
fn by_flow(seen: &[(usize, Tunnelled)], phase: &str) -> BTreeMap<u16, Vec<(usize, String)>> {
    let mut m: BTreeMap<u16, Vec<(usize, String)>> = BTreeMap::new();
    for (node, t) in seen.iter().filter(|(_, t)| t.phase == phase) {
        m.entry(t.flow).or_default().push((*node, t.backend.clone()));
    }
    m
}

/// Every flow of `phase` arrived ROUNDS times, through one node (in `nodes`), to one backend;
/// returns flow → (node, backend).
fn check_phase(seen: &[(usize, Tunnelled)], phase: &str, nodes: &[usize]) -> BTreeMap<u16, (usize, String)> {
    let m = by_flow(seen, phase);
    let mut out = BTreeMap::new();
    for port in FIRST_PORT..FIRST_PORT + FLOWS {
        let got = m.get(&port).cloned().unwrap_or_default();
        assert_eq!(
            got.len(),
            ROUNDS,
            "phase {phase}: flow {port} tunnelled {ROUNDS} times: {got:?}"
        );
        assert!(
            got.iter().all(|g| g == &got[0]),
            "phase {phase}: flow {port} crossed one node to one backend: {got:?}"
        );
        assert!(
            nodes.contains(&got[0].0),
            "phase {phase}: flow {port} crossed node {} (up: {nodes:?})",
            got[0].0
        );
        out.insert(port, got[0].clone());
    }
    out
}

#[test]
fn two_nodes_share_a_service_address_by_ecmp_and_a_failed_node_is_withdrawn() {
    if missing(&["bird", "birdc", "zebra", "bgpd"]) {
        return;
    }
    let t0 = Instant::now();
    let mut lab = Lab::new();
    let (nh1, nh2) = ("10.0.1.3", "10.0.2.3");
    let took = lab.wait_next_hops(&[nh1, nh2], 30, "both nodes announced");
    eprintln!("both nodes announced {took:?} after their start (helper: rise 3 at 1 s)");
    // The router resolves both next hops (fastpathd answers ARP and ping) before the flows.
    for nh in [nh1, nh2] {
        wait_for(5, "the router reaching fastpathd", || {
            ns_exec(&lab.router, &["ping", "-c", "1", "-W", "1", nh])
                .status
                .success()
        });
    }
    let caps: Vec<Capture> = (1..=2)
        .map(|i| {
            Capture::start(
                &lab.router,
                &format!("ecr{}n{i}", lab.id),
                lab.s.path(&format!("node{i}.pcap")),
            )
        })
        .collect();

    lab.send("A");

    // SIGTERM: fastpathd answers `stopping`, then goes; the helper withdraws.
    let t = Instant::now();
    let (code, _) = lab.nodes[0].fastpathd.take().unwrap().stop();
    assert_eq!(code, Some(0));
    lab.wait_next_hops(&[nh2], 10, "node 1 withdrawn after SIGTERM");
    let withdraw_term = t.elapsed();
    assert_eq!(lab.nodes[0].vips_state(), "down");
    lab.send("B");

    let t = Instant::now();
    lab.nodes[0].start_fastpathd();
    lab.wait_next_hops(&[nh1, nh2], 15, "node 1 announced again after its restart");
    let announce_1 = t.elapsed();
    lab.send("C");

    // SIGKILL: no `stopping`, the endpoint is just gone.
    let t = Instant::now();
    let mut d = lab.nodes[0].fastpathd.take().unwrap();
    d.signal("KILL");
    let _ = d.child.wait();
    drop(d);
    lab.wait_next_hops(&[nh2], 10, "node 1 withdrawn after SIGKILL");
    let withdraw_kill = t.elapsed();
    lab.send("D");

    let t = Instant::now();
    lab.nodes[0].start_fastpathd();
    lab.wait_next_hops(&[nh1, nh2], 15, "node 1 announced again after SIGKILL and restart");
    let announce_2 = t.elapsed();
    lab.send("E");

    let mut seen: Vec<(usize, Tunnelled)> = vec![];
    for (k, cap) in caps.into_iter().enumerate() {
        let i = k + 1;
        let frames = cap.stop();
        seen.extend(tunnelled(&frames, mac(&node_mac(i))).into_iter().map(|t| (i, t)));
    }
    eprintln!(
        "withdrawn {withdraw_term:?} after SIGTERM, {withdraw_kill:?} after SIGKILL; announced again \
         {announce_1:?} and {announce_2:?} after the restarts (fastpathd start included)"
    );

    let a = check_phase(&seen, "A", &[1, 2]);
    let per_node = |m: &BTreeMap<u16, (usize, String)>, n: usize| m.values().filter(|v| v.0 == n).count();
    let (on1, on2) = (per_node(&a, 1), per_node(&a, 2));
    eprintln!("phase A: {on1} flows through node 1, {on2} through node 2");
    assert!(
        on1 >= 30 && on2 >= 30,
        "both nodes carry flows: {on1} and {on2} of {FLOWS}"
    );
    let backends: BTreeSet<&str> = a.values().map(|v| v.1.as_str()).collect();
    assert_eq!(backends.len(), BACKENDS.len(), "every backend gets flows: {backends:?}");
    // Either node sends a flow to the same backend: with one node gone, every flow crosses the
    // other and reaches the backend it reached before.
    for (phase, up) in [("B", &[2][..]), ("C", &[1, 2][..]), ("D", &[2][..]), ("E", &[1, 2][..])] {
        let p = check_phase(&seen, phase, up);
        for (port, (node, backend)) in &p {
            assert_eq!(
                backend, &a[port].1,
                "phase {phase}: flow {port} through node {node} reached {backend}, through node {} it reached {}",
                a[port].0, a[port].1
            );
        }
        if up.len() == 2 {
            assert!(
                per_node(&p, 1) >= 30 && per_node(&p, 2) >= 30,
                "phase {phase}: both nodes carry flows again"
            );
        }
    }
    for (what, took) in [("SIGTERM", withdraw_term), ("SIGKILL", withdraw_kill)] {
        assert!(took < Duration::from_secs(4), "withdrawn {took:?} after {what}");
    }
    eprintln!("the whole test took {:?}", t0.elapsed());
}

/// One node without a router: the helper's decisions read from BIRD's protocol state, for the
/// failures that cannot be made in the ECMP lab without also cutting its BGP session (a port
/// down) and one more (an lcore stuck).
struct Single {
    node: Node,
    peer: String,
    peer_if: String,
}

impl Drop for Single {
    fn drop(&mut self) {
        drop(self.node.helper.take());
        drop(self.node.fastpathd.take());
        drop(self.node.bird.take());
        for ns in [&self.node.ns, &self.peer] {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Waits until BIRD's `fastpathd_vips` is `want`; returns how long it took.
fn wait_state(n: &Node, want: &str, secs: u64, what: &str) -> Duration {
    let t = Instant::now();
    loop {
        let got = n.vips_state();
        if got == want {
            return t.elapsed();
        }
        if t.elapsed() > Duration::from_secs(secs) {
            let h = n.helper.as_ref().map(Proc::text).unwrap_or_default();
            panic!("{what}: fastpathd_vips is {got}, not {want}; the helper's log:\n{h}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_helper_withdraws_on_a_port_down_and_a_stuck_lcore_and_announces_on_recovery() {
    if missing(&["bird", "birdc"]) {
        return;
    }
    let id = format!("{}", std::process::id() % 100_000);
    let (ns, peer) = (format!("eca{id}n"), format!("eca{id}p"));
    let (nif, pif) = (format!("eca{id}n"), format!("eca{id}p"));
    ip(&["netns", "add", &ns]);
    let s = Scratch::new("ecmp-single");
    let cfg = s.write("fastpathd.toml", &node_config("ecmp-single", 1, &nif, METRICS_PORT));
    let mut one = Single {
        node: Node {
            i: 1,
            ns: ns.clone(),
            s,
            cfg,
            fastpathd: None,
            helper: None,
            bird: None,
        },
        peer: peer.clone(),
        peer_if: pif.clone(),
    };
    ip(&["netns", "add", &peer]);
    ip(&["-n", &ns, "link", "set", "lo", "up"]);
    ip(&["link", "add", &nif, "type", "veth", "peer", "name", &pif]);
    ip(&["link", "set", &nif, "netns", &ns]);
    ip(&["link", "set", &pif, "netns", &peer]);
    ip(&["-n", &ns, "link", "set", &nif, "up"]);
    ip(&["-n", &peer, "link", "set", &pif, "up"]);
    one.node.start_fastpathd();
    one.node.start_bird(&bird_config("10.0.1.2", None, "10.0.1.3"), &[]);
    let n = &one.node;
    let took = wait_state(n, "up", 10, "announced at start");
    eprintln!("announced {took:?} after the helper started (rise 3 at 1 s)");
    assert!(
        took >= Duration::from_millis(1900),
        "not before 3 good answers: {took:?}"
    );

    // The port: the far end of the veth goes down, fastpathd's link with it.
    ip(&["-n", &one.peer, "link", "set", &one.peer_if, "down"]);
    let down = wait_state(n, "down", 5, "withdrawn on the port down");
    ip(&["-n", &one.peer, "link", "set", &one.peer_if, "up"]);
    let up = wait_state(n, "up", 10, "announced again with the port up");
    eprintln!("port down: withdrawn after {down:?}; port up: announced after {up:?}");
    assert!(down < Duration::from_secs(3), "{down:?}");

    // An lcore stops polling (its thread stopped for 3 s): /healthz turns 503 after 500 ms.
    let pid = n.fastpathd.as_ref().unwrap().child.id();
    let stopped = StoppedThread::new(thread_named(pid, "rte-worker-1"), 3.0);
    let stuck = wait_state(n, "down", 5, "withdrawn with an lcore stuck");
    eprintln!("stuck lcore: withdrawn after {stuck:?}");
    assert!(stuck < Duration::from_secs(3), "{stuck:?}");
    drop(stopped);
    let back = wait_state(n, "up", 10, "announced again once the lcore polls");
    eprintln!("lcore polling again: announced after {back:?}");

    // Stopping the helper withdraws (how a node is drained).
    let mut h = one.node.helper.take().unwrap();
    let _ = Command::new("kill").args(["-TERM", &h.child.id().to_string()]).status();
    let st = h.child.wait().unwrap();
    assert!(st.success(), "the helper exits 0 on SIGTERM: {}", h.text());
    assert_eq!(one.node.vips_state(), "down", "{}", h.text());
    let log = h.text();
    for line in [
        "fastpathd unhealthy: /healthz answered 503: port net_af_packet0 link down",
        "lcore 1 (worker) not polling",
        "stopping: withdrawn",
    ] {
        assert!(log.contains(line), "the helper logs `{line}`:\n{log}");
    }
}

/// An IPv6 service address announced through the shipped BIRD template (its IPv6 lines) and
/// helper (`--protocol` for both families) over the node's IPv4 BGP session to FRR (the
/// shipped router config's IPv6 address family): the router installs it with fastpathd's
/// IPv6 address as the next hop, reaches fastpathd there (neighbour discovery answered by
/// fastpathd, a ping of the service address answered through that route), and drops it
/// within a few seconds of fastpathd's death (health failing), IPv4 and IPv6 alike, then takes
/// both back when fastpathd runs again.
#[test]
fn an_ipv6_service_address_is_announced_with_its_next_hop_and_withdrawn_when_fastpathd_fails() {
    if missing(&["bird", "birdc", "zebra", "bgpd"]) {
        return;
    }
    let t0 = Instant::now();
    let mut lab = Lab::with(true, 1);
    let nh6 = node_addr6(1);
    let both: [(&str, &[&str]); 2] = [(VIP, &["10.0.1.3"]), (VIP6, &[nh6.as_str()])];
    let took = lab.wait_next_hops_of(&both, 30, "both service addresses announced");
    eprintln!("IPv4 and IPv6 service addresses announced {took:?} after the start (rise 3 at 1 s)");
    let n = &lab.nodes[0];
    assert_eq!(
        (n.state_of("fastpathd_vips"), n.state_of("fastpathd_vips6")),
        ("up".into(), "up".into())
    );
    let routes = n.birdc(&["show", "route", "for", VIP6, "all"]);
    assert!(routes.contains("fastpathd_vips6"), "in BIRD's table: {routes}");
    // The route is usable: fastpathd answers the router's neighbour solicitation for its
    // address and the ping of the service address.
    wait_for(5, "the router pinging the IPv6 service address", || {
        ns_exec(&lab.router, &["ping", "-6", "-c", "1", "-W", "1", VIP6])
            .status
            .success()
    });
    let neigh = ns_exec(&lab.router, &["ip", "-6", "neigh", "show", &nh6]);
    assert!(
        String::from_utf8_lossy(&neigh.stdout).contains(&node_mac(1)),
        "the router resolved fastpathd's IPv6 address to its MAC"
    );

    // fastpathd dies: /healthz is gone, the helper withdraws both families.
    let t = Instant::now();
    let mut d = lab.nodes[0].fastpathd.take().unwrap();
    d.signal("KILL");
    let _ = d.child.wait();
    drop(d);
    lab.wait_next_hops_of(&[(VIP, &[]), (VIP6, &[])], 10, "withdrawn after SIGKILL");
    let withdrawn = t.elapsed();
    let n = &lab.nodes[0];
    assert_eq!(n.state_of("fastpathd_vips6"), "down");

    let t = Instant::now();
    lab.nodes[0].start_fastpathd();
    lab.wait_next_hops_of(&both, 15, "announced again after the restart");
    let announced = t.elapsed();
    eprintln!(
        "withdrawn {withdrawn:?} after SIGKILL; announced again {announced:?} after the restart; test took {:?}",
        t0.elapsed()
    );
    assert!(
        withdrawn < Duration::from_secs(4),
        "withdrawn {withdrawn:?} after SIGKILL"
    );
}
