// SPDX-License-Identifier: BSD-3-Clause
// The CM agent's core: ports, identifiers, timers, inbound dispatch, listeners, QP attributes.
#include "cm/cm_agent.h"

#include <sys/random.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "cm/cm_handles.h"
#include "cm/cm_record.h"

namespace rnicdv::sim::cm {

std::string connection_name(const hw::CmAddress& local, const hw::CmAddress& remote) {
  return "cm " + hw::cm_address_string(local) + "->" + hw::cm_address_string(remote);
}

const char* CmAgent::state_name(State s) noexcept {
  switch (s) {
    case State::idle:
      return "IDLE";
    case State::req_sent:
      return "REQ_SENT";
    case State::mra_req_rcvd:
      return "MRA_REQ_RCVD";
    case State::req_rcvd:
      return "REQ_RCVD";
    case State::rep_sent:
      return "REP_SENT";
    case State::mra_rep_rcvd:
      return "MRA_REP_RCVD";
    case State::rep_rcvd:
      return "REP_RCVD";
    case State::established:
      return "ESTABLISHED";
    case State::dreq_sent:
      return "DREQ_SENT";
    case State::timewait:
      return "TIMEWAIT";
    case State::sidr_req_sent:
      return "SIDR_REQ_SENT";
    case State::sidr_req_rcvd:
      return "SIDR_REQ_RCVD";
  }
  return "?";
}

std::shared_ptr<CmAgent> CmAgent::create(const CmAgentConfig& config, MadPort* port) {
  return std::shared_ptr<CmAgent>(new CmAgent(config, port));
}

namespace {

uint64_t entropy64() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, 0) != sizeof v) v = std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32);
  return v;
}

uint64_t effective_seed(const CmAgentConfig& c) {
  return c.fresh_entropy ? c.seed ^ entropy64() : c.seed;
}

// The address's part of the agent's seed: an IPv4 address itself, as it always was (so that
// seeded IPv4 fabrics draw what they drew before), a digest of an IPv6 one.
uint64_t address_seed(const hw::IpAddress& a) noexcept {
  return a.is_v4() ? a.ipv4() : hw::hash_of(a);
}

}  // namespace

CmAgent::CmAgent(const CmAgentConfig& config, MadPort* port)
    : config_(config),
      hi_tid_(static_cast<uint32_t>(
          std::mt19937_64(effective_seed(config) ^ config.ca_guid ^ 0x7c1d5eedull)())),
      port_(port),
      rng_(effective_seed(config) ^ (address_seed(config.address) << 32) ^ config.ca_guid),
      id_rng_(config.fresh_entropy ? entropy64() : 0) {
  // Deterministic fabrics: IDs are allocated cyclically and XORed with a random operand, so
  // they never repeat soon (Linux cm.c cm_alloc_id_priv) and runs reproduce.
  next_comm_id_ = static_cast<uint32_t>(rng_());
  comm_id_mask_ = static_cast<uint32_t>(rng_());
}

CmAgent::~CmAgent() = default;

// ---- Port ------------------------------------------------------------------------------------

MadPort* CmAgent::acquire_port() const {
  std::lock_guard lock(port_mu_);
  if (!port_) return nullptr;
  ++port_users_;
  return port_;
}

void CmAgent::release_port() const {
  std::lock_guard lock(port_mu_);
  if (--port_users_ == 0) port_idle_.notify_all();
}

void CmAgent::detach_port() {
  std::unique_lock lock(port_mu_);
  port_ = nullptr;
  port_idle_.wait(lock, [this] { return port_users_ == 0; });
}

bool CmAgent::port_attached() const {
  std::lock_guard lock(port_mu_);
  return port_ != nullptr;
}

uint64_t CmAgent::now() const {
  MadPort* port = acquire_port();
  if (!port) return 0;
  const uint64_t t = port->now_ns();
  release_port();
  return t;
}

void CmAgent::flush(Outbox& out) {
  if (out.mads.empty() && out.schedule == UINT64_MAX) return;
  MadPort* port = acquire_port();
  if (!port) return;
  for (const auto& [dst, mad] : out.mads) port->send(dst, mad);
  if (out.schedule != UINT64_MAX) port->schedule(out.schedule);
  release_port();
}

