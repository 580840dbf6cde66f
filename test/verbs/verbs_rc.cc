// SPDX-License-Identifier: BSD-3-Clause
// A verbs program that knows nothing of rnicdv: it is linked against libibverbs only and run
// with librnicdv-uverbs.so preloaded, so every verb goes through the unmodified libibverbs
// and libmlx5 of the system (WQEs, doorbells and CQ polling are libmlx5's own) to two
// simulated HCAs in this process, connected over the simulated wire.
#include <catch2/catch.hpp>

#include "child_process.h"
#include "verbs_fixtures.h"

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <signal.h>
#include <poll.h>
#include <rdma/ib_user_ioctl_cmds.h>
#include <rdma/rdma_user_cm.h>  // after arpa/inet.h: glibc's in6 definitions first
#include <rdma/rdma_user_ioctl_cmds.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace verbs_test;

namespace {
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// The node GUID and GID 0 of "rnicsim0" as another process sees them (Debian's ibv_devinfo
// under the same preloaded shim), "" where that program cannot run.
std::string devinfo_of_other_process() {
  FILE* p = popen("ibv_devinfo -v -d rnicsim0 2>/dev/null", "r");
  if (!p) return "";
  std::string out;
  char line[512];
  while (std::fgets(line, sizeof line, p)) {
    const std::string l = line;
    if (l.find("node_guid:") != std::string::npos || l.find("GID[  0]:") != std::string::npos)
      out += l;
  }
  pclose(p);
  return out;
}

std::string guid_string(uint64_t be) {
  const uint64_t g = be64toh(be);
  char s[24];
  std::snprintf(s, sizeof s, "%04x:%04x:%04x:%04x", static_cast<unsigned>(g >> 48),
                static_cast<unsigned>(g >> 32 & 0xffff), static_cast<unsigned>(g >> 16 & 0xffff),
                static_cast<unsigned>(g & 0xffff));
  return s;
}
}  // namespace

TEST_CASE("two processes that each open rnicsim0 get different node GUIDs and link-local GIDs",
          "[process]") {
  if (kSanitized) {
    WARN("skipped under a sanitizer: the instrumented shim cannot be preloaded into ibv_devinfo");
    return;
  }
  Device d("rnicsim0");  // held open: this process's device keeps its address
  ibv_device_attr attr{};
  REQUIRE(ibv_query_device(d.ctx, &attr) == 0);
  ibv_gid ll{};
  REQUIRE(ibv_query_gid(d.ctx, 1, 0, &ll) == 0);
  CHECK(ll.raw[0] == 0xfe);
  CHECK(ll.raw[1] == 0x80);
  // The link-local GID carries the GUID (its interface identifier).
  CHECK(std::memcmp(ll.raw + 8, &attr.node_guid, 8) == 0);
  const std::string mine = guid_string(attr.node_guid);
  const std::string other = devinfo_of_other_process();
  INFO("this process: " << mine << "\nthe other:\n" << other);
  REQUIRE(other.find("node_guid:") != std::string::npos);
  CHECK(other.find(mine) == std::string::npos);
  // And the other's link-local GID is not this one's.
  char ll_text[64];
  std::snprintf(ll_text, sizeof ll_text, "%02x%02x:%02x%02x:%02x%02x:%02x%02x", ll.raw[8],
                ll.raw[9], ll.raw[10], ll.raw[11], ll.raw[12], ll.raw[13], ll.raw[14], ll.raw[15]);
  REQUIRE(other.find("GID[  0]:") != std::string::npos);
  CHECK(other.find(ll_text) == std::string::npos);
}

TEST_CASE("the simulated HCAs are listed, opened through libmlx5 and described like a ConnectX") {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  REQUIRE(list);
  REQUIRE(n >= 2);
  CHECK(std::string(ibv_get_device_name(list[0])) == "rnicsim0");
  CHECK(ibv_get_device_guid(list[0]) != 0);
  ibv_free_device_list(list);

  Device d("rnicsim0");
  ibv_device_attr attr{};
  REQUIRE(ibv_query_device(d.ctx, &attr) == 0);
  CHECK(attr.vendor_id == 0x02c9);
  CHECK(attr.phys_port_cnt == 1);
  CHECK(attr.atomic_cap == IBV_ATOMIC_HCA);
  CHECK(attr.max_qp_wr >= 1024);
  ibv_port_attr port{};
  REQUIRE(ibv_query_port(d.ctx, 1, &port) == 0);
  CHECK(port.state == IBV_PORT_ACTIVE);
  CHECK(port.link_layer == IBV_LINK_LAYER_ETHERNET);
  ibv_gid gid{};
  REQUIRE(ibv_query_gid(d.ctx, 1, kGidIndex, &gid) == 0);
  // ::ffff:127.0.0.x on the UDP wire.
  const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  CHECK(std::memcmp(gid.raw, prefix, 12) == 0);
  CHECK(ibv_query_port(d.ctx, 2, &port) != 0);
}

TEST_CASE("SEND with immediate lands in the posted receive buffer with its length and immediate") {
  Pair p;
  Buffer src(p.da.pd, 4096, kAllAccess), dst(p.db.pd, 4096, kAllAccess);
  fill(src.bytes, 3);
  for (int round = 0; round < 40; ++round) {  // wraps the 32-entry queues
    p.b.post_recv(dst, 0, 4096, 500 + round);
    const uint32_t len = 100 + round * 50;
    ibv_sge sge{src.addr(), len, src.mr->lkey};
    ibv_send_wr wr = make_wr(IBV_WR_SEND_WITH_IMM, &sge, 1, 900 + round);
    wr.imm_data = htonl(0xabc0 + round);
    p.a.post(wr);
    ibv_wc s = p.a.wait();
    REQUIRE(s.status == IBV_WC_SUCCESS);
    CHECK(s.wr_id == 900u + round);
    CHECK(s.opcode == IBV_WC_SEND);
    ibv_wc r = p.b.wait();
    REQUIRE(r.status == IBV_WC_SUCCESS);
    CHECK(r.wr_id == 500u + round);
    CHECK(r.opcode == IBV_WC_RECV);
    CHECK(r.byte_len == len);
    CHECK((r.wc_flags & IBV_WC_WITH_IMM) != 0);
    CHECK(ntohl(r.imm_data) == 0xabc0u + round);
    CHECK(r.qp_num == p.b.qp->qp_num);
    CHECK(std::memcmp(src.bytes.data(), dst.bytes.data(), len) == 0);
  }
}

