// SPDX-License-Identifier: BSD-3-Clause
// A small driver for the software HCA's tests: objects through hw::Device, WQEs encoded with
// wqe/ straight into the rings, doorbells rung by storing the DBR and writing the register,
// CQEs polled with wqe::cqe_for_sw. Independent of drv/ on purpose.
#pragma once

#include <endian.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "rnicdv/hw/device.h"
#include "rnicdv/sim/sim.h"
#include "rnicdv/wqe/cqe.h"
#include "rnicdv/wqe/decode.h"
#include "rnicdv/wqe/recv_wqe.h"
#include "rnicdv/wqe/send_wqe.h"

namespace simtest {

using namespace rnicdv;

template <class T>
T must(Result<T> r) {
  if (!r) throw std::runtime_error(r.status().message());
  return std::move(r).value();
}

inline void must_ok(const Status& s) {
  if (!s) throw std::runtime_error(s.message());
}

inline uint32_t all_remote() {
  return hw::access::local_write | hw::access::remote_write | hw::access::remote_read |
         hw::access::remote_atomic;
}

// A registered buffer.
struct Buffer {
  std::vector<uint8_t> mem;
  std::unique_ptr<hw::Mr> mr;
  uint8_t* data() { return mem.data(); }
  uint64_t addr(size_t off = 0) { return reinterpret_cast<uintptr_t>(mem.data()) + off; }
  uint32_t lkey() const { return mr->lkey(); }
  uint32_t rkey() const { return mr->rkey(); }
  size_t size() const { return mem.size(); }
};

// A CQ seen from the consumer side.
struct TestCq {
  std::unique_ptr<hw::Cq> cq;
  uint32_t ci = 0;

  wqe::CqRing ring() const {
    const mlx5dv_cq& dv = cq->view().dv;
    return wqe::CqRing{static_cast<uint8_t*>(dv.buf), dv.cqe_cnt, dv.cqe_size};
  }
  // The next CQE if software owns it (and consumes it), else nullptr.
  const mlx5_cqe64* next() {
    const mlx5_cqe64* cqe = wqe::cqe_for_sw(ring(), ci);
    if (!cqe) return nullptr;
    ++ci;
    publish_ci();
    return cqe;
  }
  bool poll(Completion* out, wqe::CqeFields* fields = nullptr) {
    const mlx5_cqe64* cqe = next();
    if (!cqe) return false;
    wqe::cqe_to_completion(cqe, out);
    if (fields) wqe::decode_cqe(cqe, fields);
    return true;
  }
  void publish_ci() {
    __atomic_store_n(&cq->view().dv.dbrec[0], htobe32(ci & 0xffffff), __ATOMIC_RELEASE);
  }
};

struct HostOptions {
  hw::QpCaps caps;
  sim::DeviceConfig device;
  uint32_t cqe = 1024;
  bool shared_cq = false;
  hw::QpType type = hw::QpType::rc;  // rc or uc (a UC QP on its own receive queue)
};

// One side: a device, a PD, CQs and a QP, with the QP's producer indices.
class Host {
 public:
  std::shared_ptr<sim::Device> dev;
  std::unique_ptr<hw::Pd> pd;
  TestCq scq_storage, rcq_storage;
  TestCq* scq = &scq_storage;
  TestCq* rcq = &rcq_storage;
  std::unique_ptr<hw::Qp> qp;
  uint32_t sq_pi = 0;
  uint32_t rq_pi = 0;
  uint32_t bf_offset = 0;
  mlx5_wqe_ctrl_seg* last_ctrl = nullptr;
  uint8_t last_bbs = 0;
  uint8_t* bf_reg_override = nullptr;

  Host() = default;
  Host(std::shared_ptr<sim::Fabric> fabric, const HostOptions& o) { init(fabric, o); }

  void init(const std::shared_ptr<sim::Fabric>& fabric, const HostOptions& o) {
    init_on(must(fabric->add_device(o.device)), o);
  }

