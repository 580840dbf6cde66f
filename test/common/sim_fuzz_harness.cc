// SPDX-License-Identifier: BSD-3-Clause
// The fuzz harness behind fuzz_entry.h: a deterministic fabric with two devices and one
// connected QP pair, rebuilt into a clean state before every input. The receiving device also
// has a UD QP (QPN 0x101, Q_Key kFuzzUdQkey) in memory the harness placed, as libmlx5's would
// be, with receives posted, so datagrams reach the UD path too, a UC QP (QPN 0x102)
// connected to the sending device's RC QP, with receives posted, for UC packets, and an XRC
// target (QPN 0x103) facing that QP, with an XRC SRQ of its domain (kFuzzXrcSrqn, receives
// posted once) and one of another domain (kFuzzForeignXrcSrqn), for XRC packets.
#include <endian.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "device_impl.h"
#include "fuzz_entry.h"
#include "handles.h"

namespace rnicdv::sim {

namespace {

constexpr size_t kRegionBytes = 64 * 1024;
constexpr int kMaxSteps = 20000;

struct Side {
  std::shared_ptr<Device> dev;
  std::unique_ptr<hw::Pd> pd;
  std::vector<uint8_t> buf = std::vector<uint8_t>(kRegionBytes);
  std::unique_ptr<hw::Mr> mr;
  std::unique_ptr<hw::Cq> cq;
  std::unique_ptr<hw::Qp> qp;
  uint32_t ci = 0;
};

// Page-aligned memory the harness places for the UD QP (rings, record, UAR page).
struct PageBlock {
  void* p = nullptr;
  explicit PageBlock(size_t bytes) : p(std::aligned_alloc(4096, bytes)) { std::memset(p, 0, bytes); }
  ~PageBlock() { std::free(p); }
  PageBlock(const PageBlock&) = delete;
  PageBlock& operator=(const PageBlock&) = delete;
  uint8_t* bytes() const { return static_cast<uint8_t*>(p); }
};

constexpr uint32_t kUdRqWqes = 8;
constexpr uint32_t kUdRqStride = 64;

class Harness {
 public:
  Harness() {
    FabricConfig fc;
    fc.mode = ExecMode::deterministic;
    fc.wire = WireKind::inproc;
    fc.pcap_path = "/dev/null";
    fabric_ = std::move(Fabric::create(fc)).value();
    for (Side* s : {&a_, &b_}) {
      s->dev = std::move(fabric_->add_device()).value();
      s->pd = std::move(s->dev->alloc_pd()).value();
      s->mr = std::move(s->dev->reg_mr(*s->pd, s->buf.data(), s->buf.size(),
                                       hw::access::local_write | hw::access::remote_write |
                                           hw::access::remote_read | hw::access::remote_atomic))
                  .value();
      s->cq = std::move(s->dev->create_cq(256)).value();
      hw::QpCaps caps;
      caps.max_send_wr = 64;
      caps.max_recv_wr = 64;
      caps.max_send_sge = 4;
      caps.max_recv_sge = 4;
      caps.max_inline_data = 128;
      s->qp = std::move(s->dev->create_qp(*s->pd, *s->cq, *s->cq, caps)).value();
    }
    (void)attach_uar_page(*b_.dev, ud_uar_.p, ud_uar_.p);
    ExternalQpMemory m;
    m.type = hw::QpType::ud;
    m.rq_buf = ud_ring_.bytes();
    m.rq_wqe_cnt = kUdRqWqes;
    m.rq_stride = kUdRqStride;
    m.sq_buf = ud_ring_.bytes() + kUdRqWqes * kUdRqStride;
    m.sq_wqe_cnt = 8;
    m.dbrec = static_cast<uint32_t*>(ud_dbrec_.p);
    m.bf_reg = ud_uar_.bytes() + 0x800 + 512;
    m.granted.max_recv_wr = kUdRqWqes;
    m.granted.max_recv_sge = 1;
    ud_qp_ = std::move(create_qp_external(*b_.dev, *b_.pd, *b_.cq, *b_.cq, m)).value();
    hw::QpCaps uc_caps;
    uc_caps.max_send_wr = 8;
    uc_caps.max_recv_wr = 8;
    uc_qp_ = std::move(b_.dev->create_uc_qp(*b_.pd, *b_.cq, *b_.cq, nullptr, uc_caps)).value();
    xrcd_ = std::move(b_.dev->open_xrcd()).value();
    other_xrcd_ = std::move(b_.dev->open_xrcd()).value();
    xrc_srq_ = std::move(b_.dev->create_xrc_srq(*xrcd_, *b_.pd, *b_.cq, kXrcSrqWqes, 1)).value();
    other_xrc_srq_ = std::move(b_.dev->create_xrc_srq(*other_xrcd_, *b_.pd, *b_.cq, 4, 1)).value();
    xrc_tgt_ = std::move(b_.dev->create_xrc_recv_qp(*xrcd_)).value();
    // Receives of 512 bytes, posted once: later inputs find the SRQ emptier, then RNR.
    const hw::SrqView& v = xrc_srq_->view();
    wqe::SrqRing ring{static_cast<uint8_t*>(v.dv.buf), v.wqe_cnt, v.dv.stride};
    uint16_t index = static_cast<uint16_t>(v.dv.head);
    for (uint32_t i = 0; i < kXrcSrqWqes; ++i) {
      auto* seg = reinterpret_cast<mlx5_wqe_data_seg*>(ring.slot(index) + 16);
      seg->byte_count = htobe32(512);
      seg->lkey = htobe32(b_.mr->lkey());
      seg->addr = htobe64(reinterpret_cast<uintptr_t>(b_.buf.data()) + 16384 + i * 512);
      index = ring.next(index);
    }
    __atomic_store_n(v.dv.dbrec, htobe32(kXrcSrqWqes), __ATOMIC_RELEASE);
  }

