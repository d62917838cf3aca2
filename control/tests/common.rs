//! Helpers for tests that run the real fastpathd over DPDK vdevs, each in its own process
//! (EAL initialises once per process).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// A fresh scratch directory for one test, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("fastpath-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
    pub fn write_bytes(&self, f: &str, bytes: &[u8]) -> PathBuf {
        let p = self.path(f);
        std::fs::write(&p, bytes).unwrap();
        p
    }
    pub fn path(&self, f: &str) -> PathBuf {
        self.0.join(f)
    }
    /// Writes a file and returns its path.
    pub fn write(&self, f: &str, text: &str) -> PathBuf {
        let p = self.path(f);
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // FASTPATH_KEEP_SCRATCH=1 keeps a failed test's files for a look.
        if std::env::var_os("FASTPATH_KEEP_SCRATCH").is_none() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The daemon binary.
pub fn fastpathd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fastpathd"))
}

/// Runs the daemon and shows its stderr when the test fails.
pub fn run(args: &[&str]) -> Output {
    let out = fastpathd().args(args).output().expect("run fastpathd");
    eprintln!(
        "--- fastpathd {args:?} exit {:?}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs fastpathd on `cfg` until no packet arrived for `idle_ms`, checks it stopped cleanly, and
/// returns the metrics it dumped at exit.
pub fn run_to_idle(s: &Scratch, cfg: &Path, idle_ms: u32) -> BTreeMap<String, f64> {
    let dump = s.path("metrics.prom");
    let idle = idle_ms.to_string();
    let out = run(&[
        "--config",
        cfg.to_str().unwrap(),
        "--exit-when-idle",
        &idle,
        "--metrics-dump",
        dump.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "fastpathd exit code; its log:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse_metrics(&std::fs::read_to_string(&dump).unwrap())
}

/// Parses a Prometheus text dump into `series -> value`, e.g.
/// `fastpath_packets_total{outcome="malformed"} -> 5`.
pub fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap();
        m.insert(series.to_string(), value.parse().unwrap());
    }
    m
}

/// Sum of every series of `family`.
pub fn family_sum(m: &BTreeMap<String, f64>, family: &str) -> f64 {
    m.iter()
        .filter(|(k, _)| k.as_str() == family || k.starts_with(&format!("{family}{{")))
        .map(|(_, v)| v)
        .sum()
}

/// `fastpath_packets_total{outcome="NAME"}`.
pub fn outcome(m: &BTreeMap<String, f64>, name: &str) -> u64 {
    m.get(&format!("fastpath_packets_total{{outcome=\"{name}\"}}"))
        .copied()
        .unwrap_or(0.0) as u64
}

/// Asserts the conservation invariant: every received packet has exactly one outcome.
pub fn assert_conservation(m: &BTreeMap<String, f64>) -> u64 {
    let rx = family_sum(m, "fastpath_rx_packets_total");
    let outcomes = family_sum(m, "fastpath_packets_total");
    assert_eq!(rx, outcomes, "sum(rx) must equal sum(outcomes)");
    assert_eq!(
        family_sum(m, "fastpath_port_rx_packets_total"),
        rx,
        "the ports' own count of packets received equals the lcores' (the NIC's counters are exported)"
    );
    assert_eq!(
        m.get("fastpath_mbufs_in_use").copied(),
        Some(0.0),
        "every mbuf returned to the pool at exit"
    );
    rx as u64
}

/// Runs tshark on a capture and returns one Vec of fields per packet.
pub fn tshark_fields(pcap: &Path, filter: &str, fields: &[&str]) -> Vec<Vec<String>> {
    tshark(pcap, filter, fields, &[])
}

/// Like [`tshark_fields`], with IPv4/UDP/TCP checksum validation turned on (ICMP and ICMPv6
/// checksums are always validated): `*.checksum.status` is 1 when good, 0 when bad.
pub fn tshark_checked(pcap: &Path, filter: &str, fields: &[&str]) -> Vec<Vec<String>> {
    tshark(
        pcap,
        filter,
        fields,
        &[
            "-o",
            "ip.check_checksum:TRUE",
            "-o",
            "udp.check_checksum:TRUE",
            "-o",
            "tcp.check_checksum:TRUE",
        ],
    )
}

fn tshark(pcap: &Path, filter: &str, fields: &[&str], opts: &[&str]) -> Vec<Vec<String>> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r")
        .arg(pcap)
        .args(opts)
        .args(["-T", "fields", "-E", "separator=|"]);
    if !filter.is_empty() {
        cmd.args(["-Y", filter]);
    }
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd
        .output()
        .expect("tshark is needed for this test: apt-get install -y tshark (ci/setup does it)");
    assert!(
        out.status.success(),
        "tshark failed on {}: {}",
        pcap.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.split('|').map(String::from).collect())
        .collect()
}

/// Number of packets in a capture, by tshark.
pub fn packet_count(pcap: &Path) -> usize {
    tshark_fields(pcap, "", &["frame.number"]).len()
}

/// Splits the classic little-endian pcap at `path` into `n` pcaps, one per RX queue, the way RSS
/// spreads flows: each frame to the queue its flow hashes to, frames without a flow key (ARP,
/// junk) round robin. Returns each pcap's bytes and how many frames it got.
pub fn split_by_flow(path: &Path, n: usize) -> Vec<(Vec<u8>, usize)> {
    let data = std::fs::read(path).unwrap();
    assert_eq!(
        &data[..4],
        &[0xd4, 0xc3, 0xb2, 0xa1],
        "{}: a little-endian pcap",
        path.display()
    );
    let mut out: Vec<(Vec<u8>, usize)> = (0..n).map(|_| (data[..24].to_vec(), 0)).collect();
    let (mut off, mut i) = (24, 0usize);
    while off + 16 <= data.len() {
        let caplen = u32::from_le_bytes(data[off + 8..off + 12].try_into().unwrap()) as usize;
        let rec = &data[off..off + 16 + caplen];
        let q = control::replay::queue_of(&rec[16..], i, n);
        out[q].0.extend_from_slice(rec);
        out[q].1 += 1;
        off += 16 + caplen;
        i += 1;
    }
    out
}

/// EAL arguments for tests: no hugepages, no PCI, a unique file prefix.
pub fn eal_args(name: &str, vdevs: &[String]) -> String {
    let mut v = vec![
        "--no-huge".to_string(),
        "-m".into(),
        "256".into(),
        "--no-pci".into(),
        "--no-shconf".into(),
        format!("--file-prefix=fpt-{name}-{}", std::process::id()),
        "--no-telemetry".into(),
        "--log-level=lib.eal:warning".into(),
    ];
    v.extend(vdevs.iter().cloned());
    format!(
        "[{}]",
        v.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ")
    )
}

/// `[control] socket` for tests: in the config's own directory (a relative path is taken from
/// there), so daemons of tests running in parallel never share one.
pub const CONTROL_HERE: &str = "\n[control]\nsocket = \"control.sock\"\n";

/// `[metrics]` for tests: an ephemeral loopback port, so tests can run in parallel; after
/// [`CONTROL_HERE`]'s section (keys written after it still go into `[metrics]`).
pub const METRICS_ANY_PORT: &str = "\n[control]\nsocket = \"control.sock\"\n\n[metrics]\nlisten = \"127.0.0.1:0\"\n";

/// A running daemon whose stderr goes to a file.
pub struct Daemon {
    pub child: Child,
    pub log: PathBuf,
    pub metrics: Option<SocketAddr>,
}

impl Daemon {
    /// Starts `fastpathd args...` and waits until it runs (and serves metrics, if enabled).
    pub fn start(s: &Scratch, args: &[&str]) -> Daemon {
        let mut cmd = fastpathd();
        cmd.args(args);
        Self::start_cmd(s, &mut cmd)
    }

    /// Like [`Daemon::start`] for a prepared command (e.g. under `ip netns exec`).
    pub fn start_cmd(s: &Scratch, cmd: &mut Command) -> Daemon {
        let log = s.path("daemon.log");
        let f = std::fs::File::create(&log).unwrap();
        let child = cmd.stderr(f).spawn().expect("spawn fastpathd");
        let mut d = Daemon {
            child,
            log,
            metrics: None,
        };
        let t = Instant::now();
        loop {
            let text = d.log_text();
            if let Some(i) = text.find("metrics on http://") {
                // The line may still be half written.
                let rest = &text[i + "metrics on http://".len()..];
                if let Some(end) = rest.find("/metrics") {
                    d.metrics = Some(rest[..end].parse().unwrap());
                }
            }
            if text.contains("fastpathd: running") {
                return d;
            }
            if let Ok(Some(st)) = d.child.try_wait() {
                panic!("fastpathd exited early ({st}):\n{text}");
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "fastpathd did not start:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// GET `path` from the metrics endpoint: (status line, body).
    pub fn get(&self, path: &str) -> (String, String) {
        http_get(self.metrics.expect("metrics enabled"), path)
    }

    /// Scrapes and parses /metrics.
    pub fn scrape(&self) -> BTreeMap<String, f64> {
        let (status, body) = self.get("/metrics");
        assert!(status.contains("200"), "{status}");
        parse_metrics(&body)
    }

    /// Scrapes and parses /metrics of a daemon running in namespace `ns` (whose loopback the
    /// test's is not).
    pub fn scrape_in(&self, ns: &str) -> BTreeMap<String, f64> {
        const GET: &str = "import sys, urllib.request\n\
            sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())\n";
        let url = format!("http://{}/metrics", self.metrics.expect("metrics enabled"));
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "/usr/bin/python3", "-c", GET, &url])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        parse_metrics(&String::from_utf8_lossy(&out.stdout))
    }

    /// SIGTERM, wait, and return the exit code and the log.
    pub fn stop(mut self) -> (Option<i32>, String) {
        self.signal("TERM");
        let t = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                let log = self.log_text();
                eprintln!("--- fastpathd log\n{log}");
                return (st.code(), log);
            }
            assert!(t.elapsed() < Duration::from_secs(20), "fastpathd did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP/1.1 GET: (status line, body).
pub fn http_get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    (head.lines().next().unwrap_or("").to_string(), body.to_string())
}

/// Polls `cond` every 10 ms until it holds or `secs` pass.
pub fn wait_for(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < Duration::from_secs(secs), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `ip ARGS` (iproute2), which must succeed.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("iproute2 is needed (ci/setup installs it)");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `cmd` in network namespace `ns` and logs what it printed (shown when a test fails).
pub fn ns_exec(ns: &str, cmd: &[&str]) -> Output {
    let out = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(cmd)
        .output()
        .unwrap();
    eprintln!(
        "--- [{ns}] {cmd:?}: {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A DPDK file prefix on hugepages for one test: checks that the machine has enough free
/// (ci/setup allocates them; a test calls `missing(&["hugepages"])` first) and removes what
/// the EAL leaves behind under that prefix (its hugepage files and runtime directory) on drop.
pub struct HugePrefix {
    pub prefix: String,
}

impl HugePrefix {
    /// `min_free_mb` of free hugepages are needed.
    pub fn new(name: &str, min_free_mb: u64) -> HugePrefix {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
        let field = |k: &str| -> u64 {
            meminfo
                .lines()
                .find_map(|l| l.strip_prefix(k))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        let free_mb = field("HugePages_Free:") * field("Hugepagesize:") / 1024;
        let mounted = std::fs::read_to_string("/proc/mounts")
            .unwrap()
            .lines()
            .any(|l| l.split_whitespace().nth(2) == Some("hugetlbfs"));
        assert!(
            mounted && free_mb >= min_free_mb,
            "this test runs DPDK on hugepages and needs {min_free_mb} MiB free of them (free: {free_mb} MiB, \
             hugetlbfs mounted: {mounted}); run ci/setup as root, which allocates and mounts them"
        );
        HugePrefix {
            prefix: format!("fpt-{name}-{}", std::process::id()),
        }
    }

    /// EAL arguments for tests on hugepages: no PCI, the prefix, quiet EAL; the shared runtime
    /// directory is kept (what DPDK's own tools attach to).
    pub fn eal_args(&self, vdevs: &[String]) -> String {
        let mut v = vec![
            "--no-pci".to_string(),
            format!("--file-prefix={}", self.prefix),
            "--no-telemetry".into(),
            "--log-level=lib.eal:warning".into(),
        ];
        v.extend(vdevs.iter().cloned());
        format!(
            "[{}]",
            v.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ")
        )
    }
}

impl HugePrefix {
    /// What a run under this prefix left: hugepage files and the runtime directory.
    pub fn leftovers(&self) -> Vec<PathBuf> {
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        let mut out: Vec<PathBuf> = mounts
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.get(2) == Some(&"hugetlbfs")).then(|| f[1].to_string())
            })
            .filter_map(|dir| std::fs::read_dir(dir).ok())
            .flat_map(|rd| rd.flatten())
            .filter(|e| e.file_name().to_string_lossy().starts_with(&self.prefix))
            .map(|e| e.path())
            .collect();
        let run = PathBuf::from(format!("/var/run/dpdk/{}", self.prefix));
        if run.exists() {
            out.push(run);
        }
        out
    }
}

impl Drop for HugePrefix {
    fn drop(&mut self) {
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        let dirs = mounts.lines().filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"hugetlbfs")).then(|| f[1].to_string())
        });
        for dir in dirs {
            if let Ok(rd) = std::fs::read_dir(&dir) {
                for e in rd.flatten() {
                    if e.file_name().to_string_lossy().starts_with(&self.prefix) {
                        let _ = std::fs::remove_file(e.path());
                    }
                }
            }
        }
        let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/{}", self.prefix));
    }
}

