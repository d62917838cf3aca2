#!/usr/bin/python3
"""Generates configs/captures/bench_udp.pcap, the capture ci/bench replays with infinite_rx=1.

Run from anywhere: /usr/bin/python3 configs/captures/gen_bench_udp.py  (needs Debian's python3-scapy).
The output is deterministic (fixed timestamps, fixed flow list), so regenerating it changes nothing.

1024 minimum-size UDP/IPv4 frames (60 bytes captured, 64 on the wire with the FCS) to the box
under test, 02:00:00:00:00:01 / 192.0.2.1 port 9, from 1024 flows: 256 source hosts in
198.51.100.0/24 (TEST-NET-2) times 4 source ports, interleaved so consecutive frames belong to
different flows (RSS and per-flow state see a spread, not one flow at a time).
"""
import os
import sys

import logging

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, UDP, Ether, Raw, wrpcap  # noqa: E402

ME_MAC = "02:00:00:00:00:01"
ME_IP = "192.0.2.1"
DPORT = 9  # discard
FRAMES = 1024
PAYLOAD = 18  # 14 Ethernet + 20 IPv4 + 8 UDP + 18 = 60 bytes, 64 with the FCS


def flows():
    """(frame index, source MAC, source host octet, source port) of the FRAMES frames: 256 hosts
    times 4 source ports, interleaved. Shared by the other bench_* captures of the same flows."""
    for i in range(FRAMES):
        host = i % 256
        yield i, f"02:00:00:00:02:{host:02x}", host, 40000 + (i // 256) * 1031


def write(name, pkts, size):
    """Writes `pkts` (every one `size` bytes) with fixed timestamps to argv[1] or to `name` next
    to this script."""
    assert all(len(p) == size for p in pkts), f"every frame is {size} bytes"
    for i, p in enumerate(pkts):
        p.time = 1_700_000_000 + i / 1_000_000
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, name)
    wrpcap(path, pkts, linktype=1)
    print(f"wrote {path}")


def packets():
    return [
        Ether(dst=ME_MAC, src=mac)
        / IP(src=f"198.51.100.{host}", dst=ME_IP, id=i, ttl=64)
        / UDP(sport=sport, dport=DPORT)
        / Raw(bytes([i & 0xFF]) * PAYLOAD)
        for i, mac, host, sport in flows()
    ]


if __name__ == "__main__":
    write("bench_udp.pcap", packets(), 60)  # 64 on the wire with the FCS
