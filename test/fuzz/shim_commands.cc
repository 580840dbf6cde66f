// SPDX-License-Identifier: BSD-3-Clause
// libFuzzer program for the uverbs shim's command decoders: raw write() commands on a
// /dev/infiniband/uverbsN context (opened by libibverbs, so GET_CONTEXT and the UAR pages are
// in place) and on /dev/infiniband/rdma_cm. The shim's sources are compiled into this
// program, so its interposed libc entry points are the process's, as under LD_PRELOAD, and
// carry the fuzzer's coverage.
//
// Input: a sequence of records
//   [target: even = uverbs, odd = rdma_cm] [pointer mode] [offset lo] [length lo, hi] [bytes]
// Every user pointer a command carries (its response, and for CREATE_CQ, CREATE_QP in both
// forms, CREATE_SRQ, REG_MR and REREG_MR the rings, doorbell records and buffer) is
// rewritten to point into an arena
// whose last page is followed by an inaccessible (PROT_NONE) guard page and preceded by a
// read-only one, or to a tiny address: the decoder must answer EFAULT (or work) and never fault. Pointers
// into the program's own heap are never given: the simulated HCA would then write there, as
// real hardware would into an application's memory, which is not a shim fault. For the same
// reason the guard page stays mapped: an unmapped hole there would be taken by the next
// one-page mmap (a UAR page libmlx5 maps, a sanitizer's internal buffer), and a response that
// runs off the arena would then be written, zero-filled as the kernel does, through it into
// whatever lies above (ASan's large-chunk headers: process_vm_writev is not instrumented).
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/mlx5-abi.h>
#include <rdma/rdma_user_cm.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kArenaPages = 8;

struct Arena {
  uint8_t* base = nullptr;  // [read-only page][kArenaPages read-write][PROT_NONE guard page]
  uint8_t* rw() const { return base + kPage; }
  uint8_t* guard() const { return base + kPage * (1 + kArenaPages); }
};

Arena& arena() {
  static Arena a = [] {
    Arena x;
    void* p = mmap(nullptr, kPage * (kArenaPages + 2), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) abort();
    x.base = static_cast<uint8_t*>(p);
    // The guard is reserved, not unmapped: nothing else may ever be mapped there.
    if (mprotect(x.base, kPage, PROT_READ) != 0 || mprotect(x.guard(), kPage, PROT_NONE) != 0)
      abort();
    return x;
  }();
  return a;
}

// A user pointer chosen by `mode` and `offset`.
uint64_t pointer(uint8_t mode, uint16_t offset) {
  Arena& a = arena();
  switch (mode % 5) {
    case 0:
      return reinterpret_cast<uintptr_t>(a.rw() + offset % (kPage * kArenaPages));
    case 1:  // ending just before, or running into, the guard page
      return reinterpret_cast<uintptr_t>(a.guard() - offset % 256);
    case 2:
      return reinterpret_cast<uintptr_t>(a.guard());  // inaccessible
    case 3:
      return reinterpret_cast<uintptr_t>(a.base + offset % kPage);  // read-only
    default:
      return 0x10 + offset % 64;  // tiny
  }
}

void put64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, sizeof v); }

