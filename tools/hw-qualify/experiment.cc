// SPDX-License-Identifier: BSD-3-Clause
// What the device does with WQEs that no doorbell announced (hw-qualify.h). Two QPs of one
// device, connected to each other through port 1 by the real-device backend (hw/mlx5); the
// WQEs are RDMA WRITEs written by hand into the requester's SQ, each to its own 64-byte slot of
// the responder's memory with its own fill byte, all signaled. What ran is read from the
// requester's CQ and from the responder's memory; nothing is assumed.
#include <endian.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "hw-qualify.h"
#include "rnicdv/hw/mlx5.h"

namespace rnicdv::hwq {

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kSlot = 64;
constexpr uint32_t kSlots = 16;

template <class T>
T* at(void* base, size_t offset) {
  return static_cast<T*>(static_cast<void*>(static_cast<unsigned char*>(base) + offset));
}

void wc_fence() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_sfence();
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

struct Side {
  std::unique_ptr<hw::Cq> cq;
  std::unique_ptr<hw::Qp> qp;
  uint32_t ci = 0;        // CQ consumer index
  uint32_t bf_offset = 0;  // which half of the BlueFlame register the next doorbell uses
};

// One requester (a) and one responder (b), fresh for each part of the experiment.
class Pair {
 public:
  Pair(hw::Device& dev, hw::Pd& pd, hw::Mr& src_mr, hw::Mr& dst_mr)
      : dev_(dev), pd_(pd), src_mr_(src_mr), dst_mr_(dst_mr) {}

  Status create() {
    for (Side* s : {&a_, &b_}) {
      auto cq = dev_.create_cq(64);
      if (!cq) return cq.status().prepend("create_cq");
      s->cq = std::move(*cq);
      hw::QpCaps caps;
      caps.max_send_wr = 16;
      caps.max_recv_wr = 16;
      auto qp = dev_.create_qp(pd_, *s->cq, *s->cq, caps);
      if (!qp) return qp.status().prepend("create_qp");
      s->qp = std::move(*qp);
    }
    return Status::ok();
  }

  Status to_init(hw::Qp& qp) {
    hw::QpAttr attr;
    attr.state = hw::QpState::init;
    attr.port_num = 1;
    attr.pkey_index = 0;
    attr.access_flags = hw::access::local_write | hw::access::remote_write |
                        hw::access::remote_read;
    return qp.modify(attr, hw::qp_attr::state | hw::qp_attr::port | hw::qp_attr::access_flags);
  }
  Status to_rtr(hw::Qp& qp, const hw::Qp& peer) {
    hw::QpAttr attr;
    attr.state = hw::QpState::rtr;
    attr.path_mtu = dev_.info().caps.active_mtu;
    attr.dest_qpn = peer.view().qpn;
    attr.rq_psn = 0x100;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer = 12;
    attr.remote_gid = dev_.info().gid;
    return qp.modify(attr, hw::qp_attr::state | hw::qp_attr::av | hw::qp_attr::path_mtu |
                               hw::qp_attr::dest_qpn | hw::qp_attr::rq_psn |
                               hw::qp_attr::max_dest_rd_atomic | hw::qp_attr::min_rnr_timer);
  }
  Status to_rts(hw::Qp& qp) {
    hw::QpAttr attr;
    attr.state = hw::QpState::rts;
    attr.sq_psn = 0x100;
    attr.timeout = 14;
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;
    attr.max_rd_atomic = 1;
    return qp.modify(attr, hw::qp_attr::state | hw::qp_attr::sq_psn | hw::qp_attr::timeout |
                               hw::qp_attr::retry_cnt | hw::qp_attr::rnr_retry |
                               hw::qp_attr::max_rd_atomic);
  }

  // The responder all the way to RTS, the requester to RTR.
  Status connect_to_rtr() {
    for (Side* s : {&a_, &b_})
      if (Status st = to_init(*s->qp); !st) return st;
    if (Status st = to_rtr(*b_.qp, *a_.qp); !st) return st;
    if (Status st = to_rts(*b_.qp); !st) return st;
    return to_rtr(*a_.qp, *b_.qp);
  }
  Status requester_to_rts() { return to_rts(*a_.qp); }

