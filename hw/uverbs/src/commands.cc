// SPDX-License-Identifier: BSD-3-Clause
// The uverbs write() commands (rdma/ib_user_verbs.h) with mlx5's driver data
// (rdma/mlx5-abi.h), answered from the simulated HCA.
//
// Framing (the kernel's ib_uverbs_write): an ib_uverbs_cmd_hdr whose in_words counts the
// whole buffer in 4-byte words and out_words the response; the core request follows, then
// the driver's. Extended commands (bit 31) add an ib_uverbs_ex_cmd_hdr and count in 8-byte
// words. Commands that answer carry the response address as the core request's first u64.
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/mlx5-abi.h>

#include <algorithm>
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "command.h"
#include "context.h"
#include "handles.h"
#include "shim.h"
#include "user_memory.h"
#include "wire/frame.h"

namespace rnicdv::uverbs {

namespace {

static_assert(sizeof(ib_uverbs_cmd_hdr) == 8);
static_assert(sizeof(ib_uverbs_ex_cmd_hdr) == 16);
static_assert(sizeof(ib_uverbs_query_device_resp) == 176);
static_assert(sizeof(ib_uverbs_query_port_resp) == 40);
static_assert(sizeof(ib_uverbs_create_qp) == 56);
static_assert(sizeof(ib_uverbs_modify_qp) == 112);
static_assert(sizeof(ib_uverbs_query_qp_resp) == 128);
static_assert(sizeof(mlx5_ib_alloc_ucontext_resp) == 72);

// Firmware version reported: major.minor.sub.
constexpr uint64_t kFwVersion = (uint64_t{16} << 32) | (uint64_t{99} << 16) | 0;
constexpr uint32_t kVendorId = 0x02c9;     // Mellanox
constexpr uint32_t kVendorPartId = 4119;   // ConnectX-5
constexpr uint16_t kMaxSqDescBytes = 512;  // ctrl + raddr + 30 data segments (sim caps)
constexpr uint16_t kMaxRqDescBytes = 512;
constexpr uint32_t kMaxSendWqebb = 32768;

}  // namespace

const char* command_name(uint32_t cmd) {
  static const char* const names[] = {
      "GET_CONTEXT", "QUERY_DEVICE", "QUERY_PORT", "ALLOC_PD", "DEALLOC_PD", "CREATE_AH",
      "MODIFY_AH", "QUERY_AH", "DESTROY_AH", "REG_MR", "REG_SMR", "REREG_MR", "QUERY_MR",
      "DEREG_MR", "ALLOC_MW", "BIND_MW", "DEALLOC_MW", "CREATE_COMP_CHANNEL", "CREATE_CQ",
      "RESIZE_CQ", "DESTROY_CQ", "POLL_CQ", "PEEK_CQ", "REQ_NOTIFY_CQ", "CREATE_QP", "QUERY_QP",
      "MODIFY_QP", "DESTROY_QP", "POST_SEND", "POST_RECV", "ATTACH_MCAST", "DETACH_MCAST",
      "CREATE_SRQ", "MODIFY_SRQ", "QUERY_SRQ", "DESTROY_SRQ", "POST_SRQ_RECV", "OPEN_XRCD",
      "CLOSE_XRCD", "CREATE_XSRQ", "OPEN_QP"};
  static const char* const ex_names[] = {"EX_CREATE_FLOW", "EX_DESTROY_FLOW", "EX_CREATE_WQ",
                                         "EX_MODIFY_WQ", "EX_DESTROY_WQ",
                                         "EX_CREATE_RWQ_IND_TBL", "EX_DESTROY_RWQ_IND_TBL",
                                         "EX_MODIFY_CQ"};
  if (cmd < std::size(names)) return names[cmd];
  if (cmd >= IB_USER_VERBS_EX_CMD_CREATE_FLOW && cmd - IB_USER_VERBS_EX_CMD_CREATE_FLOW < std::size(ex_names))
    return ex_names[cmd - IB_USER_VERBS_EX_CMD_CREATE_FLOW];
  return "unknown command";
}

int Cmd::error(int err, const char* fmt, ...) const {
  char why[320];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  return fail(err, Status::error(Errc::invalid_argument, "%s: %s: %s", dev_name.c_str(),
                                 command_name(number), why));
}

int sim_error(const Cmd& c, const Status& st) {
  return fail(to_errno(st.code()), Status(st.code(), c.dev_name + ": " + command_name(c.number) +
                                                  ": " + st.message()));
}

uint32_t new_handle(Context& ctx) { return ctx.next_handle++; }

namespace {

// ---- GET_CONTEXT ----
int get_context(Cmd& c) {
  Context& ctx = c.ctx;
  if (ctx.have_ucontext) return c.error(EINVAL, "the context already exists");
  auto req = c.drv_as<mlx5_ib_alloc_ucontext_req_v2>();
  if (c.drv_len < offsetof(mlx5_ib_alloc_ucontext_req_v2, flags))
    return c.error(EINVAL, "driver request of %zu bytes is too short", c.drv_len);
  if (req.total_num_bfregs == 0 || req.num_low_latency_bfregs >= req.total_num_bfregs)
    return c.error(EINVAL, "%u BlueFlame registers with %u low-latency ones",
                   req.total_num_bfregs, req.num_low_latency_bfregs);
  // Static UARs: two usable registers per 4 KiB UAR page (the kernel's calc_total_bfregs).
  const uint32_t tot = (req.total_num_bfregs + kNonFpBfRegsPerUar - 1) / kNonFpBfRegsPerUar *
                       kNonFpBfRegsPerUar;
  const uint32_t pages = tot / kNonFpBfRegsPerUar;
  if (pages > kMaxUarPages)
    return c.error(EINVAL, "%u BlueFlame registers exceed %u UAR pages", tot, kMaxUarPages);

  // The command descriptor is a memfd whose pages at libmlx5's mmap offsets are the UAR
  // pages (cdev.cc); this duplicate outlives the application's descriptors while a mapping
  // needs it. A raw system call: the shim's own fcntl would take it for the application's.
  const int memfd = static_cast<int>(::syscall(SYS_fcntl, ctx.cmd_fd, F_DUPFD_CLOEXEC, 0));
  const uint32_t all_pages = pages + kDynUarPages;
  if (memfd < 0) {
    const int err = errno;
    return c.error(err, "UAR memory: %s", strerror(err));
  }
  std::shared_ptr<EventFile> async = EventFile::create(sizeof(ib_uverbs_async_event_desc));
  if (!async) {
    const int err = errno;
    libc::close(memfd);
    return c.error(err, "async event fd: %s", strerror(err));
  }
  register_event_file(async);
  ctx.async = async;
  ctx.uar_memfd = memfd;
  ctx.uar_pages.assign(all_pages, nullptr);
  ctx.bfreg_users.assign(all_pages * kBfRegsPerUar, 0);
  ctx.tot_bfregs = tot;
  ctx.static_pages = pages;
  ctx.have_ucontext = true;

  const hw::DeviceCaps& caps = ctx.dev->dev->info().caps;
  ib_uverbs_get_context_resp core{};
  core.async_fd = static_cast<uint32_t>(async->fd());
  core.num_comp_vectors = 1;
  mlx5_ib_alloc_ucontext_resp m{};
  m.qp_tab_size = 1u << 18;
  m.bf_reg_size = kBfRegSize;
  m.tot_bfregs = tot;  // non-zero: static UARs, mapped with mmap
  m.cache_line_size = 64;
  m.max_sq_desc_sz = kMaxSqDescBytes;
  m.max_rq_desc_sz = kMaxRqDescBytes;
  m.max_send_wqebb = kMaxSendWqebb;
  m.max_recv_wr = caps.max_qp_wr;
  m.max_srq_recv_wr = caps.max_srq_wr;
  m.num_ports = 1;
  m.cqe_version = std::min<uint8_t>(req.max_cqe_version, 1);
  // CREATE_AH answers with the destination MAC (mlx5_ib_create_ah_resp), so libmlx5 does not
  // resolve it itself through a netlink neighbour lookup that cannot see the simulated wire.
  m.cmds_supp_uhw = MLX5_USER_CMDS_SUPP_UHW_CREATE_AH;
  m.eth_min_inline = MLX5_USER_INLINE_MODE_NONE;  // no L2 header inline (raw QPs only)
  m.log_uar_size = 12;
  m.num_uars_per_page = 1;
  // Dynamic registers: libmlx5 maps their pages with MLX5_IB_MMAP_ALLOC_WC and gives one to
  // each thread domain, lock-free (mlx5_attach_dedicated_bf).
  m.num_dyn_bfregs = kDynBfRegs;
  m.response_length = static_cast<uint32_t>(std::min(sizeof m, c.resp_drv_len));
  c.reply(&core, sizeof core, &m, sizeof m);
  return 0;
}

void fill_device_attr(const Context& ctx, ib_uverbs_query_device_resp& r) {
  const hw::DeviceInfo& info = ctx.dev->dev->info();
  const hw::DeviceCaps& caps = info.caps;
  r.fw_ver = kFwVersion;
  r.node_guid = htobe64(info.node_guid);
  r.sys_image_guid = htobe64(info.node_guid);
  r.max_mr_size = caps.max_mr_size;
  r.page_size_cap = ~uint64_t{4095};
  r.vendor_id = kVendorId;
  r.vendor_part_id = kVendorPartId;
  r.hw_ver = 0;
  r.max_qp = caps.max_qp;
  r.max_qp_wr = caps.max_qp_wr;
  r.device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT |
                       IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_CHANGE_PHY_PORT;
  r.max_sge = caps.max_send_sge;
  r.max_sge_rd = caps.max_send_sge;
  r.max_cq = caps.max_cq;
  r.max_cqe = caps.max_cqe - 1;
  r.max_mr = caps.max_mr;
  r.max_pd = caps.max_pd;
  r.max_srq = caps.max_srq;
  r.max_srq_wr = caps.max_srq_wr;
  r.max_srq_sge = caps.max_recv_sge;
  r.max_qp_rd_atom = caps.max_qp_rd_atom;
  r.max_qp_init_rd_atom = caps.max_qp_init_rd_atom;
  r.max_res_rd_atom = caps.max_qp_rd_atom * caps.max_qp;
  r.atomic_cap = IBV_ATOMIC_HCA;
  r.max_pkeys = kPkeyTableLen;
  r.local_ca_ack_delay = 16;
  r.phys_port_cnt = 1;
}

int query_device(Cmd& c) {
  ib_uverbs_query_device_resp r{};
  fill_device_attr(c.ctx, r);
  c.reply(&r, sizeof r);
  return 0;
}

int query_device_ex(Cmd& c) {
  const auto req = c.core_as<ib_uverbs_ex_query_device>();
  if (req.comp_mask || req.reserved) return c.error(EINVAL, "comp_mask %#x", req.comp_mask);
  ib_uverbs_ex_query_device_resp r{};
  fill_device_attr(c.ctx, r.base);
  r.comp_mask = 0;
  // CQE timestamps are the device's clock in nanoseconds, 64 bits wide.
  r.timestamp_mask = ~uint64_t{0};
  r.hca_core_clock = 1000000;  // kHz
  r.response_length = static_cast<uint32_t>(std::min(sizeof r, c.resp_core_len));
  c.reply(&r, sizeof r);
  return 0;
}

int query_port(Cmd& c) {
  const auto req = c.core_as<ib_uverbs_query_port>();
  if (req.port_num != 1) return c.error(EINVAL, "port %u does not exist", req.port_num);
  const hw::DeviceCaps& caps = c.ctx.dev->dev->info().caps;
  ib_uverbs_query_port_resp r{};
  r.port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS;
  r.max_msg_sz = caps.max_msg_size;
  r.gid_tbl_len = kGidTableLen;
  r.pkey_tbl_len = kPkeyTableLen;
  r.lid = 0;
  r.state = IBV_PORT_ACTIVE;
  r.max_mtu = static_cast<uint8_t>(caps.max_mtu);
  r.active_mtu = static_cast<uint8_t>(caps.active_mtu);
  r.max_vl_num = 1;
  r.active_width = 2;   // 4x
  r.active_speed = 32;  // EDR (25 Gb/s per lane)
  r.phys_state = 5;     // LinkUp
  r.link_layer = IBV_LINK_LAYER_ETHERNET;
  r.flags = IB_UVERBS_QPF_GRH_REQUIRED;
  c.reply(&r, sizeof r);
  return 0;
}

// ---- PD, MR ----
int alloc_pd(Cmd& c) {
  Result<std::unique_ptr<hw::Pd>> pd = c.ctx.dev->dev->alloc_pd();
  if (!pd) return sim_error(c, pd.status());
  const uint32_t h = new_handle(c.ctx);
  ib_uverbs_alloc_pd_resp r{};
  r.pd_handle = h;
  mlx5_ib_alloc_pd_resp m{};
  m.pdn = pd.value()->pdn();
  c.ctx.pds[h].pd = std::move(pd.value());
  c.reply(&r, sizeof r, &m, sizeof m);
  return 0;
}

int dealloc_pd(Cmd& c) {
  const auto req = c.core_as<ib_uverbs_dealloc_pd>();
  auto it = c.ctx.pds.find(req.pd_handle);
  if (it == c.ctx.pds.end()) return c.error(EINVAL, "pd handle %u does not exist", req.pd_handle);
  if (it->second.users) return c.error(EBUSY, "pd %u still has %u MRs or QPs", req.pd_handle, it->second.users);
  c.ctx.pds.erase(it);
  return 0;
}

// ---- Address handles ----
// For RoCE the kernel resolves the destination MAC from the destination GID; on the simulated
// fabric that is the MAC the wire gives the IPv4 address (wire/frame.h mac_for_ipv4).
int create_ah(Cmd& c) {
  const auto req = c.core_as<ib_uverbs_create_ah>();
  auto pd = c.ctx.pds.find(req.pd_handle);
  if (pd == c.ctx.pds.end()) return c.error(EINVAL, "pd handle %u does not exist", req.pd_handle);
  const ib_uverbs_ah_attr& a = req.attr;
  if (a.port_num != 1) return c.error(EINVAL, "port %u does not exist (one port)", a.port_num);
  if (!a.is_global)
    return c.error(EINVAL, "no GRH: RoCE address handles need one (is_global)");
  if (a.grh.sgid_index >= kGidTableLen)
    return c.error(EINVAL, "source GID index %u is outside the GID table (%u entries)",
                   a.grh.sgid_index, kGidTableLen);
  static constexpr uint8_t kV4Prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(a.grh.dgid, kV4Prefix, sizeof kV4Prefix) != 0)
    return c.error(EINVAL,
                   "destination GID is not IPv4-mapped (the simulated fabric carries RoCE v2 "
                   "over IPv4 only)");
  uint32_t ipv4 = 0;
  std::memcpy(&ipv4, a.grh.dgid + 12, 4);
  const sim::MacAddress mac = sim::mac_for_ipv4(be32toh(ipv4));
  const uint32_t h = new_handle(c.ctx);
  c.ctx.ahs[h].pd = req.pd_handle;
  ++pd->second.users;
  ib_uverbs_create_ah_resp r{};
  r.ah_handle = h;
  mlx5_ib_create_ah_resp m{};
  std::memcpy(m.dmac, mac.data(), sizeof m.dmac);
  m.response_length = static_cast<uint32_t>(std::min(sizeof m, c.resp_drv_len));
  c.reply(&r, sizeof r, &m, sizeof m);
  return 0;
}

int destroy_ah(Cmd& c) {
  const auto req = c.core_as<ib_uverbs_destroy_ah>();
  auto it = c.ctx.ahs.find(req.ah_handle);
  if (it == c.ctx.ahs.end()) return c.error(EINVAL, "ah handle %u does not exist", req.ah_handle);
  --c.ctx.pds[it->second.pd].users;
  c.ctx.ahs.erase(it);
  return 0;
}

// The kernel's checks of ib_uverbs_reg_mr and REREG_MR's new translation or access. Returns
// the rights the device keeps (hw::access bits), or -1 after the kernel's errno and reason.
int64_t check_region(const Cmd& c, uint64_t start, uint64_t length, uint64_t hca_va,
                     uint32_t access_flags) {
  if (length == 0) return c.error(EINVAL, "zero length");
  if (hca_va != start)
    return c.error(EOPNOTSUPP, "an I/O virtual address (%#llx) other than the buffer's (%#llx)",
                   static_cast<unsigned long long>(hca_va),
                   static_cast<unsigned long long>(start));
  constexpr uint32_t kUnsupported = IBV_ACCESS_ZERO_BASED | IBV_ACCESS_ON_DEMAND |
                                    IBV_ACCESS_HUGETLB;
  if (access_flags & kUnsupported)
    return c.error(EOPNOTSUPP, "access flags %#x (zero-based, on-demand or hugetlb)",
                   access_flags);
  const uint32_t access = access_flags & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                          IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  // get_user_pages: every page mapped, writable if the HCA may write it.
  const bool writable = (access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                   IBV_ACCESS_REMOTE_ATOMIC)) != 0;
  if (!user_range_ok(start, length, writable))
    return c.error(EFAULT, "[%#llx, +%llu) is not mapped%s",
                   static_cast<unsigned long long>(start),
                   static_cast<unsigned long long>(length), writable ? " writable" : "");
  return access;
}

