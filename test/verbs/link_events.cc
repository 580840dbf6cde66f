// SPDX-License-Identifier: BSD-3-Clause
// The fault specification's link events as an unmodified verbs program sees them (libibverbs
// and libmlx5 over the uverbs shim). Each case runs under its own RNICDV_SIM_FAULTS (meson.build):
//   [port]   port-down at=2s for=3s device=0
//   [fatal]  fatal at=1s device=0
//   [two_ports]  port-down at=1s for=1s device=0, with RNICDV_SIM_PORTS=2
#include <errno.h>
#include <poll.h>

#include "verbs_fixtures.h"

using namespace verbs_test;

namespace {

// The next asynchronous event of `ctx`, as a program waits for one: poll on the async fd,
// then ibv_get_async_event. Generous: the device raises it on its own clock.
ibv_async_event next_event(ibv_context* ctx) {
  pollfd pfd{ctx->async_fd, POLLIN, 0};
  REQUIRE(::poll(&pfd, 1, 30'000) == 1);
  ibv_async_event ev{};
  REQUIRE(ibv_get_async_event(ctx, &ev) == 0);
  ibv_ack_async_event(&ev);
  return ev;
}

ibv_port_attr port_of(ibv_context* ctx) {
  ibv_port_attr attr{};
  REQUIRE(ibv_query_port(ctx, 1, &attr) == 0);
  return attr;
}

}  // namespace

TEST_CASE("port-down for=: PORT_ERR, ibv_query_port reads DOWN, an RC SEND during the outage "
          "fails with RETRY_EXC_ERR, then PORT_ACTIVE, ACTIVE and traffic again",
          "[port]") {
  Pair p;  // rnicsim0 (device 0, the one that goes down) and rnicsim1
  CHECK(port_of(p.da.ctx).state == IBV_PORT_ACTIVE);

  const ibv_async_event down = next_event(p.da.ctx);
  CHECK(down.event_type == IBV_EVENT_PORT_ERR);
  CHECK(down.element.port_num == 1);
  const ibv_port_attr attr = port_of(p.da.ctx);
  CHECK(attr.state == IBV_PORT_DOWN);
  CHECK(attr.phys_state == 3);  // Disabled
  CHECK(port_of(p.db.ctx).state == IBV_PORT_ACTIVE);

  // The outage (3 s) is longer than the retry budget of timeout 14, retry_cnt 7 (~0.5 s).
  Buffer src(p.da.pd, 64, kAllAccess), dst(p.db.pd, 64, kAllAccess);
  p.b.post_recv(dst, 0, 64, 7);
  ibv_sge sge{src.addr(), 64, src.mr->lkey};
  ibv_send_wr wr = make_wr(IBV_WR_SEND, &sge, 1, 1);
  p.a.post(wr);
  const ibv_wc failed = p.a.wait();
  CHECK(failed.wr_id == 1);
  CHECK(failed.status == IBV_WC_RETRY_EXC_ERR);

  const ibv_async_event up = next_event(p.da.ctx);
  CHECK(up.event_type == IBV_EVENT_PORT_ACTIVE);
  CHECK(up.element.port_num == 1);
  CHECK(port_of(p.da.ctx).state == IBV_PORT_ACTIVE);

  // Traffic resumes on the port: the QPs, which the error took to ERR, connected again.
  p.restart();
  p.b.post_recv(dst, 0, 64, 8);
  src.bytes.assign(64, 0x5a);
  wr = make_wr(IBV_WR_SEND, &sge, 1, 2);
  p.a.post(wr);
  const ibv_wc sent = p.a.wait();
  CHECK(sent.wr_id == 2);
  CHECK(sent.status == IBV_WC_SUCCESS);
  ibv_wc received{};
  do {
    received = p.b.wait();
  } while (received.status == IBV_WC_WR_FLUSH_ERR);  // the receive the reset flushed
  CHECK(received.status == IBV_WC_SUCCESS);
  CHECK(received.wr_id == 8);
  CHECK(dst.bytes == src.bytes);
}

TEST_CASE("fatal: DEVICE_FATAL, then commands fail with EIO except destroys and queries of the "
          "device and port, which reads DOWN",
          "[fatal]") {
  Device d("rnicsim0");
  Endpoint e(d);
  Buffer b(d.pd, 4096, kAllAccess);

  const ibv_async_event ev = next_event(d.ctx);
  CHECK(ev.event_type == IBV_EVENT_DEVICE_FATAL);

  errno = 0;
  CHECK(ibv_alloc_pd(d.ctx) == nullptr);
  CHECK(errno == EIO);
  std::vector<uint8_t> more(4096);
  const int access = IBV_ACCESS_LOCAL_WRITE;
  errno = 0;
  CHECK(ibv_reg_mr(d.pd, more.data(), more.size(), access) == nullptr);
  CHECK(errno == EIO);
  CHECK(ibv_create_cq(d.ctx, 16, nullptr, nullptr, 0) == nullptr);
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  CHECK(ibv_query_qp(e.qp, &attr, IBV_QP_STATE, &init) == EIO);
  attr = {};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  CHECK(ibv_modify_qp(e.qp, &attr,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == EIO);

  ibv_device_attr dattr{};
  CHECK(ibv_query_device(d.ctx, &dattr) == 0);
  CHECK(port_of(d.ctx).state == IBV_PORT_DOWN);
  // The destructors destroy the QP, the CQ, the MR and the PD and close the device, each
  // checked to succeed.
}

TEST_CASE("a link event on a two-port HCA: PORT_ERR for each port, both read DOWN, then "
          "PORT_ACTIVE for each", "[two_ports]") {
  Pair p;
  ibv_device_attr dev{};
  REQUIRE(ibv_query_device(p.da.ctx, &dev) == 0);
  REQUIRE(dev.phys_port_cnt == 2);
  for (uint8_t port : {uint8_t{1}, uint8_t{2}}) {
    const ibv_async_event down = next_event(p.da.ctx);
    CHECK(down.event_type == IBV_EVENT_PORT_ERR);
    CHECK(down.element.port_num == port);
  }
  for (uint8_t port : {uint8_t{1}, uint8_t{2}}) {
    ibv_port_attr attr{};
    REQUIRE(ibv_query_port(p.da.ctx, port, &attr) == 0);
    CHECK(attr.state == IBV_PORT_DOWN);
  }
  for (uint8_t port : {uint8_t{1}, uint8_t{2}}) {
    const ibv_async_event up = next_event(p.da.ctx);
    CHECK(up.event_type == IBV_EVENT_PORT_ACTIVE);
    CHECK(up.element.port_num == port);
  }
}
