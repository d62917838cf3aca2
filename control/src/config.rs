//! The TOML config: serde structs that reject unknown keys, and a `validate` pass that turns them
//! into the runtime form. Every error names the key and the line, and all of them are reported at
//! once. Key names are the user-facing contract in `shared/CONFIG.md`.

use crate::locate::{Locator, Seg};
use fastpath::wire::EthernetAddress;
use serde::Deserialize;
use std::collections::BTreeSet;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;

/// Highest lcore id DPDK 22.11 is built for (RTE_MAX_LCORE).
pub const MAX_LCORE: u32 = 128;
/// Most queues per port we accept in either direction.
pub const MAX_QUEUES: u16 = 64;

// ---------------------------------------------------------------------------------------------
// The file, as written.

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    dpdk: DpdkSection,
    #[serde(default)]
    port: Vec<PortSection>,
    lcores: LcoresSection,
    metrics: Option<MetricsSection>,
    rss: Option<RssSection>,
    #[serde(default)]
    service: Vec<ServiceSection>,
    flow_limit: Option<FlowLimitSection>,
    #[serde(default)]
    tunnel: Vec<TunnelSection>,
    reassembly: Option<ReassemblySection>,
    icmp: Option<IcmpSection>,
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct IcmpSection {
    ratemask: Option<u32>,
    msgs_per_sec: Option<u32>,
    burst: Option<u32>,
    peer_interval_ms: Option<u32>,
    peer_burst: Option<u32>,
    exempt: Option<Vec<String>>,
    peer_table_size: Option<u32>,
    build_first: Option<bool>,
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct ReassemblySection {
    high_thresh_bytes: Option<i64>,
    timeout_ms: Option<i64>,
    max_fragments: Option<i64>,
    max_per_source: Option<i64>,
    max_datagrams: Option<i64>,
    buffers: Option<i64>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct TunnelSection {
    name: String,
    local: String,
    remote: String,
    key: Option<u32>,
    sequence: Option<bool>,
    checksum: Option<bool>,
    ttl: Option<i64>,
    port: Option<String>,
    via: Option<String>,
    next_hop_mac: Option<String>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct FlowLimitSection {
    enabled: Option<bool>,
    table_len: Option<i64>,
    lcores: Option<Vec<u32>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct ServiceSection {
    name: String,
    protocol: Option<String>,
    ports: Vec<i64>,
    addresses: Option<Vec<String>>,
    sockets: Option<i64>,
    socket_capacity: Option<i64>,
    fanout: Option<String>,
    rollover: Option<bool>,
    action: String,
    tunnels: Option<Vec<String>>,
    tunnel: Option<String>,
    cost_ns: Option<u32>,
    free_on_rx: Option<bool>,
    huge_flow_rollover: Option<bool>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct RssSection {
    key: Option<String>,
    symmetric: Option<bool>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct MetricsSection {
    listen: Option<String>,
    enabled: Option<bool>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct DpdkSection {
    #[serde(default)]
    eal_args: Vec<String>,
    mbufs: Option<u32>,
    mbuf_cache: Option<u32>,
    mempool_ops: Option<String>,
    rx_desc: Option<u16>,
    tx_desc: Option<u16>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct PortSection {
    device: String,
    rx_queues: Option<u16>,
    tx_queues: Option<u16>,
    #[serde(default)]
    ipv4: Vec<String>,
    #[serde(default)]
    ipv6: Vec<String>,
    mac: Option<String>,
    mtu: Option<u16>,
    forward_to: Option<String>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct LcoresSection {
    rx: Vec<u32>,
    #[serde(default)]
    workers: Vec<u32>,
    idle_sleep_us: Option<u64>,
    mode: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// The validated, runtime form.

/// A validated config.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// EAL and memory settings.
    pub dpdk: DpdkConfig,
    /// Ports, in file order.
    pub ports: Vec<PortConfig>,
    /// Lcore roles.
    pub lcores: LcoreConfig,
    /// The metrics endpoint.
    pub metrics: MetricsConfig,
    /// The flow hash.
    pub rss: RssConfig,
    /// Local services, in file order.
    pub services: Vec<ServiceConfig>,
    /// Flow-limit shedding (`lcores` as RX slots).
    pub flow_limit: fastpath::pipeline::flow_limit::FlowLimitConfig,
    /// GRE tunnels, in file order.
    pub tunnels: Vec<TunnelConfig>,
    /// Reassembly limits (reloadable).
    pub reassembly: fastpath::pipeline::reasm::ReasmConfig,
    /// 64 KiB buffers for reassembled datagrams (restart to change).
    pub reassembly_buffers: u32,
    /// ICMP error rate limits.
    pub icmp: fastpath::pipeline::icmp_error::IcmpConfig,
}

/// Where a tunnel's packets leave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TunnelVia {
    /// Out of `port[index]` to this next hop.
    Port(usize, EthernetAddress),
    /// Through `tunnel[index]`.
    Tunnel(usize),
}

/// One `[[tunnel]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct TunnelConfig {
    /// Name.
    pub name: String,
    /// Our underlay address.
    pub local: std::net::IpAddr,
    /// The far end.
    pub remote: std::net::IpAddr,
    /// GRE key.
    pub key: Option<u32>,
    /// Sequence numbers.
    pub sequence: bool,
    /// GRE checksums.
    pub checksum: bool,
    /// Outer TTL.
    pub ttl: u8,
    /// How packets leave.
    pub via: TunnelVia,
    /// Tunnel headers around a packet sent through it (1 = straight to a port).
    pub depth: usize,
}

/// Most sockets per service.
pub const MAX_SOCKETS: usize = 64;
/// Largest socket capacity (packets).
pub const MAX_SOCKET_CAPACITY: usize = 1 << 24;

/// One `[[service]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceConfig {
    /// Name (the `service` label).
    pub name: String,
    /// UDP or TCP.
    pub protocol: fastpath::wire::IpProtocol,
    /// Destination ports.
    pub ports: Vec<u16>,
    /// Local addresses it listens on; empty = all.
    pub addresses: Vec<std::net::IpAddr>,
    /// Number of sockets.
    pub sockets: usize,
    /// Packets each socket holds.
    pub socket_capacity: usize,
    /// Fanout mode.
    pub fanout: fastpath::pipeline::FanoutMode,
    /// Rollover on or off.
    pub rollover: bool,
    /// Huge flows roll over early (at LOW room).
    pub huge_flows: bool,
    /// Action run by the workers.
    pub action: fastpath::pipeline::Action,
    /// Simulated per-packet processing cost in the worker (ns), for tests and benchmarks.
    pub cost_ns: u32,
    /// Benchmark only (`free_on_rx`, default false): the RX lcore frees the packets it would
    /// enqueue on this service's sockets, counted `delivered`; no worker sees them. For
    /// measurements where the RX lcore must run alone (callgrind runs one thread at a time,
    /// and a worker that cannot keep up would turn every delivery into `socket_full`).
    pub free_on_rx: bool,
}

/// `[rss]`: the Toeplitz key programmed into the NICs and used by the software hash when a
/// driver supplies none, so both agree.
#[derive(Clone, Debug, PartialEq)]
pub struct RssConfig {
    /// The 40-byte key.
    pub key: [u8; 40],
    /// Hash (a, b) and (b, a) alike in software (both directions of a flow on one lcore).
    pub symmetric: bool,
}

/// Default `[metrics] listen`: loopback only.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9464";

/// `[metrics]`.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricsConfig {
    /// Where `GET /metrics` and `GET /healthz` are served; `None` when disabled.
    pub listen: Option<std::net::SocketAddr>,
}

/// Mempool drivers `[dpdk] mempool_ops` may name: DPDK 22.11's software handlers that are safe
/// for any number of threads putting and getting at once, as every lcore and the control
/// thread (draining sockets at a reload or stop) do here. The single-producer or
/// single-consumer rings (`ring_sp_sc`, `ring_mp_sc`, `ring_sp_mc`) would corrupt the pool;
/// the hardware handlers need their bus and are picked by their PMDs.
pub const MEMPOOL_OPS: &[&str] = &["stack", "lf_stack", "ring_mp_mc", "ring_mt_rts", "ring_mt_hts"];

/// The packet pool's default driver: a LIFO. Packets handed from RX lcores to workers return
/// to the pool's common store from the worker (a `sink` puts them there directly) and are
/// allocated again from it by the RX lcore; with DPDK's default FIFO ring (`ring_mp_mc`) the
/// next mbuf is the one freed longest ago, so every mbuf of the pool is in the working set (16383 x 2.3 KiB = 37 MiB: cache and
/// TLB misses on every header), while a stack hands back the most recently freed, still in
/// cache. Measured on the open-port benchmark (RX lcore to a sink worker): 1.15-1.16x the
/// packet rate, paired runs; unchanged where mbufs stay on one lcore.
pub const DEFAULT_MEMPOOL_OPS: &str = "stack";

/// `[dpdk]`.
#[derive(Clone, Debug, PartialEq)]
pub struct DpdkConfig {
    /// Arguments for `rte_eal_init` (without the program name and without an lcore list).
    pub eal_args: Vec<String>,
    /// Mbufs in the pool.
    pub mbufs: u32,
    /// Per-lcore mempool cache.
    pub mbuf_cache: u32,
    /// The packet pool's mempool driver (see [`MEMPOOL_OPS`]).
    pub mempool_ops: String,
    /// RX descriptors per queue.
    pub rx_desc: u16,
    /// TX descriptors per queue.
    pub tx_desc: u16,
}

/// One `[[port]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct PortConfig {
    /// DPDK device name (vdev name or PCI address).
    pub device: String,
    /// RX queues.
    pub rx_queues: u16,
    /// TX queues.
    pub tx_queues: u16,
    /// Local IPv4 addresses.
    pub ipv4: Vec<Ipv4Addr>,
    /// Local IPv6 addresses.
    pub ipv6: Vec<Ipv6Addr>,
    /// MAC override; the port's own address otherwise.
    pub mac: Option<EthernetAddress>,
    /// MTU to set.
    pub mtu: Option<u16>,
    /// With `[lcores] mode = "forward"`: index (in `Config::ports`) of the port that sends what
    /// this one receives; `None` is the port itself.
    pub forward_to: Option<usize>,
}

/// `[lcores]`.
#[derive(Clone, Debug, PartialEq)]
pub struct LcoreConfig {
    /// Lcores polling RX queues.
    pub rx: Vec<u32>,
    /// Lcores draining sockets.
    pub workers: Vec<u32>,
    /// Microseconds an idle loop sleeps per empty poll after 1024 empty polls in a row; 0 means
    /// pure busy polling.
    pub idle_sleep_us: u64,
    /// What RX lcores do with packets.
    pub mode: LcoreMode,
}

/// `[lcores] mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LcoreMode {
    /// `"pipeline"` (default): every stage runs on every packet.
    #[default]
    Pipeline,
    /// `"forward"`: RX to TX unchanged, no stage (`[[port]] forward_to` picks the TX port): the
    /// cost of the DPDK layer and the lcore loop alone, for benchmarks against dpdk-testpmd.
    Forward,
}

impl LcoreConfig {
    /// Every lcore with a role, ascending. The lowest becomes the EAL main lcore.
    pub fn all(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.rx.iter().chain(self.workers.iter()).copied().collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Lcores that own a TX queue on every port, in TX-queue order: RX lcores first, then
    /// workers. Lcore `transmitters()[i]` sends on queue `i` of each port.
    pub fn transmitters(&self) -> Vec<u32> {
        self.rx.iter().chain(self.workers.iter()).copied().collect()
    }
}

impl Config {
    /// The full EAL argument list: program name, the lcore list derived from `[lcores]`, the
    /// config's `eal_args`, then `extra` (from the command line after `--`).
    pub fn eal_argv(&self, extra: &[String]) -> Vec<String> {
        let lcores = self
            .lcores
            .all()
            .iter()
            .map(|l| l.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let mut v = vec!["fastpathd".to_string(), "-l".to_string(), lcores];
        v.extend(self.dpdk.eal_args.iter().cloned());
        v.extend(extra.iter().cloned());
        v
    }

    /// Assigns (port index, RX queue) pairs to RX lcores round robin: `result[i]` is what
    /// `lcores.rx[i]` polls.
    pub fn rx_assignment(&self) -> Vec<Vec<(usize, u16)>> {
        let mut out = vec![Vec::new(); self.lcores.rx.len()];
        let mut i = 0;
        for (p, port) in self.ports.iter().enumerate() {
            for q in 0..port.rx_queues {
                out[i % self.lcores.rx.len()].push((p, q));
                i += 1;
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Errors.

/// One problem in a config file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The dotted key, e.g. `port[0].tx_queues` (empty if the file could not be read at all).
    pub key: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// What is wrong and what is expected.
    pub message: String,
}

/// Every problem found in a config file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigErrors {
    /// The file name as given.
    pub file: String,
    /// The problems, in file order where known.
    pub errors: Vec<ConfigError>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            match e.line {
                Some(l) => write!(f, "{}:{}: ", self.file, l)?,
                None => write!(f, "{}: ", self.file)?,
            }
            if e.key.is_empty() {
                write!(f, "{}", e.message)?;
            } else {
                write!(f, "{}: {}", e.key, e.message)?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Collects validation errors with their lines.
struct Errs<'a> {
    loc: &'a Locator,
    list: Vec<ConfigError>,
}

impl Errs<'_> {
    fn add(&mut self, path: &[Seg], message: impl Into<String>) {
        let key = path.iter().fold(String::new(), |mut s, seg| {
            match seg {
                Seg::Key(k) => {
                    if !s.is_empty() {
                        s.push('.');
                    }
                    s.push_str(k);
                }
                Seg::Index(i) => s.push_str(&format!("[{i}]")),
            }
            s
        });
        self.list.push(ConfigError {
            key,
            line: self.loc.line_of(path),
            message: message.into(),
        });
    }
}

// ---------------------------------------------------------------------------------------------
// Loading.

/// Reads and validates the config at `path`.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    let file = path.display().to_string();
    let src = std::fs::read_to_string(path).map_err(|e| ConfigErrors {
        file: file.clone(),
        errors: vec![ConfigError {
            key: String::new(),
            line: None,
            message: format!("cannot read: {e}"),
        }],
    })?;
    parse(&src, &file)
}

/// Parses and validates config text; `file` names it in errors.
pub fn parse(src: &str, file: &str) -> Result<Config, ConfigErrors> {
    let loc = Locator::new(src);
    let raw: FileConfig = toml::from_str(src).map_err(|e| {
        let (line, key) = match e.span() {
            Some(s) => (
                Some(loc.line_of_offset(s.start)),
                loc.key_at(s.start).unwrap_or_default(),
            ),
            None => (None, String::new()),
        };
        ConfigErrors {
            file: file.to_string(),
            errors: vec![ConfigError {
                key,
                line,
                message: e.message().trim().to_string(),
            }],
        }
    })?;
    let mut errs = Errs {
        loc: &loc,
        list: Vec::new(),
    };
    let cfg = validate(raw, &mut errs);
    if errs.list.is_empty() {
        Ok(cfg)
    } else {
        errs.list.sort_by_key(|e| e.line.unwrap_or(usize::MAX));
        Err(ConfigErrors {
            file: file.to_string(),
            errors: errs.list,
        })
    }
}

const LCORE_FLAGS: [&str; 4] = ["-l", "-c", "--lcores", "--main-lcore"];

fn validate(raw: FileConfig, errs: &mut Errs) -> Config {
    use Seg::{Index, Key};

    // [dpdk]
    for (i, a) in raw.dpdk.eal_args.iter().enumerate() {
        let flag = a.split('=').next().unwrap_or("");
        if LCORE_FLAGS.contains(&flag) || (a.starts_with("-l") && a.len() > 2 && !a.starts_with("--")) {
            errs.add(
                &[Key("dpdk"), Key("eal_args"), Index(i)],
                format!("{a:?}: the lcore list is derived from [lcores]; remove it from eal_args"),
            );
        }
    }
    let dpdk = DpdkConfig {
        eal_args: raw.dpdk.eal_args,
        mbufs: raw.dpdk.mbufs.unwrap_or(16383),
        mbuf_cache: raw.dpdk.mbuf_cache.unwrap_or(256),
        mempool_ops: raw.dpdk.mempool_ops.unwrap_or_else(|| DEFAULT_MEMPOOL_OPS.to_string()),
        rx_desc: raw.dpdk.rx_desc.unwrap_or(1024),
        tx_desc: raw.dpdk.tx_desc.unwrap_or(1024),
    };
    if !(1023..=16 * 1024 * 1024).contains(&dpdk.mbufs) {
        errs.add(
            &[Key("dpdk"), Key("mbufs")],
            "expected a number of mbufs between 1023 and 16777216",
        );
    }
    if !MEMPOOL_OPS.contains(&dpdk.mempool_ops.as_str()) {
        errs.add(
            &[Key("dpdk"), Key("mempool_ops")],
            format!("{:?}: expected one of {}", dpdk.mempool_ops, MEMPOOL_OPS.join(", ")),
        );
    }
    if dpdk.mbuf_cache > 512 {
        errs.add(
            &[Key("dpdk"), Key("mbuf_cache")],
            "expected at most 512 (RTE_MEMPOOL_CACHE_MAX_SIZE)",
        );
    }
    for (k, v) in [("rx_desc", dpdk.rx_desc), ("tx_desc", dpdk.tx_desc)] {
        if !(32..=4096).contains(&v) {
            errs.add(
                &[Key("dpdk"), Key(k)],
                "expected a descriptor count between 32 and 4096",
            );
        }
    }

    // [lcores]
    let lc = raw.lcores;
    if lc.rx.is_empty() {
        errs.add(&[Key("lcores"), Key("rx")], "at least one RX lcore is needed");
    }
    let mut seen = BTreeSet::new();
    for (name, list) in [("rx", &lc.rx), ("workers", &lc.workers)] {
        for (i, &l) in list.iter().enumerate() {
            if l >= MAX_LCORE {
                errs.add(
                    &[Key("lcores"), Key(name), Index(i)],
                    format!("lcore {l}: expected an lcore id below {MAX_LCORE}"),
                );
            } else if !seen.insert(l) {
                errs.add(
                    &[Key("lcores"), Key(name), Index(i)],
                    format!("lcore {l} is listed twice: each lcore has exactly one role"),
                );
            }
        }
    }
    let mode = match lc.mode.as_deref() {
        None | Some("pipeline") => LcoreMode::Pipeline,
        Some("forward") => LcoreMode::Forward,
        Some(m) => {
            errs.add(
                &[Key("lcores"), Key("mode")],
                format!("{m:?}: expected \"pipeline\" or \"forward\""),
            );
            LcoreMode::Pipeline
        }
    };
    let lcores = LcoreConfig {
        rx: lc.rx,
        workers: lc.workers,
        idle_sleep_us: lc.idle_sleep_us.unwrap_or(50),
        mode,
    };
    if lcores.idle_sleep_us > 100_000 {
        errs.add(
            &[Key("lcores"), Key("idle_sleep_us")],
            "expected at most 100000 (0 = busy polling)",
        );
    }
    let transmitters = lcores.transmitters().len();

    // [[port]]
    if raw.port.is_empty() {
        errs.add(&[Key("port")], "at least one [[port]] is needed");
    }
    let mut devices = BTreeSet::new();
    let mut ports = Vec::new();
    let mut forward_to = Vec::new();
    for (pi, p) in raw.port.into_iter().enumerate() {
        let at = |k: &'static str| [Key("port"), Index(pi), Key(k)];
        if p.device.trim().is_empty() {
            errs.add(&at("device"), "expected a DPDK device name (vdev name or PCI address)");
        } else if !devices.insert(p.device.clone()) {
            errs.add(
                &at("device"),
                format!("device {:?} appears in two [[port]] sections", p.device),
            );
        }
        let rx_queues = p.rx_queues.unwrap_or(1);
        if !(1..=MAX_QUEUES).contains(&rx_queues) {
            errs.add(&at("rx_queues"), format!("expected 1 to {MAX_QUEUES} RX queues"));
        }
        let tx_queues = p.tx_queues.unwrap_or(transmitters.max(1) as u16);
        if !(1..=MAX_QUEUES).contains(&tx_queues) {
            errs.add(&at("tx_queues"), format!("expected 1 to {MAX_QUEUES} TX queues"));
        } else if (tx_queues as usize) < transmitters {
            errs.add(
                &at("tx_queues"),
                format!(
                    "{tx_queues} TX queues, but {transmitters} lcores (rx + workers) each need their own TX queue on \
                     every port (no shared TX lock); set tx_queues = {transmitters}"
                ),
            );
        }
        let ipv4 = local_addrs(
            &p.ipv4,
            pi,
            "ipv4",
            "192.0.2.1",
            |a: &Ipv4Addr| a.is_unspecified() || a.is_multicast() || a.is_broadcast(),
            errs,
        );
        let ipv6 = local_addrs(
            &p.ipv6,
            pi,
            "ipv6",
            "2001:db8::1",
            |a: &Ipv6Addr| a.is_unspecified() || a.is_multicast() || a.is_loopback(),
            errs,
        );
        let mac = match p.mac.as_deref().map(str::parse::<EthernetAddress>) {
            None => None,
            Some(Ok(m)) if m.is_unicast() => Some(m),
            Some(Ok(m)) => {
                errs.add(&at("mac"), format!("{m} is not a unicast address"));
                None
            }
            Some(Err(())) => {
                errs.add(&at("mac"), "expected a MAC address like \"02:00:00:00:00:01\"");
                None
            }
        };
        if let Some(mtu) = p.mtu {
            if !(68..=9600).contains(&mtu) {
                errs.add(&at("mtu"), "expected an MTU between 68 and 9600");
            }
        }
        forward_to.push(p.forward_to);
        ports.push(PortConfig {
            device: p.device,
            rx_queues,
            tx_queues,
            ipv4,
            ipv6,
            mac,
            mtu: p.mtu,
            forward_to: None,
        });
    }
    for (pi, to) in forward_to.into_iter().enumerate() {
        let Some(to) = to else { continue };
        let at = [Key("port"), Index(pi), Key("forward_to")];
        if mode != LcoreMode::Forward {
            errs.add(&at, "only used with [lcores] mode = \"forward\"");
        }
        match ports.iter().position(|p| p.device == to) {
            Some(i) => ports[pi].forward_to = Some(i),
            None => errs.add(&at, format!("{to:?}: expected the device of a [[port]] in this file")),
        }
    }
    let total_rx_queues: usize = ports.iter().map(|p| p.rx_queues as usize).sum();
    if !ports.is_empty() && lcores.rx.len() > total_rx_queues {
        errs.add(
            &[Key("lcores"), Key("rx")],
            format!(
                "{} RX lcores but only {total_rx_queues} RX queues in all ports: every RX lcore needs a queue",
                lcores.rx.len()
            ),
        );
    }

    // [metrics]
    let m = raw.metrics.unwrap_or(MetricsSection {
        listen: None,
        enabled: None,
    });
    let listen_text = m.listen.unwrap_or_else(|| DEFAULT_METRICS_LISTEN.to_string());
    let listen = match listen_text.parse::<std::net::SocketAddr>() {
        Ok(a) => Some(a),
        Err(_) => {
            errs.add(
                &[Key("metrics"), Key("listen")],
                format!("{listen_text:?}: expected ADDRESS:PORT, e.g. \"127.0.0.1:9464\" or \"[::1]:9464\""),
            );
            None
        }
    };
    let metrics = MetricsConfig {
        listen: if m.enabled.unwrap_or(true) { listen } else { None },
    };

    // [rss]
    let r = raw.rss.unwrap_or(RssSection {
        key: None,
        symmetric: None,
    });
    let mut key = fastpath::wire::toeplitz::MICROSOFT_KEY;
    if let Some(text) = &r.key {
        match parse_hex_key(text) {
            Some(k) => key = k,
            None => errs.add(
                &[Key("rss"), Key("key")],
                "expected 40 bytes as 80 hex digits (separators ':' or ' ' allowed)",
            ),
        }
    }
    let rss = RssConfig {
        key,
        symmetric: r.symmetric.unwrap_or(false),
    };

    let (services, tunnel_refs) = validate_services(raw.service, &ports, &lcores, &dpdk, errs);

    // [flow_limit]
    use fastpath::pipeline::flow_limit::{FlowLimitConfig, DEFAULT_TABLE_LEN, MAX_TABLE_LEN};
    let fl = raw.flow_limit.unwrap_or(FlowLimitSection {
        enabled: None,
        table_len: None,
        lcores: None,
    });
    let len = fl.table_len.unwrap_or(DEFAULT_TABLE_LEN as i64);
    if len <= 0 || len > MAX_TABLE_LEN as i64 || (len as u64).count_ones() != 1 {
        errs.add(
            &[Key("flow_limit"), Key("table_len")],
            format!("{len}: expected a power of two from 1 to {MAX_TABLE_LEN} (2^20)"),
        );
    }
    let rx_slots = fl.lcores.map(|list| {
        let mut slots = Vec::new();
        for (i, l) in list.iter().enumerate() {
            match lcores.rx.iter().position(|r| r == l) {
                Some(slot) => slots.push(slot),
                None => errs.add(
                    &[Key("flow_limit"), Key("lcores"), Index(i)],
                    format!("lcore {l} is not an RX lcore (lcores.rx = {:?})", lcores.rx),
                ),
            }
        }
        slots
    });
    let flow_limit = FlowLimitConfig {
        enabled: fl.enabled.unwrap_or(true),
        table_len: len.clamp(1, MAX_TABLE_LEN as i64) as u32,
        rx_slots,
    };
    let tunnels = validate_tunnels(raw.tunnel, &ports, errs);
    let mut services = services;
    resolve_service_tunnels(&mut services, &tunnel_refs, &tunnels, errs);
    // [reassembly]
    let r = raw.reassembly.unwrap_or_default();
    let mut reassembly = fastpath::pipeline::reasm::ReasmConfig::default();
    let mut num = |key: &'static str, v: Option<i64>, lo: i64, hi: i64, what: &str| -> Option<i64> {
        let v = v?;
        if (lo..=hi).contains(&v) {
            Some(v)
        } else {
            errs.add(
                &[Key("reassembly"), Key(key)],
                format!("{v}: expected {what} from {lo} to {hi}"),
            );
            None
        }
    };
    if let Some(v) = num(
        "high_thresh_bytes",
        r.high_thresh_bytes,
        65536,
        1 << 30,
        "a number of bytes",
    ) {
        reassembly.high_thresh_bytes = v as usize;
    }
    if let Some(v) = num("timeout_ms", r.timeout_ms, 1, 600_000, "milliseconds") {
        reassembly.timeout_ns = v as u64 * 1_000_000;
    }
    if let Some(v) = num("max_fragments", r.max_fragments, 2, 1024, "fragments per datagram") {
        reassembly.max_fragments = v as usize;
    }
    if let Some(v) = num("max_per_source", r.max_per_source, 1, 65536, "datagrams per source") {
        reassembly.max_per_source = v as usize;
    }
    if let Some(v) = num("max_datagrams", r.max_datagrams, 1, 65536, "concurrent datagrams") {
        reassembly.max_datagrams = v as usize;
    }
    let reassembly_buffers = num("buffers", r.buffers, 16, 65536, "64 KiB buffers").unwrap_or(256) as u32;

    // [icmp]
    let ic = raw.icmp.unwrap_or_default();
    let mut icmp = fastpath::pipeline::icmp_error::IcmpConfig::default();
    macro_rules! set {
        ($f:ident) => {
            if let Some(v) = ic.$f {
                icmp.$f = v as _;
            }
        };
    }
    set!(ratemask);
    set!(msgs_per_sec);
    set!(burst);
    set!(peer_interval_ms);
    set!(peer_burst);
    set!(peer_table_size);
    if let Some(b) = ic.build_first {
        icmp.build_first = b;
    }
    for (i, e) in ic.exempt.iter().flatten().enumerate() {
        match e.parse() {
            Ok(prefix) => icmp.exempt.push(prefix),
            Err(err) => errs.add(
                &[Key("icmp"), Key("exempt"), Index(i)],
                format!("{e:?}: {err:?}: expected a prefix like \"198.51.100.0/24\" or \"2001:db8:1::/48\""),
            ),
        }
    }
    if let Err(msg) = icmp.validate() {
        // The message starts with the key, "icmp.<key>: ...".
        let key = msg
            .split(':')
            .next()
            .unwrap_or("icmp")
            .trim_start_matches("icmp.")
            .to_string();
        errs.add(
            &[Key("icmp"), Key(&key)],
            msg.split_once(": ").map(|x| x.1).unwrap_or(&msg).to_string(),
        );
    }

    Config {
        dpdk,
        ports,
        lcores,
        metrics,
        rss,
        services,
        flow_limit,
        tunnels,
        reassembly,
        reassembly_buffers,
        icmp,
    }
}

fn validate_tunnels(raw: Vec<TunnelSection>, ports: &[PortConfig], errs: &mut Errs) -> Vec<TunnelConfig> {
    use fastpath::pipeline::tunnel::MAX_DEPTH;
    use std::net::IpAddr;
    use Seg::{Index, Key};
    let names: Vec<String> = raw.iter().map(|t| t.name.clone()).collect();
    let mut out = Vec::new();
    let mut vias: Vec<Option<usize>> = Vec::new();
    for (ti, r) in raw.iter().enumerate() {
        let at = |k: &'static str| [Key("tunnel"), Index(ti), Key(k)];
        let who = format!("tunnel {:?}", r.name);
        if !valid_name(&r.name) {
            errs.add(
                &at("name"),
                format!("{who}: expected a name of letters, digits, '-' and '_'"),
            );
        } else if names.iter().filter(|n| **n == r.name).count() > 1 {
            errs.add(&at("name"), format!("{who}: two tunnels have this name"));
        }
        let local = r
            .local
            .parse::<IpAddr>()
            .map_err(|_| errs.add(&at("local"), format!("{who}: {:?}: expected an IP address", r.local)))
            .ok();
        let remote = r
            .remote
            .parse::<IpAddr>()
            .map_err(|_| errs.add(&at("remote"), format!("{who}: {:?}: expected an IP address", r.remote)))
            .ok();
        if let (Some(l), Some(rm)) = (local, remote) {
            if l.is_ipv4() != rm.is_ipv4() {
                errs.add(
                    &at("remote"),
                    format!("{who}: local {l} and remote {rm} are of different families"),
                );
            }
            let ours = ports.iter().any(|p| match l {
                IpAddr::V4(a) => p.ipv4.contains(&a),
                IpAddr::V6(a) => p.ipv6.contains(&a),
            });
            if !ours {
                errs.add(
                    &at("local"),
                    format!("{who}: {l} is not a local address of any [[port]]"),
                );
            }
        }
        let ttl = r.ttl.unwrap_or(64);
        if !(1..=255).contains(&ttl) {
            errs.add(&at("ttl"), format!("{who}: ttl {ttl}: expected 1 to 255"));
        }
        let mut via_idx = None;
        let via = match (&r.port, &r.via) {
            (Some(dev), None) => {
                let pi = ports.iter().position(|p| &p.device == dev);
                if pi.is_none() {
                    errs.add(&at("port"), format!("{who}: no [[port]] has device {dev:?}"));
                }
                let mac = match r.next_hop_mac.as_deref().map(str::parse::<EthernetAddress>) {
                    Some(Ok(m)) if m.is_unicast() => m,
                    Some(_) => {
                        errs.add(
                            &at("next_hop_mac"),
                            format!("{who}: expected a unicast MAC like \"02:00:00:00:00:fe\""),
                        );
                        EthernetAddress::default()
                    }
                    None => {
                        errs.add(
                            &at("next_hop_mac"),
                            format!("{who}: a tunnel that leaves by a port needs next_hop_mac"),
                        );
                        EthernetAddress::default()
                    }
                };
                TunnelVia::Port(pi.unwrap_or(0), mac)
            }
            (None, Some(name)) => {
                match names.iter().position(|n| n == name) {
                    Some(i) => via_idx = Some(i),
                    None => errs.add(&at("via"), format!("{who}: no tunnel is named {name:?}")),
                }
                if r.next_hop_mac.is_some() {
                    errs.add(
                        &at("next_hop_mac"),
                        format!("{who}: next_hop_mac belongs to the tunnel that carries it"),
                    );
                }
                TunnelVia::Tunnel(via_idx.unwrap_or(0))
            }
            _ => {
                errs.add(
                    &at("port"),
                    format!("{who}: give exactly one of port (a [[port]] device) or via (another tunnel)"),
                );
                TunnelVia::Port(0, EthernetAddress::default())
            }
        };
        vias.push(via_idx);
        out.push(TunnelConfig {
            name: r.name.clone(),
            local: local.unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)),
            remote: remote.unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)),
            key: r.key,
            sequence: r.sequence.unwrap_or(false),
            checksum: r.checksum.unwrap_or(false),
            ttl: ttl.clamp(1, 255) as u8,
            via,
            depth: 1,
        });
    }
    // Depth along `via` chains; a chain that revisits a tunnel is a loop (seed 004: a tunnel
    // routed into itself), one longer than MAX_DEPTH nests too deep.
    for ti in 0..out.len() {
        let mut seen = vec![ti];
        let mut cur = ti;
        let mut depth = 1;
        let mut bad = None;
        while let Some(next) = vias[cur] {
            if seen.contains(&next) {
                bad = Some(format!(
                    "loop: {} is carried through itself",
                    seen.iter()
                        .chain([&next])
                        .map(|&i| out[i].name.as_str())
                        .collect::<Vec<_>>()
                        .join(" -> ")
                ));
                break;
            }
            seen.push(next);
            depth += 1;
            cur = next;
            if depth > MAX_DEPTH {
                bad = Some(format!(
                    "nested {depth} deep or more; at most {MAX_DEPTH} tunnel headers are allowed"
                ));
                break;
            }
        }
        match bad {
            Some(msg) => errs.add(
                &[Key("tunnel"), Index(ti), Key("via")],
                format!("tunnel {:?}: {msg}", out[ti].name),
            ),
            None => out[ti].depth = depth,
        }
    }
    out
}

fn resolve_service_tunnels(
    services: &mut [ServiceConfig],
    refs: &[(usize, Vec<String>)],
    tunnels: &[TunnelConfig],
    errs: &mut Errs,
) {
    use fastpath::pipeline::Action;
    use Seg::{Index, Key};
    for (si, names) in refs {
        let mut set = Vec::new();
        for (k, n) in names.iter().enumerate() {
            match tunnels.iter().position(|t| &t.name == n) {
                Some(i) => set.push(i),
                None => errs.add(
                    &[Key("service"), Index(*si), Key("tunnels"), Index(k)],
                    format!("service {:?}: no tunnel is named {n:?}", services[*si].name),
                ),
            }
        }
        services[*si].action = Action::Tunnel(set);
    }
}

fn validate_services(
    raw: Vec<ServiceSection>,
    ports: &[PortConfig],
    lcores: &LcoreConfig,
    dpdk: &DpdkConfig,
    errs: &mut Errs,
) -> (Vec<ServiceConfig>, Vec<(usize, Vec<String>)>) {
    use fastpath::pipeline::{Action, FanoutMode};
    let mut tunnel_refs = Vec::new();
    use fastpath::wire::IpProtocol;
    use Seg::{Index, Key};
    let mut out: Vec<ServiceConfig> = Vec::new();
    let mut names = BTreeSet::new();
    let mut taken: std::collections::BTreeMap<(u8, u16), String> = Default::default();
    if !raw.is_empty() && lcores.workers.is_empty() {
        errs.add(
            &[Key("lcores"), Key("workers")],
            "services need at least one worker lcore to drain their sockets",
        );
    }
    if raw.len() > u16::MAX as usize {
        errs.add(&[Key("service")], format!("{} services: at most 65535", raw.len()));
    }
    for (si, r) in raw.into_iter().enumerate() {
        let at = |k: &'static str| [Key("service"), Index(si), Key(k)];
        let who = format!("service {:?}", r.name);
        if !valid_name(&r.name) {
            errs.add(
                &at("name"),
                format!("{who}: expected a name of letters, digits, '-' and '_'"),
            );
        } else if !names.insert(r.name.clone()) {
            errs.add(&at("name"), format!("{who}: two services have this name"));
        }
        let protocol = match r.protocol.as_deref().unwrap_or("udp") {
            "udp" => IpProtocol::UDP,
            "tcp" => IpProtocol::TCP,
            other => {
                errs.add(
                    &at("protocol"),
                    format!("{who}: {other:?}: expected \"udp\" or \"tcp\""),
                );
                IpProtocol::UDP
            }
        };
        let mut svc_ports = Vec::new();
        if r.ports.is_empty() {
            errs.add(&at("ports"), format!("{who}: at least one port is needed"));
        }
        for (pi, &p) in r.ports.iter().enumerate() {
            let here = [Key("service"), Index(si), Key("ports"), Index(pi)];
            let port = match u16::try_from(p) {
                Ok(port) if port != 0 => port,
                _ => {
                    errs.add(&here, format!("{who}: {p}: expected a port 1..65535"));
                    continue;
                }
            };
            match taken.get(&(u8::from(protocol), port)) {
                Some(other) => errs.add(
                    &here,
                    format!("{who}: port {port} already belongs to service {other:?}"),
                ),
                None => {
                    taken.insert((u8::from(protocol), port), r.name.clone());
                    svc_ports.push(port);
                }
            }
        }
        let mut addresses = Vec::new();
        for (ai, a) in r.addresses.iter().flatten().enumerate() {
            let here = [Key("service"), Index(si), Key("addresses"), Index(ai)];
            match a.parse::<std::net::IpAddr>() {
                Ok(ip) => {
                    let local = ports.iter().any(|p| match ip {
                        std::net::IpAddr::V4(v4) => p.ipv4.contains(&v4),
                        std::net::IpAddr::V6(v6) => p.ipv6.contains(&v6),
                    });
                    if local {
                        addresses.push(ip);
                    } else {
                        errs.add(&here, format!("{who}: {ip} is not a local address of any [[port]]"));
                    }
                }
                Err(_) => errs.add(&here, format!("{who}: {a:?}: expected an IP address")),
            }
        }
        let sockets = r.sockets.unwrap_or(1);
        if !(1..=MAX_SOCKETS as i64).contains(&sockets) {
            errs.add(
                &at("sockets"),
                format!("{who}: {sockets} sockets: expected 1 to {MAX_SOCKETS}"),
            );
        }
        let cap = r.socket_capacity.unwrap_or(1024);
        if !(1..=MAX_SOCKET_CAPACITY as i64).contains(&cap) {
            errs.add(
                &at("socket_capacity"),
                format!("{who}: capacity {cap}: a socket ring holds 1 to {MAX_SOCKET_CAPACITY} packets"),
            );
        } else if cap > dpdk.mbufs as i64 {
            errs.add(
                &at("socket_capacity"),
                format!(
                    "{who}: capacity {cap} is more than the whole mbuf pool (dpdk.mbufs = {}): the ring could never fill \
                     and a full one would starve RX",
                    dpdk.mbufs
                ),
            );
        }
        if r.cost_ns.is_some_and(|c| c > 10_000_000) {
            errs.add(
                &at("cost_ns"),
                format!("{who}: cost_ns is at most 10000000 (10 ms per packet)"),
            );
        }
        let fanout = match r.fanout.as_deref().unwrap_or("hash") {
            "hash" => FanoutMode::Hash,
            "roundrobin" => FanoutMode::RoundRobin,
            "random" => FanoutMode::Random,
            other => {
                errs.add(
                    &at("fanout"),
                    format!("{who}: {other:?}: expected \"hash\", \"roundrobin\" or \"random\""),
                );
                FanoutMode::Hash
            }
        };
        let action = match r.action.as_str() {
            "echo" if protocol == IpProtocol::TCP => {
                errs.add(
                    &at("action"),
                    format!("{who}: echo is a UDP echo server; a tcp service can use \"sink\""),
                );
                Action::Sink
            }
            "echo" => Action::Echo,
            "sink" => Action::Sink,
            "tunnel" => {
                let names: Vec<String> = r
                    .tunnel
                    .iter()
                    .cloned()
                    .chain(r.tunnels.iter().flatten().cloned())
                    .collect();
                if names.is_empty() {
                    errs.add(
                        &at("action"),
                        format!("{who}: action \"tunnel\" needs tunnel = \"NAME\" or tunnels = [..]"),
                    );
                }
                tunnel_refs.push((si, names));
                Action::Sink
            }
            other => {
                errs.add(
                    &at("action"),
                    format!("{who}: unknown action {other:?}: expected \"echo\" or \"sink\""),
                );
                Action::Sink
            }
        };
        if (r.tunnel.is_some() || r.tunnels.is_some()) && r.action != "tunnel" {
            errs.add(
                &at("action"),
                format!("{who}: tunnel/tunnels are only for action = \"tunnel\""),
            );
        }
        out.push(ServiceConfig {
            name: r.name,
            protocol,
            ports: svc_ports,
            addresses,
            sockets: sockets.clamp(1, MAX_SOCKETS as i64) as usize,
            socket_capacity: cap.clamp(1, MAX_SOCKET_CAPACITY as i64) as usize,
            fanout,
            rollover: r.rollover.unwrap_or(true),
            huge_flows: r.huge_flow_rollover.unwrap_or(true),
            action,
            cost_ns: r.cost_ns.unwrap_or(0),
            free_on_rx: r.free_on_rx.unwrap_or(false),
        });
    }
    (out, tunnel_refs)
}

/// Whether `name` is a valid service or tunnel name (it becomes a metric label value).
fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Parses `port[pi].<key>`: local unicast addresses, each once.
fn local_addrs<A: std::str::FromStr + PartialEq + fmt::Display>(
    list: &[String],
    pi: usize,
    key: &'static str,
    example: &str,
    not_unicast: impl Fn(&A) -> bool,
    errs: &mut Errs,
) -> Vec<A> {
    use Seg::{Index, Key};
    let mut out: Vec<A> = Vec::new();
    for (i, s) in list.iter().enumerate() {
        let at = [Key("port"), Index(pi), Key(key), Index(i)];
        match s.parse::<A>() {
            Ok(a) if not_unicast(&a) => errs.add(&at, format!("{a} cannot be a local unicast address")),
            Ok(a) if out.contains(&a) => errs.add(&at, format!("{a} is listed twice")),
            Ok(a) => out.push(a),
            Err(_) => errs.add(
                &at,
                format!(
                    "{s:?}: expected an {} address like \"{example}\"",
                    key.to_uppercase().replace("IPV", "IPv")
                ),
            ),
        }
    }
    out
}

fn parse_hex_key(text: &str) -> Option<[u8; 40]> {
    let digits: Vec<u8> = text.bytes().filter(|b| *b != b':' && *b != b' ').collect();
    if digits.len() != 80 {
        return None;
    }
    let mut key = [0u8; 40];
    for (i, pair) in digits.chunks(2).enumerate() {
        key[i] = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(key)
}

impl Config {
    /// The settings that a reload cannot change (they size or start DPDK resources), named by
    /// key, where `new` differs from `self`.
    pub fn restart_only_changes(&self, new: &Config) -> Vec<String> {
        let mut out = Vec::new();
        let d = (&self.dpdk, &new.dpdk);
        if d.0.eal_args != d.1.eal_args {
            out.push("dpdk.eal_args".to_string());
        }
        if d.0.mempool_ops != d.1.mempool_ops {
            out.push("dpdk.mempool_ops".to_string());
        }
        for (k, a, b) in [
            ("dpdk.mbufs", d.0.mbufs as u64, d.1.mbufs as u64),
            ("dpdk.mbuf_cache", d.0.mbuf_cache as u64, d.1.mbuf_cache as u64),
            ("dpdk.rx_desc", d.0.rx_desc as u64, d.1.rx_desc as u64),
            ("dpdk.tx_desc", d.0.tx_desc as u64, d.1.tx_desc as u64),
        ] {
            if a != b {
                out.push(k.to_string());
            }
        }
        if self.ports.len() != new.ports.len() {
            out.push("port (number of [[port]] sections)".to_string());
        }
        for (i, (a, b)) in self.ports.iter().zip(&new.ports).enumerate() {
            if a.device != b.device {
                out.push(format!("port[{i}].device"));
            }
            if a.rx_queues != b.rx_queues {
                out.push(format!("port[{i}].rx_queues"));
            }
            if a.tx_queues != b.tx_queues {
                out.push(format!("port[{i}].tx_queues"));
            }
            if a.mtu != b.mtu {
                out.push(format!("port[{i}].mtu"));
            }
        }
        if self.lcores.rx != new.lcores.rx {
            out.push("lcores.rx".to_string());
        }
        if self.lcores.workers != new.lcores.workers {
            out.push("lcores.workers".to_string());
        }
        if self.lcores.idle_sleep_us != new.lcores.idle_sleep_us {
            out.push("lcores.idle_sleep_us".to_string());
        }
        if self.metrics != new.metrics {
            out.push("metrics.listen".to_string());
        }
        if self.rss.key != new.rss.key {
            out.push("rss.key (programmed into the NICs at start)".to_string());
        }
        if self.rss.symmetric != new.rss.symmetric {
            out.push("rss.symmetric".to_string());
        }
        if self.reassembly_buffers != new.reassembly_buffers {
            out.push("reassembly.buffers".to_string());
        }
        out
    }

    /// What a reload from `self` to `new` changes, one line per change, for the log.
    pub fn describe_changes(&self, new: &Config) -> Vec<String> {
        let mut out = Vec::new();
        if self.icmp != new.icmp {
            out.push("icmp limits changed".to_string());
        }
        if self.reassembly != new.reassembly {
            let (a, b) = (&self.reassembly, &new.reassembly);
            let mut what = Vec::new();
            for (k, x, y) in [
                (
                    "high_thresh_bytes",
                    a.high_thresh_bytes as u64,
                    b.high_thresh_bytes as u64,
                ),
                ("timeout_ms", a.timeout_ns / 1_000_000, b.timeout_ns / 1_000_000),
                ("max_fragments", a.max_fragments as u64, b.max_fragments as u64),
                ("max_per_source", a.max_per_source as u64, b.max_per_source as u64),
                ("max_datagrams", a.max_datagrams as u64, b.max_datagrams as u64),
            ] {
                if x != y {
                    what.push(format!("{k} {x} -> {y}"));
                }
            }
            out.push(format!("reassembly limits {}", what.join(", ")));
        }
        if self.flow_limit != new.flow_limit {
            out.push(format!(
                "flow_limit {} table_len {} -> {} table_len {}",
                if self.flow_limit.enabled { "on" } else { "off" },
                self.flow_limit.table_len,
                if new.flow_limit.enabled { "on" } else { "off" },
                new.flow_limit.table_len
            ));
        }
        for s in &new.services {
            match self.services.iter().find(|o| o.name == s.name) {
                None => out.push(format!("service {:?} added", s.name)),
                Some(o) if o != s => {
                    let mut what = Vec::new();
                    if o.action != s.action {
                        what.push(format!("action {:?} -> {:?}", o.action, s.action));
                    }
                    if o.ports != s.ports || o.protocol != s.protocol || o.addresses != s.addresses {
                        what.push("listen ports/addresses".to_string());
                    }
                    if o.sockets != s.sockets || o.socket_capacity != s.socket_capacity {
                        what.push(format!(
                            "sockets {}x{} -> {}x{}",
                            o.sockets, o.socket_capacity, s.sockets, s.socket_capacity
                        ));
                    }
                    if o.fanout != s.fanout || o.rollover != s.rollover {
                        what.push(format!(
                            "fanout {:?}/rollover {} -> {:?}/{}",
                            o.fanout, o.rollover, s.fanout, s.rollover
                        ));
                    }
                    out.push(format!("service {:?} changed: {}", s.name, what.join(", ")));
                }
                Some(_) => {}
            }
        }
        for o in &self.services {
            if !new.services.iter().any(|s| s.name == o.name) {
                out.push(format!("service {:?} removed", o.name));
            }
        }
        for (i, (a, b)) in self.ports.iter().zip(&new.ports).enumerate() {
            if a.ipv4 != b.ipv4 {
                out.push(format!("port[{i}].ipv4 {:?} -> {:?}", a.ipv4, b.ipv4));
            }
            if a.ipv6 != b.ipv6 {
                out.push(format!("port[{i}].ipv6 {:?} -> {:?}", a.ipv6, b.ipv6));
            }
            if a.mac != b.mac {
                out.push(format!("port[{i}].mac {:?} -> {:?}", a.mac, b.mac));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[dpdk]
eal_args = ["--no-huge", "--vdev=net_null0"]

[[port]]
device = "net_null0"
rx_queues = 1
tx_queues = 2
ipv4 = ["192.0.2.1"]
ipv6 = ["2001:db8::1"]

[lcores]
rx = [0]
workers = [1]
"#;

    fn errors(src: &str) -> Vec<ConfigError> {
        parse(src, "t.toml").unwrap_err().errors
    }

    #[test]
    fn good_config_and_defaults() {
        let c = parse(GOOD, "t.toml").unwrap();
        assert_eq!(c.ports[0].ipv4, vec![Ipv4Addr::new(192, 0, 2, 1)]);
        assert_eq!(c.dpdk.mbufs, 16383);
        assert_eq!(c.lcores.idle_sleep_us, 50);
        assert_eq!(
            c.eal_argv(&["--x".into()]),
            vec!["fastpathd", "-l", "0,1", "--no-huge", "--vdev=net_null0", "--x"]
        );
        assert_eq!(c.rx_assignment(), vec![vec![(0, 0)]]);
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let e = errors(&GOOD.replace("rx_queues = 1", "rx_queue = 1"));
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].line, Some(7));
        assert!(e[0].message.contains("unknown field `rx_queue`"), "{:?}", e[0]);
        assert!(e[0].key.starts_with("port[0]"), "{:?}", e[0]);
    }

    #[test]
    fn wrong_type_names_key_and_line() {
        let e = errors(&GOOD.replace("tx_queues = 2", "tx_queues = \"two\""));
        assert_eq!(e[0].key, "port[0].tx_queues");
        assert_eq!(e[0].line, Some(8));
    }

    #[test]
    fn every_semantic_error_is_reported_with_its_line() {
        let bad = GOOD
            .replace("tx_queues = 2", "tx_queues = 1")
            .replace("\"192.0.2.1\"", "\"192.0.2.300\"")
            .replace("workers = [1]", "workers = [0]")
            .replace("\"--vdev=net_null0\"", "\"--vdev=net_null0\", \"-l\", \"0\"");
        let e = errors(&bad);
        let msgs: Vec<String> = e.iter().map(|e| format!("{:?}:{}", e.line, e.key)).collect();
        assert!(msgs.contains(&"Some(3):dpdk.eal_args[2]".to_string()), "{msgs:?}");
        assert!(
            msgs.contains(&"Some(8):port[0].tx_queues".to_string()) || msgs.iter().any(|m| m.ends_with("tx_queues")),
            "{msgs:?}"
        );
        assert!(msgs.contains(&"Some(9):port[0].ipv4[0]".to_string()), "{msgs:?}");
        assert!(msgs.contains(&"Some(14):lcores.workers[0]".to_string()), "{msgs:?}");
        let text = ConfigErrors {
            file: "t.toml".into(),
            errors: e,
        }
        .to_string();
        assert!(
            text.contains("t.toml:9: port[0].ipv4[0]: \"192.0.2.300\": expected an IPv4 address"),
            "{text}"
        );
    }

    #[test]
    fn too_few_tx_queues_for_lcores() {
        let e = errors(&GOOD.replace("tx_queues = 2", "tx_queues = 1"));
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].key, "port[0].tx_queues");
        assert_eq!(e[0].line, Some(8));
        assert!(e[0].message.contains("own TX queue"));
    }

    #[test]
    fn mode_defaults_to_pipeline_and_forward_to_names_a_port() {
        let c = parse(GOOD, "t.toml").unwrap();
        assert_eq!(c.lcores.mode, LcoreMode::Pipeline);
        assert_eq!(c.ports[0].forward_to, None);
        let two = GOOD
            .replace("\"--vdev=net_null0\"", "\"--vdev=net_null0\", \"--vdev=net_null1\"")
            .replace(
                "ipv6 = [\"2001:db8::1\"]\n",
                "ipv6 = [\"2001:db8::1\"]\nforward_to = \"net_null1\"\n",
            )
            .replace(
                "[lcores]\n",
                "[[port]]\ndevice = \"net_null1\"\ntx_queues = 2\n\n[lcores]\nmode = \"forward\"\n",
            );
        let c = parse(&two, "t.toml").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.lcores.mode, LcoreMode::Forward);
        assert_eq!(c.ports[0].forward_to, Some(1));
        assert_eq!(c.ports[1].forward_to, None);

        // forward_to without forward mode, and to a device that is no [[port]].
        let e = errors(
            &two.replace("mode = \"forward\"\n", "")
                .replace("forward_to = \"net_null1\"", "forward_to = \"net_null9\""),
        );
        let keys: Vec<_> = e.iter().map(|e| (e.key.as_str(), e.line)).collect();
        assert_eq!(
            keys,
            vec![("port[0].forward_to", Some(11)), ("port[0].forward_to", Some(11))],
            "{e:?}"
        );
        assert!(e[0].message.contains("mode = \"forward\"") || e[1].message.contains("mode = \"forward\""));
    }

    #[test]
    fn unknown_mode_names_key_and_line() {
        let e = errors(&GOOD.replace("workers = [1]", "workers = [1]\nmode = \"turbo\""));
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].key, "lcores.mode");
        assert_eq!(e[0].line, Some(15));
        assert!(e[0].message.contains("expected \"pipeline\" or \"forward\""), "{e:?}");
    }

    #[test]
    fn mempool_ops_defaults_to_a_stack_and_names_key_and_line() {
        let c = parse(GOOD, "t.toml").unwrap();
        assert_eq!(c.dpdk.mempool_ops, "stack");
        let with = |v: &str| GOOD.replace("[dpdk]\n", &format!("[dpdk]\nmempool_ops = \"{v}\"\n"));
        assert_eq!(
            parse(&with("ring_mp_mc"), "t.toml").unwrap().dpdk.mempool_ops,
            "ring_mp_mc"
        );
        let e = errors(&with("heap"));
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!((e[0].key.as_str(), e[0].line), ("dpdk.mempool_ops", Some(3)));
        assert!(
            e[0].message
                .contains("\"heap\": expected one of stack, lf_stack, ring_mp_mc"),
            "{e:?}"
        );
        let e = errors(&with("ring_sp_sc"));
        assert_eq!(e[0].key, "dpdk.mempool_ops", "a single-producer pool is refused: {e:?}");
        let b = parse(&with("ring_mp_mc"), "t.toml").unwrap();
        assert_eq!(c.restart_only_changes(&b), vec!["dpdk.mempool_ops"]);
    }

    #[test]
    fn missing_sections() {
        let e = errors("[dpdk]\n");
        assert!(e[0].message.contains("missing field `lcores`"), "{e:?}");
        let e = errors("[dpdk]\n[lcores]\nrx = [0]\n");
        assert_eq!(e[0].key, "port");
    }

    #[test]
    fn metrics_listen() {
        let c = parse(GOOD, "t.toml").unwrap();
        assert_eq!(c.metrics.listen, Some("127.0.0.1:9464".parse().unwrap()));
        let c = parse(&format!("{GOOD}\n[metrics]\nlisten = \"[::1]:0\"\n"), "t.toml").unwrap();
        assert_eq!(c.metrics.listen, Some("[::1]:0".parse().unwrap()));
        let c = parse(&format!("{GOOD}\n[metrics]\nenabled = false\n"), "t.toml").unwrap();
        assert_eq!(c.metrics.listen, None);
        let e = errors(&format!("{GOOD}\n[metrics]\nlisten = \"localhost\"\n"));
        assert_eq!((e[0].key.as_str(), e[0].line), ("metrics.listen", Some(17)));
    }

    #[test]
    fn rss_key() {
        let c = parse(GOOD, "t.toml").unwrap();
        assert_eq!(c.rss.key[..4], [0x6d, 0x5a, 0x56, 0xda]);
        let k = "6d:5a".repeat(20);
        let c = parse(&format!("{GOOD}\n[rss]\nkey = \"{k}\"\nsymmetric = true\n"), "t.toml").unwrap();
        assert_eq!(c.rss.key, [0x6d, 0x5a].repeat(20)[..]);
        assert!(c.rss.symmetric);
        let e = errors(&format!("{GOOD}\n[rss]\nkey = \"6d5a\"\n"));
        assert_eq!((e[0].key.as_str(), e[0].line), ("rss.key", Some(17)));
    }

    const SERVICE: &str =
        "\n[[service]]\nname = \"echo\"\nports = [7]\nsockets = 4\nsocket_capacity = 256\naction = \"echo\"\n";

    #[test]
    fn services() {
        let c = parse(&format!("{GOOD}{SERVICE}"), "t.toml").unwrap();
        let s = &c.services[0];
        assert_eq!(
            (s.name.as_str(), s.ports.as_slice(), s.sockets, s.socket_capacity),
            ("echo", &[7u16][..], 4, 256)
        );
        assert!(s.rollover);
        assert_eq!(s.fanout, fastpath::pipeline::FanoutMode::Hash);
    }

    #[test]
    fn bad_services_are_rejected_naming_the_service() {
        let cases = [
            (
                "sockets = 4",
                "sockets = 0",
                "service[0].sockets",
                "service \"echo\": 0 sockets",
            ),
            (
                "socket_capacity = 256",
                "socket_capacity = 100000",
                "service[0].socket_capacity",
                "more than the whole mbuf pool",
            ),
            (
                "socket_capacity = 256",
                "socket_capacity = 0",
                "service[0].socket_capacity",
                "a socket ring holds",
            ),
            (
                "action = \"echo\"",
                "action = \"mirror\"",
                "service[0].action",
                "unknown action \"mirror\"",
            ),
            (
                "name = \"echo\"\n",
                "name = \"echo\"\nprotocol = \"tcp\"\n",
                "service[0].action",
                "UDP echo server",
            ),
        ];
        for (from, to, key, msg) in cases {
            let e = errors(&format!("{GOOD}{}", SERVICE.replace(from, to)));
            assert!(e.iter().any(|e| e.key == key && e.message.contains(msg)), "{to}: {e:?}");
        }
        let dup = format!(
            "{GOOD}{SERVICE}{}",
            SERVICE.replace("\"echo\"\nports", "\"other\"\nports")
        );
        let e = errors(&dup);
        assert!(
            e.iter()
                .any(|e| e.key == "service[1].ports[0]" && e.message.contains("already belongs to service \"echo\"")),
            "{e:?}"
        );
        let no_workers = format!(
            "{}{SERVICE}",
            GOOD.replace("workers = [1]", "workers = []")
                .replace("tx_queues = 2", "tx_queues = 1")
        );
        assert!(errors(&no_workers).iter().any(|e| e.key == "lcores.workers"));
    }

    #[test]
    fn flow_limit_table_len_is_checked() {
        let c = parse(GOOD, "t.toml").unwrap();
        assert_eq!(c.flow_limit.for_slot(0), Some(4096));
        for bad in ["0", "1000", "2097152", "-4"] {
            let e = errors(&format!("{GOOD}\n[flow_limit]\ntable_len = {bad}\n"));
            assert_eq!(
                (e[0].key.as_str(), e[0].line),
                ("flow_limit.table_len", Some(17)),
                "{bad}"
            );
            assert!(e[0].message.contains("power of two"));
        }
        let c = parse(
            &format!("{GOOD}\n[flow_limit]\ntable_len = 1048576\nlcores = [0]\n"),
            "t.toml",
        )
        .unwrap();
        assert_eq!(c.flow_limit.for_slot(0), Some(1 << 20));
        let e = errors(&format!("{GOOD}\n[flow_limit]\nlcores = [1]\n"));
        assert_eq!(e[0].key, "flow_limit.lcores[0]");
        let c = parse(&format!("{GOOD}\n[flow_limit]\nenabled = false\n"), "t.toml").unwrap();
        assert_eq!(c.flow_limit.for_slot(0), None);
    }

    fn tunnel(name: &str, out: &str) -> String {
        format!("\n[[tunnel]]\nname = \"{name}\"\nlocal = \"192.0.2.1\"\nremote = \"198.51.100.2\"\n{out}\n")
    }

    #[test]
    fn tunnels_nest_to_depth_three_and_loops_are_refused() {
        let port = "port = \"net_null0\"\nnext_hop_mac = \"02:00:00:00:00:fe\"";
        let ok = format!(
            "{GOOD}{}{}{}",
            tunnel("a", port),
            tunnel("b", "via = \"a\""),
            tunnel("c", "via = \"b\"")
        );
        let c = parse(&ok, "t.toml").unwrap();
        assert_eq!(c.tunnels.iter().map(|t| t.depth).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(c.tunnels[2].via, TunnelVia::Tunnel(1));

        let deep = format!("{ok}{}", tunnel("d", "via = \"c\""));
        let e = errors(&deep);
        assert!(
            e.iter()
                .any(|e| e.key == "tunnel[3].via" && e.message.contains("at most 3")),
            "{e:?}"
        );

        let looped = format!("{GOOD}{}{}", tunnel("a", "via = \"b\""), tunnel("b", "via = \"a\""));
        let e = errors(&looped);
        assert!(
            e.iter()
                .any(|e| e.key == "tunnel[0].via" && e.message.contains("loop: a -> b -> a")),
            "{e:?}"
        );
        let selfish = format!("{GOOD}{}", tunnel("a", "via = \"a\""));
        assert!(errors(&selfish)
            .iter()
            .any(|e| e.message.contains("carried through itself")));

        let e = errors(&format!("{GOOD}{}", tunnel("a", "port = \"nope\"")));
        assert!(e.iter().any(|e| e.key == "tunnel[0].port"), "{e:?}");
        assert!(e.iter().any(|e| e.key == "tunnel[0].next_hop_mac"), "{e:?}");
        let e = errors(&format!("{GOOD}{}", tunnel("a", "")));
        assert!(e.iter().any(|e| e.message.contains("exactly one of port")), "{e:?}");
    }

    #[test]
    fn tunnel_actions_name_existing_tunnels() {
        let port = "port = \"net_null0\"\nnext_hop_mac = \"02:00:00:00:00:fe\"";
        let svc = SERVICE.replace("action = \"echo\"", "action = \"tunnel\"\ntunnels = [\"a\", \"zz\"]");
        let e = errors(&format!("{GOOD}{}{svc}", tunnel("a", port)));
        assert!(
            e.iter()
                .any(|e| e.key == "service[0].tunnels[1]" && e.message.contains("\"zz\"")),
            "{e:?}"
        );
        let svc = SERVICE.replace("action = \"echo\"", "action = \"tunnel\"\ntunnel = \"a\"");
        let c = parse(&format!("{GOOD}{}{svc}", tunnel("a", port)), "t.toml").unwrap();
        assert_eq!(c.services[0].action, fastpath::pipeline::Action::Tunnel(vec![0]));
    }

    #[test]
    fn reload_classifies_changes() {
        let a = parse(GOOD, "t.toml").unwrap();
        let b = parse(
            &GOOD.replace("[\"192.0.2.1\"]", "[\"192.0.2.1\", \"192.0.2.5\"]"),
            "t.toml",
        )
        .unwrap();
        assert!(a.restart_only_changes(&b).is_empty());
        assert_eq!(a.describe_changes(&b).len(), 1);
        let c = parse(
            &GOOD
                .replace("rx_queues = 1", "rx_queues = 2")
                .replace("workers = [1]", "workers = [2]"),
            "t.toml",
        )
        .unwrap();
        assert_eq!(a.restart_only_changes(&c), vec!["port[0].rx_queues", "lcores.workers"]);
    }

    #[test]
    fn every_shipped_config_is_valid() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let p = entry.unwrap().path();
            if p.extension().is_some_and(|e| e == "toml") {
                load(&p).unwrap_or_else(|e| panic!("{e}"));
                n += 1;
            }
        }
        assert!(n >= 1, "no config in {}", dir.display());
    }
}
