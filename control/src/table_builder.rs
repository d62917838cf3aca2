//! Building the runtime tables of a config generation: port addresses, the flow hasher, the
//! service table and the services' sockets (DPDK rings).
//!
//! Sockets persist across reloads: a socket whose service keeps its name, index and capacity
//! keeps its ring (so queued packets are not lost), its pressure flag and flow history, and its
//! counters. A socket that changes capacity gets a new ring but keeps its counters; a removed
//! socket's ring is drained by its worker and freed once no lcore can reach it.

use crate::config::ListConfig;
use crate::config::{Config, FilterConfig, ServiceConfig, KERNEL_SERVICE};
use fastpath::dpdk::{MbufRing, Mempool};
use fastpath::pipeline::filter::{Filter, FilterCounters, Filters};
use fastpath::pipeline::icmp_error::{GlobalBucket, IcmpCounters};
use fastpath::pipeline::kernel::{KernelCounters, KernelListeners, KernelPath, PuntBudget, PuntRules, Solicitations};
use fastpath::pipeline::maglev::Backend;
use fastpath::pipeline::prefix::PrefixSet;
use fastpath::pipeline::service::Action;
use fastpath::pipeline::source_limit::{SourceLimitConfig as SourceLimit, SourceLimitCounters};
use fastpath::pipeline::tcp_reset::ResetCounters;
use fastpath::pipeline::tcp_state::{TcpStateConfig, TcpStateCounters};
use fastpath::pipeline::tunnel::{Tunnel, TunnelCounters, TunnelOut};
use fastpath::pipeline::Instant;
use fastpath::pipeline::{Group, PortAddrs, Service, ServiceTable, Tables};
use fastpath::socket::{QueueSync, Socket, SocketCounters, SocketQueue};
use fastpath::wire::{EthernetAddress, Toeplitz};
use std::collections::HashMap;
use std::sync::Arc;

/// What a port looks like once DPDK opened it.
#[derive(Clone, Debug)]
pub struct OpenedPort {
    /// DPDK port id.
    pub id: u16,
    /// The port's own MAC address.
    pub mac: EthernetAddress,
    /// DPDK port id of its kernel interface (`[[port]] kernel_interface`), if it has one.
    pub kernel: Option<u16>,
}

/// Builds generations, remembering the sockets of the last one.
pub struct TableBuilder {
    ports: Vec<OpenedPort>,
    rx_lcores: usize,
    workers: usize,
    sockets: HashMap<(String, usize), Arc<Socket>>,
    counters: HashMap<(String, usize), Arc<SocketCounters>>,
    tunnel_counters: HashMap<String, Arc<TunnelCounters>>,
    handoff: HashMap<String, Arc<SocketQueue>>,
    /// The global ICMP budget lives as long as the daemon: reloads reconfigure it.
    icmp_global: Option<Arc<GlobalBucket>>,
    icmp_counters: Arc<IcmpCounters>,
    tcp_reset_global: Option<Arc<GlobalBucket>>,
    tcp_reset_counters: Arc<ResetCounters>,
    kernel_counters: Arc<KernelCounters>,
    /// Where the kernel listens: one set for the daemon's life, kept current by the control
    /// thread ([`crate::kernel_interface::ListenerWatch`]).
    kernel_listeners: Arc<KernelListeners>,
    /// The kernel's solicitations in flight, kept across reloads like its counters.
    kernel_solicited: Arc<Solicitations>,
    /// The filters of the last generation by name (`filter`, `service:NAME`), with the lists
    /// they were built from: an unchanged list is not built again (a million prefixes take a
    /// second), and a filter's counters outlive reloads.
    filters: HashMap<String, (FilterConfig, Arc<Filter>)>,
    /// What `[source_limit]` refused, for the daemon's life.
    source_limit_counters: Arc<SourceLimitCounters>,
    /// What the TCP state tables decided, for the daemon's life.
    tcp_state_counters: Arc<TcpStateCounters>,
    make_queue: MakeQueue,
    /// The backend health checks whose states shape the `tunnel` services' Maglev tables.
    backends: Option<Arc<crate::backends::BackendHealth>>,
}

