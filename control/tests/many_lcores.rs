//! Many RX lcores: the production shape on a 2-CPU machine, lcores mapped onto the CPUs with
//! `[lcores] cpus`. net_pcap replays one capture per RX queue, split the way RSS spreads flows (by
//! a hash of addresses and ports), so the seed scenarios run with their traffic spread over 2 and 4
//! RX lcores; every received packet has one outcome, no mbuf is left, every lcore's series is
//! there.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Splits `capture` (under configs/captures/) over `n` RX queues as RSS would
/// ([`split_by_flow`]); returns the paths and how many frames each got.
fn spread(s: &Scratch, capture: &str, n: usize) -> (Vec<PathBuf>, Vec<usize>) {
    let parts = split_by_flow(&repo().join("configs/captures").join(capture), n);
    let counts = parts.iter().map(|(_, c)| *c).collect();
    let paths = parts
        .iter()
        .enumerate()
        .map(|(q, (bytes, _))| {
            let p = s.path(&format!("q{q}-{capture}"));
            std::fs::write(&p, bytes).unwrap();
            p
        })
        .collect();
    (paths, counts)
}

/// A config for `n` RX lcores (0..n) and `workers` workers (n..), all mapped onto CPUs 0 and 1,
/// over net_pcap0 replaying `capture` spread over `n` queues; TX queue `i` (RX lcores first,
/// then workers) is written to `tx{i}.pcap`. Returns the config path and the frames per queue.
fn spread_config(
    s: &Scratch,
    name: &str,
    capture: &str,
    n: usize,
    workers: usize,
    sections: &str,
) -> (PathBuf, Vec<usize>) {
    let (queues, counts) = spread(s, capture, n);
    let mut vdev = "--vdev=net_pcap0".to_string();
    for q in &queues {
        vdev += &format!(",rx_pcap={}", q.display());
    }
    for t in 0..n + workers {
        vdev += &format!(",tx_pcap={}", s.path(&format!("tx{t}.pcap")).display());
    }
    let rx: Vec<usize> = (0..n).collect();
    let wk: Vec<usize> = (n..n + workers).collect();
    // RX lcores alternate between the two CPUs; workers share both.
    let mut cpus: Vec<String> = rx.iter().map(|l| format!("{l}@{}", l % 2)).collect();
    cpus.extend(wk.iter().map(|l| format!("{l}@(0,1)")));
    let cfg = s.write(
        "c.toml",
        &format!(
            "[dpdk]\neal_args = {}\nmbufs = 32767\nrx_desc = 256\ntx_desc = 256\n\n[[port]]\ndevice = \"net_pcap0\"\nrx_queues = {n}\n\
             tx_queues = {}\nipv4 = [\"192.0.2.1\"]\nipv6 = [\"2001:db8::1\"]\nmac = \"02:00:00:00:00:01\"\n\n\
             [lcores]\nrx = {rx:?}\nworkers = {wk:?}\ncpus = \"{}\"\nidle_sleep_us = 100\n{METRICS_ANY_PORT}\n{sections}",
            eal_args(name, &[vdev]),
            n + workers,
            cpus.join(","),
        ),
    );
    (cfg, counts)
}

/// What every run with `n` RX lcores and `workers` workers must show at exit: conservation, no
/// mbuf in use, and each lcore's own series (not one flattened series): packets per RX queue and
/// per RX lcore equal to what that queue replayed, a generation per lcore.
fn check_lcores(m: &BTreeMap<String, f64>, n: usize, workers: usize, counts: &[usize]) -> u64 {
    let rx = assert_conservation(m);
    assert_eq!(rx, counts.iter().sum::<usize>() as u64);
    for (q, &c) in counts.iter().enumerate() {
        assert!(c > 0, "queue {q} replays something");
        let key = format!("fastpath_rx_packets_total{{port=\"net_pcap0\",queue=\"{q}\"}}");
        assert_eq!(m.get(&key).copied(), Some(c as f64), "{key}");
        // Queue q is polled by the q-th RX lcore, lcore q.
        let key = format!("fastpath_lcore_packets_total{{lcore=\"{q}\"}}");
        assert_eq!(m.get(&key).copied(), Some(c as f64), "{key}");
    }
    for l in 0..n + workers {
        let key = format!("fastpath_lcore_config_generation{{lcore=\"{l}\"}}");
        assert_eq!(m.get(&key).copied(), Some(1.0), "{key}");
    }
    rx
}

