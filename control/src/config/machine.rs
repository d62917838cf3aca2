//! A valid config against this machine: what `--check-config` (and every start) checks before
//! the EAL is asked, so a config this machine cannot run is a config error with key and line
//! (exit 1) rather than an EAL failure (exit 3). What cannot be known without starting DPDK is
//! said, not guessed.

use super::errors::Errs;
use super::{lcores, Config};
use crate::locate::Seg::{Index, Key};
use crate::numa::pci_address;
use std::path::{Path, PathBuf};

/// What this machine offers, as far as it could be read (`None`: could not be read).
#[derive(Clone, Debug)]
pub struct Machine {
    /// The CPUs this process may run on.
    pub cpus: Option<Vec<u32>>,
    /// Free hugepage memory, and whether a hugetlbfs is mounted.
    pub hugepages: Option<Hugepages>,
    /// Where sysfs is (`/sys`; a directory tree in tests).
    pub sys: PathBuf,
}

/// Hugepage memory as the kernel reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hugepages {
    /// Free hugepages, in bytes, over every page size.
    pub free_bytes: u64,
    /// Whether a `hugetlbfs` is mounted (the EAL maps its pages from one).
    pub mounted: bool,
}

impl Machine {
    /// This machine, read now; `cpus` are the CPUs this process may use (the daemon's
    /// `placement::allowed_cpus`).
    pub fn this(cpus: Option<Vec<u32>>) -> Machine {
        Machine {
            cpus,
            hugepages: read_hugepages(Path::new("/sys"), Path::new("/proc/mounts")),
            sys: PathBuf::from("/sys"),
        }
    }
}

/// Free hugepages from `<sys>/kernel/mm/hugepages/hugepages-<size>kB/free_hugepages`, and
/// whether `mounts` lists a hugetlbfs.
pub fn read_hugepages(sys: &Path, mounts: &Path) -> Option<Hugepages> {
    let mut free_bytes = 0u64;
    for e in std::fs::read_dir(sys.join("kernel/mm/hugepages")).ok()? {
        let e = e.ok()?;
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(kb) = name
            .strip_prefix("hugepages-")
            .and_then(|s| s.strip_suffix("kB"))
            .and_then(|s| s.parse::<u64>().ok())
        else {
            continue;
        };
        let free: u64 = std::fs::read_to_string(e.path().join("free_hugepages"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        free_bytes += free * kb * 1024;
    }
    let mounted = std::fs::read_to_string(mounts)
        .ok()?
        .lines()
        .any(|l| l.split_whitespace().nth(2) == Some("hugetlbfs"));
    Some(Hugepages { free_bytes, mounted })
}

/// The EAL arguments a run would pass, as (flag, value) pairs: `--vdev=X`, `--vdev X`, `-m X`.
fn eal_value<'a>(args: &'a [String], names: &[&str]) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut it = args.iter().peekable();
    while let Some(a) = it.next() {
        for n in names {
            if a == n {
                if let Some(v) = it.peek() {
                    out.push(v.as_str());
                }
            } else if let Some(v) = a.strip_prefix(&format!("{n}=")) {
                out.push(v);
            } else if n.len() == 2 && !n.starts_with("--") && a.starts_with(n) && a.len() > 2 {
                // `-m512`
                out.push(&a[2..]);
            }
        }
    }
    out
}

/// Drivers DPDK can take a PCI NIC through (VFIO, UIO, and the bifurcated Mellanox ones that
/// keep their kernel driver).
const DPDK_DRIVERS: &[&str] = &["vfio-pci", "uio_pci_generic", "igb_uio", "mlx5_core", "mlx4_core"];

