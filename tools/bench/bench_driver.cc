// SPDX-License-Identifier: BSD-3-Clause
// rnicdv-bench-driver: the driver's own costs on simulated HCA memory, each beside a baseline
// measured in the same run (docs/performance.md).
//
//   post    post_write_1sge, post_send_inline_64, post_batch_32, post_read, post_atomic_fa,
//           each through post_send and through its typed call (*_typed): ns per post (median
//           of repetitions) against the same stores written by hand;
//   flush   flush_in_place_N and flush_shadow_N, N = 1, 64, 4096: from the device's move to
//           RTS to the doorbell written and RTS published, against N = 1 (in place) and
//           memcpy of the same bytes (shadow);
//   poll    poll_1 and poll_batch_16, through poll() and the lean poll_each (*_lean): ns per
//           CQE decoded against an owner-bit check plus a field load;
//   memory  heap bytes per QP, per CQ and per simulated device;
//   scale   poll() per CQE with 64 and 1024 QPs on one CQ against one QP, and heap bytes per
//           connected QP at 1024 QPs against 32.
//
// The device engine is paused (or, for polls, not running), so only the driver's work is
// timed. Prints a JSON array of records (bench_util.h) on stdout.
//
// Options: --smoke (a few iterations), --callgrind (count instructions of one repetition per
// case under callgrind; no timing), --only=post|flush|poll|memory|scale (repeatable).
#include <endian.h>
#include <infiniband/mlx5dv.h>
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "bench_sim.h"
#include "bench_util.h"
#include "rnicdv/detail/qp_core.h"
#include "rnicdv/doorbell/barrier.h"
#include "rnicdv/doorbell/mmio.h"
#include "rnicdv/rnicdv.h"
#include "rnicdv/sim/sim.h"

using namespace rnicdv;
using namespace rnicdv::bench;

namespace {

// ---- The baseline: the stores of a post, written by hand ---------------------------------------

// What the hand-written post needs: the same ring, doorbell record and register the driver
// uses, taken from the device's view of the QP.
struct HandQp {
  uint8_t* sq = nullptr;
  uint32_t mask = 0;  // bb_count - 1
  uint32_t qpn = 0;
  __be32* dbrec = nullptr;
  uint8_t* reg = nullptr;
  uint32_t bf_size = 0;
  uint32_t bf_offset = 0;
  uint32_t pi = 0;

  explicit HandQp(detail::QpCore& core) {
    const hw::QpView& v = core.hw_qp->view();
    sq = static_cast<uint8_t*>(v.dv.sq.buf);
    mask = v.dv.sq.wqe_cnt - 1;
    qpn = v.qpn;
    dbrec = v.dv.dbrec;
    reg = static_cast<uint8_t*>(v.dv.bf.reg);
    bf_size = v.dv.bf.size;
  }

  uint8_t* bb(uint32_t i) const { return sq + (size_t{i & mask} << 6); }

  static void put_ctrl(uint8_t* w, uint32_t pi, uint8_t opcode, uint32_t qpn, uint32_t ds,
                       uint8_t fm_ce_se) {
    const uint32_t w0 = htobe32(((pi & 0xffff) << 8) | opcode);
    const uint32_t w1 = htobe32((qpn << 8) | ds);
    const uint32_t w2 = static_cast<uint32_t>(fm_ce_se) << 24;  // signature, 0, 0, fm_ce_se
    const uint32_t w3 = 0;
    std::memcpy(w + 0, &w0, 4);
    std::memcpy(w + 4, &w1, 4);
    std::memcpy(w + 8, &w2, 4);
    std::memcpy(w + 12, &w3, 4);
  }
  static void put_raddr(uint8_t* s, uint64_t raddr, uint32_t rkey) {
    const uint64_t a = htobe64(raddr);
    const uint32_t k = htobe32(rkey), z = 0;
    std::memcpy(s, &a, 8);
    std::memcpy(s + 8, &k, 4);
    std::memcpy(s + 12, &z, 4);
  }
  static void put_data(uint8_t* s, uint32_t len, uint32_t lkey, uint64_t addr) {
    const uint32_t l = htobe32(len), k = htobe32(lkey);
    const uint64_t a = htobe64(addr);
    std::memcpy(s, &l, 4);
    std::memcpy(s + 4, &k, 4);
    std::memcpy(s + 8, &a, 8);
  }

  // DBR store, sfence, one 8-byte register store of ctrl bytes 0..7, sfence.
  void ring_db(const uint8_t* last) {
    asm volatile("" ::: "memory");
    __atomic_store_n(&dbrec[MLX5_SND_DBR], htobe32(pi & 0xffff), __ATOMIC_RELEASE);
    asm volatile("sfence" ::: "memory");
    uint64_t head;
    std::memcpy(&head, last, 8);
    __atomic_store_n(reinterpret_cast<uint64_t*>(static_cast<void*>(reg)), head, __ATOMIC_RELAXED);
    asm volatile("sfence" ::: "memory");
  }

