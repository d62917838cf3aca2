//! Prometheus metrics. Collectors read the per-lcore counter blocks at scrape (or dump) time:
//! the data plane keeps writing plain per-lcore counters and never waits for a reader.

use crate::reload::ReloadStats;
use fastpath::dpdk::port::PortStats;
use fastpath::generation::Published;
use fastpath::outcome::Outcome;
use fastpath::pipeline::Tables;
use fastpath::stats::{LcoreStats, PacketCounts};
use prometheus::core::{Collector, Desc};
use prometheus::proto::{Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType};
use prometheus::{Encoder, Registry, TextEncoder};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// What the collectors read.
pub struct Sources {
    /// Device name per DPDK port id (for the `port` label).
    pub port_names: Vec<String>,
    /// What each port (by DPDK port id) was set up with, for `fastpath_port_info`.
    pub port_info: Vec<Option<PortInfo>>,
    /// Every lcore's counters.
    pub lcores: Vec<Arc<LcoreStats>>,
    /// DPDK version string.
    pub dpdk_version: String,
    /// Process start, seconds since the epoch.
    pub start_time: f64,
    /// TSC ticks per second (turns the cycle counters into time).
    pub tsc_hz: u64,
    /// Mbufs currently allocated from the pool.
    pub mbufs_in_use: Box<dyn Fn() -> u64 + Send + Sync>,
    /// Mbufs the pools hold in all (what `mbufs_in_use` counts against).
    pub mbufs_capacity: u64,
    /// The counters of a DPDK port by id (`None` if it has none to give).
    pub port_stats: Box<dyn Fn(u16) -> Option<PortStats> + Send + Sync>,
    /// The driver's extended statistics of a DPDK port by id (name, value; empty if none).
    pub port_xstats: Box<dyn Fn(u16) -> Vec<(String, u64)> + Send + Sync>,
    /// The published config generation.
    pub published: Arc<Published>,
    /// Reload outcomes.
    pub reload: Arc<ReloadStats>,
    /// What the metrics endpoint did.
    pub http: Arc<crate::http::HttpStats>,
    /// What `/healthz` answers, and each port's link as the control thread last read it.
    pub health: Arc<crate::health::Health>,
    /// The backend health checks' states (`fastpath_backend_up`).
    pub backends: Arc<crate::backends::BackendHealth>,
}

/// How a port was set up: its driver and the offloads it got (`fastpath_port_info`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortInfo {
    /// The ethdev driver, e.g. `net_pcap`, `mlx5_pci`.
    pub driver: String,
    /// Whether RSS spreads flows over its RX queues.
    pub rss: bool,
    /// The RX checksum offloads turned on: `none`, `ipv4`, `udp` or `ipv4,udp`.
    pub rx_checksum_offload: String,
}

impl Sources {
    fn port(&self, id: u16) -> String {
        self.port_names
            .get(id as usize)
            .cloned()
            .unwrap_or_else(|| id.to_string())
    }
}

fn labels(pairs: &[(&str, String)]) -> Vec<LabelPair> {
    pairs
        .iter()
        .map(|(k, v)| {
            let mut l = LabelPair::default();
            l.set_name(k.to_string());
            l.set_value(v.clone());
            l
        })
        .collect()
}

fn family(name: &str, help: &str, ty: MetricType, samples: Vec<(Vec<(&str, String)>, f64)>) -> MetricFamily {
    let mut mf = MetricFamily::default();
    mf.set_name(name.to_string());
    mf.set_help(help.to_string());
    mf.set_field_type(ty);
    let metrics: Vec<Metric> = samples
        .into_iter()
        .map(|(l, v)| {
            let mut m = Metric::default();
            m.set_label(labels(&l));
            match ty {
                MetricType::COUNTER => {
                    let mut c = Counter::default();
                    c.set_value(v);
                    m.set_counter(c);
                }
                _ => {
                    let mut g = Gauge::default();
                    g.set_value(v);
                    m.set_gauge(g);
                }
            }
            m
        })
        .collect();
    mf.set_metric(metrics);
    mf
}

/// Label pairs and a value, per series of a family.
type Samples<'a> = Vec<(Vec<(&'a str, String)>, f64)>;

/// The collector over [`Sources`].
pub struct DataPlaneCollector {
    src: Arc<Sources>,
    descs: Vec<Desc>,
}

