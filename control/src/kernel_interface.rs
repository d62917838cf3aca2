//! The kernel interfaces of the exception path (`[[port]] kernel_interface`, see
//! `fastpath::pipeline::kernel`): created at start-up, given the port's MAC, addresses and MTU,
//! and brought up; closing them removes the interface.
//!
//! With `[kernel] offloads = true` the device is fastpathd's own multi-queue TAP with
//! virtio-net headers (`fastpath::dpdk::tap`): a worker writes a burst's in-order TCP segments
//! as one 64 KB frame and cuts the kernel's 64 KB frames into segments, so a TCP transfer
//! through the kernel pays its per-packet cost once per 64 KB. It is not a DPDK port: the
//! tables know it by an id past every port's. Otherwise (the default) it is a DPDK port:
//! virtio-user over vhost-net where `/dev/vhost-net` exists (the kernel moves the packets, no
//! system call per packet on our side), else `net_tap` (a `writev`/`read` per packet on the
//! worker). Each has one queue pair per worker. Addresses are set with
//! iproute2 (`ip address replace ... nodad`): the one program every Debian system has for it,
//! called a few times at start-up and on a reload that changes addresses, never on the data
//! path.

use crate::config::{Config, PortConfig};
use fastpath::dpdk::tap::TAP_ID_BASE;
use fastpath::dpdk::{self, KernelRx, Mempool, Port, PortConf, TapDevice, WorkerTx};
use fastpath::pipeline::kernel::KernelCounters;
use fastpath::pipeline::kernel::KernelListeners;
use std::process::Command;
use std::sync::Arc;

/// How a kernel interface is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// `net_virtio_user` on `/dev/vhost-net`.
    VhostNet,
    /// `net_tap`.
    Tap,
}

impl Backend {
    /// virtio-user where the kernel has vhost-net, else tap.
    pub fn detect() -> Backend {
        if std::path::Path::new("/dev/vhost-net").exists() {
            Backend::VhostNet
        } else {
            Backend::Tap
        }
    }

    /// The DPDK device name and arguments for interface `name` of port index `i`.
    pub fn devargs(
        self,
        i: usize,
        name: &str,
        mac: fastpath::wire::EthernetAddress,
        queues: usize,
    ) -> (String, String) {
        match self {
            Backend::VhostNet => {
                let dev = format!("net_virtio_user_kernel{i}");
                let args = format!("{dev},path=/dev/vhost-net,iface={name},mac={mac},queues={queues},queue_size=1024");
                (dev, args)
            }
            Backend::Tap => {
                let dev = format!("net_tap_kernel{i}");
                let args = format!("{dev},iface={name},mac={mac}");
                (dev, args)
            }
        }
    }
}

/// A kernel interface: a DPDK port (`net_tap`, virtio-user) or fastpathd's own TAP device.
pub enum KernelInterface {
    /// `[kernel] offloads = false`.
    Port(Port),
    /// `[kernel] offloads = true`.
    Tap(TapDevice),
}

impl KernelInterface {
    /// The id the tables know it by (a DPDK port id, or past them for a TAP device).
    pub fn id(&self) -> u16 {
        match self {
            KernelInterface::Port(p) => p.id(),
            KernelInterface::Tap(t) => t.id(),
        }
    }

    /// Worker `w`'s queue pair (TX: into the kernel, RX: from it), counting what the offloads
    /// did in `counters` at port index `index`.
    pub fn queue_pair(
        &self,
        w: usize,
        pool: &Arc<Mempool>,
        counters: Option<(&Arc<KernelCounters>, usize)>,
    ) -> Option<(WorkerTx, KernelRx)> {
        match self {
            KernelInterface::Port(p) => Some((
                WorkerTx::Port(p.tx_queue(w as u16)?),
                KernelRx::Port(p.rx_queue(w as u16)?),
            )),
            KernelInterface::Tap(t) => {
                let (mut tx, mut rx) = match t.queue(w as u16, pool.clone()) {
                    Ok(q) => q,
                    Err(e) => {
                        tracing::error!("fastpathd: kernel interface {}: queue {w}: {e}", t.name());
                        return None;
                    }
                };
                if let Some((c, i)) = counters {
                    tx = tx.with_counters(c.clone(), w, i);
                    rx = rx.with_counters(c.clone(), w, i);
                }
                Some((WorkerTx::Tap(tx), KernelRx::Tap(rx)))
            }
        }
    }

