// SPDX-License-Identifier: BSD-3-Clause
// CM MAD encoding against hand-computed bytes (IBA 12.6 tables; docs/design.md, "Protocol notes"),
// round trips of random messages, and hostile input to the parser.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "cm/mad.h"

using namespace rnicdv::sim::cm;
namespace hw = rnicdv::hw;

namespace {

// A MAD expected byte by byte: starts all zero, then the listed runs are written at offsets
// counted from the start of the MAD (so data offset + 24).
struct Expected {
  MadBytes bytes{};
  Expected& at(size_t off, std::initializer_list<uint8_t> run) {
    for (uint8_t b : run) bytes[off++] = b;
    return *this;
  }
};

void check_bytes(const MadBytes& got, const MadBytes& want) {
  for (size_t i = 0; i < kMadSize; ++i) {
    INFO("MAD byte " << i << " (data offset " << static_cast<long>(i) - 24 << ")");
    CHECK(static_cast<int>(got[i]) == static_cast<int>(want[i]));
  }
}

// The common header every CM MAD starts with: base 1, class 0x07, class version 2, method
// Send, status 0, TID 0x0123456789abcdef, then the attribute ID.
Expected header(uint16_t attr) {
  Expected e;
  e.at(0, {0x01, 0x07, 0x02, 0x03, 0x00, 0x00, 0x00, 0x00});
  e.at(8, {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef});
  e.at(16, {static_cast<uint8_t>(attr >> 8), static_cast<uint8_t>(attr)});
  return e;
}

CmMad with_tid(CmBody body) {
  CmMad mad;
  mad.header.tid = 0x0123456789abcdefull;
  mad.body = std::move(body);
  return mad;
}

ReqMsg sample_req() {
  ReqMsg q;
  q.local_comm_id = 0x11223344;
  q.service_id = service_id_for_port(7391);  // 0x1cdf
  q.local_ca_guid = 0x0002c90300a1b2c3ull;
  q.local_qpn = 0x000abc;
  q.responder_resources = 0x10;
  q.initiator_depth = 0x08;
  q.remote_cm_response_timeout = 20;
  q.transport_type = 0;
  q.e2e_flow_control = true;
  q.starting_psn = 0x123456;
  q.local_cm_response_timeout = 20;
  q.retry_count = 7;
  q.pkey = 0xffff;
  q.path_mtu = 5;
  q.rnr_retry_count = 6;
  q.max_cm_retries = 15;
  q.primary_local_lid = 0xffff;
  q.primary_remote_lid = 0xffff;
  q.primary_local_gid = ip_gid(hw::IpAddress::v4(0x7f000002));
  q.primary_remote_gid = ip_gid(hw::IpAddress::v4(0x7f000003));
  q.primary_flow_label = 0x12345;
  q.primary_packet_rate = 3;
  q.primary_traffic_class = 0x20;
  q.primary_hop_limit = 64;
  q.primary_sl = 3;
  q.primary_subnet_local = true;
  q.primary_local_ack_timeout = 18;
  CmaHeader cma;
  cma.src_port = 40001;  // 0x9c41
  cma.src = hw::IpAddress::v4(0x7f000002);
  cma.dst = hw::IpAddress::v4(0x7f000003);
  encode_cma_header(cma, q.private_data.data());
  std::memcpy(q.private_data.data() + kCmaHeaderSize, "hello", 5);
  return q;
}

}  // namespace

