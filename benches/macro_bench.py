#!/usr/bin/python3
"""The macro benchmark behind ci/bench: fastpathd against dpdk-testpmd on one machine, one run.

Every scenario runs on the same EAL settings (lcores 0 and 1, --no-huge -m 1024, --no-pci, burst
32, 1024 descriptors, 16383 mbufs with a 250 cache), receiving from a net_pcap port that replays a
capture from memory forever (infinite_rx=1) and sending to a net_null port that receives nothing
(no-rx=1). Lcore 1 does all the packet work; lcore 0 is testpmd's command line, or fastpathd's
main lcore (a worker that sleeps when idle) and its control thread.

Scenarios run in alternation (round 1: every scenario, round 2: every scenario, ...) so a
neighbour's compile slows all of them alike, and the report uses medians and per-round ratios.
Even rounds run the list backwards, so a machine that drifts faster or slower within a round
favours neither side of a ratio over two rounds (ABBA order).
Throughput is what port 0 received per second in steady state (after a warm-up):
- testpmd: `show port stats all` (Rx-pps since the previous show) at the start and end of the
  window, driven through its interactive prompt;
- fastpathd: the net_pcap0 rx rate of the --stats-interval 1 lines in the window, weighted by
  the time each line covers; the exit dump gives cycles per packet and is checked for the
  rx == sum(outcomes) invariant and for every mbuf returned.

Scenarios (SCENARIOS below): testpmd io and macswap; fastpathd forward mode; and the full pipeline
on bench_udp to an open port (a `sink` service), to a closed port (ICMP limiter saturated), as a
plain drop (not_local), and with `[icmp] build_first = true` (seed 000's cases a-d); the closed
port, open port, plain drop and build-first on seed 000's traffic, sources spread over
198.18.0.0/15 (bench_udp_many: the global limit saturated where bench_udp saturates the
per-destination one); the closed
port over IPv6 (bench_udp6) and a SYN flood to a port without a service (bench_tcp), and over IPv6 the
open-sink (bench_udp6) and the SYN flood (bench_tcp6); the flow-limit
storm on and off (normal flows' answered fraction from packet and byte counters); the
fragment mix with and without a table smaller than the flood; GRE encapsulation through
a tunnel service; open-sink with /metrics scraped every 10 ms; open-sink freed
on RX with one and two RX lcores, and on hugepages with the shared runtime directory,
DPDK's capture framework initialised, before and after dpdk-dumpcap attached (these two
need HUGE_MB of hugepages, the others none). fastpathd
runs RX on lcore 1 (the lcore testpmd forwards on) and its worker lcore 0 (the EAL main lcore,
with the control thread, where testpmd keeps its command line): the same two lcores. The goals
(GOALS below) are computed as per-round ratios and printed.

Environment: BENCH_SECONDS (measured window per run, default 6), BENCH_REPS (rounds, default 6),
BENCH_WARMUP (seconds before the window, default 2), BENCH_OUT (directory for results.png and
results.md, default benches/; in benches/ the report goes into the section between
`<!-- results:start -->` and `<!-- results:end -->` of benches/README.md instead of results.md),
BENCH_SCENARIOS (comma-separated names to run a subset), FASTPATHD (the binary),
TESTPMD (default dpdk-testpmd), DUMPCAP (default dpdk-dumpcap), IP_FRAG_ANCHOR (benches/examples/ip_frag_anchor.rs
built, default target/release/examples/ip_frag_anchor).

Every `figures="frags"` scenario gets an anchor, `dpdk-ip-frag-<name>` (kind anchor:ip_frag): DPDK's own
reassembly (librte_ip_frag) on the same port, capture, lcore and table memory, reported beside it
(anchor_report: legitimate datagrams reassembled by each, and the Mpps ratio per round).
"""
import datetime
import os
import re
import shutil
import signal
import random
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAPTURES = os.path.join(REPO, "configs", "captures")
BENCH_UDP = os.path.join(CAPTURES, "bench_udp.pcap")
BENCH_STORM = os.path.join(CAPTURES, "bench_storm.pcap")
BENCH_FRAGS = os.path.join(CAPTURES, "bench_frags.pcap")
BENCH_FRAGS_100X = os.path.join(CAPTURES, "bench_frags_100x.pcap")
BENCH_FRAGS_SMACK = os.path.join(CAPTURES, "bench_frags_smack.pcap")
BENCH_UDP6 = os.path.join(CAPTURES, "bench_udp6.pcap")
BENCH_TCP = os.path.join(CAPTURES, "bench_tcp.pcap")
BENCH_TCP6 = os.path.join(CAPTURES, "bench_tcp6.pcap")
BENCH_UDP_MANY = os.path.join(CAPTURES, "bench_udp_many.pcap")
DEMO = os.path.join(CAPTURES, "demo.pcap")

MBUFS = 16383
MBUF_CACHE = 250
# Hugepage memory (MiB) the scenarios on hugepages reserve (`huge`: -m, instead of --no-huge -m 1024).
HUGE_MB = 256
# net_pcap's devargs as a secondary process gets them (ETH_PCAP_ARG_MAXLEN in DPDK 22.11), and the
# name of the link to /dev/null that keeps them short.
PCAP_ARGS_MAX = 64
SHORT_NULL = "null"
DESC = 1024
BURST = 32  # testpmd's default and fastpath::runtime::BURST

# bench_storm.pcap: 1600 storm frames of 60 bytes, 80 normal frames of 124 (gen_bench_storm.py).
STORM_LEN, NORMAL_LEN = 60, 124
# Legitimate datagrams per loop of each fragment capture, and its frames (gen_bench_frags*.py):
# 64 legitimate 3-fragment datagrams in each.
FRAGS_FRAMES = {"bench_frags.pcap": 1216, "bench_frags_100x.pcap": 3008, "bench_frags_smack.pcap": 4392}
FRAGS_LEGIT = 64
LINUX_POLICY = "\n[reassembly]\npolicy = \"linux\"\n"


# Seconds the paired scrape scenario scrapes, then pauses, in turn (each window holds at least
# one whole 1-s stats line whatever the phase), in the order ABBA repeats.
SCRAPE_PERIOD = 4
ABBA = (True, False, False, True)

# Config fragments appended to the fastpathd config of a scenario.
SINK = """
[[service]]
name = "sink"
protocol = "udp"
ports = [9]
sockets = 1
socket_capacity = 1024
action = "sink"
"""
ICMP_DEFAULTS = "\n[icmp]\n# Linux's defaults: 1000 errors/s, burst 50: a flood saturates it at once.\n"
STORM_ECHO = """
[[service]]
name = "echo"
protocol = "udp"
ports = [7]
sockets = 1
socket_capacity = 1024
action = "echo"
cost_ns = 250          # the worker serves at most ~4 Mpps: the storm is several times that
"""
FRAGS_SINK = """
[[service]]
name = "frag-sink"
protocol = "udp"
ports = [7]
sockets = 1
socket_capacity = 1024
action = "sink"
"""
GRE = """
[[service]]
name = "fwd"
protocol = "udp"
ports = [9]
sockets = 1
socket_capacity = 1024
action = "tunnel"
tunnel = "t1"

[[tunnel]]
name = "t1"
local = "192.0.2.1"
remote = "203.0.113.10"
port = "net_null0"
next_hop_mac = "02:00:00:00:00:fe"
"""

# A TCP `tunnel` service on port 80 over three backends out of net_null0, with a connection
# table of {entries} entries a worker ([conntrack]).
GRE_TCP = """
[[service]]
name = "lb"
protocol = "tcp"
ports = [80]
sockets = 1
socket_capacity = 1024
action = "tunnel"
tunnels = ["t1", "t2", "t3"]

[conntrack]
entries = {entries}
""" + "".join(f"""
[[tunnel]]
name = "t{i}"
local = "192.0.2.1"
remote = "203.0.113.{9 + i}"
port = "net_null0"
next_hop_mac = "02:00:00:00:00:fe"
""" for i in (1, 2, 3))
# Flows in each connection-table capture (conntrack_capture): 16 x a 1024-entry table.
CONNTRACK_FLOWS = 16384
TCP_SINK = """
[[service]]
name = "sink"
protocol = "tcp"
ports = [80]
sockets = 1
socket_capacity = 1024
action = "sink"
"""


def tcp_state(learn_s):
    """TCP_SINK with `tcp_state` on: a table of 4 x CONNTRACK_FLOWS entries, a learning window
    of `learn_s` seconds (0: the capture's ACKs, none after a SYN, are all out of state)."""
    return TCP_SINK + f"tcp_state = true\n\n[tcp_state]\nentries = {4 * CONNTRACK_FLOWS}\nlearn_s = {learn_s}\n"


def conntrack_capture(kind):
    """A capture of CONNTRACK_FLOWS minimum-size TCP/IPv4 frames to 02:00:00:00:00:01 /
    192.0.2.1 port 80, one a flow, written once to the temp directory (deterministic; 1 MiB, so
    made at bench time rather than kept in configs/captures): `tracked`, ACKs of established
    flows from 198.18.0.0/15 (each flow's next packet comes a replay later, so a table of 4 x
    the flows confirms them all within the warm-up: mid-stream flows confirm a second after
    their first packet); `flood`, spoofed SYNs and ACKs in turn from 198.19.0.0/16 (every tuple
    new to a 1024-entry table each time it comes round: 16 x its capacity). Its path."""
    path = os.path.join(tempfile.gettempdir(), f"fastpathd-bench-conntrack-{kind}-{CONNTRACK_FLOWS}.pcap")
    if os.path.exists(path):
        return path

    def csum(b):
        s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
        while s >> 16:
            s = (s & 0xFFFF) + (s >> 16)
        return ~s & 0xFFFF

    dst = bytes([192, 0, 2, 1])
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for i in range(CONNTRACK_FLOWS):
        if kind == "tracked":
            src, flags = bytes([198, 18 + (i >> 16), (i >> 8) & 255, i & 255]), 0x10
        else:
            src, flags = bytes([198, 19, (i >> 8) & 255, i & 255]), 0x02 if i % 2 == 0 else 0x10
        tcp = struct.pack("!HHIIBBHHH", 1024 + i % 60000, 80, i, 1 if flags & 0x10 else 0, 0x50, flags, 65535, 0, 0)
        c = csum(src + dst + struct.pack("!BBH", 0, 6, len(tcp)) + tcp)
        tcp = tcp[:16] + struct.pack("!H", c) + tcp[18:]
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40, 0, 0x4000, 64, 6, 0, src, dst)
        ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
        frame = bytes.fromhex("020000000001" "020000000207" "0800") + ip + tcp + bytes(6)
        out.append(struct.pack("<IIII", 0, i, len(frame), len(frame)) + frame)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(b"".join(out))
    os.replace(tmp, path)
    return path



