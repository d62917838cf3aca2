//! The capture corpus (`configs/captures/corpus.toml`) replayed two ways:
//!
//! - `corpus_through_the_daemon`: every entry through the real fastpathd over DPDK `net_pcap`,
//!   one process per entry; checks every outcome count, the listed metric series, and tshark
//!   display-filter counts on each output queue's capture;
//! - `corpus_in_process`: every entry through the pipeline over heap buffers, no DPDK: the same
//!   config parsed by the daemon's own parser, the same tables built by the daemon's own
//!   builder (sockets are `SimQueue`s), the daemon's own RX engine, pcap timestamps as the
//!   clock; then the daemon's own worker engine drains the sockets, as workers do at a stop
//!   (a stalled worker until then). It checks the outcome counts, which RX lcores count, and
//!   `fastpath_socket_processed_total` by result, which workers count, and of the metric series
//!   the tunnels' (`fastpath_gre_*_total{tunnel}`); the output captures and the other metric
//!   series are the daemon runner's alone.
//!
//! Both print every mismatch of every entry at once, expected against got. `FASTPATH_CORPUS=a,b`
//! runs only the named entries; `FASTPATH_CORPUS_JOBS=N` daemons at a time (default 2).

mod common;

use common::*;
use control::config;
use control::replay::{self, Frame, PROCESSED};
use fastpath::outcome::Outcome;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

// ---------------------------------------------------------------------------------------------
// The manifest.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    capture: Vec<Entry>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct Entry {
    /// Unique; names the scratch directory and the EAL file prefix.
    name: String,
    /// Input capture, relative to `configs/captures/`.
    pcap: String,
    /// The daemon config without `[dpdk] eal_args` and `[metrics]` (the runner adds them). The
    /// one port must be `net_pcap0`; it gets one `tx_pcap` output per TX queue.
    config: String,
    /// `--exit-when-idle` for the daemon; also how long the in-process runner lets simulated
    /// time run on after the last packet (reassembly timeouts).
    #[serde(default = "default_idle")]
    idle_ms: u64,
    /// Every outcome that is not 0 (any outcome not listed must be 0).
    outcomes: BTreeMap<String, Count>,
    /// The in-process runner's outcomes, where they differ (its sockets are drained only once
    /// the capture is over).
    #[serde(default)]
    inproc_outcomes: Option<BTreeMap<String, Count>>,
    /// Every `fastpath_socket_processed_total` result that is not 0, summed over the sockets
    /// (any result not listed must be 0).
    #[serde(default)]
    processed: BTreeMap<String, Count>,
    /// The in-process runner's, where they differ.
    #[serde(default)]
    inproc_processed: Option<BTreeMap<String, Count>>,
    /// Metric series in the daemon's dump, e.g. `'fastpath_gre_decap_total{tunnel="t1"}' = 7`.
    #[serde(default)]
    metrics: BTreeMap<String, Count>,
    /// Display-filter counts on the daemon's output capture of each TX queue.
    #[serde(default)]
    output: Vec<OutputCheck>,
}

fn default_idle() -> u64 {
    300
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct OutputCheck {
    queue: usize,
    filter: String,
    count: Count,
}

/// An exact count, or bounds (`{ min = 396 }`, `{ max = 239 }`, both) for what depends on timing.
#[derive(Deserialize, Clone, Copy, Debug, PartialEq)]
#[serde(untagged)]
enum Count {
    Exact(u64),
    Range {
        #[serde(default)]
        min: Option<u64>,
        #[serde(default)]
        max: Option<u64>,
    },
}

impl Count {
    fn holds(self, n: u64) -> bool {
        match self {
            Count::Exact(e) => n == e,
            Count::Range { min, max } => min.is_none_or(|m| n >= m) && max.is_none_or(|m| n <= m),
        }
    }
}

impl std::fmt::Display for Count {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Count::Exact(e) => write!(f, "{e}"),
            Count::Range { min, max } => match (min, max) {
                (Some(a), Some(b)) => write!(f, "{a}..={b}"),
                (Some(a), None) => write!(f, ">= {a}"),
                (None, Some(b)) => write!(f, "<= {b}"),
                (None, None) => write!(f, "any"),
            },
        }
    }
}

fn captures_dir() -> PathBuf {
    repo().join("configs/captures")
}

