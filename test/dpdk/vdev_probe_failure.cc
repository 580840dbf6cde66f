// SPDX-License-Identifier: BSD-3-Clause
// A device named in the EAL arguments that fails to probe is an error naming it, not a
// silent fall-back to the in-process link. A process of its own: EAL starts with that vdev.
#include "dpdk_env.h"

using namespace rnicdv;

TEST_CASE("a --vdev that probes no port fails the fabric, naming the device", "[dpdk][ports]") {
  sim::FabricConfig config;
  config.mode = sim::ExecMode::deterministic;
  config.wire = sim::WireKind::dpdk;
  config.dpdk_args = "--vdev=net_af_packet0,iface=rnicdv-no-such-if";
  auto r = sim::Fabric::create(config);
  REQUIRE_FALSE(r);
  INFO(r.status().message());
  CHECK(r.status().code() == Errc::not_found);
  CHECK(r.status().message().find("EAL probed no ethdev port for "
                                  "'--vdev=net_af_packet0,iface=rnicdv-no-such-if'") !=
        std::string::npos);
}
