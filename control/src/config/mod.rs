//! The TOML config: serde structs that reject unknown keys, and a `validate` pass that turns them
//! into the runtime form. Every error names the key and the line, and all of them are reported at
//! once. Key names are the user-facing contract in `docs/contract.md`.
//!
//! One file per section: the section as written (serde), its validated form and its `validate`.
//! [`errors`](ConfigErrors) holds the error type and the locating plumbing; `keys` the table of
//! every key and what a reload does with it ([`KEYS`]), which both the reload's refusal and the
//! reload log line are made from.

mod budget;
mod changes;
mod control;
pub use control::{ControlConfig, DEFAULT_SOCKET};
mod dpdk;
pub use dpdk::virtio_user_memory;
mod errors;
mod filter;
pub use filter::{FilterConfig, ListConfig, ListFile, MAX_PREFIXES};
mod flow_limit;
mod icmp;
mod kernel;
pub use kernel::{KernelConfig, KERNEL_SERVICE};
mod keys;
mod lcores;
mod machine;
pub use machine::{read_hugepages, Hugepages, Machine};
mod conntrack;
mod metrics;
mod port;
mod reassembly;
mod rss;
mod service;
mod source_limit;
pub use source_limit::SourceLimitConfig;
mod tcp_state;
pub use tcp_state::TcpStateSettings;
mod tcp_reset;
mod tunnel;

#[cfg(test)]
mod input_tests;
#[cfg(test)]
mod tests;

pub use budget::{held_fragments, Budget, RESERVE};
pub use changes::Change;
pub use dpdk::{DpdkConfig, DEFAULT_MEMPOOL_OPS, MEMPOOL_OPS};
pub use errors::{ConfigError, ConfigErrors};
pub use keys::{spec, KeySpec, Reload, KEYS};
pub use lcores::{LcoreConfig, LcoreMode, MAX_LCORE};
pub use metrics::{MetricsConfig, DEFAULT_METRICS_LISTEN};
pub use port::{PortConfig, MAX_QUEUES};
pub use rss::{fingerprint, KeySource, RssConfig};
pub use service::{ServiceConfig, MAX_SOCKETS, MAX_SOCKET_CAPACITY};
pub use tunnel::{parse_check, Check, HealthConfig, TunnelConfig, TunnelVia};

use crate::locate::{Locator, Seg};
use errors::Errs;
use serde::Deserialize;
use std::path::Path;

// Imported for the unit tests in `tests.rs`, which see this module's names.
#[cfg(test)]
use std::net::Ipv4Addr;

/// The file, as written.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    dpdk: dpdk::DpdkSection,
    #[serde(default)]
    port: Vec<port::PortSection>,
    lcores: lcores::LcoresSection,
    metrics: Option<metrics::MetricsSection>,
    rss: Option<rss::RssSection>,
    #[serde(default)]
    service: Vec<service::ServiceSection>,
    flow_limit: Option<flow_limit::FlowLimitSection>,
    #[serde(default)]
    tunnel: Vec<tunnel::TunnelSection>,
    reassembly: Option<reassembly::ReassemblySection>,
    icmp: Option<icmp::IcmpSection>,
    tcp_reset: Option<tcp_reset::TcpResetSection>,
    conntrack: Option<conntrack::ConntrackSection>,
    control: Option<control::ControlSection>,
    kernel: Option<kernel::KernelSection>,
    filter: Option<filter::FilterSection>,
    source_limit: Option<source_limit::SourceLimitSection>,
    tcp_state: Option<tcp_state::TcpStateSection>,
}

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
    /// `[tcp_reset]`.
    pub tcp_reset: fastpath::pipeline::tcp_reset::TcpResetConfig,
    /// `[conntrack]`: the tunnel services' connection table and ICMP forwarding.
    pub conntrack: fastpath::pipeline::conntrack::ConntrackConfig,
    /// `[control]`: the file watch.
    pub control: ControlConfig,
    /// `[kernel]`: the exception path (meaningful when a port has a kernel interface).
    pub kernel: KernelConfig,
    /// `[filter]`: source prefixes refused (or the only ones admitted) on every port.
    pub filter: FilterConfig,
    /// `[source_limit]`: per-source budgets in front of services.
    pub source_limit: SourceLimitConfig,
    /// `[tcp_state]`: the TCP state table of the services with `tcp_state = true`.
    pub tcp_state: TcpStateSettings,
}

