//! A capture through the daemon's own engines, without DPDK (`fastpathd --explain` and the
//! capture corpus's in-process runner, `tests/corpus.rs`): the config parsed by the daemon's
//! parser, the tables built by its builder ([`TableBuilder::with_queues`], sockets are
//! [`SimQueue`]s), one RX engine per RX lcore over heap buffers in bursts of 32 with one `now`
//! each, the lcores taking turns burst by burst, a TX queue that takes everything, then the
//! quiet time and the clean stop; then one worker engine per worker lcore drains what the RX
//! lcores gave each socket and handed each sequence tunnel's owner, as workers do at a stop.

use crate::config::Config;
use crate::table_builder::{OpenedPort, TableBuilder};
use fastpath::buf::HeapBuf;
use fastpath::outcome::Outcome;
use fastpath::pipeline::{Instant, Tables};
use fastpath::rx::{HeapIo, RxEngine};
use fastpath::socket::{QueueSync, SimQueue, SocketQueue};
use fastpath::stats::{LcoreStats, QueueCounters};
use fastpath::trace::{Filter, Record, TraceSession};
use fastpath::tx::{Collect, BURST};
use fastpath::worker::{HeapWorkerIo, WorkerEngine};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// The daemon's mbuf data room: a larger frame arrives in several segments (`oversize`).
pub const DATA_ROOM: usize = 2048;

/// `fastpath_socket_processed_total`'s results.
pub const PROCESSED: [&str; 6] = ["echoed", "sunk", "kernel", "tx_full", "invalid", "refused"];

/// One captured frame: its timestamp in ns since the epoch and its bytes.
#[derive(Clone, Debug)]
pub struct Frame {
    /// Capture timestamp, ns.
    pub ts_ns: u64,
    /// The frame.
    pub data: Vec<u8>,
}

/// Reads every Ethernet frame of a pcap or pcapng file (by its magic number).
pub fn read_capture(path: &Path) -> Result<Vec<Frame>, String> {
    use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
    use pcap_file::pcapng::Block;
    use pcap_file::DataLink;
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let err = |e: pcap_file::PcapError| format!("{}: {e}", path.display());
    let mut frames = Vec::new();
    if bytes.starts_with(&[0x0a, 0x0d, 0x0d, 0x0a]) {
        let mut r = pcap_file::pcapng::PcapNgReader::new(&bytes[..]).map_err(err)?;
        // Per interface: ticks per second of its timestamps (`if_tsresol`, default µs).
        let mut ticks: Vec<u128> = Vec::new();
        while let Some(b) = r.next_block() {
            match b.map_err(err)? {
                Block::InterfaceDescription(i) => {
                    if i.linktype != DataLink::ETHERNET {
                        return Err(format!("{}: link type {:?}: not Ethernet", path.display(), i.linktype));
                    }
                    let mut t = 1_000_000u128;
                    for o in &i.options {
                        if let InterfaceDescriptionOption::IfTsResol(v) = o {
                            t = if v & 0x80 == 0 {
                                10u128.pow((*v as u32).min(18))
                            } else {
                                1u128 << (v & 0x7f).min(64)
                            };
                        }
                    }
                    ticks.push(t);
                }
                Block::EnhancedPacket(p) => {
                    let per_sec = ticks.get(p.interface_id as usize).copied().unwrap_or(1_000_000);
                    let raw = p.timestamp.as_nanos();
                    frames.push(Frame {
                        ts_ns: (raw * 1_000_000_000 / per_sec) as u64,
                        data: p.data.into_owned(),
                    });
                }
                Block::SimplePacket(p) => frames.push(Frame {
                    ts_ns: frames.last().map_or(0, |f: &Frame| f.ts_ns),
                    data: p.data.into_owned(),
                }),
                _ => {}
            }
        }
    } else {
        let mut r = pcap_file::pcap::PcapReader::new(&bytes[..]).map_err(err)?;
        let link = r.header().datalink;
        if link != DataLink::ETHERNET {
            return Err(format!("{}: link type {link:?}: not Ethernet", path.display()));
        }
        while let Some(p) = r.next_packet() {
            let p = p.map_err(err)?;
            frames.push(Frame {
                ts_ns: p.timestamp.as_nanos() as u64,
                data: p.data.into_owned(),
            });
        }
    }
    Ok(frames)
}