/// Captures every frame on an interface into a pcap from the moment `start` returns until `stop`,
/// with nothing lost at either end (dumpcap reports "Capturing" before its socket is bound and
/// drops what it has not written when signalled): a packet socket bound to the interface, written
/// and flushed frame by frame, drained on SIGTERM.
pub const CAPTURE_PY: &str = r#"
import select, signal, socket, struct, sys, time
iface, path = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)   # protocol 0: no frame before bind
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
s.bind((iface, 3))                                       # ETH_P_ALL on this interface only
f = open(path, 'wb')
f.write(struct.pack('<IHHiIII', 0xa1b2c3d4, 2, 4, 0, 0, 65535, 1))
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
def take():
    data = s.recv(65535)
    t = time.time()
    f.write(struct.pack('<IIII', int(t), int(t % 1 * 1e6), len(data), len(data)) + data)
    f.flush()
print('ready', flush=True)
while not stop:
    if select.select([s], [], [], 0.05)[0]:
        take()
s.setblocking(False)
while True:
    try:
        take()
    except BlockingIOError:
        break
f.close()
"#;

pub struct Capture {
    child: Child,
    pcap: PathBuf,
}

impl Capture {
    pub fn start(ns: &str, iface: &str, pcap: PathBuf) -> Capture {
        let child = python_ready(ns, CAPTURE_PY, &[iface, pcap.to_str().unwrap()]);
        Capture { child, pcap }
    }

