// SPDX-License-Identifier: BSD-3-Clause
// What the verbs programs of this directory share: devices opened by name, registered
// buffers, RC endpoints taken through INIT/RTR/RTS as perftest does, and stderr capture. They
// use libibverbs only (the uverbs shim is preloaded).
#pragma once

#include <catch2/catch.hpp>

#include <infiniband/verbs.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace verbs_test {

constexpr uint8_t kGidIndex = 3;  // ::ffff:a.b.c.d, RoCE v2

struct Device {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  explicit Device(const char* name) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    REQUIRE(list);
    for (int i = 0; i < n; ++i)
      if (std::string(ibv_get_device_name(list[i])) == name) ctx = ibv_open_device(list[i]);
    ibv_free_device_list(list);
    REQUIRE(ctx);
    pd = ibv_alloc_pd(ctx);
    REQUIRE(pd);
  }
  ~Device() {
    CHECK(ibv_dealloc_pd(pd) == 0);
    CHECK(ibv_close_device(ctx) == 0);
  }
};

struct Buffer {
  std::vector<uint8_t> bytes;
  ibv_mr* mr = nullptr;
  Buffer(ibv_pd* pd, size_t n, int access) : bytes(n, 0) {
    mr = ibv_reg_mr(pd, bytes.data(), n, access);
    REQUIRE(mr);
  }
  ~Buffer() { CHECK(ibv_dereg_mr(mr) == 0); }
  uint64_t addr(size_t off = 0) const { return reinterpret_cast<uintptr_t>(bytes.data()) + off; }
};

// QP attributes with `depth` WRs and `sge` SGEs each way.
inline ibv_qp_init_attr qp_init(ibv_cq* send_cq, ibv_cq* recv_cq, ibv_qp_type type, uint32_t depth,
                         uint32_t sge) {
  ibv_qp_init_attr init{};
  init.send_cq = send_cq;
  init.recv_cq = recv_cq;
  init.qp_type = type;
  init.cap.max_send_wr = depth;
  init.cap.max_recv_wr = depth;
  init.cap.max_send_sge = sge;
  init.cap.max_recv_sge = sge;
  return init;
}

// A receive of `len` bytes at `off` of `b` (its one SGE in `sge`), for ibv_post_recv and
// ibv_post_srq_recv.
inline ibv_recv_wr* one_recv(ibv_sge& sge, ibv_recv_wr& wr, const Buffer& b, size_t off,
                             uint32_t len, uint64_t wr_id) {
  sge = ibv_sge{b.addr(off), len, b.mr->lkey};
  wr = ibv_recv_wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  return &wr;
}

// Posts one receive of `len` bytes at `off` of `b` to `qp`.
inline void post_one_recv(ibv_qp* qp, const Buffer& b, size_t off, uint32_t len, uint64_t wr_id) {
  ibv_sge sge;
  ibv_recv_wr wr;
  ibv_recv_wr* bad = nullptr;
  REQUIRE(ibv_post_recv(qp, one_recv(sge, wr, b, off, len, wr_id), &bad) == 0);
}

// Busy-polls `cq` for one completion (the simulated device runs on its own thread).
inline ibv_wc wait_one(ibv_cq* cq) {
  ibv_wc wc{};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    const int n = ibv_poll_cq(cq, 1, &wc);
    REQUIRE(n >= 0);
    if (n == 1) return wc;
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::yield();
  }
}

constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

// The RoCE v2 GID of port 1 (::ffff:a.b.c.d).
inline ibv_gid port_gid(ibv_context* ctx) {
  ibv_gid g{};
  REQUIRE(ibv_query_gid(ctx, 1, kGidIndex, &g) == 0);
  return g;
}

