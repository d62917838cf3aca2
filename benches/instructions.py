#!/usr/bin/python3
"""Instructions per packet on fastpathd's RX lcore, counted by valgrind's callgrind.

The macro benchmark's Mpps and cycles move between runs on a shared machine by more than a
change of a few percent (benches/NOTES.md, "Measuring on a shared 2-vCPU guest"). An
instruction count does not move: the same binary, config and capture give the same count per
packet whatever else the machine does. It is not a time (cycles
per instruction vary with cache misses and dependencies), so it says what a change removed from
the per-packet path, and the macro benchmark says what that was worth.

Each scenario is one of ci/bench's (same config, EAL settings and capture, see macro_bench.py),
run under `valgrind --tool=callgrind` for BENCH_SECONDS (default 20) of wall time, collecting
only inside `RxLcore::run` (the RX lcore's loop and everything it calls: the PMD's receive, our
pipeline, freeing mbufs). Packets are what fastpathd says it received at exit; the report splits
the count into DPDK's own code (the net_pcap/net_null drivers, librte_mbuf, and the dynamic
loader's TLS lookups DPDK's per-lcore variables cost in shared libraries) and ours.

`testpmd-io` is the reference: dpdk-testpmd is stripped (no symbol to collect inside), so it runs
twice under callgrind collecting everything, forwarding for BENCH_SECONDS / 2 and for
BENCH_SECONDS; start-up, the idle prompt and shut-down are the same in both, so the difference in
instructions over the difference in packets (its `stop` statistics) is its forwarding loop's
count per packet. It has no split by object.

Valgrind runs one thread at a time. With its default lock a thread that spins (the RX lcore
polls, the main lcore waits for it) can hold the CPU for minutes while the one it waits for is
never scheduled: start-up then took over 180 s now and then. `--fair-sched=yes` hands the CPU
round-robin and starts fastpathd in a few seconds.

Scenarios with a `sink` service (open-sink) run with the service's benchmark-only
`free_on_rx = true`: under valgrind every thread shares one CPU, the worker cannot keep up and
the figures would describe full sockets; so the RX lcore frees what it would have enqueued
(counted delivered) and the count is the RX lcore's whole path but the ring's enqueue (one bulk
enqueue per burst) in place of a bulk free. Other services (echo, tunnel) and the scraped
scenarios are refused. With INSTRUCTIONS_SINK_CAPACITY=N they keep their ring instead, with
sockets of N packets (16384: the worker, scheduled in turn, never lets it fill): the enqueue and
the release into the RX lcore's pool are then counted as they run, but the totals are not the
scenario's (the backlog a worker scheduled in turn leaves makes the fanout decide where it
would not), so read the lines of `MbufRing::enqueue` and what it calls
(INSTRUCTIONS_DUMP_INSTR=1, INSTRUCTIONS_KEEP).

INSTRUCTIONS_LCORE=worker collects inside the worker lcore's loop (`WorkerLcore::run`) instead
(a sink scenario then needs INSTRUCTIONS_SINK_CAPACITY, or the RX lcore frees everything), and
reads the worker's polls from the exit's metrics dump: under valgrind the worker polls whenever
it is scheduled, and a sink fed by one RX lcore only moves its queue's index per busy poll
(thousands of packets), so its count follows its polls, not the packets: compare instructions
per poll. A tunnel scenario (fastpathd-gre-encap, -untracked, -tracked, -flood) is measured only
there: its worker encapsulates each packet it takes, so the worker's instructions over the
packets encapsulated (`fastpath_gre_encap_total`, printed as "instructions/packet encapsulated")
are its cost of one (the poll's own cost spread over what it took). INSTRUCTIONS_IDLE_SERVICE=1 moves the sink to a port the traffic never reaches, so the
worker polls one empty socket (its empty polls past `idle_poll_us` block, so that price includes
the wait and is not an empty poll's in a busy run).

Capturing costs nothing until a tool attaches: `fastpathd-open-sink-free-on-rx-pdump`
is `fastpathd-open-sink-free-on-rx` on hugepages with the shared runtime directory, where
fastpathd initialises DPDK's capture framework (`rte_pdump_init`; with --no-shconf it cannot), and
`...-pdump-detached` the same once dpdk-dumpcap has attached, captured 64 frames and exited (its
callbacks removed): its counters are zeroed (`callgrind_control --zero`) after the detach, and the
packets received by then, read from /metrics just before and just after, are taken off; it
counts for 3 x BENCH_SECONDS, and the half-difference of the two reads is printed as the
count's uncertainty. No split by object there: after a zeroing callgrind charges the frames then
on the stack with everything.

Usage: benches/instructions.py [scenario ...]   (default: testpmd io, forward, plain drop,
closed port, build first, closed port over IPv6, TCP to no service over IPv4 and IPv6, open-sink
over IPv6, open-sink, seed 000's
traffic's closed port, plain drop and open-sink, open-sink freed on RX with 1 and 2 RX lcores,
and freed on RX on hugepages with capture initialised, before and after a capture).
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import macro_bench as mb  # noqa: E402

DEFAULT = ["testpmd-io", "fastpathd-forward", "fastpathd-plain-drop", "fastpathd-closed-port", "fastpathd-build-first",
           "fastpathd-closed-port-v6", "fastpathd-tcp-no-service", "fastpathd-tcp-no-service-v6",
           "fastpathd-open-sink-v6", "fastpathd-closed-port-many-sources",
           "fastpathd-plain-drop-many-sources", "fastpathd-open-sink", "fastpathd-open-sink-many-sources",
           "fastpathd-open-sink-free-on-rx", "fastpathd-open-sink-free-on-rx-2-rx-lcores",
           "fastpathd-open-sink-free-on-rx-pdump", "fastpathd-open-sink-free-on-rx-pdump-detached"]
SINK_ACTION = 'action = "sink"'

PACKETS = re.compile(r"stopped after [0-9.]+s: ([0-9]+) packets received")
COLLECTED = re.compile(r"Collected : ([0-9]+)")
# callgrind_annotate --inclusive=no: "<count> <file>:<function> [<object>]"
SELF_LINE = re.compile(r"^\s*([0-9,]+)\s+.*?(?:\[(\S+)\])?\s*$")
DPDK_OBJECTS = ("librte_", "ld-linux")


def dpdk_share(out_file):
    """Instructions spent in DPDK's objects (and the loader's TLS lookups), from a callgrind
    output: the per-function self counts of `callgrind_annotate`, by object."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=no", "--auto=no", "--threshold=100", out_file],
                          capture_output=True, text=True, check=True).stdout
    dpdk = 0
    for line in text.split("file:function", 1)[-1].splitlines():
        m = SELF_LINE.match(line)
        if m and "PROGRAM TOTALS" not in line and any(d in os.path.basename(m.group(2) or "") for d in DPDK_OBJECTS):
            dpdk += int(m.group(1).replace(",", ""))
    return dpdk


