// SPDX-License-Identifier: BSD-3-Clause
// CM MAD encoding and decoding. Offsets below are within the 232-byte MAD data (add 24 for the
// offset in the MAD); a mask names the bits of its byte (IBA "Byte[Bit]", MSB first), exactly
// as IBA 12.6 (Tables 106-113) gives them.
#include "cm/mad.h"

#include "rnicdv/byte_order.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace rnicdv::sim::cm {
namespace {

// ---- Field access -----------------------------------------------------------------------

// A sub-byte field: the bits of `mask` in byte `p[0]`.
uint8_t get_bits(const uint8_t* p, uint8_t mask) noexcept {
  return static_cast<uint8_t>((p[0] & mask) >> std::countr_zero(mask));
}

void set_bits(uint8_t* p, uint8_t mask, uint32_t value) noexcept {
  const auto shifted = static_cast<uint8_t>(value << std::countr_zero(mask));
  p[0] = static_cast<uint8_t>((p[0] & ~mask) | (shifted & mask));
}

template <size_t N>
void copy_out(uint8_t* dst, const std::array<uint8_t, N>& src) noexcept {
  std::memcpy(dst, src.data(), N);
}

template <size_t N>
void copy_in(std::array<uint8_t, N>& dst, const uint8_t* src) noexcept {
  std::memcpy(dst.data(), src, N);
}

// ---- Per-message layouts (d = the MAD's data, 232 bytes) -----------------------------------

void encode(uint8_t* d, const ReqMsg& m) noexcept {  // IBA Table 106
  store_be(d + 0, 4, m.local_comm_id);
  store_be64(d + 8, m.service_id);
  store_be64(d + 16, m.local_ca_guid);
  store_be(d + 28, 4, m.local_qkey);
  store_be(d + 32, 3, m.local_qpn);
  d[35] = m.responder_resources;
  store_be(d + 36, 3, m.local_eecn);
  d[39] = m.initiator_depth;
  store_be(d + 40, 3, m.remote_eecn);
  set_bits(d + 43, 0xf8, m.remote_cm_response_timeout);
  set_bits(d + 43, 0x06, m.transport_type);
  set_bits(d + 43, 0x01, m.e2e_flow_control);
  store_be(d + 44, 3, m.starting_psn);
  set_bits(d + 47, 0xf8, m.local_cm_response_timeout);
  set_bits(d + 47, 0x07, m.retry_count);
  store_be(d + 48, 2, m.pkey);
  set_bits(d + 50, 0xf0, m.path_mtu);
  set_bits(d + 50, 0x08, m.rdc_exists);
  set_bits(d + 50, 0x07, m.rnr_retry_count);
  set_bits(d + 51, 0xf0, m.max_cm_retries);
  set_bits(d + 51, 0x08, m.srq);
  set_bits(d + 51, 0x07, m.extended_transport_type);
  store_be(d + 52, 2, m.primary_local_lid);
  store_be(d + 54, 2, m.primary_remote_lid);
  copy_out(d + 56, m.primary_local_gid);
  copy_out(d + 72, m.primary_remote_gid);
  // Flow label: the top 20 bits of the 32-bit word at 88; packet rate: low 6 bits of byte 91.
  store_be(d + 88, 4, (m.primary_flow_label & 0xfffffu) << 12);
  set_bits(d + 91, 0x3f, m.primary_packet_rate);
  d[92] = m.primary_traffic_class;
  d[93] = m.primary_hop_limit;
  set_bits(d + 94, 0xf0, m.primary_sl);
  set_bits(d + 94, 0x08, m.primary_subnet_local);
  set_bits(d + 95, 0xf8, m.primary_local_ack_timeout);
  copy_out(d + 140, m.private_data);
}

void decode(const uint8_t* d, ReqMsg& m) noexcept {
  m.local_comm_id = load_be(d + 0, 4);
  m.service_id = load_be64(d + 8);
  m.local_ca_guid = load_be64(d + 16);
  m.local_qkey = load_be(d + 28, 4);
  m.local_qpn = load_be(d + 32, 3);
  m.responder_resources = d[35];
  m.local_eecn = load_be(d + 36, 3);
  m.initiator_depth = d[39];
  m.remote_eecn = load_be(d + 40, 3);
  m.remote_cm_response_timeout = get_bits(d + 43, 0xf8);
  m.transport_type = get_bits(d + 43, 0x06);
  m.e2e_flow_control = get_bits(d + 43, 0x01);
  m.starting_psn = load_be(d + 44, 3);
  m.local_cm_response_timeout = get_bits(d + 47, 0xf8);
  m.retry_count = get_bits(d + 47, 0x07);
  m.pkey = static_cast<uint16_t>(load_be(d + 48, 2));
  m.path_mtu = get_bits(d + 50, 0xf0);
  m.rdc_exists = get_bits(d + 50, 0x08);
  m.rnr_retry_count = get_bits(d + 50, 0x07);
  m.max_cm_retries = get_bits(d + 51, 0xf0);
  m.srq = get_bits(d + 51, 0x08);
  m.extended_transport_type = get_bits(d + 51, 0x07);
  m.primary_local_lid = static_cast<uint16_t>(load_be(d + 52, 2));
  m.primary_remote_lid = static_cast<uint16_t>(load_be(d + 54, 2));
  copy_in(m.primary_local_gid, d + 56);
  copy_in(m.primary_remote_gid, d + 72);
  m.primary_flow_label = load_be(d + 88, 4) >> 12;
  m.primary_packet_rate = get_bits(d + 91, 0x3f);
  m.primary_traffic_class = d[92];
  m.primary_hop_limit = d[93];
  m.primary_sl = get_bits(d + 94, 0xf0);
  m.primary_subnet_local = get_bits(d + 94, 0x08);
  m.primary_local_ack_timeout = get_bits(d + 95, 0xf8);
  copy_in(m.private_data, d + 140);
}

void encode(uint8_t* d, const MraMsg& m) noexcept {  // IBA Table 107
  store_be(d + 0, 4, m.local_comm_id);
  store_be(d + 4, 4, m.remote_comm_id);
  set_bits(d + 8, 0xc0, m.message_mraed);
  set_bits(d + 9, 0xf8, m.service_timeout);
  copy_out(d + 10, m.private_data);
}

void decode(const uint8_t* d, MraMsg& m) noexcept {
  m.local_comm_id = load_be(d + 0, 4);
  m.remote_comm_id = load_be(d + 4, 4);
  m.message_mraed = get_bits(d + 8, 0xc0);
  m.service_timeout = get_bits(d + 9, 0xf8);
  copy_in(m.private_data, d + 10);
}

void encode(uint8_t* d, const RejMsg& m) noexcept {  // IBA Table 108
  store_be(d + 0, 4, m.local_comm_id);
  store_be(d + 4, 4, m.remote_comm_id);
  set_bits(d + 8, 0xc0, m.message_rejected);
  set_bits(d + 9, 0xfe, std::min<uint8_t>(m.reject_info_length, kRejAriMax));
  store_be(d + 10, 2, m.reason);
  copy_out(d + 12, m.ari);
  copy_out(d + 84, m.private_data);
}

void decode(const uint8_t* d, RejMsg& m) noexcept {
  m.local_comm_id = load_be(d + 0, 4);
  m.remote_comm_id = load_be(d + 4, 4);
  m.message_rejected = get_bits(d + 8, 0xc0);
  // A hostile length above the ARI field is clamped: the ARI bytes are always the 72 on the
  // wire, and no consumer reads past them.
  m.reject_info_length = std::min<uint8_t>(get_bits(d + 9, 0xfe), kRejAriMax);
  m.reason = static_cast<uint16_t>(load_be(d + 10, 2));
  copy_in(m.ari, d + 12);
  copy_in(m.private_data, d + 84);
}

void encode(uint8_t* d, const RepMsg& m) noexcept {  // IBA Table 110
  store_be(d + 0, 4, m.local_comm_id);
  store_be(d + 4, 4, m.remote_comm_id);
  store_be(d + 8, 4, m.local_qkey);
  store_be(d + 12, 3, m.local_qpn);
  store_be(d + 16, 3, m.local_eecn);
  store_be(d + 20, 3, m.starting_psn);
  d[24] = m.responder_resources;
  d[25] = m.initiator_depth;
  set_bits(d + 26, 0xf8, m.target_ack_delay);
  set_bits(d + 26, 0x06, m.failover_accepted);
  set_bits(d + 26, 0x01, m.e2e_flow_control);
  set_bits(d + 27, 0xe0, m.rnr_retry_count);
  set_bits(d + 27, 0x10, m.srq);
  store_be64(d + 28, m.local_ca_guid);
  copy_out(d + 36, m.private_data);
}

void decode(const uint8_t* d, RepMsg& m) noexcept {
  m.local_comm_id = load_be(d + 0, 4);
  m.remote_comm_id = load_be(d + 4, 4);
  m.local_qkey = load_be(d + 8, 4);
  m.local_qpn = load_be(d + 12, 3);
  m.local_eecn = load_be(d + 16, 3);
  m.starting_psn = load_be(d + 20, 3);
  m.responder_resources = d[24];
  m.initiator_depth = d[25];
  m.target_ack_delay = get_bits(d + 26, 0xf8);
  m.failover_accepted = get_bits(d + 26, 0x06);
  m.e2e_flow_control = get_bits(d + 26, 0x01);
  m.rnr_retry_count = get_bits(d + 27, 0xe0);
  m.srq = get_bits(d + 27, 0x10);
  m.local_ca_guid = load_be64(d + 28);
  copy_in(m.private_data, d + 36);
}

void encode(uint8_t* d, const RtuMsg& m) noexcept {  // IBA Table 111
  store_be(d + 0, 4, m.local_comm_id);
  store_be(d + 4, 4, m.remote_comm_id);
  copy_out(d + 8, m.private_data);
}

void decode(const uint8_t* d, RtuMsg& m) noexcept {
  m.local_comm_id = load_be(d + 0, 4);
  m.remote_comm_id = load_be(d + 4, 4);
  copy_in(m.private_data, d + 8);
}

void encode(uint8_t* d, const DreqMsg& m) noexcept {  // IBA Table 112
  store_be(d + 0, 4, m.local_comm_id);
  store_be(d + 4, 4, m.remote_comm_id);
  store_be(d + 8, 3, m.remote_qpn);
  copy_out(d + 12, m.private_data);
}

void decode(const uint8_t* d, DreqMsg& m) noexcept {
  m.local_comm_id = load_be(d + 0, 4);
  m.remote_comm_id = load_be(d + 4, 4);
  m.remote_qpn = load_be(d + 8, 3);
  copy_in(m.private_data, d + 12);
}

void encode(uint8_t* d, const DrepMsg& m) noexcept {  // IBA Table 113
  store_be(d + 0, 4, m.local_comm_id);
  store_be(d + 4, 4, m.remote_comm_id);
  copy_out(d + 8, m.private_data);
}

void decode(const uint8_t* d, DrepMsg& m) noexcept {
  m.local_comm_id = load_be(d + 0, 4);
  m.remote_comm_id = load_be(d + 4, 4);
  copy_in(m.private_data, d + 8);
}

// Offsets at the end of each message's data, so a layout mistake cannot write past the MAD.
static_assert(140 + kReqPrivate == kMadDataSize);
static_assert(10 + kMraPrivate == kMadDataSize);
static_assert(84 + kRejPrivate == kMadDataSize && 12 + kRejAriMax == 84);
static_assert(36 + kRepPrivate == kMadDataSize);
static_assert(8 + kRtuPrivate == kMadDataSize);
static_assert(12 + kDreqPrivate == kMadDataSize);
static_assert(8 + kDrepPrivate == kMadDataSize);

constexpr AttrId attr_of(const ReqMsg&) {
  return AttrId::req;
}
constexpr AttrId attr_of(const MraMsg&) {
  return AttrId::mra;
}
constexpr AttrId attr_of(const RejMsg&) {
  return AttrId::rej;
}
constexpr AttrId attr_of(const RepMsg&) {
  return AttrId::rep;
}
constexpr AttrId attr_of(const RtuMsg&) {
  return AttrId::rtu;
}
constexpr AttrId attr_of(const DreqMsg&) {
  return AttrId::dreq;
}
constexpr AttrId attr_of(const DrepMsg&) {
  return AttrId::drep;
}

template <class Msg>
CmMad decode_body(const MadHeader& header, const uint8_t* data) {
  Msg msg;
  decode(data, msg);
  return CmMad{header, msg};
}

}  // namespace