TEST_CASE("REQ encodes to the bytes of IBA Table 106 with rdma_cm's service ID and cma_hdr") {
  Expected e = header(0x0010);
  e.at(24, {0x11, 0x22, 0x33, 0x44});                          // Local Communication ID
  e.at(32, {0x00, 0x00, 0x00, 0x00, 0x01, 0x06, 0x1c, 0xdf});  // Service ID: 0x0106 << 16 | port
  e.at(40, {0x00, 0x02, 0xc9, 0x03, 0x00, 0xa1, 0xb2, 0xc3});  // Local CA GUID
  e.at(56, {0x00, 0x0a, 0xbc, 0x10});  // Local QPN 0xabc, Responder Resources 16
  e.at(60, {0x00, 0x00, 0x00, 0x08});  // Local EECN 0, Initiator Depth 8
  // Remote EECN 0; byte 43: remote CM response timeout 20 (10100b) in bits 7..3, transport
  // RC (00) in bits 2..1, end-to-end flow control in bit 0: 1010 0001.
  e.at(64, {0x00, 0x00, 0x00, 0xa1});
  // Starting PSN 0x123456; byte 47: local CM response timeout 20, retry count 7: 1010 0111.
  e.at(68, {0x12, 0x34, 0x56, 0xa7});
  e.at(72, {0xff, 0xff});              // P_Key
  e.at(74, {0x56});                    // path MTU 5 (4096) in 7..4, RDC 0, RNR retry 6 in 2..0
  e.at(75, {0xf0});                    // max CM retries 15 in 7..4, SRQ 0, extended transport 0
  e.at(76, {0xff, 0xff, 0xff, 0xff});  // primary local and remote LID: permissive
  e.at(90, {0xff, 0xff, 0x7f, 0x00, 0x00, 0x02});   // local GID ::ffff:127.0.0.2
  e.at(106, {0xff, 0xff, 0x7f, 0x00, 0x00, 0x03});  // remote GID ::ffff:127.0.0.3
  // Flow label 0x12345 in the top 20 bits of the word at data 88, packet rate 3 in the low 6
  // bits of its last byte: 0x12345 << 12 | 3 = 0x12345003.
  e.at(112, {0x12, 0x34, 0x50, 0x03});
  e.at(116, {0x20, 0x40});  // traffic class 0x20, hop limit 64
  e.at(118, {0x38});        // SL 3 in 7..4, subnet local in bit 3
  e.at(119, {0x90});        // local ACK timeout 18 (10010b) in 7..3
  // Private data at data 140: cma_hdr version 0, IPv4 (0x40), source port 40001, source and
  // destination IPv4 after 12 zero bytes each, then the consumer's bytes.
  e.at(164, {0x00, 0x40, 0x9c, 0x41});
  e.at(168 + 12, {0x7f, 0x00, 0x00, 0x02});
  e.at(184 + 12, {0x7f, 0x00, 0x00, 0x03});
  e.at(200, {'h', 'e', 'l', 'l', 'o'});

  check_bytes(encode_cm_mad(with_tid(sample_req())), e.bytes);
}

TEST_CASE("REP encodes to the bytes of IBA Table 110") {
  RepMsg p;
  p.local_comm_id = 0xaabbccdd;
  p.remote_comm_id = 0x11223344;
  p.local_qpn = 0x000def;
  p.starting_psn = 0xfedcba;
  p.responder_resources = 4;
  p.initiator_depth = 2;
  p.target_ack_delay = 15;
  p.e2e_flow_control = true;
  p.rnr_retry_count = 7;
  p.srq = true;
  p.local_ca_guid = 0x0102030405060708ull;
  p.private_data[0] = 0xee;
  p.private_data[195] = 0x77;

  Expected e = header(0x0013);
  e.at(24, {0xaa, 0xbb, 0xcc, 0xdd, 0x11, 0x22, 0x33, 0x44});  // local, remote comm ID
  e.at(32, {0x00, 0x00, 0x00, 0x00});                          // Local Q_Key
  e.at(36, {0x00, 0x0d, 0xef, 0x00});                          // Local QPN
  e.at(40, {0x00, 0x00, 0x00, 0x00});                          // Local EECN
  e.at(44, {0xfe, 0xdc, 0xba, 0x00});                          // Starting PSN
  e.at(48, {0x04, 0x02});  // responder resources, initiator depth
  e.at(50, {0x79});        // target ACK delay 15 (01111b) in 7..3, failover 0, E2E 1
  e.at(51, {0xf0});        // RNR retry 7 in 7..5, SRQ in bit 4
  e.at(52, {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08});  // Local CA GUID
  e.at(60, {0xee});
  e.at(255, {0x77});
  check_bytes(encode_cm_mad(with_tid(p)), e.bytes);
}

