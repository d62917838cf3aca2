//! Start-up, the control loop and the clean shutdown of the daemon.
//!
//! Order matters: EAL, mempool, ports, then the lcore loops; at stop, every lcore returns first,
//! then the control and metrics threads are joined (they hold the pools and the tables through
//! the metric sources), then ports are stopped and closed (drivers flush their output there: net_pcap completes its
//! capture file), then the final metrics are written, then the EAL is cleaned up.

use crate::cli::Options;
use crate::config::{self, Config, LcoreMode};
use crate::metrics::{self, Sources};
use crate::reload::{ReloadStats, Reloader};
use crate::signals::{ControlMsg, Messages, Signals};
use crate::tables::{OpenedPort, TableBuilder};
use control::health::{Health, Watch, WatchedPort};
use control::kernel::KernelInterface;
use fastpath::dpdk::{self, Eal, Mempool, Port, PortConf, WorkerTx};
use fastpath::generation::Published;
use fastpath::outcome::Outcome;
use fastpath::runtime::{IdlePolicy, RunControl, RxLcore, TscClock, WorkerLcore};
use fastpath::stats::{LcoreStats, QueueCounters};
use prometheus::Registry;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Clean stop.
pub const EXIT_OK: u8 = 0;
/// The config is invalid.
pub const EXIT_CONFIG: u8 = 1;
/// The command line is invalid.
pub const EXIT_USAGE: u8 = 2;
/// DPDK or a port failed.
pub const EXIT_DPDK: u8 = 3;

/// An lcore's job, built before launch.
enum Role {
    Rx(Box<RxLcore>),
    Worker(WorkerLcore),
}

/// Every lcore's role, by lcore id.
type Roles = Vec<(u32, Role)>;

impl Role {
    fn run(self, stop: &RunControl) {
        match self {
            Role::Rx(l) => l.run(stop),
            Role::Worker(w) => w.run(stop),
        }
    }
}

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
    let kernel_ports = control::kernel::open(&cfg, &ports, &pools.main)?;
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
        true => Some(control::kernel::ListenerWatch::new(builder.kernel_listeners())?),
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

/// Initialises the EAL with the lcores of `[lcores]` and the arguments of the config and the
/// command line.
fn init_eal(cfg: &Config, opts: &Options) -> Result<Eal, String> {
    let mut argv = cfg.eal_argv(&opts.extra_eal_args);
    match config::virtio_user_memory(&argv) {
        Ok(None) => {}
        Ok(Some(flag)) => {
            tracing::info!("fastpathd: adding {flag} to the EAL arguments: a net_virtio_user port shares DPDK's memory over vhost-user, at most 8 regions");
            argv.push(flag.to_string());
        }
        // Only the command line's extra arguments can get here: the config's were refused at load.
        Err((i, why)) => return Err(format!("EAL argument {:?}: {why}", argv[i])),
    }
    remove_stale_vhost_sockets(&argv);
    let eal = Eal::init(&argv).map_err(|e| {
        format!(
            "{e}\n  EAL arguments: {}\n  Check [dpdk] eal_args: without hugepages use --no-huge -m 512; vdevs are \
             --vdev=net_pcap0,rx_pcap=IN,tx_pcap=OUT; the lcores in [lcores] must exist on this machine.",
            argv.join(" ")
        )
    })?;
    // Live capture with dpdk-dumpcap / dpdk-pdump. Without a shared runtime directory
    // (--no-shconf, --in-memory: the tests' setting) no tool can attach, and that is said once.
    if let Err(e) = eal.pdump_init() {
        let shared = !argv.iter().any(|a| a == "--no-shconf" || a == "--in-memory");
        if shared {
            tracing::warn!("fastpathd: live capture (dpdk-dumpcap) unavailable: {e}");
        }
    }
    Ok(eal)
}

/// Removes the socket file of every server-mode virtio-user vdev (`server=1,path=P`) that no
/// process listens on any more: a fastpathd that was killed leaves it behind, and DPDK then
/// refuses to bind ("Address already in use; remove it and try again"), so a restart after a
/// crash would fail. A socket someone still accepts on is left alone (DPDK's error says so).
fn remove_stale_vhost_sockets(argv: &[String]) {
    use std::os::unix::fs::FileTypeExt;
    for a in argv {
        let Some(v) = a.strip_prefix("--vdev=") else { continue };
        let opts: Vec<&str> = v.split(',').collect();
        let is_virtio = opts[0].starts_with("net_virtio_user") || opts[0].starts_with("virtio_user");
        if !is_virtio || !opts.contains(&"server=1") {
            continue;
        }
        let Some(path) = opts.iter().find_map(|o| o.strip_prefix("path=")) else {
            continue;
        };
        let is_socket = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket());
        if is_socket
            && std::os::unix::net::UnixStream::connect(path)
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            match std::fs::remove_file(path) {
                Ok(()) => {
                    tracing::info!("fastpathd: removed the stale vhost-user socket {path} (nothing listens on it)")
                }
                Err(e) => tracing::warn!("fastpathd: cannot remove the stale vhost-user socket {path}: {e}"),
            }
        }
    }
}