/// Makes the queue behind a socket or a hand-off of this capacity, for the lcores `QueueSync`
/// says will use it, drained by the worker slot given (`None`: any worker).
pub type MakeQueue = Box<dyn Fn(usize, QueueSync, Option<usize>) -> Result<SocketQueue, String> + Send>;

/// A service and the ports it listens on, as [`ServiceTable::new`] takes them.
type Listening = (Service, Vec<u16>);

/// Rebuilds `set`'s Maglev table without the backends whose health check says down (the
/// config's table stays when all are up); returns whether every backend was down, in which case
/// all are kept ([`crate::backends::fail_open`]).
fn backends_by_health(
    cfg: &Config,
    set: &mut fastpath::pipeline::Backends,
    health: &crate::backends::BackendHealth,
) -> bool {
    let mut backends: Vec<Backend> = set
        .tunnels
        .iter()
        .map(|&i| {
            let t = &cfg.tunnels[i];
            Backend {
                name: t.name.clone(),
                weight: t.weight,
                drain: t.drain,
                up: health.up_of(&t.name),
            }
        })
        .collect();
    if backends.iter().all(|b| b.up) {
        return false;
    }
    let open = crate::backends::fail_open(&mut backends);
    if !open {
        // The table and which tunnels keep their tracked connections: a down backend's move.
        *set = fastpath::pipeline::Backends::new(std::mem::take(&mut set.tunnels), &backends);
    }
    open
}

/// Packets a sequence tunnel's hand-off ring holds.
pub const HANDOFF_CAPACITY: usize = 4096;

/// The worker slot that drains socket `index` of `service`: stable across reloads (it depends
/// only on the name and the index), spread over the workers.
pub fn worker_for(service: &str, index: usize, workers: usize) -> usize {
    // FNV-1a of the name.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in service.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    ((h as usize).wrapping_add(index)) % workers.max(1)
}

impl TableBuilder {
    /// A builder for these opened ports (same order as the config's) and lcore counts, whose
    /// queues are DPDK rings (EAL must be up) for packets from `pool` (the RX pool: see
    /// [`MbufRing`] for what a ring does with its home pool), each on the NUMA socket of the
    /// worker that drains it (`ring_sockets`, by worker slot; `None` or a ring any worker may
    /// drain: any socket).
    pub fn new(
        ports: Vec<OpenedPort>,
        rx_lcores: usize,
        (workers, ring_sockets): (usize, Vec<Option<u32>>),
        pool: Arc<Mempool>,
    ) -> Self {
        let make = move |capacity: usize, sync: QueueSync, consumer: Option<usize>| -> Result<SocketQueue, String> {
            let socket = consumer.and_then(|w| ring_sockets.get(w).copied().flatten());
            Ok(MbufRing::on_socket(capacity, pool.clone(), sync, socket)
                .map_err(|e| e.to_string())?
                .into())
        };
        Self::with_queues(ports, rx_lcores, workers, Box::new(make))
    }

    /// Like [`TableBuilder::new`] with other queues than DPDK rings (e.g.
    /// [`fastpath::socket::SimQueue`] for the in-process capture replay, which has no EAL).
    pub fn with_queues(ports: Vec<OpenedPort>, rx_lcores: usize, workers: usize, make_queue: MakeQueue) -> Self {
        let kernel_counters = Arc::new(KernelCounters::new(workers, ports.len()));
        TableBuilder {
            kernel_counters,
            kernel_listeners: Arc::default(),
            kernel_solicited: Arc::new(Solicitations::new(workers, ports.len())),
            ports,
            rx_lcores,
            workers,
            sockets: HashMap::new(),
            counters: HashMap::new(),
            tunnel_counters: HashMap::new(),
            handoff: HashMap::new(),
            icmp_global: None,
            icmp_counters: Arc::new(IcmpCounters::new(rx_lcores)),
            tcp_reset_global: None,
            tcp_reset_counters: Arc::new(ResetCounters::new(rx_lcores)),
            filters: HashMap::new(),
            source_limit_counters: Arc::new(SourceLimitCounters::new(rx_lcores)),
            tcp_state_counters: Arc::new(TcpStateCounters::new(rx_lcores)),
            make_queue,
            backends: None,
        }
    }

