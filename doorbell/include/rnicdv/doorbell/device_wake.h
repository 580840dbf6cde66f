// SPDX-License-Identifier: BSD-3-Clause
// Waking a device that sleeps between doorbells.
//
// A ConnectX sees a register write at once, whatever it was doing. A device made of software
// (the simulated HCA) runs on a thread that sleeps when it has nothing to do: it publishes a
// word that is non-zero while it sleeps, and an eventfd that wakes it. After its register
// write, a driver that finds the word set writes the eventfd; otherwise it does nothing, so a
// busy device costs no system call. On hardware there is no word (a null pointer): the send
// doorbell then takes its plain path, which tests nothing more than the doorbell mode
// (send_doorbell.h), and the CQ arm tests the pointer.
//
// The ordering is the classic pair of a store then a load on each side: the driver stores the
// register, then (after a full fence) loads the word; the device stores the word, then (after
// a full fence) looks at its registers one last time before it sleeps. One of the two sees
// the other's store, so a doorbell is never left unseen by a sleeping device.
#pragma once

#include <atomic>
#include <cstdint>

namespace rnicdv::doorbell {

class DeviceWake {
 public:
  // `asleep` null: a device that needs no wake-up (hardware). Otherwise it and `kick_fd`
  // (an eventfd) must outlive every doorbell rung through this object.
  void init(const std::atomic<uint32_t>* asleep, int kick_fd) noexcept {
    asleep_ = asleep;
    fd_ = kick_fd;
  }
  bool needed() const noexcept { return asleep_ != nullptr; }

  // After a register write (a doorbell or a CQ arm).
  [[gnu::always_inline]] void after_register_write() const noexcept {
    if (asleep_ != nullptr) [[unlikely]]
      kick_if_asleep();
  }

 private:
  [[gnu::cold, gnu::noinline]] void kick_if_asleep() const noexcept;

  const std::atomic<uint32_t>* asleep_ = nullptr;
  int fd_ = -1;
};

}  // namespace rnicdv::doorbell
