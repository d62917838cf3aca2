#!/usr/bin/python3
"""Generates configs/captures/bench_storm.pcap, the flow-limit storm ci/bench replays with
infinite_rx=1 (seed 003's experiment at full speed).

Run from anywhere: /usr/bin/python3 configs/captures/gen_bench_storm.py  (needs python3-scapy).
Deterministic (fixed timestamps, fixed flow list).

1680 UDP/IPv4 frames to an echo service on 02:00:00:00:00:01 / 192.0.2.1 port 7: a single-flow
storm of 1600 frames from 203.0.113.66:6666, and 80 frames of 20 normal flows
(198.51.100.10-29, ports 7000-7019, 4 each), one normal frame after every 20 storm frames.
The two kinds differ in size so the benchmark can split what the echo service answered from
byte and packet counters alone: storm frames are 60 bytes (64 on the wire), normal frames 124.
"""
import logging
import os
import sys

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, UDP, Ether, Raw, wrpcap  # noqa: E402

ME_MAC = "02:00:00:00:00:01"
PEER_MAC = "02:00:00:00:01:01"
STORM_LEN, NORMAL_LEN = 60, 124
STORM, EVERY, FLOWS = 1600, 20, 20


def dgram(src, sport, payload):
    return (Ether(dst=ME_MAC, src=PEER_MAC) / IP(src=src, dst="192.0.2.1", id=sport)
            / UDP(sport=sport, dport=7) / Raw(payload))


def packets():
    out = []
    normal = 0
    for i in range(STORM):
        out.append(dgram("203.0.113.66", 6666, bytes([i & 0xFF]) * (STORM_LEN - 42)))
        if i % EVERY == EVERY - 1:
            n = normal % FLOWS
            out.append(dgram(f"198.51.100.{10 + n}", 7000 + n, bytes([n]) * (NORMAL_LEN - 42)))
            normal += 1
    for i, p in enumerate(out):
        p.time = 1_700_000_000 + i / 1_000_000
    return out


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "bench_storm.pcap")
    pkts = packets()
    assert sum(len(p) == STORM_LEN for p in pkts) == STORM
    assert sum(len(p) == NORMAL_LEN for p in pkts) == STORM // EVERY
    wrpcap(path, pkts, linktype=1)
    print(f"wrote {path}")
