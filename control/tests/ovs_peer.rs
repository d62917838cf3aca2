//! GRE against an independent peer: Open vSwitch's user-space (netdev) datapath as the far end of a
//! tunnel with fastpathd, each in a network namespace the test creates, joined by a veth pair.
//! fastpathd runs over DPDK `net_af_packet` on one end; on the other, a private `ovsdb-server` +
//! `ovs-vswitchd` (own database, sockets, pidfiles and logs in the test's scratch directory, never
//! the system's /var/run/openvswitch) hold
//!
//! ```text
//!  ns fp                  ns ovs                                            ns client
//!  fastpathd ─ veth ─── br-phy (netdev, LOCAL 192.0.2.2/24) ─── veth ─────── 192.0.2.3
//!  192.0.2.1              │  native tunnelling: GRE to 192.0.2.2 is popped
//!  10.9.0.1 (inner)       gre0 (packet_type=legacy_l3: IP, not Ethernet, in GRE)
//!  198.18.0.10 (service)  │
//!                         br-int (netdev, LOCAL 10.9.0.2/24 inner stack; 198.18.0.10 on lo
//!                                 as a direct-return backend for the `tunnel` service)
//! ```
//!
//! A ping reply alone proves little: the OVS namespace's kernel is weak-host and accepts an
//! answer that leaves bare on the underlay (it owns 10.9.0.2, whatever the interface). So every
//! test also reads the wire on the OVS side of the veth and checks that each frame fastpathd sent
//! (other than ARP) is GRE from 192.0.2.1 to 192.0.2.2 with the tunnel's key, checksum and
//! sequence numbering, and that the requests really went through the tunnel.
//!
//! Over a DPDK link the far end is OVS-DPDK instead: fastpathd on `net_virtio_user` (vhost-user
//! server, on hugepages, without `--single-file-segments` in its config: it must add that itself),
//! OVS's `dpdkvhostuserclient` port `vhu0` in a bridge `br-dp` that switches it onto the same veth,
//! so the wire the test reads is unchanged:
//!
//! ```text
//!  fastpathd ═ vhost-user ═ vhu0 ─ br-dp ─ veth ─── br-phy ... (as above)
//! ```
//!
//! Each answer case (worker echo, reassembled datagrams, sequence tunnels) is a test of its own
//! with the strict assertions: each is a way an answer could leave bare on the underlay.
//!
//! Open vSwitch 3.1 quirk: on a port with both `csum=true` and `seq=true` it computes the GRE
//! checksum before it writes the sequence number, so every such packet but the one numbered 0
//! carries a wrong checksum (right for the same packet with a zero sequence number). fastpathd
//! refuses them as `gre_bad_checksum`, which is what the sequenced+checksummed test asserts;
//! fastpathd's own checksummed, numbered packets are right and OVS takes them.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// fastpathd's end of the veth (`net_af_packet` takes the interface's MAC).
const FP_MAC: &str = "02:00:00:00:0a:01";
/// OVS's underlay bridge `br-phy` (192.0.2.2), fastpathd's tunnel next hop.
const PHY_MAC: &str = "02:00:00:00:0b:01";
/// OVS's inner bridge `br-int` (10.9.0.2).
const INT_MAC: &str = "02:00:00:00:0b:02";
/// What the inner stack addresses 10.9.0.1 to: the flow into the tunnel ignores it.
const INNER_GW_MAC: &str = "02:00:00:00:0b:99";
const FP_UNDERLAY: &str = "192.0.2.1";
const OVS_UNDERLAY: &str = "192.0.2.2";
const CLIENT_UNDERLAY: &str = "192.0.2.3";
const FP_INNER: &str = "10.9.0.1";
const OVS_INNER: &str = "10.9.0.2";
/// The `tunnel` service's address on fastpathd; the OVS namespace holds it on `lo` too, as a
/// direct-return backend does, so what OVS decapsulates is delivered to its own stack.
const VIP: &str = "198.18.0.10";
const GRE_OFPORT: &str = "10";
const KEY: u32 = 42;

/// One flavour of GRE tunnel, configured alike on both ends.
#[derive(Clone, Copy, Debug)]
struct Kind {
    name: &'static str,
    key: Option<u32>,
    csum: bool,
    seq: bool,
}

const PLAIN: Kind = Kind {
    name: "plain",
    key: None,
    csum: false,
    seq: false,
};
const KEYED: Kind = Kind {
    name: "keyed",
    key: Some(KEY),
    csum: false,
    seq: false,
};
const CHECKSUMMED: Kind = Kind {
    name: "csum",
    key: None,
    csum: true,
    seq: false,
};
const SEQUENCED: Kind = Kind {
    name: "seq",
    key: None,
    csum: false,
    seq: true,
};
const SEQUENCED_CHECKSUMMED: Kind = Kind {
    name: "seqcsum",
    key: Some(KEY),
    csum: true,
    seq: true,
};

fn words(s: &str) -> Vec<&str> {
    s.split_whitespace().collect()
}

impl Capture {
    /// Stops the capture (everything the interface saw so far is in it) and decodes it.
    fn stop(self) -> Wire {
        Wire::read(&self.finish())
    }
}

const FIELDS: &[&str] = &[
    "frame.number",
    "eth.src",
    "eth.type",
    "ip.src",
    "ip.dst",
    "ip.proto",
    "ip.flags.mf",
    "ip.frag_offset",
    "gre.flags.checksum",
    "gre.flags.key",
    "gre.flags.sequence_number",
    "gre.key",
    "gre.sequence_number",
    "gre.checksum.status",
    "icmp.type",
    "udp.dstport",
    "udp.checksum.status",
    "_ws.col.Info",
];

/// One frame as tshark decoded it. Fields that occur in several headers (ip.*) are
/// comma-separated, outermost first.
#[derive(Debug)]
struct Frame(Vec<String>);