  // ctrl + raddr + data (WRITE, READ) at pi; returns the WQE.
  uint8_t* rdma_wqe(const SendWr& wr, uint8_t opcode) {
    uint8_t* w = bb(pi);
    put_raddr(w + 16, wr.remote_addr, wr.rkey);
    put_data(w + 32, wr.sg_list->length, wr.sg_list->lkey, wr.sg_list->addr);
    put_ctrl(w, pi, opcode, qpn, 3, static_cast<uint8_t>((wr.flags.bits() & 1) << 3));
    pi += 1;
    return w;
  }
};

// ---- Post path ---------------------------------------------------------------------------------

constexpr uint32_t kOps = 64;  // posts per repetition; the SQ is retired between repetitions

void post_cases(const Options& o, std::vector<Record>* out) {
  SimPair s;
  s.hw_a->pause();

  auto make = [&](doorbell::DoorbellMode mode, uint32_t inline_bytes) {
    QpConfig config;
    config.threading = Threading::single;
    config.doorbell = mode;
    config.caps.max_send_wr = 1024;
    config.caps.max_send_sge = 1;
    config.caps.max_inline_data = inline_bytes;
    return connect(s, config, 1024, false);
  };
  // The BlueFlame QP first: it gets a register of its own.
  Conn bf = make(doorbell::DoorbellMode::bf, 64);
  Conn db = make(doorbell::DoorbellMode::db, 0);
  if (bf.qp->doorbell_mode() != doorbell::DoorbellMode::bf) fail("no BlueFlame register");

  const Sge sge8{s.mr_a->addr(), 8, s.mr_a->lkey()};
  const Sge sge64{s.mr_a->addr() + 64, 64, s.mr_a->lkey()};
  std::memset(s.buf_a.data(), 0x5a, 256);

  auto retire = [](Conn& c) {
    detail::QpCore& core = *c.qp->core();
    core.sq_tail.store(core.sq_pi, std::memory_order_release);
  };

  // One WR per post, signaled, a doorbell each: `post(qp, wr)` posts it, through post_send
  // (the generic path) or a typed call. `post` and `hand` are closure types, so that each
  // inlines into its loop as an application's post would.
  auto single_with = [&](const char* name, const char* base_name, SendWr wr, Conn& c, auto post,
                         auto hand) {
    auto hq = std::make_shared<HandQp>(*c.qp->core());
    auto wrp = std::make_shared<SendWr>(wr);
    QueuePair* qp = &*c.qp;
    measure({name, base_name, "ns/post", kOps,
             [&c, &retire] { retire(c); },
             [qp, wrp, post] {
               for (uint32_t i = 0; i < kOps; ++i) {
                 wrp->wr_id = i;
                 if (post(*qp, *wrp) != Errc::ok) [[unlikely]]
                   fail(std::string("post failed"));
               }
             },
             [hq, wrp, hand] {
               hq->pi = 0;
               for (uint32_t i = 0; i < kOps; ++i) {
                 wrp->wr_id = i;
                 hand(*hq, *wrp);
               }
             }},
            o, out);
  };
  auto single = [&](const char* name, const char* base_name, SendWr wr, Conn& c, auto hand) {
    single_with(name, base_name, wr, c,
                [](QueuePair& qp, const SendWr& w) { return qp.post_send(w); }, hand);
  };

  {
    SendWr wr;
    wr.opcode = WrOpcode::rdma_write;
    wr.flags = send_flags::signaled;
    wr.sg_list = &sge8;
    wr.num_sge = 1;
    wr.remote_addr = s.mr_b->addr();
    wr.rkey = s.mr_b->rkey();
    auto hand_write = [](HandQp& h, const SendWr& w) {
      h.ring_db(h.rdma_wqe(w, MLX5_OPCODE_RDMA_WRITE));
    };
    auto hand_read = [](HandQp& h, const SendWr& w) {
      h.ring_db(h.rdma_wqe(w, MLX5_OPCODE_RDMA_READ));
    };
    single("post_write_1sge", "hand_write_1sge", wr, db, hand_write);
    single_with("post_write_typed", "hand_write_1sge", wr, db,
                [](QueuePair& qp, const SendWr& w) {
                  return qp.post_write(w.wr_id, *w.sg_list, w.remote_addr, w.rkey,
                                       send_flags::signaled);
                },
                hand_write);
    wr.opcode = WrOpcode::rdma_read;
    single("post_read", "hand_read", wr, db, hand_read);
    single_with("post_read_typed", "hand_read", wr, db,
                [](QueuePair& qp, const SendWr& w) {
                  return qp.post_read(w.wr_id, *w.sg_list, w.remote_addr, w.rkey,
                                      send_flags::signaled);
                },
                hand_read);
  }
  {
    SendWr wr;
    wr.opcode = WrOpcode::send;
    wr.flags = send_flags::signaled | send_flags::inline_data;
    wr.sg_list = &sge64;
    wr.num_sge = 1;
    // ctrl, then a 4-byte inline header, 64 payload bytes and 12 zero bytes: DS 6, 2 BBs;
    // BlueFlame copy of both blocks with the register's halves alternating.
    auto hand_inline = [](HandQp& h, const SendWr& w) {
      uint8_t* q = h.bb(h.pi);
      const uint32_t len = w.sg_list->length;
      const uint32_t hdr = htobe32(len | MLX5_INLINE_SEG);
      std::memcpy(q + 16, &hdr, 4);
      std::memcpy(q + 20, reinterpret_cast<const void*>(static_cast<uintptr_t>(w.sg_list->addr)),
                  64);
      std::memset(q + 84, 0, 12);
      HandQp::put_ctrl(q, h.pi, MLX5_OPCODE_SEND, h.qpn, 6, static_cast<uint8_t>((w.flags.bits() & 1) << 3));
      h.pi += 2;
      asm volatile("" ::: "memory");
      __atomic_store_n(&h.dbrec[MLX5_SND_DBR], htobe32(h.pi & 0xffff), __ATOMIC_RELEASE);
      asm volatile("sfence" ::: "memory");
      wqe::SqRing ring{h.sq, h.mask + 1};
      doorbell::bf_copy(h.reg + h.bf_offset, q, 128, ring);
      asm volatile("sfence" ::: "memory");
      h.bf_offset ^= h.bf_size;
    };
    single("post_send_inline_64", "hand_send_inline_64", wr, bf, hand_inline);
    single_with("post_send_inline_64_typed", "hand_send_inline_64", wr, bf,
                [](QueuePair& qp, const SendWr& w) {
                  return qp.post_message_inline(
                      w.wr_id, reinterpret_cast<const void*>(static_cast<uintptr_t>(w.sg_list->addr)),
                      64, send_flags::signaled);
                },
                hand_inline);
  }
  {
    const Sge sge8a{s.mr_a->addr() + 8, 8, s.mr_a->lkey()};
    SendWr wr;
    wr.opcode = WrOpcode::atomic_fetch_add;
    wr.flags = send_flags::signaled;
    wr.sg_list = &sge8a;
    wr.num_sge = 1;
    wr.remote_addr = s.mr_b->addr() + 64;
    wr.rkey = s.mr_b->rkey();
    wr.compare_add = 1;
    // ctrl + raddr + atomic + data: DS 4, one BB.
    auto hand_fa = [](HandQp& h, const SendWr& w) {
      uint8_t* q = h.bb(h.pi);
      HandQp::put_raddr(q + 16, w.remote_addr, w.rkey);
      const uint64_t add = htobe64(w.compare_add), zero = 0;
      std::memcpy(q + 32, &add, 8);
      std::memcpy(q + 40, &zero, 8);
      HandQp::put_data(q + 48, w.sg_list->length, w.sg_list->lkey, w.sg_list->addr);
      HandQp::put_ctrl(q, h.pi, MLX5_OPCODE_ATOMIC_FA, h.qpn, 4,
                       static_cast<uint8_t>((w.flags.bits() & 1) << 3));
      h.pi += 1;
      h.ring_db(q);
    };
    single("post_atomic_fa", "hand_atomic_fa", wr, db, hand_fa);
    single_with("post_atomic_fa_typed", "hand_atomic_fa", wr, db,
                [](QueuePair& qp, const SendWr& w) {
                  return qp.post_fetch_add(w.wr_id, *w.sg_list, w.remote_addr, w.rkey,
                                           w.compare_add, send_flags::signaled);
                },
                hand_fa);
  }
  {
    // 32 WRITEs, only the last signaled, one post_send call and one doorbell.
    constexpr uint32_t kBatch = 32;
    auto wrs = std::make_shared<std::vector<SendWr>>(kBatch);
    for (uint32_t i = 0; i < kBatch; ++i) {
      SendWr& w = (*wrs)[i];
      w.opcode = WrOpcode::rdma_write;
      w.flags = i + 1 == kBatch ? send_flags::signaled : 0;
      w.sg_list = &sge8;
      w.num_sge = 1;
      w.remote_addr = s.mr_b->addr() + 8 * i;
      w.rkey = s.mr_b->rkey();
      w.wr_id = i;
    }
    auto hq = std::make_shared<HandQp>(*db.qp->core());
    QueuePair* qp = &*db.qp;
    constexpr uint32_t kBatches = 2;  // 64 posts per repetition
    auto hand_batch = [hq, wrs] {
      hq->pi = 0;
      for (uint32_t b = 0; b < kBatches; ++b) {
        for (const SendWr& w : *wrs) hq->rdma_wqe(w, MLX5_OPCODE_RDMA_WRITE);
        hq->ring_db(hq->bb(hq->pi - 1));
      }
    };
    measure({"post_batch_32", "hand_batch_32", "ns/post", kBatch * kBatches,
             [&db, &retire] { retire(db); },
             [qp, wrs] {
               for (uint32_t b = 0; b < kBatches; ++b)
                 if (qp->post_send(std::span<const SendWr>(*wrs)) != Errc::ok) [[unlikely]]
                   fail("post_send failed");
             },
             hand_batch},
            o, out);
    // Typed: 31 WRITEs staged, the 32nd posted (signaled), which rings once for all.
    measure({"post_batch_32_typed", "hand_batch_32", "ns/post", kBatch * kBatches,
             [&db, &retire] { retire(db); },
             [qp, wrs] {
               for (uint32_t b = 0; b < kBatches; ++b) {
                 for (uint32_t i = 0; i + 1 < kBatch; ++i) {
                   const SendWr& w = (*wrs)[i];
                   if (qp->stage_write(w.wr_id, *w.sg_list, w.remote_addr, w.rkey, 0) != Errc::ok)
                     [[unlikely]]
                     fail("stage_write failed");
                 }
                 const SendWr& last = (*wrs)[kBatch - 1];
                 if (qp->post_write(last.wr_id, *last.sg_list, last.remote_addr, last.rkey,
                                    send_flags::signaled) != Errc::ok) [[unlikely]]
                   fail("post_write failed");
               }
             },
             hand_batch},
            o, out);
  }
}

// ---- The early-post flush ----------------------------------------------------------------------

// The mean of the middle 80 % of the samples: the plain mean would carry preemptions, and a
// median of few samples jumps between neighbouring values.
double trimmed_mean(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t cut = v.size() / 10;
  double sum = 0;
  for (size_t i = cut; i < v.size() - cut; ++i) sum += v[i];
  return sum / static_cast<double>(v.size() - 2 * cut);
}

void flush_cases(const Options& o, std::vector<Record>* out) {
  static const bench::Timer timer;
  SimPair s;
  s.hw_a->pause();
  const uint32_t sizes[] = {1, 64, 4096};
  const int reps = o.smoke ? 2 : 200;
  // One timed sample is a run of flushes of `qps` QPs, each armed with its own batch before the
  // run starts: one flush of a small batch lasts a few ticks of a virtual machine's TSC (which
  // advances in steps of about 10 ns), so timing each alone would measure the clock. The same
  // run length for every N, so that each flush finds its QP's lines as far from the core
  // (the arming of the others came between) whatever N is.
  const uint32_t qps = 8;
  const Sge sge8{s.mr_a->addr(), 8, s.mr_a->lkey()};
  const size_t max_bytes = size_t{4096} * wqe::kBbBytes;

  std::vector<SendWr> wrs(4096);
  for (uint32_t i = 0; i < wrs.size(); ++i) {
    wrs[i].wr_id = i;
    wrs[i].opcode = WrOpcode::rdma_write;
    wrs[i].sg_list = &sge8;
    wrs[i].num_sge = 1;
    wrs[i].remote_addr = s.mr_b->addr();
    wrs[i].rkey = s.mr_b->rkey();
    wrs[i].flags = i % 64 == 63 ? send_flags::signaled : 0;
  }
  hw::QpAttr rts;
  rts.state = hw::QpState::rts;
  rts.sq_psn = 100;
  namespace attr = hw::qp_attr;
  const uint32_t rts_mask = attr::state | attr::sq_psn | attr::timeout | attr::retry_cnt |
                            attr::rnr_retry | attr::max_rd_atomic;
  // The memcpy baseline's buffers: the sizes of a shadow ring and an SQ, page-aligned as the
  // rings are (glibc's memcpy slows down several times for some source-to-destination
  // distances on this machine, so these must not depend on where the heap puts them).
  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  auto page_buffer = [&] {
    void* p = std::aligned_alloc(4096, max_bytes);
    if (!p) fail("out of memory");
    return std::unique_ptr<uint8_t, FreeDeleter>(static_cast<uint8_t*>(p));
  };
  // One pair per QP of a run, as each QP has its own rings.
  std::vector<std::unique_ptr<uint8_t, FreeDeleter>> srcs, dsts;
  for (uint32_t q = 0; q < qps; ++q) {
    srcs.push_back(page_buffer());
    dsts.push_back(page_buffer());
    std::memset(srcs.back().get(), 0, max_bytes);
    std::memset(dsts.back().get(), 0, max_bytes);
  }

  for (EarlyPost strategy : {EarlyPost::in_place, EarlyPost::shadow}) {
    const bool shadow = strategy == EarlyPost::shadow;
    QpConfig config;
    config.threading = Threading::single;
    config.doorbell = doorbell::DoorbellMode::db;
    config.early_post = strategy;
    config.caps.max_send_wr = 4096;
    std::vector<Conn> conns;
    for (uint32_t q = 0; q < qps; ++q) {
      conns.push_back(connect(s, config, 64, true));
      if (conns.back().qp->early_post() != strategy) fail("early-post strategy not granted");
    }
    const std::string kind = shadow ? "shadow" : "in_place";

    double base_one = 0;
    for (uint32_t n : sizes) {
      // One sample: the QP back to RTR with n withheld WRs and its device QP moved to RTS;
      // then the driver's flush (release_withheld_locked, which QpCore::modify calls once the
      // device is in RTS) is timed: the copy of a shadow batch, the DBR, one doorbell, RTS
      // published.
      auto arm = [&](Conn& c) {
        must(c.qp->reset(), "reset");
        must(c.qp->to_init(), "INIT");
        must(c.qp->to_rtr(c.peer->local_endpoint(200), hw::Mtu::mtu1024), "RTR");
        if (c.qp->post_send(std::span<const SendWr>(wrs.data(), n)) != Errc::ok)
          fail("post in RTR failed");
        if (c.qp->withheld() != n) fail("WRs not withheld");
        must(c.qp->core()->hw_qp->modify(rts, rts_mask), "device RTS");
      };
      auto check = [&](Conn& c) {
        const detail::QpCore& core = *c.qp->core();
        if (c.qp->state() != hw::QpState::rts || c.qp->withheld() != 0 ||
            core.doorbell_pi.load() != core.sq_pi)
          fail("flush did not release the batch");
      };
      const size_t bytes = size_t{n} * wqe::kBbBytes;
      // The same memory traffic as `arm`: the reset clears both rings whole, then the posts
      // write the batch into the shadow ring.
      // (The batch is written with ordinary stores, 48 of every 64 bytes as a WRITE WQE's
      // segments are: glibc's memset of a large block may bypass the cache, the encoder's
      // stores do not.)
      auto arm_copy = [&](uint32_t q, int r) {
        uint8_t* src = srcs[q].get();
        std::memset(dsts[q].get(), 0, max_bytes);
        std::memset(src, 0, max_bytes);
        const uint64_t word = 0x0101010101010101ull * static_cast<uint8_t>(r);
        for (size_t b = 0; b < bytes; b += wqe::kBbBytes)
          for (size_t w = 0; w < 48; w += 8) std::memcpy(src + b + w, &word, 8);
        clobber(src);
      };
      const std::string name = "flush_" + kind + "_" + std::to_string(n);
      const std::string base_name = shadow ? "memcpy_" + std::to_string(bytes) : "flush_in_place_1";
      if (o.callgrind) {
        // One uncounted flush and copy first: the first call of a library function also
        // counts the dynamic linker's symbol lookup.
        Conn& c = conns[0];
        arm(c);
        c.qp->core()->release_withheld_locked();
        if (shadow) {
          arm_copy(0, 1);
          std::memcpy(dsts[0].get(), srcs[0].get(), bytes);
          clobber(dsts[0].get());
        }
        arm(c);
        bench::count_begin();
        c.qp->core()->release_withheld_locked();
        bench::count_end(name, 1);
        check(c);
        if (shadow) {
          arm_copy(0, 1);
          bench::count_begin();
          std::memcpy(dsts[0].get(), srcs[0].get(), bytes);
          clobber(dsts[0].get());
          bench::count_end(base_name, 1);
        }
        continue;
      }
      const uint32_t run = qps;
      std::vector<double> drv, base;
      for (int r = 0; r < reps; ++r) {
        for (uint32_t q = 0; q < run; ++q) arm(conns[q]);
        uint64_t t0 = timer.now();
        for (uint32_t q = 0; q < run; ++q) conns[q].qp->core()->release_withheld_locked();
        uint64_t t1 = timer.now();
        drv.push_back(timer.ns(t0, t1) / run);
        for (uint32_t q = 0; q < run; ++q) check(conns[q]);
        if (shadow) {
          for (uint32_t q = 0; q < run; ++q) arm_copy(q, r);
          t0 = timer.now();
          for (uint32_t q = 0; q < run; ++q) {
            std::memcpy(dsts[q].get(), srcs[q].get(), bytes);
            clobber(dsts[q].get());
          }
          t1 = timer.now();
          base.push_back(timer.ns(t0, t1) / run);
        }
      }
      const double value = trimmed_mean(drv);
      if (!shadow && n == 1) base_one = value;
      out->push_back({name, value, "ns/flush", base_name, shadow ? trimmed_mean(base) : base_one});
    }
  }
}

// ---- Completions -------------------------------------------------------------------------------

void poll_cases(const Options& o, std::vector<Record>* out) {
  SimPair s;
  QpConfig config;
  config.threading = Threading::single;
  config.caps.max_send_wr = 64;
  Conn c = connect(s, config, 256, false);
  // Time the driver as on hardware: the device is advanced by the benchmark between
  // repetitions (fabric->step), never from inside poll().
  c.cq->core()->progress = {};
  detail::CqCore& cq = *c.cq->core();
  constexpr int kBatch = 16;

  std::vector<SendWr> wrs(kBatch);
  const Sge sge8{s.mr_a->addr(), 8, s.mr_a->lkey()};
  for (int i = 0; i < kBatch; ++i) {
    wrs[i].wr_id = i;
    wrs[i].opcode = WrOpcode::rdma_write;
    wrs[i].flags = send_flags::signaled;
    wrs[i].sg_list = &sge8;
    wrs[i].num_sge = 1;
    wrs[i].remote_addr = s.mr_b->addr();
    wrs[i].rkey = s.mr_b->rkey();
  }
  // 16 real CQEs from the simulated device, in the ring and not yet consumed. `measure` runs
  // this before the baseline's repetitions too, which read the CQEs without consuming them.
  int pending = 0;
  auto completions = std::make_shared<std::vector<Completion>>(kBatch);
  auto fill = [&] {
    if (pending != 0) {
      if (pending != kBatch) fail("poll consumed " + std::to_string(kBatch - pending) + " of 16");
      return;
    }
    for (const Completion& x : *completions)
      if (x.status != IBV_WC_SUCCESS) fail("completion with an error");
    const uint64_t before = s.hw_a->counters().cqes_written;
    if (c.qp->post_send(wrs) != Errc::ok) fail("post failed");
    if (!s.fabric->run_until([&] { return s.hw_a->counters().cqes_written >= before + kBatch; }))
      fail("the device did not complete the batch");
    pending = kBatch;
  };
  // The baseline: for each CQE, the owner-bit check and a load of one field, by hand.
  auto hand = [&cq] {
    uint32_t ci = cq.ci;
    uint32_t sum = 0;
    for (int i = 0; i < kBatch; ++i, ++ci) {
      const mlx5_cqe64* e = cq.ring.cqe(ci);
      const uint8_t op_own = __atomic_load_n(&e->op_own, __ATOMIC_ACQUIRE);
      if ((op_own >> 4) == MLX5_CQE_INVALID || (op_own & 1) != ((ci & cq.ring.cqe_cnt) ? 1 : 0))
        break;
      sum += be16toh(e->wqe_counter);
    }
    asm volatile("" : : "r"(sum) : "memory");
  };
  CompletionQueue* pcq = &*c.cq;
  measure({"poll_1", "hand_cqe_check_1", "ns/cqe", kBatch, fill,
           [&] {
             for (int i = 0; i < kBatch; ++i) pending -= pcq->poll(completions->data() + i, 1);
           },
           hand},
          o, out);
  measure({"poll_batch_16", "hand_cqe_check_16", "ns/cqe", kBatch, fill,
           [&] { pending -= pcq->poll(completions->data(), kBatch); }, hand},
          o, out);
  // The lean path: each completion to a callable that keeps its wr_id and status, as a
  // consumer that matches completions to requests does.
  auto lean = std::make_shared<std::vector<LeanCompletion>>(kBatch);
  measure({"poll_1_lean", "hand_cqe_check_1", "ns/cqe", kBatch, fill,
           [&] {
             LeanCompletion* out_lean = lean->data();
             for (int i = 0; i < kBatch; ++i)
               pending -= pcq->poll_each(1, [out_lean, i](const LeanCompletion& lc) {
                 out_lean[i].wr_id = lc.wr_id;
                 out_lean[i].status = lc.status;
               });
           },
           hand},
          o, out);
  measure({"poll_batch_16_lean", "hand_cqe_check_16", "ns/cqe", kBatch, fill,
           [&] {
             LeanCompletion* next = lean->data();
             pending -= pcq->poll_each(kBatch, [&next](const LeanCompletion& lc) {
               next->wr_id = lc.wr_id;
               next->status = lc.status;
               ++next;
             });
           },
           hand},
          o, out);
}

// ---- Memory ------------------------------------------------------------------------------------

double heap_bytes() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<double>(m.uordblks + m.hblkhd);
}

