// SPDX-License-Identifier: BSD-3-Clause
// Early posting on a device through librdmacm (hw-qualify.h): a loopback connection on the
// device's IPv4 RoCE address; the passive QP (in place or shadow) posts kEarly SENDs right
// after accept, in RTR. Established by the RTU: the active side is rnicdv's own connection.
// Established by COMM_EST: the active side is a plain librdmacm client that sends its first
// message before it sends the RTU (rdma_establish), so only COMM_EST, raised by the device
// when that message reaches the passive QP in RTR, can release the batch. Each case checks
// that the batch ran once, in posting order, with every completion successful.
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <string>

#include "hw-qualify.h"
#include "rnicdv/connection.h"
#include "rnicdv/rnicdv.h"

namespace rnicdv::hwq {

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kEarly = 4;
constexpr uint32_t kMsg = 64;

// A failed check: the case stops and reports this.
struct Failure {
  std::string what;
};

void expect(bool ok, const std::string& what) {
  if (!ok) throw Failure{what};
}

template <class T>
T take(Result<T> r, const char* what) {
  if (!r) throw Failure{std::string(what) + ": " + r.status().message()};
  return std::move(r).value();
}

struct Rig {
  std::optional<Device> dev;
  std::optional<ProtectionDomain> pd;
  std::optional<CompletionQueue> cqa, cqb;
  std::vector<uint8_t> mem = std::vector<uint8_t>(32 * kMsg, 0);
  std::optional<MemoryRegion> mr;
  std::string ip;

  void open(const std::string& name) {
    dev.emplace(take(Device::open(name), "open"));
    expect(dev->hw().connection_manager() != nullptr, name + " has no connection manager");
    const hw::IpAddress own = dev->info().gid.ip();
    expect(!own.is_unspecified() && !own.is_link_local(),
           name + " port 1's GID names no routable address (librdmacm needs one)");
    ip = own.to_string();
    pd.emplace(take(dev->alloc_pd(), "alloc_pd"));
    cqa.emplace(take(dev->create_cq(64), "create_cq"));
    cqb.emplace(take(dev->create_cq(64), "create_cq"));
    mr.emplace(take(pd->reg_mr(mem.data(), mem.size(), hw::access::local_write), "reg_mr"));
  }

  Errc post_recv(QueuePair& q, uint64_t wr_id, uint32_t slot) {
    Sge s = mr->sge(slot * kMsg, kMsg);
    return q.post_recv(RecvWr{wr_id, &s, 1});
  }
  Errc post_send(QueuePair& q, uint64_t wr_id, uint32_t slot, uint8_t fill) {
    std::memset(&mem[slot * kMsg], fill, kMsg);
    Sge s = mr->sge(slot * kMsg, kMsg);
    SendWr wr;
    wr.wr_id = wr_id;
    wr.flags = send_flags::signaled;
    wr.sg_list = &s;
    wr.num_sge = 1;
    return q.post_send(wr);
  }
  // Polls `cq` until `n` completions or `limit`; every one must succeed. Counts per wr_id.
  std::map<uint64_t, int> completions(CompletionQueue& cq, size_t n,
                                      std::chrono::milliseconds limit = 10s) {
    std::map<uint64_t, int> seen;
    size_t got = 0;
    const auto end = Clock::now() + limit;
    while (got < n && Clock::now() < end) {
      Completion wc[8];
      const int k = cq.poll(wc, 8);
      for (int i = 0; i < k; ++i) {
        expect(wc[i].status == IBV_WC_SUCCESS,
               "completion of wr_id " + std::to_string(wc[i].wr_id) + " failed: status " +
                   std::to_string(wc[i].status));
        ++seen[wc[i].wr_id];
      }
      got += static_cast<size_t>(k);
    }
    return seen;
  }
};

// The listener's CM port: distinct per process, so that two runs on one host do not meet.
uint16_t base_port() {
  return static_cast<uint16_t>(20000 + (static_cast<unsigned>(getpid()) * 7) % 20000);
}

// A plain librdmacm active side (no rnicdv): its own context, PD, CQ and QP on the device.
class RawActive {
 public:
  ~RawActive() {
    if (qp_) ibv_destroy_qp(qp_);
    if (mr_) ibv_dereg_mr(mr_);
    if (cq_) ibv_destroy_cq(cq_);
    if (pd_) ibv_dealloc_pd(pd_);
    if (id_) rdma_destroy_id(id_);
    if (ch_) rdma_destroy_event_channel(ch_);
  }