/// The packet pools, one per NUMA socket that has a port (`control::numa::plan`), each of
/// `[dpdk] mbufs`.
#[derive(Clone)]
struct Pools {
    /// (socket, pool), ascending by socket.
    by_socket: Vec<(u32, Arc<Mempool>)>,
    /// The main lcore's socket's pool (the first if it has none): the kernel interfaces' and
    /// the socket rings' home pool.
    main: Arc<Mempool>,
}

impl Pools {
    /// The pool on `socket`, else the main one.
    fn on(&self, socket: Option<u32>) -> &Arc<Mempool> {
        socket
            .and_then(|s| self.by_socket.iter().find(|(t, _)| *t == s))
            .map_or(&self.main, |(_, p)| p)
    }

    fn in_use(&self) -> u32 {
        self.by_socket.iter().map(|(_, p)| p.in_use()).sum()
    }

    fn size(&self) -> u32 {
        self.by_socket.iter().map(|(_, p)| p.size()).sum()
    }
}

/// Where the ports and lcores are by the EAL, and what follows (`control::numa::plan`): the
/// pools, each port's, and a warning for each RX lcore that polls a port on another socket
/// which the machine check (sysfs, before the EAL) could not see.
struct NumaPlan {
    plan: control::numa::Plan,
    main_socket: u32,
}

fn numa_plan(cfg: &Config, eal: &Eal) -> Result<NumaPlan, String> {
    let port_sockets = cfg
        .ports
        .iter()
        .map(|p| dpdk::port::socket_of(&p.device).map_err(|e| format!("port {}: {e}", p.device)))
        .collect::<Result<Vec<_>, _>>()?;
    let main_socket = eal.lcore_socket(eal.main_lcore()).unwrap_or(0);
    let layout = control::numa::Layout {
        port_sockets,
        rx: cfg
            .lcores
            .rx
            .iter()
            .zip(cfg.rx_assignment())
            .map(|(&lcore, queues)| control::numa::RxLcore {
                lcore,
                socket: eal.lcore_socket(lcore),
                queues,
            })
            .collect(),
        main_socket,
    };
    let plan = control::numa::plan(&layout);
    let sys = std::path::Path::new("/sys");
    for r in &plan.remote {
        let device = &cfg.ports[r.port].device;
        let seen_by_sysfs = control::numa::pci_address(device)
            .and_then(|a| control::numa::pci_node(sys, &a))
            .is_some();
        if !seen_by_sysfs {
            tracing::warn!("fastpathd: {}", r.message(device));
        }
    }
    Ok(NumaPlan { plan, main_socket })
}

/// The packet pools, and the pool of 64 KiB buffers for reassembled datagrams.
fn make_pools(cfg: &Config, numa: &NumaPlan) -> Result<(Pools, Arc<Mempool>), String> {
    let max_mtu = cfg.ports.iter().filter_map(|p| p.mtu).max().unwrap_or(1500) as u32;
    let data_room = config::packet_data_room(max_mtu) as u16;
    let sockets = &numa.plan.pool_sockets;
    let mut by_socket = Vec::new();
    for &s in sockets {
        // One socket (every single-socket machine): the name it always had.
        let name = match sockets.len() {
            1 => "fastpath_pkts".to_string(),
            _ => format!("fastpath_pkts_{s}"),
        };
        let pool = Mempool::on_socket(
            &name,
            (cfg.dpdk.mbufs, cfg.dpdk.mbuf_cache, data_room),
            Some(&cfg.dpdk.mempool_ops),
            Some(s),
        )
        .map_err(|e| {
            format!("{e}\n  Give EAL more memory (-m, or --socket-mem for socket {s}) or lower [dpdk] mbufs.")
        })?;
        by_socket.push((s, Arc::new(pool)));
    }
    if sockets.len() > 1 {
        tracing::info!(
            "fastpathd: packet pools on NUMA sockets {sockets:?}, {} mbufs each; ports' pools by socket: {:?}",
            cfg.dpdk.mbufs,
            numa.plan.port_pool
        );
    }
    let main = by_socket
        .iter()
        .find(|(s, _)| *s == numa.main_socket)
        .unwrap_or(&by_socket[0])
        .1
        .clone();
    let pools = Pools { by_socket, main };
    // One buffer per reassembled datagram (up to 64 KiB): a pool of its own, so fragment floods
    // cannot take the mbufs RX needs, and the other way round.
    let big = Arc::new(
        Mempool::new("fastpath_reasm", cfg.reassembly_buffers, 8, u16::MAX)
            .map_err(|e| format!("{e}\n  Give EAL more memory (-m) or lower [reassembly] buffers (64 KiB each)."))?,
    );
    Ok((pools, big))
}