int reg_mr(Cmd& c) {
  const auto req = c.core_as<ib_uverbs_reg_mr>();
  auto pd = c.ctx.pds.find(req.pd_handle);
  if (pd == c.ctx.pds.end()) return c.error(EINVAL, "pd handle %u does not exist", req.pd_handle);
  const int64_t access = check_region(c, req.start, req.length, req.hca_va, req.access_flags);
  if (access < 0) return -1;
  Result<std::unique_ptr<hw::Mr>> mr = c.ctx.dev->dev->reg_mr(
      *pd->second.pd, reinterpret_cast<void*>(req.start), req.length, static_cast<uint32_t>(access));
  if (!mr) return sim_error(c, mr.status());
  const uint32_t h = new_handle(c.ctx);
  ib_uverbs_reg_mr_resp r{};
  r.mr_handle = h;
  r.lkey = mr.value()->lkey();
  r.rkey = mr.value()->rkey();
  c.ctx.mrs[h] = MrObject{std::move(mr.value()), req.pd_handle, req.access_flags};
  ++pd->second.users;
  c.reply(&r, sizeof r);
  return 0;
}

// REREG_MR: a new translation, PD or access for a registered region. mlx5 changes the region
// in place (a UMR on the same mkey), so the keys a peer holds stay valid and carry the new
// rights; the response repeats them. A refused change leaves the region as it was.
int rereg_mr(Cmd& c) {
  const auto req = c.core_as<ib_uverbs_rereg_mr>();
  auto it = c.ctx.mrs.find(req.mr_handle);
  if (it == c.ctx.mrs.end()) return c.error(EINVAL, "mr handle %u does not exist", req.mr_handle);
  MrObject& obj = it->second;
  if (req.flags == 0 || (req.flags & ~uint32_t{IBV_REREG_MR_FLAGS_SUPPORTED}))
    return c.error(EINVAL, "mr handle %u: flags %#x", req.mr_handle, req.flags);
  const bool translation = req.flags & IBV_REREG_MR_CHANGE_TRANSLATION;
  const uint32_t pd_handle = (req.flags & IBV_REREG_MR_CHANGE_PD) ? req.pd_handle : obj.pd;
  auto pd = c.ctx.pds.find(pd_handle);
  if (pd == c.ctx.pds.end()) return c.error(EINVAL, "pd handle %u does not exist", pd_handle);
  const uint64_t start = translation ? req.start : reinterpret_cast<uint64_t>(obj.mr->addr());
  const uint64_t length = translation ? req.length : obj.mr->length();
  const uint64_t hca_va = translation ? req.hca_va : start;
  const uint32_t flags = (req.flags & IBV_REREG_MR_CHANGE_ACCESS) ? req.access_flags : obj.access;
  const int64_t access = check_region(c, start, length, hca_va, flags);
  if (access < 0) return -1;
  if (Status st = sim::rereg_mr(*obj.mr, *pd->second.pd, reinterpret_cast<void*>(start), length,
                                static_cast<uint32_t>(access));
      !st)
    return sim_error(c, st);
  --c.ctx.pds[obj.pd].users;
  ++pd->second.users;
  obj.pd = pd_handle;
  obj.access = flags;
  ib_uverbs_rereg_mr_resp r{};
  r.lkey = obj.mr->lkey();
  r.rkey = obj.mr->rkey();
  c.reply(&r, sizeof r);
  return 0;
}

