// SPDX-License-Identifier: BSD-3-Clause
#include "packet/opcode.h"

#include <array>

namespace rnicdv::sim::pkt {
namespace {

struct Entry {
  const char* name;
  OpcodeInfo info;
};

constexpr OpcodeInfo op(OpKind kind, OpPos pos, uint16_t headers, bool payload, bool imm,
                        bool request) {
  return OpcodeInfo{true, kind, pos, headers, payload, imm, request};
}

constexpr std::array<Entry, 256> make_table() {
  std::array<Entry, 256> t{};
  for (auto& e : t) e = Entry{"UNKNOWN", OpcodeInfo{}};
  using K = OpKind;
  using P = OpPos;
  t[opcode::rc_send_first] = {"RC_SEND_FIRST", op(K::send, P::first, 0, true, false, true)};
  t[opcode::rc_send_middle] = {"RC_SEND_MIDDLE", op(K::send, P::middle, 0, true, false, true)};
  t[opcode::rc_send_last] = {"RC_SEND_LAST", op(K::send, P::last, 0, true, false, true)};
  t[opcode::rc_send_last_imm] = {"RC_SEND_LAST_IMM",
                                 op(K::send, P::last, hdr::immdt, true, true, true)};
  t[opcode::rc_send_only] = {"RC_SEND_ONLY", op(K::send, P::only, 0, true, false, true)};
  t[opcode::rc_send_only_imm] = {"RC_SEND_ONLY_IMM",
                                 op(K::send, P::only, hdr::immdt, true, true, true)};
  t[opcode::rc_write_first] = {"RC_WRITE_FIRST",
                               op(K::write, P::first, hdr::reth, true, false, true)};
  t[opcode::rc_write_middle] = {"RC_WRITE_MIDDLE", op(K::write, P::middle, 0, true, false, true)};
  t[opcode::rc_write_last] = {"RC_WRITE_LAST", op(K::write, P::last, 0, true, false, true)};
  t[opcode::rc_write_last_imm] = {"RC_WRITE_LAST_IMM",
                                  op(K::write, P::last, hdr::immdt, true, true, true)};
  t[opcode::rc_write_only] = {"RC_WRITE_ONLY", op(K::write, P::only, hdr::reth, true, false, true)};
  t[opcode::rc_write_only_imm] = {"RC_WRITE_ONLY_IMM",
                                  op(K::write, P::only, hdr::reth | hdr::immdt, true, true, true)};
  t[opcode::rc_read_request] = {"RC_READ_REQUEST",
                                op(K::read_request, P::only, hdr::reth, false, false, true)};
  t[opcode::rc_read_response_first] = {
      "RC_READ_RESPONSE_FIRST", op(K::read_response, P::first, hdr::aeth, true, false, false)};
  t[opcode::rc_read_response_middle] = {"RC_READ_RESPONSE_MIDDLE",
                                        op(K::read_response, P::middle, 0, true, false, false)};
  t[opcode::rc_read_response_last] = {"RC_READ_RESPONSE_LAST",
                                      op(K::read_response, P::last, hdr::aeth, true, false, false)};
  t[opcode::rc_read_response_only] = {"RC_READ_RESPONSE_ONLY",
                                      op(K::read_response, P::only, hdr::aeth, true, false, false)};
  t[opcode::rc_acknowledge] = {"RC_ACKNOWLEDGE",
                               op(K::ack, P::only, hdr::aeth, false, false, false)};
  t[opcode::rc_atomic_acknowledge] = {
      "RC_ATOMIC_ACKNOWLEDGE",
      op(K::atomic_ack, P::only, hdr::aeth | hdr::atomic_ack_eth, false, false, false)};
  t[opcode::rc_compare_swap] = {"RC_COMPARE_SWAP",
                                op(K::atomic, P::only, hdr::atomic_eth, false, false, true)};
  t[opcode::rc_fetch_add] = {"RC_FETCH_ADD",
                             op(K::atomic, P::only, hdr::atomic_eth, false, false, true)};
  // UC: the same headers as RC's SEND and WRITE, transport bits 001.
  const char* const uc_names[] = {"UC_SEND_FIRST",     "UC_SEND_MIDDLE",   "UC_SEND_LAST",
                                  "UC_SEND_LAST_IMM",  "UC_SEND_ONLY",     "UC_SEND_ONLY_IMM",
                                  "UC_WRITE_FIRST",    "UC_WRITE_MIDDLE",  "UC_WRITE_LAST",
                                  "UC_WRITE_LAST_IMM", "UC_WRITE_ONLY",    "UC_WRITE_ONLY_IMM"};
  for (uint8_t i = 0; i <= opcode::rc_write_only_imm; ++i)
    t[opcode::uc_base + i] = {uc_names[i], t[i].info};
  // XRC: RC's table at 0xa0, each request with an XRCETH; the responses carry none.
  const char* const xrc_names[] = {
      "XRC_SEND_FIRST",          "XRC_SEND_MIDDLE",          "XRC_SEND_LAST",
      "XRC_SEND_LAST_IMM",       "XRC_SEND_ONLY",            "XRC_SEND_ONLY_IMM",
      "XRC_WRITE_FIRST",         "XRC_WRITE_MIDDLE",         "XRC_WRITE_LAST",
      "XRC_WRITE_LAST_IMM",      "XRC_WRITE_ONLY",           "XRC_WRITE_ONLY_IMM",
      "XRC_READ_REQUEST",        "XRC_READ_RESPONSE_FIRST",  "XRC_READ_RESPONSE_MIDDLE",
      "XRC_READ_RESPONSE_LAST",  "XRC_READ_RESPONSE_ONLY",   "XRC_ACKNOWLEDGE",
      "XRC_ATOMIC_ACKNOWLEDGE",  "XRC_COMPARE_SWAP",         "XRC_FETCH_ADD"};
  for (uint8_t i = 0; i <= opcode::rc_fetch_add; ++i) {
    OpcodeInfo info = t[i].info;
    if (info.request) info.headers |= hdr::xrceth;
    t[opcode::xrc_base + i] = {xrc_names[i], info};
  }
  t[opcode::ud_send_only] = {"UD_SEND_ONLY", op(K::send, P::only, hdr::deth, true, false, true)};
  t[opcode::ud_send_only_imm] = {"UD_SEND_ONLY_IMM",
                                 op(K::send, P::only, hdr::deth | hdr::immdt, true, true, true)};
  return t;
}

constexpr std::array<Entry, 256> kTable = make_table();

}  // namespace

const OpcodeInfo& opcode_info(uint8_t op) noexcept {
  return kTable[op].info;
}
const char* opcode_name(uint8_t op) noexcept {
  return kTable[op].name;
}

}  // namespace rnicdv::sim::pkt
