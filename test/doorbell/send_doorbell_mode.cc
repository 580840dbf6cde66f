// SPDX-License-Identifier: BSD-3-Clause
// SendDoorbell::init chooses the doorbell mode once, and refuses modes the register cannot
// support.
#include <catch2/catch.hpp>
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