int dereg_mr(Cmd& c) {
  const auto req = c.core_as<ib_uverbs_dereg_mr>();
  auto it = c.ctx.mrs.find(req.mr_handle);
  if (it == c.ctx.mrs.end()) return c.error(EINVAL, "mr handle %u does not exist", req.mr_handle);
  --c.ctx.pds[it->second.pd].users;
  c.ctx.mrs.erase(it);
  return 0;
}

// ---- completion channels and CQs ----
int create_comp_channel(Cmd& c) {
  std::shared_ptr<EventFile> ch = EventFile::create(sizeof(ib_uverbs_comp_event_desc));
  if (!ch) return c.error(errno, "eventfd: %s", strerror(errno));
  register_event_file(ch);
  c.ctx.channels.push_back(ch);
  ib_uverbs_create_comp_channel_resp r{};
  r.fd = static_cast<uint32_t>(ch->fd());
  c.reply(&r, sizeof r);
  return 0;
}

int create_cq(Cmd& c) {
  Context& ctx = c.ctx;
  const auto req = c.core_as<ib_uverbs_create_cq>();
  const auto m = c.drv_as<mlx5_ib_create_cq>();
  if (c.drv_len < offsetof(mlx5_ib_create_cq, uar_page_index) + 2)
    return c.error(EINVAL, "driver request of %zu bytes is too short", c.drv_len);
  const uint64_t entries = uint64_t{req.cqe} + 1;
  if (req.cqe == 0 || (entries & (entries - 1)) != 0)
    return c.error(EINVAL, "cqe %u: the ring (cqe + 1 entries) must be a power of two", req.cqe);
  if (req.comp_vector != 0) return c.error(EINVAL, "completion vector %u (only 0)", req.comp_vector);
  if (m.cqe_comp_en) return c.error(EOPNOTSUPP, "CQE compression");
  if (m.uar_page_index >= ctx.static_pages)
    return c.error(EINVAL, "UAR page %u of %u", m.uar_page_index, ctx.static_pages);
  if (!ctx.uar_pages[m.uar_page_index]) adopt_unseen_uar_mappings_locked(ctx);
  std::shared_ptr<EventFile> channel;
  if (req.comp_channel >= 0) {
    channel = event_file(req.comp_channel);
    if (!channel || std::find(ctx.channels.begin(), ctx.channels.end(), channel) == ctx.channels.end())
      return c.error(EINVAL, "fd %d is not a completion channel of this context", req.comp_channel);
  }
  if (!user_range_ok(m.buf_addr, entries * m.cqe_size, true) || !user_range_ok(m.db_addr, 8, true))
    return c.error(EFAULT, "CQ ring %#llx (%llu bytes) or doorbell record %#llx is not writable",
                   static_cast<unsigned long long>(m.buf_addr),
                   static_cast<unsigned long long>(entries * m.cqe_size),
                   static_cast<unsigned long long>(m.db_addr));
  sim::ExternalCqMemory mem;
  mem.buf = reinterpret_cast<uint8_t*>(m.buf_addr);
  mem.cqe_cnt = static_cast<uint32_t>(entries);
  mem.cqe_size = m.cqe_size;
  mem.dbrec = reinterpret_cast<uint32_t*>(m.db_addr);
  mem.cq_uar = ctx.uar_pages[m.uar_page_index];
  Result<std::unique_ptr<hw::Cq>> cq = sim::create_cq_external(*ctx.dev->dev, mem);
  if (!cq) return sim_error(c, cq.status());

  const uint32_t h = new_handle(ctx);
  CqObject& obj = ctx.cqs[h];
  obj.cq = std::move(cq.value());
  obj.user_handle = req.user_handle;
  obj.key = next_owner_key();
  obj.channel = channel;
  if (channel) {
    // Every CQ arms through UAR page 0 + 0x20 in static-UAR mode, so one arm can overwrite
    // another before the device reads the register; the device also watches each handled
    // CQ's doorbell-record arm word, which it marks so that even a first arm (word 0) shows.
    std::weak_ptr<EventFile> weak = channel;
    const uint64_t user_handle = req.user_handle, key = obj.key;
    ReadCounter counter = obj.comp_read;
    Status st = sim::set_cq_event_handler(*obj.cq, [weak, user_handle, key, counter] {
      if (auto ch = weak.lock()) {
        ib_uverbs_comp_event_desc d{};
        d.cq_handle = user_handle;
        ch->push(&d, key, counter);
      }
    });
    if (!st) {
      ctx.cqs.erase(h);
      return sim_error(c, st);
    }
  }
  ib_uverbs_create_cq_resp r{};
  r.cq_handle = h;
  r.cqe = req.cqe;
  mlx5_ib_create_cq_resp mr{};
  mr.cqn = obj.cq->view().dv.cqn;
  c.reply(&r, sizeof r, &mr, sizeof mr);
  return 0;
}

