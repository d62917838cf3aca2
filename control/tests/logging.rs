//! Logging as an operator meets it: one level switch for fastpathd's and DPDK's messages,
//! DPDK's lines once and on stderr (not stdout, not syslog), and under systemd native journal
//! entries with priorities, read from a journal socket this test serves in a private mount
//! namespace (no systemd on the CI machine, and none touched where there is one).

mod common;

use common::*;
use std::process::Command;

fn replay_config(s: &Scratch, name: &str) -> std::path::PathBuf {
    let capture = repo().join("configs/captures/demo.pcap");
    let vdevs = [format!(
        "--vdev=net_pcap0,rx_pcap={},tx_pcap={},tx_pcap={}",
        capture.display(),
        s.path("out0.pcap").display(),
        s.path("out1.pcap").display()
    )];
    // lib.eal at debug: EAL's own messages (info and debug) are then filtered by --log-level alone.
    let eal = eal_args(name, &vdevs).replace("lib.eal:warning", "lib.eal:debug");
    s.write(
        "c.toml",
        &format!(
            "[dpdk]\neal_args = {eal}\nmbufs = 8191\n\n[[port]]\ndevice = \"net_pcap0\"\nrx_queues = 1\ntx_queues = 2\n\
             ipv4 = [\"192.0.2.1\"]\nmac = \"02:00:00:00:00:01\"\n\n[lcores]\nrx = [0]\nworkers = [1]\n{METRICS_ANY_PORT}"
        ),
    )
}

#[test]
fn one_level_switch_filters_fastpathd_and_dpdk_and_dpdk_writes_stderr_only() {
    let s = Scratch::new("loglevel");
    let cfg = replay_config(&s, "loglevel");
    let mut lines = Vec::new();
    for level in ["debug", "info", "warn"] {
        let out = run(&[
            "--config",
            cfg.to_str().unwrap(),
            "--exit-when-idle",
            "200",
            "--log-level",
            level,
        ]);
        assert_eq!(out.status.code(), Some(0), "{level}");
        assert!(
            out.stdout.is_empty(),
            "{level}: DPDK wrote to stdout: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let eal_debug = err.lines().filter(|l| l.starts_with("EAL: Detected lcore 0")).count();
        let eal_info = err
            .lines()
            .filter(|l| l.starts_with("EAL: Detected CPU lcores"))
            .count();
        let running = err.lines().filter(|l| l.starts_with("fastpathd: running")).count();
        lines.push((level, eal_debug, eal_info, running));
    }
    // Each DPDK message once (DPDK's default stream wrote it to stdout and syslog both).
    assert_eq!(
        lines,
        vec![("debug", 1, 1, 1), ("info", 0, 1, 1), ("warn", 0, 0, 0)],
        "(level, EAL debug lines, EAL info lines, fastpathd info lines)"
    );
}

/// Serves `/run/systemd/journal/socket` in a private mount namespace (a tmpfs over /run), runs
/// `script` there with `$JOURNAL` set, and returns what was received: one entry per datagram.
fn with_fake_journal(s: &Scratch, script: &str) -> Vec<Vec<(String, String)>> {
    let entries = s.path("journal.txt");
    let listener = format!(
        "import socket, sys, os\n\
         s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n\
         s.bind('/run/systemd/journal/socket')\n\
         open('{ready}', 'w').close()\n\
         s.settimeout(5)\n\
         out = open('{entries}', 'wb')\n\
         try:\n\
         \x20   while True:\n\
         \x20       d = s.recvfrom(1 << 20)[0]\n\
         \x20       out.write(len(d).to_bytes(8, 'little') + d)\n\
         \x20       out.flush()\n\
         except socket.timeout:\n\
         \x20   pass\n",
        ready = s.path("ready").display(),
        entries = entries.display()
    );
    let py = s.write("journal.py", &listener);
    let body = format!(
        "set -e\nmount -t tmpfs tmpfs /run\nmkdir -p /run/systemd/journal\n\
         /usr/bin/python3 {py} & listener=$!\n\
         for i in $(seq 100); do [ -e {ready} ] && break; sleep 0.05; done\n\
         {script}\nwait $listener\n",
        py = py.display(),
        ready = s.path("ready").display()
    );
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &body])
        .output()
        .expect("unshare");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&entries).unwrap_or_default();
    let mut out = Vec::new();
    let mut rest = &bytes[..];
    while rest.len() >= 8 {
        let n = u64::from_le_bytes(rest[..8].try_into().unwrap()) as usize;
        out.push(parse_entry(&rest[8..8 + n]));
        rest = &rest[8 + n..];
    }
    out
}