// ---- Records, identifiers, messages -------------------------------------------------------------

CmAgent::Record* CmAgent::find(uint32_t id) {
  auto it = records_.find(id);
  return it == records_.end() ? nullptr : it->second.get();
}

const CmAgent::Record* CmAgent::find(uint32_t id) const {
  auto it = records_.find(id);
  return it == records_.end() ? nullptr : it->second.get();
}

CmAgent::Record* CmAgent::find_by_remote(uint64_t guid, uint32_t remote_comm_id) {
  auto it = by_remote_id_.find({guid, remote_comm_id});
  return it == by_remote_id_.end() ? nullptr : find(it->second);
}

uint32_t CmAgent::allocate_comm_id() {
  for (;;) {
    // Every ID still held (TIMEWAIT included) is skipped, so a random draw never reuses one
    // a peer may still associate with an old connection.
    const uint32_t id = config_.fresh_entropy ? static_cast<uint32_t>(id_rng_() >> 32)
                                              : next_comm_id_++ ^ comm_id_mask_;
    if (id != 0 && !records_.contains(id)) return id;
  }
}

// TID: the agent's high 32 bits, then the local communication ID (Linux cm_form_tid).
uint64_t CmAgent::tid_for(uint32_t local_id) const {
  return (uint64_t{hi_tid_} << 32) | local_id;
}

void CmAgent::emit(Outbox& out, const hw::IpAddress& dst, const MadBytes& mad) {
  const uint16_t attr = static_cast<uint16_t>((mad[16] << 8) | mad[17]);
  if (attr < drop_next_.size() && drop_next_[attr] > 0) {
    --drop_next_[attr];
    ++counters_.dropped_by_test_hook;
    ++counters_.tx_by_attr[attr];
    return;
  }
  if (attr < counters_.tx_by_attr.size()) ++counters_.tx_by_attr[attr];
  out.mads.emplace_back(dst, mad);
}

MadBytes CmAgent::send(Outbox& out, const hw::IpAddress& dst, uint64_t tid, CmBody body) {
  CmMad mad;
  mad.header.tid = tid;
  mad.body = std::move(body);
  MadBytes bytes = encode_cm_mad(mad);
  emit(out, dst, bytes);
  return bytes;
}

void CmAgent::arm(Record& r, TimerKind kind, uint64_t at) {
  switch (kind) {
    case TimerKind::retry:
      r.retry_at = at;
      break;
    case TimerKind::deadline:
      r.deadline_at = at;
      break;
    case TimerKind::timewait:
      r.timewait_at = at;
      break;
  }
  timers_.push(Timer{at, r.local_id});
  if (at < scheduled_at_) {
    scheduled_at_ = at;
    wake_request_ = at;
  }
}

void CmAgent::index_remote(Record& r) {
  if (!r.indexed_id) {
    by_remote_id_[{r.remote_guid, r.remote_id}] = r.local_id;
    r.indexed_id = true;
  }
  if (!r.indexed_qpn) {
    by_remote_qpn_[{r.remote_guid, r.remote_qpn}] = r.local_id;
    r.indexed_qpn = true;
  }
}

void CmAgent::unindex_live(Record& r) {
  if (r.indexed_qpn) {
    auto it = by_remote_qpn_.find({r.remote_guid, r.remote_qpn});
    if (it != by_remote_qpn_.end() && it->second == r.local_id) by_remote_qpn_.erase(it);
    r.indexed_qpn = false;
  }
}

void CmAgent::unindex_remote(Record& r) {
  unindex_live(r);
  if (r.sidr && !r.active) {
    auto it = sidr_by_remote_.find({r.remote.ip, r.remote_id});
    if (it != sidr_by_remote_.end() && it->second == r.local_id) sidr_by_remote_.erase(it);
  }
  if (r.indexed_id) {
    auto it = by_remote_id_.find({r.remote_guid, r.remote_id});
    if (it != by_remote_id_.end() && it->second == r.local_id) by_remote_id_.erase(it);
    r.indexed_id = false;
  }
}

