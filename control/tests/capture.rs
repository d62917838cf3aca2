//! Live capture of a running fastpathd with DPDK's own tools, on hugepages (a secondary process
//! attaches through the shared runtime directory): `dpdk-dumpcap` (RX and TX in one pcapng, with
//! a BPF filter) and the older `dpdk-pdump` (RX and TX into two pcaps), read back with tshark.

mod common;

use common::*;
use std::process::Command;

/// 4 echo requests and 4 UDP datagrams to a closed port, looped by net_pcap (`infinite_rx`) so traffic
/// flows while the capture runs.
fn write_traffic(s: &Scratch) -> std::path::PathBuf {
    let pcap = s.path("in.pcap");
    let out = Command::new("/usr/bin/python3")
        .args([
            "-c",
            &format!(
                "from scapy.all import Ether, IP, ICMP, UDP, wrpcap\n\
                 e = Ether(src='02:00:00:00:00:02', dst='02:00:00:00:00:01')\n\
                 f = [e/IP(src='198.51.100.7', dst='192.0.2.1')/ICMP(id=1, seq=i)/b'dumpcap' for i in range(4)]\n\
                 f += [e/IP(src='198.51.100.7', dst='192.0.2.1')/UDP(sport=4000 + i, dport=9)/b'sink' for i in range(4)]\n\
                 wrpcap('{}', f)\n",
                pcap.display()
            ),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    pcap
}

fn dumpcap(prefix: &str, out: &std::path::Path, extra: &[&str]) {
    let run = Command::new("timeout")
        .args([
            "30",
            "dpdk-dumpcap",
            &format!("--file-prefix={prefix}"),
            "-i",
            "net_pcap0",
            "-q",
        ])
        .args(extra)
        .args(["-w", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "dpdk-dumpcap: {}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
}

/// Starts fastpathd on hugepages under `huge`'s prefix, its one port (`net_pcap0`, port 0)
/// looping [`write_traffic`]'s frames; returns it and where it dumps its metrics at exit.
fn start_looping(huge: &HugePrefix, s: &Scratch) -> (Daemon, std::path::PathBuf) {
    let input = write_traffic(s);
    let vdev = format!("--vdev=net_pcap0,rx_pcap={},infinite_rx=1", input.display());
    let cfg = s.write(
        "c.toml",
        &format!(
            "[dpdk]\neal_args = {}\nmbufs = 8191\n\n[[port]]\ndevice = \"net_pcap0\"\ntx_queues = 1\n\
             ipv4 = [\"192.0.2.1\"]\nmac = \"02:00:00:00:00:01\"\n\n[lcores]\nrx = [0]\n\n[control]\nsocket = \"control.sock\"\n\n[metrics]\nenabled = false\n",
            huge.eal_args(&[vdev])
        ),
    );
    let dump = s.path("metrics.prom");
    let d = Daemon::start(
        s,
        &[
            "--config",
            cfg.to_str().unwrap(),
            "--metrics-dump",
            dump.to_str().unwrap(),
        ],
    );
    (d, dump)
}

/// Stops the daemon and checks it ended cleanly: exit 0, every packet one outcome, every mbuf
/// back (the capture's callbacks kept none).
fn stop_clean(d: Daemon, dump: &std::path::Path) {
    let (code, log) = d.stop();
    assert_eq!(code, Some(0), "{log}");
    let m = parse_metrics(&std::fs::read_to_string(dump).unwrap());
    assert_conservation(&m);
    assert_eq!(m.get("fastpath_mbufs_in_use").copied(), Some(0.0));
}

#[test]
fn dpdk_dumpcap_captures_rx_and_tx_of_a_running_daemon() {
    if missing(&["dpdk-dumpcap", "tshark", "hugepages"]) {
        return;
    }
    let huge = HugePrefix::new("dumpcap", 300);
    let s = Scratch::new("dumpcap");
    let (d, dump) = start_looping(&huge, &s);
    // Both directions: requests in, replies out.
    let all = s.path("all.pcapng");
    dumpcap(&huge.prefix, &all, &["-c", "400"]);
    let count = |f: &std::path::Path, filter: &str| tshark_checked(f, filter, &["frame.number"]).len();
    // dumpcap stops after the burst that reaches the count.
    let frames = count(&all, "frame");
    assert!((400..400 + 64).contains(&frames), "{frames} frames");
    let (req, rep, udp) = (
        count(
            &all,
            "icmp.type == 8 && ip.dst == 192.0.2.1 && data.data == 64:75:6d:70:63:61:70",
        ),
        count(
            &all,
            "icmp.type == 0 && ip.src == 192.0.2.1 && eth.src == 02:00:00:00:00:01",
        ),
        count(&all, "udp.dstport == 9 && !icmp"),
    );
    // (A few Port Unreachables about the UDP datagrams, rate limited, are outbound too.)
    let errors = count(&all, "icmp.type == 3");
    assert!(
        req > 0 && rep > 0 && udp > 0,
        "requests {req}, replies {rep}, udp {udp}"
    );
    assert_eq!(
        req + rep + udp + errors,
        frames,
        "nothing else on the port: {req} {rep} {udp} {errors}"
    );
    // The direction is recorded: received frames inbound, answers outbound.
    assert_eq!(count(&all, "frame.packet_flags_direction == 2"), rep + errors);
    // A BPF filter: the UDP datagrams only.
    let udp_only = s.path("udp.pcapng");
    dumpcap(&huge.prefix, &udp_only, &["-c", "50", "-f", "udp"]);
    let frames = count(&udp_only, "frame");
    assert!(frames >= 50, "{frames} frames");
    assert_eq!(count(&udp_only, "udp.dstport == 9 && !icmp"), frames);
    stop_clean(d, &dump);
}

/// A capture tool stopping must not take the daemon down. DPDK 22.11's pdump removes its
/// callbacks and answers the tool, which then frees the ring and mempool they copy into, while
/// an lcore may still be inside one (loaded before the removal, or preempted there): the daemon
/// died with SIGSEGV in librte_mbuf in 2 of 10 runs of this file on a busy 2-CPU machine. fastpathd
/// waits, in the removal, until every lcore has begun a poll since (`dpdk-sys/shim.c`). Many
/// short captures in a row, each one a detach, then a clean stop.
#[test]
fn dpdk_dumpcap_stopping_again_and_again_leaves_the_daemon_running() {
    if missing(&["dpdk-dumpcap", "hugepages"]) {
        return;
    }
    let huge = HugePrefix::new("detach", 300);
    let s = Scratch::new("detach");
    let (mut d, dump) = start_looping(&huge, &s);
    for i in 0..12 {
        let out = s.path(&format!("c{i}.pcapng"));
        dumpcap(&huge.prefix, &out, &["-c", "32"]);
        if let Ok(Some(st)) = d.child.try_wait() {
            panic!("the daemon died after capture {i} ({st}):\n{}", d.log_text());
        }
    }
    stop_clean(d, &dump);
}

/// A child process killed (and reaped) on drop, so a failing test leaves none behind.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The older tool, `dpdk-pdump`: port 0's RX and TX queues into two pcap files (through net_pcap
/// vdevs of its own), until SIGINT.
#[test]
fn dpdk_pdump_captures_rx_and_tx_of_a_running_daemon_into_pcaps() {
    if missing(&["dpdk-pdump", "tshark", "hugepages"]) {
        return;
    }
    let huge = HugePrefix::new("pdump", 300);
    let s = Scratch::new("pdump");
    let (d, dump) = start_looping(&huge, &s);
    let (rx, tx) = (s.path("rx.pcap"), s.path("tx.pcap"));
    let log = s.path("pdump.log");
    // Its own mbuf pool and ring small (the defaults take 140 MiB of hugepages); it runs on
    // lcore 0 only (a secondary may share the daemon's lcores: it only has a thread there).
    let mut pdump = Reaped(
        Command::new("dpdk-pdump")
            .args([
                &format!("--file-prefix={}", huge.prefix),
                "-l",
                "0",
                "--log-level=lib.eal:warning",
                "--",
                "--pdump",
                &format!(
                    "port=0,queue=*,rx-dev={},tx-dev={},ring-size=1024,mbuf-size=2176,total-num-mbufs=4095",
                    rx.display(),
                    tx.display()
                ),
            ])
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(s.path("pdump.err")).unwrap())
            .spawn()
            .expect("dpdk-pdump is needed (package dpdk-dev; ci/setup installs it)"),
    );
    let pdump_log = || {
        format!(
            "{}{}",
            std::fs::read_to_string(&log).unwrap_or_default(),
            std::fs::read_to_string(s.path("pdump.err")).unwrap_or_default()
        )
    };
    // It writes through libpcap as packets come: wait until both files have a few hundred
    // frames' worth (24-byte header, 16 per record), then stop it as an operator would.
    let size = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let t = std::time::Instant::now();
    while size(&rx) < 20_000 || size(&tx) < 10_000 {
        if let Some(st) = pdump.0.try_wait().unwrap() {
            panic!("dpdk-pdump exited early ({st}):\n{}", pdump_log());
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(30),
            "dpdk-pdump captured too little (rx {} B, tx {} B):\n{}",
            size(&rx),
            size(&tx),
            pdump_log()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let ok = Command::new("kill")
        .args(["-INT", &pdump.0.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let t = std::time::Instant::now();
    let st = loop {
        if let Some(st) = pdump.0.try_wait().unwrap() {
            break st;
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(20),
            "dpdk-pdump did not stop on SIGINT:\n{}",
            pdump_log()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(st.success(), "dpdk-pdump: {st}\n{}", pdump_log());

    let count = |f: &std::path::Path, filter: &str| tshark_checked(f, filter, &["frame.number"]).len();
    // RX: what the daemon received, the echo requests and the UDP datagrams, nothing it sent.
    let rx_frames = count(&rx, "frame");
    let requests = count(
        &rx,
        "icmp.type == 8 && ip.dst == 192.0.2.1 && data.data == 64:75:6d:70:63:61:70",
    );
    let udp = count(&rx, "udp.dstport == 9 && !icmp && eth.dst == 02:00:00:00:00:01");
    assert!(
        rx_frames > 100 && requests > 0 && udp > 0,
        "rx {rx_frames}: {requests} {udp}"
    );
    assert_eq!(requests + udp, rx_frames, "only received frames in rx");
    // TX: what it sent, the echo replies (valid checksums, the request's payload) and the
    // rate-limited Port Unreachables about the datagrams, nothing it received.
    let tx_frames = count(&tx, "frame");
    let replies = count(
        &tx,
        "icmp.type == 0 && icmp.checksum.status == 1 && ip.src == 192.0.2.1 && ip.dst == 198.51.100.7 \
         && eth.src == 02:00:00:00:00:01 && data.data == 64:75:6d:70:63:61:70",
    );
    let errors = count(&tx, "icmp.type == 3 && icmp.code == 3 && ip.src == 192.0.2.1");
    assert!(tx_frames > 50 && replies > 0, "tx {tx_frames}: {replies} {errors}");
    assert_eq!(replies + errors, tx_frames, "only sent frames in tx");
    // (Not one reply per captured request: at line rate its ring overflows, and what does not fit
    // is dropped from the capture, never from the daemon's path.)
    stop_clean(d, &dump);
}