/// (name, help, type) of every family this collector emits.
const FAMILIES: &[(&str, &str, MetricType)] = &[
    (
        "fastpath_rx_packets_total",
        "Packets received, per port and RX queue.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_rx_bytes_total",
        "Bytes received, per port and RX queue (not counted in the plain forward mode: see fastpath_port_rx_bytes_total).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_tx_packets_total",
        "Packets sent, per port and TX queue.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_tx_bytes_total",
        "Bytes sent, per port and TX queue (not counted in the plain forward mode: see fastpath_port_tx_bytes_total).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_packets_total",
        "Received packets by outcome; every received packet lands in exactly one outcome.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_lcore_idle_polls_total",
        "Loop iterations that found no work, per lcore.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_lcore_busy_polls_total",
        "Loop iterations that received packets, per lcore.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_lcore_wakeups_total",
        "Times an idle lcore blocked and woke, by reason: io (a wake-up fd of its RX queues or kernel interfaces had input), bell (another lcore handed it packets, or a stop), timeout (the idle_wait_ms bound passed).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_lcore_busy_cycles_total",
        "TSC cycles spent in loop iterations that received packets, per lcore.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_lcore_cycles_total",
        "TSC cycles of each lcore's loop by state: busy (iterations that received packets) and idle (iterations that found none, the idle policy's sleep included); their sum is the lcore's time, busy / sum its load.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_lcore_outcome_cycles_total",
        "TSC cycles of an RX lcore's sampled polls (one in 64 that received packets), shared among the outcomes their packets took in proportion to their packets; over fastpath_lcore_outcome_sampled_total, an outcome's cycles per packet.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_lcore_outcome_sampled_total",
        "Packets of an RX lcore's sampled polls, by outcome (fastpath_lcore_outcome_cycles_total's divisor).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_lcore_packets_total",
        "Packets received by the RX queues an lcore polls, per lcore.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_lcore_cycles_per_packet",
        "Busy TSC cycles per received packet since start, per RX lcore (0 before the first packet); \
         rate(fastpath_lcore_busy_cycles_total) / rate(fastpath_lcore_packets_total) gives it over a window.",
        MetricType::GAUGE,
    ),
    (
        "fastpath_lcore_idle_poll_ratio",
        "Share of loop iterations since start that found no work, per lcore (0 to 1).",
        MetricType::GAUGE,
    ),
    (
        "fastpath_port_rx_packets_total",
        "Packets the port received (the NIC's count, rte_eth_stats ipackets).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_port_rx_bytes_total",
        "Bytes the port received (rte_eth_stats ibytes).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_port_tx_packets_total",
        "Packets the port sent (rte_eth_stats opackets).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_port_tx_bytes_total",
        "Bytes the port sent (rte_eth_stats obytes).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_port_xstats_total",
        "The driver's own extended statistics (rte_eth_xstats), by the driver's name for each: per-queue drops, rx_missed_errors, out_of_buffer, PHY discards, whatever the NIC counts.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_port_rx_missed_total",
        "Packets the NIC dropped because no RX descriptor was free: the RX lcores did not keep up (rte_eth_stats imissed; for net_af_packet, the kernel's drops at its rings).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_port_rx_errors_total",
        "Erroneous packets the port received (rte_eth_stats ierrors).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_port_tx_errors_total",
        "Packets the port failed to send (rte_eth_stats oerrors).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_port_rx_nombuf_total",
        "RX mbuf allocation failures: the pool ran dry (rte_eth_stats rx_nombuf).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_port_link_up",
        "1 while the port's link is up, 0 while down (a port over a kernel interface: that interface's carrier), read by the control thread every 50 ms.",
        MetricType::GAUGE,
    ),
    (
        "fastpath_port_info",
        "How each port was set up: driver, RSS, RX checksum offloads (ipv4, udp); the value is always 1.",
        MetricType::GAUGE,
    ),
    (
        "fastpath_tsc_hz",
        "TSC ticks per second, to turn cycle counters into time.",
        MetricType::GAUGE,
    ),
    (
        "fastpath_mbufs_in_use",
        "Mbufs allocated from the packet pools (one per NUMA socket with a port) and the reassembly pool right now.",
        MetricType::GAUGE,
    ),
    (
        "fastpath_mbufs_capacity",
        "Mbufs the pools hold (dpdk.mbufs per packet pool, one per NUMA socket with a port, plus reassembly.buffers): fastpath_mbufs_in_use / fastpath_mbufs_capacity is how full they are.",
        MetricType::GAUGE,
    ),
    (
        "fastpath_build_info",
        "Build information; the value is always 1.",
        MetricType::GAUGE,
    ),
    (
        "fastpath_start_time_seconds",
        "Start time of the process since the Unix epoch.",
        MetricType::GAUGE,
    ),
    (
        "fastpath_metrics_renders_total",
        "Bodies the metrics endpoint rendered; a scrape within [metrics] cache_ms of one (and no reload since) gets its bytes.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_metrics_connections_evicted_total",
        "Metrics connections waiting for a request closed to let in one more over [metrics] max_connections.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_metrics_connections_refused_total",
        "Metrics connections answered 503 because every one held had a request in hand.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_metrics_connections_timed_out_total",
        "Metrics connections closed at a deadline: first_request, idle (keep-alive), head, busy (answer and write).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_config_reloads_total",
        "Config reloads by result (success, failure).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_config_generation",
        "The config generation published to the lcores.",
        MetricType::GAUGE,
    ),
    (
        "fastpath_config_last_reload_success_timestamp_seconds",
        "Unix time of the last successful config load (the start counts).",
        MetricType::GAUGE,
    ),
    (
        "fastpath_lcore_config_generation",
        "The config generation each lcore runs.",
        MetricType::GAUGE,
    ),
    (
        "fastpath_flow_limit_dropped_total",
        "Packets shed by the flow limit, per RX lcore.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_icmp_sent_total",
        "ICMP and ICMPv6 errors sent, by family and type.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_icmp_rate_limited_total",
        "ICMP errors held back by a rate limit (global or per destination), by family.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_tcp_resets_sent_total",
        "TCP resets sent for segments to a closed port, by family.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_tcp_resets_rate_limited_total",
        "TCP resets held back by a rate limit (global or per destination), by family.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_reasm_completed_total",
        "Datagrams reassembled, per family.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_reasm_timeouts_total",
        "Datagrams that did not complete in time, per family.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_reasm_refused_total",
        "Fragments refused or dropped, per family and reason.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_reasm_memory_bytes",
        "Bytes of fragments held for reassembly, per RX lcore.",
        MetricType::GAUGE,
    ),
    (
        "fastpath_conntrack_hits_total",
        "Packets of tunnel services whose flow had an entry in the worker's connection table.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_conntrack_misses_total",
        "Packets of tunnel services whose flow had no entry (they take the Maglev pick).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_conntrack_insertions_total",
        "Entries inserted (unconfirmed) into a worker's connection table.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_conntrack_evictions_total",
        "Live unconfirmed entries replaced by a new flow (confirmed ones never are).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_conntrack_expired_total",
        "Entries removed after their idle timeout.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_conntrack_refused_total",
        "New flows not tracked: their bucket held only live confirmed entries.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_conntrack_confirmations_total",
        "Entries confirmed (the handshake's ACK, or a packet a second after the first).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_conntrack_repinned_total",
        "Tracked flows whose backend was removed or down, moved to the Maglev pick.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_conntrack_entries",
        "Entries in use in each worker's connection table, by state.",
        MetricType::GAUGE,
    ),
    (
        "fastpath_tcp_state_total",
        "TCP segments of services with tcp_state the RX lcores' TCP state table decided without an entry's say-so, by reason: dropped as tcp_out_of_state (no_flow, rst_no_flow, bad_handshake, syn_over_budget), or admitted (table_full: bucket full of established flows, failing open; learned: mid-stream in the learning window).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_tcp_state_entries",
        "Entries in use in the RX lcores' TCP state tables, by state (established; handshake: a SYN's or a learned flow's, not yet confirmed).",
        MetricType::GAUGE,
    ),
    (
        "fastpath_conntrack_capacity",
        "Entries each worker's connection table holds at most.",
        MetricType::GAUGE,
    ),
    (
        "fastpath_icmp_to_backend_total",
        "ICMP errors about a tunnel service's flow: forwarded to the flow's backend, or over the rate limit.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_reasm_held_fragments",
        "Fragments held for reassembly, per RX lcore: received, their outcome not yet counted. \
         At every scrape sum(fastpath_rx_packets_total) == sum(fastpath_packets_total) + \
         sum(fastpath_reasm_held_fragments).",
        MetricType::GAUGE,
    ),
    (
        "fastpath_gre_encap_total",
        "Packets encapsulated and sent into each GRE tunnel.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_gre_decap_total",
        "Packets decapsulated from each GRE tunnel.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_gre_seq_dropped_total",
        "Packets of a sequence tunnel dropped by the RFC 2890 receive rule.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_gre_too_big_total",
        "Packets too big for the tunnel path after encapsulation.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_gre_handoff_total",
        "Packets handed to a sequence tunnel's owning worker by another lcore.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_gre_tx_full_total",
        "Encapsulated packets a TX queue refused.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_gre_recursion_dropped_total",
        "Packets nested in more tunnel headers than the recursion limit (3).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_backend_up",
        "1 while the tunnel takes its share of its tunnel services' flows as far as its health check says (always 1 without a check), 0 while its check has failed health_fall times in a row.",
        MetricType::GAUGE,
    ),
    (
        "fastpath_backend_transitions_total",
        "Changes of a checked tunnel's health state, by the state it went to (up, down).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_service_backends_all_down",
        "1 while every backend of a tunnel service fails its health check and the service keeps sending to all of them.",
        MetricType::GAUGE,
    ),
    (
        "fastpath_socket_queue_depth",
        "Packets queued in each service socket.",
        MetricType::GAUGE,
    ),
    (
        "fastpath_socket_capacity",
        "Packets each service socket can hold.",
        MetricType::GAUGE,
    ),
    (
        "fastpath_socket_pressure",
        "1 while a socket is flagged under pressure (rollover skips it).",
        MetricType::GAUGE,
    ),
    (
        "fastpath_socket_delivered_total",
        "Packets enqueued to each service socket.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_socket_full_total",
        "Packets for a socket that had no room (outcome socket_full).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_rollover_total",
        "Packets moved from the socket their fanout chose to another.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_rollover_huge_total",
        "Rollovers of a huge flow while its socket still had some room.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_rollover_failed_total",
        "Rollovers that found no socket with normal room.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_socket_processed_total",
        "Packets workers took off each socket, by what the action did (echoed, sunk, kernel, tx_full, invalid, refused).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_kernel_packets_total",
        "Packets through each port's kernel interface: written into it (to_kernel) and sent out of the port from it (from_kernel).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_kernel_dropped_total",
        "Packets of the kernel path the workers dropped, by reason (interface_full, port_full, invalid); a full kernel queue is the outcome kernel_full.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_kernel_offloaded_total",
        "Packets of the kernel path carried by the kernel interface's offloads (its TAP backend): written into the kernel inside a coalesced TCP frame (to_kernel), cut out of a large TCP frame the kernel wrote (from_kernel).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_kernel_interface_dropped_total",
        "Packets the kernel dropped at each port's kernel interface, as the kernel counts them: written by fastpathd and dropped at once (to_kernel, rx_dropped), or refused on their way to fastpathd (from_kernel, tx_dropped).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_filtered_total",
        "Packets a prefix filter refused (outcome filtered), per filter ([filter]: filter; a port's: port:DEVICE; a service's: service:NAME) and list (deny: in it; allow: not in it).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_source_limited_total",
        "Packets [source_limit] refused (outcome source_limited), by reason: over_budget (a known source over its own budget), newcomer (a source not yet in the table, over the newcomers' shared budget).",
        MetricType::COUNTER,
    ),
    (
        "fastpath_filter_prefixes",
        "Prefixes in each filter's list (inline and file, repeats removed).",
        MetricType::GAUGE,
    ),
];