TEST_CASE("an inline SEND with two SGEs on the receive side scatters in order") {
  Pair p;
  Buffer src(p.da.pd, 64, kAllAccess), dst(p.db.pd, 256, kAllAccess);
  fill(src.bytes, 9);
  ibv_sge rs[2] = {{dst.addr(0), 20, dst.mr->lkey}, {dst.addr(128), 40, dst.mr->lkey}};
  ibv_recv_wr rwr{};
  rwr.wr_id = 1;
  rwr.sg_list = rs;
  rwr.num_sge = 2;
  ibv_recv_wr* bad = nullptr;
  REQUIRE(ibv_post_recv(p.b.qp, &rwr, &bad) == 0);
  ibv_sge sge{src.addr(), 50, src.mr->lkey};
  ibv_send_wr wr = make_wr(IBV_WR_SEND, &sge, 1, 2);
  wr.send_flags |= IBV_SEND_INLINE;
  p.a.post(wr);
  REQUIRE(p.a.wait().status == IBV_WC_SUCCESS);
  ibv_wc r = p.b.wait();
  REQUIRE(r.status == IBV_WC_SUCCESS);
  CHECK(r.byte_len == 50);
  CHECK(std::memcmp(dst.bytes.data(), src.bytes.data(), 20) == 0);
  CHECK(std::memcmp(dst.bytes.data() + 128, src.bytes.data() + 20, 30) == 0);
}

TEST_CASE("RDMA WRITE and WRITE with immediate place the bytes at the remote address") {
  Pair p;
  Buffer src(p.da.pd, 1 << 20, kAllAccess), dst(p.db.pd, 1 << 20, kAllAccess);
  fill(src.bytes, 11);
  ibv_sge sge{src.addr(), 1 << 20, src.mr->lkey};  // a multi-packet message
  ibv_send_wr wr = make_wr(IBV_WR_RDMA_WRITE, &sge, 1, 7);
  wr.wr.rdma.remote_addr = dst.addr();
  wr.wr.rdma.rkey = dst.mr->rkey;
  p.a.post(wr);
  ibv_wc c = p.a.wait();
  REQUIRE(c.status == IBV_WC_SUCCESS);
  CHECK(c.opcode == IBV_WC_RDMA_WRITE);
  CHECK(src.bytes == dst.bytes);

  p.b.post_recv(dst, 0, 0, 77);  // WRITE with immediate consumes a receive
  ibv_sge small{src.addr(100), 32, src.mr->lkey};
  wr = make_wr(IBV_WR_RDMA_WRITE_WITH_IMM, &small, 1, 8);
  wr.wr.rdma.remote_addr = dst.addr(5000);
  wr.wr.rdma.rkey = dst.mr->rkey;
  wr.imm_data = htonl(0x5eed);
  std::memset(dst.bytes.data() + 5000, 0, 32);
  p.a.post(wr);
  REQUIRE(p.a.wait().status == IBV_WC_SUCCESS);
  ibv_wc r = p.b.wait();
  REQUIRE(r.status == IBV_WC_SUCCESS);
  CHECK(r.opcode == IBV_WC_RECV_RDMA_WITH_IMM);
  CHECK(ntohl(r.imm_data) == 0x5eed);
  CHECK(std::memcmp(dst.bytes.data() + 5000, src.bytes.data() + 100, 32) == 0);
}

TEST_CASE("RDMA READ brings the remote bytes into the local buffer") {
  Pair p;
  Buffer local(p.da.pd, 300000, kAllAccess), remote(p.db.pd, 300000, kAllAccess);
  fill(remote.bytes, 21);
  ibv_sge sge{local.addr(), 300000, local.mr->lkey};
  ibv_send_wr wr = make_wr(IBV_WR_RDMA_READ, &sge, 1, 9);
  wr.wr.rdma.remote_addr = remote.addr();
  wr.wr.rdma.rkey = remote.mr->rkey;
  p.a.post(wr);
  ibv_wc c = p.a.wait();
  REQUIRE(c.status == IBV_WC_SUCCESS);
  CHECK(c.opcode == IBV_WC_RDMA_READ);
  CHECK(c.byte_len == 300000);
  CHECK(local.bytes == remote.bytes);
}

TEST_CASE("atomic fetch-and-add and compare-and-swap return the old value and update the word") {
  Pair p;
  Buffer local(p.da.pd, 64, kAllAccess), remote(p.db.pd, 64, kAllAccess);
  uint64_t init = 1000;
  std::memcpy(remote.bytes.data(), &init, 8);
  ibv_sge sge{local.addr(), 8, local.mr->lkey};
  ibv_send_wr wr = make_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, &sge, 1, 10);
  wr.wr.atomic.remote_addr = remote.addr();
  wr.wr.atomic.rkey = remote.mr->rkey;
  wr.wr.atomic.compare_add = 42;
  p.a.post(wr);
  ibv_wc c = p.a.wait();
  REQUIRE(c.status == IBV_WC_SUCCESS);
  CHECK(c.opcode == IBV_WC_FETCH_ADD);
  uint64_t v = 0;
  std::memcpy(&v, local.bytes.data(), 8);
  CHECK(v == 1000);
  std::memcpy(&v, remote.bytes.data(), 8);
  CHECK(v == 1042);

  wr = make_wr(IBV_WR_ATOMIC_CMP_AND_SWP, &sge, 1, 11);
  wr.wr.atomic.remote_addr = remote.addr();
  wr.wr.atomic.rkey = remote.mr->rkey;
  wr.wr.atomic.compare_add = 1042;
  wr.wr.atomic.swap = 7;
  p.a.post(wr);
  c = p.a.wait();
  REQUIRE(c.status == IBV_WC_SUCCESS);
  CHECK(c.opcode == IBV_WC_COMP_SWAP);
  std::memcpy(&v, local.bytes.data(), 8);
  CHECK(v == 1042);
  std::memcpy(&v, remote.bytes.data(), 8);
  CHECK(v == 7);
}

TEST_CASE("a WRITE to a bad rkey completes with a remote access error and flushes what follows") {
  Pair p;
  Buffer src(p.da.pd, 4096, kAllAccess), dst(p.db.pd, 4096, IBV_ACCESS_LOCAL_WRITE);
  ibv_sge sge{src.addr(), 64, src.mr->lkey};
  ibv_send_wr wr = make_wr(IBV_WR_RDMA_WRITE, &sge, 1, 1);
  wr.wr.rdma.remote_addr = dst.addr();
  wr.wr.rdma.rkey = dst.mr->rkey ^ 0x5a5a00;  // no such key
  ibv_send_wr next = make_wr(IBV_WR_SEND, &sge, 1, 2);
  wr.next = &next;
  p.a.post(wr);
  ibv_wc c = p.a.wait();
  CHECK(c.wr_id == 1);
  CHECK(c.status == IBV_WC_REM_ACCESS_ERR);
  c = p.a.wait();
  CHECK(c.wr_id == 2);
  CHECK(c.status == IBV_WC_WR_FLUSH_ERR);
  ibv_qp_attr qa{};
  ibv_qp_init_attr qi{};
  REQUIRE(ibv_query_qp(p.a.qp, &qa, IBV_QP_STATE, &qi) == 0);
  CHECK(qa.qp_state == IBV_QPS_ERR);
  CHECK(std::all_of(dst.bytes.begin(), dst.bytes.end(), [](uint8_t x) { return x == 0; }));
}

