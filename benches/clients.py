#!/usr/bin/python3
"""Real programs through fastpathd's kernel path, side by side with plain Linux and a DPDK bridge,
in one run (alternating rounds, medians):

- `direct`: the server namespace's veth end holds 192.0.2.1 itself; the programs talk to Linux.
- `bridge`: dpdk-testpmd `--forward-mode=io` between net_af_packet on that veth end and a
  net_tap interface holding 192.0.2.1 and the veth end's MAC: DPDK with no processing.
- `fastpathd`: fastpathd on net_af_packet over the veth end (qpairs=2, rx=[0] workers=[1], the
  documented defaults otherwise), its kernel interface holding 192.0.2.1; the programs' ports
  are `action = "kernel"` services (BENCH_KERNEL=punt: no services, the default punt budget
  carries them), UDP port 7 an `action = "echo"` service.

In every setup the client namespace holds 192.0.2.2 on the other veth end, and both ends have
checksum offload off (`ethtool -K tx off`, what an af_packet port needs on its peer). Measured
from the client: iperf3 TCP both ways, dnsperf against dnsmasq, ab (a new connection per
request) against lighttpd, iperf3 UDP at 1 Gbit/s, latency of ping, a UDP echo and DNS at 1,000
a second, and the idle CPU of fastpathd / testpmd. See benches/README.md.

    ci/bench-clients                                                   # 3 rounds x 5 s
    BENCH_SECONDS=1 BENCH_REPS=1 BENCH_WARMUP=0 BENCH_OUT=/tmp/c ci/bench-clients   # smoke
"""
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVER, CLIENT = "192.0.2.1", "192.0.2.2"
SETUPS = ("direct", "bridge", "fastpathd")
TOOLS = {  # program: the Debian package that has it (ci/setup installs them)
    "ip": "iproute2", "ethtool": "ethtool", "ping": "iputils-ping", "curl": "curl", "ss": "iproute2",
    "iperf3": "iperf3", "dnsperf": "dnsperf", "dnsmasq": "dnsmasq-base", "lighttpd": "lighttpd",
    "ab": "apache2-utils",
}
TESTPMD = os.environ.get("TESTPMD", "dpdk-testpmd")
FASTPATHD = os.environ.get("FASTPATHD") or os.path.join(REPO, "target", "release", "fastpathd")
# af_packet ring frames, as docs/operating.md has it for qpairs > 1 (room for the RX lcore's lag
# before DPDK's fanout rollover reorders a flow); the bridge's ring gets the same.
FRAMECNT = 4096
# The counters that explain a loss on fastpathd's side, read around every measurement.
COUNTERS = ("flow_limited", "rollover", "kernel_full", "kernel_limited", "socket_full")

# Paced request/response over UDP from the client: every RATE-th of a second one datagram,
# waits for its answer (50 ms at most), prints p50/p99/avg in microseconds and the lost count.
# kind "echo": 64 bytes carrying the index; "dns": an A query for fast.test whose ID is the index.
RTT_CLIENT = r"""
import json, socket, struct, sys, time
host, port, rate, secs, kind = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
def msg(i):
    if kind == "dns":
        return struct.pack("!HHHHHH", i & 0xFFFF, 0x0100, 1, 0, 0, 0) + b"\x04fast\x04test\x00" + struct.pack("!HH", 1, 1)
    return struct.pack("!Q", i) + bytes(56)
def ok(r, i):
    return r[:2] == struct.pack("!H", i & 0xFFFF) if kind == "dns" else r[:8] == struct.pack("!Q", i)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect((host, port))
s.settimeout(0.05)
n, lat, lost = int(rate * secs), [], 0
t0 = time.perf_counter()
for i in range(n):
    due = t0 + i / rate
    while (now := time.perf_counter()) < due:
        time.sleep(due - now)
    m = msg(i)
    t = time.perf_counter_ns()
    s.send(m)
    try:
        while not ok(s.recv(4096), i):
            pass
        lat.append((time.perf_counter_ns() - t) / 1000)
    except (socket.timeout, ConnectionRefusedError):
        lost += 1
lat.sort()
q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")
print(json.dumps({"p50": q(0.5), "p99": q(0.99), "avg": sum(lat) / len(lat) if lat else float("nan"), "lost": lost, "sent": n}))
"""