    /// Builds every generation with `backends`' states: a down backend gets no slot.
    pub fn with_backend_health(mut self, backends: Arc<crate::backends::BackendHealth>) -> Self {
        self.backends = Some(backends);
        self
    }

    /// How a socket queue is used: a socket has one queue per RX lcore, which only that RX
    /// lcore enqueues to; only the socket's worker dequeues, for as long as the socket exists (a
    /// socket is reused across reloads only with the same worker, and dropped only when no
    /// lcore holds it).
    pub fn socket_sync(&self) -> QueueSync {
        QueueSync {
            single_producer: true,
            single_consumer: true,
            producer_reclaims: false,
        }
    }

    /// How the sockets of service `s` are used: [`TableBuilder::socket_sync`], and for a `sink`
    /// queues whose RX lcore frees what the worker took (the worker only counts: the packets
    /// and the queue's slots never leave the RX lcore's cache).
    pub fn service_socket_sync(&self, s: &crate::config::ServiceConfig) -> QueueSync {
        let mut sync = self.socket_sync();
        sync.producer_reclaims = matches!(s.action, Action::Sink);
        sync
    }

    /// The TCP ports the kernel listens on, as every generation's kernel path reads them.
    pub fn kernel_listeners(&self) -> Arc<KernelListeners> {
        self.kernel_listeners.clone()
    }

    /// The tables of `cfg` as generation `generation`. Fails only if a ring cannot be created.
    pub fn build(&mut self, cfg: &Config, generation: u64) -> Result<Tables, String> {
        let (mut services, sockets, kernel_service) = self.services(cfg)?;
        if let Some(h) = &self.backends {
            let mut failing_open = Vec::new();
            for (svc, _) in &mut services {
                if let Action::Tunnel(set) = &mut svc.action {
                    if backends_by_health(cfg, set, h) {
                        failing_open.push(svc.name.clone());
                    }
                }
            }
            h.set_failing_open(failing_open);
        }
        let tunnels = self.tunnels(cfg)?;
        let kernel = kernel_service.map(|service| self.kernel_path(cfg, service));
        let filters = self.filters(cfg, &services);
        let source_limit = self.source_limit(cfg, &services);
        let tcp_state = self.tcp_state(cfg, &services);
        Ok(Tables {
            generation,
            ports: self.port_addrs(cfg),
            hasher: Toeplitz::new(cfg.rss.key.hash_key(), cfg.rss.symmetric),
            services: ServiceTable::new(services),
            sockets,
            flow_limit: cfg.flow_limit.clone(),
            tunnels,
            port_mtu: self.port_mtu(cfg),
            reassembly: cfg.reassembly.clone(),
            icmp: cfg.icmp.clone(),
            icmp_global: Some(self.icmp_global(cfg)),
            icmp_counters: self.icmp_counters.clone(),
            tcp_reset: cfg.tcp_reset.clone(),
            tcp_reset_global: Some(self.tcp_reset_global(cfg)),
            tcp_reset_counters: self.tcp_reset_counters.clone(),
            conntrack: cfg.conntrack,
            // A tenth of a second's worth at once.
            icmp_to_backend: PuntBudget::per_lcore(
                cfg.conntrack.icmp_per_sec,
                cfg.conntrack.icmp_per_sec / 10,
                self.rx_lcores,
            ),
            kernel,
            filters,
            source_limit,
            source_limit_counters: self.source_limit_counters.clone(),
            tcp_state,
            tcp_state_counters: self.tcp_state_counters.clone(),
        })
    }

