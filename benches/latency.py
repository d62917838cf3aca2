#!/usr/bin/python3
"""Latency at low load and the idle cost, fastpathd beside Linux in one run.

Two identical veth pairs, each between a client namespace (192.0.2.2/24) and a server
namespace (192.0.2.1/24):

- `fastpathd`: fastpathd on its veth end (`net_af_packet`, qpairs=2, one RX lcore, one worker)
  with a kernel interface, as control/tests/kernel.rs sets it up: it answers ping on the RX
  lcore, UDP port 7 with an `echo` service (a worker), and sends DNS (port 53, action `kernel`)
  through the kernel interface to dnsmasq behind it;
- `linux`: the kernel on its veth end answers ping, a Python UDP echo server port 7, dnsmasq 53.

Measured, alternating fastpathd and Linux: ping at 1,000 pps (`ping -i 0.001`), a UDP echo
client and a DNS client (Python, one query in flight, paced at 1 ms) — p50, p99 and max of the
round trips in µs, and fastpathd's CPU (% of a core) meanwhile; then its CPU over IDLE_SECONDS
of no traffic (/proc/PID/stat).

    FASTPATHD=target/release/fastpathd benches/latency.py
    LAT_LCORES='idle_wait_ms = 0' benches/latency.py      # extra [lcores] keys (old policy)
    LAT_COUNT=3000 (pings / queries per test)  IDLE_SECONDS=5

Root, dnsmasq, ping, ethtool. Prints a Markdown table.
"""
import os
import re
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = f"{os.getpid() % 100000}"
COUNT = int(os.environ.get("LAT_COUNT", "3000"))
IDLE_SECONDS = float(os.environ.get("IDLE_SECONDS", "5"))
LCORES = os.environ.get("LAT_LCORES", "")
FASTPATHD = os.environ.get("FASTPATHD") or os.path.join(
    os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target")), "release", "fastpathd"
)


def sh(*cmd, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.exit(f"latency: {' '.join(cmd)}: {r.stderr.strip()}")
    return r.stdout


def ns(name, *cmd):
    return ["ip", "netns", "exec", name, *cmd]


class Pair:
    """A server namespace and a client namespace joined by a veth pair."""

    def __init__(self, kind):
        self.server, self.client = f"lat{TAG}{kind}s", f"lat{TAG}{kind}c"
        self.port, self.peer = f"l{TAG}{kind}p", f"l{TAG}{kind}q"
        for n in (self.server, self.client):
            sh("ip", "netns", "add", n)
            sh("ip", "-n", n, "link", "set", "lo", "up")
        sh("ip", "link", "add", "dev", self.port, "type", "veth", "peer", "name", self.peer)
        sh("ip", "link", "set", "dev", self.port, "netns", self.server)
        sh("ip", "link", "set", "dev", self.peer, "netns", self.client)
        sh("ip", "-n", self.client, "addr", "add", "192.0.2.2/24", "dev", self.peer)
        for n, d in ((self.server, self.port), (self.client, self.peer)):
            sh("ip", "-n", n, "link", "set", "dev", d, "up")
            # Checksums on the wire, as a NIC would put them there (fastpathd checks them).
            sh(*ns(n, "ethtool", "-K", d, "tx", "off"))

    def close(self):
        for n in (self.server, self.client):
            sh("ip", "netns", "del", n, check=False)


DNSMASQ = [
    "dnsmasq", "--no-daemon", "--no-resolv", "--no-hosts", "--bind-interfaces",
    "--listen-address=192.0.2.1", "--address=/fast.test/198.51.100.77", "--user=root",
]

UDP_ECHO = """
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("192.0.2.1", 7))
while True:
    d, a = s.recvfrom(2048)
    s.sendto(d, a)
"""

# One request in flight, paced at PERIOD; prints each round trip in ns (0: lost).
CLIENT = r"""
import socket, sys, time, struct
kind, n = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(0.5)
dst = ("192.0.2.1", 7 if kind == "udp" else 53)
out = []
nxt = time.perf_counter()
for i in range(n):
    if kind == "udp":
        msg = struct.pack("!I", i) + b"x" * 28
    else:
        q = b"".join(bytes([len(p)]) + p for p in (b"fast", b"test")) + b"\0"
        msg = struct.pack("!HHHHHH", i & 0xffff, 0x0100, 1, 0, 0, 0) + q + struct.pack("!HH", 1, 1)
    t0 = time.perf_counter_ns()
    s.sendto(msg, dst)
    try:
        while True:
            d = s.recv(2048)
            if d[:2] == msg[:2] if kind == "dns" else d[:4] == msg[:4]:
                break
        out.append(time.perf_counter_ns() - t0)
    except socket.timeout:
        out.append(0)
    nxt += 0.001
    # Slept, not spun: a spinning client would take a CPU from what it measures.
    left = nxt - time.perf_counter()
    if left > 0:
        time.sleep(left)
print(" ".join(map(str, out)))
"""


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))]


def summary(us, sent):
    if not us:
        return {"p50": float("nan"), "p99": float("nan"), "max": float("nan"), "lost": sent}
    return {"p50": pct(us, 50), "p99": pct(us, 99), "max": max(us), "lost": sent - len(us)}


def ping(pair):
    out = sh(*ns(pair.client, "ping", "-n", "-i", "0.001", "-c", str(COUNT), "-W", "1", "192.0.2.1"), check=False)
    us = [float(m) * 1000 for m in re.findall(r"time=([\d.]+) ms", out)]
    return summary(us, COUNT)