# The kernel's UDP echo server on port 7 for direct and bridge (fastpathd's is its echo service).
UDP_ECHO = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 7))
while True:
    d, a = s.recvfrom(65535)
    s.sendto(d, a)
"""

DNS_QUERIES = "fast.test A\nwww.fast.test A\nmail.fast.test A\nfast.test AAAA\n"

LIGHTTPD = """server.document-root = "{root}"
server.bind = "{addr}"
server.port = 80
server.pid-file = "{tmp}/lighttpd.pid"
server.errorlog = "{tmp}/lighttpd.err"
server.max-fds = 4096
server.max-connections = 2048
index-file.names = ("index.html")
mimetype.assign = (".html" => "text/html")
"""

FASTPATHD_CONFIG = """[dpdk]
eal_args = [{eal}]

[[port]]
device = "net_af_packet0"
rx_queues = 2
tx_queues = 2
ipv4 = ["{addr}/24"]
kernel_interface = "{kif}"

[lcores]
rx = [0]
workers = [1]

[control]
socket = "{tmp}/control.sock"

[metrics]
listen = "127.0.0.1:9464"

[[service]]
name = "echo"
ports = [7]
action = "echo"
{services}"""

KERNEL_SERVICES = """
[[service]]
name = "iperf-tcp"
protocol = "tcp"
ports = [5201]
action = "kernel"

[[service]]
name = "iperf-udp"
ports = [5201]
action = "kernel"

[[service]]
name = "dns"
ports = [53]
action = "kernel"

