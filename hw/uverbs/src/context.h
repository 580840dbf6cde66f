// SPDX-License-Identifier: BSD-3-Clause
// One open /dev/infiniband/uverbsN: a verbs context and the objects created through it, as
// the kernel's ib_uverbs_file and its uobjects. Handles are per context; closing the command
// descriptor destroys everything left, in dependency order (QPs, SRQs, CQs, MRs, PDs).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "devices.h"
#include "events.h"
#include "rnicdv/hw/device.h"

namespace rnicdv::uverbs {

inline constexpr uint32_t kBfRegSize = 512;       // mlx5_ib_alloc_ucontext_resp.bf_reg_size
inline constexpr uint32_t kBfRegsPerUar = 4;      // libmlx5 MLX5_NUM_BFREGS_PER_UAR
inline constexpr uint32_t kNonFpBfRegsPerUar = 2; // MLX5_NON_FP_BFREGS_PER_UAR
inline constexpr uint32_t kMaxUarPages = 64;     // static UAR pages
inline constexpr uint32_t kDynBfRegs = 32;       // dynamic registers (thread domains), 2 a page
inline constexpr uint32_t kDynUarPages = kDynBfRegs / 2;
inline constexpr size_t kPage = 4096;
// The command descriptor is a memfd of this size (sparse): libmlx5's UAR mmap offsets,
// ((cmd << 8) | index) pages for the commands up to MLX5_IB_MMAP_ALLOC_WC (6), fall inside it,
// so a mapping the kernel makes (a program that reaches mmap by a system call or a patched
// entry point, as UCX's memory hooks do) gets the same pages the shim would map.
inline constexpr size_t kCommandFileBytes = size_t{7 << 8} * kPage;
// The largest command write() accepts: in_words is 16 bits (extended: 8-byte words, twice).
inline constexpr size_t kMaxCommandBytes = 1 << 20;

struct PdObject {
  std::unique_ptr<hw::Pd> pd;
  uint32_t users = 0;  // MRs and QPs
};

struct MrObject {
  std::unique_ptr<hw::Mr> mr;
  uint32_t pd = 0;
  uint32_t access = 0;  // IBV_ACCESS_* as registered (REREG_MR keeps what it does not change)
};

// An address handle: the kernel's mlx5 driver only resolves the destination MAC for it (the
// AV itself lives in user space); it keeps its PD busy.
struct AhObject {
  uint32_t pd = 0;
};

struct CqObject {
  std::unique_ptr<hw::Cq> cq;
  uint64_t user_handle = 0;
  uint64_t key = 0;  // owner key of its queued events
  std::shared_ptr<EventFile> channel;
  ReadCounter comp_read = std::make_shared<std::atomic<uint32_t>>(0);
  ReadCounter async_read = std::make_shared<std::atomic<uint32_t>>(0);
  uint32_t users = 0;  // QPs, and XRC SRQs completing on it
};

// An XRC domain (OPEN_XRCD). Opened on a file, it is that file's domain on this device: every
// OPEN_XRCD of the same file, in any context of the process, gets the same one (the kernel's
// xrcd_table, by inode), which lives until the last handle on it is closed.
struct SharedXrcd {
  std::unique_ptr<hw::Xrcd> xrcd;
};

struct XrcdObject {
  std::shared_ptr<SharedXrcd> shared;
  uint32_t users = 0;  // XRC SRQs and target QPs of this context on it
};

// A shared receive queue: libmlx5 owns its ring and posts into it without a command; the
// device follows the ring's free list.
struct SrqObject {
  std::unique_ptr<hw::Srq> srq;
  uint64_t user_handle = 0;
  uint64_t key = 0;
  uint32_t pd = 0;
  uint32_t max_wr = 0, max_sge = 0;
  uint32_t limit = 0;  // armed limit (0: off); the device disarms it when the event fires
  ReadCounter async_read = std::make_shared<std::atomic<uint32_t>>(0);
  uint32_t users = 0;  // QPs
  // An XRC SRQ (CREATE_XSRQ): its domain's handle and the CQ its receives complete on.
  bool xrc = false;
  uint32_t xrcd = 0, cq = 0;
};

struct QpObject {
  std::unique_ptr<hw::Qp> qp;
  uint64_t user_handle = 0;
  uint64_t key = 0;
  uint32_t qpn = 0;
  uint32_t pd = 0, send_cq = 0, recv_cq = 0;  // an XRC target: its XRC domain's handle in pd,
                                              // and no CQ
  bool has_srq = false;
  uint32_t srq = 0;    // its SRQ's handle, when has_srq
  uint32_t bfreg = 0;  // page * 4 + k (static pages: libmlx5's bfs[] index)
  ReadCounter async_read = std::make_shared<std::atomic<uint32_t>>(0);
  // What QUERY_QP reports besides the state: the attributes last applied.
  hw::QpAttr attr;
  uint32_t max_send_wr = 0, max_recv_wr = 0, max_send_sge = 0, max_recv_sge = 0,
           max_inline = 0;
  uint8_t sq_sig_all = 0;
  hw::QpType type = hw::QpType::rc;
  // The multicast groups it is attached to (ATTACH_MCAST), as the kernel's uverbs keeps them
  // per QP object: a repeated attach is taken as done, a detach must name one of them.
  std::vector<std::array<uint8_t, 16>> mcast;
};

struct Context {
  int cmd_fd = -1;
  SimDevice* dev = nullptr;
  std::mutex mu;
  bool have_ucontext = false;
  std::shared_ptr<EventFile> async;
  uint32_t tot_bfregs = 0;
  uint32_t static_pages = 0;  // uar_pages[0, static_pages) static, the rest dynamic
  int uar_memfd = -1;
  std::vector<uint8_t*> uar_pages;  // the first mapping of each UAR page (static, then dynamic)
  // The device's own mapping of each adopted page, which it reads its registers through: the
  // application may unmap its own (sim::attach_uar_page).
  std::vector<uint8_t*> uar_device_views;
  std::vector<std::pair<uint8_t*, size_t>> kept_mappings;  // munmap deferred to teardown
  std::vector<uint8_t*> kept_device_views;                 // the device's, for those pages
  std::vector<uint32_t> bfreg_users;  // QPs per register, indexed page * 4 + k
  uint32_t next_handle = 0;
  std::map<uint32_t, PdObject> pds;
  std::map<uint32_t, MrObject> mrs;
  std::map<uint32_t, AhObject> ahs;
  std::map<uint32_t, CqObject> cqs;
  std::map<uint32_t, XrcdObject> xrcds;
  std::map<uint32_t, SrqObject> srqs;
  std::map<uint32_t, QpObject> qps;
  std::vector<std::shared_ptr<EventFile>> channels;
};

std::shared_ptr<Context> context_of(int cmd_fd);
// Every live context on device `index` (for event delivery).
std::vector<std::shared_ptr<Context>> contexts_on(uint32_t index);
// Destroys every object of `ctx` (the caller holds ctx.mu).
void teardown_locked(Context& ctx);
// Finds the UAR pages the application mapped without the shim seeing it (a direct system
// call on the command descriptor) in /proc/self/maps, and gives the first mapping of each to
// the device, as command_mmap does (the caller holds ctx.mu).
void adopt_unseen_uar_mappings_locked(Context& ctx);
// The UAR page (index into Context::uar_pages) an mmap offset names, or -1.
int64_t uar_page_of_offset(const Context& ctx, uint64_t offset);

// Runs one write() command (commands.cc): `in` is the whole write() buffer. 0 or -errno.
int dispatch_write(Context& ctx, const uint8_t* in, size_t len);

// Owner keys for queued events: unique per process.
uint64_t next_owner_key();

}  // namespace rnicdv::uverbs