/// One sample per port that has counters to give: `field` of its [`PortStats`].
fn port_counter(s: &Sources, field: impl Fn(&PortStats) -> u64) -> Samples<'static> {
    (0..s.port_names.len() as u16)
        .filter(|&id| s.port_info.get(id as usize).is_some_and(Option::is_some))
        .filter_map(|id| (s.port_stats)(id).map(|p| (vec![("port", s.port(id))], field(&p) as f64)))
        .collect()
}

impl DataPlaneCollector {
    /// A collector reading `src`.
    pub fn new(src: Arc<Sources>) -> Self {
        let descs = FAMILIES
            .iter()
            .map(|(n, h, _)| Desc::new(n.to_string(), h.to_string(), vec![], Default::default()).expect("valid desc"))
            .collect();
        DataPlaneCollector { src, descs }
    }
}

impl Collector for DataPlaneCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let s = &self.src;
        // Each lcore's packets received, outcomes and fragments held read at one moment, so
        // that they balance at every scrape.
        let counts: Vec<PacketCounts> = s.lcores.iter().map(|l| l.packet_counts()).collect();
        if let Some(l) = counts.iter().position(|c| c.stale || !c.consistent) {
            tracing::warn!(
                "metrics: lcore {} stayed inside a poll for {:?}: its packet counters {}",
                s.lcores[l].lcore,
                fastpath::stats::READ_PATIENCE,
                if counts[l].consistent {
                    "as a scrape read them before"
                } else {
                    "read as they were"
                }
            );
        }
        let outcomes = outcome_totals(&counts);
        let tables = s.published.current();
        let mut named = queue_families(s, &counts);
        named.extend(lcore_families(s, &counts, &outcomes));
        named.extend(port_families(s));
        named.extend(process_families(s));
        named.extend(reload_families(s));
        named.extend(http_families(&s.http));
        named.extend(socket_families(&tables));
        named.extend(gre_families(&tables, &outcomes));
        named.extend(backend_families(s, &tables));
        named.extend(reasm_families(s, &counts));
        named.extend(icmp_families(&tables));
        named.extend(tcp_reset_families(&tables));
        named.extend(kernel_families(s, &tables));
        named.extend(filter_families(&tables));
        named.extend(conntrack_families(s, &tables));
        named.extend(tcp_state_families(&tables));
        // Every family by name, so the order of FAMILIES and of the samples can never drift.
        let mut by_name: std::collections::HashMap<&str, Samples> = named.into_iter().collect();
        let out: Vec<MetricFamily> = FAMILIES
            .iter()
            .map(|(n, h, t)| {
                let v = by_name.remove(n).unwrap_or_else(|| panic!("no samples for {n}"));
                family(n, h, *t, v)
            })
            .collect();
        assert!(by_name.is_empty(), "samples without a family: {:?}", by_name.keys());
        out
    }
}

/// Families by name with their samples, as one group of them collects them.
type Named = Vec<(&'static str, Samples<'static>)>;

/// Every outcome's count, summed over the lcores.
fn outcome_totals(counts: &[PacketCounts]) -> [u64; Outcome::COUNT] {
    let mut outcomes = [0u64; Outcome::COUNT];
    for c in counts {
        for (i, n) in c.outcomes.iter().enumerate() {
            outcomes[i] += n;
        }
    }
    outcomes
}

/// Packets and bytes per port and queue, as the lcores count them (the packets from `counts`,
/// the lcores' consistent reads, in the order of `s.lcores`).
fn queue_families(s: &Sources, counts: &[PacketCounts]) -> Named {
    let mut rx_p = Vec::new();
    let mut rx_b = Vec::new();
    let mut tx_p = Vec::new();
    let mut tx_b = Vec::new();
    for (l, c) in s.lcores.iter().zip(counts) {
        for (q, &packets) in l.rx.iter().zip(&c.rx) {
            let lb = vec![("port", s.port(q.port)), ("queue", q.queue.to_string())];
            rx_p.push((lb.clone(), packets as f64));
            if q.counts_bytes {
                rx_b.push((lb, q.bytes.get() as f64));
            }
        }
        for q in l.tx.iter() {
            let lb = vec![("port", s.port(q.port)), ("queue", q.queue.to_string())];
            tx_p.push((lb.clone(), q.packets.get() as f64));
            if q.counts_bytes {
                tx_b.push((lb, q.bytes.get() as f64));
            }
        }
    }
    vec![
        ("fastpath_rx_packets_total", rx_p),
        ("fastpath_rx_bytes_total", rx_b),
        ("fastpath_tx_packets_total", tx_p),
        ("fastpath_tx_bytes_total", tx_b),
    ]
}

