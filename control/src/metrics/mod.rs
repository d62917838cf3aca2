//! Prometheus metrics. Collectors read the per-lcore counter blocks at scrape (or dump) time:
//! the data plane keeps writing plain per-lcore counters and never waits for a reader.
//!
//! One file per area (`lcore.rs`, `port.rs`, `service.rs`, `tunnel.rs`, ...), each holding its
//! families' declarations ([`Def`]: name, help, type) and the function that samples them from
//! the [`Scrape`]; this file holds what they share, the list of areas ([`AREAS`]) and the text
//! encoder.

mod filter;
mod icmp;
mod kernel;
mod lcore;
mod port;
mod process;
mod reasm;
mod reload;
mod service;
mod tcp_reset;
mod tcp_state;
#[cfg(test)]
mod tests;
mod tunnel;

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

/// A family's declaration: its name, help and type. Each area's file declares its own as
/// constants next to the code that samples them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Def {
    /// `fastpath_<area>_<what>`, `_total` for counters; fixed once released.
    pub(crate) name: &'static str,
    /// The `# HELP` line.
    pub(crate) help: &'static str,
    /// Counter or gauge.
    pub(crate) ty: MetricType,
}

impl Def {
    /// A counter.
    const fn counter(name: &'static str, help: &'static str) -> Def {
        Def {
            name,
            help,
            ty: MetricType::COUNTER,
        }
    }

    /// A gauge.
    const fn gauge(name: &'static str, help: &'static str) -> Def {
        Def {
            name,
            help,
            ty: MetricType::GAUGE,
        }
    }
}

/// Families with their samples, as one area collects them.
type Named = Vec<(Def, Samples<'static>)>;

/// What every area reads at one scrape: the sources, each lcore's packet counts read at one
/// moment (so that received, outcomes and held fragments balance), the outcomes summed, and
/// the published tables, whose counters the stages of the generation write.
struct Scrape<'a> {
    sources: &'a Sources,
    counts: &'a [PacketCounts],
    outcomes: &'a [u64; Outcome::COUNT],
    tables: &'a Tables,
}

/// One area: its families, and the function that samples them (each declared family exactly
/// once, nothing else: the collector checks).
struct Area {
    families: &'static [Def],
    collect: fn(&Scrape) -> Named,
}

/// Every area. A new area's file is a `mod` above and an entry here.
const AREAS: &[Area] = &[
    Area {
        families: lcore::FAMILIES,
        collect: lcore::collect,
    },
    Area {
        families: port::FAMILIES,
        collect: port::collect,
    },
    Area {
        families: process::FAMILIES,
        collect: process::collect,
    },
    Area {
        families: reload::FAMILIES,
        collect: reload::collect,
    },
    Area {
        families: service::FAMILIES,
        collect: service::collect,
    },
    Area {
        families: tunnel::FAMILIES,
        collect: tunnel::collect,
    },
    Area {
        families: reasm::FAMILIES,
        collect: reasm::collect,
    },
    Area {
        families: icmp::FAMILIES,
        collect: icmp::collect,
    },
    Area {
        families: tcp_reset::FAMILIES,
        collect: tcp_reset::collect,
    },
    Area {
        families: kernel::FAMILIES,
        collect: kernel::collect,
    },
    Area {
        families: filter::FAMILIES,
        collect: filter::collect,
    },
    Area {
        families: tcp_state::FAMILIES,
        collect: tcp_state::collect,
    },
];

/// Every family the collector emits, area by area.
pub(crate) fn families() -> impl Iterator<Item = &'static Def> {
    AREAS.iter().flat_map(|a| a.families)
}

/// The collector over [`Sources`].
pub struct DataPlaneCollector {
    src: Arc<Sources>,
    descs: Vec<Desc>,
}

impl DataPlaneCollector {
    /// A collector reading `src`.
    pub fn new(src: Arc<Sources>) -> Self {
        let descs = families()
            .map(|d| Desc::new(d.name.to_string(), d.help.to_string(), vec![], Default::default()).expect("valid desc"))
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
        let x = Scrape {
            sources: s,
            counts: &counts,
            outcomes: &outcomes,
            tables: &tables,
        };
        let mut out = Vec::with_capacity(families().count());
        for area in AREAS {
            let named = (area.collect)(&x);
            // Each declared family sampled once, and nothing undeclared.
            let mut got: Vec<&str> = named.iter().map(|(d, _)| d.name).collect();
            let mut declared: Vec<&str> = area.families.iter().map(|d| d.name).collect();
            got.sort_unstable();
            declared.sort_unstable();
            assert_eq!(got, declared, "an area's samples and its declared families differ");
            out.extend(named.into_iter().map(|(d, v)| family(d.name, d.help, d.ty, v)));
        }
        out
    }
}

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