TEST_CASE("an armed CQ raises one completion event on its channel, which destroy accounts for") {
  Device da("rnicsim0"), db("rnicsim1");
  Endpoint a(da), b(db, /*with_channel=*/true);
  a.to_rtr(b);
  b.to_rtr(a);
  a.to_rts();
  b.to_rts();
  Buffer src(da.pd, 256, kAllAccess), dst(db.pd, 256, kAllAccess);
  for (int round = 0; round < 5; ++round) {
    REQUIRE(ibv_req_notify_cq(b.cq, 0) == 0);
    b.post_recv(dst, 0, 256, round);
    ibv_sge sge{src.addr(), 16, src.mr->lkey};
    ibv_send_wr wr = make_wr(IBV_WR_SEND, &sge, 1, round);
    a.post(wr);
    REQUIRE(a.wait().status == IBV_WC_SUCCESS);
    pollfd pfd{b.channel->fd, POLLIN, 0};
    REQUIRE(poll(&pfd, 1, 30000) == 1);
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    REQUIRE(ibv_get_cq_event(b.channel, &ev_cq, &ev_ctx) == 0);
    CHECK(ev_cq == b.cq);
    CHECK(ev_ctx == &b);
    ibv_ack_cq_events(b.cq, 1);
    ibv_wc wc{};
    REQUIRE(ibv_poll_cq(b.cq, 1, &wc) == 1);  // the CQE is there before its event
    CHECK(wc.status == IBV_WC_SUCCESS);
    CHECK(wc.wr_id == static_cast<uint64_t>(round));
    // Not re-armed yet: no second event.
    CHECK(poll(&pfd, 1, 0) == 0);
  }
  // Destroying the CQ (in ~Endpoint) returns only if every event read was acknowledged.
}

TEST_CASE("two CQs armed back to back on one channel each raise their event") {
  // libmlx5 arms every CQ through the same UAR register (page 0 + 0x20), and both first arms
  // write the same word (sn 0, ci 0): neither may be lost.
  Device da("rnicsim0"), db("rnicsim1");
  Endpoint a(da, /*with_channel=*/true, /*split_cqs=*/true), b(db);
  a.to_rtr(b);
  b.to_rtr(a);
  a.to_rts();
  b.to_rts();
  Buffer mine(da.pd, 64, kAllAccess), theirs(db.pd, 64, kAllAccess);
  REQUIRE(ibv_req_notify_cq(a.cq, 0) == 0);  // both first arms: the same word
  REQUIRE(ibv_req_notify_cq(a.recv_cq, 0) == 0);
  a.post_recv(mine, 0, 64, 1);
  b.post_recv(theirs, 0, 64, 2);
  ibv_sge ss{mine.addr(), 8, mine.mr->lkey};
  ibv_send_wr w = make_wr(IBV_WR_SEND, &ss, 1, 3);
  a.post(w);  // completes into a.cq
  ibv_sge ps{theirs.addr(), 8, theirs.mr->lkey};
  ibv_send_wr pw = make_wr(IBV_WR_SEND, &ps, 1, 4);
  b.post(pw);  // lands in a.recv_cq
  bool got_send = false, got_recv = false;
  for (int i = 0; i < 2; ++i) {
    pollfd pfd{a.channel->fd, POLLIN, 0};
    REQUIRE(poll(&pfd, 1, 30000) == 1);
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    REQUIRE(ibv_get_cq_event(a.channel, &ev_cq, &ev_ctx) == 0);
    got_send |= ev_cq == a.cq;
    got_recv |= ev_cq == a.recv_cq;
    ibv_ack_cq_events(ev_cq, 1);
  }
  CHECK(got_send);
  CHECK(got_recv);
  ibv_wc wc{};
  CHECK(ibv_poll_cq(a.cq, 1, &wc) == 1);
  CHECK(ibv_poll_cq(a.recv_cq, 1, &wc) == 1);
  REQUIRE(b.wait().status == IBV_WC_SUCCESS);  // b's send, then b's receive
  REQUIRE(b.wait().status == IBV_WC_SUCCESS);
}

TEST_CASE("COMM_EST reaches the async fd when a QP still in RTR receives its first request") {
  Device da("rnicsim0"), db("rnicsim1");
  Endpoint a(da), b(db);
  a.to_rtr(b);
  b.to_rtr(a);
  a.to_rts();  // b stays in RTR
  Buffer src(da.pd, 256, kAllAccess), dst(db.pd, 256, kAllAccess);
  b.post_recv(dst, 0, 256, 1);
  ibv_sge sge{src.addr(), 16, src.mr->lkey};
  ibv_send_wr wr = make_wr(IBV_WR_SEND, &sge, 1, 1);
  a.post(wr);
  REQUIRE(b.wait().status == IBV_WC_SUCCESS);
  pollfd pfd{db.ctx->async_fd, POLLIN, 0};
  REQUIRE(poll(&pfd, 1, 30000) == 1);
  ibv_async_event ev{};
  REQUIRE(ibv_get_async_event(db.ctx, &ev) == 0);
  CHECK(ev.event_type == IBV_EVENT_COMM_EST);
  CHECK(ev.element.qp == b.qp);
  ibv_ack_async_event(&ev);
  REQUIRE(a.wait().status == IBV_WC_SUCCESS);
  b.to_rts();
}

TEST_CASE("the device nodes answer access() and its family as a kernel's 0666 cdevs do") {
  // UCX drops a device whose node fails access(path, R_OK | W_OK).
  for (const char* node : {"/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1",
                           "/dev/infiniband/rdma_cm"}) {
    INFO(node);
    CHECK(access(node, F_OK) == 0);
    CHECK(access(node, R_OK | W_OK) == 0);
    CHECK(faccessat(AT_FDCWD, node, R_OK | W_OK, 0) == 0);
    CHECK(faccessat(AT_FDCWD, node, R_OK | W_OK, AT_EACCESS) == 0);
    CHECK(euidaccess(node, R_OK | W_OK) == 0);
    CHECK(eaccess(node, W_OK) == 0);
    errno = 0;
    CHECK(access(node, X_OK) == -1);
    CHECK(errno == EACCES);
  }
  // Only the configured devices exist (RNICDV_UVERBS_DEVICES=2), and other paths are libc's.
  errno = 0;
  CHECK(access("/dev/infiniband/uverbs2", F_OK) == -1);
  CHECK(errno == ENOENT);
  CHECK(access("/", R_OK) == 0);
}

TEST_CASE("ibv_create_ah gets the destination MAC from the device, or a clear error") {
  Device d("rnicsim0");
  ibv_gid local{};
  REQUIRE(ibv_query_gid(d.ctx, 1, 3, &local) == 0);  // ::ffff:a.b.c.d, RoCE v2
  ibv_ah_attr a{};
  a.is_global = 1;
  a.port_num = 1;
  a.grh.sgid_index = 3;
  a.grh.hop_limit = 64;
  a.grh.dgid = local;
  errno = 0;
  ibv_ah* ah = ibv_create_ah(d.pd, &a);
  INFO("errno " << errno);
  REQUIRE(ah != nullptr);
  // The PD is busy while the AH lives, as with the kernel.
  CHECK(ibv_dealloc_pd(d.pd) == EBUSY);
  CHECK(ibv_destroy_ah(ah) == 0);

  // A link-local destination: refused with EINVAL (the reason goes to stderr with
  // RNICDV_UVERBS_LOG=1, as for every refused command).
  ibv_gid link_local{};
  REQUIRE(ibv_query_gid(d.ctx, 1, 0, &link_local) == 0);
  a.grh.dgid = link_local;
  errno = 0;
  CHECK(ibv_create_ah(d.pd, &a) == nullptr);
  CHECK(errno == EINVAL);
}