  void reconnect() {
    for (Side* s : {&a_, &b_}) {
      hw::QpAttr attr;
      attr.state = hw::QpState::reset;
      (void)s->qp->modify(attr, hw::qp_attr::state);
      std::memset(s->qp->view().dv.dbrec, 0, 8);
      std::memset(s->qp->view().dv.sq.buf, 0, size_t{s->qp->view().dv.sq.wqe_cnt} * 64);
    }
    for (Side* s : {&a_, &b_}) {
      Side* peer = s == &a_ ? &b_ : &a_;
      hw::QpAttr attr;
      attr.state = hw::QpState::init;
      attr.access_flags =
          hw::access::remote_write | hw::access::remote_read | hw::access::remote_atomic;
      (void)s->qp->modify(attr, hw::qp_attr::state | hw::qp_attr::port | hw::qp_attr::access_flags);
      attr.state = hw::QpState::rtr;
      attr.path_mtu = hw::Mtu::mtu256;
      attr.dest_qpn = peer->qp->view().qpn;
      attr.rq_psn = 0;
      attr.max_dest_rd_atomic = 4;
      attr.min_rnr_timer = 1;
      attr.remote_gid = hw::Gid::from_ipv4(peer->dev->ipv4());
      (void)s->qp->modify(attr, hw::qp_attr::state | hw::qp_attr::av | hw::qp_attr::path_mtu |
                                    hw::qp_attr::dest_qpn | hw::qp_attr::rq_psn |
                                    hw::qp_attr::max_dest_rd_atomic | hw::qp_attr::min_rnr_timer);
      attr.state = hw::QpState::rts;
      attr.sq_psn = 0;
      attr.timeout = 1;
      attr.retry_cnt = 1;
      attr.rnr_retry = 1;
      attr.max_rd_atomic = 4;
      (void)s->qp->modify(attr, hw::qp_attr::state | hw::qp_attr::sq_psn | hw::qp_attr::timeout |
                                    hw::qp_attr::retry_cnt | hw::qp_attr::rnr_retry |
                                    hw::qp_attr::max_rd_atomic);
    }
  }

  void run() {
    for (int i = 0; i < kMaxSteps; ++i) {
      drain(a_);
      drain(b_);
      if (!fabric_->step()) break;
    }
    drain(a_);
    drain(b_);
  }

  void execute_send_queue(const uint8_t* data, size_t len) {
    reconnect();
    const mlx5dv_qp& dv = a_.qp->view().dv;
    const size_t ring = size_t{dv.sq.wqe_cnt} * 64;
    std::memcpy(dv.sq.buf, data, std::min(len, ring));
    const uint32_t bbs = static_cast<uint32_t>((std::min(len, ring) + 63) / 64);
    __atomic_store_n(&dv.dbrec[MLX5_SND_DBR], htobe32(bbs & 0xffff), __ATOMIC_RELEASE);
    uint64_t ctrl = 0;
    std::memcpy(&ctrl, dv.sq.buf, sizeof ctrl);
    if (ctrl == 0) ctrl = 1;
    __atomic_store_n(reinterpret_cast<uint64_t*>(dv.bf.reg), ctrl, __ATOMIC_RELEASE);
    run();
  }