/// Seed 002's rollover with the traffic spread over RX lcores: the dominant flow's RX lcore and
/// the others fill one socket's queues, whose sum the rules read. The dominant flow is spread
/// over the sockets while its socket still has room, small flows never move, nothing is
/// dropped, the workers drain every queue.
#[test]
fn rollover_holds_with_the_traffic_spread_over_rx_lcores() {
    for n in [2, 4] {
        let s = Scratch::new(&format!("many-rollover-{n}"));
        let (cfg, counts) = spread_config(
            &s,
            &format!("many-rollover-{n}"),
            "rollover.pcap",
            n,
            2,
            "[flow_limit]\nenabled = false\n\n[[service]]\nname = \"bulk\"\nports = [9000]\nsockets = 4\n\
             socket_capacity = 1024\nfanout = \"hash\"\nrollover = true\naction = \"sink\"\ncost_ns = 100000\n",
        );
        let m = run_to_idle(&s, &cfg, 500);
        assert_eq!(check_lcores(&m, n, 2, &counts), 2200);
        assert_eq!(outcome(&m, "delivered"), 2200, "{n} RX lcores: nothing dropped");
        let sum = |family: &str| -> f64 {
            (0..4)
                .map(|i| m[&format!("{family}{{service=\"bulk\",socket=\"{i}\"}}")])
                .sum()
        };
        let (rollover, huge) = (sum("fastpath_rollover_total"), sum("fastpath_rollover_huge_total"));
        eprintln!("{n} RX lcores: queues {counts:?}, rollovers {rollover} (huge {huge})");
        assert!(huge > 500.0, "{n} RX lcores: the dominant flow rolled over early");
        assert_eq!(rollover, huge, "{n} RX lcores: small flows stayed");
        assert_eq!(sum("fastpath_rollover_failed_total"), 0.0);
        assert_eq!(sum("fastpath_socket_queue_depth"), 0.0, "drained");
        let sunk: f64 = (0..4)
            .map(|i| m[&format!("fastpath_socket_processed_total{{service=\"bulk\",socket=\"{i}\",result=\"sunk\"}}")])
            .sum();
        assert_eq!(sunk, 2200.0);
    }
}

/// Seed 003's storm spread over RX lcores: one RX lcore receives the storm (one flow), the others
/// normal flows. The storm's lcore sheds it once the socket (the sum of its queues) is half
/// full; the normal flows, on every lcore, are answered; the shed count is per lcore.
#[test]
fn the_flow_limit_sheds_a_storm_spread_over_rx_lcores() {
    if missing(&["tshark"]) {
        return;
    }
    for n in [2, 4] {
        let name = format!("many-storm-{n}");
        let s = Scratch::new(&name);
        let (cfg, counts) = spread_config(
            &s,
            &name,
            "storm.pcap",
            n,
            1,
            "[[service]]\nname = \"echo\"\nports = [7]\nsockets = 1\nsocket_capacity = 2048\n\
             action = \"echo\"\ncost_ns = 200000\n",
        );
        let m = run_to_idle(&s, &cfg, 500);
        assert_eq!(check_lcores(&m, n, 1, &counts), 8400);
        // The worker's TX queue is the last one.
        let replies = s.path(&format!("tx{n}.pcap"));
        let answered = tshark_fields(&replies, "udp.dstport >= 7000 && udp.dstport < 7020", &["udp.dstport"]).len();
        let limited = outcome(&m, "flow_limited");
        eprintln!("{n} RX lcores: queues {counts:?}, normal answered {answered}/400, flow_limited {limited}");
        assert!(answered as f64 >= 0.99 * 400.0, "{n} RX lcores: {answered} of 400");
        assert!(limited > 5000, "{n} RX lcores: the storm was shed");
        let per_lcore: Vec<f64> = (0..n)
            .map(|l| m[&format!("fastpath_flow_limit_dropped_total{{lcore=\"{l}\"}}")])
            .collect();
        assert_eq!(per_lcore.iter().sum::<f64>() as u64, limited);
        assert_eq!(
            per_lcore.iter().filter(|&&d| d > 0.0).count(),
            1,
            "only the storm's lcore sheds: {per_lcore:?}"
        );
    }
}

