// SPDX-License-Identifier: BSD-3-Clause
// IB transport opcodes carried in BTH byte 0 (IBA 9.2, Table 38) and what each one carries.
// Only the RC opcodes this model executes, UC's SEND and RDMA WRITE, the UD SEND, and XRC's
// copies of the RC opcodes (IBA Annex A14) are known; any other value is rejected by the parser.
#pragma once

#include <cstdint>

namespace rnicdv::sim::pkt {

namespace opcode {
inline constexpr uint8_t rc_send_first = 0x00;
inline constexpr uint8_t rc_send_middle = 0x01;
inline constexpr uint8_t rc_send_last = 0x02;
inline constexpr uint8_t rc_send_last_imm = 0x03;
inline constexpr uint8_t rc_send_only = 0x04;
inline constexpr uint8_t rc_send_only_imm = 0x05;
inline constexpr uint8_t rc_write_first = 0x06;
inline constexpr uint8_t rc_write_middle = 0x07;
inline constexpr uint8_t rc_write_last = 0x08;
inline constexpr uint8_t rc_write_last_imm = 0x09;
inline constexpr uint8_t rc_write_only = 0x0a;
inline constexpr uint8_t rc_write_only_imm = 0x0b;
inline constexpr uint8_t rc_read_request = 0x0c;
inline constexpr uint8_t rc_read_response_first = 0x0d;
inline constexpr uint8_t rc_read_response_middle = 0x0e;
inline constexpr uint8_t rc_read_response_last = 0x0f;
inline constexpr uint8_t rc_read_response_only = 0x10;
inline constexpr uint8_t rc_acknowledge = 0x11;
inline constexpr uint8_t rc_atomic_acknowledge = 0x12;
inline constexpr uint8_t rc_compare_swap = 0x13;
inline constexpr uint8_t rc_fetch_add = 0x14;
// UC (IBA 9.2, Table 38): RC's SEND and RDMA WRITE opcodes with transport bits 001.
inline constexpr uint8_t uc_base = 0x20;
inline constexpr uint8_t uc_send_first = 0x20;
inline constexpr uint8_t uc_send_middle = 0x21;
inline constexpr uint8_t uc_send_last = 0x22;
inline constexpr uint8_t uc_send_last_imm = 0x23;
inline constexpr uint8_t uc_send_only = 0x24;
inline constexpr uint8_t uc_send_only_imm = 0x25;
inline constexpr uint8_t uc_write_first = 0x26;
inline constexpr uint8_t uc_write_middle = 0x27;
inline constexpr uint8_t uc_write_last = 0x28;
inline constexpr uint8_t uc_write_last_imm = 0x29;
inline constexpr uint8_t uc_write_only = 0x2a;
inline constexpr uint8_t uc_write_only_imm = 0x2b;
inline constexpr uint8_t ud_send_only = 0x64;
inline constexpr uint8_t ud_send_only_imm = 0x65;
// XRC (IBA Annex A14, transport bits 101): the RC opcodes above at the same offsets, from
// 0xa0 (SEND FIRST) to 0xb4 (FETCH ADD). Every request carries an XRCETH after the BTH.
inline constexpr uint8_t xrc_base = 0xa0;
}  // namespace opcode

// The transport service an opcode belongs to: its top three bits (IBA 9.2, Table 38).
inline constexpr uint8_t kTransportMask = 0xe0;

// Extension headers, in the order they follow the BTH (IBA 9.2, Figure 105).
namespace hdr {
inline constexpr uint16_t deth = 1u << 0;
inline constexpr uint16_t reth = 1u << 1;
inline constexpr uint16_t atomic_eth = 1u << 2;
inline constexpr uint16_t aeth = 1u << 3;
inline constexpr uint16_t atomic_ack_eth = 1u << 4;
inline constexpr uint16_t immdt = 1u << 5;
inline constexpr uint16_t xrceth = 1u << 6;  // XRC requests: the SRQ the message goes to
}  // namespace hdr

inline constexpr uint32_t kBthBytes = 12;
inline constexpr uint32_t kDethBytes = 8;
inline constexpr uint32_t kRethBytes = 16;
inline constexpr uint32_t kAtomicEthBytes = 28;
inline constexpr uint32_t kAethBytes = 4;
inline constexpr uint32_t kAtomicAckEthBytes = 8;
inline constexpr uint32_t kImmDtBytes = 4;
inline constexpr uint32_t kXrcEthBytes = 4;  // 8 reserved bits, the XRC SRQ number (24 bits)

enum class OpKind : uint8_t {
  none,
  send,
  write,
  read_request,
  read_response,
  ack,
  atomic_ack,
  atomic
};

// Position of a packet inside its message.
enum class OpPos : uint8_t { none, first, middle, last, only };

struct OpcodeInfo {
  bool known;
  OpKind kind;
  OpPos pos;
  uint16_t headers;  // hdr::* bits
  bool payload;      // may carry payload
  bool immediate;    // carries ImmDt (delivered to a receive WQE)
  bool request;      // sent by a requester (as opposed to a response)
};

// Table lookup; unknown opcodes give known = false.
const OpcodeInfo& opcode_info(uint8_t op) noexcept;

// Bytes of BTH plus extension headers for `headers`.
constexpr uint32_t header_bytes(uint16_t headers) noexcept {
  return kBthBytes + ((headers & hdr::deth) ? kDethBytes : 0) +
         ((headers & hdr::xrceth) ? kXrcEthBytes : 0) +
         ((headers & hdr::reth) ? kRethBytes : 0) +
         ((headers & hdr::atomic_eth) ? kAtomicEthBytes : 0) +
         ((headers & hdr::aeth) ? kAethBytes : 0) +
         ((headers & hdr::atomic_ack_eth) ? kAtomicAckEthBytes : 0) +
         ((headers & hdr::immdt) ? kImmDtBytes : 0);
}

const char* opcode_name(uint8_t op) noexcept;  // "RC_SEND_ONLY", "UNKNOWN"

}  // namespace rnicdv::sim::pkt
