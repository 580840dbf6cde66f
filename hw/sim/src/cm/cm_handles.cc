// SPDX-License-Identifier: BSD-3-Clause
#include "cm/cm_handles.h"

#include "cm/cm_record.h"

namespace rnicdv::sim::cm {

SimCmConnection::SimCmConnection(std::shared_ptr<CmAgent> agent, uint32_t id,
                                 std::shared_ptr<CmEventQueue> events, hw::CmAddress local,
                                 hw::CmAddress remote)
    : agent_(std::move(agent)),
      id_(id),
      events_(std::move(events)),
      local_(local),
      remote_(remote) {}

SimCmConnection::~SimCmConnection() {
  agent_->destroy(id_);
}

Status SimCmConnection::qp_attr(hw::QpState target, hw::QpAttr* attr, uint32_t* mask) const {
  return agent_->qp_attr(id_, target, attr, mask);
}

Status SimCmConnection::accept(const hw::CmAcceptParams& params) {
  return agent_->accept(id_, params);
}

Status SimCmConnection::reject(uint16_t reason, std::span<const uint8_t> private_data) {
  return agent_->reject(id_, reason, private_data);
}

Status SimCmConnection::establish() {
  return agent_->establish(id_);
}
Status SimCmConnection::notify_comm_est() {
  return agent_->notify_comm_est(id_);
}
bool SimCmConnection::set_established_notifier(void (*fn)(void* ctx), void* ctx) {
  agent_->set_established_notifier(id_, fn, ctx);
  return true;
}

Status SimCmConnection::disconnect() {
  return agent_->disconnect(id_);
}
std::string SimCmConnection::name() const {
  return connection_name(local_, remote_);
}

SimCmListener::SimCmListener(std::shared_ptr<CmAgent> agent, hw::CmAddress address, uint32_t key,
                             std::shared_ptr<CmEventQueue> events)
    : agent_(std::move(agent)), address_(address), key_(key), events_(std::move(events)) {}

SimCmListener::~SimCmListener() {
  // Requests nobody took are rejected there (REJ 28, or a SIDR_REP of status reject); their
  // announcements go with the queue.
  agent_->close_listener(key_);
}

bool SimCmListener::next_event(hw::CmEvent* out) {
  uint32_t request = 0;
  while (events_->pop(out, &request)) {
    if (request == 0 || agent_->take_request(request, out)) return true;
  }
  return false;
}

Status SimCmListener::set_backlog(int backlog) {
  return agent_->set_backlog(key_, backlog);
}

}  // namespace rnicdv::sim::cm
