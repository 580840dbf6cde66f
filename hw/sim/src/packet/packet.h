// SPDX-License-Identifier: BSD-3-Clause
// RoCEv2 transport packets (the UDP payload without its ICRC): BTH, extension headers,
// payload, pad. Parsing treats every byte as hostile; building writes exactly what the
// parser accepts. Layouts: IBA 9.2-9.5 (BTH 9.2.1, RETH 9.3.3, AETH 9.3.5, AtomicETH 9.3.4,
// AtomicAckETH 9.5.2, ImmDt 9.3.6, DETH 9.3.2, XRCETH Annex A14).
#pragma once

#include <cstddef>
#include <cstdint>

#include "packet/opcode.h"

namespace rnicdv::sim::pkt {

inline constexpr uint16_t kDefaultPkey = 0xffff;
inline constexpr uint32_t kMaxPayload = 4096;  // the largest path MTU
inline constexpr uint32_t kMaxPacketBytes =
    header_bytes(hdr::xrceth | hdr::reth | hdr::immdt) + kMaxPayload + 3;

// AETH syndrome (IBA 9.7.5.2.1, Table 42): bits 6:5 give the type.
namespace aeth {
inline constexpr uint8_t kTypeMask = 0x60;
inline constexpr uint8_t kAck = 0x00;
inline constexpr uint8_t kRnrNak = 0x20;
inline constexpr uint8_t kNak = 0x60;
inline constexpr uint8_t kCreditInvalid = 0x1f;  // "no credit information"
inline constexpr uint8_t kNakPsnSeqError = 0x60;
inline constexpr uint8_t kNakInvalidRequest = 0x61;
inline constexpr uint8_t kNakRemoteAccessError = 0x62;
inline constexpr uint8_t kNakRemoteOperationalError = 0x63;
inline constexpr uint8_t kNakInvalidRdRequest = 0x64;
}  // namespace aeth

struct Bth {
  uint8_t opcode = 0;
  bool solicited = false;
  bool mig_req = false;
  uint8_t pad_count = 0;
  uint16_t pkey = kDefaultPkey;
  uint32_t dest_qp = 0;  // 24 bits
  bool ack_req = false;
  uint32_t psn = 0;  // 24 bits
};

struct Reth {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t dma_length = 0;
};

struct AtomicEth {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint64_t swap_add = 0;
  uint64_t compare = 0;
};

struct Aeth {
  uint8_t syndrome = 0;
  uint32_t msn = 0;  // 24 bits
};

struct Deth {
  uint32_t qkey = 0;
  uint32_t src_qp = 0;  // 24 bits
};

// Everything a packet carries. `headers` says which extension headers are valid.
struct Packet {
  Bth bth;
  uint16_t headers = 0;
  Reth reth;
  AtomicEth atomic;
  Aeth aeth;
  uint64_t atomic_orig = 0;  // AtomicAckETH
  uint32_t imm = 0;          // ImmDt, host order
  Deth deth;
  uint32_t xrc_srqn = 0;     // XRCETH (24 bits): the SRQ an XRC request goes to
  const uint8_t* payload = nullptr;
  uint32_t payload_len = 0;
};

enum class ParseError : uint8_t {
  none = 0,
  runt,  // shorter than the BTH or the opcode's headers
  unknown_opcode,
  bad_version,         // TVer != 0
  bad_pad,             // pad count makes the payload negative or not 4-byte aligned
  unexpected_payload,  // opcode carries no payload but bytes follow the headers
  too_long,            // payload above the largest MTU
};
const char* parse_error_name(ParseError e) noexcept;

// Parses `len` bytes. `out->payload` points into `data`. Never reads outside [data, data+len).
ParseError parse_packet(const uint8_t* data, size_t len, Packet* out) noexcept;

// Writes BTH and the extension headers for `p.bth.opcode` into `buf` (at least
// header_bytes(opcode_info(op).headers) bytes), then copies `p.payload_len` bytes from
// `p.payload` and the pad (the pad count is computed, not taken from p). Returns the total
// length, or 0 for an unknown opcode or a payload above kMaxPayload.
size_t build_packet(const Packet& p, uint8_t* buf, size_t cap) noexcept;

// Same, but leaves room for the payload and returns the offset where it goes; the caller
// writes the payload and calls finish_packet(). Lets the sender gather straight into the
// frame without an intermediate copy.
size_t build_headers(const Packet& p, uint8_t* buf) noexcept;
size_t finish_packet(uint8_t* buf, size_t header_len, uint32_t payload_len) noexcept;

}  // namespace rnicdv::sim::pkt
