#!/usr/bin/python3
"""The kernel exception path's benchmark, side by side in one run, in a network
namespace of its own (the kernel's answers go nowhere else):

- `testpmd-tap`: dpdk-testpmd io-forwards bench_udp.pcap (net_pcap, infinite_rx) into a
  net_tap interface that has the capture's destination address and MAC, so the kernel takes
  every frame in (UDP to a closed port: it answers with rate-limited Port Unreachables);
  figure: the tap's Tx-pps, what testpmd delivered into the kernel.
- `fastpathd-kernel`: fastpathd on the same capture with `kernel_interface` and `punt =
  ["unhandled"]` and no punt budget (`punt_rate = 0`: the path's capacity, not the budget's):
  every frame is punted and a worker writes it into the interface; figure:
  `fastpath_kernel_packets_total{direction="to_kernel"}` per second (and `kernel_full`, what the
  kernel path refused at its queue while saturated).
- `fastpathd-mixed-kernel` / `fastpathd-mixed-drop`: half the frames to a `sink` service, half
  to a closed port that is punted (the kernel path saturated) or, without a kernel interface,
  answered by the ICMP limiter as today; figure: the sink's delivered Mpps, the fast path's
  own rate, whose ratio says what saturating the kernel path costs it.

Each scenario runs BENCH_REPS rounds (default 3) of BENCH_SECONDS (default 5) after
BENCH_WARMUP (default 2) seconds, alternating; medians and ratios are printed and, with
BENCH_OUT (default benches/), written to kernel_path.md there.

    ci/bench-kernel
    BENCH_SECONDS=1 BENCH_REPS=1 BENCH_WARMUP=1 BENCH_OUT=/tmp/k ci/bench-kernel   # smoke
"""
import os
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH_UDP = os.path.join(REPO, "configs", "captures", "bench_udp.pcap")
NS = f"fpkb{os.getpid() % 100000}"
MAC = "02:00:00:00:00:01"
MBUFS = 16383


def env_num(name, default):
    v = os.environ.get(name, "")
    return float(v) if v else default


