#!/usr/bin/python3
"""Generates configs/captures/storm.pcap: seed 003's experiment in small (see
control/tests/services.rs). 20 normal UDP flows (20 datagrams each) to an echo service on
192.0.2.1:7, interleaved with a single-flow storm of 8000 datagrams to the same service from
203.0.113.66:6666 — one normal datagram every 20 storm datagrams. Deterministic output.
"""
import os
import sys

from scapy.all import IP, UDP, Ether, Raw, wrpcap

ME_MAC = "02:00:00:00:00:01"
PEER_MAC = "02:00:00:00:01:01"


def dgram(src, sport, tag):
    return (Ether(dst=ME_MAC, src=PEER_MAC) / IP(src=src, dst="192.0.2.1")
            / UDP(sport=sport, dport=7) / Raw(tag.encode()))


def packets():
    out = []
    normal = 0
    for i in range(8000):
        out.append(dgram("203.0.113.66", 6666, f"storm {i}"))
        if i % 20 == 10:
            n, seq = normal % 20, normal // 20
            out.append(dgram(f"198.51.100.{10 + n}", 7000 + n, f"normal {n} {seq}"))
            normal += 1
    for i, p in enumerate(out):
        p.time = 1_700_000_000 + i / 1_000_000
    return out


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "storm.pcap")
    wrpcap(path, packets(), linktype=1)
    print(f"wrote {path}")
