//! Ethdev ports and the per-lcore queue handles.

use super::{Error, Mbuf, Mempool, Result};
use crate::wire::toeplitz::{RssKey, KEY_LEN, LONG_KEY_LEN};
use crate::wire::EthernetAddress;
use std::ffi::{CStr, CString};
use std::os::fd::RawFd;
use std::sync::Arc;

/// The size of net_af_xdp's fill and completion rings (DPDK 22.11, not configurable).
const AF_XDP_RING: u32 = 2048;

/// How to set a port up.
#[derive(Clone, Debug)]
pub struct PortConf {
    /// RX queues.
    pub rx_queues: u16,
    /// TX queues.
    pub tx_queues: u16,
    /// RX descriptors per queue.
    pub rx_desc: u16,
    /// TX descriptors per queue.
    pub tx_desc: u16,
    /// MTU to set, if any.
    pub mtu: Option<u16>,
    /// Put the port in promiscuous mode (the pipeline filters by MAC itself).
    pub promiscuous: bool,
    /// The Toeplitz key for RSS (the software hash uses its first 40 bytes).
    pub rss_key: RssKey,
    /// Spread received packets over the RX queues by RSS where the driver can (off for a kernel
    /// interface: the kernel picks the queue of a tap itself).
    pub rss: bool,
}

/// A configured and started port. Stop and close it explicitly (capture files are complete only
/// after close); dropping an open port closes it too.
pub struct Port {
    id: u16,
    name: String,
    driver: String,
    mac: EthernetAddress,
    rss: bool,
    own_key: bool,
    checksums: RxChecksums,
    kernel_interface: Option<String>,
    rx_queues: u16,
    tx_queues: u16,
    /// By RX queue: the fd that reports input on it ([`RxQueue::wake_fd`]).
    wake_fds: Vec<Option<RawFd>>,
    started: bool,
    closed: bool,
    _pool: Arc<Mempool>,
}

/// Which checksums the NIC checks on receive (RX offloads the port turned on because the driver
/// offers them); the verdicts reach the pipeline as [`crate::buf::NicChecksum`]s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxChecksums {
    /// IPv4 header checksums (`RTE_ETH_RX_OFFLOAD_IPV4_CKSUM`).
    pub ipv4: bool,
    /// UDP checksums (`RTE_ETH_RX_OFFLOAD_UDP_CKSUM`).
    pub udp: bool,
}

impl std::fmt::Display for RxChecksums {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match (self.ipv4, self.udp) {
            (false, false) => f.write_str("none"),
            (true, false) => f.write_str("ipv4"),
            (false, true) => f.write_str("udp"),
            (true, true) => f.write_str("ipv4,udp"),
        }
    }
}

/// Port-level counters from `rte_eth_stats_get`.
#[derive(Clone, Copy, Debug, Default)]
pub struct PortStats {
    /// Packets received.
    pub ipackets: u64,
    /// Packets sent.
    pub opackets: u64,
    /// Bytes received.
    pub ibytes: u64,
    /// Bytes sent.
    pub obytes: u64,
    /// Packets the NIC dropped because RX queues were full.
    pub imissed: u64,
    /// Erroneous received packets.
    pub ierrors: u64,
    /// Failed transmissions.
    pub oerrors: u64,
    /// RX mbuf allocation failures.
    pub rx_nombuf: u64,
}

fn check(what: impl FnOnce() -> String, rc: i32) -> Result<()> {
    if rc < 0 {
        Err(Error::new(what(), rc))
    } else {
        Ok(())
    }
}

/// The NUMA socket of the port DPDK probed under `device` (`rte_eth_dev_socket_id`); `Ok(None)`
/// when the driver does not know (-1: every vdev), an error when there is no such port.
pub fn socket_of(device: &str) -> Result<Option<u32>> {
    let cname = CString::new(device).map_err(|_| Error::new("port name", libc::EINVAL))?;
    let mut id: u16 = 0;
    // SAFETY: cname is a valid C string and id a valid out-pointer for the call.
    let rc = unsafe { dpdk_sys::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut id) };
    check(
        || format!("finding port {device:?} (is it in the EAL arguments, e.g. --vdev or -a?)"),
        rc,
    )?;
    // SAFETY: id is a probed port.
    let socket = unsafe { dpdk_sys::rte_eth_dev_socket_id(id) };
    Ok(u32::try_from(socket).ok())
}

