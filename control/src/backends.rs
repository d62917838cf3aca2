//! Backend health checks: whether each `[[tunnel]]` with a `health` check takes flows.
//!
//! One thread per checked tunnel (named `fastpath-health`, pinned with the control threads, off
//! the RX lcores) runs its check every `health_interval_ms`: a TCP connect, or an HTTP GET
//! answered 2xx, within `health_timeout_ms`. A [`Machine`] turns results into a state: `fall`
//! failures in a row take an up backend down, `rise` successes bring it back. A change sets
//! one atomic flag; the control thread sees it at its next tick (10 ms) and publishes a new
//! generation built from the running config and these states, exactly as a reload publishes
//! one (no file read, no packet lost): a down backend has no slot in its services' Maglev
//! tables, so its flows move and no others. The checks never touch the data path, and the
//! control thread never waits for a check.
//!
//! A backend starts **up**: a restart or a reload must not empty a table before the first
//! checks ran (a backend that is really dead leaves after `fall` checks, 3 s by default).
//! A reload keeps the state of a tunnel whose name and check (what it connects to) did not
//! change. When every backend of a service with a check would be down, the service keeps all
//! of them ([`fail_open`]): the checks may be failing on our side (a firewall, our own
//! address), and sending to backends that may be alive beats sending nowhere.

use crate::config::{Check, Config, HealthConfig};
use fastpath::pipeline::maglev::Backend;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a stop waits for the check threads (a check under way finishes first).
pub const STOP_WAIT: Duration = Duration::from_secs(1);

/// The rise/fall state machine of one backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Machine {
    rise: u32,
    fall: u32,
    up: bool,
    /// Consecutive results against the current state (failures while up, successes while down).
    run: u32,
}

impl Machine {
    /// A backend in state `up` that needs `rise` successes / `fall` failures in a row to change.
    pub fn new(rise: u32, fall: u32, up: bool) -> Machine {
        Machine {
            rise: rise.max(1),
            fall: fall.max(1),
            up,
            run: 0,
        }
    }

    /// Whether the backend is up.
    pub fn up(&self) -> bool {
        self.up
    }

    /// Takes one check's result; returns the new state when it changed.
    pub fn observe(&mut self, ok: bool) -> Option<bool> {
        if ok == self.up {
            self.run = 0;
            return None;
        }
        self.run += 1;
        let needed = if self.up { self.fall } else { self.rise };
        if self.run < needed {
            return None;
        }
        self.up = ok;
        self.run = 0;
        Some(ok)
    }
}

/// The "all down, keep serving" rule: when no backend that could take flows (weight above 0,
/// not drained) is up but some are down, marks them all up and returns true; otherwise changes
/// nothing. A table is never emptied by health checks.
pub fn fail_open(backends: &mut [Backend]) -> bool {
    let eligible = |b: &Backend| !b.drain && b.weight > 0;
    let any_up = backends.iter().any(|b| eligible(b) && b.up);
    let any_down = backends.iter().any(|b| eligible(b) && !b.up);
    if any_up || !any_down {
        return false;
    }
    for b in backends.iter_mut() {
        b.up = true;
    }
    true
}