/// Outcomes, and each lcore's loop: polls, cycles, packets, the generation it runs, and the
/// packets the flow limit shed on each RX lcore.
fn lcore_families(s: &Sources, counts: &[PacketCounts], outcomes: &[u64; Outcome::COUNT]) -> Named {
    let mut idle = Vec::new();
    let mut busy = Vec::new();
    let mut cycles = Vec::new();
    let mut generations = Vec::new();
    let mut lcore_pkts = Vec::new();
    let mut per_packet = Vec::new();
    let mut idle_ratio = Vec::new();
    let mut flow_limited = Vec::new();
    let mut by_state = Vec::new();
    let (mut cost_cycles, mut cost_packets) = (Vec::new(), Vec::new());
    let mut wakeups = Vec::new();
    for (l, c) in s.lcores.iter().zip(counts) {
        for o in Outcome::ALL.iter().filter(|o| l.cost.packets[o.index()].get() > 0) {
            let lb = vec![("lcore", l.lcore.to_string()), ("outcome", o.name().to_string())];
            cost_cycles.push((lb.clone(), l.cost.cycles[o.index()].get() as f64));
            cost_packets.push((lb, l.cost.packets[o.index()].get() as f64));
        }
        for (reason, n) in fastpath::stats::WAKE_REASONS.iter().zip(&l.wakeups) {
            wakeups.push((
                vec![("lcore", l.lcore.to_string()), ("reason", reason.to_string())],
                n.get() as f64,
            ));
        }
        let lb = vec![("lcore", l.lcore.to_string())];
        let (idle_n, busy_n, busy_c) = (l.idle_polls.get(), l.busy_polls.get(), l.busy_cycles.get());
        idle.push((lb.clone(), idle_n as f64));
        busy.push((lb.clone(), busy_n as f64));
        cycles.push((lb.clone(), busy_c as f64));
        for (state, c) in [("busy", busy_c), ("idle", l.idle_cycles.get())] {
            by_state.push((
                vec![("lcore", l.lcore.to_string()), ("state", state.to_string())],
                c as f64,
            ));
        }
        let polls = idle_n + busy_n;
        idle_ratio.push((lb.clone(), if polls == 0 { 0.0 } else { idle_n as f64 / polls as f64 }));
        if !l.rx.is_empty() {
            let pkts = c.rx_packets();
            lcore_pkts.push((lb.clone(), pkts as f64));
            flow_limited.push((lb.clone(), c.outcomes[Outcome::FlowLimited.index()] as f64));
            per_packet.push((lb, if pkts == 0 { 0.0 } else { busy_c as f64 / pkts as f64 }));
        }
        generations.push((vec![("lcore", l.lcore.to_string())], l.generation() as f64));
    }
    let outcome_samples = Outcome::ALL
        .iter()
        .map(|o| (vec![("outcome", o.name().to_string())], outcomes[o.index()] as f64))
        .collect();
    vec![
        ("fastpath_packets_total", outcome_samples),
        ("fastpath_lcore_idle_polls_total", idle),
        ("fastpath_lcore_busy_polls_total", busy),
        ("fastpath_lcore_wakeups_total", wakeups),
        ("fastpath_lcore_busy_cycles_total", cycles),
        ("fastpath_lcore_cycles_total", by_state),
        ("fastpath_lcore_outcome_cycles_total", cost_cycles),
        ("fastpath_lcore_outcome_sampled_total", cost_packets),
        ("fastpath_lcore_packets_total", lcore_pkts),
        ("fastpath_lcore_cycles_per_packet", per_packet),
        ("fastpath_lcore_idle_poll_ratio", idle_ratio),
        ("fastpath_lcore_config_generation", generations),
        ("fastpath_flow_limit_dropped_total", flow_limited),
    ]
}

/// The NICs' own counters, and how each port was set up.
fn port_families(s: &Sources) -> Named {
    let info = s
        .port_info
        .iter()
        .enumerate()
        .filter_map(|(id, i)| {
            let i = i.as_ref()?;
            Some((
                vec![
                    ("port", s.port(id as u16)),
                    ("driver", i.driver.clone()),
                    ("rss", if i.rss { "on" } else { "off" }.to_string()),
                    ("rx_checksum_offload", i.rx_checksum_offload.clone()),
                ],
                1.0,
            ))
        })
        .collect();
    let link = (0..s.port_names.len() as u16)
        .filter(|&id| !s.port_names[id as usize].is_empty())
        .filter_map(|id| {
            let up = s.health.link_up(id)?;
            Some((vec![("port", s.port(id))], if up { 1.0 } else { 0.0 }))
        })
        .collect();
    let xstats = (0..s.port_names.len() as u16)
        .filter(|&id| s.port_info.get(id as usize).is_some_and(Option::is_some))
        .flat_map(|id| {
            (s.port_xstats)(id)
                .into_iter()
                .map(move |(name, v)| (vec![("port", s.port(id)), ("name", name)], v as f64))
        })
        .collect();
    vec![
        ("fastpath_port_rx_packets_total", port_counter(s, |p| p.ipackets)),
        ("fastpath_port_rx_bytes_total", port_counter(s, |p| p.ibytes)),
        ("fastpath_port_tx_packets_total", port_counter(s, |p| p.opackets)),
        ("fastpath_port_tx_bytes_total", port_counter(s, |p| p.obytes)),
        ("fastpath_port_rx_missed_total", port_counter(s, |p| p.imissed)),
        ("fastpath_port_rx_errors_total", port_counter(s, |p| p.ierrors)),
        ("fastpath_port_tx_errors_total", port_counter(s, |p| p.oerrors)),
        ("fastpath_port_rx_nombuf_total", port_counter(s, |p| p.rx_nombuf)),
        ("fastpath_port_xstats_total", xstats),
        ("fastpath_port_info", info),
        ("fastpath_port_link_up", link),
    ]
}

/// The process: TSC rate, mbufs in use, build and start time.
fn process_families(s: &Sources) -> Named {
    vec![
        ("fastpath_tsc_hz", vec![(vec![], s.tsc_hz as f64)]),
        ("fastpath_mbufs_in_use", vec![(vec![], (s.mbufs_in_use)() as f64)]),
        ("fastpath_mbufs_capacity", vec![(vec![], s.mbufs_capacity as f64)]),
        (
            "fastpath_build_info",
            vec![(
                vec![
                    ("version", env!("CARGO_PKG_VERSION").to_string()),
                    ("dpdk_version", s.dpdk_version.clone()),
                ],
                1.0,
            )],
        ),
        ("fastpath_start_time_seconds", vec![(vec![], s.start_time)]),
    ]
}

/// What the metrics endpoint did.
fn http_families(h: &crate::http::HttpStats) -> Named {
    let one = |c: &std::sync::atomic::AtomicU64| vec![(vec![], c.load(Relaxed) as f64)];
    let timed_out = crate::http::Deadline::ALL
        .iter()
        .map(|&d| {
            (
                vec![("deadline", d.label().to_string())],
                h.timed_out[d as usize].load(Relaxed) as f64,
            )
        })
        .collect();
    vec![
        ("fastpath_metrics_renders_total", one(&h.renders)),
        ("fastpath_metrics_connections_evicted_total", one(&h.evicted)),
        ("fastpath_metrics_connections_refused_total", one(&h.refused)),
        ("fastpath_metrics_connections_timed_out_total", timed_out),
    ]
}

/// Reload outcomes and the published generation.
fn reload_families(s: &Sources) -> Named {
    vec![
        (
            "fastpath_config_reloads_total",
            vec![
                (
                    vec![("result", "success".to_string())],
                    s.reload.success.load(Relaxed) as f64,
                ),
                (
                    vec![("result", "failure".to_string())],
                    s.reload.failure.load(Relaxed) as f64,
                ),
            ],
        ),
        (
            "fastpath_config_generation",
            vec![(vec![], s.published.generation() as f64)],
        ),
        (
            "fastpath_config_last_reload_success_timestamp_seconds",
            vec![(vec![], s.reload.last_success_seconds())],
        ),
    ]
}

