//! `fastpathctl` against the real daemon over DPDK vdevs: every subcommand's JSON checked
//! against the metrics and against what the data plane did with a replayed capture, reloads
//! (a dry run moves nothing, a reload moves the generation), one daemon per socket, a stale
//! socket replaced, and 64 hostile clients that leave the metrics, reloads, the data path and
//! the socket itself working.

mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn ctl(socket: &Path, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_fastpathctl"))
        .arg("--socket")
        .arg(socket)
        .args(args)
        .output()
        .expect("run fastpathctl");
    eprintln!(
        "--- fastpathctl {args:?} exit {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `fastpathctl ARGS --json`, which must exit `code`: the parsed answer.
fn json(socket: &Path, args: &[&str], code: i32) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    let out = ctl(socket, &a);
    assert_eq!(out.status.code(), Some(code), "fastpathctl {args:?}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e})"))
}

const FLOW_A: ([u8; 4], u16) = ([198, 51, 100, 7], 5353);
const FLOW_B: ([u8; 4], u16) = ([203, 0, 113, 9], 40001);
const N: usize = 20;

/// A daemon over a replayed capture (net_pcap0: 20 packets of one flow to the 4-socket sink
/// `dns` on 53, 20 of one flow to the tunnel service `lb` on 9000 over three tunnels, one to
/// closed port 9) and endless zeroed frames (net_null0, for rates); `[control] socket` in the
/// scratch directory, no file watch (reloads come when the test asks).
fn config(s: &Scratch, name: &str, socket: &str, sockets: usize, tx_queues: u16) -> String {
    let mut frames = Vec::new();
    for i in 0..N {
        frames.push(udp_frame(
            FLOW_A.0,
            [192, 0, 2, 1],
            FLOW_A.1,
            53,
            format!("a{i}").as_bytes(),
        ));
        frames.push(udp_frame(
            FLOW_B.0,
            [192, 0, 2, 1],
            FLOW_B.1,
            9000,
            format!("b{i}").as_bytes(),
        ));
    }
    frames.push(udp_frame(FLOW_A.0, [192, 0, 2, 1], FLOW_A.1, 9, b"closed"));
    let cap = s.write_bytes("in.pcap", &pcap(&frames));
    config_on(name, socket, sockets, tx_queues, &cap, true)
}

/// [`config`]'s daemon reading `rx_pcap`, with or without the net_null0 port.
fn config_on(name: &str, socket: &str, sockets: usize, tx_queues: u16, rx_pcap: &Path, null_port: bool) -> String {
    let mut vdevs = vec![format!(
        "--vdev=net_pcap0,rx_pcap={},tx_pcap=/dev/null,tx_pcap=/dev/null",
        rx_pcap.display()
    )];
    if null_port {
        vdevs.push("--vdev=net_null0,size=64".to_string());
    }
    let null_port = if null_port {
        "[[port]]\ndevice = \"net_null0\"\ntx_queues = 2\nipv4 = [\"192.0.2.2\"]\n\n"
    } else {
        ""
    };
    let tunnels: String = (0..3)
        .map(|i| {
            format!(
                "\n[[tunnel]]\nname = \"t{i}\"\nlocal = \"192.0.2.1\"\nremote = \"203.0.113.{}\"\nport = \"net_pcap0\"\n\
                 next_hop_mac = \"02:00:00:00:00:fe\"\nweight = {}\n",
                10 + i,
                1 + i
            )
        })
        .collect();
    format!(
        "[dpdk]\neal_args = {}\nmbufs = 16383\n\n[[port]]\ndevice = \"net_pcap0\"\ntx_queues = {tx_queues}\n\
         ipv4 = [\"192.0.2.1\"]\nipv6 = [\"2001:db8::1\"]\nmac = \"02:00:00:00:00:01\"\n\n\
         {null_port}[lcores]\nrx = [0]\nworkers = [1]\nidle_sleep_us = 100\n\n\
         [control]\nsocket = \"{socket}\"\nwatch = false\n\n[metrics]\nlisten = \"127.0.0.1:0\"\ncache_ms = 0\n\n\
         [reassembly]\nbuffers = 32\n\n\
         [[service]]\nname = \"dns\"\nports = [53]\nsockets = {sockets}\naction = \"sink\"\n\n\
         [[service]]\nname = \"lb\"\nports = [9000]\nsockets = 2\naction = \"tunnel\"\ntunnels = [\"t0\", \"t1\", \"t2\"]\n{tunnels}",
        eal_args(name, &vdevs)
    )
}

fn metric(m: &BTreeMap<String, f64>, series: &str) -> f64 {
    *m.get(series).unwrap_or_else(|| panic!("no {series}"))
}

fn socket_path(s: &Scratch) -> PathBuf {
    s.path("control.sock")
}

