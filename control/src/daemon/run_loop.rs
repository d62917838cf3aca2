//! While running: the control thread (signals, reloads, health, the live view, the idle exit)
//! and the main lcore's wait for every other thread at a stop.

use super::exit::{outcome_totals, total_rx};
use super::lcores::Role;
use crate::cli::Options;
use crate::metrics::Sources;
use crate::reload::Reloader;
use crate::signals::{ControlMsg, Messages, Signals};
use control::health::Watch;
use fastpath::dpdk::Eal;
use fastpath::outcome::Outcome;
use fastpath::runtime::RunControl;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One health check: links, heartbeats, generations; logs each link change.
pub(super) fn watch_tick(watch: &mut Watch, src: &Sources) {
    let published = src.published.generation();
    for line in watch.tick(
        &src.lcores,
        published,
        &src.health,
        Instant::now(),
        control::health::read_link,
    ) {
        if line.contains(" down") {
            tracing::warn!("fastpathd: {line}");
        } else {
            tracing::info!("fastpathd: {line}");
        }
    }
}

/// Starts the control thread: signals, reloads, the live view, the idle exit.
pub(super) fn spawn_control(
    opts: &Options,
    signals: &Signals,
    sources: &Arc<Sources>,
    run_control: &Arc<RunControl>,
    (mut reloader, mut watch, mut listeners): (Reloader, Watch, Option<control::kernel_interface::ListenerWatch>),
    pin: impl Fn(&str) + Send + 'static,
) -> Result<std::thread::JoinHandle<()>, String> {
    let stop = run_control.clone();
    let signals = signals.messages();
    let sources = sources.clone();
    let idle_exit = opts.exit_when_idle;
    let interval = opts.stats_interval;
    std::thread::Builder::new()
        .name("fastpath-control".into())
        .spawn(move || {
            pin("control");
            control_loop(
                &stop,
                &signals,
                &sources,
                (&mut reloader, &mut watch, listeners.as_mut()),
                idle_exit,
                interval,
            )
        })
        .map_err(|e| format!("cannot start the control thread: {e}"))
}

/// Runs the main lcore's role here until a stop, then waits for the other lcores, the control
/// thread and the metrics thread. Returns the lcores that stopped abnormally.
pub(super) fn serve(
    eal: &Eal,
    main_role: Option<Role>,
    launched: &[u32],
    run_control: &RunControl,
    (control, ctl): (std::thread::JoinHandle<()>, control::ctl::Running),
    http: Option<crate::http::Running>,
) -> Vec<u32> {
    if let Some(role) = main_role {
        role.run(run_control);
    }
    let mut failed_lcores = Vec::new();
    for l in launched {
        if eal.wait(*l).is_err() {
            failed_lcores.push(*l);
        }
    }
    let _ = control.join();
    ctl.stop();
    if let Some(h) = http {
        h.stop();
    }
    failed_lcores
}

/// Watches signals, the idle timer and the stats interval; sets `stop` when it is time.
pub(super) fn control_loop(
    stop: &RunControl,
    signals: &Messages,
    src: &Sources,
    (reloader, watch, mut listeners): (
        &mut Reloader,
        &mut Watch,
        Option<&mut control::kernel_interface::ListenerWatch>,
    ),
    exit_when_idle: Option<Duration>,
    interval: Option<Duration>,
) {
    let tick = Duration::from_millis(10);
    let mut last_rx = 0u64;
    let mut last_change = Instant::now();
    let mut next_line = interval.map(|i| Instant::now() + i);
    let mut prev = Snapshot::take(src);
    let mut recursion = RecursionLog::default();
    let started = Instant::now();
    let mut next_tick = Instant::now() + tick;
    let mut notify = crate::notify::Notifier::from_env();
    loop {
        notify.tick();
        // Messages (signals) are handled as they come; the periodic work runs every tick.
        match signals.next(next_tick.saturating_duration_since(Instant::now())) {
            Some(ControlMsg::Stop(sig)) => {
                tracing::info!("fastpathd: stop requested by signal ({sig})");
                break;
            }
            Some(ControlMsg::Ctl(req)) => {
                let report = if req.dry_run {
                    reloader.dry_run()
                } else {
                    notify.reloading();
                    let report = reloader.reload_reporting("fastpathctl reload");
                    notify.reloaded(if report.applied {
                        "running; the last reload was applied"
                    } else {
                        "running; the last reload was refused, the previous config runs"
                    });
                    report
                };
                let _ = req.reply.send(report);
                continue;
            }
            Some(ControlMsg::Reload(why)) => {
                notify.reloading();
                let applied = reloader.reload(why);
                notify.reloaded(if applied {
                    "running; the last reload was applied"
                } else {
                    "running; the last reload was refused, the previous config runs"
                });
                continue;
            }
            None => {}
        }
        next_tick = (next_tick + tick).max(Instant::now());
        reloader.tick();
        watch_tick(watch, src);
        if let Some(l) = listeners.as_deref_mut() {
            l.tick();
        }
        recursion.tick(src);
        let rx = total_rx(src);
        if rx != last_rx {
            last_rx = rx;
            last_change = Instant::now();
        } else if let Some(idle) = exit_when_idle {
            if rx > 0 && last_change.elapsed() >= idle {
                tracing::info!(
                    "fastpathd: no packet for {} ms, stopping (--exit-when-idle)",
                    idle.as_millis()
                );
                break;
            }
        }
        if let (Some(at), Some(every)) = (next_line, interval) {
            if Instant::now() >= at {
                let now = Snapshot::take(src);
                tracing::info!(target: "fastpathd::stats", "{}", stats_line(src, &prev, &now, started.elapsed()));
                prev = now;
                next_line = Some(at + every);
            }
        }
    }
    notify.stopping();
    src.health.stopping();
    stop.request_stop();
    // After the lcores were told: a check under way may take its timeout to finish.
    src.backends.stop();
}