  // An RDMA WRITE of source slot `slot` to the responder's slot `slot`, at SQ index `index`.
  // Nothing else: no doorbell record, no register.
  void write_wqe(uint32_t index, uint32_t slot) {
    const hw::QpView& v = a_.qp->view();
    const uint32_t wqe = index & (v.dv.sq.wqe_cnt - 1);
    void* base = at<void>(v.dv.sq.buf, size_t{wqe} * v.dv.sq.stride);
    std::memset(base, 0, v.dv.sq.stride);
    auto* ctrl = at<mlx5_wqe_ctrl_seg>(base, 0);
    auto* raddr = at<mlx5_wqe_raddr_seg>(base, sizeof(mlx5_wqe_ctrl_seg));
    auto* data =
        at<mlx5_wqe_data_seg>(base, sizeof(mlx5_wqe_ctrl_seg) + sizeof(mlx5_wqe_raddr_seg));
    raddr->raddr = htobe64(reinterpret_cast<uintptr_t>(dst_mr_.addr()) + size_t{slot} * kSlot);
    raddr->rkey = htobe32(dst_mr_.rkey());
    mlx5dv_set_data_seg(data, kSlot, src_mr_.lkey(),
                        reinterpret_cast<uintptr_t>(src_mr_.addr()) + size_t{slot} * kSlot);
    // The ctrl segment last, so that a device reading the ring never sees a half-built WQE.
    std::atomic_thread_fence(std::memory_order_release);
    mlx5dv_set_ctrl_seg(ctrl, static_cast<uint16_t>(index), MLX5_OPCODE_RDMA_WRITE, 0, v.qpn,
                        MLX5_WQE_CTRL_CQ_UPDATE, 3, 0, 0);
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }

  // The send doorbell as libmlx5 rings it: the record to `count`, then the first 8 bytes of
  // the ctrl segment of WQE `last` to the register.
  void ring(uint32_t count, uint32_t last) {
    const hw::QpView& v = a_.qp->view();
    std::atomic_thread_fence(std::memory_order_release);
    v.dv.dbrec[MLX5_SND_DBR] = htobe32(count & 0xffff);
    wc_fence();
    uint64_t word;
    std::memcpy(&word, at<void>(v.dv.sq.buf, size_t{last & (v.dv.sq.wqe_cnt - 1)} *
                                                 v.dv.sq.stride),
                sizeof word);
    *at<volatile uint64_t>(v.dv.bf.reg, a_.bf_offset) = word;
    wc_fence();
    if (v.dv.bf.size) a_.bf_offset ^= v.dv.bf.size;
  }

  // Takes every CQE the requester's CQ holds now.
  void drain(uint32_t* ok, uint32_t* errors) {
    const mlx5dv_cq& cq = a_.cq->view().dv;
    for (;;) {
      const size_t slot = size_t{a_.ci & (cq.cqe_cnt - 1)} * cq.cqe_size;
      auto* cqe = at<mlx5_cqe64>(cq.buf, slot + (cq.cqe_size == 128 ? 64 : 0));
      const uint8_t op_own = __atomic_load_n(&cqe->op_own, __ATOMIC_ACQUIRE);
      const bool sw_owner = (op_own & 1) == ((a_.ci & cq.cqe_cnt) ? 1 : 0);
      if ((op_own >> 4) == MLX5_CQE_INVALID || !sw_owner) return;
      const uint8_t opcode = op_own >> 4;
      if (opcode == MLX5_CQE_REQ_ERR || opcode == MLX5_CQE_RESP_ERR) {
        ++*errors;
      } else {
        ++*ok;
      }
      ++a_.ci;
      cq.dbrec[0] = htobe32(a_.ci & 0xffffff);
    }
  }

  hw::Qp& requester() { return *a_.qp; }

 private:
  hw::Device& dev_;
  hw::Pd& pd_;
  hw::Mr& src_mr_;
  hw::Mr& dst_mr_;
  Side a_, b_;
};

struct Rig {
  std::shared_ptr<hw::Device> dev;
  std::unique_ptr<hw::Pd> pd;
  std::vector<uint8_t> src = std::vector<uint8_t>(kSlots * kSlot);
  std::vector<uint8_t> dst = std::vector<uint8_t>(kSlots * kSlot);
  std::unique_ptr<hw::Mr> src_mr, dst_mr;
  uint32_t ok = 0, errors = 0;  // CQEs taken by the current part

  Status open(const std::string& name) {
    auto d = hw::mlx5::open_device(name);
    if (!d) return d.status();
    dev = std::move(*d);
    auto p = dev->alloc_pd();
    if (!p) return p.status().prepend("alloc_pd");
    pd = std::move(*p);
    for (uint32_t s = 0; s < kSlots; ++s) std::memset(&src[s * kSlot], 0xa0 + s, kSlot);
    auto m = dev->reg_mr(*pd, src.data(), src.size(), hw::access::local_write);
    if (!m) return m.status().prepend("reg_mr");
    src_mr = std::move(*m);
    m = dev->reg_mr(*pd, dst.data(), dst.size(),
                    hw::access::local_write | hw::access::remote_write);
    if (!m) return m.status().prepend("reg_mr");
    dst_mr = std::move(*m);
    return Status::ok();
  }

  // Slots [first, first + n) of the responder's memory that hold their source's bytes.
  uint32_t landed(uint32_t first, uint32_t n) const {
    uint32_t count = 0;
    for (uint32_t s = first; s < first + n; ++s) {
      const auto* p = static_cast<const volatile uint8_t*>(&dst[s * kSlot]);
      bool all = true;
      for (uint32_t i = 0; i < kSlot; ++i) all = all && p[i] == static_cast<uint8_t>(0xa0 + s);
      count += all;
    }
    return count;
  }

