// SPDX-License-Identifier: BSD-3-Clause
// Helpers shared by every backend: names and GID forms.
#include <arpa/inet.h>

#include <cstdio>
#include <cstring>

#include "rnicdv/hw/device.h"

namespace rnicdv::hw {

const char* qp_state_name(QpState s) noexcept {
  switch (s) {
    case QpState::reset: return "RESET";
    case QpState::init: return "INIT";
    case QpState::rtr: return "RTR";
    case QpState::rts: return "RTS";
    case QpState::sqd: return "SQD";
    case QpState::sqe: return "SQE";
    case QpState::err: return "ERR";
  }
  return "?";
}

const char* async_event_name(AsyncEventType t) noexcept {
  switch (t) {
    case AsyncEventType::comm_est: return "COMM_EST";
    case AsyncEventType::sq_drained: return "SQ_DRAINED";
    case AsyncEventType::last_wqe_reached: return "LAST_WQE_REACHED";
    case AsyncEventType::qp_fatal: return "QP_FATAL";
    case AsyncEventType::qp_req_err: return "QP_REQ_ERR";
    case AsyncEventType::qp_access_err: return "QP_ACCESS_ERR";
    case AsyncEventType::cq_err: return "CQ_ERR";
    case AsyncEventType::device_fatal: return "DEVICE_FATAL";
    case AsyncEventType::port_active: return "PORT_ACTIVE";
    case AsyncEventType::port_err: return "PORT_ERR";
    case AsyncEventType::srq_limit_reached: return "SRQ_LIMIT_REACHED";
  }
  return "?";
}

namespace {

struct NamedProfile {
  const char* name;
  bool fetches_beyond_dbr;
  bool keeps_rtr_doorbell;
};

constexpr NamedProfile kProfiles[] = {
    {"mlx5", false, true},
    {"scanning", true, true},
    {"forgetful", false, false},
    {"scanning-forgetful", true, false},
};

}  // namespace

const char* device_profile_name(const DeviceProfile& profile) noexcept {
  for (const NamedProfile& p : kProfiles)
    if (p.fetches_beyond_dbr == profile.fetches_beyond_dbr &&
        p.keeps_rtr_doorbell == profile.keeps_rtr_doorbell)
      return p.name;
  return "?";
}

bool device_profile_from_name(const char* name, DeviceProfile* out) noexcept {
  for (const NamedProfile& p : kProfiles) {
    if (std::strcmp(name, p.name) == 0) {
      out->fetches_beyond_dbr = p.fetches_beyond_dbr;
      out->keeps_rtr_doorbell = p.keeps_rtr_doorbell;
      return true;
    }
  }
  return false;
}

Gid Gid::from_ipv4(uint32_t ipv4_host_order) noexcept {
  Gid g;
  g.raw[10] = 0xff;
  g.raw[11] = 0xff;
  g.raw[12] = static_cast<uint8_t>(ipv4_host_order >> 24);
  g.raw[13] = static_cast<uint8_t>(ipv4_host_order >> 16);
  g.raw[14] = static_cast<uint8_t>(ipv4_host_order >> 8);
  g.raw[15] = static_cast<uint8_t>(ipv4_host_order);
  return g;
}

Gid Gid::from_ip(const IpAddress& ip) noexcept {
  Gid g;
  std::memcpy(g.raw, ip.bytes.data(), sizeof g.raw);
  return g;
}

bool Gid::is_ipv4_mapped() const noexcept {
  for (int i = 0; i < 10; ++i)
    if (raw[i] != 0) return false;
  return raw[10] == 0xff && raw[11] == 0xff;
}

uint32_t Gid::ipv4() const noexcept {
  return (uint32_t{raw[12]} << 24) | (uint32_t{raw[13]} << 16) | (uint32_t{raw[14]} << 8) |
         uint32_t{raw[15]};
}

std::string Gid::to_string() const {
  char buf[INET6_ADDRSTRLEN] = {};
  if (is_ipv4_mapped()) {
    std::snprintf(buf, sizeof buf, "::ffff:%u.%u.%u.%u", raw[12], raw[13], raw[14], raw[15]);
    return buf;
  }
  if (!inet_ntop(AF_INET6, raw, buf, sizeof buf)) return "?";
  return buf;
}

}  // namespace rnicdv::hw
