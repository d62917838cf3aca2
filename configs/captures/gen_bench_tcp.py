#!/usr/bin/python3
"""Generates configs/captures/bench_tcp.pcap: a SYN flood to a port with no service.

Run from anywhere: /usr/bin/python3 configs/captures/gen_bench_tcp.py  (needs Debian's python3-scapy).
Deterministic (fixed timestamps, fixed flow list), so regenerating it changes nothing.

1024 TCP/IPv4 SYNs of 60 bytes (14 Ethernet + 20 IPv4 + 20 TCP + 6 of Ethernet padding), 64 on
the wire with the FCS, to 02:00:00:00:00:01 / 192.0.2.1 port 9, from 1024 flows: 256 source
hosts in 198.51.100.0/24 (TEST-NET-2) times 4 source ports, interleaved as in bench_udp.
"""
import os
import sys

import logging

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, TCP, Ether, Padding, wrpcap  # noqa: E402

ME_MAC = "02:00:00:00:00:01"
ME_IP = "192.0.2.1"
DPORT = 9
FRAMES = 1024


def packets():
    out = []
    for i in range(FRAMES):
        host = i % 256
        sport = 40000 + (i // 256) * 1031
        mac = f"02:00:00:00:02:{host:02x}"
        p = (
            Ether(dst=ME_MAC, src=mac)
            / IP(src=f"198.51.100.{host}", dst=ME_IP, id=i, ttl=64)
            / TCP(sport=sport, dport=DPORT, flags="S", seq=1_000_000 + i, window=64240)
            / Padding(load=b"\x00" * 6)
        )
        p.time = 1_700_000_000 + i / 1_000_000
        out.append(p)
    return out


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "bench_tcp.pcap")
    pkts = packets()
    assert all(len(p) == 60 for p in pkts), "every frame is 60 bytes (64 with FCS)"
    wrpcap(path, pkts, linktype=1)
    print(f"wrote {path}")