[[service]]
name = "http"
protocol = "tcp"
ports = [80]
action = "kernel"
"""


class Failed(Exception):
    pass


RETRIED = []  # measurements whose tool failed once, named in the report


def env_num(name, default):
    v = os.environ.get(name, "")
    return float(v) if v else default


def run(cmd, timeout=60, check=True):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise Failed(f"{' '.join(cmd)}: no answer in {timeout} s")
    if check and r.returncode != 0:
        raise Failed(f"{' '.join(cmd)}: exit {r.returncode}: {(r.stderr or r.stdout).strip()[-2000:]}")
    return r.stdout


class Bed:
    """The two namespaces, the veth pair between them and every program started there; `close`
    kills the programs (and anything else left in the namespaces) and deletes both."""

    live = []

    def __init__(self, setup, rnd, tmp):
        tag = f"{os.getpid() % 100000}{rnd % 100}{setup[0]}"
        self.setup, self.tmp = setup, tmp
        self.srv, self.cli = f"fpcs{tag}", f"fpcc{tag}"
        self.port, self.peer, self.kif = f"fcp{tag}", f"fcc{tag}", f"fck{tag}"
        self.procs = []
        Bed.live.append(self)
        for ns in (self.srv, self.cli):
            run(["ip", "netns", "add", ns])
        run(["ip", "link", "add", "dev", self.port, "type", "veth", "peer", "name", self.peer])
        run(["ip", "link", "set", "dev", self.port, "netns", self.srv])
        run(["ip", "link", "set", "dev", self.peer, "netns", self.cli])
        for ns in (self.srv, self.cli):
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
        run(["ip", "-n", self.cli, "addr", "add", f"{CLIENT}/24", "dev", self.peer])
        # ab opens a connection per request: room for its TIME_WAITs, alike in every setup.
        self.sysctl(self.cli, "net.ipv4.tcp_tw_reuse=1", "net.ipv4.ip_local_port_range=10000 65000")
        if setup == "direct":
            run(["ip", "-n", self.srv, "addr", "add", f"{SERVER}/24", "dev", self.port])
        else:
            # The server namespace's kernel keeps off the veth end DPDK reads, as it would off a
            # NIC given to DPDK; early demux off (docs/operating.md "On a veth or a VM's interface").
            self.sysctl(self.srv, f"net.ipv6.conf.{self.port}.disable_ipv6=1", f"net.ipv4.conf.{self.port}.arp_ignore=8",
                        f"net.ipv4.conf.{self.port}.rp_filter=1", "net.ipv4.conf.all.rp_filter=1",
                        "net.ipv4.ip_early_demux=0")
        for ns, dev in ((self.srv, self.port), (self.cli, self.peer)):
            run(["ip", "-n", ns, "link", "set", "dev", dev, "up"])
            # Checksums on the wire: an af_packet port's peer needs it; the same veth everywhere.
            run(["ip", "netns", "exec", ns, "ethtool", "-K", dev, "tx", "off"])
        self.mac = run(["ip", "netns", "exec", self.srv, "cat", f"/sys/class/net/{self.port}/address"]).strip()

    @staticmethod
    def sysctl(ns, *kv):
        for x in kv:
            run(["ip", "netns", "exec", ns, "sysctl", "-qw", x])

    def spawn(self, name, cmd, ns=None, stdin=None):
        log = open(os.path.join(self.tmp, f"{name}.log"), "w")
        p = subprocess.Popen(["ip", "netns", "exec", ns or self.srv, *cmd], stdout=log, stderr=subprocess.STDOUT,
                             stdin=stdin if stdin is not None else subprocess.DEVNULL)
        self.procs.append((name, p))
        return p

    def log(self, name):
        try:
            return open(os.path.join(self.tmp, f"{name}.log")).read()[-3000:]
        except OSError:
            return ""

    def server(self, *cmd, timeout=60):
        return run(["ip", "netns", "exec", self.srv, *cmd], timeout=timeout)

    def client(self, *cmd, timeout=60, check=True):
        return run(["ip", "netns", "exec", self.cli, *cmd], timeout=timeout, check=check)

    def wait_listening(self, port, proto):
        deadline = time.monotonic() + 20
        while f":{port} " not in self.server("ss", "-H", "-lun" if proto == "udp" else "-ltn"):
            if time.monotonic() > deadline:
                raise Failed(f"{self.setup}: nothing listens on {proto} {port}")
            time.sleep(0.1)

    def close(self):
        for _, p in self.procs:
            if p.poll() is None:
                p.terminate()
        for _, p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for ns in (self.srv, self.cli):
            # Anything still in the namespace was started here (a daemonised child, say).
            r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            for pid in r.stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        if self in Bed.live:
            Bed.live.remove(self)


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)


def idle_cpu(pid, seconds):
    """CPU share (1.0 = one CPU, all threads) of `pid` over `seconds` with no traffic."""
    a, ta = cpu_ticks(pid), time.monotonic()
    time.sleep(seconds)
    b, tb = cpu_ticks(pid), time.monotonic()
    return (b - a) / os.sysconf("SC_CLK_TCK") / (tb - ta)


def start_bridge(bed):
    prefix = f"fpcb{bed.port}"
    cmd = [TESTPMD, "--no-huge", "-m", "512", "--no-pci", f"--file-prefix={prefix}", "--no-telemetry",
           "--log-level=lib.eal:warning", f"--vdev=net_af_packet0,iface={bed.port},qpairs=1,framecnt={FRAMECNT}",
           f"--vdev=net_tap0,iface={bed.kif},mac={bed.mac}", "-l", "0,1", "--",
           "--forward-mode=io", "--nb-cores=1", "--auto-start",
           "--total-num-mbufs=16383"]  # fastpathd's default pool; testpmd's own does not fit -m 512
    # Without -i testpmd forwards until a line (or EOF) arrives on stdin: keep stdin open.
    p = bed.spawn("testpmd", cmd, stdin=subprocess.PIPE)
    wait_interface(bed, p, "testpmd")
    bed.server("ip", "addr", "add", f"{SERVER}/24", "dev", bed.kif)
    bed.server("ip", "link", "set", "dev", bed.kif, "up")
    time.sleep(0.5)
    if p.poll() is not None:
        raise Failed(f"testpmd exited:\n{bed.log('testpmd')}")
    return p


def wait_interface(bed, p, name):
    deadline = time.monotonic() + 60
    while subprocess.run(["ip", "-n", bed.srv, "link", "show", "dev", bed.kif], capture_output=True).returncode != 0:
        if p.poll() is not None or time.monotonic() > deadline:
            raise Failed(f"{name} did not bring up {bed.kif}:\n{bed.log(name)}")
        time.sleep(0.2)


def start_fastpathd(bed, punt_only):
    eal = ["--no-huge", "-m", "512", "--no-pci", f"--file-prefix=fpcf{bed.port}",
           f"--vdev=net_af_packet0,iface={bed.port},qpairs=2,framecnt={FRAMECNT}"]
    cfg = os.path.join(bed.tmp, "fastpathd.toml")
    with open(cfg, "w") as f:
        f.write(FASTPATHD_CONFIG.format(eal=", ".join(f'"{a}"' for a in eal), addr=SERVER, kif=bed.kif, tmp=bed.tmp,
                                        services="" if punt_only else KERNEL_SERVICES))
    p = bed.spawn("fastpathd", [FASTPATHD, "--config", cfg, "--metrics-dump", os.path.join(bed.tmp, "dump.prom")])
    deadline = time.monotonic() + 60
    while "fastpathd: running" not in bed.log("fastpathd"):
        if p.poll() is not None or time.monotonic() > deadline:
            raise Failed(f"fastpathd did not start:\n{bed.log('fastpathd')}")
        time.sleep(0.2)
    wait_interface(bed, p, "fastpathd")
    return p


def parse_metrics(text):
    m = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            m[k] = float(v)
    return m


def family(m, name, *needles):
    return sum(v for k, v in m.items() if (k == name or k.startswith(name + "{")) and all(n in k for n in needles))


def counters(bed):
    m = parse_metrics(bed.server("curl", "-s", "-m", "5", "http://127.0.0.1:9464/metrics"))
    c = {o: family(m, "fastpath_packets_total", f'outcome="{o}"') for o in COUNTERS if o != "rollover"}
    c["rollover"] = family(m, "fastpath_rollover_total")
    return c


def start_servers(bed, www):
    addr = SERVER
    conf = os.path.join(bed.tmp, "lighttpd.conf")
    with open(conf, "w") as f:
        f.write(LIGHTTPD.format(root=www, addr=addr, tmp=bed.tmp))
    bed.spawn("lighttpd", ["lighttpd", "-D", "-f", conf])
    bed.spawn("iperf3", ["iperf3", "-s", "-B", addr])
    bed.spawn("dnsmasq", ["dnsmasq", "--no-daemon", "--no-resolv", "--no-hosts", "--bind-interfaces",
                          f"--listen-address={addr}", "--address=/fast.test/198.51.100.77",
                          "--address=/fast.test/2001:db8:77::1", "--user=root",
                          f"--pid-file={bed.tmp}/dnsmasq.pid"])
    if bed.setup != "fastpathd":
        bed.spawn("udp-echo", ["/usr/bin/python3", "-c", UDP_ECHO, addr])
        bed.wait_listening(7, "udp")
    for port, proto in ((80, "tcp"), (5201, "tcp"), (53, "udp")):
        bed.wait_listening(port, proto)
    # The path is up once a ping comes back (ARP resolved both ways).
    deadline = time.monotonic() + 20
    while subprocess.run(["ip", "netns", "exec", bed.cli, "ping", "-c", "1", "-W", "1", addr],
                         capture_output=True).returncode != 0:
        if time.monotonic() > deadline:
            raise Failed(f"{bed.setup}: {addr} does not answer ping")


def iperf_end(out, want):
    """The `end` of iperf3's JSON, or what went wrong."""
    try:
        d = json.loads(out)
    except ValueError:
        raise Failed(f"iperf3 printed no JSON:\n{out[-2000:]}")
    end = d.get("end", {})
    if d.get("error") or want not in end:
        raise Failed(f"iperf3: {d.get('error') or 'no ' + want}; end has {sorted(end)}")
    return end


