// SPDX-License-Identifier: BSD-3-Clause
// A refusal of the simulated device reaches an rdma-core program as the errno of the code's
// category (rnicdv::to_errno), through the uverbs shim: librdmacm's rdma_listen on a port
// that is already listened on fails with EADDRINUSE, which the mlx5 backend reports as
// Errc::address_in_use.
//
// Runs with LD_PRELOAD=librnicdv-uverbs.so (meson sets it); elsewhere it skips (77).
#include <catch2/catch.hpp>

#include <string>
#include <system_error>

#include "shim_rig.h"
#include "rnicdv/connection.h"

using namespace rnicdv;

TEST_CASE("through the shim, a second listener on a port fails with EADDRINUSE") {
  test::ShimRig r;
  Listener first = test::take(Listener::listen(*r.dev, r.ip, 17521));
  Result<Listener> second = Listener::listen(*r.dev, r.ip, 17521);
  REQUIRE_FALSE(second.is_ok());
  INFO(second.status().message());
  CHECK(second.status().code() == Errc::address_in_use);
  CHECK(second.status().error_code() == std::errc::address_in_use);
  CHECK(second.status().message().find("rdma_bind_addr/rdma_listen") != std::string::npos);
}
