// SPDX-License-Identifier: BSD-3-Clause
// --plot and --plot-compare: rnicperf's JSON reports drawn by rnicperf-plot.py (plot.py in the
// source tree), a matplotlib script run with Debian's python3. The script sits beside the
// rnicperf binary in the build tree, and in <libexecdir>/rnicdv when installed.
#pragma once

#include <string>
#include <vector>

#include "rnicdv/status.h"

namespace rnicperf {

// The script: rnicperf-plot.py in the directory of the running binary, else `installed`
// (the path meson configured). An error names both places when neither has it.
rnicdv::Result<std::string> find_plot_script(const std::string& installed);

// Runs `python3 script --out out files...` (Debian's /usr/bin/python3 when there is one: the
// interpreter python3-matplotlib installs for) and waits for it. Returns its exit status: the
// script reports its own failures, one line on stderr and status 1, so the caller adds no
// second line. Failing to start python3, or a script killed by a signal, is an error.
rnicdv::Result<int> run_plot_script(const std::string& script, const std::string& out,
                               const std::vector<std::string>& files);

}  // namespace rnicperf