/// Opens and starts every `[[port]]`, in file order, logging how each was set up.
fn open_ports(cfg: &Config, pools: &Pools, numa: &NumaPlan) -> Result<Vec<Port>, String> {
    let from = match &cfg.rss.source {
        config::KeySource::Default => "the default".to_string(),
        config::KeySource::Inline => "[rss] key".to_string(),
        config::KeySource::File(path) => path.display().to_string(),
    };
    tracing::info!("fastpathd: rss key {} from {from}", config::fingerprint(&cfg.rss.key));
    let mut ports = Vec::new();
    for (i, p) in cfg.ports.iter().enumerate() {
        let conf = PortConf {
            rx_queues: p.rx_queues,
            tx_queues: p.tx_queues,
            rx_desc: cfg.dpdk.rx_desc,
            tx_desc: cfg.dpdk.tx_desc,
            mtu: p.mtu,
            promiscuous: true,
            rss_key: cfg.rss.key,
            rss: true,
        };
        let pool = pools.on(numa.plan.port_pool.get(i).copied());
        let port = Port::open(&p.device, &conf, pool.clone()).map_err(|e| {
            format!(
                "port[{i}] ({}): {e}\n  Check the device name in [[port]] and the EAL arguments.",
                p.device
            )
        })?;
        tracing::info!(
            "fastpathd: port {} ({}) id {} mac {} rx {} tx {} rss {} rx checksum offload {}",
            p.device,
            port.driver(),
            port.id(),
            p.mac.unwrap_or(port.mac()),
            p.rx_queues,
            p.tx_queues,
            if port.rss() { "on" } else { "off" },
            port.rx_checksums()
        );
        if port.rss() && !port.rss_own_key() {
            tracing::warn!(
                "fastpathd: port {} ({}) keeps the driver's own RSS key (it takes no key of 40 to 52 bytes): \
                 its hashes, not the [rss] key's, pick sockets and tunnel backends",
                p.device,
                port.driver()
            );
        }
        if p.device.starts_with("net_af_packet") || p.device.starts_with("net_af_xdp") {
            // What fastpathd cannot check from here fails silently otherwise (docs/operating.md,
            // "On a veth or a VM's interface").
            tracing::info!(
                "fastpathd: port {} is a socket on a kernel interface: the peer must put \
                 checksums on the wire (a veth peer: `ethtool -K PEER tx off`), else every TCP/UDP \
                 packet is dropped as a bad checksum (here `udp_bad_checksum`/`tcp_bad_checksum`, \
                 or by the kernel behind a kernel interface)",
                p.device
            );
        }
        ports.push(port);
    }
    Ok(ports)
}

/// The opened ports for the table builder, and their names and set-up by DPDK port id for the
/// metrics.
fn describe_ports(
    cfg: &Config,
    ports: &[Port],
    kernel_ports: &[Option<KernelInterface>],
) -> (Vec<OpenedPort>, Vec<String>, Vec<Option<metrics::PortInfo>>) {
    let mut opened = Vec::new();
    let mut port_names = Vec::new();
    let mut port_info = Vec::new();
    for (p, port) in cfg.ports.iter().zip(ports) {
        opened.push(OpenedPort {
            id: port.id(),
            mac: port.mac(),
            kernel: None,
        });
        let id = port.id() as usize;
        if port_names.len() <= id {
            port_names.resize(id + 1, String::new());
            port_info.resize(id + 1, None);
        }
        port_names[id] = p.device.clone();
        port_info[id] = Some(metrics::PortInfo {
            driver: port.driver().to_string(),
            rss: port.rss(),
            rx_checksum_offload: port.rx_checksums().to_string(),
        });
    }
    // A kernel interface's TX queues are counted under the interface's name; it is not a port
    // (nothing it receives is an RX lcore's), so it has no port info and no port counters.
    for ((o, p), k) in opened.iter_mut().zip(&cfg.ports).zip(kernel_ports) {
        let (Some(k), Some(name)) = (k, &p.kernel_interface) else {
            continue;
        };
        o.kernel = Some(k.id());
        let id = k.id() as usize;
        if port_names.len() <= id {
            port_names.resize(id + 1, String::new());
            port_info.resize(id + 1, None);
        }
        port_names[id] = name.clone();
    }
    (opened, port_names, port_info)
}

