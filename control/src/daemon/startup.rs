//! Start-up: the EAL, NUMA placement, pools, ports, the metric sources, the health watch, and
//! the housekeeping threads (metrics endpoint, control socket) pinned off the RX lcores.

use super::FinalPortStats;
use crate::cli::Options;
use crate::config::{self, Config};
use crate::metrics::{self, Sources};
use crate::reload::{ReloadStats, Reloader};
use crate::signals::Signals;
use crate::table_builder::OpenedPort;
use control::health::{Health, Watch, WatchedPort};
use control::kernel_interface::KernelInterface;
use fastpath::dpdk::{self, Eal, Mempool, Port, PortConf};
use fastpath::generation::Published;
use fastpath::stats::LcoreStats;
use prometheus::Registry;
use std::sync::Arc;
use std::time::Instant;

/// Initialises the EAL with the lcores of `[lcores]` and the arguments of the config and the
/// command line.
pub(super) fn init_eal(cfg: &Config, opts: &Options) -> Result<Eal, String> {
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
pub(super) fn remove_stale_vhost_sockets(argv: &[String]) {
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
pub(super) struct Pools {
    /// (socket, pool), ascending by socket.
    pub(super) by_socket: Vec<(u32, Arc<Mempool>)>,
    /// The main lcore's socket's pool (the first if it has none): the kernel interfaces' and
    /// the socket rings' home pool.
    pub(super) main: Arc<Mempool>,
}

impl Pools {
    /// The pool on `socket`, else the main one.
    pub(super) fn on(&self, socket: Option<u32>) -> &Arc<Mempool> {
        socket
            .and_then(|s| self.by_socket.iter().find(|(t, _)| *t == s))
            .map_or(&self.main, |(_, p)| p)
    }

    pub(super) fn in_use(&self) -> u32 {
        self.by_socket.iter().map(|(_, p)| p.in_use()).sum()
    }

    pub(super) fn size(&self) -> u32 {
        self.by_socket.iter().map(|(_, p)| p.size()).sum()
    }
}

/// Where the ports and lcores are by the EAL, and what follows (`control::numa::plan`): the
/// pools, each port's, and a warning for each RX lcore that polls a port on another socket
/// which the machine check (sysfs, before the EAL) could not see.
pub(super) struct NumaPlan {
    pub(super) plan: control::numa::Plan,
    pub(super) main_socket: u32,
}

pub(super) fn numa_plan(cfg: &Config, eal: &Eal) -> Result<NumaPlan, String> {
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
pub(super) fn make_pools(cfg: &Config, numa: &NumaPlan) -> Result<(Pools, Arc<Mempool>), String> {
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
pub(super) fn open_ports(cfg: &Config, pools: &Pools, numa: &NumaPlan) -> Result<Vec<Port>, String> {
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
pub(super) fn describe_ports(
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

/// What the metrics read: the ports (names and set-up by id), every lcore's counters, (start
/// time, TSC rate), the pools, the ports' counters (live, then `final_port_stats`) and the
/// published generation.
pub(super) fn metric_sources(
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
pub(super) fn health_watch(
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

/// Pins the calling thread (named for the log) to the housekeeping CPUs: the control and
/// metrics threads stay off the RX lcores' CPUs whenever possible.
pub(super) fn housekeeping_pin(allowed: Option<&[u32]>, cfg: &Config) -> impl Fn(&str) + Clone + Send + Sync + 'static {
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
pub(super) fn pin_eal_threads(allowed: Option<&[u32]>, cfg: &Config) {
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
pub(super) fn start_http(
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
pub(super) fn start_ctl(
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
