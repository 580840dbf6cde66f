// SPDX-License-Identifier: BSD-3-Clause
// Validates JSON text with python3's json module (an independent parser) and extracts
// values with a Python expression over the parsed document `d`.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace rnicperf_test {

// Runs `python3 -c SCRIPT ARG` (Debian's interpreter directly: wrappers on PATH, such as
// pyenv shims, cost a second per call); its stdout and stderr, trailing new lines removed, or
// "ERROR: popen".
inline std::string run_python(const std::string& script, const std::string& arg,
                              int seconds = 30) {
  const char* python = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
  setenv("RNICPERF_PY", script.c_str(), 1);
  std::string cmd = "timeout " + std::to_string(seconds) + " " + python +
                    " -c \"$RNICPERF_PY\" '" + arg + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return "ERROR: popen";
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// Runs `python3 -c` on the text in `path`; returns the expression's str() or "ERROR: ...".
inline std::string json_query(const std::string& path, const std::string& expr) {
  const std::string script =
      "import json,sys\n"
      "try:\n"
      "    d = json.load(open(sys.argv[1]))\n"
      "except Exception as e:\n"
      "    print('ERROR: ' + str(e)); sys.exit(0)\n"
      "print(" +
      expr + ")\n";
  return run_python(script, path);
}

inline std::string json_query_text(const std::string& text, const std::string& expr) {
  char name[] = "/tmp/rnicperf-json-XXXXXX";
  int fd = mkstemp(name);
  if (fd < 0) return "ERROR: mkstemp";
  ssize_t n = write(fd, text.data(), text.size());
  close(fd);
  std::string out =
      n == static_cast<ssize_t>(text.size()) ? json_query(name, expr) : "ERROR: write";
  unlink(name);
  return out;
}

}  // namespace rnicperf_test
