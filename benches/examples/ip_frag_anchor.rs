//! The anchor of the fragment benchmarks: DPDK's own reassembly (librte_ip_frag, through
//! `fastpath::dpdk::ip_frag`) over the same net_pcap port, the same capture and the same table
//! memory as fastpathd's `figures="frags"` scenarios, so benches/macro_bench.py reports both in one
//! run.
//!
//! ```text
//! ip_frag_anchor [--warmup S] [--seconds S] [--high-thresh-bytes B] [--mbufs N] [--mbuf-cache N]
//!                [--desc N] [--device NAME] -- <EAL arguments, -l 0,1 ...>
//! ```
//!
//! The EAL main lcore (the first of `-l`) keeps time and prints; the next lcore polls RX queue 0
//! of `--device` in bursts of 32 (fastpathd's RX lcore), and per packet does what DPDK's
//! `examples/ip_reassembly/main.c` does (DPDK 22.11): a fragment goes to the table with the
//! burst's TSC; a completed datagram and every packet that is not a fragment are freed (fastpathd
//! hands a completed datagram to its `sink` service instead); the death row is freed after each
//! burst.
//!
//! Table size (the same memory as fastpathd's): fastpathd charges `buffer_truesize` (2304 bytes,
//! `ReasmConfig::default()`) per held fragment and admits datagrams while it holds at most
//! `high_thresh_bytes`, each at least one fragment, in at most `max_datagrams` (2048) slots; so
//! `max_entries` = min(high_thresh_bytes / 2304, 2048): 1820 for the default 4 MiB, 113 for
//! 256 KiB. Buckets as DPDK's ip_reassembly example sizes them (`rte_ip_frag_table_create(
//! max_flow_num, IP_FRAG_TBL_BUCKET_ENTRIES = 16, max_flow_num, ...)`): `max_entries` buckets of
//! 16, so a bucket overflows only in the rarest case and `max_entries` is the binding limit, as
//! fastpathd's memory is. Timeout: fastpathd's default 30 s (`ReasmConfig::default().timeout_ns`)
//! in TSC cycles; DPDK does not scale it by pressure as fastpathd does.
//!
//! Prints one line `ip_frag_anchor: rx=... ` of `key=value` pairs at the end (see `main`).

use fastpath::dpdk::ip_frag::{IpFragTable, Reassembly};
use fastpath::dpdk::{eal, Eal, Mbuf, Mempool, Port, PortConf};
use fastpath::pipeline::reasm::ReasmConfig;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// fastpath::runtime::BURST, testpmd's default.
const BURST: usize = 32;
/// DPDK's examples/ip_reassembly/main.c IP_FRAG_TBL_BUCKET_ENTRIES.
const BUCKET_ENTRIES: u32 = 16;

/// Counters the RX lcore publishes after every burst.
#[derive(Default)]
struct Shared {
    rx: AtomicU64,
    fragments: AtomicU64,
    completed: AtomicU64,
    dropped: AtomicU64,
    /// TSC of the last publication.
    tsc: AtomicU64,
    stop: AtomicBool,
    done: AtomicBool,
}

struct Args {
    warmup: f64,
    seconds: f64,
    high_thresh: usize,
    mbufs: u32,
    cache: u32,
    desc: u16,
    device: String,
    eal: Vec<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        warmup: 2.0,
        seconds: 6.0,
        high_thresh: ReasmConfig::default().high_thresh_bytes,
        mbufs: 16383,
        cache: 250,
        desc: 1024,
        device: "net_pcap0".into(),
        eal: vec!["ip_frag_anchor".into()],
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        if k == "--" {
            a.eal.extend(it);
            break;
        }
        let v = it.next().ok_or_else(|| format!("{k} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{k} {v:?}: {e}");
        match k.as_str() {
            "--warmup" => a.warmup = v.parse().map_err(|e| bad(&e))?,
            "--seconds" => a.seconds = v.parse().map_err(|e| bad(&e))?,
            "--high-thresh-bytes" => a.high_thresh = v.parse().map_err(|e| bad(&e))?,
            "--mbufs" => a.mbufs = v.parse().map_err(|e| bad(&e))?,
            "--mbuf-cache" => a.cache = v.parse().map_err(|e| bad(&e))?,
            "--desc" => a.desc = v.parse().map_err(|e| bad(&e))?,
            "--device" => a.device = v,
            _ => return Err(format!("unknown argument {k}")),
        }
    }
    Ok(a)
}

