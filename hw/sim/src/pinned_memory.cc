// SPDX-License-Identifier: BSD-3-Clause
#include "pinned_memory.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace rnicdv::sim {

namespace {

constexpr uint64_t kBufferBytes = uint64_t{1} << 30;  // the kernel's limit for one buffer
constexpr unsigned kSlotsPerRing = 1u << 14;          // IORING_MAX_REG_BUFFERS
constexpr unsigned kRingEntries = 64;                 // SQEs of one chain, at most
constexpr size_t kMaxRings = 64;

std::atomic<bool> g_enabled{true};

}  // namespace

struct PinnedMemory::Ring {
  io_uring uring{};
  bool ok = false;
  std::vector<uint16_t> free;

  Ring() = default;
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;
  ~Ring() {
    if (ok) io_uring_queue_exit(&uring);
  }
  // A ring whose table of registered buffers is all empty slots.
  int open() {
    // SUBMIT_ALL: an op refused at submission completes with its error instead of leaving the
    // rest of its chain unsubmitted in the ring for the next access to send.
    int rc = io_uring_queue_init(kRingEntries, &uring, IORING_SETUP_SUBMIT_ALL);
    if (rc == -EINVAL) rc = io_uring_queue_init(kRingEntries, &uring, 0);
    if (rc < 0) return rc;
    ok = true;
    rc = io_uring_register_buffers_sparse(&uring, kSlotsPerRing);
    if (rc < 0) return rc;
    free.reserve(kSlotsPerRing);
    for (unsigned i = kSlotsPerRing; i-- > 0;) free.push_back(static_cast<uint16_t>(i));
    return 0;
  }
};

bool PinnedMemory::supported() noexcept {
  static const bool works = [] {
    Ring probe;
    if (probe.open() < 0) return false;
    // A buffer registers and its slot empties again.
    alignas(64) static uint8_t page[64];
    iovec iov{page, sizeof page};
    __u64 tag = 0;
    if (io_uring_register_buffers_update_tag(&probe.uring, 0, &iov, &tag, 1) != 1) return false;
    iovec none{nullptr, 0};
    return io_uring_register_buffers_update_tag(&probe.uring, 0, &none, &tag, 1) == 1;
  }();
  return works;
}

void PinnedMemory::set_enabled(bool on) noexcept {
  g_enabled.store(on, std::memory_order_relaxed);
}

PinnedMemory::PinnedMemory(const std::string& device_name) : name_(device_name) {
  regions_.resize(1);
  scratch_.reserve(2 * kRingEntries);
}

PinnedMemory::~PinnedMemory() {
  std::lock_guard lock(mu_);
  close_locked();
}

// The pipe the copies go through. Opened with the first pinned region, closed with the last:
// a device whose regions are all gone holds no descriptor for them.
Status PinnedMemory::open_locked() {
  if (pipe_[0] >= 0) return Status::ok();
  if (::pipe2(pipe_, O_NONBLOCK | O_CLOEXEC) != 0) {
    pipe_[0] = pipe_[1] = -1;
    return Status::error(Errc::no_resources, "%s: reg_mr: no pipe for pinned memory: %s", name_.c_str(),
                         std::strerror(errno));
  }
  // A pipe holds 16 pages, or fewer once the user's pipe pages pass pipe-user-pages-soft.
  const int cap = ::fcntl(pipe_[0], F_GETPIPE_SZ);
  pipe_bytes_ = cap > 0 ? static_cast<size_t>(cap) : 4096;
  return Status::ok();
}

void PinnedMemory::close_locked() noexcept {
  rings_.clear();  // unregisters every buffer: the pages are unpinned
  for (int& fd : pipe_) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
}

Result<uint16_t> PinnedMemory::ring_with_room_locked(size_t slots) {
  for (size_t i = 0; i < rings_.size(); ++i)
    if (rings_[i]->free.size() >= slots) return static_cast<uint16_t>(i);
  if (rings_.size() >= kMaxRings)
    return Status::error(Errc::no_resources, "%s: reg_mr: %zu pinned buffers in use", name_.c_str(),
                         kMaxRings * kSlotsPerRing);
  auto ring = std::make_unique<Ring>();
  if (int rc = ring->open(); rc < 0)
    return Status::error(Errc::no_resources, "%s: reg_mr: no io_uring for pinned memory: %s", name_.c_str(),
                         std::strerror(-rc));
  rings_.push_back(std::move(ring));
  return static_cast<uint16_t>(rings_.size() - 1);
}