/// The manifest's entries (only those named in `FASTPATH_CORPUS`, if set), checked for what
/// would make a run meaningless: unknown outcome names, duplicate names, missing captures.
fn entries() -> Vec<Entry> {
    let path = captures_dir().join("corpus.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let m: Manifest = toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut seen = std::collections::BTreeSet::new();
    for e in &m.capture {
        assert!(seen.insert(e.name.clone()), "corpus.toml: duplicate name {:?}", e.name);
        assert!(
            captures_dir().join(&e.pcap).is_file(),
            "corpus.toml: {}: no configs/captures/{}",
            e.name,
            e.pcap
        );
        for name in e.outcomes.keys().chain(e.inproc_outcomes.iter().flat_map(|o| o.keys())) {
            assert!(
                Outcome::ALL.iter().any(|o| o.name() == name),
                "corpus.toml: {}: no outcome {name:?}",
                e.name
            );
        }
        for name in e
            .processed
            .keys()
            .chain(e.inproc_processed.iter().flat_map(|o| o.keys()))
        {
            assert!(
                PROCESSED.contains(&name.as_str()),
                "corpus.toml: {}: no processed result {name:?}",
                e.name
            );
        }
    }
    let only: Option<Vec<String>> = std::env::var("FASTPATH_CORPUS")
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
    m.capture
        .into_iter()
        .filter(|e| only.as_ref().is_none_or(|o| o.contains(&e.name)))
        .collect()
}

/// The entry's port's RX queues (`[[port]] rx_queues`, default 1).
fn rx_queues(e: &Entry) -> usize {
    let t: toml::Table = toml::from_str(&e.config).unwrap_or_else(|err| panic!("{}: config: {err}", e.name));
    t.get("port")
        .and_then(|p| p.as_array())
        .and_then(|p| p.first())
        .and_then(|p| p.get("rx_queues"))
        .and_then(|q| q.as_integer())
        .unwrap_or(1) as usize
}

/// The captures each RX queue replays: the entry's capture, or with several RX queues (and so
/// several RX lcores) the capture split over them by flow as RSS would, written into `s`.
fn inputs(e: &Entry, s: &Scratch) -> Vec<PathBuf> {
    let n = rx_queues(e);
    let whole = captures_dir().join(&e.pcap);
    if n == 1 {
        return vec![whole];
    }
    split_by_flow(&whole, n)
        .into_iter()
        .enumerate()
        .map(|(q, (bytes, _))| s.write_bytes(&format!("in{q}.pcap"), &bytes))
        .collect()
}

/// The entry's full daemon config: its `config` plus `[dpdk] eal_args` (net_pcap0 reading
/// `inputs`, one per RX queue, and one `tx_pcap` per TX queue into `outputs`) and an ephemeral
/// metrics port.
fn full_config(e: &Entry, inputs: &[PathBuf], outputs: &dyn Fn(usize) -> PathBuf) -> (String, usize) {
    let mut t: toml::Table = toml::from_str(&e.config).unwrap_or_else(|err| panic!("{}: config: {err}", e.name));
    let tx_queues =
        t.get("port")
            .and_then(|p| p.as_array())
            .filter(|p| p.len() == 1)
            .and_then(|p| p[0].get("tx_queues"))
            .and_then(|q| q.as_integer())
            .unwrap_or_else(|| panic!("{}: config needs exactly one [[port]] with tx_queues", e.name)) as usize;
    let mut vdev = "--vdev=net_pcap0".to_string();
    for i in inputs {
        write!(vdev, ",rx_pcap={}", i.display()).unwrap();
    }
    for q in 0..tx_queues {
        write!(vdev, ",tx_pcap={}", outputs(q).display()).unwrap();
    }
    let eal: toml::Value =
        toml::from_str::<toml::Table>(&format!("a = {}", eal_args(&format!("corpus-{}", e.name), &[vdev])))
            .unwrap()
            .remove("a")
            .unwrap();
    let dpdk = t
        .entry("dpdk")
        .or_insert_with(|| toml::Value::Table(Default::default()))
        .as_table_mut()
        .unwrap();
    assert!(!dpdk.contains_key("eal_args"), "{}: the runner sets eal_args", e.name);
    dpdk.insert("eal_args".into(), eal);
    assert!(!t.contains_key("metrics"), "{}: the runner sets [metrics]", e.name);
    t.insert(
        "metrics".into(),
        toml::Value::Table(toml::from_str("listen = \"127.0.0.1:0\"").unwrap()),
    );
    // The control socket in the scratch directory: corpus entries run in parallel.
    t.insert(
        "control".into(),
        toml::Value::Table(toml::from_str("socket = \"control.sock\"").unwrap()),
    );
    (toml::to_string(&t).unwrap(), tx_queues)
}

// ---------------------------------------------------------------------------------------------
// Comparing.

/// Every outcome expected or counted, one line each; mismatches marked. Empty if all match.
fn diff_outcomes(want: &BTreeMap<String, Count>, got: &BTreeMap<String, u64>, table: &mut String) -> bool {
    let mut bad = false;
    let mut lines = String::new();
    for o in Outcome::ALL {
        let name = o.name();
        let w = want.get(name).copied().unwrap_or(Count::Exact(0));
        let g = got.get(name).copied().unwrap_or(0);
        let ok = w.holds(g);
        bad |= !ok;
        if !ok || w != Count::Exact(0) || g != 0 {
            let mark = if ok { "" } else { "   <-- MISMATCH" };
            writeln!(lines, "    {name:<22} {:>12} {g:>8}{mark}", w.to_string()).unwrap();
        }
    }
    if bad {
        writeln!(table, "    {:<22} {:>12} {:>8}", "outcome", "expected", "got").unwrap();
        table.push_str(&lines);
    }
    bad
}

/// Every processed result expected or counted, one line each; mismatches marked.
fn diff_processed(want: &BTreeMap<String, Count>, got: &BTreeMap<String, u64>, table: &mut String) -> bool {
    let mut bad = false;
    let mut lines = String::new();
    for name in PROCESSED {
        let w = want.get(name).copied().unwrap_or(Count::Exact(0));
        let g = got.get(name).copied().unwrap_or(0);
        let ok = w.holds(g);
        bad |= !ok;
        if !ok || w != Count::Exact(0) || g != 0 {
            let mark = if ok { "" } else { "   <-- MISMATCH" };
            writeln!(lines, "    {name:<22} {:>12} {g:>8}{mark}", w.to_string()).unwrap();
        }
    }
    if bad {
        writeln!(table, "    {:<22} {:>12} {:>8}", "socket processed", "expected", "got").unwrap();
        table.push_str(&lines);
    }
    bad
}

fn report(failures: &[String]) {
    if !failures.is_empty() {
        panic!(
            "{} corpus entr{} failed:\n\n{}",
            failures.len(),
            if failures.len() == 1 { "y" } else { "ies" },
            failures.join("\n")
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Runner A: the real daemon.

#[test]
fn corpus_through_the_daemon() {
    if missing(&["tshark"]) {
        return;
    }
    let jobs: usize = std::env::var("FASTPATH_CORPUS_JOBS")
        .ok()
        .and_then(|j| j.parse().ok())
        .unwrap_or(2)
        .max(1);
    let queue = Mutex::new(entries());
    let failures = Mutex::new(Vec::new());
    let t = std::time::Instant::now();
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let Some(e) = queue.lock().unwrap().pop() else { break };
                let t = std::time::Instant::now();
                let r = std::panic::catch_unwind(|| daemon_run(&e))
                    .unwrap_or_else(|p| Some(format!("  panicked: {:?}\n", p.downcast_ref::<String>())));
                eprintln!("corpus {}: daemon run {:.1} s", e.name, t.elapsed().as_secs_f64());
                if let Some(r) = r {
                    failures
                        .lock()
                        .unwrap()
                        .push(format!("capture {:?} ({}), through the daemon:\n{r}", e.name, e.pcap));
                }
            });
        }
    });
    eprintln!("corpus through the daemon: {:.1} s", t.elapsed().as_secs_f64());
    report(&failures.into_inner().unwrap());
}