/// Creates a device from DPDK device arguments after EAL start-up (hotplug), e.g.
/// `net_tap_kernel0,iface=fp0,mac=02:00:00:00:00:01`; then [`Port::open`] finds it by name.
pub fn probe(devargs: &str) -> Result<()> {
    let c = CString::new(devargs).map_err(|_| Error::new("device arguments", libc::EINVAL))?;
    // SAFETY: c is a valid NUL-terminated string for the duration of the call.
    let rc = unsafe { dpdk_sys::rte_dev_probe(c.as_ptr()) };
    check(|| format!("rte_dev_probe({devargs})"), rc)
}

impl Port {
    /// Finds the port DPDK probed under `device` (a vdev name such as `net_pcap0` or a PCI
    /// address), configures `conf.rx_queues`/`conf.tx_queues` queues with RSS over IP/UDP/TCP when
    /// the driver supports it, sets the queues up on `pool` and starts it.
    pub fn open(device: &str, conf: &PortConf, pool: Arc<Mempool>) -> Result<Port> {
        let cname = CString::new(device).map_err(|_| Error::new("port name", libc::EINVAL))?;
        let mut id: u16 = 0;
        // SAFETY: cname is a valid C string and id a valid out-pointer for the call.
        let rc = unsafe { dpdk_sys::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut id) };
        check(
            || format!("finding port {device:?} (is it in the EAL arguments, e.g. --vdev or -a?)"),
            rc,
        )?;

        let mut info = dpdk_sys::rte_eth_dev_info::default();
        // SAFETY: id is a probed port; info is a valid out-pointer.
        let rc = unsafe { dpdk_sys::rte_eth_dev_info_get(id, &mut info) };
        check(|| format!("rte_eth_dev_info_get({device})"), rc)?;
        let driver = if info.driver_name.is_null() {
            String::new()
        } else {
            // SAFETY: driver_name is a static NUL-terminated string owned by the driver.
            unsafe { CStr::from_ptr(info.driver_name) }
                .to_string_lossy()
                .into_owned()
        };
        if conf.rx_queues > info.max_rx_queues || conf.tx_queues > info.max_tx_queues {
            return Err(Error::new(
                format!(
                    "port {device} ({driver}) supports at most {} RX and {} TX queues, config asks {} and {}",
                    info.max_rx_queues, info.max_tx_queues, conf.rx_queues, conf.tx_queues
                ),
                libc::EINVAL,
            ));
        }