// Bytes added between two readings, per object; 0 when the allocator reports nothing (a
// sanitizer's allocator does not fill mallinfo2).
double per_object(double before, double after, int count) {
  return after > before ? (after - before) / count : 0;
}

void memory_cases(const Options& o, std::vector<Record>* out) {
  const int count = o.smoke ? 4 : 32;
  {
    SimPair s;
    std::vector<CompletionQueue> cqs;
    cqs.reserve(count);
    const double before = heap_bytes();
    for (int i = 0; i < count; ++i) cqs.push_back(must(s.a->create_cq(256), "cq"));
    const double per_cq = per_object(before, heap_bytes(), count);
    const double ring = static_cast<double>(cqs[0].entries()) * 64;
    out->push_back({"memory_per_cq_256", per_cq, "bytes", "cqe_ring_bytes", ring});

    QpConfig config;
    config.caps.max_send_wr = 128;
    config.caps.max_recv_wr = 128;
    std::vector<QueuePair> qps;
    qps.reserve(count);
    CompletionQueue& cq = cqs[0];
    const double before_qp = heap_bytes();
    for (int i = 0; i < count; ++i) qps.push_back(must(s.a->create_qp(*s.pd_a, cq, cq, config), "qp"));
    const double per_qp = per_object(before_qp, heap_bytes(), count);
    const detail::QpCore& core = *qps[0].core();
    const double rings =
        static_cast<double>(core.sq.bb_count) * wqe::kBbBytes +
        static_cast<double>(core.rq.wqe_cnt) * core.rq.stride;
    out->push_back({"memory_per_qp_128x128", per_qp, "bytes", "wq_ring_bytes", rings});
  }
  {
    sim::FabricConfig fc;
    fc.mode = sim::ExecMode::deterministic;
    fc.wire = sim::WireKind::inproc;
    auto fabric = must(sim::Fabric::create(fc), "fabric");
    std::vector<Device> devices;
    devices.reserve(count);
    const double before = heap_bytes();
    for (int i = 0; i < count; ++i)
      devices.push_back(must(Device::wrap(must(fabric->add_device(), "device")), "wrap"));
    const double per_dev = per_object(before, heap_bytes(), count);
    out->push_back({"memory_per_device", per_dev, "bytes", "", 0});
  }
}

