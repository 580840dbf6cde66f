// SPDX-License-Identifier: BSD-3-Clause
// The fuzz target bodies (targets.h).
#include "targets.h"

#include <endian.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <memory>
#include <variant>
#include <vector>

#include "cm/mad.h"
#include "faults/spec.h"
#include "fuzz_entry.h"
#include "packet/packet.h"
#include "rnicdv/wqe/cqe.h"
#include "rnicdv/wqe/send_wqe.h"

namespace rnicdv::fuzz {

namespace {

// A property the code under test promises did not hold: report it as a crash.
[[noreturn]] void property_failed(const char* target, const char* what) {
  std::fprintf(stderr, "fuzz target %s: property failed: %s\n", target, what);
  std::abort();
}
#define FUZZ_REQUIRE(target, cond) \
  do {                             \
    if (!(cond)) property_failed(target, #cond); \
  } while (0)

}  // namespace

int sq_executor(const uint8_t* data, size_t size) {
  sim::fuzz_execute_send_queue(data, size);
  return 0;
}

int receive_path(const uint8_t* data, size_t size) {
  // The parser first, on an exact-size copy so that any over-read is caught.
  std::unique_ptr<uint8_t[]> copy(new uint8_t[size ? size : 1]);
  if (size) std::memcpy(copy.get(), data, size);
  sim::pkt::Packet p;
  if (sim::pkt::parse_packet(copy.get(), size, &p) == sim::pkt::ParseError::none) {
    FUZZ_REQUIRE("receive_path", p.payload_len <= sim::pkt::kMaxPayload);
    FUZZ_REQUIRE("receive_path",
                 p.payload_len == 0 ||
                     (p.payload >= copy.get() && p.payload + p.payload_len <= copy.get() + size));
  }
  sim::fuzz_receive_datagram(data, size);
  return 0;
}

int cm_mad(const uint8_t* data, size_t size) {
  std::unique_ptr<uint8_t[]> copy(new uint8_t[size ? size : 1]);
  if (size) std::memcpy(copy.get(), data, size);
  auto decoded = sim::cm::decode_cm_mad({copy.get(), size});
  if (!decoded) {
    FUZZ_REQUIRE("cm_mad", !decoded.status().message().empty());
    return 0;
  }
  const sim::cm::CmMad& mad = decoded.value();
  FUZZ_REQUIRE("cm_mad", size == sim::cm::kMadSize);
  // Reserved bits are ignored on receipt and written as zero: what was understood encodes
  // back to a MAD that decodes to the same message.
  const sim::cm::MadBytes again = sim::cm::encode_cm_mad(mad);
  auto redecoded = sim::cm::decode_cm_mad(again);
  FUZZ_REQUIRE("cm_mad", static_cast<bool>(redecoded));
  FUZZ_REQUIRE("cm_mad", redecoded.value().header == mad.header);
  FUZZ_REQUIRE("cm_mad", redecoded.value().body == mad.body);
  // The encoder is deterministic: the same message gives the same bytes.
  FUZZ_REQUIRE("cm_mad", sim::cm::encode_cm_mad(redecoded.value()) == again);
  FUZZ_REQUIRE("cm_mad", sim::cm::attr_name(mad.header.attr_id) != nullptr);
  // A REQ's private data starts with rdma_cm's header when the service is RDMA_PS_TCP.
  if (const auto* req = std::get_if<sim::cm::ReqMsg>(&mad.body)) {
    auto cma = sim::cm::decode_cma_header(req->private_data);
    if (cma) {
      uint8_t bytes[sim::cm::kCmaHeaderSize];
      sim::cm::encode_cma_header(cma.value(), bytes);
      auto cma_again = sim::cm::decode_cma_header(bytes);
      FUZZ_REQUIRE("cm_mad", cma_again && cma_again.value() == cma.value());
    }
  }
  return 0;
}

int cqe_decoder(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  // First byte: bit 0 the CQE size (64 or 128), bits 1-3 log2 of the entry count (1..128).
  const uint32_t cqe_size = (data[0] & 1) ? 128 : 64;
  const uint32_t cqe_cnt = 1u << ((data[0] >> 1) & 7);
  const size_t ring_bytes = size_t{cqe_size} * cqe_cnt;
  // Exactly the ring, so that any access past it is caught; the input fills it from the
  // start, the rest is a fresh ring (invalid, owned by hardware).
  std::unique_ptr<uint8_t[]> buf(new uint8_t[ring_bytes]);
  wqe::CqRing ring{buf.get(), cqe_cnt, cqe_size};
  wqe::init_cq_ring(ring);
  std::memcpy(buf.get(), data + 1, std::min(size - 1, ring_bytes));

  std::unique_ptr<uint8_t[]> rewritten(new uint8_t[ring_bytes]);
  wqe::CqRing ring2{rewritten.get(), cqe_cnt, cqe_size};
  wqe::init_cq_ring(ring2);

  // Two laps of consumer indices: an entry is the software's on exactly one of them.
  for (uint32_t ci = 0; ci < 2 * cqe_cnt; ++ci) {
    const mlx5_cqe64* cqe = wqe::cqe_for_sw(ring, ci);
    const mlx5_cqe64* other_lap = wqe::cqe_for_sw(ring, ci ^ cqe_cnt);
    FUZZ_REQUIRE("cqe_decoder", !(cqe && other_lap));
    if (!cqe) continue;
    wqe::CqeFields f;
    wqe::decode_cqe(cqe, &f);
    Completion c;
    wqe::cqe_to_completion(cqe, &c);
    FUZZ_REQUIRE("cqe_decoder", f.cqe_opcode != MLX5_CQE_INVALID);
    FUZZ_REQUIRE("cqe_decoder", c.qp_num == f.qpn && c.wqe_counter == f.wqe_counter);
    FUZZ_REQUIRE("cqe_decoder", c.qp_num <= wqe::kCqeQpnMask && c.src_qp <= wqe::kCqeQpnMask);
    FUZZ_REQUIRE("cqe_decoder", wqe::cqe_opcode_name(f.cqe_opcode) != nullptr);
    FUZZ_REQUIRE("cqe_decoder", wqe::cqe_syndrome_name(f.syndrome) != nullptr);
    (void)wqe::syndrome_to_wc_status(f.syndrome);
    (void)wqe::send_opcode_to_wc_opcode(f.send_opcode);

    // The device side writes the decoded fields back; the driver side must read the same.
    wqe::CqeInit init;
    init.cqe_opcode = f.cqe_opcode;
    init.send_opcode = f.send_opcode;
    init.syndrome = f.syndrome;
    init.vendor_syndrome = f.vendor_syndrome;
    init.wqe_counter = f.wqe_counter;
    init.qpn = f.qpn;
    init.src_qpn = f.src_qpn;
    init.byte_cnt = f.byte_cnt;
    init.imm = f.imm;
    init.solicited = f.solicited;
    init.grh = f.grh;
    init.roce_pkt_type = f.roce_pkt_type;
    wqe::write_cqe(ring2, ci, init);
    const mlx5_cqe64* back = wqe::cqe_for_sw(ring2, ci);
    FUZZ_REQUIRE("cqe_decoder", back != nullptr);
    wqe::CqeFields g;
    wqe::decode_cqe(back, &g);
    FUZZ_REQUIRE("cqe_decoder", f.cqe_opcode == g.cqe_opcode && f.send_opcode == g.send_opcode &&
                                    f.syndrome == g.syndrome &&
                                    f.vendor_syndrome == g.vendor_syndrome &&
                                    f.wqe_counter == g.wqe_counter && f.qpn == g.qpn &&
                                    f.src_qpn == g.src_qpn && f.byte_cnt == g.byte_cnt &&
                                    f.imm == g.imm && f.solicited == g.solicited &&
                                    f.grh == g.grh && f.roce_pkt_type == g.roce_pkt_type);
    Completion c2;
    wqe::cqe_to_completion(back, &c2);
    FUZZ_REQUIRE("cqe_decoder", c2.status == c.status && c2.opcode == c.opcode &&
                                    c2.byte_len == c.byte_len && c2.imm_data == c.imm_data &&
                                    c2.flags == c.flags && c2.vendor_err == c.vendor_err);
  }
  return 0;
}

int fault_spec(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Result<sim::faults::FaultSpec> r = sim::faults::parse_fault_spec(text);
  if (!r) {
    const std::string m = r.status().message();
    FUZZ_REQUIRE("fault_spec", r.status().code() == Errc::invalid_argument);
    FUZZ_REQUIRE("fault_spec", m.find('\n') == std::string::npos);
    FUZZ_REQUIRE("fault_spec", m.rfind("fault spec: ", 0) == 0);
    return 0;
  }
  const sim::faults::FaultSpec& a = r.value();
  for (const auto& f : a.frames) {
    const auto& t = f.when;
    FUZZ_REQUIRE("fault_spec", t.probability >= 0 && t.probability <= 1);
    FUZZ_REQUIRE("fault_spec", !(t.nth != 0 && t.every != 0) && t.count != 0);
    FUZZ_REQUIRE("fault_spec", f.match.opcodes != 0);
    FUZZ_REQUIRE("fault_spec", f.max_delay_ns > 0 && f.hold_ns >= 2);
  }
  for (const auto& l : a.links) FUZZ_REQUIRE("fault_spec", !(l.at_ns != 0 && l.after_frames != 0));
  for (const auto& w : a.wrs) FUZZ_REQUIRE("fault_spec", w.opcodes != 0 && w.when.count != 0);
  Result<sim::faults::FaultSpec> again = sim::faults::parse_fault_spec(a.text);
  FUZZ_REQUIRE("fault_spec", again.is_ok());
  const sim::faults::FaultSpec& b = again.value();
  FUZZ_REQUIRE("fault_spec", a.frames.size() == b.frames.size() && a.links.size() == b.links.size() &&
                                 a.wrs.size() == b.wrs.size() && a.cms.size() == b.cms.size() &&
                                 a.seed_given == b.seed_given && a.seed == b.seed &&
                                 a.log_path == b.log_path);
  return 0;
}

std::span<const Target> targets() noexcept {
  static constexpr Target kTargets[] = {
      {"sq_executor", sq_executor},
      {"receive_path", receive_path},
      {"cm_mad", cm_mad},
      {"cqe_decoder", cqe_decoder},
      {"fault_spec", fault_spec},
  };
  return kTargets;
}

}  // namespace rnicdv::fuzz
