// SPDX-License-Identifier: BSD-3-Clause
// The shim checks every pointer a command carries against the process's mappings, as the
// kernel's copy_to_user and get_user_pages do. It keeps its reading of /proc/self/maps between
// commands and reads it again only when the address space changed: these tests change the
// address space between two commands (munmap, mprotect, mremap, a new mapping) and check that
// the second command sees the change, and that commands on an unchanged address space do not
// read the maps again. A change the shim cannot see (a raw system call) is met by the copy
// itself: a response that cannot be written gives EFAULT, a new object whose handle could not
// be given back is destroyed, and an rdma_cm event that could not be copied stays queued.
#include <catch2/catch.hpp>

#include "verbs_fixtures.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_user_cm.h>  // after arpa/inet.h: glibc's in6 definitions first
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <dirent.h>
#include <rdma/mlx5-abi.h>

#include <cstdint>
#include <cstring>

using namespace verbs_test;

namespace {

constexpr size_t kPage = 4096;
// librdmacm's enum rdma_cm_event_type (rdma/rdma_cma.h cannot be included beside the kernel's
// rdma_user_cm.h: both define the port spaces).
constexpr uint32_t kAddrResolved = 0;  // RDMA_CM_EVENT_ADDR_RESOLVED
constexpr int kLocalWrite = IBV_ACCESS_LOCAL_WRITE;

// QUERY_PORT as libibverbs writes it, its response at an address the test chooses.
struct QueryPortCmd {
  ib_uverbs_cmd_hdr hdr{IB_USER_VERBS_CMD_QUERY_PORT,
                        (sizeof(ib_uverbs_cmd_hdr) + sizeof(ib_uverbs_query_port)) / 4,
                        sizeof(ib_uverbs_query_port_resp) / 4};
  ib_uverbs_query_port body{};
};

// 0 if QUERY_PORT wrote its answer at `response`, else the errno.
int query_port_into(int cmd_fd, void* response) {
  QueryPortCmd c;
  c.body.response = reinterpret_cast<uintptr_t>(response);
  c.body.port_num = 1;
  errno = 0;
  if (write(cmd_fd, &c, sizeof c) == static_cast<ssize_t>(sizeof c)) return 0;
  return errno;
}

void* map_pages(size_t pages, int prot = PROT_READ | PROT_WRITE) {
  void* p = mmap(nullptr, pages * kPage, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  return p;
}

// A raw mprotect: the shim interposes libc's mprotect, and this one goes around it, as a
// system call made by ld.so, by a binary patcher's hook or by the program itself would.
int raw_mprotect(void* addr, size_t len, int prot) {
  return static_cast<int>(syscall(SYS_mprotect, addr, len, prot));
}

// ALLOC_PD written by hand, its response at `response`: 0 or the errno.
int alloc_pd_into(int cmd_fd, void* response) {
  struct {
    ib_uverbs_cmd_hdr hdr{IB_USER_VERBS_CMD_ALLOC_PD,
                          (sizeof(ib_uverbs_cmd_hdr) + sizeof(ib_uverbs_alloc_pd)) / 4,
                          sizeof(ib_uverbs_alloc_pd_resp) / 4};
    ib_uverbs_alloc_pd body{};
  } c;
  c.body.response = reinterpret_cast<uintptr_t>(response);
  errno = 0;
  if (write(cmd_fd, &c, sizeof c) == static_cast<ssize_t>(sizeof c)) return 0;
  return errno;
}

// DEALLOC_PD of `handle`: 0 or the errno.
int dealloc_pd(int cmd_fd, uint32_t handle) {
  struct {
    ib_uverbs_cmd_hdr hdr{IB_USER_VERBS_CMD_DEALLOC_PD,
                          (sizeof(ib_uverbs_cmd_hdr) + sizeof(ib_uverbs_dealloc_pd)) / 4, 0};
    ib_uverbs_dealloc_pd body{};
  } c;
  c.body.pd_handle = handle;
  errno = 0;
  if (write(cmd_fd, &c, sizeof c) == static_cast<ssize_t>(sizeof c)) return 0;
  return errno;
}

// REG_MR written by hand: 0 or the errno.
int reg_mr_into(int cmd_fd, void* response, uint32_t pd_handle, void* buf, size_t len) {
  struct {
    ib_uverbs_cmd_hdr hdr{IB_USER_VERBS_CMD_REG_MR,
                          (sizeof(ib_uverbs_cmd_hdr) + sizeof(ib_uverbs_reg_mr)) / 4,
                          sizeof(ib_uverbs_reg_mr_resp) / 4};
    ib_uverbs_reg_mr body{};
  } c;
  c.body.response = reinterpret_cast<uintptr_t>(response);
  c.body.start = reinterpret_cast<uintptr_t>(buf);
  c.body.length = len;
  c.body.hca_va = c.body.start;
  c.body.pd_handle = pd_handle;
  c.body.access_flags = IBV_ACCESS_LOCAL_WRITE;
  errno = 0;
  if (write(cmd_fd, &c, sizeof c) == static_cast<ssize_t>(sizeof c)) return 0;
  return errno;
}

// One rdma_cm command written by hand on descriptor `fd`: 0 or the errno.
template <typename Body>
int ucma_command(int fd, uint32_t cmd, const Body& body, size_t out) {
  struct {
    rdma_ucm_cmd_hdr hdr;
    Body body;
  } c{};
  c.hdr.cmd = cmd;
  c.hdr.in = sizeof(Body);
  c.hdr.out = static_cast<uint16_t>(out);
  c.body = body;
  errno = 0;
  if (write(fd, &c, sizeof c) == static_cast<ssize_t>(sizeof c)) return 0;
  return errno;
}

// GET_EVENT into `response`: 0 or the errno.
int get_event_into(int fd, void* response) {
  rdma_ucm_get_event get{};
  get.response = reinterpret_cast<uintptr_t>(response);
  return ucma_command(fd, RDMA_USER_CM_CMD_GET_EVENT, get, sizeof(rdma_ucm_event_resp));
}

// How many descriptors the process has open.
int open_descriptors() {
  DIR* d = opendir("/proc/self/fd");
  REQUIRE(d);
  int n = 0;
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n - 1;  // the directory's own
}

// GET_CONTEXT as libmlx5 writes it (static UARs, 4 BlueFlame registers): 0 or the errno.
constexpr size_t kContextRespBytes =
    sizeof(ib_uverbs_get_context_resp) + sizeof(mlx5_ib_alloc_ucontext_resp);
int get_context_into(int cmd_fd, void* response) {
  ib_uverbs_cmd_hdr hdr{IB_USER_VERBS_CMD_GET_CONTEXT,
                        (sizeof(ib_uverbs_cmd_hdr) + sizeof(ib_uverbs_get_context) +
                         sizeof(mlx5_ib_alloc_ucontext_req_v2)) / 4,
                        kContextRespBytes / 4};
  ib_uverbs_get_context body{};
  body.response = reinterpret_cast<uintptr_t>(response);
  mlx5_ib_alloc_ucontext_req_v2 drv{};
  drv.total_num_bfregs = 4;
  drv.max_cqe_version = 1;
  uint8_t c[sizeof hdr + sizeof body + sizeof drv];
  std::memcpy(c, &hdr, sizeof hdr);
  std::memcpy(c + sizeof hdr, &body, sizeof body);
  std::memcpy(c + sizeof hdr + sizeof body, &drv, sizeof drv);
  errno = 0;
  if (write(cmd_fd, c, sizeof c) == static_cast<ssize_t>(sizeof c)) return 0;
  return errno;
}

// CREATE_COMP_CHANNEL written by hand: 0 or the errno.
int create_channel_into(int cmd_fd, void* response) {
  struct {
    ib_uverbs_cmd_hdr hdr{IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL,
                          (sizeof(ib_uverbs_cmd_hdr) + sizeof(ib_uverbs_create_comp_channel)) / 4,
                          sizeof(ib_uverbs_create_comp_channel_resp) / 4};
    ib_uverbs_create_comp_channel body{};
  } c;
  c.body.response = reinterpret_cast<uintptr_t>(response);
  errno = 0;
  if (write(cmd_fd, &c, sizeof c) == static_cast<ssize_t>(sizeof c)) return 0;
  return errno;
}

// The shim's count of its reads of /proc/self/maps (a diagnostic it exports).
uint64_t maps_reads() {
  using fn = uint64_t (*)();
  static const auto f = reinterpret_cast<fn>(dlsym(RTLD_DEFAULT, "rnicdv_uverbs_maps_reads"));
  REQUIRE(f);
  return f();
}

}  // namespace

TEST_CASE("a response buffer made read-only after a command wrote it gets EFAULT next time") {
  Device d("rnicsim0");
  void* page = map_pages(1);
  REQUIRE(query_port_into(d.ctx->cmd_fd, page) == 0);
  CHECK(static_cast<ib_uverbs_query_port_resp*>(page)->state == IBV_PORT_ACTIVE);
  REQUIRE(mprotect(page, kPage, PROT_READ) == 0);
  CHECK(query_port_into(d.ctx->cmd_fd, page) == EFAULT);
  // Writable again: accepted again.
  REQUIRE(mprotect(page, kPage, PROT_READ | PROT_WRITE) == 0);
  CHECK(query_port_into(d.ctx->cmd_fd, page) == 0);
  munmap(page, kPage);
}

TEST_CASE("a response buffer unmapped after a command wrote it gets EFAULT next time") {
  Device d("rnicsim0");
  // Two pages, the second kept PROT_NONE so that no other mapping takes the first's place
  // between the munmap and the command.
  auto* two = static_cast<uint8_t*>(map_pages(2));
  REQUIRE(mprotect(two + kPage, kPage, PROT_NONE) == 0);
  REQUIRE(query_port_into(d.ctx->cmd_fd, two) == 0);
  REQUIRE(munmap(two, kPage) == 0);
  CHECK(query_port_into(d.ctx->cmd_fd, two) == EFAULT);
  // A region mapped at that address after the refusal is taken by the next command.
  void* again = mmap(two, kPage, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  REQUIRE(again == static_cast<void*>(two));
  CHECK(query_port_into(d.ctx->cmd_fd, two) == 0);
  munmap(two, 2 * kPage);
}

TEST_CASE("a region moved by mremap is refused at its old address and taken at its new one") {
  Device d("rnicsim0");
  auto* from = static_cast<uint8_t*>(map_pages(2));
  auto* to = static_cast<uint8_t*>(map_pages(2, PROT_NONE));  // a place to move to
  REQUIRE(mprotect(from + kPage, kPage, PROT_NONE) == 0);
  REQUIRE(query_port_into(d.ctx->cmd_fd, from) == 0);
  void* moved = mremap(from, kPage, kPage, MREMAP_MAYMOVE | MREMAP_FIXED, to);
  REQUIRE(moved == static_cast<void*>(to));
  CHECK(query_port_into(d.ctx->cmd_fd, from) == EFAULT);
  CHECK(query_port_into(d.ctx->cmd_fd, to) == 0);
  munmap(from, 2 * kPage);
  munmap(to, 2 * kPage);
}

TEST_CASE("a buffer made read-only after one registration cannot be registered for writing") {
  Device d("rnicsim0");
  void* buf = map_pages(4);
  ibv_mr* mr = ibv_reg_mr(d.pd, buf, 4 * kPage, kLocalWrite);
  REQUIRE(mr);
  REQUIRE(ibv_dereg_mr(mr) == 0);
  REQUIRE(mprotect(buf, 4 * kPage, PROT_READ) == 0);
  errno = 0;
  CHECK(ibv_reg_mr(d.pd, buf, 4 * kPage, kLocalWrite) == nullptr);
  CHECK(errno == EFAULT);
  munmap(buf, 4 * kPage);
}

TEST_CASE("commands on an unchanged address space do not read /proc/self/maps again") {
  Device d("rnicsim0");
  void* page = map_pages(1);
  REQUIRE(query_port_into(d.ctx->cmd_fd, page) == 0);
  const uint64_t before = maps_reads();
  constexpr int kCommands = 200;
  int failed = 0;
  for (int i = 0; i < kCommands; ++i) failed += query_port_into(d.ctx->cmd_fd, page) != 0;
  CHECK(failed == 0);
  // Nothing in this loop changes the address space; another thread of the process (the
  // simulated device's) may, rarely, and then one read follows.
  CHECK(maps_reads() - before <= 4);
  // A change is seen: one read, then quiet again.
  REQUIRE(mprotect(page, kPage, PROT_READ | PROT_WRITE) == 0);
  const uint64_t after_change = maps_reads();
  for (int i = 0; i < kCommands; ++i) failed += query_port_into(d.ctx->cmd_fd, page) != 0;
  CHECK(failed == 0);
  CHECK(maps_reads() - after_change >= 1);
  CHECK(maps_reads() - after_change <= 4);
  munmap(page, kPage);
}

TEST_CASE("a response page made read-only by a raw system call gets EFAULT, not a silent success") {
  Device d("rnicsim0");
  void* page = map_pages(1);
  // The shim reads the maps for this command and keeps them: the page is writable.
  REQUIRE(query_port_into(d.ctx->cmd_fd, page) == 0);
  REQUIRE(static_cast<ib_uverbs_query_port_resp*>(page)->state == IBV_PORT_ACTIVE);
  std::memset(page, 0, kPage);
  // The shim does not see this change: its kept maps still say writable, and the page is
  // still mapped. The response copy is what fails, and the command with it.
  REQUIRE(raw_mprotect(page, kPage, PROT_READ) == 0);
  CHECK(query_port_into(d.ctx->cmd_fd, page) == EFAULT);
  CHECK(static_cast<ib_uverbs_query_port_resp*>(page)->state == 0);
  REQUIRE(raw_mprotect(page, kPage, PROT_READ | PROT_WRITE) == 0);
  CHECK(query_port_into(d.ctx->cmd_fd, page) == 0);
  CHECK(static_cast<ib_uverbs_query_port_resp*>(page)->state == IBV_PORT_ACTIVE);
  munmap(page, kPage);
}

TEST_CASE("a PD or MR whose handle cannot be written back is destroyed, and the caller gets EFAULT") {
  Device d("rnicsim0");
  const int fd = d.ctx->cmd_fd;
  auto* page = static_cast<ib_uverbs_alloc_pd_resp*>(map_pages(1));
  // A first PD into the page: its handle, and the page kept as writable by the shim.
  REQUIRE(alloc_pd_into(fd, page) == 0);
  const uint32_t first = page->pd_handle;
  REQUIRE(raw_mprotect(page, kPage, PROT_READ) == 0);
  CHECK(alloc_pd_into(fd, page) == EFAULT);
  // Handles are never reused: the refused PD's was first + 1, the next one first + 2. The
  // refused PD is gone, as the kernel aborts an object whose response copy failed.
  ib_uverbs_alloc_pd_resp good{};
  REQUIRE(alloc_pd_into(fd, &good) == 0);
  CHECK(good.pd_handle == first + 2);
  CHECK(dealloc_pd(fd, first + 1) == EINVAL);

  // An MR on PD `first`: refused with EFAULT, it leaves its PD free to go.
  void* buf = map_pages(1);
  CHECK(reg_mr_into(fd, page, first, buf, kPage) == EFAULT);
  CHECK(dealloc_pd(fd, first) == 0);
  CHECK(dealloc_pd(fd, good.pd_handle) == 0);
  munmap(buf, kPage);
  munmap(page, kPage);
}

TEST_CASE("a response page unmapped by a raw system call after a command gets EFAULT") {
  Device d("rnicsim0");
  // The second page stays mapped (PROT_NONE) so that nothing else is mapped in the first's
  // place meanwhile.
  auto* two = static_cast<uint8_t*>(map_pages(2));
  REQUIRE(mprotect(two + kPage, kPage, PROT_NONE) == 0);
  REQUIRE(query_port_into(d.ctx->cmd_fd, two) == 0);
  const uint64_t before = maps_reads();
  // Around the shim's munmap: its kept maps still show the page; mincore() does not.
  REQUIRE(syscall(SYS_munmap, two, kPage) == 0);
  CHECK(query_port_into(d.ctx->cmd_fd, two) == EFAULT);
  CHECK(maps_reads() > before);  // mincore's "not mapped" made it read the maps again
  munmap(two, 2 * kPage);
}

TEST_CASE("an rdma_cm event whose copy fails stays queued for the next GET_EVENT") {
  // The device's address, from its RoCE v2 GID (::ffff:a.b.c.d).
  sockaddr_in dst{};
  {
    Device d("rnicsim0");
    const ibv_gid gid = port_gid(d.ctx);
    dst.sin_family = AF_INET;
    std::memcpy(&dst.sin_addr, gid.raw + 12, 4);
  }
  const int fd = open("/dev/infiniband/rdma_cm", O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  // Non-blocking: a lost event makes the last GET_EVENT fail with EAGAIN, not wait forever.
  REQUIRE(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) == 0);
  void* page = map_pages(1);
  rdma_ucm_create_id create{};
  create.uid = 77;
  create.response = reinterpret_cast<uintptr_t>(page);
  create.ps = RDMA_PS_TCP;
  create.qp_type = IBV_QPT_RC;
  REQUIRE(ucma_command(fd, RDMA_USER_CM_CMD_CREATE_ID, create, sizeof(rdma_ucm_create_id_resp)) ==
          0);
  const uint32_t id = static_cast<rdma_ucm_create_id_resp*>(page)->id;
  rdma_ucm_resolve_ip resolve{};
  std::memcpy(&resolve.dst_addr, &dst, sizeof dst);
  resolve.id = id;
  resolve.timeout_ms = 2000;
  REQUIRE(ucma_command(fd, RDMA_USER_CM_CMD_RESOLVE_IP, resolve, 0) == 0);
  // ADDR_RESOLVED is queued (at once or from the CM's thread). The page the CREATE_ID answer
  // went to is made read-only behind the shim's back.
  pollfd p{fd, POLLIN, 0};
  REQUIRE(poll(&p, 1, 30000) == 1);
  REQUIRE(raw_mprotect(page, kPage, PROT_READ) == 0);
  CHECK(get_event_into(fd, page) == EFAULT);
  rdma_ucm_event_resp ev{};
  CHECK(get_event_into(fd, &ev) == 0);
  CHECK(ev.event == kAddrResolved);
  CHECK(ev.id == id);
  CHECK(ev.uid == 77);
  // It was taken once: nothing more is queued.
  CHECK(get_event_into(fd, &ev) == EAGAIN);
  rdma_ucm_destroy_id destroy{};
  rdma_ucm_destroy_id_resp dresp{};
  destroy.id = id;
  destroy.response = reinterpret_cast<uintptr_t>(&dresp);
  CHECK(ucma_command(fd, RDMA_USER_CM_CMD_DESTROY_ID, destroy, sizeof dresp) == 0);
  CHECK(dresp.events_reported == 1);
  CHECK(close(fd) == 0);
  munmap(page, kPage);
}

TEST_CASE("a context or channel whose response copy fails leaves no descriptor behind") {
  Device d("rnicsim0");
  void* page = map_pages(1);
  REQUIRE(query_port_into(d.ctx->cmd_fd, page) == 0);  // the page, kept as writable
  REQUIRE(raw_mprotect(page, kPage, PROT_READ) == 0);
  const int before = open_descriptors();

  // A completion channel: its descriptor, which the caller never learns, is closed again.
  CHECK(create_channel_into(d.ctx->cmd_fd, page) == EFAULT);
  CHECK(open_descriptors() == before);

  // A context: its async descriptor and UAR memory go, and GET_CONTEXT can be sent again.
  const int fd = open("/dev/infiniband/uverbs0", O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  CHECK(get_context_into(fd, page) == EFAULT);
  CHECK(open_descriptors() == before + 1);
  uint8_t resp[kContextRespBytes] = {};
  CHECK(get_context_into(fd, resp) == 0);
  ib_uverbs_get_context_resp core{};
  mlx5_ib_alloc_ucontext_resp drv{};
  std::memcpy(&core, resp, sizeof core);
  std::memcpy(&drv, resp + sizeof core, sizeof drv);
  CHECK(drv.tot_bfregs == 4);
  CHECK(close(static_cast<int>(core.async_fd)) == 0);
  CHECK(close(fd) == 0);
  munmap(page, kPage);
}