        let mut eth_conf = dpdk_sys::rte_eth_conf::default();
        // SAFETY: returns a constant.
        let wanted = unsafe { dpdk_sys::fp_rss_hf_ip_udp_tcp() };
        let rss_hf = wanted & info.flow_type_rss_offloads;
        let rss = conf.rss && rss_hf != 0 && conf.rx_queues > 1;
        // The key as the NIC takes it, `hash_key_size` bytes: a 52-byte key whole to a NIC that
        // takes 52, its first 40 to one that takes 40, and a 40-byte key padded with zeros to a
        // longer size. Only the first 40 bytes count for any input hashed here (at most 36
        // bytes: the IPv6 4-tuple), so the NIC's hash is the software hash either way.
        let mut key = [0u8; LONG_KEY_LEN];
        let given = conf.rss_key.as_bytes();
        key[..given.len()].copy_from_slice(given);
        let key_len = info.hash_key_size as usize;
        let own_key = rss && (KEY_LEN..=LONG_KEY_LEN).contains(&key_len);
        if rss {
            eth_conf.rxmode.mq_mode = dpdk_sys::rte_eth_rx_mq_mode_RTE_ETH_MQ_RX_RSS;
            eth_conf.rx_adv_conf.rss_conf.rss_hf = rss_hf;
            // Any other size: the driver's own key, and the NIC's hash still spreads flows.
            if own_key {
                eth_conf.rx_adv_conf.rss_conf.rss_key = key.as_mut_ptr();
                eth_conf.rx_adv_conf.rss_conf.rss_key_len = key_len as u8;
            }
        }
        // The NIC checks IPv4 header and UDP checksums where it can: the pipeline and the
        // workers then skip their own check (`NicChecksum`); a port without the offload leaves
        // the flags unknown.
        // SAFETY: both return a constant.
        let (ipv4_cksum, udp_cksum) = unsafe {
            (
                dpdk_sys::fp_rx_offload_ipv4_cksum(),
                dpdk_sys::fp_rx_offload_udp_cksum(),
            )
        };
        let checksums = RxChecksums {
            ipv4: info.rx_offload_capa & ipv4_cksum != 0,
            udp: info.rx_offload_capa & udp_cksum != 0,
        };
        if checksums.ipv4 {
            eth_conf.rxmode.offloads |= ipv4_cksum;
        }
        if checksums.udp {
            eth_conf.rxmode.offloads |= udp_cksum;
        }
        // net_tap's RX "interrupt" is its queue's own tap fd, readable while the kernel has
        // written a frame (an idle worker blocks on it); other drivers keep what they had.
        let rx_intr = driver == "net_tap";
        if rx_intr {
            eth_conf.intr_conf.set_rxq(1);
        }
        // SAFETY: id is valid; eth_conf is a fully initialised config that DPDK copies, and the
        // key it points to lives on this stack frame across the call.
        let rc = unsafe { dpdk_sys::rte_eth_dev_configure(id, conf.rx_queues, conf.tx_queues, &eth_conf) };
        check(
            || {
                format!(
                    "rte_eth_dev_configure({device}, {} rx, {} tx)",
                    conf.rx_queues, conf.tx_queues
                )
            },
            rc,
        )?;

        let (mut nb_rx, mut nb_tx) = (conf.rx_desc, conf.tx_desc);
        // SAFETY: id is valid and configured; the pointers are valid in/out parameters.
        let rc = unsafe { dpdk_sys::rte_eth_dev_adjust_nb_rx_tx_desc(id, &mut nb_rx, &mut nb_tx) };
        check(|| format!("rte_eth_dev_adjust_nb_rx_tx_desc({device})"), rc)?;
        // SAFETY: id is a valid port.
        let socket = unsafe { dpdk_sys::rte_eth_dev_socket_id(id) };
        let socket = if socket < 0 { dpdk_sys::SOCKET_ID_ANY } else { socket } as u32;
        for q in 0..conf.rx_queues {
            // SAFETY: port configured with rx_queues queues; NULL rx_conf means driver defaults;
            // the pool outlives the port (the Port holds an Arc to it).
            let rc = unsafe { dpdk_sys::rte_eth_rx_queue_setup(id, q, nb_rx, socket, std::ptr::null(), pool.as_ptr()) };
            check(|| format!("rte_eth_rx_queue_setup({device}, queue {q})"), rc)?;
        }
        for q in 0..conf.tx_queues {
            // SAFETY: port configured with tx_queues queues; NULL tx_conf means driver defaults.
            let rc = unsafe { dpdk_sys::rte_eth_tx_queue_setup(id, q, nb_tx, socket, std::ptr::null()) };
            check(|| format!("rte_eth_tx_queue_setup({device}, queue {q})"), rc)?;
        }
        if let Some(mtu) = conf.mtu {
            // SAFETY: id is a valid configured port.
            let rc = unsafe { dpdk_sys::rte_eth_dev_set_mtu(id, mtu) };
            check(|| format!("rte_eth_dev_set_mtu({device}, {mtu})"), rc)?;
        }
        let mut addr = dpdk_sys::rte_ether_addr::default();
        // SAFETY: id is valid; addr is a valid out-pointer.
        let rc = unsafe { dpdk_sys::rte_eth_macaddr_get(id, &mut addr) };
        check(|| format!("rte_eth_macaddr_get({device})"), rc)?;

