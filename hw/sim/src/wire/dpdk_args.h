// SPDX-License-Identifier: BSD-3-Clause
// The DPDK wire's argument string (FabricConfig::dpdk_args): EAL arguments, passed through
// to rte_eal_init, mixed with the wire's own options, which EAL never sees:
//
//   --port=<id|name>[,...]  ethdev ports to use, in the order devices attach (default: every
//                           port EAL probed, or an in-process net_ring link when there is none)
//   --ip=<a.b.c.d>[,...]    IPv4 address of the device on each port, for devices created
//                           without one (default: the port's kernel interface address;
//                           10.77.0.<n> on the in-process link)
//   --mac=<xx:..:xx>[,...]  source MAC of the device on each port (default 02:00:a:b:c:d for
//                           address a.b.c.d)
//   --peer=<a.b.c.d>=<mac>  the MAC to send to for a peer address (repeatable; default
//                           02:00:a:b:c:d, the MAC a peer using the default takes)
//
// Pure parsing, no DPDK calls, so it is tested without EAL.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "rnicdv/status.h"
#include "wire/frame.h"

namespace rnicdv::sim {

struct DpdkWireOptions {
  std::vector<std::string> eal_args;  // in order, without a program name
  std::vector<std::string> ports;     // port ids or ethdev names
  std::vector<IpAddress> ips;         // IPv4 or IPv6, per port in attach order
  std::vector<MacAddress> macs;       // per port in attach order
  std::vector<std::pair<IpAddress, MacAddress>> peers;
};

// Splits on blanks; single and double quotes group, a backslash escapes the next character.
Result<std::vector<std::string>> split_dpdk_args(const std::string& text);

// Splits `text` and takes out the wire's options; everything else is an EAL argument.
Result<DpdkWireOptions> parse_dpdk_args(const std::string& text);

// "02:00:0a:4d:00:01" <-> MacAddress.
Result<MacAddress> parse_mac(const std::string& text);
std::string mac_string(const MacAddress& mac);

}  // namespace rnicdv::sim
