// SPDX-License-Identifier: BSD-3-Clause
// Ownership of libibverbs objects, and errno -> Status conversion.
//
// Every verbs object is held by a unique_ptr with a deleter that calls the matching destroy
// verb. Objects that others depend on (the context, PDs, CQs) are shared: a QP keeps its PD and
// CQs alive, and everything keeps the context alive, so destruction order is right whatever
// order the application drops its handles in. (libmlx5 refuses to free a PD or CQ that a QP
// still uses and returns EBUSY; the object would leak.)
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "rnicdv/status.h"

namespace rnicdv::hw::mlx5 {

// Destroy verbs can fail (EBUSY, EIO after a device reset). A deleter cannot report, so it
// counts; tests assert the count stays zero.
uint64_t teardown_failures() noexcept;
void note_teardown_failure() noexcept;

struct ContextCloser {
  void operator()(ibv_context* c) const noexcept;
};
struct PdDeleter {
  void operator()(ibv_pd* p) const noexcept;
};
struct MrDeleter {
  void operator()(ibv_mr* m) const noexcept;
};
struct CqDeleter {
  void operator()(ibv_cq* c) const noexcept;
};
struct QpDeleter {
  void operator()(ibv_qp* q) const noexcept;
};
struct TdDeleter {
  void operator()(ibv_td* t) const noexcept;
};
struct CompChannelDeleter {
  void operator()(ibv_comp_channel* c) const noexcept;
};
struct SrqDeleter {
  void operator()(ibv_srq* s) const noexcept;
};

using ContextRef = std::shared_ptr<ibv_context>;
using PdPtr = std::unique_ptr<ibv_pd, PdDeleter>;
using MrPtr = std::unique_ptr<ibv_mr, MrDeleter>;
using CqPtr = std::unique_ptr<ibv_cq, CqDeleter>;
using QpPtr = std::unique_ptr<ibv_qp, QpDeleter>;
using TdPtr = std::unique_ptr<ibv_td, TdDeleter>;
using CompChannelPtr = std::unique_ptr<ibv_comp_channel, CompChannelDeleter>;
using SrqPtr = std::unique_ptr<ibv_srq, SrqDeleter>;

// A completion channel shared by its CompletionChannel handle and the CQs created on it (a
// channel cannot be destroyed while a CQ uses it).
struct CompChannelHandle {
  ContextRef ctx;  // declared first: released last
  CompChannelPtr channel;
};

// A protection domain shared by its Pd handle, its MRs and its QPs.
struct PdHandle {
  ContextRef ctx;  // declared first: released last
  PdPtr pd;
};

// A CQ shared by its Cq handle and the QPs that use it. The ibv_cq's cq_context points here so
// that an async CQ event can be mapped to the CQN.
// A shared receive queue shared by its Srq handle and the QPs on it. The ibv_srq's srq_context
// points here so that an SRQ_LIMIT_REACHED event can be mapped to the SRQN.
struct SrqHandle {
  ContextRef ctx;
  std::shared_ptr<PdHandle> pd;
  uint32_t srqn = 0;
  SrqPtr srq;
};

struct CqHandle {
  ContextRef ctx;
  std::shared_ptr<CompChannelHandle> channel;  // null without events; outlives cq
  uint32_t cqn = 0;
  CqPtr cq;
};

// The text of an errno value; never empty ("errno 0 (not set by the library)" for 0).
std::string errno_text(int err);

// The Errc that best describes an errno value from a verbs call.
Errc errc_from_errno(int err) noexcept;

// "<context>: <call>: <strerror>", with the Errc matching `err`.
Status verbs_failure(int err, std::string_view context, std::string_view call);

}  // namespace rnicdv::hw::mlx5