impl Config {
    /// The full EAL argument list: program name, the lcore list derived from `[lcores]`, the
    /// config's `eal_args`, then `extra` (from the command line after `--`).
    pub fn eal_argv(&self, extra: &[String]) -> Vec<String> {
        let mut v = vec!["fastpathd".to_string()];
        v.extend(self.lcores.eal_lcore_args());
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

/// Largest config file read: 16 MiB, some 150,000 services; a larger one is refused before it
/// is read.
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// A validated config and the warnings its file gave (accepted, but probably not meant).
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The config.
    pub config: Config,
    /// The warnings, in file order (empty if none); `Display` writes one line each.
    pub warnings: ConfigErrors,
}

impl Loaded {
    /// Writes every warning to stderr, one line each, prefixed `warning:`.
    pub fn log_warnings(&self) {
        for w in self.warnings.to_string().lines() {
            tracing::warn!("warning: {w}");
        }
    }
}

/// Reads the text of the config at `path` (an error names the file). Only a regular file of at
/// most [`MAX_CONFIG_BYTES`] is read: the file is opened non-blocking (opening a FIFO with no
/// writer returns at once instead of waiting for one) and without becoming a controlling
/// terminal, its type and size are taken from the opened descriptor (`fstat`, so a symlink is
/// judged by what it points to and nothing can be swapped in between), and FIFOs, devices,
/// sockets and directories are refused before any read. At most the cap is read even if the
/// file grows meanwhile. So the control thread never blocks on a config path, nor reads an
/// endless `/dev/zero`.
pub fn read(path: &Path) -> Result<String, ConfigErrors> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let fail = |message: String| ConfigErrors {
        file: path.display().to_string(),
        errors: vec![ConfigError {
            key: String::new(),
            line: None,
            message,
        }],
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| fail(format!("cannot read: {e}")))?;
    let meta = file.metadata().map_err(|e| fail(format!("cannot read: {e}")))?;
    let t = meta.file_type();
    if !t.is_file() {
        let what = if t.is_dir() {
            "a directory"
        } else if t.is_fifo() {
            "a FIFO"
        } else if t.is_char_device() {
            "a character device"
        } else if t.is_block_device() {
            "a block device"
        } else if t.is_socket() {
            "a socket"
        } else {
            "not a regular file"
        };
        return Err(fail(format!("cannot read: {what}; the config must be a regular file")));
    }
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(fail(format!(
            "cannot read: {} bytes; a config file may have at most {MAX_CONFIG_BYTES} bytes (16 MiB)",
            meta.len()
        )));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(format!("cannot read: {e}")))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(fail(format!(
            "cannot read: it grew past {MAX_CONFIG_BYTES} bytes (16 MiB) while being read"
        )));
    }
    String::from_utf8(bytes).map_err(|e| fail(format!("cannot read: not UTF-8 text: {e}")))
}

/// Reads and validates the config at `path`.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    load_checked(path).map(|l| l.config)
}

/// Reads and validates the config at `path`, keeping the warnings.
pub fn load_checked(path: &Path) -> Result<Loaded, ConfigErrors> {
    parse_checked(&read(path)?, &path.display().to_string())
}