def iperf_tcp(bed, seconds, warmup, reverse):
    out = bed.client("iperf3", "-c", SERVER, "-t", f"{seconds:g}", "-O", f"{warmup:g}", "-J", *(["-R"] if reverse else []),
                     timeout=seconds + warmup + 30, check=False)
    end = iperf_end(out, "sum_received")
    return {"mbps": end["sum_received"]["bits_per_second"] / 1e6, "retransmits": end["sum_sent"].get("retransmits", 0)}


def iperf_udp(bed, seconds, warmup):
    out = bed.client("iperf3", "-c", SERVER, "-u", "-b", "1G", "-t", f"{seconds:g}", "-O", f"{warmup:g}", "-J",
                     timeout=seconds + warmup + 30, check=False)
    r = iperf_end(out, "sum_received")["sum_received"]
    return {"mbps": r["bits_per_second"] / 1e6, "loss": r["lost_percent"]}


def dnsperf(bed, seconds, warmup, qfile):
    if warmup > 0:
        bed.client("dnsperf", "-s", SERVER, "-d", qfile, "-l", f"{warmup:g}", timeout=warmup + 30)
    out = bed.client("dnsperf", "-s", SERVER, "-d", qfile, "-l", f"{seconds:g}", timeout=seconds + 30)
    qps = re.search(r"Queries per second:\s+([\d.]+)", out)
    lost = re.search(r"Queries lost:\s+\d+ \(([\d.]+)%\)", out)
    if not qps or not lost:
        raise Failed(f"dnsperf printed no rate:\n{out}")
    return {"qps": float(qps.group(1)), "lost": float(lost.group(1))}


