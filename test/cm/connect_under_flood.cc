// SPDX-License-Identifier: BSD-3-Clause
// A legitimate client connects while forged REQs flood the listener, in real time (threaded
// devices): the flood comes from another HCA's QP1 at the rate one thread can send, the
// server takes every request it is handed, and the descriptors the process holds stay put.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "cm_env.h"
#include "flood_rig.h"
#include "gsi.h"

using namespace rnicdv;
using namespace rnicdv::test;

TEST_CASE("a legitimate client connects within a second while forged REQs flood the listener") {
  auto fabric = make_fabric(sim::ExecMode::threaded);
  Side server = make_side(fabric);
  Side client = make_side(fabric);
  auto attacker = take(fabric->add_device());
  Listener listener = take(Listener::listen(*server.dev, "", kCmPort));
  const hw::IpAddress server_ip = server.sim->address();
  const hw::IpAddress client_ip = client.sim->address();
  const hw::IpAddress attacker_ip = attacker->address();
  const size_t fds_before = open_descriptors();

  std::atomic<bool> stop{false};
  std::atomic<uint32_t> sent{0};
  std::atomic<uint32_t> send_errors{0};
  std::thread flood([&] {
    sim::Gsi& gsi = sim::gsi_of(*attacker);
    for (uint32_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
      const sim::cm::MadBytes mad =
          forged_req(attacker_ip, server_ip, kCmPort, 0x100000 + i, 0x1000 + i, 31, 15);
      if (!gsi.send_mad(server_ip, mad.data(), mad.size())) send_errors.fetch_add(1);
      sent.fetch_add(1, std::memory_order_relaxed);
    }
  });

  // The server answers the requests it is handed as an application that cannot tell forged
  // from real would: it accepts the client's, and holds the others without an answer.
  std::mutex mu;
  std::optional<Connection> accepted;
  std::atomic<size_t> held_count{0};
  std::thread serve([&] {
    std::vector<ConnectionRequest> held;
    while (!stop.load(std::memory_order_relaxed)) {
      std::optional<ConnectionEvent> ev = listener.wait_event(10ms);
      if (!ev || !ev->request) continue;
      if (ev->request->remote_address().ip == client_ip) {
        Result<Connection> c = ev->request->accept(*server.qp);
        std::lock_guard lock(mu);
        if (c) accepted.emplace(std::move(c).value());
      } else {
        held.push_back(std::move(*ev->request));
        held_count.store(held.size(), std::memory_order_relaxed);
      }
    }
  });

  size_t most_fds = fds_before;
  auto sample = [&] { most_fds = std::max(most_fds, open_descriptors()); };
  while (sent.load() < 2'000) {
    sample();
    std::this_thread::sleep_for(1ms);
  }

  // The wire drops what the server's QP1 cannot take in time, as a full receive queue would,
  // and the client's REQ with it: the client sends it again every ~70 ms (2 s for 16 tries),
  // not every 0.6 s as the default 10 s budget would.
  ConnectionOptions o;
  o.timeout = 2'000ms;
  o.max_cm_retries = 15;
  const auto t0 = std::chrono::steady_clock::now();
  Result<Connection> c = Connection::connect(*client.qp, server.ip(), kCmPort, {}, o);
  std::optional<ConnectionEvent> ev;
  const auto deadline = t0 + 5s;
  while (c && !ev && std::chrono::steady_clock::now() < deadline) {
    ev = c.value().wait_event(5ms);
    sample();
  }
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  const uint32_t sent_at_established = sent.load();
  while (sent.load() < 10'000) {
    sample();
    std::this_thread::sleep_for(1ms);
  }
  const size_t waiting = server.cm().pending_requests(kCmPort);
  const size_t from_attacker = server.cm().pending_requests_from(kCmPort, attacker_ip);
  stop = true;
  flood.join();
  serve.join();
  sample();

  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count();
  std::printf(
      "legitimate connect under the flood: %lld ms (%u forged REQs sent by then); "
      "descriptors: %zu before the flood, at most %zu during it; %zu requests held\n",
      static_cast<long long>(ms), sent_at_established, fds_before, most_fds, held_count.load());
  INFO(c.status().message());
  REQUIRE(c);
  REQUIRE(ev.has_value());
  REQUIRE(ev->type == ConnectionEventType::established);
  CHECK(ms < 1000);
  CHECK(sent.load() >= 10'000);  // it ran from before the connect until after it, unthrottled
  CHECK(send_errors.load() == 0);
  // The server's one accepted connection holds a descriptor; the forged requests none.
  CHECK(most_fds <= fds_before + 4);
  CHECK(waiting <= static_cast<size_t>(hw::kDefaultListenBacklog));
  CHECK(from_attacker <=
        static_cast<size_t>(sim::cm::CmAgent::source_share(hw::kDefaultListenBacklog)));
  CHECK(server.cm().counters().req_dropped_source_share > 0);
  std::lock_guard lock(mu);
  CHECK(accepted.has_value());
}