    /// `[source_limit]` as the lcores read it: a known source's budget per RX lcore, the
    /// newcomers' shared among them, and which of the table's services it applies to.
    fn source_limit(&self, cfg: &Config, services: &[Listening]) -> SourceLimit {
        let c = &cfg.source_limit;
        if !c.enabled {
            return SourceLimit::default();
        }
        SourceLimit {
            enabled: true,
            per_source: PuntBudget::per_lcore(c.rate, c.burst, 1),
            newcomers: PuntBudget::per_lcore(c.new_rate, c.new_burst, self.rx_lcores),
            ipv4_prefix: c.ipv4_prefix,
            ipv6_prefix: c.ipv6_prefix,
            entries: c.entries as usize,
            idle_ns: c.idle_ms as u64 * 1_000_000,
            calm_ns: c.calm_ms as u64 * 1_000_000,
            services: if c.services.is_empty() {
                Vec::new()
            } else {
                services.iter().map(|(s, _)| c.services.contains(&s.name)).collect()
            },
        }
    }

    /// `[tcp_state]` as the RX lcores read it: no table (0 entries) unless a service asks for
    /// one; the SYN budget of a known source per RX lcore, the newcomers' shared among them.
    fn tcp_state(&self, cfg: &Config, services: &[Listening]) -> TcpStateConfig {
        let c = &cfg.tcp_state;
        let asks = |name: &str| cfg.services.iter().any(|c| c.name == name && c.tcp_state);
        let tracked: Vec<bool> = services.iter().map(|(s, _)| asks(&s.name)).collect();
        if !tracked.contains(&true) {
            return TcpStateConfig::default();
        }
        let mut names: Vec<String> = services
            .iter()
            .filter(|(s, _)| asks(&s.name))
            .map(|(s, _)| s.name.clone())
            .collect();
        names.sort();
        TcpStateConfig {
            entries: c.entries,
            handshake_timeout_s: c.handshake_timeout_s,
            established_timeout_s: c.established_timeout_s,
            closing_timeout_s: c.closing_timeout_s,
            learn_ns: c.learn_s as u64 * 1_000_000_000,
            syn: SourceLimit {
                enabled: c.syn_rate > 0,
                per_source: PuntBudget::per_lcore(c.syn_rate, c.syn_burst, 1),
                newcomers: PuntBudget::per_lcore(c.syn_new_rate, c.syn_new_burst, self.rx_lcores),
                ipv4_prefix: 32,
                ipv6_prefix: 64,
                entries: (c.entries as usize / 4).max(1024),
                idle_ns: 10_000_000_000,
                calm_ns: 10_000_000_000,
                services: Vec::new(),
            },
            services: tracked,
            tracked: names,
        }
    }

    /// `[filter]` and each service's own, by the services' order in the table.
    fn filters(&mut self, cfg: &Config, services: &[Listening]) -> Filters {
        let mut kept = HashMap::new();
        let mut make = |name: String, c: &FilterConfig| -> Option<Arc<Filter>> {
            if c.is_empty() {
                return None;
            }
            let old = self.filters.remove(&name);
            let f = match old {
                Some((oc, f)) if oc == *c => f,
                old => {
                    let set = |l: &Option<ListConfig>| l.as_ref().map(|l| PrefixSet::new(&l.all()));
                    Arc::new(Filter {
                        name: name.clone(),
                        deny: set(&c.deny),
                        allow: set(&c.allow),
                        counters: old
                            .map(|(_, f)| f.counters.clone())
                            .unwrap_or_else(|| Arc::new(FilterCounters::new(self.rx_lcores))),
                    })
                }
            };
            kept.insert(name, (c.clone(), f.clone()));
            Some(f)
        };
        let global = make("filter".to_string(), &cfg.filter);
        let mut ports: Vec<Option<Arc<Filter>>> = Vec::new();
        for (p, c) in self.ports.iter().zip(&cfg.ports) {
            if let Some(f) = make(format!("port:{}", c.device), &c.filter) {
                if ports.len() <= p.id as usize {
                    ports.resize(p.id as usize + 1, None);
                }
                ports[p.id as usize] = Some(f);
            }
        }
        let by_name: HashMap<&str, &FilterConfig> = cfg.services.iter().map(|s| (s.name.as_str(), &s.filter)).collect();
        let per_service: Vec<Option<Arc<Filter>>> = services
            .iter()
            .map(|(s, _)| {
                by_name
                    .get(s.name.as_str())
                    .and_then(|c| make(format!("service:{}", s.name), c))
            })
            .collect();
        self.filters = kept;
        Filters {
            global,
            ports,
            any_service: per_service.iter().any(Option::is_some),
            services: per_service,
        }
    }

