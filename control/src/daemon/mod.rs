//! Start-up, the control loop and the clean shutdown of the daemon.
//!
//! Order matters: EAL, mempool, ports, then the lcore loops; at stop, every lcore returns first,
//! then the control and metrics threads are joined (they hold the pools and the tables through
//! the metric sources), then ports are stopped and closed (drivers flush their output there: net_pcap completes its
//! capture file), then the final metrics are written, then the EAL is cleaned up.

mod exit;
mod lcores;
mod run_loop;
mod startup;

use crate::cli::Options;
use crate::config::{self, Config};
use crate::metrics;
use crate::reload::Reloader;
use crate::signals::Signals;
use crate::table_builder::TableBuilder;
use control::health::Health;
use exit::{shutdown, Dataplane};
use fastpath::dpdk;
use fastpath::generation::Published;
use lcores::{launch, lcore_roles, LcoreKit};
use run_loop::{serve, spawn_control, watch_tick};
use startup::{
    describe_ports, health_watch, housekeeping_pin, init_eal, make_pools, metric_sources, numa_plan, open_ports,
    pin_eal_threads, start_ctl, start_http,
};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Clean stop.
pub const EXIT_OK: u8 = 0;
/// The config is invalid.
pub const EXIT_CONFIG: u8 = 1;
/// The command line is invalid.
pub const EXIT_USAGE: u8 = 2;
/// DPDK or a port failed.
pub const EXIT_DPDK: u8 = 3;

/// Runs the daemon; returns the process exit code.
pub fn run(opts: Options) -> u8 {
    let cfg = match config::load_checked(&opts.config) {
        Ok(loaded) => {
            loaded.log_warnings();
            loaded.config
        }
        Err(e) => {
            tracing::error!("{e}");
            tracing::error!(
                "fastpathd: {} is not a valid config ({} problem(s) above); nothing was started",
                e.file,
                e.errors.len()
            );
            return EXIT_CONFIG;
        }
    };
    // The machine's side of the config (CPUs, hugepages, devices): refused here, with key and
    // line, rather than by the EAL with exit 3.
    let file = opts.config.display().to_string();
    let checked = config::read(&opts.config).and_then(|src| {
        config::check_machine(
            &cfg,
            &opts.extra_eal_args,
            &src,
            &file,
            &config::Machine::this(crate::placement::allowed_cpus()),
        )
    });
    match checked {
        Err(e) => {
            tracing::error!("{e}");
            tracing::error!(
                "fastpathd: {} does not fit this machine ({} problem(s) above); nothing was started",
                e.file,
                e.errors.len()
            );
            return EXIT_CONFIG;
        }
        Ok((unchecked, warnings)) => {
            for w in warnings.to_string().lines() {
                tracing::warn!("warning: {w}");
            }
            if opts.check_config {
                for u in unchecked {
                    eprintln!("{file}: not checked: {u}");
                }
            }
        }
    }
    if opts.check_config {
        eprintln!("{}: ok", opts.config.display());
        return EXIT_OK;
    }
    // Every lcore's seeds come from it (`fastpath::seed`): refused here rather than a panic later.
    if let Err(e) = fastpath::seed::check() {
        tracing::error!("fastpathd: {e}; nothing was started");
        return EXIT_DPDK;
    }
    // Bind the metrics endpoint before anything starts, so a taken address is a config error.
    let server = match cfg.metrics.listen.map(crate::http::Server::bind).transpose() {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(
                "{}: metrics.listen: cannot listen on {}: {e}; pick another address or set [metrics] enabled = false",
                opts.config.display(),
                cfg.metrics.listen.map(|a| a.to_string()).unwrap_or_default()
            );
            return EXIT_CONFIG;
        }
    };
    // The control socket too: another daemon answering on it refuses this start, naming it.
    let ctl = match control::ctl::ControlSocket::bind(&cfg.control.socket) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("{}: control.socket: {e}", opts.config.display());
            return EXIT_CONFIG;
        }
    };
    let signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("fastpathd: cannot install signal handlers: {e}");
            return EXIT_DPDK;
        }
    };
    match start_and_serve(cfg, &opts, &signals, (server, ctl)) {
        Ok(()) => EXIT_OK,
        Err(msg) => {
            tracing::error!("fastpathd: {msg}");
            EXIT_DPDK
        }
    }
}

/// The ports' last counters, taken just before they close, for the final metrics; until then the
/// metrics read the live ones.
type FinalPortStats = Arc<std::sync::Mutex<Option<Vec<Option<dpdk::port::PortStats>>>>>;