        // SAFETY: id is a configured port with all queues set up.
        let rc = unsafe { dpdk_sys::rte_eth_dev_start(id) };
        check(
            || {
                format!(
                    "rte_eth_dev_start({device}): the port was found and set up but did not start \
                     (is its peer there: a memif or vhost-user socket, the interface it sits on?)"
                )
            },
            rc,
        )?;
        if conf.promiscuous {
            // SAFETY: id is a started port. Failure is harmless (some vdevs do not support it):
            // the pipeline filters by destination MAC itself.
            let _ = unsafe { dpdk_sys::rte_eth_promiscuous_enable(id) };
        } else {
            // SAFETY: id is a started port. Failure is harmless: a port that cannot leave
            // promiscuous mode only receives more.
            let _ = unsafe { dpdk_sys::rte_eth_promiscuous_disable(id) };
        }
        let wake_fds: Vec<Option<RawFd>> = (0..conf.rx_queues)
            .map(|q| wake_fd(id, q, &driver, rx_intr, info.if_index))
            .collect();
        if driver == "net_af_packet" {
            ring_drops::register(id, wake_fds.iter().flatten().copied().collect());
        }
        Ok(Port {
            id,
            wake_fds,
            kernel_interface: kernel_interface(&driver, info.if_index),
            name: device.to_string(),
            driver,
            mac: EthernetAddress(addr.addr_bytes),
            rss,
            own_key,
            checksums,
            rx_queues: conf.rx_queues,
            tx_queues: conf.tx_queues,
            started: true,
            closed: false,
            _pool: pool,
        })
    }

    /// DPDK port id.
    pub fn id(&self) -> u16 {
        self.id
    }
    /// The device name from the config.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The driver's name, e.g. `net_pcap`.
    pub fn driver(&self) -> &str {
        &self.driver
    }
    /// The port's own MAC address.
    pub fn mac(&self) -> EthernetAddress {
        self.mac
    }
    /// At most how many of the pool's mbufs the driver leaves with the kernel when the port
    /// closes. DPDK 22.11's net_af_xdp lends each queue pair's fill ring 2048 mbufs
    /// (`ETH_AF_XDP_DFLT_NUM_DESCS`, refilled as packets arrive) and takes sent ones back only
    /// at its next send, up to its completion ring's 2048; its close frees neither. Others: 0.
    pub fn held_at_close(&self) -> u32 {
        if self.driver == "net_af_xdp" {
            u32::from(self.rx_queues.max(self.tx_queues)) * 2 * AF_XDP_RING
        } else {
            0
        }
    }
    /// Whether RSS spreads packets over the RX queues (in hardware, or the driver's own).
    pub fn rss(&self) -> bool {
        self.rss
    }
    /// Whether RSS is on with the configured key; false with RSS on means the driver kept its
    /// own key (its key size is not 40 to 52 bytes), whose hashes the pipeline then uses.
    pub fn rss_own_key(&self) -> bool {
        self.own_key
    }

    /// The RX checksum offloads turned on (the ones the driver offers).
    pub fn rx_checksums(&self) -> RxChecksums {
        self.checksums
    }

    /// The kernel network interface this port sends and receives through (`net_af_packet`,
    /// `net_af_xdp`, `net_tap`, `net_pcap` on an interface), whose carrier is what tells whether
    /// the link is up: DPDK 22.11's af_packet and af_xdp report link up whatever their interface does (its `net_tap`
    /// does follow its tap, and is read the same way). `None` for every other port.
    pub fn kernel_interface(&self) -> Option<&str> {
        self.kernel_interface.as_deref()
    }

    /// The handle for RX queue `queue`. Each handle must be polled by one lcore only: that is
    /// what makes the burst calls safe without a lock, so handles are not `Clone`.
    pub fn rx_queue(&self, queue: u16) -> Option<RxQueue> {
        (queue < self.rx_queues).then_some(RxQueue {
            port: self.id,
            queue,
            wake: self.wake_fds.get(queue as usize).copied().flatten(),
        })
    }

    /// The handle for TX queue `queue`; one lcore per handle, as for RX.
    pub fn tx_queue(&self, queue: u16) -> Option<TxQueue> {
        (queue < self.tx_queues).then_some(TxQueue { port: self.id, queue })
    }

    /// Port counters.
    pub fn stats(&self) -> Result<PortStats> {
        stats_of(self.id).map_err(|e| Error {
            what: format!("rte_eth_stats_get({})", self.name),
            ..e
        })
    }

    /// Stops the port. Call only after every lcore stopped polling its queues.
    pub fn stop(&mut self) -> Result<()> {
        if self.started {
            self.started = false;
            // SAFETY: no lcore polls this port any more (caller's contract: lcores are joined).
            let rc = unsafe { dpdk_sys::rte_eth_dev_stop(self.id) };
            check(|| format!("rte_eth_dev_stop({})", self.name), rc)?;
        }
        Ok(())
    }

    /// Stops (if needed) and closes the port; drivers flush their output here (net_pcap writes
    /// the end of its capture file).
    pub fn close(&mut self) -> Result<()> {
        self.stop()?;
        if !self.closed {
            self.closed = true;
            // No `stats_of` reads the port while it is released.
            let _closing = CLOSING.lock().unwrap_or_else(|e| e.into_inner());
            ring_drops::forget(self.id);
            // SAFETY: the port is stopped and no lcore uses it; `stats_of` is excluded above.
            let rc = unsafe { dpdk_sys::rte_eth_dev_close(self.id) };
            check(|| format!("rte_eth_dev_close({})", self.name), rc)?;
        }
        Ok(())
    }
}