    /// The kernel path: `[kernel] punt`, the internal service at index `service`, and which
    /// port mirrors into which kernel interface.
    fn kernel_path(&self, cfg: &Config, service: usize) -> KernelPath {
        let mut k = KernelPath {
            rules: PuntRules::new(cfg.kernel.unhandled, &cfg.kernel.ports),
            budget: PuntBudget::per_lcore(cfg.kernel.punt_rate, cfg.kernel.punt_burst, self.rx_lcores),
            listeners: self.kernel_listeners.clone(),
            service,
            counters: self.kernel_counters.clone(),
            solicited: self.kernel_solicited.clone(),
            ..Default::default()
        };
        let max = self
            .ports
            .iter()
            .flat_map(|p| std::iter::once(p.id).chain(p.kernel))
            .max()
            .unwrap_or(0) as usize;
        k.interface_of = vec![None; max + 1];
        k.port_of = vec![None; max + 1];
        k.index_of = vec![None; max + 1];
        for (i, p) in self.ports.iter().enumerate() {
            k.index_of[p.id as usize] = Some(i as u16);
            if let Some(tap) = p.kernel {
                k.interface_of[p.id as usize] = Some(tap);
                k.port_of[tap as usize] = Some(p.id);
                k.index_of[tap as usize] = Some(i as u16);
            }
        }
        k
    }

    /// The internal service punted packets queue in: one socket per worker.
    fn kernel_service(&self, cfg: &Config) -> ServiceConfig {
        ServiceConfig {
            name: KERNEL_SERVICE.to_string(),
            protocol: fastpath::wire::IpProtocol::UDP,
            ports: Vec::new(),
            addresses: Vec::new(),
            sockets: self.workers.max(1),
            socket_capacity: cfg.kernel.socket_capacity,
            fanout: fastpath::pipeline::FanoutMode::Hash,
            rollover: cfg.kernel.rollover,
            huge_flows: true,
            flow_limit: cfg.kernel.flow_limit,
            action: Action::Kernel,
            cost_ns: 0,
            free_on_rx: false,
            echo_allow_low_ports: false,
            tcp_state: false,
            filter: Default::default(),
        }
    }

    /// The largest DPDK port id, which sizes the tables indexed by port id.
    fn max_port_id(&self) -> usize {
        self.ports
            .iter()
            .flat_map(|p| std::iter::once(p.id).chain(p.kernel))
            .map(|id| id as usize)
            .max()
            .unwrap_or(0)
    }

    /// Each port's MAC and local addresses, by DPDK port id.
    fn port_addrs(&self, cfg: &Config) -> Vec<PortAddrs> {
        let mut addrs = vec![PortAddrs::default(); self.max_port_id() + 1];
        for (p, opened) in cfg.ports.iter().zip(&self.ports) {
            addrs[opened.id as usize] = PortAddrs::new(
                p.mac.unwrap_or(opened.mac),
                p.ipv4.clone(),
                p.ipv6.clone(),
                opened.kernel.is_some(),
            );
        }
        addrs
    }

    /// Each port's MTU, by DPDK port id.
    fn port_mtu(&self, cfg: &Config) -> Vec<u16> {
        let mut v = vec![1500u16; self.max_port_id() + 1];
        for (p, opened) in cfg.ports.iter().zip(&self.ports) {
            v[opened.id as usize] = p.mtu.unwrap_or(1500);
            if let Some(k) = opened.kernel {
                // What is written into the kernel interface is cut to the port's MTU (the
                // kernel reassembles it), as it is on the port.
                v[k as usize] = p.mtu.unwrap_or(1500);
            }
        }
        v
    }

