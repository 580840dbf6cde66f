// SPDX-License-Identifier: BSD-3-Clause
// Error vocabulary shared by every layer.
//
// The fast path (post, ring, poll) reports a bare `Errc`: no allocation, no exception.
// The control path reports a `Status`, which carries the code and a message naming the
// object, the operation and the reason, e.g. "qp 0x1c: modify RTR->RTS: remote QPN not set".
// A `Result<T>` is a value or the Status saying why there is none; it composes as C++23's
// std::expected does (and_then, transform, or_else, value_or), and RNICDV_TRY and
// RNICDV_ASSIGN_OR_RETURN return its error from the enclosing function.
//
// `Errc` is a std::error_code enum of its own category ("rnicdv"), which maps each code to
// the errno a POSIX interface reports for it, so `st.error_code() == std::errc::timed_out`
// compares across the two vocabularies.
#pragma once

#include <cstdarg>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <system_error>
#include <type_traits>
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

// The category of Errc values in a std::error_code: name() "rnicdv", message() a sentence
// describing the code, and each code's default_error_condition() the std::generic_category()
// errno of to_errno(), so a code equals the std::errc of its errno ("queue_full" equals
// std::errc::no_space_on_device). One object, in librnicdv.
const std::error_category& error_category() noexcept;

// The errno a POSIX interface (the uverbs shim, a C caller) reports for `code`; 0 for ok.
// This is the project's one mapping of codes to errno values; several codes share one
// (every malformed request is EINVAL):
//   EINVAL       bad_state, too_many_sge, inline_too_large, invalid_argument
//   ENOSPC       queue_full (not ENOMEM, which libmlx5 returns for a full queue and for no
//                memory alike)
//   ENOMEM       no_resources          ENOENT      not_found
//   EBUSY        busy                  EOPNOTSUPP  unsupported
//   EACCES       access_denied         EADDRINUSE  address_in_use
//   ETIMEDOUT    timeout               EHOSTUNREACH unreachable
//   ECONNREFUSED rejected              ENOTCONN    disconnected
//   EPROTO       protocol_error        EIO         io_error, qp_in_error, internal
int to_errno(Errc code) noexcept;

// Found by argument-dependent lookup: `std::error_code ec = Errc::timeout;`.
inline std::error_code make_error_code(Errc code) noexcept {
  return {static_cast<int>(code), error_category()};
}

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
  // The code as a std::error_code of error_category(): compares with std::errc values and
  // with other categories' codes, and what std::system_error carries.
  std::error_code error_code() const noexcept { return make_error_code(code_); }
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

template <class T>
class Result;

namespace detail {
template <class R>
inline constexpr bool is_result_v = false;
template <class T>
inline constexpr bool is_result_v<Result<T>> = true;

// What RNICDV_TRY returns: the Status itself, or the error of a Result.
inline Status status_of(Status status) noexcept { return status; }
template <class T>
Status status_of(Result<T>&& result) {
  return std::move(result).status();
}
template <class T>
Status status_of(const Result<T>& result) {
  return result.status();
}
}  // namespace detail

// A value or the Status explaining why there is none. A Status is the Result of an
// operation that yields no value (std::expected<void, E>'s place).
//
// The monadic operations follow std::expected's ([expected.object.monadic]): the
// continuation runs only with a value, and an error passes through unchanged (the
// continuation is not called):
//   and_then(f)  f(value) returns a Result<U> or a Status, which is the result.
//   transform(f) f(value) returns a U: the result is Result<U> (a Status if U is void).
//   or_else(f)   f(status) runs only on an error and returns a Result<T>; a value passes.
//   value_or(v)  the value, or v converted to T.
// Each works on an lvalue (the value is passed by reference) and on an rvalue (it is moved),
// so move-only values compose:
//   return hca.create_cq(n).transform([](CqObj* cq) { return std::make_unique<SimCq>(cq); });
template <class T>
class [[nodiscard]] Result {
  static_assert(!std::is_same_v<std::remove_cv_t<T>, Status>, "Result<Status>: use Status");
  static_assert(!std::is_reference_v<T>, "Result<T&>: hold a pointer");

