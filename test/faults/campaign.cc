// SPDX-License-Identifier: BSD-3-Clause
// The fault campaign's runs: see campaign.h.
#include <infiniband/verbs.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>

#include "campaign.h"
#include "campaign_util.h"
#include "device_impl.h"  // the wire's fault counters
#include "rnicdv/connection.h"
#include "rnicdv/rnicdv.h"

namespace rnicdv::faults {

using namespace detail;

// ---------------------------------------------------------------------------------------
namespace {
using Clock = std::chrono::steady_clock;

// Where one op's bytes live: `local` in the requester's buffer (source of SEND/WRITE,
// destination of READ, the atomic's returned value), `remote` in the responder's.
struct Slot {
  size_t local = 0, remote = 0;
  uint32_t len = 0;
  uint32_t imm = 0;
  uint64_t atomic_initial = 0, atomic_operand = 0, atomic_swap = 0;
  int recv = -1;  // index of the receive it consumes at the responder
};

struct RecvExpect {
  int op = 0;  // the requester's op
  WrOpcode opcode = WrOpcode::send;
  uint32_t len = 0;
  uint32_t imm = 0;
};

struct Side {
  const char* name = "";
  std::shared_ptr<sim::Device> sim;
  std::optional<Device> dev;
  std::optional<ProtectionDomain> pd;
  std::optional<CompletionQueue> scq, rcq;
  std::vector<uint8_t> local, remote;          // what this side's ops use / the peer's ops use
  std::vector<uint8_t> local_want, remote_want;  // what they must hold at the end
  std::optional<MemoryRegion> local_mr, remote_mr;
  std::optional<QueuePair> qp;
  std::optional<Connection> conn;
  std::vector<Op> ops;
  std::vector<Slot> slots;
  std::vector<RecvExpect> recvs;  // receives this side posts, for the peer's ops
  std::vector<std::vector<Completion>> send_wcs, recv_wcs;
  uint64_t stray = 0;  // completions naming no WR of this side
  size_t posted = 0;
  size_t recvs_posted = 0;
  bool established = false, disconnected = false;
  size_t seen() const {
    size_t n = 0;
    for (const auto& v : send_wcs) n += v.empty() ? 0 : 1;
    for (const auto& v : recv_wcs) n += v.empty() ? 0 : 1;
    return n;
  }
};

class Runner {
 public:
  explicit Runner(const RunSpec& spec) : spec_(spec) { result_.spec = spec; }
  RunResult run();

 private:
  [[gnu::format(printf, 2, 3)]] void fail(const char* fmt, ...);
  bool setup();
  void layout(Side& req, Side& resp, uint64_t salt);
  bool post_recvs(Side& s);
  bool post_ops(Side& s, size_t upto);
  void poll(Side& s);
  bool drive(const char* what, const std::function<bool()>& done, uint64_t virtual_ns,
             uint64_t real_ms, bool idle_is_done = false);
  void handle_events();
  bool all_completed() const;
  bool posted_completed() const;
  bool gave_up() const;
  void verify_completions(Side& s, const Side& peer);
  void verify_memory(const char* what, const Side& owner, const std::vector<uint8_t>& got,
                     const std::vector<uint8_t>& want, const Side& requester, bool local);
  void collect_counters();
  bool deterministic() const { return spec_.mode == sim::ExecMode::deterministic; }