int destroy_cq(Cmd& c) {
  Context& ctx = c.ctx;
  const auto req = c.core_as<ib_uverbs_destroy_cq>();
  auto it = ctx.cqs.find(req.cq_handle);
  if (it == ctx.cqs.end()) return c.error(EINVAL, "cq handle %u does not exist", req.cq_handle);
  CqObject& obj = it->second;
  if (obj.users) return c.error(EBUSY, "cq %u is used by %u QPs", req.cq_handle, obj.users);
  if (obj.channel) {
    (void)sim::set_cq_event_handler(*obj.cq, {});
    obj.channel->purge(obj.key);
  }
  if (ctx.async) ctx.async->purge(obj.key);
  ib_uverbs_destroy_cq_resp r{};
  r.comp_events_reported = obj.comp_read->load();
  r.async_events_reported = obj.async_read->load();
  ctx.cqs.erase(it);
  c.reply(&r, sizeof r);
  return 0;
}

// ---- QPs ----
// libmlx5's bfs[] index of register k (0 or 1) of UAR page p, and back.
uint32_t bfreg_of(uint32_t page, uint32_t k) { return page * kBfRegsPerUar + k; }

// As the kernel's static allocation: the last `low latency` registers go to one QP each,
// later QPs share the medium ones (least used first). Register 0 is never handed out: it
// is the doorbell-only register libmlx5 keeps for itself.
uint32_t pick_bfreg(Context& ctx) {
  const uint32_t pages = ctx.static_pages;
  const uint32_t low_latency = 4;
  std::vector<uint32_t> regs;  // in the kernel's bfregn order
  for (uint32_t n = 0; n < pages * kNonFpBfRegsPerUar; ++n)
    regs.push_back(bfreg_of(n / kNonFpBfRegsPerUar, n % kNonFpBfRegsPerUar));
  const uint32_t first_low = static_cast<uint32_t>(regs.size()) > low_latency + 1
                                 ? static_cast<uint32_t>(regs.size()) - low_latency
                                 : static_cast<uint32_t>(regs.size());
  for (uint32_t n = first_low; n < regs.size(); ++n)
    if (ctx.bfreg_users[regs[n]] == 0) return regs[n];
  uint32_t best = regs.size() > 1 ? regs[1] : 0;
  for (uint32_t n = 1; n < first_low; ++n)
    if (ctx.bfreg_users[regs[n]] < ctx.bfreg_users[best]) best = regs[n];
  return best;
}