/// Runs one entry through fastpathd; `Some(what differs)` on failure.
fn daemon_run(e: &Entry) -> Option<String> {
    let s = Scratch::new(&format!("corpus-{}", e.name));
    let out = |q: usize| s.path(&format!("q{q}.pcap"));
    let (cfg_text, tx_queues) = full_config(e, &inputs(e, &s), &out);
    let cfg = s.write("c.toml", &cfg_text);
    let dump = s.path("metrics.prom");
    let run = fastpathd()
        .args([
            "--config",
            cfg.to_str().unwrap(),
            "--exit-when-idle",
            &e.idle_ms.to_string(),
            "--metrics-dump",
            dump.to_str().unwrap(),
        ])
        .output()
        .expect("run fastpathd");
    if run.status.code() != Some(0) {
        return Some(format!(
            "  fastpathd exited {:?}:\n{}\n",
            run.status.code(),
            String::from_utf8_lossy(&run.stderr)
        ));
    }
    let m = parse_metrics(&std::fs::read_to_string(&dump).unwrap());
    let mut diff = String::new();

    let frames = read_pcap(&captures_dir().join(&e.pcap)).len() as u64;
    let rx = family_sum(&m, "fastpath_rx_packets_total") as u64;
    let counted = family_sum(&m, "fastpath_packets_total") as u64;
    if rx != frames || counted != frames {
        writeln!(
            diff,
            "  {frames} frames in the capture, {rx} received, {counted} counted in outcomes"
        )
        .unwrap();
    }
    // No amplification: bytes out never exceed bytes in, but for the headers an ICMP error puts
    // around its quote and a tunnel's encapsulation (at most 48 bytes each: IPv6 + ICMPv6, or
    // outer IPv4 + GRE with key, checksum and sequence number). Every capture is an attack class
    // or a mix of them, so this holds for each.
    let (rx_bytes, tx_bytes) = (
        family_sum(&m, "fastpath_rx_bytes_total"),
        family_sum(&m, "fastpath_tx_bytes_total"),
    );
    let headers = family_sum(&m, "fastpath_icmp_sent_total") + family_sum(&m, "fastpath_gre_encap_total");
    if tx_bytes > rx_bytes + 48.0 * headers {
        writeln!(
            diff,
            "  amplification: {tx_bytes} bytes sent for {rx_bytes} received ({headers} errors and encapsulations)"
        )
        .unwrap();
    }
    if m.get("fastpath_mbufs_in_use").copied() != Some(0.0) {
        writeln!(diff, "  mbufs in use at exit: {:?}", m.get("fastpath_mbufs_in_use")).unwrap();
    }
    let got: BTreeMap<String, u64> = Outcome::ALL
        .iter()
        .map(|o| (o.name().to_string(), outcome(&m, o.name())))
        .collect();
    let nonzero: Vec<String> = got
        .iter()
        .filter(|(_, &n)| n > 0)
        .map(|(o, n)| format!("{o} {n}"))
        .collect();
    eprintln!(
        "corpus {}: {}; {rx_bytes} bytes in, {tx_bytes} out",
        e.name,
        nonzero.join(", ")
    );
    diff_outcomes(&e.outcomes, &got, &mut diff);
    let processed: BTreeMap<String, u64> = PROCESSED
        .iter()
        .map(|r| {
            let n: f64 = m
                .iter()
                .filter(|(k, _)| {
                    k.starts_with("fastpath_socket_processed_total{") && k.contains(&format!("result=\"{r}\""))
                })
                .map(|(_, v)| v)
                .sum();
            (r.to_string(), n as u64)
        })
        .collect();
    diff_processed(&e.processed, &processed, &mut diff);

    let mut series = String::new();
    for (k, w) in &e.metrics {
        let g = m.get(k).copied();
        if !g.is_some_and(|g| w.holds(g as u64)) {
            let g = g.map_or("absent".to_string(), |g| g.to_string());
            writeln!(series, "    {k:<60} {:>12} {g:>8}   <-- MISMATCH", w.to_string()).unwrap();
        }
    }
    if !series.is_empty() {
        writeln!(diff, "    {:<60} {:>12} {:>8}", "metric", "expected", "got").unwrap();
        diff.push_str(&series);
    }

    let mut filters = String::new();
    for q in 0..tx_queues {
        let checks: Vec<&OutputCheck> = e.output.iter().filter(|c| c.queue == q).collect();
        if checks.is_empty() {
            continue;
        }
        let names: Vec<&str> = checks.iter().map(|c| c.filter.as_str()).collect();
        let counts = match filter_counts(&out(q), &names) {
            Ok(c) => c,
            Err(err) => {
                writeln!(diff, "  queue {q}: {err}").unwrap();
                continue;
            }
        };
        for (c, g) in checks.iter().zip(counts) {
            if !c.count.holds(g) {
                let f = format!("q{q}: {}", c.filter);
                writeln!(filters, "    {f:<60} {:>12} {g:>8}   <-- MISMATCH", c.count.to_string()).unwrap();
            }
        }
    }
    if let Some(c) = e.output.iter().find(|c| c.queue >= tx_queues) {
        writeln!(
            diff,
            "  output check on queue {} but the port has {tx_queues} TX queues",
            c.queue
        )
        .unwrap();
    }
    if !filters.is_empty() {
        writeln!(diff, "    {:<60} {:>12} {:>8}", "output filter", "expected", "got").unwrap();
        diff.push_str(&filters);
    }
    if diff.is_empty() {
        None
    } else {
        if std::env::var_os("FASTPATH_KEEP_SCRATCH").is_some() {
            writeln!(diff, "  (files kept in {})", s.0.display()).unwrap();
        }
        Some(diff)
    }
}

