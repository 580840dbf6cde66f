// SPDX-License-Identifier: BSD-3-Clause
// librnicdv carries no simulator: a program linked against it alone (as this one is) maps
// librnicdv-sim only when it opens a "simN" device, and never for listing devices or opening
// real ones. The simulator then works as if it had been linked.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "rnicdv/cq.h"
#include "rnicdv/device.h"
#include "rnicdv/pd.h"
#include "rnicdv/qp.h"

using namespace rnicdv;

namespace {

bool mapped(const char* library) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream all;
  all << maps.rdbuf();
  return all.str().find(library) != std::string::npos;
}

}  // namespace

TEST_CASE("the simulator is loaded only when a simulated device is opened") {
  REQUIRE_FALSE(mapped("librnicdv-sim"));
  REQUIRE_FALSE(mapped("librnicdv-dpdk"));

  // Listing names sim0 (it can be opened) without loading anything.
  const std::vector<std::string> names = Device::list();
  CHECK(std::find(names.begin(), names.end(), "sim0") != names.end());
  CHECK_FALSE(mapped("librnicdv-sim"));

  // A real device that is not there: an error naming what exists, and still no simulator.
  Result<Device> none = Device::open("mlx5_9");
  REQUIRE_FALSE(none.is_ok());
  CHECK(none.status().message().find("no such device") != std::string::npos);
  CHECK_FALSE(mapped("librnicdv-sim"));

  // sim0: the simulator is loaded, and works.
  Result<Device> dev = Device::open("sim0");
  INFO(dev.status().message());
  REQUIRE(dev.is_ok());
  CHECK(mapped("librnicdv-sim"));
  CHECK_FALSE(mapped("librnicdv-dpdk"));  // the UDP wire needs no DPDK
  CHECK(dev.value().info().kind == "sim");
  Result<ProtectionDomain> pd = dev.value().alloc_pd();
  REQUIRE(pd.is_ok());
  Result<CompletionQueue> cq = dev.value().create_cq(16);
  REQUIRE(cq.is_ok());
  Result<QueuePair> qp = dev.value().create_qp(pd.value(), cq.value(), cq.value(), QpConfig{});
  REQUIRE(qp.is_ok());
  CHECK(qp.value().state() == hw::QpState::reset);
  // Now the simulator is in the process, listing shows its devices.
  const std::vector<std::string> after = Device::list();
  CHECK(std::count(after.begin(), after.end(), "sim0") == 1);
}