impl Frame {
    fn f(&self, name: &str) -> &str {
        let i = FIELDS.iter().position(|f| *f == name).unwrap();
        self.0.get(i).map(String::as_str).unwrap_or("")
    }
    /// The first (outermost) value of a field.
    fn outer(&self, name: &str) -> &str {
        self.f(name).split(',').next().unwrap()
    }
    fn sent_by_fastpathd(&self) -> bool {
        self.f("eth.src") == FP_MAC
    }
    fn sent_by_ovs(&self) -> bool {
        self.f("eth.src") == PHY_MAC
    }
    fn is_gre(&self) -> bool {
        self.outer("ip.proto") == "47"
    }
    /// The innermost value of a field.
    fn inner(&self, name: &str) -> &str {
        self.f(name).rsplit(',').next().unwrap()
    }
    fn line(&self) -> String {
        self.0.join(" | ")
    }
}

/// What the OVS side's veth saw.
struct Wire {
    frames: Vec<Frame>,
    /// The capture itself (its file goes with the scratch directory).
    pcap: Vec<u8>,
}

fn tshark_bool(v: &str) -> bool {
    matches!(v, "1" | "True" | "true")
}

impl Wire {
    fn read(pcap: &Path) -> Wire {
        let frames: Vec<Frame> = tshark_checked(pcap, "", FIELDS).into_iter().map(Frame).collect();
        eprintln!("--- the wire on the OVS side ({} frames)", frames.len());
        for f in &frames {
            eprintln!("{}", f.line());
        }
        Wire {
            frames,
            pcap: std::fs::read(pcap).unwrap(),
        }
    }

    fn fastpathd_frames(&self) -> impl Iterator<Item = &Frame> {
        self.frames.iter().filter(|f| f.sent_by_fastpathd())
    }

    /// Everything wrong with what fastpathd put on the wire for tunnel `kind`: anything but ARP
    /// that is not GRE from our underlay address to the peer's, outer fragments (the OVS
    /// user-space datapath does not reassemble them, so such an answer never arrives), and GRE
    /// without the tunnel's key, checksum (a right one) or strictly increasing sequence numbers.
    fn tunnel_problems(&self, kind: Kind) -> Vec<String> {
        let mut problems = vec![];
        let mut last_seq: Option<u64> = None;
        for f in self.fastpathd_frames() {
            if f.f("eth.type") == "0x0806" {
                continue;
            }
            if f.outer("ip.src") != FP_UNDERLAY || f.outer("ip.dst") != OVS_UNDERLAY || !f.is_gre() {
                problems.push(format!("bare on the underlay: {}", f.line()));
                continue;
            }
            if tshark_bool(f.outer("ip.flags.mf")) || !matches!(f.outer("ip.frag_offset"), "0" | "") {
                problems.push(format!("an outer fragment: {}", f.line()));
                continue;
            }
            if tshark_bool(f.f("gre.flags.checksum")) != kind.csum {
                problems.push(format!("GRE checksum flag != {}: {}", kind.csum, f.line()));
            }
            if kind.csum && f.f("gre.checksum.status") != "1" {
                problems.push(format!("a wrong GRE checksum: {}", f.line()));
            }
            if tshark_bool(f.f("gre.flags.key")) != kind.key.is_some() {
                problems.push(format!("GRE key flag != {}: {}", kind.key.is_some(), f.line()));
            }
            if let Some(k) = kind.key {
                if f.f("gre.key") != format!("0x{k:08x}") {
                    problems.push(format!("GRE key != {k}: {}", f.line()));
                }
            }
            if tshark_bool(f.f("gre.flags.sequence_number")) != kind.seq {
                problems.push(format!("GRE sequence flag != {}: {}", kind.seq, f.line()));
            }
            if kind.seq {
                let n: u64 = f.f("gre.sequence_number").parse().unwrap_or(0);
                if last_seq.is_some_and(|l| n <= l) {
                    problems.push(format!("sequence number {n} after {last_seq:?}: {}", f.line()));
                }
                last_seq = Some(n);
            }
        }
        problems
    }

    /// Asserts fastpathd put nothing but correct GRE (and ARP) on the wire.
    fn assert_all_in_tunnel(&self, kind: Kind) {
        let problems = self.tunnel_problems(kind);
        assert!(
            problems.is_empty(),
            "fastpathd's answers must all leave through the {} tunnel; on the wire:\n{}",
            kind.name,
            problems.join("\n")
        );
    }

    /// Every frame, one line each (for failure messages).
    fn dump(&self) -> String {
        self.frames.iter().map(Frame::line).collect::<Vec<_>>().join("\n")
    }

    /// GRE frames fastpathd sent whose innermost header matches `pred`.
    fn fp_gre(&self, pred: impl Fn(&Frame) -> bool) -> usize {
        self.fastpathd_frames().filter(|f| f.is_gre() && pred(f)).count()
    }

    /// GRE frames OVS sent to fastpathd whose innermost header matches `pred`.
    fn ovs_gre(&self, pred: impl Fn(&Frame) -> bool) -> usize {
        self.frames
            .iter()
            .filter(|f| f.sent_by_ovs() && f.is_gre() && f.outer("ip.dst") == FP_UNDERLAY && pred(f))
            .count()
    }
}

/// Who terminates the tunnel on the far side of the veth.
#[derive(Clone, Copy, PartialEq)]
enum FarEnd {
    Ovs,
    /// OVS-DPDK: fastpathd on `net_virtio_user` (vhost-user server, on hugepages), OVS's
    /// `dpdkvhostuserclient` port in a bridge `br-dp` that switches it to the veth, so the veth
    /// stays the wire the test reads (see [`ovs_dpdk`]).
    OvsDpdk,
}

