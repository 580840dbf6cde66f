// SPDX-License-Identifier: BSD-3-Clause
// A device's life: creation, attaching to the fabric, introspection, pause and stop, and
// QP state changes (modify_qp: the checks and effects are rc/qp_state.cc's).
#include "hca.h"

#include <pthread.h>
#include "rc/queues.h"

#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "fabric_shared.h"
#include "quiet_thread.h"

namespace rnicdv::sim {

std::atomic<uint32_t> g_fork_epoch{0};

uint32_t fork_epoch() {
  static const int registered = ::pthread_atfork(
      nullptr, nullptr, [] { g_fork_epoch.fetch_add(1, std::memory_order_relaxed); });
  (void)registered;
  return g_fork_epoch.load(std::memory_order_relaxed);
}

Status Hca::check_owner(const char* op) const {
  if (!forked_away()) [[likely]]
    return Status::ok();
  return Status::error(Errc::access_denied,
                       "%s: %s: the device belongs to the parent process; a child of fork() "
                       "cannot use it (open a device of its own)",
                       info_.name.c_str(), op);
}

// After a fatal error (link.cc) the device creates and changes nothing, as a ConnectX whose
// firmware stopped: mlx5_core fails every command but the destroys with EIO.
Status Hca::check_alive(const char* op) const {
  if (!dead()) [[likely]]
    return Status::ok();
  return Status::error(Errc::io_error, "%s: %s: the device had a fatal error", info_.name.c_str(),
                       op);
}

namespace {

hw::DeviceCaps merge_caps(const hw::DeviceCaps& asked) {
  hw::DeviceCaps c = default_caps();
  const auto take = [](auto& dst, auto src) {
    if (src != 0) dst = src;
  };
  take(c.max_qp, asked.max_qp);
  take(c.max_qp_wr, asked.max_qp_wr);
  take(c.max_send_sge, asked.max_send_sge);
  take(c.max_recv_sge, asked.max_recv_sge);
  take(c.max_inline_data, asked.max_inline_data);
  take(c.max_cq, asked.max_cq);
  take(c.max_cqe, asked.max_cqe);
  take(c.max_mr, asked.max_mr);
  take(c.max_mr_size, asked.max_mr_size);
  take(c.max_pd, asked.max_pd);
  take(c.max_msg_size, asked.max_msg_size);
  take(c.max_qp_rd_atom, asked.max_qp_rd_atom);
  take(c.max_qp_init_rd_atom, asked.max_qp_init_rd_atom);
  take(c.max_srq, asked.max_srq);
  take(c.max_srq_wr, asked.max_srq_wr);
  return c;
}

// The secret that scrambles this device's memory keys (mr_table.h). Deterministic fabrics
// replay from their seed, so it comes from the seed; otherwise from the kernel, so that
// keys differ from run to run and from device to device.
uint64_t memory_key_secret(const FabricShared& shared, uint32_t index) {
  uint64_t secret = shared.config.seed * 0x9e3779b97f4a7c15ull + index;
  if (!shared.deterministic()) {
    uint64_t random = 0;
    if (::getrandom(&random, sizeof random, GRND_NONBLOCK) != sizeof random)
      random = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    secret ^= random;
  }
  return secret;
}

}  // namespace

faults::FaultSchedule* Hca::fault_schedule() const {
  return shared_.faults.get();
}

Hca::Hca(std::shared_ptr<Fabric> fabric, FabricShared& shared, const DeviceConfig& config,
         uint32_t index)
    : fabric_(std::move(fabric)),
      shared_(shared),
      config_(config),
      index_(index),
      gsi_(*this),
      pins_(info_.name),
      mrs_(merge_caps(config.caps).max_mr, memory_key_secret(shared, index)),
      rc_(*this, counters_, mrs_, info_, config_),
      ud_(rc_.ctx, rc_.fetcher, rc_.flush, rc_.completer) {
  if (config_.name.empty()) config_.name = "sim" + std::to_string(index);
  config_.caps = merge_caps(config.caps);
  info_.name = config_.name;
  info_.kind = "sim";
  info_.profile = config_.profile;
  info_.caps = config_.caps;
  // Until start() knows the address: made unique then.
  info_.node_guid = 0x0002c90300000000ull | (uint64_t{index} << 8) | 1;
}

Hca::~Hca() {
  stop();
  for (uint8_t* page : owned_pages_) free_uar_page(page);
  for (auto& srq : srqs_) {  // handles destroyed while QPs still used them
    std::free(srq->owned_buf);
    std::free(srq->owned_dbrec);
    std::free(srq->mirror_buf);
  }
  if (xrc_placeholder_cq_) {  // the XRC targets' CQ (srq.cc), which no handle releases
    std::free(xrc_placeholder_cq_->owned_buf);
    std::free(xrc_placeholder_cq_->owned_dbrec);
    std::free(xrc_placeholder_cq_->mirror_buf);
  }
  if (kick_fd_ >= 0) ::close(kick_fd_);
}

Status Hca::start() {
  const hw::DeviceCaps limits = format_limits();
  const hw::DeviceCaps& c = config_.caps;
  if (c.max_send_sge > limits.max_send_sge || c.max_recv_sge > limits.max_recv_sge ||
      c.max_inline_data > limits.max_inline_data || c.max_qp_wr > limits.max_qp_wr ||
      c.max_cqe > limits.max_cqe || c.max_srq_wr > limits.max_srq_wr)
    return Status::error(Errc::invalid_argument,
                         "%s: caps exceed what the WQE format allows (send SGEs <= %u, receive "
                         "SGEs <= %u, inline <= %u, WRs <= %u, CQEs <= %u, SRQ WRs <= %u)",
                         info_.name.c_str(), limits.max_send_sge, limits.max_recv_sge,
                         limits.max_inline_data, limits.max_qp_wr, limits.max_cqe,
                         limits.max_srq_wr);
  if (Status s = events_.open(); !s) return s.prepend(info_.name);
  kick_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (kick_fd_ < 0) return Status::error(Errc::io_error, "%s: eventfd failed", info_.name.c_str());

  // Registers: dedicated ones first, then the one shared by every later QP.
  const uint32_t total = config_.dedicated_bf_regs + 1;
  for (uint32_t r = 0; r < total; ++r) {
    if (r % kBfRegsPerPage == 0) {
      uint8_t* page = alloc_uar_page();
      if (!page)
        return Status::error(Errc::no_resources, "%s: no memory for UAR pages", info_.name.c_str());
      owned_pages_.push_back(page);
    }
    auto reg = std::make_unique<BfRegister>();
    reg->base = owned_pages_.back() + kBfRegOffset + (r % kBfRegsPerPage) * kBfRegBytes;
    reg->index = r;
    registers_.push_back(std::move(reg));
  }
  shared_register_ = registers_.back().get();
  shared_register_->shared = true;
  for (uint32_t r = config_.dedicated_bf_regs; r-- > 0;)
    free_dedicated_.push_back(registers_[r].get());

  if (config_.ports != 1 && config_.ports != 2)
    return Status::error(Errc::invalid_argument, "%s: %u ports (a simulated HCA has 1 or 2)",
                         info_.name.c_str(), config_.ports);
  Result<Endpoint> ep =
      shared_.wire->attach(Endpoint{config_.address, shared_.config.udp_port}, this);
  if (!ep) return ep.status().prepend(info_.name);
  endpoint_ = ep.value();
  if (config_.ports == 2) {
    // Port 2: an address of its own, of port 1's IP version.
    hw::IpAddress want = config_.port2_address;
    if (!want.is_unspecified() && want.is_v4() != endpoint_.ip.is_v4()) {
      shared_.wire->detach(endpoint_);
      return Status::error(Errc::invalid_argument,
                           "%s: port 2's address %s and port 1's %s are of different IP "
                           "versions",
                           info_.name.c_str(), want.to_string().c_str(),
                           endpoint_.ip.to_string().c_str());
    }
    Result<Endpoint> ep2 = shared_.wire->attach(Endpoint{want, shared_.config.udp_port}, this);
    if (!ep2) {
      shared_.wire->detach(endpoint_);
      return ep2.status().prepend(info_.name + ": port 2");
    }
    if (ep2.value().ip.is_v4() != endpoint_.ip.is_v4()) {
      shared_.wire->detach(ep2.value());
      shared_.wire->detach(endpoint_);
      return Status::error(Errc::invalid_argument,
                           "%s: port 2 got %s, of another IP version than port 1's %s: name "
                           "its address (DeviceConfig::port2_address)",
                           info_.name.c_str(), ep2.value().ip.to_string().c_str(),
                           endpoint_.ip.to_string().c_str());
    }
    endpoint2_ = ep2.value();
    config_.port2_address = endpoint2_.ip;
    two_ports_ = true;
  }
  attached_ = true;
  config_.address = endpoint_.ip;
  if (shared_.faults)
    shared_.faults->note_device(index_, endpoint_.ip, two_ports_ ? endpoint2_.ip : IpAddress());
  init_link_events();
  info_.gid = hw::Gid::from_ip(endpoint_.ip);
  // Unique per device and host, whichever process made it and in whatever order: Mellanox's
  // OUI, then 24 bits of the address (an IPv4 one's low 24 bits; a mix of an IPv6 one's) and
  // the UDP port, which no other live device on the host's UDP wire shares (the wire refuses a
  // taken endpoint; an in-process wire is a fabric of its own, whose addresses are unique
  // within it). The default link-local GID derives from it.
  const uint64_t address_bits =
      endpoint_.ip.is_v4() ? endpoint_.ip.ipv4() & 0xffffff : hw::hash_of(endpoint_.ip) >> 40;
  info_.node_guid = (0x0002c9ull << 40) | (address_bits << 16) | endpoint_.port;
  // Where a ConnectX's GID table holds this address as RoCE v2, as the uverbs shim presents it
  // too: after the default link-local GID's two entries and its own RoCE v1 twin (::ffff:a.b.c.d
  // or the IPv6 address at 3); a link-local address is the default GID itself (at 1).
  info_.gid_index = endpoint_.ip.is_link_local() ? 1 : 3;
  info_.ports.assign(1, hw::PortInfo{info_.gid, info_.gid_index});
  if (two_ports_)
    info_.ports.push_back(hw::PortInfo{hw::Gid::from_ip(endpoint2_.ip),
                                       static_cast<uint8_t>(endpoint2_.ip.is_link_local() ? 1 : 3)});
  info_.transport =
      std::string("sim ") + wire_kind_name(shared_.wire->kind()) + " " + endpoint_.to_string();
  if (two_ports_) info_.transport += ", port 2 " + endpoint2_.to_string();
  if (std::string detail = shared_.wire->endpoint_detail(endpoint_); !detail.empty())
    info_.transport += " " + detail;
  {
    std::lock_guard<std::mutex> lock(shared_.mu);
    shared_.hcas.push_back(FabricShared::Member{this, weak_from_this()});
  }
  if (!shared_.deterministic()) {
    // Without it, stores into the application's UAR mappings are found by polling
    // (uar_watch.h); the shim reports which (UarWatch::mechanism()).
    (void)uar_watch_.open();
    thread_ = start_quiet_thread([this] { thread_main(); });
  }
  return Status::ok();
}

void Hca::stop() {
  if (forked_away()) {
    // The thread exists only in the parent: forget it without a join (no system call), and
    // leave the fabric's lists, which a parent thread may have held locked at the fork.
    if (thread_.joinable()) thread_.detach();
    return;
  }
  if (thread_.joinable()) {
    stop_.store(true, std::memory_order_release);
    kick();
    thread_.join();
  }
  {
    std::lock_guard<std::mutex> lock(shared_.mu);
    auto& v = shared_.hcas;
    v.erase(std::remove_if(v.begin(), v.end(),
                           [this](const FabricShared::Member& m) { return m.raw == this; }),
            v.end());
  }
  if (attached_.exchange(false)) {
    // Its counters join the fault log's end-of-run totals (faults/schedule.h).
    if (shared_.faults) shared_.faults->add_device_totals(counters());
    // Engine passes of other threads (progress hooks) finish before the wire forgets us.
    std::lock_guard<std::mutex> lock(mu_);
    shared_.wire->detach(endpoint_);
    if (two_ports_) shared_.wire->detach(endpoint2_);
  }
}

DeviceCounters Hca::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  // Records moved since the device last looked are counted now (engine.cc).
  const_cast<Hca*>(this)->observe_own_dbrs_locked();
  DeviceCounters c = counters_;
  c.packets_tx += raw_packets_tx_.load(std::memory_order_relaxed);
  c.bytes_tx += raw_bytes_tx_.load(std::memory_order_relaxed);
  c.link_down_drops += raw_link_down_drops_.load(std::memory_order_relaxed);
  c.sleeps = sleeps_.load(std::memory_order_relaxed);
  c.watched_sleeps = watched_sleeps_.load(std::memory_order_relaxed);
  return c;
}

