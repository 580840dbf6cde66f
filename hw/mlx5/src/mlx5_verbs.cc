// SPDX-License-Identifier: BSD-3-Clause
#include "mlx5_verbs.h"

#include <atomic>
#include <cerrno>
#include <cstring>

namespace rnicdv::hw::mlx5 {

namespace {
std::atomic<uint64_t> g_teardown_failures{0};
}  // namespace

uint64_t teardown_failures() noexcept {
  return g_teardown_failures.load(std::memory_order_relaxed);
}

void note_teardown_failure() noexcept {
  g_teardown_failures.fetch_add(1, std::memory_order_relaxed);
}

void ContextCloser::operator()(ibv_context* c) const noexcept {
  if (c && ibv_close_device(c) != 0) note_teardown_failure();
}
void PdDeleter::operator()(ibv_pd* p) const noexcept {
  if (p && ibv_dealloc_pd(p) != 0) note_teardown_failure();
}
void MrDeleter::operator()(ibv_mr* m) const noexcept {
  if (m && ibv_dereg_mr(m) != 0) note_teardown_failure();
}
void CqDeleter::operator()(ibv_cq* c) const noexcept {
  if (c && ibv_destroy_cq(c) != 0) note_teardown_failure();
}
void QpDeleter::operator()(ibv_qp* q) const noexcept {
  if (q && ibv_destroy_qp(q) != 0) note_teardown_failure();
}
void TdDeleter::operator()(ibv_td* t) const noexcept {
  if (t && ibv_dealloc_td(t) != 0) note_teardown_failure();
}
void SrqDeleter::operator()(ibv_srq* q) const noexcept {
  if (q && ibv_destroy_srq(q) != 0) note_teardown_failure();
}
void CompChannelDeleter::operator()(ibv_comp_channel* c) const noexcept {
  if (c && ibv_destroy_comp_channel(c) != 0) note_teardown_failure();
}

namespace {
// strerror_r comes in two flavours (XSI returns int, GNU returns char*); both are handled so the
// code builds on either libc.
[[maybe_unused]] const char* strerror_result(int rc, const char* buf) {
  return rc == 0 ? buf : nullptr;
}
[[maybe_unused]] const char* strerror_result(const char* text, const char*) {
  return text;
}
}  // namespace

std::string errno_text(int err) {
  if (err == 0) return "errno 0 (not set by the library)";
  char buf[128] = {};
  const char* text = strerror_result(strerror_r(err, buf, sizeof buf), buf);
  if (!text || !*text) return "errno " + std::to_string(err);
  return text;
}

Errc errc_from_errno(int err) noexcept {
  switch (err) {
    case ENOMEM:
    case ENOSPC:
    case EMFILE:
    case ENFILE:
    case EAGAIN:
    case ENOBUFS:
      return Errc::no_resources;
    case EINVAL:
    case ERANGE:
    case EFAULT:
      return Errc::invalid_argument;
    case EOPNOTSUPP:
    case ENOSYS:
    case EPROTONOSUPPORT:
      return Errc::unsupported;
    case EPERM:
    case EACCES:
      return Errc::access_denied;
    case EBUSY:
      return Errc::busy;
    case ENODEV:
    case ENXIO:
    case ENOENT:
      return Errc::not_found;
    case ETIMEDOUT:
      return Errc::timeout;
    default:
      return Errc::io_error;
  }
}

Status verbs_failure(int err, std::string_view context, std::string_view call) {
  std::string msg;
  msg.reserve(context.size() + call.size() + 48);
  msg.append(context).append(": ").append(call).append(": ").append(errno_text(err));
  return Status(errc_from_errno(err), std::move(msg));
}

}  // namespace rnicdv::hw::mlx5