// CREATE_QP, in its first form or the extended one: `req` holds the fields both share, and
// `extended` says which response to write.
int create_qp_common(Cmd& c, const ib_uverbs_create_qp& req, bool extended) {
  Context& ctx = c.ctx;
  const auto m = c.drv_as<mlx5_ib_create_qp>();
  if (c.drv_len < offsetof(mlx5_ib_create_qp, bfreg_index))
    return c.error(EINVAL, "driver request of %zu bytes is too short", c.drv_len);
  if (req.qp_type != IBV_QPT_RC && req.qp_type != IBV_QPT_UD)
    return c.error(EOPNOTSUPP, "QP type %u (the simulated HCA runs RC and UD only)", req.qp_type);
  const hw::QpType type = req.qp_type == IBV_QPT_UD ? hw::QpType::ud : hw::QpType::rc;
  if (type == hw::QpType::ud && req.is_srq)
    return c.error(EOPNOTSUPP, "a UD QP on a shared receive queue");
  if (m.flags & ~(MLX5_QP_FLAG_SCATTER_CQE | MLX5_QP_FLAG_ALLOW_SCATTER_CQE |
                  MLX5_QP_FLAG_BFREG_INDEX))
    return c.error(EOPNOTSUPP, "mlx5 QP flags %#x", m.flags);
  auto pd = ctx.pds.find(req.pd_handle);
  auto scq = ctx.cqs.find(req.send_cq_handle);
  auto rcq = ctx.cqs.find(req.recv_cq_handle);
  if (pd == ctx.pds.end()) return c.error(EINVAL, "pd handle %u does not exist", req.pd_handle);
  if (scq == ctx.cqs.end() || rcq == ctx.cqs.end())
    return c.error(EINVAL, "cq handles %u/%u", req.send_cq_handle, req.recv_cq_handle);
  SrqObject* srq = nullptr;
  if (req.is_srq) {
    auto s = ctx.srqs.find(req.srq_handle);
    if (s == ctx.srqs.end()) return c.error(EINVAL, "srq handle %u does not exist", req.srq_handle);
    srq = &s->second;
  }
  if (!m.buf_addr || !m.db_addr) return c.error(EINVAL, "no buffer or doorbell record");
  if (m.rq_wqe_count && (m.rq_wqe_shift < 4 || m.rq_wqe_shift > 12))
    return c.error(EINVAL, "receive WQE stride 2^%u", m.rq_wqe_shift);

  // A thread domain's QP names its dynamic register (the kernel's bfregn_to_uar_index with
  // dyn_bfreg); otherwise the register is assigned here.
  const bool dynamic = (m.flags & MLX5_QP_FLAG_BFREG_INDEX) != 0;
  if (dynamic && m.bfreg_index >= kDynBfRegs)
    return c.error(EINVAL, "dynamic register %u of %u", m.bfreg_index, kDynBfRegs);
  const uint32_t bfreg = dynamic ? (ctx.static_pages + m.bfreg_index / kNonFpBfRegsPerUar) *
                                           kBfRegsPerUar +
                                       m.bfreg_index % kNonFpBfRegsPerUar
                                 : pick_bfreg(ctx);
  const uint32_t page = bfreg / kBfRegsPerUar;
  if (!ctx.uar_pages[page]) adopt_unseen_uar_mappings_locked(ctx);
  if (!ctx.uar_pages[page])
    return c.error(EINVAL, "UAR page %u of register %u is not mapped", page, bfreg);

  sim::ExternalQpMemory mem;
  auto* buf = reinterpret_cast<uint8_t*>(m.buf_addr);
  const size_t rq_bytes = m.rq_wqe_count ? size_t{m.rq_wqe_count} << m.rq_wqe_shift : 0;
  const size_t sq_bytes = size_t{m.sq_wqe_count} * 64;  // MLX5_SEND_WQE_BB
  if (!user_range_ok(m.buf_addr, rq_bytes + sq_bytes, true) || !user_range_ok(m.db_addr, 8, true))
    return c.error(EFAULT, "QP buffer %#llx (%zu bytes) or doorbell record %#llx is not writable",
                   static_cast<unsigned long long>(m.buf_addr), rq_bytes + sq_bytes,
                   static_cast<unsigned long long>(m.db_addr));
  // A QP without a receive queue gets a one-entry ring that is never posted to.
  mem.rq_buf = buf;
  mem.rq_wqe_cnt = m.rq_wqe_count ? m.rq_wqe_count : 1;
  mem.rq_stride = m.rq_wqe_count ? 1u << m.rq_wqe_shift : 16;
  mem.sq_buf = buf + rq_bytes;
  mem.sq_wqe_cnt = m.sq_wqe_count;
  mem.dbrec = reinterpret_cast<uint32_t*>(m.db_addr);
  mem.bf_reg = ctx.uar_pages[page] + 0x800 + (bfreg % kBfRegsPerUar) * kBfRegSize;
  mem.bf_size = bfreg == 0 ? 0 : kBfRegSize / 2;
  mem.user_index = m.uidx & 0xffffff;
  mem.type = type;
  mem.granted.max_send_wr = req.max_send_wr;
  mem.granted.max_recv_wr = req.max_recv_wr;
  mem.granted.max_send_sge = req.max_send_sge;
  mem.granted.max_recv_sge = req.max_recv_sge;
  mem.granted.max_inline_data = req.max_inline_data;
  if (srq) {
    mem.srq = srq->srq.get();
    mem.granted.max_recv_wr = 0;
    mem.granted.max_recv_sge = 0;
  }
  Result<std::unique_ptr<hw::Qp>> qp = sim::create_qp_external(
      *ctx.dev->dev, *pd->second.pd, *scq->second.cq, *rcq->second.cq, mem);
  if (!qp) return sim_error(c, qp.status());

  const uint32_t h = new_handle(ctx);
  QpObject& obj = ctx.qps[h];
  obj.qp = std::move(qp.value());
  obj.user_handle = req.user_handle;
  obj.key = next_owner_key();
  obj.qpn = obj.qp->view().qpn;
  obj.pd = req.pd_handle;
  obj.send_cq = req.send_cq_handle;
  obj.recv_cq = req.recv_cq_handle;
  obj.has_srq = srq != nullptr;
  obj.srq = req.srq_handle;
  obj.bfreg = bfreg;
  obj.max_send_wr = req.max_send_wr;
  // What the receive ring libmlx5 laid out holds, as the kernel reports it (mlx5_ib_query_qp:
  // the ring's WQE count, and the data segments one stride has room for); libmlx5 refuses
  // receives beyond those.
  obj.max_recv_wr = srq ? 0 : m.rq_wqe_count;
  obj.max_send_sge = req.max_send_sge;
  obj.max_recv_sge = srq || !m.rq_wqe_count ? 0 : (1u << m.rq_wqe_shift) / 16;
  obj.max_inline = req.max_inline_data;
  obj.sq_sig_all = req.sq_sig_all;
  obj.type = type;
  ++ctx.bfreg_users[bfreg];
  ++pd->second.users;
  ++scq->second.users;
  ++rcq->second.users;
  if (srq) ++srq->users;

  ib_uverbs_create_qp_resp r{};
  r.qp_handle = h;
  r.qpn = obj.qpn;
  r.max_send_wr = obj.max_send_wr;
  r.max_recv_wr = obj.max_recv_wr;
  r.max_send_sge = obj.max_send_sge;
  r.max_recv_sge = obj.max_recv_sge;
  r.max_inline_data = req.max_inline_data;
  mlx5_ib_create_qp_resp mr{};
  mr.bfreg_index = dynamic ? UINT32_MAX : bfreg;  // the kernel's MLX5_IB_INVALID_BFREG
  if (extended) {
    ib_uverbs_ex_create_qp_resp rx{};
    rx.base = r;
    rx.response_length = static_cast<uint32_t>(std::min(sizeof rx, c.resp_core_len));
    c.reply(&rx, sizeof rx, &mr, sizeof mr);
  } else {
    c.reply(&r, sizeof r, &mr, sizeof mr);
  }
  return 0;
}

int create_qp(Cmd& c) { return create_qp_common(c, c.core_as<ib_uverbs_create_qp>(), false); }

// The extended CREATE_QP, which libmlx5 sends when the application gives create flags, a TSO
// header size, an indirection table or an RX hash: none of them has a meaning for an RC QP of
// the model, so each is refused by name; the rest is the first form's request.
int create_qp_ex(Cmd& c) {
  const auto x = c.core_as<ib_uverbs_ex_create_qp>();
  if (x.comp_mask & IB_UVERBS_CREATE_QP_MASK_IND_TABLE)
    return c.error(EOPNOTSUPP, "receive work queue indirection table %u (RSS QPs)",
                   x.rwq_ind_tbl_handle);
  if (x.comp_mask & ~static_cast<uint32_t>(IB_UVERBS_CREATE_QP_SUP_COMP_MASK))
    return c.error(EINVAL, "unknown comp_mask bits %#x", x.comp_mask);
  // Blocking multicast loopback on a UD QP holds trivially: the model has no multicast, so
  // nothing loops back. Every other flag is refused by name.
  uint32_t flags = x.create_flags;
  if (x.qp_type == IBV_QPT_UD) flags &= ~static_cast<uint32_t>(IBV_QP_CREATE_BLOCK_SELF_MCAST_LB);
  if (flags)
    return c.error(EOPNOTSUPP, "create flags %#x (the simulated HCA takes none%s)", flags,
                   x.qp_type == IBV_QPT_UD ? " but multicast loopback blocking" : "");
  ib_uverbs_create_qp req{};
  req.user_handle = x.user_handle;
  req.pd_handle = x.pd_handle;
  req.send_cq_handle = x.send_cq_handle;
  req.recv_cq_handle = x.recv_cq_handle;
  req.srq_handle = x.srq_handle;
  req.max_send_wr = x.max_send_wr;
  req.max_recv_wr = x.max_recv_wr;
  req.max_send_sge = x.max_send_sge;
  req.max_recv_sge = x.max_recv_sge;
  req.max_inline_data = x.max_inline_data;
  req.sq_sig_all = x.sq_sig_all;
  req.qp_type = x.qp_type;
  req.is_srq = x.is_srq;
  return create_qp_common(c, req, true);
}