/// How many frames of `pcap` match each display filter, in one tshark pass (`-z io,stat`; a
/// filter with a comma, which io,stat cannot take, gets a pass of its own). IPv4, UDP and TCP
/// checksum validation is on, so filters may use `*.checksum.status`.
fn filter_counts(pcap: &Path, filters: &[&str]) -> Result<Vec<u64>, String> {
    if read_pcap(pcap).is_empty() {
        return Ok(vec![0; filters.len()]);
    }
    let (plain, comma): (Vec<usize>, Vec<usize>) = (0..filters.len()).partition(|&i| !filters[i].contains(','));
    let mut counts = vec![0; filters.len()];
    if !plain.is_empty() {
        let list: Vec<&str> = plain.iter().map(|&i| filters[i]).collect();
        // io,stat prints no row for a capture whose frames all share one timestamp (a single
        // frame, say): count those filter by filter instead.
        let got = match io_stat(pcap, &list) {
            Ok(got) => got,
            Err(_) => list
                .iter()
                .map(|f| tshark_checked(pcap, f, &["frame.number"]).len() as u64)
                .collect(),
        };
        for (i, g) in plain.into_iter().zip(got) {
            counts[i] = g;
        }
    }
    for i in comma {
        counts[i] = tshark_checked(pcap, filters[i], &["frame.number"]).len() as u64;
    }
    Ok(counts)
}

