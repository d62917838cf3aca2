//! NUMA placement, as a pure function of where the ports and lcores are: which sockets get a
//! packet pool, which pool each port's RX queues fill from, and which RX lcores poll a queue of
//! a port on another socket.
//!
//! DPDK's guidance (its programmer's guide, "Mempool Library" and the NUMA notes of the ethdev
//! queue set-up): memory a NIC writes by DMA and an lcore reads lives on the NIC's socket, and a
//! ring lives on the socket of the lcore that dequeues from it (the consumer polls it, the
//! producer only writes to it once per burst). So: one pool per socket that has a port, each
//! port's RX queues on its own socket's pool, and each worker's socket rings on the worker's
//! socket. A port whose socket is unknown (-1: every vdev, a NIC on a machine without NUMA
//! information) takes the pool of the EAL's main lcore's socket, where the EAL puts its own
//! memory first. An RX lcore on another socket than a port it polls still works, every packet
//! crossing the interconnect twice (the NIC's write, the lcore's read): a warning, not an error.

use std::collections::BTreeSet;

/// Where things are: the inputs of [`plan`].
#[derive(Clone, Debug, Default)]
pub struct Layout {
    /// By port, in config order: its NUMA socket, `None` when unknown.
    pub port_sockets: Vec<Option<u32>>,
    /// By RX lcore, in config order: its id, its socket (`None` when unknown) and the
    /// (port index, queue) pairs it polls.
    pub rx: Vec<RxLcore>,
    /// The socket of the EAL's main lcore: the pool of a port whose socket is unknown.
    pub main_socket: u32,
}

/// One RX lcore of a [`Layout`].
#[derive(Clone, Debug, Default)]
pub struct RxLcore {
    /// The lcore id.
    pub lcore: u32,
    /// Its socket, `None` when unknown.
    pub socket: Option<u32>,
    /// The (port index, RX queue) pairs it polls.
    pub queues: Vec<(usize, u16)>,
}

/// What [`plan`] decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The sockets that get a packet pool, ascending; never empty.
    pub pool_sockets: Vec<u32>,
    /// By port: the socket of the pool its RX queues take mbufs from.
    pub port_pool: Vec<u32>,
    /// RX lcores that poll a queue of a port on another socket.
    pub remote: Vec<Remote>,
}

/// An RX lcore polling a queue of a port on another socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Remote {
    /// Index of the RX lcore in `[lcores] rx`.
    pub rx_index: usize,
    /// The lcore id.
    pub lcore: u32,
    /// The lcore's socket.
    pub lcore_socket: u32,
    /// The port's index in the config.
    pub port: usize,
    /// The RX queue.
    pub queue: u16,
    /// The port's socket.
    pub port_socket: u32,
}

impl Remote {
    /// The warning, naming the port as `device`.
    pub fn message(&self, device: &str) -> String {
        format!(
            "RX lcore {} (NUMA socket {}) polls queue {} of port[{}] {device} (socket {}): every packet \
             crosses between sockets; give that queue an lcore on a CPU of socket {} ([lcores] rx, cpus)",
            self.lcore, self.lcore_socket, self.queue, self.port, self.port_socket, self.port_socket
        )
    }
}

/// Pools, each port's pool and the cross-socket RX queues of `l`.
pub fn plan(l: &Layout) -> Plan {
    let port_pool: Vec<u32> = l.port_sockets.iter().map(|s| s.unwrap_or(l.main_socket)).collect();
    let mut sockets: BTreeSet<u32> = port_pool.iter().copied().collect();
    if sockets.is_empty() {
        sockets.insert(l.main_socket);
    }
    let mut remote = Vec::new();
    for (rx_index, r) in l.rx.iter().enumerate() {
        let Some(lcore_socket) = r.socket else { continue };
        for &(port, queue) in &r.queues {
            let Some(Some(port_socket)) = l.port_sockets.get(port).copied() else {
                continue;
            };
            if port_socket != lcore_socket {
                remote.push(Remote {
                    rx_index,
                    lcore: r.lcore,
                    lcore_socket,
                    port,
                    queue,
                    port_socket,
                });
            }
        }
    }
    Plan {
        pool_sockets: sockets.into_iter().collect(),
        port_pool,
        remote,
    }
}

/// The NUMA node of each CPU from `<sys>/devices/system/node/node*/cpulist` (empty when the
/// kernel gives no NUMA information).
pub fn cpu_nodes(sys: &std::path::Path) -> std::collections::BTreeMap<u32, u32> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(dir) = std::fs::read_dir(sys.join("devices/system/node")) else {
        return out;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(node) = name.strip_prefix("node").and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let list = std::fs::read_to_string(e.path().join("cpulist")).unwrap_or_default();
        for cpu in parse_cpu_list(list.trim()) {
            out.insert(cpu, node);
        }
    }
    out
}

/// `0-3,8,10-11` as CPU numbers (what sysfs writes); what does not parse is skipped.
fn parse_cpu_list(s: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    out.extend(a..=b.min(a.saturating_add(4096)));
                }
            }
            None => out.extend(part.parse::<u32>().ok()),
        }
    }
    out
}

/// Whether `s` is a PCI address (`0000:3b:00.0` or `3b:00.0`); the full form.
pub fn pci_address(s: &str) -> Option<String> {
    let full = if s.matches(':').count() == 1 {
        format!("0000:{s}")
    } else {
        s.to_string()
    };
    let b = full.as_bytes();
    let ok = b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && full
            .chars()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit());
    ok.then_some(full.to_ascii_lowercase())
}

