#!/usr/bin/python3
"""Generates configs/captures/malformed.pcap: broken and borderline frames, one case each, for
the capture corpus (entry "malformed" in configs/captures/corpus.toml, which has the config: the
box 02:00:00:00:00:01 with 192.0.2.1 and 2001:db8::1, a UDP echo service on port 7, a TCP
service on port 80, GRE tunnels from 198.51.100.2 (plain) and 198.51.100.3 (key 42)).
Deterministic. Each case's comment is the outcome fastpathd counts for it.
"""
import logging
import os
import struct
import sys

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
from scapy.all import (  # noqa: E402
    GRE, ICMP, IP, TCP, UDP, Dot1AD, Dot1Q, Ether, ICMPv6EchoRequest, IPv6, IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment, IPv6ExtHdrHopByHop, Raw, wrpcap)

ME_MAC = "02:00:00:00:00:01"
PEER_MAC = "02:00:00:00:01:07"
ME4, PEER4 = "192.0.2.1", "198.51.100.7"
ME6, PEER6 = "2001:db8::1", "2001:db8::7"


def eth(p=None, type=None):
    e = Ether(dst=ME_MAC, src=PEER_MAC) if type is None else Ether(dst=ME_MAC, src=PEER_MAC, type=type)
    return e if p is None else e / p


def raw(b):
    return Raw(bytes(b))


def patch(pkt, at, data):
    """The frame's bytes with `data` written at offset `at`."""
    b = bytearray(bytes(pkt))
    b[at:at + len(data)] = data
    return raw(b)


def fix_ip_checksum(b, l3=14):
    """Recomputes the IPv4 header checksum in place (after a deliberate header change)."""
    ihl = (b[l3] & 0xF) * 4
    b[l3 + 10:l3 + 12] = b"\0\0"
    hdr = bytes(b[l3:l3 + ihl]).ljust(ihl, b"\0")  # an IHL past the frame: zeros
    s = sum(struct.unpack(f"!{ihl // 2}H", hdr))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    b[l3 + 10:l3 + 12] = struct.pack("!H", ~s & 0xFFFF)
    return b


def v4(payload, **kw):
    return IP(src=PEER4, dst=ME4, **kw) / payload


def udp7(data=b"hello"):
    return UDP(sport=40000, dport=7) / Raw(data)


