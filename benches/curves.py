#!/usr/bin/python3
"""Cost curves: fastpathd's receive rate on the open port (a `sink`) and on a
closed port (ICMP limiter saturated) against the number of distinct flows (1K, 64K, 1M), of
distinct sources (closed port: 1K, 64K, 1M), of services or ports (1, 100, 1000), the frame
size (64, 512, 1500 bytes), and established TCP flows (1K, 64K, 1M) through a `tunnel` service with
and without its connection table (that axis measures the worker's encapsulated Mpps), with dpdk-testpmd io on the same captures as the reference where the
capture itself changes (flows, frame size): net_pcap replays a capture from mbufs it holds, so a
1M-frame capture is 2.4 GB of packet memory read once per loop, and testpmd pays for that too.

Same EAL settings, lcores and vdevs as ci/bench (benches/macro_bench.py); the captures are made
here, in a temporary directory (a 1M-frame capture is 76 MB: not committed), by a deterministic
writer. Each point is run BENCH_REPS times (default 3), in alternating order; a goal is the
median of per-round ratios (each round's point over the same round's smallest point), as
macro_bench computes its goals, with a 90% interval.

Writes curves.png into BENCH_OUT (default benches/) and the report into the section between
`<!-- curves:start -->` and `<!-- curves:end -->` of benches/README.md when BENCH_OUT is
benches/, into curves.md there otherwise.

Environment: as macro_bench (BENCH_SECONDS default 4, BENCH_REPS default 3, BENCH_WARMUP, BENCH_OUT,
FASTPATHD, TESTPMD), CURVES_SMOKE=1 (ci/test: the 1K and 64K flow points and 1 and 100
services of the open port, with and without `free_on_rx`, and 1K tracked flows, only) and CURVES_AXES (comma-separated
axes to run: flows, sources, services, frame, tracked; all by default).
"""
import datetime
import os
import re
import statistics
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import macro_bench as mb  # noqa: E402

ME_MAC = bytes.fromhex("020000000001")
PEER_MAC = bytes.fromhex("020000000101")
ME = bytes([192, 0, 2, 1])
K = 1024
FLOWS = [K, 64 * K, K * K]
SOURCES = [K, 64 * K, K * K]
SERVICES = [1, 100, 1000]
FRAMES = [64, 512, 1500]
TRACKED = [K, 64 * K, K * K]
# A pool that holds the whole capture (net_pcap's infinite_rx keeps it in mbufs) plus the
# benchmark's usual 16383; EAL memory for it at 4 KB per mbuf (2.5 did not fit the 1M pool).
MBUF_KB = 4


def ip_checksum(h):
    s = sum(struct.unpack("!10H", h))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def udp_frame(src, sport, dport, size):
    """An Ethernet/IPv4/UDP frame of `size` bytes on the wire (FCS not captured), to 192.0.2.1."""
    captured = size - 4
    ip_len = captured - 14
    h = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, ip_len, 0, 0, 64, 17, 0, src, ME))
    h[10:12] = struct.pack("!H", ip_checksum(bytes(h)))
    udp = struct.pack("!HHHH", sport, dport, ip_len - 20, 0)  # checksum 0: none (RFC 768)
    return ME_MAC + PEER_MAC + b"\x08\x00" + bytes(h) + udp + bytes(ip_len - 28)