Result<QpSnapshot> Hca::qp_snapshot(uint32_t qpn) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = qp_by_num_.find(qpn);
  if (it == qp_by_num_.end())
    return Status::error(Errc::not_found, "%s: qp %#x does not exist", info_.name.c_str(), qpn);
  QpObj& qp = *it->second;
  if (!qp.external) const_cast<Hca*>(this)->observe_dbrs_locked(qp);
  QpSnapshot s;
  s.qpn = qp.qpn;
  s.state = qp.state;
  s.sq_dbr = rc::load_sq_dbr(qp);
  s.rq_dbr = rc::load_rq_dbr(qp);
  s.sq_consumed = qp.sq_consumed;
  s.rq_consumed = qp.rq_consumed;
  s.next_psn = qp.req.next_psn;
  s.expected_psn = qp.resp.epsn;
  s.wqes_executed = qp.counters.wqes_executed;
  s.uar_doorbells = qp.counters.uar_doorbells;
  s.sq_dbr_advances = qp.counters.sq_dbr_advances;
  s.retransmits = qp.counters.retransmits;
  s.rnr_naks_rx = qp.counters.rnr_naks_rx;
  s.comm_est_raised = qp.resp.comm_est_raised;
  return s;
}

void Hca::pause() {
  paused_.store(true, std::memory_order_release);
}