impl Drop for Port {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// One RX queue, owned by the lcore that polls it.
#[derive(Debug)]
pub struct RxQueue {
    port: u16,
    queue: u16,
    wake: Option<RawFd>,
}

impl RxQueue {
    /// DPDK port id.
    pub fn port(&self) -> u16 {
        self.port
    }
    /// Queue index.
    pub fn queue(&self) -> u16 {
        self.queue
    }

    /// An fd that poll() reports readable while the queue has packets (`net_af_packet`'s
    /// socket, `net_tap`'s RX interrupt), open while the port is started; `None` for a driver
    /// that gives none, whose idle lcore sleeps instead.
    pub fn wake_fd(&self) -> Option<RawFd> {
        self.wake
    }

    /// Receives up to the spare capacity of `out` (at most 65535) packets, appending them.
    /// Returns how many arrived. Never allocates: size `out` once with `Vec::with_capacity`.
    #[inline]
    pub fn recv(&mut self, out: &mut Vec<Mbuf>) -> usize {
        let spare = out.spare_capacity_mut();
        let want = spare.len().min(u16::MAX as usize) as u16;
        if want == 0 {
            return 0;
        }
        // SAFETY: the spare capacity holds `want` slots laid out as `struct rte_mbuf *` (Mbuf is
        // transparent over a non-null pointer); rx_burst writes `n <= want` valid mbuf pointers
        // that we then own. This handle is used by one lcore only, as the PMD requires.
        let n = unsafe {
            dpdk_sys::fp_eth_rx_burst(
                self.port,
                self.queue,
                spare.as_mut_ptr() as *mut *mut dpdk_sys::rte_mbuf,
                want,
            )
        } as usize;
        // SAFETY: the first n spare slots were initialised by rx_burst with owned mbufs.
        unsafe { out.set_len(out.len() + n) };
        n
    }
}

/// One TX queue, owned by the lcore that sends on it.
#[derive(Debug)]
pub struct TxQueue {
    port: u16,
    queue: u16,
}

impl TxQueue {
    /// DPDK port id.
    pub fn port(&self) -> u16 {
        self.port
    }
    /// Queue index.
    pub fn queue(&self) -> u16 {
        self.queue
    }

