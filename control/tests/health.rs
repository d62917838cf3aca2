//! `/healthz` means something: a port whose link goes down (a veth whose peer end is set down,
//! read through its kernel interface because DPDK's af_packet always says up; a `net_tap` whose
//! tap is set down) and an lcore that stops polling each turn it into 503 with a one-line
//! reason, and back to 200 once fixed; `fastpath_port_link_up` follows the link and each change
//! is logged once.

mod common;

use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

/// fastpathd's namespace `a` and the peer's `b` ([`VethPair`]).
struct Link(VethPair);

impl std::ops::Deref for Link {
    type Target = VethPair;
    fn deref(&self) -> &VethPair {
        &self.0
    }
}

impl Link {
    fn new() -> Link {
        Link(VethPair::new("fph"))
    }

    /// GET `path` from the daemon's endpoint in namespace a: (status code, body).
    fn get(&self, port: u16, path: &str) -> (u16, String) {
        get_in(&self.ns_a, port, path)
    }
}

/// GET `path` from an endpoint on loopback port `port` inside namespace `ns`: (status code,
/// body).
fn get_in(ns: &str, port: u16, path: &str) -> (u16, String) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "curl", "-s", "-m", "5", "-w", "\n%{http_code}"])
        .arg(format!("http://127.0.0.1:{port}{path}"))
        .output()
        .expect("curl is needed (ci/setup installs it)");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// Polls `get` every 10 ms until `cond` holds on its answer, within `secs`; returns the answer