  // Another QP (with its own PD and CQs) on an existing device.
  void init_on(std::shared_ptr<sim::Device> device, const HostOptions& o) {
    dev = std::move(device);
    pd = must(dev->alloc_pd());
    scq->cq = must(dev->create_cq(o.cqe));
    if (o.shared_cq) {
      rcq = scq;
    } else {
      rcq->cq = must(dev->create_cq(o.cqe));
    }
    qp = o.type == hw::QpType::uc
             ? must(dev->create_uc_qp(*pd, *scq->cq, *rcq->cq, nullptr, o.caps))
             : must(dev->create_qp(*pd, *scq->cq, *rcq->cq, o.caps));
  }

  const hw::QpView& view() const { return qp->view(); }
  uint32_t qpn() const { return qp->view().qpn; }
  wqe::SqRing sq() const {
    return wqe::SqRing{static_cast<uint8_t*>(view().dv.sq.buf), view().dv.sq.wqe_cnt};
  }
  wqe::RqRing rq() const {
    return wqe::RqRing{static_cast<uint8_t*>(view().dv.rq.buf), view().dv.rq.wqe_cnt,
                       view().dv.rq.stride};
  }

  Buffer reg(size_t size, uint32_t access = all_remote(), uint8_t fill = 0) {
    Buffer b;
    b.mem.assign(size == 0 ? 1 : size, fill);
    b.mr = must(dev->reg_mr(*pd, b.mem.data(), b.mem.size(), access));
    return b;
  }

  // Encodes one WQE at sq_pi (no doorbell).
  Errc post(const SendWr& wr) {
    const hw::QpCaps& g = view().granted;
    wqe::SqLimits limits{g.max_send_sge, g.max_inline_data};
    wqe::EncodedWqe enc;
    const uint32_t free_bbs = sq().bb_count - (sq_pi - completed_bbs_floor());
    const Errc e = wqe::encode_send_wqe(sq(), sq_pi, free_bbs, qpn(), wr, limits, 0, &enc);
    if (e != Errc::ok) return e;
    posted_.push_back({sq_pi, enc.bbs});
    sq_pi += enc.bbs;
    last_ctrl = enc.ctrl;
    last_bbs = enc.bbs;
    return e;
  }

  // DBR store, then an 8-byte doorbell of the last ctrl segment (or a BlueFlame copy).
  void ring(bool blueflame = false) {
    store_sq_dbr();
    write_register(blueflame);
  }
  void store_sq_dbr() {
    __atomic_store_n(&view().dv.dbrec[MLX5_SND_DBR], htobe32(sq_pi & 0xffff), __ATOMIC_RELEASE);
  }
  // Rings the QP's register at another address (another mapping of its UAR page).
  void qp_view_override_bf(uint8_t* reg) { bf_reg_override = reg; }
  void write_register(bool blueflame = false) {
    uint8_t* base = bf_reg_override ? bf_reg_override : static_cast<uint8_t*>(view().dv.bf.reg);
    uint8_t* reg = base + bf_offset;
    const auto* src = reinterpret_cast<const uint8_t*>(last_ctrl);
    const uint32_t words = blueflame ? last_bbs * 8u : 1u;
    for (uint32_t i = words; i-- > 0;) {  // the first word last: it is what the device reads
      uint64_t w;
      std::memcpy(&w, src + i * 8, 8);
      __atomic_store_n(reinterpret_cast<uint64_t*>(reg + i * 8), w, __ATOMIC_RELEASE);
    }
    bf_offset ^= view().dv.bf.size;
    if (kick_after_doorbell) kick_if_asleep();
  }
  // What rnicdv's driver does after a register write (doorbell/device_wake.h).
  bool kick_after_doorbell = true;
  void kick_if_asleep() const {
    const hw::DeviceWakeView& w = view().wake;
    if (!w.asleep) return;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (w.asleep->load(std::memory_order_relaxed) == 0) return;
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(w.kick_fd, &one, sizeof one);
  }
  Errc post_and_ring(const SendWr& wr) {
    const Errc e = post(wr);
    if (e == Errc::ok) ring();
    return e;
  }

  Errc post_recv(const RecvWr& wr) {
    const Errc e = wqe::encode_recv_wqe(rq(), rq_pi, view().granted.max_recv_sge, wr);
    if (e != Errc::ok) return e;
    ++rq_pi;
    __atomic_store_n(&view().dv.dbrec[MLX5_RCV_DBR], htobe32(rq_pi & 0xffff), __ATOMIC_RELEASE);
    return e;
  }
  Errc post_recv(Buffer& b, uint64_t off, uint32_t len, uint64_t wr_id = 0) {
    Sge sge{b.addr(off), len, b.lkey()};
    RecvWr wr{wr_id, &sge, 1};
    return post_recv(wr);
  }