/// What every lcore's loop is built from.
#[derive(Clone, Copy)]
struct LcoreKit<'a> {
    cfg: &'a Config,
    ports: &'a [Port],
    /// By port index: its kernel interface.
    kernel_ports: &'a [Option<KernelInterface>],
    published: &'a Arc<Published>,
    pools: &'a Pools,
    big: &'a Arc<Mempool>,
    idle: IdlePolicy,
    clock: TscClock,
    eal: &'a Eal,
    counters: fn(u16, u16) -> QueueCounters,
}

impl<'a> LcoreKit<'a> {
    fn new(
        cfg: &'a Config,
        eal: &'a Eal,
        (ports, kernel_ports): (&'a [Port], &'a [Option<KernelInterface>]),
        published: &'a Arc<Published>,
        (pools, big): (&'a Pools, &'a Arc<Mempool>),
    ) -> Self {
        LcoreKit {
            cfg,
            ports,
            kernel_ports,
            published,
            pools,
            big,
            idle: IdlePolicy {
                // Polling stops after idle_poll_us of empty polls, idle_sleep_us at least
                // (docs/operating.md, "Idle lcores").
                poll_cycles: (cfg.lcores.idle_poll_us.max(cfg.lcores.idle_sleep_us) as u128 * eal.tsc_hz() as u128
                    / 1_000_000) as u64,
                // An eighth of the default window: longer than answering a client takes.
                crowded_cycles: (250 * eal.tsc_hz() as u128 / 1_000_000) as u64,
                sleep: Duration::from_micros(cfg.lcores.idle_sleep_us),
                wait: Duration::from_millis(cfg.lcores.idle_wait_ms),
            },
            clock: TscClock::new(eal.tsc_hz()),
            eal,
            counters: lcore_counters(cfg.lcores.mode),
        }
    }
}

/// The plain forward mode counts packets per queue, as testpmd's io mode does; the bytes are
/// the ports' counters.
fn lcore_counters(mode: LcoreMode) -> fn(u16, u16) -> QueueCounters {
    if mode == LcoreMode::Forward {
        QueueCounters::packets_only
    } else {
        QueueCounters::new
    }
}

/// One role per lcore, every lcore's counters (RX lcores first), and the run control over the
/// RX lcores' counters.
fn lcore_roles(kit: &LcoreKit) -> (Roles, Vec<Arc<LcoreStats>>, Arc<RunControl>) {
    let mut roles: Roles = Vec::new();
    let mut all_stats = Vec::new();
    rx_roles(kit, &mut roles, &mut all_stats);
    let run_control = Arc::new(RunControl::new(all_stats.clone(), kit.cfg.lcores.workers.len()));
    worker_roles(kit, &mut roles, &mut all_stats);
    (roles, all_stats, run_control)
}

/// Forward mode: TX port id per RX port id.
fn forward_map(cfg: &Config, ports: &[Port]) -> Vec<u16> {
    let max_id = ports.iter().map(|p| p.id()).max().unwrap_or(0);
    let mut forward_to: Vec<u16> = (0..=max_id).collect();
    for (i, (p, port)) in cfg.ports.iter().zip(ports).enumerate() {
        let to = p.forward_to.unwrap_or(i);
        forward_to[port.id() as usize] = ports[to].id();
        if cfg.lcores.mode == LcoreMode::Forward {
            tracing::info!(
                "fastpathd: forward mode, no stage runs: {} -> {}",
                p.device,
                cfg.ports[to].device
            );
        }
    }
    forward_to
}

/// The RX lcores' roles; RX lcore i owns TX queue i on every port.
fn rx_roles(kit: &LcoreKit, roles: &mut Roles, all_stats: &mut Vec<Arc<LcoreStats>>) {
    let LcoreKit {
        cfg,
        ports,
        published,
        pools,
        big,
        idle,
        clock,
        counters,
        eal,
        ..
    } = *kit;
    let forward_to = forward_map(cfg, ports);
    for (i, (&lcore, assigned)) in cfg.lcores.rx.iter().zip(cfg.rx_assignment()).enumerate() {
        let rxqs: Vec<_> = assigned.iter().filter_map(|&(p, q)| ports[p].rx_queue(q)).collect();
        let txqs: Vec<_> = ports.iter().filter_map(|p| p.tx_queue(i as u16)).collect();
        let stats = Arc::new(LcoreStats::new(
            lcore,
            rxqs.iter().map(|q| counters(q.port(), q.queue())).collect(),
            txqs.iter().map(|q| counters(q.port(), q.queue())).collect(),
        ));
        all_stats.push(stats.clone());
        let mut rx_lcore = RxLcore::new(
            i,
            rxqs,
            txqs,
            published.clone(),
            stats,
            idle,
            clock,
            // What the lcore allocates (ICMP errors, fragments) from its own socket's pool.
            (pools.on(eal.lcore_socket(lcore)).clone(), big.clone()),
        );
        if cfg.lcores.mode == LcoreMode::Forward {
            rx_lcore = rx_lcore.forwarding(forward_to.clone());
        }
        roles.push((lcore, Role::Rx(Box::new(rx_lcore))));
    }
}