# The many-source flood (many_sources_capture): spoofed sources, each sending one frame a loop,
# and the legitimate clients among them, to the echo service STORM_ECHO serves ~4 Mpps of.
FLOOD_SOURCES, LEGIT_CLIENTS, FLOOD_PER_LEGIT = 100_000, 20, 50


def many_sources_capture():
    """A capture of UDP to 192.0.2.1:7, written once to the temp directory (deterministic, 8 MiB):
    each of LEGIT_CLIENTS clients (198.51.100.1-20, NORMAL_LEN-byte frames) once, then
    FLOOD_SOURCES spoofed sources (198.18.0.0 + i, STORM_LEN-byte frames) once each with a
    client's frame after every FLOOD_PER_LEGIT of them: 2% of the frames are the clients', and
    the lengths tell their answers from the flood's (scenario_figures' "flood" figures). The
    clients' first frames come before the flood's so the table knows them from the first loop,
    as clients of a service are known before a flood at it. Its path."""
    path = os.path.join(tempfile.gettempdir(), f"fastpathd-bench-many-sources-{FLOOD_SOURCES}.pcap")
    if os.path.exists(path):
        return path

    def csum(b):
        s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
        while s >> 16:
            s = (s & 0xFFFF) + (s >> 16)
        return ~s & 0xFFFF

    def frame(src, sport, length):
        payload = bytes(length - 42)
        udp = struct.pack("!HHHH", sport, 7, 8 + len(payload), 0) + payload
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0, src,
                         bytes([192, 0, 2, 1]))
        ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
        return bytes.fromhex("020000000001" "020000000207" "0800") + ip + udp

    legit = [frame(bytes([198, 51, 100, 1 + c]), 40000 + c, NORMAL_LEN) for c in range(LEGIT_CLIENTS)]
    frames = list(legit)
    for i in range(FLOOD_SOURCES):
        a = (198 << 24 | 18 << 16) + i
        frames.append(frame(a.to_bytes(4, "big"), 1024 + i % 60000, STORM_LEN))
        if i % FLOOD_PER_LEGIT == FLOOD_PER_LEGIT - 1:
            frames.append(legit[(i // FLOOD_PER_LEGIT) % LEGIT_CLIENTS])
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    out += [struct.pack("<IIII", 0, i, len(f), len(f)) + f for i, f in enumerate(frames)]
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(b"".join(out))
    os.replace(tmp, path)
    return path


# Per-source budgets for the many-source scenarios: a client's ~25 kpps within its own budget,
# the flood's newcomers 100 kpps together. The flow limit is off in both rows so that the
# budget is the only difference (with it on, the flooded socket's limit would shed the clients'
# flows, which are the dominant ones: seed 003's rule, not this one's).
MANY_SOURCES = STORM_ECHO + "\n[flow_limit]\nenabled = false\n"
SOURCE_BUDGETS = "\n[source_limit]\nrate = 100000\nburst = 10000\nnew_rate = 100000\nnew_burst = 1000\n"


def deny_list(n, hit):
    """A `[filter] deny_file` of `n` prefixes, written once to the temp directory: 90% /24s spread
    over 1.0.0.0-223.255.255.255, 10% /32s in other /24s (so the lookup's second level is built
    too), none in 198.18.0.0/15 or 198.51.100.0/24 (the captures' sources), plus, if `hit`, the
    two source prefixes themselves. Its path."""
    path = os.path.join(tempfile.gettempdir(), f"fastpathd-bench-deny-{n}-{int(hit)}.txt")
    if os.path.exists(path):
        return path
    lines, i, k = [], 0, 0
    skip = (198 << 16 | 18 << 8, 198 << 16 | 19 << 8, 198 << 16 | 51 << 8 | 100)
    while len(lines) < n:
        slash24 = (1 << 16) + (k * 2654435761) % ((223 << 16) - (1 << 16))
        k += 1
        if slash24 in skip or (slash24 >> 8) == (198 << 8 | 18) or (slash24 >> 8) == (198 << 8 | 19):
            continue
        a = f"{slash24 >> 16}.{(slash24 >> 8) & 255}.{slash24 & 255}"
        lines.append(f"{a}.{1 + i % 250}/32" if i % 10 == 9 else f"{a}.0/24")
        i += 1
    if hit:
        lines += ["198.18.0.0/15", "198.51.100.0/24"]
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)
    return path


def filtered(n, hit):
    """`[filter]` with `deny_list(n, hit)`."""
    return f'\n[filter]\ndeny_file = "{deny_list(n, hit)}"\n'


# Each scenario: name, kind (testpmd:<mode> | fastpathd:<mode>), capture, what it measures, and
# for fastpathd: config to append, the port's IPv4 addresses, whether /metrics is scraped every
# 10 ms during the run, and which extra figures to take from the exit dump.
SCENARIOS = [
    dict(name="testpmd-io", kind="testpmd:io", capture=BENCH_UDP, what="dpdk-testpmd io forwarding: the reference"),
    dict(name="testpmd-macswap", kind="testpmd:macswap", capture=BENCH_UDP,
         what="dpdk-testpmd macswap: io plus a write to every packet"),
    dict(name="fastpathd-forward", kind="fastpathd:forward", capture=BENCH_UDP,
         what="fastpathd [lcores] mode = \"forward\": our DPDK layer and loop, no stage"),
    dict(name="fastpathd-open-sink", kind="fastpathd:pipeline", capture=BENCH_UDP, extra=SINK,
         what="full pipeline, bench_udp to 192.0.2.1:9 with a `sink` service on port 9 (1 socket of 1024, drained "
              "by the worker on lcore 0): the open port, case (b)"),
    dict(name="fastpathd-closed-port", kind="fastpathd:pipeline", capture=BENCH_UDP, extra=ICMP_DEFAULTS,
         what="full pipeline, the same traffic with no service on port 9: ICMP Port Unreachable until the limiter "
              "(Linux defaults) is saturated, then icmp_suppressed, nothing built: seed 000's flood, case (a)"),
    dict(name="fastpathd-closed-port-exempt-65536", kind="fastpathd:pipeline", capture=BENCH_UDP,
         extra=ICMP_DEFAULTS + "exempt = [" + ", ".join(
             f'"100.{64 + (i >> 15)}.{(i >> 7) & 0xff}.{(i & 0x7f) * 2}/32"' for i in range(65536)) + "]\n",
         what="closed-port with 65,536 `[icmp] exempt` host prefixes (100.64.0.0/10, every other address, so "
              "none merge) that no bench_udp source is in: step (b)'s lookup misses on every packet"),
    dict(name="fastpathd-filtered-100", kind="fastpathd:pipeline", capture=BENCH_UDP_MANY,
         extra=ICMP_DEFAULTS + filtered(100, True),
         what="bench_udp_many from sources `[filter] deny` lists among 100 prefixes: refused (filtered) right "
              "after the source rule"),
    dict(name="fastpathd-filtered-1m", kind="fastpathd:pipeline", capture=BENCH_UDP_MANY,
         extra=ICMP_DEFAULTS + filtered(1_000_000, True),
         what="as filtered-100 with 1,000,000 prefixes in the list: the lookup's cost at a million"),
    dict(name="fastpathd-closed-port-many-sources-filter-1m", kind="fastpathd:pipeline", capture=BENCH_UDP_MANY,
         extra=ICMP_DEFAULTS + filtered(1_000_000, False),
         what="closed-port-many-sources with a `[filter] deny` list of 1,000,000 prefixes none of its sources "
              "is in: every packet asks the filter, misses, and goes on"),
    dict(name="fastpathd-plain-drop", kind="fastpathd:pipeline", capture=BENCH_UDP, ipv4=["192.0.2.2"],
         what="full pipeline, the same traffic when 192.0.2.1 is not ours: parsed, then dropped as not_local: "
              "case (c)"),
    dict(name="fastpathd-build-first", kind="fastpathd:pipeline", capture=BENCH_UDP,
         extra=ICMP_DEFAULTS + "build_first = true   # benchmark only\n",
         what="as closed-port with `[icmp] build_first = true`: every error built in place before the limiter "
              "is asked (the order seed 000 replaced): case (d)"),
    dict(name="fastpathd-closed-port-many-sources", kind="fastpathd:pipeline", capture=BENCH_UDP_MANY,
         extra=ICMP_DEFAULTS,
         what="closed-port on seed 000's traffic (bench_udp_many: 4096 sources drawn from 198.18.0.0/15 as the "
              "kernel's pktgen_sample04_many_flows.sh draws them): they ask for more errors than the global budget, "
              "so the global limit is the saturated one and a decision stops at its peek (with bench_udp's 256 "
              "sources the per-destination limit holds the flood back: every decision reads the table)"),
    dict(name="fastpathd-plain-drop-many-sources", kind="fastpathd:pipeline", capture=BENCH_UDP_MANY,
         ipv4=["192.0.2.2"],
         what="plain drop on bench_udp_many: case (c) for the traffic above"),
    dict(name="fastpathd-open-sink-many-sources", kind="fastpathd:pipeline", capture=BENCH_UDP_MANY, extra=SINK,
         what="open-sink on bench_udp_many: case (b) for seed 000's traffic"),
    dict(name="fastpathd-build-first-many-sources", kind="fastpathd:pipeline", capture=BENCH_UDP_MANY,
         extra=ICMP_DEFAULTS + "build_first = true   # benchmark only\n",
         what="build-first on bench_udp_many: case (d) for seed 000's traffic"),
    dict(name="fastpathd-closed-port-v6", kind="fastpathd:pipeline", capture=BENCH_UDP6, extra=ICMP_DEFAULTS,
         what="closed-port over IPv6 (bench_udp6: the same flood to [2001:db8::1]:9, 66-byte frames): ICMPv6 "
              "Destination Unreachable (port) until the limiter is saturated, then icmp_suppressed"),
    dict(name="fastpathd-tcp-no-service", kind="fastpathd:pipeline", capture=BENCH_TCP,
         what="full pipeline, a SYN flood (bench_tcp: 1024 flows) to 192.0.2.1:9 where no service listens: "
              "parsed, looked up, a reset (RFC 9293) until the [tcp_reset] limits are spent, then "
              "tcp_reset_suppressed"),
    dict(name="fastpathd-open-sink-v6", kind="fastpathd:pipeline", capture=BENCH_UDP6, extra=SINK,
         what="open-sink over IPv6: bench_udp6 to [2001:db8::1]:9 with the `sink` service on port 9"),
    dict(name="fastpathd-tcp-no-service-v6", kind="fastpathd:pipeline", capture=BENCH_TCP6,
         what="tcp-no-service over IPv6: bench_tcp6's SYN flood (1024 flows) to [2001:db8::1]:9 where no service "
              "listens: a reset until the [tcp_reset] limits are spent, then tcp_reset_suppressed"),
    dict(name="fastpathd-storm-limit-on", kind="fastpathd:pipeline", capture=BENCH_STORM,
         extra=STORM_ECHO + "\n[flow_limit]\nenabled = true\n", figures="storm",
         what="seed 003's storm (bench_storm: one flow 20x the rate of 20 normal flows) to an `echo` service whose "
              "worker serves ~4 Mpps, flow limit on"),
    dict(name="fastpathd-storm-limit-off", kind="fastpathd:pipeline", capture=BENCH_STORM,
         extra=STORM_ECHO + "\n[flow_limit]\nenabled = false\n", figures="storm",
         what="the same storm with the flow limit off"),
    dict(name="fastpathd-frags", kind="fastpathd:pipeline", capture=BENCH_FRAGS, extra=FRAGS_SINK, figures="frags",
         what="seed 001's mix (bench_frags: 64 legitimate 3-fragment datagrams to a `sink` service among 1024 "
              "first fragments that never complete, each from its own source), default [reassembly] (4 MiB, the "
              "flood's 1024 pending datagrams fit)"),
    dict(name="fastpathd-frags-flood", kind="fastpathd:pipeline", capture=BENCH_FRAGS,
         extra=FRAGS_SINK + "\n[reassembly]\nhigh_thresh_bytes = 262144   # 113 datagrams: the flood is 9x that\n",
         figures="frags",
         what="the same mix with high_thresh_bytes = 256 KiB (113 datagrams): the flood's 1024 pending datagrams "
              "are 9x the capacity, replayed at line rate; the default `probation` policy"),
    dict(name="fastpathd-frags-flood-linux", kind="fastpathd:pipeline", capture=BENCH_FRAGS,
         extra=FRAGS_SINK + "\n[reassembly]\nhigh_thresh_bytes = 262144\npolicy = \"linux\"\n", figures="frags",
         what="fastpathd-frags-flood under seed 001's `linux` policy (refusal above high_thresh)"),
    dict(name="fastpathd-frags-100x", kind="fastpathd:pipeline", capture=BENCH_FRAGS_100X,
         extra=FRAGS_SINK + "\n[reassembly]\nhigh_thresh_bytes = 65536   # 28 datagrams: the flood is 100x that\n",
         figures="frags",
         what="bench_frags_100x (2816 never-completing first fragments, 64 legitimate 3-fragment datagrams whose "
              "fragments are 4 flood frames apart) with high_thresh_bytes = 64 KiB (28 datagrams): 100x the "
              "capacity at line rate; `probation`"),
    dict(name="fastpathd-frags-100x-linux", kind="fastpathd:pipeline", capture=BENCH_FRAGS_100X,
         extra=FRAGS_SINK + "\n[reassembly]\nhigh_thresh_bytes = 65536\npolicy = \"linux\"\n", figures="frags",
         what="fastpathd-frags-100x under the `linux` policy"),
    dict(name="fastpathd-frags-smack", kind="fastpathd:pipeline", capture=BENCH_FRAGS_SMACK, extra=FRAGS_SINK,
         figures="frags",
         what="FragmentSmack (bench_frags_smack: shuffled 8-byte fragments of 600 datagrams that never complete, "
              "4200 buffers = 2.3x the default 4 MiB table, 64 legitimate 3-fragment datagrams among them), default "
              "[reassembly]: `probation`"),
    dict(name="fastpathd-frags-smack-linux", kind="fastpathd:pipeline", capture=BENCH_FRAGS_SMACK,
         extra=FRAGS_SINK + LINUX_POLICY, figures="frags",
         what="fastpathd-frags-smack under the `linux` policy"),
    dict(name="fastpathd-gre-encap", kind="fastpathd:pipeline", capture=BENCH_UDP, extra=GRE, figures="gre",
         what="bench_udp to a service on port 9 with `action = \"tunnel\"`: the worker (lcore 0) wraps every "
              "packet in GRE and sends it out of net_null0"),
    dict(name="fastpathd-gre-encap-untracked", kind="fastpathd:pipeline", capture=BENCH_UDP,
         extra=GRE + "\n[conntrack]\nentries = 0\n", figures="gre",
         what="fastpathd-gre-encap without a connection table (`[conntrack] entries = 0`: stateless Maglev)"),
    dict(name="fastpathd-gre-tracked", kind="fastpathd:pipeline", capture=conntrack_capture("tracked"),
         extra=GRE_TCP.format(entries=4 * CONNTRACK_FLOWS), figures="conntrack", mbufs=32767,
         what=f"{CONNTRACK_FLOWS} established TCP flows (ACKs, one a flow per loop of the capture) to a tunnel "
              f"service over 3 backends with a table of {4 * CONNTRACK_FLOWS} entries: after the warm-up every packet "
              "hits a confirmed entry (1M flows: benches/examples/conntrack_flood.rs)"),
    dict(name="fastpathd-gre-flood", kind="fastpathd:pipeline", capture=conntrack_capture("flood"),
         extra=GRE_TCP.format(entries=1024), figures="conntrack", mbufs=32767,
         what=f"a flood of new flows: spoofed SYNs and ACKs of {CONNTRACK_FLOWS} tuples, 16 x the table's 1024 "
              "entries: almost every packet misses, takes the way of an older unconfirmed entry and is encapsulated to the Maglev pick"),
    dict(name="fastpathd-many-sources-budget-off", kind="fastpathd:pipeline", capture=many_sources_capture(),
         extra=MANY_SOURCES, figures="flood", mbufs=131071,
         what=f"a flood from {FLOOD_SOURCES:,} spoofed sources at line rate (one frame each a loop) with "
              f"{LEGIT_CLIENTS} legitimate clients among them (2% of the frames), to an `echo` service whose "
              "worker serves ~4 Mpps, no per-source budget: the clients get the socket's share of the flood's"),
    dict(name="fastpathd-many-sources-budget-on", kind="fastpathd:pipeline", capture=many_sources_capture(),
         extra=MANY_SOURCES + SOURCE_BUDGETS, figures="flood", mbufs=131071,
         what="the same flood with `[source_limit]` on: the clients, known before it, keep their own budgets "
              "(100,000/s); the spoofed sources stay newcomers and share 100,000/s"),
    dict(name="fastpathd-tcp-ack-flood", kind="fastpathd:pipeline", capture=conntrack_capture("tracked"),
         extra=TCP_SINK, mbufs=32767,
         what=f"an ACK flood ({CONNTRACK_FLOWS} tuples, no SYN) to a TCP `sink` service without `tcp_state`: every "
              "segment delivered (open-sink over TCP, untracked)"),
    dict(name="fastpathd-tcp-ack-flood-tracked", kind="fastpathd:pipeline", capture=conntrack_capture("tracked"),
         extra=tcp_state(0), mbufs=32767,
         what="the same flood with `tcp_state = true` and no learning window: every segment `tcp_out_of_state` "
              "(`no_flow`) on the RX lcore"),
    dict(name="fastpathd-tcp-open-sink-tracked", kind="fastpathd:pipeline", capture=conntrack_capture("tracked"),
         extra=tcp_state(3600), mbufs=32767,
         what=f"the same {CONNTRACK_FLOWS} flows with `tcp_state = true` and a learning window: learned in the "
              "warm-up, then every segment hits an established entry and is delivered (open-sink over TCP, tracked)"),
    dict(name="fastpathd-open-sink-scraped", kind="fastpathd:pipeline", capture=BENCH_UDP, extra=SINK, scrape=True,
         paired=True, min_seconds=12 * SCRAPE_PERIOD,
         what="open-sink while a thread of the benchmark GETs /metrics every 10 ms, in windows of "
              f"{SCRAPE_PERIOD} s on and off (on, off, off, on, ...) in the same run; Mpps = received in the "
              "scraped windows; `paired ratio` = delivered to the service in scraped windows / in unscraped "
              "windows of the same run"),
    dict(name="fastpathd-open-sink-free-on-rx", kind="fastpathd:pipeline", capture=BENCH_UDP,
         extra=SINK + "free_on_rx = true   # benchmark only\n", mbufs=32767,
         what="open-sink with the service's benchmark-only `free_on_rx` (the RX lcore frees what it would enqueue, "
              "counted delivered; the worker on lcore 0 finds nothing and sleeps): one RX lcore's whole path on "
              "CPU 1, the reference of the next row (both with a pool of 32767 mbufs: two RX lcores' descriptors "
              "and socket queues need more than 16383)"),
    dict(name="fastpathd-open-sink-free-on-rx-pdump", kind="fastpathd:pipeline", capture=BENCH_UDP,
         extra=SINK + "free_on_rx = true   # benchmark only\n", mbufs=32767, huge=True,
         what=f"open-sink-free-on-rx on hugepages (-m {HUGE_MB}) with the shared runtime directory, as production "
              "runs: DPDK's capture framework is initialised (`rte_pdump_init`), no capture attached; the row above "
              "runs --no-huge --no-shconf, where it is not (capturing costs nothing until a tool attaches)"),
    dict(name="fastpathd-open-sink-free-on-rx-pdump-detached", kind="fastpathd:pipeline", capture=BENCH_UDP,
         extra=SINK + "free_on_rx = true   # benchmark only\n", mbufs=32767, huge=True, dumpcap_once=True,
         # benches/instructions.py reads the packets received at the detach from /metrics: as they are now.
         metrics="cache_ms = 0",
         what="the same once `dpdk-dumpcap -c 64` has attached, captured and exited (its RX/TX callbacks installed "
              "and removed again) before the measured window"),
    dict(name="fastpathd-open-sink-free-on-rx-2-rx-lcores", kind="fastpathd:pipeline", capture=BENCH_UDP,
         extra=SINK + "free_on_rx = true   # benchmark only\n", rx_lcores=2, mbufs=32767,
         what="the same with 2 RX lcores (`rx_lcores = 2`: net_pcap0 replays bench_udp on 2 RX queues, lcore 1 on "
              "CPU 1, lcore 2 on CPU 0 with the sleeping worker, the control thread and this script), sharing no "
              "written line: Mpps of the port, both queues"),
    dict(name="fastpathd-closed-port-scraped", kind="fastpathd:pipeline", capture=BENCH_UDP, extra=ICMP_DEFAULTS,
         workers="[]", scrape=True, paired=True, compare="rx", min_seconds=12 * SCRAPE_PERIOD,
         what="closed-port with no worker lcore, so CPU 0 runs no lcore: the control thread, the metrics "
              "endpoint and the benchmark's scraper share it, and the RX lcore (CPU 1) is alone, as on a machine "
              "with housekeeping CPUs; /metrics every 10 ms in windows on and off as above; `paired "
              "ratio` = received in scraped windows / in unscraped windows of the same run (every received "
              "packet is handled on lcore 1, nothing waits in a socket)"),
]

# DPDK's own reassembly as the anchor of every `figures="frags"` scenario: the
# harness benches/examples/ip_frag_anchor.rs runs librte_ip_frag (DPDK's table, as its
# examples/ip_reassembly drives it) on lcore 1 over the same net_pcap port and capture, with a table
# of the same memory: max_entries = high_thresh_bytes / 2304 (fastpathd's charge per held fragment;
# the harness divides, from fastpath's ReasmConfig), 30 s timeout. One anchor per frags scenario,
# made here so frags scenarios added above get theirs; reported beside it by anchor_report().
ANCHOR_PREFIX = "dpdk-ip-frag-"
# fastpath::pipeline::reasm::DEFAULT_HIGH_THRESH, what a frags scenario without [reassembly]
# high_thresh_bytes runs with.
DEFAULT_HIGH_THRESH = 4 << 20


def anchor_memory(sc):
    """The `high_thresh_bytes` a fastpathd frags scenario runs with."""
    m = re.search(r"^\s*high_thresh_bytes\s*=\s*(\d+)", sc.get("extra", ""), re.M)
    return int(m.group(1)) if m else DEFAULT_HIGH_THRESH


def anchor_scenarios(scenarios):
    """One anchor per capture and table memory: the policies of one flood (`fastpathd-frags-flood`,
    `fastpathd-frags-flood-linux`) share theirs (`anchor_of` names the first; `anchor_report` puts
    every fastpathd scenario of that capture and memory beside it)."""
    out, seen = [], set()
    for sc in scenarios:
        if sc.get("figures") != "frags" or not sc["kind"].startswith("fastpathd"):
            continue
        high = anchor_memory(sc)
        if (sc["capture"], high) in seen:
            continue
        seen.add((sc["capture"], high))
        # Everything of the fastpathd scenario the figures may read (capture, figures, ...) is kept.
        out.append(dict(sc, name=ANCHOR_PREFIX + sc["name"].removeprefix("fastpathd-"), kind="anchor:ip_frag",
                        anchor_of=sc["name"], high_thresh=high, extra="",
                        what=f"DPDK's own reassembly (librte_ip_frag, benches/examples/ip_frag_anchor.rs) on "
                             f"`{sc['name']}`'s capture, a table of {high} B / 2304 B datagrams (fastpathd's memory; "
                             "entries in the table below), 30 s timeout; completed datagrams and non-fragments freed "
                             "on lcore 1 (fastpathd delivers them to a service)"))
    return out


SCENARIOS += anchor_scenarios(SCENARIOS)

SCENARIO_NAMES = [sc["name"] for sc in SCENARIOS]
# Goals: (label, scenario, reference, least ratio of per-round medians).
GOALS = [
    ("forward ≥ 0.95 × testpmd io", "fastpathd-forward", "testpmd-io", 0.95),
    ("open port with sink ≥ 0.6 × testpmd io", "fastpathd-open-sink", "testpmd-io", 0.6),
    ("closed port ≥ open port (case (a) ≥ (b))", "fastpathd-closed-port", "fastpathd-open-sink", 1.0),
    ("closed port ≥ 0.85 × plain drop (case (a) ≥ 0.85 (c)), 256 sources: the per-destination limit saturated",
     "fastpathd-closed-port", "fastpathd-plain-drop", 0.85),
    ("closed port ≥ 0.85 × plain drop (case (a) ≥ 0.85 (c)), 4096 sources: the global limit saturated "
     "(seed 000's traffic)", "fastpathd-closed-port-many-sources", "fastpathd-plain-drop-many-sources", 0.85),
    ("closed port ≥ 2 × build first (case (a) ≥ 2 (d))", "fastpathd-closed-port", "fastpathd-build-first", 2.0),
    ("refused by a 1,000,000-prefix deny list ≥ 0.9 × plain drop", "fastpathd-filtered-1m",
     "fastpathd-plain-drop-many-sources", 0.9),
    ("a 1,000,000-prefix deny list costs what 100 do: filtered-1m ≥ 0.95 × filtered-100", "fastpathd-filtered-1m",
     "fastpathd-filtered-100", 0.95),
    ("closed port with a 1,000,000-prefix deny list it misses ≥ 0.9 × without", "fastpathd-closed-port-many-sources-filter-1m",
     "fastpathd-closed-port-many-sources", 0.9),
    ("closed port over IPv6 ≥ 0.9 × closed port over IPv4", "fastpathd-closed-port-v6",
     "fastpathd-closed-port", 0.9),
    ("open-sink over IPv6 ≥ 0.9 × open-sink over IPv4", "fastpathd-open-sink-v6", "fastpathd-open-sink", 0.9),
    ("TCP to a port without a service ≥ 0.95 × plain drop", "fastpathd-tcp-no-service",
     "fastpathd-plain-drop", 0.95),
    ("TCP over IPv6 to a port without a service ≥ 0.95 × plain drop", "fastpathd-tcp-no-service-v6",
     "fastpathd-plain-drop", 0.95),
    ("closed port ≥ open port, seed 000's traffic (case (a) ≥ (b), 4096 sources)",
     "fastpathd-closed-port-many-sources", "fastpathd-open-sink-many-sources", 1.0),
    ("closed port ≥ 2 × build first, seed 000's traffic (case (a) ≥ 2 (d), 4096 sources)",
     "fastpathd-closed-port-many-sources", "fastpathd-build-first-many-sources", 2.0),
    ("2 RX lcores ≥ 1.8 × 1 RX lcore, open-sink freed on RX (per-lcore rate independent of the "
     "lcore count; the second RX lcore shares CPU 0 with the control thread and this script)",
     "fastpathd-open-sink-free-on-rx-2-rx-lcores", "fastpathd-open-sink-free-on-rx", 1.8),
    ("legitimate datagrams reassembled ≥ 0.9, flood 9x the table at line rate",
     "fastpathd-frags-flood", "figure:legit_reassembled", 0.9),
    ("legitimate datagrams reassembled ≥ 0.9, flood 100x the table at line rate",
     "fastpathd-frags-100x", "figure:legit_reassembled", 0.9),
    ("legitimate datagrams reassembled ≥ 0.9, FragmentSmack at line rate",
     "fastpathd-frags-smack", "figure:legit_reassembled", 0.9),
    ("legitimate datagrams reassembled ≥ 0.9, in order with the flood fitting the table (no loss)",
     "fastpathd-frags", "figure:legit_reassembled", 0.9),
    ("scraped every 10 ms ≥ 0.98 × not scraped, same run, RX lcore on a CPU of its own",
     "fastpathd-closed-port-scraped", "figure:paired_ratio", 0.98),
    ("scraped every 10 ms ≥ 0.98 × not scraped, same run, scraper on the worker's CPU (2-CPU machine)",
     "fastpathd-open-sink-scraped", "figure:paired_ratio", 0.98),
]


def env_num(name, default, cast=float):
    v = os.environ.get(name, "")
    try:
        return cast(v) if v else default
    except ValueError:
        sys.exit(f"macro_bench: {name}={v!r} is not a number")


def eal_args(prefix, capture, rx_queues=1, tx_queues=2, huge=False, memory_mb=1024):
    """The EAL arguments every scenario shares, lcore list aside (fastpathd derives it): net_pcap0
    replays `capture` endlessly on each of its `rx_queues` RX queues. With `huge`, as production
    runs: HUGE_MB of hugepages reserved up front and the shared runtime directory (no
    --no-shconf), so fastpathd initialises DPDK's capture framework and dpdk-dumpcap can attach."""
    # `infinite_rx` once: given per queue, net_pcap replays each capture once and stops.
    rx, tx = (os.path.basename(capture), SHORT_NULL) if huge else (capture, "/dev/null")
    args = ",".join([f"rx_pcap={rx}"] * rx_queues + ["infinite_rx=1"] + [f"tx_pcap={tx}"] * tx_queues)
    # DPDK 22.11's net_pcap hands its arguments to secondary processes (dpdk-dumpcap) in 64 bytes,
    # truncating longer ones (the secondary then fails to probe the port): on hugepages the run's
    # directory (its working directory) holds short links to the capture and to /dev/null.
    if huge and len(args) >= PCAP_ARGS_MAX:
        sys.exit(f"macro_bench: net_pcap0 arguments {args!r} are {len(args)} bytes, a secondary process sees "
                 f"only {PCAP_ARGS_MAX - 1}")
    pcap = "net_pcap0," + args
    # (net_pcap's infinite_rx keeps the whole capture in mbufs of the pool: a large capture
    # needs a larger pool and `memory_mb`, benches/curves.py's 1M-flow points.)
    memory = ["-m", str(HUGE_MB)] if huge else ["--no-huge", "-m", str(memory_mb)]
    return [
        *memory, "--no-pci", *([] if huge else ["--no-shconf"]), f"--file-prefix={prefix}",
        "--no-telemetry", "--log-level=lib.eal:warning", f"--vdev={pcap}", "--vdev=net_null0,no-rx=1",
    ]


def hugepages_free_mb():
    """Free hugepage memory in MiB, 0 when hugetlbfs is not mounted."""
    with open("/proc/mounts") as f:
        if not any(line.split()[2] == "hugetlbfs" for line in f if len(line.split()) > 2):
            return 0
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, _, v = line.partition(":")
            info[k] = int(v.split()[0]) if v.split() else 0
    return info.get("HugePages_Free", 0) * info.get("Hugepagesize", 0) // 1024


def cleanup_prefix(prefix):
    """Removes what an EAL leaves under `prefix` after it exits (or was killed): its runtime
    directory /var/run/dpdk/<prefix> (created even with --no-shconf) and, on hugepages, its
    hugepage files."""
    shutil.rmtree(f"/var/run/dpdk/{prefix}", ignore_errors=True)
    with open("/proc/mounts") as f:
        mounts = [line.split()[1] for line in f if len(line.split()) > 2 and line.split()[2] == "hugetlbfs"]
    for m in mounts:
        try:
            names = os.listdir(m)
        except OSError:
            continue
        for n in names:
            # The EAL names them <prefix>map_<n> (so fpbench-1-1 never takes fpbench-1-10's).
            if n.startswith(prefix + "map_"):
                try:
                    os.remove(os.path.join(m, n))
                except OSError:
                    pass


def dumpcap_once(name, prefix, tmp, frames=64):
    """Attaches dpdk-dumpcap to the fastpathd running under `prefix`, captures `frames` frames of
    net_pcap0 (RX and TX) and lets it exit, which removes its RX/TX callbacks again."""
    out = os.path.join(tmp, f"{name}.pcapng")
    cmd = ["timeout", "120", os.environ.get("DUMPCAP", "dpdk-dumpcap"), f"--file-prefix={prefix}",
           "-i", "net_pcap0", "-q", "-c", str(frames), "-w", out]
    # In fastpathd's working directory: net_pcap's short relative names are opened again there.
    # Every CPU, as fastpathd's children get: pinned to this script's CPU 0 (fastpathd's worker
    # and control threads') it took 80 s or more to capture its frames.
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, preexec_fn=child_affinity)
    # A pcapng enhanced packet block is 32 bytes of header and options around each frame.
    size = os.path.getsize(out) if os.path.exists(out) else 0
    if r.returncode != 0 or size < frames * 64:
        fail(name, f"dpdk-dumpcap exited {r.returncode}, wrote {size} bytes", r.stdout + r.stderr)
    os.remove(out)


class Reader:
    """Collects a child's output on a thread so the child never blocks on a full pipe."""

    def __init__(self, stream):
        self.buf = []
        # (monotonic time, characters received so far) after each chunk: when each line arrived.
        self.arrivals = []
        self.size = 0
        self.lock = threading.Lock()
        self.t = threading.Thread(target=self._run, args=(stream,), daemon=True)
        self.t.start()

    def _run(self, stream):
        while True:
            chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
            if not chunk:
                break
            text = chunk.decode("utf-8", "replace")
            with self.lock:
                self.buf.append(text)
                self.size += len(text)
                self.arrivals.append((time.monotonic(), self.size))

    def arrived(self, end):
        """When the character at offset `end - 1` arrived."""
        with self.lock:
            for t, size in self.arrivals:
                if size >= end:
                    return t
        return None

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


def reap(p):
    """Kills `p` if it is still running and waits for it (the `finally` of every run)."""
    if p.poll() is None:
        p.kill()
        p.wait()


def fail(name, why, output):
    tail = "\n".join(output.splitlines()[-25:])
    sys.exit(f"macro_bench: {name}: {why}\n--- last output:\n{tail}")


def run_testpmd(name, mode, capture, prefix, warmup, seconds, mbufs=MBUFS, memory_mb=1024):
    testpmd = os.environ.get("TESTPMD", "dpdk-testpmd")
    cmd = [testpmd, "-l", "0,1", *eal_args(prefix, capture, memory_mb=memory_mb), "--",
           "-i", f"--forward-mode={mode}", f"--burst={BURST}", f"--rxd={DESC}", f"--txd={DESC}",
           "--nb-cores=1", f"--total-num-mbufs={mbufs}", f"--mbcache={MBUF_CACHE}"]
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
        reap(p)
        cleanup_prefix(prefix)
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
rx_queues = {rx_queues}
tx_queues = {tx_queues}
ipv4 = {ipv4}
ipv6 = ["2001:db8::1"]
mac = "02:00:00:00:00:01"
{forward_to}

[[port]]
device = "net_null0"

[lcores]
rx = {rx}
workers = {workers}
mode = "{mode}"
{cpus}

# In the run's directory: another fastpathd on this machine keeps the default one.
[control]
socket = "control.sock"

[metrics]
listen = "127.0.0.1:{metrics_port}"
{metrics}
{extra}"""

DELIVERED = re.compile(r"delivered ([\d.]+)(M|k|)pps")
STATS_LINE = re.compile(r"^\[\s*([\d.]+)s\] net_pcap0: rx ([\d.]+)(M|k|)pps", re.M)


def free_port():
    """A TCP port on loopback nobody listens on now (for [metrics] listen)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


class Scraper:
    """GETs http://127.0.0.1:PORT/metrics every `interval` seconds on a thread.

    A plain socket kept open between scrapes, like Prometheus's HTTP keep-alive, not urllib: the
    scraper shares lcore 0 with fastpathd's worker, and urllib's per-request overhead (~1 ms of
    Python) and a TCP handshake per scrape would be charged to the scrape it measures.
    Each response is checked for a status line of 200 and a family every scrape must carry."""

    def __init__(self, port, interval=0.010, period=None):
        self.addr = ("127.0.0.1", port)
        # With `period`, scraping alternates in windows of `period` seconds (ABBA order), and
        # `toggles` records (monotonic time, on) at each change, so one fastpathd run gives both
        # the scraped and the unscraped rate (a paired comparison: no difference between runs).
        self.period = period
        self.toggles = [(time.monotonic(), True)]
        self.request = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        self.conn = None
        self.interval = interval
        self.stop = threading.Event()
        self.ok = 0
        self.failed = 0
        self.seconds = 0.0
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _get(self):
        # One persistent connection, as Prometheus keeps: reopened only if the server closed it.
        if self.conn is None:
            self.conn = socket.create_connection(self.addr, timeout=1)
            self.rfile = self.conn.makefile("rb")
        try:
            self.conn.sendall(self.request)
            status = self.rfile.readline()
            length = 0
            while True:
                line = self.rfile.readline()
                if not line:
                    raise OSError("connection closed")
                if line in (b"\r\n", b"\n"):
                    break
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            body = self.rfile.read(length)
        except (OSError, ValueError):
            self.conn.close()
            self.conn = None
            raise OSError("scrape failed")
        return status.startswith(b"HTTP/1.1 200") and b"fastpath_rx_packets_total" in body

    def on_at(self, t0, t1):
        """True/False if scraping was on/off during all of [t0, t1] (with a margin), else None."""
        state = None
        changes = [x for i, x in enumerate(self.toggles) if i == 0 or x[1] != self.toggles[i - 1][1]]
        for i, (t, on) in enumerate(changes):
            end = changes[i + 1][0] if i + 1 < len(changes) else float("inf")
            if t <= t0 - 0.05 and t1 + 0.05 <= end:
                state = on
        return state

    def _run(self):
        nxt = time.monotonic()
        on = True
        while not self.stop.is_set():
            t0 = time.monotonic()
            if self.period and t0 - self.toggles[-1][0] >= self.period:
                # On, off, off, on, on, off, ...: each "on" window has an "off" one before or
                # after it in turn, so a drift of the rate during the run cancels out.
                on = ABBA[len(self.toggles) % 4]
                self.toggles.append((t0, on))
            if not on:
                nxt = t0 + self.interval
                self.stop.wait(self.interval)
                continue
            try:
                if self._get():
                    self.ok += 1
                    self.seconds += time.monotonic() - t0
                else:
                    self.failed += 1
            except OSError:
                self.failed += 1
            nxt += self.interval
            self.stop.wait(max(0.0, nxt - time.monotonic()))

    def finish(self):
        self.stop.set()
        self.t.join()
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def scenario_figures(sc, metrics, mpps):
    """Extra figures of a scenario from fastpathd's exit dump (whole run, warm-up included)."""
    def total(prefix, port=None):
        return sum(v for k, v in metrics.items()
                   if k.startswith(prefix + "{") and (port is None or f'port="{port}"' in k))

    rx = total("fastpath_rx_packets_total")
    out = {}
    kind = sc.get("figures")
    if kind in ("storm", "flood") and rx > 0:
        # Storm frames are STORM_LEN bytes and normal ones NORMAL_LEN, and an echo answer is as long as
        # its request: packets and bytes give each kind's count, received and answered.
        rx_b = total("fastpath_rx_bytes_total", "net_pcap0")
        tx_p = total("fastpath_tx_packets_total", "net_pcap0")
        tx_b = total("fastpath_tx_bytes_total", "net_pcap0")
        d = NORMAL_LEN - STORM_LEN
        normal_rx = (rx_b - STORM_LEN * rx) / d
        normal_tx = (tx_b - STORM_LEN * tx_p) / d
        storm_rx, storm_tx = rx - normal_rx, tx_p - normal_tx
        out["normal_answered"] = normal_tx / normal_rx if normal_rx > 0 else None
        out["storm_answered"] = storm_tx / storm_rx if storm_rx > 0 else None
        out["answered_mpps"] = mpps * tx_p / rx
        out["flow_limited"] = total("fastpath_flow_limit_dropped_total") / rx
        if kind == "flood":
            # The many-source flood: its normal frames are the legitimate clients'.
            out = {"clients_answered": out["normal_answered"], "flood_answered": out["storm_answered"],
                   "answered_mpps": out["answered_mpps"],
                   "source_limited": total("fastpath_source_limited_total") / rx}
    elif kind == "frags" and rx > 0:
        legit = rx * FRAGS_LEGIT / FRAGS_FRAMES[os.path.basename(sc["capture"])]
        done = total("fastpath_reasm_completed_total")
        out["legit_reassembled"] = done / legit if legit > 0 else None
        out["datagrams_mpps"] = mpps * done / rx
    elif kind == "conntrack" and rx > 0:
        hits, misses = total("fastpath_conntrack_hits_total"), total("fastpath_conntrack_misses_total")
        out["encap_mpps"] = mpps * total("fastpath_gre_encap_total") / rx
        out["hit_rate"] = hits / (hits + misses) if hits + misses > 0 else None
        out["confirmed"] = sum(v for k, v in metrics.items()
                               if k.startswith("fastpath_conntrack_entries{") and 'state="confirmed"' in k)
        out["evictions_per_packet"] = total("fastpath_conntrack_evictions_total") / rx
    elif kind == "gre" and rx > 0:
        out["encap_mpps"] = mpps * total("fastpath_gre_encap_total") / rx
        out["encap_share"] = total("fastpath_gre_encap_total") / rx
    return out


def fastpathd_binary():
    return os.environ.get("FASTPATHD") or os.path.join(REPO, "target", "release", "fastpathd")


def write_config(sc, prefix, tmp):
    """Writes the fastpathd config of scenario `sc` into `tmp`; returns (path, metrics port)."""
    name, mode, capture = sc["name"], sc["kind"].split(":")[1], sc["capture"]
    # RX lcores 1.. (one RX queue each), the worker on lcore 0. With several RX lcores on this
    # 2-CPU machine they alternate between CPUs 1 and 0 (`rx_lcores = N`; lcore 0 stays on CPU 0).
    n = sc.get("rx_lcores", 1)
    rx = list(range(1, n + 1))
    workers = sc.get("workers", "[0]")
    tx_queues = n + len(eval(workers))
    cpus = "" if n == 1 else 'cpus = "0@0,' + ",".join(f"{l}@{l % 2}" for l in rx) + '"'
    eal = "[" + ", ".join(f'"{a}"' for a in eal_args(prefix, capture, n, tx_queues, sc.get("huge", False),
                                                       sc.get("memory_mb", 1024))) + "]"
    cfg = os.path.join(tmp, f"{name}.toml")
    if sc.get("huge"):
        # The short names eal_args uses, relative to `tmp`, fastpathd's working directory.
        for link, target in ((os.path.basename(capture), capture), (SHORT_NULL, "/dev/null")):
            if not os.path.lexists(os.path.join(tmp, link)):
                os.symlink(target, os.path.join(tmp, link))
    mport = free_port()
    with open(cfg, "w") as f:
        f.write(FASTPATHD_CONFIG.format(
            eal=eal, mbufs=sc.get("mbufs", MBUFS), cache=MBUF_CACHE, desc=DESC, mode=mode, metrics_port=mport,
            workers=workers, rx=rx, cpus=cpus, rx_queues=n, tx_queues=tx_queues,
            ipv4="[" + ", ".join(f'"{a}"' for a in sc.get("ipv4", ["192.0.2.1"])) + "]",
            extra=sc.get("extra", ""), metrics=sc.get("metrics", ""),
            forward_to='forward_to = "net_null0"' if mode == "forward" else ""))
    return cfg, mport


CAPTURE_UNAVAILABLE = "live capture (dpdk-dumpcap) unavailable"


def check_capture_ready(sc, log):
    """A scenario on hugepages measures fastpathd with DPDK's capture framework initialised:
    fastpathd says so when `rte_pdump_init` failed, and the run is then meaningless."""
    if sc.get("huge") and CAPTURE_UNAVAILABLE in log:
        fail(sc["name"], "rte_pdump_init failed on hugepages with the shared runtime directory", log)


def run_fastpathd(sc, prefix, warmup, seconds, tmp):
    # A paired scenario needs several scraped and unscraped windows whatever BENCH_SECONDS is.
    seconds = max(seconds, sc.get("min_seconds", 0))
    name = sc["name"]
    binary = fastpathd_binary()
    cfg, mport = write_config(sc, prefix, tmp)
    dump = os.path.join(tmp, f"{name}.prom")
    if os.path.exists(dump):
        os.remove(dump)
    cmd = [binary, "--config", cfg, "--stats-interval", "1", "--metrics-dump", dump]
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         preexec_fn=child_affinity, cwd=tmp)
    err = Reader(p.stderr)
    scraper = None
    # Stats lines printed before the warm-up starts (while a capture attaches and detaches).
    skip = 0
    try:
        if not err.wait_for("fastpathd: running", 60, p):
            fail(name, "fastpathd did not start", err.text())
        check_capture_ready(sc, err.text())
        if sc.get("dumpcap_once"):
            dumpcap_once(name, prefix, tmp)
            skip = len(STATS_LINE.findall(err.text()))
        if sc.get("scrape"):
            scraper = Scraper(mport, period=SCRAPE_PERIOD if sc.get("paired") else None)
        # Lines come every second from here; the first `warmup` are the warm-up.
        deadline = time.monotonic() + warmup + seconds + 90
        while time.monotonic() < deadline:
            if len(STATS_LINE.findall(err.text())) >= skip + warmup + seconds or p.poll() is not None:
                break
            time.sleep(0.5)
        if scraper:
            scraper.finish()
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)
    finally:
        if scraper:
            scraper.finish()
        reap(p)
        cleanup_prefix(prefix)
    text = err.text()
    if p.returncode != 0:
        fail(name, f"fastpathd exited with {p.returncode}", text)
    lines = [(float(t), float(v) * {"M": 1e6, "k": 1e3, "": 1}[u]) for t, v, u in STATS_LINE.findall(text)]
    lines = lines[skip:]
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
    if scraper and scraper.ok == 0:
        fail(name, f"no scrape of /metrics succeeded ({scraper.failed} failed)", text)
    mpps = pkts / span / 1e6
    r = {
        "mpps": mpps,
        "cycles_per_packet": metrics.get('fastpath_lcore_cycles_per_packet{lcore="1"}'),
        "idle_ratio": metrics.get('fastpath_lcore_idle_poll_ratio{lcore="1"}'),
        "top_outcomes": sorted(
            ((k.split('"')[1], v / rx) for k, v in metrics.items()
             if k.startswith("fastpath_packets_total{") and v > 0),
            key=lambda kv: -kv[1])[:3],
        "figures": scenario_figures(sc, metrics, mpps),
    }
    if scraper:
        r["figures"]["scrapes"] = scraper.ok
        r["figures"]["scrape_ms"] = 1000 * scraper.seconds / scraper.ok
    if scraper and scraper.period:
        # Each stats line's rate covers the time since the previous line arrived; lines that
        # cover a toggle (or the warm-up) count for neither side.
        # Compared on what the service got (`delivered`), not on what was received: a worker
        # slowed by scrapes overflows its socket, and the RX lcore frees a refused packet faster
        # than it hands one over, so the receive rate alone would flatter scraping.
        matches = list(STATS_LINE.finditer(text))
        times = [err.arrived(m.end()) for m in matches]
        delivered = []
        for m in matches:
            line_end = text.find("\n", m.end())
            d = DELIVERED.search(text, m.end(), line_end if line_end >= 0 else len(text))
            delivered.append(float(d.group(1)) * {"M": 1e6, "k": 1e3, "": 1}[d.group(2)] if d else 0.0)
        side = {True: [0.0, 0.0, 0.0], False: [0.0, 0.0, 0.0]}
        for i in range(max(1, int(warmup)), len(lines)):
            if times[i - 1] is None or times[i] is None:
                continue
            on = scraper.on_at(times[i - 1], times[i])
            if on is not None:
                dt = lines[i][0] - lines[i - 1][0]
                side[on][0] += delivered[i] * dt
                side[on][1] += lines[i][1] * dt
                side[on][2] += dt
        if side[True][2] <= 0 or side[False][2] <= 0:
            fail(name, "no stats line fell entirely inside a scraped and an unscraped window", text)
        on_d, off_d = side[True][0] / side[True][2] / 1e6, side[False][0] / side[False][2] / 1e6
        r["mpps"] = side[True][1] / side[True][2] / 1e6
        r["figures"]["unscraped_mpps"] = side[False][1] / side[False][2] / 1e6
        r["figures"]["delivered_scraped_mpps"] = on_d
        r["figures"]["delivered_unscraped_mpps"] = off_d
        r["figures"]["scraped_seconds"] = side[True][2]
        r["figures"]["unscraped_seconds"] = side[False][2]
        if sc.get("compare") == "rx":
            on_rx, off_rx = r["mpps"], r["figures"]["unscraped_mpps"]
            r["figures"]["paired_ratio"] = on_rx / off_rx if off_rx > 0 else 0.0
            del r["figures"]["delivered_scraped_mpps"], r["figures"]["delivered_unscraped_mpps"]
        else:
            r["figures"]["paired_ratio"] = on_d / off_d if off_d > 0 else 0.0
    return r