/// The flow key RSS would hash for a frame: IPv4/IPv6 addresses, and the ports of a TCP/UDP
/// datagram that is not a fragment (NICs hash fragments by addresses only); `None` for others.
fn flow_key(f: &[u8]) -> Option<Vec<u8>> {
    let ethertype = u16::from_be_bytes([*f.get(12)?, *f.get(13)?]);
    match ethertype {
        0x0800 => {
            let ihl = (*f.get(14)? as usize & 0xf) * 4;
            let frag = u16::from_be_bytes([*f.get(20)?, *f.get(21)?]) & 0x3fff != 0;
            let proto = *f.get(23)?;
            let mut k = f.get(26..34)?.to_vec();
            if !frag && (proto == 6 || proto == 17) {
                k.extend_from_slice(f.get(14 + ihl..18 + ihl)?);
            }
            Some(k)
        }
        0x86dd => {
            let mut k = f.get(22..54)?.to_vec();
            if matches!(f.get(20)?, 6 | 17) {
                k.extend_from_slice(f.get(54..58)?);
            }
            Some(k)
        }
        _ => None,
    }
}

/// The RX queue of `n` that frame number `i` (`f`) goes to, spread by flow as RSS spreads
/// flows (each flow to one queue); frames without a flow key (ARP, junk) round robin.
pub fn queue_of(f: &[u8], i: usize, n: usize) -> usize {
    match flow_key(f) {
        // FNV-1a, its well-mixed high half mapped onto 0..n (its low bits mix poorly).
        Some(k) => {
            let h = k.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
                (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
            });
            (((h >> 32) * n as u64) >> 32) as usize
        }
        None => i % n,
    }
}

/// `frames` over `n` RX queues by [`queue_of`].
pub fn split_by_flow(frames: Vec<Frame>, n: usize) -> Vec<Vec<Frame>> {
    let mut out: Vec<Vec<Frame>> = (0..n).map(|_| Vec::new()).collect();
    for (i, f) in frames.into_iter().enumerate() {
        let q = queue_of(&f.data, i, n.max(1));
        out[q].push(f);
    }
    out
}

/// What a replay's `now` follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// The capture's timestamps (from 1 s on, never 0).
    Capture,
    /// The machine's monotonic clock, read once a burst: the daemon replaying through
    /// `net_pcap`, as fast as it reads.
    Wall,
}

/// What a replay counted.
pub struct Replayed {
    /// Outcome counts, summed over the RX lcores (every outcome, 0s included).
    pub outcomes: BTreeMap<String, u64>,
    /// `fastpath_socket_processed_total` by result, summed over the sockets.
    pub processed: BTreeMap<String, u64>,
    /// The tunnels' counters as the daemon's metric series (`fastpath_gre_decap_total{tunnel="t1"}`).
    pub gre: BTreeMap<String, u64>,
    /// Trace records lost (none while the replay reads each burst's at once).
    pub lost: u64,
}

fn sim_queue(capacity: usize, _: QueueSync, _: Option<usize>) -> Result<SocketQueue, String> {
    Ok(SimQueue::new(capacity).into())
}

/// Records a replay's lcore ring holds: each is read after every burst and poll, which finish
/// at most a burst and the fragments a stop flushes.
const RING: usize = 4096;

/// What a traced replay hands each record to, with the tables that decided it.
pub type OnRecord<'a> = dyn FnMut(&Record, &Tables) + 'a;

type Lcore = (RxEngine<HeapBuf, HeapIo>, Arc<LcoreStats>);

