//! Health: what `GET /healthz` answers and the link state behind `fastpath_port_link_up`.
//!
//! The control thread runs a [`Watch`] every tick: it polls each port's link (the driver's
//! `rte_eth_link_get_nowait`, or for a port over a kernel interface that interface's own
//! carrier and operstate: DPDK 22.11's `net_af_packet` says up whatever its interface does),
//! reads every lcore's heartbeat (its poll count, [`LcoreStats::heartbeat`]) and the config
//! generation each lcore runs, and publishes one verdict into [`Health`]. The metrics thread
//! answers `/healthz` from that verdict: 200 `ok`, or 503 with a one-line reason naming every
//! problem. Nothing here touches the data path: the lcores only keep counting their polls.

use fastpath::stats::LcoreStats;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An lcore whose heartbeat has not moved for this long is not polling (an idle lcore sleeps
/// at most 100 ms per poll), and an lcore that has not taken a published generation this long
/// after it was published has not adopted it.
pub const STALL: Duration = Duration::from_millis(500);

/// A verdict older than this means the control thread itself stopped checking (it checks every
/// 10 ms tick; only a reload of a very large config, seconds of parsing, holds it that long).
const STALE: Duration = Duration::from_secs(5);

/// How often links are read.
const LINK_POLL: Duration = Duration::from_millis(50);

const LINK_DOWN: u8 = 0;
const LINK_UP: u8 = 1;
const LINK_UNKNOWN: u8 = 2;

/// The verdict `/healthz` answers with and every port's last link state, written by the control
/// thread and read by the metrics thread (never by an lcore).
pub struct Health {
    verdict: Mutex<(Option<String>, Instant)>,
    links: Vec<AtomicU8>,
    /// Whether a control thread publishes verdicts (so an old one means it stopped).
    watched: bool,
}

impl Health {
    /// Health for `ports` port ids, "starting" until the first verdict.
    pub fn new(ports: usize) -> Health {
        Health {
            verdict: Mutex::new((Some("starting".into()), Instant::now())),
            links: (0..ports).map(|_| AtomicU8::new(LINK_UNKNOWN)).collect(),
            watched: true,
        }
    }

    /// Always healthy, no port: for endpoints served without a daemon (the fuzz targets).
    pub fn always_ok() -> Health {
        Health {
            verdict: Mutex::new((None, Instant::now())),
            links: Vec::new(),
            watched: false,
        }
    }

    /// `Ok` when healthy, else the one-line reason.
    pub fn answer(&self) -> Result<(), String> {
        let (problem, at) = self.verdict.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let age = at.elapsed();
        if self.watched && age > STALE && problem.as_deref() != Some("stopping") {
            return Err(format!(
                "health not checked for {:.1} s: the control thread is stuck (or busy with a very large reload)",
                age.as_secs_f64()
            ));
        }
        problem.map_or(Ok(()), Err)
    }

    /// Port `id`'s link as last read: `None` if never read or the driver cannot tell.
    pub fn link_up(&self, id: u16) -> Option<bool> {
        match self.links.get(id as usize)?.load(Relaxed) {
            LINK_UP => Some(true),
            LINK_DOWN => Some(false),
            _ => None,
        }
    }

    fn publish(&self, problem: Option<String>) {
        *self.verdict.lock().unwrap_or_else(|e| e.into_inner()) = (problem, Instant::now());
    }

    /// The daemon is stopping: that is the answer from now on.
    pub fn stopping(&self) {
        self.publish(Some("stopping".into()));
    }
}

/// A port the watch reads the link of.
#[derive(Clone, Debug)]
pub struct WatchedPort {
    /// DPDK port id.
    pub id: u16,
    /// The `device` of its `[[port]]`.
    pub name: String,
    /// The kernel interface it runs over, whose carrier is the link.
    pub kernel_interface: Option<String>,
}

/// One reading of a link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkReading {
    /// Up; what the log says about it.
    Up(String),
    /// Down, and why.
    Down(String),
    /// The driver cannot tell (counted as up, no `fastpath_port_link_up` sample).
    Unknown,
}

