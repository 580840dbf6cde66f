// SPDX-License-Identifier: BSD-3-Clause
// Memory replaced under a live MR, through unmodified libibverbs: the device keeps the pages
// ibv_reg_mr registered, as the kernel's pin keeps them for a ConnectX. Whatever the program
// maps over the range afterwards is never written, read or disclosed, and the registered
// pages stay the device's view until ibv_dereg_mr.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "verbs_fixtures.h"

using namespace verbs_test;

namespace {

constexpr size_t kLen = 1 << 20;

enum class Replace { munmap_mmap, map_fixed, map_fixed_file, mremap_away, dontneed };

const char* name_of(Replace r) {
  switch (r) {
    case Replace::munmap_mmap: return "munmap, then mmap at the same address";
    case Replace::map_fixed: return "an anonymous MAP_FIXED mapping over it";
    case Replace::map_fixed_file: return "a shared file mapped over it with MAP_FIXED";
    case Replace::mremap_away: return "mremap to another address, new memory at the old one";
    case Replace::dontneed: return "madvise(MADV_DONTNEED)";
  }
  return "?";
}

// A file of kLen bytes of 0xf0, for the shared mapping put over the region.
struct TempFile {
  int fd = -1;
  TempFile() {
    char path[] = "/tmp/rnicdv-pin-XXXXXX";
    fd = ::mkstemp(path);
    REQUIRE(fd >= 0);
    ::unlink(path);
    std::vector<uint8_t> bytes(kLen, 0xf0);
    REQUIRE(::pwrite(fd, bytes.data(), kLen, 0) == static_cast<ssize_t>(kLen));
  }
  ~TempFile() { ::close(fd); }
  bool unchanged() const {
    std::vector<uint8_t> bytes(kLen);
    if (::pread(fd, bytes.data(), kLen, 0) != static_cast<ssize_t>(kLen)) return false;
    for (uint8_t b : bytes)
      if (b != 0xf0) return false;
    return true;
  }
};

bool all(const uint8_t* p, size_t n, uint8_t v) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != v) return false;
  return true;
}

}  // namespace

TEST_CASE("memory replaced under a live MR is never touched; the MR keeps its registered pages") {
  const Replace how = GENERATE(Replace::munmap_mmap, Replace::map_fixed, Replace::map_fixed_file,
                               Replace::mremap_away, Replace::dontneed);
  INFO(name_of(how));
  Pair p;
  Buffer local(p.da.pd, 2 * kLen, kAllAccess);
  void* m = ::mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(m != MAP_FAILED);
  auto* region = static_cast<uint8_t*>(m);
  std::memset(region, 0x5a, kLen);
  ibv_mr* mr = ibv_reg_mr(p.db.pd, region, kLen, kAllAccess);
  REQUIRE(mr);

  TempFile file;
  uint8_t* moved = nullptr;  // mremap_away: where the registered pages went
  switch (how) {
    case Replace::munmap_mmap:
      REQUIRE(::munmap(region, kLen) == 0);
      REQUIRE(::mmap(region, kLen, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) == region);
      break;
    case Replace::map_fixed:
      REQUIRE(::mmap(region, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                     -1, 0) == region);
      break;
    case Replace::map_fixed_file:
      REQUIRE(::mmap(region, kLen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, file.fd, 0) ==
              region);
      break;
    case Replace::mremap_away: {
      void* target = ::mmap(nullptr, kLen, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      REQUIRE(target != MAP_FAILED);
      moved = static_cast<uint8_t*>(
          ::mremap(region, kLen, kLen, MREMAP_MAYMOVE | MREMAP_FIXED, target));
      REQUIRE(moved == target);
      REQUIRE(::mmap(region, kLen, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) == region);
      break;
    }
    case Replace::dontneed:
      REQUIRE(::madvise(region, kLen, MADV_DONTNEED) == 0);
      break;
  }
  // What the program put there since: its own bytes, which the peer must never see.
  if (how != Replace::map_fixed_file) std::memset(region, 0xee, 4096);

  auto rdma = [&](ibv_wr_opcode op, size_t local_off) {
    ibv_sge sge{local.addr(local_off), static_cast<uint32_t>(kLen), local.mr->lkey};
    ibv_send_wr wr = make_wr(op, &sge, 1, 1);
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(region);
    wr.wr.rdma.rkey = mr->rkey;
    p.a.post(wr);
    return p.a.wait().status;
  };
  // The peer reads the registered bytes, not the new mapping's.
  REQUIRE(rdma(IBV_WR_RDMA_READ, kLen) == IBV_WC_SUCCESS);
  CHECK(all(local.bytes.data() + kLen, kLen, 0x5a));
  // A WRITE of the whole region lands in the registered pages only.
  std::memset(local.bytes.data(), 0x11, kLen);
  REQUIRE(rdma(IBV_WR_RDMA_WRITE, 0) == IBV_WC_SUCCESS);
  if (how == Replace::map_fixed_file) {
    CHECK(all(region, kLen, 0xf0));
    CHECK(file.unchanged());
  } else {
    CHECK(all(region, 4096, 0xee));
    CHECK(all(region + 4096, kLen - 4096, 0));
  }
  // The pages moved with the mapping: the program sees the WRITE where they went.
  if (moved) CHECK(all(moved, kLen, 0x11));
  // The device's view is the registered pages, now with the WRITE.
  std::memset(local.bytes.data() + kLen, 0, kLen);
  REQUIRE(rdma(IBV_WR_RDMA_READ, kLen) == IBV_WC_SUCCESS);
  CHECK(all(local.bytes.data() + kLen, kLen, 0x11));

  CHECK(ibv_dereg_mr(mr) == 0);
  ::munmap(region, kLen);
  if (moved) ::munmap(moved, kLen);
}