#[test]
fn every_subcommand_answers_what_the_metrics_and_the_data_plane_say_and_reloads_are_reported() {
    let s = Scratch::new("ctl-all");
    let cfg = s.write("c.toml", &config(&s, "ctl-all", "control.sock", 4, 2));
    let d = Daemon::start(&s, &["--config", cfg.to_str().unwrap()]);
    let sock = socket_path(&s);
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&sock).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o660, "the socket's mode");
    // The capture replayed and every queued packet taken by the workers.
    let pcap_rx = "fastpath_rx_packets_total{port=\"net_pcap0\",queue=\"0\"}";
    wait_for(20, "the capture replayed and drained", || {
        let m = d.scrape();
        m.get(pcap_rx) == Some(&(2.0 * N as f64 + 1.0))
            && family_sum(&m, "fastpath_socket_queue_depth") == 0.0
            && family_sum(&m, "fastpath_gre_encap_total") == N as f64
    });
    let m = d.scrape();

    // status
    let st = json(&sock, &["status"], 0);
    assert_eq!(st["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(st["config"]["generation"], 1);
    assert_eq!(st["config"]["path"], cfg.display().to_string());
    assert_eq!(st["health"]["ok"], true, "{st}");
    assert!(st["uptime_seconds"].as_f64().unwrap() > 0.0);
    let ports = st["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 2);
    assert_eq!(
        (ports[0]["device"].as_str(), ports[0]["driver"].as_str()),
        (Some("net_pcap0"), Some("net_pcap"))
    );
    assert_eq!(ports[0]["mac"], "02:00:00:00:00:01");
    assert_eq!(ports[0]["ipv4"][0], "192.0.2.1");
    assert_eq!(ports[0]["rx_packets"], 2 * N as u64 + 1);
    assert_eq!(ports[1]["device"], "net_null0");
    let lcores = st["lcores"].as_array().unwrap();
    assert_eq!(
        (lcores[0]["role"].as_str(), lcores[1]["role"].as_str()),
        (Some("rx"), Some("worker"))
    );
    assert_eq!(lcores[0]["rx_queues"].as_array().unwrap().len(), 2, "{st}");
    // net_null never stops: the RX lcore is busy most of the time.
    assert!(lcores[0]["busy_share"].as_f64().unwrap() > 0.05, "{st}");
    let human = ctl(&sock, &["status"]);
    assert!(human.status.success() && String::from_utf8_lossy(&human.stdout).contains("net_pcap0"));

    // show sockets: what the metrics say, socket by socket.
    let socks = json(&sock, &["show", "sockets"], 0);
    let list = socks["sockets"].as_array().unwrap();
    assert_eq!(list.len(), 6, "4 dns + 2 lb: {socks}");
    let mut fed = Vec::new();
    for so in list {
        let lb = format!(
            "{{service=\"{}\",socket=\"{}\"}}",
            so["service"].as_str().unwrap(),
            so["socket"]
        );
        for (field, family) in [
            ("delivered", "fastpath_socket_delivered_total"),
            ("full", "fastpath_socket_full_total"),
            ("depth", "fastpath_socket_queue_depth"),
            ("capacity", "fastpath_socket_capacity"),
            ("rollover", "fastpath_rollover_total"),
        ] {
            assert_eq!(
                so[field].as_f64(),
                Some(metric(&m, &format!("{family}{lb}"))),
                "{field} of {lb}"
            );
        }
        if so["delivered"].as_u64().unwrap() > 0 {
            fed.push((
                so["service"].as_str().unwrap().to_string(),
                so["socket"].as_u64().unwrap(),
            ));
        }
    }
    // One flow each: one socket of each service got all of it.
    assert_eq!(fed.len(), 2, "{fed:?}");

    // flow: the socket the metrics saw flow A go to, the backend they saw flow B go to.
    let a = json(&sock, &["flow", "udp", "198.51.100.7:5353", "192.0.2.1:53"], 0);
    assert_eq!(a["decision"], "service");
    assert_eq!(a["detail"]["service"], "dns");
    let a_socket = a["detail"]["socket"]["socket"].as_u64().unwrap();
    assert!(
        fed.contains(&("dns".into(), a_socket)),
        "flow names dns #{a_socket}, the metrics {fed:?}"
    );
    assert_eq!(
        metric(
            &m,
            &format!("fastpath_socket_delivered_total{{service=\"dns\",socket=\"{a_socket}\"}}")
        ),
        N as f64
    );
    assert_eq!(a["port"], "net_pcap0");
    assert_eq!((a["rx_queue"].as_u64(), a["rx_lcore"].as_u64()), (Some(0), Some(0)));
    let b = json(&sock, &["flow", "udp", "203.0.113.9:40001", "192.0.2.1:9000"], 0);
    let backend = b["detail"]["backend"].as_str().unwrap().to_string();
    assert_eq!(
        metric(&m, &format!("fastpath_gre_encap_total{{tunnel=\"{backend}\"}}")),
        N as f64,
        "flow names {backend}: {b}"
    );
    let b_socket = b["detail"]["socket"]["socket"].as_u64().unwrap();
    assert!(fed.contains(&("lb".into(), b_socket)), "{fed:?}");
    // Closed ports, another address, IPv6, bad input.
    let closed = json(&sock, &["flow", "udp", "198.51.100.7:5353", "192.0.2.1:9"], 0);
    assert_eq!(
        (closed["decision"].as_str(), closed["detail"]["rate_limited"].as_bool()),
        (Some("icmp_error"), Some(true))
    );
    assert_eq!(metric(&m, "fastpath_packets_total{outcome=\"icmp_error\"}"), 1.0);
    assert_eq!(
        json(&sock, &["flow", "tcp", "198.51.100.7:40000", "192.0.2.1:22"], 0)["decision"],
        "tcp_reset"
    );
    assert_eq!(
        json(&sock, &["flow", "udp", "198.51.100.7", "192.0.2.99:53"], 0)["decision"],
        "not_local"
    );
    assert_eq!(
        json(&sock, &["flow", "udp", "127.0.0.1:1", "192.0.2.1:53"], 0)["decision"],
        "martian"
    );
    assert_eq!(
        json(&sock, &["flow", "udp", "[2001:db8:1::7]:5353", "[2001:db8::1]:53"], 0)["detail"]["service"],
        "dns"
    );
    let bad = json(&sock, &["flow", "udp", "198.51.100.7", "[2001:db8::1]:53"], 1);
    assert_eq!(bad["ok"], false);
    assert!(bad["error"].as_str().unwrap().contains("one family"), "{bad}");
    let human = String::from_utf8(ctl(&sock, &["flow", "udp", "198.51.100.7:5353", "192.0.2.1:53"]).stdout).unwrap();
    assert!(human.contains(&format!("socket dns #{a_socket}")), "{human}");

    // show services, tunnels, limits, reassembly, kernel.
    let svcs = json(&sock, &["show", "services"], 0);
    let dns = svcs["services"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "dns")
        .unwrap()
        .clone();
    assert_eq!(
        (
            dns["sockets"].as_u64(),
            dns["delivered"].as_u64(),
            dns["fanout"].as_str()
        ),
        (Some(4), Some(N as u64), Some("hash"))
    );
    assert_eq!(dns["ports"], serde_json::json!([53]));
    let tun = json(&sock, &["show", "tunnels"], 0);
    for t in tun["tunnels"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        assert_eq!(
            t["encap"].as_f64(),
            Some(metric(&m, &format!("fastpath_gre_encap_total{{tunnel=\"{name}\"}}")))
        );
        assert_eq!(t["weight"].as_u64(), Some(1 + name[1..].parse::<u64>().unwrap()));
        assert_eq!(t["drain"], false);
        assert_eq!(t["services"], serde_json::json!(["lb"]));
    }
    let lim = json(&sock, &["show", "limits"], 0);
    assert_eq!(
        (lim["icmp"]["ratemask"].as_str(), lim["icmp"]["msgs_per_sec"].as_u64()),
        (Some("0x1818"), Some(1000))
    );
    assert_eq!(lim["icmp"]["sent"]["ipv4"]["port_unreachable"], 1);
    assert_eq!(
        lim["icmp"]["sent"]["ipv4"]["port_unreachable"].as_f64(),
        Some(metric(
            &m,
            "fastpath_icmp_sent_total{family=\"ipv4\",type=\"port_unreachable\"}"
        ))
    );
    assert_eq!(lim["tcp_reset"]["enabled"], true);
    let re = json(&sock, &["show", "reassembly"], 0);
    assert_eq!(
        (
            re["policy"].as_str(),
            re["buffers"].as_u64(),
            re["memory_bytes"].as_u64()
        ),
        (Some("probation"), Some(32), Some(0))
    );
    assert_eq!(json(&sock, &["show", "kernel"], 0)["enabled"], false);
    for what in ["services", "sockets", "tunnels", "limits", "reassembly", "kernel"] {
        assert!(ctl(&sock, &["show", what]).status.success(), "show {what}");
    }

    // stats: rates over an interval, net_null's moving.
    let st = json(&sock, &["stats", "--interval", "0.3"], 0);
    assert!((0.25..2.0).contains(&st["interval_seconds"].as_f64().unwrap()), "{st}");
    let rx0 = &st["lcores"][0];
    assert!(rx0["rx_pps"].as_f64().unwrap() > 1000.0, "{st}");
    assert!(st["outcomes"]["not_for_us"].as_f64().unwrap() > 1000.0, "{st}");
    // Sampled cost: one poll in 64 of net_null's flood, all of one outcome.
    let cost = &rx0["cost"]["not_for_us"];
    assert!(cost["sampled"].as_f64().unwrap() > 0.0, "{st}");
    assert!(
        (1.0..100_000.0).contains(&cost["cycles_per_packet"].as_f64().unwrap()),
        "{st}"
    );
    assert!(st["queues"]
        .as_array()
        .unwrap()
        .iter()
        .any(|q| q["port"] == "net_null0" && q["direction"] == "rx"));
    assert!(String::from_utf8(ctl(&sock, &["stats", "--interval", "0.1"]).stdout)
        .unwrap()
        .contains("LCORE"));

    // reload --dry-run: a live change and a restart change listed with class and line; the
    // refusal as the reload logs it; nothing moves.
    std::fs::write(&cfg, config(&s, "ctl-all", "control.sock", 2, 3)).unwrap();
    let dry = json(&sock, &["reload", "--dry-run"], 1);
    let changes = dry["changes"].as_array().unwrap();
    let find = |k: &str| {
        changes
            .iter()
            .find(|c| c["key"] == k)
            .unwrap_or_else(|| panic!("{k} in {dry}"))
            .clone()
    };
    let (txq, socks) = (find("port[0].tx_queues"), find("service[0].sockets"));
    assert_eq!(
        (
            txq["reload"].as_str(),
            txq["old"].as_str(),
            txq["new"].as_str(),
            txq["line"].as_u64()
        ),
        (Some("restart"), Some("2"), Some("3"), Some(7))
    );
    assert_eq!(
        (socks["reload"].as_str(), socks["new"].as_str()),
        (Some("live"), Some("2"))
    );
    assert_eq!(dry["refused"][0]["key"], "port[0].tx_queues");
    assert!(
        dry["refused"][0]["message"]
            .as_str()
            .unwrap()
            .contains("only a restart applies it"),
        "{dry}"
    );
    assert_eq!(
        (
            dry["dry_run"].as_bool(),
            dry["applied"].as_bool(),
            dry["generation_after"].as_u64()
        ),
        (Some(true), Some(false), Some(1))
    );
    // Invalid: every error with key and line; nothing moves either.
    std::fs::write(&cfg, config(&s, "ctl-all", "control.sock", 99, 2)).unwrap();
    let dry = json(&sock, &["reload", "--dry-run"], 1);
    assert_eq!(dry["errors"][0]["key"], "service[0].sockets", "{dry}");
    // Only the live change left: the dry run would apply it, and does not.
    std::fs::write(&cfg, config(&s, "ctl-all", "control.sock", 2, 2)).unwrap();
    let dry = json(&sock, &["reload", "--dry-run"], 0);
    assert_eq!(dry["changes"].as_array().unwrap().len(), 1, "{dry}");
    assert_eq!(dry["generation_after"], 1);
    let human = String::from_utf8(ctl(&sock, &["reload", "--dry-run"]).stdout).unwrap();
    assert!(
        human.contains("service[0].sockets") && human.contains("live") && human.contains("dry run"),
        "{human}"
    );
    let m = d.scrape();
    assert_eq!(
        metric(&m, "fastpath_config_generation"),
        1.0,
        "a dry run publishes nothing"
    );
    assert_eq!(
        family_sum(&m, "fastpath_config_reloads_total"),
        0.0,
        "a dry run is no reload"
    );
    assert_eq!(json(&sock, &["status"], 0)["config"]["generation"], 1);

    // reload: applied as SIGHUP would, the generation moves, the new socket count shows.
    let r = json(&sock, &["reload"], 0);
    assert_eq!(
        (r["applied"].as_bool(), r["generation_after"].as_u64()),
        (Some(true), Some(2)),
        "{r}"
    );
    let m = d.scrape();
    assert_eq!(metric(&m, "fastpath_config_generation"), 2.0);
    assert_eq!(metric(&m, "fastpath_config_reloads_total{result=\"success\"}"), 1.0);
    assert_eq!(
        json(&sock, &["show", "sockets"], 0)["sockets"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
    // A refused reload is reported refused, exit 1, and counted as SIGHUP's would be.
    std::fs::write(&cfg, config(&s, "ctl-all", "control.sock", 2, 3)).unwrap();
    let r = json(&sock, &["reload"], 1);
    assert_eq!(
        (r["applied"].as_bool(), r["generation_after"].as_u64()),
        (Some(false), Some(2))
    );
    assert_eq!(
        metric(&d.scrape(), "fastpath_config_reloads_total{result=\"failure\"}"),
        1.0
    );
    assert!(
        d.log_text().contains("reload (fastpathctl reload) refused"),
        "{}",
        d.log_text()
    );
    let (code, _) = d.stop();
    assert_eq!(code, Some(0));
    assert!(!sock.exists(), "the socket file is removed at exit");
    // No daemon: one line naming the socket, exit 3.
    let out = ctl(&sock, &["status"]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&sock.display().to_string()) && err.lines().count() == 1,
        "{err}"
    );
}

/// A daemon on net_null with its socket at `socket`.
fn null_config(name: &str, socket: &Path) -> String {
    format!(
        "[dpdk]\neal_args = {}\nmbufs = 8191\n\n[[port]]\ndevice = \"net_null0\"\ntx_queues = 1\n\
         ipv4 = [\"192.0.2.1\"]\n\n[lcores]\nrx = [0]\nidle_sleep_us = 100\n\n\
         [control]\nsocket = \"{}\"\nwatch = false\n\n[metrics]\nlisten = \"127.0.0.1:0\"\ncache_ms = 0\n\n[reassembly]\nbuffers = 32\n",
        eal_args(name, &["--vdev=net_null0,size=64".to_string()]),
        socket.display()
    )
}

#[test]
fn one_daemon_per_socket_and_a_crashed_runs_socket_is_replaced() {
    let s = Scratch::new("ctl-one");
    let sock = s.path("run/ctl.sock");
    // A socket left behind by a run that crashed: bound, nobody answering.
    std::fs::create_dir_all(s.path("run")).unwrap();
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    let a = s.write("a.toml", &null_config("ctl-one-a", &sock));
    let mut d = Daemon::start(&s, &["--config", a.to_str().unwrap()]);
    assert!(
        d.log_text().contains("replaced the stale control socket"),
        "{}",
        d.log_text()
    );
    assert_eq!(json(&sock, &["status"], 0)["config"]["path"], a.display().to_string());
    // Killed outright: its socket stays behind, and the next start replaces it.
    d.signal("KILL");
    let _ = d.child.wait();
    assert!(sock.exists());
    let s2 = Scratch::new("ctl-one-2");
    let d2 = Daemon::start(&s2, &["--config", a.to_str().unwrap()]);
    assert_eq!(json(&sock, &["status"], 0)["pid"], d2.child.id());
    // A second daemon on the same socket: refused at start, naming the path, exit 1.
    let b = s.write("b.toml", &null_config("ctl-one-b", &sock));
    let out = run(&["--config", b.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("control.socket")
            && err.contains("another fastpathd")
            && err.contains(&sock.display().to_string()),
        "{err}"
    );
    // The first one still answers, on the same socket file.
    assert_eq!(json(&sock, &["status"], 0)["pid"], d2.child.id());
    let (code, _) = d2.stop();
    assert_eq!(code, Some(0));
    assert!(!sock.exists());
}

/// Reads whatever the server sends until it closes (or `within` passes).
fn read_all(mut c: UnixStream, within: Duration) -> String {
    c.set_read_timeout(Some(within)).unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    out
}

#[test]
fn hostile_clients_leave_metrics_reloads_the_data_path_and_the_socket_working() {
    let s = Scratch::new("ctl-hostile");
    let sock = s.path("control.sock");
    let cfg = s.write("c.toml", &null_config("ctl-hostile", &sock));
    let d = Daemon::start(&s, &["--config", cfg.to_str().unwrap()]);
    let rx = |m: &BTreeMap<String, f64>| family_sum(m, "fastpath_rx_packets_total");
    let before = d.scrape();
    // 64 at once: a third connect and send nothing, a third send a huge request, a third
    // garbage.
    let mut silent = Vec::new();
    let mut talkers = Vec::new();
    for i in 0..64 {
        let mut c = UnixStream::connect(&sock).unwrap();
        match i % 3 {
            0 => silent.push(c),
            1 => talkers.push(std::thread::spawn(move || {
                c.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
                let _ = c.write_all(&vec![b'{'; 1 << 20]);
                (1, read_all(c, Duration::from_secs(5)))
            })),
            _ => talkers.push(std::thread::spawn(move || {
                let _ = c.write_all(b"\x00\xffnot json at all\n");
                (2, read_all(c, Duration::from_secs(5)))
            })),
        }
    }
    // Meanwhile: metrics answer, the data path moves, a SIGHUP reload is applied.
    let t = Instant::now();
    let during = d.scrape();
    assert!(t.elapsed() < Duration::from_secs(2), "a scrape took {:?}", t.elapsed());
    // The data path moves (on a shared machine the lcore may wait for its CPU a while).
    wait_for(10, "the data path to move", || rx(&d.scrape()) > rx(&before));
    std::fs::write(
        &cfg,
        null_config("ctl-hostile", &sock).replace("\"192.0.2.1\"", "\"192.0.2.1\", \"192.0.2.9\""),
    )
    .unwrap();
    d.signal("HUP");
    wait_for(10, "the SIGHUP reload", || {
        d.scrape().get("fastpath_config_generation") == Some(&2.0)
    });
    // A normal request gets through while the silent ones still hold their connections
    // (the one waiting longest for its request makes room).
    assert_eq!(json(&sock, &["status"], 0)["config"]["generation"], 2);
    for t in talkers {
        let (kind, answer) = t.join().unwrap();
        if answer.is_empty() {
            // Closed for room before it was read: allowed, it was waiting.
            continue;
        }
        let v: Value = serde_json::from_str(answer.trim()).unwrap_or_else(|_| panic!("kind {kind}: {answer:?}"));
        assert_eq!(v["ok"], false, "{v}");
        let e = v["error"].as_str().unwrap();
        match kind {
            1 => assert!(e.contains("longer than 4096"), "{e}"),
            _ => assert!(e.contains("bad request") || e.contains("UTF-8"), "{e}"),
        }
    }
    // The silent ones are closed at the request deadline (or for room), not held.
    let t = Instant::now();
    for c in silent {
        assert_eq!(read_all(c, Duration::from_secs(5)), "");
    }
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "closed within the 2 s request deadline: {:?}",
        t.elapsed()
    );
    // And afterwards: the socket answers, a reload through it works, the data path moved on.
    assert_eq!(json(&sock, &["reload"], 0)["generation_after"], 3);
    wait_for(10, "the data path to move on", || rx(&d.scrape()) > rx(&during));
    assert_eq!(d.scrape()["fastpath_config_generation"], 3.0);
    let (code, _) = d.stop();
    assert_eq!(code, Some(0));
}

/// `fastpathctl trace ARGS --json` started, once the daemon says the trace is armed: the child
/// (stdout piped) and the rest of its stderr.
fn trace_started(sock: &Path, args: &[&str]) -> (std::process::Child, std::io::BufReader<std::process::ChildStderr>) {
    use std::io::BufRead;
    let mut c = Command::new(env!("CARGO_BIN_EXE_fastpathctl"))
        .arg("--socket")
        .arg(sock)
        .arg("trace")
        .args(args)
        .arg("--json")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run fastpathctl trace");
    let mut err = std::io::BufReader::new(c.stderr.take().unwrap());
    let mut first = String::new();
    err.read_line(&mut first).unwrap();
    assert!(first.starts_with("fastpathctl: tracing "), "{first:?}");
    (c, err)
}

/// The trace over the control socket, against a daemon whose capture arrives only once the
/// trace is armed (its `rx_pcap` is a FIFO the test writes): a record per packet, whose
/// outcomes are exactly the counters' and whose reasons name the socket `flow` names, the
/// Maglev backend, the ICMP limits (per destination and global), reassembly and GRE
/// decapsulation; a client that goes away disarms the lcores.
#[test]
fn trace_records_every_packet_with_the_counted_outcome_and_the_reasons() {
    let s = Scratch::new("ctl-trace");
    let fifo = s.path("in.fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let me = [192, 0, 2, 1];
    let mut frames = Vec::new();
    for i in 0..N {
        frames.push(udp_frame(FLOW_A.0, me, FLOW_A.1, 53, format!("a{i}").as_bytes()));
        frames.push(udp_frame(FLOW_B.0, me, FLOW_B.1, 9000, format!("b{i}").as_bytes()));
    }
    // One source at a closed port: 6 errors (peer_burst), the rest held back for it.
    for _ in 0..12 {
        frames.push(udp_frame(FLOW_A.0, me, FLOW_A.1, 9, b"closed"));
    }
    // 150 sources: past the global burst (50, randomized up to twice that).
    for i in 0..150u8 {
        frames.push(udp_frame([198, 18, 1, i], me, 1000, 9, b"closed"));
    }
    // A datagram to dns in two fragments.
    let whole = udp(FLOW_A.1, 53, &[7u8; 40]);
    frames.push(ipv4_frame(FLOW_A.0, me, 17, 77, 0x2000, &whole[..24]));
    frames.push(ipv4_frame(FLOW_A.0, me, 17, 77, 3, &whole[24..]));
    // GRE from tunnel t0's far end, holding a datagram to dns.
    let mut gre = vec![0, 0, 0x08, 0x00];
    gre.extend_from_slice(&ipv4_packet(FLOW_A.0, me, 17, 5, 0, &udp(4444, 53, b"in gre")));
    frames.push(ipv4_frame([203, 0, 113, 10], me, 47, 9, 0, &gre));
    let total = frames.len();

    let (d, fifo_w) = fifo_daemon(&s, &fifo, &config_on("ctl-trace", "control.sock", 4, 2, &fifo, false));
    let sock = socket_path(&s);
    let m0 = d.scrape();
    assert_eq!(
        family_sum(&m0, "fastpath_packets_total"),
        0.0,
        "nothing before the trace"
    );

    // A bad filter or lcore is refused, exit 1, and arms nothing.
    for (args, want) in [
        (&["--filter", "port banana"][..], "filter: "),
        (
            &["--lcore", "7"][..],
            "lcore 7 is neither an RX lcore (0) nor a worker (1)",
        ),
    ] {
        let mut a = vec!["trace"];
        a.extend_from_slice(args);
        let out = ctl(&sock, &a);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains(want), "{args:?}");
    }

    let all = trace_frames(&sock, fifo_w, &frames);
    // The RX lcore's record of every packet, and the worker's of what it did with those it
    // took (the sink's are consumed unread: none).
    let (workers, recs): (Vec<Value>, Vec<Value>) = all.into_iter().partition(|r| r["role"] == "worker");
    assert_eq!(recs.len(), total);
    assert!(recs.iter().all(|r| r["role"] == "rx"));

    // Every packet's outcome is the one the counters show, packet for packet.
    wait_for(20, "every packet counted", || {
        family_sum(&d.scrape(), "fastpath_packets_total") == total as f64
    });
    let m = d.scrape();
    let mut traced: BTreeMap<String, f64> = BTreeMap::new();
    for r in &recs {
        assert_eq!(r["lcore"], 0);
        assert!(!r["stages"].as_array().unwrap().is_empty(), "{r}");
        *traced.entry(r["outcome"].as_str().unwrap().to_string()).or_default() += 1.0;
    }
    let counted: BTreeMap<String, f64> = m
        .iter()
        .filter_map(|(k, v)| {
            let o = k
                .strip_prefix("fastpath_packets_total{outcome=\"")?
                .strip_suffix("\"}")?;
            (*v > 0.0).then(|| (o.to_string(), *v))
        })
        .collect();
    assert_eq!(traced, counted);

    let reasons = reasons_of;
    let with = |want: &str| recs.iter().filter(|r| reasons(r).iter().any(|x| x == want)).count();
    // Flow A: the socket `flow` names, all 20.
    let a = json(&sock, &["flow", "udp", "198.51.100.7:5353", "192.0.2.1:53"], 0);
    let a_socket = a["detail"]["socket"]["socket"].as_u64().unwrap();
    let flow_a_to = |want: &str| {
        recs.iter()
            .filter(|r| r["sport"] == FLOW_A.1 && r["dport"] == 53)
            .filter(|r| reasons(r).iter().any(|x| x.starts_with(want)))
            .count()
    };
    assert_eq!(flow_a_to(&format!("service: dns socket {a_socket}")), N);
    assert_eq!(flow_a_to("service: "), N, "and to no other socket");
    // Flow B: the backend `flow` names.
    let b = json(&sock, &["flow", "udp", "203.0.113.9:40001", "192.0.2.1:9000"], 0);
    let backend = b["detail"]["backend"].as_str().unwrap();
    assert_eq!(with(&format!("maglev: backend {backend}")), N);
    // The worker took each of them from its socket and sent it into that backend's tunnel.
    let into = |r: &Value| {
        reasons(r)
            .iter()
            .any(|x| x.starts_with(&format!("tunnel: into tunnel {backend} (")))
    };
    assert_eq!(workers.len(), N, "{workers:#?}");
    assert!(
        workers
            .iter()
            .all(|r| into(r) && r["lcore"] == 1 && r["outcome"] == "delivered"),
        "{workers:#?}"
    );
    assert!(workers
        .iter()
        .all(|r| reasons(r)[0].starts_with("worker: took it from lb socket ")));
    assert_eq!(
        with("icmp: suppressed, per-destination budget of 198.51.100.7 empty"),
        6
    );
    let global = with("icmp: suppressed, global budget empty");
    let sent = with("icmp: sent port unreachable");
    assert!(global > 0 && sent >= 6 + 50, "{global} held back, {sent} sent");
    assert_eq!(
        global + sent,
        12 + 150 - 6,
        "every probe but those held per destination"
    );
    assert_eq!(with("reassembly: completed the datagram, which went on"), 1);
    assert_eq!(with("reassembly: held, then its datagram completed"), 1);
    assert_eq!(with("gre: decap tunnel t0, depth 1"), 1);

    // A client that goes away mid-trace disarms the lcore: the next trace arms.
    let (mut follow, _) = trace_started(&sock, &["--follow", "--filter", "proto udp"]);
    let _ = follow.kill();
    let _ = follow.wait();
    wait_for(10, "the lcore disarmed", || {
        let mut c = UnixStream::connect(&sock).unwrap();
        c.write_all(b"{\"command\":\"trace\",\"count\":1}\n").unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(c), &mut line).unwrap();
        line.starts_with("{\"ok\":true")
    });
    let (code, log) = d.stop();
    assert_eq!(code, Some(0), "{log}");
}

/// A daemon started on `cfg` whose `rx_pcap` is the FIFO `fifo`: it opens the FIFO at start
/// and reads the capture's header; the frames wait for [`trace_frames`].
fn fifo_daemon(s: &Scratch, fifo: &Path, cfg: &str) -> (Daemon, std::fs::File) {
    let header = pcap(&[]);
    let fifo_w = fifo.to_path_buf();
    // The config check opens the file too, and closes it unread: a header written to that
    // reader fails (EPIPE) and is written again to DPDK's.
    let writer = std::thread::spawn(move || loop {
        let mut f = std::fs::OpenOptions::new().write(true).open(&fifo_w).unwrap();
        match f.write_all(&header) {
            Ok(()) => break f,
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => continue,
            Err(e) => panic!("{e}"),
        }
    });
    let cfg = s.write("c.toml", cfg);
    let d = Daemon::start(s, &["--config", cfg.to_str().unwrap()]);
    (d, writer.join().unwrap())
}

/// `fastpathctl trace --count (frames) --json` armed, then `frames` written into the FIFO and
/// the FIFO closed: every record (the RX lcores' and the workers').
fn trace_frames(sock: &Path, mut fifo_w: std::fs::File, frames: &[Vec<u8>]) -> Vec<Value> {
    let total = frames.len();
    let header = pcap(&[]);
    let body = pcap(frames)[header.len()..].to_vec();
    let (child, mut err) = trace_started(sock, &["--count", &total.to_string()]);
    fifo_w.write_all(&body).unwrap();
    drop(fifo_w);
    let out = wait_output(child, 30);
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert!(out.status.success(), "{rest}");
    assert!(rest.contains(&format!("{total} records, 0 lost")), "{rest}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The stage: reason strings of a record.
fn reasons_of(r: &Value) -> Vec<String> {
    r["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| format!("{}: {}", x["stage"].as_str().unwrap(), x["reason"].as_str().unwrap()))
        .collect()
}

/// The trace names the rollover (a huge flow leaving its socket at LOW room, or at none) and
/// the flow limit (a dominant flow shed at half backlog) through the daemon: a slow worker
/// (cost_ns) keeps the sockets filling while one flow arrives.
#[test]
fn trace_names_rollover_and_the_flow_limit() {
    // (name, [flow_limit] on, sockets, capacity, packets, a reason some record must give).
    // The limit sheds a flow holding more than 128 of the last 256 packets that reached a
    // socket at least half full: 256 to fill half of 512, then more than 128.
    for (name, flow_limit, sockets, capacity, n, want) in [
        ("ctl-trace-roll", false, 2, 16, 64, "rollover: socket "),
        (
            "ctl-trace-fl",
            true,
            1,
            512,
            450,
            "flow_limit: flow dominates slow socket ",
        ),
    ] {
        let s = Scratch::new(name);
        let fifo = s.path("in.fifo");
        assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let cfg = format!(
            "[dpdk]\neal_args = {}\nmbufs = 8191\n\n[[port]]\ndevice = \"net_pcap0\"\ntx_queues = 2\n\
             ipv4 = [\"192.0.2.1\"]\nmac = \"02:00:00:00:00:01\"\n\n\
             [lcores]\nrx = [0]\nworkers = [1]\nidle_sleep_us = 100\n\n\
             [control]\nsocket = \"control.sock\"\nwatch = false\n\n[metrics]\nlisten = \"127.0.0.1:0\"\ncache_ms = 0\n\n\
             [reassembly]\nbuffers = 32\n\n[flow_limit]\nenabled = {flow_limit}\n\n\
             [[service]]\nname = \"slow\"\nports = [53]\nsockets = {sockets}\nsocket_capacity = {capacity}\nrollover = true\n\
             action = \"echo\"\ncost_ns = 2000000\n",
            eal_args(
                name,
                &[format!(
                    "--vdev=net_pcap0,rx_pcap={},tx_pcap=/dev/null,tx_pcap=/dev/null",
                    fifo.display()
                )]
            ),
        );
        let (d, fifo_w) = fifo_daemon(&s, &fifo, &cfg);
        let frames: Vec<Vec<u8>> = (0..n)
            .map(|i| udp_frame(FLOW_A.0, [192, 0, 2, 1], FLOW_A.1, 53, format!("q{i}").as_bytes()))
            .collect();
        let all = trace_frames(&socket_path(&s), fifo_w, &frames);
        let rx: Vec<&Value> = all.iter().filter(|r| r["role"] == "rx").collect();
        assert_eq!(rx.len(), n);
        let hit: Vec<Vec<String>> = rx
            .iter()
            .map(|r| reasons_of(r))
            .filter(|r| r.iter().any(|x| x.starts_with(want)))
            .collect();
        assert!(!hit.is_empty(), "{name}: no record says {want:?}: {rx:#?}");
        if flow_limit {
            assert!(rx.iter().any(|r| r["outcome"] == "flow_limited"), "{name}");
        } else {
            assert!(
                hit.iter()
                    .flatten()
                    .any(|x| x.contains("ROOM_LOW and flow huge") || x.ends_with("ROOM_NONE")),
                "{hit:?}"
            );
        }
        let (code, log) = d.stop();
        assert_eq!(code, Some(0), "{log}");
    }
}

/// The child's output once it exits, within `secs` (killed after); its stdout read as it
/// comes, so a long trace never fills the pipe.
fn wait_output(mut c: std::process::Child, secs: u64) -> Output {
    let mut stdout = c.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        stdout.read_to_end(&mut v).unwrap();
        v
    });
    let t = Instant::now();
    let status = loop {
        if let Some(st) = c.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > Duration::from_secs(secs) {
            let _ = c.kill();
            panic!("fastpathctl trace did not end within {secs} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: reader.join().unwrap(),
        stderr: Vec::new(),
    }
}