    /// The services with their listening ports, and every socket of the generation (services'
    /// groups index into it), kept from the last generation where their use is the same.
    /// With a kernel interface, the internal `kernel` service comes last; its index is returned.
    #[allow(clippy::type_complexity)]
    fn services(&mut self, cfg: &Config) -> Result<(Vec<Listening>, Vec<Arc<Socket>>, Option<usize>), String> {
        let mut sockets: Vec<Arc<Socket>> = Vec::new();
        let mut kept: HashMap<(String, usize), Arc<Socket>> = HashMap::new();
        let mut services = Vec::new();
        let internal = self
            .ports
            .iter()
            .any(|p| p.kernel.is_some())
            .then(|| self.kernel_service(cfg));
        let kernel_service = internal.as_ref().map(|_| cfg.services.len());
        for s in cfg.services.iter().chain(internal.iter()) {
            let mut group = Vec::new();
            for i in 0..s.sockets {
                let socket = self.socket(s, i)?;
                group.push(sockets.len());
                kept.insert((s.name.clone(), i), socket.clone());
                sockets.push(socket);
            }
            let svc = Service {
                name: s.name.clone(),
                protocol: s.protocol,
                addresses: s.addresses.clone(),
                group: Group {
                    sockets: group,
                    mode: s.fanout,
                    rollover: s.rollover,
                    huge_flows: s.huge_flows,
                    flow_limit: s.flow_limit,
                },
                action: s.action.clone(),
                cost_ns: s.cost_ns,
                echo_allow_low_ports: s.echo_allow_low_ports,
            };
            services.push((svc, s.ports.clone()));
        }
        // Only the new generation's sockets stay reachable from here; counters of removed
        // sockets are kept so a service that comes back continues its series.
        self.sockets = kept;
        Ok((services, sockets, kernel_service))
    }