def client(pair, kind):
    out = sh(*ns(pair.client, "/usr/bin/python3", "-c", CLIENT, kind, str(COUNT)))
    ns_ = [int(x) for x in out.split()]
    return summary([x / 1000 for x in ns_ if x > 0], COUNT)


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)


def wait_port(nsname, port):
    for _ in range(200):
        if f":{port} " in sh(*ns(nsname, "ss", "-H", "-lun"), check=False):
            return
        time.sleep(0.05)
    sys.exit(f"latency: nothing listens on UDP {port} in {nsname}")


def main():
    if not os.path.exists(FASTPATHD):
        sys.exit(f"latency: no fastpathd at {FASTPATHD} (cargo build --release -p fastpathd, or FASTPATHD=)")
    tmp = tempfile.mkdtemp(prefix="fp-latency-")
    fp, lx = Pair("f"), Pair("x")
    procs = []
    try:
        # Linux answers on its own veth end.
        sh("ip", "-n", lx.server, "addr", "add", "192.0.2.1/24", "dev", lx.port)
        procs.append(subprocess.Popen(ns(lx.server, "/usr/bin/python3", "-c", UDP_ECHO)))
        procs.append(subprocess.Popen(ns(lx.server, *DNSMASQ, f"--pid-file={tmp}/lx.pid"),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        # fastpathd's kernel must not see the veth end it owns (control/tests/kernel.rs).
        for q in (f"net.ipv6.conf.{fp.port}.disable_ipv6=1", f"net.ipv4.conf.{fp.port}.arp_ignore=8",
                  f"net.ipv4.conf.{fp.port}.rp_filter=1", "net.ipv4.conf.all.rp_filter=1"):
            sh(*ns(fp.server, "sysctl", "-qw", q))
        kif = f"lk{TAG}"
        cfg = os.path.join(tmp, "c.toml")
        eal = ["--no-huge", "-m", "256", "--no-pci", "--no-shconf", f"--file-prefix=fplat{TAG}",
               "--no-telemetry", "--log-level=lib.eal:warning",
               f"--vdev=net_af_packet0,iface={fp.port},qpairs=2"]
        with open(cfg, "w") as f:
            f.write(
                f"[dpdk]\neal_args = [{', '.join(repr(a).replace(chr(39), chr(34)) for a in eal)}]\nmbufs = 16383\n\n"
                f"[[port]]\ndevice = \"net_af_packet0\"\nrx_queues = 2\ntx_queues = 2\n"
                f"ipv4 = [\"192.0.2.1/24\"]\nkernel_interface = \"{kif}\"\n\n"
                f"[lcores]\nrx = [0]\nworkers = [1]\n{LCORES}\n\n"
                f"[control]\nsocket = \"{tmp}/control.sock\"\n\n[metrics]\nenabled = false\n\n"
                "[[service]]\nname = \"dns\"\nports = [53]\nsockets = 2\nsocket_capacity = 256\naction = \"kernel\"\n\n"
                "[[service]]\nname = \"echo\"\nports = [7]\naction = \"echo\"\n"
            )
        log = open(os.path.join(tmp, "fastpathd.log"), "w")
        d = subprocess.Popen(ns(fp.server, FASTPATHD, "--config", cfg), stdout=log, stderr=log)
        procs.append(d)
        for _ in range(200):
            if sh(*ns(fp.server, "ip", "-o", "addr", "show", "dev", kif), check=False).strip():
                break
            if d.poll() is not None:
                sys.exit(f"latency: fastpathd exited; see {tmp}/fastpathd.log")
            time.sleep(0.05)
        procs.append(subprocess.Popen(ns(fp.server, *DNSMASQ, f"--pid-file={tmp}/fp.pid"),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_port(fp.server, 53)
        wait_port(lx.server, 53)
        wait_port(lx.server, 7)
        # ARP and the kernel's neighbour entries settle.
        for p in (fp, lx):
            sh(*ns(p.client, "ping", "-c", "2", "-i", "0.2", "-W", "1", "192.0.2.1"), check=False)
            client(p, "dns")

        rows = []
        hz = os.sysconf("SC_CLK_TCK")
        for name, run in (("ping", ping), ("udp echo", lambda p: client(p, "udp")),
                          ("dns (kernel path)", lambda p: client(p, "dns"))):
            t0, c0 = time.monotonic(), cpu_ticks(d.pid)
            a = run(fp)
            a["cpu"] = (cpu_ticks(d.pid) - c0) / hz / (time.monotonic() - t0) * 100
            rows.append((name, a, run(lx)))
        time.sleep(1)
        t0, c0 = time.monotonic(), cpu_ticks(d.pid)
        time.sleep(IDLE_SECONDS)
        t1, c1 = time.monotonic(), cpu_ticks(d.pid)
        idle = (c1 - c0) / os.sysconf("SC_CLK_TCK") / (t1 - t0) * 100

        print(f"latency at 1,000 pps, {COUNT} each, µs (fastpathd [lcores] extra: {LCORES or 'defaults'})\n")
        print("| test | fastpathd p50 | p99 | max | lost | CPU % | Linux p50 | p99 | max | lost | Δp50 | Δp99 |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for name, a, b in rows:
            print(f"| {name} | {a['p50']:.0f} | {a['p99']:.0f} | {a['max']:.0f} | {a['lost']} | {a['cpu']:.0f} "
                  f"| {b['p50']:.0f} | {b['p99']:.0f} | {b['max']:.0f} | {b['lost']} "
                  f"| {a['p50'] - b['p50']:.0f} | {a['p99'] - b['p99']:.0f} |")
        print(f"\nidle fastpathd: {idle:.1f} % of a core over {IDLE_SECONDS:.0f} s")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        fp.close()
        lx.close()


if __name__ == "__main__":
    main()