    /// Stops and closes a DPDK port (removing its interface); a TAP device goes when its last
    /// queue file closes.
    pub fn close(&mut self) -> Result<(), String> {
        match self {
            KernelInterface::Port(p) => p.close().map_err(|e| e.to_string()),
            KernelInterface::Tap(_) => Ok(()),
        }
    }
}

/// Creates, starts and addresses the kernel interface of every port that has one (`ports` in
/// config order); `None` for the others.
pub fn open(cfg: &Config, ports: &[Port], pool: &Arc<Mempool>) -> Result<Vec<Option<KernelInterface>>, String> {
    let queues = cfg.lcores.workers.len().max(1);
    let backend = Backend::detect();
    let mut out = Vec::new();
    for (i, (p, port)) in cfg.ports.iter().zip(ports).enumerate() {
        let Some(name) = &p.kernel_interface else {
            out.push(None);
            continue;
        };
        let mac = p.mac.unwrap_or(port.mac());
        let at = |e: String| format!("port[{i}].kernel_interface ({name}): {e}");
        if cfg.kernel.offloads {
            let id = TAP_ID_BASE + i as u16;
            let t = TapDevice::open(name, id, queues).map_err(|e| at(format!("cannot make the TAP device: {e}")))?;
            let mtu = p.mtu.unwrap_or(1500).to_string();
            ip(&["link", "set", "dev", name, "address", &mac.to_string(), "mtu", &mtu]).map_err(at)?;
            set_up(name, p).map_err(at)?;
            tracing::info!(
                "fastpathd: kernel interface {name} for port {} (TAP with offloads, id {id}, mac {mac}, {queues} queue pairs, addresses {})",
                p.device,
                addresses(p).join(" ")
            );
            out.push(Some(KernelInterface::Tap(t)));
            continue;
        }
        let (dev, args) = backend.devargs(i, name, mac, queues);
        dpdk::port::probe(&args).map_err(|e| at(e.to_string()))?;
        let conf = PortConf {
            rx_queues: queues as u16,
            tx_queues: queues as u16,
            rx_desc: cfg.dpdk.rx_desc,
            tx_desc: cfg.dpdk.tx_desc,
            mtu: p.mtu,
            promiscuous: false,
            rss_key: cfg.rss.key,
            rss: false,
        };
        let k = Port::open(&dev, &conf, pool.clone()).map_err(|e| at(e.to_string()))?;
        set_up(name, p).map_err(at)?;
        tracing::info!(
            "fastpathd: kernel interface {name} for port {} ({} {dev}, id {}, mac {mac}, {queues} queue pairs, addresses {})",
            p.device,
            if backend == Backend::Tap { "net_tap" } else { "virtio-user on vhost-net" },
            k.id(),
            addresses(p).join(" ")
        );
        out.push(Some(KernelInterface::Port(k)));
    }
    Ok(out)
}

/// The port's addresses as the kernel gets them (`a/len`).
fn addresses(p: &PortConfig) -> Vec<String> {
    let v4 = p.ipv4.iter().zip(&p.ipv4_prefix).map(|(a, l)| format!("{a}/{l}"));
    let v6 = p.ipv6.iter().zip(&p.ipv6_prefix).map(|(a, l)| format!("{a}/{l}"));
    v4.chain(v6).collect()
}

/// Runs `ip ARGS`.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip (iproute2): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Gives interface `name` the port's addresses (without duplicate address detection: the
/// fast path already answers for them) and brings it up.
fn set_up(name: &str, p: &PortConfig) -> Result<(), String> {
    // The kernel learns its neighbours from the replies to its own requests; it must not
    // announce itself or run DAD for addresses the fast path answers for.
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{name}/accept_dad"), "0");
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{name}/accept_ra"), "0");
    // Nor take a route from a redirect (`unhandled` punts ICMP the fast path does not answer):
    // a forged one would move the kernel's traffic for a destination (RFC 1122 §3.2.2.2 lets a
    // host ignore them; Linux accepts them on a host by default).
    let _ = std::fs::write(format!("/proc/sys/net/ipv4/conf/{name}/accept_redirects"), "0");
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{name}/accept_redirects"), "0");
    for a in addresses(p) {
        let mut args = vec!["address", "replace", a.as_str(), "dev", name];
        if a.contains(':') {
            args.push("nodad");
        }
        ip(&args)?;
    }
    ip(&["link", "set", "dev", name, "up"])
}

