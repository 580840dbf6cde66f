// SPDX-License-Identifier: BSD-3-Clause
// Opening devices by name: "simN" on a given fabric (created on first open, with the given
// configuration) through the simulator's open_device, the same device on a second open,
// listing, and wrapping.
#include <catch2/catch.hpp>

#include <algorithm>

#include "rnicdv/hw/backend.h"
#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

TEST_CASE("opening simN creates the simulated HCA on the given fabric once", "[drv][device]") {
  auto fabric = make_fabric();
  sim::DeviceConfig config;
  config.profile = scanning_profile();
  Device first = take(Device::wrap(take(sim::open_device("sim3", fabric, &config))));
  CHECK(first.name() == "sim3");
  CHECK(first.info().kind == "sim");
  CHECK(first.info().profile.fetches_beyond_dbr);
  REQUIRE(fabric->devices().size() == 1);

  Device again = take(Device::wrap(take(sim::open_device("sim3", fabric, &config))));
  CHECK(&again.hw() == &first.hw());
  CHECK(fabric->devices().size() == 1);

  Device other = take(Device::wrap(take(sim::open_device("sim4", fabric))));
  CHECK(other.name() == "sim4");
  CHECK_FALSE(other.info().profile.fetches_beyond_dbr);  // defaults: the mlx5 profile
  CHECK(fabric->devices().size() == 2);

  // Objects work on an opened device like on a wrapped one.
  ProtectionDomain pd = take(first.alloc_pd());
  CompletionQueue cq = take(first.create_cq(8));
  CHECK(cq.entries() >= 8);
  QueuePair qp = take(first.create_qp(pd, cq, cq, default_qp_config()));
  CHECK(qp.early_post() == EarlyPost::shadow);
  CHECK(qp.state() == hw::QpState::reset);
  CHECK(qp.threading() == Threading::single);
  CHECK(qp.caps().max_send_wr >= 64);
  const QpEndpoint ep = qp.local_endpoint(0x123456);
  CHECK(ep.qpn == qp.qpn());
  CHECK(ep.psn == 0x123456);
  CHECK(std::memcmp(ep.gid.raw, first.info().gid.raw, 16) == 0);
}

TEST_CASE("the device list names sim0 and the default name falls back to it", "[drv][device]") {
  const auto names = Device::list();
  CHECK(std::find(names.begin(), names.end(), "sim0") != names.end());
  // No RDMA hardware on a test machine: the default is the simulator.
  if (std::none_of(names.begin(), names.end(),
                   [](const std::string& n) { return n.rfind("mlx5", 0) == 0; }))
    CHECK(Device::default_name() == "sim0");
}

TEST_CASE("names of early-post strategies and threading models are stable", "[drv][device]") {
  CHECK(std::string(early_post_name(EarlyPost::strict)) == "strict");
  CHECK(std::string(early_post_name(EarlyPost::automatic)) == "auto");
  CHECK(std::string(early_post_name(EarlyPost::in_place)) == "in_place");
  CHECK(std::string(early_post_name(EarlyPost::shadow)) == "shadow");
  CHECK(std::string(threading_name(Threading::single)) == "single");
  CHECK(std::string(threading_name(Threading::single_poster)) == "single_poster");
  CHECK(std::string(threading_name(Threading::thread_safe)) == "thread_safe");
}

TEST_CASE("the backend table owns which code serves a name; a name nobody has lists what exists",
          "[drv][device]") {
  const auto& table = hw::backends();
  REQUIRE(table.size() == 2);
  CHECK(std::string(table[0]->kind) == "mlx5");  // real devices first
  CHECK(table[0]->hardware);
  CHECK(std::string(table[1]->kind) == "sim");
  CHECK_FALSE(table[1]->hardware);
  CHECK(table[1]->claims("sim12") == hw::Claim::own);
  CHECK(table[1]->claims("sim") == hw::Claim::no);
  CHECK(table[1]->claims("sim1x") == hw::Claim::no);
  CHECK(table[0]->claims("rocep1s0f0") == hw::Claim::fallback);  // rdma-core names are free
  CHECK(table[0]->claims("sim12") == hw::Claim::fallback);         // but simN is the sim's

  auto missing = hw::open_device("mlx5_97");
  REQUIRE_FALSE(missing);
  CHECK(missing.status().code() == Errc::not_found);
  CHECK_THAT(missing.status().message(),
             Catch::StartsWith("open mlx5_97: no such device; found: ") &&
                 Catch::Contains("sim0"));
  // The driver's Device::open asks the same table.
  auto via_driver = Device::open("mlx5_97");
  REQUIRE_FALSE(via_driver);
  CHECK(via_driver.status().message() == missing.status().message());
}