TEST_CASE("a source GID that is RoCE v1, empty or beyond the table is refused with the kernel's "
          "errno at RTR and at ibv_create_ah, never sent as RoCE v2") {
  Device d("rnicsim0");
  Endpoint e(d);
  // GID types as sysfs shows them: v1 at the even indexes, v2 at the odd ones.
  for (int idx : {0, 2}) {
    char type[32] = {};
    std::ifstream f(std::string("/sys/class/infiniband/rnicsim0/ports/1/gid_attrs/types/") +
                    std::to_string(idx));
    if (f) f.getline(type, sizeof type);
    INFO("index " << idx << ": " << type);
    if (f) CHECK(std::string(type) == "IB/RoCE v1");
  }
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  REQUIRE(ibv_modify_qp(e.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                      IBV_QP_ACCESS_FLAGS) == 0);
  ibv_ah_attr ah{};
  ah.is_global = 1;
  ah.port_num = 1;
  ah.grh.dgid = e.gid();  // IPv4-mapped, so only the source index is at fault
  ah.grh.hop_limit = 64;
  // Index 1 is the port's default link-local GID, which a device with an IPv4 address does not
  // hold on the fabric (run_pingpong_ipv6.sh sends from it on a device that does).
  for (auto [index, err] : {std::pair{0, EOPNOTSUPP}, std::pair{1, EOPNOTSUPP},
                            std::pair{2, EOPNOTSUPP},
                            std::pair{4, ENODATA}, std::pair{7, ENODATA}, std::pair{8, EINVAL},
                            std::pair{255, EINVAL}}) {
    INFO("source GID index " << index);
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = e.qp->qp_num;
    a.rq_psn = 1;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr = ah;
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(index);
    CHECK(ibv_modify_qp(e.qp, &a,
                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                            IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) ==
          err);
    ibv_qp_attr now{};
    ibv_qp_init_attr init{};
    REQUIRE(ibv_query_qp(e.qp, &now, IBV_QP_STATE, &init) == 0);
    CHECK(now.qp_state == IBV_QPS_INIT);  // nothing changed
    ibv_ah_attr h = ah;
    h.grh.sgid_index = static_cast<uint8_t>(index);
    errno = 0;
    ibv_ah* refused = ibv_create_ah(d.pd, &h);
    CHECK(refused == nullptr);
    // Beyond the table libmlx5 refuses by itself (it reads the GID's type first), with its
    // own errno; the command would get EINVAL.
    if (index < 8) CHECK(errno == err);
    if (refused) ibv_destroy_ah(refused);
  }
  // The RoCE v2 entry of the same address works.
  ah.grh.sgid_index = 3;
  ibv_ah* ok = ibv_create_ah(d.pd, &ah);
  CHECK(ok != nullptr);
  if (ok) CHECK(ibv_destroy_ah(ok) == 0);
}

namespace {
const char* const kXmitPackets[] = {"/sys/class/infiniband/rnicsim0/ports/1/counters/port_xmit_packets",
                                    "/sys/class/infiniband/rnicsim1/ports/1/counters/port_xmit_packets"};
uint64_t read_counter_fd(int fd) {
  char text[32] = {};
  REQUIRE(::lseek(fd, 0, SEEK_SET) == 0);
  const ssize_t n = ::read(fd, text, sizeof text - 1);
  REQUIRE(n > 0);
  return std::stoull(text);
}
}  // namespace

TEST_CASE("a port counter's sysfs file gives the device's figure afresh at each read from offset "
          "0, and its real /sys path resolves, as perftest's -W needs") {
  Pair p;
  int fds[2];
  uint64_t before = 0;
  for (int i = 0; i < 2; ++i) {
    char* resolved = ::realpath(kXmitPackets[i], nullptr);
    INFO(kXmitPackets[i]);
    REQUIRE(resolved != nullptr);
    CHECK(std::string(resolved).find("/infiniband/rnicsim" + std::to_string(i) +
                                     "/ports/1/counters/port_xmit_packets") != std::string::npos);
    std::free(resolved);
    fds[i] = ::open(kXmitPackets[i], O_RDONLY);
    REQUIRE(fds[i] >= 0);
    before += read_counter_fd(fds[i]);
  }
  Buffer src(p.da.pd, 4096, kAllAccess), dst(p.db.pd, 4096, kAllAccess);
  for (int round = 0; round < 10; ++round) {
    p.b.post_recv(dst, 0, 4096, round);
    ibv_sge sge{src.addr(), 64, src.mr->lkey};
    ibv_send_wr wr = make_wr(IBV_WR_SEND, &sge, 1, round);
    p.a.post(wr);
    REQUIRE(p.a.wait().status == IBV_WC_SUCCESS);
    REQUIRE(p.b.wait().status == IBV_WC_SUCCESS);
  }
  // The same descriptors, read again from the start: 10 SENDs and their ACKs went out.
  const uint64_t after = read_counter_fd(fds[0]) + read_counter_fd(fds[1]);
  CHECK(after >= before + 20);
  for (int fd : fds) ::close(fd);
}

