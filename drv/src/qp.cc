// SPDX-License-Identifier: BSD-3-Clause
// QueuePair: the control-path surface and destruction.
#include "rnicdv/qp.h"

#include <arpa/inet.h>

#include <mutex>
#include <new>
#include <utility>

#include "device_core.h"
#include "rnicdv/detail/cq_core.h"
#include "rnicdv/detail/qp_core.h"

namespace rnicdv {

const char* early_post_name(EarlyPost e) noexcept {
  switch (e) {
    case EarlyPost::strict:
      return "strict";
    case EarlyPost::automatic:
      return "auto";
    case EarlyPost::in_place:
      return "in_place";
    case EarlyPost::shadow:
      return "shadow";
  }
  return "?";
}

const char* threading_name(Threading t) noexcept {
  switch (t) {
    case Threading::single:
      return "single";
    case Threading::single_poster:
      return "single_poster";
    case Threading::thread_safe:
      return "thread_safe";
  }
  return "?";
}

QueuePair::QueuePair(std::unique_ptr<detail::QpCore> core) : core_(core.release()) {}
QueuePair::QueuePair(QueuePair&& other) noexcept
    : core_(std::exchange(other.core_, detail::QpCore::moved_from())) {}

QueuePair& QueuePair::operator=(QueuePair&& other) noexcept {
  if (this != &other) {
    if (!core_->is_moved_from()) detail::QpCore::destroy(std::unique_ptr<detail::QpCore>(core_));
    core_ = std::exchange(other.core_, detail::QpCore::moved_from());
  }
  return *this;
}

QueuePair::~QueuePair() {
  if (!core_->is_moved_from()) detail::QpCore::destroy(std::unique_ptr<detail::QpCore>(core_));
}

namespace {

Status moved_from(const char* operation) {
  return Status::error(Errc::invalid_argument,
                       "queue pair: %s: this QueuePair was moved from and holds no QP", operation);
}

}  // namespace

Status QueuePair::modify(const hw::QpAttr& attr, uint32_t mask) {
  if (core_->is_moved_from()) return moved_from("modify");
  return core_->modify(attr, mask);
}

Status QueuePair::to_init(uint32_t remote_access) {
  return to_init(remote_access, 1);
}

Status QueuePair::to_init(uint32_t remote_access, uint8_t port) {
  hw::QpAttr attr;
  attr.state = hw::QpState::init;
  attr.access_flags = remote_access;
  attr.pkey_index = 0;
  attr.port_num = port;
  return modify(attr, hw::qp_attr::state | hw::qp_attr::access_flags | hw::qp_attr::port);
}

Status QueuePair::to_rtr(const QpEndpoint& remote, hw::Mtu mtu, uint8_t max_dest_rd_atomic,
                         uint8_t min_rnr_timer) {
  hw::QpAttr attr;
  attr.state = hw::QpState::rtr;
  attr.path_mtu = mtu;
  attr.dest_qpn = remote.qpn;
  attr.rq_psn = remote.psn;
  attr.remote_gid = remote.gid;
  attr.max_dest_rd_atomic = max_dest_rd_atomic;
  attr.min_rnr_timer = min_rnr_timer;
  namespace a = hw::qp_attr;
  // The responder's depths: not on UC, which has no responder resources or RNR, nor on an XRC
  // initiator, which receives nothing (ib_modify_qp_is_ok's table).
  const uint32_t reliability =
      core_->unreliable || core_->xrc ? 0 : a::max_dest_rd_atomic | a::min_rnr_timer;
  return modify(attr, a::state | a::path_mtu | a::dest_qpn | a::rq_psn | a::av | reliability);
}

Status QueuePair::to_rts(uint32_t sq_psn, uint8_t timeout, uint8_t retry_cnt, uint8_t rnr_retry,
                         uint8_t max_rd_atomic) {
  hw::QpAttr attr;
  attr.state = hw::QpState::rts;
  attr.sq_psn = sq_psn;
  attr.timeout = timeout;
  attr.retry_cnt = retry_cnt;
  attr.rnr_retry = rnr_retry;
  attr.max_rd_atomic = max_rd_atomic;
  namespace a = hw::qp_attr;
  // The requester's: not on UC; an XRC target, which only answers, takes its ACK timeout.
  const uint32_t reliability = core_->unreliable   ? 0
                               : core_->xrc_target ? a::timeout
                                                   : a::timeout | a::retry_cnt | a::rnr_retry |
                                                         a::max_rd_atomic;
  return modify(attr, a::state | a::sq_psn | reliability);
}

Status QueuePair::to_error() {
  hw::QpAttr attr;
  attr.state = hw::QpState::err;
  return modify(attr, hw::qp_attr::state);
}

Status QueuePair::set_rate_limit(uint32_t kbps, uint32_t max_burst_bytes,
                                 uint16_t typical_pkt_bytes) {
  if (core_->is_moved_from()) return moved_from("set_rate_limit");
  hw::RateLimit limit;
  limit.kbps = kbps;
  limit.max_burst_bytes = max_burst_bytes;
  limit.typical_pkt_bytes = typical_pkt_bytes;
  std::lock_guard control(core_->control_mutex);
  return core_->hw_qp->set_rate_limit(limit);
}

Result<hw::Gid> multicast_gid(const std::string& address) {
  Result<hw::IpAddress> a = hw::IpAddress::parse(address);
  if (!a) return a.status().prepend("multicast group '" + address + "'");
  if (!a.value().is_multicast())
    return Status::error(Errc::invalid_argument,
                         "multicast group '%s': not a multicast address (%s)", address.c_str(),
                         a.value().is_v4() ? "224.0.0.0/4" : "ff00::/8");
  return hw::Gid::from_ip(a.value());
}

Status QueuePair::attach_multicast(const hw::Gid& group) {
  if (core_->is_moved_from()) return moved_from("attach_multicast");
  std::lock_guard control(core_->control_mutex);
  return core_->hw_qp->attach_multicast(group);
}

Status QueuePair::detach_multicast(const hw::Gid& group) {
  if (core_->is_moved_from()) return moved_from("detach_multicast");
  std::lock_guard control(core_->control_mutex);
  return core_->hw_qp->detach_multicast(group);
}

Status QueuePair::reset() {
  hw::QpAttr attr;
  attr.state = hw::QpState::reset;
  return modify(attr, hw::qp_attr::state);
}

hw::QpState QueuePair::state() const noexcept {
  return core_->state.load(std::memory_order_acquire);
}
uint32_t QueuePair::qpn() const noexcept {
  return core_->qpn;
}

QpEndpoint QueuePair::local_endpoint(uint32_t psn) const {
  if (core_->is_moved_from()) return QpEndpoint{};
  // The GID of the port the QP sends through.
  const hw::DeviceInfo& info = core_->device->hw->info();
  const uint8_t port = core_->port.load(std::memory_order_relaxed);
  const hw::Gid& gid = port >= 1 && port <= info.ports.size() ? info.ports[port - 1u].gid : info.gid;
  return QpEndpoint{core_->qpn, psn & 0xffffff, gid};
}

EarlyPost QueuePair::early_post() const noexcept {
  return core_->early_post;
}
doorbell::DoorbellMode QueuePair::doorbell_mode() const noexcept {
  return core_->doorbell.mode();
}
Threading QueuePair::threading() const noexcept {
  return core_->threading;
}
const hw::QpCaps& QueuePair::caps() const noexcept {
  return core_->granted;
}
Result<uint32_t> QueuePair::abort_staged() noexcept {
  return core_->abort_staged();
}

uint32_t QueuePair::withheld() const noexcept {
  return core_->withheld.load(std::memory_order_relaxed);
}

void QueuePair::set_comm_est_handler(void (*fn)(void* ctx), void* ctx, bool where_learnt) {
  if (core_->is_moved_from()) return;
  {
    std::lock_guard lock(core_->device->mutex);
    core_->comm_est_fn = fn;
    core_->comm_est_ctx = ctx;
  }
  // Outside the device's lock: the backend may be calling the previous notifier, which takes
  // it to move the QP.
  if (core_->hw_qp) (void)core_->hw_qp->set_comm_est_notifier(where_learnt ? fn : nullptr, ctx);
}

namespace detail {

QpCore::~QpCore() {
  hw_qp.reset();
  ::operator delete (shadow_storage, std::align_val_t{wqe::kBbBytes});
}

QpCore* QpCore::moved_from() noexcept {
  // Threading::single: nothing ever takes its locks; strict and RESET: nothing is accepted.
  static QpCore* const core = [] {
    auto* c = new QpCore();
    c->threading = Threading::single;
    c->early_post = EarlyPost::strict;
    return c;
  }();
  return core;
}

void QpCore::destroy(std::unique_ptr<QpCore> core) noexcept {
  QpCore* qp = core.get();
  {
    // Async events can no longer find it.
    std::lock_guard lock(qp->device->mutex);
    qp->device->qp_table.erase(qp->qpn);
    qp->device->qps.erase(qp);
  }
  {
    std::lock_guard control(qp->control_mutex);
    OptionalSpinGuard post(qp->post_lock, qp->locks_posts());
    // The device QP goes now: the device stops executing it, and withheld work (never given
    // to it) is simply dropped with the rings.
    qp->hw_qp.reset();
    if (qp->send_cq) qp->send_cq->remove_software_qp(qp);
    qp->publish_state(hw::QpState::reset);
  }
  if (qp->xrc_target) {
    // No CQ of its own: its receives complete on its domain's SRQs' CQs, whose pollers may
    // hold it still. It is parked in every CQ of the device, freed once all have polled.
    std::shared_ptr<QpCore> shared(std::move(core));
    std::lock_guard lock(qp->device->mutex);
    for (CqCore* cq : qp->device->cqs) {
      try {
        cq->bury(shared);
      } catch (const std::bad_alloc&) {
        new (std::nothrow) std::shared_ptr<QpCore>(shared);
      }
    }
    return;
  }
  qp->send_cq->detach(qp);
  if (qp->recv_cq != qp->send_cq) qp->recv_cq->detach(qp);
  // A poller may still hold a pointer to this core: park it in each CQ's graveyard, freed at
  // that CQ's next poll. CQEs left for this QPN are then counted as orphaned.
  std::shared_ptr<QpCore> shared(std::move(core));
  std::shared_ptr<CqCore> send = std::move(shared->send_cq);
  std::shared_ptr<CqCore> recv = std::move(shared->recv_cq);
  try {
    send->bury(shared);
    if (recv != send) recv->bury(shared);
  } catch (const std::bad_alloc&) {
    // No memory to park it: keep it for the life of the process rather than free memory a
    // poller might still read.
    new (std::nothrow) std::shared_ptr<QpCore>(shared);
  }
  shared.reset();
  // Dropping these may destroy a CQ whose handle is gone (and, with it, this core).
}

}  // namespace detail
}  // namespace rnicdv
