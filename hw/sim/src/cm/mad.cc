// SPDX-License-Identifier: BSD-3-Clause
// CM MAD encoding and decoding. Offsets below are within the 232-byte MAD data (add 24 for the
// offset in the MAD); a mask names the bits of its byte (IBA "Byte[Bit]", MSB first), exactly
// as IBA 12.6 (Tables 106-113) gives them.
#include "cm/mad.h"

#include <algorithm>
#include <bit>
#include <concepts>
#include <cstring>
#include <type_traits>

#include "rnicdv/byte_order.h"

namespace rnicdv::sim::cm {
namespace {

// ---- Fields, declared once -------------------------------------------------------------
// Each layout below lists every field once, as IBA's table gives it; encoding and decoding
// both walk that one list (in the manner of Linux's include/rdma/ibta_vol1_c12.h, where a
// field is its offset, mask and width).

// `bytes` big-endian bytes at byte `at`. `shift`: the field is the high bits of that word
// (the 20-bit flow label in the top of a 32-bit word).
struct Be {
  uint16_t at;
  uint8_t bytes;
  uint8_t shift = 0;
};
// The bits of `mask` in byte `at` (IBA "Byte[Bit]", MSB first); values above `max` are
// clamped both ways (a hostile length never reaches a consumer).
struct Bits {
  uint16_t at;
  uint8_t mask;
  uint8_t max = 0xff;
};
// A byte array at byte `at`, copied as it is (GIDs, private data, ARI).
struct Raw {
  uint16_t at;
};

struct Encoder {
  uint8_t* d;
  template <class T>
  void operator()(Be f, const T& v) const noexcept {
    store_be(d + f.at, f.bytes, static_cast<uint64_t>(v) << f.shift);
  }
  template <class T>
  void operator()(Bits f, const T& v) const noexcept {
    const auto value = static_cast<uint8_t>(std::min<uint32_t>(v, f.max));
    const auto shifted = static_cast<uint8_t>(value << std::countr_zero(f.mask));
    d[f.at] = static_cast<uint8_t>((d[f.at] & ~f.mask) | (shifted & f.mask));
  }
  template <size_t N>
  void operator()(Raw f, const std::array<uint8_t, N>& v) const noexcept {
    std::memcpy(d + f.at, v.data(), N);
  }
};

struct Decoder {
  const uint8_t* d;
  template <class T>
  void operator()(Be f, T& v) const noexcept {
    v = static_cast<T>(load_be(d + f.at, f.bytes) >> f.shift);
  }
  template <class T>
  void operator()(Bits f, T& v) const noexcept {
    const auto value = static_cast<uint8_t>((d[f.at] & f.mask) >> std::countr_zero(f.mask));
    v = static_cast<T>(std::min(value, f.max));
  }
  template <size_t N>
  void operator()(Raw f, std::array<uint8_t, N>& v) const noexcept {
    std::memcpy(v.data(), d + f.at, N);
  }
};

template <class M, class T>
concept Layout = std::same_as<std::remove_const_t<M>, T>;

// ---- Layouts (offsets within the 232-byte MAD data, add 24 for the MAD) -------------------

template <Layout<ReqMsg> M, class F>
void fields(M& m, F&& f) noexcept {  // IBA Table 106
  f(Be{0, 4}, m.local_comm_id);
  f(Be{8, 8}, m.service_id);
  f(Be{16, 8}, m.local_ca_guid);
  f(Be{28, 4}, m.local_qkey);
  f(Be{32, 3}, m.local_qpn);
  f(Be{35, 1}, m.responder_resources);
  f(Be{36, 3}, m.local_eecn);
  f(Be{39, 1}, m.initiator_depth);
  f(Be{40, 3}, m.remote_eecn);
  f(Bits{43, 0xf8}, m.remote_cm_response_timeout);
  f(Bits{43, 0x06}, m.transport_type);
  f(Bits{43, 0x01}, m.e2e_flow_control);
  f(Be{44, 3}, m.starting_psn);
  f(Bits{47, 0xf8}, m.local_cm_response_timeout);
  f(Bits{47, 0x07}, m.retry_count);
  f(Be{48, 2}, m.pkey);
  f(Bits{50, 0xf0}, m.path_mtu);
  f(Bits{50, 0x08}, m.rdc_exists);
  f(Bits{50, 0x07}, m.rnr_retry_count);
  f(Bits{51, 0xf0}, m.max_cm_retries);
  f(Bits{51, 0x08}, m.srq);
  f(Bits{51, 0x07}, m.extended_transport_type);
  f(Be{52, 2}, m.primary_local_lid);
  f(Be{54, 2}, m.primary_remote_lid);
  f(Raw{56}, m.primary_local_gid);
  f(Raw{72}, m.primary_remote_gid);
  // Flow label: the top 20 bits of the 32-bit word at 88 (before the packet rate, which
  // shares its last byte).
  f(Be{88, 4, 12}, m.primary_flow_label);
  f(Bits{91, 0x3f}, m.primary_packet_rate);
  f(Be{92, 1}, m.primary_traffic_class);
  f(Be{93, 1}, m.primary_hop_limit);
  f(Bits{94, 0xf0}, m.primary_sl);
  f(Bits{94, 0x08}, m.primary_subnet_local);
  f(Bits{95, 0xf8}, m.primary_local_ack_timeout);
  f(Raw{140}, m.private_data);
}

template <Layout<MraMsg> M, class F>
void fields(M& m, F&& f) noexcept {  // IBA Table 107
  f(Be{0, 4}, m.local_comm_id);
  f(Be{4, 4}, m.remote_comm_id);
  f(Bits{8, 0xc0}, m.message_mraed);
  f(Bits{9, 0xf8}, m.service_timeout);
  f(Raw{10}, m.private_data);
}

template <Layout<RejMsg> M, class F>
void fields(M& m, F&& f) noexcept {  // IBA Table 108
  f(Be{0, 4}, m.local_comm_id);
  f(Be{4, 4}, m.remote_comm_id);
  f(Bits{8, 0xc0}, m.message_rejected);
  // The ARI is always its 72 bytes on the wire; a longer length is clamped.
  f(Bits{9, 0xfe, kRejAriMax}, m.reject_info_length);
  f(Be{10, 2}, m.reason);
  f(Raw{12}, m.ari);
  f(Raw{84}, m.private_data);
}

template <Layout<RepMsg> M, class F>
void fields(M& m, F&& f) noexcept {  // IBA Table 110
  f(Be{0, 4}, m.local_comm_id);
  f(Be{4, 4}, m.remote_comm_id);
  f(Be{8, 4}, m.local_qkey);
  f(Be{12, 3}, m.local_qpn);
  f(Be{16, 3}, m.local_eecn);
  f(Be{20, 3}, m.starting_psn);
  f(Be{24, 1}, m.responder_resources);
  f(Be{25, 1}, m.initiator_depth);
  f(Bits{26, 0xf8}, m.target_ack_delay);
  f(Bits{26, 0x06}, m.failover_accepted);
  f(Bits{26, 0x01}, m.e2e_flow_control);
  f(Bits{27, 0xe0}, m.rnr_retry_count);
  f(Bits{27, 0x10}, m.srq);
  f(Be{28, 8}, m.local_ca_guid);
  f(Raw{36}, m.private_data);
}

template <Layout<RtuMsg> M, class F>
void fields(M& m, F&& f) noexcept {  // IBA Table 111
  f(Be{0, 4}, m.local_comm_id);
  f(Be{4, 4}, m.remote_comm_id);
  f(Raw{8}, m.private_data);
}

template <Layout<DreqMsg> M, class F>
void fields(M& m, F&& f) noexcept {  // IBA Table 112
  f(Be{0, 4}, m.local_comm_id);
  f(Be{4, 4}, m.remote_comm_id);
  f(Be{8, 3}, m.remote_qpn);
  f(Raw{12}, m.private_data);
}

template <Layout<DrepMsg> M, class F>
void fields(M& m, F&& f) noexcept {  // IBA Table 113
  f(Be{0, 4}, m.local_comm_id);
  f(Be{4, 4}, m.remote_comm_id);
  f(Raw{8}, m.private_data);
}

template <Layout<SidrReqMsg> M, class F>
void fields(M& m, F&& f) noexcept {  // IBA Table 119
  f(Be{0, 4}, m.request_id);
  f(Be{4, 2}, m.pkey);
  f(Be{8, 8}, m.service_id);
  f(Raw{16}, m.private_data);
}

template <Layout<SidrRepMsg> M, class F>
void fields(M& m, F&& f) noexcept {  // IBA Table 120
  f(Be{0, 4}, m.request_id);
  f(Be{4, 1}, m.status);
  f(Bits{5, 0xff, kSidrRepInfo}, m.info_length);
  f(Be{8, 3}, m.qpn);
  f(Be{12, 8}, m.service_id);
  f(Be{20, 4}, m.qkey);
  f(Raw{24}, m.info);
  f(Raw{96}, m.private_data);
}

// The MAD common header (IBA 13.4.2, Figure 146), offsets within the MAD.
template <Layout<MadHeader> M, class F>
void fields(M& h, F&& f) noexcept {
  f(Be{0, 1}, h.base_version);
  f(Be{1, 1}, h.mgmt_class);
  f(Be{2, 1}, h.class_version);
  f(Be{3, 1}, h.method);
  f(Be{4, 2}, h.status);
  f(Be{6, 2}, h.class_specific);
  f(Be{8, 8}, h.tid);
  f(Be{16, 2}, h.attr_id);
  f(Be{20, 4}, h.attr_mod);
}

// rdma_cm's header in the private data (Linux cma.c struct cma_hdr). Each address takes 16
// bytes: an IPv6 one whole, an IPv4 one in the last 4 after 12 zero bytes (not the ::ffff-mapped
// form; cma_format_hdr). CmaWire holds them as the wire has them.
struct CmaWire {
  uint8_t version = 0;
  uint8_t ip_version = 0;
  uint16_t src_port = 0;
  std::array<uint8_t, 16> src{};
  std::array<uint8_t, 16> dst{};
};
template <Layout<CmaWire> M, class F>
void fields(M& h, F&& f) noexcept {
  f(Be{0, 1}, h.version);
  f(Bits{1, 0xf0}, h.ip_version);
  f(Be{2, 2}, h.src_port);
  f(Raw{4}, h.src);
  f(Raw{20}, h.dst);
}

template <class Msg>
void encode(uint8_t* d, const Msg& m) noexcept {
  fields(m, Encoder{d});
}

template <class Msg>
void decode(const uint8_t* d, Msg& m) noexcept {
  fields(m, Decoder{d});
}

// Offsets at the end of each message's data, so a layout mistake cannot write past the MAD.
static_assert(140 + kReqPrivate == kMadDataSize);
static_assert(10 + kMraPrivate == kMadDataSize);
static_assert(84 + kRejPrivate == kMadDataSize && 12 + kRejAriMax == 84);
static_assert(36 + kRepPrivate == kMadDataSize);
static_assert(8 + kRtuPrivate == kMadDataSize);
static_assert(12 + kDreqPrivate == kMadDataSize);
static_assert(8 + kDrepPrivate == kMadDataSize);
static_assert(16 + kSidrReqPrivate == kMadDataSize);
static_assert(96 + kSidrRepPrivate == kMadDataSize && 24 + kSidrRepInfo == 96);

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
constexpr AttrId attr_of(const SidrReqMsg&) {
  return AttrId::sidr_req;
}
constexpr AttrId attr_of(const SidrRepMsg&) {
  return AttrId::sidr_rep;
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
  MadHeader hdr = mad.header;
  hdr.attr_id =
      std::visit([](const auto& m) { return static_cast<uint16_t>(attr_of(m)); }, mad.body);
  encode(h, hdr);
  std::visit([&](const auto& m) { encode(h + kMadHeaderSize, m); }, mad.body);
  return out;
}

Result<CmMad> decode_cm_mad(std::span<const uint8_t> bytes) {
  if (bytes.size() != kMadSize)
    return Status::error(Errc::protocol_error, "MAD of %zu bytes, expected %zu", bytes.size(),
                         kMadSize);
  const uint8_t* h = bytes.data();
  MadHeader hdr;
  decode(h, hdr);

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
    case AttrId::sidr_req:
      return decode_body<SidrReqMsg>(hdr, d);
    case AttrId::sidr_rep:
      return decode_body<SidrRepMsg>(hdr, d);
    default:
      return Status::error(Errc::unsupported, "CM attribute 0x%04x (%s) not supported", hdr.attr_id,
                           attr_name(hdr.attr_id));
  }
}

namespace {
std::array<uint8_t, 16> cma_address(const hw::IpAddress& a, bool v4) noexcept {
  std::array<uint8_t, 16> raw = a.bytes;
  if (v4) raw[10] = raw[11] = 0;  // 12 zero bytes, then the IPv4 address
  return raw;
}
}  // namespace

void encode_cma_header(const CmaHeader& h, uint8_t* out) noexcept {
  std::memset(out, 0, kCmaHeaderSize);
  const bool v4 = h.src.is_v4();
  CmaWire w;
  w.version = h.version;
  w.ip_version = v4 ? 4 : 6;
  w.src_port = h.src_port;
  w.src = cma_address(h.src, v4);
  w.dst = cma_address(h.dst, v4);
  encode(out, w);
}

Result<CmaHeader> decode_cma_header(std::span<const uint8_t> bytes) {
  if (bytes.size() < kCmaHeaderSize)
    return Status::error(Errc::protocol_error, "cma header of %zu bytes, expected %zu",
                         bytes.size(), kCmaHeaderSize);
  CmaWire w;
  decode(bytes.data(), w);
  if (w.version != 0)
    return Status::error(Errc::protocol_error, "cma header version %u, expected 0", w.version);
  CmaHeader h;
  h.version = w.version;
  h.src_port = w.src_port;
  if (w.ip_version == 4) {
    // Linux reads the last 4 bytes of each and ignores the 12 before them (cma_save_ip4_info).
    h.src = hw::IpAddress::v4(load_be(w.src.data() + 12, 4));
    h.dst = hw::IpAddress::v4(load_be(w.dst.data() + 12, 4));
  } else if (w.ip_version == 6) {
    h.src = hw::IpAddress::from_bytes(w.src.data());
    h.dst = hw::IpAddress::from_bytes(w.dst.data());
    if (h.src.is_v4() || h.dst.is_v4())
      return Status::error(Errc::protocol_error,
                           "cma header of IP version 6 holds an IPv4-mapped address (%s, %s)",
                           h.src.to_string().c_str(), h.dst.to_string().c_str());
  } else {
    return Status::error(Errc::protocol_error, "cma header IP version %u, expected 4 or 6",
                         w.ip_version);
  }
  return h;
}

}  // namespace rnicdv::sim::cm