  // The UD QP through RESET to RTS, with `kUdRqWqes` receives of 1 KiB posted.
  void reset_ud() {
    hw::QpAttr attr;
    attr.state = hw::QpState::reset;
    (void)ud_qp_->modify(attr, hw::qp_attr::state);
    std::memset(ud_dbrec_.p, 0, 8);
    attr.state = hw::QpState::init;
    attr.qkey = kFuzzUdQkey;
    (void)ud_qp_->modify(attr, hw::qp_attr::state | hw::qp_attr::port | hw::qp_attr::qkey);
    attr.state = hw::QpState::rtr;
    (void)ud_qp_->modify(attr, hw::qp_attr::state);
    attr.state = hw::QpState::rts;
    (void)ud_qp_->modify(attr, hw::qp_attr::state | hw::qp_attr::sq_psn);
    for (uint32_t i = 0; i < kUdRqWqes; ++i) {
      auto* seg = reinterpret_cast<mlx5_wqe_data_seg*>(ud_ring_.bytes() + i * kUdRqStride);
      seg->byte_count = htobe32(1024);
      seg->lkey = htobe32(b_.mr->lkey());
      seg->addr = htobe64(reinterpret_cast<uintptr_t>(b_.buf.data()) + 32768 + i * 1024);
    }
    __atomic_store_n(&static_cast<uint32_t*>(ud_dbrec_.p)[MLX5_RCV_DBR], htobe32(kUdRqWqes),
                     __ATOMIC_RELEASE);
  }

  // The UC QP through RESET to RTS facing the requester's RC QP (UC packets carry that QPN as
  // their source only in the fuzzer's input: the UC responder checks the address), with four
  // receives of 1 KiB posted.
  void reset_uc() {
    hw::QpAttr attr;
    attr.state = hw::QpState::reset;
    (void)uc_qp_->modify(attr, hw::qp_attr::state);
    const mlx5dv_qp& dv = uc_qp_->view().dv;
    std::memset(dv.dbrec, 0, 8);
    attr.state = hw::QpState::init;
    attr.access_flags = hw::access::remote_write;
    (void)uc_qp_->modify(attr, hw::qp_attr::state | hw::qp_attr::port | hw::qp_attr::access_flags);
    attr.state = hw::QpState::rtr;
    attr.path_mtu = hw::Mtu::mtu256;
    attr.dest_qpn = a_.qp->view().qpn;
    attr.rq_psn = 0;
    attr.remote_gid = hw::Gid::from_ipv4(a_.dev->ipv4());
    (void)uc_qp_->modify(attr, hw::qp_attr::state | hw::qp_attr::av | hw::qp_attr::path_mtu |
                                   hw::qp_attr::dest_qpn | hw::qp_attr::rq_psn);
    attr.state = hw::QpState::rts;
    attr.sq_psn = 0;
    (void)uc_qp_->modify(attr, hw::qp_attr::state | hw::qp_attr::sq_psn);
    for (uint32_t i = 0; i < 4; ++i) {
      auto* seg =
          reinterpret_cast<mlx5_wqe_data_seg*>(static_cast<uint8_t*>(dv.rq.buf) + i * dv.rq.stride);
      seg->byte_count = htobe32(1024);
      seg->lkey = htobe32(b_.mr->lkey());
      seg->addr = htobe64(reinterpret_cast<uintptr_t>(b_.buf.data()) + 4096 + i * 1024);
    }
    __atomic_store_n(&dv.dbrec[MLX5_RCV_DBR], htobe32(4), __ATOMIC_RELEASE);
  }

  // The XRC target through RESET to RTR facing the requester's RC QP.
  void reset_xrc() {
    hw::QpAttr attr;
    attr.state = hw::QpState::reset;
    (void)xrc_tgt_->modify(attr, hw::qp_attr::state);
    attr.state = hw::QpState::init;
    attr.access_flags =
        hw::access::remote_write | hw::access::remote_read | hw::access::remote_atomic;
    (void)xrc_tgt_->modify(attr,
                           hw::qp_attr::state | hw::qp_attr::port | hw::qp_attr::access_flags);
    attr.state = hw::QpState::rtr;
    attr.path_mtu = hw::Mtu::mtu256;
    attr.dest_qpn = a_.qp->view().qpn;
    attr.rq_psn = 0;
    attr.max_dest_rd_atomic = 4;
    attr.min_rnr_timer = 1;
    attr.remote_gid = hw::Gid::from_ipv4(a_.dev->ipv4());
    (void)xrc_tgt_->modify(attr, hw::qp_attr::state | hw::qp_attr::av | hw::qp_attr::path_mtu |
                                     hw::qp_attr::dest_qpn | hw::qp_attr::rq_psn |
                                     hw::qp_attr::max_dest_rd_atomic |
                                     hw::qp_attr::min_rnr_timer);
  }