TEST_CASE("REJ, RTU, DREQ, DREP and MRA encode to the bytes of IBA Tables 107-113") {
  SECTION("REJ answering a REQ with an ARI") {
    RejMsg r;
    r.local_comm_id = 0;
    r.remote_comm_id = 0x11223344;
    r.message_rejected = 2;
    r.reject_info_length = 8;
    r.reason = 4;
    r.ari[0] = 0x01;
    r.ari[7] = 0x08;
    r.private_data[0] = 0xab;
    Expected e = header(0x0012);
    e.at(28, {0x11, 0x22, 0x33, 0x44});
    e.at(32, {0x80});  // Message REJected 2 (other) in bits 7..6
    e.at(33, {0x10});  // Reject Info Length 8 in bits 7..1
    e.at(34, {0x00, 0x04});
    e.at(36, {0x01});
    e.at(43, {0x08});
    e.at(108, {0xab});  // private data at data 84
    check_bytes(encode_cm_mad(with_tid(r)), e.bytes);
  }
  SECTION("RTU") {
    RtuMsg r;
    r.local_comm_id = 0x01020304;
    r.remote_comm_id = 0x05060708;
    r.private_data[223] = 0x5a;
    Expected e = header(0x0014);
    e.at(24, {1, 2, 3, 4, 5, 6, 7, 8});
    e.at(255, {0x5a});
    check_bytes(encode_cm_mad(with_tid(r)), e.bytes);
  }
  SECTION("DREQ names the receiver's QPN") {
    DreqMsg d;
    d.local_comm_id = 0x01020304;
    d.remote_comm_id = 0x05060708;
    d.remote_qpn = 0x000abc;
    d.private_data[0] = 0x42;
    Expected e = header(0x0015);
    e.at(24, {1, 2, 3, 4, 5, 6, 7, 8});
    e.at(32, {0x00, 0x0a, 0xbc, 0x00});
    e.at(36, {0x42});
    check_bytes(encode_cm_mad(with_tid(d)), e.bytes);
  }
  SECTION("DREP") {
    DrepMsg d;
    d.local_comm_id = 0x01020304;
    d.remote_comm_id = 0x05060708;
    Expected e = header(0x0016);
    e.at(24, {1, 2, 3, 4, 5, 6, 7, 8});
    check_bytes(encode_cm_mad(with_tid(d)), e.bytes);
  }
  SECTION("SIDR_REQ: request ID, P_Key, the UDP port space's service ID, private data") {
    SidrReqMsg q;
    q.request_id = 0x01020304;
    q.pkey = 0xffff;
    q.service_id = 0x0000000001111c06ull;  // RDMA_PS_UDP, port 7174
    q.private_data[0] = 0x11;
    q.private_data[215] = 0x5a;
    Expected e = header(0x0017);
    e.at(24, {1, 2, 3, 4, 0xff, 0xff, 0, 0});
    e.at(32, {0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06});
    e.at(40, {0x11});
    e.at(255, {0x5a});
    check_bytes(encode_cm_mad(with_tid(q)), e.bytes);
  }
  SECTION("SIDR_REP: status, QPN in the top 24 bits of its word, service ID, Q_Key") {
    SidrRepMsg r;
    r.request_id = 0x01020304;
    r.status = 2;
    r.info_length = 3;
    r.qpn = 0x00abcdef;
    r.service_id = 0x0000000001111c06ull;
    r.qkey = 0x01234567;
    r.info[0] = 0x77;
    r.private_data[0] = 0x42;
    r.private_data[135] = 0x5b;
    Expected e = header(0x0018);
    e.at(24, {1, 2, 3, 4, 0x02, 0x03, 0, 0});
    e.at(32, {0xab, 0xcd, 0xef, 0x00});
    e.at(36, {0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06});
    e.at(44, {0x01, 0x23, 0x45, 0x67});
    e.at(48, {0x77});   // Additional Information (72 bytes) at 24 + 24
    e.at(120, {0x42});  // private data at 24 + 96
    e.at(255, {0x5b});
    check_bytes(encode_cm_mad(with_tid(r)), e.bytes);
  }
  SECTION("MRA of a REP with service timeout 24") {
    MraMsg m;
    m.local_comm_id = 0x01020304;
    m.remote_comm_id = 0x05060708;
    m.message_mraed = 1;
    m.service_timeout = 24;
    Expected e = header(0x0011);
    e.at(24, {1, 2, 3, 4, 5, 6, 7, 8});
    e.at(32, {0x40, 0xc0});  // MRAed 1 in 7..6; service timeout 24 (11000b) in 7..3
    check_bytes(encode_cm_mad(with_tid(m)), e.bytes);
  }
}

