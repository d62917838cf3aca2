//! The control thread against real components: promtool, a real Prometheus server, and live
//! reloads while traffic flows through the real daemon on DPDK.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A config over net_null (endless zeroed 64-byte frames) with metrics on an ephemeral port.
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
fn promtool_accepts_a_live_scrape_and_health_answers() {
    if missing(&["promtool"]) {
        return;
    }
    let s = Scratch::new("promtool");
    let cfg = null_config(&s, "promtool");
    let d = Daemon::start(&s, &["--config", cfg.to_str().unwrap()]);
    wait_for(10, "traffic", || {
        family_sum(&d.scrape(), "fastpath_rx_packets_total") > 0.0
    });
    let (status, body) = d.get("/metrics");
    assert!(status.contains("200 OK"), "{status}");
    for family in [
        "fastpath_rx_packets_total",
        "fastpath_tx_packets_total",
        "fastpath_packets_total",
        "fastpath_config_reloads_total",
        "fastpath_config_generation",
        "fastpath_config_last_reload_success_timestamp_seconds",
        "fastpath_build_info",
    ] {
        assert!(body.contains(&format!("# HELP {family} ")), "HELP for {family}");
        assert!(body.contains(&format!("# TYPE {family} ")), "TYPE for {family}");
    }
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool is needed: apt-get install -y prometheus (ci/setup does it)");
    use std::io::Write;
    promtool.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let out = promtool.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && report.trim().is_empty(),
        "promtool check metrics: {report}"
    );

    assert_eq!(d.get("/healthz"), ("HTTP/1.1 200 OK".to_string(), "ok\n".to_string()));
    assert!(d.get("/nope").0.contains("404"));
    let (code, _) = d.stop();
    assert_eq!(code, Some(0));
}