    /// Stops the capture (everything the interface saw so far is in it); the pcap's path.
    pub fn finish(mut self) -> PathBuf {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let st = self.child.wait().unwrap();
        assert!(st.success(), "capture exited {st}");
        self.pcap.clone()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The thread of process `pid` whose name is `comm`.
pub fn thread_named(pid: u32, comm: &str) -> u32 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    let mut seen = Vec::new();
    for t in tasks.flatten() {
        let name = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if name.trim() == comm {
            return t.file_name().to_string_lossy().parse().unwrap();
        }
        seen.push(name.trim().to_string());
    }
    panic!("no thread {comm} in {pid}: {seen:?}");
}

/// Stops one thread, and only that one, while it lives (ptrace's seize and interrupt: a SIGSTOP
/// would stop the whole process): the thread resumes when the child exits or is killed.
pub struct StoppedThread(Child);

impl StoppedThread {
    pub fn new(tid: u32, secs: f64) -> StoppedThread {
        const CODE: &str = "import ctypes, os, sys, time\n\
            libc = ctypes.CDLL(None, use_errno=True)\n\
            tid, secs = int(sys.argv[1]), float(sys.argv[2])\n\
            if libc.ptrace(0x4206, tid, 0, 0) != 0: sys.exit('PTRACE_SEIZE: errno %d' % ctypes.get_errno())\n\
            if libc.ptrace(0x4207, tid, 0, 0) != 0: sys.exit('PTRACE_INTERRUPT: errno %d' % ctypes.get_errno())\n\
            os.waitpid(tid, 0x40000000)\n\
            print('stopped', flush=True)\n\
            time.sleep(secs)\n\
            libc.ptrace(17, tid, 0, 0)\n";
        let mut child = Command::new("/usr/bin/python3")
            .args(["-c", CODE, &tid.to_string(), &secs.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "stopped", "the thread {tid} could not be stopped");
        StoppedThread(child)
    }

    pub fn wait(mut self) {
        assert!(self.0.wait().unwrap().success());
    }
}

impl Drop for StoppedThread {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// Frames for captures the daemon replays (net_pcap).

pub const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

/// An Ethernet/IPv4 frame to us: `proto`, identification `id`, flags and fragment offset
/// `frag` (the header's 16-bit field), carrying `l4`.
pub fn ipv4_frame(src: [u8; 4], dst: [u8; 4], proto: u8, id: u16, frag: u16, l4: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&MAC);
    f.extend_from_slice(&[2, 0, 0, 0, 0, 2]);
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&ipv4_packet(src, dst, proto, id, frag, l4));
    f
}

/// An IPv4 packet (header checksum filled in).
pub fn ipv4_packet(src: [u8; 4], dst: [u8; 4], proto: u8, id: u16, frag: u16, l4: &[u8]) -> Vec<u8> {
    let total = (20 + l4.len()) as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, proto, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[4..6].copy_from_slice(&id.to_be_bytes());
    ip[6..8].copy_from_slice(&frag.to_be_bytes());
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let sum = ip
        .chunks(2)
        .map(|w| u16::from_be_bytes([w[0], w[1]]) as u32)
        .sum::<u32>();
    let sum = !(((sum & 0xffff) + (sum >> 16)) as u16);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    ip.extend_from_slice(l4);
    ip
}

/// A UDP header and payload (no checksum).
pub fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

/// An Ethernet/IPv4/UDP frame to us (no UDP checksum).
pub fn udp_frame(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    ipv4_frame(src, dst, 17, 1, 0, &udp(sport, dport, payload))
}

/// A classic pcap of `frames`.
pub fn pcap(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut v = Vec::new();
    for w in [
        0xa1b2_c3d4u32.to_le_bytes().to_vec(),
        vec![2, 0, 4, 0],
        vec![0; 8],
        65535u32.to_le_bytes().to_vec(),
        1u32.to_le_bytes().to_vec(),
    ] {
        v.extend_from_slice(&w);
    }
    for (i, f) in frames.iter().enumerate() {
        v.extend_from_slice(&(i as u32).to_le_bytes());
        v.extend_from_slice(&0u32.to_le_bytes());
        v.extend_from_slice(&(f.len() as u32).to_le_bytes());
        v.extend_from_slice(&(f.len() as u32).to_le_bytes());
        v.extend_from_slice(f);
    }
    v
}

/// An Ethernet/IPv6 frame to us: next header `nh`, carrying `l4`.
pub fn ipv6_frame(src: [u8; 16], dst: [u8; 16], nh: u8, l4: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&MAC);
    f.extend_from_slice(&[2, 0, 0, 0, 0, 2]);
    f.extend_from_slice(&[0x86, 0xdd]);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(l4.len() as u16).to_be_bytes());
    f.extend_from_slice(&[nh, 64]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(l4);
    f
}

