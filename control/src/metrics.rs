//! Prometheus metrics. Collectors read the per-lcore counter blocks at scrape (or dump) time:
//! the data plane keeps writing plain per-lcore counters and never waits for a reader.

use fastpath::outcome::Outcome;
use fastpath::stats::LcoreStats;
use prometheus::core::{Collector, Desc};
use prometheus::proto::{Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType};
use prometheus::{Encoder, Registry, TextEncoder};
use std::sync::Arc;

/// What the collectors read.
pub struct Sources {
    /// Device name per DPDK port id (for the `port` label).
    pub port_names: Vec<String>,
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
        "Bytes received, per port and RX queue.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_tx_packets_total",
        "Packets sent, per port and TX queue.",
        MetricType::COUNTER,
    ),
    (
        "fastpath_tx_bytes_total",
        "Bytes sent, per port and TX queue.",
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
        "fastpath_lcore_busy_cycles_total",
        "TSC cycles spent in loop iterations that received packets, per lcore.",
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
        "fastpath_tsc_hz",
        "TSC ticks per second, to turn cycle counters into time.",
        MetricType::GAUGE,
    ),
    (
        "fastpath_mbufs_in_use",
        "Mbufs allocated from the packet pool right now.",
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
];

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
        let mut rx_p = Vec::new();
        let mut rx_b = Vec::new();
        let mut tx_p = Vec::new();
        let mut tx_b = Vec::new();
        let mut idle = Vec::new();
        let mut busy = Vec::new();
        let mut cycles = Vec::new();
        let mut lcore_pkts = Vec::new();
        let mut per_packet = Vec::new();
        let mut idle_ratio = Vec::new();
        let mut outcomes = [0u64; Outcome::COUNT];
        for l in &s.lcores {
            for q in l.rx.iter() {
                let lb = vec![("port", s.port(q.port)), ("queue", q.queue.to_string())];
                rx_p.push((lb.clone(), q.packets.get() as f64));
                rx_b.push((lb, q.bytes.get() as f64));
            }
            for q in l.tx.iter() {
                let lb = vec![("port", s.port(q.port)), ("queue", q.queue.to_string())];
                tx_p.push((lb.clone(), q.packets.get() as f64));
                tx_b.push((lb, q.bytes.get() as f64));
            }
            for (i, c) in l.outcomes.iter().enumerate() {
                outcomes[i] += c.get();
            }
            let lb = vec![("lcore", l.lcore.to_string())];
            let (idle_n, busy_n, busy_c) = (l.idle_polls.get(), l.busy_polls.get(), l.busy_cycles.get());
            idle.push((lb.clone(), idle_n as f64));
            busy.push((lb.clone(), busy_n as f64));
            cycles.push((lb.clone(), busy_c as f64));
            let polls = idle_n + busy_n;
            idle_ratio.push((lb.clone(), if polls == 0 { 0.0 } else { idle_n as f64 / polls as f64 }));
            if !l.rx.is_empty() {
                let pkts = l.rx_packets();
                lcore_pkts.push((lb.clone(), pkts as f64));
                per_packet.push((lb, if pkts == 0 { 0.0 } else { busy_c as f64 / pkts as f64 }));
            }
        }
        let outcome_samples = Outcome::ALL
            .iter()
            .map(|o| (vec![("outcome", o.name().to_string())], outcomes[o.index()] as f64))
            .collect();
        let values = vec![
            rx_p,
            rx_b,
            tx_p,
            tx_b,
            outcome_samples,
            idle,
            busy,
            cycles,
            lcore_pkts,
            per_packet,
            idle_ratio,
            vec![(vec![], s.tsc_hz as f64)],
            vec![(vec![], (s.mbufs_in_use)() as f64)],
            vec![(
                vec![
                    ("version", env!("CARGO_PKG_VERSION").to_string()),
                    ("dpdk_version", s.dpdk_version.clone()),
                ],
                1.0,
            )],
            vec![(vec![], s.start_time)],
        ];
        FAMILIES
            .iter()
            .zip(values)
            .map(|((n, h, t), v)| family(n, h, *t, v))
            .collect()
    }
}

/// A registry with the data-plane collector.
pub fn registry(src: Arc<Sources>) -> Registry {
    let r = Registry::new();
    r.register(Box::new(DataPlaneCollector::new(src)))
        .expect("register collector once");
    r
}

/// Renders every metric in the Prometheus text format.
pub fn render(r: &Registry) -> String {
    let mut out = Vec::new();
    TextEncoder::new()
        .encode(&r.gather(), &mut out)
        .expect("text encoding cannot fail");
    String::from_utf8(out).expect("text format is UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;
    use fastpath::stats::QueueCounters;

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
            lcores: vec![a, b, worker],
            dpdk_version: "DPDK 22.11.11".into(),
            start_time: 1.0,
            tsc_hz: 2_000_000_000,
            mbufs_in_use: Box::new(|| 7),
        });
        let text = render(&registry(src));
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
        assert!(text.contains("fastpath_tsc_hz 2000000000"), "{text}");
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
    }
}