 public:
  using value_type = T;

  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  // From a Result of a type T is made from (unique_ptr<Derived> to unique_ptr<Base>), as
  // std::expected converts; implicit where U converts to T implicitly.
  template <class U>
    requires(!std::is_same_v<U, T> && std::is_constructible_v<T, U &&> &&
             !std::is_constructible_v<T, Result<U> &&>)
  explicit(!std::is_convertible_v<U&&, T>) Result(Result<U>&& other)  // NOLINT
      : v_(converted(std::move(other))) {}

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
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }

  // The error; Status::ok() when a value is present. An rvalue gives its Status up.
  Status status() const& { return is_ok() ? Status() : std::get<1>(v_); }
  Status status() && { return is_ok() ? Status() : std::get<1>(std::move(v_)); }

  template <class U = std::remove_cv_t<T>>
  T value_or(U&& fallback) const& {
    static_assert(std::is_copy_constructible_v<T> && std::is_convertible_v<U&&, T>);
    if (is_ok()) return std::get<0>(v_);
    return static_cast<T>(std::forward<U>(fallback));
  }
  template <class U = std::remove_cv_t<T>>
  T value_or(U&& fallback) && {
    static_assert(std::is_move_constructible_v<T> && std::is_convertible_v<U&&, T>);
    if (is_ok()) return std::get<0>(std::move(v_));
    return static_cast<T>(std::forward<U>(fallback));
  }

  template <class F>
  auto and_then(F&& f) & {
    return and_then_impl(*this, std::forward<F>(f));
  }
  template <class F>
  auto and_then(F&& f) const& {
    return and_then_impl(*this, std::forward<F>(f));
  }
  template <class F>
  auto and_then(F&& f) && {
    return and_then_impl(std::move(*this), std::forward<F>(f));
  }

  template <class F>
  auto transform(F&& f) & {
    return transform_impl(*this, std::forward<F>(f));
  }
  template <class F>
  auto transform(F&& f) const& {
    return transform_impl(*this, std::forward<F>(f));
  }
  template <class F>
  auto transform(F&& f) && {
    return transform_impl(std::move(*this), std::forward<F>(f));
  }

  template <class F>
  Result or_else(F&& f) const& {
    using G = std::remove_cvref_t<std::invoke_result_t<F, const Status&>>;
    static_assert(std::is_same_v<G, Result>, "or_else: the continuation returns a Result<T>");
    if (is_ok()) return Result(std::get<0>(v_));
    return std::invoke(std::forward<F>(f), std::get<1>(v_));
  }
  template <class F>
  Result or_else(F&& f) && {
    using G = std::remove_cvref_t<std::invoke_result_t<F, Status&&>>;
    static_assert(std::is_same_v<G, Result>, "or_else: the continuation returns a Result<T>");
    if (is_ok()) return Result(std::get<0>(std::move(v_)));
    return std::invoke(std::forward<F>(f), std::get<1>(std::move(v_)));
  }

 private:
  template <class>
  friend class Result;

  void check() const {
    if (!is_ok()) throw BadResultAccess(std::get<1>(v_));
  }

  template <class U>
  static std::variant<T, Status> converted(Result<U>&& other) {
    if (other.is_ok())
      return std::variant<T, Status>(std::in_place_index<0>, std::get<0>(std::move(other.v_)));
    return std::variant<T, Status>(std::in_place_index<1>, std::get<1>(std::move(other.v_)));
  }

  // `self` is *this as the overload received it: its value and its Status are forwarded
  // with the same category (an rvalue Result moves them).
  template <class Self, class F>
  static auto and_then_impl(Self&& self, F&& f) {
    using R = std::remove_cvref_t<
        std::invoke_result_t<F, decltype(std::get<0>(std::forward<Self>(self).v_))>>;
    static_assert(detail::is_result_v<R> || std::is_same_v<R, Status>,
                  "and_then: the continuation returns a Result<U> or a Status");
    if (!self.is_ok()) return R(std::get<1>(std::forward<Self>(self).v_));
    return R(std::invoke(std::forward<F>(f), std::get<0>(std::forward<Self>(self).v_)));
  }

  template <class Self, class F>
  static auto transform_impl(Self&& self, F&& f) {
    using U = std::remove_cv_t<
        std::invoke_result_t<F, decltype(std::get<0>(std::forward<Self>(self).v_))>>;
    if constexpr (std::is_void_v<U>) {
      if (!self.is_ok()) return Status(std::get<1>(std::forward<Self>(self).v_));
      std::invoke(std::forward<F>(f), std::get<0>(std::forward<Self>(self).v_));
      return Status::ok();
    } else {
      static_assert(!std::is_reference_v<U> && !std::is_same_v<U, Status>,
                    "transform: the continuation returns a value (use and_then for a Status)");
      if (!self.is_ok()) return Result<U>(std::get<1>(std::forward<Self>(self).v_));
      return Result<U>(std::invoke(std::forward<F>(f), std::get<0>(std::forward<Self>(self).v_)));
    }
  }

  std::variant<T, Status> v_;
};

}  // namespace rnicdv

template <>
struct std::is_error_code_enum<rnicdv::Errc> : std::true_type {};

// Return-on-error, for a function that returns a Status or any Result<U>.
//
// RNICDV_TRY(expr): `expr` is a Status, or a Result whose value is not wanted; if it holds an
// error, the enclosing function returns that Status.
//   RNICDV_TRY(qp.modify(attr, mask));
#define RNICDV_TRY(expr)                                                             \
  do {                                                                               \
    if (::rnicdv::Status rnicdv_try_status_ = ::rnicdv::detail::status_of(expr);     \
        !rnicdv_try_status_.is_ok()) [[unlikely]]                                    \
      return rnicdv_try_status_;                                                     \
  } while (false)

// RNICDV_ASSIGN_OR_RETURN(lhs, expr): `expr` is a Result; with a value, `lhs = value`
// (moved), where `lhs` may declare (`auto dev`, `std::unique_ptr<Pd> pd`) or name an
// existing object; with an error, the enclosing function returns the Status. It expands to
// statements (use it where a declaration could stand), and a comma in `lhs` must be inside
// parentheses.
//   RNICDV_ASSIGN_OR_RETURN(auto pd, dev.alloc_pd());
#define RNICDV_ASSIGN_OR_RETURN(lhs, expr) \
  RNICDV_ASSIGN_OR_RETURN_IMPL_(RNICDV_STATUS_CONCAT_(rnicdv_result_, __LINE__), lhs, expr)
#define RNICDV_ASSIGN_OR_RETURN_IMPL_(result, lhs, expr) \
  auto result = (expr);                                  \
  if (!result.is_ok()) [[unlikely]]                      \
    return std::move(result).status();                   \
  lhs = *std::move(result)
#define RNICDV_STATUS_CONCAT_(a, b) RNICDV_STATUS_CONCAT_INNER_(a, b)
#define RNICDV_STATUS_CONCAT_INNER_(a, b) a##b
