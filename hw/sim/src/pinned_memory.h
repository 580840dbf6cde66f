// SPDX-License-Identifier: BSD-3-Clause
// Registered memory held as a ConnectX holds it: by its pages, not by its address.
//
// ibv_reg_mr on a real device pins the region's pages (get_user_pages with FOLL_LONGTERM) and
// gives the HCA their physical addresses. From then on the device reads and writes those pages
// whatever the program does to its own mapping: after munmap, a MAP_FIXED mapping over the
// range, mremap or MADV_DONTNEED, the program sees new memory and the device still sees the
// registered pages, which stay allocated until deregistration. Nothing of the new mapping is
// touched or disclosed.
//
// The simulated device gets the same hold through io_uring's registered buffers: registering
// a buffer pins its pages with the same long-term pin, charges them to RLIMIT_MEMLOCK as
// ib_umem_get does (unless the process has CAP_IPC_LOCK), and ops on a registered buffer name
// it by index and offset: the kernel copies to and from the pinned pages, and never looks at
// the program's mapping again. A region is one registered buffer per GiB (the kernel's limit
// for one buffer).
//
// The device copies through a pipe of its own: a payload goes into the pipe (a write from the
// device's memory) and out of it into the pinned pages (IORING_OP_READ_FIXED); a read goes the
// other way (IORING_OP_WRITE_FIXED into the pipe, then a read into the device's memory). The
// ops of one access are linked into one chain, so they run one after the other in one system
// call; a placement's final bytes are a copy of their own at the end of the chain (host_place's
// promise, docs/design.md invariant 10). The kernel copies between pages with its memcpy:
// `rep movsb` on CPUs with fast short moves (FSRM), which stores each byte once; without FSRM
// its copy of a short tail stores some bytes twice within a few instructions.
//
// What the kernel will not pin long-term is registered as before, by address (host_access.h):
// a read-only mapping (the pin is always a write pin) and a shared mapping of a regular file
// (Linux refuses long-term write pins of file pages that need dirty tracking). Where io_uring
// is not available (a seccomp filter, a kernel without registered buffers) every region is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rnicdv/status.h"

namespace rnicdv::sim {

class PinnedMemory;

// A region's hold on its pages. `owner` null: the region is accessed by address.
struct PinRef {
  PinnedMemory* owner = nullptr;
  uint32_t id = 0;   // the region's slot in `owner`
  uint32_t gen = 0;  // changes when the slot is released: a stale reference faults
  explicit operator bool() const noexcept { return owner != nullptr; }
};

// The pinned regions of one device. Thread-safe.
class PinnedMemory {
 public:
  // `device_name` names the device in errors; it outlives this object.
  explicit PinnedMemory(const std::string& device_name);
  ~PinnedMemory();
  PinnedMemory(const PinnedMemory&) = delete;
  PinnedMemory& operator=(const PinnedMemory&) = delete;

  // Pins [addr, addr+len). Errors: RLIMIT_MEMLOCK exceeded (no_resources, the kernel's
  // ENOMEM), or no io_uring slots left (no_resources). Ranges the kernel will not pin
  // long-term, and every range where io_uring is unavailable, give an empty reference: the
  // region is accessed by address.
  Result<PinRef> pin(uint8_t* addr, uint64_t len);
  // Releases a region's pages; a reference to it faults from then on.
  void unpin(PinRef ref) noexcept;

  // Copies `n` bytes at `va` (inside the region of `ref`) into `dst`. False if the region is
  // gone or the kernel refused a step.
  bool read(PinRef ref, const uint8_t* va, void* dst, size_t n) noexcept;
  // Places `n` bytes from `src` at `va`, each byte once, the final `last` bytes last.
  bool place(PinRef ref, uint8_t* va, const void* src, size_t n, size_t last) noexcept;

  // Whether this process can pin at all (probed once).
  static bool supported() noexcept;
  // Off: regions registered from now on are accessed by address, as where io_uring is not
  // available (the tests of that path turn it off).
  static void set_enabled(bool on) noexcept;

 private:
  struct Ring;
  struct Region {
    uint8_t* base = nullptr;
    uint64_t length = 0;
    uint32_t gen = 0;
    bool live = false;
    uint16_t ring = 0;
    std::vector<uint16_t> slots;  // the ring's registered buffer for each GiB
  };
  struct Piece {  // one registered-buffer op: `n` bytes at `va` of registered buffer `index`
    uint16_t index;
    uint8_t* va;
    uint32_t n;
  };

  Status open_locked();
  Result<uint16_t> ring_with_room_locked(size_t slots);
  const Region* region_locked(PinRef ref, const uint8_t* va, size_t n) const noexcept;
  void add_pieces_locked(const Region& r, uint8_t* va, size_t n);
  bool run_locked(Ring& ring, bool placing, const uint8_t* va0, const uint8_t* src,
                  uint8_t* dst) noexcept;
  void drain_pipe_locked() noexcept;
  void close_locked() noexcept;

  std::mutex mu_;
  const std::string& name_;
  int pipe_[2] = {-1, -1};
  size_t pipe_bytes_ = 0;  // the pipe's capacity: the most one op moves
  std::vector<std::unique_ptr<Ring>> rings_;
  std::vector<Region> regions_;  // slot 0 unused: id 0 means "none"
  std::vector<uint32_t> free_ids_;
  size_t live_ = 0;
  std::vector<Piece> scratch_;
};

}  // namespace rnicdv::sim