/// Runs one check; `Err` says why it failed.
pub fn probe(check: &Check, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    match check {
        Check::Tcp(addr) => TcpStream::connect_timeout(addr, timeout)
            .map(drop)
            .map_err(|e| format!("connect to {addr}: {e}")),
        Check::Http { addr, host, path } => {
            let mut s = TcpStream::connect_timeout(addr, timeout).map_err(|e| format!("connect to {addr}: {e}"))?;
            let left = || {
                deadline
                    .checked_duration_since(Instant::now())
                    .filter(|d| !d.is_zero())
                    .ok_or_else(|| format!("no answer from {addr} within {} ms", timeout.as_millis()))
            };
            s.set_write_timeout(Some(left()?)).map_err(|e| e.to_string())?;
            // HTTP/1.0 and close: the server answers without chunking or keep-alive, and the
            // status line is all that is read.
            // One write (one segment): `write!` would send it piecewise.
            let request = format!(
                "GET {path} HTTP/1.0\r\nHost: {host}\r\nUser-Agent: fastpathd-health\r\nConnection: close\r\n\r\n"
            );
            s.write_all(request.as_bytes())
                .map_err(|e| format!("send to {addr}: {e}"))?;
            let mut head = Vec::with_capacity(256);
            let mut buf = [0u8; 256];
            while !head.contains(&b'\n') && head.len() < 1024 {
                s.set_read_timeout(Some(left()?)).map_err(|e| e.to_string())?;
                match s.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                        return Err(format!("no answer from {addr} within {} ms", timeout.as_millis()))
                    }
                    Err(e) => return Err(format!("read from {addr}: {e}")),
                }
            }
            let line = String::from_utf8_lossy(head.split(|&b| b == b'\n').next().unwrap_or(&[]))
                .trim_end()
                .to_string();
            let mut words = line.split(' ');
            let status = match (words.next(), words.next()) {
                (Some(v), Some(code)) if v.starts_with("HTTP/1.") && code.len() == 3 => code.parse::<u16>().ok(),
                _ => None,
            };
            match status {
                Some(200..=299) => Ok(()),
                Some(code) => Err(format!("GET http://{host}{path}: status {code}")),
                None => Err(format!("GET http://{host}{path}: not an HTTP answer: {line:?}")),
            }
        }
    }
}

/// One checked tunnel's state, shared by its check thread and the readers.
pub struct Tracked {
    /// The tunnel's name.
    pub name: String,
    /// Its check.
    pub health: HealthConfig,
    up: AtomicBool,
    to_up: AtomicU64,
    to_down: AtomicU64,
    last: Mutex<String>,
    /// Dropped to stop the thread.
    stop: Mutex<Option<Sender<()>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// What the metrics and `fastpathctl` show of one checked tunnel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TunnelHealth {
    /// The tunnel's name.
    pub name: String,
    /// `health` as written.
    pub spec: String,
    /// Up (takes flows) or down.
    pub up: bool,
    /// Changes to up.
    pub to_up: u64,
    /// Changes to down.
    pub to_down: u64,
    /// The last check's result: `ok`, or why it failed; empty before the first.
    pub last: String,
}