// ---- Scale: many QPs on one CQ, memory per connected QP ----------------------------------------

// Devices with room for 1024 QPs and the one-QP case beside them.
std::shared_ptr<sim::Device> roomy_device(sim::Fabric& fabric) {
  sim::DeviceConfig dc;
  dc.caps.max_qp = 4096;
  return must(fabric.add_device(dc), "device");
}

// `n` QPs of `a` on `cq`, each connected (RTS) to a QP of `b` on `peer_cq`.
struct QpFarm {
  std::vector<QueuePair> qps, peers;
};

void grow_farm(QpFarm& f, Device& a, Device& b, ProtectionDomain& pd_a, ProtectionDomain& pd_b,
               CompletionQueue& cq, CompletionQueue& peer_cq, uint32_t n) {
  QpConfig config;
  config.threading = Threading::single;
  config.caps.max_send_wr = 16;
  config.caps.max_recv_wr = 16;
  for (uint32_t i = 0; i < n; ++i) {
    f.qps.push_back(must(a.create_qp(pd_a, cq, cq, config), "qp"));
    f.peers.push_back(must(b.create_qp(pd_b, peer_cq, peer_cq, config), "peer qp"));
    QueuePair& q = f.qps.back();
    QueuePair& p = f.peers.back();
    must(q.to_init(), "qp INIT");
    must(p.to_init(), "peer INIT");
    must(q.to_rtr(p.local_endpoint(200), hw::Mtu::mtu1024), "qp RTR");
    must(p.to_rtr(q.local_endpoint(100), hw::Mtu::mtu1024), "peer RTR");
    must(p.to_rts(200), "peer RTS");
    must(q.to_rts(100), "qp RTS");
  }
}

