// SPDX-License-Identifier: BSD-3-Clause
#include "wire/dpdk_eal.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>

#include <rte_eal.h>
#include <rte_errno.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>

namespace rnicdv::sim {
namespace {

// True when `args` holds the long option `name` ("--no-huge", "--file-prefix=x").
bool has_long(const std::vector<std::string>& args, const char* name) {
  const size_t n = std::strlen(name);
  for (const std::string& a : args)
    if (a.compare(0, n, name) == 0 && (a.size() == n || a[n] == '=')) return true;
  return false;
}

// True when `args` holds the short option `-c` ("-l", "-l0").
bool has_short(const std::vector<std::string>& args, char c) {
  for (const std::string& a : args)
    if (a.size() >= 2 && a[0] == '-' && a[1] == c) return true;
  return false;
}

std::string joined(const std::vector<std::string>& args) {
  std::string out;
  for (const std::string& a : args) {
    if (!out.empty()) out += ' ';
    out += a;
  }
  return out;
}

enum class EalState { not_started, running, failed };

struct EalSession {
  std::mutex mu;
  EalState state = EalState::not_started;
  std::vector<std::string> user_args;  // as first asked for
  std::string failure;
  // rte_eal_init may keep pointers into argv: the strings live as long as the process.
  std::vector<std::unique_ptr<char[]>> argv_storage;
};

EalSession& session() {
  static EalSession* s = new EalSession;  // never destroyed: EAL outlives static destructors
  return *s;
}

int first_allowed_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::pthread_getaffinity_np(::pthread_self(), sizeof(set), &set) == 0)
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set)) return cpu;
  return 0;
}

}  // namespace

EalPlan plan_eal_args(const std::vector<std::string>& user_args, bool hugepages_free, int cpu) {
  EalPlan plan;
  auto add = [&plan](std::string a) { plan.args.push_back(std::move(a)); };
  if (!has_short(user_args, 'l') && !has_short(user_args, 'c') && !has_long(user_args, "--lcores"))
    add("-l" + std::to_string(cpu));
  if (!has_short(user_args, 'a') && !has_short(user_args, 'b') && !has_long(user_args, "--allow") &&
      !has_long(user_args, "--block") && !has_long(user_args, "--no-pci"))
    add("--no-pci");
  if (!has_long(user_args, "--telemetry") && !has_long(user_args, "--no-telemetry"))
    add("--no-telemetry");
  if (!has_long(user_args, "--log-level")) add("--log-level=5");
  const bool memory_chosen = has_long(user_args, "--no-huge") ||
                             has_long(user_args, "--in-memory") ||
                             has_long(user_args, "--file-prefix") ||
                             has_long(user_args, "--no-shconf") ||
                             has_long(user_args, "--legacy-mem");
  if (!memory_chosen) {
    if (hugepages_free) {
      add("--in-memory");
    } else {
      // --in-memory implies --legacy-mem semantics EAL refuses with --no-huge; --no-shconf
      // keeps processes apart instead.
      add("--no-huge");
      add("--no-shconf");
      if (!has_short(user_args, 'm') && !has_long(user_args, "--socket-mem")) {
        add("-m");
        add("256");
      }
      plan.no_huge_added = true;
    }
  }
  plan.args.insert(plan.args.end(), user_args.begin(), user_args.end());
  return plan;
}

bool hugepages_free() noexcept {
  bool mounted = false;
  {
    std::ifstream mounts("/proc/mounts");
    std::string dev, dir, type;
    while (mounts >> dev >> dir >> type) {
      if (type == "hugetlbfs") mounted = true;
      mounts.ignore(4096, '\n');
    }
  }
  if (!mounted) return false;
  DIR* d = ::opendir("/sys/kernel/mm/hugepages");
  if (d == nullptr) return false;
  unsigned long free_pages = 0;
  while (dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, "hugepages-", 10) != 0) continue;
    std::ifstream f(std::string("/sys/kernel/mm/hugepages/") + e->d_name + "/free_hugepages");
    unsigned long n = 0;
    if (f >> n) free_pages += n;
  }
  ::closedir(d);
  return free_pages > 0;
}

Status eal_start(const std::vector<std::string>& user_args) {
  EalSession& s = session();
  std::lock_guard lock(s.mu);
  if (s.state == EalState::running) {
    if (user_args.empty() || user_args == s.user_args) return Status::ok();
    return Status::error(Errc::busy,
                         "dpdk: EAL already runs in this process with arguments '%s'; it cannot "
                         "start again with '%s' (rte_eal_init runs once per process)",
                         joined(s.user_args).c_str(), joined(user_args).c_str());
  }
  if (s.state == EalState::failed)
    return Status::error(Errc::unsupported,
                         "dpdk: EAL start-up failed earlier in this process (%s) and cannot be "
                         "retried: rte_eal_init runs once per process",
                         s.failure.c_str());

  const EalPlan plan = plan_eal_args(user_args, hugepages_free(), first_allowed_cpu());
  std::vector<char*> argv;
  auto keep = [&s, &argv](const std::string& a) {
    auto copy = std::make_unique<char[]>(a.size() + 1);
    std::memcpy(copy.get(), a.c_str(), a.size() + 1);
    argv.push_back(copy.get());
    s.argv_storage.push_back(std::move(copy));
  };
  keep("rnicdv");
  for (const std::string& a : plan.args) keep(a);
  argv.push_back(nullptr);

  // EAL pins the calling thread to its main lcore; threads the application (and the
  // simulated devices) start later would inherit that.
  cpu_set_t affinity;
  const bool saved = ::pthread_getaffinity_np(::pthread_self(), sizeof(affinity), &affinity) == 0;
  const int ret = ::rte_eal_init(static_cast<int>(argv.size() - 1), argv.data());
  const int err = rte_errno;
  if (saved) ::pthread_setaffinity_np(::pthread_self(), sizeof(affinity), &affinity);

  if (ret < 0 && err != EALREADY) {
    s.state = EalState::failed;
    s.failure = std::string(rte_strerror(err)) + "; arguments: " + joined(plan.args);
    return Status::error(err == EACCES || err == EPERM ? Errc::access_denied : Errc::unsupported,
                         "dpdk: EAL start-up failed: %s (arguments: %s)", rte_strerror(err),
                         joined(plan.args).c_str());
  }
  // EALREADY: the application started EAL itself; use it as it is.
  s.state = EalState::running;
  s.user_args = user_args;
  if (ret >= 0 && plan.no_huge_added)
    std::fprintf(stderr, "rnicdv: dpdk: no free hugepages; EAL runs with --no-huge (4 KiB pages)\n");
  return Status::ok();
}

bool eal_running() noexcept {
  EalSession& s = session();
  std::lock_guard lock(s.mu);
  return s.state == EalState::running;
}

std::string eal_memory_mode() {
  if (!eal_running()) return "";
  return ::rte_eal_has_hugepages() ? "hugepages" : "4 KiB pages (--no-huge)";
}

}  // namespace rnicdv::sim