/// fastpathd and an Open vSwitch user-space GRE peer (see the module doc). Everything is
/// stopped and removed on drop, also when a test fails half way through setting it up.
struct OvsPeer {
    kind: Kind,
    ns_fp: String,
    ns_ovs: String,
    ns_client: String,
    if_fp: String,
    if_ovs: String,
    /// The OVS namespace's Open vSwitch (its files in the scratch directory).
    ovs: Ovs,
    fastpathd: Option<Daemon>,
    dump: PathBuf,
    far: FarEnd,
    /// fastpathd's and OVS-DPDK's hugepage prefixes (OvsDpdk only); dropped after the daemons.
    huge: Vec<HugePrefix>,
    s: Scratch,
}

impl OvsPeer {
    fn new(name: &str, kind: Kind) -> OvsPeer {
        Self::with(name, kind, FarEnd::Ovs)
    }

    fn with(name: &str, kind: Kind, far: FarEnd) -> OvsPeer {
        let n = SEQ.fetch_add(1, Ordering::SeqCst);
        let id = format!("{}{n}", std::process::id() % 100_000);
        let s = Scratch::new(&format!("ovs-{name}"));
        let mut p = OvsPeer {
            kind,
            ns_fp: format!("ovp{id}f"),
            ns_ovs: format!("ovp{id}o"),
            ns_client: format!("ovp{id}c"),
            if_fp: format!("ova{id}"),
            if_ovs: format!("ovb{id}"),
            ovs: Ovs::new(&format!("ovp{id}o"), s.0.clone()),
            fastpathd: None,
            dump: s.path("metrics.prom"),
            far,
            huge: vec![],
            s,
        };
        if far == FarEnd::OvsDpdk {
            p.huge.push(HugePrefix::new(&format!("ovsdpdk-fp-{name}"), 128));
            p.huge.push(HugePrefix::new(&format!("ovsdpdk-ovs-{name}"), 128));
        }
        p.underlay();
        match far {
            FarEnd::Ovs | FarEnd::OvsDpdk => p.start_ovs(),
        }
        if far == FarEnd::OvsDpdk {
            // What a killed fastpathd leaves: its server socket, nobody listening on it.
            drop(std::os::unix::net::UnixListener::bind(p.vhost_socket()).unwrap());
        }
        p.start_fastpathd(name);
        if far == FarEnd::OvsDpdk {
            let log = p.fastpathd.as_ref().unwrap().log_text();
            assert!(
                log.contains("adding --single-file-segments") && log.contains("removed the stale vhost-user socket"),
                "{log}"
            );
            // fastpathd runs once OVS has connected, but OVS polls a vhost-user queue only once
            // it has reconfigured for it; what a worker sends on TX queue 1 before then waits
            // in that queue's ring, unread.
            wait_for(10, "OVS polling both of fastpathd's vhost-user queues", || {
                let rxq = p.ovs.appctl(&["dpif-netdev/pmd-rxq-show"]);
                let enabled = |q: &str| {
                    rxq.lines().any(|l| {
                        l.contains("port: vhu0") && l.contains(&format!("queue-id:  {q}")) && l.contains("(enabled)")
                    })
                };
                let log = std::fs::read_to_string(p.s.path("ovs-vswitchd.log")).unwrap_or_default();
                enabled("0")
                    && enabled("1")
                    && log.contains("assigned port 'vhu0' rx queue 1")
                    && log.contains("State of queue 3 ( rx_qid 1 )")
            });
        }
        p
    }