/// Checks `cfg`, read from `src` (named `file`), against the machine `m`, with the command
/// line's `extra` EAL arguments: the lcores' CPUs must be ones this process may use, hugepages
/// must be there when the EAL arguments need them, and the ports' devices must exist (a
/// `--vdev` for each virtual one, the kernel interfaces and captures they name, a PCI device
/// bound to a driver DPDK can use). Every problem, with key and line; `Ok` lists what could not
/// be checked, and the warnings (an RX lcore polling a port on another NUMA socket).
pub fn check_machine(
    cfg: &Config,
    extra: &[String],
    src: &str,
    file: &str,
    m: &Machine,
) -> Result<(Vec<String>, ConfigErrors), ConfigErrors> {
    let loc = Locator::new(src);
    let mut errs = Errs {
        loc: &loc,
        list: Vec::new(),
        warnings: Vec::new(),
    };
    let unchecked = machine::check(cfg, extra, m, &mut errs);
    if errs.list.is_empty() {
        let warnings = ConfigErrors {
            file: file.to_string(),
            errors: errs.warnings,
        };
        Ok((unchecked, warnings))
    } else {
        errs.list.sort_by_key(|e| e.line.unwrap_or(usize::MAX));
        Err(ConfigErrors {
            file: file.to_string(),
            errors: errs.list,
        })
    }
}

/// Parses and validates config text; `file` names it in errors.
pub fn parse(src: &str, file: &str) -> Result<Config, ConfigErrors> {
    parse_checked(src, file).map(|l| l.config)
}

/// Parses and validates config text, keeping the warnings; `file` names it in errors, and a
/// relative `[rss] key_file` is taken from its directory.
///
/// Every problem is reported at once, each with key and line: a TOML syntax error stops the
/// parse (nothing after it can be trusted), but type errors and unknown keys do not: each is
/// recorded and its key set aside, and the rest is read again, so the meaning of what is left
/// is still validated (problems that follow only from a key set aside are not repeated).
pub fn parse_checked(src: &str, file: &str) -> Result<Loaded, ConfigErrors> {
    let loc = Locator::new(src);
    let fail = |errors: Vec<ConfigError>| {
        let mut errors = errors;
        errors.sort_by_key(|e| e.line.unwrap_or(usize::MAX));
        ConfigErrors {
            file: file.to_string(),
            errors,
        }
    };
    let table: toml::Table = src.parse().map_err(|e: toml::de::Error| {
        let (line, key) = match e.span() {
            Some(s) => (
                Some(loc.line_of_offset(s.start)),
                loc.key_at(s.start).unwrap_or_default(),
            ),
            // Every error has a line: the start for one the TOML parser cannot place.
            None => (Some(1), String::new()),
        };
        fail(vec![ConfigError {
            key,
            line,
            message: e.message().trim().to_string(),
        }])
    })?;
    let (raw, shape_errors, set_aside) = deserialize_all(table, &loc);
    let mut errs = Errs {
        loc: &loc,
        list: Vec::new(),
        warnings: Vec::new(),
    };
    let Some(raw) = raw else {
        return Err(fail(shape_errors));
    };
    let dir = Path::new(file).parent().unwrap_or(Path::new(""));
    let cfg = validate(raw, dir, &mut errs);
    if errs.list.is_empty() && shape_errors.is_empty() {
        // Checked last, on a config otherwise valid, so its terms are the real values.
        budget::check(&cfg, &mut errs);
    }
    if errs.list.is_empty() && shape_errors.is_empty() {
        errs.warnings.sort_by_key(|e| e.line.unwrap_or(usize::MAX));
        return Ok(Loaded {
            config: cfg,
            warnings: ConfigErrors {
                file: file.to_string(),
                errors: errs.warnings,
            },
        });
    }
    let follows = |e: &ConfigError| {
        set_aside
            .iter()
            .any(|k| e.key == *k || e.key.starts_with(&format!("{k}.")) || e.key.starts_with(&format!("{k}[")))
    };
    let mut all = shape_errors;
    all.extend(errs.list.into_iter().filter(|e| !follows(e)));
    Err(fail(all))
}

/// At most this many type errors and unknown keys are collected from one file (each costs one
/// more pass over the file); past it, the ones found are reported.
const MAX_SHAPE_ERRORS: usize = 50;

