// SPDX-License-Identifier: BSD-3-Clause
// tshark, an independent decoder, as a test oracle: run it on a capture, split its `-T fields`
// output into rows, skip the test where it is not installed.
#pragma once

#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "skip.h"

namespace rnicdv::test {

inline bool tshark_installed() {
  return std::system("command -v tshark >/dev/null 2>&1") == 0;
}

// Exits 77 (meson's SKIP) with the reason where tshark is not on PATH.
inline void skip_without_tshark() {
  if (!tshark_installed()) skip_test("tshark is not installed (Debian package tshark)");
}

// stdout of `cmd` run by the shell; the test fails unless it exits 0.
inline std::string shell_output(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  INFO(cmd);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  return out;
}

// stdout of `tshark -n -r PATH ARGS` (ARGS as the shell splits them); its stderr, e.g. the
// warning about running as root, is discarded. The payload heuristics are disabled: they
// would parse arbitrary SEND payloads as RPC-over-RDMA, NVMe-oF, iSER... and report them
// malformed (docs/design.md, "Protocol notes": RoCEv2 headers).
inline std::string tshark(const std::string& path, const std::string& args) {
  return shell_output(
      "tshark -n -r '" + path + "'" +
      " --disable-protocol rpcordma --disable-protocol nvme-rdma --disable-protocol iser"
      " --disable-protocol smb_direct --disable-protocol lnet --disable-protocol infiniband_sdp"
      " --disable-protocol smc --disable-protocol fcoib --disable-protocol infiniband.eoib " +
      args + " 2>/dev/null");
}

// The rows of tshark's `-T fields` output, each split at its tabs; a trailing empty field is
// kept as an empty string.
inline std::vector<std::vector<std::string>> tshark_rows(const std::string& text) {
  std::vector<std::vector<std::string>> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::vector<std::string> fields;
    std::string field;
    std::istringstream cols(line);
    while (std::getline(cols, field, '\t')) fields.push_back(field);
    if (!line.empty() && line.back() == '\t') fields.emplace_back();
    out.push_back(fields);
  }
  return out;
}

}  // namespace rnicdv::test
