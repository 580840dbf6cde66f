// SPDX-License-Identifier: BSD-3-Clause
// --cpu_util: perftest's CPU utilization figure, from /proc/stat.
#pragma once

#include <string>

namespace rnicperf {

// --cpu_util (perftest's get_cpu_stats and calc_cpu_util): the aggregate "cpu" line of
// /proc/stat, its user time (first field) and its idle time (fourth field), in jiffies.
struct CpuTimes {
  unsigned long long user = 0, idle = 0;
  bool valid = false;
};
// Parses /proc/stat's text (a parameter, for tests); invalid when there is no "cpu" line.
CpuTimes parse_proc_stat(const std::string& text);
// Reads /proc/stat (one open, one read: not for a loop's hot path).
CpuTimes read_cpu_times();
// perftest's figure: user / (user + idle) over the interval, in percent; 0 when nothing was
// counted or either sample is invalid. Other CPU states (nice, system, irq) are in neither
// sum, as in perftest.
double cpu_util_percent(const CpuTimes& from, const CpuTimes& to);

}  // namespace rnicperf