def rx_packets(port):
    """fastpathd's packets received so far (`fastpath_rx_packets_total`), from one scrape. Under
    valgrind the endpoint can be too slow for its own request deadline and reset the
    connection: then it is asked again."""
    for attempt in range(10):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=120) as r:
                body = r.read().decode()
            return sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
                       if line.startswith("fastpath_rx_packets_total{"))
        except OSError:
            if attempt == 9:
                raise
            time.sleep(0.1)


TOTALS = re.compile(r"^(?:totals|summary):\s+([0-9]+)", re.M)


def run(sc, seconds, tmp):
    prefix = f"fpinsn-{os.getpid()}"
    cfg, mport = mb.write_config(sc, prefix, tmp)
    out = os.path.join(tmp, f"{sc['name']}.callgrind")
    # INSTRUCTIONS_DUMP_INSTR=1: counts per machine instruction too (callgrind_annotate, or
    # `benches/hot_instructions.py`, then says which instructions of a function take them).
    dump = ["--dump-instr=yes"] if os.environ.get("INSTRUCTIONS_DUMP_INSTR") else []
    worker = os.environ.get("INSTRUCTIONS_LCORE") == "worker"
    # The RX lcore's loop; the second pattern is where it lived before the runtime split, so
    # binaries from before and after compare. Or the worker's (module docs).
    collect = (["--toggle-collect=fastpath::runtime::worker_lcore::WorkerLcore::run*"] if worker else
               ["--toggle-collect=fastpath::runtime::rx_lcore::RxLcore::run*",
                "--toggle-collect=fastpath::runtime::RxLcore::run*"])
    metrics_dump = os.path.join(tmp, f"{sc['name']}.prom")
    cmd = ["valgrind", "--tool=callgrind", "--fair-sched=yes", f"--callgrind-out-file={out}", *dump, *collect,
           mb.fastpathd_binary(), "--config", cfg, "--stats-interval", "1000",
           *(["--metrics-dump", metrics_dump] if worker else [])]
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp)
    err = mb.Reader(p.stderr)
    # Packets received before the counters were zeroed: (just before, just after).
    zeroed = None
    try:
        if not err.wait_for("fastpathd: running", 180, p):
            mb.fail(sc["name"], "fastpathd did not start under valgrind", err.text())
        mb.check_capture_ready(sc, err.text())
        if sc.get("dumpcap_once"):
            # The capture's instructions (its callbacks copy every packet while it is attached)
            # are not the scenario's: once it has detached, the counters start again from zero,
            # and the packets received by then (read just before and just after) are taken off.
            mb.dumpcap_once(sc["name"], prefix, tmp)
            try:
                before = rx_packets(mport)
                z = subprocess.run(["callgrind_control", "--zero", str(p.pid)], capture_output=True, text=True,
                                   timeout=180)
                after = rx_packets(mport)
            except OSError as e:
                time.sleep(2)
                mb.fail(sc["name"], f"fastpathd stopped answering after the capture ({e}; exit {p.poll()})",
                        err.text())
            if z.returncode != 0:
                mb.fail(sc["name"], f"callgrind_control --zero failed ({z.returncode})", z.stdout + z.stderr)
            zeroed = (before, after)
            # The two reads are a fraction of a second apart under valgrind: a longer count keeps
            # their spread (the uncertainty) a small share of it.
            seconds *= 3
        try:
            p.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            pass
        p.send_signal(signal.SIGINT)
        p.wait(timeout=180)
    finally:
        mb.reap(p)
        mb.cleanup_prefix(prefix)
    text = err.text()
    packets, collected = PACKETS.search(text), COLLECTED.search(text)
    if p.returncode != 0 or not packets or not collected or int(packets.group(1)) == 0:
        mb.fail(sc["name"], f"no count (exit {p.returncode})", text)
    n, total = int(packets.group(1)), int(collected.group(1))
    r = {}
    dpdk = None
    if zeroed:
        # What the output file holds is what was counted since the zeroing.
        with open(out) as f:
            totals = TOTALS.findall(f.read())
        if not totals:
            mb.fail(sc["name"], "no totals in the callgrind output", text)
        total = int(totals[-1])
        n -= (zeroed[0] + zeroed[1]) / 2
        r["uncertainty"] = (zeroed[1] - zeroed[0]) / 2 / n
        # No split by object: after a zeroing callgrind charges the frames that were on the
        # stack then (the thread's start, the EAL's lcore loop) with the whole count as their own.
        return dict(r, packets=n, total=total / n, dpdk=None, ours=None)
    if worker:
        # The worker lcores' polls (`[lcores] workers` of the config written for the run).
        lcores = re.search(r"^workers = \[([\d, ]*)\]", open(cfg).read(), re.M).group(1)
        dumped = open(metrics_dump).read()
        for state in ("idle", "busy"):
            r[f"{state}_polls"] = sum(
                float(v) for k, v in re.findall(r'^fastpath_lcore_' + state + r'_polls_total\{lcore="(\d+)"\} (\S+)',
                                                 dumped, re.M)
                if k in [x.strip() for x in lcores.split(",")])
        # A tunnel scenario's packets the worker encapsulated: its instructions over these are
        # its cost of one (under valgrind it drops much of what the RX lcore received).
        r["encapsulated"] = sum(float(v) for v in re.findall(r"^fastpath_gre_encap_total\{[^}]*\} (\S+)", dumped, re.M))
    dpdk = dpdk_share(out)
    keep = os.environ.get("INSTRUCTIONS_KEEP")
    if keep:
        os.makedirs(keep, exist_ok=True)
        shutil.copy(out, os.path.join(keep, f"{sc['name']}.callgrind"))
    return dict(r, packets=n, total=total / n, dpdk=dpdk / n, ours=(total - dpdk) / n)


