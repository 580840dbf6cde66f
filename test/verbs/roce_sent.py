#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""What one simulated HCA sent, from its capture (RNICDV_PCAP): Ethernet/IPv4/UDP/RoCEv2 frames.

Prints one line of JSON: the device's source addresses, the destinations of its RC frames,
the number of RC and UD frames, and the RC payload bytes (SEND, RDMA WRITE and READ response
data, without headers, pad or ICRC). A frame that is not RoCEv2 (UDP port 4791) is counted
under "other".

usage: roce_sent.py PCAP
"""
import json
import struct
import sys

ROCE_PORT = 4791
BTH_LEN = 12
ICRC_LEN = 4


def ext_header_len(opcode: int) -> int:
    """Bytes of extended transport headers after the BTH of an RC packet (IBA 9.2, table 39)."""
    op = opcode & 0x1F
    n = 0
    if op in (0x06, 0x0A, 0x0B, 0x0C):  # RDMA WRITE first / only / only with immediate, READ request
        n += 16  # RETH
    if op in (0x03, 0x05, 0x09, 0x0B):  # SEND last/only with immediate, WRITE last/only with immediate
        n += 4  # ImmDt
    if op in (0x0D, 0x0F, 0x10, 0x11, 0x12):  # READ response first/last/only, ACK, atomic ACK
        n += 4  # AETH
    if op == 0x12:
        n += 8  # AtomicAckETH
    if op in (0x13, 0x14):  # compare-and-swap, fetch-and-add
        n += 28  # AtomicETH
    if op in (0x16, 0x17):  # SEND last/only with invalidate
        n += 4  # IETH
    return n


# RC opcodes whose packets carry payload: SEND, RDMA WRITE, RDMA READ response.
RC_DATA = set(range(0x00, 0x0C)) | {0x0D, 0x0E, 0x0F, 0x10, 0x16, 0x17}


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1], "rb") as f:
        data = f.read()
    if len(data) < 24:
        print(f"roce_sent.py: {sys.argv[1]}: no pcap file header", file=sys.stderr)
        return 1
    magic = struct.unpack_from("<I", data, 0)[0]
    if magic not in (0xA1B2C3D4, 0xA1B23C4D):
        print(f"roce_sent.py: {sys.argv[1]}: not a little-endian pcap file", file=sys.stderr)
        return 1
    summary = {"sources": set(), "rc_destinations": set(), "rc_frames": 0, "ud_frames": 0,
               "rc_payload_bytes": 0, "other": 0}
    off = 24
    while off + 16 <= len(data):
        incl_len = struct.unpack_from("<I", data, off + 8)[0]
        frame = data[off + 16:off + 16 + incl_len]
        off += 16 + incl_len
        if len(frame) < 14 + 20 + 8 + BTH_LEN or frame[12:14] != b"\x08\x00":
            summary["other"] += 1
            continue
        ihl = (frame[14] & 0x0F) * 4
        udp = 14 + ihl
        src = ".".join(str(b) for b in frame[26:30])
        dst = ".".join(str(b) for b in frame[30:34])
        dport, udp_len = struct.unpack_from(">HH", frame, udp + 2)  # after the source port
        if frame[23] != 17 or dport != ROCE_PORT:
            summary["other"] += 1
            continue
        bth = udp + 8
        opcode = frame[bth]
        pad = (frame[bth + 1] >> 4) & 0x3
        summary["sources"].add(src)
        if opcode >> 5 == 0:  # RC
            summary["rc_frames"] += 1
            summary["rc_destinations"].add(dst)
            if opcode in RC_DATA:
                payload = udp_len - 8 - BTH_LEN - ext_header_len(opcode) - pad - ICRC_LEN
                summary["rc_payload_bytes"] += max(payload, 0)
        elif opcode >> 5 == 3:  # UD
            summary["ud_frames"] += 1
        else:
            summary["other"] += 1
    summary["sources"] = sorted(summary["sources"])
    summary["rc_destinations"] = sorted(summary["rc_destinations"])
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
