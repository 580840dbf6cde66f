// SPDX-License-Identifier: BSD-3-Clause
// Two QPs of one mlx5 device connected to each other through port 1: state transitions,
// modify errors, a SEND written straight into the views, and COMM_EST on a QP left in RTR,
// read by the application or, with a COMM_EST notifier, by the backend's event thread.
// Skipped (exit 77) unless a device with an active, addressable port 1 is present.
#include <endian.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "mlx5_event_thread.h"
#include "mlx5_test_device.h"
#include "proc_threads.h"

using namespace rnicdv;
using namespace rnicdv::hw;

const char* mlx5_test_skip_reason() {
  if (const char* reason = mlx5_test::no_device_reason()) return reason;
  static std::string reason;
  auto device = mlx5::open_device(mlx5_test::device_name());
  if (!device.is_ok()) return nullptr;  // the tests report the open failure
  auto* mlx5 = dynamic_cast<mlx5::Mlx5Device*>(device.value().get());
  if (!mlx5 || mlx5->ports().empty()) return nullptr;
  const mlx5::PortAddressing& port = mlx5->ports().front();
  if (port.state != IBV_PORT_ACTIVE) {
    reason = mlx5_test::device_name() + " port 1 is not active";
    return reason.c_str();
  }
  if (!port.source_gid) {
    reason = mlx5_test::device_name() + " port 1 has no usable GID";
    return reason.c_str();
  }
  return nullptr;
}

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kDeadline = std::chrono::seconds(10);  // generous: a loaded machine

struct Endpoint {
  std::unique_ptr<Cq> cq;
  std::unique_ptr<Qp> qp;
};

struct Loopback {
  std::shared_ptr<mlx5::Mlx5Device> device = mlx5_test::open();
  std::unique_ptr<Pd> pd;
  Endpoint a, b;

  Loopback() {
    auto p = device->alloc_pd();
    REQUIRE(p.is_ok());
    pd = std::move(*p);
    a = endpoint();
    b = endpoint();
  }

  Endpoint endpoint() {
    Endpoint e;
    auto cq = device->create_cq(64);
    REQUIRE(cq.is_ok());
    e.cq = std::move(*cq);
    QpCaps caps;
    caps.max_send_wr = 16;
    caps.max_recv_wr = 16;
    auto qp = device->create_qp(*pd, *e.cq, *e.cq, caps);
    INFO(qp.status().message());
    REQUIRE(qp.is_ok());
    e.qp = std::move(*qp);
    return e;
  }

  Status to_init(Qp& qp) {
    QpAttr attr;
    attr.state = QpState::init;
    attr.port_num = 1;
    attr.pkey_index = 0;
    attr.access_flags = access::local_write | access::remote_write | access::remote_read;
    return qp.modify(attr, qp_attr::state | qp_attr::port | qp_attr::access_flags);
  }

  Status to_rtr(Qp& qp, const Qp& peer) {
    QpAttr attr;
    attr.state = QpState::rtr;
    attr.path_mtu = device->info().caps.active_mtu;
    attr.dest_qpn = peer.view().qpn;
    attr.rq_psn = 0x100;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer = 12;
    attr.remote_gid = device->info().gid;
    return qp.modify(attr, qp_attr::state | qp_attr::av | qp_attr::path_mtu | qp_attr::dest_qpn |
                               qp_attr::rq_psn | qp_attr::max_dest_rd_atomic |
                               qp_attr::min_rnr_timer);
  }

  Status to_rts(Qp& qp) {
    QpAttr attr;
    attr.state = QpState::rts;
    attr.sq_psn = 0x100;
    attr.timeout = 14;
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;
    attr.max_rd_atomic = 1;
    return qp.modify(attr, qp_attr::state | qp_attr::sq_psn | qp_attr::timeout |
                               qp_attr::retry_cnt | qp_attr::rnr_retry | qp_attr::max_rd_atomic);
  }
};

void require_ok(const Status& s) {
  INFO(s.message());
  REQUIRE(s.is_ok());
}

template <class T>
T* at(void* base, size_t offset) {
  return static_cast<T*>(static_cast<void*>(static_cast<unsigned char*>(base) + offset));
}

// Store barrier before an MMIO write to write-combining memory, and after it to push it out.
void wc_fence() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_sfence();
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

