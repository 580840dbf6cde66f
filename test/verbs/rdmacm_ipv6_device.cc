// SPDX-License-Identifier: BSD-3-Clause
// A process whose simulated HCA has an IPv6 address (RNICDV_SIM_ADDR=::1, set by the test's
// environment), through the shim and the unmodified libibverbs and librdmacm: the device's GID
// table holds the address at index 3 with the default link-local GID at 1, and rdma_cm runs
// over it with sockaddr_in6 addresses, from the address resolution to a SEND on the connected
// QPs. Addresses it cannot serve are refused with an errno and one line.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace {

constexpr uint16_t kPort = 18740;

in6_addr loopback6() {
  in6_addr a{};
  REQUIRE(inet_pton(AF_INET6, "::1", &a) == 1);
  return a;
}

sockaddr_in6 v6(const char* text, uint16_t port) {
  sockaddr_in6 sa{};
  sa.sin6_family = AF_INET6;
  sa.sin6_port = htons(port);
  REQUIRE(inet_pton(AF_INET6, text, &sa.sin6_addr) == 1);
  return sa;
}

sockaddr* as_sa(sockaddr_in6& sa) {
  return reinterpret_cast<sockaddr*>(&sa);
}

// The next event on `ch`, which must be `type`; acknowledged. Returns its ID.
rdma_cm_id* expect_event(rdma_event_channel* ch, rdma_cm_event_type type,
                         rdma_cm_id** listen_id = nullptr) {
  rdma_cm_event* ev = nullptr;
  REQUIRE(rdma_get_cm_event(ch, &ev) == 0);
  INFO("event " << rdma_event_str(ev->event) << ", status " << ev->status);
  REQUIRE(ev->event == type);
  rdma_cm_id* id = ev->id;
  if (listen_id) *listen_id = ev->listen_id;
  REQUIRE(rdma_ack_cm_event(ev) == 0);
  return id;
}

// An IPv6 socket address is ::1 (and `port`, unless 0).
void check_loopback(const sockaddr* sa, uint16_t port) {
  REQUIRE(sa != nullptr);
  REQUIRE(sa->sa_family == AF_INET6);
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
  const in6_addr lo = loopback6();
  CHECK(std::memcmp(&in6->sin6_addr, &lo, 16) == 0);
  if (port) CHECK(ntohs(in6->sin6_port) == port);
}

ibv_qp_init_attr qp_attr(ibv_cq* cq) {
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = a.cap.max_recv_wr = 4;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  return a;
}

ibv_wc poll_one(ibv_cq* cq) {
  ibv_wc wc{};
  for (int i = 0; i < 10'000'000; ++i) {
    const int n = ibv_poll_cq(cq, 1, &wc);
    REQUIRE(n >= 0);
    if (n == 1) return wc;
  }
  FAIL("no completion");
  return wc;
}

}  // namespace

TEST_CASE("a device with an IPv6 address shows it in its GID table") {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  REQUIRE(list != nullptr);
  REQUIRE(n >= 1);
  ibv_context* ctx = ibv_open_device(list[0]);
  REQUIRE(ctx != nullptr);
  ibv_gid gid{};
  REQUIRE(ibv_query_gid(ctx, 1, 3, &gid) == 0);
  const in6_addr lo = loopback6();
  CHECK(std::memcmp(gid.raw, &lo, 16) == 0);
  REQUIRE(ibv_query_gid(ctx, 1, 1, &gid) == 0);
  CHECK(gid.raw[0] == 0xfe);  // the default GID, link-local
  CHECK(gid.raw[1] == 0x80);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
}