/// After a reload: the kernel interfaces get the new config's addresses (added and removed by
/// difference, so the kernel's connections on addresses that stay are not disturbed). Errors are
/// logged: the data path runs the new config either way.
pub fn sync_addresses(old: &Config, new: &Config) {
    for (o, n) in old.ports.iter().zip(&new.ports) {
        let Some(name) = &n.kernel_interface else { continue };
        let (before, after) = (addresses(o), addresses(n));
        for a in before.iter().filter(|a| !after.contains(a)) {
            if let Err(e) = ip(&["address", "del", a, "dev", name]) {
                tracing::warn!("fastpathd: kernel interface {name}: {e}");
            }
        }
        if before != after {
            if let Err(e) = set_up(name, n) {
                tracing::warn!("fastpathd: kernel interface {name}: {e}");
            } else {
                tracing::info!("fastpathd: kernel interface {name}: addresses now {}", after.join(" "));
            }
        }
    }
}

/// How often the control thread reads the kernel's listening TCP sockets: a service that starts
/// listening sees its first SYNs answered by fastpathd's reset for at most this long (clients
/// retry a refused SYN only after a reset, so start services before announcing them).
pub const LISTENER_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// Keeps [`KernelListeners`] current: the TCP ports the kernel listens on (`sock_diag`, the
/// interface `ss -tl` uses), bound to a wildcard or a non-loopback address, read every
/// [`LISTENER_INTERVAL`] on the control thread.
pub struct ListenerWatch {
    socket: netlink_sys::Socket,
    listeners: Arc<KernelListeners>,
    next: std::time::Instant,
    seq: u32,
}

/// `SOCK_DIAG_BY_FAMILY` (linux/sock_diag.h).
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const TCP_LISTEN: u32 = 10;

impl ListenerWatch {
    /// A watch writing into `listeners`; reads the kernel's set once before it returns.
    pub fn new(listeners: Arc<KernelListeners>) -> Result<Self, String> {
        let mut socket = netlink_sys::Socket::new(netlink_sys::protocols::NETLINK_SOCK_DIAG)
            .map_err(|e| format!("sock_diag socket: {e}"))?;
        socket.bind_auto().map_err(|e| format!("sock_diag bind: {e}"))?;
        let mut w = ListenerWatch {
            socket,
            listeners,
            next: std::time::Instant::now(),
            seq: 0,
        };
        w.refresh()?;
        Ok(w)
    }

    /// Reads the set again if [`LISTENER_INTERVAL`] has passed (errors are logged, the last
    /// set stays).
    pub fn tick(&mut self) {
        if std::time::Instant::now() < self.next {
            return;
        }
        if let Err(e) = self.refresh() {
            tracing::warn!("fastpathd: kernel path: cannot read the kernel's listening sockets: {e}");
        }
    }

    /// Reads the listening TCP sockets of both families and publishes their ports.
    pub fn refresh(&mut self) -> Result<(), String> {
        self.next = std::time::Instant::now() + LISTENER_INTERVAL;
        let mut ports = Vec::new();
        for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
            self.seq = self.seq.wrapping_add(1);
            self.dump(family, &mut ports)?;
        }
        if self.listeners.set(ports.iter().copied()) {
            tracing::info!("fastpathd: kernel path: the kernel listens on TCP {ports:?}");
        }
        Ok(())
    }

    fn dump(&mut self, family: u8, ports: &mut Vec<u16>) -> Result<(), String> {
        let kernel = netlink_sys::SocketAddr::new(0, 0);
        self.socket
            .send_to(&listen_request(family, self.seq), &kernel, 0)
            .map_err(|e| format!("sock_diag request: {e}"))?;
        loop {
            let (buf, _) = self
                .socket
                .recv_from_full()
                .map_err(|e| format!("sock_diag answer: {e}"))?;
            match parse_listeners(&buf, ports) {
                Dump::More => continue,
                Dump::Done => return Ok(()),
                Dump::Error(e) => return Err(format!("sock_diag: error {e}")),
            }
        }
    }
}