// poll() per CQE when the 16 CQEs of a batch come from 16 different QPs of one CQ shared by 64
// or 1024 QPs (each batch moves on to the next 16, so a 1024-QP run touches every QP's state
// in turn, cold in cache as on a target with many connections), beside the same batch from
// one QP on a CQ of its own, timed alternately in the same run.
void scale_poll_cases(const Options& o, std::vector<Record>* out) {
  static const Timer timer;
  sim::FabricConfig fc;
  fc.mode = sim::ExecMode::deterministic;
  fc.wire = sim::WireKind::inproc;
  auto fabric = must(sim::Fabric::create(fc), "fabric");
  auto hw_a = roomy_device(*fabric), hw_b = roomy_device(*fabric);
  Device a = must(Device::wrap(hw_a), "wrap a"), b = must(Device::wrap(hw_b), "wrap b");
  ProtectionDomain pd_a = must(a.alloc_pd(), "pd a"), pd_b = must(b.alloc_pd(), "pd b");
  std::vector<uint8_t> buf_a(4096), buf_b(4096);
  const uint32_t all = hw::access::local_write | hw::access::remote_write;
  MemoryRegion mr_a = must(pd_a.reg_mr(buf_a.data(), buf_a.size(), all), "mr a");
  MemoryRegion mr_b = must(pd_b.reg_mr(buf_b.data(), buf_b.size(), all), "mr b");
  constexpr int kBatch = 16;
  const Sge sge{mr_a.addr(), 8, mr_a.lkey()};

  struct Side {
    std::optional<CompletionQueue> cq, peer_cq;
    QpFarm farm;
    uint32_t next = 0;  // the first QP of the next batch
  };
  const auto make_side = [&](uint32_t n) {
    auto side = std::make_unique<Side>();
    side->cq.emplace(must(a.create_cq(1024), "cq"));
    side->peer_cq.emplace(must(b.create_cq(1024), "peer cq"));
    side->cq->core()->progress = {};  // advanced by the benchmark, never from poll()
    grow_farm(side->farm, a, b, pd_a, pd_b, *side->cq, *side->peer_cq, n);
    return side;
  };
  // 16 signaled WRITEs: one on each of the next 16 QPs (all on the one QP when there is one),
  // completed by the device, their CQEs waiting in the ring.
  const auto fill = [&](Side& side) {
    const uint64_t before = hw_a->counters().cqes_written;
    const uint32_t n = static_cast<uint32_t>(side.farm.qps.size());
    for (int i = 0; i < kBatch; ++i) {
      QueuePair& q = side.farm.qps[(side.next + static_cast<uint32_t>(i)) % n];
      if (q.post_write(static_cast<uint64_t>(i), sge, mr_b.addr(), mr_b.rkey(),
                       send_flags::signaled) != Errc::ok)
        fail("scale: post failed");
    }
    side.next = (side.next + kBatch) % n;
    if (!fabric->run_until([&] { return hw_a->counters().cqes_written >= before + kBatch; }))
      fail("scale: the device did not complete the batch");
  };
  Completion wc[kBatch];
  const auto poll_all = [&](Side& side) {
    int got = 0;
    while (got < kBatch) got += side.cq->poll(wc + got, kBatch - got);
    for (const Completion& c : wc)
      if (c.status != IBV_WC_SUCCESS) fail("scale: completion with an error");
  };
  auto one = make_side(1);
  for (const uint32_t n : {64u, 1024u}) {
    auto many = make_side(n);
    const int warmup = o.smoke ? 2 : static_cast<int>(n / kBatch) + 50;
    const int reps = o.smoke ? 5 : 401;
    if (o.callgrind) {
      fill(*many);
      count_begin();
      poll_all(*many);
      count_end("poll_cqe_" + std::to_string(n) + "qp", kBatch);
      fill(*one);
      count_begin();
      poll_all(*one);
      count_end("poll_cqe_1qp_for_" + std::to_string(n), kBatch);
      continue;
    }
    std::vector<double> t_many, t_one;
    for (int r = 0; r < warmup + reps; ++r) {
      fill(*many);
      uint64_t t0 = timer.now();
      poll_all(*many);
      uint64_t t1 = timer.now();
      if (r >= warmup) t_many.push_back(timer.ns(t0, t1) / kBatch);
      fill(*one);
      t0 = timer.now();
      poll_all(*one);
      t1 = timer.now();
      if (r >= warmup) t_one.push_back(timer.ns(t0, t1) / kBatch);
    }
    out->push_back({"poll_cqe_" + std::to_string(n) + "qp", median(t_many), "ns/cqe",
                    "poll_cqe_1qp", median(t_one)});
  }
}