/// ICMP limits over RX lcores (seed 000): the global budget is one for the host, whatever lcore
/// answers; the per-destination table is per lcore, so a source whose flows RSS spreads over k
/// lcores gets k bursts (docs/mechanisms.md), and never more.
#[test]
fn icmp_limits_hold_across_rx_lcores() {
    if missing(&["tshark"]) {
        return;
    }
    for n in [2, 4] {
        let name = format!("many-icmp-{n}");
        let s = Scratch::new(&name);
        // A global burst below the 201 errors the capture deserves, refilled slowly: the
        // budget, shared by every lcore, decides how many are sent.
        let (cfg, counts) = spread_config(
            &s,
            &name,
            "icmp.pcap",
            n,
            0,
            "[icmp]\nmsgs_per_sec = 1\nburst = 60\npeer_interval_ms = 1000\npeer_burst = 6\n",
        );
        let m = run_to_idle(&s, &cfg, 300);
        assert_eq!(check_lcores(&m, n, 0, &counts), 2205);
        let mut per_dst: BTreeMap<String, usize> = BTreeMap::new();
        for q in 0..n {
            for e in tshark_checked(
                &s.path(&format!("tx{q}.pcap")),
                "icmp || icmpv6",
                &["ip.dst", "ipv6.dst"],
            ) {
                let dst = if e[0].is_empty() { &e[1] } else { &e[0] };
                *per_dst.entry(dst.split(',').next().unwrap().to_string()).or_default() += 1;
            }
        }
        let sent: usize = per_dst.values().sum();
        let global = m["fastpath_icmp_rate_limited_total{family=\"ipv4\",limit=\"global\"}"]
            + m["fastpath_icmp_rate_limited_total{family=\"ipv6\",limit=\"global\"}"];
        eprintln!("{n} RX lcores: {sent} errors sent, {global} refused by the global budget");
        // Each error draws 0, 1 or 2 credits at random (SAD DNS): 60 credits pay for about 60
        // errors; far below the 201 the capture asks for, whichever lcores answer.
        assert!(
            (30..=100).contains(&sent),
            "{n} RX lcores: the global budget holds: {sent}"
        );
        assert!(global > 50.0, "{n} RX lcores: the global limit refused the rest");
        assert_eq!(sent as u64, outcome(&m, "icmp_error"));
        // The flooding source's datagrams, by the lcore they reached.
        let flood_lcores = (0..n)
            .filter(|q| {
                let f = s.path(&format!("q{q}-icmp.pcap"));
                !tshark_fields(&f, "ip.src == 203.0.113.66", &["frame.number"]).is_empty()
            })
            .count();
        let flood = per_dst.get("203.0.113.66").copied().unwrap_or(0);
        assert!(
            flood <= 6 * flood_lcores,
            "{n} RX lcores: the flooding source gets at most a burst per lcore it reaches ({flood_lcores}): {flood}"
        );
    }
}

/// fastpathd with 4 RX lcores on `net_af_packet` with 6 queue pairs (one per TX queue; 6 RX
/// queues over 4 RX lcores; the kernel spreads the veth's packets over them by flow hash, as
/// RSS would) on one end of a veth pair this test creates, in this namespace so that its
/// metrics are scraped live; the Linux kernel in a namespace the test creates is the client.
struct Spread {
    ns: String,
    ifs: [String; 2],
}

impl Spread {
    fn new() -> Spread {
        let id = std::process::id() % 100_000;
        let p = Spread {
            ns: format!("fpm{id}"),
            ifs: [format!("fpma{id}"), format!("fpmb{id}")],
        };
        ip(&["netns", "add", &p.ns]);
        ip(&["link", "add", &p.ifs[0], "type", "veth", "peer", "name", &p.ifs[1]]);
        ip(&["link", "set", &p.ifs[1], "netns", &p.ns]);
        // Only what the test sends: no IPv6 autoconfiguration traffic on either side, and no
        // address on fastpathd's end, so this namespace's kernel stays silent there.
        let ipv6_off = |i: usize| format!("net.ipv6.conf.{}.disable_ipv6=1", p.ifs[i]);
        assert!(std::process::Command::new("sysctl")
            .args(["-qw", &ipv6_off(0)])
            .status()
            .unwrap()
            .success());
        let _ = ns_exec(&p.ns, &["sysctl", "-qw", &ipv6_off(1)]);
        ip(&["link", "set", &p.ifs[0], "up"]);
        ip(&["-n", &p.ns, "link", "set", &p.ifs[1], "up"]);
        assert!(ns_exec(&p.ns, &["ethtool", "-K", &p.ifs[1], "tx", "off"])
            .status
            .success());
        ip(&["-n", &p.ns, "addr", "add", "192.0.2.2/24", "dev", &p.ifs[1]]);
        p
    }
}