void CmAgent::post(Record& r, hw::CmEvent event) {
  if (event.type == hw::CmEventType::established && r.established_fn) {
    due_notifiers_.emplace_back(r.established_fn, r.established_ctx);
    r.established_fn = nullptr;  // once
  }
  if (!r.events) return;
  event.remote = r.remote;
  r.events->push(std::move(event));
}

void CmAgent::finish(Record& r) {
  release_slot(r);
  unindex_remote(r);
  r.state = State::idle;
  r.retry_at = r.deadline_at = r.timewait_at = 0;
  if (!r.handle_alive) erase(r.local_id);
}

void CmAgent::erase(uint32_t id) {
  auto it = records_.find(id);
  if (it == records_.end()) return;
  release_slot(*it->second);
  unindex_remote(*it->second);
  // The event queue is shared with the handle, and holds no handles: safe to drop here.
  records_.erase(it);
}

void CmAgent::retransmit(Outbox& out, Record& r, uint64_t now) {
  --r.tries_left;
  ++counters_.retransmits;
  emit(out, r.remote.ip, r.pending);
  arm(r, TimerKind::retry, now + r.retry_interval_ns);
}

// ---- Inbound ---------------------------------------------------------------------------------

void CmAgent::on_mad(const hw::IpAddress& src, std::span<const uint8_t> bytes) {
  Result<CmMad> decoded = decode_cm_mad(bytes);
  const uint64_t t = now();
  Outbox out;
  {
    std::lock_guard lock(mu_);
    if (!decoded) {
      ++counters_.rx_malformed;
      return;
    }
    const CmMad& mad = decoded.value();
    if (mad.header.attr_id < counters_.rx_by_attr.size())
      ++counters_.rx_by_attr[mad.header.attr_id];
    std::visit(
        [&](const auto& m) {
          using M = std::decay_t<decltype(m)>;
          if constexpr (std::is_same_v<M, ReqMsg>)
            on_req(out, src, mad.header, m, t);
          else if constexpr (std::is_same_v<M, RepMsg>)
            on_rep(out, src, mad.header, m);
          else if constexpr (std::is_same_v<M, RtuMsg>)
            on_rtu(out, src, m, t);
          else if constexpr (std::is_same_v<M, RejMsg>)
            on_rej(src, m, t);
          else if constexpr (std::is_same_v<M, MraMsg>)
            on_mra(src, m, t);
          else if constexpr (std::is_same_v<M, DreqMsg>)
            on_dreq(out, src, mad.header, m, t);
          else if constexpr (std::is_same_v<M, DrepMsg>)
            on_drep(src, m, t);
          else if constexpr (std::is_same_v<M, SidrReqMsg>)
            on_sidr_req(out, src, mad.header, m, t);
          else if constexpr (std::is_same_v<M, SidrRepMsg>)
            on_sidr_rep(src, mad.header, m);
        },
        mad.body);
    out.schedule = std::exchange(wake_request_, UINT64_MAX);
  }
  flush(out);
  call_due_notifiers();
}

void CmAgent::call_due_notifiers() {
  std::vector<std::pair<void (*)(void*), void*>> due;
  {
    std::lock_guard lock(mu_);
    if (due_notifiers_.empty()) return;
    due.swap(due_notifiers_);
  }
  for (auto& [fn, ctx] : due) fn(ctx);
}

void CmAgent::set_established_notifier(uint32_t id, void (*fn)(void* ctx), void* ctx) {
  std::lock_guard lock(mu_);
  if (Record* r = find(id)) {
    r->established_fn = fn;
    r->established_ctx = ctx;
  }
}

void CmAgent::on_timer() {
  const uint64_t t = now();
  Outbox out;
  {
    std::lock_guard lock(mu_);
    scheduled_at_ = UINT64_MAX;
    while (!timers_.empty() && timers_.top().at <= t) {
      const uint32_t id = timers_.top().id;
      timers_.pop();
      if (id == kFaultTimerId)
        fault_dreq_due(out, t);
      else if (Record* r = find(id))
        on_timer_for(out, *r, t);
    }
    if (!timers_.empty() && timers_.top().at < scheduled_at_) {
      scheduled_at_ = timers_.top().at;
      wake_request_ = scheduled_at_;
    }
    out.schedule = std::exchange(wake_request_, UINT64_MAX);
  }
  flush(out);
  call_due_notifiers();
}

