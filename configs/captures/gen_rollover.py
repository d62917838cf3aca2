#!/usr/bin/python3
"""Generates configs/captures/rollover.pcap: one dominant UDP flow and many small ones to a
service on 192.0.2.1:9000 (the seed 002 experiment in small; see control/tests/services.rs).

- the dominant flow 192.0.2.50:5000 -> 192.0.2.1:9000, 2000 datagrams;
- 50 small flows 198.51.100.N:6000+N -> 192.0.2.1:9000, 4 datagrams each, spread through it.
Payloads carry "flow=F seq=S". Deterministic output (fixed timestamps).
"""
import os
import sys

from scapy.all import IP, UDP, Ether, Raw, wrpcap

ME_MAC = "02:00:00:00:00:01"
PEER_MAC = "02:00:00:00:01:01"


def dgram(src, sport, flow, seq):
    return (Ether(dst=ME_MAC, src=PEER_MAC) / IP(src=src, dst="192.0.2.1", id=seq & 0xffff)
            / UDP(sport=sport, dport=9000) / Raw(f"flow={flow} seq={seq}".encode()))


def packets():
    small = [(f"198.51.100.{10 + n}", 6000 + n, n) for n in range(50)]
    small_seq = [0] * len(small)
    out = []
    k = 0
    for seq in range(2000):
        out.append(dgram("192.0.2.50", 5000, "big", seq))
        if seq % 10 == 5:
            src, sport, n = small[k % len(small)]
            out.append(dgram(src, sport, n, small_seq[n]))
            small_seq[n] += 1
            k += 1
    for i, p in enumerate(out):
        p.time = 1_700_000_000 + i / 100000
    return out


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "rollover.pcap")
    wrpcap(path, packets(), linktype=1)
    print(f"wrote {path}")