Result<PinRef> PinnedMemory::pin(uint8_t* addr, uint64_t len) {
  // RNICDV_SIM_REGISTER_BY_ADDRESS=1: every region by address (the benchmarks' baseline).
  static const bool by_address = [] {
    const char* v = std::getenv("RNICDV_SIM_REGISTER_BY_ADDRESS");
    return v && std::strcmp(v, "1") == 0;
  }();
  if (by_address || !g_enabled.load(std::memory_order_relaxed) || !supported() || len == 0)
    return PinRef{};
  std::lock_guard lock(mu_);
  RNICDV_TRY(open_locked());
  const size_t nslots = static_cast<size_t>((len + kBufferBytes - 1) / kBufferBytes);
  if (nslots > kSlotsPerRing)
    return Status::error(Errc::invalid_argument,
                         "%s: reg_mr: %llu bytes is above what can be pinned", name_.c_str(),
                         static_cast<unsigned long long>(len));
  Result<uint16_t> ring_index = ring_with_room_locked(nslots);
  if (!ring_index) {
    if (live_ == 0) close_locked();
    return ring_index.status();
  }
  Ring& ring = *rings_[ring_index.value()];
  std::vector<uint16_t> slots;
  slots.reserve(nslots);
  int failed = 0;
  for (size_t i = 0; i < nslots; ++i) {
    const uint64_t off = i * kBufferBytes;
    iovec iov{addr + off, static_cast<size_t>(std::min(kBufferBytes, len - off))};
    __u64 tag = 0;
    const uint16_t slot = ring.free.back();
    const int rc = io_uring_register_buffers_update_tag(&ring.uring, slot, &iov, &tag, 1);
    if (rc != 1) {
      failed = rc < 0 ? -rc : EIO;
      break;
    }
    ring.free.pop_back();
    slots.push_back(slot);
  }
  if (failed != 0) {
    for (uint16_t slot : slots) {
      iovec none{nullptr, 0};
      __u64 tag = 0;
      io_uring_register_buffers_update_tag(&ring.uring, slot, &none, &tag, 1);
      ring.free.push_back(slot);
    }
    if (live_ == 0) close_locked();
    // The kernel will not hold these pages long-term (a read-only mapping, a shared mapping
    // of a regular file, memory that is not mapped): the region is accessed by address.
    if (failed == EFAULT || failed == EOPNOTSUPP || failed == EPERM)
      return PinRef{};
    if (failed == ENOMEM) {
      rlimit lim{};
      ::getrlimit(RLIMIT_MEMLOCK, &lim);
      return Status::error(Errc::no_resources,
                           "%s: reg_mr: the kernel refused to pin %llu bytes: locked memory is "
                           "limited to %llu KiB (RLIMIT_MEMLOCK, ulimit -l) without CAP_IPC_LOCK",
                           name_.c_str(), static_cast<unsigned long long>(len),
                           static_cast<unsigned long long>(lim.rlim_cur / 1024));
    }
    return Status::error(Errc::no_resources, "%s: reg_mr: the kernel refused to pin %llu bytes: %s",
                         name_.c_str(), static_cast<unsigned long long>(len), std::strerror(failed));
  }
  uint32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<uint32_t>(regions_.size());
    regions_.emplace_back();
  }
  Region& r = regions_[id];
  r.base = addr;
  r.length = len;
  r.live = true;
  r.ring = ring_index.value();
  r.slots = std::move(slots);
  ++live_;
  return PinRef{this, id, r.gen};
}

void PinnedMemory::unpin(PinRef ref) noexcept {
  if (ref.owner != this) return;
  std::lock_guard lock(mu_);
  if (ref.id == 0 || ref.id >= regions_.size()) return;
  Region& r = regions_[ref.id];
  if (!r.live || r.gen != ref.gen) return;
  Ring& ring = *rings_[r.ring];
  for (uint16_t slot : r.slots) {
    iovec none{nullptr, 0};
    __u64 tag = 0;
    io_uring_register_buffers_update_tag(&ring.uring, slot, &none, &tag, 1);
    ring.free.push_back(slot);
  }
  r.slots.clear();
  r.live = false;
  ++r.gen;
  free_ids_.push_back(ref.id);
  if (--live_ == 0) close_locked();
}

const PinnedMemory::Region* PinnedMemory::region_locked(PinRef ref, const uint8_t* va,
                                                        size_t n) const noexcept {
  if (ref.id == 0 || ref.id >= regions_.size()) return nullptr;
  const Region& r = regions_[ref.id];
  if (!r.live || r.gen != ref.gen || va < r.base) return nullptr;
  const uint64_t off = static_cast<uint64_t>(va - r.base);
  if (off > r.length || n > r.length - off) return nullptr;
  return &r;
}