/// One entry of journald's native protocol: `KEY=value\n`, or `KEY\n`, a 64-bit little-endian
/// length, the value, `\n` (for values with newlines; tracing-journald uses it for all).
fn parse_entry(mut d: &[u8]) -> Vec<(String, String)> {
    let mut fields = Vec::new();
    while !d.is_empty() {
        let nl = d.iter().position(|&b| b == b'\n').unwrap_or(d.len());
        let line = &d[..nl];
        if let Some(eq) = line.iter().position(|&b| b == b'=') {
            fields.push((
                String::from_utf8_lossy(&line[..eq]).into_owned(),
                String::from_utf8_lossy(&line[eq + 1..]).into_owned(),
            ));
            d = &d[(nl + 1).min(d.len())..];
        } else {
            let key = String::from_utf8_lossy(line).into_owned();
            let len = u64::from_le_bytes(d[nl + 1..nl + 9].try_into().unwrap()) as usize;
            let value = &d[nl + 9..nl + 9 + len];
            fields.push((key, String::from_utf8_lossy(value).into_owned()));
            d = &d[(nl + 10 + len).min(d.len())..];
        }
    }
    fields
}

#[test]
fn under_systemd_entries_go_to_the_journal_with_their_priority() {
    let s = Scratch::new("journald");
    let cfg = replay_config(&s, "journald");
    let bad = s.write(
        "bad.toml",
        &std::fs::read_to_string(&cfg)
            .unwrap()
            .replace("rx = [0]", "rx = [0]\nmode = 7"),
    );
    let stderr = s.path("stderr.txt");
    let bin = env!("CARGO_BIN_EXE_fastpathd");
    // JOURNAL_STREAM names stderr's device and inode, as systemd sets it for a unit whose
    // stderr is the journal. A run (info, DPDK's lines) and a refused config (errors).
    let script = format!(
        ": > {err}\nexport JOURNAL_STREAM=$(stat -c %d:%i {err})\n\
         {bin} --config {cfg} --exit-when-idle 200 -- --log-level=lib.eal:debug 2>>{err} || {{ cat {err} >&2; exit 1; }}\n\
         {bin} --config {bad} 2>>{err} || true\n",
        err = stderr.display(),
        cfg = cfg.display(),
        bad = bad.display()
    );
    let entries = with_fake_journal(&s, &script);
    let field = |e: &[(String, String)], k: &str| e.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
    let find = |prefix: &str| {
        entries
            .iter()
            .find(|e| field(e, "MESSAGE").is_some_and(|m| m.contains(prefix)))
            .unwrap_or_else(|| panic!("no entry with {prefix:?}: {entries:#?}"))
    };
    // tracing-journald's priorities: error 3, warn 4, info 5 (notice), debug 6, trace 7.
    let running = find("fastpathd: running");
    assert_eq!(field(running, "PRIORITY").as_deref(), Some("5"), "{running:?}");
    assert_eq!(field(running, "SYSLOG_IDENTIFIER").as_deref(), Some("fastpathd"));
    let eal = find("EAL: Detected CPU lcores");
    assert_eq!(field(eal, "PRIORITY").as_deref(), Some("5"), "{eal:?}");
    assert_eq!(field(eal, "TARGET").as_deref(), Some("dpdk"));
    // DPDK's debug messages (EAL at debug in the arguments) stay below the default level.
    assert!(!entries
        .iter()
        .any(|e| field(e, "MESSAGE").is_some_and(|m| m.contains("EAL: Detected lcore 0"))));
    let refused = find("lcores.mode");
    assert_eq!(field(refused, "PRIORITY").as_deref(), Some("3"), "{refused:?}");
    // Each message once.
    assert_eq!(
        entries
            .iter()
            .filter(|e| field(e, "MESSAGE").is_some_and(|m| m.contains("fastpathd: running")))
            .count(),
        1
    );
    // Nothing went to stderr as plain lines meanwhile.
    let plain = std::fs::read_to_string(&stderr).unwrap();
    assert!(!plain.contains("fastpathd: running"), "{plain}");
}