// An RC QP from RESET through INIT (on `port`) to RTR towards the peer QP `peer_qpn` at
// `peer_gid`, as perftest's mask sets do.
inline void rc_to_rtr(ibv_qp* qp, uint32_t peer_qpn, const ibv_gid& peer_gid, uint8_t port = 1) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = port;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  REQUIRE(ibv_modify_qp(qp, &a,
                        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer_qpn;
  a.rq_psn = 100;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = peer_gid;
  a.ah_attr.grh.sgid_index = kGidIndex;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = port;
  REQUIRE(ibv_modify_qp(qp, &a,
                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                            IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0);
}

// RTR -> RTS.
inline void rc_to_rts(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 100;
  a.max_rd_atomic = 4;
  REQUIRE(ibv_modify_qp(qp, &a,
                        IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                            IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0);
}

struct Endpoint {
  Device& dev;
  ibv_comp_channel* channel = nullptr;
  ibv_cq* cq = nullptr;       // send completions, and receive ones unless split
  ibv_cq* recv_cq = nullptr;  // split: a CQ of its own for receives (same channel)
  ibv_cq_ex* cq_ex = nullptr;  // `cq` as created by ibv_create_cq_ex (extended endpoints)
  ibv_qp* qp = nullptr;
  // With `srq`, the QP takes its receives from that shared receive queue. With `extended`,
  // the CQ comes from ibv_create_cq_ex (byte counts) and the QP from ibv_create_qp_ex with
  // the ibv_wr_* send operations.
  Endpoint(Device& d, bool with_channel = false, bool split_cqs = false, ibv_srq* srq = nullptr,
           bool extended = false)
      : dev(d) {
    if (with_channel) {
      channel = ibv_create_comp_channel(d.ctx);
      REQUIRE(channel);
    }
    if (extended) {
      ibv_cq_init_attr_ex ca{};
      ca.cqe = 64;
      ca.cq_context = this;
      ca.channel = channel;
      ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN;
      cq_ex = ibv_create_cq_ex(d.ctx, &ca);
      REQUIRE(cq_ex);
      cq = ibv_cq_ex_to_cq(cq_ex);
    } else {
      cq = ibv_create_cq(d.ctx, 64, this, channel, 0);
    }
    REQUIRE(cq);
    recv_cq = split_cqs ? ibv_create_cq(d.ctx, 64, this, channel, 0) : cq;
    REQUIRE(recv_cq);
    ibv_qp_init_attr init = qp_init(cq, recv_cq, IBV_QPT_RC, 32, 2);
    init.cap.max_inline_data = 64;
    init.srq = srq;
    if (extended) {
      ibv_qp_init_attr_ex x{};
      x.qp_context = init.qp_context;
      x.send_cq = init.send_cq;
      x.recv_cq = init.recv_cq;
      x.srq = init.srq;
      x.cap = init.cap;
      x.qp_type = init.qp_type;
      x.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
      x.pd = d.pd;
      x.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                         IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                         IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
      qp = ibv_create_qp_ex(d.ctx, &x);
    } else {
      qp = ibv_create_qp(d.pd, &init);
    }
    REQUIRE(qp);
  }
  ~Endpoint() {
    CHECK(ibv_destroy_qp(qp) == 0);
    if (recv_cq != cq) CHECK(ibv_destroy_cq(recv_cq) == 0);
    CHECK(ibv_destroy_cq(cq) == 0);
    if (channel) CHECK(ibv_destroy_comp_channel(channel) == 0);
  }
  ibv_gid gid() const { return port_gid(dev.ctx); }
  // RESET -> INIT -> RTR (-> RTS), as perftest's mask sets do.
  void to_rtr(const Endpoint& peer) { rc_to_rtr(qp, peer.qp->qp_num, peer.gid()); }
  void to_rts() { rc_to_rts(qp); }
  void post(ibv_send_wr& wr) {
    ibv_send_wr* bad = nullptr;
    REQUIRE(ibv_post_send(qp, &wr, &bad) == 0);
  }
  void post_recv(const Buffer& b, size_t off, uint32_t len, uint64_t wr_id) {
    post_one_recv(qp, b, off, len, wr_id);
  }
  ibv_wc wait() { return wait_one(cq); }
};

struct Pair {
  Device da{"rnicsim0"}, db{"rnicsim1"};
  Endpoint a{da}, b{db};
  Pair() { connect(); }
  // Both QPs through RESET and connected again (after an error moved them to ERR).
  void restart() {
    for (Endpoint* e : {&a, &b}) {
      ibv_qp_attr r{};
      r.qp_state = IBV_QPS_RESET;
      REQUIRE(ibv_modify_qp(e->qp, &r, IBV_QP_STATE) == 0);
    }
    connect();
  }

 private:
  void connect() {
    a.to_rtr(b);
    b.to_rtr(a);
    a.to_rts();
    b.to_rts();
  }
};

inline ibv_send_wr make_wr(ibv_wr_opcode op, ibv_sge* sge, int n, uint64_t wr_id) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.sg_list = sge;
  wr.num_sge = n;
  wr.send_flags = IBV_SEND_SIGNALED;
  return wr;
}

inline void fill(std::vector<uint8_t>& v, uint8_t seed) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
}

// Runs `fn` with stderr sent to a file; returns what was written.
template <typename Fn>
std::string capture_stderr(Fn fn) {
  char path[] = "/tmp/verbs_rc_stderr.XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  fflush(stderr);
  const int saved = dup(2);
  dup2(fd, 2);
  fn();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  unlink(path);
  return ss.str();
}

}  // namespace verbs_test