    /// Socket `i` of service `s`: the last generation's if its capacity, worker and use are
    /// the same, else a new queue with the socket's counters.
    fn socket(&mut self, s: &ServiceConfig, i: usize) -> Result<Arc<Socket>, String> {
        let key = (s.name.clone(), i);
        let worker = worker_for(&s.name, i, self.workers);
        let sync = self.service_socket_sync(s);
        let reuse = self
            .sockets
            .get(&key)
            .filter(|old| {
                old.capacity() == s.socket_capacity
                    && old.queues().len() == self.rx_lcores
                    && old.worker == worker
                    && old.free_on_rx == s.free_on_rx
                    && old.kernel == matches!(s.action, Action::Kernel)
                    && old.sync == sync
            })
            .cloned();
        if let Some(old) = reuse {
            return Ok(old);
        }
        let queues = (0..self.rx_lcores.max(1))
            .map(|_| (self.make_queue)(s.socket_capacity, sync, Some(worker)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("service {:?} socket {i}: {e}", s.name))?;
        let counters = self
            .counters
            .entry(key)
            .or_insert_with(|| Arc::new(SocketCounters::new(self.rx_lcores, self.workers)))
            .clone();
        let mut socket = Socket::with_queues(&s.name, i, queues, worker, counters);
        socket.sync = sync;
        socket.free_on_rx = s.free_on_rx;
        socket.kernel = matches!(s.action, Action::Kernel);
        Ok(Arc::new(socket))
    }

    /// The tunnels, keeping each one's counters and (sequence tunnels) hand-off ring.
    fn tunnels(&mut self, cfg: &Config) -> Result<Vec<Tunnel>, String> {
        let mut tunnels = Vec::new();
        let mut handoff = HashMap::new();
        for t in &cfg.tunnels {
            let out = match &t.via {
                crate::config::TunnelVia::Port(pi, next_hop) => {
                    let opened = &self.ports[*pi];
                    let pc = &cfg.ports[*pi];
                    TunnelOut::Port {
                        port: opened.id,
                        src_mac: pc.mac.unwrap_or(opened.mac),
                        dst_mac: *next_hop,
                        mtu: pc.mtu.unwrap_or(1500),
                    }
                }
                crate::config::TunnelVia::Tunnel(i) => TunnelOut::Via(*i),
            };
            let counters = self
                .tunnel_counters
                .entry(t.name.clone())
                .or_insert_with(|| Arc::new(TunnelCounters::new(self.rx_lcores, self.workers)))
                .clone();
            let ring = if t.sequence {
                let r = self.handoff_ring(&t.name)?;
                handoff.insert(t.name.clone(), r.clone());
                Some(r)
            } else {
                None
            };
            tunnels.push(Tunnel {
                name: t.name.clone(),
                local: t.local,
                remote: t.remote,
                key: t.key,
                sequence: t.sequence,
                checksum: t.checksum,
                ttl: t.ttl,
                out,
                depth: t.depth,
                owner: worker_for(&t.name, 0, self.workers),
                counters,
                handoff: ring,
                max_seq_jump: t.max_seq_jump,
            });
        }
        self.handoff = handoff;
        Ok(tunnels)
    }

    /// The hand-off ring of sequence tunnel `name`: the last generation's, or a new one.
    fn handoff_ring(&self, name: &str) -> Result<Arc<SocketQueue>, String> {
        if let Some(r) = self.handoff.get(name) {
            return Ok(r.clone());
        }
        // Any worker may hand off to the owner; off the common path, so it keeps DPDK's
        // default (shared) modes.
        let ring = (self.make_queue)(HANDOFF_CAPACITY, QueueSync::SHARED, None)
            .map_err(|e| format!("tunnel {name:?} hand-off ring: {e}"))?;
        Ok(Arc::new(ring))
    }

    /// The global ICMP budget: made once, reconfigured by every later generation.
    fn icmp_global(&mut self, cfg: &Config) -> Arc<GlobalBucket> {
        match &self.icmp_global {
            Some(g) => {
                g.reconfigure(cfg.icmp.msgs_per_sec, cfg.icmp.burst);
                g.clone()
            }
            None => {
                let g = cfg.icmp.global_bucket(Instant(0));
                self.icmp_global = Some(g.clone());
                g
            }
        }
    }

    /// The global TCP reset budget: made once, reconfigured by every later generation.
    fn tcp_reset_global(&mut self, cfg: &Config) -> Arc<GlobalBucket> {
        match &self.tcp_reset_global {
            Some(g) => {
                g.reconfigure(cfg.tcp_reset.msgs_per_sec, cfg.tcp_reset.burst);
                g.clone()
            }
            None => {
                let g = cfg.tcp_reset.global_bucket(Instant(0));
                self.tcp_reset_global = Some(g.clone());
                g
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_assignment_is_stable_and_spread() {
        let a: Vec<usize> = (0..8).map(|i| worker_for("echo", i, 2)).collect();
        assert_eq!(a, (0..8).map(|i| worker_for("echo", i, 2)).collect::<Vec<_>>());
        assert_eq!(a.iter().filter(|&&w| w == 0).count(), 4);
        assert!((0..8).all(|i| worker_for("x", i, 1) == 0));
    }

    /// The queues each socket is made with: one per RX lcore, each single-producer (only its
    /// RX lcore enqueues) and single-consumer (the socket's worker), a sink's reclaiming; a
    /// sequence tunnel's hand-off takes packets from any worker.
    #[test]
    fn sockets_have_one_single_producer_queue_per_rx_lcore() {
        let src = r#"
[dpdk]
eal_args = ["--no-huge"]
mbufs = 32767
[[port]]
device = "net_null0"
ipv4 = ["192.0.2.1"]
mac = "02:00:00:00:00:01"
rx_queues = 2
tx_queues = 3
[lcores]
rx = [1]
workers = [0]
[[service]]
name = "echo"
protocol = "udp"
ports = [7]
sockets = 2
action = "echo"
[[service]]
name = "discard"
protocol = "udp"
ports = [9]
sockets = 1
action = "sink"
[[tunnel]]
name = "seq"
local = "192.0.2.1"
remote = "198.51.100.3"
sequence = true
port = "net_null0"
next_hop_mac = "02:00:00:00:00:fe"
"#;
        for (rx, rx_lcores) in [("[1]", 1), ("[1, 2]", 2)] {
            let cfg =
                crate::config::parse(&src.replace("rx = [1]", &format!("rx = {rx}")), "t.toml").expect("valid config");
            let made: Arc<std::sync::Mutex<Vec<(usize, QueueSync)>>> = Default::default();
            let record = made.clone();
            let make: MakeQueue = Box::new(move |cap, sync, _| {
                record.lock().unwrap().push((cap, sync));
                Ok(fastpath::socket::SimQueue::new(cap).into())
            });
            let port = OpenedPort {
                id: 0,
                mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
                kernel: None,
            };
            let mut b = TableBuilder::with_queues(vec![port], rx_lcores, 1, make);
            let t = b.build(&cfg, 1).expect("tables");
            assert!(t.sockets.iter().all(|s| s.queues().len() == rx_lcores));
            let socket = QueueSync {
                single_producer: true,
                single_consumer: true,
                producer_reclaims: false,
            };
            // A sink's worker only counts: the RX lcore that filled a queue frees what it took.
            let sink = QueueSync {
                producer_reclaims: true,
                ..socket
            };
            let cap = cfg.services[0].socket_capacity;
            let mut want = vec![(cap, socket); 2 * rx_lcores];
            want.extend(vec![(cap, sink); rx_lcores]);
            want.push((HANDOFF_CAPACITY, QueueSync::SHARED));
            assert_eq!(*made.lock().unwrap(), want, "{rx_lcores} RX lcores");
            // A reload keeps every socket whose use is the same...
            made.lock().unwrap().clear();
            b.build(&cfg, 2).expect("tables");
            assert_eq!(*made.lock().unwrap(), vec![], "{rx_lcores} RX lcores");
            // ...and makes new queues where the sink became an echo (its worker now takes the
            // packets), and back.
            let echo = crate::config::parse(
                &src.replace("rx = [1]", &format!("rx = {rx}"))
                    .replace("sockets = 1\naction = \"sink\"", "sockets = 1\naction = \"echo\""),
                "t.toml",
            )
            .expect("valid config");
            b.build(&echo, 3).expect("tables");
            b.build(&cfg, 4).expect("tables");
            let mut want = vec![(cap, socket); rx_lcores];
            want.extend(vec![(cap, sink); rx_lcores]);
            assert_eq!(*made.lock().unwrap(), want, "{rx_lcores} RX lcores");
        }
    }

    /// Each socket's queues are made for the worker that drains it (where the daemon puts a
    /// DPDK ring: that worker's NUMA socket); a hand-off ring, which any worker may drain, for
    /// none.
    #[test]
    fn socket_queues_are_made_for_their_draining_worker() {
        let src = "[dpdk]\neal_args = [\"--no-huge\", \"--vdev=net_null0\"]\n[[port]]\ndevice = \"net_null0\"\n\
                   ipv4 = [\"192.0.2.1\"]\nrx_queues = 1\ntx_queues = 4\n[lcores]\nrx = [1]\nworkers = [0, 3, 4]\n\
                   [[service]]\nname = \"echo\"\nports = [7]\nsockets = 3\naction = \"echo\"\n\
                   [[tunnel]]\nname = \"seq\"\nlocal = \"192.0.2.1\"\nremote = \"198.51.100.3\"\nsequence = true\n\
                   port = \"net_null0\"\nnext_hop_mac = \"02:00:00:00:00:fe\"\n";
        let cfg = crate::config::parse(src, "t.toml").expect("valid config");
        let made: Arc<std::sync::Mutex<Vec<Option<usize>>>> = Default::default();
        let record = made.clone();
        let make: MakeQueue = Box::new(move |cap, _, consumer| {
            record.lock().unwrap().push(consumer);
            Ok(fastpath::socket::SimQueue::new(cap).into())
        });
        let port = OpenedPort {
            id: 0,
            mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
            kernel: None,
        };
        let mut b = TableBuilder::with_queues(vec![port], 1, 3, make);
        let t = b.build(&cfg, 1).expect("tables");
        let workers: Vec<usize> = (0..3).map(|i| worker_for("echo", i, 3)).collect();
        assert_eq!(t.sockets.iter().map(|s| s.worker).collect::<Vec<_>>(), workers);
        let mut want: Vec<Option<usize>> = workers.iter().map(|&w| Some(w)).collect();
        want.push(None);
        assert_eq!(*made.lock().unwrap(), want);
        // The three sockets land on more than one worker (else the test shows nothing).
        assert!(workers.iter().any(|&w| w != workers[0]), "{workers:?}");
    }
}