TEST_CASE("cma_hdr and the rdma_cm service ID decode back and reject what rdma_cm rejects") {
  ReqMsg q = sample_req();
  auto cma = decode_cma_header(std::span(q.private_data).first(kCmaHeaderSize));
  REQUIRE(cma);
  CHECK(cma->src_port == 40001);
  CHECK(cma->src == hw::IpAddress::v4(0x7f000002));
  CHECK(cma->dst == hw::IpAddress::v4(0x7f000003));
  CHECK(is_rdma_tcp_service(q.service_id));
  CHECK_FALSE(is_rdma_tcp_service(0x0000000001110000ull | 80));  // RDMA_PS_UDP
  CHECK((q.service_id & 0xffff) == 7391);

  q.private_data[0] = 1;  // version
  CHECK(decode_cma_header(std::span(q.private_data).first(kCmaHeaderSize)).status().code() ==
        rnicdv::Errc::protocol_error);
  q.private_data[0] = 0;
  q.private_data[1] = 0x50;  // neither 4 nor 6
  CHECK(decode_cma_header(std::span(q.private_data).first(kCmaHeaderSize)).status().code() ==
        rnicdv::Errc::protocol_error);
  q.private_data[1] = 0x60;  // IPv6: the 16 bytes are read whole
  auto as_v6 = decode_cma_header(std::span(q.private_data).first(kCmaHeaderSize));
  REQUIRE(as_v6);
  CHECK(as_v6->src.to_string() == "::127.0.0.2");
  // An IPv4-mapped address inside an IPv6 header is refused, as in an IPv6 frame.
  q.private_data[4 + 10] = q.private_data[4 + 11] = 0xff;
  auto mapped = decode_cma_header(std::span(q.private_data).first(kCmaHeaderSize));
  CHECK(mapped.status().code() == rnicdv::Errc::protocol_error);
  CHECK(mapped.status().message().find("IPv4-mapped") != std::string::npos);
  CHECK_FALSE(decode_cma_header(std::span(q.private_data).first(10)));
}

TEST_CASE("cma_hdr over IPv6 carries both addresses whole, with IP version 6") {
  CmaHeader h;
  h.src_port = 0x9c41;  // 40001
  h.src = hw::IpAddress::parse("fd00::a").value();
  h.dst = hw::IpAddress::parse("fd00:1:2:3:4:5:6:b").value();
  uint8_t out[kCmaHeaderSize];
  std::memset(out, 0xee, sizeof out);
  encode_cma_header(h, out);
  // Linux struct cma_hdr: cma_version, ip_version << 4, port, src_addr, dst_addr (in6).
  const uint8_t expected[kCmaHeaderSize] = {
      0x00, 0x60, 0x9c, 0x41,                                                  // version, IPv6, port
      0xfd, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a,                 // fd00::a
      0xfd, 0x00, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 0x0b};                // fd00:1:...:b
  CHECK(std::memcmp(out, expected, sizeof out) == 0);
  auto back = decode_cma_header(std::span<const uint8_t>(out, sizeof out));
  REQUIRE(back);
  CHECK(*back == h);

  // IPv4: 12 zero bytes before each address, not the ::ffff: form the address type holds.
  h.src = hw::IpAddress::v4(0x0a000001);
  h.dst = hw::IpAddress::v4(0x0a000002);
  encode_cma_header(h, out);
  CHECK(out[1] == 0x40);
  for (int i = 0; i < 12; ++i) {
    CHECK(out[4 + i] == 0);
    CHECK(out[20 + i] == 0);
  }
  CHECK(out[19] == 1);
  CHECK(out[35] == 2);
  back = decode_cma_header(std::span<const uint8_t>(out, sizeof out));
  REQUIRE(back);
  CHECK(*back == h);
}