void CmAgent::on_timer_for(Outbox& out, Record& r, uint64_t now) {
  const uint32_t id = r.local_id;
  if (r.deadline_at && r.deadline_at <= now) {
    r.deadline_at = 0;
    if (r.state == State::req_sent || r.state == State::mra_req_rcvd) {
      connect_deadline_expired(out, r);
      return;
    }
    if (r.state == State::req_rcvd || r.state == State::rep_sent ||
        r.state == State::mra_rep_rcvd) {
      passive_deadline_expired(out, r);
      return;
    }
    if (r.state == State::sidr_req_sent || r.state == State::sidr_req_rcvd) {
      sidr_expired(out, r);
      return;
    }
  }
  if (r.retry_at && r.retry_at <= now) {
    r.retry_at = 0;
    retry_expired(out, r, now);
    if (!find(id)) return;
  }
  if (r.timewait_at && r.timewait_at <= now && r.state == State::timewait) {
    r.timewait_at = 0;
    finish(r);
  }
}

// ---- Listeners -------------------------------------------------------------------------------

Result<std::unique_ptr<hw::CmListener>> CmAgent::listen(const hw::CmAddress& local, int backlog) {
  return listen_in(hw::CmPortSpace::tcp, local, backlog);
}

Result<std::unique_ptr<hw::CmListener>> CmAgent::listen_ud(const hw::CmAddress& local,
                                                           int backlog) {
  return listen_in(hw::CmPortSpace::udp, local, backlog);
}

Result<std::unique_ptr<hw::CmListener>> CmAgent::listen_in(hw::CmPortSpace space,
                                                           const hw::CmAddress& local,
                                                           int backlog) {
  const bool udp = space == hw::CmPortSpace::udp;
  const std::string what = std::string(udp ? "listen (UDP port space) " : "listen ") +
                           hw::cm_address_string(local);
  if (!local.ip.is_unspecified() && local.ip != config_.address)
    return Status::error(Errc::invalid_argument, "%s: not an address of %s (%s)", what.c_str(),
                         config_.device_name.c_str(),
                         hw::cm_address_string({config_.address, 0}).c_str());
  if (local.port == 0)
    return Status::error(Errc::invalid_argument, "%s: port 0 cannot be listened on", what.c_str());
  if (!port_attached())
    return Status::error(Errc::disconnected, "%s: device %s is closed", what.c_str(),
                         config_.device_name.c_str());
  auto queue = CmEventQueue::create();
  if (!queue) return queue.status().prepend(what);
  const uint32_t key = listen_key(space, local.port);
  {
    std::lock_guard lock(mu_);
    if (listeners_.contains(key))
      return Status::error(Errc::address_in_use, "%s: port %u already has a listener on %s",
                           what.c_str(), local.port, config_.device_name.c_str());
    auto l = std::make_unique<Listener>();
    l->port = local.port;
    l->key = key;
    l->bound = local.ip;
    l->serial = next_listener_serial_++;
    l->backlog = hw::listen_backlog(backlog);
    l->events = queue.value();
    listeners_.emplace(key, std::move(l));
  }
  return std::unique_ptr<hw::CmListener>(
      new SimCmListener(shared_from_this(), local, key, std::move(queue.value())));
}

Status CmAgent::set_backlog(uint32_t key, int backlog) {
  std::lock_guard lock(mu_);
  auto it = listeners_.find(key);
  if (it == listeners_.end())
    return Status::error(Errc::not_found, "listen port %u on %s: set backlog: not listening",
                         key & 0xffff, config_.device_name.c_str());
  it->second->backlog = hw::listen_backlog(backlog);
  return Status::ok();
}

