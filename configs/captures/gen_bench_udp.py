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


def packets():
    out = []
    for i in range(FRAMES):
        host = i % 256
        sport = 40000 + (i // 256) * 1031
        mac = f"02:00:00:00:02:{host:02x}"
        p = (
            Ether(dst=ME_MAC, src=mac)
            / IP(src=f"198.51.100.{host}", dst=ME_IP, id=i, ttl=64)
            / UDP(sport=sport, dport=DPORT)
            / Raw(bytes([i & 0xFF]) * PAYLOAD)
        )
        p.time = 1_700_000_000 + i / 1_000_000
        out.append(p)
    return out


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "bench_udp.pcap")
    pkts = packets()
    assert all(len(p) == 60 for p in pkts), "every frame is 60 bytes (64 with FCS)"
    wrpcap(path, pkts, linktype=1)
    print(f"wrote {path}")
