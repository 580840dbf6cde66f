// SPDX-License-Identifier: BSD-3-Clause
// XRC domains: OPEN_XRCD and CLOSE_XRCD (the kernel's ib_uverbs_open_xrcd and
// ib_uverbs_close_xrcd). A domain opened on a file descriptor is that file's: the kernel keys
// its table by inode, so that processes sharing a file share the domain; here the table is the
// process's (its simulated HCAs are its own), per device.
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <rdma/ib_user_verbs.h>

#include <map>
#include <mutex>
#include <tuple>

#include "command.h"
#include "devices.h"

namespace rnicdv::uverbs {

namespace {

using InodeKey = std::tuple<uint32_t, dev_t, ino_t>;  // device index, the file's dev and inode

struct XrcdTable {
  std::mutex mu;
  std::map<InodeKey, std::weak_ptr<SharedXrcd>> by_inode;
};

XrcdTable& xrcd_table() {
  static auto* table = new XrcdTable();  // lives as long as any domain may
  return *table;
}

}  // namespace

int open_xrcd(Cmd& c) {
  Context& ctx = c.ctx;
  const auto req = c.core_as<ib_uverbs_open_xrcd>();
  std::shared_ptr<SharedXrcd> shared;
  if (req.fd == static_cast<uint32_t>(-1)) {
    // No file: a domain of its own (ibv_open_xrcd with fd -1), whatever the flags say, as the
    // kernel's ib_uverbs_open_xrcd reads them only for a file.
    Result<std::unique_ptr<hw::Xrcd>> made = ctx.dev->dev->open_xrcd();
    if (!made) return sim_error(c, "XRC domain", made.status());
    shared = std::make_shared<SharedXrcd>();
    shared->xrcd = std::move(made.value());
  } else {
    struct stat st {};
    // The system call itself: the command runs under the context's lock.
    if (::syscall(SYS_fstat, static_cast<int>(req.fd), &st) != 0)
      return c.error(EBADF, "XRC domain on fd %d: not an open file", static_cast<int>(req.fd));
    const InodeKey key{ctx.dev->index, st.st_dev, st.st_ino};
    XrcdTable& table = xrcd_table();
    std::lock_guard<std::mutex> lock(table.mu);
    auto it = table.by_inode.find(key);
    if (it != table.by_inode.end()) shared = it->second.lock();
    if (shared && (req.oflags & O_EXCL))
      return c.error(EINVAL, "XRC domain on fd %d: O_EXCL, and the file's domain exists",
                     static_cast<int>(req.fd));
    if (!shared) {
      if (!(req.oflags & O_CREAT))
        return c.error(EAGAIN, "XRC domain on fd %d: the file has no domain yet, and no O_CREAT",
                       static_cast<int>(req.fd));
      Result<std::unique_ptr<hw::Xrcd>> made = ctx.dev->dev->open_xrcd();
      if (!made) return sim_error(c, "XRC domain", made.status());
      shared = std::make_shared<SharedXrcd>();
      shared->xrcd = std::move(made.value());
      table.by_inode[key] = shared;
    }
  }
  const uint32_t h = new_handle(ctx);
  ctx.xrcds[h].shared = std::move(shared);
  ib_uverbs_open_xrcd_resp r{};
  r.xrcd_handle = h;
  if (int rc = c.reply(&r, sizeof r); rc != 0) {
    ctx.xrcds.erase(h);
    return rc;
  }
  return 0;
}

int close_xrcd(Cmd& c) {
  Context& ctx = c.ctx;
  const auto req = c.core_as<ib_uverbs_close_xrcd>();
  auto it = ctx.xrcds.find(req.xrcd_handle);
  if (it == ctx.xrcds.end())
    return c.error(EINVAL, "XRC domain handle %u: no such domain", req.xrcd_handle);
  if (it->second.users)
    return c.error(EBUSY, "XRC domain %u: %u SRQs and target QPs still use it",
                   it->second.shared->xrcd->xrcdn(), it->second.users);
  // The domain itself goes with the last handle on it, in any context.
  ctx.xrcds.erase(it);
  return 0;
}

}  // namespace rnicdv::uverbs
