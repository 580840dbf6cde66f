// SPDX-License-Identifier: BSD-3-Clause
// SendDoorbell::init chooses the doorbell mode once, and refuses modes the register cannot
// support; set_wake makes every mode wake a sleeping device.
#include <catch2/catch.hpp>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <string>

#include "../wqe/wqe_test_util.h"
#include "rnicdv/doorbell/send_doorbell.h"

using namespace rnicdv;
namespace db = rnicdv::doorbell;
using db::DoorbellMode;

TEST_CASE("automatic resolves to bf, db_lock or db from the register", "[doorbell]") {
  test::AlignedBuffer reg(1024);
  db::SendDoorbell doorbell;
  REQUIRE(doorbell.init(reg.data(), 256, /*shared=*/false, DoorbellMode::automatic) == Errc::ok);
  REQUIRE(doorbell.mode() == DoorbellMode::bf);
  REQUIRE(doorbell.init(reg.data(), 256, /*shared=*/true, DoorbellMode::automatic) == Errc::ok);
  REQUIRE(doorbell.mode() == DoorbellMode::db_lock);
  REQUIRE(doorbell.init(reg.data(), 0, /*shared=*/false, DoorbellMode::automatic) == Errc::ok);
  REQUIRE(doorbell.mode() == DoorbellMode::db);
  REQUIRE(doorbell.init(reg.data(), 0, /*shared=*/true, DoorbellMode::automatic) == Errc::ok);
  REQUIRE(doorbell.mode() == DoorbellMode::db_lock);
}

TEST_CASE("explicit modes are kept when the register allows them", "[doorbell]") {
  test::AlignedBuffer reg(1024);
  db::SendDoorbell doorbell;
  REQUIRE(doorbell.init(reg.data(), 256, false, DoorbellMode::db) == Errc::ok);
  REQUIRE(doorbell.mode() == DoorbellMode::db);
  REQUIRE(doorbell.init(reg.data(), 256, false, DoorbellMode::db_lock) == Errc::ok);
  REQUIRE(doorbell.mode() == DoorbellMode::db_lock);
  REQUIRE(doorbell.init(reg.data(), 256, false, DoorbellMode::bf) == Errc::ok);
  REQUIRE(doorbell.mode() == DoorbellMode::bf);
  REQUIRE(doorbell.bf_offset() == 0);
}

TEST_CASE("BlueFlame is refused on a shared register and without a BlueFlame buffer",
          "[doorbell]") {
  test::AlignedBuffer reg(1024);
  db::SendDoorbell doorbell;
  REQUIRE(doorbell.init(reg.data(), 256, false, DoorbellMode::db) == Errc::ok);
  REQUIRE(doorbell.init(reg.data(), 256, /*shared=*/true, DoorbellMode::bf) ==
          Errc::invalid_argument);
  REQUIRE(doorbell.init(reg.data(), 0, false, DoorbellMode::bf) == Errc::invalid_argument);
  REQUIRE(doorbell.init(reg.data(), 100, false, DoorbellMode::bf) == Errc::invalid_argument);
  REQUIRE(doorbell.init(reg.data() + 16, 256, false, DoorbellMode::bf) == Errc::invalid_argument);
  // A refused init changes nothing.
  REQUIRE(doorbell.mode() == DoorbellMode::db);
}

TEST_CASE("a null or misaligned register, or an unknown mode, is invalid_argument", "[doorbell]") {
  test::AlignedBuffer reg(1024);
  db::SendDoorbell doorbell;
  for (DoorbellMode mode : {DoorbellMode::automatic, DoorbellMode::db, DoorbellMode::db_lock}) {
    REQUIRE(doorbell.init(nullptr, 0, false, mode) == Errc::invalid_argument);
    REQUIRE(doorbell.init(reg.data() + 4, 0, false, mode) == Errc::invalid_argument);
  }
  REQUIRE(doorbell.init(reg.data(), 0, false, static_cast<DoorbellMode>(9)) ==
          Errc::invalid_argument);
}

TEST_CASE("doorbell mode names", "[doorbell]") {
  REQUIRE(std::string(db::doorbell_mode_name(DoorbellMode::automatic)) == "auto");
  REQUIRE(std::string(db::doorbell_mode_name(DoorbellMode::db)) == "db");
  REQUIRE(std::string(db::doorbell_mode_name(DoorbellMode::bf)) == "bf");
  REQUIRE(std::string(db::doorbell_mode_name(DoorbellMode::db_lock)) == "db_lock");
}

// A device that sleeps between doorbells (doorbell/device_wake.h): after the register write,
// ring and ring_with_head write its eventfd once while its sleep word is set, in every mode,
// whichever of init and set_wake came first; the staged count is cleared; without a wake-up
// nothing is written.
TEST_CASE("every doorbell mode wakes a sleeping device once, whichever of init and set_wake "
          "came first",
          "[doorbell]") {
  alignas(4096) static uint8_t reg[4096];
  alignas(64) static uint8_t sq[64 * 16];
  __be32 dbrec[2] = {};
  const wqe::SqRing ring{sq, 16};
  std::atomic<uint32_t> asleep{1};
  const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  REQUIRE(fd >= 0);
  const auto kicks = [fd] {
    uint64_t n = 0;
    return ::read(fd, &n, sizeof n) == static_cast<ssize_t>(sizeof n) ? n : 0;
  };
  for (DoorbellMode mode : {DoorbellMode::db, DoorbellMode::bf, DoorbellMode::db_lock}) {
    for (int order = 0; order < 3; ++order) {
      INFO("mode " << db::doorbell_mode_name(mode) << ", order " << order);
      db::SendDoorbell d;
      if (order == 0) {
        d.set_wake(&asleep, fd);
        REQUIRE(d.init(reg, 256, false, mode) == Errc::ok);
      } else if (order == 1) {
        REQUIRE(d.init(reg, 256, false, mode) == Errc::ok);
        d.set_wake(&asleep, fd);
      } else {  // set_wake on a bf doorbell, then init again in this mode
        REQUIRE(d.init(reg, 256, false, DoorbellMode::bf) == Errc::ok);
        d.set_wake(&asleep, fd);
        REQUIRE(d.init(reg, 256, false, mode) == Errc::ok);
      }
      uint32_t staged = 3;
      d.ring_with_head(dbrec, 1, 0x1234, sq, 4, staged, ring);
      CHECK(staged == 0);
      CHECK(kicks() == 1);
      d.ring(dbrec, 2, sq, 4, 2, ring);
      CHECK(kicks() == 1);
      asleep.store(0);  // awake: nothing to write
      d.ring(dbrec, 3, sq, 4, 1, ring);
      CHECK(kicks() == 0);
      asleep.store(1);
    }
  }
  db::SendDoorbell plain;  // hardware: no sleep word
  REQUIRE(plain.init(reg, 256, false, DoorbellMode::db) == Errc::ok);
  uint32_t staged = 5;
  plain.ring_with_head(dbrec, 1, 0x1234, sq, 4, staged, ring);
  CHECK(staged == 0);
  CHECK(kicks() == 0);
  ::close(fd);
}
