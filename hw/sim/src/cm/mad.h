// SPDX-License-Identifier: BSD-3-Clause
// IB CM messages as 256-byte MADs: encoding and a parser that trusts nothing.
//
// Layouts: the MAD common header (IBA 13.4.2), the CM messages of IBA 12.6 (REQ Table 106,
// MRA 107, REJ 108, REP 110, RTU 111, DREQ 112, DREP 113) and of IBA 12.11 (SIDR_REQ
// Table 119, SIDR_REP Table 120), checked against Linux
// include/rdma/ibta_vol1_c12.h. Every field is big-endian;
// sub-byte fields are masks on their byte, bits numbered MSB first. Reserved bits are written
// as zero and ignored on receipt. The alternate path of a REQ is unused over RoCE: written as
// zeros, not decoded.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <variant>

#include "rnicdv/hw/ip_address.h"
#include "rnicdv/sim/sim.h"
#include "rnicdv/status.h"

namespace rnicdv::sim::cm {

inline constexpr size_t kMadSize = 256;       // IB_MGMT_MAD_SIZE
inline constexpr size_t kMadHeaderSize = 24;  // IB_MGMT_MAD_HDR
inline constexpr size_t kMadDataSize = 232;   // IB_MGMT_MAD_DATA

inline constexpr uint8_t kBaseVersion = 1;
inline constexpr uint8_t kMgmtClassCm = 0x07;     // IB_MGMT_CLASS_CM
inline constexpr uint8_t kCmClassVersion = 2;     // IB_CM_CLASS_VERSION
inline constexpr uint8_t kMethodSend = 0x03;      // every CM message (IBA 12.6.1)
inline constexpr uint32_t kQp1Qkey = 0x80010000;  // IB_QP1_QKEY (IBA 13.5.1)

// CM attribute IDs (IBA 12.6.2, Table 104). The connection messages' are sim.h's CmMessage.
enum class AttrId : uint16_t {
  class_port_info = 0x0001,
  req = static_cast<uint16_t>(CmMessage::req),
  mra = static_cast<uint16_t>(CmMessage::mra),
  rej = static_cast<uint16_t>(CmMessage::rej),
  rep = static_cast<uint16_t>(CmMessage::rep),
  rtu = static_cast<uint16_t>(CmMessage::rtu),
  dreq = static_cast<uint16_t>(CmMessage::dreq),
  drep = static_cast<uint16_t>(CmMessage::drep),
  sidr_req = 0x0017,
  sidr_rep = 0x0018,
  lap = 0x0019,
  apr = 0x001a,
};
const char* attr_name(uint16_t attr_id) noexcept;  // "REQ", "REP", ... or "attribute"

// Private data sizes per message (IBA 12.6).
inline constexpr size_t kReqPrivate = 92;
inline constexpr size_t kMraPrivate = 222;
inline constexpr size_t kRejPrivate = 148;
inline constexpr size_t kRejAriMax = 72;
inline constexpr size_t kRepPrivate = 196;
inline constexpr size_t kRtuPrivate = 224;
inline constexpr size_t kDreqPrivate = 220;
inline constexpr size_t kDrepPrivate = 224;
inline constexpr size_t kSidrReqPrivate = 216;
inline constexpr size_t kSidrRepPrivate = 136;
inline constexpr size_t kSidrRepInfo = 72;  // Additional Information (a ClassPortInfo)

using GidBytes = std::array<uint8_t, 16>;

struct MadHeader {
  uint8_t base_version = kBaseVersion;
  uint8_t mgmt_class = kMgmtClassCm;
  uint8_t class_version = kCmClassVersion;
  uint8_t method = kMethodSend;
  uint16_t status = 0;
  uint16_t class_specific = 0;
  uint64_t tid = 0;
  uint16_t attr_id = 0;
  uint32_t attr_mod = 0;
  bool operator==(const MadHeader&) const = default;
};

struct ReqMsg {
  uint32_t local_comm_id = 0;
  uint64_t service_id = 0;
  uint64_t local_ca_guid = 0;
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;  // 24 bits
  uint8_t responder_resources = 0;
  uint32_t local_eecn = 0;  // 24 bits
  uint8_t initiator_depth = 0;
  uint32_t remote_eecn = 0;                // 24 bits
  uint8_t remote_cm_response_timeout = 0;  // 5 bits
  uint8_t transport_type = 0;              // 2 bits: 0 RC, 1 UC, 2 RD, 3 extended
  bool e2e_flow_control = false;
  uint32_t starting_psn = 0;              // 24 bits
  uint8_t local_cm_response_timeout = 0;  // 5 bits
  uint8_t retry_count = 0;                // 3 bits
  uint16_t pkey = 0xffff;
  uint8_t path_mtu = 0;  // 4 bits, IB MTU code
  bool rdc_exists = false;
  uint8_t rnr_retry_count = 0;  // 3 bits
  uint8_t max_cm_retries = 0;   // 4 bits
  bool srq = false;
  uint8_t extended_transport_type = 0;  // 3 bits
  uint16_t primary_local_lid = 0;
  uint16_t primary_remote_lid = 0;
  GidBytes primary_local_gid{};
  GidBytes primary_remote_gid{};
  uint32_t primary_flow_label = 0;  // 20 bits
  uint8_t primary_packet_rate = 0;  // 6 bits
  uint8_t primary_traffic_class = 0;
  uint8_t primary_hop_limit = 0;
  uint8_t primary_sl = 0;  // 4 bits
  bool primary_subnet_local = false;
  uint8_t primary_local_ack_timeout = 0;  // 5 bits
  std::array<uint8_t, kReqPrivate> private_data{};
  bool operator==(const ReqMsg&) const = default;
};

struct MraMsg {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint8_t message_mraed = 0;    // 2 bits: 0 REQ, 1 REP, 2 LAP
  uint8_t service_timeout = 0;  // 5 bits
  std::array<uint8_t, kMraPrivate> private_data{};
  bool operator==(const MraMsg&) const = default;
};

struct RejMsg {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint8_t message_rejected = 0;    // 2 bits: 0 REQ, 1 REP, 2 other
  uint8_t reject_info_length = 0;  // 7 bits, at most kRejAriMax
  uint16_t reason = 0;
  std::array<uint8_t, kRejAriMax> ari{};
  std::array<uint8_t, kRejPrivate> private_data{};
  bool operator==(const RejMsg&) const = default;
};

struct RepMsg {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;     // 24 bits
  uint32_t local_eecn = 0;    // 24 bits
  uint32_t starting_psn = 0;  // 24 bits
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t target_ack_delay = 0;   // 5 bits
  uint8_t failover_accepted = 0;  // 2 bits
  bool e2e_flow_control = false;
  uint8_t rnr_retry_count = 0;  // 3 bits
  bool srq = false;
  uint64_t local_ca_guid = 0;
  std::array<uint8_t, kRepPrivate> private_data{};
  bool operator==(const RepMsg&) const = default;
};

struct RtuMsg {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  std::array<uint8_t, kRtuPrivate> private_data{};
  bool operator==(const RtuMsg&) const = default;
};

struct DreqMsg {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint32_t remote_qpn = 0;  // 24 bits: the receiver's QPN
  std::array<uint8_t, kDreqPrivate> private_data{};
  bool operator==(const DreqMsg&) const = default;
};

struct DrepMsg {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  std::array<uint8_t, kDrepPrivate> private_data{};
  bool operator==(const DrepMsg&) const = default;
};

// Service ID Resolution: a UD QP asks a service for its QPN and Q_Key (IBA 12.11).
struct SidrReqMsg {
  uint32_t request_id = 0;
  uint16_t pkey = 0xffff;
  uint64_t service_id = 0;
  std::array<uint8_t, kSidrReqPrivate> private_data{};
  bool operator==(const SidrReqMsg&) const = default;
};

struct SidrRepMsg {
  uint32_t request_id = 0;  // the SIDR_REQ's
  uint8_t status = 0;       // hw::sidr_status
  uint8_t info_length = 0;  // at most kSidrRepInfo
  uint32_t qpn = 0;         // 24 bits
  uint64_t service_id = 0;
  uint32_t qkey = 0;
  std::array<uint8_t, kSidrRepInfo> info{};
  std::array<uint8_t, kSidrRepPrivate> private_data{};
  bool operator==(const SidrRepMsg&) const = default;
};

using CmBody = std::variant<ReqMsg, MraMsg, RejMsg, RepMsg, RtuMsg, DreqMsg, DrepMsg, SidrReqMsg,
                            SidrRepMsg>;

struct CmMad {
  MadHeader header;  // attr_id follows the body on encode
  CmBody body;
};

using MadBytes = std::array<uint8_t, kMadSize>;

// Encodes the header (with attr_id set from the body) and the message.
MadBytes encode_cm_mad(const CmMad& mad) noexcept;

// Parses one received MAD. Accepts exactly 256 bytes of base version 1, class CM (0x07),
// class version 2, method Send and one of REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ,
// SIDR_REP; anything else
// is an error naming what was wrong ("MAD of 100 bytes, expected 256"). Never reads outside
// `bytes`, whatever they hold: this is the fuzzing entry point for the CM.
Result<CmMad> decode_cm_mad(std::span<const uint8_t> bytes);

// rdma_cm's header at the start of a REQ's private data (IBA Annex A11; Linux cma.c,
// struct cma_hdr).
inline constexpr size_t kCmaHeaderSize = 36;
inline constexpr uint64_t kRdmaPsTcpServicePrefix = 0x0000000001060000ull;  // RDMA_PS_TCP << 16
inline constexpr uint64_t kRdmaPsUdpServicePrefix = 0x0000000001110000ull;  // RDMA_PS_UDP << 16

struct CmaHeader {
  uint8_t version = 0;    // cma_version: 0
  uint16_t src_port = 0;  // the active side's port
  // The two addresses, of one family; the header's IP version (the high nibble of byte 1: 4 or
  // 6) is theirs.
  hw::IpAddress src;
  hw::IpAddress dst;
  bool operator==(const CmaHeader&) const = default;
};

// Writes the 36 bytes, in the source's IP version; the callers' check_remote has made sure the
// destination is of the same one.
void encode_cma_header(const CmaHeader& h, uint8_t* out36) noexcept;
// Version 0, IP version 4 or 6; errors say which field was wrong.
Result<CmaHeader> decode_cma_header(std::span<const uint8_t> bytes);

constexpr uint64_t service_id_for_port(uint16_t port) noexcept {
  return kRdmaPsTcpServicePrefix | port;
}
constexpr bool is_rdma_tcp_service(uint64_t service_id) noexcept {
  return (service_id & ~uint64_t{0xffff}) == kRdmaPsTcpServicePrefix;
}
constexpr uint64_t udp_service_id_for_port(uint16_t port) noexcept {
  return kRdmaPsUdpServicePrefix | port;
}
constexpr bool is_rdma_udp_service(uint64_t service_id) noexcept {
  return (service_id & ~uint64_t{0xffff}) == kRdmaPsUdpServicePrefix;
}

// The RoCE v2 GID of an address (rdma_ip2gid): ::ffff:a.b.c.d for IPv4, the address itself for
// IPv6.
inline GidBytes ip_gid(const hw::IpAddress& a) noexcept {
  return a.bytes;
}

// CM and ACK time encoding: 4.096 us * 2^t (IBA 12.7.29), in nanoseconds; t above 31 is
// clamped to 31.
constexpr uint64_t cm_time_ns(uint8_t t) noexcept {
  return 4096ull << (t > 31 ? 31 : t);
}

}  // namespace rnicdv::sim::cm