#[test]
fn a_real_prometheus_scrapes_our_counters() {
    if missing(&["prometheus"]) {
        return;
    }
    let s = Scratch::new("prometheus");
    let cfg = null_config(&s, "prometheus");
    let d = Daemon::start(&s, &["--config", cfg.to_str().unwrap()]);
    let target = d.metrics.unwrap();
    let prom_port = free_port();
    let prom_cfg = s.write(
        "prometheus.yml",
        &format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: fastpathd\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    );
    let prom_log = std::fs::File::create(s.path("prometheus.log")).unwrap();
    let mut prom = Command::new("prometheus")
        .arg(format!("--config.file={}", prom_cfg.display()))
        .arg(format!("--storage.tsdb.path={}", s.path("tsdb").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
        .stdout(Stdio::null())
        .stderr(prom_log)
        .spawn()
        .expect("prometheus is needed: apt-get install -y prometheus (ci/setup does it)");
    let api: std::net::SocketAddr = format!("127.0.0.1:{prom_port}").parse().unwrap();
    let mut seen = String::new();
    let t = std::time::Instant::now();
    // Ask Prometheus (not us) for our counter until it has scraped it.
    let ok = loop {
        if t.elapsed() > Duration::from_secs(40) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(300));
        if std::net::TcpStream::connect_timeout(&api, Duration::from_millis(200)).is_err() {
            continue;
        }
        let (_, body) = http_get(api, "/api/v1/query?query=sum(fastpath_rx_packets_total)");
        seen = body.clone();
        // {"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[t,"1234"]}]}}
        if let Some(v) = body.split("\"value\":[").nth(1).and_then(|r| r.split('"').nth(1)) {
            if v.parse::<f64>().map(|v| v > 0.0).unwrap_or(false) {
                break true;
            }
        }
    };
    let _ = prom.kill();
    let _ = prom.wait();
    assert!(
        ok,
        "Prometheus never returned our counter; last answer: {seen}\n{}",
        std::fs::read_to_string(s.path("prometheus.log")).unwrap_or_default()
    );
    let (code, _) = d.stop();
    assert_eq!(code, Some(0));
}

/// Two valid configs that differ in what the tables hold, for the reload test.
fn replay_config(name: &str, variant: usize) -> String {
    let vdev = format!(
        "--vdev=net_pcap0,rx_pcap={},infinite_rx=1,tx_pcap=/dev/null,tx_pcap=/dev/null",
        repo().join("configs/captures/demo.pcap").display()
    );
    // The two valid configs differ in tables (addresses), limits (ICMP, flow limit, reassembly)
    // and the service's action.
    let (ipv4, action, burst, table_len, timeout) = match variant {
        0 => ("[\"192.0.2.1\"]", "echo", 50, 4096, 30000),
        _ => ("[\"192.0.2.1\", \"192.0.2.99\"]", "sink", 20, 1024, 10000),
    };
    format!(
        "[dpdk]\neal_args = {}\nmbufs = 16383\n\n[[port]]\ndevice = \"net_pcap0\"\ntx_queues = 2\n\
         ipv4 = {ipv4}\nipv6 = [\"2001:db8::1\"]\nmac = \"02:00:00:00:00:01\"\n\n[lcores]\nrx = [0]\nworkers = [1]\n\
         idle_sleep_us = 100\n{METRICS_ANY_PORT}cache_ms = 0\n\n[icmp]\nburst = {burst}\n\n[flow_limit]\ntable_len = {table_len}\n\n\
         [reassembly]\ntimeout_ms = {timeout}\nbuffers = 32\n\n\
         [[service]]\nname = \"echo\"\nports = [7]\nsockets = 2\nsocket_capacity = 1024\naction = \"{action}\"\n",
        eal_args(name, &[vdev])
    )
}

/// Scrapes `d` (every scrape renders: `cache_ms = 0`) and asserts that the packets received
/// and the outcomes balance in it, as the contract promises at every scrape (the capture has no
/// fragment, so none is ever held); counts the scrape in `scrapes` and its time in `took`.
fn balanced_scrape(d: &Daemon, scrapes: &mut Vec<Duration>) -> std::collections::BTreeMap<String, f64> {
    let t = std::time::Instant::now();
    let m = d.scrape();
    scrapes.push(t.elapsed());
    let scrapes = scrapes.len();
    let rx = family_sum(&m, "fastpath_rx_packets_total");
    let outcomes = family_sum(&m, "fastpath_packets_total");
    assert_eq!(rx, outcomes, "scrape {scrapes}: sum(rx) == sum(outcomes) under load");
    m
}

#[test]
fn reloads_under_load_lose_no_packet_and_bad_configs_never_replace_good_ones() {
    let s = Scratch::new("reload");
    let path = s.write("c.toml", &replay_config("reload", 0));
    let dump = s.path("metrics.prom");
    let d = Daemon::start(
        &s,
        &[
            "--config",
            path.to_str().unwrap(),
            "--metrics-dump",
            dump.to_str().unwrap(),
        ],
    );
    let mut scrapes = Vec::new();
    wait_for(10, "traffic", || {
        family_sum(&balanced_scrape(&d, &mut scrapes), "fastpath_rx_packets_total") > 0.0
    });

    let good = [replay_config("reload", 0), replay_config("reload", 1)];
    let bad = [
        // Syntax error.
        good[0].replace("[lcores]", "[lcores"),
        // Unknown key.
        good[1].replace("idle_sleep_us", "idle_sleep_usec"),
        // Invalid value.
        good[0].replace("\"192.0.2.1\"", "\"192.0.2.256\""),
        // A change that needs a restart.
        good[1]
            .replace("tx_queues = 2", "tx_queues = 3")
            .replace("idle_sleep_us = 100", "idle_sleep_us = 200"),
    ];
    let reloads = |m: &std::collections::BTreeMap<String, f64>| family_sum(m, "fastpath_config_reloads_total");
    let mut expected = 0.0;
    let mut bad_done = 0;
    for i in 0..100 {
        std::fs::write(&path, &good[(i + 1) % 2]).unwrap();
        d.signal("HUP");
        expected += 1.0;
        wait_for(10, "a reload", || {
            reloads(&balanced_scrape(&d, &mut scrapes)) >= expected
        });
        if i % 5 == 4 {
            std::fs::write(&path, &bad[bad_done % bad.len()]).unwrap();
            d.signal("HUP");
            expected += 1.0;
            bad_done += 1;
            wait_for(10, "a refused reload", || {
                reloads(&balanced_scrape(&d, &mut scrapes)) >= expected
            });
        }
        // Scrapes between reloads too, while the traffic flows.
        for _ in 0..2 {
            balanced_scrape(&d, &mut scrapes);
        }
    }
    let moving = |m: &std::collections::BTreeMap<String, f64>| family_sum(m, "fastpath_rx_packets_total");
    let before = moving(&balanced_scrape(&d, &mut scrapes));
    while scrapes.len() < 400 {
        balanced_scrape(&d, &mut scrapes);
    }
    let live = balanced_scrape(&d, &mut scrapes);
    assert!(moving(&live) > before, "traffic flowed during the scrapes");
    scrapes.sort();
    eprintln!(
        "{} balanced scrapes under load: median {:?}, 99th percentile {:?}, slowest {:?}",
        scrapes.len(),
        scrapes[scrapes.len() / 2],
        scrapes[scrapes.len() * 99 / 100],
        scrapes[scrapes.len() - 1]
    );
    assert_eq!(live["fastpath_config_generation"], 101.0);
    // Every lcore picks the last generation up between bursts.
    wait_for(10, "lcores on generation 101", || {
        let m = d.scrape();
        m.iter()
            .filter(|(k, _)| k.starts_with("fastpath_lcore_config_generation{"))
            .all(|(_, v)| *v == 101.0)
    });
    let (code, log) = d.stop();
    assert_eq!(code, Some(0));
    let last = log
        .lines()
        .find(|l| l.contains("generation 101 published"))
        .unwrap_or_default();
    for what in [
        "icmp limits changed",
        "reassembly limits",
        "flow_limit on table_len 1024 -> on table_len 4096",
        "port[0].ipv4",
        "service \"echo\" changed: action Sink -> Echo",
    ] {
        assert!(last.contains(what), "the reload log says what changed ({what}): {last}");
    }
    assert!(
        log.contains("need a restart, not a reload: port[0].tx_queues, lcores.idle_sleep_us"),
        "{log}"
    );
    assert!(
        log.contains("port[0].ipv4[0]: \"192.0.2.256\""),
        "invalid file logged with key and line"
    );

    let m = parse_metrics(&std::fs::read_to_string(&dump).unwrap());
    assert_eq!(m["fastpath_config_reloads_total{result=\"success\"}"], 100.0);
    assert_eq!(m["fastpath_config_reloads_total{result=\"failure\"}"], 20.0);
    assert_eq!(m["fastpath_config_generation"], 101.0);
    let rx = assert_conservation(&m);
    assert!(rx > 10_000, "traffic flowed during the reloads: {rx}");
    // Only what the capture itself causes: a reload must never drop, truncate or refuse packets.
    for o in ["tx_full", "oversize"] {
        assert_eq!(outcome(&m, o), 0, "outcome {o} can only come from a reload");
    }
    // With both configs, the capture's 5 malformed frames in 22 stay malformed.
    let malformed = outcome(&m, "malformed") as f64 / rx as f64;
    assert!((malformed - 5.0 / 22.0).abs() < 0.01, "malformed share {malformed}");
}

#[test]
fn a_changed_file_is_reloaded_without_a_signal() {
    let s = Scratch::new("watch");
    let path = s.write("c.toml", &replay_config("watch", 0));
    let d = Daemon::start(&s, &["--config", path.to_str().unwrap()]);
    let gen = |d: &Daemon| d.scrape()["fastpath_config_generation"];
    assert_eq!(gen(&d), 1.0);
    // Editors write a temporary file and rename it over the config.
    let tmp = s.write("c.toml.swp", &replay_config("watch", 1));
    std::fs::rename(&tmp, &path).unwrap();
    wait_for(10, "generation 2 after a rename", || gen(&d) == 2.0);
    // An in-place write of an invalid file is refused and changes nothing.
    std::fs::write(&path, "[dpdk\n").unwrap();
    wait_for(10, "a refused reload", || {
        d.scrape()["fastpath_config_reloads_total{result=\"failure\"}"] == 1.0
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(gen(&d), 2.0);
    let m = d.scrape();
    assert_eq!(
        m["fastpath_config_reloads_total{result=\"success\"}"], 1.0,
        "one change, one reload"
    );
    let (code, log) = d.stop();
    assert_eq!(code, Some(0));
    assert!(log.contains("reload (file changed): generation 2 published"), "{log}");
}

/// Starts fastpathd on `start` (net_null traffic), writes `changed` over its config and sends
/// SIGHUP; returns a scrape taken once the reload was decided (and half a second later, so a
/// late second attempt by the file watcher would be counted too), the log and the config path.
fn reload_once(s: &Scratch, start: &str, changed: &str) -> (BTreeMap<String, f64>, String, PathBuf) {
    let path = s.write("c.toml", start);
    let d = Daemon::start(s, &["--config", path.to_str().unwrap()]);
    wait_for(10, "traffic", || {
        family_sum(&d.scrape(), "fastpath_rx_packets_total") > 0.0
    });
    std::fs::write(&path, changed).unwrap();
    d.signal("HUP");
    wait_for(10, "the reload", || {
        family_sum(&d.scrape(), "fastpath_config_reloads_total") >= 1.0
    });
    std::thread::sleep(Duration::from_millis(500));
    let m = d.scrape();
    let (code, log) = d.stop();
    assert_eq!(code, Some(0), "{log}");
    (m, log, path)
}

/// What a refused reload of a restart-only key leaves: one failure, no success, generation 1
/// still published, and the log naming the key with its line in the new file.
fn assert_refused(m: &BTreeMap<String, f64>, log: &str, path: &Path, key: &str, line: usize) {
    assert_eq!(m["fastpath_config_reloads_total{result=\"failure\"}"], 1.0, "{log}");
    assert_eq!(m["fastpath_config_reloads_total{result=\"success\"}"], 0.0, "{log}");
    assert_eq!(m["fastpath_config_generation"], 1.0, "{log}");
    assert!(log.contains("refused, generation 1 keeps running"), "{log}");
    assert!(
        log.contains(&format!("need a restart, not a reload: {key};")),
        "the refusal names the key: {log}"
    );
    assert!(
        log.contains(&format!("{}:{line}: {key}: ", path.display())),
        "the refusal names the key's line: {log}"
    );
}

#[test]
fn a_reload_that_changes_the_lcore_mode_is_refused_with_key_and_line() {
    let s = Scratch::new("reload-mode");
    let start = std::fs::read_to_string(null_config(&s, "reload-mode")).unwrap();
    // Line 12 of the new file, right under `rx = [0]`.
    let changed = start.replace("rx = [0]\n", "rx = [0]\nmode = \"forward\"\n");
    let (m, log, path) = reload_once(&s, &start, &changed);
    assert_refused(&m, &log, &path, "lcores.mode", 12);
    // The pipeline still runs every packet through its stages: nothing is forwarded.
    assert_eq!(outcome(&m, "forwarded"), 0);
    assert!(outcome(&m, "not_for_us") > 0);
}

#[test]
fn a_reload_that_changes_forward_to_is_refused_with_key_and_line() {
    let s = Scratch::new("reload-forward-to");
    let vdevs = [
        "--vdev=net_null0,size=64".to_string(),
        "--vdev=net_null1,size=64".to_string(),
    ];
    let start = format!(
        "[dpdk]\neal_args = {}\nmbufs = 16383\n\n[[port]]\ndevice = \"net_null0\"\nforward_to = \"net_null1\"\n\n\
         [[port]]\ndevice = \"net_null1\"\n\n[lcores]\nrx = [0]\nmode = \"forward\"\n{METRICS_ANY_PORT}",
        eal_args("reload-forward-to", &vdevs)
    );
    let changed = start.replace("forward_to = \"net_null1\"", "forward_to = \"net_null0\"");
    let (m, log, path) = reload_once(&s, &start, &changed);
    assert_refused(&m, &log, &path, "port[0].forward_to", 7);
    // The running config stays: net_null0's packets still leave by net_null1, none by net_null0.
    assert!(outcome(&m, "forwarded") > 0);
    assert_eq!(m["fastpath_tx_packets_total{port=\"net_null0\",queue=\"0\"}"], 0.0);
    assert!(m["fastpath_tx_packets_total{port=\"net_null1\",queue=\"0\"}"] > 0.0);
}

/// The CPUs each thread of `pid` may run on, by thread name.
fn thread_cpus(pid: u32) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let dir = t.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        let cpus = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap_or("")
            .trim()
            .to_string();
        out.push((comm.trim().to_string(), cpus));
    }
    out
}

#[test]
fn control_and_metrics_threads_stay_off_the_rx_lcore() {
    // RX on lcore 0, which is therefore the EAL main lcore: inheriting its affinity would put
    // every scrape and reload on the receiving CPU. They must go to the worker's CPU instead.
    let s = Scratch::new("placement");
    let cfg = s.write(
        "c.toml",
        &format!(
            "[dpdk]\neal_args = {}\nmbufs = 16383\n\n[[port]]\ndevice = \"net_null0\"\ntx_queues = 2\n\
             ipv4 = [\"192.0.2.1\"]\n\n[lcores]\nrx = [0]\nworkers = [1]\n\n[[service]]\nname = \"s\"\n\
             protocol = \"udp\"\nports = [9]\naction = \"sink\"\n{METRICS_ANY_PORT}",
            eal_args("placement", &["--vdev=net_null0,size=64".to_string()])
        ),
    );
    let d = Daemon::start(&s, &["--config", cfg.to_str().unwrap()]);
    assert!(
        d.log_text().contains("control and metrics threads on CPUs [1]"),
        "{}",
        d.log_text()
    );
    // The control thread pins itself as it starts: give it a moment.
    let mut threads = Vec::new();
    wait_for(5, "both threads pinned", || {
        threads = thread_cpus(d.child.id());
        ["fastpath-metric", "fastpath-contro"]
            .iter()
            .all(|n| threads.iter().any(|(c, cpus)| c == n && cpus == "1"))
    });
    // The receiving lcore is the main thread (EAL pins it to CPU 0); it shares with neither,
    // nor with the EAL's own threads (its interrupt thread among them), which are moved too.
    let main = threads.iter().find(|(c, _)| c == "fastpathd").expect("main thread");
    assert_eq!(main.1, "0", "{threads:?}");
    assert!(threads.iter().any(|(c, _)| c == "eal-intr-thread"), "{threads:?}");
    for (name, cpus) in &threads {
        assert!(
            name == "fastpathd" || cpus == "1",
            "{name} may run on the RX lcore's CPU: {threads:?}"
        );
    }
    // Pinned where it is, the metrics thread serves, and the RX lcore counts traffic.
    wait_for(10, "traffic seen through a scrape", || {
        family_sum(&d.scrape(), "fastpath_rx_packets_total") > 0.0
    });
    // Connections get no thread of their own (which could land anywhere): with 20 open, the
    // process has the threads it had, and none of ours runs on the RX lcore's CPU 0.
    let before = thread_cpus(d.child.id()).len();
    let addr = d.metrics.unwrap();
    let open: Vec<_> = (0..20)
        .map(|_| {
            use std::io::Write;
            let mut c = std::net::TcpStream::connect(addr).unwrap();
            write!(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let mut r = std::io::BufReader::new(c);
            read_response(&mut r);
            r
        })
        .collect();
    let threads = thread_cpus(d.child.id());
    assert_eq!(threads.len(), before, "{threads:?}");
    for (name, cpus) in &threads {
        assert!(
            !name.starts_with("fastpath-") || cpus == "1",
            "{name} may run on the RX lcore's CPU: {threads:?}"
        );
    }
    drop(open);
    let (code, log) = d.stop();
    assert_eq!(code, Some(0), "{log}");
}

/// With RX on lcore 1 and the worker on lcore 0 (the main lcore), the housekeeping CPU is the
/// worker's, 0: the EAL's own threads go there, and the RX lcore's thread stays on CPU 1 (it is
/// an lcore, never moved).
#[test]
fn eal_threads_move_but_lcores_stay() {
    let s = Scratch::new("placement-rx1");
    let cfg = s.write(
        "c.toml",
        &format!(
            "[dpdk]\neal_args = {}\nmbufs = 16383\n\n[[port]]\ndevice = \"net_null0\"\ntx_queues = 2\n\
             ipv4 = [\"192.0.2.1\"]\n\n[lcores]\nrx = [1]\nworkers = [0]\n\n[[service]]\nname = \"s\"\n\
             protocol = \"udp\"\nports = [9]\naction = \"sink\"\n{METRICS_ANY_PORT}",
            eal_args("placement-rx1", &["--vdev=net_null0,size=64".to_string()])
        ),
    );
    let d = Daemon::start(&s, &["--config", cfg.to_str().unwrap()]);
    let threads = thread_cpus(d.child.id());
    let on = |n: &str| threads.iter().find(|(c, _)| c == n).map(|(_, cpus)| cpus.clone());
    assert_eq!(on("rte-worker-1").as_deref(), Some("1"), "{threads:?}");
    assert_eq!(on("eal-intr-thread").as_deref(), Some("0"), "{threads:?}");
    assert_eq!(on("fastpathd").as_deref(), Some("0"), "{threads:?}");
    let (code, log) = d.stop();
    assert_eq!(code, Some(0), "{log}");
}

/// Reads one HTTP response (head and a body of Content-Length bytes) from `r`.
fn read_response(r: &mut impl std::io::BufRead) -> (String, String) {
    try_read_response(r).expect("a whole response before the connection closed")
}

/// [`read_response`], `None` when the connection closes or fails first.
fn try_read_response(r: &mut impl std::io::BufRead) -> Option<(String, String)> {
    let mut head = Vec::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        head.push(line.trim_end().to_string());
    }
    let len: usize = head
        .iter()
        .find_map(|h| h.strip_prefix("Content-Length: "))
        .expect("Content-Length")
        .parse()
        .unwrap();
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).ok()?;
    Some((head.join("\n"), String::from_utf8(body).unwrap()))
}