/// A tunnel loop is logged, at most once a second, from the control thread (no I/O
/// on lcores).
pub(super) struct RecursionLog {
    /// Packets nested too deep when last logged.
    pub(super) logged: u64,
    /// When last logged.
    pub(super) at: Instant,
}

impl Default for RecursionLog {
    fn default() -> Self {
        RecursionLog {
            logged: 0,
            at: Instant::now() - Duration::from_secs(2),
        }
    }
}

impl RecursionLog {
    pub(super) fn tick(&mut self, src: &Sources) {
        let nested = fastpath::stats::total_outcome(&src.lcores, Outcome::GreRecursion);
        if nested > self.logged && self.at.elapsed() >= Duration::from_secs(1) {
            tracing::warn!(
                "fastpathd: dead loop? {} packets nested deeper than {} tunnel headers dropped so far",
                nested,
                fastpath::pipeline::tunnel::MAX_DEPTH
            );
            self.logged = nested;
            self.at = Instant::now();
        }
    }
}

/// Counters at one instant, for the live view.
pub(super) struct Snapshot {
    pub(super) at: Instant,
    pub(super) rx: Vec<(u16, u64)>,
    pub(super) tx: Vec<(u16, u64)>,
    /// By kernel interface id: packets the kernel wrote (sent out of the port by a worker) and
    /// packets written into it; the workers count them, not the queues' counters.
    pub(super) kernel: Vec<(u16, u64, u64)>,
    pub(super) outcomes: Vec<(Outcome, u64)>,
}

impl Snapshot {
    pub(super) fn take(src: &Sources) -> Snapshot {
        let mut rx = Vec::new();
        let mut tx = Vec::new();
        for l in &src.lcores {
            rx.extend(l.rx.iter().map(|q| (q.port, q.packets.get())));
            tx.extend(l.tx.iter().map(|q| (q.port, q.packets.get())));
        }
        let tables = src.published.current();
        let kernel = tables.kernel.as_ref().map_or_else(Vec::new, |k| {
            k.port_of
                .iter()
                .enumerate()
                .filter_map(|(id, port)| {
                    port.and_then(|_| k.index_of.get(id).copied().flatten())
                        .map(|i| (i as usize, id as u16))
                })
                .map(|(i, id)| {
                    let c = &k.counters;
                    (id, c.sum(i, |x| &x.from_kernel), c.sum(i, |x| &x.to_kernel))
                })
                .collect()
        });
        Snapshot {
            at: Instant::now(),
            rx,
            tx,
            kernel,
            outcomes: outcome_totals(src),
        }
    }
}

pub(super) fn stats_line(src: &Sources, a: &Snapshot, b: &Snapshot, up: Duration) -> String {
    let secs = b.at.duration_since(a.at).as_secs_f64().max(1e-9);
    let mut line = format!("[{:>7.1}s]", up.as_secs_f64());
    for (id, name) in src.port_names.iter().enumerate() {
        if name.is_empty() {
            continue;
        }
        let sum = |v: &Vec<(u16, u64)>| v.iter().filter(|(p, _)| *p as usize == id).map(|(_, n)| n).sum::<u64>();
        let kernel = |s: &Snapshot| s.kernel.iter().find(|k| k.0 as usize == id).map(|k| (k.1, k.2));
        if let (Some(kb), Some(ka)) = (kernel(b), kernel(a)) {
            // A kernel interface: what the kernel sent, what it was given.
            let from = kb.0.saturating_sub(ka.0) as f64 / secs;
            let to = kb.1.saturating_sub(ka.1) as f64 / secs;
            line.push_str(&format!(
                " {name}: from kernel {} to kernel {} |",
                human(from),
                human(to)
            ));
            continue;
        }
        let rx = (sum(&b.rx) - sum(&a.rx)) as f64 / secs;
        let tx = (sum(&b.tx) - sum(&a.tx)) as f64 / secs;
        line.push_str(&format!(" {name}: rx {} tx {} |", human(rx), human(tx)));
    }
    let mut deltas: Vec<(Outcome, u64)> = b
        .outcomes
        .iter()
        .zip(&a.outcomes)
        .map(|(&(o, n), &(_, m))| (o, n - m))
        .filter(|&(_, d)| d > 0)
        .collect();
    deltas.sort_by_key(|d| std::cmp::Reverse(d.1));
    if deltas.is_empty() {
        line.push_str(" idle");
    }
    for (o, d) in deltas.iter().take(4) {
        line.push_str(&format!(" {} {}", o.name(), human(*d as f64 / secs)));
    }
    line
}

pub(super) fn human(pps: f64) -> String {
    if pps >= 1e6 {
        format!("{:.2}Mpps", pps / 1e6)
    } else if pps >= 1e3 {
        format!("{:.1}kpps", pps / 1e3)
    } else {
        format!("{pps:.0}pps")
    }
}
