#!/usr/bin/python3
"""net_af_xdp against net_af_packet on the same veth, side by side in one run.

fastpathd (release build, one RX lcore on CPU 0, busy polling, on hugepages for both) owns
one end of a veth in a namespace of its own; in a second namespace dpdk-testpmd `txonly`
floods 64-byte UDP datagrams to fastpathd's address at a closed port from the other end
(net_af_packet, on CPU 1). The figure is fastpath_rx_packets_total per second over
BENCH_SECONDS (default 5) after BENCH_WARMUP (default 2); the two port types alternate for
BENCH_REPS rounds (default 3), and each round's af_xdp / af_packet ratio is printed.

    benches/af_xdp.py
    BENCH_SECONDS=1 BENCH_REPS=1 BENCH_WARMUP=1 benches/af_xdp.py   # smoke
"""
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ID = os.getpid() % 100000
HOST, CLIENT = f"fpxb{ID}h", f"fpxb{ID}c"
PORT, PEER = f"fxb{ID}", f"fxbc{ID}"


def env_num(name, default):
    v = os.environ.get(name, "")
    return float(v) if v else default


def sh(*cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"af_xdp: {' '.join(cmd)}: {r.stderr.strip()}")
    return r.stdout


def setup():
    sh("ip", "netns", "add", HOST)
    sh("ip", "netns", "add", CLIENT)
    sh("ip", "link", "add", PORT, "type", "veth", "peer", "name", PEER)
    sh("ip", "link", "set", PORT, "netns", HOST)
    sh("ip", "link", "set", PEER, "netns", CLIENT)
    for ns, dev in ((HOST, PORT), (CLIENT, PEER)):
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "link", "set", dev, "up")
        sh("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1")
    sh("ip", "netns", "exec", CLIENT, "ethtool", "-K", PEER, "tx", "off")


def teardown():
    for ns in (HOST, CLIENT):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    # The EAL runtime directories of this run's prefixes (testpmd leaves its own).
    for d in glob.glob(f"/var/run/dpdk/fpxb{ID}*"):
        shutil.rmtree(d, ignore_errors=True)


def mac_of():
    return sh("ip", "-n", HOST, "-br", "link", "show", "dev", PORT).split()[2]


def fastpathd(kind, tmp):
    vdev = f"net_{kind}0,iface={PORT}"
    cfg = os.path.join(tmp, f"{kind}.toml")
    with open(cfg, "w") as f:
        f.write(
            f'[dpdk]\neal_args = ["--no-pci", "--file-prefix=fpxb{ID}{kind}", "--no-telemetry", '
            f'"--vdev={vdev}"]\nmbufs = 16383\n\n[[port]]\ndevice = "net_{kind}0"\nrx_queues = 1\n'
            'tx_queues = 1\nipv4 = ["192.0.2.1/24"]\n\n[lcores]\nrx = [0]\nidle_sleep_us = 0\n'
            f'\n[control]\nsocket = "{tmp}/{kind}.sock"\n\n[metrics]\nlisten = "127.0.0.1:9464"\ncache_ms = 0\n'
        )
    binary = os.path.join(REPO, "target", "release", "fastpathd")
    log = open(os.path.join(tmp, f"{kind}.log"), "w")
    p = subprocess.Popen(["ip", "netns", "exec", HOST, binary, "--config", cfg], stderr=log, stdout=log)
    deadline = time.time() + 20
    while "fastpathd: running" not in open(log.name).read():
        if p.poll() is not None or time.time() > deadline:
            sys.exit(f"af_xdp: fastpathd ({kind}) did not start:\n{open(log.name).read()}")
        time.sleep(0.05)
    return p


def rx_total():
    out = sh("ip", "netns", "exec", HOST, "/usr/bin/python3", "-c",
             "import urllib.request,sys;sys.stdout.write(urllib.request.urlopen("
             "'http://127.0.0.1:9464/metrics',timeout=5).read().decode())")
    return sum(float(l.split()[-1]) for l in out.splitlines() if l.startswith("fastpath_rx_packets_total{"))


def flood(tmp, mac):
    cmd = ["ip", "netns", "exec", CLIENT, "dpdk-testpmd", "--lcores=0@1,1@1", "--no-huge", "-m", "256",
           "--no-pci", "--no-shconf", f"--file-prefix=fpxb{ID}tx", "--no-telemetry", f"--vdev=net_af_packet0,iface={PEER}",
           "--", "--forward-mode=txonly", f"--eth-peer=0,{mac}", "--tx-ip=192.0.2.2,192.0.2.1",
           "--txpkts=64", "--total-num-mbufs=8192"]
    log = open(os.path.join(tmp, "testpmd.log"), "w")
    # Without -i testpmd runs until a line (or EOF) arrives on stdin: keep stdin open.
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=log, stderr=log)


def stop(p):
    if p.stdin:
        try:
            p.stdin.close()
        except OSError:
            pass
    p.terminate()
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def main():
    seconds, reps, warmup = env_num("BENCH_SECONDS", 5), int(env_num("BENCH_REPS", 3)), env_num("BENCH_WARMUP", 2)
    setup()
    try:
        mac = mac_of()
        rates = {"af_xdp": [], "af_packet": []}
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(reps):
                for kind in ("af_xdp", "af_packet"):
                    d = fastpathd(kind, tmp)
                    tx = flood(tmp, mac)
                    try:
                        time.sleep(warmup)
                        a, t0 = rx_total(), time.time()
                        time.sleep(seconds)
                        b, t1 = rx_total(), time.time()
                        sender_died = tx.poll() is not None
                    finally:
                        stop(tx)
                        stop(d)
                    if sender_died or b <= a:
                        sys.exit(f"af_xdp: nothing received ({kind}); the sender's log:\n"
                                 + open(os.path.join(tmp, "testpmd.log")).read())
                    rates[kind].append((b - a) / (t1 - t0))
                    print(f"round {r + 1} {kind}: {rates[kind][-1] / 1e6:.3f} Mpps", flush=True)
        ratios = [x / p for x, p in zip(rates["af_xdp"], rates["af_packet"])]
        print("af_xdp / af_packet per round: " + ", ".join(f"{x:.2f}" for x in ratios))
        print(f"median: af_xdp {statistics.median(rates['af_xdp']) / 1e6:.3f} Mpps, af_packet "
              f"{statistics.median(rates['af_packet']) / 1e6:.3f} Mpps, ratio {statistics.median(ratios):.2f}")
    finally:
        teardown()


if __name__ == "__main__":
    main()
