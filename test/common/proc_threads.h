// SPDX-License-Identifier: BSD-3-Clause
// What /proc/self shows of this process: its threads (how many, how many carry a name, as
// pthread_setname_np sets it in /proc/self/task/N/comm) and its open descriptors. For tests
// of the threads and descriptors a library starts and gives back.
#pragma once

#include <dirent.h>

#include <cstddef>
#include <fstream>
#include <string>

namespace rnicdv::test {

// Calls fn(entry name) for each entry of a /proc directory but "." and "..".
template <class Fn>
void for_each_entry(const char* dir, Fn&& fn) {
  if (DIR* d = opendir(dir)) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') fn(std::string(e->d_name));
    closedir(d);
  }
}

inline size_t dir_entries(const char* dir) {
  size_t n = 0;
  for_each_entry(dir, [&](const std::string&) { ++n; });
  return n;
}

inline size_t thread_count() {
  return dir_entries("/proc/self/task");
}

inline size_t open_fds() {
  return dir_entries("/proc/self/fd");
}

inline size_t threads_named(const std::string& name) {
  size_t n = 0;
  for_each_entry("/proc/self/task", [&](const std::string& task) {
    std::ifstream comm("/proc/self/task/" + task + "/comm");
    std::string line;
    if (std::getline(comm, line) && line == name) ++n;
  });
  return n;
}

}  // namespace rnicdv::test