/// An ARP request from `sender` (MAC 02:00:00:00:00:02) for `target`, broadcast.
pub fn arp_request(sender: [u8; 4], target: [u8; 4]) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[2, 0, 0, 0, 0, 2, 0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&[2, 0, 0, 0, 0, 2]);
    f.extend_from_slice(&sender);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&target);
    f
}

/// An ICMP echo request (checksum filled in) from `src` to `dst`.
pub fn echo_request(src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
    let mut icmp = vec![8, 0, 0, 0, 0, 1, 0, 1, b'p', b'i', b'n', b'g'];
    let sum = icmp
        .chunks(2)
        .map(|w| u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]) as u32)
        .sum::<u32>();
    let sum = !(((sum & 0xffff) + (sum >> 16)) as u16);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    ipv4_frame(src, dst, 1, 1, 0, &icmp)
}

/// Asserts that a command succeeded; its stdout.
pub fn must(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `kill -SIG PID`, whatever became of the process.
pub fn kill(sig: &str, pid: u32) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// Stops a daemon we spawned: SIGTERM to the pid its pidfile names (the child's own pid when it
/// has not written one yet; `ip netns exec` execs, so they are the same process), SIGKILL if it
/// is still there after 5 s, and reaps it.
pub fn stop_daemon(child: &mut Child, pidfile: &Path) {
    let pid = std::fs::read_to_string(pidfile)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(child.id());
    kill("TERM", pid);
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    kill("KILL", pid);
    let _ = child.kill();
    let _ = child.wait();
}

/// A private Open vSwitch in network namespace `ns`: its own database, sockets, pidfiles and logs
/// in `dir` (never the system's /var/run/openvswitch), its daemons children of the test (not
/// detached, so they are reaped). Stopped on drop, ovs-vswitchd before its database; the last
/// lines of their logs are shown when a test fails.
pub struct Ovs {
    pub ns: String,
    pub dir: PathBuf,
    /// (daemon, its pidfile), in start order.
    daemons: Vec<(Child, PathBuf)>,
}

impl Ovs {
    /// Nothing runs yet: [`Ovs::start_db`], then [`Ovs::start_vswitchd`] (or a binary of one's
    /// own with [`Ovs::spawn_daemon_binary`]).
    pub fn new(ns: &str, dir: PathBuf) -> Ovs {
        std::fs::create_dir_all(&dir).unwrap();
        Ovs {
            ns: ns.to_string(),
            dir,
            daemons: vec![],
        }
    }

    /// ovsdb-server and ovs-vswitchd.
    pub fn start(ns: &str, dir: PathBuf) -> Ovs {
        let mut o = Ovs::new(ns, dir);
        o.start_db();
        o.start_vswitchd();
        o
    }

    pub fn path(&self, f: &str) -> PathBuf {
        self.dir.join(f)
    }

    /// An Open vSwitch command in the namespace, on the private run directory.
    pub fn cmd(&self, cmd: &[&str]) -> Command {
        let dir = &self.dir;
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns])
            .args(cmd)
            .env("OVS_RUNDIR", dir)
            .env("OVS_LOGDIR", dir)
            .env("OVS_DBDIR", dir)
            .env("OVS_SYSCONFDIR", dir);
        c
    }

    pub fn run(&self, cmd: &[&str]) -> String {
        let out = self
            .cmd(cmd)
            .output()
            .expect("Open vSwitch (ci/setup installs openvswitch-switch)");
        must(out, &format!("{cmd:?}"))
    }

    pub fn vsctl(&self, args: &[&str]) -> String {
        let db = format!("--db=unix:{}", self.path("db.sock").display());
        let mut cmd = vec!["ovs-vsctl", &db, "--timeout=10"];
        cmd.extend_from_slice(args);
        self.run(&cmd)
    }

    pub fn appctl(&self, args: &[&str]) -> String {
        let ctl = self.path("ovs-vswitchd.ctl");
        let mut cmd = vec!["ovs-appctl", "-t", ctl.to_str().unwrap()];
        cmd.extend_from_slice(args);
        self.run(&cmd)
    }

    pub fn spawn_daemon_binary(&mut self, name: &str, binary: &str, args: &[&str]) {
        let pidfile = self.path(&format!("{name}.pid"));
        let mut cmd = vec![binary.to_string()];
        cmd.extend(args.iter().map(|a| a.to_string()));
        cmd.push(format!("--pidfile={}", pidfile.display()));
        cmd.push(format!("--unixctl={}", self.path(&format!("{name}.ctl")).display()));
        cmd.push(format!("--log-file={}", self.path(&format!("{name}.log")).display()));
        cmd.push("-vconsole:off".into());
        let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
        let child = self
            .cmd(&cmd)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.path(&format!("{name}.stderr"))).unwrap())
            .spawn()
            .expect("Open vSwitch (ci/setup installs openvswitch-switch)");
        self.daemons.push((child, pidfile));
    }

    /// A fresh database and its ovsdb-server, initialised.
    pub fn start_db(&mut self) {
        let db = self.path("conf.db");
        self.run(&[
            "ovsdb-tool",
            "create",
            db.to_str().unwrap(),
            "/usr/share/openvswitch/vswitch.ovsschema",
        ]);
        let remote = format!("--remote=punix:{}", self.path("db.sock").display());
        self.spawn_daemon_binary("ovsdb-server", "ovsdb-server", &[db.to_str().unwrap(), &remote]);
        self.vsctl(&["--retry", "--no-wait", "init"]);
    }

    /// `unix:` + the database's socket.
    pub fn db_sock(&self) -> String {
        format!("unix:{}", self.path("db.sock").display())
    }

    pub fn start_vswitchd(&mut self) {
        let db = self.db_sock();
        self.spawn_daemon_binary("ovs-vswitchd", "ovs-vswitchd", &[&db]);
    }

    /// Stops the daemons (ovs-vswitchd first, then its database); shows the end of their logs
    /// when the test is failing.
    pub fn stop(&mut self) {
        let had = !self.daemons.is_empty();
        while let Some((mut child, pidfile)) = self.daemons.pop() {
            stop_daemon(&mut child, &pidfile);
        }
        if had && std::thread::panicking() {
            for log in ["ovs-vswitchd.log", "ovsdb-server.log"] {
                let text = std::fs::read_to_string(self.path(log)).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                eprintln!(
                    "--- {} {log} (the end)\n{}",
                    self.ns,
                    lines[lines.len().saturating_sub(15)..].join("\n")
                );
            }
        }
    }
}

