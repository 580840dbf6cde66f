// SPDX-License-Identifier: BSD-3-Clause
// Protection domains and memory regions.
#include "rnicdv/pd.h"

#include <utility>

#include "device_core.h"
#include "rnicdv/device.h"

namespace rnicdv {

Result<ProtectionDomain> Device::alloc_pd() {
  auto pd = core_->hw->alloc_pd();
  if (!pd) return Status(pd.status()).prepend(name() + ": alloc_pd");
  return ProtectionDomain(core_, std::shared_ptr<hw::Pd>(std::move(pd.value())));
}

ProtectionDomain::ProtectionDomain(std::shared_ptr<detail::DeviceCore> dev,
                                   std::shared_ptr<hw::Pd> pd)
    : dev_(std::move(dev)), pd_(std::move(pd)) {}

ProtectionDomain::~ProtectionDomain() = default;

uint32_t ProtectionDomain::pdn() const {
  return pd_->pdn();
}

Result<MemoryRegion> ProtectionDomain::reg_mr(void* addr, size_t length, uint32_t access) {
  constexpr uint32_t known = hw::access::local_write | hw::access::remote_write |
                             hw::access::remote_read | hw::access::remote_atomic;
  const uint32_t pdn = pd_->pdn();
  if (!addr) return Status::error(Errc::invalid_argument, "pd %#x: reg_mr: null address", pdn);
  if (length == 0)
    return Status::error(Errc::invalid_argument, "pd %#x: reg_mr %p: zero length", pdn, addr);
  if (access & ~known)
    return Status::error(Errc::invalid_argument, "pd %#x: reg_mr %p: unknown access bits %#x", pdn,
                         addr, access & ~known);
  // IBA 10.6.3.1 (C10-66): remote write or remote atomic access requires local write.
  if ((access & (hw::access::remote_write | hw::access::remote_atomic)) &&
      !(access & hw::access::local_write))
    return Status::error(Errc::invalid_argument,
                         "pd %#x: reg_mr %p: remote %s access requires local_write", pdn, addr,
                         (access & hw::access::remote_write) ? "write" : "atomic");
  const uint64_t max_size = dev_->hw->info().caps.max_mr_size;
  if (max_size && length > max_size)
    return Status::error(Errc::invalid_argument,
                         "pd %#x: reg_mr %p: length %zu exceeds the device limit %llu", pdn, addr,
                         length, static_cast<unsigned long long>(max_size));
  return dev_->hw->reg_mr(*pd_, addr, length, access).transform([&](std::unique_ptr<hw::Mr> mr) {
    return MemoryRegion(dev_, pd_, std::move(mr));
  });
}

Result<AddressHandle> ProtectionDomain::create_ah(const hw::AhAttr& attr) {
  auto ah = dev_->hw->create_ah(*pd_, attr);
  if (!ah) return ah.status();
  return AddressHandle(dev_, pd_, std::move(ah.value()));
}

AddressHandle::AddressHandle(std::shared_ptr<detail::DeviceCore> dev, std::shared_ptr<hw::Pd> pd,
                             std::unique_ptr<hw::Ah> ah)
    : dev_(std::move(dev)), pd_(std::move(pd)), ah_(std::move(ah)) {}

// The hw::Ah goes before the PD it belongs to.
AddressHandle::~AddressHandle() {
  ah_.reset();
}

MemoryRegion::MemoryRegion(std::shared_ptr<detail::DeviceCore> dev, std::shared_ptr<hw::Pd> pd,
                           std::unique_ptr<hw::Mr> mr)
    : dev_(std::move(dev)),
      pd_(std::move(pd)),
      mr_(std::move(mr)),
      addr_(static_cast<uint8_t*>(mr_->addr())),
      length_(mr_->length()),
      lkey_(mr_->lkey()),
      rkey_(mr_->rkey()) {}

// The hw::Mr goes before the PD it belongs to (member order would destroy the PD last anyway;
// this makes the dependency explicit).
MemoryRegion::~MemoryRegion() {
  mr_.reset();
}

}  // namespace rnicdv