// One receive WQE at RQ index 0 (mlx5dv.h mlx5_wqe_data_seg; docs/design.md, "Protocol notes").
void post_recv(const QpView& v, const Mr& mr, void* buf, uint32_t len) {
  auto* seg = at<mlx5_wqe_data_seg>(v.dv.rq.buf, 0);
  mlx5dv_set_data_seg(seg, len, mr.lkey(), reinterpret_cast<uintptr_t>(buf));
  if (v.dv.rq.stride > sizeof(mlx5_wqe_data_seg)) {
    mlx5dv_set_data_seg(seg + 1, 0, MLX5_INVALID_LKEY, 0);  // end of the scatter list
  }
  std::atomic_thread_fence(std::memory_order_release);
  v.dv.dbrec[MLX5_RCV_DBR] = htobe32(1);
}

// One signaled SEND at SQ index 0, rung with an 8-byte doorbell (section 4 of the same notes).
void post_send(const QpView& v, const Mr& mr, void* buf, uint32_t len) {
  auto* ctrl = at<mlx5_wqe_ctrl_seg>(v.dv.sq.buf, 0);
  auto* data = at<mlx5_wqe_data_seg>(v.dv.sq.buf, sizeof(mlx5_wqe_ctrl_seg));
  mlx5dv_set_ctrl_seg(ctrl, 0, MLX5_OPCODE_SEND, 0, v.qpn, MLX5_WQE_CTRL_CQ_UPDATE, 2, 0, 0);
  mlx5dv_set_data_seg(data, len, mr.lkey(), reinterpret_cast<uintptr_t>(buf));
  std::atomic_thread_fence(std::memory_order_release);
  v.dv.dbrec[MLX5_SND_DBR] = htobe32(1);
  wc_fence();
  uint64_t doorbell;
  std::memcpy(&doorbell, ctrl, sizeof doorbell);
  *static_cast<volatile uint64_t*>(v.dv.bf.reg) = doorbell;
  wc_fence();
}

// Waits for the next CQE (the ownership rule of rdma-core's get_sw_cqe) and returns its
// opcode and byte count; opcode MLX5_CQE_INVALID on timeout.
struct Completion {
  uint8_t opcode = MLX5_CQE_INVALID;
  uint8_t syndrome = 0;
  uint32_t byte_cnt = 0;
};

Completion wait_cqe(const CqView& cq_view, uint32_t* ci) {
  const mlx5dv_cq& cq = cq_view.dv;
  const auto deadline = Clock::now() + kDeadline;
  while (Clock::now() < deadline) {
    const size_t slot = size_t{*ci & (cq.cqe_cnt - 1)} * cq.cqe_size;
    auto* cqe = at<mlx5_cqe64>(cq.buf, slot + (cq.cqe_size == 128 ? 64 : 0));
    const uint8_t op_own = __atomic_load_n(&cqe->op_own, __ATOMIC_ACQUIRE);
    const bool sw_owner = (op_own & 1) == ((*ci & cq.cqe_cnt) ? 1 : 0);
    if ((op_own >> 4) != MLX5_CQE_INVALID && sw_owner) {
      Completion c;
      c.opcode = op_own >> 4;
      c.byte_cnt = be32toh(cqe->byte_cnt);
      if (c.opcode == MLX5_CQE_REQ_ERR || c.opcode == MLX5_CQE_RESP_ERR) {
        c.syndrome = at<mlx5_err_cqe>(cqe, 0)->syndrome;
      }
      ++*ci;
      cq.dbrec[0] = htobe32(*ci & 0xffffff);  // consumer index word
      return c;
    }
  }
  return {};
}

bool wait_async(mlx5::Mlx5Device& device, AsyncEventType type, uint32_t qpn) {
  const auto deadline = Clock::now() + kDeadline;
  while (Clock::now() < deadline) {
    AsyncEvent event{AsyncEventType::device_fatal};
    while (device.next_async_event(&event)) {
      if (event.type == type && event.qpn == qpn) return true;
    }
    pollfd pfd{device.async_fd(), POLLIN, 0};
    poll(&pfd, 1, 100);
  }
  return false;
}

}  // namespace

