//! The packet pool's budget: what may hold mbufs at once, in total, against `[dpdk] mbufs`.
//!
//! Each holder is bounded by its own limit, but only their sum says whether the pool can run
//! dry: a reassembly threshold or a set of socket rings that fit alone can together take every
//! mbuf, and then the RX queues cannot be refilled and ARP, NDP and ping get nothing
//! (`rx_nombuf`). So a config (at start and at every reload) must fit, conservatively:
//!
//! - **RX descriptors**: every RX queue of every port full, `rx_queues × rx_desc`;
//! - **TX descriptors**: every TX queue full of mbufs not yet completed, `tx_queues × tx_desc`;
//! - **held fragments**: on every RX lcore, the most buffers its reassembler can hold: its
//!   memory never passes `high_thresh_bytes + max_fragments × truesize` and each buffer is
//!   charged `truesize` ([`ReasmConfig::buffer_truesize`], 2304 bytes), so
//!   `ceil(high_thresh_bytes / truesize) + max_fragments`, and never more than
//!   `max_datagrams × max_fragments` (none in forward mode, which has no reassembly);
//! - **socket rings**: every socket's capacity once per RX lcore (a socket has a queue per RX
//!   lcore, each sized exactly to the socket's capacity so that one RX lcore alone can fill it;
//!   the fanout keeps their sum at the capacity, but only the queues' sizes are a hard bound —
//!   see `fastpath::socket::Socket`), and a 4096-packet hand-off ring per sequence tunnel
//!   ([`HANDOFF_CAPACITY`]); with a kernel interface, the internal `kernel` service's sockets
//!   (one per worker, `[kernel] socket_capacity`) likewise, and the interfaces' queues above;
//! - **mempool caches**: every lcore's per-lcore cache, which DPDK fills up to 1.5 × `mbuf_cache`
//!   before flushing (`RTE_MEMPOOL_CACHE_FLUSHTHRESH`), invisible to the other lcores;
//! - **reserve**: a burst in flight per lcore (32) and [`RESERVE`] mbufs for refilling RX
//!   descriptors, so ARP, NDP and ICMP still get answered when everything above is full.

use super::errors::Errs;
use super::{Config, LcoreMode};
use crate::locate::Seg::Key;
use crate::table_builder::HANDOFF_CAPACITY;
use fastpath::pipeline::reasm::ReasmConfig;

/// Mbufs kept free for refilling RX descriptors whatever else holds mbufs: the answers to ARP,
/// NDP and ping are built in the received mbuf, so what they need is that RX keeps receiving.
pub const RESERVE: u64 = 256;

/// Packets an lcore holds in one burst (the RX burst, a worker's dequeue).
const BURST: u64 = 32;

/// Each holder's share of the pool, and their total.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Every RX queue's descriptors.
    pub rx_desc: u64,
    /// Every TX queue's descriptors.
    pub tx_desc: u64,
    /// Held fragments on every RX lcore.
    pub fragments: u64,
    /// One RX lcore's most held fragments.
    pub fragments_per_lcore: u64,
    /// Every socket ring and hand-off ring.
    pub sockets: u64,
    /// Every lcore's mempool cache, full.
    pub caches: u64,
    /// Bursts in flight and the RX refill reserve.
    pub reserve: u64,
}

impl Budget {
    /// What `cfg` may hold at once.
    pub fn of(cfg: &Config) -> Self {
        let (rx_queues, tx_queues) = queues(cfg);
        let kernel_sockets = if super::KernelConfig::enabled(&cfg.ports) {
            (cfg.lcores.workers.len() * cfg.kernel.socket_capacity) as u64
        } else {
            0
        };
        let lcores = cfg.lcores.all().len() as u64;
        let fragments_per_lcore = match cfg.lcores.mode {
            LcoreMode::Pipeline => held_fragments(&cfg.reassembly),
            LcoreMode::Forward => 0,
        };
        let sequence_tunnels = cfg.tunnels.iter().filter(|t| t.sequence).count() as u64;
        Budget {
            rx_desc: rx_queues * cfg.dpdk.rx_desc as u64,
            tx_desc: tx_queues * cfg.dpdk.tx_desc as u64,
            fragments: cfg.lcores.rx.len() as u64 * fragments_per_lcore,
            fragments_per_lcore,
            sockets: cfg
                .services
                .iter()
                .map(|s| (s.sockets * s.socket_capacity) as u64)
                .sum::<u64>()
                .saturating_add(kernel_sockets)
                * cfg.lcores.rx.len().max(1) as u64
                + sequence_tunnels * HANDOFF_CAPACITY as u64,
            caches: lcores * (cfg.dpdk.mbuf_cache as u64 * 3).div_ceil(2),
            reserve: lcores * BURST + RESERVE,
        }
    }