impl Drop for Spread {
    fn drop(&mut self) {
        // Deleting the namespace deletes its veth end, and with it the pair.
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.ns])
            .status();
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &self.ifs[0]])
            .status();
    }
}

/// The client: 2,000 datagrams from 200 UDP sockets (200 flows) to the echo service, paced;
/// prints how many echoes came back, each checked to be its own datagram.
const CLIENT: &str = "import socket, select, time\n\
socks = []\n\
for i in range(200):\n\
\x20   s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
\x20   s.bind(('192.0.2.2', 0)); s.setblocking(False); socks.append(s)\n\
got = 0\n\
def drain(wait):\n\
\x20   global got\n\
\x20   end = time.time() + wait\n\
\x20   while True:\n\
\x20       r, _, _ = select.select(socks, [], [], max(0, end - time.time()))\n\
\x20       if not r:\n\
\x20           return\n\
\x20       for s in r:\n\
\x20           while True:\n\
\x20               try:\n\
\x20                   d = s.recv(2048)\n\
\x20               except BlockingIOError:\n\
\x20                   break\n\
\x20               assert d.startswith(b'%d:' % s.getsockname()[1]), d\n\
\x20               got += 1\n\
for i in range(2000):\n\
\x20   s = socks[i % 200]\n\
\x20   s.sendto(b'%d:%d' % (s.getsockname()[1], i), ('192.0.2.1', 5000))\n\
\x20   if i % 100 == 99:\n\
\x20       drain(0.01)\n\
drain(2)\n\
print(got)\n";