TEST_CASE("a counter file's descriptor closed where the shim cannot see it is never rewritten "
          "once the number is another file's") {
  const int fd = ::open(kXmitPackets[0], O_RDONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::syscall(SYS_close, fd) == 0);  // as fclose of an fdopen'd stream closes inside libc
  char path[] = "/tmp/rnicdv-verbs-counter-XXXXXX";
  const int other = ::mkstemp(path);
  REQUIRE(other == fd);  // the lowest free number comes back
  const std::string text = "the application's own bytes\n";
  REQUIRE(::write(other, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  REQUIRE(::lseek(other, 0, SEEK_SET) == 0);
  char buf[64] = {};
  REQUIRE(::read(other, buf, sizeof buf - 1) == static_cast<ssize_t>(text.size()));
  CHECK(std::string(buf) == text);
  ::close(other);
  std::ifstream f(path);
  std::stringstream on_disk;
  on_disk << f.rdbuf();
  CHECK(on_disk.str() == text);
  ::unlink(path);
}

TEST_CASE("a UAR page mapped by a direct system call is the page the shim maps") {
  // UCX's memory hooks patch mmap, so libmlx5's UAR mappings reach the kernel on the command
  // descriptor without the shim's mmap. The descriptor's own pages are the UAR pages.
  Device d("rnicsim0");
  const int fd = d.ctx->cmd_fd;
  for (const long cmd : {0L, 2L, 3L}) {  // regular, write-combining, non-cached; page 0
    const off_t off = static_cast<off_t>(cmd << 8) * 4096;
    void* raw = reinterpret_cast<void*>(
        syscall(SYS_mmap, nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off));
    REQUIRE(raw != MAP_FAILED);
    void* seen = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off);
    REQUIRE(seen != MAP_FAILED);
    // Offset 0x400: no register of the page (doorbells are at 0x20 and from 0x800).
    auto* a = static_cast<volatile uint32_t*>(raw) + 0x100;
    auto* b = static_cast<volatile uint32_t*>(seen) + 0x100;
    *a = 0x5a5a0000u + static_cast<uint32_t>(cmd);
    CHECK(*b == 0x5a5a0000u + static_cast<uint32_t>(cmd));
    *a = 0;
    CHECK(syscall(SYS_munmap, raw, 4096) == 0);
    CHECK(munmap(seen, 4096) == 0);
  }
}

TEST_CASE("a duplicate of the command descriptor is the same device file") {
  Device d("rnicsim0");
  struct stat orig {}, dup_st {};
  REQUIRE(fstat(d.ctx->cmd_fd, &orig) == 0);
  const int fd2 = dup(d.ctx->cmd_fd);
  REQUIRE(fd2 >= 0);
  REQUIRE(fstat(fd2, &dup_st) == 0);
  CHECK(S_ISCHR(dup_st.st_mode));
  CHECK(dup_st.st_rdev == orig.st_rdev);
  // The original replaced by a duplicate of itself, then the duplicate closed: the open file,
  // and so the context, lives on through the one descriptor left.
  REQUIRE(dup2(fd2, d.ctx->cmd_fd) == d.ctx->cmd_fd);
  REQUIRE(close(fd2) == 0);
  ibv_pd* pd = ibv_alloc_pd(d.ctx);
  REQUIRE(pd != nullptr);
  CHECK(ibv_dealloc_pd(pd) == 0);
  const int fd3 = fcntl(d.ctx->cmd_fd, F_DUPFD_CLOEXEC, 100);
  REQUIRE(fd3 >= 100);
  REQUIRE(fstat(fd3, &dup_st) == 0);
  CHECK(S_ISCHR(dup_st.st_mode));
  CHECK(close(fd3) == 0);
}

TEST_CASE("verbs the simulated HCA does not implement fail with an error, not a crash") {
  Device d("rnicsim0");
  errno = 0;
  const std::string said =
      capture_stderr([&] { CHECK(ibv_alloc_mw(d.pd, IBV_MW_TYPE_1) == nullptr); });
  CHECK(errno == EOPNOTSUPP);
  CHECK(said.find("ALLOC_MW") != std::string::npos);
  CHECK(said.find("not implemented") != std::string::npos);
  CHECK(std::count(said.begin(), said.end(), '\n') == 1);
  ibv_cq* cq = ibv_create_cq(d.ctx, 16, nullptr, nullptr, 0);
  REQUIRE(cq);
  ibv_qp_init_attr init = qp_init(cq, cq, IBV_QPT_RAW_PACKET, 4, 1);
  errno = 0;
  const std::string raw = capture_stderr([&] { CHECK(ibv_create_qp(d.pd, &init) == nullptr); });
  CHECK(errno == EOPNOTSUPP);
  CHECK(raw.find("QP type 8") != std::string::npos);
  // The refusal names the command and the object: the QP and the PD it was to be made on.
  CHECK(raw.find("CREATE_QP: QP on PD ") != std::string::npos);
  // A CQ a QP does not use can go; the device is still usable afterwards.
  CHECK(ibv_destroy_cq(cq) == 0);
  // A PD with an MR is busy.
  Buffer b(d.pd, 64, IBV_ACCESS_LOCAL_WRITE);
  CHECK(ibv_dealloc_pd(d.pd) == EBUSY);
}

TEST_CASE("a missing feature is said once per reason, not once per object refused") {
  Device d("rnicsim0");
  ibv_pd* other = ibv_alloc_pd(d.ctx);
  REQUIRE(other);
  std::vector<uint8_t> buf(4096);
  const int on_demand = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND;
  // The same reason (on-demand paging) on two PDs, and on the first again: one line.
  const std::string said = capture_stderr([&] {
    for (ibv_pd* pd : {d.pd, other, d.pd}) {
      errno = 0;
      CHECK(ibv_reg_mr(pd, buf.data(), buf.size(), on_demand) == nullptr);
      CHECK(errno == EOPNOTSUPP);
    }
  });
  CHECK(std::count(said.begin(), said.end(), '\n') == 1);
  CHECK(said.find("REG_MR: MR on PD ") != std::string::npos);
  CHECK(said.find("on-demand") != std::string::npos);
  // Another reason on the same objects has its own line, once.
  const int local = IBV_ACCESS_LOCAL_WRITE;
  const uint64_t iova = reinterpret_cast<uintptr_t>(buf.data()) + 4096;
  const std::string other_reason = capture_stderr([&] {
    for (ibv_pd* pd : {d.pd, other}) {
      errno = 0;
      CHECK(ibv_reg_mr_iova(pd, buf.data(), buf.size(), iova, local) == nullptr);
      CHECK(errno == EOPNOTSUPP);
    }
  });
  CHECK(std::count(other_reason.begin(), other_reason.end(), '\n') == 1);
  CHECK(other_reason.find("an I/O virtual address") != std::string::npos);
  CHECK(ibv_dealloc_pd(other) == 0);
}

// The PD, CQ and QP structures libmlx5 allocated are never freed (the program drops them, as a
// crashing process would); meson runs this case on its own, without leak detection.
TEST_CASE("closing a context with live objects releases them and the device opens again",
          "[leaks_on_purpose]") {
  for (int i = 0; i < 3; ++i) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    REQUIRE(n >= 1);
    ibv_context* ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    REQUIRE(ctx);
    ibv_pd* pd = ibv_alloc_pd(ctx);
    REQUIRE(pd);
    ibv_cq* cq = ibv_create_cq(ctx, 8, nullptr, nullptr, 0);
    REQUIRE(cq);
    ibv_qp_init_attr init = qp_init(cq, cq, IBV_QPT_RC, 4, 1);
    REQUIRE(ibv_create_qp(pd, &init));
    // Nothing destroyed: closing the command descriptor ends them all, as in the kernel.
    CHECK(ibv_close_device(ctx) == 0);
  }
}

