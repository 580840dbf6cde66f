// SPDX-License-Identifier: BSD-3-Clause
#include "rnicdv/status.h"

#include <cerrno>
#include <cstdio>
#include <string>

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

int to_errno(Errc code) noexcept {
  switch (code) {
    case Errc::ok: return 0;
    case Errc::bad_state:
    case Errc::too_many_sge:
    case Errc::inline_too_large:
    case Errc::invalid_argument: return EINVAL;
    case Errc::queue_full: return ENOSPC;
    case Errc::qp_in_error: return EIO;
    case Errc::not_found: return ENOENT;
    case Errc::no_resources: return ENOMEM;
    case Errc::busy: return EBUSY;
    case Errc::unsupported: return EOPNOTSUPP;
    case Errc::access_denied: return EACCES;
    case Errc::address_in_use: return EADDRINUSE;
    case Errc::timeout: return ETIMEDOUT;
    case Errc::unreachable: return EHOSTUNREACH;
    case Errc::rejected: return ECONNREFUSED;
    case Errc::disconnected: return ENOTCONN;
    case Errc::protocol_error: return EPROTO;
    case Errc::io_error: return EIO;
    case Errc::internal: return EIO;
  }
  return EIO;
}

namespace {

bool is_errc(int value) noexcept {
  return value >= 0 && value <= static_cast<int>(Errc::internal);
}

const char* errc_sentence(Errc code) noexcept {
  switch (code) {
    case Errc::ok: return "success";
    case Errc::bad_state: return "the QP's state does not allow the operation";
    case Errc::queue_full: return "no room in the work queue";
    case Errc::too_many_sge: return "more scatter/gather entries than the queue allows";
    case Errc::inline_too_large: return "inline data larger than the QP allows";
    case Errc::invalid_argument: return "malformed request";
    case Errc::qp_in_error: return "the QP is in error and accepts no more work";
    case Errc::not_found: return "no such device, object or address";
    case Errc::no_resources: return "a device limit was reached";
    case Errc::busy: return "the object is in use";
    case Errc::unsupported: return "the device or build lacks the capability";
    case Errc::access_denied: return "permission denied";
    case Errc::address_in_use: return "the address is already in use";
    case Errc::timeout: return "timed out";
    case Errc::unreachable: return "the peer could not be reached";
    case Errc::rejected: return "the peer rejected the connection";
    case Errc::disconnected: return "the connection was closed";
    case Errc::protocol_error: return "the peer broke the protocol";
    case Errc::io_error: return "a system call failed";
    case Errc::internal: return "an invariant of rnicdv broke";
  }
  return "unknown";
}

class ErrcCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "rnicdv"; }

  std::string message(int value) const override {
    if (!is_errc(value)) return "unknown rnicdv error " + std::to_string(value);
    return errc_sentence(static_cast<Errc>(value));
  }

  // Each code's errno, in the generic category: what `code == std::errc::...` compares.
  std::error_condition default_error_condition(int value) const noexcept override {
    if (!is_errc(value)) return {value, *this};
    return {to_errno(static_cast<Errc>(value)), std::generic_category()};
  }

  // A code is equivalent to the condition of its errno, in the generic category or in the
  // system category (which names errno values too on POSIX), and to itself.
  bool equivalent(int value, const std::error_condition& condition) const noexcept override {
    if (condition.category() == *this) return condition.value() == value;
    if (!is_errc(value)) return false;
    if (condition.category() != std::generic_category() &&
        condition.category() != std::system_category())
      return false;
    return condition.value() == to_errno(static_cast<Errc>(value));
  }
};

}  // namespace

const std::error_category& error_category() noexcept {
  static const ErrcCategory category;
  return category;
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