  sim::DeviceCounters counters() const { return dev->counters(); }
  sim::QpSnapshot snapshot() const { return must(dev->qp_snapshot(qpn())); }

  // Polls the send CQ and retires the completed WQE and every unsignaled one before it
  // (libmlx5: sq.tail = wqe_head[wqe_counter] + 1), so post() knows the free space.
  bool poll_send(Completion* out, wqe::CqeFields* fields = nullptr) {
    wqe::CqeFields f;
    if (!scq->poll(out, &f)) return false;
    if (fields) *fields = f;
    if (f.qpn == qpn()) retire_through(f.wqe_counter);
    return true;
  }
  void retire_through(uint16_t wqe_counter) {
    while (!posted_.empty()) {
      const auto [pi, bbs] = posted_.front();
      posted_.pop_front();
      retired_bbs = pi + bbs;
      if (static_cast<uint16_t>(pi) == wqe_counter) break;
    }
  }
  uint32_t retired_bbs = 0;
  uint32_t completed_bbs_floor() const { return retired_bbs; }
  std::deque<std::pair<uint32_t, uint8_t>> posted_;

  Status modify(const hw::QpAttr& attr, uint32_t mask) { return qp->modify(attr, mask); }
};

// Transition helpers with the usual attributes.
struct ConnectOptions {
  hw::Mtu mtu = hw::Mtu::mtu1024;
  uint32_t sq_psn = 0;   // this side's first PSN
  uint32_t rq_psn = 0;   // the peer's first PSN
  uint8_t timeout = 10;  // ~4 ms
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t min_rnr_timer = 1;  // 10 us
  uint8_t max_rd_atomic = 16;
  uint8_t max_dest_rd_atomic = 16;
  uint8_t traffic_class = 0;  // the address vector's class (RTR)
  uint8_t hop_limit = 64;
  uint32_t flow_label = 0;
  uint8_t sl = 0;
  uint32_t access = hw::access::remote_write | hw::access::remote_read | hw::access::remote_atomic;
};

inline void to_init(Host& h, const ConnectOptions& o = {}) {
  hw::QpAttr a;
  a.state = hw::QpState::init;
  a.access_flags = o.access;
  must_ok(h.modify(a, hw::qp_attr::state | hw::qp_attr::port | hw::qp_attr::access_flags));
}

inline void to_rtr(Host& h, const Host& peer, const ConnectOptions& o = {}) {
  hw::QpAttr a;
  a.state = hw::QpState::rtr;
  a.path_mtu = o.mtu;
  a.dest_qpn = peer.qpn();
  a.rq_psn = o.rq_psn;
  a.max_dest_rd_atomic = o.max_dest_rd_atomic;
  a.min_rnr_timer = o.min_rnr_timer;
  a.remote_gid = hw::Gid::from_ip(peer.dev->address());
  a.traffic_class = o.traffic_class;
  a.hop_limit = o.hop_limit;
  a.flow_label = o.flow_label;
  a.sl = o.sl;
  must_ok(h.modify(a, hw::qp_attr::state | hw::qp_attr::av | hw::qp_attr::path_mtu |
                          hw::qp_attr::dest_qpn | hw::qp_attr::rq_psn |
                          hw::qp_attr::max_dest_rd_atomic | hw::qp_attr::min_rnr_timer));
}

inline void to_rts(Host& h, const ConnectOptions& o = {}) {
  hw::QpAttr a;
  a.state = hw::QpState::rts;
  a.sq_psn = o.sq_psn;
  a.timeout = o.timeout;
  a.retry_cnt = o.retry_cnt;
  a.rnr_retry = o.rnr_retry;
  a.max_rd_atomic = o.max_rd_atomic;
  must_ok(h.modify(a, hw::qp_attr::state | hw::qp_attr::sq_psn | hw::qp_attr::timeout |
                          hw::qp_attr::retry_cnt | hw::qp_attr::rnr_retry |
                          hw::qp_attr::max_rd_atomic));
}

inline void to_state(Host& h, hw::QpState s) {
  hw::QpAttr a;
  a.state = s;
  must_ok(h.modify(a, hw::qp_attr::state));
}

// Connects a and b both ways; `ab` is a's view (a.sq_psn = b's rq_psn and so on).
inline void connect(Host& a, Host& b, ConnectOptions oa = {}, ConnectOptions ob = {}) {
  ob.rq_psn = oa.sq_psn;
  oa.rq_psn = ob.sq_psn;
  to_init(a, oa);
  to_init(b, ob);
  to_rtr(a, b, oa);
  to_rtr(b, a, ob);
  to_rts(a, oa);
  to_rts(b, ob);
}

struct FabricOptions {
  sim::ExecMode mode = sim::ExecMode::deterministic;
  sim::WireKind wire = sim::WireKind::inproc;
  uint64_t seed = 1;
  sim::FaultConfig faults;
  std::string pcap_path = "";
  std::string fault_spec = "";  // docs/faults.md; empty: $RNICDV_SIM_FAULTS
};

inline std::shared_ptr<sim::Fabric> make_fabric(const FabricOptions& o = {}) {
  sim::FabricConfig c;
  c.mode = o.mode;
  c.wire = o.wire;
  c.seed = o.seed;
  c.faults = o.faults;
  c.pcap_path = o.pcap_path;
  c.fault_spec = o.fault_spec;
  return must(sim::Fabric::create(c));
}

// Two hosts on one fabric, connected.
struct Pair {
  std::shared_ptr<sim::Fabric> fabric;
  Host a, b;

