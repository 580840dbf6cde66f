// SPDX-License-Identifier: BSD-3-Clause
// Completion channels and CQs: CREATE_COMP_CHANNEL, CREATE_CQ and DESTROY_CQ. libmlx5 owns
// the CQ ring and its doorbell record; they are handed to the simulated HCA as external
// memory, and an armed CQ's events go to its channel.
#include <errno.h>
#include <string.h>

#include <infiniband/verbs.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/mlx5-abi.h>

#include <algorithm>

#include "command.h"
#include "handles.h"
#include "shim.h"

namespace rnicdv::uverbs {

// ---- completion channels and CQs ----
int create_comp_channel(Cmd& c) {
  std::shared_ptr<EventFile> ch = EventFile::create(sizeof(ib_uverbs_comp_event_desc));
  if (!ch) return c.error(errno, "completion channel: eventfd: %s", strerror(errno));
  register_event_file(ch);
  c.ctx.channels.push_back(ch);
  ib_uverbs_create_comp_channel_resp r{};
  r.fd = static_cast<uint32_t>(ch->fd());
  if (int rc = c.reply(&r, sizeof r); rc != 0) {
    // The application never learns the descriptor: it is closed again.
    c.ctx.channels.pop_back();
    event_discard(ch->fd());
    return rc;
  }
  return 0;
}

int create_cq(Cmd& c) {
  Context& ctx = c.ctx;
  const auto req = c.core_as<ib_uverbs_create_cq>();
  const auto m = c.drv_as<mlx5_ib_create_cq>();
  const uint64_t entries = uint64_t{req.cqe} + 1;
  if (req.cqe == 0 || (entries & (entries - 1)) != 0)
    return c.error(EINVAL, "CQ of cqe %u: the ring (cqe + 1 entries) must be a power of two",
                   req.cqe);
  if (req.comp_vector != 0)
    return c.error(EINVAL, "CQ of cqe %u: completion vector %u (only 0)", req.cqe, req.comp_vector);
  if (m.cqe_comp_en) return c.error(EOPNOTSUPP, "CQ of cqe %u: CQE compression", req.cqe);
  if (m.uar_page_index >= ctx.static_pages)
    return c.error(EINVAL, "CQ of cqe %u: UAR page %u of %u", req.cqe, m.uar_page_index,
                   ctx.static_pages);
  if (!ctx.uar_pages[m.uar_page_index]) adopt_unseen_uar_mappings_locked(ctx);
  std::shared_ptr<EventFile> channel;
  if (req.comp_channel >= 0) {
    channel = event_file(req.comp_channel);
    if (!channel ||
        std::find(ctx.channels.begin(), ctx.channels.end(), channel) == ctx.channels.end())
      return c.error(EINVAL, "CQ of cqe %u: fd %d is not a completion channel of this context",
                     req.cqe, req.comp_channel);
  }
  if (!user_range_ok(m.buf_addr, entries * m.cqe_size, true) || !user_range_ok(m.db_addr, 8, true))
    return c.error(EFAULT,
                   "CQ of cqe %u: ring %#llx (%llu bytes) or doorbell record %#llx is not writable",
                   req.cqe, static_cast<unsigned long long>(m.buf_addr),
                   static_cast<unsigned long long>(entries * m.cqe_size),
                   static_cast<unsigned long long>(m.db_addr));
  sim::ExternalCqMemory mem;
  mem.buf = reinterpret_cast<uint8_t*>(m.buf_addr);
  mem.cqe_cnt = static_cast<uint32_t>(entries);
  mem.cqe_size = m.cqe_size;
  mem.dbrec = reinterpret_cast<uint32_t*>(m.db_addr);
  mem.cq_uar = ctx.uar_pages[m.uar_page_index];
  Result<std::unique_ptr<hw::Cq>> cq = sim::create_cq_external(*ctx.dev->dev, mem);
  if (!cq) return sim_error(c, "CQ of cqe " + std::to_string(req.cqe), cq.status());

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
      return sim_error(c, "CQ of cqe " + std::to_string(req.cqe), st);
    }
  }
  ib_uverbs_create_cq_resp r{};
  r.cq_handle = h;
  r.cqe = req.cqe;
  mlx5_ib_create_cq_resp mr{};
  mr.cqn = obj.cq->view().dv.cqn;
  if (int rc = c.reply(&r, sizeof r, &mr, sizeof mr); rc != 0) {
    // Never announced: no event of it can be queued yet.
    if (channel) (void)sim::set_cq_event_handler(*obj.cq, {});
    ctx.cqs.erase(h);
    return rc;
  }
  return 0;
}

int destroy_cq(Cmd& c) {
  Context& ctx = c.ctx;
  const auto req = c.core_as<ib_uverbs_destroy_cq>();
  auto it = ctx.cqs.find(req.cq_handle);
  if (it == ctx.cqs.end()) return c.error(EINVAL, "CQ handle %u: no such CQ", req.cq_handle);
  CqObject& obj = it->second;
  if (obj.users)
    return c.error(EBUSY, "CQ handle %u: still used by %u QPs", req.cq_handle, obj.users);
  if (obj.channel) {
    (void)sim::set_cq_event_handler(*obj.cq, {});
    obj.channel->purge(obj.key);
  }
  if (ctx.async) ctx.async->purge(obj.key);
  ib_uverbs_destroy_cq_resp r{};
  r.comp_events_reported = obj.comp_read->load();
  r.async_events_reported = obj.async_read->load();
  ctx.cqs.erase(it);
  return c.reply(&r, sizeof r);
}

}  // namespace rnicdv::uverbs