// Splits [va, va+n) of region `r` into ops: none crosses a registered buffer's end or moves
// more than the pipe holds.
void PinnedMemory::add_pieces_locked(const Region& r, uint8_t* va, size_t n) {
  while (n != 0) {
    const uint64_t off = static_cast<uint64_t>(va - r.base);
    const uint64_t in_buffer = kBufferBytes - off % kBufferBytes;
    const size_t take = static_cast<size_t>(std::min<uint64_t>({n, in_buffer, pipe_bytes_}));
    scratch_.push_back(Piece{r.slots[off / kBufferBytes], va, static_cast<uint32_t>(take)});
    va += take;
    n -= take;
  }
}

// Runs scratch_'s pieces as linked chains of two ops each: into the pipe, out of it. A chain
// holds as many pieces as the ring's submission queue; the next chain starts when it is done.
bool PinnedMemory::run_locked(Ring& ring, bool placing, const uint8_t* va0, const uint8_t* src,
                              uint8_t* dst) noexcept {
  constexpr size_t kPiecesPerChain = kRingEntries / 2;
  bool ok = true;
  for (size_t first = 0; first < scratch_.size() && ok; first += kPiecesPerChain) {
    const size_t last = std::min(scratch_.size(), first + kPiecesPerChain);
    unsigned sqes = 0;
    for (size_t i = first; i < last; ++i) {
      const Piece& p = scratch_[i];
      const size_t at = static_cast<size_t>(p.va - va0);
      io_uring_sqe* in = io_uring_get_sqe(&ring.uring);
      io_uring_sqe* out = io_uring_get_sqe(&ring.uring);
      if (placing) {
        io_uring_prep_write(in, pipe_[1], src + at, p.n, 0);
        io_uring_prep_read_fixed(out, pipe_[0], p.va, p.n, 0, p.index);
      } else {
        io_uring_prep_write_fixed(in, pipe_[1], p.va, p.n, 0, p.index);
        io_uring_prep_read(out, pipe_[0], dst + at, p.n, 0);
      }
      in->user_data = p.n;
      out->user_data = p.n;
      in->flags |= IOSQE_IO_LINK;
      if (i + 1 < last) out->flags |= IOSQE_IO_LINK;
      sqes += 2;
    }
    int submitted;
    do {
      submitted = io_uring_submit(&ring.uring);
    } while (submitted == -EINTR);
    if (submitted < 0) {
      ok = false;
      break;
    }
    // Every op of the chain completes (or is cancelled) before the next use of the ring.
    for (int i = 0; i < submitted; ++i) {
      io_uring_cqe* cqe = nullptr;
      int rc;
      do {
        rc = io_uring_wait_cqe(&ring.uring, &cqe);
      } while (rc == -EINTR);
      if (rc < 0) {
        ok = false;
        break;
      }
      if (cqe->res < 0 || static_cast<uint64_t>(cqe->res) != cqe->user_data) ok = false;
      io_uring_cqe_seen(&ring.uring, cqe);
    }
    if (static_cast<unsigned>(submitted) != sqes) ok = false;
  }
  scratch_.clear();
  if (!ok) drain_pipe_locked();
  return ok;
}

// After a failed chain the pipe may hold bytes that were never taken out.
void PinnedMemory::drain_pipe_locked() noexcept {
  uint8_t sink[4096];
  while (::read(pipe_[0], sink, sizeof sink) > 0) {
  }
}

bool PinnedMemory::read(PinRef ref, const uint8_t* va, void* dst, size_t n) noexcept {
  if (n == 0) return true;
  std::lock_guard lock(mu_);
  const Region* r = region_locked(ref, va, n);
  if (!r) return false;
  scratch_.clear();
  add_pieces_locked(*r, const_cast<uint8_t*>(va), n);
  return run_locked(*rings_[r->ring], false, va, nullptr, static_cast<uint8_t*>(dst));
}

bool PinnedMemory::place(PinRef ref, uint8_t* va, const void* src, size_t n, size_t last) noexcept {
  if (n == 0) return true;
  std::lock_guard lock(mu_);
  const Region* r = region_locked(ref, va, n);
  if (!r) return false;
  // The final bytes are an op of their own, the chain's last.
  const size_t tail = std::min(last == 0 ? n : last, n);
  scratch_.clear();
  add_pieces_locked(*r, va, n - tail);
  add_pieces_locked(*r, va + (n - tail), tail);
  return run_locked(*rings_[r->ring], true, va, static_cast<const uint8_t*>(src), nullptr);
}

}  // namespace rnicdv::sim