    /// The namespaces, the veth pair to fastpathd and the client's veth pair into br-phy.
    fn underlay(&mut self) {
        let (fp, ovs, cl) = (&self.ns_fp, &self.ns_ovs, &self.ns_client);
        let (if_cl, if_cl_ovs) = (self.if_fp.replace("ova", "ovc"), self.if_fp.replace("ova", "ovd"));
        for ns in [fp, ovs, cl] {
            ip(&["netns", "add", ns]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        ip(&["link", "add", &self.if_fp, "type", "veth", "peer", "name", &self.if_ovs]);
        // Over vhost-user, fastpathd's end of the veth is a port of OVS's br-dp instead.
        let fp_side = if self.far == FarEnd::OvsDpdk { ovs } else { fp };
        ip(&["link", "set", &self.if_fp, "netns", fp_side, "address", FP_MAC]);
        ip(&["link", "set", &self.if_ovs, "netns", ovs]);
        ip(&["link", "add", &if_cl, "type", "veth", "peer", "name", &if_cl_ovs]);
        ip(&["link", "set", &if_cl, "netns", cl]);
        ip(&["link", "set", &if_cl_ovs, "netns", ovs]);
        // The kernels of fp (on fastpathd's interface) and of the OVS side say nothing over
        // IPv6 (router solicitations, MLD) that would reach the tunnel or fastpathd.
        must(
            Command::new("ip")
                .args(["netns", "exec", fp_side, "sysctl", "-qw"])
                .arg(format!("net.ipv6.conf.{}.disable_ipv6=1", self.if_fp))
                .output()
                .unwrap(),
            "sysctl",
        );
        must(
            ns_exec(
                ovs,
                &[
                    "sysctl",
                    "-qw",
                    "net.ipv6.conf.all.disable_ipv6=1",
                    "net.ipv6.conf.default.disable_ipv6=1",
                    // The service's packets come out of the tunnel (br-int) from the client,
                    // whose route is through br-phy.
                    "net.ipv4.conf.all.rp_filter=0",
                    "net.ipv4.conf.default.rp_filter=0",
                ],
            ),
            "sysctl",
        );
        must(
            ns_exec(cl, &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"]),
            "sysctl",
        );
        ip(&["-n", fp_side, "link", "set", &self.if_fp, "up"]);
        ip(&["-n", ovs, "link", "set", &self.if_ovs, "up"]);
        ip(&["-n", ovs, "link", "set", &if_cl_ovs, "up"]);
        ip(&["-n", cl, "addr", "add", &format!("{CLIENT_UNDERLAY}/24"), "dev", &if_cl]);
        ip(&["-n", cl, "link", "set", &if_cl, "up"]);
        ip(&["-n", cl, "route", "add", VIP, "via", FP_UNDERLAY]);
        // veth leaves UDP checksums to "hardware": the client's kernel must compute them, as a
        // NIC would have them on the wire (OVS forwards the frame as it is).
        must(ns_exec(cl, &["ethtool", "-K", &if_cl, "tx", "off"]), "ethtool");
        must(ns_exec(ovs, &["ethtool", "-K", &self.if_ovs, "tx", "off"]), "ethtool");
    }

    /// ovsdb-server and ovs-vswitchd (children of the test, not detached, so they are reaped),
    /// the two netdev bridges, the GRE port, the flows, the addresses and the tunnel's neighbour.
    fn start_ovs(&mut self) {
        self.ovs.start_db();
        let db_sock = self.ovs.db_sock();
        if self.far == FarEnd::OvsDpdk {
            self.start_ovs_dpdk(&db_sock);
        } else {
            self.ovs.start_vswitchd();
        }

        let k = self.kind;
        let remote_ip = format!("options:remote_ip={FP_UNDERLAY}");
        let local_ip = format!("options:local_ip={OVS_UNDERLAY}");
        let key = format!("options:key={}", k.key.unwrap_or(0));
        let ofport = format!("ofport_request={GRE_OFPORT}");
        let mut gre = vec![
            "type=gre",
            &ofport,
            &remote_ip,
            &local_ip,
            // IP in GRE (protocol type 0x0800/0x86dd), not Ethernet (0x6558).
            "options:packet_type=legacy_l3",
        ];
        if k.key.is_some() {
            gre.push(&key);
        }
        if k.csum {
            gre.push("options:csum=true");
        }
        if k.seq {
            gre.push("options:seq=true");
        }
        let if_cl_ovs = self.if_fp.replace("ova", "ovd");
        let bridges = format!(
            "add-br br-phy -- set bridge br-phy datapath_type=netdev other-config:hwaddr={PHY_MAC} \
             -- add-port br-phy {} -- add-port br-phy {if_cl_ovs} \
             -- add-br br-int -- set bridge br-int datapath_type=netdev other-config:hwaddr={INT_MAC} \
             -- set interface br-int mtu_request=1400 \
             -- add-port br-int gre0 -- set interface gre0",
            self.if_ovs
        );
        // br-int's MTU of 1400 leaves room for the tunnel's headers on the 1500-byte underlay:
        // OVS does not fragment what it encapsulates.
        let mut args = words(&bridges);
        args.extend(gre);
        // Without --no-wait: returns once ovs-vswitchd has applied it (the bridges' taps exist).
        self.ovs.vsctl(&args);

        // br-phy keeps its NORMAL flow (switching, and native tunnel termination for GRE to its
        // address). br-int: its stack's IP into the tunnel (the Ethernet header is dropped on
        // the way into an L3 tunnel), and what comes out of the tunnel, given an Ethernet header
        // addressed to br-int, to the stack.
        self.ovs.run(&["ovs-ofctl", "del-flows", "br-int"]);
        self.ovs.run(&[
            "ovs-ofctl",
            "add-flow",
            "br-int",
            &format!("in_port=LOCAL,ip,actions=output:{GRE_OFPORT}"),
        ]);
        self.ovs.run(&[
            "ovs-ofctl",
            "add-flow",
            "br-int",
            &format!("in_port={GRE_OFPORT},ip,actions=mod_dl_src:{INNER_GW_MAC},mod_dl_dst:{INT_MAC},LOCAL"),
        ]);

        let ns = &self.ns_ovs;
        ip(&["-n", ns, "addr", "add", &format!("{OVS_UNDERLAY}/24"), "dev", "br-phy"]);
        ip(&["-n", ns, "link", "set", "br-phy", "up"]);
        ip(&["-n", ns, "addr", "add", &format!("{OVS_INNER}/24"), "dev", "br-int"]);
        ip(&["-n", ns, "link", "set", "br-int", "up"]);
        ip(&["-n", ns, "addr", "add", &format!("{VIP}/32"), "dev", "lo"]);
        // No ARP across an L3 tunnel: the inner stack's neighbour is static.
        ip(&words(&format!(
            "-n {ns} neigh replace {FP_INNER} lladdr {INNER_GW_MAC} dev br-int nud permanent"
        )));
        // OVS learns routes and the bridges' addresses from the namespace's netlink; wait for
        // the underlay route and for GRE to 192.0.2.2 to be terminated, then give the tunnel
        // its next hop (fastpathd's MAC) so the first packet is not spent on ARP.
        wait_for(10, "OVS's route to fastpathd", || {
            self.ovs.appctl(&["ovs/route/show"]).contains("192.0.2.0/24 dev br-phy")
        });
        wait_for(10, "OVS terminating GRE to its underlay address", || {
            self.ovs
                .appctl(&["tnl/ports/show", "-v"])
                .contains(&format!("dst={OVS_UNDERLAY},proto=47"))
        });
        self.ovs.appctl(&["tnl/arp/set", "br-phy", FP_UNDERLAY, FP_MAC]);
    }

    /// ovs-vswitchd with DPDK on hugepages (its own prefix, in memory, no PCI), its PMD thread
    /// sleeping when idle (OVS 3.1's `pmd-maxsleep`: this machine has 2 CPUs), and `br-dp`:
    /// the vhost-user client port to fastpathd's socket, switched to the veth toward br-phy.
    fn start_ovs_dpdk(&mut self, db_sock: &str) {
        let extra = format!(
            "other_config:dpdk-extra=--no-pci --file-prefix={} --log-level=lib.eal:warning",
            self.huge[1].prefix
        );
        self.ovs.vsctl(&[
            "--no-wait",
            "set",
            "Open_vSwitch",
            ".",
            "other_config:dpdk-init=true",
            "other_config:dpdk-socket-mem=128",
            // DPDK memory grows on demand, and OVS sizes its first packet pool at 256k mbufs: the
            // limit makes it settle for what fits, so parallel tests share the hugepages.
            "other_config:dpdk-socket-limit=128",
            "other_config:pmd-maxsleep=10000",
            &extra,
        ]);
        let binary = "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk";
        assert!(
            Path::new(binary).exists(),
            "{binary} is missing: ci/setup installs openvswitch-switch-dpdk"
        );
        self.ovs.spawn_daemon_binary("ovs-vswitchd", binary, &[db_sock]);
        wait_for(20, "OVS-DPDK initialised", || {
            self.ovs.vsctl(&["get", "Open_vSwitch", ".", "dpdk_initialized"]).trim() == "true"
        });
        let sock = self.vhost_socket();
        let br_dp = format!(
            "add-br br-dp -- set bridge br-dp datapath_type=netdev -- add-port br-dp {} \
             -- add-port br-dp vhu0 -- set interface vhu0 type=dpdkvhostuserclient \
             options:vhost-server-path={}",
            self.if_fp,
            sock.display()
        );
        self.ovs.vsctl(&words(&br_dp));
    }

    /// fastpathd's vhost-user socket (it is the server; OVS connects and reconnects to it).
    fn vhost_socket(&self) -> PathBuf {
        self.s.path("vhu0.sock")
    }

    fn start_fastpathd(&mut self, name: &str) {
        let k = self.kind;
        let mut tunnel = format!(
            "[[tunnel]]\nname = \"ovs\"\nlocal = \"{FP_UNDERLAY}\"\nremote = \"{OVS_UNDERLAY}\"\n\
             port = \"net_af_packet0\"\nnext_hop_mac = \"{PHY_MAC}\"\nchecksum = {}\nsequence = {}\n",
            k.csum, k.seq
        );
        if let Some(key) = k.key {
            tunnel += &format!("key = {key}\n");
        }
        let (device, eal) = if self.far == FarEnd::OvsDpdk {
            // Hugepages, and no --single-file-segments: fastpathd adds what virtio-user needs.
            let vdev = format!(
                "--vdev=net_virtio_user0,path={},server=1,queues=2,mac={FP_MAC}",
                self.vhost_socket().display()
            );
            // -m reserves the memory at start: virtio-user sends the peer a new memory table
            // (pausing its queues) each time DPDK memory grows, which production avoids too.
            (
                "net_virtio_user0",
                self.huge[0].eal_args(&["-m".into(), "256".into(), vdev]),
            )
        } else {
            let vdev = format!("--vdev=net_af_packet0,iface={},qpairs=2", self.if_fp);
            ("net_af_packet0", eal_args(&format!("ovs-{name}"), &[vdev]))
        };
        let tunnel = tunnel.replace("net_af_packet0", device);
        let cfg = self.s.write(
            "c.toml",
            &format!(
                "[dpdk]\neal_args = {eal}\nmbufs = 16383\n\n[[port]]\ndevice = \"{device}\"\nrx_queues = 2\n\
                 tx_queues = 2\nipv4 = [\"{FP_UNDERLAY}\", \"{FP_INNER}\", \"{VIP}\"]\n\n[lcores]\nrx = [0]\n\
                 workers = [1]\nidle_sleep_us = 50\n\n[control]\nsocket = \"control.sock\"\n\n[metrics]\nenabled = false\n[reassembly]\nbuffers = 32\n\n\
                 [[service]]\nname = \"echo\"\nports = [7]\nsockets = 2\nsocket_capacity = 256\naction = \"echo\"\n\n\
                 [[service]]\nname = \"fwd\"\nports = [9000]\naddresses = [\"{VIP}\"]\nsockets = 2\n\
                 action = \"tunnel\"\ntunnel = \"ovs\"\n\n{tunnel}"
            ),
        );
        let bin = env!("CARGO_BIN_EXE_fastpathd");
        self.fastpathd = Some(Daemon::start_cmd(
            &self.s,
            Command::new("ip")
                .args(["netns", "exec", &self.ns_fp, bin, "--config", cfg.to_str().unwrap()])
                .args(["--metrics-dump", self.dump.to_str().unwrap()]),
        ));
    }

    fn capture(&self) -> Capture {
        Capture::start(&self.ns_ovs, &self.if_ovs, self.s.path("ovs-side.pcap"))
    }

    fn exec_ovs(&self, cmd: &[&str]) -> Output {
        ns_exec(&self.ns_ovs, cmd)
    }

    fn python_ovs(&self, code: &str) -> Output {
        self.exec_ovs(&["/usr/bin/python3", "-c", code])
    }

    /// Stops fastpathd (exit 0) and returns its metrics, conservation checked.
    fn stop_fastpathd(&mut self) -> BTreeMap<String, f64> {
        let (code, _) = self.fastpathd.take().unwrap().stop();
        assert_eq!(code, Some(0));
        let m = parse_metrics(&std::fs::read_to_string(&self.dump).unwrap());
        assert_conservation(&m);
        m
    }
}

impl Drop for OvsPeer {
    fn drop(&mut self) {
        drop(self.fastpathd.take());
        // ovs-vswitchd first, then its database.
        self.ovs.stop();
        // Deleting the namespaces removes the veth pairs and OVS's taps with them.
        for ns in [&self.ns_fp, &self.ns_ovs, &self.ns_client] {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn tunnel_counter(m: &BTreeMap<String, f64>, family: &str) -> f64 {
    m.get(&format!("{family}{{tunnel=\"ovs\"}}")).copied().unwrap_or(0.0)
}

const PINGS: usize = 3;

/// (a) The RX lcore's answers: the OVS side's own ping to fastpathd's inner address through the
/// tunnel, and a UDP datagram to a closed port there; the echo replies and the Port Unreachable
/// come back through the tunnel (the kernel's socket sees ECONNREFUSED).
fn ping_and_port_unreachable(kind: Kind) {
    ping_and_port_unreachable_on(kind, FarEnd::Ovs)
}

fn ping_and_port_unreachable_on(kind: Kind, far: FarEnd) {
    let mut p = OvsPeer::with(&format!("{}-ping", kind.name), kind, far);
    let cap = p.capture();
    let out = p.exec_ovs(&["ping", "-c", "3", "-i", "0.2", "-W", "2", "-I", OVS_INNER, FP_INNER]);
    let refused = p.python_ovs(&format!(
        "import socket\n\
         s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)\n\
         s.bind(('{OVS_INNER}', 0)); s.connect(('{FP_INNER}', 9999)); s.send(b'anyone?')\n\
         try:\n\
         \x20   s.recv(100); raise SystemExit('an answer from a closed port')\n\
         except ConnectionRefusedError:\n\
         \x20   print('refused')\n"
    ));
    let wire = cap.stop();
    let m = p.stop_fastpathd();
    assert_eq!(
        wire.ovs_gre(|f| f.inner("icmp.type") == "8" || f.inner("udp.dstport") == "9999"),
        PINGS + 1,
        "the requests went through the tunnel"
    );
    wire.assert_all_in_tunnel(kind);
    assert_eq!(
        wire.fp_gre(|f| f.inner("icmp.type") == "0"),
        PINGS,
        "echo replies in GRE"
    );
    assert_eq!(
        wire.fp_gre(|f| f.f("icmp.type").ends_with('3')),
        1,
        "the Port Unreachable in GRE"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("3 received"), "ping");
    assert!(
        String::from_utf8_lossy(&refused.stdout).contains("refused"),
        "ECONNREFUSED"
    );
    assert_eq!(outcome(&m, "echo_reply"), PINGS as u64);
    assert_eq!(outcome(&m, "icmp_error"), 1);
    assert_eq!(tunnel_counter(&m, "fastpath_gre_decap_total"), PINGS as f64 + 1.0);
    assert_eq!(tunnel_counter(&m, "fastpath_gre_encap_total"), PINGS as f64 + 1.0);
}

const DATAGRAMS: usize = 5;

/// (b) UDP from the OVS side's inner address to the `echo` service, through the tunnel; the
/// worker's answers come back through it.
fn udp_echo(kind: Kind) {
    udp_echo_on(kind, FarEnd::Ovs)
}

fn udp_echo_on(kind: Kind, far: FarEnd) {
    let mut p = OvsPeer::with(&format!("{}-echo", kind.name), kind, far);
    let cap = p.capture();
    let out = p.python_ovs(&format!(
        "import socket\n\
         s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)\n\
         s.bind(('{OVS_INNER}', 0)); s.connect(('{FP_INNER}', 7))\n\
         for i in range({DATAGRAMS}):\n\
         \x20   msg = b'through the tunnel %d' % i\n\
         \x20   s.send(msg); got = s.recv(2000)\n\
         \x20   assert got == msg, (got, msg)\n\
         print('echo ok')\n"
    ));
    let wire = cap.stop();
    let m = p.stop_fastpathd();
    assert_eq!(
        wire.ovs_gre(|f| f.inner("udp.dstport") == "7"),
        DATAGRAMS,
        "the requests went through the tunnel"
    );
    wire.assert_all_in_tunnel(kind);
    assert_eq!(
        wire.fp_gre(|f| f.f("udp.checksum.status").ends_with('1') && f.inner("ip.src") == FP_INNER),
        DATAGRAMS,
        "the answers in GRE, with good inner UDP checksums"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("echo ok"), "echo");
    assert_eq!(outcome(&m, "delivered"), DATAGRAMS as u64);
    assert_eq!(tunnel_counter(&m, "fastpath_gre_decap_total"), DATAGRAMS as f64);
    assert_eq!(tunnel_counter(&m, "fastpath_gre_encap_total"), DATAGRAMS as f64);
}

/// (c) A client on the underlay sends to the `tunnel` service's address; fastpathd's worker
/// sends each datagram into the tunnel, OVS decapsulates it and its stack delivers it to a UDP
/// socket on the service address (a direct-return backend).
fn tunnel_service(kind: Kind) {
    let mut p = OvsPeer::new(&format!("{}-svc", kind.name), kind);
    let cap = p.capture();
    let mut backend = p
        .ovs
        .cmd(&[
            "/usr/bin/python3",
            "-c",
            &format!(
                "import socket\n\
                 s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)\n\
                 s.bind(('{VIP}', 9000)); print('ready', flush=True)\n\
                 for i in range({DATAGRAMS}):\n\
                 \x20   data, src = s.recvfrom(2000); print(data.decode(), src[0], flush=True)\n"
            ),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(backend.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    let out = ns_exec(
        &p.ns_client,
        &[
            "/usr/bin/python3",
            "-c",
            &format!(
                "import socket, time\n\
                 s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
                 for i in range({DATAGRAMS}):\n\
                 \x20   s.sendto(b'to the backend %d' % i, ('{VIP}', 9000)); time.sleep(0.01)\n"
            ),
        ],
    );
    must(out, "client");
    let got: Vec<String> = lines.map(Result::unwrap).collect();
    let st = backend.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut backend.stderr.take().unwrap(), &mut err).unwrap();
    let wire = cap.stop();
    let m = p.stop_fastpathd();
    wire.assert_all_in_tunnel(kind);
    assert_eq!(
        wire.fp_gre(|f| f.inner("udp.dstport") == "9000" && f.f("udp.checksum.status").ends_with('1')),
        DATAGRAMS,
        "the service's datagrams in GRE, inner UDP checksums good; on the wire:\n{}",
        wire.dump()
    );
    let want: Vec<String> = (0..DATAGRAMS)
        .map(|i| format!("to the backend {i} {CLIENT_UNDERLAY}"))
        .collect();
    assert_eq!(got, want, "OVS decapsulated and its stack delivered every one: {err}");
    assert!(st.success(), "backend: {err}");
    assert_eq!(tunnel_counter(&m, "fastpath_gre_encap_total"), DATAGRAMS as f64);
}

/// (d) A 3028-byte ping from the OVS side: its stack fragments it (br-int's MTU is 1400), OVS
/// puts each fragment in GRE; fastpathd reassembles the inner datagram and answers; the answer
/// must come back through the tunnel (in inner fragments: OVS's user-space datapath does not
/// reassemble outer ones) and reach the pinger.
fn fragmented_ping(kind: Kind) {
    fragmented_ping_on(kind, FarEnd::Ovs)
}

fn fragmented_ping_on(kind: Kind, far: FarEnd) {
    let mut p = OvsPeer::with(&format!("{}-frag", kind.name), kind, far);
    let cap = p.capture();
    let out = p.exec_ovs(&[
        "ping", "-c", "2", "-i", "0.2", "-W", "2", "-s", "3000", "-I", OVS_INNER, FP_INNER,
    ]);
    let wire = cap.stop();
    let m = p.stop_fastpathd();
    assert_eq!(
        wire.ovs_gre(|f| tshark_bool(f.inner("ip.flags.mf"))),
        4,
        "each request went through the tunnel in 3 inner fragments (2 with MF)"
    );
    wire.assert_all_in_tunnel(kind);
    assert!(
        wire.fp_gre(|f| f.inner("icmp.type") == "0") == 2,
        "both replies in GRE (tshark reassembles them)"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("2 received"),
        "ping -s 3000"
    );
    assert_eq!(m["fastpath_reasm_completed_total{family=\"ipv4\"}"], 2.0);
    assert_eq!(tunnel_counter(&m, "fastpath_gre_decap_total"), 6.0);
    assert!(tunnel_counter(&m, "fastpath_gre_encap_total") >= 2.0);
}

// ---- plain GRE (RFC 2784, no options) ----

#[test]
fn plain_ping_and_port_unreachable_through_ovs() {
    if missing(NEEDS_OVS) {
        return;
    }
    ping_and_port_unreachable(PLAIN)
}

#[test]
fn plain_udp_echo_through_ovs() {
    if missing(NEEDS_OVS) {
        return;
    }
    udp_echo(PLAIN)
}

#[test]
fn plain_tunnel_service_to_ovs() {
    tunnel_service(PLAIN)
}

#[test]
fn plain_fragmented_ping_through_ovs() {
    if missing(NEEDS_OVS) {
        return;
    }
    fragmented_ping(PLAIN)
}

// ---- keyed (RFC 2890 key 42) ----

#[test]
fn keyed_ping_and_port_unreachable_through_ovs() {
    if missing(NEEDS_OVS) {
        return;
    }
    ping_and_port_unreachable(KEYED)
}

#[test]
fn keyed_udp_echo_through_ovs() {
    if missing(NEEDS_OVS) {
        return;
    }
    udp_echo(KEYED)
}

#[test]
fn keyed_tunnel_service_to_ovs() {
    tunnel_service(KEYED)
}

#[test]
fn keyed_fragmented_ping_through_ovs() {
    if missing(NEEDS_OVS) {
        return;
    }
    fragmented_ping(KEYED)
}

// ---- checksummed (RFC 2784 checksum, both ends require it) ----

#[test]
fn checksummed_ping_and_port_unreachable_through_ovs() {
    if missing(NEEDS_OVS) {
        return;
    }
    ping_and_port_unreachable(CHECKSUMMED)
}

#[test]
fn checksummed_udp_echo_through_ovs() {
    if missing(NEEDS_OVS) {
        return;
    }
    udp_echo(CHECKSUMMED)
}

#[test]
fn checksummed_tunnel_service_to_ovs() {
    tunnel_service(CHECKSUMMED)
}

#[test]
fn checksummed_fragmented_ping_through_ovs() {
    if missing(NEEDS_OVS) {
        return;
    }
    fragmented_ping(CHECKSUMMED)
}

// ---- sequenced (RFC 2890 sequence numbers: OVS numbers what it sends, skips them on receive) ----

#[test]
fn sequenced_ping_and_port_unreachable_through_ovs() {
    if missing(NEEDS_OVS) {
        return;
    }
    ping_and_port_unreachable(SEQUENCED)
}

#[test]
fn sequenced_udp_echo_through_ovs() {
    if missing(NEEDS_OVS) {
        return;
    }
    udp_echo(SEQUENCED)
}

#[test]
fn sequenced_tunnel_service_to_ovs() {
    tunnel_service(SEQUENCED)
}

#[test]
fn sequenced_fragmented_ping_through_ovs() {
    if missing(NEEDS_OVS) {
        return;
    }
    fragmented_ping(SEQUENCED)
}

// ---- sequenced + checksummed + keyed ----

/// fastpathd's numbered, checksummed packets are right, and OVS takes them.
#[test]
fn sequenced_checksummed_tunnel_service_to_ovs() {
    tunnel_service(SEQUENCED_CHECKSUMMED)
}

/// A ping from OVS over a keyed, sequenced, checksummed tunnel: OVS numbers its packets from 0,
/// and only the first has a right checksum (see [`sequenced_checksummed_ovs_packets_carry_a_wrong_checksum_and_are_refused`]).
fn seqcsum_ping(name: &str) -> (Wire, BTreeMap<String, f64>, String) {
    let mut p = OvsPeer::new(name, SEQUENCED_CHECKSUMMED);
    let cap = p.capture();
    let out = p.exec_ovs(&["ping", "-c", "3", "-i", "0.2", "-W", "1", "-I", OVS_INNER, FP_INNER]);
    let wire = cap.stop();
    let m = p.stop_fastpathd();
    (wire, m, String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Open vSwitch 3.1 computes the GRE checksum of a packet with both `csum` and `seq` before it
/// writes the sequence number (netdev-native-tnl.c, `netdev_gre_push_header`), so the checksum
/// is wrong for every packet but the one numbered 0. What fastpathd does with that: it refuses
/// each wrongly checksummed packet (`gre_bad_checksum`, no answer) and answers the first. The
/// checksums OVS wrote are shown to be those of the same packets with a zero sequence number.
#[test]
fn sequenced_checksummed_ovs_packets_carry_a_wrong_checksum_and_are_refused() {
    let (wire, m, ping) = seqcsum_ping("seqcsum-refused");
    let from_ovs: Vec<&Frame> = wire
        .frames
        .iter()
        .filter(|f| f.sent_by_ovs() && f.is_gre() && f.inner("icmp.type") == "8")
        .collect();
    assert_eq!(from_ovs.len(), PINGS);
    for (n, f) in from_ovs.iter().enumerate() {
        assert_eq!(f.f("gre.key"), format!("0x{KEY:08x}"), "{}", f.line());
        assert_eq!(f.f("gre.sequence_number"), n.to_string(), "{}", f.line());
        let right = if n == 0 { "1" } else { "0" };
        assert_eq!(f.f("gre.checksum.status"), right, "OVS's checksum: {}", f.line());
    }
    let gre = gre_payloads(&wire.pcap, PHY_MAC);
    assert_eq!(gre.len(), PINGS);
    for g in &gre {
        let mut zeroed = g.clone();
        // Flags and protocol (4 bytes), checksum and reserved (4), key (4), sequence number.
        zeroed[12..16].fill(0);
        assert_eq!(
            internet_checksum(&zeroed),
            0,
            "right for a zero sequence number: {g:02x?}"
        );
    }
    assert_eq!(outcome(&m, "gre_bad_checksum"), PINGS as u64 - 1);
    assert_eq!(outcome(&m, "echo_reply"), 1);
    assert_eq!(tunnel_counter(&m, "fastpath_gre_decap_total"), 1.0);
    // One answer on the wire, in or out of the tunnel (its shape is the test below).
    let answers = wire.fastpathd_frames().filter(|f| f.inner("icmp.type") == "0").count();
    assert_eq!(answers, 1, "nothing answers a refused packet");
    assert!(ping.contains("1 received"), "{ping}");
}

/// The one answer fastpathd makes on that tunnel (to OVS's packet 0) must go back through it.
#[test]
fn sequenced_checksummed_ping_answer_through_ovs() {
    let (wire, m, _) = seqcsum_ping("seqcsum-answer");
    wire.assert_all_in_tunnel(SEQUENCED_CHECKSUMMED);
    assert_eq!(wire.fp_gre(|f| f.inner("icmp.type") == "0"), 1, "the reply in GRE");
    assert_eq!(tunnel_counter(&m, "fastpath_gre_encap_total"), 1.0);
}

/// The GRE header and payload of every IPv4/GRE frame from `src_mac` in a pcap (raw bytes).
fn gre_payloads(b: &[u8], src_mac: &str) -> Vec<Vec<u8>> {
    let mac: Vec<u8> = src_mac.split(':').map(|h| u8::from_str_radix(h, 16).unwrap()).collect();
    let mut out = vec![];
    let mut i = 24;
    while i + 16 <= b.len() {
        let len = u32::from_le_bytes(b[i + 8..i + 12].try_into().unwrap()) as usize;
        let f = &b[i + 16..i + 16 + len];
        i += 16 + len;
        if f.len() > 34 && f[6..12] == mac[..] && f[12..14] == [0x08, 0x00] && f[23] == 47 {
            let ihl = (f[14] & 0x0f) as usize * 4;
            let tot = u16::from_be_bytes([f[16], f[17]]) as usize;
            out.push(f[14 + ihl..14 + tot].to_vec());
        }
    }
    out
}

/// RFC 1071 over `b` (0 when a checksum inside it is right).
fn internet_checksum(b: &[u8]) -> u16 {
    let mut s: u32 = b
        .chunks(2)
        .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32)
        .sum();
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

// ---- OVS-DPDK over vhost-user, fastpathd on net_virtio_user ----

/// Keyed and checksummed, the flavour a DPDK-to-DPDK tunnel to a backend would use.
const KEYED_CHECKSUMMED: Kind = Kind {
    name: "dpdk",
    key: Some(KEY),
    csum: true,
    seq: false,
};

/// OVS-DPDK: its DPDK build of ovs-vswitchd, and hugepages for both DPDK processes.
const NEEDS_OVS_DPDK: &[&str] = &[
    "ovs-vswitchd",
    "ovsdb-server",
    "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk",
    "tshark",
    "hugepages",
];

#[test]
fn ovs_dpdk_ping_and_port_unreachable_over_vhost_user() {
    if missing(NEEDS_OVS_DPDK) {
        return;
    }
    ping_and_port_unreachable_on(KEYED_CHECKSUMMED, FarEnd::OvsDpdk)
}

#[test]
fn ovs_dpdk_udp_echo_over_vhost_user() {
    if missing(NEEDS_OVS_DPDK) {
        return;
    }
    udp_echo_on(KEYED_CHECKSUMMED, FarEnd::OvsDpdk)
}

#[test]
fn ovs_dpdk_fragmented_ping_over_vhost_user() {
    if missing(NEEDS_OVS_DPDK) {
        return;
    }
    fragmented_ping_on(KEYED_CHECKSUMMED, FarEnd::OvsDpdk)
}
