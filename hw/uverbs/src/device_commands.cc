// SPDX-License-Identifier: BSD-3-Clause
// The context, the device and its port, PDs, MRs and address handles: GET_CONTEXT,
// QUERY_DEVICE (and its extended form), QUERY_PORT, ALLOC/DEALLOC_PD, REG/REREG/DEREG_MR,
// CREATE/DESTROY_AH, with mlx5's driver data (rdma/mlx5-abi.h).
#include <errno.h>
#include <string.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/mlx5-abi.h>

#include <algorithm>
#include <string>

#include "command.h"
#include "handles.h"
#include "shim.h"
#include "wire/frame.h"

namespace rnicdv::uverbs {

namespace {

static_assert(sizeof(ib_uverbs_query_device_resp) == 176);
static_assert(sizeof(ib_uverbs_query_port_resp) == 40);
static_assert(sizeof(mlx5_ib_alloc_ucontext_resp) == 72);

// Firmware version reported: major.minor.sub.
constexpr uint64_t kFwVersion = (uint64_t{16} << 32) | (uint64_t{99} << 16) | 0;
constexpr uint32_t kVendorId = 0x02c9;     // Mellanox
constexpr uint32_t kVendorPartId = 4119;   // ConnectX-5
constexpr uint16_t kMaxSqDescBytes = 512;  // ctrl + raddr + 30 data segments (sim caps)
constexpr uint16_t kMaxRqDescBytes = 512;
constexpr uint32_t kMaxSendWqebb = 32768;

}  // namespace

// ---- GET_CONTEXT ----
int get_context(Cmd& c) {
  Context& ctx = c.ctx;
  if (ctx.have_ucontext) return c.error(EINVAL, "context: already exists (one per descriptor)");
  auto req = c.drv_as<mlx5_ib_alloc_ucontext_req_v2>();
  if (req.total_num_bfregs == 0 || req.num_low_latency_bfregs >= req.total_num_bfregs)
    return c.error(EINVAL, "context: %u BlueFlame registers with %u low-latency ones",
                   req.total_num_bfregs, req.num_low_latency_bfregs);
  // Static UARs: two usable registers per 4 KiB UAR page (the kernel's calc_total_bfregs).
  const uint32_t tot = (req.total_num_bfregs + kNonFpBfRegsPerUar - 1) / kNonFpBfRegsPerUar *
                       kNonFpBfRegsPerUar;
  const uint32_t pages = tot / kNonFpBfRegsPerUar;
  if (pages > kMaxUarPages)
    return c.error(EINVAL, "context: %u BlueFlame registers exceed %u UAR pages", tot,
                   kMaxUarPages);

  // The command descriptor is a memfd whose pages at libmlx5's mmap offsets are the UAR
  // pages (cdev.cc); this duplicate outlives the application's descriptors while a mapping
  // needs it. A raw system call: the shim's own fcntl would take it for the application's.
  const int memfd = static_cast<int>(::syscall(SYS_fcntl, ctx.cmd_fd, F_DUPFD_CLOEXEC, 0));
  const uint32_t all_pages = pages + kDynUarPages;
  if (memfd < 0) {
    const int err = errno;
    return c.error(err, "context: UAR memory: %s", strerror(err));
  }
  std::shared_ptr<EventFile> async = EventFile::create(sizeof(ib_uverbs_async_event_desc));
  if (!async) {
    const int err = errno;
    libc::close(memfd);
    return c.error(err, "context: async event fd: %s", strerror(err));
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
  // libmlx5 takes its port count from here (mlx5_create_ah checks an AH's port against it).
  m.num_ports = static_cast<uint16_t>(ctx.dev->dev->info().ports.size());
  m.cqe_version = std::min<uint8_t>(req.max_cqe_version, 1);
  // CREATE_AH answers with the destination MAC (mlx5_ib_create_ah_resp), so libmlx5 does not
  // resolve it itself through a netlink neighbour lookup that cannot see the simulated wire.
  // libmlx5 then reads the driver's part of EX_QUERY_DEVICE (packet pacing's range).
  m.cmds_supp_uhw = MLX5_USER_CMDS_SUPP_UHW_CREATE_AH | MLX5_USER_CMDS_SUPP_UHW_QUERY_DEVICE;
  m.eth_min_inline = MLX5_USER_INLINE_MODE_NONE;  // no L2 header inline (raw QPs only)
  m.log_uar_size = 12;
  m.num_uars_per_page = 1;
  // Dynamic registers: libmlx5 maps their pages with MLX5_IB_MMAP_ALLOC_WC and gives one to
  // each thread domain, lock-free (mlx5_attach_dedicated_bf).
  m.num_dyn_bfregs = kDynBfRegs;
  m.response_length = static_cast<uint32_t>(std::min(sizeof m, c.resp_drv_len));
  if (int rc = c.reply(&core, sizeof core, &m, sizeof m); rc != 0) {
    // No context, as the kernel aborts one whose response could not be copied: the async
    // descriptor and the UAR memory go, and GET_CONTEXT may be sent again.
    ctx.have_ucontext = false;
    ctx.async.reset();
    event_discard(async->fd());
    libc::close(memfd);
    ctx.uar_memfd = -1;
    ctx.uar_pages.clear();
    ctx.bfreg_users.clear();
    ctx.tot_bfregs = 0;
    ctx.static_pages = 0;
    return rc;
  }
  return 0;
}

namespace {

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
                       IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_CHANGE_PHY_PORT | IBV_DEVICE_XRC;
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
  r.max_mcast_grp = caps.max_mcast_grp;
  r.max_mcast_qp_attach = caps.max_mcast_qp_attach;
  r.max_total_mcast_qp_attach = caps.max_total_mcast_qp_attach;
  r.atomic_cap = IBV_ATOMIC_HCA;
  r.max_pkeys = kPkeyTableLen;
  r.local_ca_ack_delay = 16;
  r.phys_port_cnt = static_cast<uint8_t>(ctx.dev->dev->info().ports.size());
}

}  // namespace

int query_device(Cmd& c) {
  ib_uverbs_query_device_resp r{};
  fill_device_attr(c.ctx, r);
  return c.reply(&r, sizeof r);
}

int query_device_ex(Cmd& c) {
  const auto req = c.core_as<ib_uverbs_ex_query_device>();
  if (req.comp_mask || req.reserved)
    return c.error(EINVAL, "device: comp_mask %#x (none is known)", req.comp_mask);
  ib_uverbs_ex_query_device_resp r{};
  fill_device_attr(c.ctx, r.base);
  r.comp_mask = 0;
  // CQE timestamps are the device's clock in nanoseconds, 64 bits wide.
  r.timestamp_mask = ~uint64_t{0};
  r.hca_core_clock = 1000000;  // kHz
  r.response_length = static_cast<uint32_t>(std::min(sizeof r, c.resp_core_len));
  // mlx5's part: packet pacing for RC QPs (ibv_modify_qp_rate_limit), with a burst size;
  // nothing else is offered (no TSO, RSS, CQE compression, multi-packet WQEs or striding RQ).
  const hw::DeviceCaps& caps = c.ctx.dev->dev->info().caps;
  mlx5_ib_query_device_resp m{};
  m.response_length = static_cast<uint32_t>(std::min(sizeof m, c.resp_drv_len));
  m.packet_pacing_caps.qp_rate_limit_min = caps.rate_limit_min_kbps;
  m.packet_pacing_caps.qp_rate_limit_max = caps.rate_limit_max_kbps;
  m.packet_pacing_caps.supported_qpts = 1u << IBV_QPT_RC;
  m.packet_pacing_caps.cap_flags = MLX5_IB_PP_SUPPORT_BURST;
  return c.reply(&r, sizeof r, &m, sizeof m);
}

int query_port(Cmd& c) {
  const auto req = c.core_as<ib_uverbs_query_port>();
  const size_t ports = c.ctx.dev->dev->info().ports.size();
  if (req.port_num < 1 || req.port_num > ports)
    return c.error(EINVAL, "port %u: no such port (the device has %s)", req.port_num,
                   ports == 2 ? "ports 1 and 2" : "port 1");
  const hw::DeviceCaps& caps = c.ctx.dev->dev->info().caps;
  ib_uverbs_query_port_resp r{};
  r.port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS;
  r.max_msg_sz = caps.max_msg_size;
  r.gid_tbl_len = kGidTableLen;
  r.pkey_tbl_len = kPkeyTableLen;
  r.lid = 0;
  // DOWN while a port-down event holds the link down, and for good after a fatal error (the
  // fault specification's link events, hw/sim link.cc).
  const bool up = c.ctx.dev->dev->port_state() == sim::PortState::active;
  r.state = up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  r.max_mtu = static_cast<uint8_t>(caps.max_mtu);
  r.active_mtu = static_cast<uint8_t>(caps.active_mtu);
  r.max_vl_num = 1;
  r.active_width = 2;   // 4x
  r.active_speed = 32;  // EDR (25 Gb/s per lane)
  r.phys_state = up ? 5 : 3;  // LinkUp, or Disabled (what mlx5 shows for a RoCE port down)
  r.link_layer = IBV_LINK_LAYER_ETHERNET;
  r.flags = IB_UVERBS_QPF_GRH_REQUIRED;
  return c.reply(&r, sizeof r);
}

// ---- PD, MR ----
int alloc_pd(Cmd& c) {
  Result<std::unique_ptr<hw::Pd>> pd = c.ctx.dev->dev->alloc_pd();
  if (!pd) return sim_error(c, "new PD", pd.status());
  const uint32_t h = new_handle(c.ctx);
  ib_uverbs_alloc_pd_resp r{};
  r.pd_handle = h;
  mlx5_ib_alloc_pd_resp m{};
  m.pdn = pd.value()->pdn();
  c.ctx.pds[h].pd = std::move(pd.value());
  if (int rc = c.reply(&r, sizeof r, &m, sizeof m); rc != 0) {
    c.ctx.pds.erase(h);
    return rc;
  }
  return 0;
}

int dealloc_pd(Cmd& c) {
  const auto req = c.core_as<ib_uverbs_dealloc_pd>();
  auto it = c.ctx.pds.find(req.pd_handle);
  if (it == c.ctx.pds.end()) return c.error(EINVAL, "PD handle %u: no such PD", req.pd_handle);
  if (it->second.users)
    return c.error(EBUSY, "PD handle %u: still used by %u MRs, AHs, SRQs or QPs", req.pd_handle,
                   it->second.users);
  c.ctx.pds.erase(it);
  return 0;
}

// ---- Address handles ----
// For RoCE the kernel resolves the destination MAC from the destination GID; on the simulated
// fabric that is the MAC the wire gives the address (wire/frame.h mac_for_ip).
int create_ah(Cmd& c) {
  const auto req = c.core_as<ib_uverbs_create_ah>();
  auto pd = c.ctx.pds.find(req.pd_handle);
  const uint32_t pdh = req.pd_handle;
  if (pd == c.ctx.pds.end()) return c.error(EINVAL, "AH on PD %u: no such PD", pdh);
  const ib_uverbs_ah_attr& a = req.attr;
  const hw::DeviceInfo& info = c.ctx.dev->dev->info();
  if (a.port_num < 1 || a.port_num > info.ports.size())
    return c.error(EINVAL, "AH on PD %u: port %u does not exist (%zu port%s)", pdh, a.port_num,
                   info.ports.size(), info.ports.size() == 1 ? "" : "s");
  if (!a.is_global)
    return c.error(EINVAL, "AH on PD %u: no GRH: RoCE address handles need one (is_global)", pdh);
  const hw::IpAddress own = port_address(info, a.port_num);
  if (const GidRefusal* no = source_gid_refusal(a.grh.sgid_index, own))
    return c.error(no->err, "AH on PD %u: source GID index %u %s", pdh, a.grh.sgid_index,
                   no->reason);
  const hw::IpAddress dest = hw::IpAddress::from_bytes(a.grh.dgid);
  if (dest.is_v4() != own.is_v4())
    return c.error(EINVAL,
                   "AH on PD %u: destination GID %s and the device's address %s are of different "
                   "IP versions (RoCE v2 carries one end to end)",
                   pdh, hw::Gid::from_ip(dest).to_string().c_str(), own.to_string().c_str());
  const sim::MacAddress mac = sim::mac_for_ip(dest);
  const uint32_t h = new_handle(c.ctx);
  c.ctx.ahs[h].pd = req.pd_handle;
  ++pd->second.users;
  ib_uverbs_create_ah_resp r{};
  r.ah_handle = h;
  mlx5_ib_create_ah_resp m{};
  std::memcpy(m.dmac, mac.data(), sizeof m.dmac);
  m.response_length = static_cast<uint32_t>(std::min(sizeof m, c.resp_drv_len));
  if (int rc = c.reply(&r, sizeof r, &m, sizeof m); rc != 0) {
    --pd->second.users;
    c.ctx.ahs.erase(h);
    return rc;
  }
  return 0;
}

int destroy_ah(Cmd& c) {
  const auto req = c.core_as<ib_uverbs_destroy_ah>();
  auto it = c.ctx.ahs.find(req.ah_handle);
  if (it == c.ctx.ahs.end()) return c.error(EINVAL, "AH handle %u: no such AH", req.ah_handle);
  --c.ctx.pds[it->second.pd].users;
  c.ctx.ahs.erase(it);
  return 0;
}

namespace {

// The kernel's checks of ib_uverbs_reg_mr and REREG_MR's new translation or access. Returns
// the rights the device keeps (hw::access bits), or the kernel's -errno after its reason.
// `what` names the region ("MR on PD 3", "MR handle 5").
int64_t check_region(const Cmd& c, const char* what, uint64_t start, uint64_t length,
                     uint64_t hca_va, uint32_t access_flags) {
  if (length == 0) return c.error(EINVAL, "%s: zero length", what);
  if (hca_va != start)
    return c.error(EOPNOTSUPP, "%s: an I/O virtual address (%#llx) other than the buffer's (%#llx)",
                   what, static_cast<unsigned long long>(hca_va),
                   static_cast<unsigned long long>(start));
  constexpr uint32_t kUnsupported = IBV_ACCESS_ZERO_BASED | IBV_ACCESS_ON_DEMAND |
                                    IBV_ACCESS_HUGETLB;
  if (access_flags & kUnsupported)
    return c.error(EOPNOTSUPP, "%s: access flags %#x (zero-based, on-demand or hugetlb)", what,
                   access_flags);
  const uint32_t access = access_flags & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                          IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  // get_user_pages: every page mapped, writable if the HCA may write it.
  const bool writable = (access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                   IBV_ACCESS_REMOTE_ATOMIC)) != 0;
  if (!user_range_ok(start, length, writable))
    return c.error(EFAULT, "%s: [%#llx, +%llu) is not mapped%s", what,
                   static_cast<unsigned long long>(start),
                   static_cast<unsigned long long>(length), writable ? " writable" : "");
  return access;
}

}  // namespace