// Heap bytes per QP created and connected, for the 1024 QPs of a target with many connections,
// beside the same for the first 32 QPs of a fresh device (what memory_per_qp measures).
// Everything the QP costs in this process counts: the driver's QP and its rings, and the
// simulated device's own state for it (a real device keeps that in its memory instead).
void scale_memory_cases(std::vector<Record>* out) {
  const uint32_t many = 1024, few = 32;
  sim::FabricConfig fc;
  fc.mode = sim::ExecMode::deterministic;
  fc.wire = sim::WireKind::inproc;
  auto fabric = must(sim::Fabric::create(fc), "fabric");
  const auto per_qp = [&](uint32_t n) {
    auto hw_a = roomy_device(*fabric), hw_b = roomy_device(*fabric);
    Device a = must(Device::wrap(hw_a), "wrap a"), b = must(Device::wrap(hw_b), "wrap b");
    ProtectionDomain pd_a = must(a.alloc_pd(), "pd a"), pd_b = must(b.alloc_pd(), "pd b");
    CompletionQueue cq = must(a.create_cq(4096), "cq");
    CompletionQueue peer_cq = must(b.create_cq(4096), "peer cq");
    QpFarm f;
    f.qps.reserve(n);
    f.peers.reserve(n);
    // The peers are made first and not counted: only the measured side's QPs are.
    QpConfig config;
    config.threading = Threading::single;
    config.caps.max_send_wr = 16;
    config.caps.max_recv_wr = 16;
    for (uint32_t i = 0; i < n; ++i)
      f.peers.push_back(must(b.create_qp(pd_b, peer_cq, peer_cq, config), "peer qp"));
    const double before = heap_bytes();
    for (uint32_t i = 0; i < n; ++i) {
      f.qps.push_back(must(a.create_qp(pd_a, cq, cq, config), "qp"));
      QueuePair& q = f.qps.back();
      must(q.to_init(), "qp INIT");
      must(q.to_rtr(f.peers[i].local_endpoint(200), hw::Mtu::mtu1024), "qp RTR");
      must(q.to_rts(100), "qp RTS");
    }
    return per_object(before, heap_bytes(), static_cast<int>(n));
  };
  const double base = per_qp(few);
  const double value = per_qp(many);
  out->push_back({"memory_per_connected_qp_" + std::to_string(many), value, "bytes",
                  "memory_per_connected_qp_" + std::to_string(few), base});
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--smoke") {
      o.smoke = true;
    } else if (arg == "--callgrind") {
      o.callgrind = true;
    } else if (arg.rfind("--only=", 0) == 0) {
      const std::string g = arg.substr(7);
      if (g != "post" && g != "flush" && g != "poll" && g != "memory" && g != "scale")
        fail("--only: unknown group '" + g + "' (post, flush, poll, memory, scale)");
      o.only.insert(g);
    } else {
      fail("unknown option '" + arg + "' (--smoke, --callgrind, --only=GROUP)");
    }
  }
  if (o.callgrind && !bench::under_valgrind())
    fail("--callgrind: run under valgrind --tool=callgrind --collect-atstart=no");
  std::vector<Record> records;
  if (o.wants("post")) post_cases(o, &records);
  if (o.wants("flush")) flush_cases(o, &records);
  if (o.wants("poll")) poll_cases(o, &records);
  if (o.wants("memory") && !o.callgrind) memory_cases(o, &records);
  if (o.wants("scale")) scale_poll_cases(o, &records);
  if (o.wants("scale") && !o.callgrind) scale_memory_cases(&records);
  bench::print_records(records, stdout);
  return 0;
}