void CmAgent::close_listener(uint32_t key) {
  const uint64_t t = now();
  Outbox out;
  {
    std::lock_guard lock(mu_);
    auto it = listeners_.find(key);
    if (it == listeners_.end()) return;
    const uint64_t serial = it->second->serial;
    // Requests the application never took are rejected, as destroying an unanswered request
    // is (REJ 28 from REQ_RCVD, cm_destroy_id). Those it took stay its own.
    std::vector<uint32_t> untaken;
    for (auto& [id, r] : records_) {
      if (r->active || r->taken || r->listener_serial != serial) continue;
      if (r->state == State::req_rcvd || r->state == State::sidr_req_rcvd) untaken.push_back(id);
    }
    for (uint32_t id : untaken) {
      Record& r = *find(id);
      if (r.sidr) {
        answer_sidr(out, r, hw::sidr_status::reject, 0, 0, {});
      } else {
        send_rej(out, r, hw::reject_reason::consumer_defined, 0, {});
        enter_timewait(r, t);
      }
    }
    listeners_.erase(it);
    out.schedule = std::exchange(wake_request_, UINT64_MAX);
  }
  flush(out);
}

CmAgent::Listener* CmAgent::listener_of(const Record& r) {
  auto it = listeners_.find(
      listen_key(r.sidr ? hw::CmPortSpace::udp : hw::CmPortSpace::tcp, r.local.port));
  return it != listeners_.end() && it->second->serial == r.listener_serial ? it->second.get()
                                                                           : nullptr;
}

void CmAgent::release_slot(Record& r) {
  if (!r.holds_slot) return;
  r.holds_slot = false;
  Listener* l = listener_of(r);
  if (!l) return;
  --l->pending;
  if (auto it = l->pending_by_source.find(r.remote.ip); it != l->pending_by_source.end())
    if (--it->second == 0) l->pending_by_source.erase(it);
  if (!r.taken) l->events->remove_request(r.local_id);
}

bool CmAgent::take_request(uint32_t id, hw::CmEvent* ev) {
  std::lock_guard lock(mu_);
  Record* r = find(id);
  if (!r || r->active || r->taken ||
      (r->state != State::req_rcvd && r->state != State::sidr_req_rcvd))
    return false;
  Listener* l = listener_of(*r);
  if (!l) return false;
  r->taken = true;
  r->events = CmEventQueue::create_relayed(l->events);
  ev->request = make_connection_handle(id);
  return true;
}

size_t CmAgent::pending_requests(uint16_t port) const {
  std::lock_guard lock(mu_);
  auto it = listeners_.find(listen_key(hw::CmPortSpace::tcp, port));
  return it == listeners_.end() ? 0 : it->second->pending;
}

size_t CmAgent::pending_requests_from(uint16_t port, const hw::IpAddress& src) const {
  std::lock_guard lock(mu_);
  auto it = listeners_.find(listen_key(hw::CmPortSpace::tcp, port));
  if (it == listeners_.end()) return 0;
  auto s = it->second->pending_by_source.find(src);
  return s == it->second->pending_by_source.end() ? 0 : s->second;
}

// ---- Handles, attributes, hooks -----------------------------------------------------------------

std::unique_ptr<hw::CmConnection> CmAgent::make_connection_handle(uint32_t id) {
  Record* r = find(id);
  r->handle_alive = true;
  return std::unique_ptr<hw::CmConnection>(
      new SimCmConnection(shared_from_this(), id, r->events, r->local, r->remote));
}

Result<CmAgent::State> CmAgent::state_of(uint32_t id) const {
  std::lock_guard lock(mu_);
  const Record* r = find(id);
  if (!r) return Status::error(Errc::not_found, "cm connection 0x%08x is gone", id);
  return r->state;
}

