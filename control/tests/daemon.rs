//! The real fastpathd over DPDK vdevs: replay, clean stop under load, exit codes.

mod common;

use common::*;
use std::time::{Duration, Instant};

#[test]
fn replays_arp_and_junk_and_answers_arp() {
    if missing(&["tshark"]) {
        return;
    }
    let s = Scratch::new("replay");
    let input = repo().join("configs/captures/demo.pcap");
    let (out0, out1) = (s.path("out-q0.pcap"), s.path("out-q1.pcap"));
    let vdev = format!(
        "--vdev=net_pcap0,rx_pcap={},tx_pcap={},tx_pcap={}",
        input.display(),
        out0.display(),
        out1.display()
    );
    let cfg = s.write(
        "c.toml",
        &format!(
            "[dpdk]\neal_args = {}\nmbufs = 16383\n\n[[port]]\ndevice = \"net_pcap0\"\ntx_queues = 2\n\
             ipv4 = [\"192.0.2.1\"]\nipv6 = [\"2001:db8::1\"]\nmac = \"02:00:00:00:00:01\"\n\n\
             [lcores]\nrx = [0]\nworkers = [1]\nidle_sleep_us = 200\n{METRICS_ANY_PORT}\n\
             [[service]]\nname = \"echo\"\nports = [7]\nsockets = 2\nsocket_capacity = 64\naction = \"echo\"\n",
            eal_args("replay", &[vdev])
        ),
    );
    let m = run_to_idle(&s, &cfg, 300);
    assert_eq!(assert_conservation(&m), 22, "demo.pcap holds 22 frames");
    // 22 frames, then 300 ms of nothing before the exit: the RX lcore was idle nearly all of
    // its life, and its idle cycles (its sleeps included) say so.
    let busy = m["fastpath_lcore_cycles_total{lcore=\"0\",state=\"busy\"}"];
    let idle = m["fastpath_lcore_cycles_total{lcore=\"0\",state=\"idle\"}"];
    assert!(idle / m["fastpath_tsc_hz"] > 0.25, "idle {idle} cycles");
    assert!(busy < idle, "busy {busy}, idle {idle}");
    // Expected outcomes, one per frame of configs/captures/gen_demo.py.
    for (name, n) in [
        ("arp_reply", 6),
        ("arp_ignored", 3),
        ("malformed", 5),
        ("not_for_us", 1),
        ("unhandled", 1),
        ("delivered", 2),
        ("echo_reply", 2),
        ("ndp_reply", 1),
        ("not_local", 1),
    ] {
        assert_eq!(outcome(&m, name), n, "outcome {name}");
    }
    assert_eq!(m["fastpath_tx_packets_total{port=\"net_pcap0\",queue=\"0\"}"], 9.0);

    // The replies, read back by tshark from the capture the closed port completed.
    let replies = tshark_fields(
        &out0,
        "arp",
        &[
            "eth.src",
            "eth.dst",
            "arp.opcode",
            "arp.src.hw_mac",
            "arp.src.proto_ipv4",
            "arp.dst.hw_mac",
            "arp.dst.proto_ipv4",
            "vlan.id",
        ],
    );
    let expect = [
        ("02:00:00:00:01:01", "192.0.2.11", ""),
        ("02:00:00:00:01:02", "192.0.2.12", ""),
        ("02:00:00:00:01:03", "192.0.2.13", ""),
        ("02:00:00:00:01:04", "192.0.2.14", ""),
        ("02:00:00:00:01:05", "0.0.0.0", ""),
        ("02:00:00:00:01:06", "192.0.2.16", "100"),
    ];
    assert_eq!(replies.len(), expect.len(), "{replies:?}");
    for (r, (peer_mac, peer_ip, vlan)) in replies.iter().zip(expect) {
        let want = [
            "02:00:00:00:00:01",
            peer_mac,
            "2",
            "02:00:00:00:00:01",
            "192.0.2.1",
            peer_mac,
            peer_ip,
            vlan,
        ];
        assert_eq!(r, &want, "reply fields");
    }
    // Echo and neighbor discovery answers, with every checksum validated by tshark.
    let icmp = tshark_checked(
        &out0,
        "icmp || icmpv6",
        &[
            "eth.src",
            "eth.dst",
            "ip.src",
            "ip.dst",
            "ip.checksum.status",
            "icmp.type",
            "icmp.checksum.status",
            "icmp.ident",
            "ipv6.src",
            "ipv6.dst",
            "ipv6.hlim",
            "icmpv6.type",
            "icmpv6.checksum.status",
            "icmpv6.nd.na.flag.s",
            "icmpv6.opt.linkaddr",
            "data.data",
        ],
    );
    let peer = "02:00:00:00:01:07";
    let me = "02:00:00:00:00:01";
    assert_eq!(icmp.len(), 3, "{icmp:?}");
    let v4 = &icmp[0];
    assert_eq!(
        &v4[..8],
        [me, peer, "192.0.2.1", "192.0.2.17", "1", "0", "1", "119"],
        "ICMP echo reply"
    );
    assert_eq!(v4[15], hex(b"ping-v4-payload"), "payload echoed");
    let v6 = &icmp[1];
    assert_eq!(
        &v6[8..13],
        ["2001:db8::1", "2001:db8::17", "64", "129", "1"],
        "ICMPv6 echo reply: {v6:?}"
    );
    assert_eq!(v6[15], hex(b"ping-v6-payload"));
    let na = &icmp[2];
    assert_eq!(&na[..2], [me, peer]);
    assert_eq!(
        &na[8..15],
        ["2001:db8::1", "2001:db8::17", "255", "136", "1", "1", me],
        "NA: {na:?}"
    );
    // The echo service's replies leave on the worker's own TX queue (queue 1).
    let echoes = tshark_checked(
        &out1,
        "",
        &[
            "eth.src",
            "eth.dst",
            "ip.src",
            "ip.dst",
            "ip.checksum.status",
            "ipv6.src",
            "ipv6.dst",
            "udp.srcport",
            "udp.dstport",
            "udp.checksum.status",
            "udp.length",
        ],
    );
    // Two sockets drained by one worker: the order of the two replies depends on timing.
    let mut echoes = echoes;
    echoes.sort_by_key(|r| r[5].clone());
    assert_eq!(
        echoes,
        vec![
            vec![
                me,
                peer,
                "192.0.2.1",
                "192.0.2.17",
                "1",
                "",
                "",
                "7",
                "40000",
                "1",
                "13"
            ],
            vec![
                me,
                peer,
                "",
                "",
                "",
                "2001:db8::1",
                "2001:db8::17",
                "7",
                "40000",
                "1",
                "8"
            ],
        ],
        "UDP echo replies"
    );
    assert_eq!(
        m["fastpath_socket_processed_total{service=\"echo\",socket=\"0\",result=\"echoed\"}"]
            + m["fastpath_socket_processed_total{service=\"echo\",socket=\"1\",result=\"echoed\"}"],
        2.0
    );
}

