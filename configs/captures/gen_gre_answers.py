#!/usr/bin/python3
"""Generates configs/captures/gre_answers.pcap: answers to what came through a tunnel leave
through it: a worker's echo of UDP through plain, keyed and checksummed tunnels,
the echo of a ping reassembled from fragments carried inside a tunnel (its reply larger than
the MTU, so it leaves in outer fragments), a worker's echo of a reassembled datagram, and Time
Exceeded about a lone first fragment inside a tunnel, and Fragmentation Needed, back through
the tunnel it came in by, for a DF datagram a tunnel service cannot forward. The box is 02:00:00:00:00:01 with
192.0.2.1 and, inside tunnels, 10.9.0.1. Deterministic output.
"""
import logging
import os
import sys

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import GRE, ICMP, IP, UDP, Ether, Raw, fragment, wrpcap  # noqa: E402

ME_MAC = "02:00:00:00:00:01"
PEER_MAC = "02:00:00:00:00:fe"
INNER_PEER = "10.9.0.2"
INNER_ME = "10.9.0.1"


def gre(inner, remote, **kw):
    return Ether(dst=ME_MAC, src=PEER_MAC) / IP(src=remote, dst="192.0.2.1") / GRE(**kw) / inner


def udp(sport, payload, ident=1):
    return IP(src=INNER_PEER, dst=INNER_ME, id=ident) / UDP(sport=sport, dport=7) / Raw(payload)


def packets():
    out = []
    # UDP to the echo service through each tunnel kind: the worker answers through it.
    out.append(gre(udp(4001, b"through t1"), "198.51.100.2"))  # delivered
    out.append(gre(udp(4002, b"through keyed"), "198.51.100.3", key_present=1, key=42))  # delivered
    out.append(gre(udp(4003, b"through csum"), "198.51.100.4", chksum_present=1))  # delivered
    # A 2000-byte ping cut by its sender, each fragment inside t1: reassembled, echoed by the
    # RX lcore through t1; the reply is larger than the MTU, so the GRE packet is fragmented.
    big = IP(src=INNER_PEER, dst=INNER_ME, id=0x77) / ICMP(id=0x4242, seq=1) / Raw(bytes(range(256)) * 8)
    for f in fragment(big, fragsize=1000):  # reassembled, then echo_reply
        out.append(gre(f, "198.51.100.2"))
    # A UDP datagram to the echo service in 3 fragments inside the keyed tunnel: reassembled,
    # delivered, echoed by the worker through the keyed tunnel.
    for f in fragment(udp(4004, b"x" * 200, ident=0x78), fragsize=80):  # reassembled, delivered
        out.append(gre(f, "198.51.100.3", key_present=1, key=42))
    # A lone first fragment inside t1: times out, Time Exceeded back through t1.
    lone = fragment(udp(4005, b"y" * 200, ident=0x79), fragsize=80)[0]
    out.append(gre(lone, "198.51.100.2"))  # icmp_error (Time Exceeded, reassembly)
    # A DF datagram inside t1 for the `fwd` service, whose tunnel (nested in another) cannot
    # carry it: Fragmentation Needed goes back to the sender through t1.
    df = IP(src=INNER_PEER, dst=INNER_ME, flags="DF", id=0x7a) / UDP(sport=4006, dport=9000) / Raw(b"z" * 1432)
    out.append(gre(df, "198.51.100.2"))  # delivered (then the worker's Fragmentation Needed)
    for i, p in enumerate(out):
        p.time = 1_700_000_000 + i / 1000
    return out


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "gre_answers.pcap")
    wrpcap(path, packets(), linktype=1)
    print(f"wrote {path}")