TEST_CASE("a loopback pair walks RESET->INIT->RTR->RTS and the device agrees", "[loopback]") {
  Loopback lb;
  for (Endpoint* e : {&lb.a, &lb.b}) {
    Qp& qp = *e->qp;
    Qp& peer = *(e == &lb.a ? lb.b.qp : lb.a.qp);
    require_ok(lb.to_init(qp));
    CHECK(qp.state() == QpState::init);
    require_ok(lb.to_rtr(qp, peer));
    CHECK(qp.state() == QpState::rtr);
    require_ok(lb.to_rts(qp));
    CHECK(qp.state() == QpState::rts);
  }
  QpAttr err;
  err.state = QpState::err;
  require_ok(lb.a.qp->modify(err, qp_attr::state));
  CHECK(lb.a.qp->state() == QpState::err);
  QpAttr reset;
  reset.state = QpState::reset;
  require_ok(lb.a.qp->modify(reset, qp_attr::state));
  CHECK(lb.a.qp->state() == QpState::reset);
  CHECK(lb.a.qp->view().dv.dbrec[MLX5_SND_DBR] == 0);
  // Back to RTS after the reset.
  require_ok(lb.to_init(*lb.a.qp));
  require_ok(lb.to_rtr(*lb.a.qp, *lb.b.qp));
  require_ok(lb.to_rts(*lb.a.qp));
  CHECK(lb.a.qp->state() == QpState::rts);
}

TEST_CASE("modify errors name the QP, the transition and the reason", "[loopback]") {
  Loopback lb;
  Qp& qp = *lb.a.qp;
  char prefix[64];
  std::snprintf(prefix, sizeof prefix, "qp 0x%x: modify ", qp.view().qpn);

  QpAttr rts;
  rts.state = QpState::rts;
  Status skipped = qp.modify(rts, qp_attr::state);
  CHECK(skipped.code() == Errc::bad_state);
  CHECK(skipped.message() ==
        std::string(prefix) + "RESET->RTS: not a valid transition for an RC QP (IBA 10.3.1)");

  require_ok(lb.to_init(qp));
  require_ok(lb.to_rtr(qp, *lb.b.qp));
  Status missing = qp.modify(rts, qp_attr::state | qp_attr::timeout | qp_attr::retry_cnt |
                                      qp_attr::rnr_retry | qp_attr::max_rd_atomic);
  CHECK(missing.code() == Errc::invalid_argument);
  CHECK(missing.message() == std::string(prefix) + "RTR->RTS: sq_psn not set");
  CHECK(qp.state() == QpState::rtr);  // a refused modify changes nothing
}

TEST_CASE("a SEND written into the views reaches the peer and raises COMM_EST on its RTR QP",
          "[loopback]") {
  Loopback lb;
  std::vector<uint8_t> send_buf(64), recv_buf(64, 0);
  for (size_t i = 0; i < send_buf.size(); ++i) send_buf[i] = static_cast<uint8_t>(0xa0 + i);
  auto send_mr = lb.device->reg_mr(*lb.pd, send_buf.data(), send_buf.size(), 0);
  auto recv_mr = lb.device->reg_mr(*lb.pd, recv_buf.data(), recv_buf.size(), access::local_write);
  REQUIRE(send_mr.is_ok());
  REQUIRE(recv_mr.is_ok());

  // B receives and stays in RTR; A sends from RTS.
  require_ok(lb.to_init(*lb.b.qp));
  post_recv(lb.b.qp->view(), **recv_mr, recv_buf.data(), static_cast<uint32_t>(recv_buf.size()));
  require_ok(lb.to_rtr(*lb.b.qp, *lb.a.qp));
  require_ok(lb.to_init(*lb.a.qp));
  require_ok(lb.to_rtr(*lb.a.qp, *lb.b.qp));
  require_ok(lb.to_rts(*lb.a.qp));

  // The port's counters, from sysfs (through the uverbs shim, the simulated HCA's own).
  auto counter = [&](const char* name) {
    Result<uint64_t> v = lb.device->read_port_counter(1, name);
    INFO(name << ": " << (v ? "" : v.status().message()));
    REQUIRE(v);
    return v.value();
  };
  const uint64_t xmit_packets = counter("counters/port_xmit_packets");
  const uint64_t rcv_data = counter("counters/port_rcv_data");

  post_send(lb.a.qp->view(), **send_mr, send_buf.data(), static_cast<uint32_t>(send_buf.size()));

  uint32_t ci_a = 0, ci_b = 0;
  const Completion sent = wait_cqe(lb.a.cq->view(), &ci_a);
  INFO("send CQE opcode " << int{sent.opcode} << " syndrome " << int{sent.syndrome});
  CHECK(sent.opcode == MLX5_CQE_REQ);
  const Completion received = wait_cqe(lb.b.cq->view(), &ci_b);
  INFO("receive CQE opcode " << int{received.opcode} << " syndrome " << int{received.syndrome});
  CHECK(received.opcode == MLX5_CQE_RESP_SEND);
  CHECK(received.byte_cnt == send_buf.size());
  CHECK(recv_buf == send_buf);
  CHECK(counter("counters/port_xmit_packets") > xmit_packets);
  CHECK(counter("counters/port_rcv_data") >= rcv_data + send_buf.size() / 4);
  Result<uint64_t> none = lb.device->read_port_counter(1, "counters/no_such_counter");
  REQUIRE_FALSE(none);
  CHECK(none.status().code() == Errc::invalid_argument);

  CHECK(wait_async(*lb.device, AsyncEventType::comm_est, lb.b.qp->view().qpn));
  CHECK(lb.b.qp->state() ==
        QpState::rtr);  // COMM_EST does not move the QP (IBA 11.6.3: COMM_EST is an event only)
}

