// SPDX-License-Identifier: BSD-3-Clause
// QPN -> QP lookup for completion polling and async events: a two-level table as libmlx5
// keeps one per context (mlx5_find_qp). Readers take no lock; blocks are allocated on first
// use and kept until the table dies, so a reader never follows a freed block. Entries are
// inserted and erased on the control path under the owner's mutex.
#pragma once

#include <atomic>
#include <cstdint>
#include <new>

namespace rnicdv::detail {

struct QpCore;

class QpTable {
 public:
  static constexpr uint32_t kQpnBits = 24;  // IBA 9.2: a QPN is 24 bits
  static constexpr uint32_t kBlockBits = 12;
  static constexpr uint32_t kBlockSize = 1u << kBlockBits;
  static constexpr uint32_t kBlocks = 1u << (kQpnBits - kBlockBits);

  QpTable() = default;
  QpTable(const QpTable&) = delete;
  QpTable& operator=(const QpTable&) = delete;
  ~QpTable() {
    for (auto& b : blocks_) delete[] b.load(std::memory_order_relaxed);
  }

  QpCore* find(uint32_t qpn) const noexcept {
    const Slot* block =
        blocks_[(qpn >> kBlockBits) & (kBlocks - 1)].load(std::memory_order_acquire);
    if (!block) [[unlikely]]
      return nullptr;
    return block[qpn & (kBlockSize - 1)].load(std::memory_order_acquire);
  }

  // Control path, serialized by the caller. Returns false when out of memory.
  bool insert(uint32_t qpn, QpCore* qp) noexcept {
    auto& top = blocks_[(qpn >> kBlockBits) & (kBlocks - 1)];
    Slot* block = top.load(std::memory_order_relaxed);
    if (!block) {
      block = new (std::nothrow) Slot[kBlockSize];
      if (!block) return false;
      for (uint32_t i = 0; i < kBlockSize; ++i) block[i].store(nullptr, std::memory_order_relaxed);
      top.store(block, std::memory_order_release);
    }
    block[qpn & (kBlockSize - 1)].store(qp, std::memory_order_release);
    return true;
  }

  void erase(uint32_t qpn) noexcept {
    Slot* block = blocks_[(qpn >> kBlockBits) & (kBlocks - 1)].load(std::memory_order_relaxed);
    if (block) block[qpn & (kBlockSize - 1)].store(nullptr, std::memory_order_release);
  }

 private:
  using Slot = std::atomic<QpCore*>;
  std::atomic<Slot*> blocks_[kBlocks] = {};
};

}  // namespace rnicdv::detail