// uverbs: the response (the core request's first u64 for the commands that answer), and the
// memory the driver data names.
void patch_uverbs(std::vector<uint8_t>& cmd, uint8_t mode, uint16_t offset) {
  if (cmd.size() < sizeof(ib_uverbs_cmd_hdr)) return;
  ib_uverbs_cmd_hdr hdr;
  std::memcpy(&hdr, cmd.data(), sizeof hdr);
  const bool extended = hdr.command & IB_USER_VERBS_CMD_FLAG_EXTENDED;
  const uint32_t number = hdr.command & IB_USER_VERBS_CMD_COMMAND_MASK;
  auto arena_ptr = [&](size_t at, uint16_t off) {
    if (cmd.size() >= at + 8) put64(cmd.data() + at, pointer(0, off));
  };
  if (extended) {
    if (cmd.size() >= sizeof hdr + sizeof(ib_uverbs_ex_cmd_hdr))
      put64(cmd.data() + sizeof hdr, pointer(mode, offset));  // ex_hdr.response
    if (number == IB_USER_VERBS_EX_CMD_CREATE_QP) {  // its driver data after the core request
      const size_t drv = sizeof hdr + sizeof(ib_uverbs_ex_cmd_hdr) + size_t{hdr.in_words} * 8;
      arena_ptr(drv + offsetof(mlx5_ib_create_qp, buf_addr), 0);
      arena_ptr(drv + offsetof(mlx5_ib_create_qp, db_addr), static_cast<uint16_t>(offset | 1));
    }
    return;
  }
  const size_t core = sizeof hdr;
  if (cmd.size() >= core + 8) put64(cmd.data() + core, pointer(mode, offset));
  switch (number) {
    case IB_USER_VERBS_CMD_REG_MR:  // start, and hca_va equal to it
      if (cmd.size() >= core + offsetof(ib_uverbs_reg_mr, hca_va) + 8) {
        const uint64_t start = pointer(mode / 5, static_cast<uint16_t>(offset * 7));
        put64(cmd.data() + core + offsetof(ib_uverbs_reg_mr, start), start);
        put64(cmd.data() + core + offsetof(ib_uverbs_reg_mr, hca_va), start);
      }
      break;
    case IB_USER_VERBS_CMD_REREG_MR:  // a new translation: start, and hca_va equal to it
      if (cmd.size() >= core + offsetof(ib_uverbs_rereg_mr, hca_va) + 8) {
        const uint64_t start = pointer(mode / 5, static_cast<uint16_t>(offset * 7));
        put64(cmd.data() + core + offsetof(ib_uverbs_rereg_mr, start), start);
        put64(cmd.data() + core + offsetof(ib_uverbs_rereg_mr, hca_va), start);
      }
      break;
    case IB_USER_VERBS_CMD_CREATE_SRQ: {
      const size_t drv = core + sizeof(ib_uverbs_create_srq);
      arena_ptr(drv + offsetof(mlx5_ib_create_srq, buf_addr), 0);
      arena_ptr(drv + offsetof(mlx5_ib_create_srq, db_addr), static_cast<uint16_t>(offset | 1));
      break;
    }
    case IB_USER_VERBS_CMD_CREATE_CQ: {
      const size_t drv = core + sizeof(ib_uverbs_create_cq);
      arena_ptr(drv + offsetof(mlx5_ib_create_cq, buf_addr), 0);
      arena_ptr(drv + offsetof(mlx5_ib_create_cq, db_addr), static_cast<uint16_t>(offset | 1));
      break;
    }
    case IB_USER_VERBS_CMD_CREATE_QP: {
      const size_t drv = core + sizeof(ib_uverbs_create_qp);
      arena_ptr(drv + offsetof(mlx5_ib_create_qp, buf_addr), 0);
      arena_ptr(drv + offsetof(mlx5_ib_create_qp, db_addr), static_cast<uint16_t>(offset | 1));
      arena_ptr(drv + offsetof(mlx5_ib_create_qp, sq_buf_addr), 2048);
      break;
    }
    default:
      break;
  }
}

// rdma_cm: every command that answers carries its response first, except CREATE_ID (after
// the uid) and JOIN_IP_MCAST/JOIN_MCAST (first as well); SET_OPTION's value pointer is first.
void patch_ucma(std::vector<uint8_t>& cmd, uint8_t mode, uint16_t offset) {
  if (cmd.size() < sizeof(rdma_ucm_cmd_hdr)) return;
  rdma_ucm_cmd_hdr hdr;
  std::memcpy(&hdr, cmd.data(), sizeof hdr);
  const size_t at = sizeof hdr + (hdr.cmd == RDMA_USER_CM_CMD_CREATE_ID ? 8 : 0);
  switch (hdr.cmd) {
    case RDMA_USER_CM_CMD_CREATE_ID:
    case RDMA_USER_CM_CMD_DESTROY_ID:
    case RDMA_USER_CM_CMD_BIND_IP:
    case RDMA_USER_CM_CMD_QUERY_ROUTE:
    case RDMA_USER_CM_CMD_INIT_QP_ATTR:
    case RDMA_USER_CM_CMD_GET_EVENT:
    case RDMA_USER_CM_CMD_SET_OPTION:
    case RDMA_USER_CM_CMD_JOIN_IP_MCAST:
    case RDMA_USER_CM_CMD_LEAVE_MCAST:
    case RDMA_USER_CM_CMD_MIGRATE_ID:
    case RDMA_USER_CM_CMD_QUERY:
    case RDMA_USER_CM_CMD_JOIN_MCAST:
      if (cmd.size() >= at + 8) put64(cmd.data() + at, pointer(mode, offset));
      break;
    default:
      break;
  }
}

ibv_context* open_context() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) abort();  // the shim presents rnicsim0
  ibv_context* ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (!ctx) abort();
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("RNICDV_UVERBS_DEVICES", "1", 1);
  setenv("RNICDV_SIM_WIRE", "inproc", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A fresh context and channel per input: what one input creates, closing destroys.
  ibv_context* ctx = open_context();
  const int cm = open("/dev/infiniband/rdma_cm", O_RDWR | O_CLOEXEC);
  if (cm < 0) abort();
  fcntl(cm, F_SETFL, O_NONBLOCK);  // GET_EVENT answers EAGAIN instead of waiting
  size_t at = 0;
  while (at + 5 <= size) {
    const uint8_t target = data[at], mode = data[at + 1];
    const uint16_t offset = static_cast<uint16_t>(data[at + 2] * 61u);
    const size_t len = std::min<size_t>(data[at + 3] | (data[at + 4] & 0x3) << 8, size - at - 5);
    std::vector<uint8_t> cmd(data + at + 5, data + at + 5 + len);
    at += 5 + len;
    if (target & 1) {
      patch_ucma(cmd, mode, offset);
      (void)!write(cm, cmd.data(), cmd.size());
    } else {
      patch_uverbs(cmd, mode, offset);
      (void)!write(ctx->cmd_fd, cmd.data(), cmd.size());
    }
  }
  close(cm);
  ibv_close_device(ctx);
  return 0;
}