/// A dump request for family `family`'s TCP sockets in LISTEN (netlink header, then
/// `inet_diag_req_v2`, sock_diag(7)).
fn listen_request(family: u8, seq: u32) -> Vec<u8> {
    let mut m = vec![0u8; 16 + 56];
    m[0..4].copy_from_slice(&(16u32 + 56).to_ne_bytes());
    m[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    m[8..12].copy_from_slice(&seq.to_ne_bytes());
    m[16] = family;
    m[17] = libc::IPPROTO_TCP as u8;
    m[20..24].copy_from_slice(&(1u32 << TCP_LISTEN).to_ne_bytes());
    m
}

/// What one answer of a dump held.
#[derive(Debug, PartialEq)]
enum Dump {
    More,
    Done,
    Error(i32),
}

/// Adds the local ports of the `inet_diag_msg`s in `buf` bound to a wildcard or non-loopback
/// address to `ports`.
fn parse_listeners(buf: &[u8], ports: &mut Vec<u16>) -> Dump {
    let mut at = 0;
    while at + 16 <= buf.len() {
        let len = u32::from_ne_bytes(buf[at..at + 4].try_into().unwrap_or_default()) as usize;
        let ty = u16::from_ne_bytes(buf[at + 4..at + 6].try_into().unwrap_or_default());
        if len < 16 || at + len > buf.len() {
            return Dump::Error(-libc::EBADMSG);
        }
        let body = &buf[at + 16..at + len];
        match ty {
            NLMSG_DONE => return Dump::Done,
            NLMSG_ERROR => {
                let e = body
                    .get(..4)
                    .map_or(0, |b| i32::from_ne_bytes(b.try_into().unwrap_or_default()));
                return if e == 0 { Dump::Done } else { Dump::Error(e) };
            }
            SOCK_DIAG_BY_FAMILY if body.len() >= 24 => {
                let family = body[0];
                let sport = u16::from_be_bytes([body[4], body[5]]);
                let loopback = match family as i32 {
                    libc::AF_INET => body[8] == 127,
                    _ => body[8..24] == std::net::Ipv6Addr::LOCALHOST.octets(),
                };
                if !loopback && !ports.contains(&sport) {
                    ports.push(sport);
                }
            }
            _ => {}
        }
        at += (len + 3) & !3;
    }
    Dump::More
}

#[cfg(test)]
mod listener_tests {
    use super::*;

    /// One `inet_diag_msg` answer for a socket of `family` on `addr` (16 bytes), port `port`.
    fn answer(family: u8, addr: [u8; 16], port: u16) -> Vec<u8> {
        let mut m = vec![0u8; 16 + 72];
        m[0..4].copy_from_slice(&(16u32 + 72).to_ne_bytes());
        m[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        m[16] = family;
        m[17] = TCP_LISTEN as u8;
        m[20..22].copy_from_slice(&port.to_be_bytes());
        m[24..40].copy_from_slice(&addr);
        m
    }

    #[test]
    fn answers_give_the_ports_of_wildcard_and_outside_listeners_not_loopback_ones() {
        let mut buf = answer(libc::AF_INET as u8, [0; 16], 22);
        buf.extend(answer(
            libc::AF_INET as u8,
            [127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            631,
        ));
        buf.extend(answer(
            libc::AF_INET as u8,
            [192, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            53,
        ));
        buf.extend(answer(
            libc::AF_INET6 as u8,
            std::net::Ipv6Addr::LOCALHOST.octets(),
            8080,
        ));
        buf.extend(answer(libc::AF_INET6 as u8, [0; 16], 22));
        let mut ports = vec![];
        assert_eq!(parse_listeners(&buf, &mut ports), Dump::More);
        assert_eq!(ports, [22, 53]);
        let mut done = vec![0u8; 20];
        done[0..4].copy_from_slice(&20u32.to_ne_bytes());
        done[4..6].copy_from_slice(&NLMSG_DONE.to_ne_bytes());
        assert_eq!(parse_listeners(&done, &mut ports), Dump::Done);
        assert_eq!(
            parse_listeners(&[1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], &mut ports),
            Dump::Error(-libc::EBADMSG)
        );
    }

    #[test]
    fn the_kernel_answers_with_what_listens_here() {
        // A real listener in this process's namespace, found by the real dump.
        let l = std::net::TcpListener::bind("0.0.0.0:0").expect("bind");
        let port = l.local_addr().unwrap().port();
        let set = Arc::new(KernelListeners::default());
        let _w = ListenerWatch::new(set.clone()).expect("sock_diag");
        assert!(set.listening(port), "port {port} not seen: {:?}", set.ports());
        drop(l);
        let mut w = ListenerWatch::new(set.clone()).expect("sock_diag");
        w.refresh().unwrap();
        assert!(!set.listening(port), "port {port} still seen after close");
    }
}