    /// The sum of every term.
    pub fn total(&self) -> u64 {
        self.rx_desc + self.tx_desc + self.fragments + self.sockets + self.caches + self.reserve
    }
}

/// RX and TX queues of every port and every kernel interface (one queue pair per worker).
fn queues(cfg: &Config) -> (u64, u64) {
    let kernel = cfg.ports.iter().filter(|p| p.kernel_interface.is_some()).count() as u64
        * cfg.lcores.workers.len().max(1) as u64;
    let rx: u64 = cfg.ports.iter().map(|p| p.rx_queues as u64).sum();
    let tx: u64 = cfg.ports.iter().map(|p| p.tx_queues as u64).sum();
    (rx + kernel, tx + kernel)
}

/// The most buffers one reassembler can hold with `r` (see the module doc).
pub fn held_fragments(r: &ReasmConfig) -> u64 {
    let truesize = r.buffer_truesize.max(1) as u64;
    let by_memory = (r.high_thresh_bytes as u64).div_ceil(truesize) + r.max_fragments as u64;
    by_memory.min(r.max_datagrams as u64 * r.max_fragments as u64)
}

/// Refuses `cfg` when what may hold mbufs at once exceeds `[dpdk] mbufs`, naming every term.
pub(super) fn check(cfg: &Config, errs: &mut Errs) {
    let b = Budget::of(cfg);
    let total = b.total();
    if total <= cfg.dpdk.mbufs as u64 {
        return;
    }
    let (rx_queues, tx_queues) = queues(cfg);
    let lcores = cfg.lcores.all().len();
    let r = &cfg.reassembly;
    let fragments_why = match cfg.lcores.mode {
        LcoreMode::Forward => "forward mode: no reassembly".to_string(),
        LcoreMode::Pipeline => format!(
            "{} RX lcores x {}: reassembly.high_thresh_bytes {} / {} bytes per buffer + max_fragments {}, \
             at most max_datagrams {} x max_fragments",
            cfg.lcores.rx.len(),
            b.fragments_per_lcore,
            r.high_thresh_bytes,
            r.buffer_truesize,
            r.max_fragments,
            r.max_datagrams,
        ),
    };
    errs.add(
        &[Key("dpdk"), Key("mbufs")],
        format!(
            "the packet pool is too small for what may hold mbufs at once: \
             RX descriptors {} ({rx_queues} queues x dpdk.rx_desc {}) + \
             TX descriptors {} ({tx_queues} queues x dpdk.tx_desc {}) + \
             held fragments {} ({}) + \
             socket rings {} (every [[service]] sockets x socket_capacity, and workers x kernel.socket_capacity, x {} RX lcores, 4096 per sequence tunnel) + \
             mempool caches {} ({lcores} lcores x 1.5 x dpdk.mbuf_cache {}) + \
             reserve {} ({lcores} lcores x {BURST} in flight + {RESERVE} for ARP/NDP/ICMP) \
             = {total} > dpdk.mbufs {}; raise dpdk.mbufs to at least {total} or lower a term",
            b.rx_desc,
            cfg.dpdk.rx_desc,
            b.tx_desc,
            cfg.dpdk.tx_desc,
            b.fragments,
            fragments_why,
            b.sockets,
            cfg.lcores.rx.len(),
            b.caches,
            cfg.dpdk.mbuf_cache,
            b.reserve,
            cfg.dpdk.mbufs,
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::super::{parse, ConfigError};
    use super::*;

    /// One port (1 RX, 2 TX queues), RX lcore 0 and worker 1, small descriptor rings.
    fn cfg(mbufs: u32, extra: &str) -> String {
        format!(
            "[dpdk]\neal_args = [\"--no-huge\"]\nmbufs = {mbufs}\nmbuf_cache = 32\nrx_desc = 64\ntx_desc = 64\n\n\
             [[port]]\ndevice = \"net_null0\"\ntx_queues = 2\nipv4 = [\"192.0.2.1\"]\n\n\
             [lcores]\nrx = [0]\nworkers = [1]\n{extra}"
        )
    }

    fn refusal(src: &str) -> ConfigError {
        let e = parse(src, "t.toml").unwrap_err().errors;
        assert_eq!(e.len(), 1, "{e:?}");
        e.into_iter().next().unwrap()
    }

    #[test]
    fn every_term_is_counted() {
        let c = parse(&cfg(16383, ""), "t.toml").unwrap();
        // 4 MiB / 2304 = 1820.4 -> 1821, + 64 fragments of one datagram in progress.
        let want = Budget {
            rx_desc: 64,
            tx_desc: 128,
            fragments: 1885,
            fragments_per_lcore: 1885,
            sockets: 0,
            caches: 2 * 48,
            reserve: 2 * 32 + 256,
        };
        assert_eq!(Budget::of(&c), want);
        assert_eq!(want.total(), 64 + 128 + 1885 + 96 + 320);
        // Two RX lcores each hold their own fragments and fill their own queue of every socket;
        // hand-off rings add up.
        let services =
            "\n[[service]]\nname = \"a\"\nports = [7]\nsockets = 3\nsocket_capacity = 100\naction = \"echo\"\n\
                        \n[[service]]\nname = \"b\"\nports = [9]\nsocket_capacity = 7\naction = \"sink\"\n\
                        \n[[tunnel]]\nname = \"t\"\nlocal = \"192.0.2.1\"\nremote = \"198.51.100.1\"\nsequence = true\n\
                        port = \"net_null0\"\nnext_hop_mac = \"02:00:00:00:00:fe\"\n";
        let two = cfg(65535, services)
            .replace("rx = [0]", "rx = [0, 2]")
            .replace("tx_queues = 2", "rx_queues = 2\ntx_queues = 3");
        let b = Budget::of(&parse(&two, "t.toml").unwrap());
        assert_eq!(
            (b.rx_desc, b.tx_desc, b.fragments, b.sockets, b.caches, b.reserve),
            (128, 192, 2 * 1885, 2 * (300 + 7) + 4096, 3 * 48, 3 * 32 + 256)
        );
        // Forward mode has no reassembly.
        let fwd = cfg(16383, "")
            .replace("workers = [1]", "mode = \"forward\"")
            .replace("tx_queues = 2", "tx_queues = 1");
        assert_eq!(Budget::of(&parse(&fwd, "t.toml").unwrap()).fragments, 0);
        // The table's slots bound the fragments too: 4 datagrams x 2 fragments.
        let r = ReasmConfig {
            max_datagrams: 4,
            max_fragments: 2,
            ..Default::default()
        };
        assert_eq!(held_fragments(&r), 8);
    }

    #[test]
    fn a_pool_that_fits_exactly_passes_and_one_less_is_refused() {
        let total = Budget::of(&parse(&cfg(16383, ""), "t.toml").unwrap()).total() as u32;
        assert_eq!(total, 2493);
        assert!(parse(&cfg(total, ""), "t.toml").is_ok());
        let e = refusal(&cfg(total - 1, ""));
        assert_eq!((e.key.as_str(), e.line), ("dpdk.mbufs", Some(3)));
        assert!(
            e.message.contains(&format!("= {total} > dpdk.mbufs {}", total - 1)),
            "{}",
            e.message
        );
    }

    /// Two configs whose fragments or socket rings could take the pool: refused, every term named.
    #[test]
    fn fragments_or_socket_rings_that_could_take_the_pool_are_refused_with_the_numbers() {
        let e = refusal(&cfg(2047, "\n[reassembly]\nhigh_thresh_bytes = 8388608\n"));
        assert_eq!((e.key.as_str(), e.line), ("dpdk.mbufs", Some(3)));
        for term in [
            "RX descriptors 64 (1 queues x dpdk.rx_desc 64)",
            "TX descriptors 128 (2 queues x dpdk.tx_desc 64)",
            // 8 MiB / 2304 = 3640.9 -> 3641, + 64.
            "held fragments 3705 (1 RX lcores x 3705: reassembly.high_thresh_bytes 8388608 / 2304 bytes per buffer + max_fragments 64",
            "socket rings 0",
            "mempool caches 96 (2 lcores x 1.5 x dpdk.mbuf_cache 32)",
            "reserve 320 (2 lcores x 32 in flight + 256 for ARP/NDP/ICMP)",
            "= 4313 > dpdk.mbufs 2047",
        ] {
            assert!(e.message.contains(term), "{term:?} not in {}", e.message);
        }
        let sockets =
            "\n[reassembly]\nhigh_thresh_bytes = 65536\n\n[[service]]\nname = \"s\"\nports = [7]\nsockets = 8\n\
                       socket_capacity = 1023\naction = \"sink\"\n";
        let e = refusal(&cfg(2047, sockets));
        assert!(e.message.contains("socket rings 8184"), "{}", e.message);
        // The same with small enough rings passes: 64 + 128 + 93 + 8 x 100 + 96 + 320.
        let c = parse(&cfg(2047, &sockets.replace("1023", "100")), "t.toml").unwrap();
        assert_eq!(Budget::of(&c).total(), 1501);
    }
}