TEST_CASE("raw commands the shim does not know fail with the kernel's errno and one line") {
  Device d("rnicsim0");
  const int fd = d.ctx->cmd_fd;
  // An unknown write command: header {command, in_words, out_words}.
  const uint32_t cmd[2] = {45, 2};  // in_words = 2 (the 8-byte header), out_words = 0
  errno = 0;
  const std::string said = capture_stderr([&] { CHECK(write(fd, cmd, sizeof cmd) == -1); });
  CHECK(errno == EOPNOTSUPP);
  CHECK(said.find("unknown command (45) is not implemented") != std::string::npos);
  // A header whose length disagrees with the write.
  uint32_t bad[4] = {3, 7, 0, 0};  // ALLOC_PD claiming 28 bytes
  errno = 0;
  CHECK(write(fd, bad, sizeof bad) == -1);
  CHECK(errno == EINVAL);
  // The ioctl interface is absent, as on kernels before it, but for the one method that has
  // no write form (QUERY_CONTEXT, ibv_import_device), refused with the reason. The header is
  // read first: none at all is EFAULT.
  errno = 0;
  CHECK(ioctl(fd, RDMA_VERBS_IOCTL, nullptr) == -1);
  CHECK(errno == EFAULT);
  ib_uverbs_ioctl_hdr ih{};
  ih.length = sizeof ih;
  ih.object_id = UVERBS_OBJECT_PD;
  ih.method_id = UVERBS_METHOD_PD_DESTROY;
  errno = 0;
  CHECK(ioctl(fd, RDMA_VERBS_IOCTL, &ih) == -1);
  CHECK(errno == ENOTTY);
  ih.object_id = UVERBS_OBJECT_DEVICE;
  ih.method_id = UVERBS_METHOD_QUERY_CONTEXT;
  errno = 0;
  ib_uverbs_ioctl_hdr* query = &ih;  // clang: a struct with a flexible array is not captured
  const std::string refused =
      capture_stderr([&] { CHECK(ioctl(fd, RDMA_VERBS_IOCTL, query) == -1); });
  CHECK(errno == EOPNOTSUPP);
  CHECK(refused.find("QUERY_CONTEXT (ibv_import_device)") != std::string::npos);
  errno = 0;
  CHECK(ioctl(fd, 0x1234, nullptr) == -1);  // not the verbs ioctl at all
  CHECK(errno == ENOTTY);
  // A UAR page beyond the context's, and an mmap command that does not exist.
  errno = 0;
  CHECK(mmap(nullptr, 4096, PROT_WRITE, MAP_SHARED, fd, 200 * 4096) == MAP_FAILED);
  CHECK(errno == EINVAL);
  errno = 0;
  CHECK(mmap(nullptr, 4096, PROT_WRITE, MAP_SHARED, fd, (9 << 8) * 4096) == MAP_FAILED);
  CHECK(errno == EINVAL);
  // The context still works.
  ibv_pd* pd = ibv_alloc_pd(d.ctx);
  REQUIRE(pd);
  CHECK(ibv_dealloc_pd(pd) == 0);
}

namespace {

// Two pages: the first read-write, the second inaccessible (a guard), for pointers that end
// where a mapping ends. The guard is PROT_NONE rather than unmapped: a hole would be taken by
// the next one-page mmap of any thread, and the shim would then rightly write through it.
struct GuardedPage {
  uint8_t* base = nullptr;
  GuardedPage() {
    void* p = mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    base = static_cast<uint8_t*>(p);
    REQUIRE(mprotect(base + 4096, 4096, PROT_NONE) == 0);
  }
  ~GuardedPage() { munmap(base, 8192); }
  uint8_t* end() const { return base + 4096; }
};

// Access flags as ints: ibv_reg_mr is a macro that mixes them with another enum.
constexpr int kLocalWrite = IBV_ACCESS_LOCAL_WRITE;
constexpr int kRemoteRead = IBV_ACCESS_REMOTE_READ;

// ALLOC_PD as libibverbs writes it: header, then the response address.
struct AllocPdCmd {
  uint32_t command = IB_USER_VERBS_CMD_ALLOC_PD;
  uint16_t in_words = 4;   // 16 bytes
  uint16_t out_words = 1;  // ib_uverbs_alloc_pd_resp: 4 bytes
  uint64_t response = 0;
};

}  // namespace

TEST_CASE("bad user pointers in commands get EFAULT, as from the kernel, and nothing changes") {
  Device d("rnicsim0");
  const int fd = d.ctx->cmd_fd;
  GuardedPage g;

  // A response address that is tiny, unmapped, read-only, or runs past its mapping.
  void* ro = mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(ro != MAP_FAILED);
  const uint64_t bad_responses[] = {0x10, reinterpret_cast<uintptr_t>(g.end()),
                                    reinterpret_cast<uintptr_t>(ro),
                                    reinterpret_cast<uintptr_t>(g.end() - 2)};
  for (uint64_t resp : bad_responses) {
    INFO("response at " << std::hex << resp);
    AllocPdCmd c;
    c.response = resp;
    errno = 0;
    CHECK(write(fd, &c, sizeof c) == -1);
    CHECK(errno == EFAULT);
  }
  munmap(ro, 4096);

  // The write() buffer itself: unmapped, or a command whose last bytes lie past its page.
  errno = 0;
  CHECK(write(fd, g.end(), 16) == -1);
  CHECK(errno == EFAULT);
  AllocPdCmd c;
  uint32_t resp_words[4] = {};
  c.response = reinterpret_cast<uintptr_t>(resp_words);
  std::memcpy(g.end() - 8, &c, 8);  // only the header fits before the guard page
  errno = 0;
  CHECK(write(fd, g.end() - 8, sizeof c) == -1);
  CHECK(errno == EFAULT);
  // A short write at the very end of the page: the shim reads only what was written.
  errno = 0;
  CHECK(write(fd, g.end() - 4, 4) == -1);
  CHECK(errno == EINVAL);
  // A header alone, its words counting only itself: the command that answers has no room for
  // its response address, and nothing past the 8 bytes is read (ASan checks this).
  const uint32_t header_only[2] = {IB_USER_VERBS_CMD_ALLOC_PD, 2 | 1u << 16};
  errno = 0;
  CHECK(write(fd, header_only, sizeof header_only) == -1);
  CHECK(errno == EINVAL);

  // REG_MR of a range that is not mapped, or only partly.
  ibv_pd* pd = ibv_alloc_pd(d.ctx);
  REQUIRE(pd);
  errno = 0;
  CHECK(ibv_reg_mr(pd, g.end(), 4096, kLocalWrite) == nullptr);
  CHECK(errno == EFAULT);
  errno = 0;
  CHECK(ibv_reg_mr(pd, g.end() - 4096, 8192, kLocalWrite) == nullptr);
  CHECK(errno == EFAULT);
  // A read-only buffer can be registered for remote reads only.
  void* rop = mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(rop != MAP_FAILED);
  errno = 0;
  CHECK(ibv_reg_mr(pd, rop, 4096, kLocalWrite) == nullptr);
  CHECK(errno == EFAULT);
  ibv_mr* mr = ibv_reg_mr(pd, rop, 4096, kRemoteRead);
  CHECK(mr);
  if (mr) CHECK(ibv_dereg_mr(mr) == 0);
  munmap(rop, 4096);

  // The context still works, and a good MR registers.
  ibv_mr* ok = ibv_reg_mr(pd, g.base, 4096, kLocalWrite);
  REQUIRE(ok);
  CHECK(ibv_dereg_mr(ok) == 0);
  CHECK(ibv_dealloc_pd(pd) == 0);
}

// The shim zero-fills a response to the length the command gives, as the kernel's
// uverbs_response does, and checks only that the whole range is mapped and writable (through
// process_vm_writev, which ASan does not see). A guard that is a hole in the address space
// stops such a write only until some other mapping takes the hole; one that stays mapped
// PROT_NONE stops it for good (the shim_commands fuzzer's arena once corrupted ASan's heap
// metadata this way).
TEST_CASE("a response that runs past a guard page gets EFAULT even after other pages are mapped") {
  Device d("rnicsim0");
  GuardedPage g;
  // One-page mappings made after the guard, as libmlx5's UAR pages or a sanitizer's buffers
  // are: none may land on the guard.
  std::vector<void*> pages;
  for (int i = 0; i < 64; ++i) {
    void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    pages.push_back(p);
    CHECK(p != static_cast<void*>(g.end()));
  }
  struct {
    uint32_t command = IB_USER_VERBS_CMD_QUERY_DEVICE;
    uint16_t in_words = 4;                    // 16 bytes
    uint16_t out_words = (8 + 4096 + 8) / 4;  // from 8 bytes before the guard to past it
    uint64_t response = 0;
  } c;
  c.response = reinterpret_cast<uintptr_t>(g.end() - 8);
  errno = 0;
  CHECK(write(d.ctx->cmd_fd, &c, sizeof c) == -1);
  CHECK(errno == EFAULT);
  for (void* p : pages) munmap(p, 4096);
}

