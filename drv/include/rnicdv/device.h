// SPDX-License-Identifier: BSD-3-Clause
// rnicdv::Device: an open RDMA device — a real ConnectX (`mlx5_0`, ...) through rdma-core, or
// a simulated HCA (`sim0`, `sim1`, ...). The same driver code runs on both.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rnicdv/hw/device.h"
#include "rnicdv/status.h"

namespace rnicdv {

class ProtectionDomain;
class CompletionQueue;
class CompletionChannel;
class SharedReceiveQueue;
class QueuePair;
class XrcDomain;
struct QpConfig;

namespace detail {
struct DeviceCore;
struct ChannelCore;
}

class Device {
 public:
  // Names of the devices that can be opened: real mlx5 devices first, then the simulated
  // ones that exist on the default fabric ("sim0" is always listed: it is created on open).
  static std::vector<std::string> list();

  // Opens `name`. "simN" opens (creating if needed) simulated HCA N on the process-wide
  // default fabric (loading the software HCA's library on first use); anything else is looked
  // up among real devices. Errors list what exists: "open mlx5_3: no such device; found:
  // sim0". A simulated HCA on a fabric of the program's own comes from
  // rnicdv::sim::open_device (rnicdv/sim/sim.h), wrapped with wrap().
  static Result<Device> open(const std::string& name);

  // The first real device if one exists, else "sim0".
  static std::string default_name();

  // Wraps a backend device created elsewhere (sim::open_device, sim::Fabric::add_device).
  static Result<Device> wrap(std::shared_ptr<hw::Device> hw_device);

  Device(Device&&) noexcept;
  Device& operator=(Device&&) noexcept;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device();

  const hw::DeviceInfo& info() const;
  const std::string& name() const { return info().name; }

  Result<ProtectionDomain> alloc_pd();
  // A completion queue of at least `min_entries` entries.
  Result<CompletionQueue> create_cq(uint32_t min_entries);
  // Completion events: a channel, and a CQ whose events go to it, named by `context` in them.
  Result<CompletionChannel> create_completion_channel();
  Result<CompletionQueue> create_cq(uint32_t min_entries, CompletionChannel& channel,
                                    uint64_t context);
  // A shared receive queue of at least `max_wr` receives of up to `max_sge` entries each.
  Result<SharedReceiveQueue> create_srq(ProtectionDomain& pd, uint32_t max_wr, uint32_t max_sge);
  // A queue pair in RESET of QpConfig::type. `send_cq` and `recv_cq` may be the same CQ (an
  // XRC initiator, which receives nothing, ignores `recv_cq`).
  Result<QueuePair> create_qp(ProtectionDomain& pd, CompletionQueue& send_cq,
                              CompletionQueue& recv_cq, const QpConfig& config);

  // XRC (rnicdv/xrc.h): a domain; an SRQ of it, whose receives complete on `cq` and whose
  // memory is `pd`'s; and a target QP of it, in RESET, with no queues (its posts are
  // refused). A backend without XRC refuses each with Errc::unsupported, naming the device.
  Result<XrcDomain> open_xrc_domain();
  Result<SharedReceiveQueue> create_xrc_srq(XrcDomain& domain, ProtectionDomain& pd,
                                            CompletionQueue& cq, uint32_t max_wr,
                                            uint32_t max_sge);
  Result<QueuePair> create_xrc_target(XrcDomain& domain);

  // Asynchronous events. The fd is readable while events are pending; process_events()
  // handles them: COMM_EST is forwarded to the QP's connection (which may move it to RTS and
  // flush), fatal QP events move the driver's view of the QP to ERR. Returns the number of
  // events handled. Call it from the thread that owns CM events for single-threaded QPs.
  int async_fd() const;
  int process_events();

  // Lets a backend without hardware make progress on the calling thread (the simulator in
  // deterministic mode); a no-op on real hardware. CompletionQueue::poll calls it itself.
  void progress();

  // A port counter now, by the kernel's sysfs name under ports/<port>/
  // ("counters/port_xmit_data", "hw_counters/out_of_buffer"): sysfs on a ConnectX, the
  // device's own counters on a simulated HCA (rnicdv/sim/sim.h lists them). An unknown port or
  // name is invalid_argument, naming the device, the port and the counter.
  Result<uint64_t> read_port_counter(uint8_t port, const std::string& name);

  hw::Device& hw();
  std::shared_ptr<detail::DeviceCore> core() const { return core_; }

 private:
  explicit Device(std::shared_ptr<detail::DeviceCore> core);
  // The driver's CQ around a device CQ (cq.cc); `channel` null for a CQ without events.
  Result<CompletionQueue> adopt_cq(std::unique_ptr<hw::Cq> cq,
                                   std::shared_ptr<detail::ChannelCore> channel, uint64_t context);
  // The driver's SRQ around a device SRQ (srq.cc).
  Result<SharedReceiveQueue> adopt_srq(std::unique_ptr<hw::Srq> srq, uint32_t max_sge);
  std::shared_ptr<detail::DeviceCore> core_;
};

}  // namespace rnicdv
