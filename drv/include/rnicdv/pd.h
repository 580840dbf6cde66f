// SPDX-License-Identifier: BSD-3-Clause
// Protection domains and memory regions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "rnicdv/hw/device.h"
#include "rnicdv/status.h"
#include "rnicdv/wqe/work_request.h"

namespace rnicdv {

namespace detail {
struct DeviceCore;
}

class MemoryRegion;
class AddressHandle;

class ProtectionDomain {
 public:
  ProtectionDomain(ProtectionDomain&&) noexcept = default;
  ProtectionDomain& operator=(ProtectionDomain&&) noexcept = default;
  ~ProtectionDomain();

  // Registers [addr, addr + length) with `access` (hw::access::* bits; local read is always
  // allowed). Errors: invalid_argument (null/zero length, remote_write or remote_atomic
  // without local_write, as IB requires), no_resources (device MR limit).
  Result<MemoryRegion> reg_mr(void* addr, size_t length, uint32_t access);
  // An address handle towards `attr.remote_gid` (ibv_create_ah). Errors name the device and
  // why the destination cannot be reached (on the simulated fabric: not IPv4-mapped).
  Result<AddressHandle> create_ah(const hw::AhAttr& attr);

  uint32_t pdn() const;
  hw::Pd& hw() { return *pd_; }

 private:
  friend class Device;
  ProtectionDomain(std::shared_ptr<detail::DeviceCore> dev, std::shared_ptr<hw::Pd> pd);
  std::shared_ptr<detail::DeviceCore> dev_;
  // Shared with the MRs and QPs created in it, so that the PD may be destroyed first.
  std::shared_ptr<hw::Pd> pd_;
};

// Where UD sends go: an address vector the device resolved once (on RoCE, the destination's
// MAC too), copied into each datagram's WQE (SendWr::av). Valid while it lives; it keeps its
// PD and device alive.
class AddressHandle {
 public:
  AddressHandle(AddressHandle&&) noexcept = default;
  AddressHandle& operator=(AddressHandle&&) noexcept = default;
  ~AddressHandle();

  const mlx5_wqe_av* av() const { return &ah_->av(); }

 private:
  friend class ProtectionDomain;
  AddressHandle(std::shared_ptr<detail::DeviceCore> dev, std::shared_ptr<hw::Pd> pd,
                std::unique_ptr<hw::Ah> ah);
  std::shared_ptr<detail::DeviceCore> dev_;
  std::shared_ptr<hw::Pd> pd_;
  std::unique_ptr<hw::Ah> ah_;
};

class MemoryRegion {
 public:
  MemoryRegion(MemoryRegion&&) noexcept = default;
  MemoryRegion& operator=(MemoryRegion&&) noexcept = default;
  ~MemoryRegion();

  uint32_t lkey() const { return lkey_; }
  uint32_t rkey() const { return rkey_; }
  uint8_t* data() const { return addr_; }
  size_t length() const { return length_; }
  uint64_t addr() const { return reinterpret_cast<uint64_t>(addr_); }

  // An SGE covering [offset, offset + len) of this region.
  Sge sge(size_t offset, uint32_t len) const { return Sge{addr() + offset, len, lkey_}; }

 private:
  friend class ProtectionDomain;
  MemoryRegion(std::shared_ptr<detail::DeviceCore> dev, std::shared_ptr<hw::Pd> pd,
               std::unique_ptr<hw::Mr> mr);
  std::shared_ptr<detail::DeviceCore> dev_;
  std::shared_ptr<hw::Pd> pd_;
  std::unique_ptr<hw::Mr> mr_;
  uint8_t* addr_ = nullptr;
  size_t length_ = 0;
  uint32_t lkey_ = 0;
  uint32_t rkey_ = 0;
};

}  // namespace rnicdv
