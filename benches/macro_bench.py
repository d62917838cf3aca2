#!/usr/bin/python3
"""The macro benchmark behind ci/bench: fastpathd against dpdk-testpmd on one machine, one run.

Every scenario runs on the same EAL settings (lcores 0 and 1, --no-huge -m 1024, --no-pci, burst
32, 1024 descriptors, 16383 mbufs with a 250 cache), receiving from a net_pcap port that replays a
capture from memory forever (infinite_rx=1) and sending to a net_null port that receives nothing
(no-rx=1). Lcore 1 does all the packet work; lcore 0 is testpmd's command line, or fastpathd's
main lcore (a worker that sleeps when idle) and its control thread.

Scenarios run in alternation (round 1: every scenario, round 2: every scenario, ...) so a
neighbour's compile slows all of them alike, and the report uses medians and per-round ratios.
Throughput is what port 0 received per second in steady state (after a warm-up):
- testpmd: `show port stats all` (Rx-pps since the previous show) at the start and end of the
  window, driven through its interactive prompt;
- fastpathd: the net_pcap0 rx rate of the --stats-interval 1 lines in the window, weighted by
  the time each line covers; the exit dump gives cycles per packet and is checked for the
  rx == sum(outcomes) invariant and for every mbuf returned.

Environment: BENCH_SECONDS (measured window per run, default 10), BENCH_REPS (rounds, default 5),
BENCH_WARMUP (seconds before the window, default 2), BENCH_OUT (directory for results.md and
results.png, default benches/; when it is benches/, the table in benches/README.md is updated
too), BENCH_SCENARIOS (comma-separated names to run a subset), FASTPATHD (the binary),
TESTPMD (default dpdk-testpmd).
"""
import datetime
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAPTURES = os.path.join(REPO, "configs", "captures")
BENCH_UDP = os.path.join(CAPTURES, "bench_udp.pcap")
DEMO = os.path.join(CAPTURES, "demo.pcap")

MBUFS = 16383
MBUF_CACHE = 250
DESC = 1024
BURST = 32  # testpmd's default and fastpath::runtime::BURST

# (name, kind, capture, what it measures)
SCENARIOS = [
    ("testpmd-io", "testpmd:io", BENCH_UDP, "dpdk-testpmd io forwarding: the reference"),
    ("testpmd-macswap", "testpmd:macswap", BENCH_UDP, "dpdk-testpmd macswap: io plus a write to every packet"),
    ("fastpathd-forward", "fastpathd:forward", BENCH_UDP, "fastpathd [lcores] mode = \"forward\": our DPDK layer and loop, no stage"),
    (
        "fastpathd-pipeline-udp",
        "fastpathd:pipeline",
        BENCH_UDP,
        "fastpathd full pipeline, 64-byte UDP to 192.0.2.1:9 (closed port 9: the ICMP limiter saturates, then icmp_suppressed)",
    ),
    (
        "fastpathd-pipeline-demo",
        "fastpathd:pipeline",
        DEMO,
        "fastpathd full pipeline on the demo mix (configs/captures/demo.pcap: a third ARP requests, answered out "
        "of net_pcap0, whose PMD writes them through libpcap to /dev/null, a write per burst; the rest runts and "
        "junk, dropped)",
    ),
]
# Goals of issue 11 (ratio to testpmd io), by scenario.
GOALS = {"fastpathd-forward": 0.95}


def env_num(name, default, cast=float):
    v = os.environ.get(name, "")
    try:
        return cast(v) if v else default
    except ValueError:
        sys.exit(f"macro_bench: {name}={v!r} is not a number")


def eal_args(prefix, capture):
    """The EAL arguments every scenario shares, lcore list aside (fastpathd derives it)."""
    return [
        "--no-huge", "-m", "1024", "--no-pci", "--no-shconf", f"--file-prefix={prefix}",
        "--no-telemetry", "--log-level=lib.eal:warning",
        f"--vdev=net_pcap0,rx_pcap={capture},infinite_rx=1,tx_pcap=/dev/null,tx_pcap=/dev/null",
        "--vdev=net_null0,no-rx=1",
    ]