TEST_CASE("CM time codes are 4.096 us times 2^t") {
  CHECK(cm_time_ns(0) == 4096);
  CHECK(cm_time_ns(14) == 4096ull << 14);  // 67.1 ms
  CHECK(cm_time_ns(20) == 4294967296ull);  // 4.29 s, the spec value for rdma_cm's 20
  CHECK(cm_time_ns(40) == cm_time_ns(31));
}

namespace {

template <class T>
T random_fill(std::mt19937_64& rng);

uint32_t bits(std::mt19937_64& rng, int n) {
  return n >= 32 ? static_cast<uint32_t>(rng())
                 : static_cast<uint32_t>(rng()) & ((uint32_t{1} << n) - 1);
}

template <size_t N>
void fill(std::array<uint8_t, N>& a, std::mt19937_64& rng) {
  for (auto& b : a) b = static_cast<uint8_t>(rng());
}

template <>
ReqMsg random_fill<ReqMsg>(std::mt19937_64& rng) {
  ReqMsg q;
  q.local_comm_id = bits(rng, 32);
  q.service_id = rng();
  q.local_ca_guid = rng();
  q.local_qkey = bits(rng, 32);
  q.local_qpn = bits(rng, 24);
  q.responder_resources = static_cast<uint8_t>(bits(rng, 8));
  q.local_eecn = bits(rng, 24);
  q.initiator_depth = static_cast<uint8_t>(bits(rng, 8));
  q.remote_eecn = bits(rng, 24);
  q.remote_cm_response_timeout = static_cast<uint8_t>(bits(rng, 5));
  q.transport_type = static_cast<uint8_t>(bits(rng, 2));
  q.e2e_flow_control = bits(rng, 1);
  q.starting_psn = bits(rng, 24);
  q.local_cm_response_timeout = static_cast<uint8_t>(bits(rng, 5));
  q.retry_count = static_cast<uint8_t>(bits(rng, 3));
  q.pkey = static_cast<uint16_t>(bits(rng, 16));
  q.path_mtu = static_cast<uint8_t>(bits(rng, 4));
  q.rdc_exists = bits(rng, 1);
  q.rnr_retry_count = static_cast<uint8_t>(bits(rng, 3));
  q.max_cm_retries = static_cast<uint8_t>(bits(rng, 4));
  q.srq = bits(rng, 1);
  q.extended_transport_type = static_cast<uint8_t>(bits(rng, 3));
  q.primary_local_lid = static_cast<uint16_t>(bits(rng, 16));
  q.primary_remote_lid = static_cast<uint16_t>(bits(rng, 16));
  fill(q.primary_local_gid, rng);
  fill(q.primary_remote_gid, rng);
  q.primary_flow_label = bits(rng, 20);
  q.primary_packet_rate = static_cast<uint8_t>(bits(rng, 6));
  q.primary_traffic_class = static_cast<uint8_t>(bits(rng, 8));
  q.primary_hop_limit = static_cast<uint8_t>(bits(rng, 8));
  q.primary_sl = static_cast<uint8_t>(bits(rng, 4));
  q.primary_subnet_local = bits(rng, 1);
  q.primary_local_ack_timeout = static_cast<uint8_t>(bits(rng, 5));
  fill(q.private_data, rng);
  return q;
}

template <>
RepMsg random_fill<RepMsg>(std::mt19937_64& rng) {
  RepMsg p;
  p.local_comm_id = bits(rng, 32);
  p.remote_comm_id = bits(rng, 32);
  p.local_qkey = bits(rng, 32);
  p.local_qpn = bits(rng, 24);
  p.local_eecn = bits(rng, 24);
  p.starting_psn = bits(rng, 24);
  p.responder_resources = static_cast<uint8_t>(bits(rng, 8));
  p.initiator_depth = static_cast<uint8_t>(bits(rng, 8));
  p.target_ack_delay = static_cast<uint8_t>(bits(rng, 5));
  p.failover_accepted = static_cast<uint8_t>(bits(rng, 2));
  p.e2e_flow_control = bits(rng, 1);
  p.rnr_retry_count = static_cast<uint8_t>(bits(rng, 3));
  p.srq = bits(rng, 1);
  p.local_ca_guid = rng();
  fill(p.private_data, rng);
  return p;
}

template <>
RejMsg random_fill<RejMsg>(std::mt19937_64& rng) {
  RejMsg r;
  r.local_comm_id = bits(rng, 32);
  r.remote_comm_id = bits(rng, 32);
  r.message_rejected = static_cast<uint8_t>(bits(rng, 2));
  r.reject_info_length = static_cast<uint8_t>(bits(rng, 7) % (kRejAriMax + 1));
  r.reason = static_cast<uint16_t>(bits(rng, 16));
  fill(r.ari, rng);
  fill(r.private_data, rng);
  return r;
}

template <>
MraMsg random_fill<MraMsg>(std::mt19937_64& rng) {
  MraMsg m;
  m.local_comm_id = bits(rng, 32);
  m.remote_comm_id = bits(rng, 32);
  m.message_mraed = static_cast<uint8_t>(bits(rng, 2));
  m.service_timeout = static_cast<uint8_t>(bits(rng, 5));
  fill(m.private_data, rng);
  return m;
}

template <>
RtuMsg random_fill<RtuMsg>(std::mt19937_64& rng) {
  RtuMsg m;
  m.local_comm_id = bits(rng, 32);
  m.remote_comm_id = bits(rng, 32);
  fill(m.private_data, rng);
  return m;
}

template <>
DreqMsg random_fill<DreqMsg>(std::mt19937_64& rng) {
  DreqMsg m;
  m.local_comm_id = bits(rng, 32);
  m.remote_comm_id = bits(rng, 32);
  m.remote_qpn = bits(rng, 24);
  fill(m.private_data, rng);
  return m;
}

template <>
DrepMsg random_fill<DrepMsg>(std::mt19937_64& rng) {
  DrepMsg m;
  m.local_comm_id = bits(rng, 32);
  m.remote_comm_id = bits(rng, 32);
  fill(m.private_data, rng);
  return m;
}

template <>
SidrReqMsg random_fill<SidrReqMsg>(std::mt19937_64& rng) {
  SidrReqMsg m;
  m.request_id = bits(rng, 32);
  m.pkey = static_cast<uint16_t>(bits(rng, 16));
  m.service_id = rng();
  fill(m.private_data, rng);
  return m;
}

template <>
SidrRepMsg random_fill<SidrRepMsg>(std::mt19937_64& rng) {
  SidrRepMsg m;
  m.request_id = bits(rng, 32);
  m.status = static_cast<uint8_t>(bits(rng, 8));
  m.info_length = static_cast<uint8_t>(bits(rng, 8) % (kSidrRepInfo + 1));
  m.qpn = bits(rng, 24);
  m.service_id = rng();
  m.qkey = bits(rng, 32);
  fill(m.info, rng);
  fill(m.private_data, rng);
  return m;
}

template <class Msg>
void round_trip(std::mt19937_64& rng) {
  for (int i = 0; i < 200; ++i) {
    CmMad mad;
    mad.header.tid = rng();
    mad.header.attr_mod = bits(rng, 32);
    mad.body = random_fill<Msg>(rng);
    const MadBytes bytes = encode_cm_mad(mad);
    auto back = decode_cm_mad(bytes);
    REQUIRE(back);
    CHECK(back->header.tid == mad.header.tid);
    CHECK(back->header.attr_mod == mad.header.attr_mod);
    REQUIRE(std::holds_alternative<Msg>(back->body));
    CHECK(std::get<Msg>(back->body) == std::get<Msg>(mad.body));
    CHECK(encode_cm_mad(*back) == bytes);  // and nothing else was set
  }
}

}  // namespace

