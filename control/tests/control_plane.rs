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
         idle_sleep_us = 100\n{METRICS_ANY_PORT}\n[icmp]\nburst = {burst}\n\n[flow_limit]\ntable_len = {table_len}\n\n\
         [reassembly]\ntimeout_ms = {timeout}\nbuffers = 32\n\n\
         [[service]]\nname = \"echo\"\nports = [7]\nsockets = 2\nsocket_capacity = 1024\naction = \"{action}\"\n",
        eal_args(name, &[vdev])
    )
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
    wait_for(10, "traffic", || {
        family_sum(&d.scrape(), "fastpath_rx_packets_total") > 0.0
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
        wait_for(10, "a reload", || reloads(&d.scrape()) >= expected);
        if i % 5 == 4 {
            std::fs::write(&path, &bad[bad_done % bad.len()]).unwrap();
            d.signal("HUP");
            expected += 1.0;
            bad_done += 1;
            wait_for(10, "a refused reload", || reloads(&d.scrape()) >= expected);
        }
    }
    let live = d.scrape();
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
    // The receiving lcore is the main thread (EAL pins it to CPU 0); it shares with neither.
    let main = threads.iter().find(|(c, _)| c == "fastpathd").expect("main thread");
    assert_eq!(main.1, "0", "{threads:?}");
    // Pinned where it is, the metrics thread serves, and the RX lcore counts traffic.
    wait_for(10, "traffic seen through a scrape", || {
        family_sum(&d.scrape(), "fastpath_rx_packets_total") > 0.0
    });
    let (code, log) = d.stop();
    assert_eq!(code, Some(0), "{log}");
}

/// Reads one HTTP response (head and a body of Content-Length bytes) from `r`.
fn read_response(r: &mut impl std::io::BufRead) -> (String, String) {
    let mut head = Vec::new();
    loop {
        let mut line = String::new();
        assert!(r.read_line(&mut line).unwrap() > 0, "connection closed mid-response");
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
    r.read_exact(&mut body).unwrap();
    (head.join("\n"), String::from_utf8(body).unwrap())
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
    // A header that never ends: dropped after the 8 KiB head limit, memory stays bounded.
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    write!(c, "GET /metrics HTTP/1.1\r\nX-Long: ").unwrap();
    let chunk = [b'a'; 1024];
    for _ in 0..64 {
        if c.write_all(&chunk).is_err() {
            break;
        }
    }
    assert!(closed(&mut c), "an endless header line is cut off");
    // A request line, then nothing: dropped once the head's time is up.
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    write!(c, "GET /metrics HTTP/1.1\r\n").unwrap();
    let t = std::time::Instant::now();
    assert!(closed(&mut c), "a stalled head is cut off");
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    // The endpoint still serves.
    assert!(d.get("/healthz").0.contains("200 OK"));
    let (code, log) = d.stop();
    assert_eq!(code, Some(0), "{log}");
}
