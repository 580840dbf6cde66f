// SPDX-License-Identifier: BSD-3-Clause
#include "plot_runner.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

extern char** environ;

namespace rnicperf {

using rnicdv::Errc;
using rnicdv::Result;
using rnicdv::Status;

namespace {
constexpr const char* kScriptName = "rnicperf-plot.py";
}  // namespace

Result<std::string> find_plot_script(const std::string& installed) {
  char self[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  std::string beside;
  if (n > 0) {
    self[n] = '\0';
    std::string dir(self);
    dir.resize(dir.rfind('/') + 1);
    beside = dir + kScriptName;
    if (::access(beside.c_str(), R_OK) == 0) return beside;
  }
  if (!installed.empty() && ::access(installed.c_str(), R_OK) == 0) return installed;
  return Status::error(Errc::not_found, "--plot: the drawing script %s is neither beside the "
                       "binary (%s) nor installed (%s)",
                       kScriptName, beside.empty() ? "?" : beside.c_str(), installed.c_str());
}

Result<int> run_plot_script(const std::string& script, const std::string& out,
                            const std::vector<std::string>& files) {
  const char* python = ::access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
  std::vector<std::string> args = {python, script, "--out", out, "--"};
  args.insert(args.end(), files.begin(), files.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  int err = ::posix_spawnp(&pid, python, nullptr, nullptr, argv.data(), environ);
  if (err != 0)
    return Status::error(Errc::not_found,
                         "--plot: cannot run %s: %s (install the Debian packages python3 and "
                         "python3-matplotlib)",
                         python, std::strerror(err));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      return Status::error(Errc::io_error, "--plot: waiting for %s: %s", script.c_str(),
                           std::strerror(errno));
  }
  if (WIFSIGNALED(status))
    return Status::error(Errc::io_error, "--plot: %s was killed by signal %d", script.c_str(),
                         WTERMSIG(status));
  return WEXITSTATUS(status);
}

}  // namespace rnicperf