/// The workers' roles; worker w owns TX queue rx.len() + w on every port.
fn worker_roles(kit: &LcoreKit, roles: &mut Roles, all_stats: &mut Vec<Arc<LcoreStats>>) {
    let LcoreKit {
        cfg,
        ports,
        kernel_ports,
        published,
        pools,
        idle,
        eal,
        counters,
        ..
    } = *kit;
    let nrx = cfg.lcores.rx.len();
    for (w, &lcore) in cfg.lcores.workers.iter().enumerate() {
        // Worker w also owns queue pair w of every kernel interface.
        let tables = published.current();
        let offload_counters = tables.kernel.as_ref().map(|k| (&k.counters, &k.index_of));
        let (kernel_tx, kernel_rx): (Vec<_>, Vec<_>) = kernel_ports
            .iter()
            .flatten()
            .filter_map(|k| {
                let index = offload_counters
                    .and_then(|(c, at)| at.get(k.id() as usize).copied().flatten().map(|i| (c, i as usize)));
                k.queue_pair(w, &pools.main, index)
            })
            .unzip();
        let txqs: Vec<WorkerTx> = ports
            .iter()
            .filter_map(|p| p.tx_queue((nrx + w) as u16))
            .map(WorkerTx::Port)
            .chain(kernel_tx)
            .collect();
        let stats = Arc::new(LcoreStats::new(
            lcore,
            vec![],
            txqs.iter().map(|q| counters(q.port(), q.queue())).collect(),
        ));
        all_stats.push(stats.clone());
        roles.push((
            lcore,
            Role::Worker(
                WorkerLcore::new(
                    w,
                    txqs,
                    published.clone(),
                    stats,
                    idle,
                    eal.tsc_hz(),
                    pools.on(eal.lcore_socket(lcore)).clone(),
                )
                .with_kernel_rx(kernel_rx),
            ),
        ));
    }
}

/// What the metrics read: the ports (names and set-up by id), every lcore's counters, (start
/// time, TSC rate), the pools, the ports' counters (live, then `final_port_stats`) and the
/// published generation.
fn metric_sources(
    (port_names, port_info): (Vec<String>, Vec<Option<metrics::PortInfo>>),
    lcores: Vec<Arc<LcoreStats>>,
    (start_time, tsc_hz): (f64, u64),
    (pools, big): (&Pools, &Arc<Mempool>),
    final_port_stats: &FinalPortStats,
    (published, health, backends): (&Arc<Published>, &Arc<Health>, &Arc<control::backends::BackendHealth>),
) -> Arc<Sources> {
    let (pools_for_metrics, big_for_metrics) = (pools.clone(), big.clone());
    Arc::new(Sources {
        port_names,
        port_info,
        lcores,
        dpdk_version: dpdk::version(),
        start_time,
        tsc_hz,
        // Every pool: one per NUMA socket with a port, and the reassembly buffers.
        mbufs_capacity: (pools.size() + big.size()) as u64,
        mbufs_in_use: Box::new(move || (pools_for_metrics.in_use() + big_for_metrics.in_use()) as u64),
        port_stats: {
            let last = final_port_stats.clone();
            Box::new(move |id| match &*last.lock().unwrap_or_else(|e| e.into_inner()) {
                Some(last) => last.get(id as usize).copied().flatten(),
                None => dpdk::port::stats_of(id).ok(),
            })
        },
        // Live only: once the ports close (the exit's dump) the driver has none to give.
        port_xstats: {
            let last = final_port_stats.clone();
            Box::new(move |id| match &*last.lock().unwrap_or_else(|e| e.into_inner()) {
                Some(_) => Vec::new(),
                None => dpdk::port::xstats_of(id).unwrap_or_default(),
            })
        },
        published: published.clone(),
        reload: Arc::new(ReloadStats::default()),
        http: Default::default(),
        health: health.clone(),
        backends: backends.clone(),
    })
}

