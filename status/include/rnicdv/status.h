// SPDX-License-Identifier: BSD-3-Clause
// Error vocabulary shared by every layer.
//
// The fast path (post, ring, poll) reports a bare `Errc`: no allocation, no exception.
// The control path reports a `Status`, which carries the code and a message naming the
// object, the operation and the reason, e.g. "qp 0x1c: modify RTR->RTS: remote QPN not set".
#pragma once

#include <cstdarg>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <variant>

namespace rnicdv {

// Every code is distinct on purpose: a state error is never reported as "queue full"
// (libmlx5 returns ENOMEM for both).
enum class Errc : uint8_t {
  ok = 0,
  // Fast-path codes.
  bad_state,         // the QP's state does not allow the operation (IB C10-22/25/29)
  queue_full,        // no room in the work queue (or the withheld batch would exceed it)
  too_many_sge,      // num_sge above the QP's max_send_sge / max_recv_sge
  inline_too_large,  // inline payload above the QP's max_inline_data
  invalid_argument,  // malformed request: unknown opcode, misaligned atomic, bad length...
  qp_in_error,       // the QP or its device hit a fatal error and accepts no more work
  // Control-path codes.
  not_found,          // no such device, object or address
  no_resources,       // a device limit was reached (QPs, MRs, CQ entries, memory)
  busy,               // the object is in use (e.g. destroying a PD that still has QPs)
  unsupported,        // the device or build lacks the capability
  access_denied,      // permission (e.g. a namespace operation without privileges)
  address_in_use,     // a port or address is already bound
  timeout,            // an operation or a connection attempt timed out
  unreachable,        // the peer could not be reached
  rejected,           // the peer rejected a connection
  disconnected,       // the connection was closed
  protocol_error,     // a peer sent something the protocol does not allow
  io_error,           // a system call failed; the message carries strerror
  internal,           // an invariant of this library broke; please report it
};

// A stable, lower-case name for each code ("queue_full"), for messages and JSON.
const char* errc_name(Errc code) noexcept;

// Outcome of a control-path operation.
class [[nodiscard]] Status {
 public:
  Status() noexcept = default;
  Status(Errc code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() noexcept { return Status(); }

  // printf-style message: Status::error(Errc::bad_state, "qp %#x: modify %s->%s: %s", ...).
  [[gnu::format(printf, 2, 3)]] static Status error(Errc code, const char* fmt, ...);

  bool is_ok() const noexcept { return code_ == Errc::ok; }
  explicit operator bool() const noexcept { return is_ok(); }
  Errc code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }

  // Prefixes context: "open sim3" + ": " + message.
  Status& prepend(const std::string& context) {
    if (!is_ok()) message_ = context + ": " + message_;
    return *this;
  }

 private:
  Errc code_ = Errc::ok;
  std::string message_;
};

// What Result<T>::value() throws when there is no value, as std::expected's
// bad_expected_access carries its error: the Status, and a what() that names it.
class BadResultAccess : public std::exception {
 public:
  explicit BadResultAccess(Status status)
      : status_(std::move(status)), what_("Result::value() without a value: " + status_.message()) {}
  const char* what() const noexcept override { return what_.c_str(); }
  const Status& status() const noexcept { return status_; }

 private:
  Status status_;
  std::string what_;
};

// A value or the Status explaining why there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool is_ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return is_ok(); }

  // The value; without one, throws BadResultAccess carrying the Status.
  T& value() & {
    check();
    return std::get<0>(v_);
  }
  const T& value() const& {
    check();
    return std::get<0>(v_);
  }
  T&& value() && {
    check();
    return std::get<0>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

  // The error; Status::ok() when a value is present.
  Status status() const { return is_ok() ? Status() : std::get<1>(v_); }

 private:
  void check() const {
    if (!is_ok()) throw BadResultAccess(std::get<1>(v_));
  }

  std::variant<T, Status> v_;
};

}  // namespace rnicdv