impl Drop for Ovs {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `fastpathctl --json ARGS` against the test's daemon.
pub fn ctl_json(sock: &Path, args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_fastpathctl"))
        .arg("--socket")
        .arg(sock)
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fastpathctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Backend `name` as `fastpathctl show tunnels` shows it.
pub fn tunnel_row(sock: &Path, name: &str) -> serde_json::Value {
    ctl_json(sock, &["show", "tunnels"])["tunnels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .cloned()
        .unwrap()
}

/// fastpathd's namespace (`host`, the veth end `port` with no address, the kernel interface
/// `kif`) and the client's (`client`, 192.0.2.2/24 and 2001:db8::2/64 on `peer`). Removed on
/// drop with every program started in them.
pub struct Host {
    pub host: String,
    pub client: String,
    pub port: String,
    pub peer: String,
    pub kif: String,
    pub programs: Vec<Child>,
    /// More `net_af_packet` arguments (e.g. `,framecnt=4096`).
    pub af_packet_args: String,
}

impl Host {
    /// Creates the namespaces and the veth pair (a fixture with side effects: no `Default`).
    #[allow(clippy::new_without_default)]
    pub fn new() -> Host {
        let id = lab_id();
        let h = Host {
            host: format!("fpk{id}h"),
            client: format!("fpk{id}c"),
            port: format!("fkp{id}"),
            peer: format!("fkc{id}"),
            kif: format!("fpk{id}"),
            programs: Vec::new(),
            af_packet_args: String::new(),
        };
        ip(&["netns", "add", &h.host]);
        ip(&["netns", "add", &h.client]);
        ip(&["link", "add", "dev", &h.port, "type", "veth", "peer", "name", &h.peer]);
        ip(&["link", "set", "dev", &h.port, "netns", &h.host]);
        ip(&["link", "set", "dev", &h.peer, "netns", &h.client]);
        ip(&["-n", &h.host, "link", "set", "lo", "up"]);
        ip(&["-n", &h.host, "link", "set", "dev", &h.port, "up"]);
        let quiet = [
            format!("net.ipv6.conf.{}.disable_ipv6=1", h.port),
            format!("net.ipv4.conf.{}.arp_ignore=8", h.port),
            format!("net.ipv4.conf.{}.rp_filter=1", h.port),
            "net.ipv4.conf.all.rp_filter=1".to_string(),
        ];
        for q in &quiet {
            assert!(h.exec(&["sysctl", "-qw", q]).status.success(), "sysctl {q}");
        }
        ip(&["-n", &h.client, "link", "set", "lo", "up"]);
        ip(&["-n", &h.client, "addr", "add", "192.0.2.2/24", "dev", &h.peer]);
        ip(&[
            "-n",
            &h.client,
            "addr",
            "add",
            "2001:db8::2/64",
            "dev",
            &h.peer,
            "nodad",
        ]);
        ip(&["-n", &h.client, "link", "set", "dev", &h.peer, "up"]);
        // Checksums on the wire, as a NIC would put them there (veth leaves them to nobody).
        for (ns, dev) in [(&h.client, &h.peer), (&h.host, &h.port)] {
            let out = ns_exec(ns, &["ethtool", "-K", dev, "tx", "off"]);
            assert!(out.status.success(), "ethtool {dev}");
        }
        h
    }

    pub fn exec(&self, cmd: &[&str]) -> Output {
        ns_exec(&self.host, cmd)
    }

    pub fn client(&self, cmd: &[&str]) -> Output {
        ns_exec(&self.client, cmd)
    }

    pub fn client_python(&self, code: &str, args: &[&str]) -> Output {
        let mut cmd = vec!["/usr/bin/python3", "-c", code];
        cmd.extend_from_slice(args);
        self.client(&cmd)
    }

    /// A Python program in the client's namespace, running on while the test goes on.
    pub fn client_spawn(&self, code: &str, args: &[&str]) -> Child {
        Command::new("ip")
            .args(["netns", "exec", &self.client, "/usr/bin/python3", "-c", code])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Starts a program in fastpathd's namespace, kept until the host is dropped.
    pub fn spawn(&mut self, cmd: &[&str], log: &Path) {
        let f = std::fs::File::create(log).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &self.host])
            .args(cmd)
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        self.programs.push(child);
    }

    /// fastpathd in its namespace with the kernel interface and `extra` config.
    pub fn start(&self, s: &Scratch, name: &str, extra: &str) -> Daemon {
        self.start_with_port(s, name, "", extra)
    }

    /// Like [`Host::start`] with more `[[port]]` keys.
    pub fn start_with_port(&self, s: &Scratch, name: &str, port_keys: &str, extra: &str) -> Daemon {
        self.start_with(s, name, (2, port_keys), "rx = [0]\nworkers = [1]", extra)
    }

    /// Like [`Host::start`] with `queues` af_packet queue pairs (at least one per lcore), more
    /// `[[port]]` keys and `lcores` as the `[lcores]` keys.
    pub fn start_with(
        &self,
        s: &Scratch,
        name: &str,
        (queues, port_keys): (u16, &str),
        lcores: &str,
        extra: &str,
    ) -> Daemon {
        let kif = format!("kernel_interface = \"{}\"\n{port_keys}", self.kif);
        self.start_config(s, name, (queues, &kif), lcores, extra)
    }

    /// Like [`Host::start_with`] with `port_keys` as all of the port's extra keys (no kernel
    /// interface unless they name one).
    pub fn start_config(
        &self,
        s: &Scratch,
        name: &str,
        (queues, port_keys): (u16, &str),
        lcores: &str,
        extra: &str,
    ) -> Daemon {
        let vdevs = vec![format!(
            "--vdev=net_af_packet0,iface={},qpairs={queues}{}",
            self.port, self.af_packet_args
        )];
        let cfg = s.write(
            "c.toml",
            &format!(
                "[dpdk]\neal_args = {}\nmbufs = 16383\n\n[[port]]\ndevice = \"net_af_packet0\"\nrx_queues = {queues}\n\
                 tx_queues = {queues}\nipv4 = [\"192.0.2.1/24\"]\nipv6 = [\"2001:db8::1/64\"]\n\
                 {port_keys}\n[lcores]\n{lcores}\nidle_sleep_us = 50\n\n[control]\nsocket = \"control.sock\"\n\n[metrics]\nlisten = \"127.0.0.1:9464\"\ncache_ms = 0\n\
                 [reassembly]\nbuffers = 32\n{extra}",
                eal_args(name, &vdevs),
            ),
        );
        let bin = env!("CARGO_BIN_EXE_fastpathd");
        Daemon::start_cmd(
            s,
            Command::new("ip")
                .args(["netns", "exec", &self.host, bin, "--config", cfg.to_str().unwrap()])
                .args(["--metrics-dump", s.path("dump.prom").to_str().unwrap()]),
        )
    }

    /// /metrics, asked from inside fastpathd's namespace.
    pub fn scrape(&self) -> BTreeMap<String, f64> {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.host,
                "curl",
                "-s",
                "-m",
                "5",
                "http://127.0.0.1:9464/metrics",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "scrape failed");
        parse_metrics(&String::from_utf8_lossy(&out.stdout))
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        for c in &mut self.programs {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.host]).status();
        let _ = Command::new("ip").args(["netns", "del", &self.client]).status();
    }
}