/// Each service socket of the published generation: depth, pressure, deliveries, rollovers,
/// and what the workers did with its packets.
fn socket_families(tables: &Tables) -> Named {
    let mut depth = Vec::new();
    let mut capacity = Vec::new();
    let mut pressure = Vec::new();
    let mut delivered = Vec::new();
    let mut full = Vec::new();
    let mut rollover = Vec::new();
    let mut huge = Vec::new();
    let mut failed = Vec::new();
    let mut processed = Vec::new();
    for sock in &tables.sockets {
        let lb = vec![("service", sock.service.clone()), ("socket", sock.index.to_string())];
        let c = &sock.counters;
        depth.push((lb.clone(), sock.len() as f64));
        capacity.push((lb.clone(), sock.capacity() as f64));
        pressure.push((lb.clone(), sock.under_pressure() as u8 as f64));
        delivered.push((lb.clone(), c.sum(|x| &x.delivered) as f64));
        full.push((lb.clone(), c.sum(|x| &x.full) as f64));
        rollover.push((lb.clone(), c.sum(|x| &x.rollover) as f64));
        huge.push((lb.clone(), c.sum(|x| &x.rollover_huge) as f64));
        failed.push((lb.clone(), c.sum(|x| &x.rollover_failed) as f64));
        for (result, n) in [
            ("echoed", c.sum(|x| &x.echoed)),
            ("sunk", c.sum(|x| &x.sunk)),
            ("kernel", c.sum(|x| &x.kernel)),
            ("tx_full", c.sum(|x| &x.tx_full)),
            ("invalid", c.sum(|x| &x.invalid)),
            ("refused", c.sum(|x| &x.refused)),
        ] {
            let mut l = lb.clone();
            l.push(("result", result.to_string()));
            processed.push((l, n as f64));
        }
    }
    vec![
        ("fastpath_socket_queue_depth", depth),
        ("fastpath_socket_capacity", capacity),
        ("fastpath_socket_pressure", pressure),
        ("fastpath_socket_delivered_total", delivered),
        ("fastpath_socket_full_total", full),
        ("fastpath_rollover_total", rollover),
        ("fastpath_rollover_huge_total", huge),
        ("fastpath_rollover_failed_total", failed),
        ("fastpath_socket_processed_total", processed),
    ]
}

/// Each port's kernel path: packets each way, drops by reason, what the offloads carried.
fn kernel_families(s: &Sources, tables: &Tables) -> Named {
    let mut packets = Vec::new();
    let mut dropped = Vec::new();
    let mut offloaded = Vec::new();
    let mut in_kernel = Vec::new();
    if let Some(k) = &tables.kernel {
        for (id, interface) in k.interface_of.iter().enumerate() {
            let (Some(kif), Some(Some(i))) = (interface, k.index_of.get(id)) else {
                continue;
            };
            let (c, i, port) = (&k.counters, *i as usize, s.port(id as u16));
            // The kernel's own counters of the interface (its name is the kernel interface's
            // port name), read from sysfs at the scrape.
            let name = s.port(*kif);
            for (direction, file) in [("to_kernel", "rx_dropped"), ("from_kernel", "tx_dropped")] {
                let path = format!("/sys/class/net/{name}/statistics/{file}");
                if let Some(n) = std::fs::read_to_string(path)
                    .ok()
                    .and_then(|t| t.trim().parse::<u64>().ok())
                {
                    in_kernel.push((
                        vec![("port", port.clone()), ("direction", direction.to_string())],
                        n as f64,
                    ));
                }
            }
            for (direction, n) in [
                ("to_kernel", c.sum(i, |x| &x.to_kernel)),
                ("from_kernel", c.sum(i, |x| &x.from_kernel)),
            ] {
                packets.push((
                    vec![("port", port.clone()), ("direction", direction.to_string())],
                    n as f64,
                ));
            }
            for (direction, n) in [
                ("to_kernel", c.sum(i, |x| &x.coalesced)),
                ("from_kernel", c.sum(i, |x| &x.segmented)),
            ] {
                offloaded.push((
                    vec![("port", port.clone()), ("direction", direction.to_string())],
                    n as f64,
                ));
            }
            for (reason, n) in [
                ("interface_full", c.sum(i, |x| &x.interface_full)),
                ("port_full", c.sum(i, |x| &x.port_full)),
                ("invalid", c.sum(i, |x| &x.invalid)),
            ] {
                dropped.push((vec![("port", port.clone()), ("reason", reason.to_string())], n as f64));
            }
        }
    }
    vec![
        ("fastpath_kernel_packets_total", packets),
        ("fastpath_kernel_dropped_total", dropped),
        ("fastpath_kernel_offloaded_total", offloaded),
        ("fastpath_kernel_interface_dropped_total", in_kernel),
    ]
}

/// Each prefix filter of the published generation: what each list refused, and its size.
fn filter_families(tables: &Tables) -> Named {
    use fastpath::pipeline::filter::List;
    let f = &tables.filters;
    let mut refused = Vec::new();
    let mut sizes = Vec::new();
    for flt in f
        .global
        .iter()
        .chain(f.ports.iter().flatten())
        .chain(f.services.iter().flatten())
    {
        for (list, set) in [(List::Deny, &flt.deny), (List::Allow, &flt.allow)] {
            let Some(set) = set else { continue };
            let lb = vec![
                ("filter", flt.name.clone()),
                ("list", List::LABELS[list as usize].to_string()),
            ];
            refused.push((lb.clone(), flt.counters.total(list) as f64));
            sizes.push((lb, set.len() as f64));
        }
    }
    let sl = &tables.source_limit_counters;
    let limited = if tables.source_limit.enabled || sl.rx.iter().flatten().any(|c| c.get() > 0) {
        use fastpath::pipeline::source_limit::Refusal;
        [Refusal::OverBudget, Refusal::Newcomer]
            .into_iter()
            .map(|r| {
                (
                    vec![("reason", Refusal::LABELS[r as usize].to_string())],
                    sl.total(r) as f64,
                )
            })
            .collect()
    } else {
        Vec::new()
    };
    vec![
        ("fastpath_filtered_total", refused),
        ("fastpath_filter_prefixes", sizes),
        ("fastpath_source_limited_total", limited),
    ]
}

/// Each GRE tunnel of the published generation, and the packets nested too deep.
fn gre_families(tables: &Tables, outcomes: &[u64; Outcome::COUNT]) -> Named {
    let mut gre: [Samples; 6] = Default::default();
    for t in &tables.tunnels {
        let lb = vec![("tunnel", t.name.clone())];
        let c = &t.counters;
        for (i, v) in [
            c.sum(|x| &x.encap),
            c.sum(|x| &x.decap),
            c.sum(|x| &x.seq_dropped),
            c.sum(|x| &x.too_big),
            c.sum(|x| &x.handed_off),
            c.sum(|x| &x.tx_full),
        ]
        .into_iter()
        .enumerate()
        {
            gre[i].push((lb.clone(), v as f64));
        }
    }
    let recursion = vec![(vec![], outcomes[Outcome::GreRecursion.index()] as f64)];
    let [g0, g1, g2, g3, g4, g5] = gre;
    vec![
        ("fastpath_gre_encap_total", g0),
        ("fastpath_gre_decap_total", g1),
        ("fastpath_gre_seq_dropped_total", g2),
        ("fastpath_gre_too_big_total", g3),
        ("fastpath_gre_handoff_total", g4),
        ("fastpath_gre_tx_full_total", g5),
        ("fastpath_gre_recursion_dropped_total", recursion),
    ]
}

