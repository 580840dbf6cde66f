// SPDX-License-Identifier: BSD-3-Clause
// The DPDK wire's ethdev ports: which ones a wire may use, and their start and stop.
//
// Ports are shared process state (EAL probes them once), so a registry hands each port to
// one wire at a time. When a wire names no ports and EAL probed none, it gets the in-process
// link: two net_ring ports made once per process (rte_eth_from_rings), each transmitting into
// the ring the other receives from, so two simulated HCAs in one process exchange real frames
// through DPDK without any kernel interface.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rnicdv/status.h"
#include "wire/frame.h"

struct rte_mempool;

namespace rnicdv::sim {

struct DpdkPort {
  uint16_t id = 0;
  std::string name;    // ethdev name: "net_af_packet0", "rnicdv_link0"
  std::string driver;  // "net_af_packet", "net_ring", ...
  MacAddress hw_mac{};
  uint32_t if_index = 0;   // kernel interface behind the port (af_packet, tap), else 0
  uint32_t max_frame = 0;  // largest frame (no FCS) the port carries
  bool in_process_link = false;
  uint32_t link_index = 0;  // 0 or 1 on the in-process link
  rte_mempool* pool = nullptr;

  std::string describe() const;  // "port 0 net_af_packet0 (net_af_packet)"
};

// Claims ports for one wire: `wanted` names them (port ids or ethdev names); empty means every
// port EAL probed that no other wire holds, or the in-process link when EAL probed none and
// `eal_args` named no device (a --vdev or PCI device that failed to probe is an error, not a
// reason to fall back). EAL must be running. Errors name the port and the reason.
Result<std::vector<DpdkPort>> claim_dpdk_ports(const std::vector<std::string>& wanted,
                                               const std::vector<std::string>& eal_args);
void release_dpdk_ports(const std::vector<DpdkPort>& ports);

// Configures one RX and one TX queue, starts the port and sets promiscuous mode (frames for
// the devices' own MACs must come in). Frames left in the port from an earlier user are
// dropped first. Errors carry DPDK's reason.
Status start_dpdk_port(const DpdkPort& port);
// Drains and stops the port; it stays probed for the next wire.
void stop_dpdk_port(const DpdkPort& port);

// Frees whatever the port's RX queue holds; returns how many frames that was.
size_t drain_dpdk_port(const DpdkPort& port);

}  // namespace rnicdv::sim
