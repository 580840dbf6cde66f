// SPDX-License-Identifier: BSD-3-Clause
// Waking a sleeping device on the first store into a UAR page that the application maps.
//
// libmlx5 (through the uverbs shim) rings a doorbell with a store, not a call, so a device
// thread asleep in ppoll cannot be told of it the way rnicdv's driver tells it
// (doorbell/device_wake.h). The device reads its registers through a mapping of its own
// (Hca::attach_uar_page); the application's mappings of the same pages are registered here
// with userfaultfd for write-protection. Before the device thread sleeps it write-protects
// them; the first store into one then waits in the kernel, and the userfaultfd, which is in
// the device thread's poll set beside its eventfd, becomes readable. The device takes the
// event and looks at the QPs whose registers are in that page (libmlx5 writes their doorbell
// records before the store), then removes the protection, and the waiting store completes.
// (Removing it first would put the kernel's TLB shootdown, tens of microseconds on a VM,
// between the doorbell and its execution.)
// No signal is involved: the storing thread is not interrupted, it only waits for the device
// for one thread wake-up and the engine pass that takes its doorbell.
//
// Where userfaultfd is refused (a kernel older than 5.19, whose shared-memory pages it cannot
// write-protect, a seccomp filter, or vm.unprivileged_userfaultfd on a kernel without
// UFFD_USER_MODE_ONLY), available() is false and the device polls its registers instead,
// sleeping at most a millisecond at a time (device_thread.cc).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace rnicdv::sim {

class UarWatch {
 public:
  UarWatch() = default;
  ~UarWatch();
  UarWatch(const UarWatch&) = delete;
  UarWatch& operator=(const UarWatch&) = delete;

  // Opens the userfaultfd (once). Empty when it works; otherwise why not, for a log line.
  std::string open();
  bool available() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  // Watches the application's mapping of a UAR page (4 KiB, page-aligned, a shared mapping).
  // False when it cannot be watched: the device must then poll.
  bool add(uint8_t* page);
  // Stops watching it (a store waiting on it completes).
  void remove(uint8_t* page);

  // Write-protects the watched pages among `pages` (the ones software may ring now: each
  // write-protection costs the kernel a TLB shootdown). False when one could not be protected
  // (it was unmapped since, say), or was never watched: the device must not sleep without a
  // timeout then.
  bool arm(const std::vector<uint8_t*>& pages);
  // Removes every protection: an awake device reads its registers itself, and a store must
  // not wait for it.
  void disarm();
  // Takes every pending event and appends each page a store waits on to `rung`. The stores
  // go on waiting until disarm(): the device takes the doorbell first (the records were
  // written before the store), and lets the stores complete after.
  void take_events(std::vector<uint8_t*>* rung);

  // What the process's kernel offers, probed once: "userfaultfd" or the reason it is not
  // used (for the uverbs shim's log).
  static const std::string& mechanism();

 private:
  struct Page {
    uint8_t* addr;
    bool armed;
  };
  bool protect(Page& p, bool on);

  int fd_ = -1;
  mutable std::mutex mu_;
  std::vector<Page> pages_;
};

}  // namespace rnicdv::sim
