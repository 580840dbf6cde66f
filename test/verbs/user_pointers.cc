// SPDX-License-Identifier: BSD-3-Clause
// The shim checks every pointer a command carries against the process's mappings, as the
// kernel's copy_to_user and get_user_pages do. It keeps its reading of /proc/self/maps between
// commands and reads it again only when the address space changed: these tests change the
// address space between two commands (munmap, mprotect, mremap, a new mapping) and check that
// the second command sees the change, and that commands on an unchanged address space do not
// read the maps again.
#include <catch2/catch.hpp>

#include "verbs_fixtures.h"

#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_verbs.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

using namespace verbs_test;

namespace {

constexpr size_t kPage = 4096;
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