/// The production shape live: 4 RX lcores (two per CPU) and 2 workers; the kernel's flows are
/// spread over every RX lcore and echoed; once the client is done, a live scrape already has
/// every received packet in one outcome; a reload is adopted by every lcore; the stop leaves
/// no mbuf.
#[test]
fn four_rx_lcores_serve_the_kernel_live_and_adopt_a_reload() {
    let p = Spread::new();
    let s = Scratch::new("many-live");
    let dump = s.path("metrics.prom");
    let config = |burst: u32| {
        format!(
            "[dpdk]\neal_args = {}\nmbufs = 32767\nrx_desc = 256\ntx_desc = 256\n\n[[port]]\n\
             device = \"net_af_packet0\"\nrx_queues = 6\ntx_queues = 6\nipv4 = [\"192.0.2.1\"]\n\n\
             [lcores]\nrx = [0, 1, 2, 3]\nworkers = [4, 5]\ncpus = \"0@0,1@1,2@0,3@1,4@(0,1),5@(0,1)\"\n\
             idle_sleep_us = 50\n{METRICS_ANY_PORT}\n[icmp]\nburst = {burst}\n\n\
             [[service]]\nname = \"echo\"\nports = [5000]\nsockets = 4\nsocket_capacity = 512\naction = \"echo\"\n",
            eal_args(
                "many-live",
                &[format!("--vdev=net_af_packet0,iface={},qpairs=6", p.ifs[0])]
            )
        )
    };
    let cfg = s.write("c.toml", &config(50));
    let d = Daemon::start(
        &s,
        &[
            "--config",
            cfg.to_str().unwrap(),
            "--metrics-dump",
            dump.to_str().unwrap(),
        ],
    );
    let out = ns_exec(&p.ns, &["/usr/bin/python3", "-c", CLIENT]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let echoed: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(echoed >= 1980, "the kernel got {echoed} of 2000 echoes");

    // The client is done: nothing is in flight, so a live scrape balances exactly.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let live = d.scrape();
    let rx = family_sum(&live, "fastpath_rx_packets_total");
    assert_eq!(
        rx,
        family_sum(&live, "fastpath_packets_total"),
        "live: sum(rx) == sum(outcomes)"
    );
    assert!(rx >= 2000.0, "{rx}");
    let per_lcore: Vec<f64> = (0..4)
        .map(|l| live[&format!("fastpath_lcore_packets_total{{lcore=\"{l}\"}}")])
        .collect();
    eprintln!("packets per RX lcore {per_lcore:?}, echoed {echoed}");
    assert!(
        per_lcore.iter().all(|&n| n > 0.0),
        "the flows reach every RX lcore: {per_lcore:?}"
    );
    let delivered: f64 = (0..4)
        .map(|i| live[&format!("fastpath_socket_delivered_total{{service=\"echo\",socket=\"{i}\"}}")])
        .sum();
    assert_eq!(delivered as usize, outcome(&live, "delivered") as usize);

    // A live reload: every lcore, RX and worker, moves to generation 2.
    std::fs::write(&cfg, config(40)).unwrap();
    d.signal("HUP");
    wait_for(10, "every lcore on generation 2", || {
        let m = d.scrape();
        (0..6).all(|l| m.get(&format!("fastpath_lcore_config_generation{{lcore=\"{l}\"}}")) == Some(&2.0))
    });
    let (code, log) = d.stop();
    assert_eq!(code, Some(0), "{log}");
    let m = parse_metrics(&std::fs::read_to_string(&dump).unwrap());
    assert_conservation(&m);
    assert_eq!(outcome(&m, "socket_full") + outcome(&m, "tx_full"), 0);
}

/// net_tap with several queues: the kernel spreads the flows it sends into a multi-queue TAP by
/// flow hash, so 2 RX lcores (2 queues each) both serve the kernel's 200 flows. fastpathd
/// creates the TAP; the test moves it into a namespace it created, where the kernel is the
/// client.
#[test]
fn two_rx_lcores_serve_a_multi_queue_tap() {
    let id = std::process::id() % 100_000;
    let (ns, tap) = (format!("fpt{id}"), format!("fptap{id}"));
    struct Ns(String);
    impl Drop for Ns {
        fn drop(&mut self) {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", &self.0])
                .status();
        }
    }
    ip(&["netns", "add", &ns]);
    let _ns = Ns(ns.clone());
    let s = Scratch::new("many-tap");
    let dump = s.path("metrics.prom");
    let cfg = s.write(
        "c.toml",
        &format!(
            "[dpdk]\neal_args = {}\nmbufs = 32767\nrx_desc = 256\ntx_desc = 256\n\n[[port]]\n\
             device = \"net_tap0\"\nrx_queues = 4\ntx_queues = 4\nipv4 = [\"192.0.2.1\"]\n\
             mac = \"02:00:00:00:00:01\"\n\n\
             [lcores]\nrx = [0, 1]\nworkers = [2, 3]\ncpus = \"0@0,1@1,2@(0,1),3@(0,1)\"\n\
             idle_sleep_us = 50\n{METRICS_ANY_PORT}\n\
             [[service]]\nname = \"echo\"\nports = [5000]\nsockets = 2\nsocket_capacity = 512\naction = \"echo\"\n",
            eal_args("many-tap", &[format!("--vdev=net_tap0,iface={tap}")])
        ),
    );
    let d = Daemon::start(
        &s,
        &[
            "--config",
            cfg.to_str().unwrap(),
            "--metrics-dump",
            dump.to_str().unwrap(),
        ],
    );
    ip(&["link", "set", &tap, "netns", &ns]);
    let _ = ns_exec(&ns, &["sysctl", "-qw", &format!("net.ipv6.conf.{tap}.disable_ipv6=1")]);
    ip(&["-n", &ns, "addr", "add", "192.0.2.2/24", "dev", &tap]);
    ip(&["-n", &ns, "link", "set", &tap, "up"]);
    let _ = ns_exec(&ns, &["ethtool", "-K", &tap, "tx", "off"]);
    let out = ns_exec(&ns, &["/usr/bin/python3", "-c", CLIENT]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let echoed: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let live = d.scrape();
    let per_queue: Vec<f64> = (0..4)
        .map(|q| live[&format!("fastpath_rx_packets_total{{port=\"net_tap0\",queue=\"{q}\"}}")])
        .collect();
    let per_lcore: Vec<f64> = (0..2)
        .map(|l| live[&format!("fastpath_lcore_packets_total{{lcore=\"{l}\"}}")])
        .collect();
    eprintln!("TAP queues {per_queue:?}, RX lcores {per_lcore:?}, echoed {echoed}");
    assert!(echoed >= 1980, "the kernel got {echoed} of 2000 echoes");
    assert!(
        per_lcore.iter().all(|&n| n > 100.0),
        "the kernel's flows reach both RX lcores: {per_lcore:?}"
    );
    assert_eq!(
        family_sum(&live, "fastpath_rx_packets_total"),
        family_sum(&live, "fastpath_packets_total"),
        "live: sum(rx) == sum(outcomes)"
    );
    let (code, log) = d.stop();
    assert_eq!(code, Some(0), "{log}");
    let m = parse_metrics(&std::fs::read_to_string(&dump).unwrap());
    assert_conservation(&m);
}
