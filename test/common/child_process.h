// SPDX-License-Identifier: BSD-3-Clause
// A child process for multi-process tests: its stdout is read line by line with timeouts, and
// it is always reaped (killed first if still running) when the object goes away.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace rnicdv::test {

class Child {
 public:
  Child() = default;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  Child(Child&& o) noexcept { *this = std::move(o); }
  Child& operator=(Child&& o) noexcept {
    std::swap(pid_, o.pid_);
    std::swap(out_fd_, o.out_fd_);
    std::swap(buffer_, o.buffer_);
    return *this;
  }
  ~Child() {
    kill(SIGKILL);
    wait(std::chrono::seconds(10));
    if (out_fd_ >= 0) ::close(out_fd_);
  }

  // Starts argv[0] (a path, or a name looked up in PATH); stdout comes back through a pipe,
  // stderr is shared with this process.
  static std::optional<Child> spawn(const std::vector<std::string>& argv) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[1]);
    if (rc != 0) {
      ::close(fds[0]);
      return std::nullopt;
    }
    Child c;
    c.pid_ = pid;
    c.out_fd_ = fds[0];
    return c;
  }

  // A child this process made itself with fork(), without a pipe: only waited for (and,
  // if still running when the object goes away, killed and reaped).
  static Child adopt(pid_t pid) {
    Child c;
    c.pid_ = pid;
    return c;
  }

  // The next line of stdout (without the newline), or nullopt at EOF or after `timeout`.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (auto nl = buffer_.find('\n'); nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now());
      if (left.count() <= 0 || out_fd_ < 0) return std::nullopt;
      pollfd p{out_fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[512];
      const ssize_t n = ::read(out_fd_, chunk, sizeof chunk);
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  // Waits for a line starting with `prefix`; returns it.
  std::optional<std::string> read_until(const std::string& prefix,
                                        std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      auto line = read_line(std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now()));
      if (!line) return std::nullopt;
      if (line->rfind(prefix, 0) == 0) return line;
    }
    return std::nullopt;
  }

  // The exit status (128 + signal when killed), or -1 if it did not end within `timeout`.
  int wait(std::chrono::milliseconds timeout) {
    if (pid_ <= 0) return status_;
    const auto end = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      int st = 0;
      const pid_t r = ::waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return status_;
      }
      if (r < 0 || std::chrono::steady_clock::now() >= end) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  void kill(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int status_ = -1;
  std::string buffer_;
};

}  // namespace rnicdv::test