/// Each tunnel's health state and changes, and the tunnel services failing open.
fn backend_families(s: &Sources, tables: &Tables) -> Named {
    let checked = s.backends.snapshot();
    let mut up = Vec::new();
    let mut transitions = Vec::new();
    for t in &tables.tunnels {
        let h = checked.iter().find(|h| h.name == t.name);
        up.push((vec![("tunnel", t.name.clone())], h.is_none_or(|h| h.up) as u8 as f64));
        if let Some(h) = h {
            for (to, n) in [("up", h.to_up), ("down", h.to_down)] {
                transitions.push((vec![("tunnel", t.name.clone()), ("to", to.to_string())], n as f64));
            }
        }
    }
    let open = s.backends.failing_open();
    let all_down = tables
        .services
        .services()
        .iter()
        .filter(|svc| matches!(svc.action, fastpath::pipeline::Action::Tunnel(_)))
        .map(|svc| {
            (
                vec![("service", svc.name.clone())],
                open.contains(&svc.name) as u8 as f64,
            )
        })
        .collect();
    vec![
        ("fastpath_backend_up", up),
        ("fastpath_backend_transitions_total", transitions),
        ("fastpath_service_backends_all_down", all_down),
    ]
}

/// Reassembly per family (completed, timed out, refused by reason), memory and fragments held
/// per RX lcore.
fn reasm_families(s: &Sources, counts: &[PacketCounts]) -> Named {
    use fastpath::pipeline::reasm::{Family, Reason};
    let rx_lcores: Vec<_> = s.lcores.iter().filter(|l| !l.rx.is_empty()).collect();
    let mut completed = Vec::new();
    let mut timeouts = Vec::new();
    let mut refused = Vec::new();
    for f in Family::ALL {
        let fi = f.index();
        let fl = f.label().to_string();
        completed.push((
            vec![("family", fl.clone())],
            rx_lcores.iter().map(|l| l.reasm.completed[fi].get()).sum::<u64>() as f64,
        ));
        timeouts.push((
            vec![("family", fl.clone())],
            rx_lcores.iter().map(|l| l.reasm.timeouts[fi].get()).sum::<u64>() as f64,
        ));
        for r in Reason::ALL {
            let n: u64 = rx_lcores.iter().map(|l| l.reasm.refused[fi][r.index()].get()).sum();
            refused.push((
                vec![("family", fl.clone()), ("reason", r.label().to_string())],
                n as f64,
            ));
        }
    }
    let memory = rx_lcores
        .iter()
        .map(|l| (vec![("lcore", l.lcore.to_string())], l.reasm.memory.get() as f64))
        .collect();
    // Read with the packets and outcomes (`counts`), so that the three balance.
    let held = s
        .lcores
        .iter()
        .zip(counts)
        .filter(|(l, _)| !l.rx.is_empty())
        .map(|(l, c)| (vec![("lcore", l.lcore.to_string())], c.held as f64))
        .collect();
    vec![
        ("fastpath_reasm_completed_total", completed),
        ("fastpath_reasm_timeouts_total", timeouts),
        ("fastpath_reasm_refused_total", refused),
        ("fastpath_reasm_memory_bytes", memory),
        ("fastpath_reasm_held_fragments", held),
    ]
}

/// Each worker's connection table, and the ICMP errors forwarded to backends.
fn conntrack_families(s: &Sources, tables: &Tables) -> Named {
    let workers: Vec<_> = s.lcores.iter().filter(|l| l.conntrack.capacity.get() > 0).collect();
    let per = |f: fn(&fastpath::stats::ConntrackCounters) -> &fastpath::stats::Counter| -> Samples {
        workers
            .iter()
            .map(|l| (vec![("lcore", l.lcore.to_string())], f(&l.conntrack).get() as f64))
            .collect()
    };
    let mut entries = Vec::new();
    for l in &workers {
        let (all, confirmed) = (l.conntrack.entries.get(), l.conntrack.confirmed.get());
        let lc = l.lcore.to_string();
        entries.push((
            vec![("lcore", lc.clone()), ("state", "confirmed".to_string())],
            confirmed as f64,
        ));
        entries.push((
            vec![("lcore", lc), ("state", "unconfirmed".to_string())],
            all.saturating_sub(confirmed) as f64,
        ));
    }
    let icmp = ["forwarded", "limited"]
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let n: u64 = tables.icmp_counters.rx.iter().map(|c| c.to_backend[i].get()).sum();
            (vec![("result", r.to_string())], n as f64)
        })
        .collect();
    vec![
        ("fastpath_conntrack_hits_total", per(|c| &c.hits)),
        ("fastpath_conntrack_misses_total", per(|c| &c.misses)),
        ("fastpath_conntrack_insertions_total", per(|c| &c.insertions)),
        ("fastpath_conntrack_evictions_total", per(|c| &c.evictions)),
        ("fastpath_conntrack_expired_total", per(|c| &c.expired)),
        ("fastpath_conntrack_refused_total", per(|c| &c.refused)),
        ("fastpath_conntrack_confirmations_total", per(|c| &c.confirmations)),
        ("fastpath_conntrack_repinned_total", per(|c| &c.repinned)),
        ("fastpath_conntrack_entries", entries),
        ("fastpath_conntrack_capacity", per(|c| &c.capacity)),
        ("fastpath_icmp_to_backend_total", icmp),
    ]
}

/// The RX lcores' TCP state tables: their decisions by reason, their entries by state.
fn tcp_state_families(tables: &Tables) -> Named {
    use fastpath::pipeline::tcp_state::Reason;
    let c = &tables.tcp_state_counters;
    let on = tables.tcp_state.entries > 0 || c.rx.iter().any(|l| l.table.insertions.get() > 0);
    if !on {
        return vec![
            ("fastpath_tcp_state_total", Vec::new()),
            ("fastpath_tcp_state_entries", Vec::new()),
        ];
    }
    let reasons = Reason::ALL
        .iter()
        .map(|&r| {
            (
                vec![("reason", Reason::LABELS[r as usize].to_string())],
                c.total(r) as f64,
            )
        })
        .collect();
    let (all, established) = c.rx.iter().fold((0u64, 0u64), |(a, e), l| {
        (a + l.table.entries.get(), e + l.table.confirmed.get())
    });
    let entries = vec![
        (vec![("state", "established".to_string())], established as f64),
        (
            vec![("state", "handshake".to_string())],
            all.saturating_sub(established) as f64,
        ),
    ];
    vec![
        ("fastpath_tcp_state_total", reasons),
        ("fastpath_tcp_state_entries", entries),
    ]
}