const char* attr_name(uint16_t attr_id) noexcept {
  switch (static_cast<AttrId>(attr_id)) {
    case AttrId::class_port_info:
      return "ClassPortInfo";
    case AttrId::req:
      return "REQ";
    case AttrId::mra:
      return "MRA";
    case AttrId::rej:
      return "REJ";
    case AttrId::rep:
      return "REP";
    case AttrId::rtu:
      return "RTU";
    case AttrId::dreq:
      return "DREQ";
    case AttrId::drep:
      return "DREP";
    case AttrId::sidr_req:
      return "SIDR_REQ";
    case AttrId::sidr_rep:
      return "SIDR_REP";
    case AttrId::lap:
      return "LAP";
    case AttrId::apr:
      return "APR";
  }
  return "attribute";
}

MadBytes encode_cm_mad(const CmMad& mad) noexcept {
  MadBytes out{};
  uint8_t* h = out.data();
  const MadHeader& hdr = mad.header;
  const uint16_t attr =
      std::visit([](const auto& m) { return static_cast<uint16_t>(attr_of(m)); }, mad.body);
  // MAD common header (IBA 13.4.2, Figure 146).
  h[0] = hdr.base_version;
  h[1] = hdr.mgmt_class;
  h[2] = hdr.class_version;
  h[3] = hdr.method;
  store_be(h + 4, 2, hdr.status);
  store_be(h + 6, 2, hdr.class_specific);
  store_be64(h + 8, hdr.tid);
  store_be(h + 16, 2, attr);
  store_be(h + 20, 4, hdr.attr_mod);
  std::visit([&](const auto& m) { encode(h + kMadHeaderSize, m); }, mad.body);
  return out;
}