class Reader:
    """Collects a child's output on a thread so the child never blocks on a full pipe."""

    def __init__(self, stream):
        self.buf = []
        self.lock = threading.Lock()
        self.t = threading.Thread(target=self._run, args=(stream,), daemon=True)
        self.t.start()

    def _run(self, stream):
        while True:
            chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
            if not chunk:
                break
            with self.lock:
                self.buf.append(chunk.decode("utf-8", "replace"))

    def text(self):
        with self.lock:
            return "".join(self.buf)

    def wait_for(self, needle, timeout, proc):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if needle in self.text():
                return True
            if proc.poll() is not None:
                return needle in self.text()
            time.sleep(0.05)
        return False


ALL_CPUS = set(range(os.cpu_count() or 1))


def child_affinity():
    """Children start with every CPU allowed (EAL pins its lcores itself)."""
    os.sched_setaffinity(0, ALL_CPUS)


def fail(name, why, output):
    tail = "\n".join(output.splitlines()[-25:])
    sys.exit(f"macro_bench: {name}: {why}\n--- last output:\n{tail}")


def run_testpmd(name, mode, capture, prefix, warmup, seconds):
    testpmd = os.environ.get("TESTPMD", "dpdk-testpmd")
    cmd = [testpmd, "-l", "0,1", *eal_args(prefix, capture), "--",
           "-i", f"--forward-mode={mode}", f"--burst={BURST}", f"--rxd={DESC}", f"--txd={DESC}",
           "--nb-cores=1", f"--total-num-mbufs={MBUFS}", f"--mbcache={MBUF_CACHE}"]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         preexec_fn=child_affinity)
    out = Reader(p.stdout)

    def send(line):
        p.stdin.write((line + "\n").encode())
        p.stdin.flush()

    try:
        if not out.wait_for("testpmd> ", 60, p):
            fail(name, "testpmd did not reach its prompt", out.text())
        send("start")
        time.sleep(warmup)
        send("show port stats all")  # opens the window: Rx-pps counts from here
        time.sleep(seconds)
        send("show port stats all")
        send("stop")
        send("quit")
        p.stdin.close()
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    text = out.text()
    sections = re.findall(r"NIC statistics for port 0\s+#+(.*?)#{10,}", text, re.S)
    if len(sections) < 2:
        fail(name, "no port statistics in testpmd's output", text)
    m = re.search(r"Rx-pps:\s+(\d+)", sections[-1])
    if not m:
        fail(name, "no Rx-pps in testpmd's port statistics", text)
    return {"mpps": int(m.group(1)) / 1e6}


FASTPATHD_CONFIG = """\
# Written by benches/macro_bench.py for one run.
[dpdk]
eal_args = {eal}
mbufs = {mbufs}
mbuf_cache = {cache}
rx_desc = {desc}
tx_desc = {desc}

[[port]]
device = "net_pcap0"
ipv4 = ["192.0.2.1"]
ipv6 = ["2001:db8::1"]
mac = "02:00:00:00:00:01"
{forward_to}

[[port]]
device = "net_null0"

[lcores]
rx = [1]
workers = [0]
mode = "{mode}"
"""

STATS_LINE = re.compile(r"^\[\s*([\d.]+)s\] net_pcap0: rx ([\d.]+)(M|k|)pps", re.M)