// IBV_QP_* attribute bits and the model's qp_attr bits.
int translate_modify(const Cmd& c, const QpObject& obj, const ib_uverbs_modify_qp& req,
                     hw::QpAttr* attr, uint32_t* mask) {
  const uint32_t m = req.attr_mask;
  constexpr uint32_t kKnown =
      IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY | IBV_QP_ACCESS_FLAGS |
      IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY | IBV_QP_AV | IBV_QP_PATH_MTU |
      IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_RQ_PSN |
      IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_ALT_PATH | IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN |
      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_PATH_MIG_STATE | IBV_QP_CAP | IBV_QP_DEST_QPN;
  if (m & ~kKnown) return c.error(EINVAL, "qp %#x: unknown attribute bits %#x", obj.qpn, m & ~kKnown);
  const bool ud = obj.type == hw::QpType::ud;
  if ((m & IBV_QP_QKEY) && !ud) return c.error(EINVAL, "qp %#x: a Q_Key on an RC QP", obj.qpn);
  static constexpr std::pair<uint32_t, const char*> kConnectedOnly[] = {
      {IBV_QP_ACCESS_FLAGS, "IBV_QP_ACCESS_FLAGS"},
      {IBV_QP_AV, "IBV_QP_AV"},
      {IBV_QP_PATH_MTU, "IBV_QP_PATH_MTU"},
      {IBV_QP_TIMEOUT, "IBV_QP_TIMEOUT"},
      {IBV_QP_RETRY_CNT, "IBV_QP_RETRY_CNT"},
      {IBV_QP_RNR_RETRY, "IBV_QP_RNR_RETRY"},
      {IBV_QP_RQ_PSN, "IBV_QP_RQ_PSN"},
      {IBV_QP_MAX_QP_RD_ATOMIC, "IBV_QP_MAX_QP_RD_ATOMIC"},
      {IBV_QP_MIN_RNR_TIMER, "IBV_QP_MIN_RNR_TIMER"},
      {IBV_QP_MAX_DEST_RD_ATOMIC, "IBV_QP_MAX_DEST_RD_ATOMIC"},
      {IBV_QP_DEST_QPN, "IBV_QP_DEST_QPN"},
  };
  if (ud) {
    std::string named;
    for (const auto& [bit, name] : kConnectedOnly)
      if (m & bit) named += std::string(named.empty() ? "" : ", ") + name;
    if (!named.empty())
      return c.error(EINVAL, "qp %#x: %s: attributes of connected QPs, not UD", obj.qpn,
                     named.c_str());
  }
  if (m & (IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE))
    return c.error(EOPNOTSUPP, "qp %#x: alternate paths (automatic path migration)", obj.qpn);
  if (m & IBV_QP_CAP) return c.error(EINVAL, "qp %#x: resizing the queues", obj.qpn);
  if ((m & IBV_QP_CUR_STATE) &&
      req.cur_qp_state != static_cast<uint8_t>(obj.qp->state()))
    return c.error(EINVAL, "qp %#x: current state %u given, the QP is in %s", obj.qpn,
                   req.cur_qp_state, hw::qp_state_name(obj.qp->state()));
  *attr = obj.attr;
  *mask = 0;
  if (m & IBV_QP_STATE) {
    if (req.qp_state > IBV_QPS_ERR) return c.error(EINVAL, "qp %#x: state %u", obj.qpn, req.qp_state);
    attr->state = static_cast<hw::QpState>(req.qp_state);
    *mask |= hw::qp_attr::state;
  }
  if (m & IBV_QP_ACCESS_FLAGS) {
    attr->access_flags = req.qp_access_flags & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                                IBV_ACCESS_REMOTE_ATOMIC);
    *mask |= hw::qp_attr::access_flags;
  }
  if (m & (IBV_QP_PKEY_INDEX | IBV_QP_PORT)) {
    if (m & IBV_QP_PKEY_INDEX) attr->pkey_index = req.pkey_index;
    if (m & IBV_QP_PORT) attr->port_num = req.port_num;
    *mask |= hw::qp_attr::port;
  }
  if (m & IBV_QP_AV) {
    if (!req.dest.is_global)
      return c.error(EINVAL, "qp %#x: RoCE needs a GRH (is_global) in the address vector", obj.qpn);
    if (req.dest.sgid_index >= kGidTableLen)
      return c.error(EINVAL, "qp %#x: source GID index %u", obj.qpn, req.dest.sgid_index);
    std::memcpy(attr->remote_gid.raw, req.dest.dgid, 16);
    if (!attr->remote_gid.is_ipv4_mapped())
      return c.error(EOPNOTSUPP, "qp %#x: destination GID %s is not an IPv4-mapped address",
                     obj.qpn, attr->remote_gid.to_string().c_str());
    *mask |= hw::qp_attr::av;
  }
  if (m & IBV_QP_PATH_MTU) {
    if (req.path_mtu < IBV_MTU_256 || req.path_mtu > IBV_MTU_4096)
      return c.error(EINVAL, "qp %#x: path MTU code %u", obj.qpn, req.path_mtu);
    attr->path_mtu = static_cast<hw::Mtu>(req.path_mtu);
    *mask |= hw::qp_attr::path_mtu;
  }
  if (m & IBV_QP_TIMEOUT) attr->timeout = req.timeout, *mask |= hw::qp_attr::timeout;
  if (m & IBV_QP_RETRY_CNT) attr->retry_cnt = req.retry_cnt, *mask |= hw::qp_attr::retry_cnt;
  if (m & IBV_QP_RNR_RETRY) attr->rnr_retry = req.rnr_retry, *mask |= hw::qp_attr::rnr_retry;
  if (m & IBV_QP_RQ_PSN) attr->rq_psn = req.rq_psn, *mask |= hw::qp_attr::rq_psn;
  if (m & IBV_QP_SQ_PSN) attr->sq_psn = req.sq_psn, *mask |= hw::qp_attr::sq_psn;
  if (m & IBV_QP_MAX_QP_RD_ATOMIC)
    attr->max_rd_atomic = req.max_rd_atomic, *mask |= hw::qp_attr::max_rd_atomic;
  if (m & IBV_QP_MAX_DEST_RD_ATOMIC)
    attr->max_dest_rd_atomic = req.max_dest_rd_atomic, *mask |= hw::qp_attr::max_dest_rd_atomic;
  if (m & IBV_QP_MIN_RNR_TIMER)
    attr->min_rnr_timer = req.min_rnr_timer, *mask |= hw::qp_attr::min_rnr_timer;
  if (m & IBV_QP_DEST_QPN) attr->dest_qpn = req.dest_qp_num, *mask |= hw::qp_attr::dest_qpn;
  if (m & IBV_QP_QKEY) attr->qkey = req.qkey, *mask |= hw::qp_attr::qkey;
  return 0;
}

int modify_qp_common(Cmd& c, const ib_uverbs_modify_qp& req) {
  auto it = c.ctx.qps.find(req.qp_handle);
  if (it == c.ctx.qps.end()) return c.error(EINVAL, "qp handle %u does not exist", req.qp_handle);
  QpObject& obj = it->second;
  hw::QpAttr attr;
  uint32_t mask = 0;
  if (translate_modify(c, obj, req, &attr, &mask) != 0) return -1;
  Status st = obj.qp->modify(attr, mask);
  if (!st) return sim_error(c, st);
  obj.attr = attr;
  if ((mask & hw::qp_attr::state) && attr.state == hw::QpState::reset)
    obj.attr = hw::QpAttr{};
  return 0;
}

int modify_qp(Cmd& c) { return modify_qp_common(c, c.core_as<ib_uverbs_modify_qp>()); }

int modify_qp_ex(Cmd& c) {
  const auto req = c.core_as<ib_uverbs_ex_modify_qp>();
  if (req.base.attr_mask & IBV_QP_RATE_LIMIT)
    return c.error(EOPNOTSUPP, "qp handle %u: packet pacing (rate limit %u)", req.base.qp_handle,
                   req.rate_limit);
  if (modify_qp_common(c, req.base) != 0) return -1;
  ib_uverbs_ex_modify_qp_resp r{};
  r.response_length = static_cast<uint32_t>(std::min(sizeof r, c.resp_core_len));
  c.reply(&r, sizeof r);
  return 0;
}