TEST_CASE("every CM message survives encode then decode with every field at random values") {
  std::mt19937_64 rng(42);
  round_trip<ReqMsg>(rng);
  round_trip<RepMsg>(rng);
  round_trip<RejMsg>(rng);
  round_trip<MraMsg>(rng);
  round_trip<RtuMsg>(rng);
  round_trip<DreqMsg>(rng);
  round_trip<DrepMsg>(rng);
  round_trip<SidrReqMsg>(rng);
  round_trip<SidrRepMsg>(rng);
}

TEST_CASE("the parser rejects truncated MADs, foreign classes and unknown attributes") {
  const MadBytes good = encode_cm_mad(with_tid(sample_req()));
  for (size_t len = 0; len < kMadSize; ++len) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<long>(len));
    auto r = decode_cm_mad(cut);
    REQUIRE_FALSE(r);
    CHECK(r.status().code() == rnicdv::Errc::protocol_error);
  }
  std::vector<uint8_t> longer(good.begin(), good.end());
  longer.push_back(0);
  CHECK_FALSE(decode_cm_mad(longer));
  CHECK(decode_cm_mad(longer).status().message() == "MAD of 257 bytes, expected 256");

  auto mutate = [&](size_t off, uint8_t v) {
    MadBytes b = good;
    b[off] = v;
    return decode_cm_mad(b);
  };
  CHECK(mutate(0, 2).status().message() == "MAD base version 2, expected 1");
  CHECK(mutate(1, 0x81).status().message() == "MAD class 0x81 is not CM (0x07)");
  CHECK(mutate(2, 1).status().message() == "CM class version 1, expected 2");
  CHECK(mutate(3, 0x83).status().message() == "CM method 0x83, expected Send (0x03)");
  CHECK(mutate(17, 0x19).status().message() == "CM attribute 0x0019 (LAP) not supported");
  CHECK(mutate(17, 0x01).status().code() == rnicdv::Errc::unsupported);

  for (uint32_t attr = 0; attr <= 0xffff; ++attr) {
    MadBytes b = good;
    b[16] = static_cast<uint8_t>(attr >> 8);
    b[17] = static_cast<uint8_t>(attr);
    const bool known = attr >= 0x10 && attr <= 0x18;  // REQ ... DREP, SIDR_REQ, SIDR_REP
    CHECK(static_cast<bool>(decode_cm_mad(b)) == known);
  }
}