def testpmd_once(sc, window, tmp):
    """testpmd io under callgrind, forwarding for `window` seconds: (instructions, packets)."""
    prefix = f"fpinsn-tp-{os.getpid()}"
    out = os.path.join(tmp, f"testpmd-{window}.callgrind")
    cmd = ["valgrind", "--tool=callgrind", "--fair-sched=yes", f"--callgrind-out-file={out}",
           os.environ.get("TESTPMD", "dpdk-testpmd"), "-l", "0,1", *mb.eal_args(prefix, sc["capture"]), "--",
           "-i", "--forward-mode=io", f"--burst={mb.BURST}", f"--rxd={mb.DESC}", f"--txd={mb.DESC}",
           "--nb-cores=1", f"--total-num-mbufs={mb.MBUFS}", f"--mbcache={mb.MBUF_CACHE}"]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    text = mb.Reader(p.stdout)

    def send(line):
        p.stdin.write((line + "\n").encode())
        p.stdin.flush()

    try:
        if not text.wait_for("testpmd> ", 300, p):
            mb.fail(sc["name"], "testpmd did not reach its prompt under valgrind", text.text())
        send("start")
        time.sleep(window)
        send("stop")
        # Its statistics are block-buffered (stdout is a pipe) and come at exit; the prompt
        # (written directly) says when the stop is done.
        deadline = time.monotonic() + 180
        while text.text().count("testpmd> ") < 3 and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.05)
        send("quit")
        p.stdin.close()
        p.wait(timeout=300)
    finally:
        mb.reap(p)
        mb.cleanup_prefix(prefix)
    output = text.text()
    # The accumulated statistics of `stop`: port 0's RX first.
    packets = re.search(r"Accumulated forward statistics for all ports.*?RX-packets:\s+(\d+)", output, re.S)
    collected = COLLECTED.search(output)
    if not packets or not collected:
        mb.fail(sc["name"], "no packet or instruction count from testpmd", output)
    return int(collected.group(1)), int(packets.group(1))