/// Checks `cfg` against `m`, with the command line's `extra` EAL arguments: errors with key and
/// line in `errs`; returns what could not be checked, one line each.
pub(super) fn check(cfg: &Config, extra: &[String], m: &Machine, errs: &mut Errs) -> Vec<String> {
    let mut unchecked = Vec::new();
    let args: Vec<String> = cfg.dpdk.eal_args.iter().chain(extra).cloned().collect();
    let eal_key = [Key("dpdk"), Key("eal_args")];
    match &m.cpus {
        Some(allowed) => lcores::check_machine(&cfg.lcores, allowed, errs),
        None => unchecked.push("the lcores' CPUs (cannot read this process's allowed CPUs)".to_string()),
    }
    // Hugepages, unless the EAL is told to run without them.
    if !args.iter().any(|a| a == "--no-huge") {
        match m.hugepages {
            None => unchecked.push("hugepages (cannot read /sys/kernel/mm/hugepages or /proc/mounts)".to_string()),
            Some(h) if !h.mounted => errs.add(
                &eal_key,
                "the EAL needs hugepages (no --no-huge) but no hugetlbfs is mounted: \
                 `mount -t hugetlbfs nodev /dev/hugepages`, or `dpdk-hugepages.py --setup 1G`",
            ),
            Some(h) => {
                let mb: u64 = eal_value(&args, &["-m"])
                    .first()
                    .and_then(|v| v.parse().ok())
                    .or_else(|| {
                        eal_value(&args, &["--socket-mem"])
                            .first()
                            .map(|v| v.split(',').filter_map(|x| x.parse::<u64>().ok()).sum())
                    })
                    .unwrap_or(0);
                let want = (mb << 20).max(1);
                if h.free_bytes < want {
                    errs.add(
                        &eal_key,
                        format!(
                            "the EAL needs {} of hugepages but {} MiB are free: reserve more \
                             (`echo N > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages`), \
                             lower -m, or run with --no-huge",
                            if mb == 0 {
                                "some".to_string()
                            } else {
                                format!("{mb} MiB")
                            },
                            h.free_bytes >> 20
                        ),
                    );
                }
            }
        }
    }
    // Devices.
    let vdevs: Vec<&str> = eal_value(&args, &["--vdev"]);
    let no_pci = args.iter().any(|a| a == "--no-pci");
    for (i, p) in cfg.ports.iter().enumerate() {
        let key = [Key("port"), Index(i), Key("device")];
        let dev = p.device.as_str();
        if let Some(spec) = vdevs.iter().find(|v| v.split(',').next() == Some(dev)) {
            check_vdev(dev, spec, &m.sys, &key, errs);
        } else if let Some(addr) = pci_address(dev) {
            if no_pci {
                errs.add(
                    &key,
                    format!("{dev:?} is a PCI device but the EAL arguments have --no-pci, so DPDK will not probe it"),
                );
                continue;
            }
            let dir = m.sys.join("bus/pci/devices").join(&addr);
            if !m.sys.join("bus/pci/devices").is_dir() {
                unchecked.push(format!("port[{i}].device {dev:?} (no {}/bus/pci)", m.sys.display()));
            } else if !dir.exists() {
                errs.add(
                    &key,
                    format!("no PCI device {addr} on this machine (`lspci -D` lists them)"),
                );
            } else {
                let driver = std::fs::read_link(dir.join("driver"))
                    .ok()
                    .and_then(|l| l.file_name().map(|f| f.to_string_lossy().into_owned()));
                match driver {
                    Some(d) if DPDK_DRIVERS.contains(&d.as_str()) => {}
                    Some(d) => errs.add(
                        &key,
                        format!(
                            "PCI device {addr} is bound to the kernel driver {d}, which DPDK cannot use: \
                             `dpdk-devbind.py --bind=vfio-pci {addr}`"
                        ),
                    ),
                    None => errs.add(
                        &key,
                        format!("PCI device {addr} is bound to no driver: `dpdk-devbind.py --bind=vfio-pci {addr}`"),
                    ),
                }
            }
        } else if ["net_", "eth_"].iter().any(|pre| dev.starts_with(pre)) {
            errs.add(
                &key,
                format!(
                    "{dev:?} is a virtual device, but no --vdev={dev},... in [dpdk] eal_args (or after --) creates it"
                ),
            );
        } else {
            unchecked.push(format!(
                "port[{i}].device {dev:?} (neither a --vdev nor a PCI address: the EAL resolves it)"
            ));
        }
    }
    unchecked.push(
        "whether each driver accepts the queue counts, descriptors, MTU and offloads (only the started EAL can; \
         a refusal is exit 3)"
            .to_string(),
    );
    check_numa(cfg, m, errs, &mut unchecked);
    unchecked
}