/// A TCP sink on port argv[1] (run in a namespace): per connection, reads to EOF and answers
/// the byte count.
pub const BULK_SERVER: &str = r#"
import socket, sys, threading
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(16)
def serve(c):
    n = 0
    while True:
        b = c.recv(1 << 20)
        if not b:
            break
        n += len(b)
    c.sendall(str(n).encode())
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

// ---- what a test needs from the machine ----

/// What the tests against Open vSwitch's user-space datapath need (tshark reads their wire).
pub const NEEDS_OVS: &[&str] = &["ovs-vswitchd", "ovsdb-server", "tshark"];

/// Whether the calling test must stop here for want of `needs`: programs by name (on `PATH`,
/// or in /usr/sbin and /usr/lib/frr where FRR keeps its daemons) or `hugepages` (free 2 MiB
/// pages on a hugetlbfs mount, what ci/setup allocates).
///
/// Outside CI (`CI` unset) a missing one skips the test with a line naming it, also appended
/// to the file `$FASTPATH_TEST_SKIPS` names (ci/test fails when that file is not empty). Under
/// CI a missing one fails the test, naming it: CI runs every test.
pub fn missing(needs: &[&str]) -> bool {
    let absent: Vec<&str> = needs.iter().copied().filter(|n| !present(n)).collect();
    if absent.is_empty() {
        return false;
    }
    let test = std::thread::current().name().unwrap_or("?").to_string();
    let what = format!("{test}: needs {} (ci/setup installs it)", absent.join(", "));
    assert!(std::env::var_os("CI").is_none(), "{what}; under CI no test is skipped");
    eprintln!("SKIPPED {what}");
    if let Some(f) = std::env::var_os("FASTPATH_TEST_SKIPS") {
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(f).unwrap();
        writeln!(f, "{what}").unwrap();
    }
    true
}

