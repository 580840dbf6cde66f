// SPDX-License-Identifier: BSD-3-Clause
// The simulated HCA's port counters under the kernel's sysfs names (rnicdv/sim/sim.h).
#include <string>
#include <vector>

#include "rnicdv/sim/sim.h"

namespace rnicdv::sim {

namespace {

struct PortCounter {
  const char* name;
  uint64_t (*value)(const DeviceCounters&);
};

// The IB port counters (IBA 16.1.3.5: PortXmitData and PortRcvData count 4-byte words) and
// mlx5's hw_counters of the same meaning (the kernel's mlx5 counter documentation).
constexpr PortCounter kCounters[] = {
    {"counters/port_xmit_data", [](const DeviceCounters& c) { return c.bytes_tx / 4; }},
    {"counters/port_rcv_data", [](const DeviceCounters& c) { return c.bytes_rx / 4; }},
    {"counters/port_xmit_packets", [](const DeviceCounters& c) { return c.packets_tx; }},
    {"counters/port_rcv_packets", [](const DeviceCounters& c) { return c.packets_rx; }},
    {"counters/port_xmit_discards", [](const DeviceCounters& c) { return c.link_down_drops; }},
    {"hw_counters/local_ack_timeout_err", [](const DeviceCounters& c) { return c.timeouts; }},
    {"hw_counters/rnr_nak_retry_err", [](const DeviceCounters& c) { return c.rnr_naks_rx; }},
    {"hw_counters/out_of_buffer",
     [](const DeviceCounters& c) {
       return c.rnr_naks_tx + c.ud_no_recv_drops + c.uc_no_recv_drops;
     }},
};

}  // namespace

const std::vector<std::string>& port_counter_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const PortCounter& c : kCounters) v.emplace_back(c.name);
    return v;
  }();
  return names;
}

bool port_counter_value(const DeviceCounters& c, const std::string& name, uint64_t* out) {
  return port_counter_value(c, 1, name, out);
}

bool port_counter_value(const DeviceCounters& c, uint8_t port, const std::string& name,
                        uint64_t* out) {
  // One port's view: its traffic only, and on port 2 nothing else.
  DeviceCounters view;
  if (port == 2) {
    view.packets_tx = c.port2_packets_tx;
    view.packets_rx = c.port2_packets_rx;
    view.bytes_tx = c.port2_bytes_tx;
    view.bytes_rx = c.port2_bytes_rx;
  } else {
    view = c;
    view.packets_tx -= c.port2_packets_tx;
    view.packets_rx -= c.port2_packets_rx;
    view.bytes_tx -= c.port2_bytes_tx;
    view.bytes_rx -= c.port2_bytes_rx;
  }
  for (const PortCounter& k : kCounters) {
    if (name == k.name) {
      *out = k.value(view);
      return true;
    }
  }
  return false;
}

Result<uint64_t> Device::read_port_counter(uint8_t port, const std::string& name) {
  const std::string& dev = info().name;
  const size_t ports = info().ports.size();
  if (port < 1 || port > ports)
    return Status::error(Errc::invalid_argument, "%s: read_port_counter: port %u: the device has "
                         "%s", dev.c_str(), port, ports == 2 ? "ports 1 and 2" : "port 1 only");
  uint64_t value = 0;
  if (port_counter_value(counters(), port, name, &value)) return value;
  std::string known;
  for (const std::string& n : port_counter_names()) known += (known.empty() ? "" : ", ") + n;
  return Status::error(Errc::invalid_argument,
                       "%s: read_port_counter: port %u has no counter '%s' (a simulated HCA "
                       "keeps %s)",
                       dev.c_str(), port, name.c_str(), known.c_str());
}

}  // namespace rnicdv::sim