def sh(*cmd, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.exit(f"kernel_path: {' '.join(cmd)}: {r.stderr.strip()}")
    return r.stdout


def in_ns(*cmd):
    return ["ip", "netns", "exec", NS, *cmd]


def mixed_capture(path):
    """bench_udp.pcap with every other frame's destination port 9 -> 10 (UDP checksum 0: none,
    RFC 768), so half the frames are for the sink and half for a closed port."""
    with open(BENCH_UDP, "rb") as f:
        data = f.read()
    out = bytearray(data[:24])
    off, i = 24, 0
    while off + 16 <= len(data):
        incl = struct.unpack_from("<I", data, off + 8)[0]
        rec = bytearray(data[off:off + 16 + incl])
        frame = rec[16:]
        if i % 2 == 1 and len(frame) >= 42 and frame[12:14] == b"\x08\x00" and frame[23] == 17:
            ihl = (frame[14] & 0x0F) * 4
            u = 14 + ihl
            struct.pack_into("!H", frame, u + 2, 10)
            struct.pack_into("!H", frame, u + 6, 0)
            rec[16:] = frame
        out += rec
        off += 16 + incl
        i += 1
    with open(path, "wb") as f:
        f.write(out)


def eal(prefix, capture, extra_vdevs=()):
    return ["--no-huge", "-m", "1024", "--no-pci", "--no-shconf", f"--file-prefix={prefix}", "--no-telemetry",
            "--log-level=lib.eal:warning", f"--vdev=net_pcap0,rx_pcap={capture},infinite_rx=1,tx_pcap=/dev/null,tx_pcap=/dev/null",
            *[f"--vdev={v}" for v in extra_vdevs]]


def run_testpmd(capture, warmup, seconds, rnd):
    iface = "kbtap0"
    cmd = in_ns(os.environ.get("TESTPMD", "dpdk-testpmd"), "-l", "0,1",
                *eal(f"kbt{rnd}-{os.getpid()}", capture, [f"net_tap0,iface={iface},mac={MAC}"]),
                "--", "-i", "--forward-mode=io", "--nb-cores=1", f"--total-num-mbufs={MBUFS}",
                "--rxd=1024", "--txd=1024")
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def send(line):
        p.stdin.write(line + "\n")
        p.stdin.flush()
    try:
        # The interface exists once testpmd reached its prompt: the capture's address on it.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if subprocess.run(in_ns("ip", "link", "show", "dev", iface), capture_output=True).returncode == 0:
                break
            time.sleep(0.2)
        time.sleep(1)
        sh(*in_ns("ip", "addr", "add", "192.0.2.1/24", "dev", iface))
        sh(*in_ns("ip", "link", "set", "dev", iface, "up"))
        send("start")
        time.sleep(warmup)
        send("show port stats 1")
        time.sleep(seconds)
        send("show port stats 1")
        send("stop")
        send("quit")
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    stats = re.findall(r"NIC statistics for port 1\s+#+(.*?)#{10,}", out, re.S)
    m = re.search(r"Tx-pps:\s+(\d+)", stats[-1]) if stats else None
    if not m:
        sys.exit(f"kernel_path: no Tx-pps for the tap in testpmd's output:\n{out[-3000:]}")
    return {"kernel_mpps": int(m.group(1)) / 1e6}


CONFIG = """\
[dpdk]
eal_args = {eal}
mbufs = {mbufs}
mbuf_cache = 250
rx_desc = 1024
tx_desc = 1024

[[port]]
device = "net_pcap0"
tx_queues = 2
ipv4 = ["192.0.2.1/24"]
mac = "{mac}"
{kernel}

[lcores]
rx = [1]
workers = [0]
idle_sleep_us = 0

[metrics]
listen = "127.0.0.1:9470"
cache_ms = 0
{extra}"""

SINK = """
[[service]]
name = "sink"
ports = [9]
sockets = 1
socket_capacity = 1024
action = "sink"
free_on_rx = true
"""


def scrape():
    out = sh(*in_ns("curl", "-s", "-m", "5", "http://127.0.0.1:9470/metrics"))
    m = {}
    for line in out.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            m[k] = float(v)
    return m


def total(m, prefix, *needles):
    return sum(v for k, v in m.items() if k.startswith(prefix) and all(n in k for n in needles))


def run_fastpathd(capture, kernel, extra, warmup, seconds, rnd, tmp):
    cfg = os.path.join(tmp, "k.toml")
    args = eal(f"kbf{rnd}-{os.getpid()}", capture)
    with open(cfg, "w") as f:
        f.write(CONFIG.format(eal="[" + ", ".join(f'"{a}"' for a in args) + "]", mbufs=MBUFS, mac=MAC,
                              kernel='kernel_interface = "kbfp0"' if kernel else "", extra=extra))
    binary = os.environ.get("FASTPATHD") or os.path.join(REPO, "target", "release", "fastpathd")
    dump = os.path.join(tmp, "dump.prom")
    log = open(os.path.join(tmp, "log"), "w")
    p = subprocess.Popen(in_ns(binary, "--config", cfg, "--metrics-dump", dump), stderr=log, stdout=log)
    try:
        deadline = time.monotonic() + 60
        while "fastpathd: running" not in open(os.path.join(tmp, "log")).read():
            if p.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"kernel_path: fastpathd did not start:\n{open(os.path.join(tmp, 'log')).read()}")
            time.sleep(0.2)
        time.sleep(warmup)
        a, ta = scrape(), time.monotonic()
        time.sleep(seconds)
        b, tb = scrape(), time.monotonic()
        p.send_signal(2)
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if p.returncode != 0:
        sys.exit(f"kernel_path: fastpathd exited {p.returncode}:\n{open(os.path.join(tmp, 'log')).read()}")
    end = {}
    for line in open(dump):
        if line.strip() and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            end[k] = float(v)
    rx = total(end, "fastpath_rx_packets_total{")
    if rx != total(end, "fastpath_packets_total{") or end.get("fastpath_mbufs_in_use") != 0:
        sys.exit("kernel_path: invariant broken at exit (rx != outcomes, or mbufs in use)")
    dt = tb - ta

    def rate(prefix, *needles):
        return (total(b, prefix, *needles) - total(a, prefix, *needles)) / dt / 1e6
    return {
        "rx_mpps": rate("fastpath_rx_packets_total{"),
        "kernel_mpps": rate("fastpath_kernel_packets_total{", 'direction="to_kernel"'),
        "kernel_full_mpps": rate("fastpath_packets_total{", 'outcome="kernel_full"'),
        "delivered_mpps": rate("fastpath_packets_total{", 'outcome="delivered"'),
    }