def run_testpmd(sc, seconds, tmp):
    short, long = testpmd_once(sc, seconds / 2, tmp), testpmd_once(sc, seconds, tmp)
    n = long[1] - short[1]
    if n <= 0:
        mb.fail(sc["name"], f"no more packets in the longer run ({short[1]} vs {long[1]})", "")
    per = (long[0] - short[0]) / n
    return {"packets": n, "total": per, "dpdk": None, "ours": None}


def main():
    names = sys.argv[1:] or DEFAULT
    known = {sc["name"]: sc for sc in mb.SCENARIOS}
    for name in names:
        sc = known.get(name)
        if sc is None or not (sc["kind"].startswith("fastpathd") or name == "testpmd-io"):
            sys.exit(f"instructions: {name} is not testpmd-io or a fastpathd scenario; known: {sorted(known)}")
        extra = sc.get("extra", "")
        # In the worker's loop a tunnel service is measurable: every packet is encapsulated
        # there, whatever the RX lcore (scheduled in turn) leaves in the socket.
        worker_tunnel = os.environ.get("INSTRUCTIONS_LCORE") == "worker" and 'action = "tunnel"' in extra
        if sc.get("scrape") or (extra.count("[[service]]") != extra.count(SINK_ACTION) and not worker_tunnel):
            sys.exit(f"instructions: {name} has a scraper or a service that is not a sink: not measurable under valgrind")
        if SINK_ACTION in extra and "free_on_rx" not in extra:
            cap = os.environ.get("INSTRUCTIONS_SINK_CAPACITY")
            if cap:
                extra = re.sub(r"socket_capacity = \d+", f"socket_capacity = {int(cap)}", extra)
                known[name] = dict(sc, extra=extra, mbufs=max(sc.get("mbufs", 0), 65535))
            else:
                known[name] = dict(sc, extra=extra.replace(SINK_ACTION, SINK_ACTION + "\nfree_on_rx = true"))
            if os.environ.get("INSTRUCTIONS_IDLE_SERVICE"):
                known[name] = dict(known[name], extra=known[name]["extra"].replace("ports = [9]", "ports = [19]"))
    mb.check_hugepages([known[n] for n in names])
    seconds = mb.env_num("BENCH_SECONDS", 20.0)
    rows = []
    with tempfile.TemporaryDirectory(prefix="fastpath-insn-") as tmp:
        for name in names:
            r = run_testpmd(known[name], seconds, tmp) if name == "testpmd-io" else run(known[name], seconds, tmp)
            rows.append((name, r))
            split = "" if r["dpdk"] is None else f" (DPDK {r['dpdk']:.1f}, fastpathd {r['ours']:.1f})"
            if "idle_polls" in r:
                polls = r["idle_polls"] + r["busy_polls"]
                split += (f"; worker: {r['idle_polls']:.0f} empty polls, {r['busy_polls']:.0f} busy, "
                          f"{r['total'] * r['packets'] / max(polls, 1):.1f} instructions/poll")
                if r.get("encapsulated"):
                    split += f", {r['total'] * r['packets'] / r['encapsulated']:.1f} instructions/packet encapsulated"
            if "uncertainty" in r:
                split += f", counted after dpdk-dumpcap detached (packets ±{100 * r['uncertainty']:.3f}%)"
            print(f"{name}: {r['packets']:.0f} packets, {r['total']:.1f} instructions/packet{split}", flush=True)
    print()
    print("| scenario | packets | instructions/packet | DPDK (drivers, mbuf) | fastpathd |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, r in rows:
        if r["dpdk"] is None:
            print(f"| {name} | {r['packets']:.0f} | {r['total']:.1f} | — | — |")
        else:
            print(f"| {name} | {r['packets']:.0f} | {r['total']:.1f} | {r['dpdk']:.1f} | {r['ours']:.1f} |")


if __name__ == "__main__":
    main()
