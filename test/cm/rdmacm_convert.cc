// SPDX-License-Identifier: BSD-3-Clause
// The librdmacm backend's translations, which need no device: rdma_init_qp_attr's attributes
// as the driver's QpAttr, and rdma_cm events as backend events.
#include <catch2/catch.hpp>

#include <cstring>

#include "cm/rdmacm_cm.h"

using namespace rnicdv;
using namespace rnicdv::hw::mlx5::cm;

TEST_CASE("rdma_init_qp_attr's RTR and RTS attributes become the driver's QpAttr and mask") {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = 0x1234;
  a.rq_psn = 0xabcdef;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid.raw[10] = 0xff;
  a.ah_attr.grh.dgid.raw[11] = 0xff;
  a.ah_attr.grh.dgid.raw[12] = 10;
  a.ah_attr.grh.dgid.raw[15] = 7;
  a.ah_attr.grh.traffic_class = 0xb8;  // the REQ's path, on a passive side
  a.ah_attr.grh.hop_limit = 9;
  a.ah_attr.grh.flow_label = 0x12345;
  a.ah_attr.sl = 3;
  uint32_t mask = 0;
  hw::QpAttr r =
      qp_attr_from_ibv(a,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                           IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                       &mask);
  CHECK(r.state == hw::QpState::rtr);
  CHECK(r.path_mtu == hw::Mtu::mtu1024);
  CHECK(r.dest_qpn == 0x1234);
  CHECK(r.rq_psn == 0xabcdef);
  CHECK(r.max_dest_rd_atomic == 4);
  CHECK(r.min_rnr_timer == 12);
  CHECK(r.remote_gid.to_string() == "::ffff:10.0.0.7");
  CHECK(r.traffic_class == 0xb8);
  CHECK(r.hop_limit == 9);
  CHECK(r.flow_label == 0x12345);
  CHECK(r.sl == 3);
  CHECK(mask ==
        (hw::qp_attr::state | hw::qp_attr::av | hw::qp_attr::path_mtu | hw::qp_attr::dest_qpn |
         hw::qp_attr::rq_psn | hw::qp_attr::max_dest_rd_atomic | hw::qp_attr::min_rnr_timer));

  ibv_qp_attr s{};
  s.qp_state = IBV_QPS_RTS;
  s.sq_psn = 0x123456;
  s.timeout = 14;
  s.retry_cnt = 7;
  s.rnr_retry = 6;
  s.max_rd_atomic = 2;
  r = qp_attr_from_ibv(s,
                       IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                           IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC,
                       &mask);
  CHECK(r.state == hw::QpState::rts);
  CHECK(r.sq_psn == 0x123456);
  CHECK(r.timeout == 14);
  CHECK(r.retry_cnt == 7);
  CHECK(r.rnr_retry == 6);
  CHECK(r.max_rd_atomic == 2);
  CHECK(mask == (hw::qp_attr::state | hw::qp_attr::sq_psn | hw::qp_attr::timeout |
                 hw::qp_attr::retry_cnt | hw::qp_attr::rnr_retry | hw::qp_attr::max_rd_atomic));

  ibv_qp_attr i{};
  i.qp_state = IBV_QPS_INIT;
  i.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  i.port_num = 1;
  r = qp_attr_from_ibv(i, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT,
                       &mask);
  CHECK(r.state == hw::QpState::init);
  CHECK(r.access_flags == (hw::access::remote_write | hw::access::remote_read));
  CHECK(r.port_num == 1);
  CHECK(mask == (hw::qp_attr::state | hw::qp_attr::access_flags | hw::qp_attr::port));
}

TEST_CASE("rdma_cm events map to backend events; resolution steps stay internal") {
  rdma_cm_event ev{};
  hw::CmEvent out;
  const uint8_t data[] = {1, 2, 3};
  ev.param.conn.private_data = data;
  ev.param.conn.private_data_len = 3;
  ev.param.conn.qp_num = 0x77;
  ev.param.conn.responder_resources = 5;

  ev.event = RDMA_CM_EVENT_CONNECT_RESPONSE;
  REQUIRE(translate_event(ev, &out));
  CHECK(out.type == hw::CmEventType::connect_response);
  CHECK(out.private_data == std::vector<uint8_t>{1, 2, 3});
  CHECK(out.peer.qpn == 0x77);
  CHECK(out.peer.responder_resources == 5);

  ev.event = RDMA_CM_EVENT_REJECTED;
  ev.status = 28;
  REQUIRE(translate_event(ev, &out));
  CHECK(out.type == hw::CmEventType::rejected);
  CHECK(out.reject_reason == 28);
  CHECK(out.detail == "rejected: consumer defined (28)");

  ev.event = RDMA_CM_EVENT_UNREACHABLE;
  ev.status = -ETIMEDOUT;
  REQUIRE(translate_event(ev, &out));
  CHECK(out.type == hw::CmEventType::unreachable);

  ev.event = RDMA_CM_EVENT_ESTABLISHED;
  REQUIRE(translate_event(ev, &out));
  CHECK(out.type == hw::CmEventType::established);
  ev.event = RDMA_CM_EVENT_DISCONNECTED;
  REQUIRE(translate_event(ev, &out));
  CHECK(out.type == hw::CmEventType::disconnected);
  for (auto internal : {RDMA_CM_EVENT_ADDR_RESOLVED, RDMA_CM_EVENT_ROUTE_RESOLVED,
                        RDMA_CM_EVENT_TIMEWAIT_EXIT, RDMA_CM_EVENT_ADDR_CHANGE}) {
    ev.event = internal;
    CHECK_FALSE(translate_event(ev, &out));
  }
}
