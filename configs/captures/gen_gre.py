#!/usr/bin/python3
"""Generates configs/captures/gre.pcap: GRE decapsulation and tunnel services (see
control/tests/tunnels.rs for the config and the expected outcomes). The box is
02:00:00:00:00:01 with 192.0.2.1 and, inside tunnels, 10.9.0.1. Deterministic output.
"""
import logging
import os
import sys

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import GRE, ICMP, IP, UDP, Ether, Raw, wrpcap  # noqa: E402

ME_MAC = "02:00:00:00:00:01"
PEER_MAC = "02:00:00:00:00:fe"


def ping(seq=1):
    return IP(src="10.9.0.2", dst="10.9.0.1") / ICMP(id=0x4242, seq=seq) / Raw(b"through the tunnel")


def gre(inner, remote, **kw):
    return IP(src=remote, dst="192.0.2.1") / GRE(**kw) / inner


def eth(p):
    return Ether(dst=ME_MAC, src=PEER_MAC) / p


def packets():
    out = []
    # echo_reply x1: a ping through tunnel t1, answered back through it.
    out.append(eth(gre(ping(1), "198.51.100.2")))
    # echo_reply x1: through the keyed tunnel (key 42).
    out.append(eth(gre(ping(2), "198.51.100.3", key_present=1, key=42)))
    # echo_reply x1 and gre_bad_checksum x1: the checksummed tunnel.
    out.append(eth(gre(ping(3), "198.51.100.4", chksum_present=1)))
    out.append(eth(gre(ping(4), "198.51.100.4", chksum_present=1, chksum=0x1234)))
    # gre_bad_checksum x1: the checksummed tunnel's remote without a checksum (Linux drops it too).
    out.append(eth(gre(ping(7), "198.51.100.4")))
    # gre_unknown_tunnel x2: an unknown remote, and the keyed tunnel's remote with another key.
    out.append(eth(gre(ping(5), "198.51.100.99")))
    out.append(eth(gre(ping(6), "198.51.100.3", key_present=1, key=43)))
    # The sequence tunnel: 1, 2, 2, 1, 3 -> echo_reply x3, gre_seq_dropped x2.
    for s in (1, 2, 2, 1, 3):
        out.append(eth(gre(ping(10 + s), "198.51.100.5", seqnum_present=1, seqence_number=s)))
    # echo_reply x1: three GRE headers are allowed; gre_recursion x1: four are not.
    p3 = gre(gre(gre(ping(20), "198.51.100.2"), "198.51.100.2"), "198.51.100.2")
    out.append(eth(p3))
    out.append(eth(gre(p3, "198.51.100.2")))
    # delivered x8: UDP to service "fwd" (port 9000), sent on through tunnels t-a / t-b.
    for i in range(8):
        out.append(eth(IP(src=f"203.0.113.{100 + i}", dst="192.0.2.1") / UDP(sport=5000 + i, dport=9000) / Raw(b"fwd %d" % i)))
    # delivered x10: UDP to service "fwdseq" (port 9001), sent on through the sequence tunnel.
    for i in range(10):
        out.append(eth(IP(src=f"203.0.113.{150 + i}", dst="192.0.2.1") / UDP(sport=6000 + i, dport=9001) / Raw(b"seq %d" % i)))
    for i, p in enumerate(out):
        p.time = 1_700_000_000 + i / 1000
    return out


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "gre.pcap")
    wrpcap(path, packets(), linktype=1)
    print(f"wrote {path}")