  // Resolves the address and route, creates the QP in INIT with kEarly receives, sends a REQ.
  void connect(const std::string& ip, uint16_t port) {
    ch_ = rdma_create_event_channel();
    expect(ch_ != nullptr, std::string("rdma_create_event_channel: ") + std::strerror(errno));
    expect(fcntl(ch_->fd, F_SETFL, fcntl(ch_->fd, F_GETFL) | O_NONBLOCK) == 0, "fcntl");
    expect(rdma_create_id(ch_, &id_, nullptr, RDMA_PS_TCP) == 0,
           std::string("rdma_create_id: ") + std::strerror(errno));
    Result<hw::IpAddress> parsed = hw::IpAddress::parse(ip);
    expect(parsed.is_ok(), "bad address " + ip);
    hw::SocketAddress dst = hw::to_socket_address(parsed.value(), port);
    expect(rdma_resolve_addr(id_, nullptr, dst.get(), 2000) == 0,
           std::string("rdma_resolve_addr: ") + std::strerror(errno));
    wait(RDMA_CM_EVENT_ADDR_RESOLVED);
    expect(rdma_resolve_route(id_, 2000) == 0,
           std::string("rdma_resolve_route: ") + std::strerror(errno));
    wait(RDMA_CM_EVENT_ROUTE_RESOLVED);

    pd_ = ibv_alloc_pd(id_->verbs);
    expect(pd_ != nullptr, "ibv_alloc_pd");
    cq_ = ibv_create_cq(id_->verbs, 64, nullptr, nullptr, 0);
    expect(cq_ != nullptr, "ibv_create_cq");
    const int access = IBV_ACCESS_LOCAL_WRITE;  // an int: ibv_reg_mr mixes it with another enum
    mr_ = ibv_reg_mr(pd_, buf_.data(), buf_.size(), access);
    expect(mr_ != nullptr, "ibv_reg_mr");
    ibv_qp_init_attr ia{};
    ia.send_cq = cq_;
    ia.recv_cq = cq_;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 16;
    ia.cap.max_recv_wr = 16;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    qp_ = ibv_create_qp(pd_, &ia);
    expect(qp_ != nullptr, std::string("ibv_create_qp: ") + std::strerror(errno));
    move(IBV_QPS_INIT);
    for (uint32_t i = 0; i < kEarly; ++i) {
      ibv_sge sge{reinterpret_cast<uintptr_t>(&buf_[i * kMsg]), kMsg, mr_->lkey};
      ibv_recv_wr wr{};
      wr.wr_id = 100 + i;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      ibv_recv_wr* bad = nullptr;
      expect(ibv_post_recv(qp_, &wr, &bad) == 0, "ibv_post_recv");
    }
    rdma_conn_param param{};
    param.qp_num = qp_->qp_num;
    param.responder_resources = 1;
    param.initiator_depth = 1;
    param.retry_count = 7;
    param.rnr_retry_count = 7;
    expect(rdma_connect(id_, &param) == 0, std::string("rdma_connect: ") + std::strerror(errno));
  }

  // The REP: RTR and RTS, and a SEND to the passive QP, with no RTU sent.
  void on_rep_send_first() {
    wait(RDMA_CM_EVENT_CONNECT_RESPONSE);
    move(IBV_QPS_RTR);
    move(IBV_QPS_RTS);
    std::memset(&buf_[20 * kMsg], 0x77, kMsg);
    ibv_sge sge{reinterpret_cast<uintptr_t>(&buf_[20 * kMsg]), kMsg, mr_->lkey};
    ibv_send_wr wr{};
    wr.wr_id = 300;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    expect(ibv_post_send(qp_, &wr, &bad) == 0, "ibv_post_send");
  }

  // Completions of the raw QP: wr_id -> count, until `n` or 10 s.
  std::map<uint64_t, int> completions(size_t n) {
    std::map<uint64_t, int> seen;
    size_t got = 0;
    const auto end = Clock::now() + 10s;
    while (got < n && Clock::now() < end) {
      ibv_wc wc[8];
      const int k = ibv_poll_cq(cq_, 8, wc);
      expect(k >= 0, "ibv_poll_cq");
      for (int i = 0; i < k; ++i) {
        expect(wc[i].status == IBV_WC_SUCCESS,
               std::string("active side: ") + ibv_wc_status_str(wc[i].status));
        ++seen[wc[i].wr_id];
      }
      got += static_cast<size_t>(k);
    }
    return seen;
  }
  const uint8_t* slot(uint32_t i) const { return &buf_[i * kMsg]; }