def cases():
    out = []
    add = out.append
    ping = ICMP(id=0x99, seq=1) / Raw(b"ping")
    good_udp = bytes(eth(v4(udp7())))
    # --- link layer
    add(raw(b"\xff"))                                                   # malformed: 1-byte runt
    add(raw(bytes(eth())[:13]))                                         # malformed: 13 bytes
    add(raw(bytes(eth(type=0x0800))))                                   # malformed: IPv4 type, no header
    add(raw(bytes(Ether(dst=ME_MAC, src=PEER_MAC, type=0x8100)) + b"\x00"))  # malformed: VLAN tag cut
    add(Ether(dst=ME_MAC, src=PEER_MAC) / Dot1AD(vlan=10) / Dot1Q(vlan=20) / v4(ping))    # echo_reply: QinQ
    add(Ether(dst=ME_MAC, src=PEER_MAC) / Dot1AD(vlan=10) / Dot1Q(vlan=20) / v4(udp7()))  # delivered: QinQ
    add(Ether(dst=ME_MAC, src=PEER_MAC) / Dot1AD(vlan=10) / Dot1Q(vlan=20) / Dot1Q(vlan=30) / v4(ping))  # unhandled: 3 tags
    # --- IPv4
    add(raw(good_udp[:14 + 12]))                                        # malformed: header cut at 12
    add(patch(good_udp, 14 + 10, b"\x12\x34"))                          # malformed: bad header checksum
    add(raw(fix_ip_checksum(bytearray(patch(good_udp, 14, b"\x44").load))))  # malformed: IHL 4
    add(raw(fix_ip_checksum(bytearray(patch(good_udp, 14, b"\x4f").load))))  # malformed: IHL 15 > total length
    b = bytearray(good_udp)
    b[16:18] = struct.pack("!H", len(good_udp) - 14 + 8)
    add(raw(fix_ip_checksum(b)))                                        # malformed: total length beyond frame
    b = bytearray(good_udp)
    b[16:18] = struct.pack("!H", 16)
    add(raw(fix_ip_checksum(b)))                                        # malformed: total length < header
    add(raw(fix_ip_checksum(bytearray(patch(good_udp, 14, b"\x65").load))))  # malformed: version 6 in IPv4
    f = bytearray(bytes(eth(v4(Raw(b"x" * 16), proto=17, flags="MF", id=7))))
    f[24] ^= 0xFF
    add(raw(f))                                                         # malformed: fragment, bad checksum
    p = bytes(eth(v4(ping)))
    add(raw(p + b"\0" * (60 - len(p))))                                 # echo_reply: Ethernet padding
    add(eth(IP(src=PEER4, dst=ME4, options=b"\x01\x01\x01\x00") / ping))  # echo_reply: IPv4 options (NOPs)
    # --- IPv6
    good6 = bytes(eth(IPv6(src=PEER6, dst=ME6) / udp7()))
    add(raw(good6[:14 + 30]))                                           # malformed: header cut at 30
    add(patch(good6, 14 + 4, struct.pack("!H", len(good6) - 54 + 8)))   # malformed: payload length beyond frame
    add(patch(good6, 14, b"\x40"))                                      # malformed: version 4 in IPv6
    chain = IPv6ExtHdrDestOpt()
    for _ in range(8):
        chain = chain / IPv6ExtHdrDestOpt()
    add(eth(IPv6(src=PEER6, dst=ME6) / chain / udp7()))                 # malformed: 9 extension headers
    d = bytes(IPv6ExtHdrDestOpt(nh=17, len=4))[:8]
    add(eth(IPv6(src=PEER6, dst=ME6, nh=60) / Raw(d)))                  # malformed: extension header cut
    add(eth(IPv6(src=PEER6, dst=ME6) / IPv6ExtHdrDestOpt() / IPv6ExtHdrHopByHop() / udp7()))  # malformed: HBH not first
    add(eth(IPv6(src=PEER6, dst=ME6) / IPv6ExtHdrFragment(id=9, m=1, nh=60) / Raw(d)))  # malformed: cut inside a fragment
    add(eth(IPv6(src=PEER6, dst=ME6) / IPv6ExtHdrFragment(id=10, m=1, nh=6) / Raw(b"\0" * 8)))  # reassembly_refused: RFC 7112
    # --- UDP
    b = bytearray(good_udp[:14 + 20 + 4])
    b[16:18] = struct.pack("!H", 24)
    add(raw(fix_ip_checksum(b)))                                        # malformed: UDP header cut at 4
    add(patch(good_udp, 14 + 20 + 4, struct.pack("!H", 7)))             # malformed: UDP length 7
    add(patch(good_udp, 14 + 20 + 4, struct.pack("!H", 200)))           # malformed: UDP length past datagram
    add(patch(good_udp, 14 + 20 + 6, b"\xde\xad"))                      # delivered: bad UDP checksum (not checked on RX)
    add(eth(IPv6(src=PEER6, dst=ME6) / UDP(sport=40000, dport=7, chksum=0) / Raw(b"zero")))  # delivered: IPv6 UDP checksum 0
    # --- TCP
    syn = bytes(eth(v4(TCP(sport=40000, dport=80, flags="S"))))
    b = bytearray(syn[:14 + 20 + 10])
    b[16:18] = struct.pack("!H", 30)
    add(raw(fix_ip_checksum(b)))                                        # malformed: TCP header cut at 10
    add(patch(syn, 14 + 20 + 12, b"\x40"))                              # malformed: TCP data offset 4
    add(patch(syn, 14 + 20 + 12, b"\xf0"))                              # malformed: data offset past segment
    add(raw(syn))                                                       # delivered: TCP SYN to the service
    add(eth(v4(TCP(sport=40000, dport=81, flags="S"))))                 # tcp_reset: closed TCP port, answered with a reset (RFC 9293)
    # --- GRE (to us; tunnels from 198.51.100.2 plain and .3 with key 42)
    inner = IP(src="10.9.0.2", dst="192.0.2.1") / ping
    add(eth(IP(src="198.51.100.2", dst=ME4, proto=47) / Raw(b"\x00\x00")))                # malformed: GRE cut at 2
    add(eth(IP(src="198.51.100.3", dst=ME4, proto=47) / Raw(b"\x20\x00\x08\x00")))        # malformed: K set, no key
    add(eth(IP(src="198.51.100.2", dst=ME4) / GRE(version=1) / inner))                     # malformed: GRE version 1
    add(eth(IP(src="198.51.100.2", dst=ME4) / GRE(routing_present=1) / inner))             # malformed: routing bit
    add(eth(IP(src="198.51.100.2", dst=ME4) / GRE(proto=0x1234) / Raw(b"\0" * 20)))         # unhandled: a type we do not carry
    add(eth(IP(src="198.51.100.2", dst=ME4) / GRE(proto=0x0800) / Raw(bytes(inner)[:12])))  # malformed: inner IPv4 cut
    ib = bytearray(bytes(inner))
    ib[10] ^= 0xFF
    add(eth(IP(src="198.51.100.2", dst=ME4) / GRE(proto=0x0800) / Raw(bytes(ib))))          # malformed: inner bad checksum
    add(eth(IP(src="198.51.100.3", dst=ME4) / GRE(key_present=1, key=42) / inner))         # echo_reply: keyed tunnel
    # --- ICMP
    add(eth(v4(Raw(b"\x08\x00\xf7\xff"), proto=1)))                              # malformed: echo request cut at 4
    add(eth(v4(ICMP(id=1, seq=1, chksum=0x1234) / Raw(b"bad"))))       # malformed: bad ICMP checksum
    add(eth(IPv6(src=PEER6, dst=ME6) / ICMPv6EchoRequest(cksum=0x1234)))  # malformed: bad ICMPv6 checksum
    for i, p in enumerate(out):
        p.time = 1_700_000_000 + i / 1000
    return out


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "malformed.pcap")
    wrpcap(path, cases(), linktype=1)
    print(f"wrote {path}")
