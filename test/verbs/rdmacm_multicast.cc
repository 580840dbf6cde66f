// SPDX-License-Identifier: BSD-3-Clause
// rdma_cm's multicast through the shim's /dev/infiniband/rdma_cm, with the unmodified
// librdmacm: a join answered with MULTICAST_JOIN and the group's UD parameters (librdmacm then
// attaches the ID's QP), a datagram to the group received by the joined QP, leave, and the
// joins the kernel refuses, each with its errno.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

// The address of the process's simulated HCA (the test's environment sets it).
std::string device_address() {
  const char* a = std::getenv("RNICDV_SIM_ADDR");
  REQUIRE(a);
  return a;
}

sockaddr_in ipv4(const std::string& text, uint16_t port = 0) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  REQUIRE(inet_pton(AF_INET, text.c_str(), &sa.sin_addr) == 1);
  return sa;
}

struct Id {
  rdma_event_channel* channel = nullptr;
  rdma_cm_id* id = nullptr;
  explicit Id(rdma_port_space ps = RDMA_PS_UDP) {
    channel = rdma_create_event_channel();
    REQUIRE(channel);
    REQUIRE(rdma_create_id(channel, &id, nullptr, ps) == 0);
  }
  ~Id() {
    if (id) CHECK(rdma_destroy_id(id) == 0);
    rdma_destroy_event_channel(channel);
  }
  void bind(const std::string& addr) {
    sockaddr_in sa = ipv4(addr);
    REQUIRE(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&sa)) == 0);
  }
  // The next event, which must be `type`; acknowledged after `check` looked at it.
  template <class F>
  void expect(rdma_cm_event_type type, F&& check) {
    rdma_cm_event* ev = nullptr;
    REQUIRE(rdma_get_cm_event(channel, &ev) == 0);
    INFO(rdma_event_str(ev->event) << ", status " << ev->status);
    REQUIRE(ev->event == type);
    check(*ev);
    REQUIRE(rdma_ack_cm_event(ev) == 0);
  }
};

int join(Id& i, const std::string& group, uint16_t flags = RDMA_MC_JOIN_FLAG_FULLMEMBER) {
  sockaddr_in g = ipv4(group);
  rdma_cm_join_mc_attr_ex attr{};
  attr.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
  attr.addr = reinterpret_cast<sockaddr*>(&g);
  attr.join_flags = flags;
  errno = 0;
  return rdma_join_multicast_ex(i.id, &attr, nullptr) == 0 ? 0 : errno;
}

}  // namespace

