//! `[dpdk]`: EAL arguments and the packet pool.

use super::errors::Errs;
use crate::locate::Seg::{Index, Key};
use serde::Deserialize;

/// `[dpdk]` as written.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct DpdkSection {
    #[serde(default)]
    eal_args: Vec<String>,
    mbufs: Option<u32>,
    mbuf_cache: Option<u32>,
    mempool_ops: Option<String>,
    rx_desc: Option<u16>,
    tx_desc: Option<u16>,
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
/// cache. On the open-port benchmark (RX lcore to a sink worker) it is faster; unchanged where
/// mbufs stay on one lcore (benches/NOTES.md, "A stack mempool").
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

/// EAL flags that set the lcores, which `[lcores]` owns.
const LCORE_FLAGS: [&str; 4] = ["-l", "-c", "--lcores", "--main-lcore"];

/// Validates `[dpdk]`, defaults applied.
pub(super) fn validate(raw: DpdkSection, errs: &mut Errs) -> DpdkConfig {
    for (i, a) in raw.eal_args.iter().enumerate() {
        let flag = a.split('=').next().unwrap_or("");
        if LCORE_FLAGS.contains(&flag) || (a.starts_with("-l") && a.len() > 2 && !a.starts_with("--")) {
            errs.add(
                &[Key("dpdk"), Key("eal_args"), Index(i)],
                format!("{a:?}: the lcore list is derived from [lcores]; remove it from eal_args"),
            );
        }
    }
    if let Err((i, why)) = virtio_user_memory(&raw.eal_args) {
        errs.add(&[Key("dpdk"), Key("eal_args"), Index(i)], why);
    }
    let dpdk = DpdkConfig {
        eal_args: raw.eal_args,
        mbufs: raw.mbufs.unwrap_or(16383),
        mbuf_cache: raw.mbuf_cache.unwrap_or(256),
        mempool_ops: raw.mempool_ops.unwrap_or_else(|| DEFAULT_MEMPOOL_OPS.to_string()),
        rx_desc: raw.rx_desc.unwrap_or(1024),
        tx_desc: raw.tx_desc.unwrap_or(1024),
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
    dpdk
}

/// What a `net_virtio_user` port needs from the EAL's memory options, given the full EAL
/// argument list: `Ok(Some(flag))` when fastpathd must add `flag`, `Ok(None)` when nothing is
/// needed, `Err((index, why))` when an argument rules the port out.
///
/// A virtio-user port over vhost-user shares all of the process's DPDK memory with its peer
/// (OVS-DPDK, a vhost-user switch) as file descriptors, and vhost-user carries at most 8
/// memory regions. On hugepages DPDK keeps one file per page by default (128 files for
/// `-m 256` on 2 MiB pages): the peer's `VHOST_USER_SET_MEM_TABLE` fails ("Too many memory
/// regions"), the device never starts, and yet `rte_eth_dev_start` returns 0 and the link
/// reads up, so nothing after EAL init can tell. `--single-file-segments` keeps one file per
/// memseg list. `--no-huge` memory is one memfd and needs nothing. `--huge-unlink` (other
/// than `=never`) and `--legacy-mem` cannot be combined with it, so they are refused.
pub fn virtio_user_memory(args: &[String]) -> Result<Option<&'static str>, (usize, String)> {
    let mut vdev_next = false;
    let mut virtio = false;
    for a in args {
        let value = a.strip_prefix("--vdev=").or(vdev_next.then_some(a.as_str()));
        virtio |= value.is_some_and(|v| v.starts_with("net_virtio_user") || v.starts_with("virtio_user"));
        vdev_next = a == "--vdev";
    }
    if !virtio || args.iter().any(|a| a == "--no-huge" || a == "--single-file-segments") {
        return Ok(None);
    }
    for (i, a) in args.iter().enumerate() {
        let unlink = a.starts_with("--huge-unlink") && a != "--huge-unlink=never";
        if unlink || a == "--legacy-mem" {
            return Err((
                i,
                format!(
                    "{a:?} with a net_virtio_user port: vhost-user shares at most 8 memory regions, which on \
                     hugepages needs --single-file-segments, and {a} cannot be combined with it; remove {a} \
                     (or use --no-huge)"
                ),
            ));
        }
    }
    Ok(Some("--single-file-segments"))
}