/// Reads a port's link: its kernel interface's carrier and operstate when it has one, else the
/// driver's own report.
pub fn read_link(p: &WatchedPort) -> LinkReading {
    if let Some(ifname) = &p.kernel_interface {
        let dir = std::path::Path::new("/sys/class/net").join(ifname);
        let Ok(oper) = std::fs::read_to_string(dir.join("operstate")) else {
            return LinkReading::Down(format!("kernel interface {ifname} is gone"));
        };
        let oper = oper.trim();
        // `carrier` cannot be read while the interface is administratively down. It is what
        // changes first: the kernel updates `operstate` from it a little later (linkwatch).
        let carrier = std::fs::read_to_string(dir.join("carrier")).is_ok_and(|c| c.trim() == "1");
        return if !carrier {
            LinkReading::Down(format!("kernel interface {ifname}: no carrier, operstate {oper}"))
        } else if matches!(oper, "down" | "lowerlayerdown" | "notpresent") {
            LinkReading::Down(format!("kernel interface {ifname}: operstate {oper}"))
        } else {
            LinkReading::Up(format!("kernel interface {ifname}"))
        };
    }
    match fastpath::dpdk::port::link_of(p.id) {
        Ok(l) if l.up => LinkReading::Up(format!(
            "{} Mbps {}",
            l.speed_mbps,
            if l.full_duplex { "full duplex" } else { "half duplex" }
        )),
        Ok(_) => LinkReading::Down("the driver reports it down".into()),
        Err(_) => LinkReading::Unknown,
    }
}

struct Beat {
    lcore: u32,
    role: &'static str,
    beat: u64,
    since: Instant,
}

/// The control thread's view of ports, lcores and generations, turned into a verdict each tick.
pub struct Watch {
    /// Each port, its link as last read (`None`: not known) and, when down, why.
    ports: Vec<(WatchedPort, Option<bool>, String)>,
    beats: Vec<Beat>,
    /// The published generation last seen, and when it was first seen.
    generation: (u64, Instant),
    next_links: Instant,
}

impl Watch {
    /// A watch over `ports` and `lcores` (the first `rx` of them RX lcores, then workers), the
    /// published generation being `generation`.
    pub fn new(ports: Vec<WatchedPort>, lcores: &[Arc<LcoreStats>], rx: usize, generation: u64, now: Instant) -> Watch {
        Watch {
            ports: ports.into_iter().map(|p| (p, None, String::new())).collect(),
            beats: lcores
                .iter()
                .enumerate()
                .map(|(i, l)| Beat {
                    lcore: l.lcore,
                    role: if i < rx { "rx" } else { "worker" },
                    beat: l.heartbeat(),
                    since: now,
                })
                .collect(),
            generation: (generation, now),
            next_links: now,
        }
    }

