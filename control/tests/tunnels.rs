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

/// Issue 8's MTU rule on a 1500-byte path with 28 bytes of tunnel overhead: DF or IPv6 inside
/// gets ICMP Fragmentation Needed / Packet Too Big with MTU 1472 back to its sender; IPv4 without
/// DF is encapsulated and sent in outer fragments that tshark reassembles.
#[test]
fn packets_too_big_for_the_tunnel() {
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

/// Issue 34: a `tunnel` service's backend is chosen by Maglev. Two nodes with the same tunnels
/// (listed in another order) send every flow to the same backend; draining one moves its flows
/// and no other.
#[test]
fn maglev_choice_agrees_across_nodes_and_a_drain_moves_only_its_flows() {
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