/// The RX lcore's loop: until `stop`.
fn rx_loop(mut rxq: fastpath::dpdk::RxQueue, mut table: IpFragTable, sh: &Shared) {
    let mut pkts: Vec<Mbuf> = Vec::with_capacity(BURST);
    let mut free: Vec<Mbuf> = Vec::with_capacity(BURST);
    let (mut rx, mut fragments, mut completed) = (0u64, 0u64, 0u64);
    while !sh.stop.load(Ordering::Relaxed) {
        let n = rxq.recv(&mut pkts);
        if n == 0 {
            continue;
        }
        let tsc = eal::rdtsc();
        rx += n as u64;
        for m in pkts.drain(..) {
            match table.reassemble(m, tsc) {
                Reassembly::NotFragment(m) => free.push(m),
                Reassembly::Taken => fragments += 1,
                Reassembly::Complete(m) => {
                    fragments += 1;
                    completed += 1;
                    free.push(m);
                }
            }
        }
        Mbuf::free_bulk(&mut free);
        table.free_death_row();
        sh.rx.store(rx, Ordering::Relaxed);
        sh.fragments.store(fragments, Ordering::Relaxed);
        sh.completed.store(completed, Ordering::Relaxed);
        sh.dropped.store(table.dropped(), Ordering::Relaxed);
        sh.tsc.store(tsc, Ordering::Release);
    }
    // The table frees what it still holds.
    drop(table);
    sh.done.store(true, Ordering::Release);
}

fn main() {
    if let Err(e) = run() {
        eprintln!("ip_frag_anchor: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let a = parse_args()?;
    let eal = Eal::init(&a.eal).map_err(|e| e.to_string())?;
    let main_lcore = eal.main_lcore();
    // The next enabled lcore after the main one (ids past RTE_MAX_LCORE report disabled).
    let rx_lcore = (main_lcore + 1..main_lcore + 1024)
        .find(|&l| eal.lcore_enabled(l))
        .ok_or("the EAL core list (-l) needs a second lcore for RX")?;
    let pool = Arc::new(Mempool::new("anchor_pkts", a.mbufs, a.cache, 2048 + 128).map_err(|e| e.to_string())?);
    let conf = PortConf {
        rx_queues: 1,
        tx_queues: 1,
        rx_desc: a.desc,
        tx_desc: a.desc,
        mtu: None,
        promiscuous: true,
        rss_key: fastpath::wire::toeplitz::RssKey::default(),
        rss: false,
    };
    let mut port = Port::open(&a.device, &conf, pool.clone()).map_err(|e| e.to_string())?;
    let rxq = port.rx_queue(0).ok_or("no RX queue 0")?;

    let rc = ReasmConfig::default();
    let max_entries = (a.high_thresh / rc.buffer_truesize).clamp(1, rc.max_datagrams) as u32;
    let hz = eal.tsc_hz();
    let max_cycles = (rc.timeout_ns as u128 * hz as u128 / 1_000_000_000) as u64;
    let sh = Arc::new(Shared::default());
    let sh2 = sh.clone();
    // The table is made on the RX lcore: it is not Send.
    eal.launch(rx_lcore, move || {
        match IpFragTable::new(max_entries, BUCKET_ENTRIES, max_entries, max_cycles) {
            Ok(table) => rx_loop(rxq, table, &sh2),
            Err(e) => {
                eprintln!("ip_frag_anchor: {e}");
                sh2.done.store(true, Ordering::Release);
            }
        }
    })
    .map_err(|e| e.to_string())?;

    let snap = |sh: &Shared| (sh.tsc.load(Ordering::Acquire), sh.rx.load(Ordering::Relaxed));
    std::thread::sleep(Duration::from_secs_f64(a.warmup));
    let (t0, rx0) = snap(&sh);
    let started = Instant::now();
    while started.elapsed().as_secs_f64() < a.seconds && !sh.done.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (t1, rx1) = snap(&sh);
    sh.stop.store(true, Ordering::Relaxed);
    let lcore_ok = eal.wait(rx_lcore).is_ok();
    port.stop().map_err(|e| e.to_string())?;
    port.close().map_err(|e| e.to_string())?;
    drop(port);
    if !lcore_ok || t1 <= t0 {
        return Err("the RX lcore failed or received nothing in the measured window".into());
    }
    let span = (t1 - t0) as f64 / hz as f64;
    let mpps = (rx1 - rx0) as f64 / span / 1e6;
    println!(
        "ip_frag_anchor: rx={} fragments={} completed={} dropped={} window_rx={} window_s={:.3} mpps={:.4} \
         max_entries={} buckets={} bucket_entries={} timeout_cycles={} mbufs_in_use={}",
        sh.rx.load(Ordering::Relaxed),
        sh.fragments.load(Ordering::Relaxed),
        sh.completed.load(Ordering::Relaxed),
        sh.dropped.load(Ordering::Relaxed),
        rx1 - rx0,
        span,
        mpps,
        max_entries,
        max_entries,
        BUCKET_ENTRIES,
        max_cycles,
        pool.in_use(),
    );
    drop(pool);
    eal.cleanup();
    Ok(())
}
