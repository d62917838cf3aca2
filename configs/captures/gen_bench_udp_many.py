#!/usr/bin/python3
"""Generates configs/captures/bench_udp_many.pcap: seed 000's flood, sources spread wide.

Run from anywhere: /usr/bin/python3 configs/captures/gen_bench_udp_many.py  (needs Debian's python3-scapy).
Deterministic (fixed timestamps, a fixed generator seed), so regenerating it changes nothing.

4096 minimum-size UDP/IPv4 frames (as bench_udp's: 60 bytes captured, 64 on the wire) to
02:00:00:00:00:01 / 192.0.2.1 port 9, each from a source host of its own drawn from
198.18.0.0/15 (RFC 2544's benchmarking range), as the kernel's pktgen_sample04_many_flows.sh
draws them in the experiment seed 000 reports. bench_udp's 256 sources ask for 256 errors a
second once their bursts are spent, which the global budget (1000 a second) covers: there the
per-destination limit is the one that holds the flood back. 4096 sources ask for more than the
global budget, so the global limit is the one saturated, the seed's case.
"""
import logging
import random

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, UDP, Ether, Raw  # noqa: E402

from gen_bench_udp import DPORT, ME_IP, ME_MAC, PAYLOAD, write  # noqa: E402  (this script's directory)

FRAMES = 4096


def sources():
    """FRAMES distinct (source address, source port) pairs in 198.18.0.0/15, in a fixed order."""
    rng = random.Random(20161108)
    hosts = rng.sample(range(1, 1 << 17), FRAMES)  # 198.18.0.1 .. 198.19.255.255
    return [(f"198.{18 + (h >> 16)}.{(h >> 8) & 0xFF}.{h & 0xFF}", rng.randrange(1024, 65536)) for h in hosts]


def packets():
    return [
        Ether(dst=ME_MAC, src=f"02:00:00:01:{(i >> 8) & 0xFF:02x}:{i & 0xFF:02x}")
        / IP(src=src, dst=ME_IP, id=i, ttl=64)
        / UDP(sport=sport, dport=DPORT)
        / Raw(bytes([i & 0xFF]) * PAYLOAD)
        for i, (src, sport) in enumerate(sources())
    ]


if __name__ == "__main__":
    write("bench_udp_many.pcap", packets(), 60)  # 64 on the wire with the FCS
