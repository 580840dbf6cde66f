// SPDX-License-Identifier: BSD-3-Clause
// An EAL that cannot start is reported with DPDK's reason, to the first caller and to every
// later one (rte_eal_init runs once per process); nothing exits or aborts. A process of its
// own, as the failure is permanent for the process.
#include "dpdk_env.h"

#include "rnicdv/sim/dpdk.h"

using namespace rnicdv;

TEST_CASE("an EAL start-up failure carries DPDK's reason and is reported again later",
          "[dpdk][eal]") {
  sim::FabricConfig config;
  config.mode = sim::ExecMode::deterministic;
  config.wire = sim::WireKind::dpdk;
  config.dpdk_args = "--no-such-eal-option";
  auto first = sim::Fabric::create(config);
  REQUIRE_FALSE(first);
  INFO(first.status().message());
  CHECK(first.status().message().find("EAL start-up failed: Invalid argument") !=
        std::string::npos);
  CHECK(first.status().message().find("--no-such-eal-option") != std::string::npos);

  config.dpdk_args = "";
  auto again = sim::Fabric::create(config);
  REQUIRE_FALSE(again);
  INFO(again.status().message());
  CHECK(again.status().message().find("failed earlier in this process") != std::string::npos);
  CHECK(again.status().message().find("Invalid argument") != std::string::npos);
  CHECK_FALSE(sim::dpdk_alloc(4096, 64));
}
