// SPDX-License-Identifier: BSD-3-Clause
#include "cpu_util.h"

#include <cstdio>
#include <sstream>

namespace rnicperf {

CpuTimes parse_proc_stat(const std::string& text) {
  CpuTimes t;
  std::istringstream in(text);
  std::string label;
  unsigned long long user = 0, nice = 0, system = 0, idle = 0;
  if (in >> label >> user >> nice >> system >> idle && label == "cpu") {
    t.user = user;
    t.idle = idle;
    t.valid = true;
  }
  return t;
}

CpuTimes read_cpu_times() {
  char buf[512];
  FILE* f = std::fopen("/proc/stat", "re");
  if (!f) return CpuTimes{};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  return parse_proc_stat(buf);
}

double cpu_util_percent(const CpuTimes& from, const CpuTimes& to) {
  if (!from.valid || !to.valid || to.user < from.user || to.idle < from.idle) return 0;
  const double user = static_cast<double>(to.user - from.user);
  const double idle = static_cast<double>(to.idle - from.idle);
  return user + idle > 0 ? user / (user + idle) * 100.0 : 0;
}

}  // namespace rnicperf
