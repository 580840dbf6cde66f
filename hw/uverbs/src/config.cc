// SPDX-License-Identifier: BSD-3-Clause
// Settings read once at load time, logging, and errno mapping.
//
// SYSFS_PATH: libibverbs looks for devices under $SYSFS_PATH/class/infiniband_verbs. When it
// is not set, the shim writes its tree under $XDG_RUNTIME_DIR (or /tmp) and sets SYSFS_PATH
// to it before libibverbs first reads it; presenting that tree is what preloading the shim
// asks for. A SYSFS_PATH set by the user is left alone.
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mutex>
#include <set>
#include <string>

#include "shim.h"

namespace rnicdv::uverbs {

namespace {

std::string default_sysfs_root(uint32_t devices, uint32_t ports) {
  const char* base = getenv("XDG_RUNTIME_DIR");
  std::string dir = (base && *base) ? base : "/tmp";
  dir += "/rnicdv-uverbs-" + std::to_string(getuid());
  // The layout's version is part of the name: a tree an older shim wrote is never reused.
  constexpr int kSysfsLayout = 4;
  dir += "/sysfs-v" + std::to_string(kSysfsLayout) + "-" + std::to_string(devices);
  if (ports != 1) dir += "-p" + std::to_string(ports);
  return dir;
}

Config load_config() {
  Config g_config;
  if (const char* n = getenv("RNICDV_UVERBS_DEVICES")) {
    char* end = nullptr;
    const unsigned long v = strtoul(n, &end, 10);
    if (end && *end == '\0' && v >= 1 && v <= kMaxDevices) {
      g_config.devices = static_cast<uint32_t>(v);
    } else {
      log_line("RNICDV_UVERBS_DEVICES='%s' is not a number from 1 to %u; using %u", n,
               kMaxDevices, g_config.devices);
    }
  }
  if (const char* l = getenv("RNICDV_UVERBS_LOG")) g_config.log_errors = strcmp(l, "0") != 0;
  // Two-port HCAs, as the simulated fabric reads the same variables (hw/sim default_fabric.cc).
  if (const char* a = getenv("RNICDV_SIM_PORT2_ADDR"); a && *a) g_config.ports = 2;
  if (const char* p = getenv("RNICDV_SIM_PORTS"); p && *p) {
    if (strcmp(p, "1") == 0 || strcmp(p, "2") == 0)
      g_config.ports = static_cast<uint32_t>(p[0] - '0');
  }
  if (const char* s = getenv("SYSFS_PATH"); s && *s) {
    g_config.sysfs_root = s;
    while (g_config.sysfs_root.size() > 1 && g_config.sysfs_root.back() == '/')
      g_config.sysfs_root.pop_back();
    return g_config;
  }
  g_config.sysfs_root = default_sysfs_root(g_config.devices, g_config.ports);
  Status st = write_sysfs_tree(g_config.sysfs_root, g_config.devices, g_config.ports);
  if (!st) {
    log_line("cannot write the sysfs tree: %s; no simulated devices will be found",
             st.message().c_str());
    return g_config;
  }
  setenv("SYSFS_PATH", g_config.sysfs_root.c_str(), 1);
  return g_config;
}

// At load time, before the program's main() and so before libibverbs reads SYSFS_PATH.
__attribute__((constructor)) void apply_config() { (void)config(); }

}  // namespace

const Config& config() {
  static const Config c = load_config();
  return c;
}

void log_line(const char* fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "%s: %s\n", kLogPrefix, line);
}

namespace {

// A message with every number (decimal, or hex after "0x") replaced by '#': what is left
// names the reason, not the object ("rnicsim#: CREATE_CQ: CQ of cqe #: CQE compression").
std::string without_numbers(const std::string& message) {
  std::string out;
  out.reserve(message.size());
  for (size_t i = 0; i < message.size();) {
    const char ch = message[i];
    if (ch < '0' || ch > '9') {
      out += ch;
      ++i;
      continue;
    }
    const bool hex =
        ch == '0' && i + 1 < message.size() && (message[i + 1] == 'x' || message[i + 1] == 'X');
    i += hex ? 2 : 1;
    while (i < message.size() && (isdigit(static_cast<unsigned char>(message[i])) ||
                                  (hex && isxdigit(static_cast<unsigned char>(message[i])))))
      ++i;
    out += '#';
  }
  return out;
}

// The reasons said so far. Their number is bounded by the messages the shim and the model
// can give; the cap only guards against a reason that carries unbounded text.
constexpr size_t kMaxReasons = 1024;

}  // namespace

int report(int err, const Status& why, const std::string& reason) {
  // What the model cannot do is always said, once per reason: refusing the same feature for
  // another object (another CQ, another PD) says nothing new. Other failures are the
  // caller's input errors, reported every time with RNICDV_UVERBS_LOG=1.
  bool say = config().log_errors;
  if (!say && err == EOPNOTSUPP) {
    static std::mutex mu;
    static std::set<std::string> seen;
    const std::string key = reason.empty() ? without_numbers(why.message()) : reason;
    std::lock_guard<std::mutex> lock(mu);
    if (seen.size() < kMaxReasons)
      say = seen.insert(key).second;
    else
      say = seen.count(key) == 0;  // full: a new reason is still said, and not kept
  }
  if (say) log_line("%s (%s)", why.message().c_str(), strerror(err));
  return -err;
}

void log_line_once(const std::string& message) {
  static std::mutex mu;
  static std::set<std::string> seen;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (seen.size() >= kMaxReasons ? seen.count(message) != 0 : !seen.insert(message).second)
      return;
  }
  log_line("%s", message.c_str());
}

int fail(int err, const Status& why) {
  errno = -report(err, why);
  return -1;
}

int unimplemented(const char* what, uint32_t number) {
  static std::mutex mu;
  static std::set<std::string> seen;
  const std::string key = std::string(what) + "/" + std::to_string(number);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (seen.insert(key).second)
      log_line("%s (%u) is not implemented by the simulated HCA: %s", what, number,
               strerror(EOPNOTSUPP));
  }
  return -EOPNOTSUPP;
}

}  // namespace rnicdv::uverbs