/// ICMP errors sent by family and type, and held back by family and limit.
fn icmp_families(tables: &Tables) -> Named {
    use fastpath::pipeline::icmp_error::{Limit, FAMILY_LABELS, TYPE_LABELS};
    let mut sent = Vec::new();
    let mut limited = Vec::new();
    for (fi, fam) in FAMILY_LABELS.iter().enumerate() {
        for (ti, ty) in TYPE_LABELS.iter().enumerate() {
            let n: u64 = tables.icmp_counters.rx.iter().map(|c| c.sent[fi][ti].get()).sum();
            sent.push((vec![("family", fam.to_string()), ("type", ty.to_string())], n as f64));
        }
        for l in Limit::ALL {
            let n: u64 = tables
                .icmp_counters
                .rx
                .iter()
                .map(|c| c.limited[fi][l.index()].get())
                .sum();
            limited.push((
                vec![("family", fam.to_string()), ("limit", l.label().to_string())],
                n as f64,
            ));
        }
    }
    vec![
        ("fastpath_icmp_sent_total", sent),
        ("fastpath_icmp_rate_limited_total", limited),
    ]
}

/// TCP resets sent by family, and held back by family and limit.
fn tcp_reset_families(tables: &Tables) -> Named {
    use fastpath::pipeline::icmp_error::{Limit, FAMILY_LABELS};
    let counters = &tables.tcp_reset_counters.rx;
    let mut sent = Vec::new();
    let mut limited = Vec::new();
    for (fi, fam) in FAMILY_LABELS.iter().enumerate() {
        let n: u64 = counters.iter().map(|c| c.sent[fi].get()).sum();
        sent.push((vec![("family", fam.to_string())], n as f64));
        for l in Limit::ALL {
            let n: u64 = counters.iter().map(|c| c.limited[fi][l.index()].get()).sum();
            limited.push((
                vec![("family", fam.to_string()), ("limit", l.label().to_string())],
                n as f64,
            ));
        }
    }
    vec![
        ("fastpath_tcp_resets_sent_total", sent),
        ("fastpath_tcp_resets_rate_limited_total", limited),
    ]
}

/// A registry with the data-plane collector.
pub fn registry(src: Arc<Sources>) -> Registry {
    let r = Registry::new();
    r.register(Box::new(DataPlaneCollector::new(src)))
        .expect("register collector once");
    r
}

/// Renders every metric in the Prometheus text format (0.0.4).
///
/// The registry gathers the families; counters and gauges (all this daemon has) are written here
/// into one `String` with no allocation per sample, byte for byte what the crate's
/// [`TextEncoder`] writes (a test holds the two equal), which allocates a `String` per value
/// and goes through a `dyn` writer per piece: the encoder was over half of a scrape's CPU, and
/// a scrape's CPU is taken from a worker lcore when they share a CPU. Any other family type
/// goes through [`TextEncoder`].
pub fn render(r: &Registry) -> String {
    use std::fmt::Write;
    let families = r.gather();
    if families
        .iter()
        .any(|f| !matches!(f.get_field_type(), MetricType::COUNTER | MetricType::GAUGE))
    {
        return render_with_crate(&families);
    }
    let mut out = String::with_capacity(16 * 1024);
    for f in &families {
        let name = f.get_name();
        out.push_str("# HELP ");
        out.push_str(name);
        out.push(' ');
        escape_into(&mut out, f.get_help(), false);
        out.push_str("\n# TYPE ");
        out.push_str(name);
        out.push_str(if f.get_field_type() == MetricType::COUNTER {
            " counter\n"
        } else {
            " gauge\n"
        });
        for m in f.get_metric() {
            out.push_str(name);
            let labels = m.get_label();
            if !labels.is_empty() {
                out.push('{');
                for (i, l) in labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(l.get_name());
                    out.push_str("=\"");
                    escape_into(&mut out, l.get_value(), true);
                    out.push('"');
                }
                out.push('}');
            }
            let v = if f.get_field_type() == MetricType::COUNTER {
                m.get_counter().get_value()
            } else {
                m.get_gauge().get_value()
            };
            let _ = write!(out, " {v}");
            if m.get_timestamp_ms() != 0 {
                let _ = write!(out, " {}", m.get_timestamp_ms());
            }
            out.push('\n');
        }
    }
    out
}

