// SPDX-License-Identifier: BSD-3-Clause
// Shared by the tests that need an mlx5 device. They link device_main.cc, which exits with
// 77 (meson's SKIP) and prints why when mlx5_test_skip_reason() returns a reason.
#pragma once

#include <catch2/catch.hpp>

#include <cstdlib>
#include <memory>
#include <string>

#include "rnicdv/hw/mlx5.h"
#include "mlx5_device.h"

// Defined by each device test file: nullptr to run, or why the tests cannot run here.
const char* mlx5_test_skip_reason();

namespace mlx5_test {

// RNICDV_MLX5_DEVICE, or the first mlx5 device listed; empty if there is none.
inline std::string device_name() {
  if (const char* env = std::getenv("RNICDV_MLX5_DEVICE"); env && *env) return env;
  const auto names = rnicdv::hw::mlx5::list_devices();
  return names.empty() ? std::string() : names.front();
}

inline const char* no_device_reason() {
  static const std::string reason =
      "no mlx5 RDMA device (ibv_get_device_list lists none served by the mlx5 provider)";
  return device_name().empty() ? reason.c_str() : nullptr;
}

inline std::shared_ptr<rnicdv::hw::mlx5::Mlx5Device> open() {
  auto device = rnicdv::hw::mlx5::open_device(device_name());
  INFO(device.status().message());
  REQUIRE(device.is_ok());
  auto mlx5 = std::dynamic_pointer_cast<rnicdv::hw::mlx5::Mlx5Device>(device.value());
  REQUIRE(mlx5);
  return mlx5;
}

}  // namespace mlx5_test