/// Start-up, serving and shutdown, in the order the module's doc gives.
fn start_and_serve(
    cfg: Config,
    opts: &Options,
    signals: &Signals,
    (server, ctl): (Option<crate::http::Server>, control::ctl::ControlSocket),
) -> Result<(), String> {
    let started = Instant::now();
    let start_time = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    // Before the EAL narrows this thread to the main lcore's CPU.
    let allowed = crate::placement::allowed_cpus();
    let eal = init_eal(&cfg, opts)?;
    let numa = numa_plan(&cfg, &eal)?;
    let (pools, big) = make_pools(&cfg, &numa)?;
    let ports = open_ports(&cfg, &pools, &numa)?;
    let kernel_ports = control::kernel_interface::open(&cfg, &ports, &pools.main)?;
    let (opened, port_names, port_info) = describe_ports(&cfg, &ports, &kernel_ports);
    let pin = housekeeping_pin(allowed.as_deref(), &cfg);
    // The checks start up (see `backends`), so the first generation has every backend.
    let backends = Arc::new(control::backends::BackendHealth::new(Arc::new(pin.clone())));
    backends.sync(&cfg);
    let ring_sockets = cfg.lcores.workers.iter().map(|&w| eal.lcore_socket(w)).collect();
    let mut builder = TableBuilder::new(
        opened,
        cfg.lcores.rx.len(),
        (cfg.lcores.workers.len(), ring_sockets),
        pools.main.clone(),
    )
    .with_backend_health(backends.clone());
    let first = builder
        .build(&cfg, 1)
        .map_err(|e| format!("{e}\n  Give EAL more memory (-m) for the socket rings."))?;
    let published = Arc::new(Published::new(Arc::new(first)));
    // Where the kernel listens, known before the first packet.
    let listeners = match crate::config::KernelConfig::enabled(&cfg.ports) {
        true => Some(control::kernel_interface::ListenerWatch::new(
            builder.kernel_listeners(),
        )?),
        false => None,
    };
    let kit = LcoreKit::new(&cfg, &eal, (&ports, &kernel_ports), &published, (&pools, &big));
    let (roles, all_stats, run_control) = lcore_roles(&kit);
    let final_port_stats = FinalPortStats::default();
    let health = Arc::new(Health::new(port_names.len()));
    let mut watch = health_watch(&cfg, (&ports, &kernel_ports), &all_stats, published.generation());
    let sources = metric_sources(
        (port_names, port_info),
        all_stats,
        (start_time, eal.tsc_hz()),
        (&pools, &big),
        &final_port_stats,
        (&published, &health, &backends),
    );
    // The first verdict (links read) before anything says `running`.
    watch_tick(&mut watch, &sources);
    let registry = metrics::registry(sources.clone());
    pin_eal_threads(allowed.as_deref(), &cfg);
    let limits = crate::http::Limits {
        max_connections: cfg.metrics.max_connections,
        cache: cfg.metrics.cache,
    };
    let http = start_http(server, (&registry, &sources), limits, &pin)?;
    let (main_role, launched) = match launch(&eal, &cfg.lcores, roles, &run_control) {
        Ok(l) => l,
        Err(e) => {
            // The launched lcores were waited for; the metrics thread goes before the EAL too.
            if let Some(h) = http {
                h.stop();
            }
            return Err(e);
        }
    };
    let reloader = Reloader::new(
        opts.config.clone(),
        cfg.clone(),
        builder,
        published.clone(),
        sources.reload.clone(),
    )
    .with_backend_health(backends);
    let ctl = start_ctl(ctl, opts, &sources, (&reloader, started), signals, &pin);
    let control = match ctl.and_then(|ctl| {
        spawn_control(opts, signals, &sources, &run_control, (reloader, watch, listeners), pin).map(|c| (c, ctl))
    }) {
        Ok(c) => c,
        Err(e) => {
            run_control.abort();
            drop(main_role);
            for l in &launched {
                let _ = eal.wait(*l);
            }
            if let Some(h) = http {
                h.stop();
            }
            return Err(e);
        }
    };
    let failed_lcores = serve(&eal, main_role, &launched, &run_control, control, http);
    shutdown(
        Dataplane {
            eal,
            pools,
            big,
            ports,
            kernel_ports: kernel_ports.into_iter().flatten().collect(),
            published,
            run_control,
            sources,
            registry,
            final_port_stats,
        },
        opts,
        started,
        failed_lcores,
    )
}
