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
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct DpdkSection {
    #[serde(default)]
    eal_args: Vec<String>,
    mbufs: Option<u32>,
    mbuf_cache: Option<u32>,
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
}

/// `[dpdk]`.
#[derive(Clone, Debug, PartialEq)]
pub struct DpdkConfig {
    /// Arguments for `rte_eal_init` (without the program name and without an lcore list).
    pub eal_args: Vec<String>,
    /// Mbufs in the pool.
    pub mbufs: u32,
    /// Per-lcore mempool cache.
    pub mbuf_cache: u32,
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
        rx_desc: raw.dpdk.rx_desc.unwrap_or(1024),
        tx_desc: raw.dpdk.tx_desc.unwrap_or(1024),
    };
    if !(1023..=16 * 1024 * 1024).contains(&dpdk.mbufs) {
        errs.add(
            &[Key("dpdk"), Key("mbufs")],
            "expected a number of mbufs between 1023 and 16777216",
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
        let mut ipv4 = Vec::new();
        for (i, s) in p.ipv4.iter().enumerate() {
            match s.parse::<Ipv4Addr>() {
                Ok(a) if a.is_unspecified() || a.is_multicast() || a.is_broadcast() => errs.add(
                    &[Key("port"), Index(pi), Key("ipv4"), Index(i)],
                    format!("{a} cannot be a local unicast address"),
                ),
                Ok(a) if ipv4.contains(&a) => errs.add(
                    &[Key("port"), Index(pi), Key("ipv4"), Index(i)],
                    format!("{a} is listed twice"),
                ),
                Ok(a) => ipv4.push(a),
                Err(_) => errs.add(
                    &[Key("port"), Index(pi), Key("ipv4"), Index(i)],
                    format!("{s:?}: expected an IPv4 address like \"192.0.2.1\""),
                ),
            }
        }
        let mut ipv6 = Vec::new();
        for (i, s) in p.ipv6.iter().enumerate() {
            match s.parse::<Ipv6Addr>() {
                Ok(a) if a.is_unspecified() || a.is_multicast() || a.is_loopback() => errs.add(
                    &[Key("port"), Index(pi), Key("ipv6"), Index(i)],
                    format!("{a} cannot be a local unicast address"),
                ),
                Ok(a) if ipv6.contains(&a) => errs.add(
                    &[Key("port"), Index(pi), Key("ipv6"), Index(i)],
                    format!("{a} is listed twice"),
                ),
                Ok(a) => ipv6.push(a),
                Err(_) => errs.add(
                    &[Key("port"), Index(pi), Key("ipv6"), Index(i)],
                    format!("{s:?}: expected an IPv6 address like \"2001:db8::1\""),
                ),
            }
        }
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

    Config { dpdk, ports, lcores }
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
    fn missing_sections() {
        let e = errors("[dpdk]\n");
        assert!(e[0].message.contains("missing field `lcores`"), "{e:?}");
        let e = errors("[dpdk]\n[lcores]\nrx = [0]\n");
        assert_eq!(e[0].key, "port");
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