fn null_config(s: &Scratch, name: &str) -> std::path::PathBuf {
    s.write(
        "c.toml",
        &format!(
            "[dpdk]\neal_args = {}\nmbufs = 16383\n\n[[port]]\ndevice = \"net_null0\"\ntx_queues = 1\n\
             ipv4 = [\"192.0.2.1\"]\n\n[lcores]\nrx = [0]\n{METRICS_ANY_PORT}",
            eal_args(name, &["--vdev=net_null0,size=64".to_string()])
        ),
    )
}

#[test]
fn sigterm_under_load_stops_cleanly_and_counts_every_packet() {
    let s = Scratch::new("sigterm");
    let cfg = null_config(&s, "sigterm");
    let dump = s.path("metrics.prom");
    // net_null receives zeroed 64-byte frames as fast as we poll: traffic never stops.
    let child = fastpathd()
        .args([
            "--config",
            cfg.to_str().unwrap(),
            "--metrics-dump",
            dump.to_str().unwrap(),
            "--stats-interval",
            "0.2",
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let t = Instant::now();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}");
    assert_eq!(out.status.code(), Some(0));
    assert!(t.elapsed() < Duration::from_secs(10), "stop took {:?}", t.elapsed());
    assert!(stderr.contains("stop requested by signal"));
    assert!(stderr.contains("net_null0: rx "), "the live view shows per-port rates");
    let m = parse_metrics(&std::fs::read_to_string(&dump).unwrap());
    let rx = assert_conservation(&m);
    assert!(rx > 1000, "traffic flowed: {rx}");
    // Zeroed frames are unicast to 00:00:00:00:00:00, not us.
    assert_eq!(outcome(&m, "not_for_us"), rx);
    // The lcore's cycles by state add up to its ~1.5 s of life, nearly all busy (net_null never
    // runs dry).
    let hz = m["fastpath_tsc_hz"];
    let busy = m["fastpath_lcore_cycles_total{lcore=\"0\",state=\"busy\"}"];
    let idle = m["fastpath_lcore_cycles_total{lcore=\"0\",state=\"idle\"}"];
    let secs = (busy + idle) / hz;
    assert!(
        (1.0..4.0).contains(&secs),
        "busy {busy} + idle {idle} cycles = {secs} s"
    );
    assert!(busy / (busy + idle) > 0.9, "busy {busy}, idle {idle}");
}

#[test]
fn check_config_accepts_good_and_rejects_bad_with_key_and_line() {
    let s = Scratch::new("check");
    let good = null_config(&s, "check");
    let out = run(&["--config", good.to_str().unwrap(), "--check-config"]);
    assert_eq!(out.status.code(), Some(0));

    let text = std::fs::read_to_string(&good)
        .unwrap()
        .replace("tx_queues = 1", "tx_queues = 0")
        .replace("ipv4 = [\"192.0.2.1\"]", "ipv4 = [\"192.0.2.1\", \"not-an-ip\"]");
    let bad = s.write("bad.toml", &text);
    let out = run(&["--config", bad.to_str().unwrap(), "--check-config"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let file = bad.display().to_string();
    assert!(
        err.contains(&format!("{file}:7: port[0].tx_queues: expected 1 to 64 TX queues")),
        "{err}"
    );
    assert!(
        err.contains(&format!("{file}:8: port[0].ipv4[1]: \"not-an-ip\"")),
        "{err}"
    );

    // A bad config never starts the data plane, with or without --check-config.
    let out = run(&["--config", bad.to_str().unwrap(), "--exit-when-idle", "100"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("running"));

    let unknown = s.write(
        "unknown.toml",
        &std::fs::read_to_string(&good)
            .unwrap()
            .replace("[lcores]", "[lcores]\nrx_lcores = [0]"),
    );
    let out = run(&["--config", unknown.to_str().unwrap(), "--check-config"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(":11: lcores") && err.contains("unknown field `rx_lcores`"),
        "{err}"
    );
}

#[test]
fn usage_and_dpdk_failures_have_their_exit_codes() {
    let out = run(&["--config"]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["--bogus"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Usage:") && err.contains("unexpected argument '--bogus'"),
        "{err}"
    );
    // Malformed, repeated or swallowed options are usage errors too.
    for args in [
        &["--config", "c.toml", "--check-config=no"][..],
        &["--config", "--check-config"],
        &["--config", "a.toml", "--config", "b.toml"],
        &["--config", "c.toml", "--log-level", "loud"],
    ] {
        assert_eq!(run(args).status.code(), Some(2), "{args:?}");
    }

    // A device that DPDK did not probe: the port cannot be found.
    let s = Scratch::new("nodev");
    let cfg = s.write(
        "c.toml",
        &std::fs::read_to_string(null_config(&s, "nodev"))
            .unwrap()
            .replace("device = \"net_null0\"", "device = \"net_null7\""),
    );
    // It is refused before the EAL starts, with key and line (exit 1), by --check-config too.
    let out = run(&["--config", cfg.to_str().unwrap(), "--exit-when-idle", "100"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("port[0].device") && err.contains("no --vdev=net_null7"),
        "{err}"
    );
    let check = run(&["--config", cfg.to_str().unwrap(), "--check-config"]);
    assert_eq!(check.status.code(), Some(1));
    assert!(!err.contains("running"), "{err}");

    // A virtio-user port whose vhost-user peer is not there: it never comes up, so neither
    // does fastpathd (exit 3, never `running`).
    let cfg = s.write(
        "virtio.toml",
        &std::fs::read_to_string(s.path("c.toml"))
            .unwrap()
            .replace("device = \"net_null7\"", "device = \"net_virtio_user0\"")
            .replace(
                "\"--no-pci\"",
                &format!(
                    "\"--no-pci\", \"--vdev=net_virtio_user0,path={}\"",
                    s.path("nobody.sock").display()
                ),
            ),
    );
    let out = run(&["--config", cfg.to_str().unwrap(), "--exit-when-idle", "100"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("net_virtio_user0") && !err.contains("running"), "{err}");

    // A port DPDK probes and sets up but cannot start (rte_eth_dev_start fails: a memif client
    // with no server on its socket): exit 3, never `running`, and the message names the port.
    let cfg = s.write(
        "memif.toml",
        &std::fs::read_to_string(s.path("c.toml"))
            .unwrap()
            .replace("device = \"net_null7\"", "device = \"net_memif0\"")
            .replace(
                "\"--no-pci\"",
                &format!(
                    "\"--no-pci\", \"--vdev=net_memif0,role=client,socket={}\"",
                    s.path("nobody-memif.sock").display()
                ),
            ),
    );
    let out = run(&["--config", cfg.to_str().unwrap(), "--exit-when-idle", "100"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("rte_eth_dev_start(net_memif0)") && err.contains("did not start") && !err.contains("running"),
        "{err}"
    );

    // EAL itself refuses its arguments.
    let cfg = s.write(
        "eal.toml",
        &std::fs::read_to_string(s.path("c.toml"))
            .unwrap()
            .replace("net_null7", "net_null0")
            .replace("\"--no-pci\"", "\"--no-such-eal-flag\""),
    );
    let out = run(&["--config", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("rte_eal_init"));
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