fn io_stat(pcap: &Path, filters: &[&str]) -> Result<Vec<u64>, String> {
    let out = std::process::Command::new("tshark")
        .arg("-r")
        .arg(pcap)
        .args([
            "-q",
            "-o",
            "ip.check_checksum:TRUE",
            "-o",
            "udp.check_checksum:TRUE",
            "-o",
            "tcp.check_checksum:TRUE",
            "-z",
        ])
        .arg(format!("io,stat,0,{}", filters.join(",")))
        .output()
        .map_err(|e| format!("tshark is needed (apt-get install -y tshark; ci/setup does it): {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "tshark failed on {}: {}{text}",
            pcap.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    // The one interval row: "| 0.000 <> 0.021 |     12 |   500 |     11 |   458 |" — frames
    // and bytes per filter.
    let row = text
        .lines()
        .find(|l| l.contains("<>"))
        .ok_or_else(|| format!("no io,stat row from tshark:\n{text}"))?;
    let cells: Vec<&str> = row.split('|').map(str::trim).filter(|c| !c.is_empty()).collect();
    let frames: Vec<u64> = cells
        .iter()
        .skip(1)
        .step_by(2)
        .map(|c| c.parse().map_err(|_| format!("bad io,stat row {row:?}")))
        .collect::<Result<_, _>>()?;
    if frames.len() != filters.len() {
        return Err(format!(
            "io,stat gave {} columns for {} filters:\n{text}",
            frames.len(),
            filters.len()
        ));
    }
    Ok(frames)
}

fn read_pcap(path: &Path) -> Vec<Frame> {
    replay::read_capture(path).unwrap_or_else(|e| panic!("{e}"))
}

// ---------------------------------------------------------------------------------------------
// Runner B: in process, no DPDK.

#[test]
fn corpus_in_process() {
    let t = std::time::Instant::now();
    let mut failures = Vec::new();
    for e in entries() {
        let s = Scratch::new(&format!("corpus-inproc-{}", e.name));
        let queues = inputs(&e, &s);
        let (text, _) = full_config(&e, &queues, &|q| PathBuf::from(format!("/dev/null/q{q}")));
        let cfg = match config::parse(&text, &format!("corpus.toml:{}", e.name)) {
            Ok(c) => c,
            Err(err) => {
                failures.push(format!("capture {:?}: bad config:\n{err}\n", e.name));
                continue;
            }
        };
        let frames: Vec<Vec<Frame>> = queues
            .iter()
            .map(|q| replay::read_capture(q).unwrap_or_else(|e| panic!("{e}")))
            .collect();
        let (got, processed, gre) = in_process(&cfg, &frames, e.idle_ms);
        let total: u64 = got.values().sum();
        let mut diff = String::new();
        let sent: usize = frames.iter().map(Vec::len).sum();
        if total != sent as u64 {
            writeln!(diff, "  {sent} frames, {total} outcomes").unwrap();
        }
        diff_outcomes(e.inproc_outcomes.as_ref().unwrap_or(&e.outcomes), &got, &mut diff);
        diff_processed(
            e.inproc_processed.as_ref().unwrap_or(&e.processed),
            &processed,
            &mut diff,
        );
        // Of the metric series, the tunnels' counters (RX lcores' and workers').
        for (k, w) in &e.metrics {
            if let Some(&g) = gre.get(k) {
                if !w.holds(g) {
                    writeln!(diff, "    {k:<60} {:>12} {g:>8}   <-- MISMATCH", w.to_string()).unwrap();
                }
            }
        }
        if !diff.is_empty() {
            failures.push(format!("capture {:?} ({}), in process:\n{diff}", e.name, e.pcap));
        }
    }
    eprintln!("corpus in process: {:.2} s", t.elapsed().as_secs_f64());
    report(&failures);
}

/// [`control::replay::run`] over the entry's frames: capture timestamps as the clock, `idle_ms`
/// of quiet time, no trace.
fn in_process(
    cfg: &config::Config,
    queues: &[Vec<Frame>],
    idle_ms: u64,
) -> (BTreeMap<String, u64>, BTreeMap<String, u64>, BTreeMap<String, u64>) {
    let r = replay::run(cfg, queues, replay::Clock::Capture, Some(idle_ms), None);
    (r.outcomes, r.processed, r.gre)
}

// ---------------------------------------------------------------------------------------------
// Runner C: `fastpathd --explain --json`, whose records must count what the runners count.

#[test]
fn corpus_explained() {
    let mut failures = Vec::new();
    for e in entries() {
        let s = Scratch::new(&format!("corpus-explain-{}", e.name));
        let whole = captures_dir().join(&e.pcap);
        let (text, _) = full_config(&e, std::slice::from_ref(&whole), &|q| {
            PathBuf::from(format!("/dev/null/q{q}"))
        });
        let cfg = s.write("fastpathd.toml", &text);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_fastpathd"))
            .arg("--config")
            .arg(&cfg)
            .arg("--explain")
            .arg(&whole)
            .args(["--json", "--capture-time", "--exit-when-idle", &e.idle_ms.to_string()])
            .output()
            .expect("fastpathd runs");
        if !out.status.success() {
            failures.push(format!(
                "capture {:?}: --explain exit {:?}: {}",
                e.name,
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            ));
            continue;
        }
        let mut got: BTreeMap<String, u64> = BTreeMap::new();
        let mut summary = None;
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("one JSON object a line");
            if let Some(sum) = v.get("summary").filter(|s| s.is_object()) {
                summary = Some(sum.clone());
                continue;
            }
            assert!(v["lcore"].is_u64(), "{line}");
            assert!(v["stages"].as_array().is_some_and(|a| !a.is_empty()), "{line}");
            *got.entry(v["outcome"].as_str().expect("outcome").to_string())
                .or_default() += 1;
        }
        let summary = summary.expect("a summary line");
        let mut diff = String::new();
        let frames = summary["frames"].as_u64().unwrap_or(0);
        let total: u64 = got.values().sum();
        if total != frames {
            writeln!(diff, "  {frames} frames, {total} records").unwrap();
        }
        if summary["lost"] != 0 {
            writeln!(diff, "  {} records lost", summary["lost"]).unwrap();
        }
        let counted: BTreeMap<String, u64> = summary["outcomes"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
            .collect();
        if counted != got {
            writeln!(diff, "  records {got:?}\n  counted {counted:?}").unwrap();
        }
        diff_outcomes(e.inproc_outcomes.as_ref().unwrap_or(&e.outcomes), &got, &mut diff);
        if !diff.is_empty() {
            failures.push(format!("capture {:?} ({}), explained:\n{diff}", e.name, e.pcap));
        }
    }
    report(&failures);
}