TEST_CASE("rdma_join_multicast: MULTICAST_JOIN carries the group's GID, QPN 0xFFFFFF and "
          "RDMA_UDP_QKEY; the attached QP receives the group's datagrams; leave ends it") {
  Id i;
  i.bind(device_address());
  ibv_pd* pd = ibv_alloc_pd(i.id->verbs);
  REQUIRE(pd);
  ibv_cq* cq = ibv_create_cq(i.id->verbs, 16, nullptr, nullptr, 0);
  REQUIRE(cq);
  ibv_qp_init_attr init{};
  init.qp_type = IBV_QPT_UD;
  init.send_cq = init.recv_cq = cq;
  init.cap.max_send_wr = init.cap.max_recv_wr = 4;
  init.cap.max_send_sge = init.cap.max_recv_sge = 1;
  REQUIRE(rdma_create_qp(i.id, pd, &init) == 0);
  std::vector<uint8_t> buf(4096);
  const int access = IBV_ACCESS_LOCAL_WRITE;  // an int: ibv_reg_mr is a macro that masks it
  ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), access);
  REQUIRE(mr);
  ibv_sge rsge{reinterpret_cast<uintptr_t>(buf.data()), 40 + 256, mr->lkey};
  ibv_recv_wr rwr{};
  rwr.sg_list = &rsge;
  rwr.num_sge = 1;
  rwr.wr_id = 9;
  ibv_recv_wr* bad_r = nullptr;
  REQUIRE(ibv_post_recv(i.id->qp, &rwr, &bad_r) == 0);

  REQUIRE(join(i, "239.44.0.1") == 0);
  ibv_ah* ah = nullptr;
  uint32_t qpn = 0, qkey = 0;
  i.expect(RDMA_CM_EVENT_MULTICAST_JOIN, [&](const rdma_cm_event& ev) {
    const rdma_ud_param& ud = ev.param.ud;
    CHECK(ud.qp_num == 0xFFFFFF);
    CHECK(ud.qkey == 0x01234567);
    CHECK(ud.ah_attr.is_global == 1);
    CHECK(ud.ah_attr.grh.sgid_index == 3);
    char text[64];
    inet_ntop(AF_INET6, ud.ah_attr.grh.dgid.raw, text, sizeof text);
    CHECK(std::string(text) == "::ffff:239.44.0.1");
    qpn = ud.qp_num;
    qkey = ud.qkey;
    ah = ibv_create_ah(pd, const_cast<ibv_ah_attr*>(&ud.ah_attr));
    REQUIRE(ah);
  });

  // The ID's own QP is attached (by librdmacm, on the event): a datagram to the group comes
  // back to it.
  std::memcpy(buf.data() + 2048, "to the group", 13);
  ibv_sge ssge{reinterpret_cast<uintptr_t>(buf.data() + 2048), 13, mr->lkey};
  ibv_send_wr swr{};
  swr.opcode = IBV_WR_SEND;
  swr.send_flags = IBV_SEND_SIGNALED;
  swr.sg_list = &ssge;
  swr.num_sge = 1;
  swr.wr.ud.ah = ah;
  swr.wr.ud.remote_qpn = qpn;
  swr.wr.ud.remote_qkey = qkey;
  ibv_send_wr* bad_s = nullptr;
  REQUIRE(ibv_post_send(i.id->qp, &swr, &bad_s) == 0);
  int recvs = 0, sends = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((recvs < 1 || sends < 1) && std::chrono::steady_clock::now() < until) {
    ibv_wc wc{};
    if (ibv_poll_cq(cq, 1, &wc) != 1) continue;
    CHECK(wc.status == IBV_WC_SUCCESS);
    if (wc.opcode == IBV_WC_RECV) {
      ++recvs;
      CHECK(wc.byte_len == 40 + 13);
      CHECK(std::memcmp(buf.data() + 40, "to the group", 13) == 0);
    } else {
      ++sends;
    }
  }
  CHECK(recvs == 1);
  CHECK(sends == 1);

  sockaddr_in g = ipv4("239.44.0.1");
  CHECK(rdma_leave_multicast(i.id, reinterpret_cast<sockaddr*>(&g)) == 0);
  // librdmacm detached the QP as it left: a second detach finds nothing.
  ibv_gid gid{};
  gid.raw[10] = gid.raw[11] = 0xff;
  gid.raw[12] = 239;
  gid.raw[13] = 44;
  gid.raw[15] = 1;
  CHECK(ibv_detach_mcast(i.id->qp, &gid, 0) == EINVAL);
  CHECK(ibv_destroy_ah(ah) == 0);
  rdma_destroy_qp(i.id);
  CHECK(ibv_dereg_mr(mr) == 0);
  CHECK(ibv_destroy_cq(cq) == 0);
  CHECK(ibv_dealloc_pd(pd) == 0);
}

TEST_CASE("rdma_join_multicast refuses what the kernel refuses: a unicast address, the "
          "wildcard, a TCP port space ID, an ID with no device, and unknown join flags") {
  Id i;
  i.bind(device_address());
  CHECK(join(i, "10.1.2.3") == EINVAL);
  CHECK(join(i, "0.0.0.0") == EINVAL);
  CHECK(join(i, "239.44.0.2", 7) == EINVAL);  // librdmacm's own check of the flags
  Id tcp(RDMA_PS_TCP);
  tcp.bind(device_address());
  CHECK(join(tcp, "239.44.0.2") == EINVAL);
  Id unbound;
  unbound.bind("0.0.0.0");
  CHECK(join(unbound, "239.44.0.2") == ENODEV);
  // A send-only join needs no QP and is answered as a full member's is.
  REQUIRE(join(i, "239.44.0.3", RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER) == 0);
  i.expect(RDMA_CM_EVENT_MULTICAST_JOIN, [](const rdma_cm_event& ev) {
    CHECK(ev.param.ud.qp_num == 0xFFFFFF);
  });
  sockaddr_in g = ipv4("239.44.0.3");
  CHECK(rdma_leave_multicast(i.id, reinterpret_cast<sockaddr*>(&g)) == 0);
  g = ipv4("239.44.0.4");
  errno = 0;
  CHECK(rdma_leave_multicast(i.id, reinterpret_cast<sockaddr*>(&g)) != 0);
  CHECK(errno == EADDRNOTAVAIL);
}