  // Watches the CQ for `window`, or until `until` slots in [first, first + n) have landed and
  // as many CQEs arrived (a positive answer needs no more waiting). Returns the slots landed.
  uint32_t observe(Pair& p, uint32_t first, uint32_t n, uint32_t until,
                   std::chrono::milliseconds window) {
    const auto end = Clock::now() + window;
    for (;;) {
      p.drain(&ok, &errors);
      const uint32_t l = landed(first, n);
      if ((l >= until && ok + errors >= until) || Clock::now() >= end) return l;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
};

}  // namespace

Result<ExperimentFindings> run_experiment(const std::string& device,
                                          std::chrono::milliseconds window) {
  ExperimentFindings f;
  f.window_ms = static_cast<uint32_t>(window.count());
  Rig rig;
  if (Status st = rig.open(device); !st) return st.prepend("experiment: open " + device);
  f.backend_profile = rig.dev->info().profile;
  constexpr uint32_t kN = 4;
  const auto control = std::chrono::milliseconds(10'000);

  // (a) WQEs written into the SQ of a QP in RTR, no doorbell; then the move to RTS; then a
  //     doorbell for them, the control that shows they were valid and the path works.
  {
    Pair p(*rig.dev, *rig.pd, *rig.src_mr, *rig.dst_mr);
    if (Status st = p.create(); !st) return st.prepend("experiment (a)");
    if (Status st = p.connect_to_rtr(); !st) return st.prepend("experiment (a)");
    rig.ok = rig.errors = 0;
    for (uint32_t i = 0; i < kN; ++i) p.write_wqe(i, i);
    f.a.written = kN;
    f.a.in_rtr = rig.observe(p, 0, kN, 1, window);
    if (Status st = p.requester_to_rts(); !st) return st.prepend("experiment (a) RTR->RTS");
    f.a.after_rts = rig.observe(p, 0, kN, kN, window) - f.a.in_rtr;
    f.a.cqes_before_doorbell = rig.ok;
    p.ring(kN, kN - 1);
    f.a.after_doorbell = rig.observe(p, 0, kN, kN, control) - f.a.in_rtr - f.a.after_rts;
    f.a.cqes = rig.ok;
    f.a.error_cqes = rig.errors;
  }
  // (b) In RTS: kN WQEs written, the doorbell rung for the first only; then for all.
  {
    Pair p(*rig.dev, *rig.pd, *rig.src_mr, *rig.dst_mr);
    if (Status st = p.create(); !st) return st.prepend("experiment (b)");
    if (Status st = p.connect_to_rtr(); !st) return st.prepend("experiment (b)");
    if (Status st = p.requester_to_rts(); !st) return st.prepend("experiment (b) RTR->RTS");
    rig.ok = rig.errors = 0;
    for (uint32_t i = 0; i < kN; ++i) p.write_wqe(i, 4 + i);
    f.b.written = kN;
    p.ring(1, 0);
    const uint32_t first = rig.observe(p, 4, 1, 1, control);
    f.b.announced = first;
    f.b.beyond = rig.observe(p, 5, kN - 1, 1, window);
    f.b.cqes_before_doorbell = rig.ok;
    p.ring(kN, kN - 1);
    f.b.after_doorbell = rig.observe(p, 5, kN - 1, kN - 1, control) - f.b.beyond;
    f.b.cqes = rig.ok;
    f.b.error_cqes = rig.errors;
  }
  // (c) A doorbell rung while the QP is in RTR: run after the move to RTS, or forgotten?
  {
    Pair p(*rig.dev, *rig.pd, *rig.src_mr, *rig.dst_mr);
    if (Status st = p.create(); !st) return st.prepend("experiment (c)");
    if (Status st = p.connect_to_rtr(); !st) return st.prepend("experiment (c)");
    rig.ok = rig.errors = 0;
    p.write_wqe(0, 8);
    f.c.written = 1;
    p.ring(1, 0);
    f.c.in_rtr = rig.observe(p, 8, 1, 1, window);
    if (Status st = p.requester_to_rts(); !st) return st.prepend("experiment (c) RTR->RTS");
    f.c.after_rts = rig.observe(p, 8, 1, 1, window) - f.c.in_rtr;
    f.c.cqes_before_doorbell = rig.ok;
    p.ring(1, 0);  // again, in RTS: the control
    f.c.after_doorbell = rig.observe(p, 8, 1, 1, control) - f.c.in_rtr - f.c.after_rts;
    f.c.cqes = rig.ok;
    f.c.error_cqes = rig.errors;
  }
  return f;
}

}  // namespace rnicdv::hwq
