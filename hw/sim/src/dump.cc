// SPDX-License-Identifier: BSD-3-Clause
// A readable state dump of every object of a device (as pib's debugfs files give).
#include <cinttypes>
#include <cstdarg>
#include <cstdio>

#include "hca.h"
#include "rc/queues.h"

namespace rnicdv::sim {

namespace {

[[gnu::format(printf, 2, 3)]] void add(std::string& out, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  out += buf;
}

}  // namespace

std::string Hca::dump() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  const DeviceCounters& c = counters_;
  add(out, "device %s (%s) gid %s profile %s%s\n", info_.name.c_str(), info_.transport.c_str(),
      info_.gid.to_string().c_str(), profile_name(config_.profile).c_str(),
      paused_ ? " PAUSED" : "");
  add(out,
      "  counters: doorbells %" PRIu64 " (bf %" PRIu64 ") sq_dbr_advances %" PRIu64
      " rq_dbr_advances %" PRIu64 " wqes_fetched %" PRIu64 " beyond_dbr %" PRIu64
      " rtr_kept %" PRIu64 " rtr_dropped %" PRIu64 "\n",
      c.uar_doorbells, c.bf_writes, c.sq_dbr_advances, c.rq_dbr_advances, c.wqes_fetched,
      c.wqes_beyond_dbr, c.rtr_doorbells_kept, c.rtr_doorbells_dropped);
  add(out,
      "            packets tx %" PRIu64 " rx %" PRIu64 " bytes tx %" PRIu64 " rx %" PRIu64
      " retransmits %" PRIu64 " timeouts %" PRIu64 " naks tx %" PRIu64 " rx %" PRIu64
      " rnr tx %" PRIu64 " rx %" PRIu64 " dup %" PRIu64 " dropped %" PRIu64 "\n",
      c.packets_tx, c.packets_rx, c.bytes_tx, c.bytes_rx, c.retransmits, c.timeouts, c.naks_tx,
      c.naks_rx, c.rnr_naks_tx, c.rnr_naks_rx, c.duplicates_rx, c.rx_dropped);
  add(out,
      "            cqes %" PRIu64 " error_cqes %" PRIu64 " cq_overflows %" PRIu64
      " comm_est %" PRIu64 " async_events_queued %zu\n",
      c.cqes_written, c.error_cqes, c.cq_overflows, c.comm_est_raised, events_.size());
  if (!port_up())
    add(out, "  port DOWN%s, link_down_drops %" PRIu64 "\n",
        dead() ? " (the device had a fatal error: it runs nothing)" : "",
        c.link_down_drops + raw_link_down_drops_.load(std::memory_order_relaxed));
  std::vector<uint32_t> pds(pds_.begin(), pds_.end());
  std::sort(pds.begin(), pds.end());
  for (uint32_t pdn : pds) add(out, "  pd %u\n", pdn);
  mrs_.for_each([&](uint32_t key, const MrEntry& e) {
    add(out, "  mr key %#x pd %u addr %p len %" PRIu64 " access %#x\n", key, e.pdn,
        static_cast<void*>(e.addr), e.length, e.access);
  });
  for (const auto& cq : cqs_) {
    add(out, "  cq %#x cqe %u x %u pi %u ci %u%s%s qps %u\n", cq->cqn, cq->ring.cqe_cnt,
        cq->ring.cqe_size, cq->pi, cq_consumer_index(*cq), cq->overflowed ? " OVERFLOWED" : "",
        cq->owned_buf ? "" : " external", cq->qp_refs);
  }
  for (const auto& qp : qps_) dump_qp(out, *qp);
  return out;
}

void Hca::dump_qp(std::string& out, const QpObj& qp) const {
  add(out, "  qp %#x %s pd %u scq %#x rcq %#x reg %u%s peer %s qpn %#x mtu %u\n", qp.qpn,
      hw::qp_state_name(qp.state), qp.pdn, qp.send_cq->cqn, qp.recv_cq->cqn,
      qp.reg ? qp.reg->index : 0, qp.reg && qp.reg->shared ? " (shared)" : "",
      qp.remote_ip.to_string().c_str(), qp.attr.dest_qpn, qp.mtu);
  // A QP created without a send queue (max_send_wr 0) shows "sq: none".
  if (!qp.has_sq()) {
    add(out, "    sq: none dbr %u\n", rc::load_sq_dbr(qp));
  } else {
    add(out,
        "    sq: %u BBs dbr %u limit %u consumed %u | wqes head %u send %u tail %u | psn next "
        "%#x comp %#x retry %u rnr %u%s%s\n",
        qp.sq.bb_count, rc::load_sq_dbr(qp), qp.sq_limit & 0xffff, qp.sq_consumed & 0xffff,
        qp.comp.wq_head, qp.req.wq_send, qp.wq_tail, qp.req.next_psn, qp.comp.comp_psn,
        qp.comp.retry_left, qp.comp.rnr_left, qp.rtr_db_kept ? " rtr-doorbell-kept" : "",
        qp.req.rnr_deadline ? " rnr-wait" : "");
  }
  add(out, "    rq: %u x %u B dbr %u consumed %u | epsn %#x msn %u responses queued %zu%s\n",
      qp.rq.wqe_cnt, qp.rq.stride, rc::load_rq_dbr(qp), qp.rq_consumed & 0xffff, qp.resp.epsn, qp.resp.msn,
      qp.resp.resp_queue.size(), qp.resp.comm_est_raised ? " comm-est" : "");
  const QpCounters& k = qp.counters;
  add(out,
      "    counters: doorbells %" PRIu64 " sq_dbr_advances %" PRIu64 " executed %" PRIu64
      " tx %" PRIu64 " rx %" PRIu64 " retransmits %" PRIu64 " timeouts %" PRIu64 " rnr rx %" PRIu64
      " dup %" PRIu64 " dropped %" PRIu64 "\n",
      k.uar_doorbells, k.sq_dbr_advances, k.wqes_executed, k.packets_tx, k.packets_rx,
      k.retransmits, k.timeouts, k.rnr_naks_rx, k.duplicates_rx, k.rx_dropped);
}

}  // namespace rnicdv::sim
