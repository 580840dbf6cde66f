// SPDX-License-Identifier: BSD-3-Clause
// Two threaded simulated HCAs on the in-process wire, connected, with one 64-byte WRITE from
// a's buffer to b's: what the tests of idle devices and their wake-ups share
// (doorbell_wake.cc, guest_program.cc).
#pragma once

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "sim_harness.h"

namespace simtest {

inline FabricOptions threaded_inproc() {
  FabricOptions fo;
  fo.mode = sim::ExecMode::threaded;
  fo.wire = sim::WireKind::inproc;
  return fo;
}

// Whether the host's device thread sleeps, as its CQ's view publishes it to a driver
// (hw::DeviceWakeView).
inline bool device_asleep(const Host& h) {
  const hw::DeviceWakeView& w = h.scq->cq->view().wake;
  return w.asleep && w.asleep->load(std::memory_order_acquire) != 0;
}

struct Traffic {
  Pair p{threaded_inproc()};
  Buffer src, dst;
  uint8_t next_fill = 1;

  Traffic() {
    ConnectOptions o;
    o.timeout = 14;
    p.connect(o, o);
    src = p.a.reg(64, all_remote(), 0);
    dst = p.b.reg(64);
  }
  bool idle() const { return device_asleep(p.a); }
  // Until a's device thread sleeps, and past its last look before the sleep (a doorbell
  // stored before that look is found by it, without a wake-up).
  void wait_idle() {
    REQUIRE(wait_real([&] { return idle(); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    REQUIRE(idle());
  }
  SendWr write_wr() {
    std::memset(src.data(), next_fill, 64);
    static Sge sge;
    sge = Sge{src.addr(), 64, src.lkey()};
    SendWr w = make_wr(WrOpcode::rdma_write, &sge, 1);
    w.remote_addr = dst.addr();
    w.rkey = dst.rkey();
    return w;
  }
  // Posts one WRITE and rings (as the driver does: register write, then the kick).
  Errc post() { return p.a.post_and_ring(write_wr()); }
  // The WRITE completed and its bytes landed.
  bool landed() {
    Completion c{};
    if (!wait_real([&] { return p.a.poll_send(&c); }, 30)) return false;
    const bool ok =
        c.status == IBV_WC_SUCCESS && dst.data()[0] == next_fill && dst.data()[63] == next_fill;
    ++next_fill;
    return ok;
  }
};

}  // namespace simtest