int query_qp(Cmd& c) {
  const auto req = c.core_as<ib_uverbs_query_qp>();
  auto it = c.ctx.qps.find(req.qp_handle);
  if (it == c.ctx.qps.end()) return c.error(EINVAL, "qp handle %u does not exist", req.qp_handle);
  const QpObject& obj = it->second;
  const hw::QpAttr& a = obj.attr;
  ib_uverbs_query_qp_resp r{};
  if (obj.type == hw::QpType::rc) {
    std::memcpy(r.dest.dgid, a.remote_gid.raw, 16);
    r.dest.is_global = 1;
    r.dest.hop_limit = 64;
    r.dest.sgid_index = 3;  // ::ffff:<address>, RoCE v2
    r.dest.port_num = a.port_num;
  }
  r.qkey = a.qkey;
  r.max_send_wr = obj.max_send_wr;
  r.max_recv_wr = obj.max_recv_wr;
  r.max_send_sge = obj.max_send_sge;
  r.max_recv_sge = obj.max_recv_sge;
  r.max_inline_data = obj.max_inline;
  r.rq_psn = a.rq_psn;
  r.sq_psn = a.sq_psn;
  r.dest_qp_num = a.dest_qpn;
  r.qp_access_flags = a.access_flags;
  r.pkey_index = a.pkey_index;
  r.qp_state = static_cast<uint8_t>(obj.qp->state());
  r.cur_qp_state = r.qp_state;
  r.path_mtu = static_cast<uint8_t>(a.path_mtu);
  r.max_rd_atomic = a.max_rd_atomic;
  r.max_dest_rd_atomic = a.max_dest_rd_atomic;
  r.min_rnr_timer = a.min_rnr_timer;
  r.port_num = a.port_num;
  r.timeout = a.timeout;
  r.retry_cnt = a.retry_cnt;
  r.rnr_retry = a.rnr_retry;
  r.sq_sig_all = obj.sq_sig_all;
  c.reply(&r, sizeof r);
  return 0;
}

int destroy_qp(Cmd& c) {
  Context& ctx = c.ctx;
  const auto req = c.core_as<ib_uverbs_destroy_qp>();
  auto it = ctx.qps.find(req.qp_handle);
  if (it == ctx.qps.end()) return c.error(EINVAL, "qp handle %u does not exist", req.qp_handle);
  QpObject& obj = it->second;
  if (ctx.async) ctx.async->purge(obj.key);
  ib_uverbs_destroy_qp_resp r{};
  r.events_reported = obj.async_read->load();
  --ctx.bfreg_users[obj.bfreg];
  --ctx.pds[obj.pd].users;
  --ctx.cqs[obj.send_cq].users;
  --ctx.cqs[obj.recv_cq].users;
  if (obj.has_srq) --ctx.srqs[obj.srq].users;
  ctx.qps.erase(it);
  c.reply(&r, sizeof r);
  return 0;
}

struct Handler {
  int (*fn)(Cmd&);
  size_t core_len;       // request after the header(s)
  size_t resp_len;       // core response; 0: the command has no response
  bool needs_ucontext;
};

const Handler* handler_for(uint32_t cmd, bool extended) {
  static const Handler kGetContext{get_context, sizeof(ib_uverbs_get_context), sizeof(ib_uverbs_get_context_resp), false};
  static const Handler kQueryDevice{query_device, sizeof(ib_uverbs_query_device), sizeof(ib_uverbs_query_device_resp), true};
  static const Handler kQueryPort{query_port, sizeof(ib_uverbs_query_port), sizeof(ib_uverbs_query_port_resp), true};
  static const Handler kAllocPd{alloc_pd, sizeof(ib_uverbs_alloc_pd), sizeof(ib_uverbs_alloc_pd_resp), true};
  static const Handler kDeallocPd{dealloc_pd, sizeof(ib_uverbs_dealloc_pd), 0, true};
  static const Handler kRegMr{reg_mr, sizeof(ib_uverbs_reg_mr), sizeof(ib_uverbs_reg_mr_resp), true};
  static const Handler kDeregMr{dereg_mr, sizeof(ib_uverbs_dereg_mr), 0, true};
  static const Handler kReregMr{rereg_mr, sizeof(ib_uverbs_rereg_mr), sizeof(ib_uverbs_rereg_mr_resp), true};
  static const Handler kCreateAh{create_ah, sizeof(ib_uverbs_create_ah), sizeof(ib_uverbs_create_ah_resp), true};
  static const Handler kDestroyAh{destroy_ah, sizeof(ib_uverbs_destroy_ah), 0, true};
  static const Handler kCompChannel{create_comp_channel, sizeof(ib_uverbs_create_comp_channel), sizeof(ib_uverbs_create_comp_channel_resp), true};
  static const Handler kCreateCq{create_cq, sizeof(ib_uverbs_create_cq), sizeof(ib_uverbs_create_cq_resp), true};
  static const Handler kDestroyCq{destroy_cq, sizeof(ib_uverbs_destroy_cq), sizeof(ib_uverbs_destroy_cq_resp), true};
  static const Handler kCreateQp{create_qp, sizeof(ib_uverbs_create_qp), sizeof(ib_uverbs_create_qp_resp), true};
  static const Handler kQueryQp{query_qp, sizeof(ib_uverbs_query_qp), sizeof(ib_uverbs_query_qp_resp), true};
  static const Handler kModifyQp{modify_qp, sizeof(ib_uverbs_modify_qp), 0, true};
  static const Handler kDestroyQp{destroy_qp, sizeof(ib_uverbs_destroy_qp), sizeof(ib_uverbs_destroy_qp_resp), true};
  static const Handler kCreateSrq{create_srq, sizeof(ib_uverbs_create_srq), sizeof(ib_uverbs_create_srq_resp), true};
  static const Handler kModifySrq{modify_srq, sizeof(ib_uverbs_modify_srq), 0, true};
  static const Handler kQuerySrq{query_srq, sizeof(ib_uverbs_query_srq), sizeof(ib_uverbs_query_srq_resp), true};
  static const Handler kDestroySrq{destroy_srq, sizeof(ib_uverbs_destroy_srq), sizeof(ib_uverbs_destroy_srq_resp), true};
  static const Handler kQueryDeviceEx{query_device_ex, sizeof(ib_uverbs_ex_query_device), offsetof(ib_uverbs_ex_query_device_resp, odp_caps), true};
  static const Handler kModifyQpEx{modify_qp_ex, sizeof(ib_uverbs_ex_modify_qp), sizeof(ib_uverbs_ex_modify_qp_resp), true};
  static const Handler kCreateQpEx{create_qp_ex, offsetof(ib_uverbs_ex_create_qp, create_flags), sizeof(ib_uverbs_ex_create_qp_resp), true};
  if (extended) {
    switch (cmd) {
      case IB_USER_VERBS_EX_CMD_QUERY_DEVICE: return &kQueryDeviceEx;
      case IB_USER_VERBS_EX_CMD_MODIFY_QP: return &kModifyQpEx;
      case IB_USER_VERBS_EX_CMD_CREATE_QP: return &kCreateQpEx;
      default: return nullptr;
    }
  }
  switch (cmd) {
    case IB_USER_VERBS_CMD_GET_CONTEXT: return &kGetContext;
    case IB_USER_VERBS_CMD_QUERY_DEVICE: return &kQueryDevice;
    case IB_USER_VERBS_CMD_QUERY_PORT: return &kQueryPort;
    case IB_USER_VERBS_CMD_ALLOC_PD: return &kAllocPd;
    case IB_USER_VERBS_CMD_DEALLOC_PD: return &kDeallocPd;
    case IB_USER_VERBS_CMD_REG_MR: return &kRegMr;
    case IB_USER_VERBS_CMD_DEREG_MR: return &kDeregMr;
    case IB_USER_VERBS_CMD_REREG_MR: return &kReregMr;
    case IB_USER_VERBS_CMD_CREATE_AH: return &kCreateAh;
    case IB_USER_VERBS_CMD_DESTROY_AH: return &kDestroyAh;
    case IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL: return &kCompChannel;
    case IB_USER_VERBS_CMD_CREATE_CQ: return &kCreateCq;
    case IB_USER_VERBS_CMD_DESTROY_CQ: return &kDestroyCq;
    case IB_USER_VERBS_CMD_CREATE_QP: return &kCreateQp;
    case IB_USER_VERBS_CMD_QUERY_QP: return &kQueryQp;
    case IB_USER_VERBS_CMD_MODIFY_QP: return &kModifyQp;
    case IB_USER_VERBS_CMD_DESTROY_QP: return &kDestroyQp;
    case IB_USER_VERBS_CMD_CREATE_SRQ: return &kCreateSrq;
    case IB_USER_VERBS_CMD_MODIFY_SRQ: return &kModifySrq;
    case IB_USER_VERBS_CMD_QUERY_SRQ: return &kQuerySrq;
    case IB_USER_VERBS_CMD_DESTROY_SRQ: return &kDestroySrq;
    default: return nullptr;
  }
}

}  // namespace

