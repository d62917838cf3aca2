#!/usr/bin/python3
"""Generates configs/captures/bench_frags_smack.pcap: a FragmentSmack-style flood (CVE-2018-5391:
many small fragments of datagrams that never complete, in random order) with legitimate
datagrams among it, for ci/bench to replay with infinite_rx=1 at line rate.

Run from anywhere: /usr/bin/python3 configs/captures/gen_bench_frags_smack.py  (needs python3-scapy).
Deterministic (fixed timestamps, identifications, sources and shuffle).

4392 frames to 02:00:00:00:00:01 / 192.0.2.1:
- 4200 fragments of 8 bytes of 600 datagrams (each from its own source, 10.32.0.0 - 10.32.2.87)
  of 8 fragments each, all but the last (MF set on all: none completes), shuffled: every
  datagram keeps making progress and none completes; their 4200 buffers are 2.3 times what the
  default 4 MiB table holds (1820);
- 64 legitimate UDP datagrams to port 7 (1000 bytes of payload), each in 3 fragments in order
  (400 + 400 + 208 bytes of data), from 16 sources (198.51.100.1-16), one every 65 or 66 flood
  fragments, its fragments 4 flood fragments apart.
"""
import logging
import os
import random
import sys

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, UDP, Raw, wrpcap  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from frags_common import eth, legit  # noqa: E402

LEGIT, DATAGRAMS, FRAGMENTS, GAP = 64, 600, 8, 4


def packets():
    flood = []
    for d in range(DATAGRAMS):
        a, b = divmod(d, 256)
        for j in range(FRAGMENTS - 1):
            data = bytes(UDP(sport=30000 + d, dport=7, len=8 * FRAGMENTS)) if j == 0 else bytes([d & 0xFF]) * 8
            f = IP(src=f"10.32.{a}.{b}", dst="192.0.2.1", id=0x4000 + d, proto=17, flags="MF", frag=j) / Raw(data)
            flood.append(eth(f))
    random.Random(5391).shuffle(flood)
    out = []
    per = len(flood) / LEGIT
    for n in range(LEGIT):
        block = flood[round(n * per):round((n + 1) * per)]
        frags = legit(n)
        out += [frags[0]] + block[:GAP] + [frags[1]] + block[GAP:2 * GAP] + [frags[2]] + block[2 * GAP:]
    for i, p in enumerate(out):
        p.time = 1_700_000_000 + i / 1_000_000
    return out


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "bench_frags_smack.pcap")
    pkts = packets()
    assert len(pkts) == DATAGRAMS * (FRAGMENTS - 1) + 3 * LEGIT
    wrpcap(path, pkts, linktype=1)
    print(f"wrote {path}")