/// The health watch over every port (by its kernel interface where it has one) and every lcore
/// (RX lcores first, as in `lcores`).
fn health_watch(
    cfg: &Config,
    (ports, kernel_ports): (&[Port], &[Option<KernelInterface>]),
    lcores: &[Arc<LcoreStats>],
    generation: u64,
) -> Watch {
    let mut watched: Vec<WatchedPort> = cfg
        .ports
        .iter()
        .zip(ports)
        .map(|(p, port)| WatchedPort {
            id: port.id(),
            name: p.device.clone(),
            kernel_interface: port.kernel_interface().map(String::from),
        })
        .collect();
    // A kernel interface set down cuts the kernel path: unhealthy, named, like a port.
    for (p, k) in cfg.ports.iter().zip(kernel_ports) {
        if let (Some(k), Some(name)) = (k, &p.kernel_interface) {
            watched.push(WatchedPort {
                id: k.id(),
                name: name.clone(),
                kernel_interface: Some(name.clone()),
            });
        }
    }
    Watch::new(watched, lcores, cfg.lcores.rx.len(), generation, Instant::now())
}

/// One health check: links, heartbeats, generations; logs each link change.
fn watch_tick(watch: &mut Watch, src: &Sources) {
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

/// Pins the calling thread (named for the log) to the housekeeping CPUs: the control and
/// metrics threads stay off the RX lcores' CPUs whenever possible.
fn housekeeping_pin(allowed: Option<&[u32]>, cfg: &Config) -> impl Fn(&str) + Clone + Send + Sync + 'static {
    let housekeeping = match allowed {
        Some(allowed) => {
            let (cpus, why) = crate::placement::housekeeping_cpus(
                allowed,
                &cfg.lcores.cpus_of(&cfg.lcores.rx),
                &cfg.lcores.cpus_of(&cfg.lcores.workers),
            );
            tracing::info!("fastpathd: control and metrics threads on CPUs {cpus:?} ({why})");
            Some(cpus)
        }
        None => {
            tracing::warn!(
                "fastpathd: cannot read the allowed CPUs: control and metrics threads share the main lcore's"
            );
            None
        }
    };
    move |what: &str| {
        if let Some(c) = &housekeeping {
            if let Err(e) = fastpath::dpdk::eal::pin_current_thread(c) {
                tracing::warn!("fastpathd: {what} thread stays on the main lcore's CPU: {e}");
            }
        }
    }
}

/// Moves the threads the EAL started for itself (interrupt thread, multi-process channel,
/// telemetry) to the housekeeping CPUs: the EAL leaves them on the main lcore's CPU, which is an
/// RX lcore's with `rx = [0]`, so a link interrupt or a `dpdk-proc-info` request would take
/// cycles from reception.
fn pin_eal_threads(allowed: Option<&[u32]>, cfg: &Config) {
    let Some(allowed) = allowed else {
        return;
    };
    let (cpus, _) = crate::placement::housekeeping_cpus(
        allowed,
        &cfg.lcores.cpus_of(&cfg.lcores.rx),
        &cfg.lcores.cpus_of(&cfg.lcores.workers),
    );
    for (tid, name) in crate::placement::eal_service_threads() {
        if let Err(e) = fastpath::dpdk::eal::pin_thread(tid, &cpus) {
            tracing::warn!("fastpathd: EAL thread {name} ({tid}) stays where the EAL put it: {e}");
        }
    }
}

