// SPDX-License-Identifier: BSD-3-Clause
// Runs the rnicperf binary as a child process with its output captured, bounded by a
// timeout (SIGKILL past it) and always reaped.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace rnicperf_test {

struct ProcessResult {
  int exit_code = -1;  // -1: killed (timeout) or did not start
  bool timed_out = false;
  std::string out, err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

class Child {
 public:
  explicit Child(std::vector<std::string> args) : args_(std::move(args)) {
    static int counter = 0;
    std::string base =
        "/tmp/rnicperf-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    out_path_ = base + ".out";
    err_path_ = base + ".err";
    pid_ = ::fork();
    if (pid_ == 0) {
      int out = ::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int err = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(out, 1);
      ::dup2(err, 2);
      ::close(out);
      ::close(err);
      std::vector<char*> argv;
      for (auto& a : args_) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::unlink(out_path_.c_str());
    ::unlink(err_path_.c_str());
  }

  // Sends `sig` to the running child.
  void signal(int sig) {
    if (pid_ > 0 && !reaped_) ::kill(pid_, sig);
  }
  // What the child has written to stdout so far.
  std::string out_so_far() const { return slurp(out_path_); }

  ProcessResult wait(int timeout_s) {
    ProcessResult r;
    if (pid_ <= 0) return r;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    int status = 0;
    for (;;) {
      pid_t got = ::waitpid(pid_, &status, WNOHANG);
      if (got == pid_) break;
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        r.timed_out = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    reaped_ = true;
    if (!r.timed_out && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    r.out = slurp(out_path_);
    r.err = slurp(err_path_);
    return r;
  }

 private:
  std::vector<std::string> args_;
  std::string out_path_, err_path_;
  pid_t pid_ = -1;
  bool reaped_ = false;
};

// rnicperf with `args`, waited for at most `timeout_s`.
inline const std::string& rnicperf_bin() {
  static const std::string path = RNICPERF_BIN;
  return path;
}

inline ProcessResult run_rnicperf(const std::vector<std::string>& args, int timeout_s = 60) {
  std::vector<std::string> full;
  full.reserve(args.size() + 1);
  full.push_back(rnicperf_bin());
  for (const auto& a : args) full.push_back(a);
  Child c(std::move(full));
  return c.wait(timeout_s);
}

// A TCP port that was free a moment ago (bound to port 0 and released).
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

inline std::string tmp_json(const char* tag) {
  return "/tmp/rnicperf-" + std::to_string(::getpid()) + "-" + tag + ".json";
}

// Lines of `text` that start with `prefix`.
inline int count_lines_starting(const std::string& text, const std::string& prefix) {
  int n = 0;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) ++n;
  return n;
}

}  // namespace rnicperf_test