/// RX lcores that poll a queue of a PCI port on another NUMA socket: a warning on the lcore's
/// `[lcores] rx` entry. The lcore's socket is its CPUs' node (`[lcores] cpus`), the port's its
/// `numa_node` in sysfs; a vdev's socket only the EAL knows (-1 for all of 22.11's), and the
/// daemon checks again with the EAL's view at start.
fn check_numa(cfg: &Config, m: &Machine, errs: &mut Errs, unchecked: &mut Vec<String>) {
    let nodes = crate::numa::cpu_nodes(&m.sys);
    if nodes.is_empty() {
        unchecked.push(format!(
            "NUMA placement of the RX lcores (no {}/devices/system/node)",
            m.sys.display()
        ));
        return;
    }
    let layout = crate::numa::Layout {
        port_sockets: cfg
            .ports
            .iter()
            .map(|p| pci_address(&p.device).and_then(|a| crate::numa::pci_node(&m.sys, &a)))
            .collect(),
        rx: cfg
            .lcores
            .rx
            .iter()
            .zip(cfg.rx_assignment())
            .map(|(&lcore, queues)| crate::numa::RxLcore {
                lcore,
                socket: lcore_node(&cfg.lcores, lcore, &nodes),
                queues,
            })
            .collect(),
        main_socket: 0,
    };
    for r in crate::numa::plan(&layout).remote {
        errs.warn(
            &[Key("lcores"), Key("rx"), Index(r.rx_index)],
            r.message(&cfg.ports[r.port].device),
        );
    }
}

/// The node of every CPU lcore `l` runs on, if they share one.
fn lcore_node(lc: &lcores::LcoreConfig, l: u32, nodes: &std::collections::BTreeMap<u32, u32>) -> Option<u32> {
    let cpus = lc.placement.get(&l)?;
    let first = *nodes.get(cpus.first()?)?;
    cpus.iter().all(|c| nodes.get(c) == Some(&first)).then_some(first)
}

/// A vdev's own arguments that name things on this machine: a kernel interface
/// (`iface=` of net_af_packet and net_af_xdp, `rx_iface=`/`tx_iface=`/`iface=` of net_pcap) must exist; a
/// capture to read (`rx_pcap=`) must be a readable file. (net_tap's `iface=` is created.)
fn check_vdev(dev: &str, spec: &str, sys: &Path, key: &[crate::locate::Seg], errs: &mut Errs) {
    let tap = dev.starts_with("net_tap") || dev.starts_with("net_tun");
    for opt in spec.split(',').skip(1) {
        let Some((k, v)) = opt.split_once('=') else { continue };
        let missing_iface = matches!(k, "iface" | "rx_iface" | "tx_iface" | "rx_iface_in")
            && !tap
            && sys.join("class/net").is_dir()
            && !sys.join("class/net").join(v).exists();
        if missing_iface {
            errs.add(
                key,
                format!("{dev}: kernel interface {v:?} ({k}=) does not exist (`ip link` lists them)"),
            );
        }
        if k == "rx_pcap" && std::fs::File::open(v).is_err() {
            errs.add(key, format!("{dev}: rx_pcap={v}: cannot open the capture to replay"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_addresses() {
        assert_eq!(pci_address("0000:3b:00.0").as_deref(), Some("0000:3b:00.0"));
        assert_eq!(pci_address("3B:00.1").as_deref(), Some("0000:3b:00.1"));
        assert_eq!(pci_address("net_pcap0"), None);
        assert_eq!(pci_address("0000:3b:00"), None);
    }

    #[test]
    fn eal_values_in_every_spelling() {
        let a: Vec<String> = ["-m", "512", "--vdev=net_null0", "--vdev", "net_pcap0,rx_pcap=x", "-m64"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(eal_value(&a, &["-m"]), vec!["512", "64"]);
        assert_eq!(eal_value(&a, &["--vdev"]), vec!["net_null0", "net_pcap0,rx_pcap=x"]);
    }

    #[test]
    fn hugepages_from_sysfs() {
        let d = std::env::temp_dir().join(format!("fp-huge-{}", std::process::id()));
        let h = d.join("kernel/mm/hugepages/hugepages-2048kB");
        std::fs::create_dir_all(&h).unwrap();
        std::fs::write(h.join("free_hugepages"), "3\n").unwrap();
        std::fs::write(d.join("mounts"), "nodev /dev/hugepages hugetlbfs rw 0 0\n").unwrap();
        assert_eq!(
            read_hugepages(&d, &d.join("mounts")),
            Some(Hugepages {
                free_bytes: 3 << 21,
                mounted: true
            })
        );
        std::fs::write(d.join("mounts"), "proc /proc proc rw 0 0\n").unwrap();
        assert!(!read_hugepages(&d, &d.join("mounts")).unwrap().mounted);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