def run_fastpathd(name, mode, capture, prefix, warmup, seconds, tmp):
    binary = os.environ.get("FASTPATHD") or os.path.join(REPO, "target", "release", "fastpathd")
    eal = "[" + ", ".join(f'"{a}"' for a in eal_args(prefix, capture)) + "]"
    cfg = os.path.join(tmp, f"{name}.toml")
    with open(cfg, "w") as f:
        f.write(FASTPATHD_CONFIG.format(
            eal=eal, mbufs=MBUFS, cache=MBUF_CACHE, desc=DESC, mode=mode,
            forward_to='forward_to = "net_null0"' if mode == "forward" else ""))
    dump = os.path.join(tmp, f"{name}.prom")
    if os.path.exists(dump):
        os.remove(dump)
    cmd = [binary, "--config", cfg, "--stats-interval", "1", "--metrics-dump", dump]
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         preexec_fn=child_affinity)
    err = Reader(p.stderr)
    try:
        if not err.wait_for("fastpathd: running", 60, p):
            fail(name, "fastpathd did not start", err.text())
        # Lines come every second from here; the first `warmup` are the warm-up.
        deadline = time.monotonic() + warmup + seconds + 90
        while time.monotonic() < deadline:
            if len(STATS_LINE.findall(err.text())) >= warmup + seconds or p.poll() is not None:
                break
            time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    text = err.text()
    if p.returncode != 0:
        fail(name, f"fastpathd exited with {p.returncode}", text)
    lines = [(float(t), float(v) * {"M": 1e6, "k": 1e3, "": 1}[u]) for t, v, u in STATS_LINE.findall(text)]
    window = lines[int(warmup) - 1 : int(warmup + seconds)] if warmup >= 1 else [(0.0, 0.0)] + lines
    if len(window) < 2:
        fail(name, "too few --stats-interval lines to measure a rate", text)
    # Each line's rate covers the time since the previous line: weight it by that time, so lines
    # printed late (the control thread was not scheduled) count for the time they cover.
    pkts = sum(rate * (t - t0) for (t0, _), (t, rate) in zip(window, window[1:]))
    span = window[-1][0] - window[0][0]
    if span <= 0:
        fail(name, "the measured window is empty", text)
    metrics = {}
    with open(dump) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            series, value = line.rsplit(" ", 1)
            metrics[series] = float(value)
    rx = sum(v for k, v in metrics.items() if k.startswith("fastpath_rx_packets_total{"))
    outcomes = sum(v for k, v in metrics.items() if k.startswith("fastpath_packets_total{"))
    if rx != outcomes or metrics.get("fastpath_mbufs_in_use") != 0:
        fail(name, f"invariant broken: rx {rx} outcomes {outcomes} mbufs in use "
             f"{metrics.get('fastpath_mbufs_in_use')}", text)
    return {
        "mpps": pkts / span / 1e6,
        "cycles_per_packet": metrics.get('fastpath_lcore_cycles_per_packet{lcore="1"}'),
        "idle_ratio": metrics.get('fastpath_lcore_idle_poll_ratio{lcore="1"}'),
        "top_outcomes": sorted(
            ((k.split('"')[1], v) for k, v in metrics.items() if k.startswith("fastpath_packets_total{") and v > 0),
            key=lambda kv: -kv[1])[:3],
    }