TEST_CASE("read() on the command descriptor answers EINVAL, as the kernel's cdev does") {
  Device d("rnicsim0");
  char buf[64];
  errno = 0;
  CHECK(read(d.ctx->cmd_fd, buf, sizeof buf) == -1);
  CHECK(errno == EINVAL);
}

TEST_CASE("the rdma_cm device answers bad pointers with EFAULT and read() with EINVAL") {
  const int fd = open("/dev/infiniband/rdma_cm", O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  GuardedPage g;
  struct {
    rdma_ucm_cmd_hdr hdr;
    rdma_ucm_create_id cmd;
  } create{};
  create.hdr.cmd = RDMA_USER_CM_CMD_CREATE_ID;
  create.hdr.in = sizeof create.cmd;
  create.hdr.out = sizeof(rdma_ucm_create_id_resp);
  create.cmd.ps = RDMA_PS_TCP;
  create.cmd.qp_type = IBV_QPT_RC;
  create.cmd.response = 0x10;
  errno = 0;
  CHECK(write(fd, &create, sizeof create) == -1);
  CHECK(errno == EFAULT);
  create.cmd.response = reinterpret_cast<uintptr_t>(g.end() - 2);  // runs past the mapping
  errno = 0;
  CHECK(write(fd, &create, sizeof create) == -1);
  CHECK(errno == EFAULT);
  errno = 0;
  CHECK(write(fd, g.end(), sizeof create) == -1);  // the command itself is unmapped
  CHECK(errno == EFAULT);

  // Nothing was created by the refused commands: the first real ID is the only one, and
  // GET_EVENT into a bad buffer takes no event.
  rdma_ucm_create_id_resp resp{};
  create.cmd.response = reinterpret_cast<uintptr_t>(&resp);
  REQUIRE(write(fd, &create, sizeof create) == static_cast<ssize_t>(sizeof create));
  struct {
    rdma_ucm_cmd_hdr hdr;
    rdma_ucm_get_event cmd;
  } get{};
  get.hdr.cmd = RDMA_USER_CM_CMD_GET_EVENT;
  get.hdr.in = sizeof get.cmd;
  get.hdr.out = sizeof(rdma_ucm_event_resp);
  get.cmd.response = 0x10;
  errno = 0;
  CHECK(write(fd, &get, sizeof get) == -1);
  CHECK(errno == EFAULT);
  struct {
    rdma_ucm_cmd_hdr hdr;
    rdma_ucm_destroy_id cmd;
  } destroy{};
  rdma_ucm_destroy_id_resp dresp{};
  destroy.hdr.cmd = RDMA_USER_CM_CMD_DESTROY_ID;
  destroy.hdr.in = sizeof destroy.cmd;
  destroy.hdr.out = sizeof dresp;
  destroy.cmd.id = resp.id;
  destroy.cmd.response = reinterpret_cast<uintptr_t>(&dresp);
  CHECK(write(fd, &destroy, sizeof destroy) == static_cast<ssize_t>(sizeof destroy));
  CHECK(dresp.events_reported == 0);
  errno = 0;
  CHECK(write(fd, &destroy, sizeof destroy) == -1);  // gone
  CHECK(errno == ENOENT);

  char buf[32];
  errno = 0;
  CHECK(read(fd, buf, sizeof buf) == -1);
  CHECK(errno == EINVAL);
  CHECK(close(fd) == 0);
}

TEST_CASE(
    "rdma_cm IDs of QP types the model lacks are refused by name; a short response is ENOSPC") {
  const int fd = open("/dev/infiniband/rdma_cm", O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  rdma_ucm_create_id_resp resp{};
  struct {
    rdma_ucm_cmd_hdr hdr;
    rdma_ucm_create_id cmd;
  } create{};
  create.hdr.cmd = RDMA_USER_CM_CMD_CREATE_ID;
  create.hdr.in = sizeof create.cmd;
  create.hdr.out = sizeof resp;
  create.cmd.ps = RDMA_PS_IB;
  create.cmd.response = reinterpret_cast<uintptr_t>(&resp);
  // As rdma_create_ep passes XRC (librdmacm's rdma_xclient and rdma_xserver), and UD.
  const std::pair<uint8_t, const char*> refused[] = {
      {IBV_QPT_XRC_SEND, "CREATE_ID: new id: an XRC ID (IBV_QPT_XRC_SEND) in the IB port space is "
                         "not supported"},
      {IBV_QPT_XRC_RECV, "CREATE_ID: new id: an XRC ID (IBV_QPT_XRC_RECV) in the IB port space is "
                         "not supported"},
      {IBV_QPT_UD, "CREATE_ID: new id: a UD ID (IBV_QPT_UD) in the IB port space is not supported"},
  };
  for (const auto& [type, line] : refused) {
    INFO("QP type " << int{type});
    create.cmd.qp_type = type;
    errno = 0;
    const std::string said =
        capture_stderr([&] { CHECK(write(fd, &create, sizeof create) == -1); });
    CHECK(errno == EINVAL);
    CHECK(said.find(line) != std::string::npos);
    CHECK(std::count(said.begin(), said.end(), '\n') == 1);
  }
  // The table's response size: a CREATE_ID response shorter than rdma_ucm_create_id_resp.
  create.cmd.qp_type = IBV_QPT_RC;
  create.hdr.out = sizeof resp - 1;
  errno = 0;
  CHECK(write(fd, &create, sizeof create) == -1);
  CHECK(errno == ENOSPC);
  create.hdr.out = sizeof resp;
  CHECK(write(fd, &create, sizeof create) == static_cast<ssize_t>(sizeof create));
  CHECK(close(fd) == 0);
}

TEST_CASE("a CQ ring the application write-protects gives CQ_ERR and QP_FATAL, not a crash") {
  Pair p;
  Buffer src(p.da.pd, 256, kAllAccess), dst(p.db.pd, 256, kAllAccess);
  // libmlx5's CQ ring, as mlx5dv describes it: page-aligned, whole pages.
  mlx5dv_cq dv{};
  mlx5dv_obj obj{};
  obj.cq.in = p.a.cq;
  obj.cq.out = &dv;
  REQUIRE(mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ) == 0);
  const size_t bytes = size_t{dv.cqe_cnt} * dv.cqe_size;
  REQUIRE(reinterpret_cast<uintptr_t>(dv.buf) % 4096 == 0);
  REQUIRE(bytes % 4096 == 0);
  REQUIRE(mprotect(dv.buf, bytes, PROT_READ) == 0);

  ibv_sge sge{src.addr(), 64, src.mr->lkey};
  ibv_send_wr wr = make_wr(IBV_WR_RDMA_WRITE, &sge, 1, 1);
  wr.wr.rdma.remote_addr = dst.addr();
  wr.wr.rdma.rkey = dst.mr->rkey;
  p.a.post(wr);
  bool cq_err = false, qp_fatal = false;
  while (!cq_err || !qp_fatal) {
    pollfd pfd{p.da.ctx->async_fd, POLLIN, 0};
    REQUIRE(poll(&pfd, 1, 30000) == 1);
    ibv_async_event ev{};
    REQUIRE(ibv_get_async_event(p.da.ctx, &ev) == 0);
    if (ev.event_type == IBV_EVENT_CQ_ERR) {
      CHECK(ev.element.cq == p.a.cq);
      cq_err = true;
    } else if (ev.event_type == IBV_EVENT_QP_FATAL) {
      CHECK(ev.element.qp == p.a.qp);
      qp_fatal = true;
    }
    ibv_ack_async_event(&ev);
  }
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  REQUIRE(ibv_query_qp(p.a.qp, &attr, IBV_QP_STATE, &init) == 0);
  CHECK(attr.qp_state == IBV_QPS_ERR);
  REQUIRE(mprotect(dv.buf, bytes, PROT_READ | PROT_WRITE) == 0);
}

// LeakSanitizer's leak check at a forked child's exit would report what only the parent's
// threads referenced (their stacks are not in the child) and, without those threads, can
// itself stall: the children below exit without it. (LSan calls this hook if the program
// defines it; in other builds nothing does.)
volatile int g_forked_child = 0;
extern "C" int __lsan_is_turned_off() {
  return g_forked_child;
}

// fork() while the devices are busy: a device thread may hold a lock of the library at the
// fork, and the child has no such thread. A child that only exits must never wait for it.
TEST_CASE("a child forked while the devices are busy exits at once") {
  Pair p;
  Buffer src(p.da.pd, 4096, kAllAccess), dst(p.db.pd, 4096, kAllAccess);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> writes{0};
  std::thread traffic([&] {
    ibv_sge sge{src.addr(), 4096, src.mr->lkey};
    while (!stop.load()) {
      ibv_send_wr wr = make_wr(IBV_WR_RDMA_WRITE, &sge, 1, 9);
      wr.wr.rdma.remote_addr = dst.addr();
      wr.wr.rdma.rkey = dst.mr->rkey;
      p.a.post(wr);
      if (p.a.wait().status != IBV_WC_SUCCESS) break;
      writes.fetch_add(1);
    }
  });
  int hangs = 0;
  for (int i = 0; i < 200; ++i) {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      g_forked_child = 1;
      std::exit(0);
    }
    // Its exit status, or -1 if it has not ended within 5 s (then killed and reaped).
    const int status = rnicdv::test::Child::adopt(child).wait(std::chrono::seconds(5));
    if (status < 0) ++hangs;
    INFO("child " << i);
    CHECK(status <= 0);  // exited 0, or counted as a hang
  }
  stop = true;
  traffic.join();
  CHECK(hangs == 0);
  CHECK(writes.load() > 0);
}