ssize_t dispatch_write(Context& ctx, const uint8_t* in, size_t len) {
  ib_uverbs_cmd_hdr hdr{};
  if (len < sizeof hdr) {
    errno = EINVAL;
    return -1;
  }
  std::memcpy(&hdr, in, sizeof hdr);
  Cmd c{ctx, 0, false, nullptr, 0, nullptr, 0, 0, 0, 0, {}};
  c.dev_name = device_name(ctx.dev->index);
  c.extended = (hdr.command & IB_USER_VERBS_CMD_FLAG_EXTENDED) != 0;
  c.number = hdr.command & IB_USER_VERBS_CMD_COMMAND_MASK;
  if (hdr.command & ~(IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_CMD_COMMAND_MASK))
    return c.error(EINVAL, "command word %#x has reserved bits set", hdr.command);
  const Handler* h = handler_for(c.number, c.extended);
  if (!h) {
    const char* name = command_name(c.number);
    const std::string what = std::strcmp(name, "unknown command") == 0
                                 ? std::string(c.extended ? "unknown extended command" : name)
                                 : std::string(c.extended ? "extended command " : "command ") + name;
    return unimplemented(what.c_str(), c.number);
  }
  if (c.extended) {
    ib_uverbs_ex_cmd_hdr ex{};
    if (len < sizeof hdr + sizeof ex) return c.error(EINVAL, "short extended header");
    std::memcpy(&ex, in + sizeof hdr, sizeof ex);
    const size_t core = size_t{hdr.in_words} * 8, drv = size_t{ex.provider_in_words} * 8;
    if (len != sizeof hdr + sizeof ex + core + drv)
      return c.error(EINVAL, "%zu bytes written, the header counts %zu", len,
                     sizeof hdr + sizeof ex + core + drv);
    c.core = in + sizeof hdr + sizeof ex;
    c.core_len = core;
    c.drv = drv ? c.core + core : nullptr;
    c.drv_len = drv;
    c.response = ex.response;
    c.resp_core_len = size_t{hdr.out_words} * 8;
    c.resp_drv_len = size_t{ex.provider_out_words} * 8;
  } else {
    if (size_t{hdr.in_words} * 4 != len)
      return c.error(EINVAL, "%zu bytes written, the header counts %u words", len, hdr.in_words);
    c.core = in + sizeof hdr;
    c.core_len = std::min(len - sizeof hdr, h->core_len);
    c.drv = len - sizeof hdr > h->core_len ? c.core + h->core_len : nullptr;
    c.drv_len = c.drv ? len - sizeof hdr - h->core_len : 0;
    const size_t out = size_t{hdr.out_words} * 4;
    // The response address is the core request's first u64; a request too short for it is
    // refused below, before anything reads past what was written.
    if (h->resp_len && c.core_len >= sizeof c.response)
      std::memcpy(&c.response, c.core, sizeof c.response);
    c.resp_core_len = std::min(out, h->resp_len);
    c.resp_drv_len = out > h->resp_len ? out - h->resp_len : 0;
  }
  if (c.core_len < h->core_len) return c.error(EINVAL, "request of %zu bytes, %zu expected", c.core_len, h->core_len);
  if (h->resp_len && (c.resp_core_len < h->resp_len || !c.response))
    return c.error(ENOSPC, "response of %zu bytes, %zu needed", c.resp_core_len, h->resp_len);
  if (h->needs_ucontext && !ctx.have_ucontext) return c.error(EINVAL, "no context yet (GET_CONTEXT first)");
  // Where the answer goes must be writable before anything is created (copy_to_user).
  if (c.resp_core_len + c.resp_drv_len &&
      !user_range_ok(c.response, c.resp_core_len + c.resp_drv_len, true))
    return c.error(EFAULT, "response at %#llx (%zu bytes) is not writable",
                   static_cast<unsigned long long>(c.response), c.resp_core_len + c.resp_drv_len);
  if (h->fn(c) != 0) return -1;
  return static_cast<ssize_t>(len);
}

// Async events of device `index` go to the context that owns the QP or CQ, as the kernel's
// ib_uverbs_qp_event_handler does; device and port events go to every context.
void deliver_async_event(uint32_t index, const hw::AsyncEvent& ev) {
  ib_uverbs_async_event_desc d{};
  bool qp_event = true;
  switch (ev.type) {
    case hw::AsyncEventType::comm_est: d.event_type = IBV_EVENT_COMM_EST; break;
    case hw::AsyncEventType::sq_drained: d.event_type = IBV_EVENT_SQ_DRAINED; break;
    case hw::AsyncEventType::last_wqe_reached: d.event_type = IBV_EVENT_QP_LAST_WQE_REACHED; break;
    case hw::AsyncEventType::qp_fatal: d.event_type = IBV_EVENT_QP_FATAL; break;
    case hw::AsyncEventType::qp_req_err: d.event_type = IBV_EVENT_QP_REQ_ERR; break;
    case hw::AsyncEventType::qp_access_err: d.event_type = IBV_EVENT_QP_ACCESS_ERR; break;
    case hw::AsyncEventType::cq_err: d.event_type = IBV_EVENT_CQ_ERR; qp_event = false; break;
    case hw::AsyncEventType::device_fatal: d.event_type = IBV_EVENT_DEVICE_FATAL; qp_event = false; break;
    case hw::AsyncEventType::port_active: d.event_type = IBV_EVENT_PORT_ACTIVE; qp_event = false; break;
    case hw::AsyncEventType::port_err: d.event_type = IBV_EVENT_PORT_ERR; qp_event = false; break;
    case hw::AsyncEventType::srq_limit_reached:
      d.event_type = IBV_EVENT_SRQ_LIMIT_REACHED;
      qp_event = false;
      break;
  }
  if (config().log_errors)
    log_line("%s: async event %s (qp %#x, cq %#x)", device_name(index).c_str(),
             hw::async_event_name(ev.type), ev.qpn, ev.cqn);
  for (const std::shared_ptr<Context>& ctx : contexts_on(index)) {
    std::lock_guard<std::mutex> lock(ctx->mu);
    if (!ctx->async) continue;
    if (qp_event) {
      for (auto& [h, q] : ctx->qps) {
        if (q.qpn != ev.qpn) continue;
        d.element = q.user_handle;
        ctx->async->push(&d, q.key, q.async_read);
      }
    } else if (ev.type == hw::AsyncEventType::srq_limit_reached) {
      for (auto& [h, srq] : ctx->srqs) {
        if (srq.srq->view().dv.srqn != ev.srqn) continue;
        srq.limit = 0;  // the device disarmed it
        d.element = srq.user_handle;
        ctx->async->push(&d, srq.key, srq.async_read);
      }
    } else if (ev.type == hw::AsyncEventType::cq_err) {
      for (auto& [h, cq] : ctx->cqs) {
        if (cq.cq->view().dv.cqn != ev.cqn) continue;
        d.element = cq.user_handle;
        ctx->async->push(&d, cq.key, cq.async_read);
      }
    } else {
      d.element = ev.type == hw::AsyncEventType::device_fatal ? 0 : 1;  // port 1
      ctx->async->push(&d, 0, nullptr);
    }
  }
}

namespace {
__attribute__((constructor)) void install_async_sink() { set_async_sink(deliver_async_event); }
}  // namespace

}  // namespace rnicdv::uverbs
