// SPDX-License-Identifier: BSD-3-Clause
#include "wire/dpdk_args.h"

#include <arpa/inet.h>

#include <cstdio>
#include <string_view>

namespace rnicdv::sim {
namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    out.push_back(text.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

Result<IpAddress> parse_ip(const std::string& option, const std::string& text) {
  Result<IpAddress> a = IpAddress::parse(text);
  if (!a)
    return Status::error(Errc::invalid_argument,
                         "dpdk wire: %s: '%s' is not an IPv4 or IPv6 address", option.c_str(),
                         text.c_str());
  if (a->is_unspecified() || a->is_multicast())
    return Status::error(Errc::invalid_argument, "dpdk wire: %s: %s is not a device address",
                         option.c_str(), text.c_str());
  return a;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Result<MacAddress> parse_mac(const std::string& text) {
  MacAddress mac{};
  // Exactly six pairs of hex digits separated by ':'.
  if (text.size() != 17)
    return Status::error(Errc::invalid_argument, "'%s' is not a MAC address (xx:xx:xx:xx:xx:xx)",
                         text.c_str());
  for (size_t i = 0; i < 6; ++i) {
    const int hi = hex_digit(text[i * 3]), lo = hex_digit(text[i * 3 + 1]);
    if (hi < 0 || lo < 0 || (i < 5 && text[i * 3 + 2] != ':'))
      return Status::error(Errc::invalid_argument,
                           "'%s' is not a MAC address (xx:xx:xx:xx:xx:xx)", text.c_str());
    mac[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  if (mac[0] & 1)
    return Status::error(Errc::invalid_argument, "'%s' is a multicast MAC, not a device address",
                         text.c_str());
  return mac;
}

std::string mac_string(const MacAddress& mac) {
  char text[18];
  std::snprintf(text, sizeof(text), "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2], mac[3],
                mac[4], mac[5]);
  return text;
}

Result<std::vector<std::string>> split_dpdk_args(const std::string& text) {
  std::vector<std::string> out;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote) {
      if (c == quote) {
        quote = 0;
      } else if (c == '\\' && quote == '"' && i + 1 < text.size()) {
        word += text[++i];
      } else {
        word += c;
      }
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) out.push_back(std::move(word));
      word.clear();
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '\\' && i + 1 < text.size()) {
      word += text[++i];
    } else {
      word += c;
    }
  }
  if (quote)
    return Status::error(Errc::invalid_argument, "dpdk wire: arguments '%s': unterminated %c quote",
                         text.c_str(), quote);
  if (in_word) out.push_back(std::move(word));
  return out;
}

Result<DpdkWireOptions> parse_dpdk_args(const std::string& text) {
  RNICDV_ASSIGN_OR_RETURN(const std::vector<std::string> words, split_dpdk_args(text));
  DpdkWireOptions o;
  for (const std::string& w : words) {
    const std::string_view arg = w;
    const size_t eq = arg.find('=');
    const std::string name(arg.substr(0, eq));
    if (name != "--port" && name != "--ip" && name != "--mac" && name != "--peer") {
      o.eal_args.push_back(w);
      continue;
    }
    if (eq == std::string_view::npos || eq + 1 == arg.size())
      return Status::error(Errc::invalid_argument, "dpdk wire: %s needs a value (%s=...)",
                           name.c_str(), name.c_str());
    const std::string value(arg.substr(eq + 1));
    if (name == "--port") {
      for (std::string& p : split_list(value)) {
        if (p.empty())
          return Status::error(Errc::invalid_argument, "dpdk wire: --port=%s: empty port name",
                               value.c_str());
        o.ports.push_back(std::move(p));
      }
    } else if (name == "--ip") {
      for (const std::string& a : split_list(value)) {
        RNICDV_ASSIGN_OR_RETURN(const IpAddress ip, parse_ip("--ip", a));
        o.ips.push_back(ip);
      }
    } else if (name == "--mac") {
      for (const std::string& m : split_list(value)) {
        Result<MacAddress> mac = parse_mac(m);
        if (!mac) return mac.status().prepend("dpdk wire: --mac");
        o.macs.push_back(mac.value());
      }
    } else {  // --peer=<address>=mac
      const size_t sep = value.find('=');
      if (sep == std::string::npos)
        return Status::error(Errc::invalid_argument,
                             "dpdk wire: --peer=%s: expected <address>=<mac>", value.c_str());
      RNICDV_ASSIGN_OR_RETURN(const IpAddress ip, parse_ip("--peer", value.substr(0, sep)));
      Result<MacAddress> mac = parse_mac(value.substr(sep + 1));
      if (!mac) return mac.status().prepend("dpdk wire: --peer");
      o.peers.emplace_back(ip, mac.value());
    }
  }
  return o;
}

}  // namespace rnicdv::sim
