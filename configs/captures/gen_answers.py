#!/usr/bin/python3
"""Generates configs/captures/answers.pcap: answers that must not be sent. One frame
per case, the outcome each must get in the comment; a closed port (no service). Deterministic.
"""
import logging
import os
import sys

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import (ARP, ICMP, IP, UDP, Ether, ICMPv6EchoRequest, ICMPv6ND_NS,  # noqa: E402
                       ICMPv6NDOptSrcLLAddr, IPOption, IPv6, IPv6ExtHdrFragment, IPv6ExtHdrRouting,
                       IPv6ExtHdrSegmentRouting, Raw, wrpcap)

ME_MAC = "02:00:00:00:00:01"
PEER_MAC = "02:00:00:00:01:07"
ME, ME6, THEM, THEM6 = "192.0.2.1", "2001:db8::1", "198.51.100.7", "2001:db8::7"
SN = "ff02::1:ff00:1"  # solicited-node group of 2001:db8::1
SN_MAC = "33:33:ff:00:00:01"


def eth(p, dst=ME_MAC):
    if isinstance(p, Ether):
        p.dst, p.src = dst, PEER_MAC
        return p
    return Ether(dst=dst, src=PEER_MAC) / p


def with_options(pkt, opts):
    """`pkt` (an IP packet) with `opts` as its options bytes, verbatim (scapy would parse them)."""
    b = bytearray(bytes(pkt))
    b = b[:20] + bytearray(opts) + b[20:]
    b[0] = 0x40 | (20 + len(opts)) // 4
    b[2:4] = len(b).to_bytes(2, "big")
    b[10:12] = b"\0\0"
    s = sum(int.from_bytes(b[i:i + 2], "big") for i in range(0, 20 + len(opts), 2))
    s = (s & 0xffff) + (s >> 16)
    s = (s & 0xffff) + (s >> 16)
    b[10:12] = (~s & 0xffff).to_bytes(2, "big")
    return Ether(type=0x0800) / Raw(bytes(b))


def packets():
    out = []
    # martian (RFC 1122 3.2.1.3, RFC 4291 2.5.3): UDP to a closed port and pings from sources
    # that are not one host, loopback, or our own address. 9 frames.
    for src in ["255.255.255.255", "224.0.0.1", "0.0.0.0", "127.0.0.1", ME]:
        out.append(eth(IP(src=src, dst=ME) / UDP(sport=40000, dport=9) / Raw(b"x")))
    for src in ["127.0.0.1", ME]:
        out.append(eth(IP(src=src, dst=ME) / ICMP(id=1, seq=1) / Raw(b"ping")))
    for src in ["::1", ME6]:
        out.append(eth(IPv6(src=src, dst=ME6) / ICMPv6EchoRequest(id=1, seq=1)))
    # martian (RFC 1122 3.3.6): a unicast ping in a link-layer broadcast frame. 1 frame.
    out.append(eth(IP(src=THEM, dst=ME) / ICMP(id=1, seq=2), dst="ff:ff:ff:ff:ff:ff"))
    # source_routed: LSRR and SSRR (RFC 7126 4.3, 4.4), a Routing header type 0 (RFC 5095) and a
    # Segment Routing header (RFC 8754) with segments left. 4 frames.
    for opt in [b"\x83\x07\x04\xcb\x00\x71\x09\x00", b"\x89\x07\x04\xcb\x00\x71\x09\x00"]:
        out.append(eth(IP(src=THEM, dst=ME, options=[IPOption(opt)]) / ICMP(id=1, seq=3)))
    out.append(eth(IPv6(src=THEM6, dst=ME6) / IPv6ExtHdrRouting(type=0, segleft=1, addresses=["2001:db8::99"])
                   / ICMPv6EchoRequest(id=1, seq=4)))
    out.append(eth(IPv6(src=THEM6, dst=ME6) / IPv6ExtHdrSegmentRouting(segleft=1, addresses=["2001:db8::99", ME6])
                   / ICMPv6EchoRequest(id=1, seq=5)))
    # malformed: a Record Route option whose length runs past the header. 1 frame.
    out.append(eth(with_options(IP(src=THEM, dst=ME) / ICMP(id=1, seq=6), b"\x07\x27\x04\x00")))
    # echo_reply: Record Route is not copied into the reply (20-byte header). 1 frame.
    out.append(eth(IP(src=THEM, dst=ME, options=[IPOption(b"\x07\x07\x04\x00\x00\x00\x00")]) / ICMP(id=1, seq=7)))
    # ndp_ignored (RFC 6980 5): a Neighbor Solicitation in an atomic fragment. 1 frame.
    out.append(eth(IPv6(src=THEM6, dst=SN, hlim=255) / IPv6ExtHdrFragment(offset=0, m=0, id=9)
                   / ICMPv6ND_NS(tgt=ME6) / ICMPv6NDOptSrcLLAddr(lladdr=PEER_MAC), dst=SN_MAC))
    # martian: an NS whose source link-layer address is the broadcast MAC. 1 frame.
    out.append(eth(IPv6(src=THEM6, dst=SN, hlim=255) / ICMPv6ND_NS(tgt=ME6)
                   / ICMPv6NDOptSrcLLAddr(lladdr="ff:ff:ff:ff:ff:ff"), dst=SN_MAC))
    # arp_reply: a request padded with 0xa5 to 60 bytes; the reply carries no padding. 1 frame.
    out.append(Ether(dst="ff:ff:ff:ff:ff:ff", src=PEER_MAC) / ARP(op=1, hwsrc=PEER_MAC, psrc="192.0.2.7", pdst=ME)
               / Raw(b"\xa5" * 18))
    # martian: an ARP request from a loopback sender. 1 frame.
    out.append(Ether(dst="ff:ff:ff:ff:ff:ff", src=PEER_MAC) / ARP(op=1, hwsrc=PEER_MAC, psrc="127.0.0.1", pdst=ME))
    # icmp_error: the same closed port from a valid source still gets its Port Unreachable. 1 frame.
    out.append(eth(IP(src=THEM, dst=ME) / UDP(sport=40000, dport=9) / Raw(b"x")))
    for i, p in enumerate(out):
        p.time = 1_700_000_000 + i / 1000
    return out


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "answers.pcap")
    wrpcap(path, packets(), linktype=1)
    print(f"wrote {path}")