  explicit Pair(const FabricOptions& f = {}, const HostOptions& ha = default_host(),
                const HostOptions& hb = default_host())
      : fabric(make_fabric(f)) {
    a.init(fabric, ha);
    b.init(fabric, hb);
  }

  static HostOptions default_host() {
    HostOptions o;
    o.caps.max_send_wr = 256;
    o.caps.max_recv_wr = 256;
    o.caps.max_send_sge = 8;
    o.caps.max_recv_sge = 8;
    o.caps.max_inline_data = 256;
    return o;
  }

  void connect(const ConnectOptions& oa = {}, const ConnectOptions& ob = {}) {
    simtest::connect(a, b, oa, ob);
  }

  bool run_until(const std::function<bool()>& done, uint64_t max_ns = 60'000'000'000ull) {
    return fabric->run_until(done, max_ns);
  }

  // Runs until `cq` yields one completion; returns it.
  Completion wait(TestCq& cq, wqe::CqeFields* fields = nullptr,
                  uint64_t max_ns = 60'000'000'000ull) {
    Completion c{};
    const bool ok = run_until([&] { return cq.poll(&c, fields); }, max_ns);
    if (!ok) throw std::runtime_error("no completion arrived\n" + a.dev->dump() + b.dev->dump());
    return c;
  }

  Completion wait_send(Host& h, wqe::CqeFields* fields = nullptr,
                       uint64_t max_ns = 60'000'000'000ull) {
    Completion c{};
    const bool ok = run_until([&] { return h.poll_send(&c, fields); }, max_ns);
    if (!ok) throw std::runtime_error("no send completion\n" + a.dev->dump() + b.dev->dump());
    return c;
  }
  Completion wait_recv(Host& h, wqe::CqeFields* fields = nullptr,
                       uint64_t max_ns = 60'000'000'000ull) {
    return wait(*h.rcq, fields, max_ns);
  }

  // Runs until nothing more happens.
  void settle(uint64_t max_ns = 60'000'000'000ull) {
    const uint64_t start = fabric->now_ns();
    while (fabric->step() && fabric->now_ns() - start < max_ns) {
    }
  }
};

inline SendWr make_wr(WrOpcode op, Sge* sges, uint32_t n, uint64_t wr_id = 0,
                      SendFlags flags = send_flags::signaled) {
  SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.flags = flags;
  wr.sg_list = sges;
  wr.num_sge = n;
  return wr;
}

inline void fill_pattern(uint8_t* p, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    p[i] = static_cast<uint8_t>(x >> 16);
  }
}

// Waits in real time without stepping (threaded fabrics: only the device threads, and what
// `done` itself drives, make progress).
template <class Pred>
bool wait_real(Pred&& done, int seconds = 60) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return done();
}

}  // namespace simtest