TEST_CASE("a UC pair (libmlx5's IBV_QPT_UC) comes up without the reliability attributes, "
          "refuses them, and carries a SEND written into the views",
          "[loopback][uc]") {
  Loopback lb;
  auto uc_endpoint = [&] {
    Endpoint e;
    auto cq = lb.device->create_cq(64);
    REQUIRE(cq.is_ok());
    e.cq = std::move(*cq);
    QpCaps caps;
    caps.max_send_wr = 16;
    caps.max_recv_wr = 16;
    auto qp = lb.device->create_uc_qp(*lb.pd, *e.cq, *e.cq, nullptr, caps);
    INFO(qp.status().message());
    REQUIRE(qp.is_ok());
    e.qp = std::move(*qp);
    return e;
  };
  Endpoint a = uc_endpoint(), b = uc_endpoint();
  std::vector<uint8_t> send_buf(3000), recv_buf(3000, 0);
  for (size_t i = 0; i < send_buf.size(); ++i) send_buf[i] = static_cast<uint8_t>(i * 13);
  auto send_mr = lb.device->reg_mr(*lb.pd, send_buf.data(), send_buf.size(), 0);
  auto recv_mr = lb.device->reg_mr(*lb.pd, recv_buf.data(), recv_buf.size(), access::local_write);
  REQUIRE(send_mr.is_ok());
  REQUIRE(recv_mr.is_ok());

  char prefix[64];
  std::snprintf(prefix, sizeof prefix, "qp 0x%x: modify ", a.qp->view().qpn);
  for (Endpoint* e : {&a, &b}) {
    Qp& qp = *e->qp;
    const Qp& peer = *(e == &a ? b.qp : a.qp);
    QpAttr init;
    init.state = QpState::init;
    init.port_num = 1;
    init.access_flags = access::remote_write;
    require_ok(qp.modify(init, qp_attr::state | qp_attr::port | qp_attr::access_flags));
    if (e == &b) post_recv(qp.view(), **recv_mr, recv_buf.data(), 3000);
    QpAttr rtr;
    rtr.state = QpState::rtr;
    rtr.path_mtu = Mtu::mtu1024;
    rtr.dest_qpn = peer.view().qpn;
    rtr.rq_psn = 0x100;
    rtr.min_rnr_timer = 12;
    rtr.remote_gid = lb.device->info().gid;
    const uint32_t uc_rtr =
        qp_attr::state | qp_attr::av | qp_attr::path_mtu | qp_attr::dest_qpn | qp_attr::rq_psn;
    if (e == &a) {
      Status rnr = qp.modify(rtr, uc_rtr | qp_attr::min_rnr_timer);
      CHECK(rnr.code() == Errc::invalid_argument);
      CHECK(rnr.message() ==
            std::string(prefix) + "INIT->RTR: min_rnr_timer not accepted by this transition");
    }
    require_ok(qp.modify(rtr, uc_rtr));
    QpAttr rts;
    rts.state = QpState::rts;
    rts.sq_psn = 0x100;
    require_ok(qp.modify(rts, qp_attr::state | qp_attr::sq_psn));
    CHECK(qp.state() == QpState::rts);
  }

  post_send(a.qp->view(), **send_mr, send_buf.data(), 3000);
  uint32_t ci_a = 0, ci_b = 0;
  const Completion sent = wait_cqe(a.cq->view(), &ci_a);
  INFO("send CQE opcode " << int{sent.opcode} << " syndrome " << int{sent.syndrome});
  CHECK(sent.opcode == MLX5_CQE_REQ);
  const Completion received = wait_cqe(b.cq->view(), &ci_b);
  INFO("receive CQE opcode " << int{received.opcode} << " syndrome " << int{received.syndrome});
  CHECK(received.opcode == MLX5_CQE_RESP_SEND);
  CHECK(received.byte_cnt == 3000);
  CHECK(recv_buf == send_buf);
}

