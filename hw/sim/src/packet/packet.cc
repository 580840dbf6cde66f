// SPDX-License-Identifier: BSD-3-Clause
#include "packet/packet.h"

#include <cstring>

#include "rnicdv/byte_order.h"

namespace rnicdv::sim::pkt {

const char* parse_error_name(ParseError e) noexcept {
  switch (e) {
    case ParseError::none:
      return "none";
    case ParseError::runt:
      return "runt";
    case ParseError::unknown_opcode:
      return "unknown_opcode";
    case ParseError::bad_version:
      return "bad_version";
    case ParseError::bad_pad:
      return "bad_pad";
    case ParseError::unexpected_payload:
      return "unexpected_payload";
    case ParseError::too_long:
      return "too_long";
  }
  return "?";
}

ParseError parse_packet(const uint8_t* data, size_t len, Packet* out) noexcept {
  if (len < kBthBytes) [[unlikely]]
    return ParseError::runt;
  Packet& p = *out;
  p = Packet{};
  // BTH (IBA 9.2.1).
  p.bth.opcode = data[0];
  p.bth.solicited = (data[1] & 0x80) != 0;
  p.bth.mig_req = (data[1] & 0x40) != 0;
  p.bth.pad_count = (data[1] >> 4) & 0x3;
  if ((data[1] & 0x0f) != 0) [[unlikely]]
    return ParseError::bad_version;
  p.bth.pkey = load_be16(data + 2);
  p.bth.dest_qp = load_be24(data + 5);
  p.bth.ack_req = (data[8] & 0x80) != 0;
  p.bth.psn = load_be24(data + 9);

  const OpcodeInfo& info = opcode_info(p.bth.opcode);
  if (!info.known) [[unlikely]]
    return ParseError::unknown_opcode;
  p.headers = info.headers;
  const uint32_t hdr_len = header_bytes(info.headers);
  if (len < hdr_len) [[unlikely]]
    return ParseError::runt;

  const uint8_t* h = data + kBthBytes;
  if (info.headers & hdr::deth) {
    p.deth.qkey = load_be32(h);
    p.deth.src_qp = load_be24(h + 5);
    h += kDethBytes;
  }
  if (info.headers & hdr::xrceth) {
    p.xrc_srqn = load_be24(h + 1);
    h += kXrcEthBytes;
  }
  if (info.headers & hdr::reth) {
    p.reth.va = load_be64(h);
    p.reth.rkey = load_be32(h + 8);
    p.reth.dma_length = load_be32(h + 12);
    h += kRethBytes;
  }
  if (info.headers & hdr::atomic_eth) {
    p.atomic.va = load_be64(h);
    p.atomic.rkey = load_be32(h + 8);
    p.atomic.swap_add = load_be64(h + 12);
    p.atomic.compare = load_be64(h + 20);
    h += kAtomicEthBytes;
  }
  if (info.headers & hdr::aeth) {
    p.aeth.syndrome = h[0];
    p.aeth.msn = load_be24(h + 1);
    h += kAethBytes;
  }
  if (info.headers & hdr::atomic_ack_eth) {
    p.atomic_orig = load_be64(h);
    h += kAtomicAckEthBytes;
  }
  if (info.headers & hdr::immdt) {
    p.imm = load_be32(h);
    h += kImmDtBytes;
  }

  const size_t body = len - hdr_len;  // payload + pad
  if (body < p.bth.pad_count || (body & 3) != 0) [[unlikely]]
    return ParseError::bad_pad;
  const size_t payload_len = body - p.bth.pad_count;
  if (!info.payload && body != 0) [[unlikely]]
    return ParseError::unexpected_payload;
  if (payload_len > kMaxPayload) [[unlikely]]
    return ParseError::too_long;
  p.payload = data + hdr_len;
  p.payload_len = static_cast<uint32_t>(payload_len);
  return ParseError::none;
}

size_t build_headers(const Packet& p, uint8_t* buf) noexcept {
  const OpcodeInfo& info = opcode_info(p.bth.opcode);
  if (!info.known) return 0;
  buf[0] = p.bth.opcode;
  buf[1] = static_cast<uint8_t>((p.bth.solicited ? 0x80 : 0) | (p.bth.mig_req ? 0x40 : 0));
  store_be16(buf + 2, p.bth.pkey);
  buf[4] = 0;
  store_be24(buf + 5, p.bth.dest_qp & 0xffffff);
  buf[8] = p.bth.ack_req ? 0x80 : 0;
  store_be24(buf + 9, p.bth.psn & 0xffffff);
  uint8_t* h = buf + kBthBytes;
  if (info.headers & hdr::deth) {
    store_be32(h, p.deth.qkey);
    h[4] = 0;
    store_be24(h + 5, p.deth.src_qp & 0xffffff);
    h += kDethBytes;
  }
  if (info.headers & hdr::xrceth) {
    h[0] = 0;
    store_be24(h + 1, p.xrc_srqn & 0xffffff);
    h += kXrcEthBytes;
  }
  if (info.headers & hdr::reth) {
    store_be64(h, p.reth.va);
    store_be32(h + 8, p.reth.rkey);
    store_be32(h + 12, p.reth.dma_length);
    h += kRethBytes;
  }
  if (info.headers & hdr::atomic_eth) {
    store_be64(h, p.atomic.va);
    store_be32(h + 8, p.atomic.rkey);
    store_be64(h + 12, p.atomic.swap_add);
    store_be64(h + 20, p.atomic.compare);
    h += kAtomicEthBytes;
  }
  if (info.headers & hdr::aeth) {
    h[0] = p.aeth.syndrome;
    store_be24(h + 1, p.aeth.msn & 0xffffff);
    h += kAethBytes;
  }
  if (info.headers & hdr::atomic_ack_eth) {
    store_be64(h, p.atomic_orig);
    h += kAtomicAckEthBytes;
  }
  if (info.headers & hdr::immdt) {
    store_be32(h, p.imm);
    h += kImmDtBytes;
  }
  return static_cast<size_t>(h - buf);
}

size_t finish_packet(uint8_t* buf, size_t header_len, uint32_t payload_len) noexcept {
  // PadCnt makes payload + pad a multiple of four bytes (IBA 9.2.1.3); pad bytes are zero.
  const uint32_t pad = (4 - (payload_len & 3)) & 3;
  buf[1] = static_cast<uint8_t>((buf[1] & 0xcf) | (pad << 4));
  std::memset(buf + header_len + payload_len, 0, pad);
  return header_len + payload_len + pad;
}

size_t build_packet(const Packet& p, uint8_t* buf, size_t cap) noexcept {
  const OpcodeInfo& info = opcode_info(p.bth.opcode);
  if (!info.known || p.payload_len > kMaxPayload) return 0;
  const size_t need = header_bytes(info.headers) + p.payload_len + 3;
  if (need > cap) return 0;
  const size_t hl = build_headers(p, buf);
  if (p.payload_len) std::memcpy(buf + hl, p.payload, p.payload_len);
  return finish_packet(buf, hl, p.payload_len);
}

}  // namespace rnicdv::sim::pkt