def ip_frag_anchor_binary():
    return os.environ.get("IP_FRAG_ANCHOR") or os.path.join(REPO, "target", "release", "examples", "ip_frag_anchor")


ANCHOR_LINE = re.compile(r"^ip_frag_anchor: (.*)$", re.M)


def run_ip_frag_anchor(sc, prefix, warmup, seconds):
    """One run of the DPDK reassembly anchor: its own measured window (TSC on the RX lcore, after
    `warmup` s), counts over the whole run, as fastpathd's exit dump gives them."""
    name, binary = sc["name"], ip_frag_anchor_binary()
    if not os.path.exists(binary):
        sys.exit(f"macro_bench: {binary} missing: cargo build --release -p benches --example ip_frag_anchor")
    cmd = [binary, "--warmup", str(warmup), "--seconds", str(seconds), "--high-thresh-bytes", str(sc["high_thresh"]),
           "--mbufs", str(sc.get("mbufs", MBUFS)), "--mbuf-cache", str(MBUF_CACHE), "--desc", str(DESC),
           "--", "-l", "0,1", *eal_args(prefix, sc["capture"], 1, 1)]
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=warmup + seconds + 90, preexec_fn=child_affinity)
    except subprocess.TimeoutExpired as e:
        fail(name, "ip_frag_anchor did not finish", (e.stdout or b"").decode() + (e.stderr or b"").decode())
    finally:
        cleanup_prefix(prefix)
    text = p.stdout + p.stderr
    m = ANCHOR_LINE.search(p.stdout)
    if p.returncode != 0 or not m:
        fail(name, f"ip_frag_anchor exited with {p.returncode}", text)
    v = {k: float(x) for k, x in (kv.split("=", 1) for kv in m.group(1).split())}
    # What fastpathd's exit dump is checked for: every mbuf back, and counts that add up.
    if v["mbufs_in_use"] != 0 or not v["completed"] <= v["fragments"] <= v["rx"] or v["rx"] <= 0:
        fail(name, f"invariant broken: {m.group(1)}", text)
    # The figures as fastpathd's are computed (scenario_figures), from the anchor's counts.
    metrics = {'fastpath_rx_packets_total{port="net_pcap0"}': v["rx"],
               'fastpath_reasm_completed_total{family="all"}': v["completed"]}
    figures = scenario_figures(sc, metrics, v["mpps"])
    figures["table_dropped"] = v["dropped"] / v["rx"]
    return {"mpps": v["mpps"], "figures": figures, "table_entries": int(v["max_entries"])}