/// serde's type names in words an operator reads (`invalid type: string "two", expected u16` said
/// nothing to someone who never met Rust's integer types).
fn in_words(message: &str) -> String {
    let mut m = message.to_string();
    for (rust, words) in [
        ("expected i64", "expected a whole number"),
        ("expected u64", "expected a whole number, 0 or more"),
        ("expected u32", "expected a whole number from 0 to 4294967295"),
        ("expected u16", "expected a whole number from 0 to 65535"),
        ("expected u8", "expected a whole number from 0 to 255"),
        ("expected f64", "expected a number"),
        ("expected usize", "expected a whole number, 0 or more"),
        ("expected a boolean", "expected true or false"),
        ("a sequence", "a list in [ ]"),
        ("a map", "a table"),
    ] {
        m = m.replace(rust, words);
    }
    m
}

/// Deserializes the file's sections, recording each type error or unknown key with its line
/// and setting that key aside, until what is left deserializes. Returns the sections (`None`
/// when a required key is missing or a problem cannot be set aside), the problems, and the keys
/// set aside (dotted, as errors name them).
fn deserialize_all(mut table: toml::Table, loc: &Locator) -> (Option<FileConfig>, Vec<ConfigError>, Vec<String>) {
    use serde_path_to_error::Segment;
    let mut errors = Vec::new();
    let mut set_aside = Vec::new();
    loop {
        let e = match serde_path_to_error::deserialize::<_, FileConfig>(toml::Value::Table(table.clone())) {
            Ok(raw) => return (Some(raw), errors, set_aside),
            Err(e) => e,
        };
        let message = e.inner().message().trim().to_string();
        let mut segs: Vec<PathSeg> = Vec::new();
        for seg in e.path().iter() {
            match seg {
                Segment::Map { key } => segs.push(PathSeg::Key(key.clone())),
                Segment::Seq { index } => segs.push(PathSeg::Index(*index)),
                Segment::Enum { .. } | Segment::Unknown => {}
            }
        }
        // An unknown key: serde names it in the message, at its table's path.
        let unknown = message
            .strip_prefix("unknown field `")
            .and_then(|m| m.split('`').next())
            .map(str::to_string);
        if let Some(k) = &unknown {
            if !matches!(segs.last(), Some(PathSeg::Key(last)) if last == k) {
                segs.push(PathSeg::Key(k.clone()));
            }
        }
        let loc_path: Vec<Seg> = segs
            .iter()
            .map(|s| match s {
                PathSeg::Key(k) => Seg::Key(k),
                PathSeg::Index(i) => Seg::Index(*i),
            })
            .collect();
        let key = errors::key_of(&loc_path);
        let missing = message.starts_with("missing field `");
        let message = match &unknown {
            Some(_) => match message.split_once(", expected ") {
                Some((head, expected)) => format!("{head}; known keys here: {expected}"),
                None => message,
            },
            None => in_words(&message),
        };
        errors.push(ConfigError {
            key: key.clone(),
            line: loc.line_of(&loc_path).or(Some(1)),
            message,
        });
        // A bad element of an array sets the whole array aside.
        while matches!(segs.last(), Some(PathSeg::Index(_))) && segs.len() > 1 {
            segs.pop();
        }
        let aside = errors::key_of(
            &segs
                .iter()
                .map(|s| match s {
                    PathSeg::Key(k) => Seg::Key(k),
                    PathSeg::Index(i) => Seg::Index(*i),
                })
                .collect::<Vec<_>>(),
        );
        // A missing key cannot be set aside; nor can a problem with no key, or too many.
        if missing || segs.is_empty() || errors.len() >= MAX_SHAPE_ERRORS || !remove(&mut table, &segs) {
            return (None, errors, set_aside);
        }
        set_aside.push(aside);
    }
}

/// One step of a path into the file's tables, owned.
enum PathSeg {
    Key(String),
    Index(usize),
}