  const RunSpec& spec_;
  RunResult result_;
  std::shared_ptr<sim::Fabric> fabric_;
  // Declared before the sides: the listener and connections go first.
  Side a_, b_;
  std::optional<Listener> listener_;
  Clock::time_point start_;
  uint64_t virtual_start_ = 0;
  bool given_up_ = false;
  // The connection never came up (REQ or REP retries exhausted, a REJ): the run's outcome is
  // that, not a failure; WRs the driver never accepted are not lost.
  bool connection_failed_ = false;
};

void Runner::fail(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  result_.failures.emplace_back(buf);
}

void Runner::layout(Side& req, Side& resp, uint64_t salt) {
  size_t local = kGap, remote = kGap;
  Rng r(spec_.seed ^ salt);
  req.slots.resize(req.ops.size());
  for (size_t i = 0; i < req.ops.size(); ++i) {
    Slot& s = req.slots[i];
    const Op& op = req.ops[i];
    s.len = op.len;
    s.local = local;
    s.remote = remote;
    local = (local + op.len + kGap + 7) & ~size_t{7};
    remote = (remote + op.len + kGap + 7) & ~size_t{7};
    s.imm = static_cast<uint32_t>(r.next());
    s.atomic_initial = r.next();
    s.atomic_operand = r.next();
    s.atomic_swap = r.next();
    if (consumes_recv(op.opcode)) {
      s.recv = static_cast<int>(resp.recvs.size());
      resp.recvs.push_back(RecvExpect{static_cast<int>(i), op.opcode, op.len, s.imm});
    }
  }
  req.local.assign(local, kCanary);
  resp.remote.assign(remote, kCanary);
  for (size_t i = 0; i < req.ops.size(); ++i) {
    const Slot& s = req.slots[i];
    const uint64_t pattern_seed = spec_.seed * 1000003 + salt * 7919 + i;
    switch (req.ops[i].opcode) {
      case WrOpcode::send:
      case WrOpcode::send_imm:
      case WrOpcode::rdma_write:
      case WrOpcode::rdma_write_imm:
        fill_pattern(&req.local[s.local], s.len, pattern_seed);
        break;
      case WrOpcode::rdma_read:
        fill_pattern(&resp.remote[s.remote], s.len, pattern_seed);
        break;
      case WrOpcode::atomic_cmp_swap:
      case WrOpcode::atomic_fetch_add:
        std::memcpy(&resp.remote[s.remote], &s.atomic_initial, 8);
        break;
      case WrOpcode::nop:
        break;
    }
  }
  req.local_want = req.local;
  resp.remote_want = resp.remote;
  for (size_t i = 0; i < req.ops.size(); ++i) {
    const Slot& s = req.slots[i];
    switch (req.ops[i].opcode) {
      case WrOpcode::send:
      case WrOpcode::send_imm:
      case WrOpcode::rdma_write:
      case WrOpcode::rdma_write_imm:
        std::memcpy(&resp.remote_want[s.remote], &req.local[s.local], s.len);
        break;
      case WrOpcode::rdma_read:
        std::memcpy(&req.local_want[s.local], &resp.remote[s.remote], s.len);
        break;
      case WrOpcode::atomic_cmp_swap:
        std::memcpy(&req.local_want[s.local], &s.atomic_initial, 8);
        std::memcpy(&resp.remote_want[s.remote], &s.atomic_swap, 8);
        break;
      case WrOpcode::atomic_fetch_add: {
        std::memcpy(&req.local_want[s.local], &s.atomic_initial, 8);
        const uint64_t sum = s.atomic_initial + s.atomic_operand;
        std::memcpy(&resp.remote_want[s.remote], &sum, 8);
        break;
      }
      case WrOpcode::nop:
        break;
    }
  }
  req.send_wcs.assign(req.ops.size(), {});
}

bool Runner::setup() {
  sim::FabricConfig fc;
  fc.mode = spec_.mode;
  fc.wire = spec_.wire;
  fc.seed = spec_.seed;
  fc.faults = spec_.faults;
  auto fabric = sim::Fabric::create(fc);
  if (!fabric) {
    fail("fabric: %s", fabric.status().message().c_str());
    return false;
  }
  fabric_ = *fabric;
  a_.name = "A";
  b_.name = "B";
  a_.ops = spec_.a_ops;
  b_.ops = spec_.b_ops;
  layout(a_, b_, 0xa);
  layout(b_, a_, 0xb);
  b_.recv_wcs.assign(b_.recvs.size(), {});
  a_.recv_wcs.assign(a_.recvs.size(), {});
  for (Side* s : {&a_, &b_}) {
    sim::DeviceConfig dc;
    dc.profile.fetches_beyond_dbr = spec_.scanning;
    dc.profile.keeps_rtr_doorbell = true;
    auto dev = fabric_->add_device(dc);
    if (!dev) {
      fail("%s: add_device: %s", s->name, dev.status().message().c_str());
      return false;
    }
    s->sim = *dev;
    auto wrapped = Device::wrap(s->sim);
    if (!wrapped) {
      fail("%s: %s", s->name, wrapped.status().message().c_str());
      return false;
    }
    s->dev.emplace(std::move(*wrapped));
    auto pd = s->dev->alloc_pd();
    auto scq = s->dev->create_cq(512);
    auto rcq = s->dev->create_cq(512);
    if (!pd || !scq || !rcq) {
      fail("%s: PD/CQ: %s%s%s", s->name, pd.status().message().c_str(),
           scq.status().message().c_str(), rcq.status().message().c_str());
      return false;
    }
    s->pd.emplace(std::move(*pd));
    s->scq.emplace(std::move(*scq));
    s->rcq.emplace(std::move(*rcq));
    const uint32_t access = hw::access::local_write | hw::access::remote_write |
                            hw::access::remote_read | hw::access::remote_atomic;
    auto lmr = s->pd->reg_mr(s->local.data(), s->local.size(), access);
    auto rmr = s->pd->reg_mr(s->remote.data(), s->remote.size(), access);
    if (!lmr || !rmr) {
      fail("%s: reg_mr: %s%s", s->name, lmr.status().message().c_str(),
           rmr.status().message().c_str());
      return false;
    }
    s->local_mr.emplace(std::move(*lmr));
    s->remote_mr.emplace(std::move(*rmr));
    QpConfig qc;
    qc.caps.max_send_wr = 128;
    qc.caps.max_recv_wr = 128;
    qc.caps.max_send_sge = 1;
    qc.caps.max_recv_sge = 1;
    qc.caps.max_inline_data = 64;
    qc.threading = deterministic() ? Threading::single : Threading::thread_safe;
    auto qp = s->dev->create_qp(*s->pd, *s->scq, *s->rcq, qc);
    if (!qp) {
      fail("%s: create_qp: %s", s->name, qp.status().message().c_str());
      return false;
    }
    s->qp.emplace(std::move(*qp));
  }
  return true;
}

bool Runner::post_recvs(Side& s) {
  for (size_t i = 0; i < s.recvs.size(); ++i) {
    const RecvExpect& e = s.recvs[i];
    const Side& peer = &s == &a_ ? b_ : a_;
    const Slot& slot = peer.slots[static_cast<size_t>(e.op)];
    Sge sge = s.remote_mr->sge(slot.remote, e.len);
    RecvWr wr;
    wr.wr_id = i;
    const bool places = e.opcode != WrOpcode::rdma_write_imm && e.len > 0;
    wr.sg_list = places ? &sge : nullptr;
    wr.num_sge = places ? 1 : 0;
    const Errc rc = s.qp->post_recv(wr);
    if (rc != Errc::ok) {
      fail("%s: post_recv %zu: %s", s.name, i, errc_name(rc));
      return false;
    }
    s.recvs_posted = i + 1;
    ++result_.recvs;
  }
  return true;
}

bool Runner::post_ops(Side& s, size_t upto) {
  Side& peer = &s == &a_ ? b_ : a_;
  for (; s.posted < upto; ++s.posted) {
    const size_t i = s.posted;
    const Op& op = s.ops[i];
    const Slot& slot = s.slots[i];
    Sge sge = s.local_mr->sge(slot.local, op.len);
    SendWr wr;
    wr.wr_id = i;
    wr.opcode = op.opcode;
    wr.flags = send_flags::signaled;
    wr.sg_list = op.len ? &sge : nullptr;
    wr.num_sge = op.len ? 1 : 0;
    wr.imm_data = slot.imm;
    wr.remote_addr = peer.remote_mr->addr() + slot.remote;
    wr.rkey = peer.remote_mr->rkey();
    if (op.opcode == WrOpcode::atomic_cmp_swap) {
      wr.compare_add = slot.atomic_initial;
      wr.swap = slot.atomic_swap;
    } else if (op.opcode == WrOpcode::atomic_fetch_add) {
      wr.compare_add = slot.atomic_operand;
    }
    // Small SENDs and WRITEs go inline on odd seeds: the bytes travel inside the WQE.
    if ((op.opcode == WrOpcode::send || op.opcode == WrOpcode::rdma_write) && op.len > 0 &&
        op.len <= 64 && (spec_.seed & 1))
      wr.flags |= send_flags::inline_data;
    const Errc rc = s.qp->post_send(wr);
    if (rc != Errc::ok) {
      fail("%s: post_send %zu (%s, %u bytes) in %s: %s", s.name, i, opcode_name(op.opcode),
           op.len, hw::qp_state_name(s.qp->state()), errc_name(rc));
      return false;
    }
    ++result_.wrs;
  }
  return true;
}

void Runner::poll(Side& s) {
  Completion wc[32];
  for (int n; (n = s.scq->poll(wc, 32)) > 0;) {
    for (int k = 0; k < n; ++k) {
      if (wc[k].wr_id < s.send_wcs.size())
        s.send_wcs[wc[k].wr_id].push_back(wc[k]);
      else
        ++s.stray;
    }
  }
  for (int n; (n = s.rcq->poll(wc, 32)) > 0;) {
    for (int k = 0; k < n; ++k) {
      if (wc[k].wr_id < s.recv_wcs.size())
        s.recv_wcs[wc[k].wr_id].push_back(wc[k]);
      else
        ++s.stray;
    }
  }
}

bool is_give_up(const Completion& c) {
  return c.status == IBV_WC_RETRY_EXC_ERR || c.status == IBV_WC_RNR_RETRY_EXC_ERR;
}

bool Runner::gave_up() const {
  for (const Side* s : {&a_, &b_})
    for (const auto& v : s->send_wcs)
      for (const Completion& c : v)
        if (is_give_up(c)) return true;
  return false;
}

// Every WR and receive the driver accepted has completed (after a failed connection, with a
// flush error).
bool Runner::posted_completed() const {
  auto done = [](const Side& s) {
    size_t n = 0;
    for (size_t i = 0; i < s.posted && i < s.send_wcs.size(); ++i) n += !s.send_wcs[i].empty();
    for (size_t i = 0; i < s.recvs_posted && i < s.recv_wcs.size(); ++i)
      n += !s.recv_wcs[i].empty();
    return n == std::min(s.posted, s.send_wcs.size()) + std::min(s.recvs_posted, s.recv_wcs.size());
  };
  return done(a_) && done(b_);
}

bool Runner::all_completed() const {
  return a_.seen() == a_.send_wcs.size() + a_.recv_wcs.size() &&
         b_.seen() == b_.send_wcs.size() + b_.recv_wcs.size();
}

void Runner::handle_events() {
  a_.dev->process_events();
  b_.dev->process_events();
  if (listener_) {
    while (auto ev = listener_->poll_event()) {
      if (ev->type != ConnectionEventType::connect_request || !ev->request) continue;
      if (b_.conn) continue;  // a repeated request: the CM answers duplicates itself
      ConnectionOptions o;
      o.path_mtu = spec_.mtu;
      o.ack_timeout = deterministic() ? 12 : 13;
      auto conn = ev->request->accept(*b_.qp, {}, o);
      if (!conn) {
        fail("B: accept: %s", conn.status().message().c_str());
        continue;
      }
      b_.conn.emplace(std::move(*conn));
      // The passive QP is in RTR now: receives, then the early batch, withheld.
      if (!post_recvs(b_)) continue;
      if (!post_ops(b_, spec_.early)) continue;
      result_.withheld_in_rtr = b_.qp->withheld();
      if (deterministic()) {
        // Nothing has run since accept(): the whole batch must be held, no doorbell rung.
        if (b_.qp->state() != hw::QpState::rtr)
          fail("B: QP in %s right after accept, not RTR", hw::qp_state_name(b_.qp->state()));
        if (b_.qp->withheld() != spec_.early)
          fail("B: %u WRs withheld in RTR, %u posted", b_.qp->withheld(), spec_.early);
        auto snap = b_.sim->qp_snapshot(b_.qp->qpn());
        if (snap && (snap->uar_doorbells != 0 || snap->sq_dbr_advances != 0))
          fail("B: a send doorbell reached the device in RTR (%" PRIu64 " UAR writes)",
               snap->uar_doorbells);
      }
    }
  }
  for (Side* s : {&a_, &b_}) {
    if (!s->conn) continue;
    while (auto ev = s->conn->poll_event()) {
      switch (ev->type) {
        case ConnectionEventType::established:
          if (s->established) {
            fail("%s: ESTABLISHED reported twice", s->name);
            break;
          }
          s->established = true;
          if (s->qp->state() != hw::QpState::rts)
            fail("%s: ESTABLISHED with the QP in %s", s->name, hw::qp_state_name(s->qp->state()));
          post_ops(*s, s->ops.size());
          break;
        case ConnectionEventType::disconnected:
          s->disconnected = true;
          break;
        case ConnectionEventType::rejected:
        case ConnectionEventType::unreachable:
        case ConnectionEventType::timeout:
          if (!s->established) {
            // The handshake did not survive the loss: an outcome of its own.
            connection_failed_ = true;
            result_.connection_failed = true;
            if (result_.connection_failure.empty())
              result_.connection_failure = std::string(s->name) + ": " +
                                           connection_event_name(ev->type) + ": " +
                                           ev->status.message();
            s->disconnected = true;
            break;
          }
          [[fallthrough]];
        default:
          fail("%s: connection event %s: %s", s->name, connection_event_name(ev->type),
               ev->status.message().c_str());
          s->disconnected = true;
          break;
      }
    }
  }
}

// Runs the fabric and the application until `done` or a bound. Deterministic runs step the
// engine themselves; threaded runs let the device threads work and poll.
bool Runner::drive(const char* what, const std::function<bool()>& done, uint64_t virtual_ns,
                   uint64_t real_ms, bool idle_is_done) {
  const uint64_t v0 = fabric_->now_ns();
  const auto t0 = Clock::now();
  int idle = 0;
  while (!done()) {
    if (result_.failures.size() > 20) return false;
    bool moved = true;
    if (deterministic()) moved = fabric_->step();
    const size_t before = a_.seen() + b_.seen();
    handle_events();
    poll(a_);
    poll(b_);
    if (done()) break;
    if (deterministic()) {
      // Nothing can ever happen again: no frame in flight, no timer armed.
      idle = (!moved && a_.seen() + b_.seen() == before) ? idle + 1 : 0;
      if (idle > 8) {
        if (idle_is_done) return true;
        fail("%s: stalled at virtual %.3f s with nothing left to run", what,
             static_cast<double>(fabric_->now_ns() - virtual_start_) / 1e9);
        return false;
      }
      if (fabric_->now_ns() - v0 > virtual_ns) {
        fail("%s: not done after %.1f s of virtual time", what,
             static_cast<double>(virtual_ns) / 1e9);
        return false;
      }
    }
    if (Clock::now() - t0 > std::chrono::milliseconds(real_ms)) {
      fail("%s: not done after %.1f s of real time", what, static_cast<double>(real_ms) / 1e3);
      return false;
    }
  }
  return true;
}

void Runner::verify_completions(Side& s, const Side& peer) {
  // After a failed connection, what the driver accepted must have completed (flushed); the
  // rest was never posted, so it cannot be lost.
  const bool flush_ok = given_up_ || connection_failed_;
  if (s.posted < s.ops.size()) {
    if (connection_failed_) {
      result_.not_posted += s.ops.size() - s.posted;
    } else {
      result_.lost += s.ops.size() - s.posted;
      fail("%s: %zu of %zu WRs never posted (the connection was not established)", s.name,
           s.ops.size() - s.posted, s.ops.size());
    }
  }
  for (size_t i = 0; i < s.send_wcs.size(); ++i) {
    const auto& v = s.send_wcs[i];
    const Op& op = s.ops[i];
    if (v.empty() && i >= s.posted) continue;  // counted above
    if (v.empty()) {
      ++result_.lost;
      fail("%s: WR %zu (%s, %u bytes): no completion", s.name, i, opcode_name(op.opcode), op.len);
      continue;
    }
    if (v.size() > 1) {
      result_.duplicated += v.size() - 1;
      fail("%s: WR %zu (%s): %zu completions", s.name, i, opcode_name(op.opcode), v.size());
    }
    for (const Completion& c : v) {
      if (c.status != IBV_WC_SUCCESS) {
        ++result_.completions_error;
        if (given_up_ && is_give_up(c)) {
          ++result_.gave_up;
          continue;
        }
        if (flush_ok && c.status == IBV_WC_WR_FLUSH_ERR) {
          ++result_.flushed;
          continue;
        }
        fail("%s: WR %zu (%s, %u bytes): %s (vendor 0x%x)", s.name, i, opcode_name(op.opcode),
             op.len, ibv_wc_status_str(static_cast<ibv_wc_status>(c.status)), c.vendor_err);
        continue;
      }
      ++result_.completions_ok;
      if (c.opcode != expected_send_wc_opcode(op.opcode))
        fail("%s: WR %zu (%s): completion opcode %u", s.name, i, opcode_name(op.opcode),
             c.opcode);
      if (op.opcode == WrOpcode::rdma_read && c.byte_len != op.len)
        fail("%s: WR %zu (READ): byte_len %u, expected %u", s.name, i, c.byte_len, op.len);
    }
  }
  for (size_t i = 0; i < s.recv_wcs.size(); ++i) {
    const auto& v = s.recv_wcs[i];
    const RecvExpect& e = s.recvs[i];
    if (v.empty() && connection_failed_ && i >= s.recvs_posted) {
      ++result_.not_posted;
      continue;
    }
    if (v.empty()) {
      ++result_.lost;
      fail("%s: receive %zu (for %s's WR %d, %s): no completion", s.name, i, peer.name, e.op,
           opcode_name(e.opcode));
      continue;
    }
    if (v.size() > 1) {
      result_.duplicated += v.size() - 1;
      fail("%s: receive %zu: %zu completions", s.name, i, v.size());
    }
    for (const Completion& c : v) {
      if (c.status != IBV_WC_SUCCESS) {
        ++result_.completions_error;
        if (flush_ok && c.status == IBV_WC_WR_FLUSH_ERR) {
          ++result_.flushed;
          continue;
        }
        fail("%s: receive %zu (%s's WR %d): %s", s.name, i, peer.name, e.op,
             ibv_wc_status_str(static_cast<ibv_wc_status>(c.status)));
        continue;
      }
      ++result_.completions_ok;
      const int want_op =
          e.opcode == WrOpcode::rdma_write_imm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
      const bool want_imm = carries_imm(e.opcode);
      const bool has_imm = (c.flags & wc_flags::with_imm) != 0;
      // In order (RC): receive i must be the peer's i-th receive-consuming message.
      if (c.opcode != want_op || c.byte_len != e.len || has_imm != want_imm ||
          (want_imm && c.imm_data != e.imm)) {
        ++result_.lost;
        fail("%s: receive %zu (%s's WR %d, %s, %u bytes): got opcode %u, %u bytes, imm %s0x%x",
             s.name, i, peer.name, e.op, opcode_name(e.opcode), e.len, c.opcode, c.byte_len,
             has_imm ? "" : "(none) ", c.imm_data);
      }
    }
  }
  if (s.stray) {
    result_.duplicated += s.stray;
    fail("%s: %" PRIu64 " completions naming no posted WR", s.name, s.stray);
  }
}

// Compares a buffer with what it must hold; a difference is named by the op whose slot it
// falls in (data lost or damaged), or as a write outside every slot.
void Runner::verify_memory(const char* what, const Side& owner, const std::vector<uint8_t>& got,
                           const std::vector<uint8_t>& want, const Side& requester, bool local) {
  if (got == want) return;
  std::vector<bool> reported(requester.ops.size(), false);
  bool outside = false;
  for (size_t off = 0; off < got.size(); ++off) {
    if (got[off] == want[off]) continue;
    bool in_slot = false;
    for (size_t i = 0; i < requester.slots.size(); ++i) {
      const Slot& s = requester.slots[i];
      const size_t base = local ? s.local : s.remote;
      if (off >= base && off < base + s.len) {
        in_slot = true;
        if (!reported[i]) {
          reported[i] = true;
          const Op& op = requester.ops[i];
          if (op.opcode == WrOpcode::atomic_fetch_add && !local) {
            uint64_t v;
            std::memcpy(&v, &got[base], 8);
            if (v == requester.slots[i].atomic_initial + 2 * requester.slots[i].atomic_operand) {
              ++result_.duplicated;
              fail("%s %s: %s's FETCH_ADD %zu applied twice", owner.name, what, requester.name, i);
              break;
            }
          }
          ++result_.lost;
          fail("%s %s: %s's WR %zu (%s, %u bytes): byte %zu is 0x%02x, expected 0x%02x", owner.name,
               what, requester.name, i, opcode_name(op.opcode), op.len, off - base, got[off],
               want[off]);
        }
        break;
      }
    }
    if (!in_slot && !outside) {
      outside = true;
      ++result_.duplicated;
      fail("%s %s: byte %zu outside every message changed (0x%02x, canary 0x%02x)", owner.name,
           what, off, got[off], want[off]);
    }
  }
}

void Runner::collect_counters() {
  const sim::WireCounters w = fabric_->impl().shared.wire->counters();
  result_.faults_dropped = w.faults_dropped;
  result_.faults_duplicated = w.faults_duplicated;
  result_.faults_reordered = w.faults_reordered;
  result_.faults_corrupted = w.faults_corrupted;
  result_.faults_delayed = w.faults_delayed;
  result_.faults_injected =
      w.faults_dropped + w.faults_duplicated + w.faults_reordered + w.faults_corrupted +
      w.faults_delayed;
  result_.frames = w.frames_tx;
  for (const Side* s : {&a_, &b_}) {
    const sim::DeviceCounters c = s->sim->counters();
    result_.retransmits += c.retransmits;
    result_.timeouts += c.timeouts;
    result_.naks += c.naks_rx;
    result_.rnr_naks += c.rnr_naks_rx;
    result_.duplicates_rx += c.duplicates_rx;
    result_.comm_est += c.comm_est_raised;
  }
}

RunResult Runner::run() {
  start_ = Clock::now();
  if (setup()) {
    virtual_start_ = fabric_->now_ns();
    const uint64_t vbudget = spec_.virtual_budget_ns;
    const uint64_t rbudget = spec_.real_budget_ms;
    auto listening = Listener::listen(*b_.dev, "", kCmPort);
    if (!listening) {
      fail("B: listen: %s", listening.status().message().c_str());
    } else {
      listener_.emplace(std::move(*listening));
      ConnectionOptions o;
      o.path_mtu = spec_.mtu;
      // 16.8 ms of virtual time; 33.5 ms of real time, so that a device thread starved of
      // the CPU on a loaded machine does not time out on a healthy link.
      o.ack_timeout = deterministic() ? 12 : 13;
      o.retry_count = 7;
      o.rnr_retry_count = 7;
      o.min_rnr_timer = 1;
      o.timeout = std::chrono::milliseconds(deterministic() ? 30'000 : 8'000);
      auto conn = Connection::connect(*a_.qp, b_.sim->address().to_string(), kCmPort, {}, o);
      if (!conn) {
        fail("A: connect: %s", conn.status().message().c_str());
      } else {
        a_.conn.emplace(std::move(*conn));
        post_recvs(a_);  // the active QP is in INIT
        bool transferred = drive(
            "transfer", [&] { return all_completed() || gave_up() || connection_failed_; },
            vbudget, rbudget);
        if (transferred && connection_failed_) {
          // End promptly: only what the driver accepted (the passive side's early batch and
          // the receives) must still complete, with flush errors.
          transferred = drive("flush after a failed connection",
                              [&] { return posted_completed(); }, vbudget, rbudget,
                              /*idle_is_done=*/true);
        }
        if (transferred && !connection_failed_ && gave_up()) {
          // The transport gave up (IBA C9-140): that QP is in ERR and the other may still
          // wait. Disconnecting moves both to ERR, and every WR must still complete once.
          given_up_ = true;
          if (a_.conn) {
            const Status st = a_.conn->disconnect();
            if (!st) fail("A: disconnect after giving up: %s", st.message().c_str());
          }
          transferred = drive("flush after giving up", [&] { return all_completed(); }, vbudget,
                              rbudget);
        }
        if (transferred && !connection_failed_) {
          // Settle: anything arriving now is a duplicate.
          const uint64_t v_end = fabric_->now_ns() + 200'000'000ull;
          const auto t_end = Clock::now() + std::chrono::milliseconds(100);
          drive(
              "settle",
              [&] {
                return deterministic() ? fabric_->now_ns() >= v_end : Clock::now() >= t_end;
              },
              vbudget, rbudget, /*idle_is_done=*/true);
        }
      }
    }
    result_.virtual_ns = fabric_->now_ns() - virtual_start_;
    verify_completions(a_, b_);
    verify_completions(b_, a_);
    if (given_up_ || connection_failed_) {
      // A WR that did not complete successfully may have placed some of its bytes, or
      // (an atomic whose answer was lost) all of them: its slots are not checked. Every
      // byte outside the slots still must be untouched, and successful WRs intact.
      for (Side* req : {&a_, &b_}) {
        Side& resp = req == &a_ ? b_ : a_;
        for (size_t i = 0; i < req->ops.size(); ++i) {
          const auto& v = req->send_wcs[i];
          if (v.size() == 1 && v[0].status == IBV_WC_SUCCESS) continue;
          const Slot& sl = req->slots[i];
          std::memcpy(&req->local_want[sl.local], &req->local[sl.local], sl.len);
          std::memcpy(&resp.remote_want[sl.remote], &resp.remote[sl.remote], sl.len);
        }
      }
    }
    if (result_.lost == 0) {
      verify_memory("local memory", a_, a_.local, a_.local_want, a_, true);
      verify_memory("target memory", b_, b_.remote, b_.remote_want, a_, false);
      verify_memory("local memory", b_, b_.local, b_.local_want, b_, true);
      verify_memory("target memory", a_, a_.remote, a_.remote_want, b_, false);
    }
    for (Side* s : {&a_, &b_}) {
      for (size_t i = 0; i < s->ops.size(); ++i) {
        const auto& v = s->send_wcs[i];
        const bool ok = v.size() == 1 && v[0].status == IBV_WC_SUCCESS;
        const Op& op = s->ops[i];
        OpTally& t = result_.per_opcode[opcode_index(op.opcode)];
        OpTally& z = result_.per_size[static_cast<int>(op.size)];
        ++t.wrs;
        ++z.wrs;
        if (ok) {
          ++t.ok;
          ++z.ok;
          t.bytes += op.len;
          z.bytes += op.len;
          result_.bytes_verified += op.len;
        }
      }
    }
    collect_counters();
    // Orderly teardown under the same faults: DREQ/DREP, bounded.
    if (a_.conn && a_.established && !given_up_ && result_.failures.empty()) {
      const Status st = a_.conn->disconnect();
      if (!st) fail("A: disconnect: %s", st.message().c_str());
      drive("disconnect", [&] { return a_.disconnected && b_.disconnected; }, vbudget, rbudget);
    }
  }
  // Connections before QPs (a connection drives its QP), the listener with them.
  a_.conn.reset();
  b_.conn.reset();
  listener_.reset();
  result_.passed = result_.failures.empty() && result_.lost == 0 && result_.duplicated == 0;
  result_.real_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
  return result_;
}

}  // namespace

RunResult run(const RunSpec& spec) {
  Runner r(spec);
  return r.run();
}

}  // namespace rnicdv::faults
