// SPDX-License-Identifier: BSD-3-Clause
// Opening devices by name: "simN" on a given fabric (created on first open, with the given
// configuration), the same device on a second open, listing, and wrapping.
#include <catch2/catch.hpp>

#include <algorithm>

#include "sim_env.h"

using namespace rnicdv;
using namespace rnicdv::test;

TEST_CASE("opening simN creates the simulated HCA on the given fabric once", "[drv][device]") {
  auto fabric = make_fabric();
  sim::DeviceConfig config;
  config.profile = scanning_profile();
  DeviceOptions options;
  options.fabric = fabric;
  options.sim_config = &config;

  Device first = take(Device::open("sim3", options));
  CHECK(first.name() == "sim3");
  CHECK(first.info().kind == "sim");
  CHECK(first.info().profile.fetches_beyond_dbr);
  REQUIRE(fabric->devices().size() == 1);

  Device again = take(Device::open("sim3", options));
  CHECK(&again.hw() == &first.hw());
  CHECK(fabric->devices().size() == 1);

  Device other = take(Device::open("sim4", DeviceOptions{fabric, nullptr}));
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
