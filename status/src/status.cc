// SPDX-License-Identifier: BSD-3-Clause
#include "rnicdv/status.h"

#include <cstdio>

namespace rnicdv {

const char* errc_name(Errc code) noexcept {
  switch (code) {
    case Errc::ok: return "ok";
    case Errc::bad_state: return "bad_state";
    case Errc::queue_full: return "queue_full";
    case Errc::too_many_sge: return "too_many_sge";
    case Errc::inline_too_large: return "inline_too_large";
    case Errc::invalid_argument: return "invalid_argument";
    case Errc::qp_in_error: return "qp_in_error";
    case Errc::not_found: return "not_found";
    case Errc::no_resources: return "no_resources";
    case Errc::busy: return "busy";
    case Errc::unsupported: return "unsupported";
    case Errc::access_denied: return "access_denied";
    case Errc::address_in_use: return "address_in_use";
    case Errc::timeout: return "timeout";
    case Errc::unreachable: return "unreachable";
    case Errc::rejected: return "rejected";
    case Errc::disconnected: return "disconnected";
    case Errc::protocol_error: return "protocol_error";
    case Errc::io_error: return "io_error";
    case Errc::internal: return "internal";
  }
  return "unknown";
}

Status Status::error(Errc code, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return Status(code, buf);
}

}  // namespace rnicdv