Result<CmMad> decode_cm_mad(std::span<const uint8_t> bytes) {
  if (bytes.size() != kMadSize)
    return Status::error(Errc::protocol_error, "MAD of %zu bytes, expected %zu", bytes.size(),
                         kMadSize);
  const uint8_t* h = bytes.data();
  MadHeader hdr;
  hdr.base_version = h[0];
  hdr.mgmt_class = h[1];
  hdr.class_version = h[2];
  hdr.method = h[3];
  hdr.status = static_cast<uint16_t>(load_be(h + 4, 2));
  hdr.class_specific = static_cast<uint16_t>(load_be(h + 6, 2));
  hdr.tid = load_be64(h + 8);
  hdr.attr_id = static_cast<uint16_t>(load_be(h + 16, 2));
  hdr.attr_mod = load_be(h + 20, 4);

  if (hdr.base_version != kBaseVersion)
    return Status::error(Errc::protocol_error, "MAD base version %u, expected %u", hdr.base_version,
                         kBaseVersion);
  if (hdr.mgmt_class != kMgmtClassCm)
    return Status::error(Errc::protocol_error, "MAD class 0x%02x is not CM (0x%02x)",
                         hdr.mgmt_class, kMgmtClassCm);
  if (hdr.class_version != kCmClassVersion)
    return Status::error(Errc::protocol_error, "CM class version %u, expected %u",
                         hdr.class_version, kCmClassVersion);
  if (hdr.method != kMethodSend)
    return Status::error(Errc::protocol_error, "CM method 0x%02x, expected Send (0x%02x)",
                         hdr.method, kMethodSend);

  const uint8_t* d = h + kMadHeaderSize;
  switch (static_cast<AttrId>(hdr.attr_id)) {
    case AttrId::req:
      return decode_body<ReqMsg>(hdr, d);
    case AttrId::mra:
      return decode_body<MraMsg>(hdr, d);
    case AttrId::rej:
      return decode_body<RejMsg>(hdr, d);
    case AttrId::rep:
      return decode_body<RepMsg>(hdr, d);
    case AttrId::rtu:
      return decode_body<RtuMsg>(hdr, d);
    case AttrId::dreq:
      return decode_body<DreqMsg>(hdr, d);
    case AttrId::drep:
      return decode_body<DrepMsg>(hdr, d);
    default:
      return Status::error(Errc::unsupported, "CM attribute 0x%04x (%s) not supported", hdr.attr_id,
                           attr_name(hdr.attr_id));
  }
}

