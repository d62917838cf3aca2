#!/usr/bin/python3
"""Generates configs/captures/bench_frags_100x.pcap: a flood of first fragments 100 times the
capacity of a 64 KiB reassembly table (28 buffers of 2304 bytes), with legitimate datagrams among
it, for ci/bench to replay with infinite_rx=1 at line rate.

Run from anywhere: /usr/bin/python3 configs/captures/gen_bench_frags_100x.py  (needs python3-scapy).
Deterministic (fixed timestamps, identifications and sources).

3008 frames to 02:00:00:00:00:01 / 192.0.2.1:
- 2816 first fragments (MF set, 24 bytes of data: a UDP header and 16 bytes) of datagrams that
  never complete, each from its own source (10.16.0.0 - 10.16.10.255), all different
  identifications;
- 64 legitimate UDP datagrams to port 7 (1000 bytes of payload), each in 3 fragments in order
  (400 + 400 + 208 bytes of data), from 16 sources (198.51.100.1-16), one every 44 flood
  fragments, its fragments 4 flood fragments apart (as a sender's fragments arrive among
  others' traffic, not back to back).
"""
import logging
import os
import sys

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, UDP, Raw, wrpcap  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from frags_common import eth, legit  # noqa: E402

LEGIT, FLOOD, GAP = 64, 2816, 4
EVERY = FLOOD // LEGIT


def packets():
    flood = []
    for i in range(FLOOD):
        a, b = divmod(i, 256)
        first = IP(src=f"10.16.{a}.{b}", dst="192.0.2.1", id=0x8000 + i, proto=17, flags="MF") / Raw(
            bytes(UDP(sport=30000 + i % 30000, dport=7, len=1008)) + bytes([i & 0xFF]) * 16)
        flood.append(eth(first))
    out = []
    for n in range(LEGIT):
        block = flood[n * EVERY:(n + 1) * EVERY]
        frags = legit(n)
        # f0, GAP flood, f1, GAP flood, f2, the rest of the block.
        out += [frags[0]] + block[:GAP] + [frags[1]] + block[GAP:2 * GAP] + [frags[2]] + block[2 * GAP:]
    for i, p in enumerate(out):
        p.time = 1_700_000_000 + i / 1_000_000
    return out


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "bench_frags_100x.pcap")
    pkts = packets()
    assert len(pkts) == FLOOD + 3 * LEGIT
    wrpcap(path, pkts, linktype=1)
    print(f"wrote {path}")
