// SPDX-License-Identifier: BSD-3-Clause
// ibv_async_event -> hw::AsyncEvent, without hardware.
#include <catch2/catch.hpp>

#include <cstring>

#include "mlx5_async.h"
#include "mlx5_verbs.h"

using namespace rnicdv::hw;
using namespace rnicdv::hw::mlx5;

namespace {

ibv_async_event qp_event(ibv_event_type type, ibv_qp* qp) {
  ibv_async_event e;
  std::memset(&e, 0, sizeof e);
  e.event_type = type;
  e.element.qp = qp;
  return e;
}

}  // namespace

TEST_CASE("QP events carry the QP number", "[async]") {
  ibv_qp qp;
  std::memset(&qp, 0, sizeof qp);
  qp.qp_num = 0x1c;
  struct Case {
    ibv_event_type verbs;
    AsyncEventType mapped;
  };
  for (const Case& c : {Case{IBV_EVENT_COMM_EST, AsyncEventType::comm_est},
                        Case{IBV_EVENT_SQ_DRAINED, AsyncEventType::sq_drained},
                        Case{IBV_EVENT_QP_LAST_WQE_REACHED, AsyncEventType::last_wqe_reached},
                        Case{IBV_EVENT_QP_FATAL, AsyncEventType::qp_fatal},
                        Case{IBV_EVENT_QP_REQ_ERR, AsyncEventType::qp_req_err},
                        Case{IBV_EVENT_QP_ACCESS_ERR, AsyncEventType::qp_access_err}}) {
    auto mapped = map_async_event(qp_event(c.verbs, &qp));
    REQUIRE(mapped);
    CHECK(mapped->type == c.mapped);
    CHECK(mapped->qpn == 0x1c);
    CHECK(mapped->cqn == 0);
  }
}

TEST_CASE("a CQ error carries the CQN recorded in the CQ's context", "[async]") {
  CqHandle handle;
  handle.cqn = 0x407;
  ibv_cq cq;
  std::memset(&cq, 0, sizeof cq);
  cq.cq_context = &handle;
  ibv_async_event e;
  std::memset(&e, 0, sizeof e);
  e.event_type = IBV_EVENT_CQ_ERR;
  e.element.cq = &cq;
  auto mapped = map_async_event(e);
  REQUIRE(mapped);
  CHECK(mapped->type == AsyncEventType::cq_err);
  CHECK(mapped->cqn == 0x407);
  CHECK(mapped->qpn == 0);

  cq.cq_context = nullptr;  // a CQ this backend did not create
  CHECK_FALSE(map_async_event(e));
}

TEST_CASE("device and port events map without an object", "[async]") {
  ibv_async_event e;
  std::memset(&e, 0, sizeof e);
  e.event_type = IBV_EVENT_DEVICE_FATAL;
  REQUIRE(map_async_event(e));
  CHECK(map_async_event(e)->type == AsyncEventType::device_fatal);
  e.event_type = IBV_EVENT_PORT_ACTIVE;
  e.element.port_num = 1;
  REQUIRE(map_async_event(e));
  CHECK(map_async_event(e)->type == AsyncEventType::port_active);
  e.event_type = IBV_EVENT_PORT_ERR;
  REQUIRE(map_async_event(e));
  CHECK(map_async_event(e)->type == AsyncEventType::port_err);
}

TEST_CASE("events the interface has no type for are not mapped", "[async]") {
  ibv_qp qp;
  std::memset(&qp, 0, sizeof qp);
  for (ibv_event_type t :
       {IBV_EVENT_PATH_MIG, IBV_EVENT_PATH_MIG_ERR, IBV_EVENT_LID_CHANGE, IBV_EVENT_PKEY_CHANGE,
        IBV_EVENT_SM_CHANGE, IBV_EVENT_SRQ_ERR, IBV_EVENT_SRQ_LIMIT_REACHED,
        IBV_EVENT_CLIENT_REREGISTER, IBV_EVENT_GID_CHANGE, IBV_EVENT_WQ_FATAL}) {
    CHECK_FALSE(map_async_event(qp_event(t, &qp)));
  }
}