/// Whether one of [`missing`]'s needs is on this machine.
fn present(need: &str) -> bool {
    if need == "hugepages" {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let free = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("HugePages_Free:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
        let mounted = std::fs::read_to_string("/proc/mounts")
            .unwrap_or_default()
            .lines()
            .any(|l| l.split_whitespace().nth(2) == Some("hugetlbfs"));
        return free > 0 && mounted;
    }
    let path = std::env::var("PATH").unwrap_or_default();
    let mut dirs = path.split(':').chain(["/usr/sbin", "/sbin", "/usr/lib/frr"]);
    dirs.any(|d| Path::new(d).join(need).is_file())
}

// ---- namespaces, programs and daemons in them ----

static LAB_SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A short id unique to this process and call, for namespace and interface names (at most 15
/// bytes with a prefix of a few letters and a suffix of one or two).
pub fn lab_id() -> String {
    let n = LAB_SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    format!("{}{n}", std::process::id() % 100_000)
}

/// The network namespaces a test made. Each is deleted on drop (its veths, bridges and taps go
/// with it), also when the test panics half way through its set-up; declare it after whatever
/// runs in them so that those stop first.
#[derive(Default)]
pub struct Netns(Vec<String>);

impl Netns {
    /// Creates namespace `name` with its loopback up, deleted on drop; returns the name.
    pub fn add(&mut self, name: &str) -> String {
        ip(&["netns", "add", name]);
        self.0.push(name.to_string());
        ip(&["-n", name, "link", "set", "lo", "up"]);
        name.to_string()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        while let Some(ns) = self.0.pop() {
            let _ = Command::new("ip")
                .args(["netns", "del", &ns])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// `sysctl -qw KEY=VALUE...` in namespace `ns`, which must succeed.
pub fn sysctl(ns: &str, kv: &[&str]) {
    let mut cmd = vec!["sysctl", "-qw"];
    cmd.extend_from_slice(kv);
    must(ns_exec(ns, &cmd), "sysctl");
}

/// A program of the test's, killed and reaped on drop.
pub struct Program(pub Child);

impl Program {
    /// [`python_ready`], killed on drop.
    pub fn python_ready(ns: &str, code: &str, args: &[&str]) -> Program {
        Program(python_ready(ns, code, args))
    }
}

/// `/usr/bin/python3 -c CODE ARGS` in namespace `ns` (stdin and stdout piped), returned once it
/// printed `ready`; killed if it does not.
pub fn python_ready(ns: &str, code: &str, args: &[&str]) -> Child {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "/usr/bin/python3", "-c", code])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let _ = BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line);
    if line.trim() != "ready" {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{args:?} in {ns} did not start (printed {line:?}):\n{code}");
    }
    child
}

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `s` split on white space (an `ip` command line written as one string).
pub fn words(s: &str) -> Vec<&str> {
    s.split_whitespace().collect()
}

impl Daemon {
    /// fastpathd in namespace `ns` on config `cfg`, dumping its metrics at exit to `dump`.
    pub fn start_in(s: &Scratch, ns: &str, cfg: &Path, dump: &Path) -> Daemon {
        let bin = env!("CARGO_BIN_EXE_fastpathd");
        Daemon::start_cmd(
            s,
            Command::new("ip")
                .args(["netns", "exec", ns, bin, "--config", cfg.to_str().unwrap()])
                .args(["--metrics-dump", dump.to_str().unwrap()]),
        )
    }

    /// Stops it (exit 0 asserted) and returns the metrics it dumped to `dump` at exit, every
    /// received packet checked to have ended in one outcome.
    pub fn stop_clean(self, dump: &Path) -> BTreeMap<String, f64> {
        let (code, log) = self.stop();
        assert_eq!(code, Some(0), "{log}");
        let m = parse_metrics(&std::fs::read_to_string(dump).unwrap());
        assert_conservation(&m);
        m
    }
}

/// Two namespaces joined by a veth pair: `ns_a` for fastpathd (its end `if_a` up, no address,
/// IPv6 off so that its kernel says nothing there) and `ns_b` for the peer (`if_b` up with
/// 192.0.2.2/24). Deleted on drop, the pair with them, also when a test fails.
pub struct VethPair {
    pub ns_a: String,
    pub ns_b: String,
    pub if_a: String,
    pub if_b: String,
    _netns: Netns,
}

impl VethPair {
    /// Names from `tag` (two or three letters) and a [`lab_id`].
    pub fn new(tag: &str) -> VethPair {
        let id = lab_id();
        let mut netns = Netns::default();
        let (ns_a, ns_b) = (netns.add(&format!("{tag}{id}a")), netns.add(&format!("{tag}{id}b")));
        let (if_a, if_b) = (format!("{tag}a{id}"), format!("{tag}b{id}"));
        ip(&["link", "add", &if_a, "type", "veth", "peer", "name", &if_b]);
        let p = VethPair {
            ns_a,
            ns_b,
            if_a,
            if_b,
            _netns: netns,
        };
        ip(&["link", "set", &p.if_a, "netns", &p.ns_a]);
        ip(&["link", "set", &p.if_b, "netns", &p.ns_b]);
        sysctl(&p.ns_a, &[&format!("net.ipv6.conf.{}.disable_ipv6=1", p.if_a)]);
        ip(&["-n", &p.ns_a, "link", "set", &p.if_a, "up"]);
        ip(&["-n", &p.ns_b, "addr", "add", "192.0.2.2/24", "dev", &p.if_b]);
        ip(&["-n", &p.ns_b, "link", "set", &p.if_b, "up"]);
        p
    }

    /// The peer's kernel computes its checksums, as a NIC would put them on the wire (veth
    /// leaves them to "hardware" that does not exist on the way to a packet socket).
    pub fn checksums_on_wire(&self) {
        must(
            ns_exec(&self.ns_b, &["ethtool", "-K", &self.if_b, "tx", "off"]),
            "ethtool",
        );
    }
}