TEST_CASE("garbage and bit-flipped MADs never crash the parser") {
  std::mt19937_64 rng(7);
  std::vector<uint8_t> buf(300);
  size_t parsed = 0;
  for (int i = 0; i < 20000; ++i) {
    const size_t len = rng() % buf.size();
    for (auto& b : buf) b = static_cast<uint8_t>(rng());
    // Half of them carry a valid CM header so that every body parser sees garbage too.
    if (i % 2 == 0 && len >= kMadHeaderSize) {
      buf[0] = 1;
      buf[1] = 0x07;
      buf[2] = 2;
      buf[3] = 3;
      buf[16] = 0;
      buf[17] = static_cast<uint8_t>(0x10 + rng() % 7);
    }
    auto r = decode_cm_mad(std::span(buf.data(), len));
    if (r) {
      ++parsed;
      CHECK(len == kMadSize);
      // Whatever was parsed encodes to a well-formed MAD that parses again.
      CHECK(decode_cm_mad(encode_cm_mad(*r)));
    }
  }
  CHECK(parsed > 0);
  // A REJ whose Reject Info Length claims more than the 72 ARI bytes is clamped.
  RejMsg rej;
  MadBytes b = encode_cm_mad(with_tid(rej));
  b[24 + 9] = 0xfe;  // length 127
  auto r = decode_cm_mad(b);
  REQUIRE(r);
  CHECK(std::get<RejMsg>(r->body).reject_info_length == kRejAriMax);
}