void encode_cma_header(const CmaHeader& h, uint8_t* out) noexcept {
  std::memset(out, 0, kCmaHeaderSize);
  out[0] = h.version;
  out[1] = static_cast<uint8_t>(h.ip_version << 4);
  store_be(out + 2, 2, h.src_port);
  // IPv4 sits in the last 4 bytes of each 16-byte address, after 12 zero bytes (not the
  // ::ffff-mapped form; Linux cma.c, cma_format_hdr).
  store_be(out + 4 + 12, 4, h.src_ipv4);
  store_be(out + 20 + 12, 4, h.dst_ipv4);
}

Result<CmaHeader> decode_cma_header(std::span<const uint8_t> bytes) {
  if (bytes.size() < kCmaHeaderSize)
    return Status::error(Errc::protocol_error, "cma header of %zu bytes, expected %zu",
                         bytes.size(), kCmaHeaderSize);
  const uint8_t* p = bytes.data();
  CmaHeader h;
  h.version = p[0];
  h.ip_version = static_cast<uint8_t>(p[1] >> 4);
  if (h.version != 0)
    return Status::error(Errc::protocol_error, "cma header version %u, expected 0", h.version);
  if (h.ip_version != 4)
    return Status::error(Errc::unsupported, "cma header IP version %u, only IPv4 is supported",
                         h.ip_version);
  h.src_port = static_cast<uint16_t>(load_be(p + 2, 2));
  h.src_ipv4 = load_be(p + 4 + 12, 4);
  h.dst_ipv4 = load_be(p + 20 + 12, 4);
  return h;
}

GidBytes ipv4_gid(uint32_t ipv4) noexcept {
  GidBytes g{};
  g[10] = 0xff;
  g[11] = 0xff;
  store_be(g.data() + 12, 4, ipv4);
  return g;
}

}  // namespace rnicdv::sim::cm