/// and how long it took.
fn until<T: std::fmt::Debug>(
    secs: u64,
    what: &str,
    mut get: impl FnMut() -> T,
    cond: impl Fn(&T) -> bool,
) -> (T, Duration) {
    let t = Instant::now();
    loop {
        let v = get();
        if cond(&v) {
            return (v, t.elapsed());
        }
        assert!(
            t.elapsed() < Duration::from_secs(secs),
            "timed out waiting for {what}: last {v:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn link_metric(body: &str, port: &str) -> Option<f64> {
    parse_metrics(body)
        .get(&format!("fastpath_port_link_up{{port=\"{port}\"}}"))
        .copied()
}

#[test]
fn a_veth_whose_peer_goes_down_and_up_turns_healthz_503_and_back() {
    let l = Link::new();
    let s = Scratch::new("health-link");
    let port = free_port();
    let cfg = s.write(
        "c.toml",
        &format!(
            "[dpdk]\neal_args = {}\nmbufs = 8191\n\n[[port]]\ndevice = \"net_af_packet0\"\nrx_queues = 2\ntx_queues = 2\n\
             ipv4 = [\"192.0.2.1\"]\n\n[lcores]\nrx = [0]\nworkers = [1]\n\n[control]\nsocket = \"control.sock\"\n\n[metrics]\nlisten = \"127.0.0.1:{port}\"\ncache_ms = 0\n\
             [reassembly]\nbuffers = 32\n",
            eal_args("health-link", &[format!("--vdev=net_af_packet0,iface={},qpairs=2", l.if_a)])
        ),
    );
    let bin = env!("CARGO_BIN_EXE_fastpathd");
    let d = Daemon::start_cmd(
        &s,
        Command::new("ip").args(["netns", "exec", &l.ns_a, bin, "--config", cfg.to_str().unwrap()]),
    );
    let (ok, _) = until(5, "healthy", || l.get(port, "/healthz"), |a| a.0 == 200);
    assert_eq!(ok.1, "ok\n");
    assert_eq!(link_metric(&l.get(port, "/metrics").1, "net_af_packet0"), Some(1.0));

    // The far end goes down: our end loses its carrier (af_packet itself would still say up).
    ip(&["-n", &l.ns_b, "link", "set", &l.if_b, "down"]);
    let ((code, why), took) = until(5, "503", || l.get(port, "/healthz"), |a| a.0 == 503);
    assert_eq!(code, 503);
    // (The operstate that follows may still lag the carrier: it is given, not checked.)
    let want = format!(
        "port net_af_packet0 link down (kernel interface {}: no carrier, operstate ",
        l.if_a
    );
    assert!(
        why.starts_with(&want) && why.ends_with(")\n") && why.lines().count() == 1,
        "{why}"
    );
    eprintln!("link down seen by /healthz after {took:?}");
    assert_eq!(link_metric(&l.get(port, "/metrics").1, "net_af_packet0"), Some(0.0));
    // Still down a while later: one log line, not one per check.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(l.get(port, "/healthz").0, 503);

    ip(&["-n", &l.ns_b, "link", "set", &l.if_b, "up"]);
    let ((_, body), took) = until(5, "200 again", || l.get(port, "/healthz"), |a| a.0 == 200);
    assert_eq!(body, "ok\n");
    eprintln!("link up seen by /healthz after {took:?}");
    assert_eq!(link_metric(&l.get(port, "/metrics").1, "net_af_packet0"), Some(1.0));
    std::thread::sleep(Duration::from_millis(200));

    let (code, log) = d.stop();
    assert_eq!(code, Some(0));
    let downs: Vec<&str> = log.lines().filter(|x| x.contains("link down")).collect();
    let ups: Vec<&str> = log.lines().filter(|x| x.contains("link up")).collect();
    assert_eq!(downs.len(), 1, "{log}");
    assert!(
        downs[0].starts_with(&format!(
            "fastpathd: port net_af_packet0: link down ({}",
            &want["port net_af_packet0 link down (".len()..]
        )),
        "the log line gives the reason /healthz gave: {log}"
    );
    assert_eq!(
        ups,
        [format!("fastpathd: port net_af_packet0: link up (kernel interface {})", l.if_a).as_str()],
        "{log}"
    );
}

/// A namespace for fastpathd on a DPDK `net_tap` port (the tap is created inside it when the
/// port starts and goes with the process); removed on drop, even when the test fails.
struct TapNs {
    ns: String,
    tap: String,
}

impl TapNs {
    fn new() -> TapNs {
        let id = std::process::id() % 100_000;
        let t = TapNs {
            ns: format!("fph{id}t"),
            tap: format!("fphtap{id}"),
        };
        ip(&["netns", "add", &t.ns]);
        ip(&["-n", &t.ns, "link", "set", "lo", "up"]);
        t
    }
}

impl Drop for TapNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

#[test]
fn a_tap_set_down_and_up_turns_healthz_503_and_back() {
    if missing(&["curl"]) {
        return;
    }
    let t = TapNs::new();
    let s = Scratch::new("health-tap");
    let port = free_port();
    let cfg = s.write(
        "c.toml",
        &format!(
            "[dpdk]\neal_args = {}\nmbufs = 8191\n\n[[port]]\ndevice = \"net_tap0\"\ntx_queues = 1\n\
             ipv4 = [\"192.0.2.1\"]\n\n[lcores]\nrx = [0]\n\n[control]\nsocket = \"control.sock\"\n\n[metrics]\nlisten = \"127.0.0.1:{port}\"\ncache_ms = 0\n\
             [reassembly]\nbuffers = 32\n",
            eal_args("health-tap", &[format!("--vdev=net_tap0,iface={}", t.tap)])
        ),
    );
    let bin = env!("CARGO_BIN_EXE_fastpathd");
    let d = Daemon::start_cmd(
        &s,
        Command::new("ip").args(["netns", "exec", &t.ns, bin, "--config", cfg.to_str().unwrap()]),
    );
    let get = |path: &str| get_in(&t.ns, port, path);
    // DPDK brings the tap up when it starts the port.
    let (ok, _) = until(5, "healthy", || get("/healthz"), |a| a.0 == 200);
    assert_eq!(ok.1, "ok\n");
    assert_eq!(link_metric(&get("/metrics").1, "net_tap0"), Some(1.0));

    // The tap itself is set down (administratively: its carrier can no longer be read).
    ip(&["-n", &t.ns, "link", "set", &t.tap, "down"]);
    let ((_, why), took) = until(5, "503", || get("/healthz"), |a| a.0 == 503);
    // (The operstate may still lag: it is given, not checked.)
    let want = format!(
        "port net_tap0 link down (kernel interface {}: no carrier, operstate ",
        t.tap
    );
    assert!(
        why.starts_with(&want) && why.ends_with(")\n") && why.lines().count() == 1,
        "{why}"
    );
    eprintln!("tap down seen by /healthz after {took:?}");
    assert_eq!(link_metric(&get("/metrics").1, "net_tap0"), Some(0.0));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(get("/healthz").0, 503);

    ip(&["-n", &t.ns, "link", "set", &t.tap, "up"]);
    let ((_, body), took) = until(5, "200 again", || get("/healthz"), |a| a.0 == 200);
    assert_eq!(body, "ok\n");
    eprintln!("tap up seen by /healthz after {took:?}");
    assert_eq!(link_metric(&get("/metrics").1, "net_tap0"), Some(1.0));
    std::thread::sleep(Duration::from_millis(200));

    let (code, log) = d.stop();
    assert_eq!(code, Some(0));
    let downs: Vec<&str> = log.lines().filter(|x| x.contains("link down")).collect();
    assert_eq!(downs.len(), 1, "{log}");
    assert!(
        downs[0].starts_with(&format!(
            "fastpathd: port net_tap0: link down ({}",
            &want["port net_tap0 link down (".len()..]
        )),
        "{log}"
    );
    assert_eq!(
        log.lines().filter(|x| x.contains("link up")).collect::<Vec<_>>(),
        [format!("fastpathd: port net_tap0: link up (kernel interface {})", t.tap).as_str()],
        "{log}"
    );
}

#[test]
fn a_port_whose_driver_reports_link_down_at_start_runs_but_is_unhealthy() {
    // A memif server nobody connects to: it starts (unlike a client without a server, exit 3)
    // with its link down, which the driver itself reports.
    let s = Scratch::new("health-memif");
    let cfg = s.write(
        "c.toml",
        &format!(
            "[dpdk]\neal_args = {}\nmbufs = 8191\n\n[[port]]\ndevice = \"net_memif0\"\ntx_queues = 1\n\
             ipv4 = [\"192.0.2.1\"]\n\n[lcores]\nrx = [0]\n{METRICS_ANY_PORT}cache_ms = 0\n[reassembly]\nbuffers = 32\n",
            eal_args(
                "health-memif",
                &[format!("--vdev=net_memif0,role=server,socket={}", s.path("memif.sock").display())]
            )
        ),
    );
    let d = Daemon::start(&s, &["--config", cfg.to_str().unwrap()]);
    // The first check runs before `running` is printed: no `starting` window.
    let (status, why) = d.get("/healthz");
    assert!(status.contains("503"), "{status}");
    assert_eq!(why, "port net_memif0 link down (the driver reports it down)\n");
    let m = d.scrape();
    assert_eq!(m.get("fastpath_port_link_up{port=\"net_memif0\"}"), Some(&0.0));
    let (code, log) = d.stop();
    assert_eq!(code, Some(0));
    assert_eq!(
        log.lines().filter(|l| l.contains("link down")).collect::<Vec<_>>(),
        ["fastpathd: port net_memif0: link down at start (the driver reports it down)"]
    );
}

#[test]
fn an_lcore_that_stops_polling_is_reported_within_a_second() {
    let s = Scratch::new("health-stuck");
    let pcap = repo().join("configs/captures/demo.pcap");
    let cfg = s.write(
        "c.toml",
        &format!(
            "[dpdk]\neal_args = {}\nmbufs = 8191\n\n[[port]]\ndevice = \"net_pcap0\"\ntx_queues = 2\n\
             ipv4 = [\"192.0.2.1\"]\n\n[lcores]\nrx = [0]\nworkers = [1]\n{METRICS_ANY_PORT}\
             [reassembly]\nbuffers = 32\n\n[[service]]\nname = \"sink\"\nports = [9]\naction = \"sink\"\n",
            eal_args(
                "health-stuck",
                &[format!(
                    "--vdev=net_pcap0,rx_pcap={},tx_pcap={},tx_pcap={}",
                    pcap.display(),
                    s.path("out0.pcap").display(),
                    s.path("out1.pcap").display()
                )]
            )
        ),
    );
    let d = Daemon::start(&s, &["--config", cfg.to_str().unwrap()]);
    let (ok, _) = until(5, "healthy", || d.get("/healthz"), |a| a.0.contains("200"));
    assert_eq!(ok.1, "ok\n");

    // Worker lcore 1 runs on an EAL thread of its own; stop it for 2 s.
    let tid = thread_named(d.child.id(), "rte-worker-1");
    let stopped = StoppedThread::new(tid, 2.0);
    let ((status, why), took) = until(3, "503", || d.get("/healthz"), |a| a.0.contains("503"));
    assert!(status.contains("503 Service Unavailable"), "{status}");
    assert!(
        why.starts_with("lcore 1 (worker) not polling for 0.") && why.ends_with(" s\n") && why.lines().count() == 1,
        "{why}"
    );
    eprintln!("stuck lcore reported {took:?} after it stopped");
    assert!(took < Duration::from_secs(1), "detected in {took:?}");
    // Still reported while it stays stopped, with the time growing.
    std::thread::sleep(Duration::from_millis(600));
    let (_, later) = d.get("/healthz");
    assert!(later.starts_with("lcore 1 (worker) not polling for 1."), "{later}");

    stopped.wait();
    let ((_, body), _) = until(3, "200 again", || d.get("/healthz"), |a| a.0.contains("200"));
    assert_eq!(body, "ok\n");
    let (code, _) = d.stop();
    assert_eq!(code, Some(0));
}