  void establish_and_disconnect() {
    expect(rdma_establish(id_) == 0, std::string("rdma_establish: ") + std::strerror(errno));
    rdma_disconnect(id_);
  }

 private:
  void move(ibv_qp_state state) {
    ibv_qp_attr attr{};
    int mask = 0;
    attr.qp_state = state;
    expect(rdma_init_qp_attr(id_, &attr, &mask) == 0,
           std::string("rdma_init_qp_attr: ") + std::strerror(errno));
    if (state == IBV_QPS_INIT) attr.qp_access_flags |= IBV_ACCESS_LOCAL_WRITE;
    expect(ibv_modify_qp(qp_, &attr, mask) == 0,
           std::string("ibv_modify_qp: ") + std::strerror(errno));
  }
  void wait(rdma_cm_event_type want) {
    const auto end = Clock::now() + 10s;
    for (;;) {
      rdma_cm_event* ev = nullptr;
      if (rdma_get_cm_event(ch_, &ev) == 0) {
        const rdma_cm_event_type got = ev->event;
        const int status = ev->status;
        rdma_ack_cm_event(ev);
        expect(got == want, std::string("active side: expected ") + rdma_event_str(want) +
                                ", got " + rdma_event_str(got) + " (status " +
                                std::to_string(status) + ")");
        return;
      }
      expect(errno == EAGAIN, std::string("rdma_get_cm_event: ") + std::strerror(errno));
      expect(Clock::now() < end, std::string("active side: no ") + rdma_event_str(want));
      pollfd pfd{ch_->fd, POLLIN, 0};
      poll(&pfd, 1, 50);
    }
  }

