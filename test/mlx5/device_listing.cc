// SPDX-License-Identifier: BSD-3-Clause
// Device discovery, which must work (and fail clearly) on a machine without RDMA hardware.
#include <catch2/catch.hpp>

#include <string>

#include "rnicdv/hw/mlx5.h"

using namespace rnicdv;
using namespace rnicdv::hw;

TEST_CASE("listing mlx5 devices works with or without hardware", "[listing]") {
  const std::vector<std::string> names = mlx5::list_devices();
  for (const std::string& name : names) CHECK_FALSE(name.empty());
  CHECK(mlx5::list_devices() == names);  // stable across calls, nothing leaked or consumed
}

TEST_CASE("opening a device that does not exist is not_found and says what exists", "[listing]") {
  const std::string missing = "mlx5_no_such_device_42";
  auto device = mlx5::open_device(missing);
  REQUIRE_FALSE(device.is_ok());
  const Status status = device.status();  // status() returns a copy: keep it alive
  CHECK(status.code() == Errc::not_found);
  const std::string& message = status.message();
  CHECK(message.rfind("no RDMA device 'mlx5_no_such_device_42'; ", 0) == 0);

  const std::vector<std::string> names = mlx5::list_devices();
  if (message.find("; found: ") != std::string::npos) {
    for (const std::string& name : names) CHECK(message.find(name) != std::string::npos);
  } else {
    CHECK(names.empty());
    CHECK(message ==
          "no RDMA device 'mlx5_no_such_device_42'; no RDMA devices found (is the mlx5_ib "
          "kernel module loaded?)");
  }
}

TEST_CASE("opening an empty device name is not_found", "[listing]") {
  auto device = mlx5::open_device("");
  REQUIRE_FALSE(device.is_ok());
  CHECK(device.status().code() == Errc::not_found);
}
