// SPDX-License-Identifier: BSD-3-Clause
// rnicdv-bench-driver's post group: each post beside its stores written by hand.
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

#include "rnicdv/detail/qp_core.h"
#include "rnicdv/doorbell/barrier.h"
#include "rnicdv/doorbell/mmio.h"
#include "bench_driver.h"

using namespace rnicdv;
using namespace rnicdv::bench;

namespace {

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

constexpr uint32_t kOps = 64;  // posts per repetition; the SQ is retired between repetitions

}  // namespace

namespace rnicdv::bench {

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
  // A UC QP posting the same WRITEs: what the transport's checks cost (docs/driver.md,
  // "Unreliable connections").
  QpConfig uc_config;
  uc_config.threading = Threading::single;
  uc_config.doorbell = doorbell::DoorbellMode::db;
  uc_config.caps.max_send_wr = 1024;
  uc_config.caps.max_send_sge = 1;
  uc_config.type = hw::QpType::uc;
  Conn uc = connect(s, uc_config, 1024, false);
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
    single("post_write_uc", "hand_write_1sge", wr, uc, hand_write);
    single_with("post_write_uc_typed", "hand_write_1sge", wr, uc,
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

}  // namespace rnicdv::bench

