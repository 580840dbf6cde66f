// SPDX-License-Identifier: BSD-3-Clause
// A process whose simulated HCA has an IPv6 address (RNICDV_SIM_ADDR=::1, set by the test's
// environment), through the shim and the unmodified libibverbs and librdmacm: the device's GID
// table holds the address at index 3 with the default link-local GID at 1, and rdma_cm, which
// runs over IPv4 only for now, refuses the device by name and errno instead of binding it as
// the owner of 0.0.0.0.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cerrno>
#include <cstring>

TEST_CASE("a device with an IPv6 address shows it in its GID table, and rdma_cm refuses it") {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  REQUIRE(list != nullptr);
  REQUIRE(n >= 1);
  ibv_context* ctx = ibv_open_device(list[0]);
  REQUIRE(ctx != nullptr);
  ibv_gid gid{};
  REQUIRE(ibv_query_gid(ctx, 1, 3, &gid) == 0);
  in6_addr loopback{};
  REQUIRE(inet_pton(AF_INET6, "::1", &loopback) == 1);
  CHECK(std::memcmp(gid.raw, &loopback, 16) == 0);
  REQUIRE(ibv_query_gid(ctx, 1, 1, &gid) == 0);
  CHECK(gid.raw[0] == 0xfe);  // the default GID, link-local
  CHECK(gid.raw[1] == 0x80);
  ibv_close_device(ctx);
  ibv_free_device_list(list);

  rdma_event_channel* channel = rdma_create_event_channel();
  REQUIRE(channel != nullptr);
  rdma_cm_id* id = nullptr;
  REQUIRE(rdma_create_id(channel, &id, nullptr, RDMA_PS_TCP) == 0);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(7471);
  REQUIRE(inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr) == 1);
  // No device owns an IPv4 address: binding one is refused, and so is a route over the
  // IPv6 device.
  errno = 0;
  CHECK(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&dst)) == -1);
  CHECK(errno == EADDRNOTAVAIL);
  errno = 0;
  CHECK(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 1000) == -1);
  CHECK(errno == EAFNOSUPPORT);
  CHECK(rdma_destroy_id(id) == 0);
  rdma_destroy_event_channel(channel);
}