TEST_CASE("rdma_cm over an IPv6 device: sockaddr_in6 addresses, the route's GIDs, a connection "
          "and a SEND") {
  rdma_event_channel* ch = rdma_create_event_channel();
  REQUIRE(ch != nullptr);
  rdma_cm_id* listen_id = nullptr;
  rdma_cm_id* client = nullptr;
  REQUIRE(rdma_create_id(ch, &listen_id, nullptr, RDMA_PS_TCP) == 0);
  REQUIRE(rdma_create_id(ch, &client, nullptr, RDMA_PS_TCP) == 0);
  sockaddr_in6 at = v6("::1", kPort);
  REQUIRE(rdma_bind_addr(listen_id, as_sa(at)) == 0);
  check_loopback(rdma_get_local_addr(listen_id), kPort);
  REQUIRE(rdma_listen(listen_id, 4) == 0);

  REQUIRE(rdma_resolve_addr(client, nullptr, as_sa(at), 2000) == 0);
  expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
  REQUIRE(rdma_resolve_route(client, 2000) == 0);
  expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
  check_loopback(rdma_get_local_addr(client), 0);
  check_loopback(rdma_get_peer_addr(client), kPort);
  // The route's path: the device's GID (the address itself) at both ends.
  REQUIRE(client->route.num_paths == 1);
  const in6_addr lo = loopback6();
  CHECK(std::memcmp(client->route.path_rec->sgid.raw, &lo, 16) == 0);
  CHECK(std::memcmp(client->route.path_rec->dgid.raw, &lo, 16) == 0);

  ibv_pd* pd = ibv_alloc_pd(client->verbs);
  REQUIRE(pd != nullptr);
  ibv_cq* ccq = ibv_create_cq(client->verbs, 8, nullptr, nullptr, 0);
  ibv_cq* scq = ibv_create_cq(client->verbs, 8, nullptr, nullptr, 0);
  REQUIRE((ccq && scq));
  ibv_qp_init_attr ca = qp_attr(ccq);
  REQUIRE(rdma_create_qp(client, pd, &ca) == 0);
  rdma_conn_param cp{};
  cp.responder_resources = cp.initiator_depth = 1;
  cp.retry_count = 7;
  REQUIRE(rdma_connect(client, &cp) == 0);

  rdma_cm_id* from = nullptr;
  rdma_cm_id* server = expect_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, &from);
  CHECK(from == listen_id);
  check_loopback(rdma_get_local_addr(server), kPort);
  check_loopback(rdma_get_peer_addr(server), ntohs(rdma_get_src_port(client)));
  ibv_qp_init_attr sa = qp_attr(scq);
  REQUIRE(rdma_create_qp(server, pd, &sa) == 0);
  char buf[2][64] = {"over IPv6", ""};
  const int access = IBV_ACCESS_LOCAL_WRITE;
  ibv_mr* mr = ibv_reg_mr(pd, buf, sizeof buf, access);
  REQUIRE(mr != nullptr);
  REQUIRE(rdma_post_recv(server, nullptr, buf[1], sizeof buf[1], mr) == 0);
  REQUIRE(rdma_accept(server, &cp) == 0);
  expect_event(ch, RDMA_CM_EVENT_ESTABLISHED);
  expect_event(ch, RDMA_CM_EVENT_ESTABLISHED);

  // The connected QP's address vector: RoCE v2 from the address's own GID entry (3) to it.
  ibv_qp_attr qa{};
  ibv_qp_init_attr qi{};
  REQUIRE(ibv_query_qp(client->qp, &qa, IBV_QP_AV, &qi) == 0);
  CHECK(qa.ah_attr.is_global == 1);
  CHECK(qa.ah_attr.grh.sgid_index == 3);
  CHECK(std::memcmp(qa.ah_attr.grh.dgid.raw, &lo, 16) == 0);

  REQUIRE(rdma_post_send(client, nullptr, buf[0], std::strlen(buf[0]) + 1, mr,
                         IBV_SEND_SIGNALED) == 0);
  CHECK(poll_one(ccq).status == IBV_WC_SUCCESS);
  const ibv_wc got = poll_one(scq);
  CHECK(got.status == IBV_WC_SUCCESS);
  CHECK(std::string(buf[1]) == "over IPv6");

  REQUIRE(rdma_disconnect(client) == 0);
  expect_event(ch, RDMA_CM_EVENT_DISCONNECTED);
  expect_event(ch, RDMA_CM_EVENT_DISCONNECTED);
  rdma_destroy_qp(client);
  rdma_destroy_qp(server);
  REQUIRE(ibv_dereg_mr(mr) == 0);
  REQUIRE(ibv_destroy_cq(ccq) == 0);
  REQUIRE(ibv_destroy_cq(scq) == 0);
  REQUIRE(ibv_dealloc_pd(pd) == 0);
  CHECK(rdma_destroy_id(server) == 0);
  CHECK(rdma_destroy_id(client) == 0);
  CHECK(rdma_destroy_id(listen_id) == 0);
  rdma_destroy_event_channel(ch);
}

TEST_CASE("rdma_cm on an IPv6 device refuses what it cannot bind or route, each with an errno") {
  rdma_event_channel* ch = rdma_create_event_channel();
  REQUIRE(ch != nullptr);
  rdma_cm_id* id = nullptr;
  REQUIRE(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) == 0);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(kPort);
  REQUIRE(inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr) == 1);
  // No device owns an IPv4 address, nor fd00::99: binding one is refused.
  errno = 0;
  CHECK(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&dst)) == -1);
  CHECK(errno == EADDRNOTAVAIL);
  sockaddr_in6 nobody = v6("fd00::99", kPort);
  errno = 0;
  CHECK(rdma_bind_addr(id, as_sa(nobody)) == -1);
  CHECK(errno == EADDRNOTAVAIL);
  // A link-local address without its interface (sin6_scope_id 0): EINVAL, as the kernel's
  // cma_check_linklocal.
  sockaddr_in6 link_local = v6("fe80::1", kPort);
  errno = 0;
  CHECK(rdma_bind_addr(id, as_sa(link_local)) == -1);
  CHECK(errno == EINVAL);
  // No device speaks IPv4, so nothing routes to an IPv4 address.
  errno = 0;
  CHECK(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 1000) == -1);
  CHECK(errno == ENETUNREACH);
  CHECK(rdma_destroy_id(id) == 0);

  // An ID bound to the IPv6 address cannot resolve an IPv4 one (the two must agree).
  REQUIRE(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) == 0);
  sockaddr_in6 own = v6("::1", 0);
  REQUIRE(rdma_bind_addr(id, as_sa(own)) == 0);
  errno = 0;
  CHECK(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 1000) == -1);
  CHECK(errno == EINVAL);
  CHECK(rdma_destroy_id(id) == 0);
  rdma_destroy_event_channel(ch);
}