  rdma_event_channel* ch_ = nullptr;
  rdma_cm_id* id_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_mr* mr_ = nullptr;
  ibv_qp* qp_ = nullptr;
  std::vector<uint8_t> buf_ = std::vector<uint8_t>(32 * kMsg, 0);
};

// The passive side's half: accept on `qb`, post kEarly SENDs (slots 8..) in RTR.
Connection accept_and_post_early(Rig& r, Listener& l, QueuePair& qb) {
  auto req = l.wait_event(10s);
  expect(req && req->type == ConnectionEventType::connect_request && req->request,
         "no CONNECT_REQUEST at the listener");
  Connection c = take(req->request->accept(qb), "accept");
  expect(qb.state() == hw::QpState::rtr, "the passive QP is not in RTR after accept");
  for (uint32_t i = 0; i < kEarly; ++i)
    expect(r.post_send(qb, i, 8 + i, static_cast<uint8_t>(0x40 + i)) == Errc::ok,
           "post_send in RTR refused");
  expect(qb.withheld() == kEarly, "the sends posted in RTR are not withheld");
  return c;
}

void check_sent_once(const std::map<uint64_t, int>& sent) {
  for (uint32_t i = 0; i < kEarly; ++i) {
    auto it = sent.find(i);
    expect(it != sent.end() && it->second == 1,
           "early send " + std::to_string(i) + " completed " +
               std::to_string(it == sent.end() ? 0 : it->second) + " times");
  }
}

std::string by_rtu(Rig& r, EarlyPost mode, uint16_t port) {
  QpConfig passive_cfg;
  passive_cfg.early_post = mode;
  QueuePair qa = take(r.dev->create_qp(*r.pd, *r.cqa, *r.cqa, QpConfig{}), "create_qp");
  QueuePair qb = take(r.dev->create_qp(*r.pd, *r.cqb, *r.cqb, passive_cfg), "create_qp");
  std::memset(r.mem.data(), 0, r.mem.size());
  Listener l = take(Listener::listen(*r.dev, r.ip, port), "listen");
  Connection ca = take(Connection::connect(qa, r.ip, port), "connect");
  for (uint32_t i = 0; i < kEarly; ++i)
    expect(r.post_recv(qa, 100 + i, i) == Errc::ok, "post_recv");
  Connection cb = accept_and_post_early(r, l, qb);
  auto ea = ca.wait_event(10s);
  expect(ea && ea->type == ConnectionEventType::established, "the active side not established");
  auto eb = cb.wait_event(10s);
  expect(eb && eb->type == ConnectionEventType::established,
         "the passive side not established");
  expect(qb.state() == hw::QpState::rts, "the passive QP is not in RTS after ESTABLISHED");
  const auto sent = r.completions(*r.cqb, kEarly);
  const auto received = r.completions(*r.cqa, kEarly);
  check_sent_once(sent);
  for (uint32_t i = 0; i < kEarly; ++i) {
    expect(received.count(100 + i) && received.at(100 + i) == 1,
           "receive " + std::to_string(i) + " did not complete once");
    expect(r.mem[i * kMsg] == 0x40 + i, "early send " + std::to_string(i) + " out of order");
  }
  expect(qb.withheld() == 0, "work still withheld after ESTABLISHED");
  expect(!cb.poll_event(), "a second event after ESTABLISHED");
  expect(ca.disconnect().is_ok(), "disconnect");
  auto da = ca.wait_event(10s);
  expect(da && da->type == ConnectionEventType::disconnected, "no DISCONNECTED");
  return "RTU released " + std::to_string(kEarly) + " early sends once, in order";
}

std::string by_comm_est(Rig& r, EarlyPost mode, uint16_t port) {
  QpConfig passive_cfg;
  passive_cfg.early_post = mode;
  QueuePair qb = take(r.dev->create_qp(*r.pd, *r.cqb, *r.cqb, passive_cfg), "create_qp");
  std::memset(r.mem.data(), 0, r.mem.size());
  Listener l = take(Listener::listen(*r.dev, r.ip, port), "listen");
  RawActive a;
  a.connect(r.ip, port);
  Connection cb = accept_and_post_early(r, l, qb);
  expect(r.post_recv(qb, 200, 20) == Errc::ok, "post_recv in RTR");
  a.on_rep_send_first();
  // No RTU has been sent: only COMM_EST can move the passive QP and release its batch.
  const auto active = a.completions(kEarly + 1);
  expect(active.count(300) && active.at(300) == 1, "the active side's SEND did not complete");
  for (uint32_t i = 0; i < kEarly; ++i) {
    expect(active.count(100 + i) && active.at(100 + i) == 1,
           "early send " + std::to_string(i) + " did not arrive before the RTU");
    expect(a.slot(i)[0] == 0x40 + i, "early send " + std::to_string(i) + " out of order");
  }
  const auto passive = r.completions(*r.cqb, kEarly + 1);
  check_sent_once(passive);
  expect(passive.count(200) && passive.at(200) == 1, "the passive receive did not complete");
  expect(r.mem[20 * kMsg] == 0x77, "the active side's message was not placed");
  bool comm_est = false;
  hw::AsyncEvent ev{hw::AsyncEventType::device_fatal};
  const auto end = Clock::now() + 5s;
  while (!comm_est && Clock::now() < end) {
    while (r.dev->hw().next_async_event(&ev))
      comm_est = comm_est || (ev.type == hw::AsyncEventType::comm_est && ev.qpn == qb.qpn());
    if (!comm_est) {
      pollfd pfd{r.dev->async_fd(), POLLIN, 0};
      poll(&pfd, 1, 50);
    }
  }
  expect(comm_est, "the device raised no COMM_EST for the passive QP");
  auto eb = cb.wait_event(10s);
  expect(eb && eb->type == ConnectionEventType::established, "the passive side not established");
  expect(qb.state() == hw::QpState::rts, "the passive QP is not in RTS");
  a.establish_and_disconnect();
  return "COMM_EST (no RTU sent) released " + std::to_string(kEarly) +
         " early sends once, in order";
}

}  // namespace

std::vector<CaseResult> run_early_post(const std::string& device) {
  std::vector<CaseResult> out;
  Rig r;
  const auto t0 = Clock::now();
  try {
    r.open(device);
  } catch (const Failure& f) {
    out.push_back({"early_post open " + device, false,
                   std::chrono::duration<double>(Clock::now() - t0).count(), f.what});
    return out;
  }
  uint16_t port = base_port();
  for (EarlyPost mode : {EarlyPost::in_place, EarlyPost::shadow}) {
    for (bool rtu : {true, false}) {
      CaseResult c;
      c.name = std::string("early_post ") + early_post_name(mode) + (rtu ? " RTU" : " COMM_EST");
      const auto start = Clock::now();
      try {
        c.detail = rtu ? by_rtu(r, mode, port) : by_comm_est(r, mode, port);
        c.passed = true;
      } catch (const Failure& f) {
        c.detail = f.what;
      }
      ++port;
      c.seconds = std::chrono::duration<double>(Clock::now() - start).count();
      out.push_back(std::move(c));
    }
  }
  return out;
}

}  // namespace rnicdv::hwq