def busy_ticks():
    """Ticks every CPU spent busy so far (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v[:8]) - v[3] - v[4]


def ab(bed, seconds, warmup, pid):
    url = f"http://{SERVER}/index.html"
    # -t before -n: -t alone caps the run at 50,000 requests. No -k: a connection per request.
    base = ["ab", "-q", "-r", "-c", "8"]
    if warmup > 0:
        bed.client(*base, "-t", f"{warmup:g}", "-n", "10000000", url, timeout=warmup + 60)
    # CPU per request, all CPUs and the DPDK process's share: what a connection costs where
    # the rate is bound by the CPUs rather than by round trips.
    b0, p0 = busy_ticks(), cpu_ticks(pid) if pid else 0
    out = bed.client(*base, "-t", f"{seconds:g}", "-n", "10000000", url, timeout=seconds + 60)
    b1, p1 = busy_ticks(), cpu_ticks(pid) if pid else 0
    rps = re.search(r"Requests per second:\s+([\d.]+)", out)
    done = re.search(r"Complete requests:\s+(\d+)", out)
    failed = re.search(r"Failed requests:\s+(\d+)", out)
    if not rps or not failed or not done:
        raise Failed(f"ab printed no rate:\n{out}")
    n, us = max(1, int(done.group(1))), 1e6 / os.sysconf("SC_CLK_TCK")
    return {"rps": float(rps.group(1)), "failed": int(failed.group(1)), "cpu_us": (b1 - b0) * us / n,
            "dpdk_us": (p1 - p0) * us / n if pid else float("nan")}


def ping(bed, seconds):
    n = max(100, int(1000 * seconds))
    out = bed.client("ping", "-i", "0.001", "-c", str(n), "-W", "1", SERVER, timeout=seconds * 3 + 30,
                     check=False)  # ping exits 1 when a reply is missing: counted below
    lat = sorted(float(x.split("time=")[1].split()[0]) * 1000 for x in out.splitlines() if "time=" in x)
    if not lat:
        raise Failed(f"ping: no replies:\n{out[-2000:]}")
    return {"p50": lat[len(lat) // 2], "p99": lat[min(len(lat) - 1, int(0.99 * len(lat)))],
            "avg": sum(lat) / len(lat), "lost": n - len(lat)}


def rtt(bed, port, kind, seconds):
    out = bed.client("/usr/bin/python3", "-c", RTT_CLIENT, SERVER, str(port), "1000", f"{max(seconds, 0.5):g}", kind,
                     timeout=seconds * 3 + 30)
    try:
        r = json.loads(out)
    except ValueError:
        raise Failed(f"the {kind} client printed no figures:\n{out[-2000:]}")
    if r["lost"] == r["sent"]:
        raise Failed(f"{kind} at {port}: no answers")
    return r


def one_setup(setup, rnd, seconds, warmup, tmp, www, qfile, punt_only):
    """One round of one setup: every measurement, in order. Returns {measurement: {figure: value}}."""
    d = os.path.join(tmp, f"{setup}-{rnd}")
    os.makedirs(d)
    bed = Bed(setup, rnd, d)
    res, fp = {}, None
    try:
        proc = None
        if setup == "bridge":
            proc = start_bridge(bed)
        elif setup == "fastpathd":
            proc = fp = start_fastpathd(bed, punt_only)
        start_servers(bed, www)
        time.sleep(1)
        if proc is not None:
            res["idle"] = {"cpu": idle_cpu(proc.pid, max(seconds, 1))}
        steps = [
            ("tcp", lambda: iperf_tcp(bed, seconds, warmup, False)),
            ("tcp_r", lambda: iperf_tcp(bed, seconds, warmup, True)),
            ("dns", lambda: dnsperf(bed, seconds, warmup, qfile)),
            ("http", lambda: ab(bed, seconds, warmup, proc.pid if proc else None)),
            ("udp", lambda: iperf_udp(bed, seconds, warmup)),
            ("ping", lambda: ping(bed, seconds)),
            ("echo", lambda: rtt(bed, 7, "echo", seconds)),
            ("dns_lat", lambda: rtt(bed, 53, "dns", seconds)),
        ]
        for name, f in steps:
            before = counters(bed) if fp else None
            res[name] = None
            for attempt in (1, 2):  # a tool's failure (not a slow figure) is retried once
                try:
                    res[name] = f()
                    break
                except Failed as e:
                    print(f"{setup} round {rnd + 1}: {name} failed (attempt {attempt}): {e}", file=sys.stderr, flush=True)
                    RETRIED.append(f"{setup} round {rnd + 1} {name}")
            if fp:
                after = counters(bed)
                res[f"{name}_counters"] = {k: after[k] - before[k] for k in COUNTERS}
        if fp:
            fp.send_signal(signal.SIGINT)
            fp.wait(timeout=60)
            if fp.returncode != 0:
                raise Failed(f"fastpathd exited {fp.returncode}:\n{bed.log('fastpathd')}")
            end = parse_metrics(open(os.path.join(d, "dump.prom")).read())
            rx = family(end, "fastpath_rx_packets_total")
            held = family(end, "fastpath_reasm_held_fragments")
            if rx != family(end, "fastpath_packets_total") + held or end.get("fastpath_mbufs_in_use", 0) != 0:
                raise Failed(f"fastpathd's exit dump breaks rx == outcomes or leaks mbufs ({d}/dump.prom)")
    finally:
        bed.close()
    return res


# (row label, measurement, figure, unit, format)
ROWS = [
    ("iperf3 TCP, client sends", "tcp", "mbps", "Mbit/s", "{:.0f}"),
    ("iperf3 TCP, client sends: retransmits", "tcp", "retransmits", "", "{:.0f}"),
    ("iperf3 TCP -R, server sends", "tcp_r", "mbps", "Mbit/s", "{:.0f}"),
    ("iperf3 TCP -R: retransmits", "tcp_r", "retransmits", "", "{:.0f}"),
    ("dnsperf against dnsmasq", "dns", "qps", "queries/s", "{:.0f}"),
    ("dnsperf: lost", "dns", "lost", "%", "{:.2f}"),
    ("ab against lighttpd, a connection per request", "http", "rps", "requests/s", "{:.0f}"),
    ("ab: failed requests", "http", "failed", "", "{:.0f}"),
    ("ab: CPU per request, every CPU", "http", "cpu_us", "µs", "{:.0f}"),
    ("ab: CPU per request, the DPDK process", "http", "dpdk_us", "µs", "{:.0f}"),
    ("iperf3 UDP -b 1G: received", "udp", "mbps", "Mbit/s", "{:.0f}"),
    ("iperf3 UDP -b 1G: loss", "udp", "loss", "%", "{:.2f}"),
    ("ping at 1,000/s: p50", "ping", "p50", "µs", "{:.0f}"),
    ("ping at 1,000/s: p99", "ping", "p99", "µs", "{:.0f}"),
    ("ping at 1,000/s: avg", "ping", "avg", "µs", "{:.0f}"),
    ("ping at 1,000/s: lost", "ping", "lost", "", "{:.0f}"),
    ("UDP echo at 1,000/s: p50", "echo", "p50", "µs", "{:.0f}"),
    ("UDP echo at 1,000/s: p99", "echo", "p99", "µs", "{:.0f}"),
    ("UDP echo at 1,000/s: lost", "echo", "lost", "", "{:.0f}"),
    ("DNS query at 1,000/s: p50", "dns_lat", "p50", "µs", "{:.0f}"),
    ("DNS query at 1,000/s: p99", "dns_lat", "p99", "µs", "{:.0f}"),
    ("idle CPU of the DPDK process", "idle", "cpu", "% of a CPU", "{:.1f}"),
]
MEASUREMENTS = ["tcp", "tcp_r", "dns", "http", "udp", "ping", "echo", "dns_lat"]


def median_of(results, setup, meas, fig):
    vals = [r[meas][fig] for r in results[setup] if r.get(meas) is not None and fig in r[meas]]
    vals = [v for v in vals if v == v]
    return statistics.median(vals) if vals else None


def machine():
    model = "?"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return model


def report(results, reps, seconds, warmup, punt_only, load):
    def cell(v, fmt, scale=1):
        return "n/a" if v is None else fmt.format(v * scale)

    def ratio(a, b):
        return "–" if a is None or b is None or b == 0 else f"{a / b:.2f}"
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        f"# Clients benchmark: real programs through fastpathd, plain Linux and a DPDK bridge",
        "",
        f"Run of {stamp} on {machine()}, {os.cpu_count()} CPUs (load average {load[0]} at the start, "
        f"{load[1]} at the end): {reps} round(s), every setup once per round (every other round "
        f"backwards); throughput runs {seconds:g} s after {warmup:g} s of warm-up, latency {max(seconds, 0.5):g} s "
        f"at 1,000 a second; medians over rounds. fastpathd's kernel path: "
        + ("the default punt budget (no services)." if punt_only else "`action = \"kernel\"` services.")
        + " Kernel interfaces (fastpathd's and the bridge's): "
        + ("virtio-user" if os.path.exists("/dev/vhost-net") else "net_tap (no /dev/vhost-net)") + "."
        + " The links: veth pairs between namespaces of one VM (no NIC; fastpathd's port is net_af_packet "
        "on one, the bridge's too), so rates are bounded by the kernel's veth and socket costs on 2 CPUs, "
        "not by a wire: compare the columns, not these figures with a NIC's."
        + " Higher is better for rates, lower for latency, losses and CPU."
        + (f" Failed and run again (the error is in the run's log): {', '.join(RETRIED)}." if RETRIED else ""),
        "",
        "| measurement | unit | direct | bridge | fastpathd | fastpathd/direct | fastpathd/bridge | bridge/direct |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, meas, fig, unit, fmt in ROWS:
        scale = 100 if meas == "idle" else 1
        v = {s: median_of(results, s, meas, fig) for s in SETUPS}
        lines.append(f"| {label} | {unit} | {cell(v['direct'], fmt, scale)} | {cell(v['bridge'], fmt, scale)} | "
                     f"{cell(v['fastpathd'], fmt, scale)} | {ratio(v['fastpathd'], v['direct'])} | "
                     f"{ratio(v['fastpathd'], v['bridge'])} | {ratio(v['bridge'], v['direct'])} |")
    lines += ["", "fastpathd's counters during each measurement (median over rounds of the change; "
              "`socket_full`: a kernel service's queue had no room):", "",
              "| measurement | " + " | ".join(COUNTERS) + " |", "| --- |" + " ---: |" * len(COUNTERS)]
    for meas in MEASUREMENTS:
        vals = [median_of(results, "fastpathd", f"{meas}_counters", c) for c in COUNTERS]
        lines.append(f"| {meas} | " + " | ".join(cell(v, "{:.0f}") for v in vals) + " |")
    lines += ["", "Every round (direct / bridge / fastpathd):", "",
              "| measurement | " + " | ".join(f"round {i + 1}" for i in range(reps)) + " |",
              "| --- |" + " ---: |" * reps]
    for label, meas, fig, unit, fmt in ROWS:
        scale = 100 if meas == "idle" else 1
        cells = []
        for i in range(reps):
            parts = []
            for s in SETUPS:
                r = results[s][i] if i < len(results[s]) else {}
                x = r.get(meas)
                parts.append(cell(x[fig] if x and fig in x else None, fmt, scale))
            cells.append(" / ".join(parts))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main():
    missing = [f"{t} (package {p})" for t, p in TOOLS.items() if not shutil.which(t)]
    if not shutil.which(TESTPMD):
        missing.append(f"{TESTPMD} (package dpdk)")
    if not os.access(FASTPATHD, os.X_OK):
        missing.append(f"{FASTPATHD} (cargo build --release -p fastpathd)")
    if missing:
        sys.exit("bench-clients: missing " + ", ".join(missing) + "; ci/setup installs the packages")
    if os.geteuid() != 0:
        sys.exit("bench-clients: needs root (namespaces, veth, DPDK)")
    seconds = env_num("BENCH_SECONDS", 5)
    reps = int(env_num("BENCH_REPS", 3))
    warmup = env_num("BENCH_WARMUP", 2)
    punt_only = os.environ.get("BENCH_KERNEL", "service") == "punt"
    chosen = tuple(x for x in os.environ.get("BENCH_SETUPS", ",".join(SETUPS)).split(",") if x)
    if not chosen or any(x not in SETUPS for x in chosen):
        sys.exit(f"bench-clients: BENCH_SETUPS: a comma-separated subset of {','.join(SETUPS)}")
    out_dir = os.environ.get("BENCH_OUT", os.path.join(REPO, "benches"))
    os.makedirs(out_dir, exist_ok=True)

    def on_term(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    results = {s: [] for s in SETUPS}
    load = [os.getloadavg()[0], None]
    failures = 0
    tmp = tempfile.mkdtemp(prefix="bench-clients-")
    try:
        www = os.path.join(tmp, "www")
        os.makedirs(www)
        with open(os.path.join(www, "index.html"), "w") as f:
            f.write("<html><body>" + "fastpathd " * 100 + "</body></html>\n")
        os.chmod(tmp, 0o755)
        qfile = os.path.join(tmp, "queries.txt")
        with open(qfile, "w") as f:
            f.write(DNS_QUERIES)
        for rnd in range(reps):
            order = chosen if rnd % 2 == 0 else tuple(reversed(chosen))
            for setup in order:
                try:
                    r = one_setup(setup, rnd, seconds, warmup, tmp, www, qfile, punt_only)
                except Failed as e:
                    sys.exit(f"bench-clients: {setup}, round {rnd + 1}: {e}")
                except KeyboardInterrupt:
                    sys.exit(f"bench-clients: interrupted in {setup}, round {rnd + 1}; its namespaces are removed")
                failures += sum(1 for m in MEASUREMENTS if r.get(m) is None)
                results[setup].append(r)
                print(f"round {rnd + 1}/{reps} {setup}: " + json.dumps(
                    {k: v for k, v in r.items() if not k.endswith("_counters")}), flush=True)
    finally:
        for bed in list(Bed.live):
            bed.close()
        shutil.rmtree(tmp, ignore_errors=True)
    load[1] = os.getloadavg()[0]
    text = report(results, reps, seconds, warmup, punt_only, [f"{x:.1f}" for x in load])
    print(text)
    with open(os.path.join(out_dir, "clients.md"), "w") as f:
        f.write(text)
    if failures:
        sys.exit(f"bench-clients: {failures} measurement(s) failed (see above)")


if __name__ == "__main__":
    main()
