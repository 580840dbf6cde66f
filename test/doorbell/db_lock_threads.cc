// SPDX-License-Identifier: BSD-3-Clause
// Several QPs ringing one shared register in db_lock mode, from several threads, while a
// device thread reads the register. Built with -Db_sanitize=thread this must report nothing.
// Catch2 assertions are not thread-safe: worker threads count failures, the main thread checks.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "../wqe/wqe_test_util.h"
#include "rnicdv/doorbell/register_lock.h"
#include "rnicdv/doorbell/send_doorbell.h"

using namespace rnicdv;
namespace db = rnicdv::doorbell;

TEST_CASE("every user of a register gets the same lock; registers spread over the table",
          "[doorbell]") {
  test::AlignedBuffer page(64 * 512);
  REQUIRE(&db::register_lock_for(page.data()) == &db::register_lock_for(page.data()));
  std::set<const db::RegisterLock*> distinct;
  for (int i = 0; i < 64; ++i) distinct.insert(&db::register_lock_for(page.data() + i * 512));
  REQUIRE(distinct.size() >= 48);
}

TEST_CASE("a register lock excludes other threads", "[doorbell]") {
  test::AlignedBuffer reg(64);
  db::RegisterLock& lock = db::register_lock_for(reg.data());
  uint64_t counter = 0;  // deliberately not atomic: the lock is the only protection
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        lock.lock();
        ++counter;
        lock.unlock();
      }
    });
  for (auto& thread : threads) thread.join();
  REQUIRE(counter == 60000);
}

TEST_CASE("QPs sharing a register ring it from several threads under db_lock", "[doorbell]") {
  constexpr int kQps = 3;
  constexpr int kRings = 4000;
  constexpr uint32_t kBfSize = 256;
  test::AlignedBuffer reg(2 * kBfSize, 0);
  std::atomic<bool> done{false};

  // The device side: the register only ever holds a whole 8-byte doorbell of some QP.
  std::atomic<uint64_t> device_reads{0};
  std::atomic<int> failures{0};
  std::thread device([&] {
    // One more pass after `done`, when the register certainly holds a doorbell.
    for (bool last = false; !last;) {
      last = done.load(std::memory_order_acquire);
      for (uint32_t half : {0u, kBfSize}) {
        const uint64_t raw = db::mmio_read64(reg.data() + half);
        if (raw == 0) continue;
        uint8_t bytes[8];
        std::memcpy(bytes, &raw, 8);
        const uint32_t qpn = (uint32_t{bytes[4]} << 16) | (uint32_t{bytes[5]} << 8) | bytes[6];
        if (bytes[3] != MLX5_OPCODE_NOP || qpn < 0x100 || qpn >= 0x100 + kQps) ++failures;
        device_reads.fetch_add(1, std::memory_order_relaxed);
      }
      db::cpu_relax();
    }
  });

  std::vector<std::thread> posters;
  for (int q = 0; q < kQps; ++q)
    posters.emplace_back([&, q] {
      test::TestSq sq(8);
      test::AlignedBuffer dbrec(8);
      db::SendDoorbell doorbell;
      if (doorbell.init(reg.data(), kBfSize, /*shared=*/true, db::DoorbellMode::automatic) !=
              Errc::ok ||
          doorbell.mode() != db::DoorbellMode::db_lock) {
        ++failures;
        return;
      }
      uint32_t pi = 0;
      for (int i = 0; i < kRings; ++i) {
        wqe::EncodedWqe enc;
        if (wqe::encode_nop_wqe(sq.ring, pi, 8, 0x100 + q, 1, 0, &enc) != Errc::ok) {
          ++failures;
          return;
        }
        pi += enc.bbs;
        doorbell.ring(reinterpret_cast<__be32*>(dbrec.data()), pi,
                      reinterpret_cast<const uint8_t*>(enc.ctrl), enc.ds, 1, sq.ring);
        if (db::load_dbr(reinterpret_cast<__be32*>(dbrec.data()) + MLX5_SND_DBR) != (pi & 0xffff))
          ++failures;
      }
    });
  for (auto& poster : posters) poster.join();
  done.store(true, std::memory_order_release);
  device.join();
  REQUIRE(failures.load() == 0);
  REQUIRE(device_reads.load() > 0);
}
