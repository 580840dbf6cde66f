// SPDX-License-Identifier: BSD-3-Clause
// hw-qualify: the device-side programs of `tools/dev hardware` (docs/hardware.md).
//
//   hw-qualify find [--device NAME]      the mlx5 device to qualify; none: one line, exit 77
//   hw-qualify info NAME                 JSON: name, firmware, ids, ports, simulated or not
//   hw-qualify experiment NAME [--window-ms N] [--json FILE]
//                                        what the device does with WQEs no doorbell announced
//   hw-qualify early-post NAME [--json FILE]
//                                        early posting through librdmacm: in place and shadow,
//                                        established by the RTU and by COMM_EST
// Exit status: 0 passed (experiment: conclusive), 1 failed, 2 usage, 77 no device.
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "hw-qualify.h"

using namespace rnicdv;

namespace {

constexpr int kNoDevice = 77;

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  f.close();
  if (!f) std::fprintf(stderr, "hw-qualify: cannot write %s\n", path.c_str());
  return static_cast<bool>(f);
}

struct Listed {
  std::string name;
  bool mlx5 = false;
};

std::vector<Listed> list_devices() {
  std::vector<Listed> out;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  for (int i = 0; list && i < n; ++i)
    out.push_back({ibv_get_device_name(list[i]), mlx5dv_is_supported(list[i])});
  if (list) ibv_free_device_list(list);
  return out;
}

// A device the shim (hw/uverbs) serves is named rnicsimN and has its sysfs tree in the
// shim's own directory; both are checked, and either says "simulated".
bool is_simulated(const std::string& name, const std::string& ibdev_path) {
  return name.rfind("rnicsim", 0) == 0 || ibdev_path.find("rnicdv-uverbs") != std::string::npos;
}

int cmd_find(const std::string& wanted) {
  const std::vector<Listed> devs = list_devices();
  std::string all;
  for (const Listed& d : devs) all += (all.empty() ? "" : ", ") + d.name;
  if (!wanted.empty()) {
    for (const Listed& d : devs) {
      if (d.name != wanted) continue;
      if (d.mlx5) {
        std::printf("%s\n", d.name.c_str());
        return 0;
      }
      std::printf("no mlx5 device: %s is not served by the mlx5 provider\n", wanted.c_str());
      return kNoDevice;
    }
    std::printf("no mlx5 device: no RDMA device named %s (found: %s)\n", wanted.c_str(),
                all.empty() ? "none" : all.c_str());
    return kNoDevice;
  }
  for (const Listed& d : devs) {
    if (d.mlx5) {
      std::printf("%s\n", d.name.c_str());
      return 0;
    }
  }
  std::printf("no mlx5 device: ibv_get_device_list found %s\n",
              all.empty() ? "no RDMA device" : ("none served by mlx5 (" + all + ")").c_str());
  return kNoDevice;
}

int cmd_info(const std::string& name) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_device* dev = nullptr;
  for (int i = 0; list && i < n; ++i)
    if (name == ibv_get_device_name(list[i])) dev = list[i];
  if (!dev) {
    if (list) ibv_free_device_list(list);
    std::printf("no mlx5 device: no RDMA device named %s\n", name.c_str());
    return kNoDevice;
  }
  const std::string path = dev->ibdev_path;
  ibv_context* ctx = ibv_open_device(dev);
  std::ostringstream j;
  j << "{\"name\": " << json_string(name) << ", \"ibdev_path\": " << json_string(path)
    << ", \"simulated\": " << (is_simulated(name, path) ? "true" : "false");
  int rc = 0;
  ibv_device_attr attr{};
  if (!ctx || ibv_query_device(ctx, &attr) != 0) {
    j << ", \"error\": " << json_string(std::string("cannot open or query: ") + std::strerror(errno));
    rc = 1;
  } else {
    char guid[32];
    std::snprintf(guid, sizeof guid, "%016llx",
                  static_cast<unsigned long long>(be64toh(attr.node_guid)));
    j << ", \"firmware\": " << json_string(attr.fw_ver) << ", \"vendor_id\": " << attr.vendor_id
      << ", \"vendor_part_id\": " << attr.vendor_part_id << ", \"hw_ver\": " << attr.hw_ver
      << ", \"node_guid\": " << json_string(guid) << ", \"ports\": [";
    for (uint8_t p = 1; p <= attr.phys_port_cnt; ++p) {
      ibv_port_attr pa{};
      if (ibv_query_port(ctx, p, &pa) != 0) continue;
      j << (p > 1 ? ", " : "") << "{\"port\": " << int{p} << ", \"state\": "
        << json_string(ibv_port_state_str(pa.state)) << ", \"link_layer\": "
        << json_string(pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand")
        << ", \"active_mtu\": " << (128 << pa.active_mtu) << "}";
    }
    j << "]";
  }
  j << "}";
  if (ctx) ibv_close_device(ctx);
  ibv_free_device_list(list);
  std::printf("%s\n", j.str().c_str());
  return rc;
}

std::string part_json(const hwq::PartFindings& p) {
  std::ostringstream j;
  j << "{\"written\": " << p.written << ", \"in_rtr\": " << p.in_rtr
    << ", \"after_rts\": " << p.after_rts << ", \"announced\": " << p.announced
    << ", \"beyond\": " << p.beyond << ", \"after_doorbell\": " << p.after_doorbell
    << ", \"cqes_before_doorbell\": " << p.cqes_before_doorbell << ", \"cqes\": " << p.cqes
    << ", \"error_cqes\": " << p.error_cqes << "}";
  return j.str();
}

