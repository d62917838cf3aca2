#!/usr/bin/python3
"""Generates configs/captures/demo.pcap, the capture configs/demo.toml replays.

Run from anywhere: /usr/bin/python3 configs/captures/gen_demo.py  (needs Debian's python3-scapy).
The output is deterministic (fixed timestamps), so regenerating it changes nothing.

The box under test is 02:00:00:00:00:01 with 192.0.2.1 and 2001:db8::1 (see configs/demo.toml).
Each packet's comment says the outcome fastpathd counts for it today; the integration test
control/tests/replay.rs checks those counts and the ARP replies in the output capture.
"""
import os
import sys

import logging

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)  # linktype note about the raw runts
from scapy.all import (  # noqa: E402
    ARP, ICMP, IP, UDP, Dot1Q, Ether, ICMPv6EchoRequest, ICMPv6ND_NS, ICMPv6NDOptSrcLLAddr, IPv6, Raw, wrpcap)

ME_MAC = "02:00:00:00:00:01"
ME_IP = "192.0.2.1"
BCAST = "ff:ff:ff:ff:ff:ff"


def host(n):
    return f"02:00:00:00:01:{n:02x}", f"192.0.2.{10 + n}"


def packets():
    out = []
    # arp_reply: requests for our address from three hosts, broadcast.
    for n in range(1, 4):
        mac, ip = host(n)
        out.append(Ether(dst=BCAST, src=mac) / ARP(op=1, hwsrc=mac, psrc=ip, pdst=ME_IP))
    # arp_reply: a unicast refresh (RFC 1122 2.3.2.1) straight to our MAC.
    mac, ip = host(4)
    out.append(Ether(dst=ME_MAC, src=mac) / ARP(op=1, hwsrc=mac, psrc=ip, hwdst=ME_MAC, pdst=ME_IP))
    # arp_reply: an RFC 5227 probe (sender IP 0.0.0.0).
    mac, _ = host(5)
    out.append(Ether(dst=BCAST, src=mac) / ARP(op=1, hwsrc=mac, psrc="0.0.0.0", pdst=ME_IP))
    # arp_reply: a request on VLAN 100; the reply keeps the tag.
    mac, ip = host(6)
    out.append(Ether(dst=BCAST, src=mac) / Dot1Q(vlan=100) / ARP(op=1, hwsrc=mac, psrc=ip, pdst=ME_IP))
    # arp_ignored: request for someone else, a reply, a gratuitous announcement.
    mac, ip = host(7)
    out.append(Ether(dst=BCAST, src=mac) / ARP(op=1, hwsrc=mac, psrc=ip, pdst="192.0.2.99"))
    out.append(Ether(dst=ME_MAC, src=mac) / ARP(op=2, hwsrc=mac, psrc=ip, hwdst=ME_MAC, pdst=ME_IP))
    out.append(Ether(dst=BCAST, src=mac) / ARP(op=1, hwsrc=mac, psrc=ip, pdst=ip))
    # malformed: runts, a truncated ARP, an ARP with a bad hardware length, a broadcast source.
    out.append(Raw(bytes.fromhex("ffffffffffff")))
    out.append(Raw(bytes.fromhex("ffffffffffff0200000001ff08")))
    full = bytes(Ether(dst=BCAST, src=mac) / ARP(op=1, hwsrc=mac, psrc=ip, pdst=ME_IP))
    out.append(Raw(full[:14 + 20]))
    bad = bytearray(full)
    bad[14 + 4] = 8
    out.append(Raw(bytes(bad)))
    out.append(Ether(dst=BCAST, src=BCAST) / ARP(op=1, psrc=ip, pdst=ME_IP))
    # not_for_us: unicast to another station.
    out.append(Ether(dst="02:00:00:00:09:09", src=mac) / IP(src=ip, dst="192.0.2.9") / UDP(dport=9))
    # unhandled (until the IP stages land): UDP over IPv4 and IPv6 to us, an unknown EtherType.
    out.append(Ether(dst=ME_MAC, src=mac) / IP(src=ip, dst=ME_IP) / UDP(sport=40000, dport=7) / Raw(b"hello"))
    out.append(Ether(dst=ME_MAC, src=mac) / IPv6(src="2001:db8::17", dst="2001:db8::1") / UDP(sport=40000, dport=7))
    out.append(Ether(dst=ME_MAC, src=mac, type=0x88B5) / Raw(b"\x00" * 46))
    # echo_reply: ICMP and ICMPv6 echo requests to our addresses.
    out.append(Ether(dst=ME_MAC, src=mac) / IP(src=ip, dst=ME_IP, id=7) / ICMP(id=0x77, seq=1) / Raw(b"ping-v4-payload"))
    out.append(Ether(dst=ME_MAC, src=mac) / IPv6(src="2001:db8::17", dst="2001:db8::1")
               / ICMPv6EchoRequest(id=0x66, seq=2, data=b"ping-v6-payload"))
    # ndp_reply: a Neighbor Solicitation for our IPv6 address, to its solicited-node group.
    out.append(Ether(dst="33:33:ff:00:00:01", src=mac) / IPv6(src="2001:db8::17", dst="ff02::1:ff00:1", hlim=255)
               / ICMPv6ND_NS(tgt="2001:db8::1") / ICMPv6NDOptSrcLLAddr(lladdr=mac))
    # not_local: to our MAC but another IP address.
    out.append(Ether(dst=ME_MAC, src=mac) / IP(src=ip, dst="192.0.2.99") / ICMP() / Raw(b"x"))
    for i, p in enumerate(out):
        p.time = 1_700_000_000 + i / 1000
    return out


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "demo.pcap")
    wrpcap(path, packets(), linktype=1)  # DLT_EN10MB, also for the raw runts
    print(f"wrote {path}")