/// Serves the metrics from their own thread, if enabled.
fn start_http(
    server: Option<crate::http::Server>,
    (registry, sources): (&Registry, &Arc<Sources>),
    limits: crate::http::Limits,
    pin: &(impl Fn(&str) + Clone + Send + 'static),
) -> Result<Option<crate::http::Running>, String> {
    let Some(server) = server else { return Ok(None) };
    tracing::info!("fastpathd: metrics on http://{}/metrics", server.local_addr());
    let pin = pin.clone();
    server
        .spawn(registry.clone(), sources.clone(), limits, move || pin("metrics"))
        .map(Some)
        .map_err(|e| format!("cannot start the metrics thread: {e}"))
}

/// Serves the control socket from its own thread (`fastpathctl`), reading what the metrics
/// read and the running config; its reloads go to the control thread like SIGHUP's.
fn start_ctl(
    ctl: control::ctl::ControlSocket,
    opts: &Options,
    sources: &Arc<Sources>,
    (reloader, started): (&Reloader, Instant),
    signals: &Signals,
    pin: &(impl Fn(&str) + Clone + Send + 'static),
) -> Result<control::ctl::Running, String> {
    tracing::info!("fastpathd: control socket {}", ctl.path().display());
    let view = control::ctl::view::View {
        sources: sources.clone(),
        config: reloader.running(),
        config_path: opts.config.clone(),
        started,
    };
    let pin = pin.clone();
    ctl.spawn(view, signals.submitter(), move || pin("control socket"))
        .map_err(|e| format!("cannot start the control socket's thread: {e}"))
}

/// Launches every role but the main lcore's, which is returned to run on this thread, with the
/// lcores launched, and logs that the daemon runs. If one cannot be launched, the others are
/// stopped and waited for.
fn launch(
    eal: &Eal,
    lcores: &config::LcoreConfig,
    roles: Roles,
    run_control: &Arc<RunControl>,
) -> Result<(Option<Role>, Vec<u32>), String> {
    let main_lcore = eal.main_lcore();
    let mut main_role = None;
    let mut launched = Vec::new();
    for (lcore, role) in roles {
        if lcore == main_lcore {
            main_role = Some(role);
            continue;
        }
        let flag = run_control.clone();
        if let Err(e) = eal.launch(lcore, move || role.run(&flag)) {
            run_control.abort();
            for l in &launched {
                let _ = eal.wait(*l);
            }
            return Err(format!("{e}"));
        }
        launched.push(lcore);
    }
    tracing::info!(
        "fastpathd: running: rx lcores {:?}, workers {:?}, main lcore {main_lcore}; SIGINT/SIGTERM to stop",
        lcores.rx,
        lcores.workers
    );
    crate::notify::Notifier::from_env().ready();
    Ok((main_role, launched))
}

/// Starts the control thread: signals, reloads, the live view, the idle exit.
fn spawn_control(
    opts: &Options,
    signals: &Signals,
    sources: &Arc<Sources>,
    run_control: &Arc<RunControl>,
    (mut reloader, mut watch, mut listeners): (Reloader, Watch, Option<control::kernel::ListenerWatch>),
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
fn serve(
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

/// What start-up made that shutdown releases, in its order.
struct Dataplane {
    eal: Eal,
    pools: Pools,
    big: Arc<Mempool>,
    ports: Vec<Port>,
    kernel_ports: Vec<KernelInterface>,
    published: Arc<Published>,
    run_control: Arc<RunControl>,
    sources: Arc<Sources>,
    registry: Registry,
    final_port_stats: FinalPortStats,
}

/// Once every lcore returned: closes the ports, writes the final metrics and the summary, then
/// frees every DPDK object before the EAL.
fn shutdown(d: Dataplane, opts: &Options, started: Instant, failed_lcores: Vec<u32>) -> Result<(), String> {
    let Dataplane {
        eal,
        pools,
        big,
        mut ports,
        mut kernel_ports,
        published,
        run_control,
        sources,
        registry,
        final_port_stats,
    } = d;
    // The final port counters while every port is open (a closed kernel interface's id is
    // invalid: DPDK said so at every stop), then the kernel interfaces (closing one removes the
    // interface), then the ports.
    snapshot_port_stats(&sources, &final_port_stats);
    let mut close_errors: Vec<String> = kernel_ports.iter_mut().filter_map(|k| k.close().err()).collect();
    close_errors.extend(close_ports(&mut ports));
    let text = metrics::render(&registry);
    if let Some(path) = &opts.metrics_dump {
        if let Err(e) = std::fs::write(path, &text) {
            tracing::error!("fastpathd: cannot write the metrics dump {}: {e}", path.display());
        }
    }
    summary(&sources, started.elapsed());
    let held: u32 = ports.iter().map(Port::held_at_close).sum();
    drop(ports);
    drop(kernel_ports);
    let leaked = pools.in_use() + big.in_use();
    if leaked > held {
        tracing::error!("fastpathd: {leaked} mbufs were not returned to the pool at exit");
    } else if leaked != 0 {
        tracing::info!(
            "fastpathd: {leaked} mbufs stay with the kernel's AF_XDP rings at exit (net_af_xdp lends \
             up to {held} and does not take them back at close)"
        );
    }
    // Everything that holds DPDK objects goes before the EAL: the tables' socket rings (which
    // return any packet still queued to the pool), then the pool.
    drop(registry);
    drop(sources);
    drop(run_control);
    let last = Arc::strong_count(&published);
    drop(published);
    if last != 1 {
        tracing::error!(
            "fastpathd: BUG: {} references to the config tables outlive the lcores",
            last - 1
        );
    }
    drop(big);
    let Pools { by_socket, main } = pools;
    drop(main);
    for (_, pool) in by_socket {
        if let Ok(pool) = Arc::try_unwrap(pool) {
            drop(pool);
        }
    }
    let runtime = eal.runtime_dir();
    eal.cleanup();
    if let Some(dir) = runtime {
        remove_runtime_files(&dir);
    }
    if !failed_lcores.is_empty() {
        return Err(format!("lcores {failed_lcores:?} stopped abnormally"));
    }
    if !close_errors.is_empty() {
        return Err(close_errors.join("; "));
    }
    Ok(())
}

/// Keeps the ports' last counters for the final metrics (rendered once the ports are closed),
/// then stops and closes every port (drivers flush their output there). Returns what failed.
/// What DPDK 22.11 leaves behind a primary process that stopped cleanly: its runtime directory
/// and, on hugepages, the files backing its memory (`<prefix>map_*` on every hugetlbfs mount).
/// A stop is the last of them (no secondary attaches to a primary that is gone), so both go.
fn remove_runtime_files(dir: &std::path::Path) {
    let Some(prefix) = dir.file_name().and_then(|n| n.to_str()).map(String::from) else {
        return;
    };
    if let Err(e) = std::fs::remove_dir_all(dir) {
        tracing::debug!("fastpathd: runtime directory {} not removed: {e}", dir.display());
    }
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    for mount in mounts.lines().filter_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(2) == Some(&"hugetlbfs"))
            .then(|| f.get(1).map(|m| m.to_string()))
            .flatten()
    }) {
        let Ok(entries) = std::fs::read_dir(&mount) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            if name.to_str().is_some_and(|n| n.starts_with(&format!("{prefix}map_"))) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Every port's counters as they stand, kept for the final metrics.
fn snapshot_port_stats(sources: &Sources, final_port_stats: &FinalPortStats) {
    *final_port_stats.lock().unwrap_or_else(|e| e.into_inner()) = Some(
        // Ids that name a DPDK port only: between the ports and a TAP kernel interface's id
        // (past every port's) are ids of nothing, and DPDK logs each refusal.
        (0..sources.port_names.len() as u16)
            .map(|id| {
                let named = !sources.port_names[id as usize].is_empty() && id < dpdk::tap::TAP_ID_BASE;
                named.then(|| dpdk::port::stats_of(id).ok()).flatten()
            })
            .collect(),
    );
}

fn close_ports(ports: &mut [Port]) -> Vec<String> {
    let mut close_errors = Vec::new();
    for p in ports.iter_mut() {
        if let Err(e) = p.close() {
            close_errors.push(e.to_string());
        }
    }
    close_errors
}

/// Bytes of mbuf data room for frames of `mtu`: headroom + Ethernet + two VLAN tags + FCS.
fn total_rx(src: &Sources) -> u64 {
    src.lcores.iter().map(|l| l.rx_packets()).sum()
}

fn outcome_totals(src: &Sources) -> Vec<(Outcome, u64)> {
    Outcome::ALL
        .iter()
        .map(|&o| (o, fastpath::stats::total_outcome(&src.lcores, o)))
        .collect()
}

/// Watches signals, the idle timer and the stats interval; sets `stop` when it is time.
fn control_loop(
    stop: &RunControl,
    signals: &Messages,
    src: &Sources,
    (reloader, watch, mut listeners): (&mut Reloader, &mut Watch, Option<&mut control::kernel::ListenerWatch>),
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

/// Seed 004: a tunnel loop is logged, at most once a second, from the control thread (no I/O
/// on lcores).
struct RecursionLog {
    /// Packets nested too deep when last logged.
    logged: u64,
    /// When last logged.
    at: Instant,
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
    fn tick(&mut self, src: &Sources) {
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
struct Snapshot {
    at: Instant,
    rx: Vec<(u16, u64)>,
    tx: Vec<(u16, u64)>,
    /// By kernel interface id: packets the kernel wrote (sent out of the port by a worker) and
    /// packets written into it; the workers count them, not the queues' counters.
    kernel: Vec<(u16, u64, u64)>,
    outcomes: Vec<(Outcome, u64)>,
}

impl Snapshot {
    fn take(src: &Sources) -> Snapshot {
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

fn stats_line(src: &Sources, a: &Snapshot, b: &Snapshot, up: Duration) -> String {
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

fn human(pps: f64) -> String {
    if pps >= 1e6 {
        format!("{:.2}Mpps", pps / 1e6)
    } else if pps >= 1e3 {
        format!("{:.1}kpps", pps / 1e3)
    } else {
        format!("{pps:.0}pps")
    }
}

fn summary(src: &Sources, up: Duration) {
    let rx = total_rx(src);
    let totals = outcome_totals(src);
    let counted: u64 = totals.iter().map(|(_, n)| n).sum();
    let mut s = format!(
        "fastpathd: stopped after {:.1}s: {rx} packets received;",
        up.as_secs_f64()
    );
    for (o, n) in totals.iter().filter(|(_, n)| *n > 0) {
        s.push_str(&format!(" {}={n}", o.name()));
    }
    tracing::info!("{s}");
    if counted != rx {
        tracing::error!("fastpathd: BUG: {rx} packets received but {counted} outcomes counted");
    }
}