/// The NUMA node of PCI device `addr` (full form) from `<sys>/bus/pci/devices/ADDR/numa_node`;
/// `None` when absent or -1 (no NUMA information).
pub fn pci_node(sys: &std::path::Path, addr: &str) -> Option<u32> {
    let text = std::fs::read_to_string(sys.join("bus/pci/devices").join(addr).join("numa_node")).ok()?;
    text.trim().parse::<i64>().ok().and_then(|n| u32::try_from(n).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rx(lcore: u32, socket: Option<u32>, queues: &[(usize, u16)]) -> RxLcore {
        RxLcore {
            lcore,
            socket,
            queues: queues.to_vec(),
        }
    }

    #[test]
    fn two_sockets_each_with_a_port_and_its_own_lcores() {
        // Port 0 on socket 0 polled by lcores 0 (socket 0), port 1 on socket 1 by lcore 8 (socket 1).
        let p = plan(&Layout {
            port_sockets: vec![Some(0), Some(1)],
            rx: vec![rx(0, Some(0), &[(0, 0), (0, 1)]), rx(8, Some(1), &[(1, 0), (1, 1)])],
            main_socket: 0,
        });
        assert_eq!(p.pool_sockets, vec![0, 1]);
        assert_eq!(p.port_pool, vec![0, 1]);
        assert!(p.remote.is_empty(), "{:?}", p.remote);
    }

    #[test]
    fn an_lcore_polling_a_port_on_the_other_socket_is_named() {
        // Round robin put queue 1 of port 0 (socket 0) on lcore 8 (socket 1).
        let p = plan(&Layout {
            port_sockets: vec![Some(0), Some(1)],
            rx: vec![rx(0, Some(0), &[(0, 0), (1, 0)]), rx(8, Some(1), &[(0, 1), (1, 1)])],
            main_socket: 0,
        });
        assert_eq!(p.pool_sockets, vec![0, 1]);
        assert_eq!(
            p.remote,
            vec![
                Remote {
                    rx_index: 0,
                    lcore: 0,
                    lcore_socket: 0,
                    port: 1,
                    queue: 0,
                    port_socket: 1
                },
                Remote {
                    rx_index: 1,
                    lcore: 8,
                    lcore_socket: 1,
                    port: 0,
                    queue: 1,
                    port_socket: 0
                },
            ]
        );
        let m = p.remote[1].message("0000:3b:00.0");
        assert!(
            m.contains("RX lcore 8 (NUMA socket 1) polls queue 1 of port[0] 0000:3b:00.0 (socket 0)"),
            "{m}"
        );
    }

    #[test]
    fn ports_of_unknown_socket_take_the_main_lcores_pool_and_warn_of_nothing() {
        // Two vdevs (-1) and a NIC on socket 1, main lcore on socket 1: one pool, on socket 1.
        let p = plan(&Layout {
            port_sockets: vec![None, None, Some(1)],
            rx: vec![rx(0, Some(0), &[(0, 0), (1, 0)]), rx(9, Some(1), &[(2, 0)])],
            main_socket: 1,
        });
        assert_eq!(p.pool_sockets, vec![1]);
        assert_eq!(p.port_pool, vec![1, 1, 1]);
        assert!(p.remote.is_empty());
        // With the main lcore on socket 0, the vdevs' pool is socket 0's, the NIC's socket 1's.
        let p = plan(&Layout {
            port_sockets: vec![None, Some(1)],
            rx: vec![rx(0, None, &[(0, 0), (1, 0)])],
            main_socket: 0,
        });
        assert_eq!(p.pool_sockets, vec![0, 1]);
        assert_eq!(p.port_pool, vec![0, 1]);
        // An lcore of unknown socket is not accused either.
        assert!(p.remote.is_empty());
    }

    #[test]
    fn one_socket_is_one_pool_as_before() {
        let p = plan(&Layout {
            port_sockets: vec![Some(0), None],
            rx: vec![rx(0, Some(0), &[(0, 0), (1, 0)]), rx(1, Some(0), &[(0, 1)])],
            main_socket: 0,
        });
        assert_eq!(
            p,
            Plan {
                pool_sockets: vec![0],
                port_pool: vec![0, 0],
                remote: vec![]
            }
        );
        // No port at all still has the main lcore's pool.
        assert_eq!(plan(&Layout::default()).pool_sockets, vec![0]);
    }

    #[test]
    fn nodes_from_a_fake_sysfs() {
        let d = std::env::temp_dir().join(format!("fp-numa-{}", std::process::id()));
        for (n, list) in [(0, "0-3,8"), (1, "4-7,9-10")] {
            let nd = d.join(format!("devices/system/node/node{n}"));
            std::fs::create_dir_all(&nd).unwrap();
            std::fs::write(nd.join("cpulist"), format!("{list}\n")).unwrap();
        }
        std::fs::create_dir_all(d.join("devices/system/node/possible_not_a_node")).unwrap();
        let pci = d.join("bus/pci/devices/0000:3b:00.0");
        std::fs::create_dir_all(&pci).unwrap();
        std::fs::write(pci.join("numa_node"), "1\n").unwrap();
        let vf = d.join("bus/pci/devices/0000:3c:00.0");
        std::fs::create_dir_all(&vf).unwrap();
        std::fs::write(vf.join("numa_node"), "-1\n").unwrap();
        let nodes = cpu_nodes(&d);
        assert_eq!(nodes.get(&8), Some(&0));
        assert_eq!(nodes.get(&5), Some(&1));
        assert_eq!(nodes.get(&10), Some(&1));
        assert_eq!(nodes.len(), 11);
        assert_eq!(pci_node(&d, "0000:3b:00.0"), Some(1));
        assert_eq!(pci_node(&d, "0000:3c:00.0"), None);
        assert_eq!(pci_node(&d, "0000:3d:00.0"), None);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