def main():
    seconds = env_num("BENCH_SECONDS", 5)
    reps = int(env_num("BENCH_REPS", 3))
    warmup = env_num("BENCH_WARMUP", 2)
    out_dir = os.environ.get("BENCH_OUT", os.path.join(REPO, "benches"))
    os.makedirs(out_dir, exist_ok=True)
    sh("ip", "netns", "add", NS)
    results = {k: [] for k in ("testpmd-tap", "fastpathd-kernel", "fastpathd-mixed-kernel", "fastpathd-mixed-drop")}
    try:
        sh(*in_ns("ip", "link", "set", "lo", "up"))
        with tempfile.TemporaryDirectory(prefix="kernel-bench-") as tmp:
            mixed = os.path.join(tmp, "mixed.pcap")
            mixed_capture(mixed)
            for rnd in range(reps):
                results["testpmd-tap"].append(run_testpmd(BENCH_UDP, warmup, seconds, rnd))
                results["fastpathd-kernel"].append(
                    run_fastpathd(BENCH_UDP, True, '\n[kernel]\npunt = ["unhandled"]\npunt_rate = 0\n', warmup, seconds, rnd, tmp))
                results["fastpathd-mixed-kernel"].append(
                    run_fastpathd(mixed, True, SINK + '\n[kernel]\npunt = ["unhandled"]\npunt_rate = 0\n', warmup, seconds, rnd, tmp))
                results["fastpathd-mixed-drop"].append(
                    run_fastpathd(mixed, False, SINK, warmup, seconds, rnd, tmp))
                print(f"round {rnd + 1}/{reps}: " + "; ".join(
                    f"{k} {v[-1]}" for k, v in results.items()), flush=True)
    finally:
        subprocess.run(["ip", "netns", "del", NS])

    def med(k, f):
        return statistics.median(r[f] for r in results[k])
    pmd, ours = med("testpmd-tap", "kernel_mpps"), med("fastpathd-kernel", "kernel_mpps")
    per_round = [f["kernel_mpps"] / t["kernel_mpps"] for t, f in zip(results["testpmd-tap"], results["fastpathd-kernel"])
                 if t["kernel_mpps"] > 0]
    sat, base = med("fastpathd-mixed-kernel", "delivered_mpps"), med("fastpathd-mixed-drop", "delivered_mpps")
    rows = [
        ("testpmd-tap", f"{pmd:.3f} Mpps into the tap", ""),
        ("fastpathd-kernel", f"{ours:.3f} Mpps into the kernel interface "
         f"(rx {med('fastpathd-kernel', 'rx_mpps'):.2f}, kernel_full {med('fastpathd-kernel', 'kernel_full_mpps'):.2f})",
         f"{statistics.median(per_round):.2f}x testpmd (goal >= 0.9)" if per_round else ""),
        ("fastpathd-mixed-kernel", f"sink {sat:.2f} Mpps with the kernel path saturated "
         f"({med('fastpathd-mixed-kernel', 'kernel_mpps'):.3f} Mpps into it)", ""),
        ("fastpathd-mixed-drop", f"sink {base:.2f} Mpps, closed port answered by the ICMP limiter",
         f"saturated / not: {sat / base:.2f}" if base > 0 else ""),
    ]
    text = [f"# Kernel path benchmark ({reps} rounds x {seconds:g} s, warm-up {warmup:g} s, medians)", "",
            "| scenario | measured | ratio |", "| --- | --- | --- |"]
    text += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    print("\n".join(text))
    with open(os.path.join(out_dir, "kernel_path.md"), "w") as f:
        f.write("\n".join(text) + "\n")


if __name__ == "__main__":
    main()