int cmd_experiment(const std::string& name, int window_ms, const std::string& json_path) {
  const auto t0 = std::chrono::steady_clock::now();
  Result<hwq::ExperimentFindings> r =
      hwq::run_experiment(name, std::chrono::milliseconds(window_ms));
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::ostringstream j;
  int rc = 0;
  if (!r) {
    std::printf("experiment failed: %s\n", r.status().message().c_str());
    j << "{\"device\": " << json_string(name) << ", \"passed\": false, \"error\": "
      << json_string(r.status().message()) << ", \"seconds\": " << secs << "}";
    rc = 1;
  } else {
    const hwq::ExperimentFindings& f = r.value();
    const hwq::ExperimentVerdict v = hwq::judge(f);
    std::printf("(a) WQEs in the SQ with no doorbell across RTR->RTS: %s\n", v.a.c_str());
    std::printf("(b) WQEs beyond the doorbell record: %s\n", v.b.c_str());
    std::printf("(c) a doorbell rung in RTR: %s\n", v.c.c_str());
    if (v.conclusive) {
      std::printf("profile: fetches_beyond_dbr=%s keeps_rtr_doorbell=%s (%s); early posting "
                  "withholds %s\n",
                  v.fetches_beyond_dbr ? "yes" : "no",
                  !v.keeps_rtr_doorbell_determined ? "undetermined, assumed yes"
                  : v.keeps_rtr_doorbell         ? "yes"
                                                 : "no",
                  hw::device_profile_name(v.profile), v.withholding.c_str());
    } else {
      std::printf("inconclusive: a control doorbell did not run every WQE (see the counts)\n");
      rc = 1;
    }
    // The driver chooses how to withhold from the backend's fetches_beyond_dbr alone: evidence
    // against it means in-place withholding is unsafe (or needlessly refused) on this device.
    const bool agrees = v.fetches_beyond_dbr == f.backend_profile.fetches_beyond_dbr;
    if (v.conclusive && !agrees) {
      std::printf("DISAGREES with the backend's profile %s (fetches_beyond_dbr=%s), from which "
                  "the driver chooses to withhold %s\n",
                  hw::device_profile_name(f.backend_profile),
                  f.backend_profile.fetches_beyond_dbr ? "yes" : "no",
                  f.backend_profile.fetches_beyond_dbr ? "in a shadow queue" : "in place");
      rc = 1;
    }
    j << "{\"device\": " << json_string(name) << ", \"passed\": "
      << (v.conclusive && agrees ? "true" : "false") << ", \"seconds\": " << secs
      << ", \"window_ms\": " << f.window_ms << ", \"a\": " << part_json(f.a)
      << ", \"b\": " << part_json(f.b) << ", \"c\": " << part_json(f.c)
      << ", \"conclusive\": " << (v.conclusive ? "true" : "false")
      << ", \"finding_a\": " << json_string(v.a) << ", \"finding_b\": " << json_string(v.b)
      << ", \"finding_c\": " << json_string(v.c)
      << ", \"fetches_beyond_dbr\": " << (v.fetches_beyond_dbr ? "true" : "false")
      << ", \"keeps_rtr_doorbell\": "
      << (!v.keeps_rtr_doorbell_determined ? "null" : v.keeps_rtr_doorbell ? "true" : "false")
      << ", \"profile\": " << json_string(hw::device_profile_name(v.profile))
      << ", \"withholding\": " << json_string(v.withholding)
      << ", \"backend_profile\": " << json_string(hw::device_profile_name(f.backend_profile))
      << ", \"agrees_with_backend\": " << (agrees ? "true" : "false") << "}";
  }
  if (!json_path.empty() && !write_file(json_path, j.str() + "\n")) rc = 1;
  return rc;
}

int cmd_early_post(const std::string& name, const std::string& json_path) {
  const std::vector<hwq::CaseResult> cases = hwq::run_early_post(name);
  std::ostringstream j;
  j << "[";
  bool all = !cases.empty();
  for (size_t i = 0; i < cases.size(); ++i) {
    const hwq::CaseResult& c = cases[i];
    all = all && c.passed;
    std::printf("%-28s %s  %.2f s  %s\n", c.name.c_str(), c.passed ? "pass" : "FAIL",
                c.seconds, c.detail.c_str());
    j << (i ? ", " : "") << "{\"name\": " << json_string(c.name)
      << ", \"passed\": " << (c.passed ? "true" : "false") << ", \"seconds\": " << c.seconds
      << ", \"detail\": " << json_string(c.detail) << "}";
  }
  j << "]";
  if (!json_path.empty() && !write_file(json_path, j.str() + "\n")) return 1;
  return all ? 0 : 1;
}

int usage() {
  std::fprintf(stderr,
               "usage: hw-qualify find [--device NAME]\n"
               "       hw-qualify info NAME\n"
               "       hw-qualify experiment NAME [--window-ms N] [--json FILE]\n"
               "       hw-qualify early-post NAME [--json FILE]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string cmd = argv[1];
  std::string device, json;
  int window_ms = 300;
  std::vector<std::string> positional;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--device" || a == "--json" || a == "--window-ms") && i + 1 < argc) {
      const std::string v = argv[++i];
      if (a == "--device") device = v;
      if (a == "--json") json = v;
      if (a == "--window-ms") window_ms = std::atoi(v.c_str());
    } else if (a.rfind("--", 0) == 0) {
      return usage();
    } else {
      positional.push_back(a);
    }
  }
  if (window_ms <= 0) return usage();
  if (cmd == "find") return positional.empty() ? cmd_find(device) : usage();
  if (positional.size() != 1) return usage();
  if (cmd == "info") return cmd_info(positional[0]);
  if (cmd == "experiment") return cmd_experiment(positional[0], window_ms, json);
  if (cmd == "early-post") return cmd_early_post(positional[0], json);
  return usage();
}