/// Appends `s` escaped as the text format wants: `\\` and newlines always, `"` in label values.
fn escape_into(out: &mut String, s: &str, quotes: bool) {
    if !s.contains(['\\', '\n', '"']) {
        out.push_str(s);
        return;
    }
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quotes => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

/// The crate's encoder over gathered families.
fn render_with_crate(families: &[MetricFamily]) -> String {
    let mut out = Vec::new();
    TextEncoder::new()
        .encode(families, &mut out)
        .expect("text encoding cannot fail");
    String::from_utf8(out).expect("text format is UTF-8")
}

/// Metric families fixed by the user-facing contract (`docs/contract.md`) that later stages
/// emit; the dashboard may already chart them.
#[cfg(test)]
const CONTRACT_FAMILIES: &[&str] = &[
    "fastpath_rx_packets_total",
    "fastpath_tx_packets_total",
    "fastpath_packets_total",
    "fastpath_rollover_total",
    "fastpath_rollover_huge_total",
    "fastpath_rollover_failed_total",
    "fastpath_socket_queue_depth",
    "fastpath_flow_limit_dropped_total",
    "fastpath_icmp_sent_total",
    "fastpath_icmp_rate_limited_total",
    "fastpath_reasm_completed_total",
    "fastpath_reasm_timeouts_total",
    "fastpath_reasm_refused_total",
    "fastpath_reasm_memory_bytes",
    "fastpath_reasm_held_fragments",
    "fastpath_gre_encap_total",
    "fastpath_gre_decap_total",
    "fastpath_gre_seq_dropped_total",
    "fastpath_gre_recursion_dropped_total",
    "fastpath_config_reloads_total",
    "fastpath_config_generation",
    "fastpath_config_last_reload_success_timestamp_seconds",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contract_lists_every_family_and_nothing_else() {
        let contract = include_str!("../../docs/contract.md");
        let section = contract
            .split("## Metric families")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .expect("docs/contract.md has a Metric families section");
        // The first column of the tables' rows: one family, or several in backticks.
        let mut listed: Vec<&str> = section
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split(" |").next())
            .flat_map(|cell| cell.split('`'))
            .filter(|t| t.starts_with("fastpath_"))
            .collect();
        listed.sort_unstable();
        listed.dedup();
        let mut ours: Vec<&str> = FAMILIES
            .iter()
            .map(|f| f.0)
            .chain(CONTRACT_FAMILIES.iter().copied())
            .collect();
        ours.sort_unstable();
        ours.dedup();
        assert_eq!(
            listed, ours,
            "docs/contract.md's metric tables and the families emitted differ"
        );
    }

    #[test]
    fn dashboard_charts_only_known_families() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/grafana-dashboard.json");
        let dash: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut exprs = 0;
        for panel in dash["panels"].as_array().unwrap() {
            assert!(panel["title"].is_string());
            for t in panel["targets"].as_array().unwrap() {
                let e = t["expr"].as_str().unwrap();
                exprs += 1;
                for word in e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                    if word.starts_with("fastpath_") {
                        assert!(
                            FAMILIES.iter().any(|f| f.0 == word) || CONTRACT_FAMILIES.contains(&word),
                            "dashboard uses unknown family {word}"
                        );
                    }
                }
            }
        }
        assert!(exprs >= 10);
        // An instance variable, and every query filters on it.
        let vars = dash["templating"]["list"].as_array().unwrap();
        assert!(vars.iter().any(|v| v["name"] == "instance"), "{vars:?}");
        let all: Vec<&str> = dash["panels"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| p["targets"].as_array().unwrap())
            .map(|t| t["expr"].as_str().unwrap())
            .collect();
        for e in &all {
            let selectors = e.matches("fastpath_").count();
            assert_eq!(e.matches("instance=~\"$instance\"").count(), selectors, "{e}");
        }
        // What an on-call engineer looks for first is charted.
        for family in [
            "fastpath_port_link_up",
            "fastpath_port_rx_missed_total",
            "fastpath_port_rx_nombuf_total",
            "fastpath_port_rx_errors_total",
            "fastpath_socket_full_total",
            "outcome=~\"socket_full|flow_limited\"",
        ] {
            assert!(all.iter().any(|e| e.contains(family)), "no panel charts {family}");
        }
    }
    use fastpath::stats::QueueCounters;

    #[test]
    fn own_encoder_writes_what_the_crate_writes_escapes_included() {
        let r = Registry::new();
        let c = prometheus::CounterVec::new(
            prometheus::Opts::new("odd_total", "help with \\ backslash\nand a newline"),
            &["v"],
        )
        .unwrap();
        r.register(Box::new(c.clone())).unwrap();
        c.with_label_values(&["quote \" back \\ nl \n end"]).inc_by(3.0);
        c.with_label_values(&["plain"]).inc_by(0.75);
        let g = prometheus::Gauge::new("odd_gauge", "a gauge").unwrap();
        r.register(Box::new(g.clone())).unwrap();
        g.set(-1.5e-7);
        let ours = render(&r);
        assert_eq!(ours, render_with_crate(&r.gather()));
        assert!(
            ours.contains(r#"odd_total{v="quote \" back \\ nl \n end"} 3"#),
            "{ours}"
        );
    }

    #[test]
    fn renders_summed_counters_with_labels() {
        let a = Arc::new(LcoreStats::new(
            0,
            vec![QueueCounters::new(0, 0)],
            vec![QueueCounters::new(0, 0)],
        ));
        let b = Arc::new(LcoreStats::new(
            1,
            vec![QueueCounters::new(0, 1)],
            vec![QueueCounters::new(0, 1)],
        ));
        a.rx[0].packets.add(3);
        b.rx[0].packets.add(4);
        a.outcome(Outcome::ArpReply);
        b.outcome(Outcome::ArpReply);
        a.busy_cycles.add(300);
        a.busy_polls.add(1);
        a.idle_polls.add(3);
        let worker = Arc::new(LcoreStats::new(2, vec![], vec![]));
        worker.idle_polls.add(10);
        let src = Arc::new(Sources {
            port_names: vec!["net_pcap0".into()],
            port_info: vec![Some(PortInfo {
                driver: "net_pcap".into(),
                rss: false,
                rx_checksum_offload: "none".into(),
            })],
            lcores: vec![a, b, worker],
            dpdk_version: "DPDK 22.11.11".into(),
            start_time: 1.0,
            tsc_hz: 2_000_000_000,
            mbufs_in_use: Box::new(|| 7),
            mbufs_capacity: 8447,
            port_stats: Box::new(|id| {
                (id == 0).then_some(PortStats {
                    ipackets: 11,
                    imissed: 5,
                    ..Default::default()
                })
            }),
            port_xstats: Box::new(|id| {
                if id == 0 {
                    vec![("rx_q0_errors".into(), 3)]
                } else {
                    Vec::new()
                }
            }),
            published: Arc::new(Published::new(Arc::new(fastpath::pipeline::Tables {
                generation: 3,
                ..Default::default()
            }))),
            reload: Arc::new(ReloadStats::default()),
            http: Default::default(),
            health: {
                let h = Arc::new(crate::health::Health::new(1));
                let port = crate::health::WatchedPort {
                    id: 0,
                    name: "net_pcap0".into(),
                    kernel_interface: None,
                };
                let mut w = crate::health::Watch::new(vec![port], &[], 0, 3, std::time::Instant::now());
                w.tick(&[], 3, &h, std::time::Instant::now(), |_| {
                    crate::health::LinkReading::Down(String::new())
                });
                h
            },
            backends: Arc::default(),
        });
        let reg = registry(src);
        let text = render(&reg);
        assert_eq!(
            text,
            render_with_crate(&reg.gather()),
            "same bytes as the crate's encoder"
        );
        assert!(
            text.contains("fastpath_rx_packets_total{port=\"net_pcap0\",queue=\"1\"} 4"),
            "{text}"
        );
        assert!(
            text.contains("fastpath_packets_total{outcome=\"arp_reply\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("fastpath_packets_total{outcome=\"malformed\"} 0"),
            "{text}"
        );
        assert!(text.contains("# TYPE fastpath_packets_total counter"), "{text}");
        assert!(text.contains("fastpath_mbufs_in_use 7"), "{text}");
        assert!(text.contains("fastpath_mbufs_capacity 8447"), "{text}");
        assert!(text.contains("fastpath_tsc_hz 2000000000"), "{text}");
        assert!(
            text.contains("fastpath_port_rx_packets_total{port=\"net_pcap0\"} 11"),
            "{text}"
        );
        assert!(
            text.contains(
                "fastpath_port_info{port=\"net_pcap0\",driver=\"net_pcap\",rss=\"off\",rx_checksum_offload=\"none\"} 1"
            ),
            "{text}"
        );
        assert!(text.contains("fastpath_port_link_up{port=\"net_pcap0\"} 0"), "{text}");
        assert!(
            text.contains("fastpath_port_rx_missed_total{port=\"net_pcap0\"} 5")
                && text.contains("fastpath_port_xstats_total{port=\"net_pcap0\",name=\"rx_q0_errors\"} 3"),
            "{text}"
        );
        assert!(text.contains("fastpath_lcore_packets_total{lcore=\"0\"} 3"), "{text}");
        assert!(
            text.contains("fastpath_lcore_cycles_per_packet{lcore=\"0\"} 100"),
            "{text}"
        );
        assert!(
            text.contains("fastpath_lcore_cycles_per_packet{lcore=\"1\"} 0"),
            "{text}"
        );
        assert!(
            !text.contains("fastpath_lcore_cycles_per_packet{lcore=\"2\"}"),
            "workers receive nothing: {text}"
        );
        assert!(
            text.contains("fastpath_lcore_idle_poll_ratio{lcore=\"0\"} 0.75"),
            "{text}"
        );
        assert!(text.contains("fastpath_lcore_idle_poll_ratio{lcore=\"2\"} 1"), "{text}");
        assert!(text.contains("# TYPE fastpath_lcore_cycles_per_packet gauge"), "{text}");
        assert!(text.contains("dpdk_version=\"DPDK 22.11.11\""), "{text}");
        assert!(text.contains("fastpath_config_generation 3"), "{text}");
        assert!(
            text.contains("fastpath_config_reloads_total{result=\"failure\"} 0"),
            "{text}"
        );
    }
}