    /// Sends as many packets from the front of `pkts` as the queue takes; they leave `pkts`,
    /// the ones refused stay in it (in order) for the caller to retry or drop. Returns how many
    /// were sent.
    #[inline]
    pub fn send(&mut self, pkts: &mut Vec<Mbuf>) -> usize {
        let len = pkts.len();
        if len == 0 {
            return 0;
        }
        let want = len.min(u16::MAX as usize) as u16;
        // SAFETY: pkts holds `len` owned mbufs laid out as `struct rte_mbuf *`. tx_burst takes
        // ownership of the first n; this handle is used by one lcore only.
        let n = unsafe {
            dpdk_sys::fp_eth_tx_burst(
                self.port,
                self.queue,
                pkts.as_mut_ptr() as *mut *mut dpdk_sys::rte_mbuf,
                want,
            )
        } as usize;
        // SAFETY: the first n mbufs now belong to the driver: move the unsent tail to the front
        // without dropping anything, then shorten the Vec so the sent ones are never freed here.
        unsafe {
            std::ptr::copy(pkts.as_ptr().add(n), pkts.as_mut_ptr(), len - n);
            pkts.set_len(len - n);
        }
        n
    }
}

impl crate::tx::Transmit<Mbuf> for TxQueue {
    #[inline(always)]
    fn port(&self) -> u16 {
        TxQueue::port(self)
    }
    #[inline(always)]
    fn send(&mut self, pkts: &mut Vec<Mbuf>) -> usize {
        TxQueue::send(self, pkts)
    }
}

/// The fd that reports input on RX queue `q` of started port `id`, if the driver has one.
fn wake_fd(id: u16, q: u16, driver: &str, rx_intr: bool, if_index: u32) -> Option<RawFd> {
    match driver {
        "net_af_packet" => {
            // SAFETY: `id` is a started net_af_packet port and `q` one of its RX queues, the
            // shim's contract; it only reads the queue's first member.
            let fd = unsafe { dpdk_sys::fp_af_packet_rxq_sockfd(id, q) };
            // The struct is the driver's private one: used only when it is what we expect.
            super::wake::is_packet_socket_on(fd, if_index).then_some(fd)
        }
        _ if rx_intr => {
            // SAFETY: `id` is a started port configured with RX interrupts, `q` an RX queue.
            let fd = unsafe { dpdk_sys::rte_eth_dev_rx_intr_ctl_q_get_fd(id, q) };
            (fd >= 0).then_some(fd)
        }
        _ => None,
    }
}

/// The name of interface `if_index` for a driver that runs over a kernel interface.
fn kernel_interface(driver: &str, if_index: u32) -> Option<String> {
    if if_index == 0 || !matches!(driver, "net_af_packet" | "net_af_xdp" | "net_tap" | "net_pcap") {
        return None;
    }
    let mut name = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: `name` has the IF_NAMESIZE bytes if_indextoname may write (the name and its NUL);
    // it returns NULL (an unknown index) or a pointer into `name`, read only when not NULL.
    let p = unsafe { libc::if_indextoname(if_index, name.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: if_indextoname succeeded, so `name` holds a NUL-terminated string.
    Some(unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned())
}

/// A port's link as its driver reports it (`rte_eth_link_get_nowait`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Link {
    /// Link up.
    pub up: bool,
    /// Speed in Mbps (0 when the driver does not say).
    pub speed_mbps: u32,
    /// Full duplex.
    pub full_duplex: bool,
}

/// The link of port `id` without waiting (`rte_eth_link_get_nowait`), from any thread (the
/// control thread polls it). An unknown or closed port, or a driver that cannot tell, is an
/// error.
pub fn link_of(id: u16) -> Result<Link> {
    let mut l = dpdk_sys::rte_eth_link::default();
    let _not_closing = CLOSING.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: rte_eth_link_get_nowait validates `id` (-ENODEV for a port that does not exist or
    // was released, which `CLOSING` keeps from happening meanwhile), asks the driver for its
    // link without waiting and writes only through the out-pointer, a live rte_eth_link.
    let rc = unsafe { dpdk_sys::rte_eth_link_get_nowait(id, &mut l) };
    check(|| format!("rte_eth_link_get_nowait(port {id})"), rc)?;
    Ok(Link {
        up: l.link_status() != 0,
        speed_mbps: l.link_speed,
        full_duplex: l.link_duplex() != 0,
    })
}

/// Held while a port is closed and while `stats_of` reads one: ethdev's control calls are not
/// safe against each other, and `stats_of` takes a bare id that may be closing on another thread.
/// Never taken on a per-packet path.
static CLOSING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The counters of port `id` (`rte_eth_stats_get`), from any thread, e.g. a metrics scrape while
/// the lcores run. An unknown or closed id is an error.
pub fn stats_of(id: u16) -> Result<PortStats> {
    let mut s = dpdk_sys::rte_eth_stats::default();
    let _not_closing = CLOSING.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: rte_eth_stats_get validates `id` (-ENODEV for a port that does not exist or was
    // released by a close, which `CLOSING` keeps from running meanwhile), reads counters the
    // driver keeps for this purpose (safe against the data path: testpmd reads them while it
    // forwards) and writes only through the out-pointer, a live, writable rte_eth_stats.
    let rc = unsafe { dpdk_sys::rte_eth_stats_get(id, &mut s) };
    check(|| format!("rte_eth_stats_get(port {id})"), rc)?;
    Ok(PortStats {
        ipackets: s.ipackets,
        opackets: s.opackets,
        ibytes: s.ibytes,
        obytes: s.obytes,
        // DPDK 22.11's af_packet leaves its rings' drops (frames the kernel found no free slot
        // for: the RX lcore did not keep up) out of imissed; they are the same loss.
        imissed: s.imissed + ring_drops::read(id),
        ierrors: s.ierrors,
        oerrors: s.oerrors,
        rx_nombuf: s.rx_nombuf,
    })
}

/// The driver's extended statistics of port `id` (`rte_eth_xstats_get_names` and
/// `rte_eth_xstats_get`): each counter's name and value, from any thread, as `stats_of`.
pub fn xstats_of(id: u16) -> Result<Vec<(String, u64)>> {
    let _not_closing = CLOSING.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: a NULL array of size 0 asks only for the count; `id` is validated by DPDK.
    let n = unsafe { dpdk_sys::rte_eth_xstats_get_names(id, std::ptr::null_mut(), 0) };
    check(|| format!("rte_eth_xstats_get_names(port {id})"), n)?;
    let empty = dpdk_sys::rte_eth_xstat_name { name: [0; 64] };
    let mut names = vec![empty; n as usize];
    let mut values = vec![dpdk_sys::rte_eth_xstat { id: 0, value: 0 }; n as usize];
    // SAFETY: both arrays hold `n` live, writable elements, the size passed; DPDK writes at
    // most that many (a driver that grew meanwhile returns a larger count, handled below).
    let got_names = unsafe { dpdk_sys::rte_eth_xstats_get_names(id, names.as_mut_ptr(), n as u32) };
    // SAFETY: as above.
    let got = unsafe { dpdk_sys::rte_eth_xstats_get(id, values.as_mut_ptr(), n as u32) };
    check(|| format!("rte_eth_xstats_get(port {id})"), got.min(got_names))?;
    let got = (got.min(got_names) as usize).min(n as usize);
    Ok(values[..got]
        .iter()
        .filter_map(|v| {
            let name = names.get(v.id as usize)?;
            let bytes: Vec<u8> = name.name.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
            Some((String::from_utf8_lossy(&bytes).into_owned(), v.value))
        })
        .collect())
}

/// The frames the kernel dropped at `net_af_packet` ports' RX rings (`PACKET_STATISTICS`
/// `tp_drops`). The kernel resets the count at each read, so the total is kept here; the driver
/// (22.11) never reads it. Read under [`CLOSING`], as the rest of `stats_of`.
mod ring_drops {
    use std::collections::HashMap;
    use std::os::fd::RawFd;
    use std::sync::Mutex;

    /// A port's RX rings' sockets and the drops read from them so far.
    type Rings = (Vec<RawFd>, u64);

    /// By port id.
    static PORTS: Mutex<Option<HashMap<u16, Rings>>> = Mutex::new(None);

    pub(super) fn register(id: u16, fds: Vec<RawFd>) {
        let mut p = PORTS.lock().unwrap_or_else(|e| e.into_inner());
        p.get_or_insert_with(HashMap::new).insert(id, (fds, 0));
    }

    pub(super) fn forget(id: u16) {
        if let Some(p) = PORTS.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            p.remove(&id);
        }
    }

    /// The drops of port `id`'s rings since it started (0 for a port that has none).
    pub(super) fn read(id: u16) -> u64 {
        let mut p = PORTS.lock().unwrap_or_else(|e| e.into_inner());
        let Some((fds, total)) = p.as_mut().and_then(|p| p.get_mut(&id)) else {
            return 0;
        };
        for &fd in fds.iter() {
            *total += u64::from(super::super::wake::packet_drops(fd));
        }
        *total
    }
}