namespace {

// What a COMM_EST notifier saw.
struct Notified {
  std::atomic<int> calls{0};
  std::atomic<bool> off_main{false};
  std::thread::id main = std::this_thread::get_id();
  static void fn(void* ctx) {
    auto* n = static_cast<Notified*>(ctx);
    n->off_main = std::this_thread::get_id() != n->main;
    ++n->calls;
  }
};

size_t event_threads() {
  return rnicdv::test::threads_named(mlx5::EventThread::kThreadName);
}

bool notified_once(const Notified& n) {
  const auto deadline = Clock::now() + kDeadline;
  while (n.calls == 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return n.calls == 1;
}

}  // namespace

TEST_CASE("the event thread calls COMM_EST notifiers and queues every async event once, in order",
          "[loopback]") {
  Loopback lb;
  Endpoint c = lb.endpoint(), d = lb.endpoint();
  std::vector<uint8_t> send_buf(64, 0x5a), recv_buf(128, 0);
  auto send_mr = lb.device->reg_mr(*lb.pd, send_buf.data(), send_buf.size(), 0);
  auto recv_mr = lb.device->reg_mr(*lb.pd, recv_buf.data(), recv_buf.size(), access::local_write);
  REQUIRE(send_mr.is_ok());
  REQUIRE(recv_mr.is_ok());
  // B and D receive and stay in RTR; A sends to B, C to D.
  for (auto [from, to, half] : {std::tuple{&lb.a, &lb.b, 0}, std::tuple{&c, &d, 64}}) {
    require_ok(lb.to_init(*to->qp));
    post_recv(to->qp->view(), **recv_mr, recv_buf.data() + half, 64);
    require_ok(lb.to_rtr(*to->qp, *from->qp));
    require_ok(lb.to_init(*from->qp));
    require_ok(lb.to_rtr(*from->qp, *to->qp));
    require_ok(lb.to_rts(*from->qp));
  }
  Notified nb, nd;
  CHECK(event_threads() == 0);
  REQUIRE(lb.b.qp->set_comm_est_notifier(&Notified::fn, &nb));
  REQUIRE(d.qp->set_comm_est_notifier(&Notified::fn, &nd));
  CHECK(event_threads() == 1);

  // The application reads no async event: the thread learns each COMM_EST and calls out.
  post_send(lb.a.qp->view(), **send_mr, send_buf.data(), 64);
  CHECK(notified_once(nb));
  post_send(c.qp->view(), **send_mr, send_buf.data(), 64);
  CHECK(notified_once(nd));
  CHECK(nb.off_main);
  CHECK(nd.off_main);
  CHECK(nb.calls == 1);

  // Both events wait for the application, in the order they were raised.
  pollfd pfd{lb.device->async_fd(), POLLIN, 0};
  CHECK(poll(&pfd, 1, 0) == 1);
  std::vector<uint32_t> comm_est;
  AsyncEvent event{AsyncEventType::device_fatal};
  while (lb.device->next_async_event(&event))
    if (event.type == AsyncEventType::comm_est) comm_est.push_back(event.qpn);
  CHECK(comm_est == std::vector<uint32_t>{lb.b.qp->view().qpn, d.qp->view().qpn});
  CHECK(poll(&pfd, 1, 0) == 0);
  CHECK(lb.b.qp->state() == QpState::rtr);  // a notifier is told; nothing moves the QP

  // Without notifiers the application reads the async fd itself again.
  REQUIRE(lb.b.qp->set_comm_est_notifier(nullptr, nullptr));
  CHECK(event_threads() == 1);
  REQUIRE(d.qp->set_comm_est_notifier(nullptr, nullptr));
  // Joined; the kernel may list the task a moment after pthread_join returned.
  const auto deadline = Clock::now() + kDeadline;
  while (event_threads() != 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(event_threads() == 0);
  CHECK_FALSE(lb.device->next_async_event(&event));
}