int reg_mr(Cmd& c) {
  const auto req = c.core_as<ib_uverbs_reg_mr>();
  auto pd = c.ctx.pds.find(req.pd_handle);
  if (pd == c.ctx.pds.end()) return c.error(EINVAL, "MR on PD %u: no such PD", req.pd_handle);
  const std::string what = "MR on PD " + std::to_string(req.pd_handle);
  const int64_t access =
      check_region(c, what.c_str(), req.start, req.length, req.hca_va, req.access_flags);
  if (access < 0) return static_cast<int>(access);
  Result<std::unique_ptr<hw::Mr>> mr =
      c.ctx.dev->dev->reg_mr(*pd->second.pd, reinterpret_cast<void*>(req.start), req.length,
                             static_cast<uint32_t>(access));
  if (!mr) return sim_error(c, what, mr.status());
  const uint32_t h = new_handle(c.ctx);
  ib_uverbs_reg_mr_resp r{};
  r.mr_handle = h;
  r.lkey = mr.value()->lkey();
  r.rkey = mr.value()->rkey();
  c.ctx.mrs[h] = MrObject{std::move(mr.value()), req.pd_handle, req.access_flags};
  ++pd->second.users;
  if (int rc = c.reply(&r, sizeof r); rc != 0) {
    --pd->second.users;
    c.ctx.mrs.erase(h);
    return rc;
  }
  return 0;
}

