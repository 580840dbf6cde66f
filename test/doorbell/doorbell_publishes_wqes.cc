// SPDX-License-Identifier: BSD-3-Clause
// The whole send protocol across threads: a poster encodes WQEs and rings (db and bf), a device
// thread waits for the doorbell record to move, then decodes every WQE up to it. The device
// must see each WQE complete, which holds only if the record store is ordered after the WQE
// stores (to_device_barrier + store_dbr's release) and the device acquires the record. Under
// ThreadSanitizer a missing edge is reported as a race on the ring.
#include <atomic>
#include <catch2/catch.hpp>
#include <memory>
#include <thread>
#include <vector>

#include "../wqe/wqe_test_util.h"
#include "rnicdv/doorbell/send_doorbell.h"
#include "rnicdv/wqe/decode.h"

using namespace rnicdv;
namespace db = rnicdv::doorbell;

namespace {

constexpr uint32_t kQpn = 0x51;
constexpr uint32_t kRingBbs = 16;
constexpr uint32_t kWqes = 2000;

// The request for sequence number n: its content is a function of n, so the device can check
// what it decoded without sharing anything else with the poster.
SendWr request_for(uint32_t n, std::vector<Sge>& sges, const uint8_t* payload) {
  sges.clear();
  SendWr wr;
  wr.opcode = (n % 3 == 0) ? WrOpcode::rdma_write_imm : WrOpcode::send_imm;
  wr.imm_data = n;
  wr.remote_addr = 0x10000ull * n;
  wr.rkey = n ^ 0x5555;
  if (n % 4 == 1) {
    wr.flags = send_flags::inline_data;
    sges.push_back({reinterpret_cast<uintptr_t>(payload + (n % 64)), 1 + n % 150, 0});
  } else {
    for (uint32_t i = 0; i < 1 + n % 5; ++i) sges.push_back({uint64_t{n} << 16 | i, 64 + i, n});
  }
  wr.sg_list = sges.data();
  wr.num_sge = static_cast<uint32_t>(sges.size());
  return wr;
}

void run(db::DoorbellMode mode, uint32_t batch) {
  test::TestSq sq(kRingBbs, 0);
  test::AlignedBuffer dbrec_mem(8, 0);
  test::AlignedBuffer reg(512, 0);
  auto* dbrec = reinterpret_cast<__be32*>(dbrec_mem.data());
  std::vector<uint8_t> payload(256);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 3);

  std::atomic<uint32_t> device_pi{0};  // BBs the device has consumed (its "CQE" feedback)
  std::atomic<int> failures{0};

  std::thread device([&] {
    auto decoded = std::make_unique<wqe::DecodedSendWqe>();
    std::vector<uint8_t> inline_buf(1008);
    std::vector<Sge> sges;
    uint32_t pi = 0;
    for (uint32_t n = 0; n < kWqes;) {
      const uint32_t dbr = db::load_dbr(dbrec + MLX5_SND_DBR);  // acquire
      while (n < kWqes && (pi & 0xffff) != dbr) {
        if (wqe::decode_send_wqe(sq.ring, pi, kQpn, decoded.get(), inline_buf.data(),
                                 static_cast<uint32_t>(inline_buf.size())) !=
            wqe::WqeDefect::none) {
          ++failures;
          return;
        }
        const SendWr wr = request_for(n, sges, payload.data());
        bool ok = decoded->imm == wr.imm_data && decoded->wqe_index == (pi & 0xffff) &&
                  decoded->opcode == static_cast<uint8_t>(wr.opcode);
        if (wr.flags & send_flags::inline_data)
          ok = ok && decoded->inline_bytes == wr.sg_list[0].length &&
               std::equal(inline_buf.begin(), inline_buf.begin() + decoded->inline_bytes,
                          reinterpret_cast<const uint8_t*>(wr.sg_list[0].addr));
        else
          ok = ok && decoded->num_entries == wr.num_sge &&
               decoded->entries[wr.num_sge - 1].addr == wr.sg_list[wr.num_sge - 1].addr;
        if (!ok) ++failures;
        pi += decoded->bbs;
        ++n;
        device_pi.store(pi, std::memory_order_release);
      }
      db::cpu_relax();
    }
  });

  db::SendDoorbell doorbell;
  REQUIRE(doorbell.init(reg.data(), 256, false, mode) == Errc::ok);
  std::vector<Sge> sges;
  uint32_t pi = 0;
  uint32_t in_batch = 0;
  wqe::EncodedWqe last{};
  for (uint32_t n = 0; n < kWqes; ++n) {
    const SendWr wr = request_for(n, sges, payload.data());
    wqe::EncodedWqe enc;
    Errc err;
    // Wait for room: the device frees BBs as it consumes WQEs. A batch is rung before
    // waiting, or the device would never see it.
    while ((err = wqe::encode_send_wqe(sq.ring, pi,
                                       kRingBbs - (pi - device_pi.load(std::memory_order_acquire)),
                                       kQpn, wr, {8, 256}, 0, &enc)) == Errc::queue_full) {
      if (in_batch) {
        doorbell.ring(dbrec, pi, reinterpret_cast<const uint8_t*>(last.ctrl), last.ds, in_batch,
                      sq.ring);
        in_batch = 0;
      }
      std::this_thread::yield();
    }
    REQUIRE(err == Errc::ok);
    pi += enc.bbs;
    last = enc;
    if (++in_batch == batch) {
      doorbell.ring(dbrec, pi, reinterpret_cast<const uint8_t*>(last.ctrl), last.ds, in_batch,
                    sq.ring);
      in_batch = 0;
    }
  }
  if (in_batch)
    doorbell.ring(dbrec, pi, reinterpret_cast<const uint8_t*>(last.ctrl), last.ds, in_batch,
                  sq.ring);
  device.join();
  REQUIRE(failures.load() == 0);
  REQUIRE(device_pi.load() == pi);
}

}  // namespace

TEST_CASE("a device thread sees every WQE whole once the doorbell record covers it", "[doorbell]") {
  SECTION("bf mode, one WQE per doorbell") {
    run(db::DoorbellMode::bf, 1);
  }
  SECTION("db mode, batches of 7") {
    run(db::DoorbellMode::db, 7);
  }
  SECTION("db_lock mode, batches of 3") {
    run(db::DoorbellMode::db_lock, 3);
  }
}