def write_pcap(path, frames):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, fr in enumerate(frames):
            f.write(struct.pack("<IIII", 1_700_000_000 + i // 1_000_000, i % 1_000_000, len(fr), len(fr)))
            f.write(fr)


def host(i):
    """Source address i in 198.16.0.0/12 (1M addresses; 198.18.0.0/15 is the benchmarking range
    RFC 2544 reserves, bench_udp_many's, inside it)."""
    return struct.pack("!I", (198 << 24 | 16 << 16) + i)


def tcp_ack(src, sport, dport):
    """A minimum-size Ethernet/IPv4/TCP ACK (60 bytes captured) to 192.0.2.1, checksums right."""
    tcp = bytearray(struct.pack("!HHIIBBHHH", sport, dport, 1, 1, 0x50, 0x10, 65535, 0, 0))
    pseudo = src + ME + struct.pack("!BBH", 0, 6, len(tcp)) + bytes(tcp)
    c = sum(struct.unpack("!%dH" % (len(pseudo) // 2), pseudo))
    while c >> 16:
        c = (c & 0xFFFF) + (c >> 16)
    tcp[16:18] = struct.pack("!H", ~c & 0xFFFF)
    h = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40, 0, 0x4000, 64, 6, 0, src, ME))
    h[10:12] = struct.pack("!H", ip_checksum(bytes(h)))
    return ME_MAC + PEER_MAC + b"\x08\x00" + bytes(h) + bytes(tcp) + bytes(6)


def capture_frames(kind, n, size=64):
    """Frames of one capture: `flows` n flows from 256 hosts (source ports 1024..) to port 9;
    `sources` n frames each from its own source to port 9; `ports` 1024 flows over n ports
    10000.. (services, or closed ports); `tcp` n established TCP flows (ACKs) from 256 hosts to
    port 80, one frame each."""
    if kind == "tcp":
        return (tcp_ack(host(k % 256), 1024 + k // 256, 80) for k in range(n))
    if kind == "flows":
        return (udp_frame(host(k % 256), 1024 + k // 256, 9, size) for k in range(n))
    if kind == "sources":
        return (udp_frame(host(k), 1024, 9, size) for k in range(n))
    if kind == "ports":
        return (udp_frame(host(k % 256), 1024 + k // 256, 10000 + k % n, size) for k in range(K))
    raise ValueError(kind)


def services(n, ports_from, capacity, free_on_rx=False):
    extra = "free_on_rx = true\n" if free_on_rx else ""
    return "".join(
        f'\n[[service]]\nname = "s{i}"\nprotocol = "udp"\nports = [{ports_from + i}]\nsockets = 1\n'
        f'socket_capacity = {capacity}\naction = "sink"\n{extra}' for i in range(n))


SINK = mb.SINK
CLOSED = mb.ICMP_DEFAULTS


def points(smoke):
    """(axis, x, what, run key) per point, and the runs {key: run} they need."""
    pts, runs = [], {}

    def run(key, **r):
        runs.setdefault(key, r)
        return key

    for n in FLOWS[:2] if smoke else FLOWS:
        cap = ("flows", n, 64)
        pts.append(("flows", n, "open-sink", run(("open", cap), capture=cap, extra=SINK)))
        if not smoke:
            pts.append(("flows", n, "closed-port", run(("closed", cap), capture=cap, extra=CLOSED)))
            pts.append(("flows", n, "testpmd-io", run(("testpmd", cap), capture=cap)))
    if not smoke:
        for n in SOURCES:
            cap = ("sources", n, 64)
            pts.append(("sources", n, "closed-port", run(("closed", cap), capture=cap, extra=CLOSED)))
            pts.append(("sources", n, "testpmd-io", run(("testpmd", cap), capture=cap)))
    for n in SERVICES[:2] if smoke else SERVICES:
        cap = ("ports", n, 64)
        # 64-packet sockets: 1000 services of 1024 would pass the mbuf budget.
        pts.append(("services", n, "open-sink", run(("open", cap), capture=cap, extra=services(n, 10000, 64))))
        if not smoke:
            pts.append(("services", n, "closed-port",
                        run(("closed", cap), capture=cap, extra=CLOSED + services(n, 20000, 64))))
        # The same sinks with the benchmark-only `free_on_rx`: the RX lcore frees what it would
        # enqueue, so this point's fall is the per-socket state's alone and open-sink's fall
        # beyond it is the sockets' rings (README: "What the curves say").
        pts.append(("services", n, "open-sink-free-on-rx",
                    run(("open-free", cap), capture=cap, extra=services(n, 10000, 64, free_on_rx=True))))
    # A TCP tunnel service over 3 backends (macro_bench's GRE_TCP), with a table of 4 x the flows
    # and without one: mid-stream flows confirm a second after their first packet, within the
    # warm-up, so the tracked points measure hits of confirmed entries.
    for n in TRACKED[:1] if smoke else TRACKED:
        cap = ("tcp", n, 64)
        pts.append(("tracked", n, "gre-tracked", run(("tracked", cap), capture=cap, encap=True,
                                                    extra=mb.GRE_TCP.format(entries=max(1024, 4 * n)))))
        pts.append(("tracked", n, "gre-untracked", run(("untracked", cap), capture=cap, encap=True,
                                                      extra=mb.GRE_TCP.format(entries=0))))
    if not smoke:
        for s in FRAMES:
            cap = ("flows", K, s)
            pts.append(("frame", s, "open-sink", run(("open", cap), capture=cap, extra=SINK)))
            pts.append(("frame", s, "closed-port", run(("closed", cap), capture=cap, extra=CLOSED)))
            pts.append(("frame", s, "testpmd-io", run(("testpmd", cap), capture=cap)))
    return pts, runs


def frames_of(cap):
    kind, n, _ = cap
    return K if kind == "ports" else n


def pool(cap, extra=""):
    """Mbufs and EAL memory (MiB) for a run: the capture, the usual pool, and the services'
    rings (the config's mbuf budget counts every socket's capacity)."""
    rings = sum(int(c) for c in re.findall(r"^socket_capacity = (\d+)", extra, re.M))
    mbufs = frames_of(cap) + mb.MBUFS + rings
    return mbufs, max(1024, int(1024 + mbufs * MBUF_KB / 1024))


def run_point(key, r, path, prefix, warmup, seconds, tmp):
    tool = key[0]
    mbufs, memory = pool(r["capture"], r.get("extra", ""))
    if tool == "testpmd":
        return mb.run_testpmd(f"curve-{prefix}", "io", path, prefix, warmup, seconds, mbufs=mbufs, memory_mb=memory)
    sc = dict(name=f"curve-{tool}-{r['capture'][0]}-{r['capture'][1]}-{r['capture'][2]}", kind="fastpathd:pipeline",
              capture=path, extra=r["extra"], mbufs=mbufs, memory_mb=memory, what="",
              figures="conntrack" if r.get("encap") else None)
    got = mb.run_fastpathd(sc, prefix, warmup, seconds, tmp)
    if r.get("encap"):
        # The worker's rate: packets encapsulated (the RX lcore's rate is not the table's).
        got = dict(got, mpps=got["figures"]["encap_mpps"])
    return got


def label(axis, x):
    if axis == "frame":
        return f"{x} B"
    return f"{x // (K * K)}M" if x >= K * K else f"{x // K}K" if x >= K else str(x)


def main():
    smoke = os.environ.get("CURVES_SMOKE") == "1"
    seconds = int(mb.env_num("BENCH_SECONDS", 4.0))
    reps = mb.env_num("BENCH_REPS", 3, int)
    warmup = mb.env_num("BENCH_WARMUP", 2, int)
    out_dir = os.path.abspath(os.environ.get("BENCH_OUT") or os.path.join(mb.REPO, "benches"))
    pts, runs = points(smoke)
    only = [a for a in os.environ.get("CURVES_AXES", "").split(",") if a]
    if only:
        pts = [p for p in pts if p[0] in only]
        runs = {k: r for k, r in runs.items() if any(p[3] == k for p in pts)}
    keys = list(runs)
    if 0 in mb.ALL_CPUS and len(mb.ALL_CPUS) > 1:
        os.sched_setaffinity(0, {0})
    started = datetime.datetime.now(datetime.timezone.utc)
    results = {k: [] for k in keys}
    with tempfile.TemporaryDirectory(prefix="fastpath-curves-") as tmp:
        paths = {}
        for cap in sorted({runs[k]["capture"] for k in keys}):
            paths[cap] = os.path.join(tmp, "curve-{}-{}-{}.pcap".format(*cap))
            write_pcap(paths[cap], capture_frames(*cap))
        n = 0
        for rnd in range(reps):
            for k in (keys if rnd % 2 == 0 else keys[::-1]):
                n += 1
                r = run_point(k, runs[k], paths[runs[k]["capture"]], f"fpcurve-{os.getpid()}-{n}", warmup,
                              seconds, tmp)
                results[k].append(r["mpps"])
                print(f"[{n}/{len(keys) * reps}] round {rnd + 1} {k[0]} {'-'.join(map(str, k[1]))}: "
                      f"{r['mpps']:.2f} Mpps", flush=True)
    rows, goals = report(pts, results)
    md = markdown(rows, goals, seconds, reps, warmup, started)
    os.makedirs(out_dir, exist_ok=True)
    plot(rows, os.path.join(out_dir, "curves.png"))
    # Into benches/ the curves go to one place, the README's generated section; anywhere else
    # curves.md there.
    readme = os.path.join(mb.REPO, "benches", "README.md")
    if os.path.realpath(out_dir) == os.path.realpath(os.path.join(mb.REPO, "benches")):
        with open(readme) as f:
            text = f.read()
        start, end = "<!-- curves:start -->", "<!-- curves:end -->"
        if start not in text or end not in text:
            sys.exit(f"curves: {readme} has no {start} ... {end} section to write the curves into")
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        with open(readme, "w") as f:
            f.write(head + start + "\n" + md + "\n![cost curves](curves.png)\n" + end + tail)
    else:
        with open(os.path.join(out_dir, "curves.md"), "w") as f:
            f.write("# Cost curves\n\nWritten by `ci/bench` (benches/curves.py); see benches/README.md.\n\n" + md
                    + "\n![Mpps against flows, sources, services and frame size](curves.png)\n")
    print(md)


def report(pts, results):
    """Rows (axis, x, what, median Mpps, per-round ratio to the axis's smallest point of the same
    what) and goals (the largest point of flows, sources and services at ≥ 0.85 of the smallest)."""
    rows = []
    for axis, x, what, key in pts:
        first = next(k for a, _, w, k in pts if a == axis and w == what)
        rs = [a / b for a, b in zip(results[key], results[first]) if b > 0]
        rows.append(dict(axis=axis, x=x, what=what, median=statistics.median(results[key]),
                         ratio=statistics.median(rs) if rs else None, interval=mb.median_interval(rs), runs=results[key]))
    goals = []
    for axis in ("flows", "sources", "services"):
        for what in ("open-sink", "closed-port"):
            sel = [r for r in rows if r["axis"] == axis and r["what"] == what]
            if len(sel) > 1:
                last = sel[-1]
                tp = [r for r in rows if r["axis"] == axis and r["what"] == "testpmd-io"]
                # The point's fall beyond the reference's on the same captures, round by round:
                # (ours at the point / ours at the first) / (testpmd's likewise).
                own = None
                if tp:
                    rs = [(a / b) / (c / d) for a, b, c, d in zip(last["runs"], sel[0]["runs"], tp[-1]["runs"], tp[0]["runs"])
                          if b > 0 and c > 0 and d > 0]
                    own = statistics.median(rs) if rs else None
                # The same point without the sockets' rings, where measured.
                bare = [r for r in rows if r["axis"] == axis and r["what"] == what + "-free-on-rx"]
                goals.append(dict(label=f"{what}, {label(axis, last['x'])} {axis} ≥ 0.85 × {label(axis, sel[0]['x'])}",
                                  ratio=last["ratio"], interval=last["interval"],
                                  verdict=mb.verdict(last["interval"], last["ratio"], 0.85),
                                  testpmd=tp[-1]["ratio"] if tp else None, own=own,
                                  bare=bare[-1]["ratio"] if bare else None))
    return rows, goals


def markdown(rows, goals, seconds, reps, warmup, started):
    out = [f"{started:%Y-%m-%d %H:%M} UTC, {mb.machine()}; {reps} rounds × {seconds} s (after {warmup} s), "
           "medians; ratio = the median of per-round ratios to the same round's first point of the axis.", "",
           mb.LINK_NOTE, "",
           "| axis | point | scenario | Mpps | min – max | × first point | 90% interval |",
           "| --- | ---: | --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        ci = r["interval"]
        out.append(f"| {r['axis']} | {label(r['axis'], r['x'])} | {r['what']} | {r['median']:.2f} | "
                   f"{min(r['runs']):.2f} – {max(r['runs']):.2f} | {mb.fmt_ratio(r['ratio'])} | "
                   f"{'–' if not ci else f'{ci[0]:.2f} – {ci[1]:.2f}'} |")
    out += ["", "| goal | ratio | 90% interval | met (interval) | testpmd io, same axis | ours over testpmd's, per round "
            "| without the rings (`free_on_rx`) |",
            "| --- | ---: | ---: | --- | ---: | ---: | ---: |"]
    for g in goals:
        ci = g["interval"]
        out.append(f"| {g['label']} | {mb.fmt_ratio(g['ratio'])} | {'–' if not ci else f'{ci[0]:.2f} – {ci[1]:.2f}'} "
                   f"| {g['verdict']} | {mb.fmt_ratio(g['testpmd'])} | {mb.fmt_ratio(g.get('own'))} "
                   f"| {mb.fmt_ratio(g.get('bare'))} |")
    out += ["", "The column \"ours over testpmd's\" is the point's fall beyond the reference's: where testpmd io falls as much on the "
            "same captures, the cost is the capture's replay (net_pcap reading that many frames' packet memory), "
            "not fastpathd's. open-sink-free-on-rx is open-sink with the RX lcore freeing what it would enqueue "
            "(the benchmark-only `free_on_rx`): where open-sink falls further than it, the rest is the sockets' "
            "rings, not the pipeline."]
    return "\n".join(out) + "\n"


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    axes = [a for a in ("flows", "sources", "services", "frame", "tracked") if any(r["axis"] == a for r in rows)]
    fig, ax = plt.subplots(1, len(axes), figsize=(4.2 * len(axes), 4), dpi=100, squeeze=False)
    for i, a in enumerate(axes):
        sel = [r for r in rows if r["axis"] == a]
        for what, color, style in (("open-sink", "#1f77b4", "o-"), ("closed-port", "#2ca02c", "o-"),
                                   ("testpmd-io", "#9e9e9e", "o-"), ("open-sink-free-on-rx", "#1f77b4", "o--"),
                                   ("gre-tracked", "#d62728", "o-"), ("gre-untracked", "#d62728", "o--")):
            pts = [r for r in sel if r["what"] == what]
            if pts:
                ax[0][i].plot([label(a, r["x"]) for r in pts], [r["median"] for r in pts], style, color=color,
                              label=what)
        ax[0][i].set_title(a)
        ax[0][i].set_ylim(bottom=0)
        ax[0][i].set_ylabel("Mpps encapsulated (median)" if a == "tracked" else "Mpps received (median)")
        ax[0][i].legend(fontsize=8)
    fig.suptitle("fastpathd's rate against scale (benches/curves.py)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    main()
