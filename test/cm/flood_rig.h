// SPDX-License-Identifier: BSD-3-Clause
// Forged connection requests and the process's descriptor count, for the tests of what a
// flood of REQs may cost a listener.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>

#include "cm/mad.h"

namespace rnicdv::test {

// Open descriptors of this process (entries of /proc/self/fd).
inline size_t open_descriptors() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd"))
    ++n;
  return n;
}

// A well-formed REQ for CM port `port` at `dst` from `src`, as a requester that
// will never answer the REP would send it: communication ID `comm_id`, QPN `qpn` (each
// distinct, or the CM takes it for a duplicate or a stale connection), and the CM timeouts it
// claims (a response timeout of 31 is 4.096 us * 2^31, 2.4 hours, per try).
inline sim::cm::MadBytes forged_req(const hw::IpAddress& src, const hw::IpAddress& dst,
                                    uint16_t port,
                                    uint32_t comm_id, uint32_t qpn,
                                    uint8_t cm_response_timeout = 20, uint8_t max_cm_retries = 15) {
  using namespace sim::cm;
  ReqMsg q;
  q.local_comm_id = comm_id;
  q.service_id = service_id_for_port(port);
  q.local_ca_guid =
      0x0bad000000000000ull | (src.is_v4() ? src.ipv4() : static_cast<uint32_t>(hw::hash_of(src)));
  q.local_qpn = qpn & 0xffffff;
  q.starting_psn = comm_id & 0xffffff;
  q.responder_resources = 4;
  q.initiator_depth = 4;
  q.remote_cm_response_timeout = cm_response_timeout;
  q.local_cm_response_timeout = cm_response_timeout;
  q.max_cm_retries = max_cm_retries;
  q.retry_count = 7;
  q.rnr_retry_count = 7;
  q.path_mtu = 3;
  q.pkey = 0xffff;
  q.primary_local_ack_timeout = 14;
  CmaHeader cma;
  cma.src_port = static_cast<uint16_t>(32768 + comm_id % 28232);
  cma.src = src;
  cma.dst = dst;
  encode_cma_header(cma, q.private_data.data());
  CmMad mad;
  mad.header.tid = (uint64_t{0xf00d} << 32) | comm_id;
  mad.body = q;
  return encode_cm_mad(mad);
}

}  // namespace rnicdv::test