    /// Reads what is due, publishes the verdict into `health` and returns the log lines of the
    /// link changes seen (one per change; a link down at start is one too).
    pub fn tick(
        &mut self,
        lcores: &[Arc<LcoreStats>],
        published: u64,
        health: &Health,
        now: Instant,
        mut read: impl FnMut(&WatchedPort) -> LinkReading,
    ) -> Vec<String> {
        let mut log = Vec::new();
        let mut problems = Vec::new();
        if now >= self.next_links {
            self.next_links = now + LINK_POLL;
            for (p, last, down_why) in &mut self.ports {
                let reading = read(p);
                let up = match &reading {
                    LinkReading::Up(_) => Some(true),
                    LinkReading::Down(_) => Some(false),
                    LinkReading::Unknown => None,
                };
                if up != *last {
                    match &reading {
                        LinkReading::Down(why) if last.is_none() => {
                            log.push(format!("port {}: link down at start ({why})", p.name))
                        }
                        LinkReading::Down(why) => log.push(format!("port {}: link down ({why})", p.name)),
                        LinkReading::Up(what) if last.is_some() => {
                            log.push(format!("port {}: link up ({what})", p.name))
                        }
                        _ => {}
                    }
                    *last = up;
                }
                if let LinkReading::Down(why) = reading {
                    *down_why = why;
                }
                if let Some(slot) = health.links.get(p.id as usize) {
                    slot.store(
                        up.map_or(LINK_UNKNOWN, |u| if u { LINK_UP } else { LINK_DOWN }),
                        Relaxed,
                    );
                }
            }
        }
        for (p, last, why) in &self.ports {
            if *last == Some(false) {
                problems.push(format!("port {} link down ({why})", p.name));
            }
        }
        if published != self.generation.0 {
            self.generation = (published, now);
        }
        let gen_age = now.saturating_duration_since(self.generation.1);
        for (b, l) in self.beats.iter_mut().zip(lcores) {
            let beat = l.heartbeat();
            if beat != b.beat {
                b.beat = beat;
                b.since = now;
            }
            let still = now.saturating_duration_since(b.since);
            if still >= STALL {
                problems.push(format!(
                    "lcore {} ({}) not polling for {:.1} s",
                    b.lcore,
                    b.role,
                    still.as_secs_f64()
                ));
            } else if l.generation() < published && gen_age >= STALL {
                problems.push(format!(
                    "lcore {} ({}) runs config generation {}, {published} was published {:.1} s ago",
                    b.lcore,
                    b.role,
                    l.generation(),
                    gen_age.as_secs_f64()
                ));
            }
        }
        health.publish((!problems.is_empty()).then(|| problems.join("; ")));
        log
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcores() -> Vec<Arc<LcoreStats>> {
        (0..2).map(|i| Arc::new(LcoreStats::new(i, vec![], vec![]))).collect()
    }

    fn port() -> WatchedPort {
        WatchedPort {
            id: 0,
            name: "net_af_packet0".into(),
            kernel_interface: Some("fpv0".into()),
        }
    }

    #[test]
    fn healthy_until_a_link_goes_down_logging_each_change_once() {
        let l = lcores();
        let h = Health::new(1);
        assert_eq!(h.answer(), Err("starting".into()));
        let t0 = Instant::now();
        let mut w = Watch::new(vec![port()], &l, 1, 1, t0);
        l.iter().for_each(|l| l.set_generation(1));
        let up = |_: &WatchedPort| LinkReading::Up("kernel interface fpv0".into());
        let down = |_: &WatchedPort| LinkReading::Down("kernel interface fpv0: no carrier, operstate down".into());
        assert!(w.tick(&l, 1, &h, t0, up).is_empty(), "up at start is not logged");
        assert_eq!(h.answer(), Ok(()));
        assert_eq!(h.link_up(0), Some(true));
        let mut lines = Vec::new();
        for i in 1..=10u32 {
            l.iter().for_each(|l| l.idle_polls.inc());
            let at = t0 + LINK_POLL * i;
            lines.extend(w.tick(&l, 1, &h, at, if i < 5 { down } else { up }));
            if i < 5 {
                assert_eq!(
                    h.answer(),
                    Err("port net_af_packet0 link down (kernel interface fpv0: no carrier, operstate down)".into()),
                    "tick {i}"
                );
                assert_eq!(h.link_up(0), Some(false));
            }
        }
        assert_eq!(
            lines,
            [
                "port net_af_packet0: link down (kernel interface fpv0: no carrier, operstate down)",
                "port net_af_packet0: link up (kernel interface fpv0)"
            ]
        );
        assert_eq!(h.answer(), Ok(()));
        assert_eq!(h.link_up(0), Some(true));
    }

    #[test]
    fn a_link_down_at_start_is_logged_and_unknown_links_count_as_up() {
        let l = lcores();
        let h = Health::new(2);
        let t0 = Instant::now();
        let mut p1 = port();
        p1.id = 1;
        p1.name = "net_null0".into();
        let mut w = Watch::new(vec![port(), p1], &l, 1, 0, t0);
        let lines = w.tick(&l, 0, &h, t0, |p| {
            if p.id == 0 {
                LinkReading::Down("the driver reports it down".into())
            } else {
                LinkReading::Unknown
            }
        });
        assert_eq!(
            lines,
            ["port net_af_packet0: link down at start (the driver reports it down)"]
        );
        assert_eq!(
            h.answer(),
            Err("port net_af_packet0 link down (the driver reports it down)".into())
        );
        assert_eq!((h.link_up(0), h.link_up(1)), (Some(false), None));
    }

    #[test]
    fn a_stuck_lcore_is_reported_within_the_stall_and_recovers() {
        let l = lcores();
        let h = Health::new(0);
        let t0 = Instant::now();
        let mut w = Watch::new(vec![], &l, 1, 0, t0);
        let none = |_: &WatchedPort| LinkReading::Unknown;
        let step = Duration::from_millis(10);
        let mut t = t0;
        // Lcore 0 keeps polling, lcore 1 (a worker) stops.
        while t < t0 + STALL - step {
            t += step;
            l[0].busy_polls.inc();
            w.tick(&l, 0, &h, t, none);
            assert_eq!(h.answer(), Ok(()), "{:?}", t - t0);
        }
        t += step * 2;
        l[0].busy_polls.inc();
        w.tick(&l, 0, &h, t, none);
        let why = h.answer().unwrap_err();
        assert!(why.starts_with("lcore 1 (worker) not polling for 0.5 s"), "{why}");
        l[1].idle_polls.inc();
        l[0].idle_polls.inc();
        w.tick(&l, 0, &h, t + step, none);
        assert_eq!(h.answer(), Ok(()));
    }

    #[test]
    fn a_generation_not_adopted_after_the_stall_is_reported_with_every_problem_on_one_line() {
        let l = lcores();
        let h = Health::new(1);
        let t0 = Instant::now();
        let mut w = Watch::new(vec![port()], &l, 1, 1, t0);
        l.iter().for_each(|l| l.set_generation(1));
        let down = |_: &WatchedPort| LinkReading::Down("x".into());
        let beat = |l: &[Arc<LcoreStats>]| l.iter().for_each(|l| l.idle_polls.inc());
        beat(&l);
        w.tick(&l, 1, &h, t0, down);
        // Generation 2 is published; lcore 0 takes it at once, lcore 1 does not.
        l[0].set_generation(2);
        beat(&l);
        w.tick(&l, 2, &h, t0 + Duration::from_millis(100), down);
        assert_eq!(
            h.answer(),
            Err("port net_af_packet0 link down (x)".into()),
            "within the stall"
        );
        beat(&l);
        w.tick(&l, 2, &h, t0 + Duration::from_millis(700), down);
        let why = h.answer().unwrap_err();
        assert_eq!(
            why,
            "port net_af_packet0 link down (x); lcore 1 (worker) runs config generation 1, 2 was published 0.6 s ago"
        );
        assert!(!why.contains('\n'));
        l[1].set_generation(2);
        beat(&l);
        w.tick(&l, 2, &h, t0 + Duration::from_millis(800), |_| {
            LinkReading::Up(String::new())
        });
        assert_eq!(h.answer(), Ok(()));
    }

    #[test]
    fn a_verdict_nobody_renews_is_itself_a_problem_but_stopping_is_not() {
        let h = Health::new(0);
        h.publish(None);
        *h.verdict.lock().unwrap() = (None, Instant::now() - Duration::from_secs(6));
        assert!(h.answer().unwrap_err().contains("control thread is stuck"));
        h.stopping();
        *h.verdict.lock().unwrap() = (Some("stopping".into()), Instant::now() - Duration::from_secs(6));
        assert_eq!(h.answer(), Err("stopping".into()));
        assert_eq!(Health::always_ok().answer(), Ok(()));
    }
}