  void receive_datagram(const uint8_t* data, size_t len) {
    reconnect();
    reset_ud();
    reset_uc();
    reset_xrc();
    // Post a few receive WQEs so SEND paths are reachable.
    const mlx5dv_qp& dv = b_.qp->view().dv;
    for (uint32_t i = 0; i < 4; ++i) {
      auto* seg =
          reinterpret_cast<mlx5_wqe_data_seg*>(static_cast<uint8_t*>(dv.rq.buf) + i * dv.rq.stride);
      seg->byte_count = htobe32(1024);
      seg->lkey = htobe32(b_.mr->lkey());
      seg->addr = htobe64(reinterpret_cast<uintptr_t>(b_.buf.data()) + i * 1024);
    }
    __atomic_store_n(&dv.dbrec[MLX5_RCV_DBR], htobe32(4), __ATOMIC_RELEASE);
    std::vector<uint8_t> copy(data, data + len);
    b_.dev->impl().hca->inject_datagram(a_.dev->address(), copy.data(), copy.size());
    run();
  }

  uint32_t uc_receives_taken() const {
    auto s = b_.dev->qp_snapshot(uc_qp_->view().qpn);
    return s ? s.value().rq_consumed : 0;
  }
  uint32_t uc_qpn() const { return uc_qp_->view().qpn; }

  uint32_t xrc_qpn() const { return xrc_tgt_->view().qpn; }
  uint32_t xrc_srqn() const { return xrc_srq_->view().dv.srqn; }
  uint32_t foreign_xrc_srqn() const { return other_xrc_srq_->view().dv.srqn; }

  uint32_t ud_receives_taken() const {
    auto s = b_.dev->qp_snapshot(ud_qp_->view().qpn);
    return s ? s.value().rq_consumed : 0;
  }

  DeviceCounters requester_counters() const { return a_.dev->counters(); }
  DeviceCounters responder_counters() const { return b_.dev->counters(); }

 private:
  void drain(Side& s) {
    const mlx5dv_cq& dv = s.cq->view().dv;
    wqe::CqRing ring{static_cast<uint8_t*>(dv.buf), dv.cqe_cnt, dv.cqe_size};
    while (wqe::cqe_for_sw(ring, s.ci)) ++s.ci;
    __atomic_store_n(&dv.dbrec[kCqDbrConsumerIndex], htobe32(s.ci & 0xffffff), __ATOMIC_RELEASE);
  }

  std::shared_ptr<Fabric> fabric_;
  Side a_, b_;
  PageBlock ud_ring_{4096};
  PageBlock ud_dbrec_{4096};
  PageBlock ud_uar_{4096};
  std::unique_ptr<hw::Qp> ud_qp_;
  std::unique_ptr<hw::Qp> uc_qp_;
  static constexpr uint32_t kXrcSrqWqes = 15;
  std::unique_ptr<hw::Xrcd> xrcd_, other_xrcd_;
  std::unique_ptr<hw::Srq> xrc_srq_, other_xrc_srq_;
  std::unique_ptr<hw::Qp> xrc_tgt_;
};

Harness& harness() {
  static Harness* h = new Harness();  // lives until exit, like a fuzzer's process
  return *h;
}

}  // namespace

void fuzz_execute_send_queue(const uint8_t* data, size_t len) {
  harness().execute_send_queue(data, len);
}

void fuzz_receive_datagram(const uint8_t* data, size_t len) {
  harness().receive_datagram(data, len);
}

uint32_t fuzz_ud_receives_taken() {
  return harness().ud_receives_taken();
}

uint32_t fuzz_uc_receives_taken() {
  return harness().uc_receives_taken();
}

uint32_t fuzz_uc_qpn() {
  return harness().uc_qpn();
}

uint32_t fuzz_xrc_qpn() {
  return harness().xrc_qpn();
}
uint32_t fuzz_xrc_srqn() {
  return harness().xrc_srqn();
}
uint32_t fuzz_foreign_xrc_srqn() {
  return harness().foreign_xrc_srqn();
}

DeviceCounters fuzz_requester_counters() {
  return harness().requester_counters();
}
DeviceCounters fuzz_responder_counters() {
  return harness().responder_counters();
}

}  // namespace rnicdv::sim