/// Replays `queues` (one per RX lcore of `cfg`, all on port 0) through the engines. `idle_ms`:
/// the quiet time after the last frame before the clean stop (`None`: until no reassembly
/// timeout is pending). With `trace`, every packet is traced and its record handed to it
/// with the tables that decided it.
pub fn run(
    cfg: &Config,
    queues: &[Vec<Frame>],
    clock: Clock,
    idle_ms: Option<u64>,
    mut trace: Option<&mut OnRecord>,
) -> Replayed {
    let ports = cfg
        .ports
        .iter()
        .enumerate()
        .map(|(i, p)| OpenedPort {
            id: i as u16,
            mac: p.mac.unwrap_or_default(),
            kernel: None,
        })
        .collect();
    let mut builder = TableBuilder::with_queues(
        ports,
        cfg.lcores.rx.len(),
        cfg.lcores.workers.len(),
        Box::new(sim_queue),
    );
    let tables = Arc::new(builder.build(cfg, 1).expect("tables of a valid config"));
    assert_eq!(queues.len(), cfg.lcores.rx.len(), "one RX queue per RX lcore");
    let mut sessions = Vec::new();
    let mut lcores: Vec<Lcore> = (0..queues.len())
        .map(|slot| {
            let stats = Arc::new(LcoreStats::new(
                slot as u32,
                vec![QueueCounters::new(0, slot as u16)],
                vec![QueueCounters::new(0, 0)],
            ));
            if trace.is_some() {
                let s = Arc::new(TraceSession::new(Filter::default(), u64::MAX, RING));
                stats.trace.arm(s.clone());
                sessions.push(s);
            }
            let mut tx = Collect::new(0);
            tx.keep = false;
            // Kept, for the workers.
            let io = HeapIo {
                keep_delivered: true,
                ..Default::default()
            };
            let rx = RxEngine::new(tables.clone(), slot, vec![tx], io, stats.clone());
            (rx, stats)
        })
        .collect();
    let read = |trace: &mut Option<&mut OnRecord>, slot: usize| {
        if let (Some(f), Some(s)) = (trace.as_mut(), sessions.get(slot)) {
            while let Some(r) = s.ring.pop() {
                f(&r, &tables);
            }
        }
    };
    let t0 = queues
        .iter()
        .filter_map(|q| q.first())
        .map(|f| f.ts_ns)
        .min()
        .unwrap_or(0);
    let wall = std::time::Instant::now();
    let at = |ts: u64| match clock {
        Clock::Capture => Instant(1_000_000_000 + ts.saturating_sub(t0)),
        Clock::Wall => Instant(1_000_000_000 + wall.elapsed().as_nanos() as u64),
    };
    let bursts = queues.iter().map(|q| q.len().div_ceil(BURST)).max().unwrap_or(0);
    let mut last = Instant(1_000_000_000);
    for b in 0..bursts {
        for slot in 0..queues.len() {
            let Some(burst) = queues[slot].chunks(BURST).nth(b) else {
                continue;
            };
            let now = at(burst[0].ts_ns).max(last);
            last = now;
            let bufs = burst.iter().map(|f| {
                let mut buf = HeapBuf::new(&f.data);
                if f.data.len() > DATA_ROOM {
                    buf.set_segments(2);
                }
                buf
            });
            let rx = &mut lcores[slot].0;
            if trace.is_some() {
                let mut v: Vec<HeapBuf> = bufs.collect();
                rx.burst(0, 0, now, &mut v);
            } else {
                // One at a time, as the burst's traced variant does.
                for buf in bufs {
                    rx.receive(0, buf, now);
                }
                rx.end_burst();
            }
            rx.poll_done(now);
            read(&mut trace, slot);
        }
    }
    // Quiet time after the last packet, then the clean stop.
    let end = match idle_ms {
        Some(ms) => last.0 + ms * 1_000_000,
        None => lcores
            .iter()
            .filter_map(|(rx, _)| rx.next_deadline())
            .map(|d| d.0)
            .max()
            .unwrap_or(last.0)
            .max(last.0),
    };
    for (slot, (rx, _)) in lcores.iter_mut().enumerate() {
        while let Some(d) = rx.next_deadline().filter(|d| d.0 <= end) {
            rx.poll_done(d);
            read(&mut trace, slot);
        }
        rx.stop(Instant(end));
        read(&mut trace, slot);
    }
    let outcomes = Outcome::ALL
        .iter()
        .map(|o| {
            let n: u64 = lcores.iter().map(|(_, st)| st.outcomes[o.index()].get()).sum();
            (o.name().to_string(), n)
        })
        .collect();
    let lost = sessions
        .iter()
        .map(|s| s.lost.load(std::sync::atomic::Ordering::Relaxed))
        .sum();
    for (_, st) in &lcores {
        st.trace.disarm();
    }
    let processed = drain_in_workers(&tables, cfg.lcores.workers.len(), &mut lcores, Instant(end));
    let mut gre = BTreeMap::new();
    for t in &tables.tunnels {
        let c = &t.counters;
        for (family, n) in [
            ("encap", c.sum(|x| &x.encap)),
            ("decap", c.sum(|x| &x.decap)),
            ("seq_dropped", c.sum(|x| &x.seq_dropped)),
            ("too_big", c.sum(|x| &x.too_big)),
            ("handoff", c.sum(|x| &x.handed_off)),
            ("tx_full", c.sum(|x| &x.tx_full)),
        ] {
            gre.insert(format!("fastpath_gre_{family}_total{{tunnel=\"{}\"}}", t.name), n);
        }
    }
    Replayed {
        outcomes,
        processed,
        gre,
        lost,
    }
}