def anchor_report(results, scenarios):
    """Markdown lines putting each anchor beside its fastpathd scenario: legitimate datagrams
    reassembled (fastpathd's / DPDK's) and Mpps (per-round ratio, median)."""
    anchors = [sc for sc in scenarios if sc.get("anchor_of") and results.get(sc["name"])]
    pairs = [(fp["name"], an["name"]) for an in anchors for fp in scenarios
             if fp["name"] in results and results[fp["name"]] and fp.get("figures") == "frags"
             and fp["kind"].startswith("fastpathd") and fp["capture"] == an["capture"]
             and anchor_memory(fp) == an["high_thresh"]]
    if not pairs:
        return ""

    def med(name, key):
        vals = [r.get("figures", {}).get(key) for r in results[name]]
        vals = [x for x in vals if x is not None]
        return statistics.median(vals) if vals else None

    pct = lambda x: "–" if x is None else f"{x:.1%}"  # noqa: E731
    lines = ["", "DPDK's own reassembly beside fastpathd's (same capture, port, lcore and table memory, "
             "same run; medians over rounds; Mpps ratio: fastpathd / DPDK within each round, median):", "",
             "| fastpathd scenario | DPDK anchor | DPDK table entries | legit reassembled, fastpathd | legit "
             "reassembled, DPDK | legit ratio (fastpathd / DPDK) | Mpps fastpathd | Mpps DPDK | Mpps ratio |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for fp, an in pairs:
        lf, la = med(fp, "legit_reassembled"), med(an, "legit_reassembled")
        ratio = f"{lf / la:.2f}" if lf is not None and la else "–"
        mf = statistics.median(r["mpps"] for r in results[fp])
        ma = statistics.median(r["mpps"] for r in results[an])
        lines.append(f"| {fp} | {an} | {results[an][-1]['table_entries']} | {pct(lf)} | {pct(la)} | {ratio} "
                     f"| {mf:.2f} | {ma:.2f} | {fmt_ratio(per_round_ratio(results, fp, an))} |")
    return "\n".join(lines) + "\n"


def check_hugepages(scenarios):
    """Scenarios on hugepages need HUGE_MB of them free (ci/setup allocates and mounts 512 x 2 MiB)."""
    huge = [sc["name"] for sc in scenarios if sc.get("huge")]
    if huge and hugepages_free_mb() < HUGE_MB:
        sys.exit(f"macro_bench: {', '.join(huge)} run on hugepages and need {HUGE_MB} MiB free "
                 f"({hugepages_free_mb()} MiB free, or hugetlbfs not mounted): run ci/setup as root")


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


def round_ratios(results, a, b):
    """a's Mpps / b's Mpps in each round (drift between rounds cancels)."""
    if a not in results or b not in results:
        return []
    return [x["mpps"] / y["mpps"] for x, y in zip(results[a], results[b]) if y["mpps"] > 0]


def per_round_ratio(results, a, b):
    """Median over rounds of a's Mpps / b's Mpps in the same round."""
    rs = round_ratios(results, a, b)
    return statistics.median(rs) if rs else None


def median_interval(vals, level=0.90, resamples=10000):
    """Percentile bootstrap interval of the median of `vals` (seeded: the same rounds give the same
    interval). With a handful of rounds it is wide, which is the point: a goal whose interval
    straddles its threshold is not decided by this run, whatever side the median fell on."""
    if len(vals) < 2:
        return None
    rng = random.Random(6)
    meds = sorted(statistics.median(rng.choices(vals, k=len(vals))) for _ in range(resamples))
    lo = meds[int((1 - level) / 2 * resamples)]
    hi = meds[min(resamples - 1, int((1 + level) / 2 * resamples))]
    return lo, hi


def verdict(interval, median, least):
    """'yes' when the whole interval clears the threshold, 'no' when none of it does, otherwise
    'within noise' (with the side the median is on)."""
    if median is None:
        return "–"
    if interval is None:
        return "yes" if median >= least else "no"
    lo, hi = interval
    if lo >= least:
        return "yes"
    if hi < least:
        return "no"
    return "within noise (median " + ("above" if median >= least else "below") + ")"


def report(results, scenarios):
    ref = "testpmd-io"
    order = [sc["name"] for sc in scenarios]
    med = {n: statistics.median(r["mpps"] for r in results[n]) for n in order}
    rows = []
    for sc in scenarios:
        n = sc["name"]
        runs = results[n]
        mpps = [r["mpps"] for r in runs]
        ratio = med[n] / med[ref] if ref in med and med[ref] > 0 else None
        cpp = [r["cycles_per_packet"] for r in runs if r.get("cycles_per_packet")]
        figs = {}
        for k in sorted({k for r in runs for k in r.get("figures", {})}):
            vals = [r["figures"][k] for r in runs if r.get("figures", {}).get(k) is not None]
            if vals:
                figs[k] = statistics.median(vals)
        rows.append({
            "name": n, "median": med[n], "min": min(mpps), "max": max(mpps), "ratio": ratio,
            "round_ratio": per_round_ratio(results, n, ref), "cpp": statistics.median(cpp) if cpp else None,
            "runs": mpps, "what": sc["what"], "outcomes": runs[-1].get("top_outcomes"), "figures": figs,
        })
    goals = []
    for label, a, b, least in GOALS:
        if b.startswith("figure:") and a in results:
            # A ratio measured inside each run (paired): its median over rounds.
            vals = [r["figures"][b[7:]] for r in results[a] if r.get("figures", {}).get(b[7:]) is not None]
            r = statistics.median(vals) if vals else None
            ci = median_interval(vals)
            goals.append({"label": label, "ratio": r, "medians": None, "least": least,
                          "met": r is not None and r >= least, "rounds": vals, "interval": ci,
                          "verdict": verdict(ci, r, least)})
            continue
        if a in results and b in results:
            rs = round_ratios(results, a, b)
            r = statistics.median(rs) if rs else None
            ci = median_interval(rs)
            goals.append({"label": label, "ratio": r, "medians": med[a] / med[b] if med[b] > 0 else None,
                          "least": least, "met": r is not None and r >= least, "round_ratios": rs,
                          "interval": ci, "verdict": verdict(ci, r, least)})
    return rows, goals


def fmt_ratio(x):
    return "–" if x is None else f"{x:.2f}"


FIGURE_TEXT = {
    "normal_answered": ("normal flows answered", "{:.1%}"),
    "storm_answered": ("storm answered", "{:.1%}"),
    "clients_answered": ("legitimate clients answered", "{:.1%}"),
    "flood_answered": ("flood answered", "{:.1%}"),
    "source_limited": ("source_limited", "{:.1%} of rx"),
    "answered_mpps": ("answered", "{:.2f} Mpps"),
    "flow_limited": ("flow_limited", "{:.1%} of rx"),
    "legit_reassembled": ("legitimate datagrams reassembled", "{:.1%}"),
    "table_dropped": ("dropped by DPDK's table", "{:.1%} of rx"),
    "datagrams_mpps": ("datagrams completed", "{:.3f} M/s"),
    "encap_mpps": ("encapsulated", "{:.2f} Mpps"),
    "encap_share": ("encapsulated", "{:.1%} of rx"),
    "scrapes": ("scrapes", "{:.0f}"),
    "scrape_ms": ("mean scrape", "{:.2f} ms"),
    "unscraped_mpps": ("received unscraped", "{:.2f} Mpps"),
    "delivered_scraped_mpps": ("delivered scraped", "{:.2f} Mpps"),
    "delivered_unscraped_mpps": ("delivered unscraped", "{:.2f} Mpps"),
    "scraped_seconds": ("scraped for", "{:.0f} s"),
    "unscraped_seconds": ("unscraped for", "{:.0f} s"),
    "paired_ratio": ("paired ratio", "{:.3f}"),
}


# What the absolute rates are measured on, printed under every table of them (here and by
# benches/curves.py): line rates at 64-byte frames (84 bytes on the wire with preamble and
# inter-frame gap) and the published per-core anchors, so a reader can place ours.
LINK_NOTE = (
    "The link: none. net_pcap replays the capture from memory and net_null takes what is sent, so a rate is "
    "what one core does with no NIC, PCIe or wire in the way: what fastpathd costs, not what a link carries. "
    "For scale, 64-byte line rate is 14.88 Mpps at 10 GbE, 37.20 at 25 GbE, 59.52 at 40 GbE and 148.81 at "
    "100 GbE (larger frames: fewer); the published per-core anchors on a real NIC are ~43.5 Mpps for DPDK "
    "drop and ~24 Mpps for XDP drop on one core of a 3.6 GHz Xeon (The eXpress Data Path, CoNEXT 2018). "
    "testpmd io on this guest sits at the DPDK anchor, so read a row's × testpmd io as its share of such a core.")


def markdown(rows, goals, seconds, reps, warmup, started, capture_note, brief=False):
    """The report: the Mpps table and the goals, then (unless brief, the form benches/README.md
    keeps) each scenario's outcomes and figures, the captures and every round's Mpps."""
    lines = [
        f"Run of {started:%Y-%m-%d %H:%M} UTC on {machine()}: {reps} round(s) of every scenario in "
        f"alternation (every other round backwards), each run {warmup:g} s warm-up then {seconds:g} s measured. Mpps = packets per "
        "second received on port 0 (net_pcap, infinite_rx) and handled on lcore 1.",
        "",
        LINK_NOTE,
        "",
        "| scenario | Mpps median | min – max | × testpmd io (medians) | × testpmd io (per round, median) | cycles/packet |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        cpp = f"{r['cpp']:.0f}" if r["cpp"] else "–"
        lines.append(
            f"| {r['name']} | {r['median']:.2f} | {r['min']:.2f} – {r['max']:.2f} | {fmt_ratio(r['ratio'])} "
            f"| {fmt_ratio(r['round_ratio'])} | {cpp} |")
    if goals:
        lines += ["", "Goals (ratio of the two scenarios' Mpps within each round, median over rounds; the ratio "
                  "of the medians in brackets; the rounds' ratios; a 90% bootstrap interval of the median, and "
                  "whether the goal is met by the median and by the whole interval):", "",
                  "| goal | figure | rounds | 90% interval | met (median) | met (interval) |",
                  "| --- | ---: | --- | --- | --- | --- |"]
        for g in goals:
            brackets = fmt_ratio(g["medians"]) if "rounds" not in g else "paired in each run"
            rounds = ", ".join(f"{v:.3f}" for v in g.get("rounds", g.get("round_ratios", [])))
            ci = g.get("interval")
            ci_text = f"{ci[0]:.3f} – {ci[1]:.3f}" if ci else "–"
            lines.append(f"| {g['label']} | {fmt_ratio(g['ratio'])} ({brackets}) | {rounds} | {ci_text} "
                         f"| {'yes' if g['met'] else 'no'} | {g['verdict']} |")
    if brief:
        return "\n".join(lines) + "\n"
    lines += ["", "Scenarios (outcomes: shares of received packets over the whole run, last round; other figures: "
              "median over rounds, from the exit dump):", ""]
    for r in rows:
        extra = ""
        if r["outcomes"]:
            extra += " Outcomes: " + ", ".join(f"{k} {v:.1%}" for k, v in r["outcomes"]) + "."
        if r["figures"]:
            extra += " " + "; ".join(
                f"{FIGURE_TEXT.get(k, (k, '{}'))[0]} {FIGURE_TEXT.get(k, (k, '{}'))[1].format(v)}"
                for k, v in r["figures"].items()) + "."
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
    colors = ["#9e9e9e" if n.startswith("testpmd") else "#ff7f0e" if n.startswith(ANCHOR_PREFIX) else "#1f77b4"
              for n in names]
    fig, ax = plt.subplots(figsize=(max(9, 0.85 * len(rows) + 2), 5.4), dpi=100)
    bars = ax.bar(range(len(names)), med, yerr=[lo, hi], capsize=5, color=colors)
    ref = next((r["median"] for r in rows if r["name"] == "testpmd-io"), None)
    if ref:
        ax.axhline(ref, color="#d62728", linestyle="--", linewidth=1.2, label=f"testpmd io median ({ref:.2f} Mpps)")
        ax.legend(loc="upper right")
    for b, r in zip(bars, rows):
        label = f"{r['median']:.2f}" + (f"\n×{r['ratio']:.2f}" if r["ratio"] is not None else "")
        ax.text(b.get_x() + b.get_width() / 2, b.get_height() * 0.5, label, ha="center", va="center",
                color="white", fontsize=8, fontweight="bold")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([n.replace("fastpathd-", "") for n in names], rotation=30, ha="right", fontsize=9)
    ax.set_ylabel("Mpps received (median, min–max bars)")
    ax.set_title("fastpathd vs dpdk-testpmd, same machine, same EAL settings, one run")
    ax.set_ylim(0, max(r["max"] for r in rows) * 1.25)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main():
    seconds = env_num("BENCH_SECONDS", 6.0)
    reps = env_num("BENCH_REPS", 6, int)
    warmup = env_num("BENCH_WARMUP", 2, int)
    if seconds < 1 or reps < 1 or warmup < 1:
        sys.exit("macro_bench: BENCH_SECONDS, BENCH_REPS and BENCH_WARMUP must be at least 1")
    seconds = int(round(seconds))
    out_dir = os.path.abspath(os.environ.get("BENCH_OUT") or os.path.join(REPO, "benches"))
    wanted = [s for s in os.environ.get("BENCH_SCENARIOS", "").split(",") if s]
    scenarios = [sc for sc in SCENARIOS if not wanted or sc["name"] in wanted]
    unknown = set(wanted) - set(SCENARIO_NAMES)
    if unknown or not scenarios:
        sys.exit(f"macro_bench: unknown BENCH_SCENARIOS {sorted(unknown)}; known: {SCENARIO_NAMES}")
    if shutil.which(os.environ.get("TESTPMD", "dpdk-testpmd")) is None and any(
            sc["kind"].startswith("testpmd") for sc in scenarios):
        sys.exit("macro_bench: dpdk-testpmd not found (apt-get install dpdk; ci/setup does it)")
    for sc in scenarios:
        if not os.path.exists(sc["capture"]):
            sys.exit(f"macro_bench: {sc['capture']} is missing: run /usr/bin/python3 configs/captures/gen_*.py")
    check_hugepages(scenarios)

    # This script and its reader threads stay on CPU 0 (the main lcore's), so they never take
    # time from lcore 1, where the packets are handled; its children get every CPU back.
    if 0 in ALL_CPUS and len(ALL_CPUS) > 1:
        os.sched_setaffinity(0, {0})
    started = datetime.datetime.now(datetime.timezone.utc)
    results = {sc["name"]: [] for sc in scenarios}
    total = len(scenarios) * reps
    n = 0
    with tempfile.TemporaryDirectory(prefix="fastpath-bench-") as tmp:
        for rnd in range(reps):
            for sc in (scenarios if rnd % 2 == 0 else scenarios[::-1]):
                n += 1
                prefix = f"fpbench-{os.getpid()}-{n}"
                tool, mode = sc["kind"].split(":")
                if tool == "testpmd":
                    r = run_testpmd(sc["name"], mode, sc["capture"], prefix, warmup, seconds)
                elif tool == "anchor":
                    r = run_ip_frag_anchor(sc, prefix, warmup, seconds)
                else:
                    r = run_fastpathd(sc, prefix, warmup, seconds, tmp)
                results[sc["name"]].append(r)
                extra = f", {r['cycles_per_packet']:.0f} cycles/packet" if r.get("cycles_per_packet") else ""
                figs = "".join(f", {k} {v:.3g}" for k, v in r.get("figures", {}).items() if v is not None)
                print(f"[{n}/{total}] round {rnd + 1} {sc['name']}: {r['mpps']:.2f} Mpps{extra}{figs}", flush=True)

    rows, goals = report(results, scenarios)
    note = ("Captures (each from its generator `configs/captures/gen_<name>.py`): bench_udp.pcap (1024 UDP frames "
            "of 64 bytes from 1024 flows to 192.0.2.1:9), bench_storm.pcap (1600 storm + 80 normal frames to port 7), "
            "bench_frags.pcap (1024 never-completing first fragments + 64 legitimate 3-fragment datagrams), "
            "bench_udp6.pcap (bench_udp's flows over IPv6 to [2001:db8::1]:9, 66-byte frames), bench_tcp.pcap "
            "(1024 TCP SYNs of 60 bytes to 192.0.2.1:9), bench_tcp6.pcap (bench_tcp's flows over IPv6 to [2001:db8::1]:9, "
            "74-byte frames), bench_udp_many.pcap (4096 UDP frames of 64 bytes to "
            "192.0.2.1:9, each from its own source in 198.18.0.0/15). fastpathd: "
            "RX on lcore 1, the worker (services) on lcore 0, the EAL main lcore, with the control thread and "
            "this script. EAL: `-l 0,1 " + " ".join(eal_args("PREFIX", "CAPTURE")) + "`; burst 32, "
            f"{DESC} descriptors, {MBUFS} mbufs, cache {MBUF_CACHE}.")
    anchor_text = anchor_report(results, scenarios)
    table = markdown(rows, goals, seconds, reps, warmup, started, note) + anchor_text
    os.makedirs(out_dir, exist_ok=True)
    png_path = os.path.join(out_dir, "results.png")
    plot(rows, png_path)

    # Into benches/ the run goes to one place, the README's generated section (the brief form;
    # the full report is printed below); anywhere else it is results.md there, whole.
    readme = os.path.join(REPO, "benches", "README.md")
    if os.path.realpath(out_dir) == os.path.realpath(os.path.join(REPO, "benches")):
        md_path = readme
        with open(readme) as f:
            text = f.read()
        start, end = "<!-- results:start -->", "<!-- results:end -->"
        if start not in text or end not in text:
            sys.exit(f"macro_bench: {readme} has no {start} ... {end} section to write the results into")
        brief = markdown(rows, goals, seconds, reps, warmup, started, note, brief=True) + anchor_text
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        with open(readme, "w") as f:
            f.write(head + start + "\n" + brief + "\n![Mpps per scenario](results.png)\n" + end + tail)
    else:
        md_path = os.path.join(out_dir, "results.md")
        with open(md_path, "w") as f:
            f.write("# Macro benchmark results\n\nWritten by `ci/bench` (benches/macro_bench.py); "
                    "see benches/README.md.\n\n" + table + "\n![Mpps per scenario](results.png)\n")
    print()
    print(table)

    print()
    print(f"{'scenario':<36} {'Mpps':>7} {'min':>7} {'max':>7} {'x io':>6} {'x io/round':>10}")
    for r in rows:
        print(f"{r['name']:<36} {r['median']:7.2f} {r['min']:7.2f} {r['max']:7.2f} {fmt_ratio(r['ratio']):>6} "
              f"{fmt_ratio(r['round_ratio']):>10}")
    for g in goals:
        vals = g.get("rounds", g.get("round_ratios", []))
        rounds = f" (rounds: {', '.join(f'{v:.3f}' for v in vals)})" if vals else ""
        ci = g.get("interval")
        ci_text = f", 90% interval {ci[0]:.3f}-{ci[1]:.3f}" if ci else ""
        print(f"goal {g['label']}: {fmt_ratio(g['ratio'])}{rounds}{ci_text} -> "
              f"{'met' if g['met'] else 'MISSED'} by the median; by the interval: {g['verdict']}")
    print(anchor_text, end="")
    print(f"\nwrote {md_path} and {png_path}")


if __name__ == "__main__":
    main()