impl Tracked {
    fn snapshot(&self) -> TunnelHealth {
        TunnelHealth {
            name: self.name.clone(),
            spec: self.health.spec.clone(),
            up: self.up.load(Relaxed),
            to_up: self.to_up.load(Relaxed),
            to_down: self.to_down.load(Relaxed),
            last: self.last.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }

    /// Stops its thread (at its next wait; a check under way finishes first, within its
    /// timeout) and returns the thread to join.
    fn stop(&self) -> Option<JoinHandle<()>> {
        self.stop.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.thread.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// Pins a thread (named for the log) where the control threads run.
pub type Pin = Arc<dyn Fn(&str) + Send + Sync>;

/// Every checked tunnel, the flag the control thread polls, and the services serving with
/// every backend down.
pub struct BackendHealth {
    tracked: Mutex<Vec<Arc<Tracked>>>,
    changed: Arc<AtomicBool>,
    failing_open: Mutex<Vec<String>>,
    stopped: Mutex<Vec<JoinHandle<()>>>,
    pin: Pin,
}

impl Default for BackendHealth {
    fn default() -> Self {
        BackendHealth::new(Arc::new(|_: &str| {}))
    }
}

impl BackendHealth {
    /// No check yet; threads it starts call `pin` first.
    pub fn new(pin: Pin) -> BackendHealth {
        BackendHealth {
            tracked: Mutex::default(),
            changed: Arc::default(),
            failing_open: Mutex::default(),
            stopped: Mutex::default(),
            pin,
        }
    }

    /// Starts, keeps or stops checks to match `cfg`'s tunnels: a tunnel whose name and check
    /// are the same keeps its state (and, with the same timing, its thread); any other checked
    /// tunnel starts up. Called by the control thread before it builds a generation.
    pub fn sync(&self, cfg: &Config) {
        let mut tracked = self.tracked.lock().unwrap_or_else(|e| e.into_inner());
        let mut old: Vec<Arc<Tracked>> = std::mem::take(&mut *tracked);
        for t in &cfg.tunnels {
            let Some(h) = &t.health else { continue };
            let prev = old
                .iter()
                .position(|o| o.name == t.name && o.health.check == h.check)
                .map(|i| old.swap_remove(i));
            match prev {
                Some(p) if p.health == *h => tracked.push(p),
                prev => {
                    let n = Arc::new(Tracked {
                        name: t.name.clone(),
                        health: h.clone(),
                        up: AtomicBool::new(true),
                        to_up: AtomicU64::new(0),
                        to_down: AtomicU64::new(0),
                        last: Mutex::default(),
                        stop: Mutex::default(),
                        thread: Mutex::default(),
                    });
                    if let Some(p) = prev {
                        // Same check, new timing: the state and counts carry over.
                        n.up.store(p.up.load(Relaxed), Relaxed);
                        n.to_up.store(p.to_up.load(Relaxed), Relaxed);
                        n.to_down.store(p.to_down.load(Relaxed), Relaxed);
                        *n.last.lock().unwrap_or_else(|e| e.into_inner()) =
                            p.last.lock().unwrap_or_else(|e| e.into_inner()).clone();
                        old.push(p);
                    } else {
                        tracing::info!(
                            "fastpathd: backend {}: health check {} every {} ms, starting up",
                            t.name,
                            h.spec,
                            h.interval.as_millis()
                        );
                    }
                    self.start(&n);
                    tracked.push(n);
                }
            }
        }
        let mut stopped = self.stopped.lock().unwrap_or_else(|e| e.into_inner());
        for o in old {
            if let Some(j) = o.stop() {
                stopped.push(j);
            }
        }
        // A removed tunnel's state left the table with it: a rebuild follows anyway.
        stopped.retain(|j| !j.is_finished());
    }

    fn start(&self, t: &Arc<Tracked>) {
        let (tx, rx) = channel::<()>();
        *t.stop.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
        let (t2, changed, pin) = (t.clone(), self.changed.clone(), self.pin.clone());
        let spawned = std::thread::Builder::new()
            .name("fastpath-health".into())
            .spawn(move || {
                pin("health check");
                run(&t2, &rx, &changed)
            });
        match spawned {
            Ok(j) => *t.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(j),
            // The backend stays up, as if every check passed: logged, never fatal.
            Err(e) => tracing::error!("fastpathd: backend {}: cannot start its health check: {e}", t.name),
        }
    }

    /// Whether tunnel `name` takes flows as far as its check says (true without a check).
    pub fn up_of(&self, name: &str) -> bool {
        self.tracked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|t| t.name == name)
            .is_none_or(|t| t.up.load(Relaxed))
    }

    /// Asks the control thread to build and publish again.
    pub fn mark_changed(&self) {
        self.changed.store(true, Relaxed);
    }

    /// Whether a state changed since the last call (the control thread's poll).
    pub fn take_changed(&self) -> bool {
        self.changed.swap(false, Relaxed)
    }

    /// Every checked tunnel's state.
    pub fn snapshot(&self) -> Vec<TunnelHealth> {
        self.tracked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|t| t.snapshot())
            .collect()
    }

    /// The services serving with all their backends although every one fails its check.
    pub fn failing_open(&self) -> Vec<String> {
        self.failing_open.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Records the services of a newly built generation that fail open, logging each change.
    pub fn set_failing_open(&self, now: Vec<String>) {
        let mut was = self.failing_open.lock().unwrap_or_else(|e| e.into_inner());
        for s in now.iter().filter(|s| !was.contains(s)) {
            tracing::warn!(
                "fastpathd: service {s}: every backend fails its health check; sending to all of them (the checks may be failing on our side)"
            );
        }
        for s in was.iter().filter(|s| !now.contains(s)) {
            tracing::info!("fastpathd: service {s}: a backend passes its health check again");
        }
        *was = now;
    }

    /// Stops every check and joins the threads that end within [`STOP_WAIT`]; a check still
    /// connecting then (a long `health_timeout_ms`) is left to end with the process: it holds
    /// nothing but its socket. The states stay: the metrics written at exit report a backend
    /// that was down as down.
    pub fn stop(&self) {
        let tracked = self.tracked.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut joins: Vec<JoinHandle<()>> = tracked.iter().filter_map(|t| t.stop()).collect();
        joins.append(&mut self.stopped.lock().unwrap_or_else(|e| e.into_inner()));
        let until = Instant::now() + STOP_WAIT;
        while !joins.iter().all(|j| j.is_finished()) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        for j in joins.into_iter().filter(|j| j.is_finished()) {
            let _ = j.join();
        }
    }
}

/// One tunnel's check loop: a check every interval (from the start of one to the next) until
/// stopped.
fn run(t: &Tracked, stop: &Receiver<()>, changed: &AtomicBool) {
    let h = &t.health;
    let mut m = Machine::new(h.rise, h.fall, t.up.load(Relaxed));
    let mut next = Instant::now();
    loop {
        match stop.recv_timeout(next.saturating_duration_since(Instant::now())) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let started = Instant::now();
        let result = probe(&h.check, h.timeout);
        if !matches!(stop.try_recv(), Err(TryRecvError::Empty)) {
            return;
        }
        *t.last.lock().unwrap_or_else(|e| e.into_inner()) = match &result {
            Ok(()) => "ok".into(),
            Err(e) => e.clone(),
        };
        if let Some(up) = m.observe(result.is_ok()) {
            t.up.store(up, Relaxed);
            if up {
                t.to_up.fetch_add(1, Relaxed);
                tracing::info!(
                    "fastpathd: backend {} up: {} passed {} times in a row",
                    t.name,
                    h.spec,
                    h.rise
                );
            } else {
                t.to_down.fetch_add(1, Relaxed);
                tracing::warn!(
                    "fastpathd: backend {} down: {} failed {} times in a row ({}); its flows move to the other backends (unless every backend of a service is down)",
                    t.name,
                    h.spec,
                    h.fall,
                    result.as_ref().err().map_or("", String::as_str)
                );
            }
            changed.store(true, Relaxed);
        }
        next = (next + h.interval).max(started);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fall_failures_in_a_row_take_it_down_and_rise_successes_bring_it_back() {
        let mut m = Machine::new(2, 3, true);
        // A failure between successes resets the count.
        for ok in [false, false, true, false, false] {
            assert_eq!(m.observe(ok), None);
        }
        assert_eq!(m.observe(false), Some(false), "the third failure in a row");
        assert!(!m.up());
        assert_eq!(m.observe(false), None, "down stays down");
        assert_eq!(m.observe(true), None);
        assert_eq!(m.observe(false), None, "a failure resets the rise");
        assert_eq!(m.observe(true), None);
        assert_eq!(m.observe(true), Some(true), "the second success in a row");
        assert!(m.up());
        // rise = fall = 1: every change of result is a change of state.
        let mut m = Machine::new(1, 1, true);
        assert_eq!(m.observe(false), Some(false));
        assert_eq!(m.observe(true), Some(true));
        // Starting down (never, in the daemon; the machine allows it).
        let mut m = Machine::new(3, 1, false);
        assert_eq!(
            (m.observe(true), m.observe(true), m.observe(true)),
            (None, None, Some(true))
        );
    }

    fn backends(states: &[(bool, bool, u32)]) -> Vec<Backend> {
        states
            .iter()
            .enumerate()
            .map(|(i, &(up, drain, weight))| Backend {
                name: format!("b{i}"),
                weight,
                drain,
                up,
            })
            .collect()
    }

    #[test]
    fn every_backend_down_keeps_them_all_and_one_up_keeps_only_it() {
        // One up: nothing changes, the down ones have no slot.
        let mut b = backends(&[(false, false, 1), (true, false, 1), (false, false, 1)]);
        assert!(!fail_open(&mut b));
        let t = fastpath::pipeline::maglev::Maglev::build(&b);
        assert_eq!(t.shares(3)[0], 0);
        assert_eq!(t.shares(3)[1], t.len());
        // All down: all kept, the table is the one with every backend.
        let mut b = backends(&[(false, false, 1), (false, false, 2), (false, false, 1)]);
        assert!(fail_open(&mut b));
        assert!(b.iter().all(|b| b.up));
        let all = backends(&[(true, false, 1), (true, false, 2), (true, false, 1)]);
        assert_eq!(
            fastpath::pipeline::maglev::Maglev::build(&b),
            fastpath::pipeline::maglev::Maglev::build(&all)
        );
        // The only up backend is drained (or weight 0): the rest count as all down.
        let mut b = backends(&[(true, true, 1), (false, false, 1), (true, false, 0)]);
        assert!(fail_open(&mut b));
        assert!(!fastpath::pipeline::maglev::Maglev::build(&b).is_empty());
        // Nothing down (drained only): not a health matter, left as configured.
        let mut b = backends(&[(true, true, 1), (true, true, 1)]);
        assert!(!fail_open(&mut b));
        assert!(fastpath::pipeline::maglev::Maglev::build(&b).is_empty());
    }

    fn cfg_check(spec: &str) -> Check {
        crate::config::parse_check(spec, "127.0.0.1".parse().unwrap()).unwrap()
    }

    /// Answers each connection with `answer` (after `delay`), for `n` connections.
    fn server(answer: &'static str, delay: Duration, n: usize) -> (u16, std::thread::JoinHandle<Vec<String>>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let j = std::thread::spawn(move || {
            let mut requests = Vec::new();
            for _ in 0..n {
                let (mut c, _) = l.accept().unwrap();
                let mut buf = [0u8; 1024];
                let k = c.read(&mut buf).unwrap_or(0);
                requests.push(String::from_utf8_lossy(&buf[..k]).into_owned());
                std::thread::sleep(delay);
                let _ = c.write_all(answer.as_bytes());
            }
            requests
        });
        (port, j)
    }

    #[test]
    fn tcp_and_http_checks_against_real_listeners() {
        let timeout = Duration::from_millis(2000);
        // TCP: a listener passes; a closed port fails (connection refused).
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert_eq!(probe(&cfg_check(&format!("tcp:{port}")), timeout), Ok(()));
        drop(l);
        let e = probe(&cfg_check(&format!("tcp:{port}")), timeout).unwrap_err();
        assert!(e.contains("refused"), "{e}");
        // HTTP: 2xx passes, anything else fails, naming the status.
        let (port, j) = server("HTTP/1.1 204 No Content\r\n\r\n", Duration::ZERO, 1);
        assert_eq!(
            probe(&cfg_check(&format!("http://remote:{port}/healthz")), timeout),
            Ok(())
        );
        let req = j.join().unwrap();
        assert!(
            req[0].starts_with("GET /healthz HTTP/1.0\r\nHost: 127.0.0.1:"),
            "{req:?}"
        );
        let (port, j) = server("HTTP/1.1 503 Service Unavailable\r\n\r\n", Duration::ZERO, 1);
        let e = probe(&cfg_check(&format!("http://127.0.0.1:{port}/")), timeout).unwrap_err();
        assert!(e.contains("status 503"), "{e}");
        j.join().unwrap();
        let (port, j) = server("SSH-2.0-OpenSSH\r\n", Duration::ZERO, 1);
        let e = probe(&cfg_check(&format!("http://127.0.0.1:{port}/")), timeout).unwrap_err();
        assert!(e.contains("not an HTTP answer"), "{e}");
        j.join().unwrap();
        // A server slower than the timeout fails within about the timeout.
        let (port, j) = server("HTTP/1.1 200 OK\r\n\r\n", Duration::from_millis(1500), 1);
        let t = Instant::now();
        let e = probe(
            &cfg_check(&format!("http://127.0.0.1:{port}/")),
            Duration::from_millis(300),
        )
        .unwrap_err();
        assert!(e.contains("within 300 ms"), "{e}");
        assert!(t.elapsed() < Duration::from_millis(1400), "{:?}", t.elapsed());
        j.join().unwrap();
    }

    #[test]
    fn checks_parse_with_remote_and_reject_what_they_cannot_check() {
        let remote: std::net::IpAddr = "203.0.113.5".parse().unwrap();
        let p = |s: &str| crate::config::parse_check(s, remote);
        assert_eq!(p("tcp:80"), Ok(Check::Tcp("203.0.113.5:80".parse().unwrap())));
        assert_eq!(
            p("http://remote/"),
            Ok(Check::Http {
                addr: "203.0.113.5:80".parse().unwrap(),
                host: "203.0.113.5:80".into(),
                path: "/".into()
            })
        );
        assert_eq!(
            p("http://[2001:db8::1]:8080/h?x=1"),
            Ok(Check::Http {
                addr: "[2001:db8::1]:8080".parse().unwrap(),
                host: "[2001:db8::1]:8080".into(),
                path: "/h?x=1".into()
            })
        );
        for bad in [
            "tcp:0",
            "tcp:65536",
            "tcp:http",
            "udp:53",
            "http://backend.example/",
            "http://2001:db8::1/",
            "http://remote:0/",
            "http://remote/a b",
            "https://remote/",
        ] {
            assert!(p(bad).is_err(), "{bad}");
        }
    }

    /// A config with tunnels `a` and `b`, each checking `tcp:PORT` on 127.0.0.1 with `timing`.
    fn config(port_a: u16, port_b: u16, timing: &str) -> Config {
        let mut src = String::from(
            "[dpdk]\neal_args = [\"--no-huge\", \"--vdev=net_null0\"]\n\n[[port]]\ndevice = \"net_null0\"\n\
             tx_queues = 2\nipv4 = [\"192.0.2.1\"]\n\n[lcores]\nrx = [0]\nworkers = [1]\n",
        );
        for (name, port) in [("a", port_a), ("b", port_b)] {
            src += &format!(
                "\n[[tunnel]]\nname = \"{name}\"\nlocal = \"192.0.2.1\"\nremote = \"127.0.0.1\"\nport = \"net_null0\"\n\
                 next_hop_mac = \"02:00:00:00:00:fe\"\nhealth = \"tcp:{port}\"\n{timing}\n"
            );
        }
        crate::config::parse(&src, "t.toml").unwrap_or_else(|e| panic!("{e}"))
    }

    fn wait_until(what: &str, cond: impl Fn() -> bool) {
        let t = Instant::now();
        while !cond() {
            assert!(t.elapsed() < Duration::from_secs(10), "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn threads_follow_the_config_and_a_reload_keeps_the_state_of_an_unchanged_check() {
        let live = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let up_port = live.local_addr().unwrap().port();
        let dead_port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let fast = "health_interval_ms = 40\nhealth_timeout_ms = 30\nhealth_fall = 2\nhealth_rise = 2";
        let h = BackendHealth::default();
        h.sync(&config(dead_port, up_port, fast));
        assert!(h.up_of("a") && h.up_of("b"), "both start up");
        assert!(h.up_of("unchecked"), "a tunnel without a check is up");
        wait_until("a down", || !h.up_of("a"));
        assert!(h.take_changed(), "the control thread is told");
        assert!(h.up_of("b"));
        let a = |h: &BackendHealth| h.snapshot().into_iter().find(|t| t.name == "a").unwrap();
        assert_eq!((a(&h).to_down, a(&h).to_up), (1, 0));
        assert!(a(&h).last.contains("refused"), "{:?}", a(&h));
        // The same config again (a reload): a stays down, nothing to publish.
        h.sync(&config(dead_port, up_port, fast));
        std::thread::sleep(Duration::from_millis(100));
        assert!(!h.up_of("a"));
        assert!(!h.take_changed());
        // New timing, same check: the state and the counts carry over.
        let slower = "health_interval_ms = 50\nhealth_timeout_ms = 30\nhealth_fall = 2\nhealth_rise = 2";
        h.sync(&config(dead_port, up_port, slower));
        std::thread::sleep(Duration::from_millis(100));
        assert!(!h.up_of("a"));
        assert_eq!(a(&h).to_down, 1);
        // Another check: a new backend as far as health goes, up until it fails.
        h.sync(&config(up_port, up_port, slower));
        assert!(h.up_of("a"));
        assert_eq!((a(&h).to_down, a(&h).to_up), (0, 0));
        std::thread::sleep(Duration::from_millis(150));
        assert!(h.up_of("a"), "{:?}", a(&h));
        // The listener dies: both go down; stop ends every thread.
        drop(live);
        wait_until("both down", || !h.up_of("a") && !h.up_of("b"));
        h.stop();
        let last = h.snapshot();
        assert_eq!(last.len(), 2, "{last:?}");
        assert!(
            last.iter().all(|t| !t.up && t.to_down == 1),
            "stopped, still down: {last:?}"
        );
    }
}