// REREG_MR: a new translation, PD or access for a registered region. mlx5 changes the region
// in place (a UMR on the same mkey), so the keys a peer holds stay valid and carry the new
// rights; the response repeats them. A refused change leaves the region as it was.
int rereg_mr(Cmd& c) {
  const auto req = c.core_as<ib_uverbs_rereg_mr>();
  auto it = c.ctx.mrs.find(req.mr_handle);
  if (it == c.ctx.mrs.end()) return c.error(EINVAL, "MR handle %u: no such MR", req.mr_handle);
  MrObject& obj = it->second;
  if (req.flags == 0 || (req.flags & ~uint32_t{IBV_REREG_MR_FLAGS_SUPPORTED}))
    return c.error(EINVAL, "MR handle %u: flags %#x", req.mr_handle, req.flags);
  const bool translation = req.flags & IBV_REREG_MR_CHANGE_TRANSLATION;
  const uint32_t pd_handle = (req.flags & IBV_REREG_MR_CHANGE_PD) ? req.pd_handle : obj.pd;
  auto pd = c.ctx.pds.find(pd_handle);
  if (pd == c.ctx.pds.end())
    return c.error(EINVAL, "MR handle %u: new PD %u does not exist", req.mr_handle, pd_handle);
  const uint64_t start = translation ? req.start : reinterpret_cast<uint64_t>(obj.mr->addr());
  const uint64_t length = translation ? req.length : obj.mr->length();
  const uint64_t hca_va = translation ? req.hca_va : start;
  const uint32_t flags = (req.flags & IBV_REREG_MR_CHANGE_ACCESS) ? req.access_flags : obj.access;
  const std::string what = "MR handle " + std::to_string(req.mr_handle);
  const int64_t access = check_region(c, what.c_str(), start, length, hca_va, flags);
  if (access < 0) return static_cast<int>(access);
  if (Status st = sim::rereg_mr(*obj.mr, *pd->second.pd, reinterpret_cast<void*>(start), length,
                                static_cast<uint32_t>(access));
      !st)
    return sim_error(c, what, st);
  --c.ctx.pds[obj.pd].users;
  ++pd->second.users;
  obj.pd = pd_handle;
  obj.access = flags;
  ib_uverbs_rereg_mr_resp r{};
  r.lkey = obj.mr->lkey();
  r.rkey = obj.mr->rkey();
  return c.reply(&r, sizeof r);
}

int dereg_mr(Cmd& c) {
  const auto req = c.core_as<ib_uverbs_dereg_mr>();
  auto it = c.ctx.mrs.find(req.mr_handle);
  if (it == c.ctx.mrs.end()) return c.error(EINVAL, "MR handle %u: no such MR", req.mr_handle);
  --c.ctx.pds[it->second.pd].users;
  c.ctx.mrs.erase(it);
  return 0;
}

}  // namespace rnicdv::uverbs