void Hca::resume() {
  paused_.store(false, std::memory_order_release);
  kick();
}

Status Hca::modify_qp(QpObj* qp, const hw::QpAttr& attr, uint32_t mask) {
  RNICDV_TRY(check_owner("modify_qp"));
  RNICDV_TRY(check_alive("modify_qp"));
  std::lock_guard<std::mutex> lock(mu_);
  // Doorbell-record moves made before this transition are counted in the state they
  // happened in.
  observe_dbrs_locked(*qp);
  Status s = rc_.states.check(*qp, attr, mask);
  if (!s) return s;
  rc_.states.apply(*qp, attr, mask);
  handle_cq_overflows_locked();
  // A doorbell kept from RTR, a resume from SQD, a flush: the next engine pass acts on it.
  file_timers_locked(*qp, now());
  activate_locked(*qp);
  kick_if_sleeping();
  return Status::ok();
}

Status Hca::set_qp_rate_limit(QpObj* qp, const hw::RateLimit& limit) {
  RNICDV_TRY(check_owner("set_rate_limit"));
  RNICDV_TRY(check_alive("set_rate_limit"));
  std::lock_guard<std::mutex> lock(mu_);
  const hw::DeviceCaps& caps = info_.caps;
  if (qp->type == hw::QpType::ud)
    return Status::error(Errc::unsupported,
                         "qp %#x: set_rate_limit: packet pacing is for RC and UC QPs on this device",
                         qp->qpn);
  if (limit.kbps != 0 &&
      (limit.kbps < caps.rate_limit_min_kbps || limit.kbps > caps.rate_limit_max_kbps))
    return Status::error(Errc::invalid_argument,
                         "qp %#x: set_rate_limit: %u kb/s is outside the device's %u..%u kb/s",
                         qp->qpn, limit.kbps, caps.rate_limit_min_kbps, caps.rate_limit_max_kbps);
  if (limit.max_burst_bytes > kMaxRateLimitBurst)
    return Status::error(Errc::invalid_argument,
                         "qp %#x: set_rate_limit: a burst of %u bytes is above the device's %u",
                         qp->qpn, limit.max_burst_bytes, kMaxRateLimitBurst);
  qp->pacer.set(limit.kbps, limit.max_burst_bytes, now());
  qp->req.pace_deadline = 0;
  file_timers_locked(*qp, now());
  activate_locked(*qp);  // a lower or lifted limit may let frames go at once
  kick_if_sleeping();
  return Status::ok();
}

hw::QpState Hca::qp_state(const QpObj* qp) const {
  std::lock_guard<std::mutex> lock(mu_);
  return qp->state;
}

}  // namespace rnicdv::sim