def machine():
    model, cores = "unknown", os.cpu_count()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
            if line.startswith("Hypervisor vendor:"):
                model += f" ({line.split(':', 1)[1].strip()} guest)"
    except (OSError, subprocess.CalledProcessError):
        pass
    dpdk = "DPDK"
    try:
        dpdk = "DPDK " + subprocess.run(["pkg-config", "--modversion", "libdpdk"], capture_output=True,
                                        text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return f"{model}, {cores} cores, {dpdk}"


def report(results, order, descriptions, seconds, reps, warmup, started):
    ref = "testpmd-io"
    med = {n: statistics.median(r["mpps"] for r in results[n]) for n in order}
    rows = []
    for n in order:
        runs = results[n]
        mpps = [r["mpps"] for r in runs]
        ratio = med[n] / med[ref] if ref in med and med[ref] > 0 else None
        # The ratio within each round, then its median: drift between rounds cancels out.
        if ref in results:
            per_round = [r["mpps"] / t["mpps"] for r, t in zip(runs, results[ref]) if t["mpps"] > 0]
            round_ratio = statistics.median(per_round) if per_round else None
        else:
            round_ratio = None
        cpp = [r["cycles_per_packet"] for r in runs if r.get("cycles_per_packet")]
        rows.append({
            "name": n, "median": med[n], "min": min(mpps), "max": max(mpps), "ratio": ratio,
            "round_ratio": round_ratio, "cpp": statistics.median(cpp) if cpp else None,
            "goal": GOALS.get(n), "runs": mpps, "what": descriptions[n],
            "outcomes": runs[-1].get("top_outcomes"),
        })
    return rows


def fmt_ratio(x):
    return "–" if x is None else f"{x:.2f}"


def markdown(rows, seconds, reps, warmup, started, capture_note):
    lines = [
        f"Run of {started:%Y-%m-%d %H:%M} UTC on {machine()}: {reps} round(s) of every scenario in "
        f"alternation, each run {warmup:g} s warm-up then {seconds:g} s measured. Mpps = packets per "
        "second received on port 0 (net_pcap, infinite_rx) and handled on lcore 1.",
        "",
        "| scenario | Mpps median | min – max | × testpmd io (medians) | × testpmd io (per round, median) | cycles/packet | goal |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        goal = "reference" if r["name"] == "testpmd-io" else ("≥ %.2f" % r["goal"] if r["goal"] else "")
        cpp = f"{r['cpp']:.0f}" if r["cpp"] else "–"
        lines.append(
            f"| {r['name']} | {r['median']:.2f} | {r['min']:.2f} – {r['max']:.2f} | {fmt_ratio(r['ratio'])} "
            f"| {fmt_ratio(r['round_ratio'])} | {cpp} | {goal} |")
    lines += ["", "Scenarios:", ""]
    for r in rows:
        extra = ""
        if r["outcomes"]:
            extra = " Outcomes: " + ", ".join(f"{k}" for k, _ in r["outcomes"]) + "."
        lines.append(f"- `{r['name']}`: {r['what']}.{extra}")
    lines += ["", capture_note, "", "Every run (Mpps, in round order):", ""]
    for r in rows:
        lines.append(f"- `{r['name']}`: " + ", ".join(f"{x:.2f}" for x in r["runs"]))
    return "\n".join(lines) + "\n"


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["name"] for r in rows]
    med = [r["median"] for r in rows]
    lo = [r["median"] - r["min"] for r in rows]
    hi = [r["max"] - r["median"] for r in rows]
    colors = ["#9e9e9e" if n.startswith("testpmd") else "#1f77b4" for n in names]
    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=100)
    bars = ax.bar(range(len(names)), med, yerr=[lo, hi], capsize=5, color=colors)
    ref = next((r["median"] for r in rows if r["name"] == "testpmd-io"), None)
    if ref:
        ax.axhline(ref, color="#d62728", linestyle="--", linewidth=1.2, label=f"testpmd io median ({ref:.2f} Mpps)")
        ax.legend(loc="upper right")
    for b, r in zip(bars, rows):
        label = f"{r['median']:.2f}" + (f"\n×{r['ratio']:.2f}" if r["ratio"] is not None else "")
        ax.text(b.get_x() + b.get_width() / 2, b.get_height() * 0.5, label, ha="center", va="center",
                color="white", fontsize=9, fontweight="bold")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=15, ha="right", fontsize=9)
    ax.set_ylabel("Mpps (median, min–max bars)")
    ax.set_title("fastpathd vs dpdk-testpmd, same machine, same EAL settings, one run")
    ax.set_ylim(0, max(r["max"] for r in rows) * 1.25)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main():
    seconds = env_num("BENCH_SECONDS", 10.0)
    reps = env_num("BENCH_REPS", 5, int)
    warmup = env_num("BENCH_WARMUP", 2, int)
    if seconds < 1 or reps < 1 or warmup < 1:
        sys.exit("macro_bench: BENCH_SECONDS, BENCH_REPS and BENCH_WARMUP must be at least 1")
    seconds = int(round(seconds))
    out_dir = os.path.abspath(os.environ.get("BENCH_OUT") or os.path.join(REPO, "benches"))
    wanted = [s for s in os.environ.get("BENCH_SCENARIOS", "").split(",") if s]
    scenarios = [s for s in SCENARIOS if not wanted or s[0] in wanted]
    unknown = set(wanted) - {s[0] for s in SCENARIOS}
    if unknown or not scenarios:
        sys.exit(f"macro_bench: unknown BENCH_SCENARIOS {sorted(unknown)}; known: {[s[0] for s in SCENARIOS]}")
    if shutil.which(os.environ.get("TESTPMD", "dpdk-testpmd")) is None and any(
            s[1].startswith("testpmd") for s in scenarios):
        sys.exit("macro_bench: dpdk-testpmd not found (apt-get install dpdk; ci/setup does it)")
    for s in scenarios:
        if not os.path.exists(s[2]):
            sys.exit(f"macro_bench: {s[2]} is missing: run /usr/bin/python3 configs/captures/gen_*.py")

    # This script and its reader threads stay on CPU 0 (the main lcore's), so they never take
    # time from lcore 1, where the packets are handled; its children get every CPU back.
    if 0 in ALL_CPUS and len(ALL_CPUS) > 1:
        os.sched_setaffinity(0, {0})
    started = datetime.datetime.now(datetime.timezone.utc)
    results = {s[0]: [] for s in scenarios}
    total = len(scenarios) * reps
    n = 0
    with tempfile.TemporaryDirectory(prefix="fastpath-bench-") as tmp:
        for rnd in range(reps):
            for name, kind, capture, _ in scenarios:
                n += 1
                prefix = f"fpbench-{os.getpid()}-{n}"
                tool, mode = kind.split(":")
                if tool == "testpmd":
                    r = run_testpmd(name, mode, capture, prefix, warmup, seconds)
                else:
                    r = run_fastpathd(name, mode, capture, prefix, warmup, seconds, tmp)
                results[name].append(r)
                extra = f", {r['cycles_per_packet']:.0f} cycles/packet" if r.get("cycles_per_packet") else ""
                print(f"[{n}/{total}] round {rnd + 1} {name}: {r['mpps']:.2f} Mpps{extra}", flush=True)

    order = [s[0] for s in scenarios]
    rows = report(results, order, {s[0]: s[3] for s in scenarios}, seconds, reps, warmup, started)
    note = ("Captures: configs/captures/bench_udp.pcap (1024 UDP frames of 64 bytes from 1024 flows, "
            "configs/captures/gen_bench_udp.py) and configs/captures/demo.pcap (18 frames: ARP, runts, "
            "junk). EAL: `-l 0,1 " + " ".join(eal_args("PREFIX", "CAPTURE")) + "`; burst 32, "
            f"{DESC} descriptors, {MBUFS} mbufs, cache {MBUF_CACHE}.")
    table = markdown(rows, seconds, reps, warmup, started, note)
    os.makedirs(out_dir, exist_ok=True)
    md_path = os.path.join(out_dir, "results.md")
    with open(md_path, "w") as f:
        f.write("# Macro benchmark results\n\nWritten by `ci/bench` (benches/macro_bench.py); "
                "see benches/README.md.\n\n" + table + "\n![Mpps per scenario](results.png)\n")
    png_path = os.path.join(out_dir, "results.png")
    plot(rows, png_path)

    readme = os.path.join(REPO, "benches", "README.md")
    if out_dir == os.path.join(REPO, "benches") and os.path.exists(readme):
        with open(readme) as f:
            text = f.read()
        start, end = "<!-- results:start -->", "<!-- results:end -->"
        if start in text and end in text:
            head, rest = text.split(start, 1)
            _, tail = rest.split(end, 1)
            with open(readme, "w") as f:
                f.write(head + start + "\n" + table + "\n![Mpps per scenario](results.png)\n" + end + tail)

    print()
    print(f"{'scenario':<26} {'Mpps':>7} {'min':>7} {'max':>7} {'x io':>6} {'x io/round':>10}")
    for r in rows:
        print(f"{r['name']:<26} {r['median']:7.2f} {r['min']:7.2f} {r['max']:7.2f} {fmt_ratio(r['ratio']):>6} "
              f"{fmt_ratio(r['round_ratio']):>10}")
    print(f"\nwrote {md_path} and {png_path}")


if __name__ == "__main__":
    main()
