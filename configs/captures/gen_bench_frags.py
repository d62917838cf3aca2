#!/usr/bin/python3
"""Generates configs/captures/bench_frags.pcap, the fragment mix ci/bench replays with
infinite_rx=1 (seed 001's scenario at full speed).

Run from anywhere: /usr/bin/python3 configs/captures/gen_bench_frags.py  (needs python3-scapy).
Deterministic (fixed timestamps, identifications and sources).

1216 frames to 02:00:00:00:00:01 / 192.0.2.1:
- 64 legitimate UDP datagrams to port 7 (1000 bytes of payload), each in 3 fragments in order
  (400 + 400 + 208 bytes of data), from 16 sources (198.51.100.1-16);
- 1024 first fragments (MF set, 24 bytes of data: a UDP header and 16 bytes) of datagrams that
  never complete, each from its own source (10.0.0.0 - 10.0.3.255), all different
  identifications;
interleaved: after every 16 flood fragments, the 3 fragments of one legitimate datagram.
Replayed in a loop, every legitimate datagram can complete again each time round (its key is
free once it completed), and the flood keeps 1024 distinct datagrams pending.
"""
import logging
import os
import sys

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import IP, UDP, Raw, wrpcap  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from frags_common import eth, legit as legit_fragments  # noqa: E402

LEGIT, FLOOD, EVERY = 64, 1024, 16


def packets():
    out = []
    legit = 0
    for i in range(FLOOD):
        a, b = divmod(i, 256)
        first = IP(src=f"10.0.{a}.{b}", dst="192.0.2.1", id=0x8000 + i, proto=17, flags="MF") / Raw(
            bytes(UDP(sport=30000 + i, dport=7, len=1008)) + bytes([i & 0xFF]) * 16)
        out.append(eth(first))
        if i % EVERY == EVERY - 1:
            out += legit_fragments(legit)
            legit += 1
    assert legit == LEGIT
    for i, p in enumerate(out):
        p.time = 1_700_000_000 + i / 1_000_000
    return out


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "bench_frags.pcap")
    pkts = packets()
    assert len(pkts) == FLOOD + 3 * LEGIT
    wrpcap(path, pkts, linktype=1)
    print(f"wrote {path}")