#[test]
fn scrapes_reuse_one_connection_like_prometheus() {
    use std::io::{BufReader, Read, Write};
    let s = Scratch::new("keepalive");
    let cfg = null_config(&s, "keepalive");
    let d = Daemon::start(&s, &["--config", cfg.to_str().unwrap()]);
    let addr = d.metrics.expect("metrics address");
    let conn = std::net::TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    let mut seen = Vec::new();
    for _ in 0..3 {
        write!(w, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let (head, body) = read_response(&mut r);
        assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
        assert!(head.contains("Connection: keep-alive"), "{head}");
        let m = parse_metrics(&body);
        seen.push(family_sum(&m, "fastpath_rx_packets_total"));
    }
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "counters only grow: {seen:?}");
    // Back to back on one connection: answers at least 10 ms apart, so a connection scraping
    // in a loop costs the endpoint at most 100 answers a second.
    let t = std::time::Instant::now();
    for _ in 0..21 {
        write!(w, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!(read_response(&mut r).1, "ok\n");
    }
    assert!(
        t.elapsed() >= Duration::from_millis(200),
        "21 answers in {:?}",
        t.elapsed()
    );
    // The client asks to close: answered, then closed.
    write!(w, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let (head, body) = read_response(&mut r);
    assert!(head.contains("Connection: close") && body == "ok\n", "{head} {body}");
    let mut rest = Vec::new();
    assert_eq!(r.read_to_end(&mut rest).unwrap(), 0, "closed after Connection: close");
    let (code, log) = d.stop();
    assert_eq!(code, Some(0), "{log}");
}

#[test]
fn a_dribbling_or_endless_request_head_is_cut_off() {
    use std::io::{Read, Write};
    let s = Scratch::new("slowhead");
    let cfg = null_config(&s, "slowhead");
    let d = Daemon::start(&s, &["--config", cfg.to_str().unwrap()]);
    let addr = d.metrics.expect("metrics address");
    // Closed by the server: a read returns 0 or the connection is reset, well before our 20 s.
    let closed = |c: &mut std::net::TcpStream| {
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut buf = [0u8; 64];
        match c.read(&mut buf) {
            Ok(n) => n == 0,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    };
    // A header past the 8 KiB head limit: answered 431 (RFC 6585 §5) and closed, memory stays
    // bounded.
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    write!(c, "GET /metrics HTTP/1.1\r\nX-Long: {}", "a".repeat(9 * 1024)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    let got = String::from_utf8_lossy(&got);
    assert!(
        got.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n") && got.contains("Connection: close"),
        "an over-long head: {got}"
    );
    // The deadlines are absolute, not per receive: a head dribbled a byte every 300 ms inside
    // one header line is cut off 5 s after its first byte; a connection that says nothing, 10 s
    // after the accept. Both run at once.
    let silent = std::thread::spawn(move || {
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        let t = std::time::Instant::now();
        (closed(&mut c), t.elapsed())
    });
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    let mut w = c.try_clone().unwrap();
    let t = std::time::Instant::now();
    let dribbler = std::thread::spawn(move || {
        let _ = write!(w, "GET /metrics HTTP/1.1\r\nX-Slow: ");
        while w.write_all(b"a").is_ok() && t.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(300));
        }
    });
    assert!(closed(&mut c), "a dribbled head is cut off");
    let dribbled = t.elapsed();
    assert!(
        dribbled >= Duration::from_millis(4500) && dribbled < Duration::from_secs(7),
        "cut off at the head's deadline: {dribbled:?}"
    );
    dribbler.join().unwrap();
    let (was_closed, waited) = silent.join().unwrap();
    assert!(was_closed, "a silent connection is cut off");
    assert!(
        waited >= Duration::from_millis(9500) && waited < Duration::from_secs(12),
        "cut off at the first request's deadline: {waited:?}"
    );
    let m = d.scrape();
    assert_eq!(
        m["fastpath_metrics_connections_timed_out_total{deadline=\"head\"}"],
        1.0
    );
    assert_eq!(
        m["fastpath_metrics_connections_timed_out_total{deadline=\"first_request\"}"],
        1.0
    );
    // The endpoint still serves.
    assert!(d.get("/healthz").0.contains("200 OK"));
    let (code, log) = d.stop();
    assert_eq!(code, Some(0), "{log}");
}

/// Sends `raw` on a fresh connection and returns everything the server sent until it closed.
fn exchange(addr: std::net::SocketAddr, raw: &[u8]) -> String {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(raw).unwrap();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    String::from_utf8(got).unwrap()
}

#[test]
fn head_bodies_and_connection_tokens_follow_http_semantics() {
    let s = Scratch::new("semantics");
    let cfg = null_config(&s, "semantics");
    let d = Daemon::start(&s, &["--config", cfg.to_str().unwrap()]);
    let addr = d.metrics.expect("metrics address");
    // HEAD: the headers a GET gets, Content-Length included, and no body (RFC 9110 §9.3.2).
    let got = exchange(addr, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let (head, body) = got.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
    assert!(head.contains("Content-Type: text/plain; version=0.0.4"), "{got}");
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .expect("Content-Length")
        .parse()
        .unwrap();
    assert!(len > 1000, "the length of the body a GET gets: {len}");
    assert_eq!(body, "", "no body after a HEAD");
    // A GET's body is read and skipped, not taken for the next request; the second request of
    // the pipeline says `keep-alive, close`, a token list with close in it: answered, then closed.
    let got = exchange(
        addr,
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 14\r\n\r\nGET /nope HTTP\
          GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, close\r\n\r\n",
    );
    assert_eq!(got.matches("HTTP/1.1 200 OK\r\n").count(), 2, "{got}");
    assert!(!got.contains("404"), "the body was taken for a request: {got}");
    let second = got.rsplit("HTTP/1.1 200 OK\r\n").next().unwrap();
    assert!(second.contains("Connection: close"), "{got}");
    // A chunked body is skipped too; another method is answered 405 with Allow (RFC 9110
    // §15.5.6) and the connection stays usable.
    let got = exchange(
        addr,
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n\
          GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert!(got.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"), "{got}");
    assert!(got.contains("Allow: GET, HEAD\r\n"), "{got}");
    assert!(got.ends_with("\r\n\r\nok\n"), "{got}");
    // A body past 8 KiB: 413 and closed.
    let mut big = b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 20000\r\n\r\n".to_vec();
    big.extend(std::iter::repeat_n(b'x', 20000));
    let got = exchange(addr, &big);
    assert!(got.starts_with("HTTP/1.1 413 Payload Too Large\r\n"), "{got}");
    // HTTP/1.0 closes unless asked to keep the connection.
    let got = exchange(addr, b"GET /healthz HTTP/1.0\r\n\r\n");
    assert!(got.contains("Connection: close") && got.ends_with("ok\n"), "{got}");
    let (code, log) = d.stop();
    assert_eq!(code, Some(0), "{log}");
}

#[test]
fn the_render_cache_serves_one_body_per_interval() {
    let s = Scratch::new("cache");
    let cfg = s.write(
        "c.toml",
        &format!(
            "[dpdk]\neal_args = {}\nmbufs = 16383\n\n[[port]]\ndevice = \"net_null0\"\ntx_queues = 1\n\
             ipv4 = [\"192.0.2.1\"]\n\n[lcores]\nrx = [0]\n{METRICS_ANY_PORT}cache_ms = 1000\n",
            eal_args("cache", &["--vdev=net_null0,size=64".to_string()])
        ),
    );
    let d = Daemon::start(&s, &["--config", cfg.to_str().unwrap()]);
    wait_for(10, "traffic", || {
        family_sum(&d.scrape(), "fastpath_rx_packets_total") > 0.0
    });
    // Let the body of the wait above expire, then flood: net_null delivers millions of packets
    // a second, so equal bodies can only be the cached one.
    std::thread::sleep(Duration::from_millis(1100));
    let t = std::time::Instant::now();
    let first = d.get("/metrics").1;
    let mut flood = 0;
    while t.elapsed() < Duration::from_millis(500) {
        assert_eq!(
            d.get("/metrics").1,
            first,
            "a scrape within cache_ms gets the cached body"
        );
        flood += 1;
    }
    assert!(flood >= 20, "{flood} scrapes");
    std::thread::sleep(Duration::from_millis(700));
    let after = d.get("/metrics").1;
    assert_ne!(after, first, "a scrape after cache_ms gets a new render");
    let renders = |b: &str| parse_metrics(b)["fastpath_metrics_renders_total"];
    assert_eq!(renders(&after), renders(&first) + 1.0, "one render for the whole flood");
    assert!(
        family_sum(&parse_metrics(&after), "fastpath_rx_packets_total")
            > family_sum(&parse_metrics(&first), "fastpath_rx_packets_total")
    );
    // A reload is seen at once, whatever the interval.
    d.signal("HUP");
    wait_for(5, "the reload counted", || {
        family_sum(&d.scrape(), "fastpath_config_reloads_total") >= 1.0
    });
    let (code, log) = d.stop();
    assert_eq!(code, Some(0), "{log}");
}

/// Slow clients against the endpoint until `stop`: `dribblers` send a request head a byte every
/// 2 s, `idlers` make one request and then hold the connection, both reconnecting whenever the
/// server closes on them. Returns the threads and how many connections they opened.
fn slow_clients(
    addr: std::net::SocketAddr,
    dribblers: usize,
    idlers: usize,
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> (
    Vec<std::thread::JoinHandle<()>>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::io::{BufReader, Read, Write};
    use std::sync::atomic::Ordering::Relaxed;
    let opened = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut threads = Vec::new();
    for i in 0..dribblers + idlers {
        let (stop, opened) = (stop.clone(), opened.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Relaxed) {
                let Ok(mut c) = std::net::TcpStream::connect(addr) else {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                };
                opened.fetch_add(1, Relaxed);
                c.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
                if i < dribblers {
                    let head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaa";
                    let mut at = std::time::Instant::now() - Duration::from_secs(2);
                    for b in head.iter().cycle() {
                        if stop.load(Relaxed) {
                            return;
                        }
                        if at.elapsed() >= Duration::from_secs(2) {
                            if c.write_all(&[*b]).is_err() {
                                break;
                            }
                            at = std::time::Instant::now();
                        }
                        // Closed by the server (0 or a reset): reconnect.
                        match c.read(&mut [0u8; 512]) {
                            Ok(_) => break,
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                            Err(_) => break,
                        }
                    }
                } else {
                    if write!(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").is_err() {
                        continue;
                    }
                    let mut r = BufReader::new(c);
                    loop {
                        if stop.load(Relaxed) {
                            return;
                        }
                        match r.read(&mut [0u8; 512]) {
                            Ok(0) => break,
                            Ok(_) => {}
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                            Err(_) => break,
                        }
                    }
                }
            }
        }));
    }
    (threads, opened)
}

#[test]
fn a_scrape_is_answered_within_a_second_while_64_slow_clients_hold_connections() {
    use std::sync::atomic::Ordering::Relaxed;
    let s = Scratch::new("slowloris");
    let cfg = null_config(&s, "slowloris");
    let d = Daemon::start(&s, &["--config", cfg.to_str().unwrap()]);
    let addr = d.metrics.expect("metrics address");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (threads, opened) = slow_clients(addr, 32, 32, &stop);
    wait_for(20, "64 slow connections", || opened.load(Relaxed) >= 64);
    std::thread::sleep(Duration::from_millis(500));
    let mut worst = Duration::ZERO;
    for _ in 0..20 {
        let t = std::time::Instant::now();
        let (status, body) = d.get("/metrics");
        worst = worst.max(t.elapsed());
        assert!(status.contains("200 OK"), "{status}");
        assert!(body.contains("fastpath_rx_packets_total"));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(worst < Duration::from_secs(1), "slowest scrape {worst:?}");
    let m = d.scrape();
    let evicted = m["fastpath_metrics_connections_evicted_total"];
    assert!(evicted >= 48.0, "64 slow clients over 16 slots: {evicted} evicted");
    assert_eq!(m["fastpath_metrics_connections_refused_total"], 0.0);
    stop.store(true, Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    eprintln!("slowest of 20 scrapes under 64 slow clients: {worst:?}, {evicted} evicted");
    let (code, log) = d.stop();
    assert_eq!(code, Some(0), "{log}");
}

/// One daemon stopped while scrapes are in flight: four scrapers back to back (two on kept
/// connections, two on new ones each time), an idle keep-alive and a dribbler. Exit 0, no
/// `BUG:` line, every packet counted once and every mbuf back at exit.
fn stop_while_scraping(i: usize) {
    use std::io::{BufReader, Write};
    use std::sync::atomic::Ordering::Relaxed;
    let name = format!("stops{i}");
    let s = Scratch::new(&name);
    let cfg = null_config(&s, &name);
    let dump = s.path("metrics.prom");
    let d = Daemon::start(
        &s,
        &[
            "--config",
            cfg.to_str().unwrap(),
            "--metrics-dump",
            dump.to_str().unwrap(),
        ],
    );
    let addr = d.metrics.expect("metrics address");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (mut threads, _) = slow_clients(addr, 1, 1, &stop);
    let scrapes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for kept in [true, true, false, false] {
        let (stop, scrapes) = (stop.clone(), scrapes.clone());
        threads.push(std::thread::spawn(move || {
            'outer: while !stop.load(Relaxed) {
                let Ok(c) = std::net::TcpStream::connect(addr) else {
                    return;
                };
                c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut w = c.try_clone().unwrap();
                let mut r = BufReader::new(c);
                loop {
                    let close = if kept { "" } else { "Connection: close\r\n" };
                    if write!(w, "GET /metrics HTTP/1.1\r\nHost: x\r\n{close}\r\n").is_err() {
                        continue 'outer;
                    }
                    // None: the daemon stopped mid-request.
                    if try_read_response(&mut r).is_none() {
                        return;
                    }
                    scrapes.fetch_add(1, Relaxed);
                    if !kept || stop.load(Relaxed) {
                        continue 'outer;
                    }
                }
            }
        }));
    }
    wait_for(10, "scrapes", || scrapes.load(Relaxed) >= 8);
    let (code, log) = d.stop();
    stop.store(true, Relaxed);
    for t in threads {
        let _ = t.join();
    }
    assert_eq!(code, Some(0), "{log}");
    assert!(!log.contains("BUG:"), "{log}");
    assert!(!log.contains("mbufs were not returned"), "{log}");
    assert_conservation(&parse_metrics(&std::fs::read_to_string(&dump).unwrap()));
}

#[test]
fn fifty_stops_with_scrapes_in_flight_exit_cleanly() {
    // Five daemons at a time: each stop lands while its scrapers are mid-request.
    for round in 0..10 {
        let daemons: Vec<_> = (0..5)
            .map(|j| std::thread::spawn(move || stop_while_scraping(round * 5 + j)))
            .collect();
        for d in daemons {
            d.join().expect("a stop went wrong (its log is above)");
        }
    }
}

/// `[control] watch = false`: saving the file reloads nothing, SIGHUP does; with the watch on, a
/// tool writing the file in steps closer than `debounce_ms` causes one reload, of the last step.
#[test]
fn the_file_watch_can_be_turned_off_and_debounces_writes_in_steps() {
    let s = Scratch::new("watch");
    let base = std::fs::read_to_string(null_config(&s, "watch")).unwrap();
    let path = s.write("c.toml", &base.replace("[control]\n", "[control]\nwatch = false\n"));
    let d = Daemon::start(&s, &["--config", path.to_str().unwrap()]);
    let reloads = |d: &Daemon| family_sum(&d.scrape(), "fastpath_config_reloads_total");
    // An edit (a new address) with the watch off: nothing happens for well past the debounce.
    std::fs::write(
        &path,
        base.replace("[control]\n", "[control]\nwatch = false\n")
            .replace("\"192.0.2.1\"", "\"192.0.2.1\", \"192.0.2.9\""),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(reloads(&d), 0.0, "{}", d.log_text());
    // SIGHUP always reloads; this one also turns the watch on, debounced by 600 ms.
    let stepped = |step: usize| {
        base.replace("[control]\n", "[control]\nwatch = true\ndebounce_ms = 600\n")
            .replace("\"192.0.2.1\"", &format!("\"192.0.2.1\", \"192.0.2.{}\"", 10 + step))
    };
    std::fs::write(&path, stepped(0)).unwrap();
    d.signal("HUP");
    wait_for(10, "the SIGHUP reload", || reloads(&d) == 1.0);
    // Five writes 150 ms apart (each sooner than the debounce), then quiet: one reload.
    for step in 1..=5 {
        std::thread::sleep(Duration::from_millis(150));
        std::fs::write(&path, stepped(step)).unwrap();
    }
    wait_for(10, "the debounced reload", || reloads(&d) == 2.0);
    std::thread::sleep(Duration::from_millis(1200));
    let m = d.scrape();
    let (code, log) = d.stop();
    assert_eq!(code, Some(0), "{log}");
    assert_eq!(m["fastpath_config_reloads_total{result=\"success\"}"], 2.0, "{log}");
    assert_eq!(m["fastpath_config_generation"], 3.0, "{log}");
    assert!(
        log.contains("reload (SIGHUP)") && log.contains("reload (file changed)"),
        "{log}"
    );
    assert!(log.contains("192.0.2.15"), "the last step is what was loaded: {log}");
}

/// systemd's notification protocol, as a `Type=notify` unit with `WatchdogSec=` sees it: READY=1
/// once running, watchdog pings, RELOADING=1 then READY=1 around a SIGHUP reload, STOPPING=1.
#[test]
fn systemd_notifications_ready_reloading_watchdog_stopping() {
    let s = Scratch::new("notify");
    let sock_path = s.path("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let cfg = null_config(&s, "notify");
    let mut cmd = fastpathd();
    cmd.args(["--config", cfg.to_str().unwrap()])
        .env("NOTIFY_SOCKET", &sock_path)
        .env("WATCHDOG_USEC", "200000");
    let d = Daemon::start_cmd(&s, &mut cmd);
    let next = |what: &str| -> String {
        let mut buf = [0u8; 512];
        loop {
            let n = sock
                .recv(&mut buf)
                .unwrap_or_else(|e| panic!("waiting for {what}: {e}"));
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            if msg.contains(what) {
                return msg;
            }
        }
    };
    let ready = next("READY=1");
    assert!(ready.contains(&format!("MAINPID={}", d.child.id())), "{ready}");
    assert!(
        d.log_text().contains("fastpathd: running"),
        "READY=1 comes once running"
    );
    // Pings at half the watchdog period: several within a second.
    let t = std::time::Instant::now();
    for _ in 0..3 {
        next("WATCHDOG=1");
    }
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    d.signal("HUP");
    next("RELOADING=1");
    let after = next("READY=1");
    assert!(after.contains("reload was applied"), "{after}");
    d.signal("TERM");
    next("STOPPING=1");
    let (code, log) = d.stop();
    assert_eq!(code, Some(0), "{log}");
}
