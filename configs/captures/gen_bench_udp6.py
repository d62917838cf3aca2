#!/usr/bin/python3
"""Generates configs/captures/bench_udp6.pcap: bench_udp's flood over IPv6.

Run from anywhere: /usr/bin/python3 configs/captures/gen_bench_udp6.py  (needs Debian's python3-scapy).
Deterministic (fixed timestamps, fixed flow list), so regenerating it changes nothing.

1024 UDP/IPv6 frames of 66 bytes (14 Ethernet + 40 IPv6 + 8 UDP + 4), 70 on the wire with the
FCS, to 02:00:00:00:00:01 / 2001:db8::1 port 9, from 1024 flows: 256 source hosts in
2001:db8:1::/64 (documentation prefix) times 4 source ports, interleaved as in bench_udp.
"""
import os
import sys

import logging

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import UDP, Ether, IPv6, Raw, wrpcap  # noqa: E402

ME_MAC = "02:00:00:00:00:01"
ME_IP = "2001:db8::1"
DPORT = 9  # discard
FRAMES = 1024
PAYLOAD = 4


def packets():
    out = []
    for i in range(FRAMES):
        host = i % 256
        sport = 40000 + (i // 256) * 1031
        mac = f"02:00:00:00:02:{host:02x}"
        p = (
            Ether(dst=ME_MAC, src=mac)
            / IPv6(src=f"2001:db8:1::{host + 1:x}", dst=ME_IP, hlim=64)
            / UDP(sport=sport, dport=DPORT)
            / Raw(bytes([i & 0xFF]) * PAYLOAD)
        )
        p.time = 1_700_000_000 + i / 1_000_000
        out.append(p)
    return out


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "bench_udp6.pcap")
    pkts = packets()
    assert all(len(p) == 66 for p in pkts), "every frame is 66 bytes (70 with FCS)"
    wrpcap(path, pkts, linktype=1)
    print(f"wrote {path}")