// A forked child shares the parent's uverbs file but can use nothing of it, as with the
// kernel's uverbs: commands are refused with EACCES (ib_safe_file_access), and the UAR pages
// are not inherited (VM_DONTCOPY), so a doorbell the child rings ends it with SIGSEGV instead
// of reaching the parent's QP. The child opens devices of its own, and they work. The
// parent's connection carries only the parent's messages.
TEST_CASE("a forked child's verbs on inherited objects are refused and never reach the wire; "
          "its own devices work") {
  Pair p;
  Buffer src(p.da.pd, 4096, kAllAccess), dst(p.db.pd, 8192, kAllAccess);
  std::memset(src.bytes.data(), 0xc1, 2048);
  std::memset(src.bytes.data() + 2048, 0xd2, 2048);
  p.b.post_recv(dst, 0, 4096, 1);
  p.b.post_recv(dst, 4096, 4096, 2);

  const pid_t commands = ::fork();
  REQUIRE(commands >= 0);
  if (commands == 0) {
    g_forked_child = 1;
    int code = 0;
    errno = 0;
    if (ibv_reg_mr(p.da.pd, src.bytes.data(), 4096, kAllAccess) != nullptr || errno != EACCES)
      code |= 1;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    if (ibv_modify_qp(p.a.qp, &a, IBV_QP_STATE) != EACCES) code |= 2;
    if (ibv_dereg_mr(src.mr) != EACCES) code |= 4;
    // Devices of its own work: the shim's tables are the child's, its fabric a new one.
    {
      Pair own;
      Buffer s(own.da.pd, 4096, kAllAccess), d(own.db.pd, 4096, kAllAccess);
      std::memset(s.bytes.data(), 0x3c, 64);
      own.b.post_recv(d, 0, 4096, 5);
      ibv_sge one{s.addr(), 64, s.mr->lkey};
      ibv_send_wr w = make_wr(IBV_WR_SEND, &one, 1, 6);
      own.a.post(w);
      if (own.a.wait().status != IBV_WC_SUCCESS) code |= 8;
      const ibv_wc got = own.b.wait();
      if (got.status != IBV_WC_SUCCESS || got.byte_len != 64 || d.bytes[63] != 0x3c) code |= 16;
    }
    ::_exit(code);
  }
  CHECK(rnicdv::test::Child::adopt(commands).wait(std::chrono::seconds(30)) == 0);

  const pid_t poster = ::fork();
  REQUIRE(poster >= 0);
  if (poster == 0) {
    g_forked_child = 1;
    ::signal(SIGSEGV, SIG_DFL);  // the test framework's handler would report it as a failure
    ibv_sge sge{src.addr(), 100, src.mr->lkey};
    ibv_send_wr wr = make_wr(IBV_WR_SEND, &sge, 1, 77);
    ibv_send_wr* bad = nullptr;
    (void)ibv_post_send(p.a.qp, &wr, &bad);  // the doorbell store faults: no UAR page here
    ::_exit(0);
  }
  CHECK(rnicdv::test::Child::adopt(poster).wait(std::chrono::seconds(30)) == 128 + SIGSEGV);

  // The parent's SEND is the one message b receives, and the parent's QP still works.
  ibv_sge sge{src.addr(2048), 100, src.mr->lkey};
  ibv_send_wr wr = make_wr(IBV_WR_SEND, &sge, 1, 9);
  p.a.post(wr);
  ibv_wc c = p.a.wait();
  REQUIRE(c.status == IBV_WC_SUCCESS);
  CHECK(c.wr_id == 9);
  ibv_wc r = p.b.wait();
  REQUIRE(r.status == IBV_WC_SUCCESS);
  CHECK(r.wr_id == 1);
  CHECK(r.byte_len == 100);
  CHECK(dst.bytes[0] == 0xd2);
  CHECK(dst.bytes[99] == 0xd2);
  ibv_wc none{};
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(ibv_poll_cq(p.b.cq, 1, &none) == 0);
}
