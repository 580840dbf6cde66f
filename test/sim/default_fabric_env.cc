// SPDX-License-Identifier: BSD-3-Clause
// The process-wide fabric and its environment: RNICDV_SIM_WIRE, RNICDV_SIM_ADDR,
// RNICDV_SIM_PROFILE.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "rnicdv_config.h"
#include "sim_harness.h"

using namespace simtest;

TEST_CASE("default_fabric is threaded, honours the environment, and is shared while alive") {
  ::setenv("RNICDV_SIM_WIRE", "inproc", 1);
  ::setenv("RNICDV_SIM_ADDR", "127.0.0.77,127.0.0.78,fd00::4f", 1);
  ::setenv("RNICDV_SIM_PROFILE", "scanning-forgetful", 1);
  {
    auto fabric = must(sim::default_fabric());
    CHECK(fabric->config().mode == sim::ExecMode::threaded);
    CHECK(fabric->config().wire == sim::WireKind::inproc);
    auto d0 = must(fabric->add_device());
    auto d1 = must(fabric->add_device());
    CHECK(d0->ipv4() == 0x7f00004d);
    CHECK(d1->ipv4() == 0x7f00004e);
    auto d2v6 = must(fabric->add_device());  // the third address of the list: IPv6
    CHECK(d2v6->address().to_string() == "fd00::4f");
    CHECK(d2v6->ipv4() == 0);
    CHECK(d2v6->info().gid.to_string() == "fd00::4f");
    CHECK(d0->info().profile.fetches_beyond_dbr);
    CHECK_FALSE(d0->info().profile.keeps_rtr_doorbell);
    CHECK(d0->info().name == "sim0");
    CHECK(d1->info().name == "sim1");
    CHECK(must(sim::default_fabric()).get() == fabric.get());
    // An explicit profile wins over the environment.
    sim::DeviceConfig c;
    c.profile.fetches_beyond_dbr = true;
    auto d2 = must(fabric->add_device(c));
    CHECK(d2->info().profile.keeps_rtr_doorbell);
  }
  ::setenv("RNICDV_SIM_WIRE", "carrier-pigeon", 1);
  auto bad = sim::default_fabric();
  REQUIRE_FALSE(bad);
  CHECK(bad.status().message().find("carrier-pigeon") != std::string::npos);
  ::setenv("RNICDV_SIM_WIRE", "inproc", 1);
  ::setenv("RNICDV_SIM_PROFILE", "nonsense", 1);
  CHECK_FALSE(sim::default_fabric());
  ::unsetenv("RNICDV_SIM_PROFILE");
  ::setenv("RNICDV_SIM_ADDR", "127.0.0.300", 1);
  auto bad_address = sim::default_fabric();
  REQUIRE_FALSE(bad_address);
  CHECK(bad_address.status().message().find("RNICDV_SIM_ADDR") != std::string::npos);
  CHECK(bad_address.status().message().find("127.0.0.300") != std::string::npos);
  ::unsetenv("RNICDV_SIM_ADDR");
  ::unsetenv("RNICDV_SIM_WIRE");
  // Default: UDP.
  auto udp = must(sim::default_fabric());
  CHECK(udp->config().wire == sim::WireKind::udp);
}

TEST_CASE("names of modes and wires") {
  CHECK(std::string(sim::exec_mode_name(sim::ExecMode::deterministic)) == "deterministic");
  CHECK(std::string(sim::exec_mode_name(sim::ExecMode::threaded)) == "threaded");
  CHECK(std::string(sim::wire_kind_name(sim::WireKind::udp)) == "udp");
  CHECK(std::string(sim::wire_kind_name(sim::WireKind::inproc)) == "inproc");
  CHECK(std::string(sim::wire_kind_name(sim::WireKind::dpdk)) == "dpdk");
  // The DPDK wire: built only with libdpdk (the dpdk suite runs it). A bad wire option is
  // refused before EAL starts, so this process never starts EAL.
  sim::FabricConfig c;
  c.wire = sim::WireKind::dpdk;
  c.dpdk_args = "--ip=not-an-address";
  auto r = sim::Fabric::create(c);
  CHECK_FALSE(r);
  CHECK(r.status().code() == (RNICDV_HAVE_DPDK ? Errc::invalid_argument : Errc::unsupported));
}