/// Removes the value at `path` from `table`. False if there is nothing there (a path ending in
/// an index is never asked for: its array is set aside whole).
fn remove(table: &mut toml::Table, path: &[PathSeg]) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let mut cur: &mut toml::Value = match parents.first() {
        Some(PathSeg::Key(k)) => match table.get_mut(k) {
            Some(v) => v,
            None => return false,
        },
        Some(PathSeg::Index(_)) => return false,
        None => {
            return match last {
                PathSeg::Key(k) => table.remove(k).is_some(),
                PathSeg::Index(_) => false,
            }
        }
    };
    for seg in &parents[1..] {
        let next = match (seg, cur) {
            (PathSeg::Key(k), toml::Value::Table(t)) => t.get_mut(k),
            (PathSeg::Index(i), toml::Value::Array(a)) => a.get_mut(*i),
            _ => None,
        };
        match next {
            Some(v) => cur = v,
            None => return false,
        }
    }
    match (last, cur) {
        (PathSeg::Key(k), toml::Value::Table(t)) => t.remove(k).is_some(),
        _ => false,
    }
}

/// Validates every section, in the order later sections need earlier ones; `dir` is the
/// config's directory.
fn validate(raw: FileConfig, dir: &Path, errs: &mut Errs) -> Config {
    let dpdk = dpdk::validate(raw.dpdk, errs);
    let lcores = lcores::validate(raw.lcores, errs);
    let ports = port::validate(raw.port, &lcores, dir, errs);
    lcores::check_rx_queues(&lcores, &ports, errs);
    port::check_af_packet_queues(&dpdk.eal_args, &ports, errs);
    port::check_af_xdp(&dpdk.eal_args, &ports, errs);
    let metrics = metrics::validate(raw.metrics, errs);
    let rss = rss::validate(raw.rss, dir, errs);
    let index = port::PortIndex::new(&ports);
    let (mut services, tunnel_refs) = service::validate(raw.service, &index, &lcores, &dpdk, dir, errs);
    let flow_limit = flow_limit::validate(raw.flow_limit, &lcores, errs);
    let tunnels = tunnel::validate(raw.tunnel, &index, errs);
    service::resolve_tunnels(&mut services, &tunnel_refs, &tunnels, errs);
    rss::warn_public_key(&rss, &services, errs);
    let (mut reassembly, reassembly_buffers) = reassembly::validate(raw.reassembly, errs);
    // Held fragments are charged what their packet buffers really take, which the ports'
    // largest MTU sets (a 9000-byte MTU makes each held buffer 4x the default charge).
    let max_mtu = ports.iter().filter_map(|p| p.mtu).max().unwrap_or(1500) as u32;
    reassembly.buffer_truesize = packet_buffer_truesize(max_mtu);
    let icmp = icmp::validate(raw.icmp, errs);
    let tcp_reset = tcp_reset::validate(raw.tcp_reset, errs);
    let conntrack = conntrack::validate(raw.conntrack, errs);
    let control = control::validate(raw.control, dir, errs);
    let kernel = kernel::validate(raw.kernel, &ports, &services, &lcores, errs);
    let filter = filter::validate(raw.filter, dir, errs);
    let source_limit = source_limit::validate(raw.source_limit, &services, errs);
    let tcp_state = tcp_state::validate(raw.tcp_state, errs);
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
        tcp_reset,
        conntrack,
        control,
        kernel,
        filter,
        source_limit,
        tcp_state,
    }
}

/// Data room of the packet pool's mbufs for a largest port MTU of `mtu`: headroom, the frame
/// (Ethernet, a VLAN tag, the FCS) and at least DPDK's default 2048 + 128.
pub fn packet_data_room(mtu: u32) -> u32 {
    (128 + mtu + 14 + 8 + 4).max(2048 + 128)
}

/// Bytes one packet buffer takes: its data room and the `rte_mbuf` header (two cache lines);
/// 2304 for MTUs up to 1500 (`fastpath::pipeline::reasm::DEFAULT_TRUESIZE`).
pub fn packet_buffer_truesize(mtu: u32) -> usize {
    (packet_data_room(mtu) + 128) as usize
}

/// Whether `name` is a valid service or tunnel name (it becomes a metric label value).
fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}