Status CmAgent::qp_attr(uint32_t id, hw::QpState target, hw::QpAttr* attr, uint32_t* mask) const {
  std::lock_guard lock(mu_);
  const Record* r = find(id);
  if (!r) return Status::error(Errc::not_found, "cm connection 0x%08x is gone", id);
  const char* name = hw::qp_state_name(target);
  if (r->sidr)
    return Status::error(Errc::bad_state,
                         "%s: qp attributes for %s: a SIDR request connects no QP (a UD QP "
                         "takes its Q_Key and the peer's address per send)",
                         r->name.c_str(), name);
  *attr = hw::QpAttr{};
  attr->state = target;
  switch (target) {
    case hw::QpState::init:
      attr->pkey_index = 0;
      attr->port_num = 1;
      attr->access_flags =
          hw::access::remote_write | hw::access::remote_read | hw::access::remote_atomic;
      *mask = hw::qp_attr::state | hw::qp_attr::port | hw::qp_attr::access_flags;
      return Status::ok();
    case hw::QpState::rtr:
      if (r->remote_qpn == 0)
        return Status::error(Errc::bad_state,
                             "%s: qp attributes for %s: the peer's QPN is not "
                             "known yet (state %s)",
                             r->name.c_str(), name, state_name(r->state));
      attr->path_mtu = r->mtu;
      attr->dest_qpn = r->remote_qpn;
      attr->rq_psn = r->rq_psn;
      attr->max_dest_rd_atomic = r->responder_resources;
      attr->min_rnr_timer = 12;  // 0.64 ms; the CM does not carry it (IBA 12.7.34 is local)
      attr->remote_gid = hw::Gid::from_ip(r->remote.ip);
      attr->traffic_class = r->traffic_class;
      attr->hop_limit = r->hop_limit;
      attr->flow_label = r->flow_label;
      attr->sl = r->sl;
      *mask = hw::qp_attr::state | hw::qp_attr::path_mtu | hw::qp_attr::dest_qpn |
              hw::qp_attr::rq_psn | hw::qp_attr::max_dest_rd_atomic | hw::qp_attr::min_rnr_timer |
              hw::qp_attr::av;
      return Status::ok();
    case hw::QpState::rts:
      // The passive side may ask before accept (rdma_cm moves its QP to RTS before the REP):
      // what RTS needs is known from the REQ.
      if (r->remote_qpn == 0)
        return Status::error(Errc::bad_state,
                             "%s: qp attributes for %s: not negotiated yet "
                             "(state %s)",
                             r->name.c_str(), name, state_name(r->state));
      attr->sq_psn = r->sq_psn;
      attr->timeout = r->local_ack_timeout;
      attr->retry_cnt = r->retry_count;
      attr->rnr_retry = r->rnr_retry_count;
      attr->max_rd_atomic = r->initiator_depth;
      *mask = hw::qp_attr::state | hw::qp_attr::sq_psn | hw::qp_attr::timeout |
              hw::qp_attr::retry_cnt | hw::qp_attr::rnr_retry | hw::qp_attr::max_rd_atomic;
      return Status::ok();
    default:
      return Status::error(Errc::invalid_argument,
                           "%s: qp attributes for %s: the CM only "
                           "gives INIT, RTR and RTS",
                           r->name.c_str(), name);
  }
}

void CmAgent::drop_outgoing(AttrId attr, uint32_t count) {
  std::lock_guard lock(mu_);
  const auto i = static_cast<size_t>(attr);
  if (i < drop_next_.size()) drop_next_[i] = count;
}

CmCounters CmAgent::counters() const {
  std::lock_guard lock(mu_);
  return counters_;
}

size_t CmAgent::connection_count() const {
  std::lock_guard lock(mu_);
  return records_.size();
}

std::string CmAgent::dump() const {
  std::lock_guard lock(mu_);
  std::string s = "cm " + config_.device_name + ": " + std::to_string(listeners_.size()) +
                  " listeners, " + std::to_string(records_.size()) + " connections\n";
  for (const auto& [key, l] : listeners_)
    s += std::string(key >> 16 == static_cast<uint16_t>(hw::CmPortSpace::udp) ? "  listen udp "
                                                                               : "  listen ") +
         hw::cm_address_string({l->bound, l->port}) + " backlog " +
         std::to_string(l->backlog) + ", " + std::to_string(l->pending) + " waiting\n";
  for (const auto& [id, r] : records_) {
    char line[256];
    std::snprintf(line, sizeof line,
                  "  %s id 0x%08x remote 0x%08x %s %s qpn 0x%x->0x%x psn 0x%06x/0x%06x\n",
                  r->name.c_str(), id, r->remote_id, r->active ? "active" : "passive",
                  state_name(r->state), r->local_qpn, r->remote_qpn, r->sq_psn, r->rq_psn);
    s += line;
  }
  return s;
}

}  // namespace rnicdv::sim::cm