/// The workers' part of [`run`]: what the RX lcores' engines left in each socket and handed to
/// each sequence tunnel's owner, through one worker engine per worker slot until nothing is
/// left. Returns `fastpath_socket_processed_total` by result, summed over sockets.
fn drain_in_workers(tables: &Arc<Tables>, workers: usize, lcores: &mut [Lcore], now: Instant) -> BTreeMap<String, u64> {
    let mut engines: Vec<WorkerEngine<HeapBuf, HeapWorkerIo>> = (0..workers)
        .map(|slot| {
            let stats = Arc::new(LcoreStats::new(slot as u32, vec![], vec![QueueCounters::new(0, 1)]));
            let mut tx = Collect::new(0);
            tx.keep = false;
            WorkerEngine::new(
                tables.clone(),
                slot,
                vec![tx],
                HeapWorkerIo::default(),
                stats,
                1_000_000_000,
            )
        })
        .collect();
    for (slot, (rx, _)) in lcores.iter_mut().enumerate() {
        let io = rx.io_mut();
        for ((_, p), at) in io.delivered.drain(..).zip(io.delivered_to.drain(..)) {
            let Some(s) = tables.sockets.iter().find(|s| Arc::as_ptr(s).addr() == at) else {
                continue;
            };
            if let Some(w) = engines.get_mut(s.worker) {
                let _ = w.io_mut().place(s, slot, p);
            }
        }
        for (name, p) in io.handed_off.drain(..) {
            if let Some(t) = tables.tunnels.iter().find(|t| t.name == name) {
                if let Some(w) = engines.get_mut(t.owner) {
                    w.io_mut().hand(&name, p);
                }
            }
        }
    }
    // Workers hand sequence tunnels' packets to each other: until a round takes nothing.
    while engines.iter_mut().map(|w| w.poll(now).taken).sum::<usize>() > 0 {}
    for w in engines.iter_mut() {
        w.stop();
    }
    PROCESSED
        .iter()
        .map(|r| {
            let n: u64 = tables
                .sockets
                .iter()
                .map(|s| {
                    s.counters.sum(|c| match *r {
                        "echoed" => &c.echoed,
                        "sunk" => &c.sunk,
                        "kernel" => &c.kernel,
                        "tx_full" => &c.tx_full,
                        "invalid" => &c.invalid,
                        _ => &c.refused,
                    })
                })
                .sum();
            (r.to_string(), n)
        })
        .collect()
}

/// `fastpathd --config FILE --explain CAPTURE [--json]`: every frame of the capture through
/// the engines (on port 0, spread over the RX lcores by flow), one record per packet on
/// stdout, then the summary by outcome. Returns the exit code: 0 once the capture was read, 1
/// for a config or capture that cannot be read.
pub fn explain(config: &Path, capture: &Path, json: bool, clock: Clock, idle_ms: Option<u64>) -> u8 {
    use std::io::Write;
    let cfg = match crate::config::load(config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    let frames = match read_capture(capture) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("fastpathd: --explain: {e}");
            return 1;
        }
    };
    let n = frames.len();
    let queues = split_by_flow(frames, cfg.lcores.rx.len().max(1));
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    let mut records = 0u64;
    let mut print = |r: &Record, t: &Tables| {
        records += 1;
        let v = crate::trace::to_json(r, Some(t));
        let _ = if json {
            writeln!(out, "{v}")
        } else {
            writeln!(out, "{}", crate::trace::line(&v))
        };
    };
    let got = run(&cfg, &queues, clock, idle_ms, Some(&mut print));
    let counted: BTreeMap<&String, &u64> = got.outcomes.iter().filter(|(_, n)| **n > 0).collect();
    if json {
        let summary = serde_json::json!({
            "summary": {
                "frames": n,
                "records": records,
                "lost": got.lost,
                "outcomes": counted,
                "processed": got.processed.iter().filter(|(_, n)| **n > 0).collect::<BTreeMap<_, _>>(),
            }
        });
        let _ = writeln!(out, "{summary}");
    } else {
        let _ = writeln!(out, "\n{n} frames, {records} records");
        for (o, c) in &counted {
            let _ = writeln!(out, "  {o:<24} {c}");
        }
    }
    0
}
